//! Rendering of `spec.template.data`: a Go `text/template` engine with Sprig functions,
//! as Bitnami's controller runs it (reference §3.4).
//!
//! Each entry of `spec.template.data` is a template named after its key, executed with
//! dot (and `$`) bound to the map *decrypted item name → plaintext*. Its output becomes
//! `Secret.data[key]`, replacing a decrypted item of that name; a `null` entry removes
//! the item of that name instead, as in Bitnami.
//!
//! ```
//! use std::collections::BTreeMap;
//! use k8s_openapi::ByteString;
//! use kseal_api::template::Template;
//!
//! let items: BTreeMap<String, ByteString> =
//!     [("password".to_owned(), ByteString(b"s3cr3t<&>".to_vec()))].into();
//! let t = Template::parse("config.json", r#"{"password": {{ toJson .password }}}"#)?;
//! assert_eq!(t.render(&items)?, br#"{"password": "s3cr3t\u003c\u0026\u003e"}"#);
//! # Ok::<(), kseal_api::template::TemplateError>(())
//! ```
//!
//! # The language
//!
//! - Text and `{{ }}` actions, trim markers `{{- ` and ` -}}`, comments `{{/* */}}`.
//! - Dot, fields `.a.b` (map keys; a missing key gives `<no value>`), `$`, variables
//!   (`$x := …`, `$x = …`), pipelines `a | b`, parenthesised pipelines with fields,
//!   string (`"…"` with Go escapes, raw `` `…` ``), character, number, bool and `nil`
//!   literals.
//! - `if`/`else if`/`else`/`end`, `with`/`else with`/`else`, `range` over lists, maps
//!   (sorted keys) and integers, with `$i, $v :=`, `else`, `break` and `continue`.
//! - `define` (at the top level), `template` and `block`; a key's templates are its own,
//!   and its name (the key) can be called as well.
//!
//! # Functions
//!
//! Go's builtins `and`, `or` (both short-circuit), `not`, `len`, `index`, `print`,
//! `printf`, `println`, `html`, `js`, `urlquery`, `eq` (any number of operands), `ne`,
//! `lt`, `le`, `gt`, `ge`; Bitnami's map replaces Go's `slice` with Sprig's. `call` is not
//! supported.
//!
//! Sprig v3: `trim`, `trimAll`, `trimPrefix`, `trimSuffix`, `upper`, `lower`, `title`,
//! `untitle`, `substr`, `repeat`, `nospace`, `trunc`, `abbrev`, `contains`, `hasPrefix`,
//! `hasSuffix`, `quote`, `squote`, `cat`, `indent`, `nindent`, `replace`, `plural`,
//! `toString`, `toStrings`, `split`, `splitList`, `splitn`, `join`, `sortAlpha`,
//! `initials`, `seq`, `untilStep`, `chunk`, `base`, `dir`, `clean`, `ext`, `isAbs` (and
//! their `os` forms), `b64enc`, `b64dec`, `b32enc`, `b32dec`, `sha256sum`, `sha1sum`,
//! `adler32sum`, `atoi`, `int`, `int64`, `float64`, `toJson`, `toPrettyJson`,
//! `toRawJson`, `fromJson` (and their `must` forms), `add`, `add1`, `sub`, `mul`, `div`, `mod`, `max`, `biggest`, `min`, `until`,
//! `default`, `empty`, `coalesce`, `ternary`, `all`, `any`, `compact`, `fail`, `list`,
//! `tuple`, `append`/`push`, `prepend`, `first`, `last`, `rest`, `initial`, `reverse`,
//! `uniq`, `has`, `without`, `concat`, `slice`, `dict`, `get`, `set`, `unset`, `hasKey`,
//! `keys`, `values`, `pluck`, `pick`, `omit`, `dig`, `deepCopy`, `typeOf`, `typeIs`,
//! `kindOf`, `kindIs`, `deepEqual`.
//!
//! # Deliberate differences from Bitnami
//!
//! - **Non-deterministic functions are refused**: `randAlphaNum` and the other `rand*`,
//!   `uuidv4`, `shuffle`, `now` and the date functions, `genPrivateKey`, `genCA`,
//!   `genSelfSignedCert`, `genSignedCert`, `buildCustomCert`, `bcrypt`, `htpasswd`,
//!   `encryptAES`. Bitnami re-evaluates them on every reconcile, so the Secret changes
//!   after each controller restart; kseal renders the same bytes every time, so the
//!   controller can skip unchanged Secrets. Using one fails the template with an error
//!   naming the function. `env`, `expandenv` and `getHostByName` are not defined (as in
//!   Bitnami). Other Sprig functions not listed above (regex, semver, URL, float math,
//!   `merge`, case conversions such as `camelcase`, `wrap`, …) fail with "not supported by
//!   kseal yet".
//! - `keys` and `values` return map keys in sorted order (Go: random order).
//! - Integer parameters accept any integer (Go tells `int` from `int64`: `repeat (add 1 2)
//!   "x"` fails there), and `%T`/`typeOf` call every integer `int` and every list
//!   `[]interface {}`.
//! - `fail` shows its message only when it is a string literal in the template, since a
//!   computed message could hold plaintext.
//! - Error messages are kseal's own and never quote plaintext (Go's sometimes do).
//! - `%q` and `js` decide what is printable with an approximation of Go's Unicode tables;
//!   `printf` has no `%x` for floats and ignores `#` on `%g`; complex numbers are refused.
//! - `range` over an integer, `{{else with}}` and encoding/json's `\b`/`\f` escapes
//!   follow Go 1.22+/1.23+ (Bitnami's current Go).
//! - Templates render only once every `encryptedData` item has opened, so a failed
//!   decryption is reported alone (Bitnami renders anyway and lists both kinds of error).
//!
//! Strings are bytes, as in Go: items that are not UTF-8 pass through unchanged.
//! `api/tools/template-diff` compares this engine with Go and Sprig on about a thousand
//! templates in CI; its `known.json` lists the deliberate differences.
//!
//! # Limits
//!
//! Parsing and execution never panic. Nesting (control structures and parentheses) is
//! limited to [`MAX_DEPTH`] levels (template calls included, 300 levels of evaluation),
//! each rendered value and output to [`MAX_OUTPUT`] bytes, and execution to 10 million
//! steps (function calls pay for the size of their arguments) and 64 MiB of built values,
//! so a hostile template cannot exhaust the controller's stack, memory or time. Values
//! that may hold plaintext are zeroized when dropped (best effort: the output buffer may
//! have been reallocated on the way).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

