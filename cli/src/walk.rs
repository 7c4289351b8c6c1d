//! The manifest files under `kseal keys retire --check` paths: directories are walked through
//! symbolic links (a GitOps repository may link a shared directory into each cluster's), and
//! each directory and file is visited once, so a link back up the tree cannot loop.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

/// What identifies a file or directory however it is reached: device and inode on Unix, the
/// canonical path elsewhere.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Identity {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

fn identity(path: &Path, meta: &std::fs::Metadata) -> Result<Identity> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let _ = path;
        Ok(Identity::Inode(meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Ok(Identity::Path(fs_err::canonicalize(path)?))
    }
}

/// Whether `path` may hold Kubernetes manifests, by its extension.
fn is_manifest(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// Every file under `paths` that may hold SealedSecrets (`.yaml`, `.yml`, `.json`; a file
/// named directly is read whatever its name), sorted, each once; FIFOs, devices and sockets
/// are skipped. Symbolic links are followed;
/// hidden entries such as `.git` are skipped; a link that leads nowhere is an error, since
/// what it should hold cannot be checked.
pub(crate) fn manifest_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<(PathBuf, bool)> = paths.iter().map(|p| (p.clone(), true)).collect();
    stack.reverse();
    while let Some((path, named)) = stack.pop() {
        let meta = fs_err::metadata(&path).context("failed to read a --check path")?;
        // A directory reached twice (a link back up the tree, or two links to one place) is
        // walked once; a file reached twice is checked once.
        if !seen.insert(identity(&path, &meta)?) {
            continue;
        }
        if meta.is_dir() {
            let mut children = Vec::new();
            for entry in fs_err::read_dir(&path)? {
                let entry = entry?;
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                children.push(entry.path());
            }
            children.sort();
            stack.extend(children.into_iter().rev().map(|c| (c, false)));
        } else if !meta.is_file() {
            // A FIFO or a device would hang or never end: only regular files are read.
            if named {
                anyhow::bail!("--check path `{}` is not a regular file", path.display());
            }
        } else if named || is_manifest(&path) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn links_are_followed_once_loops_end_and_fifos_are_skipped() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let shared = tmp.path().join("shared");
        std::fs::create_dir_all(repo.join("apps")).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(shared.join("db.yaml"), "").unwrap();
        std::fs::write(repo.join("apps/a.yml"), "").unwrap();
        std::fs::write(repo.join("apps/notes.txt"), "").unwrap();
        symlink(&shared, repo.join("apps/shared")).unwrap();
        symlink(&shared, repo.join("apps/shared-again")).unwrap();
        symlink(&repo, repo.join("apps/loop")).unwrap();
        // A FIFO nothing writes to: reading it would never end.
        let fifo = std::process::Command::new("mkfifo")
            .arg(repo.join("apps/pipe.yaml"))
            .status()
            .unwrap();
        assert!(fifo.success());
        let files = manifest_files(std::slice::from_ref(&repo)).unwrap();
        assert_eq!(
            files,
            vec![repo.join("apps/a.yml"), repo.join("apps/shared/db.yaml")]
        );
    }
}
