//! `kseal keys push`: add a key to the fleet key ring (generated, or from files); the first
//! key of a new ring seals at once, later ones after `activate`.

use anyhow::{Context as _, Result};
use kseal_keystore::Store;

use super::keyfiles::read_pairs;
use super::{generate, hint_activation, mirror, push_all, report_push};
use crate::args::PushArgs;
use crate::keysource::ring::{block_on, open, ring_arg, ring_label};
use crate::text::count;

/// The recovery window of a key secret that `push --if-empty` stored but lost the race to
/// index: Secrets Manager's shortest.
const ORPHAN_RECOVERY_DAYS: u32 = 7;

pub(crate) fn push(args: PushArgs) -> Result<()> {
    args.never_asks.warn("kseal keys push");
    // Files are read before anything is written, so a bad one changes nothing.
    let mut from = Vec::new();
    for path in &args.from {
        from.extend(read_pairs(path)?);
    }
    block_on(async {
        let ring = open(&args.ring, Some(&args.write)).await?;
        if args.if_empty {
            // Checked before generating: a seeding Job that runs again does no work at all.
            let keys = ring
                .snapshot(None)
                .await
                .with_context(|| format!("failed to read key ring {}", ring_label(&ring)))?
                .map_or(0, |s| s.index.keys.len());
            if keys > 0 {
                eprintln!(
                    "key ring {} already has {}: nothing to do (--if-empty)",
                    ring_label(&ring),
                    count(keys, "key")
                );
                return mirror(&ring, &args.write).await;
            }
        }
        eprintln!("pushing to key ring {}", ring_label(&ring));
        if args.if_empty {
            // Checked again atomically with the write: of several seeders racing, one key
            // enters the ring and the others leave it as they found it.
            let pair = generate(&args.spec)?;
            let outcome = ring
                .push_if_empty(&pair, ORPHAN_RECOVERY_DAYS)
                .await
                .with_context(|| format!("failed to push key {}", pair.id()))?;
            match outcome {
                Some(outcome) => report_push(&ring, &outcome),
                None => eprintln!(
                    "key ring {} received a key from another writer meanwhile: nothing to do \
                     (--if-empty); the key generated here was never indexed, and {}",
                    ring_label(&ring),
                    match ring.store() {
                        Store::Directory(_) => "its files moved to retired/",
                        Store::SecretsManager(_) => "its secret is scheduled for deletion",
                    }
                ),
            }
            return mirror(&ring, &args.write).await;
        }
        let pairs = if args.from.is_empty() {
            vec![generate(&args.spec)?]
        } else {
            from
        };
        let outcomes = push_all(&ring, pairs).await?;
        hint_activation(
            &ring_arg(&args.ring),
            &outcomes,
            kseal_keystore::DEFAULT_ACTIVATION_DELAY,
        );
        mirror(&ring, &args.write).await
    })?
}
