//! `kseal-controller`: watches `SealedSecret`s and writes the Secrets they seal.
//!
//! Modules:
//! - [`config`]: flags (Bitnami's names where the meaning is the same) → validated [`Config`];
//! - [`state`]: what the reconciler, the HTTP server and the key loader share;
//! - [`keys`]: loading the key ring from labelled key Secrets, hot reload, optional generation
//!   and renewal;
//! - [`remote`]: the fleet key ring as a key source (`--key-source`), mirrored into key
//!   Secrets;
//! - [`ringview`]: what the controller trusts about the fleet ring (its index), and the
//!   ring-state Secret replicas share it through;
//! - [`renewal`]: when a new key is due (Bitnami's `--key-renew-period`, `--key-cutoff-time`);
//! - [`reconcile`]: the kube-runtime `Controller` and `reconcile`;
//! - [`sealedcache`]: SealedSecrets as the store keeps them (compact; synced ones without
//!   their encrypted values); [`secretcache`]: Secrets as their watch delivered them, without
//!   data;
//! - [`admission`]: how many SealedSecrets kube-runtime's scheduler holds at once;
//! - [`affinity`]: which keys opened unhinted values lately, tried first for the next ones;
//! - [`formats`]: the spec digest and data MAC stored on written Secrets, byte by byte;
//! - [`http`]: `/healthz`, `/readyz`, `/v1/cert.pem`, `/v1/verify`, `/v1/rotate`, `/metrics`;
//! - [`rsapool`]: the RSA slots the reconciler and the HTTP API share, reconciles first;
//! - [`ratelimit`]: the per-client (IPv4 address, IPv6 /64) limiter of the HTTP API;
//! - [`metrics`]: Prometheus metrics (Bitnami's names plus kseal's);
//! - [`scrub`]: error text that may quote Secret data, made safe for status, Events, logs
//!   and HTTP answers;
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease;
//! - [`leadership`]: leadership as an event ([`leadership::Term`]) and the fence every write
//!   goes through;
//! - [`apihealth`]: whether the API server answers, and errors repeated in a burst logged
//!   once with a count;
//! - [`writes`]: the reconciler's writes, reading back only the resourceVersion of the answer;
//! - leaf modules every task shares without importing each other: [`keylayout`] (the key
//!   Secret layout), [`timing`] (jitter), [`signals`] (requests between tasks).

pub mod admission;
pub mod affinity;
pub mod apihealth;
pub mod config;
pub mod conn;
pub mod env;
pub mod formats;
pub mod http;
pub mod keylayout;
pub mod keys;
pub mod leader;
pub mod leadership;
pub mod metrics;
pub mod ratelimit;
pub mod reconcile;
pub mod remote;
pub mod renewal;
pub mod ringview;
pub mod rsapool;
pub mod scrub;
pub mod sealedcache;
pub mod secretcache;
pub mod signals;
pub mod state;
pub mod timing;
pub mod wire;
pub mod writes;

pub use config::Config;
pub use state::State;

/// What `kseal-controller --version` prints after the name: the package version, then the
/// commit, the release date (only with `SOURCE_DATE_EPOCH`) and the target (see `build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("KSEAL_BUILD_INFO"),
    ")"
);

/// The git commit the binary was built from (`unknown` without git or `KSEAL_GIT_COMMIT`).
pub const COMMIT: &str = env!("KSEAL_BUILD_COMMIT");

