//! The function table: Go's template builtins and the deterministic part of Sprig v3.
//!
//! Functions take evaluated arguments; a returned `Err` becomes
//! `error calling NAME: MESSAGE`. Messages name types and positions, never argument
//! values, since those may be plaintext.

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::Digest as _;

use super::ctx::Ctx;
use super::format::{self, push, too_large};
use super::json::{self, EncodeError, Style};
use super::number::{parse_float, parse_int};
use super::text;
use super::value::{Value, compare, equal};
use super::{MAX_DEPTH, MAX_LIST, MAX_VALUE};

pub(crate) type Native = fn(&mut Ctx, &[Value]) -> Result<Value, String>;

/// How a function is evaluated.
pub(crate) enum Kind {
    /// `and` and `or` evaluate their arguments lazily.
    And,
    Or,
    /// Sprig's `fail`: its message is shown only when it is a literal in the template.
    Fail,
    Native(Native),
}

pub(crate) struct FuncDef {
    pub(crate) name: &'static str,
    pub(crate) min: usize,
    pub(crate) max: Option<usize>,
    pub(crate) kind: Kind,
}

const fn f(name: &'static str, min: usize, max: Option<usize>, native: Native) -> FuncDef {
    FuncDef {
        name,
        min,
        max,
        kind: Kind::Native(native),
    }
}

const ANY: Option<usize> = None;
const fn n(k: usize) -> Option<usize> {
    Some(k)
}

