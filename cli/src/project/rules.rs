//! The creation rules of `.kseal.yaml`, compiled and matched: the first rule whose
//! `path_regex` matches an output path applies, matched against the path as written and as
//! resolved through links (a rule is refused when the two differ), and a rule's ring or
//! certificate becomes the `--cert` value it stands for only when the repository's reviewers
//! can see it: a pinned ring, a certificate inside the file's directory, or an https:// URL.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keys::Scope;
use kseal_keystore::Location;

use super::discovery::{Discovery, discover_file, find_from};
use super::pins::same_ring;
use super::{CreationRule, FILE_NAME, ProjectFile, RingPin, RuleScope, read};

/// A `.kseal.yaml` with its creation rules compiled.
#[derive(Debug)]
pub(crate) struct Project {
    /// The file, as found.
    pub(crate) path: PathBuf,
    /// Its directory, canonical: rule paths are relative to it.
    base: PathBuf,
    pub(crate) file: ProjectFile,
    /// One per rule: its compiled `path_regex`, if it has one.
    regexes: Vec<Option<regex::Regex>>,
}

/// The creation rule that applies to an output path, and why (for messages and
/// `kseal config`).
#[derive(Debug, Clone)]
pub(crate) struct MatchedRule {
    /// Its index in `creation_rules`, from 0.
    pub(crate) index: usize,
    pub(crate) rule: CreationRule,
    /// The `.kseal.yaml` it comes from.
    pub(crate) file: PathBuf,
    /// The directory of that file, canonical.
    base: PathBuf,
    /// The rings pinned in that file: a ring the rule names must be among them.
    pins: Vec<RingPin>,
    /// The output path relative to `base` that the rule matched (none: output to stdout).
    pub(crate) relative: Option<String>,
    /// Not a rule of the file: its only pinned ring, the default of a file without creation
    /// rules.
    implicit: bool,
    /// Why the rule is refused: the path as given and where its links lead fall under
    /// different rules (a committed link would choose the key).
    redirect: Option<String>,
}

impl Project {
    /// The `.kseal.yaml` of `dir` or the nearest directory above it within its repository
    /// ([`discover_file`]), read and checked, with where discovery looked.
    pub(crate) fn discover_with(dir: &Path) -> Result<(Discovery, Option<Project>)> {
        let discovery = discover_file(dir);
        let project = discovery
            .checked_file()?
            .as_deref()
            .map(Project::load)
            .transpose()?;
        Ok((discovery, project))
    }

    /// The `.kseal.yaml` found from the current directory upwards.
    pub(crate) fn discover_from_cwd() -> Result<Option<Project>> {
        Ok(Project::discover_from_cwd_with()?.1)
    }

