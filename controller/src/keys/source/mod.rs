//! The fleet key ring as a key source (`--key-source`): poll it cheaply, mirror its keys into
//! labelled key Secrets.
//!
//! The leader checks the ring's index version with one metadata call (`DescribeSecret`) per
//! `--key-source-interval` (±10 % jitter), and at once on SIGUSR1 or `POST /v1/refresh`. Only
//! when the version changed does it read the index, and it reads each key secret once (keys
//! are immutable). It then mirrors every usable key into a key Secret in the controller
//! namespace, in Bitnami's layout (type `kubernetes.io/tls`, label
//! `sealedsecrets.bitnami.com/sealed-secrets-key: active`), marked `kseal.dev/mirror: "true"`
//! with the kid, the ring and whether the ring's index names it active. The key loader
//! ([`crate::keys`]) watches those Secrets like any other key Secret, so every replica sees the
//! same ring, and a restart during a Secrets Manager outage still unseals from the mirror.
//!
//! Trust: only the ring's index, as read by the leader, decides (see `crate::keys::ringview`).
//! The leader publishes it as the ring view and copies it into the ring-state Secret, from
//! which followers (and the leader after a restart) derive theirs; the key loader seals only
//! with the view's active key. Mirrors are created under generated names
//! (`kseal-ring-<12 hex of the kid>-<random>`), found by label and annotations, and proven by
//! their material: a Secret counts as the mirror of a kid only if its key hashes to that kid.
//!
//! Safety rules: the mirror only ever writes proven mirrors of its own ring; a key that
//! disappears from the ring is removed from the mirror only after
//! `--key-source-retire-grace`, only if this controller once saw it in the index, under a
//! signed index only once a verified index lists it as retired (a key that merely vanished,
//! as from a replayed older index, is kept with a `KeyMissingFromRing` Warning), and never
//! when it would leave the ring's mirror empty; a Secret that looks like a mirror but is not
//! proven one is never patched nor deleted (one Warning event); errors back off exponentially
//! (5 s doubling to 5 min) and never stop the loop.
//!
//! Recovery follows the store, not the backoff: while a sync that failed on the store backs
//! off, the leader probes it every second or so with one cheap call (`DescribeSecret` of the
//! index; for a directory ring, a read of its small `index.json`), and syncs as soon as the
//! answer differs from what the failed sync saw (the store answers again, the ring appears,
//! the index changes). The backoff only spaces the expensive calls (reading the index and the
//! keys, writing the mirror), so a store that comes back is read within a probe period, not
//! after up to 5 minutes of backoff. A key the index lists that the store does not hold is
//! looked for the same way after a sync that succeeded without it (`absent.rs`).
//!
//! The folder's files: this one holds the loop ([`run`]) and one sync; `ringstate` the
//! ring-state Secret; `pinning` the history marker and the anchor pin; `mirror` the mirror
//! key Secrets; `withhold` two indexes of one version, and why nothing seals from an index
//! the history marker cannot vouch for; `absent` the keys the index lists that the store does
//! not hold; `schedule` when the loop acts.

mod absent;
mod mirror;
mod pinning;
mod ringstate;
mod schedule;
mod withhold;

pub use absent::ABSENT_PROBE_MAX;
pub use schedule::{START_MARKER_SPREAD, START_SPREAD};
use schedule::{Schedule, sleep_until_some};
#[cfg(test)]
use schedule::{first_poll_wait, marker_wait, start_wait};

use self::mirror::*;
use self::ringstate::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_keys::KeyPair;
use kseal_keystore::{Index, IndexEntry, KeyEntry, Kid, Ring, Verified, Version};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource as _, ResourceExt as _};
use tokio::sync::watch;

use crate::keys::layout::{CERTIFICATE_ITEM, KEY_SECRET_TYPE, PRIVATE_KEY_ITEM, REPORTER};
use crate::keys::ringview::{
    INDEX_ITEM, KIDS_EVER_ITEM, LAST_ACTIVE_ITEM, Pin, RING_STATE_LABEL, RING_STATE_PREFIX,
    RingView, format_kids, parse_kids, parse_ring_state,
};
use crate::metrics::{KeyErrorLabels, KeySourceLabels};
use crate::state::State;

pub use crate::keys::layout::MIRROR_LABEL;
pub use crate::signals::Refresh;
/// The full kid of a mirrored key.
pub const KID_ANNOTATION: &str = "kseal.dev/kid";
/// The ring a mirrored key belongs to.
pub const RING_ANNOTATION: &str = "kseal.dev/ring";
/// Where the ring is (`secretsmanager://…`, `dir://…`).
pub const SOURCE_ANNOTATION: &str = "kseal.dev/key-source";
/// `"true"` on the mirror of the ring's active (sealing) key.
pub const ACTIVE_ANNOTATION: &str = "kseal.dev/active";
/// When the key was first seen missing from the ring (RFC 3339).
pub const MISSING_SINCE_ANNOTATION: &str = "kseal.dev/missing-since";
/// Name prefix of mirrored key Secrets (followed by 12 hex characters of the kid, a hyphen
/// and the API server's random suffix; mirrors of earlier versions have 16 hex characters and
/// no suffix, and are found by their label and annotations all the same).
pub const NAME_PREFIX: &str = "kseal-ring-";

const FIELD_MANAGER: &str = "kseal-controller";
const BACKOFF_MIN: Duration = Duration::from_secs(5);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How often a follower with no anchor pinned (an unsigned ring, or the store unreachable)
/// reads the index from the store again.
const FOLLOWER_STORE_READ: Duration = Duration::from_secs(300);
/// How soon such a follower tries again after the store failed.
const FOLLOWER_STORE_RETRY: Duration = Duration::from_secs(30);
/// How often a follower reads the ring-state Secret (besides each change the watch reports).
const STATE_POLL: Duration = Duration::from_secs(10);
/// How often the leader probes the store while a sync that failed on it backs off (±20 %
/// jitter, so the leaders of a fleet do not probe in step).
pub const PROBE_PERIOD: Duration = Duration::from_secs(1);