static FUNCS: &[FuncDef] = &[
    // Go builtins.
    FuncDef {
        name: "and",
        min: 1,
        max: ANY,
        kind: Kind::And,
    },
    FuncDef {
        name: "or",
        min: 1,
        max: ANY,
        kind: Kind::Or,
    },
    f("not", 1, n(1), not),
    f("len", 1, n(1), len),
    f("index", 1, ANY, index),
    f("print", 0, ANY, print),
    f("printf", 1, ANY, printf),
    f("println", 0, ANY, println),
    f("html", 0, ANY, html),
    f("js", 0, ANY, js),
    f("urlquery", 0, ANY, urlquery),
    f("eq", 1, ANY, eq),
    f("ne", 2, n(2), ne),
    f("lt", 2, n(2), lt),
    f("le", 2, n(2), le),
    f("gt", 2, n(2), gt),
    f("ge", 2, n(2), ge),
    // Sprig: strings.
    f("trim", 1, n(1), trim),
    f("trimAll", 2, n(2), trim_all),
    f("trimall", 2, n(2), trim_all),
    f("trimPrefix", 2, n(2), trim_prefix),
    f("trimSuffix", 2, n(2), trim_suffix),
    f("upper", 1, n(1), upper),
    f("lower", 1, n(1), lower),
    f("title", 1, n(1), title),
    f("untitle", 1, n(1), untitle),
    f("substr", 3, n(3), substr),
    f("repeat", 2, n(2), repeat),
    f("nospace", 1, n(1), nospace),
    f("trunc", 2, n(2), trunc),
    f("abbrev", 2, n(2), abbrev),
    f("contains", 2, n(2), contains),
    f("hasPrefix", 2, n(2), has_prefix),
    f("hasSuffix", 2, n(2), has_suffix),
    f("quote", 0, ANY, quote),
    f("squote", 0, ANY, squote),
    f("cat", 0, ANY, cat),
    f("indent", 2, n(2), indent),
    f("nindent", 2, n(2), nindent),
    f("replace", 3, n(3), replace),
    f("plural", 3, n(3), plural),
    f("toString", 1, n(1), to_string),
    f("toStrings", 1, n(1), to_strings),
    f("split", 2, n(2), split),
    f("splitList", 2, n(2), split_list),
    f("splitn", 3, n(3), splitn),
    f("join", 2, n(2), join),
    f("sortAlpha", 1, n(1), sort_alpha),
    f("initials", 1, n(1), initials),
    f("seq", 0, ANY, seq),
    f("untilStep", 3, n(3), until_step),
    f("chunk", 2, n(2), chunk),
    f("mustChunk", 2, n(2), chunk),
    // Sprig: paths (slash-separated; the os* forms are the same on Linux).
    f("base", 1, n(1), path_base),
    f("dir", 1, n(1), path_dir),
    f("clean", 1, n(1), path_clean),
    f("ext", 1, n(1), path_ext),
    f("isAbs", 1, n(1), path_is_abs),
    f("osBase", 1, n(1), path_base),
    f("osDir", 1, n(1), path_dir),
    f("osClean", 1, n(1), path_clean),
    f("osExt", 1, n(1), path_ext),
    f("osIsAbs", 1, n(1), path_is_abs),
    // Sprig: encoding and hashes.
    f("b64enc", 1, n(1), b64enc),
    f("b64dec", 1, n(1), b64dec),
    f("b32enc", 1, n(1), b32enc),
    f("b32dec", 1, n(1), b32dec),
    f("sha256sum", 1, n(1), sha256sum),
    f("sha1sum", 1, n(1), sha1sum),
    f("adler32sum", 1, n(1), adler32sum),
    // Sprig: conversions.
    f("atoi", 1, n(1), atoi),
    f("int", 1, n(1), int),
    f("int64", 1, n(1), int),
    f("float64", 1, n(1), float64),
    f("toJson", 1, n(1), to_json),
    f("mustToJson", 1, n(1), must_to_json),
    f("toPrettyJson", 1, n(1), to_pretty_json),
    f("mustToPrettyJson", 1, n(1), must_to_pretty_json),
    f("toRawJson", 1, n(1), to_raw_json),
    f("mustToRawJson", 1, n(1), must_to_raw_json),
    f("fromJson", 1, n(1), from_json),
    f("mustFromJson", 1, n(1), must_from_json),
    // Sprig: integer math.
    f("add", 0, ANY, add),
    f("add1", 1, n(1), add1),
    f("sub", 2, n(2), sub),
    f("mul", 1, ANY, mul),
    f("div", 2, n(2), div),
    f("mod", 2, n(2), modulo),
    f("max", 1, ANY, max),
    f("biggest", 1, ANY, max),
    f("min", 1, ANY, min),
    f("until", 1, n(1), until),
    // Sprig: defaults and flow.
    f("default", 1, ANY, default),
    f("empty", 1, n(1), empty),
    f("coalesce", 0, ANY, coalesce),
    f("ternary", 3, n(3), ternary),
    f("all", 0, ANY, all),
    f("any", 0, ANY, any),
    f("compact", 1, n(1), compact),
    f("mustCompact", 1, n(1), compact),
    FuncDef {
        name: "fail",
        min: 1,
        max: n(1),
        kind: Kind::Fail,
    },
    // Sprig: lists.
    f("list", 0, ANY, list),
    f("tuple", 0, ANY, list),
    f("append", 2, n(2), append),
    f("push", 2, n(2), append),
    f("mustAppend", 2, n(2), append),
    f("mustPush", 2, n(2), append),
    f("prepend", 2, n(2), prepend),
    f("mustPrepend", 2, n(2), prepend),
    f("first", 1, n(1), first),
    f("mustFirst", 1, n(1), first),
    f("last", 1, n(1), last),
    f("mustLast", 1, n(1), last),
    f("rest", 1, n(1), rest),
    f("mustRest", 1, n(1), rest),
    f("initial", 1, n(1), initial),
    f("mustInitial", 1, n(1), initial),
    f("reverse", 1, n(1), reverse),
    f("mustReverse", 1, n(1), reverse),
    f("uniq", 1, n(1), uniq),
    f("mustUniq", 1, n(1), uniq),
    f("has", 2, n(2), has),
    f("mustHas", 2, n(2), has),
    f("without", 1, ANY, without),
    f("mustWithout", 1, ANY, without),
    f("concat", 0, ANY, concat),
    f("slice", 1, ANY, slice),
    f("mustSlice", 1, ANY, slice),
    // Sprig: dicts.
    f("dict", 0, ANY, dict),
    f("get", 2, n(2), get),
    f("set", 3, n(3), set),
    f("unset", 2, n(2), unset),
    f("hasKey", 2, n(2), has_key),
    f("keys", 0, ANY, keys),
    f("values", 1, n(1), values),
    f("pluck", 1, ANY, pluck),
    f("pick", 1, ANY, pick),
    f("omit", 1, ANY, omit),
    f("dig", 3, ANY, dig),
    f("deepCopy", 1, n(1), deep_copy),
    f("mustDeepCopy", 1, n(1), deep_copy),
    // Sprig: reflection.
    f("typeOf", 1, n(1), type_of),
    f("typeIs", 2, n(2), type_is),
    f("kindOf", 1, n(1), kind_of),
    f("kindIs", 2, n(2), kind_is),
    f("deepEqual", 2, n(2), deep_equal_fn),
];

