//! Template binding (issue 35): a bound SealedSecret opens only with the template it was
//! sealed with, and every edit of the template (or of its binding annotation) fails the same
//! way, whatever the template would have computed from the values.

use std::collections::BTreeMap;

use crate::common::{data_of, pair, ring, secret};
use kseal_api::constants::{TEMPLATE_BINDING_ANNOTATION, TEMPLATE_BINDING_V1};
use kseal_api::{
    Error, Scope, SealOptions, SealedSecret, TEMPLATE_BINDING_MISMATCH, seal_secret, unseal,
};

fn bound(scope: Scope) -> SealedSecret {
    let mut s = secret(
        Some("prod"),
        "db",
        &[("password", b"Hunter2"), ("user", b"admin")],
    );
    s.metadata.labels = Some(BTreeMap::from([("app".to_owned(), "db".to_owned())]));
    let options = SealOptions {
        scope,
        bind_template: true,
        ..SealOptions::default()
    };
    seal_secret(&s, pair().public_key(), &options).expect("seal")
}

fn with_template_data(sealed: &SealedSecret, source: Option<&str>) -> SealedSecret {
    let mut edited = sealed.clone();
    edited
        .spec
        .template
        .get_or_insert_with(Default::default)
        .data = Some(BTreeMap::from([(
        "out".to_owned(),
        source.map(str::to_owned),
    )]));
    edited
}

#[test]
fn a_bound_object_opens_with_its_own_template_in_every_scope() {
    for scope in Scope::ALL {
        let sealed = bound(scope);
        let annotations = sealed.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get(TEMPLATE_BINDING_ANNOTATION)
                .map(String::as_str),
            Some(TEMPLATE_BINDING_V1)
        );
        // Through YAML, as through git: key order and layout change, the digest does not.
        let text = serde_saphyr::to_string(&sealed).expect("yaml");
        let read: SealedSecret = serde_saphyr::from_str(&text).expect("parse back");
        let secret = unseal(&read, &ring()).expect("unseal");
        assert_eq!(data_of(&secret)["password"], b"Hunter2");
        assert_eq!(
            secret
                .metadata
                .labels
                .unwrap_or_default()
                .get("app")
                .map(String::as_str),
            Some("db")
        );
    }
}

