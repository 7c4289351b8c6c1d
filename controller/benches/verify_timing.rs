//! Timing of `POST /v1/verify` by what makes a sealed value fail: how much an attacker who can
//! call verify learns from response times.
//!
//! Not a test (no assertion on timings): `cargo bench -p kseal-controller --bench
//! verify_timing`. Run without `--bench` (as `cargo test --all-targets` does) it does nothing.
//!
//! The API server runs in this process on 127.0.0.1 (port 0) with an RSA key of
//! `VERIFY_TIMING_BITS` bits (default 4096) and no effective rate limit. One keep-alive
//! connection sends SealedSecrets with one item each, the classes interleaved in a shuffled
//! order every round so machine-load drift hits them alike:
//! - `valid`: opens (200);
//! - `rsa-invalid`: one byte of the RSA block flipped (RSA-OAEP decoding fails, 409);
//! - `rsa-wrong-label`: a valid RSA block for another name (the OAEP label check fails, 409);
//! - `gcm-invalid`: the RSA block intact, one byte of the GCM tag flipped (the session key is
//!   recovered, AES-GCM authentication fails, 409).
//!
//! `VERIFY_TIMING_ROUNDS` rounds (default 2000, after 100 warm-up rounds). The same inputs are
//! then opened in-process with [`KeyRing::open`] (no HTTP, no thread hand-off) for
//! `VERIFY_TIMING_ROUNDS` rounds, which isolates the crypto's own difference from the noise of
//! the HTTP path. For each class: mean, median and p99 in µs; for each pair compared: the
//! difference of means with a 95% confidence interval (Welch, normal approximation) and of
//! medians with a 95% bootstrap interval. Figures are recorded in SECURITY.md and
//! docs/benchmarks.md ("`/v1/verify` timing by failure").

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    unreachable_pub
)]

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kseal_controller::State;
use kseal_controller::serve::http::{ApiOptions, serve_listeners};
use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize, Scope};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const NAMESPACE: &str = "prod";
const NAME: &str = "db";
const WARMUP_ROUNDS: usize = 100;
const BOOTSTRAP_RESAMPLES: usize = 2000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Valid,
    RsaInvalid,
    RsaWrongLabel,
    GcmInvalid,
}

impl Class {
    const ALL: [Class; 4] = [
        Class::Valid,
        Class::RsaInvalid,
        Class::RsaWrongLabel,
        Class::GcmInvalid,
    ];

    fn name(self) -> &'static str {
        match self {
            Class::Valid => "valid",
            Class::RsaInvalid => "rsa-invalid",
            Class::RsaWrongLabel => "rsa-wrong-label",
            Class::GcmInvalid => "gcm-invalid",
        }
    }

    fn index(self) -> usize {
        Class::ALL.iter().position(|c| *c == self).unwrap()
    }

    fn expected_status(self) -> u16 {
        match self {
            Class::Valid => 200,
            _ => 409,
        }
    }
}

/// A small deterministic generator (xorshift64*) for shuffling and bootstrap resampling.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// The sealed value (raw envelope bytes) of each class.
fn envelopes(pair: &KeyPair) -> anyhow::Result<[Vec<u8>; 4]> {
    let label = Scope::Strict.label(NAMESPACE, NAME);
    let other = Scope::Strict.label(NAMESPACE, "another-name");
    let plaintext = b"correct horse battery staple";
    let seal = |label| -> anyhow::Result<Vec<u8>> {
        let text = kseal_keys::seal_base64(pair.public_key(), label, plaintext)?;
        Ok(kseal_keys::envelope::decode_base64(&text)?)
    };
    let valid = seal(&label)?;
    let rsa_len = kseal_keys::envelope::Envelope::parse(&valid)?
        .rsa_ciphertext()
        .len();
    // The RSA block starts after the 2-byte length prefix. Flipping a byte in its middle
    // keeps it below the modulus (the first byte is unchanged), so the private-key operation
    // runs and OAEP decoding fails.
    let mut rsa_invalid = valid.clone();
    rsa_invalid[2 + rsa_len / 2] ^= 0x5a;
    let mut gcm_invalid = valid.clone();
    let last = gcm_invalid.len() - 1;
    gcm_invalid[last] ^= 0x01;
    Ok([valid, rsa_invalid, seal(&other)?, gcm_invalid])
}

fn request_body(envelope: &[u8]) -> String {
    serde_json::json!({
        "apiVersion": "bitnami.com/v1alpha1",
        "kind": "SealedSecret",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"encryptedData": {"value": kseal_keys::envelope::encode_base64(envelope)}},
    })
    .to_string()
}

fn http_request(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/verify HTTP/1.1\r\nHost: kseal\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends one request on a keep-alive connection and reads the whole response; returns the
/// status and the time from the first byte written to the last byte read.
async fn round_trip(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> anyhow::Result<(u16, Duration)> {
    buf.clear();
    let start = Instant::now();
    stream.write_all(request).await?;
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed mid-response");
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buf[..end]).context("response head")?;
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .context("no content-length")?;
        if buf.len() >= end + 4 + length {
            let elapsed = start.elapsed();
            let status: u16 = head
                .split(' ')
                .nth(1)
                .context("status line")?
                .parse()
                .context("status code")?;
            return Ok((status, elapsed));
        }
    }
}

