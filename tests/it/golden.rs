//! Golden SealedSecrets sealed by kseal from `fixtures/secret.yaml` keep unsealing to the same
//! Secret. They were made with:
//!
//! ```sh
//! kseal seal --cert keys/tls.crt -f secret.yaml -o yaml > sealed-secret.strict.golden.yaml
//! kseal seal --cert keys/tls.crt -f secret.yaml -o json --scope cluster-wide \
//!     > sealed-secret.cluster-wide.golden.json
//! kseal seal --cert keys/tls.crt -f secret.yaml --scope namespace-wide \
//!     > sealed-secret.namespace-wide.golden.yaml
//! ```

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kseal_api::{Scope, SealedSecret, unseal};

use crate::{fixture_ring, read_fixture};

fn load(name: &str) -> SealedSecret {
    let text = read_fixture(name);
    if name.ends_with(".json") {
        serde_json::from_str(&text).expect("golden JSON")
    } else {
        serde_saphyr::from_str(&text).expect("golden YAML")
    }
}

fn expected_data() -> BTreeMap<String, ByteString> {
    [
        ("username", "git"),
        ("password", "golden-password"),
        (
            "known_hosts",
            "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect()
}

#[test]
fn golden_sealed_secrets_unseal_to_the_input() {
    let ring = fixture_ring();
    for (name, scope) in [
        ("sealed-secret.strict.golden.yaml", Scope::Strict),
        ("sealed-secret.namespace-wide.golden.yaml", Scope::Namespace),
        ("sealed-secret.cluster-wide.golden.json", Scope::Cluster),
    ] {
        let sealed = load(name);
        assert_eq!(sealed.scope(), scope, "{name}");
        let secret = unseal(&sealed, &ring).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(secret.data.as_ref(), Some(&expected_data()), "{name}");
        assert_eq!(secret.metadata.name.as_deref(), Some("git-credentials"));
        assert_eq!(secret.metadata.namespace.as_deref(), Some("flux-system"));
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        let labels = secret.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels["app.kubernetes.io/part-of"], "flux");
        let annotations = secret.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(annotations["team"], "platform");
        // The last-applied annotation (which held plaintext) was stripped at sealing time.
        assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        // Server fields of the input never travel.
        assert!(secret.metadata.uid.is_none() && secret.metadata.resource_version.is_none());
    }
}

#[test]
fn golden_files_hold_no_plaintext() {
    for name in [
        "sealed-secret.strict.golden.yaml",
        "sealed-secret.namespace-wide.golden.yaml",
        "sealed-secret.cluster-wide.golden.json",
    ] {
        let text = read_fixture(name);
        for secret in ["golden-password", "leaked", "Z2l0", "github.com ssh"] {
            assert!(!text.contains(secret), "{name} contains {secret}");
        }
    }
}

#[test]
fn a_moved_strict_golden_fails_and_a_moved_cluster_wide_one_opens() {
    let ring = fixture_ring();
    let mut strict = load("sealed-secret.strict.golden.yaml");
    strict.metadata.namespace = Some("other".into());
    let err = unseal(&strict, &ring).unwrap_err();
    assert!(err.to_string().contains("failed to decrypt"), "{err}");

    let mut wide = load("sealed-secret.cluster-wide.golden.json");
    wide.metadata.namespace = Some("other".into());
    wide.metadata.name = Some("renamed".into());
    let secret = unseal(&wide, &ring).expect("cluster-wide opens anywhere");
    assert_eq!(secret.metadata.namespace.as_deref(), Some("other"));
    assert_eq!(secret.metadata.name.as_deref(), Some("renamed"));
}
