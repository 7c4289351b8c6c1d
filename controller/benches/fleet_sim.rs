//! Simulated fleet: what N clusters (default 1,000) cost the ring's stores, against the AWS
//! emulator (moto: Secrets Manager and SSM Parameter Store), and how fast they converge.
//!
//! Not a test (no assertion on timings): `cargo bench -p kseal-controller --bench fleet_sim --
//! --clusters 1000` (`--interval SECONDS`: the compressed poll interval of the rotation run,
//! default 5; `--fleet N`: the per-hour, peak and cost figures for N clusters from the calls
//! per cluster measured). It uses `KSEAL_TEST_SM_ENDPOINT` when set, else starts the emulator with
//! `tests/moto/start.sh` (and stops it at the end); it needs dummy AWS credentials in the
//! environment (`AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
//! AWS_EC2_METADATA_DISABLED=true`), else it prints why and exits 0. Run without `--bench` (as
//! `cargo test --all-targets` does) it does nothing.
//!
//! Each cluster identity is what a controller's leader does against the stores, without a
//! Kubernetes API of its own (the mirror Secrets of all clusters live in one in-process test
//! API server, a namespace each):
//! - the key-source sync is the real one, [`Mirror::sync`] (one `DescribeSecret` of the
//!   index per poll; the index and the new key secrets read only when the version changed;
//!   a restart seeds from its mirror and reads only the index), scheduled as
//!   `Schedule::leader_sync` in controller/src/keys/source/mod.rs does: the next poll one
//!   `--key-source-interval` ±10 % after a success;
//! - the acknowledgement writer's store calls are those of `Writer::step` in
//!   controller/src/fleet/mod.rs (private, and it lists SealedSecrets through a Kubernetes
//!   API), in its order: the first look after a start reads the cluster's own record
//!   (`FleetStore::read`, one `GetParameter`) and writes nothing when it says the same; later
//!   looks write (`FleetStore::write`, one `PutParameter`) only when the record would say
//!   something new (index version, kids held, sealing kid); its periodic checks make no store
//!   call. The first look and each write after a change wait the writer's random spread
//!   (`fleet::write_spread`), as the writer does. The record held here is the view's keys (what
//!   the key loader holds once it loaded the mirror).
//!
//! Every store request goes through a counting proxy ([`FaultProxy`], by `X-Amz-Target`),
//! sampled every 100 ms for the busiest second. Scenarios: (c) the first install and all
//! clusters restarting at once; (a) steady state: one poll round of an unchanged ring,
//! multiplied to an hour at the default interval; (b) one rotation (a pending key pushed)
//! with every cluster polling at the compressed interval from a random phase, until every
//! cluster's record names the key. Peak rates at the real interval are extrapolated by
//! drawing the fleet's jittered poll schedule (the measured calls of each poll, placed at the
//! second it happens). Progress goes to stderr, the tables to stdout; figures are recorded in
//! docs/benchmarks.md ("Simulated fleet: 1,000 clusters").

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    unreachable_pub
)]

