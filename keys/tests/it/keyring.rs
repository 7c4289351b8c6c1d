//! Key import/export, certificates, and key ring ordering and hints.

use std::time::{Duration, SystemTime};

use kseal_keys::{
    Backend, Certificate, CertificateOptions, Error, HintPolicy, KeyPair, KeyRing, KeySize,
    OpenStats, PrivateKey, PublicKey, Scope, seal,
};

use crate::common::{other_pair, test_pair};

fn pair_at(not_before: SystemTime) -> KeyPair {
    // Reuses the cached test key under a certificate with a chosen NotBefore.
    let key = PrivateKey::from_pem(&test_pair().private_key().to_pkcs8_pem()).expect("key");
    let cert = key
        .self_signed_certificate(&CertificateOptions {
            not_before,
            ..CertificateOptions::default()
        })
        .expect("certificate");
    KeyPair::new(key, cert).expect("pair")
}

/// RSA operations an open of `sealed` costs when the keys in `before` (none of which opens
/// it) are tried before the key that does: one each, except the keys that the public checks
/// rule out (a random ciphertext can lie above a smaller modulus).
fn ops_after(before: &[&KeyPair], sealed: &[u8]) -> u32 {
    1 + before
        .iter()
        .filter(|k| k.public_key().may_have_sealed(sealed))
        .count() as u32
}

