//! How a change reaches the index: [`Ring::update`] applies it to the index as read and
//! writes it by compare-and-swap (re-applying it after a conflict, the marker kept ahead of
//! the index), and [`Ring::sign_change`] signs the changed index under the right root.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use kseal_keys::KeyPair;

use crate::contract::{INDEX_SCHEMA, Index, Kid};
use crate::root::RootSigner;
use crate::trust::{self, RootRecord};
use crate::{Error, Result, Version};

use super::{
    CAS_ATTEMPTS, DEFAULT_INDEX_LIFETIME, MAX_INDEX_BYTES, MAX_INDEX_LIFETIME, MIN_INDEX_LIFETIME,
    Marker, Ring, Signer, Snapshot,
};

impl Ring {
    /// Applies `change` to the current index and writes it by compare-and-swap, re-applying it
    /// to the fresh index after a conflict. `change` returns whether it changed anything (no
    /// write otherwise) and its result.
    pub(super) async fn update<T>(
        &self,
        signer: Signer<'_>,
        mut change: impl FnMut(&mut Index) -> Result<(bool, T)>,
    ) -> Result<T> {
        let name = self.index_name();
        let mut attempt = 0;
        // Private keys read to sign, kept across compare-and-swap attempts.
        let mut keys: HashMap<Kid, KeyPair> = HashMap::new();
        // The index this write started from, once it recorded a new dedicated root in the
        // marker ahead of the index (below): a retry goes on only from that very index.
        let mut marked_ahead_from: Option<String> = None;
        // The digests this write recorded in the marker as pending, one per attempt: its own,
        // never taken for another write's (see [`Ring::check_not_undone`]).
        let mut own_next: Vec<String> = Vec::new();
        let mut started_from: Option<String>;
        // The warning of pending writes this write drops (`--drop-pending`), given once its
        // index write went through.
        let mut dropped: Option<String>;
        // The index this attempt builds on.
        let mut base: Option<Index>;
        loop {
            started_from = None;
            base = None;
            dropped = None;
            attempt += 1;
            let current = self.snapshot_for_write().await?;
            let marker = self.marker().await?;
            let (mut index, expected) = match current {
                Some(s) => {
                    let pending =
                        self.own_pending_root(&signer, marked_ahead_from.as_deref(), &s)?;
                    self.check_against_marker(&s, marker.as_ref().map(|(m, _)| m), pending)?;
                    started_from = Some(s.index.to_json());
                    let may_wait = attempt < CAS_ATTEMPTS;
                    if !self
                        .catch_up_marker(&s, marker.as_ref(), &own_next, may_wait, &mut dropped)
                        .await?
                    {
                        // Another write the marker records as pending moved the index or the
                        // marker while this one waited for it: read both again.
                        continue;
                    }
                    base = Some(s.index.clone());
                    (s.index, Some(s.version))
                }
                None => (self.fresh_index(marker.as_ref())?, None),
            };
            let (changed, result) = change(&mut index)?;
            if !changed {
                return Ok(result);
            }
            // The lifetime the index had, kept unless --lifetime changes it.
            let prior = index
                .expires
                .and_then(|e| Duration::try_from(e.duration_since(index.updated)).ok());
            index.updated = jiff::Timestamp::now();
            self.sign_change(&mut index, &signer, &mut keys, expected.is_none(), prior)
                .await?;
            let text = index.to_json();
            check_size(&index, &text)?;
            let ring = self.name.clone();
            let tags = [
                ("kseal.dev/ring", ring.as_str()),
                ("kseal.dev/part", "index"),
            ];
            // Before the index write, the marker records the digest of the index about to be
            // written (attack review, round 9: a ring-key fork at the marker's own version was
            // signed under a new root by the routine `re-root`, the marker recording only a
            // version); readers and the next write take nothing at that version or the next
            // that the marker does not vouch for. A write that hands the history to a new
            // dedicated root records that root at the same time, before the index names it
            // (the version stays the one written before): should the index write fail, readers
            // refuse the old index for not passing through the new root until the write is
            // retried (fail closed), rather than a failed marker write after it leaving readers
            // pinned at a ring key without the root a fork must pass through (round 6).
            let new_root = new_dedicated_root(&index, marker.as_ref());
            if let Some(from) = &base
                && (marker.is_some() || new_root.is_some())
            {
                self.mark_next(from, &index, new_root.clone()).await?;
                own_next.push(index.digest());
                if new_root.is_some() {
                    marked_ahead_from.get_or_insert(started_from.clone().unwrap_or_default());
                }
            }
            match self
                .store
                .compare_and_swap(&name, &text, expected.as_ref(), &tags)
                .await
            {
                Ok(_) => {
                    // The index went through: a marker write failing now must say so, or the
                    // seeder takes the whole write as failed (attack review, round 10).
                    self.mark_written(&index)
                        .await
                        .map_err(|e| self.written_unmarked(&index, &e))?;
                    if let Some(warning) = &dropped {
                        self.warn.say(warning);
                    }
                    return Ok(result);
                }
                Err(Error::Conflict { .. }) if attempt < CAS_ATTEMPTS => {
                    // Another writer won; back off a little (randomised) and re-apply.
                    let mut b = [0u8; 1];
                    let _ = getrandom::fill(&mut b);
                    let wait = 50 * u64::from(attempt) + u64::from(b[0]);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The dedicated root this write recorded in the marker ahead of the index (`from`: the
    /// index it started from then), as its own pending root: only within this write, and only
    /// while the index is the one it started from. An index written in between (a fork
    /// planted after the marker moved, attack review round 7) is refused.
    fn own_pending_root<'s>(
        &self,
        signer: &'s Signer<'_>,
        from: Option<&str>,
        s: &Snapshot,
    ) -> Result<Option<(u64, &'s Kid)>> {
        match (signer, from) {
            (Signer::ReRoot(next), Some(from)) if from == s.index.to_json() => {
                Ok(Some((s.index.roots.len() as u64 + 1, next.kid())))
            }
            (_, Some(_)) => Err(Error::Refused(format!(
                "{} changed while this write was handing the history to a new dedicated root, \
                 after {} already named that root: nothing was signed. The index may be a fork: \
                 restore it to the version this write started from (the store's previous \
                 versions), put {} back to its previous version, then re-root again",
                self.index_name(),
                self.root_name(),
                self.root_name()
            ))),
            _ => Ok(None),
        }
    }

    /// Checks the verified index a write builds on against the marker (`marker`, when the
    /// ring has one) and brings the marker up to it. `own`: the digests this write recorded as
    /// pending; `may_wait`: whether it may wait for another write the marker records as
    /// pending; `dropped`: the warning of the pending writes it drops (`--drop-pending`).
    /// `false`: that write moved the index or the marker meanwhile (read again).
    async fn catch_up_marker(
        &self,
        s: &Snapshot,
        marker: Option<&(Marker, Version)>,
        own: &[String],
        may_wait: bool,
        dropped: &mut Option<String>,
    ) -> Result<bool> {
        // A marker behind the verified index (a marker write that failed after its
        // index write) is brought up to it first, whatever this write then does
        // (attack review, round 6: a re-root retried as "nothing to do" left the
        // marker without the new root, and a ring-key fork passed fresh readers).
        // Only one write can be behind: the marker is written after every index
        // write, so an index more than one version ahead of it holds writes that
        // were not its writers' (a history forked with ring keys, put in by whoever
        // can write the index), and no write of the seeder signs on top of it
        // (attack review, round 8). A marker from before versions were recorded
        // (version 0) records no floor.
        if let Some((m, _)) = &marker
            && m.version > 0
            && s.index.version > m.version.saturating_add(1)
        {
            // Under a marker without a digest, every stored index of its version is named
            // (attack review, round 14, AF1b: the store may hold a fork of it too).
            let restore = if m.digest.is_none() {
                self.restore_unrecorded(s, m).await
            } else {
                format!(
                    "restore the index to version {} from the store's previous versions, after \
                     checking the keys it names",
                    m.version
                )
            };
            return Err(Error::Untrusted {
                what: self.index_name(),
                reason: format!(
                    "it is version {}, but {} records version {} as the last its \
                     writers wrote: the versions in between were not written by \
                     them (its active key is {}). Nothing was written; {restore}",
                    s.index.version,
                    self.root_name(),
                    m.version,
                    s.index.active.as_ref().map_or("none", Kid::short),
                ),
            });
        }
        if let Some(marker) = marker {
            self.check_vouched(s, &marker.0).await?;
            if !self
                .check_not_undone(s, marker, own, may_wait, dropped)
                .await?
            {
                return Ok(false);
            }
        }
        // An index adopted under a marker an older kseal wrote (no digest) is recorded only
        // by this write's own marker updates, after it was signed: a write that then fails
        // (a root it cannot sign with) leaves the marker as it was (attack review, round 12:
        // an adoption that failed had already recorded the attacker's dedicated root).
        let adopting =
            marker.is_some_and(|(m, _)| m.digest.is_none() && m.version == s.index.version);
        if marker.is_some() && s.index.is_signed() && !adopting {
            self.mark_written(&s.index).await?;
        }
        Ok(true)
    }

    /// The error of a marker write that failed after its index write went through: it says
    /// so, or the seeder would take the whole write as failed (attack review, round 10).
    fn written_unmarked(&self, index: &Index, e: &Error) -> Error {
        Error::Refused(format!(
            "{} was written (version {}, active key {}), but {} could not be moved to it: {e}. \
             Readers take it as pending meanwhile; write again (`kseal keys refresh`) to finish",
            self.index_name(),
            index.version,
            index.active.as_ref().map_or("none", Kid::short),
            self.root_name()
        ))
    }

    /// Refuses to build on the index the marker vouches for at its version while the marker
    /// records a write after it as pending (`next`), other than this write's own (`own`):
    /// either that write failed before its index write, or it went through and was undone by
    /// putting the older index back, and a write on top would silently undo it for good
    /// (attack review, round 10, N5: after a marker write failed behind an activation, the
    /// older index was put back and the next routine refresh signed on top of it). The
    /// store's previous version names an undone write, but whoever writes the index twice
    /// moves it (round 12, U1): so every such write is refused, unless the seeder drops the
    /// pending writes by their digests after checking (`--drop-pending <SHA-256>`,
    /// [`Ring::with_drop_pending`]). Whoever writes the index twice moves AWSPREVIOUS, not the
    /// write out of the store (round 13, U2): a pending write any stored version holds is
    /// named and never dropped. A write in flight (its digest recorded, its index write not
    /// done yet) is waited for a moment (`may_wait`): `Ok(false)` when the index or the marker
    /// moved meanwhile. `dropped`: the warning to give once this write went through, when it
    /// drops pending writes.
    async fn check_not_undone(
        &self,
        s: &Snapshot,
        (marker, marker_version): &(Marker, Version),
        own: &[String],
        may_wait: bool,
        dropped: &mut Option<String>,
    ) -> Result<bool> {
        let index = &s.index;
        let pending: Vec<&str> = marker
            .pending_over(index)
            .iter()
            .filter(|d| !own.contains(d))
            .map(String::as_str)
            .collect();
        if pending.is_empty() {
            return Ok(true);
        }
        if let Some(previous) = self.undone_write(marker).await? {
            // The store still shows the write that went through: it is restored, never
            // dropped, whatever --drop-pending says.
            return Err(self.undone_refusal(s, &previous));
        }
        // Only a flag naming every pending digest drops them: one left set from an earlier
        // drop names none of a later write's (round 13, U2).
        let dropping = pending
            .iter()
            .all(|d| self.drop_pending.iter().any(|n| n == d));
        if !dropping && may_wait && self.moves_meanwhile(&s.version, marker_version).await? {
            return Ok(false);
        }
        let searched = if dropping {
            // Before dropping, the store itself is searched: an error refuses the drop.
            let searched = self
                .stored_pending(&s.version, &pending)
                .await
                .map_err(|e| self.search_failed(e))?;
            if let Some(stored) = &searched.1 {
                return Err(self.undone_refusal(s, stored));
            }
            searched.0
        } else {
            // The refusal names a stored write when the search finds one; a search that
            // fails (a role that may not list versions) leaves the general advice.
            match self.stored_pending(&s.version, &pending).await {
                Ok((_, Some(stored))) => return Err(self.undone_refusal(s, &stored)),
                Ok((searched, None)) => searched,
                Err(_) => None,
            }
        };
        let next = marker.version.saturating_add(1);
        if dropping {
            // This write's own marker update moves the marker past the pending digests once
            // its index write went through (they stay recorded until then: a pending write
            // that lands first fails this write's compare-and-swap, and its retry builds on
            // it). The warning is given then.
            *dropped = Some(format!(
                "dropped the write of version {next} that {} recorded as pending (SHA-256 {}), \
                 as --drop-pending said: {}; this write built on version {} (active key {}, \
                 SHA-256 {}) instead",
                self.root_name(),
                pending.join(", "),
                match searched {
                    Some(n) => format!("none of the {n} stored versions of the index holds it"),
                    None => "the store keeps no versions of the index to search".to_owned(),
                },
                index.version,
                index.active.as_ref().map_or("none", Kid::short),
                index.digest(),
            ));
            return Ok(true);
        }
        let digests = pending.join(" or ");
        Err(Error::Refused(format!(
            "{} is version {} (active key {}, SHA-256 {}), the one {} vouches for, but {} \
             also records a write of version {next} as pending (SHA-256 {digests}), which the \
             index does not hold: either that write failed before it wrote the index, or it \
             went through and the older index was put back, undoing it ({}). Nothing was \
             written. If your last write failed before writing the index, and this is the \
             index you wrote before it, write again with --drop-pending {} (that very digest: \
             a write that went through is never dropped); if it went through, restore {} to \
             the stored version whose text has SHA-256 {digests}, then write again",
            self.index_name(),
            index.version,
            index.active.as_ref().map_or("none", Kid::short),
            index.digest(),
            self.root_name(),
            self.root_name(),
            self.search_told(searched),
            pending.join(","),
            self.index_name(),
        )))
    }

    /// The refusal of a write on top of `s` while the store still holds `stored`, a write the
    /// marker records as pending: it went through and was undone; it is restored, never
    /// dropped.
    fn undone_refusal(&self, s: &Snapshot, (id, stored): &(Version, Index)) -> Error {
        let restore = match &self.store {
            crate::Store::SecretsManager(_) => format!(
                "`aws secretsmanager update-secret-version-stage --secret-id {} --version-stage \
                 AWSCURRENT --move-to-version-id {id} --remove-from-version-id {}`",
                self.index_name(),
                s.version
            ),
            crate::Store::Directory(_) => "your backups".to_owned(),
        };
        Error::Untrusted {
            what: self.index_name(),
            reason: format!(
                "it is version {} (active key {}, SHA-256 {}), but the store still holds \
                 version {} of it (VersionId {id}, active key {}, SHA-256 {}), a write that {} \
                 records as pending: that write went through and was undone by putting the \
                 older index back. Nothing was written and nothing dropped (--drop-pending \
                 never drops a write the store holds); restore {} to that version \
                 ({restore}), then write again",
                s.index.version,
                s.index.active.as_ref().map_or("none", Kid::short),
                s.index.digest(),
                stored.version,
                stored.active.as_ref().map_or("none", Kid::short),
                stored.digest(),
                self.root_name(),
                self.index_name(),
            ),
        }
    }

    /// A search for a pending write that failed, refusing the drop it was made for.
    fn search_failed(&self, e: Error) -> Error {
        match e {
            Error::Refused(_) => e,
            e => Error::Refused(format!(
                "a drop first searches the stored versions of {} for the write it drops, and \
                 that failed: {e}. Nothing was written or dropped",
                self.index_name()
            )),
        }
    }

    /// The store's previous version of the index when it is a write `marker` records as
    /// pending (at the version after the marker's): a write that went through and was undone.
    async fn undone_write(&self, marker: &Marker) -> Result<Option<(Version, Index)>> {
        let Some((text, id)) = self.store.read_previous(&self.index_name()).await? else {
            return Ok(None);
        };
        let Ok(previous) = self.parse_index(&text) else {
            return Ok(None);
        };
        let undone = previous.version == marker.version.saturating_add(1)
            && marker.next.contains(&previous.digest());
        Ok(undone.then_some((id, previous)))
    }

    /// Searches every stored version of the index but the current one (`current`) for a write
    /// whose digest is `pending`: with how many versions were searched (`None` where the store
    /// keeps none). A store that keeps more versions than are searched is refused: a write
    /// among those left would go unseen (attack review, round 13, U2).
    async fn stored_pending(
        &self,
        current: &Version,
        pending: &[&str],
    ) -> Result<(Option<usize>, Option<(Version, Index)>)> {
        let mut found = None;
        let searched = self
            .search_stored(
                || {
                    format!(
                        "{} has more than {MAX_VERSIONS_SEARCHED} stored versions, too many to \
                         search for the write {} records as pending: nothing was written or \
                         dropped. Restore the write whose text has SHA-256 {} if the store \
                         holds it; else ask why the index was written so often",
                        self.index_name(),
                        self.root_name(),
                        pending.join(" or ")
                    )
                },
                |id, stored| {
                    let hit = id != current && pending.contains(&stored.digest().as_str());
                    if hit {
                        found = Some((id.clone(), stored));
                    }
                    hit
                },
            )
            .await?;
        Ok((searched, found))
    }

    /// Reads every stored version of the index (Secrets Manager's `ListSecretVersionIds` with
    /// deprecated versions, then each by its VersionId) and hands each that parses as an index
    /// to `found`, with its VersionId, until `found` returns `true`: how many versions the
    /// store lists (`None` on a directory, which keeps none). A store listing more than
    /// [`MAX_VERSIONS_SEARCHED`] is refused with `too_many`'s text: a version among those left
    /// would go unseen (attack review, round 13, U2).
    pub(super) async fn search_stored(
        &self,
        too_many: impl FnOnce() -> String,
        mut found: impl FnMut(&Version, Index) -> bool,
    ) -> Result<Option<usize>> {
        if matches!(self.store, crate::Store::Directory(_)) {
            return Ok(None);
        }
        let name = self.index_name();
        let ids = self.store.versions(&name, MAX_VERSIONS_SEARCHED).await?;
        if ids.len() > MAX_VERSIONS_SEARCHED {
            return Err(Error::Refused(too_many()));
        }
        for id in &ids {
            let text = match self.store.read(&name, Some(id)).await {
                Ok(Some((text, _))) => text,
                // Gone meanwhile, or a version no kseal writes (binary, empty).
                Ok(None) | Err(Error::Malformed { .. }) => continue,
                Err(e) => return Err(e),
            };
            let Ok(stored) = self.parse_index(&text) else {
                continue;
            };
            if found(id, stored) {
                break;
            }
        }
        Ok(Some(ids.len()))
    }

    /// Waits a moment (a write between its marker update and its index write takes a few
    /// calls) for the index (read at `index`) or the marker (at `marker`) to move: whether
    /// either did.
    async fn moves_meanwhile(&self, index: &Version, marker: &Version) -> Result<bool> {
        for _ in 0..PENDING_POLLS {
            tokio::time::sleep(PENDING_POLL).await;
            if self
                .store
                .current_version(&self.root_name())
                .await?
                .as_ref()
                != Some(marker)
                || self
                    .store
                    .current_version(&self.index_name())
                    .await?
                    .as_ref()
                    != Some(index)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// What a search of the store for a pending write found nothing in (`searched`: how many
    /// stored versions; `None`: none searched).
    fn search_told(&self, searched: Option<usize>) -> String {
        match searched {
            Some(n) => format!(
                "none of the {n} stored versions of {} holds it",
                self.index_name()
            ),
            None => self.versions_hint(),
        }
    }

    /// Where the index's stored versions are listed, with their SHA-256.
    fn versions_hint(&self) -> String {
        match &self.store {
            crate::Store::SecretsManager(_) => format!(
                "the store's versions tell: `aws secretsmanager list-secret-version-ids \
                 --secret-id {} --include-deprecated`, then the SHA-256 of each version's \
                 SecretString",
                self.index_name()
            ),
            crate::Store::Directory(_) => {
                "a directory keeps no previous versions: your backups tell".to_owned()
            }
        }
    }

    /// The index a write starts from when the ring has none: a new, empty one, unless the
    /// ring had a signed history (`marker`) or is pinned.
    fn fresh_index(&self, marker: Option<&(Marker, Version)>) -> Result<Index> {
        if marker.is_some() {
            // The marker outlives the index: a ring that had a signed history is never
            // started over (its keys would all be dropped), pinned or not.
            return Err(Error::Refused(format!(
                "{} does not exist, but {} records that this ring had a signed history: \
                 it is never created again; restore its index from the store's \
                 previous versions (or, for a new ring, use another name)",
                self.index_name(),
                self.root_name()
            )));
        }
        // A pinned ring had a signed history: a missing index is one that was
        // removed, never a new ring to start over under another root.
        if let Some(pinned) = self.trust.anchor() {
            return Err(Error::Refused(format!(
                "{} does not exist, but this ring is pinned at anchor {}: a pinned \
                 ring is never created again; restore its index (or, for a new \
                 ring, run without the pin)",
                self.index_name(),
                pinned.short()
            )));
        }
        Ok(Index::empty(&self.name, SystemTime::now()))
    }

    /// A key of the ring, read once per call.
    async fn key_for<'k>(
        &self,
        kid: &Kid,
        keys: &'k mut HashMap<Kid, KeyPair>,
    ) -> Result<&'k KeyPair> {
        if !keys.contains_key(kid) {
            let pair = self.read_key(kid).await.map_err(|e| match e {
                Error::NotFound { what, .. } => Error::Refused(format!(
                    "signing the ring's index needs the private key of its root {} ({what}), \
                     which cannot be read: run this as the ring's seeder",
                    kid.short()
                )),
                e => e,
            })?;
            keys.insert(kid.clone(), pair);
        }
        Ok(&keys[kid])
    }

    /// Signs a changed index: the first key of a new ring (`new_ring`: no index existed)
    /// becomes its anchor, or the dedicated root (`--root`) does; a ring-key root that left the
    /// ring hands over to the active key; `Signer::ReRoot` hands the root to a dedicated root;
    /// the last root signs the whole index, with a fresh expiry.
    async fn sign_change(
        &self,
        index: &mut Index,
        signer: &Signer<'_>,
        keys: &mut HashMap<Kid, KeyPair>,
        new_ring: bool,
        prior_lifetime: Option<Duration>,
    ) -> Result<()> {
        if let Signer::Pushed(pair) = signer {
            keys.insert(Kid::of(pair.public_key()), (*pair).clone());
        }
        if index.roots.is_empty() {
            if let (Some(root), true) = (&self.root, new_ring) {
                // A new ring starts at its dedicated root: no ring key ever signs it.
                let record =
                    trust::dedicated_record(&index.ring, 1, None, root, async |_| Ok(None)).await?;
                index.roots.push(record);
            } else {
                let anchor = self.first_anchor(index, signer, keys, new_ring).await?;
                index.roots.push(trust::genesis(&index.ring, &anchor)?);
            }
        }
        if let Signer::ReRoot(next) = signer {
            let previous = index.roots[index.roots.len() - 1].clone();
            if previous.kid != *next.kid() {
                if index.entry(next.kid()).is_some()
                    || index.retired.iter().any(|r| &r.kid == next.kid())
                {
                    return Err(Error::Refused(format!(
                        "{} is a key of the ring: a dedicated root must be a key no cluster \
                         holds (a KMS key, or a file made by `kseal keys new-root`)",
                        next.key().describe()
                    )));
                }
                let previous_signer = self.root_signer_for(&previous, false)?;
                let seq = previous.seq + 1;
                let record = if previous.dedicated {
                    let current = previous_signer.ok_or_else(|| self.needs_root(&previous))?;
                    trust::dedicated_record(
                        &index.ring,
                        seq,
                        Some(&previous.kid),
                        next,
                        async |m| Ok(Some(current.sign(m).await?)),
                    )
                    .await?
                } else {
                    let pair = self.key_for(&previous.kid, keys).await?.clone();
                    trust::dedicated_record(
                        &index.ring,
                        seq,
                        Some(&previous.kid),
                        next,
                        async |m| Ok(Some(trust::sign_with_pair(&pair, m)?)),
                    )
                    .await?
                };
                index.roots.push(record);
            }
        }
        let last = index.roots[index.roots.len() - 1].clone();
        if !last.dedicated && index.entry(&last.kid).is_none() {
            // The root key is being retired: hand the root to the active key first, signed by
            // both, so readers can follow the chain.
            let next = index.active.clone().ok_or_else(|| {
                Error::Refused("the ring has no active key to take over as its root".into())
            })?;
            let previous_pair = self.key_for(&last.kid, keys).await?.clone();
            let next_pair = self.key_for(&next, keys).await?.clone();
            index.roots.push(trust::rotate_root(
                &index.ring,
                &last,
                &previous_pair,
                &next_pair,
            )?);
        }
        let last = index.roots[index.roots.len() - 1].clone();
        index.schema = INDEX_SCHEMA;
        index.version = index.version.checked_add(1).ok_or_else(|| {
            Error::Refused(format!(
                "{} is at version {}, the last one there is: it cannot be written again (an \
                 index this far along was not written by kseal's writers, which add one)",
                self.index_name(),
                index.version
            ))
        })?;
        index.expires = Some(self.expiry_for(index, prior_lifetime)?);
        if last.dedicated {
            let root = match signer {
                Signer::ReRoot(next) => *next,
                _ => self
                    .root_signer_for(&last, true)?
                    .ok_or_else(|| self.needs_root(&last))?,
            };
            trust::sign_index_dedicated(index, root).await
        } else {
            if self.root.is_some() && !matches!(signer, Signer::ReRoot(_)) {
                return Err(Error::Refused(format!(
                    "ring {:?} is still signed by its ring key {}, not by the dedicated root \
                     given with --root: move it once with `kseal keys re-root --root …`, or \
                     write without --root",
                    self.name,
                    last.kid.short()
                )));
            }
            let pair = self.key_for(&last.kid, keys).await?.clone();
            trust::sign_index(index, &pair)
        }
    }

    /// The anchor of a ring's first signed index (no `--root`): the key being pushed into a
    /// new ring, or the key a migration names.
    async fn first_anchor(
        &self,
        index: &Index,
        signer: &Signer<'_>,
        keys: &mut HashMap<Kid, KeyPair>,
        new_ring: bool,
    ) -> Result<KeyPair> {
        match (signer, index.keys.as_slice()) {
            (Signer::Pushed(pair), [only])
                if new_ring && only.kid == Kid::of(pair.public_key()) =>
            {
                Ok((*pair).clone())
            }
            (Signer::Pushed(_), _) if index.keys.len() == 1 => {
                // An index exists but held no key and no history: no kseal writes one,
                // so whoever can write the index emptied it. Starting a new history over
                // it would hand the ring to a new key and drop every earlier one.
                Err(Error::Refused(format!(
                    "{} exists but holds no key and no signed history: kseal never writes \
                     such an index, so it was emptied by hand or by an attacker; refusing \
                     to start a new history over it. Restore the signed index from the \
                     store's previous version, or delete it if this ring is really new",
                    self.index_name()
                )))
            }
            (Signer::Migrate(anchor), _) => Ok(self.key_for(anchor, keys).await?.clone()),
            _ => Err(Error::Refused(format!(
                "{} is not signed (written by a kseal before signed ring histories): \
                 sign it once with `kseal keys sign`, then try again",
                self.index_name()
            ))),
        }
    }

    /// The `--root` given, when it is the key of the dedicated root `record`; `None` without
    /// one. `required`: another root given is an error (it would sign what nobody can verify).
    fn root_signer_for(&self, record: &RootRecord, required: bool) -> Result<Option<&RootSigner>> {
        match &self.root {
            Some(root) if root.kid() == &record.kid => Ok(Some(root)),
            Some(root) if required || record.dedicated => Err(Error::Refused(format!(
                "--root {} is key {}, but ring {:?} is signed by its dedicated root {}{}",
                root.key().describe(),
                root.kid().short(),
                self.name,
                record.kid.short(),
                record
                    .location
                    .as_deref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ))),
            _ => Ok(None),
        }
    }

    /// "This ring is signed by its dedicated root: pass --root".
    fn needs_root(&self, record: &RootRecord) -> Error {
        Error::Refused(format!(
            "ring {:?} is signed by its dedicated root {}: writing to it needs that root, \
             --root {} (or KSEAL_RING_ROOT), as the ring's seeder",
            self.name,
            record.kid.short(),
            record.location.as_deref().unwrap_or("file://PATH")
        ))
    }

    /// When an index written now expires: `--lifetime`, else the lifetime the current index
    /// had, else [`DEFAULT_INDEX_LIFETIME`].
    fn expiry_for(&self, index: &Index, prior: Option<Duration>) -> Result<jiff::Timestamp> {
        let lifetime = match self.lifetime {
            Some(l) => {
                if !(MIN_INDEX_LIFETIME..=MAX_INDEX_LIFETIME).contains(&l) {
                    return Err(Error::Refused(format!(
                        "an index lifetime of {} s is outside {}..={} s (1 hour to 90 days)",
                        l.as_secs(),
                        MIN_INDEX_LIFETIME.as_secs(),
                        MAX_INDEX_LIFETIME.as_secs()
                    )));
                }
                l
            }
            None => prior
                .filter(|l| (MIN_INDEX_LIFETIME..=MAX_INDEX_LIFETIME).contains(l))
                .unwrap_or(DEFAULT_INDEX_LIFETIME),
        };
        let span = jiff::SignedDuration::try_from(lifetime)
            .map_err(|_| Error::Refused("the index lifetime is out of range".into()))?;
        index.updated.checked_add(span).map_err(|_| {
            Error::Refused("the index's expiry would be out of the supported time range".into())
        })
    }
}

/// How many times, and how often, a write looks again for another write the marker records
/// as pending before refusing (see [`Ring::check_not_undone`]): two seconds in all.
const PENDING_POLLS: u32 = 8;
const PENDING_POLL: Duration = Duration::from_millis(250);

/// How many stored versions of the index a write searches for a pending write before it
/// drops it (Secrets Manager keeps about 100, those younger than a day on top).
pub(super) const MAX_VERSIONS_SEARCHED: usize = 300;

/// The dedicated root `index` hands the history to, when `marker` does not record it yet.
fn new_dedicated_root(index: &Index, marker: Option<&(Marker, Version)>) -> Option<(u64, Kid)> {
    index
        .roots
        .last()
        .filter(|r| r.dedicated)
        .filter(|r| {
            marker
                .as_ref()
                .and_then(|(m, _)| m.root.as_ref())
                .is_none_or(|(seq, _)| *seq < r.seq)
        })
        .map(|r| (r.seq, r.kid.clone()))
}

/// Refuses an index over Secrets Manager's 64 KiB limit for a value.
fn check_size(index: &Index, text: &str) -> Result<()> {
    if text.len() > MAX_INDEX_BYTES {
        return Err(Error::Refused(format!(
            "the index would hold {} bytes for {} keys, over Secrets Manager's 64 KiB limit for \
             a value: retire old keys first (`kseal keys retire`)",
            text.len(),
            index.keys.len()
        )));
    }
    Ok(())
}
