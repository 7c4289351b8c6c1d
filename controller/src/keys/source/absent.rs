//! Keys the verified index lists that the store does not hold (yet): a key secret deleted by
//! hand and then restored (Secrets Manager keeps a deleted secret for its recovery window),
//! or one a replica region has not received yet while its index has. The sync that found
//! one missing succeeded (the other keys load), so no backoff runs and, without more, the key
//! would be read again at the next poll: an hour later by default, while the objects it
//! sealed wait.
//!
//! Between polls the leader looks for each missing key with one cheap call (`DescribeSecret`
//! of the key secret; for `dir://`, a read of its small file), one key per probe in turn,
//! and syncs as soon as one is there. The probe period follows how long the newest missing
//! key has been missing: a tenth of it, at least [`PROBE_PERIOD`] and at most
//! [`ABSENT_PROBE_MAX`]. A key restored within 50 s of going missing is read within about
//! 5 s (the period's jitter aside), one restored after an hour within 30 s; a key that stays
//! missing costs about 120 calls an hour per cluster, not 3,600.
//!
//! Nothing here decides what opens: a probe only brings the next full sync forward, and
//! that sync reads and checks the key against the verified index as any other.

use super::*;

/// The longest wait between two probes for missing keys (±20 % jitter).
pub const ABSENT_PROBE_MAX: Duration = Duration::from_secs(30);

/// Keys of the held index that the last sync did not find in the store.
#[derive(Debug, Default)]
pub(super) struct Absent {
    /// Each missing kid, with when this process first found it missing.
    since: BTreeMap<Kid, tokio::time::Instant>,
    /// The missing key the next probe asks about (round robin).
    turn: usize,
}

impl Absent {
    /// Takes the sync's verdict: `missing` are the kids of the index it did not find.
    /// Kids found missing before keep their first time; others are forgotten.
    pub(super) fn found_missing(&mut self, missing: &[Kid], now: tokio::time::Instant) {
        self.since.retain(|kid, _| missing.contains(kid));
        for kid in missing {
            self.since.entry(kid.clone()).or_insert(now);
        }
    }

    /// Whether `kid` was missing at the last sync.
    pub(super) fn contains(&self, kid: &Kid) -> bool {
        self.since.contains_key(kid)
    }

    /// How many keys are missing.
    pub(super) fn len(&self) -> usize {
        self.since.len()
    }

    /// When to probe next, from `now`: a tenth of the time the newest missing key has been
    /// missing, within [`PROBE_PERIOD`]..=[`ABSENT_PROBE_MAX`], ±20 %; `None` when no key is
    /// missing.
    pub(super) fn next_probe(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let newest = self.since.values().max()?;
        let period =
            (now.saturating_duration_since(*newest) / 10).clamp(PROBE_PERIOD, ABSENT_PROBE_MAX);
        Some(now + crate::timing::jitter(period, 0.2))
    }

    /// The kid the next probe asks about, in turn.
    fn next_kid(&mut self) -> Option<Kid> {
        if self.since.is_empty() {
            return None;
        }
        let kid = self.since.keys().nth(self.turn % self.since.len()).cloned();
        self.turn = self.turn.wrapping_add(1);
        kid
    }
}

impl Mirror {
    /// When to look for a missing key next (`None`: none is missing).
    pub(super) fn next_absent_probe(&self) -> Option<tokio::time::Instant> {
        self.cache.absent.next_probe(tokio::time::Instant::now())
    }

    /// Asks the store about one missing key, in turn (one cheap call): whether it is there
    /// now, so that a full sync reads it. A store that does not answer says no; the next
    /// probe asks again.
    pub(super) async fn missing_key_back(&mut self) -> bool {
        let Some(kid) = self.cache.absent.next_kid() else {
            return false;
        };
        let present = self.ring.key_present(&kid).await;
        count(&self.state, "describe_key", outcome(&present));
        match present {
            Ok(true) => {
                tracing::info!(kid = %kid.short(), "a missing key of the ring is in the store again: reading the key ring now");
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::debug!(
                    kid = %kid.short(),
                    "looking for a missing key of the ring failed: {}",
                    crate::error_chain(&e)
                );
                false
            }
        }
    }

    /// Publishes the missing keys: their count (`kseal_key_source_keys_missing`) and their
    /// short kids (`/readyz`).
    pub(super) fn publish_missing(&self) {
        self.state.readiness.key_source_missing(
            (self.cache.absent.since.keys())
                .map(|kid| kid.short().to_owned())
                .collect(),
        );
        self.state.metrics.key_source_keys_missing.set(
            self.ring.name(),
            i64::try_from(self.cache.absent.len()).unwrap_or(i64::MAX),
        );
    }
}

#[cfg(test)]
mod tests {
    use kseal_keys::{CertificateOptions, KeySize};

    use super::super::tests::leader;
    use super::*;

