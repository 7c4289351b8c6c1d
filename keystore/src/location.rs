//! Where a ring lives: `secretsmanager://R[?region=…]`, a bare prefix `R`, or
//! `dir:PATH[?insecure-perms=true]`.

use std::fmt;
use std::path::PathBuf;

use crate::{Error, Result};

/// The default ring prefix.
pub const DEFAULT_RING: &str = "kseal/fleet";

/// A ring's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// AWS Secrets Manager, secrets named `<prefix>/index` and `<prefix>/keys/<kid>`.
    SecretsManager {
        /// The ring prefix, e.g. `kseal/fleet`.
        prefix: String,
        /// A region that overrides the configured one (`?region=`).
        region: Option<String>,
    },
    /// A directory holding `index.json` and `keys/<kid>/`.
    Directory {
        /// The directory.
        path: PathBuf,
        /// Accept files and directories that group or others may write, and private keys they
        /// may read (`?insecure-perms=true`; see [`crate::DirStore::insecure_perms`]).
        insecure_perms: bool,
    },
}

impl Location {
    /// The ring's name: its Secrets Manager prefix, or [`DEFAULT_RING`] for a directory ring
    /// (what [`crate::Ring::name`] returns, and what its index and mirrors carry).
    pub fn ring_name(&self) -> &str {
        match self {
            Location::SecretsManager { prefix, .. } => prefix,
            Location::Directory { .. } => DEFAULT_RING,
        }
    }

    /// Parses `secretsmanager://kseal/fleet?region=eu-west-1`, `kseal/fleet` (Secrets Manager),
    /// `dir:///var/run/kseal/ring` or `dir:relative/path`. A directory may end in
    /// `?insecure-perms=true` (any other `?` is part of the path, as it always was).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Location {
            location: text.to_owned(),
            reason: reason.to_owned(),
        };
        let text_trimmed = text.trim();
        if let Some(rest) = text_trimmed.strip_prefix("dir:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let (path, insecure_perms) = match path.rsplit_once('?') {
                Some((path, "insecure-perms=true")) => (path, true),
                Some((path, "insecure-perms=false")) => (path, false),
                _ => (path, false),
            };
            if path.is_empty() {
                return Err(bad("the directory is empty (use dir:///absolute/path)"));
            }
            return Ok(Location::Directory {
                path: PathBuf::from(path),
                insecure_perms,
            });
        }
        let (rest, scheme) = match text_trimmed.split_once("://") {
            Some(("secretsmanager" | "asm", rest)) => (rest, true),
            Some((scheme, _)) => {
                return Err(bad(&format!(
                    "unknown scheme {scheme:?}: use secretsmanager://PREFIX or dir:///PATH"
                )));
            }
            None => (text_trimmed, false),
        };
        let (prefix, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let mut region = None;
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("region", r)) if !r.is_empty() => region = Some(r.to_owned()),
                _ => {
                    return Err(bad(&format!(
                        "unknown parameter {pair:?}: only ?region=REGION is understood"
                    )));
                }
            }
        }
        let prefix = prefix.trim_end_matches('/');
        validate_prefix(prefix).map_err(|reason| bad(&reason))?;
        let _ = scheme;
        Ok(Location::SecretsManager {
            prefix: prefix.to_owned(),
            region,
        })
    }
}

/// Secrets Manager names: 1–512 of `A-Za-z0-9/_+=.@-`; the ring adds at most 70 characters.
fn validate_prefix(prefix: &str) -> std::result::Result<(), String> {
    if prefix.is_empty() {
        return Err("the ring prefix is empty".into());
    }
    if prefix.len() > 400 {
        return Err("the ring prefix is longer than 400 characters".into());
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "/_+=.@-".contains(*c)))
    {
        return Err(format!(
            "{c:?} is not allowed in a Secrets Manager name (letters, digits and /_+=.@- are)"
        ));
    }
    if prefix.split('/').any(str::is_empty) {
        return Err("the ring prefix has an empty path segment".into());
    }
    Ok(())
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::SecretsManager {
                prefix,
                region: Some(r),
            } => write!(f, "secretsmanager://{prefix}?region={r}"),
            Location::SecretsManager { prefix, .. } => write!(f, "secretsmanager://{prefix}"),
            Location::Directory {
                path,
                insecure_perms,
            } => {
                write!(f, "dir://{}", path.display())?;
                if *insecure_perms {
                    f.write_str("?insecure-perms=true")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            Location::parse("kseal/fleet").unwrap(),
            Location::SecretsManager {
                prefix: "kseal/fleet".into(),
                region: None
            }
        );
        assert_eq!(
            Location::parse("secretsmanager://kseal/fleet/?region=eu-west-1").unwrap(),
            Location::SecretsManager {
                prefix: "kseal/fleet".into(),
                region: Some("eu-west-1".into())
            }
        );
        assert_eq!(
            Location::parse("dir:///var/run/ring").unwrap(),
            Location::Directory {
                path: "/var/run/ring".into(),
                insecure_perms: false
            }
        );
        assert_eq!(
            Location::parse("dir:///var/run/ring?insecure-perms=true").unwrap(),
            Location::Directory {
                path: "/var/run/ring".into(),
                insecure_perms: true
            }
        );
        assert_eq!(
            Location::parse("dir:ring").unwrap(),
            Location::Directory {
                path: "ring".into(),
                insecure_perms: false
            }
        );
    }

    #[test]
    fn rejects_what_secrets_manager_would() {
        for bad in [
            "",
            "s3://bucket",
            "kseal//fleet",
            "kseal fleet",
            "secretsmanager://x?foo=1",
            "dir:",
            "dir:?insecure-perms=true",
        ] {
            let err = Location::parse(bad).unwrap_err();
            assert!(err.to_string().contains("invalid ring location"), "{err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "secretsmanager://a/b?region=us-east-1",
            "dir:///x/y",
            "dir:///x/y?insecure-perms=true",
        ] {
            assert_eq!(Location::parse(text).unwrap().to_string(), text);
        }
    }
}
