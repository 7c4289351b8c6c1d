//! `kseal keys retire --check` and `kseal keys exposure` walk a repository as `kseal check`
//! does: a link loop ends, a link out of the repository is named and not followed, and a link
//! to `/proc/self/pagemap` is never read (each run has a deadline, so a hang fails the test
//! instead of stalling it). Retiring is refused while a link out of the repository leaves a
//! path unchecked, until that path is checked too.

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]
#![cfg(unix)]

use std::io::Read as _;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: prod\nstringData:\n  password: s3cr3t\n";

/// How long one `kseal` run may take: far more than it needs, far less than a walk of
/// `/proc/self/pagemap` (which never ends before memory does).
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `kseal args` in `cwd` (clean environment plus `envs`), killed and failed after
/// [`DEADLINE`].
fn kseal_within(args: &[&str], stdin: Option<&str>, cwd: &Path, envs: &[(&str, &str)]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kseal"))
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    // Read both pipes on threads, so a full pipe cannot stall the child.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "`kseal {}` ran for more than {DEADLINE:?}: it read a link it must not follow",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

/// A directory ring pinned in `d`, a key sealed with its first key, and a repository with a
/// link loop, a link out of it and a link to `/proc/self/pagemap`.
struct Fixture {
    dir: tempfile::TempDir,
    url: String,
    cache: String,
}

impl Fixture {
    fn d(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Run {
        kseal_within(args, stdin, self.d(), &[("KSEAL_CACHE_DIR", &self.cache)])
    }

    fn keys(&self, args: &[&str]) -> Run {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", &self.url]);
        self.run(&all, None)
    }

    fn ok(&self, args: &[&str]) -> Run {
        let run = self.keys(args);
        assert_eq!(run.code, 0, "kseal keys {}: {}", args.join(" "), run.stderr);
        run
    }

    fn seal(&self) -> String {
        let run = self.run(&["seal", "--cert", &self.url], Some(SECRET));
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout
    }

    /// The ring's `(fingerprint, kid)`s, oldest first.
    fn listed(&self) -> Vec<(String, String)> {
        let list: serde_json::Value =
            serde_json::from_str(&self.ok(&["list", "-o", "json"]).stdout).unwrap();
        list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["fingerprint"].as_str().unwrap().to_owned(),
                    k["kid"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("dir://{}", dir.path().join("ring").display());
        let cache = dir.path().join("cache").display().to_string();
        let fixture = Self { dir, url, cache };
        fixture.ok(&["push", "--key-size", "2048"]);
        fixture.ok(&["trust"]);
        let sealed = fixture.seal();
        let d = fixture.d();
        // Outside the repository: a SealedSecret only the old key opens.
        std::fs::create_dir_all(d.join("outside")).unwrap();
        std::fs::write(d.join("outside/db.yaml"), &sealed).unwrap();
        // The repository (.git marks its root, as git does).
        let repo = d.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("apps")).unwrap();
        std::fs::write(repo.join("apps/db.yaml"), &sealed).unwrap();
        symlink("..", repo.join("apps/loop")).unwrap();
        symlink(d.join("outside"), repo.join("apps/shared")).unwrap();
        symlink("/proc/self/pagemap", repo.join("apps/pagemap.yaml")).unwrap();
        fixture
    }
}

/// `retire --check`: a link out of the repository blocks the retirement, named, until its
/// target is checked too (and then what it holds counts); the pagemap link is named, never
/// read, and blocks nothing; the loop ends.
#[test]
fn retire_check_never_follows_links_out_of_the_repository() {
    let f = Fixture::new();
    let d = f.d();
    f.ok(&["push", "--key-size", "2048"]);
    let keys = f.listed();
    let (old, new) = (keys[0].1.clone(), keys[1].1.clone());
    f.ok(&["activate", "--now", &new[..12]]);
    // The repository's own SealedSecret resealed with the new key: only the linked-in one
    // still needs the old key.
    std::fs::write(d.join("repo/apps/db.yaml"), f.seal()).unwrap();

    let run = f.keys(&["retire", &old[..12], "--check", "repo", "--yes"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    for expected in [
        "cannot show that key",
        "is no longer needed: 1 path under --check not checked",
        "`repo/apps/shared` is a link to",
        "outside the repository",
        "check each link's target with another --check path (or remove the link)",
        // Named, as a warning only: a kernel file holds no SealedSecret.
        "warning: `repo/apps/pagemap.yaml` is a link to `/proc/",
        "never reads outside the repository it walks",
    ] {
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
    }
    // The blocking link is named in the error, not also as a warning.
    assert!(
        !run.stderr.contains("warning: `repo/apps/shared`"),
        "{}",
        run.stderr
    );
    // The loop ended, and the file was read once (not again through `loop`).
    assert!(
        run.stderr
            .contains("checked 1 SealedSecret in 1 file (of 1 manifest file under --check)"),
        "{}",
        run.stderr
    );
    assert!(
        f.ok(&["list", "-o", "json"]).stdout.contains(&old),
        "a refused retire changes nothing"
    );

    // With the link's target checked as well, what it holds counts: the key is needed.
    let run = f.keys(&[
        "retire",
        &old[..12],
        "--check",
        "repo",
        "--check",
        "outside",
        "--yes",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("is still needed")
            && run.stderr.contains("outside/db.yaml: prod/db (password)"),
        "{}",
        run.stderr
    );

    // Without the link out, the pagemap link alone blocks nothing.
    std::fs::remove_file(d.join("repo/apps/shared")).unwrap();
    let run = f.keys(&["retire", &old[..12], "--check", "repo", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("pagemap.yaml") && run.stderr.contains("none of them needs key"),
        "{}",
        run.stderr
    );
}

/// `keys exposure`: the SealedSecret inside the repository is listed once (the loop does not
/// repeat it), the one behind the link out is not, and both links are named.
#[test]
fn exposure_never_follows_links_out_of_the_repository() {
    let f = Fixture::new();
    let fingerprint = f.listed()[0].0.clone();
    let run = f.run(
        &["keys", "exposure", &fingerprint, "repo", "-o", "json"],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{report:#}");
    let values = items[0]["values"].as_array().unwrap();
    let paths: Vec<&str> = values.iter().map(|v| v["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["repo/apps/db.yaml"], "{report:#}");
    assert_eq!(report["files"], 1, "{report:#}");
    for expected in [
        "warning: `repo/apps/shared` is a link to",
        "warning: `repo/apps/pagemap.yaml` is a link to `/proc/",
    ] {
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
    }
}
