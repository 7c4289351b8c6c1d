//! The only place that writes to stdout: data, never diagnostics.
#![allow(clippy::print_stdout)]

use std::io::Write as _;

/// Writes `text` to stdout. A closed pipe (`kseal … | head`) is not an error.
pub(crate) fn stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Writes `text` to `path` atomically (and says so on stderr), or to stdout without a path.
pub(crate) fn emit(text: &str, path: Option<&std::path::Path>) -> anyhow::Result<()> {
    match path {
        Some(path) => {
            crate::manifest::write_atomic(path, text.as_bytes(), false)?;
            eprintln!("wrote `{}`", path.display());
            Ok(())
        }
        None => stdout(text),
    }
}
