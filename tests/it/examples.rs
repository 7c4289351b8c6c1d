//! The SealedSecrets of the fleet bootstrap examples (`deploy/examples/fleet`) are real: sealed
//! by `kseal create` / `kseal seal` for the test-only key of `fixtures/keys`, they open with
//! it into the Secrets their consumers read (Crossplane's ProviderConfig, Flux's
//! GitRepository, an application). `deploy/check.sh` dry-runs them against the CRD;
//! `deploy/examples/fleet/check.py` checks that the consumers name these Secrets and keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kseal_api::{SealedSecret, unseal};

use crate::fixture_ring;

fn fleet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/fleet")
}

/// The SealedSecret in FILE (relative to `deploy/examples/fleet`), opened with the test key:
/// its items as text.
fn open(file: &str) -> (SealedSecret, BTreeMap<String, String>) {
    let path = fleet().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let sealed: SealedSecret =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let secret = unseal(&sealed, &fixture_ring()).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(secret.metadata.name, sealed.metadata.name, "{file}");
    assert_eq!(
        secret.metadata.namespace, sealed.metadata.namespace,
        "{file}"
    );
    let items = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).expect("UTF-8 item")))
        .collect();
    (sealed, items)
}

#[test]
fn crossplane_credentials_open_into_an_aws_credentials_file() {
    let (_, items) = open("crossplane/provider-config/sealedsecret.yaml");
    assert_eq!(items.keys().collect::<Vec<_>>(), ["credentials"]);
    let ini = &items["credentials"];
    assert!(ini.starts_with("[default]\n"), "{ini:?}");
    assert!(ini.contains("aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"));
    assert!(ini.contains("aws_secret_access_key = "));
}

#[test]
fn flux_git_credentials_open_into_an_ssh_secret() {
    let (_, items) = open("flux/clusters/workload-1/git-credentials/sealedsecret.yaml");
    assert_eq!(
        items.keys().collect::<Vec<_>>(),
        ["identity", "identity.pub", "known_hosts"]
    );
    assert!(items["identity"].starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
    assert!(items["identity.pub"].starts_with("ssh-ed25519 "));
    assert!(
        items["identity.pub"]
            .trim_end()
            .ends_with(" flux-workload-1")
    );
    assert!(items["known_hosts"].starts_with("github.com ssh-ed25519 "));
}

#[test]
fn application_secret_opens() {
    let (sealed, items) = open("apps/workload-1/sealedsecret.yaml");
    assert_eq!(sealed.scope(), kseal_api::Scope::Strict);
    assert_eq!(items["username"], "app");
    assert!(items.contains_key("password"));
}
