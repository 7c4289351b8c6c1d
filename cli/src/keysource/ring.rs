//! A fleet key ring (AWS Secrets Manager or a directory) through `kseal-keystore`: opening it
//! with the trust pinned in `.kseal.yaml`, reading its verified index, and the readers the
//! full CLI installs ([`super::read_rings_with`]) so that `kseal` itself never links this.

use std::future::Future;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use kseal_keys::Certificate;
use kseal_keystore::{AwsOptions, Location, Ring, Snapshot, Store, Trust, Verified, Vouch};

use super::RingIndex;
use crate::args::{RingArgs, RingWriteArgs};

/// Runs `future` on a single-threaded runtime (only ring commands start one, so sealing with
/// a local certificate pays nothing for it).
pub(crate) fn block_on<F: Future>(future: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let output = runtime.block_on(future);
    // A directory ring's file operation that timed out may still block its thread: the
    // command has its answer, so it does not wait for that thread.
    runtime.shutdown_background();
    Ok(output)
}

pub(crate) fn aws_options(args: &RingArgs, write: Option<&RingWriteArgs>) -> AwsOptions {
    AwsOptions {
        region: args.region.clone(),
        profile: args.aws_profile.clone(),
        endpoint_url: args.endpoint_url.clone(),
        assume_role: args.assume_role.clone(),
        kms_key_id: write.and_then(|w| w.kms_key_id.clone()),
        replica_regions: write.map(|w| w.replica_regions.clone()).unwrap_or_default(),
    }
}

/// Opens the ring `args` names, checking its index against the anchor pinned by
/// `--ring-anchor` or the nearest `.kseal.yaml`; without a pin, any signed history is
/// accepted and an unsigned (older) index is read, but never written on.
pub(crate) async fn open(args: &RingArgs, write: Option<&RingWriteArgs>) -> Result<Ring> {
    let mut location = Location::parse(&args.ring)?;
    if let Location::Directory { insecure_perms, .. } = &mut location {
        *insecure_perms |= args.insecure_perms;
    }
    let pin = crate::project::pin_for(&location, args.ring_anchor.as_deref())?;
    let mut seen_index = None;
    let trust = match pin {
        Some(pin) => {
            let seen = seen::load(&pin.anchor)?;
            seen_index = seen.digest.clone().map(|d| (seen.version, d));
            let floor = pin.version.max(seen.version);
            let trust = Trust::anchored(pin.anchor.clone()).min_version(floor);
            match seen.root {
                Some((seq, root)) => trust.seen_root(seq, root),
                None => trust,
            }
        }
        None => Trust::first_use().allow_unsigned(true),
    };
    let mut ring = open_with(args, write, &location).await?.with_trust(trust);
    if let Some(root) = &args.root {
        let key = kseal_keystore::RootKey::parse(root)?;
        let signer = kseal_keystore::RootSigner::open(&key, &aws_options(args, write))
            .await
            .with_context(|| format!("failed to open the ring's root {}", key.describe()))?;
        ring = ring.with_root(signer);
    }
    if let Some(lifetime) = args.lifetime {
        ring = ring.with_lifetime(lifetime);
    }
    // An adoption counts the index this machine read at the marker's version, which the
    // store may no longer hold, as another index of that version (attack review, round 15, PG).
    if let Some((version, digest)) = &seen_index {
        ring = ring.with_seen_index(*version, digest);
    }
    // A dropped pending write is said on stderr (round 13, U2: it went unsaid).
    let label = ring_label(&ring);
    ring = ring
        .with_allow_expired(args.allow_expired)
        .with_adopt_index(args.adopt_index.clone())
        .with_drop_pending(args.drop_pending.iter().filter(|d| !d.is_empty()).cloned())
        .with_warnings(move |w| eprintln!("warning: key ring {label}: {w}"));
    Ok(ring)
}

pub(crate) mod seen;

/// Opens the ring `args` names with no trust set yet ([`Ring::with_trust`]).
pub(crate) async fn open_with(
    args: &RingArgs,
    write: Option<&RingWriteArgs>,
    location: &Location,
) -> Result<Ring> {
    Ring::open(location, &aws_options(args, write))
        .await
        .with_context(|| format!("failed to open key ring `{location}`"))
}

