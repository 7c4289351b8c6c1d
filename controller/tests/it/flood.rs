//! A flood of maximal verifies from many addresses (issue 40): another client's one-value
//! verify is still answered, because each client's part of the HTTP share of the RSA slots
//! shrinks with the number of active clients, the client that used the share least gets the
//! next free slot, and a client holding no request takes a heavier one's place
//! (controller/src/serve/rsapool.rs). A request is admitted before its body is read, so a
//! refused flood request's body is dropped unparsed (controller/src/serve/http/verify.rs).
//!
//! Everything runs over real loopback sockets through [`serve_listeners`] (connection caps,
//! peer address, rate limiter, RSA pool): each flooder binds its own source address
//! 127.x.y.1 (Linux routes all of 127/8 to the loopback interface), so each is a client of its
//! own, spread over 100 /16s: the pool weighs a client by its network's (/16's) use too, and
//! this leaves it the least to go on. A flood that takes a fresh address for every request,
//! spread over 8 /16s (127.150.0.0 to 127.157.255.255), is the other case: each address is
//! new, its network is not. The flooders run on a runtime of their own, on their own thread: in the server's
//! runtime, a flooder whose refusals came back without ever waiting would keep a worker
//! thread to itself (that, not the pool, is what hung an earlier version of this test).
//!
//! The CI tests flood from 100 addresses, and from fresh addresses. The measurements, 100 and
//! 1,000 addresses, and fresh addresses, are ignored by default and print their figures
//! (docs/benchmarks.md):
//! `cargo test -p kseal-controller --test it flood -- --ignored --nocapture --test-threads 1`.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_api::{SealOptions, seal_secret};
use kseal_controller::State;
use kseal_controller::serve::http::{ApiOptions, serve_listeners};
use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long another client's one verify may take while the flood goes on: a liveness bound,
/// not a speed figure (the figures are in docs/benchmarks.md).
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Values in each flood request: the most a request may hold (`--max-request-items`).
const FLOOD_ITEMS: usize = 256;

/// Two 2048-bit keys, generated once per test binary. Test-only: 2048 bits keeps the suite
/// fast; do not copy into production code.
fn ring() -> KeyRing {
    static KEYS: OnceLock<Vec<KeyPair>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..2)
            .map(|_| {
                KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("keygen")
            })
            .collect()
    })
    .iter()
    .cloned()
    .collect()
}

/// A SealedSecret `prod/db` with `items` values sealed for the ring's last key, without a
/// key hint (so every key of the ring may be tried: the most RSA work a value may cost).
fn verify_body(ring: &KeyRing, items: usize) -> String {
    let key = ring.keys().last().expect("a key");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("db".into()),
            namespace: Some("prod".into()),
            ..ObjectMeta::default()
        },
        data: Some([("password".to_owned(), ByteString(b"hunter2".to_vec()))].into()),
        ..Secret::default()
    };
    let sealed = seal_secret(&secret, key.public_key(), &SealOptions::default()).expect("seal");
    let mut value = serde_json::to_value(&sealed).expect("json");
    value["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("annotations");
    let data = value["spec"]["encryptedData"]
        .as_object_mut()
        .expect("encryptedData");
    let one = data.values().next().expect("a value").clone();
    data.clear();
    for i in 0..items {
        data.insert(format!("k{i:03}"), one.clone());
    }
    value.to_string()
}

/// The flood is not held back by the rate limiter (an attacker with many addresses always
/// has fresh buckets) nor by the connection caps (each flooder holds one connection; 1,000 of
/// them would otherwise meet the listener's cap, tested in connections.rs): only the RSA
/// pool's fairness is under test.
fn options() -> ApiOptions {
    ApiOptions {
        rate_limit: 1000.0,
        rate_limit_burst: 1000,
        max_connections: 4096,
        ..ApiOptions::default()
    }
}

/// The `n`-th flooder's address: 127.x.y.1, round robin over the 100 /16s 127.1 to 127.100
/// (up to 25,600 addresses).
fn flooder(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1 + (n % 100) as u8, (n / 100) as u8, 1)
}

/// How many /16s a flood from fresh addresses spreads over.
const FRESH_NETWORKS: u64 = 8;

/// The `n`-th fresh address of a flood that takes a new one for every request: round robin
/// over the /16s 127.150 to 127.157, a fresh /24 for each request (65,536 addresses before one
/// comes again).
fn fresh_flooder(n: u64) -> Ipv4Addr {
    let network = n % FRESH_NETWORKS;
    let m = n / FRESH_NETWORKS;
    Ipv4Addr::new(127, 150 + network as u8, m as u8, (m >> 8) as u8 % 254 + 1)
}

