//! The function table: Go's template builtins and the deterministic part of Sprig v3.
//!
//! Functions take evaluated arguments; a returned `Err` becomes
//! `error calling NAME: MESSAGE`. Messages name types and positions, never argument
//! values, since those may be plaintext.
//!
//! The table and the names kseal refuses live here; the functions live in one submodule
//! per family, as Sprig groups them: [`builtins`] (Go's), [`strings`], [`paths`],
//! [`encoding`], [`convert`], [`math`], [`defaults`], [`lists`], [`dicts`] and [`reflect`],
//! with the argument helpers they share in [`args`].

mod args;
mod builtins;
mod convert;
mod defaults;
mod dicts;
mod encoding;
mod lists;
mod math;
mod paths;
mod reflect;
mod strings;

use super::ctx::Ctx;
use super::value::Value;
use builtins::{
    eq, ge, gt, html, index, js, le, len, lt, ne, not, print, printf, println, urlquery,
};
use convert::{
    atoi, float64, from_json, int, must_from_json, must_to_json, must_to_pretty_json,
    must_to_raw_json, to_json, to_pretty_json, to_raw_json,
};
use defaults::{all, any, coalesce, compact, default, empty, ternary};
use dicts::{deep_copy, dict, dig, get, has_key, keys, omit, pick, pluck, set, unset, values};
use encoding::{adler32sum, b32dec, b32enc, b64dec, b64enc, sha1sum, sha256sum};
use lists::{
    append, chunk, concat, first, has, initial, last, list, prepend, rest, reverse, slice, uniq,
    without,
};
use math::{add, add1, div, max, min, modulo, mul, seq, sub, until, until_step};
use paths::{path_base, path_clean, path_dir, path_ext, path_is_abs};
use reflect::{deep_equal_fn, kind_is, kind_of, type_is, type_of};
use strings::{
    abbrev, cat, contains, has_prefix, has_suffix, indent, initials, join, lower, nindent, nospace,
    plural, quote, repeat, replace, sort_alpha, split, split_list, splitn, squote, substr, title,
    to_string, to_strings, trim, trim_all, trim_prefix, trim_suffix, trunc, untitle, upper,
};

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
