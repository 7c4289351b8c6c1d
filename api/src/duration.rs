//! Go-style durations (`720h`, `1h30m`, `90s`), as Bitnami's flags and kseal's take them.

use std::time::Duration;

/// Longest text [`parse`] reads: `2562047h47m16s854ms775us807ns` is 29 bytes, and Go's
/// own limit (below) is reached long before this.
pub const MAX_LEN: usize = 64;

/// Longest duration [`parse`] accepts: Go's (`time.Duration` is an `int64` of nanoseconds,
/// about 292 years), so a value Bitnami's controller rejects is rejected here too.
pub const MAX: Duration = Duration::from_nanos(i64::MAX as u64);

/// Parses a Go-style duration: `720h`, `1h30m`, `90s`, `500ms`, `0`.
///
/// Never panics: a number too large for [`MAX`] (alone or summed), a non-finite number
/// and a text longer than [`MAX_LEN`] are errors that say so.
pub fn parse(text: &str) -> Result<Duration, String> {
    if text.len() > MAX_LEN {
        return Err(format!(
            "invalid duration: {} bytes is too long (at most {MAX_LEN}); use Go syntax such \
             as 720h, 10m or 90s",
            text.len()
        ));
    }
    let err = || format!("invalid duration {text:?}: use Go syntax such as 720h, 10m or 90s");
    let overflow = || {
        format!(
            "invalid duration {text:?}: overflows the largest duration, {}h (about 292 years)",
            MAX.as_secs() / 3600
        )
    };
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if digits == 0 {
            return Err(err());
        }
        // Only ASCII digits and dots reach the float parser, so `inf`, `NaN` and exponents
        // are syntax errors; a long run of digits can still round to infinity.
        let value: f64 = rest[..digits].parse().map_err(|_| err())?;
        if !value.is_finite() {
            return Err(overflow());
        }
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        let part = Duration::try_from_secs_f64(value * secs).map_err(|_| overflow())?;
        total = total
            .checked_add(part)
            .filter(|t| *t <= MAX)
            .ok_or_else(overflow)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse("720h"), Ok(Duration::from_secs(720 * 3600)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("66m"), Ok(Duration::from_secs(66 * 60)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert!(parse("").is_err());
        assert!(parse("10").is_err());
        assert!(parse("h").is_err());
        assert!(parse("5d").is_err());
    }

    #[test]
    fn overflowing_sums_are_errors_not_panics() {
        for text in [
            "9999999999999999h9999999999999999h",
            "5124095576030431h5124095576030431h",
            "2562048h",
            "2562047h2562047h",
            "18446744073709551615s1s",
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains("overflows the largest duration"), "{text}: {e}");
        }
    }

    #[test]
    fn go_largest_duration_is_accepted_and_one_more_hour_is_not() {
        assert_eq!(parse("2562047h"), Ok(Duration::from_secs(2_562_047 * 3600)));
        assert!(parse("2562047h47m16s").is_ok());
        assert!(parse("2562047h48m").is_err());
    }

    #[test]
    fn huge_numbers_are_overflows() {
        let e = parse(&format!("{}h", "9".repeat(MAX_LEN - 1))).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
    }

    #[test]
    fn nan_inf_and_exponents_are_syntax_errors() {
        for text in ["inf", "infh", "NaNs", "1e3s", "-1h", "1..5h", ".h", "1h-"] {
            let e = parse(text).unwrap_err();
            assert!(e.contains("use Go syntax"), "{text}: {e}");
        }
    }

    #[test]
    fn absurd_lengths_are_refused_without_echoing_the_text() {
        let long = "1s".repeat(1000);
        let e = parse(&long).unwrap_err();
        assert!(e.contains("2000 bytes is too long"), "{e}");
        assert!(!e.contains("1s1s"), "{e}");
        assert!(parse(&"1s".repeat(MAX_LEN / 2)).is_ok());
    }
}
