//! The highest version of each pinned history this machine has read, kept in the user's cache
//! directory (`$KSEAL_CACHE_DIR`, else `$XDG_CACHE_HOME/kseal`, else `~/.cache/kseal`), one
//! file per anchor: `rings/<anchor>`. A pin in `.kseal.yaml` records the version seen when it
//! was made; this records every later one, so replaying an older signed index (whoever can
//! write the index can put back any version the seeder once wrote) is refused as a rollback
//! on a machine that saw a newer one. With the version, the SHA-256 of the index read at it
//! (a file an older kseal wrote has none, and gets one from the next read): another index of
//! the same version is a history forked with a key clusters held, refused here unless the
//! ring's history marker vouches for it (attack review, round 12, A4: under a marker an older
//! kseal wrote, which records no digest, a laptop that had read the real index sealed to a
//! fork of the same version). Best effort: a cache that cannot be written changes nothing
//! but this protection.
//!
//! Hardened like `~/.ssh`: the `rings` directory is created mode 0700 and each file is written
//! mode 0600 through a new file with a random name in the same directory (`create_new`:
//! `O_CREAT|O_EXCL`, which never follows a link) renamed into place. A directory or file that
//! is not the current user's, or that group or others may write, is refused with an error
//! naming it, and so is a `rings` directory or cache file that is a symbolic link (a file is
//! opened, then checked to be the very file its `lstat` showed): whoever could write it could
//! lower the floor (and replay an old index) or raise it (and stop every seal).

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keystore::Kid;

/// What this machine keeps for one pinned history.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The highest version read (0: none).
    pub(crate) version: u64,
    /// The newest dedicated root read: its number in the chain and its kid.
    pub(crate) root: Option<(u64, Kid)>,
    /// The SHA-256 ([`kseal_keystore::Index::digest`]) of the index read at `version`
    /// (`None`: not read yet, or a file written by an older kseal).
    pub(crate) digest: Option<String>,
}

fn dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    var(crate::env::KSEAL_CACHE_DIR)
        .map(PathBuf::from)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("kseal")))
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache").join("kseal")))
        .map(|d| d.join("rings"))
}

/// Where the highest version of the history anchored at `anchor` is kept.
pub(crate) fn path(anchor: &Kid) -> Option<PathBuf> {
    dir().map(|d| d.join(anchor.as_str()))
}

/// What is kept for `anchor` (nothing yet: the default). Refuses a cache that someone else
/// could have written, or a linked cache file.
pub(crate) fn load(anchor: &Kid) -> Result<Seen> {
    match dir() {
        Some(dir) => load_in(&dir, anchor),
        None => Ok(Seen::default()),
    }
}

/// The highest version of `anchor`'s history read here (0: none), for callers that cannot
/// stop on a refused cache: one is reported (once) and not used.
pub(crate) fn version(anchor: &Kid) -> u64 {
    load_or_warn(anchor).version
}

/// The newest dedicated root of `anchor`'s history seen here: a later history must extend
/// it (a fork from an older root, signed with keys clusters held, does not). As
/// [`version`], a refused cache is reported and not used.
pub(crate) fn root(anchor: &Kid) -> Option<(u64, Kid)> {
    load_or_warn(anchor).root
}

fn load_or_warn(anchor: &Kid) -> Seen {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    load(anchor).unwrap_or_else(|e| {
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!("warning: {e:#}; its rollback floor is not used");
        }
        Seen::default()
    })
}

/// Records `version` of `anchor`'s history, with the digest of the index read at it
/// (`digest`, when an index of that version was read), and its dedicated root `root` (number
/// and kid), when newer than what is kept; at the version kept, a digest only where none is
/// kept (another one is kept: [`replace_digest`] after checking). Best effort for the store (a
/// cache that cannot be written changes nothing but this protection), but a cache that is
/// refused is an error.
pub(crate) fn record(
    anchor: &Kid,
    version: u64,
    digest: Option<&str>,
    root: Option<(u64, &Kid)>,
) -> Result<()> {
    match dir() {
        Some(dir) => record_in(&dir, anchor, version, digest, root),
        None => Ok(()),
    }
}

/// Replaces the digest kept for `version` of `anchor`'s history by `digest`: only for an index
/// the ring's history marker vouches for, when this machine had read another index of that
/// version (a fork, read before the marker could tell).
pub(crate) fn replace_digest(anchor: &Kid, version: u64, digest: &str) -> Result<()> {
    match dir() {
        Some(dir) => replace_digest_in(&dir, anchor, version, digest),
        None => Ok(()),
    }
}

