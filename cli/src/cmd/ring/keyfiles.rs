//! Key files the ring commands push and import: PEM keys, key Secret backups (with the
//! active marker of kseal's mirrors) and JSON key pairs.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use kseal_keys::KeyPair;
use kseal_keystore::KeyEntry;

use crate::keysource::keys::{LoadedKey, Marker, read_key_pairs, read_keys};

/// The key of a `{"crt","key"}` JSON file: the reference sample's secret as `aws
/// secretsmanager get-secret-value --query SecretString --output text` prints it (raw newlines
/// inside the strings accepted), or the JSON string `--output json` prints. `None` when the
/// file is something else, e.g. a key Secret as `kubectl get secret -o json` prints it.
pub(super) fn read_json_pair(path: &Path) -> Result<Option<KeyPair>> {
    let text = zeroize::Zeroizing::new(
        fs_err::read_to_string(path).context("failed to read a private key file")?,
    );
    let mut object = zeroize::Zeroizing::new(text.trim().to_owned());
    if object.starts_with('"') {
        match serde_json::from_str::<String>(&object) {
            Ok(inner) => {
                let inner = zeroize::Zeroizing::new(inner);
                object = zeroize::Zeroizing::new(inner.trim().to_owned());
            }
            Err(_) => return Ok(None),
        }
    }
    if !object.starts_with('{') {
        return Ok(None);
    }
    let what = format!("`{}`", path.display());
    match KeyEntry::parse(&object, &what) {
        Ok(entry) => Ok(Some(entry.to_pair(&what)?)),
        // A manifest (`"kind"`) or other JSON: read as key Secrets, which explains itself.
        Err(_) if object.contains("\"kind\"") || !object.contains("crt\"") => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Key pairs of a file or a key directory (`tls.key` + `tls.crt`).
pub(super) fn read_pairs(path: &Path) -> Result<Vec<KeyPair>> {
    Ok(read_loaded(path)?.into_iter().map(|k| k.pair).collect())
}

/// The keys of `path` with what a backup says of them (the `kseal.dev/active` marker of a
/// controller's mirror Secrets), for import to keep the ring's sealing key.
pub(super) fn read_loaded(path: &Path) -> Result<Vec<LoadedKey>> {
    let plain = |pair: KeyPair| LoadedKey {
        pair,
        marker: Marker::Unmarked,
        origin: format!("`{}`", path.display()),
    };
    let pairs = if path.is_dir() {
        let key = path.join("tls.key");
        if !key.is_file() {
            bail!(
                "`{}` has no tls.key (expected a directory as `kseal keys generate --out-dir` writes)",
                path.display()
            );
        }
        read_key_pairs(&key)?.into_iter().map(plain).collect()
    } else if let Some(pair) = read_json_pair(path)? {
        vec![plain(pair)]
    } else {
        read_keys(path)?
    };
    for key in &pairs {
        if key.pair.certificate().common_name() == Some("kseal-recovery") {
            bail!(
                "`{}` holds a private key without its certificate: put the certificate after the \
                 key in the same file, or beside it as tls.crt",
                path.display()
            );
        }
    }
    Ok(pairs)
}