use std::collections::BTreeMap;
use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kseal_controller::State;
use kseal_controller::keys::source::{Mirror, START_MARKER_SPREAD, START_SPREAD};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::fleet::{ACK_SCHEMA, DEFAULT_HEARTBEAT};
use kseal_keystore::{Ack, AwsOptions, ClusterId, FleetStore, Kid, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::sm::{self, FaultProxy};

/// Keys in the ring (as the key_source benchmark: a ring rotated 23 times).
const KEYS: usize = 24;
/// The controller's default `--key-source-interval` (controller/src/config.rs).
const INTERVAL: Duration = Duration::from_secs(3600);
/// The operations counted, Secrets Manager first.
const OPS: [&str; 7] = [
    "DescribeSecret",
    "GetSecretValue",
    "ListSecretVersionIds",
    "GetParameter",
    "PutParameter",
    "GetParametersByPath",
    "GetParameters",
];
/// AWS quotas (TPS) by operation; Parameter Store's standard throughput is one quota shared
/// by its operations, checked on their sum.
const SM_QUOTAS: [(&str, f64); 2] = [("GetSecretValue", 10_000.0), ("DescribeSecret", 40_000.0)];
const SSM_OPS: [&str; 4] = [
    "GetParameter",
    "PutParameter",
    "GetParametersByPath",
    "GetParameters",
];
const SSM_QUOTA: f64 = 40.0;
/// Standard-tier parameters per account and Region.
const SSM_MAX_PARAMETERS: f64 = 10_000.0;
/// At most this many clusters talk to the emulator at once (it is one Python process).
const CONCURRENCY: usize = 64;
/// Gives up waiting for the fleet to acknowledge after this many intervals.
const GIVE_UP_INTERVALS: u32 = 20;

struct Options {
    clusters: usize,
    /// The fleet the per-hour, peak and cost figures are for (default: `clusters`); the
    /// calls per cluster are the measured ones.
    fleet: Option<usize>,
    interval: Duration,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let mut options = Self {
            clusters: 1000,
            fleet: None,
            interval: Duration::from_secs(5),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value =
                |name: &str| args.next().with_context(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--clusters" => {
                    let v = value("--clusters")?;
                    options.clusters = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=20_000).contains(n))
                        .with_context(|| format!("--clusters {v:?}: expected 1 to 20000"))?;
                }
                "--fleet" => {
                    let v = value("--fleet")?;
                    options.fleet = Some(
                        v.parse()
                            .ok()
                            .filter(|n| (1..=20_000).contains(n))
                            .with_context(|| format!("--fleet {v:?}: expected 1 to 20000"))?,
                    );
                }
                "--interval" => {
                    let v = value("--interval")?;
                    let secs: f64 = v
                        .parse()
                        .ok()
                        .filter(|s: &f64| (0.5..=3600.0).contains(s))
                        .with_context(|| {
                            format!("--interval {v:?}: expected 0.5 to 3600 seconds")
                        })?;
                    options.interval = Duration::from_secs_f64(secs);
                }
                _ => {}
            }
        }
        Ok(options)
    }
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "fleet_sim is a benchmark: run it with `cargo bench -p kseal-controller --bench fleet_sim -- --clusters 1000`"
        );
        return Ok(());
    }
    let options = Options::parse()?;
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    if !(set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY")) {
        println!(
            "SKIPPED: the fleet_sim benchmark reads the emulator with the default AWS \
             credential chain: set AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
             AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true"
        );
        return Ok(());
    }
    let given = std::env::var(sm::ENDPOINT_VAR)
        .ok()
        .map(|v| v.trim().trim_end_matches('/').to_owned())
        .filter(|v| !v.is_empty());
    let (endpoint, moto) = match given {
        Some(e) => (e, None),
        None => match Moto::start() {
            Ok(moto) => (moto.endpoint.clone(), Some(moto)),
            Err(e) => {
                println!(
                    "SKIPPED: the fleet_sim benchmark needs the AWS emulator and could not \
                     start it ({e:#}): eval \"$(bash tests/moto/start.sh)\"; export {}",
                    sm::ENDPOINT_VAR
                );
                return Ok(());
            }
        },
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(&endpoint, &options));
    drop(moto);
    result
}

/// The emulator this benchmark started (stopped when dropped).
struct Moto {
    endpoint: String,
    state: String,
}

impl Moto {
    fn start() -> anyhow::Result<Self> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let out = std::process::Command::new("bash")
            .arg(format!("{root}/tests/moto/start.sh"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("running tests/moto/start.sh")?;
        if !out.status.success() {
            bail!("tests/moto/start.sh failed ({})", out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let find = |name: &str| {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("export ").or(Some(l.trim())))
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_owned())
                .with_context(|| format!("tests/moto/start.sh printed no {name}"))
        };
        Ok(Self {
            endpoint: find(sm::ENDPOINT_VAR)?,
            state: find("KSEAL_MOTO_STATE")?,
        })
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let _ = std::process::Command::new("bash")
            .arg(format!("{root}/tests/moto/stop.sh"))
            .arg(&self.state)
            .status();
    }
}

// ---------------------------------------------------------------------------------------
// randomness and schedules

/// A uniform value in `[0, 1)` from a randomly keyed hash (as `crate::timing::jitter`).
fn unit() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform random part of `window` (the writer's `spread`).
fn spread(window: Duration) -> Duration {
    window.mul_f64(unit())
}

/// `d` ±`fraction`, uniformly (the controller's `timing::jitter`).
fn jitter(d: Duration, fraction: f64) -> Duration {
    d.mul_f64(1.0 + fraction * (unit() * 2.0 - 1.0))
}

// ---------------------------------------------------------------------------------------
// calls

/// Counts by operation.
type Calls = BTreeMap<&'static str, usize>;

fn snapshot(proxy: &FaultProxy) -> Calls {
    OPS.iter().map(|op| (*op, proxy.count(op))).collect()
}

fn minus(a: &Calls, b: &Calls) -> Calls {
    a.iter()
        .map(|(op, n)| (*op, n - b.get(op).copied().unwrap_or(0)))
        .collect()
}

fn ssm_sum(c: &Calls) -> f64 {
    SSM_OPS
        .iter()
        .map(|op| c.get(op).copied().unwrap_or(0) as f64)
        .sum()
}

/// Samples the proxy's counts every 100 ms while running; [`Sampler::busiest`] gives the most
/// calls of each operation within any one second.
struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, Calls)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(proxy: &Arc<FaultProxy>) -> Self {
        let samples = Arc::new(Mutex::new(vec![(Instant::now(), snapshot(proxy))]));
        let (proxy, into) = (proxy.clone(), samples.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                into.lock()
                    .unwrap()
                    .push((Instant::now(), snapshot(&proxy)));
            }
        });
        Self { samples, task }
    }

    /// The most calls of each operation (and of Parameter Store's shared quota, as `"SSM"`)
    /// in any window of one second.
    fn busiest(self, proxy: &FaultProxy) -> BTreeMap<&'static str, f64> {
        self.task.abort();
        let mut samples = self.samples.lock().unwrap().clone();
        samples.push((Instant::now(), snapshot(proxy)));
        let mut best: BTreeMap<&'static str, f64> = BTreeMap::new();
        for (i, (t0, c0)) in samples.iter().enumerate() {
            // The last sample within one second of `t0` (at least the next one).
            let j = samples[i + 1..]
                .iter()
                .take_while(|(t, _)| t.duration_since(*t0) <= Duration::from_secs(1))
                .count()
                .max(1);
            let Some((t1, c1)) = samples.get(i + j) else {
                break;
            };
            let span = t1.duration_since(*t0).as_secs_f64().max(1.0);
            let d = minus(c1, c0);
            for (op, n) in &d {
                let e = best.entry(op).or_default();
                *e = e.max(*n as f64 / span);
            }
            let e = best.entry("SSM").or_default();
            *e = e.max(ssm_sum(&d) / span);
        }
        best
    }
}

