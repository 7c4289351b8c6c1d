//! Error text that may quote Secret data, made safe to show.
//!
//! The API server validates a Secret's data and says why it refused it: a
//! `kubernetes.io/dockerconfigjson` value that is not JSON gets
//! `data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": invalid character 'H'
//! looking for beginning of value` (Kubernetes 1.20, and later versions the same), and the
//! `'H'` is the plaintext's first byte. Such text reaches SealedSecret status, Events, logs and
//! HTTP answers through [`crate::error_chain`], so [`scrub`] removes from it every place where
//! a Kubernetes, Go or Rust error quotes a value:
//!
//! - apimachinery's field errors (`<path>: Invalid value: <value>: <detail>`, likewise
//!   `Unsupported value`, `Duplicate value`, `Not found`, `Too many`, `Too few`, `Too short`):
//!   the value goes, the path (with item keys, which are not secret), the error type and the
//!   detail stay; the API server's own placeholders `"<secret contents redacted>"` and
//!   `"<value omitted>"` are kept;
//! - Go `encoding/json` syntax errors (`invalid character 'x' …`, the byte goes; in a literal,
//!   `in literal true (expecting 'r')` tells the byte before it, so it becomes `in literal`),
//!   `json: cannot unmarshal number 123 …` (the number goes) and quoted values after
//!   `trying to unmarshal` and `parsing` (Go's `strconv`);
//! - json-iterator's echo of the request body (`…, error found in #10 byte of ...|…|...,
//!   bigger context ...|…|...`) and the byte after `but found`;
//! - serde's `invalid type: string "…"`, `invalid value: integer `…``, `unknown variant `…``.
//!
//! Everything else is kept: object names, reasons, codes, field paths. When a value's end
//! cannot be told, everything from it to the end of the line goes.
//!
//! # Admission denials
//!
//! An admission webhook's or a `ValidatingAdmissionPolicy`'s denial carries the policy's own
//! message (`admission webhook "NAME" denied the request: MESSAGE`, `ValidatingAdmissionPolicy
//! 'P' with binding 'B' denied request: MESSAGE`), free text that policies often build from
//! the object (Kyverno's and Gatekeeper's messages interpolate `request.object.data…`): a
//! denied Secret write could quote the plaintext, whatever the status code (403, or a 5xx a
//! webhook chose). So everything after the denial's marker, to the end of the text, is
//! replaced by [`DENIAL_WITHHELD`]; the webhook's or policy's name and the status code stay
//! (attack review of issue 40, round 2).
//!
//! # Validation errors on data
//!
//! Removing the quoted bytes is not enough for the Secret's data: *which* error the API server
//! found says something about the value too. A `spec.template.data` template can branch on a
//! value (`{{ if … (.password | trunc 1) … }}`) and write a `.dockerconfigjson` that is empty,
//! an array, a number or truncated JSON, and Go's `unexpected end of JSON input`,
//! `cannot unmarshal array …`, `cannot unmarshal number …` tell the branches apart: several
//! bits per edit instead of one (failed or not). So, before the rest, every field error on a
//! path under `data` (`data[KEY]: Invalid value: …`, `data: Too long: …`, `data[KEY]: Required
//! value`, …) is replaced whole, path included, by [`DATA_WITHHELD`], and consecutive ones are
//! merged into one: every refusal of a Secret's data reads the same. Field errors on other
//! paths (`type`, `metadata.…`) and other errors keep their text (with values scrubbed).

/// What follows a marker, and how it is replaced.
#[derive(Clone, Copy)]
enum Value {
    /// An apimachinery field error's bad value: a Go `%q` string, JSON, or a bare token.
    Field,
    /// A Go `quoteChar` byte (`'x'`, `'\''`, `'\x00'`) or a double-quoted one.
    Char,
    /// An optional bare number (`json: cannot unmarshal number 123 into …`).
    Number,
    /// A double-quoted value, only if one follows at once.
    Quoted,
    /// serde's `Unexpected`: a kind, then a `"…"` or `` `…` `` value.
    Serde,
    /// One character (json-iterator's `but found X`).
    OneChar,
    /// json-iterator's body echo, to the end of its `bigger context ...|…|...`.
    BodyEcho,
}

