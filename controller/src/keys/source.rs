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
//! Trust: only the ring's index, as read by the leader, decides (see [`crate::keys::ringview`]).
//! The leader publishes it as the ring view and copies it into the ring-state Secret, from
//! which followers (and the leader after a restart) derive theirs; the key loader seals only
//! with the view's active key. Mirrors are created under generated names
//! (`kseal-ring-<12 hex of the kid>-<random>`), found by label and annotations, and proven by
//! their material: a Secret counts as the mirror of a kid only if its key hashes to that kid.
//!
//! Safety rules: the mirror only ever writes proven mirrors of its own ring; a key that
//! disappears from the ring is removed from the mirror only after
//! `--key-source-retire-grace`, only if this controller once saw it in the index, and never
//! when it would leave the ring's mirror empty; a Secret that looks like a mirror but is not
//! proven one is never patched nor deleted (one Warning event); errors back off exponentially
//! (5 s doubling to 5 min) and never stop the loop.

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
    /// The Secret's name.
    pub name: String,
}

/// The loop's memory between polls.
struct Cache {
    version: Option<Version>,
    index: Option<Index>,
    /// Keys read and checked, by kid. Key secrets are immutable, so a verdict (usable or
    /// rejected) holds while the key stays in the index; keys not found are not cached.
    keys: HashMap<Kid, Result<KeyPair, String>>,
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
}

