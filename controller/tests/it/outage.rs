//! The controller under API-server faults: an outage that fails every Secret create costs
//! no RSA work beyond the values unsealed (kseal-testkit's API server and the reference
//! kube-apiserver), and a paused API server (requests that get no answer) is reported within
//! 15 s (the test server answering nothing, and a private reference kube-apiserver stopped
//! with SIGSTOP).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use kseal_controller::metrics::OutcomeLabels;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;

fn rsa_by_outcome(running: &Running, outcome: &str) -> u64 {
    running
        .state
        .metrics
        .unseal_rsa_operations
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .get()
}

/// A client that sends every request through `client`, except Secret creates while
/// `failing` is set: those are answered `503 ServiceUnavailable` without reaching the server
/// (an outage of writes; the same on the test server and a real kube-apiserver).
fn failing_creates(client: kube::Client, failing: Arc<AtomicBool>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        let fail = failing.load(Ordering::Acquire)
            && request.method() == http::Method::POST
            && request.uri().path().ends_with("/secrets");
        async move {
            if fail {
                let status = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": "injected outage",
                    "reason": "ServiceUnavailable", "code": 503,
                });
                return Ok(http::Response::builder()
                    .status(503)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&status).unwrap(),
                    ))
                    .unwrap());
            }
            client.send(request).await
        }
    });
    kube::Client::new(service, "default")
}

