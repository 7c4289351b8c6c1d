//! Flags and the validated configuration.
//!
//! Flag names follow Bitnami's controller where the meaning is the same, so existing
//! manifests and Helm values translate directly. Every flag can also be set from a `KSEAL_*`
//! environment variable (`crate::env`); a flag on the command line wins.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, ValueEnum};

use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_api::validation;

use crate::env;
use crate::keys::renewal::{self, Renewal};

/// `--log-level`'s default: `info`, without the error line kube's client logs for each
/// request that fails to reach the API server (its tracing layer's `on_failure`). A 60 s
/// outage with 200 SealedSecrets waiting (`controller/tests/scenarios/apiserver-outage.sh`)
/// logged 1,529 lines with `info` and 44 with this default; kseal's own lines report the
/// outage once, with counts.
pub const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// Command-line arguments of `kseal-controller`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kseal-controller",
    version = crate::VERSION,
    about = "Unseals SealedSecrets into Secrets"
)]
pub struct Args {
    /// Namespace holding the key Secrets (default: POD_NAMESPACE, else the service account's
    /// namespace, else `kube-system`)
    #[arg(long, env = env::POD_NAMESPACE)]
    pub controller_namespace: Option<String>,
    /// Prefix of generated key Secrets; a Secret named exactly this is loaded as a legacy key
    #[arg(long, env = env::KSEAL_KEY_PREFIX, default_value = "sealed-secrets-key")]
    pub key_prefix: String,
    /// RSA size of generated keys
    #[arg(long, env = env::KSEAL_KEY_SIZE, default_value_t = 4096)]
    pub key_size: u32,
    /// Validity of generated certificates (Go duration, e.g. 87600h)
    #[arg(long, env = env::KSEAL_KEY_TTL, default_value = "87600h", value_parser = parse_duration)]
    pub key_ttl: Duration,
    /// Common name of generated certificates
    #[arg(long, env = env::KSEAL_MY_CN, default_value = "")]
    pub my_cn: String,
    /// Extra labels on generated key Secrets, as `k1=v1,k2=v2` (the key label itself is
    /// always `active` and cannot be set here)
    #[arg(long, env = env::KSEAL_PRIVATEKEY_LABELS, value_name = "K=V,...", default_value = "")]
    pub privatekey_labels: String,
    /// Extra annotations on generated key Secrets, as `k1=v1,k2=v2`
    #[arg(long, env = env::KSEAL_PRIVATEKEY_ANNOTATIONS, value_name = "K=V,...", default_value = "")]
    pub privatekey_annotations: String,
    /// Which time orders keys (the newest seals)
    #[arg(long, env = env::KSEAL_KEY_ORDER_PRIORITY, value_enum, default_value = "CertNotBefore")]
    pub key_order_priority: KeyOrder,
    /// Generate keys in-cluster (leader only): one when no key Secret exists, then renewals per
    /// --key-renew-period, --key-cutoff-time and SIGUSR1. Off by default: keys come from the
    /// fleet's key ring
    #[arg(long, env = env::KSEAL_GENERATE_KEY_IF_MISSING, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = false)]
    pub generate_key_if_missing: bool,
    /// Generate a new sealing key when the newest is this old (Go duration; 0 disables)
    /// [default: 720h]. Older keys stay active for unsealing. Needs
    /// --generate-key-if-missing=true
    #[arg(long, alias = "rotate-period", env = env::KSEAL_KEY_RENEW_PERIOD, value_name = "DURATION", value_parser = parse_duration)]
    pub key_renew_period: Option<Duration>,
    /// Generate a new sealing key at startup if the newest is older than this time, e.g. after
    /// a suspected compromise: RFC 1123 with a numeric zone, as `date -R` prints it ("Mon, 14
    /// Oct 2024 21:45:30 +0200"). Needs --generate-key-if-missing=true. Bitnami's
    /// SEALED_SECRETS_KEY_CUTOFF_TIME is read too
    #[arg(long, env = env::KSEAL_KEY_CUTOFF_TIME, value_name = "TIME")]
    pub key_cutoff_time: Option<String>,
    /// Fleet key ring to mirror into this cluster: `secretsmanager://PREFIX[?region=REGION]`
    /// (AWS Secrets Manager through the default credential chain: IRSA, EKS Pod Identity,
    /// environment, profile, IMDS) or `dir:///PATH` (a directory, e.g. mounted by the Secrets
    /// Store CSI driver). Its keys are mirrored into labelled key Secrets in the controller
    /// namespace; in-cluster key generation is then refused. Give it again for more rings
    /// (a shared ring and a ring per tenant): the first one seals by default, each has its
    /// own pin (--ring-anchor RING=KID), and --ring-namespaces / --ring-namespace-selector
    /// bind a ring's keys to some namespaces
    #[arg(long, env = env::KSEAL_KEY_SOURCE, value_name = "URL", action = clap::ArgAction::Append)]
    pub key_source: Vec<String>,
    /// How often to check the key ring for changes (one DescribeSecret of the index; ±10 %
    /// jitter). SIGUSR1 or POST /v1/refresh checks at once
    #[arg(long, env = env::KSEAL_KEY_SOURCE_INTERVAL, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
    pub key_source_interval: Duration,
    /// How long a mirrored key stays after it disappeared from the ring (the last key always
    /// stays)
    #[arg(long, env = env::KSEAL_KEY_SOURCE_RETIRE_GRACE, default_value = "168h", value_parser = parse_duration, value_name = "DURATION")]
    pub key_source_retire_grace: Duration,
    /// Refresh requests (SIGUSR1, POST /v1/refresh) sooner than this after the last read of
    /// the ring wait for the rest of it, so a flood of them costs the key store one read
    #[arg(long, env = env::KSEAL_KEY_SOURCE_REFRESH_SPACING, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub key_source_refresh_spacing: Duration,
    /// The key ring's trust anchor (a kid, as `kseal keys trust` prints it): only an index
    /// whose signed history starts there is used. Without it the anchor of the first signed
    /// history read is pinned (and said so in a log line, an Event and a metric)
    /// With several --key-source rings, `RING=KID` pins ring RING (its Secrets Manager
    /// prefix, or `kseal/fleet` for a directory ring); a bare KID pins the first ring
    #[arg(long, env = env::KSEAL_RING_ANCHOR, value_name = "[RING=]KID", action = clap::ArgAction::Append)]
    pub ring_anchor: Vec<String>,
    /// Binds a --key-source ring to namespaces: its keys open only SealedSecrets in these
    /// namespaces, whatever the scope says (`RING=NS[,NS…]`; repeatable; a ring with no
    /// binding opens everywhere)
    #[arg(long, value_name = "RING=NS[,NS…]", action = clap::ArgAction::Append)]
    pub ring_namespaces: Vec<String>,
    /// Binds a --key-source ring to the namespaces whose labels match a selector
    /// (`RING=SELECTOR`, e.g. `kseal/team-a=kseal.dev/tenant=team-a`; as `kubectl -l` takes
    /// it); with --ring-namespaces, either admits a namespace. Needs list and watch on
    /// namespaces
    #[arg(long, value_name = "RING=SELECTOR", action = clap::ArgAction::Append)]
    pub ring_namespace_selector: Vec<String>,
    /// This cluster's id in the fleet's acknowledgements of the key ring (`kseal fleet
    /// status`): 1 to 128 letters, digits, `.`, `_` or `-`. Default: the UID of the
    /// `kube-system` namespace
    #[arg(long, env = "KSEAL_CLUSTER_ID", value_name = "ID")]
    pub cluster_id: Option<String>,
    /// AWS region of the key ring (default: the URL's ?region=, then AWS_REGION)
    #[arg(long, env = env::KSEAL_AWS_REGION, value_name = "REGION")]
    pub aws_region: Option<String>,
    /// Secrets Manager endpoint URL (default: AWS_ENDPOINT_URL_SECRETS_MANAGER, then
    /// AWS_ENDPOINT_URL, then AWS's)
    #[arg(long, env = env::KSEAL_AWS_ENDPOINT_URL, value_name = "URL")]
    pub aws_endpoint_url: Option<String>,
    /// IAM role to assume for reading the key ring
    #[arg(long, env = env::KSEAL_AWS_ASSUME_ROLE, value_name = "ROLE_ARN")]
    pub aws_assume_role: Option<String>,
    /// Accept the deprecated whole-Secret `spec.data` format
    #[arg(long, env = env::KSEAL_ACCEPT_DEPRECATED_V1_DATA, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = true)]
    pub accept_deprecated_v1_data: bool,
    /// Watch SealedSecrets in all namespaces (false: the controller namespace only)
    #[arg(long, env = env::KSEAL_ALL_NAMESPACES, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = true)]
    pub all_namespaces: bool,
    /// Comma-separated namespaces to watch besides the controller's (implies not all)
    #[arg(long, env = env::KSEAL_ADDITIONAL_NAMESPACES, value_delimiter = ',')]
    pub additional_namespaces: Vec<String>,
    /// Only handle SealedSecrets matching this label selector (their Secrets are watched
    /// whatever their labels)
    #[arg(long, env = env::KSEAL_LABEL_SELECTOR)]
    pub label_selector: Option<String>,
    /// Write the SealedSecret status subresource
    #[arg(long, env = env::KSEAL_UPDATE_STATUS, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = true)]
    pub update_status: bool,
    /// Do not watch Secrets (no re-creation of deleted Secrets, no drift correction)
    #[arg(long, env = env::KSEAL_SKIP_RECREATE, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = false)]
    pub skip_recreate: bool,
    /// Revert edits to owned Secrets
    #[arg(long, env = env::KSEAL_DRIFT_CORRECTION, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = true)]
    pub drift_correction: bool,
    /// Re-check every SealedSecret this often (with jitter; 0 disables)
    #[arg(long, env = env::KSEAL_RESYNC_PERIOD, default_value = "10m", value_parser = parse_duration)]
    pub resync_period: Duration,
    /// SealedSecrets unsealed (RSA work) in parallel; up to 4 times as many reconciles run at
    /// once, so that API round trips overlap the RSA work
    #[arg(long, env = env::KSEAL_CONCURRENCY, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// Threads running the controller's async work (API requests, watches, the HTTP API);
    /// 0: one per two CPUs, at least one. RSA work runs on threads of its own. Fewer save some
    /// CPU per object and cost a little peak memory on a cold start (docs/benchmarks.md)
    #[arg(long, env = env::KSEAL_ASYNC_THREADS, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub async_threads: u16,
    /// MiB of encrypted values kept in memory for SealedSecrets waiting to be unsealed; past
    /// it, a waiting object is kept without them and read whole (one GET) when its turn
    /// comes. Bounds the memory of a cold start over many objects (docs/benchmarks.md)
    #[arg(long, env = env::KSEAL_PENDING_VALUES_MIB, default_value_t = crate::cache::sealed::DEFAULT_VALUE_BUDGET_MIB, value_parser = clap::value_parser!(u32).range(0..=65536))]
    pub pending_values_mib: u32,
    /// /v1/verify and /v1/rotate sustained requests per second
    #[arg(long, env = env::KSEAL_RATE_LIMIT, default_value_t = 2.0)]
    pub rate_limit: f64,
    /// /v1/verify and /v1/rotate burst
    #[arg(long, env = env::KSEAL_RATE_LIMIT_BURST, default_value_t = 2)]
    pub rate_limit_burst: u32,
    /// Sealed values one /v1/verify or /v1/rotate request may hold (more is refused with 413
    /// before any RSA work); with the ring size it bounds the RSA work of one request
    #[arg(long, env = env::KSEAL_MAX_REQUEST_ITEMS, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_request_items: u32,
    /// Proxies whose X-Forwarded-For entries name the client for the rate limit: comma-separated
    /// CIDRs or addresses, IPv4 and IPv6 (e.g. the API server's address, when clients reach the
    /// controller through its service proxy as kubeseal does). Default: none, every client is
    /// its peer address and forwarding headers are ignored
    #[arg(long, env = env::KSEAL_TRUSTED_PROXIES, value_name = "CIDR,...", default_value = "")]
    pub trusted_proxies: String,
    /// Connections the API server holds at most; when full, a new connection replaces the one
    /// that has waited longest for a request, and an eighth of the room (at most 64) is kept
    /// for /healthz, /readyz and /v1/cert.pem [default: 512, at most a quarter of the
    /// open-file limit]
    #[arg(long, env = env::KSEAL_MAX_CONNECTIONS, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Connections one client (an IPv4 address, an IPv6 /64) holds at most on each server;
    /// more are closed at once
    #[arg(long, env = env::KSEAL_MAX_CONNECTIONS_PER_CLIENT, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_client: u32,
    /// Connections the metrics server holds at most [default: 64, at most a sixteenth of the
    /// open-file limit]
    #[arg(long, env = env::KSEAL_METRICS_MAX_CONNECTIONS, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub metrics_max_connections: Option<u32>,
    /// A client must send a request's whole head (request line and headers) within this, from
    /// connecting or from the previous response; a keep-alive connection idles at most this
    /// long (Go duration, e.g. 10s)
    #[arg(long, env = env::KSEAL_HEADER_READ_TIMEOUT, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub header_read_timeout: Duration,
    /// Address of the API server (certificate, verify, rotate, health): IP:PORT (an IPv6
    /// address in brackets), or Bitnami's :PORT (every IPv4 interface, as the default)
    #[arg(long, env = env::KSEAL_LISTEN_ADDR, default_value = "0.0.0.0:8080", value_parser = parse_listen_addr, value_name = "ADDR")]
    pub listen_addr: SocketAddr,
    /// Address of the metrics server (same forms as --listen-addr)
    #[arg(long, env = env::KSEAL_LISTEN_METRICS_ADDR, default_value = "0.0.0.0:8081", value_parser = parse_listen_addr, value_name = "ADDR")]
    pub listen_metrics_addr: SocketAddr,
    /// Elect a leader among replicas; only the leader writes
    #[arg(long, env = env::KSEAL_LEADER_ELECT, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), default_value_t = true)]
    pub leader_elect: bool,
    /// Name of the leader-election Lease in the controller namespace
    #[arg(long, env = env::KSEAL_LEADER_ELECTION_LEASE, default_value = "kseal-controller")]
    pub leader_election_lease: String,
    /// Log format
    #[arg(long, env = env::KSEAL_LOG_FORMAT, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (RUST_LOG syntax, e.g. `info` or `kseal_controller=debug`). The default
    /// leaves out the line kube's client logs for every request that fails to reach the API
    /// server (about 30 a second during an outage): kseal logs the outage itself, once, with
    /// a count of the failures it did not log. A bare level, as Bitnami's `INFO` or `ERROR`,
    /// keeps that line out as well
    #[arg(long, env = env::KSEAL_LOG_LEVEL, default_value = DEFAULT_LOG_FILTER, value_parser = parse_log_filter)]
    pub log_level: String,
    /// Bitnami's `--old-gc-behavior`: ignored with a warning when true (kseal never deletes
    /// Secrets itself; Kubernetes' garbage collector follows the owner reference)
    #[arg(long, hide = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub old_gc_behavior: Option<bool>,
    /// Bitnami's `--watch-for-secrets`: kseal always watches the key Secrets (false is
    /// ignored with a warning)
    #[arg(long, hide = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub watch_for_secrets: Option<bool>,
    /// Bitnami's `--log-info-stdout`: INFO and DEBUG lines go to stdout, WARN and ERROR to
    /// stderr (default: every line to stderr)
    #[arg(long, hide = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub log_info_stdout: Option<bool>,
    /// Bitnami's `--max-unseal-retries`: ignored with a warning (kseal never gives up)
    #[arg(long, hide = true, value_name = "N")]
    pub max_unseal_retries: Option<i64>,
    /// Bitnami's `--kubeclient-qps`: ignored with a warning (no client-side rate limit)
    #[arg(long, hide = true, value_name = "QPS", allow_negative_numbers = true)]
    pub kubeclient_qps: Option<f64>,
    /// Bitnami's `--kubeclient-burst`: ignored with a warning (no client-side rate limit)
    #[arg(long, hide = true, value_name = "N", allow_negative_numbers = true)]
    pub kubeclient_burst: Option<i64>,
    /// Bitnami's `--read-timeout`: ignored with a warning (see --header-read-timeout)
    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    pub read_timeout: Option<Duration>,
    /// Bitnami's `--write-timeout`: ignored with a warning (see --header-read-timeout)
    #[arg(long, hide = true, value_parser = parse_duration, value_name = "DURATION")]
    pub write_timeout: Option<Duration>,
}

