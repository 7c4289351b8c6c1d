//! Leader election against the stateful test API server (`kseal-testkit`), and against a
//! real kube-apiserver when `KSEAL_REFAPI_KUBECONFIG` is set.
//!
//! Timings are short (1 s leases) so takeovers happen quickly; assertions never depend on
//! timing: they poll with generous deadlines, and a sampler checks throughout that two
//! candidates never consider themselves leader at the same instant.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kseal_controller::State;
use kseal_controller::cluster::leader::{self, LeaderConfig};
use kseal_testkit::{FaultRule, TestApiServer};
use kube::Api;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt as _;

const NAMESPACE: &str = "kube-system";
const LEASE: &str = "kseal-controller";
/// How long a poll may wait for something that should happen within a few lease periods.
const PATIENCE: Duration = Duration::from_secs(30);

fn short(identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        renew_period: Duration::from_millis(150),
        retry_period: Duration::from_millis(100),
        ..LeaderConfig::new(NAMESPACE, LEASE, identity)
    }
}

/// A lease (and renew deadline) much longer than [`PATIENCE`]: whatever a poll sees happen
/// did not wait for the lease to expire or the deadline to pass.
fn long(identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_duration: Duration::from_secs(120),
        renew_deadline: Duration::from_secs(80),
        renew_period: Duration::from_millis(200),
        retry_period: Duration::from_millis(100),
        ..LeaderConfig::new(NAMESPACE, LEASE, identity)
    }
}

/// An in-process client whose "network" can be cut: while `cut` is set, every request fails
/// before reaching the server.
fn partitionable_client(server: &TestApiServer) -> (kube::Client, Arc<AtomicBool>) {
    let cut = Arc::new(AtomicBool::new(false));
    let flag = cut.clone();
    let router = server.router();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let router = router.clone();
        let cut = flag.load(Ordering::SeqCst);
        async move {
            if cut {
                return Err::<_, tower::BoxError>("network partition (test)".into());
            }
            Ok(router
                .oneshot(request)
                .await
                .expect("axum routers are infallible"))
        }
    });
    (kube::Client::new(service, "default"), cut)
}

struct Candidate {
    name: String,
    state: State,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<kseal_controller::Result<()>>,
}

impl Candidate {
    fn start(client: kube::Client, config: LeaderConfig) -> Self {
        let state = State::new();
        let (stop, stopped) = oneshot::channel::<()>();
        let name = config.identity.clone();
        let task = tokio::spawn(leader::run(client, state.clone(), Some(config), async {
            let _ = stopped.await;
        }));
        Self {
            name,
            state,
            stop: Some(stop),
            task,
        }
    }

    fn is_leader(&self) -> bool {
        self.state.is_leader()
    }

