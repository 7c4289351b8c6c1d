//! Keys the verified index lists that the store does not hold (yet): a key secret deleted by
//! hand and then restored (Secrets Manager keeps a deleted secret for its recovery window),
//! or one a replica region has not received yet while its index has; in a directory ring,
//! also a key that does not parse or check (a restore copied file by file, caught half done;
//! a key secret read in the moment a restore reached one of the store's answers only). The
//! sync that found one succeeded (the other keys load), so no backoff runs and, without
//! more, the key would be read again at the next poll: an hour later by default, while the
//! objects it sealed wait.
//!
//! Between polls the leader asks the store about each such key with one cheap call
//! (`DescribeSecret` of the key secret; for `dir://`, a read of the key's files) and syncs as
//! soon as one is there, or changed since it was found unreadable. Each key is asked about at
//! its own period, a tenth of the time it has been missing, at least [`PROBE_PERIOD`] and at
//! most [`ABSENT_PROBE_MAX`] (up to a fifth less, at random), and probes are at least
//! [`PROBE_PERIOD`] apart in all.
//! A key restored within 50 s of going missing is read within about 5 s, one restored after
//! an hour within 30 s (with more than 30 keys missing, the one-a-second cap stretches that);
//! a key that stays missing costs about 120 calls an hour per cluster, not 3,600. A replica
//! that stops leading forgets them: the leader looks for them and reports them.
//!
//! Nothing here decides what opens: a probe only brings the next full sync forward, and
//! that sync reads and checks the key against the verified index as any other.

use super::*;

/// The longest wait between two probes of one missing key.
pub const ABSENT_PROBE_MAX: Duration = Duration::from_secs(30);

/// One missing key: since when, when it is asked about next, and the store version the last
/// sync saw of it (`None`: not found).
#[derive(Debug)]
struct Missing {
    since: tokio::time::Instant,
    due: tokio::time::Instant,
    seen: Option<Version>,
}

/// Keys of the held index that the last sync did not find in the store (or, in a directory,
/// found unreadable).
#[derive(Debug, Default)]
pub(super) struct Absent {
    keys: BTreeMap<Kid, Missing>,
    /// When the last probe asked: probes are at least [`PROBE_PERIOD`] apart in all, however
    /// many keys are due.
    last_probe: Option<tokio::time::Instant>,
}

/// The wait before asking again about a key missing since `since`: a tenth of the time
/// missing, within [`PROBE_PERIOD`]..=[`ABSENT_PROBE_MAX`].
fn period(since: tokio::time::Instant, now: tokio::time::Instant) -> Duration {
    (now.saturating_duration_since(since) / 10).clamp(PROBE_PERIOD, ABSENT_PROBE_MAX)
}

/// `period`, less up to a fifth of it at random: the leaders of a fleet do not probe in
/// step, and a period's bound holds as stated.
fn early(period: Duration) -> Duration {
    period.mul_f64(0.8) + crate::timing::spread(period.mul_f64(0.2))
}

impl Absent {
    /// Takes the sync's verdict: `missing` are the kids of the index it did not find (with
    /// the store version it saw, for a key found but unreadable). Kids found missing before
    /// keep their first time and their turn; others are forgotten.
    pub(super) fn found_missing(
        &mut self,
        missing: Vec<(Kid, Option<Version>)>,
        now: tokio::time::Instant,
    ) {
        let mut keys = BTreeMap::new();
        for (kid, seen) in missing {
            let entry = self.keys.remove(&kid).unwrap_or(Missing {
                since: now,
                due: now + early(PROBE_PERIOD),
                seen: None,
            });
            keys.insert(kid, Missing { seen, ..entry });
        }
        self.keys = keys;
    }

    /// Forgets every missing key (this replica no longer leads: the leader looks for them).
    pub(super) fn clear(&mut self) {
        self.keys.clear();
    }

    /// The store version of `kid` the last sync found but refused (`None`: not refused, or
    /// not found at all).
    pub(super) fn seen(&self, kid: &Kid) -> Option<Version> {
        self.keys.get(kid).and_then(|m| m.seen.clone())
    }

    /// Whether `kid` was missing at the last sync.
    pub(super) fn contains(&self, kid: &Kid) -> bool {
        self.keys.contains_key(kid)
    }

