//! Sprig's string functions: trimming, case, `substr` and friends, quoting, indenting,
//! `replace`, splitting and joining. Like Go, they work on bytes; where Sprig reads runes
//! or Latin-1 bytes (`title`, `nospace`, `initials`) kseal does the same, byte for byte.

use std::collections::BTreeMap;

use super::args::{arg, bounds, checked_list, int_arg, s, string, strslice, strval};
use crate::template::ctx::Ctx;
use crate::template::format::{self, push, too_large};
use crate::template::text;
use crate::template::value::Value;
use crate::template::{MAX_LIST, MAX_VALUE};

pub(super) fn trim(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::trim_space(s(a, 0)?).to_vec())
}

pub(super) fn trim_all(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::trim_cutset(s(a, 1)?, s(a, 0)?).to_vec())
}

pub(super) fn trim_prefix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (p, v) = (s(a, 0)?, s(a, 1)?);
    string(v.strip_prefix(p).unwrap_or(v).to_vec())
}

pub(super) fn trim_suffix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (p, v) = (s(a, 0)?, s(a, 1)?);
    string(v.strip_suffix(p).unwrap_or(v).to_vec())
}

pub(super) fn upper(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::to_upper(s(a, 0)?))
}

pub(super) fn lower(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::to_lower(s(a, 0)?))
}

/// Go's `strings.Title`: upper-cases each letter that follows a separator.
pub(super) fn title(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut prev = ' ';
    string(text::map_runes(s(a, 0)?, |c| {
        let out = if is_separator(prev) {
            text::title_char(c)
        } else {
            c
        };
        prev = c;
        out
    }))
}

fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !(c.is_ascii_alphanumeric() || c == '_');
    }
    if c.is_alphanumeric() {
        return false;
    }
    text::is_space(c)
}

/// Sprig's `untitle`: lower-cases the first letter of each space-separated word.
pub(super) fn untitle(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut prev_space = true;
    string(text::map_runes(s(a, 0)?, |c| {
        let out = if prev_space { text::lower_char(c) } else { c };
        prev_space = text::is_space(c);
        out
    }))
}

/// Sprig's `substr` (byte offsets; a negative start means 0, an end past the string means
/// its end).
pub(super) fn substr(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (start, end, v) = (int_arg(a, 0)?, int_arg(a, 1)?, s(a, 2)?);
    let len = v.len() as i64;
    let (from, to) = if start < 0 {
        (0, end)
    } else if end < 0 || end > len {
        (start, len)
    } else {
        (start, end)
    };
    if from < 0 || to < from || to > len {
        return Err(bounds());
    }
    // 0 <= from <= to <= len.
    string(v[from as usize..to as usize].to_vec())
}

pub(super) fn repeat(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (count, v) = (int_arg(a, 0)?, s(a, 1)?);
    if count < 0 {
        return Err("strings: negative Repeat count".into());
    }
    let total = usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(v.len()))
        .filter(|t| *t <= MAX_VALUE)
        .ok_or_else(too_large)?;
    let mut out = Vec::with_capacity(total);
    for _ in 0..count {
        out.extend_from_slice(v);
        if v.is_empty() {
            break;
        }
    }
    string(out)
}

/// Sprig's `nospace` (goutils `DeleteWhiteSpace`). It looks at single bytes, not runes:
/// a byte that is a space as a Latin-1 code point is dropped and every other byte is
/// re-encoded as the Latin-1 character of that value, so non-ASCII text comes out
/// mangled unless the input has no space byte at all. kseal does the same, byte for byte.
pub(super) fn nospace(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let v = s(a, 0)?;
    let is_space_byte = |b: u8| text::is_space(char::from(b));
    if !v.iter().any(|&b| is_space_byte(b)) {
        return string(v.to_vec());
    }
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        if !is_space_byte(b) {
            text::push_char(&mut out, char::from(b));
        }
    }
    string(out)
}

pub(super) fn trunc(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (c, v) = (int_arg(a, 0)?, s(a, 1)?);
    let len = v.len() as i64;
    // Both slices stay within 0..=len by the conditions.
    if c < 0 && len + c > 0 {
        return string(v[(len + c) as usize..].to_vec());
    }
    if c >= 0 && len > c {
        return string(v[..c as usize].to_vec());
    }
    string(v.to_vec())
}

pub(super) fn abbrev(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (w, v) = (int_arg(a, 0)?, s(a, 1)?);
    if w < 4 || v.len() as i64 <= w {
        return string(v.to_vec());
    }
    // 4 <= w < len.
    let mut out = v[..(w - 3) as usize].to_vec();
    out.extend_from_slice(b"...");
    string(out)
}

pub(super) fn contains(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(text::contains(s(a, 1)?, s(a, 0)?)))
}

pub(super) fn has_prefix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 1)?.starts_with(s(a, 0)?)))
}

pub(super) fn has_suffix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 1)?.ends_with(s(a, 0)?)))
}

pub(super) fn quote(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for (n, v) in a.iter().filter(|v| !matches!(v, Value::Nil)).enumerate() {
        if n > 0 {
            push(&mut out, b" ")?;
        }
        push(&mut out, &text::quote(&strval(v)?))?;
    }
    string(out)
}

