//! Controller scale benchmark: cold start and restart of the real `kseal-controller` binary
//! over N SealedSecrets and a 24-key ring (RSA-4096), against the test API server.
//!
//! Not a test (no assertion on timings): `cargo bench -p kseal-controller --bench scale`.
//! The cold start ends with the last Secret or status write in the test API server's request
//! log (times to the microsecond); the bench's poll of `/metrics`, which decides when the
//! phase is over, is printed too but is only as fine as its interval.
//! Settings come from environment variables (or `--n 1000`-style flags after `--`):
//!
//! - `SCALE_N` (`--n`): SealedSecrets, default 10,000 (one value each);
//! - `SCALE_NAMESPACES` (`--namespaces`): namespaces they are spread over, default 4;
//! - `SCALE_NO_HINT_PERCENT` (`--no-hint-percent`): share sealed with an older key and
//!   without the `kseal.dev/sealing-key` hint, default 10 (the rest: the sealing key, with
//!   the hint);
//! - `SCALE_UNHINTED_RINGS` (`--unhinted-rings`): with rings, `team` (default: a namespace's
//!   unhinted values all come from its team ring, the legacy values of that team) or `mixed`
//!   (half from the shared ring, as the hinted ones: two legacy keys in each namespace, so no
//!   order of attempts gets below about 1.5 per unhinted value);
//! - `SCALE_RINGS` (`--rings`): fleet rings the controller holds, default 1 (the 24 key
//!   Secrets in Bitnami's layout, no `--key-source`: the setup below). With R ≥ 2 the bench
//!   makes R × 24 keys and stores them as the mirror key Secrets of R rings (labels
//!   `kseal.dev/mirror=true` and the key label, annotations `kseal.dev/ring` and
//!   `kseal.dev/kid`, as the controller writes them): ring `kseal/bench-shared`, unbound, and
//!   R − 1 team rings `kseal/bench-team-a`, `-b`, …, each holding the values of an equal run
//!   of the app namespaces (team a the first ones). The rings are not bound to namespaces:
//!   with no store answering, no ring's index is ever verified, and keys of a ring whose index
//!   is not verified open only where every ring opens, so bound team rings would open
//!   nothing; unbound, every value is tried against all R × 24 keys, more candidates than a
//!   binding leaves (the harder case for the order of attempts). The controller gets one
//!   `--key-source secretsmanager://RING` per ring with a Secrets Manager endpoint nobody
//!   listens on (`--aws-endpoint-url http://127.0.0.1:1`, dummy AWS credentials in its
//!   environment): it runs from the mirrors, as in a store outage. Each value is sealed to
//!   the shared ring or to its namespace's team ring (about half each, by a hash of its
//!   index); within that ring the no-hint share and `SCALE_UNHINTED_KEYS` pick the key as
//!   with one ring (the hinted ones: the ring's newest key). After the restart, a hint split
//!   phase measures RSA operations per hinted and per unhinted value apart: the running
//!   controller (which has unsealed nothing yet) recreates first the deleted Secrets of the
//!   hinted objects, then those of the unhinted ones, its RSA counter read after each;
//! - `SCALE_UNHINTED_KEYS` (`--unhinted-keys`): which older keys sealed that share:
//!   `random` (default, the worst case: each value one of the 23 older keys, in turn),
//!   `legacy1` (all by the oldest key: the realistic case after a kubeseal migration) or
//!   `legacy2` (the two oldest keys, each value's picked by a hash of its index: about half
//!   each, mixed within every namespace, so no order of attempts can guess it);
//! - `SCALE_CONCURRENCY` (`--concurrency`): the controller's `--concurrency`, default the
//!   number of cores (those of `SCALE_CONTROLLER_CPUS` when set);
//! - `SCALE_LEADER_ELECT` (`--leader-elect`): `true` (default) or `false`;
//! - `SCALE_CONTROLLER_BIN`: another `kseal-controller` binary to run (before/after figures);
//!   `controller/benches/valgrind-wrap.sh` runs the cold start's controller under callgrind,
//!   for instruction counts the machine's load does not move (see that script);
//! - `SCALE_KEY_CACHE` (`--key-cache`): a folder keeping the 24 generated keys between runs
//!   (default: `scale-keys` under Cargo's target tmp folder; `none` generates afresh); with
//!   `SCALE_RINGS` ≥ 2, ring r's 24 keys are kept in its subfolder `ring-r` (so a one-ring
//!   run never reads them, nor they its keys). They are throwaway bench keys, written with
//!   mode 0600: never use them for anything real;
//! - `SCALE_FIXTURE_CACHE` (`--fixture-cache`): a folder keeping the sealed fixture
//!   SealedSecrets between runs, one JSON-lines file per combination of N, namespaces,
//!   no-hint share, unhinted keys, rings and the key ids (named by a hash of them, so new keys or
//!   settings never reuse a file; files of other combinations are kept). Default:
//!   `scale-fixtures` under Cargo's target tmp folder; `none` seals afresh. Sealing stays
//!   parallel (one thread per core); the objects are still created on the server each run;
//! - `SCALE_SERVER` (`--server`): where the test API server runs: `inline` (default) in this
//!   process, or `process`: in a child process of its own (this executable run again with
//!   `--scale-serve-testapi`, serving as `kseal-testapi` does), so its CPU time is not the
//!   bench's, and the table reports its CPU time (`/proc/PID/stat`) and peak RSS apart; the
//!   bench creates the fixtures over TCP, reads and clears the request log over the
//!   test-only `/_testkit/requests` endpoint and follows the cold start's progress over
//!   `/_testkit/requests/count`;
//! - `SCALE_SERVER_CPUS` (`--server-cpus`), `SCALE_CONTROLLER_CPUS` (`--controller-cpus`):
//!   CPU lists (`0-7`, `0,2,4-5`) to pin the server process (needs `SCALE_SERVER=process`)
//!   and the controller to, with `taskset -c` (the bench fails if `taskset` cannot be run).
//!   The RSA floors then divide by the controller's CPUs.
//! - `SCALE_ASYNC_THREADS` (`--async-threads`): the controller's `--async-threads`, default 0
//!   (its own default: one per CPU);
//! - `SCALE_FOLLOWER_SECONDS`: how long the follower phase (below) watches the second
//!   replica once it is ready, default 5 (past 60 shows any per-object recheck timer);
//! - `SCALE_MALLOC_ENV` (`--malloc-env`): `image` (default) runs the controller with the
//!   `MALLOC_*` settings the image's Dockerfile sets (what a user's pod gets; a variable
//!   already set in the bench's environment wins), `none` with glibc's defaults. The test
//!   API server's own process (`SCALE_SERVER=process`) gets the same settings;
//!
//! Method: the test API server runs in this process (or its own, above) and is served on
//! 127.0.0.1; the controller is the release `kseal-controller` binary in a child process over
//! a kubeconfig (default flags: all namespaces, leader election on), so its peak RSS (`VmHWM`)
//! is its own. Cold start is done when the API server has logged N Secrets and N Events
//! created and then the `created` reconcile counter reads N (the cold start's progress is
//! read from the server, so the bench's own `/metrics` scrapes are not counted in the
//! controller's CPU and memory), the restart when the `unchanged` counter does (however the
//! controller confirms the Secrets: the table's request rows show how many GETs, list pages
//! and watches that took). Progress goes to stderr, the result table to stdout. Figures are
//! recorded in docs/benchmarks.md.
//!
//! It also gives the longest `/metrics` scrape of each phase (connect to last byte): the
//! condition gauge has one series per reconciled object, encoded at each scrape under the
//! reconciler's per-object state lock, so this is how long reconciles could wait on a scrape.
//!
//! The table also gives how long the test API server's state lock was held during the cold
//! start and the restart (its share of the phase): every request that reads or writes objects
//! holds it, one at a time, so a share near 100 % means the server set the pace.
//!
//! Two more cold-start rows say where its time and memory go. "CPU spent ... / machine's
//! cores" divides the cold start by all the CPU the controller, the test API server and the
//! bench spent on it, spread over every core: near 1.00 no core sat idle (the cold start is
//! CPU-bound, and what lies above the RSA floor is CPU spent outside RSA), well above it
//! something waited. The RSS timeline reads the controller's `VmRSS` at each poll: the RSS
//! at a quarter, half, three quarters and all of the Secrets created, and the first poll
//! that saw the final peak (stderr has every point).
//!
//! With leader election on, a follower phase follows the restart: a second replica starts
//! while the first still leads, and the table reports its peak RSS and its CPU time over a
//! window after it is ready (it lists and watches every object and may write nothing).

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::exit,
    unreachable_pub
)]

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kseal_api::constants::{SEALING_KEY_ANNOTATION, SEALING_KEY_LABEL};
use kseal_api::{SealOptions, SealedSecret, seal_secret};
use kseal_controller::keys;
use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize, Scope};
use kseal_testkit::TestApiServer;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const BIN: &str = env!("CARGO_BIN_EXE_kseal-controller");
/// Overrides the controller binary (e.g. an older build, for before/after figures).
const BIN_ENV: &str = "SCALE_CONTROLLER_BIN";
const CRD_YAML: &str = include_str!("../../deploy/crd.yaml");
/// The image's build file: its `ENV MALLOC_*` settings are the controller's malloc tuning.
const DOCKERFILE: &str = include_str!("../../Dockerfile");
const CONTROLLER_NS: &str = "kseal-system";
const KEYS: usize = 24;
/// `SCALE_RINGS` ≥ 2: the Secrets Manager endpoint of the rings. Nothing listens on port 1
/// of the loopback address (binding it needs privileges), so every call fails at once as
/// refused, and the controller runs from the mirrors.
const RING_STORE: &str = "http://127.0.0.1:1";
/// Decrypts timed on one key for the per-operation RSA time.
const PER_OP_SAMPLES: usize = 100;
/// How often the bench polls while waiting, per [`POLL_PER`] objects (at least once): the
/// cold start asks the API server, the restart scrapes the controller's `/metrics`. Each
/// scrape encodes one condition series per object, so a fixed interval
/// would charge the controller a cost per object that grows with N (at 100,000 objects and
/// 200 ms, about a tenth of its CPU on a cold start), which no Prometheus scraping every 15
/// to 60 s does.
const POLL: Duration = Duration::from_millis(200);
/// Objects per [`POLL`] of scrape interval.
const POLL_PER: usize = 10_000;

