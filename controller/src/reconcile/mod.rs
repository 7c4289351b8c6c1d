//! The SealedSecret reconciler: a kube-runtime [`Controller`] that writes the Secret each
//! SealedSecret seals.
//!
//! Semantics follow Bitnami's controller (reference §4.2), plus:
//! - **Never overwrite a Secret we do not own.** An existing Secret that is neither
//!   controlled by this SealedSecret (controller owner reference with its UID) nor marked
//!   `sealedsecrets.bitnami.com/managed` or `…/patch` is left alone; the SealedSecret gets
//!   `Synced=False` with reason `Unmanaged` and one Warning event.
//! - **Zero RSA work when nothing changed.** Each written Secret carries two annotations:
//!   [`SPEC_DIGEST_ANNOTATION`], the SHA-256 of a canonical encoding of the SealedSecret's
//!   spec and scope metadata, and [`DATA_MAC_ANNOTATION`], an HMAC-SHA256 over the written
//!   data (both defined byte by byte in [`crate::formats`]; never a plain hash of
//!   secret data: UIs such as Argo CD display annotations, and a hash of a short password is
//!   a dictionary lookup away). When the digest matches and the MAC verifies, the reconcile
//!   ends without unsealing: a restart costs no RSA operation, no write, no event and no
//!   request per object (the Secret watch's list is checked against the MACs as it arrives;
//!   see [`crate::cache::secret`]; a reconcile right after start waits up to 30 s for that first
//!   list). A MAC that does not verify means the data was edited (drift): with
//!   drift correction on, the Secret is unsealed again and rewritten.
//! - **Where the MAC key comes from.** It is derived (HKDF-SHA256) from the DER of a private
//!   key in the ring, so it needs no extra Secret, survives restarts and is the same on
//!   every replica that loads the same keys. The annotation names the key it was made with
//!   (`v2:<fingerprint>:<tag>`), so adding a key (rotation) does not
//!   invalidate existing MACs; new MACs use the sealing key. Removing a key (e.g. relabelled
//!   `compromised`) makes the MACs made with it fail: those Secrets are unsealed once more
//!   and get a MAC from a remaining key. A digest or MAC in the older v1 forms (Secrets
//!   written before v2) is still accepted, so upgrading rewrites nothing; the next write of
//!   such a Secret, for whatever reason, stores the v2 forms.
//! - **Status** is written with a JSON merge patch of the status subresource, only when the
//!   condition or `observedGeneration` changes, guarded by the resourceVersion it was computed
//!   from: first the watched object (no read), then, after a conflict, a fresh GET. The
//!   condition has a `reason`.
//! - **A missing Secret is created without reading it first** when the Secret watch has listed
//!   its namespace and holds none; one that exists after all answers AlreadyExists and is read
//!   and judged as before.
//! - **Retries never give up**: capped exponential backoff per object, plus a periodic resync
//!   with jitter; a key ring change, gaining leadership or a re-list of either watch (events
//!   may have been missed) reconciles everything again. Like Bitnami, updates of a
//!   SealedSecret that touch only its status (our own writes) trigger nothing.
//! - **Which Secret changes trigger a reconcile**: those of Secrets controlled by a
//!   SealedSecret (drift correction, re-creation; not the watch event of the controller's own
//!   write, recognised by its resourceVersion), of Secrets marked `managed`, and of a
//!   Secret whose same-named SealedSecret is failing (deleting or marking a blocking Secret
//!   takes effect at once). Deleting an unowned Secret does not re-create it, as in Bitnami
//!   (the next resync does).
//! - **A `managed` Secret stays managed.** Unlike Bitnami, taking over a Secret marked
//!   `sealedsecrets.bitnami.com/managed` keeps the mark (Bitnami drops it with the other
//!   annotations), and re-creating a deleted managed Secret sets it again: deleting it
//!   re-creates it at once through the Secret watch, even when the template skips the owner
//!   reference, not only at the next resync.
//! - **`--accept-deprecated-v1-data=false`** stops every SealedSecret using `spec.data`,
//!   including one synced before: `Synced=False` with reason `DeprecatedDataRejected`, one
//!   Warning event, no RSA work. Its existing Secret is kept as it is (nothing is lost) but no
//!   longer updated; re-sealing into `spec.encryptedData` brings it back.
//! - **Nothing happens before the first keys are loaded.** While the key ring is empty (the
//!   key source not read yet, no mirror, no key Secret), a SealedSecret waits untouched: no
//!   `UnsealFailed`, no Warning event, no status write, no backoff; the ring's first keys
//!   reconcile everything. A key missing from a loaded ring fails as before, with its reason.
//! - Only the leader writes; other replicas requeue without touching anything. Each write
//!   (Secret create or replace, status patch, Event) first checks the fence taken when the
//!   reconcile began ([`crate::cluster::leadership::Fence`]): once the leadership ended, changed term
//!   or outlived its local lease deadline (a frozen or partitioned leader), the write is
//!   refused (`kseal_fenced_writes_total{write}`) and the reconcile ends without touching the
//!   object's status, warnings or backoff.
//! - **The status speaks for the generation the reconcile read**: a status patch is skipped
//!   when the object has a newer generation (its own reconcile follows) and never lowers
//!   `observedGeneration`; a status found behind its generation (a deposed leader's late
//!   write) triggers a reconcile, which repairs it.

pub mod admission;
pub mod affinity;
pub mod writes;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hmac::Mac as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kseal_api::constants::{
    CONDITION_FALSE, CONDITION_SYNCED, CONDITION_TRUE, FIELD_MANAGER, INSTANCE_LABEL, KIND,
    MANAGED_ANNOTATION, PATCH_ANNOTATION, SKIP_SET_OWNER_REFERENCES_ANNOTATION, TRUE,
};
use kseal_api::{SealedSecret, SealedSecretCondition, UnsealOptions};
use kseal_keys::{KeyId, KeyRing, OpenStats};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use tokio::sync::watch;
use tracing::instrument;
use zeroize::Zeroizing;

use crate::cache::sealed::CachedSealed;
use crate::cache::secret::{CachedSecret, Lookup, MacVerdict, SecretCache, WatchedSecret};
use crate::cluster::leadership::Fence;
use crate::config::{Config, Namespaces};
use crate::formats::{self, MacVersion};
use crate::keys::layout::REPORTER;
use crate::metrics::OutcomeLabels;
use crate::reconcile::admission::Admission;
use crate::state::State;
use crate::timing::{WatchBackoff, jitter};
use crate::{Error, Result};

/// A SealedSecret's key in per-object maps and in the controller's queue.
type SsRef = ObjectRef<CachedSealed>;

pub use crate::formats::{DATA_MAC_ANNOTATION, SPEC_DIGEST_ANNOTATION};

/// Condition reasons.
pub mod reason {
    /// The Secret matches the SealedSecret.
    pub const UNSEALED: &str = "Unsealed";
    /// Decrypting failed (wrong key, wrong name or namespace, no keys, malformed item).
    pub const UNSEAL_FAILED: &str = "UnsealFailed";
    /// A Secret of that name exists and is not ours to change.
    pub const UNMANAGED: &str = "Unmanaged";
    /// The existing Secret is immutable and its data would change.
    pub const IMMUTABLE: &str = "Immutable";
    /// Reading or writing the Secret failed.
    pub const UPDATE_FAILED: &str = "UpdateFailed";
    /// The SealedSecret uses the deprecated `spec.data` and the controller refuses it
    /// (`--accept-deprecated-v1-data=false`); an existing Secret is kept, not updated.
    pub const DEPRECATED_DATA_REJECTED: &str = "DeprecatedDataRejected";
}

