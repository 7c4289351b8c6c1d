//! Which keys opened unhinted values lately, so the next unhinted value tries them first.
//!
//! Values sealed by kubeseal or an older kseal carry no `kseal.dev/sealing-key` hint, and
//! Bitnami's envelope names no key: without a guess they are tried key after key, one RSA
//! operation each (most of a cold start's RSA work with a long ring). But they cluster: after
//! a migration from kubeseal they were sealed by one or two legacy keys, and one object's (or
//! namespace's) values by the same key. This memory keeps, per SealedSecret, the key that
//! last opened such a value, per namespace the last two distinct ones (a namespace bound to
//! two rings, a shared one and its team's, has a legacy key in each), plus the last few such
//! keys cluster-wide; [`Suggestions::keys`] turns them into the unseal's preferred keys,
//! tried after any hint and before the ring's own order (active key first). Only keys that
//! may open in the object's namespace are suggested (the caller says which: with rings bound
//! to namespaces, `Keys::scoped`), so another team's recent keys neither take a slot nor push
//! out the ones that open here. The suggestions are taken when the unseal gets its RSA slot,
//! not when it queues ([`Affinity::suggest_waiting`]): in a burst each value starts from what
//! the values opened just before it taught.
//!
//! Suggestions only order the attempts: the result of an unseal never depends on them, and
//! a wrong one costs at most one RSA operation per suggested key, for the first item of an
//! object only (its later items try the key that opened the first). Where unhinted values
//! follow no pattern (each sealed by a different key), suggestions would only push the
//! active key back: a running hit rate (did the key that opened a value appear among the
//! suggestions?) switches them off while it stays below [`MIN_HIT_RATE`], and back on when
//! the values cluster again. While nothing is learned in a namespace yet (a cold start, or a
//! namespace's first unhinted value), its unhinted values take their turn
//! ([`Affinity::suggest_waiting`]): the first one's trial decryption runs alone, and the ones
//! queued behind it start from the key it found instead of each trying the whole ring at once
//! on another RSA slot; other namespaces go on meanwhile. That first walk starts from the
//! namespace's ciphertexts: as objects arrive from the watch, the largest RSA block among its
//! unhinted values is kept ([`Affinity::observe`]), and the keys whose moduli sit tightest
//! above it are tried first ([`kseal_keys::BlockTop`]: the block nearest a modulus from
//! below was, with high odds, sealed with that key), so a namespace of values sealed with
//! one legacy key finds it in one or two operations instead of walking the ring newest first
//! to its oldest key. The memory is bounded
//! ([`Affinity::with_capacity`]) and holds object names and key fingerprints only, never
//! secret data.
//!
//! [`Opened`] is a separate record for the fleet acknowledgement's objects per kid: every key
//! that opened each object, hinted or not, kept as long as the object is listed.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kseal_api::{SealedSecret, Unsealed};
use kseal_keys::{BlockTop, KeyId, KeyRing};

/// SealedSecrets remembered by default.
pub(crate) const DEFAULT_OBJECTS: usize = 8192;
/// Namespaces remembered by default.
pub(crate) const DEFAULT_NAMESPACES: usize = 1024;
/// Keys suggested from the cluster-wide memory (most recent first, among those that open in
/// the namespace). Kept short: each one is tried before the active key, so an unhinted value
/// sealed by the active key pays for every wrong one.
pub(crate) const RECENT_KEYS: usize = 2;
/// Distinct keys remembered cluster-wide, so that each namespace still finds its
/// [`RECENT_KEYS`] among them while other namespaces' rings use keys that do not open there.
pub(crate) const RECENT_MEMORY: usize = 8;
/// Guesses for a cold namespace's first unhinted unseal, at most ([`Suggestions::keys`]):
/// two, the sealing key counting as one when it may have sealed the largest block, so that
/// one other modulus falling between that block and the sealing key's (odds of about one in
/// five with 72 keys and 500 values) costs one RSA operation more, not a walk.
pub(crate) const FIT_KEYS: usize = 2;
/// Below this share of hits (over roughly the last 8 unhinted values) no key is suggested.
pub(crate) const MIN_HIT_RATE: f64 = 0.25;
/// Fixed-point scale of the running hit rate.
const RATE_ONE: u32 = 1 << 16;

/// The last two distinct keys that opened unhinted values of a namespace.
#[derive(Debug, Clone)]
struct LastTwo {
    latest: KeyId,
    before: Option<KeyId>,
}

impl LastTwo {
    fn keys(&self) -> impl Iterator<Item = &KeyId> {
        std::iter::once(&self.latest).chain(self.before.as_ref())
    }

    /// `self` after `key` opened a value: `key` first, then the other of the two.
    fn then(&self, key: &KeyId) -> Self {
        let before = if self.latest == *key {
            self.before.clone()
        } else {
            Some(self.latest.clone())
        };
        Self {
            latest: key.clone(),
            before,
        }
    }
}

/// The controller's memory of which keys opened unhinted values (see the module docs).
/// Thread-safe; every method takes `&self`, and a clone shares the memory.
#[derive(Debug, Clone)]
pub(crate) struct Affinity {
    /// Shared with the [`Suggestions`] handed out, which read it later on an RSA thread.
    inner: Arc<Mutex<Inner>>,
    /// Turns of the unhinted unseals of a namespace where nothing has been learned yet, by
    /// namespace: an entry lives while an unseal holds or waits for it.
    turns: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// An unhinted unseal's turn in a namespace where nothing has been learned yet
/// ([`Affinity::suggest_waiting`]): held until the unseal is over and [`Affinity::learn`]
/// has run.
#[derive(Debug)]
pub(crate) struct Turn {
    namespace: String,
    turns: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.guard.take();
        let mut turns = lock(&self.turns);
        // Nobody holds or waits for this namespace's turn any more: forgotten.
        if turns
            .get(&self.namespace)
            .is_some_and(|t| Arc::strong_count(t) == 1)
        {
            turns.remove(&self.namespace);
        }
    }
}