/// Sprig functions whose result changes between runs (randomness, the clock, fresh keys
/// or salts). Bitnami offers them; kseal must render the same Secret every time.
const NON_DETERMINISTIC: &[&str] = &[
    "randAlphaNum",
    "randAlpha",
    "randAscii",
    "randNumeric",
    "randSeededNumeric",
    "randBytes",
    "randInt",
    "uuidv4",
    "shuffle",
    "now",
    "ago",
    "date",
    "date_in_zone",
    "dateInZone",
    "date_modify",
    "dateModify",
    "must_date_modify",
    "mustDateModify",
    "htmlDate",
    "htmlDateInZone",
    "toDate",
    "mustToDate",
    "unixEpoch",
    "duration",
    "durationRound",
    "genPrivateKey",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "buildCustomCert",
    "bcrypt",
    "htpasswd",
    "encryptAES",
];

/// Deterministic Sprig functions kseal does not implement (yet).
const NOT_YET: &[&str] = &[
    "hello",
    "abbrevboth",
    "swapcase",
    "snakecase",
    "camelcase",
    "kebabcase",
    "wrap",
    "wrapWith",
    "toDecimal",
    "add1f",
    "addf",
    "subf",
    "divf",
    "mulf",
    "maxf",
    "minf",
    "ceil",
    "floor",
    "round",
    "merge",
    "mergeOverwrite",
    "mustMerge",
    "mustMergeOverwrite",
    "derivePassword",
    "decryptAES",
    "semver",
    "semverCompare",
    "regexMatch",
    "mustRegexMatch",
    "regexFindAll",
    "mustRegexFindAll",
    "regexFind",
    "mustRegexFind",
    "regexReplaceAll",
    "mustRegexReplaceAll",
    "regexReplaceAllLiteral",
    "mustRegexReplaceAllLiteral",
    "regexSplit",
    "mustRegexSplit",
    "regexQuoteMeta",
    "urlParse",
    "urlJoin",
    "typeIsLike",
    "call",
];

/// Helm's own functions, which Sprig (and so Bitnami) does not have.
const HELM_ONLY: &[&str] = &[
    "required", "tpl", "include", "toYaml", "fromYaml", "toToml", "lookup",
];

pub(crate) fn lookup(name: &str) -> Option<&'static FuncDef> {
    FUNCS.iter().find(|f| f.name == name)
}

/// Why `name` cannot be called.
pub(crate) fn undefined_message(name: &str) -> String {
    if NON_DETERMINISTIC.contains(&name) {
        format!(
            "function \"{name}\" is not supported by kseal: its result is not deterministic, \
             so the Secret would change on every reconcile"
        )
    } else if NOT_YET.contains(&name) {
        format!("function \"{name}\" is not supported by kseal yet")
    } else if HELM_ONLY.contains(&name) {
        format!("function \"{name}\" not defined (it is a Helm function, not part of Sprig)")
    } else {
        format!("function \"{name}\" not defined")
    }
}

#[cfg(test)]
pub(crate) fn all_names() -> impl Iterator<Item = &'static str> {
    FUNCS.iter().map(|f| f.name)
}

#[cfg(test)]
pub(crate) fn unsupported_names() -> impl Iterator<Item = &'static str> {
    NON_DETERMINISTIC.iter().chain(NOT_YET).copied()
}

// ---- argument helpers ----

fn arg(args: &[Value], i: usize) -> &Value {
    args.get(i).unwrap_or(&Value::Nil)
}

