//! Whole-process time of `kseal check` with no flag over a repository of two groups (issue
//! 36): 10,000 SealedSecrets, half under `clusters/prod/` and half under `clusters/nonprod/`,
//! each group routed by a `.kseal.yaml` creation rule to its own pinned `dir://` key ring. The
//! public tier, as a CI runner without private keys sees it: each ring's verified index and
//! the ciphertexts. Goal: under 2 s on 2 cores.
//!
//! Run with `cargo bench -p kseal-cli --bench check_groups`; prints the median, best and worst
//! wall time and CPU time (user + system, the process and its threads) of `KSEAL_BENCH_RUNS`
//! runs (default 7) and the load average; no assertion on time. It asserts what was checked
//! first: both groups clean, every object counted, and a prod file sealed with the non-prod
//! ring's certificate reported as `wrong-ring-for-path`.
//!
//! The fixture (two RSA-4096 keys, two directory rings, the repository: about 5,000
//! application folders, each a `kustomization.yaml` and a file of 1–3 SealedSecrets of 1–5
//! items each, sealed by `kseal seal`) takes a few seconds to build and is kept under
//! `target/tmp/check-groups-N` for the next run (`KSEAL_BENCH_CHECK_DIR` puts it elsewhere;
//! delete the folder to rebuild it). `KSEAL_BENCH_CHECK_OBJECTS` changes the size (default
//! 10,000). `KSEAL_BENCH_KSEAL` times another `kseal` executable (`kseal-ring` beside it),
//! e.g. an older build for a before/after figure.
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The groups: their folder under `clusters/` and their key ring's folder under `rings/`.
const GROUPS: [&str; 2] = ["prod", "nonprod"];

