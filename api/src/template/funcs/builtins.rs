//! Go's `text/template` builtins: `not`, `len`, `index`, the `print` family, the `html`,
//! `js` and `urlquery` escapers and the comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`).
//! `and` and `or` are not here: they evaluate lazily, so the executor handles them.

use super::args::{arg, s, string};
use crate::template::ctx::Ctx;
use crate::template::format::{self, push};
use crate::template::text;
use crate::template::value::{Value, compare, equal};

pub(super) fn not(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(!arg(a, 0).truth()))
}

pub(super) fn len(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let n = match arg(a, 0) {
        Value::Str(s) => s.as_bytes().len(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        Value::Nil => return Err("len of nil pointer".into()),
        v => return Err(format!("len of type {}", v.type_name())),
    };
    Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX)))
}

fn index_of(v: &Value, len: usize) -> Result<usize, String> {
    match v {
        Value::Int(i) => {
            if *i < 0 || *i as u64 >= len as u64 {
                Err(format!("index out of range: {i}"))
            } else {
                // 0 <= i < len, which fits in usize.
                Ok(*i as usize)
            }
        }
        Value::Nil => Err("cannot index slice/array with nil".into()),
        other => Err(format!(
            "cannot index slice/array with type {}",
            other.type_name()
        )),
    }
}

pub(super) fn index(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut item = arg(a, 0).clone();
    if matches!(item, Value::Nil) {
        return Err("index of untyped nil".into());
    }
    for idx in &a[1..] {
        item = match &item {
            Value::List(l) => l[index_of(idx, l.len())?].clone(),
            Value::Str(s) => {
                Value::Int(i64::from(s.as_bytes()[index_of(idx, s.as_bytes().len())?]))
            }
            Value::Map(m) => match idx {
                Value::Str(k) => m.get(k.as_bytes()).unwrap_or(if m.strings_only() {
                    Value::str(Vec::new())
                } else {
                    Value::Nil
                }),
                other => {
                    return Err(format!(
                        "value has type {}; should be string",
                        other.type_name()
                    ));
                }
            },
            Value::Nil => return Err("index of nil pointer".into()),
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

pub(super) fn print(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(format::sprint(a)?)
}

pub(super) fn println(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(format::sprintln(a)?)
}

pub(super) fn printf(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(format::sprintf(s(a, 0)?, &a[1..])?)
}

/// Go's `evalArgs` for `html`, `js` and `urlquery`: one string as it is, else `Sprint`
/// with nil shown as `<no value>`.
fn eval_args(a: &[Value]) -> Result<Vec<u8>, String> {
    if let [Value::Str(s)] = a {
        return Ok(s.as_bytes().to_vec());
    }
    let shown: Vec<Value> = a
        .iter()
        .map(|v| match v {
            Value::Nil => Value::str(b"<no value>".to_vec()),
            other => other.clone(),
        })
        .collect();
    format::sprint(&shown)
}

pub(super) fn html(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = eval_args(a)?;
    let mut out = Vec::with_capacity(input.len());
    for &b in &input {
        match b {
            b'"' => push(&mut out, b"&#34;")?,
            b'\'' => push(&mut out, b"&#39;")?,
            b'&' => push(&mut out, b"&amp;")?,
            b'<' => push(&mut out, b"&lt;")?,
            b'>' => push(&mut out, b"&gt;")?,
            0 => push(&mut out, "\u{FFFD}".as_bytes())?,
            b => push(&mut out, &[b])?,
        }
    }
    string(out)
}

pub(super) fn js(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = eval_args(a)?;
    let mut out = Vec::with_capacity(input.len());
    for r in text::runes(&input) {
        match r {
            text::Rune::Char(c) if c.is_ascii() => match c {
                '\\' => push(&mut out, b"\\\\")?,
                '\'' => push(&mut out, b"\\'")?,
                '"' => push(&mut out, b"\\\"")?,
                '<' => push(&mut out, b"\\u003C")?,
                '>' => push(&mut out, b"\\u003E")?,
                '&' => push(&mut out, b"\\u0026")?,
                '=' => push(&mut out, b"\\u003D")?,
                c if c < ' ' => push(&mut out, format!("\\u{:04X}", c as u32).as_bytes())?,
                c => push(&mut out, &[c as u8])?,
            },
            text::Rune::Char(c) if text::is_print(c) => {
                let mut buf = Vec::new();
                text::push_char(&mut buf, c);
                push(&mut out, &buf)?;
            }
            r => push(&mut out, format!("\\u{:04X}", r.char() as u32).as_bytes())?,
        }
    }
    string(out)
}

pub(super) fn urlquery(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = eval_args(a)?;
    let mut out = Vec::with_capacity(input.len());
    for &b in &input {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            push(&mut out, &[b])?;
        } else if b == b' ' {
            push(&mut out, b"+")?;
        } else {
            push(&mut out, format!("%{b:02X}").as_bytes())?;
        }
    }
    string(out)
}

pub(super) fn eq(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    if a.len() < 2 {
        return Err("missing argument for comparison".into());
    }
    for other in &a[1..] {
        if equal(&a[0], other)? {
            return Ok(Value::Bool(true));
        }
    }
    Ok(Value::Bool(false))
}

pub(super) fn ne(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(!equal(&a[0], &a[1])?))
}

pub(super) fn lt(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_lt()))
}

pub(super) fn le(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_le()))
}

pub(super) fn gt(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_gt()))
}

pub(super) fn ge(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_ge()))
}