/// The `n`-th other client's address: 127.200.x.1 and on (one /16: clients of a network share
/// its weight), never one of the flood's.
fn other_client(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 200 + (n / 250) as u8, (n % 250) as u8, 1)
}

/// One `POST /v1/verify` from `from` (a loopback address) over a new connection
/// (`Connection: close`): the status code, or 0 when the exchange failed or took longer than
/// `within`.
async fn verify_from(from: Ipv4Addr, to: SocketAddr, body: &str, within: Duration) -> u16 {
    let exchange = async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((from, 0)))?;
        let mut stream = socket.connect(to).await?;
        let head = format!(
            "POST /v1/verify HTTP/1.1\r\nhost: kseal\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(within, exchange).await {
        Ok(Ok(answer)) => String::from_utf8_lossy(&answer[..answer.len().min(12)])
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// One verify from `from`, a 503 (every place taken at that instant) retried after a short
/// pause as a client honouring Retry-After would, within [`ANSWER_WITHIN`] in all: the last
/// status, and the tries.
async fn verify_retrying(from: Ipv4Addr, to: SocketAddr, body: &str) -> (u16, usize) {
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    let mut tries = 0;
    loop {
        tries += 1;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let status = verify_from(from, to, body, left).await;
        if status != 503 || tokio::time::Instant::now() >= deadline {
            return (status, tries);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The median, 99th percentile and largest of `waits`, in milliseconds (NaN when empty).
fn quantiles_ms(waits: &mut [Duration]) -> [f64; 3] {
    waits.sort();
    let last = waits.len().saturating_sub(1);
    [waits.len() / 2, waits.len() * 99 / 100, last].map(|at| {
        waits
            .get(at.min(last))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    })
}

/// Stops a server from [`server`] and waits for it to end cleanly.
async fn stop(
    stop_server: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<kseal_controller::Result<()>>,
) {
    let _ = stop_server.send(());
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the server stops")
        .expect("the server's task")
        .expect("the server ran");
}

/// What the flood got: answers by status.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    busy: AtomicU64,
    other: AtomicU64,
    /// Exchanges that failed (reset, or no answer in time): a flooder never pauses, so on a
    /// loaded machine some of its connections are cut; not an answer of the server's.
    failed: AtomicU64,
}

impl Tally {
    fn count(&self, status: u16) {
        match status {
            200 => &self.ok,
            503 => &self.busy,
            0 => &self.failed,
            _ => &self.other,
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

/// Where a flood's requests come from.
#[derive(Clone, Copy)]
enum Sources {
    /// `n` flooders, each from its own address ([`flooder`]).
    Fixed(usize),
    /// `n` flooders, each request from an address never used before ([`fresh_flooder`]).
    Fresh(usize),
}

/// A flood of maximal verifies, each flooder sending one after the other (no pause, not even
/// after a 503), on a thread and runtime of its own.
struct Flood {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(sources: Sources, to: SocketAddr, body: String) -> Self {
        let (Sources::Fixed(flooders) | Sources::Fresh(flooders)) = sources;
        let next_fresh = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let (stopping, counting) = (stop.clone(), tally.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the flood's runtime");
            runtime.block_on(async move {
                let body = Arc::new(body);
                let flooders: Vec<_> = (0..flooders)
                    .map(|n| {
                        let (stop, tally, body, next_fresh) = (
                            stopping.clone(),
                            counting.clone(),
                            body.clone(),
                            next_fresh.clone(),
                        );
                        tokio::spawn(async move {
                            while !stop.load(Ordering::Relaxed) {
                                let from = match sources {
                                    Sources::Fixed(_) => flooder(n),
                                    Sources::Fresh(_) => {
                                        fresh_flooder(next_fresh.fetch_add(1, Ordering::Relaxed))
                                    }
                                };
                                let status = verify_from(from, to, &body, ANSWER_WITHIN).await;
                                tally.count(status);
                            }
                        })
                    })
                    .collect();
                for flooder in flooders {
                    let _ = flooder.await;
                }
            });
        });
        Self {
            stop,
            tally,
            thread: Some(thread),
        }
    }

    /// Stops the flood: each flooder finishes the request it is in (each has a deadline).
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the flood's thread");
        }
    }

    fn counts(&self) -> (u64, u64, u64) {
        (
            self.tally.ok.load(Ordering::Relaxed),
            self.tally.busy.load(Ordering::Relaxed),
            self.tally.other.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A server on loopback with a two-key ring: its API address, its state, what stops it, and
/// its metrics address.
async fn server() -> (
    SocketAddr,
    State,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<kseal_controller::Result<()>>,
    SocketAddr,
) {
    let state = State::new();
    state.keys.replace(ring());
    let api = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let to = api.local_addr().expect("addr");
    let metrics_at = metrics.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(serve_listeners(
        api,
        metrics,
        state.clone(),
        options(),
        async move {
            let _ = stopped.await;
        },
    ));
    (to, state, stop, running, metrics_at)
}

/// The HTTP fair share's admission counts (`kseal_http_admissions_total{outcome}`) as the
/// metrics endpoint serves them: admitted, queued, displaced, refused (0 for an outcome not
/// seen yet).
async fn admissions(metrics: SocketAddr) -> [u64; 4] {
    let page = exchange(
        Ipv4Addr::LOCALHOST,
        metrics,
        b"GET /metrics HTTP/1.1\r\nhost: kseal\r\nconnection: close\r\n\r\n",
        ANSWER_WITHIN,
    )
    .await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    ["admitted", "queued", "displaced", "refused"].map(|outcome| {
        let series = format!("kseal_http_admissions_total{{outcome=\"{outcome}\"}} ");
        page.lines()
            .find_map(|line| line.strip_prefix(&series)?.parse().ok())
            .unwrap_or(0)
    })
}

/// Waits until the flood holds the HTTP share: its requests are being refused and RSA work
/// is being done for it (at least `operations` operations); fails after a minute.
async fn until_flooded(flood: &Flood, state: &State, operations: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, busy, _) = flood.counts();
        if busy >= 100 && state.metrics.rsa_operations.get() >= operations {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the flood never filled the HTTP share: {:?}, {} RSA operations",
            flood.counts(),
            state.metrics.rsa_operations.get()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_verify_is_answered_while_100_addresses_flood() {
    let ring = ring();
    let (to, state, stop_server, server, metrics) = server().await;
    let mut flood = Flood::start(Sources::Fixed(100), to, verify_body(&ring, FLOOD_ITEMS));
    until_flooded(&flood, &state, 2000).await;
    let before = admissions(metrics).await;
    // Three other clients, one after the other: each is answered with the verify's own 200
    // within a bounded wait. A 503 (every place taken at that instant) is retried after a
    // short pause, as a client honouring Retry-After would, within the same deadline: the
    // property is a bounded wait, not a first try on a machine that CI shares.
    let one = verify_body(&ring, 1);
    for n in 0..3 {
        let (status, tries) = verify_retrying(other_client(n), to, &one).await;
        assert_eq!(
            status,
            200,
            "another client's verify during the flood after {tries} tries (0: no answer within {ANSWER_WITHIN:?}); flood so far {:?}",
            flood.counts()
        );
        eprintln!("other client {n}: answered after {tries} tries");
    }
    // The flood was still on, and refused (503) rather than answered otherwise; the metrics
    // show the share refusing flood requests and lighter clients displacing heavier ones.
    let after = admissions(metrics).await;
    let (_, busy, other) = flood.counts();
    flood.stop();
    let [_, _, displaced, refused] = [0, 1, 2, 3].map(|at| after[at] - before[at]);
    eprintln!(
        "admissions during the flood (admitted, queued, displaced, refused): before {before:?}, after {after:?}"
    );
    assert!(
        refused > 0 && displaced > 0,
        "kseal_http_admissions_total during the flood: {displaced} displaced, {refused} refused"
    );
    assert!(busy >= 100, "{:?}", flood.counts());
    assert_eq!(other, 0, "flood answers other than 200 and 503");
    stop(stop_server, server).await;
}

/// A flood that takes a fresh address for every request (attack review of issue 40: 380 new
/// addresses a second kept an established client at 503 for 80-85 % of its verifies, as each
/// new address had used nothing and took its place). The fresh addresses come from 8 /16s
/// (a /29 in IPv6 terms, a provider's usual allocation) and weigh what their network used:
/// the established client, in a network of its own, is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_established_clients_verify_is_answered_while_fresh_addresses_flood() {
    let ring = ring();
    let (to, state, stop_server, server, metrics) = server().await;
    let one = verify_body(&ring, 1);
    // Served once before the flood: it has used the share.
    let established = other_client(0);
    assert_eq!(verify_from(established, to, &one, ANSWER_WITHIN).await, 200);
    let mut flood = Flood::start(Sources::Fresh(100), to, verify_body(&ring, FLOOD_ITEMS));
    until_flooded(&flood, &state, 2000).await;
    let before = admissions(metrics).await;
    let mut first_tries = 0;
    for n in 0..5 {
        let (status, tries) = verify_retrying(established, to, &one).await;
        assert_eq!(
            status,
            200,
            "the established client's verify {n} during the flood after {tries} tries; flood so far {:?}",
            flood.counts()
        );
        first_tries += usize::from(tries == 1);
        eprintln!("established client, verify {n}: answered after {tries} tries");
    }
    let after = admissions(metrics).await;
    let (ok, busy, other) = flood.counts();
    flood.stop();
    eprintln!(
        "{first_tries} of 5 answered at the first try; flood answers 200 {ok}, 503 {busy}; admissions before {before:?}, after {after:?}"
    );
    assert!(busy >= 100, "{:?}", flood.counts());
    assert_eq!(other, 0, "flood answers other than 200 and 503");
    stop(stop_server, server).await;
}

/// Sends `request` (head and as much body as given) from `from` over a new connection and
/// reads the answer without closing the sending side: the answer, or what came before the
/// exchange failed or `within` passed.
async fn exchange(from: Ipv4Addr, to: SocketAddr, request: &[u8], within: Duration) -> String {
    let mut answer = Vec::new();
    let exchange = async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((from, 0)))?;
        let mut stream = socket.connect(to).await?;
        stream.write_all(request).await?;
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(within, exchange).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Admission comes before the body (issue 40): with every admission place taken, a verify
/// is refused with 503 and `Retry-After` before its body is parsed (a malformed one, which
/// is 400 once admitted) and without asking for the body of a client that waits for
/// `100 Continue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_verify_is_answered_before_its_body_is_parsed_or_received() {
    let (to, state, stop_server, server, _) = server().await;
    let held: Vec<_> = (0..state.rsa.shape().http_jobs)
        .map(|n| {
            let job = state
                .rsa
                .admit_http(kseal_controller::net::Client::V4(other_client(100 + n)))
                .expect("admitted");
            job.body_read().expect("its place");
            job
        })
        .collect();
    let malformed = "{not json";
    let whole = format!(
        "POST /v1/verify HTTP/1.1\r\nhost: kseal\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{malformed}",
        malformed.len()
    );
    let answer = exchange(other_client(0), to, whole.as_bytes(), ANSWER_WITHIN).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nretry-after: 1\r\n"),
        "{answer}"
    );
    // A client that waits for `100 Continue` before sending its body is refused at once,
    // without being asked for the body.
    let waiting = "POST /v1/verify HTTP/1.1\r\nhost: kseal\r\ncontent-type: application/json\r\ncontent-length: 100000\r\nexpect: 100-continue\r\n\r\n";
    let started = Instant::now();
    let answer = exchange(other_client(1), to, waiting.as_bytes(), ANSWER_WITHIN).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert!(started.elapsed() < ANSWER_WITHIN);
    assert_eq!(state.metrics.rsa_operations.get(), 0);
    // Admitted, the same malformed body is read and refused for what it is.
    drop(held);
    let answer = exchange(other_client(0), to, whole.as_bytes(), ANSWER_WITHIN).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    stop(stop_server, server).await;
}

/// Where a measurement's other clients come from.
#[derive(Debug, Clone, Copy)]
enum Others {
    /// Each from a /16 of its own (127.160 to 127.255 in turn: a /16 comes again after 9.6 s).
    EachInItsNetwork,
    /// All from one /16 (127.200): ten new clients a second of one network, which share its
    /// weight.
    OneNetwork,
}

/// The `n`-th other client of [`Others::EachInItsNetwork`].
fn spread_client(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 160 + (n % 96) as u8, (n / 96 % 250) as u8, 1)
}

/// Floods from `addresses` loopback addresses for `secs` seconds while other clients, a new
/// address every 100 ms, each send one one-value verify; prints their waits and the
/// throughput.
async fn measure(addresses: usize, secs: u64, from_where: Others) {
    let ring = ring();
    let (to, state, stop_server, server, metrics) = server().await;
    let mut flood = Flood::start(
        Sources::Fixed(addresses),
        to,
        verify_body(&ring, FLOOD_ITEMS),
    );
    until_flooded(&flood, &state, 10 * addresses as u64).await;
    let one = Arc::new(verify_body(&ring, 1));
    let (ops_before, flood_before, admitted_before, started) = (
        state.metrics.rsa_operations.get(),
        flood.counts(),
        admissions(metrics).await,
        Instant::now(),
    );
    let mut others = Vec::new();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(secs) {
        let one = one.clone();
        let from = match from_where {
            Others::EachInItsNetwork => spread_client(n),
            Others::OneNetwork => other_client(n),
        };
        others.push(tokio::spawn(async move {
            let start = Instant::now();
            let status = verify_from(from, to, &one, ANSWER_WITHIN).await;
            (status, start.elapsed())
        }));
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut waits = Vec::new();
    let mut refused = 0;
    for other in others {
        match other.await.expect("another client's task") {
            (200, wait) => waits.push(wait),
            _ => refused += 1,
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let operations = state.metrics.rsa_operations.get() - ops_before;
    let flood_after = flood.counts();
    let admitted_after = admissions(metrics).await;
    flood.stop();
    stop(stop_server, server).await;
    let [p50, p99, max] = quantiles_ms(&mut waits);
    eprintln!(
        "flood of {addresses} loopback addresses ({FLOOD_ITEMS}-value verifies), {elapsed:.1} s: \
         other clients (a new address every 100 ms, {from_where:?}, one 1-value verify each) {} answered 200, \
         {refused} not; wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; RSA operations {:.0}/s; \
         flood answers 200: {}, 503: {}, other: {}; admissions admitted/queued/displaced/refused {:?}",
        waits.len(),
        p50,
        p99,
        max,
        operations as f64 / elapsed,
        flood_after.0 - flood_before.0,
        flood_after.1 - flood_before.1,
        flood_after.2 - flood_before.2,
        [0, 1, 2, 3].map(|at| admitted_after[at] - admitted_before[at]),
    );
    if matches!(from_where, Others::EachInItsNetwork) {
        assert_eq!(refused, 0, "other clients were not answered 200");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures for docs/benchmarks.md"]
async fn measure_a_flood_from_100_loopback_addresses() {
    measure(100, 20, Others::EachInItsNetwork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures for docs/benchmarks.md"]
async fn measure_a_flood_from_1000_loopback_addresses() {
    measure(1000, 20, Others::EachInItsNetwork).await;
}

/// A flood of `flooders` taking a fresh address for every request, for `secs` seconds, while
/// one established client (served once before) sends a one-value verify every 200 ms, one
/// try each; prints how many it got answered and its waits.
async fn measure_fresh(flooders: usize, secs: u64) {
    let ring = ring();
    let (to, state, stop_server, server, metrics) = server().await;
    let one = verify_body(&ring, 1);
    let established = other_client(0);
    assert_eq!(verify_from(established, to, &one, ANSWER_WITHIN).await, 200);
    let mut flood = Flood::start(
        Sources::Fresh(flooders),
        to,
        verify_body(&ring, FLOOD_ITEMS),
    );
    until_flooded(&flood, &state, 2000).await;
    let (flood_before, admitted_before, started) =
        (flood.counts(), admissions(metrics).await, Instant::now());
    let (mut waits, mut statuses) = (Vec::new(), std::collections::BTreeMap::new());
    while started.elapsed() < Duration::from_secs(secs) {
        let start = Instant::now();
        let status = verify_from(established, to, &one, ANSWER_WITHIN).await;
        *statuses.entry(status).or_insert(0) += 1;
        if status == 200 {
            waits.push(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let flood_after = flood.counts();
    let admitted_after = admissions(metrics).await;
    flood.stop();
    stop(stop_server, server).await;
    let [p50, p99, max] = quantiles_ms(&mut waits);
    let requests = (flood_after.0 + flood_after.1 + flood_after.2)
        - (flood_before.0 + flood_before.1 + flood_before.2);
    eprintln!(
        "flood of {flooders} flooders, a fresh address per request ({:.0} new addresses/s, {FLOOD_ITEMS}-value verifies), {elapsed:.1} s: \
         the established client's one-value verifies, one try each: {statuses:?} (status: count); \
         wait p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; flood answers 200: {}, 503: {}; \
         admissions admitted/queued/displaced/refused {:?}",
        requests as f64 / elapsed,
        p50,
        p99,
        max,
        flood_after.0 - flood_before.0,
        flood_after.1 - flood_before.1,
        [0, 1, 2, 3].map(|at| admitted_after[at] - admitted_before[at]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures for docs/benchmarks.md"]
async fn measure_a_flood_from_fresh_addresses() {
    measure_fresh(100, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures for docs/benchmarks.md"]
async fn measure_a_slower_flood_from_fresh_addresses() {
    measure_fresh(20, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures for docs/benchmarks.md"]
async fn measure_a_flood_from_100_addresses_against_one_busy_network() {
    measure(100, 20, Others::OneNetwork).await;
}
