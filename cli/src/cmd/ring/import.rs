//! `kseal keys import`: import existing keys into the ring (Bitnami key backups, PEM files,
//! the reference sample's single Secrets Manager secret), so a fleet migrates without
//! re-sealing.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use kseal_keys::KeyPair;
use kseal_keystore::{KeyEntry, Location, Store};

use super::keyfiles::read_loaded;
use super::{hint_activation, mirror, push_all_first};
use crate::args::{ImportArgs, RingArgs};
use crate::keysource::keys::{LoadedKey, Marker, sealing_key};
use crate::keysource::ring::{aws_options, block_on, open, ring_arg, ring_label};
use crate::text::count;

/// Reads `secretsmanager://NAME[?region=…]`, a single `{"crt","key"}` secret.
pub(super) async fn read_single_secret(text: &str, args: &RingArgs) -> Result<KeyPair> {
    let location = Location::parse(text)?;
    let Location::SecretsManager { prefix: name, .. } = &location else {
        bail!("`{text}` is not a Secrets Manager secret");
    };
    let store = Store::open(&location, &aws_options(args, None)).await?;
    let (value, _) = store
        .read(name, None)
        .await
        .with_context(|| format!("failed to read `{name}`"))?
        .with_context(|| format!("`{name}` does not exist in {}", store.describe()))?;
    let entry = KeyEntry::parse(&value, name)?;
    Ok(entry.to_pair(name)?)
}

pub(crate) fn import(args: ImportArgs) -> Result<()> {
    args.never_asks.warn("kseal keys import");
    block_on(async {
        let mut keys = Vec::new();
        for source in &args.sources {
            if source.starts_with("secretsmanager://") || source.starts_with("asm://") {
                keys.push(LoadedKey {
                    pair: read_single_secret(source, &args.ring).await?,
                    marker: Marker::Unmarked,
                    origin: format!("`{source}`"),
                });
            } else {
                keys.extend(read_loaded(Path::new(source))?);
            }
        }
        // The same key from two sources (a backup and a mirror, say) is one key; a marker
        // wins over its absence.
        keys.sort_by_key(|k| k.marker == Marker::Unmarked);
        let mut seen = std::collections::HashSet::new();
        keys.retain(|k| seen.insert(k.pair.id().to_string()));
        if keys.is_empty() {
            bail!("no key found in the sources");
        }
        let ring = open(&args.ring, Some(&args.write)).await?;
        // Into an empty ring, the key that sealed where the keys come from becomes active:
        // the one a kseal backup marks active, never merely the newest.
        let empty = ring
            .snapshot(None)
            .await
            .with_context(|| format!("failed to read key ring {}", ring_label(&ring)))?
            .is_none_or(|s| s.index.keys.is_empty());
        let first = if empty {
            let candidates: Vec<_> = keys.iter().map(LoadedKey::candidate).collect();
            // A plain Bitnami backup marks none: its newest key seals, as it did there (the
            // push report names it).
            let choice = sealing_key(&candidates)
                .context("failed to choose which imported key seals in the new ring")?;
            Some(keys[choice.index].pair.id().clone())
        } else {
            None
        };
        eprintln!(
            "importing {} into key ring {}",
            count(keys.len(), "key"),
            ring_label(&ring)
        );
        let pairs = keys.into_iter().map(|k| k.pair).collect();
        let outcomes = push_all_first(&ring, pairs, first.as_ref()).await?;
        hint_activation(
            &ring_arg(&args.ring),
            &outcomes,
            kseal_keystore::DEFAULT_ACTIVATION_DELAY,
        );
        mirror(&ring, &args.write).await
    })?
}
