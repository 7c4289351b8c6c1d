//! The kube-runtime `Controller` itself ([`run`]): its watches, queue bounds and concurrency.

use super::*;

use futures::stream::BoxStream;

/// Reconciles in flight per unseal slot. A reconcile spends most of its time on API round
/// trips (read the Secret, write it, read and patch the status, publish an event) and holds
/// an unseal slot only for its RSA work; with as many reconciles as slots, the slots (and
/// cores) sat idle during those round trips (`cargo bench --bench scale`: a cold start of
/// 10,000 objects with `--concurrency 2` on 2 cores used 1.5 cores).
pub(super) const RECONCILES_PER_UNSEAL_SLOT: u16 = 4;

/// How many reconciles one controller runs at a time: [`RECONCILES_PER_UNSEAL_SLOT`] per
/// unseal slot (`--concurrency` bounds the unseals).
pub(super) fn reconcile_concurrency(config: &Config) -> u16 {
    config
        .concurrency
        .max(1)
        .saturating_mul(RECONCILES_PER_UNSEAL_SLOT)
}

/// SealedSecrets handed to kube-runtime's scheduler and not started yet, per reconcile it
/// runs at a time.
///
/// The scheduler releases objects through a `DelayQueue`, whose deadlines are rounded up to
/// the next millisecond and which hands out what expired only when a timer fires: every
/// object handed over waits about a millisecond there, so at most this bound of them reaches
/// the reconciles per millisecond. A restart confirms an unchanged object in about 20 µs of
/// CPU, so a bound of 4 per reconcile (32 with `--concurrency 2`) capped it near 30 objects a
/// millisecond with the cores mostly idle (100,000 objects: 6 s after the list; the scale
/// bench, docs/benchmarks.md). 32 per reconcile keeps the scheduler ahead of the reconciles
/// and still holds it to a few hundred objects (about 700 bytes each) instead of every one.
pub(super) const ADMITTED_PER_RECONCILE: usize = 32;

/// Runs the controller until `shutdown` turns true (then finishes running reconciles).
///
/// With [`Namespaces::Only`], one controller runs per namespace (each with its own watches
/// and four reconciles per unseal slot running at a time), sharing the keys, this context and its
/// `--concurrency` unseal slots.
pub async fn run(
    client: Client,
    config: Arc<Config>,
    state: State,
    shutdown: watch::Receiver<bool>,
) {
    state.value_budget.set_limit(config.pending_value_bytes);
    let ctx = Arc::new(Context::new(client.clone(), config.clone(), state.clone()));
    let scopes: Vec<Option<String>> = match &config.namespaces {
        Namespaces::All => vec![None],
        Namespaces::Only(list) => list.iter().cloned().map(Some).collect(),
    };
    let mut wc = watcher::Config::default();
    if let Some(selector) = &config.label_selector {
        wc = wc.labels(selector);
    }
    let shared = Shared {
        client: &client,
        config: &config,
        state: &state,
        ctx: &ctx,
        sealed_watch: wc,
        shutdown: &shutdown,
    };
    let mut stores = Vec::new();
    let mut runs = Vec::new();
    for scope in scopes {
        let (store, run) = shared.controller(scope);
        stores.push(store);
        runs.push(run);
    }

    let ready = tokio::spawn(caches_synced(stores.clone(), state.readiness.clone()));
    let pruner = tokio::spawn(prune(ctx.clone(), stores));
    // Asks the API server when nothing answered for a while: a paused one answers nothing,
    // and a quiet cluster sends no request that could time out.
    let probe = {
        let (answered, unreachable) = (state.clone(), state.clone());
        tokio::spawn(crate::cluster::apihealth::probe(
            client.clone(),
            state.api.clone(),
            move || answered.api_answered(),
            move |e| unreachable.api_unreachable("probing the API server", e),
        ))
    };

    // The watchers parse objects while this future runs: within the controller's budget.
    let runs = futures::stream::select_all(runs).for_each(|result| {
        controller_result(&ctx, result);
        futures::future::ready(())
    });
    crate::cache::sealed::with_value_budget(state.value_budget.clone(), runs).await;
    ready.abort();
    pruner.abort();
    probe.abort();
}

/// What one controller's run yields per reconcile.
type RunResult =
    std::result::Result<(SsRef, Action), kube::runtime::controller::Error<Error, watcher::Error>>;

