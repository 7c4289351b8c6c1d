//! Prometheus metrics: Bitnami's `sealed_secrets_controller_*` names (so existing dashboards
//! and the `SealedSecretsUnsealErrorHigh` alert keep working) plus kseal's own `kseal_*`.

use std::fmt::Write as _;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

/// Labels of `sealed_secrets_controller_unseal_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`crate::Error::metric_label`].
    pub reason: String,
    /// Namespace of the SealedSecret.
    pub namespace: String,
}

/// Where `sealed_secrets_controller_condition_info` reads its series: the reconciler's
/// per-object state, so that each SealedSecret's series costs no copy of its namespace and
/// name (a label family kept about 220 bytes per object: 22 MB at 100,000).
pub trait ConditionSeries: Send + Sync + 'static {
    /// Visits up to `max` objects that sort after `after` by (namespace, name), in that order,
    /// calling `each(namespace, name, instance, value)` for those with a series (`value`: 1
    /// Synced=True, -1 Synced=False). Returns the last object visited when `max` were visited
    /// and more may follow, `None` once every object was visited. A scrape reads the series a
    /// few hundred at a time this way, so it neither holds the reconciler's state for the
    /// whole scrape nor builds the whole text in memory.
    fn series_after(
        &self,
        after: Option<&SeriesCursor>,
        max: usize,
        each: &mut dyn FnMut(&str, &str, &str, i64),
    ) -> Option<SeriesCursor>;
}

/// Where a scrape stopped in a [`ConditionSeries`]: the last object it visited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesCursor {
    /// Namespace of the last object visited.
    pub namespace: Box<str>,
    /// Name of the last object visited.
    pub name: Box<str>,
}

/// The name of the condition gauge.
const CONDITION_INFO: &str = "sealed_secrets_controller_condition_info";

/// The help text of `sealed_secrets_controller_condition_info`.
const CONDITION_INFO_HELP: &str =
    "Synced condition of each SealedSecret: -1 false, 0 unknown, 1 true";

/// Objects visited per chunk of a scrape: about 30 KB of text, well under a millisecond
/// with the reconciler's state locked.
const SERIES_PER_CHUNK: usize = 256;

/// `sealed_secrets_controller_condition_info{namespace,name,condition,ss_app_kubernetes_io_instance}`
/// (Bitnami's labels, in Bitnami's order), read at each scrape from a [`ConditionSeries`].
/// It is not in the registry: [`Scrape`] writes it after the registry's families, a chunk
/// at a time.
#[derive(Default)]
pub struct ConditionInfo {
    source: std::sync::RwLock<Option<std::sync::Arc<dyn ConditionSeries>>>,
}

impl ConditionInfo {
    /// Reports the series of `source` from now on (the last bound source wins).
    pub fn bind(&self, source: std::sync::Arc<dyn ConditionSeries>) {
        let mut slot = self
            .source
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(source);
    }

    fn source(&self) -> Option<std::sync::Arc<dyn ConditionSeries>> {
        self.source
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl std::fmt::Debug for ConditionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConditionInfo").finish_non_exhaustive()
    }
}

/// Appends a label value as the OpenMetrics text format quotes it (as prometheus-client
/// does: backslash, double quote and line feed escaped).
fn push_label_value(out: &mut String, value: &str) {
    let mut last = 0;
    for (index, byte) in value.bytes().enumerate() {
        let escaped = match byte {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            b'\n' => "\\n",
            _ => continue,
        };
        out.push_str(&value[last..index]);
        out.push_str(escaped);
        last = index + 1;
    }
    out.push_str(&value[last..]);
}

/// Appends one series of the condition gauge.
fn push_condition_series(
    out: &mut String,
    namespace: &str,
    name: &str,
    instance: &str,
    value: i64,
) {
    out.push_str(CONDITION_INFO);
    out.push_str("{namespace=\"");
    push_label_value(out, namespace);
    out.push_str("\",name=\"");
    push_label_value(out, name);
    out.push_str("\",condition=\"");
    push_label_value(out, kseal_api::constants::CONDITION_SYNCED);
    out.push_str("\",ss_app_kubernetes_io_instance=\"");
    push_label_value(out, instance);
    // Writing into a String cannot fail.
    let _ = writeln!(out, "\"}} {value}");
}

/// One scrape of [`Metrics`] in the text exposition format, a chunk at a time: first the
/// registry's families and the condition gauge's descriptor, then its series a few hundred
/// objects at a time, then `# EOF`. Memory stays bounded by a chunk however many
/// SealedSecrets there are (one text of 100,000 series is about 13 MB), and the
/// reconciler's state is locked only while a chunk is written.
pub struct Scrape {
    head: Option<String>,
    source: Option<std::sync::Arc<dyn ConditionSeries>>,
    cursor: Option<SeriesCursor>,
    done: bool,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape")
            .field("cursor", &self.cursor)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Iterator for Scrape {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        if self.done {
            return None;
        }
        let mut chunk = String::new();
        // A follower's objects have no series: go on until a chunk has some, or the end.
        while chunk.is_empty() {
            let Some(source) = &self.source else {
                break;
            };
            let next = source.series_after(
                self.cursor.as_ref(),
                SERIES_PER_CHUNK,
                &mut |namespace, name, instance, value| {
                    push_condition_series(&mut chunk, namespace, name, instance, value);
                },
            );
            match next {
                Some(cursor) => self.cursor = Some(cursor),
                None => {
                    self.source = None;
                }
            }
        }
        if self.source.is_none() {
            self.done = true;
            chunk.push_str("# EOF\n");
        }
        Some(chunk)
    }
}