/// The `generateName` of the mirror Secret of `kid`: the API server appends a random suffix,
/// so nobody can create a Secret under the mirror's name before it exists.
pub fn mirror_name_prefix(kid: &Kid) -> String {
    format!("{NAME_PREFIX}{}-", &kid.as_str()[..12])
}

/// What one sync did, for logs, events and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// The index version had changed (it was read).
    pub index_read: bool,
    /// Key secrets read.
    pub keys_read: usize,
    /// Mirror Secrets created.
    pub created: Vec<String>,
    /// Mirror Secrets whose active flag changed.
    pub activated: Option<String>,
    /// Mirror Secrets deleted after the retire grace.
    pub retired: Vec<String>,
    /// Mirrors created anew because the Secrets filed under their kid did not hold the key
    /// (those are left as they are).
    pub repaired: Vec<String>,
    /// A proven mirror of the index's active key exists.
    pub active_mirrored: bool,
}

/// A ring-state Secret's view, and the Secret's name.
#[derive(Debug, Clone)]
pub struct FoundState {
    /// The view derived from it.
    pub view: RingView,
    /// The version of its signed index (0 for an unsigned one), verified under the pin.
    pub version: u64,
    /// The newest dedicated root of its verified history (`(seq, kid)`), if it has one.
    pub root: Option<(u64, Kid)>,
    /// Its index text, exactly as it holds it.
    pub text: String,
    /// The Secret's name.
    pub name: String,
}

/// The loop's memory between polls.
struct Cache {
    version: Option<Version>,
    index: Option<Index>,
    /// Keys read and checked, by kid. Key secrets are immutable, so a key read holds while it
    /// stays in the index; keys not found or rejected are not kept: one not found is read
    /// again at each poll, one rejected once its store version changes, and both are looked
    /// for between polls (`absent.rs`).
    keys: HashMap<Kid, KeyPair>,
    /// Whether the keys of this controller's own mirror were taken into `keys` (once, at the
    /// first sync: a restart or a new leader then reads only the index, not every key).
    seeded: bool,
    /// The index text exactly as read (copied into the ring-state Secret).
    index_text: Option<String>,
    /// Every kid seen in an index this controller read (or in the ring-state Secret).
    ever: BTreeSet<Kid>,
    /// The last active kid whose mirror was proven.
    last_active: Option<Kid>,
    /// The ring-state Secret's name and the data last written to it.
    state_name: Option<String>,
    /// The ring-state Secret found at start ([`Mirror::merge_state`]), for Events before
    /// this replica writes its own.
    found_state: Option<String>,
    state_written: Option<BTreeMap<String, ByteString>>,
    /// Where to attach ring-level events (the ring-state Secret).
    state_ref: Option<ObjectReference>,
    /// Secrets already warned about (uid and reason), so each gets one Warning event.
    warned: HashSet<(String, &'static str)>,
    /// The active-key problem last warned about.
    active_warned: Option<String>,
    /// A `RingAnchorPinned` note waiting for the ring-state Secret to attach to.
    pin_event_pending: Option<String>,
    /// When a follower without a pinned anchor reads the index from the store next.
    follower_next: Option<tokio::time::Instant>,
    /// Whether the ring-state Secret's memory was taken in ([`Mirror::merge_state`]).
    state_merged: bool,
    /// What the last sync saw of the store: what a probe must see differently to end a
    /// backoff early.
    store_seen: StoreSeen,
    /// Mirrors kept although the signed index dropped their key without retiring it: the
    /// index version each was last warned about (one `KeyMissingFromRing` per kid and version).
    kept_warned: HashMap<Kid, u64>,
    /// The last refusal of the store's index a `RingIndexRefused` event named (one event per
    /// refusal, not one per retry).
    refused_warned: Option<String>,
    /// The index version a `RingIndexExpired` event named.
    expired_warned: Option<u64>,
    /// The dedicated root a `RingAnchorSuperseded` event named (one per root).
    superseded_warned: Option<Kid>,
    /// The verified ring-state copy this replica last followed: a new leader writes it back
    /// when the ring-state copy it finds is older (rolled back while it followed) and the store
    /// cannot be read.
    followed: Option<FoundState>,
    /// Under a history marker an older kseal wrote (no digest), the verified ring-state copy
    /// a restarted leader found but did not take (the marker cannot vouch for it): never
    /// published, only compared with the store's index at the same version, to name both when
    /// they differ (attack review, round 12, A2; round 13, R1: neither seals).
    unvouched_copy: Option<FoundState>,
    /// The digests of the indexes withheld under a history marker that records no digest
    /// ([`Mirror::withheld`]): one the marker later records another index than stays withheld.
    withheld_digests: HashSet<String>,
    /// Why nothing seals from the index held (`None`: its active key seals), for the mirror's
    /// active flags, its retirements, the view and the `SealingWithheld` Warning.
    withheld: Option<String>,
    /// The store's index (its digest) that differs from the ring-state copy at the marker's
    /// version under a marker that records no digest, and the note naming both.
    fork_note: Option<(String, String)>,
    /// When a follower whose view is withheld asks for the marker's version again.
    marker_recheck: Option<tokio::time::Instant>,
    /// Departed keys whose mirrors are kept because the index dropping them is withheld
    /// (logged once each).
    withheld_kept: HashSet<Kid>,
    /// The version floor when the current sync began (before the store's index raised it): a
    /// ring-state copy older than that was rolled back, whoever wrote it.
    sync_floor: u64,
    /// Rival ring-state Secrets already warned about (uid and resource version).
    rivals_warned: HashSet<String>,
    /// The ring-state copies last named as ones a digest-less history marker cannot vouch
    /// for ([`Mirror::copies_unvouched`]; uids, resource versions and the held digest).
    unvouched_warned: Option<String>,
    /// Whether a replica started without an anchor looked for one persisted in a ring-state
    /// copy ([`Mirror::adopt_persisted_anchor`]).
    persisted_checked: bool,
    /// Whether this process took the store's history marker's floor and dedicated root
    /// ([`Mirror::apply_marker`]).
    marker_applied: bool,
    /// What the marker said when it was read (none: no marker, or not kseal's).
    marker: Option<ringstate::MarkerFacts>,
    /// The history marker as last read, for [`Mirror::check_vouched`] (read again when it
    /// does not vouch for a changed index).
    vouching: Option<kseal_keystore::Marker>,
    /// Whether `vouching` was read in the current poll (used once without reading it again).
    vouching_fresh: bool,
    /// The store version of the history marker as last read: a poll whose index did not
    /// change reads the marker again only when this did.
    marker_version: Option<Version>,
    /// The digest of the ring-state copy a follower refused last (logged once).
    copy_refused: Option<String>,
    /// Why no anchor may be pinned on first use (persisted anchors disagree): the `Warning`
    /// text, repeated in the refusal of the store's index.
    anchor_conflict: Option<String>,
    /// Whether the anchor came from a ring-state copy: its view is not published before the
    /// store's index verifies under it.
    anchor_from_state: bool,
    /// Whether a signed index from the store verified under the pin (a follower whose anchor
    /// came from a ring-state copy reads the store until it has).
    store_confirmed: bool,
    /// Under an unsigned index: when this process first saw each key missing from it (the
    /// retire grace runs from here, never from a `missing-since` annotation alone, which
    /// whoever can write Secrets here can date back).
    missing_seen: HashMap<Kid, jiff::Timestamp>,
    /// Keys of the held index the last sync did not find in the store, looked for between
    /// polls ([`absent`]).
    absent: absent::Absent,
}

/// What a sync saw of the store when it asked for the index's version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum StoreSeen {
    /// It did not get that far (e.g. the API server failed first): a probe cannot tell when
    /// to retry, the backoff does.
    #[default]
    NotAsked,
    /// The store did not answer (unreachable, throttled, denied).
    NoAnswer,
    /// The store answered: the index's version then (`None`: no index).
    Answered(Option<Version>),
}

