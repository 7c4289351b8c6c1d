//! What the reconciler, the key loader and the HTTP server share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use kseal_keys::KeyRing;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// The current key ring. Readers get a cheap snapshot; the key loader swaps in new rings
/// (hot reload) and every subscriber is woken.
#[derive(Clone)]
pub struct Keys {
    tx: Arc<watch::Sender<Arc<KeyRing>>>,
}

impl Keys {
    /// Starts with an empty ring.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(Arc::new(KeyRing::new()));
        Self { tx: Arc::new(tx) }
    }

    /// The current ring.
    pub fn ring(&self) -> Arc<KeyRing> {
        self.tx.borrow().clone()
    }

    /// Replaces the ring; returns whether the set of keys or the sealing key changed.
    pub fn replace(&self, ring: KeyRing) -> bool {
        let ids = |r: &KeyRing| {
            let mut ids: Vec<_> = r.keys().map(|k| k.id().clone()).collect();
            ids.extend(r.sealing_key().map(|k| k.id().clone()));
            ids
        };
        let new_ids = ids(&ring);
        self.tx.send_if_modified(|current| {
            let changed = ids(current) != new_ids;
            *current = Arc::new(ring);
            changed
        })
    }

    /// Notified whenever the set of keys changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<KeyRing>> {
        self.tx.subscribe()
    }
}

impl Default for Keys {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("loaded", &self.ring().len())
            .finish()
    }
}

/// Readiness conditions reported by `/readyz`.
#[derive(Debug, Default)]
pub struct Readiness {
    /// At least one key is loaded.
    pub keys_loaded: AtomicBool,
    /// The reconciler's watch caches have synced.
    pub caches_synced: AtomicBool,
    /// With a key source: whether it was fetched once or a mirror of it was found, and the
    /// last problem reading it (public text, for `/readyz`).
    key_source: Mutex<Option<KeySourceStatus>>,
    /// The key loader found a valid mirror of a fleet ring (kept apart from `key_source`, so
    /// the order in which the loader and the key-source loop start does not matter).
    mirror_found: AtomicBool,
    /// With a key source: why the ring's active key does not seal (the last verified one
    /// seals instead, or none does), for `/readyz` and `/v1/cert.pem`.
    sealing: Mutex<Option<SealingProblem>>,
    /// With a key source and no anchor pinned: the ring-state Secret found but not believed
    /// (no ring view yet), named in [`State::sealing_problem`].
    ring_state_ignored: Mutex<Option<String>>,
}

/// Why the fleet ring's active key does not seal here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealingProblem {
    /// Public text, e.g. `the ring's active key 0123456789ab is not mirrored: …`.
    pub message: String,
    /// Whether another (earlier verified) active key still seals.
    pub sealing: bool,
}

/// The key source's part of readiness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySourceStatus {
    /// Fetched once, or a valid mirror was found: keys can be served.
    pub usable: bool,
    /// The last error, e.g. `access_denied: access denied: GetSecretValue on kseal/fleet/index`,
    /// with the store's whole error chain (for logs and the metrics port's `/readyz`).
    pub problem: Option<String>,
    /// The last error's stable reason (`access_denied`, `network`, …: see
    /// [`kseal_keystore::Error::reason`]); [`reason_class`] turns it into what the API port's
    /// `/readyz` shows.
    pub reason: Option<&'static str>,
}

/// What the API port's `/readyz` says about a key source that failed with `reason` (a
/// [`kseal_keystore::Error::reason`] or `kube`): a class only, never the error chain, which
/// can carry account ids, role ARNs and secret names (with AWS, a denial names the caller).
pub fn reason_class(reason: &str) -> &'static str {
    match reason {
        "access_denied" => "access denied",
        "no_credentials" => "no credentials",
        "not_found" => "not found",
        "network" | "throttled" | "service" => "unreachable",
        "untrusted" => "untrusted",
        "malformed" | "bad_key" => "malformed",
        _ => "other",
    }
}

