//! Bitnami interop: values sealed in Bitnami's format by Go's standard library (kseal's own
//! vectors, keys/tests/vectors) and by Bitnami's own `HybridEncrypt` (shared set-a vectors,
//! where available), and SealedSecrets shaped exactly like `kubeseal` output.

use crate::common::{data_of, fixture, interop_set_a, interop_sets};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_api::constants::{CLUSTER_WIDE_ANNOTATION, NAMESPACE_WIDE_ANNOTATION};
use kseal_api::{Error, Scope, SealedSecret, SealedSecretSpec, unseal};
use kseal_keys::KeyRing;

/// A SealedSecret carrying one vector as item `value`, with the vector's namespace, name and
/// scope on the top-level metadata (where the controller reads them).
fn sealed_secret_for(vector: &serde_json::Value) -> SealedSecret {
    let text = |key: &str| vector[key].as_str().expect(key).to_owned();
    let annotation = match text("scope").as_str() {
        "strict" => None,
        "namespace-wide" => Some(NAMESPACE_WIDE_ANNOTATION),
        "cluster-wide" => Some(CLUSTER_WIDE_ANNOTATION),
        other => panic!("unknown scope {other}"),
    };
    SealedSecret {
        metadata: ObjectMeta {
            name: Some(text("name")),
            namespace: Some(text("namespace")),
            annotations: annotation.map(|a| [(a.to_owned(), "true".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: SealedSecretSpec {
            encrypted_data: [("value".to_owned(), text("sealed_b64"))].into(),
            ..SealedSecretSpec::default()
        },
        status: None,
    }
}

#[test]
fn bitnami_vectors_unseal_to_their_plaintext() {
    for (pair, json) in interop_sets() {
        let ring: KeyRing = [pair].into_iter().collect();
        let vectors = json["vectors"].as_array().expect("vectors");
        let mut positives = 0;
        for vector in vectors.iter().filter(|v| v["expect"] == "ok") {
            let id = vector["id"].as_str().expect("id");
            let sealed = sealed_secret_for(vector);
            let expected_scope: Scope = vector["scope"]
                .as_str()
                .expect("scope")
                .parse()
                .expect("scope");
            assert_eq!(sealed.scope(), expected_scope, "{id}");
            let expected = STANDARD
                .decode(vector["plaintext_b64"].as_str().expect("plaintext"))
                .expect("plaintext base64");
            let secret = unseal(&sealed, &ring).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(data_of(&secret)["value"], expected, "{id}");
            positives += 1;
        }
        assert!(positives >= 12, "{positives} positive vectors");
    }
}

#[test]
fn bitnami_negative_vectors_fail_to_unseal() {
    for (pair, json) in interop_sets() {
        let ring: KeyRing = [pair].into_iter().collect();
        let vectors = json["vectors"].as_array().expect("vectors");
        let mut negatives = 0;
        for vector in vectors.iter().filter(|v| v["expect"] == "error") {
            let id = vector["id"].as_str().expect("id");
            match unseal(&sealed_secret_for(vector), &ring) {
                Err(Error::Decrypt { items, source, .. }) => {
                    assert_eq!(items, ["value"], "{id}");
                    assert_eq!(source, kseal_keys::Error::Open, "{id}");
                }
                Err(Error::MalformedItem { item, .. }) => assert_eq!(item, "value", "{id}"),
                Err(other) => panic!("{id}: unexpected error {other}"),
                Ok(_) => panic!("{id}: unsealed but must fail"),
            }
            negatives += 1;
        }
        assert!(negatives >= 8, "{negatives} negative vectors");
        assert_eq!(
            negatives,
            vectors.iter().filter(|v| v["expect"] == "error").count()
        );
    }
}

#[test]
fn kubeseal_yaml_output_deserializes_and_unseals() {
    let sealed: SealedSecret =
        serde_saphyr::from_str(&fixture("kubeseal-strict.yaml")).expect("kubeseal yaml");
    assert_eq!(sealed.metadata.name.as_deref(), Some("db-credentials"));
    assert_eq!(sealed.metadata.namespace.as_deref(), Some("kseal-interop"));
    assert_eq!(sealed.scope(), Scope::Strict);
    assert_eq!(sealed.sealing_key_hint(), None);
    let keys: Vec<&str> = sealed
        .spec
        .encrypted_data
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["blob", "password"]);
    let template = sealed.spec.template.as_ref().expect("template");
    assert_eq!(template.type_.as_deref(), Some("Opaque"));

    let Some((pair, _)) = interop_set_a() else {
        return;
    };
    let ring: KeyRing = [pair].into_iter().collect();
    let secret = unseal(&sealed, &ring).expect("unseal");
    let data = data_of(&secret);
    assert_eq!(data["password"], b"s3cr3t-p@ssw0rd!");
    assert_eq!(data["blob"], (0..=255u8).collect::<Vec<_>>());
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let labels = secret.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["app"], "db");
    assert_eq!(secret.metadata.creation_timestamp, None);
}

#[test]
fn kubeseal_json_output_deserializes_and_unseals() {
    let sealed: SealedSecret =
        serde_json::from_str(&fixture("kubeseal-cluster-wide.json")).expect("kubeseal json");
    assert_eq!(sealed.scope(), Scope::Cluster);
    let template = sealed.spec.template.as_ref().expect("template");
    assert_eq!(template.immutable, Some(true));

    let Some((pair, _)) = interop_set_a() else {
        return;
    };
    let ring: KeyRing = [pair].into_iter().collect();
    let mut moved = sealed.clone();
    moved.metadata.namespace = Some("anywhere".into());
    moved.metadata.name = Some("renamed".into());
    let secret = unseal(&moved, &ring).expect("unseal");
    assert_eq!(data_of(&secret)["password"], b"s3cr3t-p@ssw0rd!");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    assert_eq!(secret.immutable, Some(true));
    assert_eq!(secret.metadata.namespace.as_deref(), Some("anywhere"));
}

#[test]
fn object_read_back_from_a_real_apiserver_deserializes_and_gets_an_owner() {
    // `kubectl get -o json` from kube-apiserver 1.20 after applying kubeseal-strict.yaml with
    // the generated CRD and writing a status through the status subresource.
    let sealed: SealedSecret =
        serde_json::from_str(&fixture("apiserver-1.20-get.json")).expect("apiserver json");
    let condition = sealed.synced_condition().expect("Synced condition");
    assert_eq!(condition.status, "False");
    assert!(condition.last_transition_time.is_some());
    assert_eq!(
        sealed.status.as_ref().and_then(|s| s.observed_generation),
        Some(1)
    );
    let uid = sealed.metadata.uid.clone().expect("uid");

    let Some((pair, _)) = interop_set_a() else {
        return;
    };
    let ring: KeyRing = [pair].into_iter().collect();
    let secret = unseal(&sealed, &ring).expect("unseal");
    let owners = secret.metadata.owner_references.expect("owner reference");
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].uid, uid);
    assert_eq!(owners[0].kind, "SealedSecret");
    assert_eq!(secret.metadata.resource_version, None);
    assert_eq!(secret.metadata.managed_fields, None);
}
