//! `kseal keys rotate|activate --wait-for` and `kseal keys retire`'s fleet check (issue 38) on
//! directory rings, whose fleet records are files (`<ring>/fleet/<cluster>.json`) the tests
//! write to play the clusters: fast and deterministic. The controllers writing those records
//! themselves are tested in `tests/it/fleet_ack.rs`.
//!
//! Every wait is bounded (`--timeout`, and [`DEADLINE`] for the test's own polls).

// A test binary: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

/// How long anything the test waits for may take (a hung run, not a measurement).
const DEADLINE: Duration = Duration::from_secs(60);

/// `--wait-poll` in tests: read the records often, so waits end soon after a record changes.
const FAST_POLL: &str = "100ms";

/// A directory ring and its fleet directory.
struct Fleet {
    dir: tempfile::TempDir,
    url: String,
}

impl Fleet {
    /// A ring with one (active) key.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("dir://{}", dir.path().join("ring").display());
        let fleet = Self { dir, url };
        fleet.ok(&["keys", "push", "--key-size", "2048"]);
        fleet
    }

    fn cwd(&self) -> &Path {
        self.dir.path()
    }

    fn records(&self) -> PathBuf {
        self.dir.path().join("ring/fleet")
    }

    /// `kseal ARGS --ring URL`; no output may hold a private key or a panic.
    fn run(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--ring", &self.url]);
        let run = kseal(&all, None, self.cwd());
        for text in [&run.stdout, &run.stderr] {
            assert!(!text.contains("PRIVATE KEY"), "{}", args.join(" "));
            assert!(!text.contains("panicked"), "{text}");
        }
        run
    }

    fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, 0, "kseal {}: {}", args.join(" "), run.stderr);
        run
    }

    /// `kseal ARGS --ring URL` started, not waited for.
    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).stderr(Stdio::piped()).spawn().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kseal"));
        command
            .args(args)
            .args(["--ring", &self.url])
            .current_dir(self.cwd())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("COLUMNS", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        command
    }

    /// The index as `fleet status -o json` summarises it: version, active, pending.
    fn index(&self) -> Value {
        let run = self.ok(&["fleet", "status", "-o", "json"]);
        let report: Value = serde_json::from_str(&run.stdout).unwrap();
        report["index"].clone()
    }

    fn kids(&self) -> Vec<String> {
        let run = self.ok(&["keys", "list", "-o", "json"]);
        let index: Value = serde_json::from_str(&run.stdout).unwrap();
        index["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    }

    fn active(&self) -> String {
        self.index()["active"].as_str().unwrap().to_owned()
    }

    /// Pushes a second key (not active) and returns its kid and the index version.
    fn push_pending(&self) -> (String, u64) {
        self.ok(&["keys", "push", "--key-size", "2048"]);
        let index = self.index();
        let pending = index["pending"].as_array().unwrap();
        assert_eq!(pending.len(), 1, "{index}");
        (
            pending[0].as_str().unwrap().to_owned(),
            index["version"].as_u64().unwrap(),
        )
    }

    /// Writes `cluster`'s record as its controller would: it holds `held` under index
    /// `version`, `objects` per kid, and wrote `ago` seconds ago with a 60 s heartbeat (silent
    /// after 120 s).
    fn record(
        &self,
        cluster: &str,
        version: u64,
        held: &[&str],
        objects: &[(&str, u64)],
        ago: i64,
    ) {
        let written = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(ago);
        let objects: serde_json::Map<String, Value> = objects
            .iter()
            .map(|(kid, n)| ((*kid).to_owned(), json!(n)))
            .collect();
        let record = json!({
            "schema": 1,
            "cluster": cluster,
            "ring": "kseal/fleet",
            "indexVersion": version,
            "held": held,
            "objects": objects,
            "controller": "0.0.0-test",
            "heartbeatSeconds": 60,
            "written": written.to_string(),
        });
        std::fs::create_dir_all(self.records()).unwrap();
        let tmp = self.records().join(format!(".tmp-{cluster}"));
        std::fs::write(&tmp, record.to_string()).unwrap();
        std::fs::rename(&tmp, self.records().join(format!("{cluster}.json"))).unwrap();
    }
}

/// Waits (bounded) for `child` to exit; returns its run.
fn finish(child: Child) -> Run {
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let out = waited
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("kseal (pid {pid}) did not finish within {DEADLINE:?}"))
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Polls `check` until it holds (bounded by [`DEADLINE`]).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn short(kid: &str) -> &str {
    &kid[..12]
}

#[test]
fn rotate_waits_for_every_cluster_then_activates() {
    let fleet = Fleet::new();
    let old = fleet.active();
    let v = fleet.index()["version"].as_u64().unwrap();
    fleet.record("c1", v, &[&old], &[], 0);
    fleet.record("c2", v, &[&old], &[], 0);
    let child = fleet.spawn(&[
        "keys",
        "rotate",
        "--key-size",
        "2048",
        "--yes",
        "--wait-for",
        "all",
        "--timeout",
        "60s",
        "--wait-poll",
        FAST_POLL,
    ]);
    // The new key enters the ring, pending.
    let mut pending = (String::new(), 0);
    eventually("the rotated key in the index", || {
        let index = fleet.index();
        match index["pending"].as_array().and_then(|p| p.first()) {
            Some(kid) => {
                pending = (
                    kid.as_str().unwrap().to_owned(),
                    index["version"].as_u64().unwrap(),
                );
                true
            }
            None => false,
        }
    });
    let (new, version) = pending;
    // One cluster holds it; the other holds it under an older index: not yet.
    fleet.record("c1", version, &[&old, &new], &[], 0);
    fleet.record("c2", version - 1, &[&old, &new], &[], 0);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(fleet.active(), old, "activated before c2 acknowledged");
    fleet.record("c2", version, &[&old, &new], &[], 0);
    let run = finish(child);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(fleet.active(), new);
    let stderr = &run.stderr;
    assert!(
        stderr.contains(&format!(
            "waiting for c2 (holds index v{}, needs v{version})",
            version - 1
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "2/2 clusters hold key {}; activating",
            short(&new)
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("key {} seals from now on", short(&new))),
        "{stderr}"
    );
}

#[test]
fn a_silent_cluster_blocks_all_and_a_timeout_leaves_the_key_pending() {
    let fleet = Fleet::new();
    let old = fleet.active();
    let (new, version) = fleet.push_pending();
    fleet.record("c1", version, &[&old, &new], &[], 0);
    // c2 holds the key too, but was last heard from three hours ago: silent, so not counted.
    fleet.record("c2", version, &[&old, &new], &[], 3 * 3600);
    let status = fleet.run(&["fleet", "status"]);
    assert!(
        status
            .stdout
            .lines()
            .any(|l| l.starts_with("c2 ") && l.contains(" silent ")),
        "{}",
        status.stdout
    );
    let activate = [
        "keys",
        "activate",
        &new,
        "--yes",
        "--wait-for",
        "all",
        "--timeout",
        "1s",
        "--wait-poll",
        FAST_POLL,
    ];
    let run = fleet.run(&activate);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "error: --wait-for all: timed out after 1s: 1 of 2 acknowledged; missing: c2 \
             (silent 3h). Key {} was not activated and stays pending",
            short(&new)
        )),
        "{}",
        run.stderr
    );
    assert_eq!(fleet.active(), old, "a timed-out wait activated the key");
    assert_eq!(fleet.index()["pending"], json!([new]));
    // c2 comes back: the same command activates.
    fleet.record("c2", version, &[&old, &new], &[], 0);
    let run = fleet.run(&activate);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(fleet.active(), new);
}

