//! A fleet key ring (AWS Secrets Manager or a directory) through `kseal-keystore`: opening it
//! with the trust pinned in `.kseal.yaml`, reading its verified index, and the readers the
//! full CLI installs ([`super::read_rings_with`]) so that `kseal` itself never links this.

use std::future::Future;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use kseal_keys::Certificate;
use kseal_keystore::{AwsOptions, Location, Ring, Snapshot, Store, Trust, Verified};

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
    let trust = match pin {
        Some(pin) => {
            let floor = pin.version.max(seen::version(&pin.anchor));
            let trust = Trust::anchored(pin.anchor.clone()).min_version(floor);
            match seen::root(&pin.anchor) {
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
    ring = ring.with_allow_expired(args.allow_expired);
    Ok(ring)
}

/// The highest version of each pinned history this machine has read, kept in the user's cache
/// directory (`$KSEAL_CACHE_DIR`, else `$XDG_CACHE_HOME/kseal`, else `~/.cache/kseal`), one
/// file per anchor: `rings/<anchor>`. A pin in `.kseal.yaml` records the version seen when it
/// was made; this records every later one, so replaying an older signed index (whoever can
/// write the index can put back any version the seeder once wrote) is refused as a rollback
/// on a machine that saw a newer one. Best effort: a cache that cannot be written changes
/// nothing but this protection.
pub(crate) mod seen {
    use std::path::PathBuf;

    use kseal_keystore::Kid;

    fn dir() -> Option<PathBuf> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        var(crate::env::KSEAL_CACHE_DIR)
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("kseal")))
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache").join("kseal")))
            .map(|d| d.join("rings"))
    }

    /// Where the highest version of the history anchored at `anchor` is kept.
    pub(crate) fn path(anchor: &Kid) -> Option<PathBuf> {
        dir().map(|d| d.join(anchor.as_str()))
    }

    /// What is kept for `anchor`: the first line the version, then `root <seq> <kid>` for the
    /// newest dedicated root seen.
    fn read(anchor: &Kid) -> (u64, Option<(u64, Kid)>) {
        let text = path(anchor)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        let mut lines = text.lines();
        let version = lines
            .next()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let root = lines.find_map(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("root"), Some(seq), Some(kid)) => {
                    Some((seq.parse().ok()?, Kid::parse(kid).ok()?))
                }
                _ => None,
            }
        });
        (version, root)
    }

    /// The highest version of `anchor`'s history read here (0: none, or unreadable).
    pub(crate) fn version(anchor: &Kid) -> u64 {
        read(anchor).0
    }

    /// The newest dedicated root of `anchor`'s history seen here: a later history must extend
    /// it (a fork from an older root, signed with keys clusters held, does not).
    pub(crate) fn root(anchor: &Kid) -> Option<(u64, Kid)> {
        read(anchor).1
    }

    /// Records `version` of `anchor`'s history, and its dedicated root `root` (number and kid),
    /// when newer than what is kept.
    pub(crate) fn record(anchor: &Kid, version: u64, root: Option<(u64, &Kid)>) {
        let (kept_version, kept_root) = read(anchor);
        let newer_root = root.filter(|(seq, _)| kept_root.as_ref().is_none_or(|(s, _)| seq > s));
        if version <= kept_version && newer_root.is_none() {
            return;
        }
        let version = version.max(kept_version);
        let root_line = match (newer_root, &kept_root) {
            (Some((seq, kid)), _) => format!("root {seq} {kid}\n"),
            (None, Some((seq, kid))) => format!("root {seq} {kid}\n"),
            (None, None) => String::new(),
        };
        let Some(path) = path(anchor) else {
            return;
        };
        let Some(parent) = path.parent() else {
            return;
        };
        if std::fs::create_dir_all(parent).is_err() {
            return;
        }
        // Written beside it and renamed into place: a reader never sees half a number.
        let temp = parent.join(format!(".{}.{}", anchor.as_str(), std::process::id()));
        if std::fs::write(&temp, format!("{version}\n{root_line}")).is_ok()
            && std::fs::rename(&temp, &path).is_err()
        {
            let _ = std::fs::remove_file(&temp);
        }
    }
}

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
    match ring.snapshot(None).await {
        Ok(Some(snapshot)) => {
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
                seen::record(pinned, *version, dedicated.then_some((*root_seq, root)));
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
            Ok(snapshot)
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

/// The sealing certificate of a ring, for `kseal seal --cert secretsmanager://R` (reads the
/// index only: no private key is touched, so a cert-only IAM policy suffices).
///
/// Only a ring whose signed history starts at a pinned anchor (`anchor`, i.e. `--ring-anchor`
/// or `KSEAL_RING_ANCHOR`, else the nearest `.kseal.yaml`) is sealed to: whoever can write the
/// index but not the ring's private keys cannot choose the key.
pub(crate) fn active_certificate_pem(location: &str, anchor: Option<&str>) -> Result<String> {
    let (snapshot, label) = verified_index(location, anchor)?;
    let entry = snapshot
        .index
        .active_entry()
        .with_context(|| format!("key ring {label} has no active key"))?;
    Ok(entry.crt.clone())
}

/// The index of the key ring at `location` (a `--cert` ring URL), verified against `anchor`
/// or the nearest `.kseal.yaml` pin; a ring without a pin is refused, as for sealing (what
/// `kseal seal` and `kseal check` read the ring's keys from), with the ring's name for
/// messages.
pub(crate) fn verified_index(location: &str, anchor: Option<&str>) -> Result<(Snapshot, String)> {
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
        Ok((read_index(&ring).await?, ring_label(&ring)))
    })?
}

/// Every key of the verified index of the ring at `location` (the reader [`crate::run`]
/// installs).
pub(crate) fn read_ring_index(location: &str, anchor: Option<&str>) -> Result<RingIndex> {
    let (snapshot, _) = verified_index(location, anchor)?;
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
