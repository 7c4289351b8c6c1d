//! `kseal keys list`: the ring's keys (kid, fingerprint, validity) and which key seals, as
//! text or JSON.

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use kseal_keystore::{Index, IndexEntry};

use super::when;
use crate::args::{ListArgs, ListOutput};
use crate::keysource::ring::{block_on, check_unpinned, open, read_index, ring_arg};
use crate::output;

pub(super) fn ts(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

/// What a key of the ring is doing at `now`, as `keys list` shows it (table and JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyStatus {
    /// The index's active key: it seals.
    Sealing,
    /// Pushed after the active key and not active: it may be activated once every controller
    /// has had the activation delay to fetch it, at `until`.
    Pending { until: SystemTime },
    /// Pushed after the active key, not active, older than the activation delay.
    Ready,
    /// Added before the active key and not active: it sealed before the active key did (the
    /// index keeps no activation history, so this is inferred from the order), and opens what
    /// it sealed.
    Previous,
    /// Not active and past its notAfter: it opens only, and activating it is refused.
    Expired,
}

impl KeyStatus {
    fn of(index: &Index, entry: &IndexEntry, now: SystemTime, delay: Duration) -> Self {
        if index.active.as_ref() == Some(&entry.kid) {
            return KeyStatus::Sealing;
        }
        if entry.is_expired_at(now) {
            return KeyStatus::Expired;
        }
        if let Some(active) = index.active_entry()
            && entry.added < active.added
        {
            return KeyStatus::Previous;
        }
        let until = SystemTime::from(entry.added) + delay;
        if until > now {
            KeyStatus::Pending { until }
        } else {
            KeyStatus::Ready
        }
    }

    /// The `status` field of `keys list -o json`.
    fn word(self) -> &'static str {
        match self {
            KeyStatus::Sealing => "sealing",
            KeyStatus::Pending { .. } => "pending",
            KeyStatus::Ready => "ready",
            KeyStatus::Previous => "previous",
            KeyStatus::Expired => "expired",
        }
    }

    /// The STATUS column of `keys list`.
    fn describe(self, entry: &IndexEntry, now: SystemTime) -> String {
        match self {
            KeyStatus::Sealing if entry.is_expired_at(now) => "sealing (EXPIRED: rotate)".into(),
            KeyStatus::Sealing => "sealing".into(),
            KeyStatus::Pending { until } => format!("pending until {}", when(until)),
            KeyStatus::Ready => "ready to activate".into(),
            KeyStatus::Previous => "previous (opens only)".into(),
            KeyStatus::Expired => "expired (opens only)".into(),
        }
    }
}

/// The index as JSON, each key with its `status` (and `pendingUntil` for a pending key).
pub(super) fn list_json(index: &Index, now: SystemTime, delay: Duration) -> Result<String> {
    let mut value = serde_json::to_value(index).context("failed to encode the index")?;
    if let Some(keys) = value.get_mut("keys").and_then(|k| k.as_array_mut()) {
        for (json, entry) in keys.iter_mut().zip(&index.keys) {
            let status = KeyStatus::of(index, entry, now, delay);
            if let Some(object) = json.as_object_mut() {
                object.insert("status".into(), status.word().into());
                if let KeyStatus::Pending { until } = status {
                    let until = jiff::Timestamp::try_from(until)
                        .context("a pending key's activation time is out of range")?;
                    object.insert("pendingUntil".into(), until.to_string().into());
                }
            }
        }
    }
    let mut text = serde_json::to_string_pretty(&value).context("failed to encode the index")?;
    text.push('\n');
    Ok(text)
}

pub(crate) fn list(args: ListArgs) -> Result<()> {
    let snapshot = block_on(async {
        let ring = open(&args.ring, None).await?;
        let snapshot = read_index(&ring).await?;
        // Listing decides nothing, so with no pin an index the history marker does not vouch
        // for is listed, with what the check found (round 18, LIST).
        if let Err(e) = check_unpinned(&ring, &snapshot).await {
            eprintln!("warning: {}", crate::text::chain(&e));
        }
        anyhow::Ok(snapshot)
    })??;
    if snapshot.verified == kseal_keystore::Verified::Unsigned {
        eprintln!(
            "note: this ring's index is not signed (written by an older kseal): its keys open, \
             but nothing seals to it until the seeder runs `kseal keys sign --ring {}`",
            ring_arg(&args.ring)
        );
    }
    let index = snapshot.index;
    let now = SystemTime::now();
    let delay = kseal_keystore::DEFAULT_ACTIVATION_DELAY;
    if args.output == ListOutput::Json {
        return output::stdout(&list_json(&index, now, delay)?);
    }
    let mut out = format!(
        "{:<13} {:<51} {:>5}  {:<10}  {:<20}  {}\n",
        "KID", "FINGERPRINT", "BITS", "EXPIRES", "ADDED", "STATUS"
    );
    for entry in index.keys.iter().rev() {
        out.push_str(&format!(
            "{:<13} {:<51} {:>5}  {:<10}  {:<20}  {}\n",
            entry.kid.short(),
            entry.fingerprint,
            entry.bits,
            entry.not_after.strftime("%Y-%m-%d").to_string(),
            ts(entry.added),
            KeyStatus::of(&index, entry, now, delay).describe(entry, now)
        ));
    }
    // Keys retired from a signed ring: no longer in the ring, listed so that "retired" and
    // "never a key of this ring" differ.
    for retired in index.retired.iter().rev() {
        out.push_str(&format!(
            "{:<13} {:<51} {:>5}  {:<10}  {:<20}  retired {}\n",
            retired.kid.short(),
            "-",
            "-",
            "-",
            "-",
            ts(retired.retired)
        ));
    }
    output::stdout(&out)
}