#[test]
fn a_share_of_the_fleet_or_named_clusters() {
    let fleet = Fleet::new();
    let old = fleet.active();
    let (new, version) = fleet.push_pending();
    fleet.record("c1", version, &[&old, &new], &[], 0);
    fleet.record("c2", version, &[&old, &new], &[], 0);
    fleet.record("c3", version, &[&old], &[], 0);
    let activate = |wait_for: &str| {
        fleet.run(&[
            "keys",
            "activate",
            &new,
            "--yes",
            "--wait-for",
            wait_for,
            "--timeout",
            "300ms",
            "--wait-poll",
            FAST_POLL,
        ])
    };
    // 67 % of 3 clusters is 3 (rounded up); c3 does not hold the key.
    let run = activate("67%");
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("2 of 3 acknowledged, 3 needed (67%); missing: c3 (does not hold the key)"),
        "{}",
        run.stderr
    );
    // A named cluster with no record is missing too.
    let run = activate("c1,c9");
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("1 of 2 acknowledged; missing: c9 (no record)"),
        "{}",
        run.stderr
    );
    assert_eq!(fleet.active(), old);
    for bad in ["0%", "101%", "c1,-x"] {
        let run = activate(bad);
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
        assert!(run.stderr.contains("--wait-for"), "{bad}: {}", run.stderr);
    }
    // A --delay given is a floor under the acknowledgements: 66 % acknowledged, but the key
    // entered the ring less than an hour ago, so it waits (stopped here) and activates nothing.
    let log = fleet.cwd().join("floor.log");
    let mut floor = fleet
        .command(&[
            "keys",
            "activate",
            &new,
            "--yes",
            "--wait-for",
            "66%",
            "--delay",
            "1h",
            "--wait-poll",
            FAST_POLL,
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    eventually("the wait for the --delay floor", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("so every controller fetches key")
    });
    floor.kill().unwrap();
    floor.wait().unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains(&format!(
            "2/3 clusters hold key {} (66% is 2); activating",
            short(&new)
        )) && said.contains("waiting 60 minutes"),
        "{said}"
    );
    assert_eq!(fleet.active(), old, "activated before the --delay floor");
    let run = activate("66%");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "2/3 clusters hold key {} (66% is 2); activating",
            short(&new)
        )),
        "{}",
        run.stderr
    );
    assert_eq!(fleet.active(), new);
}

