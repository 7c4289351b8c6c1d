//! What `kseal check` skips: the `--exclude` globs (relative to the current directory) and the
//! `excludes:` of the `.kseal.yaml` that applies to each checked path (relative to that file's
//! directory), both in `.gitignore` syntax. A directory that matches is skipped whole; a file
//! named on the command line (as pre-commit passes them) is skipped too when it matches.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The exclude rules of a run, one set per root.
#[derive(Debug, Default)]
pub(super) struct Excludes {
    sets: Vec<Gitignore>,
}

/// The rules `globs` from `source`, relative to `root`.
fn rules(root: &Path, globs: &[String], source: &str) -> Result<Gitignore> {
    let mut builder = GitignoreBuilder::new(root);
    for glob in globs {
        if glob.trim().is_empty() {
            anyhow::bail!("{source}: an exclude glob is empty");
        }
        builder
            .add_line(None, glob)
            .with_context(|| format!("{source}: exclude glob `{glob}` is not valid"))?;
    }
    builder
        .build()
        .with_context(|| format!("{source}: the exclude globs are not valid"))
}

impl Excludes {
    /// The rules of `--exclude` `flags` and of the `.kseal.yaml` files that apply to `paths`.
    pub(super) fn load(flags: &[String], paths: &[PathBuf]) -> Result<Self> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let mut sets = Vec::new();
        if !flags.is_empty() {
            sets.push(rules(&cwd, flags, "--exclude")?);
        }
        let mut files = BTreeSet::new();
        for path in paths {
            let path = cwd.join(path);
            let dir = if path.is_dir() {
                path.as_path()
            } else {
                path.parent().unwrap_or(&cwd)
            };
            // A nested or linked-out `.kseal.yaml` is refused: its excludes could hide files.
            if let Some(file) = crate::project::discover_file(dir).checked_file()? {
                files.insert(file);
            }
        }
        for file in files {
            let project = crate::project::read(&file)?;
            if project.excludes.is_empty() {
                continue;
            }
            let root = std::path::absolute(file.parent().unwrap_or(&cwd))
                .context("cannot read the current directory")?;
            sets.push(rules(
                &root,
                &project.excludes,
                &format!("`excludes` of {}", file.display()),
            )?);
        }
        Ok(Self { sets })
    }

    /// Whether `path` (a file) or a directory above it matches a rule.
    pub(super) fn excludes(&self, path: &Path) -> bool {
        let Ok(path) = std::path::absolute(path) else {
            return false;
        };
        self.sets.iter().any(|set| {
            path.starts_with(set.path())
                && set.matched_path_or_any_parents(&path, false).is_ignore()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_files_and_whole_directories_under_their_root() {
        let root = std::path::absolute("/repo").unwrap();
        let set = rules(
            &root,
            &["charts/*/templates/".to_owned(), "*.tpl.yaml".to_owned()],
            "--exclude",
        )
        .unwrap();
        let excludes = Excludes { sets: vec![set] };
        assert!(excludes.excludes(&root.join("charts/app/templates/secret.yaml")));
        assert!(excludes.excludes(&root.join("charts/app/templates/sub/deep.yaml")));
        assert!(excludes.excludes(&root.join("clusters/prod/db.tpl.yaml")));
        assert!(!excludes.excludes(&root.join("charts/app/values.yaml")));
        assert!(!excludes.excludes(&root.join("clusters/prod/db.yaml")));
        // Outside the root, nothing matches (and nothing panics).
        assert!(!excludes.excludes(Path::new("/elsewhere/charts/app/templates/x.yaml")));
    }

    #[test]
    fn an_empty_glob_is_an_error_naming_its_source() {
        let err = rules(Path::new("/repo"), &[" ".to_owned()], "--exclude").unwrap_err();
        assert_eq!(format!("{err:#}"), "--exclude: an exclude glob is empty");
    }
}