/// What `lstat`/`fstat` says of a cache directory or file, as the checks need it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts {
    pub(super) symlink: bool,
    pub(super) dir: bool,
    pub(super) file: bool,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) mode: u32,
}

impl Facts {
    #[cfg(unix)]
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            symlink: meta.file_type().is_symlink(),
            dir: meta.is_dir(),
            file: meta.is_file(),
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
        }
    }
}

/// Refuses a cache directory (`want_dir`) or file that is a link, of another kind, owned
/// by another user than `me`, or writable by group or others.
pub(super) fn check(path: &Path, want_dir: bool, facts: Facts, me: u32) -> Result<()> {
    let what = if want_dir {
        "ring cache directory"
    } else {
        "ring cache file"
    };
    let fix = if want_dir {
        format!("chmod 700 {}", path.display())
    } else {
        format!("chmod 600 {}", path.display())
    };
    if facts.symlink {
        bail!(
            "refusing the {what} {}: it is a symbolic link, which kseal never follows \
             there (remove the link: kseal writes the file again)",
            path.display()
        );
    }
    if want_dir && !facts.dir || !want_dir && !facts.file {
        bail!(
            "refusing the {what} {}: it is not a {}",
            path.display(),
            if want_dir {
                "directory"
            } else {
                "regular file"
            }
        );
    }
    if facts.uid != me {
        bail!(
            "refusing the {what} {}: it is owned by user id {}, not by you ({me}), so \
             someone else could change the newest ring version this machine read (remove \
             it, or chown it to yourself after checking it)",
            path.display(),
            facts.uid
        );
    }
    if facts.mode & 0o022 != 0 {
        bail!(
            "refusing the {what} {}: group or others may write it (mode {:04o}), so \
             someone else could change the newest ring version this machine read \
             ({fix})",
            path.display(),
            facts.mode
        );
    }
    Ok(())
}

#[cfg(unix)]
use crate::project::current_uid;

/// Refuses an ancestor directory of the cache (`path`, one of its parents) that another
/// user could rename the cache out of: owned by someone other than `me` or root, or
/// writable by group or others without the sticky bit (as OpenSSH's StrictModes checks
/// the directories above `~/.ssh`). `/tmp` (root's, sticky) passes; a directory another
/// user made there does not.
pub(super) fn check_ancestor(path: &Path, facts: Facts, me: u32) -> Result<()> {
    const STICKY: u32 = 0o1000;
    if facts.uid != me && facts.uid != 0 {
        bail!(
            "refusing the ring cache under {}: that directory is owned by user id {}, not \
             by you ({me}) or root, so they could replace the newest ring version this \
             machine read (set KSEAL_CACHE_DIR to a directory of your own)",
            path.display(),
            facts.uid
        );
    }
    if facts.mode & 0o022 != 0 && facts.mode & STICKY == 0 {
        // Group-writable is fine in the owner's private group (umask 002 systems), as
        // OpenSSH and `.kseal.yaml`'s check judge it.
        if facts.mode & 0o002 == 0 && facts.uid == me {
            let read = |file: &str| std::fs::read_to_string(file).unwrap_or_default();
            let (passwd, group) = (read("/etc/passwd"), read("/etc/group"));
            if crate::project::others_in_group(facts.gid, me, &passwd, &group).is_none() {
                return Ok(());
            }
        }
        bail!(
            "refusing the ring cache under {}: group or others may write that directory \
             (mode {:04o}), so they could replace the newest ring version this machine \
             read (chmod go-w {}, or set KSEAL_CACHE_DIR to a directory of your own)",
            path.display(),
            facts.mode,
            path.display()
        );
    }
    Ok(())
}

/// Checks every existing directory above the `rings` directory `dir`.
#[cfg(unix)]
fn check_ancestors(dir: &Path) -> Result<()> {
    let me = current_uid()?;
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    // The real directories, links resolved (a link in a parent's path is the admin's).
    let Ok(real) = std::fs::canonicalize(parent) else {
        return Ok(()); // not made yet: made private by the first write
    };
    for ancestor in real.ancestors() {
        let meta = std::fs::metadata(ancestor).with_context(|| {
            format!(
                "cannot read the ring cache's directory {}",
                ancestor.display()
            )
        })?;
        check_ancestor(ancestor, Facts::of(&meta), me)?;
    }
    Ok(())
}

