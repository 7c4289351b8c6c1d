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
//!   see `crate::cache::secret`; a reconcile right after start waits up to 30 s for that first
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
//!   reconcile everything. With a key source, the same holds while a new cluster mirrors
//!   the ring a key at a time: an object whose key is still to come waits
//!   (`kseal_reconciles_total{outcome="key_still_loading"}`) until the whole verified ring
//!   is loaded (see `loading`). A key missing from a loaded ring fails as before, with its
//!   reason.
//! - **A failed write costs no more RSA work.** A Secret write that fails after unsealing
//!   (an API-server outage) keeps its result for the retry of the same spec, bounded and
//!   zeroized (see `retained`); `kseal_unseal_rsa_operations_total{outcome}` shows what the
//!   RSA work served.
//! - **Every request has a deadline** (`crate::cluster::apihealth::REQUEST_DEADLINE`): a
//!   paused API server answers nothing, and a request that gets no answer in time counts
//!   towards the outage like a refused connection.
//! - **Failure lines are rate-limited**: one WARN line per condition reason and 30 s, with
//!   the count of those not logged (conditions and Warning events still name each object).
//! - Only the leader writes; other replicas requeue without touching anything. Each write
//!   (Secret create or replace, status patch, Event) first checks the fence taken when the
//!   reconcile began (`crate::cluster::leadership::Fence`): once the leadership ended, changed term
//!   or outlived its local lease deadline (a frozen or partitioned leader), the write is
//!   refused (`kseal_fenced_writes_total{write}`) and the reconcile ends without touching the
//!   object's status, warnings or backoff.
//! - **The status speaks for the generation the reconcile read**: a status patch is skipped
//!   when the object has a newer generation (its own reconcile follows) and never lowers
//!   `observedGeneration`; a status found behind its generation (a deposed leader's late
//!   write) triggers a reconcile, which repairs it.
//!
//! The folder's files, by part: [`controller`](self::run) (the kube-runtime `Controller`, its
//! watches and bounds), `object` (per-object state between reconciles), `desired` (unsealing
//! and the Secret to write), `mac` (the data MAC check), `sync` (one read-compare-write of the
//! Secret), `status` (the condition and Events), `triggers` (what else starts a reconcile),
//! `admission` (how many objects the scheduler holds), `affinity` (which keys to try first),
//! `writes` (the requests the writes send), `retained` (unsealed results kept for the retry
//! of a failed write) and `loading` (whether a new cluster's ring is still loading). This
//! file holds the reconcile itself.

pub(crate) mod admission;
pub(crate) mod affinity;
mod controller;
mod desired;
mod loading;
mod mac;
mod object;
mod retained;
mod status;
mod sync;
mod triggers;
pub(crate) mod writes;

pub use self::controller::run;
use self::{controller::*, desired::*, mac::*, object::*, status::*, sync::*, triggers::*};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
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
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use tokio::sync::watch;
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
    /// Other reconcile failures, logged once per reason and burst.
    failure_lines: crate::cluster::apihealth::Bursts,
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
    /// Unsealed results of failed writes, kept for their retry.
    retained: self::retained::Retained,
    /// Whether a new cluster's ring is still loading (a missing key is then a wait).
    loading: self::loading::Loading,
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
        let retained =
            self::retained::Retained::counting(state.metrics.unseal_results_dropped.clone());
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
            failure_lines: crate::cluster::apihealth::Bursts::default(),
            objects,
            rsa_slots,
            affinity: crate::reconcile::affinity::Affinity::default(),
            secrets: SecretCache::default(),
            retained,
            loading: self::loading::Loading::default(),
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
///
/// Its log lines sit in kube-runtime's `reconciling object` span, which names the object: a
/// span of its own would add nothing to them and cost a span's creation, and an enter and an
/// exit at every poll, per reconcile.
pub async fn reconcile(cached: Arc<CachedSealed>, ctx: Arc<Context>) -> Result<Action> {
    if let (Some(namespace), Some(name)) = (&cached.meta().namespace, &cached.meta().name) {
        ctx.admission.started(namespace, name);
    }
    // Every write below checks this fence first: a replica whose leadership ended, changed
    // term or outlived its local lease deadline (frozen, partitioned) writes nothing more.
    let Some(fence) = ctx.state.leadership.fence() else {
        return Ok(not_writing(ctx.state.leadership.term().leading));
    };
    let obj = Arc::new(cached.sealed().map_err(Error::Cache)?);
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
    // A new cluster's key source mirrors the ring a key at a time: a key still to come is a
    // wait, not a failure (see `loading`).
    let ring = ctx.state.keys.ring();
    let loading =
        ctx.loading
            .still_loading(ctx.config.key_source.is_some(), &ring, &ctx.state.ring_view);
    if let Some(left) = loading
        && self::loading::hinted_key_missing(&obj, &ring)
    {
        return Ok(waiting_for_key(&ctx, left));
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
    let mut pass = Pass {
        ctx: &ctx,
        fence: &fence,
        oref: ObjectRef::from_obj(&*cached),
        namespace: obj.namespace().unwrap_or_default(),
        obj,
    };

    let result = match pass.sync_secret(&cached).await {
        ControlFlow::Continue(result) => result,
        ControlFlow::Break(action) => return Ok(action),
    };
    if let Err(Error::Fenced(e)) = &result {
        return Ok(fenced(&ctx, "secret", *e));
    }
    if let (Err(Error::Unseal(_) | Error::KeyNotLoaded { .. }), Some(left)) = (&result, loading) {
        // No loaded key opened it while the ring was still loading: its key may be next.
        return Ok(waiting_for_key(&ctx, left));
    }
    let status = match pass.settle_status(&result).await {
        ControlFlow::Continue(status) => status,
        ControlFlow::Break(action) => return Ok(action),
    };
    pass.announce(&result, &status).await;
    pass.record(&result, start);
    pass.next_action(result, status.written)
}

/// A reconcile that waits for a key the ring is still loading: counted as
/// `key_still_loading`, nothing written (no status, no event, no backoff); the next ring
/// change reconciles it again, and so does the end of the load grace (`left`), after which a
/// key still missing is reported.
fn waiting_for_key(ctx: &Context, left: Duration) -> Action {
    ctx.state
        .metrics
        .reconciles
        .get_or_create(&OutcomeLabels {
            outcome: "key_still_loading".to_owned(),
        })
        .inc();
    Action::requeue(left + Duration::from_secs(1))
}

/// One reconcile's SealedSecret, and what its steps share.
struct Pass<'a> {
    ctx: &'a Context,
    /// Checked before every write.
    fence: &'a Fence,
    /// The SealedSecret (read whole when its cached copy lacked what the sync needed).
    obj: Arc<SealedSecret>,
    oref: SsRef,
    namespace: String,
}