fn s(args: &[Value], i: usize) -> Result<&[u8], String> {
    match arg(args, i) {
        Value::Str(s) => Ok(s.as_bytes()),
        Value::Nil => Err(format!(
            "argument {}: invalid value; expected string",
            i + 1
        )),
        v => Err(format!(
            "argument {}: wrong type for value; expected string; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

fn int_arg(args: &[Value], i: usize) -> Result<i64, String> {
    match arg(args, i) {
        Value::Int(n) => Ok(*n),
        Value::Nil => Err(format!("argument {}: invalid value; expected int", i + 1)),
        v => Err(format!(
            "argument {}: wrong type for value; expected int; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

fn bool_arg(args: &[Value], i: usize) -> Result<bool, String> {
    match arg(args, i) {
        Value::Bool(b) => Ok(*b),
        Value::Nil => Err(format!("argument {}: invalid value; expected bool", i + 1)),
        v => Err(format!(
            "argument {}: wrong type for value; expected bool; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

fn list_arg<'a>(args: &'a [Value], i: usize, what: &str) -> Result<&'a [Value], String> {
    match arg(args, i) {
        Value::List(l) => Ok(l),
        v => Err(format!("cannot {what} on type {}", v.type_name())),
    }
}

/// A `map[string]interface{}` argument (Sprig's dict functions). As in Go, the template
/// data and `split`'s result, which are `map[string]string`, do not qualify.
fn map_arg(args: &[Value], i: usize) -> Result<&std::rc::Rc<super::value::MapCell>, String> {
    match arg(args, i) {
        Value::Map(m) if !m.strings_only() => Ok(m),
        v => Err(format!(
            "argument {}: wrong type for value; expected map[string]interface {{}}; got {}",
            i + 1,
            v.type_name()
        )),
    }
}

fn string(bytes: Vec<u8>) -> Result<Value, String> {
    if bytes.len() > MAX_VALUE {
        return Err(too_large());
    }
    Ok(Value::str(bytes))
}

fn checked_list(items: Vec<Value>) -> Result<Value, String> {
    if items.len() > MAX_LIST {
        return Err(format!("list longer than {MAX_LIST} items"));
    }
    Ok(Value::list(items))
}

/// Sprig's `strval`: strings as they are, nil as `<nil>`, anything else as `%v`.
fn strval(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::Str(s) => Ok(s.as_bytes().to_vec()),
        other => {
            let mut out = Vec::new();
            format::write_v(&mut out, other, 0)?;
            Ok(out)
        }
    }
}

/// Sprig's `strslice`: a list's non-nil items as strings; nil is empty; else one item.
fn strslice(v: &Value) -> Result<Vec<Vec<u8>>, String> {
    match v {
        Value::List(items) => items
            .iter()
            .filter(|i| !matches!(i, Value::Nil))
            .map(strval)
            .collect(),
        Value::Nil => Ok(Vec::new()),
        other => Ok(vec![strval(other)?]),
    }
}

/// cast's `ToInt64` (Sprig's arithmetic): numbers truncate, bools are 0/1, strings parse
/// (base prefixes allowed, "1.00" allowed), anything else is 0.
fn to_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        // Saturating in Rust; out-of-range conversions are unspecified in Go.
        Value::Float(f) => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::Str(s) => std::str::from_utf8(s.as_bytes())
            .ok()
            .and_then(|s| parse_int(trim_zero_decimal(s)))
            .unwrap_or(0),
        _ => 0,
    }
}

fn trim_zero_decimal(s: &str) -> &str {
    let mut found_zero = false;
    for (i, c) in s.char_indices().rev() {
        match c {
            '.' if found_zero => return &s[..i],
            '.' => return s,
            '0' => found_zero = true,
            _ => return s,
        }
    }
    s
}

// ---- Go builtins ----

fn not(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(!arg(a, 0).truth()))
}

fn len(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn index(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn print(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(format::sprint(a)?)
}

fn println(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(format::sprintln(a)?)
}

fn printf(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn html(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn js(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn urlquery(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn eq(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn ne(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(!equal(&a[0], &a[1])?))
}

fn lt(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_lt()))
}

fn le(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_le()))
}

fn gt(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_gt()))
}

fn ge(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(compare(&a[0], &a[1])?.is_ge()))
}

// ---- Sprig: strings ----

fn trim(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::trim_space(s(a, 0)?).to_vec())
}

fn trim_all(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::trim_cutset(s(a, 1)?, s(a, 0)?).to_vec())
}

fn trim_prefix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (p, v) = (s(a, 0)?, s(a, 1)?);
    string(v.strip_prefix(p).unwrap_or(v).to_vec())
}

fn trim_suffix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (p, v) = (s(a, 0)?, s(a, 1)?);
    string(v.strip_suffix(p).unwrap_or(v).to_vec())
}

fn upper(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::to_upper(s(a, 0)?))
}

