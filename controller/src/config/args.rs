//! The command-line flags of `kseal-controller` ([`Args`], clap derive, each with its
//! `KSEAL_*` variable) and the value parsers they share: listen addresses in Bitnami's
//! `:PORT` form, log filters that take Bitnami's bare levels, and Go durations. Nothing here
//! checks one flag against another; [`super::Config::parse`] does.

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, ValueEnum};

use crate::env;

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

/// Parses a Go-style duration: `720h`, `1h30m`, `90s`, `500ms`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    kseal_api::duration::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::args;

    #[test]
    fn the_default_log_filter_parses_and_leaves_out_kubes_per_request_failures() {
        assert_eq!(args(&[]).log_level, DEFAULT_LOG_FILTER);
        let filter = tracing_subscriber::EnvFilter::try_new(DEFAULT_LOG_FILTER).unwrap();
        let text = filter.to_string();
        assert!(text.contains("kube_client::client::builder=off"), "{text}");
        assert!(text.starts_with("info") || text.contains(",info"), "{text}");
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
}