impl Readiness {
    /// Whether the replica can serve and reconcile.
    pub fn is_ready(&self) -> bool {
        self.keys_loaded.load(Ordering::Acquire)
            && self.caches_synced.load(Ordering::Acquire)
            && self.key_source().is_none_or(|s| s.usable)
    }

    /// The key source's status (`None` without a key source); a mirror found by the key
    /// loader makes it usable.
    pub fn key_source(&self) -> Option<KeySourceStatus> {
        let mirror = self.mirror_found.load(Ordering::Acquire);
        self.key_source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .map(|mut s| {
                s.usable |= mirror;
                s
            })
    }

    fn update_key_source(&self, f: impl FnOnce(&mut KeySourceStatus)) {
        let mut guard = self
            .key_source
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(guard.get_or_insert_with(KeySourceStatus::default));
    }

    /// A key source is configured: not ready until it is fetched or mirrored.
    pub fn key_source_configured(&self) {
        self.update_key_source(|_| {});
    }

    /// The key source was read successfully.
    pub fn key_source_ok(&self) {
        self.update_key_source(|s| {
            s.usable = true;
            s.problem = None;
            s.reason = None;
        });
    }

    /// Reading the key source failed with `reason` (a [`kseal_keystore::Error::reason`]) and
    /// `detail` (the error chain); readiness stays as it was: a mirror keeps serving.
    pub fn key_source_failed(&self, reason: &'static str, detail: &str) {
        self.update_key_source(|s| {
            s.problem = Some(format!("{reason}: {detail}"));
            s.reason = Some(reason);
        });
    }

    /// The key source's status while it keeps the replica unready (never read, no mirror).
    pub fn key_source_blocking(&self) -> Option<KeySourceStatus> {
        self.key_source().filter(|s| !s.usable)
    }

    /// Sets (or clears) why the fleet ring's active key does not seal.
    pub fn set_sealing_problem(&self, problem: Option<SealingProblem>) {
        *self.sealing.lock().unwrap_or_else(PoisonError::into_inner) = problem;
    }