pub(crate) fn ring_label(ring: &Ring) -> String {
    match ring.store() {
        // A directory ring is named by its directory, whatever its index calls it.
        Store::Directory(_) => format!("in {}", ring.store().describe()),
        Store::SecretsManager(_) => format!("`{}` in {}", ring.name(), ring.store().describe()),
    }
}

/// `--ring` as the user gave it, quoted for a POSIX shell when needed (`?` of `?region=` is a
/// glob character), for the commands that messages suggest.
pub(crate) fn ring_arg(args: &RingArgs) -> String {
    let text = args.ring.as_str();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+=.@:,-".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Reads the ring's index, with messages that name the ring: a ring that does not exist (a
/// wrong name or region, more often than not) and a store that cannot be read.
pub(crate) async fn read_index(ring: &Ring) -> Result<Snapshot> {
    Ok(read_index_vouched(ring).await?.0)
}

/// [`read_index`], and whether the index is one the ring's history marker cannot vouch for
/// because an older kseal wrote it (no digest) at the index's version: nothing tells that
/// index from a history forked with a key any cluster held, so nothing is sealed to it
/// ([`active_certificate_pem`]).
pub(crate) async fn read_index_vouched(ring: &Ring) -> Result<(Snapshot, bool)> {
    // Under a pin, the history marker first (written after each index write, so never ahead
    // of an index its writers wrote): a reader with no cache of its own (a fresh CI job) still
    // learns the version floor and the dedicated root (attack review, round 3).
    let marker = match ring.trust().anchor() {
        Some(_) => Some(ring.history_marker().await),
        None => None,
    };
    match ring.snapshot(None).await {
        Ok(Some(snapshot)) => {
            // A write between the two reads (its digest recorded in the marker just before
            // its index write) reads as an index the marker does not vouch for: the marker is
            // read once more before anything is refused.
            let marker = match marker {
                Some(Ok(Some(m))) if m.vouches(&snapshot.index) == Vouch::NotWritten => {
                    Some(ring.history_marker().await)
                }
                marker => marker,
            };
            // Whether the marker vouches for this very index as its writers' (written, or
            // pending at the next version).
            let vouched = match &marker {
                Some(Ok(Some(m))) => {
                    matches!(m.vouches(&snapshot.index), Vouch::Written | Vouch::Pending)
                }
                _ => false,
            };
            let unrecorded = match &marker {
                Some(Ok(Some(m))) => m.cannot_vouch(&snapshot.index),
                _ => false,
            };
            // A marker with no version bounds none: an index it cannot vouch for may be a fork
            // far ahead, and recording its version would make this machine refuse the real
            // index as a rollback (the seeder's adoption included) until the cache is deleted.
            let record =
                !unrecorded || matches!(&marker, Some(Ok(Some(m))) if !m.bounds_no_version());
            if let (Some(pinned), Some(marker)) = (ring.trust().anchor(), marker) {
                check_marker(ring, pinned, &snapshot, marker, true)?;
            }
            // Only under a pin: an unpinned reader has not decided which history is the ring's.
            if let (
                Some(pinned),
                Verified::Signed {
                    version,
                    root,
                    root_seq,
                    dedicated,
                    ..
                },
            ) = (ring.trust().anchor(), &snapshot.verified)
            {
                let digest = snapshot.index.digest();
                check_seen_digest(ring, pinned, &snapshot, &digest, vouched)?;
                if record {
                    seen::record(
                        pinned,
                        *version,
                        Some(&digest),
                        dedicated.then_some((*root_seq, root)),
                    )?;
                }
                if *dedicated
                    && !snapshot
                        .index
                        .roots
                        .iter()
                        .any(|r| r.dedicated && &r.kid == pinned)
                {
                    eprintln!(
                        "warning: key ring {} is signed by its dedicated root {}, but it is \
                         pinned at {}, a key clusters held: confirm the root's kid with the \
                         ring's seeder and pin it with `kseal keys trust --root-kid KID` (this \
                         machine refuses forks that do not extend it meanwhile)",
                        ring_label(ring),
                        root.short(),
                        pinned.short()
                    );
                }
            }
            Ok((snapshot, unrecorded))
        }
        Ok(None) => bail!(
            "key ring {} does not exist: there is no {} (a wrong {}? `kseal keys push` creates \
             a ring)",
            ring_label(ring),
            ring.index_name(),
            match ring.store() {
                Store::Directory(_) => "directory",
                Store::SecretsManager(_) => "name or region",
            }
        ),
        Err(e) => {
            let rolled_back = e.to_string().contains("rolled-back");
            let hint = ring
                .trust()
                .anchor()
                .and_then(seen::path)
                .filter(|path| rolled_back && path.exists())
                .map(|path| {
                    format!(
                        " (the newest version this machine read is kept in {}: delete it only \
                         if the ring was restored from a backup on purpose)",
                        path.display()
                    )
                })
                .unwrap_or_default();
            let error = anyhow::Error::from(e).context(format!(
                "failed to read key ring {}{hint}",
                ring_label(ring)
            ));
            Err(error)
        }
    }
}

/// Refuses an index of the version this machine read last (for the history pinned at
/// `pinned`) whose SHA-256 (`digest`) is not the one it read then: one of the two is a history
/// forked with a key clusters held (attack review, round 12, A4: under a history marker an
/// older kseal wrote, which records no digest, a laptop that had read the real index sealed to
/// a fork of its version). An index the marker vouches for (`vouched`) replaces the one kept,
/// which was the fork, with a warning.
fn check_seen_digest(
    ring: &Ring,
    pinned: &kseal_keystore::Kid,
    snapshot: &Snapshot,
    digest: &str,
    vouched: bool,
) -> Result<()> {
    let kept = seen::load(pinned)?;
    let version = snapshot.index.version;
    let Some(before) = kept
        .digest
        .filter(|d| kept.version == version && d != digest)
    else {
        return Ok(());
    };
    let file = seen::path(pinned)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "this machine's ring cache".to_owned());
    if vouched {
        eprintln!(
            "warning: key ring {} holds version {version} with SHA-256 {digest}, which its \
             history marker {} vouches for, but this machine had read another index of that \
             version (SHA-256 {before}): a history forked with a key clusters held, read \
             before the marker could tell. {file} keeps this one now",
            ring_label(ring),
            ring.root_name()
        );
        return seen::replace_digest(pinned, version, digest);
    }
    bail!(
        "key ring {}'s index is version {version} with SHA-256 {digest} (active key {}), but \
         this machine read another index of that version before, with SHA-256 {before}: two \
         indexes of one version, so one of them is a history forked with a key clusters held, \
         and the ring's history marker {} does not vouch for this one. Nothing was done; the \
         ring's seeder checks which one it wrote (the store's previous versions, by their \
         SHA-256), restores it if this one is the fork, or writes again (`kseal keys \
         refresh`) if this one is its own, so that the marker vouches for it. {file} keeps \
         what this machine read",
        ring_label(ring),
        snapshot
            .index
            .active
            .as_ref()
            .map_or("none", kseal_keystore::Kid::short),
        ring.root_name()
    );
}