pub(super) fn squote(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for (n, v) in a.iter().filter(|v| !matches!(v, Value::Nil)).enumerate() {
        if n > 0 {
            push(&mut out, b" ")?;
        }
        push(&mut out, b"'")?;
        format::write_v(&mut out, v, 0)?;
        push(&mut out, b"'")?;
    }
    string(out)
}

pub(super) fn cat(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for (n, v) in a.iter().filter(|v| !matches!(v, Value::Nil)).enumerate() {
        if n > 0 {
            push(&mut out, b" ")?;
        }
        format::write_v(&mut out, v, 0)?;
    }
    string(out)
}

fn indent_bytes(spaces: i64, v: &[u8], newline_first: bool) -> Result<Value, String> {
    if spaces < 0 {
        return Err("strings: negative Repeat count".into());
    }
    let lines = v.iter().filter(|&&b| b == b'\n').count() + 1;
    let pad = usize::try_from(spaces)
        .ok()
        .filter(|p| p.saturating_mul(lines).saturating_add(v.len()) <= MAX_VALUE)
        .ok_or_else(too_large)?;
    let pad = vec![b' '; pad];
    let mut out = Vec::with_capacity(v.len() + pad.len() * lines + 1);
    if newline_first {
        out.push(b'\n');
    }
    out.extend_from_slice(&pad);
    for &b in v {
        out.push(b);
        if b == b'\n' {
            out.extend_from_slice(&pad);
        }
    }
    string(out)
}

pub(super) fn indent(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    indent_bytes(int_arg(a, 0)?, s(a, 1)?, false)
}

pub(super) fn nindent(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    indent_bytes(int_arg(a, 0)?, s(a, 1)?, true)
}

/// Go's `strings.Replace(src, old, new, -1)`.
pub(super) fn replace(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (old, new, src) = (s(a, 0)?, s(a, 1)?, s(a, 2)?);
    let mut out = Vec::new();
    if old.is_empty() {
        // An empty `old` matches before every rune and at the end.
        for r in text::runes(src) {
            push(&mut out, new)?;
            let mut buf = Vec::new();
            r.push_to(&mut buf);
            push(&mut out, &buf)?;
        }
        push(&mut out, new)?;
        return string(out);
    }
    let mut prev = 0;
    for at in text::find_all(src, old, usize::MAX) {
        push(&mut out, &src[prev..at])?;
        push(&mut out, new)?;
        prev = at + old.len();
    }
    push(&mut out, &src[prev..])?;
    string(out)
}

pub(super) fn plural(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (one, many, count) = (s(a, 0)?, s(a, 1)?, int_arg(a, 2)?);
    string(if count == 1 { one } else { many }.to_vec())
}

pub(super) fn to_string(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(strval(arg(a, 0))?)
}

pub(super) fn to_strings(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    checked_list(strslice(arg(a, 0))?.into_iter().map(Value::str).collect())
}

fn pieces_map(ctx: &mut Ctx, pieces: Vec<Vec<u8>>) -> Result<Value, String> {
    if pieces.len() > MAX_LIST {
        return Err(format!("list longer than {MAX_LIST} items"));
    }
    let entries: BTreeMap<Vec<u8>, Value> = pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("_{i}").into_bytes(), Value::str(p)))
        .collect();
    Ok(ctx.new_map(entries, true))
}

pub(super) fn split(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let pieces = text::split(s(a, 1)?, s(a, 0)?, 0);
    pieces_map(ctx, pieces)
}

pub(super) fn splitn(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (sep, count, orig) = (s(a, 0)?, int_arg(a, 1)?, s(a, 2)?);
    let pieces = match count {
        0 => Vec::new(),
        c if c < 0 => text::split(orig, sep, 0),
        c => text::split(orig, sep, usize::try_from(c).unwrap_or(usize::MAX)),
    };
    pieces_map(ctx, pieces)
}

pub(super) fn split_list(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let pieces = text::split(s(a, 1)?, s(a, 0)?, 0);
    checked_list(pieces.into_iter().map(Value::str).collect())
}

pub(super) fn join(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let sep = s(a, 0)?;
    let mut out = Vec::new();
    for (n, piece) in strslice(arg(a, 1))?.iter().enumerate() {
        if n > 0 {
            push(&mut out, sep)?;
        }
        push(&mut out, piece)?;
    }
    string(out)
}

pub(super) fn sort_alpha(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut items = strslice(arg(a, 0))?;
    items.sort();
    checked_list(items.into_iter().map(Value::str).collect())
}

/// goutils' `Initials`, as Sprig uses it: byte by byte (like `nospace`), the first byte
/// of every run of non-space bytes, re-encoded as Latin-1.
pub(super) fn initials(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    let mut gap = true;
    for &b in s(a, 0)? {
        if text::is_space(char::from(b)) {
            gap = true;
        } else if gap {
            text::push_char(&mut out, char::from(b));
            gap = false;
        }
    }
    string(out)
}
