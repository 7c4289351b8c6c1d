//! Failing closed under a history marker an older kseal wrote (`R/root` with a version but no
//! digest): nothing tells the ring's index at the marker's version from a fork signed with a
//! ring key at that version, which whoever holds a ring key can put into the store or plant as
//! a ring-state copy (attack review, round 13, R1: a restarted leader sealed a planted copy's
//! key and refused the real index as a fork of it; R2: with the store's index forked too, it
//! also removed the live mirror of the key the fork retired). No replica takes a sealing key,
//! or removes a mirror, on the strength of such an index: its view is published for what is
//! safe (its keys are mirrored and open, its version is the floor) but nothing seals from it,
//! and the retirements it lists are ignored, until the seeder adopts the index it wrote
//! (`kseal keys refresh --adopt-index`): the marker then records its digest, and sealing
//! resumes at the next poll, without a restart.
//!
//! Two indexes of one version are one index and a fork ([`Mirror::check_same_version`]): the
//! store's is refused against the index a leader holds, and, under such a marker, compared
//! with a ring-state copy only to name both (a copy is no reference: Secrets are writable).

use super::*;

impl Mirror {
    /// Why nothing may seal from `index` (`None`: the history marker as last read vouches for
    /// it, or no marker says anything either way): the marker an older kseal wrote records no
    /// digest at the index's version; or the marker now records another index than this one,
    /// which was withheld before (a follower or a leader still holding a fork it took then).
    /// An index withheld under such a marker is remembered by its digest.
    pub(super) fn withheld(&mut self, index: &Index) -> Option<String> {
        use kseal_keystore::Vouch;
        let marker = self.cache.vouching.as_ref()?;
        let digest = index.digest();
        let root = self.ring.root_name();
        match marker.vouches(index) {
            Vouch::Unrecorded if marker.records_no_digest() => {
                self.cache.withheld_digests.insert(digest.clone());
                Some(format!(
                    "version {} of ring {}'s index (SHA-256 {digest}, active key {}) does not \
                     seal: the history marker {root} was written by an older kseal and records \
                     no digest: nothing tells this index from a fork at its version; the \
                     ring's seeder checks its version, active key, keys and retired keys \
                     against what it wrote last (`kseal keys refresh` without --adopt-index \
                     prints them, and refuses when the store holds two indexes of that \
                     version), then adopts it with `kseal keys refresh --adopt-index \
                     <SHA-256>`; sealing resumes at the next poll",
                    index.version,
                    self.ring.name(),
                    index.active.as_ref().map_or("none", Kid::short),
                ))
            }
            Vouch::Older | Vouch::NotWritten if self.cache.withheld_digests.contains(&digest) => {
                Some(format!(
                    "version {} of ring {}'s index (SHA-256 {digest}) does not seal: it was \
                     taken while the history marker {root} recorded no digest, and {root} now \
                     records another index (version {}): it was not the ring's; nothing seals \
                     until the index {root} vouches for is read",
                    index.version,
                    self.ring.name(),
                    marker.version
                ))
            }
            _ => None,
        }
    }

    /// Why nothing seals from the leader's `index`: [`Mirror::withheld`], with the store's
    /// index and the ring-state copy named when they disagree at the marker's version.
    pub(super) fn withheld_index(&mut self, index: &Index) -> Option<String> {
        let why = self.withheld(index)?;
        Some(match &self.cache.fork_note {
            Some((digest, note)) if *digest == index.digest() => format!("{why}. {note}"),
            _ => why,
        })
    }

    /// Publishes `view`, the view of `index`, withheld as [`Mirror::withheld`] says.
    pub(super) fn publish_view(&mut self, mut view: RingView, index: &Index) {
        view.withheld = self.withheld(index);
        self.state.ring_view.publish(view);
    }

    /// Publishes the view of a verified ring-state copy (see [`Mirror::publish_view`]).
    pub(super) fn publish_found(&mut self, found: &FoundState) {
        match Index::parse_any_ring(&found.text, &found.name) {
            Ok(index) => self.publish_view(found.view.clone(), &index),
            Err(e) => tracing::warn!(
                "the ring-state Secret {} is not taken: {}",
                found.name,
                crate::error_chain(&e)
            ),
        }
    }