/// The key-source mirror: the ring, where to mirror it, and what it remembers.
pub struct Mirror {
    ring: Ring,
    source: String,
    namespace: String,
    api: Api<Secret>,
    recorder: Recorder,
    /// Who publishes this mirror's Events (for [`Mirror::warn_on`]'s own recorders).
    reporter: Reporter,
    retire_grace: Duration,
    state: State,
    cache: Cache,
    /// The ring an index must belong to (`None`: a directory ring holds a copy of any ring).
    expected_ring: Option<String>,
    /// The anchor and version floor every index must satisfy.
    pin: Pin,
    /// The leadership term the current sync runs in: every write checks it first (`None`:
    /// unfenced, for callers that drive [`Mirror::sync`] themselves).
    fence: Option<crate::cluster::leadership::Fence>,
    /// The leader-election Lease: where ring-level Events go while no ring-state Secret
    /// exists (else this replica's Pod).
    lease: Option<String>,
}

fn count(state: &State, operation: &'static str, outcome: &'static str) {
    state
        .metrics
        .key_source_requests
        .get_or_create(&KeySourceLabels {
            operation: operation.to_owned(),
            outcome: outcome.to_owned(),
        })
        .inc();
}

fn outcome<T>(r: &kseal_keystore::Result<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.reason(),
    }
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Reading the ring failed.
    #[error("reading key ring {ring:?} failed")]
    Store {
        /// The ring.
        ring: String,
        /// The cause.
        #[source]
        source: kseal_keystore::Error,
    },
    /// The ring has no index.
    #[error(
        "key ring {ring:?} does not exist in {store} (no index): seed it with `kseal keys push --ring {ring}`"
    )]
    NoRing {
        /// The ring.
        ring: String,
        /// The store.
        store: String,
    },
    /// A write was refused: this replica's leadership ended (or changed term, or passed its
    /// local lease deadline) during the sync.
    #[error("mirroring stopped: leadership lost")]
    Fenced(#[source] crate::cluster::leadership::Fenced),
    /// Writing the mirror failed.
    #[error("mirroring key ring {ring:?} into key Secrets failed")]
    Kube {
        /// The ring.
        ring: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

impl SyncError {
    /// A short stable reason (metrics label and the start of `/readyz`'s message).
    pub fn reason(&self) -> &'static str {
        match self {
            SyncError::Store { source, .. } => source.reason(),
            SyncError::NoRing { .. } => "not_found",
            SyncError::Kube { .. } => "kube",
            SyncError::Fenced(_) => "fenced",
        }
    }
}

impl Mirror {
    /// A mirror of `ring` into the controller namespace of `namespace`.
    pub fn new(
        ring: Ring,
        source: String,
        client: Client,
        namespace: &str,
        identity: &str,
        retire_grace: Duration,
        state: State,
    ) -> Self {
        let reporter = Reporter {
            controller: REPORTER.to_owned(),
            instance: Some(identity.to_owned()),
        };
        let recorder = Recorder::new(client.clone(), reporter.clone());
        let expected_ring = match ring.store() {
            kseal_keystore::Store::Directory(_) => None,
            kseal_keystore::Store::SecretsManager(_) => Some(ring.name().to_owned()),
        };
        Self {
            expected_ring,
            pin: Pin::configured(ring.trust().anchor().cloned()),
            fence: None,
            ring,
            source,
            namespace: namespace.to_owned(),
            api: Api::namespaced(client, namespace),
            recorder,
            reporter,
            retire_grace,
            state,
            cache: Cache {
                version: None,
                index: None,
                keys: HashMap::new(),
                seeded: false,
                index_text: None,
                ever: BTreeSet::new(),
                last_active: None,
                state_name: None,
                found_state: None,
                state_written: None,
                state_ref: None,
                warned: HashSet::new(),
                active_warned: None,
                pin_event_pending: None,
                follower_next: None,
                state_merged: false,
                store_seen: StoreSeen::NotAsked,
                kept_warned: HashMap::new(),
                refused_warned: None,
                expired_warned: None,
                superseded_warned: None,
                followed: None,
                unvouched_copy: None,
                withheld_digests: HashSet::new(),
                withheld: None,
                fork_note: None,
                marker_recheck: None,
                withheld_kept: HashSet::new(),
                sync_floor: 0,
                rivals_warned: HashSet::new(),
                unvouched_warned: None,
                persisted_checked: false,
                marker_applied: false,
                anchor_conflict: None,
                marker: None,
                vouching: None,
                vouching_fresh: false,
                marker_version: None,
                copy_refused: None,
                anchor_from_state: false,
                store_confirmed: false,
                missing_seen: HashMap::new(),
                absent: absent::Absent::default(),
            },
            lease: None,
        }
    }

    /// Sets the leader-election Lease, where ring-level Events go while no ring-state Secret
    /// exists (`None`: this replica's Pod).
    pub fn set_lease(&mut self, lease: Option<String>) {
        self.lease = lease;
    }

    /// Sets the leadership term the next syncs run in (`None`: unfenced).
    pub fn set_fence(&mut self, fence: Option<crate::cluster::leadership::Fence>) {
        self.fence = fence;
    }

    /// Checks the fence right before a write (see [`crate::cluster::leadership`]).
    fn may_write(&self) -> Result<(), SyncError> {
        match &self.fence {
            Some(fence) => fence.check().map_err(|e| {
                self.state.metrics.count_fenced("mirror");
                SyncError::Fenced(e)
            }),
            None => Ok(()),
        }
    }

    fn store_err(&self, source: kseal_keystore::Error) -> SyncError {
        SyncError::Store {
            ring: self.ring.name().to_owned(),
            source,
        }
    }

    fn kube_err(&self, source: kube::Error) -> SyncError {
        SyncError::Kube {
            ring: self.ring.name().to_owned(),
            source,
        }
    }

    /// One poll: check the index version, read what changed, reconcile the mirror.
    pub async fn sync(&mut self) -> Result<SyncReport, SyncError> {
        let mut report = SyncReport::default();
        if !self.cache.seeded {
            self.seed_from_mirror().await?;
        }
        // Until the store answers, the leader's view is the ring-state Secret's, but only
        // under a pinned anchor (`--ring-anchor`): without one, that Secret is only as
        // trustworthy as write access to Secrets here, so it is read once the store's index
        // has pinned the anchor (below). Under an anchor the store is read only once this
        // succeeded: it restores the version floor.
        self.cache.store_seen = StoreSeen::NotAsked;
        let marker = self.apply_marker().await;
        self.adopt_persisted_anchor().await?;
        let publish = !self.cache.anchor_from_state || self.cache.index.is_some();
        self.merge_state(publish).await?;
        self.cache.sync_floor = self.pin.floor;
        // No index is read before the history marker answered: it gives the floor and the
        // dedicated root the index must pass through (a ring-key pin knows neither).
        if let Err(e) = marker {
            // A store that does not answer is probed ([`Mirror::store_answers`]), so the sync
            // runs again as soon as it does; a marker refused for good (access denied, not
            // kseal's) waits for the backoff, not for every probe.
            self.cache.store_seen = if e.is_transient() {
                StoreSeen::NoAnswer
            } else {
                StoreSeen::NotAsked
            };
            return Err(self.marker_unread(e));
        }
        // A marker read now may have raised the floor or the root past the index held: it is
        // read and verified again.
        if let Some(held) = &self.cache.index
            && (held.version < self.pin.floor || !self.extends_seen_root(held))
        {
            self.cache.version = None;
        }
        let version = self.ring.index_version().await;
        count(&self.state, "describe_index", outcome(&version));
        self.cache.store_seen = match &version {
            Ok(v) => StoreSeen::Answered(v.clone()),
            Err(_) => StoreSeen::NoAnswer,
        };
        let Some(version) = version.map_err(|e| self.store_err(e))? else {
            return Err(SyncError::NoRing {
                ring: self.ring.name().to_owned(),
                store: self.ring.store().describe(),
            });
        };
        if self.cache.version.as_ref() == Some(&version)
            && let Some(held) = self.cache.index.clone()
        {
            self.check_held_vouched(&held, &version).await?;
        }
        if self.cache.version.as_ref() != Some(&version) || self.cache.index.is_none() {
            let snapshot = self.ring.snapshot_text(Some(&version)).await;
            count(&self.state, "get_index", outcome(&snapshot));
            let (text, version) =
                snapshot
                    .map_err(|e| self.store_err(e))?
                    .ok_or_else(|| SyncError::NoRing {
                        ring: self.ring.name().to_owned(),
                        store: self.ring.store().describe(),
                    })?;
            let (index, verified) =
                parse_ring_state(&text, self.expected_ring.as_deref(), &self.pin.trust())
                    .map_err(|e| self.store_err(e))?;
            let vouch = self.check_vouched(&index, Some(&version)).await?;
            self.cache.fork_note = None;
            self.check_same_version(&index, vouch).await?;
            self.unsigned_allowed(&verified).await?;
            self.accepted(&verified).await;
            self.merge_state(false).await?;
            report.index_read = true;
            // A signed index lists the keys that left the ring too.
            self.cache.ever.extend(
                index
                    .keys
                    .iter()
                    .map(|e| e.kid.clone())
                    .chain(index.retired.iter().map(|r| r.kid.clone())),
            );
            self.cache.index_text = Some(text);
            self.cache.keys.retain(|kid, _| index.entry(kid).is_some());
            if index.active != self.cache.index.as_ref().and_then(|i| i.active.clone())
                && let Some(active) = &index.active
            {
                tracing::info!(kid = %active.short(), ring = %self.ring.name(), "the ring's active key is {}", active.short());
            }
            self.cache.index = Some(index);
            self.cache.version = Some(version);
        }
        // Under a marker that records no digest, nothing seals from the index and no mirror
        // leaves (attack review, round 13, R1 and R2).
        self.cache.withheld = match self.cache.index.clone() {
            Some(index) => self.withheld_index(&index),
            None => None,
        };
        self.read_new_keys(&mut report).await?;
        self.publish_missing();
        self.reconcile_mirror(&mut report).await?;
        self.publish_gauges();
        if let Some(index) = &self.cache.index {
            if report.active_mirrored {
                self.cache.last_active.clone_from(&index.active);
            }
            let mut view = RingView::new(index, &self.cache.ever, self.cache.last_active.clone());
            view.withheld.clone_from(&self.cache.withheld);
            self.state.ring_view.publish(view);
            self.state.readiness.set_ring_state_ignored(None);
        }
        self.write_state().await;
        self.note_superseded(None).await;
        self.cache.refused_warned = None;
        self.note_expiry().await;
        self.warn_active_unavailable(report.active_mirrored).await;
        Ok(report)
    }

    /// Reads the history marker again for an index that changed (or a ring-state copy not
    /// taken before), and refuses one the marker does not vouch for
    /// ([`kseal_keystore::Marker::vouches`]): at the marker's version or the next, only the
    /// index the ring's writers wrote (the seeder records its digest before each index
    /// write), so a history forked with ring keys clusters hold, put in by whoever can write
    /// the index, is refused even on a ring not yet moved to a dedicated root (attack review,
    /// round 9); and nothing older than the marker's version (round 10: a leader that had not
    /// polled since the seeder's last write took a fork, or the real older index, put back at
    /// the version it held). Each marker read raises the version floor and the root seen. A
    /// marker read earlier in the same poll (at a process's first) is used once; otherwise it
    /// is read anew. `read` is the store version the index was read at (`None` for a copy):
    /// an older index whose store version changed since was overtaken by a write, not put
    /// back, and is read again at once. A marker that does not answer fails the check.
    pub(super) async fn check_vouched(
        &mut self,
        index: &kseal_keystore::Index,
        read: Option<&Version>,
    ) -> Result<Option<kseal_keystore::Vouch>, SyncError> {
        use kseal_keystore::Vouch;
        if self.cache.vouching_fresh
            && let Some(m) = &self.cache.vouching
            && let verdict @ (Vouch::Written | Vouch::Pending) = m.vouches(index)
        {
            return Ok(Some(verdict));
        }
        let mut refused = None;
        // Twice at most: a seeder's write between the index read and the marker read (its
        // digest recorded, then the index written, then the marker moved) reads as a newer
        // marker; read after the index, the marker is never behind an index its writers wrote.
        for _ in 0..2 {
            let read = self.ring.store().read(&self.ring.root_name(), None).await;
            count(&self.state, "get_marker", outcome(&read));
            let Some((text, version)) = read.map_err(|e| self.store_err(e))? else {
                self.cache.vouching = None;
                return Ok(None);
            };
            let m = kseal_keystore::Marker::parse(&text).ok_or_else(|| {
                self.store_err(kseal_keystore::Error::Malformed {
                    what: self.ring.root_name(),
                    reason: "it is not the JSON kseal writes".into(),
                })
            })?;
            self.cache.marker_version = Some(version);
            if m.version > self.pin.floor {
                self.pin.floor = m.version;
            }
            self.pin.see_root(m.root.clone());
            self.cache.vouching = Some(m.clone());
            self.cache.vouching_fresh = true;
            let verdict = m.vouches(index);
            match verdict {
                Vouch::Written | Vouch::Pending | Vouch::Unrecorded => return Ok(Some(verdict)),
                Vouch::Older => {
                    refused = Some((m, verdict));
                    break;
                }
                Vouch::NotWritten => refused = Some((m, verdict)),
            }
        }
        let Some((marker, verdict)) = refused else {
            return Ok(None);
        };
        let (index_name, root_name) = (self.ring.index_name(), self.ring.root_name());
        let restore = kseal_keystore::restore_vouched(&marker, &index_name, &root_name);
        if verdict == Vouch::Older {
            // Overtaken by a write since it was read: read again, no refusal to report.
            if let Some(read) = read {
                let now = self.ring.index_version().await;
                count(&self.state, "describe_index", outcome(&now));
                if now.map_err(|e| self.store_err(e))?.as_ref() != Some(read) {
                    return Err(
                        self.store_err(kseal_keystore::Error::Conflict { what: index_name })
                    );
                }
            }
            return Err(self.store_err(kseal_keystore::Error::Untrusted {
                what: index_name,
                reason: format!(
                    "it is version {}, but {root_name} records version {} as written by the \
                     ring's writers: a rolled-back index (an older index, or a fork at an older \
                     version, put back; its active key is {}). Nothing from it is used; the \
                     ring's seeder is to {restore}",
                    index.version,
                    marker.version,
                    index.active.as_ref().map_or("none", Kid::short)
                ),
            }));
        }
        Err(self.store_err(kseal_keystore::Error::Untrusted {
            what: index_name,
            reason: format!(
                "{}. Nothing from it is used; the ring's seeder is to {restore}",
                kseal_keystore::not_vouched(index, &marker, &root_name),
            ),
        }))
    }

    /// A poll whose index did not change (its store version is the one held): the history
    /// marker's store version is asked too (one metadata call), and when it changed the
    /// marker is read and must still vouch for the index held. Whoever can move the index's
    /// current label back onto the version a leader holds, after the seeder wrote a newer one,
    /// would otherwise keep the leader on the older index without a word (attack review,
    /// round 11, S1: a rotation away from a stolen key undone on running controllers).
    async fn check_held_vouched(
        &mut self,
        held: &kseal_keystore::Index,
        read: &Version,
    ) -> Result<(), SyncError> {
        let now = self
            .ring
            .store()
            .current_version(&self.ring.root_name())
            .await;
        count(&self.state, "describe_marker", outcome(&now));
        let now = now.map_err(|e| self.store_err(e))?;
        if now.is_none() || now == self.cache.marker_version {
            return Ok(());
        }
        self.cache.vouching_fresh = false;
        self.check_vouched(held, Some(read)).await.map(|_| ())
    }

    /// While a sync that failed on the store backs off: asks the store for the index's
    /// version (one cheap call) and returns whether the answer differs from what that sync
    /// saw, i.e. whether a full sync may now get further: the store answers again, the ring
    /// was seeded, or its index changed. An index whose version did not change (refused, or
    /// a key not readable) waits for the backoff.
    pub async fn store_answers(&self) -> bool {
        if self.cache.store_seen == StoreSeen::NotAsked {
            return false;
        }
        let version = self.ring.index_version().await;
        count(&self.state, "describe_index", outcome(&version));
        match (&self.cache.store_seen, version) {
            (StoreSeen::NoAnswer, Ok(Some(_))) => true,
            (StoreSeen::Answered(before), Ok(Some(now))) => before.as_ref() != Some(&now),
            (_, Ok(None) | Err(_)) | (StoreSeen::NotAsked, _) => false,
        }
    }

    /// Says whether a ring-state Secret of this ring is ignored: with no anchor pinned
    /// (`--ring-anchor`), that Secret is only as trustworthy as write access to Secrets here,
    /// so until the store's index is read nothing seals, and readiness, `/v1/cert.pem` and the
    /// log say so rather than "no ring-state Secret". Lists Secrets only while no ring view is
    /// published and the answer is not known yet.
    async fn note_ignored_state(&self) {
        let readiness = &self.state.readiness;
        if self.pin.anchor.is_some() || self.state.ring_view.current().is_some() {
            readiness.set_ring_state_ignored(None);
            return;
        }
        if readiness.ring_state_ignored().is_some() {
            return;
        }
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await;
        let Ok(listed) = listed else {
            return;
        };
        let found = listed.items.iter().find(|s| {
            s.annotations().get(RING_ANNOTATION).map(String::as_str) == Some(self.ring.name())
        });
        if let Some(secret) = found {
            tracing::warn!(
                secret = %secret.name_any(),
                "ring-state Secret {} ignored: no ring anchor pinned (--ring-anchor); nothing \
                 seals until the ring's index is read from {}",
                secret.name_any(),
                self.ring.store().describe()
            );
            readiness.set_ring_state_ignored(Some(secret.name_any()));
        }
    }
}

/// Runs the key-source loop of `config.key_source` until `shutdown` turns true (returns at
/// once without a key source). Only the leader polls and mirrors: it reads the ring the
/// moment it becomes leader (a `crate::cluster::leadership::Term` event, no polling), then every
/// interval. Followers see the mirror through the key loader's watch, and read the ring view
/// each time the ring-state Secret changes. `state.refresh` asks for a check now.
pub async fn run(
    client: Client,
    config: Arc<crate::Config>,
    state: State,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(config_source) = config.key_source.clone() else {
        return;
    };
    let (namespace, identity, refresh, lease) = (
        config.controller_namespace.clone(),
        config.identity.clone(),
        state.refresh.clone(),
        config.leader_election_lease.clone(),
    );
    let config = config_source;
    state.readiness.key_source_configured();
    let source = config.location.to_string();
    let Some(ring) = open_ring(&config, &source, &state, &mut shutdown).await else {
        return;
    };
    let mut state_changes = ring_state_changes(client.clone(), &namespace);
    let mut mirror = Mirror::new(
        ring,
        source.clone(),
        client,
        &namespace,
        &identity,
        config.retire_grace,
        state.clone(),
    );
    mirror.set_lease(lease);
    tracing::info!(key_source = %source, interval = ?config.interval, "reading keys from the fleet key ring");
    let mut schedule = Schedule {
        backoff: BACKOFF_MIN,
        next: tokio::time::Instant::now(),
        last_poll: None,
        probe: None,
        probe_absent: false,
        start_checked: false,
        synced_once: false,
        marker_waited: false,
        deferred: None,
    };
    let mut terms = state.leadership.subscribe();
    let mut trigger;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(schedule.next) => {
                trigger = schedule.deferred.take().unwrap_or(
                    if schedule.last_poll.is_none() { "start" } else { "interval" },
                );
            }
            _ = refresh.requested() => {
                trigger = "refresh";
                let last_poll = schedule.last_poll;
                if last_poll.is_some_and(|t| t.elapsed() < config.refresh_spacing) {
                    let next = schedule.next;
                    schedule.next = next.min(last_poll.map_or(next, |t| t + config.refresh_spacing));
                    continue;
                }
                tracing::info!("key ring refresh requested");
            }
            // `state` holds the sender: this never ends.
            Ok(()) = terms.changed() => {
                let term = *terms.borrow_and_update();
                if !term.leading {
                    continue;
                }
                tracing::info!(epoch = term.epoch, "leading: reading the key ring now");
                trigger = "leadership";
            }
            Some(()) = state_changes.next(), if !state.is_leader() => trigger = "ring_state",
            // While a failed sync backs off: does the store answer again? After a sync that
            // found a key of the index missing: is it there now?
            () = sleep_until_some(schedule.probe), if schedule.probe.is_some() => trigger = "probe",
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if trigger == "probe" {
            let Some(answered) = schedule.probe_answered(&mut mirror, &state).await else {
                continue;
            };
            trigger = answered;
        }
        if matches!(trigger, "start" | "leadership")
            && schedule
                .start_waits(&mut mirror, &state, &config, trigger)
                .await
        {
            continue;
        }
        if !state.is_leader() {
            schedule.follow(&mut mirror, &config).await;
            continue;
        }
        schedule
            .leader_sync(&mut mirror, &state, &config, trigger)
            .await;
    }
}

