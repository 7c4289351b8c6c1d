//! What the reconciler, the key loader and the HTTP server share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use std::collections::BTreeMap;

use kseal_keys::KeyRing;
use tokio::sync::watch;

use crate::keys::binding::Claims;
use crate::metrics::Metrics;

/// The current key ring. Readers get a cheap snapshot; the key loader swaps in new rings
/// (hot reload) and every subscriber is woken.
///
/// With rings bound to namespaces, the ring comes with the claims it was built with
/// ([`Keys::scoped`]): both are replaced and read under one lock, so a key is never seen
/// without its claims.
#[derive(Clone)]
pub struct Keys {
    tx: Arc<watch::Sender<Arc<KeyRing>>>,
    claims: Arc<Mutex<Option<Arc<Claims>>>>,
}

/// The keys that may open a SealedSecret in one namespace ([`Keys::scoped`]).
#[derive(Clone, Debug)]
pub struct Scoped {
    /// The keys that open there (the whole ring when no ring is bound).
    pub ring: Arc<KeyRing>,
    /// Every loaded key.
    pub full: Arc<KeyRing>,
    /// With bound rings: the claims, and the mask of rings that open there.
    pub bound: Option<(Arc<Claims>, u32)>,
}

impl Scoped {
    /// When `sealed` names (in `kseal.dev/sealing-key`) a loaded key that does not open in
    /// `namespace`: `key <kid> of <rings>, which does not open in namespace <ns>` (refused
    /// before any RSA operation).
    pub fn hinted_refusal(
        &self,
        sealed: &kseal_api::SealedSecret,
        namespace: &str,
    ) -> Option<String> {
        let hint = sealed.sealing_key_hint()?;
        if self.ring.get(&hint).is_some() {
            return None;
        }
        let rings = self.refusal(&hint)?;
        let place = if namespace.is_empty() {
            "without a namespace".to_owned()
        } else {
            format!("in namespace {namespace}")
        };
        Some(format!(
            "key {} of {rings}, which does not open {place}",
            self.key_name(&hint)
        ))
    }

    /// With bound rings, the rings whose keys are loaded but not tried in the scoped
    /// namespace, with their bindings, e.g. `ring kseal/prod (bound to namespaces prod)`
    /// (`None`: every loaded key is tried).
    pub fn not_tried(&self) -> Option<String> {
        let (claims, mask) = self.bound.as_ref()?;
        if self.ring.len() == self.full.len() {
            return None;
        }
        let rings: Vec<String> = claims
            .rings()
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) == 0)
            .map(|(_, r)| r.describe())
            .collect();
        Some(if rings.is_empty() {
            "keys of rings whose indexes are not verified yet, or mirrors of rings this controller is not configured for".to_owned()
        } else {
            rings.join(", ")
        })
    }

    /// How a loaded key is named in messages: its kid's short form (12 hex characters, as
    /// `kseal keys list` shows kids), else its fingerprint.
    pub fn key_name(&self, id: &kseal_keys::KeyId) -> String {
        match self.full.get(id) {
            Some(pair) => kseal_keystore::Kid::of(pair.public_key())
                .short()
                .to_owned(),
            None => id.to_string(),
        }
    }

    /// With bound rings, when key `id` is loaded but belongs only to rings that do not open
    /// here: those rings' names and bindings, e.g. `ring kseal/prod (namespaces prod)`.
    pub fn refusal(&self, id: &kseal_keys::KeyId) -> Option<String> {
        let (claims, mask) = self.bound.as_ref()?;
        self.full.get(id)?;
        let rings = claims.refusing(id, *mask)?;
        if rings.is_empty() {
            return Some(
                "a mirror that opens nowhere while rings are bound (its kseal.dev/ring names no ring, a ring not configured here, or a ring whose verified index does not list it)".to_owned(),
            );
        }
        let named: Vec<String> = rings.iter().map(|r| r.describe()).collect();
        Some(named.join(", "))
    }
}