    /// A follower whose view is withheld asks the store for the history marker's version (one
    /// metadata call, at most once per poll period) and reads the marker when it changed: once
    /// the seeder adopted the index, the view seals again without waiting for a new copy.
    pub(super) async fn recheck_withheld(&mut self) {
        if self
            .state
            .ring_view
            .current()
            .is_none_or(|v| v.withheld.is_none())
        {
            return;
        }
        let Some(followed) = self.cache.followed.clone() else {
            return;
        };
        let now = tokio::time::Instant::now();
        if self.cache.marker_recheck.is_some_and(|t| now < t) {
            return;
        }
        self.cache.marker_recheck = Some(now + STATE_POLL);
        let current = self
            .ring
            .store()
            .current_version(&self.ring.root_name())
            .await;
        count(&self.state, "describe_marker", outcome(&current));
        let Ok(current) = current else {
            return;
        };
        if current.is_none() || current == self.cache.marker_version {
            return;
        }
        let Ok(index) = Index::parse_any_ring(&followed.text, &followed.name) else {
            return;
        };
        self.cache.vouching_fresh = false;
        match self.check_vouched(&index, None).await {
            // Published again under the marker read: it seals when the marker records it.
            Ok(_) => self.publish_found(&followed),
            Err(e) => tracing::warn!(
                "the ring-state copy followed ({}) is still not vouched for; nothing seals: {}",
                followed.name,
                crate::error_chain(&e)
            ),
        }
    }

    /// Refuses an index at the version of the one held but with other content: versions
    /// only grow, so one of the two is a fork, and the one held was verified first (attack
    /// review, round 11, L1: under a marker an older kseal wrote, which records no digest, a
    /// running leader took a fork signed with a ring key at the version it held). `vouch` is
    /// what the history marker said of `index`.
    ///
    /// Under such a marker a replica that holds no index yet (a follower that became leader,
    /// a restarted leader) compares with the verified ring-state copy it followed, else the
    /// one it found at start (round 12, A2), and refuses neither: when they differ, the note
    /// naming both joins why nothing seals from the store's index (round 13, R1: a planted
    /// copy was the reference that refused the real index; [`Mirror::withheld`]). An
    /// index the marker vouches for as written replaces a held one at its version, which the
    /// marker then does not vouch for (round 12, A3: a leader restarted onto a fork refused
    /// the seeder's restored index): a Warning says so.
    pub(super) async fn check_same_version(
        &mut self,
        index: &kseal_keystore::Index,
        vouch: Option<kseal_keystore::Vouch>,
    ) -> Result<(), SyncError> {
        use kseal_keystore::Vouch;
        if !index.is_signed() {
            return Ok(());
        }
        let (held, what, from_copy) = match &self.cache.index {
            Some(held) => (held.clone(), "the index held".to_owned(), false),
            None if vouch == Some(Vouch::Unrecorded) => match self.copy_to_compare() {
                Some((held, name)) => (held, format!("the verified ring-state copy {name}"), true),
                None => return Ok(()),
            },
            None => return Ok(()),
        };
        if held.version != index.version || held.digest() == index.digest() {
            return Ok(());
        }
        let root_name = self.ring.root_name();
        let describe = |i: &kseal_keystore::Index| {
            format!(
                "SHA-256 {}, active key {}",
                i.digest(),
                i.active.as_ref().map_or("none", Kid::short)
            )
        };
        if vouch == Some(Vouch::Written) {
            let note = format!(
                "version {} of ring {}'s index ({}) replaces {what} at that version ({}): \
                 {root_name} records the first as written by the ring's writers, so the other \
                 was a fork",
                index.version,
                self.ring.name(),
                describe(index),
                describe(&held)
            );
            tracing::warn!("{note}");
            let found = self.cache.found_state.clone();
            if let Some(reference) = self.state_reference(found.as_deref()) {
                self.warn_on(&reference, "RingIndexReplaced", note).await;
            }
            return Ok(());
        }
        if from_copy {
            // A copy is no reference to refuse the store's index by: whoever can write Secrets
            // here plants one (attack review, round 13, R1: the real index was refused as a
            // fork of a planted copy, whose key sealed). Neither seals ([`Mirror::withheld`]);
            // both are named.
            let note = format!(
                "The store's index ({}) and {what} ({}) are both version {}: one of them is a \
                 fork, and {root_name} records no digest to tell which; neither seals, and no \
                 mirror is removed",
                describe(index),
                describe(&held),
                index.version
            );
            tracing::warn!("{note}");
            self.cache.fork_note = Some((index.digest(), note));
            return Ok(());
        }
        let fix = if self
            .cache
            .vouching
            .as_ref()
            .is_some_and(|m| m.digest.is_none())
        {
            format!(
                "{root_name} (written by an older kseal) records no digest to tell them apart: \
                 the ring's seeder checks the version, active key, keys and retired keys of \
                 both against what it wrote last, and adopts the one it wrote with \
                 `kseal keys refresh --adopt-index <its SHA-256>` (restoring it at this \
                 version is refused again)"
            )
        } else {
            "the ring's seeder restores the index it wrote last".to_owned()
        };
        Err(self.store_err(kseal_keystore::Error::Untrusted {
            what: self.ring.index_name(),
            reason: format!(
                "it is version {} like {what}, but with other content (the store's: {}; \
                 {what}: {}): two indexes of one version, one of them a fork. Nothing from it \
                 is used; {fix}",
                index.version,
                describe(index),
                describe(&held)
            ),
        }))
    }

