//! Runs an in-process `kseal` command with its standard output and error captured, so the demo
//! can show the tool's own lines under the command that printed them (indented, with `$DEMO`
//! for the demo's directory) instead of flush left among the narration.

use std::io::Write as _;

/// Runs `f` with file descriptors 1 and 2 sent into a pipe, and returns what was written there.
/// Anything else the process prints meanwhile is captured too, so call it only when nothing
/// else writes (the demo's controllers log only with `-v`, which does not capture).
#[cfg(unix)]
pub(crate) fn run<R>(f: impl FnOnce() -> R) -> std::io::Result<(R, String)> {
    use std::io::Read as _;
    use std::os::fd::AsFd as _;

    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let (reader, writer) = rustix::pipe::pipe()?;
    let saved_out = rustix::io::dup(std::io::stdout().as_fd())?;
    let saved_err = rustix::io::dup(std::io::stderr().as_fd())?;
    rustix::stdio::dup2_stdout(&writer)?;
    if let Err(e) = rustix::stdio::dup2_stderr(&writer) {
        let _ = rustix::stdio::dup2_stdout(&saved_out);
        return Err(e.into());
    }
    drop(writer);
    // The pipe is drained while `f` runs, so a chatty command never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = std::fs::File::from(reader).read_to_end(&mut bytes);
        bytes
    });
    let result = f();
    let _ = std::io::stdout().flush();
    let restored = rustix::stdio::dup2_stdout(&saved_out)
        .and_then(|()| rustix::stdio::dup2_stderr(&saved_err));
    drop((saved_out, saved_err));
    restored?;
    let bytes = drain
        .join()
        .map_err(|_| std::io::Error::other("the output reader panicked"))?;
    Ok((result, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Elsewhere the command prints as it goes.
#[cfg(not(unix))]
pub(crate) fn run<R>(f: impl FnOnce() -> R) -> std::io::Result<(R, String)> {
    let _ = std::io::stdout().flush();
    Ok((f(), String::new()))
}

#[cfg(all(test, unix))]
mod tests {
    #[test]
    fn both_streams_are_captured_and_restored() {
        use std::io::Write as _;
        // Through the file descriptors, as the CLI's output goes (libtest captures `println!`
        // itself, before it reaches them).
        let (value, out) = super::run(|| {
            writeln!(std::io::stdout(), "to stdout").unwrap();
            writeln!(std::io::stderr(), "to stderr").unwrap();
            7
        })
        .unwrap();
        assert_eq!(value, 7);
        assert!(
            out.contains("to stdout") && out.contains("to stderr"),
            "{out:?}"
        );
        // Captured anew each time (libtest's own progress lines, written by its main thread
        // while the descriptors point at the pipe, may land in a capture too: `contains`).
        let (_, again) = super::run(|| writeln!(std::io::stdout(), "second").unwrap()).unwrap();
        assert!(again.contains("second"), "{again:?}");
        assert!(!again.contains("to stdout"), "{again:?}");
    }
}
