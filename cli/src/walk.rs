//! The manifest files under `kseal keys retire --check` and `kseal check` paths: directories
//! are walked through symbolic links (a GitOps repository may link a shared directory into
//! each cluster's), and each directory and file is visited once, so a link back up the tree
//! cannot loop. `kseal check` also skips what `.gitignore` files ignore.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use anyhow::{Context as _, Result};

/// What identifies a file or directory however it is reached: device and inode on Unix, the
/// canonical path elsewhere.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) enum Identity {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

pub(crate) fn identity(path: &Path, meta: &std::fs::Metadata) -> Result<Identity> {
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
pub(crate) fn is_manifest(path: &Path) -> bool {
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
    walk(paths, &Walk::default())
}

/// How [`walk`] walks.
#[derive(Debug)]
pub(crate) struct Walk {
    /// Skip what the `.gitignore` files of walked directories (and of the directories above a
    /// named path, up to the repository root) ignore.
    pub(crate) gitignore: bool,
    /// What a path is called in messages (`--check path`, `path`).
    pub(crate) what: &'static str,
}

impl Default for Walk {
    fn default() -> Self {
        Self {
            gitignore: false,
            what: "--check path",
        }
    }
}

/// The `.gitignore` rules in force in a directory, nearest directory first.
pub(crate) type Rules = Rc<Vec<Gitignore>>;

/// `rules` plus the `.gitignore` of `dir`, if it has one.
pub(crate) fn with_rules_of(dir: &Path, rules: &Rules) -> Result<Rules> {
    let file = dir.join(".gitignore");
    if !file.is_file() {
        return Ok(Rc::clone(rules));
    }
    // Rules and the paths they are matched against are absolute, however the walk was named.
    let mut builder = GitignoreBuilder::new(std::path::absolute(dir)?);
    if let Some(e) = builder.add(&file) {
        anyhow::bail!("failed to read `{}`: {e}", file.display());
    }
    let gitignore = builder
        .build()
        .with_context(|| format!("failed to read `{}`", file.display()))?;
    let mut all = Vec::with_capacity(rules.len() + 1);
    all.push(gitignore);
    all.extend(rules.iter().cloned());
    Ok(Rc::new(all))
}

/// Whether the nearest rule that matches `path` ignores it (a `!pattern` re-includes).
pub(crate) fn ignored(rules: &Rules, path: &Path, is_dir: bool) -> bool {
    let Ok(path) = std::path::absolute(path) else {
        return false;
    };
    for gitignore in rules.iter() {
        let matched = gitignore.matched(&path, is_dir);
        if matched.is_ignore() {
            return true;
        }
        if matched.is_whitelist() {
            return false;
        }
    }
    false
}

/// The rules of the directories above `path` up to its Git repository's root (the nearest
/// directory with `.git`), outermost last; none outside a repository.
fn rules_above(path: &Path) -> Result<Rules> {
    let none: Rules = Rc::new(Vec::new());
    let Ok(absolute) = std::path::absolute(path) else {
        return Ok(none);
    };
    if absolute.join(".git").exists() {
        return Ok(none);
    }
    let mut dirs = Vec::new();
    let mut dir = absolute.parent();
    while let Some(d) = dir {
        dirs.push(d.to_path_buf());
        if d.join(".git").exists() {
            let mut rules = none;
            for d in dirs.iter().rev() {
                rules = with_rules_of(d, &rules)?;
            }
            return Ok(rules);
        }
        dir = d.parent();
    }
    Ok(none)
}

/// [`manifest_files`], with the choices of `how`.
pub(crate) fn walk(paths: &[PathBuf], how: &Walk) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<(PathBuf, bool, Option<Rules>)> =
        paths.iter().map(|p| (p.clone(), true, None)).collect();
    stack.reverse();
    while let Some((path, named, rules)) = stack.pop() {
        let meta =
            fs_err::metadata(&path).with_context(|| format!("failed to read a {}", how.what))?;
        // A directory reached twice (a link back up the tree, or two links to one place) is
        // walked once; a file reached twice is checked once.
        if !seen.insert(identity(&path, &meta)?) {
            continue;
        }
        if meta.is_dir() {
            let rules = match (how.gitignore, rules) {
                (false, _) => None,
                (true, Some(rules)) => Some(with_rules_of(&path, &rules)?),
                (true, None) => Some(with_rules_of(&path, &rules_above(&path)?)?),
            };
            let mut children = Vec::new();
            for entry in fs_err::read_dir(&path)? {
                let entry = entry?;
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let child = entry.path();
                if let Some(rules) = &rules {
                    // Through a link, the link's own kind decides, as Git sees it.
                    let is_dir = child.is_dir();
                    if ignored(rules, &child, is_dir) {
                        continue;
                    }
                }
                children.push(child);
            }
            children.sort();
            stack.extend(
                children
                    .into_iter()
                    .rev()
                    .map(|c| (c, false, rules.clone())),
            );
        } else if !meta.is_file() {
            // A FIFO or a device would hang or never end: only regular files are read.
            if named {
                anyhow::bail!("{} `{}` is not a regular file", how.what, path.display());
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

    #[test]
    fn gitignored_entries_are_skipped_unless_asked() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("apps/build")).unwrap();
        std::fs::create_dir_all(repo.join("apps/keep")).unwrap();
        std::fs::write(repo.join(".gitignore"), "build/\n*.tmp.yaml\n").unwrap();
        std::fs::write(repo.join("apps/keep/.gitignore"), "!x.tmp.yaml\n").unwrap();
        for file in [
            "apps/a.yaml",
            "apps/b.tmp.yaml",
            "apps/build/c.yaml",
            "apps/keep/x.tmp.yaml",
        ] {
            std::fs::write(repo.join(file), "").unwrap();
        }
        let how = Walk {
            gitignore: true,
            what: "path",
        };
        // Named below the root: the root's .gitignore still applies.
        let files = walk(&[repo.join("apps")], &how).unwrap();
        assert_eq!(
            files,
            vec![repo.join("apps/a.yaml"), repo.join("apps/keep/x.tmp.yaml")]
        );
        let all = walk(std::slice::from_ref(&repo), &Walk::default()).unwrap();
        assert_eq!(all.len(), 4);
    }
}
