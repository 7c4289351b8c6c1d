//! Finding the repository's `.kseal.yaml` and deciding whether it may be trusted: discovery
//! from a directory upwards that stops at the repository root (the first directory holding
//! `.git`), the refusal of a nested file or of a link out of the repository, and, on Unix,
//! of a file that another user than the current one (or root) could have written, judging a
//! group-writable file by its group's members as OpenSSH does.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use super::FILE_NAME;

/// Where discovery looked for `.kseal.yaml`, and what it found.
#[derive(Debug, Clone)]
pub(crate) struct Discovery {
    /// The directory it started from.
    pub(crate) start: PathBuf,
    /// The repository root it stopped at (the first directory upwards holding `.git`), or
    /// `None`: outside any git repository, only `start` itself was looked at.
    pub(crate) repo_root: Option<PathBuf>,
    /// The file found, if any.
    pub(crate) file: Option<PathBuf>,
}

impl Discovery {
    /// Where discovery looked, for `kseal config` and messages.
    pub(crate) fn describe(&self) -> String {
        match &self.repo_root {
            Some(root) if *root == self.start => format!(
                "looked in {} only: it is the repository root (it holds .git), and discovery \
                 never goes above it",
                root.display()
            ),
            Some(root) => format!(
                "looked from {} up to the repository root {} (the first directory holding \
                 .git), and never above it",
                self.start.display(),
                root.display()
            ),
            None => format!(
                "{} is in no git repository: only its own {FILE_NAME} counts, none above it",
                self.start.display()
            ),
        }
    }
}

/// Looks for `.kseal.yaml` from `dir` upwards, stopping at the repository root (the first
/// directory upwards holding `.git`, a file or a directory); outside any repository only
/// `dir` itself is looked at. A file planted above the repository (a shared `/tmp`, a CI
/// workspace's parent) therefore never decides which key seals.
pub(crate) fn discover_file(dir: &Path) -> Discovery {
    let start = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    let exists = |p: &Path| p.symlink_metadata().is_ok();
    let repo_root = start
        .ancestors()
        .find(|d| exists(&d.join(".git")))
        .map(Path::to_owned);
    let mut file = None;
    for d in start.ancestors() {
        let candidate = d.join(FILE_NAME);
        if exists(&candidate) {
            file = Some(candidate);
            break;
        }
        if repo_root.as_deref().is_none_or(|root| root == d) {
            break;
        }
    }
    Discovery {
        start,
        repo_root,
        file,
    }
}

impl Discovery {
    /// The file found, refused when a committed file could redirect the repository's rules:
    /// a `.kseal.yaml` below the repository root (it would shadow the root's rules, its
    /// `forbid_cluster_wide` included: kseal reads the root's file only), or one that is a
    /// link to a file outside the repository.
    pub(crate) fn checked_file(&self) -> Result<Option<PathBuf>> {
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let dir = file.parent().unwrap_or(Path::new("/"));
        if let Some(root) = &self.repo_root
            && dir != root
        {
            bail!(
                "refusing {}: a {FILE_NAME} below the repository root would shadow the rules \
                 of {} (its creation rules and forbid_cluster_wide), so kseal reads the root's \
                 file only; move its pins and rules into that file and remove this one",
                file.display(),
                root.join(FILE_NAME).display()
            );
        }
        let is_link = file
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            let inside = self.repo_root.as_deref().unwrap_or(dir);
            let target = fs_err::canonicalize(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            if !target.starts_with(inside) {
                bail!(
                    "refusing {}: it is a link to {}, outside the repository {}, so a file no \
                     reviewer of the repository sees would decide which key seals; commit the \
                     configuration itself",
                    file.display(),
                    target.display(),
                    inside.display()
                );
            }
        }
        Ok(Some(file.clone()))
    }
}

/// The `.kseal.yaml` that applies in `dir` ([`discover_file`]), unchecked: callers that read
/// it use [`Discovery::checked_file`].
pub(crate) fn find_from(dir: &Path) -> Option<PathBuf> {
    discover_file(dir).file
}

/// The current user's id: the owner of a file it creates (std has no `geteuid`, and unsafe
/// code is forbidden here).
#[cfg(unix)]
pub(crate) fn current_uid() -> Result<u32> {
    use std::os::unix::fs::MetadataExt as _;
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if let Some(uid) = UID.get() {
        return Ok(*uid);
    }
    let probe = tempfile::tempfile().context("cannot tell the current user id")?;
    let uid = probe
        .metadata()
        .context("cannot tell the current user id")?
        .uid();
    Ok(*UID.get_or_init(|| uid))
}

/// Refuses a `.kseal.yaml` that someone else than the current user (or root) could have
/// written: writable by others, or by a group that holds another user than its owner
/// ([`others_in_group`]), or owned by another user (a link to it too).
#[cfg(unix)]
pub(super) fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let me = current_uid()?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o002 != 0 {
        bail!(
            "refusing {}: it is writable by others (mode {mode:04o}), so someone else than its \
             owner could change which key kseal seals to; make it writable by its owner only \
             (chmod go-w {})",
            path.display(),
            path.display()
        );
    }
    // Group-writable is fine when the group is the owner's own, as OpenSSH judges it: umask
    // 002 systems give every file of a clone to the user's private group.
    if mode & 0o020 != 0 {
        let read = |file: &str| std::fs::read_to_string(file).unwrap_or_default();
        let passwd = read("/etc/passwd");
        let group = read("/etc/group");
        if let Some(why) = others_in_group(meta.gid(), meta.uid(), &passwd, &group) {
            bail!(
                "refusing {}: it is writable by its group (mode {mode:04o}) and {why}, so \
                 someone else than its owner could change which key kseal seals to; make it \
                 writable by its owner only (chmod g-w {})",
                path.display(),
                path.display()
            );
        }
    }
    check_link_owner(path, meta, me)
}

