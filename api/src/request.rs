//! Parsing a SealedSecret sent over the network (the controller's `/v1/verify` and
//! `/v1/rotate` bodies): JSON or YAML, exactly one object, under explicit budgets.
//!
//! A request body comes from anyone who can reach the controller, so the YAML parser runs
//! with limits far below its defaults, sized for the largest SealedSecret a cluster accepts:
//!
//! | limit | value |
//! |---|---|
//! | anchors, aliases, merge keys (`&a`, `*a`, `<<`) | refused: a SealedSecret never needs them, and they are how "billion laughs" bombs work |
//! | nesting depth (block and flow) | [`MAX_DEPTH`] |
//! | nodes (mappings, sequences, scalars) | [`MAX_NODES`] |
//! | parser events | [`MAX_EVENTS`] |
//! | scalar bytes | [`MAX_SCALAR_BYTES`] |
//! | documents in the stream, empty ones included | [`MAX_DOCUMENTS`] |
//!
//! The caller bounds the body's size (the controller reads at most 1 MiB). A JSON body (one
//! that starts with `{`) goes to `serde_json`, whose recursion limit is 128.
//!
//! Plain scalars follow YAML 1.2, as `kubectl` does: `yes`, `on` and `0755` are strings,
//! not a boolean and a number.

use serde_json::Value;

use crate::SealedSecret;
use crate::constants::{API_VERSION, KIND};

/// Deepest nesting of mappings and sequences accepted (a SealedSecret needs about 6).
pub const MAX_DEPTH: usize = 32;
/// Most nodes (mappings, sequences and scalars) accepted in one body (a SealedSecret with
/// 5,000 items has about 10,000).
pub const MAX_NODES: usize = 20_000;
/// Most parser events accepted in one body (each node is one or two events).
pub const MAX_EVENTS: usize = 4 * MAX_NODES;
/// Most bytes of scalar text accepted in one body.
pub const MAX_SCALAR_BYTES: usize = 4 * 1024 * 1024;
/// Most YAML documents (`---`), empty ones included, accepted in one body.
pub const MAX_DOCUMENTS: usize = 16;

/// A SealedSecret read from a request body.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ParsedRequest {
    /// The typed object, for the crypto.
    pub sealed: SealedSecret,
    /// The object as sent, as JSON, so an answer can keep every field the caller sent
    /// (including ones the types do not know) unchanged.
    pub raw: Value,
}

/// Why a request body is not one SealedSecret.
///
/// Messages quote at most the first 64 characters of `apiVersion` and `kind`, and no other
/// value from the body. [`RequestError::is_malformed`] tells a body that is not one JSON or
/// YAML object (HTTP 400) from an object that is not a valid SealedSecret (HTTP 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The body is empty or only whitespace.
    #[error("empty request body: send one SealedSecret as JSON or YAML")]
    Empty,
    /// The body starts with `{` but is not JSON.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// The body is not YAML, or breaks one of the parser's budgets.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// The body holds more than one non-empty YAML document.
    #[error("multi-document YAML ({0} documents): send exactly one SealedSecret")]
    MultipleDocuments(usize),
    /// The body holds more than [`MAX_DOCUMENTS`] YAML documents, empty ones included.
    #[error(
        "multi-document YAML (more than {MAX_DOCUMENTS} documents): send exactly one SealedSecret"
    )]
    TooManyDocuments,
    /// The body's only YAML documents are empty.
    #[error("empty YAML document: send one SealedSecret")]
    EmptyDocument,
    /// The body is a scalar or a sequence.
    #[error("the body is not an object: send one SealedSecret")]
    NotAnObject,
    /// The object is not a `bitnami.com/v1alpha1` `SealedSecret`.
    #[error(
        "expected apiVersion {API_VERSION}, kind {KIND}; got apiVersion {api_version}, kind {kind}"
    )]
    WrongKind {
        /// The object's `apiVersion` (at most 64 characters), or `<missing>`.
        api_version: String,
        /// The object's `kind` (at most 64 characters), or `<missing>`.
        kind: String,
    },
    /// The object says it is a SealedSecret but does not match the type.
    #[error("invalid SealedSecret: {0}")]
    InvalidSealedSecret(String),
}

impl RequestError {
    /// Whether the body is not one JSON or YAML object at all (`true`: HTTP 400), rather
    /// than an object that is not a valid SealedSecret (`false`: HTTP 422).
    pub fn is_malformed(&self) -> bool {
        !matches!(self, Self::WrongKind { .. } | Self::InvalidSealedSecret(_))
    }
}