/// How keys are ordered (Bitnami's `--key-order-priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "verbatim")]
pub enum KeyOrder {
    /// The certificate's NotBefore.
    CertNotBefore,
    /// The key Secret's creationTimestamp.
    SecretCreationTimestamp,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Which namespaces are watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace.
    All,
    /// These namespaces only (the controller's first).
    Only(Vec<String>),
}

/// The validated configuration, built once from [`Args`] before any I/O.
#[derive(Debug, Clone)]
pub struct Config {
    /// Namespace of the key Secrets and the Lease.
    pub controller_namespace: String,
    /// Key Secret name prefix.
    pub key_prefix: String,
    /// RSA size of generated keys.
    pub key_size: kseal_keys::KeySize,
    /// Validity of generated certificates.
    pub key_ttl: Duration,
    /// Common name of generated certificates.
    pub my_cn: String,
    /// Extra labels on generated key Secrets (never the key label itself).
    pub key_labels: BTreeMap<String, String>,
    /// Extra annotations on generated key Secrets.
    pub key_annotations: BTreeMap<String, String>,
    /// Key ordering.
    pub key_order: KeyOrder,
    /// Generate keys in-cluster: when none exists, and renewals per `key_renewal`.
    pub generate_key_if_missing: bool,
    /// Key renewal; in effect only with `generate_key_if_missing`.
    pub key_renewal: Renewal,
    /// The fleet key ring to mirror, if any (the first `--key-source`: it seals by default).
    pub key_source: Option<KeySourceConfig>,
    /// The rings of the further `--key-source` flags, in order.
    pub more_key_sources: Vec<KeySourceConfig>,
    /// `--ring-namespaces` and `--ring-namespace-selector`, by ring name: where each bound
    /// ring's keys open. A ring not named here opens everywhere.
    pub ring_bindings: BTreeMap<String, crate::keys::binding::RingBinding>,
    /// `--cluster-id`: this cluster in the fleet's acknowledgements (`None`: the UID of the
    /// `kube-system` namespace, read at start).
    pub cluster_id: Option<kseal_keystore::ClusterId>,
    /// Accept `spec.data`.
    pub accept_deprecated_v1_data: bool,
    /// Watched namespaces.
    pub namespaces: Namespaces,
    /// Label selector on SealedSecrets (the Secret watch is not filtered: a selected
    /// SealedSecret's Secret need not carry its labels).
    pub label_selector: Option<String>,
    /// Write status.
    pub update_status: bool,
    /// Do not watch Secrets.
    pub skip_recreate: bool,
    /// Revert edits to owned Secrets.
    pub drift_correction: bool,
    /// Periodic resync (None: off).
    pub resync_period: Option<Duration>,
    /// Parallel unseals (RSA work); reconciles run up to 4 times as many.
    pub concurrency: u16,
    /// Async worker threads (`--async-threads`, 0 resolved from the CPU count).
    pub async_threads: usize,
    /// Bytes of encrypted values cached for SealedSecrets not yet synced
    /// (`--pending-values-mib`).
    pub pending_value_bytes: usize,
    /// verify/rotate rate limit (per second) and burst.
    pub rate_limit: (f64, u32),
    /// Sealed values one verify/rotate request may hold.
    pub max_request_items: usize,
    /// Proxies whose `X-Forwarded-For` entries the rate limiter believes.
    pub trusted_proxies: crate::net::TrustedProxies,
    /// API server connections held at most.
    pub max_connections: usize,
    /// Connections one client holds at most on each server.
    pub max_connections_per_client: usize,
    /// Metrics server connections held at most.
    pub metrics_max_connections: usize,
    /// Time a request head may take to arrive.
    pub header_read_timeout: Duration,
    /// API listen address.
    pub listen_addr: SocketAddr,
    /// Metrics listen address.
    pub listen_metrics_addr: SocketAddr,
    /// Leader election: the Lease name, or None when disabled.
    pub leader_election_lease: Option<String>,
    /// This replica's identity (pod name or hostname).
    pub identity: String,
    /// Settings that are valid but will not do what they seem to (logged at startup).
    pub warnings: Vec<String>,
}

impl Config {
    /// The names of the `--key-source` rings, in order (`Location::ring_name`: the Secrets
    /// Manager prefix, `kseal/fleet` for a directory ring); empty without one.
    pub fn ring_names(&self) -> Vec<String> {
        self.key_source
            .iter()
            .chain(&self.more_key_sources)
            .map(|s| s.location.ring_name().to_owned())
            .collect()
    }

    /// This configuration once per `--key-source` ring, with `key_source` set to that ring
    /// (what each ring's key-source loop and fleet writer read); just this one without a
    /// further ring.
    pub fn for_each_ring(self: &std::sync::Arc<Self>) -> Vec<std::sync::Arc<Self>> {
        let mut configs = vec![self.clone()];
        for source in &self.more_key_sources {
            configs.push(std::sync::Arc::new(Self {
                key_source: Some(source.clone()),
                more_key_sources: Vec::new(),
                ..(**self).clone()
            }));
        }
        configs
    }
}

/// A remote key ring (`--key-source`).
#[derive(Debug, Clone)]
pub struct KeySourceConfig {
    /// Where the ring is.
    pub location: kseal_keystore::Location,
    /// Poll interval (before jitter).
    pub interval: Duration,
    /// How long a mirrored key outlives its removal from the ring.
    pub retire_grace: Duration,
    /// Refresh requests closer than this to the last read are merged into one read.
    pub refresh_spacing: Duration,
    /// How to reach AWS.
    pub aws: kseal_keystore::AwsOptions,
    /// `--ring-anchor`: the anchor every index's history must start at (`None`: pinned on
    /// first use).
    pub anchor: Option<kseal_keystore::Kid>,
}

