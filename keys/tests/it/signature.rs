//! RSASSA-PSS signatures, as the fleet ring's signed index uses them.

use kseal_keys::{CertificateOptions, Error, KeyPair, KeySize};

fn pair() -> KeyPair {
    // Test-only 2048-bit key; do not copy.
    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("generate a key")
}

#[test]
fn a_signature_verifies_with_its_own_key_only() {
    let a = pair();
    let b = pair();
    let sig = a.private_key().sign_pss_sha256(b"ring index v7").unwrap();
    assert_eq!(sig.len(), 256);
    a.public_key()
        .verify_pss_sha256(b"ring index v7", &sig)
        .unwrap();
    assert!(matches!(
        b.public_key().verify_pss_sha256(b"ring index v7", &sig),
        Err(Error::BadSignature)
    ));
}

#[test]
fn a_changed_message_or_signature_does_not_verify() {
    let a = pair();
    let mut sig = a.private_key().sign_pss_sha256(b"active: k1").unwrap();
    assert!(
        a.public_key()
            .verify_pss_sha256(b"active: k2", &sig)
            .is_err()
    );
    sig[10] ^= 1;
    assert!(
        a.public_key()
            .verify_pss_sha256(b"active: k1", &sig)
            .is_err()
    );
    assert!(
        a.public_key()
            .verify_pss_sha256(b"active: k1", &[])
            .is_err()
    );
}

#[test]
fn pss_signatures_are_randomised() {
    // PSS salts each signature: two signatures of one message differ, and both verify.
    let a = pair();
    let one = a.private_key().sign_pss_sha256(b"m").unwrap();
    let two = a.private_key().sign_pss_sha256(b"m").unwrap();
    assert_ne!(one, two);
    a.public_key().verify_pss_sha256(b"m", &one).unwrap();
    a.public_key().verify_pss_sha256(b"m", &two).unwrap();
}
