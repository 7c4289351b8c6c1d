//! `kseal keys retire`: remove a key from the ring, after proving that no SealedSecret needs
//! it: none under `--check` opens only with it, and no cluster that reported recently (its
//! fleet record) still opens objects with it (`--force` overrides the latter).
//!
//! The `--check` paths are walked as `kseal check` walks them ([`crate::cmd::check::tree`]):
//! links are followed inside the repository, each file and directory once (a loop ends), but
//! never out of the git repository a link is committed in, and only regular files up to
//! `kseal check`'s size cap are read. What is not read may hold the only SealedSecret that
//! needs the key, so it blocks the retirement: a file not read, and a link out of the
//! repository unless its target is under another `--check` path. A link to `/proc`, `/sys` or
//! `/dev` holds no SealedSecret: it is only reported.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_api::SealedSecret;
use kseal_keys::KeyRing;
use kseal_keystore::{Kid, RetireOutcome, Ring, Snapshot, Store, fleet};

use super::mirror;
use crate::args::RetireArgs;
use crate::cmd::check::tree::{Capped, read_capped, walk};
use crate::cmd::fleet::{list as fleet_list, open_store};
use crate::keysource::ring::{block_on, open, read_index, ring_label};
use crate::keysource::rules::PathRules;
use crate::opening::open_items;
use crate::output::confirm_or_yes;
use crate::text::count;

/// The SealedSecrets of one file (other kinds are skipped); `Err(why)` when it is not read.
fn sealed_secrets_in(path: &Path) -> Result<Result<Vec<SealedSecret>, String>> {
    let text = match read_capped(path)? {
        Capped::Text(text) => text,
        Capped::NotRead(why) => return Ok(Err(why)),
    };
    crate::manifest::sealed_secrets_in(path, &text, ", so it cannot be checked").map(Ok)
}

