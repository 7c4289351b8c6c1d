//! Times for people: certificate validity and key dates in UTC, in one format everywhere.
//! A leaf module (no `crate::` imports), shared by certificate loading and the commands.

use std::time::SystemTime;

/// Formats a time as `YYYY-MM-DD HH:MM:SS UTC` (a certificate's validity, for people).
pub(crate) fn utc_time(t: SystemTime) -> String {
    utc_civil(t, "%Y-%m-%d %H:%M:%S UTC")
}

/// Formats a time in UTC with a `strftime` pattern. Civil time, not `jiff::Timestamp`: a
/// timestamp's range ends a day before 9999-12-31 23:59:59 UTC, the notAfter of certificates
/// without a well-defined expiration (RFC 5280, 4.1.2.5).
pub(crate) fn utc_civil(t: SystemTime, pattern: &str) -> String {
    let since_epoch = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => jiff::SignedDuration::try_from(d).ok(),
        Err(e) => jiff::SignedDuration::try_from(e.duration())
            .ok()
            .map(|d| -d),
    };
    since_epoch
        .and_then(|d| {
            jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0)
                .checked_add(d)
                .ok()
        })
        .map(|t| t.strftime(pattern).to_string())
        .unwrap_or_else(|| "a date out of range".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_render_in_utc() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_763_769_600);
        assert_eq!(utc_time(t), "2025-11-22 00:00:00 UTC");
        assert_eq!(utc_time(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        // A certificate may start before 1970 or end at X.509's "no well-defined expiry".
        let before = SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(1);
        assert_eq!(utc_time(before), "1969-12-31 23:59:59 UTC");
        let end = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_799);
        assert_eq!(utc_time(end), "9999-12-31 23:59:59 UTC");
    }
}
