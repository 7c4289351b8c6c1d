//! The fleet key ring as a key source (`--key-source`): the real AWS SDK against the Secrets
//! Manager emulator (moto, started by scripts/test.sh), the controller against kseal-testkit's
//! API server and, for the main scenario, the reference kube-apiserver.
//!
//! Without the emulator every test here skips loudly, and fails under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_controller::config::KeySourceConfig;
use kseal_controller::remote::{
    ACTIVE_ANNOTATION, KID_ANNOTATION, MIRROR_LABEL, MISSING_SINCE_ANNOTATION, Mirror, mirror_name,
};
use kseal_controller::{Config, State};
use kseal_keys::KeyPair;
use kseal_keystore::{AwsOptions, Index, IndexEntry, KeyEntry, Kid, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kseal_testkit::sm::{self, Fault, FaultProxy};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt as _};
use tower::ServiceExt as _;

/// Generous: SDK retries, the loop's backoff and key parsing on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn aws(endpoint: &str) -> AwsOptions {
    AwsOptions {
        endpoint_url: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        ..AwsOptions::default()
    }
}

fn location(prefix: &str) -> Location {
    Location::SecretsManager {
        prefix: prefix.to_owned(),
        region: None,
    }
}

/// A ring at `prefix` reached through `endpoint`, seeded with `keys` (the first is active).
async fn seed(endpoint: &str, prefix: &str, keys: &[&KeyPair]) -> Ring {
    let ring = Ring::open(&location(prefix), &aws(endpoint)).await.unwrap();
    for key in keys {
        ring.push(key).await.unwrap();
    }
    ring
}

fn source(prefix: &str, endpoint: &str) -> KeySourceConfig {
    KeySourceConfig {
        location: location(prefix),
        interval: Duration::from_secs(3600),
        retire_grace: Duration::from_secs(7 * 86_400),
        aws: aws(endpoint),
    }
}

fn with_source(ctrl: &str, watched: &[&str], source: KeySourceConfig) -> Config {
    let mut c = config(ctrl, watched);
    c.key_source = Some(source);
    c
}

async fn mirrors(client: &Client, ns: &str) -> Vec<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}=true")))
        .await
        .unwrap()
        .items
}

fn kid(pair: &KeyPair) -> Kid {
    Kid::of(pair.public_key())
}