/// Labels of the HTTP request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// Route path.
    pub path: String,
    /// Status code.
    pub code: String,
    /// Method.
    pub method: String,
}

/// Labels of the HTTP duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpRouteLabels {
    /// Route path.
    pub path: String,
    /// Method.
    pub method: String,
}

/// Labels of the key-load error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyErrorLabels {
    /// Why a key Secret was skipped.
    pub reason: String,
}

/// Labels of the key generation counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyGenerationLabels {
    /// [`crate::keys::renewal::Reason::as_str`]: `missing`, `cutoff`, `period` or `requested`.
    pub reason: String,
}

/// Labels of the reconcile outcome counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `created`, `updated`, `unchanged` (skipped without RSA work), `failed`,
    /// `waiting_for_keys` (no key loaded yet: nothing done), `key_still_loading` (a new
    /// cluster's key source has not mirrored the key that opens it yet: nothing done), `fenced` (leadership lost before
    /// a write: the write was refused).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    revision: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `sealed_secrets_controller_unseal_requests_total`: reconciles attempted.
    pub unseal_requests: Counter,
    /// `sealed_secrets_controller_unseal_errors_total{reason,namespace}`.
    pub unseal_errors: Family<ErrorLabels, Counter>,
    /// `sealed_secrets_controller_condition_info`: −1 false, 0 unknown, 1 true; its series
    /// come from the [`ConditionSeries`] bound to it.
    pub condition_info: std::sync::Arc<ConditionInfo>,
    /// `sealed_secrets_controller_http_requests_total{path,code,method}`.
    pub http_requests: Family<HttpLabels, Counter>,
    /// `sealed_secrets_controller_http_request_duration_seconds{path,method}`.
    pub http_duration: HistogramFamily<HttpRouteLabels>,
    /// `kseal_keys_loaded`: keys in the ring.
    pub keys_loaded: Gauge,
    /// `kseal_sealing_key_age_seconds`: age of the newest key.
    pub sealing_key_age_seconds: Gauge,
    /// `kseal_key_load_errors_total{reason}`: key Secrets skipped.
    pub key_load_errors: Family<KeyErrorLabels, Counter>,
    /// `kseal_keys_generated_total{reason}`: keys generated and stored in-cluster.
    pub keys_generated: Family<KeyGenerationLabels, Counter>,
    /// `kseal_rsa_operations_total`: RSA private-key operations.
    pub rsa_operations: Counter,
    /// `kseal_unseal_rsa_operations_total{outcome}`: the reconciler's RSA private-key
    /// operations (also in `kseal_rsa_operations_total`) by what became of the unseal they
    /// served: `written` (the Secret was written with it), `unchanged` (nothing to write),
    /// `retained` (the write failed; the result is kept for the retry, which costs no RSA
    /// work), `discarded` (the write failed and the result was dropped), `unseal_failed`
    /// (no key opened it).
    pub unseal_rsa_operations: Family<OutcomeLabels, Counter>,
    /// `kseal_unseal_results_reused_total`: retries of a failed Secret write that reused the
    /// unsealed result kept from the attempt before, instead of unsealing again.
    pub unseal_results_reused: Counter,
    /// `kseal_unseal_results_dropped_total{outcome}`: results kept for the retry of a failed
    /// Secret write (`kseal_unseal_rsa_operations_total{outcome="retained"}`) that were
    /// dropped before a retry could use them, so that the retry unseals again: `expired`
    /// (kept 10 minutes), `evicted` (the 8 MiB budget went to later results), `changed` (the
    /// spec, the template binding or the keys that opened it changed meanwhile).
    pub unseal_results_dropped: Family<OutcomeLabels, Counter>,
    /// `kseal_unseal_cpu_seconds_total`: CPU time of the threads opening SealedSecrets
    /// (RSA, AES-GCM, templates) for the reconciler, measured per thread: the controller's
    /// CPU less this is what everything else costs (API round trips, JSON, watches).
    pub unseal_cpu: Counter<f64, std::sync::atomic::AtomicU64>,
    /// `kseal_reconcile_duration_seconds`.
    pub reconcile_duration: Histogram,
    /// `kseal_reconciles_total{outcome}`.
    pub reconciles: Family<OutcomeLabels, Counter>,
    /// `kseal_fenced_writes_total{write}`: writes refused because the leadership ended, its
    /// term changed or the local lease deadline passed since the work began (`secret`,
    /// `status`, `event`, `key`, `mirror`).
    pub fenced_writes: Family<WriteLabels, Counter>,
    /// `kseal_sealed_secret_reads_total`: SealedSecrets read whole from the API server
    /// because their cached copy was kept without its encrypted values (past
    /// `--pending-values-mib`, or synced and then in need of a rewrite): the value budget's
    /// price, in requests.
    pub sealed_secret_reads: Counter,
    /// `kseal_api_server_reachable`: 0 from a watch failure or a request that could not
    /// reach the API server (transport error, 5xx, or no answer within its deadline: a paused
    /// API server, seen within 11 s through the probe) until the next answer, else 1.
    pub api_server_reachable: Gauge,
    /// `kseal_watch_failures_total{watch}`: failed watch or list requests (`sealedsecrets`,
    /// `secrets`, retried after at most 5 s; `key_secrets`).
    pub watch_failures: Family<WatchLabels, Counter>,
    /// `kseal_is_leader`: 1 while this replica holds the Lease.
    pub is_leader: Gauge,
    /// `kseal_key_source_requests_total{operation,outcome}`: key-source calls
    /// (`describe_index`, `get_index`, `get_key`) and syncs (`sync`), by outcome.
    pub key_source_requests: Family<KeySourceLabels, Counter>,
    /// `kseal_key_source_sync_triggers_total{trigger}`: the leader's syncs by what started
    /// them: `start`, `leadership` (this replica just became leader), `interval`, `refresh`
    /// (SIGUSR1, `POST /v1/refresh`).
    pub key_source_sync_triggers: Family<TriggerLabels, Counter>,
    /// `kseal_key_source_last_success_timestamp_seconds`: Unix time of the last good sync.
    pub key_source_last_success: Gauge,
    /// `kseal_key_source_ring_keys`: keys in the ring's index.
    pub key_source_ring_keys: Gauge,
    /// `kseal_key_source_keys_missing`: keys the verified index lists that the last sync did
    /// not find in the store (deleted, or not replicated yet); the leader looks for them
    /// between polls. Summed over the rings.
    pub key_source_keys_missing: RingGauge,
    /// `kseal_key_source_key_age_seconds{kid}`: time since each key entered the ring.
    pub key_source_key_age_seconds: Family<KidLabels, Gauge>,
    /// `kseal_key_source_active_unavailable`: 1 while the fleet ring's active key cannot seal
    /// here (not mirrored, not proven, expired, or the ring names none): the last verified
    /// active key seals meanwhile, or nothing does. Never a key that was not activated.
    pub key_source_active_unavailable: Gauge,
    /// `kseal_key_source_mirror_conflicts_total{reason}`: Secrets that look like mirrors but
    /// are not proven ones, or names taken: `material_mismatch` (filed under a kid of the ring
    /// with other key material), `unknown_kid` (a kid the ring never listed), `name_taken`.
    pub key_source_mirror_conflicts: Family<KeyErrorLabels, Counter>,
    /// `kseal_key_source_index_expiry_timestamp_seconds`: Unix time at which the signed index
    /// this controller accepted last stops being current (0: it carries no expiry). Past it,
    /// the controller keeps the ring it holds, but no index written before then is accepted
    /// again: the seeder refreshes it (`kseal keys refresh`).
    pub key_source_index_expiry: RingGauge,
    /// `kseal_key_source_ring_signed`: 1 when the ring's index is a signed history, 0 for an
    /// unsigned index of an older kseal (its keys open; run `kseal keys sign`).
    pub key_source_ring_signed: RingGauge,
    /// `kseal_key_source_ring_version`: the newest signed index version accepted (an older one
    /// is refused as a rollback).
    pub key_source_ring_version: RingGauge,
    /// `kseal_key_source_ring_anchor_pinned`: 1 once the ring's trust anchor was pinned on
    /// first use (no `--ring-anchor`); 0 while none is, or when `--ring-anchor` gave it.
    pub key_source_ring_anchor_pinned: RingGauge,
    /// `kseal_key_source_ring_anchor_superseded`: 1 while the pinned anchor (`--ring-anchor`)
    /// is not the newest dedicated root of the ring's verified history (the pin should move
    /// there).
    pub key_source_ring_anchor_superseded: RingGauge,
    /// `kseal_key_source_mirrors_kept_unretired`: proven mirrors of keys the verified signed
    /// index no longer lists but never retired (a replayed or rolled-back index, or a hand
    /// edit): they are kept, never removed, until a signed index retires them.
    pub key_source_mirrors_kept_unretired: RingGauge,
    /// `kseal_key_source_index_refused_total{reason}`: indexes the leader refused
    /// (`rollback`: older than its version floor; `expired`: past its expiry; `untrusted`:
    /// any other failed verification; `malformed`).
    pub key_source_index_refused: Family<KeyErrorLabels, Counter>,
    /// `kseal_key_source_index_expired`: 1 while the index this controller holds (and keeps
    /// using) is past its signed expiry.
    pub key_source_index_expired: RingGauge,
    /// `kseal_key_source_ring_state_repairs_total`: times the leader rewrote a ring-state
    /// Secret that was rolled back, failed verification or was changed by someone else.
    pub key_source_ring_state_repairs: Counter,
    /// `kseal_key_source_ring_state_rivals_total`: ring-state Secrets of the ring, other than
    /// the leader's own, that fail verification, hold another index at the same or a higher
    /// version, or an older one (each named by one `RingStateForged` Warning, never deleted).
    pub key_source_ring_state_rivals: Counter,
    /// `kseal_http_connections{listener}`: connections open now (`api`, `metrics`).
    pub http_connections: Family<ListenerLabels, Gauge>,
    /// `kseal_http_connections_peak{listener}`: the most connections held at once.
    pub http_connections_peak: Family<ListenerLabels, Gauge>,
    /// `kseal_http_client_connections_peak{listener}`: the most connections one client (IPv4
    /// address, IPv6 /64) held at once.
    pub http_client_connections_peak: Family<ListenerLabels, Gauge>,
    /// `kseal_http_connections_dropped_total{listener,reason}`: connections closed by the
    /// limits: `client_limit` and `listener_limit` (refused at accept), `evicted` (waiting for
    /// a request head when a new one needed the room), `header_timeout`, `busy` (a non-probe
    /// request over the reserved capacity, answered 503).
    pub http_connections_dropped: Family<ConnectionDropLabels, Counter>,
    /// The HTTP fair share of the RSA slots (`kseal_http_admissions_total`, …:
    /// [`FairShareMetrics`]).
    pub http_fair_share: FairShareMetrics,
    /// The fleet acknowledgement's metrics (`kseal_objects_by_kid`, …: [`crate::fleet`]).
    pub fleet: crate::fleet::metrics::FleetMetrics,
}

