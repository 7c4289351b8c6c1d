//! Fleet key ring benchmark: what `--key-source secretsmanager://…` costs, against the Secrets
//! Manager emulator (moto) and the in-process test API server.
//!
//! Not a test (no assertion on timings): `cargo bench -p kseal-controller --bench key_source`.
//! It needs the emulator (`KSEAL_TEST_SM_ENDPOINT`, see `tests/moto/start.sh`) and dummy AWS
//! credentials in the environment (`AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
//! AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true`); without them it prints why and exits
//! 0 (`cargo bench` is not run in CI). Run without `--bench` (as `cargo test --all-targets`
//! does) it does nothing.
//!
//! 1. Start-up with a 24-key ring: the time from starting a controller (key loader,
//!    reconciler and key-source loop, in this process, as the leader) until all 24 keys are
//!    loaded, until it is ready (`/readyz`: keys loaded, caches synced, key source usable) with
//!    all of them, and until its first sync of the ring is done; cold (empty controller
//!    namespace: the ring is fetched and mirrored first) and warm (a restart over the mirror
//!    the cold run left), with the Secrets Manager calls of each. Median of `KEY_SOURCE_RUNS`
//!    runs (default 5) per key size of `KEY_SOURCE_SIZES` (default `2048,4096`).
//! 2. Secrets Manager calls per sync: [`Mirror::sync`] against a [`FaultProxy`] in front of the
//!    emulator, which counts requests by operation: the first sync, `KEY_SOURCE_SYNCS`
//!    (default 20) syncs of an unchanged ring, and the syncs after a rotation (`kseal keys
//!    rotate --now`, and push-then-activate as `kseal keys rotate` does by default).
//!
//! Progress goes to stderr, the result tables to stdout. Figures are recorded in
//! docs/benchmarks.md ("Fleet key ring").

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    unreachable_pub
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use kseal_controller::config::{Args, KeySourceConfig, Namespaces};
use kseal_controller::keys::KeyRequests;
use kseal_controller::keys::source::{Mirror, SyncReport};
use kseal_controller::{Config, State};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::{AwsOptions, Kid, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::sm::{self, FaultProxy};
use tokio::sync::watch;

const KEYS: usize = 24;
const CRD_YAML: &str = include_str!("../../deploy/crd.yaml");
/// How often readiness is checked while waiting.
const POLL: Duration = Duration::from_millis(2);
/// Gives up waiting after this long (a hung run, not a measurement).
const GIVE_UP: Duration = Duration::from_secs(180);
/// The controller's default `--key-source-interval`.
const INTERVAL: Duration = Duration::from_secs(3600);

struct Options {
    runs: usize,
    syncs: usize,
    sizes: Vec<KeySize>,
}

impl Options {
    fn from_env() -> anyhow::Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let runs = var("KEY_SOURCE_RUNS").map_or(Ok(5), |v| v.trim().parse())?;
        let syncs = var("KEY_SOURCE_SYNCS").map_or(Ok(20), |v| v.trim().parse())?;
        let sizes = var("KEY_SOURCE_SIZES")
            .unwrap_or_else(|| "2048,4096".to_owned())
            .split(',')
            .map(|s| {
                let bits: usize = s.trim().parse().context("KEY_SOURCE_SIZES")?;
                KeySize::from_bits(bits).with_context(|| format!("unsupported key size {bits}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if runs == 0 || syncs == 0 {
            bail!("KEY_SOURCE_RUNS and KEY_SOURCE_SYNCS must be at least 1");
        }
        Ok(Self { runs, syncs, sizes })
    }
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "key_source is a benchmark: run it with `cargo bench -p kseal-controller --bench key_source`"
        );
        return Ok(());
    }
    let Some(endpoint) = std::env::var(sm::ENDPOINT_VAR)
        .ok()
        .map(|v| v.trim().trim_end_matches('/').to_owned())
        .filter(|v| !v.is_empty())
    else {
        println!(
            "SKIPPED: the key_source benchmark needs the Secrets Manager emulator: \
             eval \"$(bash tests/moto/start.sh)\"; export {}",
            sm::ENDPOINT_VAR
        );
        return Ok(());
    };
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    if !(set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY")) {
        println!(
            "SKIPPED: the key_source benchmark reads the emulator with the default AWS \
             credential chain: set AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
             AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true"
        );
        return Ok(());
    }
    let options = Options::from_env()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(&endpoint, &options))
}

