//! The fleet acknowledgement: the leader reports what this cluster holds of the key ring.
//!
//! With `--key-source`, the leader writes this cluster's [`Ack`] into the ring's
//! acknowledgement store ([`FleetStore`]: SSM Parameter Store `/kseal/<ring>/fleet/<cluster>`
//! for a Secrets Manager ring, `<ring dir>/fleet/<cluster>.json` for a directory ring): the
//! ring and anchor it trusts, the index version it holds, the ring's kids it holds, the kid it
//! seals with, SealedSecrets per kid, its version and its last successful sync. `kseal fleet
//! status` reads every cluster's record.
//!
//! It writes only when what it reports changes (index version, anchor, kids held, sealing kid,
//! object counts in powers of two, so that a few more objects do not cause a write) and once a
//! heartbeat (a day, ±10 %) when nothing does; never per poll. A restarted controller reads
//! its own record first and writes nothing when that still says the same and is fresh. A
//! fleet shares one Parameter Store throughput quota (40 TPS per account and Region), so the
//! first look after a start waits a random part of one key-source interval, and a look after
//! a change a random part of the check period (a minute): a thousand clusters restarting or
//! reading a new index at once do not call the store in the same second. The
//! cluster id is `--cluster-id`, else the UID of the `kube-system` namespace; without either,
//! acknowledgements are off (one warning).
//!
//! Objects per kid count the watched SealedSecrets by the keys that opened them: the
//! reconciler records, for each object it unseals while this writer runs, every key that
//! opened one of its values, with the object's UID and generation
//! (`reconcile::affinity::Opened`, in the shared [`State`]; only the leader unseals,
//! and only the leader counts). An object opened by two held keys counts once under each (it
//! needs both). An object not opened here as it is now falls back to the key its
//! `kseal.dev/sealing-key` annotation names: one changed since it was opened and not opened
//! again yet, and one not opened since this controller started or became leader (a restart
//! does not unseal objects whose Secrets are up to date). Objects whose openers are not held
//! any more, and objects not opened whose annotation is missing (kubeseal) or names no held
//! key, are `unattributed`. Each count forgets the opened keys of objects it no longer lists,
//! so the record holds at most the watched objects plus those opened since. The same
//! counts are the `kseal_objects_by_kid{ring,kid}` gauge, and a line of the metrics port's
//! `/readyz` detail (rendered by the HTTP server, at most 8 kids named).
//!
//! A failed write never touches readiness: it is logged, counted
//! (`kseal_fleet_ack_writes_total{outcome}`) and retried with backoff.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kseal_api::SealedSecret;
use kseal_keys::{KeyId, KeyRing};
use kseal_keystore::fleet::{ACK_SCHEMA, DEFAULT_HEARTBEAT, MAX_ACK_KIDS};
use kseal_keystore::{Ack, ClusterId, FleetStore, Kid};
use kube::Client;
use kube::api::{Api, ListParams};
use tokio::sync::watch;

pub(crate) mod metrics;

use metrics::Counts;
pub use metrics::{AckOutcomeLabels, FleetMetrics, RingKidLabels};

use crate::config::Namespaces;
use crate::reconcile::affinity::Opened;
use crate::timing::spread;
use crate::{Config, State};

/// When the writer looks, and how often it writes.
#[derive(Debug, Clone)]
pub struct Options {
    /// A record is written at least this often (±10 %) when nothing changes.
    pub heartbeat: Duration,
    /// How often the SealedSecrets are counted again (also whenever the keys change).
    pub recount: Duration,
    /// How often the writer compares what it holds with what it wrote, besides the wake-ups
    /// when the ring view, the keys or the leadership change (no store call unless it differs).
    pub check: Duration,
    /// The first retry after a failure; it doubles up to `retry_max`.
    pub retry_min: Duration,
    /// The longest wait between retries.
    pub retry_max: Duration,
}

impl Options {
    /// The writer's first look after a start (reading its own record, writing when it says
    /// something else) waits a random part of this: the recount period (the key-source
    /// interval), so a thousand clusters restarting at once read about one record every
    /// four seconds. Unsealing does not wait for it; only the record's freshness does.
    pub fn start_spread(&self) -> Duration {
        self.recount
    }

    /// A look after a change (new ring view, keys, leadership) waits a random part of this:
    /// the check period. A rotation's acknowledgement is then written within one key-source
    /// interval (±10 %) plus this.
    pub fn change_spread(&self) -> Duration {
        self.check
    }

    /// The defaults for `config`: a daily heartbeat, counting every key-source interval.
    pub fn for_config(config: &Config) -> Self {
        let interval = config
            .key_source
            .as_ref()
            .map_or(Duration::from_secs(3600), |s| s.interval);
        Self {
            heartbeat: DEFAULT_HEARTBEAT,
            recount: interval.max(Duration::from_secs(60)),
            check: Duration::from_secs(60),
            retry_min: Duration::from_secs(30),
            retry_max: Duration::from_secs(3600),
        }
    }
}

