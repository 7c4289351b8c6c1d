//! The dynamic values a template sees, with Go's truthiness and comparison rules.
//!
//! Go strings are byte strings, so [`Str`] holds bytes (a Secret item need not be UTF-8).
//! Strings may hold plaintext, so they are zeroized when the last reference goes.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::rc::Rc;

use zeroize::Zeroizing;

/// An immutable, shared byte string, zeroized on drop.
#[derive(Clone)]
pub(crate) struct Str(Rc<Zeroizing<Vec<u8>>>);

impl Str {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Self(Rc::new(Zeroizing::new(bytes)))
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A Go map with string keys. Maps are shared and mutable (Sprig's `set` and `unset` change
/// them in place, as in Go).
///
/// Borrowing invariant: `entries` is only borrowed mutably inside `insert`, `remove` and
/// `clear`, none of which calls back into code that could borrow it again, so `borrow` and
/// `borrow_mut` cannot fail.
pub(crate) struct MapCell {
    entries: RefCell<BTreeMap<Vec<u8>, Value>>,
    /// Go's `map[string]string` (the template data, `split`'s result): `index` of a
    /// missing key gives `""` there, and nil for `map[string]interface{}`.
    strings_only: bool,
}

impl MapCell {
    pub(crate) fn new(entries: BTreeMap<Vec<u8>, Value>, strings_only: bool) -> Self {
        Self {
            entries: RefCell::new(entries),
            strings_only,
        }
    }

    pub(crate) fn strings_only(&self) -> bool {
        self.strings_only
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<Value> {
        self.entries.borrow().get(key).cloned()
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.entries.borrow().contains_key(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// The entries in sorted key order (Go sorts map keys when ranging and printing).
    pub(crate) fn snapshot(&self) -> Vec<(Vec<u8>, Value)> {
        self.entries
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub(crate) fn insert(&self, key: Vec<u8>, value: Value) {
        self.entries.borrow_mut().insert(key, value);
    }

    pub(crate) fn remove(&self, key: &[u8]) {
        self.entries.borrow_mut().remove(key);
    }

    /// Drops every entry; breaks reference cycles a template built with `set`.
    pub(crate) fn clear(&self) {
        if let Ok(mut entries) = self.entries.try_borrow_mut() {
            entries.clear();
        }
    }
}

/// A template value. `Nil` stands for both Go's nil and a missing map entry (Go's invalid
/// value): both print as `<no value>` and are false.
#[derive(Clone)]
pub(crate) enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Str),
    List(Rc<Vec<Value>>),
    Map(Rc<MapCell>),
}

impl Value {
    pub(crate) fn str(bytes: impl Into<Vec<u8>>) -> Self {
        Value::Str(Str::new(bytes.into()))
    }

    pub(crate) fn list(items: Vec<Value>) -> Self {
        Value::List(Rc::new(items))
    }

    /// The Go type name, for messages and `%T` (lists are always `[]interface {}`).
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "[]interface {}",
            Value::Map(m) if m.strings_only() => "map[string]string",
            Value::Map(_) => "map[string]interface {}",
        }
    }

    /// Go's truth (text/template `if`): false, 0, "", empty list or map, and nil are false.
    pub(crate) fn truth(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.as_bytes().is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => m.len() > 0,
        }
    }

    /// A rough size in bytes, charged against the allocation budget.
    pub(crate) fn weight(&self) -> usize {
        match self {
            Value::Str(s) => s.as_bytes().len().saturating_add(32),
            Value::List(l) => l.len().saturating_mul(16).saturating_add(32),
            Value::Map(m) => m.len().saturating_mul(48).saturating_add(64),
            _ => 0,
        }
    }

    /// Roughly how much work a function does per use of this argument, in steps.
    pub(crate) fn cost(&self) -> u64 {
        let units = match self {
            Value::Str(s) => s.as_bytes().len() / 256,
            Value::List(l) => l.len(),
            Value::Map(m) => m.len(),
            _ => 0,
        };
        u64::try_from(units).unwrap_or(u64::MAX)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invalid,
    Bool,
    Int,
    Float,
    Str,
    Other,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Nil => Kind::Invalid,
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) => Kind::Int,
        Value::Float(_) => Kind::Float,
        Value::Str(_) => Kind::Str,
        Value::List(_) | Value::Map(_) => Kind::Other,
    }
}

/// Go's `eq` for two values: basic kinds must match; nil equals only nil; lists and maps
/// are not comparable.
pub(crate) fn equal(a: &Value, b: &Value) -> Result<bool, String> {
    let (ka, kb) = (kind(a), kind(b));
    if ka != kb {
        if ka == Kind::Invalid || kb == Kind::Invalid {
            return Ok(false);
        }
        return Err("incompatible types for comparison".into());
    }
    Ok(match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x.as_bytes() == y.as_bytes(),
        _ => return Err(format!("non-comparable type {}", a.type_name())),
    })
}

/// Go's ordering for `lt`, `le`, `gt`, `ge`: ints, floats and strings of the same kind.
pub(crate) fn compare(a: &Value, b: &Value) -> Result<Ordering, String> {
    let (ka, kb) = (kind(a), kind(b));
    for k in [ka, kb] {
        if matches!(k, Kind::Invalid | Kind::Bool | Kind::Other) {
            return Err("invalid type for comparison".into());
        }
    }
    if ka != kb {
        return Err("incompatible types for comparison".into());
    }
    Ok(match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        // Go's `<` on NaN is false both ways; treat unordered as equal.
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Value::Str(x), Value::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
        _ => return Err("invalid type for comparison".into()),
    })
}

/// `reflect.DeepEqual`, as Sprig's `has`, `uniq` and `without` use it. Each value
/// visited burns one unit of `fuel`; running out is an error.
pub(crate) fn deep_equal(
    a: &Value,
    b: &Value,
    depth: usize,
    fuel: &mut u64,
) -> Result<bool, String> {
    if depth > super::MAX_DEPTH {
        return Err("value nested too deeply to compare".into());
    }
    if *fuel == 0 {
        return Err(format!(
            "template execution exceeded {} steps",
            super::MAX_STEPS
        ));
    }
    *fuel -= 1;
    Ok(match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::Str(x), Value::Str(y)) => x.as_bytes() == y.as_bytes(),
        (Value::List(x), Value::List(y)) => {
            if Rc::ptr_eq(x, y) {
                return Ok(true);
            }
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.iter().zip(y.iter()) {
                if !deep_equal(p, q, depth + 1, fuel)? {
                    return Ok(false);
                }
            }
            true
        }
        (Value::Map(x), Value::Map(y)) => {
            if Rc::ptr_eq(x, y) {
                return Ok(true);
            }
            let (x, y) = (x.snapshot(), y.snapshot());
            if x.len() != y.len() {
                return Ok(false);
            }
            for ((kx, vx), (ky, vy)) in x.iter().zip(y.iter()) {
                if kx != ky || !deep_equal(vx, vy, depth + 1, fuel)? {
                    return Ok(false);
                }
            }
            true
        }
        _ => false,
    })
}
