//! The files `kseal check` reads, walked as [`crate::walk`] walks (links followed, each file
//! and directory once, hidden entries and what `.gitignore` files ignore skipped), but never
//! out of the repository: a link whose target lies outside the git repository it is committed
//! in (or, outside any repository, under `/proc`, `/sys` or `/dev`) is reported, not followed,
//! so a committed link cannot make the CI gate read `/proc/self/pagemap` until it runs out of
//! memory, nor walk the runner's file system.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context as _, Result, bail};

use crate::keysource::rules::PathRules;
use crate::walk::{Rules, identity, ignored, is_manifest, with_rules_of};

/// What the walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Files to read, sorted.
    pub(crate) files: Vec<PathBuf>,
    /// Links not followed, with why.
    pub(crate) refused: Vec<(PathBuf, String)>,
    /// Links followed (inside the repository): each as walked, and its canonical target.
    pub(crate) links: Vec<(PathBuf, PathBuf)>,
}

impl Walked {
    /// The other paths the files are reachable by through links: a file or directory reached
    /// twice is read once, under the first path walked, but a creation rule may apply to the
    /// other path (`clusters/prod/app -> ../dev/app`), so each is checked against the rules.
    pub(super) fn aliases(&self) -> Vec<PathBuf> {
        if self.links.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for file in &self.files {
            let Ok(real) = std::fs::canonicalize(file) else {
                continue;
            };
            for (link, target) in &self.links {
                if file.starts_with(link) {
                    continue;
                }
                if let Ok(rest) = real.strip_prefix(target) {
                    let alias = if rest.as_os_str().is_empty() {
                        link.clone()
                    } else {
                        link.join(rest)
                    };
                    if alias != *file {
                        out.push(alias);
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The rules of the directories from `root` down to the parent of `path`.
fn ignores_above(path: &Path, root: Option<&Path>) -> Result<Rules> {
    let mut ignores: Rules = Rc::new(Vec::new());
    let (Some(root), Ok(absolute)) = (root, std::path::absolute(path)) else {
        return Ok(ignores);
    };
    let mut dirs: Vec<&Path> = absolute
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(root))
        .collect();
    dirs.reverse();
    for dir in dirs {
        ignores = with_rules_of(dir, &ignores)?;
    }
    Ok(ignores)
}

/// Where a link may lead: inside `root` (canonical), or anywhere but `/proc`, `/sys` and
/// `/dev` outside any repository. `None` when it may, else why not.
fn link_refused(link: &Path, target: &Path, root: Option<&Path>) -> Option<String> {
    match root {
        Some(root) if !target.starts_with(root) => Some(format!(
            "`{}` is a link to `{}`, outside the repository `{}`: not followed (kseal never \
             reads outside the repository it walks)",
            link.display(),
            target.display(),
            root.display()
        )),
        None if ["/proc", "/sys", "/dev"]
            .iter()
            .any(|special| target.starts_with(special)) =>
        {
            Some(format!(
                "`{}` is a link to `{}`, a kernel or device file: not followed",
                link.display(),
                target.display()
            ))
        }
        _ => None,
    }
}

/// Walks `paths` (see the module documentation); `gitignore`: skip what `.gitignore` files
/// ignore. `kseal keys retire --check` and `kseal keys exposure` walk with it too.
pub(crate) fn walk(paths: &[PathBuf], gitignore: bool, rules: &mut PathRules) -> Result<Walked> {
    let mut walked = Walked::default();
    let mut seen = HashSet::new();
    for named in paths {
        let absolute = std::path::absolute(named)
            .with_context(|| format!("cannot resolve path `{}`", named.display()))?;
        let root = if absolute.is_dir() && absolute.join(".git").exists() {
            Some(absolute.clone())
        } else {
            rules.repo_root(&absolute)
        };
        let root = root.map(|r| std::fs::canonicalize(&r).unwrap_or(r));
        let ignores = if gitignore {
            Some(ignores_above(&absolute, root.as_deref())?)
        } else {
            None
        };
        let mut stack = vec![(named.clone(), true, ignores)];
        while let Some((path, is_named, ignores)) = stack.pop() {
            let link = fs_err::symlink_metadata(&path).context("failed to read a path")?;
            if link.file_type().is_symlink() {
                let target = fs_err::canonicalize(&path).context("failed to follow a link")?;
                if let Some(why) = link_refused(&path, &target, root.as_deref()) {
                    walked.refused.push((path, why));
                    continue;
                }
                walked.links.push((path.clone(), target));
            }
            let meta = fs_err::metadata(&path).context("failed to read a path")?;
            if !seen.insert(identity(&path, &meta)?) {
                continue;
            }
            if meta.is_dir() {
                let ignores = ignores
                    .map(|above| with_rules_of(&path, &above))
                    .transpose()?;
                let mut children = Vec::new();
                for entry in fs_err::read_dir(&path)? {
                    let child = entry?.path();
                    if child
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                    {
                        continue;
                    }
                    if let Some(ignores) = &ignores
                        && ignored(ignores, &child, child.is_dir())
                    {
                        continue;
                    }
                    children.push(child);
                }
                children.sort();
                stack.extend(
                    children
                        .into_iter()
                        .rev()
                        .map(|c| (c, false, ignores.clone())),
                );
            } else if !meta.is_file() {
                // A FIFO or a device would hang or never end: only regular files are read.
                if is_named {
                    bail!("path `{}` is not a regular file", path.display());
                }
            } else if is_named || is_manifest(&path) {
                walked.files.push(path);
            }
        }
    }
    walked.files.sort();
    walked.refused.sort();
    Ok(walked)
}

/// The most read of one file: `kseal check`'s cap, for the commands that walk with [`walk`].
pub(crate) const MAX_FILE_BYTES: u64 = super::scan::MAX_FILE_BYTES;

/// What [`read_capped`] found.
#[derive(Debug)]
pub(crate) enum Capped {
    /// The file's text.
    Text(String),
    /// Not read, with why (not a regular file, larger than the cap, not UTF-8).
    NotRead(String),
}

/// Reads `path` as `kseal check` reads a file: only a regular file (the open file is
/// inspected, so it cannot be swapped between the check and the read), and at most
/// [`MAX_FILE_BYTES`] of it, so a committed file (or a link to `/proc`) cannot
/// make the reader run out of memory. For the commands that walk with [`walk`].
pub(crate) fn read_capped(path: &Path) -> Result<Capped> {
    use std::io::Read as _;
    let cap = MAX_FILE_BYTES;
    let file = fs_err::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Capped::NotRead(format!(
            "`{}` is not a regular file: not read",
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    // fs-err's errors name the file.
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if meta.len() > cap || u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Ok(Capped::NotRead(format!(
            "`{}` is larger than the {} MiB read of one file: not read",
            path.display(),
            cap >> 20
        )));
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => Capped::Text(text),
        Err(_) => Capped::NotRead(format!("`{}` is not UTF-8 text: not read", path.display())),
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_the_repository_are_reported_not_followed() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let repo = top.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("apps")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        std::fs::write(top.join("outside/db.yaml"), "").unwrap();
        std::fs::write(repo.join("apps/a.yaml"), "").unwrap();
        std::fs::write(repo.join(".gitignore"), "build/\n").unwrap();
        std::fs::create_dir_all(repo.join("apps/build")).unwrap();
        std::fs::write(repo.join("apps/build/b.yaml"), "").unwrap();
        symlink("/proc/self/pagemap", repo.join("apps/pagemap.yaml")).unwrap();
        symlink(top.join("outside"), repo.join("apps/outside")).unwrap();
        symlink("../apps", repo.join("apps/loop")).unwrap();
        symlink("a.yaml", repo.join("apps/again.yaml")).unwrap();
        let mut rules = PathRules::new();
        let walked = walk(std::slice::from_ref(&repo), true, &mut rules).unwrap();
        assert_eq!(walked.files, vec![repo.join("apps/a.yaml")]);
        let refused: Vec<&Path> = walked.refused.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            refused,
            vec![repo.join("apps/outside"), repo.join("apps/pagemap.yaml")]
        );
        assert!(walked.refused[1].1.contains("outside the repository"));
        // Named directly (as pre-commit names staged files), the link is refused too.
        let named = walk(&[repo.join("apps/pagemap.yaml")], true, &mut rules).unwrap();
        assert!(named.files.is_empty());
        assert_eq!(named.refused.len(), 1);
    }

    #[test]
    fn read_capped_reads_regular_text_files_up_to_the_cap_only() {
        let tmp = tempfile::tempdir().unwrap();
        let text = tmp.path().join("a.yaml");
        std::fs::write(&text, "kind: SealedSecret\n").unwrap();
        assert!(
            matches!(read_capped(&text).unwrap(), Capped::Text(t) if t == "kind: SealedSecret\n")
        );
        // A sparse file one byte over the cap: refused, named.
        let large = tmp.path().join("large.yaml");
        std::fs::File::create(&large)
            .unwrap()
            .set_len(MAX_FILE_BYTES + 1)
            .unwrap();
        let Capped::NotRead(why) = read_capped(&large).unwrap() else {
            panic!("a file over the cap was read");
        };
        assert!(
            why.contains("large.yaml") && why.contains("16 MiB"),
            "{why}"
        );
        let binary = tmp.path().join("b.yaml");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(read_capped(&binary).unwrap(), Capped::NotRead(w) if w.contains("UTF-8")));
        // A kernel file that reports no size and never ends: read up to the cap at most (or
        // refused by the kernel), never whole.
        let pagemap = Path::new("/proc/self/pagemap");
        if pagemap.exists() {
            let read = read_capped(pagemap);
            assert!(!matches!(read, Ok(Capped::Text(_))), "{read:?}");
        }
    }
}