/// The scrape interval for `n` objects.
fn poll_interval(n: usize) -> Duration {
    POLL * u32::try_from(n.div_ceil(POLL_PER).max(1)).unwrap_or(u32::MAX)
}
/// Gives up waiting after this long (a hung run, not a measurement).
const GIVE_UP: Duration = Duration::from_secs(900);
/// First argument that makes this executable the test API server of `SCALE_SERVER=process`
/// (`<exe> --scale-serve-testapi KUBECONFIG`; see `kseal_testkit::standalone`). The bench runs
/// itself rather than `kseal-testapi`, which `cargo bench -p kseal-controller` does not build.
const SERVE_ARG: &str = "--scale-serve-testapi";

/// Which older keys sealed the values without a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnhintedKeys {
    /// Each one of the 23 older keys, in turn (the worst case for trial decryption).
    Random,
    /// The oldest `n` keys (1 or 2): Bitnami keys imported after a kubeseal migration.
    Legacy(usize),
}

impl std::str::FromStr for UnhintedKeys {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        match text {
            "random" => Ok(Self::Random),
            "legacy1" => Ok(Self::Legacy(1)),
            "legacy2" => Ok(Self::Legacy(2)),
            _ => bail!("--unhinted-keys {text:?}: expected random, legacy1 or legacy2"),
        }
    }
}

impl std::fmt::Display for UnhintedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Random => write!(f, "one of the {} older keys each (worst case)", KEYS - 1),
            Self::Legacy(1) => write!(f, "the oldest key (legacy1)"),
            Self::Legacy(n) => write!(f, "the {n} oldest keys, mixed (legacy{n})"),
        }
    }
}

/// Where the test API server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerMode {
    /// In this process (its CPU time is counted with the bench's own).
    Inline,
    /// In a child process of its own (this executable again, see [`SERVE_ARG`]).
    Process,
}

impl std::str::FromStr for ServerMode {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        match text {
            "inline" => Ok(Self::Inline),
            "process" => Ok(Self::Process),
            _ => bail!("--server {text:?}: expected inline or process"),
        }
    }
}

#[derive(Debug, Clone)]
struct Options {
    key_cache: Option<std::path::PathBuf>,
    fixture_cache: Option<std::path::PathBuf>,
    server: ServerMode,
    /// CPU list (`taskset -c`) for the test API server process.
    server_cpus: Option<String>,
    /// CPU list (`taskset -c`) for the controller.
    controller_cpus: Option<String>,
    n: usize,
    namespaces: usize,
    /// Fleet rings held as mirrors (1: the Bitnami-layout keys, no `--key-source`).
    rings: usize,
    /// `SCALE_UNHINTED_RINGS=mixed`: with rings, the unhinted values of a namespace are
    /// sealed to the shared ring or its team ring (half each), as the hinted ones; default
    /// (`team`): all to its team ring (a team's legacy values).
    unhinted_mixed: bool,
    no_hint_percent: usize,
    unhinted_keys: UnhintedKeys,
    concurrency: usize,
    leader_elect: bool,
    /// How long the follower phase watches the second replica once it is ready.
    follower_seconds: u64,
    /// The controller's `--async-threads` (0: its default).
    async_threads: u16,
    /// Run the controller with the image's `MALLOC_*` environment.
    image_malloc_env: bool,
}

/// The `NAME=value` settings of the Dockerfile's `ENV` lines whose name starts with `MALLOC_`.
fn image_malloc_env() -> Vec<(String, String)> {
    DOCKERFILE
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ENV "))
        .flat_map(str::split_whitespace)
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| k.starts_with("MALLOC_"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Gives `cmd` the image's `MALLOC_*` settings (where the bench's own environment has none)
/// when `SCALE_MALLOC_ENV=image`: the controller, and the test API server's own process, whose
/// paged lists and write bursts otherwise spend much of their time in glibc's free-chunk
/// consolidation.
fn with_malloc_env(o: &Options, cmd: &mut Command) {
    if o.image_malloc_env {
        for (name, value) in image_malloc_env() {
            if std::env::var_os(&name).is_none() {
                cmd.env(name, value);
            }
        }
    }
}

fn malloc_env_setting(text: &str) -> anyhow::Result<bool> {
    match text {
        "image" => Ok(true),
        "none" => Ok(false),
        _ => bail!("--malloc-env {text:?}: expected image or none"),
    }
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let env = |name: &str| std::env::var(name).ok();
        let cache = |v: String| (v != "none").then(|| std::path::PathBuf::from(v));
        let mut o = Options {
            key_cache: env("SCALE_KEY_CACHE").map_or_else(
                || Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("scale-keys")),
                cache,
            ),
            fixture_cache: env("SCALE_FIXTURE_CACHE").map_or_else(
                || Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("scale-fixtures")),
                cache,
            ),
            server: env("SCALE_SERVER").map_or(Ok(ServerMode::Inline), |v| v.parse())?,
            server_cpus: env("SCALE_SERVER_CPUS").filter(|v| !v.is_empty()),
            controller_cpus: env("SCALE_CONTROLLER_CPUS").filter(|v| !v.is_empty()),
            n: env("SCALE_N").map_or(Ok(10_000), |v| v.parse())?,
            namespaces: env("SCALE_NAMESPACES").map_or(Ok(4), |v| v.parse())?,
            rings: env("SCALE_RINGS").map_or(Ok(1), |v| v.parse())?,
            unhinted_mixed: env("SCALE_UNHINTED_RINGS").is_some_and(|v| v == "mixed"),
            no_hint_percent: env("SCALE_NO_HINT_PERCENT").map_or(Ok(10), |v| v.parse())?,
            unhinted_keys: env("SCALE_UNHINTED_KEYS")
                .map_or(Ok(UnhintedKeys::Random), |v| v.parse())?,
            concurrency: env("SCALE_CONCURRENCY").map_or(Ok(0), |v| v.parse())?,
            leader_elect: env("SCALE_LEADER_ELECT").map_or(Ok(true), |v| v.parse())?,
            follower_seconds: env("SCALE_FOLLOWER_SECONDS").map_or(Ok(5), |v| v.parse())?,
            async_threads: env("SCALE_ASYNC_THREADS").map_or(Ok(0), |v| v.parse())?,
            image_malloc_env: env("SCALE_MALLOC_ENV")
                .map_or(Ok(true), |v| malloc_env_setting(&v))?,
        };
        // `cargo bench` passes `--bench`; anything unknown is ignored.
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut i = 0;
        while i < args.len() {
            let (flag, inline) = match args[i].split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (args[i].clone(), None),
            };
            let known = [
                "--n",
                "--namespaces",
                "--rings",
                "--no-hint-percent",
                "--unhinted-keys",
                "--concurrency",
                "--leader-elect",
                "--key-cache",
                "--fixture-cache",
                "--server",
                "--server-cpus",
                "--controller-cpus",
                "--malloc-env",
                "--async-threads",
            ];
            if known.contains(&flag.as_str()) {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i).cloned().context("flag without a value")?
                    }
                };
                match flag.as_str() {
                    "--n" => o.n = value.parse()?,
                    "--namespaces" => o.namespaces = value.parse()?,
                    "--rings" => o.rings = value.parse()?,
                    "--unhinted-rings" => o.unhinted_mixed = value == "mixed",
                    "--no-hint-percent" => o.no_hint_percent = value.parse()?,
                    "--unhinted-keys" => o.unhinted_keys = value.parse()?,
                    "--concurrency" => o.concurrency = value.parse()?,
                    "--key-cache" => o.key_cache = cache(value),
                    "--fixture-cache" => o.fixture_cache = cache(value),
                    "--server" => o.server = value.parse()?,
                    "--server-cpus" => o.server_cpus = Some(value),
                    "--controller-cpus" => o.controller_cpus = Some(value),
                    "--malloc-env" => o.image_malloc_env = malloc_env_setting(&value)?,
                    "--async-threads" => o.async_threads = value.parse()?,
                    _ => o.leader_elect = value.parse()?,
                }
            }
            i += 1;
        }
        if o.n == 0 || o.namespaces == 0 || o.no_hint_percent > 100 {
            bail!("invalid settings: {o:?}");
        }
        // The controller mirrors at most 16 rings (`keys::binding::MAX_RINGS`).
        if o.rings == 0 || o.rings > 16 {
            bail!(
                "SCALE_RINGS (--rings) {}: expected 1 to 16 (1: no --key-source)",
                o.rings
            );
        }
        if o.rings > 1 && o.namespaces < o.rings - 1 {
            bail!(
                "SCALE_RINGS (--rings) {} binds {} team rings to namespaces of their own: it \
                 needs at least as many namespaces (SCALE_NAMESPACES is {})",
                o.rings,
                o.rings - 1,
                o.namespaces
            );
        }
        if o.server_cpus.is_some() && o.server == ServerMode::Inline {
            bail!(
                "SCALE_SERVER_CPUS (--server-cpus) pins the test API server's own process: it \
                 needs SCALE_SERVER=process (--server process)"
            );
        }
        for (name, list) in [
            ("SCALE_SERVER_CPUS", &o.server_cpus),
            ("SCALE_CONTROLLER_CPUS", &o.controller_cpus),
        ] {
            if let Some(list) = list {
                cpu_count(list).with_context(|| format!("{name}={list:?}"))?;
                check_taskset(name)?;
            }
        }
        // Unset (0): one reconcile per core the controller may use.
        if o.concurrency == 0 {
            o.concurrency = o.controller_cores(cores);
        }
        Ok(o)
    }

    /// Cores the controller runs on: its CPU list's, else the machine's (`cores`).
    fn controller_cores(&self, cores: usize) -> usize {
        self.controller_cpus
            .as_deref()
            .and_then(|l| cpu_count(l).ok())
            .unwrap_or(cores)
    }
}

/// Number of CPUs in a `taskset -c` list such as `0-7` or `0,2,4-5`.
fn cpu_count(list: &str) -> anyhow::Result<usize> {
    let mut cpus = HashSet::new();
    for part in list.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let (first, last): (usize, usize) = (first.trim().parse()?, last.trim().parse()?);
        if first > last {
            bail!("CPU range {part:?} runs backwards");
        }
        cpus.extend(first..=last);
    }
    Ok(cpus.len())
}

/// Fails clearly when `taskset` (util-linux) cannot be run.
fn check_taskset(setting: &str) -> anyhow::Result<()> {
    match Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => Ok(()),
        Err(e) => bail!(
            "{setting} is set, which pins with `taskset`, but `taskset` could not be run ({e}); \
             install util-linux or unset {setting}"
        ),
    }
}

/// A command for `program`, under `taskset -c cpus` when `cpus` is set (taskset execs the
/// program, so the child's PID is the program's).
fn pinned(cpus: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", cpus]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

fn main() -> anyhow::Result<()> {
    // This executable is also the test API server process of `SCALE_SERVER=process`.
    let args: Vec<std::ffi::OsString> = std::env::args_os().take(3).collect();
    if args.get(1).is_some_and(|a| a == SERVE_ARG) {
        let kubeconfig = args.get(2).context("kubeconfig path")?;
        return tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(kseal_testkit::standalone::serve_until_stopped(Path::new(
                kubeconfig,
            )));
    }
    let options = Options::parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(options))
}

