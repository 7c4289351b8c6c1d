//! Which ring or certificate each file of a repository belongs to: the `.kseal.yaml` creation
//! rule of its path, chosen exactly as `kseal seal -w PATH` chooses it (the rule matched
//! against the path as written and where its links lead, refused when the two differ; a file
//! that pins one ring and has no rules gives that ring to every path). `kseal check`,
//! `reseal --stale`, `validate` and `keys retire --check` ask [`PathRules`], so a repository
//! whose prod and staging seal to different rings is checked and re-sealed per group, never
//! against one ring per run.
//!
//! Discovery runs once per directory and each `.kseal.yaml` is read once per run, so checking
//! ten thousand files costs a few hundred lookups, not ten thousand reads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context as _, Result};
use kseal_keys::{Certificate, KeyId};

use super::cert::{CertRequest, Source};
use crate::controller::ControllerTarget;
use crate::project::{MatchedRule, Project, discover_file};

/// What the creation rules say about one path.
#[derive(Debug, Clone)]
pub(crate) struct PathRule {
    /// The `--cert` value the rule seals with: a ring (`secretsmanager://…`, `dir://…`), a
    /// certificate file (absolute) or an https URL; `None` when the rule names neither.
    pub(crate) spec: Option<String>,
    /// The anchor the rule's file pins for its ring (none for a certificate).
    pub(crate) anchor: Option<String>,
    /// The rule and why it applies, for messages.
    pub(crate) why: String,
    /// Whether the rule refuses cluster-wide SealedSecrets.
    pub(crate) forbid_cluster_wide: bool,
}

impl PathRule {
    fn of(rule: &MatchedRule) -> Result<Self> {
        Ok(Self {
            spec: rule.cert_spec()?,
            anchor: rule.ring_anchor(),
            why: rule.describe(),
            forbid_cluster_wide: rule.forbids_cluster_wide(),
        })
    }
}

/// The creation rules of the files of one run, with discovery and reading cached.
#[derive(Default)]
pub(crate) struct PathRules {
    /// Per directory (absolute, as walked): the `.kseal.yaml` that applies there, and the
    /// repository root, or why discovery refused.
    dirs: HashMap<PathBuf, Result<Found, String>>,
    /// Each `.kseal.yaml` read, by path.
    projects: HashMap<PathBuf, Rc<Project>>,
}

#[derive(Clone)]
struct Found {
    project: Option<Rc<Project>>,
    repo_root: Option<PathBuf>,
}

impl PathRules {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn found(&mut self, dir: &Path) -> Result<Found> {
        if let Some(found) = self.dirs.get(dir) {
            return found.clone().map_err(|e| anyhow::anyhow!(e));
        }
        let found = self.discover(dir);
        let kept = found
            .as_ref()
            .map(Clone::clone)
            .map_err(|e| format!("{e:#}"));
        self.dirs.insert(dir.to_owned(), kept);
        found
    }

    fn discover(&mut self, dir: &Path) -> Result<Found> {
        let discovery = discover_file(dir);
        let project = match discovery.checked_file()? {
            None => None,
            Some(file) => Some(match self.projects.get(&file) {
                Some(project) => Rc::clone(project),
                None => {
                    let project = Rc::new(Project::load(&file)?);
                    self.projects.insert(file, Rc::clone(&project));
                    project
                }
            }),
        };
        Ok(Found {
            project,
            repo_root: discovery.repo_root,
        })
    }

    /// The creation rule of `path` (a file, which need not exist yet): `None` when no
    /// `.kseal.yaml` applies or none of its rules matches. An error when the rules cannot be
    /// used for it: a nested or linked-out `.kseal.yaml`, a link that leads the path under
    /// another rule, a ring the file does not pin, a certificate outside the repository.
    pub(crate) fn rule_for(&mut self, path: &Path) -> Result<Option<PathRule>> {
        let absolute = std::path::absolute(path)
            .with_context(|| format!("cannot resolve `{}`", path.display()))?;
        let dir = absolute.parent().unwrap_or(Path::new("/"));
        let Some(project) = self.found(dir)?.project else {
            return Ok(None);
        };
        project
            .rule_for(Some(&absolute))
            .map(|rule| PathRule::of(&rule))
            .transpose()
    }