/// First retry delay after a failure; doubles per consecutive failure.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest retry delay: failures are retried forever, at least this often.
const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Requeue on a replica that holds the leader Lease but may not write (its local lease
/// deadline passed): a renewal in the same term publishes no event. A replica that does not
/// lead waits for a change instead ([`not_writing`]).
const NOT_LEADER_RECHECK: Duration = Duration::from_secs(60);
/// Requeue after a failure that only a change can fix, when resync is off.
const PERMANENT_FAILURE_RECHECK: Duration = Duration::from_secs(600);
/// Consecutive transient failures of a synced object before its status turns False.
const TRANSIENT_FAILURES_TOLERATED: u32 = 2;
/// Attempts of one write before the error goes to the backoff.
const WRITE_ATTEMPTS: usize = 4;
/// Reconciles in flight per unseal slot. A reconcile spends most of its time on API round
/// trips (read the Secret, write it, read and patch the status, publish an event) and holds
/// an unseal slot only for its RSA work; with as many reconciles as slots, the slots (and
/// cores) sat idle during those round trips (`cargo bench --bench scale`: a cold start of
/// 10,000 objects with `--concurrency 2` on 2 cores used 1.5 cores).
const RECONCILES_PER_UNSEAL_SLOT: u16 = 4;

/// How many reconciles one controller runs at a time: [`RECONCILES_PER_UNSEAL_SLOT`] per
/// unseal slot (`--concurrency` bounds the unseals).
fn reconcile_concurrency(config: &Config) -> u16 {
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
const ADMITTED_PER_RECONCILE: usize = 32;

/// What one reconcile did to the Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The Secret was created.
    Created,
    /// The Secret was changed.
    Updated,
    /// Nothing to write.
    Unchanged,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// Per-SealedSecret memory (never holds secret data).
#[derive(Default)]
struct ObjectState {
    /// Which key opened which item last time (the next unseal tries it first), for the items
    /// whose key the object hint or the sealing-key annotation does not already name.
    item_hints: Box<[(String, KeyId)]>,
    /// Consecutive failures (backoff).
    failures: u32,
    /// What few objects need (boxed: one pointer for the others).
    rare: Option<Box<RareState>>,
    /// The instance label of the object's condition gauge series, once a reconcile here set
    /// it (its namespace and name are the object's, its condition `Synced`); `None`: no series.
    gauge: Option<Box<str>>,
    /// The value of the condition gauge (when `gauge` is set): Synced=True.
    synced: bool,
    /// Whether the last reconcile failed (a same-named Secret changing may unblock it).
    failing: bool,
    /// Whether that failure was transient (the API server away, throttling, a conflict): the
    /// API server's return resets its backoff.
    transient: bool,
    /// The resourceVersion of the Secret as this controller last wrote it: the watch event
    /// of our own write triggers no reconcile (it would only confirm what was just written).
    written_version: Option<Box<str>>,
    /// A write of the Secret is in flight: its watch event may come back before its response
    /// (then the response's resourceVersion is not known yet to recognise it).
    writing: bool,
    /// Reconcile again at once (set when a change raced with our own write).
    recheck: bool,
    /// The Secret was deleted while marked `managed`: its re-creation carries the mark again,
    /// so that deleting it once more brings it back too.
    recreate_managed: bool,
}

/// The part of [`ObjectState`] most objects never use.
#[derive(Default)]
struct RareState {
    /// The key that opened the deprecated `spec.data`.
    object_hint: Option<KeyId>,
    /// The last Warning event published (reason, note), to publish each failure once.
    last_warning: Option<(String, String)>,
    /// The resourceVersion of the last Secret event seen while `writing`: if it is not the
    /// version the write returned, someone else wrote, and the object is reconciled again.
    raced_version: Option<String>,
}

impl ObjectState {
    fn rare(&mut self) -> &mut RareState {
        self.rare.get_or_insert_with(Box::default)
    }

    fn object_hint(&self) -> Option<&KeyId> {
        self.rare.as_ref()?.object_hint.as_ref()
    }

    fn take_raced_version(&mut self) -> Option<String> {
        self.rare.as_mut()?.raced_version.take()
    }

    fn forget_warning(&mut self) {
        if let Some(rare) = self.rare.as_mut() {
            rare.last_warning = None;
        }
    }
}

/// [`ObjectState`]s per namespace and name: keys of 16 bytes and one allocation instead of a
/// 96-byte `ObjectRef` and two. Ordered, so that a scrape of the condition gauge can read it
/// a chunk at a time and resume where it stopped.
#[derive(Default)]
struct Objects(BTreeMap<Box<str>, BTreeMap<Box<str>, ObjectState>>);

impl Objects {
    fn get(&self, oref: &SsRef) -> Option<&ObjectState> {
        self.0
            .get(oref.namespace.as_deref().unwrap_or_default())?
            .get(oref.name.as_str())
    }

    fn get_mut(&mut self, oref: &SsRef) -> Option<&mut ObjectState> {
        self.0
            .get_mut(oref.namespace.as_deref().unwrap_or_default())?
            .get_mut(oref.name.as_str())
    }

    /// The entry of `oref`, created if missing (allocating its keys: look up first).
    fn entry(&mut self, oref: &SsRef) -> &mut ObjectState {
        let namespace = oref.namespace.as_deref().unwrap_or_default();
        self.0
            .entry(namespace.into())
            .or_default()
            .entry(oref.name.as_str().into())
            .or_default()
    }

    fn remove(&mut self, oref: &SsRef) -> Option<ObjectState> {
        let namespace = oref.namespace.as_deref().unwrap_or_default();
        let names = self.0.get_mut(namespace)?;
        let removed = names.remove(oref.name.as_str());
        if names.is_empty() {
            self.0.remove(namespace);
        }
        removed
    }

    fn refs(&self) -> impl Iterator<Item = SsRef> + '_ {
        self.0.iter().flat_map(|(namespace, names)| {
            names
                .keys()
                .map(move |name| SsRef::new(name).within(namespace))
        })
    }
}

/// MAC keys derived from the current ring, rebuilt when the ring changes.
#[derive(Default)]
struct MacKeys {
    ring: Option<Arc<KeyRing>>,
    keys: HashMap<(MacVersion, KeyId), Zeroizing<[u8; 32]>>,
}

/// Shared by every reconcile.
pub struct Context {
    client: Client,
    config: Arc<Config>,
    state: State,
    /// Publishes Warning events (kube-runtime's recorder keeps each event for 6 minutes, to
    /// count repeats into a series).
    recorder: Recorder,
    reporter: Reporter,
    mac_keys: Mutex<MacKeys>,
    /// Transient reconcile failures, logged once per burst.
    transient_failures: crate::cluster::apihealth::Burst,
    /// The leadership epoch whose first fenced write was logged (see [`fenced`]).
    fenced_logged: std::sync::atomic::AtomicU64,
    objects: Arc<Mutex<Objects>>,
    /// Bounds RSA work to `--concurrency` unseals at a time across every watched namespace
    /// (each namespace runs its own controller); shared with the HTTP API, which it goes
    /// before.
    rsa_slots: Arc<crate::serve::rsapool::RsaPool>,
    /// Keys that opened unhinted values lately, tried first for the next ones.
    affinity: crate::reconcile::affinity::Affinity,
    /// Secrets as the Secret watches last delivered them, without data.
    secrets: SecretCache,
    /// SealedSecret triggers waiting for room in kube-runtime's scheduler.
    admission: Arc<Admission>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps stay consistent even if a holder panicked (each update is one insert).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Context {
    /// A context for `run` (public for tests that drive `reconcile` directly). A reconcile
    /// waits while the key ring is empty.
    pub fn new(client: Client, config: Arc<Config>, state: State) -> Self {
        let slots = usize::from(config.concurrency.max(1));
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance: Some(config.identity.clone()),
        };
        let recorder = Recorder::new(client.clone(), reporter.clone());
        let objects: Arc<Mutex<Objects>> = Arc::default();
        state.metrics.condition_info.bind(objects.clone());
        state.rsa.configure(slots);
        let rsa_slots = state.rsa.clone();
        let admitted =
            usize::from(reconcile_concurrency(&config)).saturating_mul(ADMITTED_PER_RECONCILE);
        Self {
            client,
            config,
            state,
            recorder,
            reporter,
            mac_keys: Mutex::default(),
            fenced_logged: std::sync::atomic::AtomicU64::new(u64::MAX),
            transient_failures: crate::cluster::apihealth::Burst::default(),
            objects,
            rsa_slots,
            affinity: crate::reconcile::affinity::Affinity::default(),
            secrets: SecretCache::default(),
            admission: Arc::new(Admission::new(admitted)),
        }
    }

    fn with_object<T>(&self, oref: &SsRef, f: impl FnOnce(&mut ObjectState) -> T) -> T {
        let mut objects = lock(&self.objects);
        if let Some(o) = objects.get_mut(oref) {
            return f(o);
        }
        f(objects.entry(oref))
    }

    /// The `version` MAC key derived from `id`, if `ring` holds that key.
    fn mac_key(
        &self,
        ring: &Arc<KeyRing>,
        version: MacVersion,
        id: &KeyId,
    ) -> Option<Zeroizing<[u8; 32]>> {
        let mut cache = lock(&self.mac_keys);
        if !cache.ring.as_ref().is_some_and(|r| Arc::ptr_eq(r, ring)) {
            cache.keys.clear();
            cache.ring = Some(ring.clone());
        }
        let slot = (version, id.clone());
        if let Some(key) = cache.keys.get(&slot) {
            return Some(key.clone());
        }
        let key = formats::derive_mac_key(version, ring.get(id)?)?;
        cache.keys.insert(slot, key.clone());
        Some(key)
    }
}

/// The data items a SealedSecret produces, when known without decrypting (not for the
/// deprecated whole-Secret `spec.data`).
fn expected_items(ss: &SealedSecret) -> Option<BTreeSet<String>> {
    if ss.spec.data.as_deref().is_some_and(|d| !d.is_empty()) {
        return None;
    }
    let mut items: BTreeSet<String> = ss.spec.encrypted_data.keys().cloned().collect();
    if let Some(data) = ss.spec.template.as_ref().and_then(|t| t.data.as_ref()) {
        for (key, value) in data {
            if value.is_some() {
                items.insert(key.clone());
            } else {
                items.remove(key);
            }
        }
    }
    Some(items)
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn is_true(meta: &kube::api::ObjectMeta, key: &str) -> bool {
    annotation(meta, key) == Some(TRUE)
}

fn controlled_by(secret: &Secret, uid: &str) -> bool {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn skips_owner_reference(ss: &SealedSecret) -> bool {
    ss.spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .is_some_and(|m| is_true(m, SKIP_SET_OWNER_REFERENCES_ANNOTATION))
}

/// How an existing Secret may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Replace data, labels, annotations and owner references (ours, or `managed`).
    Replace,
    /// Merge data, labels and annotations; take ownership only when also `managed`.
    Patch { own: bool },
}

/// How `existing` may be written for `ss`, or [`Error::Unmanaged`]. Besides Bitnami's rules
/// (controlled by `ss`, or marked `managed` or `patch`), a Secret that `ss` asks to create
/// without an owner reference is ours when it carries our spec digest: without that, the
/// Secret kseal created would be "unmanaged" from the second reconcile on.
fn mode_for(existing: &Secret, ss: &SealedSecret, uid: &str) -> Result<Mode> {
    let meta = &existing.metadata;
    let managed = is_true(meta, MANAGED_ANNOTATION);
    let ours_without_owner =
        skips_owner_reference(ss) && annotation(meta, SPEC_DIGEST_ANNOTATION).is_some();
    if is_true(meta, PATCH_ANNOTATION) {
        Ok(Mode::Patch { own: managed })
    } else if managed || controlled_by(existing, uid) || ours_without_owner {
        Ok(Mode::Replace)
    } else {
        Err(Error::Unmanaged {
            name: existing.name_any(),
        })
    }
}

fn secret_type(s: &Secret) -> &str {
    s.type_.as_deref().unwrap_or("Opaque")
}

fn empty_data() -> BTreeMap<String, ByteString> {
    BTreeMap::new()
}

/// Whether the existing Secret still holds what we wrote for `ss`, checked without
/// decrypting anything: digest (the current form, or the v1 form of a Secret written
/// before it), MAC over the data, owner reference, template labels and annotations present.
fn in_sync(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    ss: &SealedSecret,
    existing: &Secret,
    mode: Mode,
    digest: &str,
    mac: MacCheck<'_>,
) -> bool {
    let meta = &existing.metadata;
    // From here on `digest` is the digest as stored, which the MAC covers.
    let Some(digest) = annotation(meta, SPEC_DIGEST_ANNOTATION)
        .filter(|stored| formats::digest_matches(stored, ss, digest))
    else {
        return false;
    };
    let uid = ss.metadata.uid.as_deref().unwrap_or_default();
    let wants_owner = !skips_owner_reference(ss)
        && matches!(mode, Mode::Replace | Mode::Patch { own: true })
        && !uid.is_empty();
    if wants_owner && !controlled_by(existing, uid) {
        return false;
    }
    if !ctx.config.drift_correction {
        return true;
    }
    let template_meta = ss.spec.template.as_ref().and_then(|t| t.metadata.as_ref());
    if ss.spec.data.is_none() {
        let subset = |want: Option<&BTreeMap<String, String>>,
                      have: Option<&BTreeMap<String, String>>| {
            want.into_iter()
                .flatten()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
        };
        let Some(tm) = template_meta else {
            return mac.verifies(ctx, ring, ss, existing, mode, digest);
        };
        let mut want_annotations = tm.annotations.clone().unwrap_or_default();
        want_annotations.remove(SPEC_DIGEST_ANNOTATION);
        want_annotations.remove(DATA_MAC_ANNOTATION);
        if !subset(tm.labels.as_ref(), meta.labels.as_ref())
            || !subset(Some(&want_annotations), meta.annotations.as_ref())
        {
            return false;
        }
        if let Some(t) = ss.spec.template.as_ref().and_then(|t| t.type_.as_deref())
            && t != secret_type(existing)
        {
            return false;
        }
    }
    mac.verifies(ctx, ring, ss, existing, mode, digest)
}

/// Where the in-sync check takes the data-MAC verdict from.
#[derive(Clone, Copy)]
enum MacCheck<'a> {
    /// Computed here over the Secret's data (a Secret read with a GET).
    Data,
    /// Decided when the watch delivered the Secret ([`crate::cache::secret`]): it holds for a
    /// Secret written whole (not `patch`) while the ring still holds the key it names (the
    /// MAC key is derived from that key alone).
    Cached(&'a MacVerdict),
}

impl MacCheck<'_> {
    fn verifies(
        self,
        ctx: &Context,
        ring: &Arc<KeyRing>,
        ss: &SealedSecret,
        existing: &Secret,
        mode: Mode,
        digest: &str,
    ) -> bool {
        match self {
            MacCheck::Data => verify_mac(ctx, ring, ss, existing, mode, digest),
            MacCheck::Cached(MacVerdict::Verified(id)) => {
                mode == Mode::Replace && ring.get(id).is_some()
            }
            MacCheck::Cached(MacVerdict::Unknown) => false,
        }
    }
}

/// The data-MAC verdict over every item of a Secret the watch delivered (before its data is
/// wiped; see [`crate::cache::secret`]).
fn mac_verdict(ctx: &Context, secret: &Secret) -> MacVerdict {
    let meta = &secret.metadata;
    if is_true(meta, PATCH_ANNOTATION) {
        return MacVerdict::Unknown;
    }
    let Some(digest) = annotation(meta, SPEC_DIGEST_ANNOTATION) else {
        return MacVerdict::Unknown;
    };
    let empty = empty_data();
    let data = secret.data.as_ref().unwrap_or(&empty);
    match mac_key_verifying(ctx, &ctx.state.keys.ring(), secret, digest, data.iter()) {
        Some(id) => MacVerdict::Verified(id),
        None => MacVerdict::Unknown,
    }
}

fn verify_mac(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    ss: &SealedSecret,
    existing: &Secret,
    mode: Mode,
    digest: &str,
) -> bool {
    let empty = empty_data();
    let data = existing.data.as_ref().unwrap_or(&empty);
    let covered: Vec<(&String, &ByteString)> = match mode {
        Mode::Replace => data.iter().collect(),
        Mode::Patch { .. } => {
            let Some(items) = expected_items(ss) else {
                return false;
            };
            let mut covered = Vec::with_capacity(items.len());
            for item in &items {
                match data.get_key_value(item) {
                    Some(kv) => covered.push(kv),
                    None => return false,
                }
            }
            covered
        }
    };
    mac_key_verifying(ctx, ring, existing, digest, covered.into_iter()).is_some()
}

/// The ring key whose MAC key verifies `secret`'s data-MAC annotation over `covered` and the
/// stored spec `digest`, if any (the comparison is constant-time).
fn mac_key_verifying<'a>(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    secret: &Secret,
    digest: &str,
    covered: impl Iterator<Item = (&'a String, &'a ByteString)>,
) -> Option<KeyId> {
    let meta = &secret.metadata;
    let (version, id, tag) = annotation(meta, DATA_MAC_ANNOTATION).and_then(formats::parse_mac)?;
    let key = ctx.mac_key(ring, version, &id)?;
    let mac = formats::mac_over(
        version,
        &key,
        digest,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        secret_type(secret),
        covered,
    )?;
    mac.verify_slice(&tag).is_ok().then_some(id)
}

