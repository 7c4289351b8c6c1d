//! Controller flow under start-up and leadership changes, against kseal-testkit's API server:
//! nothing is reconciled before the first keys load, and no write leaves a replica whose
//! leadership ended (the fence).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::controller::Action;

/// reconcile.rs's `NOT_LEADER_RECHECK`: a leader past its lease deadline rechecks this often.
const LEADER_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

fn reconciles(state: &kseal_controller::State, outcome: &str) -> u64 {
    state
        .metrics
        .reconciles
        .get_or_create(&kseal_controller::metrics::OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .get()
}

/// A new cluster: SealedSecrets exist before any key does. They wait untouched (no
/// `UnsealFailed`, no Warning event, no status, no error count) and are unsealed as soon as
/// the first key loads.
async fn sealed_secrets_wait_untouched_until_the_first_keys_load(client: kube::Client) {
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let app = namespace(&client, "kseal-app").await;
    let names = ["a", "b", "c"];
    for name in names {
        create_ss(&client, &seal(&secret(&app, name, &[("k", name)]), key(0))).await;
    }
    let running = Running::start(&client, config(&ctrl, &[&app])).await;
    eventually("every object was considered", DEADLINE, || async {
        Ok((reconciles(&running.state, "waiting_for_keys") >= 3).then_some(()))
    })
    .await
    .unwrap();
    let sealed: Api<SealedSecret> = Api::namespaced(client.clone(), &app);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &app);
    for name in names {
        let ss = sealed.get(name).await.unwrap();
        assert!(
            ss.status.is_none(),
            "{name}: no status while no key is loaded"
        );
        assert!(secrets.get_opt(name).await.unwrap().is_none());
        assert!(
            events(&client, &app, name, "ErrUnsealFailed")
                .await
                .is_empty()
        );
    }
    assert_eq!(reconciles(&running.state, "failed"), 0);
    assert!(
        !running
            .state
            .metrics
            .encode()
            .contains("sealed_secrets_controller_unseal_errors_total{")
    );

    put_key(
        &client,
        &ctrl,
        "sealed-secrets-key0",
        key(0),
        Some("active"),
    )
    .await;
    for name in names {
        wait_synced(&client, &app, name, "True", "Unsealed").await;
        let s = wait_secret(&client, &app, name, "the Secret", |_| true).await;
        assert_eq!(data_of(&s)["k"], name);
        assert!(
            events(&client, &app, name, "ErrUnsealFailed")
                .await
                .is_empty()
        );
    }
    assert_eq!(reconciles(&running.state, "failed"), 0);
    running.stop().await;
    delete_namespace(&client, &app).await;
    delete_namespace(&client, &ctrl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_secrets_wait_untouched_until_the_first_keys_load_on_the_test_server() {
    sealed_secrets_wait_untouched_until_the_first_keys_load(TestApiServer::new().client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_secrets_wait_untouched_until_the_first_keys_load_on_a_real_apiserver() {
    if let Some(client) = real_client("waiting for the first keys").await {
        sealed_secrets_wait_untouched_until_the_first_keys_load(client).await;
    }
}

/// A key that is genuinely missing from a loaded ring still fails, with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_missing_from_a_loaded_ring_still_fails_with_its_reason() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let client = cluster.client.clone();
    let app = cluster.app.clone();
    create_ss(&client, &seal(&secret(&app, "x", &[("k", "v")]), key(1))).await;
    let running = Running::start(&client, cluster.config()).await;
    wait_synced(&client, &app, "x", "False", "UnsealFailed").await;
    wait_event(&client, &app, "x", "ErrUnsealFailed").await;
    running.stop().await;
}

/// A client of `server` that shows each request to `observe` before forwarding it.
fn observed_client(
    server: &TestApiServer,
    observe: impl Fn(&http::Request<kube::client::Body>) + Send + Sync + 'static,
) -> kube::Client {
    use tower::ServiceExt as _;
    let router = server.router();
    let observe = std::sync::Arc::new(observe);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        observe(&request);
        let router = router.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                router
                    .oneshot(request)
                    .await
                    .expect("axum routers are infallible"),
            )
        }
    });
    kube::Client::new(service, "default")
}

/// A client of `server` that runs `hook` when a request for the Secret `name` is sent (the
/// moment a reconcile is waiting on the API server), then forwards it.
fn hooked_client(
    server: &TestApiServer,
    name: &str,
    hook: impl Fn() + Send + Sync + 'static,
) -> kube::Client {
    let suffix = format!("/secrets/{name}");
    observed_client(server, move |request| {
        if request.uri().path().ends_with(&suffix) {
            hook();
        }
    })
}