// ---------------------------------------------------------------------------------------
// the fleet

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

/// One cluster's leader: its key-source mirror and its acknowledgement writer's memory.
struct Cluster {
    id: ClusterId,
    state: State,
    mirror: Mirror,
    store: FleetStore,
    /// What the record last written (or found) says: index version, kids held, sealing kid.
    written: Option<(u64, Vec<Kid>, Option<Kid>)>,
}

impl Cluster {
    /// A controller (re)starting in namespace `c<i>` of `server`: a new store client each.
    async fn start(
        i: usize,
        server: &TestApiServer,
        prefix: &str,
        endpoint: &str,
    ) -> anyhow::Result<Self> {
        let namespace = format!("c{i}");
        let ring = Ring::open(&location(prefix), &aws(endpoint)).await?;
        let state = State::new();
        let mirror = Mirror::new(
            ring,
            format!("secretsmanager://{prefix}"),
            server.client(),
            &namespace,
            "bench",
            Duration::from_secs(168 * 3600),
            state.clone(),
        );
        Ok(Self {
            id: ClusterId::parse(&format!("sim-{i:05}"))?,
            state,
            mirror,
            store: FleetStore::open(&location(prefix), &aws(endpoint)).await?,
            written: None,
        })
    }

    /// What the record would say now (`None` before the first sync).
    fn report(&self) -> Option<Ack> {
        let view = self.state.ring_view.current()?;
        Some(Ack {
            schema: ACK_SCHEMA,
            cluster: self.id.clone(),
            ring: view.ring.clone(),
            anchor: None,
            index_version: view.version,
            held: view.kids.iter().cloned().collect(),
            sealing: view.active.clone(),
            objects: BTreeMap::new(),
            unattributed: 0,
            controller: kseal_controller::VERSION.to_owned(),
            heartbeat_seconds: DEFAULT_HEARTBEAT.mul_f64(1.1).as_secs(),
            synced: Some(jiff::Timestamp::now()),
            written: jiff::Timestamp::now(),
        })
    }

    /// The writer's look after a sync (`Writer::step`): the first one reads the own record;
    /// a write only when what it would say changed. Returns whether it wrote.
    async fn look(&mut self) -> anyhow::Result<bool> {
        let Some(ack) = self.report() else {
            return Ok(false);
        };
        let says = (ack.index_version, ack.held.clone(), ack.sealing.clone());
        if self.written.is_none()
            && let Some(own) = self.store.read(&self.id).await?
        {
            self.written = Some((own.index_version, own.held, own.sealing));
        }
        if self.written.as_ref() == Some(&says) {
            return Ok(false);
        }
        self.store.write(&ack).await?;
        self.written = Some(says);
        Ok(true)
    }
}

/// Runs `f` on every cluster, at most [`CONCURRENCY`] at once.
async fn each<F, Fut>(clusters: Vec<Cluster>, f: F) -> anyhow::Result<Vec<Cluster>>
where
    F: Fn(Cluster) -> Fut,
    Fut: Future<Output = anyhow::Result<Cluster>> + Send + 'static,
{
    use futures::StreamExt as _;
    let done: Vec<anyhow::Result<Cluster>> = futures::stream::iter(clusters)
        .map(|c| tokio::spawn(f(c)))
        .buffer_unordered(CONCURRENCY)
        .map(|r| r.context("a cluster task panicked").and_then(|r| r))
        .collect()
        .await;
    done.into_iter().collect()
}