/// Why a configuration is invalid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Unsupported RSA size.
    #[error("unsupported --key-size {0}: use 2048, 3072 or 4096")]
    KeySize(u32),
    /// A key prefix that is no Secret `generateName`.
    #[error("invalid --key-prefix {prefix:?}: {problem}")]
    KeyPrefix {
        /// The prefix.
        prefix: String,
        /// Why (apimachinery's words).
        problem: validation::InvalidName,
    },
    /// Bad rate limit.
    #[error("invalid --rate-limit {0}: must be a positive number")]
    RateLimit(String),
    /// `--header-read-timeout` is zero.
    #[error("invalid --header-read-timeout 0s: must be positive")]
    HeaderReadTimeout,
    /// Empty namespace name in a list.
    #[error("invalid --additional-namespaces: empty namespace name")]
    EmptyNamespace,
    /// A namespace name Kubernetes refuses.
    #[error("invalid {flag} {name:?}: {problem}")]
    Namespace {
        /// The flag.
        flag: &'static str,
        /// The offending name.
        name: String,
        /// Why (apimachinery's words).
        problem: validation::InvalidName,
    },
    /// Unparseable cutoff time.
    #[error(
        "invalid {origin} {value:?}: use RFC 1123 with a numeric zone, as `date -R` prints it, e.g. \"Mon, 14 Oct 2024 21:45:30 +0200\""
    )]
    KeyCutoffTime {
        /// Where the value came from: the flag (or its `KSEAL_` variable) or Bitnami's variable.
        origin: &'static str,
        /// The value.
        value: String,
    },
    /// `--key-source` cannot be parsed.
    #[error("invalid --key-source: {0}")]
    KeySource(String),
    /// `--cluster-id` is not a cluster id.
    #[error("invalid --cluster-id: {0}")]
    ClusterId(String),
    /// `--key-source` with in-cluster key generation.
    #[error(
        "--key-source and --generate-key-if-missing=true exclude each other: with a fleet key ring every key comes from the ring (rotate with `kseal keys rotate`)"
    )]
    KeySourceWithGeneration,
    /// A zero poll interval.
    #[error("invalid --key-source-interval: must be at least 1s")]
    KeySourceInterval,
    /// A bad item in `--trusted-proxies`.
    #[error("invalid --trusted-proxies item {0}")]
    TrustedProxies(String),
    /// A Bitnami `SEALED_SECRETS_*` variable whose value its flag refuses.
    #[error("invalid {var}: {problem}")]
    BitnamiVariable {
        /// The variable.
        var: String,
        /// clap's words for the flag's value.
        problem: String,
    },
    /// A bad `key=value` item in `--privatekey-labels` or `--privatekey-annotations`.
    #[error("invalid {flag} item {item:?}: {problem}")]
    KeyMetadata {
        /// The flag.
        flag: &'static str,
        /// The offending item.
        item: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// What parsing a [`Config`] reads besides its arguments: the open-file limit, the environment
/// variables honoured outside clap, the time and a random suffix. [`Host::current`] reads this
/// process's; [`Config::parse`] is a pure function of its inputs, so tests pass their own.
#[derive(Debug, Clone)]
pub struct Host {
    /// The soft open-file limit ([`crate::host::nofile_limit`]); `None`: unlimited.
    pub nofile_limit: Option<u64>,
    /// `SEALED_SECRETS_KEY_CUTOFF_TIME`.
    pub key_cutoff_time: Option<String>,
    /// `POD_NAME`: the leader-election identity.
    pub pod_name: Option<String>,
    /// `HOSTNAME`: the identity without `POD_NAME`, with [`Host::identity_suffix`].
    pub hostname: Option<String>,
    /// A random number that keeps two processes on one host apart.
    pub identity_suffix: u64,
    /// CPUs this process may use ([`crate::host::cpus`]).
    pub cpus: usize,
    /// Now.
    pub now: SystemTime,
    /// Bitnami's `SEALED_SECRETS_*` variables and the `KSEAL_*` ones that override them.
    pub bitnami: BitnamiEnv,
}

impl Host {
    /// This process's.
    pub fn current() -> Self {
        use std::hash::BuildHasher as _;
        Self {
            nofile_limit: crate::host::nofile_limit(),
            key_cutoff_time: std::env::var(env::SEALED_SECRETS_KEY_CUTOFF_TIME).ok(),
            pod_name: std::env::var(env::POD_NAME).ok(),
            hostname: std::env::var(env::HOSTNAME).ok(),
            // RandomState is seeded from the OS RNG once per process.
            identity_suffix: std::collections::hash_map::RandomState::new()
                .hash_one(std::process::id()),
            cpus: crate::host::cpus(),
            now: SystemTime::now(),
            bitnami: BitnamiEnv::current(),
        }
    }
}

/// Bitnami's controller flags, each with the `KSEAL_*` variable of kseal's flag of the same
/// name (`None`: a compatibility flag kseal accepts and ignores with a warning). Bitnami reads
/// each from `SEALED_SECRETS_<NAME>` (upper case, `-` as `_`) unless given on the command
/// line; so does kseal, below its own `KSEAL_*` variable (docs/bitnami.md has the table).
/// `--version` has a variable too (`SEALED_SECRETS_VERSION`), ignored with a warning.
pub const BITNAMI_FLAGS: &[(&str, Option<&str>)] = &[
    ("key-prefix", Some(env::KSEAL_KEY_PREFIX)),
    ("key-size", Some(env::KSEAL_KEY_SIZE)),
    ("key-ttl", Some(env::KSEAL_KEY_TTL)),
    ("my-cn", Some(env::KSEAL_MY_CN)),
    ("key-renew-period", Some(env::KSEAL_KEY_RENEW_PERIOD)),
    ("rotate-period", Some(env::KSEAL_KEY_RENEW_PERIOD)),
    ("key-order-priority", Some(env::KSEAL_KEY_ORDER_PRIORITY)),
    (
        "accept-deprecated-v1-data",
        Some(env::KSEAL_ACCEPT_DEPRECATED_V1_DATA),
    ),
    // Read through `Host::key_cutoff_time` (its errors name the variable).
    ("key-cutoff-time", Some(env::KSEAL_KEY_CUTOFF_TIME)),
    ("all-namespaces", Some(env::KSEAL_ALL_NAMESPACES)),
    (
        "additional-namespaces",
        Some(env::KSEAL_ADDITIONAL_NAMESPACES),
    ),
    ("label-selector", Some(env::KSEAL_LABEL_SELECTOR)),
    ("rate-limit", Some(env::KSEAL_RATE_LIMIT)),
    ("rate-limit-burst", Some(env::KSEAL_RATE_LIMIT_BURST)),
    (
        "privatekey-annotations",
        Some(env::KSEAL_PRIVATEKEY_ANNOTATIONS),
    ),
    ("privatekey-labels", Some(env::KSEAL_PRIVATEKEY_LABELS)),
    ("old-gc-behavior", None),
    ("update-status", Some(env::KSEAL_UPDATE_STATUS)),
    ("watch-for-secrets", None),
    ("skip-recreate", Some(env::KSEAL_SKIP_RECREATE)),
    ("log-info-stdout", None),
    ("log-level", Some(env::KSEAL_LOG_LEVEL)),
    ("log-format", Some(env::KSEAL_LOG_FORMAT)),
    ("max-unseal-retries", None),
    ("kubeclient-qps", None),
    ("kubeclient-burst", None),
    ("listen-addr", Some(env::KSEAL_LISTEN_ADDR)),
    ("listen-metrics-addr", Some(env::KSEAL_LISTEN_METRICS_ADDR)),
    ("read-timeout", None),
    ("write-timeout", None),
];

/// The prefix of Bitnami's variables.
pub const BITNAMI_ENV_PREFIX: &str = "SEALED_SECRETS_";

/// The Bitnami variable of `flag`: `key-size` → `SEALED_SECRETS_KEY_SIZE`.
#[must_use]
pub fn bitnami_variable(flag: &str) -> String {
    format!(
        "{BITNAMI_ENV_PREFIX}{}",
        flag.to_uppercase().replace('-', "_")
    )
}

/// The environment as Bitnami's flags see it: every `SEALED_SECRETS_*` variable, and which
/// `KSEAL_*` variables are set (they win over Bitnami's).
#[derive(Debug, Clone, Default)]
pub struct BitnamiEnv {
    /// `SEALED_SECRETS_*` variables (name, value), sorted by name.
    pub vars: Vec<(String, String)>,
    /// The names of the `KSEAL_*` variables that are set and not empty.
    pub kseal_set: std::collections::BTreeSet<String>,
}

impl BitnamiEnv {
    /// This process's (variables that are not UTF-8 are left out).
    pub fn current() -> Self {
        let mut this = Self::default();
        for (name, value) in std::env::vars_os() {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
                continue;
            };
            if name.starts_with(BITNAMI_ENV_PREFIX) {
                this.vars.push((name.to_owned(), value.to_owned()));
            } else if name.starts_with("KSEAL_") && !value.is_empty() {
                this.kseal_set.insert(name.to_owned());
            }
        }
        this.vars.sort();
        this
    }

    /// The flags Bitnami's variables add to `argv`: `--name=value` for each
    /// `SEALED_SECRETS_<NAME>` that is not empty, whose flag (or its alias) is not on the
    /// command line and whose `KSEAL_*` variable is not set. Each value is checked alone, so
    /// a bad one is named by its variable.
    pub fn flags(&self, argv: &[std::ffi::OsString]) -> Result<Vec<String>, ConfigError> {
        let given = |flag: &str| {
            let names = match flag {
                "key-renew-period" | "rotate-period" => vec!["key-renew-period", "rotate-period"],
                other => vec![other],
            };
            argv.iter().skip(1).any(|a| {
                a.to_str()
                    .and_then(|a| a.strip_prefix("--"))
                    .is_some_and(|a| {
                        names.iter().any(|n| {
                            a == *n || a.strip_prefix(n).is_some_and(|r| r.starts_with('='))
                        })
                    })
            })
        };
        let mut flags = Vec::new();
        for &(flag, kseal) in BITNAMI_FLAGS {
            if flag == "key-cutoff-time" {
                continue;
            }
            let var = bitnami_variable(flag);
            let Some(value) = self.value(&var) else {
                continue;
            };
            if given(flag) || kseal.is_some_and(|k| self.kseal_set.contains(k)) {
                continue;
            }
            let arg = format!("--{flag}={value}");
            if let Err(e) = Args::try_parse_from(["kseal-controller", arg.as_str()]) {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                return Err(ConfigError::BitnamiVariable {
                    var,
                    problem: first.trim_start_matches("error: ").to_owned(),
                });
            }
            flags.push(arg);
        }
        Ok(flags)
    }

    /// The value of `var`, when set and not empty.
    fn value(&self, var: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(n, v)| n == var && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// One line per Bitnami variable that has no effect: unknown to Bitnami's controller,
    /// overridden by a `KSEAL_*` variable, or `SEALED_SECRETS_VERSION`.
    fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (var, value) in &self.vars {
            if value.is_empty() {
                continue;
            }
            let known = BITNAMI_FLAGS
                .iter()
                .find(|(flag, _)| bitnami_variable(flag) == *var);
            match known {
                Some((_, Some(kseal))) if self.kseal_set.contains(*kseal) => warnings
                    .push(format!("{var} ignored: {kseal} is set and wins")),
                Some(_) => {}
                None if var == "SEALED_SECRETS_VERSION" => warnings.push(format!(
                    "{var} ignored: run `kseal-controller --version` to print the version"
                )),
                None => warnings.push(format!(
                    "{var} ignored: Bitnami's controller has no flag --{} (docs/bitnami.md lists those kseal reads)",
                    var[BITNAMI_ENV_PREFIX.len()..].to_lowercase().replace('_', "-")
                )),
            }
        }
        warnings
    }
}

