//! The one error type of `kseal-api`.

/// Errors from sealing a Secret or unsealing a SealedSecret.
///
/// Messages name objects and item keys (public), never secret values. A failed decryption
/// ([`Error::Decrypt`], [`Error::DecryptDeprecatedData`]) carries the opaque
/// [`kseal_keys::Error::Open`] as its source and says nothing about why the crypto failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object has no `metadata.name` (and none was given).
    #[error("object has no name")]
    MissingName,
    /// The object has no namespace (and none was given), but its scope needs one.
    #[error("object `{name}` has no namespace")]
    MissingNamespace {
        /// Name of the object.
        name: String,
    },
    /// Sealing was asked for one namespace, but the Secret declares another.
    #[error(
        "namespace mismatch: the secret declares namespace `{secret}` but namespace `{requested}` was requested"
    )]
    NamespaceMismatch {
        /// The Secret's own namespace.
        secret: String,
        /// The namespace requested in [`crate::SealOptions::namespace`].
        requested: String,
    },
    /// The Secret has neither `data` nor `stringData`.
    #[error("secret `{name}` has no data or stringData: refusing to seal an empty secret")]
    EmptyData {
        /// Name of the Secret (empty if it has none).
        name: String,
    },
    /// The crypto backend failed to seal an item (never caused by the plaintext).
    #[error("failed to seal item `{item}`")]
    Seal {
        /// The item key.
        item: String,
        /// The backend error.
        #[source]
        source: kseal_keys::Error,
    },
    /// An `encryptedData` value is not standard base64 or is shorter than an envelope.
    #[error("encryptedData item `{item}` is not a valid sealed value")]
    MalformedItem {
        /// The item key.
        item: String,
        /// [`kseal_keys::Error::Base64`] or [`kseal_keys::Error::Truncated`].
        #[source]
        source: kseal_keys::Error,
    },
    /// No key could open the items of a template-bound object ([`crate::binding`]): its
    /// template (or its binding annotation) was edited since sealing, or, as for
    /// [`Error::Decrypt`], a wrong key, name, namespace or scope, or tampering. The message is
    /// the same whatever the template says: it never renders it.
    #[error(
        "{TEMPLATE_BINDING_MISMATCH}, or the values were sealed for another key, name, namespace or scope (items {}; tried {tried})",
        list(.items)
    )]
    TemplateBinding {
        /// The item keys that failed, sorted.
        items: Vec<String>,
        /// The scope and label that were tried (public metadata).
        tried: crate::ScopeTarget,
        /// Always the opaque [`kseal_keys::Error::Open`].
        #[source]
        source: kseal_keys::Error,
    },
    /// The top-level `kseal.dev/template-binding` annotation has a value this build does not
    /// know.
    #[error(
        "unknown template binding `{value}` in annotation kseal.dev/template-binding: this build opens only `v1`"
    )]
    UnknownTemplateBinding {
        /// The annotation's value (public metadata).
        value: String,
    },
    /// No key could open these items (wrong key, wrong name, namespace or scope, or
    /// tampering; deliberately not told apart).
    #[error("failed to decrypt items {} (tried {tried}){}", list(.items), hint_note(.hint.as_deref()))]
    Decrypt {
        /// The item keys that failed, sorted.
        items: Vec<String>,
        /// The scope and label that were tried (public metadata).
        tried: crate::ScopeTarget,
        /// The key the object's `kseal.dev/sealing-key` annotation names, if any, and whether
        /// the ring holds it (public metadata: says which key to look for).
        hint: Option<Box<HintNote>>,
        /// Always the opaque [`kseal_keys::Error::Open`].
        #[source]
        source: kseal_keys::Error,
    },
    /// The key ring holds no key.
    #[error("no private key to unseal with")]
    NoKeys,
    /// Both the deprecated `spec.data` and `spec.encryptedData` are set.
    #[error(
        "cannot use the field 'encryptedData' and the deprecated field 'data' at the same time"
    )]
    BothDataFields,
    /// `spec.data` is set but deprecated v1 data is not accepted.
    #[error("using deprecated 'data' field: use 'encryptedData' or accept deprecated v1 data")]
    DeprecatedDataRejected,
    /// The deprecated `spec.data` is not standard base64 or is shorter than an envelope.
    #[error("deprecated field 'data' is not a valid sealed value")]
    MalformedDeprecatedData {
        /// [`kseal_keys::Error::Base64`] or [`kseal_keys::Error::Truncated`].
        #[source]
        source: kseal_keys::Error,
    },
    /// No key could open the deprecated `spec.data`.
    #[error("failed to decrypt deprecated field 'data' (tried {tried})")]
    DecryptDeprecatedData {
        /// The scope and label that were tried (public metadata).
        tried: crate::ScopeTarget,
        /// Always the opaque [`kseal_keys::Error::Open`].
        #[source]
        source: kseal_keys::Error,
    },
    /// The deprecated `spec.data` opened but does not hold a JSON Secret. (The parser's
    /// message is dropped on purpose: it could quote the plaintext.)
    #[error("deprecated field 'data' does not hold a valid secret")]
    DeprecatedDataNotASecret,
    /// One or more `spec.template.data` templates failed to parse or to execute.
    #[error("failed to render spec.template.data: {}", errors_list(.errors))]
    TemplateData {
        /// Every failure, sorted by key and position, without duplicates.
        errors: Vec<crate::template::TemplateError>,
    },
}