#[derive(Debug)]
struct Inner {
    objects: Generations<(String, String), KeyId>,
    namespaces: Generations<String, LastTwo>,
    /// Per namespace, the tops of the largest RSA blocks (one per key size) among its
    /// values that name no key ([`Affinity::observe`]).
    ceilings: Generations<String, Ceilings>,
    /// At most [`RECENT_MEMORY`] distinct keys, the latest first.
    recent: VecDeque<KeyId>,
    /// Running hit rate of the suggestions, `RATE_ONE` = every one a hit (the start).
    hit_rate: u32,
}

impl Default for Affinity {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_OBJECTS, DEFAULT_NAMESPACES)
    }
}

impl Affinity {
    /// A memory of at most `objects` SealedSecrets and `namespaces` namespaces (each at
    /// least 2), the least recently used forgotten first.
    pub(crate) fn with_capacity(objects: usize, namespaces: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                objects: Generations::new(objects),
                namespaces: Generations::new(namespaces),
                ceilings: Generations::new(namespaces),
                recent: VecDeque::with_capacity(RECENT_MEMORY + 1),
                hit_rate: RATE_ONE,
            })),
            turns: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// [`Suggestions::keys`] for `sealed`, now.
    #[cfg(test)]
    pub(crate) fn suggest(
        &self,
        sealed: &SealedSecret,
        can_open: impl Fn(&KeyId) -> bool,
    ) -> Vec<KeyId> {
        let (namespace, name) = identity(sealed);
        suggest(&mut self.lock(), namespace, name, can_open)
    }

    /// The suggestions for `sealed`, to be taken later ([`Suggestions::keys`]: when its unseal
    /// gets an RSA slot, so that they include what the unseals before it taught). While
    /// nothing has been learned in its namespace yet, an unhinted `sealed` first waits for the
    /// unhinted unseal of that namespace before it: hold the [`Turn`] returned until the
    /// unseal is over and [`Affinity::learn`] has run. So each namespace's first trial walk
    /// through the keys runs once, not once per RSA slot, and the values queued behind it
    /// start from the key it found. Once a key is known in the namespace this never waits
    /// again; a hinted object never waits, nor do other namespaces.
    pub(crate) async fn suggest_waiting(
        &self,
        sealed: &SealedSecret,
    ) -> (Suggestions, Option<Turn>) {
        let (namespace, name) = identity(sealed);
        let unhinted = sealed.sealing_key_hint().is_none();
        let later = Suggestions {
            inner: self.inner.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            unhinted,
        };
        if unhinted && self.cold_in(namespace) {
            let mutex = lock(&self.turns)
                .entry(namespace.to_owned())
                .or_default()
                .clone();
            let turn = Turn {
                namespace: namespace.to_owned(),
                turns: self.turns.clone(),
                guard: Some(mutex.lock_owned().await),
            };
            if self.cold_in(namespace) {
                return (later, Some(turn));
            }
        }
        (later, None)
    }

    /// Notes an object of `namespace` waiting to be unsealed whose values name no key, `top`
    /// being its largest RSA block's ([`crate::cache::sealed::CachedSealed::unhinted_top`]):
    /// while nothing is learned there, the first unseal tries first the keys whose moduli sit
    /// tightest above the namespace's largest block ([`Suggestions::keys`]). Called as objects
    /// arrive from the watch, so on a cold start the whole list is seen before the RSA work
    /// reaches most of it.
    pub(crate) fn observe(&self, namespace: &str, top: BlockTop) {
        let mut inner = self.lock();
        let mut ceilings = inner.ceilings.get(namespace).unwrap_or_default();
        if ceilings.raise(top) {
            inner.ceilings.insert(namespace.to_owned(), ceilings);
        }
    }

    /// Nothing learned in `namespace` yet.
    fn cold_in(&self, namespace: &str) -> bool {
        self.lock().namespaces.get(namespace).is_none()
    }

    /// [`Affinity::learn`] for one object, where every key may open.
    #[cfg(test)]
    pub(crate) fn record(&self, namespace: &str, name: &str, key: &KeyId) {
        self.record_scoped(namespace, name, key, |_| true);
    }

    /// Whether suggestions are made now (the hit rate is at least [`MIN_HIT_RATE`]).
    #[cfg(test)]
    pub(crate) fn suggesting(&self) -> bool {
        f64::from(self.lock().hit_rate) >= MIN_HIT_RATE * f64::from(RATE_ONE)
    }

    /// Remembers that `key` opened an unhinted value of the SealedSecret `namespace/name`,
    /// where the keys `can_open` accepts may open. Counts towards the hit rate: a hit when
    /// [`Suggestions::keys`] would have named `key` (whether or not suggestions are on, so
    /// they come back when values cluster again).
    fn record_scoped(
        &self,
        namespace: &str,
        name: &str,
        key: &KeyId,
        can_open: impl Fn(&KeyId) -> bool,
    ) {
        let mut inner = self.lock();
        let hit = inner.candidates(namespace, name, can_open).contains(key);
        // An exponential moving average over about 8 values.
        inner.hit_rate = inner.hit_rate - inner.hit_rate / 8 + if hit { RATE_ONE / 8 } else { 0 };
        inner
            .objects
            .insert((namespace.to_owned(), name.to_owned()), key.clone());
        let in_namespace = match inner.namespaces.get(namespace) {
            Some(two) => two.then(key),
            None => LastTwo {
                latest: key.clone(),
                before: None,
            },
        };
        inner.namespaces.insert(namespace.to_owned(), in_namespace);
        inner.recent.retain(|k| k != key);
        inner.recent.push_front(key.clone());
        inner.recent.truncate(RECENT_MEMORY);
    }

    /// After `sealed` was unsealed with the keys `can_open` accepts (those that may open in
    /// its namespace): remembers the key that opened most of its values, unless the object's
    /// `kseal.dev/sealing-key` annotation named that key (hinted values need no memory).
    /// Returns the key remembered.
    pub(crate) fn learn(
        &self,
        sealed: &SealedSecret,
        unsealed: &Unsealed,
        can_open: impl Fn(&KeyId) -> bool,
    ) -> Option<KeyId> {
        let key = most_common(unsealed.keys.values()).or(unsealed.deprecated_data_key.as_ref())?;
        if sealed.sealing_key_hint().as_ref() == Some(key) {
            return None;
        }
        let (namespace, name) = identity(sealed);
        self.record_scoped(namespace, name, key, can_open);
        Some(key.clone())
    }

    /// How many SealedSecrets and namespaces are remembered (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.objects.len(), inner.namespaces.len())
    }

    /// Whether nothing is remembered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