/// A reconcile driven directly, as the controller runs it, through `client`, with key 0
/// loaded.
struct Direct {
    state: kseal_controller::State,
    ctx: std::sync::Arc<kseal_controller::reconcile::Context>,
}

impl Direct {
    fn new(cluster: &Cluster, client: kube::Client, state: kseal_controller::State) -> Self {
        let mut ring = kseal_keys::KeyRing::new();
        ring.insert(key(0).clone());
        kseal_controller::keys::publish(&state, ring);
        // No Secret watch runs here: say so, or each reconcile waits for its first list.
        let mut config = cluster.config();
        config.skip_recreate = true;
        let ctx = std::sync::Arc::new(kseal_controller::reconcile::Context::new(
            client,
            std::sync::Arc::new(config),
            state.clone(),
        ));
        Self { state, ctx }
    }

    fn fenced(&self, write: &str) -> u64 {
        self.state
            .metrics
            .fenced_writes
            .get_or_create(&kseal_controller::metrics::WriteLabels {
                write: write.to_owned(),
            })
            .get()
    }

    async fn reconcile(&self, ss: SealedSecret) -> Action {
        let cached = kseal_controller::cache::sealed::CachedSealed::new(ss).unwrap();
        self.reconcile_cached(cached).await
    }

    async fn reconcile_cached(
        &self,
        cached: kseal_controller::cache::sealed::CachedSealed,
    ) -> Action {
        kseal_controller::reconcile::reconcile(std::sync::Arc::new(cached), self.ctx.clone())
            .await
            .unwrap()
    }
}

/// Nothing happened to the object: no Secret, no status, no event.
async fn untouched(client: &kube::Client, ns: &str, name: &str) {
    let ss = Api::<SealedSecret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    assert!(ss.status.is_none(), "no status was written");
    assert!(
        Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .unwrap()
            .is_none(),
        "no Secret was written"
    );
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(events.items.is_empty(), "no event was published");
}

/// A frozen leader: its local lease deadline passes while a reconcile waits on the API
/// server (here: the moment it asks for the Secret). The write that would follow is refused
/// and counted, and nothing else is written (no status, no event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_the_lease_deadline_is_refused() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let ss = create_ss(&client, &seal(&secret(&app, "s", &[("k", "v")]), key(0))).await;
    let state = kseal_controller::State::new();
    let leadership = state.leadership.clone();
    // Leading with an hour left; while the Secret is read, the hour is over.
    leadership.hold(Some(
        tokio::time::Instant::now() + std::time::Duration::from_secs(3600),
    ));
    let hook = move || {
        leadership.hold(Some(tokio::time::Instant::now()));
    };
    let direct = Direct::new(&cluster, hooked_client(&server, "s", hook), state);
    // Still holding the Lease, past its deadline: a renewal publishes nothing, so recheck.
    assert_eq!(direct.reconcile(ss).await, Action::requeue(LEADER_RECHECK));
    assert_eq!(direct.fenced("secret"), 1);
    assert_eq!(direct.state.leadership.refused(), 1);
    assert_eq!(direct.state.leadership.term().epoch, 1);
    untouched(&client, &app, "s").await;
}

/// A follower's reconcile writes nothing and leaves no timer behind: the object waits for a
/// change, and the term this replica may start later queues every object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_writes_nothing_and_waits_for_its_term() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let ss = create_ss(&client, &seal(&secret(&app, "s", &[("k", "v")]), key(0))).await;
    let direct = Direct::new(&cluster, client.clone(), kseal_controller::State::new());
    server.clear_requests();
    assert_eq!(direct.reconcile(ss.clone()).await, Action::await_change());
    assert!(server.requests().is_empty(), "{:?}", server.requests());
    untouched(&client, &app, "s").await;
    // Deposed: the same.
    direct.state.leadership.assume(true);
    direct.state.leadership.assume(false);
    assert_eq!(direct.reconcile(ss).await, Action::await_change());
    untouched(&client, &app, "s").await;
}

