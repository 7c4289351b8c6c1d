//! The repository's `.kseal.yaml`: the trust anchors of the key rings it seals to.
//!
//! Like `.sops.yaml`, the file is found from the current directory upwards and committed, so
//! every laptop and CI job of a GitOps repository pins the same anchor. `kseal keys trust`
//! writes it. The format:
//!
//! ```yaml
//! rings:
//!   - ring: secretsmanager://kseal/fleet   # as given to --ring / --cert
//!     anchor: 4034c72f56d5…                # kid of the ring's first root key (64 hex)
//!     version: 12                          # optional: older indexes are refused (rollback)
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keystore::{Kid, Location};
use serde::{Deserialize, Serialize};

/// The file's name.
pub(crate) const FILE_NAME: &str = ".kseal.yaml";

/// Larger than any sensible configuration; a bigger file is refused, not read.
const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProjectFile {
    #[serde(default)]
    pub(crate) rings: Vec<RingPin>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RingPin {
    /// The ring, as given to `--ring` or `--cert`.
    pub(crate) ring: String,
    /// The kid of its anchor.
    pub(crate) anchor: String,
    /// The index version seen when it was pinned: an older index is a rollback.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) version: u64,
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

/// `.kseal.yaml` in `dir` or the nearest directory above it.
pub(crate) fn find_from(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join(FILE_NAME))
        .find(|p| p.is_file())
}

/// Reads a `.kseal.yaml`.
pub(crate) fn read(path: &Path) -> Result<ProjectFile> {
    let meta = fs_err::metadata(path)?;
    if meta.len() > MAX_BYTES {
        bail!(
            "{} is {} bytes: too large for a kseal configuration",
            path.display(),
            meta.len()
        );
    }
    let text = fs_err::read_to_string(path)?;
    if text.trim().is_empty() {
        return Ok(ProjectFile::default());
    }
    crate::yaml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
}

/// The anchor pinned for `location`: `--ring-anchor` / `KSEAL_RING_ANCHOR` first, then the
/// nearest `.kseal.yaml`.
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
    let Some(path) = find_from(&cwd) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_found_from_a_subdirectory_and_matches_any_region() {
        let dir = tempfile::tempdir().unwrap();
        let kid = "a".repeat(64);
        let path = dir.path().join(FILE_NAME);
        write_pin(&path, "kseal/fleet", &Kid::parse(&kid).unwrap(), 3).unwrap();
        let sub = dir.path().join("clusters/prod");
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
    fn an_unknown_field_is_an_error_not_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, "rings:\n  - ring: kseal/fleet\n    anchr: abc\n").unwrap();
        let err = format!("{:#}", read(&path).unwrap_err());
        assert!(err.contains("anchr"), "{err}");
    }
}
