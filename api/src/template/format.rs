//! Go's `fmt` for template values: `%v` printing, `print`/`println`, and `printf` with the
//! common verbs, flags, width and precision.

use super::text::{self, Rune};
use super::value::Value;
use super::{MAX_DEPTH, MAX_VALUE};

/// Appends `bytes`, failing once the buffer would exceed [`MAX_VALUE`].
pub(crate) fn push(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), String> {
    if out.len().saturating_add(bytes.len()) > MAX_VALUE {
        return Err(too_large());
    }
    out.extend_from_slice(bytes);
    Ok(())
}

pub(crate) fn too_large() -> String {
    format!("value larger than {} MiB", MAX_VALUE >> 20)
}

/// `%v` of one value (fmt's `Sprint` of a single operand).
pub(crate) fn write_v(out: &mut Vec<u8>, v: &Value, depth: usize) -> Result<(), String> {
    write_verb(out, v, &Spec::plain(b'v'), depth)
}

/// `fmt.Sprint`: operands separated by a space when neither side is a string.
pub(crate) fn sprint(args: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !matches!(a, Value::Str(_)) && !matches!(args[i - 1], Value::Str(_)) {
            push(&mut out, b" ")?;
        }
        write_v(&mut out, a, 0)?;
    }
    Ok(out)
}

/// `fmt.Sprintln`: operands always separated by a space, then a newline.
pub(crate) fn sprintln(args: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            push(&mut out, b" ")?;
        }
        write_v(&mut out, a, 0)?;
    }
    push(&mut out, b"\n")?;
    Ok(out)
}

#[derive(Clone, Default)]
struct Spec {
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    width: Option<usize>,
    prec: Option<usize>,
    verb: u8,
}

impl Spec {
    fn plain(verb: u8) -> Self {
        Spec {
            verb,
            ..Spec::default()
        }
    }
}

/// Go caps widths and precisions at 1e6.
const MAX_WIDTH: usize = 1_000_000;

/// `fmt.Sprintf`.
pub(crate) fn sprintf(format: &[u8], args: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut next_arg = 0;
    let mut reordered = false;
    let mut i = 0;
    while i < format.len() {
        let start = i;
        while i < format.len() && format[i] != b'%' {
            i += 1;
        }
        push(&mut out, &format[start..i])?;
        if i >= format.len() {
            break;
        }
        i += 1; // '%'
        let mut spec = parse_flags(format, &mut i);
        let mut good_index = true;
        let mut index = |i: &mut usize, next_arg: &mut usize| {
            if let Some(ok) = arg_number(format, i, next_arg, args.len()) {
                reordered = true;
                good_index &= ok;
            }
        };
        index(&mut i, &mut next_arg);
        parse_width(&mut out, format, &mut i, args, &mut next_arg, &mut spec)?;
        if format.get(i) == Some(&b'.') {
            i += 1;
            index(&mut i, &mut next_arg);
            if format.get(i) == Some(&b'*') {
                i += 1;
                match args.get(next_arg) {
                    Some(Value::Int(p)) if *p >= 0 && *p as u64 <= MAX_WIDTH as u64 => {
                        next_arg += 1;
                        spec.prec = usize::try_from(*p).ok();
                    }
                    _ => {
                        next_arg += 1;
                        push(&mut out, b"%!(BADPREC)")?;
                    }
                }
            } else {
                let (n, used) = digits(&format[i..]);
                i += used;
                match n {
                    Some(n) if n <= MAX_WIDTH => spec.prec = Some(n),
                    None if used == 0 => spec.prec = Some(0),
                    _ => push(&mut out, b"%!(BADPREC)")?,
                }
            }
        }
        index(&mut i, &mut next_arg);
        let Some(verb_rune) = text::runes(&format[i..]).next() else {
            push(&mut out, b"%!(NOVERB)")?;
            break;
        };
        i += verb_rune.len();
        let verb = match verb_rune {
            Rune::Char(c) if c.is_ascii() => c as u8,
            _ => b'?',
        };
        if verb == b'%' {
            push(&mut out, b"%")?;
            continue;
        }
        spec.verb = verb;
        if !good_index {
            push(&mut out, b"%!")?;
            verb_rune.push_to(&mut out);
            push(&mut out, b"(BADINDEX)")?;
            continue;
        }
        let Some(arg) = args.get(next_arg) else {
            push(&mut out, b"%!")?;
            verb_rune.push_to(&mut out);
            push(&mut out, b"(MISSING)")?;
            continue;
        };
        next_arg += 1;
        if verb == b'T' {
            pad(&mut out, arg.type_name().as_bytes(), &spec)?;
            continue;
        }
        if verb == b'?' {
            push(&mut out, b"%!")?;
            verb_rune.push_to(&mut out);
            bad_tail(&mut out, arg)?;
            continue;
        }
        write_verb(&mut out, arg, &spec, 0)?;
    }
    if !reordered && next_arg < args.len() {
        write_extra(&mut out, &args[next_arg..])?;
    }
    Ok(out)
}