/// Whether a link the walk did not follow may hide a SealedSecret: not when its target is a
/// kernel or device file, nor when it lies under one of the `--check` paths (walked anyway).
fn link_blocks(link: &Path, checked: &[PathBuf]) -> bool {
    let Ok(target) = std::fs::canonicalize(link) else {
        return true;
    };
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|special| target.starts_with(special))
    {
        return false;
    }
    !checked.iter().any(|path| target.starts_with(path))
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
    /// Links not followed, with why, and whether they block the retirement.
    links_skipped: Vec<(String, bool)>,
    /// Files not read (too large, not a regular file, not UTF-8), with why: they block.
    not_read: Vec<String>,
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
    let walked = walk(paths, false, &mut rules).context("failed to walk the --check paths")?;
    let checked: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    for (link, why) in walked.refused {
        found
            .links_skipped
            .push((why, link_blocks(&link, &checked)));
    }
    for file in walked.files {
        found.read += 1;
        if sealed_elsewhere(&file, ring, &mut rules)? {
            found.other_group += 1;
            continue;
        }
        let sealed = match sealed_secrets_in(&file)? {
            Ok(sealed) => sealed,
            Err(why) => {
                found.not_read.push(why);
                continue;
            }
        };
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
        fleet_check(&args, &target).await?;
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

/// Refuses (without `--force`) to retire `target` while a cluster that reported within its
/// silence window (two heartbeats) says SealedSecrets there open with it. Records are reports:
/// they can stop a retirement, never allow one that `--check` refuses.
async fn fleet_check(args: &RetireArgs, target: &Kid) -> Result<()> {
    let listed = match async {
        let store = open_store(&args.ring).await?;
        let listed = fleet_list(&store).await?;
        anyhow::Ok((store.describe(), listed))
    }
    .await
    {
        Ok(found) => found,
        Err(e) if args.force => {
            eprintln!(
                "warning: {}; retiring without the fleet's reports (--force)",
                crate::text::chain(&e)
            );
            return Ok(());
        }
        Err(e) => {
            return Err(e.context(
                "cannot tell whether a cluster still opens SealedSecrets with the key (pass \
                 --force to retire without the fleet's reports)",
            ));
        }
    };
    let (store, listed) = listed;
    if listed.is_empty() {
        eprintln!(
            "no cluster has reported on this key ring (nothing in {store}): only --check decides"
        );
        return Ok(());
    }
    let now = jiff::Timestamp::now();
    let mut using = Vec::new();
    let mut quiet = Vec::new();
    let mut unknown = Vec::new();
    let mut recent = 0;
    for l in &listed {
        let Ok(ack) = &l.ack else {
            unknown.push(format!("{} (unreadable)", l.name));
            continue;
        };
        let n = ack.objects.get(target).copied().unwrap_or(0);
        if fleet::silence(ack, now).is_none() {
            recent += 1;
        }
        if n > 0 {
            match fleet::silence(ack, now) {
                None => using.push(format!("{} ({})", l.name, count(n, "SealedSecret"))),
                Some(q) => quiet.push(format!(
                    "{} ({} when last heard from, {} ago)",
                    l.name,
                    count(n, "SealedSecret"),
                    fleet::span(q)
                )),
            }
        } else if ack.unattributed > 0 && fleet::silence(ack, now).is_none() {
            unknown.push(format!(
                "{} ({} whose key it cannot name)",
                l.name,
                count(ack.unattributed, "SealedSecret")
            ));
        }
    }
    let list = |names: &[String]| {
        let mut shown: Vec<&str> = names.iter().take(20).map(String::as_str).collect();
        let more = format!("and {} more", names.len().saturating_sub(20));
        if names.len() > 20 {
            shown.push(&more);
        }
        shown.join(", ")
    };
    if !quiet.is_empty() {
        eprintln!(
            "warning: silent clusters last reported SealedSecrets opened with key {}: {} (not \
             counted: they have not reported within two heartbeats)",
            target.short(),
            list(&quiet)
        );
    }
    if !unknown.is_empty() {
        eprintln!(
            "warning: whether these clusters need key {} is unknown: {}",
            target.short(),
            list(&unknown)
        );
    }
    if using.is_empty() {
        eprintln!(
            "{} reported recently: none opens SealedSecrets with key {}",
            count(recent, "cluster"),
            target.short()
        );
        return Ok(());
    }
    let what = format!(
        "key {} still opens SealedSecrets in {} that reported recently: {}",
        target.short(),
        count(using.len(), "cluster"),
        list(&using)
    );
    if args.force {
        eprintln!(
            "warning: {what}; retiring anyway (--force): they stop opening once their \
             controllers drop the key"
        );
        return Ok(());
    }
    bail!(
        "{what}\nre-seal them with the active key (`kseal reseal --stale`), apply them, wait \
         until `kseal fleet status --ring {}` shows no object on key {} there, and retire \
         again (--force retires it anyway)",
        args.ring.ring,
        target.short()
    );
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
    // A link to a kernel or device file, or to a path checked anyway: named, not blocking.
    for (why, _) in found.links_skipped.iter().filter(|(_, blocks)| !*blocks) {
        eprintln!("warning: {why}");
    }
    let links_out: Vec<&str> = found
        .links_skipped
        .iter()
        .filter(|(_, blocks)| *blocks)
        .map(|(why, _)| why.as_str())
        .collect();
    if !links_out.is_empty() || !found.not_read.is_empty() {
        let mut fixes = Vec::new();
        if !links_out.is_empty() {
            fixes.push("check each link's target with another --check path (or remove the link)");
        }
        if !found.not_read.is_empty() {
            fixes.push("split or remove each file not read");
        }
        let unchecked: Vec<&str> = links_out
            .into_iter()
            .chain(found.not_read.iter().map(String::as_str))
            .collect();
        bail!(
            "cannot show that key {} is no longer needed: {} under --check not checked, which \
             may hold SealedSecrets that need it:\n  {}\n{}",
            target.short(),
            count(unchecked.len(), "path"),
            unchecked.join("\n  "),
            fixes.join("; ")
        );
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