/// The key-source mirror: the ring, where to mirror it, and what it remembers.
pub struct Mirror {
    ring: Ring,
    source: String,
    namespace: String,
    api: Api<Secret>,
    recorder: Recorder,
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
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_owned(),
                instance: Some(identity.to_owned()),
            },
        );
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
                state_written: None,
                state_ref: None,
                warned: HashSet::new(),
                active_warned: None,
                pin_event_pending: None,
                follower_next: None,
                state_merged: false,
            },
        }
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
            // Until the store answers, the leader's view is the ring-state Secret's, but only
            // under a pinned anchor (`--ring-anchor`): without one, that Secret is only as
            // trustworthy as write access to Secrets here, so it is read once the store's
            // index has pinned the anchor (below).
            self.merge_state(true).await?;
        }
        let version = self.ring.index_version().await;
        count(&self.state, "describe_index", outcome(&version));
        let Some(version) = version.map_err(|e| self.store_err(e))? else {
            return Err(SyncError::NoRing {
                ring: self.ring.name().to_owned(),
                store: self.ring.store().describe(),
            });
        };
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
        self.read_new_keys(&mut report).await?;
        self.reconcile_mirror(&mut report).await?;
        self.publish_gauges();
        if let Some(index) = &self.cache.index {
            if report.active_mirrored {
                self.cache.last_active.clone_from(&index.active);
            }
            let view = RingView::new(index, &self.cache.ever, self.cache.last_active.clone());
            self.state.ring_view.publish(view);
        }
        self.write_state().await;
        self.warn_active_unavailable(report.active_mirrored).await;
        Ok(report)
    }

    /// Reads the ring-state Secrets of this ring and returns the view of the one that parses
    /// with the newest `updated` (several can exist: a leader's, a stale one, a forged one;
    /// until the index is signed a forged one is as good as write access to Secrets here).
    pub async fn load_state(&self) -> Result<Option<FoundState>, SyncError> {
        let trust = self.pin.trust();
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        let mut best: Option<FoundState> = None;
        for secret in listed.items {
            if secret
                .annotations()
                .get(RING_ANNOTATION)
                .map(String::as_str)
                != Some(self.ring.name())
            {
                continue;
            }
            let item = |key: &str| {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .and_then(|v| std::str::from_utf8(&v.0).ok())
                    .map(str::to_owned)
            };
            let Some(text) = item(INDEX_ITEM) else {
                continue;
            };
            let index = match parse_ring_state(&text, self.expected_ring.as_deref(), &trust) {
                Ok((index, _)) => index,
                Err(e) => {
                    tracing::warn!(secret = %secret.name_any(), "ignoring a ring-state Secret: {}", crate::error_chain(&e));
                    continue;
                }
            };
            if best
                .as_ref()
                .is_some_and(|b| b.view.updated >= index.updated)
            {
                continue;
            }
            let ever = item(KIDS_EVER_ITEM)
                .map(|t| parse_kids(&t))
                .unwrap_or_default();
            let last_active = item(LAST_ACTIVE_ITEM).and_then(|t| Kid::parse(t.trim()).ok());
            best = Some(FoundState {
                view: RingView::new(&index, &ever, last_active),
                name: secret.name_any(),
            });
        }
        Ok(best)
    }

    /// A follower's poll: publishes the ring-state Secret's view, verified under the pinned
    /// anchor. A replica with no anchor pinned yet (no `--ring-anchor`) pins from the store
    /// itself (one read of the index), never from a Secret that whoever can write Secrets in
    /// this namespace could have written; until it has, it takes no view, so it seals nothing.
    pub async fn follow(&mut self) -> Result<(), SyncError> {
        let mut from_store = None;
        if self.pin.anchor.is_none() {
            let now = tokio::time::Instant::now();
            if self.cache.follower_next.is_some_and(|t| now < t) {
                return Ok(());
            }
            // Retried soon after a failure, rarely after a success (an unsigned ring).
            self.cache.follower_next = Some(now + FOLLOWER_STORE_RETRY);
            let read = self.ring.snapshot_text(None).await;
            count(&self.state, "get_index", outcome(&read));
            let (text, _) =
                read.map_err(|e| self.store_err(e))?
                    .ok_or_else(|| SyncError::NoRing {
                        ring: self.ring.name().to_owned(),
                        store: self.ring.store().describe(),
                    })?;
            self.cache.follower_next = Some(now + FOLLOWER_STORE_READ);
            let (index, verified) =
                parse_ring_state(&text, self.expected_ring.as_deref(), &self.pin.trust())
                    .map_err(|e| self.store_err(e))?;
            self.accepted(&verified).await;
            from_store = Some(index);
        }
        // An unsigned ring (no anchor): its own index, never a Secret's copy of it.
        let found = match self.pin.anchor {
            Some(_) => self.load_state().await?,
            None => None,
        };
        match (found, from_store) {
            (Some(found), _) => self.state.ring_view.publish(found.view),
            (None, Some(index)) => {
                let view = RingView::new(&index, &self.cache.ever, self.cache.last_active.clone());
                self.state.ring_view.publish(view);
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Takes what this controller remembered in the ring-state Secret before a restart (the
    /// kids it saw, the last verified active key), once, and only under a pinned anchor;
    /// `publish` also publishes its view when there is none yet (the store not read yet).
    async fn merge_state(&mut self, publish: bool) -> Result<(), SyncError> {
        if self.cache.state_merged || self.pin.anchor.is_none() {
            return Ok(());
        }
        self.cache.state_merged = true;
        if let Some(found) = self.load_state().await? {
            self.cache.ever.extend(found.view.ever.iter().cloned());
            if self.cache.last_active.is_none() {
                self.cache.last_active.clone_from(&found.view.last_active);
            }
            if publish && self.state.ring_view.current().is_none() {
                self.state.ring_view.publish(found.view);
            }
        }
        Ok(())
    }

    /// Records an index accepted from the store: the version floor, and the anchor when this
    /// is the first signed history this controller accepts.
    async fn accepted(&mut self, verified: &Verified) {
        self.state
            .metrics
            .key_source_ring_signed
            .set(i64::from(matches!(verified, Verified::Signed { .. })));
        if matches!(verified, Verified::Unsigned) {
            tracing::warn!(
                ring = %self.ring.name(),
                "the ring's index is not signed (written by an older kseal): its keys open, but \
                 anyone who can write it chooses the sealing key; the seeder signs it once with \
                 `kseal keys sign`"
            );
        }
        let floor = self.pin.floor;
        if let Some(anchor) = self.pin.accept(verified) {
            self.pin_anchor(anchor, "the ring").await;
        }
        if self.pin.floor != floor {
            self.state
                .metrics
                .key_source_ring_version
                .set(i64::try_from(self.pin.floor).unwrap_or(i64::MAX));
        }
    }

    /// Pins `anchor` on first use: says so in a log line, an Event and a metric.
    async fn pin_anchor(&mut self, anchor: Kid, from: &str) {
        self.pin.anchor = Some(anchor.clone());
        self.state.metrics.key_source_ring_anchor_pinned.set(1);
        let note = format!(
            "pinned the trust anchor {} of ring {} on first use (read from {from}); from now on \
             only histories rooted there are accepted. Give --ring-anchor {anchor} to pin it \
             from the start",
            anchor.short(),
            self.ring.name()
        );
        tracing::warn!(anchor = %anchor, "{note}");
        match self.cache.state_ref.clone() {
            Some(reference) => self.anchor_pinned_event(note, &reference).await,
            None => self.cache.pin_event_pending = Some(note),
        }
    }

    /// The `RingAnchorPinned` event, on the ring-state Secret.
    async fn anchor_pinned_event(&self, note: String, reference: &ObjectReference) {
        let event = Event {
            type_: EventType::Normal,
            reason: "RingAnchorPinned".into(),
            note: Some(note),
            action: "VerifyRing".into(),
            secondary: None,
        };
        if self.may_write().is_err() {
            return;
        }
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::debug!(error = %crate::error_chain(&e), "failed to publish key-source event");
        }
    }

    /// Copies the index the leader read (text as read), the kids ever seen and the last
    /// verified active kid into the ring-state Secret; best effort (a failure is logged and
    /// retried at the next poll, never fatal: a follower then keeps its last view).
    async fn write_state(&mut self) {
        let Some(text) = self.cache.index_text.clone() else {
            return;
        };
        let mut data = BTreeMap::from([
            (INDEX_ITEM.to_owned(), ByteString(text.into_bytes())),
            (
                KIDS_EVER_ITEM.to_owned(),
                ByteString(format_kids(&self.cache.ever).into_bytes()),
            ),
        ]);
        if let Some(last) = &self.cache.last_active {
            data.insert(
                LAST_ACTIVE_ITEM.to_owned(),
                ByteString(last.as_str().as_bytes().to_vec()),
            );
        }
        if self.cache.state_written.as_ref() == Some(&data) {
            // Unchanged: written again only if someone removed it.
            if let Some(name) = &self.cache.state_name
                && !matches!(self.api.get_opt(name).await, Ok(None))
            {
                return;
            }
            self.cache.state_name = None;
        }
        if self.may_write().is_err() {
            return;
        }
        match self.put_state(&data).await {
            Ok(written) => {
                self.cache.state_name = Some(written.name_any());
                let reference = written.object_ref(&());
                self.cache.state_ref = Some(reference.clone());
                self.cache.state_written = Some(data);
                if let Some(note) = self.cache.pin_event_pending.take() {
                    self.anchor_pinned_event(note, &reference).await;
                }
            }
            Err(e) => tracing::warn!(
                "writing the ring-state Secret failed; retrying at the next poll: {}",
                crate::error_chain(&e)
            ),
        }
    }

    async fn put_state(&self, data: &BTreeMap<String, ByteString>) -> Result<Secret, kube::Error> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await?;
        let candidates: Vec<&Secret> = listed
            .items
            .iter()
            .filter(|s| {
                s.annotations().get(RING_ANNOTATION).map(String::as_str) == Some(self.ring.name())
                    && s.type_.as_deref().is_none_or(|t| t == "Opaque")
                    && !s.labels().contains_key(SEALING_KEY_LABEL)
            })
            .collect();
        // Ours if we wrote one, else the one replicas would read, else a new one.
        let existing = match &self.cache.state_name {
            Some(name) => candidates.iter().find(|s| &s.name_any() == name).copied(),
            None => None,
        };
        let existing = match existing {
            Some(s) => Some(s),
            None => {
                let best = self.load_state().await.ok().flatten().map(|f| f.name);
                candidates
                    .iter()
                    .find(|s| Some(s.name_any()) == best)
                    .copied()
            }
        };
        match existing {
            Some(secret) => {
                let mut desired = secret.clone();
                desired.data = Some(data.clone());
                desired.string_data = None;
                self.api
                    .replace(&secret.name_any(), &PostParams::default(), &desired)
                    .await
            }
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        generate_name: Some(RING_STATE_PREFIX.to_owned()),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(BTreeMap::from([
                            (RING_STATE_LABEL.to_owned(), "true".to_owned()),
                            (
                                "app.kubernetes.io/managed-by".to_owned(),
                                "kseal-controller".to_owned(),
                            ),
                        ])),
                        annotations: Some(BTreeMap::from([
                            (RING_ANNOTATION.to_owned(), self.ring.name().to_owned()),
                            (SOURCE_ANNOTATION.to_owned(), self.source.clone()),
                        ])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("Opaque".to_owned()),
                    data: Some(data.clone()),
                    ..Secret::default()
                };
                self.api.create(&PostParams::default(), &secret).await
            }
        }
    }

    /// One Warning event (on the ring-state Secret) each time the active key becomes unusable
    /// for a new reason; the key loader keeps the readiness detail and the gauge.
    async fn warn_active_unavailable(&mut self, active_mirrored: bool) {
        let Some(index) = &self.cache.index else {
            return;
        };
        let problem = match (&index.active, active_mirrored) {
            (Some(_), true) => None,
            (None, _) => Some(format!("ring {} names no active key", self.ring.name())),
            (Some(active), false) => Some(format!(
                "the active key {} of ring {} could not be mirrored; {}",
                active.short(),
                self.ring.name(),
                match &self.cache.last_active {
                    Some(last) if last != active => {
                        format!(
                            "the last verified active key {} keeps sealing",
                            last.short()
                        )
                    }
                    _ => "no key seals".to_owned(),
                }
            )),
        };
        if problem == self.cache.active_warned {
            return;
        }
        self.cache.active_warned.clone_from(&problem);
        let (Some(problem), Some(reference)) = (problem, self.cache.state_ref.clone()) else {
            return;
        };
        tracing::warn!("{problem}");
        self.event_on(
            &reference,
            EventType::Warning,
            "ActiveKeyUnavailable",
            problem,
        )
        .await;
    }

    /// A Secret that looks like a mirror of this ring but is not a proven one: one Warning
    /// event and a count per Secret and reason; the Secret itself is never touched.
    async fn warn_unproven(&mut self, secret: &Secret, reason: &'static str, note: String) {
        let uid = secret
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| secret.name_any());
        if !self.cache.warned.insert((uid, reason)) {
            return;
        }
        self.state
            .metrics
            .key_source_mirror_conflicts
            .get_or_create(&KeyErrorLabels {
                reason: reason.to_owned(),
            })
            .inc();
        tracing::warn!(secret = %secret.name_any(), reason, "{note}");
        self.event(secret, EventType::Warning, "NotAMirror", note)
            .await;
    }

    /// Takes the keys this controller mirrored earlier (same ring) into the cache, so that a
    /// restart or a new leader does not read every key secret again. A mirror is trusted only
    /// as far as it checks out: the certificate must belong to the private key and the key's
    /// hash must be the kid it is filed under; anything else is left to be read from the ring.
    async fn seed_from_mirror(&mut self) -> Result<(), SyncError> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        for secret in &listed.items {
            let annotations = secret.annotations();
            if annotations.get(RING_ANNOTATION).map(String::as_str) != Some(self.ring.name()) {
                continue;
            }
            let Some(kid) = annotations
                .get(KID_ANNOTATION)
                .and_then(|k| Kid::parse(k).ok())
            else {
                continue;
            };
            if let Some(pair) = mirrored_pair(secret, &kid) {
                self.cache.keys.insert(kid, Ok(pair));
            }
        }
        self.cache.seeded = true;
        Ok(())
    }

    /// Reads the keys of the index that are not cached yet: new ones, and ones listed but not
    /// readable at the last poll (e.g. a replica region lagging), which are retried at every
    /// poll without re-reading the index.
    async fn read_new_keys(&mut self, report: &mut SyncReport) -> Result<(), SyncError> {
        let Some(index) = self.cache.index.clone() else {
            return Ok(());
        };
        for entry in &index.keys {
            if self.cache.keys.contains_key(&entry.kid) {
                continue;
            }
            let read = self.ring.read_key(&entry.kid).await;
            count(&self.state, "get_key", outcome(&read));
            report.keys_read += 1;
            match read {
                Ok(pair) => {
                    self.cache.keys.insert(entry.kid.clone(), Ok(pair));
                }
                Err(
                    e @ (kseal_keystore::Error::BadKey { .. }
                    | kseal_keystore::Error::Malformed { .. }),
                ) => {
                    tracing::warn!(
                        kid = %entry.kid.short(),
                        reason = e.reason(),
                        "skipping a key of the ring: {}",
                        crate::error_chain(&e)
                    );
                    self.state
                        .metrics
                        .key_load_errors
                        .get_or_create(&crate::metrics::KeyErrorLabels {
                            reason: "remote_invalid".to_owned(),
                        })
                        .inc();
                    self.cache
                        .keys
                        .insert(entry.kid.clone(), Err(e.to_string()));
                }
                // Listed but not readable (yet): not cached, so the next poll tries again,
                // without failing the other keys.
                Err(e @ kseal_keystore::Error::NotFound { .. }) => {
                    tracing::warn!(
                        kid = %entry.kid.short(),
                        "a key of the ring's index is missing; retrying at the next poll: {}",
                        crate::error_chain(&e)
                    );
                }
                Err(e) => return Err(self.store_err(e)),
            }
        }
        Ok(())
    }

    fn publish_gauges(&self) {
        let Some(index) = &self.cache.index else {
            return;
        };
        let metrics = &self.state.metrics;
        metrics
            .key_source_ring_keys
            .set(i64::try_from(index.keys.len()).unwrap_or(i64::MAX));
        metrics.key_source_key_age_seconds.clear();
        let now = jiff::Timestamp::now();
        for entry in &index.keys {
            let age = now.duration_since(entry.added).as_secs();
            metrics
                .key_source_key_age_seconds
                .get_or_create(&crate::metrics::KidLabels {
                    kid: entry.kid.short().to_owned(),
                })
                .set(age);
        }
    }

    fn desired_secret(&self, kid: &Kid, pair: &KeyPair, active: bool) -> Option<Secret> {
        let entry = KeyEntry::from_pair(pair).ok()?;
        let data = BTreeMap::from([
            (
                PRIVATE_KEY_ITEM.to_owned(),
                ByteString(entry.private_key_pem().as_bytes().to_vec()),
            ),
            (
                CERTIFICATE_ITEM.to_owned(),
                ByteString(entry.certificate_pem().as_bytes().to_vec()),
            ),
        ]);
        Some(Secret {
            metadata: ObjectMeta {
                generate_name: Some(mirror_name_prefix(kid)),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (
                        SEALING_KEY_LABEL.to_owned(),
                        SEALING_KEY_LABEL_ACTIVE.to_owned(),
                    ),
                    (MIRROR_LABEL.to_owned(), "true".to_owned()),
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        "kseal-controller".to_owned(),
                    ),
                ])),
                annotations: Some(BTreeMap::from([
                    (KID_ANNOTATION.to_owned(), kid.to_string()),
                    (RING_ANNOTATION.to_owned(), self.ring.name().to_owned()),
                    (SOURCE_ANNOTATION.to_owned(), self.source.clone()),
                    (ACTIVE_ANNOTATION.to_owned(), active.to_string()),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some(KEY_SECRET_TYPE.to_owned()),
            data: Some(data),
            ..Secret::default()
        })
    }

    async fn event(&self, secret: &Secret, type_: EventType, reason: &str, note: String) {
        self.event_on(&secret.object_ref(&()), type_, reason, note)
            .await;
    }

    async fn event_on(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "MirrorKey".into(),
            secondary: None,
        };
        if self.may_write().is_err() {
            return;
        }
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::debug!(error = %crate::error_chain(&e), "failed to publish key-source event");
        }
    }

    async fn activated_event(&self, secret: &Secret, entry: &IndexEntry) {
        let note = format!(
            "key {} ({}) of ring {} seals from now on",
            entry.kid.short(),
            entry.fingerprint,
            self.ring.name()
        );
        self.event(secret, EventType::Normal, "SealingKeyActivated", note)
            .await;
    }

    async fn reconcile_mirror(&mut self, report: &mut SyncReport) -> Result<(), SyncError> {
        let Some(index) = self.cache.index.clone() else {
            return Ok(());
        };
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        // Labelled mirrors of this ring, with the kid they are filed under and whether their
        // material proves it (labels and annotations alone prove nothing).
        let ours: Vec<(Secret, Option<Kid>, bool)> = listed
            .items
            .into_iter()
            .filter(|s| {
                s.annotations().get(RING_ANNOTATION).map(String::as_str) == Some(self.ring.name())
            })
            .map(|s| {
                let kid = s
                    .annotations()
                    .get(KID_ANNOTATION)
                    .and_then(|k| Kid::parse(k).ok());
                let proven = kid.as_ref().is_some_and(|k| mirrored_pair(&s, k).is_some());
                (s, kid, proven)
            })
            .collect();
        let any_proven = ours.iter().any(|(_, _, proven)| *proven);
        // Keys of the index: create missing mirrors, fix the active flag, clear missing marks.
        let mut mirrored_in_index = 0usize;
        for entry in &index.keys {
            let Some(Ok(pair)) = self.cache.keys.get(&entry.kid) else {
                continue;
            };
            let pair = pair.clone();
            let active = index.active.as_ref() == Some(&entry.kid);
            let filed: Vec<&(Secret, Option<Kid>, bool)> = ours
                .iter()
                .filter(|(_, kid, _)| kid.as_ref() == Some(&entry.kid))
                .collect();
            let existing = filed
                .iter()
                .find(|(_, _, proven)| *proven)
                .map(|(s, _, _)| s);
            let unproven: Vec<Secret> = filed
                .iter()
                .filter(|(_, _, proven)| !*proven)
                .map(|(s, _, _)| s.clone())
                .collect();
            for secret in &unproven {
                let note = format!(
                    "this Secret is labelled as the mirror of key {} of ring {} but does not hold that key: it is not used as the mirror and is left as it is",
                    entry.kid.short(),
                    self.ring.name()
                );
                self.warn_unproven(secret, "material_mismatch", note).await;
            }
            match existing {
                None => {
                    let Some(secret) = self.desired_secret(&entry.kid, &pair, active) else {
                        continue;
                    };
                    self.may_write()?;
                    match self.api.create(&PostParams::default(), &secret).await {
                        Ok(created) => {
                            mirrored_in_index += 1;
                            report.active_mirrored |= active;
                            report.created.push(created.name_any());
                            if active && any_proven {
                                // Mirrored and activated in one poll (`rotate --now`).
                                report.activated = Some(created.name_any());
                                self.activated_event(&created, entry).await;
                            }
                            tracing::info!(
                                secret = %created.name_any(),
                                kid = %entry.kid.short(),
                                fingerprint = %entry.fingerprint,
                                active,
                                "mirrored a key of the fleet ring"
                            );
                            let (reason, note) = if unproven.is_empty() {
                                (
                                    "KeyMirrored",
                                    format!(
                                        "key {} ({}) of ring {} mirrored{}",
                                        entry.kid.short(),
                                        entry.fingerprint,
                                        self.ring.name(),
                                        if active { "; it seals" } else { "" }
                                    ),
                                )
                            } else {
                                report.repaired.push(created.name_any());
                                (
                                    "MirrorRepaired",
                                    format!(
                                        "key {} of ring {} mirrored anew: the Secret filed under it did not hold it (left as it is)",
                                        entry.kid.short(),
                                        self.ring.name()
                                    ),
                                )
                            };
                            self.event(&created, EventType::Normal, reason, note).await;
                        }
                        Err(kube::Error::Api(status)) if status.code == 409 => {
                            // The generated name was taken: try again at the next poll.
                            self.state
                                .metrics
                                .key_source_mirror_conflicts
                                .get_or_create(&KeyErrorLabels {
                                    reason: "name_taken".to_owned(),
                                })
                                .inc();
                            tracing::warn!(
                                kid = %entry.kid.short(),
                                "cannot mirror key {} of ring {} yet: the generated name was taken; retrying at the next poll",
                                entry.kid.short(),
                                self.ring.name()
                            );
                        }
                        Err(e) => return Err(self.kube_err(e)),
                    }
                }
                Some(secret) => {
                    mirrored_in_index += 1;
                    report.active_mirrored |= active;
                    let annotations = secret.annotations();
                    let active_now =
                        annotations.get(ACTIVE_ANNOTATION).map(String::as_str) == Some("true");
                    let missing = annotations.contains_key(MISSING_SINCE_ANNOTATION);
                    if active_now != active || missing {
                        let patch = serde_json::json!({"metadata": {"annotations": {
                            ACTIVE_ANNOTATION: active.to_string(),
                            MISSING_SINCE_ANNOTATION: null,
                        }}});
                        self.may_write()?;
                        let patched = self
                            .api
                            .patch(
                                &secret.name_any(),
                                &PatchParams::apply(FIELD_MANAGER),
                                &Patch::Merge(&patch),
                            )
                            .await
                            .map_err(|e| self.kube_err(e))?;
                        if active && !active_now {
                            report.activated = Some(patched.name_any());
                            tracing::info!(
                                secret = %patched.name_any(),
                                kid = %entry.kid.short(),
                                "the fleet ring's sealing key changed: new SealedSecrets are sealed with {}",
                                entry.kid.short()
                            );
                            self.activated_event(&patched, entry).await;
                        }
                    }
                }
            }
        }
        // Mirrors of keys no longer in the index: mark, then remove after the grace period,
        // never the ring's last mirrored key, and only proven mirrors of a key this
        // controller saw in the ring (a hand-made Secret is never touched).
        let now = jiff::Timestamp::now();
        for (secret, kid, proven) in &ours {
            if kid.as_ref().is_some_and(|k| index.entry(k).is_some()) {
                continue;
            }
            let Some(kid) = kid.as_ref().filter(|k| self.cache.ever.contains(*k)) else {
                let note = format!(
                    "this Secret is labelled as a mirror of ring {} under a key the ring never listed: it opens like any key Secret, but it is not a mirror and is never changed nor removed",
                    self.ring.name()
                );
                self.warn_unproven(secret, "unknown_kid", note).await;
                continue;
            };
            if !proven {
                let note = format!(
                    "this Secret is labelled as the mirror of key {} of ring {} but does not hold that key: it is never changed nor removed",
                    kid.short(),
                    self.ring.name()
                );
                self.warn_unproven(secret, "material_mismatch", note).await;
                continue;
            }
            let annotations = secret.annotations();
            let since = annotations
                .get(MISSING_SINCE_ANNOTATION)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let Some(since) = since else {
                let mut patch = serde_json::json!({"metadata": {"annotations": {
                    MISSING_SINCE_ANNOTATION: now.to_string(),
                }}});
                if annotations.get(ACTIVE_ANNOTATION).map(String::as_str) == Some("true") {
                    patch["metadata"]["annotations"][ACTIVE_ANNOTATION] = "false".into();
                }
                self.may_write()?;
                self.api
                    .patch(
                        &secret.name_any(),
                        &PatchParams::apply(FIELD_MANAGER),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|e| self.kube_err(e))?;
                tracing::info!(
                    secret = %secret.name_any(),
                    grace = ?self.retire_grace,
                    "a mirrored key left the fleet ring; its mirror is removed after the retire grace"
                );
                continue;
            };
            let gone_for = now.duration_since(since).unsigned_abs();
            if gone_for < self.retire_grace {
                continue;
            }
            if mirrored_in_index == 0 {
                tracing::warn!(
                    secret = %secret.name_any(),
                    "keeping a retired key's mirror: it would leave this cluster without any key of the ring"
                );
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: secret.metadata.uid.clone(),
                    resource_version: secret.metadata.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            self.may_write()?;
            match self.api.delete(&secret.name_any(), &params).await {
                Ok(_) => {
                    report.retired.push(secret.name_any());
                    tracing::info!(secret = %secret.name_any(), "removed the mirror of a key retired from the fleet ring");
                    self.event(
                        secret,
                        EventType::Normal,
                        "KeyRetired",
                        format!(
                            "key {} left ring {} over {} ago: its mirror is removed",
                            kid.short(),
                            self.ring.name(),
                            jiff::SignedDuration::try_from(self.retire_grace)
                                .map(|d| format!("{d:#}"))
                                .unwrap_or_default()
                        ),
                    )
                    .await;
                }
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(e) => return Err(self.kube_err(e)),
            }
        }
        Ok(())
    }
}