impl Error {
    /// Whether this error's text depends on the secret's values: a `spec.template.data`
    /// template that failed while executing. Whether such a template fails, at which line and
    /// with which message can be computed from the plaintext (`{{ if hasPrefix "H" .password
    /// }}{{ fail "m" }}{{ end }}`), so whoever can edit the template and read the status
    /// would learn the values bit by bit. The controller shows such an error only as
    /// [`TEMPLATE_FAILED`], never its text; a parse error (the template source alone) is
    /// shown whole.
    pub fn depends_on_values(&self) -> bool {
        match self {
            Error::TemplateData { errors } => errors
                .iter()
                .any(crate::template::TemplateError::depends_on_values),
            _ => false,
        }
    }
}

/// What the controller shows for an error that [depends on the values](Error::depends_on_values).
pub const TEMPLATE_FAILED: &str = "a spec.template.data template failed while rendering (its \
    error is not shown: it could depend on the secret's values; render the template where the \
    plaintext is at hand to see it)";

/// The first words of [`Error::TemplateBinding`]: a bound object whose template changed.
pub const TEMPLATE_BINDING_MISMATCH: &str =
    "the template does not match the one the values were sealed with (template binding)";

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn errors_list(errors: &[crate::template::TemplateError]) -> String {
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    shown.join("; ")
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("`{i}`")).collect();
    quoted.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_template_that_failed_while_rendering_depends_on_the_values() {
        use std::collections::BTreeMap;
        let items = BTreeMap::from([(
            "password".to_owned(),
            k8s_openapi::ByteString(b"Hunter2".to_vec()),
        )]);
        let render = |source: &str| {
            crate::render_template_data(
                &BTreeMap::from([("out".to_owned(), Some(source.to_owned()))]),
                &items,
            )
            .unwrap_err()
        };
        let oracle = render(r#"{{ if hasPrefix "H" .password }}{{ fail "m" }}{{ end }}"#);
        assert!(oracle.depends_on_values());
        let syntax = render("{{ if }}");
        assert!(!syntax.depends_on_values());
        assert!(!Error::DeprecatedDataNotASecret.depends_on_values());
    }

    #[test]
    fn lists_are_quoted_and_comma_separated() {
        let err = Error::Decrypt {
            items: vec!["a".into(), "b".into()],
            tried: crate::ScopeTarget::new(kseal_keys::Scope::Strict, "prod", "db"),
            hint: None,
            source: kseal_keys::Error::Open,
        };
        assert_eq!(
            err.to_string(),
            "failed to decrypt items `a`, `b` (tried strict scope \"prod/db\")"
        );
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("no key could decrypt secret"));
    }
}

/// The key a SealedSecret's `kseal.dev/sealing-key` annotation names, as a failed unseal
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintNote {
    /// The key, as the annotation names it.
    pub key: kseal_keys::KeyId,
    /// Whether the key ring that was tried holds that key.
    pub held: bool,
}

fn hint_note(hint: Option<&HintNote>) -> String {
    match hint {
        None => String::new(),
        Some(HintNote { key, held: false }) => format!(
            "; its kseal.dev/sealing-key annotation names key {key}, which this key ring does not hold"
        ),
        Some(HintNote { key, held: true }) => format!(
            "; its kseal.dev/sealing-key annotation names key {key}, which this key ring holds: \
             sealed for another name, namespace or scope, or altered"
        ),
    }
}
