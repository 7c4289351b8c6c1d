//! `kseal-controller`: watches `SealedSecret`s and writes the Secrets they seal.
//!
//! The folders are the controller's parts; each module's own doc says what it holds:
//! - [`reconcile`]: the reconcile loop: per-object state, the desired Secret, the MAC check,
//!   status and Events, what triggers a reconcile, admission, key affinity and the writes;
//! - [`cache`]: SealedSecrets and Secrets as the watch stores keep them (compact);
//! - [`keys`]: the key ring: loading labelled key Secrets, generation and renewal, the fleet
//!   ring as a key source (`--key-source`) and what the controller trusts about it;
//! - [`serve`]: the HTTP API (`/v1/cert.pem`, `/v1/verify`, `/v1/rotate`, `/metrics`, probes),
//!   its connections, per-client rate limit and the RSA slots it shares with the reconciler;
//! - [`cluster`]: leader election, the fence every write goes through, API server health;
//! - shared by all: [`config`] (flags → [`Config`]), [`state`] (what the tasks share),
//!   [`metrics`], [`formats`] (the annotations written Secrets carry, byte by byte), `scrub` (error text safe to show), [`net`] (client addresses and trusted
//!   proxies), [`host`] (what the machine allows), `env`, `timing`, `signals` and
//!   `error`.

#[doc(hidden)]
pub mod cache;
pub mod cluster;
pub mod config;
pub(crate) mod env;
mod error;
pub mod fleet;
#[doc(hidden)]
pub mod formats;
pub mod host;
pub mod keys;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod net;
#[doc(hidden)]
pub mod reconcile;
pub(crate) mod scrub;
pub mod serve;
pub(crate) mod signals;
pub mod state;
pub(crate) mod timing;

pub use config::Config;
pub use error::{Error, Result, error_chain};
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

/// The controller's loops, started together as the binary starts them.
#[derive(Debug)]
pub struct Tasks {
    /// The key loader: key Secrets, hot reload, optional generation ([`keys::run`]).
    pub keys: tokio::task::JoinHandle<()>,
    /// The key-source loops, one per `--key-source` ring ([`keys::source::run`]; ends at
    /// once without `--key-source`).
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
    // Before the key loader starts: it reads every ring's view.
    state.add_rings(&config.ring_names());
    let remote = futures::future::join_all(config.for_each_ring().into_iter().enumerate().map(
        |(i, ring_config)| {
            let ring_state = state.for_ring(i).unwrap_or_else(|| state.clone());
            keys::source::run(client.clone(), ring_config, ring_state, shutdown.clone())
        },
    ));
    if config.ring_bindings.values().any(|b| b.selector.is_some()) {
        let reporting = state.clone();
        tokio::spawn(cluster::namespaces::run(
            client.clone(),
            state.namespace_labels.clone(),
            timing::WatchBackoff::resetting_on(state.api.recoveries()),
            move |failure| match failure {
                None => reporting.api_answered(),
                Some(e) => reporting.watch_failed("namespaces", e),
            },
            shutdown.clone(),
        ));
    }
    Tasks {
        keys: tokio::spawn(keys::run(
            keys::SecretKeySource::new(client.clone(), config).reporting_to(state.clone()),
            state.clone(),
            config.clone(),
            requests,
            shutdown.clone(),
        )),
        remote: tokio::spawn(async move {
            remote.await;
        }),
        reconciler: tokio::spawn(reconcile::run(
            client.clone(),
            config.clone(),
            state.clone(),
            shutdown.clone(),
        )),
    }
}