    /// Why the fleet ring's active key does not seal, if it does not.
    pub fn sealing_problem(&self) -> Option<SealingProblem> {
        self.sealing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The key loader found a valid mirror of a fleet ring: keys can be served even while the
    /// ring cannot be read.
    pub fn key_source_mirror_found(&self) {
        self.mirror_found.store(true, Ordering::Release);
    }

    /// Sets (or clears) the name of the ring-state Secret the key source ignores because no
    /// anchor is pinned (`--ring-anchor`).
    pub fn set_ring_state_ignored(&self, secret: Option<String>) {
        *self
            .ring_state_ignored
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = secret;
    }

    /// The ring-state Secret the key source ignores, if it does.
    pub fn ring_state_ignored(&self) -> Option<String> {
        self.ring_state_ignored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Shared controller state.
#[derive(Clone)]
pub struct State {
    /// The key ring.
    pub keys: Keys,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness.
    pub readiness: Arc<Readiness>,
    /// Whether this replica holds the leader Lease (always, without election), as an event
    /// and as the fence of every write.
    pub leadership: crate::cluster::leadership::Leadership,
    /// Asks the key-source loop to check the ring now.
    pub refresh: crate::signals::Refresh,
    /// With a key source: the ring view the sealing key is chosen from.
    pub ring_view: crate::keys::ringview::RingViews,
    /// RSA slots, shared by the reconciler (first) and the HTTP API.
    pub rsa: Arc<crate::serve::rsapool::RsaPool>,
    /// Whether the API server answers.
    pub api: Arc<crate::cluster::apihealth::ApiHealth>,
    /// What cached SealedSecrets not yet synced may hold of encrypted values
    /// (`--pending-values-mib`; [`crate::cache::sealed`]).
    pub value_budget: Arc<crate::cache::sealed::ValueBudget>,
    /// Which keys opened each SealedSecret (recorded by the reconciler while the fleet
    /// writer runs; counted by it as objects per kid).
    pub opened: Arc<crate::reconcile::affinity::Opened>,
}

impl State {
    /// Fresh state: no keys, not ready, not leader.
    pub fn new() -> Self {
        Self {
            keys: Keys::new(),
            metrics: Arc::new(Metrics::new()),
            readiness: Arc::new(Readiness::default()),
            leadership: crate::cluster::leadership::Leadership::new(),
            refresh: crate::signals::Refresh::default(),
            ring_view: crate::keys::ringview::RingViews::new(),
            rsa: crate::serve::rsapool::RsaPool::new(crate::serve::rsapool::DEFAULT_SLOTS),
            api: Arc::new(crate::cluster::apihealth::ApiHealth::default()),
            value_budget: crate::cache::sealed::ValueBudget::new(
                crate::cache::sealed::DEFAULT_VALUE_BUDGET_BYTES,
            ),
            opened: Arc::default(),
        }
    }

    /// Watching `watch` failed: counted, and unless the API server answered (e.g. `410 Gone`:
    /// re-list), it is taken for unreachable.
    pub fn watch_failed(&self, watch: &'static str, error: &kube::runtime::watcher::Error) {
        use kube::runtime::watcher::Error as W;
        self.metrics
            .watch_failures
            .get_or_create(&crate::metrics::WatchLabels {
                watch: watch.to_owned(),
            })
            .inc();
        let answered = match error {
            W::WatchError(_) => true,
            W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => {
                !crate::cluster::apihealth::unreachable(e)
            }
            W::NoResourceVersion => true,
        };
        if answered {
            self.api_answered();
            tracing::debug!(watch, error = %crate::error_chain(error), "watch ended by the API server; re-listing");
        } else {
            self.api_unreachable(watch, error);
        }
    }

    /// A request could not reach the API server while doing `what`: one warn line when it
    /// was reachable until now, then one per burst with the count of the others.
    pub fn api_unreachable(&self, what: &'static str, error: &(dyn std::error::Error + 'static)) {
        use crate::cluster::apihealth::Failure;
        self.metrics.api_server_reachable.set(0);
        let error = crate::error_chain(error);
        match self.api.failed() {
            Failure::Lost => {
                tracing::warn!(during = what, %error, "the API server is unreachable; retrying");
            }
            Failure::Again(Some(not_logged)) => tracing::warn!(
                during = what,
                %error,
                not_logged,
                "the API server is still unreachable; retrying"
            ),
            Failure::Again(None) => {
                tracing::debug!(during = what, %error, "the API server is unreachable");
            }
        }
    }

    /// The API server answered: if it was unreachable, say so once and wake the reconciler
    /// (backoffs reset, failed objects retried).
    pub fn api_answered(&self) {
        if let Some(recovery) = self.api.answered() {
            self.metrics.api_server_reachable.set(1);
            if recovery.announce {
                tracing::info!(
                    failures = recovery.failures,
                    down_for = ?recovery.down_for,
                    "the API server is reachable again: retrying what failed meanwhile"
                );
            }
        }
    }

    /// Why the fleet ring's active key does not seal, as `/readyz`, `/v1/cert.pem` and rotate
    /// tell it: the key loader's reason, except that while no ring view exists and the key
    /// source ignores a ring-state Secret (no anchor pinned), that is what it says instead of
    /// "no ring-state Secret".
    pub fn sealing_problem(&self) -> Option<SealingProblem> {
        let problem = self.readiness.sealing_problem();
        match (problem, self.readiness.ring_state_ignored()) {
            (Some(p), Some(secret)) if !p.sealing && self.ring_view.current().is_none() => {
                Some(SealingProblem {
                    message: format!(
                        "the fleet ring has not been read yet (ring-state Secret {secret} ignored: no ring anchor pinned (--ring-anchor))"
                    ),
                    sealing: false,
                })
            }
            (problem, _) => problem,
        }
    }

    /// Whether this replica may write (it leads and its local lease deadline has not passed).
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}
