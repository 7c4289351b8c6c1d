//! `kseal-keystore`: the fleet key ring, stored once and read by every cluster.
//!
//! A ring with prefix `R` (default `kseal/fleet`) is one immutable secret per key,
//! `R/keys/<kid>` holding `{"crt","key"}`, and an index `R/index` holding only public
//! certificates and which key seals (see `docs/key-ring.md` in the repository). Two stores
//! implement it:
//!
//! - [`Store::SecretsManager`]: AWS Secrets Manager through the official SDK and the default
//!   credential chain (environment, profile and SSO, IRSA web identity, EKS Pod Identity,
//!   IMDS), with an optional role to assume;
//! - [`Store::Directory`]: a directory (`index.json`, `keys/<kid>/tls.{crt,key}`), for
//!   air-gapped clusters and for secrets mounted by the Secrets Store CSI driver.
//!
//! [`Ring`] implements the operations on top (push, activate, retire, import, fetch), with the
//! index written as a compare-and-swap so two writers never lose a key. [`fleet`] holds each
//! cluster's acknowledgement of the ring (SSM Parameter Store, or the ring's directory): reports,
//! never trust. Nothing here logs; errors never hold key material.

mod asm;
mod contract;
mod dir;
pub mod fleet;
mod location;
mod ring;
pub mod root;
pub mod trust;

pub use asm::{AsmStore, AwsOptions};
pub use contract::{INDEX_SCHEMA, Index, IndexEntry, KeyEntry, Kid, UNSIGNED_INDEX_SCHEMA};
pub use dir::{DIR_TIMEOUT, DirStore, MAX_FILE_BYTES};
pub use fleet::{Ack, ClusterId, FleetStore, Listed};
pub use location::{DEFAULT_RING, Location};
pub use ring::{
    ActivateOutcome, DEFAULT_ACTIVATION_DELAY, DEFAULT_INDEX_LIFETIME, MAX_INDEX_LIFETIME,
    MIN_INDEX_LIFETIME, Marker, PushOutcome, RetireOutcome, Ring, SignOutcome, Snapshot, Vouch,
    not_vouched, restore_vouched,
};
pub use root::{RootKey, RootSigner};
pub use trust::{Trust, Verified};

/// The store behind a ring.
#[derive(Debug, Clone)]
pub enum Store {
    /// AWS Secrets Manager.
    SecretsManager(AsmStore),
    /// A directory.
    Directory(DirStore),
}

