//! Sprig's reflection functions: `typeOf`, `typeIs`, `kindOf`, `kindIs` and `deepEqual`,
//! which name types and kinds as Go's `reflect` package does for the equivalent Go values.

use super::args::{s, string};
use crate::template::ctx::Ctx;
use crate::template::value::Value;

pub(super) fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "invalid",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float64",
        Value::Str(_) => "string",
        Value::List(_) => "slice",
        Value::Map(_) => "map",
    }
}

pub(super) fn type_of(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(a[0].type_name().as_bytes().to_vec())
}

pub(super) fn type_is(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 0)? == a[1].type_name().as_bytes()))
}

pub(super) fn kind_of(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(kind_name(&a[0]).as_bytes().to_vec())
}

pub(super) fn kind_is(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 0)? == kind_name(&a[1]).as_bytes()))
}

pub(super) fn deep_equal_fn(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(ctx.deep_equal(&a[0], &a[1])?))
}