/// Parses one SealedSecret from a request body: JSON when it starts with `{`, YAML
/// otherwise, under the limits in the [module documentation](self).
///
/// Empty YAML documents are skipped; two non-empty ones are refused
/// ([`RequestError::MultipleDocuments`]).
///
/// ```
/// use kseal_api::request::{RequestError, parse_sealed_secret};
///
/// let body = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: a}\nspec: {encryptedData: {}}\n";
/// let parsed = parse_sealed_secret(body)?;
/// assert_eq!(parsed.sealed.metadata.name.as_deref(), Some("a"));
/// assert_eq!(parsed.raw["metadata"]["name"], "a");
///
/// let bomb = b"a: &a [x, x]\nb: [*a, *a]\n";
/// let error = parse_sealed_secret(bomb).unwrap_err();
/// assert!(error.is_malformed());
/// assert!(error.to_string().contains("aliases"), "{error}");
/// # Ok::<(), RequestError>(())
/// ```
pub fn parse_sealed_secret(body: &[u8]) -> Result<ParsedRequest, RequestError> {
    let trimmed = body.trim_ascii_start();
    if trimmed.is_empty() {
        return Err(RequestError::Empty);
    }
    let raw: Value = if trimmed.starts_with(b"{") {
        serde_json::from_slice(trimmed).map_err(|e| RequestError::Json(e.to_string()))?
    } else {
        let mut documents = parse_yaml_documents(body)?;
        if documents.len() > 1 {
            return Err(RequestError::MultipleDocuments(documents.len()));
        }
        documents.pop().ok_or(RequestError::EmptyDocument)?
    };
    if !raw.is_object() {
        return Err(RequestError::NotAnObject);
    }
    let short = |v: &Value| -> String {
        v.as_str()
            .map_or_else(|| "<missing>".to_owned(), |s| s.chars().take(64).collect())
    };
    if raw["kind"].as_str() != Some(KIND) || raw["apiVersion"].as_str() != Some(API_VERSION) {
        return Err(RequestError::WrongKind {
            api_version: short(&raw["apiVersion"]),
            kind: short(&raw["kind"]),
        });
    }
    let sealed: SealedSecret = serde_json::from_value(raw.clone())
        .map_err(|e| RequestError::InvalidSealedSecret(e.to_string()))?;
    Ok(ParsedRequest { sealed, raw })
}

/// The parser budget for a request body.
fn budget() -> serde_saphyr::Budget {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_anchors = 0;
    budget.max_aliases = 0;
    budget.max_merge_keys = 0;
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    budget.max_nodes = MAX_NODES;
    budget.max_events = MAX_EVENTS;
    budget.max_total_scalar_bytes = MAX_SCALAR_BYTES;
    budget.max_documents = MAX_DOCUMENTS;
    budget.max_inclusion_depth = 0;
    budget.max_recorded_anchor_events = 0;
    budget.max_recorded_anchor_bytes = 0;
    budget
}

/// The parser options for a request body.
fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget());
    options.merge_keys = serde_saphyr::MergeKeyPolicy::Error;
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    options.alias_limits.max_total_replayed_events = 0;
    options.alias_limits.max_alias_expansions_per_anchor = 0;
    // YAML 1.2 plain scalars, as serde_yaml and kubectl read them.
    options.strict_booleans = true;
    options.legacy_octal_numbers = false;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    // Comments are checked but never kept; errors are one line, without a snippet of the body.
    options.emit_comments = false;
    options.with_snippet = false;
    options
}

