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
//! Safety rules: the mirror only ever writes Secrets that carry its label and its ring; a key
//! that disappears from the ring is removed from the mirror only after
//! `--key-source-retire-grace`, and never when it would leave the ring's mirror empty; errors
//! back off exponentially (5 s doubling to 5 min) and never stop the loop.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_keys::KeyPair;
use kseal_keystore::{Index, IndexEntry, KeyEntry, Kid, Ring, Version};
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource as _, ResourceExt as _};
use tokio::sync::{Notify, watch};

use crate::keys::{CERTIFICATE_ITEM, KEY_SECRET_TYPE, PRIVATE_KEY_ITEM, REPORTER};
use crate::metrics::KeySourceLabels;
use crate::state::State;

/// Label on mirrored key Secrets.
pub const MIRROR_LABEL: &str = "kseal.dev/mirror";
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
/// Name prefix of mirrored key Secrets (followed by 16 hex characters of the kid).
pub const NAME_PREFIX: &str = "kseal-ring-";

const FIELD_MANAGER: &str = "kseal-controller";
const BACKOFF_MIN: Duration = Duration::from_secs(5);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Refresh requests closer together than this are merged.
const REFRESH_SPACING: Duration = Duration::from_secs(5);
/// How often a follower checks whether it became the leader.
const LEADER_CHECK: Duration = Duration::from_secs(2);

/// Asks the key-source loop to check the ring now (SIGUSR1, `POST /v1/refresh`).
#[derive(Clone, Debug, Default)]
pub struct Refresh(Arc<Notify>);

impl Refresh {
    /// Requests a check (merged with one already waiting).
    pub fn request(&self) {
        self.0.notify_one();
    }

    async fn requested(&self) {
        self.0.notified().await;
    }
}