/// The unsealed Secret with our annotations, ready to write.
struct Desired {
    secret: Secret,
}

async fn unseal(
    ctx: &Context,
    oref: &SsRef,
    ss: &Arc<SealedSecret>,
    ring: &Arc<KeyRing>,
    digest: &str,
) -> Result<Desired> {
    if ring.is_empty() {
        return Err(Error::NoKeys);
    }
    let (item_hints, object_hint) = ctx.with_object(oref, |o| {
        (
            o.item_hints.iter().cloned().collect(),
            o.object_hint().cloned(),
        )
    });
    // Held until this unseal has taught the affinity (only waits on a cold start).
    let (preferred_keys, _cold_turn) = ctx.affinity.suggest_waiting(ss).await;
    let options = UnsealOptions {
        accept_deprecated_v1_data: ctx.config.accept_deprecated_v1_data,
        item_hints,
        object_hint,
        preferred_keys,
        ..UnsealOptions::default()
    };
    let (sealed, keys) = (ss.clone(), ring.clone());
    // RSA work runs on the RSA pool's threads, off the async worker threads.
    let (result, stats, cpu) = ctx
        .rsa_slots
        .unseal(move || {
            let started = thread_cpu_time();
            let mut stats = OpenStats::default();
            let result = kseal_api::unseal_counted(&sealed, &keys, &options, &mut stats);
            (result, stats, thread_cpu_time().saturating_sub(started))
        })
        .await
        .map_err(|_| Error::Task)?;
    ctx.state
        .metrics
        .rsa_operations
        .inc_by(stats.rsa_operations);
    ctx.state.metrics.unseal_cpu.inc_by(cpu.as_secs_f64());
    let unsealed = result.map_err(Error::Unseal)?;
    ctx.affinity.learn(ss, &unsealed);
    let annotation_hint = ss.sealing_key_hint();
    ctx.with_object(oref, |o| {
        if unsealed.deprecated_data_key.is_some() {
            o.rare().object_hint = unsealed.deprecated_data_key.clone();
        }
        // An item opened by the key the next unseal tries first anyway (the object hint, or
        // the sealing-key annotation) needs no hint of its own: most objects keep none.
        let implied = o.object_hint().or(annotation_hint.as_ref()).cloned();
        o.item_hints = unsealed
            .keys
            .iter()
            .filter(|(_, key)| implied.as_ref() != Some(*key))
            .map(|(item, key)| (item.clone(), key.clone()))
            .collect();
    });
    let mut secret = unsealed.secret;
    normalize(&mut secret);
    // The MAC key is the preferred key even while sealing is disabled (a fleet ring whose
    // active key is unusable still unseals).
    let sealing = ring.preferred_key().ok_or(Error::NoKeys)?;
    let key = ctx
        .mac_key(ring, MacVersion::V2, sealing.id())
        .ok_or(Error::NoKeys)?;
    let empty = empty_data();
    let tag = formats::mac_over(
        MacVersion::V2,
        &key,
        digest,
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default(),
        secret_type(&secret),
        secret.data.as_ref().unwrap_or(&empty).iter(),
    )
    .ok_or(Error::NoKeys)?
    .finalize()
    .into_bytes();
    let annotations = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(SPEC_DIGEST_ANNOTATION.to_owned(), digest.to_owned());
    annotations.insert(
        DATA_MAC_ANNOTATION.to_owned(),
        formats::format_mac(sealing.id(), tag.as_slice()),
    );
    Ok(Desired { secret })
}

/// CPU time of the calling thread so far.
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or_default(),
        u32::try_from(t.tv_nsec).unwrap_or_default(),
    )
}

/// Empty maps and lists read back from the API server as absent; compare like with like.
fn normalize(s: &mut Secret) {
    let m = &mut s.metadata;
    if m.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        m.labels = None;
    }
    if m.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        m.annotations = None;
    }
    if m.owner_references.as_ref().is_some_and(Vec::is_empty) {
        m.owner_references = None;
    }
    if s.data.as_ref().is_some_and(BTreeMap::is_empty) {
        s.data = None;
    }
}