/// What the HTTP fair share of the RSA slots does with each verify or rotate
/// (the `serve::rsapool` module), as the pool reports it under its lock.
#[derive(Clone, Debug, Default)]
pub struct FairShareMetrics {
    /// `kseal_http_admissions_total{outcome}`: admission decisions: `admitted` (a place within
    /// the HTTP share of slots), `queued` (a place in the queue behind it), `displaced` (the
    /// place of a heavier or slow-bodied client's job, which then ends with 503) and `refused`
    /// (503 with `Retry-After`, the body unparsed).
    pub admissions: Family<OutcomeLabels, Counter>,
    /// `kseal_http_active_clients`: clients holding an admitted job now.
    pub active_clients: Gauge,
    /// `kseal_http_client_jobs_max`: admitted jobs held now by the client holding most.
    pub client_jobs_max: Gauge,
}

impl FairShareMetrics {
    /// Counts one admission decision (`admitted`, `queued`, `displaced`, `refused`).
    pub fn count(&self, outcome: &str) {
        self.admissions
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// How many admission decisions had `outcome` so far.
    pub fn counted(&self, outcome: &str) -> u64 {
        self.admissions
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .get()
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "http_admissions",
            "Verify and rotate requests by what the HTTP share of the RSA slots did with them: admitted, queued, displaced (took a heavier client's place), refused",
            self.admissions.clone(),
        );
        r.register(
            "http_active_clients",
            "Clients holding an admitted verify or rotate job now",
            self.active_clients.clone(),
        );
        r.register(
            "http_client_jobs_max",
            "Admitted verify or rotate jobs held now by the client holding most",
            self.client_jobs_max.clone(),
        );
    }
}