/// Every Secret create fails (503) for a while, so each object's create is retried several
/// times with backoff (and at once each time a status write shows the API server answering):
/// the RSA work stays that of unsealing each value once (≤ 1.1×), since a retry reuses the
/// result of the attempt before.
async fn a_create_outage_costs_no_rsa_work_beyond_the_values_unsealed(client: kube::Client) {
    const OBJECTS: usize = 12;
    const ITEMS: usize = 2;
    let cluster = Cluster::new(client.clone()).await;
    let app = cluster.app.clone();
    let failing = Arc::new(AtomicBool::new(false));
    let controller_client = failing_creates(client.clone(), failing.clone());
    let running = Running::start(&controller_client, cluster.config()).await;
    eventually("the key is loaded", DEADLINE, || async {
        Ok((!running.state.keys.ring().is_empty()).then_some(()))
    })
    .await
    .unwrap();

    failing.store(true, Ordering::Release);
    for i in 0..OBJECTS {
        let name = format!("s{i}");
        create_ss(
            &client,
            &seal(&secret(&app, &name, &[("a", "1"), ("b", "2")]), key(0)),
        )
        .await;
    }
    // Each object's create failed at least three times.
    eventually("every create failed three times", DEADLINE, || async {
        Ok((running.reconciles("failed") >= 3 * OBJECTS as u64).then_some(()))
    })
    .await
    .unwrap();
    let failed = running.reconciles("failed");
    failing.store(false, Ordering::Release);
    for i in 0..OBJECTS {
        let name = format!("s{i}");
        let s = wait_secret(&client, &app, &name, "the Secret", |_| true).await;
        assert_eq!(data_of(&s), map(&[("a", "1"), ("b", "2")]));
        wait_synced(&client, &app, &name, "True", "Unsealed").await;
    }
    let values = (OBJECTS * ITEMS) as u64;
    let spent = running.rsa_operations();
    eprintln!(
        "{failed} failed creates of {OBJECTS} objects: {spent} RSA operations for {values} values"
    );
    assert!(
        spent * 10 <= values * 11,
        "{spent} RSA operations for {values} values through the outage"
    );
    assert!(
        spent >= values,
        "{spent} RSA operations for {values} values"
    );
    // Visible in metrics: the work was kept through the failed creates, then written.
    assert!(rsa_by_outcome(&running, "retained") >= values / 2);
    assert!(running.state.metrics.unseal_results_reused.get() >= OBJECTS as u64);
    let text = running.state.metrics.encode();
    assert!(
        text.contains("kseal_unseal_rsa_operations_total{outcome=\"retained\"}"),
        "{text}"
    );
    assert_eq!(rsa_by_outcome(&running, "unseal_failed"), 0);
    running.stop().await;
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_outage_costs_no_rsa_work_beyond_the_values_unsealed_on_the_test_server() {
    a_create_outage_costs_no_rsa_work_beyond_the_values_unsealed(TestApiServer::new().client())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_outage_costs_no_rsa_work_beyond_the_values_unsealed_on_a_real_apiserver() {
    if let Some(client) = real_client("RSA work through a create outage").await {
        a_create_outage_costs_no_rsa_work_beyond_the_values_unsealed(client).await;
    }
}

/// The metrics port's `/readyz` body.
async fn readyz_detail(state: &kseal_controller::State) -> String {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let router = kseal_controller::serve::http::metrics_router(state.clone());
    let request = http::Request::builder()
        .uri("/readyz")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// A paused API server (as under SIGSTOP: connections accepted, nothing answered) in a quiet
/// cluster, with no leader election: no request fails, each just never ends. The probe's
/// deadline reports it within 15 s in the metric and the detailed `/readyz`; its answers
/// report the return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_api_server_is_reported_within_fifteen_seconds() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    create_ss(&client, &seal(&secret(&app, "s", &[("k", "v")]), key(0))).await;
    let running = Running::start(&client, cluster.config()).await;
    wait_synced(&client, &app, "s", "True", "Unsealed").await;
    let state = &running.state;
    let reachable = |v: u8| format!("kseal_api_server_reachable {v}\n");
    assert!(state.metrics.encode().contains(&reachable(1)));

    // Every request from now on waits 40 s for its answer: longer than any deadline.
    server.faults().set_delay(Some(Duration::from_secs(40)));
    let paused = std::time::Instant::now();
    eventually("the pause is reported", Duration::from_secs(30), || async {
        Ok((!state.api.is_reachable()).then_some(()))
    })
    .await
    .unwrap();
    let seen_after = paused.elapsed();
    assert!(
        seen_after <= Duration::from_secs(15),
        "a paused API server was reported after {seen_after:?}"
    );
    assert!(state.metrics.encode().contains(&reachable(0)));
    let detail = readyz_detail(state).await;
    assert!(detail.contains("api server: unreachable for"), "{detail}");
    eprintln!("a paused API server was reported after {seen_after:.1?}");

    server.faults().set_delay(None);
    eventually("the return is reported", DEADLINE, || async {
        Ok(state.api.is_reachable().then_some(()))
    })
    .await
    .unwrap();
    assert!(state.metrics.encode().contains(&reachable(1)));
    assert!(!readyz_detail(state).await.contains("api server"));
    running.stop().await;
    cluster.cleanup().await;
}

/// A reference kube-apiserver of this test's own (`tests/refapi/start.sh` with a fresh state
/// directory): pausing the shared one would stall every other test. Stopped, and resumed
/// first if paused, when dropped.
struct PrivateApiServer {
    state: String,
    kubeconfig: String,
    apiserver_pid: String,
}

impl PrivateApiServer {
    /// Starts one when the reference binaries are there (`KSEAL_REFAPI_KUBECONFIG` is set, as
    /// `scripts/test.sh` does once they are built); `None`: skipped loudly, or a failure
    /// under `CI=true`.
    fn start(test: &str) -> Option<Self> {
        std::env::var("KSEAL_REFAPI_KUBECONFIG")
            .ok()
            .filter(|p| !p.is_empty())
            .or_else(|| {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "KSEAL_REFAPI_KUBECONFIG is not set, but CI=true: {test} must run against the reference kube-apiserver"
                );
                kseal_testkit::skipped(&format!(
                    "SKIPPED: {test} against a real kube-apiserver needs KSEAL_REFAPI_KUBECONFIG (scripts/test.sh sets it)"
                ));
                None
            })?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/refapi/start.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .env_remove("KSEAL_REFAPI_STATE")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tests/refapi/start.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let var = |name: &str| -> String {
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("start.sh printed no {name}:\n{stdout}"));
            line.trim_matches('\'').to_owned()
        };
        let state = var("KSEAL_REFAPI_STATE");
        let apiserver_pid = std::fs::read_to_string(format!("{state}/pids/kube-apiserver.pid"))
            .unwrap()
            .trim()
            .to_owned();
        Some(Self {
            kubeconfig: var("KSEAL_REFAPI_KUBECONFIG"),
            state,
            apiserver_pid,
        })
    }

    async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(cfg).unwrap()
    }

    /// Sends `signal` (`STOP`, `CONT`) to its kube-apiserver.
    fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.apiserver_pid.clone()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {}", self.apiserver_pid);
    }
}