/// The flags after a `%` at `i` (`-`, `+`, `#`, space, `0`), leaving `i` past them.
fn parse_flags(format: &[u8], i: &mut usize) -> Spec {
    let mut spec = Spec::default();
    while let Some(&c) = format.get(*i) {
        match c {
            b'-' => {
                spec.minus = true;
                spec.zero = false;
            }
            b'+' => spec.plus = true,
            b'#' => spec.sharp = true,
            b' ' => spec.space = true,
            b'0' => spec.zero = !spec.minus,
            _ => break,
        }
        *i += 1;
    }
    spec
}

/// The width at `i` into `spec`: digits, or `*` taking the next argument (`%!(BADWIDTH)`
/// when it is not an int within [`MAX_WIDTH`]).
fn parse_width(
    out: &mut Vec<u8>,
    format: &[u8],
    i: &mut usize,
    args: &[Value],
    next_arg: &mut usize,
    spec: &mut Spec,
) -> Result<(), String> {
    // Width: digits or '*'.
    if format.get(*i) == Some(&b'*') {
        *i += 1;
        match args.get(*next_arg) {
            Some(Value::Int(w)) => {
                *next_arg += 1;
                if w.unsigned_abs() > MAX_WIDTH as u64 {
                    push(out, b"%!(BADWIDTH)")?;
                } else {
                    if *w < 0 {
                        spec.minus = true;
                        spec.zero = false;
                    }
                    spec.width = usize::try_from(w.unsigned_abs()).ok();
                }
            }
            _ => {
                *next_arg += 1;
                push(out, b"%!(BADWIDTH)")?;
            }
        }
    } else {
        let (n, used) = digits(&format[*i..]);
        if used > 0 {
            *i += used;
            match n {
                Some(n) if n <= MAX_WIDTH => spec.width = Some(n),
                _ => push(out, b"%!(BADWIDTH)")?,
            }
        }
    }
    Ok(())
}

/// `%!(EXTRA type=value, …)` for the arguments no verb used.
fn write_extra(out: &mut Vec<u8>, extra: &[Value]) -> Result<(), String> {
    push(out, b"%!(EXTRA ")?;
    for (n, arg) in extra.iter().enumerate() {
        if n > 0 {
            push(out, b", ")?;
        }
        if matches!(arg, Value::Nil) {
            push(out, b"<nil>")?;
        } else {
            push(out, arg.type_name().as_bytes())?;
            push(out, b"=")?;
            write_v(out, arg, 0)?;
        }
    }
    push(out, b")")
}

/// An explicit argument index `[n]` at `i`: `None` if there is none, else whether it is
/// valid (then `next_arg` is set to it).
fn arg_number(format: &[u8], i: &mut usize, next_arg: &mut usize, nargs: usize) -> Option<bool> {
    if format.get(*i) != Some(&b'[') {
        return None;
    }
    let Some(close) = format[*i..].iter().position(|&b| b == b']') else {
        *i += 1;
        return Some(false);
    };
    let inner = &format[*i + 1..*i + close];
    *i += close + 1;
    let (n, used) = digits(inner);
    match n {
        Some(n) if used == inner.len() && n >= 1 && n <= nargs => {
            *next_arg = n - 1;
            Some(true)
        }
        _ => Some(false),
    }
}

