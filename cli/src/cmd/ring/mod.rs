//! `kseal keys push|activate|rotate|list|export-cert|import|retire`: the fleet key ring in AWS
//! Secrets Manager (or a directory), through `kseal-keystore`.
//!
//! Writes print what they did on stderr; `list` and `export-cert` print data on stdout. No
//! command prints a private key. Questions are asked only on a terminal without `--yes`.
//! One file per command; this module holds what several of them share (generating and
//! pushing keys, mirroring, dates), and [`crate::keysource::ring`] opens and reads the ring.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use kseal_keys::KeyPair;
use kseal_keystore::{PushOutcome, Put, Ring};

use crate::args::RingWriteArgs;
use crate::keysource::keydir::key_spec;
use crate::text::count;

mod activate;
mod export_cert;
mod export_policy;
mod import;
mod keyfiles;
mod list;
mod push;
mod retire;
mod rotate;
mod wait;

pub(crate) use activate::activate;
pub(crate) use export_cert::export_cert;
pub(crate) use export_policy::export_policy;
pub(crate) use import::import;
pub(crate) use list::list;
pub(crate) use push::push;
pub(crate) use retire::retire;
pub(crate) use rotate::rotate;

pub(super) fn when(t: SystemTime) -> String {
    crate::time::utc_civil(t, "%Y-%m-%d %H:%M UTC")
}

pub(super) fn minutes(d: Duration) -> String {
    let m = d.as_secs().div_ceil(60);
    match m {
        m if m < 120 => count(m, "minute"),
        m => format!("{} {}", count(m / 60, "hour"), count(m % 60, "minute")),
    }
}

pub(super) fn generate(spec: &crate::args::KeySpecArgs) -> Result<KeyPair> {
    let (size, options) = key_spec(spec)?;
    eprintln!(
        "generating an RSA-{} key pair (a second or two)…",
        size.bits()
    );
    KeyPair::generate(size, &options).context("failed to generate a key pair")
}

pub(super) fn report_push(ring: &Ring, outcome: &PushOutcome) {
    let stored = match outcome.stored {
        Put::Created => format!("stored {}", ring.key_name(&outcome.kid)),
        Put::Existed => format!("{} already held it", ring.key_name(&outcome.kid)),
    };
    let indexed = if outcome.indexed {
        "added to the index"
    } else {
        "already in the index"
    };
    eprintln!(
        "key {} ({}): {stored}; {indexed}",
        outcome.kid.short(),
        outcome.fingerprint
    );
    if outcome.activated {
        eprintln!(
            "key {} is the ring's first key: it seals from now on",
            outcome.kid.short()
        );
    }
}

pub(super) async fn mirror(ring: &Ring, write: &RingWriteArgs) -> Result<()> {
    if let Some(name) = &write.mirror_current_to {
        let kid = ring
            .mirror_active_to(name)
            .await
            .with_context(|| format!("failed to keep `{name}` in step with the active key"))?;
        eprintln!(
            "`{name}` holds the active key {} (reference sample format)",
            kid.short()
        );
    }
    Ok(())
}

/// Pushes `pairs`, newest first, so the newest becomes active when the ring was empty (as it
/// sealed in the cluster it came from).
pub(super) async fn push_all(ring: &Ring, pairs: Vec<KeyPair>) -> Result<Vec<PushOutcome>> {
    push_all_first(ring, pairs, None).await
}

/// [`push_all`], but `first` (the key that sealed where the keys come from) goes first, so
/// it is the one that becomes active in an empty ring.
pub(super) async fn push_all_first(
    ring: &Ring,
    mut pairs: Vec<KeyPair>,
    first: Option<&kseal_keys::KeyId>,
) -> Result<Vec<PushOutcome>> {
    pairs.sort_by_key(|p| (Some(p.id()) != first, std::cmp::Reverse(p.order_time())));
    let mut outcomes: Vec<PushOutcome> = Vec::new();
    for pair in &pairs {
        if outcomes.iter().any(|o| o.fingerprint == pair.id().as_str()) {
            continue;
        }
        let outcome = ring
            .push(pair)
            .await
            .with_context(|| format!("failed to push key {}", pair.id()))?;
        report_push(ring, &outcome);
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Says how to activate the newest key just pushed (`outcomes` are newest first), when it does
/// not seal yet. Older keys pushed with it only open what they sealed: no hint for them.
pub(super) fn hint_activation(ring: &str, outcomes: &[PushOutcome], delay: Duration) {
    if let Some(newest) = outcomes.first().filter(|o| o.indexed && !o.activated) {
        eprintln!(
            "not sealing yet: once every controller has fetched it (their interval, {} by \
             default), run `kseal keys activate --ring {ring} {}`",
            minutes(delay),
            newest.kid.short()
        );
    }
}