impl Args {
    /// This process's arguments, with Bitnami's `SEALED_SECRETS_*` variables applied
    /// ([`BitnamiEnv::flags`]); prints help or version, or a flag error, and exits, as clap
    /// does.
    pub fn from_process() -> Result<Self, ConfigError> {
        let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let extra = BitnamiEnv::current().flags(&argv)?;
        argv.extend(extra.into_iter().map(Into::into));
        Ok(Self::parse_from(argv))
    }
}

/// A warning per Bitnami compatibility flag that was given and changes nothing here, saying
/// what kseal does instead.
fn compat_warnings(args: &Args) -> Vec<String> {
    let ignored = |flag: &str, instead: &str| {
        format!("--{flag} ({}) ignored: {instead}", bitnami_variable(flag))
    };
    let mut warnings = Vec::new();
    if args.old_gc_behavior == Some(true) {
        warnings.push(ignored(
            "old-gc-behavior",
            "kseal never deletes a Secret itself; Kubernetes' garbage collector deletes it with its SealedSecret through the owner reference",
        ));
    }
    if args.watch_for_secrets == Some(false) {
        warnings.push(ignored(
            "watch-for-secrets",
            "kseal always watches the key Secrets, so a key created outside the controller loads at once",
        ));
    }
    if args.max_unseal_retries.is_some() {
        warnings.push(ignored(
            "max-unseal-retries",
            "kseal never gives up on a SealedSecret: it retries with a backoff capped at 5 minutes, and again on every key change and resync",
        ));
    }
    for (flag, given) in [
        ("kubeclient-qps", args.kubeclient_qps.is_some()),
        ("kubeclient-burst", args.kubeclient_burst.is_some()),
    ] {
        if given {
            warnings.push(ignored(
                flag,
                "kseal's Kubernetes client has no client-side rate limit; --concurrency bounds the unseals in flight",
            ));
        }
    }
    for (flag, given) in [
        ("read-timeout", args.read_timeout.is_some()),
        ("write-timeout", args.write_timeout.is_some()),
    ] {
        if given {
            warnings.push(ignored(
                flag,
                "kseal bounds each connection with --header-read-timeout (default 10s) and the connection limits",
            ));
        }
    }
    warnings
}

/// Parses a listen address: `IP:PORT`, `[IPv6]:PORT`, or Bitnami's (Go's) `:PORT`, taken as
/// `0.0.0.0:PORT`, every IPv4 interface, as kseal's default (Go would listen on IPv6 as well;
/// `[::]:PORT` asks for that where the host has IPv6).
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Some(port) = text.strip_prefix(':') {
        return port
            .parse::<u16>()
            .map(|port| SocketAddr::from(([0, 0, 0, 0], port)))
            .map_err(|_| format!("{port:?} is not a port (0-65535)"));
    }
    text.parse().map_err(|_| {
        "expected IP:PORT, [IPv6]:PORT or :PORT (every IPv4 interface), e.g. 0.0.0.0:8080"
            .to_owned()
    })
}

/// A `--log-level`: a `RUST_LOG`-style filter, or a bare level in any case (Bitnami's `INFO`,
/// `ERROR`), which becomes that level with the default's exclusion of kube's per-request
/// failure line.
pub fn parse_log_filter(text: &str) -> Result<String, String> {
    let level = text.trim().to_ascii_lowercase();
    Ok(match level.as_str() {
        "trace" | "debug" | "info" | "warn" | "warning" | "error" => {
            let level = if level == "warning" { "warn" } else { &level };
            format!("{level},kube_client::client::builder=off")
        }
        _ => text.to_owned(),
    })
}

impl Config {
    /// Validates `args` on this process's [`Host`]. `default_namespace` is the service
    /// account's namespace, if known.
    pub fn from_args(args: Args, default_namespace: Option<String>) -> Result<Self, ConfigError> {
        Self::parse(args, default_namespace, &Host::current())
    }

    /// Validates `args` on `host`: a pure function of its inputs.
    pub fn parse(
        args: Args,
        default_namespace: Option<String>,
        host: &Host,
    ) -> Result<Self, ConfigError> {
        let key_size = kseal_keys::KeySize::from_bits(args.key_size as usize)
            .ok_or(ConfigError::KeySize(args.key_size))?;
        // Generated keys are `generateName: <prefix>`; the legacy key is named the prefix.
        if let Err(problem) = validation::validate_secret_generate_name(&args.key_prefix) {
            return Err(ConfigError::KeyPrefix {
                prefix: args.key_prefix,
                problem,
            });
        }
        if !(args.rate_limit.is_finite() && args.rate_limit > 0.0) || args.rate_limit_burst == 0 {
            return Err(ConfigError::RateLimit(format!(
                "{}/burst {}",
                args.rate_limit, args.rate_limit_burst
            )));
        }
        let trusted_proxies = crate::net::TrustedProxies::parse(&args.trusted_proxies)
            .map_err(ConfigError::TrustedProxies)?;
        if args.header_read_timeout.is_zero() {
            return Err(ConfigError::HeaderReadTimeout);
        }
        let nofile = host.nofile_limit;
        let (max_connections, metrics_max_connections) = connection_caps(&args, nofile);
        let (controller_namespace, namespaces) = namespaces(&args, default_namespace)?;
        let (key_renewal, mut warnings) = key_renewal(
            args.key_renew_period,
            args.key_cutoff_time.clone(),
            host.key_cutoff_time.clone(),
            args.generate_key_if_missing,
            host.now,
        )?;
        if let Some(limit) = nofile
            && (max_connections + metrics_max_connections) as u64 > limit / 2
        {
            warnings.push(format!(
                "--max-connections {max_connections} and --metrics-max-connections {metrics_max_connections} leave little room under the open-file limit {limit}: accepting may fail with too many open files"
            ));
        }
        let (key_labels, key_annotations) = key_metadata(&args, &mut warnings)?;
        warnings.extend(compat_warnings(&args));
        warnings.extend(host.bitnami.warnings());
        let (key_source, more_key_sources, ring_bindings) = key_sources(&args)?;
        let identity = host
            .pod_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| fallback_identity(host));
        Ok(Self {
            controller_namespace,
            key_prefix: args.key_prefix,
            key_size,
            key_ttl: args.key_ttl,
            my_cn: args.my_cn,
            key_labels,
            key_annotations,
            key_order: args.key_order_priority,
            generate_key_if_missing: args.generate_key_if_missing,
            key_renewal,
            key_source,
            more_key_sources,
            ring_bindings,
            cluster_id: match args.cluster_id.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(id) => Some(kseal_keystore::ClusterId::parse(id).map_err(|e| {
                    ConfigError::ClusterId(e.to_string().replacen("invalid cluster id ", "", 1))
                })?),
            },
            accept_deprecated_v1_data: args.accept_deprecated_v1_data,
            namespaces,
            label_selector: args.label_selector.filter(|s| !s.trim().is_empty()),
            update_status: args.update_status,
            skip_recreate: args.skip_recreate,
            drift_correction: args.drift_correction && !args.skip_recreate,
            resync_period: (!args.resync_period.is_zero()).then_some(args.resync_period),
            concurrency: args.concurrency,
            async_threads: async_threads(args.async_threads, host.cpus),
            pending_value_bytes: usize::try_from(args.pending_values_mib)
                .unwrap_or(usize::MAX)
                .saturating_mul(1024 * 1024),
            rate_limit: (args.rate_limit, args.rate_limit_burst),
            max_request_items: usize::try_from(args.max_request_items).unwrap_or(usize::MAX),
            trusted_proxies,
            max_connections,
            max_connections_per_client: args.max_connections_per_client as usize,
            metrics_max_connections,
            header_read_timeout: args.header_read_timeout,
            listen_addr: args.listen_addr,
            listen_metrics_addr: args.listen_metrics_addr,
            leader_election_lease: args.leader_elect.then_some(args.leader_election_lease),
            identity,
            warnings,
        })
    }
}

/// `--max-connections` and `--metrics-max-connections`, or their defaults lowered under the
/// open-file limit `nofile`: room is left (the limit is raised to the hard limit at startup)
/// for the Kubernetes client, the other listener and the connections over the cap that are
/// accepted only to be closed.
fn connection_caps(args: &Args, nofile: Option<u64>) -> (usize, usize) {
    let cap = |flag: Option<u32>, preferred, divisor| {
        flag.map_or_else(
            || crate::serve::conn::default_cap(preferred, nofile, divisor),
            |n| n as usize,
        )
    };
    (
        cap(args.max_connections, crate::serve::conn::MAX_CONNECTIONS, 4),
        cap(
            args.metrics_max_connections,
            crate::serve::conn::METRICS_MAX_CONNECTIONS,
            16,
        ),
    )
}

/// The controller namespace (`--controller-namespace`, else the service account's, else
/// `kube-system`) and the namespaces watched, each checked as a namespace name.
fn namespaces(
    args: &Args,
    default_namespace: Option<String>,
) -> Result<(String, Namespaces), ConfigError> {
    let controller_namespace = args
        .controller_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or(default_namespace)
        .unwrap_or_else(|| "kube-system".to_owned());
    let extra: Vec<String> = args
        .additional_namespaces
        .iter()
        .map(|n| n.trim().to_owned())
        .collect();
    if extra.len() > 1 && extra.iter().any(String::is_empty) {
        return Err(ConfigError::EmptyNamespace);
    }
    let extra: Vec<String> = extra.into_iter().filter(|n| !n.is_empty()).collect();
    let check = |flag: &'static str, name: &str| {
        validation::validate_namespace_name(name).map_err(|problem| ConfigError::Namespace {
            flag,
            name: name.to_owned(),
            problem,
        })
    };
    check("--controller-namespace", &controller_namespace)?;
    for ns in &extra {
        check("--additional-namespaces", ns)?;
    }
    let namespaces = if !extra.is_empty() {
        let mut list = vec![controller_namespace.clone()];
        for ns in extra {
            if !list.contains(&ns) {
                list.push(ns);
            }
        }
        Namespaces::Only(list)
    } else if args.all_namespaces {
        Namespaces::All
    } else {
        Namespaces::Only(vec![controller_namespace.clone()])
    };
    Ok((controller_namespace, namespaces))
}