/// Checks a verified `snapshot` of a ring pinned at `pinned` against the ring's history
/// marker as read (`marker`): an index older than the marker's version was put back, and one
/// whose history does not pass through the marker's dedicated root is a fork signed with keys
/// clusters held; both are refused. The marker's version and root are kept as this machine's
/// floor when `record` (a pinned reader). A marker this identity may not read (a sealer role
/// allowed the index only) changes nothing, but a reader pinned at a ring key says once that a
/// fork would go unnoticed here.
fn check_marker(
    ring: &Ring,
    pinned: &kseal_keystore::Kid,
    snapshot: &Snapshot,
    marker: kseal_keystore::Result<Option<kseal_keystore::Marker>>,
    record: bool,
) -> Result<()> {
    // Whether the pin is a dedicated root is never taken from the index's chain: whoever holds
    // a ring key can sign a history that calls that key a dedicated root (attack review,
    // round 5). Every pin is treated alike here.
    let marker = match marker {
        // Whatever the pin names (its anchor, a dedicated root, a ring key from the middle of
        // the chain): the marker is this ring's, and only its writers write it.
        Ok(Some(marker)) => marker,
        Ok(None) => {
            // A signed ring has a marker since its first signed write (or its first write
            // after an upgrade): on a directory ring whoever can write the index may have
            // removed it.
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if matches!(snapshot.verified, Verified::Signed { .. })
                && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                eprintln!(
                    "warning: key ring {} (pinned at {}) has no history marker {}: an older \
                     index put back would not be noticed here until it expires, nor, unless the \
                     pin is the ring's dedicated root, a history forked with a key any cluster \
                     held (`kseal keys trust --root-kid KID` pins the root)",
                    ring_label(ring),
                    pinned.short(),
                    ring.root_name()
                );
            }
            return Ok(());
        }
        // Only a marker this identity may not read (a sealer role allowed the index only) is
        // let pass, with a warning; any other failure (a store that errs or throttles, a
        // malformed marker) fails closed: it may hide the root a fork must pass through
        // (attack review, rounds 4 and 5).
        Err(e) if e.reason() != "access_denied" => {
            return Err(anyhow::Error::from(e).context(format!(
                "key ring {} (pinned at {}): its history marker {} could not be read, and \
                 nothing is sealed to it before the marker says which version and dedicated \
                 root the index must have (retry)",
                ring_label(ring),
                pinned.short(),
                ring.root_name()
            )));
        }
        Err(e) => {
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                eprintln!(
                    "warning: key ring {} (pinned at {}): its history marker {} may not be read \
                     here ({}): an older index put back would not be noticed until it expires, \
                     nor, unless the pin is the ring's dedicated root, a history forked with a \
                     key any cluster held. Allow this identity to read {} \
                     (deploy/iam/sealer-policy.json does)",
                    ring_label(ring),
                    pinned.short(),
                    ring.root_name(),
                    crate::text::chain(&anyhow::Error::from(e)),
                    ring.root_name()
                );
            }
            return Ok(());
        }
    };
    check_marker_facts(ring, pinned, snapshot, marker, record)
}