/// Written last into a complete fixture: its format version and size.
fn stamp(objects: usize) -> String {
    format!("check-groups fixture v1, {objects} SealedSecrets\n")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn kseal(exe: &Path, top: &Path, cwd: &Path, args: &[&str], stdin: Option<&Path>) -> Run {
    let mut command = Command::new(exe);
    command
        .args(args)
        .current_dir(cwd)
        .env_clear()
        // The ring cache (`seen` versions) of the fixture, not the user's.
        .env("KSEAL_CACHE_DIR", top.join("cache"))
        .stdin(Stdio::null());
    if let Some(input) = stdin {
        command.stdin(std::fs::File::open(input).expect("open input"));
    }
    let out = command.output().expect("kseal runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(run: Run, what: &str) -> Run {
    assert_eq!(run.code, 0, "{what} failed: {}", run.stderr);
    run
}

/// Object `i`'s Secret: 1–5 items of the sizes a repository holds (passwords, tokens, URLs,
/// now and then a PEM bundle).
fn secret(i: usize) -> String {
    let mut s = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: app-{i}\n  namespace: team-{}\n\
         type: Opaque\nstringData:\n",
        i % 40
    );
    for k in 0..1 + (i * 7 + 3) % 5 {
        let size = match (i + k) % 20 {
            0 => 1_600,
            1..=6 => 120,
            7..=13 => 64,
            _ => 24,
        };
        let value: String = (0..size)
            .map(|n| char::from(b'a' + ((i * 31 + k * 17 + n) % 26) as u8))
            .collect();
        // writeln! to a String cannot fail.
        let _ = writeln!(s, "  item-{k}: {value}");
    }
    s
}

/// Seals `secrets` with `cert` (by `kseal seal`, in streams of 1,000 documents: a stream
/// holds at most 1,024) and returns the SealedSecret documents.
fn seal(exe: &Path, top: &Path, cert: &Path, secrets: &[String]) -> Vec<String> {
    let mut docs = Vec::new();
    for chunk in secrets.chunks(1000) {
        let stream = chunk.concat();
        let input = top.join("stream.yaml");
        std::fs::write(&input, stream).expect("write input");
        let cert = cert.to_str().expect("UTF-8 path");
        let run = ok(
            kseal(exe, top, top, &["seal", "--cert", cert], Some(&input)),
            "kseal seal",
        );
        docs.extend(
            run.stdout
                .split("---\n")
                .filter(|d| !d.trim().is_empty())
                .map(|d| format!("---\n{d}")),
        );
    }
    assert_eq!(docs.len(), secrets.len());
    docs
}

#[cfg(unix)]
fn private_dir(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
}

#[cfg(not(unix))]
fn private_dir(path: &Path) {
    std::fs::create_dir_all(path).expect("mkdir");
}

fn ring_url(top: &Path, group: &str) -> String {
    format!("dir://{}", top.join("rings").join(group).display())
}

/// Builds the fixture under `top`: keys, rings, the repository `top/repo` with its pins and
/// rules, and `objects` SealedSecrets, half per group.
fn build(exe: &Path, top: &Path, objects: usize) {
    // `top` and the repository are each a repository root: discovery stops there.
    std::fs::create_dir_all(top.join(".git")).expect("mkdir");
    let repo = top.join("repo");
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    for group in GROUPS {
        let keys = format!("keys/{group}");
        ok(
            kseal(
                exe,
                top,
                top,
                &["keys", "generate", "--out-dir", &keys],
                None,
            ),
            "kseal keys generate",
        );
        private_dir(&top.join("rings").join(group));
        let url = ring_url(top, group);
        ok(
            kseal(
                exe,
                top,
                top,
                &["keys", "push", "--ring", &url, "--from", &keys],
                None,
            ),
            "kseal keys push",
        );
        ok(
            kseal(
                exe,
                top,
                &repo,
                &["keys", "trust", "--ring", &url, "--yes"],
                None,
            ),
            "kseal keys trust",
        );
    }
    let config = repo.join(".kseal.yaml");
    let mut text = std::fs::read_to_string(&config).expect("keys trust wrote .kseal.yaml");
    assert!(!text.contains("creation_rules"), "{text}");
    text.push_str("creation_rules:\n");
    for group in GROUPS {
        let _ = write!(
            text,
            "  - path_regex: ^clusters/{group}/\n    ring: {}\n",
            ring_url(top, group)
        );
    }
    // Rewritten in place: the file keeps the mode `keys trust` gave it.
    std::fs::write(&config, text).expect("write .kseal.yaml");

    let half = objects / 2;
    for (g, group) in GROUPS.into_iter().enumerate() {
        let range = if g == 0 { 0..half } else { half..objects };
        let cert = top.join("keys").join(group).join("tls.crt");
        let docs = seal(exe, top, &cert, &range.map(secret).collect::<Vec<_>>());
        // Application folders of 1–3 SealedSecrets each, ten to a team, 50 teams to a cluster.
        let mut docs = docs.into_iter();
        let mut app = 0;
        loop {
            let take = 1 + app % 3;
            let chunk: Vec<String> = docs.by_ref().take(take).collect();
            if chunk.is_empty() {
                break;
            }
            let folder = repo.join(format!(
                "clusters/{group}/cluster-{}/team-{}/app-{app}",
                app / 500,
                app / 10 % 50
            ));
            std::fs::create_dir_all(&folder).expect("mkdir");
            std::fs::write(
                folder.join("kustomization.yaml"),
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  \
                 - deployment.yaml\n  - sealed-secrets.yaml\n",
            )
            .expect("write");
            std::fs::write(folder.join("sealed-secrets.yaml"), chunk.concat()).expect("write");
            app += 1;
        }
    }
    std::fs::remove_file(top.join("stream.yaml")).expect("remove input");
    std::fs::write(top.join("complete"), stamp(objects)).expect("write stamp");
}

/// The CPU time (user + system, in seconds) of this process's waited-for children so far,
/// from `/proc/self/stat` (`cutime`, `cstime`), in clock ticks of 1/100 s.
fn children_cpu() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 16 and 17 of proc(5); `after` starts at field 3.
    let ticks: f64 = fields.get(13)?.parse::<f64>().ok()? + fields.get(14)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `(rule, file)` of every finding of a JSON report.
fn findings(run: &Run) -> Vec<(String, String)> {
    let report: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", run.stdout, run.stderr));
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap_or("-").to_owned(),
                f["file"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect()
}

fn stats(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` is ignored.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let objects = size("KSEAL_BENCH_CHECK_OBJECTS", 10_000);
    let runs = size("KSEAL_BENCH_RUNS", 7).max(1);
    let exe = std::env::var_os("KSEAL_BENCH_KSEAL")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kseal")), PathBuf::from);
    let exe = std::path::absolute(&exe).expect("kseal path");
    let top = std::env::var_os("KSEAL_BENCH_CHECK_DIR").map_or_else(
        || Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("check-groups-{objects}")),
        PathBuf::from,
    );
    let top = std::path::absolute(&top).expect("fixture path");
    if std::fs::read_to_string(top.join("complete")).ok() != Some(stamp(objects)) {
        if top.exists() {
            std::fs::remove_dir_all(&top).expect("remove an incomplete fixture");
        }
        eprintln!(
            "building the fixture in {}: two RSA-4096 keys and directory rings, {objects} \
             SealedSecrets sealed by `kseal seal`…",
            top.display()
        );
        let start = Instant::now();
        build(&exe, &top, objects);
        eprintln!("built in {:.1} s", start.elapsed().as_secs_f64());
    }
    let repo = top.join("repo");
    let check = ["check", "-o", "json", "--progress", "never"];

    // What a run checks: both groups, clean, every object.
    let first = kseal(&exe, &top, &repo, &check, None);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert_eq!(findings(&first), Vec::new());
    let summary = first.stderr.lines().next().unwrap_or_default().to_owned();
    assert!(
        summary.starts_with(&format!("checked {objects} SealedSecrets ("))
            && summary.ends_with(": 0 errors, 0 warnings"),
        "{}",
        first.stderr
    );
    // A prod file sealed with the non-prod ring's certificate: `wrong-ring-for-path`.
    let probe = repo.join("clusters/prod/wrong-ring-probe.yaml");
    let cert = top.join("keys/nonprod/tls.crt");
    let wrong = secret(0).replace("name: app-0\n", "name: probe\n");
    std::fs::write(&probe, seal(&exe, &top, &cert, &[wrong]).concat()).expect("write");
    let flagged = kseal(&exe, &top, &repo, &check, None);
    std::fs::remove_file(&probe).expect("remove the probe");
    assert_eq!(flagged.code, 1, "{}{}", flagged.stdout, flagged.stderr);
    assert_eq!(
        findings(&flagged),
        vec![(
            "wrong-ring-for-path".to_owned(),
            "clusters/prod/wrong-ring-probe.yaml".to_owned()
        )]
    );

    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let before = load();
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..runs {
        let cpu_start = children_cpu();
        let start = Instant::now();
        let run = kseal(&exe, &top, &repo, &check, None);
        let took: Duration = start.elapsed();
        assert_eq!(run.code, 0, "{}", run.stderr);
        wall.push(took.as_secs_f64());
        if let (Some(a), Some(b)) = (cpu_start, children_cpu()) {
            cpu.push(b - a);
        }
    }
    let after = load();
    let (median, best, worst) = stats(wall);
    println!(
        "kseal check (no flag), two groups by their creation rules, two pinned dir:// rings: \
         {summary}"
    );
    println!(
        "  {} ({}), {runs} runs on {cores} cores: wall median {median:.3} s, min {best:.3} s, \
         max {worst:.3} s ({:.1} µs per SealedSecret at the median)",
        exe.display(),
        if cfg!(debug_assertions) {
            "built with debug assertions"
        } else {
            "optimised build"
        },
        median * 1e6 / objects.max(1) as f64
    );
    if !cpu.is_empty() {
        let (median, best, worst) = stats(cpu);
        println!("  CPU (user + system): median {median:.2} s, min {best:.2} s, max {worst:.2} s");
    }
    println!("  load average (1, 5, 15 min): before {before}, after {after}");
}