/// Labels or annotations.
type Metadata = BTreeMap<String, String>;

/// The labels and annotations of generated key Secrets (`--privatekey-labels`,
/// `--privatekey-annotations`); the sealing-key label is reserved, with a warning.
fn key_metadata(
    args: &Args,
    warnings: &mut Vec<String>,
) -> Result<(Metadata, Metadata), ConfigError> {
    let key_labels = parse_key_metadata("--privatekey-labels", &args.privatekey_labels, true)?
        .into_iter()
        .filter(|(k, _)| {
            let reserved = k == SEALING_KEY_LABEL;
            if reserved {
                warnings.push(format!(
                    "--privatekey-labels: {SEALING_KEY_LABEL} is ignored: generated keys are always labelled {SEALING_KEY_LABEL_ACTIVE}"
                ));
            }
            !reserved
        })
        .collect();
    let key_annotations = parse_key_metadata(
        "--privatekey-annotations",
        &args.privatekey_annotations,
        false,
    )?;
    Ok((key_labels, key_annotations))
}

/// The `--key-source` rings (the first, then the others) with their interval, grace, AWS
/// options and `--ring-anchor`, and the bindings by ring name.
#[allow(clippy::type_complexity)]
fn key_sources(
    args: &Args,
) -> Result<
    (
        Option<KeySourceConfig>,
        Vec<KeySourceConfig>,
        BTreeMap<String, crate::keys::binding::RingBinding>,
    ),
    ConfigError,
> {
    use crate::keys::binding::{MAX_RINGS, NamespaceSelector, RingBinding};
    let urls: Vec<&str> = args
        .key_source
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .collect();
    let given_bindings =
        !args.ring_namespaces.is_empty() || !args.ring_namespace_selector.is_empty();
    if urls.is_empty() {
        if given_bindings {
            return Err(ConfigError::KeySource(
                "--ring-namespaces and --ring-namespace-selector bind --key-source rings, and none is given".into(),
            ));
        }
        return Ok((None, Vec::new(), BTreeMap::new()));
    }
    if args.generate_key_if_missing {
        return Err(ConfigError::KeySourceWithGeneration);
    }
    if args.key_source_interval < Duration::from_secs(1) {
        return Err(ConfigError::KeySourceInterval);
    }
    if urls.len() > MAX_RINGS {
        return Err(ConfigError::KeySource(format!(
            "{} rings given; one controller mirrors at most {MAX_RINGS}",
            urls.len()
        )));
    }
    let mut sources = Vec::with_capacity(urls.len());
    let mut names: Vec<String> = Vec::with_capacity(urls.len());
    for url in urls {
        let location = kseal_keystore::Location::parse(url)
            .map_err(|e| ConfigError::KeySource(e.to_string()))?;
        let name = location.ring_name().to_owned();
        if names.contains(&name) {
            return Err(ConfigError::KeySource(format!(
                "two --key-source rings are named {name:?} (a ring's name is its Secrets Manager prefix; every directory ring is named {:?}, so at most one directory ring per controller)",
                kseal_keystore::DEFAULT_RING
            )));
        }
        names.push(name);
        sources.push(KeySourceConfig {
            location,
            interval: args.key_source_interval,
            retire_grace: args.key_source_retire_grace,
            refresh_spacing: args.key_source_refresh_spacing,
            aws: kseal_keystore::AwsOptions {
                region: args.aws_region.clone().filter(|r| !r.is_empty()),
                endpoint_url: args.aws_endpoint_url.clone().filter(|u| !u.is_empty()),
                assume_role: args.aws_assume_role.clone().filter(|r| !r.is_empty()),
                ..kseal_keystore::AwsOptions::default()
            },
            anchor: None,
        });
    }
    // `RING=VALUE` for a configured ring; the ring's name may itself hold `=`, the value of an
    // anchor never does.
    let ring_of = |flag: &str,
                   item: &str,
                   split_last: bool|
     -> Result<(usize, String), ConfigError> {
        let split = if split_last {
            item.rsplit_once('=')
        } else {
            // The configured ring names the item starts with (`NAME=`): a ring name may
            // itself hold `=`, so two may match (`kseal/a` and `kseal/a=b` for
            // `kseal/a=b=env`); which one is meant cannot be told, so that is refused.
            let matching: Vec<&String> = names
                .iter()
                .filter(|n| {
                    item.strip_prefix(n.as_str())
                        .is_some_and(|r| r.starts_with('='))
                })
                .collect();
            if let [first, second, ..] = matching.as_slice() {
                return Err(ConfigError::KeySource(format!(
                    "{flag} {item:?} may bind ring {first} or ring {second}: ring names that hold `=` cannot be told apart here; bind by another ring name or drop the `=` from the prefix"
                )));
            }
            matching.first().map(|n| (n.as_str(), &item[n.len() + 1..]))
        };
        let Some((ring, value)) = split else {
            return Err(ConfigError::KeySource(format!(
                "{flag} {item:?}: use RING=VALUE, RING being one of the --key-source rings ({})",
                names.join(", ")
            )));
        };
        let ring = ring.trim();
        let at = names
            .iter()
            .position(|n| n == ring || (names.len() == 1 && ring.is_empty()))
            .ok_or_else(|| {
                ConfigError::KeySource(format!(
                    "{flag} names ring {ring:?}, which no --key-source gives (the rings: {})",
                    names.join(", ")
                ))
            })?;
        Ok((at, value.trim().to_owned()))
    };
    for item in args
        .ring_anchor
        .iter()
        .map(|a| a.trim())
        .filter(|a| !a.is_empty())
    {
        let (at, text) = if item.contains('=') {
            ring_of("--ring-anchor", item, true)?
        } else {
            (0, item.to_owned())
        };
        let kid = kseal_keystore::Kid::parse(&text).map_err(|_| {
            ConfigError::KeySource(format!(
                "--ring-anchor {text:?} is not a kid: 64 lowercase hex characters, as `kseal keys trust` prints it"
            ))
        })?;
        if sources[at].anchor.replace(kid).is_some() {
            return Err(ConfigError::KeySource(format!(
                "--ring-anchor is given twice for ring {}",
                names[at]
            )));
        }
    }
    let mut bindings: BTreeMap<String, RingBinding> = BTreeMap::new();
    for item in &args.ring_namespaces {
        let (at, list) = ring_of("--ring-namespaces", item.trim(), false)?;
        let binding = bindings.entry(names[at].clone()).or_default();
        for namespace in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            validation::validate_namespace_name(namespace).map_err(|e| {
                ConfigError::KeySource(format!(
                    "--ring-namespaces for ring {}: {namespace:?} is not a namespace name: {e}",
                    names[at]
                ))
            })?;
            binding.namespaces.insert(namespace.to_owned());
        }
        if binding.namespaces.is_empty() && binding.selector.is_none() {
            return Err(ConfigError::KeySource(format!(
                "--ring-namespaces for ring {} names no namespace",
                names[at]
            )));
        }
    }
    for item in &args.ring_namespace_selector {
        let (at, text) = ring_of("--ring-namespace-selector", item.trim(), false)?;
        let selector = NamespaceSelector::parse(&text).map_err(|e| {
            ConfigError::KeySource(format!(
                "--ring-namespace-selector for ring {}: {e}",
                names[at]
            ))
        })?;
        let binding = bindings.entry(names[at].clone()).or_default();
        if binding.selector.replace(selector).is_some() {
            return Err(ConfigError::KeySource(format!(
                "--ring-namespace-selector is given twice for ring {}",
                names[at]
            )));
        }
    }
    let mut sources = sources.into_iter();
    let first = sources.next();
    Ok((first, sources.collect(), bindings))
}

/// Parses `k1=v1,k2=v2` (Bitnami's format; empty items are skipped) into a map, checking keys
/// as Kubernetes qualified names and, for labels, values as label values
/// (`kseal_api::validation`, apimachinery's rules and messages).
fn parse_key_metadata(
    flag: &'static str,
    text: &str,
    label: bool,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |problem: String| ConfigError::KeyMetadata {
            flag,
            item: item.to_owned(),
            problem,
        };
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| bad("expected key=value".to_owned()))?;
        let (key, value) = (key.trim(), value.trim());
        let key_check = if label {
            validation::is_qualified_name(key)
        } else {
            validation::validate_annotation_key(key)
        };
        key_check.map_err(|e| bad(format!("key {key:?}: {e}")))?;
        if label {
            validation::is_valid_label_value(value)
                .map_err(|e| bad(format!("value {value:?}: {e}")))?;
        }
        if map.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(bad(format!("{key} is given twice")));
        }
    }
    Ok(map)
}

