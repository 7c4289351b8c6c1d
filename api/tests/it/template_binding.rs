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