#[test]
fn wait_for_is_refused_before_anything_changes_when_no_cluster_reports() {
    let fleet = Fleet::new();
    let old = fleet.active();
    let run = fleet.run(&[
        "keys",
        "rotate",
        "--key-size",
        "2048",
        "--yes",
        "--wait-for",
        "all",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--wait-for all: no cluster has reported on this key ring yet"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("Leave out --wait-for to activate after --delay"),
        "{}",
        run.stderr
    );
    assert_eq!(fleet.kids(), [old], "a key was pushed");
    // --wait-for and --now, or --no-wait, contradict each other.
    for other in ["--now", "--no-wait"] {
        let run = fleet.run(&["keys", "rotate", "--wait-for", "all", other]);
        assert_eq!(run.code, 2, "{other}: {}", run.stderr);
        assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
    }
}

#[test]
fn retire_is_refused_while_a_reporting_cluster_opens_objects_with_the_key() {
    let fleet = Fleet::new();
    let old = fleet.active();
    let (new, version) = fleet.push_pending();
    fleet.ok(&["keys", "activate", &new, "--now", "--yes"]);
    let version = version + 1;
    let held = [old.as_str(), new.as_str()];
    fleet.record("c1", version, &held, &[(&old, 3), (&new, 1)], 0);
    fleet.record("c2", version, &held, &[(&new, 4)], 0);
    // A silent cluster's old report is a warning, not a refusal.
    fleet.record("c3", version, &held, &[(&old, 5)], 3 * 3600);
    let retire = |extra: &[&str]| {
        let mut args = vec!["keys", "retire", &old, "--check", ".", "--allow-none"];
        args.extend_from_slice(extra);
        fleet.run(&args)
    };
    for extra in [&["--yes"][..], &["--dry-run"]] {
        let run = retire(extra);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "key {} still opens SealedSecrets in 1 cluster that reported recently: c1 \
                 (3 SealedSecrets)",
                short(&old)
            )),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("kseal reseal --stale"),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains("c3 (5 SealedSecrets when last heard from, 3h ago)"),
            "{}",
            run.stderr
        );
    }
    assert!(
        fleet.kids().contains(&old),
        "a refused retire removed the key"
    );
    // --force retires anyway, saying so (here as a dry run).
    let run = retire(&["--force", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("retiring anyway (--force)") && run.stderr.contains("dry run"),
        "{}",
        run.stderr
    );
    // Once c1 reports its objects re-sealed, the key goes.
    fleet.record("c1", version, &held, &[(&new, 4)], 0);
    let run = retire(&["--yes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "2 clusters reported recently: none opens SealedSecrets with key {}",
            short(&old)
        )),
        "{}",
        run.stderr
    );
    assert_eq!(fleet.kids(), [new]);
}
