//! `kseal keys trust` (pin a ring's anchor, or its dedicated root, in `.kseal.yaml`), `kseal
//! keys sign` (turn an older, unsigned ring index into a signed history), `kseal keys re-root`
//! (hand the history to a dedicated root), `kseal keys refresh` (a new expiry) and `kseal keys
//! new-root` (an offline root key file).

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use kseal_keystore::{Kid, Location, Ring, Snapshot, Trust, Verified, trust::RootRecord};

use crate::args::{NewRootArgs, ReRootArgs, RefreshArgs, SignArgs, TrustArgs};
use crate::keysource::ring::{
    block_on, check_unpinned, open, open_with, read_index, ring_arg, ring_label, seen,
    unrecorded_refusal,
};
use crate::output::confirm;
use crate::project;

fn describe_anchor(snapshot: &Snapshot, anchor: &Kid) -> String {
    if let Some(root) = snapshot
        .index
        .roots
        .iter()
        .find(|r| r.dedicated && &r.kid == anchor)
    {
        return format!(
            "{anchor}\n  dedicated root{} (as the ring's index says: confirm its kid with the \
             ring's seeder)",
            root.location
                .as_deref()
                .map(|l| format!(", {l}"))
                .unwrap_or_else(|| ", an offline key".into())
        );
    }
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
        // What the history marker says of it: no pin is written, nor a version recorded, from
        // a history the ring's writers did not write (attack review, round 17, TRUST: a fork
        // ahead of the marker was recorded as the pin's version, and every fresh CI job then
        // refused the real index as a rollback). A history that does not pass through the pin
        // is named as replaced first, which says more.
        let marked = check_unpinned(&ring, &snapshot).await;
        let reading = read_signed(&ring, snapshot)?;
        let pinned = pinned.map(|pin| Pinned {
            anchor: pin.anchor,
            from: pin.from,
            version: pin.version,
        });
        let replaced = pinned.as_ref().is_some_and(|pin| !pin.in_chain(&reading));
        if !replaced && marked? {
            return Err(unrecorded_refusal(&ring_label(&ring), &reading.snapshot)
                .context("nothing is pinned from this index"));
        }
        if let Some(pin) = pinned {
            return check_pinned(&args, &ring, &reading, &pin);
        }
        pin_first(&args, &ring, &reading)
    })?
}

/// What `kseal keys trust` read of a signed ring, and the key to pin.
struct Reading {
    snapshot: Snapshot,
    anchor: Kid,
    version: u64,
    /// The ring's current dedicated root, once it has one.
    dedicated: Option<Kid>,
    /// What to pin: `dedicated`, else `anchor`.
    target: Kid,
}

/// The pin found for the ring (in `.kseal.yaml`, or `--ring-anchor`).
struct Pinned {
    anchor: Kid,
    from: String,
    version: u64,
}

impl Pinned {
    /// Whether the history read passes through the pinned key (else it was replaced by one
    /// rooted elsewhere).
    fn in_chain(&self, reading: &Reading) -> bool {
        reading
            .snapshot
            .index
            .roots
            .iter()
            .any(|r| r.kid == self.anchor)
    }
}

/// Refuses an unsigned ring; prints what the signed history says and what would be pinned.
fn read_signed(ring: &Ring, snapshot: Snapshot) -> Result<Reading> {
    let Verified::Signed {
        anchor,
        root,
        version,
        ..
    } = snapshot.verified.clone()
    else {
        bail!("key ring {} is not signed", ring_label(ring));
    };
    eprintln!(
        "key ring {}: signed history, version {version}, {} key{}, root chain {}",
        ring_label(ring),
        snapshot.index.keys.len(),
        if snapshot.index.keys.len() == 1 {
            ""
        } else {
            "s"
        },
        roots_line(&snapshot.index.roots),
    );
    // What to pin: the ring's current dedicated root once it has one (a ring key's
    // signature can then lead nowhere), else its anchor.
    let dedicated = snapshot
        .index
        .roots
        .last()
        .filter(|r| r.dedicated)
        .map(|r| r.kid.clone());
    let target = dedicated.clone().unwrap_or_else(|| anchor.clone());
    if root != anchor && dedicated.is_none() {
        eprintln!("current root: {}", root.short());
    }
    eprintln!(
        "{}: {}",
        if dedicated.is_some() {
            "root"
        } else {
            "anchor"
        },
        describe_anchor(&snapshot, &target)
    );
    Ok(Reading {
        snapshot,
        anchor,
        version,
        dedicated,
        target,
    })
}

