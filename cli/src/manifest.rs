//! Reading and writing Kubernetes manifests: YAML multi-document streams and JSON.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::Format;

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
    /// Reads `path`, or stdin when it is absent or `-`.
    pub(crate) fn read(path: Option<&Path>) -> Result<Self> {
        match path {
            Some(p) if p != Path::new("-") => {
                let text = fs_err::read_to_string(p)?;
                Ok(Self {
                    source: Source::File(p.to_owned()),
                    text,
                })
            }
            _ => {
                if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                    eprintln!(
                        "(reading the manifest from standard input; use -f FILE to name a file)"
                    );
                }
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("failed to read standard input as UTF-8 text")?;
                Ok(Self {
                    source: Source::Stdin,
                    text,
                })
            }
        }
    }

    /// The format the input is written in: JSON if it starts with `{` or `[`.
    pub(crate) fn format(&self) -> Format {
        match self.text.trim_start().chars().next() {
            Some('{' | '[') => Format::Json,
            _ => Format::Yaml,
        }
    }

    /// Parses every non-empty document as a `kind` object (`Secret`, `SealedSecret`).
    /// A `v1 List` is flattened into its items.
    pub(crate) fn objects<T: DeserializeOwned>(
        &self,
        kind: &str,
        api_version: &str,
    ) -> Result<Vec<T>> {
        let mut values = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(&self.text).enumerate() {
            let value = serde_yaml::Value::deserialize(document).with_context(|| {
                format!(
                    "failed to parse document {} of {} as YAML or JSON",
                    index + 1,
                    self.source
                )
            })?;
            if value.is_null() {
                continue;
            }
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
                serde_yaml::from_value(value).with_context(|| {
                    format!("document {doc} of {} is not a valid {kind}", self.source)
                })
            })
            .collect()
    }
}

use serde::Deserialize as _;

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
    pub(crate) values: Vec<serde_yaml::Value>,
    pub(crate) sealed: Vec<kseal_api::SealedSecret>,
}

impl SealedFile {
    /// Parses every document of `input` (no `v1 List`: items could not be written back).
    pub(crate) fn parse(input: &Input) -> Result<Self> {
        let mut values = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(&input.text).enumerate() {
            let value = serde_yaml::Value::deserialize(document).with_context(|| {
                format!(
                    "failed to parse document {} of {} as YAML or JSON",
                    index + 1,
                    input.source
                )
            })?;
            if value.is_null() {
                continue;
            }
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
                "`{}` holds {} SealedSecrets; exactly one is needed here",
                path.display(),
                file.values.len()
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
pub(crate) fn mapping_at<'a>(
    value: &'a mut serde_yaml::Value,
    path: &[&str],
) -> Result<&'a mut serde_yaml::Mapping> {
    let mut current = value;
    for (depth, key) in path.iter().enumerate() {
        let map = current
            .as_mapping_mut()
            .with_context(|| format!("`{}` is not an object", path[..depth].join(".")))?;
        let entry = map
            .entry(serde_yaml::Value::from(*key))
            .or_insert_with(|| serde_yaml::Value::Mapping(serde_yaml::Mapping::new()));
        if entry.is_null() {
            *entry = serde_yaml::Value::Mapping(serde_yaml::Mapping::new());
        }
        current = entry;
    }
    current
        .as_mapping_mut()
        .with_context(|| format!("`{}` is not an object", path.join(".")))
}

/// Names the item of a Secret's `data` that is not base64 (serde's own error cannot).
fn check_secret_data(map: &serde_yaml::Mapping) -> Result<()> {
    use base64::Engine as _;
    let Some(data) = map.get("data").and_then(|d| d.as_mapping()) else {
        return Ok(());
    };
    for (key, value) in data {
        let key = key.as_str().unwrap_or("<non-string key>");
        match value {
            serde_yaml::Value::String(text) => {
                if base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .is_err()
                {
                    bail!("data item `{key}` is not valid base64 (use stringData for plain text)");
                }
            }
            serde_yaml::Value::Null => {}
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
                out.push_str(&serde_yaml::to_string(object).context("failed to render YAML")?);
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