async fn run(endpoint: &str, options: &Options) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# key_source benchmark: {KEYS}-key ring in the Secrets Manager emulator at {endpoint}, \
         {} runs, {} unchanged syncs, {cores} cores",
        options.runs, options.syncs
    );
    let mut first_ring = None;
    let mut startup_rows = Vec::new();
    for &size in &options.sizes {
        let (ring, generation) = seed_ring(endpoint, size).await?;
        let row = startup(endpoint, &ring, size, options.runs).await?;
        startup_rows.push((size, generation, row));
        first_ring.get_or_insert(ring);
    }
    println!();
    println!(
        "## Start-up to ready with a {KEYS}-key ring (median [min–max] of {} runs)",
        options.runs
    );
    println!();
    println!(
        "| key size (generating {KEYS} keys) | start | {KEYS} keys loaded | ready (`/readyz`) | first sync done | Secrets Manager calls |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (size, generation, row) in &startup_rows {
        for (what, timelines, calls) in [
            ("cold (empty namespace)", &row.cold, &row.cold_calls),
            ("warm restart (mirror present)", &row.warm, &row.warm_calls),
        ] {
            let pick = |f: fn(&Timeline) -> Duration| timelines.iter().map(f).collect::<Vec<_>>();
            println!(
                "| RSA-{} ({:.1} s) | {what} | {} | {} | {} | {calls} |",
                size.bits(),
                generation.as_secs_f64(),
                stats(&pick(|t| t.keys)),
                stats(&pick(|t| t.ready)),
                stats(&pick(|t| t.synced)),
            );
        }
    }
    let ring = first_ring.context("no key size given")?;
    calls_per_sync(endpoint, &ring, options.syncs).await
}

// ---------------------------------------------------------------------------------------
// the ring

fn aws(endpoint: &str) -> AwsOptions {
    AwsOptions {
        endpoint_url: Some(endpoint.to_owned()),
        region: Some("us-east-1".to_owned()),
        ..AwsOptions::default()
    }
}

fn location(prefix: &str) -> Location {
    Location::SecretsManager {
        prefix: prefix.to_owned(),
        region: None,
    }
}

/// Generates `n` keys of `size` on every core; returns them and the wall time.
fn generate(size: KeySize, n: usize) -> anyhow::Result<(Vec<KeyPair>, Duration)> {
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let pairs = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                        mine.push(KeyPair::generate(size, &CertificateOptions::default()));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a key generation thread"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok((pairs, started.elapsed()))
}

/// A new ring of [`KEYS`] keys of `size`, the newest active (a ring rotated 23 times).
async fn seed_ring(endpoint: &str, size: KeySize) -> anyhow::Result<(String, Duration)> {
    eprintln!("generating {KEYS} RSA-{} keys…", size.bits());
    let (pairs, generation) = tokio::task::spawn_blocking(move || generate(size, KEYS)).await??;
    eprintln!("  {:.1} s", generation.as_secs_f64());
    let prefix = sm::unique_prefix(&format!("key-source-bench-{}", size.bits()));
    let ring = Ring::open(&location(&prefix), &aws(endpoint)).await?;
    let mut newest = None;
    for pair in &pairs {
        newest = Some(ring.push(pair).await?.kid);
    }
    let newest = newest.context("no key")?;
    ring.activate(newest.as_str(), Duration::ZERO).await?;
    eprintln!("  pushed into {prefix}, {} active", newest.short());
    Ok((prefix, generation))
}

// ---------------------------------------------------------------------------------------
// start-up