/// Checks the `rings` directory `dir` (absent: `Ok(false)`) and the directories above it.
fn check_dir(dir: &Path) -> Result<bool> {
    #[cfg(unix)]
    check_ancestors(dir)?;
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(e).with_context(|| {
                format!("cannot read the ring cache directory {}", dir.display())
            });
        }
    };
    #[cfg(unix)]
    check(dir, true, Facts::of(&meta), current_uid()?)?;
    #[cfg(not(unix))]
    if !meta.is_dir() {
        bail!(
            "refusing the ring cache directory {}: it is not a directory",
            dir.display()
        );
    }
    Ok(true)
}

pub(super) fn load_in(dir: &Path, anchor: &Kid) -> Result<Seen> {
    if !check_dir(dir)? {
        return Ok(Seen::default());
    }
    let path = dir.join(anchor.as_str());
    let before = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Seen::default()),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot read the ring cache file {}", path.display()));
        }
    };
    #[cfg(unix)]
    check(&path, false, Facts::of(&before), current_uid()?)?;
    let unreadable = || format!("cannot read the ring cache file {}", path.display());
    let file = std::fs::File::open(&path).with_context(unreadable)?;
    // The file opened must be the one just checked: a link put in its place meanwhile
    // leads elsewhere.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let after = file.metadata().with_context(unreadable)?;
        if (after.dev(), after.ino()) != (before.dev(), before.ino()) {
            bail!(
                "refusing the ring cache file {}: it was replaced while being read",
                path.display()
            );
        }
    }
    let mut text = String::new();
    // A few lines at most; anything longer is not ours.
    file.take(4096)
        .read_to_string(&mut text)
        .with_context(unreadable)?;
    Ok(parse(&text))
}

/// The first line the version, then `root <seq> <kid>` for the newest dedicated root seen and
/// `digest <sha256>` for the index read at that version (older kseals ignore the lines they do
/// not know, and wrote none of this one); anything unreadable counts as nothing kept.
fn parse(text: &str) -> Seen {
    let mut lines = text.lines();
    let version = lines
        .next()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    let (mut root, mut digest) = (None, None);
    for line in lines {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("root"), Some(seq), Some(kid)) if root.is_none() => {
                root = seq.parse().ok().zip(Kid::parse(kid).ok());
            }
            (Some("digest"), Some(d), None) if digest.is_none() && is_digest(d) => {
                digest = Some(d.to_ascii_lowercase());
            }
            _ => {}
        }
    }
    Seen {
        version,
        root,
        digest,
    }
}

/// Whether `text` is a SHA-256 in hex.
fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(super) fn record_in(
    dir: &Path,
    anchor: &Kid,
    version: u64,
    digest: Option<&str>,
    root: Option<(u64, &Kid)>,
) -> Result<()> {
    let kept = load_in(dir, anchor)?;
    let newer_root = root.filter(|(seq, _)| kept.root.as_ref().is_none_or(|(s, _)| seq > s));
    // A digest is kept only for the newest version, and never replaced here.
    let digest = match version.cmp(&kept.version) {
        std::cmp::Ordering::Greater => digest,
        std::cmp::Ordering::Equal => kept.digest.as_deref().or(digest),
        std::cmp::Ordering::Less => kept.digest.as_deref(),
    };
    let new_digest = version >= kept.version && digest != kept.digest.as_deref();
    if version <= kept.version && newer_root.is_none() && !new_digest {
        return Ok(());
    }
    let version = version.max(kept.version);
    let root = newer_root.or(kept.root.as_ref().map(|(seq, kid)| (*seq, kid)));
    store_in(dir, anchor, version, digest, root)
}

pub(super) fn replace_digest_in(
    dir: &Path,
    anchor: &Kid,
    version: u64,
    digest: &str,
) -> Result<()> {
    let kept = load_in(dir, anchor)?;
    if kept.version != version {
        return record_in(dir, anchor, version, Some(digest), None);
    }
    let root = kept.root.as_ref().map(|(seq, kid)| (*seq, kid));
    store_in(dir, anchor, version, Some(digest), root)
}

/// Replaces what is kept for `anchor` by `version` and `root`, even when lower: only for
/// `kseal keys trust --root-kid`, where a person confirmed the ring's dedicated root out of
/// band (a fork read earlier left this machine's entry on the fork's history).
pub(crate) fn replace(anchor: &Kid, version: u64, root: Option<(u64, &Kid)>) -> Result<()> {
    match dir() {
        // The digest is the next read's, of the history the person confirmed.
        Some(dir) => store_in(&dir, anchor, version, None, root),
        None => Ok(()),
    }
}

