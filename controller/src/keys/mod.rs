//! Loading the key ring, hot reload, and optional in-cluster key generation and renewal.
//!
//! Keys come from a [`KeySource`]. The one implemented here, [`SecretKeySource`], reads them
//! exactly as Bitnami stores them, so an existing Bitnami install's keys work unchanged:
//! Secrets in the controller namespace labelled
//! `sealedsecrets.bitnami.com/sealed-secrets-key=active`, with a PEM private key (PKCS #1 or
//! PKCS #8) in `tls.key` and a PEM certificate in `tls.crt`, plus the pre-v0.9 legacy Secret
//! named exactly the key prefix (loaded even without the label; a label other than `active`
//! on it disables it too).
//!
//! Unlike Bitnami, the source is watched: adding a key Secret, deleting one or relabelling it
//! (any value but `active`, e.g. `compromised`) changes the ring without a restart. A key
//! Secret that cannot be used (bad PEM, not RSA, certificate and key that do not belong
//! together) is skipped with a warning, a `kseal_key_load_errors_total{reason}` count and a
//! Warning event on the Secret; it never stops the controller.
//!
//! With `--generate-key-if-missing=true` the leader also generates keys: one when the ring is
//! empty, then renewals as [`crate::keys::renewal`] decides from the ring it sees
//! (`--key-renew-period`, `--key-cutoff-time`), and one per [`KeyRequester::request`]
//! (SIGUSR1). A new key only adds to the ring: older keys are never deleted or deactivated,
//! so everything sealed with them still unseals, and `/v1/cert.pem` serves the new key as
//! soon as the watch delivers it.
//!
//! Which key seals: without a key source, the newest key whose certificate has not expired
//! (Bitnami's rule). With `--key-source`, only the fleet ring's active key as the ring view
//! names it (`crate::keys::ringview`), once a loaded key's material hashes to that kid; labels and
//! annotations never choose it, so any other key Secret opens but never seals. While the
//! active key cannot seal, the last verified active key does, or none ([`SealingChoice`]).
//!
//! The [`KeySource`] trait is the seam for other stores (e.g. AWS Secrets Manager): a source
//! yields snapshots of candidate keys and can store a generated key; parsing, ordering,
//! error reporting and publishing into [`State`] are shared.

//! The folder's other parts: [`source`] (the fleet ring as a key source, mirrored into key
//! Secrets), `ringview` (what the controller trusts about the fleet ring's index and the
//! ring-state Secret), [`renewal`] (when a new key is due) and `layout` (the key Secret
//! layout every task shares).

pub mod binding;
pub(crate) mod layout;
#[doc(hidden)]
pub mod renewal;
pub(crate) mod ringview;
pub mod source;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_keys::{CertificateOptions, KeyId, KeyPair, KeyRing};
use kseal_keystore::Kid;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use tokio::sync::{mpsc, watch};
use zeroize::Zeroizing;

use self::renewal::{Due, Reason};
use crate::config::{Config, KeyOrder};
use crate::keys::ringview::RingView;
use crate::state::{SealingProblem, State};

pub use crate::keys::layout::{CERTIFICATE_ITEM, KEY_SECRET_TYPE, PRIVATE_KEY_ITEM, REPORTER};

/// How often the loader re-checks generation and refreshes the key-age gauge.
const TICK: Duration = Duration::from_secs(2);
/// How long to wait for a generated key to show up in the ring before generating again (and
/// how long to wait after a failed generation before retrying).
const GENERATION_GRACE: Duration = Duration::from_secs(60);

/// One candidate key as a source holds it, before parsing.
pub struct KeyMaterial {
    /// Where it comes from, for logs (e.g. `kube-system/sealed-secrets-key5rxd9`); not secret.
    pub origin: String,
    /// Changes whenever the content may have changed (a resourceVersion); parsing is cached
    /// per `(origin, version)`.
    pub version: String,
    /// The object to attach a Warning event to when the key is rejected.
    pub reference: Option<ObjectReference>,
    /// When the key was stored (orders keys under `SecretCreationTimestamp`).
    pub created: Option<SystemTime>,
    /// The PEM texts, or why they could not be read.
    pub pem: Result<KeyPem, Rejection>,
    /// Labelled as a copy of a fleet ring key (`kseal.dev/mirror=true`). A label proves
    /// nothing: only a key whose material hashes to a kid of the ring view counts as a
    /// mirror, and only the view's active key seals.
    pub mirror: bool,
    /// A mirror's `kseal.dev/ring` annotation: the ring it claims to copy (decides its ring
    /// only while no verified ring view lists the key; see [`binding`]).
    pub ring: Option<String>,
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyMaterial")
            .field("origin", &self.origin)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A private key and certificate in PEM. The private key zeroizes on drop.
pub struct KeyPem {
    /// `tls.key`.
    pub private_key: Zeroizing<String>,
    /// `tls.crt`.
    pub certificate: String,
}

/// Why a key was skipped. Messages never quote key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The `reason` label of `kseal_key_load_errors_total`.
    pub reason: &'static str,
    /// Human-readable explanation.
    pub message: String,
}

impl Rejection {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }

    fn from_keys_error(error: &kseal_keys::Error) -> Self {
        use kseal_keys::Error as E;
        match error {
            E::Pem(_) | E::Der { .. } => Self::new("pem", "tls.key or tls.crt is not valid PEM"),
            E::NotRsa | E::KeySize(_) => {
                Self::new("not_rsa", "the key is not an RSA key of 2048 to 8192 bits")
            }
            E::KeyMismatch { .. } => Self::new(
                "mismatch",
                "the certificate in tls.crt does not belong to the private key in tls.key",
            ),
            _ => Self::new("invalid", "the private key was rejected"),
        }
    }
}

/// A store of sealing keys.
pub trait KeySource: Send + 'static {
    /// Every candidate key, first once the initial load is complete, then again after each
    /// change. The stream retries transient errors itself.
    fn snapshots(&mut self) -> BoxStream<'static, Vec<KeyMaterial>>;

    /// Stores a newly generated key, so that a later snapshot holds it. Returns where it was
    /// stored (for logs).
    fn store(&self, pair: &KeyPair) -> BoxFuture<'static, Result<String, crate::Error>>;

    /// Reports a rejected key where its owner will see it (best effort).
    fn report(&self, material: &KeyMaterial, rejection: &Rejection) -> BoxFuture<'static, ()>;
}

/// Key Secrets in the controller namespace, as Bitnami stores them.
pub struct SecretKeySource {
    client: Client,
    namespace: String,
    prefix: String,
    /// Extra labels and annotations on generated key Secrets.
    extra_labels: BTreeMap<String, String>,
    extra_annotations: BTreeMap<String, String>,
    recorder: Recorder,
    /// Where watch failures are counted and the API server's reachability is tracked.
    state: Option<State>,
}