const MARKERS: &[(&str, Value)] = &[
    ("Invalid value: ", Value::Field),
    ("Unsupported value: ", Value::Field),
    ("Duplicate value: ", Value::Field),
    ("Not found: ", Value::Field),
    ("Too many: ", Value::Field),
    ("Too few: ", Value::Field),
    ("Too short: ", Value::Field),
    ("invalid character ", Value::Char),
    ("json: cannot unmarshal number ", Value::Number),
    ("trying to unmarshal ", Value::Quoted),
    ("parsing ", Value::Quoted),
    ("invalid type: ", Value::Serde),
    ("invalid value: ", Value::Serde),
    ("unknown variant ", Value::Serde),
    ("but found ", Value::OneChar),
    (", error found in #", Value::BodyEcho),
];

/// Placeholders the API server writes instead of a value: nothing of the data in them.
const SAFE_VALUES: &[&str] = &["\"<secret contents redacted>\"", "\"<value omitted>\""];

/// Written where a value was.
const GONE: &str = "…";

/// Written instead of every field error under `data` (see the module docs).
pub(crate) const DATA_WITHHELD: &str = "the API server refused the Secret's data (validation failed; details withheld: they could reveal values)";

/// apimachinery's `field.ErrorType` strings.
const FIELD_ERROR_TYPES: &[&str] = &[
    "Invalid value",
    "Required value",
    "Unsupported value",
    "Duplicate value",
    "Not found",
    "Too many",
    "Too few",
    "Too short",
    "Too long",
    "Forbidden",
    "Internal error",
];

/// Written instead of an admission denial's message (see the module docs).
pub(crate) const DENIAL_WITHHELD: &str =
    "(the policy's message is withheld: it may quote the object's data)";

/// `text` with an admission denial's message replaced by [`DENIAL_WITHHELD`], every field
/// error under `data` by [`DATA_WITHHELD`] and every other value quoted from object data by
/// `…` (see the module docs).
pub(crate) fn scrub(text: &str) -> String {
    scrub_values(&withhold_data_errors(&withhold_denials(text)))
}

/// `text` with everything after the first admission denial's marker replaced by
/// [`DENIAL_WITHHELD`], keeping the status code (` (403 Forbidden)`, ` (500 )`) that
/// [`crate::error_chain`] appends at the end.
fn withhold_denials(text: &str) -> String {
    // Where a denial's message starts: after a marker (the ones that sort a 403 as a denial,
    // `crate::cluster::fault::DENIAL_MARKERS`) and its `: `.
    let Some(at) = (crate::cluster::fault::DENIAL_MARKERS.iter())
        .flat_map(|m| text.match_indices(m).map(|(i, _)| i + m.len()))
        .filter(|&end| text[end..].starts_with(": "))
        .map(|end| end + 2)
        .min()
    else {
        return text.to_owned();
    };
    let mut out = String::with_capacity(at + DENIAL_WITHHELD.len() + 32);
    out.push_str(&text[..at]);
    out.push_str(DENIAL_WITHHELD);
    out.push_str(status_code_suffix(text));
    out
}

/// The ` (NNN reason)` or ` (NNN )` at the very end of `text`, or `""`.
fn status_code_suffix(text: &str) -> &str {
    let Some(open) = text.rfind(" (") else {
        return "";
    };
    let suffix = &text[open..];
    let Some(inner) = suffix[2..].strip_suffix(')') else {
        return "";
    };
    let (code, reason) = inner.split_once(' ').unwrap_or((inner, ""));
    let plain = code.len() == 3
        && code.bytes().all(|b| b.is_ascii_digit())
        && reason.bytes().all(|b| b.is_ascii_alphanumeric());
    if plain { suffix } else { "" }
}

/// Whether a field error (`path: Type…`) starts at `at` of `line`; `Some(true)` when its path
/// is under `data`.
fn field_error_at(line: &str, at: usize) -> Option<bool> {
    let rest = &line[at..];
    let path_end = rest.find(": ")?;
    let path = &rest[..path_end];
    let first = path.chars().next()?;
    // A path has no space outside its `[key]` subscripts.
    let head = path.split('[').next().unwrap_or(path);
    if !first.is_ascii_alphabetic() || head.contains(' ') {
        return None;
    }
    let after = &rest[path_end + 2..];
    FIELD_ERROR_TYPES
        .iter()
        .any(|t| after.starts_with(t))
        .then(|| path == "data" || path.starts_with("data[") || path.starts_with("data."))
}

