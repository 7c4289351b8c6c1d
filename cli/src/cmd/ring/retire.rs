//! `kseal keys retire`: remove a key from the ring, after proving that no SealedSecret needs
//! it.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_keys::KeyRing;
use kseal_keystore::{Kid, RetireOutcome, Ring, Snapshot, Store};

use super::mirror;
use crate::args::RetireArgs;
use crate::keysource::ring::{block_on, open, read_index, ring_label};
use crate::keysource::rules::PathRules;
use crate::opening::open_items;
use crate::output::confirm_or_yes;
use crate::text::count;

/// The SealedSecrets of one file (other kinds are skipped).
fn sealed_secrets_in(path: &Path) -> Result<Vec<SealedSecret>> {
    let text = fs_err::read_to_string(path)?;
    crate::manifest::sealed_secrets_in(path, &text, ", so it cannot be checked")
}

/// What scanning the `--check` paths found.
#[derive(Debug, Default)]
struct Dependence {
    /// Manifest files read.
    read: usize,
    /// SealedSecrets checked.
    objects: usize,
    /// Files that hold them.
    files: usize,
    /// `file: namespace/name (items)` that open only with the retiring key.
    needs: Vec<String>,
    /// Objects with items no key of the ring opens (not blocking, but worth a look).
    broken: Vec<String>,
    /// Files whose `.kseal.yaml` creation rule seals them to another ring or certificate:
    /// another group's, not checked against this ring.
    other_group: usize,
}

/// Whether the creation rule of `file` (as `kseal seal` and `kseal check` choose it) seals it
/// to another ring or certificate than `ring`.
fn sealed_elsewhere(file: &Path, ring: &str, rules: &mut PathRules) -> Result<bool> {
    Ok(rules
        .rule_for(file)?
        .and_then(|rule| rule.spec)
        .is_some_and(|spec| !crate::project::same_ring_spec(&spec, ring)))
}

fn check_dependence(
    paths: &[PathBuf],
    ring: &str,
    without: &KeyRing,
    only: &KeyRing,
) -> Result<Dependence> {
    let mut found = Dependence::default();
    let mut rules = PathRules::new();
    for file in crate::walk::manifest_files(paths)? {
        found.read += 1;
        if sealed_elsewhere(&file, ring, &mut rules)? {
            found.other_group += 1;
            continue;
        }
        let sealed = sealed_secrets_in(&file)?;
        if sealed.is_empty() {
            continue;
        }
        found.files += 1;
        for s in &sealed {
            found.objects += 1;
            let name = format!(
                "{}: {}/{}",
                file.display(),
                s.metadata.namespace.as_deref().unwrap_or("-"),
                s.metadata.name.as_deref().unwrap_or("-")
            );
            let opened = open_items(s, without).with_context(|| format!("cannot check {name}"))?;
            if opened.failed.is_empty() {
                continue;
            }
            let mut needs = Vec::new();
            let mut broken = Vec::new();
            let by_retiring =
                open_items(s, only).with_context(|| format!("cannot check {name}"))?;
            for item in &opened.failed {
                if by_retiring.items.contains_key(item) {
                    needs.push(item.clone());
                } else {
                    broken.push(item.clone());
                }
            }
            if !needs.is_empty() {
                found.needs.push(format!("{name} ({})", needs.join(", ")));
            }
            if !broken.is_empty() {
                found.broken.push(format!("{name} ({})", broken.join(", ")));
            }
        }
    }
    Ok(found)
}

pub(crate) fn retire(args: RetireArgs) -> Result<()> {
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        let snapshot = read_index(&ring).await?;
        let target = snapshot.index.resolve(&args.key)?.kid.clone();
        if snapshot.index.keys.len() <= 1 {
            bail!(
                "key {} is the last key of key ring {}: a ring always keeps a key to seal \
                 with; rotate first",
                target.short(),
                ring_label(&ring)
            );
        }
        if snapshot.index.active.as_ref() == Some(&target) {
            bail!(
                "key {} is the active sealing key: rotate (or activate another key) first",
                target.short()
            );
        }
        eprintln!(
            "reading the {} of key ring {} to check what still needs key {}…",
            count(snapshot.index.keys.len(), "key"),
            ring_label(&ring),
            target.short()
        );
        let (without, only) = read_split(&ring, &snapshot, &target).await?;
        prove_unneeded(&args, &without, &only, &target)?;
        let fate = match ring.store() {
            Store::Directory(_) => {
                "Its files move to retired/ in the ring directory and stay there until you \
                 delete them"
                    .to_owned()
            }
            Store::SecretsManager(_) => format!(
                "Its secret is deleted after {}",
                count(args.recovery_days, "day")
            ),
        };
        if args.dry_run {
            eprintln!(
                "dry run: key {} would be retired from key ring {}. {fate}. Nothing was changed",
                target.short(),
                ring_label(&ring),
            );
            return Ok(());
        }
        confirm_or_yes(
            &format!(
                "Retire key {} from key ring {}? {fate}",
                target.short(),
                ring_label(&ring),
            ),
            args.yes,
            &format!(
                "not retiring key {} without confirmation: standard input is not a terminal, \
                 so pass --yes (or first --dry-run to see what would happen)",
                target.short()
            ),
        )?;
        let outcome = ring
            .retire(target.as_str(), args.recovery_days)
            .await
            .with_context(|| format!("failed to retire key {}", target.short()))?;
        eprintln!(
            "key {} removed from the index; controllers drop their copy after their retire grace{}",
            outcome.kid.short(),
            deletion_note(&ring, &outcome, args.recovery_days)
        );
        mirror(&ring, &args.write).await
    })?
}

