//! Reading and writing Kubernetes manifests: YAML multi-document streams and JSON.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::Format;
use crate::yaml::{Doc, Mapping};

/// Where an input came from, for error messages.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Stdin,
    File(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Stdin => f.write_str("standard input"),
            Source::File(path) => write!(f, "`{}`", path.display()),
        }
    }
}

/// Text read from a file or stdin.
pub(crate) struct Input {
    pub(crate) source: Source,
    pub(crate) text: String,
}

impl Input {
    /// Reads `path`, or stdin when it is absent or `-`. Text that is not UTF-8 is refused
    /// with an error naming the document and the field that holds the bad bytes.
    pub(crate) fn read(path: Option<&Path>) -> Result<Self> {
        let (source, bytes) = match path {
            Some(p) if p != Path::new("-") => (Source::File(p.to_owned()), fs_err::read(p)?),
            _ => {
                if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                    eprintln!(
                        "(reading the manifest from standard input; use -f FILE to name a file)"
                    );
                }
                let mut bytes = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut bytes)
                    .context("failed to read standard input")?;
                (Source::Stdin, bytes)
            }
        };
        match String::from_utf8(bytes) {
            Ok(text) => Ok(Self { source, text }),
            Err(e) => Err(not_utf8(e.as_bytes(), e.utf8_error(), source)),
        }
    }

    /// Reads every file of `paths` (`-` is standard input, read once); none reads stdin.
    pub(crate) fn read_all(paths: &[PathBuf]) -> Result<Vec<Self>> {
        if paths.is_empty() {
            return Ok(vec![Self::read(None)?]);
        }
        if paths.iter().filter(|p| *p == Path::new("-")).count() > 1 {
            bail!("standard input (`-`) can be read only once");
        }
        paths.iter().map(|p| Self::read(Some(p))).collect()
    }

    /// The format the input is written in: JSON if it starts with `{` or `[`.
    pub(crate) fn format(&self) -> Format {
        match self.text.trim_start().chars().next() {
            Some('{' | '[') => Format::Json,
            _ => Format::Yaml,
        }
    }

    /// Every non-empty document with its index: a YAML multi-document stream, or a stream of
    /// JSON values one after the other (`{…}{…}` or one per line), as kubeseal reads them.
    /// Input that starts like JSON but is not (YAML's flow style, `{a: b}`) is read as YAML.
    pub(crate) fn documents(&self) -> Result<Vec<(usize, Doc)>> {
        if self.format() == Format::Json {
            // Straight into documents: their mappings keep the file's key order.
            let mut stream = serde_json::Deserializer::from_str(&self.text).into_iter::<Doc>();
            if let Some(Ok(first)) = stream.next() {
                let mut values = vec![(0, first)];
                for (index, value) in stream.enumerate() {
                    let value = value.with_context(|| {
                        format!(
                            "failed to parse document {} of {} as JSON",
                            index + 2,
                            self.source
                        )
                    })?;
                    values.push((index + 1, value));
                }
                values.retain(|(_, v)| !v.is_null());
                return Ok(values);
            }
        }
        let documents: Vec<Doc> = crate::yaml::from_multiple(&self.text).map_err(|error| {
            let what = match error.location() {
                Some(at) => format!("document {}", document_at(&self.text, at.line())),
                None => "a document".to_owned(),
            };
            anyhow::Error::new(error).context(format!(
                "failed to parse {what} of {} as YAML or JSON",
                self.source
            ))
        })?;
        Ok(documents
            .into_iter()
            .enumerate()
            .filter(|(_, value)| !value.is_null())
            .collect())
    }

    /// Parses every non-empty document as a `kind` object (`Secret`, `SealedSecret`).
    /// A `v1 List` is flattened into its items.
    pub(crate) fn objects<T: DeserializeOwned>(
        &self,
        kind: &str,
        api_version: &str,
    ) -> Result<Vec<T>> {
        let mut values = Vec::new();
        for (index, value) in self.documents()? {
            if value.get("kind").and_then(|k| k.as_str()) == Some("List") {
                let items = value
                    .get("items")
                    .and_then(|i| i.as_sequence())
                    .cloned()
                    .unwrap_or_default();
                values.extend(items.into_iter().map(|item| (index, item)));
            } else {
                values.push((index, value));
            }
        }
        if values.is_empty() {
            bail!("no {kind} found in {}: the input is empty", self.source);
        }
        values
            .into_iter()
            .map(|(index, mut value)| {
                let doc = index + 1;
                let Some(map) = value.as_mapping_mut() else {
                    bail!("document {doc} of {} is not an object", self.source);
                };
                match map.get("kind").and_then(|k| k.as_str()) {
                    Some(k) if k == kind => {}
                    Some(other) => bail!(
                        "document {doc} of {} is a {other}, expected a {kind}",
                        self.source
                    ),
                    None => {
                        map.insert("kind".into(), kind.into());
                    }
                }
                if kind == "Secret" {
                    check_secret_data(map).with_context(|| {
                        format!("document {doc} of {} is not a valid Secret", self.source)
                    })?;
                }
                if !map.contains_key("apiVersion") {
                    map.insert("apiVersion".into(), api_version.into());
                }
                value.to_typed().with_context(|| {
                    format!("document {doc} of {} is not a valid {kind}", self.source)
                })
            })
            .collect()
    }
}