/// One sync and the writer's look after it.
async fn poll(mut c: Cluster) -> anyhow::Result<Cluster> {
    c.mirror
        .sync()
        .await
        .with_context(|| format!("cluster {}: sync", c.id))?;
    c.look()
        .await
        .with_context(|| format!("cluster {}: acknowledgement", c.id))?;
    Ok(c)
}

/// A scenario's calls, its time and its busiest second.
struct Measured {
    calls: Calls,
    took: Duration,
    busiest: BTreeMap<&'static str, f64>,
}

async fn measure<F, Fut, T>(proxy: &Arc<FaultProxy>, f: F) -> anyhow::Result<(T, Measured)>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let before = snapshot(proxy);
    let sampler = Sampler::start(proxy);
    let started = Instant::now();
    let out = f().await?;
    let took = started.elapsed();
    let busiest = sampler.busiest(proxy);
    Ok((
        out,
        Measured {
            calls: minus(&snapshot(proxy), &before),
            took,
            busiest,
        },
    ))
}

/// A new ring of [`KEYS`] RSA-2048 keys, the newest active.
async fn seed_ring(endpoint: &str) -> anyhow::Result<String> {
    eprintln!("generating {KEYS} RSA-2048 keys…");
    let pairs = tokio::task::spawn_blocking(|| {
        (0..KEYS)
            .map(|_| KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()))
            .collect::<Result<Vec<_>, _>>()
    })
    .await??;
    let prefix = sm::unique_prefix("fleet-sim");
    let ring = Ring::open(&location(&prefix), &aws(endpoint)).await?;
    let mut newest = None;
    for pair in &pairs {
        newest = Some(ring.push(pair).await?.kid);
    }
    ring.activate(newest.context("no key")?.as_str(), Duration::ZERO)
        .await?;
    Ok(prefix)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

