//! Every environment variable the `kseal` binary reads, declared once.

/// Certificate to seal with (`--cert`).
pub(crate) const KSEAL_CERT: &str = "KSEAL_CERT";
/// Output format (`--format`).
pub(crate) const KSEAL_FORMAT: &str = "KSEAL_FORMAT";
/// Sealing scope (`--scope`).
pub(crate) const KSEAL_SCOPE: &str = "KSEAL_SCOPE";
/// Namespace (`--namespace`).
pub(crate) const KSEAL_NAMESPACE: &str = "KSEAL_NAMESPACE";
/// Private key files for `unseal` (`--key`), separated by commas.
pub(crate) const KSEAL_KEY: &str = "KSEAL_KEY";
/// Key size for `keys generate` (`--key-size`).
pub(crate) const KSEAL_KEY_SIZE: &str = "KSEAL_KEY_SIZE";
/// Certificate common name for `keys generate` (`--common-name`).
pub(crate) const KSEAL_COMMON_NAME: &str = "KSEAL_COMMON_NAME";
/// Certificate validity in days for `keys generate` (`--validity-days`).
pub(crate) const KSEAL_VALIDITY_DAYS: &str = "KSEAL_VALIDITY_DAYS";
/// Directory for `quickstart` (`--dir`).
pub(crate) const KSEAL_QUICKSTART_DIR: &str = "KSEAL_QUICKSTART_DIR";