/// Labels of the connection gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `api` or `metrics`.
    pub listener: String,
}

/// Labels of `kseal_http_connections_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionDropLabels {
    /// `api` or `metrics`.
    pub listener: String,
    /// Why the connection was closed.
    pub reason: String,
}

/// Labels of `kseal_key_source_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeySourceLabels {
    /// `describe_index`, `get_index`, `get_key` or `sync`.
    pub operation: String,
    /// `ok` or a failure reason (`not_found`, `access_denied`, `network`, …).
    pub outcome: String,
}

/// Labels of `kseal_watch_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// The watched resource.
    pub watch: String,
}

/// Labels of `kseal_fenced_writes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// What was to be written.
    pub write: String,
}

/// Labels of `kseal_key_source_sync_triggers_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabels {
    /// What started the sync.
    pub trigger: String,
}

/// Labels of per-key gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KidLabels {
    /// The first 12 characters of the kid.
    pub kid: String,
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            unseal_requests: Counter::default(),
            unseal_errors: Family::default(),
            condition_info: std::sync::Arc::default(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(latency_histogram),
            keys_loaded: Gauge::default(),
            sealing_key_age_seconds: Gauge::default(),
            key_load_errors: Family::default(),
            keys_generated: Family::default(),
            rsa_operations: Counter::default(),
            unseal_rsa_operations: Family::default(),
            unseal_results_reused: Counter::default(),
            unseal_results_dropped: Family::default(),
            unseal_cpu: Counter::default(),
            reconcile_duration: latency_histogram(),
            reconciles: Family::default(),
            is_leader: Gauge::default(),
            api_server_reachable: Gauge::default(),
            watch_failures: Family::default(),
            fenced_writes: Family::default(),
            sealed_secret_reads: Counter::default(),
            key_source_requests: Family::default(),
            key_source_sync_triggers: Family::default(),
            key_source_last_success: Gauge::default(),
            key_source_ring_keys: Gauge::default(),
            key_source_keys_missing: RingGauge::new(Combine::Sum),
            key_source_key_age_seconds: Family::default(),
            key_source_active_unavailable: Gauge::default(),
            key_source_ring_signed: RingGauge::new(Combine::Min),
            key_source_index_expiry: RingGauge::new(Combine::MinNonZero),
            key_source_ring_version: RingGauge::new(Combine::First),
            key_source_ring_anchor_pinned: RingGauge::new(Combine::Max),
            key_source_ring_anchor_superseded: RingGauge::new(Combine::Max),
            key_source_mirrors_kept_unretired: RingGauge::new(Combine::Sum),
            key_source_index_refused: Family::default(),
            key_source_index_expired: RingGauge::new(Combine::Max),
            key_source_ring_state_repairs: Counter::default(),
            key_source_ring_state_rivals: Counter::default(),
            key_source_mirror_conflicts: Family::default(),
            http_connections: Family::default(),
            http_connections_peak: Family::default(),
            http_client_connections_peak: Family::default(),
            http_connections_dropped: Family::default(),
            http_fair_share: FairShareMetrics::default(),
            fleet: crate::fleet::metrics::FleetMetrics::default(),
            registry: Registry::default(),
        };
        m.register_bitnami_metrics(registry.sub_registry_with_prefix("sealed_secrets_controller"));
        let r = registry.sub_registry_with_prefix("kseal");
        m.register_key_metrics(r);
        m.register_reconciler_metrics(r);
        m.register_key_source_metrics(r);
        m.register_connection_metrics(r);
        m.http_fair_share.register(r);
        m.fleet.register(r);
        m.api_server_reachable.set(1);
        Self { registry, ..m }
    }

    /// Bitnami's `sealed_secrets_controller_*` metrics, under their names.
    fn register_bitnami_metrics(&self, r: &mut Registry) {
        let build = Info::new(BuildLabels {
            revision: env!("CARGO_PKG_VERSION").to_owned(),
        });
        r.register("build", "Build information of the controller", build);
        r.register(
            "unseal_requests",
            "SealedSecret reconciles attempted",
            self.unseal_requests.clone(),
        );
        r.register(
            "unseal_errors",
            "SealedSecret reconciles that failed, by reason",
            self.unseal_errors.clone(),
        );
        r.register(
            "http_requests",
            "HTTP requests to the controller API",
            self.http_requests.clone(),
        );
        r.register_with_unit(
            "http_request_duration",
            "HTTP request latency",
            Unit::Seconds,
            self.http_duration.clone(),
        );
    }

    /// The key ring's metrics: keys loaded, their age, load errors and generation.
    fn register_key_metrics(&self, r: &mut Registry) {
        r.register(
            "keys_loaded",
            "Keys in the key ring",
            self.keys_loaded.clone(),
        );
        r.register_with_unit(
            "sealing_key_age",
            "Age of the newest (sealing) key",
            Unit::Seconds,
            self.sealing_key_age_seconds.clone(),
        );
        r.register(
            "key_load_errors",
            "Key Secrets that could not be loaded, by reason",
            self.key_load_errors.clone(),
        );
        r.register(
            "keys_generated",
            "Keys generated and stored in-cluster, by reason (missing, cutoff, period, requested)",
            self.keys_generated.clone(),
        );
    }

    /// The reconciler's metrics: RSA work, reconciles, leadership, API server health, whole
    /// reads and fenced writes.
    fn register_reconciler_metrics(&self, r: &mut Registry) {
        r.register(
            "rsa_operations",
            "RSA private-key operations performed",
            self.rsa_operations.clone(),
        );
        r.register(
            "unseal_rsa_operations",
            "The reconciler's RSA private-key operations, by what became of the unseal they served",
            self.unseal_rsa_operations.clone(),
        );
        r.register(
            "unseal_results_reused",
            "Retries of a failed Secret write that reused the result unsealed before",
            self.unseal_results_reused.clone(),
        );
        r.register(
            "unseal_results_dropped",
            "Results kept for the retry of a failed Secret write that were dropped unused, by why",
            self.unseal_results_dropped.clone(),
        );
        r.register_with_unit(
            "unseal_cpu",
            "CPU time of the threads opening SealedSecrets for the reconciler",
            Unit::Seconds,
            self.unseal_cpu.clone(),
        );
        r.register_with_unit(
            "reconcile_duration",
            "Time to reconcile one SealedSecret",
            Unit::Seconds,
            self.reconcile_duration.clone(),
        );
        r.register(
            "reconciles",
            "Reconciles by outcome (unchanged = skipped without RSA work)",
            self.reconciles.clone(),
        );
        r.register(
            "is_leader",
            "1 while this replica holds the leader Lease",
            self.is_leader.clone(),
        );
        r.register(
            "api_server_reachable",
            "0 from a failed watch or a reconcile that could not reach the API server until its next answer, else 1",
            self.api_server_reachable.clone(),
        );
        r.register(
            "watch_failures",
            "Failed watch or list requests, by watched resource",
            self.watch_failures.clone(),
        );
        r.register(
            "sealed_secret_reads",
            "SealedSecrets read whole because their cached copy was kept without its encrypted values (past --pending-values-mib, or synced and in need of a rewrite)",
            self.sealed_secret_reads.clone(),
        );
        r.register(
            "fenced_writes",
            "Writes refused because the leadership ended, changed term or passed its local lease deadline, by write",
            self.fenced_writes.clone(),
        );
    }

    /// The fleet key ring's (`--key-source`) metrics.
    fn register_key_source_metrics(&self, r: &mut Registry) {
        r.register(
            "key_source_requests",
            "Key-source calls (describe_index, get_index, get_key) and syncs, by outcome",
            self.key_source_requests.clone(),
        );
        r.register(
            "key_source_sync_triggers",
            "The leader's key-source syncs by what started them (start, leadership, interval, refresh, store_answered, key_restored)",
            self.key_source_sync_triggers.clone(),
        );
        r.register_with_unit(
            "key_source_last_success_timestamp",
            "Unix time of the last successful key-source sync",
            Unit::Seconds,
            self.key_source_last_success.clone(),
        );
        r.register(
            "key_source_ring_keys",
            "Keys in the fleet key ring's index",
            self.key_source_ring_keys.clone(),
        );
        r.register(
            "key_source_keys_missing",
            "Keys the fleet ring's verified index lists that the store did not hold at the last sync (the leader looks for them between polls)",
            self.key_source_keys_missing.gauge(),
        );
        r.register_with_unit(
            "key_source_key_age",
            "Time since each key of the fleet ring entered it",
            Unit::Seconds,
            self.key_source_key_age_seconds.clone(),
        );
        r.register(
            "key_source_active_unavailable",
            "1 while the fleet ring's active key cannot seal here (the last verified active key seals, or none)",
            self.key_source_active_unavailable.clone(),
        );
        r.register_with_unit(
            "key_source_index_expiry_timestamp",
            "Unix time at which the fleet ring's index accepted last expires (0: no expiry)",
            Unit::Seconds,
            self.key_source_index_expiry.gauge(),
        );
        r.register(
            "key_source_ring_signed",
            "1 when the fleet ring's index is a signed history, 0 when it is unsigned (older kseal)",
            self.key_source_ring_signed.gauge(),
        );
        r.register(
            "key_source_ring_version",
            "The newest signed version of the fleet ring's index accepted",
            self.key_source_ring_version.gauge(),
        );
        r.register(
            "key_source_ring_anchor_pinned",
            "1 once the fleet ring's trust anchor was pinned on first use (no --ring-anchor)",
            self.key_source_ring_anchor_pinned.gauge(),
        );
        r.register(
            "key_source_ring_anchor_superseded",
            "1 while the pinned ring anchor is not the newest dedicated root of the fleet ring's verified history",
            self.key_source_ring_anchor_superseded.gauge(),
        );
        r.register(
            "key_source_mirror_conflicts",
            "Secrets that look like key mirrors but are not proven ones, and taken names, by reason",
            self.key_source_mirror_conflicts.clone(),
        );
        r.register(
            "key_source_mirrors_kept_unretired",
            "Proven key mirrors kept although the signed index no longer lists them, because it never retired them (a replayed or rolled-back index)",
            self.key_source_mirrors_kept_unretired.gauge(),
        );
        r.register(
            "key_source_index_refused",
            "Fleet ring indexes the leader refused, by reason (rollback, expired, untrusted, malformed)",
            self.key_source_index_refused.clone(),
        );
        r.register(
            "key_source_index_expired",
            "1 while the fleet ring index this controller holds is past its signed expiry",
            self.key_source_index_expired.gauge(),
        );
        r.register(
            "key_source_ring_state_repairs",
            "Times the leader rewrote a rolled-back, unverifiable or altered ring-state Secret",
            self.key_source_ring_state_repairs.clone(),
        );
        r.register(
            "key_source_ring_state_rivals",
            "Ring-state Secrets not written by the leader that fail verification, differ from its index or are older",
            self.key_source_ring_state_rivals.clone(),
        );
    }

    /// The HTTP listeners' connection metrics.
    fn register_connection_metrics(&self, r: &mut Registry) {
        r.register(
            "http_connections",
            "HTTP connections open, by listener",
            self.http_connections.clone(),
        );
        r.register(
            "http_connections_peak",
            "The most HTTP connections held at once, by listener",
            self.http_connections_peak.clone(),
        );
        r.register(
            "http_client_connections_peak",
            "The most HTTP connections one client (IPv4 address, IPv6 /64) held at once, by listener",
            self.http_client_connections_peak.clone(),
        );
        r.register(
            "http_connections_dropped",
            "HTTP connections closed by the connection limits, by listener and reason",
            self.http_connections_dropped.clone(),
        );
    }

    /// Counts a key generated and stored for `reason`.
    pub fn count_generated_key(&self, reason: crate::keys::renewal::Reason) {
        self.keys_generated
            .get_or_create(&KeyGenerationLabels {
                reason: reason.as_str().to_owned(),
            })
            .inc();
    }

    /// Counts a write refused by the leadership fence.
    pub fn count_fenced(&self, write: &str) {
        self.fenced_writes
            .get_or_create(&WriteLabels {
                write: write.to_owned(),
            })
            .inc();
    }

    /// Counts a failed reconcile.
    pub fn count_error(&self, error: &crate::Error, namespace: &str) {
        self.unseal_errors
            .get_or_create(&ErrorLabels {
                reason: error.metric_label().to_owned(),
                namespace: namespace.to_owned(),
            })
            .inc();
    }

    /// The text exposition format, whole (tests; `/metrics` streams a [`Metrics::scrape`]).
    pub fn encode(&self) -> String {
        self.scrape().collect()
    }

    /// A scrape in the text exposition format, to be sent a chunk at a time.
    pub fn scrape(&self) -> Scrape {
        let mut head = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut head, &self.registry);
        head.push_str("# HELP ");
        head.push_str(CONDITION_INFO);
        head.push(' ');
        head.push_str(CONDITION_INFO_HELP);
        head.push_str("\n# TYPE ");
        head.push_str(CONDITION_INFO);
        head.push_str(" gauge\n");
        Scrape {
            head: Some(head),
            source: self.condition_info.source(),
            cursor: None,
            done: false,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// How a [`RingGauge`] turns each ring's value into the one exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// The largest (a flag: 1 while any ring has the condition).
    Max,
    /// The smallest (a flag that holds only when every ring has it).
    Min,
    /// The smallest value other than 0 (a deadline: the earliest one; 0 when none has one).
    MinNonZero,
    /// The sum (a count over every ring).
    Sum,
    /// The first ring's (`--key-source` order; a figure that only makes sense per ring).
    First,
}