/// Errors of the controller. Each variant names the step that failed; messages never hold
/// secret material (plaintext, private keys).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the Secret a SealedSecret owns failed.
    #[error("failed to get secret")]
    GetSecret(#[source] kube::Error),
    /// Creating, updating or patching the Secret failed.
    #[error("failed to write secret")]
    ApplySecret(#[source] kube::Error),
    /// The Secret exists and is not owned by this SealedSecret (and not marked managed/patch).
    #[error("resource {name:?} already exists and is not managed by SealedSecret")]
    Unmanaged {
        /// Name of the existing Secret.
        name: String,
    },
    /// Decrypting or rendering failed.
    #[error("failed to unseal")]
    Unseal(#[source] kseal_api::Error),
    /// Writing the SealedSecret's status failed.
    #[error("failed to update status")]
    Status(#[source] kube::Error),
    /// Loading keys failed.
    #[error("failed to load keys")]
    FetchKeys(#[source] kube::Error),
    /// No key is loaded yet.
    #[error("no sealing keys are loaded")]
    NoKeys,
    /// The object lacks a name or namespace (cannot happen for objects from the API server).
    #[error("object has no {0}")]
    MissingMetadata(&'static str),
    /// A Kubernetes API call failed.
    #[error("kubernetes API request failed")]
    Kube(#[source] kube::Error),
    /// The existing Secret is immutable and its data would change.
    #[error(
        "secret {name:?} is immutable and its data would change: delete it to let the controller re-create it"
    )]
    Immutable {
        /// Name of the Secret.
        name: String,
    },
    /// Generating or encoding a new key failed.
    #[error("failed to generate a key")]
    KeyGeneration,
    /// A background task (RSA work on the RSA pool's threads) panicked or could not start.
    #[error("internal task failed")]
    Task,
    /// A SealedSecret kept in the controller's cache no longer parses (cannot happen: the
    /// controller wrote that JSON itself; see [`sealedcache`]).
    #[error("cached SealedSecret does not parse")]
    Cache(#[source] serde_json::Error),
    /// Internal to a reconcile: the cached SealedSecret was kept without its encrypted values
    /// and they are needed; the reconcile reads the object whole and goes on (see
    /// [`sealedcache`]).
    #[error("the cached SealedSecret holds no encrypted values")]
    Incomplete,
    /// The SealedSecret uses the deprecated whole-Secret `spec.data` and the controller runs
    /// with `--accept-deprecated-v1-data=false`. Checked before anything else, so a v1
    /// SealedSecret synced earlier stops too: its Secret is kept as it is, never updated.
    #[error(
        "the deprecated field 'data' is not accepted (--accept-deprecated-v1-data=false): an existing Secret is kept as it is but no longer updated; re-seal the Secret into spec.encryptedData"
    )]
    DeprecatedDataRejected,
    /// Binding or serving an HTTP listener failed.
    #[error("failed to serve HTTP on {addr}")]
    Serve {
        /// The listen address.
        addr: std::net::SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the leader-election Lease failed.
    #[error("leader election failed")]
    LeaderElection(#[source] kube::Error),
    /// A write was refused because this replica's leadership ended (or its term changed, or
    /// its local lease deadline passed) since the work began.
    #[error("write refused: leadership lost")]
    Fenced(#[source] leadership::Fenced),
}

impl Error {
    /// The `reason` label of `sealed_secrets_controller_unseal_errors_total`
    /// (Bitnami's values where they exist).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::GetSecret(_) => "fetch",
            Error::ApplySecret(_) => "update",
            Error::Unmanaged { .. } => "unmanaged",
            Error::Unseal(_) | Error::NoKeys | Error::DeprecatedDataRejected => "unseal",
            Error::Status(_) => "status",
            Error::FetchKeys(_) => "keys",
            Error::MissingMetadata(_) => "invalid",
            Error::Kube(_) => "kube",
            Error::Immutable { .. } => "update",
            Error::KeyGeneration => "keys",
            Error::Task | Error::Cache(_) | Error::Incomplete => "internal",
            Error::Serve { .. } => "serve",
            Error::LeaderElection(_) => "leader",
            Error::Fenced(_) => "fenced",
        }
    }
}

/// An error and its sources on one line (`a: b: c`), for logs and status messages. Kubernetes
/// API errors show the server's message and reason. Whatever the API server or a parser quoted
/// from object data (a Secret's value) is removed ([`scrub::scrub`]): the text is safe for
/// SealedSecret status, Events, logs and HTTP answers.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        if !out.is_empty() {
            out.push_str(": ");
        }
        match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => {
                out.push_str(&format!(
                    "{} ({} {})",
                    status.message, status.code, status.reason
                ));
                break;
            }
            _ => out.push_str(&e.to_string()),
        }
        next = e.source();
    }
    scrub::scrub(&out)
}

/// The controller's loops, started together as the binary starts them.
#[derive(Debug)]
pub struct Tasks {
    /// The key loader: key Secrets, hot reload, optional generation ([`keys::run`]).
    pub keys: tokio::task::JoinHandle<()>,
    /// The key-source loop ([`remote::run`]; ends at once without `--key-source`).
    pub remote: tokio::task::JoinHandle<()>,
    /// The reconciler ([`reconcile::run`]).
    pub reconciler: tokio::task::JoinHandle<()>,
}

/// Starts the key loader (with `requests`, what SIGUSR1 asks for), the key-source loop and the
/// reconciler, until `shutdown` turns true. Leader election and the HTTP servers are the
/// caller's.
pub fn spawn(
    client: &kube::Client,
    config: &std::sync::Arc<Config>,
    state: &State,
    requests: keys::KeyRequests,
    shutdown: &tokio::sync::watch::Receiver<bool>,
) -> Tasks {
    Tasks {
        keys: tokio::spawn(keys::run(
            keys::SecretKeySource::new(client.clone(), config).reporting_to(state.clone()),
            state.clone(),
            config.clone(),
            requests,
            shutdown.clone(),
        )),
        remote: tokio::spawn(remote::run(
            client.clone(),
            config.clone(),
            state.clone(),
            shutdown.clone(),
        )),
        reconciler: tokio::spawn(reconcile::run(
            client.clone(),
            config.clone(),
            state.clone(),
            shutdown.clone(),
        )),
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
