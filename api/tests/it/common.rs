//! Helpers shared by the integration tests.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize};

/// One generated key pair per test binary. 2048 bits only to keep the tests fast: do not copy
/// this size into anything real (Bitnami and kseal default to 4096).
pub fn pair() -> &'static KeyPair {
    static PAIR: OnceLock<KeyPair> = OnceLock::new();
    PAIR.get_or_init(|| {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("keygen")
    })
}

/// A second, unrelated test key (2048 bits, test only).
pub fn other_pair() -> &'static KeyPair {
    static PAIR: OnceLock<KeyPair> = OnceLock::new();
    PAIR.get_or_init(|| {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("keygen")
    })
}

pub fn ring() -> KeyRing {
    [pair().clone()].into_iter().collect()
}

pub fn secret(namespace: Option<&str>, name: &str, data: &[(&str, &[u8])]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespace.map(str::to_owned),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

pub fn data_of(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// Bitnami's interop folder (`shared/interop`), where it sits beside the checkout. A clean
/// clone has no such folder: its tests are then recorded as skipped (also under `CI=true`),
/// and kseal's own vectors (`keys/tests/vectors`) still run.
pub fn shared_interop(file: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/interop")
        .join(file);
    if path.exists() {
        return Some(path);
    }
    skipped(&format!(
        "SKIPPED: Bitnami's interop file {} is not beside the checkout",
        path.display()
    ));
    None
}

pub fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A vector file's key (published, test-only) and the parsed file.
fn vector_set(path: &std::path::Path) -> (KeyPair, serde_json::Value) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).expect("parse the vector file");
    let key = &json["key"];
    let pair = KeyPair::from_pem(
        key["private_key_pkcs1_pem"].as_str().expect("pkcs1 pem"),
        key["certificate_pem"].as_str().expect("certificate pem"),
    )
    .expect("vector key pair");
    assert_eq!(
        pair.id().as_str(),
        key["ssh_fingerprint_sha256"].as_str().expect("fingerprint")
    );
    (pair, json)
}

/// Bitnami's set-a (sealed by its own `HybridEncrypt`; the kubeseal fixtures here were sealed
/// to its key), where the shared folder is beside the checkout.
pub fn interop_set_a() -> Option<(KeyPair, serde_json::Value)> {
    shared_interop("set-a.json").map(|path| vector_set(&path))
}

/// Every interop vector set: kseal's own (Go's standard library, always in the repository),
/// then Bitnami's set-a where available.
pub fn interop_sets() -> Vec<(KeyPair, serde_json::Value)> {
    let own =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../keys/tests/vectors/go-stdlib.json");
    let mut sets = vec![vector_set(&own)];
    sets.extend(interop_set_a());
    sets
}

/// Prints `message` and, when `KSEAL_SKIP_LOG` names a file (scripts/test.sh sets it), appends
/// it there, so the run's summary counts a skip rather than a pass (as
/// `kseal_testkit::skipped`, which this crate cannot depend on).
pub fn skipped(message: &str) {
    use std::io::Write as _;
    eprintln!("{message}");
    if let Some(path) = std::env::var_os("KSEAL_SKIP_LOG").filter(|p| !p.is_empty()) {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(format!("{test}\t{}\n", message.replace('\n', " ")).as_bytes());
        }
    }
}