fn lower(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(text::to_lower(s(a, 0)?))
}

/// Go's `strings.Title`: upper-cases each letter that follows a separator.
fn title(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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
fn untitle(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut prev_space = true;
    string(text::map_runes(s(a, 0)?, |c| {
        let out = if prev_space { text::lower_char(c) } else { c };
        prev_space = text::is_space(c);
        out
    }))
}

fn bounds() -> String {
    "runtime error: slice bounds out of range".into()
}

/// Sprig's `substr` (byte offsets; a negative start means 0, an end past the string means
/// its end).
fn substr(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn repeat(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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
fn nospace(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn trunc(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn abbrev(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (w, v) = (int_arg(a, 0)?, s(a, 1)?);
    if w < 4 || v.len() as i64 <= w {
        return string(v.to_vec());
    }
    // 4 <= w < len.
    let mut out = v[..(w - 3) as usize].to_vec();
    out.extend_from_slice(b"...");
    string(out)
}

fn contains(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(text::contains(s(a, 1)?, s(a, 0)?)))
}

fn has_prefix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 1)?.starts_with(s(a, 0)?)))
}

fn has_suffix(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 1)?.ends_with(s(a, 0)?)))
}

fn quote(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for (n, v) in a.iter().filter(|v| !matches!(v, Value::Nil)).enumerate() {
        if n > 0 {
            push(&mut out, b" ")?;
        }
        push(&mut out, &text::quote(&strval(v)?))?;
    }
    string(out)
}

