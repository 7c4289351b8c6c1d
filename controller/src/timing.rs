//! The controller's one jitter, shared by resyncs, backoffs and key-source polls, and the
//! retry delays of its watches. A leaf module.

use std::hash::{BuildHasher as _, Hasher as _};
use std::time::Duration;

/// `d` scaled by a uniform random factor in `[1 - fraction, 1 + fraction)`, never negative.
pub(crate) fn jitter(d: Duration, fraction: f64) -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(d.as_nanos() as u64);
    // A uniform value in [-1, 1) from a randomly keyed hash.
    let unit = (h.finish() as f64 / u64::MAX as f64) * 2.0 - 1.0;
    d.mul_f64((1.0 + fraction * unit).max(0.0))
}

/// A uniform random part of `window`: `[0, window)` (zero for an empty window). What spreads
/// a fleet that restarted together: the fleet writer's looks and the key source's first reads.
pub(crate) fn spread(window: Duration) -> Duration {
    jitter(window / 2, 1.0).min(window.saturating_sub(Duration::from_nanos(1)))
}

/// Shortest wait before a failed watch is retried.
pub(crate) const WATCH_RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest wait before a failed watch is retried: once the API server is back, every watch
/// re-lists within this (kube-runtime's default waits up to 30 s, and an outage of a minute
/// left the reconciler blind for about 35 s after it ended).
pub(crate) const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

/// The retry delays of the controller's watches: from [`WATCH_RETRY_MIN`] doubling to
/// [`WATCH_RETRY_MAX`], ±20 % jitter, back to the minimum after any successful event, and
/// after each recovery of the API server signalled by [`WatchBackoff::resetting_on`] (a
/// watch whose first answer after an outage is an error, e.g. `410 Gone`, re-lists at once
/// rather than after the delay the outage built up).
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    next: Duration,
    recoveries: Option<tokio::sync::watch::Receiver<u64>>,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            next: WATCH_RETRY_MIN,
            recoveries: None,
        }
    }
}

impl WatchBackoff {
    /// Starts over at the minimum delay whenever `recoveries` changes.
    pub(crate) fn resetting_on(mut recoveries: tokio::sync::watch::Receiver<u64>) -> Self {
        recoveries.mark_unchanged();
        Self {
            recoveries: Some(recoveries),
            ..Self::default()
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if let Some(rx) = &mut self.recoveries
            && rx.has_changed().unwrap_or(false)
        {
            rx.mark_unchanged();
            self.next = WATCH_RETRY_MIN;
        }
        let current = self.next;
        self.next = (current * 2).min(WATCH_RETRY_MAX);
        Some(jitter(current, 0.2))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_RETRY_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn jitter_stays_within_its_fraction() {
        let d = Duration::from_secs(3600);
        let mut seen = BTreeSet::new();
        for _ in 0..1000 {
            let j = jitter(d, 0.1);
            assert!(j >= d.mul_f64(0.9) && j <= d.mul_f64(1.1), "{j:?}");
            seen.insert(j.as_secs() / 60);
        }
        // Spread over the window, not a constant.
        assert!(seen.len() > 5, "{seen:?}");
        assert_eq!(jitter(Duration::ZERO, 0.1), Duration::ZERO);
    }

    #[test]
    fn watch_retries_are_capped_and_reset() {
        use kube::runtime::utils::Backoff as _;
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = (&mut b).take(10).collect();
        assert!(delays[0] <= WATCH_RETRY_MIN.mul_f64(1.2));
        assert!(delays.iter().all(|d| *d <= WATCH_RETRY_MAX.mul_f64(1.2)));
        assert!(delays[9] >= WATCH_RETRY_MAX.mul_f64(0.8));
        b.reset();
        assert!(b.next().is_some_and(|d| d <= WATCH_RETRY_MIN.mul_f64(1.2)));

        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let mut b = WatchBackoff::resetting_on(rx);
        let grown = (&mut b).take(10).last();
        assert!(grown.is_some_and(|d| d >= WATCH_RETRY_MAX.mul_f64(0.8)));
        tx.send_modify(|n| *n += 1);
        assert!(b.next().is_some_and(|d| d <= WATCH_RETRY_MIN.mul_f64(1.2)));
    }
}