/// The key a mirror Secret holds, if it is usable (certificate matching the private key) and
/// its hash is `kid`.
fn mirrored_pair(secret: &Secret, kid: &Kid) -> Option<KeyPair> {
    let pem = crate::keys::material_from_secret(secret).pem.ok()?;
    KeyPair::from_pem(&pem.private_key, &pem.certificate)
        .ok()
        .filter(|pair| &Kid::of(pair.public_key()) == kid)
}

/// Changes of ring-state Secrets in `namespace` (metadata only): a follower reads the view
/// the moment the leader writes it, not at its next poll. Errors are retried by the watcher.
fn ring_state_changes(client: Client, namespace: &str) -> futures::stream::BoxStream<'static, ()> {
    use kube::runtime::WatchStreamExt as _;
    let api: Api<kube::api::PartialObjectMeta<Secret>> = Api::namespaced(client, namespace);
    kube::runtime::watcher::watcher(
        api,
        kube::runtime::watcher::Config::default().labels(&format!("{RING_STATE_LABEL}=true")),
    )
    .default_backoff()
    .filter_map(|event| {
        futures::future::ready(match event {
            Ok(
                kube::runtime::watcher::Event::Apply(_) | kube::runtime::watcher::Event::InitDone,
            ) => Some(()),
            _ => None,
        })
    })
    .boxed()
}

