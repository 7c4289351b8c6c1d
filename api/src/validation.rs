//! Kubernetes name rules, as `k8s.io/apimachinery/pkg/util/validation` states them, so the CLI,
//! the controller and the tests check names the way the API server will.
//!
//! Each check mirrors one apimachinery function and, on failure, returns every problem in
//! apimachinery's wording (the apiserver's `Invalid value` messages), in apimachinery's order:
//!
//! | here | apimachinery | used for |
//! |---|---|---|
//! | [`is_dns1123_label`] | `IsDNS1123Label` | namespace names ([`validate_namespace_name`]) |
//! | [`is_dns1123_subdomain`] | `IsDNS1123Subdomain` | Secret and SealedSecret names ([`validate_secret_name`]) |
//! | [`is_dns1035_label`] | `IsDNS1035Label` | Service names ([`validate_service_name`]) |
//! | [`is_qualified_name`] | `IsQualifiedName` | label keys, annotation keys lower-cased ([`validate_annotation_key`]) |
//! | [`is_valid_label_value`] | `IsValidLabelValue` | label values |
//! | [`is_config_map_key`] | `IsConfigMapKey` | keys of a Secret's `data` |
//!
//! The patterns are small enough to match by hand, which keeps `kseal-api` free of a regex
//! engine; the messages still quote apimachinery's regular expressions, as the apiserver does.
//! Lengths count bytes, as Go's `len` does.

use std::fmt;

/// The longest DNS-1123 label (RFC 1123): 63.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// The longest DNS-1123 subdomain (RFC 1123): 253.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// The longest name part of a qualified name (label or annotation key): 63.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// The longest label value: 63.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case \
    alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric \
    characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
    must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
    characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_MSG: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// Why a name breaks a Kubernetes rule: apimachinery's messages, one per problem (never
/// empty). Its `Display` joins them with `; `; the value itself is left to the caller, which
/// knows what the value is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidName {
    problems: Vec<String>,
}

impl InvalidName {
    /// The problems, in apimachinery's order and wording.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("; "))
    }
}

impl std::error::Error for InvalidName {}

fn verdict(problems: Vec<String>) -> Result<(), InvalidName> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InvalidName { problems })
    }
}

/// apimachinery's `MaxLenError`.
fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// apimachinery's `RegexError`: the message, the examples and the pattern.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = String::from(msg);
    if examples.is_empty() {
        out.push_str(" (regex used for validation is '");
    } else {
        out.push_str(" (e.g. ");
        for (i, example) in examples.iter().enumerate() {
            if i > 0 {
                out.push_str(" or ");
            }
            out.push('\'');
            out.push_str(example);
            out.push_str("', ");
        }
        out.push_str("regex used for validation is '");
    }
    out.push_str(fmt);
    out.push_str("')");
    out
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, any length.
fn matches_dns1123_label(value: &str) -> bool {
    let b = value.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, any length.
fn matches_dns1035_label(value: &str) -> bool {
    value.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && matches_dns1123_label(value)
}

/// Dot-separated `[a-z0-9]([-a-z0-9]*[a-z0-9])?` parts, any length.
fn matches_dns1123_subdomain(value: &str) -> bool {
    value.split('.').all(matches_dns1123_label)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, any length.
fn matches_qualified_name(value: &str) -> bool {
    let b = value.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn dns1123_label_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        problems.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain that is not a label: the length is checked, so it has dots.
            problems.push("must not contain dots".to_owned());
        } else {
            problems.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    problems
}

fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        problems.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        problems.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    problems
}

/// A DNS-1123 label (`IsDNS1123Label`): at most 63 lower-case alphanumerics or `-`, starting
/// and ending with an alphanumeric.
pub fn is_dns1123_label(value: &str) -> Result<(), InvalidName> {
    verdict(dns1123_label_problems(value))
}

/// A DNS-1123 subdomain (`IsDNS1123Subdomain`): at most 253 characters of dot-separated
/// DNS-1123 label patterns.
pub fn is_dns1123_subdomain(value: &str) -> Result<(), InvalidName> {
    verdict(dns1123_subdomain_problems(value))
}

/// A DNS-1035 label (`IsDNS1035Label`): at most 63 lower-case alphanumerics or `-`, starting
/// with a letter and ending with an alphanumeric.
pub fn is_dns1035_label(value: &str) -> Result<(), InvalidName> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        problems.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(value) {
        problems.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    verdict(problems)
}

/// A qualified name (`IsQualifiedName`), the form of label and annotation keys: an optional
/// DNS-1123 subdomain prefix and `/`, then a name of at most 63 alphanumerics, `-`, `_` or
/// `.`, starting and ending with an alphanumeric.
pub fn is_qualified_name(value: &str) -> Result<(), InvalidName> {
    let examples = ["MyName", "my.name", "123-abc"];
    let mut problems = Vec::new();
    let mut parts = value.split('/');
    let (prefix, name) = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => (None, name),
        (Some(prefix), Some(name), None) => (Some(prefix), name),
        _ => {
            return verdict(vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &examples)
            )]);
        }
    };
    match prefix {
        Some("") => problems.push("prefix part must be non-empty".to_owned()),
        Some(prefix) => problems.extend(
            dns1123_subdomain_problems(prefix)
                .into_iter()
                .map(|p| format!("prefix part {p}")),
        ),
        None => {}
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        problems.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name(name) {
        problems.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &examples)
        ));
    }
    verdict(problems)
}

