//! Go-style durations (`720h`, `1h30m`, `90s`), as Bitnami's flags and kseal's take them.

use std::time::Duration;

/// Parses a Go-style duration: `720h`, `1h30m`, `90s`, `500ms`, `0`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {text:?}: use Go syntax such as 720h, 10m or 90s");
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
        let value: f64 = rest[..digits].parse().map_err(|_| err())?;
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
        total += Duration::try_from_secs_f64(value * secs).map_err(|_| err())?;
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
}