/// Parses decimal digits: (value if it fits, bytes consumed).
fn digits(s: &[u8]) -> (Option<usize>, usize) {
    let used = s.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut n: Option<usize> = Some(0);
    for &b in &s[..used] {
        n = n
            .and_then(|n| n.checked_mul(10))
            .and_then(|n| n.checked_add(usize::from(b - b'0')));
    }
    (n, used)
}

/// `(type=value)` after a bad verb, or `(<nil>)`.
fn bad_tail(out: &mut Vec<u8>, arg: &Value) -> Result<(), String> {
    if matches!(arg, Value::Nil) {
        return push(out, b"(<nil>)");
    }
    push(out, b"(")?;
    push(out, arg.type_name().as_bytes())?;
    push(out, b"=")?;
    write_v(out, arg, 0)?;
    push(out, b")")
}

fn bad_verb(out: &mut Vec<u8>, arg: &Value, verb: u8) -> Result<(), String> {
    push(out, b"%!")?;
    push(out, &[verb])?;
    bad_tail(out, arg)
}

/// Pads `s` to the spec's width (runes), with spaces, or zeros under the `0` flag.
fn pad(out: &mut Vec<u8>, s: &[u8], spec: &Spec) -> Result<(), String> {
    let width = spec.width.unwrap_or(0);
    let n = text::rune_count(s);
    if n >= width {
        return push(out, s);
    }
    let fill = vec![if spec.zero { b'0' } else { b' ' }; width - n];
    if spec.minus {
        push(out, s)?;
        push(out, &fill)
    } else {
        push(out, &fill)?;
        push(out, s)
    }
}

/// Pads a number: zero padding goes after the sign.
fn pad_number(out: &mut Vec<u8>, s: &[u8], spec: &Spec) -> Result<(), String> {
    let width = spec.width.unwrap_or(0);
    if spec.zero && !spec.minus && s.len() < width {
        let sign = usize::from(matches!(s.first(), Some(b'-' | b'+' | b' ')));
        let mut padded = s[..sign].to_vec();
        padded.resize(width - s.len() + sign, b'0');
        padded.extend_from_slice(&s[sign..]);
        return push(out, &padded);
    }
    let plain = Spec {
        zero: false,
        ..spec.clone()
    };
    pad(out, s, &plain)
}

fn write_verb(out: &mut Vec<u8>, v: &Value, spec: &Spec, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("value nested too deeply to print".into());
    }
    match v {
        Value::Nil => match spec.verb {
            b'v' => pad(out, b"<nil>", spec),
            verb => bad_verb(out, v, verb),
        },
        Value::Bool(b) => match spec.verb {
            b'v' | b't' => pad(out, if *b { b"true" } else { b"false" }, spec),
            verb => bad_verb(out, v, verb),
        },
        Value::Int(i) => write_int(out, *i, spec, v),
        Value::Float(f) => write_float(out, *f, spec, v),
        Value::Str(s) => write_str(out, s.as_bytes(), spec, v),
        Value::List(items) => {
            push(out, b"[")?;
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    push(out, b" ")?;
                }
                write_verb(out, item, spec, depth + 1)?;
            }
            push(out, b"]")
        }
        Value::Map(m) => {
            push(out, b"map[")?;
            for (n, (k, item)) in m.snapshot().iter().enumerate() {
                if n > 0 {
                    push(out, b" ")?;
                }
                write_str(out, k, spec, &Value::Nil)?;
                push(out, b":")?;
                write_verb(out, item, spec, depth + 1)?;
            }
            push(out, b"]")
        }
    }
}

