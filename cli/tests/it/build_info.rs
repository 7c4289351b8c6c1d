//! The build script that gives `--version` its commit (`cli/build.rs`, shared with the
//! controller), compiled on its own and run the way cargo runs it: in a git clone, in an
//! unpacked tarball without `.git` (also inside some other repository), with the
//! `KSEAL_GIT_COMMIT` override and with `SOURCE_DATE_EPOCH`.

// Test helpers outside #[test] functions: a failed setup step should panic.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The build script as an executable (rustc from PATH, as cargo's own toolchain).
fn script() -> &'static Path {
    static SCRIPT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_dir, exe) = SCRIPT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("build-script");
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let out = Command::new(rustc)
            .args(["--edition", "2024", "-o"])
            .arg(&exe)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (dir, exe)
    });
    exe
}

/// Runs the build script for a crate in `manifest_dir` with only the given variables of ours.
fn run(manifest_dir: &Path, envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(script());
    cmd.current_dir(manifest_dir)
        .env("CARGO_MANIFEST_DIR", manifest_dir)
        .env("TARGET", "aarch64-unknown-linux-gnu")
        .env_remove("KSEAL_GIT_COMMIT")
        .env_remove("SOURCE_DATE_EPOCH");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The value of `cargo:rustc-env=NAME=…`.
fn var(out: &Output, name: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("cargo:rustc-env={name}=");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in:\n{stdout}"))
        .to_owned()
}

fn watched(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("cargo:rerun-if-changed="))
        .map(str::to_owned)
        .collect()
}

fn tarball() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    dir
}

fn git_available() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A loud skip, or a failure under CI=true (CI runs in a git clone, with git).
fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why} (required under CI=true)"
    );
    kseal_testkit::skipped(&format!("SKIPPED: {why}"));
}

#[test]
fn a_tarball_without_git_says_unknown() {
    let dir = tarball();
    let out = run(dir.path(), &[]);
    assert!(out.status.success());
    assert_eq!(var(&out, "KSEAL_BUILD_COMMIT"), "unknown");
    assert_eq!(var(&out, "KSEAL_BUILD_TARGET"), "aarch64-unknown-linux-gnu");
    assert_eq!(var(&out, "KSEAL_BUILD_DATE"), "");
    assert_eq!(
        var(&out, "KSEAL_BUILD_INFO"),
        "commit unknown, aarch64-unknown-linux-gnu"
    );
    // Only build.rs and the variables: nothing that would re-run it on every build.
    assert_eq!(watched(&out), ["build.rs"]);
}

#[test]
fn the_commit_and_date_come_from_the_environment() {
    let dir = tarball();
    let out = run(
        dir.path(),
        &[
            (
                "KSEAL_GIT_COMMIT",
                " 0123456789ABCDEF0123456789abcdef01234567\n",
            ),
            ("SOURCE_DATE_EPOCH", "1764000000"),
        ],
    );
    assert!(out.status.success());
    assert_eq!(
        var(&out, "KSEAL_BUILD_INFO"),
        "commit 0123456789abcdef0123456789abcdef01234567, 2025-11-24, aarch64-unknown-linux-gnu"
    );
    for (epoch, date) in [
        ("0", "1970-01-01"),
        ("951782400", "2000-02-29"),
        ("4107542399", "2100-02-28"),
    ] {
        let out = run(dir.path(), &[("SOURCE_DATE_EPOCH", epoch)]);
        assert_eq!(var(&out, "KSEAL_BUILD_DATE"), date, "{epoch}");
    }
    // Empty means unset.
    let out = run(
        dir.path(),
        &[("KSEAL_GIT_COMMIT", ""), ("SOURCE_DATE_EPOCH", "")],
    );
    assert_eq!(
        var(&out, "KSEAL_BUILD_INFO"),
        "commit unknown, aarch64-unknown-linux-gnu"
    );
}

#[test]
fn bad_overrides_fail_the_build_with_a_message() {
    let dir = tarball();
    for (name, value, message) in [
        (
            "KSEAL_GIT_COMMIT",
            "main",
            "KSEAL_GIT_COMMIT `main` is not a git commit id (7 to 64 hex digits)",
        ),
        (
            "KSEAL_GIT_COMMIT",
            "abc123",
            "KSEAL_GIT_COMMIT `abc123` is not a git commit id",
        ),
        (
            "KSEAL_GIT_COMMIT",
            "0123456;rm -rf /",
            "is not a git commit id",
        ),
        (
            "SOURCE_DATE_EPOCH",
            "yesterday",
            "SOURCE_DATE_EPOCH `yesterday` is not a number of seconds",
        ),
    ] {
        let out = run(dir.path(), &[(name, value)]);
        assert!(!out.status.success(), "{name}={value} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{name}={value}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("KSEAL_BUILD_INFO"),
            "{name}={value}"
        );
    }
}

#[test]
fn a_tarball_inside_another_repository_does_not_take_its_commit() {
    if !git_available() {
        return skip("no git");
    }
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(repo.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(repo.path().join("other.txt"), "x").unwrap();
    git(&["add", "other.txt"]);
    git(&["commit", "-q", "-m", "other"]);
    let unpacked = repo.path().join("vendor/kseal/cli");
    std::fs::create_dir_all(&unpacked).unwrap();
    std::fs::write(unpacked.join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    let out = run(&unpacked, &[]);
    assert!(out.status.success());
    assert_eq!(var(&out, "KSEAL_BUILD_COMMIT"), "unknown");
}

#[test]
fn a_git_clone_gives_head_and_watches_only_existing_git_files() {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !git_available() || !manifest_dir.parent().unwrap().join(".git").exists() {
        return skip("not built from a git clone with git installed");
    }
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(manifest_dir)
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap().trim().to_owned();
    let out = run(manifest_dir, &[]);
    assert!(out.status.success());
    assert_eq!(var(&out, "KSEAL_BUILD_COMMIT"), head);
    let watched = watched(&out);
    assert!(watched.iter().any(|w| w.ends_with("HEAD")), "{watched:?}");
    for path in &watched[1..] {
        // cargo re-runs a build script every time for a path that does not exist.
        assert!(Path::new(path).exists(), "watches a missing path: {path}");
    }
    // The override wins over git.
    let out = run(manifest_dir, &[("KSEAL_GIT_COMMIT", "abcdef0")]);
    assert_eq!(var(&out, "KSEAL_BUILD_COMMIT"), "abcdef0");
}
