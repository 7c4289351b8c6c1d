//! `seal_secret` and `unseal` against each other, following Bitnami's rules.

use std::collections::BTreeMap;

use crate::common::{data_of, other_pair, pair, ring, secret};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference, Time};
use kseal_api::constants::{
    CLUSTER_WIDE_ANNOTATION, KUBECFG_LAST_APPLIED_ANNOTATION, KUBECTL_LAST_APPLIED_ANNOTATION,
    NAMESPACE_WIDE_ANNOTATION, SEALING_KEY_ANNOTATION, SKIP_SET_OWNER_REFERENCES_ANNOTATION,
};
use kseal_api::{
    Error, Scope, SealOptions, SealedSecret, UnsealOptions, seal_secret, unseal, unseal_with,
};
use kseal_keys::{KeyRing, OpenStats};

fn seal(secret: &Secret, options: &SealOptions) -> SealedSecret {
    seal_secret(secret, pair().public_key(), options).expect("seal")
}

fn scoped(scope: Scope) -> SealOptions {
    SealOptions {
        scope,
        ..SealOptions::default()
    }
}

fn moved(sealed: &SealedSecret, namespace: &str, name: &str) -> SealedSecret {
    let mut moved = sealed.clone();
    moved.metadata.namespace = Some(namespace.to_owned());
    moved.metadata.name = Some(name.to_owned());
    moved
}

fn decrypt_failure(result: Result<Secret, Error>) -> Vec<String> {
    match result {
        Err(Error::Decrypt { items, source, .. }) => {
            assert_eq!(source, kseal_keys::Error::Open);
            items
        }
        Err(other) => panic!("expected a decrypt error, got {other}"),
        Ok(_) => panic!("expected a decrypt error, got a secret"),
    }
}

#[test]
fn every_scope_round_trips() {
    let input = secret(
        Some("prod"),
        "db",
        &[("user", b"admin"), ("password", b"s3cr3t")],
    );
    for scope in Scope::ALL {
        let sealed = seal(&input, &scoped(scope));
        assert_eq!(sealed.scope(), scope);
        let out = unseal(&sealed, &ring()).expect("unseal");
        assert_eq!(out.metadata.name.as_deref(), Some("db"));
        assert_eq!(out.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(data_of(&out), data_of(&input), "{scope}");
    }
}

#[test]
fn scope_annotation_on_the_input_secret_selects_the_scope() {
    for (annotation, scope) in [
        (NAMESPACE_WIDE_ANNOTATION, Scope::Namespace),
        (CLUSTER_WIDE_ANNOTATION, Scope::Cluster),
    ] {
        let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
        input.metadata.annotations = Some([(annotation.to_owned(), "true".to_owned())].into());
        let sealed = seal(&input, &SealOptions::default());
        assert_eq!(sealed.scope(), scope);
        let template_annotations = sealed
            .spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .expect("template annotations");
        assert_eq!(template_annotations[annotation], "true");
        assert!(unseal(&sealed, &ring()).is_ok());
    }
}

#[test]
fn explicit_strict_scope_does_not_override_annotations_like_kubeseal() {
    let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
    input.metadata.annotations = Some([(CLUSTER_WIDE_ANNOTATION.to_owned(), "true".into())].into());
    let sealed = seal(&input, &scoped(Scope::Strict));
    assert_eq!(sealed.scope(), Scope::Cluster);
}

#[test]
fn scope_option_rewrites_the_scope_annotations() {
    let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
    input.metadata.annotations = Some([(CLUSTER_WIDE_ANNOTATION.to_owned(), "true".into())].into());
    let sealed = seal(&input, &scoped(Scope::Namespace));
    assert_eq!(sealed.scope(), Scope::Namespace);
    let template = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref());
    let annotations = template
        .and_then(|m| m.annotations.as_ref())
        .expect("annotations");
    assert!(!annotations.contains_key(CLUSTER_WIDE_ANNOTATION));
    assert_eq!(annotations[NAMESPACE_WIDE_ANNOTATION], "true");
}

#[test]
fn top_level_metadata_holds_only_identity_scope_and_sealing_key() {
    let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
    input.metadata.labels = Some([("app".to_owned(), "db".to_owned())].into());
    input.metadata.annotations = Some([("note".to_owned(), "x".to_owned())].into());
    let sealed = seal(&input, &scoped(Scope::Cluster));
    let meta = &sealed.metadata;
    assert_eq!(meta.name.as_deref(), Some("db"));
    assert_eq!(meta.namespace.as_deref(), Some("prod"));
    assert_eq!(meta.labels, None);
    let expected: BTreeMap<String, String> = [
        (CLUSTER_WIDE_ANNOTATION.to_owned(), "true".to_owned()),
        (SEALING_KEY_ANNOTATION.to_owned(), pair().id().to_string()),
    ]
    .into();
    assert_eq!(meta.annotations.as_ref(), Some(&expected));
    assert_eq!(sealed.sealing_key_hint().as_ref(), Some(pair().id()));
    let template = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref());
    assert_eq!(
        template.and_then(|m| m.labels.clone()),
        input.metadata.labels
    );
}

