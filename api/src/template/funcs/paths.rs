//! Sprig's path functions (`base`, `dir`, `clean`, `ext`, `isAbs` and their `os*` forms,
//! the same on Linux): Go's `path` package, slash-separated and purely lexical, so nothing
//! here touches the file system.

use super::args::{s, string};
use crate::template::ctx::Ctx;
use crate::template::value::Value;

/// Go's `path.Clean`: the shortest equivalent slash-separated path, purely lexically.
fn clean_path(p: &[u8]) -> Vec<u8> {
    if p.is_empty() {
        return b".".to_vec();
    }
    let rooted = p[0] == b'/';
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in p.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                if parts.last().is_some_and(|last| *last != b"..") {
                    parts.pop();
                } else if !rooted {
                    parts.push(part);
                }
            }
            _ => parts.push(part),
        }
    }
    let mut out = Vec::with_capacity(p.len());
    if rooted {
        out.push(b'/');
    }
    out.extend_from_slice(&parts.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

pub(super) fn path_clean(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(clean_path(s(a, 0)?))
}

/// Go's `path.Base`: the last element, trailing slashes removed; "." for "", "/" for "/".
pub(super) fn path_base(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let p = s(a, 0)?;
    if p.is_empty() {
        return string(b".".to_vec());
    }
    let trimmed = &p[..p.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1)];
    if trimmed.is_empty() {
        return string(b"/".to_vec());
    }
    let start = trimmed
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1);
    string(trimmed[start..].to_vec())
}

/// Go's `path.Dir`: everything up to the last slash, cleaned.
pub(super) fn path_dir(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let p = s(a, 0)?;
    let end = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    string(clean_path(&p[..end]))
}

/// Go's `path.Ext`: the suffix from the last dot of the last element.
pub(super) fn path_ext(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let p = s(a, 0)?;
    for (i, &b) in p.iter().enumerate().rev() {
        match b {
            b'/' => break,
            b'.' => return string(p[i..].to_vec()),
            _ => {}
        }
    }
    string(Vec::new())
}

pub(super) fn path_is_abs(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 0)?.first() == Some(&b'/')))
}