/// Suggestions for one unseal, taken when it runs ([`Affinity::suggest_waiting`]).
#[derive(Debug)]
pub(crate) struct Suggestions {
    inner: Arc<Mutex<Inner>>,
    namespace: String,
    name: String,
    /// The object has no `kseal.dev/sealing-key` annotation.
    unhinted: bool,
}

impl Suggestions {
    /// Keys to try first for the object's values ([`kseal_api::UnsealOptions::preferred_keys`])
    /// as of now, among the keys of `ring` (those that may open in its namespace): the key
    /// that last opened an unhinted value of this object, the last two of its namespace,
    /// then the latest [`RECENT_KEYS`] such keys cluster-wide; each once, at most
    /// `3 + RECENT_KEYS`, none while the hit rate is below [`MIN_HIT_RATE`]. For an
    /// unhinted object in a namespace where nothing is learned yet, up to [`FIT_KEYS`]
    /// guesses from the namespace's largest blocks come right after the object's own key
    /// ([`guesses`], [`Affinity::observe`], [`KeyRing::tightest_above`]), and are named
    /// apart so that the unseal drops them once an item opens.
    pub(crate) fn keys(&self, ring: &KeyRing) -> Suggested {
        self.keys_with(
            |id| ring.get(id).is_some(),
            |ceilings, can_open| guesses(ring, ceilings, can_open),
        )
    }

    /// [`Suggestions::keys`] with the ring's questions as closures: whether a key may open
    /// here, and the guesses from a namespace's ceilings among those keys.
    fn keys_with(
        &self,
        can_open: impl Fn(&KeyId) -> bool,
        guess: impl FnOnce(&[BlockTop], &dyn Fn(&KeyId) -> bool) -> Vec<KeyId>,
    ) -> Suggested {
        let mut inner = lock(&self.inner);
        let cold = inner.namespaces.get(&self.namespace).is_none();
        let ceilings = inner.ceilings.get(&self.namespace);
        let candidates = suggest(&mut inner, &self.namespace, &self.name, &can_open);
        // The object's own key (candidates start with it when it is remembered) comes
        // before any guess: it is evidence about this very object.
        let object = (inner
            .objects
            .get(&(self.namespace.clone(), self.name.clone())))
        .filter(|key| candidates.first() == Some(key));
        let mut guesses = match ceilings {
            Some(ceilings) if self.unhinted && cold => guess(&ceilings.tops(), &can_open),
            _ => Vec::new(),
        };
        guesses.retain(|key| object.as_ref() != Some(key));
        Suggested {
            guesses_at: usize::from(object.is_some()),
            keys: candidates,
            guesses,
        }
    }
}

/// What [`Suggestions::keys`] returns.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Suggested {
    /// Keys to try first ([`kseal_api::UnsealOptions::preferred_keys`]): the object's,
    /// the namespace's and recent ones.
    pub(crate) keys: Vec<KeyId>,
    /// The guesses from the namespace's ceilings ([`kseal_api::UnsealOptions::guesses`]):
    /// tried after the object's own key until an item opens.
    pub(crate) guesses: Vec<KeyId>,
    /// How many of `keys` come before the guesses: 1 when the object's own key leads them
    /// ([`kseal_api::UnsealOptions::guesses_at`]).
    pub(crate) guesses_at: usize,
}

impl Suggested {
    /// The order of attempts until the object's first item opens, as the unseal makes it
    /// ([`kseal_api::UnsealOptions::first_order`]).
    #[cfg(test)]
    fn first_order(&self) -> Vec<KeyId> {
        kseal_api::UnsealOptions {
            preferred_keys: self.keys.clone(),
            guesses: self.guesses.clone(),
            guesses_at: self.guesses_at,
            ..kseal_api::UnsealOptions::default()
        }
        .first_order()
    }
}

/// The largest RSA block per block length among a namespace's unhinted values, for up to
/// [`CEILING_LENGTHS`] lengths (the first ones seen): a value of another key size leaves the
/// guess for the namespace's usual size as it was. A running maximum while the namespace is
/// remembered: a deleted object's block still counts.
#[derive(Debug, Clone, Copy, Default)]
struct Ceilings([Option<BlockTop>; CEILING_LENGTHS]);

/// Block lengths (key sizes) a namespace's [`Ceilings`] keep apart.
const CEILING_LENGTHS: usize = 4;

impl Ceilings {
    /// Takes `top` in; whether anything changed.
    fn raise(&mut self, top: BlockTop) -> bool {
        for slot in &mut self.0 {
            match slot {
                Some(kept) if kept.byte_len() == top.byte_len() => {
                    if top > *kept {
                        *kept = top;
                        return true;
                    }
                    return false;
                }
                Some(_) => {}
                None => {
                    *slot = Some(top);
                    return true;
                }
            }
        }
        false
    }

    fn tops(&self) -> Vec<BlockTop> {
        self.0.iter().flatten().copied().collect()
    }
}