#[test]
fn strict_scope_rejects_renamed_object() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    assert_eq!(
        decrypt_failure(unseal(&moved(&sealed, "prod", "other"), &ring())),
        ["k"]
    );
}

#[test]
fn strict_scope_rejects_moved_object() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    assert_eq!(
        decrypt_failure(unseal(&moved(&sealed, "dev", "db"), &ring())),
        ["k"]
    );
}

#[test]
fn namespace_wide_scope_allows_rename_within_namespace_only() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &scoped(Scope::Namespace),
    );
    let renamed = unseal(&moved(&sealed, "prod", "other"), &ring()).expect("renamed");
    assert_eq!(renamed.metadata.name.as_deref(), Some("other"));
    assert_eq!(data_of(&renamed)["k"], b"v");
    assert_eq!(
        decrypt_failure(unseal(&moved(&sealed, "dev", "db"), &ring())),
        ["k"]
    );
}

#[test]
fn cluster_wide_scope_opens_anywhere() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &scoped(Scope::Cluster),
    );
    let out = unseal(&moved(&sealed, "elsewhere", "renamed"), &ring()).expect("moved");
    assert_eq!(out.metadata.namespace.as_deref(), Some("elsewhere"));
    assert_eq!(out.metadata.name.as_deref(), Some("renamed"));
    assert_eq!(data_of(&out)["k"], b"v");
}

#[test]
fn scope_comes_from_top_level_metadata_not_the_template() {
    // Sealed cluster-wide, then the top-level annotation is removed: the template still says
    // cluster-wide, but the controller must use the strict label and fail.
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &scoped(Scope::Cluster),
    );
    let mut narrowed = sealed.clone();
    narrowed.metadata.annotations = None;
    assert_eq!(decrypt_failure(unseal(&narrowed, &ring())), ["k"]);

    // Sealed strict; a template claiming cluster-wide must not widen the scope.
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    let template_meta = sealed
        .spec
        .template
        .as_mut()
        .and_then(|t| t.metadata.as_mut())
        .expect("template");
    template_meta.annotations = Some([(CLUSTER_WIDE_ANNOTATION.to_owned(), "true".into())].into());
    assert_eq!(sealed.scope(), Scope::Strict);
    assert_eq!(
        decrypt_failure(unseal(&moved(&sealed, "dev", "x"), &ring())),
        ["k"]
    );
}

#[test]
fn owner_reference_points_at_the_sealed_secret() {
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    sealed.metadata.uid = Some("1234-uid".into());
    let out = unseal(&sealed, &ring()).expect("unseal");
    let expected = OwnerReference {
        api_version: "bitnami.com/v1alpha1".into(),
        kind: "SealedSecret".into(),
        name: "db".into(),
        uid: "1234-uid".into(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    assert_eq!(out.metadata.owner_references, Some(vec![expected]));
}

#[test]
fn template_owner_references_are_replaced() {
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    sealed.metadata.uid = Some("uid-1".into());
    let foreign = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "x".into(),
        uid: "uid-x".into(),
        ..OwnerReference::default()
    };
    if let Some(meta) = sealed
        .spec
        .template
        .as_mut()
        .and_then(|t| t.metadata.as_mut())
    {
        meta.owner_references = Some(vec![foreign]);
    }
    let out = unseal(&sealed, &ring()).expect("unseal");
    let refs = out.metadata.owner_references.expect("owner refs");
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, "uid-1");
}