/// Reads every key of the ring: the ring without `target`, and `target` alone.
async fn read_split(ring: &Ring, snapshot: &Snapshot, target: &Kid) -> Result<(KeyRing, KeyRing)> {
    let mut without = KeyRing::new();
    let mut only = KeyRing::new();
    for entry in &snapshot.index.keys {
        let pair = ring
            .read_key(&entry.kid)
            .await
            .with_context(|| format!("failed to read key {}", entry.kid.short()))?;
        if entry.kid == *target {
            only.insert(pair);
        } else {
            without.insert(pair);
        }
    }
    Ok((without, only))
}

/// Checks the SealedSecrets under `--check` with and without `target`: refuses to retire a
/// key some of them open only with (or, without `--allow-none`, when none was found).
fn prove_unneeded(
    args: &RetireArgs,
    without: &KeyRing,
    only: &KeyRing,
    target: &Kid,
) -> Result<()> {
    let found = check_dependence(&args.check, &args.ring.ring, without, only)?;
    eprintln!(
        "checked {} in {} (of {} under --check)",
        count(found.objects, "SealedSecret"),
        count(found.files, "file"),
        count(found.read, "manifest file")
    );
    if found.other_group > 0 {
        eprintln!(
            "skipped {} that .kseal.yaml creation rules seal to another ring or certificate",
            count(found.other_group, "file")
        );
    }
    for b in &found.broken {
        eprintln!("warning: no key of the ring opens {b}");
    }
    if found.objects == 0 {
        // Nothing checked proves nothing: a wrong path or an unmounted repository would
        // let a key that thousands of SealedSecrets need go.
        if !args.allow_none {
            bail!(
                "found no SealedSecret under --check {}: nothing shows that key {} is no \
                 longer needed (a wrong path?); pass --allow-none to retire it anyway",
                args.check
                    .iter()
                    .map(|p| format!("`{}`", p.display()))
                    .collect::<Vec<_>>()
                    .join(", "),
                target.short()
            );
        }
        eprintln!("warning: no SealedSecret was checked (--allow-none)");
    }
    if !found.needs.is_empty() {
        let shown: Vec<&str> = found.needs.iter().take(20).map(String::as_str).collect();
        bail!(
            "key {} is still needed: {} open only with it:\n  {}{}\n\
             re-seal them with the active key (e.g. `kseal reseal --controller --in-place \
             FILE`), commit, and retire again",
            target.short(),
            count(found.needs.len(), "SealedSecret"),
            shown.join("\n  "),
            if found.needs.len() > shown.len() {
                format!("\n  … and {} more", found.needs.len() - shown.len())
            } else {
                String::new()
            }
        );
    }
    if found.objects > 0 {
        eprintln!("none of them needs key {}", target.short());
    }
    Ok(())
}

/// What becomes of a retired key's secret or files, for the message after retiring it.
fn deletion_note(ring: &Ring, outcome: &RetireOutcome, recovery_days: u32) -> String {
    if outcome.deletion_scheduled {
        match ring.store() {
            // Nothing deletes a directory ring's retired keys: say so.
            Store::Directory(_) => format!(
                "; {} moved to retired/{}-<unix seconds>/ in {}, and stays there until \
                 you delete it",
                ring.key_name(&outcome.kid),
                outcome.kid,
                ring.store().describe()
            ),
            Store::SecretsManager(_) => format!(
                "; {} is deleted in {} unless restored",
                ring.key_name(&outcome.kid),
                count(recovery_days, "day")
            ),
        }
    } else {
        String::new()
    }
}
