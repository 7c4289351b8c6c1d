//! Recovery driven by the key store answering (issue 40, item 2), and what a restarted
//! controller says while the store is away (item 5): the real AWS SDK against the Secrets
//! Manager emulator behind kseal-testkit's fault proxy, the controller against the test API
//! server and, each scenario again, the reference kube-apiserver.
//!
//! Each scenario keeps the store down until the key-source loop has failed twice (its backoff
//! then stands at 10 s), brings it back and requires `/v1/cert.pem` (and, for a new cluster,
//! the first unseal) within 5 s plus one probe period: the backoff alone would take 10 s. The
//! times measured are printed (`--nocapture`) for docs/benchmarks.md.
//!
//! Without the emulator every test here skips loudly, and fails under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common::*;
use kseal_controller::config::KeySourceConfig;
use kseal_controller::keys::source::PROBE_PERIOD;
use kseal_controller::metrics::{KeySourceLabels, TriggerLabels};
use kseal_controller::{Config, State};
use kseal_keystore::{AwsOptions, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kseal_testkit::sm::{self, FaultProxy};
use tower::ServiceExt as _;

/// Generous: SDK retries and the loop's first backoffs on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// What the issue asks: serving (and unsealing) within 5 s of the store answering again,
/// plus one probe period (and its jitter) for the probe to notice.
fn recovery_deadline() -> Duration {
    Duration::from_secs(5) + PROBE_PERIOD.mul_f64(1.2)
}

fn source(prefix: &str, endpoint: &str) -> KeySourceConfig {
    KeySourceConfig {
        location: Location::SecretsManager {
            prefix: prefix.to_owned(),
            region: None,
        },
        interval: Duration::from_secs(3600),
        retire_grace: Duration::from_secs(7 * 86_400),
        refresh_spacing: Duration::from_secs(5),
        aws: AwsOptions {
            endpoint_url: Some(endpoint.to_owned()),
            region: Some("us-east-1".into()),
            ..AwsOptions::default()
        },
        anchor: None,
    }
}

fn with_source(ctrl: &str, watched: &[&str], source: KeySourceConfig) -> Config {
    let mut c = config(ctrl, watched);
    c.key_source = Some(source);
    c
}

/// A ring at `prefix`, seeded through the emulator itself with `key(0)`.
async fn seed(endpoint: &str, prefix: &str) {
    let source = source(prefix, endpoint);
    let ring = Ring::open(&source.location, &source.aws).await.unwrap();
    ring.push(key(0)).await.unwrap();
}

/// The CRD, a controller namespace and an app namespace on the API server of `client`.
async fn prepare(client: &kube::Client) -> (String, String) {
    ensure_crd(client).await;
    let ctrl = namespace(client, "kseal-ctrl").await;
    let app = namespace(client, "kseal-app").await;
    (ctrl, app)
}

/// Removes what [`prepare`] created (on the reference kube-apiserver, namespaces outlive the
/// test).
async fn clean(client: &kube::Client, ctrl: &str, app: &str) {
    delete_namespace(client, app).await;
    delete_namespace(client, ctrl).await;
}

/// Runs `scenario` on the test API server, with the emulator's endpoint.
async fn on_the_test_server<F, Fut>(scenario: F)
where
    F: FnOnce(String, kube::Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let server = TestApiServer::new();
    scenario(endpoint, server.client()).await;
}

/// Runs `scenario` on the reference kube-apiserver, with the emulator's endpoint.
async fn on_a_real_apiserver<F, Fut>(what: &str, scenario: F)
where
    F: FnOnce(String, kube::Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    if let Some(client) = real_client(what).await {
        scenario(endpoint, client).await;
    }
}

async fn call(state: &State, path: &str) -> (http::StatusCode, String) {
    use http_body_util::BodyExt as _;
    let router = kseal_controller::serve::http::api_router(
        state.clone(),
        kseal_controller::serve::http::ApiOptions::default(),
    );
    let request = http::Request::builder()
        .uri(path)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn failed_syncs(state: &State) -> u64 {
    state
        .metrics
        .key_source_requests
        .get_or_create(&KeySourceLabels {
            operation: "sync".to_owned(),
            outcome: "network".to_owned(),
        })
        .get()
}

fn store_answered_syncs(state: &State) -> u64 {
    state
        .metrics
        .key_source_sync_triggers
        .get_or_create(&TriggerLabels {
            trigger: "store_answered".to_owned(),
        })
        .get()
}

/// Waits until the key-source loop has failed `n` syncs on the store.
async fn wait_failed_syncs(state: &State, n: u64) {
    eventually(
        &format!("{n} syncs failed on the store"),
        PATIENCE,
        || async { Ok((failed_syncs(state) >= n).then_some(())) },
    )
    .await
    .unwrap();
}

/// Waits until `/v1/cert.pem` answers 200, at most `deadline` from `since`; returns the time
/// since `since`.
async fn wait_cert(state: &State, since: Instant, deadline: Duration, what: &str) -> Duration {
    loop {
        let (status, body) = call(state, "/v1/cert.pem").await;
        if status == http::StatusCode::OK {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < deadline,
            "{what}: /v1/cert.pem still answers {status} ({}) {:?} after the store answered again",
            body.trim(),
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restarted_in_a_store_outage_serves_within_seconds_of_the_store_answering() {
    on_the_test_server(restarted_in_an_outage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restarted_in_a_store_outage_serves_within_seconds_of_the_store_answering_on_a_real_apiserver()
 {
    on_a_real_apiserver(
        "a controller restarted in a store outage",
        restarted_in_an_outage,
    )
    .await;
}

async fn restarted_in_an_outage(endpoint: String, client: kube::Client) {
    let prefix = sm::unique_prefix("recovery-restart");
    seed(&endpoint, &prefix).await;
    let proxy = FaultProxy::start(&endpoint).await;
    let (ctrl, app) = prepare(&client).await;
    let config = || with_source(&ctrl, &[&app], source(&prefix, &proxy.url()));
    let first = Running::start(&client, config()).await;
    wait_cert(&first.state, Instant::now(), PATIENCE, "the first start").await;
    first.stop().await;

    proxy.set_down(true);
    let restarted = Running::start(&client, config()).await;
    wait_failed_syncs(&restarted.state, 1).await;
    // No anchor is pinned (no --ring-anchor): the ring-state Secret the first start wrote is
    // ignored, and the answers say that, not that there is none.
    let (status, body) = eventually("the 503 names the ignored Secret", PATIENCE, || async {
        let (status, body) = call(&restarted.state, "/v1/cert.pem").await;
        Ok(body.contains("ignored").then_some((status, body)))
    })
    .await
    .unwrap();
    assert_eq!(status, http::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("kseal-ring-state-"), "{body}");
    assert!(
        body.contains("ignored: no ring anchor pinned (--ring-anchor)"),
        "{body}"
    );
    assert!(!body.contains("no ring-state Secret"), "{body}");
    let (status, readyz) = call(&restarted.state, "/readyz").await;
    assert_eq!(status, http::StatusCode::OK, "the mirror keeps it ready");
    assert!(
        readyz.contains("ignored: no ring anchor pinned (--ring-anchor)")
            && !readyz.contains("no ring-state Secret"),
        "{readyz}"
    );

    // Back after the second failure: the backoff now stands at 10 s.
    wait_failed_syncs(&restarted.state, 2).await;
    proxy.set_down(false);
    let back = Instant::now();
    let took = wait_cert(
        &restarted.state,
        back,
        recovery_deadline(),
        "a controller restarted in an outage",
    )
    .await;
    assert!(store_answered_syncs(&restarted.state) >= 1);
    assert_eq!(restarted.state.readiness.ring_state_ignored(), None);
    eprintln!(
        "store recovery: restarted in an outage: /v1/cert.pem 200 {} ms after the store answered",
        took.as_millis()
    );
    restarted.stop().await;
    clean(&client, &ctrl, &app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_serves_and_unseals_within_seconds_of_the_store_answering() {
    on_the_test_server(new_cluster_in_an_outage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_serves_and_unseals_within_seconds_of_the_store_answering_on_a_real_apiserver()
 {
    on_a_real_apiserver(
        "a new cluster born in a store outage",
        new_cluster_in_an_outage,
    )
    .await;
}

async fn new_cluster_in_an_outage(endpoint: String, client: kube::Client) {
    let prefix = sm::unique_prefix("recovery-new-cluster");
    seed(&endpoint, &prefix).await;
    let proxy = FaultProxy::start(&endpoint).await;
    proxy.set_down(true);
    let (ctrl, app) = prepare(&client).await;
    create_ss(
        &client,
        &seal(&secret(&app, "waiting", &[("a", "1")]), key(0)),
    )
    .await;
    let running = Running::start(
        &client,
        with_source(&ctrl, &[&app], source(&prefix, &proxy.url())),
    )
    .await;
    wait_failed_syncs(&running.state, 2).await;
    assert!(running.state.keys.ring().is_empty(), "fail closed: no key");
    assert_eq!(
        call(&running.state, "/v1/cert.pem").await.0,
        http::StatusCode::SERVICE_UNAVAILABLE
    );

    proxy.set_down(false);
    let back = Instant::now();
    let served = wait_cert(&running.state, back, recovery_deadline(), "a new cluster").await;
    let remaining = recovery_deadline().saturating_sub(back.elapsed());
    tokio::time::timeout(
        remaining,
        wait_secret(&client, &app, "waiting", "the first unseal", |s| {
            data_of(s) == map(&[("a", "1")])
        }),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "a new cluster: no unseal within {:?} of the store answering again",
            recovery_deadline()
        )
    });
    let unsealed = back.elapsed();
    assert!(store_answered_syncs(&running.state) >= 1);
    eprintln!(
        "store recovery: new cluster: /v1/cert.pem 200 {} ms, first unseal {} ms after the store answered",
        served.as_millis(),
        unsealed.as_millis()
    );
    running.stop().await;
    clean(&client, &ctrl, &app).await;
}

fn restored_key_syncs(state: &State) -> u64 {
    state
        .metrics
        .key_source_sync_triggers
        .get_or_create(&TriggerLabels {
            trigger: "key_restored".to_owned(),
        })
        .get()
}

/// A key the verified index lists but the store does not hold (deleted by hand, then put back
/// with `aws secretsmanager restore-secret` within its recovery window; or a replica region
/// not caught up): the sync loads the other keys and succeeds, so no backoff runs, and the
/// key used to be read again only at the next poll (an hour by default) while the objects it
/// sealed waited. The leader now looks for it between polls: the objects unseal within 5 s
/// of the key being back, and wait meanwhile without reporting a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_restored_in_the_store_unseals_its_objects_within_seconds() {
    on_the_test_server(key_restored).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_restored_in_the_store_unseals_its_objects_within_seconds_on_a_real_apiserver() {
    on_a_real_apiserver("a key restored in the store", key_restored).await;
}

async fn key_restored(endpoint: String, client: kube::Client) {
    use kseal_api::constants::SEALING_KEY_ANNOTATION;
    let prefix = sm::unique_prefix("recovery-key-restored");
    seed(&endpoint, &prefix).await;
    let ring = {
        let source = source(&prefix, &endpoint);
        Ring::open(&source.location, &source.aws).await.unwrap()
    };
    ring.push(key(1)).await.unwrap();
    let kid = kseal_keystore::Kid::of(key(1).public_key());
    let name = format!("{prefix}/keys/{kid}");
    let deleted = sm::admin(
        &endpoint,
        "DeleteSecret",
        serde_json::json!({"SecretId": name, "RecoveryWindowInDays": 7}),
    )
    .await;
    assert!(deleted.is_ok(), "{deleted:?}");

    let proxy = FaultProxy::start(&endpoint).await;
    let (ctrl, app) = prepare(&client).await;
    // Sealed with the missing key: one with kseal's sealing-key hint, one as kubeseal seals.
    create_ss(
        &client,
        &seal(&secret(&app, "hinted", &[("a", "1")]), key(1)),
    )
    .await;
    let mut unhinted = seal(&secret(&app, "unhinted", &[("b", "2")]), key(1));
    if let Some(a) = unhinted.metadata.annotations.as_mut() {
        a.remove(SEALING_KEY_ANNOTATION);
    }
    create_ss(&client, &unhinted).await;
    let running = Running::start(
        &client,
        with_source(&ctrl, &[&app], source(&prefix, &proxy.url())),
    )
    .await;
    // The active key loads and serves; the deleted one is counted missing.
    wait_cert(&running.state, Instant::now(), PATIENCE, "the active key").await;
    eventually("the deleted key counted missing", PATIENCE, || async {
        Ok((running.state.metrics.key_source_keys_missing.get() == 1).then_some(()))
    })
    .await
    .unwrap();
    // A while missing: the probes' period grows with it (a tenth of the time missing).
    proxy.reset_counts();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let probes = proxy.count("DescribeSecret");
    assert!(
        (1..=8).contains(&probes),
        "{probes} DescribeSecret calls in 4 s while one key was missing"
    );
    let sealed: kube::Api<kseal_api::SealedSecret> = kube::Api::namespaced(client.clone(), &app);
    for object in ["hinted", "unhinted"] {
        let ss = sealed.get(object).await.unwrap();
        assert_ne!(
            ss.synced_condition().map(|c| c.status.as_str()),
            Some("False"),
            "{object}: a failure reported for a key the index lists and the store will give back"
        );
        assert!(
            events(&client, &app, object, "ErrUnsealFailed")
                .await
                .is_empty()
        );
    }

    let restored = sm::admin(
        &endpoint,
        "RestoreSecret",
        serde_json::json!({"SecretId": name}),
    )
    .await;
    assert!(restored.is_ok(), "{restored:?}");
    let back = Instant::now();
    for (object, data) in [
        ("hinted", map(&[("a", "1")])),
        ("unhinted", map(&[("b", "2")])),
    ] {
        let remaining = recovery_deadline().saturating_sub(back.elapsed());
        tokio::time::timeout(
            remaining,
            wait_secret(&client, &app, object, "the unseal", |s| data_of(s) == data),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{object}: no unseal within {:?} of its key being restored",
                recovery_deadline()
            )
        });
    }
    let unsealed = back.elapsed();
    assert!(restored_key_syncs(&running.state) >= 1);
    assert_eq!(running.state.metrics.key_source_keys_missing.get(), 0);
    eprintln!(
        "store recovery: key restored after {probes} probes in 4 s: both objects unsealed {} ms \
         after the restore",
        unsealed.as_millis()
    );
    running.stop().await;
    clean(&client, &ctrl, &app).await;
}