/// For a reader with no pin (`kseal keys trust` pinning for the first time, `kseal keys
/// export-cert` outside a repository): the index read is checked against the history marker
/// all the same, taking the index's own anchor as the pin, and whether the marker cannot vouch
/// for it (an older kseal's, no digest) is returned. Without it, whoever can write the index
/// alone could put a history of their own there (rooted at a key of theirs) or a fork ahead of
/// the marker, and `export-cert` would write its certificate for offline sealing, or `trust`
/// pin it and record its version (attack review, round 17, UNPIN and TRUST). A pinned reader
/// has done this already ([`read_index_vouched`]).
pub(crate) async fn check_unpinned(ring: &Ring, snapshot: &Snapshot) -> Result<bool> {
    let Verified::Signed { anchor, .. } = &snapshot.verified else {
        return Ok(false);
    };
    if ring.trust().anchor().is_some() {
        return Ok(false);
    }
    let marker = match ring.history_marker().await {
        Ok(marker) => marker,
        // With no pin the marker is all there is to check the index against: a marker this
        // identity may not read fails closed too (round 18, UNPIN-D: a role denied `R/root`
        // exported, and pinned, an index writer's own history with a warning only). A pinned
        // sealer role may go on with a warning ([`read_index_vouched`]): its pin checks the
        // chain.
        Err(e) => {
            return Err(anyhow::Error::from(e).context(format!(
                "key ring {} is not pinned here, so its index is checked against its history                  marker {}, which could not be read: nothing is exported or pinned from it.                  Allow this identity to read {} (deploy/iam/sealer-policy.json does), or pin                  the ring first (`--ring-anchor KID`, or a .kseal.yaml)",
                ring_label(ring),
                ring.root_name(),
                ring.root_name()
            )));
        }
    };
    let unrecorded = marker
        .as_ref()
        .is_some_and(|m| m.cannot_vouch(&snapshot.index));
    // Nothing recorded in this machine's cache: no pin chose this history (and `export-cert`
    // runs in the image, whose file system is read-only).
    check_marker(ring, anchor, snapshot, Ok(marker), false)?;
    Ok(unrecorded)
}