mod ctx;
mod exec;
mod format;
mod funcs;
mod json;
mod lex;
mod number;
mod parse;
mod text;
mod value;

/// Deepest nesting of control structures and parenthesised pipelines (and of values
/// when printed or encoded).
pub const MAX_DEPTH: usize = 100;

/// Largest output of one template, and largest string a function may build (4 MiB;
/// a whole Secret is limited to 1 MiB by Kubernetes).
pub const MAX_OUTPUT: usize = 4 << 20;

pub(crate) const MAX_VALUE: usize = MAX_OUTPUT;
/// Longest list a function may build.
pub(crate) const MAX_LIST: usize = 1 << 20;
/// Units of work (actions, iterations, calls) per template.
pub(crate) const MAX_STEPS: u64 = 10_000_000;
/// Total bytes functions may produce per template.
pub(crate) const MAX_ALLOCATED: usize = 64 << 20;

/// A failure at a byte offset of the template source.
#[derive(Debug)]
pub(crate) struct Fail {
    pos: usize,
    msg: String,
}

impl Fail {
    pub(crate) fn at(pos: usize, msg: impl Into<String>) -> Self {
        Fail {
            pos,
            msg: msg.into(),
        }
    }
}

/// A template failed to parse or to execute.
///
/// The message names the problem and, where it helps, a function, variable or piece of
/// template source (which is not secret); it never quotes plaintext.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("template `{key}`: line {line}, column {column}: {message}")]
pub struct TemplateError {
    key: String,
    line: usize,
    column: usize,
    message: String,
    /// Whether it failed while executing (against the secret's values), not while parsing.
    executing: bool,
}

