//! Any input gives `Ok` or `Err`, never a panic.

use std::collections::BTreeMap;

use crate::common::{pair, ring};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_api::constants::{CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION};
use kseal_api::{
    Scope, SealOptions, SealedSecret, SealedSecretSpec, SecretTemplateSpec, UnsealOptions,
    seal_secret, unseal_with,
};
use proptest::prelude::*;

fn annotations() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    proptest::option::of(proptest::collection::btree_map(
        prop_oneof![
            Just(CLUSTER_WIDE_ANNOTATION.to_owned()),
            Just(NAMESPACE_WIDE_ANNOTATION.to_owned()),
            Just(kseal_api::constants::SEALING_KEY_ANNOTATION.to_owned()),
            ".{0,8}",
        ],
        prop_oneof![Just("true".to_owned()), ".{0,60}"],
        0..4,
    ))
}

/// Base64-ish text, sometimes a real envelope length prefix.
fn sealed_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9+/=\r\n]{0,80}",
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|mut bytes| {
            if bytes.len() >= 2 {
                bytes[0] = 1; // 256-byte RSA block, as a 2048-bit key writes
                bytes[1] = 0;
            }
            kseal_keys::envelope::encode_base64(&bytes)
        }),
    ]
}

fn sealed_secret() -> impl Strategy<Value = SealedSecret> {
    (
        proptest::option::of(".{0,10}"),
        proptest::option::of(".{0,10}"),
        proptest::option::of(".{0,10}"),
        annotations(),
        proptest::collection::btree_map(".{0,6}", sealed_value(), 0..4),
        proptest::option::of(sealed_value()),
        annotations(),
        proptest::option::of(proptest::collection::btree_map(
            ".{0,4}",
            proptest::option::of(".{0,4}"),
            0..2,
        )),
    )
        .prop_map(
            |(name, namespace, uid, top, items, data, template_annotations, template_data)| {
                SealedSecret {
                    metadata: ObjectMeta {
                        name,
                        namespace,
                        uid,
                        annotations: top,
                        ..ObjectMeta::default()
                    },
                    spec: SealedSecretSpec {
                        data,
                        encrypted_data: items,
                        template: Some(SecretTemplateSpec {
                            data: template_data,
                            metadata: Some(ObjectMeta {
                                annotations: template_annotations,
                                ..ObjectMeta::default()
                            }),
                            ..SecretTemplateSpec::default()
                        }),
                    },
                    status: None,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn unseal_never_panics(sealed in sealed_secret(), accept_v1 in any::<bool>()) {
        let options = UnsealOptions { accept_deprecated_v1_data: accept_v1, ..UnsealOptions::default() };
        let _ = unseal_with(&sealed, &ring(), &options);
    }

    #[test]
    fn seal_never_panics(
        name in proptest::option::of(".{0,10}"),
        namespace in proptest::option::of(".{0,10}"),
        annotations in annotations(),
        data in proptest::option::of(proptest::collection::btree_map(".{0,6}", proptest::collection::vec(any::<u8>(), 0..16), 0..3)),
        string_data in proptest::option::of(proptest::collection::btree_map(".{0,6}", ".{0,16}", 0..3)),
        option_name in proptest::option::of(".{0,10}"),
        option_namespace in proptest::option::of(".{0,10}"),
        scope in prop_oneof![Just(Scope::Strict), Just(Scope::Namespace), Just(Scope::Cluster)],
        allow_empty_data in any::<bool>(),
    ) {
        let secret = Secret {
            metadata: ObjectMeta { name, namespace, annotations, ..ObjectMeta::default() },
            data: data.map(|d| d.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
            string_data,
            ..Secret::default()
        };
        let options = SealOptions {
            name: option_name,
            namespace: option_namespace,
            scope,
            allow_empty_data,
            ..SealOptions::default()
        };
        if let Ok(sealed) = seal_secret(&secret, pair().public_key(), &options) {
            // Whatever sealed must unseal.
            let unsealed = unseal_with(&sealed, &ring(), &UnsealOptions::default());
            prop_assert!(unsealed.is_ok(), "{:?}", unsealed.err());
        }
    }
}
