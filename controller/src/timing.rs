//! The controller's one jitter, shared by resyncs, backoffs and key-source polls. A leaf
//! module.

use std::hash::{BuildHasher as _, Hasher as _};
use std::time::Duration;

/// `d` scaled by a uniform random factor in `[1 - fraction, 1 + fraction)`, never negative.
pub fn jitter(d: Duration, fraction: f64) -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(d.as_nanos() as u64);
    // A uniform value in [-1, 1) from a randomly keyed hash.
    let unit = (h.finish() as f64 / u64::MAX as f64) * 2.0 - 1.0;
    d.mul_f64((1.0 + fraction * unit).max(0.0))
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
}