/// The existing Secret changed as `mode` prescribes.
fn updated(existing: &Secret, desired: &Secret, mode: Mode) -> Secret {
    let mut s = existing.clone();
    let d = &desired.metadata;
    match mode {
        Mode::Replace => {
            let managed = is_true(&existing.metadata, MANAGED_ANNOTATION);
            s.metadata.labels = d.labels.clone();
            s.metadata.annotations = d.annotations.clone();
            if managed {
                // Still managed: a deletion re-creates it at once (see `secret_trigger`),
                // with or without an owner reference.
                s.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(MANAGED_ANNOTATION.to_owned(), TRUE.to_owned());
            }
            s.metadata.owner_references = d.owner_references.clone();
            s.data = desired.data.clone();
        }
        Mode::Patch { own } => {
            let merge = |into: &mut Option<BTreeMap<String, String>>,
                         from: &Option<BTreeMap<String, String>>| {
                if let Some(from) = from {
                    into.get_or_insert_with(BTreeMap::new)
                        .extend(from.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            };
            merge(&mut s.metadata.labels, &d.labels);
            merge(&mut s.metadata.annotations, &d.annotations);
            if own {
                s.metadata.owner_references = d.owner_references.clone();
            }
            if let Some(data) = &desired.data {
                s.data
                    .get_or_insert_with(BTreeMap::new)
                    .extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }
    if desired.type_.is_some() {
        s.type_ = desired.type_.clone();
    }
    s.string_data = None;
    normalize(&mut s);
    s
}

fn is_immutable_error(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422
        && s.message.ends_with("field is immutable when `immutable` is set"))
}

/// Whether retrying may succeed without any change: server errors, throttling, conflicts
/// and transport failures.
fn is_transient(error: &Error) -> bool {
    match error {
        Error::GetSecret(e) | Error::ApplySecret(e) | Error::Status(e) | Error::Kube(e) => {
            match api_code(e) {
                Some(code) => code >= 500 || code == 429 || code == 409,
                None => true,
            }
        }
        _ => false,
    }
}

/// Whether the request did not reach an answering API server: a transport error, or a 5xx
/// (not a 409 conflict nor a 429, which an answering server sends).
fn unreachable(error: &Error) -> bool {
    match error {
        Error::GetSecret(e) | Error::ApplySecret(e) | Error::Status(e) | Error::Kube(e) => {
            crate::cluster::apihealth::unreachable(e)
        }
        _ => false,
    }
}

/// What a step's result says about the API server: `Some(true)` when it answered (`wrote`:
/// a write went through; or it answered a request with an error status of its own),
/// `Some(false)` when it could not be reached, `None` when the step got no answer either
/// way (its outcome came from the caches, or it failed before any request).
fn reachability(result: Result<bool, &Error>) -> Option<bool> {
    match result {
        Ok(wrote) => wrote.then_some(true),
        Err(e) if unreachable(e) => Some(false),
        Err(Error::GetSecret(_) | Error::ApplySecret(_) | Error::Status(_) | Error::Kube(_)) => {
            Some(true)
        }
        Err(_) => None,
    }
}

/// Tells the API server's health tracker what `step` learned ([`reachability`]): only an
/// answer marks it reachable again, so an outcome read from the caches during an outage
/// does not announce a recovery and reset every backoff.
fn report_reachability(ctx: &Context, step: &'static str, result: Result<bool, &Error>) {
    match (reachability(result), result) {
        (Some(false), Err(e)) => ctx.state.api_unreachable(step, e),
        (Some(true), _) => ctx.state.api_answered(),
        _ => {}
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Marks a write of an object's Secret as in flight, until dropped (also when the reconcile
/// is cancelled mid-write).
struct Writing<'a> {
    ctx: &'a Context,
    oref: &'a SsRef,
}

impl<'a> Writing<'a> {
    fn start(ctx: &'a Context, oref: &'a SsRef) -> Self {
        ctx.with_object(oref, |o| o.writing = true);
        Self { ctx, oref }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.ctx.with_object(self.oref, |o| o.writing = false);
    }
}

/// Brings the Secret in line with `ss`. `stripped_digest`: `ss` was cached without its
/// encrypted values and this is its spec digest; if the Secret cannot be confirmed without
/// them, [`Error::Incomplete`] (before any write).
async fn sync(
    ctx: &Context,
    ss: &Arc<SealedSecret>,
    stripped_digest: Option<String>,
    fence: &Fence,
) -> Result<Outcome> {
    let name = ss
        .metadata
        .name
        .as_deref()
        .ok_or(Error::MissingMetadata("name"))?;
    let namespace = ss
        .metadata
        .namespace
        .as_deref()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let uid = ss
        .metadata
        .uid
        .as_deref()
        .ok_or(Error::MissingMetadata("uid"))?;
    if !ctx.config.accept_deprecated_v1_data
        && ss.spec.data.as_deref().is_some_and(|d| !d.is_empty())
    {
        // Before the in-sync check: a v1 SealedSecret synced while the format was accepted
        // must stop too, not stay `Synced=True` on the strength of its old Secret.
        return Err(Error::DeprecatedDataRejected);
    }
    let oref = SsRef::new(name).within(namespace);
    // Built only for a read the cache cannot answer (kube formats its URL each time).
    let secrets = || Api::<Secret>::namespaced(ctx.client.clone(), namespace);
    let stripped = stripped_digest.is_some();
    let digest = stripped_digest.unwrap_or_else(|| formats::spec_digest(ss));
    let ring = ctx.state.keys.ring();
    let unseal = async || {
        if stripped {
            return Err(Error::Incomplete);
        }
        unseal(ctx, &oref, ss, &ring, &digest).await
    };
    let mut desired: Option<Desired> = None;
    let pp = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        // The first look goes to the watched cache: a Secret in sync ends here and a missing
        // one is created without a read. Anything else, and every retry, reads the Secret.
        let cached = if attempt == 1 {
            ctx.secrets.lookup(namespace, name)
        } else {
            Lookup::NotListed
        };
        let existing = match cached {
            Lookup::Absent => None,
            Lookup::Present(c) => {
                let seen = c.to_secret();
                let mode = mode_for(&seen, ss, uid);
                let mac = MacCheck::Cached(&c.mac);
                if mode.is_ok_and(|m| in_sync(ctx, &ring, ss, &seen, m, &digest, mac)) {
                    ctx.with_object(&oref, |o| o.recreate_managed = false);
                    return Ok(Outcome::Unchanged);
                }
                secrets().get_opt(name).await.map_err(Error::GetSecret)?
            }
            Lookup::NotListed => secrets().get_opt(name).await.map_err(Error::GetSecret)?,
        };
        let result = match &existing {
            None => {
                if desired.is_none() {
                    desired = Some(unseal().await?);
                }
                let Some(d) = &desired else { continue };
                let managed = ctx.with_object(&oref, |o| o.recreate_managed);
                fence.check().map_err(Error::Fenced)?;
                let _writing = Writing::start(ctx, &oref);
                let created = if managed {
                    let mut s = d.secret.clone();
                    s.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(MANAGED_ANNOTATION.to_owned(), TRUE.to_owned());
                    writes::create(&ctx.client, namespace, &pp, &s).await
                } else {
                    writes::create(&ctx.client, namespace, &pp, &d.secret).await
                };
                if created.is_ok() && managed {
                    ctx.with_object(&oref, |o| o.recreate_managed = false);
                }
                created.map(|version| (Outcome::Created, version))
            }
            Some(existing) => {
                ctx.with_object(&oref, |o| o.recreate_managed = false);
                let mode = mode_for(existing, ss, uid)?;
                if desired.is_none()
                    && in_sync(ctx, &ring, ss, existing, mode, &digest, MacCheck::Data)
                {
                    return Ok(Outcome::Unchanged);
                }
                if desired.is_none() {
                    desired = Some(unseal().await?);
                }
                let Some(d) = &desired else { continue };
                let mut current = existing.clone();
                normalize(&mut current);
                let next = updated(&current, &d.secret, mode);
                if next == current {
                    return Ok(Outcome::Unchanged);
                }
                if existing.immutable == Some(true) && next.data != current.data {
                    return Err(Error::Immutable {
                        name: name.to_owned(),
                    });
                }
                fence.check().map_err(Error::Fenced)?;
                let _writing = Writing::start(ctx, &oref);
                writes::replace(&ctx.client, namespace, name, &pp, &next)
                    .await
                    .map(|version| (Outcome::Updated, version))
            }
        };
        // (`Writing` has already cleared `writing`.)
        let raced = ctx.with_object(&oref, |o| o.take_raced_version());
        match result {
            Ok((outcome, version)) => {
                ctx.with_object(&oref, |o| {
                    // A Secret event that arrived during the write and is not the write itself.
                    o.recheck |= raced.is_some_and(|r| Some(r) != version);
                    o.written_version = version.map(String::into_boxed_str);
                });
                return Ok(outcome);
            }
            Err(e) if is_immutable_error(&e) => {
                return Err(Error::Immutable {
                    name: name.to_owned(),
                });
            }
            // Someone else wrote in between (409 Conflict / AlreadyExists): read again.
            Err(e) if api_code(&e) == Some(409) && attempt < WRITE_ATTEMPTS => {
                tracing::debug!("secret changed while writing; retrying");
            }
            Err(e) => return Err(Error::ApplySecret(e)),
        }
    }
}

/// The Synced condition a reconcile result calls for.
struct DesiredCondition {
    status: &'static str,
    reason: &'static str,
    message: Option<String>,
}

fn condition_for(result: &Result<Outcome>) -> DesiredCondition {
    match result {
        Ok(_) => DesiredCondition {
            status: CONDITION_TRUE,
            reason: reason::UNSEALED,
            message: None,
        },
        Err(e) => DesiredCondition {
            status: CONDITION_FALSE,
            reason: match e {
                Error::Unseal(_) | Error::NoKeys => reason::UNSEAL_FAILED,
                Error::DeprecatedDataRejected => reason::DEPRECATED_DATA_REJECTED,
                Error::Unmanaged { .. } => reason::UNMANAGED,
                Error::Immutable { .. } => reason::IMMUTABLE,
                _ => reason::UPDATE_FAILED,
            },
            message: Some(crate::error_chain(e)),
        },
    }
}

fn condition_matches(
    status: Option<&kseal_api::SealedSecretStatus>,
    want: &DesiredCondition,
    generation: Option<i64>,
) -> bool {
    let Some(status) = status else { return false };
    let synced = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION_SYNCED);
    synced.is_some_and(|c| {
        c.status == want.status
            && c.reason.as_deref() == Some(want.reason)
            && c.message.as_deref().filter(|m| !m.is_empty()) == want.message.as_deref()
    }) && status.observed_generation == generation
}

/// Writes the Synced condition if it changed. Returns whether it wrote.
async fn write_status(
    ctx: &Context,
    ss: &SealedSecret,
    want: &DesiredCondition,
    fence: &Fence,
) -> Result<bool> {
    let generation = ss.metadata.generation;
    if !ctx.config.update_status || condition_matches(ss.status.as_ref(), want, generation) {
        return Ok(false);
    }
    let (Some(name), Some(namespace)) = (
        ss.metadata.name.as_deref(),
        ss.metadata.namespace.as_deref(),
    ) else {
        return Err(Error::MissingMetadata("name"));
    };
    // Built only for a read after a conflict (kube formats its URL each time).
    let api = || Api::<SealedSecret>::namespaced(ctx.client.clone(), namespace);
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let mut read: Option<SealedSecret> = None;
    for attempt in 1..=WRITE_ATTEMPTS {
        // The first patch is computed from the object this reconcile read (the watch's cache:
        // no request) and guarded by its resourceVersion, so it applies only if nothing
        // changed since; after a conflict, from a fresh read.
        let fresh: &SealedSecret = if attempt == 1 && ss.metadata.resource_version.is_some() {
            ss
        } else {
            match api().get_status(name).await {
                Ok(f) => read.insert(f),
                Err(e) if api_code(&e) == Some(404) => return Ok(false),
                Err(e) => return Err(Error::Status(e)),
            }
        };
        if fresh.metadata.uid != ss.metadata.uid {
            return Ok(false);
        }
        // The status speaks for the generation this reconcile read. A newer generation's
        // reconcile writes its own, and an observedGeneration never goes back.
        let observed = fresh.status.as_ref().and_then(|s| s.observed_generation);
        if fresh.metadata.generation > generation || observed > generation {
            return Ok(false);
        }
        if condition_matches(fresh.status.as_ref(), want, generation) {
            return Ok(false);
        }
        let now = Time(jiff::Timestamp::now());
        let mut conditions: Vec<SealedSecretCondition> = fresh
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let previous = conditions.iter().position(|c| c.type_ == CONDITION_SYNCED);
        let transition = match previous.map(|i| &conditions[i]) {
            Some(c) if c.status == want.status => {
                c.last_transition_time.clone().or(Some(now.clone()))
            }
            _ => Some(now.clone()),
        };
        let condition = SealedSecretCondition {
            last_transition_time: transition,
            last_update_time: Some(now),
            message: want.message.clone(),
            reason: Some(want.reason.to_owned()),
            status: want.status.to_owned(),
            type_: CONDITION_SYNCED.to_owned(),
        };
        match previous {
            Some(i) => conditions[i] = condition,
            None => conditions.insert(0, condition),
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": fresh.metadata.resource_version},
            "status": {"conditions": conditions, "observedGeneration": generation},
        });
        fence.check().map_err(Error::Fenced)?;
        let patched = writes::patch_status::<SealedSecret, _>(
            &ctx.client,
            namespace,
            name,
            &pp,
            &Patch::Merge(&patch),
        )
        .await;
        match patched {
            Ok(_) => return Ok(true),
            Err(e) if api_code(&e) == Some(409) && attempt < WRITE_ATTEMPTS => continue,
            Err(e) if api_code(&e) == Some(404) => return Ok(false),
            Err(e) => return Err(Error::Status(e)),
        }
    }
    Ok(false)
}

/// The `action` of the controller's Events.
const EVENT_ACTION: &str = "Unseal";

async fn publish_event(
    ctx: &Context,
    fence: &Fence,
    ss: &SealedSecret,
    type_: EventType,
    reason: &str,
    note: String,
) {
    if let Err(e) = fence.check() {
        fenced(ctx, "event", e);
        return;
    }
    match type_ {
        // A Normal event goes out once per write of the Secret, so it starts no series: written
        // directly, reading nothing of the answer back. (kube's `Recorder` would keep one event
        // per SealedSecret for 6 minutes after a cold start, 27 MiB for 10,000 objects, only to
        // count repeats the reconciler does not produce, and parse each answer whole.)
        EventType::Normal => {
            let Some(namespace) = ss.metadata.namespace.as_deref() else {
                return;
            };
            let event = writes::event(
                &ctx.reporter,
                ss.object_ref(&()),
                "Normal",
                reason,
                EVENT_ACTION,
                note,
            );
            let pp = PostParams::default();
            if let Err(e) = writes::create_unread(&ctx.client, namespace, &pp, &event).await {
                tracing::debug!(error = %crate::error_chain(&e), "failed to publish event");
            }
        }
        // Warnings repeat while an object keeps failing: the shared recorder counts them into
        // a series instead of writing one event each time.
        EventType::Warning => {
            let event = Event {
                type_,
                reason: reason.to_owned(),
                note: Some(note),
                action: EVENT_ACTION.to_owned(),
                secondary: None,
            };
            if let Err(e) = ctx.recorder.publish(&event, &ss.object_ref(&())).await {
                tracing::debug!(error = %crate::error_chain(&e), "failed to publish event");
            }
        }
    }
}

fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let d = BACKOFF_BASE.saturating_mul(1u32 << exp).min(BACKOFF_CAP);
    jitter(d, 0.1)
}