/// Every non-empty document of a YAML body, as JSON values.
fn parse_yaml_documents(body: &[u8]) -> Result<Vec<Value>, RequestError> {
    use serde_saphyr::budget::BudgetBreach;

    serde_saphyr::from_slice_multiple_with_options::<Value>(body, options()).map_err(|error| {
        let breach = match &error {
            serde_saphyr::Error::Budget { breach, .. } => Some(breach),
            _ => None,
        };
        let message = match breach {
            Some(BudgetBreach::Documents { .. }) => return RequestError::TooManyDocuments,
            Some(
                BudgetBreach::Aliases { .. }
                | BudgetBreach::Anchors { .. }
                | BudgetBreach::AliasAnchorRatio { .. },
            ) => "anchors and aliases (&name, *name) are not accepted in a request body".to_owned(),
            Some(BudgetBreach::MergeKeys { .. }) => {
                "merge keys (<<) are not accepted in a request body".to_owned()
            }
            Some(BudgetBreach::Depth { .. }) => {
                format!("nested deeper than {MAX_DEPTH} levels")
            }
            Some(BudgetBreach::Nodes { .. }) => format!("more than {MAX_NODES} nodes"),
            Some(BudgetBreach::Events { .. }) => format!("more than {MAX_EVENTS} parser events"),
            Some(BudgetBreach::ScalarBytes { .. }) => {
                format!("more than {MAX_SCALAR_BYTES} bytes of scalars")
            }
            Some(breach) => crate::budget::describe(breach, &budget()),
            None => error.to_string(),
        };
        let message = match (breach, error.location()) {
            (Some(_), Some(at)) if at.line() > 0 => {
                format!("{message} at line {}, column {}", at.line(), at.column())
            }
            _ => message,
        };
        RequestError::Yaml(message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\n";

    fn yaml_error(body: &[u8]) -> String {
        match parse_sealed_secret(body) {
            Err(RequestError::Yaml(message)) => message,
            other => panic!("expected a YAML error, got {other:?}"),
        }
    }

    #[test]
    fn one_yaml_document_parses_into_the_type_and_the_raw_value() {
        let body = format!(
            "---\n{HEAD}metadata:\n  name: a\n  namespace: ns\n  annotations: {{x: yes, y: '0755', z: 0755}}\nspec:\n  encryptedData: {{k: AgB}}\n  extra: [1, 2]\n---\n"
        );
        let parsed = parse_sealed_secret(body.as_bytes()).expect("parses");
        assert_eq!(parsed.sealed.metadata.name.as_deref(), Some("a"));
        assert_eq!(parsed.sealed.spec.encrypted_data["k"], "AgB");
        // The raw value keeps fields the type does not know.
        assert_eq!(parsed.raw["spec"]["extra"], serde_json::json!([1, 2]));
        // YAML 1.2 plain scalars: `yes` and `0755` stay strings.
        assert_eq!(
            parsed.raw["metadata"]["annotations"],
            serde_json::json!({"x": "yes", "y": "0755", "z": "0755"})
        );
    }

    #[test]
    fn json_body_parses() {
        let body = br#"{"apiVersion":"bitnami.com/v1alpha1","kind":"SealedSecret","metadata":{"name":"a"},"spec":{"encryptedData":{}}}"#;
        let parsed = parse_sealed_secret(body).expect("parses");
        assert_eq!(parsed.raw["metadata"]["name"], "a");
    }

    #[test]
    fn multi_document_yaml_is_rejected() {
        let body = format!("{HEAD}metadata: {{name: a}}\n---\n{HEAD}metadata: {{name: b}}\n");
        let error = parse_sealed_secret(body.as_bytes()).expect_err("two documents");
        assert_eq!(error, RequestError::MultipleDocuments(2));
        assert!(error.is_malformed());
        assert!(
            error
                .to_string()
                .starts_with("multi-document YAML (2 documents)")
        );
    }

    #[test]
    fn a_storm_of_empty_documents_is_rejected() {
        let body = format!("{}{HEAD}", "---\n".repeat(100_000));
        let error = parse_sealed_secret(body.as_bytes()).expect_err("too many documents");
        assert_eq!(error, RequestError::TooManyDocuments);
        assert!(error.to_string().contains("multi-document"), "{error}");
    }

    #[test]
    fn empty_bodies_and_documents_are_rejected() {
        assert_eq!(
            parse_sealed_secret(b" \n\t").expect_err("empty"),
            RequestError::Empty
        );
        assert_eq!(
            parse_sealed_secret(b"---\n# nothing\n---\n").expect_err("empty document"),
            RequestError::EmptyDocument
        );
        assert_eq!(
            parse_sealed_secret(b"- a\n- b\n").expect_err("a sequence"),
            RequestError::NotAnObject
        );
    }

    #[test]
    fn wrong_kind_and_invalid_objects_are_unprocessable_not_malformed() {
        let error = parse_sealed_secret(b"apiVersion: v1\nkind: Secret\n").expect_err("a Secret");
        assert!(!error.is_malformed());
        assert_eq!(
            error.to_string(),
            "expected apiVersion bitnami.com/v1alpha1, kind SealedSecret; got apiVersion v1, kind Secret"
        );
        let error = parse_sealed_secret(format!("{HEAD}spec: 3\n").as_bytes())
            .expect_err("spec is a number");
        assert!(!error.is_malformed());
        assert!(
            error.to_string().starts_with("invalid SealedSecret"),
            "{error}"
        );
        let long = "x".repeat(1000);
        let error =
            parse_sealed_secret(format!("apiVersion: {long}\n").as_bytes()).expect_err("no kind");
        assert_eq!(
            error,
            RequestError::WrongKind {
                api_version: "x".repeat(64),
                kind: "<missing>".to_owned()
            }
        );
    }

    #[test]
    fn invalid_yaml_names_line_and_column() {
        let message = yaml_error(format!("{HEAD}metadata:\n  name: [a\n").as_bytes());
        assert!(message.contains("line"), "{message}");
        assert!(message.contains("column"), "{message}");
        let message = yaml_error(format!("{HEAD}kind: again\n").as_bytes());
        assert!(message.contains("duplicate"), "{message}");
    }

    #[test]
    fn invalid_json_is_reported_as_json() {
        let error = parse_sealed_secret(b"{\"apiVersion\": ").expect_err("truncated");
        assert!(matches!(error, RequestError::Json(_)), "{error:?}");
        assert!(error.to_string().starts_with("invalid JSON"), "{error}");
    }

    #[test]
    fn billion_laughs_is_refused_at_the_first_alias() {
        let mut body = String::from(HEAD);
        body.push_str("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..10 {
            let previous = char::from(b'a' + level - 1);
            let name = char::from(b'a' + level);
            let refs = vec![format!("*{previous}"); 9].join(", ");
            body.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        let message = yaml_error(body.as_bytes());
        assert!(message.contains("anchors and aliases"), "{message}");
    }

    #[test]
    fn a_lone_anchor_or_alias_is_refused() {
        let message = yaml_error(format!("{HEAD}metadata: &m {{name: a}}\n").as_bytes());
        assert!(message.contains("anchors and aliases"), "{message}");
        assert!(message.contains("line 3"), "{message}");
        let message = yaml_error(format!("{HEAD}metadata: *m\n").as_bytes());
        assert!(
            message.contains("anchors and aliases") || message.contains("unknown anchor"),
            "{message}"
        );
    }

    #[test]
    fn a_megabyte_of_anchors_is_refused() {
        let mut body = String::from(HEAD);
        body.push_str("spec:\n");
        let mut i = 0;
        while body.len() < 1024 * 1024 {
            body.push_str(&format!("  k{i}: &a{i} v\n"));
            i += 1;
        }
        let message = yaml_error(body.as_bytes());
        assert!(message.contains("anchors and aliases"), "{message}");
    }

    #[test]
    fn merge_keys_are_refused() {
        let message =
            yaml_error(format!("{HEAD}metadata:\n  <<: {{name: a}}\n  namespace: b\n").as_bytes());
        assert!(message.contains("merge"), "{message}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        for body in [
            format!(
                "{HEAD}spec: {}{}\n",
                "[".repeat(100_000),
                "]".repeat(100_000)
            ),
            format!("{HEAD}spec: {}1{}\n", "{a: ".repeat(1000), "}".repeat(1000)),
            {
                let mut body = String::from(HEAD);
                for depth in 0..1000 {
                    body.push_str(&" ".repeat(depth));
                    body.push_str("a:\n");
                }
                body
            },
        ] {
            let message = yaml_error(body.as_bytes());
            // The depth budget, or the parser's own flow nesting limit (set to the same).
            assert!(
                message.contains(&format!("nested deeper than {MAX_DEPTH} levels"))
                    || message.starts_with("recursion limit exceeded at line 3"),
                "{message}"
            );
        }
    }

    #[test]
    fn too_many_nodes_are_refused() {
        let body = format!("{HEAD}spec: [{}]\n", "1,".repeat(MAX_NODES + 1));
        let message = yaml_error(body.as_bytes());
        assert!(
            message.contains(&format!("more than {MAX_NODES} nodes")),
            "{message}"
        );
    }

    #[test]
    fn invalid_utf8_is_refused() {
        let message = yaml_error(b"apiVersion: \xff\xfe\n");
        assert!(!message.is_empty());
    }
}