    /// As [`Project::discover_from_cwd`], with where discovery looked.
    pub(crate) fn discover_from_cwd_with() -> Result<(Discovery, Option<Project>)> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        Project::discover_with(&cwd)
    }

    /// Reads `path` and checks its creation rules: every regex compiles, a rule names at most
    /// one of `ring` and `cert`, and does not both default to and forbid cluster-wide.
    pub(crate) fn load(path: &Path) -> Result<Project> {
        let file = read(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let base = fs_err::canonicalize(dir)?;
        let mut regexes = Vec::with_capacity(file.creation_rules.len());
        for (i, rule) in file.creation_rules.iter().enumerate() {
            let what = || format!("{}: creation rule {}", path.display(), i + 1);
            let regex = rule
                .path_regex
                .as_deref()
                .map(|text| {
                    regex::Regex::new(text).map_err(|e| {
                        anyhow::anyhow!(
                            "{}: path_regex `{text}`{} is not a valid regex: {e}",
                            what(),
                            locate(path, text)
                        )
                    })
                })
                .transpose()?;
            regexes.push(regex);
            if rule.ring.is_some() && rule.cert.is_some() {
                bail!("{}: give either `ring` or `cert`, not both", what());
            }
            if rule.forbid_cluster_wide && rule.scope == Some(RuleScope::ClusterWide) {
                bail!(
                    "{}: `scope: cluster-wide` contradicts `forbid_cluster_wide: true`",
                    what()
                );
            }
            if let Some(ring) = &rule.ring {
                Location::parse(ring).with_context(|| format!("{}: `ring`", what()))?;
            }
            if let Some(namespace) = &rule.namespace {
                kseal_api::validation::validate_namespace_name(namespace).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: namespace `{namespace}` is not a valid namespace name: {e}",
                        what()
                    )
                })?;
            }
        }
        Ok(Project {
            path: path.to_owned(),
            base,
            file,
            regexes,
        })
    }

    /// `output` relative to this file's directory, with `/` separators; `None` when it lies
    /// outside it. The file need not exist yet (its directory is resolved, links included).
    pub(crate) fn relative(&self, output: &Path) -> Option<String> {
        let absolute = if output.is_absolute() {
            output.to_owned()
        } else {
            std::env::current_dir().ok()?.join(output)
        };
        // The nearest existing ancestor is resolved (links, `..`); the rest is kept as given.
        let mut existing = absolute.as_path();
        let mut rest = Vec::new();
        let resolved = loop {
            if let Ok(c) = std::fs::canonicalize(existing) {
                break c;
            }
            rest.push(existing.file_name()?);
            existing = existing.parent()?;
        };
        let mut full = resolved;
        for part in rest.iter().rev() {
            full.push(part);
        }
        let relative = full.strip_prefix(&self.base).ok()?;
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        Some(parts.join("/"))
    }

    /// `output` relative to this file's directory as it is written, links not followed (`..`
    /// taken lexically), with `/` separators; `None` when it is written outside it. The part
    /// of it that names this file's directory may go through links (the repository reached
    /// through a linked home directory); the rest is the path a reviewer reads.
    pub(crate) fn relative_as_given(&self, output: &Path) -> Option<String> {
        use std::path::Component;
        let absolute = if output.is_absolute() {
            output.to_owned()
        } else {
            std::env::current_dir().ok()?.join(output)
        };
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for component in absolute.components() {
            match component {
                Component::ParentDir => {
                    parts.pop();
                }
                Component::Normal(part) => parts.push(part),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        let join = |parts: &[&std::ffi::OsStr]| -> String {
            parts
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/")
        };
        let base_parts = self.base.components().count().saturating_sub(1);
        let lexical: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
            .chain(parts.iter().copied())
            .collect();
        // The common case: the path is written through the canonical directory itself.
        if lexical.starts_with(&self.base) {
            return Some(join(&parts[base_parts..]));
        }
        (0..=parts.len()).find_map(|n| {
            let prefix: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
                .chain(parts[..n].iter().copied())
                .collect();
            (std::fs::canonicalize(&prefix).ok()? == self.base).then(|| join(&parts[n..]))
        })
    }

    /// The index of the first rule that matches `relative` (`None`: output to stdout).
    fn index_for(&self, relative: Option<&str>) -> Option<usize> {
        self.regexes
            .iter()
            .position(|regex| match (regex, relative) {
                (None, _) => true,
                (Some(regex), Some(path)) => regex.is_match(path),
                (Some(_), None) => false,
            })
    }

    /// The first creation rule that matches `output` (`None`: output to stdout, which only
    /// rules without `path_regex` match), matched against the path as given and where its
    /// links lead ([`MatchedRule::refused`] says so when the two differ). A file that pins
    /// one ring and has no creation rules seals every path to that ring.
    pub(crate) fn rule_for(&self, output: Option<&Path>) -> Option<MatchedRule> {
        let (given, resolved) = match output {
            Some(path) => (self.relative_as_given(path), self.relative(path)),
            None => (None, None),
        };
        if output.is_some() && given.is_none() && resolved.is_none() {
            return None;
        }
        if self.file.creation_rules.is_empty() {
            let [pin] = self.file.rings.as_slice() else {
                return None;
            };
            let inside = output.is_none() || resolved.is_some();
            return inside.then(|| MatchedRule {
                index: 0,
                rule: CreationRule {
                    ring: Some(pin.ring.clone()),
                    ..CreationRule::default()
                },
                file: self.path.clone(),
                base: self.base.clone(),
                pins: self.file.rings.clone(),
                relative: resolved,
                implicit: true,
                redirect: None,
            });
        }
        let by_given = match output {
            Some(_) => given.as_deref().and_then(|g| self.index_for(Some(g))),
            None => self.index_for(None),
        };
        let by_resolved = match output {
            Some(_) => resolved.as_deref().and_then(|r| self.index_for(Some(r))),
            None => by_given,
        };
        let index = by_resolved.or(by_given)?;
        let redirect = (by_given != by_resolved).then(|| {
            let name = |i: Option<usize>| {
                i.map_or("no creation rule".to_owned(), |i| {
                    format!("creation rule {}", i + 1)
                })
            };
            format!(
                "`{}` leads through a link to `{}`, and {} applies to the path as written but \
                 {} to where it leads: refused, since a committed link must not choose which \
                 key seals; write the file at the path it really has, or remove the link",
                given.as_deref().unwrap_or("(outside the repository)"),
                resolved.as_deref().unwrap_or("(outside the repository)"),
                name(by_given),
                name(by_resolved)
            )
        });
        Some(MatchedRule {
            index,
            rule: self.file.creation_rules[index].clone(),
            file: self.path.clone(),
            base: self.base.clone(),
            pins: self.file.rings.clone(),
            relative: resolved.or(given),
            implicit: false,
            redirect,
        })
    }
}

/// " at line L, column C" of the `path_regex: TEXT` line in `path`, for messages (empty when
/// it cannot be told: the pattern is quoted with escapes, or spread over lines).
fn locate(path: &Path, text: &str) -> String {
    let Ok(content) = fs_err::read_to_string(path) else {
        return String::new();
    };
    content
        .lines()
        .enumerate()
        .find_map(|(i, line)| {
            let key = line.find("path_regex")?;
            let at = line[key..].find(text)? + key;
            Some(format!(" at line {}, column {}", i + 1, at + 1))
        })
        .unwrap_or_default()
}

impl MatchedRule {
    /// Why this rule may not be used for its path: the path as written and where its links
    /// lead fall under different rules.
    pub(crate) fn refused(&self) -> Result<()> {
        match &self.redirect {
            Some(why) => bail!("{}: {why}", self.file.display()),
            None => Ok(()),
        }
    }

    /// "rule 2 of `.kseal.yaml` (path_regex `^prod/` matches `prod/db.yaml`)".
    pub(crate) fn describe(&self) -> String {
        if self.implicit {
            return format!(
                "the only ring pinned in `{}`, which has no creation rules",
                self.file.display()
            );
        }
        let why = match (&self.rule.path_regex, &self.relative) {
            (Some(regex), Some(path)) => format!("path_regex `{regex}` matches `{path}`"),
            (_, Some(path)) => format!("no path_regex: it matches every path, `{path}` too"),
            (_, None) => "no path_regex: it matches output to stdout".to_owned(),
        };
        format!(
            "creation rule {} of `{}` ({why})",
            self.index + 1,
            self.file.display()
        )
    }

    /// The `--cert` value the rule stands for: its ring or certificate, relative paths
    /// resolved against the directory of its file. Only what the repository's reviewers see
    /// is accepted: a certificate file inside the directory of `.kseal.yaml` (after links), an
    /// https:// URL (fetched with verified TLS, as `--cert URL`), or a ring pinned in the same
    /// file (so that its signed history is checked against the anchor).
    pub(crate) fn cert_spec(&self) -> Result<Option<String>> {
        self.refused()?;
        let ring = self
            .rule
            .ring
            .as_deref()
            .or_else(|| self.rule.cert.as_deref().filter(|c| is_ring_spec(c)));
        if let Some(ring) = ring {
            return self.ring_spec(ring).map(Some);
        }
        let Some(cert) = &self.rule.cert else {
            return Ok(None);
        };
        let lower = cert.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Ok(Some(cert.clone()));
        }
        if lower.contains("://") {
            bail!(
                "{}: `cert: {cert}` is refused: a creation rule names a certificate by its path \
                 relative to {FILE_NAME} (committed in the repository) or by an https:// URL",
                self.describe()
            );
        }
        if Path::new(cert).is_absolute() {
            bail!(
                "{}: `cert: {cert}` is an absolute path, refused: a certificate a creation rule \
                 names must be committed in the repository, named relative to {}",
                self.describe(),
                self.base.display()
            );
        }
        let joined = self.base.join(cert);
        let resolved = fs_err::canonicalize(&joined).with_context(|| {
            format!("{}: cannot read the certificate `{cert}`", self.describe())
        })?;
        if !resolved.starts_with(&self.base) {
            bail!(
                "{}: `cert: {cert}` resolves to {}, outside {} (the directory of {FILE_NAME}), \
                 refused: a certificate a creation rule names must be committed in the \
                 repository",
                self.describe(),
                resolved.display(),
                self.base.display()
            );
        }
        Ok(Some(resolved.display().to_string()))
    }

    /// The anchor the file pins for the rule's ring (none for a certificate), to read the
    /// ring from anywhere, not only from a directory whose discovery finds this file.
    pub(crate) fn ring_anchor(&self) -> Option<String> {
        let ring = self
            .rule
            .ring
            .as_deref()
            .or_else(|| self.rule.cert.as_deref().filter(|c| is_ring_spec(c)))?;
        let location = match Location::parse(ring).ok()? {
            Location::Directory {
                path,
                insecure_perms,
            } => Location::Directory {
                path: self.base.join(path),
                insecure_perms,
            },
            other => other,
        };
        self.pins
            .iter()
            .find(|pin| {
                Location::parse(&pin.ring).is_ok_and(|p| same_ring(&p, &location, &self.base))
            })
            .map(|pin| pin.anchor.clone())
    }

    /// Whether the rule refuses cluster-wide SealedSecrets.
    pub(crate) fn forbids_cluster_wide(&self) -> bool {
        self.rule.forbid_cluster_wide
    }

    /// The `--cert` value of the ring `ring`, refused unless the file pins its anchor.
    fn ring_spec(&self, ring: &str) -> Result<String> {
        let location = match Location::parse(ring)? {
            Location::Directory {
                path,
                insecure_perms,
            } => Location::Directory {
                path: self.base.join(path),
                insecure_perms,
            },
            other => other,
        };
        let pinned = self.pins.iter().any(|pin| {
            Location::parse(&pin.ring).is_ok_and(|p| same_ring(&p, &location, &self.base))
        });
        if !pinned {
            bail!(
                "{}: names key ring `{ring}`, but {} pins no anchor for it, refused: a ring a \
                 creation rule seals to must be pinned in the same file, so that kseal checks \
                 its signed history; pin it with `kseal keys trust --ring {ring}` (run next to \
                 {FILE_NAME}) and commit the file",
                self.describe(),
                self.file.display()
            );
        }
        Ok(match location {
            Location::SecretsManager { prefix, region } => match region {
                Some(region) => format!("secretsmanager://{prefix}?region={region}"),
                None => format!("secretsmanager://{prefix}"),
            },
            Location::Directory {
                path,
                insecure_perms,
            } => {
                let suffix = if insecure_perms {
                    "?insecure-perms=true"
                } else {
                    ""
                };
                format!("dir://{}{suffix}", path.display())
            }
        })
    }

    pub(crate) fn scope(&self) -> Option<Scope> {
        self.rule.scope.map(Scope::from)
    }

    pub(crate) fn namespace(&self) -> Option<&str> {
        self.rule.namespace.as_deref()
    }

    /// Refuses `scope` on a path whose rule forbids cluster-wide SealedSecrets.
    pub(crate) fn check_scope(&self, scope: Scope, what: &str) -> Result<()> {
        if self.rule.forbid_cluster_wide && scope == Scope::Cluster {
            bail!(
                "{what} would be sealed cluster-wide, which {} forbids (forbid_cluster_wide: \
                 any namespace of the cluster could unseal it); seal it strict or \
                 namespace-wide",
                self.describe()
            );
        }
        Ok(())
    }
}