/// Work begun in one leadership term is dropped when a later term has begun by the time it
/// writes (lost and won again while a request was in flight); the new term's own reconcile
/// writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_from_an_older_term_is_dropped() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let ss = create_ss(&client, &seal(&secret(&app, "s", &[("k", "v")]), key(0))).await;
    let state = kseal_controller::State::new();
    state.leadership.assume(true);
    let leadership = state.leadership.clone();
    let flipped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = flipped.clone();
    let hook = move || {
        if !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            leadership.assume(false);
            leadership.assume(true);
        }
    };
    let direct = Direct::new(&cluster, hooked_client(&server, "s", hook), state);
    // Leading again (term 2), whose start queued every object anyway.
    assert_eq!(direct.reconcile(ss).await, Action::requeue(LEADER_RECHECK));
    assert_eq!(direct.state.leadership.term().epoch, 2);
    assert_eq!(direct.fenced("secret"), 1);
    untouched(&client, &app, "s").await;

    let ss = Api::<SealedSecret>::namespaced(client.clone(), &app)
        .get("s")
        .await
        .unwrap();
    direct.reconcile(ss).await;
    assert_eq!(direct.fenced("secret"), 1);
    wait_synced(&client, &app, "s", "True", "Unsealed").await;
    wait_secret(&client, &app, "s", "the Secret", |_| true).await;
}

/// A status written for an older generation (by a replica that read a stale object) is
/// repaired at once, not at the next resync (resync is off here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_behind_its_generation_is_repaired() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let mut config = cluster.config();
    config.resync_period = None;
    let running = Running::start(&client, config).await;
    create_ss(&client, &seal(&secret(&app, "s", &[("k", "v1")]), key(0))).await;
    wait_synced(&client, &app, "s", "True", "Unsealed").await;
    // A new generation.
    let api = Api::<SealedSecret>::namespaced(client.clone(), &app);
    let mut ss = api.get("s").await.unwrap();
    ss.spec = seal(&secret(&app, "s", &[("k", "v2")]), key(0)).spec;
    let ss = api.replace("s", &Default::default(), &ss).await.unwrap();
    let generation = ss.metadata.generation.unwrap();
    let synced = wait_synced(&client, &app, "s", "True", "Unsealed").await;
    assert_eq!(synced.metadata.generation, Some(generation));
    // A deposed leader's late write: the status of the generation before.
    let patch = serde_json::json!({"status": {"observedGeneration": generation - 1}});
    api.patch_status(
        "s",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let repaired = wait_synced(&client, &app, "s", "True", "Unsealed").await;
    assert_eq!(
        repaired.status.and_then(|s| s.observed_generation),
        Some(generation)
    );
    running.stop().await;
}

fn watch_failures(state: &kseal_controller::State, watch: &str) -> u64 {
    state
        .metrics
        .watch_failures
        .get_or_create(&kseal_controller::metrics::WatchLabels {
            watch: watch.to_owned(),
        })
        .get()
}

/// The API server stops answering for Secrets: the watch failure is counted, objects fail
/// and back off; once it answers again, the watch re-lists and what failed is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_is_counted_and_recovered_from() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let running = Running::start(&client, cluster.config()).await;
    create_ss(
        &client,
        &seal(&secret(&app, "before", &[("k", "v")]), key(0)),
    )
    .await;
    wait_synced(&client, &app, "before", "True", "Unsealed").await;

    server.faults().fail(
        kseal_testkit::FaultRule::new(503)
            .resource("secrets")
            .times(usize::MAX),
    );
    server.faults().drop_watches();
    create_ss(
        &client,
        &seal(&secret(&app, "during", &[("k", "v")]), key(0)),
    )
    .await;
    wait_synced(&client, &app, "during", "False", "UpdateFailed").await;
    eventually(
        "the Secret watch failures are counted",
        DEADLINE,
        || async {
            Ok((watch_failures(&running.state, "secrets") >= 1
                && watch_failures(&running.state, "key_secrets") >= 1)
                .then_some(()))
        },
    )
    .await
    .unwrap();
    assert_eq!(watch_failures(&running.state, "sealedsecrets"), 0);

    server.faults().clear();
    wait_synced(&client, &app, "during", "True", "Unsealed").await;
    let s = wait_secret(&client, &app, "during", "the Secret", |_| true).await;
    assert_eq!(data_of(&s)["k"], "v");
    eventually("the API server is reachable again", DEADLINE, || async {
        Ok(running
            .state
            .metrics
            .encode()
            .contains("kseal_api_server_reachable 1")
            .then_some(()))
    })
    .await
    .unwrap();
    running.stop().await;
}

