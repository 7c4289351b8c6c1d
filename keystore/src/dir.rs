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
//!
//! The ring is held to ssh's standard for `~/.ssh`: its files and directories must not be
//! writable by group or others, private keys must not be readable by them, every name is a
//! regular file or directory of at most [`MAX_FILE_BYTES`], and no symbolic link leads out of
//! the ring directory (links inside it, as the CSI driver's `..data` indirection, are fine).
//! All file I/O runs off the async runtime, bounded by [`DIR_TIMEOUT`].

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use crate::contract::KeyEntry;
use crate::{Error, Put, Result, Version};

const CERT_FILE: &str = "tls.crt";
const KEY_FILE: &str = "tls.key";
const LOCK_FILE: &str = ".lock";
const RETIRED_DIR: &str = "retired";

/// How long one operation on a directory ring may take (including the wait for the index
/// lock) before it fails, so a FIFO or a hung network file system cannot hang its callers.
pub const DIR_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest index or key file read: Secrets Manager's limit for one value.
pub const MAX_FILE_BYTES: u64 = 65_536;

/// How the override is spelled to users, in refusals.
const OVERRIDE: &str = "or pass --insecure-perms (`?insecure-perms=true` in a dir:// URL)";

/// A ring in a directory.
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
    insecure_perms: bool,
    timeout: Duration,
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

fn not_found(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
}

fn hash(text: &str) -> Version {
    Version(hex::encode(Sha256::digest(text.as_bytes())))
}

/// What a name of the ring is on disk, every link on the way resolved.
enum Found {
    Missing,
    /// The entry's real (canonical) path, inside the ring directory, and its metadata.
    Here(PathBuf, fs::Metadata),
}