    fn kid(n: u8) -> Kid {
        Kid::parse(&format!("{n:02x}").repeat(32)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_probe_period_is_a_tenth_of_the_time_missing_within_its_bounds() {
        let mut absent = Absent::default();
        let start = tokio::time::Instant::now();
        assert_eq!(absent.next_probe(start), None, "nothing missing: no probe");
        absent.found_missing(&[kid(1), kid(2)], start);
        fn period(absent: &Absent, now: tokio::time::Instant) -> Duration {
            absent.next_probe(now).unwrap() - now
        }
        let at = |secs: u64| start + Duration::from_secs(secs);
        // Just missing: the shortest period (±20 %).
        assert!(
            period(&absent, start) >= PROBE_PERIOD.mul_f64(0.8)
                && period(&absent, start) <= PROBE_PERIOD.mul_f64(1.2)
        );
        // Missing 100 s: 10 s; an hour: the cap.
        let p = period(&absent, at(100));
        assert!(
            p >= Duration::from_secs(8) && p <= Duration::from_secs(12),
            "{p:?}"
        );
        let p = period(&absent, at(3600));
        assert!(
            p >= ABSENT_PROBE_MAX.mul_f64(0.8) && p <= ABSENT_PROBE_MAX.mul_f64(1.2),
            "{p:?}"
        );
        // A key newly missing makes it short again; the older one keeps its first time.
        absent.found_missing(&[kid(1), kid(2), kid(3)], at(3600));
        assert!(period(&absent, at(3600)) <= PROBE_PERIOD.mul_f64(1.2));
        absent.found_missing(&[kid(1)], at(3601));
        assert!(
            period(&absent, at(3601)) >= ABSENT_PROBE_MAX.mul_f64(0.8),
            "kid 1 missing since the start"
        );
        // Found: no probe.
        absent.found_missing(&[], at(3602));
        assert_eq!(absent.len(), 0);
        assert_eq!(absent.next_probe(at(3602)), None);
    }

    #[test]
    fn probes_ask_about_each_missing_key_in_turn() {
        let mut absent = Absent::default();
        absent.found_missing(&[kid(1), kid(2), kid(3)], tokio::time::Instant::now());
        let asked: Vec<Kid> = (0..6).filter_map(|_| absent.next_kid()).collect();
        assert_eq!(asked, [kid(1), kid(2), kid(3), kid(1), kid(2), kid(3)]);
        absent.found_missing(&[], tokio::time::Instant::now());
        assert_eq!(absent.next_kid(), None);
    }

    /// The schedule: a sync that finds a key of the index missing succeeds and schedules a
    /// probe for it (not the backoff); the probe says nothing until the key is back, then
    /// triggers a sync that loads it and ends the probes. Either key: the active one (a new
    /// cluster then holds no key at all until it is back) or an older one.
    #[tokio::test]
    async fn a_missing_key_is_probed_for_and_read_as_soon_as_it_is_back() {
        for missing in [0, 1] {
            probed_until_back(missing).await;
        }
    }

    async fn probed_until_back(missing: usize) {
        tokio::time::timeout(Duration::from_secs(60), async {
            let (dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            let keys: Vec<KeyPair> = (0..2)
                .map(|_| {
                    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap()
                })
                .collect();
            for pair in &keys {
                ring.push(pair).await.unwrap();
            }
            let gone = Kid::of(keys[missing].public_key());
            let path = dir.path().join("ring").join("keys").join(gone.as_str());
            let aside = dir.path().join("aside");
            std::fs::rename(&path, &aside).unwrap();

            let before = tokio::time::Instant::now();
            schedule
                .leader_sync(&mut mirror, &state, &config, "test")
                .await;
            assert_eq!(schedule.backoff, BACKOFF_MIN, "the sync succeeded");
            assert_eq!(mirror.cache.absent.len(), 1);
            assert_eq!(state.metrics.key_source_keys_missing.get(), 1);
            assert!(schedule.probe_absent);
            let probe = schedule.probe.expect("a probe for the missing key");
            assert!(probe.saturating_duration_since(before) <= PROBE_PERIOD.mul_f64(1.2));
            assert!(schedule.next.saturating_duration_since(before) >= Duration::from_secs(60));

            // Still missing: no sync, the next probe scheduled.
            assert_eq!(schedule.probe_answered(&mut mirror, &state).await, None);
            assert!(schedule.probe.is_some() && schedule.probe_absent);

            std::fs::rename(&aside, &path).unwrap();
            assert_eq!(
                schedule.probe_answered(&mut mirror, &state).await,
                Some("key_restored")
            );
            let report_before = mirror.cache.keys.len();
            schedule
                .leader_sync(&mut mirror, &state, &config, "key_restored")
                .await;
            assert_eq!(mirror.cache.keys.len(), report_before + 1);
            assert!(matches!(mirror.cache.keys.get(&gone), Some(Ok(_))));
            assert_eq!(mirror.cache.absent.len(), 0);
            assert_eq!(state.metrics.key_source_keys_missing.get(), 0);
            assert_eq!(schedule.probe, None, "nothing missing: no probe");
        })
        .await
        .expect("the missing-key test finishes within its deadline");
    }
}