/// The number (from 1) of the YAML document holding `line` (from 1): one more than the `---`
/// markers above it, less one when the stream starts with a marker.
pub(crate) fn document_at(text: &str, line: u64) -> usize {
    let mut markers = 0;
    let mut content_before_first_marker = false;
    for text_line in text
        .lines()
        .take(usize::try_from(line).unwrap_or(usize::MAX))
    {
        let is_marker =
            text_line == "---" || text_line.starts_with("--- ") || text_line.starts_with("---\t");
        if is_marker {
            markers += 1;
        } else if markers == 0 {
            let trimmed = text_line.trim();
            if !trimmed.is_empty() && !trimmed.starts_with('#') && !trimmed.starts_with('%') {
                content_before_first_marker = true;
            }
        }
    }
    if markers == 0 || content_before_first_marker {
        markers + 1
    } else {
        markers
    }
}

/// The format a file name asks for: `.yaml`/`.yml` YAML, `.json` JSON.
pub(crate) fn format_for_path(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "yaml" | "yml" => Some(Format::Yaml),
        "json" => Some(Format::Json),
        _ => None,
    }
}

/// A file of SealedSecrets edited in place: the documents as parsed values (so unknown
/// fields and key order survive), their typed view, and the file's format.
pub(crate) struct SealedFile {
    pub(crate) format: Format,
    pub(crate) values: Vec<Doc>,
    pub(crate) sealed: Vec<kseal_api::SealedSecret>,
}

impl SealedFile {
    /// Parses every document of `input` (no `v1 List`: items could not be written back).
    pub(crate) fn parse(input: &Input) -> Result<Self> {
        let mut values = Vec::new();
        for (_, value) in input.documents()? {
            if value.get("kind").and_then(|k| k.as_str()) == Some("List") {
                bail!(
                    "{} is a v1 List: split it into SealedSecret documents first",
                    input.source
                );
            }
            values.push(value);
        }
        let sealed: Vec<kseal_api::SealedSecret> =
            input.objects("SealedSecret", kseal_api::constants::API_VERSION)?;
        if sealed.len() != values.len() {
            bail!("{} could not be read document by document", input.source);
        }
        Ok(Self {
            format: input.format(),
            values,
            sealed,
        })
    }

    /// Reads a file that must hold exactly one SealedSecret.
    pub(crate) fn read_one(path: &Path) -> Result<Self> {
        let input = Input::read(Some(path))?;
        let file = Self::parse(&input)?;
        if file.values.len() != 1 {
            bail!(
                "`{}` holds {}; exactly one is needed here",
                path.display(),
                crate::text::count(file.values.len(), "SealedSecret")
            );
        }
        Ok(file)
    }

    /// The documents rendered in the file's format.
    pub(crate) fn render(&self) -> Result<String> {
        render(&self.values, self.format)
    }
}

/// The mapping at `path` inside `value`, created (empty) where missing.
pub(crate) fn mapping_at<'a>(value: &'a mut Doc, path: &[&str]) -> Result<&'a mut Mapping> {
    let mut current = value;
    for (depth, key) in path.iter().enumerate() {
        let map = current
            .as_mapping_mut()
            .with_context(|| format!("`{}` is not an object", path[..depth].join(".")))?;
        let entry = map
            .entry((*key).to_owned())
            .or_insert_with(|| Doc::Mapping(Mapping::new()));
        if entry.is_null() {
            *entry = Doc::Mapping(Mapping::new());
        }
        current = entry;
    }
    current
        .as_mapping_mut()
        .with_context(|| format!("`{}` is not an object", path.join(".")))
}

