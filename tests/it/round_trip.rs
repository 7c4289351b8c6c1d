//! The main test: a Secret sealed with only the public certificate unseals, with the key
//! ring, to the same Secret, for every scope and both sealing backends' envelopes.

use k8s_openapi::api::core::v1::Secret;
use kseal_api::{Scope, SealOptions, seal_secret, unseal};
use kseal_keys::{Certificate, KeyRing};

use crate::{fixture_ring, read_fixture};

fn input() -> Secret {
    serde_saphyr::from_str(&read_fixture("secret.yaml")).expect("secret.yaml")
}

fn merged_data(secret: &Secret) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out: std::collections::BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.as_bytes().to_vec());
    }
    out
}

#[test]
fn sealed_with_the_certificate_unsealed_with_the_ring_is_the_same_secret() {
    let ring: KeyRing = fixture_ring();
    let cert = Certificate::from_pem(&read_fixture("keys/tls.crt")).expect("cert");
    let secret = input();
    for scope in Scope::ALL {
        let options = SealOptions {
            scope,
            ..SealOptions::default()
        };
        let sealed = seal_secret(&secret, cert.public_key(), &options).expect("seal");
        // The SealedSecret travels through YAML, as it does through git.
        let text = serde_saphyr::to_string(&sealed).expect("yaml");
        let sealed = serde_saphyr::from_str(&text).expect("parse back");
        let got = unseal(&sealed, &ring).expect("unseal");
        let got_data: std::collections::BTreeMap<String, Vec<u8>> = got
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        assert_eq!(got_data, merged_data(&secret), "{scope}");
        assert_eq!(got.type_, secret.type_);
        assert_eq!(got.metadata.labels, secret.metadata.labels);
        assert_eq!(got.metadata.name, secret.metadata.name);
        assert_eq!(got.metadata.namespace, secret.metadata.namespace);
    }
}

#[test]
fn values_sealed_by_the_pure_rust_backend_unseal_in_a_sealed_secret() {
    let ring = fixture_ring();
    let cert = Certificate::from_pem(&read_fixture("keys/tls.crt")).expect("cert");
    let mut sealed =
        seal_secret(&input(), cert.public_key(), &SealOptions::default()).expect("seal");
    let label = Scope::Strict.label("flux-system", "git-credentials");
    let value = kseal_keys::seal_with(
        kseal_keys::Backend::PureRust,
        cert.public_key(),
        &label,
        b"from pure rust",
    )
    .expect("pure seal");
    sealed
        .spec
        .encrypted_data
        .insert("extra".into(), kseal_keys::envelope::encode_base64(&value));
    let got = unseal(&sealed, &ring).expect("unseal");
    assert_eq!(got.data.expect("data")["extra"].0, b"from pure rust");
}