/// A key-source gauge that every `--key-source` ring's loop sets with its own value: each
/// ring's value is kept, and the exported series combines them ([`Combine`]), so that the
/// rings of one controller do not overwrite each other's. With one ring it is that ring's.
#[derive(Debug, Clone)]
pub struct RingGauge {
    gauge: Gauge,
    per_ring: std::sync::Arc<std::sync::Mutex<Vec<(String, i64)>>>,
    combine: Combine,
}

impl RingGauge {
    /// A gauge at 0 combining per `combine`.
    pub fn new(combine: Combine) -> Self {
        Self {
            gauge: Gauge::default(),
            per_ring: std::sync::Arc::default(),
            combine,
        }
    }

    /// Sets `ring`'s value and the exported one.
    pub fn set(&self, ring: &str, value: i64) {
        let mut rings = self
            .per_ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match rings.iter_mut().find(|(r, _)| r == ring) {
            Some((_, v)) => *v = value,
            None => rings.push((ring.to_owned(), value)),
        }
        let values = rings.iter().map(|(_, v)| *v);
        let combined = match self.combine {
            Combine::Max => values.max(),
            Combine::Min => values.min(),
            Combine::MinNonZero => values.filter(|v| *v != 0).min().or(Some(0)),
            Combine::Sum => Some(values.fold(0i64, i64::saturating_add)),
            Combine::First => rings.first().map(|(_, v)| *v),
        };
        self.gauge.set(combined.unwrap_or(0));
    }