#[test]
fn skip_set_owner_references_annotation_leaves_no_owner() {
    let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
    input.metadata.annotations = Some(
        [(
            SKIP_SET_OWNER_REFERENCES_ANNOTATION.to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    let mut sealed = seal(&input, &SealOptions::default());
    sealed.metadata.uid = Some("uid-1".into());
    let out = unseal(&sealed, &ring()).expect("unseal");
    assert_eq!(out.metadata.owner_references, None);
}

#[test]
fn sealed_secret_without_uid_gets_no_owner_reference() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    assert_eq!(sealed.metadata.uid, None);
    let out = unseal(&sealed, &ring()).expect("unseal");
    assert_eq!(out.metadata.owner_references, None);
}

#[test]
fn sealing_strips_server_fields_last_applied_and_owner_references() {
    let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
    let meta = &mut input.metadata;
    meta.uid = Some("uid".into());
    meta.resource_version = Some("42".into());
    meta.generation = Some(3);
    meta.creation_timestamp = Some(Time("2024-01-01T00:00:00Z".parse().expect("time")));
    meta.deletion_timestamp = Some(Time("2024-01-02T00:00:00Z".parse().expect("time")));
    meta.deletion_grace_period_seconds = Some(30);
    meta.self_link = Some("/api/v1/namespaces/prod/secrets/db".into());
    meta.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
    meta.owner_references = Some(vec![OwnerReference::default()]);
    meta.annotations = Some(
        [
            (
                KUBECTL_LAST_APPLIED_ANNOTATION.to_owned(),
                "{\"data\":\"plain\"}".to_owned(),
            ),
            (KUBECFG_LAST_APPLIED_ANNOTATION.to_owned(), "{}".to_owned()),
            ("keep".to_owned(), "me".to_owned()),
        ]
        .into(),
    );
    meta.labels = Some([("app".to_owned(), "db".to_owned())].into());
    meta.finalizers = Some(vec!["example.com/f".into()]);
    input.type_ = Some("kubernetes.io/basic-auth".into());
    input.immutable = Some(true);

    let sealed = seal(&input, &SealOptions::default());
    let template = sealed.spec.template.as_ref().expect("template");
    assert_eq!(template.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(template.immutable, Some(true));
    let t = template.metadata.as_ref().expect("template metadata");
    assert_eq!(t.uid, None);
    assert_eq!(t.resource_version, None);
    assert_eq!(t.generation, None);
    assert_eq!(t.creation_timestamp, None);
    assert_eq!(t.deletion_timestamp, None);
    assert_eq!(t.deletion_grace_period_seconds, None);
    assert_eq!(t.self_link, None);
    assert_eq!(t.managed_fields, None);
    assert_eq!(t.owner_references, None);
    let expected: BTreeMap<String, String> = [("keep".to_owned(), "me".to_owned())].into();
    assert_eq!(t.annotations.as_ref(), Some(&expected));
    assert_eq!(t.labels, input.metadata.labels);
    assert_eq!(t.finalizers, input.metadata.finalizers);
    assert_eq!(t.name.as_deref(), Some("db"));
    assert_eq!(t.namespace.as_deref(), Some("prod"));

    let out = unseal(&sealed, &ring()).expect("unseal");
    assert_eq!(out.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(out.immutable, Some(true));
    assert_eq!(out.metadata.labels, input.metadata.labels);
    assert_eq!(out.metadata.annotations.as_ref(), Some(&expected));
    assert_eq!(out.metadata.finalizers, input.metadata.finalizers);
}

#[test]
fn last_applied_only_annotations_leave_no_empty_map() {
    let mut input = secret(Some("prod"), "db", &[("k", b"v")]);
    input.metadata.annotations =
        Some([(KUBECTL_LAST_APPLIED_ANNOTATION.to_owned(), "{}".to_owned())].into());
    let sealed = seal(&input, &SealOptions::default());
    let t = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref());
    assert_eq!(t.and_then(|m| m.annotations.as_ref()), None);
}

#[test]
fn string_data_wins_over_data() {
    let mut input = secret(
        Some("prod"),
        "db",
        &[("both", b"from-data"), ("only-data", b"d")],
    );
    input.string_data = Some(
        [
            ("both".to_owned(), "from-string-data".to_owned()),
            ("only-string".to_owned(), "s".to_owned()),
        ]
        .into(),
    );
    let sealed = seal(&input, &SealOptions::default());
    let out = data_of(&unseal(&sealed, &ring()).expect("unseal"));
    assert_eq!(out["both"], b"from-string-data");
    assert_eq!(out["only-data"], b"d");
    assert_eq!(out["only-string"], b"s");
    assert_eq!(out.len(), 3);
}

#[test]
fn empty_data_is_an_error_unless_allowed() {
    let input = secret(Some("prod"), "db", &[]);
    let err = seal_secret(&input, pair().public_key(), &SealOptions::default()).unwrap_err();
    assert_eq!(err, Error::EmptyData { name: "db".into() });

    let options = SealOptions {
        allow_empty_data: true,
        ..SealOptions::default()
    };
    let sealed = seal(&input, &options);
    assert!(sealed.spec.encrypted_data.is_empty());
    let out = unseal(&sealed, &ring()).expect("unseal");
    assert_eq!(out.data, Some(BTreeMap::new()));
}

#[test]
fn namespace_mismatch_names_both_namespaces() {
    let input = secret(Some("prod"), "db", &[("k", b"v")]);
    let options = SealOptions {
        namespace: Some("dev".into()),
        ..SealOptions::default()
    };
    let err = seal_secret(&input, pair().public_key(), &options).unwrap_err();
    assert_eq!(
        err,
        Error::NamespaceMismatch {
            secret: "prod".into(),
            requested: "dev".into()
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`prod`") && message.contains("`dev`"),
        "{message}"
    );

    // Same namespace requested explicitly: fine.
    let same = SealOptions {
        namespace: Some("prod".into()),
        ..SealOptions::default()
    };
    assert!(seal_secret(&input, pair().public_key(), &same).is_ok());
}

#[test]
fn cluster_wide_keeps_the_input_namespace_despite_a_requested_one() {
    let input = secret(Some("prod"), "db", &[("k", b"v")]);
    let options = SealOptions {
        namespace: Some("dev".into()),
        scope: Scope::Cluster,
        ..SealOptions::default()
    };
    let sealed = seal(&input, &options);
    assert_eq!(sealed.metadata.namespace.as_deref(), Some("prod"));
}

#[test]
fn namespace_and_name_can_come_from_options() {
    let input = secret(None, "db", &[("k", b"v")]);
    let err = seal_secret(&input, pair().public_key(), &SealOptions::default()).unwrap_err();
    assert_eq!(err, Error::MissingNamespace { name: "db".into() });

    let options = SealOptions {
        name: Some("renamed".into()),
        namespace: Some("dev".into()),
        default_namespace: Some("ignored".into()),
        ..SealOptions::default()
    };
    let sealed = seal(&input, &options);
    assert_eq!(sealed.metadata.name.as_deref(), Some("renamed"));
    assert_eq!(sealed.metadata.namespace.as_deref(), Some("dev"));
    let t = sealed
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref());
    assert_eq!(t.and_then(|m| m.name.as_deref()), Some("renamed"));
    let out = unseal(&sealed, &ring()).expect("unseal");
    assert_eq!(data_of(&out)["k"], b"v");

    let defaulted = SealOptions {
        default_namespace: Some("default".into()),
        ..SealOptions::default()
    };
    let sealed = seal(&input, &defaulted);
    assert_eq!(sealed.metadata.namespace.as_deref(), Some("default"));

    // Cluster-wide needs no namespace at all.
    let sealed = seal(&input, &scoped(Scope::Cluster));
    assert_eq!(sealed.metadata.namespace, None);
}

#[test]
fn a_name_is_required() {
    let mut input = secret(Some("prod"), "", &[("k", b"v")]);
    let err = seal_secret(&input, pair().public_key(), &SealOptions::default()).unwrap_err();
    assert_eq!(err, Error::MissingName);
    input.metadata.name = None;
    let err = seal_secret(&input, pair().public_key(), &scoped(Scope::Cluster)).unwrap_err();
    assert_eq!(err, Error::MissingName);

    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    sealed.metadata.name = None;
    assert_eq!(unseal(&sealed, &ring()).unwrap_err(), Error::MissingName);
}

#[test]
fn sealing_is_randomized() {
    let input = secret(Some("prod"), "db", &[("k", b"v")]);
    let a = seal(&input, &SealOptions::default());
    let b = seal(&input, &SealOptions::default());
    assert_ne!(a.spec.encrypted_data["k"], b.spec.encrypted_data["k"]);
}

#[test]
fn failing_items_are_all_named_sorted_without_secret_material() {
    let good = seal(
        &secret(Some("prod"), "db", &[("b-good", b"fine")]),
        &SealOptions::default(),
    );
    let elsewhere = seal(
        &secret(
            Some("prod"),
            "other",
            &[("c-bad", b"TOPSECRET-1"), ("a-bad", b"TOPSECRET-2")],
        ),
        &SealOptions::default(),
    );
    let mut mixed = good.clone();
    mixed
        .spec
        .encrypted_data
        .extend(elsewhere.spec.encrypted_data);
    let err = unseal(&mixed, &ring()).unwrap_err();
    assert_eq!(
        err,
        Error::Decrypt {
            items: vec!["a-bad".into(), "c-bad".into()],
            tried: kseal_api::ScopeTarget::new(Scope::Strict, "prod", "db"),
            hint: Some(Box::new(kseal_api::HintNote {
                key: pair().id().clone(),
                held: true
            })),
            source: kseal_keys::Error::Open
        }
    );
    let shown = format!("{err} {err:?}");
    assert_no_leak(&shown, b"TOPSECRET");
    assert!(!shown.contains("fine"), "{shown}");
    assert!(
        err.to_string()
            .starts_with("failed to decrypt items `a-bad`, `c-bad` (tried strict scope \"prod/db\"); its kseal.dev/sealing-key annotation names key SHA256:"),
        "{err}"
    );
}

#[test]
fn decrypt_failures_name_the_scope_and_label_tried() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("a", b"TOPSECRET")]),
        &SealOptions::default(),
    );
    let err = unseal(&moved(&sealed, "prod", "renamed"), &ring()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to decrypt items `a` (tried strict scope \"prod/renamed\");"),
        "{err}"
    );
    let wide = seal(
        &secret(Some("prod"), "db", &[("a", b"TOPSECRET")]),
        &scoped(Scope::Namespace),
    );
    let err = unseal(&moved(&wide, "dev", "db"), &ring()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to decrypt items `a` (tried namespace-wide scope \"dev\");"),
        "{err}"
    );
    let cluster = seal(
        &secret(Some("prod"), "db", &[("a", b"TOPSECRET")]),
        &scoped(Scope::Cluster),
    );
    let other: KeyRing = [other_pair().clone()].into_iter().collect();
    let err = unseal(&cluster, &other).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to decrypt items `a` (tried cluster-wide scope);"),
        "{err}"
    );
    let deprecated = deprecated_v1("prod", "db");
    let err = unseal(&moved(&deprecated, "prod", "other"), &ring()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to decrypt deprecated field 'data' (tried strict scope \"prod/other\")"
    );
}