async fn wait_sealing_key(state: &State, pair: &KeyPair, keys: usize) {
    eventually(
        &format!("the ring holds {keys} keys and {} seals", pair.id()),
        PATIENCE,
        || async {
            let ring = state.keys.ring();
            Ok(
                (ring.len() == keys && ring.sealing_key().map(KeyPair::id) == Some(pair.id()))
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap();
}

async fn wait_ready(state: &State) {
    eventually("the replica is ready", PATIENCE, || async {
        Ok(state.readiness.is_ready().then_some(()))
    })
    .await
    .unwrap();
}

/// The mission: a cluster born after the ring was seeded, with no key Secret of its own,
/// unseals a SealedSecret sealed before it existed, and its mirror has Bitnami's layout.
async fn brand_new_cluster_unseals_with_the_fleet_ring(client: Client) {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("new-cluster");
    seed(&endpoint, &prefix, &[key(0)]).await;
    // Sealed before the cluster exists.
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let app = namespace(&client, "kseal-app").await;
    let ss = seal(&secret(&app, "git", &[("password", "hunter2")]), key(0));

    let running = Running::start(
        &client,
        with_source(&ctrl, &[&app], source(&prefix, &endpoint)),
    )
    .await;
    create_ss(&client, &ss).await;
    let unsealed = wait_secret(&client, &app, "git", "secret git unsealed", |s| {
        !data_of(s).is_empty()
    })
    .await;
    assert_eq!(data_of(&unsealed), map(&[("password", "hunter2")]));
    wait_ready(&running.state).await;

    let mirrors = mirrors(&client, &ctrl).await;
    assert_eq!(mirrors.len(), 1);
    let m = &mirrors[0];
    assert_eq!(m.name_any(), mirror_name(&kid(key(0))));
    assert_eq!(m.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(
        m.labels().get(SEALING_KEY_LABEL).map(String::as_str),
        Some(SEALING_KEY_LABEL_ACTIVE)
    );
    assert_eq!(
        m.annotations().get(KID_ANNOTATION).map(String::as_str),
        Some(kid(key(0)).as_str())
    );
    assert_eq!(
        m.annotations().get(ACTIVE_ANNOTATION).map(String::as_str),
        Some("true")
    );
    let data = m.data.as_ref().unwrap();
    assert!(
        data["tls.key"]
            .0
            .starts_with(b"-----BEGIN RSA PRIVATE KEY-----")
    );
    assert_eq!(
        kseal_keys::Certificate::from_pem(std::str::from_utf8(&data["tls.crt"].0).unwrap())
            .unwrap()
            .id(),
        key(0).id()
    );
    let requests = |op: &str, outcome: &str| {
        running
            .state
            .metrics
            .key_source_requests
            .get_or_create(&kseal_controller::metrics::KeySourceLabels {
                operation: op.into(),
                outcome: outcome.into(),
            })
            .get()
    };
    assert!(requests("describe_index", "ok") >= 1);
    assert_eq!(requests("get_key", "ok"), 1);
    let text = running.state.metrics.encode();
    assert!(text.contains("kseal_key_source_ring_keys 1"), "{text}");
    running.stop().await;
    delete_namespace(&client, &app).await;
    delete_namespace(&client, &ctrl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brand_new_cluster_unseals_on_the_test_server() {
    brand_new_cluster_unseals_with_the_fleet_ring(TestApiServer::new().client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brand_new_cluster_unseals_on_a_real_apiserver() {
    if sm::endpoint().is_none() {
        return;
    }
    if let Some(client) = real_client("brand_new_cluster_unseals_with_the_fleet_ring").await {
        brand_new_cluster_unseals_with_the_fleet_ring(client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_is_picked_up_without_restart_and_old_keys_keep_opening() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("rotation");
    let ring = seed(&endpoint, &prefix, &[key(0)]).await;
    let server = TestApiServer::new();
    let client = server.client();
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let app = namespace(&client, "kseal-app").await;
    let running = Running::start(
        &client,
        with_source(&ctrl, &[&app], source(&prefix, &endpoint)),
    )
    .await;
    wait_sealing_key(&running.state, key(0), 1).await;

    // Phase one: pushed, mirrored, not sealing.
    ring.push(key(1)).await.unwrap();
    running.state.refresh.request();
    eventually("the pushed key is mirrored", PATIENCE, || async {
        Ok((running.state.keys.ring().len() == 2).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(
        running.state.keys.ring().sealing_key().unwrap().id(),
        key(0).id(),
        "a pushed key does not seal before it is activated"
    );
    // Phase two: activated; the controller serves it after a refresh, without a restart.
    ring.activate(kid(key(1)).as_str(), Duration::ZERO)
        .await
        .unwrap();
    // Requests closer than a few seconds apart are merged: keep asking until it shows.
    eventually("the activated key seals", PATIENCE, || async {
        running.state.refresh.request();
        let ring = running.state.keys.ring();
        Ok((ring.sealing_key().map(KeyPair::id) == Some(key(1).id())).then_some(()))
    })
    .await
    .unwrap();
    let activated = mirrors(&client, &ctrl)
        .await
        .into_iter()
        .find(|m| m.annotations().get(ACTIVE_ANNOTATION).map(String::as_str) == Some("true"))
        .unwrap();
    assert_eq!(activated.name_any(), mirror_name(&kid(key(1))));
    wait_event(&client, &ctrl, &activated.name_any(), "SealingKeyActivated").await;

    // Old and new seals both open, each with one RSA operation (the hint).
    create_ss(&client, &seal(&secret(&app, "old", &[("a", "1")]), key(0))).await;
    create_ss(&client, &seal(&secret(&app, "new", &[("b", "2")]), key(1))).await;
    wait_secret(&client, &app, "old", "secret old unsealed", |s| {
        data_of(s) == map(&[("a", "1")])
    })
    .await;
    wait_secret(&client, &app, "new", "secret new unsealed", |s| {
        data_of(s) == map(&[("b", "2")])
    })
    .await;
    assert_eq!(running.rsa_operations(), 2);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_down_at_start_keeps_the_replica_unready_with_the_reason_then_recovers() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("down-at-start");
    seed(&endpoint, &prefix, &[key(0)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    proxy.set_down(true);
    let server = TestApiServer::new();
    let client = server.client();
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let running = Running::start(
        &client,
        with_source(&ctrl, &[&ctrl], source(&prefix, &proxy.url())),
    )
    .await;
    let problem = eventually("the key source reports the outage", PATIENCE, || async {
        Ok(running.state.readiness.key_source().and_then(|s| s.problem))
    })
    .await
    .unwrap();
    assert!(problem.starts_with("network:"), "{problem}");
    assert!(
        problem.contains("cannot reach Secrets Manager"),
        "{problem}"
    );
    assert!(!running.state.readiness.is_ready());
    assert!(running.state.keys.ring().is_empty(), "fail closed: no key");
    assert!(mirrors(&client, &ctrl).await.is_empty());

    proxy.set_down(false);
    running.state.refresh.request();
    wait_ready(&running.state).await;
    assert_eq!(mirrors(&client, &ctrl).await.len(), 1);
    assert_eq!(running.state.readiness.key_source().unwrap().problem, None);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_an_outage_unseals_from_the_mirror() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("restart-outage");
    seed(&endpoint, &prefix, &[key(0)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let app = namespace(&client, "kseal-app").await;
    let config = || with_source(&ctrl, &[&app], source(&prefix, &proxy.url()));
    let running = Running::start(&client, config()).await;
    create_ss(
        &client,
        &seal(&secret(&app, "before", &[("a", "1")]), key(0)),
    )
    .await;
    wait_secret(&client, &app, "before", "secret before unsealed", |s| {
        !data_of(s).is_empty()
    })
    .await;
    running.stop().await;

    proxy.set_down(true);
    let restarted = Running::start(&client, config()).await;
    wait_ready(&restarted.state).await;
    create_ss(
        &client,
        &seal(&secret(&app, "during", &[("b", "2")]), key(0)),
    )
    .await;
    wait_secret(&client, &app, "during", "secret during unsealed", |s| {
        data_of(s) == map(&[("b", "2")])
    })
    .await;
    let problem = eventually("the outage is reported", PATIENCE, || async {
        Ok(restarted
            .state
            .readiness
            .key_source()
            .and_then(|s| s.problem))
    })
    .await
    .unwrap();
    assert!(problem.starts_with("network:"), "{problem}");
    assert!(
        restarted.state.readiness.is_ready(),
        "a valid mirror keeps it ready"
    );
    restarted.stop().await;
}

/// A mirror reached through a fault proxy, for sync-level tests.
async fn mirror_through(
    proxy: &FaultProxy,
    prefix: &str,
    client: &Client,
    ns: &str,
    grace: Duration,
) -> (Mirror, State) {
    let ring = Ring::open(&location(prefix), &aws(&proxy.url()))
        .await
        .unwrap();
    let state = State::new();
    let mirror = Mirror::new(
        ring,
        format!("secretsmanager://{prefix}"),
        client.clone(),
        ns,
        "test",
        grace,
        state.clone(),
    );
    (mirror, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_ring_costs_one_describe_and_no_read() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("cheap-poll");
    let ring = seed(&endpoint, &prefix, &[key(0), key(1)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut mirror, _state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;

    let first = mirror.sync().await.unwrap();
    assert!(first.index_read);
    assert_eq!(first.keys_read, 2);
    assert_eq!(first.created.len(), 2);
    proxy.reset_counts();
    for _ in 0..3 {
        let again = mirror.sync().await.unwrap();
        assert!(!again.index_read);
        assert_eq!(again.keys_read, 0);
        assert!(again.created.is_empty());
    }
    assert_eq!(
        proxy.count("DescribeSecret"),
        3,
        "one DescribeSecret per poll"
    );
    assert_eq!(
        proxy.count("GetSecretValue"),
        0,
        "nothing read when nothing changed"
    );

    // After a change: the index once, and only the new key.
    ring.push(key(2)).await.unwrap();
    proxy.reset_counts();
    let changed = mirror.sync().await.unwrap();
    assert!(changed.index_read);
    assert_eq!(changed.keys_read, 1);
    assert_eq!(proxy.count("DescribeSecret"), 1);
    assert_eq!(
        proxy.count("GetSecretValue"),
        2,
        "the index and the new key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_server_errors_are_retried() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("retries");
    seed(&endpoint, &prefix, &[key(0)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut mirror, _state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;
    proxy.inject("DescribeSecret", Fault::Throttle, 2);
    proxy.inject("GetSecretValue", Fault::ServerError, 2);
    let report = mirror.sync().await.unwrap();
    assert_eq!(report.created.len(), 1);
    assert!(proxy.count("DescribeSecret") >= 3, "throttles were retried");
    assert!(proxy.count("GetSecretValue") >= 4, "500s were retried");

    // Past the SDK's retries the sync fails with a reason; the next one succeeds.
    proxy.inject("DescribeSecret", Fault::Throttle, 10);
    let err = mirror.sync().await.unwrap_err();
    assert_eq!(err.reason(), "throttled");
    proxy.clear_faults();
    mirror.sync().await.unwrap();
    proxy.inject("*", Fault::AccessDenied, 1);
    let err = mirror.sync().await.unwrap_err();
    assert_eq!(err.reason(), "access_denied");
    assert!(
        kseal_controller::error_chain(&err).contains("DescribeSecret"),
        "{}",
        kseal_controller::error_chain(&err)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_left_the_ring_leaves_the_mirror_after_the_grace_but_never_the_last() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("retire");
    let ring = seed(&endpoint, &prefix, &[key(0), key(1)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut mirror, _state) = mirror_through(&proxy, &prefix, &client, &ns, Duration::ZERO).await;
    mirror.sync().await.unwrap();
    assert_eq!(mirrors(&client, &ns).await.len(), 2);

    ring.retire(kid(key(1)).as_str(), 7).await.unwrap();
    let marked = mirror.sync().await.unwrap();
    assert!(marked.retired.is_empty(), "never at once");
    let retiring = Api::<Secret>::namespaced(client.clone(), &ns)
        .get(&mirror_name(&kid(key(1))))
        .await
        .unwrap();
    assert!(
        retiring
            .annotations()
            .contains_key(MISSING_SINCE_ANNOTATION)
    );
    let removed = mirror.sync().await.unwrap();
    assert_eq!(removed.retired, [mirror_name(&kid(key(1)))]);
    assert_eq!(mirrors(&client, &ns).await.len(), 1);

    // An index that lost every key (written by hand): the last mirror stays.
    let snapshot = ring.require_snapshot().await.unwrap();
    let empty = Index::empty(&prefix, SystemTime::now());
    ring.store()
        .compare_and_swap(
            &ring.index_name(),
            &empty.to_json(),
            Some(&snapshot.version),
            &[],
        )
        .await
        .unwrap();
    mirror.sync().await.unwrap();
    let kept = mirror.sync().await.unwrap();
    assert!(kept.retired.is_empty());
    let left = mirrors(&client, &ns).await;
    assert_eq!(left.len(), 1, "the last key is never removed");
    assert_eq!(left[0].name_any(), mirror_name(&kid(key(0))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_remote_key_is_skipped_and_counted_never_fatal() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("bad-key");
    let ring = seed(&endpoint, &prefix, &[key(0)]).await;
    // Key 1's certificate with key 0's private key, listed in the index as key 1.
    let forged = KeyEntry::from_pem(
        key(1).certificate().to_pem(),
        key(0).private_key().to_pkcs1_pem().unwrap(),
    );
    ring.store()
        .put(&ring.key_name(&kid(key(1))), &forged.to_json(), &[])
        .await
        .unwrap();
    let snapshot = ring.require_snapshot().await.unwrap();
    let mut index = snapshot.index.clone();
    index
        .keys
        .push(IndexEntry::new(key(1).certificate(), SystemTime::now()).unwrap());
    ring.store()
        .compare_and_swap(
            &ring.index_name(),
            &index.to_json(),
            Some(&snapshot.version),
            &[],
        )
        .await
        .unwrap();

    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut mirror, state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;
    let report = mirror.sync().await.unwrap();
    assert_eq!(report.created, [mirror_name(&kid(key(0)))]);
    let errors = state
        .metrics
        .key_load_errors
        .get_or_create(&kseal_controller::metrics::KeyErrorLabels {
            reason: "remote_invalid".into(),
        })
        .get();
    assert_eq!(errors, 1);
    // Not read again while the index is unchanged.
    proxy.reset_counts();
    mirror.sync().await.unwrap();
    assert_eq!(proxy.count("GetSecretValue"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_never_touches_a_secret_it_does_not_own() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("not-ours");
    seed(&endpoint, &prefix, &[key(0)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let theirs: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": mirror_name(&kid(key(0))), "namespace": ns},
        "stringData": {"note": "someone else's"}
    }))
    .unwrap();
    let api = Api::<Secret>::namespaced(client.clone(), &ns);
    let before = api.create(&PostParams::default(), &theirs).await.unwrap();
    let (mut mirror, _state) = mirror_through(&proxy, &prefix, &client, &ns, Duration::ZERO).await;
    let report = mirror.sync().await.unwrap();
    assert!(report.created.is_empty());
    let after = api.get(&before.name_any()).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert!(after.labels().get(MIRROR_LABEL).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_ring_is_reported_as_not_found_with_the_fix() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("no-ring");
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut mirror, _state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;
    let err = mirror.sync().await.unwrap_err();
    assert_eq!(err.reason(), "not_found");
    assert!(err.to_string().contains("kseal keys push --ring"), "{err}");
}

async fn call(state: &State, method: &str, path: &str) -> (http::StatusCode, String) {
    use http_body_util::BodyExt as _;
    let router = kseal_controller::http::api_router(
        state.clone(),
        kseal_controller::http::ApiOptions::default(),
    );
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn refresh_and_readiness_speak_for_the_key_source() {
    let state = State::new();
    let (status, body) = call(&state, "POST", "/v1/refresh").await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
    assert!(body.contains("--key-source"), "{body}");

    state.readiness.key_source_configured();
    state.readiness.key_source_failed(
        "access_denied: access denied: GetSecretValue on kseal/fleet/index".into(),
    );
    state
        .readiness
        .keys_loaded
        .store(true, std::sync::atomic::Ordering::Release);
    state
        .readiness
        .caches_synced
        .store(true, std::sync::atomic::Ordering::Release);
    let (status, body) = call(&state, "GET", "/readyz").await;
    assert_eq!(status, http::StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.contains("key source not read yet: access_denied: access denied: GetSecretValue"),
        "{body}"
    );
    let (status, body) = call(&state, "POST", "/v1/refresh").await;
    assert_eq!(status, http::StatusCode::ACCEPTED, "{body}");

    // A mirror found by the key loader is enough to serve, whatever the ring says.
    state.readiness.key_source_mirror_found();
    let (status, _) = call(&state, "GET", "/readyz").await;
    assert_eq!(status, http::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_key_not_readable_yet_is_retried_at_every_poll() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("lagging-key");
    let ring = seed(&endpoint, &prefix, &[key(0)]).await;
    // Key 1 is in the index, its secret not there yet (a lagging replica region).
    let snapshot = ring.require_snapshot().await.unwrap();
    let mut index = snapshot.index.clone();
    index
        .keys
        .push(IndexEntry::new(key(1).certificate(), SystemTime::now()).unwrap());
    ring.store()
        .compare_and_swap(
            &ring.index_name(),
            &index.to_json(),
            Some(&snapshot.version),
            &[],
        )
        .await
        .unwrap();
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut mirror, _state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;
    let first = mirror.sync().await.unwrap();
    assert_eq!(first.created, [mirror_name(&kid(key(0)))]);

    let entry = KeyEntry::from_pair(key(1)).unwrap();
    ring.store()
        .put(&ring.key_name(&kid(key(1))), &entry.to_json(), &[])
        .await
        .unwrap();
    let second = mirror.sync().await.unwrap();
    assert!(!second.index_read, "the index did not change");
    assert_eq!(second.keys_read, 1, "only the missing key is read again");
    assert_eq!(second.created, [mirror_name(&kid(key(1)))]);
    proxy.reset_counts();
    let third = mirror.sync().await.unwrap();
    assert_eq!(third.keys_read, 0);
    assert_eq!(proxy.count("GetSecretValue"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_over_its_mirror_reads_only_the_index() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("restart-cost");
    seed(&endpoint, &prefix, &[key(0), key(1)]).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let server = TestApiServer::new();
    let client = server.client();
    let ns = namespace(&client, "kseal-ctrl").await;
    let (mut first, _state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;
    assert_eq!(first.sync().await.unwrap().created.len(), 2);

    // A tampered mirror: key 1's Secret now holds key 2, still filed under key 1's kid.
    let api = Api::<Secret>::namespaced(client.clone(), &ns);
    let name = mirror_name(&kid(key(1)));
    let mut tampered = api.get(&name).await.unwrap();
    let data = tampered.data.as_mut().unwrap();
    data.insert(
        "tls.key".into(),
        k8s_openapi::ByteString(
            key(2)
                .private_key()
                .to_pkcs1_pem()
                .unwrap()
                .as_bytes()
                .to_vec(),
        ),
    );
    data.insert(
        "tls.crt".into(),
        k8s_openapi::ByteString(key(2).certificate().to_pem().into_bytes()),
    );
    api.replace(&name, &PostParams::default(), &tampered)
        .await
        .unwrap();

    // A new process (restart or new leader): the index, and only the key it cannot trust.
    let (mut restarted, _state) = mirror_through(&proxy, &prefix, &client, &ns, PATIENCE).await;
    proxy.reset_counts();
    let report = restarted.sync().await.unwrap();
    assert!(report.index_read);
    assert_eq!(
        report.keys_read, 1,
        "key 0 came from the mirror, key 1 did not check out"
    );
    assert_eq!(proxy.count("DescribeSecret"), 1);
    assert_eq!(proxy.count("GetSecretValue"), 2, "the index and key 1");
    // The mirror restored key 1's Secret from the ring.
    assert_eq!(report.repaired, std::slice::from_ref(&name));
    let restored = api.get(&name).await.unwrap();
    let crt = &restored.data.as_ref().unwrap()["tls.crt"].0;
    assert_eq!(
        kseal_keys::Certificate::from_pem(std::str::from_utf8(crt).unwrap())
            .unwrap()
            .id(),
        key(1).id()
    );
    wait_event(&client, &ns, &name, "MirrorRepaired").await;
    assert!(restarted.sync().await.unwrap().repaired.is_empty());
}