/// A pinned ring: its history must pass through the pin and respect the floors; a pin at a
/// ring key moves to the ring's dedicated root once its kid is confirmed.
fn check_pinned(args: &TrustArgs, ring: &Ring, reading: &Reading, pin: &Pinned) -> Result<()> {
    let Reading {
        snapshot,
        anchor,
        version,
        dedicated,
        target,
    } = reading;
    let version = *version;
    if !pin.in_chain(reading) {
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
    forget_other_history(args, reading, pin)?;
    check_floors(ring, snapshot, version, pin)?;
    let file = pin.from != "--ring-anchor";
    if pin.anchor != *target && dedicated.is_some() {
        return move_pin_to_root(args, reading, pin, file);
    }
    eprintln!("the history passes through the pin in {}", pin.from);
    if file && !args.check && version > pin.version {
        project::write_pin(Path::new(&pin.from), &args.ring.ring, &pin.anchor, version)?;
        eprintln!(
            "recorded version {version} in {}: older indexes are refused from now on",
            pin.from
        );
    }
    Ok(())
}

/// Replaces what this machine read before by the history of a root confirmed out of band.
fn forget_other_history(args: &TrustArgs, reading: &Reading, pin: &Pinned) -> Result<()> {
    let Reading {
        snapshot,
        version,
        dedicated,
        ..
    } = reading;
    let version = *version;
    // A root kid a person confirmed out of band, and the ring's current dedicated root,
    // replace what this machine read before: a fork read earlier (under a pin at a ring
    // key) left its version and root in the cache, which would otherwise refuse the real
    // history for good.
    if let Some(root_kid) = &dedicated
        && args
            .root_kid
            .as_deref()
            .is_some_and(|kid| kid.eq_ignore_ascii_case(root_kid.as_str()))
    {
        let seq = u64::try_from(snapshot.index.roots.len()).unwrap_or(u64::MAX);
        let kept = seen::load(&pin.anchor)?;
        let real = Some((seq, root_kid.clone()));
        if kept.version > version || kept.root.is_some() && kept.root != real {
            seen::replace(&pin.anchor, version, Some((seq, root_kid)))?;
            eprintln!(
                "this machine had read another history of the ring (version {}{}): \
                 replaced by the confirmed root {}'s, version {version}",
                kept.version,
                kept.root
                    .as_ref()
                    .map(|(_, kid)| format!(", dedicated root {}", kid.short()))
                    .unwrap_or_default(),
                root_kid.short()
            );
        }
    }
    Ok(())
}

/// Refuses a rolled-back index, or a history that forks from the dedicated root this
/// machine read before.
fn check_floors(ring: &Ring, snapshot: &Snapshot, version: u64, pin: &Pinned) -> Result<()> {
    // The same floors as sealing: the pin's version and the newest this machine read.
    let seen_version = seen::version(&pin.anchor);
    if pin.version.max(seen_version) > version {
        bail!(
            "key ring {} is at version {version}, older than version {} {}: a \
             rolled-back index. Do not seal to it",
            ring_label(ring),
            pin.version.max(seen_version),
            if pin.version >= seen_version {
                format!("pinned in {}", pin.from)
            } else {
                "this machine read".to_owned()
            }
        );
    }
    if let Some((seq, seen_root)) = seen::root(&pin.anchor) {
        let at = usize::try_from(seq)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| snapshot.index.roots.get(i));
        if at.map(|r| &r.kid) != Some(&seen_root) {
            bail!(
                "key ring {}'s history does not extend root {seq} ({}), the dedicated \
                 root this machine read before: a fork from an older root. Do not seal \
                 to it",
                ring_label(ring),
                seen_root.short()
            );
        }
    }
    Ok(())
}