/// The creation rule for `output`, from the `.kseal.yaml` found from the current directory
/// upwards (none without such a file or a matching rule).
/// A rule whose path as written and whose resolved path fall under different rules is
/// refused ([`MatchedRule::refused`]), and so is a nested `.kseal.yaml` above the output path
/// ([`Discovery::checked_file`]), even when the current directory's discovery does not meet it.
pub(crate) fn rule_for_output(output: Option<&Path>) -> Result<Option<MatchedRule>> {
    if let Some(dir) = output.and_then(existing_dir_of) {
        discover_file(&dir).checked_file()?;
    }
    let rule = Project::discover_from_cwd()?.and_then(|p| p.rule_for(output));
    if let Some(rule) = &rule {
        rule.refused()?;
    }
    Ok(rule)
}

/// The nearest existing directory holding `path` (which need not exist yet).
fn existing_dir_of(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    absolute
        .ancestors()
        .skip(1)
        .find(|d| d.is_dir())
        .map(Path::to_owned)
}

/// Fills `--cert` from `rule` when no certificate was given on the command line (or in
/// `KSEAL_CERT`): an explicit flag always wins.
pub(crate) fn apply_cert(cert: &mut Vec<String>, rule: Option<&MatchedRule>) -> Result<()> {
    if cert.is_empty()
        && let Some(spec) = rule.map(MatchedRule::cert_spec).transpose()?.flatten()
    {
        cert.push(spec);
    }
    Ok(())
}