impl SecretKeySource {
    /// Reads keys from `config.controller_namespace`, with `config.key_prefix` as the legacy
    /// name and the prefix of generated Secrets.
    pub fn new(client: Client, config: &Config) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_owned(),
                instance: Some(config.identity.clone()),
            },
        );
        Self {
            client,
            namespace: config.controller_namespace.clone(),
            prefix: config.key_prefix.clone(),
            extra_labels: config.key_labels.clone(),
            extra_annotations: config.key_annotations.clone(),
            recorder,
            state: None,
        }
    }

    /// Counts watch failures in `state` (`kseal_watch_failures_total{watch="key_secrets"}`)
    /// and reports the API server's reachability there, instead of one warn line per failure.
    pub fn reporting_to(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }
}

/// One watched set of Secrets (the labelled keys, or the legacy Secret).
#[derive(Default)]
struct WatchedSet {
    current: BTreeMap<String, Secret>,
    relisting: Option<BTreeMap<String, Secret>>,
    synced: bool,
}

impl WatchedSet {
    fn apply(&mut self, event: watcher::Event<Secret>) -> bool {
        match event {
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(s) => {
                self.relisting
                    .get_or_insert_with(BTreeMap::new)
                    .insert(s.name_any(), s);
                false
            }
            watcher::Event::InitDone => {
                self.current = self.relisting.take().unwrap_or_default();
                self.synced = true;
                true
            }
            watcher::Event::Apply(s) => {
                self.current.insert(s.name_any(), s);
                self.synced
            }
            watcher::Event::Delete(s) => {
                self.current.remove(&s.name_any());
                self.synced
            }
        }
    }
}

fn is_active_or_unlabelled(secret: &Secret) -> bool {
    secret
        .labels()
        .get(SEALING_KEY_LABEL)
        .is_none_or(|v| v == SEALING_KEY_LABEL_ACTIVE)
}

/// Reads one key Secret's PEM texts (never logging them).
pub fn material_from_secret(secret: &Secret) -> KeyMaterial {
    let meta = &secret.metadata;
    let origin = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    let item = |key: &str| secret.data.as_ref().and_then(|d| d.get(key));
    let pem = match (item(PRIVATE_KEY_ITEM), item(CERTIFICATE_ITEM)) {
        (Some(key), Some(cert)) => {
            let key = Zeroizing::new(key.0.clone());
            match (std::str::from_utf8(&key), std::str::from_utf8(&cert.0)) {
                (Ok(k), Ok(c)) => Ok(KeyPem {
                    private_key: Zeroizing::new(k.to_owned()),
                    certificate: c.to_owned(),
                }),
                _ => Err(Rejection::new("pem", "tls.key or tls.crt is not text")),
            }
        }
        _ => Err(Rejection::new(
            "missing_data",
            "the Secret lacks tls.key or tls.crt",
        )),
    };
    // A key Secret kseal made: labelled as a mirror, or (a label is easily removed) annotated
    // with its kid, or named as mirrors are (a name cannot change).
    let mirror = secret
        .labels()
        .get(crate::keys::layout::MIRROR_LABEL)
        .is_some_and(|v| v == "true")
        || secret.annotations().contains_key(source::KID_ANNOTATION)
        || meta
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(source::NAME_PREFIX));
    let ring = mirror
        .then(|| secret.annotations().get(source::RING_ANNOTATION).cloned())
        .flatten();
    KeyMaterial {
        mirror,
        ring,
        origin,
        version: meta.resource_version.clone().unwrap_or_default(),
        reference: Some(secret.object_ref(&())),
        created: meta
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0)),
        pem,
    }
}

impl KeySource for SecretKeySource {
    fn snapshots(&mut self) -> BoxStream<'static, Vec<KeyMaterial>> {
        let state = self.state.clone();
        // With a state: the controller's watch retries (at most 5 s, reset when the API
        // server answers again); without: kube-runtime's default (up to 30 s).
        let backoff = || -> Box<dyn kube::runtime::utils::Backoff> {
            match &state {
                Some(state) => Box::new(crate::timing::WatchBackoff::resetting_on(
                    state.api.recoveries(),
                )),
                None => Box::new(watcher::DefaultBackoff::default()),
            }
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let labelled = watcher(
            api.clone(),
            watcher::Config::default()
                .labels(&format!("{SEALING_KEY_LABEL}={SEALING_KEY_LABEL_ACTIVE}")),
        )
        .backoff(backoff())
        .map(|e| (0usize, e));
        let legacy = watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={}", self.prefix)),
        )
        .backoff(backoff())
        .map(|e| (1usize, e));
        futures::stream::select(labelled, legacy)
            .scan(
                [WatchedSet::default(), WatchedSet::default()],
                move |sets, (which, event)| {
                    let changed = match (event, &state) {
                        (Ok(event), state) => {
                            // `Init` starts a (re)list before any request is sent: no answer.
                            if let Some(state) = state
                                && !matches!(event, watcher::Event::Init)
                            {
                                state.api_answered();
                            }
                            sets[which].apply(event)
                        }
                        (Err(e), Some(state)) => {
                            state.watch_failed("key_secrets", &e);
                            false
                        }
                        (Err(e), None) => {
                            tracing::warn!(error = %crate::error_chain(&e), "watching key Secrets failed; retrying");
                            false
                        }
                    };
                    let snapshot = (changed && sets.iter().all(|s| s.synced)).then(|| {
                        let mut by_name: BTreeMap<&String, &Secret> =
                            sets[0].current.iter().collect();
                        for (name, s) in &sets[1].current {
                            if is_active_or_unlabelled(s) {
                                by_name.entry(name).or_insert(s);
                            }
                        }
                        let mut secrets: Vec<&Secret> = by_name.into_values().collect();
                        // Bitnami reads keys sorted by creation time.
                        secrets.sort_by(|a, b| {
                            a.metadata
                                .creation_timestamp
                                .as_ref()
                                .map(|t| t.0)
                                .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                                .then_with(|| a.name_any().cmp(&b.name_any()))
                        });
                        secrets.into_iter().map(material_from_secret).collect()
                    });
                    futures::future::ready(Some(snapshot))
                },
            )
            .filter_map(futures::future::ready)
            .boxed()
    }

    fn store(&self, pair: &KeyPair) -> BoxFuture<'static, Result<String, crate::Error>> {
        let secret = key_secret(&self.prefix, &self.namespace, pair)
            .map(|s| with_metadata(s, &self.extra_labels, &self.extra_annotations));
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        async move {
            let secret = secret?;
            let created = api
                .create(&PostParams::default(), &secret)
                .await
                .map_err(crate::Error::Kube)?;
            Ok(format!(
                "{}/{}",
                created.namespace().unwrap_or_default(),
                created.name_any()
            ))
        }
        .boxed()
    }

    fn report(&self, material: &KeyMaterial, rejection: &Rejection) -> BoxFuture<'static, ()> {
        let Some(reference) = material.reference.clone() else {
            return futures::future::ready(()).boxed();
        };
        let recorder = self.recorder.clone();
        let note = format!("key Secret skipped: {}", rejection.message);
        async move {
            let event = Event {
                type_: EventType::Warning,
                reason: "KeyRejected".into(),
                note: Some(note),
                action: "LoadKey".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %crate::error_chain(&e), "failed to publish key event");
            }
        }
        .boxed()
    }
}