#[test]
fn pem_round_trips_through_pkcs1_and_pkcs8() {
    let key = test_pair().private_key();
    let pkcs1 = key.to_pkcs1_pem().unwrap();
    let pkcs8 = key.to_pkcs8_pem();
    assert!(pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
    assert!(pkcs8.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let a = PrivateKey::from_pem(&pkcs1).unwrap();
    let b = PrivateKey::from_pem(&pkcs8).unwrap();
    assert_eq!(a.public_key(), key.public_key());
    assert_eq!(b.public_key(), key.public_key());
    assert_eq!(*a.to_pkcs8_der(), *key.to_pkcs8_der());
    let public = PublicKey::from_pem(&key.public_key().to_pem()).unwrap();
    assert_eq!(&public, key.public_key());
    let cert = Certificate::from_pem(&test_pair().certificate().to_pem()).unwrap();
    assert_eq!(&cert, test_pair().certificate());
}

#[test]
fn pkcs1_der_is_the_same_key_whichever_form_it_was_imported_from() {
    let key = test_pair().private_key();
    let der = key.to_pkcs1_der().unwrap();
    let from_pkcs1 = PrivateKey::from_pkcs1_der(&der).unwrap();
    let from_pkcs8 = PrivateKey::from_pem(&key.to_pkcs8_pem()).unwrap();
    assert_eq!(*from_pkcs1.to_pkcs1_der().unwrap(), *der);
    assert_eq!(*from_pkcs8.to_pkcs1_der().unwrap(), *der);
    // An RSAPrivateKey: SEQUENCE { version 0, modulus, ... }.
    assert_eq!(der[0], 0x30);
    assert_eq!(from_pkcs1.public_key(), key.public_key());
}

#[test]
fn generated_certificates_look_like_bitnami_ones() {
    let before = SystemTime::now() - Duration::from_secs(2);
    let pair = KeyPair::generate(
        KeySize::Rsa2048,
        &CertificateOptions {
            common_name: "fleet-a".into(),
            ..CertificateOptions::default()
        },
    )
    .unwrap();
    let cert = pair.certificate();
    assert_eq!(cert.common_name(), Some("fleet-a"));
    assert_eq!(cert.public_key().bits(), 2048);
    assert!(cert.not_before() >= before);
    let validity = cert.not_after().duration_since(cert.not_before()).unwrap();
    assert_eq!(validity, CertificateOptions::DEFAULT_VALIDITY);
    assert!(!cert.is_expired_at(SystemTime::now()));
    assert!(cert.is_expired_at(cert.not_after() + Duration::from_secs(1)));
    assert!(pair.id().as_str().starts_with("SHA256:"));
}

#[test]
fn a_certificate_must_match_its_private_key() {
    let err = KeyPair::new(
        PrivateKey::from_pem(&test_pair().private_key().to_pkcs8_pem()).unwrap(),
        other_pair().certificate().clone(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::KeyMismatch { .. }));
    assert!(err.to_string().starts_with("certificate SHA256:"));
}

#[test]
fn bad_pem_gets_a_clear_error() {
    assert_eq!(
        PrivateKey::from_pem("hello").unwrap_err().to_string(),
        "invalid PEM: no PEM block found where a private key was expected"
    );
    let cert_only = test_pair().certificate().to_pem();
    assert_eq!(
        PrivateKey::from_pem(&cert_only).unwrap_err().to_string(),
        "invalid PEM: expected a private key (RSA PRIVATE KEY, PRIVATE KEY, ENCRYPTED PRIVATE KEY, EC PRIVATE KEY), found CERTIFICATE"
    );
    let garbage = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
    assert_eq!(
        PrivateKey::from_pem(garbage).unwrap_err(),
        Error::Der {
            what: "PKCS #1 private key"
        }
    );
    let ec = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
    assert_eq!(PrivateKey::from_pem(ec).unwrap_err(), Error::NotRsa);
    assert!(
        Certificate::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .is_err()
    );
}

#[test]
fn a_pem_file_with_key_and_certificate_serves_both() {
    let bundle = format!(
        "{}{}",
        test_pair().certificate().to_pem(),
        test_pair().private_key().to_pkcs1_pem().unwrap().as_str()
    );
    let pair = KeyPair::from_pem(&bundle, &bundle).unwrap();
    assert_eq!(pair.id(), test_pair().id());
}

#[test]
fn debug_output_never_contains_key_material() {
    let key = test_pair().private_key();
    let shown = format!("{key:?} {:?}", test_pair());
    let pem = key.to_pkcs8_pem();
    let body_line = pem.lines().nth(1).unwrap();
    assert!(!shown.contains(body_line));
    assert!(shown.contains("SHA256:"));
}

#[test]
fn newest_key_seals_and_ties_are_ordered_by_fingerprint() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let older = test_pair().clone().with_order_time(t0);
    let newer = other_pair()
        .clone()
        .with_order_time(t0 + Duration::from_secs(60));
    let mut ring = KeyRing::new();
    assert!(ring.insert(older.clone()));
    assert!(ring.insert(newer.clone()));
    assert!(!ring.insert(older.clone()), "duplicates are refused");
    assert_eq!(ring.len(), 2);
    assert_eq!(ring.sealing_key().unwrap().id(), newer.id());

    // Insertion order does not matter.
    let other_order: KeyRing = [newer.clone(), older.clone()].into_iter().collect();
    let ids = |r: &KeyRing| r.keys().map(|k| k.id().clone()).collect::<Vec<_>>();
    assert_eq!(ids(&ring), ids(&other_order));

    // Equal times: fingerprint order decides, whatever the insertion order.
    let a = test_pair().clone().with_order_time(t0);
    let b = other_pair().clone().with_order_time(t0);
    let r1: KeyRing = [a.clone(), b.clone()].into_iter().collect();
    let r2: KeyRing = [b, a].into_iter().collect();
    assert_eq!(ids(&r1), ids(&r2));

    assert_eq!(ring.remove(newer.id()).unwrap().id(), newer.id());
    assert_eq!(ring.sealing_key().unwrap().id(), older.id());
    assert!(ring.remove(newer.id()).is_none());
}

#[test]
fn certificate_not_before_orders_keys_by_default() {
    let now = SystemTime::now();
    let old = pair_at(now - Duration::from_secs(3600));
    assert_eq!(old.order_time(), old.certificate().not_before());
    let fresh = other_pair().clone();
    let ring: KeyRing = [fresh.clone(), old.clone()].into_iter().collect();
    assert_eq!(ring.sealing_key().unwrap().id(), fresh.id());
}

#[test]
fn open_tries_the_hint_then_the_sealing_key_then_the_rest() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let older = test_pair().clone().with_order_time(t0);
    let newer = other_pair()
        .clone()
        .with_order_time(t0 + Duration::from_secs(1));
    let ring: KeyRing = [older.clone(), newer.clone()].into_iter().collect();
    let label = Scope::Strict.label("ns", "name");
    let by_older = seal(older.public_key(), &label, b"v").unwrap();
    let by_newer = seal(newer.public_key(), &label, b"v").unwrap();

    // No hint: sealing key first.
    assert_eq!(
        ring.open(&label, &by_newer, None).unwrap().rsa_operations,
        1
    );
    assert_eq!(
        ring.open(&label, &by_older, None).unwrap().rsa_operations,
        ops_after(&[&newer], &by_older)
    );
    // A right hint costs one operation; a wrong or unknown hint falls back in order.
    let opened = ring.open(&label, &by_older, Some(older.id())).unwrap();
    assert_eq!((opened.rsa_operations, &opened.key), (1, older.id()));
    assert_eq!(
        ring.open(&label, &by_newer, Some(older.id()))
            .unwrap()
            .rsa_operations,
        ops_after(&[&older], &by_newer)
    );
    let unknown = kseal_keys::KeyId::parse("SHA256:mOu37IQKwNgtj0FeKeyH6IwE9tIV4Wv0EQyI/vw5vxQ");
    assert_eq!(
        ring.open(&label, &by_older, unknown.as_ref())
            .unwrap()
            .rsa_operations,
        ops_after(&[&newer], &by_older)
    );

    // Failures count every key tried: an RSA operation, or ruled out by the public checks.
    let mut stats = OpenStats::default();
    let wrong = Scope::Strict.label("ns", "other");
    assert_eq!(
        ring.open_counted(&wrong, &by_older, None, &mut stats)
            .unwrap_err(),
        Error::Open
    );
    assert_eq!(
        stats.rsa_operations,
        u64::from(ops_after(&[&newer], &by_older))
    );
    assert_eq!(stats.rsa_operations + stats.keys_ruled_out, 2);
}