fn squote(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn cat(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn indent(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    indent_bytes(int_arg(a, 0)?, s(a, 1)?, false)
}

fn nindent(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    indent_bytes(int_arg(a, 0)?, s(a, 1)?, true)
}

/// Go's `strings.Replace(src, old, new, -1)`.
fn replace(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn plural(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (one, many, count) = (s(a, 0)?, s(a, 1)?, int_arg(a, 2)?);
    string(if count == 1 { one } else { many }.to_vec())
}

fn to_string(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(strval(arg(a, 0))?)
}

fn to_strings(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn split(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let pieces = text::split(s(a, 1)?, s(a, 0)?, 0);
    pieces_map(ctx, pieces)
}

fn splitn(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (sep, count, orig) = (s(a, 0)?, int_arg(a, 1)?, s(a, 2)?);
    let pieces = match count {
        0 => Vec::new(),
        c if c < 0 => text::split(orig, sep, 0),
        c => text::split(orig, sep, usize::try_from(c).unwrap_or(usize::MAX)),
    };
    pieces_map(ctx, pieces)
}

fn split_list(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let pieces = text::split(s(a, 1)?, s(a, 0)?, 0);
    checked_list(pieces.into_iter().map(Value::str).collect())
}

fn join(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn sort_alpha(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut items = strslice(arg(a, 0))?;
    items.sort();
    checked_list(items.into_iter().map(Value::str).collect())
}

/// goutils' `Initials`, as Sprig uses it: byte by byte (like `nospace`), the first byte
/// of every run of non-space bytes, re-encoded as Latin-1.
fn initials(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn until_step(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let (start, stop, step) = (int_arg(a, 0)?, int_arg(a, 1)?, int_arg(a, 2)?);
    Ok(Value::list(
        step_range(start, stop, step)?
            .into_iter()
            .map(Value::Int)
            .collect(),
    ))
}

/// Sprig's `seq`, like the Unix command: `seq END`, `seq START END`, `seq START STEP END`.
fn seq(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn chunk(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn path_clean(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(clean_path(s(a, 0)?))
}

/// Go's `path.Base`: the last element, trailing slashes removed; "." for "", "/" for "/".
fn path_base(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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
fn path_dir(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let p = s(a, 0)?;
    let end = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    string(clean_path(&p[..end]))
}

/// Go's `path.Ext`: the suffix from the last dot of the last element.
fn path_ext(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn path_is_abs(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 0)?.first() == Some(&b'/')))
}

// ---- Sprig: encoding and hashes ----

fn b64enc(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(
        base64::engine::general_purpose::STANDARD
            .encode(s(a, 0)?)
            .into_bytes(),
    )
}

/// Sprig's `b64dec`: Go's `StdEncoding` (padding required, `\r` and `\n` ignored, loose
/// trailing bits); on bad input the *result* is Go's error text, as in Sprig.
fn b64dec(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = s(a, 0)?;
    let mut offsets = Vec::with_capacity(input.len());
    let mut cleaned = Vec::with_capacity(input.len());
    for (i, &b) in input.iter().enumerate() {
        if b != b'\r' && b != b'\n' {
            offsets.push(i);
            cleaned.push(b);
        }
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
    );
    match engine.decode(&cleaned) {
        Ok(bytes) => string(bytes),
        Err(e) => {
            let at = match e {
                // Well-formed padding followed by more data: Go reports the byte after it.
                base64::DecodeError::InvalidByte(i, b'=')
                    if i % 4 == 3 || (i % 4 == 2 && cleaned.get(i + 1) == Some(&b'=')) =>
                {
                    let after = i + if i % 4 == 3 { 1 } else { 2 };
                    offsets.get(after).copied().unwrap_or(input.len())
                }
                base64::DecodeError::InvalidByte(i, _)
                | base64::DecodeError::InvalidLastSymbol(i, _) => {
                    offsets.get(i).copied().unwrap_or(input.len())
                }
                base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
                    // Go reports the offset of the incomplete final quantum.
                    let whole = cleaned.len() / 4 * 4;
                    offsets.get(whole).copied().unwrap_or(input.len())
                }
            };
            string(format!("illegal base64 data at input byte {at}").into_bytes())
        }
    }
}

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// Go's `base32.StdEncoding` (RFC 4648, with padding).
fn b32enc(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let input = s(a, 0)?;
    let mut out = Vec::with_capacity(input.len().div_ceil(5) * 8);
    for block in input.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..block.len()].copy_from_slice(block);
        let bits = buf.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        let chars = (block.len() * 8).div_ceil(5);
        for k in 0..8 {
            if k < chars {
                out.push(BASE32[((bits >> (35 - 5 * k)) & 31) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    string(out)
}

/// Sprig's `b32dec`: like `b64dec`, Go's error text is the result on bad input. Follows
/// Go's decoder step by step, including where it reports errors (offsets count the input
/// without its line breaks, as Go's do).
fn b32dec(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let src: Vec<u8> = s(a, 0)?
        .iter()
        .copied()
        .filter(|&b| b != b'\r' && b != b'\n')
        .collect();
    let err = |at: usize| string(format!("illegal base32 data at input byte {at}").into_bytes());
    let olen = src.len();
    let mut out = Vec::with_capacity(olen / 8 * 5);
    let mut pos = 0;
    let mut end = false;
    while pos < olen && !end {
        let mut bits = 0u64;
        let mut dlen = 8;
        let mut j = 0;
        while j < 8 {
            if pos == olen {
                return err(olen - j);
            }
            let c = src[pos];
            pos += 1;
            let remaining = olen - pos;
            if c == b'=' && j >= 2 && remaining < 8 {
                if remaining + j < 7 {
                    return err(olen);
                }
                for k in 0..(7 - j) {
                    if k < remaining && src[pos + k] != b'=' {
                        return err(pos + k - 1);
                    }
                }
                dlen = j;
                end = true;
                if matches!(dlen, 1 | 3 | 6) {
                    return err(pos - 1);
                }
                break;
            }
            let Some(v) = BASE32.iter().position(|&x| x == c) else {
                return err(pos - 1);
            };
            bits |= (v as u64) << (35 - 5 * j);
            j += 1;
        }
        for k in 0..dlen * 5 / 8 {
            out.push(((bits >> (32 - 8 * k)) & 0xFF) as u8);
        }
    }
    string(out)
}

fn hex(bytes: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xF)]);
    }
    out
}

fn sha256sum(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(hex(&sha2::Sha256::digest(s(a, 0)?)))
}

fn sha1sum(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(hex(&sha1::Sha1::digest(s(a, 0)?)))
}

fn adler32sum(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    const MOD: u32 = 65521;
    let (mut x, mut y) = (1u32, 0u32);
    for &b in s(a, 0)? {
        x = (x + u32::from(b)) % MOD;
        y = (y + x) % MOD;
    }
    string(((y << 16) | x).to_string().into_bytes())
}

// ---- Sprig: conversions ----

/// Go's `strconv.Atoi` as Sprig wraps it: 0 on bad syntax, clamped on overflow.
fn atoi(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let v = std::str::from_utf8(s(a, 0)?).unwrap_or("");
    let (neg, digits) = match v.as_bytes().first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(Value::Int(0));
    }
    let mut n: i64 = 0;
    for b in digits.bytes() {
        let d = i64::from(b - b'0');
        n = match n.checked_mul(10).and_then(|n| {
            if neg {
                n.checked_sub(d)
            } else {
                n.checked_add(d)
            }
        }) {
            Some(n) => n,
            None => return Ok(Value::Int(if neg { i64::MIN } else { i64::MAX })),
        };
    }
    Ok(Value::Int(n))
}

fn int(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(to_i64(arg(a, 0))))
}

fn float64(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Float(match arg(a, 0) {
        Value::Int(i) => *i as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Str(v) => std::str::from_utf8(v.as_bytes())
            .ok()
            .and_then(parse_float)
            .unwrap_or(0.0),
        _ => 0.0,
    }))
}

fn encode_json(a: &[Value], style: Style, must: bool) -> Result<Value, String> {
    match json::encode(arg(a, 0), style) {
        Ok(bytes) => string(bytes),
        Err(EncodeError::Limit(m)) => Err(m),
        Err(EncodeError::Unsupported(m)) if must => Err(m),
        Err(EncodeError::Unsupported(_)) => Ok(Value::str(Vec::new())),
    }
}

const COMPACT: Style = Style {
    escape_html: true,
    pretty: false,
};
const PRETTY: Style = Style {
    escape_html: true,
    pretty: true,
};
const RAW: Style = Style {
    escape_html: false,
    pretty: false,
};

fn to_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, COMPACT, false)
}