#[test]
fn a_wrong_key_fails_like_a_wrong_name() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    let other: KeyRing = [other_pair().clone()].into_iter().collect();
    assert_eq!(decrypt_failure(unseal(&sealed, &other)), ["k"]);
    assert_eq!(unseal(&sealed, &KeyRing::new()).unwrap_err(), Error::NoKeys);
}

#[test]
fn bad_base64_names_the_item() {
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    sealed
        .spec
        .encrypted_data
        .insert("broken".into(), "not base64!".into());
    let err = unseal(&sealed, &ring()).unwrap_err();
    assert_eq!(
        err,
        Error::MalformedItem {
            item: "broken".into(),
            source: kseal_keys::Error::Base64
        }
    );
    assert_eq!(
        err.to_string(),
        "encryptedData item `broken` is not a valid sealed value"
    );

    sealed
        .spec
        .encrypted_data
        .insert("broken".into(), "AQA=".into());
    let err = unseal(&sealed, &ring()).unwrap_err();
    assert!(matches!(
        err,
        Error::MalformedItem { ref item, source: kseal_keys::Error::Truncated { .. } } if item == "broken"
    ));
}

fn with_template_data(sealed: &mut SealedSecret, entries: &[(&str, Option<&str>)]) {
    if let Some(t) = sealed.spec.template.as_mut() {
        t.data = Some(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
                .collect(),
        );
    }
}