impl Keys {
    /// Starts with an empty ring.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(Arc::new(KeyRing::new()));
        Self {
            tx: Arc::new(tx),
            claims: Arc::new(Mutex::new(None)),
        }
    }

    /// The current ring: every loaded key, whatever ring it belongs to.
    pub fn ring(&self) -> Arc<KeyRing> {
        self.tx.borrow().clone()
    }

    /// The keys that may open a SealedSecret in `namespace` (whose labels are `labels`, when
    /// known): every key unless rings are bound to namespaces ([`crate::keys::binding`]).
    pub fn scoped(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> Scoped {
        let guard = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        let full = self.ring();
        let claims = guard.clone();
        drop(guard);
        match claims.filter(|c| c.any_bound()) {
            None => Scoped {
                ring: full.clone(),
                full,
                bound: None,
            },
            Some(claims) => {
                let mask = claims.allowed(namespace, labels);
                Scoped {
                    ring: claims.restrict(&full, mask),
                    full,
                    bound: Some((claims, mask)),
                }
            }
        }
    }

    /// The claims published with the current ring (with several `--key-source` rings).
    pub fn claims(&self) -> Option<Arc<Claims>> {
        self.claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the ring; returns whether the set of keys or the sealing key changed.
    pub fn replace(&self, ring: KeyRing) -> bool {
        self.replace_with(ring, None)
    }

    /// Replaces the ring and its claims together ([`Keys::scoped`]); returns whether the set
    /// of keys or the sealing key changed.
    pub fn replace_with(&self, ring: KeyRing, claims: Option<Claims>) -> bool {
        let ids = |r: &KeyRing| {
            let mut ids: Vec<_> = r.keys().map(|k| k.id().clone()).collect();
            ids.extend(r.sealing_key().map(|k| k.id().clone()));
            ids
        };
        let new_ids = ids(&ring);
        let mut guard = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        // Keys that change rings (a view verified, a binding's sealing key) count as a change.
        let claims_changed = match (guard.as_deref(), claims.as_ref()) {
            (None, None) => false,
            (Some(old), Some(new)) => !old.same_as(new),
            _ => true,
        };
        *guard = claims.map(Arc::new);
        let changed = self.tx.send_if_modified(|current| {
            let changed = claims_changed || ids(current) != new_ids;
            *current = Arc::new(ring);
            changed
        });
        drop(guard);
        changed
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
    /// Short kids of the keys the verified index lists that the last sync did not find in
    /// the store (the leader looks for them between polls).
    pub missing: Vec<String>,
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

    /// The keys the index lists that the last sync did not find in the store (short kids).
    pub fn key_source_missing(&self, missing: Vec<String>) {
        self.update_key_source(|s| s.missing = missing);
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
    /// With several `--key-source` rings: the names of all and the own parts of the further
    /// ones (the first ring's are `readiness`, `refresh` and `ring_view` above).
    pub rings: Arc<Rings>,
    /// Namespace labels, watched while a ring is bound by a selector.
    pub namespace_labels: Arc<crate::cluster::namespaces::NamespaceLabels>,
}

/// The `--key-source` rings of one controller ([`State::add_rings`]).
#[derive(Debug, Default)]
pub struct Rings {
    set: std::sync::OnceLock<RingSet>,
}

#[derive(Debug)]
struct RingSet {
    /// Every ring's name, in `--key-source` order.
    names: Vec<String>,
    /// The own parts of the rings after the first.
    further: Vec<RingParts>,
}

/// What one further ring has of its own: its key-source loop's readiness, refresh requests
/// and ring view.
#[derive(Debug, Clone)]
struct RingParts {
    readiness: Arc<Readiness>,
    refresh: crate::signals::Refresh,
    ring_view: crate::keys::ringview::RingViews,
}

impl Rings {
    /// Every ring's name, in `--key-source` order (empty before [`State::add_rings`]).
    pub fn names(&self) -> &[String] {
        self.set.get().map_or(&[], |s| &s.names)
    }
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
            rings: Arc::default(),
            namespace_labels: Arc::default(),
        }
    }

    /// Sets up the rings named `names` (in `--key-source` order; the first is this state's
    /// own); done once, later calls change nothing.
    pub fn add_rings(&self, names: &[String]) {
        let _ = self.rings.set.set(RingSet {
            names: names.to_vec(),
            further: names
                .iter()
                .skip(1)
                .map(|_| RingParts {
                    readiness: Arc::new(Readiness::default()),
                    refresh: self.refresh.fork(),
                    ring_view: crate::keys::ringview::RingViews::new(),
                })
                .collect(),
        });
    }

    /// The state as the `i`-th ring's key-source loop sees it: its own readiness, refresh
    /// requests and ring view, the rest shared (`None`: no such ring).
    pub fn for_ring(&self, i: usize) -> Option<State> {
        if i == 0 {
            return Some(self.clone());
        }
        let parts = self.rings.set.get()?.further.get(i - 1)?;
        Some(State {
            readiness: parts.readiness.clone(),
            refresh: parts.refresh.clone(),
            ring_view: parts.ring_view.clone(),
            ..self.clone()
        })
    }

    /// The state of every ring ([`State::for_ring`]) with its name; just this state, unnamed,
    /// before [`State::add_rings`].
    pub fn ring_states(&self) -> Vec<(String, State)> {
        let names = self.rings.names();
        if names.is_empty() {
            return vec![(String::new(), self.clone())];
        }
        names
            .iter()
            .enumerate()
            .filter_map(|(i, name)| Some((name.clone(), self.for_ring(i)?)))
            .collect()
    }

    /// The keys that may open a SealedSecret in `namespace` ([`Keys::scoped`], with the
    /// namespace's labels as the label watch last saw them).
    pub fn scoped(&self, namespace: &str) -> Scoped {
        let labels = self.namespace_labels.get(namespace);
        self.keys.scoped(namespace, labels.as_ref())
    }

    /// Whether the replica can serve and reconcile: [`Readiness::is_ready`], and every further
    /// ring fetched once or mirrored.
    pub fn is_ready(&self) -> bool {
        self.readiness.is_ready() && self.rings_blocking().is_empty()
    }

    /// The further rings that keep the replica unready (never read, no mirror), by name.
    pub fn rings_blocking(&self) -> Vec<(String, KeySourceStatus)> {
        self.ring_states()
            .into_iter()
            .skip(1)
            .filter_map(|(name, s)| Some((name, s.readiness.key_source_blocking()?)))
            .collect()
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
