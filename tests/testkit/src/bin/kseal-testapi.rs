//! `kseal-testapi --kubeconfig PATH`: the test API server (`kseal-testkit`) in a process of its
//! own, on `127.0.0.1` on a free port. Writes a kubeconfig for it to PATH, prints its URL on
//! stdout and serves until stdin closes or it gets SIGTERM/SIGINT. The request log is at
//! `GET /_testkit/requests` (JSON; `DELETE` clears it). Test-only: no authentication.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};

const USAGE: &str = "usage: kseal-testapi --kubeconfig PATH";

fn kubeconfig_arg() -> anyhow::Result<PathBuf> {
    let mut args = std::env::args_os().skip(1);
    let mut kubeconfig = None;
    while let Some(arg) = args.next() {
        if arg == "--kubeconfig" {
            kubeconfig = Some(PathBuf::from(
                args.next().context("--kubeconfig without a value")?,
            ));
        } else if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--kubeconfig=")) {
            kubeconfig = Some(PathBuf::from(path));
        } else {
            bail!("unexpected argument {arg:?}\n{USAGE}");
        }
    }
    kubeconfig.with_context(|| format!("--kubeconfig is required\n{USAGE}"))
}

fn run() -> anyhow::Result<()> {
    let kubeconfig = kubeconfig_arg()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?
        .block_on(kseal_testkit::standalone::serve_until_stopped(&kubeconfig))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