impl DirStore {
    /// The ring in `root` (created on first write), with strict permission checks and
    /// [`DIR_TIMEOUT`].
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            insecure_perms: false,
            timeout: DIR_TIMEOUT,
        }
    }

    /// Accepts files and directories that group or others may write, and private keys that
    /// they may read (`--insecure-perms`). Symbolic links out of the ring, special files and
    /// oversized files stay refused.
    pub fn insecure_perms(mut self, insecure: bool) -> Self {
        self.insecure_perms = insecure;
        self
    }

    /// Bounds each operation by `timeout` instead of [`DIR_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `directory /path/to/ring`.
    pub fn describe(&self) -> String {
        format!("directory {}", self.root.display())
    }

    /// Runs `op` on a blocking thread, bounded by the store's timeout.
    async fn blocking<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&DirStore) -> Result<T> + Send + 'static,
    {
        let store = self.clone();
        let task = tokio::task::spawn_blocking(move || op(&store));
        match tokio::time::timeout(self.timeout, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(Error::Io {
                action: "finish a file operation in",
                path: self.root.clone(),
                source: std::io::Error::other(join.to_string()),
            }),
            // The thread stays blocked, but the caller is free; a FIFO or a special file is
            // refused before it is opened, so this takes a hung file system.
            Err(_) => Err(Error::Io {
                action: "get an answer in time from",
                path: self.root.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {} s (a file of the ring that never ends, or a hung \
                         file system)",
                        self.timeout.as_secs_f32()
                    ),
                ),
            }),
        }
    }

    pub(crate) async fn read(&self, name: &str) -> Result<Option<(Zeroizing<String>, Version)>> {
        let name = name.to_owned();
        self.blocking(move |s| s.read_now(&name)).await
    }

    pub(crate) async fn current_version(&self, name: &str) -> Result<Option<Version>> {
        Ok(self.read(name).await?.map(|(_, v)| v))
    }

    pub(crate) async fn compare_and_swap(
        &self,
        name: &str,
        text: &str,
        expected: Option<&Version>,
    ) -> Result<Version> {
        let (name, text, expected) = (name.to_owned(), text.to_owned(), expected.cloned());
        self.blocking(move |s| s.compare_and_swap_now(&name, &text, expected.as_ref()))
            .await
    }

    pub(crate) async fn create_immutable(
        &self,
        name: &str,
        text: &str,
        same: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Put> {
        let owned = name.to_owned();
        // `same` is borrowed, so it runs here, between two blocking steps, with the lock held.
        let (lock, existing) = self
            .blocking(move |s| {
                let lock = s.lock()?;
                let existing = s.read_now(&owned)?;
                Ok((lock, existing))
            })
            .await?;
        if let Some((existing, _)) = existing {
            return if same(&existing) {
                Ok(Put::Existed)
            } else {
                Err(Error::Refused(format!(
                    "{} already exists and holds another key; kseal never overwrites a key",
                    self.path(name)?.display()
                )))
            };
        }
        let (name, text) = (name.to_owned(), Zeroizing::new(text.to_owned()));
        self.blocking(move |s| {
            let _lock = lock;
            s.create_now(&name, &text)
        })
        .await
    }

    pub(crate) async fn put(&self, name: &str, text: &str) -> Result<()> {
        let (name, text) = (name.to_owned(), Zeroizing::new(text.to_owned()));
        self.blocking(move |s| {
            let _lock = s.lock()?;
            let (dir, file) = s.writable_parent(&name)?;
            write_atomic(&dir.join(file), text.as_bytes(), true)
        })
        .await
    }

    pub(crate) async fn schedule_deletion(&self, name: &str) -> Result<()> {
        let name = name.to_owned();
        self.blocking(move |s| s.schedule_deletion_now(&name)).await
    }

    /// `name` under the root, refused unless it is a plain relative path.
    fn path(&self, name: &str) -> Result<PathBuf> {
        Ok(self.root.join(relative(name)?))
    }

    /// The ring directory with every link resolved; `None` when it does not exist.
    fn real_root(&self) -> Result<Option<PathBuf>> {
        match fs::canonicalize(&self.root) {
            Ok(root) => Ok(Some(root)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(io("resolve", &self.root)(e)),
        }
    }

    /// Finds `name` inside the ring: a symbolic link on the way may only lead to another place
    /// inside the ring directory (the CSI driver's `..data` links do), never out of it.
    fn locate(&self, name: &str) -> Result<(PathBuf, Found)> {
        let path = self.path(name)?;
        let Some(root) = self.real_root()? else {
            return Ok((path, Found::Missing));
        };
        match fs::symlink_metadata(&path) {
            Err(e) if not_found(&e) => return Ok((path, Found::Missing)),
            Err(e) => return Err(io("inspect", &path)(e)),
            Ok(_) => {}
        }
        let real = match fs::canonicalize(&path) {
            Ok(real) => real,
            Err(e) if not_found(&e) => {
                return Err(Error::Refused(format!(
                    "{} is a symbolic link to nothing",
                    path.display()
                )));
            }
            Err(e) => return Err(io("resolve", &path)(e)),
        };
        if !real.starts_with(&root) || real == root {
            return Err(Error::Refused(format!(
                "{} leads through a symbolic link out of the ring directory {} (to {}): kseal \
                 follows no link out of the ring",
                path.display(),
                root.display(),
                real.display()
            )));
        }
        let meta = fs::symlink_metadata(&real).map_err(io("inspect", &real))?;
        self.check_dirs(&root, &real)?;
        Ok((path, Found::Here(real, meta)))
    }

    /// Refuses a directory between the ring directory (included) and `real` (excluded) that
    /// group or others may write: they could swap the files in it.
    fn check_dirs(&self, root: &Path, real: &Path) -> Result<()> {
        for dir in real.ancestors().skip(1) {
            if !dir.starts_with(root) {
                break;
            }
            let meta = fs::symlink_metadata(dir).map_err(io("inspect", dir))?;
            self.check_mode(dir, &meta, false)?;
        }
        Ok(())
    }

    /// Refuses what group or others may write, and a private key they may read.
    fn check_mode(&self, path: &Path, meta: &fs::Metadata, private: bool) -> Result<()> {
        let Some(mode) = unix_mode(meta) else {
            return Ok(());
        };
        if self.insecure_perms {
            return Ok(());
        }
        let name = path.display();
        if mode & 0o022 != 0 {
            return Err(Error::Refused(format!(
                "{name} has mode {mode:04o}: it must not be writable by group or others \
                 (chmod go-w {name}), {OVERRIDE}"
            )));
        }
        if private && mode & 0o077 != 0 {
            return Err(Error::Refused(format!(
                "{name} has mode {mode:04o}: a private key must not be readable by group or \
                 others (chmod go-rwx {name}), {OVERRIDE}"
            )));
        }
        Ok(())
    }

    /// Reads the regular file `name`: at most [`MAX_FILE_BYTES`], never a FIFO or a device.
    fn read_file(&self, name: &str, private: bool) -> Result<Option<Zeroizing<String>>> {
        let (path, found) = self.locate(name)?;
        let Found::Here(real, meta) = found else {
            return Ok(None);
        };
        if !meta.is_file() {
            return Err(not_regular(&path, &meta));
        }
        self.check_mode(&path, &meta, private)?;
        read_bounded(&path, &real, &meta).map(Some)
    }

    fn read_now(&self, name: &str) -> Result<Option<(Zeroizing<String>, Version)>> {
        let (path, found) = self.locate(name)?;
        let Found::Here(_, meta) = found else {
            return Ok(None);
        };
        // Only a key (`keys/<kid>`) may be a directory; a key file holds a private key.
        let key = matches!(
            Path::new(name).components().next(),
            Some(Component::Normal(first)) if first == "keys"
        );
        let text = if meta.is_dir() {
            if !key {
                return Err(not_regular(&path, &meta));
            }
            self.check_mode(&path, &meta, false)?;
            let part = |file: &str, private: bool| -> Result<Zeroizing<String>> {
                let name = format!("{name}/{file}");
                self.read_file(&name, private)?.ok_or_else(|| Error::Io {
                    action: "read",
                    path: path.join(file),
                    source: std::io::ErrorKind::NotFound.into(),
                })
            };
            let crt = part(CERT_FILE, false)?;
            let key = part(KEY_FILE, true)?;
            KeyEntry::from_pem(String::clone(&crt), key).to_json()
        } else {
            match self.read_file(name, key)? {
                Some(text) => text,
                None => return Ok(None),
            }
        };
        let version = hash(&text);
        Ok(Some((text, version)))
    }

    /// The ring directory, created if needed; refused when group or others may write it.
    fn ensure_root(&self) -> Result<PathBuf> {
        create_dirs(&self.root)?;
        let root = fs::canonicalize(&self.root).map_err(io("resolve", &self.root))?;
        let meta = fs::metadata(&root).map_err(io("inspect", &root))?;
        self.check_mode(&self.root, &meta, false)?;
        Ok(root)
    }

    /// The real directory that holds `name` (created if needed, inside the ring, writable by
    /// its owner only) and the file name in it.
    fn writable_parent(&self, name: &str) -> Result<(PathBuf, std::ffi::OsString)> {
        let rel = relative(name)?;
        let root = self.ensure_root()?;
        let file = rel
            .file_name()
            .map(ToOwned::to_owned)
            .ok_or_else(|| Error::Refused(format!("{name:?} names no file")))?;
        let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok((root, file));
        };
        let parent = parent.to_string_lossy().into_owned();
        let (path, found) = self.locate(&parent)?;
        let real = match found {
            Found::Here(real, meta) if meta.is_dir() => {
                self.check_mode(&path, &meta, false)?;
                real
            }
            Found::Here(_, meta) => return Err(not_regular(&path, &meta)),
            Found::Missing => {
                // Every missing level is created as a real directory; a link planted meanwhile
                // is found by the check below.
                create_dirs(&path)?;
                match self.locate(&parent)? {
                    (_, Found::Here(real, meta)) if meta.is_dir() => real,
                    (path, _) => {
                        return Err(Error::Refused(format!(
                            "{} is not a directory",
                            path.display()
                        )));
                    }
                }
            }
        };
        Ok((real, file))
    }

    /// Takes the exclusive lock on `.lock`, waiting at most most of the timeout, so a writer
    /// that gives up never writes afterwards.
    fn lock(&self) -> Result<fs::File> {
        let root = self.ensure_root()?;
        let (path, found) = self.locate(LOCK_FILE)?;
        let file = match found {
            Found::Here(real, meta) if meta.is_file() => {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(&real)
                    .map_err(io("open", &path))?;
                same_file(&path, &file, &meta)?;
                file
            }
            Found::Here(_, meta) => return Err(not_regular(&path, &meta)),
            // Exclusive creation follows no link planted meanwhile.
            Found::Missing => match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(root.join(LOCK_FILE))
            {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return self.lock();
                }
                Err(e) => return Err(io("create", &path)(e)),
            },
        };
        let deadline = Instant::now() + self.timeout.mul_f32(0.75);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(io("lock", &path)(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "another writer holds the lock",
                    )));
                }
                Err(fs::TryLockError::Error(e)) => return Err(io("lock", &path)(e)),
            }
        }
    }

    fn compare_and_swap_now(
        &self,
        name: &str,
        text: &str,
        expected: Option<&Version>,
    ) -> Result<Version> {
        let _lock = self.lock()?;
        let current = self.read_now(name)?.map(|(_, v)| v);
        if current.as_ref() != expected {
            return Err(Error::Conflict {
                what: self.path(name)?.display().to_string(),
            });
        }
        let (dir, file) = self.writable_parent(name)?;
        write_atomic(&dir.join(file), text.as_bytes(), false)?;
        Ok(hash(text))
    }

    /// Writes a new key directory; the caller holds the lock and found no key there.
    fn create_now(&self, name: &str, text: &str) -> Result<Put> {
        let entry = KeyEntry::parse(text, name)?;
        let (parent, file) = self.writable_parent(name)?;
        let path = parent.join(file);
        // A private (0700) directory of an unguessable name, filled, then renamed into place:
        // readers see the key directory whole or not at all.
        let staging = temp_builder(".tmp-key-", 0o700)
            .tempdir_in(&parent)
            .map_err(io("create a staging directory in", &parent))?;
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

    /// Moves `name` to `retired/<name>-<unix seconds>`; nothing ever deletes it.
    fn schedule_deletion_now(&self, name: &str) -> Result<()> {
        let _lock = self.lock()?;
        let (path, found) = self.locate(name)?;
        if let Found::Missing = found {
            return Err(Error::NotFound {
                what: path.display().to_string(),
                store: self.describe(),
            });
        }
        let base = path.file_name().and_then(|n| n.to_str()).unwrap_or("key");
        let stamp = jiff::Timestamp::now().as_second();
        let (retired, file) = self.writable_parent(&format!("{RETIRED_DIR}/{base}-{stamp}"))?;
        let to = retired.join(file);
        fs::rename(&path, &to).map_err(io("move to retired/", &path))
    }
}