/// A pin at a ring key of a ring that moved to its dedicated root: moved to the root when
/// the pin is a file's and the root's kid was confirmed, else refused.
fn move_pin_to_root(args: &TrustArgs, reading: &Reading, pin: &Pinned, file: bool) -> Result<()> {
    let Reading {
        target, version, ..
    } = reading;
    let version = *version;
    let confirmed = args.root_kid.as_deref().map(str::to_ascii_lowercase);
    match confirmed.as_deref() {
        None => bail!(
            "{} pins {}, a ring key that clusters held, and the ring says it moved to \
             the dedicated root {}. A pin at a ring key cannot tell a real move from a \
             fork signed with a cluster's keys: confirm the root's kid with the \
             ring's seeder out of band (`kseal keys re-root` printed it), then run \
             `kseal keys trust --ring {} --root-kid KID`",
            pin.from,
            pin.anchor.short(),
            target.short(),
            ring_arg(&args.ring)
        ),
        Some(kid) if kid.len() != 64 => bail!(
            "--root-kid needs the root's whole kid (64 hex digits, as re-root prints \
             it): a short prefix could be matched by a key made to fit it"
        ),
        Some(kid) if target.as_str() != kid => bail!(
            "the ring's dedicated root is {target}, not the root {kid} you \
             confirmed: the ring may have been forked with a cluster's keys. Do not \
             seal to it; ask the ring's seeder"
        ),
        Some(_) => {}
    }
    if !file || args.check {
        bail!(
            "{} pins {}, a ring key that clusters held, but the ring moved to its \
             dedicated root {}: whoever holds a cluster's keys could fork the ring \
             from the pin. Pin the root ({})",
            pin.from,
            pin.anchor.short(),
            target.short(),
            if file {
                format!("run `kseal keys trust --ring {}`", ring_arg(&args.ring))
            } else {
                format!("--ring-anchor {target}")
            }
        );
    }
    project::write_pin(Path::new(&pin.from), &args.ring.ring, target, version)?;
    eprintln!(
        "moved the pin in {} from {} (a ring key) to the ring's dedicated root {}: \
         commit it; give controllers --ring-anchor {target} (Helm: \
         keySource.ringAnchor)",
        pin.from,
        pin.anchor.short(),
        target.short()
    );
    Ok(())
}