    /// The exported value.
    pub fn get(&self) -> i64 {
        self.gauge.get()
    }

    /// The series to register.
    fn gauge(&self) -> Gauge {
        self.gauge.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_gauge_combines_every_rings_value_and_no_ring_overwrites_another() {
        let flag = RingGauge::new(Combine::Max);
        flag.set("kseal/shared", 0);
        flag.set("kseal/team-a", 1);
        flag.set("kseal/shared", 0);
        assert_eq!(flag.get(), 1, "a later 0 of another ring does not clear it");
        flag.set("kseal/team-a", 0);
        assert_eq!(flag.get(), 0);
        let deadline = RingGauge::new(Combine::MinNonZero);
        deadline.set("a", 0);
        assert_eq!(deadline.get(), 0);
        deadline.set("b", 200);
        deadline.set("c", 100);
        assert_eq!(deadline.get(), 100);
        let count = RingGauge::new(Combine::Sum);
        count.set("a", 2);
        count.set("b", 3);
        count.set("a", 1);
        assert_eq!(count.get(), 4);
        let signed = RingGauge::new(Combine::Min);
        signed.set("a", 1);
        signed.set("b", 0);
        assert_eq!(signed.get(), 0);
        let version = RingGauge::new(Combine::First);
        version.set("a", 7);
        version.set("b", 9);
        assert_eq!(version.get(), 7);
    }

    #[test]
    fn bitnami_metric_names_are_exported() {
        let m = Metrics::new();
        m.unseal_requests.inc();
        m.unseal_rsa_operations
            .get_or_create(&OutcomeLabels {
                outcome: "retained".into(),
            })
            .inc_by(2);
        m.count_generated_key(crate::keys::renewal::Reason::Period);
        m.count_error(&crate::Error::NoKeys, "prod");
        m.http_requests
            .get_or_create(&HttpLabels {
                path: "/v1/cert.pem".into(),
                code: "200".into(),
                method: "GET".into(),
            })
            .inc();
        let text = m.encode();
        for name in [
            "sealed_secrets_controller_build_info{revision=",
            "sealed_secrets_controller_unseal_requests_total 1",
            "sealed_secrets_controller_unseal_errors_total{reason=\"unseal\",namespace=\"prod\"} 1",
            "sealed_secrets_controller_http_requests_total{path=\"/v1/cert.pem\",code=\"200\",method=\"GET\"} 1",
            "kseal_keys_loaded 0",
            "kseal_rsa_operations_total 0",
            "kseal_unseal_results_reused_total 0",
            "kseal_unseal_rsa_operations_total{outcome=\"retained\"} 2",
            "kseal_unseal_cpu_seconds_total 0",
            "kseal_sealed_secret_reads_total 0",
            "kseal_keys_generated_total{reason=\"period\"} 1",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }

    /// Objects by (namespace, name): their condition series, `None` for no series.
    type Fake =
        std::sync::Mutex<std::collections::BTreeMap<(String, String), Option<(String, i64)>>>;

    impl ConditionSeries for Fake {
        fn series_after(
            &self,
            after: Option<&SeriesCursor>,
            max: usize,
            each: &mut dyn FnMut(&str, &str, &str, i64),
        ) -> Option<SeriesCursor> {
            let objects = self.lock().unwrap();
            let after = objects.iter().filter(|((ns, name), _)| {
                after.is_none_or(|c| (ns.as_str(), name.as_str()) > (&c.namespace, &c.name))
            });
            let mut last = None;
            for (count, ((ns, name), series)) in after.enumerate() {
                if count == max {
                    return last;
                }
                if let Some((instance, value)) = series {
                    each(ns, name, instance, *value);
                }
                last = Some(SeriesCursor {
                    namespace: ns.as_str().into(),
                    name: name.as_str().into(),
                });
            }
            None
        }
    }

    /// The series as prometheus-client's own gauge family writes them (the encoder the
    /// condition gauge used before it was streamed).
    struct Reference(Vec<(String, String, String, i64)>);

    impl std::fmt::Debug for Reference {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Reference")
        }
    }

    impl prometheus_client::collector::Collector for Reference {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
        ) -> std::fmt::Result {
            let mut family = encoder.encode_descriptor(
                "condition_info",
                CONDITION_INFO_HELP,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (namespace, name, instance, value) in &self.0 {
                let labels = [
                    ("namespace", namespace.as_str()),
                    ("name", name.as_str()),
                    ("condition", kseal_api::constants::CONDITION_SYNCED),
                    ("ss_app_kubernetes_io_instance", instance.as_str()),
                ];
                family.encode_family(&labels)?.encode_gauge(value)?;
            }
            Ok(())
        }
    }

    #[test]
    fn condition_series_are_written_as_prometheus_client_writes_them() {
        let series = vec![
            ("ns".to_owned(), "a".to_owned(), "app".to_owned(), 1),
            ("ns".to_owned(), "b".to_owned(), String::new(), -1),
            // Kubernetes names cannot hold these, an instance label from a user could.
            ("ns".to_owned(), "c".to_owned(), "q\"u\\o\nte".to_owned(), 1),
        ];
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("sealed_secrets_controller")
            .register_collector(Box::new(Reference(series.clone())));
        let mut expected = String::new();
        prometheus_client::encoding::text::encode_registry(&mut expected, &registry).unwrap();

        let m = Metrics::new();
        let fake: std::sync::Arc<Fake> = std::sync::Arc::default();
        for (ns, name, instance, value) in series {
            fake.lock()
                .unwrap()
                .insert((ns, name), Some((instance, value)));
        }
        m.condition_info.bind(fake);
        let text = m.encode();
        let start = text
            .find("# HELP sealed_secrets_controller_condition_info ")
            .unwrap();
        assert_eq!(&text[start..], format!("{expected}# EOF\n"));
    }

    #[test]
    fn a_scrape_streams_the_condition_series_in_chunks_once_each_and_ends_once() {
        let m = Metrics::new();
        m.unseal_requests.inc();
        let fake: std::sync::Arc<Fake> = std::sync::Arc::default();
        {
            let mut objects = fake.lock().unwrap();
            for ns in ["a", "b", "c"] {
                for i in 0..SERIES_PER_CHUNK {
                    // Every third object has no series (reconciled elsewhere).
                    let series = (i % 3 != 0).then(|| ("app".to_owned(), 1));
                    objects.insert((ns.to_owned(), format!("s{i:04}")), series);
                }
            }
        }
        m.condition_info.bind(fake.clone());
        let mut scrape = m.scrape();
        let head = scrape.next().unwrap();
        assert!(head.contains("sealed_secrets_controller_unseal_requests_total 1\n"));
        assert!(head.ends_with("# TYPE sealed_secrets_controller_condition_info gauge\n"));
        assert!(!head.contains("# EOF"));
        let first = scrape.next().unwrap();
        // Changes while a scrape is under way: before its position (not seen, not repeated),
        // after it (seen), the position itself removed (the scrape still goes on after it).
        {
            let mut objects = fake.lock().unwrap();
            objects.insert(("a".into(), "s0000a".into()), Some(("new".into(), 1)));
            objects.insert(("c".into(), "t".into()), Some(("late".into(), -1)));
            objects.remove(&("a".to_owned(), format!("s{:04}", SERIES_PER_CHUNK - 1)));
        }
        let rest: Vec<String> = scrape.collect();
        assert!(rest.len() >= 2, "{} chunks after the first", rest.len());
        assert!(rest.iter().all(|chunk| !chunk.is_empty()));
        let body = format!("{head}{first}{}", rest.concat());
        assert!(body.ends_with("# EOF\n") && body.matches("# EOF").count() == 1);
        let names: Vec<(&str, &str)> = body
            .lines()
            .filter_map(|l| l.strip_prefix("sealed_secrets_controller_condition_info{namespace=\""))
            .map(|l| {
                let (ns, rest) = l.split_once('"').unwrap();
                let name = rest
                    .strip_prefix(",name=\"")
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                (ns, name)
            })
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "in order, each once");
        assert!(!names.contains(&("a", "s0000a")));
        assert!(names.contains(&("c", "t")));
        assert_eq!(
            names.len(),
            3 * (SERIES_PER_CHUNK - SERIES_PER_CHUNK.div_ceil(3)) + 1
        );
    }

    #[test]
    fn a_scrape_with_no_series_has_the_descriptor_and_the_end() {
        let m = Metrics::new();
        let text = m.encode();
        assert!(text.ends_with("# TYPE sealed_secrets_controller_condition_info gauge\n# EOF\n"));
        // Objects that all have no series (a follower's): no empty chunks.
        let fake: std::sync::Arc<Fake> = std::sync::Arc::default();
        for i in 0..3 * SERIES_PER_CHUNK {
            fake.lock()
                .unwrap()
                .insert(("a".into(), format!("s{i:04}")), None);
        }
        m.condition_info.bind(fake);
        let chunks: Vec<String> = m.scrape().collect();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1], "# EOF\n");
    }
}