/// Refuses a `.kseal.yaml` (or the link to it) owned by another user than `me` or root.
#[cfg(unix)]
fn check_link_owner(path: &Path, meta: &std::fs::Metadata, me: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let link = fs_err::symlink_metadata(path)?;
    for (what, uid) in [("it", meta.uid()), ("the link to it", link.uid())] {
        if uid != me && uid != 0 {
            bail!(
                "refusing {}: {what} is owned by uid {uid}, neither you (uid {me}) nor root, so \
                 another user decides which key kseal seals to (a file planted in a shared \
                 directory?); remove it, or chown it if it is yours",
                path.display()
            );
        }
    }
    Ok(())
}

/// Why group `gid` may hold another user than `owner` (from `/etc/passwd` and `/etc/group`
/// as `passwd` and `group`), or `None` when it is the owner's private group, as OpenSSH decides
/// it: exactly one member, the owner, whether as its primary group or listed in it. A group
/// these files do not list, or with no member at all, counts as shared: nothing shows whom it
/// holds.
pub(crate) fn others_in_group(gid: u32, owner: u32, passwd: &str, group: &str) -> Option<String> {
    let fields = |line: &str| -> Vec<String> { line.split(':').map(str::to_owned).collect() };
    let Some(entry) = group
        .lines()
        .map(fields)
        .find(|f| f.len() >= 4 && f[2].parse::<u32>().ok() == Some(gid))
    else {
        return Some(format!(
            "group {gid} is not in /etc/group, so its members are unknown"
        ));
    };
    let name = &entry[0];
    let users: Vec<Vec<String>> = passwd
        .lines()
        .map(fields)
        .filter(|f| f.len() >= 4)
        .collect();
    let owner_name = users
        .iter()
        .find(|f| f[2].parse::<u32>().ok() == Some(owner))
        .map(|f| f[0].clone());
    let mut members = 0usize;
    for user in users
        .iter()
        .filter(|f| f[3].parse::<u32>().ok() == Some(gid))
    {
        members += 1;
        if user[2].parse::<u32>().ok() != Some(owner) {
            return Some(format!(
                "group `{name}` is also the primary group of user `{}`",
                user[0]
            ));
        }
    }
    let listed: Vec<&str> = entry[3]
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(other) = listed.iter().find(|m| Some(**m) != owner_name.as_deref()) {
        return Some(format!("group `{name}` has member `{other}`"));
    }
    members += listed.len();
    if members == 0 {
        return Some(format!(
            "group `{name}` has no member that shows whose it is"
        ));
    }
    None
}

#[cfg(not(unix))]
pub(super) fn check_owner(_: &Path, _: &std::fs::Metadata) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::tests::write_private;

    #[test]
    fn discovery_stops_at_the_repository_root() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        write_private(&top.join(FILE_NAME), "");
        let repo = top.join("repo");
        let sub = repo.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        // Outside any repository: only the directory's own file.
        let found = discover_file(&sub);
        assert_eq!((found.repo_root, found.file), (None, None));
        assert_eq!(discover_file(&top).file, Some(top.join(FILE_NAME)));
        // A `.git` file (worktree, submodule) marks the root as a directory does.
        std::fs::write(repo.join(".git"), "gitdir: elsewhere\n").unwrap();
        let found = discover_file(&sub);
        assert_eq!(found.repo_root.as_deref(), Some(repo.as_path()));
        assert_eq!(found.file, None);
        write_private(&repo.join(FILE_NAME), "");
        assert_eq!(discover_file(&sub).file, Some(repo.join(FILE_NAME)));
        // A file in a subdirectory of the repository is nearer.
        write_private(&repo.join("a").join(FILE_NAME), "");
        assert_eq!(
            discover_file(&sub).file,
            Some(repo.join("a").join(FILE_NAME))
        );
    }

    #[test]
    fn a_group_is_private_only_when_its_one_member_is_the_owner() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      alice:x:1000:1000::/home/alice:/bin/bash\n\
                      bob:x:1001:1001::/home/bob:/bin/bash\n\
                      carol:x:1002:100::/home/carol:/bin/bash\n";
        let group = "root:x:0:\nalice:x:1000:\nbob:x:1001:alice\nusers:x:100:\n\
                     team:x:2000:alice\nwide:x:2001:alice,bob\nempty:x:2002:\n";
        // alice's own group: primary group of alice only.
        assert_eq!(others_in_group(1000, 1000, passwd, group), None);
        // Listed as the only member of a group no one has as primary group.
        assert_eq!(others_in_group(2000, 1000, passwd, group), None);
        assert_eq!(
            others_in_group(1001, 1000, passwd, group).as_deref(),
            Some("group `bob` is also the primary group of user `bob`")
        );
        assert_eq!(
            others_in_group(100, 1000, passwd, group).as_deref(),
            Some("group `users` is also the primary group of user `carol`")
        );
        assert_eq!(
            others_in_group(2001, 1000, passwd, group).as_deref(),
            Some("group `wide` has member `bob`")
        );
        assert_eq!(
            others_in_group(2002, 1000, passwd, group).as_deref(),
            Some("group `empty` has no member that shows whose it is")
        );
        assert_eq!(
            others_in_group(4242, 1000, passwd, group).as_deref(),
            Some("group 4242 is not in /etc/group, so its members are unknown")
        );
        assert_eq!(others_in_group(0, 0, passwd, group), None);
    }
}
