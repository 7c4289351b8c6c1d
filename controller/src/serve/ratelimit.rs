//! The per-client rate limiter of `/v1/verify`, `/v1/rotate` and `/v1/refresh`.
//!
//! A keyed GCRA limiter (a token bucket without a refill task): each key may spend `burst`
//! units at once and `rate` per second sustained. A request is admitted while its key is not
//! in debt; what it then costs (one unit per request, plus its RSA work: see
//! [`crate::serve::http`]) is charged afterwards, so one expensive request puts its client in debt
//! and its next requests wait.
//!
//! Clients are [`Client`](crate::net::Client)s: an IPv4 address, or an IPv6 /64 (one subnet hands a host
//! billions of addresses, so they share one bucket). The table is bounded: it is split into
//! shards, each a hash map plus an ordered index by theoretical arrival time, so a new client
//! in a full shard evicts the entry closest to a full bucket in O(log n), under that shard's
//! lock only; no request ever scans the table.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Shards of the table at most (fewer for tiny tables, so the bound stays exact).
const SHARDS: usize = 16;

/// One shard: each key's theoretical arrival time (TAT), and the keys ordered by it.
#[derive(Debug)]
struct Shard<K> {
    /// Each key's TAT and its place in `order` (the sequence number breaks ties).
    tat: HashMap<K, (Instant, u64)>,
    /// Keys by TAT, earliest first: the first is the cheapest to forget.
    order: BTreeMap<(Instant, u64), K>,
    next: u64,
}

impl<K: Hash + Eq + Clone> Shard<K> {
    fn new() -> Self {
        Self {
            tat: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
        }
    }

    /// Stores `key`'s new TAT; a new key in a full shard first evicts the earliest TAT.
    fn store(&mut self, key: &K, tat: Instant, capacity: usize) {
        match self.tat.get(key) {
            Some(&old) => {
                self.order.remove(&old);
            }
            None => {
                if self.tat.len() >= capacity
                    && let Some((_, evicted)) = self.order.pop_first()
                {
                    self.tat.remove(&evicted);
                }
            }
        }
        let place = (tat, self.next);
        self.next = self.next.wrapping_add(1);
        self.tat.insert(key.clone(), place);
        self.order.insert(place, key.clone());
    }
}

/// A keyed GCRA limiter with a bounded table; see the [module](self) documentation.
#[derive(Debug)]
pub struct RateLimiter<K> {
    /// Time one unit is worth at the sustained rate.
    emission: Duration,
    /// How far ahead of now a key's TAT may run and still be admitted (`(burst - 1) ×
    /// emission`).
    tolerance: Duration,
    /// Entries per shard at most.
    shard_capacity: usize,
    hasher: RandomState,
    shards: Box<[Mutex<Shard<K>>]>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// `rate` units per second sustained, `burst` at once, at most `capacity` keys
    /// remembered (a forgotten key starts again with a full bucket).
    pub fn new(rate: f64, burst: u32, capacity: usize) -> Self {
        // Config validates rate > 0 and finite; fall back to one per second otherwise.
        let emission = if rate.is_finite() && rate > 0.0 {
            Duration::try_from_secs_f64(1.0 / rate).unwrap_or(Duration::from_secs(1))
        } else {
            Duration::from_secs(1)
        };
        let capacity = capacity.max(1);
        let shards = capacity.min(SHARDS);
        Self {
            emission,
            tolerance: emission.saturating_mul(burst.max(1) - 1),
            shard_capacity: capacity / shards,
            hasher: RandomState::new(),
            shards: (0..shards).map(|_| Mutex::new(Shard::new())).collect(),
        }
    }

    fn shard(&self, key: &K) -> std::sync::MutexGuard<'_, Shard<K>> {
        let index = (self.hasher.hash_one(key) % self.shards.len() as u64) as usize;
        // A panic while holding this lock cannot leave the shard inconsistent enough to
        // matter (at worst one key's entry is stale).
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a request for `key` at `now` and charges it one unit, or says how long to wait
    /// (the key is in debt beyond its burst).
    pub fn check(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let mut shard = self.shard(key);
        let current = shard.tat.get(key).map_or(now, |(t, _)| (*t).max(now));
        if let Some(allowed_at) = current.checked_sub(self.tolerance)
            && allowed_at > now
        {
            return Err(allowed_at - now);
        }
        shard.store(key, current + self.emission, self.shard_capacity);
        Ok(())
    }