/// The error for input that is not UTF-8: names the document and the field holding the first
/// bad bytes (found by parsing a copy where each bad sequence is replaced by a marker
/// character the text does not otherwise contain), and the line.
fn not_utf8(bytes: &[u8], error: std::str::Utf8Error, source: Source) -> anyhow::Error {
    let line = bytes[..error.valid_up_to()]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1;
    let lossy = String::from_utf8_lossy(bytes);
    // Private-use characters: a manifest that holds all of them is not worth a better message.
    let marker = ['\u{F8FF}', '\u{E000}', '\u{F0000}', '\u{10FFFD}']
        .into_iter()
        .find(|m| !lossy.contains(*m));
    let located = marker.and_then(|marker| {
        let mut text = String::with_capacity(bytes.len());
        for chunk in bytes.utf8_chunks() {
            text.push_str(chunk.valid());
            if !chunk.invalid().is_empty() {
                text.push(marker);
            }
        }
        let input = Input {
            source: source.clone(),
            text,
        };
        input
            .documents()
            .ok()?
            .into_iter()
            .find_map(|(index, value)| {
                let mut path = Vec::new();
                find_marker(&value, marker, &mut path).then(|| (index, describe_field(&path)))
            })
    });
    match located {
        Some((index, field)) => {
            let hint = if field.starts_with("stringData") {
                "stringData takes text only: put binary values base64-encoded under data, or \
                 convert the file to UTF-8"
            } else {
                "convert the file to UTF-8"
            };
            anyhow::anyhow!(
                "document {} of {source} is not valid UTF-8 text: {field} (line {line}) holds \
                 bytes that are not UTF-8; {hint}",
                index + 1
            )
        }
        None => anyhow::anyhow!(
            "{source} is not valid UTF-8 text (line {line}, byte {})",
            error.valid_up_to() + 1
        ),
    }
}

/// Whether `marker` occurs in `value` (keys included); `path` is then where.
fn find_marker(value: &Doc, marker: char, path: &mut Vec<String>) -> bool {
    match value {
        Doc::String(s) => s.contains(marker),
        Doc::Sequence(items) => items.iter().enumerate().any(|(i, item)| {
            path.push(format!("[{i}]"));
            let found = find_marker(item, marker, path);
            if !found {
                path.pop();
            }
            found
        }),
        Doc::Mapping(map) => map.iter().any(|(key, v)| {
            path.push(key.replace(marker, "\u{FFFD}"));
            let found = key.contains(marker) || find_marker(v, marker, path);
            if !found {
                path.pop();
            }
            found
        }),
        _ => false,
    }
}

/// "stringData item `password`", or "field `metadata.name`".
fn describe_field(path: &[String]) -> String {
    match path {
        [map, item] if map == "stringData" || map == "data" => format!("{map} item `{item}`"),
        _ => {
            let mut text = String::new();
            for segment in path {
                if !text.is_empty() && !segment.starts_with('[') {
                    text.push('.');
                }
                text.push_str(segment);
            }
            format!("field `{text}`")
        }
    }
}

/// Names the item of a Secret's `data` that is not base64 (serde's own error cannot).
fn check_secret_data(map: &Mapping) -> Result<()> {
    use base64::Engine as _;
    let Some(data) = map.get("data").and_then(|d| d.as_mapping()) else {
        return Ok(());
    };
    for (key, value) in data {
        match value {
            Doc::String(text) => {
                if base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .is_err()
                {
                    bail!("data item `{key}` is not valid base64 (use stringData for plain text)");
                }
            }
            Doc::Null => {}
            _ => bail!("data item `{key}` must be a base64 string"),
        }
    }
    Ok(())
}

/// Renders objects in `format`: YAML documents each prefixed by `---`, or indented JSON
/// objects each followed by a newline (as kubeseal prints them).
pub(crate) fn render<T: Serialize>(objects: &[T], format: Format) -> Result<String> {
    let mut out = String::new();
    for object in objects {
        match format {
            Format::Yaml => {
                out.push_str("---\n");
                out.push_str(&crate::yaml::to_string(object).context("failed to render YAML")?);
            }
            Format::Json => {
                out.push_str(
                    &serde_json::to_string_pretty(object).context("failed to render JSON")?,
                );
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// Writes `contents` to `path` atomically (a temporary file in the same directory, then a
/// rename), so a failure never leaves a half-written file behind. `private` makes the file
/// readable by its owner only.
pub(crate) fn write_atomic(path: &Path, contents: &[u8], private: bool) -> Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Like `kubectl` plugins and `mkdir -p`: `-w clusters/prod/db.yaml` in a new repository
    // creates `clusters/prod`.
    if !dir.exists() {
        fs_err::create_dir_all(dir)
            .with_context(|| format!("failed to create the directory for `{}`", path.display()))?;
        eprintln!("created directory `{}`", dir.display());
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".kseal-")
        .tempfile_in(dir)
        .with_context(|| format!("failed to create a temporary file in `{}`", dir.display()))?;
    if !private {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))
                .with_context(|| format!("failed to set permissions on `{}`", path.display()))?;
        }
    }
    tmp.write_all(contents)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(())
}