/// Where a field error may start: the line's start, or after `: `, `* `, `[` or `, `.
fn is_error_start(line: &str, at: usize) -> bool {
    let before = &line[..at];
    before.is_empty()
        || before.ends_with(": ")
        || before.ends_with("* ")
        || before.ends_with('[')
        || before.ends_with(", ")
}

/// The `(422 Invalid)` that [`crate::error_chain`] appends to an API error, at the end of
/// `line` (without its newline): its length, or 0.
fn status_suffix_len(line: &str) -> usize {
    let Some(open) = line.rfind(" (") else {
        return 0;
    };
    let inner = &line[open + 2..];
    let Some(inner) = inner.strip_suffix(')') else {
        return 0;
    };
    let (code, reason) = inner.split_once(' ').unwrap_or((inner, ""));
    if code.len() == 3
        && code.bytes().all(|b| b.is_ascii_digit())
        && !reason.is_empty()
        && reason.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        line.len() - open
    } else {
        0
    }
}

/// Every field error under `data` replaced by [`DATA_WITHHELD`], consecutive ones merged.
fn withhold_data_errors(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Where the output stood after the latest DATA_WITHHELD.
    let mut withheld_at: Option<usize> = None;
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        // A field error runs to the next `, <field error>` of an `[a, b]` list, or to the end
        // of the line, less the status suffix and the list's closing `]`.
        let end_of_line = body.len() - status_suffix_len(body);
        let in_list = |at: usize| body[..at].contains(" is invalid: [");
        let mut i = 0;
        while i < end_of_line {
            if is_error_start(body, i) && field_error_at(body, i) == Some(true) {
                let mut end = end_of_line;
                let mut k = i;
                while let Some(comma) = body[k..end_of_line].find(", ") {
                    let next = k + comma + 2;
                    if field_error_at(body, next).is_some() {
                        end = k + comma;
                        break;
                    }
                    k = next;
                }
                if end == end_of_line && in_list(i) && body[..end].ends_with(']') {
                    end -= 1;
                }
                // Merged with the previous one when only a list separator lies between them:
                // how many there are could depend on the values too.
                match withheld_at {
                    Some(at) if matches!(&out[at..], ", " | "\n* " | "\n") => out.truncate(at),
                    _ => out.push_str(DATA_WITHHELD),
                }
                withheld_at = Some(out.len());
                i = end;
                continue;
            }
            let Some(c) = body[i..].chars().next() else {
                break;
            };
            out.push(c);
            i += c.len_utf8();
        }
        out.push_str(&body[i..]);
        out.push_str(newline);
    }
    out
}

/// `text` with every value quoted from object data replaced by `…` (the markers above).
fn scrub_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'outer: while i < text.len() {
        let rest = &text[i..];
        for &(marker, kind) in MARKERS {
            if let Some(after) = rest.strip_prefix(marker) {
                let start = i + marker.len();
                if matches!(kind, Value::BodyEcho) {
                    i = start + body_echo_len(after);
                    continue 'outer;
                }
                out.push_str(marker);
                i = start + replace_value(kind, after, &mut out);
                continue 'outer;
            }
        }
        let Some(c) = rest.chars().next() else { break };
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Writes what replaces the value at the start of `s` and returns the bytes it consumed.
fn replace_value(kind: Value, s: &str, out: &mut String) -> usize {
    match kind {
        Value::Field => {
            if let Some(safe) = SAFE_VALUES.iter().find(|v| s.starts_with(**v)) {
                out.push_str(safe);
                return safe.len();
            }
            match s.chars().next() {
                Some('"') => {
                    out.push('"');
                    out.push_str(GONE);
                    out.push('"');
                    quoted_len(s, '"')
                }
                Some(_) => {
                    out.push_str(GONE);
                    value_len(s)
                }
                None => 0,
            }
        }
        Value::Char => match s.chars().next() {
            Some(q @ ('\'' | '"')) => {
                out.push_str(GONE);
                let len = quoted_len(s, q);
                // `in literal true (expecting 'r')` tells the byte before the bad one.
                let tail = &s[len..];
                match tail
                    .strip_prefix(" in literal ")
                    .and_then(|t| t.find(')').map(|end| end + 1))
                {
                    Some(end) => {
                        out.push_str(" in literal");
                        len + " in literal ".len() + end
                    }
                    None => len,
                }
            }
            _ => 0,
        },
        Value::Number => {
            let len = s
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')))
                .unwrap_or(s.len());
            if len == 0 || s[..len].starts_with("into") {
                return 0;
            }
            // The space after the number is kept by the text that follows.
            out.push_str(GONE);
            len
        }
        Value::Quoted => {
            if !s.starts_with('"') {
                return 0;
            }
            out.push('"');
            out.push_str(GONE);
            out.push('"');
            quoted_len(s, '"')
        }
        Value::Serde => {
            // `string "…"`, `integer `5``, `floating point `1.5``, `` `variant` ``.
            let window = s.char_indices().take_while(|&(_, c)| c != '\n').take(24);
            let mut open = None;
            for (at, c) in window {
                if c == '"' || c == '`' {
                    open = Some((at, c));
                    break;
                }
                if !(c.is_ascii_alphabetic() || c == ' ') {
                    break;
                }
            }
            let Some((at, q)) = open else { return 0 };
            out.push_str(&s[..at]);
            out.push(q);
            out.push_str(GONE);
            out.push(q);
            at + quoted_len(&s[at..], q)
        }
        Value::OneChar => match s.chars().next() {
            Some(c) if c != '\n' => {
                out.push_str(GONE);
                c.len_utf8()
            }
            _ => 0,
        },
        Value::BodyEcho => 0,
    }
}

