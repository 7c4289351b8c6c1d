//! Flags and the validated configuration.
//!
//! Flag names follow Bitnami's controller where the meaning is the same, so existing
//! manifests and Helm values translate directly. Every flag can also be set from a `KSEAL_*`
//! environment variable (`crate::env`); a flag on the command line wins.
//!
//! This module holds the validated [`Config`], its error type and [`Config::parse`]; the flags
//! themselves are in `args`, Bitnami's `SEALED_SECRETS_*` variables and compatibility flags in
//! `bitnami`, the key Secret metadata and renewal settings in `keygen`, and the
//! `--key-source` rings with their pins and namespace bindings in `rings`. Everything public
//! is re-exported here, so `crate::config::X` names it wherever it lives.

mod args;
mod bitnami;
mod keygen;
mod rings;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use kseal_api::validation;

use crate::env;
use crate::keys::renewal::Renewal;

pub use self::args::{
    Args, DEFAULT_LOG_FILTER, KeyOrder, LogFormat, parse_duration, parse_listen_addr,
    parse_log_filter,
};
use self::bitnami::compat_warnings;
pub use self::bitnami::{BITNAMI_ENV_PREFIX, BITNAMI_FLAGS, BitnamiEnv, bitnami_variable};
pub use self::keygen::parse_cutoff_time;
use self::keygen::{key_metadata, key_renewal};
use self::rings::key_sources;

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    pub(super) fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["kseal-controller"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    /// A host that is not this process's: nothing read from the machine or the environment.
    pub(super) fn host() -> Host {
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
}
