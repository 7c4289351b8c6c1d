//! The reconciler's key affinity: values without a sealing-key hint try the keys that opened
//! such values lately first, so after the first one they cost one RSA operation each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{
    Cluster, Running, create_ss, data_of, key, map, older_key, put_key, seal, secret, wait_synced,
};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::KeyPair;
use kseal_testkit::TestApiServer;
use kube::Api;

/// Sealed by `pair` without the `kseal.dev/sealing-key` annotation, as kubeseal writes it.
fn unhinted(namespace: &str, name: &str, items: &[(&str, &str)], pair: &KeyPair) -> SealedSecret {
    let mut ss = seal(&secret(namespace, name, items), pair);
    if let Some(annotations) = ss.metadata.annotations.as_mut() {
        annotations.remove(SEALING_KEY_ANNOTATION);
    }
    assert!(ss.sealing_key_hint().is_none());
    ss
}

/// RSA operations the keys in `before` spend on `item` of `ss` before the right key opens
/// it: one each, except those the public checks rule out.
fn tried_before(ss: &SealedSecret, item: &str, before: &[&KeyPair]) -> u64 {
    let bytes = kseal_keys::envelope::decode_base64(&ss.spec.encrypted_data[item]).expect("base64");
    before
        .iter()
        .filter(|k| k.public_key().may_have_sealed(&bytes))
        .count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhinted_values_try_the_key_that_opened_the_last_ones_first() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    // A ring of four: three current keys, and a legacy key a day older, tried last in the
    // ring's own order.
    for (name, pair) in [
        ("sealed-secrets-key1", key(1)),
        ("sealed-secrets-key2", key(2)),
        ("sealed-secrets-legacy", older_key()),
    ] {
        put_key(&client, &cl.ctrl, name, pair, Some("active")).await;
    }
    let running = Running::start(&client, cl.config()).await;
    let others = [key(0), key(1), key(2)];

    // The first unhinted object pays the trial decryptions once, for its first item only.
    let first = unhinted(
        &ns,
        "first",
        &[("a", "1"), ("b", "2"), ("c", "3")],
        older_key(),
    );
    create_ss(&client, &first).await;
    wait_synced(&client, &ns, "first", "True", "Unsealed").await;
    assert_eq!(
        running.rsa_operations(),
        3 + tried_before(&first, "a", &others)
    );

    // Later unhinted objects of the namespace try the legacy key first: one operation each.
    let before = running.rsa_operations();
    for i in 0..4 {
        let name = format!("next-{i}");
        create_ss(&client, &unhinted(&ns, &name, &[("p", "v")], older_key())).await;
        wait_synced(&client, &ns, &name, "True", "Unsealed").await;
    }
    assert_eq!(running.rsa_operations() - before, 4);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        data_of(&secrets.get("next-3").await.unwrap()),
        map(&[("p", "v")])
    );

    // A hinted value still opens with its hinted key alone.
    let before = running.rsa_operations();
    create_ss(
        &client,
        &seal(&secret(&ns, "hinted", &[("p", "v")]), key(0)),
    )
    .await;
    wait_synced(&client, &ns, "hinted", "True", "Unsealed").await;
    assert_eq!(running.rsa_operations() - before, 1);
    running.stop().await;
    cl.cleanup().await;
}