/// A client of `server` that counts the GETs of the SealedSecret `name` (the object or its
/// status subresource, which returns the whole object too).
fn counting_client(
    server: &TestApiServer,
    name: &str,
) -> (kube::Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let (object, status) = (
        format!("/sealedsecrets/{name}"),
        format!("/sealedsecrets/{name}/status"),
    );
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    let client = observed_client(server, move |request| {
        let path = request.uri().path();
        if request.method() == http::Method::GET
            && (path.ends_with(&object) || path.ends_with(&status))
        {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (client, count)
}

/// A synced SealedSecret is cached without its encrypted values. Its Secret confirmed in sync
/// costs no read of it; its Secret deleted is re-created from one read of the whole object,
/// with the right data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_object_cached_without_its_values_recreates_its_secret_from_a_whole_read() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let ss = create_ss(
        &client,
        &seal(&secret(&app, "s", &[("k", "v"), ("k2", "w")]), key(0)),
    )
    .await;
    let state = kseal_controller::State::new();
    state.leadership.assume(true);
    let (counting, ss_reads) = counting_client(&server, "s");
    let direct = Direct::new(&cluster, counting, state);
    // Not synced yet: kept whole, unsealed without a read.
    let whole = kseal_controller::cache::sealed::CachedSealed::new(ss).unwrap();
    assert!(whole.stripped_digest().is_none());
    direct.reconcile_cached(whole).await;
    wait_synced(&client, &app, "s", "True", "Unsealed").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &app);
    let first = secrets.get("s").await.unwrap();
    assert_eq!(data_of(&first)["k"], "v");
    assert_eq!(ss_reads.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Synced for its generation: the cache keeps item names, no values.
    let synced = Api::<SealedSecret>::namespaced(client.clone(), &app)
        .get("s")
        .await
        .unwrap();
    let stripped = kseal_controller::cache::sealed::CachedSealed::new(synced).unwrap();
    assert!(stripped.stripped_digest().is_some());
    let kept = stripped.sealed().unwrap();
    assert_eq!(
        kept.spec.encrypted_data.keys().collect::<Vec<_>>(),
        ["k", "k2"]
    );
    assert!(kept.spec.encrypted_data.values().all(String::is_empty));

    // In sync: confirmed without reading the SealedSecret, nothing written.
    direct.reconcile_cached(stripped.clone()).await;
    assert_eq!(ss_reads.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(
        secrets.get("s").await.unwrap().resource_version(),
        first.resource_version()
    );

    // Deleted: re-created from one whole read, same data.
    secrets
        .delete("s", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    direct.reconcile_cached(stripped).await;
    assert_eq!(ss_reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    let again = secrets.get("s").await.unwrap();
    assert_ne!(again.uid(), first.uid());
    assert_eq!(data_of(&again), data_of(&first));
    wait_synced(&client, &app, "s", "True", "Unsealed").await;
}

/// The condition gauge follows the object's `app.kubernetes.io/instance` label: a changed
/// label moves the series, it does not leave the old one behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_condition_gauge_follows_the_instance_label() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    let mut sealed = seal(&secret(&app, "s", &[("k", "v")]), key(0));
    sealed
        .labels_mut()
        .insert("app.kubernetes.io/instance".into(), "first".into());
    let ss = create_ss(&client, &sealed).await;
    let state = kseal_controller::State::new();
    state.leadership.assume(true);
    let direct = Direct::new(&cluster, client.clone(), state);
    direct.reconcile(ss).await;
    let series = |instance: &str| {
        format!(
            "sealed_secrets_controller_condition_info{{namespace=\"{app}\",name=\"s\",condition=\"Synced\",ss_app_kubernetes_io_instance=\"{instance}\"}} 1"
        )
    };
    let text = direct.state.metrics.encode();
    assert!(text.contains(&series("first")), "{text}");

    let api = Api::<SealedSecret>::namespaced(client.clone(), &app);
    let mut ss = api.get("s").await.unwrap();
    ss.labels_mut()
        .insert("app.kubernetes.io/instance".into(), "second".into());
    let ss = api.replace("s", &Default::default(), &ss).await.unwrap();
    direct.reconcile(ss).await;
    let text = direct.state.metrics.encode();
    assert!(text.contains(&series("second")), "{text}");
    assert!(
        !text.contains("ss_app_kubernetes_io_instance=\"first\""),
        "{text}"
    );
}