/// Whether a `.kseal.yaml` found from the current directory, or from a path among `args`
/// (`kseal check clusters/`), seals with a key ring: a creation rule names one, or the file
/// pins one ring and has no rules (the `kseal` executable then hands the command to
/// `kseal-ring`). A file that cannot be read counts as none: the command itself reports it.
pub(crate) fn rules_name_a_ring(args: &[std::ffi::OsString]) -> bool {
    let Ok(cwd) = std::env::current_dir() else {
        return false;
    };
    let mut dirs = vec![cwd.clone()];
    for arg in args.iter().skip(1) {
        let path = cwd.join(arg);
        if path.is_dir() {
            dirs.push(path);
        } else if path.is_file()
            && let Some(parent) = path.parent()
        {
            dirs.push(parent.to_owned());
        }
    }
    let mut files: Vec<PathBuf> = dirs.iter().filter_map(|d| find_from(d)).collect();
    files.sort();
    files.dedup();
    files.iter().filter_map(|p| read(p).ok()).any(|f| {
        // A file that pins one ring and has no rules seals to that ring.
        (f.creation_rules.is_empty() && f.rings.len() == 1)
            || f.creation_rules
                .iter()
                .any(|r| r.ring.is_some() || r.cert.as_deref().is_some_and(is_ring_spec))
    })
}

