//! Go's number syntax (`strconv.ParseInt(s, 0, 64)`, `strconv.ParseFloat`), for the
//! parser's constants and Sprig's conversions alike. A leaf.

/// Go's `strconv.ParseInt(s, 0, 64)`: sign, `0x`/`0o`/`0b`/leading-`0` octal prefixes,
/// underscores between digits.
pub(crate) fn parse_int(text: &str) -> Option<i64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (base, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    if digits.is_empty() || !underscores_ok(digits, prefixed) {
        return None;
    }
    let mut v: u64 = 0;
    for c in digits.chars().filter(|&c| c != '_') {
        let d = c.to_digit(base)?;
        v = v.checked_mul(u64::from(base))?.checked_add(u64::from(d))?;
    }
    if neg {
        if v == 1u64 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(v).ok().map(|v| -v)
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Underscores must sit between digits (a base prefix counts as a digit).
fn underscores_ok(digits: &str, prefixed: bool) -> bool {
    let mut prev_digit = prefixed;
    let mut prev_underscore = false;
    for c in digits.chars() {
        if c == '_' {
            if !prev_digit {
                return false;
            }
            prev_underscore = true;
            prev_digit = false;
        } else {
            prev_digit = true;
            prev_underscore = false;
        }
    }
    !prev_underscore
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal text (underscores between digits allowed).
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    let unsigned = text.trim_start_matches(['+', '-']);
    if text.len() - unsigned.len() <= 1 {
        let negative = text.starts_with('-');
        match unsigned.to_ascii_lowercase().as_str() {
            "inf" | "infinity" => {
                return Some(if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                });
            }
            "nan" if unsigned.len() == text.len() => return Some(f64::NAN),
            _ => {}
        }
    }
    if text.contains('_') {
        let body = text.trim_start_matches(['+', '-']);
        if body.starts_with('_') || body.ends_with('_') || body.contains("__") {
            return None;
        }
    }
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    if cleaned.is_empty()
        || !cleaned
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    // Out-of-range literals are errors in Go (ParseFloat reports ErrRange).
    cleaned.parse::<f64>().ok().filter(|f| f.is_finite())
}