async fn run(endpoint: &str, options: &Options) -> anyhow::Result<()> {
    let n = options.clusters;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# fleet_sim: {n} clusters, {KEYS}-key ring, emulator at {endpoint}, {cores} cores, \
         load {} at start",
        load()
    );
    let prefix = seed_ring(endpoint).await?;
    let proxy = Arc::new(FaultProxy::start(endpoint).await);
    let url = proxy.url();
    let server = Arc::new(TestApiServer::new());
    for i in 0..n {
        server.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: c{i}\n"
        ))?;
    }

    // (c) the first install, then all clusters restarting at once.
    let start_all = |server: Arc<TestApiServer>| {
        let (prefix, url) = (prefix.clone(), url.clone());
        async move {
            let mut clusters = Vec::with_capacity(n);
            for i in 0..n {
                clusters.push(Cluster::start(i, &server, &prefix, &url).await?);
            }
            anyhow::Ok(clusters)
        }
    };
    eprintln!("first install of {n} clusters…");
    let clusters = start_all(server.clone()).await?;
    let (clusters, install) = measure(&proxy, || each(clusters, poll)).await?;
    eprintln!("  {:.1} s, load {}", install.took.as_secs_f64(), load());
    drop(clusters);
    eprintln!("all {n} clusters restart at once…");
    let clusters = start_all(server.clone()).await?;
    let (clusters, restart) = measure(&proxy, || each(clusters, poll)).await?;
    eprintln!("  {:.1} s, load {}", restart.took.as_secs_f64(), load());

    // (a) steady state: one poll round of an unchanged ring.
    eprintln!("one poll round, nothing changed…");
    let (mut clusters, steady) = measure(&proxy, || each(clusters, poll)).await?;
    eprintln!("  {:.1} s, load {}", steady.took.as_secs_f64(), load());
    let wrote = clusters.iter().filter(|c| c.written.is_none()).count();
    if wrote > 0 {
        bail!("{wrote} clusters hold no record after the first poll");
    }

    // (b) one rotation under a compressed interval.
    eprintln!(
        "rotation: every cluster polls every {:.1} s ±10 %…",
        options.interval.as_secs_f64()
    );
    let pushed_version = Arc::new(Mutex::new(None::<(u64, Kid)>));
    let acked: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; n]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let interval = options.interval;
    let change_spread = writer_options()
        .change_spread()
        .mul_f64(interval.as_secs_f64() / INTERVAL.as_secs_f64());
    let mut tasks = Vec::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    for (i, mut c) in clusters.drain(..).enumerate() {
        let (pushed, acked, stop, gate) = (
            pushed_version.clone(),
            acked.clone(),
            stop.clone(),
            gate.clone(),
        );
        tasks.push(tokio::spawn(async move {
            // A fleet that has run for a while: each cluster at its own phase.
            tokio::time::sleep(interval.mul_f64(unit())).await;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let before = c.state.ring_view.current().map(|v| v.version);
                {
                    let _permit = gate.acquire().await?;
                    c.mirror
                        .sync()
                        .await
                        .with_context(|| format!("cluster {}: sync", c.id))?;
                }
                if c.state.ring_view.current().map(|v| v.version) != before {
                    // The writer's change spread, compressed as the interval is.
                    tokio::time::sleep(spread(change_spread)).await;
                }
                {
                    let _permit = gate.acquire().await?;
                    c.look()
                        .await
                        .with_context(|| format!("cluster {}: acknowledgement", c.id))?;
                }
                let target = pushed.lock().unwrap().clone();
                if let (Some((version, kid)), Some(written)) = (target, &c.written)
                    && written.0 >= version
                    && written.1.contains(&kid)
                {
                    acked.lock().unwrap()[i].get_or_insert_with(Instant::now);
                }
                // `Schedule::leader_sync`: the next poll one interval ±10 % after a success.
                tokio::time::sleep(jitter(interval, 0.1)).await;
            }
            anyhow::Ok(c)
        }));
    }
    // Let every cluster poll once at its phase before the push.
    tokio::time::sleep(interval.mul_f64(1.2)).await;
    let pair = tokio::task::spawn_blocking(|| {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default())
    })
    .await??;
    // The operator's push goes to the emulator directly: only the fleet's calls are counted.
    let operator = Ring::open(&location(&prefix), &aws(endpoint)).await?;
    let ((pushed_at, kid, version), rotation) = measure(&proxy, || async {
        let outcome = operator.push(&pair).await?;
        let pushed_at = Instant::now();
        let version = operator
            .snapshot(None)
            .await?
            .context("the ring has no index after the push")?
            .index
            .version;
        *pushed_version.lock().unwrap() = Some((version, outcome.kid.clone()));
        let deadline = pushed_at + interval * GIVE_UP_INTERVALS;
        loop {
            let done = acked.lock().unwrap().iter().filter(|a| a.is_some()).count();
            if done == n {
                break;
            }
            if Instant::now() > deadline {
                bail!("only {done} of {n} clusters acknowledged the key within {GIVE_UP_INTERVALS} intervals");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok((pushed_at, outcome.kid, version))
    })
    .await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in tasks {
        clusters.push(task.await??);
    }
    let mut latencies: Vec<f64> = acked
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.unwrap().duration_since(pushed_at).as_secs_f64())
        .collect();
    latencies.sort_by(f64::total_cmp);
    eprintln!(
        "  all acknowledged after {:.2} s, load {}",
        latencies[n - 1],
        load()
    );

    // What `kseal fleet status` reads: every record, listed.
    let (listed, status) = measure(&proxy, || async {
        let store = FleetStore::open(&location(&prefix), &aws(&url)).await?;
        anyhow::Ok(store.list().await?)
    })
    .await?;
    let holding = listed
        .iter()
        .filter(|l| {
            l.ack
                .as_ref()
                .is_ok_and(|a| a.index_version >= version && a.held.contains(&kid))
        })
        .count();
    if holding != n {
        bail!("{holding} of {n} records name the pushed key");
    }

    report(
        options,
        &Reports {
            install,
            restart,
            steady,
            rotation,
            status,
            latencies,
        },
    );
    Ok(())
}

struct Reports {
    install: Measured,
    restart: Measured,
    steady: Measured,
    rotation: Measured,
    status: Measured,
    /// Seconds from the push until each cluster's record named the key, sorted.
    latencies: Vec<f64>,
}

/// Per cluster, per event.
fn per(c: &Calls, n: usize) -> BTreeMap<&'static str, f64> {
    c.iter()
        .map(|(op, v)| (*op, *v as f64 / n as f64))
        .collect()
}

/// The writer's options at the default interval (`fleet::Options::for_config`).
fn writer_options() -> kseal_controller::fleet::Options {
    kseal_controller::fleet::Options {
        heartbeat: DEFAULT_HEARTBEAT,
        recount: INTERVAL,
        check: Duration::from_secs(60),
        retry_min: Duration::from_secs(30),
        retry_max: Duration::from_secs(3600),
    }
}