fn must_to_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, COMPACT, true)
}

fn to_pretty_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, PRETTY, false)
}

fn must_to_pretty_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, PRETTY, true)
}

fn to_raw_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, RAW, false)
}

fn must_to_raw_json(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    encode_json(a, RAW, true)
}

fn from_json(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(json::decode(ctx, s(a, 0)?).unwrap_or(Value::Nil))
}

fn must_from_json(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    json::decode(ctx, s(a, 0)?)
}

// ---- Sprig: integer math (int64, wrapping like Go) ----

fn add(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(
        a.iter().fold(0i64, |acc, v| acc.wrapping_add(to_i64(v))),
    ))
}

fn add1(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(to_i64(arg(a, 0)).wrapping_add(1)))
}

fn sub(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(to_i64(&a[0]).wrapping_sub(to_i64(&a[1]))))
}

fn mul(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn div(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    divide(a, false)
}

fn modulo(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    divide(a, true)
}

fn max(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(a.iter().map(to_i64).max().unwrap_or(0)))
}

fn min(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Int(a.iter().map(to_i64).min().unwrap_or(0)))
}

fn until(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

// ---- Sprig: defaults ----

fn default(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    match a.get(1) {
        Some(given) if given.truth() => Ok(given.clone()),
        _ => Ok(a[0].clone()),
    }
}

fn empty(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(!arg(a, 0).truth()))
}

fn coalesce(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(a.iter().find(|v| v.truth()).cloned().unwrap_or(Value::Nil))
}