/// 24 RSA-4096 key pairs, oldest first, NotBefore one day apart (the last one seals).
fn generate_keys() -> Vec<KeyPair> {
    let start = Instant::now();
    let now = SystemTime::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut slots: Vec<Option<KeyPair>> = (0..KEYS).map(|_| None).collect();
    std::thread::scope(|scope| {
        let chunk = KEYS.div_ceil(threads);
        for (t, part) in slots.chunks_mut(chunk).enumerate() {
            let done = &done;
            scope.spawn(move || {
                for (j, slot) in part.iter_mut().enumerate() {
                    let index = t * chunk + j;
                    let options = CertificateOptions {
                        not_before: now
                            - Duration::from_secs(86_400 * (KEYS - index) as u64)
                            - Duration::from_secs(60),
                        ..CertificateOptions::default()
                    };
                    *slot = Some(KeyPair::generate(KeySize::Rsa4096, &options).expect("keygen"));
                    let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    eprintln!(
                        "  key {d}/{KEYS} generated ({:.1} s)",
                        start.elapsed().as_secs_f64()
                    );
                }
            });
        }
    });
    slots.into_iter().map(|k| k.expect("generated")).collect()
}

/// The bench keys from `cache` when it holds all of them, else generated (and stored there).
fn cached_keys(cache: Option<&Path>) -> anyhow::Result<Vec<KeyPair>> {
    let Some(dir) = cache else {
        return Ok(generate_keys());
    };
    let paths = |i: usize| {
        (
            dir.join(format!("key{i:02}.pem")),
            dir.join(format!("key{i:02}.crt")),
        )
    };
    let load = || -> anyhow::Result<Vec<KeyPair>> {
        (0..KEYS)
            .map(|i| {
                let (key, crt) = paths(i);
                Ok(KeyPair::from_pem(
                    &std::fs::read_to_string(key)?,
                    &std::fs::read_to_string(crt)?,
                )?)
            })
            .collect()
    };
    if let Ok(keys) = load() {
        eprintln!("  {KEYS} keys read from {}", dir.display());
        return Ok(keys);
    }
    let keys = generate_keys();
    std::fs::create_dir_all(dir)?;
    for (i, pair) in keys.iter().enumerate() {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let (key, crt) = paths(i);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key)?
            .write_all(pair.private_key().to_pkcs8_pem().as_bytes())?;
        std::fs::write(crt, pair.certificate().to_pem())?;
    }
    eprintln!("  {KEYS} keys stored in {}", dir.display());
    Ok(keys)
}

/// `SCALE_RINGS` ≥ 2: each ring's keys as the mirror key Secrets the controller writes for
/// a ring (`keys::source::mirror`): the key label and `kseal.dev/mirror=true`, the ring and
/// the kid in annotations. Ring `r`'s keys are `keys[r * KEYS..(r + 1) * KEYS]`.
async fn create_mirror_secrets(
    secrets: &Api<Secret>,
    keys: &[KeyPair],
    rings: usize,
) -> anyhow::Result<()> {
    use kseal_controller::keys::source::{KID_ANNOTATION, MIRROR_LABEL, RING_ANNOTATION};
    for r in 0..rings {
        for (i, pair) in keys[r * KEYS..(r + 1) * KEYS].iter().enumerate() {
            let mut s = keys::key_secret("kseal-mirror-", CONTROLLER_NS, pair)?;
            s.metadata.generate_name = None;
            s.metadata.name = Some(format!("kseal-mirror-r{r}-{i:02}"));
            s.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(MIRROR_LABEL.to_owned(), "true".to_owned());
            s.metadata.annotations = Some(BTreeMap::from([
                (
                    KID_ANNOTATION.to_owned(),
                    kseal_keystore::Kid::of(pair.public_key()).to_string(),
                ),
                (RING_ANNOTATION.to_owned(), ring_name(r)),
            ]));
            secrets.create(&PostParams::default(), &s).await?;
        }
    }
    eprintln!(
        "  {} mirror key Secrets of {rings} rings created",
        rings * KEYS
    );
    Ok(())
}

/// Rounds of each open-time measurement; the fastest counts (a round slowed by another
/// process or a busy host core is not the machine's throughput).
const PER_OP_ROUNDS: usize = 3;

/// Mean time of one RSA-4096 open (envelope + RSA-OAEP + AES-GCM) on a 1-key ring, and the
/// wall time per open with one thread per core opening at once (throughput of the machine),
/// each the fastest of [`PER_OP_ROUNDS`] rounds.
fn per_op_times(pair: &KeyPair) -> (Duration, Duration) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut single = Duration::MAX;
    let mut parallel = Duration::MAX;
    for _ in 0..PER_OP_ROUNDS {
        single = single.min(per_op_time(pair));
        let start = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| per_op_time(pair));
            }
        });
        // Each thread seals its values (AWS-LC, ~50 µs each) before timing, so subtract
        // nothing: sealing is small against the opens and counted in both.
        parallel = parallel.min(start.elapsed() / (threads * (PER_OP_SAMPLES + 10)) as u32);
    }
    (single, parallel)
}

/// Mean time of one RSA-4096 open (envelope + RSA-OAEP + AES-GCM) on a 1-key ring.
fn per_op_time(pair: &KeyPair) -> Duration {
    let ring: KeyRing = [pair.clone()].into_iter().collect();
    let label = Scope::Strict.label("bench", "per-op");
    let sealed: Vec<Vec<u8>> = (0..PER_OP_SAMPLES + 10)
        .map(|i| {
            kseal_keys::seal(
                pair.public_key(),
                &label,
                format!("value-{i:032}").as_bytes(),
            )
            .expect("seal")
        })
        .collect();
    for s in &sealed[..10] {
        ring.open(&label, s, None).expect("open");
    }
    let start = Instant::now();
    for s in &sealed[10..] {
        std::hint::black_box(ring.open(&label, s, None).expect("open"));
    }
    start.elapsed() / PER_OP_SAMPLES as u32
}

fn app_namespace(i: usize) -> String {
    format!("scale-app-{i}")
}

/// `SCALE_RINGS` ≥ 2: the name of ring `r` (its Secrets Manager prefix): the shared ring
/// first, then the team rings `a`, `b`, ….
fn ring_name(r: usize) -> String {
    match r {
        0 => "kseal/bench-shared".to_owned(),
        _ => format!("kseal/bench-team-{}", char::from(b'a' + (r - 1) as u8)),
    }
}

/// The team ring (1 to rings − 1) bound to app namespace `ns`: each team an equal run of the
/// namespaces, team a the first ones.
fn team_ring(o: &Options, ns: usize) -> usize {
    1 + ns * (o.rings - 1) / o.namespaces
}

/// The ring whose keys sealed the `index`-th value: with one ring, that ring; else the
/// shared ring or its namespace's team ring, by a hash of the index (salted, so that it does
/// not follow `legacy2`'s choice of key).
fn value_ring(o: &Options, index: usize) -> usize {
    if o.rings == 1 || mix(index as u64 ^ 0x5ca1_ab1e_0000_0000) & 1 == 0 {
        0
    } else {
        team_ring(o, index % o.namespaces)
    }
}

/// `SCALE_RINGS` ≥ 2: the controller's ring flags (none with one ring): each ring as a
/// `--key-source` on a store nobody answers, and each team ring bound to its namespaces.
fn ring_flags(o: &Options) -> Vec<String> {
    if o.rings == 1 {
        return Vec::new();
    }
    let mut flags = Vec::new();
    for r in 0..o.rings {
        flags.push("--key-source".to_owned());
        flags.push(format!("secretsmanager://{}", ring_name(r)));
    }
    flags.push("--aws-endpoint-url".to_owned());
    flags.push(RING_STORE.to_owned());
    // No `--ring-namespaces`: with no store answering, no ring's index is ever verified, and
    // keys of rings whose index is not verified open only where every ring opens (a bound
    // team ring's values would all wait). Unbound, every namespace's values are tried against
    // all R × 24 keys: more candidates than a binding leaves, the harder case for the order
    // of attempts.
    flags
}

/// The rings as the table names them.
fn rings_row(o: &Options) -> String {
    let mut rings = vec![format!("{} (unbound)", ring_name(0))];
    for r in 1..o.rings {
        let namespaces: Vec<String> = (0..o.namespaces)
            .filter(|&ns| team_ring(o, ns) == r)
            .map(app_namespace)
            .collect();
        rings.push(format!(
            "{} (values in {}; unbound)",
            ring_name(r),
            namespaces.join(", ")
        ));
    }
    format!(
        "{}: {}; mirrors only (store at {RING_STORE}, refused)",
        o.rings,
        rings.join(", ")
    )
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

/// The `index`-th SealedSecret and whether it carries the hint.
fn sealed_secret(o: &Options, index: usize, keys: &[KeyPair]) -> SealedSecret {
    let namespace = app_namespace(index % o.namespaces);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("s-{index:06}")),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "password".to_owned(),
            ByteString(format!("pw-{index:06}-0123456789abcdef0123456789").into_bytes()),
        )])),
        ..Secret::default()
    };
    // Every (100 / p)-th object, spread evenly: an older key, no hint.
    let older = o.no_hint_percent > 0 && (index * o.no_hint_percent) % 100 < o.no_hint_percent;
    // The keys of the ring that sealed it (all of them with one ring), oldest first; with
    // rings, a namespace's unhinted values are its team's legacy values unless mixed.
    let ring = if older && o.rings > 1 && !o.unhinted_mixed {
        team_ring(o, index % o.namespaces)
    } else {
        value_ring(o, index)
    };
    let keys = &keys[ring * KEYS..(ring + 1) * KEYS];
    let sealing = &keys[KEYS - 1];
    let key = match (older, o.unhinted_keys) {
        (false, _) => sealing,
        (true, UnhintedKeys::Random) => &keys[index % (KEYS - 1)],
        (true, UnhintedKeys::Legacy(n)) => &keys[(mix(index as u64) % n as u64) as usize],
    };
    let mut ss = seal_secret(&secret, key.public_key(), &SealOptions::default()).expect("seal");
    if older && let Some(a) = ss.metadata.annotations.as_mut() {
        a.remove(SEALING_KEY_ANNOTATION);
    }
    ss
}

/// Every fixture SealedSecret, in index order, sealed on one thread per core.
fn seal_all(o: &Options, keys: &[KeyPair]) -> Vec<SealedSecret> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = o.n.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = (0..o.n)
            .step_by(chunk)
            .map(|start| {
                scope.spawn(move || {
                    (start..(start + chunk).min(o.n))
                        .map(|i| sealed_secret(o, i, keys))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("sealing thread"))
            .collect()
    })
}

