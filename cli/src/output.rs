//! The only place that writes to stdout: data, never diagnostics; and the one question
//! commands ask on a terminal ([`confirm`]).
#![allow(clippy::print_stdout)]

use std::io::{IsTerminal as _, Write as _};

use anyhow::{Context as _, Result, bail};

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

/// Asks `question` on a terminal unless `yes`; non-interactive runs never ask.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<()> {
    if yes || !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Ok(());
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("failed to read the answer")?;
    if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        bail!("aborted: nothing was changed")
    }
}

/// Asks `question` on a terminal unless `yes`; where it cannot ask (standard input or error
/// not a terminal), refuses unless `yes`, with `refusal` (what to pass): for the changes that
/// are never made unasked.
pub(crate) fn confirm_or_yes(question: &str, yes: bool, refusal: &str) -> Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        bail!("{refusal}");
    }
    confirm(question, false)
}