#[test]
fn template_data_renders_over_the_decrypted_items() {
    let mut sealed = seal(
        &secret(
            Some("prod"),
            "db",
            &[("user", b"admin"), ("pass", b"p<w>"), ("old", b"x")],
        ),
        &SealOptions::default(),
    );
    with_template_data(
        &mut sealed,
        &[
            (
                "config.json",
                Some(r#"{"user": {{ toJson .user }}, "pass": {{ toJson .pass }}}"#),
            ),
            // A rendered key replaces the decrypted item of the same name.
            ("user", Some("{{ .user | upper }}")),
            // A null template removes the item of that name (Bitnami deletes it).
            ("old", None),
            ("empty", Some("")),
        ],
    );
    let data = data_of(&unseal(&sealed, &ring()).expect("unseal"));
    assert_eq!(
        data,
        BTreeMap::from([
            (
                "config.json".to_owned(),
                br#"{"user": "admin", "pass": "p\u003cw\u003e"}"#.to_vec()
            ),
            ("empty".to_owned(), Vec::new()),
            ("pass".to_owned(), b"p<w>".to_vec()),
            ("user".to_owned(), b"ADMIN".to_vec()),
        ])
    );
    // An empty map renders nothing and is fine.
    with_template_data(&mut sealed, &[]);
    assert_eq!(data_of(&unseal(&sealed, &ring()).expect("unseal")).len(), 3);
}

#[test]
fn template_data_errors_fail_the_unseal_naming_every_key() {
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    with_template_data(
        &mut sealed,
        &[
            ("z.json", Some("{{ randAlphaNum 8 }}")),
            ("a", Some("{{ index (list) 0 }}")),
            ("fine", Some("{{ .k }}")),
        ],
    );
    let err = unseal(&sealed, &ring()).unwrap_err();
    let Error::TemplateData { errors } = &err else {
        panic!("expected a template error, got {err}");
    };
    assert_eq!(errors.len(), 2);
    assert_eq!(
        err.to_string(),
        "failed to render spec.template.data: \
         template `a`: line 1, column 4: error calling index: index out of range: 0; \
         template `z.json`: line 1, column 4: function \"randAlphaNum\" is not supported by \
         kseal: its result is not deterministic, so the Secret would change on every reconcile"
    );
}

#[test]
fn template_data_is_ignored_when_rendering_is_off() {
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    with_template_data(&mut sealed, &[("k", None), ("bad", Some("{{ nope }}"))]);
    let options = UnsealOptions {
        render_template_data: false,
        ..UnsealOptions::default()
    };
    let unsealed = unseal_with(&sealed, &ring(), &options).expect("unseal");
    assert_eq!(
        data_of(&unsealed.secret),
        BTreeMap::from([("k".to_owned(), b"v".to_vec())])
    );
}

/// Builds a v1 SealedSecret: the whole Secret as JSON, sealed as one value in `spec.data`.
fn deprecated_v1(namespace: &str, name: &str) -> SealedSecret {
    let mut inner = secret(Some(namespace), name, &[("k", b"v1-value")]);
    inner.metadata.labels = Some([("legacy".to_owned(), "yes".to_owned())].into());
    inner.string_data = Some([("s".to_owned(), "from-string-data".to_owned())].into());
    let json = serde_json::to_vec(&inner).expect("json");
    let label = Scope::Strict.label(namespace, name);
    let blob = kseal_keys::seal_base64(pair().public_key(), &label, &json).expect("seal");
    let mut sealed = seal(
        &secret(Some(namespace), name, &[]),
        &SealOptions {
            allow_empty_data: true,
            ..SealOptions::default()
        },
    );
    sealed.spec.data = Some(blob);
    sealed.spec.template = None;
    sealed
}

#[test]
fn deprecated_v1_data_is_accepted_by_default() {
    let mut sealed = deprecated_v1("prod", "db");
    sealed.metadata.uid = Some("uid-1".into());
    let unsealed = unseal_with(&sealed, &ring(), &UnsealOptions::default()).expect("unseal");
    let out = &unsealed.secret;
    assert_eq!(data_of(out)["k"], b"v1-value");
    assert_eq!(data_of(out)["s"], b"from-string-data");
    assert_eq!(out.string_data, None);
    assert_eq!(
        out.metadata.labels.as_ref().map(|l| l["legacy"].as_str()),
        Some("yes")
    );
    assert_eq!(
        out.metadata.owner_references.as_ref().map(Vec::len),
        Some(1)
    );
    assert_eq!(unsealed.deprecated_data_key.as_ref(), Some(pair().id()));
    assert_eq!(unsealed.rsa_operations, 1);

    // Same scope rules as items.
    assert!(matches!(
        unseal(&moved(&sealed, "prod", "other"), &ring()),
        Err(Error::DecryptDeprecatedData {
            source: kseal_keys::Error::Open,
            ..
        })
    ));
}

#[test]
fn deprecated_v1_data_is_rejected_when_not_accepted() {
    let sealed = deprecated_v1("prod", "db");
    let options = UnsealOptions {
        accept_deprecated_v1_data: false,
        ..UnsealOptions::default()
    };
    let err = unseal_with(&sealed, &ring(), &options).unwrap_err();
    assert_eq!(err, Error::DeprecatedDataRejected);
    assert!(err.to_string().contains("deprecated 'data' field"));
}

#[test]
fn deprecated_v1_data_and_encrypted_data_together_are_an_error() {
    let mut sealed = deprecated_v1("prod", "db");
    sealed.spec.encrypted_data.insert("x".into(), "AQA=".into());
    assert_eq!(unseal(&sealed, &ring()).unwrap_err(), Error::BothDataFields);
}

#[test]
fn deprecated_v1_data_that_is_not_a_secret_is_rejected_without_quoting_it() {
    let label = Scope::Strict.label("prod", "db");
    let blob =
        kseal_keys::seal_base64(pair().public_key(), &label, b"TOPSECRET not json").expect("seal");
    let mut sealed = deprecated_v1("prod", "db");
    sealed.spec.data = Some(blob);
    let err = unseal(&sealed, &ring()).unwrap_err();
    assert_eq!(err, Error::DeprecatedDataNotASecret);
    assert_no_leak(&format!("{err} {err:?}"), b"TOPSECRET");
}

#[test]
fn sealing_key_annotation_makes_each_item_one_rsa_operation() {
    // The ring's newest key (tried first without a hint) is not the one that sealed.
    let old = pair()
        .clone()
        .with_order_time(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1));
    let ring: KeyRing = [old, other_pair().clone()].into_iter().collect();
    assert_eq!(ring.sealing_key().map(|k| k.id()), Some(other_pair().id()));

    let sealed = seal(
        &secret(Some("prod"), "db", &[("a", b"1"), ("b", b"2"), ("c", b"3")]),
        &SealOptions::default(),
    );
    let hinted = unseal_with(&sealed, &ring, &UnsealOptions::default()).expect("unseal");
    assert_eq!(hinted.rsa_operations, 3);
    assert!(hinted.keys.values().all(|k| k == pair().id()));
    assert_eq!(hinted.keys.len(), 3);

    // Whether the other key spends an RSA operation on an item before the right key opens it
    // (it is ruled out for free when the item's RSA block is not below its modulus).
    let tried = |item: &str| {
        let bytes =
            kseal_keys::envelope::decode_base64(&sealed.spec.encrypted_data[item]).expect("base64");
        u64::from(other_pair().public_key().may_have_sealed(&bytes))
    };
    let no_hint = UnsealOptions {
        use_annotation_hint: false,
        ..UnsealOptions::default()
    };
    // Without a hint only the first item tries the other key: the key that opened it goes
    // first for the items after it.
    let unhinted = unseal_with(&sealed, &ring, &no_hint).expect("unseal");
    assert_eq!(unhinted.rsa_operations, 3 + tried("a"));
    assert!(unhinted.keys.values().all(|k| k == pair().id()));

    // Item hints win over the annotation; a wrong hint costs one extra attempt per item.
    let wrong = UnsealOptions {
        item_hints: [("a".to_owned(), other_pair().id().clone())].into(),
        ..UnsealOptions::default()
    };
    assert_eq!(
        unseal_with(&sealed, &ring, &wrong)
            .expect("unseal")
            .rsa_operations,
        3 + tried("a")
    );

    // Failures still count: every key tried, except those ruled out.
    let mut stats = OpenStats::default();
    let result =
        kseal_api::unseal_counted(&moved(&sealed, "prod", "x"), &ring, &no_hint, &mut stats);
    assert!(result.is_err());
    assert_eq!(
        stats.rsa_operations,
        3 + tried("a") + tried("b") + tried("c")
    );
    assert_eq!(stats.rsa_operations + stats.keys_ruled_out, 6);
}

