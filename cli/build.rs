//! Build information for `--version`: the commit the binaries were built from, the target
//! and, for reproducible release builds only, the date of `SOURCE_DATE_EPOCH`.
//!
//! The controller's build script runs this file as a module (`controller/build.rs`), so both
//! crates say the same thing the same way. It sets three variables for `env!`:
//!
//! - `KSEAL_BUILD_COMMIT`: `KSEAL_GIT_COMMIT` when set (a tarball or a container build
//!   without `.git`; the release workflow and the Dockerfile pass it), else `git rev-parse
//!   HEAD` when this crate's sources are tracked by the enclosing git repository, else
//!   `unknown`. A work tree with uncommitted changes is not marked: telling that would mean
//!   re-running this script on every edit of any file.
//! - `KSEAL_BUILD_TARGET`: the target triple.
//! - `KSEAL_BUILD_DATE`: `SOURCE_DATE_EPOCH` as YYYY-MM-DD (UTC), or empty. Never the clock:
//!   two builds of one commit give the same binary.
//! - `KSEAL_BUILD_INFO`: `commit <id>[, <date>], <target>`, what `--version` prints after the
//!   package version.
//!
//! Re-runs only when those variables change or when git's HEAD or the ref it points to
//! moves: never on an ordinary source edit.

// Cargo reads a build script's directives from its stdout.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

pub(crate) fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KSEAL_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    let commit = match std::env::var("KSEAL_GIT_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => {
            let commit = commit.trim().to_ascii_lowercase();
            if !is_commit_id(&commit) {
                return Err(format!(
                    "KSEAL_GIT_COMMIT `{commit}` is not a git commit id (7 to 64 hex digits)"
                ));
            }
            commit
        }
        _ => git_head().unwrap_or_else(|| "unknown".to_owned()),
    };
    println!("cargo:rustc-env=KSEAL_BUILD_COMMIT={commit}");

    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=KSEAL_BUILD_TARGET={target}");

    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) if !epoch.trim().is_empty() => match epoch.trim().parse::<i64>() {
            Ok(secs) => civil_date(secs),
            Err(_) => {
                return Err(format!(
                    "SOURCE_DATE_EPOCH `{epoch}` is not a number of seconds"
                ));
            }
        },
        _ => String::new(),
    };
    println!("cargo:rustc-env=KSEAL_BUILD_DATE={date}");

    // What `--version` prints after the package version, in parentheses.
    let info = if date.is_empty() {
        format!("commit {commit}, {target}")
    } else {
        format!("commit {commit}, {date}, {target}")
    };
    println!("cargo:rustc-env=KSEAL_BUILD_INFO={info}");
    Ok(())
}

fn is_commit_id(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// HEAD's commit id, when this crate's own manifest is tracked by the enclosing repository
/// (so an unpacked source tarball inside some other repository does not take its commit).
/// Declares the git files whose change means a new commit.
fn git_head() -> Option<String> {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&manifest_dir)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        Some(String::from_utf8(out.stdout).ok()?.trim().to_owned())
    };
    git(&["ls-files", "--error-unmatch", "Cargo.toml"])?;
    let commit = git(&["rev-parse", "--verify", "HEAD^{commit}"])?;
    if !is_commit_id(&commit) {
        return None;
    }
    // HEAD lives in the work tree's git dir (worktrees have their own), branches and
    // packed-refs in the common dir. Only files that exist: cargo re-runs a build script
    // every time for a missing one.
    let abs = |p: String| -> PathBuf {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            manifest_dir.join(p)
        }
    };
    let git_dir = abs(git(&["rev-parse", "--git-dir"])?);
    let common_dir = abs(git(&["rev-parse", "--git-common-dir"])?);
    watch(&git_dir.join("HEAD"));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let loose = [git_dir.join(&branch), common_dir.join(&branch)];
        match loose.iter().find(|p| p.is_file()) {
            Some(file) => watch(file),
            // A packed branch: the first commit on it writes a loose file in this folder.
            None => {
                if let Some(folder) = loose[1].parent().filter(|f| f.is_dir()) {
                    println!("cargo:rerun-if-changed={}", folder.display());
                }
            }
        }
    }
    watch(&common_dir.join("packed-refs"));
    Some(commit)
}

fn watch(path: &Path) {
    if path.is_file() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Seconds since the Unix epoch as a UTC date (Howard Hinnant's `civil_from_days`).
fn civil_date(secs: i64) -> String {
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