fn ternary(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(if bool_arg(a, 2)? {
        a[0].clone()
    } else {
        a[1].clone()
    })
}

fn all(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(a.iter().all(Value::truth)))
}

fn any(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(a.iter().any(Value::truth)))
}

fn compact(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "compact")?;
    Ok(Value::list(
        l.iter().filter(|v| v.truth()).cloned().collect(),
    ))
}

// ---- Sprig: lists ----

fn list(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    checked_list(a.to_vec())
}

fn append(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "append")?;
    let mut out = l.to_vec();
    out.push(a[1].clone());
    checked_list(out)
}

fn prepend(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "prepend")?;
    let mut out = Vec::with_capacity(l.len() + 1);
    out.push(a[1].clone());
    out.extend_from_slice(l);
    checked_list(out)
}

fn first(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(list_arg(a, 0, "find first")?
        .first()
        .cloned()
        .unwrap_or(Value::Nil))
}

fn last(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(list_arg(a, 0, "find last")?
        .last()
        .cloned()
        .unwrap_or(Value::Nil))
}

fn rest(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find rest")?;
    Ok(Value::list(l.get(1..).unwrap_or_default().to_vec()))
}

fn initial(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find initial")?;
    Ok(Value::list(
        l.get(..l.len().saturating_sub(1))
            .unwrap_or_default()
            .to_vec(),
    ))
}

fn reverse(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find reverse")?;
    Ok(Value::list(l.iter().rev().cloned().collect()))
}

fn uniq(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn has(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    match &a[1] {
        Value::Nil => Ok(Value::Bool(false)),
        Value::List(l) => Ok(Value::Bool(contains_value(ctx, l, &a[0])?)),
        other => Err(format!("cannot find has on type {}", other.type_name())),
    }
}

fn without(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let l = list_arg(a, 0, "find without")?;
    let mut out = Vec::new();
    for v in l {
        if !contains_value(ctx, &a[1..], v)? {
            out.push(v.clone());
        }
    }
    Ok(Value::list(out))
}

fn concat(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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
fn slice(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

// ---- Sprig: dicts ----

fn dict(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn get(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    Ok(m.get(s(a, 1)?).unwrap_or_else(|| Value::str(Vec::new())))
}

fn set(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    m.insert(s(a, 1)?.to_vec(), a[2].clone());
    Ok(a[0].clone())
}

fn unset(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let m = map_arg(a, 0)?;
    m.remove(s(a, 1)?);
    Ok(a[0].clone())
}

fn has_key(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(map_arg(a, 0)?.contains(s(a, 1)?)))
}

/// Sprig's `keys`. Go returns them in random map order; kseal sorts each map's keys so the
/// result is deterministic.
fn keys(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    let mut out = Vec::new();
    for i in 0..a.len() {
        for (k, _) in map_arg(a, i)?.snapshot() {
            out.push(Value::str(k));
        }
    }
    checked_list(out)
}

/// Sprig's `values`, in key order (Go: random order).
fn values(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    checked_list(
        map_arg(a, 0)?
            .snapshot()
            .into_iter()
            .map(|(_, v)| v)
            .collect(),
    )
}

fn pluck(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn pick(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    pick_or_omit(ctx, a, true)
}

fn omit(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    pick_or_omit(ctx, a, false)
}

/// Sprig's `dig KEY... DEFAULT DICT`.
fn dig(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
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

fn deep_copy(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    if matches!(a[0], Value::Nil) {
        return Err("cannot copy nil".into());
    }
    copy_value(ctx, &a[0], 0)
}

// ---- Sprig: reflection ----

fn kind_name(v: &Value) -> &'static str {
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

fn type_of(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(a[0].type_name().as_bytes().to_vec())
}

fn type_is(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 0)? == a[1].type_name().as_bytes()))
}

fn kind_of(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    string(kind_name(&a[0]).as_bytes().to_vec())
}

fn kind_is(_: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(s(a, 0)? == kind_name(&a[1]).as_bytes()))
}

fn deep_equal_fn(ctx: &mut Ctx, a: &[Value]) -> Result<Value, String> {
    Ok(Value::Bool(ctx.deep_equal(&a[0], &a[1])?))
}