    /// Graceful shutdown: releases the Lease if held.
    async fn stop(mut self) -> kseal_controller::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(PATIENCE, &mut self.task)
            .await
            .expect("leader::run returns after shutdown")
            .expect("leader task")
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Samples every candidate's flag every millisecond; `check()` fails the test if two were
/// ever leader at the same instant.
struct Sampler {
    violated: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Sampler {
    fn start(states: Vec<State>) -> Self {
        let violated = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (v, d) = (violated.clone(), done.clone());
        let task = tokio::spawn(async move {
            while !d.load(Ordering::SeqCst) {
                if states.iter().filter(|s| s.is_leader()).count() > 1 {
                    v.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        Self {
            violated,
            done,
            task,
        }
    }

    async fn check(self) {
        self.done.store(true, Ordering::SeqCst);
        self.task.await.expect("sampler");
        assert!(
            !self.violated.load(Ordering::SeqCst),
            "two candidates were leader at the same instant"
        );
    }
}

async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until exactly one of `candidates` is leader and returns its index.
async fn wait_for_one_leader(candidates: &[&Candidate]) -> usize {
    eventually("one candidate is leader", || async {
        candidates.iter().filter(|c| c.is_leader()).count() == 1
    })
    .await;
    candidates
        .iter()
        .position(|c| c.is_leader())
        .expect("one leader")
}

async fn lease(client: &kube::Client, namespace: &str, name: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .expect("reading the lease")
}

fn holder(lease: &Option<Lease>) -> Option<String> {
    lease
        .as_ref()?
        .spec
        .as_ref()?
        .holder_identity
        .clone()
        .filter(|h| !h.is_empty())
}

fn transitions(lease: &Option<Lease>) -> i32 {
    lease
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_candidates_wins_and_the_lease_names_it() {
    let server = TestApiServer::new();
    let a = Candidate::start(server.client(), short("a"));
    let b = Candidate::start(server.client(), short("b"));
    let sampler = Sampler::start(vec![a.state.clone(), b.state.clone()]);
    let winner = [&a, &b][wait_for_one_leader(&[&a, &b]).await].name.clone();
    let client = server.client();
    let current = lease(&client, NAMESPACE, LEASE).await;
    assert_eq!(holder(&current), Some(winner.clone()));
    let spec = current.and_then(|l| l.spec).expect("spec");
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert!(spec.renew_time.is_some() && spec.acquire_time.is_some());
    // Let several renewals happen, then check that the lease was renewed by the winner.
    let renewed = spec.renew_time;
    eventually("the leader renews", || async {
        let l = lease(&client, NAMESPACE, LEASE).await;
        holder(&l).as_deref() == Some(winner.as_str())
            && l.and_then(|l| l.spec).and_then(|s| s.renew_time) > renewed
    })
    .await;
    sampler.check().await;
    a.stop().await.expect("release");
    b.stop().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_candidate_takes_over_when_the_leader_stops_renewing() {
    let server = TestApiServer::new();
    let (client_a, cut_a) = partitionable_client(&server);
    let (client_b, cut_b) = partitionable_client(&server);
    let a = Candidate::start(client_a, short("a"));
    let b = Candidate::start(client_b, short("b"));
    let sampler = Sampler::start(vec![a.state.clone(), b.state.clone()]);
    let first = wait_for_one_leader(&[&a, &b]).await;
    let (leader, follower, cut) = if first == 0 {
        (&a, &b, &cut_a)
    } else {
        (&b, &a, &cut_b)
    };
    let client = server.client();
    let before = transitions(&lease(&client, NAMESPACE, LEASE).await);

    // The leader loses the API server: it must step down by itself, and the follower take
    // over once the lease expired.
    cut.store(true, Ordering::SeqCst);
    eventually("the partitioned leader steps down", || async {
        !leader.is_leader()
    })
    .await;
    eventually("the follower takes over", || async { follower.is_leader() }).await;
    let now = lease(&client, NAMESPACE, LEASE).await;
    assert_eq!(holder(&now), Some(follower.name.clone()));
    assert_eq!(transitions(&now), before + 1);
    assert!(leader.state.metrics.encode().contains("kseal_is_leader 0"));
    assert!(
        follower
            .state
            .metrics
            .encode()
            .contains("kseal_is_leader 1")
    );

    // The old leader comes back and stays a follower while the lease is held.
    cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!leader.is_leader() || !follower.is_leader());
    sampler.check().await;
    a.stop().await.expect("release");
    b.stop().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_release_hands_over_without_waiting_for_expiry() {
    let server = TestApiServer::new();
    let a = Candidate::start(server.client(), long("a"));
    let b = Candidate::start(server.client(), long("b"));
    let sampler = Sampler::start(vec![a.state.clone(), b.state.clone()]);
    let first = wait_for_one_leader(&[&a, &b]).await;
    let (leader, follower) = if first == 0 { (a, b) } else { (b, a) };
    let follower_state = follower.state.clone();

    leader.stop().await.expect("release");
    let client = server.client();
    let released = holder(&lease(&client, NAMESPACE, LEASE).await);
    assert!(
        released.is_none() || released.as_deref() == Some(follower.name.as_str()),
        "released on shutdown: {released:?}"
    );
    // The lease lasts longer than PATIENCE, so a takeover within it used the release.
    eventually("the follower takes over", || async {
        follower_state.is_leader()
    })
    .await;
    let now = lease(&client, NAMESPACE, LEASE).await;
    assert_eq!(holder(&now), Some(follower.name.clone()));
    assert_eq!(
        now.and_then(|l| l.spec)
            .and_then(|s| s.lease_duration_seconds),
        Some(120)
    );
    sampler.check().await;
    follower.stop().await.expect("release");
    let released = lease(&client, NAMESPACE, LEASE).await;
    assert_eq!(holder(&released), None, "released on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_renew_makes_the_leader_step_down() {
    let server = TestApiServer::new();
    // Long deadline: stepping down well before it can only come from the 409.
    let a = Candidate::start(server.client(), long("a"));
    eventually("a leads", || async { a.is_leader() }).await;
    server.faults().fail(
        FaultRule::new(409)
            .method("PUT")
            .resource("leases")
            .times(10_000),
    );
    // The renew deadline is longer than PATIENCE: stepping down within it is the 409's doing.
    eventually("a steps down after the conflict", || async {
        !a.is_leader()
    })
    .await;
    server.faults().clear();
    eventually("a leads again once writes succeed", || async {
        a.is_leader()
    })
    .await;
    a.stop().await.expect("release");
}

/// Renewals that cannot reach the API server count towards its outage (logged once, with
/// the other failures) instead of a warning every retry period, and one that goes through
/// ends the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_report_an_unreachable_api_server_and_its_return() {
    let server = TestApiServer::new();
    let (client, cut) = partitionable_client(&server);
    // Long deadline: the leader keeps its leadership through the short partition.
    let a = Candidate::start(client, long("a"));
    eventually("a leads", || async { a.is_leader() }).await;
    assert!(a.state.api.is_reachable());
    cut.store(true, Ordering::SeqCst);
    eventually("renewals count as failures of the API server", || async {
        a.state
            .api
            .outage()
            .is_some_and(|(_, failures)| failures >= 3)
    })
    .await;
    cut.store(false, Ordering::SeqCst);
    eventually("a renewal ends the outage", || async {
        a.state.api.is_reachable()
    })
    .await;
    assert!(a.is_leader());
    a.stop().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_does_not_take_a_lease_that_another_holder_renews() {
    let server = TestApiServer::new();
    // A 3 s lease renewed every 150 ms: b would have to see no renewal for 3 s.
    let medium = |identity: &str| LeaderConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        ..short(identity)
    };
    let a = Candidate::start(server.client(), medium("a"));
    eventually("a leads", || async { a.is_leader() }).await;
    let b = Candidate::start(server.client(), medium("b"));
    let sampler = Sampler::start(vec![a.state.clone(), b.state.clone()]);
    // Several lease durations pass; a keeps renewing, b never leads.
    let client = server.client();
    for _ in 0..3 {
        let seen = lease(&client, NAMESPACE, LEASE)
            .await
            .and_then(|l| l.metadata.resource_version);
        eventually("a renews", || async {
            let now = lease(&client, NAMESPACE, LEASE).await;
            holder(&now).as_deref() == Some("a")
                && now.and_then(|l| l.metadata.resource_version) != seen
        })
        .await;
        assert!(!b.is_leader());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sampler.check().await;
    b.stop().await.expect("release");
    a.stop().await.expect("release");
}

#[tokio::test]
async fn without_election_the_replica_is_always_leader() {
    let server = TestApiServer::new();
    let state = State::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(leader::run(server.client(), state.clone(), None, async {
        let _ = stopped.await;
    }));
    eventually("leader", || async { state.is_leader() }).await;
    assert!(state.metrics.encode().contains("kseal_is_leader 1"));
    stop.send(()).expect("running");
    task.await.expect("task").expect("ok");
    assert!(server.requests().is_empty(), "no Lease traffic");
}

/// A client for the reference kube-apiserver, or `None` (skip) when it is not configured.
async fn real_client() -> Option<kube::Client> {
    match std::env::var("KSEAL_REFAPI_KUBECONFIG") {
        Ok(path) if !path.is_empty() => {
            let kc = kube::config::Kubeconfig::read_from(&path).expect("reading kubeconfig");
            let cfg = kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .expect("loading kubeconfig");
            Some(kube::Client::try_from(cfg).expect("building client"))
        }
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "KSEAL_REFAPI_KUBECONFIG is not set, but CI=true: CI must run leader election against the reference kube-apiserver"
            );
            kseal_testkit::skipped(
                "SKIPPED: set KSEAL_REFAPI_KUBECONFIG (scripts/test.sh does) to run leader election against a real kube-apiserver",
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_apiserver_elects_one_leader_and_hands_over_on_release() {
    let Some(client) = real_client().await else {
        return;
    };
    let namespace = "default";
    let name = format!(
        "kseal-leader-test-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_millisecond()
    );
    let config = |identity: &str| LeaderConfig {
        namespace: namespace.to_owned(),
        lease_name: name.clone(),
        ..long(identity)
    };
    let a = Candidate::start(client.clone(), config("a"));
    let b = Candidate::start(client.clone(), config("b"));
    let sampler = Sampler::start(vec![a.state.clone(), b.state.clone()]);
    let first = wait_for_one_leader(&[&a, &b]).await;
    let (leader, follower) = if first == 0 { (a, b) } else { (b, a) };
    assert_eq!(
        holder(&lease(&client, namespace, &name).await),
        Some(leader.name.clone())
    );
    let before = transitions(&lease(&client, namespace, &name).await);
    leader.stop().await.expect("release");
    let follower_state = follower.state.clone();
    eventually("the follower takes over", || async {
        follower_state.is_leader()
    })
    .await;
    let now = lease(&client, namespace, &name).await;
    assert_eq!(holder(&now), Some(follower.name.clone()));
    assert_eq!(transitions(&now), before + 1);
    sampler.check().await;
    follower.stop().await.expect("release");
    assert_eq!(holder(&lease(&client, namespace, &name).await), None);
    Api::<Lease>::namespaced(client, namespace)
        .delete(&name, &Default::default())
        .await
        .expect("deleting the test lease");
}