/// The guesses for a cold namespace whose largest blocks are `tops`, among the keys of
/// `ring` that `can_open` accepts, [`FIT_KEYS`] at most: the ring's sealing key when its
/// modulus may sit above the largest block of its length (values sealed with the current
/// certificate, as kubeseal does, then cost one operation as before), then the keys whose
/// moduli sit tightest above the blocks (the tightest of each length in turn).
fn guesses(ring: &KeyRing, tops: &[BlockTop], can_open: &dyn Fn(&KeyId) -> bool) -> Vec<KeyId> {
    let mut keys = Vec::with_capacity(FIT_KEYS);
    if let Some(sealing) = ring.preferred_key()
        && can_open(sealing.id())
        && let Some(modulus) = BlockTop::of_modulus(sealing.public_key().modulus())
        && tops.iter().any(|top| modulus.may_cover(*top))
    {
        keys.push(sealing.id().clone());
    }
    let per_length: Vec<Vec<KeyId>> = (tops.iter())
        .map(|top| ring.tightest_above(*top, FIT_KEYS, can_open))
        .collect();
    for rank in 0..FIT_KEYS {
        for key in per_length.iter().filter_map(|keys| keys.get(rank)) {
            if keys.len() < FIT_KEYS && !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    keys
}

fn lock<T>(inner: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves the maps consistent, even one interrupted by a panic.
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

fn suggest(
    inner: &mut Inner,
    namespace: &str,
    name: &str,
    can_open: impl Fn(&KeyId) -> bool,
) -> Vec<KeyId> {
    if f64::from(inner.hit_rate) < MIN_HIT_RATE * f64::from(RATE_ONE) {
        return Vec::new();
    }
    inner.candidates(namespace, name, can_open)
}

impl Inner {
    /// The object's key, the namespace's two, then the first [`RECENT_KEYS`] recent ones;
    /// only keys `can_open` accepts, each once.
    fn candidates(
        &mut self,
        namespace: &str,
        name: &str,
        can_open: impl Fn(&KeyId) -> bool,
    ) -> Vec<KeyId> {
        let mut keys: Vec<KeyId> = Vec::with_capacity(3 + RECENT_KEYS);
        let object = self.objects.get(&(namespace.to_owned(), name.to_owned()));
        let in_namespace = self.namespaces.get(namespace);
        let recent = self
            .recent
            .iter()
            .filter(|key| can_open(key))
            .take(RECENT_KEYS);
        for key in object
            .iter()
            .chain(in_namespace.iter().flat_map(LastTwo::keys))
            .chain(recent)
        {
            if !keys.contains(key) && can_open(key) {
                keys.push(key.clone());
            }
        }
        keys
    }
}

/// Which keys opened each SealedSecret at its last unseal here, for the fleet
/// acknowledgement's objects per kid (`crate::fleet`). Unlike [`Affinity`], it records every
/// unseal (hinted or not), forgets nothing on its own and keeps every key an object needed,
/// not only the most common one. It records only while [`Opened::enable`]d (the fleet writer
/// runs), and the writer's counts [`Opened::retain`] the objects still listed, so it holds
/// at most the watched objects plus those opened since the last count. Each entry carries
/// the object's UID and generation: an object changed (or re-created under its name) since
/// it was opened matches it no longer. Names and key fingerprints only, never secret data.
#[derive(Debug, Default)]
pub struct Opened {
    inner: Mutex<OpenedInner>,
}

#[derive(Debug, Default)]
struct OpenedInner {
    enabled: bool,
    objects: HashMap<(String, String), (u64, OpenedBy)>,
    /// Records so far: each entry keeps its number, for [`Opened::retain`].
    recorded: u64,
}

/// The keys that opened one object, and which version of it they opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenedBy {
    /// The object's UID.
    pub(crate) uid: String,
    /// Its `metadata.generation` when it was opened.
    pub(crate) generation: i64,
    /// Every key that opened one of its values, each once.
    pub(crate) keys: Vec<KeyId>,
}

impl Opened {
    fn lock(&self) -> MutexGuard<'_, OpenedInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts recording (the fleet writer runs and prunes it).
    pub(crate) fn enable(&self) {
        self.lock().enabled = true;
    }

    /// Stops recording and forgets everything (the fleet writer is off).
    pub(crate) fn disable(&self) {
        let mut inner = self.lock();
        inner.enabled = false;
        inner.objects = HashMap::new();
    }

    /// After `sealed` was unsealed: the keys that opened its values replace what was
    /// recorded for it. Nothing while disabled, or for an object without UID or generation.
    pub(crate) fn record(&self, sealed: &SealedSecret, unsealed: &Unsealed) {
        let meta = &sealed.metadata;
        let (Some(uid), Some(generation)) = (meta.uid.as_ref(), meta.generation) else {
            return;
        };
        let mut keys: Vec<KeyId> = Vec::new();
        for key in unsealed
            .keys
            .values()
            .chain(unsealed.deprecated_data_key.as_ref())
        {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        let mut inner = self.lock();
        if !inner.enabled {
            return;
        }
        let (namespace, name) = identity(sealed);
        let by = OpenedBy {
            uid: uid.clone(),
            generation,
            keys,
        };
        inner.recorded += 1;
        let seq = inner.recorded;
        inner
            .objects
            .insert((namespace.to_owned(), name.to_owned()), (seq, by));
    }

    /// A mark for [`Opened::retain`]: records made after it are kept.
    pub(crate) fn mark(&self) -> u64 {
        self.lock().recorded
    }

    /// The keys that opened `namespace/name`, if it was opened here as it is now (same UID
    /// and generation).
    pub(crate) fn keys(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        generation: Option<i64>,
    ) -> Option<Vec<KeyId>> {
        let inner = self.lock();
        let (_, by) = inner
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))?;
        (Some(by.uid.as_str()) == uid && Some(by.generation) == generation).then(|| by.keys.clone())
    }

    /// Forgets the objects `keep` rejects (those not listed), except those recorded after
    /// `mark` (opened while the list ran: maybe created after it).
    pub(crate) fn retain(&self, mark: u64, mut keep: impl FnMut(&str, &str) -> bool) {
        self.lock()
            .objects
            .retain(|(namespace, name), (seq, _)| *seq > mark || keep(namespace, name));
    }

    /// How many objects are recorded.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().objects.len()
    }
}

