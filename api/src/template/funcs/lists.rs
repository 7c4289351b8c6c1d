//! Sprig's list functions (`list`, `append`, `first`, `uniq`, `has`, `concat`, `slice`,
//! `chunk` and the rest, with their `must` aliases): results are new lists, never views of
//! an argument, and stay within [`MAX_LIST`] items.

use super::args::{bounds, checked_list, int_arg, list_arg, to_i64};
use super::reflect::kind_name;
use crate::template::MAX_LIST;
use crate::template::ctx::Ctx;
use crate::template::value::Value;

pub(super) fn list(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    checked_list(a.to_vec())
}

pub(super) fn append(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "append")?;
    let mut out = l.to_vec();
    out.push(a[1].clone());
    checked_list(out)
}

pub(super) fn prepend(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "prepend")?;
    let mut out = Vec::with_capacity(l.len() + 1);
    out.push(a[1].clone());
    out.extend_from_slice(l);
    checked_list(out)
}

pub(super) fn first(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(list_arg(a, 0, "find first")?
        .first()
        .cloned()
        .unwrap_or(Value::Nil))
}

pub(super) fn last(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(list_arg(a, 0, "find last")?
        .last()
        .cloned()
        .unwrap_or(Value::Nil))
}

pub(super) fn rest(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find rest")?;
    Ok(Value::list(l.get(1..).unwrap_or_default().to_vec()))
}

pub(super) fn initial(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find initial")?;
    Ok(Value::list(
        l.get(..l.len().saturating_sub(1))
            .unwrap_or_default()
            .to_vec(),
    ))
}

pub(super) fn reverse(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find reverse")?;
    Ok(Value::list(l.iter().rev().cloned().collect()))
}

pub(super) fn uniq(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find uniq")?;
    let mut out: Vec<Value> = Vec::new();
    for v in l {
        if !contains_value(ctx, &out, v)? {
            out.push(v.clone());
        }
    }
    Ok(Value::list(out))
}

fn contains_value(ctx: &mut Ctx, list: &[Value], v: &Value) -> Result<bool, String> {
    for item in list {
        if ctx.deep_equal(item, v)? {
            return Ok(true);
        }
    }
    Ok(false)
}

pub(super) fn has(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    match &a[1] {
        Value::Nil => Ok(Value::Bool(false)),
        Value::List(l) => Ok(Value::Bool(contains_value(ctx, l, &a[0])?)),
        other => Err(format!("cannot find has on type {}", other.type_name())),
    }
}

pub(super) fn without(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find without")?;
    let mut out = Vec::new();
    for v in l {
        if !contains_value(ctx, &a[1..], v)? {
            out.push(v.clone());
        }
    }
    Ok(Value::list(out))
}

pub(super) fn concat(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for v in a {
        match v {
            Value::List(l) => {
                out.extend(l.iter().cloned());
                if out.len() > MAX_LIST {
                    return Err(format!("list longer than {MAX_LIST} items"));
                }
            }
            other => {
                return Err(format!("cannot concat type {} as list", other.type_name()));
            }
        }
    }
    Ok(Value::list(out))
}

/// Sprig's `slice` (which replaces Go's builtin in Bitnami's function map): lists only.
pub(super) fn slice(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = match &a[0] {
        Value::List(l) => l,
        other => {
            return Err(format!(
                "list should be type of slice or array but {}",
                kind_name(other)
            ));
        }
    };
    if l.is_empty() {
        return Ok(Value::Nil);
    }
    let start = a.get(1).map_or(0, to_i64);
    let end = a.get(2).map_or(l.len() as i64, to_i64);
    if start < 0 || end < start || end > l.len() as i64 {
        return Err(bounds());
    }
    // 0 <= start <= end <= len.
    Ok(Value::list(l[start as usize..end as usize].to_vec()))
}

pub(super) fn chunk(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let size = int_arg(a, 0)?;
    let l = match &a[1] {
        Value::List(l) => l,
        other => return Err(format!("cannot chunk type {}", kind_name(other))),
    };
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .ok_or("chunk size must be positive")?;
    Ok(Value::list(
        l.chunks(size).map(|c| Value::list(c.to_vec())).collect(),
    ))
}
