//! Every environment variable `kseal-controller` reads, declared once.

/// Namespace the controller runs in (set by the Downward API); holds the key Secrets.
pub(crate) const POD_NAMESPACE: &str = "POD_NAMESPACE";
/// Name of this pod (Downward API); the leader-election identity.
pub(crate) const POD_NAME: &str = "POD_NAME";
/// Host name; with a random suffix, the leader-election identity when `POD_NAME` is unset.
pub(crate) const HOSTNAME: &str = "HOSTNAME";

/// `--key-prefix`.
pub(crate) const KSEAL_KEY_PREFIX: &str = "KSEAL_KEY_PREFIX";
/// `--key-size`.
pub(crate) const KSEAL_KEY_SIZE: &str = "KSEAL_KEY_SIZE";
/// `--key-ttl`.
pub(crate) const KSEAL_KEY_TTL: &str = "KSEAL_KEY_TTL";
/// `--my-cn`.
pub(crate) const KSEAL_MY_CN: &str = "KSEAL_MY_CN";
/// `--privatekey-labels`.
pub(crate) const KSEAL_PRIVATEKEY_LABELS: &str = "KSEAL_PRIVATEKEY_LABELS";
/// `--privatekey-annotations`.
pub(crate) const KSEAL_PRIVATEKEY_ANNOTATIONS: &str = "KSEAL_PRIVATEKEY_ANNOTATIONS";
/// `--key-order-priority`.
pub(crate) const KSEAL_KEY_ORDER_PRIORITY: &str = "KSEAL_KEY_ORDER_PRIORITY";
/// `--generate-key-if-missing`.
pub(crate) const KSEAL_GENERATE_KEY_IF_MISSING: &str = "KSEAL_GENERATE_KEY_IF_MISSING";
/// `--key-source`.
pub(crate) const KSEAL_KEY_SOURCE: &str = "KSEAL_KEY_SOURCE";
/// `--key-source-interval`.
pub(crate) const KSEAL_KEY_SOURCE_INTERVAL: &str = "KSEAL_KEY_SOURCE_INTERVAL";
/// `--key-source-retire-grace`.
pub(crate) const KSEAL_KEY_SOURCE_RETIRE_GRACE: &str = "KSEAL_KEY_SOURCE_RETIRE_GRACE";
/// `--key-source-refresh-spacing`.
pub(crate) const KSEAL_KEY_SOURCE_REFRESH_SPACING: &str = "KSEAL_KEY_SOURCE_REFRESH_SPACING";
/// `--ring-anchor`.
pub(crate) const KSEAL_RING_ANCHOR: &str = "KSEAL_RING_ANCHOR";
/// `--aws-region`.
pub(crate) const KSEAL_AWS_REGION: &str = "KSEAL_AWS_REGION";
/// `--aws-endpoint-url`.
pub(crate) const KSEAL_AWS_ENDPOINT_URL: &str = "KSEAL_AWS_ENDPOINT_URL";
/// `--aws-assume-role`.
pub(crate) const KSEAL_AWS_ASSUME_ROLE: &str = "KSEAL_AWS_ASSUME_ROLE";
/// `--key-renew-period` (alias `--rotate-period`).
pub(crate) const KSEAL_KEY_RENEW_PERIOD: &str = "KSEAL_KEY_RENEW_PERIOD";
/// `--key-cutoff-time`.
pub(crate) const KSEAL_KEY_CUTOFF_TIME: &str = "KSEAL_KEY_CUTOFF_TIME";
/// Bitnami's name for `--key-cutoff-time`, read when neither the flag nor
/// [`KSEAL_KEY_CUTOFF_TIME`] is set.
pub(crate) const SEALED_SECRETS_KEY_CUTOFF_TIME: &str = "SEALED_SECRETS_KEY_CUTOFF_TIME";
/// `--accept-deprecated-v1-data`.
pub(crate) const KSEAL_ACCEPT_DEPRECATED_V1_DATA: &str = "KSEAL_ACCEPT_DEPRECATED_V1_DATA";
/// `--all-namespaces`.
pub(crate) const KSEAL_ALL_NAMESPACES: &str = "KSEAL_ALL_NAMESPACES";
/// `--additional-namespaces`.
pub(crate) const KSEAL_ADDITIONAL_NAMESPACES: &str = "KSEAL_ADDITIONAL_NAMESPACES";
/// `--label-selector`.
pub(crate) const KSEAL_LABEL_SELECTOR: &str = "KSEAL_LABEL_SELECTOR";
/// `--update-status`.
pub(crate) const KSEAL_UPDATE_STATUS: &str = "KSEAL_UPDATE_STATUS";
/// `--skip-recreate`.
pub(crate) const KSEAL_SKIP_RECREATE: &str = "KSEAL_SKIP_RECREATE";
/// `--drift-correction`.
pub(crate) const KSEAL_DRIFT_CORRECTION: &str = "KSEAL_DRIFT_CORRECTION";
/// `--resync-period`.
pub(crate) const KSEAL_RESYNC_PERIOD: &str = "KSEAL_RESYNC_PERIOD";
/// `--concurrency`.
pub(crate) const KSEAL_CONCURRENCY: &str = "KSEAL_CONCURRENCY";
/// `--async-threads`.
pub(crate) const KSEAL_ASYNC_THREADS: &str = "KSEAL_ASYNC_THREADS";
/// `--pending-values-mib`.
pub(crate) const KSEAL_PENDING_VALUES_MIB: &str = "KSEAL_PENDING_VALUES_MIB";
/// `--rate-limit`.
pub(crate) const KSEAL_RATE_LIMIT: &str = "KSEAL_RATE_LIMIT";
/// `--rate-limit-burst`.
pub(crate) const KSEAL_RATE_LIMIT_BURST: &str = "KSEAL_RATE_LIMIT_BURST";
/// `--max-request-items`.
pub(crate) const KSEAL_MAX_REQUEST_ITEMS: &str = "KSEAL_MAX_REQUEST_ITEMS";
/// `--trusted-proxies`.
pub(crate) const KSEAL_TRUSTED_PROXIES: &str = "KSEAL_TRUSTED_PROXIES";
/// `--max-connections`.
pub(crate) const KSEAL_MAX_CONNECTIONS: &str = "KSEAL_MAX_CONNECTIONS";
/// `--max-connections-per-client`.
pub(crate) const KSEAL_MAX_CONNECTIONS_PER_CLIENT: &str = "KSEAL_MAX_CONNECTIONS_PER_CLIENT";
/// `--metrics-max-connections`.
pub(crate) const KSEAL_METRICS_MAX_CONNECTIONS: &str = "KSEAL_METRICS_MAX_CONNECTIONS";
/// `--header-read-timeout`.
pub(crate) const KSEAL_HEADER_READ_TIMEOUT: &str = "KSEAL_HEADER_READ_TIMEOUT";
/// `--listen-addr`.
pub(crate) const KSEAL_LISTEN_ADDR: &str = "KSEAL_LISTEN_ADDR";
/// `--listen-metrics-addr`.
pub(crate) const KSEAL_LISTEN_METRICS_ADDR: &str = "KSEAL_LISTEN_METRICS_ADDR";
/// `--leader-elect`.
pub(crate) const KSEAL_LEADER_ELECT: &str = "KSEAL_LEADER_ELECT";
/// `--leader-election-lease`.
pub(crate) const KSEAL_LEADER_ELECTION_LEASE: &str = "KSEAL_LEADER_ELECTION_LEASE";
/// `--log-format`.
pub(crate) const KSEAL_LOG_FORMAT: &str = "KSEAL_LOG_FORMAT";
/// `--log-level` (a `RUST_LOG`-style filter).
pub(crate) const KSEAL_LOG_LEVEL: &str = "KSEAL_LOG_LEVEL";
