//! `kseal-controller` binary: flags → [`Config`], logging, then the key loader, the
//! reconciler and the HTTP servers until SIGTERM or SIGINT. SIGUSR1 asks for a new key.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use kseal_controller::cluster::leader::{self, LeaderConfig};
use kseal_controller::config::{Args, LogFormat};
use kseal_controller::keys::{self, KeyRequests};
use kseal_controller::serve::http;
use kseal_controller::{Config, State};
use tokio::sync::watch;

/// The service account's namespace, mounted into every pod.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

fn main() -> ExitCode {
    // Bitnami's SEALED_SECRETS_* variables become flags (below kseal's own).
    let args = match Args::from_process() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Before the configuration: the default connection caps follow the raised limit.
    let nofile = kseal_controller::host::raise_nofile_limit();
    let (log_level, log_format) = (args.log_level.clone(), args.log_format);
    let info_stdout = args.log_info_stdout == Some(true);
    let default_namespace = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    let config = match Config::from_args(args, default_namespace) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_tracing(&log_level, log_format, info_stdout) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    let limit = |l: Option<u64>| l.map_or_else(|| "unlimited".to_owned(), |l| l.to_string());
    match nofile {
        Ok((old, new)) if old == new => tracing::info!(
            limit = limit(new),
            "open-file limit (RLIMIT_NOFILE) already at the hard limit"
        ),
        Ok((old, new)) => tracing::info!(
            old = limit(old),
            new = limit(new),
            "open-file limit (RLIMIT_NOFILE) raised to the hard limit"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            limit = limit(kseal_controller::host::nofile_limit()),
            "cannot raise the open-file limit (RLIMIT_NOFILE); the connection caps follow the current one"
        ),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.async_threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "controller failed");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Every line to stderr; with `info_stdout` (Bitnami's `--log-info-stdout`) INFO and DEBUG
/// lines to stdout and WARN and ERROR to stderr.
fn init_tracing(level: &str, format: LogFormat, info_stdout: bool) -> anyhow::Result<()> {
    use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt as _};
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .with_context(|| format!("invalid --log-level {level:?}"))?;
    let writer = if info_stdout {
        BoxMakeWriter::new(
            std::io::stderr
                .with_max_level(tracing::Level::WARN)
                .or_else(std::io::stdout),
        )
    } else {
        BoxMakeWriter::new(std::io::stderr)
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        // Colours only on a terminal, never in pod logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    }
    .map_err(|e| anyhow::anyhow!("failed to set up logging: {e}"))
}

/// Resolves when SIGTERM or SIGINT arrives.
async fn signalled() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
        tokio::select! {
            _ = term.recv() => {}
            r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl+C")?;
    Ok(())
}

/// Forwards SIGUSR1 to the key loader as a request for a new key, as Bitnami's controller
/// does, or, with a key source, as a request to check the fleet ring now. Without the handler
/// the signal's default action would kill the process.
#[cfg(unix)]
fn forward_sigusr1(
    requester: keys::KeyRequester,
    refresh: Option<kseal_controller::keys::source::Refresh>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::user_defined1()) {
        Ok(mut usr1) => {
            tokio::spawn(async move {
                while usr1.recv().await.is_some() {
                    match &refresh {
                        Some(refresh) => {
                            tracing::info!("SIGUSR1: checking the fleet key ring now");
                            refresh.request();
                        }
                        None => {
                            tracing::info!("SIGUSR1: a new key is requested");
                            requester.request();
                        }
                    }
                }
            });
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot handle SIGUSR1: on-demand key generation is unavailable");
        }
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let config = Arc::new(config);
    let state = State::new();
    let (requester, requests) = KeyRequests::channel();
    #[cfg(unix)]
    forward_sigusr1(
        requester,
        config.key_source.as_ref().map(|_| state.refresh.clone()),
    );
    #[cfg(not(unix))]
    drop(requester);
    log_start(&config);
    // Listen first: a port that is taken ends the process now, not after it took the Lease.
    let (api_listener, metrics_listener) =
        http::bind(&config).await.context("HTTP server failed")?;
    let client = kube::Client::try_default()
        .await
        .context("failed to configure the Kubernetes client (in-cluster or KUBECONFIG)")?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // The Lease is released only after the reconciler stopped writing.
    let (release_tx, mut release_rx) = watch::channel(false);
    let leader_task = tokio::spawn(leader::run(
        client.clone(),
        state.clone(),
        LeaderConfig::from_config(&config),
        async move {
            let _ = release_rx.wait_for(|stop| *stop).await;
        },
    ));
    let kseal_controller::Tasks {
        keys: key_task,
        remote: remote_task,
        mut reconciler,
    } = kseal_controller::spawn(&client, &config, &state, requests, &shutdown_rx);
    let fleet_task = spawn_fleet(&client, &config, &state, &shutdown_rx);
    let mut http_shutdown = shutdown_rx.clone();
    let mut http_task = {
        let state = state.clone();
        let config = config.clone();
        tokio::spawn(async move {
            http::serve_listeners(
                api_listener,
                metrics_listener,
                state,
                http::ApiOptions::from_config(&config),
                async move {
                    let _ = http_shutdown.wait_for(|stop| *stop).await;
                },
            )
            .await
        })
    };

    let mut reconciler_done = false;
    let mut http_done = false;
    let outcome: anyhow::Result<()> = tokio::select! {
        r = signalled() => {
            tracing::info!("shutting down");
            r
        }
        r = &mut http_task => {
            http_done = true;
            match r {
                Ok(Ok(())) => Err(anyhow::anyhow!("the HTTP servers stopped")),
                Ok(Err(e)) => Err(anyhow::Error::new(e).context("HTTP server failed")),
                Err(e) => Err(anyhow::Error::new(e).context("HTTP server task failed")),
            }
        }
        r = &mut reconciler => {
            reconciler_done = true;
            match r {
                Ok(()) => Err(anyhow::anyhow!("the reconciler stopped")),
                Err(e) => Err(anyhow::Error::new(e).context("reconciler task failed")),
            }
        }
    };
    shutdown_tx.send_replace(true);
    // Let running reconciles finish; the reconciler stops starting new ones.
    let grace = std::time::Duration::from_secs(20);
    if !reconciler_done && tokio::time::timeout(grace, &mut reconciler).await.is_err() {
        tracing::warn!("reconciles did not finish in time");
        reconciler.abort();
    }
    if !http_done && tokio::time::timeout(grace, &mut http_task).await.is_err() {
        tracing::warn!("HTTP requests did not finish in time");
        http_task.abort();
    }
    key_task.abort();
    remote_task.abort();
    fleet_task.abort();
    release_tx.send_replace(true);
    await_release(leader_task).await;
    outcome
}

/// Logs the configuration the controller starts with, and its warnings.
fn log_start(config: &Config) {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = kseal_controller::COMMIT,
        namespace = %config.controller_namespace,
        identity = %config.identity,
        async_threads = config.async_threads,
        concurrency = config.concurrency,
        pending_values_mib = config.pending_value_bytes / (1024 * 1024),
        generate_keys = config.generate_key_if_missing,
        key_source = config.key_source.as_ref().map(|s| s.location.to_string()),
        more_key_sources = ?config.more_key_sources.iter().map(|s| s.location.to_string()).collect::<Vec<_>>(),
        ring_bindings = ?config.ring_bindings.iter().map(|(ring, b)| format!("{ring}: {}", b.describe())).collect::<Vec<_>>(),
        "starting kseal-controller"
    );
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
}

/// With a key source, the leader acknowledges what this cluster holds of each ring (kseal
/// fleet status): one task per ring.
fn spawn_fleet(
    client: &kube::Client,
    config: &Arc<Config>,
    state: &State,
    shutdown_rx: &watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<()>> {
    tokio::spawn(futures::future::join_all(
        config
            .for_each_ring()
            .into_iter()
            .enumerate()
            .map(|(i, ring_config)| {
                kseal_controller::fleet::run(
                    client.clone(),
                    ring_config.clone(),
                    state.for_ring(i).unwrap_or_else(|| state.clone()),
                    kseal_controller::fleet::Options::for_config(&ring_config),
                    shutdown_rx.clone(),
                )
            }),
    ))
}

/// Waits (at most 10 seconds) for the leader task to release the Lease.
async fn await_release(leader_task: tokio::task::JoinHandle<kseal_controller::Result<()>>) {
    match tokio::time::timeout(std::time::Duration::from_secs(10), leader_task).await {
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %kseal_controller::error_chain(&e), "failed to release the leader lease")
        }
        Ok(_) => {}
        Err(_) => tracing::warn!("releasing the leader lease timed out"),
    }
}
