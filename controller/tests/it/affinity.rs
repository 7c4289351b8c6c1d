//! The reconciler's key affinity: values without a sealing-key hint try the keys that opened
//! such values lately first, so after the first one they cost one RSA operation each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{
    Cluster, Running, create_ss, data_of, key, map, older_key, put_key, seal, secret, wait_synced,
};
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{BlockTop, KeyId, KeyPair, KeyRing};
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

/// The guesses a cold namespace holding only `ss` makes for its unhinted values, from the
/// controller's `ring`: its sealing key when that key's modulus may sit above the largest
/// RSA block, then the two keys whose moduli sit tightest above it.
fn guessed(ss: &SealedSecret, ring: &KeyRing) -> Vec<KeyId> {
    let ceiling = (ss.spec.encrypted_data.values())
        .filter_map(|value| BlockTop::of_base64_value(value))
        .max()
        .expect("a value");
    let sealing = ring.preferred_key().expect("a sealing key");
    let covers = BlockTop::of_modulus(sealing.public_key().modulus())
        .is_some_and(|modulus| modulus.may_cover(ceiling));
    let mut keys: Vec<KeyId> = covers.then(|| sealing.id().clone()).into_iter().collect();
    for key in ring.tightest_above(ceiling, 2, |_| true) {
        if !keys.contains(&key) && keys.len() < 2 {
            keys.push(key);
        }
    }
    keys
}

/// RSA operations the first item `item` of `ss`, the first unhinted object of a cold
/// namespace sealed with `sealer`, costs with the controller's `ring` (made of the pairs in
/// `pairs`): the guesses first, then every other key (the ring's own order puts `sealer`
/// last), less those the public checks rule out.
fn cold_first_item(
    ss: &SealedSecret,
    item: &str,
    ring: &KeyRing,
    pairs: &[&KeyPair],
    sealer: &KeyPair,
) -> u64 {
    let guesses = guessed(ss, ring);
    let pair = |id: &KeyId| *pairs.iter().find(|p| p.id() == id).expect("a ring key");
    let before: Vec<&KeyPair> = match guesses.iter().position(|id| id == sealer.id()) {
        Some(at) => guesses[..at].iter().map(pair).collect(),
        None => pairs
            .iter()
            .copied()
            .filter(|k| k.id() != sealer.id())
            .collect(),
    };
    1 + tried_before(ss, item, &before)
}

/// Waits until the controller holds `n` keys.
async fn keys_loaded(running: &Running, n: usize) -> std::sync::Arc<KeyRing> {
    for _ in 0..500 {
        let ring = running.state.keys.ring();
        if ring.len() == n {
            return ring;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the controller did not load {n} keys");
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
    let ring = [key(0), key(1), key(2), older_key()];

    // The first unhinted object pays the trial decryptions once, for its first item only,
    // starting from the keys that fit above its largest block.
    let first = unhinted(
        &ns,
        "first",
        &[("a", "1"), ("b", "2"), ("c", "3")],
        older_key(),
    );
    create_ss(&client, &first).await;
    wait_synced(&client, &ns, "first", "True", "Unsealed").await;
    let keys = keys_loaded(&running, 4).await;
    assert_eq!(
        running.rsa_operations(),
        2 + cold_first_item(&first, "a", &keys, &ring, older_key())
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

/// A cold namespace's first unhinted value tries first the key whose modulus sits tightest
/// above the largest RSA block among the namespace's unhinted values: with many values sealed
/// by one legacy key, that is the legacy key, which the ring's own order (sealing key, then
/// newest first) tries last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_namespace_starts_from_the_key_fitting_above_its_largest_block() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    for (name, pair) in [
        ("sealed-secrets-key1", key(1)),
        ("sealed-secrets-key2", key(2)),
        ("sealed-secrets-legacy", older_key()),
    ] {
        put_key(&client, &cl.ctrl, name, pair, Some("active")).await;
    }
    let running = Running::start(&client, cl.config()).await;
    let ring = [key(0), key(1), key(2), older_key()];
    let names: Vec<(String, String)> = (0..24)
        .map(|i| (format!("item-{i:02}"), format!("value {i}")))
        .collect();
    let items: Vec<(&str, &str)> = names
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let keys = keys_loaded(&running, 4).await;
    // Sealed until the legacy key is guessed first, or right after the sealing key, and the
    // ring's own order would spend at least two operations on other keys first (a matter of
    // a few tries with 24 values): without the guess the figure below is at least 26.
    let ss = (0..64)
        .map(|_| unhinted(&ns, "legacy", &items, older_key()))
        .find(|ss| {
            let guesses = guessed(ss, &keys);
            let at = guesses.iter().position(|id| id == older_key().id());
            let sealing = keys.preferred_key().unwrap().id();
            (at == Some(0) || (at == Some(1) && &guesses[0] == sealing))
                && tried_before(ss, "item-00", &ring[..3]) >= 2
        })
        .expect("the legacy key guessed within 64 tries");
    create_ss(&client, &ss).await;
    wait_synced(&client, &ns, "legacy", "True", "Unsealed").await;
    let first = cold_first_item(&ss, "item-00", &keys, &ring, older_key());
    assert!(first <= 2, "the legacy key among the first two tried");
    assert_eq!(running.rsa_operations(), 23 + first);
    running.stop().await;
    cl.cleanup().await;
}
