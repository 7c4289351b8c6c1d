//! The repository's `.kseal.yaml`: the trust anchors of the key rings it seals to, and the
//! creation rules that say which ring or certificate, scope and namespace each path of the
//! repository is sealed with.
//!
//! Like `.sops.yaml`, the file is found from the current directory upwards and committed, so
//! every laptop and CI job of a GitOps repository pins the same anchor and applies the same
//! rules. Since the file decides which key seals, discovery never leaves the repository: it
//! stops at the repository root (the first directory upwards holding `.git`), and outside any
//! git repository only the current directory's own file counts; a file writable by others, by
//! a group that holds another user than its owner (a group of the owner's alone is fine, as
//! OpenSSH judges it: umask 002 systems make every clone group-writable), or owned by another
//! user than the current one or root, is refused. A rule's
//! certificate must lie inside the directory of its file (or be an https:// URL), and a ring a
//! rule names must be pinned in the same file. `kseal keys trust` writes the pins; `kseal
//! config` shows which rule applies to a path. The format
//! (`schemas/kseal-config.schema.json` is its JSON Schema, for editors):
//!
//! ```yaml
//! rings:
//!   - ring: secretsmanager://kseal/fleet   # as given to --ring / --cert
//!     anchor: 4034c72f56d5…                # kid of the ring's first root key (64 hex)
//!     version: 12                          # optional: older indexes are refused (rollback)
//! creation_rules:                          # the first rule whose path_regex matches applies
//!   - path_regex: ^clusters/prod/          # the output path, relative to this file's directory
//!     ring: secretsmanager://kseal/prod    # or cert: certs/prod.crt (relative to this file)
//!     scope: strict                        # strict, namespace-wide or cluster-wide
//!     namespace: prod
//!     forbid_cluster_wide: true            # refuse cluster-wide SealedSecrets here
//! excludes:                                # paths `kseal check` skips (.gitignore syntax)
//!   - charts/*/templates/
//! ```
//!
//! An explicit flag (`--cert`, `--scope`, `-n`) always wins over a rule; `forbid_cluster_wide`
//! is a policy, not a default, and no flag lifts it. A file that pins one ring and has no
//! creation rules seals every path to that ring.
//!
//! Committed files cannot redirect the rules (docs/repositories.md): a rule is matched against
//! the output path as written and as resolved through links, and refused when the two name
//! different rules; a `.kseal.yaml` below the repository root is refused rather than merged (it
//! would shadow the root's rules), and so is one that is a link out of the repository; `kseal
//! keys trust` writes its pin to the root's file.
//!
//! The file's schema and reading it are here; [`discovery`] finds the file and refuses one
//! that someone else could have written, [`pins`] reads and writes the ring anchors, and
//! [`rules`] compiles the creation rules and matches output paths against them.

mod discovery;
mod pins;
mod rules;

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use kseal_keys::Scope;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use discovery::check_owner;
#[cfg(unix)]
pub(crate) use discovery::current_uid;
pub(crate) use discovery::{discover_file, others_in_group};
pub(crate) use pins::{pin_for, same_ring_spec, write_pin};
pub(crate) use rules::{MatchedRule, Project, apply_cert, rule_for_output, rules_name_a_ring};

/// The file's name.
pub(crate) const FILE_NAME: &str = ".kseal.yaml";

/// Larger than any sensible configuration; a bigger file is refused, not read.
const MAX_BYTES: u64 = 1 << 20;

/// kseal's repository configuration (`.kseal.yaml`): the trust anchors of the key rings the
/// repository seals to, and the rules that choose how each path is sealed.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "kseal repository configuration (.kseal.yaml)")]
pub(crate) struct ProjectFile {
    /// Trust anchors of key rings, written by `kseal keys trust`.
    #[serde(default)]
    pub(crate) rings: Vec<RingPin>,
    /// Defaults per output path, as `.sops.yaml`'s `creation_rules`: the first rule whose
    /// `path_regex` matches applies; an explicit flag always wins over it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) creation_rules: Vec<CreationRule>,
    /// Paths `kseal check` skips, as `--exclude`: globs in `.gitignore` syntax, relative to
    /// the directory of this file (e.g. `charts/*/templates/`, Helm templates that hold a
    /// SealedSecret).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) excludes: Vec<String>,
}

