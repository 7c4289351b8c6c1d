//! kseal integration tests: one binary, as in uv and ripgrep.

mod ci;
mod examples;
mod fleet;
mod fleet_ack;
mod fleet_rings;
mod fleet_rotate;
mod golden;
mod names;
mod round_trip;
mod runbook;

use std::path::PathBuf;

/// Path of a file under `tests/fixtures`.
pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Reads a fixture as text.
pub(crate) fn read_fixture(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// The test-only key ring of `tests/fixtures/keys`.
pub(crate) fn fixture_ring() -> kseal_keys::KeyRing {
    let pair =
        kseal_keys::KeyPair::from_pem(&read_fixture("keys/tls.key"), &read_fixture("keys/tls.crt"))
            .expect("fixture key pair");
    [pair].into_iter().collect()
}