fn write_str(out: &mut Vec<u8>, s: &[u8], spec: &Spec, v: &Value) -> Result<(), String> {
    match spec.verb {
        b'v' | b's' => {
            let s = truncate_runes(s, spec.prec);
            pad(out, s, spec)
        }
        b'q' => {
            let s = truncate_runes(s, spec.prec);
            let quoted = if spec.sharp && text::can_backquote(s) {
                let mut q = vec![b'`'];
                q.extend_from_slice(s);
                q.push(b'`');
                q
            } else {
                text::quote_with(s, spec.plus)
            };
            pad(out, &quoted, spec)
        }
        b'x' | b'X' => {
            let digits: &[u8; 16] = if spec.verb == b'x' {
                b"0123456789abcdef"
            } else {
                b"0123456789ABCDEF"
            };
            let s = match spec.prec {
                Some(p) if p < s.len() => &s[..p],
                _ => s,
            };
            let prefix: &[u8] = if spec.verb == b'x' { b"0x" } else { b"0X" };
            let mut hex = Vec::with_capacity(s.len() * 3 + 2);
            for (n, &b) in s.iter().enumerate() {
                // `% x` separates bytes; `%#x` prefixes each of them then, else once.
                if spec.space && n > 0 {
                    hex.push(b' ');
                }
                if spec.sharp && (spec.space || n == 0) {
                    hex.extend_from_slice(prefix);
                }
                hex.push(digits[usize::from(b >> 4)]);
                hex.push(digits[usize::from(b & 0xF)]);
            }
            pad(out, &hex, spec)
        }
        verb => {
            if matches!(v, Value::Nil) {
                // A map key printed with a numeric verb.
                let key = Value::str(s.to_vec());
                bad_verb(out, &key, verb)
            } else {
                bad_verb(out, v, verb)
            }
        }
    }
}

fn truncate_runes(s: &[u8], prec: Option<usize>) -> &[u8] {
    let Some(p) = prec else { return s };
    let mut end = 0;
    for r in text::runes(s).take(p) {
        end += r.len();
    }
    &s[..end]
}

fn write_int(out: &mut Vec<u8>, i: i64, spec: &Spec, v: &Value) -> Result<(), String> {
    let (base, upper, prefix): (u32, bool, &[u8]) = match spec.verb {
        b'v' | b'd' => (10, false, b""),
        b'b' => (2, false, b"0b"),
        b'o' => (8, false, b"0"),
        b'O' => (8, false, b"0o"),
        b'x' => (16, false, b"0x"),
        b'X' => (16, true, b"0X"),
        b'c' => {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            let mut s = Vec::new();
            text::push_char(&mut s, c);
            return pad(out, &s, spec);
        }
        b'q' => {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            return pad(out, &text::quote_rune(c, spec.plus), spec);
        }
        b'U' => {
            let s = format!("U+{:04X}", i);
            return pad(out, s.as_bytes(), spec);
        }
        verb => return bad_verb(out, v, verb),
    };
    let magnitude = i.unsigned_abs();
    let mut digits = match base {
        2 => format!("{magnitude:b}"),
        8 => format!("{magnitude:o}"),
        16 if upper => format!("{magnitude:X}"),
        16 => format!("{magnitude:x}"),
        _ => magnitude.to_string(),
    };
    if let Some(p) = spec.prec {
        if p == 0 && magnitude == 0 {
            digits.clear();
        } else if digits.len() < p {
            digits = format!("{}{digits}", "0".repeat(p - digits.len()));
        }
    }
    let mut s = String::new();
    if i < 0 {
        s.push('-');
    } else if spec.plus {
        s.push('+');
    } else if spec.space {
        s.push(' ');
    }
    if (spec.sharp || spec.verb == b'O') && (spec.verb != b'o' || !digits.starts_with('0')) {
        s.push_str(std::str::from_utf8(prefix).unwrap_or(""));
    }
    s.push_str(&digits);
    if spec.prec.is_some() {
        // Go ignores the 0 flag when a precision is given.
        let plain = Spec {
            zero: false,
            ..spec.clone()
        };
        return pad(out, s.as_bytes(), &plain);
    }
    pad_number(out, s.as_bytes(), spec)
}

fn write_float(out: &mut Vec<u8>, f: f64, spec: &Spec, v: &Value) -> Result<(), String> {
    let body = match spec.verb {
        b'v' | b'g' | b'G' => format_g(f, spec.prec, spec.verb == b'G'),
        b'e' | b'E' => format_e(f, spec.prec.unwrap_or(6), spec.verb == b'E'),
        b'f' | b'F' => format_f(f, spec.prec.unwrap_or(6)),
        verb => return bad_verb(out, v, verb),
    };
    let mut s = String::new();
    if !body.starts_with('-') && !f.is_nan() {
        if spec.plus {
            s.push('+');
        } else if spec.space {
            s.push(' ');
        }
    }
    if f.is_infinite() && f > 0.0 && !spec.plus && !spec.space {
        // Go prints +Inf with its sign under %v.
        s.push('+');
    }
    s.push_str(&body);
    if f.is_finite() {
        pad_number(out, s.as_bytes(), spec)
    } else {
        let plain = Spec {
            zero: false,
            ..spec.clone()
        };
        pad(out, s.as_bytes(), &plain)
    }
}

