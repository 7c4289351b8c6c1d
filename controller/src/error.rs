//! The controller's error type and the one-line, scrubbed form of an error chain that status,
//! Events, logs and HTTP answers show.

use crate::cluster::leadership;
use crate::scrub;

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
    /// controller wrote that JSON itself; see [`crate::cache::sealed`]).
    #[error("cached SealedSecret does not parse")]
    Cache(#[source] serde_json::Error),
    /// Internal to a reconcile: the cached SealedSecret was kept without its encrypted values
    /// and they are needed; the reconcile reads the object whole and goes on (see
    /// [`crate::cache::sealed`]).
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
/// API errors show the server's message and reason. A template that failed while rendering
/// shows only that it failed ([`kseal_api::TEMPLATE_FAILED`]): its text could depend on the
/// values. Whatever the API server or a parser quoted
/// from object data (a Secret's value) is removed (`scrub::scrub`): the text is safe for
/// SealedSecret status, Events, logs and HTTP answers.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        if !out.is_empty() {
            out.push_str(": ");
        }
        if let Some(api) = e.downcast_ref::<kseal_api::Error>()
            && api.depends_on_values()
        {
            // A template that failed against the values: its text could be an oracle for
            // them (see `kseal_api::Error::depends_on_values`).
            out.push_str(kseal_api::TEMPLATE_FAILED);
            break;
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

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
