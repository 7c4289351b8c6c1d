//! Helpers shared by the keys integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::OnceLock;

use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use serde::Deserialize;

/// The interop vector file produced by Bitnami's own sealing code (see shared/interop).
#[derive(Debug, Deserialize)]
pub struct VectorFile {
    pub set: String,
    pub key: VectorKey,
    pub vectors: Vec<Vector>,
}

#[derive(Debug, Deserialize)]
pub struct VectorKey {
    pub bits: usize,
    pub private_key_pkcs1_pem: String,
    pub private_key_pkcs8_pem: String,
    pub public_key_spki_pem: String,
    pub certificate_pem: String,
    pub ssh_fingerprint_sha256: String,
    pub modulus_sha256_hex: String,
}

#[derive(Debug, Deserialize)]
pub struct Vector {
    pub id: String,
    pub scope: String,
    pub namespace: String,
    pub name: String,
    pub label_b64: String,
    pub expect: String,
    pub plaintext_b64: Option<String>,
    pub plaintext_sha256_hex: Option<String>,
    pub sealed_b64: String,
}

/// The interop vector sets: kseal's own (`keys/tests/vectors/go-stdlib.json`, made by Go's
/// standard library with `keys/tests/vectors/gen`; always there), then Bitnami's own
/// (`shared/interop/set-a.json`) where the shared folder sits beside the checkout. Without it
/// that set is recorded as skipped, also under `CI=true`: a clean clone has the first set.
pub fn interop_sets() -> Vec<VectorFile> {
    let own = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/go-stdlib.json");
    let text = std::fs::read_to_string(&own).unwrap_or_else(|e| panic!("{}: {e}", own.display()));
    let mut sets = vec![serde_json::from_str(&text).expect("go-stdlib.json parses")];
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/interop/set-a.json");
    match std::fs::read_to_string(&shared) {
        Ok(text) => sets.push(serde_json::from_str(&text).expect("set-a.json parses")),
        Err(e) => skipped(&format!(
            "SKIPPED: Bitnami's interop set {} ({e}); kseal's own set ran",
            shared.display()
        )),
    }
    sets
}

pub fn b64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("valid base64 in fixture")
}

/// One 2048-bit key pair per test binary. Test-only key size for speed: do not copy.
pub fn test_pair() -> &'static KeyPair {
    static PAIR: OnceLock<KeyPair> = OnceLock::new();
    PAIR.get_or_init(|| {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("keygen")
    })
}

/// A second, different 2048-bit pair. Test-only key size: do not copy.
pub fn other_pair() -> &'static KeyPair {
    static PAIR: OnceLock<KeyPair> = OnceLock::new();
    PAIR.get_or_init(|| {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("keygen")
    })
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