/// The trust anchor pinned for one key ring.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RingPin {
    /// The ring, as given to `--ring` or `--cert`.
    pub(crate) ring: String,
    /// The kid of its anchor: 64 lowercase hex characters, as `kseal keys trust` prints it.
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub(crate) anchor: String,
    /// The index version seen when it was pinned: an older index is a rollback.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) version: u64,
}

/// How the SealedSecrets written under matching paths are sealed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreationRule {
    /// Regular expression (Rust `regex` syntax, unanchored like `.sops.yaml`'s) matched against
    /// the output path relative to the directory of this file, with `/` separators (e.g.
    /// `^clusters/prod/`). Without it the rule matches every path, and output to stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path_regex: Option<String>,
    /// Key ring whose active key seals (`secretsmanager://PREFIX`, `PREFIX`, or
    /// `dir://PATH`, a relative PATH being relative to this file), as `--cert RING`. It must
    /// be pinned under `rings` in this file (`kseal keys trust`), or the rule is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ring: Option<String>,
    /// Certificate to seal with, as `--cert`: a PEM file committed in the repository,
    /// relative to this file and inside its directory (an absolute path, or one that leaves the
    /// directory through `..` or a link, is refused), or an https:// URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cert: Option<String>,
    /// Scope of Secrets that declare none, as `--scope`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<RuleScope>,
    /// Namespace of Secrets that declare none, as `-n`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub(crate) namespace: Option<String>,
    /// Refuse to write cluster-wide SealedSecrets (which any namespace of the cluster may
    /// unseal) to matching paths; no flag lifts this.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) forbid_cluster_wide: bool,
}

/// A sealing scope, spelled as `--scope` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RuleScope {
    /// Bound to the Secret's namespace and name.
    Strict,
    /// Bound to the namespace: the Secret may be renamed.
    NamespaceWide,
    /// Any namespace and name of the cluster may unseal it.
    ClusterWide,
}

impl From<RuleScope> for Scope {
    fn from(scope: RuleScope) -> Self {
        match scope {
            RuleScope::Strict => Scope::Strict,
            RuleScope::NamespaceWide => Scope::Namespace,
            RuleScope::ClusterWide => Scope::Cluster,
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Reads a `.kseal.yaml`; a syntax error or unknown field is reported with its line and
/// column. A file that another user could have written is refused ([`check_owner`]).
pub(crate) fn read(path: &Path) -> Result<ProjectFile> {
    use std::io::Read as _;
    let file = fs_err::File::open(path)?;
    // The open file is inspected, so it cannot be swapped between the check and the read.
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    check_owner(path, &meta)?;
    if meta.len() > MAX_BYTES {
        bail!(
            "{} is {} bytes: too large for a kseal configuration",
            path.display(),
            meta.len()
        );
    }
    let mut text = String::new();
    file.take(MAX_BYTES)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if text.trim().is_empty() {
        return Ok(ProjectFile::default());
    }
    crate::yaml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
}

/// The JSON Schema of `.kseal.yaml`, as committed in `schemas/kseal-config.schema.json`.
pub(crate) fn json_schema() -> Result<String> {
    let schema = schemars::schema_for!(ProjectFile);
    let mut text = serde_json::to_string_pretty(&schema)?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `path` writable by its owner only, whatever the umask.
    pub(super) fn write_private(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }

    #[test]
    fn an_unknown_field_is_an_error_not_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        write_private(&path, "rings:\n  - ring: kseal/fleet\n    anchr: abc\n");
        let err = format!("{:#}", read(&path).unwrap_err());
        assert!(err.contains("anchr"), "{err}");
    }
}