/// Checks the index read against what the history marker records (its version, anchor,
/// dedicated root and the digests it vouches for), then, when `record`, records the marker's
/// version and root as seen.
fn check_marker_facts(
    ring: &Ring,
    pinned: &kseal_keystore::Kid,
    snapshot: &Snapshot,
    marker: kseal_keystore::Marker,
    record: bool,
) -> Result<()> {
    let version = match &snapshot.verified {
        Verified::Signed { version, .. } => *version,
        Verified::Unsigned => 0,
    };
    if version < marker.version {
        bail!(
            "key ring {}'s index is version {version}, but its history marker {} records that \
             its writers wrote version {}: an older index was put back (a rollback). Nothing \
             was done; the ring's seeder restores the index from the store's previous versions",
            ring_label(ring),
            ring.root_name(),
            marker.version
        );
    }
    if let (Some(anchor), Some(first)) = (&marker.anchor, snapshot.index.roots.first())
        && &first.kid != anchor
    {
        bail!(
            "key ring {}'s index starts its history at {}, but its history marker {} records \
             anchor {}: a history rooted elsewhere was put in its place. Nothing was done; the \
             ring's seeder restores the index from the store's previous versions",
            ring_label(ring),
            first.kid.short(),
            ring.root_name(),
            anchor.short()
        );
    }
    if let Some((seq, root)) = &marker.root {
        let at = usize::try_from(*seq)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| snapshot.index.roots.get(i));
        if at.map(|r| &r.kid) != Some(root) {
            bail!(
                "key ring {}'s index does not pass through the dedicated root {} (root {seq}) \
                 that its history marker {} records: a history forked with keys clusters held \
                 was put in its place. Nothing was done; the ring's seeder restores the index \
                 from the store's previous versions",
                ring_label(ring),
                root.short(),
                ring.root_name()
            );
        }
    }
    // At the marker's version, or the next: only the index its writers wrote (the marker
    // records its digest before each index write). Anything else, however it is signed, is a
    // history forked with keys clusters held (attack review, round 9).
    if marker.cannot_vouch(&snapshot.index) {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "warning: key ring {}'s history marker {} was written by an older kseal and \
                 records no digest: a history forked with a key any cluster held, put in at \
                 {}, cannot be told from the ring's here until the ring's seeder adopts its \
                 index (`kseal keys refresh --adopt-index …`, after checking the keys); \
                 nothing is sealed to it meanwhile",
                ring_label(ring),
                ring.root_name(),
                if marker.bounds_no_version() {
                    "any version (it records no version either)".to_owned()
                } else {
                    format!("its version {}", marker.version)
                }
            );
        }
    }
    if marker.vouches(&snapshot.index) == Vouch::NotWritten {
        bail!(
            "key ring {}'s index is not the one its writers wrote: {}. Nothing was done; the \
             ring's seeder is to {}",
            ring_label(ring),
            kseal_keystore::not_vouched(&snapshot.index, &marker, &ring.root_name()),
            kseal_keystore::restore_vouched(&marker, &ring.index_name(), &ring.root_name())
        );
    }
    // A write recorded as pending over the index read: a write in flight, or one that went
    // through and was undone by putting this index back (attack review, round 12, U1). The
    // seeder's next write refuses until it is restored or dropped; a reader only says so.
    let pending = marker.pending_over(&snapshot.index);
    if !pending.is_empty() {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "warning: key ring {}'s history marker {} records a write of version {} as \
                 pending (SHA-256 {}), but the index is still version {version} (active key \
                 {}): a write in progress, or one that went through and was undone by putting \
                 this index back. If no write is running, tell the ring's seeder: its next \
                 write refuses until that write is restored or dropped",
                ring_label(ring),
                ring.root_name(),
                marker.version.saturating_add(1),
                pending.join(" or "),
                snapshot
                    .index
                    .active
                    .as_ref()
                    .map_or("none", kseal_keystore::Kid::short)
            );
        }
    }
    if !record {
        return Ok(());
    }
    seen::record(
        pinned,
        marker.version,
        None,
        marker.root.as_ref().map(|(seq, kid)| (*seq, kid)),
    )
}

