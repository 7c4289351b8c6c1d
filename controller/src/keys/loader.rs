//! The key loader ([`run`]): publishes each snapshot of a [`KeySource`] into the state with
//! its sealing choice and, with several or bound rings, the claims of each ring
//! ([`binding::Claims`]); and, with `--generate-key-if-missing=true`, generates keys on the
//! leader when none exists, when a renewal is due and on each [`KeyRequester::request`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use kseal_keys::{CertificateOptions, KeyId, KeyPair, KeyRing};
use kseal_keystore::Kid;
use tokio::sync::{mpsc, watch};

use super::renewal::{self, Due, Reason};
use super::sealing::{
    Built, ParseCache, RingSealing, SealingChoice, build_ring, choose_ring_key,
    publish_more_ring_sealing, publish_ring_sealing,
};
use super::{KeyMaterial, KeySource, binding, publish_with, refresh_age};
use crate::config::Config;
use crate::keys::ringview::RingView;
use crate::state::State;

/// How often the loader re-checks generation and refreshes the key-age gauge.
const TICK: Duration = Duration::from_secs(2);
/// How long to wait for a generated key to show up in the ring before generating again (and
/// how long to wait after a failed generation before retrying).
const GENERATION_GRACE: Duration = Duration::from_secs(60);

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
        let sealing = self.rings_sealing(built, &rings, &views);
        let bound: Arc<[binding::BoundRing]> = rings
            .iter()
            .enumerate()
            .map(|(i, (name, _))| binding::BoundRing {
                name: name.clone(),
                binding: self.config.ring_bindings.get(name).cloned(),
                verified: views[i].is_some(),
            })
            .collect();
        let loaded = loaded_keys(built, &rings, &views);
        self.warn_leftovers(built, &rings);
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

    /// Each ring's sealing key (or why none seals) for [`Loader::claims`], chosen among the
    /// ring's own mirrors per its view (`views`, in the order of `rings`); each further
    /// ring's sealing state goes to its own readiness.
    fn rings_sealing(
        &mut self,
        built: &Built,
        rings: &[(String, State)],
        views: &[Option<Arc<RingView>>],
    ) -> Vec<Result<KeyId, String>> {
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
        sealing
    }

    /// Warns once per change about key Secrets that mirror rings not configured here.
    fn warn_leftovers(&mut self, built: &Built, rings: &[(String, State)]) {
        let position = |name: &str| rings.iter().position(|(n, _)| n == name);
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

/// Every loaded key as [`binding::Claims`] sees it: the rings (in the order of `rings`)
/// whose verified view (`views`) lists it, and the rings its mirrors' annotations name.
fn loaded_keys(
    built: &Built,
    rings: &[(String, State)],
    views: &[Option<Arc<RingView>>],
) -> Vec<binding::LoadedKey> {
    let listed_by = |kid: &Kid| {
        views
            .iter()
            .enumerate()
            .filter(|(_, v)| v.as_ref().is_some_and(|v| v.lists(kid)))
            .fold(0u32, |mask, (i, _)| mask | (1 << i))
    };
    let position = |name: &str| rings.iter().position(|(n, _)| n == name);
    built
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
        .collect()
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