/// What a record says, less its times: two equal fingerprints need no write.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    ring: String,
    anchor: Option<Kid>,
    version: u64,
    held: Vec<Kid>,
    sealing: Option<Kid>,
    objects: BTreeMap<Kid, u32>,
    unattributed: u32,
}

/// `n` in powers of two: 0, 1, 2–3, 4–7, …; only a change of bucket is worth a write, and 0
/// (nothing left on a key) always is one.
fn bucket(n: u64) -> u32 {
    u64::BITS - n.leading_zeros()
}

impl Fingerprint {
    fn of(ack: &Ack) -> Self {
        Self {
            ring: ack.ring.clone(),
            anchor: ack.anchor.clone(),
            version: ack.index_version,
            held: ack.held.clone(),
            sealing: ack.sealing.clone(),
            objects: ack
                .objects
                .iter()
                .map(|(k, n)| (k.clone(), bucket(*n)))
                .collect(),
            unattributed: bucket(ack.unattributed),
        }
    }
}

/// Runs the acknowledgement writer until `shutdown` turns true; returns at once without a key
/// source, and after one warning when no cluster id can be found. Only the leader writes.
pub async fn run(
    client: Client,
    config: Arc<Config>,
    state: State,
    options: Options,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(source) = config.key_source.clone() else {
        return;
    };
    // The reconciler records which keys open each object from now on; the counts prune it.
    state.opened.enable();
    let Some(cluster) = cluster_id(&client, &config, &options, &mut shutdown).await else {
        state.opened.disable();
        return;
    };
    let mut backoff = options.retry_min;
    let store = loop {
        match FleetStore::open(&source.location, &source.aws).await {
            Ok(store) => break store,
            // A ring whose name no parameter can carry: retrying would not help.
            Err(e @ kseal_keystore::Error::Location { .. }) => {
                tracing::warn!("fleet acknowledgements are off: {}", crate::error_chain(&e));
                state.opened.disable();
                return;
            }
            Err(e) => {
                tracing::warn!(
                    reason = e.reason(),
                    retry_in = ?backoff,
                    "fleet acknowledgements: cannot open the store: {}",
                    crate::error_chain(&e)
                );
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
                backoff = (backoff * 2).min(options.retry_max);
            }
        }
    };
    tracing::info!(
        cluster = %cluster,
        store = %store.describe(),
        "acknowledging the fleet key ring as cluster {cluster}"
    );
    let mut writer = Writer::new(cluster, store, options);
    let mut views = state.ring_view.subscribe();
    let mut keys = state.keys.subscribe();
    let mut terms = state.leadership.subscribe();
    // A fleet restarted at once (an upgrade rolled out everywhere) reads its records over the
    // start spread, not in one second: Parameter Store's throughput quota is per account.
    let first_look = tokio::time::Instant::now() + spread(writer.options.start_spread());
    let mut next = first_look;
    loop {
        let changed = tokio::select! {
            _ = tokio::time::sleep_until(next) => false,
            Ok(()) = views.changed() => true,
            Ok(()) = keys.changed() => {
                writer.recount_now = true;
                true
            }
            Ok(()) = terms.changed() => true,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if changed {
            next = after_change(
                next,
                tokio::time::Instant::now(),
                first_look,
                spread(writer.options.change_spread()),
            );
            continue;
        }
        next = if state.is_leader() {
            writer.step(&client, &config, &state).await
        } else {
            tokio::time::Instant::now() + writer.options.check
        };
    }
}

/// When the writer looks after a change woke it (a new ring view, keys, a leadership term):
/// `delay` from `now` (a random part of the change spread: the clusters that read a new
/// index in the same second do not all write in it, and the keys the key loader reads a
/// moment after the view come in the same write), unless a look was due sooner anyway, and
/// never before the first look.
fn after_change(
    next: tokio::time::Instant,
    now: tokio::time::Instant,
    first_look: tokio::time::Instant,
    delay: Duration,
) -> tokio::time::Instant {
    next.min(now + delay).max(first_look)
}

/// `--cluster-id`, else the UID of the `kube-system` namespace (retried while the API server
/// is away); `None` with a warning when neither is available, or once `shutdown` turns true.
async fn cluster_id(
    client: &Client,
    config: &Config,
    options: &Options,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<ClusterId> {
    if let Some(id) = &config.cluster_id {
        return Some(id.clone());
    }
    let off = |why: &str| {
        tracing::warn!(
            "fleet acknowledgements are off: no --cluster-id, and {why}; set --cluster-id \
             (Helm value clusterId) to report what this cluster holds"
        );
    };
    if may_read_kube_system(client).await == Some(false) {
        off("its RBAC does not allow reading the kube-system namespace");
        return None;
    }
    let mut backoff = options.retry_min.min(Duration::from_secs(5));
    loop {
        match Api::<Namespace>::all(client.clone())
            .get("kube-system")
            .await
        {
            Ok(ns) => {
                return match ns.metadata.uid.as_deref().map(ClusterId::parse) {
                    Some(Ok(id)) => Some(id),
                    _ => {
                        off("the kube-system namespace has no usable UID");
                        None
                    }
                };
            }
            Err(kube::Error::Api(status)) if matches!(status.code, 401 | 403 | 404) => {
                off(&format!(
                    "the kube-system namespace cannot be read ({} {})",
                    status.code, status.reason
                ));
                return None;
            }
            Err(e) => {
                tracing::debug!(error = %crate::error_chain(&e), "reading the kube-system namespace failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.wait_for(|s| *s) => return None,
                }
                backoff = (backoff * 2).min(options.retry_max);
            }
        }
    }
}

/// Whether this ServiceAccount may `get` the kube-system namespace, asked with a
/// SelfSubjectAccessReview (every authenticated user may create one) so that a least-privilege
/// install without that rule sees no refused request; `None` when the review cannot be made
/// (then the read itself tells).
async fn may_read_kube_system(client: &Client) -> Option<bool> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                resource: Some("namespaces".into()),
                name: Some("kube-system".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&kube::api::PostParams::default(), &review)
        .await
        .ok()?;
    answer.status.map(|s| s.allowed)
}

/// The writer's memory: what it wrote last, the counts, the anchor.
struct Writer {
    cluster: ClusterId,
    store: FleetStore,
    options: Options,
    /// What the last record written (or found fresh) said, and when it was written.
    last: Option<(Fingerprint, jiff::Timestamp)>,
    /// This run's heartbeat, jittered once (±10 %).
    heartbeat: Duration,
    /// Whether the own record was looked at (once per run, before the first write).
    looked: bool,
    counts: Option<Counts>,
    counted_at: Option<tokio::time::Instant>,
    recount_now: bool,
    /// The anchor, and the index version it was read for.
    anchor: Option<(u64, Option<Kid>)>,
    failures: u32,
    retry_at: Option<tokio::time::Instant>,
}

impl Writer {
    fn new(cluster: ClusterId, store: FleetStore, options: Options) -> Self {
        Self {
            cluster,
            store,
            heartbeat: crate::timing::jitter(options.heartbeat, 0.1),
            options,
            last: None,
            looked: false,
            counts: None,
            counted_at: None,
            recount_now: true,
            anchor: None,
            failures: 0,
            retry_at: None,
        }
    }

    /// One look: recount when due, write when the record would say something new or the
    /// heartbeat is due. Returns when to look next.
    async fn step(
        &mut self,
        client: &Client,
        config: &Config,
        state: &State,
    ) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        let next = now + self.options.check;
        let Some(view) = state.ring_view.current() else {
            return next;
        };
        let ring = state.keys.ring();
        if self.recount_now
            || self
                .counted_at
                .is_none_or(|t| now.duration_since(t) >= self.options.recount)
        {
            // An anchor not known yet (the ring-state Secret not written yet) is looked for
            // again with each count.
            if self.anchor.as_ref().is_some_and(|(_, a)| a.is_none()) {
                self.anchor = None;
            }
            match count_objects(client, config, &ring, &state.opened).await {
                Ok(counts) => {
                    state.metrics.fleet.publish(&view.ring, &counts);
                    self.counts = Some(counts);
                    self.counted_at = Some(now);
                    self.recount_now = false;
                }
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "fleet acknowledgements: counting SealedSecrets failed; retrying");
                    return now + self.options.retry_min.min(self.options.check);
                }
            }
        }
        let Some(counts) = self.counts.clone() else {
            return next;
        };
        if self.retry_at.is_some_and(|t| now < t) {
            return self.retry_at.unwrap_or(next).min(next);
        }
        if self.anchor.as_ref().is_none_or(|(v, _)| *v != view.version) {
            let anchor = read_anchor(client, config).await;
            self.anchor = Some((view.version, anchor));
        }
        let ack = self.report(&view, &ring, &counts, state);
        let fingerprint = Fingerprint::of(&ack);
        let wall = jiff::Timestamp::now();
        let heartbeat = i64::try_from(self.heartbeat.as_secs()).unwrap_or(i64::MAX);
        let heartbeat_due = move |written: jiff::Timestamp| {
            wall.as_second().saturating_sub(written.as_second()) >= heartbeat
        };
        if !self.looked {
            self.looked = true;
            // A restart: the record written before it may still say the same.
            if let Ok(Some(own)) = self.store.read(&self.cluster).await
                && Fingerprint::of(&own) == fingerprint
                && !heartbeat_due(own.written)
            {
                state.metrics.fleet.count("unchanged");
                self.last = Some((fingerprint, own.written));
                return next;
            }
        }
        if let Some((last, written)) = &self.last
            && *last == fingerprint
            && !heartbeat_due(*written)
        {
            return next;
        }
        match self.store.write(&ack).await {
            Ok(()) => {
                state.metrics.fleet.count("written");
                state
                    .metrics
                    .fleet
                    .ack_last_written
                    .set(ack.written.as_second());
                if self.failures > 0 {
                    tracing::info!(
                        failures = self.failures,
                        "fleet acknowledgement written again"
                    );
                }
                tracing::debug!(
                    version = ack.index_version,
                    held = ack.held.len(),
                    "fleet acknowledgement written"
                );
                self.failures = 0;
                self.retry_at = None;
                self.last = Some((fingerprint, ack.written));
                next
            }
            Err(e) => {
                state.metrics.fleet.count(e.reason());
                let wait = self
                    .options
                    .retry_min
                    .saturating_mul(1 << self.failures.min(16))
                    .min(self.options.retry_max);
                self.failures += 1;
                // The first failure, then one line per doubling of the count.
                if self.failures.is_power_of_two() {
                    tracing::warn!(
                        reason = e.reason(),
                        failures = self.failures,
                        retry_in = ?wait,
                        "fleet acknowledgement not written: {}",
                        crate::error_chain(&e)
                    );
                }
                let at = now + wait;
                self.retry_at = Some(at);
                at
            }
        }
    }

    /// The record for what this cluster holds now.
    fn report(
        &self,
        view: &crate::keys::ringview::RingView,
        ring: &KeyRing,
        counts: &Counts,
        state: &State,
    ) -> Ack {
        let known: BTreeSet<&Kid> = view.ever.iter().chain(&view.kids).collect();
        let mut held: Vec<Kid> = ring
            .keys()
            .map(|k| Kid::of(k.public_key()))
            .filter(|k| known.contains(k))
            .collect();
        held.sort();
        held.dedup();
        held.truncate(MAX_ACK_KIDS);
        let mut objects = counts.by_kid.clone();
        let mut unattributed = counts.unattributed;
        // A record has room for MAX_ACK_KIDS: the smallest counts of keys the ring never
        // listed go first, then the smallest ones.
        while objects.len() > MAX_ACK_KIDS {
            let pick = |only_unknown: bool| {
                objects
                    .iter()
                    .filter(|(k, _)| !only_unknown || !known.contains(k))
                    .min_by_key(|(_, n)| **n)
                    .map(|(k, _)| k.clone())
            };
            let Some(kid) = pick(true).or_else(|| pick(false)) else {
                break;
            };
            unattributed += objects.remove(&kid).unwrap_or(0);
        }
        let synced = state.metrics.key_source_last_success.get();
        Ack {
            schema: ACK_SCHEMA,
            cluster: self.cluster.clone(),
            ring: view.ring.clone(),
            anchor: self.anchor.as_ref().and_then(|(_, a)| a.clone()),
            index_version: view.version,
            held,
            sealing: ring.sealing_key().map(|k| Kid::of(k.public_key())),
            objects,
            unattributed,
            controller: crate::VERSION.to_owned(),
            heartbeat_seconds: self.options.heartbeat.mul_f64(1.1).as_secs().max(1),
            synced: jiff::Timestamp::from_second(synced)
                .ok()
                .filter(|_| synced > 0),
            written: jiff::Timestamp::now(),
        }
    }
}

