//! Cost of one rate-limit check by the number of distinct clients: 1,000 and 10,000 (the
//! table holds them all) and 100,000 (more than the 65,536 entries it keeps, so every
//! request is a new client that evicts another). Flat is the goal: eviction is O(log n) in a
//! shard, never a scan of the table.
//!
//! For comparison, `before` is the limiter kseal had until then (one map under one mutex; a
//! new client in a full table scanned the whole table). Run with
//! `cargo bench -p kseal-controller --bench ratelimit`; figures are recorded in
//! docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::collections::HashMap;
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kseal_controller::net::Client;
use kseal_controller::serve::ratelimit::RateLimiter;

/// The controller's table size.
const ENTRIES: usize = 65_536;
/// Requests per second per client.
const RATE: f64 = 0.1;

/// The limiter before: GCRA over `route|ip` strings, a full table scanned on each new client.
struct Before {
    emission: Duration,
    tolerance: Duration,
    capacity: usize,
    tat: Mutex<HashMap<String, Instant>>,
}

impl Before {
    fn new(rate: f64, burst: u32, capacity: usize) -> Self {
        let emission = Duration::from_secs_f64(1.0 / rate);
        Self {
            emission,
            tolerance: emission * (burst - 1),
            capacity,
            tat: Mutex::new(HashMap::new()),
        }
    }

    fn check(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut tat = self.tat.lock().unwrap();
        let current = tat.get(key).copied().map_or(now, |t| t.max(now));
        if let Some(allowed_at) = current.checked_sub(self.tolerance)
            && allowed_at > now
        {
            return Err(allowed_at - now);
        }
        if !tat.contains_key(key) && tat.len() >= self.capacity {
            tat.retain(|_, t| *t > now);
            if tat.len() >= self.capacity
                && let Some(oldest) = tat.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone())
            {
                tat.remove(&oldest);
            }
        }
        tat.insert(key.to_owned(), current + self.emission);
        Ok(())
    }
}

fn client(i: usize) -> Client {
    Client::V4(Ipv4Addr::from(0x0a00_0000 + u32::try_from(i).unwrap()))
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("ratelimit");
    g.throughput(Throughput::Elements(1));
    for clients in [1_000usize, 10_000, 100_000] {
        // Rate 0.1/s, burst 2: every entry stays live (not yet back to a full bucket) for the
        // whole run, as when many clients are in debt, so the limiter before cannot free
        // expired entries in bulk and every new client in a full table pays its scan.
        let after = RateLimiter::new(RATE, 2, ENTRIES);
        let keys: Vec<_> = (0..clients).map(|i| ("verify", client(i))).collect();
        let now = Instant::now();
        for key in &keys {
            let _ = after.check(key, now);
        }
        let mut next = 0;
        g.bench_with_input(BenchmarkId::new("after", clients), &clients, |b, _| {
            b.iter(|| {
                next = (next + 1) % keys.len();
                black_box(after.check(&keys[next], Instant::now()))
            })
        });

        let before = Before::new(RATE, 2, ENTRIES);
        let keys: Vec<_> = (0..clients)
            .map(|i| format!("/v1/verify|{}", client(i)))
            .collect();
        for key in &keys {
            let _ = before.check(key, now);
        }
        let mut next = 0;
        g.bench_with_input(BenchmarkId::new("before", clients), &clients, |b, _| {
            b.iter(|| {
                next = (next + 1) % keys.len();
                black_box(before.check(&keys[next], Instant::now()))
            })
        });
    }
    g.finish();
}

criterion_group!(ratelimit, benches);
criterion_main!(ratelimit);