fn special(f: f64) -> Option<String> {
    if f.is_nan() {
        Some("NaN".into())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "Inf" } else { "-Inf" }.into())
    } else {
        None
    }
}

/// Splits Rust's `{:e}` rendering into (negative, digits, decimal exponent).
fn sci_parts(rendered: &str) -> (bool, String, i32) {
    let (neg, rest) = match rendered.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, rendered),
    };
    let (mantissa, exp) = rest.split_once('e').unwrap_or((rest, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    (neg, digits, exp.parse().unwrap_or(0))
}

fn exp_suffix(exp: i32, upper: bool) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!(
        "{}{sign}{:02}",
        if upper { 'E' } else { 'e' },
        exp.unsigned_abs()
    )
}

/// `%e` with `prec` digits after the point.
/// The sign and `d.ddd` mantissa of scientific notation from its significant digits.
fn mantissa(neg: bool, digits: &str) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    s
}

pub(crate) fn format_e(f: f64, prec: usize, upper: bool) -> String {
    if let Some(s) = special(f) {
        return s;
    }
    let (neg, digits, exp) = sci_parts(&format!("{:.*e}", prec, f));
    let mut s = mantissa(neg, &digits);
    s.push_str(&exp_suffix(exp, upper));
    s
}

/// `%f` with `prec` digits after the point.
pub(crate) fn format_f(f: f64, prec: usize) -> String {
    special(f).unwrap_or_else(|| format!("{:.*}", prec, f))
}

/// `%g` (and `%v`): shortest digits, or `prec` significant digits; exponent form when the
/// exponent is < -4 or >= the precision (6 for the shortest form, as in Go).
pub(crate) fn format_g(f: f64, prec: Option<usize>, upper: bool) -> String {
    if let Some(s) = special(f) {
        return s;
    }
    let (neg, mut digits, exp) = match prec {
        None => sci_parts(&format!("{:e}", f)),
        Some(p) => {
            let p = p.max(1);
            let (neg, d, e) = sci_parts(&format!("{:.*e}", p - 1, f));
            (neg, d.trim_end_matches('0').to_owned(), e)
        }
    };
    if digits.is_empty() {
        digits.push('0');
    }
    let nd = digits.len() as i64;
    let exp = i64::from(exp);
    let eprec = match prec {
        None => 6,
        Some(p) => {
            let p = p.max(1) as i64;
            if p > nd && nd > exp { nd } else { p }
        }
    };
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if exp < -4 || exp >= eprec {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        // |exp| is far below i32::MAX for an f64.
        s.push_str(&exp_suffix(exp as i32, upper));
    } else {
        s.push_str(&fixed_from_digits(&digits, exp));
    }
    s
}

/// Places the decimal point into `digits` (d.ddd × 10^exp) without rounding.
fn fixed_from_digits(digits: &str, exp: i64) -> String {
    let point = exp + 1;
    let mut s = String::new();
    if point <= 0 {
        s.push_str("0.");
        for _ in 0..(-point) {
            s.push('0');
        }
        s.push_str(digits);
    } else {
        // 0 < point <= 21 here (callers use this only below the exponent threshold).
        let point = point as usize;
        if digits.len() <= point {
            s.push_str(digits);
            for _ in digits.len()..point {
                s.push('0');
            }
        } else {
            s.push_str(&digits[..point]);
            s.push('.');
            s.push_str(&digits[point..]);
        }
    }
    s
}

/// encoding/json's float format: shortest digits, exponent form below 1e-6 or from 1e21.
pub(crate) fn format_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let (neg, digits, exp) = sci_parts(&format!("{:e}", f));
        let mut s = mantissa(neg, &digits);
        if exp < 0 {
            s.push_str(&format!("e-{}", exp.unsigned_abs()));
        } else {
            s.push_str(&format!("e+{exp:02}"));
        }
        s
    } else {
        format!("{f}")
    }
}