/// A label value (`IsValidLabelValue`): empty, or at most 63 alphanumerics, `-`, `_` or `.`,
/// starting and ending with an alphanumeric.
pub fn is_valid_label_value(value: &str) -> Result<(), InvalidName> {
    let mut problems = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        problems.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !(value.is_empty() || matches_qualified_name(value)) {
        problems.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    verdict(problems)
}

/// A key of a Secret's or ConfigMap's `data` (`IsConfigMapKey`): at most 253 alphanumerics,
/// `-`, `_` or `.`, and neither `.`, `..` nor starting with `..` (it becomes a file name when
/// the Secret is mounted).
pub fn is_config_map_key(value: &str) -> Result<(), InvalidName> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        problems.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let chars_ok = !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !chars_ok {
        problems.push(regex_error(
            CONFIG_MAP_KEY_MSG,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        problems.push("must not be '.'".to_owned());
    } else if value == ".." {
        problems.push("must not be '..'".to_owned());
    } else if value.starts_with("..") {
        problems.push("must not start with '..'".to_owned());
    }
    verdict(problems)
}

/// An annotation key: a qualified name once lower-cased, as apimachinery's
/// `ValidateAnnotations` checks it (`Example.com/Owner` is a valid annotation key, not a
/// valid label key).
pub fn validate_annotation_key(key: &str) -> Result<(), InvalidName> {
    is_qualified_name(&key.to_lowercase())
}

/// The name of a namespace: a DNS-1123 label (apimachinery's `ValidateNamespaceName`).
pub fn validate_namespace_name(name: &str) -> Result<(), InvalidName> {
    is_dns1123_label(name)
}

/// The name of a Service: a DNS-1035 label (Kubernetes' `ValidateServiceName`).
pub fn validate_service_name(name: &str) -> Result<(), InvalidName> {
    is_dns1035_label(name)
}

/// The name of a Secret, or of the SealedSecret it comes from: a DNS-1123 subdomain
/// (Kubernetes' `ValidateSecretName`).
pub fn validate_secret_name(name: &str) -> Result<(), InvalidName> {
    is_dns1123_subdomain(name)
}

/// A `generateName` for Secrets: the apiserver appends five random alphanumerics, so a
/// trailing `-` is fine; the rest must be a DNS-1123 subdomain (apimachinery's
/// `NameIsDNSSubdomain` with `prefix`, which masks a trailing dash).
pub fn validate_secret_generate_name(prefix: &str) -> Result<(), InvalidName> {
    match prefix.strip_suffix('-') {
        Some(base) if !base.is_empty() => is_dns1123_subdomain(&format!("{base}a")),
        _ => is_dns1123_subdomain(prefix),
    }
}
