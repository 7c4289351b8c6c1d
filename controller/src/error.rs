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
    /// A ring bound to other namespaces (`--ring-namespaces`, `--ring-namespace-selector`)
    /// holds the key the value names, or no key that opens in its namespace decrypts it.
    #[error("failed to unseal: {reason}")]
    RingBinding {
        /// Which binding refused (ring names, bindings, the namespace; no secret material).
        reason: String,
        /// The decryption error, when keys were tried.
        #[source]
        source: Option<Box<kseal_api::Error>>,
    },
    /// No loaded key opened the object, and the key its `kseal.dev/sealing-key` annotation
    /// names is a key of the fleet ring's verified index that is not loaded in this cluster.
    #[error(
        "failed to unseal: key {key}, which its kseal.dev/sealing-key annotation names, is in ring {ring}'s verified index but not loaded in this cluster (its mirror Secret in the controller namespace is missing or could not be written; the metrics port's /readyz says why)"
    )]
    KeyNotLoaded {
        /// The key, as the annotation names it.
        key: String,
        /// The ring whose index lists it.
        ring: String,
    },
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
            Error::Unseal(_)
            | Error::KeyNotLoaded { .. }
            | Error::RingBinding { .. }
            | Error::NoKeys
            | Error::DeprecatedDataRejected => "unseal",
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

/// An error and its sources on one line (`a: b: c`), for logs and status messages, each cause
/// once. Kubernetes API errors show the server's message and reason. A template that failed
/// while rendering shows only that it failed ([`kseal_api::TEMPLATE_FAILED`]): its text could
/// depend on the values. Whatever the API server or a parser quoted from object data (a
/// Secret's value) is removed (`scrub::scrub`): the text is safe for SealedSecret status,
/// Events, logs and HTTP answers.
///
/// Many errors both write their source into their own message and return it as the source
/// (kube's `ServiceError: {0}` and `ApiError: {0} ({0:?})`, kube-runtime's watcher errors,
/// most `thiserror` types with `: {0}`), which a plain walk of `source()` prints two or three
/// times over. The rule is the CLI's (`kseal_cli`'s `text::chain`): a cause whose text the
/// line already holds is left out (and so is an empty one). One step comes before it, because
/// an error here is not always shown as its `Display` writes it (an API error shows its
/// message and reason, not kube's dump of the whole `Status`): a message that ends with its
/// source's text (after a `:`) loses that end, and the source then says it in its own form.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let (text, last) = shown(e);
        let source = e.source().filter(|_| !last);
        let text = match source {
            Some(source) => without_source(&text, &source.to_string()),
            None => &text,
        };
        if !text.is_empty() && !out.contains(text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(text);
        }
        next = source;
    }
    scrub::scrub(&out)
}

/// How one error of a chain is shown, and whether the chain ends with it.
fn shown(e: &(dyn std::error::Error + 'static)) -> (String, bool) {
    if let Some(api) = e.downcast_ref::<kseal_api::Error>()
        && api.depends_on_values()
    {
        // A template that failed against the values: its text could be an oracle for
        // them (see `kseal_api::Error::depends_on_values`).
        return (kseal_api::TEMPLATE_FAILED.to_owned(), true);
    }
    match e.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => (
            format!("{} ({} {})", status.message, status.code, status.reason),
            true,
        ),
        _ => (e.to_string(), false),
    }
}

