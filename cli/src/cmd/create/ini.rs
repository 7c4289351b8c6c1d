//! The INI rules of AWS's shared credentials file: a profile's keys from its section.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use kseal_keys::Plaintext;

/// Static AWS credentials.
pub(super) struct AwsKeys {
    pub(super) access_key_id: String,
    pub(super) secret_access_key: Plaintext,
    pub(super) session_token: Option<Plaintext>,
    pub(super) origin: String,
}

/// Reads one profile of an AWS shared credentials file (INI).
pub(super) fn read_profile(path: &Path, profile: &str) -> Result<AwsKeys> {
    let text = Plaintext::new(
        fs_err::read(path).context("failed to read the AWS shared credentials file")?,
    );
    let text = std::str::from_utf8(text.expose())
        .with_context(|| format!("`{}` is not UTF-8 text", path.display()))?;
    let mut section: Option<&str> = None;
    let mut values: BTreeMap<&str, &str> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            section = Some(name.strip_prefix("profile ").unwrap_or(name).trim());
            continue;
        }
        if section == Some(profile)
            && let Some((k, v)) = line.split_once('=')
        {
            values.insert(k.trim(), v.trim());
        }
    }
    let get = |k: &str| values.get(k).copied().filter(|v| !v.is_empty());
    let (Some(id), Some(secret)) = (get("aws_access_key_id"), get("aws_secret_access_key")) else {
        bail!(
            "profile `{profile}` in `{}` has no aws_access_key_id and aws_secret_access_key",
            path.display()
        );
    };
    Ok(AwsKeys {
        access_key_id: id.to_owned(),
        secret_access_key: Plaintext::new(secret.as_bytes().to_vec()),
        session_token: get("aws_session_token").map(|t| Plaintext::new(t.as_bytes().to_vec())),
        origin: format!("profile `{profile}`"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_read_from_ini_sections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials");
        fs_err::write(
            &path,
            "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s1\n\n[profile ci]\naws_access_key_id=ASIACI\naws_secret_access_key=s2\naws_session_token=t2\n",
        )
        .unwrap();
        let ci = read_profile(&path, "ci").unwrap();
        assert_eq!(ci.access_key_id, "ASIACI");
        assert_eq!(ci.secret_access_key.expose(), b"s2");
        assert_eq!(ci.session_token.unwrap().expose(), b"t2");
        let err = read_profile(&path, "nope").err().unwrap().to_string();
        assert!(err.starts_with("profile `nope`"), "{err}");
    }
}