#[test]
fn preferred_keys_make_unhinted_items_one_rsa_operation_each() {
    // A ring whose sealing key (tried first by default) did not seal the value.
    let old = pair()
        .clone()
        .with_order_time(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1));
    let ring: KeyRing = [old, other_pair().clone()].into_iter().collect();
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("a", b"1"), ("b", b"2"), ("c", b"3")]),
        &SealOptions::default(),
    );
    // As kubeseal or an older kseal writes it: no sealing-key annotation.
    if let Some(annotations) = sealed.metadata.annotations.as_mut() {
        annotations.remove(SEALING_KEY_ANNOTATION);
    }
    assert!(sealed.sealing_key_hint().is_none());
    let right = UnsealOptions {
        preferred_keys: vec![pair().id().clone()],
        ..UnsealOptions::default()
    };
    let unsealed = unseal_with(&sealed, &ring, &right).expect("unseal");
    assert_eq!(unsealed.rsa_operations, 3);
    assert_eq!(data_of(&unsealed.secret)["b"], b"2");

    // A wrong preference costs the first item one attempt at most (the other key may be
    // ruled out by the public checks); the items after it try the key that opened it.
    let wrong = UnsealOptions {
        preferred_keys: vec![other_pair().id().clone()],
        ..UnsealOptions::default()
    };
    let bytes =
        kseal_keys::envelope::decode_base64(&sealed.spec.encrypted_data["a"]).expect("base64");
    let first_tried = u64::from(other_pair().public_key().may_have_sealed(&bytes));
    let mut stats = OpenStats::default();
    let unsealed = kseal_api::unseal_counted(&sealed, &ring, &wrong, &mut stats).expect("unseal");
    assert_eq!(unsealed.rsa_operations, 3 + first_tried);
    assert_eq!(stats.rsa_operations + stats.keys_ruled_out, 4);

    // The hint still comes first: a right item hint beats a wrong preference.
    let hinted = UnsealOptions {
        item_hints: [("a".to_owned(), pair().id().clone())].into(),
        preferred_keys: vec![other_pair().id().clone()],
        ..UnsealOptions::default()
    };
    let unsealed = unseal_with(&sealed, &ring, &hinted).expect("unseal");
    assert_eq!(unsealed.rsa_operations, 3);
}

