//! YAML through serde-saphyr, with the settings every reader and writer of the CLI shares.
//!
//! Local files are trusted more than network bodies: anchors, aliases and merge keys are
//! accepted, under serde-saphyr's default budget. Errors are one line and name the line and
//! column (no source snippet, which would repeat the user's secrets on the terminal).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The parser's settings: serde-saphyr's defaults, with one-line errors, and plain scalars
/// read as YAML 1.2 (as `kubectl` and serde_yaml read them): `yes`, `off`, `0755` and `1_000`
/// are strings, not a boolean and numbers.
pub(crate) fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.strict_booleans = true;
    options.legacy_octal_numbers = false;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options
}

/// Parses one YAML document.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, options())
}

/// Parses every document of a YAML stream (an empty document is `null`).
pub(crate) fn from_multiple<T: DeserializeOwned>(
    text: &str,
) -> Result<Vec<T>, serde_saphyr::Error> {
    serde_saphyr::from_multiple_with_options(text, options())
}

/// Renders `value` as one YAML document (no `---`). Long strings stay plain one-line scalars,
/// as `kubectl` and kubeseal write them: a sealed value is never folded into a `>` block.
pub(crate) fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(value, options)
}
