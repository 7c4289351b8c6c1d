//! Whole-process time of `kseal check` over a GitOps tree, as a CI job sees it: the public
//! tier over 10,000 SealedSecrets (goal: under 2 s on 2 cores), and the private tier, whose
//! floor is one RSA-4096 private-key operation per item (the `kseal.dev/sealing-key` hint
//! names the key), spread over every core.
//!
//! Run with `cargo bench -p kseal-cli --bench check`; prints its figures (no assertion on
//! time). `KSEAL_BENCH_CHECK_OBJECTS` and `KSEAL_BENCH_CHECK_PRIVATE` change the sizes
//! (default 10,000 and 200 SealedSecrets, two items each). Where the release dependencies are
//! not built, the dev profile with kseal's own crates optimised gives release-like figures
//! without rebuilding any dependency:
//!
//! ```text
//! cargo $(for p in kseal-cli kseal-keys kseal-api kseal-keystore; do
//!   printf -- '--config profile.dev.package.%s.%s ' $p opt-level=3 $p debug-assertions=false \
//!     $p overflow-checks=false; done) bench -p kseal-cli --bench check --profile dev
//! ```
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kseal(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kseal"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("kseal runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("UTF-8 output"),
    )
}

fn secret(i: usize) -> String {
    let mut s = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: app-{i}\n  namespace: team-{}\n\
         type: Opaque\nstringData:\n",
        i % 20
    );
    for k in 0..2 {
        // writeln! to a String cannot fail.
        let _ = writeln!(s, "  key-{k}: value-{i}-{k}-0123456789abcdef");
    }
    s
}

/// Seals `objects` Secrets and writes them 100 to a file under `tree`, in four
/// clusters, with a ConfigMap between every two SealedSecrets.
fn build_tree(dir: &Path, tree: &str, objects: usize) {
    // In streams of 1,000 (a manifest stream holds at most 1,024 documents).
    let mut sealed = String::new();
    for start in (0..objects).step_by(1000) {
        let stream: String = (start..objects.min(start + 1000)).map(secret).collect();
        std::fs::write(dir.join("stream.yaml"), stream).expect("write input");
        let (code, out) = kseal(dir, &["seal", "--cert", "key/tls.crt", "-f", "stream.yaml"]);
        assert_eq!(code, 0, "kseal seal failed");
        sealed.push_str(&out);
    }
    let docs: Vec<&str> = sealed
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .collect();
    assert_eq!(docs.len(), objects);
    for (n, chunk) in docs.chunks(100).enumerate() {
        let folder = dir.join(tree).join(format!("cluster-{}/apps", n % 4));
        std::fs::create_dir_all(&folder).expect("mkdir");
        let mut text = String::from("# generated for the benchmark\n");
        for (i, doc) in chunk.iter().enumerate() {
            let _ = write!(text, "---\n{doc}");
            if i % 2 == 1 {
                text.push_str("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n");
            }
        }
        std::fs::write(folder.join(format!("apps-{n}.yaml")), text).expect("write");
    }
}

/// The best and the median of `runs` runs of `kseal check ARGS`.
fn time(dir: &Path, args: &[&str], runs: usize) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let (code, _) = kseal(dir, args);
            let took = start.elapsed();
            assert_eq!(code, 0, "kseal check found problems");
            took
        })
        .collect();
    times.sort();
    (times[0], times[runs / 2])
}

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` is ignored.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let objects = size("KSEAL_BENCH_CHECK_OBJECTS", 10_000);
    let private = size("KSEAL_BENCH_CHECK_PRIVATE", 200);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let dir = tempfile::tempdir().expect("temp dir");
    eprintln!("generating an RSA-4096 key and sealing {objects} + {private} SealedSecrets…");
    let (code, _) = kseal(dir.path(), &["keys", "generate", "--out-dir", "key"]);
    assert_eq!(code, 0, "kseal keys generate failed");
    build_tree(dir.path(), "public", objects);
    build_tree(dir.path(), "private", private);

    // Wall-clock figures depend on what else runs: say how busy the machine was.
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average (1, 5, 15 min) before the runs: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (best, median) = time(
        dir.path(),
        &[
            "check",
            "--cert",
            "key/tls.crt",
            "--format",
            "json",
            "public",
        ],
        5,
    );
    println!(
        "kseal check, public tier: {objects} SealedSecrets ({} items, {} files) on {cores} \
         cores: best {:.3} s, median {:.3} s ({:.1} µs per SealedSecret)",
        objects * 2,
        objects.div_ceil(100),
        best.as_secs_f64(),
        median.as_secs_f64(),
        best.as_secs_f64() * 1e6 / objects.max(1) as f64
    );
    let (best, median) = time(
        dir.path(),
        &[
            "check",
            "--key",
            "key/tls.key",
            "--format",
            "json",
            "private",
        ],
        3,
    );
    let items = private * 2;
    println!(
        "kseal check, private tier (--key, RSA-4096): {private} SealedSecrets ({items} items) \
         on {cores} cores: best {:.3} s, median {:.3} s ({:.2} ms per item, {:.0} items/s)",
        best.as_secs_f64(),
        median.as_secs_f64(),
        best.as_secs_f64() * 1e3 / items.max(1) as f64,
        items as f64 / best.as_secs_f64()
    );
}