    /// The verified ring-state copy a replica holding no index compares the store's index
    /// with ([`Mirror::check_same_version`]): the one it followed, else the one it found at
    /// start; and the copy's name.
    fn copy_to_compare(&self) -> Option<(kseal_keystore::Index, String)> {
        let copy = self
            .cache
            .followed
            .as_ref()
            .or(self.cache.unvouched_copy.as_ref())?;
        kseal_keystore::Index::parse_any_ring(&copy.text, &copy.name)
            .ok()
            .map(|index| (index, copy.name.clone()))
    }
}

impl Mirror {
    /// The trust a leader checks other ring-state copies under: its anchor (or its pin's
    /// trust), expired indexes accepted, any version (the floor is compared by the caller).
    pub(super) fn copy_trust(&self) -> kseal_keystore::Trust {
        let mut trust = self.pin.trust().accept_expired(true).min_version(0);
        if let Some(anchor) = &self.pin.anchor {
            trust = kseal_keystore::Trust::anchored(anchor.clone()).accept_expired(true);
            if let Some((seq, kid)) = &self.pin.seen_root {
                trust = trust.seen_root(*seq, kid.clone());
            }
        }
        trust
    }

    /// The index the leader holds when the history marker, written by an older kseal (a
    /// version, no digest), cannot vouch for it: nothing tells it from a fork at its version.
    fn held_unvouchable(&self) -> Option<&Index> {
        let marker = self.cache.vouching.as_ref()?;
        let index = self.cache.index.as_ref()?;
        marker.cannot_vouch(index).then_some(index)
    }

    /// Under a history marker an older kseal wrote (no digest), whether this ring's verified
    /// ring-state copies at the version of the index the leader holds, or above, disagree
    /// with it (and so with each other, or with the store's index). The marker vouches for
    /// none of them: none is taken as this leader's own, called forged or rewritten with
    /// another's content (attack review, round 14, OBS1: after a takeover the leader took a
    /// rival copy that matched the store's fork for its own and called the genuine one
    /// forged, inviting its deletion). Each copy gets a Warning `RingStateUnvouched` naming
    /// them all, once per content; the leader writes its copy again once the seeder adopted
    /// the index it wrote and the marker records its digest.
    pub(super) async fn copies_unvouched(&mut self) -> bool {
        let Some(held) = self.held_unvouchable().cloned() else {
            return false;
        };
        let Ok(listed) = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await
        else {
            return false;
        };
        let trust = self.copy_trust();
        let held_digest = held.digest();
        let mut copies = Vec::new();
        for secret in &listed.items {
            let Some(text) = self.own_copy_index(secret) else {
                continue;
            };
            let text = text.ok();
            let Some(Ok((index, _))) =
                text.map(|t| parse_ring_state(t, self.expected_ring.as_deref(), &trust))
            else {
                continue;
            };
            if index.version >= held.version {
                copies.push((secret, index));
            }
        }
        if copies
            .iter()
            .all(|(_, index)| index.digest() == held_digest)
        {
            return false;
        }
        let mut key: Vec<String> = copies
            .iter()
            .map(|(s, _)| {
                format!(
                    "{}@{}",
                    s.uid().unwrap_or_default(),
                    s.resource_version().unwrap_or_default()
                )
            })
            .collect();
        key.sort();
        let key = format!("{held_digest} {}", key.join(" "));
        if self.cache.unvouched_warned.as_ref() == Some(&key) {
            return true;
        }
        let describe = |i: &Index| {
            format!(
                "version {}, SHA-256 {}, active key {}",
                i.version,
                i.digest(),
                i.active.as_ref().map_or("none", Kid::short)
            )
        };
        let named = copies
            .iter()
            .map(|(s, i)| format!("{} ({})", s.name_any(), describe(i)))
            .collect::<Vec<_>>()
            .join("; ");
        let root = self.ring.root_name();
        // The advice first and the copies last: a note over 1 KiB is cut (`bounded_note`),
        // and the copies' names are whoever planted them's to choose.
        let note = format!(
            "ring {}: the history marker {root} was written by an older kseal and records no \
             digest, and the store's index and the ring-state copies are not all one index: \
             none is taken as this leader's copy, called forged or rewritten, and nothing \
             seals from any. The seeder checks the index `kseal keys refresh` prints (version, \
             active key, keys, retired keys) against what it wrote last, then adopts it \
             (--adopt-index <SHA-256>); this leader then writes its copy. Store: {}; copies: \
             {named}",
            self.ring.name(),
            describe(&held),
        );
        tracing::warn!("{note}");
        for (secret, _) in &copies {
            self.warn_on(&secret.object_ref(&()), "RingStateUnvouched", note.clone())
                .await;
        }
        self.cache.unvouched_warned = Some(key);
        true
    }
}