/// The anchor this controller trusts: `--ring-anchor`, else the one of the index in the
/// ring-state Secret (the leader's copy of what it accepted).
async fn read_anchor(client: &Client, config: &Config) -> Option<Kid> {
    if let Some(anchor) = config.key_source.as_ref().and_then(|s| s.anchor.clone()) {
        return Some(anchor);
    }
    use crate::keys::ringview::{INDEX_ITEM, RING_STATE_LABEL, parse_ring_state};
    let secrets = Api::<Secret>::namespaced(client.clone(), &config.controller_namespace)
        .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
        .await
        .ok()?;
    secrets.items.iter().find_map(|secret| {
        let bytes = secret.data.as_ref()?.get(INDEX_ITEM)?;
        let text = std::str::from_utf8(&bytes.0).ok()?;
        let trust = kseal_keystore::Trust::first_use().allow_unsigned(true);
        let (_, verified) = parse_ring_state(text, None, &trust).ok()?;
        verified.anchor().cloned()
    })
}

/// Counts the watched SealedSecrets (metadata only, 500 a page) by the kids of the keys that
/// opened them ([`attribute`]), then forgets the opened keys of objects no longer listed.
async fn count_objects(
    client: &Client,
    config: &Config,
    ring: &KeyRing,
    opened: &Opened,
) -> Result<Counts, kube::Error> {
    let apis: Vec<Api<SealedSecret>> = match &config.namespaces {
        Namespaces::All => vec![Api::all(client.clone())],
        Namespaces::Only(namespaces) => namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
    };
    let kids = kids_of(ring);
    let mark = opened.mark();
    let mut counts = Counts::default();
    let mut listed: HashSet<(String, String)> = HashSet::new();
    for api in apis {
        let mut params = ListParams::default().limit(500);
        if let Some(selector) = &config.label_selector {
            params = params.labels(selector);
        }
        loop {
            let page = api.list_metadata(&params).await?;
            for item in &page.items {
                attribute(&item.metadata, &kids, opened, &mut counts);
                let meta = &item.metadata;
                if let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) {
                    listed.insert((namespace.clone(), name.clone()));
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
    }
    opened.retain(mark, |namespace, name| {
        listed.contains(&(namespace.to_owned(), name.to_owned()))
    });
    Ok(counts)
}

/// The kid of each key `ring` holds.
fn kids_of(ring: &KeyRing) -> BTreeMap<KeyId, Kid> {
    ring.keys()
        .map(|k| (k.id().clone(), Kid::of(k.public_key())))
        .collect()
}

/// Counts one SealedSecret (its metadata): once under the kid of each held key that opened
/// it, when it was opened here as it is now (same UID and generation); otherwise (not opened
/// since this controller started, or changed since) under the kid its sealing-key annotation
/// names. `unattributed` when neither names a held key.
fn attribute(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kids: &BTreeMap<KeyId, Kid>,
    opened: &Opened,
    counts: &mut Counts,
) {
    let by_opener = opened.keys(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref(),
        meta.generation,
    );
    let held: BTreeSet<&Kid> = match by_opener {
        Some(keys) => keys.iter().filter_map(|id| kids.get(id)).collect(),
        None => meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(kseal_api::constants::SEALING_KEY_ANNOTATION))
            .and_then(|hint| KeyId::parse(hint.trim()))
            .and_then(|id| kids.get(&id))
            .into_iter()
            .collect(),
    };
    if held.is_empty() {
        counts.unattributed += 1;
    }
    for kid in held {
        *counts.by_kid.entry(kid.clone()).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_are_spread_within_their_window() {
        let window = Duration::from_secs(3600);
        let mut minutes = BTreeSet::new();
        for _ in 0..2000 {
            let d = spread(window);
            assert!(d < window, "{d:?}");
            minutes.insert(d.as_secs() / 60);
        }
        // Spread over the whole window, not bunched at its start or end.
        assert!(
            minutes.len() > 40 && minutes.contains(&0) && minutes.contains(&59),
            "{minutes:?}"
        );
        assert_eq!(spread(Duration::ZERO), Duration::ZERO);
        let options = Options {
            heartbeat: DEFAULT_HEARTBEAT,
            recount: window,
            check: Duration::from_secs(60),
            retry_min: Duration::from_secs(30),
            retry_max: window,
        };
        assert_eq!(
            (options.start_spread(), options.change_spread()),
            (window, Duration::from_secs(60))
        );
    }

    #[test]
    fn a_change_is_looked_at_within_its_delay_but_not_before_the_first_look() {
        let now = tokio::time::Instant::now();
        let s = Duration::from_secs;
        // A look due later: the change brings it forward to its delay.
        assert_eq!(after_change(now + s(60), now, now, s(7)), now + s(7));
        // A look due sooner stays.
        assert_eq!(after_change(now + s(3), now, now, s(7)), now + s(3));
        // Before the first look after a start, a change waits for it.
        assert_eq!(
            after_change(now + s(900), now, now + s(900), s(7)),
            now + s(900)
        );
        // Changes in a row keep the earliest.
        let first = after_change(now + s(60), now, now, s(40));
        assert_eq!(after_change(first, now + s(1), now, s(50)), now + s(40));
    }

    #[test]
    fn buckets_grow_in_powers_of_two() {
        let buckets: Vec<u32> = [0, 1, 2, 3, 4, 7, 8, 1000, 1023, 1024]
            .into_iter()
            .map(bucket)
            .collect();
        assert_eq!(buckets, [0, 1, 2, 2, 3, 3, 4, 10, 10, 11]);
    }

    #[test]
    fn a_few_more_objects_change_no_fingerprint_but_none_left_does() {
        let kid = |c: char| Kid::parse(&c.to_string().repeat(64)).unwrap();
        let ack = |objects: &[(char, u64)]| Ack {
            schema: ACK_SCHEMA,
            cluster: ClusterId::parse("c").unwrap(),
            ring: "r".into(),
            anchor: None,
            index_version: 3,
            held: vec![kid('a')],
            sealing: Some(kid('a')),
            objects: objects.iter().map(|(c, n)| (kid(*c), *n)).collect(),
            unattributed: 0,
            controller: "v".into(),
            heartbeat_seconds: 60,
            synced: None,
            written: jiff::Timestamp::now(),
        };
        let base = Fingerprint::of(&ack(&[('a', 40), ('b', 5)]));
        assert_eq!(base, Fingerprint::of(&ack(&[('a', 45), ('b', 6)])));
        assert_ne!(base, Fingerprint::of(&ack(&[('a', 70), ('b', 5)])));
        assert_ne!(base, Fingerprint::of(&ack(&[('a', 40)])), "none left on b");
        let mut newer = ack(&[('a', 40), ('b', 5)]);
        newer.index_version = 4;
        assert_ne!(base, Fingerprint::of(&newer));
    }

    #[test]
    fn the_cluster_id_flag_is_checked() {
        use clap::Parser as _;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["kseal-controller", "--controller-namespace", "k"];
            argv.extend_from_slice(extra);
            Config::from_args(crate::config::Args::try_parse_from(argv).unwrap(), None)
        };
        assert_eq!(parse(&[]).unwrap().cluster_id, None);
        assert_eq!(
            parse(&["--cluster-id", "prod-eu-1"])
                .unwrap()
                .cluster_id
                .map(|c| c.to_string()),
            Some("prod-eu-1".to_owned())
        );
        let e = parse(&["--cluster-id", "prod/eu"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid --cluster-id: \"prod/eu\": '/' is not allowed (letters, digits, '.', '_' and '-' are)"
        );
    }

    /// Objects count under the key that opened them; the annotation only speaks for objects
    /// not opened here as they are now.
    #[test]
    fn objects_count_under_the_key_that_opened_them() {
        use std::collections::BTreeMap;

        use k8s_openapi::api::core::v1::Secret;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        use kseal_api::{SealedSecretSpec, Unsealed};

        let id = |i: u8| {
            use base64::Engine as _;
            let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode([i; 32]);
            KeyId::parse(&format!("SHA256:{text}")).unwrap()
        };
        let kid = |c: char| Kid::parse(&c.to_string().repeat(64)).unwrap();
        // Keys 1 (kid a) and 2 (kid b) are held; key 3 is not.
        let kids = BTreeMap::from([(id(1), kid('a')), (id(2), kid('b'))]);
        let meta = |name: &str, hint: Option<u8>, generation: i64| ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(generation),
            annotations: hint.map(|i| {
                BTreeMap::from([(
                    kseal_api::constants::SEALING_KEY_ANNOTATION.to_owned(),
                    id(i).to_string(),
                )])
            }),
            ..ObjectMeta::default()
        };
        let opened = Opened::default();
        opened.enable();
        let open = |meta: &ObjectMeta, keys: &[u8]| {
            let mut sealed = SealedSecret::new("", SealedSecretSpec::default());
            sealed.metadata = meta.clone();
            let unsealed = Unsealed {
                secret: Secret::default(),
                rsa_operations: 0,
                keys: keys
                    .iter()
                    .enumerate()
                    .map(|(n, i)| (format!("item{n}"), id(*i)))
                    .collect(),
                deprecated_data_key: None,
            };
            opened.record(&sealed, &unsealed);
        };
        let count = |metas: &[ObjectMeta]| {
            let mut counts = Counts::default();
            for meta in metas {
                attribute(meta, &kids, &opened, &mut counts);
            }
            let by: Vec<(char, u64)> = counts
                .by_kid
                .iter()
                .map(|(k, n)| (k.to_string().chars().next().unwrap(), *n))
                .collect();
            (by, counts.unattributed)
        };

        // Annotated with key 2, opened with key 1: counts under a, not b.
        let wrong = meta("wrong", Some(2), 1);
        open(&wrong, &[1]);
        assert_eq!(count(std::slice::from_ref(&wrong)), (vec![('a', 1)], 0));
        // No annotation (kubeseal), opened with key 1: counts under a, not unattributed.
        let kubeseal = meta("kubeseal", None, 1);
        open(&kubeseal, &[1]);
        assert_eq!(count(std::slice::from_ref(&kubeseal)), (vec![('a', 1)], 0));
        // Never opened: by its annotation, or unattributed without one.
        let waiting = meta("waiting", Some(2), 1);
        let bare = meta("bare", None, 1);
        assert_eq!(count(&[waiting.clone(), bare.clone()]), (vec![('b', 1)], 1));
        // Changed since it was opened: its annotation speaks until it is opened again, then
        // the new key does.
        let changed = meta("wrong", Some(2), 2);
        assert_eq!(count(std::slice::from_ref(&changed)), (vec![('b', 1)], 0));
        open(&changed, &[1]);
        assert_eq!(count(std::slice::from_ref(&changed)), (vec![('a', 1)], 0));
        let resealed = meta("wrong", None, 3);
        open(&resealed, &[2]);
        assert_eq!(count(std::slice::from_ref(&resealed)), (vec![('b', 1)], 0));
        // Values opened by two held keys: the object needs both, and counts under each; a key
        // not held counts nowhere, and an object opened only by such keys is unattributed.
        let mixed = meta("mixed", Some(1), 1);
        open(&mixed, &[1, 2, 3, 1]);
        assert_eq!(
            count(std::slice::from_ref(&mixed)),
            (vec![('a', 1), ('b', 1)], 0)
        );
        let gone = meta("gone", Some(1), 1);
        open(&gone, &[3]);
        assert_eq!(count(std::slice::from_ref(&gone)), (vec![], 1));
        // All together.
        assert_eq!(
            count(&[kubeseal, waiting, bare, resealed, mixed, gone]),
            (vec![('a', 2), ('b', 3)], 2)
        );
    }

    #[test]
    fn the_counts_are_published_as_the_gauge() {
        let state = State::new();
        let kid = Kid::parse(&"ab".repeat(32)).unwrap();
        let counts = Counts {
            ring: String::new(),
            by_kid: BTreeMap::from([(kid, 40)]),
            unattributed: 2,
        };
        state.metrics.fleet.publish("kseal/fleet", &counts);
        let text = state.metrics.encode();
        assert!(
            text.contains(r#"kseal_objects_by_kid{ring="kseal/fleet",kid="abababababab"} 40"#)
                && text
                    .contains(r#"kseal_objects_by_kid{ring="kseal/fleet",kid="unattributed"} 2"#),
            "{text}"
        );
    }

    /// Registers the SealedSecret CRD (deploy/crd.yaml) on a test API server.
    async fn register_crd(client: &kube::Client) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::api::{Patch, PatchParams};
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(include_str!("../../../deploy/crd.yaml")).unwrap();
        let mut value = serde_json::to_value(&crd).unwrap();
        value["apiVersion"] = serde_json::json!("apiextensions.k8s.io/v1");
        value["kind"] = serde_json::json!("CustomResourceDefinition");
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(
                "sealedsecrets.bitnami.com",
                &PatchParams::apply("kseal-tests").force(),
                &Patch::Apply(value),
            )
            .await
            .unwrap();
    }

    /// End to end: the reconciler opens a kubeseal-style object (no annotation) and a wrongly
    /// annotated one, both with key A, and the record counts both under A and none under B.
    #[tokio::test]
    async fn the_record_counts_objects_by_the_key_the_reconciler_opened_them_with() {
        use clap::Parser as _;
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::PostParams;
        let server = kseal_testkit::TestApiServer::new();
        let client = server.client();
        register_crd(&client).await;
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "apps"}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ring_dir = dir.path().join("ring");
        let source = format!("dir://{}", ring_dir.display());
        let argv = [
            "kseal-controller",
            "--controller-namespace",
            "kseal",
            "--cluster-id",
            "c1",
            "--key-source",
            source.as_str(),
        ];
        let mut config =
            Config::from_args(crate::config::Args::try_parse_from(argv).unwrap(), None).unwrap();
        config.namespaces = Namespaces::Only(vec!["apps".to_owned()]);
        let config = Arc::new(config);
        let location = kseal_keystore::Location::Directory {
            path: ring_dir,
            insecure_perms: true,
        };
        let store = FleetStore::open(&location, &kseal_keystore::AwsOptions::default())
            .await
            .unwrap();
        let generate = || {
            kseal_keys::KeyPair::generate(
                kseal_keys::KeySize::Rsa2048,
                &kseal_keys::CertificateOptions::default(),
            )
            .unwrap()
        };
        let (a, b) = (generate(), generate());
        let mut index = kseal_keystore::Index::empty("kseal/fleet", std::time::SystemTime::now());
        index.version = 1;
        index.active = Some(Kid::of(a.public_key()));
        for pair in [&a, &b] {
            index.keys.push(
                kseal_keystore::IndexEntry::new(pair.certificate(), std::time::SystemTime::now())
                    .unwrap(),
            );
        }
        let state = State::new();
        state.leadership.assume(true);
        state
            .ring_view
            .publish(crate::keys::ringview::RingView::new(
                &index,
                &BTreeSet::new(),
                Some(Kid::of(a.public_key())),
            ));
        let mut ring: KeyRing = [a.clone(), b.clone()].into_iter().collect();
        ring.set_sealing_key(a.id());
        state.keys.replace(ring);
        // As `run` does before its first count.
        state.opened.enable();

        // Both sealed with key A: one as kubeseal writes it (no annotation), one whose
        // annotation names key B.
        for (name, hint) in [("plain", None), ("wrong", Some(b.id().to_string()))] {
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "apps"},
                "stringData": {"password": "s3cr3t"}
            }))
            .unwrap();
            let mut sealed =
                kseal_api::seal_secret(&secret, a.public_key(), &kseal_api::SealOptions::default())
                    .unwrap();
            let annotations = sealed.metadata.annotations.get_or_insert_default();
            annotations.remove(kseal_api::constants::SEALING_KEY_ANNOTATION);
            if let Some(hint) = hint {
                annotations.insert(kseal_api::constants::SEALING_KEY_ANNOTATION.into(), hint);
            }
            Api::<SealedSecret>::namespaced(client.clone(), "apps")
                .create(&PostParams::default(), &sealed)
                .await
                .unwrap();
        }
        let options = Options {
            heartbeat: Duration::from_secs(3600),
            recount: Duration::from_secs(3600),
            check: Duration::from_millis(10),
            retry_min: Duration::from_millis(10),
            retry_max: Duration::from_millis(10),
        };
        let cluster = ClusterId::parse("c1").unwrap();
        let mut writer = Writer::new(cluster.clone(), store, options);
        // Not opened yet: counted by their annotations.
        writer.step(&client, &config, &state).await;
        let counts = writer.counts.clone().unwrap();
        assert_eq!(
            (counts.by_kid, counts.unattributed),
            (BTreeMap::from([(Kid::of(b.public_key()), 1)]), 1)
        );

        let (stop, stop_rx) = watch::channel(false);
        let reconciler = tokio::spawn(crate::reconcile::run(
            client.clone(),
            config.clone(),
            state.clone(),
            stop_rx,
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while state.opened.len() < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "both objects opened"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        writer.recount_now = true;
        writer.step(&client, &config, &state).await;
        let ack = writer.store.read(&cluster).await.unwrap().unwrap();
        assert_eq!(
            (ack.objects, ack.unattributed),
            (BTreeMap::from([(Kid::of(a.public_key()), 2)]), 0)
        );
        stop.send_replace(true);
        let abort = reconciler.abort_handle();
        if tokio::time::timeout(Duration::from_secs(10), reconciler)
            .await
            .is_err()
        {
            abort.abort();
        }
    }

    /// A writer on a directory ring: the first look writes, looks that find nothing new write
    /// nothing, a restarted writer finds its fresh record and writes nothing, a change writes.
    #[tokio::test]
    async fn writes_only_what_is_new_even_across_a_restart() {
        use clap::Parser as _;
        let server = kseal_testkit::TestApiServer::new();
        let client = server.client();
        register_crd(&client).await;
        let dir = tempfile::tempdir().unwrap();
        let ring_dir = dir.path().join("ring");
        let source = format!("dir://{}", ring_dir.display());
        let argv = [
            "kseal-controller",
            "--controller-namespace",
            "kseal",
            "--cluster-id",
            "c1",
            "--key-source",
            source.as_str(),
        ];
        let config =
            Config::from_args(crate::config::Args::try_parse_from(argv).unwrap(), None).unwrap();
        let location = kseal_keystore::Location::Directory {
            path: ring_dir,
            insecure_perms: true,
        };
        let store = || async {
            FleetStore::open(&location, &kseal_keystore::AwsOptions::default())
                .await
                .unwrap()
        };
        let options = Options {
            heartbeat: Duration::from_secs(3600),
            recount: Duration::from_secs(3600),
            check: Duration::from_millis(10),
            retry_min: Duration::from_millis(10),
            retry_max: Duration::from_millis(10),
        };
        let state = State::new();
        let pair = kseal_keys::KeyPair::generate(
            kseal_keys::KeySize::Rsa2048,
            &kseal_keys::CertificateOptions::default(),
        )
        .unwrap();
        let kid = Kid::of(pair.public_key());
        let mut index = kseal_keystore::Index::empty("kseal/fleet", std::time::SystemTime::now());
        index.version = 3;
        index.active = Some(kid.clone());
        index.keys.push(
            kseal_keystore::IndexEntry::new(pair.certificate(), std::time::SystemTime::now())
                .unwrap(),
        );
        let view = |index: &kseal_keystore::Index| {
            crate::keys::ringview::RingView::new(index, &BTreeSet::new(), Some(kid.clone()))
        };
        state.ring_view.publish(view(&index));
        let mut ring: KeyRing = [pair.clone()].into_iter().collect();
        ring.set_sealing_key(pair.id());
        state.keys.replace(ring);
        let written = |state: &State| {
            state
                .metrics
                .fleet
                .ack_writes
                .get_or_create(&AckOutcomeLabels {
                    outcome: "written".into(),
                })
                .get()
        };
        let cluster = ClusterId::parse("c1").unwrap();
        let mut writer = Writer::new(cluster.clone(), store().await, options.clone());
        for _ in 0..3 {
            writer.step(&client, &config, &state).await;
        }
        assert_eq!(written(&state), 1, "one write for three looks");
        let ack = store().await.read(&cluster).await.unwrap().unwrap();
        assert_eq!(
            (ack.index_version, ack.held.clone()),
            (3, vec![kid.clone()])
        );
        assert_eq!(ack.sealing, Some(kid.clone()));

        // A restart: the record on file still says the same.
        let restarted = State::new();
        restarted.ring_view.publish(view(&index));
        restarted.keys.replace(state.keys.ring().as_ref().clone());
        let mut again = Writer::new(cluster.clone(), store().await, options.clone());
        again.step(&client, &config, &restarted).await;
        assert_eq!(written(&restarted), 0);
        assert_eq!(
            restarted
                .metrics
                .fleet
                .ack_writes
                .get_or_create(&AckOutcomeLabels {
                    outcome: "unchanged".into(),
                })
                .get(),
            1
        );

        // A new index version is a change.
        index.version = 4;
        restarted.ring_view.publish(view(&index));
        again.step(&client, &config, &restarted).await;
        assert_eq!(written(&restarted), 1);
        assert_eq!(
            store()
                .await
                .read(&cluster)
                .await
                .unwrap()
                .unwrap()
                .index_version,
            4
        );
    }
}