/// After a success the object waits for a change; the resync (`--resync-period`) re-queues
/// every object through `admission` (`bulk_triggers`), so kube-runtime's scheduler does not
/// hold a timer for each of them.
fn success_action() -> Action {
    Action::await_change()
}

/// Reconciles one SealedSecret.
#[instrument(skip(cached, ctx))]
pub async fn reconcile(cached: Arc<CachedSealed>, ctx: Arc<Context>) -> Result<Action> {
    if let (Some(namespace), Some(name)) = (&cached.meta().namespace, &cached.meta().name) {
        ctx.admission.started(namespace, name);
    }
    // Every write below checks this fence first: a replica whose leadership ended, changed
    // term or outlived its local lease deadline (frozen, partitioned) writes nothing more.
    let Some(fence) = ctx.state.leadership.fence() else {
        return Ok(not_writing(ctx.state.leadership.term().leading));
    };
    let mut obj = Arc::new(cached.sealed().map_err(Error::Cache)?);
    let metrics = &ctx.state.metrics;
    if ctx.state.keys.ring().is_empty() {
        // No key loaded yet (from the key source, its mirror or key Secrets): not a failure
        // of this object. It waits untouched (no status, no event, no backoff) and the
        // ring's first keys reconcile everything (`ring_changes`). A ring that is not empty
        // implies the first load finished.
        metrics
            .reconciles
            .get_or_create(&OutcomeLabels {
                outcome: "waiting_for_keys".to_owned(),
            })
            .inc();
        return Ok(Action::await_change());
    }
    if !ctx.config.skip_recreate {
        // Right after start, the Secret watch is still listing: waiting for it lets this
        // reconcile confirm the Secret from the list instead of with a GET of its own.
        ctx.secrets
            .wait_listed(obj.metadata.namespace.as_deref().unwrap_or_default())
            .await;
    }
    metrics.unseal_requests.inc();
    let start = Instant::now();
    let oref = ObjectRef::from_obj(&*cached);
    let namespace = obj.namespace().unwrap_or_default();

    let mut result = sync(&ctx, &obj, cached.stripped_digest(), &fence).await;
    if matches!(result, Err(Error::Incomplete)) {
        // Kept without its encrypted values, and they are needed: read it whole, through the
        // status subresource (which returns the whole object; the controller's RBAC has no
        // `get` on SealedSecrets themselves).
        let api: Api<SealedSecret> = Api::namespaced(ctx.client.clone(), &namespace);
        metrics.sealed_secret_reads.inc();
        result = match api.get_status(&obj.name_any()).await {
            Ok(whole) => {
                obj = Arc::new(whole);
                sync(&ctx, &obj, None, &fence).await
            }
            // Deleted since: its deletion event follows.
            Err(e) if api_code(&e) == Some(404) => return Ok(Action::await_change()),
            Err(e) => Err(Error::Kube(e)),
        };
    }
    if let Err(Error::Fenced(e)) = &result {
        return Ok(fenced(&ctx, "secret", *e));
    }
    ctx.with_object(&oref, |o| {
        o.failing = result.is_err();
        o.transient = result.as_ref().is_err_and(is_transient);
    });
    report_reachability(
        &ctx,
        "reconciling",
        result.as_ref().map(|o| *o != Outcome::Unchanged),
    );
    let want = condition_for(&result);
    let was_true = obj
        .synced_condition()
        .is_some_and(|c| c.status == CONDITION_TRUE);
    // A transient API failure (5xx, 429, a conflict, a broken connection) on a synced object
    // is retried a few times before the status flips to False and a warning goes out, so a
    // blip of the API server does not make every SealedSecret look degraded (e.g. in Argo CD).
    let holding = match &result {
        Err(e) if was_true && is_transient(e) => {
            ctx.with_object(&oref, |o| o.failures) < TRANSIENT_FAILURES_TOLERATED
        }
        _ => false,
    };
    let status_result = if holding {
        Ok(false)
    } else {
        write_status(&ctx, &obj, &want, &fence).await
    };
    if let Err(Error::Fenced(e)) = &status_result {
        return Ok(fenced(&ctx, "status", *e));
    }
    report_reachability(&ctx, "writing status", status_result.as_ref().map(|w| *w));

    match &result {
        Ok(outcome) => {
            if matches!(outcome, Outcome::Created | Outcome::Updated) {
                tracing::info!(outcome = outcome.label(), "secret written");
            }
            let flipped = !was_true && obj.synced_condition().is_some();
            if matches!(outcome, Outcome::Created | Outcome::Updated) || flipped {
                publish_event(
                    &ctx,
                    &fence,
                    &obj,
                    EventType::Normal,
                    "Unsealed",
                    "SealedSecret unsealed successfully".to_owned(),
                )
                .await;
            }
            ctx.with_object(&oref, ObjectState::forget_warning);
        }
        Err(e) => {
            let message = want.message.clone().unwrap_or_default();
            if is_transient(e) {
                // Retried with backoff; during an outage every object fails the same way:
                // one line per burst, with the count of the others.
                if let Some(not_logged) = ctx.transient_failures.hit() {
                    tracing::warn!(reason = want.reason, error = %message, not_logged, "reconcile failed (transient; retrying)");
                } else {
                    tracing::debug!(reason = want.reason, error = %message, "reconcile failed (transient; retrying)");
                }
            } else {
                tracing::warn!(reason = want.reason, error = %message, "reconcile failed");
            }
            metrics.count_error(e, &namespace);
            let event_reason = match want.reason {
                reason::UNSEAL_FAILED | reason::DEPRECATED_DATA_REJECTED => "ErrUnsealFailed",
                _ => "ErrUpdateFailed",
            };
            let already_shown = obj.synced_condition().is_some_and(|c| {
                c.status == CONDITION_FALSE
                    && c.reason.as_deref() == Some(want.reason)
                    && c.message.as_deref() == Some(message.as_str())
            });
            let key = (event_reason.to_owned(), message.clone());
            let fresh = !holding
                && ctx.with_object(&oref, |o| {
                    let rare = o.rare();
                    let fresh = rare.last_warning.as_ref() != Some(&key);
                    rare.last_warning = Some(key);
                    fresh
                });
            if fresh && !already_shown {
                publish_event(
                    &ctx,
                    &fence,
                    &obj,
                    EventType::Warning,
                    event_reason,
                    message,
                )
                .await;
            }
        }
    }

    let instance = obj.labels().get(INSTANCE_LABEL).map_or("", String::as_str);
    ctx.with_object(&oref, |o| {
        if o.gauge.as_deref() != Some(instance) {
            o.gauge = Some(instance.into());
        }
        o.synced = result.is_ok();
    });
    let outcome = match &result {
        Ok(o) => o.label(),
        Err(_) => "failed",
    };
    metrics
        .reconciles
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .inc();
    metrics
        .reconcile_duration
        .observe(start.elapsed().as_secs_f64());

    if let Err(e) = status_result {
        if !is_transient(&e) || ctx.transient_failures.hit().is_some() {
            tracing::warn!(error = %crate::error_chain(&e), "failed to write status");
        }
        metrics.count_error(&e, &namespace);
        return Err(e);
    }
    match result {
        Ok(_) => {
            let recheck = ctx.with_object(&oref, |o| {
                o.failures = 0;
                std::mem::take(&mut o.recheck)
            });
            if recheck {
                return Ok(Action::requeue(Duration::ZERO));
            }
            Ok(success_action())
        }
        // Only a change (of the Secret, the SealedSecret or the keys) can fix these; the
        // watches trigger on such changes, so no hot retry loop.
        Err(Error::Unmanaged { .. } | Error::Immutable { .. } | Error::DeprecatedDataRejected) => {
            Ok(Action::requeue(
                ctx.config
                    .resync_period
                    .map_or(PERMANENT_FAILURE_RECHECK, |p| jitter(p, 0.1)),
            ))
        }
        Err(e) => Err(e),
    }
}