fn identity(sealed: &SealedSecret) -> (&str, &str) {
    (
        sealed.metadata.namespace.as_deref().unwrap_or_default(),
        sealed.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The most frequent key; ties go to the first in iteration order.
fn most_common<'a>(keys: impl Iterator<Item = &'a KeyId>) -> Option<&'a KeyId> {
    let mut counts: Vec<(&KeyId, usize)> = Vec::new();
    for key in keys {
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => counts.push((key, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(k, _)| k)
}

/// A bounded map that forgets the least recently used entries in bulk: two generations of at
/// most `capacity / 2` entries each; when the young one fills up it becomes the old one and
/// the previous old one is dropped. A hit in the old generation moves the entry to the young
/// one. O(1) per operation, never more than `capacity` entries.
#[derive(Debug)]
struct Generations<K, V> {
    young: HashMap<K, V>,
    old: HashMap<K, V>,
    half: usize,
}

impl<K: Hash + Eq, V: Clone> Generations<K, V> {
    fn new(capacity: usize) -> Self {
        Self {
            young: HashMap::new(),
            old: HashMap::new(),
            half: (capacity / 2).max(1),
        }
    }

    fn get<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(value) = self.young.get(key) {
            return Some(value.clone());
        }
        let (key, value) = self.old.remove_entry(key)?;
        self.insert(key, value.clone());
        Some(value)
    }

    fn insert(&mut self, key: K, value: V) {
        self.old.remove(&key);
        self.young.insert(key, value);
        if self.young.len() >= self.half {
            self.old = std::mem::take(&mut self.young);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use futures::FutureExt as _;
    use k8s_openapi::api::core::v1::Secret;
    use kseal_api::SealedSecretSpec;

    use super::*;

    /// Every key may open (one ring, or no ring bound to a namespace).
    fn any(_: &KeyId) -> bool {
        true
    }

    fn key(i: u8) -> KeyId {
        use base64::Engine as _;
        let digest = [i; 32];
        let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest);
        KeyId::parse(&format!("SHA256:{text}")).unwrap()
    }

    fn sealed(namespace: &str, name: &str, hint: Option<&KeyId>) -> SealedSecret {
        let annotations = hint.map(|k| {
            BTreeMap::from([(
                kseal_api::constants::SEALING_KEY_ANNOTATION.to_owned(),
                k.to_string(),
            )])
        });
        let mut sealed = SealedSecret::new(name, SealedSecretSpec::default());
        sealed.metadata.namespace = Some(namespace.to_owned());
        sealed.metadata.annotations = annotations;
        sealed
    }

    fn unsealed(keys: &[(&str, &KeyId)]) -> Unsealed {
        Unsealed {
            secret: Secret::default(),
            rsa_operations: 0,
            keys: keys
                .iter()
                .map(|(item, k)| ((*item).to_owned(), (*k).clone()))
                .collect(),
            deprecated_data_key: None,
        }
    }

    #[test]
    fn suggestions_go_object_then_namespace_then_recent_keys() {
        let affinity = Affinity::default();
        assert!(affinity.suggest(&sealed("a", "x", None), any).is_empty());
        affinity.record("a", "x", &key(1));
        affinity.record("a", "y", &key(2));
        affinity.record("b", "z", &key(3));
        // Object a/x: its own key, then namespace a's latest, then the recent keys.
        assert_eq!(
            affinity.suggest(&sealed("a", "x", None), any),
            [key(1), key(2), key(3)]
        );
        // A new object in namespace a: the namespace's two keys, then the recent ones.
        assert_eq!(
            affinity.suggest(&sealed("a", "new", None), any),
            [key(2), key(1), key(3)]
        );
        // A namespace never seen: the latest keys cluster-wide, at most RECENT_KEYS.
        assert_eq!(
            affinity.suggest(&sealed("c", "w", None), any),
            [key(3), key(2)]
        );
    }

    #[test]
    fn learning_skips_values_whose_annotation_named_the_key_that_opened_them() {
        let affinity = Affinity::default();
        let hinted = sealed("a", "x", Some(&key(9)));
        assert_eq!(
            affinity.learn(&hinted, &unsealed(&[("p", &key(9))]), any),
            None
        );
        assert!(affinity.is_empty());
        // A wrong annotation is as good as none: the key that opened is remembered.
        assert_eq!(
            affinity.learn(&hinted, &unsealed(&[("p", &key(4))]), any),
            Some(key(4))
        );
        let plain = sealed("a", "y", None);
        let opened = unsealed(&[("p", &key(5)), ("q", &key(6)), ("r", &key(6))]);
        assert_eq!(affinity.learn(&plain, &opened, any), Some(key(6)));
        assert_eq!(affinity.suggest(&plain, any), [key(6), key(4)]);
        assert_eq!(affinity.learn(&plain, &unsealed(&[]), any), None);
    }

    #[test]
    fn a_namespace_remembers_its_last_two_distinct_keys() {
        let affinity = Affinity::default();
        let new = sealed("a", "new", None);
        // Only keys 1 to 3 open: the recent keys add nothing the namespace lacks.
        let opens = |k: &KeyId| [key(1), key(2), key(3)].contains(k);
        affinity.record("a", "x", &key(1));
        affinity.record("a", "y", &key(2));
        assert_eq!(affinity.suggest(&new, opens), [key(2), key(1)]);
        // A key repeated does not push out the other one.
        affinity.record("a", "z", &key(2));
        affinity.record("a", "w", &key(2));
        assert_eq!(affinity.suggest(&new, opens), [key(2), key(1)]);
        affinity.record("a", "v", &key(1));
        assert_eq!(affinity.suggest(&new, opens), [key(1), key(2)]);
        // A third key replaces the older of the two: two kept, however many are seen.
        affinity.record("a", "u", &key(3));
        assert_eq!(affinity.suggest(&new, opens), [key(3), key(1)]);
        let kept = affinity.lock().namespaces.get("a").unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), [&key(3), &key(1)]);
    }

    #[test]
    fn suggestions_skip_keys_that_cannot_open_in_the_namespace() {
        let affinity = Affinity::default();
        // Keys 1 (a shared ring) and 10 (team a's) open in team a's namespaces, 1 and 20
        // (team b's) in team b's; 30 belongs to a ring bound to neither.
        let team_a = |k: &KeyId| [key(1), key(10)].contains(k);
        let team_b = |k: &KeyId| [key(1), key(20)].contains(k);
        let x = sealed("a-0", "x", None);
        assert_eq!(
            affinity.learn(&x, &unsealed(&[("p", &key(10))]), team_a),
            Some(key(10))
        );
        // Team b's namespace, or anyone allowed to create SealedSecrets there, opens many
        // values with its keys: they fill the cluster-wide memory, not team a's suggestions.
        for i in 0..20u8 {
            let k = if i % 2 == 0 { key(20) } else { key(30) };
            affinity.learn(
                &sealed("b-0", &format!("s-{i}"), None),
                &unsealed(&[("p", &k)]),
                team_b,
            );
        }
        // A namespace of team a never seen: the recent keys that open there only.
        assert_eq!(
            affinity.suggest(&sealed("a-1", "y", None), team_a),
            [key(10)]
        );
        assert_eq!(
            affinity.suggest(&sealed("b-1", "y", None), team_b),
            [key(20)]
        );
        // Unfiltered, the other team's two latest keys took both slots.
        assert_eq!(
            affinity.suggest(&sealed("a-1", "y", None), any),
            [key(30), key(20)]
        );
        // An object's or namespace's own key no longer allowed there (a binding changed) is
        // not suggested either.
        let nothing = |_: &KeyId| false;
        assert!(affinity.suggest(&x, nothing).is_empty());
        // Each kept to its namespace's keys, the values were hits: suggestions stay on.
        assert!(affinity.suggesting());
    }

    #[test]
    fn two_legacy_keys_per_namespace_cost_at_most_two_attempts_each() {
        // The scale bench's three rings: namespaces a-* open the shared ring (key 1) and team
        // a's (key 10), b-* the shared ring and team b's (key 20); each namespace's unhinted
        // values sealed by its two legacy keys in turn, the namespaces interleaved.
        let affinity = Affinity::default();
        let team_a = |k: &KeyId| [key(1), key(10)].contains(k);
        let team_b = |k: &KeyId| [key(1), key(20)].contains(k);
        let mut attempts = 0;
        for i in 0..200u32 {
            let (namespace, own) = match i % 4 {
                0 | 1 => ("a-0", key(10)),
                _ => ("b-0", key(20)),
            };
            let opened = if i % 8 < 4 { key(1) } else { own };
            let can_open = if namespace == "a-0" { team_a } else { team_b };
            let object = sealed(namespace, &format!("s-{i}"), None);
            let suggested = affinity.suggest(&object, can_open);
            assert!(suggested.iter().all(can_open), "{suggested:?}");
            if i >= 8 {
                // Past the first values, the key is always among the first two tried.
                let at = suggested.iter().position(|k| *k == opened);
                assert!(matches!(at, Some(0 | 1)), "value {i}: {suggested:?}");
                attempts += at.unwrap() + 1;
            }
            affinity.learn(&object, &unsealed(&[("p", &opened)]), can_open);
        }
        assert!(affinity.suggesting());
        // Each pair's first value tries the other key first: 1.5 attempts per value, the
        // floor for an even mix of two keys (nothing in a value names the one that sealed it).
        assert_eq!(attempts, 192 * 3 / 2);
    }

    /// A ring with no key fitting above any ceiling.
    fn no_fits(_: &[BlockTop], _: &dyn Fn(&KeyId) -> bool) -> Vec<KeyId> {
        Vec::new()
    }

    /// A top of length 512 with `top` as its leading bits.
    fn top(top: u8) -> BlockTop {
        let mut modulus = [0u8; 512];
        modulus[0] = top;
        BlockTop::of_modulus(&modulus).unwrap()
    }

    #[test]
    fn a_cold_namespace_first_tries_the_keys_that_fit_above_its_largest_block() {
        let affinity = Affinity::default();
        affinity.record("elsewhere", "x", &key(5));
        for t in [0x90, 0xc0, 0xa0] {
            affinity.observe("ns", top(t));
        }
        // Another key size is kept apart: it does not hide the usual size's ceiling.
        let short = BlockTop::of_modulus(&[0xf0; 256]).unwrap();
        affinity.observe("ns", short);
        let seen = std::sync::Mutex::new(Vec::new());
        let fits = |tops: &[BlockTop], can_open: &dyn Fn(&KeyId) -> bool| {
            seen.lock().unwrap().push(tops.to_vec());
            [key(7), key(8)]
                .into_iter()
                .filter(|k| can_open(k))
                .collect()
        };
        let (unhinted, _turn) = affinity
            .suggest_waiting(&sealed("ns", "a", None))
            .now_or_never()
            .unwrap();
        // The guesses (from the largest block of each size), then the recent keys; only
        // those that may open here.
        let suggested = unhinted.keys_with(any, fits);
        assert_eq!(suggested.first_order(), [key(7), key(8), key(5)]);
        assert_eq!(suggested.keys, [key(5)]);
        assert_eq!(suggested.guesses, [key(7), key(8)]);
        assert_eq!(*seen.lock().unwrap(), [vec![top(0xc0), short]]);
        assert_eq!(
            unhinted.keys_with(|k| *k != key(7), fits).first_order(),
            [key(8), key(5)]
        );
        // A hinted object, or one in a namespace with no unhinted object seen: no guesses.
        let hinted = sealed("ns", "h", Some(&key(9)));
        let (hinted, _) = affinity.suggest_waiting(&hinted).now_or_never().unwrap();
        let (other, _) = affinity
            .suggest_waiting(&sealed("quiet", "a", None))
            .now_or_never()
            .unwrap();
        seen.lock().unwrap().clear();
        assert_eq!(hinted.keys_with(any, fits).keys, [key(5)]);
        assert_eq!(other.keys_with(any, fits).keys, [key(5)]);
        assert!(seen.lock().unwrap().is_empty());
        // Once a key is learned in the namespace, it comes first and nothing is guessed.
        affinity.record("ns", "a", &key(8));
        assert_eq!(
            unhinted.keys_with(any, fits),
            Suggested {
                keys: vec![key(8), key(5)],
                guesses: Vec::new(),
                // The object's own key leads.
                guesses_at: 1,
            }
        );
        assert!(seen.lock().unwrap().is_empty());
    }

    /// The object's own remembered key comes before the namespace's guesses (a namespace
    /// forgotten while its objects are remembered, e.g. after many other namespaces).
    #[test]
    fn an_objects_own_key_comes_before_the_guesses() {
        let affinity = Affinity::with_capacity(100, 2);
        affinity.record("ns", "a", &key(1));
        // Three other namespaces push "ns" out of the namespace memory; "ns/a" stays.
        for n in 0..3u8 {
            affinity.record(&format!("other-{n}"), "x", &key(1));
        }
        affinity.observe("ns", top(0x90));
        let (suggestions, _turn) = affinity
            .suggest_waiting(&sealed("ns", "a", None))
            .now_or_never()
            .unwrap();
        let guess = |_: &[BlockTop], _: &dyn Fn(&KeyId) -> bool| vec![key(7), key(1)];
        let suggested = suggestions.keys_with(any, guess);
        assert_eq!(suggested.first_order()[..2], [key(1), key(7)]);
        assert_eq!(
            (&suggested.guesses[..], suggested.guesses_at),
            (&[key(7)][..], 1)
        );
    }

    #[test]
    fn suggestions_taken_later_include_what_was_learned_since() {
        let affinity = Affinity::default();
        affinity.record("ns", "warm", &key(1));
        let queued = sealed("ns", "queued", None);
        let (later, turn) = affinity
            .suggest_waiting(&queued)
            .now_or_never()
            .expect("no wait once a key is known");
        assert!(turn.is_none());
        // While it waits for an RSA slot, the unseals ahead of it open values with key 2.
        affinity.record("ns", "ahead", &key(2));
        // Taken when the slot is granted: key 2 first.
        assert_eq!(later.keys_with(any, no_fits).keys, [key(2), key(1)]);
        // The handle outlives nothing it borrows: it runs on an RSA thread.
        let on_thread = std::thread::spawn(move || later.keys_with(|k| *k == key(1), no_fits).keys);
        assert_eq!(on_thread.join().unwrap(), [key(1)]);
    }

    #[test]
    fn memory_stays_within_its_capacity_and_keeps_recent_entries() {
        let affinity = Affinity::with_capacity(100, 10);
        for i in 0..10_000u32 {
            affinity.record(&format!("ns-{}", i % 50), &format!("s-{i}"), &key(1));
            let (objects, namespaces) = affinity.len();
            assert!(objects <= 100 && namespaces <= 10, "{objects} {namespaces}");
        }
        // The latest entries survive.
        assert_eq!(
            affinity.suggest(&sealed("ns-49", "s-9999", None), any)[0],
            key(1)
        );
        // An entry read often stays, however many others are written.
        affinity.record("kept", "hot", &key(7));
        for i in 0..1000u32 {
            affinity.record("other", &format!("t-{i}"), &key(8));
            assert_eq!(
                affinity.suggest(&sealed("kept", "hot", None), any)[0],
                key(7)
            );
        }
    }

    #[test]
    fn concurrent_use_from_many_threads_stays_bounded() {
        let affinity = Arc::new(Affinity::with_capacity(64, 8));
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let affinity = affinity.clone();
                std::thread::spawn(move || {
                    for i in 0..500u32 {
                        let ns = format!("ns-{}", i % 16);
                        affinity.record(&ns, &format!("s-{t}-{i}"), &key(t));
                        let suggested = affinity.suggest(&sealed(&ns, "any", None), any);
                        // No object entry for "any": the namespace's keys and the recent ones.
                        assert!(suggested.len() <= 2 + RECENT_KEYS);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (objects, namespaces) = affinity.len();
        assert!(objects <= 64 && namespaces <= 8, "{objects} {namespaces}");
        // Eight threads, eight keys: the cluster-wide memory keeps RECENT_MEMORY at most.
        assert!(affinity.lock().recent.len() <= RECENT_MEMORY);
        for i in 0..20u8 {
            affinity.record("ns", "distinct", &key(50 + i));
        }
        assert_eq!(affinity.lock().recent.len(), RECENT_MEMORY);
    }

    #[test]
    fn suggestions_stop_while_they_keep_missing_and_return_when_values_cluster() {
        let affinity = Affinity::default();
        // Every value sealed by another key than the ones before: suggestions only miss.
        for i in 0..16u8 {
            affinity.record("ns", &format!("s-{i}"), &key(i));
        }
        assert!(!affinity.suggesting());
        assert!(affinity.suggest(&sealed("ns", "new", None), any).is_empty());
        // Values sealed by one key again: its hits bring suggestions back.
        for i in 0..8u8 {
            affinity.record("ns", &format!("t-{i}"), &key(100));
        }
        assert!(affinity.suggesting());
        assert_eq!(
            affinity.suggest(&sealed("ns", "new", None), any)[0],
            key(100)
        );
    }

    #[tokio::test]
    async fn while_cold_unhinted_unseals_take_turns_and_the_next_starts_from_what_was_learned() {
        let affinity = Affinity::default();
        let (first, second) = (sealed("ns", "a", None), sealed("ns", "b", None));
        let (keys, turn) = affinity.suggest_waiting(&first).await;
        assert!(keys.keys_with(any, no_fits).keys.is_empty() && turn.is_some());
        // A hinted object never waits.
        let hinted = sealed("ns", "c", Some(&key(9)));
        let (_, none) = affinity.suggest_waiting(&hinted).now_or_never().unwrap();
        assert!(none.is_none());
        // The second unhinted one waits while the first holds its turn...
        let mut waiting = Box::pin(affinity.suggest_waiting(&second));
        assert!(waiting.as_mut().now_or_never().is_none());
        // ...and starts from the key the first one found.
        affinity.record("ns", "a", &key(3));
        drop(turn);
        let (keys, turn) = waiting.await;
        assert_eq!(keys.keys_with(any, no_fits).keys, [key(3)]);
        assert!(turn.is_none(), "no turns once a key is known");
    }

    /// Each namespace's first trial walk runs once: a second unhinted value of a namespace
    /// with nothing learned waits for the first, another namespace's does not, and a
    /// namespace stays cold (its values take turns) until a key is learned there, whatever
    /// other namespaces learned. Turns are forgotten once nobody holds or waits for them.
    #[tokio::test]
    async fn each_cold_namespace_walks_once_while_other_namespaces_go_on() {
        let affinity = Affinity::default();
        let (a1, a2, b1) = (
            sealed("a", "1", None),
            sealed("a", "2", None),
            sealed("b", "1", None),
        );
        let (_, turn_a) = affinity.suggest_waiting(&a1).await;
        assert!(turn_a.is_some());
        let mut waiting_a = Box::pin(affinity.suggest_waiting(&a2));
        assert!(
            waiting_a.as_mut().now_or_never().is_none(),
            "a's second waits"
        );
        let (_, turn_b) = affinity
            .suggest_waiting(&b1)
            .now_or_never()
            .expect("b does not wait for a");
        assert!(turn_b.is_some(), "b is cold too");
        affinity.record("a", "1", &key(3));
        drop(turn_a);
        let (keys, none) = waiting_a.await;
        assert_eq!(keys.keys_with(any, no_fits).keys, [key(3)]);
        assert!(none.is_none(), "a learned its key");
        // b is still cold after a learned: its next value waits for b's first.
        let b2 = sealed("b", "2", None);
        let mut waiting_b = Box::pin(affinity.suggest_waiting(&b2));
        assert!(waiting_b.as_mut().now_or_never().is_none());
        affinity.record("b", "1", &key(4));
        drop(turn_b);
        let (keys, none) = waiting_b.await;
        assert_eq!(keys.keys_with(any, no_fits).keys[0], key(4));
        assert!(none.is_none());
        assert!(lock(&affinity.turns).is_empty(), "no turn kept");
    }

    #[test]
    fn opened_keeps_every_key_of_the_version_it_opened_and_forgets_unlisted_objects() {
        let opened = Opened::default();
        let mut object = sealed("ns", "x", Some(&key(9)));
        object.metadata.uid = Some("u1".into());
        object.metadata.generation = Some(1);
        let by = unsealed(&[("p", &key(1)), ("q", &key(2)), ("r", &key(1))]);
        // Nothing is recorded until the fleet writer enables it.
        opened.record(&object, &by);
        assert_eq!(opened.len(), 0);
        opened.enable();
        opened.record(&object, &by);
        // Every key that opened a value, each once; the annotation (key 9) plays no part.
        let lookup = |uid, generation| opened.keys("ns", "x", Some(uid), Some(generation));
        assert_eq!(lookup("u1", 1), Some(vec![key(1), key(2)]));
        // A newer generation, or another object under the same name, was not opened.
        assert_eq!(lookup("u1", 2), None);
        assert_eq!(lookup("u2", 1), None);
        assert_eq!(opened.keys("ns", "y", Some("u1"), Some(1)), None);
        // Re-opened with another key after a change: the new key replaces the old ones.
        object.metadata.generation = Some(2);
        opened.record(&object, &unsealed(&[("p", &key(3))]));
        assert_eq!(lookup("u1", 2), Some(vec![key(3)]));
        assert_eq!(lookup("u1", 1), None);
        // An object without UID or generation is not recorded.
        let mut bare = sealed("ns", "bare", None);
        bare.metadata.generation = Some(1);
        opened.record(&bare, &by);
        assert_eq!(opened.len(), 1);
        // A count forgets objects it did not list, except those opened while it ran.
        let mark = opened.mark();
        let mut late = sealed("ns", "late", None);
        late.metadata.uid = Some("u3".into());
        late.metadata.generation = Some(1);
        opened.record(&late, &by);
        opened.retain(mark, |_, _| false);
        assert_eq!(opened.len(), 1);
        assert!(opened.keys("ns", "late", Some("u3"), Some(1)).is_some());
        opened.retain(opened.mark(), |_, name| name == "late");
        assert_eq!(opened.len(), 1);
        opened.retain(opened.mark(), |_, _| false);
        assert_eq!(opened.len(), 0);
        // Disabled again: forgets everything and records nothing.
        opened.record(&object, &by);
        opened.disable();
        opened.record(&object, &by);
        assert_eq!(opened.len(), 0);
    }

    #[test]
    fn most_common_breaks_ties_by_order() {
        let (a, b) = (key(1), key(2));
        assert_eq!(most_common([&a, &b].into_iter()), Some(&a));
        assert_eq!(most_common([&a, &b, &b].into_iter()), Some(&b));
        assert_eq!(most_common(std::iter::empty()), None);
    }
}