/// Bump when `sealed_secret` changes what it makes, so that cached fixtures of the older
/// format are not reused.
const FIXTURE_FORMAT: u32 = 1;

/// The fixture cache file for these settings and keys: named by a hash of everything the
/// fixtures depend on, so other keys (a regenerated key cache) or settings never reuse it.
fn fixture_file(dir: &Path, o: &Options, keys: &[KeyPair]) -> std::path::PathBuf {
    use sha2::{Digest as _, Sha256};
    let mut hash = Sha256::new();
    hash.update(format!(
        "kseal scale fixtures v{FIXTURE_FORMAT}\nn {}\nnamespaces {}\nno-hint-percent {}\n\
         unhinted-keys {:?}\n",
        o.n, o.namespaces, o.no_hint_percent, o.unhinted_keys
    ));
    // Only with rings, so that one-ring files keep their names.
    if o.rings > 1 {
        hash.update(format!("rings {}\n", o.rings));
        if !o.unhinted_mixed {
            hash.update("unhinted-rings team\n");
        }
    }
    for pair in keys {
        hash.update(pair.id().as_str());
        hash.update(b"\n");
    }
    let name: String = hash.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("fixtures-{}-{name}.jsonl", o.n))
}

/// SealedSecrets from JSON lines, parsed on one thread per core.
fn parse_fixtures(text: &str) -> anyhow::Result<Vec<SealedSecret>> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = lines.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = lines
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|line| serde_json::from_str::<SealedSecret>(line))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut objects = Vec::with_capacity(lines.len());
        for part in parts {
            objects.extend(part.join().expect("parsing thread")?);
        }
        Ok(objects)
    })
}