/// Runs the key-source loop of `config.key_source` until `shutdown` turns true (returns at
/// once without a key source). Only the leader polls and mirrors: it reads the ring the
/// moment it becomes leader (a [`crate::cluster::leadership::Term`] event, no polling), then every
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
    let (namespace, identity, refresh) = (
        config.controller_namespace.clone(),
        config.identity.clone(),
        state.refresh.clone(),
    );
    let config = config_source;
    state.readiness.key_source_configured();
    let source = config.location.to_string();
    let mut backoff = BACKOFF_MIN;
    let ring = loop {
        match Ring::open(&config.location, &config.aws).await {
            Ok(ring) => {
                break ring.with_trust(match &config.anchor {
                    Some(anchor) => kseal_keystore::Trust::anchored(anchor.clone()),
                    None => {
                        tracing::info!(
                            "no --ring-anchor: the anchor of the first signed ring history read is pinned"
                        );
                        kseal_keystore::Trust::first_use().allow_unsigned(true)
                    }
                });
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
                    _ = shutdown.wait_for(|s| *s) => return,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
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
    tracing::info!(key_source = %source, interval = ?config.interval, "reading keys from the fleet key ring");
    let mut backoff = BACKOFF_MIN;
    let mut next = tokio::time::Instant::now();
    let mut terms = state.leadership.subscribe();
    let mut last_poll: Option<tokio::time::Instant> = None;
    let mut trigger;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {
                trigger = if last_poll.is_none() { "start" } else { "interval" };
            }
            _ = refresh.requested() => {
                trigger = "refresh";
                if last_poll.is_some_and(|t| t.elapsed() < config.refresh_spacing) {
                    next = next.min(last_poll.map_or(next, |t| t + config.refresh_spacing));
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
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if !state.is_leader() {
            // Followers take the ring view from the ring-state Secret the leader writes, and
            // the keys from the mirror; they poll the store once leading.
            if let Err(e) = mirror.follow().await {
                tracing::debug!(
                    "reading the ring-state Secret failed: {}",
                    crate::error_chain(&e)
                );
            }
            next = tokio::time::Instant::now() + STATE_POLL.min(config.interval);
            continue;
        }
        last_poll = Some(tokio::time::Instant::now());
        // Taken before the first read: a sync that outlives this term writes nothing more.
        let Some(fence) = state.leadership.fence() else {
            continue;
        };
        mirror.set_fence(Some(fence));
        state
            .metrics
            .key_source_sync_triggers
            .get_or_create(&crate::metrics::TriggerLabels {
                trigger: trigger.to_owned(),
            })
            .inc();
        match mirror.sync().await {
            Ok(report) => {
                backoff = BACKOFF_MIN;
                state.readiness.key_source_ok();
                state
                    .metrics
                    .key_source_last_success
                    .set(jiff::Timestamp::now().as_second());
                count(&state, "sync", "ok");
                if report != SyncReport::default() {
                    tracing::debug!(?report, "key ring synced");
                }
                next = tokio::time::Instant::now() + crate::timing::jitter(config.interval, 0.1);
            }
            Err(SyncError::Fenced(e)) => {
                // Not a problem of the key source: followers read the view the new leader
                // writes.
                tracing::info!(reason = %e, "key-source sync stopped: this replica no longer leads");
                next = tokio::time::Instant::now();
            }
            Err(e) => {
                let message = crate::error_chain(&e);
                tracing::warn!(reason = e.reason(), retry_in = ?backoff, "key source: {message}");
                state.readiness.key_source_failed(e.reason(), &message);
                count(&state, "sync", e.reason());
                next = tokio::time::Instant::now() + backoff;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}
