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