/// Whether a rule's `cert` names a key ring rather than a certificate.
fn is_ring_spec(cert: &str) -> bool {
    let lower = cert.to_ascii_lowercase();
    lower.starts_with("secretsmanager://") || lower.starts_with("dir:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::tests::write_private;

    #[test]
    fn the_first_matching_rule_applies_and_forbid_cluster_wide_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("prod/apps")).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join("fleet.crt"), "").unwrap();
        write_private(
            &root.join(FILE_NAME),
            "creation_rules:\n  - path_regex: ^prod/\n    forbid_cluster_wide: true\n    \
             namespace: prod\n  - cert: fleet.crt\n",
        );
        let project = Project::discover_with(&root.join("prod/apps"))
            .unwrap()
            .1
            .unwrap();
        let prod = project
            .rule_for(Some(&root.join("prod/apps/db.yaml")))
            .unwrap();
        assert_eq!((prod.index, prod.namespace()), (0, Some("prod")));
        assert_eq!(prod.relative.as_deref(), Some("prod/apps/db.yaml"));
        let other = project.rule_for(Some(&root.join("dev/db.yaml"))).unwrap();
        assert_eq!(other.index, 1);
        assert_eq!(
            other.cert_spec().unwrap(),
            Some(root.join("fleet.crt").display().to_string())
        );
        // A ring the file does not pin is refused; once pinned, it is accepted.
        let mut ring = other.clone();
        ring.rule = CreationRule {
            ring: Some("kseal/prod".to_owned()),
            ..CreationRule::default()
        };
        let err = format!("{:#}", ring.cert_spec().unwrap_err());
        assert!(err.contains("pins no anchor"), "{err}");
        ring.pins.push(RingPin {
            ring: "secretsmanager://kseal/prod?region=eu-west-1".to_owned(),
            anchor: "a".repeat(64),
            version: 0,
        });
        assert_eq!(
            ring.cert_spec().unwrap().as_deref(),
            Some("secretsmanager://kseal/prod")
        );
        // Output to stdout: only a rule without path_regex matches.
        assert_eq!(project.rule_for(None).unwrap().index, 1);
        // Outside the directory of the file: no rule.
        assert!(
            project
                .rule_for(Some(Path::new("/elsewhere/x.yaml")))
                .is_none()
        );

        assert!(prod.forbids_cluster_wide());
        assert!(prod.describe().contains("creation rule 1"));
        assert!(!other.forbids_cluster_wide());
    }
}