/// `text` without the `source` text it ends with (`failed to list: ServiceError: …` →
/// `failed to list`), when a `:` (or nothing) comes before it; else `text` as it is.
fn without_source<'a>(text: &'a str, source: &str) -> &'a str {
    if source.is_empty() {
        return text;
    }
    match text.strip_suffix(source).map(str::trim_end) {
        Some("") => "",
        Some(head) => head.strip_suffix(':').map_or(text, str::trim_end),
        None => text,
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and an optional source; `repeat` writes the source's text
    /// into the message too (as kube, hyper and most `thiserror` types with `: {0}` do).
    #[derive(Debug)]
    struct Layer {
        message: &'static str,
        repeat: bool,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    }

    impl Layer {
        fn new(message: &'static str) -> Self {
            Self {
                message,
                repeat: false,
                source: None,
            }
        }

        fn over(
            message: &'static str,
            source: impl std::error::Error + Send + Sync + 'static,
        ) -> Self {
            Self {
                message,
                repeat: false,
                source: Some(Box::new(source)),
            }
        }

        fn repeating(mut self) -> Self {
            self.repeat = true;
            self
        }
    }

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.message)?;
            match &self.source {
                Some(source) if self.repeat && self.message.is_empty() => write!(f, "{source}"),
                Some(source) if self.repeat => write!(f, ": {source}"),
                _ => Ok(()),
            }
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source.as_deref().map(|s| s as _)
        }
    }

    #[test]
    fn a_chain_without_repeats_keeps_every_cause() {
        let error = Layer::over("a", Layer::over("b", Layer::new("c")));
        assert_eq!(error_chain(&error), "a: b: c");
    }

    #[test]
    fn causes_written_into_their_parents_message_are_printed_once() {
        // As kube-runtime's watcher error over kube's ServiceError over hyper-util's error:
        // each layer writes its source into its own message and returns it as the source.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let error = Layer::over(
            "failed to perform initial object list",
            Layer::over(
                "ServiceError",
                Layer::over(
                    "client error (Connect)",
                    Layer::over("tcp connect error", io),
                ),
            )
            .repeating(),
        )
        .repeating();
        assert_eq!(
            error.to_string(),
            "failed to perform initial object list: ServiceError: client error (Connect)"
        );
        assert_eq!(
            error_chain(&error),
            "failed to perform initial object list: ServiceError: client error (Connect): tcp connect error: connection refused"
        );
    }

    #[test]
    fn a_wrapper_that_only_repeats_its_source_adds_nothing() {
        // `#[error(transparent)]`-like: the message is the source's text.
        let error = Layer::over(
            "reading the ring",
            Layer::over("", Layer::new("denied")).repeating(),
        );
        assert_eq!(error_chain(&error), "reading the ring: denied");
        // A cause the line already holds elsewhere than at its end is left out too.
        let error = Layer::over("denied (reading the ring)", Layer::new("denied"));
        assert_eq!(error_chain(&error), "denied (reading the ring)");
        // A message that merely ends with the same word as its source, without a `:`
        // before it, keeps it; the source is then already on the line.
        let error = Layer::over("no such file", Layer::new("file"));
        assert_eq!(error_chain(&error), "no such file");
    }

    #[test]
    fn an_api_error_shows_its_message_and_reason_once_not_kubes_dump_of_the_status() {
        let status = kube::core::Status::failure(
            r#"sealedsecrets.bitnami.com is forbidden: User "system:serviceaccount:kseal:kseal" cannot list resource "sealedsecrets""#,
            "Forbidden",
        )
        .with_code(403)
        .boxed();
        let error = kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(status));
        assert!(error.to_string().contains("Status {"), "{error}");
        assert_eq!(
            error_chain(&error),
            r#"failed to perform initial object list: sealedsecrets.bitnami.com is forbidden: User "system:serviceaccount:kseal:kseal" cannot list resource "sealedsecrets" (403 Forbidden)"#
        );
        let error = Error::GetSecret(kube::Error::Api(
            kube::core::Status::failure(r#"secrets "s" not found"#, "NotFound")
                .with_code(404)
                .boxed(),
        ));
        assert_eq!(
            error_chain(&error),
            r#"failed to get secret: secrets "s" not found (404 NotFound)"#
        );
    }

    /// A real kube client error: a request to a port nothing listens on.
    #[tokio::test]
    async fn a_refused_connection_to_the_api_server_names_its_cause_once() {
        use k8s_openapi::api::core::v1::Namespace;
        // A port that was free a moment ago: nothing listens on it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let refused = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        let url: http::Uri = format!("http://127.0.0.1:{port}").parse().unwrap();
        let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
        let list = || async {
            kube::Api::<Namespace>::all(client.clone())
                .list(&Default::default())
                .await
                .unwrap_err()
        };
        let cause = format!("client error (Connect): tcp connect error: {refused}");
        assert_eq!(error_chain(&list().await), format!("ServiceError: {cause}"));
        let watch = kube::runtime::watcher::Error::InitialListFailed(list().await);
        assert_eq!(
            error_chain(&watch),
            format!("failed to perform initial object list: ServiceError: {cause}")
        );
        assert_eq!(
            error_chain(&Error::Kube(list().await)),
            format!("kubernetes API request failed: ServiceError: {cause}")
        );
    }
}