/// A controller as `main` wires it with `--key-source`, in this process, as the leader.
struct Controller {
    state: State,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Controller {
    fn start(client: &kube::Client, namespace: &str, ring: &str, endpoint: &str) -> Self {
        let args = Args::try_parse_from([
            "kseal-controller",
            "--controller-namespace",
            namespace,
            "--leader-elect",
            "false",
        ])
        .expect("controller flags");
        let mut config = Config::from_args(args, None).expect("controller config");
        config.namespaces = Namespaces::Only(vec![namespace.to_owned()]);
        let source = KeySourceConfig {
            location: location(ring),
            interval: INTERVAL,
            retire_grace: Duration::from_secs(168 * 3600),
            refresh_spacing: Duration::from_secs(5),
            aws: aws(endpoint),
            anchor: None,
        };
        config.key_source = Some(source);
        let config = Arc::new(config);
        let state = State::new();
        state.leadership.assume(true);
        let (stop, stop_rx) = watch::channel(false);
        // Dropping the requester closes the loader's request channel: no key generation here.
        let (_, requests) = KeyRequests::channel();
        let spawned = kseal_controller::spawn(client, &config, &state, requests, &stop_rx);
        let tasks = vec![spawned.keys, spawned.remote, spawned.reconciler];
        Self { state, stop, tasks }
    }

    /// Polls until the controller is ready with every key loaded and its first sync is done;
    /// returns when each of those happened, counted from `since`.
    async fn timeline(&self, since: Instant, what: &str) -> anyhow::Result<Timeline> {
        let (mut keys, mut ready, mut synced) = (None, None, None);
        loop {
            let state = &self.state;
            let now = since.elapsed();
            if keys.is_none() && state.keys.ring().len() == KEYS {
                keys = Some(now);
            }
            if ready.is_none() && ready_with_all_keys(state) {
                ready = Some(now);
            }
            if synced.is_none() && state.metrics.key_source_last_success.get() > 0 {
                synced = Some(now);
            }
            if let (Some(keys), Some(ready), Some(synced)) = (keys, ready, synced) {
                return Ok(Timeline {
                    keys,
                    ready,
                    synced,
                });
            }
            if now > GIVE_UP {
                bail!(
                    "{what}: gave up after {GIVE_UP:?}: ready={}, {} keys, key source {:?}",
                    state.readiness.is_ready(),
                    state.keys.ring().len(),
                    state.readiness.key_source()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn stop(self) {
        self.stop.send_replace(true);
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

/// Lets the previous controller's tasks wind down before the clock starts, so a start-up is
/// not timed against another controller's shutdown.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn ready_with_all_keys(state: &State) -> bool {
    state.readiness.is_ready() && state.keys.ring().len() == KEYS
}

/// When each start-up milestone was reached.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    /// All [`KEYS`] keys loaded (`/v1/cert.pem` serves, SealedSecrets unseal).
    keys: Duration,
    /// `/readyz` ready (keys loaded, caches synced, key source usable) with all keys.
    ready: Duration,
    /// The key-source loop's first sync finished.
    synced: Duration,
}

/// Secrets Manager requests seen by `proxy`, by operation.
fn calls(proxy: &FaultProxy) -> String {
    let (d, g, all) = (
        proxy.count("DescribeSecret"),
        proxy.count("GetSecretValue"),
        proxy.count("*"),
    );
    let other = all - d - g;
    let mut text = format!("{d} Describe + {g} GetValue");
    if other > 0 {
        text.push_str(&format!(" + {other} other"));
    }
    text
}

#[derive(Default)]
struct StartupRow {
    cold: Vec<Timeline>,
    warm: Vec<Timeline>,
    cold_calls: String,
    warm_calls: String,
}

async fn startup(
    endpoint: &str,
    ring: &str,
    size: KeySize,
    runs: usize,
) -> anyhow::Result<StartupRow> {
    let proxy = FaultProxy::start(endpoint).await;
    let mut row = StartupRow::default();
    for run in 1..=runs {
        // A brand-new cluster: the CRD and an empty controller namespace.
        let server = TestApiServer::new();
        server.apply_yaml(CRD_YAML)?;
        let client = server.client();
        let namespace = "kseal-system";
        server.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"
        ))?;

        settle().await;
        proxy.reset_counts();
        let started = Instant::now();
        let cold = Controller::start(&client, namespace, ring, &proxy.url());
        let c = cold.timeline(started, "cold start").await?;
        row.cold_calls = calls(&proxy);
        cold.stop().await;

        // A restart over the mirror the cold start left.
        settle().await;
        proxy.reset_counts();
        let started = Instant::now();
        let warm = Controller::start(&client, namespace, ring, &proxy.url());
        let w = warm.timeline(started, "warm restart").await?;
        row.warm_calls = calls(&proxy);
        warm.stop().await;
        eprintln!(
            "RSA-{} run {run}/{runs}: cold {c:?}, warm {w:?}",
            size.bits()
        );
        row.cold.push(c);
        row.warm.push(w);
    }
    Ok(row)
}

fn stats(samples: &[Duration]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = if !sorted.len().is_multiple_of(2) {
        ms(sorted[sorted.len() / 2])
    } else {
        (ms(sorted[sorted.len() / 2 - 1]) + ms(sorted[sorted.len() / 2])) / 2.0
    };
    format!(
        "{median:.0} ms [{:.0}–{:.0}]",
        ms(sorted[0]),
        ms(sorted[sorted.len() - 1])
    )
}

// ---------------------------------------------------------------------------------------
// calls per sync

fn describe_report(r: &SyncReport) -> String {
    format!(
        "index read: {}, keys read: {}, mirrors created: {}, activated: {}",
        if r.index_read { "yes" } else { "no" },
        r.keys_read,
        r.created.len(),
        if r.activated.is_some() { "yes" } else { "no" }
    )
}

/// One sync, as a table row: the calls it made, its time and what it did.
async fn sync_row(what: &str, mirror: &mut Mirror, proxy: &FaultProxy) -> anyhow::Result<String> {
    proxy.reset_counts();
    let started = Instant::now();
    let report = mirror.sync().await?;
    let took = started.elapsed();
    Ok(format!(
        "| {what} | {} | {} | {:.1} ms | {} |",
        proxy.count("DescribeSecret"),
        proxy.count("GetSecretValue"),
        took.as_secs_f64() * 1000.0,
        describe_report(&report)
    ))
}

async fn calls_per_sync(endpoint: &str, prefix: &str, syncs: usize) -> anyhow::Result<()> {
    let proxy = FaultProxy::start(endpoint).await;
    let server = TestApiServer::new();
    server.apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kseal-system\n")?;
    let ring = Ring::open(&location(prefix), &aws(&proxy.url())).await?;
    let mut mirror = Mirror::new(
        ring,
        format!("secretsmanager://{prefix}"),
        server.client(),
        "kseal-system",
        "bench",
        Duration::from_secs(168 * 3600),
        State::new(),
    );
    // Writes go straight to the emulator: only the mirror's reads are counted.
    let writer = Ring::open(&location(prefix), &aws(endpoint)).await?;
    let mut rows = Vec::new();
    rows.push(sync_row("first sync (empty mirror, 24 keys)", &mut mirror, &proxy).await?);

    proxy.reset_counts();
    let mut times = Vec::new();
    for _ in 0..syncs {
        let started = Instant::now();
        let report = mirror.sync().await?;
        times.push(started.elapsed());
        assert_eq!(report, SyncReport::default(), "the ring did not change");
    }
    let (d, g, all) = (
        proxy.count("DescribeSecret"),
        proxy.count("GetSecretValue"),
        proxy.count("*"),
    );
    let per = |n: usize| n as f64 / syncs as f64;

    let pair = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default())?;
    let kid: Kid = writer.push(&pair).await?.kid;
    writer.activate(kid.as_str(), Duration::ZERO).await?;
    rows.push(
        sync_row(
            "after `kseal keys rotate --now` (push + activate)",
            &mut mirror,
            &proxy,
        )
        .await?,
    );
    let pair = KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default())?;
    let kid: Kid = writer.push(&pair).await?.kid;
    rows.push(
        sync_row(
            "after `kseal keys rotate`, step 1: push (not active yet)",
            &mut mirror,
            &proxy,
        )
        .await?,
    );
    writer.activate(kid.as_str(), Duration::ZERO).await?;
    rows.push(
        sync_row(
            "after `kseal keys rotate`, step 2: activate (66 min later)",
            &mut mirror,
            &proxy,
        )
        .await?,
    );

    println!();
    println!("## Secrets Manager calls per sync (`Mirror::sync` through the FaultProxy)");
    println!();
    println!("| sync | DescribeSecret | GetSecretValue | time | what it did |");
    println!("| --- | --- | --- | --- | --- |");
    println!("{}", rows[0]);
    println!(
        "| unchanged ring, mean of {syncs} syncs | {:.2} | {:.2} | {} (per sync) | nothing to do; other operations: {} |",
        per(d),
        per(g),
        stats(&times),
        all - d - g
    );
    for row in &rows[1..] {
        println!("{row}");
    }
    let jitter_low = 86_400.0 / (INTERVAL.as_secs_f64() * 1.1);
    let jitter_high = 86_400.0 / (INTERVAL.as_secs_f64() * 0.9);
    let per_day = 86_400.0 / INTERVAL.as_secs_f64();
    println!();
    println!(
        "Per cluster per day at the default --key-source-interval (1h, ±10 % jitter: intervals \
         of 54–66 min, {per_day:.0} syncs a day on average, {jitter_low:.1}–{jitter_high:.1} at \
         the extremes), unchanged ring: {:.0} DescribeSecret + {:.0} GetSecretValue; only the \
         leader polls.",
        per(d) * per_day,
        per(g) * per_day
    );
    Ok(())
}