    /// Charges `units` more to `key` (negative: refunds what was reserved and not spent),
    /// whether or not that puts it in debt. A refund never brings a key below a full bucket.
    pub fn charge(&self, key: &K, now: Instant, units: i64) {
        if units == 0 {
            return;
        }
        let mut shard = self.shard(key);
        let current = shard.tat.get(key).map(|(t, _)| *t);
        let amount = self
            .emission
            .saturating_mul(u32::try_from(units.unsigned_abs()).unwrap_or(u32::MAX));
        let tat = if units > 0 {
            let from = current.map_or(now, |t| t.max(now));
            from.checked_add(amount).unwrap_or(from)
        } else {
            let Some(t) = current else { return };
            t.checked_sub(amount).unwrap_or(now).max(now)
        };
        shard.store(key, tat, self.shard_capacity);
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).tat.len())
            .sum()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Client;

    #[test]
    fn gcra_admits_the_burst_then_spaces_requests() {
        // Room for many keys per shard: with one key per shard, "a" and "b" landing in the
        // same shard (random hasher, 1 in 16) would evict "a" and refill its bucket.
        let limiter = RateLimiter::new(2.0, 3, 64 * SHARDS);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check(&"a", t0).is_ok());
        }
        let wait = limiter.check(&"a", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        // Another client has its own bucket.
        assert!(limiter.check(&"b", t0).is_ok());
        // After one emission interval, one more request.
        let t1 = t0 + Duration::from_millis(500);
        assert!(limiter.check(&"a", t1).is_ok());
        assert!(limiter.check(&"a", t1).is_err());
    }

    #[test]
    fn gcra_store_stays_bounded() {
        let limiter = RateLimiter::new(1.0, 1, 4);
        let t0 = Instant::now();
        for i in 0..100 {
            assert!(limiter.check(&format!("k{i}"), t0).is_ok());
        }
        assert!(limiter.len() <= 4, "{}", limiter.len());
        // The bound holds with many shards too, and every shard's index matches its map.
        let limiter = RateLimiter::new(1.0, 1, 1000);
        for i in 0..10_000 {
            assert!(limiter.check(&i, t0).is_ok());
        }
        assert!(limiter.len() <= 1000, "{}", limiter.len());
        for shard in limiter.shards.iter() {
            let shard = shard.lock().unwrap();
            assert_eq!(shard.tat.len(), shard.order.len());
        }
    }

    #[test]
    fn charges_put_a_client_in_debt_and_refunds_give_back() {
        let limiter = RateLimiter::new(2.0, 2, 16);
        let t0 = Instant::now();
        assert!(limiter.check(&"a", t0).is_ok());
        // 10 more units: 5 s of debt at 2 per second.
        limiter.charge(&"a", t0, 10);
        let wait = limiter.check(&"a", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(5000));
        // A refund of what was reserved and not spent.
        limiter.charge(&"a", t0, -10);
        assert!(limiter.check(&"a", t0).is_ok());
        assert!(limiter.check(&"a", t0).is_err());
        // A refund never goes below a full bucket.
        limiter.charge(&"a", t0, -1000);
        assert!(limiter.check(&"a", t0).is_ok());
        assert!(limiter.check(&"a", t0).is_ok());
        assert!(limiter.check(&"a", t0).is_err());
    }

    #[test]
    fn a_full_table_admits_new_clients_and_keeps_the_indebted() {
        let limiter = RateLimiter::new(1.0, 1, 64);
        let t0 = Instant::now();
        // One client deep in debt, then a flood of new clients.
        assert!(limiter.check(&u32::MAX, t0).is_ok());
        limiter.charge(&u32::MAX, t0, 3600);
        for i in 0..10_000u32 {
            // Every new client gets a full bucket at once, however full the table is.
            assert!(limiter.check(&i, t0).is_ok(), "client {i}");
        }
        assert!(limiter.len() <= 64);
        // The debtor was never the cheapest entry to forget: it is still in debt.
        assert!(limiter.check(&u32::MAX, t0).is_err());
    }

    #[test]
    fn ipv6_clients_share_a_bucket_per_64_and_ipv4_is_per_address() {
        let ip = |s: &str| Client::from_ip(s.parse().unwrap());
        assert_eq!(
            ip("2001:db8:1:2::1"),
            ip("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_ne!(ip("192.0.2.1"), ip("192.0.2.2"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(ip("::ffff:192.0.2.1").to_string(), "192.0.2.1");

        let limiter = RateLimiter::new(1.0, 1, 16);
        let t0 = Instant::now();
        assert!(limiter.check(&ip("2001:db8::1"), t0).is_ok());
        assert!(limiter.check(&ip("2001:db8::2"), t0).is_err());
        assert!(limiter.check(&ip("2001:db8:0:1::1"), t0).is_ok());
    }
}
