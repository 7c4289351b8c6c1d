//! `kseal keys trust` (pin a ring's anchor in `.kseal.yaml`) and `kseal keys sign` (turn an
//! older, unsigned ring index into a signed history).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keystore::{Kid, Location, Snapshot, Trust, Verified, trust::RootRecord};

use crate::args::{SignArgs, TrustArgs};
use crate::keysource::ring::{block_on, open_with, read_index, ring_arg, ring_label};
use crate::output::confirm;
use crate::project;

fn describe_anchor(snapshot: &Snapshot, anchor: &Kid) -> String {
    match snapshot.index.entry(anchor) {
        Some(entry) => format!(
            "{anchor}\n  fingerprint {}, RSA-{}, valid {} to {}",
            entry.fingerprint, entry.bits, entry.not_before, entry.not_after
        ),
        None => format!("{anchor}\n  (retired from the ring; its root role was handed on)"),
    }
}

fn roots_line(roots: &[RootRecord]) -> String {
    let chain: Vec<&str> = roots.iter().map(|r| r.kid.short()).collect();
    chain.join(" → ")
}

/// `kseal keys trust`.
pub(crate) fn trust(args: TrustArgs) -> Result<()> {
    let location = Location::parse(&args.ring.ring)?;
    let pinned = project::pin_for(&location, args.ring.ring_anchor.as_deref())?;
    block_on(async {
        let ring = open_with(&args.ring, None, &location)
            .await?
            .with_trust(Trust::first_use());
        let snapshot = read_index(&ring).await?;
        let Verified::Signed {
            anchor,
            root,
            version,
        } = snapshot.verified.clone()
        else {
            bail!("key ring {} is not signed", ring_label(&ring));
        };
        eprintln!(
            "key ring {}: signed history, version {version}, {} key{}, root chain {}",
            ring_label(&ring),
            snapshot.index.keys.len(),
            if snapshot.index.keys.len() == 1 {
                ""
            } else {
                "s"
            },
            roots_line(&snapshot.index.roots),
        );
        if root != anchor {
            eprintln!("current root: {}", root.short());
        }
        eprintln!("anchor: {}", describe_anchor(&snapshot, &anchor));
        if let Some(pin) = &pinned {
            if pin.anchor != anchor {
                bail!(
                    "the ring's history starts at anchor {}, but {} pins anchor {}: the ring's \
                     history was replaced by one rooted at another key. Do not seal to it. If \
                     the ring was re-created on purpose, check the new anchor with its seeder \
                     out of band, remove the old pin and run `kseal keys trust` again",
                    anchor.short(),
                    pin.from,
                    pin.anchor.short()
                );
            }
            if pin.version > version {
                bail!(
                    "key ring {} is at version {version}, older than version {} pinned in {}: \
                     a rolled-back index. Do not seal to it",
                    ring_label(&ring),
                    pin.version,
                    pin.from
                );
            }
            eprintln!("the anchor matches the pin in {}", pin.from);
            let file = pin.from != "--ring-anchor";
            if file && !args.check && version > pin.version {
                project::write_pin(Path::new(&pin.from), &args.ring.ring, &anchor, version)?;
                eprintln!(
                    "recorded version {version} in {}: older indexes are refused from now on",
                    pin.from
                );
            }
            return Ok(());
        }
        if args.check {
            bail!(
                "key ring {} is not pinned: run `kseal keys trust --ring {}` to pin it",
                ring_label(&ring),
                ring_arg(&args.ring)
            );
        }
        let path = args
            .file
            .clone()
            .unwrap_or_else(|| PathBuf::from(project::FILE_NAME));
        confirm(
            &format!(
                "pin anchor {} for key ring {} in {}?",
                anchor.short(),
                args.ring.ring,
                path.display()
            ),
            args.yes,
        )?;
        project::write_pin(&path, &args.ring.ring, &anchor, version)?;
        eprintln!(
            "pinned anchor {} for key ring {} in {}: commit it; `kseal seal --cert` now seals to \
             this ring only while its history starts there",
            anchor.short(),
            args.ring.ring,
            path.display()
        );
        anyhow::Ok(())
    })?
}

/// `kseal keys sign`.
pub(crate) fn sign(args: SignArgs) -> Result<()> {
    let location = Location::parse(&args.ring.ring)?;
    block_on(async {
        // A pin means the ring was signed once (or is meant to be): under one, an unsigned
        // index is a replacement and is refused, never signed (see Trust's verify).
        let trust = match crate::project::pin_for(&location, args.ring.ring_anchor.as_deref())? {
            Some(pin) => Trust::anchored(pin.anchor).min_version(pin.version),
            None => Trust::legacy(),
        };
        let ring = open_with(&args.ring, None, &location)
            .await?
            .with_trust(trust);
        let snapshot = read_index(&ring).await?;
        if let Verified::Signed { anchor, .. } = &snapshot.verified {
            eprintln!(
                "key ring {} is signed already (anchor {}); nothing to do",
                ring_label(&ring),
                anchor.short()
            );
            return Ok(());
        }
        let active = snapshot
            .index
            .active
            .clone()
            .context("the ring has no active key to anchor its history: activate one first")?;
        confirm(
            &format!(
                "sign the history of key ring {} with its active key {} as the anchor? Check \
                 with `kseal keys list` that every key listed is yours first",
                ring_label(&ring),
                active.short()
            ),
            args.yes,
        )?;
        let outcome = ring
            .sign()
            .await
            .with_context(|| format!("failed to sign key ring {}", ring_label(&ring)))?;
        match outcome {
            kseal_keystore::SignOutcome::Signed { anchor, dropped } => {
                for kid in &dropped {
                    eprintln!(
                        "left out key {}: the index listed it, but the ring holds no usable key \
                         secret for it",
                        kid.short()
                    );
                }
                eprintln!(
                    "signed key ring {}: anchor {anchor}\npin it in each GitOps repository with \
                     `kseal keys trust --ring {}`, and give controllers --ring-anchor {anchor}",
                    ring_label(&ring),
                    ring_arg(&args.ring)
                );
            }
            kseal_keystore::SignOutcome::AlreadySigned(anchor) => eprintln!(
                "key ring {} was signed meanwhile (anchor {})",
                ring_label(&ring),
                anchor.short()
            ),
        }
        anyhow::Ok(())
    })?
}