/// A write refused by the fence: counted, logged, and the reconcile ends without touching
/// the object's memory (status, backoff, warnings). Gaining leadership again reconciles
/// everything.
fn fenced(
    ctx: &Context,
    write: &'static str,
    reason: crate::cluster::leadership::Fenced,
) -> Action {
    // One line per term (the first refusal), the rest at debug: a deposed leader may hold
    // thousands of reconciles.
    let epoch = ctx.state.leadership.term().epoch;
    let first = ctx
        .fenced_logged
        .swap(epoch, std::sync::atomic::Ordering::Relaxed)
        != epoch;
    ctx.state.metrics.count_fenced(write);
    ctx.state
        .metrics
        .reconciles
        .get_or_create(&OutcomeLabels {
            outcome: "fenced".to_owned(),
        })
        .inc();
    if first {
        tracing::warn!(write, reason = %reason, "write refused: this replica no longer leads; in-flight reconciles are dropped");
    } else {
        tracing::debug!(write, reason = %reason, "write refused: this replica no longer leads");
    }
    not_writing(ctx.state.leadership.term().leading)
}

/// What a reconcile that may not write waits for, given whether this replica holds the
/// leader Lease (`leading`).
///
/// - Not leading (a follower, or deposed): nothing but a change. Gaining leadership starts a
///   new term, which queues every object ([`leadership_gained`]); a per-object timer would
///   keep every object of a follower in the scheduler for good (about 700 bytes each) and
///   wake each once a minute for nothing. Should the term start while this reconcile runs,
///   the object is queued again and runs once this one ends.
/// - Leading, but past the local lease deadline (a frozen process, a late renewal): a
///   recheck after [`NOT_LEADER_RECHECK`], since a renewal in the same term publishes no
///   event; losing the Lease meanwhile leaves the object waiting for the next term, as above.
fn not_writing(leading: bool) -> Action {
    if leading {
        Action::requeue(NOT_LEADER_RECHECK)
    } else {
        Action::await_change()
    }
}

/// Retry policy: capped exponential backoff per object, never giving up.
pub fn error_policy(obj: Arc<CachedSealed>, _error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.with_object(&ObjectRef::from_obj(&*obj), |o| {
        o.failures = o.failures.saturating_add(1);
        o.failures
    });
    Action::requeue(backoff(failures))
}

/// Maps a Secret event to the SealedSecret to reconcile: the controlling SealedSecret, the
/// same-named one when the Secret is marked `managed`, or the same-named one while its last
/// reconcile failed (so removing a blocking Secret, or marking it managed, takes effect at
/// once). Deleting an unowned Secret does not re-create it (as in Bitnami).
fn secret_trigger(ctx: &Context, meta: &kube::api::ObjectMeta, deleted: bool) -> Option<SsRef> {
    let namespace = meta.namespace.as_deref()?;
    let managed = is_true(meta, MANAGED_ANNOTATION);
    if let Some(owner) = meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true) && o.kind == KIND && o.api_version.starts_with("bitnami.com/")
    }) {
        let oref = ObjectRef::new(&owner.name).within(namespace);
        if deleted && managed {
            ctx.with_object(&oref, |o| o.recreate_managed = true);
        }
        // Our own write coming back: nothing changed since (any other write changes the
        // resourceVersion; a deletion always triggers).
        let own_write = !deleted
            && meta.resource_version.is_some()
            && lock(&ctx.objects).get_mut(&oref).is_some_and(|o| {
                if o.writing {
                    // Decided when the write returns (see `sync`): ours, or a recheck.
                    o.rare().raced_version.clone_from(&meta.resource_version);
                    return true;
                }
                o.written_version.as_deref() == meta.resource_version.as_deref()
            });
        return (!own_write).then_some(oref);
    }
    let oref = ObjectRef::new(meta.name.as_deref()?).within(namespace);
    if managed {
        if deleted {
            // Only the same-named SealedSecret's reconcile acts on this; without one, the
            // entry is pruned like any other.
            ctx.with_object(&oref, |o| o.recreate_managed = true);
        }
        return Some(oref);
    }
    // Decided from in-process state set when a reconcile ends, never from a cache that may
    // lag behind.
    let failing = lock(&ctx.objects).get(&oref).is_some_and(|o| o.failing);
    failing.then_some(oref)
}

/// SealedSecrets to reconcile from their watch, which also fills the store (`writer`): every
/// object of a (re-)list, since changes may have been missed while the watch was down, then
/// only updates that change [`relevant_fields`](crate::cache::sealed::relevant_fields) (like
/// Bitnami, our own status writes do not trigger a reconcile), or that turn the status
/// [behind](crate::cache::sealed::status_behind) the generation. An update is compared with
/// the store's entry before the update is applied to it.
fn sealed_triggers(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<CachedSealed>>> + Send + 'static,
    state: State,
    mut writer: reflector::store::Writer<CachedSealed>,
    admission: Arc<Admission>,
    scope: Option<String>,
) -> impl futures::Stream<Item = watcher::Result<CachedSealed>> + Send + 'static {
    let reader = writer.as_reader();
    events.filter_map(move |event| {
        let mut event = match event {
            Ok(event) => {
                state.api_answered();
                event
            }
            // Counted and logged here (once per burst); the watcher retries it.
            Err(e) => {
                state.watch_failed("sealedsecrets", &e);
                return futures::future::ready(None);
            }
        };
        if let watcher::Event::Apply(ss) | watcher::Event::InitApply(ss) = &mut event {
            ss.forget_version();
        }
        let trigger = match &event {
            watcher::Event::InitApply(_) => true,
            watcher::Event::Apply(ss) => {
                let now = ss.trigger_fields();
                let before = reader
                    .get(&ObjectRef::from_obj(ss))
                    .map(|b| b.trigger_fields());
                let turned_behind = now.1 && !before.is_some_and(|b| b.1);
                before.map(|b| b.0) != Some(now.0) || turned_behind
            }
            watcher::Event::Init | watcher::Event::InitDone | watcher::Event::Delete(_) => false,
        };
        writer.apply_watcher_event(&event);
        // Triggers queue for the scheduler (`admission`); this stream itself yields nothing.
        if let watcher::Event::Apply(ss) | watcher::Event::InitApply(ss) = &event
            && trigger
            && let (Some(namespace), Some(name)) = (&ss.meta().namespace, &ss.meta().name)
        {
            admission.push(scope.as_deref(), namespace, name);
        }
        futures::future::ready(None)
    })
}

/// SealedSecrets to reconcile from the Secret watch of `scope`: [`secret_trigger`] for each
/// change, and every SealedSecret after a re-list (a Secret deleted while the watch was down
/// shows up as nothing at all). Each event first updates the [Secret cache](SecretCache),
/// so a reconcile it triggers reads the Secret as the event delivered it.
fn secret_triggers(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<WatchedSecret>>> + Send + 'static,
    ctx: Arc<Context>,
    store: Store<CachedSealed>,
    scope: Option<String>,
) -> impl futures::Stream<Item = SsRef> + Send + 'static {
    let cache = {
        let scope = scope.clone();
        move |ctx: &Context, secret: Secret| {
            let mac = mac_verdict(ctx, &secret);
            ctx.secrets.apply(&scope, CachedSecret::new(secret, mac));
        }
    };
    events
        .scan(false, move |listed_before, event| {
            if event.is_ok() {
                ctx.state.api_answered();
            }
            let refs: Vec<SsRef> = match event {
                Ok(watcher::Event::Apply(WatchedSecret(s))) => {
                    let refs = secret_trigger(&ctx, &s.metadata, false);
                    cache(&ctx, s);
                    refs.into_iter().collect()
                }
                Ok(watcher::Event::Delete(WatchedSecret(s))) => {
                    ctx.secrets.delete(&s);
                    secret_trigger(&ctx, &s.metadata, true)
                        .into_iter()
                        .collect()
                }
                Ok(watcher::Event::Init) => {
                    ctx.secrets.list_started(&scope);
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(WatchedSecret(s))) => {
                    cache(&ctx, s);
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    ctx.secrets.list_done(&scope);
                    let relist = std::mem::replace(listed_before, true);
                    if relist {
                        store
                            .state()
                            .iter()
                            .map(|ss| ObjectRef::from_obj(&**ss))
                            .collect()
                    } else {
                        Vec::new()
                    }
                }
                Err(e) => {
                    ctx.state.watch_failed("secrets", &e);
                    Vec::new()
                }
            };
            futures::future::ready(Some(futures::stream::iter(refs)))
        })
        .flatten()
}

/// Resolves once the key ring holds a key (at once when it already does).
async fn first_keys(state: State) {
    let mut rx = state.keys.subscribe();
    if rx.wait_for(|ring| !ring.is_empty()).await.is_err() {
        // The ring's sender is gone: no key will ever come.
        futures::future::pending::<()>().await;
    }
}

/// After the API server came back: the objects whose last reconcile failed only because it
/// was away (a transient error), with their backoff reset, so they are retried now rather
/// than at the end of a backoff that grew during the outage.
fn recovered_triggers(
    ctx: Arc<Context>,
    store: Store<CachedSealed>,
) -> impl futures::Stream<Item = SsRef> + Send + 'static {
    let mut rx = ctx.state.api.recoveries();
    rx.mark_unchanged();
    futures::stream::unfold(rx, move |mut rx| {
        let (ctx, store) = (ctx.clone(), store.clone());
        async move {
            rx.changed().await.ok()?;
            let refs: Vec<SsRef> = {
                let mut objects = lock(&ctx.objects);
                store
                    .state()
                    .iter()
                    .map(|ss| ObjectRef::from_obj(&**ss))
                    .filter(|r| {
                        objects.get_mut(r).is_some_and(|o| {
                            let retry = o.failing && o.transient;
                            if retry {
                                o.failures = 0;
                            }
                            retry
                        })
                    })
                    .collect()
            };
            if !refs.is_empty() {
                tracing::info!(
                    objects = refs.len(),
                    "retrying the SealedSecrets that failed while the API server was away"
                );
            }
            Some((futures::stream::iter(refs), rx))
        }
    })
    .flatten()
}