/// The attacker's position: may edit `spec.template` (a contributor, SealedSecret update)
/// and reads the outcome. Every guess, right or wrong, gives the same error.
#[test]
fn template_edits_whose_outcome_differs_by_a_guess_all_fail_the_same_way() {
    let sealed = bound(Scope::Strict);
    let guesses = [
        Some(r#"{{ if eq .password "Hunter2" }}yes{{ else }}{{ fail "no" }}{{ end }}"#),
        Some(r#"{{ if eq .password "wrong" }}yes{{ else }}{{ fail "no" }}{{ end }}"#),
        Some(r#"{{ if hasPrefix "H" .password }}{{ fail "H" }}{{ end }}"#),
        Some(r#"{{ index (list 1 2 3 4 5 6 7) (len .password) }}"#),
        Some("{{ .password }}"),
        None,
    ];
    let mut messages = Vec::new();
    for guess in guesses {
        let err = unseal(&with_template_data(&sealed, guess), &ring()).unwrap_err();
        assert!(matches!(err, Error::TemplateBinding { .. }), "{err:?}");
        assert!(!err.depends_on_values());
        messages.push(err.to_string());
    }
    // A metadata-only edit (a label) fails the same way.
    let mut relabeled = sealed.clone();
    let meta = relabeled
        .spec
        .template
        .as_mut()
        .and_then(|t| t.metadata.as_mut())
        .unwrap();
    meta.labels = Some(BTreeMap::from([("app".to_owned(), "other".to_owned())]));
    messages.push(unseal(&relabeled, &ring()).unwrap_err().to_string());
    let first = &messages[0];
    assert!(first.starts_with(TEMPLATE_BINDING_MISMATCH), "{first}");
    assert!(first.contains("bound to spec.template"), "{first}");
    for m in &messages {
        assert_eq!(m, first);
        assert!(!m.contains("Hunter2") && !m.contains("line"), "{m}");
    }
}

#[test]
fn removing_or_adding_the_binding_annotation_makes_the_object_refuse_to_open() {
    let sealed = bound(Scope::Namespace);
    let mut stripped = sealed.clone();
    stripped
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(TEMPLATE_BINDING_ANNOTATION);
    assert!(matches!(
        unseal(&stripped, &ring()).unwrap_err(),
        Error::Decrypt { .. }
    ));

    let unbound = seal_secret(
        &secret(Some("prod"), "db", &[("password", b"Hunter2")]),
        pair().public_key(),
        &SealOptions::default(),
    )
    .unwrap();
    let mut marked = unbound.clone();
    marked
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            TEMPLATE_BINDING_ANNOTATION.into(),
            TEMPLATE_BINDING_V1.into(),
        );
    assert!(matches!(
        unseal(&marked, &ring()).unwrap_err(),
        Error::TemplateBinding { .. }
    ));
    let mut unknown = sealed.clone();
    unknown
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(TEMPLATE_BINDING_ANNOTATION.into(), "v2".into());
    assert!(matches!(
        unseal(&unknown, &ring()).unwrap_err(),
        Error::UnknownTemplateBinding { .. }
    ));
}

#[test]
fn a_bound_object_cannot_be_renamed_or_moved() {
    let sealed = bound(Scope::Strict);
    let mut renamed = sealed.clone();
    renamed.metadata.name = Some("other".into());
    // Its template still says `db`: the name comes from the top-level metadata only.
    assert!(matches!(
        unseal(&renamed, &ring()).unwrap_err(),
        Error::TemplateBinding { .. }
    ));
}

/// The attacker's position: may update SealedSecrets, cannot open anything. Moving a value's
/// ciphertext to another item of a bound object (`token` into `.dockerconfigjson`, so that the
/// API server's validation of that key would describe the value) fails to open, with the
/// fixed message; nothing is rendered and nothing of the value shows.
#[test]
fn a_bound_value_moved_to_another_item_does_not_open() {
    let mut s = secret(
        Some("prod"),
        "pull",
        &[
            ("token", b"1234-secret-token"),
            (".dockerconfigjson", br#"{"auths":{}}"#),
        ],
    );
    s.type_ = Some("kubernetes.io/dockerconfigjson".into());
    for scope in Scope::ALL {
        let options = SealOptions {
            scope,
            bind_template: true,
            ..SealOptions::default()
        };
        let sealed = seal_secret(&s, pair().public_key(), &options).expect("seal");
        assert_eq!(
            data_of(&unseal(&sealed, &ring()).expect("unseal"))["token"],
            b"1234-secret-token"
        );
        let items = &sealed.spec.encrypted_data;

        let mut moved = sealed.clone();
        moved
            .spec
            .encrypted_data
            .insert(".dockerconfigjson".into(), items["token"].clone());
        let err = unseal(&moved, &ring()).unwrap_err();
        let Error::TemplateBinding { items: failed, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(failed, &[".dockerconfigjson".to_owned()]);
        let message = err.to_string();
        assert!(message.starts_with(TEMPLATE_BINDING_MISMATCH), "{message}");
        assert!(!message.contains("1234") && !message.contains("secret-token"));

        // Swapped, or copied under a new name: every moved value fails, the same way.
        let mut swapped = sealed.clone();
        swapped.spec.encrypted_data = BTreeMap::from([
            ("token".to_owned(), items[".dockerconfigjson"].clone()),
            (".dockerconfigjson".to_owned(), items["token"].clone()),
        ]);
        let err = unseal(&swapped, &ring()).unwrap_err();
        assert!(
            matches!(&err, Error::TemplateBinding { items, .. } if items.len() == 2),
            "{err:?}"
        );
        let mut copied = sealed.clone();
        copied
            .spec
            .encrypted_data
            .insert("token2".into(), items["token"].clone());
        let err = unseal(&copied, &ring()).unwrap_err();
        assert!(
            matches!(&err, Error::TemplateBinding { items, .. } if items == &["token2".to_owned()]),
            "{err:?}"
        );
    }
}

/// Unbound objects keep Bitnami's one label for every item (wire compatibility): there a
/// moved value still opens, which is why the binding covers item names.
#[test]
fn unbound_items_share_one_label_and_bound_ones_do_not() {
    let s = secret(Some("prod"), "db", &[("a", b"one"), ("b", b"two")]);
    let unbound = seal_secret(&s, pair().public_key(), &SealOptions::default()).unwrap();
    let mut swapped = unbound.clone();
    let items = &unbound.spec.encrypted_data;
    swapped.spec.encrypted_data = BTreeMap::from([
        ("a".to_owned(), items["b"].clone()),
        ("b".to_owned(), items["a"].clone()),
    ]);
    let opened = data_of(&unseal(&swapped, &ring()).unwrap());
    assert_eq!(opened["a"], b"two");

    let (labels, _) = kseal_api::items_label(&unbound, "prod", "db").unwrap();
    assert!(!labels.is_bound());
    assert_eq!(labels.item("a"), labels.item("b"));
    assert_eq!(labels.item("a"), Scope::Strict.label("prod", "db"));

    let bound = bound(Scope::Strict);
    let (labels, tried) = kseal_api::items_label(&bound, "prod", "db").unwrap();
    assert!(labels.is_bound() && tried.template_bound);
    assert_ne!(labels.item("password"), labels.item("user"));
    // Each item opens with its own label, and only with it.
    let value =
        |item: &str| kseal_keys::envelope::decode_base64(&bound.spec.encrypted_data[item]).unwrap();
    let keys = ring();
    let opened = keys
        .open(&labels.item("password"), &value("password"), None)
        .expect("own label");
    assert_eq!(opened.plaintext.expose(), b"Hunter2");
    assert!(
        keys.open(&labels.item("user"), &value("password"), None)
            .is_err()
    );
    assert!(keys.open(labels.whole(), &value("password"), None).is_err());
}
