//! The directory store: the same documents as files, for air-gapped clusters and for rings
//! mounted by the Secrets Store CSI driver.
//!
//! Layout under the ring directory:
//!
//! ```text
//! index.json              the index (same JSON as R/index)
//! keys/<kid>/tls.crt      a key's certificate
//! keys/<kid>/tls.key      its private key (0600)
//! keys/<kid>              or: one file holding {"crt","key"} (as the CSI driver writes R/keys/<kid>)
//! retired/<kid>-<time>/   keys removed by `kseal keys retire`
//! ```
//!
//! Writes are atomic (temporary file, then rename) and the index is swapped under an exclusive
//! lock on `.lock`, so two writers on one machine (or one NFS share with working locks) never
//! lose a key.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use crate::contract::KeyEntry;
use crate::{Error, Put, Result, Version};

const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";

/// A ring in a directory.
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

fn hash(text: &str) -> Version {
    Version(hex::encode(Sha256::digest(text.as_bytes())))
}

impl DirStore {
    /// The ring in `root` (created on first write).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `directory /path/to/ring`.
    pub fn describe(&self) -> String {
        format!("directory {}", self.root.display())
    }

    fn path(&self, name: &str) -> Result<PathBuf> {
        let ok = !name.is_empty()
            && Path::new(name)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !ok {
            return Err(Error::Refused(format!(
                "{name:?} is not a name inside the ring directory"
            )));
        }
        Ok(self.root.join(name))
    }

    pub(crate) fn read(&self, name: &str) -> Result<Option<(Zeroizing<String>, Version)>> {
        let path = self.path(name)?;
        let text = match fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
            Ok(m) if m.is_dir() => {
                let crt_path = path.join(CERT_FILE);
                let key_path = path.join(KEY_FILE);
                let crt = fs::read_to_string(&crt_path).map_err(io("read", &crt_path))?;
                let key =
                    Zeroizing::new(fs::read_to_string(&key_path).map_err(io("read", &key_path))?);
                KeyEntry::from_pem(crt, key).to_json()
            }
            Ok(_) => Zeroizing::new(fs::read_to_string(&path).map_err(io("read", &path))?),
        };
        let version = hash(&text);
        Ok(Some((text, version)))
    }

    pub(crate) fn current_version(&self, name: &str) -> Result<Option<Version>> {
        Ok(self.read(name)?.map(|(_, v)| v))
    }

    fn ensure_root(&self) -> Result<()> {
        fs::create_dir_all(&self.root).map_err(io("create", &self.root))
    }

    fn lock(&self) -> Result<fs::File> {
        self.ensure_root()?;
        let path = self.root.join(".lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        file.lock().map_err(io("lock", &path))?;
        Ok(file)
    }

    pub(crate) fn compare_and_swap(
        &self,
        name: &str,
        text: &str,
        expected: Option<&Version>,
    ) -> Result<Version> {
        let _lock = self.lock()?;
        let current = self.current_version(name)?;
        if current.as_ref() != expected {
            return Err(Error::Conflict {
                what: self.path(name)?.display().to_string(),
            });
        }
        write_atomic(&self.path(name)?, text.as_bytes(), false)?;
        Ok(hash(text))
    }

    pub(crate) fn create_immutable(
        &self,
        name: &str,
        text: &str,
        same: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Put> {
        let _lock = self.lock()?;
        let path = self.path(name)?;
        if let Some((existing, _)) = self.read(name)? {
            return if same(&existing) {
                Ok(Put::Existed)
            } else {
                Err(Error::Refused(format!(
                    "{} already exists and holds another key; kseal never overwrites a key",
                    path.display()
                )))
            };
        }
        let entry = KeyEntry::parse(text, name)?;
        let parent = path.parent().unwrap_or(&self.root);
        fs::create_dir_all(parent).map_err(io("create", parent))?;
        // A private (0700) directory of an unguessable name, filled, then renamed into place:
        // readers see the key directory whole or not at all.
        let staging = temp_builder(".tmp-key-", 0o700)
            .tempdir_in(parent)
            .map_err(io("create a staging directory in", parent))?;
        write_atomic(
            &staging.path().join(CERT_FILE),
            entry.certificate_pem().as_bytes(),
            false,
        )?;
        write_atomic(
            &staging.path().join(KEY_FILE),
            entry.private_key_pem().as_bytes(),
            true,
        )?;
        let staging = staging.keep();
        if let Err(e) = fs::rename(&staging, &path) {
            let _ = fs::remove_dir_all(&staging);
            return Err(io("rename into place", &path)(e));
        }
        Ok(Put::Created)
    }

    pub(crate) fn put(&self, name: &str, text: &str) -> Result<()> {
        let _lock = self.lock()?;
        write_atomic(&self.path(name)?, text.as_bytes(), true)
    }

    pub(crate) fn schedule_deletion(&self, name: &str) -> Result<()> {
        let _lock = self.lock()?;
        let path = self.path(name)?;
        let retired = self.root.join("retired");
        fs::create_dir_all(&retired).map_err(io("create", &retired))?;
        let stamp = jiff::Timestamp::now().as_second();
        let base = path.file_name().and_then(|n| n.to_str()).unwrap_or("key");
        let to = retired.join(format!("{base}-{stamp}"));
        fs::rename(&path, &to).map_err(io("move to retired/", &path))
    }
}

/// Writes `bytes` to a new temporary file beside `path` and renames it into place. The file
/// is created exclusively under an unguessable name, with its final mode from the start
/// (0600 when `private`, else 0644), so a private key is never readable by others, not even
/// for a moment, and no symbolic link planted beside it is followed.
fn write_atomic(path: &Path, bytes: &[u8], private: bool) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io("create", dir))?;
    let mut file = temp_builder(".tmp-", if private { 0o600 } else { 0o644 })
        .tempfile_in(dir)
        .map_err(io("create a temporary file in", dir))?;
    file.write_all(bytes).map_err(io("write", file.path()))?;
    file.as_file().sync_all().map_err(io("sync", file.path()))?;
    file.persist(path)
        .map_err(|e| io("rename into place", path)(e.error))?;
    Ok(())
}

/// A temporary file or directory named `prefix` plus random characters, created exclusively
/// with `mode` (on Unix; elsewhere the platform's default).
fn temp_builder(prefix: &'static str, mode: u32) -> tempfile::Builder<'static, 'static> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(fs::Permissions::from_mode(mode));
    }
    #[cfg(not(unix))]
    let _ = mode;
    builder
}
