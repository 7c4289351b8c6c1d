//! Sprig's defaults and flow functions: `default`, `empty`, `coalesce`, `ternary`, `all`,
//! `any` and `compact`, all judged by Go's truth (the zero value of a type is false).
//! `fail` is not here: the executor handles it, since its message depends on the template.

use super::args::{arg, bool_arg, list_arg};
use crate::template::ctx::Ctx;
use crate::template::value::Value;

pub(super) fn default(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    match a.get(1) {
        Some(given) if given.truth() => Ok(given.clone()),
        _ => Ok(a[0].clone()),
    }
}

pub(super) fn empty(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(!arg(a, 0).truth()))
}

pub(super) fn coalesce(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(a.iter().find(|v| v.truth()).cloned().unwrap_or(Value::Nil))
}

pub(super) fn ternary(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(if bool_arg(a, 2)? {
        a[0].clone()
    } else {
        a[1].clone()
    })
}

pub(super) fn all(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(a.iter().all(Value::truth)))
}

pub(super) fn any(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(a.iter().any(Value::truth)))
}

pub(super) fn compact(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "compact")?;
    Ok(Value::list(
        l.iter().filter(|v| v.truth()).cloned().collect(),
    ))
}
