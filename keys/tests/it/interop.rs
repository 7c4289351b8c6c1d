//! Wire-format interop with Bitnami Sealed Secrets: vectors sealed by Go's standard library
//! in Bitnami's format (keys/tests/vectors/go-stdlib.json, always) and by Bitnami's own Go code
//! (shared/interop/set-a.json, where that folder is beside the checkout) open here, and values
//! sealed here open with the same keys.

use kseal_keys::{
    Backend, Certificate, Error, KeyId, KeyPair, KeyRing, Label, PrivateKey, PublicKey, Scope,
};
use sha2::{Digest as _, Sha256};

use crate::common::{b64, interop_sets};

fn scope_of(name: &str) -> Scope {
    name.parse().expect("vector scope")
}

fn ring_from_pkcs1(file: &crate::common::VectorFile) -> KeyRing {
    let pair = KeyPair::from_pem(&file.key.private_key_pkcs1_pem, &file.key.certificate_pem)
        .expect("vector key pair");
    [pair].into_iter().collect()
}

#[test]
fn every_vector_gives_the_expected_result() {
    for file in interop_sets() {
        let want = |e: &str| file.vectors.iter().filter(|v| v.expect == e).count();
        let (want_ok, want_error) = (want("ok"), want("error"));
        assert!(
            want_ok >= 12 && want_error >= 8,
            "{}: {want_ok} ok, {want_error} error",
            file.set
        );
        let ring = ring_from_pkcs1(&file);
        let (mut opened, mut failed) = (0, 0);
        for v in &file.vectors {
            let label = Label::from_bytes(b64(&v.label_b64));
            let result = ring.open_base64(&label, &v.sealed_b64, None);
            match v.expect.as_str() {
                "ok" => {
                    let got = result.unwrap_or_else(|e| panic!("{}: {e}", v.id));
                    let want = b64(v.plaintext_b64.as_deref().expect("plaintext"));
                    assert_eq!(got.plaintext.expose(), want.as_slice(), "{}", v.id);
                    assert_eq!(
                        hex::encode(Sha256::digest(got.plaintext.expose())),
                        v.plaintext_sha256_hex.as_deref().expect("digest"),
                        "{}",
                        v.id
                    );
                    assert_eq!(got.rsa_operations, 1, "{}", v.id);
                    assert_eq!(got.key.as_str(), file.key.ssh_fingerprint_sha256);
                    opened += 1;
                }
                "error" => {
                    let err = result.expect_err(&v.id);
                    // Crypto failures are one opaque error; structural ones may be specific.
                    assert!(
                        matches!(err, Error::Open | Error::Truncated { .. }),
                        "{}: unexpected {err:?}",
                        v.id
                    );
                    failed += 1;
                }
                other => panic!("unknown expectation {other}"),
            }
        }
        assert_eq!((opened, failed), (want_ok, want_error), "{}", file.set);
    }
}

#[test]
fn crypto_failures_are_indistinguishable() {
    for file in interop_sets() {
        let ring = ring_from_pkcs1(&file);
        for id in [
            "negative/strict-wrong-name",
            "negative/strict-as-namespace-wide",
            "negative/strict-as-cluster-wide",
            "negative/gcm-tag-flipped",
            "negative/rsa-ct-flipped",
        ] {
            let v = file.vectors.iter().find(|v| v.id == id).expect(id);
            let label = Label::from_bytes(b64(&v.label_b64));
            let err = ring.open_base64(&label, &v.sealed_b64, None).unwrap_err();
            assert_eq!(err, Error::Open, "{id}");
            assert_eq!(err.to_string(), "no key could decrypt secret");
        }
    }
}

#[test]
fn key_material_in_every_form_agrees() {
    for file in interop_sets() {
        let from_pkcs1 = PrivateKey::from_pem(&file.key.private_key_pkcs1_pem).unwrap();
        let from_pkcs8 = PrivateKey::from_pem(&file.key.private_key_pkcs8_pem).unwrap();
        let spki = PublicKey::from_pem(&file.key.public_key_spki_pem).unwrap();
        let cert = Certificate::from_pem(&file.key.certificate_pem).unwrap();

        assert_eq!(from_pkcs1.public_key(), &spki);
        assert_eq!(from_pkcs8.public_key(), &spki);
        assert_eq!(cert.public_key(), &spki);
        assert_eq!(spki.bits(), file.key.bits);
        assert_eq!(spki.id().as_str(), file.key.ssh_fingerprint_sha256);
        assert_eq!(
            KeyId::parse(&file.key.ssh_fingerprint_sha256).as_ref(),
            Some(spki.id())
        );
        assert_eq!(
            hex::encode(Sha256::digest(spki.modulus())),
            file.key.modulus_sha256_hex
        );
        assert_eq!(cert.common_name(), Some("sealed-secret"));
        // Exports reproduce the vector file's own encodings byte for byte.
        assert_eq!(
            from_pkcs8.to_pkcs1_pem().unwrap().trim(),
            file.key.private_key_pkcs1_pem.trim()
        );
        assert_eq!(
            from_pkcs1.to_pkcs8_pem().trim(),
            file.key.private_key_pkcs8_pem.trim()
        );
        assert_eq!(spki.to_pem().trim(), file.key.public_key_spki_pem.trim());
        assert_eq!(cert.to_pem().trim(), file.key.certificate_pem.trim());
    }
}

#[test]
fn values_sealed_by_each_backend_open_with_the_vector_key() {
    for file in interop_sets() {
        let ring = ring_from_pkcs1(&file);
        let cert = Certificate::from_pem(&file.key.certificate_pem).unwrap();
        for &backend in Backend::ALL {
            for v in file.vectors.iter().filter(|v| v.expect == "ok") {
                let plaintext = b64(v.plaintext_b64.as_deref().unwrap());
                let label = scope_of(&v.scope).label(&v.namespace, &v.name);
                assert_eq!(label.as_bytes(), b64(&v.label_b64).as_slice(), "{}", v.id);
                let sealed =
                    kseal_keys::seal_with(backend, cert.public_key(), &label, &plaintext).unwrap();
                // Same structure as Bitnami's output: 0x02 0x00 prefix, 512-byte RSA block, tag.
                assert_eq!(&sealed[..2], &[0x02, 0x00]);
                assert_eq!(sealed.len(), 2 + 512 + plaintext.len() + 16);
                let got = ring.open(&label, &sealed, None).unwrap();
                assert_eq!(
                    got.plaintext.expose(),
                    plaintext.as_slice(),
                    "{backend:?} {}",
                    v.id
                );
            }
        }
    }
}