/// An opaque version of the index: Secrets Manager's `VersionId` of `AWSCURRENT`, or a hash of
/// the directory store's index file. Equal versions mean equal content.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether writing a key secret created it or found the same key already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Newly stored.
    Created,
    /// The same key was already stored (pushing twice is a no-op).
    Existed,
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the key store. Messages name the secret or file and the operation, never key
/// material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A secret or file does not exist.
    #[error("{what} does not exist in {store}")]
    NotFound {
        /// The secret name or path.
        what: String,
        /// The store, e.g. `AWS Secrets Manager (eu-west-1)`.
        store: String,
    },
    /// The caller's identity may not do this (IAM, KMS or resource policy).
    #[error("access denied: {operation} on {what}")]
    AccessDenied {
        /// The API operation.
        operation: &'static str,
        /// The secret name.
        what: String,
        /// The service's answer.
        #[source]
        source: BoxError,
    },
    /// No credentials could be found by the default chain.
    #[error(
        "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run with IRSA / EKS Pod Identity"
    )]
    NoCredentials(#[source] BoxError),
    /// No region is configured.
    #[error("no AWS region: pass --aws-region, add ?region= to the ring URL, or set AWS_REGION")]
    NoRegion,
    /// Secrets Manager throttled the call (after the SDK's own retries).
    #[error("Secrets Manager throttled {operation} on {what}")]
    Throttled {
        /// The API operation.
        operation: &'static str,
        /// The secret name.
        what: String,
    },
    /// The endpoint could not be reached or did not answer in time.
    #[error("cannot reach Secrets Manager for {operation} on {what}")]
    Network {
        /// The API operation.
        operation: &'static str,
        /// The secret name.
        what: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// Any other service or SDK failure.
    #[error("{operation} on {what} failed")]
    Service {
        /// The API operation.
        operation: &'static str,
        /// The secret name.
        what: String,
        /// The service's answer.
        #[source]
        source: BoxError,
    },
    /// Another writer changed the index between our read and our write.
    #[error("{what} was changed by another writer meanwhile")]
    Conflict {
        /// The index name.
        what: String,
    },
    /// A document is not what the contract says.
    #[error("{what} is malformed: {reason}")]
    Malformed {
        /// The secret name or path.
        what: String,
        /// Why (never quotes the content).
        reason: String,
    },
    /// A key could not be used.
    #[error("the key in {what} was rejected: {reason}")]
    BadKey {
        /// The secret name or path.
        what: String,
        /// Why (never quotes the content).
        reason: String,
    },
    /// The index's history does not check out against what the reader trusts: a bad or
    /// missing signature, a chain that does not start at the pinned anchor, a rollback.
    #[error("{what} is not trusted: {reason}")]
    Untrusted {
        /// The index name.
        what: String,
        /// What failed (which signature, which entry).
        reason: String,
    },
    /// Not a kid.
    #[error("invalid key id {0:?}: expected 64 lowercase hex characters")]
    InvalidKid(String),
    /// No key of the ring matches.
    #[error("no key {0} in the ring")]
    UnknownKey(String),
    /// A ring operation was refused; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// A ring location could not be parsed.
    #[error("invalid ring location {location:?}: {reason}")]
    Location {
        /// What was given.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// A file operation failed.
    #[error("failed to {action} {path}")]
    Io {
        /// What was being done, e.g. `read`.
        action: &'static str,
        /// The path.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A short stable name of the failure, for metrics labels and readiness reasons:
    /// `not_found`, `access_denied`, `no_credentials`, `throttled`, `network`, `service`,
    /// `conflict`, `malformed`, `bad_key`, `untrusted`, `invalid`, `io`.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::AccessDenied { .. } => "access_denied",
            Error::NoCredentials(_) | Error::NoRegion => "no_credentials",
            Error::Throttled { .. } => "throttled",
            Error::Network { .. } => "network",
            Error::Service { .. } => "service",
            Error::Conflict { .. } => "conflict",
            Error::Malformed { .. } => "malformed",
            Error::BadKey { .. } => "bad_key",
            Error::Untrusted { .. } => "untrusted",
            Error::InvalidKid(_)
            | Error::UnknownKey(_)
            | Error::Refused(_)
            | Error::Location { .. } => "invalid",
            Error::Io { .. } => "io",
        }
    }

    /// Whether retrying later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Throttled { .. }
                | Error::Network { .. }
                | Error::Service { .. }
                | Error::Conflict { .. }
        )
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Store {
    /// Opens the store a [`Location`] names.
    pub async fn open(location: &Location, aws: &AwsOptions) -> Result<Self> {
        match location {
            Location::SecretsManager { region, .. } => {
                let mut aws = aws.clone();
                if let Some(region) = region {
                    aws.region = Some(region.clone());
                }
                Ok(Store::SecretsManager(AsmStore::connect(&aws).await?))
            }
            Location::Directory {
                path,
                insecure_perms,
            } => Ok(Store::Directory(
                DirStore::new(path.clone()).insecure_perms(*insecure_perms),
            )),
        }
    }

    /// A human description, e.g. `AWS Secrets Manager (eu-west-1)`.
    pub fn describe(&self) -> String {
        match self {
            Store::SecretsManager(s) => s.describe(),
            Store::Directory(s) => s.describe(),
        }
    }

    /// The current version of the secret `name` (one cheap metadata call), or `None` when it
    /// does not exist.
    pub async fn current_version(&self, name: &str) -> Result<Option<Version>> {
        match self {
            Store::SecretsManager(s) => s.current_version(name).await,
            Store::Directory(s) => s.current_version(name).await,
        }
    }

    /// Reads the secret `name` at `version` (the current one when `None`), with the version
    /// read; `None` when it does not exist.
    pub async fn read(
        &self,
        name: &str,
        version: Option<&Version>,
    ) -> Result<Option<(zeroize::Zeroizing<String>, Version)>> {
        match self {
            Store::SecretsManager(s) => s.read(name, version).await,
            Store::Directory(s) => s.read(name).await,
        }
    }

    /// The version of the secret `name` before its current one (Secrets Manager's
    /// `AWSPREVIOUS`); `None` where there is none, and always on a directory (no history).
    pub async fn read_previous(
        &self,
        name: &str,
    ) -> Result<Option<(zeroize::Zeroizing<String>, Version)>> {
        match self {
            Store::SecretsManager(s) => s.read_previous(name).await,
            Store::Directory(_) => Ok(None),
        }
    }

    /// The ids of the stored versions of the secret `name`, every one the store keeps
    /// (Secrets Manager: deprecated ones, with no staging label, included; about 100), at most
    /// `limit + 1`: more than `limit` means there are more than `limit`. Empty where there is
    /// none, and always on a directory (no history).
    pub async fn versions(&self, name: &str, limit: usize) -> Result<Vec<Version>> {
        match self {
            Store::SecretsManager(s) => s.versions(name, limit.saturating_add(1)).await,
            Store::Directory(_) => Ok(Vec::new()),
        }
    }

    /// Replaces the secret `name` with `text` only if its current version is still `expected`
    /// (`None`: only if it does not exist). [`Error::Conflict`] otherwise.
    pub async fn compare_and_swap(
        &self,
        name: &str,
        text: &str,
        expected: Option<&Version>,
        tags: &[(&str, &str)],
    ) -> Result<Version> {
        match self {
            Store::SecretsManager(s) => s.compare_and_swap(name, text, expected, tags).await,
            Store::Directory(s) => s.compare_and_swap(name, text, expected).await,
        }
    }

    /// Creates the immutable secret `name` holding `text` (`token`: Secrets Manager's
    /// `ClientRequestToken`). When it exists already, `same` decides whether it holds the same
    /// thing ([`Put::Existed`], a no-op) or not ([`Error::Refused`]); a secret scheduled for
    /// deletion is refused too.
    pub async fn create_immutable(
        &self,
        name: &str,
        text: &str,
        token: &str,
        tags: &[(&str, &str)],
        same: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Put> {
        match self {
            Store::SecretsManager(s) => s.create_immutable(name, text, token, tags, same).await,
            Store::Directory(s) => s.create_immutable(name, text, same).await,
        }
    }

    /// Writes the mutable secret `name` (creating it if needed); for keeping a legacy single
    /// secret in step.
    pub async fn put(&self, name: &str, text: &str, tags: &[(&str, &str)]) -> Result<()> {
        match self {
            Store::SecretsManager(s) => s.put(name, text, tags).await,
            Store::Directory(s) => s.put(name, text).await,
        }
    }

    /// Schedules the deletion of the secret `name` after `recovery_days` (Secrets Manager's
    /// recovery window, 7 to 30 days; a directory store moves it under `retired/`). On Secrets
    /// Manager the secret's replicas in other regions are removed first (Secrets Manager does
    /// not delete a replicated secret; replicas go at once, the primary stays recoverable), and
    /// a secret already scheduled for deletion is left as it is.
    pub async fn schedule_deletion(&self, name: &str, recovery_days: u32) -> Result<()> {
        match self {
            Store::SecretsManager(s) => s.schedule_deletion(name, recovery_days).await,
            Store::Directory(s) => s.schedule_deletion(name).await,
        }
    }
}