/// A ring no pin names: pinned in `--file` (or `.kseal.yaml`) after a confirmation, and
/// only with its root's kid confirmed when it has a dedicated root and no terminal.
fn pin_first(args: &TrustArgs, ring: &Ring, reading: &Reading) -> Result<()> {
    let Reading {
        version,
        dedicated,
        target,
        ..
    } = reading;
    let version = *version;
    if args.check {
        bail!(
            "key ring {} is not pinned: run `kseal keys trust --ring {}` to pin it",
            ring_label(ring),
            ring_arg(&args.ring)
        );
    }
    let path = args
        .file
        .clone()
        .unwrap_or_else(|| PathBuf::from(project::FILE_NAME));
    // A first pin at a dedicated root is trust on first use of whatever the index says:
    // with a kid confirmed out of band (--root-kid) it is not. Off a terminal nobody can be
    // asked, so the kid is required there (attack review: a CI bootstrap pinned a fork's
    // root unasked).
    if let Some(root_kid) = &dedicated {
        match args.root_kid.as_deref() {
            Some(kid) if kid.len() != 64 => bail!(
                "--root-kid needs the root's whole kid (64 hex digits, as re-root prints \
                 it): a short prefix could be matched by a key made to fit it"
            ),
            Some(kid) if !kid.eq_ignore_ascii_case(root_kid.as_str()) => bail!(
                "the ring's dedicated root is {root_kid}, not the root {kid} you \
                 confirmed: the ring may have been forked. Do not seal to it; ask the \
                 ring's seeder"
            ),
            Some(_) => {}
            None if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() => {
                bail!(
                    "key ring {} is signed by the dedicated root {root_kid}: pinning it \
                     without a terminal to ask on needs the root's kid confirmed out of \
                     band (`kseal keys re-root` printed it): run `kseal keys trust --ring {} \
                     --root-kid KID`",
                    ring_label(ring),
                    ring_arg(&args.ring)
                )
            }
            None => {}
        }
    }
    confirm(
        &format!(
            "pin {} for key ring {} in {}?",
            target.short(),
            args.ring.ring,
            path.display()
        ),
        args.yes,
    )?;
    project::write_pin(&path, &args.ring.ring, target, version)?;
    eprintln!(
        "pinned {} for key ring {} in {}: commit it; `kseal seal --cert` now seals to this \
         ring only while its history passes through it",
        target.short(),
        args.ring.ring,
        path.display()
    );
    Ok(())
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

/// `kseal keys re-root`.
pub(crate) fn re_root(args: ReRootArgs) -> Result<()> {
    let next = kseal_keystore::RootKey::parse(&args.to)?;
    block_on(async {
        let ring = open(&args.ring, None).await?;
        if ring.trust().anchor().is_none() {
            bail!(
                "key ring {} is not pinned here: re-rooting signs a new root with the current one, \
                 so check the history first. Pass --ring-anchor KID (or run from the GitOps \
                 repository whose .kseal.yaml pins it)",
                ring_label(&ring)
            );
        }
        let snapshot = read_index(&ring).await?;
        let aws = crate::keysource::ring::aws_options(&args.ring, None);
        let signer = kseal_keystore::RootSigner::open(&next, &aws)
            .await
            .with_context(|| format!("failed to open the new root {}", next.describe()))?;
        let current = snapshot
            .index
            .roots
            .last()
            .map(|r| r.kid.short().to_owned());
        // What the new root signs, to check before it does (attack review, round 9: a fork
        // put in the index was signed under the new root with nothing in the output naming
        // its active key).
        let index = &snapshot.index;
        eprintln!(
            "key ring {} at version {}: active key {}; keys {}",
            ring_label(&ring),
            index.version,
            index.active.as_ref().map_or("none", |k| k.short()),
            index
                .keys
                .iter()
                .map(|e| e.kid.short())
                .collect::<Vec<_>>()
                .join(", ")
        );
        confirm(
            &format!(
                "hand the history of key ring {} from root {} to the dedicated root {} ({})? \
                 From then on every write needs --root {}",
                ring_label(&ring),
                current.as_deref().unwrap_or("-"),
                signer.kid().short(),
                next.describe(),
                next.describe()
            ),
            args.yes,
        )?;
        let moved = ring
            .re_root(&signer)
            .await
            .with_context(|| format!("failed to re-root key ring {}", ring_label(&ring)))?;
        if moved {
            eprintln!(
                "key ring {} is signed by its dedicated root {} from now on; ring keys never \
                 sign its history again.\nNext: in each GitOps repository run `kseal keys trust \
                 --ring {}` (it moves the pin), set controllers' --ring-anchor {} (Helm: \
                 keySource.ringAnchor), and give the seeder's writes --root {} \
                 (KSEAL_RING_ROOT)",
                ring_label(&ring),
                signer.kid().short(),
                ring_arg(&args.ring),
                signer.kid(),
                next.describe()
            );
        } else {
            eprintln!(
                "key ring {} is already signed by {}; nothing to do",
                ring_label(&ring),
                signer.kid().short()
            );
        }
        anyhow::Ok(())
    })?
}

/// `kseal keys refresh`.
pub(crate) fn refresh(args: RefreshArgs) -> Result<()> {
    block_on(async {
        let ring = open(&args.ring, None).await?;
        let (version, expires) = ring
            .refresh()
            .await
            .with_context(|| format!("failed to refresh key ring {}", ring_label(&ring)))?;
        eprintln!(
            "key ring {}: signed again as version {version}{}",
            ring_label(&ring),
            expires
                .map(|e| format!(", current until {}", e.strftime("%Y-%m-%d %H:%M UTC")))
                .unwrap_or_default()
        );
        anyhow::Ok(())
    })?
}

/// `kseal keys new-root`.
pub(crate) fn new_root(args: &NewRootArgs) -> Result<()> {
    eprintln!("generating an RSA-4096 root key (a second or two)…");
    let key = kseal_keys::PrivateKey::generate(kseal_keys::KeySize::Rsa4096)
        .context("failed to generate a key")?;
    let pem = key.to_pkcs8_pem();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&args.out).with_context(|| {
        format!(
            "failed to create {} (an existing file is never overwritten)",
            args.out.display()
        )
    })?;
    std::io::Write::write_all(&mut file, pem.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("failed to write {}", args.out.display()))?;
    let kid = Kid::of(key.public_key());
    eprintln!(
        "wrote the root key {} to {} (mode 0600): keep it off every cluster and back it up \
         offline; whoever holds it can sign the ring's history.\nNext: kseal keys re-root --to \
         file://{}",
        kid.short(),
        args.out.display(),
        args.out.display()
    );
    Ok(())
}