/// Guesses from outside the object serve its first item that opens and are dropped after:
/// an object whose items were sealed with several keys pays each guess once, not per item.
#[test]
fn guesses_are_tried_until_the_first_item_opens_only() {
    let at = |secs| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let guess = kseal_keys::KeyPair::generate(
        kseal_keys::KeySize::Rsa2048,
        &kseal_keys::CertificateOptions::default(),
    )
    .expect("key")
    .with_order_time(at(1));
    // The newer key seals (and is tried first in the ring's own order); the guess is wrong
    // for every item.
    let older = pair().clone().with_order_time(at(2));
    let ring: KeyRing = [older, other_pair().clone(), guess.clone()]
        .into_iter()
        .collect();
    let fits = |key: &kseal_keys::KeyPair, sealed: &SealedSecret, item: &str| {
        let bytes =
            kseal_keys::envelope::decode_base64(&sealed.spec.encrypted_data[item]).expect("base64");
        u64::from(key.public_key().may_have_sealed(&bytes))
    };
    // Item "a" sealed with the older key, "b" with the newer one; sealed again until the
    // public checks cannot rule the guess out for "b", so that trying it again would show.
    let sealed = (0..64)
        .map(|_| {
            let mut sealed = seal(
                &secret(Some("prod"), "db", &[("a", b"1")]),
                &SealOptions::default(),
            );
            let newer = seal_secret(
                &secret(Some("prod"), "db", &[("b", b"2")]),
                other_pair().public_key(),
                &SealOptions::default(),
            )
            .expect("seal");
            sealed.spec.encrypted_data.extend(newer.spec.encrypted_data);
            if let Some(annotations) = sealed.metadata.annotations.as_mut() {
                annotations.remove(SEALING_KEY_ANNOTATION);
            }
            sealed
        })
        .find(|sealed| fits(&guess, sealed, "b") == 1)
        .expect("a block below the guess's modulus within 64 tries");
    let options = UnsealOptions {
        guesses: vec![guess.id().clone()],
        ..UnsealOptions::default()
    };
    let unsealed = unseal_with(&sealed, &ring, &options).expect("unseal");
    // "a": the guess, the sealing key, then the older key opens it. "b": the older key
    // (which opened "a"), then the sealing key opens it; the guess is not tried again.
    assert_eq!(
        unsealed.rsa_operations,
        fits(&guess, &sealed, "a")
            + fits(other_pair(), &sealed, "a")
            + 1
            + fits(pair(), &sealed, "b")
            + 1
    );
    assert_eq!(data_of(&unsealed.secret)["b"], b"2");
    // The same preference, not marked as a guess, stays in the order for "b" too.
    let kept = UnsealOptions {
        preferred_keys: vec![guess.id().clone()],
        ..UnsealOptions::default()
    };
    let again = unseal_with(&sealed, &ring, &kept).expect("unseal");
    assert_eq!(again.rsa_operations, unsealed.rsa_operations + 1);

    // Guesses are dropped once, at the first open: a right guess that opened an item stays
    // in the order for the items after a second key's. The older key is now the ring's
    // oldest, tried last in its own order; items "a" and "c" sealed with it, "b" with the
    // sealing key, and both keys guessed.
    let oldest = pair().clone().with_order_time(at(0));
    let ring: KeyRing = [oldest, other_pair().clone(), guess.clone()]
        .into_iter()
        .collect();
    let mut mixed = sealed.clone();
    let third = seal(
        &secret(Some("prod"), "db", &[("c", b"3")]),
        &SealOptions::default(),
    );
    mixed.spec.encrypted_data.extend(third.spec.encrypted_data);
    let both = UnsealOptions {
        guesses: vec![pair().id().clone(), other_pair().id().clone()],
        ..UnsealOptions::default()
    };
    let unsealed = unseal_with(&mixed, &ring, &both).expect("unseal");
    // "a": the older key opens it. "b": the older key, then the sealing key. "c": the
    // sealing key (which opened "b"), then the older key: never the third key.
    assert_eq!(
        unsealed.rsa_operations,
        1 + fits(pair(), &mixed, "b") + 1 + fits(other_pair(), &mixed, "c") + 1
    );
    assert_eq!(data_of(&unsealed.secret)["c"], b"3");

    // A guess that is also a preference keeps its early place until the first item opens,
    // then stands where the preferences put it: here after the third key, so "b" (sealed
    // with the sealing key) tries the older key (which opened "a"), the third key, then the
    // sealing key.
    let also = UnsealOptions {
        preferred_keys: vec![guess.id().clone(), other_pair().id().clone()],
        guesses: vec![other_pair().id().clone()],
        ..UnsealOptions::default()
    };
    let unsealed = unseal_with(&mixed, &ring, &also).expect("unseal");
    // "a": the sealing key (guessed first), the third key, then the older key opens it.
    // "b": the older key, the third key, then the sealing key. "c": the sealing key, then
    // the older key.
    assert_eq!(
        unsealed.rsa_operations,
        fits(other_pair(), &mixed, "a")
            + fits(&guess, &mixed, "a")
            + 1
            + fits(pair(), &mixed, "b")
            + fits(&guess, &mixed, "b")
            + 1
            + fits(other_pair(), &mixed, "c")
            + 1
    );
}

