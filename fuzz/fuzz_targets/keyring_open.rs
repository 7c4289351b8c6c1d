#![no_main]
// KeyRing::open on arbitrary bytes and labels: never panics, never succeeds by accident.
use std::sync::OnceLock;

use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize, Label};

fn ring() -> &'static KeyRing {
    static RING: OnceLock<KeyRing> = OnceLock::new();
    RING.get_or_init(|| {
        // Fuzzing-only key size for speed: do not copy.
        let pair = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default())
            .expect("keygen");
        [pair].into_iter().collect()
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (label, sealed) = match data.split_first() {
        Some((&n, rest)) => rest.split_at(usize::from(n).min(rest.len())),
        None => (&[][..], data),
    };
    let label = Label::from_bytes(label);
    assert!(ring().open(&label, sealed, None).is_err());
    if let Ok(text) = std::str::from_utf8(sealed) {
        assert!(ring().open_base64(&label, text, None).is_err());
    }
});