/// The objects of one document: the items of a `List`, else the document itself.
pub(crate) fn list_items(value: serde_json::Value) -> Vec<serde_json::Value> {
    if value.get("kind").and_then(|k| k.as_str()) == Some("List") {
        value
            .get("items")
            .and_then(|i| i.as_array())
            .cloned()
            .unwrap_or_default()
    } else {
        vec![value]
    }
}

/// The SealedSecrets of a manifest file's `text` (in `List`s too); none when it holds none.
/// A document that does not parse is named, `failed to parse document N of `PATH``, followed
/// by `suffix`.
pub(crate) fn sealed_secrets_in(
    path: &Path,
    text: &str,
    suffix: &str,
) -> Result<Vec<kseal_api::SealedSecret>> {
    if !text.contains("SealedSecret") {
        return Ok(Vec::new());
    }
    let documents: Vec<serde_json::Value> = crate::yaml::from_multiple(text).map_err(|error| {
        let what = match error.location() {
            Some(at) => format!("document {}", document_at(text, at.line())),
            None => "a document".to_owned(),
        };
        anyhow::Error::new(error).context(format!(
            "failed to parse {what} of `{}`{suffix}",
            path.display()
        ))
    })?;
    let mut out = Vec::new();
    for (i, value) in documents.into_iter().enumerate() {
        let values = crate::manifest::list_items(value);
        for value in values {
            if value.get("kind").and_then(|k| k.as_str()) == Some(kseal_api::constants::KIND) {
                out.push(serde_json::from_value(value).with_context(|| {
                    format!(
                        "document {} of `{}` is not a valid SealedSecret",
                        i + 1,
                        path.display()
                    )
                })?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_for(bytes: &[u8]) -> String {
        let e = String::from_utf8(bytes.to_vec()).unwrap_err();
        not_utf8(e.as_bytes(), e.utf8_error(), Source::Stdin).to_string()
    }

    #[test]
    fn non_utf8_bytes_outside_string_data_name_the_field() {
        let err = error_for(
            b"kind: Secret\nmetadata:\n  name: x\n  annotations:\n    note: caf\xe9\nstringData:\n  a: b\n",
        );
        assert_eq!(
            err,
            "document 1 of standard input is not valid UTF-8 text: field \
             `metadata.annotations.note` (line 5) holds bytes that are not UTF-8; convert the \
             file to UTF-8"
        );
        // Unparseable once repaired: the line and byte still point at it.
        let err = error_for(b"kind: [\xff\n");
        assert_eq!(
            err,
            "standard input is not valid UTF-8 text (line 1, byte 8)"
        );
    }

    #[test]
    fn yaml_errors_name_the_document_and_the_line() {
        for (text, expected) in [
            ("a: [1\n", "document 1 of"),
            ("---\na: 1\n---\nb: [1\n", "document 2 of"),
            ("a: 1\n---\nb: 2\n---\nc: [1\n", "document 3 of"),
        ] {
            let input = Input {
                source: Source::Stdin,
                text: text.to_owned(),
            };
            let error = format!("{:#}", input.documents().unwrap_err());
            assert!(error.contains(expected), "{text:?}: {error}");
            assert!(error.contains("line "), "{text:?}: {error}");
        }
    }

    #[test]
    fn yaml_documents_keep_key_order_and_render_sealed_values_on_one_line() {
        let long = "A".repeat(400);
        let input = Input {
            source: Source::Stdin,
            text: format!(
                "# dropped\n---\nz: &v yes\na: *v\nspec:\n  encryptedData:\n    x: {long}\n  note: |\n    two\n    lines\n"
            ),
        };
        let docs = input.documents().unwrap();
        assert_eq!(
            render(&[&docs[0].1], Format::Yaml).unwrap(),
            format!(
                "---\nz: \"yes\"\na: \"yes\"\nspec:\n  encryptedData:\n    x: {long}\n  note: |\n    two\n    lines\n"
            )
        );
    }

    #[test]
    fn a_json_stream_keeps_document_numbers() {
        let input = Input {
            source: Source::Stdin,
            text: "{\"a\": 1} null {\"b\": 2}".to_owned(),
        };
        let indexes: Vec<usize> = input
            .documents()
            .unwrap()
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        assert_eq!(indexes, [0, 2]);
        // Key order is the file's (set, --merge-into and reseal rewrite files in place).
        let input = Input {
            source: Source::Stdin,
            text: "{\"z\": 1, \"a\": 2}{\"m\": 3}".to_owned(),
        };
        let docs = input.documents().unwrap();
        assert_eq!(
            render(&[&docs[0].1], Format::Json).unwrap(),
            "{\n  \"z\": 1,\n  \"a\": 2\n}\n"
        );
        // YAML flow style that is not JSON is still YAML.
        let input = Input {
            source: Source::Stdin,
            text: "{a: 1}".to_owned(),
        };
        assert_eq!(input.documents().unwrap().len(), 1);
    }
}