/// What the status step decided, and how its write went.
struct StatusStep {
    /// The condition the sync's result calls for.
    want: DesiredCondition,
    /// The object was `Synced=True` before this reconcile.
    was_true: bool,
    /// A transient failure of a synced object, still tolerated: no status write, no warning.
    holding: bool,
    /// Whether the status was written, or why writing it failed.
    written: Result<bool>,
}

impl Pass<'_> {
    /// Syncs the Secret, reading the SealedSecret whole when its cached copy lacks encrypted
    /// values the sync needs; `Break` ends the reconcile (the object was deleted meanwhile).
    async fn sync_secret(&mut self, cached: &CachedSealed) -> ControlFlow<Action, Result<Outcome>> {
        let ctx = self.ctx;
        let mut result = sync(ctx, &self.obj, cached.stripped_digest(), self.fence).await;
        if matches!(result, Err(Error::Incomplete)) {
            // Kept without its encrypted values, and they are needed: read it whole, through the
            // status subresource (which returns the whole object; the controller's RBAC has no
            // `get` on SealedSecrets themselves).
            let api: Api<SealedSecret> = Api::namespaced(ctx.client.clone(), &self.namespace);
            ctx.state.metrics.sealed_secret_reads.inc();
            let name = self.obj.name_any();
            let degraded = &ctx.state.api.degraded;
            let whole = crate::cluster::denied::get_whole(&api, degraded, &name);
            result = match crate::cluster::apihealth::within_deadline(whole).await {
                Ok(whole) => {
                    self.obj = Arc::new(whole);
                    sync(ctx, &self.obj, None, self.fence).await
                }
                // Deleted since: its deletion event follows.
                Err(e) if api_code(&e) == Some(404) => {
                    return ControlFlow::Break(Action::await_change());
                }
                Err(e) => Err(Error::Kube(e)),
            };
        }
        ControlFlow::Continue(result)
    }

    /// Records the sync's result in the object's memory and writes the status it calls for
    /// (unless a tolerated transient failure holds it back); `Break` ends the reconcile (the
    /// status write was fenced).
    async fn settle_status(&self, result: &Result<Outcome>) -> ControlFlow<Action, StatusStep> {
        let ctx = self.ctx;
        ctx.with_object(&self.oref, |o| {
            o.failing = result.is_err();
            o.transient = result.as_ref().is_err_and(is_transient);
        });
        report_reachability(
            ctx,
            "reconciling",
            result.as_ref().map(|o| *o != Outcome::Unchanged),
        );
        let want = condition_for(result);
        let was_true = self
            .obj
            .synced_condition()
            .is_some_and(|c| c.status == CONDITION_TRUE);
        // A transient API failure (5xx, 429, a conflict, a broken connection) on a synced object
        // is retried a few times before the status flips to False and a warning goes out, so a
        // blip of the API server does not make every SealedSecret look degraded (e.g. in Argo CD).
        let holding = match result {
            Err(e) if was_true && is_transient(e) => {
                ctx.with_object(&self.oref, |o| o.failures) < TRANSIENT_FAILURES_TOLERATED
            }
            _ => false,
        };
        let written = if holding {
            Ok(false)
        } else {
            write_status(ctx, &self.obj, &want, self.fence).await
        };
        if let Err(Error::Fenced(e)) = &written {
            return ControlFlow::Break(fenced(ctx, "status", *e));
        }
        report_reachability(ctx, "writing status", written.as_ref().map(|w| *w));
        ControlFlow::Continue(StatusStep {
            want,
            was_true,
            holding,
            written,
        })
    }

    /// Logs the result and publishes its event: `Unsealed` after a write or a first sync, or
    /// the failure's Warning.
    async fn announce(&self, result: &Result<Outcome>, status: &StatusStep) {
        match result {
            Ok(outcome) => {
                if matches!(outcome, Outcome::Created | Outcome::Updated) {
                    tracing::info!(outcome = outcome.label(), "secret written");
                }
                let flipped = !status.was_true && self.obj.synced_condition().is_some();
                if matches!(outcome, Outcome::Created | Outcome::Updated) || flipped {
                    publish_event(
                        self.ctx,
                        self.fence,
                        &self.obj,
                        EventType::Normal,
                        "Unsealed",
                        "SealedSecret unsealed successfully".to_owned(),
                    )
                    .await;
                }
                self.ctx
                    .with_object(&self.oref, ObjectState::forget_warning);
            }
            Err(e) => self.warn_failure(e, status).await,
        }
    }

    /// Logs and counts a failed reconcile, and publishes its Warning event once per reason
    /// and message, unless the status already shows it or holds it back.
    async fn warn_failure(&self, e: &Error, status: &StatusStep) {
        let want = &status.want;
        let message = want.message.clone().unwrap_or_default();
        if is_transient(e) {
            // Retried with backoff; during an outage every object fails the same way:
            // one line per burst, with the count of the others.
            if let Some(not_logged) = self.ctx.transient_failures.hit() {
                tracing::warn!(reason = want.reason, error = %message, not_logged, "reconcile failed (transient; retrying)");
            } else {
                tracing::debug!(reason = want.reason, error = %message, "reconcile failed (transient; retrying)");
            }
        } else if let Some(not_logged) = self.ctx.failure_lines.hit(want.reason) {
            // One line per reason and burst window, with the count of the others: their
            // conditions and Warning events name each object.
            tracing::warn!(reason = want.reason, error = %message, not_logged, "reconcile failed");
        } else {
            tracing::debug!(reason = want.reason, error = %message, "reconcile failed");
        }
        self.ctx.state.metrics.count_error(e, &self.namespace);
        let event_reason = match want.reason {
            reason::UNSEAL_FAILED | reason::DEPRECATED_DATA_REJECTED => "ErrUnsealFailed",
            _ => "ErrUpdateFailed",
        };
        let already_shown = self.obj.synced_condition().is_some_and(|c| {
            c.status == CONDITION_FALSE
                && c.reason.as_deref() == Some(want.reason)
                && c.message.as_deref() == Some(message.as_str())
        });
        let key = (event_reason.to_owned(), message.clone());
        let fresh = !status.holding
            && self.ctx.with_object(&self.oref, |o| {
                let rare = o.rare();
                let fresh = rare.last_warning.as_ref() != Some(&key);
                rare.last_warning = Some(key);
                fresh
            });
        if fresh && !already_shown {
            publish_event(
                self.ctx,
                self.fence,
                &self.obj,
                EventType::Warning,
                event_reason,
                message,
            )
            .await;
        }
    }

    /// Updates the object's memory (its instance label, whether it is synced) and the
    /// reconcile's metrics.
    fn record(&self, result: &Result<Outcome>, start: Instant) {
        let metrics = &self.ctx.state.metrics;
        let instance = self
            .obj
            .labels()
            .get(INSTANCE_LABEL)
            .map_or("", String::as_str);
        self.ctx.with_object(&self.oref, |o| {
            if o.gauge.as_deref() != Some(instance) {
                o.gauge = Some(instance.into());
            }
            o.synced = result.is_ok();
        });
        let outcome = match result {
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
    }

    /// What the controller does next: retry a failed status write, requeue at once when the
    /// Secret changed during its write, wait for a change, recheck slowly a failure only a
    /// change can fix, or back off.
    fn next_action(&self, result: Result<Outcome>, written: Result<bool>) -> Result<Action> {
        let ctx = self.ctx;
        if let Err(e) = written {
            let due = if is_transient(&e) {
                ctx.transient_failures.hit()
            } else {
                ctx.failure_lines.hit("status")
            };
            match due {
                Some(not_logged) => {
                    tracing::warn!(error = %crate::error_chain(&e), not_logged, "failed to write status")
                }
                None => tracing::debug!(error = %crate::error_chain(&e), "failed to write status"),
            }
            ctx.state.metrics.count_error(&e, &self.namespace);
            return Err(e);
        }
        match result {
            Ok(_) => {
                let recheck = ctx.with_object(&self.oref, |o| {
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
            Err(
                Error::Unmanaged { .. } | Error::Immutable { .. } | Error::DeprecatedDataRejected,
            ) => Ok(Action::requeue(
                ctx.config
                    .resync_period
                    .map_or(PERMANENT_FAILURE_RECHECK, |p| jitter(p, 0.1)),
            )),
            Err(e) => Err(e),
        }
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