/// The renewal policy from `--key-renew-period` (`None`: not given), `--key-cutoff-time`
/// and Bitnami's cutoff variable (read only when the flag is unset or empty), plus a warning
/// when renewal was asked for but generation is off, or the cutoff lies in the future.
fn key_renewal(
    period: Option<Duration>,
    cutoff_flag: Option<String>,
    cutoff_bitnami: Option<String>,
    generate: bool,
    now: SystemTime,
) -> Result<(Renewal, Vec<String>), ConfigError> {
    let nonempty = |v: Option<String>| v.filter(|t| !t.trim().is_empty());
    let cutoff_text = match (nonempty(cutoff_flag), nonempty(cutoff_bitnami)) {
        (Some(text), _) => Some(("--key-cutoff-time", text)),
        (None, Some(text)) => Some((env::SEALED_SECRETS_KEY_CUTOFF_TIME, text)),
        (None, None) => None,
    };
    let cutoff = match cutoff_text {
        Some((origin, value)) => {
            Some(parse_cutoff_time(&value).ok_or(ConfigError::KeyCutoffTime { origin, value })?)
        }
        None => None,
    };
    let explicit_period = period.is_some_and(|p| !p.is_zero());
    let period = period.unwrap_or(renewal::DEFAULT_PERIOD);
    let renewal = Renewal {
        period: (!period.is_zero()).then_some(period),
        cutoff,
    };
    let mut warnings = Vec::new();
    if !generate {
        let ignored: Vec<&str> = [
            explicit_period.then_some("--key-renew-period"),
            cutoff.is_some().then_some("--key-cutoff-time"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !ignored.is_empty() {
            warnings.push(format!(
                "{} ignored: key renewal needs --generate-key-if-missing=true (in-cluster key generation is off, so the controller never creates a key)",
                ignored.join(" and ")
            ));
        }
    } else if cutoff.is_some_and(|c| c > now) {
        warnings.push(
            "--key-cutoff-time is in the future: every controller start generates one new key until then"
                .to_owned(),
        );
    }
    Ok((renewal, warnings))
}

/// Parses a `--key-cutoff-time`: RFC 1123 with a numeric zone (Go's `RFC1123Z`, the format
/// of `date -R`); RFC 2822's other forms are accepted too. As in Go, the weekday must be a
/// weekday name but need not match the date.
pub fn parse_cutoff_time(text: &str) -> Option<SystemTime> {
    static PARSER: jiff::fmt::rfc2822::DateTimeParser =
        jiff::fmt::rfc2822::DateTimeParser::new().relaxed_weekday(true);
    PARSER
        .parse_timestamp(text.trim())
        .ok()
        .map(SystemTime::from)
}

/// The async worker threads for `--async-threads` (`flag`) on `cpus` CPUs: the flag when
/// set, else one per two CPUs (at least one).
///
/// Fewer workers spend less CPU parking and waking each other while RSA threads hold the
/// cores, for a little more peak memory on a cold start. 2 cores, `--concurrency 2`, one
/// worker instead of two, with `/metrics` streamed: CPU per object outside unsealing 0.35,
/// 0.40, 0.35 against 0.45, 0.40, 0.48 ms at 2,000 objects (runs alternated), 0.42 against
/// 0.48-0.50 ms at 100,000; peak RSS at 100,000 291.5 against 287.6-290.3 MiB on the cold
/// start (goal 300), 265.5 against 269.3-270.1 MiB on restart; cold start the same
/// (docs/benchmarks.md). Before the streamed scrape the one-worker peak was 300.1-300.2 MiB,
/// and the default was one per CPU. The async side of a cold start needs well under half
/// the cores even at 16 slots (about 0.4 ms per object against 1.5 ms per RSA operation).
#[must_use]
pub fn async_threads(flag: u16, cpus: usize) -> usize {
    match usize::from(flag) {
        0 => (cpus / 2).max(1),
        n => n,
    }
}

/// The leader-election identity without `POD_NAME`: the host name plus a random suffix, so
/// that two processes never share one (a PID alone would: it is 1 in most containers).
fn fallback_identity(host: &Host) -> String {
    let name = host
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kseal-controller".to_owned());
    format!("{name}_{:016x}", host.identity_suffix)
}

/// Parses a Go-style duration: `720h`, `1h30m`, `90s`, `500ms`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    kseal_api::duration::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["kseal-controller"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    /// A host that is not this process's: nothing read from the machine or the environment.
    fn host() -> Host {
        Host {
            nofile_limit: Some(400),
            key_cutoff_time: None,
            pod_name: None,
            hostname: Some("node-a".into()),
            identity_suffix: 0xabc,
            cpus: 4,
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            bitnami: BitnamiEnv::default(),
        }
    }

    #[test]
    fn parsing_reads_only_its_inputs() {
        let c = Config::parse(args(&[]), Some("ns".into()), &host()).unwrap();
        // The caps come from the host's file limit (400 / 4, 400 / 16), not this process's.
        assert_eq!((c.max_connections, c.metrics_max_connections), (100, 25));
        assert_eq!(c.identity, "node-a_0000000000000abc");
        assert_eq!(c.controller_namespace, "ns");
        let named = Host {
            pod_name: Some("kseal-0".into()),
            nofile_limit: None,
            ..host()
        };
        let c = Config::parse(args(&[]), None, &named).unwrap();
        assert_eq!((c.max_connections, c.metrics_max_connections), (512, 64));
        assert_eq!(c.identity, "kseal-0");
        // SEALED_SECRETS_KEY_CUTOFF_TIME comes from the host as well.
        let cutoff = Host {
            key_cutoff_time: Some("soon".into()),
            ..host()
        };
        let e =
            Config::parse(args(&["--generate-key-if-missing=true"]), None, &cutoff).unwrap_err();
        assert!(e.to_string().contains("soon"), "{e}");
    }

    #[test]
    fn the_default_log_filter_parses_and_leaves_out_kubes_per_request_failures() {
        assert_eq!(args(&[]).log_level, DEFAULT_LOG_FILTER);
        let filter = tracing_subscriber::EnvFilter::try_new(DEFAULT_LOG_FILTER).unwrap();
        let text = filter.to_string();
        assert!(text.contains("kube_client::client::builder=off"), "{text}");
        assert!(text.starts_with("info") || text.contains(",info"), "{text}");
    }

    #[test]
    fn async_threads_default_to_one_per_two_cpus() {
        assert_eq!(async_threads(0, 0), 1);
        assert_eq!(async_threads(0, 1), 1);
        assert_eq!(async_threads(0, 2), 1);
        assert_eq!(async_threads(0, 3), 1);
        assert_eq!(async_threads(0, 16), 8);
        assert_eq!(async_threads(3, 2), 3, "the flag wins");
        let config = Config::from_args(args(&["--async-threads", "2"]), None).unwrap();
        assert_eq!(config.async_threads, 2);
        assert!(Config::from_args(args(&[]), None).unwrap().async_threads >= 1);
        let err = Args::try_parse_from(["kseal-controller", "--async-threads", "999"]).unwrap_err();
        assert!(err.to_string().contains("--async-threads"), "{err}");
        assert!(err.to_string().contains("999"), "{err}");
    }

    #[test]
    fn key_source_excludes_generation_and_must_parse() {
        let err = Config::from_args(
            args(&[
                "--key-source",
                "secretsmanager://kseal/fleet",
                "--generate-key-if-missing",
                "true",
            ]),
            None,
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::KeySourceWithGeneration);
        let err = Config::from_args(args(&["--key-source", "s3://bucket"]), None).unwrap_err();
        assert!(err.to_string().contains("unknown scheme"), "{err}");
        let err = Config::from_args(
            args(&["--key-source", "kseal/fleet", "--key-source-interval", "0"]),
            None,
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::KeySourceInterval);
        let c = Config::from_args(
            args(&[
                "--key-source",
                "secretsmanager://kseal/fleet?region=eu-west-1",
                "--key-source-interval",
                "30m",
                "--aws-assume-role",
                "arn:aws:iam::111122223333:role/kseal",
            ]),
            None,
        )
        .unwrap();
        let source = c.key_source.unwrap();
        assert_eq!(source.interval, Duration::from_secs(1800));
        assert_eq!(source.retire_grace, Duration::from_secs(168 * 3600));
        assert_eq!(
            source.location.to_string(),
            "secretsmanager://kseal/fleet?region=eu-west-1"
        );
        assert_eq!(
            source.aws.assume_role.as_deref(),
            Some("arn:aws:iam::111122223333:role/kseal")
        );
        let none = Config::from_args(args(&["--key-source", ""]), None).unwrap();
        assert!(none.key_source.is_none());
    }

    #[test]
    fn several_rings_each_with_its_pin_and_binding() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let c = Config::from_args(
            args(&[
                "--key-source",
                "secretsmanager://kseal/shared",
                "--key-source",
                "kseal/team-a",
                "--ring-anchor",
                &a,
                "--ring-anchor",
                &format!("kseal/team-a={b}"),
                "--ring-namespaces",
                "kseal/team-a=team-a, team-a-jobs",
                "--ring-namespace-selector",
                "kseal/team-a=kseal.dev/tenant=team-a",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.ring_names(), ["kseal/shared", "kseal/team-a"]);
        assert_eq!(
            c.key_source
                .as_ref()
                .unwrap()
                .anchor
                .as_ref()
                .unwrap()
                .to_string(),
            a
        );
        assert_eq!(
            c.more_key_sources[0].anchor.as_ref().unwrap().to_string(),
            b
        );
        let binding = &c.ring_bindings["kseal/team-a"];
        assert_eq!(
            binding.describe(),
            "namespaces team-a, team-a-jobs and namespaces labelled kseal.dev/tenant=team-a"
        );
        assert!(!c.ring_bindings.contains_key("kseal/shared"));
        let per_ring = std::sync::Arc::new(c).for_each_ring();
        assert_eq!(per_ring.len(), 2);
        assert_eq!(
            per_ring[1]
                .key_source
                .as_ref()
                .unwrap()
                .location
                .to_string(),
            "secretsmanager://kseal/team-a"
        );

        let refused = |flags: &[&str], needle: &str| {
            let err = Config::from_args(args(flags), None)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{flags:?}: {err}");
        };
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--key-source",
                "secretsmanager://kseal/a?region=eu-west-1",
            ],
            "two --key-source rings are named \"kseal/a\"",
        );
        refused(
            &["--key-source", "dir:///x", "--key-source", "dir:///y"],
            "at most one directory ring",
        );
        refused(
            &["--key-source", "kseal/a", "--ring-namespaces", "kseal/b=x"],
            "RING being one of the --key-source rings (kseal/a)",
        );
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--ring-namespaces",
                "kseal/a=Not_A_Namespace",
            ],
            "is not a namespace name",
        );
        refused(
            &["--key-source", "kseal/a", "--ring-namespaces", "kseal/a= ,"],
            "names no namespace",
        );
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--ring-namespace-selector",
                "kseal/a=tier in prod",
            ],
            "go in parentheses",
        );
        refused(&["--ring-namespaces", "kseal/a=x"], "none is given");
        refused(
            &[
                "--key-source",
                "kseal/a",
                "--ring-anchor",
                &a,
                "--ring-anchor",
                &format!("kseal/a={b}"),
            ],
            "given twice for ring kseal/a",
        );
        refused(
            &["--key-source", "kseal/a", "--ring-anchor", "kseal/b=abc"],
            "names ring \"kseal/b\"",
        );
        // Ring names holding `=`: one binding text that could name either ring is refused,
        // whatever the order of the rings.
        for order in [["kseal/a", "kseal/a=b"], ["kseal/a=b", "kseal/a"]] {
            refused(
                &[
                    "--key-source",
                    order[0],
                    "--key-source",
                    order[1],
                    "--ring-namespace-selector",
                    "kseal/a=b=env",
                ],
                "cannot be told apart",
            );
        }
        let c = Config::from_args(
            args(&[
                "--key-source",
                "kseal/a=b",
                "--ring-namespaces",
                "kseal/a=b=team",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.ring_bindings["kseal/a=b"].describe(), "namespaces team");
    }

    #[test]
    fn defaults_match_bitnami_where_meaning_is_shared() {
        let c = Config::from_args(args(&[]), Some("sealed".into())).unwrap();
        assert_eq!(c.controller_namespace, "sealed");
        assert_eq!(c.key_prefix, "sealed-secrets-key");
        assert_eq!(c.key_size, kseal_keys::KeySize::Rsa4096);
        assert_eq!(c.key_ttl, Duration::from_secs(87_600 * 3600));
        assert_eq!(c.namespaces, Namespaces::All);
        assert!(c.update_status && c.accept_deprecated_v1_data && c.drift_correction);
        assert!(!c.generate_key_if_missing);
        assert_eq!(c.rate_limit, (2.0, 2));
        assert_eq!(
            c.max_request_items,
            crate::serve::http::DEFAULT_MAX_REQUEST_ITEMS
        );
        assert_eq!(c.leader_election_lease.as_deref(), Some("kseal-controller"));
    }

    #[test]
    fn additional_namespaces_watch_own_plus_listed() {
        let c = Config::from_args(
            args(&[
                "--controller-namespace",
                "ks",
                "--additional-namespaces",
                "a,b,a",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(
            c.namespaces,
            Namespaces::Only(vec!["ks".into(), "a".into(), "b".into()])
        );
        let c = Config::from_args(args(&["--all-namespaces", "false"]), None).unwrap();
        assert_eq!(c.namespaces, Namespaces::Only(vec!["kube-system".into()]));
    }

    #[test]
    fn invalid_values_are_named() {
        let e = Config::from_args(args(&["--key-size", "1024"]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported --key-size 1024: use 2048, 3072 or 4096"
        );
        let e = Config::from_args(args(&["--key-prefix", "Bad_Prefix"]), None).unwrap_err();
        assert!(e.to_string().starts_with("invalid --key-prefix"));
        // The apiserver's generateName rule: a leading '-' never makes a Secret name, while
        // dots and a trailing '-' do.
        let e = Config::from_args(args(&["--key-prefix=-keys"]), None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid --key-prefix \"-keys\": a lowercase RFC 1123 subdomain"),
            "{e}"
        );
        for ok in ["keys.example-", "sealed-secrets-key-"] {
            let c = Config::from_args(args(&["--key-prefix", ok]), None).unwrap();
            assert_eq!(c.key_prefix, ok);
        }
        let e = Config::from_args(args(&["--rate-limit", "0"]), None).unwrap_err();
        assert!(e.to_string().starts_with("invalid --rate-limit"));
        assert!(Args::try_parse_from(["kseal-controller", "--key-ttl", "10d"]).is_err());
    }

    #[test]
    fn renewal_defaults_to_bitnamis_period_and_no_cutoff() {
        let c = Config::from_args(args(&[]), None).unwrap();
        assert_eq!(
            c.key_renewal,
            Renewal {
                period: Some(Duration::from_secs(720 * 3600)),
                cutoff: None,
            }
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = Config::from_args(args(&["--key-renew-period", "0"]), None).unwrap();
        assert_eq!(c.key_renewal.period, None);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn rotate_period_is_a_hidden_alias_of_key_renew_period() {
        let c = Config::from_args(
            args(&["--generate-key-if-missing=true", "--rotate-period", "1h"]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_renewal.period, Some(Duration::from_secs(3600)));
        let mut command = <Args as clap::CommandFactory>::command();
        let help = command.render_long_help().to_string();
        assert!(help.contains("--key-renew-period"));
        assert!(!help.contains("rotate-period"));
    }

    #[test]
    fn cutoff_time_reads_date_r_output() {
        let expected = SystemTime::UNIX_EPOCH + Duration::from_secs(1_728_935_130);
        assert_eq!(
            parse_cutoff_time("Mon, 14 Oct 2024 21:45:30 +0200"),
            Some(expected)
        );
        // Go does not check the weekday against the date.
        assert_eq!(
            parse_cutoff_time("Tue, 14 Oct 2024 21:45:30 +0200"),
            Some(expected)
        );
        assert_eq!(parse_cutoff_time("2024-10-14T19:45:30Z"), None);
        assert_eq!(parse_cutoff_time("yesterday"), None);
        let c = Config::from_args(
            args(&[
                "--generate-key-if-missing=true",
                "--key-cutoff-time",
                "Mon, 14 Oct 2024 21:45:30 +0200",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_renewal.cutoff, Some(expected));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn an_invalid_cutoff_time_names_the_flag_and_the_format() {
        let e = Config::from_args(args(&["--key-cutoff-time", "2024-10-14"]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --key-cutoff-time \"2024-10-14\": use RFC 1123 with a numeric zone, as `date -R` prints it, e.g. \"Mon, 14 Oct 2024 21:45:30 +0200\""
        );
        let e = key_renewal(None, None, Some("soon".into()), true, SystemTime::now()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid SEALED_SECRETS_KEY_CUTOFF_TIME \"soon\""),
            "{e}"
        );
    }

    #[test]
    fn bitnamis_cutoff_variable_is_a_fallback() {
        let now = SystemTime::now();
        let bitnami = Some("Mon, 14 Oct 2024 21:45:30 +0200".to_owned());
        let (r, _) = key_renewal(None, None, bitnami.clone(), true, now).unwrap();
        assert_eq!(
            r.cutoff,
            parse_cutoff_time("Mon, 14 Oct 2024 21:45:30 +0200")
        );
        let ours = Some("Tue, 15 Oct 2024 00:00:00 +0000".to_owned());
        let (r, _) = key_renewal(None, ours, bitnami.clone(), true, now).unwrap();
        assert_eq!(
            r.cutoff,
            parse_cutoff_time("Tue, 15 Oct 2024 00:00:00 +0000")
        );
        let (r, _) = key_renewal(None, Some(String::new()), bitnami, true, now).unwrap();
        assert_eq!(
            r.cutoff,
            parse_cutoff_time("Mon, 14 Oct 2024 21:45:30 +0200")
        );
    }

    #[test]
    fn renewal_without_generation_warns_once_and_does_not_fail() {
        let c = Config::from_args(
            args(&[
                "--key-renew-period",
                "24h",
                "--key-cutoff-time",
                "Mon, 14 Oct 2024 21:45:30 +0200",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].starts_with(
                "--key-renew-period and --key-cutoff-time ignored: key renewal needs --generate-key-if-missing=true"
            ),
            "{:?}",
            c.warnings
        );
        let c = Config::from_args(args(&["--rotate-period", "24h"]), None).unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    }

    #[test]
    fn a_future_cutoff_warns() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let (_, warnings) = key_renewal(
            None,
            Some("Mon, 14 Oct 2024 21:45:30 +0200".into()),
            None,
            true,
            now,
        )
        .unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("in the future"));
    }

    #[test]
    fn private_key_labels_and_annotations_parse_bitnamis_format() {
        let c = Config::from_args(
            args(&[
                "--privatekey-labels",
                "team=platform, example.com/tier=keys,,",
                "--privatekey-annotations",
                "owner=Platform team <platform@example.com>,example.com/ticket=SEC-1",
            ]),
            None,
        )
        .unwrap();
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            c.key_labels,
            map(&[("team", "platform"), ("example.com/tier", "keys")])
        );
        assert_eq!(
            c.key_annotations,
            map(&[
                ("owner", "Platform team <platform@example.com>"),
                ("example.com/ticket", "SEC-1")
            ])
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = Config::from_args(args(&[]), None).unwrap();
        assert!(c.key_labels.is_empty() && c.key_annotations.is_empty());
    }

    #[test]
    fn the_key_label_cannot_be_overridden() {
        let c = Config::from_args(
            args(&[
                "--privatekey-labels",
                "sealedsecrets.bitnami.com/sealed-secrets-key=compromised,a=b",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_labels.len(), 1);
        assert_eq!(c.key_labels["a"], "b");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("is ignored"), "{:?}", c.warnings);
    }

    #[test]
    fn namespaces_kubernetes_refuses_are_named_at_startup() {
        let e = Config::from_args(args(&["--additional-namespaces", "team-a,Team_B"]), None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --additional-namespaces \"Team_B\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        let e =
            Config::from_args(args(&["--controller-namespace", "kseal.system"]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --controller-namespace \"kseal.system\": must not contain dots"
        );
        let c = Config::from_args(
            args(&["--additional-namespaces", " team-a , team-b "]),
            None,
        )
        .unwrap();
        assert!(matches!(c.namespaces, Namespaces::Only(ref l) if l.len() == 3));
    }

    #[test]
    fn private_key_metadata_keys_follow_apimachinery_not_a_stricter_rule() {
        // apimachinery limits a key's prefix to 253 characters in all, not each of its
        // dot-separated parts to 63: the apiserver takes this key, so the flag must too.
        let key = format!("{}.example.com/tier", "p".repeat(70));
        for flag in ["--privatekey-labels", "--privatekey-annotations"] {
            let c = Config::from_args(args(&[flag, &format!("{key}=keys")]), None).unwrap();
            let map = if flag == "--privatekey-labels" {
                &c.key_labels
            } else {
                &c.key_annotations
            };
            assert_eq!(map[&key], "keys", "{flag}");
        }
        // Annotation keys are checked lower-cased, label keys as they are.
        let c = Config::from_args(
            args(&["--privatekey-annotations", "Example.com/Ticket=SEC-1"]),
            None,
        )
        .unwrap();
        assert_eq!(c.key_annotations["Example.com/Ticket"], "SEC-1");
        assert!(
            Config::from_args(args(&["--privatekey-labels", "Example.com/team=a"]), None).is_err()
        );
        // ... and a prefix over 253 characters is refused with apimachinery's words.
        let key = format!("{}/tier", "p".repeat(254));
        let e = Config::from_args(args(&["--privatekey-labels", &format!("{key}=a")]), None)
            .unwrap_err();
        assert!(
            e.to_string()
                .ends_with(": prefix part must be no more than 253 characters"),
            "{e}"
        );
    }

    #[test]
    fn bad_private_key_metadata_is_named_not_a_crash() {
        // Bitnami's controller crashes on an item without '=' (its issue #1386).
        let cases = [
            (
                "--privatekey-labels",
                "team",
                "invalid --privatekey-labels item \"team\": expected key=value",
            ),
            (
                "--privatekey-labels",
                "team=a b",
                "invalid --privatekey-labels item \"team=a b\": value \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
            (
                "--privatekey-labels",
                "=x",
                "invalid --privatekey-labels item \"=x\": key \"\": name part must be non-empty; name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                "--privatekey-annotations",
                "Bad_Prefix.com/x=1",
                "invalid --privatekey-annotations item \"Bad_Prefix.com/x=1\": key \"Bad_Prefix.com/x\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ),
            (
                "--privatekey-annotations",
                "a/b/c=1",
                "invalid --privatekey-annotations item \"a/b/c=1\": key \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            ),
            (
                "--privatekey-annotations",
                "a=1,a=2",
                "invalid --privatekey-annotations item \"a=2\": a is given twice",
            ),
        ];
        for (flag, value, message) in cases {
            let e = Config::from_args(args(&[flag, value]), None).unwrap_err();
            assert_eq!(e.to_string(), message);
        }
        let long = format!("k={}", "v".repeat(64));
        let e = Config::from_args(args(&["--privatekey-labels", &long]), None).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("value \"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\": must be no more than 63 characters"),
            "{e}"
        );
        // Annotation values are free text.
        let long = format!("k={}", "v ".repeat(100));
        assert!(Config::from_args(args(&["--privatekey-annotations", &long]), None).is_ok());
    }

    #[test]
    fn trusted_proxies_default_to_none_and_bad_items_are_named() {
        let c = Config::from_args(args(&[]), None).unwrap();
        assert!(c.trusted_proxies.is_empty());
        let c = Config::from_args(
            args(&["--trusted-proxies", "10.0.0.0/8,fd00::/8,192.0.2.1"]),
            None,
        )
        .unwrap();
        assert!(c.trusted_proxies.contains("fd00::1".parse().unwrap()));
        assert!(c.trusted_proxies.contains("192.0.2.1".parse().unwrap()));
        let e = Config::from_args(args(&["--trusted-proxies", "10.0.0.0/8,fd00::/200"]), None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --trusted-proxies item \"fd00::/200\": not a CIDR (an IPv4 or IPv6 address, '/', a prefix length of at most 32 or 128)"
        );
    }

    #[test]
    fn connection_limits_default_under_the_open_file_limit_and_are_validated() {
        let c = Config::from_args(args(&[]), None).unwrap();
        let nofile = crate::host::nofile_limit();
        assert_eq!(
            c.max_connections,
            crate::serve::conn::default_cap(512, nofile, 4)
        );
        assert_eq!(
            c.metrics_max_connections,
            crate::serve::conn::default_cap(64, nofile, 16)
        );
        assert!(c.max_connections <= 512 && c.metrics_max_connections <= 64);
        assert_eq!(c.max_connections_per_client, 32);
        assert_eq!(c.header_read_timeout, Duration::from_secs(10));
        let c = Config::from_args(
            args(&[
                "--max-connections",
                "100",
                "--max-connections-per-client",
                "4",
                "--metrics-max-connections",
                "8",
                "--header-read-timeout",
                "1500ms",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(
            (
                c.max_connections,
                c.max_connections_per_client,
                c.metrics_max_connections,
                c.header_read_timeout
            ),
            (100, 4, 8, Duration::from_millis(1500))
        );
        let e = Config::from_args(args(&["--header-read-timeout", "0s"]), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --header-read-timeout 0s: must be positive"
        );
        for flag in ["--max-connections", "--max-connections-per-client"] {
            assert!(
                Args::try_parse_from(["kseal-controller", flag, "0"]).is_err(),
                "{flag} 0"
            );
        }
    }

    #[test]
    fn skip_recreate_disables_drift_correction() {
        let c = Config::from_args(args(&["--skip-recreate", "true"]), None).unwrap();
        assert!(!c.drift_correction);
    }

    /// Bitnami's chart (2.18.x, controller 0.36.x) with default values renders these.
    const BITNAMI_CHART_ARGS: &[&str] = &[
        "--update-status",
        "--key-prefix",
        "sealed-secrets-key",
        "--listen-addr",
        ":8080",
        "--listen-metrics-addr",
        ":8081",
    ];

    #[test]
    fn bitnamis_chart_command_line_parses_with_bitnamis_meaning() {
        let c = Config::parse(args(BITNAMI_CHART_ARGS), None, &host()).unwrap();
        assert!(c.update_status);
        assert_eq!(c.key_prefix, "sealed-secrets-key");
        assert_eq!(c.listen_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(c.listen_metrics_addr, "0.0.0.0:8081".parse().unwrap());
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn booleans_take_bitnamis_bare_form_and_kseals_separate_value() {
        let c = Config::parse(
            args(&[
                "--skip-recreate",
                "--update-status",
                "--all-namespaces=false",
            ]),
            None,
            &host(),
        )
        .unwrap();
        assert!(c.skip_recreate && c.update_status);
        assert!(matches!(c.namespaces, Namespaces::Only(_)));
        let c = Config::parse(
            args(&["--update-status", "false", "--skip-recreate", "0"]),
            None,
            &host(),
        )
        .unwrap();
        assert!(!c.update_status && !c.skip_recreate);
        // Go's strconv.ParseBool spellings.
        for (text, value) in [
            ("T", true),
            ("TRUE", true),
            ("1", true),
            ("F", false),
            ("False", false),
        ] {
            let a = args(&[&format!("--update-status={text}")]);
            assert_eq!(a.update_status, value, "{text}");
        }
        let e = Args::try_parse_from(["kseal-controller", "--update-status=maybe"]).unwrap_err();
        assert!(e.to_string().contains("--update-status"), "{e}");
    }

    #[test]
    fn listen_addresses_take_go_port_only_form_and_refuse_names() {
        assert_eq!(
            parse_listen_addr(":8080").unwrap(),
            "0.0.0.0:8080".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("[::]:9000").unwrap(),
            "[::]:9000".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr(":http").unwrap_err(),
            "\"http\" is not a port (0-65535)"
        );
        assert!(parse_listen_addr(":70000").is_err());
        let e = parse_listen_addr("localhost:8080").unwrap_err();
        assert!(e.starts_with("expected IP:PORT"), "{e}");
    }

    #[test]
    fn bitnamis_log_levels_keep_the_default_exclusion() {
        assert_eq!(args(&["--log-level", "INFO"]).log_level, DEFAULT_LOG_FILTER);
        assert_eq!(
            args(&["--log-level", "ERROR"]).log_level,
            "error,kube_client::client::builder=off"
        );
        assert_eq!(
            args(&["--log-level", "kseal_controller=debug"]).log_level,
            "kseal_controller=debug"
        );
        for level in ["DEBUG", "WARN", "error"] {
            let filter = args(&["--log-level", level]).log_level;
            assert!(
                tracing_subscriber::EnvFilter::try_new(&filter).is_ok(),
                "{filter}"
            );
        }
    }

    #[test]
    fn every_bitnami_flag_is_accepted() {
        let sample = |flag: &str| match flag {
            "key-size" => "2048",
            "key-ttl" | "key-renew-period" | "rotate-period" | "read-timeout" | "write-timeout" => {
                "1h"
            }
            "key-order-priority" => "SecretCreationTimestamp",
            "key-cutoff-time" => "Mon, 14 Oct 2024 21:45:30 +0200",
            "rate-limit" | "rate-limit-burst" | "max-unseal-retries" | "kubeclient-qps"
            | "kubeclient-burst" => "3",
            "additional-namespaces" => "team-a",
            "privatekey-annotations" | "privatekey-labels" => "a=b",
            "log-level" => "INFO",
            "log-format" => "json",
            "listen-addr" | "listen-metrics-addr" => ":9090",
            "accept-deprecated-v1-data"
            | "all-namespaces"
            | "old-gc-behavior"
            | "update-status"
            | "watch-for-secrets"
            | "skip-recreate"
            | "log-info-stdout" => "true",
            _ => "x",
        };
        for &(flag, _) in BITNAMI_FLAGS {
            let arg = format!("--{flag}={}", sample(flag));
            let a = Args::try_parse_from(["controller", arg.as_str()])
                .unwrap_or_else(|e| panic!("{arg}: {e}"));
            Config::parse(a, None, &host()).unwrap_or_else(|e| panic!("{arg}: {e}"));
        }
        // Hidden from --help: they are documented in docs/bitnami.md.
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(!help.contains("kubeclient-qps"), "{help}");
    }

    #[test]
    fn ignored_bitnami_flags_warn_once_each_with_what_kseal_does() {
        let c = Config::parse(
            args(&[
                "--old-gc-behavior",
                "--watch-for-secrets=false",
                "--log-info-stdout",
                "--max-unseal-retries",
                "5",
                "--kubeclient-qps",
                "-1",
                "--kubeclient-burst",
                "10",
                "--read-timeout",
                "2m",
                "--write-timeout",
                "2m",
            ]),
            None,
            &host(),
        )
        .unwrap();
        assert_eq!(c.warnings.len(), 7, "{:#?}", c.warnings);
        for w in &c.warnings {
            assert!(!w.contains('\n'), "{w}");
            assert!(w.contains(" ignored: "), "{w}");
            assert!(w.starts_with("--") && w.contains("(SEALED_SECRETS_"), "{w}");
        }
        assert!(
            c.warnings[0].contains("owner reference"),
            "{:?}",
            c.warnings
        );
        // Values that are what kseal does anyway warn about nothing.
        let c = Config::parse(
            args(&[
                "--old-gc-behavior=false",
                "--watch-for-secrets",
                "--log-info-stdout=false",
            ]),
            None,
            &host(),
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    fn bitnami_env(vars: &[(&str, &str)], kseal: &[&str]) -> BitnamiEnv {
        BitnamiEnv {
            vars: vars
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            kseal_set: kseal.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    fn argv(list: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("controller")
            .chain(list.iter().copied())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn bitnami_variables_become_flags_below_the_command_line_and_kseals_variables() {
        let env = bitnami_env(
            &[
                ("SEALED_SECRETS_KEY_SIZE", "2048"),
                ("SEALED_SECRETS_UPDATE_STATUS", "false"),
                ("SEALED_SECRETS_KEY_PREFIX", "from-bitnami"),
                ("SEALED_SECRETS_ROTATE_PERIOD", "24h"),
                ("SEALED_SECRETS_LABEL_SELECTOR", ""),
                ("SEALED_SECRETS_LISTEN_ADDR", ":9443"),
                (
                    "SEALED_SECRETS_KEY_CUTOFF_TIME",
                    "via Host::key_cutoff_time",
                ),
            ],
            &[env::KSEAL_KEY_SIZE],
        );
        let flags = env
            .flags(&argv(&[
                "--key-prefix",
                "from-flag",
                "--key-renew-period=1h",
            ]))
            .unwrap();
        // KEY_SIZE: KSEAL_KEY_SIZE wins; KEY_PREFIX and ROTATE_PERIOD: the command line
        // (an alias counts) wins; empty and the cutoff variable: not here.
        assert_eq!(flags, ["--update-status=false", "--listen-addr=:9443"]);
        let mut list = vec!["--key-prefix", "from-flag"];
        list.extend(flags.iter().map(String::as_str));
        let c = Config::parse(
            args(&list),
            None,
            &Host {
                bitnami: env,
                ..host()
            },
        )
        .unwrap();
        assert!(!c.update_status);
        assert_eq!(c.key_prefix, "from-flag");
        assert_eq!(c.listen_addr, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(
            c.warnings,
            ["SEALED_SECRETS_KEY_SIZE ignored: KSEAL_KEY_SIZE is set and wins"]
        );
    }

    #[test]
    fn a_bad_bitnami_variable_is_named_and_unknown_ones_warn() {
        let env = bitnami_env(&[("SEALED_SECRETS_KEY_SIZE", "big")], &[]);
        let e = env.flags(&argv(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid SEALED_SECRETS_KEY_SIZE: invalid value 'big' for '--key-size <KEY_SIZE>': invalid digit found in string"
        );
        let env = bitnami_env(&[("SEALED_SECRETS_LISTEN_ADDR", "localhost:80")], &[]);
        let e = env.flags(&argv(&[])).unwrap_err().to_string();
        assert!(e.starts_with("invalid SEALED_SECRETS_LISTEN_ADDR: "), "{e}");
        let env = bitnami_env(
            &[
                ("SEALED_SECRETS_KEY_SIZ", "2048"),
                ("SEALED_SECRETS_VERSION", "true"),
            ],
            &[],
        );
        assert!(env.flags(&argv(&[])).unwrap().is_empty());
        let c = Config::parse(
            args(&[]),
            None,
            &Host {
                bitnami: env,
                ..host()
            },
        )
        .unwrap();
        assert_eq!(
            c.warnings,
            [
                "SEALED_SECRETS_KEY_SIZ ignored: Bitnami's controller has no flag --key-siz (docs/bitnami.md lists those kseal reads)",
                "SEALED_SECRETS_VERSION ignored: run `kseal-controller --version` to print the version"
            ]
        );
    }
}
