//! Sprig's integer math (`add`, `sub`, `mul`, `div`, `mod`, `max`, `min`, int64 and
//! wrapping like Go's) and its integer sequences (`until`, `untilStep`, `seq`), which refuse
//! to grow past [`MAX_LIST`] items.

use super::args::{arg, int_arg, string, to_i64};
use crate::template::MAX_LIST;
use crate::template::ctx::Ctx;
use crate::template::format::push;
use crate::template::value::Value;

pub(super) fn add(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(
        a.iter().fold(0i64, |acc, v| acc.wrapping_add(to_i64(v))),
    ))
}

pub(super) fn add1(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(to_i64(arg(a, 0)).wrapping_add(1)))
}

pub(super) fn sub(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(to_i64(&a[0]).wrapping_sub(to_i64(&a[1]))))
}

pub(super) fn mul(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(
        a[1..]
            .iter()
            .fold(to_i64(&a[0]), |acc, v| acc.wrapping_mul(to_i64(v))),
    ))
}

fn divide(a: &[Value], rem: bool) -> Result<Value, String> {
    let (x, y) = (to_i64(&a[0]), to_i64(&a[1]));
    if y == 0 {
        return Err("runtime error: integer divide by zero".into());
    }
    Ok(Value::Int(if rem {
        x.wrapping_rem(y)
    } else {
        x.wrapping_div(y)
    }))
}

pub(super) fn div(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    divide(a, false)
}

pub(super) fn modulo(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    divide(a, true)
}

pub(super) fn max(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(a.iter().map(to_i64).max().unwrap_or(0)))
}

pub(super) fn min(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(a.iter().map(to_i64).min().unwrap_or(0)))
}

pub(super) fn until(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let count = int_arg(a, 0)?;
    if count.unsigned_abs() > MAX_LIST as u64 {
        return Err(format!("list longer than {MAX_LIST} items"));
    }
    let items: Vec<Value> = if count >= 0 {
        (0..count).map(Value::Int).collect()
    } else {
        (0..-count).map(|i| Value::Int(-i)).collect()
    };
    Ok(Value::list(items))
}

/// Sprig's `untilStep` as a vector of integers, refusing more than [`MAX_LIST`].
fn step_range(start: i64, stop: i64, step: i64) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    let mut i = start;
    let ascending = stop >= start;
    if (ascending && step <= 0) || (!ascending && step >= 0) {
        return Ok(out);
    }
    while (ascending && i < stop) || (!ascending && i > stop) {
        if out.len() >= MAX_LIST {
            return Err(format!("list longer than {MAX_LIST} items"));
        }
        out.push(i);
        match i.checked_add(step) {
            Some(next) => i = next,
            None => break,
        }
    }
    Ok(out)
}

pub(super) fn until_step(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (start, stop, step) = (int_arg(a, 0)?, int_arg(a, 1)?, int_arg(a, 2)?);
    Ok(Value::list(
        step_range(start, stop, step)?
            .into_iter()
            .map(Value::Int)
            .collect(),
    ))
}

/// Sprig's `seq`, like the Unix command: `seq END`, `seq START END`, `seq START STEP END`.
pub(super) fn seq(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut p = Vec::with_capacity(a.len());
    for i in 0..a.len() {
        p.push(int_arg(a, i)?);
    }
    let numbers = match p.as_slice() {
        [end] => {
            let inc = if *end < 1 { -1 } else { 1 };
            step_range(1, end.saturating_add(inc), inc)?
        }
        [start, end] => {
            let inc = if end < start { -1 } else { 1 };
            step_range(*start, end.saturating_add(inc), inc)?
        }
        [start, step, end] => {
            let inc = if end < start { -1 } else { 1 };
            if end < start && *step > 0 {
                Vec::new()
            } else {
                step_range(*start, end.saturating_add(inc), *step)?
            }
        }
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for (n, i) in numbers.iter().enumerate() {
        if n > 0 {
            push(&mut out, b" ")?;
        }
        push(&mut out, i.to_string().as_bytes())?;
    }
    string(out)
}