/// `name` as a relative path of plain components only.
fn relative(name: &str) -> Result<&Path> {
    let ok = !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(Path::new(name))
    } else {
        Err(Error::Refused(format!(
            "{name:?} is not a name inside the ring directory"
        )))
    }
}

fn not_regular(path: &Path, meta: &fs::Metadata) -> Error {
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else {
        special_kind(&ft)
    };
    Error::Refused(format!(
        "{} is {kind}: a ring holds only regular files and directories",
        path.display()
    ))
}

#[cfg(unix)]
fn special_kind(ft: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &fs::FileType) -> &'static str {
    "a special file"
}

#[cfg(unix)]
fn unix_mode(meta: &fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn unix_mode(_: &fs::Metadata) -> Option<u32> {
    None
}

/// Refuses an open file that is not the one inspected (swapped in between).
fn same_file(path: &Path, file: &fs::File, inspected: &fs::Metadata) -> Result<fs::Metadata> {
    let meta = file.metadata().map_err(io("inspect", path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        if (meta.dev(), meta.ino()) != (inspected.dev(), inspected.ino()) {
            return Err(Error::Refused(format!(
                "{} changed while it was opened",
                path.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = inspected;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    Ok(meta)
}

/// Reads the regular file at `real` (`path` in messages), at most [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path, real: &Path, inspected: &fs::Metadata) -> Result<Zeroizing<String>> {
    let too_big = |size: String| {
        Error::Refused(format!(
            "{} is {size}: kseal reads at most {MAX_FILE_BYTES} bytes (64 KiB, Secrets \
             Manager's limit for one value)",
            path.display()
        ))
    };
    if inspected.len() > MAX_FILE_BYTES {
        return Err(too_big(format!("{} bytes", inspected.len())));
    }
    let file = fs::File::open(real).map_err(io("open", path))?;
    same_file(path, &file, inspected)?;
    let mut text = Zeroizing::new(String::new());
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io("read", path))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big("larger than that now".into()));
    }
    Ok(text)
}

/// Writes `bytes` to a new temporary file beside `path` and renames it into place. The file
/// is created exclusively under an unguessable name, with its final mode from the start
/// (0600 when `private`, else 0644), so a private key is never readable by others, not even
/// for a moment, and no symbolic link planted beside it is followed.
fn write_atomic(path: &Path, bytes: &[u8], private: bool) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dirs(dir)?;
    let mut file = temp_builder(".tmp-", if private { 0o600 } else { 0o644 })
        .tempfile_in(dir)
        .map_err(io("create a temporary file in", dir))?;
    file.write_all(bytes).map_err(io("write", file.path()))?;
    file.as_file().sync_all().map_err(io("sync", file.path()))?;
    file.persist(path)
        .map_err(|e| io("rename into place", path)(e.error))?;
    Ok(())
}

/// Creates `dir` and its missing parents 0755 whatever the umask allows beyond it (a umask
/// of 002 would make them group-writable, which readers refuse).
fn create_dirs(dir: &Path) -> Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o755);
    }
    builder.create(dir).map_err(io("create", dir))
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