    /// How many keys are missing.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// When the next probe is due (`None`: no key is missing): the earliest key's turn, at
    /// least [`PROBE_PERIOD`] after the last probe.
    pub(super) fn next_probe(&self) -> Option<tokio::time::Instant> {
        let due = self.keys.values().map(|m| m.due).min()?;
        Some(match self.last_probe {
            Some(last) => due.max(last + PROBE_PERIOD),
            None => due,
        })
    }

    /// The key whose turn it is at `now`, with the version the last sync saw of it; its next
    /// turn is set.
    fn next_kid(&mut self, now: tokio::time::Instant) -> Option<(Kid, Option<Version>)> {
        let (kid, missing) = self.keys.iter_mut().min_by_key(|(_, m)| m.due)?;
        missing.due = now + early(period(missing.since, now));
        self.last_probe = Some(now);
        Some((kid.clone(), missing.seen.clone()))
    }
}

impl Mirror {
    /// When to look for a missing key next (`None`: none is missing).
    pub(super) fn next_absent_probe(&self) -> Option<tokio::time::Instant> {
        self.cache.absent.next_probe()
    }

    /// Asks the store about the missing key whose turn it is (one cheap call): whether it is
    /// there now, or changed since the last sync found it unreadable, so that a full sync
    /// reads it. A store that does not answer says no; the next probe asks again.
    pub(super) async fn missing_key_back(&mut self) -> bool {
        let Some((kid, seen)) = self.cache.absent.next_kid(tokio::time::Instant::now()) else {
            return false;
        };
        let version = self.ring.key_version(&kid).await;
        count(&self.state, "describe_key", outcome(&version));
        match version {
            Ok(Some(now)) if seen.as_ref() != Some(&now) => {
                tracing::info!(kid = %kid.short(), "a missing key of the ring is in the store again: reading the key ring now");
                true
            }
            Ok(_) => false,
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

    /// This replica no longer leads: the missing keys are the leader's to look for and to
    /// report.
    pub(super) fn forget_missing(&mut self) {
        if self.cache.absent.len() > 0 {
            self.cache.absent.clear();
            self.publish_missing();
        }
    }

    /// Publishes the missing keys: their count (`kseal_key_source_keys_missing`) and their
    /// short kids (`/readyz`).
    pub(super) fn publish_missing(&self) {
        self.state.readiness.key_source_missing(
            (self.cache.absent.keys.keys())
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

    fn missing(kids: &[u8]) -> Vec<(Kid, Option<Version>)> {
        kids.iter().map(|n| (kid(*n), None)).collect()
    }

    /// How long after `now` the key asked about at `now` is due again.
    fn asked(absent: &mut Absent, now: tokio::time::Instant) -> (Kid, Duration) {
        let (kid, _) = absent.next_kid(now).unwrap();
        let due = absent.keys[&kid].due;
        (kid, due - now)
    }

    fn within(d: Duration, period: Duration) -> bool {
        d >= period.mul_f64(0.8) && d <= period
    }

    /// Each key is asked about at a tenth of its own time missing (1–30 s): a key newly
    /// missing does not make the others' probes frequent again (attack review 60, A4), and
    /// does not wait behind them (A3).
    #[tokio::test(start_paused = true)]
    async fn each_missing_key_is_asked_about_at_a_tenth_of_its_own_time_missing() {
        let mut absent = Absent::default();
        let start = tokio::time::Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert_eq!(absent.next_probe(), None, "nothing missing: no probe");
        absent.found_missing(missing(&[1]), start);
        assert!(within(absent.next_probe().unwrap() - start, PROBE_PERIOD));
        // Asked just missing: again in a second; missing 100 s: in 10 s; an hour: the cap.
        let (k, wait) = asked(&mut absent, at(1));
        assert_eq!(k, kid(1));
        assert!(within(wait, PROBE_PERIOD), "{wait:?}");
        assert!(within(
            asked(&mut absent, at(100)).1,
            Duration::from_secs(10)
        ));
        assert!(within(asked(&mut absent, at(3600)).1, ABSENT_PROBE_MAX));
        // A key newly missing is asked about within a second, the old one keeps its period.
        absent.found_missing(missing(&[1, 2]), at(3600));
        let next = absent.next_probe().unwrap();
        assert!(next <= at(3600) + PROBE_PERIOD, "{next:?}");
        let (k, wait) = asked(&mut absent, next);
        assert_eq!(k, kid(2));
        assert!(within(wait, PROBE_PERIOD));
        assert!(absent.keys[&kid(1)].due >= at(3600) + ABSENT_PROBE_MAX.mul_f64(0.8));
        // Found: no probe.
        absent.found_missing(Vec::new(), at(3700));
        assert_eq!(absent.len(), 0);
        assert_eq!(absent.next_probe(), None);
    }

    /// However many keys are due, probes are a second apart at least: one call each.
    #[tokio::test(start_paused = true)]
    async fn probes_are_a_second_apart_however_many_keys_are_due() {
        let mut absent = Absent::default();
        let start = tokio::time::Instant::now();
        absent.found_missing(missing(&[1, 2, 3, 4]), start);
        let now = start + Duration::from_secs(5);
        let mut kids = Vec::new();
        let mut last = None;
        for _ in 0..4 {
            let due = absent.next_probe().unwrap().max(now);
            if let Some(last) = last {
                assert!(due >= last + PROBE_PERIOD, "{due:?} after {last:?}");
            }
            kids.push(absent.next_kid(due).unwrap().0);
            last = Some(due);
        }
        kids.sort();
        assert_eq!(kids, [kid(1), kid(2), kid(3), kid(4)], "each asked once");
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

    /// Two new keys pushed to `ring` (the first one active).
    async fn push_two(ring: &Ring) -> Vec<KeyPair> {
        let keys: Vec<KeyPair> = (0..2)
            .map(|_| KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap())
            .collect();
        for pair in &keys {
            ring.push(pair).await.unwrap();
        }
        keys
    }

    async fn probed_until_back(missing: usize) {
        tokio::time::timeout(Duration::from_secs(60), async {
            let (dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            let keys = push_two(&ring).await;
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
            assert!(mirror.cache.keys.contains_key(&gone));
            assert_eq!(mirror.cache.absent.len(), 0);
            assert_eq!(state.metrics.key_source_keys_missing.get(), 0);
            assert_eq!(schedule.probe, None, "nothing missing: no probe");
        })
        .await
        .expect("the missing-key test finishes within its deadline");
    }

    /// A key caught half copied (a directory restore done file by file) is read again once
    /// its files change, not skipped for good (attack review 60, A1); and a replica that no
    /// longer leads stops reporting missing keys, which are the leader's to look for (A2).
    #[tokio::test]
    async fn a_half_copied_key_is_read_again_once_whole_and_a_follower_reports_nothing() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let (dir, _server, ring, state, config, mut mirror, mut schedule) = leader().await;
            let keys = push_two(&ring).await;
            let half = Kid::of(keys[1].public_key());
            let file = dir
                .path()
                .join("ring")
                .join("keys")
                .join(half.as_str())
                .join("tls.key");
            let whole = std::fs::read_to_string(&file).unwrap();
            std::fs::write(&file, &whole[..whole.len() / 2]).unwrap();

            schedule
                .leader_sync(&mut mirror, &state, &config, "test")
                .await;
            assert_eq!(schedule.backoff, BACKOFF_MIN, "the sync succeeded");
            assert!(!mirror.cache.keys.contains_key(&half), "no verdict kept");
            assert!(mirror.cache.absent.contains(&half));
            assert!(schedule.probe_absent);
            // Unchanged: the probe does not sync again.
            assert_eq!(schedule.probe_answered(&mut mirror, &state).await, None);
            // The copy finishes: read at the next probe.
            std::fs::write(&file, &whole).unwrap();
            assert_eq!(
                schedule.probe_answered(&mut mirror, &state).await,
                Some("key_restored")
            );
            schedule
                .leader_sync(&mut mirror, &state, &config, "key_restored")
                .await;
            assert!(mirror.cache.keys.contains_key(&half));
            assert_eq!(schedule.probe, None);

            // A key missing again under a new index... then the lead goes elsewhere.
            let third =
                KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap();
            ring.push(&third).await.unwrap();
            let gone = dir
                .path()
                .join("ring")
                .join("keys")
                .join(Kid::of(third.public_key()).as_str());
            std::fs::remove_dir_all(&gone).unwrap();
            schedule
                .leader_sync(&mut mirror, &state, &config, "test")
                .await;
            assert_eq!(state.metrics.key_source_keys_missing.get(), 1);
            state.leadership.assume(false);
            schedule.follow(&mut mirror, &config).await;
            assert_eq!(state.metrics.key_source_keys_missing.get(), 0);
            assert!(
                state
                    .readiness
                    .key_source()
                    .is_some_and(|s| s.missing.is_empty())
            );
        })
        .await
        .expect("the half-copied key test finishes within its deadline");
    }
}