/// The busiest second at the real interval: `n` clusters polling every [`INTERVAL`] ±10 %
/// over two hours, from random phases (a fleet that has run for a while) or, `in_step`, all
/// having started in the second before 0 (a mass restart); `extra` calls are made by each
/// cluster's first poll after a push at time 0.
fn busiest_real(
    n: usize,
    poll: &BTreeMap<&'static str, f64>,
    extra: &BTreeMap<&'static str, f64>,
    in_step: bool,
) -> BTreeMap<&'static str, f64> {
    let secs = 2 * INTERVAL.as_secs() as usize;
    let change_spread = writer_options().change_spread();
    let mut bins: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for _ in 0..n {
        // A renewal process started long ago (or just before 0): the first poll after 0.
        // Restarted together: the start-up sync within the start spread (a leader that seals
        // from its copy), the poll after it uniform over one interval (`first_poll_wait`),
        // then the interval ±10 %.
        let mut t = if in_step {
            -0.5 + START_SPREAD.min(INTERVAL).as_secs_f64() * unit()
                + INTERVAL.as_secs_f64() * unit()
        } else {
            -(INTERVAL.as_secs_f64() * 10.0 * unit())
        };
        while t < 0.0 {
            t += jitter(INTERVAL, 0.1).as_secs_f64();
        }
        let mut first = true;
        while t < secs as f64 {
            let bin = t as usize;
            for (op, v) in poll {
                bins.entry(op).or_insert_with(|| vec![0.0; secs])[bin] += v;
            }
            if first {
                // The writer's look after the change waits a random part of its spread.
                let at = (t + spread(change_spread).as_secs_f64()) as usize;
                for (op, v) in extra {
                    let bin = if SSM_OPS.contains(op) { at } else { bin };
                    if bin < secs {
                        bins.entry(op).or_insert_with(|| vec![0.0; secs])[bin] += v;
                    }
                }
            }
            first = false;
            t += jitter(INTERVAL, 0.1).as_secs_f64();
        }
    }
    let mut out: BTreeMap<&'static str, f64> = bins
        .iter()
        .map(|(op, b)| (*op, b.iter().copied().fold(0.0, f64::max)))
        .collect();
    let ssm = (0..secs)
        .map(|s| {
            SSM_OPS
                .iter()
                .filter_map(|op| bins.get(op).map(|b| b[s]))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    out.insert("SSM", ssm);
    out
}

fn report(options: &Options, r: &Reports) {
    // Measured with `m` identities; the fleet figures are for `n`.
    let m = options.clusters;
    let n = options.fleet.unwrap_or(m);
    let scale = n as f64 / m as f64;
    if n != m {
        println!();
        println!(
            "Calls per cluster measured with {m} cluster identities; fleet figures for {n} \
             clusters (the measured calls × {scale:.1}, the schedule drawn for {n})."
        );
    }
    let ci = options.interval.as_secs_f64();
    let polls_per_hour = 3600.0 / INTERVAL.as_secs_f64();
    let poll = per(&r.steady.calls, m);
    // A rotation adds, per cluster, what its first poll after the push made beyond a poll of
    // an unchanged ring; the other polls of the compressed run were ordinary ones.
    let rotation_polls = r.rotation.calls.get("DescribeSecret").copied().unwrap_or(0);
    let extra: BTreeMap<&'static str, f64> = OPS
        .iter()
        .map(|op| {
            let all = r.rotation.calls.get(op).copied().unwrap_or(0) as f64;
            let ordinary = poll.get(op).copied().unwrap_or(0.0) * rotation_polls as f64
                / poll.get("DescribeSecret").copied().unwrap_or(1.0).max(1e-9);
            (*op, ((all - ordinary) / m as f64).max(0.0))
        })
        .collect();
    // The daily heartbeat (±10 %, jittered once per start): one PutParameter a day each.
    let heartbeat_per_hour = n as f64 * 3600.0 / DEFAULT_HEARTBEAT.as_secs_f64();

    println!();
    println!(
        "## Store calls per hour, {n} clusters (default --key-source-interval {} s ±10 %)",
        INTERVAL.as_secs()
    );
    println!();
    println!("| scenario | {} |", OPS.join(" | "));
    println!("|{}", " --- |".repeat(OPS.len() + 1));
    let row = |what: &str, f: &dyn Fn(&str) -> f64| {
        let cells: Vec<String> = OPS.iter().map(|op| format!("{:.0}", f(op))).collect();
        println!("| {what} | {} |", cells.join(" | "));
    };
    let steady_hour = |op: &str| {
        poll.get(op).copied().unwrap_or(0.0) * n as f64 * polls_per_hour
            + if op == "PutParameter" {
                heartbeat_per_hour
            } else {
                0.0
            }
    };
    row(
        "(a) nothing changes (one poll each + daily heartbeat spread)",
        &steady_hour,
    );
    row("(b) the hour with one rotation (a key pushed)", &|op| {
        steady_hour(op) + extra.get(op).copied().unwrap_or(0.0) * n as f64
    });
    row(
        "(c) all restart at once (the start-up calls alone)",
        &|op| r.restart.calls.get(op).copied().unwrap_or(0) as f64 * scale,
    );
    row("first install (empty mirror; once per cluster)", &|op| {
        r.install.calls.get(op).copied().unwrap_or(0) as f64 * scale
    });
    row("`kseal fleet status` (one listing of all records)", &|op| {
        r.status.calls.get(op).copied().unwrap_or(0) as f64 * scale
    });
    println!();
    println!(
        "Per cluster: a poll of an unchanged ring {}; the first poll after a push adds {}; a \
         restart {}.",
        fmt_calls(&poll),
        fmt_calls(&extra),
        fmt_calls(&per(&r.restart.calls, m))
    );

    let lat = &r.latencies;
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
    println!();
    println!("## Push to every cluster acknowledging (compressed interval {ci:.1} s ±10 %)");
    println!();
    println!("| | seconds | × interval |");
    println!("| --- | --- | --- |");
    for (what, v) in [
        ("median cluster", pct(0.5)),
        ("95th percentile", pct(0.95)),
        (
            "last cluster (every record names the key)",
            lat[lat.len() - 1],
        ),
    ] {
        println!("| {what} | {v:.2} | {:.2} |", v / ci);
    }
    println!();
    println!(
        "Goal: at most one interval plus its jitter (1.10 ×). At the default interval that is \
         {:.0} min for the last cluster.",
        lat[lat.len() - 1] / ci * INTERVAL.as_secs_f64() / 60.0
    );

    // Peaks.
    let real_steady = busiest_real(n, &poll, &BTreeMap::new(), false);
    let real_rotation = busiest_real(n, &poll, &extra, false);
    let real_in_step = busiest_real(n, &poll, &extra, true);
    let restart_per = per(&r.restart.calls, m);
    let spread = writer_options().start_spread();
    // All restarting in the same second: the key source's start-up calls land in it; the
    // writer's first look is spread over its window.
    // The key source's start-up reads: every leader's first read waits a random part of
    // START_MARKER_SPREAD (the marker, and the index for one with no copy to seal from; a
    // leader sealing from its copy reads the index later still, within START_SPREAD: counted
    // within the shorter window here, the worse case); `unspread` keeps them in one second.
    let start = START_MARKER_SPREAD.min(INTERVAL);
    let real_restart: BTreeMap<&'static str, f64> = OPS
        .iter()
        .map(|op| {
            let v = restart_per.get(op).copied().unwrap_or(0.0) * n as f64;
            let v = if SSM_OPS.contains(op) && !spread.is_zero() {
                poisson_peak(v / spread.as_secs_f64(), spread.as_secs_f64())
            } else if !SSM_OPS.contains(op) && !start.is_zero() {
                poisson_peak(v / start.as_secs_f64(), start.as_secs_f64())
            } else {
                v
            };
            (*op, v)
        })
        .chain(std::iter::once(("SSM", 0.0)))
        .collect();
    let mut real_restart = real_restart;
    let ssm_restart = SSM_OPS
        .iter()
        .map(|op| real_restart.get(op).copied().unwrap_or(0.0))
        .sum();
    real_restart.insert("SSM", ssm_restart);
    let mut ops: Vec<&'static str> = OPS.to_vec();
    ops.push("SSM");
    println!();
    println!("## Busiest second (calls per second)");
    println!();
    println!(
        "Measured: the busiest one-second window under compression (the emulator's own \
         speed bounds the bursts). Real: the fleet's jittered schedule at the {} s interval \
         drawn with the measured calls per poll; a restart puts every cluster's start-up \
         in one second, its key-source reads spread over {} s (the index of a leader sealing \
         from its copy later still), the writer's first look over {} s, the poll after the \
         start-up sync uniform over one interval. `SSM` is the sum of Parameter Store \
         operations (one shared quota).",
        INTERVAL.as_secs(),
        start.as_secs(),
        spread.as_secs()
    );
    println!();
    println!(
        "| operation | (a) measured | (a) real | (b) measured | (b) real | (b) real, right after a mass restart | (c) measured | (c) real |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for op in &ops {
        let g = |m: &BTreeMap<&'static str, f64>| m.get(op).copied().unwrap_or(0.0);
        println!(
            "| {op} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            g(&r.steady.busiest),
            g(&real_steady),
            g(&r.rotation.busiest),
            g(&real_rotation),
            g(&real_in_step),
            g(&r.restart.busiest),
            g(&real_restart)
        );
    }

    println!();
    println!("## Headroom against the AWS quotas (real peaks, worst scenario)");
    println!();
    println!("| quota | limit | peak | headroom |");
    println!("| --- | --- | --- | --- |");
    let worst = |op: &str| {
        [&real_steady, &real_rotation, &real_in_step, &real_restart]
            .iter()
            .map(|m| m.get(op).copied().unwrap_or(0.0))
            .fold(0.0, f64::max)
    };
    for (op, quota) in SM_QUOTAS {
        let peak = worst(op);
        println!(
            "| Secrets Manager {op} TPS | {quota:.0} | {peak:.1} | {} |",
            headroom(quota, peak)
        );
    }
    let peak = worst("SSM");
    println!(
        "| Parameter Store standard throughput (GetParameter, GetParameters, GetParametersByPath, PutParameter together) TPS | {SSM_QUOTA:.0} | {peak:.1} | {} |",
        headroom(SSM_QUOTA, peak)
    );
    let unspread = ssm_sum(&r.restart.calls) * scale;
    println!(
        "| the same at a mass restart without the writer's start spread (every first look in one second) | {SSM_QUOTA:.0} | {unspread:.1} | {} |",
        headroom(SSM_QUOTA, unspread)
    );
    for (op, quota) in SM_QUOTAS {
        let unspread = r.restart.calls.get(op).copied().unwrap_or(0) as f64 * scale;
        println!(
            "| Secrets Manager {op} at a mass restart without the key source's start spreads (every start-up read in one second) | {quota:.0} | {unspread:.1} | {} |",
            headroom(quota, unspread)
        );
    }
    let status_calls = ssm_sum(&r.status.calls) * scale;
    println!(
        "| `kseal fleet status` listing ({status_calls:.0} GetParametersByPath calls) at the shared TPS | {SSM_QUOTA:.0} | {:.1} s at the quota | — |",
        status_calls / SSM_QUOTA
    );
    println!(
        "| standard-tier parameters per Region | {SSM_MAX_PARAMETERS:.0} | {n} | {} |",
        headroom(SSM_MAX_PARAMETERS, n as f64)
    );

    // Cost at list prices.
    let month_hours = 730.0;
    let secrets = (KEYS + 1) as f64;
    let sm_calls_month: f64 = ["DescribeSecret", "GetSecretValue", "ListSecretVersionIds"]
        .iter()
        .map(|op| steady_hour(op) * month_hours)
        .sum();
    // One rotation a week.
    let rotations = 4.0;
    let sm_rotation_calls: f64 = ["DescribeSecret", "GetSecretValue", "ListSecretVersionIds"]
        .iter()
        .map(|op| extra.get(op).copied().unwrap_or(0.0) * n as f64 * rotations)
        .sum();
    let calls_cost = (sm_calls_month + sm_rotation_calls) / 10_000.0 * 0.05;
    let storage = secrets * 0.40;
    println!();
    println!("## Monthly cost at AWS list prices ({n} clusters, 730 h)");
    println!();
    println!("| item | quantity | cost |");
    println!("| --- | --- | --- |");
    println!(
        "| Secrets Manager API calls, polling ($0.05 per 10,000) | {sm_calls_month:.0} | ${:.2} |",
        sm_calls_month / 10_000.0 * 0.05
    );
    println!(
        "| Secrets Manager API calls, {rotations:.0} rotations (one a week) | {sm_rotation_calls:.0} | ${:.2} |",
        sm_rotation_calls / 10_000.0 * 0.05
    );
    println!(
        "| Secrets Manager secrets ($0.40 each: {KEYS} keys + the index; not per cluster) | {secrets:.0} | ${storage:.2} |"
    );
    println!(
        "| Parameter Store standard parameters and standard-throughput calls | {n} parameters, {:.0} calls | $0.00 |",
        ssm_sum(&r.steady.calls) * scale * polls_per_hour * month_hours
            + heartbeat_per_hour * month_hours
    );
    println!(
        "| **total** (of which the fleet's calls) | | **${:.2}** (${calls_cost:.2}) |",
        storage + calls_cost
    );
    println!();
    println!("Load average at the end: {}.", load());
}

/// The busiest second expected among `seconds` seconds of Poisson arrivals at `rate` per
/// second: the smallest k with fewer than one second in `seconds` expected to reach it.
fn poisson_peak(rate: f64, seconds: f64) -> f64 {
    if rate <= 0.0 {
        return 0.0;
    }
    let mut term = (-rate).exp();
    let mut below = term;
    let mut k = 0u32;
    while (1.0 - below) * seconds >= 1.0 && k < 100_000 {
        k += 1;
        term *= rate / f64::from(k);
        below += term;
    }
    f64::from(k.max(1))
}

fn headroom(quota: f64, peak: f64) -> String {
    if peak <= 0.0 {
        "∞".to_owned()
    } else {
        let h = quota / peak;
        format!("{h:.1}×{}", if h < 10.0 { " (below 10×)" } else { "" })
    }
}

fn fmt_calls(c: &BTreeMap<&'static str, f64>) -> String {
    let parts: Vec<String> = c
        .iter()
        .filter(|(_, v)| **v > 0.0005)
        .map(|(op, v)| format!("{v:.2} {op}"))
        .collect();
    if parts.is_empty() {
        "no calls".to_owned()
    } else {
        parts.join(" + ")
    }
}
