//! YAML through serde-saphyr, with the settings every reader and writer of the CLI shares.
//!
//! Local files are trusted more than network bodies: anchors, aliases and merge keys are
//! accepted, under serde-saphyr's limits on them, and the size limits are far larger than its
//! defaults (`kseal_api::budget::local_files`: a million documents, not 1,024). Errors are one
//! line and name the line and column (no source snippet, which would repeat the user's secrets
//! on the terminal); a limit reached reads as a sentence that names it.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The parser's settings: serde-saphyr's defaults, with one-line errors, and plain scalars
/// read as YAML 1.2 (as `kubectl` and serde_yaml read them): `yes`, `off`, `0755` and `1_000`
/// are strings, not a boolean and numbers.
pub(crate) fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(kseal_api::budget::local_files());
    options.with_snippet = false;
    options.strict_booleans = true;
    options.legacy_octal_numbers = false;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options
}

/// A YAML error: serde-saphyr's, with a limit reached said as a sentence
/// (`kseal_api::budget::message`), never in `Debug` form.
#[derive(Debug)]
pub(crate) struct Error(serde_saphyr::Error);

impl Error {
    /// Where in the text it happened.
    pub(crate) fn location(&self) -> Option<serde_saphyr::Location> {
        self.0.location()
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&kseal_api::budget::message(
            &self.0,
            &kseal_api::budget::local_files(),
        ))
    }
}

// No source: the message is the whole story, so a chain never repeats it.
impl std::error::Error for Error {}

/// Parses one YAML document.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options()).map_err(Error)
}

/// Parses every document of a YAML stream (an empty document is `null`).
pub(crate) fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    serde_saphyr::from_multiple_with_options(text, options()).map_err(Error)
}

/// Renders `value` as one YAML document (no `---`). Long one-line strings stay plain
/// scalars, as `kubectl` and kubeseal write them (a sealed value is never folded into a `>`
/// block); text with newlines is a literal `|` block, as serde_yaml wrote it. Strings a YAML
/// 1.1 reader would take for something else (`yes`, `0755`, `2024-01-01`) are quoted.
pub(crate) fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    // Folding starts past this width: never, for a one-line string.
    options.folded_wrap_chars = usize::MAX;
    serde_saphyr::to_string_with_options(value, options)
}

/// An order-preserving document tree: a manifest as parsed, edited in place and written back
/// with its keys in the file's order (unknown fields included).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Doc {
    /// `null`, `~`, or an empty value.
    #[default]
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Sequence(Vec<Doc>),
    Mapping(Mapping),
}

/// A mapping in the file's key order.
pub(crate) type Mapping = indexmap::IndexMap<String, Doc>;

impl Doc {
    /// The value at `key` when this is a mapping.
    pub(crate) fn get(&self, key: &str) -> Option<&Doc> {
        self.as_mapping()?.get(key)
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Doc::String(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_sequence(&self) -> Option<&Vec<Doc>> {
        match self {
            Doc::Sequence(items) => Some(items),
            _ => None,
        }
    }

    pub(crate) fn as_mapping(&self) -> Option<&Mapping> {
        match self {
            Doc::Mapping(map) => Some(map),
            _ => None,
        }
    }

    pub(crate) fn as_mapping_mut(&mut self) -> Option<&mut Mapping> {
        match self {
            Doc::Mapping(map) => Some(map),
            _ => None,
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }

    /// The document as a typed object (through JSON, which every Kubernetes type reads).
    pub(crate) fn to_typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(self)?)
    }
}

impl From<&str> for Doc {
    fn from(s: &str) -> Self {
        Doc::String(s.to_owned())
    }
}

impl From<String> for Doc {
    fn from(s: String) -> Self {
        Doc::String(s)
    }
}

impl Serialize for Doc {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        match self {
            Doc::Null => serializer.serialize_unit(),
            Doc::Bool(b) => serializer.serialize_bool(*b),
            Doc::Number(n) => n.serialize(serializer),
            Doc::String(s) => serializer.serialize_str(s),
            Doc::Sequence(items) => serializer.collect_seq(items),
            Doc::Mapping(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Doc {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> serde::de::Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_unit<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_none<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        serde::Deserialize::deserialize(d)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Doc, E> {
        Ok(Doc::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Doc, E> {
        Ok(Doc::Number(n.into()))
    }

    fn visit_i128<E: serde::de::Error>(self, n: i128) -> Result<Doc, E> {
        i64::try_from(n)
            .map(|n| Doc::Number(n.into()))
            .or_else(|_| u64::try_from(n).map(|n| Doc::Number(n.into())))
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_u128<E: serde::de::Error>(self, n: u128) -> Result<Doc, E> {
        u64::try_from(n)
            .map(|n| Doc::Number(n.into()))
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Doc, E> {
        // JSON has no NaN or infinity; YAML's `.nan` and `.inf` stay as the text they are.
        Ok(serde_json::Number::from_f64(n).map_or_else(|| Doc::String(n.to_string()), Doc::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Doc, E> {
        Ok(Doc::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Doc, E> {
        Ok(Doc::String(s))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Doc::Sequence(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut out = Mapping::new();
        while let Some((key, value)) = map.next_entry::<KeyText, Doc>()? {
            out.insert(key.0, value);
        }
        Ok(Doc::Mapping(out))
    }
}

/// A mapping key as text: `1: x` and `true: x` keep their spelling as strings.
struct KeyText(String);

impl<'de> serde::Deserialize<'de> for KeyText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Doc::deserialize(deserializer)? {
            Doc::String(s) => Ok(KeyText(s)),
            Doc::Null => Ok(KeyText("null".to_owned())),
            Doc::Bool(b) => Ok(KeyText(b.to_string())),
            Doc::Number(n) => Ok(KeyText(n.to_string())),
            Doc::Sequence(_) | Doc::Mapping(_) => Err(serde::de::Error::custom(
                "a mapping key must be a string, not a sequence or a mapping",
            )),
        }
    }
}