/// The Secret Bitnami would store for `pair`: `generateName: <prefix>`, type
/// `kubernetes.io/tls`, labelled active, PKCS #1 `tls.key`.
pub fn key_secret(prefix: &str, namespace: &str, pair: &KeyPair) -> Result<Secret, crate::Error> {
    let key_pem = pair
        .private_key()
        .to_pkcs1_pem()
        .map_err(|_| crate::Error::KeyGeneration)?;
    let data = BTreeMap::from([
        (
            PRIVATE_KEY_ITEM.to_owned(),
            ByteString(key_pem.as_bytes().to_vec()),
        ),
        (
            CERTIFICATE_ITEM.to_owned(),
            ByteString(pair.certificate().to_pem().into_bytes()),
        ),
    ]);
    Ok(Secret {
        metadata: ObjectMeta {
            generate_name: Some(prefix.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                SEALING_KEY_LABEL.to_owned(),
                SEALING_KEY_LABEL_ACTIVE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(KEY_SECRET_TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    })
}

/// `secret` with `labels` and `annotations` added (`--privatekey-labels`,
/// `--privatekey-annotations`). The key label keeps its value whatever `labels` says.
pub fn with_metadata(
    mut secret: Secret,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Secret {
    let meta = &mut secret.metadata;
    if !labels.is_empty() {
        let all = meta.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in labels {
            all.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    if !annotations.is_empty() {
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    secret
}

/// Parsed keys, cached per `(origin, version)` so unchanged Secrets are not parsed again.
#[derive(Default)]
pub struct ParseCache {
    entries: HashMap<(String, String), Result<KeyPair, Rejection>>,
}

/// How [`build_ring`] chooses the sealing key.
#[derive(Debug, Clone, Copy)]
pub enum SealingChoice<'a> {
    /// No key source: the newest unexpired key seals (Bitnami's rule).
    Newest,
    /// A key source (`--key-source`): only the ring view's active key seals, once a loaded key
    /// proves to be it (its material hashes to the kid). While it cannot seal, `last` (the
    /// last active key verified by this process) or the view's last verified active key
    /// seals instead; else nothing does. Never the newest key, never a key that was not
    /// activated.
    Ring {
        /// The ring view (`None`: no index read yet).
        view: Option<&'a RingView>,
        /// The last active key this process verified.
        last: Option<&'a Kid>,
    },
}

/// What sealing looks like with a key source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingSealing {
    /// No key source.
    NotApplicable,
    /// The ring view's active key seals.
    Active(Kid),
    /// The active key cannot seal (`problem`); the last verified active key `kid` does.
    LastVerified {
        /// The key that seals.
        kid: Kid,
        /// Why the active key does not.
        problem: String,
    },
    /// Nothing seals, for this reason.
    Refused(String),
}

/// One loaded key and what the key Secrets holding it say (several Secrets may hold one key).
#[derive(Debug, Clone)]
pub struct LoadedCopies {
    /// The key's kid.
    pub kid: Kid,
    /// The key's fingerprint in the ring.
    pub id: KeyId,
    /// The `kseal.dev/ring` annotation of each kseal-made copy (a mirror), `None` where a
    /// mirror has none; empty when only the cluster's own key Secrets hold it.
    pub mirror_rings: Vec<Option<String>>,
}

/// What [`build_ring`] produced.
#[derive(Debug)]
pub struct Built {
    /// The ring.
    pub ring: KeyRing,
    /// Keys rejected for the first time (not reported before), with why.
    pub newly_rejected: Vec<(usize, Rejection)>,
    /// Usable keys that are copies of a fleet ring's keys: labelled as mirrors and, with a
    /// ring view, holding a key of the view (proven by material, not by labels). They make a
    /// restart during a key-source outage ready to open; what seals is decided by the view.
    pub mirrored: usize,
    /// With a key source, which key seals and why.
    pub ring_sealing: RingSealing,
    /// Loaded keys by kid.
    pub by_kid: HashMap<Kid, KeyId>,
    /// Every loaded key, with what its key Secrets say of it.
    pub loaded: Vec<LoadedCopies>,
}

/// Parses `materials` into a ring ordered per `order`, the sealing key chosen per `choice`.
/// Rejected keys are skipped.
pub fn build_ring(
    materials: &[KeyMaterial],
    order: KeyOrder,
    cache: &mut ParseCache,
    choice: SealingChoice<'_>,
) -> Built {
    let mut ring = KeyRing::new();
    let mut newly_rejected = Vec::new();
    let mut seen = HashMap::with_capacity(materials.len());
    let now = SystemTime::now();
    let view = match choice {
        SealingChoice::Ring { view, .. } => view,
        SealingChoice::Newest => None,
    };
    // Loaded keys by kid (the SHA-256 of the public key: what the ring's index lists).
    let mut by_kid: HashMap<Kid, KeyId> = HashMap::new();
    let mut mirrored = 0;
    let mut loaded = Vec::new();
    for (index, material) in materials.iter().enumerate() {
        let key = (material.origin.clone(), material.version.clone());
        let parsed = match cache.entries.remove(&key) {
            Some(parsed) => parsed,
            None => {
                let parsed = match &material.pem {
                    Ok(pem) => KeyPair::from_pem(&pem.private_key, &pem.certificate)
                        .map_err(|e| Rejection::from_keys_error(&e)),
                    Err(r) => Err(r.clone()),
                };
                if let Err(r) = &parsed {
                    newly_rejected.push((index, r.clone()));
                }
                parsed
            }
        };
        if let Ok(pair) = &parsed {
            let kid = Kid::of(pair.public_key());
            // Without a view yet (a restart during a key-source outage, with no anchor pinned to
            // verify the ring-state Secret against), a labelled mirror counts for readiness:
            // it opens, and nothing seals until the ring is read.
            if material.mirror && view.is_none_or(|v| v.contains(&kid)) {
                mirrored += 1;
            }
            // Every copy counts: the oldest must not decide alone what a key is.
            let at = match loaded
                .iter()
                .position(|l: &LoadedCopies| l.id == *pair.id())
            {
                Some(at) => at,
                None => {
                    loaded.push(LoadedCopies {
                        kid: kid.clone(),
                        id: pair.id().clone(),
                        mirror_rings: Vec::new(),
                    });
                    loaded.len() - 1
                }
            };
            if material.mirror {
                loaded[at].mirror_rings.push(material.ring.clone());
            }
            by_kid.insert(kid, pair.id().clone());
            let pair = match (order, material.created) {
                (KeyOrder::SecretCreationTimestamp, Some(created)) => {
                    pair.clone().with_order_time(created)
                }
                _ => pair.clone(),
            };
            ring.insert(pair);
        }
        seen.insert(key, parsed);
    }
    cache.entries = seen;
    let ring_sealing = match choice {
        SealingChoice::Newest => {
            let unexpired = ring
                .keys()
                .find(|k| !k.certificate().is_expired_at(now))
                .map(|k| k.id().clone());
            if let Some(id) = unexpired {
                ring.set_sealing_key(&id);
            }
            RingSealing::NotApplicable
        }
        SealingChoice::Ring { view, last } => choose_ring_key(&mut ring, &by_kid, view, last, now),
    };
    Built {
        ring,
        newly_rejected,
        mirrored,
        ring_sealing,
        by_kid,
        loaded,
    }
}

/// The ring view's active key seals if a loaded key proves to be it and it has not expired;
/// else the last verified active key; else nothing (see [`SealingChoice::Ring`]).
fn choose_ring_key(
    ring: &mut KeyRing,
    by_kid: &HashMap<Kid, KeyId>,
    view: Option<&RingView>,
    last: Option<&Kid>,
    now: SystemTime,
) -> RingSealing {
    let Some(view) = view else {
        ring.disable_sealing();
        return RingSealing::Refused(
            "the fleet ring has not been read yet (no verified index: none read from the store, and no ring-state Secret verified against a pinned anchor)".to_owned(),
        );
    };
    // Whatever seals, the ring's own keys are tried first and key the data MACs.
    let first_of_ring = ring
        .keys()
        .find(|k| view.contains(&Kid::of(k.public_key())))
        .map(|k| k.id().clone());
    if let Some(id) = first_of_ring {
        ring.set_sealing_key(&id);
    }
    let usable = |ring: &KeyRing, kid: &Kid| {
        by_kid
            .get(kid)
            .filter(|id| {
                ring.get(id)
                    .is_some_and(|k| !k.certificate().is_expired_at(now))
            })
            .cloned()
    };
    let problem = match &view.active {
        None => "the ring's index names no active key".to_owned(),
        Some(active) => match by_kid.get(active) {
            Some(id) => {
                ring.set_sealing_key(id);
                if usable(ring, active).is_some() {
                    return RingSealing::Active(active.clone());
                }
                // An expired active key never seals, and no older key replaces it.
                ring.disable_sealing();
                return RingSealing::Refused(format!(
                    "the ring's active key {} has an expired certificate (it still opens); rotate the ring (kseal keys rotate)",
                    active.short()
                ));
            }
            None => format!(
                "the ring's active key {} is not mirrored in this cluster (its key secret is missing or unreadable, or its mirror could not be written)",
                active.short()
            ),
        },
    };
    // Only a key of the verified index may stand in: `last-active` and `kids-ever` come from
    // the ring-state Secret, which whoever can update Secrets here can rewrite (with a key
    // Secret of their own, that would make their key seal), and a key that left the ring
    // never seals again.
    let fallback = [last, view.last_active.as_ref()]
        .into_iter()
        .flatten()
        .filter(|kid| view.contains(kid))
        .find_map(|kid| usable(ring, kid).map(|id| (kid.clone(), id)));
    match fallback {
        Some((kid, id)) => {
            ring.set_sealing_key(&id);
            RingSealing::LastVerified {
                problem: format!(
                    "{problem}; the last verified active key {} keeps sealing",
                    kid.short()
                ),
                kid,
            }
        }
        None => {
            ring.disable_sealing();
            RingSealing::Refused(format!(
                "{problem}, and no active key of the ring was verified before"
            ))
        }
    }
}

impl RingSealing {
    /// Why the ring's active key does not seal, for readiness (`None`: it seals).
    fn problem(&self) -> Option<SealingProblem> {
        match self {
            RingSealing::NotApplicable | RingSealing::Active(_) => None,
            RingSealing::LastVerified { problem, .. } => Some(SealingProblem {
                message: problem.clone(),
                sealing: true,
            }),
            RingSealing::Refused(reason) => Some(SealingProblem {
                message: reason.clone(),
                sealing: false,
            }),
        }
    }
}

/// Publishes why the fleet ring's active key does not seal (or that it does) into readiness
/// and `kseal_key_source_active_unavailable`, logging each change.
fn publish_ring_sealing(state: &State, sealing: &RingSealing) {
    let problem = sealing.problem();
    if problem != state.readiness.sealing_problem() {
        match &problem {
            Some(p) => tracing::warn!(sealing = p.sealing, "{}", p.message),
            None => tracing::info!("the fleet ring's active key seals"),
        }
    }
    state
        .metrics
        .key_source_active_unavailable
        .set(i64::from(problem.is_some()));
    state.readiness.set_sealing_problem(problem);
}

/// A further ring's sealing state, into its own readiness (the first ring's goes through
/// [`publish_ring_sealing`], with the gauge).
fn publish_more_ring_sealing(state: &State, name: &str, sealing: &RingSealing) {
    let problem = sealing.problem();
    if problem != state.readiness.sealing_problem() {
        match &problem {
            Some(p) => tracing::warn!(
                ring = name,
                sealing = p.sealing,
                "ring {name}: {}",
                p.message
            ),
            None => tracing::info!(ring = name, "ring {name}: its active key seals"),
        }
    }
    state.readiness.set_sealing_problem(problem);
}

/// Publishes `ring` into `state` and refreshes the key metrics.
pub fn publish(state: &State, ring: KeyRing) -> bool {
    publish_with(state, ring, None)
}

/// [`publish`], with the claims of bound rings published together with the ring.
pub fn publish_with(state: &State, ring: KeyRing, claims: Option<binding::Claims>) -> bool {
    let len = ring.len();
    let ids: Vec<String> = ring.keys().map(|k| k.id().to_string()).collect();
    let sealing = ring.sealing_key().map(|k| k.id().to_string());
    // Readers that see the new ring also see the readiness it implies: not ready is published
    // before an empty ring, ready after a non-empty one.
    let ready = |ready: bool| {
        state
            .readiness
            .keys_loaded
            .store(ready, std::sync::atomic::Ordering::Release);
    };
    if len == 0 {
        ready(false);
    }
    let changed = state.keys.replace_with(ring, claims);
    if len > 0 {
        ready(true);
    }
    state
        .metrics
        .keys_loaded
        .set(i64::try_from(len).unwrap_or(i64::MAX));
    refresh_age(state);
    if changed {
        tracing::info!(keys = len, sealing_key = ?sealing, fingerprints = ?ids, "key ring updated");
    }
    changed
}

fn refresh_age(state: &State) {
    let ring = state.keys.ring();
    let age = ring
        .sealing_key()
        .and_then(|k| SystemTime::now().duration_since(k.order_time()).ok())
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    state.metrics.sealing_key_age_seconds.set(age);
}

/// Asks the key loader for a new key now, whatever the schedule (what SIGUSR1 does). Requests
/// that arrive while one is waiting are merged.
#[derive(Clone, Debug)]
pub struct KeyRequester(mpsc::Sender<()>);

impl KeyRequester {
    /// Requests one key generation (best effort: nothing happens once the loader is gone).
    pub fn request(&self) {
        // Full: a request is already waiting, and this one merges into it.
        let _ = self.0.try_send(());
    }
}

/// The key loader's end of [`KeyRequester`].
#[derive(Debug)]
pub struct KeyRequests(mpsc::Receiver<()>);

impl KeyRequests {
    /// A pair: the requester for whoever asks (the SIGUSR1 handler), the requests for
    /// [`run`].
    pub fn channel() -> (KeyRequester, Self) {
        let (tx, rx) = mpsc::channel(1);
        (KeyRequester(tx), Self(rx))
    }
}

/// A key this replica generated, until it shows up in the ring (or the grace period ends).
struct Pending {
    /// The key's fingerprint; `None` when generating or storing it failed.
    id: Option<KeyId>,
    since: tokio::time::Instant,
}

/// Runs the key loader until `shutdown` turns true: publishes every snapshot of `source` into
/// `state`, reports rejected keys, and (when `config.generate_key_if_missing`, and only on the
/// leader) generates a key when none exists, when [`renewal::due`] says so, and on each of
/// `requests`. Nothing is generated before the first snapshot.
pub async fn run(
    mut source: impl KeySource,
    state: State,
    config: Arc<Config>,
    mut requests: KeyRequests,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut snapshots = source.snapshots();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut loader = Loader {
        state: &state,
        config: &config,
        cache: ParseCache::default(),
        policy: config.key_renewal.for_process(SystemTime::now()),
        pending: None,
        key_source: config.key_source.is_some(),
        last_verified: None,
        last_verified_more: Vec::new(),
        shared_keys_warned: Vec::new(),
        leftovers_warned: Vec::new(),
        loaded: false,
    };
    let mut requests_open = true;
    let mut views = state.ring_view.subscribe();
    // The further rings' views: a change of any rebuilds (their claims and sealing keys).
    let mut more_views =
        futures::stream::select_all(state.ring_states().into_iter().skip(1).map(|(_, s)| {
            futures::stream::unfold(s.ring_view.subscribe(), |mut rx| async move {
                rx.changed().await.ok().map(|()| ((), rx))
            })
            .boxed()
        }));
    let mut materials: Option<Vec<KeyMaterial>> = None;
    loop {
        let mut requested = false;
        let mut ring_changed = false;
        let mut rebuild = false;
        tokio::select! {
            snapshot = snapshots.next() => {
                let Some(snapshot) = snapshot else { break };
                materials = Some(snapshot);
                rebuild = true;
            }
            Ok(()) = views.changed() => rebuild = true,
            Some(_) = more_views.next() => rebuild = true,
            request = requests.0.recv(), if requests_open => match request {
                Some(()) => requested = true,
                None => requests_open = false,
            },
            _ = tick.tick() => refresh_age(&state),
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    break;
                }
            }
        }
        if rebuild && let Some(materials) = &materials {
            let view = views.borrow_and_update().clone();
            ring_changed = loader.rebuild(&source, materials, view.as_deref()).await;
        }
        loader.generate(&source, requested, ring_changed).await;
    }
}

/// The key loader's memory between events ([`run`]).
struct Loader<'a> {
    state: &'a State,
    config: &'a Config,
    cache: ParseCache,
    /// The renewal policy of this process (its cutoff spent once a key was generated for it).
    policy: renewal::Renewal,
    /// A key generated here, until it shows up in the ring (or its grace ends).
    pending: Option<Pending>,
    /// `--key-source`: the fleet ring view chooses the sealing key.
    key_source: bool,
    /// The last active key of the fleet ring verified here (loaded, material checked): it
    /// keeps sealing while a newer active key cannot.
    last_verified: Option<Kid>,
    /// The same for each further `--key-source` ring.
    last_verified_more: Vec<Option<Kid>>,
    /// The keys listed by several rings, as last warned about.
    shared_keys_warned: Vec<String>,
    /// The unconfigured rings whose mirrors were last warned about.
    leftovers_warned: Vec<String>,
    /// Whether the first snapshot has been published.
    loaded: bool,
}

impl Loader<'_> {
    /// Builds the ring from `materials` (with a key source, the sealing key as `view` names
    /// it), reports keys rejected for the first time, and publishes the ring and its sealing
    /// state. Returns whether the published ring changed.
    async fn rebuild(
        &mut self,
        source: &impl KeySource,
        materials: &[KeyMaterial],
        view: Option<&RingView>,
    ) -> bool {
        let state = self.state;
        let choice = if self.key_source {
            SealingChoice::Ring {
                view,
                last: self.last_verified.as_ref(),
            }
        } else {
            SealingChoice::Newest
        };
        let built = build_ring(materials, self.config.key_order, &mut self.cache, choice);
        for (index, rejection) in &built.newly_rejected {
            let material = &materials[*index];
            tracing::warn!(
                key = %material.origin,
                reason = rejection.reason,
                "skipping unusable key: {}",
                rejection.message
            );
            state
                .metrics
                .key_load_errors
                .get_or_create(&crate::metrics::KeyErrorLabels {
                    reason: rejection.reason.to_owned(),
                })
                .inc();
            if state.is_leader() {
                source.report(material, rejection).await;
            }
        }
        if built.mirrored > 0 && state.rings.names().len() < 2 {
            // A proven mirror lets a restart during a key-source outage serve at once (with
            // several rings, each ring's own mirrors count for it: `Loader::claims`).
            state.readiness.key_source_mirror_found();
        }
        if self.key_source {
            if let RingSealing::Active(kid) = &built.ring_sealing {
                self.last_verified = Some(kid.clone());
            }
            publish_ring_sealing(state, &built.ring_sealing);
        }
        let claims = self.claims(&built, view);
        let ring_changed = publish_with(state, built.ring, claims);
        self.loaded = true;
        ring_changed
    }

    /// With several `--key-source` rings or a bound ring: which ring each loaded key belongs
    /// to and each ring's sealing key ([`binding::Claims`]); each further ring's sealing
    /// problem and found mirrors go to its own readiness. `None` for a single unbound ring
    /// (every key opens everywhere, as always).
    fn claims(&mut self, built: &Built, view: Option<&RingView>) -> Option<binding::Claims> {
        let rings = self.state.ring_states();
        if rings.len() < 2 && self.config.ring_bindings.is_empty() {
            return None;
        }
        let views: Vec<Option<Arc<RingView>>> = rings
            .iter()
            .enumerate()
            .map(|(i, (_, s))| {
                if i == 0 {
                    view.map(|v| Arc::new(v.clone()))
                } else {
                    s.ring_view.current()
                }
            })
            .collect();
        self.last_verified_more.resize(rings.len(), None);
        let now = SystemTime::now();
        let mut sealing = Vec::with_capacity(rings.len());
        for (i, (name, ring_state)) in rings.iter().enumerate() {
            // A fresh ring of the same keys: the first ring's choice (sealing disabled, its
            // preferred key) must not carry over.
            let mut ring: KeyRing = built.ring.keys().cloned().collect();
            // Only this ring's own mirrors may seal for it: another ring's key that this
            // ring's index names as active (its seeder may be a tenant) does not.
            let own: HashMap<Kid, KeyId> = built
                .loaded
                .iter()
                .filter(|l| l.mirror_rings.iter().any(|r| r.as_deref() == Some(name)))
                .map(|l| (l.kid.clone(), l.id.clone()))
                .collect();
            let chosen = choose_ring_key(
                &mut ring,
                &own,
                views[i].as_deref(),
                self.last_verified_more[i].as_ref(),
                now,
            );
            if let RingSealing::Active(kid) = &chosen {
                self.last_verified_more[i] = Some(kid.clone());
            }
            // The first ring's readiness follows `build_ring`'s choice (published already).
            if i > 0 {
                publish_more_ring_sealing(ring_state, name, &chosen);
            }
            sealing.push(match &chosen {
                RingSealing::Refused(why) => Err(why.clone()),
                _ => ring
                    .sealing_key()
                    .map(|k| k.id().clone())
                    .ok_or_else(|| "no key of the ring is loaded".to_owned()),
            });
        }
        let bound: Arc<[binding::BoundRing]> = rings
            .iter()
            .enumerate()
            .map(|(i, (name, _))| binding::BoundRing {
                name: name.clone(),
                binding: self.config.ring_bindings.get(name).cloned(),
                verified: views[i].is_some(),
            })
            .collect();
        let listed_by = |kid: &Kid| {
            views
                .iter()
                .enumerate()
                .filter(|(_, v)| v.as_ref().is_some_and(|v| v.lists(kid)))
                .fold(0u32, |mask, (i, _)| mask | (1 << i))
        };
        let position = |name: &str| rings.iter().position(|(n, _)| n == name);
        let loaded: Vec<binding::LoadedKey> = built
            .loaded
            .iter()
            .map(|l| binding::LoadedKey {
                id: l.id.clone(),
                listed_by: listed_by(&l.kid),
                mirror: !l.mirror_rings.is_empty(),
                named_rings: l
                    .mirror_rings
                    .iter()
                    .flatten()
                    .filter_map(|name| position(name))
                    .fold(0u32, |mask, i| mask | (1 << i)),
                names_other: l
                    .mirror_rings
                    .iter()
                    .any(|r| r.as_deref().and_then(position).is_none()),
            })
            .collect();
        // Mirrors of rings not configured here (left behind when a ring left the flags) open
        // nowhere while rings are bound: say so, they are better deleted.
        let leftovers: Vec<String> = built
            .loaded
            .iter()
            .flat_map(|l| l.mirror_rings.iter().flatten())
            .filter(|name| position(name).is_none())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if leftovers != self.leftovers_warned {
            if !leftovers.is_empty() {
                tracing::warn!(
                    rings = ?leftovers,
                    "key Secrets mirror rings this controller is not configured for: they open nowhere; delete them (kubectl delete secret -l kseal.dev/mirror=true after checking their kseal.dev/ring annotation)"
                );
            }
            self.leftovers_warned = leftovers;
        }
        // A proven mirror of a ring makes that ring usable during a store outage (readiness
        // only; which keys open where is the claims' business): one its verified view lists,
        // or, before its view, one whose annotation names it.
        for (i, (name, ring_state)) in rings.iter().enumerate() {
            let mirrored = built.loaded.iter().any(|l| match &views[i] {
                Some(view) => view.lists(&l.kid),
                None => l.mirror_rings.iter().any(|r| r.as_deref() == Some(name)),
            });
            if mirrored {
                ring_state.readiness.key_source_mirror_found();
            }
        }
        let claims = binding::Claims::build(bound, loaded, sealing);
        // A key listed by several rings opens only where all of them open: say so once per
        // change (a ring whose seeder lists another ring's kid narrows that key).
        let shared: Vec<String> = claims
            .shared_keys()
            .into_iter()
            .map(|(id, rings)| format!("{id} ({})", rings.join(", ")))
            .collect();
        if shared != self.shared_keys_warned {
            if !shared.is_empty() {
                tracing::warn!(
                    keys = ?shared,
                    "keys listed by more than one ring open only where every ring listing them opens"
                );
            }
            self.shared_keys_warned = shared;
        }
        Some(claims)
    }

    /// With in-cluster key generation on, generates and stores a key when one is requested or
    /// due ([`Loader::generation_reason`]); without it, only warns about a request.
    async fn generate(&mut self, source: &impl KeySource, requested: bool, ring_changed: bool) {
        if !self.config.generate_key_if_missing {
            if requested {
                tracing::warn!(
                    "key generation requested (SIGUSR1) but not done: in-cluster key generation is off; start the controller with --generate-key-if-missing=true"
                );
            }
            return;
        }
        let Some(reason) = self.generation_reason(requested, ring_changed) else {
            return;
        };
        let id = generate_and_store(source, self.state, self.config, reason).await;
        if reason == Reason::Cutoff && id.is_some() {
            // One key per process for the cutoff, whatever the clocks say: with
            // --key-order-priority=SecretCreationTimestamp the new key's time comes
            // from the API server's clock.
            self.policy.cutoff = None;
        }
        self.pending = Some(Pending {
            id,
            since: tokio::time::Instant::now(),
        });
    }

    /// Why a key is to be generated now, if one is: a request (on the leader only), else a
    /// due renewal once the first snapshot is published, on the leader, and not while a key
    /// generated here is within its grace. Forgets the pending key once the ring holds it and
    /// logs the next renewal when the ring changed.
    fn generation_reason(&mut self, requested: bool, ring_changed: bool) -> Option<Reason> {
        let state = self.state;
        let ring = state.keys.ring();
        if self
            .pending
            .as_ref()
            .and_then(|p| p.id.as_ref())
            .is_some_and(|id| ring.get(id).is_some())
        {
            self.pending = None;
        }
        let newest = ring.sealing_key().map(KeyPair::order_time);
        let now = SystemTime::now();
        let scheduled = renewal::due(newest, &self.policy, now);
        if ring_changed
            && let Due::In(left) = scheduled
            && let Some(due) = now
                .checked_add(left)
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
        {
            tracing::info!(%due, "next key renewal scheduled");
        }
        if requested {
            if state.is_leader() {
                Some(Reason::Requested)
            } else {
                tracing::warn!(
                    "key generation requested (SIGUSR1) but not done: this replica is not the leader; signal the pod that holds the leader Lease"
                );
                None
            }
        } else {
            match scheduled {
                Due::Now(reason)
                    if self.loaded
                        && state.is_leader()
                        && self
                            .pending
                            .as_ref()
                            .is_none_or(|p| p.since.elapsed() > GENERATION_GRACE) =>
                {
                    Some(reason)
                }
                _ => None,
            }
        }
    }
}

/// Generates a key and stores it through `source` unless this replica lost the lead
/// meanwhile. Returns the new key's fingerprint once stored. Logs the outcome (fingerprint,
/// where it was stored and the public certificate, never the private key).
async fn generate_and_store(
    source: &impl KeySource,
    state: &State,
    config: &Config,
    reason: Reason,
) -> Option<KeyId> {
    let fence = state.leadership.fence()?;
    tracing::info!(reason = reason.as_str(), "generating a new sealing key");
    let pair = match generate(config).await {
        Ok(pair) => pair,
        Err(e) => {
            tracing::error!(error = %crate::error_chain(&e), "failed to generate a key");
            return None;
        }
    };
    // Generation takes seconds: the leadership may have ended (or changed term) meanwhile.
    if let Err(e) = fence.check() {
        state.metrics.count_fenced("key");
        tracing::warn!(reason = %e, "no longer the leader: the generated key is discarded");
        return None;
    }
    match source.store(&pair).await {
        Ok(at) => {
            state.metrics.count_generated_key(reason);
            tracing::info!(
                key = %at,
                fingerprint = %pair.id(),
                reason = reason.as_str(),
                certificate = %pair.certificate().to_pem(),
                "generated a new sealing key"
            );
            Some(pair.id().clone())
        }
        Err(e) => {
            tracing::error!(error = %crate::error_chain(&e), "failed to store the generated key");
            None
        }
    }
}

/// Generates a key pair per `config` off the async threads (RSA generation takes seconds).
pub async fn generate(config: &Config) -> Result<KeyPair, crate::Error> {
    let size = config.key_size;
    let options = CertificateOptions {
        common_name: config.my_cn.clone(),
        not_before: SystemTime::now(),
        validity: config.key_ttl,
    };
    tokio::task::spawn_blocking(move || KeyPair::generate(size, &options))
        .await
        .map_err(|_| crate::Error::KeyGeneration)?
        .map_err(|_| crate::Error::KeyGeneration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kseal_keys::KeySize;

    fn pair() -> KeyPair {
        // Test-only 2048-bit key.
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap()
    }

    fn material(name: &str, pair: &KeyPair, version: &str) -> KeyMaterial {
        let mut secret = key_secret("sealed-secrets-key", "ks", pair).unwrap();
        secret.metadata.name = Some(name.to_owned());
        secret.metadata.resource_version = Some(version.to_owned());
        material_from_secret(&secret)
    }

    #[test]
    fn bad_keys_are_skipped_and_reported_once() {
        let good = pair();
        let other = pair();
        let mut mismatched = material("b", &good, "1");
        if let Ok(pem) = &mut mismatched.pem {
            pem.certificate = other.certificate().to_pem();
        }
        let mut bad_pem = material("c", &good, "1");
        if let Ok(pem) = &mut bad_pem.pem {
            pem.private_key = Zeroizing::new(
                "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n".into(),
            );
        }
        let materials = vec![material("a", &good, "1"), mismatched, bad_pem];
        let mut cache = ParseCache::default();
        let built = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut cache,
            SealingChoice::Newest,
        );
        assert_eq!(built.ring.len(), 1);
        let reasons: Vec<_> = built.newly_rejected.iter().map(|r| r.1.reason).collect();
        assert_eq!(reasons, ["mismatch", "pem"]);
        let again = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut cache,
            SealingChoice::Newest,
        );
        assert_eq!(again.ring.len(), 1);
        assert!(again.newly_rejected.is_empty());
    }

    #[test]
    fn secret_creation_order_picks_the_newest_secret_as_sealing_key() {
        let older_cert = pair();
        let newer_cert = pair();
        let mut a = material("a", &newer_cert, "1");
        let mut b = material("b", &older_cert, "1");
        a.created = Some(SystemTime::UNIX_EPOCH);
        b.created = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10));
        let mut cache = ParseCache::default();
        let built = build_ring(
            &[a, b],
            KeyOrder::SecretCreationTimestamp,
            &mut cache,
            SealingChoice::Newest,
        );
        assert_eq!(
            built.ring.sealing_key().map(|k| k.id().clone()),
            Some(older_cert.id().clone())
        );
    }

    #[test]
    fn with_a_ring_view_only_its_active_key_seals_never_the_newest() {
        use std::collections::BTreeSet;
        // Test-only 2048-bit keys: `active` a day older than `newer`.
        let active = KeyPair::generate(
            KeySize::Rsa2048,
            &CertificateOptions {
                not_before: SystemTime::now() - Duration::from_secs(86_400),
                ..CertificateOptions::default()
            },
        )
        .unwrap();
        let newer = pair();
        let kid = |p: &KeyPair| Kid::of(p.public_key());
        let mut forged = material("forged", &newer, "1");
        forged.mirror = true;
        let materials = vec![material("a", &active, "1"), forged];
        let mut index = kseal_keystore::Index::empty("r", SystemTime::now());
        for p in [&active, &newer] {
            index
                .keys
                .push(kseal_keystore::IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        }
        let build = |view: Option<&RingView>, last: Option<&Kid>| {
            build_ring(
                &materials,
                KeyOrder::CertNotBefore,
                &mut ParseCache::default(),
                SealingChoice::Ring { view, last },
            )
        };
        let sealing = |b: &Built| b.ring.sealing_key().map(|k| k.id().clone());

        let no_view = build(None, None);
        assert_eq!(
            sealing(&no_view),
            None,
            "nothing seals before the ring is read"
        );
        assert_eq!(no_view.ring.len(), 2, "every key opens");

        index.active = Some(kid(&active));
        let view = RingView::new(&index, &BTreeSet::new(), None);
        let built = build(Some(&view), None);
        assert_eq!(sealing(&built), Some(active.id().clone()));
        assert_eq!(built.ring_sealing, RingSealing::Active(kid(&active)));
        assert_eq!(built.mirrored, 1, "a labelled key of the ring counts");

        // The active key is not loaded: the last verified one seals, else nothing.
        let other = pair();
        index
            .keys
            .push(kseal_keystore::IndexEntry::new(other.certificate(), SystemTime::now()).unwrap());
        index.active = Some(kid(&other));
        let view = RingView::new(&index, &BTreeSet::new(), None);
        let kept = build(Some(&view), Some(&kid(&active)));
        assert_eq!(sealing(&kept), Some(active.id().clone()));
        assert!(matches!(
            kept.ring_sealing,
            RingSealing::LastVerified { .. }
        ));
        let refused = build(Some(&view), None);
        assert_eq!(sealing(&refused), None);
        assert!(matches!(refused.ring_sealing, RingSealing::Refused(_)));
        assert!(
            refused.ring.preferred_key().is_some(),
            "data MACs still have a key"
        );

        // Without a key source the newest key seals, as before.
        let plain = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Newest,
        );
        assert_eq!(sealing(&plain), Some(newer.id().clone()));
    }

    /// Issue 35, attack 4: whoever can update the ring-state Secret (and create one labelled
    /// key Secret) names their own key as `last-active` and in `kids-ever`. While the ring's
    /// active key is not mirrored, only a key of the verified index may stand in: theirs
    /// never seals.
    #[test]
    fn a_forged_last_active_key_never_seals() {
        let kid = |p: &KeyPair| Kid::of(p.public_key());
        let (ring_key, pending, evil) = (pair(), pair(), pair());
        let materials = vec![
            material("ring", &ring_key, "1"),
            material("evil", &evil, "1"),
        ];
        let mut index = kseal_keystore::Index::empty("r", SystemTime::now());
        for p in [&ring_key, &pending] {
            index
                .keys
                .push(kseal_keystore::IndexEntry::new(p.certificate(), SystemTime::now()).unwrap());
        }
        // The active key is not mirrored here: a stand-in is needed.
        index.active = Some(kid(&pending));
        let forged_ever = std::collections::BTreeSet::from([kid(&evil)]);
        let view = RingView::new(&index, &forged_ever, Some(kid(&evil)));
        for last in [None, Some(kid(&evil))] {
            let built = build_ring(
                &materials,
                KeyOrder::CertNotBefore,
                &mut ParseCache::default(),
                SealingChoice::Ring {
                    view: Some(&view),
                    last: last.as_ref(),
                },
            );
            assert_eq!(built.ring.sealing_key().map(|k| k.id().clone()), None);
            assert!(matches!(built.ring_sealing, RingSealing::Refused(_)));
        }
        // A key of the index that was active before still stands in.
        let view = RingView::new(&index, &forged_ever, Some(kid(&ring_key)));
        let built = build_ring(
            &materials,
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Ring {
                view: Some(&view),
                last: None,
            },
        );
        assert_eq!(
            built.ring.sealing_key().map(|k| k.id().clone()),
            Some(ring_key.id().clone())
        );
    }

    #[test]
    fn pkcs8_keys_load_like_pkcs1_keys() {
        let p = pair();
        let mut m = material("a", &p, "1");
        if let Ok(pem) = &mut m.pem {
            pem.private_key = p.private_key().to_pkcs8_pem();
        }
        let built = build_ring(
            &[m],
            KeyOrder::CertNotBefore,
            &mut ParseCache::default(),
            SealingChoice::Newest,
        );
        assert_eq!(built.ring.len(), 1);
        assert!(built.newly_rejected.is_empty());
    }

    #[test]
    fn missing_items_are_rejected_without_parsing() {
        let mut secret = key_secret("p", "ks", &pair()).unwrap();
        secret.data.as_mut().unwrap().remove(PRIVATE_KEY_ITEM);
        let m = material_from_secret(&secret);
        assert_eq!(m.pem.err().map(|r| r.reason), Some("missing_data"));
    }

    #[test]
    fn only_an_active_or_missing_label_enables_the_legacy_key() {
        let mut secret = key_secret("p", "ks", &pair()).unwrap();
        assert!(is_active_or_unlabelled(&secret));
        secret.metadata.labels = None;
        assert!(is_active_or_unlabelled(&secret));
        secret.metadata.labels = Some(BTreeMap::from([(
            SEALING_KEY_LABEL.to_owned(),
            "compromised".to_owned(),
        )]));
        assert!(!is_active_or_unlabelled(&secret));
    }

    #[test]
    fn extra_metadata_is_added_but_never_replaces_the_key_label() {
        let s = key_secret("p", "ks", &pair()).unwrap();
        let labels = BTreeMap::from([
            ("team".to_owned(), "platform".to_owned()),
            (SEALING_KEY_LABEL.to_owned(), "compromised".to_owned()),
        ]);
        let annotations = BTreeMap::from([("owner".to_owned(), "platform team".to_owned())]);
        let s = with_metadata(s, &labels, &annotations);
        let got = s.metadata.labels.unwrap();
        assert_eq!(got[SEALING_KEY_LABEL], SEALING_KEY_LABEL_ACTIVE);
        assert_eq!(got["team"], "platform");
        assert_eq!(s.metadata.annotations.unwrap()["owner"], "platform team");
        let plain = with_metadata(
            key_secret("p", "ks", &pair()).unwrap(),
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        assert_eq!(plain.metadata.labels.unwrap().len(), 1);
        assert!(plain.metadata.annotations.is_none());
    }

    #[test]
    fn generated_key_secret_has_bitnami_shape() {
        let p = pair();
        let s = key_secret("sealed-secrets-key", "ks", &p).unwrap();
        assert_eq!(
            s.metadata.generate_name.as_deref(),
            Some("sealed-secrets-key")
        );
        assert_eq!(s.type_.as_deref(), Some(KEY_SECRET_TYPE));
        assert_eq!(
            s.labels().get(SEALING_KEY_LABEL).map(String::as_str),
            Some("active")
        );
        let data = s.data.unwrap();
        assert!(
            data[PRIVATE_KEY_ITEM]
                .0
                .starts_with(b"-----BEGIN RSA PRIVATE KEY-----")
        );
        assert!(
            data[CERTIFICATE_ITEM]
                .0
                .starts_with(b"-----BEGIN CERTIFICATE-----")
        );
    }
}