/// Why nothing is sealed to an index the ring's history marker, written by an older kseal,
/// cannot vouch for ([`read_index_vouched`]): as the ring's controllers, which withhold
/// sealing on such an index, a fresh CI job or a laptop that never read this version has
/// nothing to tell it from a fork (attack review, rounds 12, 13 and 16: a fresh CI job sealed
/// to a fork at the marker's version, directly or through `keys export-cert`).
pub(crate) fn unrecorded_refusal(label: &str, snapshot: &Snapshot) -> anyhow::Error {
    anyhow::anyhow!(
        "key ring {label}'s history marker was written by an older kseal and records no \
         digest: nothing tells its index (version {}, active key {}, SHA-256 {}) from a \
         history forked at that version with a key any cluster held, so nothing is sealed to \
         it (the ring's controllers withhold sealing too). The ring's seeder checks the index \
         against its own record of what it wrote last and adopts it once (`kseal keys \
         refresh`, which prints what to check, then `--adopt-index`); then seal again. \
         Meanwhile, --cert FILE seals to a certificate you verified yourself",
        snapshot.index.version,
        snapshot
            .index
            .active
            .as_ref()
            .map_or("none", kseal_keystore::Kid::short),
        snapshot.index.digest()
    )
}

/// The sealing certificate of a ring, for `kseal seal --cert secretsmanager://R` (reads the
/// index only: no private key is touched, so a cert-only IAM policy suffices).
///
/// Only a ring whose signed history starts at a pinned anchor (`anchor`, i.e. `--ring-anchor`
/// or `KSEAL_RING_ANCHOR`, else the nearest `.kseal.yaml`) is sealed to: whoever can write the
/// index but not the ring's private keys cannot choose the key.
pub(crate) fn active_certificate_pem(location: &str, anchor: Option<&str>) -> Result<String> {
    let (snapshot, label, unrecorded) = verified_index_vouched(location, anchor)?;
    if unrecorded {
        return Err(unrecorded_refusal(&label, &snapshot));
    }
    let entry = snapshot
        .index
        .active_entry()
        .with_context(|| format!("key ring {label} has no active key"))?;
    Ok(entry.crt.clone())
}

/// The index of the key ring at `location` (a `--cert` ring URL), verified against `anchor`
/// or the nearest `.kseal.yaml` pin; a ring without a pin is refused, as for sealing (what
/// `kseal seal` and `kseal check` read the ring's keys from), with the ring's name for
/// messages, and whether the index is one its history marker, written by an older kseal,
/// cannot vouch for (see [`read_index_vouched`]).
fn verified_index_vouched(
    location: &str,
    anchor: Option<&str>,
) -> Result<(Snapshot, String, bool)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let args = RingArgs {
        ring: location.to_owned(),
        region: var(crate::env::KSEAL_AWS_REGION),
        aws_profile: None,
        endpoint_url: var(crate::env::KSEAL_AWS_ENDPOINT_URL),
        assume_role: var(crate::env::KSEAL_AWS_ASSUME_ROLE),
        ring_anchor: anchor.map(str::to_owned),
        root: None,
        lifetime: None,
        allow_expired: false,
        adopt_index: None,
        drop_pending: Vec::new(),
        // As clap reads a boolean flag's variable.
        insecure_perms: var(crate::env::KSEAL_INSECURE_PERMS).is_some_and(|v| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "0" | "false" | "no" | "off" | "n" | "f"
            )
        }),
    };
    block_on(async {
        let ring = open(&args, None).await?;
        if ring.trust().anchor().is_none() {
            bail!(
                "key ring `{location}` is not pinned: kseal seals to a key ring only when it \
                 knows the ring's trust anchor, so that whoever can write the ring's index \
                 cannot choose the key. Pin it once in the GitOps repository with `kseal keys \
                 trust --ring {}` (it writes .kseal.yaml; commit it), or pass --ring-anchor KID \
                 (KSEAL_RING_ANCHOR)",
                ring_arg(&args)
            );
        }
        let (snapshot, unrecorded) = read_index_vouched(&ring).await?;
        warn_lagging_pin(&args, &snapshot)?;
        Ok((snapshot, ring_label(&ring), unrecorded))
    })?
}