/// What the controllers of every watched scope share.
struct Shared<'a> {
    client: &'a Client,
    config: &'a Config,
    state: &'a State,
    ctx: &'a Arc<Context>,
    /// The SealedSecret watch's configuration (`--label-selector`).
    sealed_watch: watcher::Config,
    shutdown: &'a watch::Receiver<bool>,
}

impl Shared<'_> {
    /// The controller of one scope (a namespace; `None`: all of them): its SealedSecret store
    /// and its run.
    fn controller(
        &self,
        scope: Option<String>,
    ) -> (Store<CachedSealed>, BoxStream<'static, RunResult>) {
        let (client, config, state, ctx) = (self.client, self.config, self.state, self.ctx);
        let (sealed, secrets): (Api<CachedSealed>, Api<WatchedSecret>) = match &scope {
            None => (Api::all(client.clone()), Api::all(client.clone())),
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
        };
        let (store, writer) = reflector::store();
        let sealed_events = watcher(sealed, self.sealed_watch.clone())
            .backoff(WatchBackoff::resetting_on(state.api.recoveries()));
        let mut c = Controller::for_stream(
            sealed_triggers(
                sealed_events,
                state.clone(),
                writer,
                ctx.admission.clone(),
                ctx.affinity.clone(),
                scope.clone(),
            ),
            store.clone(),
        )
        .with_config(
            kube::runtime::controller::Config::default().concurrency(reconcile_concurrency(config)),
        );
        if !config.skip_recreate {
            c = c.reconcile_on(self.secret_watch(secrets, &store, &scope));
        }
        let admitted = futures::stream::select(
            ctx.admission.clone().stream(scope.clone()),
            bulk_triggers(
                state,
                store.clone(),
                ctx.admission.clone(),
                scope.clone(),
                config.resync_period,
            ),
        );
        let c = c
            .reconcile_on(admitted)
            .reconcile_on(recovered_triggers(ctx.clone(), store.clone()))
            .graceful_shutdown_on(until_true(self.shutdown.clone()));
        (store, c.run(reconcile, error_policy, ctx.clone()).boxed())
    }

    /// The reconciles the Secret watch of a scope triggers.
    fn secret_watch(
        &self,
        secrets: Api<WatchedSecret>,
        store: &Store<CachedSealed>,
        scope: &Option<String>,
    ) -> impl futures::Stream<Item = SsRef> + Send + 'static {
        // Not filtered by --label-selector: the Secrets a selected SealedSecret writes need
        // not carry its labels, and their deletion must still re-create them at once.
        // `secret_trigger` maps each event to a SealedSecret; one that is not selected is
        // not in the store, so nothing happens.
        //
        // Whole Secrets, not metadata: each is checked against its data MAC as it arrives,
        // then its data is wiped (`secretcache`). The watch starts with the ring's first
        // keys (no reconcile runs before them anyway), so that check can be made.
        let recoveries = self.state.api.recoveries();
        let secret_events =
            futures::stream::once(first_keys(self.state.clone())).flat_map(move |()| {
                watcher(secrets.clone(), watcher::Config::default())
                    .backoff(WatchBackoff::resetting_on(recoveries.clone()))
            });
        secret_triggers(
            secret_events,
            self.ctx.clone(),
            store.clone(),
            scope.clone(),
        )
    }
}

/// Marks the caches synced once every scope's SealedSecret store has its first list.
async fn caches_synced(stores: Vec<Store<CachedSealed>>, readiness: Arc<crate::state::Readiness>) {
    for s in &stores {
        // Re-poll with a timeout: kube-runtime's ready signal keeps a single waker, and
        // the controller itself waits on it too, so a lone wait may never be woken.
        loop {
            match tokio::time::timeout(Duration::from_millis(200), s.wait_until_ready()).await {
                Ok(Ok(())) => break,
                Ok(Err(_)) => return,
                Err(_) => {}
            }
        }
    }
    readiness
        .caches_synced
        .store(true, std::sync::atomic::Ordering::Release);
}

/// Takes one result of a controller's run: only an object deleted before its reconcile
/// started needs anything (it no longer waits for admission); stream errors are logged.
fn controller_result(ctx: &Context, result: RunResult) {
    if let Err(e) = result {
        match e {
            // Deleted before its reconcile started: it no longer waits.
            kube::runtime::controller::Error::ObjectNotFound(r) => {
                if let Some(namespace) = &r.namespace {
                    ctx.admission.started(namespace, &r.name);
                }
            }
            kube::runtime::controller::Error::ReconcilerFailed(..) => {}
            other => {
                tracing::debug!(error = %crate::error_chain(&other), "controller stream error")
            }
        }
    }
}
