//! Argument helpers shared by the template functions: typed access to the evaluated
//! arguments (with Go's wording for a wrong type, naming positions, never values), Sprig's
//! `strval` / `strslice` / cast conversions, and the size checks every string or list result
//! passes through ([`MAX_VALUE`], [`MAX_LIST`]).

use crate::template::format::{self, too_large};
use crate::template::number::parse_int;
use crate::template::value::{MapCell, Value};
use crate::template::{MAX_LIST, MAX_VALUE};

pub(super) fn arg(args: &[Value], i: usize) -> &Value {
    args.get(i).unwrap_or(&Value::Nil)
}

pub(super) fn s(args: &[Value], i: usize) -> Result<&[u8], String> {
    match arg(args, i) {
        Value::Str(s) => Ok(s.as_bytes()),
        Value::Nil => Err(format!(
            "argument {}: invalid value; expected string",
            i + 1
        )),
        v => Err(format!(
            "argument {}: wrong type for value; expected string; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

pub(super) fn int_arg(args: &[Value], i: usize) -> Result<i64, String> {
    match arg(args, i) {
        Value::Int(n) => Ok(*n),
        Value::Nil => Err(format!("argument {}: invalid value; expected int", i + 1)),
        v => Err(format!(
            "argument {}: wrong type for value; expected int; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

pub(super) fn bool_arg(args: &[Value], i: usize) -> Result<bool, String> {
    match arg(args, i) {
        Value::Bool(b) => Ok(*b),
        Value::Nil => Err(format!("argument {}: invalid value; expected bool", i + 1)),
        v => Err(format!(
            "argument {}: wrong type for value; expected bool; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

pub(super) fn list_arg<'a>(args: &'a [Value], i: usize, what: &str) -> Result<&'a [Value], String> {
    match arg(args, i) {
        Value::List(l) => Ok(l),
        v => Err(format!("cannot {what} on type {}", v.type_name())),
    }
}

/// A `map[string]interface{}` argument (Sprig's dict functions). As in Go, the template
/// data and `split`'s result, which are `map[string]string`, do not qualify.
pub(super) fn map_arg(args: &[Value], i: usize) -> Result<&std::rc::Rc<MapCell>, String> {
    match arg(args, i) {
        Value::Map(m) if !m.strings_only() => Ok(m),
        v => Err(format!(
            "argument {}: wrong type for value; expected map[string]interface {{}}; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

pub(super) fn string(bytes: Vec<u8>) -> Result<Value, String> {
    if bytes.len() > MAX_VALUE {
        return Err(too_large());
    }
    Ok(Value::str(bytes))
}

pub(super) fn checked_list(items: Vec<Value>) -> Result<Value, String> {
    if items.len() > MAX_LIST {
        return Err(format!("list longer than {MAX_LIST} items"));
    }
    Ok(Value::list(items))
}

/// Sprig's `strval`: strings as they are, nil as `<nil>`, anything else as `%v`.
pub(super) fn strval(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::Str(s) => Ok(s.as_bytes().to_vec()),
        other => {
            let mut out = Vec::new();
            format::write_v(&mut out, other, 0)?;
            Ok(out)
        }
    }
}

/// Sprig's `strslice`: a list's non-nil items as strings; nil is empty; else one item.
pub(super) fn strslice(v: &Value) -> Result<Vec<Vec<u8>>, String> {
    match v {
        Value::List(items) => items
            .iter()
            .filter(|i| !matches!(i, Value::Nil))
            .map(strval)
            .collect(),
        Value::Nil => Ok(Vec::new()),
        other => Ok(vec![strval(other)?]),
    }
}

/// cast's `ToInt64` (Sprig's arithmetic): numbers truncate, bools are 0/1, strings parse
/// (base prefixes allowed, "1.00" allowed), anything else is 0.
pub(super) fn to_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        // Saturating in Rust; out-of-range conversions are unspecified in Go.
        Value::Float(f) => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::Str(s) => std::str::from_utf8(s.as_bytes())
            .ok()
            .and_then(|s| parse_int(trim_zero_decimal(s)))
            .unwrap_or(0),
        _ => 0,
    }
}

fn trim_zero_decimal(s: &str) -> &str {
    let mut found_zero = false;
    for (i, c) in s.char_indices().rev() {
        match c {
            '.' if found_zero => return &s[..i],
            '.' => return s,
            '0' => found_zero = true,
            _ => return s,
        }
    }
    s
}

pub(super) fn bounds() -> String {
    "runtime error: slice bounds out of range".into()
}