#[test]
fn unsealed_debug_never_shows_data() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("password", b"TOPSECRET")]),
        &SealOptions::default(),
    );
    let unsealed = unseal_with(&sealed, &ring(), &UnsealOptions::default()).expect("unseal");
    let shown = format!("{unsealed:?}");
    assert!(shown.contains("password"), "{shown}");
    assert_no_leak(&shown, b"TOPSECRET");
    // The check itself can fail: a Debug of the raw bytes (ByteString prints them as numbers)
    // is caught too.
    let raw = format!("{:?}", ByteString(b"TOPSECRET".to_vec()));
    assert!(
        std::panic::catch_unwind(|| assert_no_leak(&raw, b"TOPSECRET")).is_err(),
        "assert_no_leak missed {raw}"
    );
    let bytes = &unsealed.secret.data.as_ref().expect("data")["password"];
    assert_eq!(bytes, &ByteString(b"TOPSECRET".to_vec()));
}

#[test]
fn sealed_output_survives_a_yaml_round_trip() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    let yaml = serde_saphyr::to_string(&sealed).expect("yaml");
    assert!(yaml.starts_with("apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\n"));
    let back: SealedSecret = serde_saphyr::from_str(&yaml).expect("parse");
    assert_eq!(back, sealed);
    assert_eq!(data_of(&unseal(&back, &ring()).expect("unseal"))["k"], b"v");
}

#[test]
fn missing_namespace_fails_unless_cluster_wide() {
    let mut sealed = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &SealOptions::default(),
    );
    sealed.metadata.namespace = None;
    assert_eq!(
        unseal(&sealed, &ring()).unwrap_err(),
        Error::MissingNamespace { name: "db".into() }
    );
    let mut cluster = seal(
        &secret(Some("prod"), "db", &[("k", b"v")]),
        &scoped(Scope::Cluster),
    );
    cluster.metadata.namespace = None;
    let out = unseal(&cluster, &ring()).expect("unseal");
    assert_eq!(out.metadata.namespace, None);
}

/// Fails when `shown` holds `secret` in any form a `Debug` or `Display` could print it: as
/// text, as a list of byte values (`ByteString`'s and `Vec<u8>`'s `Debug`), in hex or base64.
fn assert_no_leak(shown: &str, secret: &[u8]) {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(secret).into_owned();
    let numbers = secret
        .iter()
        .map(u8::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
    let compact: String = shown.chars().filter(|c| !c.is_whitespace()).collect();
    for form in [text, hex, b64] {
        assert!(
            !shown.contains(&form),
            "the secret shows as {form:?} in {shown}"
        );
    }
    assert!(
        !compact.contains(&numbers),
        "the secret shows as bytes ({numbers}) in {shown}"
    );
}

#[test]
fn a_failed_unseal_names_the_key_its_hint_points_to() {
    let sealed = seal(
        &secret(Some("prod"), "db", &[("password", b"TOPSECRET-9")]),
        &SealOptions::default(),
    );
    let hinted = pair().id().to_string();
    // The ring lacks that key: say so, and which key to look for.
    let other: KeyRing = [other_pair().clone()].into_iter().collect();
    let err = unseal(&sealed, &other).unwrap_err();
    assert!(
        matches!(&err, Error::Decrypt { hint: Some(h), .. } if !h.held && h.key.to_string() == hinted),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "failed to decrypt items `password` (tried strict scope \"prod/db\"); its \
             kseal.dev/sealing-key annotation names key {hinted}, which this key ring does not hold"
        )
    );
    // The ring holds it: then the value was sealed for another object, or altered.
    let err = unseal(&moved(&sealed, "prod", "other"), &ring()).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.ends_with(&format!(
            "names key {hinted}, which this key ring holds: sealed for another name, namespace \
             or scope, or altered"
        )),
        "{shown}"
    );
    assert_no_leak(&format!("{err} {err:?}"), b"TOPSECRET");
}