impl TemplateError {
    fn new(key: &str, source: &str, fail: Fail, executing: bool) -> Self {
        let pos = fail.pos.min(source.len());
        let before = source.as_bytes().get(..pos).unwrap_or_default();
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        TemplateError {
            key: key.to_owned(),
            line,
            column,
            message: fail.msg,
            executing,
        }
    }

    /// The `spec.template.data` key (the template's name).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The 1-based line of the template source where the problem is.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The 1-based column (in characters) where the problem is.
    pub fn column(&self) -> usize {
        self.column
    }

    /// What went wrong, without the key and position.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the template failed while executing against the secret's values (not while
    /// parsing): then whether it failed, where and how can depend on those values, and
    /// whoever can edit the template and read the outcome learns about them
    /// ([`crate::Error::depends_on_values`]).
    pub fn depends_on_values(&self) -> bool {
        self.executing
    }
}

/// A parsed template, ready to render against any data.
pub struct Template {
    key: String,
    source: String,
    tree: parse::Tree,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template").field("key", &self.key).finish()
    }
}

impl Template {
    /// Parses `source` as the template named `key`. Unknown, unsupported or
    /// non-deterministic functions and undefined variables are parse errors, as in Go.
    pub fn parse(key: &str, source: &str) -> Result<Self, TemplateError> {
        let tree = lex::lex(source)
            .and_then(|toks| parse::parse_named(&toks, source.len(), key))
            .map_err(|f| TemplateError::new(key, source, f, false))?;
        Ok(Template {
            key: key.to_owned(),
            source: source.to_owned(),
            tree,
        })
    }

    /// The template's name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Executes the template with `.` bound to `items` (item name → plaintext).
    pub fn render(&self, items: &BTreeMap<String, ByteString>) -> Result<Vec<u8>, TemplateError> {
        self.render_with(items.iter().map(|(k, v)| (k.as_str(), v.0.as_slice())))
    }

    /// [`Template::render`] over any (name, plaintext) pairs.
    pub fn render_with<'i>(
        &self,
        items: impl IntoIterator<Item = (&'i str, &'i [u8])>,
    ) -> Result<Vec<u8>, TemplateError> {
        exec::execute(&self.tree, &self.key, items)
            .map(|mut out| std::mem::take(&mut *out))
            .map_err(|f| TemplateError::new(&self.key, &self.source, f, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str) -> Result<Vec<u8>, TemplateError> {
        Template::parse("k", src)?.render_with([("a", &b"A"[..])])
    }

    #[test]
    fn every_listed_function_parses_and_none_is_also_refused() {
        for name in funcs::all_names() {
            assert!(
                Template::parse("k", &format!("{{{{ {name} }}}}")).is_ok(),
                "{name}"
            );
        }
        for name in funcs::unsupported_names() {
            assert!(
                funcs::lookup(name).is_none(),
                "{name} is both supported and refused"
            );
            let err = Template::parse("k", &format!("{{{{ {name} }}}}")).unwrap_err();
            assert!(err.message().contains("not supported by kseal"), "{err}");
        }
    }

    #[test]
    fn functions_with_too_few_arguments_report_arity_instead_of_panicking() {
        for name in funcs::all_names() {
            let err = render(&format!("{{{{ {name} }}}}"));
            if let Err(e) = err {
                assert!(!e.message().is_empty());
            }
            for args in ["1", "1 2", "\"x\" \"y\" \"z\"", "(list) (dict) nil"] {
                let _ = render(&format!("{{{{ {name} {args} }}}}"));
            }
        }
    }

    #[test]
    fn parsed_templates_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Template>();
        send_sync::<TemplateError>();
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let err = render("é{{ nope }}").unwrap_err();
        assert_eq!((err.line(), err.column()), (1, 5));
    }
}
