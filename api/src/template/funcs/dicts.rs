//! Sprig's dict functions (`dict`, `get`, `set`, `keys`, `pick`, `dig`, `deepCopy` and
//! the rest). Dicts are shared and mutable as Go's maps are; where Go iterates in random
//! order (`keys`, `values`) kseal sorts by key so that rendering is deterministic.

use std::collections::BTreeMap;

use super::args::{checked_list, map_arg, s, strval};
use crate::template::MAX_DEPTH;
use crate::template::ctx::Ctx;
use crate::template::value::Value;

pub(super) fn dict(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut entries = BTreeMap::new();
    for pair in a.chunks(2) {
        let key = strval(&pair[0])?;
        let value = pair
            .get(1)
            .cloned()
            .unwrap_or_else(|| Value::str(Vec::new()));
        entries.insert(key, value);
    }
    Ok(ctx.new_map(entries, false))
}

pub(super) fn get(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    Ok(m.get(s(a, 1)?).unwrap_or_else(|| Value::str(Vec::new())))
}

pub(super) fn set(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    m.insert(s(a, 1)?.to_vec(), a[2].clone());
    Ok(a[0].clone())
}

pub(super) fn unset(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    m.remove(s(a, 1)?);
    Ok(a[0].clone())
}

pub(super) fn has_key(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(map_arg(a, 0)?.contains(s(a, 1)?)))
}

/// Sprig's `keys`. Go returns them in random map order; kseal sorts each map's keys so the
/// result is deterministic.
pub(super) fn keys(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for i in 0..a.len() {
        for (k, _) in map_arg(a, i)?.snapshot() {
            out.push(Value::str(k));
        }
    }
    checked_list(out)
}

/// Sprig's `values`, in key order (Go: random order).
pub(super) fn values(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    checked_list(
        map_arg(a, 0)?
            .snapshot()
            .into_iter()
            .map(|(_, v)| v)
            .collect(),
    )
}

pub(super) fn pluck(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let key = s(a, 0)?.to_vec();
    let mut out = Vec::new();
    for i in 1..a.len() {
        if let Some(v) = map_arg(a, i)?.get(&key) {
            out.push(v);
        }
    }
    checked_list(out)
}

fn pick_or_omit(ctx: &mut Ctx, a: &[Value], keep: bool) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    let mut names = Vec::new();
    for i in 1..a.len() {
        names.push(s(a, i)?.to_vec());
    }
    let entries = m
        .snapshot()
        .into_iter()
        .filter(|(k, _)| names.contains(k) == keep)
        .collect();
    Ok(ctx.new_map(entries, false))
}

pub(super) fn pick(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    pick_or_omit(ctx, a, true)
}

pub(super) fn omit(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    pick_or_omit(ctx, a, false)
}

/// Sprig's `dig KEY... DEFAULT DICT`.
pub(super) fn dig(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let n = a.len();
    let default = a[n - 2].clone();
    let mut current = a[n - 1].clone();
    for i in 0..n - 2 {
        let key = s(a, i)?;
        let m = match &current {
            Value::Map(m) if !m.strings_only() => m,
            other => {
                return Err(format!(
                    "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                    other.type_name()
                ));
            }
        };
        match m.get(key) {
            Some(v) => current = v,
            None => return Ok(default),
        }
    }
    Ok(current)
}

fn copy_value(ctx: &mut Ctx, v: &Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("value nested too deeply to copy".into());
    }
    ctx.step()?;
    Ok(match v {
        Value::List(l) => {
            let mut out = Vec::with_capacity(l.len());
            for item in l.iter() {
                out.push(copy_value(ctx, item, depth + 1)?);
            }
            Value::list(out)
        }
        Value::Map(m) => {
            let mut entries = BTreeMap::new();
            for (k, item) in m.snapshot() {
                entries.insert(k, copy_value(ctx, &item, depth + 1)?);
            }
            ctx.new_map(entries, m.strings_only())
        }
        other => other.clone(),
    })
}

pub(super) fn deep_copy(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    if matches!(a[0], Value::Nil) {
        return Err("cannot copy nil".into());
    }
    copy_value(ctx, &a[0], 0)
}