/// How many versions a repository's pin may lag the ring before readers say so.
pub(crate) const PIN_LAG_WARN: u64 = 10;

/// Warns when the version a `.kseal.yaml` pin records lags the ring's signed version by more
/// than [`PIN_LAG_WARN`]: the pin's version is the floor a fresh clone (a new CI runner, with
/// no cache of its own) refuses replays below, so a lagging pin lets an index writer put back
/// any of the versions in between there (`kseal keys trust` raises it).
fn warn_lagging_pin(args: &RingArgs, snapshot: &Snapshot) -> Result<()> {
    let Verified::Signed { version, .. } = &snapshot.verified else {
        return Ok(());
    };
    let location = Location::parse(&args.ring)?;
    let Some(pin) = crate::project::pin_for(&location, args.ring_anchor.as_deref())? else {
        return Ok(());
    };
    if pin.from != "--ring-anchor" && version.saturating_sub(pin.version) > PIN_LAG_WARN {
        eprintln!(
            "warning: {} pins key ring {} at version {}, {} versions behind the ring's {version}: \
             a fresh clone (a new CI runner) accepts a replay of any version in between; run \
             `kseal keys trust --ring {}` and commit it",
            pin.from,
            args.ring,
            pin.version,
            version - pin.version,
            ring_arg(args)
        );
    }
    Ok(())
}

/// Every key of the verified index of the ring at `location` (the reader [`crate::run`]
/// installs). Not from an index the history marker, written by an older kseal, cannot vouch
/// for: `kseal check` would pass values sealed to a fork's key, and `reseal --stale` move them
/// to it (attack review, round 16, N1).
pub(crate) fn read_ring_index(location: &str, anchor: Option<&str>) -> Result<RingIndex> {
    let (snapshot, label, unrecorded) = verified_index_vouched(location, anchor)?;
    if unrecorded {
        return Err(unrecorded_refusal(&label, &snapshot)
            .context("the ring's keys are not checked against this index"));
    }
    let mut keys = Vec::new();
    let mut active = None;
    for entry in &snapshot.index.keys {
        let cert = Certificate::from_pem(&entry.crt)
            .with_context(|| format!("key {} of the ring has no valid certificate", entry.kid))?;
        if snapshot.index.active.as_ref() == Some(&entry.kid) {
            active = Some(cert.id().clone());
        }
        keys.push((cert, SystemTime::from(entry.added)));
    }
    Ok(RingIndex { keys, active })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(text: &str) -> RingArgs {
        RingArgs {
            ring: text.to_owned(),
            region: None,
            aws_profile: None,
            endpoint_url: None,
            assume_role: None,
            ring_anchor: None,
            root: None,
            lifetime: None,
            allow_expired: false,
            adopt_index: None,
            drop_pending: Vec::new(),
            insecure_perms: false,
        }
    }

    #[test]
    fn suggested_ring_arguments_survive_a_shell() {
        assert_eq!(ring_arg(&ring("kseal/fleet")), "kseal/fleet");
        assert_eq!(
            ring_arg(&ring("dir:///srv/kseal/ring")),
            "dir:///srv/kseal/ring"
        );
        assert_eq!(
            ring_arg(&ring("secretsmanager://kseal/fleet?region=eu-west-1")),
            "'secretsmanager://kseal/fleet?region=eu-west-1'"
        );
        assert_eq!(ring_arg(&ring("dir:///it's")), r"'dir:///it'\''s'");
    }
}
