//! What the reconciler, the key loader and the HTTP server share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

    /// Replaces the ring; returns whether the set of keys changed.
    pub fn replace(&self, ring: KeyRing) -> bool {
        let ids = |r: &KeyRing| r.keys().map(|k| k.id().clone()).collect::<Vec<_>>();
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
}

impl Readiness {
    /// Whether the replica can serve and reconcile.
    pub fn is_ready(&self) -> bool {
        self.keys_loaded.load(Ordering::Acquire) && self.caches_synced.load(Ordering::Acquire)
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
    /// Whether this replica currently holds the leader Lease (always true without election).
    pub leader: Arc<AtomicBool>,
}

impl State {
    /// Fresh state: no keys, not ready, not leader.
    pub fn new() -> Self {
        Self {
            keys: Keys::new(),
            metrics: Arc::new(Metrics::new()),
            readiness: Arc::new(Readiness::default()),
            leader: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether this replica may write.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}