/// The length of a string quoted with `q` at the start of `s` (backslash escapes), or of the
/// rest of the line when it does not close.
fn quoted_len(s: &str, q: char) -> usize {
    let mut escaped = false;
    for (at, c) in s.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == q => return at + c.len_utf8(),
            _ => {}
        }
    }
    line_len(s)
}

/// The length of an unquoted value at the start of `s`: JSON, a number or bool, Go's `%#v`
/// (`[]string{"a", "b"}`). It ends at a `: ` or `, ` outside brackets and quotes, at a closing
/// bracket it did not open (the `]` of apimachinery's `[err1, err2]`), or at the line's end
/// (also when a bracket never closes).
fn value_len(s: &str) -> usize {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = s.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\n' {
            return at;
        }
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return at,
            },
            ':' | ',' if depth == 0 && chars.peek().is_some_and(|&(_, n)| n == ' ') => {
                return at;
            }
            _ => {}
        }
    }
    s.len()
}

fn line_len(s: &str) -> usize {
    s.find('\n').unwrap_or(s.len())
}

/// json-iterator's `error found in #10 byte of ...|<body>|..., bigger context ...|<body>|...`:
/// all of it goes (the marker's leading `, ` included).
fn body_echo_len(s: &str) -> usize {
    const BIGGER: &str = "bigger context ...|";
    const END: &str = "|...";
    let Some(b) = s.find(BIGGER) else {
        return s.len();
    };
    let from = b + BIGGER.len();
    match s[from..].find(END) {
        Some(e) => from + e + END.len(),
        None => s.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::{DATA_WITHHELD, DENIAL_WITHHELD, scrub, scrub_values};

    /// Real messages, with the plaintext that produced them: (message, scrubbed, secret
    /// fragments that must not survive). From the reference kube-apiserver 1.20.2
    /// (`tests/refapi`) unless marked otherwise.
    const TABLE: &[(&str, &str, &[&str])] = &[
        // ValidateSecret, kubernetes.io/dockerconfigjson, value `Hunter2secret`.
        (
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'H' looking for beginning of value",
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … looking for beginning of value",
            &["'H'"],
        ),
        // Value `{"a" x}`.
        (
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'x' after object key",
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … after object key",
            &["'x'"],
        ),
        // Value `{"a":1}Zq`.
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'Z' after top-level value",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … after top-level value",
            &["'Z'"],
        ),
        // A `\u` escape cut short by a space.
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character ' ' in \\u hexadecimal character escape",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … in \\u hexadecimal character escape",
            &["' '"],
        ),
        // Go's quoteChar for a quote, a backslash, a control byte, a byte >= 0x80.
        (
            "invalid character '\\'' looking for beginning of value",
            "invalid character … looking for beginning of value",
            &["\\'"],
        ),
        (
            "invalid character '\"' after object key:value pair",
            "invalid character … after object key:value pair",
            &["'\"'"],
        ),
        (
            "invalid character '\\\\' in string escape code",
            "invalid character … in string escape code",
            &["\\\\"],
        ),
        (
            "invalid character '\\x00' in string literal",
            "invalid character … in string literal",
            &["x00"],
        ),
        (
            "invalid character 'é' looking for beginning of value",
            "invalid character … looking for beginning of value",
            &["é"],
        ),
        // Value `trustno1` (encoding/json: the literal's first byte and the one expected).
        (
            "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": invalid character 'u' in literal true (expecting 'r')",
            "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": invalid character … in literal",
            &["'u'", "true", "'r'"],
        ),
        // encoding/json/v2 (jsontext) spells it this way.
        (
            "jsontext: invalid character 'H' at start of value",
            "jsontext: invalid character … at start of value",
            &["'H'"],
        ),
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": unexpected end of JSON input",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": unexpected end of JSON input",
            &[],
        ),
        (
            "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            &[],
        ),
        // encoding/json's UnmarshalTypeError for a number out of range (Go source).
        (
            "json: cannot unmarshal number 99999999999999999999 into Go struct field Auth.port of type int",
            "json: cannot unmarshal number … into Go struct field Auth.port of type int",
            &["9999"],
        ),
        (
            "json: invalid use of ,string struct tag, trying to unmarshal \"s3cret\" into int",
            "json: invalid use of ,string struct tag, trying to unmarshal \"…\" into int",
            &["s3cret"],
        ),
        (
            "strconv.ParseInt: parsing \"12x4\": invalid syntax",
            "strconv.ParseInt: parsing \"…\": invalid syntax",
            &["12x4"],
        ),
        // Required and Forbidden carry no value; keys are kept.
        (
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Required value",
            "Secret \"s\" is invalid: data[.dockerconfigjson]: Required value",
            &[],
        ),
        (
            "The Secret \"s\" is invalid: \n* data[%s][username]: Required value\n* data[%s][password]: Required value",
            "The Secret \"s\" is invalid: \n* data[%s][username]: Required value\n* data[%s][password]: Required value",
            &[],
        ),
        (
            "Secret \"ty\" is invalid: data: Forbidden: field is immutable when `immutable` is set",
            "Secret \"ty\" is invalid: data: Forbidden: field is immutable when `immutable` is set",
            &[],
        ),
        // field.Invalid with a string, several errors, newline-separated.
        (
            "Secret \"ty\" is invalid: \n* type: Invalid value: \"kubernetes.io/tls\": field is immutable\n* data[tls.crt]: Required value\n* data[tls.key]: Required value",
            "Secret \"ty\" is invalid: \n* type: Invalid value: \"…\": field is immutable\n* data[tls.crt]: Required value\n* data[tls.key]: Required value",
            &["kubernetes.io/tls"],
        ),
        (
            "Secret \"s\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            "Secret \"s\" is invalid: data[a b]: Invalid value: \"…\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            &[],
        ),
        // field.Invalid with a number, a bool, JSON (apimachinery ErrorBody: %v, %q, JSON).
        (
            "spec.replicas: Invalid value: 12: must be greater than or equal to 0",
            "spec.replicas: Invalid value: …: must be greater than or equal to 0",
            &["12"],
        ),
        (
            "spec.x: Invalid value: true",
            "spec.x: Invalid value: …",
            &["true"],
        ),
        (
            "data[k]: Invalid value: {\"user\":\"bob\",\"pass\":\"p: w}\"}: bad, really",
            "data[k]: Invalid value: …: bad, really",
            &["bob", "p: w"],
        ),
        (
            "data[k]: Invalid value: \"p\\\"ss\\nword\": bad",
            "data[k]: Invalid value: \"…\": bad",
            &["ss", "word"],
        ),
        (
            "type: Unsupported value: \"hunter2\": supported values: \"Opaque\", \"kubernetes.io/tls\"",
            "type: Unsupported value: \"…\": supported values: \"Opaque\", \"kubernetes.io/tls\"",
            &["hunter2"],
        ),
        (
            "data[a]: Duplicate value: \"hunter2\"",
            "data[a]: Duplicate value: \"…\"",
            &["hunter2"],
        ),
        (
            "data: Too long: must have at most 1048576 bytes",
            "data: Too long: must have at most 1048576 bytes",
            &[],
        ),
        (
            "data[a]: Too long: \"<value omitted>\": may not be more than 1048576 bytes",
            "data[a]: Too long: \"<value omitted>\": may not be more than 1048576 bytes",
            &[],
        ),
        // A value whose quote never closes: the rest of the line goes.
        (
            "data[k]: Invalid value: \"hunter2 and more\n* next: Required value",
            "data[k]: Invalid value: \"…\"\n* next: Required value",
            &["hunter2"],
        ),
        // json-iterator (1.20's decoder) echoes the request body.
        (
            "Secret in version \"v1\" cannot be handled as a Secret: v1.Secret.ObjectMeta: v1.ObjectMeta.TypeMeta: Kind: Data: decode base64: illegal base64 data at input byte 8, error found in #10 byte of ...|!c2VjcmV0\"},\"kind\":\"|..., bigger context ...|apiVersion\":\"v1\",\"data\":{\"a\":\"c2VjcmV0!!!c2VjcmV0\"},\"kind\":\"Secret\",\"metadata\":{\"name\":\"b64\",\"namesp|...",
            "Secret in version \"v1\" cannot be handled as a Secret: v1.Secret.ObjectMeta: v1.ObjectMeta.TypeMeta: Kind: Data: decode base64: illegal base64 data at input byte 8",
            &["c2VjcmV0"],
        ),
        (
            "Secret in version \"v1\" cannot be handled as a Secret: v1.Secret.StringData: ReadString: expects \" or n, but found 1, error found in #10 byte of ...|ta\":{\"a\":123456}}\n|..., bigger context ...|e\":\"sd\",\"namespace\":\"default\"},\"stringData\":{\"a\":123456}}\n|...",
            "Secret in version \"v1\" cannot be handled as a Secret: v1.Secret.StringData: ReadString: expects \" or n, but found …",
            &["123456"],
        ),
        // serde (a response that does not parse).
        (
            "Error deserializing response: invalid type: string \"hunter2\", expected a sequence at line 1 column 9",
            "Error deserializing response: invalid type: string \"…\", expected a sequence at line 1 column 9",
            &["hunter2"],
        ),
        (
            "invalid value: integer `31337`, expected u8",
            "invalid value: integer `…`, expected u8",
            &["31337"],
        ),
        (
            "unknown variant `hunter2`, expected one of `a`, `b`",
            "unknown variant `…`, expected one of `a`, `b`",
            &["hunter2"],
        ),
        // Bytes as Go's quoteChar shows them, from the reference apiserver: `é` (its first
        // byte), 0x80, a literal cut short at the end, a bad escape.
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'Ã' looking for beginning of value",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … looking for beginning of value",
            &["Ã"],
        ),
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character '\\u0080' looking for beginning of value",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … looking for beginning of value",
            &["u0080"],
        ),
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character ' ' in literal true (expecting 'e')",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … in literal",
            &["true", "'e'"],
        ),
        (
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'q' in string escape code",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … in string escape code",
            &["'q'"],
        ),
        // The API server's own message for several errors (kubectl shows them as a list).
        (
            "Secret \"ty\" is invalid: [type: Invalid value: \"kubernetes.io/tls\": field is immutable, data[tls.crt]: Required value, data[tls.key]: Required value]",
            "Secret \"ty\" is invalid: [type: Invalid value: \"…\": field is immutable, data[tls.crt]: Required value, data[tls.key]: Required value]",
            &["kubernetes.io/tls"],
        ),
        (
            "Foo \"f\" is invalid: [spec.a: Invalid value: 31337, spec.b: Invalid value: []string{\"s3cret\", \"t0ken\"}: bad, spec.c: Invalid value: 4242]",
            "Foo \"f\" is invalid: [spec.a: Invalid value: …, spec.b: Invalid value: …: bad, spec.c: Invalid value: …]",
            &["31337", "s3cret", "t0ken", "4242"],
        ),
        // Nothing to scrub: kept as it is.
        (
            "secrets \"db\" is forbidden: User \"system:serviceaccount:kseal:kseal\" cannot update resource \"secrets\" in API group \"\" in the namespace \"prod\" (403 Forbidden)",
            "secrets \"db\" is forbidden: User \"system:serviceaccount:kseal:kseal\" cannot update resource \"secrets\" in API group \"\" in the namespace \"prod\" (403 Forbidden)",
            &[],
        ),
        (
            "Operation cannot be fulfilled on secrets \"db\": the object has been modified; please apply your changes to the latest version and try again",
            "Operation cannot be fulfilled on secrets \"db\": the object has been modified; please apply your changes to the latest version and try again",
            &[],
        ),
        (
            "failed to write secret: Secret \"db\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'H' looking for beginning of value (422 Invalid)",
            "failed to write secret: Secret \"db\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … looking for beginning of value (422 Invalid)",
            &["'H'"],
        ),
    ];

    #[test]
    fn real_api_server_messages_lose_every_quoted_value() {
        for (message, want, secrets) in TABLE {
            // The value scrubber alone (it also covers paths outside `data`), then the whole.
            let values = scrub_values(message);
            assert_eq!(&values, want, "scrubbing {message:?}");
            let got = scrub(message);
            for secret in *secrets {
                assert!(message.contains(secret), "{secret:?} is not in {message:?}");
                assert!(
                    !values.contains(secret),
                    "{secret:?} survived in {values:?}"
                );
                assert!(!got.contains(secret), "{secret:?} survived in {got:?}");
            }
        }
    }

    #[test]
    fn an_admission_denials_message_is_withheld_whatever_its_code() {
        let webhook = "failed to write secret: admission webhook \"echo.kseal.test\" denied the request: policy: weak secret value (pw=hunter2) b64 {\"pw\": \"aHVudGVyMg==\"} (500 )";
        let out = scrub(webhook);
        assert_eq!(
            out,
            format!(
                "failed to write secret: admission webhook \"echo.kseal.test\" denied the request: {DENIAL_WITHHELD} (500 )"
            )
        );
        // Kyverno's form runs over several lines; the status code ends the last one.
        let kyverno = "failed to write secret: admission webhook \"validate.kyverno.svc-fail\" denied the request: \n\nresource Secret/app/db was blocked due to the following policies\n\nno-weak:\n  check: 'password hunter2 is too weak' (403 Forbidden)";
        let out = scrub(kyverno);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("validate.kyverno.svc-fail"), "{out}");
        assert!(
            out.ends_with(&format!("{DENIAL_WITHHELD} (403 Forbidden)")),
            "{out}"
        );
        let policy = "failed to write secret: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: value hunter2 (422 Invalid)";
        let out = scrub(policy);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("'p' with binding 'b'"), "{out}");
        // A marker without its `: ` (here in the webhook's name) is not where the message
        // starts; the next one is.
        let named = "admission webhook \"denied the request.example.com\" denied the request: pw hunter2 (403 Forbidden)";
        assert_eq!(
            scrub(named),
            format!(
                "admission webhook \"denied the request.example.com\" denied the request: {DENIAL_WITHHELD} (403 Forbidden)"
            )
        );
        // A message that ends without a status keeps nothing after the marker.
        assert_eq!(
            scrub("denied the request: hunter2 (maybe"),
            format!("denied the request: {DENIAL_WITHHELD}")
        );
        // Scrubbing again changes nothing more.
        let once = scrub(webhook);
        assert_eq!(scrub(&once), once);
    }

    #[test]
    fn scrubbing_twice_changes_nothing_more() {
        for (message, _, _) in TABLE {
            let once = scrub(message);
            assert_eq!(scrub(&once), once, "{message:?}");
            let once = scrub_values(message);
            assert_eq!(scrub_values(&once), once, "{message:?}");
        }
    }

    /// What a template branching on a value can make the API server say about one
    /// `kubernetes.io/dockerconfigjson` (or `dockercfg`) item: Go's `encoding/json` errors for
    /// an empty value, a number, an array, a bool, a string, truncated JSON, trailing bytes.
    const GO_JSON_DETAILS: &[&str] = &[
        "unexpected end of JSON input",
        "json: cannot unmarshal number into Go value of type map[string]interface {}",
        "json: cannot unmarshal number 42 into Go value of type credentialprovider.DockerConfigJSON",
        "json: cannot unmarshal array into Go value of type map[string]interface {}",
        "json: cannot unmarshal bool into Go value of type map[string]interface {}",
        "json: cannot unmarshal string into Go value of type map[string]interface {}",
        "json: cannot unmarshal object into Go struct field DockerConfigJSON.auths of type credentialprovider.DockerConfig",
        "invalid character 'H' looking for beginning of value",
        "invalid character '1' after top-level value",
        "invalid character 'u' in literal true (expecting 'r')",
        "invalid character '}' after object key",
    ];

    #[test]
    fn every_data_validation_error_reads_the_same() {
        let mut seen = std::collections::BTreeSet::new();
        for detail in GO_JSON_DETAILS {
            for key in ["data[.dockerconfigjson]", "data[.dockercfg]"] {
                let field =
                    format!("{key}: Invalid value: \"<secret contents redacted>\": {detail}");
                for message in [
                    format!("Secret \"pull\" is invalid: {field}"),
                    format!(
                        "failed to write secret: Secret \"pull\" is invalid: {field} (422 Invalid)"
                    ),
                ] {
                    let got = scrub(&message);
                    assert!(got.contains(DATA_WITHHELD), "{got}");
                    assert!(!got.contains("data["), "{got}");
                    seen.insert(
                        got.replace(" (422 Invalid)", "")
                            .replace("failed to write secret: ", ""),
                    );
                }
            }
        }
        // Also a size error and a missing key: the same sentence.
        for field in [
            "data: Too long: must have at most 1048576 bytes",
            "data[.dockerconfigjson]: Required value",
        ] {
            seen.insert(scrub(&format!("Secret \"pull\" is invalid: {field}")));
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            [format!("Secret \"pull\" is invalid: {DATA_WITHHELD}")]
        );
        assert_eq!(
            scrub(&format!(
                "failed to write secret: Secret \"pull\" is invalid: data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": {} (422 Invalid)",
                GO_JSON_DETAILS[0]
            )),
            format!(
                "failed to write secret: Secret \"pull\" is invalid: {DATA_WITHHELD} (422 Invalid)"
            )
        );
    }

    #[test]
    fn errors_outside_data_keep_their_text_and_data_errors_merge() {
        // An `[a, b]` list: `type` stays (its value scrubbed), the data errors become one.
        assert_eq!(
            scrub(
                "Secret \"ty\" is invalid: [type: Invalid value: \"kubernetes.io/tls\": field is immutable, data[tls.crt]: Required value, data[tls.key]: Required value] (422 Invalid)"
            ),
            format!(
                "Secret \"ty\" is invalid: [type: Invalid value: \"…\": field is immutable, {DATA_WITHHELD}] (422 Invalid)"
            )
        );
        assert_eq!(
            scrub(
                "Secret \"s\" is invalid: [data: Too long: must have at most 1048576 bytes, data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": unexpected end of JSON input, metadata.name: Required value]"
            ),
            format!("Secret \"s\" is invalid: [{DATA_WITHHELD}, metadata.name: Required value]")
        );
        // kubectl's form, one error a line.
        assert_eq!(
            scrub(
                "The Secret \"s\" is invalid: \n* data[username]: Required value\n* data[password]: Required value\n* type: Invalid value: \"x\": field is immutable"
            ),
            format!(
                "The Secret \"s\" is invalid: \n* {DATA_WITHHELD}\n* type: Invalid value: \"…\": field is immutable"
            )
        );
        // Not field errors under `data`: kept.
        for text in [
            "secrets \"db\" is forbidden: User \"u\" cannot update resource \"secrets\" (403 Forbidden)",
            "metadata.annotations: Too long: must have at most 262144 bytes",
            "reading data: connection reset by peer",
            "Secret in version \"v1\" cannot be handled as a Secret: v1.Secret.Data: decode base64: illegal base64 data at input byte 8",
        ] {
            assert_eq!(scrub(text), text);
        }
    }

    #[test]
    fn truncated_markers_and_odd_bytes_never_panic() {
        for text in [
            "",
            "Invalid value: ",
            "Invalid value: \"",
            "Invalid value: {\"a\":[",
            "invalid character '",
            "invalid character '\\",
            "invalid character 'x' in literal true (expecting",
            "json: cannot unmarshal number ",
            "but found ",
            ", error found in #10 byte of ...|abc",
            ", error found in #10 byte of ...|a|..., bigger context ...|abc",
            "invalid type: string \"é",
            "ümlaut Invalid value: ümlaut: x",
        ] {
            let _ = scrub(text);
        }
        assert_eq!(
            scrub("Invalid value: {\"a\":["),
            "Invalid value: …",
            "an unclosed value goes to the end of the line"
        );
        assert_eq!(scrub(", error found in #10 byte of ...|abc"), "");
    }
}