impl Drop for PrivateApiServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.apiserver_pid])
            .status();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/refapi/stop.sh");
        let _ = std::process::Command::new("bash")
            .args([script, &self.state])
            .output();
    }
}

/// A paused reference kube-apiserver (SIGSTOP: the kernel still accepts connections, the
/// server answers nothing) is reported within 15 s, and its return once it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_api_server_is_reported_within_fifteen_seconds_on_a_real_apiserver() {
    let Some(server) = PrivateApiServer::start("a paused API server") else {
        return;
    };
    let client = server.client().await;
    let cluster = Cluster::new(client.clone()).await;
    let app = cluster.app.clone();
    create_ss(&client, &seal(&secret(&app, "s", &[("k", "v")]), key(0))).await;
    let running = Running::start(&client, cluster.config()).await;
    wait_synced(&client, &app, "s", "True", "Unsealed").await;
    let state = &running.state;

    server.signal("STOP");
    let paused = std::time::Instant::now();
    eventually("the pause is reported", Duration::from_secs(30), || async {
        Ok((!state.api.is_reachable()).then_some(()))
    })
    .await
    .unwrap();
    let seen_after = paused.elapsed();
    assert!(
        seen_after <= Duration::from_secs(15),
        "a paused kube-apiserver was reported after {seen_after:?}"
    );
    assert!(
        state
            .metrics
            .encode()
            .contains("kseal_api_server_reachable 0\n")
    );
    let detail = readyz_detail(state).await;
    assert!(detail.contains("api server: unreachable for"), "{detail}");
    eprintln!("a paused kube-apiserver was reported after {seen_after:.1?}");

    server.signal("CONT");
    eventually("the return is reported", DEADLINE, || async {
        Ok(state.api.is_reachable().then_some(()))
    })
    .await
    .unwrap();
    running.stop().await;
    cluster.cleanup().await;
}

/// The leader election alone (no reconciler, so no probe) reports a paused API server: the
/// leader's renewal and a follower's attempt get no answer within their deadline, which
/// counts towards the outage (a follower's attempt used to wait forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_requests_without_an_answer_count_towards_the_outage() {
    use kseal_controller::cluster::leader::{self, LeaderConfig};
    let server = TestApiServer::new();
    let config = |identity: &str| LeaderConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        renew_period: Duration::from_millis(300),
        retry_period: Duration::from_millis(300),
        ..LeaderConfig::new("kube-system", "kseal-outage", identity)
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let start = |identity: &str| {
        let state = kseal_controller::State::new();
        let mut stopped = stopped.clone();
        let task = tokio::spawn(leader::run(
            server.client(),
            state.clone(),
            Some(config(identity)),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
        (state, task)
    };
    let (leading, leader_task) = start("a");
    eventually("a leads", DEADLINE, || async {
        Ok(leading.is_leader().then_some(()))
    })
    .await
    .unwrap();
    let (following, follower_task) = start("b");
    // The follower has asked at least once and got its answer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!following.is_leader());
    assert!(leading.api.is_reachable() && following.api.is_reachable());

    server.faults().set_delay(Some(Duration::from_secs(40)));
    let paused = std::time::Instant::now();
    eventually("both report the pause", DEADLINE, || async {
        Ok((!leading.api.is_reachable() && !following.api.is_reachable()).then_some(()))
    })
    .await
    .unwrap();
    assert!(
        paused.elapsed() < Duration::from_secs(5),
        "{:?}",
        paused.elapsed()
    );
    assert!(!leading.is_leader(), "no renewal: the leader stepped down");
    for state in [&leading, &following] {
        let line = state.api.readyz_line().unwrap();
        assert!(line.contains("failed requests"), "{line}");
    }

    server.faults().set_delay(None);
    eventually("the return is reported", DEADLINE, || async {
        Ok((leading.api.is_reachable() && following.api.is_reachable()).then_some(()))
    })
    .await
    .unwrap();
    stop.send_replace(true);
    for task in [leader_task, follower_task] {
        let _ = tokio::time::timeout(DEADLINE, task).await;
    }
}