/// The name of the mirror Secret of `kid`.
pub fn mirror_name(kid: &Kid) -> String {
    format!("{NAME_PREFIX}{}", &kid.as_str()[..16])
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
    /// Mirror Secrets whose key material no longer matched their kid, restored.
    pub repaired: Vec<String>,
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
        Self {
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
            },
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
        let version = self.ring.index_version().await;
        count(&self.state, "describe_index", outcome(&version));
        let Some(version) = version.map_err(|e| self.store_err(e))? else {
            return Err(SyncError::NoRing {
                ring: self.ring.name().to_owned(),
                store: self.ring.store().describe(),
            });
        };
        if self.cache.version.as_ref() != Some(&version) || self.cache.index.is_none() {
            let snapshot = self.ring.snapshot(Some(&version)).await;
            count(&self.state, "get_index", outcome(&snapshot));
            let snapshot =
                snapshot
                    .map_err(|e| self.store_err(e))?
                    .ok_or_else(|| SyncError::NoRing {
                        ring: self.ring.name().to_owned(),
                        store: self.ring.store().describe(),
                    })?;
            report.index_read = true;
            let index = snapshot.index;
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
        Ok(report)
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
                name: Some(mirror_name(kid)),
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
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "MirrorKey".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &secret.object_ref(&())).await {
            tracing::debug!(error = %e, "failed to publish key-source event");
        }
    }

    /// Restores the key material of a mirror Secret that no longer holds its kid's key
    /// (edited by hand or by another tool): replaced from the ring's copy, only if the Secret
    /// has not changed since it was listed.
    async fn repair(
        &self,
        secret: &Secret,
        kid: &Kid,
        pair: &KeyPair,
        active: bool,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let Some(mut desired) = self.desired_secret(kid, pair, active) else {
            return Ok(());
        };
        desired.metadata = secret.metadata.clone();
        desired.type_.clone_from(&secret.type_);
        match self
            .api
            .replace(&secret.name_any(), &PostParams::default(), &desired)
            .await
        {
            Ok(repaired) => {
                tracing::warn!(
                    secret = %repaired.name_any(),
                    kid = %kid.short(),
                    "a mirrored key Secret no longer held its key; restored from the ring"
                );
                self.event(
                    &repaired,
                    EventType::Warning,
                    "MirrorRepaired",
                    format!(
                        "the key material did not match key {} of ring {}; restored from the ring",
                        kid.short(),
                        self.ring.name()
                    ),
                )
                .await;
                report.repaired.push(repaired.name_any());
                Ok(())
            }
            // Changed meanwhile: the next poll looks again.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(self.kube_err(e)),
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
        let ours: Vec<Secret> = listed
            .items
            .into_iter()
            .filter(|s| {
                s.annotations().get(RING_ANNOTATION).map(String::as_str) == Some(self.ring.name())
            })
            .collect();
        let kid_of = |s: &Secret| s.annotations().get(KID_ANNOTATION).cloned();
        // Keys of the index: create missing mirrors, fix the active flag, clear missing marks.
        let mut mirrored_in_index = 0usize;
        for entry in &index.keys {
            let Some(Ok(pair)) = self.cache.keys.get(&entry.kid) else {
                continue;
            };
            let active = index.active.as_ref() == Some(&entry.kid);
            let existing = ours
                .iter()
                .find(|s| kid_of(s).as_deref() == Some(entry.kid.as_str()));
            match existing {
                None => {
                    let Some(secret) = self.desired_secret(&entry.kid, pair, active) else {
                        continue;
                    };
                    match self.api.create(&PostParams::default(), &secret).await {
                        Ok(created) => {
                            mirrored_in_index += 1;
                            report.created.push(created.name_any());
                            if active && !ours.is_empty() {
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
                            self.event(
                                &created,
                                EventType::Normal,
                                "KeyMirrored",
                                format!(
                                    "key {} ({}) of ring {} mirrored{}",
                                    entry.kid.short(),
                                    entry.fingerprint,
                                    self.ring.name(),
                                    if active { "; it seals" } else { "" }
                                ),
                            )
                            .await;
                        }
                        Err(kube::Error::Api(status)) if status.code == 409 => {
                            // A Secret of that name exists without our label or ring: never
                            // touch it.
                            tracing::warn!(
                                secret = %mirror_name(&entry.kid),
                                "cannot mirror key {}: a Secret of that name exists and is not a mirror of ring {}",
                                entry.kid.short(),
                                self.ring.name()
                            );
                        }
                        Err(e) => return Err(self.kube_err(e)),
                    }
                }
                Some(secret) => {
                    mirrored_in_index += 1;
                    if mirrored_pair(secret, &entry.kid).is_none() {
                        self.repair(secret, &entry.kid, pair, active, report)
                            .await?;
                    }
                    let annotations = secret.annotations();
                    let active_now =
                        annotations.get(ACTIVE_ANNOTATION).map(String::as_str) == Some("true");
                    let missing = annotations.contains_key(MISSING_SINCE_ANNOTATION);
                    if active_now != active || missing {
                        let patch = serde_json::json!({"metadata": {"annotations": {
                            ACTIVE_ANNOTATION: active.to_string(),
                            MISSING_SINCE_ANNOTATION: null,
                        }}});
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
        // never the ring's last mirrored key.
        let now = jiff::Timestamp::now();
        for secret in &ours {
            let Some(kid) = kid_of(secret) else { continue };
            if Kid::parse(&kid).is_ok_and(|k| index.entry(&k).is_some()) {
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
                            &kid[..kid.len().min(12)],
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

/// Runs the key-source loop of `config.key_source` until `shutdown` turns true (returns at
/// once without a key source). Only the leader polls and mirrors; followers see the mirror
/// through the key loader's watch. `state.refresh` asks for a check now.
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
            Ok(ring) => break ring,
            Err(e) => {
                let message = crate::error_chain(&e);
                tracing::error!(
                    reason = e.reason(),
                    "cannot use --key-source {source}: {message}"
                );
                state
                    .readiness
                    .key_source_failed(format!("{}: {message}", e.reason()));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    };
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
    let mut was_leader = false;
    let mut last_poll: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = refresh.requested() => {
                if last_poll.is_some_and(|t| t.elapsed() < REFRESH_SPACING) {
                    next = next.min(last_poll.map_or(next, |t| t + REFRESH_SPACING));
                    continue;
                }
                tracing::info!("key ring refresh requested");
            }
            _ = tokio::time::sleep(LEADER_CHECK) => {
                let leader = state.is_leader();
                let became = leader && !was_leader;
                was_leader = leader;
                if !became {
                    continue;
                }
            }
            _ = shutdown.wait_for(|s| *s) => return,
        }
        was_leader = state.is_leader();
        if !was_leader {
            // Followers read the mirror the leader writes; check again once leading.
            next = tokio::time::Instant::now() + config.interval;
            continue;
        }
        last_poll = Some(tokio::time::Instant::now());
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
                next = tokio::time::Instant::now() + crate::reconcile::jitter(config.interval, 0.1);
            }
            Err(e) => {
                let message = crate::error_chain(&e);
                tracing::warn!(reason = e.reason(), retry_in = ?backoff, "key source: {message}");
                state
                    .readiness
                    .key_source_failed(format!("{}: {message}", e.reason()));
                count(&state, "sync", e.reason());
                next = tokio::time::Instant::now() + backoff;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}
