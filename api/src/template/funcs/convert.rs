//! Sprig's conversions: `atoi`, `int`/`int64` and `float64` (cast's lenient rules: bad
//! input is 0, never an error), and the JSON functions, whose `must` forms fail where the
//! plain ones return an empty string or nil.

use super::args::{arg, s, string, to_i64};
use crate::template::ctx::Ctx;
use crate::template::json::{self, EncodeError, Style};
use crate::template::number::parse_float;
use crate::template::value::Value;

/// Go's `strconv.Atoi` as Sprig wraps it: 0 on bad syntax, clamped on overflow.
pub(super) fn atoi(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let v = std::str::from_utf8(s(a, 0)?).unwrap_or("");
    let (neg, digits) = match v.as_bytes().first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(Value::Int(0));
    }
    let mut n: i64 = 0;
    for b in digits.bytes() {
        let d = i64::from(b - b'0');
        n = match n.checked_mul(10).and_then(|n| {
            if neg {
                n.checked_sub(d)
            } else {
                n.checked_add(d)
            }
        }) {
            Some(n) => n,
            None => return Ok(Value::Int(if neg { i64::MIN } else { i64::MAX })),
        };
    }
    Ok(Value::Int(n))
}

pub(super) fn int(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(to_i64(arg(a, 0))))
}

pub(super) fn float64(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Float(match arg(a, 0) {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Str(v) => std::str::from_utf8(v.as_bytes())
            .ok()
            .and_then(parse_float)
            .unwrap_or(0.0),
        _ => 0.0,
    }))
}

fn encode_json(a: &[Value], style: Style, must: bool) -> Result<Value, String> {
    match json::encode(arg(a, 0), style) {
        Ok(bytes) => string(bytes),
        Err(EncodeError::Limit(m)) => Err(m),
        Err(EncodeError::Unsupported(m)) if must => Err(m),
        Err(EncodeError::Unsupported(_)) => Ok(Value::str(Vec::new())),
    }
}

const COMPACT: Style = Style {
    escape_html: true,
    pretty: false,
};
const PRETTY: Style = Style {
    escape_html: true,
    pretty: true,
};
const RAW: Style = Style {
    escape_html: false,
    pretty: false,
};

pub(super) fn to_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, COMPACT, false)
}

pub(super) fn must_to_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, COMPACT, true)
}

pub(super) fn to_pretty_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, PRETTY, false)
}

pub(super) fn must_to_pretty_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, PRETTY, true)
}

pub(super) fn to_raw_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, RAW, false)
}

pub(super) fn must_to_raw_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, RAW, true)
}

pub(super) fn from_json(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(json::decode(ctx, s(a, 0)?).unwrap_or(Value::Nil))
}

pub(super) fn must_from_json(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    json::decode(ctx, s(a, 0)?)
}
