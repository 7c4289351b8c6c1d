//! The trust anchors `.kseal.yaml` pins for key rings: finding the pin of a ring (the
//! `--ring-anchor` flag first, then the discovered file), writing one with `kseal keys
//! trust` (always to the repository root's file), and telling whether two ring locations
//! name the same ring, whatever the region of a Secrets Manager replica.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keystore::{Kid, Location};

use super::discovery::discover_file;
use super::{FILE_NAME, ProjectFile, RingPin, read};

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
pub(super) fn same_ring(a: &Location, b: &Location, base: &Path) -> bool {
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
///
/// [`Discovery::checked_file`]: super::discovery::Discovery::checked_file
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::discovery::find_from;

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
}