/// The fixture SealedSecrets from the fixture cache when it holds them for these settings and
/// keys, else sealed (on one thread per core) and stored there as JSON lines.
fn cached_fixtures(o: &Options, keys: &[KeyPair]) -> anyhow::Result<Vec<SealedSecret>> {
    let start = Instant::now();
    let Some(dir) = o.fixture_cache.as_deref() else {
        let objects = seal_all(o, keys);
        eprintln!(
            "  {} SealedSecrets sealed ({:.1} s; fixture cache off)",
            o.n,
            start.elapsed().as_secs_f64()
        );
        return Ok(objects);
    };
    let file = fixture_file(dir, o, keys);
    if let Ok(text) = std::fs::read_to_string(&file) {
        match parse_fixtures(&text) {
            Ok(objects) if objects.len() == o.n => {
                eprintln!(
                    "  {} SealedSecrets read from {} ({:.1} s)",
                    o.n,
                    file.display(),
                    start.elapsed().as_secs_f64()
                );
                return Ok(objects);
            }
            Ok(objects) => eprintln!(
                "  {} holds {} objects, not {}: sealing afresh",
                file.display(),
                objects.len(),
                o.n
            ),
            Err(e) => eprintln!("  {} unreadable ({e:#}): sealing afresh", file.display()),
        }
    }
    let objects = seal_all(o, keys);
    eprintln!(
        "  {} SealedSecrets sealed ({:.1} s)",
        o.n,
        start.elapsed().as_secs_f64()
    );
    // Written whole, then renamed: an interrupted run leaves no short cache file.
    std::fs::create_dir_all(dir)?;
    let partial = file.with_extension("partial");
    {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
        for ss in &objects {
            serde_json::to_writer(&mut out, ss)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    std::fs::rename(&partial, &file)?;
    eprintln!("  stored in {}", file.display());
    Ok(objects)
}

/// SplitMix64's finalizer: a fixed, well-spread hash (which legacy key sealed a value must
/// not follow its namespace or its position in a list).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The longest successful scrape since [`longest_scrape`] last read it, in microseconds.
static LONGEST_SCRAPE_MICROS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The longest successful `/metrics` scrape (connect to last byte) since the last call.
fn longest_scrape() -> Duration {
    Duration::from_micros(LONGEST_SCRAPE_MICROS.swap(0, std::sync::atomic::Ordering::Relaxed))
}

/// One scrape of the controller's `/metrics` (plain HTTP/1.1 on 127.0.0.1).
async fn scrape(port: u16) -> anyhow::Result<String> {
    let started = Instant::now();
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await?;
    let text = String::from_utf8(out)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP body")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("metrics: {}", head.lines().next().unwrap_or_default());
    }
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    LONGEST_SCRAPE_MICROS.fetch_max(micros, std::sync::atomic::Ordering::Relaxed);
    Ok(body.to_owned())
}

/// The whole answer to a plain `GET path` on its own connection (`None`: no answer).
async fn get_raw(port: u16, path: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The body of a plain `GET path` (any status), for a diagnosis.
async fn get_text(port: u16, path: &str) -> Option<String> {
    let text = get_raw(port, path).await?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some(format!(
        "{}: {}",
        head.lines().next().unwrap_or_default(),
        body.trim()
    ))
}

async fn get_status(port: u16, path: &str) -> Option<u16> {
    get_raw(port, path)
        .await?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The controller metrics this bench reads.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    rsa: u64,
    /// `kseal_unseal_cpu_seconds_total`: CPU time of the controller's unsealing threads.
    unseal_cpu: f64,
    created: u64,
    updated: u64,
    unchanged: u64,
    failed: u64,
}

fn counters(metrics: &str) -> Counters {
    let mut c = Counters::default();
    for line in metrics.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        if name == "kseal_unseal_cpu_seconds_total" {
            c.unseal_cpu = v;
            continue;
        }
        let v = v as u64;
        match name {
            "kseal_rsa_operations_total" => c.rsa = v,
            "kseal_reconciles_total{outcome=\"created\"}" => c.created = v,
            "kseal_reconciles_total{outcome=\"updated\"}" => c.updated = v,
            "kseal_reconciles_total{outcome=\"unchanged\"}" => c.unchanged = v,
            "kseal_reconciles_total{outcome=\"failed\"}" => c.failed = v,
            _ => {}
        }
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `VmHWM` (peak resident set) of a process, in KiB.
fn peak_rss_kib(pid: &str) -> Option<u64> {
    rss_now_and_peak_kib(pid).map(|(_, peak)| peak)
}

/// `VmRSS` (resident set now) and `VmHWM` (its peak) of a process, in KiB, from one read of
/// its status.
fn rss_now_and_peak_kib(pid: &str) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The controller's memory as a cold start goes on, one point per scrape.
struct RssPoint {
    at: Duration,
    created: u64,
    rss_kib: u64,
    peak_kib: u64,
}

/// The RSS when `share` of `n` Secrets had been created (the first poll at or past it).
fn rss_at(timeline: &[RssPoint], n: usize, share: f64) -> String {
    timeline
        .iter()
        .find(|p| p.created as f64 >= n as f64 * share)
        .map_or("?".to_owned(), |p| {
            format!("{:.0}", p.rss_kib as f64 / 1024.0)
        })
}

/// CPU time (user + system) a process has used, from `/proc/<pid>/stat` (ticks of 10 ms,
/// the usual `CLK_TCK` of 100).
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The growth of a running total (CPU time, lock time held) between two readings.
fn since(now: Option<Duration>, before: Option<Duration>) -> Option<Duration> {
    now.zip(before)
        .map(|(now, before)| now.saturating_sub(before))
}

/// The table row of how long the test API server's state lock was held during a phase of
/// `wall` time: every request that reads or writes objects holds it, one at a time, so a
/// share near 100 % means the server, not the controller, set the pace.
fn lock_row(phase: &str, held: Option<Duration>, wall: Duration) {
    println!(
        "| {phase}: test API server state lock held (share of the phase) | {} | — |",
        held.map_or("?".to_owned(), |h| format!(
            "{:.1} s ({:.0} %)",
            h.as_secs_f64(),
            100.0 * h.as_secs_f64() / wall.as_secs_f64().max(1e-9)
        ))
    );
}

/// CPU time `pid` used since `before`.
fn cpu_since(pid: &str, before: Option<Duration>) -> Option<Duration> {
    since(cpu_time(pid), before)
}

/// The table row of one phase's CPU time: the controller's, and the test API server's apart
/// from the bench's when it runs in its own process (inline, the bench process holds both).
fn cpu_row(
    phase: &str,
    server: ServerMode,
    ctrl: Option<Duration>,
    server_cpu: Option<Duration>,
    bench: Option<Duration>,
) {
    match server {
        ServerMode::Inline => println!(
            "| {phase} CPU: controller / bench process (test API server, polling) | {} / {} | — |",
            secs(ctrl),
            secs(server_cpu)
        ),
        ServerMode::Process => println!(
            "| {phase} CPU: controller / test API server process / bench process (polling) | {} / {} / {} | — |",
            secs(ctrl),
            secs(server_cpu),
            secs(bench)
        ),
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("?".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()))
}

struct Controller {
    child: Child,
    api_port: u16,
    metrics_port: u16,
    /// Its stderr, whose last lines an unexpected exit reports.
    log: PathBuf,
}

impl Controller {
    fn start(o: &Options, kubeconfig: &Path, log: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_as(o, kubeconfig, log, extra, "kseal-controller-scale-0")
    }

    /// [`Controller::start`] as the replica `pod` (its leader-election identity).
    fn start_as(
        o: &Options,
        kubeconfig: &Path,
        log: &Path,
        extra: &[&str],
        pod: &str,
    ) -> anyhow::Result<Self> {
        let (api_port, metrics_port) = (free_port(), free_port());
        let mut cmd = pinned(
            o.controller_cpus.as_deref(),
            std::env::var_os(BIN_ENV).unwrap_or_else(|| BIN.into()),
        );
        for (name, _) in std::env::vars() {
            if name.starts_with("KSEAL_") || name == "POD_NAMESPACE" || name == "POD_NAME" {
                cmd.env_remove(name);
            }
        }
        with_malloc_env(o, &mut cmd);
        if o.rings > 1 {
            // Dummy credentials: the store is never reached (see [`RING_STORE`]).
            for (name, value) in [
                ("AWS_ACCESS_KEY_ID", "scale-bench"),
                ("AWS_SECRET_ACCESS_KEY", "scale-bench"),
                ("AWS_REGION", "us-east-1"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ] {
                cmd.env(name, value);
            }
        }
        let child = cmd
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", pod)
            .args([
                "--controller-namespace",
                CONTROLLER_NS,
                "--listen-addr",
                &format!("127.0.0.1:{api_port}"),
                "--listen-metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
                "--concurrency",
                &o.concurrency.to_string(),
                "--leader-elect",
                &o.leader_elect.to_string(),
            ])
            // Only when set: older binaries (SCALE_CONTROLLER_BIN) lack the flag.
            .args(
                (o.async_threads != 0)
                    .then(|| ["--async-threads".to_owned(), o.async_threads.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(extra)
            .args(ring_flags(o))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .context("starting kseal-controller")?;
        Ok(Self {
            child,
            api_port,
            metrics_port,
            log: log.to_owned(),
        })
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n  ");
            bail!("kseal-controller exited: {status}; the end of its log:\n  {tail}");
        }
        Ok(())
    }

    /// SIGTERM, then waits for the exit (graceful shutdown releases the Lease).
    ///
    /// A `SCALE_CONTROLLER_BIN` wrapper that forks the controller rather than `exec`s it
    /// (heaptrack, `perf record`) has its children signalled instead, and is waited for as
    /// it ends with them: signalled alone, it would leave the controller running, holding
    /// its ports and some CPU, into the next phase.
    async fn stop(mut self) -> anyhow::Result<()> {
        let wrapped = Command::new("pkill")
            .args(["-TERM", "-P", &self.pid()])
            .status()
            .is_ok_and(|s| s.success());
        let term = |pid: &str| {
            Command::new("kill")
                .args(["-TERM", pid])
                .status()
                .context("kill -TERM")
        };
        if !wrapped {
            term(&self.pid())?;
        }
        let start = Instant::now();
        let mut wrapper_signalled = !wrapped;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    eprintln!("  controller exited with {status}");
                }
                return Ok(());
            }
            if !wrapper_signalled && start.elapsed() > Duration::from_secs(30) {
                term(&self.pid())?;
                wrapper_signalled = true;
            }
            if start.elapsed() > Duration::from_secs(60) {
                self.child.kill()?;
                bail!("controller did not exit within 60 s of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A bench that fails mid-phase (an error returned with `?`, a panic) drops its controller
/// without [`Controller::stop`]: kill it (and a wrapper's children), so that it does not
/// keep its ports and CPU into the next run.
impl Drop for Controller {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.pid()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test API server: in this process, or in a child process of its own.
enum ApiServer {
    Inline {
        server: TestApiServer,
        /// Serving while held.
        served: kseal_testkit::ServedApiServer,
    },
    Process {
        child: Child,
        /// Closing it (dropping it) stops the server, also when the bench fails.
        stdin: Option<std::process::ChildStdin>,
        /// Over TCP, for the fixtures and the request log.
        client: Client,
    },
}

impl ApiServer {
    /// Starts the server and writes a kubeconfig for it to `kubeconfig`.
    async fn start(o: &Options, kubeconfig: &Path) -> anyhow::Result<Self> {
        match o.server {
            ServerMode::Inline => {
                let server = TestApiServer::new();
                let served = server.serve().await?;
                served.write_kubeconfig(kubeconfig)?;
                Ok(Self::Inline { server, served })
            }
            ServerMode::Process => {
                let mut cmd = pinned(o.server_cpus.as_deref(), std::env::current_exe()?);
                with_malloc_env(o, &mut cmd);
                let mut child = cmd
                    .arg(SERVE_ARG)
                    .arg(kubeconfig)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .context("starting the test API server process")?;
                let stdin = child.stdin.take();
                let stdout = child.stdout.take().context("server stdout")?;
                // Its first line is its URL, printed once the kubeconfig is written.
                let url = tokio::task::spawn_blocking(move || {
                    use std::io::BufRead as _;
                    let mut line = String::new();
                    std::io::BufReader::new(stdout)
                        .read_line(&mut line)
                        .map(|_| line)
                })
                .await??;
                let url = url.trim();
                if url.is_empty() {
                    bail!("the test API server process exited before serving");
                }
                let client = Client::try_from(kube::Config::new(url.parse()?))?;
                eprintln!("  test API server: process {} at {url}", child.id());
                Ok(Self::Process {
                    child,
                    stdin,
                    client,
                })
            }
        }
    }

    /// A client for the fixtures: in-process (no socket) for an inline server.
    fn client(&self) -> Client {
        match self {
            Self::Inline { server, .. } => server.client(),
            Self::Process { client, .. } => client.clone(),
        }
    }

    /// The server's process, for `/proc`: this one (`self`) when inline.
    fn pid(&self) -> String {
        match self {
            Self::Inline { .. } => "self".to_owned(),
            Self::Process { child, .. } => child.id().to_string(),
        }
    }

    async fn apply_crd(&self) -> anyhow::Result<()> {
        match self {
            Self::Inline { server, .. } => {
                server.apply_yaml(CRD_YAML)?;
            }
            Self::Process { client, .. } => {
                let crd: CustomResourceDefinition = serde_saphyr::from_str(CRD_YAML)?;
                Api::<CustomResourceDefinition>::all(client.clone())
                    .create(&PostParams::default(), &crd)
                    .await?;
            }
        }
        Ok(())
    }

    async fn requests(&self) -> anyhow::Result<Vec<kseal_testkit::RequestRecord>> {
        match self {
            Self::Inline { server, .. } => Ok(server.requests()),
            Self::Process { client, .. } => Ok(client
                .request(http::Request::get(kseal_testkit::ADMIN_REQUESTS_PATH).body(Vec::new())?)
                .await
                .context("reading the request log")?),
        }
    }

    /// How many logged requests had `method`, a path ending in `suffix` and answer `status`.
    async fn count(&self, method: &str, suffix: &str, status: u16) -> anyhow::Result<usize> {
        match self {
            Self::Inline { server, .. } => Ok(server.count_requests(method, suffix, status)),
            Self::Process { client, .. } => {
                let v: serde_json::Value = client
                    .request(
                        http::Request::get(format!(
                            "{}?method={method}&suffix={suffix}&status={status}",
                            kseal_testkit::ADMIN_COUNT_PATH
                        ))
                        .body(Vec::new())?,
                    )
                    .await
                    .context("counting requests")?;
                v["count"]
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .context("the count endpoint answered without a count")
            }
        }
    }

    /// Secrets and Events created so far (answered 201), from the request log.
    async fn created(&self) -> anyhow::Result<(usize, usize)> {
        Ok((
            self.count("POST", "/secrets", 201).await?,
            self.count("POST", "/events", 201).await?,
        ))
    }

    /// How long the server's state lock has been held in all (`None` if it could not be read).
    async fn lock_held(&self) -> Option<Duration> {
        match self {
            Self::Inline { server, .. } => Some(server.lock_held()),
            Self::Process { client, .. } => {
                let v: serde_json::Value = client
                    .request(
                        http::Request::get(kseal_testkit::ADMIN_LOCK_PATH)
                            .body(Vec::new())
                            .ok()?,
                    )
                    .await
                    .ok()?;
                v["heldNanos"].as_u64().map(Duration::from_nanos)
            }
        }
    }

    async fn clear_requests(&self) -> anyhow::Result<()> {
        match self {
            Self::Inline { server, .. } => server.clear_requests(),
            Self::Process { client, .. } => {
                client
                    .request_text(
                        http::Request::delete(kseal_testkit::ADMIN_REQUESTS_PATH)
                            .body(Vec::new())?,
                    )
                    .await
                    .context("clearing the request log")?;
            }
        }
        Ok(())
    }

    /// Stops serving; a server process is waited for (stdin closed, then SIGKILL after 60 s:
    /// freeing the objects of a large N takes a while on a loaded machine, and the figures
    /// are all in by then, so a slow exit is only reported).
    async fn stop(self) -> anyhow::Result<()> {
        match self {
            Self::Inline { served, .. } => drop(served),
            Self::Process {
                mut child, stdin, ..
            } => {
                drop(stdin);
                let start = Instant::now();
                while child.try_wait()?.is_none() {
                    if start.elapsed() > Duration::from_secs(60) {
                        child.kill()?;
                        child.wait()?;
                        eprintln!("  the test API server process did not exit within 60 s: killed");
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        Ok(())
    }
}

/// Checks (untimed, after the fact) that every SealedSecret is Synced=True for its current
/// generation and that its Secret exists. Returns the number that are not.
async fn not_synced(client: &Client, o: &Options) -> anyhow::Result<usize> {
    let mut missing = 0;
    let mut total = 0;
    for i in 0..o.namespaces {
        let ns = app_namespace(i);
        let sealed = Api::<SealedSecret>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?;
        let secrets: HashSet<String> = Api::<Secret>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        for ss in &sealed.items {
            total += 1;
            let synced = ss.synced_condition().is_some_and(|c| c.status == "True")
                && ss.status.as_ref().and_then(|s| s.observed_generation) == ss.metadata.generation;
            let has_secret = ss
                .metadata
                .name
                .as_ref()
                .is_some_and(|n| secrets.contains(n));
            if !synced || !has_secret {
                missing += 1;
            }
        }
    }
    Ok(missing + o.n.saturating_sub(total))
}

/// Writes in a request log: (objects: Secrets, SealedSecrets, events; Leases).
fn writes(log: &[kseal_testkit::RequestRecord]) -> (usize, usize, BTreeMap<String, usize>) {
    let mut objects = 0;
    let mut leases = 0;
    let mut by_kind = BTreeMap::new();
    for r in log {
        if r.method == "GET" || r.method == "HEAD" || r.is_watch() {
            continue;
        }
        let resource = r
            .path
            .split('/')
            .rev()
            .find(|s| {
                [
                    "secrets",
                    "sealedsecrets",
                    "status",
                    "events",
                    "leases",
                    "namespaces",
                ]
                .contains(s)
            })
            .unwrap_or("other");
        *by_kind
            .entry(format!("{} {resource}", r.method))
            .or_insert(0usize) += 1;
        if r.path.contains("/leases") {
            leases += 1;
        } else {
            objects += 1;
        }
    }
    (objects, leases, by_kind)
}

/// Time from `start_us` to the last Secret write or status write in a request log: when the
/// last object of a phase was done. `None` when the log has no such write or no times.
fn last_write_since(log: &[kseal_testkit::RequestRecord], start_us: u64) -> Option<Duration> {
    log.iter()
        .filter(|r| {
            matches!(r.method.as_str(), "POST" | "PUT" | "PATCH")
                && r.status < 300
                && (r.path.contains("/secrets") || r.path.ends_with("/status"))
        })
        .map(|r| r.at_us)
        .max()
        .filter(|at| *at > start_us)
        .map(|at| Duration::from_micros(at - start_us))
}

/// Reads in a request log by kind.
#[derive(Debug, Default, Clone, Copy)]
struct Reads {
    /// Single GETs of a Secret.
    secret: usize,
    /// Single GETs of a SealedSecret's status subresource.
    status: usize,
    /// List requests (pages) of Secrets or SealedSecrets.
    list_pages: usize,
    watches: usize,
    other: usize,
}

impl Reads {
    fn of(log: &[kseal_testkit::RequestRecord]) -> Self {
        let mut reads = Self::default();
        for r in log.iter().filter(|r| r.method == "GET") {
            let count = if r.is_watch() {
                &mut reads.watches
            } else if r.path.ends_with("/status") {
                &mut reads.status
            } else if r.path.contains("/secrets/") {
                &mut reads.secret
            } else if r.path.ends_with("/secrets") || r.path.ends_with("/sealedsecrets") {
                &mut reads.list_pages
            } else {
                &mut reads.other
            };
            *count += 1;
        }
        reads
    }

    /// `GET secret / GET status / list pages / watches`, as in the table.
    fn row(&self) -> String {
        format!(
            "{} / {} / {} / {}",
            self.secret, self.status, self.list_pages, self.watches
        )
    }
}

impl std::fmt::Display for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GET secret {}, GET status {}, list pages {}, watches {}, other GETs {}",
            self.secret, self.status, self.list_pages, self.watches, self.other
        )
    }
}

/// `SCALE_RINGS` ≥ 2: RSA operations per hinted and per unhinted value, measured apart.
/// The restart's controller has unsealed nothing (every Secret was in place), so its memory
/// of which keys opened unhinted values is as empty as on a cold start. The hinted objects'
/// Secrets are deleted and waited for until the controller has created them again, then the
/// unhinted objects'; its `kseal_rsa_operations_total` is read before and after each batch.
/// Hinted values teach that memory nothing, so the unhinted batch starts from it empty.
/// Returns (values, RSA operations) per batch, hinted first (`None`: no such value).
async fn hint_split(
    client: &Client,
    ctrl: &mut Controller,
    objects: &[(String, String, bool)],
    poll: Duration,
) -> anyhow::Result<[Option<(usize, u64)>; 2]> {
    eprintln!(
        "hint split: Secrets deleted and recreated by the running controller, hinted objects first…"
    );
    let mut split = [None, None];
    for (slot, hinted) in [true, false].into_iter().enumerate() {
        let batch: Vec<&(String, String, bool)> =
            objects.iter().filter(|(_, _, h)| *h == hinted).collect();
        if batch.is_empty() {
            continue;
        }
        let before = counters(&scrape(ctrl.metrics_port).await?);
        let start = Instant::now();
        futures::stream::iter(batch.iter().map(|(ns, name, _)| {
            let client = client.clone();
            async move {
                Api::<Secret>::namespaced(client, ns)
                    .delete(name, &DeleteParams::default())
                    .await
                    .map(|_| ())
            }
        }))
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
        let want = before.created + batch.len() as u64;
        let after = loop {
            tokio::time::sleep(poll).await;
            ctrl.check_running()?;
            if start.elapsed() > GIVE_UP {
                bail!("the hint split's Secrets were not all created again");
            }
            let Ok(m) = scrape(ctrl.metrics_port).await else {
                continue;
            };
            let now = counters(&m);
            if now.created >= want {
                break now;
            }
        };
        let ops = after.rsa.saturating_sub(before.rsa);
        eprintln!(
            "  {} {} objects: {ops} RSA operations ({:.3} per value) in {:.2} s; failed \
             reconciles {}",
            batch.len(),
            if hinted { "hinted" } else { "unhinted" },
            ops as f64 / batch.len() as f64,
            start.elapsed().as_secs_f64(),
            after.failed.saturating_sub(before.failed)
        );
        split[slot] = Some((batch.len(), ops));
    }
    Ok(split)
}

fn placement(mode: ServerMode) -> &'static str {
    match mode {
        ServerMode::Inline => "in the bench process",
        ServerMode::Process => "in its own process",
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("?".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

async fn run(o: Options) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let controller_cores = o.controller_cores(cores);
    eprintln!(
        "scale bench: N={} over {} namespaces, {}% older key without hint ({}), {KEYS} keys, \
         --concurrency {}, leader election {}, {cores} cores; test API server {}{}; \
         controller on {}",
        o.n,
        o.namespaces,
        o.no_hint_percent,
        o.unhinted_keys,
        o.concurrency,
        o.leader_elect,
        placement(o.server),
        o.server_cpus
            .as_deref()
            .map_or(String::new(), |c| format!(" on CPUs {c}")),
        o.controller_cpus
            .as_deref()
            .map_or("any CPU".to_owned(), |c| format!("CPUs {c}")),
    );
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    let server = ApiServer::start(&o, &kubeconfig).await?;
    let client = server.client();

    server.apply_crd().await?;
    let ss_all: Api<SealedSecret> = Api::all(client.clone());
    let crd_start = Instant::now();
    while ss_all.list(&ListParams::default().limit(1)).await.is_err() {
        if crd_start.elapsed() > Duration::from_secs(30) {
            bail!("CRD not served");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    create_namespace(&client, CONTROLLER_NS).await?;
    for i in 0..o.namespaces {
        create_namespace(&client, &app_namespace(i)).await?;
    }

    eprintln!("generating {} RSA-4096 keys…", o.rings * KEYS);
    let keys = tokio::task::spawn_blocking({
        let (cache, rings) = (o.key_cache.clone(), o.rings);
        move || -> anyhow::Result<Vec<KeyPair>> {
            if rings == 1 {
                return cached_keys(cache.as_deref());
            }
            // Ring r's keys at [r * KEYS, (r + 1) * KEYS), each ring's oldest first.
            let mut all = Vec::with_capacity(rings * KEYS);
            for r in 0..rings {
                let dir = cache.as_deref().map(|c| c.join(format!("ring-{r}")));
                all.extend(cached_keys(dir.as_deref())?);
            }
            Ok(all)
        }
    })
    .await??;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), CONTROLLER_NS);
    if o.rings > 1 {
        create_mirror_secrets(&secrets, &keys, o.rings).await?;
    }
    for (i, pair) in keys.iter().enumerate().filter(|_| o.rings == 1) {
        let mut s = keys::key_secret("sealed-secrets-key", CONTROLLER_NS, pair)?;
        s.metadata.generate_name = None;
        s.metadata.name = Some(format!("sealed-secrets-key{i:02}"));
        debug_assert!(
            s.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(SEALING_KEY_LABEL))
        );
        secrets.create(&PostParams::default(), &s).await?;
    }
    for ring_keys in keys.chunks(KEYS) {
        let ring: KeyRing = ring_keys.iter().cloned().collect();
        assert_eq!(
            ring.sealing_key().map(|k| k.id()),
            Some(ring_keys[KEYS - 1].id()),
            "the last key generated must seal"
        );
    }

    eprintln!(
        "measuring the RSA-4096 open time on one key ({PER_OP_SAMPLES} decrypts, fastest of {PER_OP_ROUNDS} rounds)…"
    );
    let (per_op, per_op_parallel) = tokio::task::spawn_blocking({
        let pair = keys[KEYS - 1].clone();
        move || per_op_times(&pair)
    })
    .await?;
    eprintln!(
        "  {:.3} ms per open; {:.3} ms of wall time per open with {cores} threads at once",
        per_op.as_secs_f64() * 1e3,
        per_op_parallel.as_secs_f64() * 1e3
    );

    eprintln!("sealing and creating {} SealedSecrets…", o.n);
    let t = Instant::now();
    let objects: Vec<SealedSecret> = tokio::task::spawn_blocking({
        let (o, keys) = (o.clone(), keys.clone());
        move || cached_fixtures(&o, &keys)
    })
    .await??;
    let hinted = objects
        .iter()
        .filter(|s| s.sealing_key_hint().is_some())
        .count();
    // Rings only: each object's namespace, name and whether it is hinted, for the hint split.
    let split_objects: Vec<(String, String, bool)> = objects
        .iter()
        .filter(|_| o.rings > 1)
        .map(|s| {
            (
                s.metadata.namespace.clone().unwrap_or_default(),
                s.metadata.name.clone().unwrap_or_default(),
                s.sealing_key_hint().is_some(),
            )
        })
        .collect();
    futures::stream::iter(objects.into_iter().map(|ss| {
        let client = client.clone();
        async move {
            let ns = ss.metadata.namespace.clone().unwrap_or_default();
            Api::<SealedSecret>::namespaced(client, &ns)
                .create(&PostParams::default(), &ss)
                .await
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<_>>()
    .await?;
    eprintln!(
        "  {} created in {:.1} s ({hinted} with the sealing key and its hint, {} with one of \
         the {} older keys and no hint)",
        o.n,
        t.elapsed().as_secs_f64(),
        o.n - hinted,
        KEYS - 1
    );

    // Idle baseline: the same binary with its key ring loaded and no SealedSecret to watch
    // (the controller namespace only), for the memory each object adds.
    eprintln!("idle baseline (controller namespace only: keys, no SealedSecrets)…");
    let (idle_rss, idle_cpu) = {
        let mut idle = Controller::start(
            &o,
            &kubeconfig,
            &dir.path().join("idle.log"),
            &["--all-namespaces", "false"],
        )?;
        let start = Instant::now();
        while get_status(idle.api_port, "/readyz").await != Some(200) {
            idle.check_running()?;
            if start.elapsed() > Duration::from_secs(60) {
                // The metrics port's /readyz says why (with a key source: each ring's state).
                let why = get_text(idle.metrics_port, "/readyz").await;
                bail!(
                    "idle controller not ready within 60 s; its /readyz (metrics port): {}",
                    why.as_deref().unwrap_or("no answer")
                );
            }
            tokio::time::sleep(POLL).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = peak_rss_kib(&idle.pid());
        // Its CPU from the process's start: what a start costs whatever the objects (the
        // runtime, the clients, parsing and checking the ring's private keys, the first
        // lists and the Lease), which the cold start's per-object figure also holds once.
        let cpu = cpu_time(&idle.pid());
        idle.stop().await?;
        eprintln!(
            "  peak RSS {}, CPU {}",
            mib(rss),
            cpu.map_or("?".to_owned(), |c| format!("{:.2} s", c.as_secs_f64()))
        );
        (rss, cpu)
    };

    // Cold start.
    eprintln!("cold start…");
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.clear_requests().await?;
    let (bench_cpu_before, server_cpu_before) = (cpu_time("self"), cpu_time(&server.pid()));
    let lock_before = server.lock_held().await;
    longest_scrape();
    let start = Instant::now();
    let start_us = kseal_testkit::unix_micros();
    let mut ctrl = Controller::start(&o, &kubeconfig, &dir.path().join("cold.log"), &[])?;
    let mut last = Counters::default();
    let mut printed = Instant::now();
    let poll = poll_interval(o.n);
    let mut timeline = Vec::new();
    // Progress comes from the API server's request log, not from the controller's `/metrics`:
    // a scrape encodes one series per reconciled object, and one per poll would add the
    // bench's own load to the controller's CPU and memory (about 2 % of its CPU outside
    // unsealing at 2,000 objects, a scrape every 0.2 s). `/metrics` is read once all Secrets
    // and their Events are in, to confirm with the controller's own count.
    let (cold_polled, cold_ctrl_cpu) = loop {
        tokio::time::sleep(poll).await;
        ctrl.check_running()?;
        if start.elapsed() > GIVE_UP {
            bail!("cold start did not finish: {last:?}");
        }
        let Ok((secrets, events)) = server.created().await else {
            continue;
        };
        let elapsed = start.elapsed();
        if let Some((rss_kib, peak_kib)) = rss_now_and_peak_kib(&ctrl.pid()) {
            timeline.push(RssPoint {
                at: elapsed,
                created: secrets as u64,
                rss_kib,
                peak_kib,
            });
        }
        if printed.elapsed() > Duration::from_secs(2) {
            printed = Instant::now();
            eprintln!(
                "  {:.1} s: {secrets} Secrets and {events} Events created",
                elapsed.as_secs_f64()
            );
        }
        if secrets >= o.n && events >= o.n {
            // The controller's CPU before the confirming scrape, which is the bench's load.
            let cpu = cpu_time(&ctrl.pid());
            let Ok(m) = scrape(ctrl.metrics_port).await else {
                continue;
            };
            last = counters(&m);
            if last.created as usize >= o.n {
                break (elapsed, cpu);
            }
        }
    };
    let cold_rss = peak_rss_kib(&ctrl.pid());
    eprintln!(
        "  controller RSS over the cold start (s: created, RSS MiB): {}",
        timeline
            .iter()
            .map(|p| format!(
                "{:.1}: {}, {:.1}",
                p.at.as_secs_f64(),
                p.created,
                p.rss_kib as f64 / 1024.0
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let cold_bench_cpu = cpu_since("self", bench_cpu_before);
    let cold_server_cpu = cpu_since(&server.pid(), server_cpu_before);
    let cold_lock = since(server.lock_held().await, lock_before);
    let cold_scrape = longest_scrape();
    let cold_counters = last;
    let cold_log = server.requests().await?;
    // To the microsecond, from the server's log, rather than to the poll interval.
    let cold = last_write_since(&cold_log, start_us).unwrap_or(cold_polled);
    if let Some(first) = cold_log
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/secrets") && r.status < 300)
        .map(|r| r.at_us)
        .min()
    {
        eprintln!(
            "  first Secret written {:.3} s after the controller started",
            Duration::from_micros(first.saturating_sub(start_us)).as_secs_f64()
        );
    }
    let unsynced = not_synced(&client, &o).await?;
    eprintln!(
        "  done in {:.2} s; {cold_counters:?}; {unsynced} not Synced=True or without Secret",
        cold.as_secs_f64()
    );
    if unsynced > 0 {
        bail!("{unsynced} SealedSecrets not synced after cold start");
    }
    let (cold_writes, cold_lease_writes, cold_by_kind) = writes(&cold_log);
    eprintln!("  writes: {cold_writes} objects, {cold_lease_writes} lease; {cold_by_kind:?}");
    let cold_reads = Reads::of(&cold_log);
    eprintln!("  reads by completion: {cold_reads}");
    // Let the re-triggered checks (each created Secret triggers one) finish.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = counters(&scrape(ctrl.metrics_port).await?);
    let cold_rss = peak_rss_kib(&ctrl.pid()).or(cold_rss);
    ctrl.stop().await?;

    // Restart on the same state.
    eprintln!("restart…");
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.clear_requests().await?;
    let (bench_cpu_before, server_cpu_before) = (cpu_time("self"), cpu_time(&server.pid()));
    let lock_before = server.lock_held().await;
    longest_scrape();
    let start = Instant::now();
    let mut ctrl = Controller::start(&o, &kubeconfig, &dir.path().join("restart.log"), &[])?;
    let mut ready: Option<Duration> = None;
    let mut last = Counters::default();
    let (restart, log_len) = loop {
        tokio::time::sleep(poll).await;
        ctrl.check_running()?;
        if start.elapsed() > GIVE_UP {
            bail!("restart did not finish: {last:?}");
        }
        if ready.is_none() && get_status(ctrl.api_port, "/readyz").await == Some(200) {
            ready = Some(start.elapsed());
        }
        let Ok(m) = scrape(ctrl.metrics_port).await else {
            continue;
        };
        last = counters(&m);
        let elapsed = start.elapsed();
        // Complete: every object reconciled without work. Whether the controller confirmed
        // each Secret with a GET or from its watch cache, the counter is what says so; the
        // request log only shows how (the reads row). A duplicate reconcile counts twice, so
        // the counter can reach N a little before the last object is confirmed: the counters
        // 2 s later show how many there were.
        if last.unchanged as usize >= o.n {
            break (elapsed, server.requests().await?.len());
        }
    };
    let restart_ctrl_cpu = cpu_time(&ctrl.pid());
    let restart_bench_cpu = cpu_since("self", bench_cpu_before);
    let restart_server_cpu = cpu_since(&server.pid(), server_cpu_before);
    let restart_lock = since(server.lock_held().await, lock_before);
    let restart_scrape = longest_scrape();
    let ready = ready.unwrap_or(restart);
    // Writes during the restart, and a little after (late duplicate reconciles).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = counters(&scrape(ctrl.metrics_port).await?);
    let restart_rss = peak_rss_kib(&ctrl.pid());
    let restart_log = server.requests().await?;
    let (restart_writes, restart_lease_writes, restart_by_kind) = writes(&restart_log);
    eprintln!(
        "  done in {:.2} s (ready at {:.2} s); {last:?}; 2 s later {after:?}; {} requests by \
         completion, {} by 2 s later; writes {restart_writes} objects, {restart_lease_writes} \
         lease; {restart_by_kind:?}",
        restart.as_secs_f64(),
        ready.as_secs_f64(),
        log_len,
        restart_log.len()
    );
    let restart_reads = Reads::of(&restart_log);
    eprintln!("  reads: {restart_reads}");

    // A follower: a second replica while the first still leads. It lists and watches every
    // object like the leader and may write nothing.
    let follower_rss = if o.leader_elect {
        eprintln!("follower (a second replica while the first leads)…");
        let mut follower = Controller::start_as(
            &o,
            &kubeconfig,
            &dir.path().join("follower.log"),
            &[],
            "kseal-controller-scale-1",
        )?;
        let start = Instant::now();
        while get_status(follower.api_port, "/readyz").await != Some(200) {
            follower.check_running()?;
            if start.elapsed() > GIVE_UP {
                bail!("the follower was not ready within {GIVE_UP:?}");
            }
            tokio::time::sleep(poll).await;
        }
        let ready = start.elapsed();
        let cpu_ready = cpu_time(&follower.pid());
        // Every object's (refused) reconcile has run well within the window.
        let window = Duration::from_secs(o.follower_seconds).max(poll * 5);
        tokio::time::sleep(window).await;
        let rss = peak_rss_kib(&follower.pid());
        let cpu = cpu_time(&follower.pid())
            .zip(cpu_ready)
            .map(|(now, then)| now.saturating_sub(then));
        eprintln!(
            "  ready at {:.2} s; peak RSS {}; CPU in the {:.0} s after ready: {}",
            ready.as_secs_f64(),
            mib(rss),
            window.as_secs_f64(),
            cpu.map_or("?".to_owned(), |c| format!("{:.2} s", c.as_secs_f64()))
        );
        follower.stop().await?;
        Some((rss, window, cpu))
    } else {
        None
    };
    let split = if o.rings > 1 {
        Some(hint_split(&client, &mut ctrl, &split_objects, poll).await?)
    } else {
        None
    };
    ctrl.stop().await?;
    let bench_rss = peak_rss_kib("self");
    let process_server_rss = match o.server {
        ServerMode::Process => peak_rss_kib(&server.pid()),
        ServerMode::Inline => None,
    };
    server.stop().await?;

    // The floors divide by the cores the controller may use (its CPU list when pinned).
    let rsa_floor = per_op.mul_f64(cold_counters.rsa as f64 / controller_cores as f64);
    let value_floor = per_op.mul_f64(o.n as f64 / controller_cores as f64);
    let ratio = cold.as_secs_f64() / rsa_floor.as_secs_f64();
    println!();
    println!("| item | value | goal |");
    println!("| --- | --- | --- |");
    println!(
        "| N SealedSecrets (1 value each) | {} over {} namespaces | — |",
        o.n, o.namespaces
    );
    println!(
        "| mix | {} sealing key + hint, {} older keys without hint | — |",
        hinted,
        o.n - hinted
    );
    println!(
        "| values without hint sealed by | {} | — |",
        o.unhinted_keys
    );
    if o.rings == 1 {
        println!("| keys (RSA-4096) | {KEYS} | — |");
    } else {
        println!(
            "| keys (RSA-4096) | {} ({} rings × {KEYS}) | — |",
            o.rings * KEYS,
            o.rings
        );
        println!("| rings | {} | — |", rings_row(&o));
    }
    println!(
        "| cores (machine / controller's) / --concurrency | {cores} / {controller_cores} / {} | — |",
        o.concurrency
    );
    println!(
        "| controller async threads (--async-threads) | {} | — |",
        kseal_controller::config::async_threads(o.async_threads, controller_cores)
    );
    let malloc: Vec<String> = image_malloc_env()
        .into_iter()
        .filter(|_| o.image_malloc_env)
        .map(|(k, v)| std::env::var(&k).map_or(format!("{k}={v}"), |own| format!("{k}={own}")))
        .collect();
    println!(
        "| controller (and test API server process) malloc environment | {} | — |",
        if malloc.is_empty() {
            "glibc defaults".to_owned()
        } else {
            format!("{} (the image's)", malloc.join(" "))
        }
    );
    println!(
        "| test API server | {}{} | — |",
        placement(o.server),
        o.server_cpus
            .as_deref()
            .map_or(String::new(), |c| format!(", CPUs {c}"))
    );
    println!(
        "| bench's /metrics scrape interval while waiting | {:.1} s | — |",
        poll_interval(o.n).as_secs_f64()
    );
    println!(
        "| per-op open time (1 key, {PER_OP_SAMPLES} decrypts, fastest of {PER_OP_ROUNDS} rounds) | {:.3} ms | — |",
        per_op.as_secs_f64() * 1e3
    );
    println!(
        "| wall time per open, {cores} threads at once (machine throughput, fastest of {PER_OP_ROUNDS} rounds) | {:.3} ms | — |",
        per_op_parallel.as_secs_f64() * 1e3
    );
    println!(
        "| cold start (all Secrets created, Synced=True: the last Secret or status write in the API server's log) | {:.3} s | — |",
        cold.as_secs_f64()
    );
    println!(
        "| cold start as the bench's poll saw it (every {:.1} s) | {:.2} s | — |",
        poll.as_secs_f64(),
        cold_polled.as_secs_f64()
    );
    let rsa_goal = match o.unhinted_keys {
        UnhintedKeys::Legacy(_) => "≤ 1.05 per value",
        UnhintedKeys::Random => "no worse than before",
    };
    println!(
        "| cold-start RSA ops | {} ({:.3} per value) | {rsa_goal} |",
        cold_counters.rsa,
        cold_counters.rsa as f64 / o.n as f64
    );
    let unhinted = o.n - hinted;
    if unhinted > 0 {
        // Hinted values cost one operation each (the hint names the sealing key).
        println!(
            "| cold-start RSA ops per value without hint (assuming 1 per hinted value) | {:.2} | — |",
            cold_counters.rsa.saturating_sub(hinted as u64) as f64 / unhinted as f64
        );
    }
    if let Some([hinted_split, unhinted_split]) = split {
        let row = |what: &str, batch: Option<(usize, u64)>, goal: &str| {
            if let Some((values, ops)) = batch {
                println!(
                    "| hint split: RSA ops per {what} value ({values} values; {ops} ops) | {:.3} | {goal} |",
                    ops as f64 / values as f64
                );
            }
        };
        row("hinted", hinted_split, "1");
        let goal = match o.unhinted_keys {
            UnhintedKeys::Legacy(_) => "≤ 1.05",
            UnhintedKeys::Random => "—",
        };
        row("unhinted", unhinted_split, goal);
    }
    println!(
        "| RSA floor = RSA ops × per-op / cores | {:.2} s | — |",
        rsa_floor.as_secs_f64()
    );
    println!(
        "| value floor = N × per-op / cores | {:.2} s | — |",
        value_floor.as_secs_f64()
    );
    println!("| cold / RSA floor | {ratio:.2} | ≤ 1.2 |");
    println!(
        "| cold / (RSA ops × parallel wall time per open) | {:.2} | — |",
        cold.as_secs_f64()
            / per_op_parallel
                .mul_f64(cold_counters.rsa as f64)
                .as_secs_f64()
    );
    // The same ratio from the controller's own unsealing CPU in this run, so that a machine
    // slower or faster than during the measurement above moves both sides.
    println!(
        "| cold / (controller unsealing CPU / controller's cores) | {:.2} | — |",
        cold.as_secs_f64() * controller_cores as f64 / cold_counters.unseal_cpu.max(1e-9)
    );
    println!(
        "| cold / value floor | {:.2} | — |",
        cold.as_secs_f64() / value_floor.as_secs_f64()
    );
    println!(
        "| cold-start reconciles created / unchanged / failed (2 s later) | {} / {} / {} | — |",
        settled.created, settled.unchanged, settled.failed
    );
    println!("| cold-start writes (objects / Lease) | {cold_writes} / {cold_lease_writes} | — |");
    println!(
        "| cold start: requests to the API server (GET secret / GET status / list pages / watches) | {} | — |",
        cold_reads.row()
    );
    cpu_row(
        "cold-start",
        o.server,
        cold_ctrl_cpu,
        cold_server_cpu,
        cold_bench_cpu,
    );
    // Whether the cores were ever idle: the cold start against all the CPU this machine spent
    // on it (controller, test API server, bench) spread over every core. Near 1.00 the cold
    // start is CPU-bound, and what is left above the RSA floor is CPU spent outside RSA (here
    // or in the test API server, which a cluster runs elsewhere); well above it, something
    // waits (a lock, the API server, too few threads).
    let spent = match o.server {
        ServerMode::Inline => cold_ctrl_cpu.zip(cold_server_cpu).map(|(a, b)| a + b),
        ServerMode::Process => cold_ctrl_cpu
            .zip(cold_server_cpu)
            .zip(cold_bench_cpu)
            .map(|((a, b), c)| a + b + c),
    };
    println!(
        "| cold / (CPU spent by controller + test API server + bench / machine's cores) | {} | — |",
        spent.map_or("?".to_owned(), |cpu| format!(
            "{:.2}",
            cold.as_secs_f64() * cores as f64 / cpu.as_secs_f64().max(1e-9)
        ))
    );
    lock_row("cold start", cold_lock, cold);
    println!(
        "| cold start: longest /metrics scrape (one series per reconciled object) | {:.0} ms | — |",
        cold_scrape.as_secs_f64() * 1e3
    );
    let rsa_cpu = per_op.mul_f64(cold_counters.rsa as f64);
    println!(
        "| cold-start CPU in RSA (ops × per-op) | {:.1} s | — |",
        rsa_cpu.as_secs_f64()
    );
    // The controller's own CPU time less its RSA work estimated at the single-thread per-op
    // time (open = RSA-OAEP + AES-GCM, measured in this process with the cores otherwise
    // idle): what API round trips, JSON, watches, digests and MACs cost per object. An
    // estimate: RSA under full load can run slower than the idle measurement (shared caches,
    // clocks), which shows up here as extra "outside RSA" time; CPU is counted in 10 ms ticks.
    println!(
        "| controller CPU per object outside RSA, estimated ((CPU − RSA ops × idle per-op) / N) | {} | — |",
        cold_ctrl_cpu.map_or("?".to_owned(), |cpu| format!(
            "{:.2} ms",
            cpu.saturating_sub(rsa_cpu).as_secs_f64() * 1e3 / o.n as f64
        ))
    );
    // Measured instead of estimated: the controller counts the thread CPU time of its
    // unsealing work (RSA, AES-GCM, templates) as it runs, under the real load.
    println!(
        "| controller CPU per object outside unsealing, measured ((CPU − kseal_unseal_cpu_seconds_total) / N; unsealing {:.2} s, {:.3} ms per RSA op) | {} | ≤ 0.3 ms |",
        cold_counters.unseal_cpu,
        cold_counters.unseal_cpu * 1e3 / cold_counters.rsa.max(1) as f64,
        cold_ctrl_cpu.map_or("?".to_owned(), |cpu| format!(
            "{:.3} ms",
            (cpu.as_secs_f64() - cold_counters.unseal_cpu).max(0.0) * 1e3 / o.n as f64
        ))
    );
    // The same less what a start costs with no object (the idle baseline's CPU from its
    // start to a second after it was ready, ring loaded): the cost of each object alone,
    // which the figure above holds plus start-up / N.
    println!(
        "| controller CPU per object outside unsealing, start-up excluded ((CPU − unsealing − idle start-up CPU {}) / N) | {} | ≤ 0.3 ms |",
        idle_cpu.map_or("?".to_owned(), |c| format!("{:.2} s", c.as_secs_f64())),
        cold_ctrl_cpu
            .zip(idle_cpu)
            .map_or("?".to_owned(), |(cpu, idle)| format!(
                "{:.3} ms",
                (cpu.as_secs_f64() - cold_counters.unseal_cpu - idle.as_secs_f64()).max(0.0) * 1e3
                    / o.n as f64
            ))
    );
    println!(
        "| restart: ready (/readyz 200) | {:.2} s | — |",
        ready.as_secs_f64()
    );
    println!(
        "| restart: every object confirmed | {:.2} s | < 10 s |",
        restart.as_secs_f64()
    );
    cpu_row(
        "restart",
        o.server,
        restart_ctrl_cpu,
        restart_server_cpu,
        restart_bench_cpu,
    );
    lock_row("restart", restart_lock, restart);
    println!(
        "| restart: longest /metrics scrape | {:.0} ms | — |",
        restart_scrape.as_secs_f64() * 1e3
    );
    println!(
        "| restart: requests to the API server (GET secret / GET status / list pages / watches) | {} | O(pages) |",
        restart_reads.row()
    );
    println!("| restart RSA ops | {} | 0 |", after.rsa);
    println!(
        "| restart reconciles unchanged / created / updated / failed | {} / {} / {} / {} | — |",
        after.unchanged, after.created, after.updated, after.failed
    );
    println!(
        "| restart writes (objects / Lease) | {restart_writes} / {restart_lease_writes} | 0 objects |"
    );
    println!(
        "| controller peak RSS (VmHWM: cold / restart) | {} / {} | < 100 MiB |",
        mib(cold_rss),
        mib(restart_rss)
    );
    // Where in the cold start the peak comes: early (objects waiting with their values) or
    // late (what every synced object keeps), from the polls' RSS readings.
    println!(
        "| cold start: controller RSS (MiB) when 25 / 50 / 75 / 100 % of Secrets were created | {} / {} / {} / {} | — |",
        rss_at(&timeline, o.n, 0.25),
        rss_at(&timeline, o.n, 0.5),
        rss_at(&timeline, o.n, 0.75),
        rss_at(&timeline, o.n, 1.0),
    );
    let reached = cold_rss.and_then(|peak| timeline.iter().find(|p| p.peak_kib >= peak));
    println!(
        "| cold start: peak RSS first seen (a poll every {:.1} s) | {} | — |",
        poll.as_secs_f64(),
        reached.map_or("after the last poll".to_owned(), |p| format!(
            "{:.1} s of {:.1} s, {:.0} % of Secrets created",
            p.at.as_secs_f64(),
            cold.as_secs_f64(),
            p.created as f64 * 100.0 / o.n.max(1) as f64
        ))
    );
    match follower_rss {
        Some((rss, window, cpu)) => {
            println!(
                "| follower (a second replica while the first leads): peak RSS (VmHWM) | {} | — |",
                mib(rss)
            );
            println!(
                "| follower: CPU in the {:.0} s after it is ready | {} | — |",
                window.as_secs_f64(),
                cpu.map_or("?".to_owned(), |c| format!("{:.2} s", c.as_secs_f64()))
            );
        }
        None => println!("| follower | — (no leader election) | — |"),
    }
    println!(
        "| controller RSS per object ((cold peak − idle peak) / N; idle: {} with the ring loaded) | {} | — |",
        mib(idle_rss),
        cold_rss
            .zip(idle_rss)
            .map_or("?".to_owned(), |(cold, idle)| format!(
                "{:.2} KiB",
                cold.saturating_sub(idle) as f64 / o.n as f64
            ))
    );
    match o.server {
        ServerMode::Inline => println!(
            "| bench process peak RSS (test API server + fixtures, not the controller) | {} | — |",
            mib(bench_rss)
        ),
        ServerMode::Process => {
            println!(
                "| test API server process peak RSS (VmHWM) | {} | — |",
                mib(process_server_rss)
            );
            println!(
                "| bench process peak RSS (fixtures, not the server or the controller) | {} | — |",
                mib(bench_rss)
            );
        }
    }
    Ok(())
}