    /// The git repository root above `path` (the first directory upwards holding `.git`).
    pub(crate) fn repo_root(&mut self, path: &Path) -> Option<PathBuf> {
        let absolute = std::path::absolute(path).ok()?;
        let dir = absolute.parent().unwrap_or(Path::new("/"));
        match self.found(dir) {
            Ok(found) => found.repo_root,
            // Discovery refused the configuration, but it found where the repository ends.
            Err(_) => discover_file(dir).repo_root,
        }
    }
}

/// The keys a rule's `--cert` value stands for: every key of a ring's verified index (read
/// under the rule file's `anchor`), or the one certificate.
pub(crate) fn spec_key_ids(spec: &str, anchor: Option<&str>) -> Result<Vec<KeyId>> {
    let parsed = super::cert::parse_spec(spec)?;
    if let Source::Ring(location) = &parsed.source {
        let Some(read) = super::ring_index_reader() else {
            anyhow::bail!("reading key ring `{location}` is `kseal-ring`'s job");
        };
        let index = read(location, anchor)
            .with_context(|| format!("failed to read the keys of key ring `{location}`"))?;
        return Ok(index.keys.iter().map(|(c, _)| c.id().clone()).collect());
    }
    let request = CertRequest {
        specs: Vec::new(),
        controller: ControllerTarget::default(),
        allow_http: false,
        ring_anchor: None,
    };
    let text = request.fetch_pem(&parsed.source)?;
    let cert = Certificate::from_pem(&text).with_context(|| {
        format!(
            "{} is not a PEM certificate",
            request.describe(&parsed.source)
        )
    })?;
    Ok(vec![cert.id().clone()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }

    #[cfg(unix)]
    #[test]
    fn each_path_gets_its_rule_and_a_link_into_another_rule_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        write(&root.join("certs/prod.crt"), "");
        write(&root.join("certs/dev.crt"), "");
        write(
            &root.join(".kseal.yaml"),
            "creation_rules:\n  - path_regex: ^clusters/prod/\n    cert: certs/prod.crt\n    \
             forbid_cluster_wide: true\n  - path_regex: ^clusters/dev/\n    cert: certs/dev.crt\n",
        );
        write(&root.join("clusters/dev/app/db.yaml"), "");
        std::fs::create_dir_all(root.join("clusters/prod")).unwrap();
        std::os::unix::fs::symlink("../dev/app", root.join("clusters/prod/app")).unwrap();
        let mut rules = PathRules::new();
        let dev = rules
            .rule_for(&root.join("clusters/dev/app/db.yaml"))
            .unwrap()
            .unwrap();
        assert_eq!(
            dev.spec.as_deref(),
            Some(root.join("certs/dev.crt").to_str().unwrap())
        );
        assert!(!dev.forbid_cluster_wide);
        let prod = rules
            .rule_for(&root.join("clusters/prod/new.yaml"))
            .unwrap()
            .unwrap();
        assert!(prod.forbid_cluster_wide);
        assert!(prod.why.contains("creation rule 1"), "{}", prod.why);
        let err = rules
            .rule_for(&root.join("clusters/prod/app/db.yaml"))
            .unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains("leads through a link"), "{err}");
        assert!(err.contains("creation rule 1 applies"), "{err}");
        assert_eq!(
            rules
                .rule_for(&root.join("elsewhere.yaml"))
                .unwrap()
                .map(|r| r.spec),
            None
        );
        assert_eq!(
            rules.repo_root(&root.join("clusters/dev/app/db.yaml")),
            Some(root.clone())
        );
    }

    #[test]
    fn a_nested_kseal_yaml_is_refused_for_the_paths_below_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        write(&root.join(".kseal.yaml"), "");
        write(&root.join("team/.kseal.yaml"), "");
        let mut rules = PathRules::new();
        assert!(
            rules
                .rule_for(&root.join("other/a.yaml"))
                .unwrap()
                .is_none()
        );
        let err = format!(
            "{:#}",
            rules.rule_for(&root.join("team/a.yaml")).unwrap_err()
        );
        assert!(err.contains("below the repository root"), "{err}");
        // Cached: the same answer a second time.
        let again = format!(
            "{:#}",
            rules.rule_for(&root.join("team/b.yaml")).unwrap_err()
        );
        assert_eq!(err, again);
    }
}