/// Opens the ring of `config` with its trust (the `--ring-anchor`, else the anchor of the
/// first signed history read), retrying with backoff; `None` once `shutdown` turns true.
async fn open_ring(
    config: &crate::config::KeySourceConfig,
    source: &str,
    state: &State,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Ring> {
    let mut backoff = BACKOFF_MIN;
    loop {
        match Ring::open(&config.location, &config.aws).await {
            Ok(ring) => {
                return Some(ring.with_trust(match &config.anchor {
                    Some(anchor) => kseal_keystore::Trust::anchored(anchor.clone()),
                    None => {
                        tracing::info!(
                            "no --ring-anchor: the anchor of the first signed ring history read is pinned"
                        );
                        kseal_keystore::Trust::first_use().allow_unsigned(true)
                    }
                }));
            }
            Err(e) => {
                let message = crate::error_chain(&e);
                tracing::error!(
                    reason = e.reason(),
                    "cannot use --key-source {source}: {message}"
                );
                state.readiness.key_source_failed(e.reason(), &message);
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|s| *s) => return None,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// What kind of refusal a failed verification of the store's index is (a metric label):
/// `rollback` (older than the version floor), `expired`, else the error's reason.
fn refusal_kind(e: &SyncError) -> &'static str {
    match e {
        SyncError::Store {
            source: kseal_keystore::Error::Untrusted { reason, .. },
            ..
        } if reason.contains("rolled-back index") => "rollback",
        SyncError::Store {
            source: kseal_keystore::Error::Untrusted { reason, .. },
            ..
        } if reason.contains(" expired at ") => "expired",
        _ => e.reason(),
    }
}

#[cfg(test)]
mod tests {
    //! The key-source loop's schedule, one leader sync at a time, on the in-process test API
    //! server and a directory ring. Every test runs under a deadline.

    use kseal_keys::{CertificateOptions, KeySize};
    use kseal_keystore::{AwsOptions, Location};
    use kseal_testkit::TestApiServer;

    use super::*;

    /// The test API server, with the controller namespace `kseal`.
    pub(super) async fn server() -> (TestApiServer, Client) {
        let server = TestApiServer::new();
        let client = server.client();
        let namespace = k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some("kseal".into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        (server, client)
    }

    /// A leading key source on an empty directory ring (`dir/ring`), with its mirror on a
    /// test API server and a fresh schedule: what the schedule tests start from.
    pub(super) async fn leader() -> (
        tempfile::TempDir,
        TestApiServer,
        Ring,
        State,
        crate::config::KeySourceConfig,
        Mirror,
        Schedule,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::Directory {
            path: dir.path().join("ring"),
            insecure_perms: false,
        };
        let (server, client) = server().await;
        let ring = Ring::open(&location, &AwsOptions::default()).await.unwrap();
        let state = State::new();
        state.leadership.assume(true);
        let config = crate::config::KeySourceConfig {
            location: location.clone(),
            interval: Duration::from_secs(3600),
            retire_grace: Duration::from_secs(3600),
            refresh_spacing: Duration::from_secs(5),
            aws: AwsOptions::default(),
            anchor: None,
        };
        let mirror = Mirror::new(
            ring.clone(),
            location.to_string(),
            client,
            "kseal",
            "test",
            config.retire_grace,
            state.clone(),
        );
        let schedule = Schedule {
            next: tokio::time::Instant::now(),
            backoff: BACKOFF_MIN,
            last_poll: None,
            probe: None,
            probe_absent: false,
            start_checked: false,
            synced_once: true,
            marker_waited: false,
            deferred: None,
        };
        (dir, server, ring, state, config, mirror, schedule)
    }

    /// Issue 38: the poll after a process's first successful sync is drawn over a whole
    /// interval (clusters restarted together do not poll together for hours after), later
    /// ones one interval ±10 %; a restarted leader's start-up read waits at most the start
    /// spread.
    #[tokio::test]
    async fn the_poll_after_a_start_is_drawn_over_one_interval() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let interval = Duration::from_secs(3600);
            let draws: Vec<Duration> = (0..400).map(|_| first_poll_wait(interval)).collect();
            assert!(
                draws
                    .iter()
                    .all(|d| *d >= Duration::from_secs(1) && *d <= interval)
            );
            assert!(draws.iter().any(|d| *d < interval / 4), "{draws:?}");
            assert!(draws.iter().any(|d| *d > interval * 3 / 4), "{draws:?}");
            let starts: Vec<Duration> = (0..400).map(|_| start_wait(interval)).collect();
            assert!(starts.iter().all(|d| *d <= START_SPREAD));
            assert!(starts.iter().any(|d| *d < START_SPREAD / 4));
            assert!(start_wait(Duration::from_secs(4)) <= Duration::from_secs(4));
            let markers: Vec<Duration> = (0..400).map(|_| marker_wait(interval)).collect();
            assert!(markers.iter().all(|d| *d <= START_MARKER_SPREAD));
            assert!(markers.iter().any(|d| *d < START_MARKER_SPREAD / 4));
            assert!(markers.iter().any(|d| *d > START_MARKER_SPREAD * 3 / 4));
            assert!(marker_wait(Duration::from_millis(500)) <= Duration::from_millis(500));
            assert!(first_poll_wait(Duration::from_millis(300)) <= Duration::from_millis(300));

            let (_dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            schedule.synced_once = false;
            let key = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
            ring.push(&key).await.unwrap();
            let before = tokio::time::Instant::now();
            schedule
                .leader_sync(&mut mirror, &state, &config, "start")
                .await;
            assert!(schedule.synced_once);
            let wait = schedule.next.saturating_duration_since(before);
            assert!(wait <= config.interval + Duration::from_secs(1), "{wait:?}");
            let before = tokio::time::Instant::now();
            schedule
                .leader_sync(&mut mirror, &state, &config, "interval")
                .await;
            let wait = schedule.next.saturating_duration_since(before);
            assert!(
                wait >= Duration::from_secs(3240) && wait <= Duration::from_secs(3961),
                "{wait:?}"
            );
        })
        .await
        .expect("the schedule test finishes within its deadline");
    }

    #[tokio::test]
    async fn failures_back_off_doubling_to_the_cap_and_a_success_resets_it() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let (_dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            // No ring yet: each failed sync waits the backoff, which doubles up to its cap.
            let mut waits = Vec::new();
            for _ in 0..8 {
                let before = tokio::time::Instant::now();
                schedule
                    .leader_sync(&mut mirror, &state, &config, "test")
                    .await;
                waits.push(schedule.next.saturating_duration_since(before));
            }
            let secs: Vec<u64> = waits
                .iter()
                .map(|w| (w.as_millis() / 1000) as u64)
                .collect();
            assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300], "{waits:?}");
            assert!(
                state
                    .readiness
                    .key_source()
                    .and_then(|s| s.problem)
                    .is_some()
            );
            // The ring appears: one sync succeeds, the backoff resets and the next poll is an
            // interval (±10 %) away.
            let key = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
            ring.push(&key).await.unwrap();
            let before = tokio::time::Instant::now();
            schedule
                .leader_sync(&mut mirror, &state, &config, "test")
                .await;
            assert_eq!(schedule.backoff, BACKOFF_MIN);
            let wait = schedule.next.saturating_duration_since(before);
            assert!(
                wait >= Duration::from_secs(3240) && wait <= Duration::from_secs(3961),
                "{wait:?}"
            );
        })
        .await
        .expect("the schedule test finishes within its deadline");
    }

    #[tokio::test]
    async fn while_backing_off_a_probe_ends_the_wait_once_the_store_answers_differently() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let (_dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            // No ring yet: the sync backs off 5 s, and a probe is due within a period.
            let before = tokio::time::Instant::now();
            schedule
                .leader_sync(&mut mirror, &state, &config, "test")
                .await;
            let probe = schedule.probe.expect("a probe while backing off");
            assert!(probe.saturating_duration_since(before) <= PROBE_PERIOD.mul_f64(1.2));
            assert!(schedule.next.saturating_duration_since(before) >= Duration::from_secs(4));
            // The store answers as the sync saw it (no index): no early sync.
            assert!(!mirror.store_answers().await);
            // The ring is seeded: the next probe says sync now, and the sync succeeds.
            let key = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
            ring.push(&key).await.unwrap();
            assert!(mirror.store_answers().await);
            schedule
                .leader_sync(&mut mirror, &state, &config, "store_answered")
                .await;
            assert_eq!(schedule.probe, None, "no probe after a success");
            assert_eq!(schedule.backoff, BACKOFF_MIN);
            assert!(
                state
                    .readiness
                    .key_source()
                    .is_some_and(|s| s.problem.is_none())
            );
            // Nothing changed since: a probe would not sync again.
            assert!(!mirror.store_answers().await);
        })
        .await
        .expect("the probe test finishes within its deadline");
    }

    /// Issue 35: a refused rollback is a Warning Event and a count, but one Event per refusal,
    /// not one (or one more in its series) at every retry of the backoff.
    #[tokio::test]
    async fn a_refused_rollback_is_named_once_not_at_every_retry() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let (_dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            let a = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
            ring.push(&a).await.unwrap();
            let (old, _) = ring.snapshot_text(None).await.unwrap().unwrap();
            ring.push(
                &KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap(),
            )
            .await
            .unwrap();
            schedule
                .leader_sync(&mut mirror, &state, &config, "test")
                .await;
            assert_eq!(
                schedule.backoff, BACKOFF_MIN,
                "the current index is accepted"
            );

            let version = ring.index_version().await.unwrap();
            ring.store()
                .compare_and_swap(&ring.index_name(), &old, version.as_ref(), &[])
                .await
                .unwrap();
            for _ in 0..3 {
                schedule
                    .leader_sync(&mut mirror, &state, &config, "test")
                    .await;
            }
            let refused = state
                .metrics
                .key_source_index_refused
                .get_or_create(&KeyErrorLabels {
                    reason: "rollback".to_owned(),
                })
                .get();
            assert_eq!(refused, 3, "every refusal counts");
            let name = mirror
                .cache
                .state_name
                .clone()
                .expect("the ring-state Secret");
            let events: Vec<_> = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
                mirror.api.clone().into_client(),
                "kseal",
            )
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("RingIndexRefused")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
            })
            .collect();
            assert_eq!(events.len(), 1, "{events:?}");
            assert!(events[0].series.is_none(), "not one per retry: {events:?}");
            assert!(
                events[0]
                    .note
                    .as_deref()
                    .unwrap_or_default()
                    .contains("rolled-back"),
                "{events:?}"
            );
        })
        .await
        .expect("the rollback test finishes within its deadline");
    }
}