/// Writes `version`, the `digest` of the index read at it and `root` for `anchor` into the
/// cache directory `dir` (made private when missing); best effort, but a cache that is
/// refused is an error.
fn store_in(
    dir: &Path,
    anchor: &Kid,
    version: u64,
    digest: Option<&str>,
    root: Option<(u64, &Kid)>,
) -> Result<()> {
    let root_line = root
        .map(|(seq, kid)| format!("root {seq} {kid}\n"))
        .unwrap_or_default();
    let digest_line = digest.map(|d| format!("digest {d}\n")).unwrap_or_default();
    if !check_dir(dir)? {
        if let Some(parent) = dir.parent()
            && std::fs::create_dir_all(parent).is_err()
        {
            return Ok(());
        }
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return Ok(()),
        }
        // Made here, or by a concurrent kseal: checked either way.
        check_dir(dir)?;
    }
    let path = dir.join(anchor.as_str());
    // Written beside it under a new random name (never an existing file or link) and
    // renamed into place: a reader never sees half a number.
    let mut nonce = [0u8; 16];
    if aws_lc_rs::rand::fill(&mut nonce).is_err() {
        return Ok(());
    }
    let temp = dir.join(format!(".{}.{}.tmp", anchor.as_str(), hex(&nonce)));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let Ok(mut file) = options.open(&temp) else {
        return Ok(());
    };
    let written = file
        .write_all(format!("{version}\n{root_line}{digest_line}").as_bytes())
        .and_then(|()| file.sync_all());
    drop(file);
    if written.is_err() || std::fs::rename(&temp, &path).is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};

    use super::*;

    fn kid(c: char) -> Kid {
        Kid::parse(&c.to_string().repeat(64)).unwrap()
    }

    /// A `rings` directory that does not exist yet, in a private temporary directory.
    fn rings(t: &tempfile::TempDir) -> PathBuf {
        t.path().join("kseal").join("rings")
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn records_in_a_private_directory_and_file_and_never_lowers_them() {
        let t = tempfile::tempdir().unwrap();
        let dir = rings(&t);
        let (a, r) = (kid('a'), kid('b'));
        assert_eq!(load_in(&dir, &a).unwrap(), Seen::default());
        record_in(&dir, &a, 7, None, Some((2, &r))).unwrap();
        let want = Seen {
            version: 7,
            root: Some((2, r.clone())),
            digest: None,
        };
        assert_eq!(load_in(&dir, &a).unwrap(), want);
        record_in(&dir, &a, 3, None, Some((1, &kid('c')))).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap(), want);
        record_in(&dir, &a, 8, None, None).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap().version, 8);
        assert_eq!(load_in(&dir, &a).unwrap().root, want.root);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(a.as_str())), 0o600);
        // No temporary file is left beside it.
        assert_eq!(names(&dir), vec![a.as_str().to_owned()]);
    }

    /// Attack review, round 12 (A4): the digest of the index read at the newest version is
    /// kept beside it; a file an older kseal wrote (no digest) still loads, gets the digest
    /// of the next read at its version, and an older kseal reading the new file still finds
    /// its version and root.
    #[test]
    fn keeps_the_digest_read_at_the_newest_version_and_reads_older_files() {
        let t = tempfile::tempdir().unwrap();
        let dir = rings(&t);
        let (a, r) = (kid('a'), kid('b'));
        let (d1, d2) = ("1".repeat(64), "2".repeat(64));
        // An older kseal's file: a version and a root.
        record_in(&dir, &a, 5, None, Some((2, &r))).unwrap();
        let file = dir.join(a.as_str());
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("5\nroot 2 {r}\n")
        );
        assert_eq!(load_in(&dir, &a).unwrap().digest, None);
        // The next read at that version records its digest, and never replaces it.
        record_in(&dir, &a, 5, Some(&d1), None).unwrap();
        record_in(&dir, &a, 5, Some(&d2), None).unwrap();
        let kept = load_in(&dir, &a).unwrap();
        assert_eq!(
            kept,
            Seen {
                version: 5,
                root: Some((2, r.clone())),
                digest: Some(d1.clone()),
            }
        );
        assert_eq!(
            parse(&std::fs::read_to_string(&file).unwrap()),
            kept,
            "the file as written reads back"
        );
        // What an older kseal reads of the new file: the version and the root (its parser
        // takes the first line and the first `root` line).
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().next(), Some("5"));
        assert!(text.lines().any(|l| l == format!("root 2 {r}")));
        // An older version changes nothing; a newer one drops the older digest.
        record_in(&dir, &a, 4, Some(&d2), None).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap().digest, Some(d1.clone()));
        record_in(&dir, &a, 6, None, None).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap().digest, None);
        record_in(&dir, &a, 6, Some(&d2), None).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap().digest, Some(d2.clone()));
        // Replaced only on purpose (an index the history marker vouches for).
        replace_digest_in(&dir, &a, 6, &d1).unwrap();
        let kept = load_in(&dir, &a).unwrap();
        assert_eq!((kept.version, kept.digest), (6, Some(d1.clone())));
        assert_eq!(kept.root, Some((2, r.clone())));
        // A malformed digest line counts as none.
        assert_eq!(parse("6\ndigest xyz\n").digest, None);
        assert_eq!(parse(&format!("6\ndigest {d1} extra\n")).digest, None);
        assert_eq!(mode(&file), 0o600);
    }

    #[test]
    fn never_follows_a_linked_cache_file() {
        let t = tempfile::tempdir().unwrap();
        let dir = rings(&t);
        let a = kid('a');
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, 0o700);
        // Whoever planted the link wants a floor of their choosing read, or their file
        // overwritten.
        let victim = t.path().join("victim");
        std::fs::write(&victim, "1\n").unwrap();
        chmod(&victim, 0o600);
        let link = dir.join(a.as_str());
        symlink(&victim, &link).unwrap();
        let err = format!("{:#}", load_in(&dir, &a).unwrap_err());
        assert!(err.contains(&link.display().to_string()), "{err}");
        assert!(err.contains("symbolic link"), "{err}");
        let err = format!("{:#}", record_in(&dir, &a, 9, None, None).unwrap_err());
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "1\n");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn never_writes_through_a_link_planted_at_a_temporary_name() {
        // Before, the temporary file was `.<anchor>.<pid>`: a link planted there led the
        // write anywhere the user could write.
        let t = tempfile::tempdir().unwrap();
        let dir = rings(&t);
        let a = kid('a');
        record_in(&dir, &a, 1, None, None).unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let planted = dir.join(format!(".{}.{}", a.as_str(), std::process::id()));
        symlink(&victim, &planted).unwrap();
        record_in(&dir, &a, 9, None, None).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap().version, 9);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(
            names(&dir),
            vec![
                format!(".{}.{}", a.as_str(), std::process::id()),
                a.as_str().to_owned()
            ]
        );
    }

    #[test]
    fn refuses_a_cache_group_or_others_may_write() {
        let t = tempfile::tempdir().unwrap();
        let dir = rings(&t);
        let a = kid('a');
        let file = dir.join(a.as_str());
        record_in(&dir, &a, 5, None, None).unwrap();
        for bad in [0o620, 0o602, 0o666] {
            chmod(&file, bad);
            let err = format!("{:#}", load_in(&dir, &a).unwrap_err());
            assert!(err.contains(&file.display().to_string()), "{err}");
            assert!(err.contains(&format!("mode {bad:04o}")), "{err}");
            assert!(err.contains("chmod 600"), "{err}");
            assert!(record_in(&dir, &a, 6, None, None).is_err());
        }
        chmod(&file, 0o600);
        for bad in [0o770, 0o707, 0o777] {
            chmod(&dir, bad);
            let err = format!("{:#}", load_in(&dir, &a).unwrap_err());
            assert!(err.contains("ring cache directory"), "{err}");
            assert!(err.contains(&format!("mode {bad:04o}")), "{err}");
            assert!(record_in(&dir, &a, 6, None, None).is_err());
        }
        // What an older kseal made under umask 022 is still accepted.
        chmod(&dir, 0o755);
        chmod(&file, 0o644);
        assert_eq!(load_in(&dir, &a).unwrap().version, 5);
        record_in(&dir, &a, 6, None, None).unwrap();
        assert_eq!(load_in(&dir, &a).unwrap().version, 6);
        assert_eq!(mode(&file), 0o600);
    }

    #[test]
    fn refuses_a_linked_or_misplaced_cache_directory_entry() {
        let t = tempfile::tempdir().unwrap();
        let dir = rings(&t);
        let a = kid('a');
        std::fs::create_dir_all(dir.join(a.as_str())).unwrap();
        chmod(&dir, 0o700);
        let err = format!("{:#}", load_in(&dir, &a).unwrap_err());
        assert!(err.contains("not a regular file"), "{err}");
        // A `rings` that is a link to a directory is refused too.
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        chmod(&elsewhere, 0o700);
        let linked = t.path().join("linked");
        symlink(&elsewhere, &linked).unwrap();
        let err = format!("{:#}", load_in(&linked, &a).unwrap_err());
        assert!(err.contains("ring cache directory"), "{err}");
        assert!(err.contains("symbolic link"), "{err}");
        assert!(record_in(&linked, &a, 1, None, None).is_err());
        assert!(names(&elsewhere).is_empty());
    }

    #[test]
    fn refuses_a_cache_of_another_user() {
        // Checked on injected metadata: making a file of another user needs root.
        let path = Path::new("/home/u/.cache/kseal/rings/x");
        let mine = Facts {
            symlink: false,
            dir: false,
            file: true,
            uid: 1000,
            gid: 1000,
            mode: 0o600,
        };
        check(path, false, mine, 1000).unwrap();
        let err = format!(
            "{:#}",
            check(path, false, Facts { uid: 0, ..mine }, 1000).unwrap_err()
        );
        assert!(
            err.contains("ring cache file /home/u/.cache/kseal/rings/x"),
            "{err}"
        );
        assert!(
            err.contains("owned by user id 0, not by you (1000)"),
            "{err}"
        );
        let dir = Facts {
            dir: true,
            file: false,
            mode: 0o700,
            ..mine
        };
        check(path, true, dir, 1000).unwrap();
        let err = format!(
            "{:#}",
            check(path, true, Facts { uid: 1001, ..dir }, 1000).unwrap_err()
        );
        assert!(err.contains("ring cache directory"), "{err}");
        assert!(err.contains("owned by user id 1001"), "{err}");
        // And on a real file, when these tests run as root (as in CI containers).
        if current_uid().unwrap() == 0 {
            let t = tempfile::tempdir().unwrap();
            let rings = rings(&t);
            let a = kid('a');
            record_in(&rings, &a, 4, None, None).unwrap();
            std::os::unix::fs::chown(rings.join(a.as_str()), Some(65534), None).unwrap();
            let err = format!("{:#}", load_in(&rings, &a).unwrap_err());
            assert!(
                err.contains("owned by user id 65534, not by you (0)"),
                "{err}"
            );
        }
    }

    /// Attack review (issue 35): a cache under a directory another user owns or may write
    /// could be renamed away (its floor lost) by them: refused, like OpenSSH's StrictModes.
    #[test]
    fn refuses_a_cache_under_a_directory_another_user_controls() {
        let dir = Path::new("/tmp/shared");
        let facts = |uid: u32, mode: u32| Facts {
            symlink: false,
            dir: true,
            file: false,
            uid,
            gid: 4242, // in no /etc/group: counts as shared
            mode,
        };
        check_ancestor(dir, facts(1000, 0o755), 1000).unwrap();
        check_ancestor(dir, facts(0, 0o755), 1000).unwrap();
        check_ancestor(dir, facts(0, 0o1777), 1000).unwrap(); // /tmp
        let err = format!(
            "{:#}",
            check_ancestor(dir, facts(65534, 0o700), 1000).unwrap_err()
        );
        assert!(err.contains("owned by user id 65534"), "{err}");
        assert!(err.contains("KSEAL_CACHE_DIR"), "{err}");
        let err = format!(
            "{:#}",
            check_ancestor(dir, facts(1000, 0o777), 1000).unwrap_err()
        );
        assert!(err.contains("group or others may write"), "{err}");
        let err = format!(
            "{:#}",
            check_ancestor(dir, facts(1000, 0o775), 1000).unwrap_err()
        );
        assert!(err.contains("mode 0775"), "{err}");
        // And for real, when these tests run as root (as in CI containers): the reviewer's
        // attack, a cache directory made by `nobody`.
        if current_uid().unwrap() == 0 {
            let t = tempfile::tempdir().unwrap();
            let theirs = t.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let a = kid('a');
            let err = format!(
                "{:#}",
                record_in(&theirs.join("rings"), &a, 4, None, None).unwrap_err()
            );
            assert!(err.contains("owned by user id 65534"), "{err}");
            let err = format!("{:#}", load_in(&theirs.join("rings"), &a).unwrap_err());
            assert!(err.contains("owned by user id 65534"), "{err}");
        }
    }
}