struct Summary {
    n: usize,
    mean: f64,
    var: f64,
    median: f64,
    p99: f64,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn median_of(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

fn summarize(samples: &[f64]) -> Summary {
    let n = samples.len();
    let mean = samples.iter().sum::<f64>() / n as f64;
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    Summary {
        n,
        mean,
        var,
        median: percentile(&sorted, 0.5),
        p99: percentile(&sorted, 0.99),
    }
}

/// Difference of means `a - b` with its 95% interval (Welch, normal approximation), and of
/// medians with a 95% percentile-bootstrap interval.
fn compare(a: &[f64], b: &[f64], rng: &mut Rng) -> String {
    let (sa, sb) = (summarize(a), summarize(b));
    let diff = sa.mean - sb.mean;
    let half = 1.96 * (sa.var / sa.n as f64 + sb.var / sb.n as f64).sqrt();
    let mut boots = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut ra = vec![0.0; a.len()];
    let mut rb = vec![0.0; b.len()];
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for x in ra.iter_mut() {
            *x = a[rng.below(a.len())];
        }
        for x in rb.iter_mut() {
            *x = b[rng.below(b.len())];
        }
        boots.push(median_of(&ra) - median_of(&rb));
    }
    boots.sort_by(f64::total_cmp);
    format!(
        "mean {diff:+.2} µs [{:+.2}, {:+.2}] | median {:+.2} µs [{:+.2}, {:+.2}]",
        diff - half,
        diff + half,
        sa.median - sb.median,
        percentile(&boots, 0.025),
        percentile(&boots, 0.975),
    )
}

fn report(title: &str, samples: &[Vec<f64>; 4], rng: &mut Rng) {
    println!("\n{title}");
    println!("| class | n | mean µs | median µs | p99 µs |\n| --- | --- | --- | --- | --- |");
    for class in Class::ALL {
        let s = summarize(&samples[class.index()]);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} |",
            class.name(),
            s.n,
            s.mean,
            s.median,
            s.p99
        );
    }
    println!("differences (first minus second, 95% intervals):");
    for (a, b) in [
        (Class::Valid, Class::RsaInvalid),
        (Class::Valid, Class::GcmInvalid),
        (Class::GcmInvalid, Class::RsaInvalid),
        (Class::GcmInvalid, Class::RsaWrongLabel),
        (Class::RsaInvalid, Class::RsaWrongLabel),
    ] {
        println!(
            "- {} − {}: {}",
            a.name(),
            b.name(),
            compare(&samples[a.index()], &samples[b.index()], rng)
        );
    }
}

async fn run() -> anyhow::Result<()> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let rounds: usize = var("VERIFY_TIMING_ROUNDS").map_or(Ok(2000), |v| v.trim().parse())?;
    let bits: usize = var("VERIFY_TIMING_BITS").map_or(Ok(4096), |v| v.trim().parse())?;
    let size = KeySize::from_bits(bits).with_context(|| format!("unsupported key size {bits}"))?;
    if rounds < 10 {
        bail!("VERIFY_TIMING_ROUNDS must be at least 10");
    }
    eprintln!("generating an RSA-{bits} key");
    let pair = KeyPair::generate(size, &CertificateOptions::default())?;
    let ring: KeyRing = std::iter::once(pair.clone()).collect();
    let state = State::new();
    state.keys.replace(ring.clone());
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = api.local_addr()?;
    let options = ApiOptions {
        rate_limit: 1e9,
        rate_limit_burst: u32::MAX,
        ..ApiOptions::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_listeners(api, metrics, state, options, async {
        let _ = stopped.await;
    }));

    let envelopes = envelopes(&pair)?;
    let requests: Vec<Vec<u8>> = envelopes
        .iter()
        .map(|e| http_request(&request_body(e)))
        .collect();
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut http: [Vec<f64>; 4] = Default::default();
    eprintln!("HTTP: {WARMUP_ROUNDS} warm-up rounds, then {rounds} rounds of 4 requests");
    let started = Instant::now();
    for round in 0..WARMUP_ROUNDS + rounds {
        let mut order = Class::ALL;
        rng.shuffle(&mut order);
        for class in order {
            let (status, elapsed) =
                round_trip(&mut stream, &requests[class.index()], &mut buf).await?;
            if status != class.expected_status() {
                bail!(
                    "{}: expected {}, got {status}",
                    class.name(),
                    class.expected_status()
                );
            }
            if round >= WARMUP_ROUNDS {
                http[class.index()].push(elapsed.as_secs_f64() * 1e6);
            }
        }
    }
    let http_wall = started.elapsed();
    drop(stream);
    let _ = stop.send(());
    server.await??;

    eprintln!("in-process KeyRing::open: {rounds} rounds of 4");
    let label = Scope::Strict.label(NAMESPACE, NAME);
    let mut direct: [Vec<f64>; 4] = Default::default();
    for round in 0..WARMUP_ROUNDS + rounds {
        let mut order = Class::ALL;
        rng.shuffle(&mut order);
        for class in order {
            let envelope = &envelopes[class.index()];
            let start = Instant::now();
            let opened = std::hint::black_box(ring.open(&label, envelope, None));
            let elapsed = start.elapsed();
            if opened.is_ok() != (class == Class::Valid) {
                bail!("{}: unexpected open result", class.name());
            }
            if round >= WARMUP_ROUNDS {
                direct[class.index()].push(elapsed.as_secs_f64() * 1e6);
            }
        }
    }

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "# /v1/verify timing by failure: RSA-{bits}, {rounds} rounds, HTTP part {:.1} s, load average {}",
        http_wall.as_secs_f64(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    report(
        "## POST /v1/verify over loopback (one keep-alive connection)",
        &http,
        &mut rng,
    );
    report(
        "## KeyRing::open in-process (the crypto alone)",
        &direct,
        &mut rng,
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}
