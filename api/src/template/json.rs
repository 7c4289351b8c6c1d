//! encoding/json for template values (Sprig's `toJson`, `toPrettyJson`, `toRawJson`) and
//! the reverse (`fromJson`).

use std::collections::BTreeMap;

use super::MAX_DEPTH;
use super::ctx::Ctx;
use super::format::{format_json_float, push};
use super::text::{self, Rune};
use super::value::Value;

/// How to encode.
#[derive(Clone, Copy)]
pub(crate) struct Style {
    /// Escape `<`, `>` and `&` (json.Marshal does; `toRawJson` does not).
    pub(crate) escape_html: bool,
    /// Indent nested values by two spaces (`json.MarshalIndent(v, "", "  ")`).
    pub(crate) pretty: bool,
}

/// Why a value cannot be encoded (Sprig's non-`must` functions then give "").
pub(crate) enum EncodeError {
    Unsupported(String),
    Limit(String),
}

pub(crate) fn encode(v: &Value, style: Style) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    write(&mut out, v, style, 0)?;
    Ok(out)
}

fn lim(r: Result<(), String>) -> Result<(), EncodeError> {
    r.map_err(EncodeError::Limit)
}

fn newline(out: &mut Vec<u8>, style: Style, depth: usize) -> Result<(), EncodeError> {
    if style.pretty {
        lim(push(out, b"\n"))?;
        for _ in 0..depth {
            lim(push(out, b"  "))?;
        }
    }
    Ok(())
}

fn write(out: &mut Vec<u8>, v: &Value, style: Style, depth: usize) -> Result<(), EncodeError> {
    if depth > MAX_DEPTH {
        return Err(EncodeError::Limit(
            "value nested too deeply to encode".into(),
        ));
    }
    match v {
        Value::Nil => lim(push(out, b"null")),
        Value::Bool(b) => lim(push(out, if *b { b"true" } else { b"false" })),
        Value::Int(i) => lim(push(out, i.to_string().as_bytes())),
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(EncodeError::Unsupported(
                    "json: unsupported float value (NaN or infinity)".into(),
                ));
            }
            lim(push(out, format_json_float(*f).as_bytes()))
        }
        Value::Str(s) => lim(write_string(out, s.as_bytes(), style.escape_html)),
        Value::List(items) => {
            if items.is_empty() {
                return lim(push(out, b"[]"));
            }
            lim(push(out, b"["))?;
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    lim(push(out, b","))?;
                }
                newline(out, style, depth + 1)?;
                write(out, item, style, depth + 1)?;
            }
            newline(out, style, depth)?;
            lim(push(out, b"]"))
        }
        Value::Map(m) => {
            let entries = m.snapshot();
            if entries.is_empty() {
                return lim(push(out, b"{}"));
            }
            lim(push(out, b"{"))?;
            for (n, (k, item)) in entries.iter().enumerate() {
                if n > 0 {
                    lim(push(out, b","))?;
                }
                newline(out, style, depth + 1)?;
                lim(write_string(out, k, style.escape_html))?;
                lim(push(out, if style.pretty { b": " } else { b":" }))?;
                write(out, item, style, depth + 1)?;
            }
            newline(out, style, depth)?;
            lim(push(out, b"}"))
        }
    }
}

/// A JSON string as Go writes it: invalid UTF-8 becomes U+FFFD, control characters are
/// escaped (`\b \f \n \r \t` by name), U+2028 and U+2029 always, `<>&` when `html`.
pub(crate) fn write_string(out: &mut Vec<u8>, s: &[u8], html: bool) -> Result<(), String> {
    let mut buf = Vec::with_capacity(s.len() + 2);
    buf.push(b'"');
    for r in text::runes(s) {
        match r {
            Rune::Invalid(_) => buf.extend_from_slice(b"\\ufffd"),
            Rune::Char(c) => match c {
                '"' => buf.extend_from_slice(b"\\\""),
                '\\' => buf.extend_from_slice(b"\\\\"),
                '\u{8}' => buf.extend_from_slice(b"\\b"),
                '\u{c}' => buf.extend_from_slice(b"\\f"),
                '\n' => buf.extend_from_slice(b"\\n"),
                '\r' => buf.extend_from_slice(b"\\r"),
                '\t' => buf.extend_from_slice(b"\\t"),
                '<' | '>' | '&' if html => {
                    buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                }
                '\u{2028}' | '\u{2029}' => {
                    buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                }
                c if (c as u32) < 0x20 => {
                    buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                }
                c => text::push_char(&mut buf, c),
            },
        }
    }
    buf.push(b'"');
    push(out, &buf)
}

/// Decodes JSON as Go does into `interface{}`: numbers become float64, objects maps.
/// The error says where the syntax broke, never what the input held.
pub(crate) fn decode(ctx: &mut Ctx, s: &[u8]) -> Result<Value, String> {
    let parsed: serde_json::Value = serde_json::from_slice(s).map_err(|e| {
        let kind = format!("{:?}", e.classify()).to_lowercase();
        format!(
            "invalid JSON ({kind} error at line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    convert(ctx, &parsed, 0)
}

fn convert(ctx: &mut Ctx, v: &serde_json::Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("JSON nested too deeply".into());
    }
    Ok(match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::str(s.as_bytes()),
        serde_json::Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(convert(ctx, item, depth + 1)?);
            }
            Value::list(out)
        }
        serde_json::Value::Object(map) => {
            let mut entries = BTreeMap::new();
            for (k, item) in map {
                entries.insert(k.as_bytes().to_vec(), convert(ctx, item, depth + 1)?);
            }
            ctx.new_map(entries, false)
        }
    })
}