#[test]
fn a_binding_hint_tries_only_the_hinted_key_when_the_ring_has_it() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let older = test_pair().clone().with_order_time(t0);
    let newer = other_pair()
        .clone()
        .with_order_time(t0 + Duration::from_secs(1));
    let ring: KeyRing = [older.clone(), newer.clone()].into_iter().collect();
    let label = Scope::Strict.label("ns", "name");
    let by_older = seal(older.public_key(), &label, b"v").unwrap();
    let open = |hint: Option<&kseal_keys::KeyId>, policy| {
        let mut stats = OpenStats::default();
        let result = ring.open_with(&label, &by_older, hint, policy, &mut stats);
        (result.map(|o| o.key), stats.rsa_operations)
    };
    // Two operations, or one when the public checks rule the newer key out.
    let two = u64::from(ops_after(&[&newer], &by_older));
    // A wrong hint the ring has: at most one operation, then the failure (no fallback).
    assert_eq!(
        open(Some(newer.id()), HintPolicy::Binds),
        (Err(Error::Open), two - 1)
    );
    // The reconciler's policy still falls back, and the result does not depend on the hint.
    assert_eq!(
        open(Some(newer.id()), HintPolicy::Orders),
        (Ok(older.id().clone()), two)
    );
    // A right hint opens with one operation either way.
    assert_eq!(
        open(Some(older.id()), HintPolicy::Binds),
        (Ok(older.id().clone()), 1)
    );
    // A hint the ring lacks, or none: every key, in order.
    let unknown = kseal_keys::KeyId::parse("SHA256:mOu37IQKwNgtj0FeKeyH6IwE9tIV4Wv0EQyI/vw5vxQ");
    assert_eq!(
        open(unknown.as_ref(), HintPolicy::Binds),
        (Ok(older.id().clone()), two)
    );
    assert_eq!(open(None, HintPolicy::Binds), (Ok(older.id().clone()), two));
}

#[test]
fn keys_of_another_size_are_skipped_without_rsa_work() {
    let big = KeyPair::generate(KeySize::Rsa3072, &CertificateOptions::default()).unwrap();
    let ring: KeyRing = [big, test_pair().clone()].into_iter().collect();
    let label = Scope::Cluster.label("", "");
    let sealed = seal(test_pair().public_key(), &label, b"x").unwrap();
    let opened = ring.open(&label, &sealed, None).unwrap();
    assert_eq!(opened.rsa_operations, 1);
}

#[test]
fn an_empty_ring_says_so_after_checking_structure() {
    let ring = KeyRing::new();
    let label = Scope::Cluster.label("", "");
    assert_eq!(
        ring.open(&label, &[1], None).unwrap_err(),
        Error::Truncated {
            len: 1,
            expected: 2
        }
    );
    let sealed = seal(test_pair().public_key(), &label, b"x").unwrap();
    assert_eq!(
        ring.open(&label, &sealed, None).unwrap_err(),
        Error::EmptyKeyRing
    );
}

#[test]
fn both_backends_seal_values_the_ring_opens() {
    let ring: KeyRing = [test_pair().clone()].into_iter().collect();
    for &backend in Backend::ALL {
        for scope in Scope::ALL {
            let label = scope.label("team-a", "git-credentials");
            let sealed =
                kseal_keys::seal_with(backend, test_pair().public_key(), &label, b"token").unwrap();
            assert_eq!(
                &sealed[..2],
                &[0x01, 0x00],
                "2048-bit keys frame 256-byte blocks"
            );
            let opened = ring.open(&label, &sealed, None).unwrap();
            assert_eq!(opened.plaintext.expose(), b"token");
        }
    }
}

#[test]
fn sealing_is_randomized() {
    let label = Scope::Strict.label("a", "b");
    let key = test_pair().public_key();
    assert_ne!(
        seal(key, &label, b"same").unwrap(),
        seal(key, &label, b"same").unwrap()
    );
}

#[test]
fn a_chosen_sealing_key_seals_whatever_its_age_and_others_still_open() {
    let older = other_pair().clone().with_order_time(SystemTime::UNIX_EPOCH);
    let newer = test_pair().clone().with_order_time(SystemTime::now());
    let mut ring: KeyRing = [older.clone(), newer.clone()].into_iter().collect();
    assert_eq!(ring.sealing_key().unwrap().id(), newer.id());
    assert!(ring.set_sealing_key(older.id()));
    assert_eq!(ring.sealing_key().unwrap().id(), older.id());
    let label = Scope::Strict.label("ns", "name");
    let sealed = seal(newer.public_key(), &label, b"v").unwrap();
    let opened = ring.open(&label, &sealed, None).unwrap();
    assert_eq!(opened.key, *newer.id());
    assert_eq!(
        opened.rsa_operations,
        ops_after(&[&older], &sealed),
        "the chosen sealing key is tried first"
    );
    let mut without = ring.clone();
    without.remove(older.id());
    assert!(!without.set_sealing_key(older.id()));
    ring.remove(older.id());
    assert_eq!(ring.sealing_key().unwrap().id(), newer.id());
}
