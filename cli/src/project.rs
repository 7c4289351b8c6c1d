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

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keys::Scope;
use kseal_keystore::{Kid, Location};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// A pin found for a ring, and where it came from (for messages).
#[derive(Debug, Clone)]
pub(crate) struct Pin {
    pub(crate) anchor: Kid,
    pub(crate) from: String,
    /// The oldest index version accepted (0: any).
    pub(crate) version: u64,
}

/// Whether two locations name the same ring: the same Secrets Manager prefix (any region: a
/// replica is the same ring), or the same directory.
fn same_ring(a: &Location, b: &Location, base: &Path) -> bool {
    match (a, b) {
        (
            Location::SecretsManager { prefix: p, .. },
            Location::SecretsManager { prefix: q, .. },
        ) => p == q,
        (Location::Directory { path: p, .. }, Location::Directory { path: q, .. }) => {
            let resolve = |p: &Path| {
                let p = if p.is_absolute() {
                    p.to_owned()
                } else {
                    base.join(p)
                };
                std::fs::canonicalize(&p).unwrap_or(p)
            };
            let cwd = std::env::current_dir().unwrap_or_default();
            let q = if q.is_absolute() {
                q.to_owned()
            } else {
                cwd.join(q)
            };
            resolve(p) == std::fs::canonicalize(&q).unwrap_or(q)
        }
        _ => false,
    }
}

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
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
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
fn check_owner(_: &Path, _: &std::fs::Metadata) -> Result<()> {
    Ok(())
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

/// The anchor pinned for `location`: `--ring-anchor` / `KSEAL_RING_ANCHOR` first, then the
/// `.kseal.yaml` found from the current directory ([`discover_file`]: never above the
/// repository root).
pub(crate) fn pin_for(location: &Location, flag: Option<&str>) -> Result<Option<Pin>> {
    if let Some(text) = flag.map(str::trim).filter(|t| !t.is_empty()) {
        let anchor = Kid::parse(text).context("--ring-anchor must be a kid: 64 lowercase hex characters, as `kseal keys trust` prints it")?;
        return Ok(Some(Pin {
            anchor,
            from: "--ring-anchor".to_owned(),
            version: 0,
        }));
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let Some(path) = discover_file(&cwd).checked_file()? else {
        return Ok(None);
    };
    let file = read(&path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    for pin in &file.rings {
        let Ok(pinned) = Location::parse(&pin.ring) else {
            bail!(
                "{}: ring {:?} is not a ring location",
                path.display(),
                pin.ring
            );
        };
        if same_ring(&pinned, location, base) {
            let anchor = Kid::parse(&pin.anchor).with_context(|| {
                format!(
                    "{}: the anchor of ring {:?} is not a kid",
                    path.display(),
                    pin.ring
                )
            })?;
            return Ok(Some(Pin {
                anchor,
                from: path.display().to_string(),
                version: pin.version,
            }));
        }
    }
    Ok(None)
}

/// Adds or replaces the pin of `ring` in `path` (created if missing), keeping other rings, with
/// the index `version` seen. Returns the previous anchor of that ring, if it differed.
pub(crate) fn write_pin(
    path: &Path,
    ring: &str,
    anchor: &Kid,
    version: u64,
) -> Result<Option<String>> {
    let target = pin_file(path);
    if target != path {
        eprintln!(
            "note: writing the pin to {}, the repository root's {FILE_NAME}: kseal reads no \
             other (a nested one would shadow its rules, and is refused)",
            target.display()
        );
    }
    let path = target.as_path();
    let mut file = if path.exists() {
        read(path)?
    } else {
        ProjectFile::default()
    };
    let location = Location::parse(ring)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut previous = None;
    let mut found = false;
    for pin in &mut file.rings {
        if Location::parse(&pin.ring).is_ok_and(|l| same_ring(&l, &location, base)) {
            previous = Some(std::mem::replace(&mut pin.anchor, anchor.to_string()));
            ring.clone_into(&mut pin.ring);
            pin.version = version;
            found = true;
        }
    }
    if !found {
        file.rings.push(RingPin {
            ring: ring.to_owned(),
            anchor: anchor.to_string(),
            version,
        });
    }
    let mut text = String::from(
        "# kseal: the trust anchors of the key rings this repository seals to (written by\n\
         # `kseal keys trust`; commit this file). kseal seals to a ring only when its signed\n\
         # history starts at the anchor pinned here.\n",
    );
    text.push_str(&crate::yaml::to_string(&file).context("cannot write the configuration")?);
    crate::manifest::write_atomic(path, text.as_bytes(), false)
        .with_context(|| format!("failed to write {}", path.display()))?;
    Ok(previous.filter(|p| p != anchor.as_str()))
}

/// Whether the ring `a` (a `--cert` value a creation rule stands for) and `b` (as `--ring`
/// takes it, relative to the current directory) are the same ring.
pub(crate) fn same_ring_spec(a: &str, b: &str) -> bool {
    let cwd = std::env::current_dir().unwrap_or_default();
    match (Location::parse(a), Location::parse(b)) {
        (Ok(a), Ok(b)) => same_ring(&a, &b, &cwd),
        _ => false,
    }
}

/// Where a pin asked for in `path` is written: inside a git repository, a `.kseal.yaml` goes
/// to the repository root, the one file discovery reads ([`Discovery::checked_file`] refuses
/// nested ones); a file of another name, or outside any repository, stays where it was asked.
pub(crate) fn pin_file(path: &Path) -> PathBuf {
    if path.file_name().is_none_or(|n| n != FILE_NAME) {
        return path.to_owned();
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match discover_file(dir).repo_root {
        Some(root) if std::fs::canonicalize(dir).ok().as_deref() != Some(root.as_path()) => {
            root.join(FILE_NAME)
        }
        _ => path.to_owned(),
    }
}

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
    fn write_private(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }

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
    fn a_pin_is_found_from_a_subdirectory_and_matches_any_region() {
        let dir = tempfile::tempdir().unwrap();
        let kid = "a".repeat(64);
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        let path = root.join(FILE_NAME);
        write_pin(&path, "kseal/fleet", &Kid::parse(&kid).unwrap(), 3).unwrap();
        let sub = root.join("clusters/prod");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(find_from(&sub).unwrap(), path);
        let file = read(&path).unwrap();
        assert_eq!(file.rings.len(), 1);
        let base = dir.path();
        let a = Location::parse(&file.rings[0].ring).unwrap();
        let b = Location::parse("secretsmanager://kseal/fleet?region=eu-west-1").unwrap();
        assert!(same_ring(&a, &b, base));
        let c = Location::parse("kseal/other").unwrap();
        assert!(!same_ring(&a, &c, base));
    }

    #[test]
    fn writing_a_pin_again_replaces_it_and_keeps_other_rings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let one = Kid::parse(&"1".repeat(64)).unwrap();
        let two = Kid::parse(&"2".repeat(64)).unwrap();
        assert_eq!(write_pin(&path, "kseal/a", &one, 1).unwrap(), None);
        assert_eq!(write_pin(&path, "kseal/b", &one, 1).unwrap(), None);
        assert_eq!(
            write_pin(&path, "secretsmanager://kseal/a", &two, 5).unwrap(),
            Some(one.to_string())
        );
        let file = read(&path).unwrap();
        assert_eq!(file.rings.len(), 2);
        assert_eq!(file.rings[0].anchor, two.to_string());
        assert_eq!(file.rings[0].version, 5);
        assert_eq!(file.rings[1].anchor, one.to_string());
    }

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

    #[test]
    fn an_unknown_field_is_an_error_not_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        write_private(&path, "rings:\n  - ring: kseal/fleet\n    anchr: abc\n");
        let err = format!("{:#}", read(&path).unwrap_err());
        assert!(err.contains("anchr"), "{err}");
    }
}
