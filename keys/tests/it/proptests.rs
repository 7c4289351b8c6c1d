//! Property tests: sealing round-trips for any input, and any change makes opening fail.
//!
//! Keys are 2048-bit test keys generated once per run (test-only size: do not copy).

use kseal_keys::{Backend, Error, KeyRing, Scope, envelope};
use proptest::prelude::*;

use crate::common::{other_pair, test_pair};

fn scope() -> impl Strategy<Value = Scope> {
    prop_oneof![
        Just(Scope::Strict),
        Just(Scope::Namespace),
        Just(Scope::Cluster)
    ]
}

fn backend() -> impl Strategy<Value = Backend> {
    proptest::sample::select(Backend::ALL.to_vec())
}

fn ring() -> KeyRing {
    [test_pair().clone()].into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn open_of_seal_is_identity(
        plaintext in proptest::collection::vec(any::<u8>(), 0..2048),
        scope in scope(),
        namespace in "[a-z0-9-]{1,20}",
        name in "[a-z0-9.-]{1,30}",
        backend in backend(),
    ) {
        let label = scope.label(&namespace, &name);
        let sealed = kseal_keys::seal_with(backend, test_pair().public_key(), &label, &plaintext).unwrap();
        prop_assert_eq!(sealed.len(), 2 + 256 + plaintext.len() + 16);
        let opened = ring().open(&label, &sealed, None).unwrap();
        prop_assert_eq!(opened.plaintext.expose(), plaintext.as_slice());
        // And through base64, as stored in a SealedSecret.
        let text = envelope::encode_base64(&sealed);
        let opened = ring().open_base64(&label, &text, None).unwrap();
        prop_assert_eq!(opened.plaintext.expose(), plaintext.as_slice());
    }

    #[test]
    fn any_flipped_bit_fails(
        plaintext in proptest::collection::vec(any::<u8>(), 0..64),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let label = Scope::Strict.label("ns", "name");
        let mut sealed = kseal_keys::seal(test_pair().public_key(), &label, &plaintext).unwrap();
        let at = position.index(sealed.len());
        sealed[at] ^= 1 << bit;
        let err = ring().open(&label, &sealed, None).unwrap_err();
        // Flipping the length prefix may make the frame structurally invalid.
        prop_assert!(matches!(err, Error::Open | Error::Truncated { .. }), "{:?}", err);
        if at >= 2 {
            prop_assert_eq!(err, Error::Open);
        }
    }

    #[test]
    fn another_label_fails(
        plaintext in proptest::collection::vec(any::<u8>(), 0..64),
        namespace in "[a-z]{1,10}",
        name in "[a-z]{1,10}",
        other in "[a-z]{1,10}",
    ) {
        // `other` replaces the name in one label and the namespace in another, so it must
        // differ from both (else that label is the original one).
        prop_assume!(name != other && namespace != other);
        let sealed = kseal_keys::seal(test_pair().public_key(), &Scope::Strict.label(&namespace, &name), &plaintext).unwrap();
        for label in [
            Scope::Strict.label(&namespace, &other),
            Scope::Strict.label(&other, &name),
            Scope::Namespace.label(&namespace, &name),
            Scope::Cluster.label(&namespace, &name),
        ] {
            prop_assert_eq!(ring().open(&label, &sealed, None).unwrap_err(), Error::Open);
        }
    }

    #[test]
    fn another_key_fails(plaintext in proptest::collection::vec(any::<u8>(), 0..64), scope in scope()) {
        let label = scope.label("ns", "name");
        let sealed = kseal_keys::seal(other_pair().public_key(), &label, &plaintext).unwrap();
        prop_assert_eq!(ring().open(&label, &sealed, None).unwrap_err(), Error::Open);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let label = Scope::Cluster.label("", "");
        let _ = envelope::Envelope::parse(&bytes);
        prop_assert!(ring().open(&label, &bytes, None).is_err());
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        let label = Scope::Cluster.label("", "");
        let _ = envelope::decode_base64(&text);
        prop_assert!(ring().open_base64(&label, &text, None).is_err());
        let _ = kseal_keys::PrivateKey::from_pem(&text);
        let _ = kseal_keys::Certificate::from_pem(&text);
        let _ = kseal_keys::PublicKey::from_pem(&text);
        let _ = kseal_keys::KeyId::parse(&text);
    }
}
