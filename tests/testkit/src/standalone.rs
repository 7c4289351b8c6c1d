//! The test API server as a process of its own (the `kseal-testapi` binary, and the scale
//! benchmark's `SCALE_SERVER=process`), so that its CPU time is not counted in the process that
//! drives a benchmark and it can be pinned to other cores.
//!
//! Protocol, for the parent: the server listens on `127.0.0.1` on a free port, writes a
//! kubeconfig for it, then prints one line, its URL (`http://127.0.0.1:PORT`), to stdout. It
//! serves until its stdin reaches end of file (the parent closed it, or exited) or it gets
//! SIGTERM or SIGINT. The request log is read and cleared over HTTP at
//! [`crate::ADMIN_REQUESTS_PATH`] (see [`crate::TestApiServer::serve_with_admin`]).

use std::io::{Read as _, Write as _};
use std::path::Path;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};

use crate::TestApiServer;

/// Serves a fresh [`TestApiServer`] (with the admin endpoints) until stdin closes or a
/// SIGTERM/SIGINT arrives; see the module docs. Call it inside a Tokio runtime with signal
/// handling enabled.
pub async fn serve_until_stopped(kubeconfig: &Path) -> anyhow::Result<()> {
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let server = TestApiServer::new();
    let served = server
        .serve_with_admin()
        .await
        .context("serving on 127.0.0.1")?;
    // Written whole, then renamed: a reader never sees half a kubeconfig.
    let partial = kubeconfig.with_extension("partial");
    served
        .write_kubeconfig(&partial)
        .and_then(|()| std::fs::rename(&partial, kubeconfig))
        .with_context(|| format!("failed to write kubeconfig `{}`", kubeconfig.display()))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", served.url()).context("writing the URL to stdout")?;
        out.flush().context("writing the URL to stdout")?;
    }
    // A blocking read on its own thread: stdin has no async reader without io-std, and end of
    // file is all that matters.
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 512];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = closed_tx.send(());
    });
    tokio::select! {
        _ = closed_rx => {}
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    drop(served);
    Ok(())
}