/// Emits once per change of the key ring.
/// Every SealedSecret of `store`, queued for the scheduler whenever the ring changes, this
/// replica starts leading or the resync period (with jitter) passes: what
/// `Controller::reconcile_all_on` and a requeue per object would do, through `admission`.
fn bulk_triggers(
    state: &State,
    store: Store<CachedSealed>,
    admission: Arc<Admission>,
    scope: Option<String>,
    resync: Option<Duration>,
) -> impl futures::Stream<Item = SsRef> + Send + 'static {
    let resyncs = match resync {
        Some(period) => futures::stream::unfold((), move |()| async move {
            tokio::time::sleep(jitter(period, 0.1)).await;
            Some(((), ()))
        })
        .boxed(),
        None => futures::stream::pending().boxed(),
    };
    let signals = futures::stream::select(
        futures::stream::select(ring_changes(state), leadership_gained(state)),
        resyncs,
    );
    signals.filter_map(move |()| {
        for ss in store.state() {
            if let (Some(namespace), Some(name)) = (&ss.meta().namespace, &ss.meta().name) {
                admission.push(scope.as_deref(), namespace, name);
            }
        }
        futures::future::ready(None)
    })
}

fn ring_changes(state: &State) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut rx = state.keys.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// Emits when this replica becomes the leader (each new term), as the elector publishes it.
fn leadership_gained(state: &State) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut rx = state.leadership.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if rx.borrow_and_update().leading {
                return Some(((), rx));
            }
        }
    })
}

async fn until_true(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        // The sender is gone: nobody can ask for shutdown any more; keep running.
        futures::future::pending::<()>().await;
    }
}

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
    crate::cache::sealed::set_value_budget(config.pending_value_bytes);
    let ctx = Arc::new(Context::new(client.clone(), config.clone(), state.clone()));
    let scopes: Vec<Option<String>> = match &config.namespaces {
        Namespaces::All => vec![None],
        Namespaces::Only(list) => list.iter().cloned().map(Some).collect(),
    };
    let mut wc = watcher::Config::default();
    if let Some(selector) = &config.label_selector {
        wc = wc.labels(selector);
    }
    let mut stores = Vec::new();
    let mut runs = Vec::new();
    for scope in scopes {
        let (sealed, secrets): (Api<CachedSealed>, Api<WatchedSecret>) = match &scope {
            None => (Api::all(client.clone()), Api::all(client.clone())),
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
        };
        let (store, writer) = reflector::store();
        let sealed_events =
            watcher(sealed, wc.clone()).backoff(WatchBackoff::resetting_on(state.api.recoveries()));
        let mut c = Controller::for_stream(
            sealed_triggers(
                sealed_events,
                state.clone(),
                writer,
                ctx.admission.clone(),
                scope.clone(),
            ),
            store.clone(),
        )
        .with_config(controller::Config::default().concurrency(reconcile_concurrency(&config)));
        stores.push(store.clone());
        if !config.skip_recreate {
            // Not filtered by --label-selector: the Secrets a selected SealedSecret writes need
            // not carry its labels, and their deletion must still re-create them at once.
            // `secret_trigger` maps each event to a SealedSecret; one that is not selected is
            // not in the store, so nothing happens.
            //
            // Whole Secrets, not metadata: each is checked against its data MAC as it arrives,
            // then its data is wiped (`secretcache`). The watch starts with the ring's first
            // keys (no reconcile runs before them anyway), so that check can be made.
            let recoveries = state.api.recoveries();
            let secret_events =
                futures::stream::once(first_keys(state.clone())).flat_map(move |()| {
                    watcher(secrets.clone(), watcher::Config::default())
                        .backoff(WatchBackoff::resetting_on(recoveries.clone()))
                });
            c = c.reconcile_on(secret_triggers(
                secret_events,
                ctx.clone(),
                store.clone(),
                scope.clone(),
            ));
        }
        let admitted = futures::stream::select(
            ctx.admission.clone().stream(scope.clone()),
            bulk_triggers(
                &state,
                store.clone(),
                ctx.admission.clone(),
                scope.clone(),
                config.resync_period,
            ),
        );
        let c = c
            .reconcile_on(admitted)
            .reconcile_on(recovered_triggers(ctx.clone(), store.clone()))
            .graceful_shutdown_on(until_true(shutdown.clone()));
        runs.push(c.run(reconcile, error_policy, ctx.clone()).boxed());
    }

    let ready_stores = stores.clone();
    let readiness = state.readiness.clone();
    let ready = tokio::spawn(async move {
        for s in &ready_stores {
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
    });
    let pruner = tokio::spawn(prune(ctx.clone(), stores));

    futures::stream::select_all(runs)
        .for_each(|result| {
            if let Err(e) = result {
                match e {
                    // Deleted before its reconcile started: it no longer waits.
                    controller::Error::ObjectNotFound(r) => {
                        if let Some(namespace) = &r.namespace {
                            ctx.admission.started(namespace, &r.name);
                        }
                    }
                    controller::Error::ReconcilerFailed(..) => {}
                    other => tracing::debug!(error = %crate::error_chain(&other), "controller stream error"),
                }
            }
            futures::future::ready(())
        })
        .await;
    ready.abort();
    pruner.abort();
}

/// The condition gauge's series: one per object reconciled since it arrived, from its state.
/// A scrape locks the state for one chunk at a time ([`crate::metrics::Scrape`]), so
/// reconciles wait for a chunk, not for a whole scrape (at 100,000 objects on 2 cores a whole
/// scrape used to hold the lock for up to 154 ms under a cold start).
impl crate::metrics::ConditionSeries for Mutex<Objects> {
    fn series_after(
        &self,
        after: Option<&crate::metrics::SeriesCursor>,
        max: usize,
        each: &mut dyn FnMut(&str, &str, &str, i64),
    ) -> Option<crate::metrics::SeriesCursor> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let max = max.max(1);
        let objects = lock(self);
        let namespaces = after.map_or(Unbounded, |c| Included(&*c.namespace));
        let mut visited = 0;
        let mut last: Option<(&str, &str)> = None;
        for (namespace, names) in objects.0.range::<str, _>((namespaces, Unbounded)) {
            let from = match after {
                Some(c) if *c.namespace == **namespace => Excluded(&*c.name),
                _ => Unbounded,
            };
            for (name, o) in names.range::<str, _>((from, Unbounded)) {
                if visited == max {
                    return last.map(|(namespace, name)| crate::metrics::SeriesCursor {
                        namespace: namespace.into(),
                        name: name.into(),
                    });
                }
                visited += 1;
                last = Some((namespace, name));
                if let Some(instance) = &o.gauge {
                    each(namespace, name, instance, if o.synced { 1 } else { -1 });
                }
            }
        }
        None
    }
}

/// Forgets deleted SealedSecrets (hints, backoff, their condition gauge).
async fn prune(ctx: Arc<Context>, stores: Vec<Store<CachedSealed>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        // Their condition gauge series go with their state.
        let mut objects = lock(&ctx.objects);
        let gone: Vec<_> = objects
            .refs()
            .filter(|r| stores.iter().all(|s| s.get(r).is_none()))
            .collect();
        for r in &gone {
            objects.remove(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_waits_for_its_term_and_a_leader_past_its_deadline_rechecks() {
        // No timer per object on a follower: the next term queues every object.
        assert_eq!(not_writing(false), Action::await_change());
        // A renewal in the same term publishes nothing: recheck.
        assert_eq!(not_writing(true), Action::requeue(NOT_LEADER_RECHECK));
    }

    #[test]
    fn per_object_state_is_kept_per_namespace_and_name() {
        let mut objects = Objects::default();
        let (a, b, c) = (
            SsRef::new("a").within("one"),
            SsRef::new("b").within("one"),
            SsRef::new("a").within("two"),
        );
        assert!(objects.get(&a).is_none());
        objects.entry(&a).failures = 1;
        objects.entry(&b).failures = 2;
        objects.entry(&c).failures = 3;
        objects.entry(&a).failures += 10;
        assert_eq!(objects.get(&a).map(|o| o.failures), Some(11));
        assert_eq!(objects.get_mut(&c).map(|o| o.failures), Some(3));
        let mut refs: Vec<SsRef> = objects.refs().collect();
        refs.sort_by(|x, y| (&x.namespace, &x.name).cmp(&(&y.namespace, &y.name)));
        assert_eq!(refs, vec![a.clone(), b.clone(), c.clone()]);
        assert_eq!(objects.remove(&c).map(|o| o.failures), Some(3));
        assert!(objects.remove(&c).is_none());
        // An emptied namespace goes too.
        assert_eq!(objects.0.len(), 1);
        // What few objects need stays unallocated until used.
        assert!(objects.get(&b).is_some_and(|o| o.rare.is_none()));
        let o = objects.entry(&b);
        o.forget_warning();
        assert!(o.rare.is_none() && o.object_hint().is_none() && o.take_raced_version().is_none());
    }

    #[test]
    fn the_condition_gauge_reports_each_reconciled_object_from_its_state() {
        let metrics = crate::metrics::Metrics::new();
        let objects: Arc<Mutex<Objects>> = Arc::default();
        metrics.condition_info.bind(objects.clone());
        let series = |ns: &str, name: &str, instance: &str, value: i64| {
            format!(
                "sealed_secrets_controller_condition_info{{namespace=\"{ns}\",name=\"{name}\",condition=\"Synced\",ss_app_kubernetes_io_instance=\"{instance}\"}} {value}\n"
            )
        };
        let (a, b, c) = (
            SsRef::new("a").within("one"),
            SsRef::new("b").within("one"),
            SsRef::new("a").within("two"),
        );
        {
            let mut o = lock(&objects);
            o.entry(&a).gauge = Some("app".into());
            o.entry(&a).synced = true;
            o.entry(&b).gauge = Some("".into());
            // Known but never reconciled here (a follower's object): no series.
            o.entry(&c).failures = 1;
        }
        let text = metrics.encode();
        assert!(
            text.contains("# TYPE sealed_secrets_controller_condition_info gauge\n"),
            "{text}"
        );
        assert!(text.contains(&series("one", "a", "app", 1)), "{text}");
        assert!(text.contains(&series("one", "b", "", -1)), "{text}");
        assert_eq!(
            text.matches("sealed_secrets_controller_condition_info{")
                .count(),
            2,
            "{text}"
        );
        // A forgotten object's series goes with its state.
        lock(&objects).remove(&a);
        let text = metrics.encode();
        assert!(!text.contains("name=\"a\""), "{text}");
        assert!(text.contains(&series("one", "b", "", -1)), "{text}");
    }

    #[test]
    fn condition_series_resume_after_the_last_object_visited() {
        use crate::metrics::{ConditionSeries as _, SeriesCursor};
        let objects: Mutex<Objects> = Mutex::default();
        {
            let mut o = lock(&objects);
            for (ns, name) in [
                ("one", "a"),
                ("one", "b"),
                ("one", "c"),
                ("two", "a"),
                ("two", "b"),
            ] {
                o.entry(&SsRef::new(name).within(ns)).gauge = Some("app".into());
            }
            // No series (a follower's object), still visited.
            o.entry(&SsRef::new("bb").within("one")).failures = 1;
        }
        let read = |after: Option<&SeriesCursor>| {
            let mut seen = Vec::new();
            let next = objects.series_after(after, 2, &mut |ns, name, _, _| {
                seen.push(format!("{ns}/{name}"));
            });
            (seen, next)
        };
        let cursor = |ns: &str, name: &str| SeriesCursor {
            namespace: ns.into(),
            name: name.into(),
        };
        let (seen, next) = read(None);
        assert_eq!(
            (seen, next.clone()),
            (
                vec!["one/a".into(), "one/b".into()],
                Some(cursor("one", "b"))
            )
        );
        let (seen, next) = read(next.as_ref());
        assert_eq!(
            (seen, next.clone()),
            (vec!["one/c".into()], Some(cursor("one", "c")))
        );
        // The position's namespace is gone: the scrape goes on with the next one.
        lock(&objects).remove(&SsRef::new("c").within("one"));
        for name in ["a", "b", "bb"] {
            lock(&objects).remove(&SsRef::new(name).within("one"));
        }
        let (seen, next) = read(next.as_ref());
        assert_eq!((seen, next), (vec!["two/a".into(), "two/b".into()], None));
    }

    #[tokio::test]
    async fn the_watch_event_of_our_own_write_triggers_nothing() {
        use clap::Parser as _;
        let args = crate::config::Args::try_parse_from([
            "kseal-controller",
            "--controller-namespace",
            "ctrl",
        ])
        .unwrap();
        let config = Arc::new(Config::from_args(args, None).unwrap());
        let client = kseal_testkit::TestApiServer::new().client();
        let ctx = Context::new(client, config, State::new());
        let secret = |version: &str| -> kube::api::ObjectMeta {
            serde_json::from_value(serde_json::json!({
                    "name": "s", "namespace": "ns", "resourceVersion": version,
                    "ownerReferences": [{"apiVersion": "bitnami.com/v1alpha1",
                        "kind": "SealedSecret", "name": "s", "uid": "u", "controller": true}]
            }))
            .unwrap()
        };
        let oref = SsRef::new("s").within("ns");
        // Nothing written yet: every change of the owned Secret triggers.
        assert_eq!(
            secret_trigger(&ctx, &secret("7"), false),
            Some(oref.clone())
        );
        ctx.with_object(&oref, |o| o.written_version = Some("7".into()));
        // Our own write: no trigger; a deletion of it, or any later change: a trigger.
        assert_eq!(secret_trigger(&ctx, &secret("7"), false), None);
        assert_eq!(secret_trigger(&ctx, &secret("7"), true), Some(oref.clone()));
        assert_eq!(
            secret_trigger(&ctx, &secret("8"), false),
            Some(oref.clone())
        );
        // A write in flight: its event may come back before its response. Held, and
        // remembered for `sync` to compare with the version the write returns.
        ctx.with_object(&oref, |o| o.writing = true);
        assert_eq!(secret_trigger(&ctx, &secret("9"), false), None);
        assert_eq!(
            ctx.with_object(&oref, |o| o.rare().raced_version.clone()),
            Some("9".to_owned())
        );
        assert_eq!(secret_trigger(&ctx, &secret("9"), true), Some(oref));
    }

    #[tokio::test]
    async fn normal_events_are_not_kept_for_series_and_warnings_are() {
        use clap::Parser as _;
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        let args = crate::config::Args::try_parse_from([
            "kseal-controller",
            "--controller-namespace",
            "ctrl",
        ])
        .unwrap();
        let config = Arc::new(Config::from_args(args, None).unwrap());
        let client = kseal_testkit::TestApiServer::new().client();
        let state = State::new();
        state.leadership.assume(true);
        let fence = state.leadership.fence().unwrap();
        let ctx = Context::new(client.clone(), config, state);
        let mut ss = SealedSecret::new("s", kseal_api::SealedSecretSpec::default());
        ss.metadata.namespace = Some("default".into());
        ss.metadata.uid = Some("u".into());
        for _ in 0..2 {
            publish_event(
                &ctx,
                &fence,
                &ss,
                EventType::Normal,
                "Unsealed",
                "ok".into(),
            )
            .await;
            publish_event(
                &ctx,
                &fence,
                &ss,
                EventType::Warning,
                "ErrUnsealFailed",
                "no".into(),
            )
            .await;
        }
        let events = Api::<K8sEvent>::namespaced(client, "default")
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        let of = |reason: &str| -> Vec<K8sEvent> {
            events
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .cloned()
                .collect()
        };
        // Two separate Normal events; the repeated Warning became a series of 2.
        assert_eq!(of("Unsealed").len(), 2);
        assert!(of("Unsealed").iter().all(|e| e.series.is_none()));
        let warnings = of("ErrUnsealFailed");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].series.as_ref().map(|s| s.count), Some(2));
    }

    #[tokio::test]
    async fn reconciles_in_flight_exceed_the_unseal_slots() {
        use clap::Parser as _;
        let config = |c: &str| {
            let args = crate::config::Args::try_parse_from([
                "kseal-controller",
                "--controller-namespace",
                "ctrl",
                "--concurrency",
                c,
            ])
            .unwrap();
            Config::from_args(args, None).unwrap()
        };
        for c in [1u16, 2, 4, 256] {
            let config = config(&c.to_string());
            let ctx = Context::new(
                kseal_testkit::TestApiServer::new().client(),
                Arc::new(config.clone()),
                State::new(),
            );
            assert_eq!(ctx.rsa_slots.shape().slots, usize::from(c));
            assert_eq!(
                reconcile_concurrency(&config),
                c * RECONCILES_PER_UNSEAL_SLOT
            );
        }
    }

    #[tokio::test]
    async fn the_api_server_coming_back_retries_what_failed_only_because_it_was_away() {
        use clap::Parser as _;
        let args = crate::config::Args::try_parse_from([
            "kseal-controller",
            "--controller-namespace",
            "ctrl",
        ])
        .unwrap();
        let config = Arc::new(Config::from_args(args, None).unwrap());
        let state = State::new();
        let ctx = Arc::new(Context::new(
            kseal_testkit::TestApiServer::new().client(),
            config,
            state.clone(),
        ));
        let (store, mut writer) = reflector::store::<CachedSealed>();
        let mut orefs = Vec::new();
        for name in ["away", "bad-key", "fine"] {
            let mut ss = SealedSecret::new(name, kseal_api::SealedSecretSpec::default());
            ss.metadata.namespace = Some("ns".into());
            let cached = CachedSealed::new(ss).unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(cached.clone()));
            orefs.push(ObjectRef::from_obj(&cached));
        }
        let set = |i: usize, failing: bool, transient: bool| {
            ctx.with_object(&orefs[i], |o| {
                o.failing = failing;
                o.transient = transient;
                o.failures = 9;
            });
        };
        set(0, true, true);
        set(1, true, false);
        set(2, false, false);
        let mut triggers = Box::pin(recovered_triggers(ctx.clone(), store));
        let away = std::io::Error::other("connection refused");
        state.api_unreachable("reconciling", &away);
        assert!(!state.api.is_reachable());
        assert!(
            state
                .metrics
                .encode()
                .contains("kseal_api_server_reachable 0")
        );
        state.api_answered();
        assert!(
            state
                .metrics
                .encode()
                .contains("kseal_api_server_reachable 1")
        );
        // Only the object that failed because the API server was away, its backoff reset.
        assert_eq!(triggers.next().await, Some(orefs[0].clone()));
        assert_eq!(ctx.with_object(&orefs[0], |o| o.failures), 0);
        assert_eq!(ctx.with_object(&orefs[1], |o| o.failures), 9);
        // The next outage and recovery: the same object again (had the others been retried
        // the first time, one of them would come next).
        state.api_unreachable("reconciling", &away);
        state.api_answered();
        assert_eq!(triggers.next().await, Some(orefs[0].clone()));
    }

    #[test]
    fn only_an_answer_or_a_failure_to_reach_it_says_anything_about_the_api_server() {
        let answer = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("refused", "Refused")
                    .with_code(code)
                    .boxed(),
            )
        };
        let away = || kube::Error::Service(Box::new(std::io::Error::other("connection refused")));
        // A write went through.
        assert_eq!(reachability(Ok(true)), Some(true));
        // An outcome from the caches, no request: not a sign of life during an outage.
        assert_eq!(reachability(Ok(false)), None);
        // The server answered with its own error.
        assert_eq!(reachability(Err(&Error::Status(answer(409)))), Some(true));
        assert_eq!(
            reachability(Err(&Error::ApplySecret(answer(403)))),
            Some(true)
        );
        assert_eq!(
            reachability(Err(&Error::GetSecret(answer(429)))),
            Some(true)
        );
        // Not reached: a transport error or a 5xx.
        assert_eq!(reachability(Err(&Error::Status(away()))), Some(false));
        assert_eq!(reachability(Err(&Error::Kube(answer(503)))), Some(false));
        // Failed before any request.
        assert_eq!(reachability(Err(&Error::NoKeys)), None);
        assert_eq!(reachability(Err(&Error::Task)), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) <= Duration::from_millis(550));
        assert!(backoff(3) >= Duration::from_millis(1800));
        assert!(backoff(40) <= BACKOFF_CAP.mul_f64(1.1));
        assert!(backoff(40) >= BACKOFF_CAP.mul_f64(0.9));
    }
}
