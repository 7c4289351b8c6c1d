//! The ring-state Secret: how the leader publishes the ring's verified index and what it saw
//! (kids ever named, the last active kid) for followers and for itself after a restart, and
//! how followers derive their ring view from it. Pinning the ring's anchor is in `pinning`.

use super::*;

pub(super) use super::pinning::MarkerFacts;
use super::pinning::extends_required;

impl Mirror {
    /// The index text of a ring-state Secret of this ring (`None`: another ring's, by its
    /// `kseal.dev/ring` annotation; `Some(Err(()))`: this ring's, with no readable index).
    pub(super) fn own_copy_index<'s>(&self, secret: &'s Secret) -> Option<Result<&'s str, ()>> {
        if secret
            .annotations()
            .get(RING_ANNOTATION)
            .map(String::as_str)
            != Some(self.ring.name())
        {
            return None;
        }
        Some(
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(INDEX_ITEM))
                .and_then(|v| std::str::from_utf8(&v.0).ok())
                .ok_or(()),
        )
    }

    /// Reads the ring-state Secrets of this ring and returns the view of the one that parses
    /// with the newest `updated` (several can exist: a leader's, a stale one, a forged one;
    /// until the index is signed a forged one is as good as write access to Secrets here).
    ///
    /// Of signed copies, only those that extend the newest dedicated root are taken: the one
    /// this controller saw before (the pin's), else the newest one a verified copy names. A
    /// fork signed by a ring key from before the ring moved to its dedicated root (which every
    /// cluster holding that key could sign) is refused even at a higher version; two copies
    /// naming different dedicated roots at the same place of the chain, newer than the pin's,
    /// mean that no copy is taken (the pin cannot say which is the ring's).
    ///
    /// Of the copies that verify, the newest one the history marker as last read vouches for
    /// is taken, else the newest: a rival copy (a fork at a higher version, planted by whoever
    /// can write Secrets here) never hides the leader's (attack review, round 12, F1).
    pub async fn load_state(&self) -> Result<Option<FoundState>, SyncError> {
        let mut copies = self.load_states().await?;
        if copies.is_empty() {
            return Ok(None);
        }
        let at = copies.iter().position(|(_, vouched)| *vouched).unwrap_or(0);
        Ok(Some(copies.swap_remove(at).0))
    }

    /// Every ring-state copy of this ring that verifies (see [`Mirror::load_state`]), newest
    /// first, each with whether the history marker as last read vouches for it (`true` when
    /// no marker was read). A copy that does not verify is named in the log and skipped.
    pub(super) async fn load_states(&self) -> Result<Vec<(FoundState, bool)>, SyncError> {
        let trust = self.pin.trust();
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        let mut candidates = Vec::new();
        for secret in listed.items {
            if secret
                .annotations()
                .get(RING_ANNOTATION)
                .map(String::as_str)
                != Some(self.ring.name())
            {
                continue;
            }
            let item = |key: &str| {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .and_then(|v| std::str::from_utf8(&v.0).ok())
                    .map(str::to_owned)
            };
            let Some(text) = item(INDEX_ITEM) else {
                continue;
            };
            let (index, verified) = match parse_ring_state(
                &text,
                self.expected_ring.as_deref(),
                &trust,
            ) {
                Ok(parsed) => parsed,
                Err(e) => {
                    tracing::warn!(secret = %secret.name_any(), "ignoring a ring-state Secret: {}", crate::error_chain(&e));
                    continue;
                }
            };
            let ever = item(KIDS_EVER_ITEM)
                .map(|t| parse_kids(&t))
                .unwrap_or_default();
            let last_active = item(LAST_ACTIVE_ITEM).and_then(|t| Kid::parse(t.trim()).ok());
            candidates.push((secret.name_any(), text, index, verified, ever, last_active));
        }
        // The newest dedicated root the copies name, unless the pin already knows one as new.
        let known = self.pin.seen_root.as_ref().map_or(0, |(seq, _)| *seq);
        let roots: BTreeSet<(u64, Kid)> = candidates
            .iter()
            .filter_map(|(_, _, _, verified, _, _)| Pin::dedicated_root(verified))
            .filter(|(seq, _)| *seq > known)
            .collect();
        let newest_seq = roots.iter().map(|(seq, _)| *seq).max();
        let newest: Vec<&(u64, Kid)> = roots
            .iter()
            .filter(|(seq, _)| Some(*seq) == newest_seq)
            .collect();
        let required = match newest.as_slice() {
            [] => self.pin.seen_root.clone(),
            [one] => Some((*one).clone()),
            many => {
                tracing::warn!(
                    roots = %many.iter().map(|(_, k)| k.short()).collect::<Vec<_>>().join(", "),
                    "ring-state Secrets of ring {} name different dedicated roots at root {}: \
                     no ring-state copy is taken (give --ring-anchor the ring's dedicated \
                     root)",
                    self.ring.name(),
                    newest_seq.unwrap_or_default()
                );
                candidates.clear();
                None
            }
        };
        let mut copies: Vec<(FoundState, bool)> = Vec::new();
        for (name, text, index, verified, ever, last_active) in candidates {
            // No copy before the store's history marker answered (a restart while the store
            // cannot be read): under a pin at a ring key a planted fork copy would pass, raise
            // the floor past the real index and be written back by the leader (attack review,
            // round 3); and whether the pin is a dedicated root cannot be told from a chain
            // (whoever holds a ring key can sign one that calls it so) nor from anything in
            // this namespace (round 5). Nothing seals until the marker answered; the mirrored
            // keys open meanwhile.
            if !self.cache.marker_applied {
                tracing::debug!(
                    secret = %name,
                    "ring-state Secret not taken before the ring's history marker answered"
                );
                continue;
            }
            if !extends_required(required.as_ref(), &verified, &index, &name) {
                continue;
            }
            let version = match &verified {
                Verified::Signed { version, .. } => *version,
                Verified::Unsigned => 0,
            };
            let vouched = self.cache.vouching.as_ref().is_none_or(|m| {
                use kseal_keystore::Vouch;
                matches!(
                    m.vouches(&index),
                    Vouch::Written | Vouch::Pending | Vouch::Unrecorded
                )
            });
            copies.push((
                FoundState {
                    version,
                    text,
                    root: Pin::dedicated_root(&verified),
                    view: RingView::new(&index, &ever, last_active),
                    name,
                },
                vouched,
            ));
        }
        // Newest first; of equal ones, the first listed (a stable sort).
        copies.sort_by(|(a, _), (b, _)| {
            (b.version, b.view.updated).cmp(&(a.version, a.view.updated))
        });
        Ok(copies)
    }

    /// A follower that took no copy now: a view it holds that is older than its floor (a
    /// newer version was seen since, from the history marker or a copy) was rolled back, and
    /// is dropped (nothing seals until a current copy is written), with one Warning per
    /// version (attack review, round 4: a follower kept sealing from a copy it had since
    /// refused).
    async fn drop_stale_view(&mut self) {
        let Some(view) = self.state.ring_view.current() else {
            return;
        };
        if view.version >= self.pin.floor {
            return;
        }
        self.state.ring_view.clear();
        let note = format!(
            "the ring view of ring {} this replica held (version {}) is older than version {} \
             it has seen since: dropped; nothing seals here until the leader writes a current \
             ring-state Secret",
            self.ring.name(),
            view.version,
            self.pin.floor
        );
        tracing::warn!("{note}");
        if let Some(reference) = self.state_reference(None) {
            self.warn_on(&reference, "RingViewStale", note).await;
        }
    }

    /// A follower's poll: publishes the ring-state Secret's view, verified under the pinned
    /// anchor. A replica with no anchor pinned yet (no `--ring-anchor`) pins from the store
    /// itself (one read of the index), never from a Secret that whoever can write Secrets in
    /// this namespace could have written; until it has, it takes no view, so it seals nothing.
    pub async fn follow(&mut self) -> Result<(), SyncError> {
        let mut from_store = None;
        let marker = self.apply_marker().await;
        self.adopt_persisted_anchor().await?;
        self.recheck_withheld().await;
        if self.pin.anchor.is_none()
            || (self.cache.anchor_from_state && !self.cache.store_confirmed)
        {
            if let Err(e) = marker {
                let e = self.marker_unread(e);
                tracing::warn!(
                    "reading the ring's history marker failed (retried at the next poll): {}",
                    crate::error_chain(&e)
                );
                return Err(e);
            }
            let now = tokio::time::Instant::now();
            if self.cache.follower_next.is_some_and(|t| now < t) {
                return Ok(());
            }
            // Retried soon after a failure, rarely after a success (an unsigned ring).
            self.cache.follower_next = Some(now + FOLLOWER_STORE_RETRY);
            let read = self.ring.snapshot_text(None).await;
            count(&self.state, "get_index", outcome(&read));
            let (text, _) =
                read.map_err(|e| self.store_err(e))?
                    .ok_or_else(|| SyncError::NoRing {
                        ring: self.ring.name().to_owned(),
                        store: self.ring.store().describe(),
                    })?;
            self.cache.follower_next = Some(now + FOLLOWER_STORE_READ);
            let (index, verified) =
                parse_ring_state(&text, self.expected_ring.as_deref(), &self.pin.trust())
                    .map_err(|e| self.store_err(e))?;
            self.unsigned_allowed(&verified).await?;
            self.accepted(&verified).await;
            from_store = Some(index);
        }
        // An unsigned ring (no anchor): its own index, never a Secret's copy of it.
        let copies = match self.pin.anchor {
            Some(_) => self.load_states().await?,
            None => Vec::new(),
        };
        let mut refused = None;
        let mut taken = false;
        for (found, _) in copies {
            if self
                .cache
                .followed
                .as_ref()
                .is_some_and(|f| f.text == found.text)
            {
                self.take_followed(found).await;
                taken = true;
                break;
            }
            // A copy this follower did not take before: the history marker must vouch for it,
            // as for the leader's reads of the store (attack review, round 9: a follower took a
            // fork signed with a ring key from a planted copy and kept sealing to it). Refused,
            // the next older copy is tried (round 12, F1: a rival copy at a higher version
            // froze followers on the old active key); unchecked (the store does not answer),
            // the view held stays.
            match self.copy_vouched(&found).await {
                Ok(()) => {
                    self.take_followed(found).await;
                    taken = true;
                    break;
                }
                Err(
                    e @ SyncError::Store {
                        source: kseal_keystore::Error::Untrusted { .. },
                        ..
                    },
                ) => refused = Some(e),
                Err(e) => return Err(e),
            }
        }
        if !taken && let Some(e) = refused {
            return Err(e);
        }
        match (taken, from_store) {
            (true, _) => {}
            (false, Some(index)) => {
                let view = RingView::new(&index, &self.cache.ever, self.cache.last_active.clone());
                self.publish_view(view, &index);
            }
            (false, None) => self.drop_stale_view().await,
        }
        self.note_follower_expiry();
        Ok(())
    }

    /// Whether the history marker as last read records neither a version nor a digest
    /// (builds from before versions were recorded): it bounds no version, so an index it
    /// cannot vouch for, withheld, may be a fork far ahead, and raises no floor; else the real
    /// index the seeder then adopts would be refused as a rollback (attack review, round 16,
    /// N2).
    fn marker_bounds_no_version(&self) -> bool {
        self.cache
            .vouching
            .as_ref()
            .is_some_and(kseal_keystore::Marker::bounds_no_version)
    }

    /// Takes a verified ring-state copy as this follower's view.
    async fn take_followed(&mut self, found: FoundState) {
        // A follower's floor too only rises: a ring-state Secret rewritten with an older
        // signed index of the ring is then refused (load_state verifies with it), and the
        // follower keeps the view it has. Its newest dedicated root too: a fork from an older
        // root planted later is refused.
        if !self.marker_bounds_no_version() {
            self.pin.floor = self.pin.floor.max(found.version);
            self.pin.see_root(found.root.clone());
            self.note_superseded(Some(&found.name)).await;
        }
        self.publish_found(&found);
        self.cache.followed = Some(found);
    }

    /// A follower keeps the view it holds past its expiry too (an expired copy is refused by
    /// `load_state`): the gauge says so; the leader's Event names it.
    fn note_follower_expiry(&self) {
        let now = jiff::Timestamp::now();
        let expired = self
            .state
            .ring_view
            .current()
            .and_then(|v| v.expires)
            .is_some_and(|e| now >= e);
        self.state
            .metrics
            .key_source_index_expired
            .set(self.ring.name(), i64::from(expired));
    }

    /// Whether the history marker vouches for the ring-state copy `found` (see
    /// [`Mirror::check_vouched`]); a refusal is logged once per copy (a follower writes no
    /// Events: the leader repairs the copy and names it, `RingStateRepaired`).
    async fn copy_vouched(&mut self, found: &FoundState) -> Result<(), SyncError> {
        let index = kseal_keystore::Index::parse_any_ring(&found.text, &found.name)
            .map_err(|e| self.store_err(e))?;
        let refused = self.check_vouched(&index, None).await.and_then(|_| {
            // Under a marker an older kseal wrote (no digest), a copy at the version of the
            // view held but with other content is a fork (attack review, round 11, L1).
            match &self.cache.followed {
                Some(held) if held.version == found.version && held.text != found.text => Err(self
                    .store_err(kseal_keystore::Error::Untrusted {
                        what: found.name.clone(),
                        reason: format!(
                            "it holds version {} like the copy followed, with other content: \
                             one of them is a fork",
                            found.version
                        ),
                    })),
                _ => Ok(()),
            }
        });
        if let Err(e) = &refused {
            let digest = index.digest();
            if self.cache.copy_refused.as_ref() != Some(&digest) {
                tracing::warn!(
                    "the ring-state Secret {} is refused, the view held stays: {}",
                    found.name,
                    crate::error_chain(e)
                );
                self.cache.copy_refused = Some(digest);
            }
        }
        refused
    }

    /// Where ring-level Events go: the ring-state Secret this replica wrote, else the one it
    /// found (`found`), else (none exists: removed, or never written) the leader-election
    /// Lease, else this replica's Pod, so that a refusal is never silent.
    pub(super) fn state_reference(&self, found: Option<&str>) -> Option<ObjectReference> {
        self.ring_state_reference(found).or_else(|| {
            Some(match &self.lease {
                Some(lease) => ObjectReference {
                    api_version: Some("coordination.k8s.io/v1".into()),
                    kind: Some("Lease".into()),
                    name: Some(lease.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectReference::default()
                },
                None => ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: self.reporter.instance.clone(),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectReference::default()
                },
            })
        })
    }

    /// The ring-state Secret this replica wrote, else the one it found (`found`).
    pub(super) fn ring_state_reference(&self, found: Option<&str>) -> Option<ObjectReference> {
        match (
            &self.cache.state_ref,
            self.cache.state_name.as_deref().or(found),
        ) {
            (Some(reference), _) => Some(reference.clone()),
            (None, Some(name)) => Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                ..ObjectReference::default()
            }),
            (None, None) => None,
        }
    }

    /// A Warning Event on the ring-state Secret when the store's index was refused (a
    /// rollback, an expired index, a forged field, a history rooted elsewhere): the
    /// controller keeps its last verified ring, and says so where `kubectl get events` shows
    /// it, not only in its log. Counted at every refusal (`kind`: `rollback`, `expired`,
    /// `untrusted`, `malformed`), but one Event per refusal, not one per retry: the same
    /// refusal is named again only after a sync succeeded in between.
    pub(super) async fn refused_index_event(
        &mut self,
        kind: &'static str,
        message: &str,
        found: Option<&str>,
    ) {
        self.state
            .metrics
            .key_source_index_refused
            .get_or_create(&KeyErrorLabels {
                reason: kind.to_owned(),
            })
            .inc();
        if self.cache.refused_warned.as_deref() == Some(message) {
            return;
        }
        let Some(reference) = self.state_reference(found) else {
            return;
        };
        let note = format!(
            "the index of ring {} was refused; the last verified ring is kept: {message}",
            self.ring.name()
        );
        self.warn_on(&reference, "RingIndexRefused", note).await;
        self.cache.refused_warned = Some(message.to_owned());
    }

    /// The index this controller holds (and keeps using) past its signed expiry: the gauge,
    /// and one `RingIndexExpired` Warning per index version (`/readyz` detail says so too).
    pub(super) async fn note_expiry(&mut self) {
        let Some(index) = &self.cache.index else {
            return;
        };
        let now = jiff::Timestamp::now();
        let Some(expires) = index.expires.filter(|e| now >= *e) else {
            self.state
                .metrics
                .key_source_index_expired
                .set(self.ring.name(), 0);
            return;
        };
        self.state
            .metrics
            .key_source_index_expired
            .set(self.ring.name(), 1);
        let version = index.version;
        if self.cache.expired_warned == Some(version) {
            return;
        }
        let Some(reference) = self.state_reference(None) else {
            return;
        };
        let note = format!(
            "version {version} of ring {}'s index expired at {}: this controller keeps using \
             it (its keys open, its active key seals) but accepts no index written before \
             then; the seeder refreshes it with `kseal keys refresh`",
            self.ring.name(),
            expires.strftime("%Y-%m-%d %H:%M:%S UTC")
        );
        tracing::warn!("{note}");
        self.warn_on(&reference, "RingIndexExpired", note).await;
        self.cache.expired_warned = Some(version);
    }

    /// Takes what this controller remembered in the ring-state Secret before a restart (the
    /// kids it saw, the last verified active key, the version floor), once, and only under a pinned anchor;
    /// `publish` also publishes its view when there is none yet (the store not read yet).
    pub(super) async fn merge_state(&mut self, publish: bool) -> Result<(), SyncError> {
        if self.cache.state_merged || self.pin.anchor.is_none() {
            return Ok(());
        }
        // Merged only once it succeeded: a failed list (an API server hiccup at start) must
        // not leave the floor at 0 for the life of the process.
        let found = self.load_state().await?;
        // Not merged for good before the history marker answered: a copy refused meanwhile
        // (a pin at a ring key) is taken at a later sync.
        self.cache.state_merged = self.cache.marker_applied;
        // Only a copy the history marker vouches for (attack review, round 10: a restarted
        // leader took a fork signed with a ring key from its ring-state Secret, raised its
        // floor past the real index and sealed to the fork's key).
        let found = match found {
            // Under a marker an older kseal wrote (no digest), a leader reads the store before
            // it takes a copy: the marker cannot vouch for one (attack review, round 11, L1),
            // and nothing would seal from it (round 13, R1).
            Some(_)
                if self.state.is_leader()
                    && self
                        .cache
                        .vouching
                        .as_ref()
                        .is_some_and(kseal_keystore::Marker::records_no_digest) =>
            {
                // Kept unpublished, to compare the store's index with: a fork at the marker's
                // version that differs from it is refused (attack review, round 12, A2).
                self.cache.unvouched_copy = found;
                None
            }
            Some(found) if self.cache.marker_applied => {
                self.copy_vouched(&found).await.is_ok().then_some(found)
            }
            found => found,
        };
        if let Some(found) = found {
            self.cache.found_state = Some(found.name.clone());
            // The version floor survives a restart: the copy was verified again under the
            // pinned anchor, so whoever can write only the index cannot replay an older
            // signed index to a restarted controller.
            if found.version > self.pin.floor {
                self.pin.floor = found.version;
                self.state.metrics.key_source_ring_version.set(
                    self.ring.name(),
                    i64::try_from(found.version).unwrap_or(i64::MAX),
                );
            }
            // So does the newest dedicated root, taken from the copy's verified history.
            self.pin.see_root(found.root.clone());
            self.note_superseded(Some(&found.name)).await;
            self.cache.ever.extend(found.view.ever.iter().cloned());
            if self.cache.last_active.is_none() {
                self.cache.last_active.clone_from(&found.view.last_active);
            }
            if publish && self.state.ring_view.current().is_none() {
                self.publish_found(&found);
            }
        }
        Ok(())
    }

    /// At a leader's start, before the store is read: takes the mirrored keys and the
    /// verified ring-state copy (under a pin, and before the history marker answered only
    /// under a pin at a dedicated root, [`Mirror::load_state`]) and publishes its view.
    /// Returns whether this replica now seals from it, i.e. whether its first read of the
    /// store may wait.
    pub(super) async fn start_from_copy(&mut self) -> bool {
        if !self.cache.seeded && self.seed_from_mirror().await.is_err() {
            return false;
        }
        // The marker first, when the store answers (attack review, round 4: a planted older
        // copy of the ring's own history passed the pin and sealed until the spread ended).
        let _ = self.apply_marker().await;
        if self.merge_state(true).await.is_err() {
            return false;
        }
        // A view taken from a copy found now, not one followed before this replica led (a
        // new leader without a copy reads the store at once).
        self.cache.found_state.is_some() && self.state.ring_view.current().is_some()
    }

    /// Records an index accepted from the store: the version floor, and the anchor when this
    /// is the first signed history this controller accepts.
    pub(super) async fn accepted(&mut self, verified: &Verified) {
        self.state.metrics.key_source_ring_signed.set(
            self.ring.name(),
            i64::from(matches!(verified, Verified::Signed { .. })),
        );
        let expires = match verified {
            Verified::Signed { expires, .. } => expires.map_or(0, |e| e.as_second()),
            Verified::Unsigned => 0,
        };
        self.state
            .metrics
            .key_source_index_expiry
            .set(self.ring.name(), expires);
        if matches!(verified, Verified::Unsigned) {
            tracing::warn!(
                ring = %self.ring.name(),
                "the ring's index is not signed (written by an older kseal): its keys open, but \
                 anyone who can write it chooses the sealing key; the seeder signs it once with \
                 `kseal keys sign`"
            );
        }
        if matches!(verified, Verified::Signed { .. }) {
            self.cache.store_confirmed = true;
        }
        let floor = self.pin.floor;
        // Under a marker that bounds no version, an index it cannot vouch for raises neither
        // the floor nor the newest dedicated root (round 18, ROOT: a fork handing the history
        // to a "root" of the attacker's kept the leader refusing the adopted real index until
        // restarted, and its RingAnchorSuperseded told operators to pin the attacker's key).
        let bounded = !self.marker_bounds_no_version();
        let pinned = match verified {
            Verified::Signed { anchor, .. } if !bounded => self.pin.accept_anchor(anchor),
            _ => self.pin.accept(verified),
        };
        if let Some(anchor) = pinned {
            self.pin_anchor(anchor, "the ring").await;
        }
        if bounded {
            self.note_superseded(None).await;
        }
        if self.pin.floor != floor {
            self.state.metrics.key_source_ring_version.set(
                self.ring.name(),
                i64::try_from(self.pin.floor).unwrap_or(i64::MAX),
            );
        }
    }

    /// Copies the index the leader read (text as read), the kids ever seen and the last
    /// verified active kid into the ring-state Secret; best effort (a failure is logged and
    /// retried at the next poll, never fatal: a follower then keeps its last view).
    pub(super) async fn write_state(&mut self) {
        let Some(text) = self.cache.index_text.clone() else {
            return;
        };
        let mut data = BTreeMap::from([
            (INDEX_ITEM.to_owned(), ByteString(text.into_bytes())),
            (
                KIDS_EVER_ITEM.to_owned(),
                ByteString(format_kids(&self.cache.ever).into_bytes()),
            ),
        ]);
        if let Some(last) = &self.cache.last_active {
            data.insert(
                LAST_ACTIVE_ITEM.to_owned(),
                ByteString(last.as_str().as_bytes().to_vec()),
            );
        }
        // Under a digest-less marker, copies that disagree are named, none rewritten.
        if self.copies_unvouched().await {
            return;
        }
        if self.cache.state_written.as_ref() == Some(&data) {
            // Unchanged: written again only if someone removed or changed it (a rolled-back
            // or forged copy is repaired from the index this leader verified).
            if let Some(name) = &self.cache.state_name {
                match self.api.get_opt(name).await {
                    Ok(Some(current)) if current.data.as_ref() == Some(&data) => {
                        self.check_rivals().await;
                        return;
                    }
                    Ok(Some(_)) | Ok(None) => {}
                    Err(_) => return,
                }
            } else {
                self.cache.state_name = None;
            }
        }
        if self.may_write().is_err() {
            return;
        }
        match self.put_state(&data).await {
            Ok((written, replaced)) => {
                let mut problem = replaced.and_then(|before| self.copy_problem(&before, &data));
                // Ours, gone: say so (whoever can delete Secrets here removed it).
                if let Some(lost) = self
                    .cache
                    .state_name
                    .as_deref()
                    .filter(|lost| *lost != written.name_any())
                {
                    problem = Some(format!(
                        "the ring-state Secret {lost} this leader wrote was deleted; written anew \
                         as {}",
                        written.name_any()
                    ));
                }
                self.cache.state_name = Some(written.name_any());
                let reference = written.object_ref(&());
                self.cache.state_ref = Some(reference.clone());
                self.cache.state_written = Some(data);
                if let Some(problem) = problem {
                    self.state.metrics.key_source_ring_state_repairs.inc();
                    let note = format!(
                        "ring-state Secret of ring {} repaired from the index this leader \
                         verified (version {}): {problem}",
                        self.ring.name(),
                        self.cache.index.as_ref().map_or(0, |i| i.version)
                    );
                    tracing::warn!(secret = %written.name_any(), "{note}");
                    self.warn_on(&reference, "RingStateRepaired", note).await;
                }
                if let Some(note) = self.cache.pin_event_pending.take() {
                    self.anchor_pinned_event(note, &reference).await;
                }
                self.check_rivals().await;
            }
            Err(e) => tracing::warn!(
                "writing the ring-state Secret failed; retrying at the next poll: {}",
                crate::error_chain(&e)
            ),
        }
    }

    /// What was wrong with `before`, the ring-state Secret the leader just replaced with
    /// `data`, if anything: a copy that fails verification under the pin (forged, another
    /// history, no index), or, when this leader had written it, one rolled back to an older
    /// version or changed since it wrote it. `None` for the ordinary update to a newer index.
    fn copy_problem(&self, before: &Secret, data: &BTreeMap<String, ByteString>) -> Option<String> {
        if before.data.as_ref() == Some(data) {
            return None;
        }
        let text = before
            .data
            .as_ref()
            .and_then(|d| d.get(INDEX_ITEM))
            .and_then(|v| std::str::from_utf8(&v.0).ok());
        let Some(text) = text else {
            return Some(format!("it held no readable {INDEX_ITEM}"));
        };
        // Verified under the anchor alone: the floor and the expiry are compared below.
        // And a fork that does not extend the newest dedicated root fails it.
        let mut trust = match &self.pin.anchor {
            Some(anchor) => kseal_keystore::Trust::anchored(anchor.clone()).accept_expired(true),
            None => self.pin.trust().accept_expired(true),
        };
        if let Some((seq, kid)) = &self.pin.seen_root {
            trust = trust.seen_root(*seq, kid.clone());
        }
        let held = self
            .cache
            .index
            .as_ref()
            .map_or(self.pin.floor, |i| i.version);
        let version = match parse_ring_state(text, self.expected_ring.as_deref(), &trust) {
            Err(e) => {
                return Some(format!(
                    "its index failed verification ({})",
                    crate::error_chain(&e)
                ));
            }
            Ok((_, Verified::Signed { version, .. })) => version,
            Ok((_, Verified::Unsigned)) => 0,
        };
        // A copy older than this replica's floor when the sync began (what it had verified
        // before, from the store or from a ring-state copy it followed) was rolled back,
        // whoever wrote it. A copy this leader wrote was also rolled back, or changed, when it
        // differs from what it wrote; an older copy found at start, or the one it wrote last,
        // is the ordinary update.
        let ours = self.cache.state_name.as_deref() == Some(before.name_any().as_str());
        let changed = ours
            && self
                .cache
                .state_written
                .as_ref()
                .is_some_and(|last| before.data.as_ref() != Some(last));
        if version < held && (changed || version < self.cache.sync_floor) {
            return Some(format!(
                "it was rolled back to version {version} of the index"
            ));
        }
        changed.then(|| "its content was changed by someone other than this leader".to_owned())
    }

    /// Warns (once per Secret and content, reason `RingStateForged`; never deletes) about
    /// every ring-state Secret of this ring other than the leader's own that fails
    /// verification, verifies but holds another index than the leader's at the same or a
    /// higher version, or holds an older version (stale or rolled back): a copy someone else
    /// wrote, which followers might otherwise take.
    pub(super) async fn check_rivals(&mut self) {
        let (Some(own), Some(text)) =
            (self.cache.state_name.clone(), self.cache.index_text.clone())
        else {
            return;
        };
        let held = self
            .cache
            .index
            .as_ref()
            .map_or(self.pin.floor, |i| i.version);
        let Ok(listed) = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await
        else {
            return;
        };
        let trust = self.copy_trust();
        for secret in &listed.items {
            if secret.name_any() == own
                || secret
                    .annotations()
                    .get(RING_ANNOTATION)
                    .map(String::as_str)
                    != Some(self.ring.name())
            {
                continue;
            }
            let key = format!(
                "{}@{}",
                secret.uid().unwrap_or_default(),
                secret.resource_version().unwrap_or_default()
            );
            if self.cache.rivals_warned.contains(&key) {
                continue;
            }
            let copy = secret
                .data
                .as_ref()
                .and_then(|d| d.get(INDEX_ITEM))
                .and_then(|v| std::str::from_utf8(&v.0).ok());
            let problem = match copy.map(|t| {
                (
                    t,
                    parse_ring_state(t, self.expected_ring.as_deref(), &trust),
                )
            }) {
                None => Some(format!("it holds no readable {INDEX_ITEM}")),
                Some((_, Err(e))) => Some(format!(
                    "its index fails verification ({})",
                    crate::error_chain(&e)
                )),
                Some((copy, Ok((index, _)))) if index.version >= held && copy != text => {
                    Some(format!(
                        "its index verifies but differs from the one this leader holds, at \
                         version {} (this leader holds version {held})",
                        index.version
                    ))
                }
                Some((_, Ok((index, _)))) if index.version < held => Some(format!(
                    "it holds version {} of the index, older than the one this leader holds \
                     (version {held}): stale or rolled back",
                    index.version
                )),
                Some(_) => None,
            };
            self.cache.rivals_warned.insert(key);
            let Some(problem) = problem else {
                continue;
            };
            let note = format!(
                "ring-state Secret {} of ring {} was not written by this leader (its own is \
                 {own}); left as it is: {problem}",
                secret.name_any(),
                self.ring.name()
            );
            tracing::warn!(secret = %secret.name_any(), "{note}");
            self.state.metrics.key_source_ring_state_rivals.inc();
            self.warn_on(&secret.object_ref(&()), "RingStateForged", note)
                .await;
        }
    }

    /// A new leader that could not read the store: when no ring-state copy verifies under its
    /// floor (the copy was rolled back, forged or removed while it followed), writes back the
    /// verified copy it followed, so that followers and restarts find it.
    pub(super) async fn restore_followed(&mut self) {
        if self.cache.index_text.is_some() {
            return;
        }
        let Some(followed) = self.cache.followed.clone() else {
            return;
        };
        match self.load_state().await {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => return,
        }
        tracing::warn!(
            version = followed.version,
            "no ring-state Secret holds the verified index this replica followed (version {}): \
             writing it back",
            followed.version
        );
        self.cache.index_text = Some(followed.text.clone());
        self.cache.ever.extend(followed.view.ever.iter().cloned());
        if self.cache.last_active.is_none() {
            self.cache
                .last_active
                .clone_from(&followed.view.last_active);
        }
        self.write_state().await;
    }

    /// Writes `data` into this ring's ring-state Secret: the one this replica wrote, else the
    /// one replicas read (the newest verified), else a new one: never one that fails
    /// verification, which anyone who can write Secrets here may have made (it is named by
    /// [`Mirror::check_rivals`] instead). Returns it, and what it held before when it was
    /// replaced.
    pub(super) async fn put_state(
        &self,
        data: &BTreeMap<String, ByteString>,
    ) -> Result<(Secret, Option<Secret>), kube::Error> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await?;
        let candidates: Vec<&Secret> = listed
            .items
            .iter()
            .filter(|s| {
                s.annotations().get(RING_ANNOTATION).map(String::as_str) == Some(self.ring.name())
                    && s.type_.as_deref().is_none_or(|t| t == "Opaque")
                    && !s.labels().contains_key(SEALING_KEY_LABEL)
            })
            .collect();
        // Ours if we wrote one, else the one replicas would read, else a new one.
        let existing = match &self.cache.state_name {
            Some(name) => candidates.iter().find(|s| &s.name_any() == name).copied(),
            None => None,
        };
        let existing = match existing {
            Some(s) => Some(s),
            None => {
                let best = self.load_state().await.ok().flatten().map(|f| f.name);
                candidates
                    .iter()
                    .find(|s| Some(s.name_any()) == best)
                    .copied()
            }
        };
        match existing {
            Some(secret) => {
                let mut desired = secret.clone();
                desired.data = Some(data.clone());
                desired.string_data = None;
                self.api
                    .replace(&secret.name_any(), &PostParams::default(), &desired)
                    .await
                    .map(|written| (written, Some(secret.clone())))
            }
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        generate_name: Some(RING_STATE_PREFIX.to_owned()),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(BTreeMap::from([
                            (RING_STATE_LABEL.to_owned(), "true".to_owned()),
                            (
                                "app.kubernetes.io/managed-by".to_owned(),
                                "kseal-controller".to_owned(),
                            ),
                        ])),
                        annotations: Some(BTreeMap::from([
                            (RING_ANNOTATION.to_owned(), self.ring.name().to_owned()),
                            (SOURCE_ANNOTATION.to_owned(), self.source.clone()),
                        ])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("Opaque".to_owned()),
                    data: Some(data.clone()),
                    ..Secret::default()
                };
                self.api
                    .create(&PostParams::default(), &secret)
                    .await
                    .map(|written| (written, None))
            }
        }
    }

    /// Takes the keys this controller mirrored earlier (same ring) into the cache, so that a
    /// restart or a new leader does not read every key secret again. A mirror is trusted only
    /// as far as it checks out: the certificate must belong to the private key and the key's
    /// hash must be the kid it is filed under; anything else is left to be read from the ring.
    pub(super) async fn seed_from_mirror(&mut self) -> Result<(), SyncError> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        for secret in &listed.items {
            let annotations = secret.annotations();
            if annotations.get(RING_ANNOTATION).map(String::as_str) != Some(self.ring.name()) {
                continue;
            }
            let Some(kid) = annotations
                .get(KID_ANNOTATION)
                .and_then(|k| Kid::parse(k).ok())
            else {
                continue;
            };
            if let Some(pair) = mirrored_pair(secret, &kid) {
                self.cache.keys.insert(kid, pair);
            }
        }
        self.cache.seeded = true;
        Ok(())
    }
}

/// Changes of ring-state Secrets in `namespace` (metadata only): a follower reads the view
/// the moment the leader writes it, not at its next poll. Errors are retried by the watcher.
pub(super) fn ring_state_changes(
    client: Client,
    namespace: &str,
) -> futures::stream::BoxStream<'static, ()> {
    use kube::runtime::WatchStreamExt as _;
    let api: Api<kube::api::PartialObjectMeta<Secret>> = Api::namespaced(client, namespace);
    kube::runtime::watcher::watcher(
        api,
        kube::runtime::watcher::Config::default().labels(&format!("{RING_STATE_LABEL}=true")),
    )
    .default_backoff()
    .filter_map(|event| {
        futures::future::ready(match event {
            Ok(
                kube::runtime::watcher::Event::Apply(_) | kube::runtime::watcher::Event::InitDone,
            ) => Some(()),
            _ => None,
        })
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    //! The ring-state logic on the in-process test API server and a directory ring: no
    //! emulator, no controller. Every test runs under a deadline, so a regression fails
    //! instead of hanging.

    use std::future::Future;

    use kseal_keys::{CertificateOptions, KeySize};
    use kseal_keystore::{AwsOptions, Location, Trust};

    use super::*;
    use crate::keys::source::tests::server;

    const DEADLINE: Duration = Duration::from_secs(60);

    pub(in crate::keys::source) async fn within<T>(
        what: &str,
        future: impl Future<Output = T>,
    ) -> T {
        tokio::time::timeout(DEADLINE, future)
            .await
            .unwrap_or_else(|_| panic!("{what}: still running after {DEADLINE:?}"))
    }

    /// Test-only 2048-bit keys; do not copy (kseal generates 4096-bit keys).
    pub(in crate::keys::source) fn pair() -> KeyPair {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap()
    }

    pub(in crate::keys::source) async fn ring(
        dir: &std::path::Path,
        anchor: Option<&KeyPair>,
    ) -> Ring {
        let location = Location::Directory {
            path: dir.to_owned(),
            insecure_perms: false,
        };
        let ring = Ring::open(&location, &AwsOptions::default()).await.unwrap();
        match anchor {
            Some(a) => ring.with_trust(Trust::anchored(Kid::of(a.public_key()))),
            None => ring,
        }
    }

    pub(in crate::keys::source) fn mirror(ring: Ring, client: &Client) -> Mirror {
        Mirror::new(
            ring,
            "dir://test".into(),
            client.clone(),
            "kseal",
            "test",
            Duration::from_secs(3600),
            State::new(),
        )
    }

    #[tokio::test]
    async fn a_restarted_leader_takes_its_floor_from_the_verified_ring_state() {
        within("restart", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            writer.push(&b).await.unwrap();
            let (old, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            writer
                .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
                .await
                .unwrap();
            let current = writer.require_snapshot().await.unwrap().index.version;

            let mut first = mirror(ring(dir.path(), Some(&a)).await, &client);
            first.sync().await.unwrap();
            let found = first
                .load_state()
                .await
                .unwrap()
                .expect("a ring-state Secret");
            assert_eq!(found.version, current);
            assert_eq!(found.view.active, Some(Kid::of(b.public_key())));

            // Down; the index writer puts back the older signed index; up again.
            let version = writer.index_version().await.unwrap();
            writer
                .store()
                .compare_and_swap(&writer.index_name(), &old, version.as_ref(), &[])
                .await
                .unwrap();
            let mut restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            let err = restarted.sync().await.unwrap_err();
            assert!(crate::error_chain(&err).contains("rolled-back"), "{err}");
            assert_eq!(restarted.pin.floor, current);
            let view = restarted
                .state
                .ring_view
                .current()
                .expect("the remembered view");
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
        })
        .await;
    }

    /// Issue 35, attack 4 (attack review): a running follower's floor only rises. The ring-state
    /// Secret rewritten with an older signed index of the ring (whoever can update Secrets in
    /// the controller namespace) does not move its view back.
    #[tokio::test]
    async fn a_follower_keeps_its_view_when_the_ring_state_is_rolled_back() {
        within("follower rollback", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            writer.push(&b).await.unwrap();
            let (old, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            writer
                .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
                .await
                .unwrap();
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();
            let active = Some(Kid::of(b.public_key()));
            assert_eq!(follower.state.ring_view.current().unwrap().active, active);

            let found = leader.load_state().await.unwrap().unwrap();
            let mut secret = leader.api.get(&found.name).await.unwrap();
            secret
                .data
                .get_or_insert_with(BTreeMap::new)
                .insert(INDEX_ITEM.into(), ByteString(old.as_bytes().to_vec()));
            leader
                .api
                .replace(&found.name, &PostParams::default(), &secret)
                .await
                .unwrap();
            follower.follow().await.unwrap();
            assert_eq!(
                follower.state.ring_view.current().unwrap().active,
                active,
                "the older index in the ring-state Secret is refused"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn ring_state_of_another_ring_or_history_is_ignored() {
        within("forged ring state", async {
            let (dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (a, evil) = (pair(), pair());
            ring(dir.path(), None).await.push(&a).await.unwrap();
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            let genuine = leader.load_state().await.unwrap().unwrap();

            // A history rooted at the attacker's key, in a Secret that looks like ring state,
            // with a higher version and a forged last-active.
            let foreign = ring(other_dir.path(), None).await;
            foreign.push(&evil).await.unwrap();
            foreign.push(&pair()).await.unwrap();
            let (text, _) = foreign.snapshot_text(None).await.unwrap().unwrap();
            let forged = Secret {
                metadata: ObjectMeta {
                    name: Some(format!("{RING_STATE_PREFIX}forged")),
                    labels: Some(BTreeMap::from([(RING_STATE_LABEL.into(), "true".into())])),
                    annotations: Some(BTreeMap::from([(
                        RING_ANNOTATION.into(),
                        leader.ring.name().to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([
                    (INDEX_ITEM.into(), ByteString(text.into_bytes())),
                    (
                        LAST_ACTIVE_ITEM.into(),
                        ByteString(Kid::of(evil.public_key()).as_str().as_bytes().to_vec()),
                    ),
                ])),
                ..Secret::default()
            };
            leader
                .api
                .create(&PostParams::default(), &forged)
                .await
                .unwrap();
            let found = leader.load_state().await.unwrap().unwrap();
            assert_eq!(found.name, genuine.name, "the forged Secret is ignored");
            assert_eq!(found.view.last_active, genuine.view.last_active);
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();
            let view = follower.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(a.public_key())));
        })
        .await;
    }

    /// Events with `reason` about the Secret `name` in the controller namespace.
    pub(in crate::keys::source) async fn events_about(
        client: &Client,
        name: &str,
        reason: &str,
    ) -> Vec<k8s_openapi::api::events::v1::Event> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "kseal")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .collect()
    }

    /// Writes the next version of the ring's index after `edit`, signed by its root `root`
    /// (what an index writer holding the ring's keys, or the seeder, would write).
    async fn write_signed(writer: &Ring, root: &KeyPair, edit: impl FnOnce(&mut Index)) {
        let snapshot = writer.require_snapshot().await.unwrap();
        let mut index = snapshot.index.clone();
        edit(&mut index);
        index.version = snapshot.index.version + 1;
        kseal_keystore::trust::sign_index(&mut index, root).unwrap();
        writer
            .store()
            .compare_and_swap(
                &writer.index_name(),
                &index.to_json(),
                Some(&snapshot.version),
                &[],
            )
            .await
            .unwrap();
    }

    /// Moves the history marker to the current index, as the seeder's writers do after an
    /// index write (for tests whose [`write_signed`] stands for the seeder).
    async fn vouch(writer: &Ring) {
        let index = writer.require_snapshot().await.unwrap().index;
        let (text, version) = writer
            .store()
            .read(&writer.root_name(), None)
            .await
            .unwrap()
            .unwrap();
        let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
        marker["version"] = serde_json::json!(index.version);
        marker["digest"] = serde_json::json!(index.digest());
        writer
            .store()
            .compare_and_swap(
                &writer.root_name(),
                &marker.to_string(),
                Some(&version),
                &[],
            )
            .await
            .unwrap();
    }

    /// The proven mirror of `kid` in the controller namespace, if any.
    pub(in crate::keys::source) async fn mirror_secret(
        client: &Client,
        kid: &Kid,
    ) -> Option<Secret> {
        Api::<Secret>::namespaced(client.clone(), "kseal")
            .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}=true")))
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|s| mirrored_pair(s, kid).is_some())
    }

    /// Issue 35: under a signed index, a key that vanished from it without being retired (an
    /// older index replayed, the ring-state Secret rolled back to match) keeps its mirror past
    /// the retire grace, with one Warning per index version; only a signed retirement removes
    /// it.
    #[tokio::test]
    async fn a_key_missing_from_a_signed_index_keeps_its_mirror_until_the_index_retires_it() {
        within("kept unretired", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            writer.push(&b).await.unwrap();
            let kid_b = Kid::of(b.public_key());
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.retire_grace = Duration::ZERO;
            assert_eq!(leader.sync().await.unwrap().created.len(), 2);

            write_signed(&writer, &a, |index| index.keys.retain(|e| e.kid != kid_b)).await;
            vouch(&writer).await;
            for _ in 0..3 {
                let report = leader.sync().await.unwrap();
                assert!(report.retired.is_empty(), "{report:?}");
            }
            let kept = mirror_secret(&client, &kid_b)
                .await
                .expect("the mirror of a key the ring did not retire is kept");
            assert!(!kept.annotations().contains_key(MISSING_SINCE_ANNOTATION));
            let warned = events_about(&client, &kept.name_any(), "KeyMissingFromRing").await;
            assert_eq!(warned.len(), 1, "{warned:?}");
            assert!(warned[0].series.is_none(), "one Warning, not one per poll");
            let note = warned[0].note.clone().unwrap_or_default();
            assert_eq!(warned[0].type_.as_deref(), Some("Warning"));
            assert!(
                note.contains(kid_b.short()) && note.contains("does not retire"),
                "{note}"
            );
            assert_eq!(
                leader.state.metrics.key_source_mirrors_kept_unretired.get(),
                1
            );

            // The seeder retires it in a signed index: marked, then removed after the grace,
            // which runs from the signed retirement (a missing-since dated back by a Secret
            // writer does not shorten it).
            write_signed(&writer, &a, |index| {
                index.retired.push(kseal_keystore::trust::RetiredEntry {
                    kid: kid_b.clone(),
                    retired: jiff::Timestamp::now(),
                });
            })
            .await;
            vouch(&writer).await;
            leader.retire_grace = Duration::from_secs(3600);
            assert!(
                leader.sync().await.unwrap().retired.is_empty(),
                "not at once"
            );
            let marked = mirror_secret(&client, &kid_b).await.unwrap();
            assert!(marked.annotations().contains_key(MISSING_SINCE_ANNOTATION));
            let backdated = serde_json::json!({"metadata": {"annotations": {
                MISSING_SINCE_ANNOTATION: "2020-01-01T00:00:00Z",
            }}});
            leader
                .api
                .patch(
                    &marked.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&backdated),
                )
                .await
                .unwrap();
            assert!(
                leader.sync().await.unwrap().retired.is_empty(),
                "grace kept"
            );
            leader.retire_grace = Duration::ZERO;
            assert_eq!(leader.sync().await.unwrap().retired.len(), 1);
            assert!(mirror_secret(&client, &kid_b).await.is_none());
            assert_eq!(
                leader.state.metrics.key_source_mirrors_kept_unretired.get(),
                0
            );
        })
        .await;
    }

    /// Issue 35: the leader rewrites a ring-state Secret rolled back to an older verified
    /// index, or forged, from the index it verified, and names what was wrong.
    #[tokio::test]
    async fn a_leader_repairs_a_rolled_back_or_forged_ring_state() {
        within("repair", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            let (old, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            writer.push(&b).await.unwrap();
            writer
                .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
                .await
                .unwrap();
            let (current, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            let name = leader.load_state().await.unwrap().unwrap().name;
            let index_of = |s: &Secret| {
                String::from_utf8(s.data.as_ref().unwrap()[INDEX_ITEM].0.clone()).unwrap()
            };

            for (tampered, problem) in [
                (old.clone(), "rolled back to version"),
                ("{\"not\": \"an index\"}".to_owned(), "failed verification"),
            ] {
                let mut secret = leader.api.get(&name).await.unwrap();
                secret
                    .data
                    .get_or_insert_with(BTreeMap::new)
                    .insert(INDEX_ITEM.into(), ByteString(tampered.into_bytes()));
                leader
                    .api
                    .replace(&name, &PostParams::default(), &secret)
                    .await
                    .unwrap();
                leader.sync().await.unwrap();
                let repaired = leader.api.get(&name).await.unwrap();
                assert_eq!(index_of(&repaired), current, "repaired in place");
                let events = events_about(&client, &name, "RingStateRepaired").await;
                assert!(
                    events.iter().any(|e| e.type_.as_deref() == Some("Warning")
                        && e.note.as_deref().unwrap_or_default().contains(problem)),
                    "{problem}: {events:?}"
                );
            }
            assert_eq!(leader.state.metrics.key_source_ring_state_repairs.get(), 2);
            // Unchanged since: nothing more to repair.
            leader.sync().await.unwrap();
            assert_eq!(leader.state.metrics.key_source_ring_state_repairs.get(), 2);
        })
        .await;
    }

    /// Issue 35: the index held past its signed expiry is named by one Warning per version
    /// (and a gauge), not one per poll.
    #[tokio::test]
    async fn an_expired_index_held_is_named_once_per_version() {
        within("expired", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let a = pair();
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(6);
            write_signed(&writer, &a, |index| index.expires = Some(expires)).await;
            vouch(&writer).await;
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            assert_eq!(leader.state.metrics.key_source_index_expired.get(), 0);
            let name = leader.load_state().await.unwrap().unwrap().name;
            assert!(
                events_about(&client, &name, "RingIndexExpired")
                    .await
                    .is_empty()
            );

            let wait = expires.duration_since(jiff::Timestamp::now());
            tokio::time::sleep(wait.unsigned_abs() + Duration::from_millis(200)).await;
            for _ in 0..3 {
                leader.sync().await.unwrap();
            }
            assert_eq!(leader.state.metrics.key_source_index_expired.get(), 1);
            let events = events_about(&client, &name, "RingIndexExpired").await;
            assert_eq!(events.len(), 1, "{events:?}");
            assert!(events[0].series.is_none(), "one Warning, not one per poll");
            assert_eq!(events[0].type_.as_deref(), Some("Warning"));
            let note = events[0].note.clone().unwrap_or_default();
            assert!(
                note.contains("expired at") && note.contains("kseal keys refresh"),
                "{note}"
            );
        })
        .await;
    }

    /// An offline dedicated root key file (mode 0600) in `dir`.
    async fn file_root(dir: &std::path::Path) -> kseal_keystore::RootSigner {
        let key = kseal_keys::PrivateKey::generate(KeySize::Rsa2048).unwrap();
        let path = dir.join("root.pem");
        std::fs::write(&path, key.to_pkcs8_pem().as_bytes()).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        kseal_keystore::RootSigner::open(
            &kseal_keystore::RootKey::File(path),
            &AwsOptions::default(),
        )
        .await
        .unwrap()
    }

    /// A ring moved to a dedicated root (ring keys `a`, `b`; `b` active), and the index an
    /// attacker holding every ring key builds from the history before the move: signed by the
    /// old anchor `a`, a higher version, their own key `evil` (stored in the ring) active and
    /// `b` retired. Returns the dedicated root's kid and the fork's text.
    pub(in crate::keys::source) async fn moved_ring_and_fork(
        dir: &std::path::Path,
        root_dir: &std::path::Path,
        a: &KeyPair,
        b: &KeyPair,
        evil: &KeyPair,
    ) -> (Kid, String) {
        let writer = ring(dir, None).await;
        writer.push(a).await.unwrap();
        writer.push(b).await.unwrap();
        let before = writer.require_snapshot().await.unwrap().index;
        let root = file_root(root_dir).await;
        let seeder = writer.clone().with_root(root.clone());
        assert!(seeder.re_root(&root).await.unwrap());
        seeder
            .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
            .await
            .unwrap();
        let current = writer.require_snapshot().await.unwrap().index;
        let (kid_evil, kid_b) = (Kid::of(evil.public_key()), Kid::of(b.public_key()));
        writer
            .store()
            .put(
                &writer.key_name(&kid_evil),
                &KeyEntry::from_pair(evil).unwrap().to_json(),
                &[],
            )
            .await
            .unwrap();
        let mut fork = before;
        fork.keys.retain(|e| e.kid != kid_b);
        fork.keys
            .push(IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap());
        fork.retired.push(kseal_keystore::trust::RetiredEntry {
            kid: kid_b,
            retired: jiff::Timestamp::now(),
        });
        fork.active = Some(kid_evil);
        fork.version = current.version + 10;
        fork.updated = jiff::Timestamp::now();
        fork.expires = Some(jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24));
        kseal_keystore::trust::sign_index(&mut fork, a).unwrap();
        (root.kid().clone(), fork.to_json())
    }

    /// Issue 35, attacks 1 and 2 (security review): a controller pinned at the ring's old
    /// ring-key anchor that read the history rooted at the dedicated root refuses a fork
    /// signed by a ring key from before the move, from the store (leader) and from a planted
    /// ring-state Secret (follower, also after a restart), and says the pin should move.
    #[tokio::test]
    async fn a_ring_key_fork_is_refused_once_the_dedicated_root_was_seen() {
        within("dedicated fork", async {
            let (dir, root_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let (root, fork) =
                moved_ring_and_fork(dir.path(), root_dir.path(), &a, &b, &evil).await;
            let (kid_b, kid_evil) = (Kid::of(b.public_key()), Kid::of(evil.public_key()));
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.retire_grace = Duration::ZERO;
            leader.sync().await.unwrap();
            assert_eq!(leader.pin.seen_root, Some((2, root.clone())));
            let view = leader.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(kid_b.clone()));
            // The pin names a ring key: one Warning says where to move it, and a gauge.
            let name = leader.load_state().await.unwrap().unwrap().name;
            leader.sync().await.unwrap();
            let superseded = events_about(&client, &name, "RingAnchorSuperseded").await;
            assert_eq!(superseded.len(), 1, "{superseded:?}");
            let note = superseded[0].note.clone().unwrap_or_default();
            assert!(
                note.contains(Kid::of(a.public_key()).as_str())
                    && note.contains(root.as_str())
                    && note.contains("move --ring-anchor"),
                "{note}"
            );
            assert_eq!(
                leader.state.metrics.key_source_ring_anchor_superseded.get(),
                1
            );
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();
            assert_eq!(follower.pin.seen_root, Some((2, root.clone())));

            // The index writer replaces the index with the fork: refused.
            let writer = ring(dir.path(), None).await;
            let version = writer.index_version().await.unwrap();
            writer
                .store()
                .compare_and_swap(&writer.index_name(), &fork, version.as_ref(), &[])
                .await
                .unwrap();
            let err = leader.sync().await.unwrap_err();
            let chain = crate::error_chain(&err);
            assert_eq!(err.reason(), "untrusted", "{chain}");
            assert!(chain.contains("a fork from an older root"), "{chain}");
            let view = leader.state.ring_view.current().unwrap();
            assert_eq!(
                view.active,
                Some(kid_b.clone()),
                "keeps the real active key"
            );
            assert!(
                mirror_secret(&client, &kid_b).await.is_some(),
                "no mirror deleted"
            );
            assert!(mirror_secret(&client, &kid_evil).await.is_none());
            // A restarted leader refuses it too (the seen root comes back from the copy).
            let mut restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            assert_eq!(restarted.sync().await.unwrap_err().reason(), "untrusted");
            assert_eq!(restarted.pin.seen_root, Some((2, root.clone())));
            assert_eq!(
                restarted.state.ring_view.current().unwrap().active,
                Some(kid_b.clone())
            );

            // A Secret writer plants the fork as ring state: the follower, and a follower
            // started afresh, ignore it.
            let planted = Secret {
                metadata: ObjectMeta {
                    name: Some(format!("{RING_STATE_PREFIX}evil")),
                    labels: Some(BTreeMap::from([(RING_STATE_LABEL.into(), "true".into())])),
                    annotations: Some(BTreeMap::from([(
                        RING_ANNOTATION.into(),
                        leader.ring.name().to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(
                    INDEX_ITEM.into(),
                    ByteString(fork.clone().into_bytes()),
                )])),
                ..Secret::default()
            };
            leader
                .api
                .create(&PostParams::default(), &planted)
                .await
                .unwrap();
            follower.follow().await.unwrap();
            assert_eq!(
                follower.state.ring_view.current().unwrap().active,
                Some(kid_b.clone())
            );
            let mut fresh = mirror(ring(dir.path(), Some(&a)).await, &client);
            fresh.follow().await.unwrap();
            assert_eq!(
                fresh.state.ring_view.current().unwrap().active,
                Some(kid_b.clone()),
                "the fork's higher version does not win over the dedicated root's history"
            );
            assert_eq!(fresh.pin.seen_root, Some((2, root)));
        })
        .await;
    }

    /// Makes `file` of a directory ring unreadable (a directory in its place, as a store that
    /// does not answer), returning what it held.
    pub(in crate::keys::source) fn break_file(file: &std::path::Path) -> String {
        let text = std::fs::read_to_string(file).unwrap();
        std::fs::remove_file(file).unwrap();
        std::fs::create_dir(file).unwrap();
        text
    }

    pub(in crate::keys::source) fn mend_file(file: &std::path::Path, text: &str) {
        std::fs::remove_dir(file).unwrap();
        std::fs::write(file, text).unwrap();
    }

    /// Attack review, round 4: a follower that took a copy (pinned at the dedicated root,
    /// during an outage) and then learns of a newer version (the marker) drops the view it
    /// held, with a Warning, instead of sealing from it.
    #[tokio::test]
    async fn a_follower_drops_a_view_older_than_what_it_has_seen() {
        within("stale view", async {
            let (dir, root_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let (root, _) = moved_ring_and_fork(dir.path(), root_dir.path(), &a, &b, &evil).await;
            let at_root = || async {
                ring(dir.path(), None)
                    .await
                    .with_trust(Trust::anchored(root.clone()))
            };
            let mut leader = mirror(at_root().await, &client);
            leader.sync().await.unwrap();
            let name = leader.load_state().await.unwrap().unwrap().name;
            let mut follower = mirror(at_root().await, &client);
            follower.follow().await.unwrap();
            let held = follower.state.ring_view.current().unwrap().version;
            // A newer version is seen (as the marker would say); no current copy is found.
            follower.pin.floor = held + 1;
            let api: Api<Secret> = Api::namespaced(client.clone(), "kseal");
            api.delete(&name, &Default::default()).await.unwrap();
            follower.follow().await.unwrap();
            assert!(
                follower.state.ring_view.current().is_none(),
                "nothing seals from a view older than a version seen since"
            );
        })
        .await;
    }

    /// Issue 38: a leader restarted at once with the rest of the fleet reads the store a
    /// random part of the start spread later only when it seals from its verified copy at
    /// once: pinned at the dedicated root. Pinned at a ring key (no copy before the marker)
    /// or with no copy, it reads at once.
    #[tokio::test]
    async fn only_a_leader_sealing_from_its_copy_may_wait_to_read_the_store() {
        within("start from copy", async {
            let (dir, root_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let (root, _) = moved_ring_and_fork(dir.path(), root_dir.path(), &a, &b, &evil).await;
            let at_root = || async {
                ring(dir.path(), None)
                    .await
                    .with_trust(Trust::anchored(root.clone()))
            };
            let mut first = mirror(at_root().await, &client);
            assert!(!first.start_from_copy().await, "no copy yet");
            first.sync().await.unwrap();
            let kid_b = Kid::of(b.public_key());
            let mut restarted = mirror(at_root().await, &client);
            assert!(restarted.start_from_copy().await);
            assert_eq!(
                restarted.state.ring_view.current().unwrap().active,
                Some(kid_b.clone())
            );
            assert_eq!(
                restarted.cache.keys.len(),
                2,
                "the mirrored keys are taken too"
            );
            // Pinned at a ring key: only once the marker answered (read first, here), never
            // while it cannot be read.
            let marker_file = dir.path().join("root.json");
            let marker_text = break_file(&marker_file);
            let mut at_ring_key = mirror(ring(dir.path(), Some(&a)).await, &client);
            assert!(!at_ring_key.start_from_copy().await);
            assert!(at_ring_key.state.ring_view.current().is_none());
            mend_file(&marker_file, &marker_text);
            let mut at_ring_key = mirror(ring(dir.path(), Some(&a)).await, &client);
            assert!(at_ring_key.start_from_copy().await);
            assert!(at_ring_key.cache.marker_applied);
        })
        .await;
    }

    /// A Secret that looks like ring state of `ring`, holding `index` as its `index.json`.
    pub(in crate::keys::source) fn ring_state_secret(
        ring: &str,
        name: &str,
        index: &str,
    ) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(BTreeMap::from([(RING_STATE_LABEL.into(), "true".into())])),
                annotations: Some(BTreeMap::from([(RING_ANNOTATION.into(), ring.to_owned())])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                INDEX_ITEM.into(),
                ByteString(index.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    /// Issue 35 (security review 5, 7, 8): the leader names every ring-state Secret of its
    /// ring it did not write that fails verification, holds another index at the same or a
    /// higher version, or an older one (one `RingStateForged` Warning each, nothing deleted);
    /// writes only to its own; says when its own was deleted; and a leader with none of its
    /// own never writes into an unverifiable one.
    #[tokio::test]
    async fn a_leader_names_rival_ring_state_secrets_and_writes_only_its_own() {
        within("rivals", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            let (old, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            writer.push(&b).await.unwrap();
            let (current, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            // A newer verified index, then the store put back to the current one.
            write_signed(&writer, &a, |index| {
                index.active = Some(Kid::of(b.public_key()))
            })
            .await;
            let (newer, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            overwrite(&writer, &current).await;

            // Before any leader wrote: only an unverifiable copy exists.
            let api = Api::<Secret>::namespaced(client.clone(), "kseal");
            let name = "kseal-ring-state-garbage";
            let forged = ring_state_secret("kseal/fleet", name, "{}");
            let ring_name = ring(dir.path(), None).await.name().to_owned();
            let forged = Secret {
                metadata: ObjectMeta {
                    annotations: Some(BTreeMap::from([(
                        RING_ANNOTATION.into(),
                        ring_name.clone(),
                    )])),
                    ..forged.metadata
                },
                ..forged
            };
            api.create(&PostParams::default(), &forged).await.unwrap();
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            let own = leader.cache.state_name.clone().unwrap();
            assert_ne!(own, name, "never written into an unverifiable copy");
            let garbage = api.get(name).await.unwrap();
            assert_eq!(garbage.data, forged.data, "left as it is");
            let warned = events_about(&client, name, "RingStateForged").await;
            assert_eq!(warned.len(), 1, "{warned:?}");
            assert!(
                warned[0]
                    .note
                    .as_deref()
                    .unwrap_or_default()
                    .contains("fails verification"),
                "{warned:?}"
            );

            for (rival, text) in [
                ("kseal-ring-state-newer", newer.as_str()),
                ("kseal-ring-state-older", old.as_str()),
            ] {
                api.create(
                    &PostParams::default(),
                    &ring_state_secret(&ring_name, rival, text),
                )
                .await
                .unwrap();
            }
            for _ in 0..2 {
                leader.sync().await.unwrap();
            }
            let newer_note =
                events_about(&client, "kseal-ring-state-newer", "RingStateForged").await;
            assert_eq!(newer_note.len(), 1, "{newer_note:?}");
            assert!(
                newer_note[0]
                    .note
                    .as_deref()
                    .unwrap_or_default()
                    .contains("verifies but differs"),
                "{newer_note:?}"
            );
            let older_note =
                events_about(&client, "kseal-ring-state-older", "RingStateForged").await;
            assert_eq!(older_note.len(), 1, "{older_note:?}");
            assert!(
                older_note[0]
                    .note
                    .as_deref()
                    .unwrap_or_default()
                    .contains("stale or rolled back"),
                "{older_note:?}"
            );
            assert_eq!(leader.state.metrics.key_source_ring_state_rivals.get(), 3);
            for rival in [name, "kseal-ring-state-newer", "kseal-ring-state-older"] {
                assert!(api.get_opt(rival).await.unwrap().is_some(), "{rival} kept");
            }
            let own_secret = api.get(&own).await.unwrap();
            assert_eq!(
                own_secret.data.as_ref().unwrap()[INDEX_ITEM].0,
                current.as_bytes(),
                "its own holds the index it verified"
            );

            // Its own deleted: written anew, and said so.
            api.delete(&own, &DeleteParams::default()).await.unwrap();
            leader.sync().await.unwrap();
            let anew = leader.cache.state_name.clone().unwrap();
            assert_ne!(anew, own);
            let events = events_about(&client, &anew, "RingStateRepaired").await;
            assert!(
                events.iter().any(|e| e
                    .note
                    .as_deref()
                    .unwrap_or_default()
                    .contains(&format!("{own} this leader wrote was deleted"))),
                "{events:?}"
            );
        })
        .await;
    }

    /// Issue 35 (security review 8): a follower that followed a verified copy and becomes
    /// leader while the store cannot be trusted (here: the index rolled back too) writes the
    /// copy it followed back when the ring-state copy was rolled back, and the refusal of the
    /// store's index is named even when no ring-state Secret is left to carry it.
    #[tokio::test]
    async fn a_new_leader_writes_back_the_copy_it_followed_and_never_refuses_silently() {
        within("write back", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            let (old, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            writer.push(&b).await.unwrap();
            let (current, _) = writer.snapshot_text(None).await.unwrap().unwrap();
            let mut first = mirror(ring(dir.path(), Some(&a)).await, &client);
            first.sync().await.unwrap();
            let name = first.cache.state_name.clone().unwrap();
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();

            // The first leader is gone; the copy and the index are rolled back.
            let api = Api::<Secret>::namespaced(client.clone(), "kseal");
            let mut secret = api.get(&name).await.unwrap();
            secret
                .data
                .get_or_insert_with(BTreeMap::new)
                .insert(INDEX_ITEM.into(), ByteString(old.as_bytes().to_vec()));
            api.replace(&name, &PostParams::default(), &secret)
                .await
                .unwrap();
            overwrite(&writer, &old).await;
            let err = follower.sync().await.unwrap_err();
            assert_eq!(err.reason(), "untrusted");
            follower.restore_followed().await;
            let restored = follower.cache.state_name.clone().unwrap();
            assert_ne!(restored, name, "its own, not the rolled-back copy");
            assert_eq!(
                api.get(&restored).await.unwrap().data.unwrap()[INDEX_ITEM].0,
                current.as_bytes()
            );
            let rolled = events_about(&client, &name, "RingStateForged").await;
            assert!(
                rolled.iter().any(|e| e
                    .note
                    .as_deref()
                    .unwrap_or_default()
                    .contains("stale or rolled back")),
                "{rolled:?}"
            );
            let mut fresh = mirror(ring(dir.path(), Some(&a)).await, &client);
            fresh.follow().await.unwrap();
            assert_eq!(
                fresh.state.ring_view.current().unwrap().version,
                follower.pin.floor,
                "a restarted follower finds the newer copy"
            );

            // No ring-state Secret at all: the refusal goes to this replica's Pod.
            for s in api
                .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
                .await
                .unwrap()
                .items
            {
                api.delete(&s.name_any(), &DeleteParams::default())
                    .await
                    .unwrap();
            }
            let mut lone = mirror(ring(dir.path(), Some(&a)).await, &client);
            lone.pin.floor = follower.pin.floor;
            let err = lone.sync().await.unwrap_err();
            lone.refused_index_event("rollback", &crate::error_chain(&err), None)
                .await;
            let events = events_about(&client, "test", "RingIndexRefused").await;
            assert_eq!(events.len(), 1, "{events:?}");
            let regarding = events[0].regarding.clone().unwrap();
            assert_eq!(regarding.kind.as_deref(), Some("Pod"));
            lone.set_lease(Some("kseal-leader".into()));
            lone.cache.refused_warned = None;
            lone.refused_index_event("rollback", "again", None).await;
            let on_lease = events_about(&client, "kseal-leader", "RingIndexRefused").await;
            assert_eq!(on_lease.len(), 1, "{on_lease:?}");
        })
        .await;
    }

    /// Replaces the ring's index with `text`, as whoever can write it.
    async fn overwrite(writer: &Ring, text: &str) {
        let version = writer.index_version().await.unwrap();
        writer
            .store()
            .compare_and_swap(&writer.index_name(), text, version.as_ref(), &[])
            .await
            .unwrap();
    }

    /// An unsigned (schema 1) index of `ring` holding `keys` (their key secrets stored),
    /// `active` active: what an older kseal wrote, or an index writer writes now.
    pub(in crate::keys::source) async fn write_unsigned(
        writer: &Ring,
        ring_name: &str,
        keys: &[&KeyPair],
        active: &KeyPair,
    ) {
        let mut index = Index::empty(ring_name, std::time::SystemTime::now());
        for pair in keys {
            let kid = Kid::of(pair.public_key());
            let stored = writer.store().read(&writer.key_name(&kid), None).await;
            if stored.unwrap().is_none() {
                writer
                    .store()
                    .put(
                        &writer.key_name(&kid),
                        &KeyEntry::from_pair(pair).unwrap().to_json(),
                        &[],
                    )
                    .await
                    .unwrap();
            }
            index
                .keys
                .push(IndexEntry::new(pair.certificate(), std::time::SystemTime::now()).unwrap());
        }
        index.active = Some(Kid::of(active.public_key()));
        let version = writer.index_version().await.unwrap();
        writer
            .store()
            .compare_and_swap(
                &writer.index_name(),
                &index.to_json(),
                version.as_ref(),
                &[],
            )
            .await
            .unwrap();
    }

    /// An unsigned ring that was never signed (no marker, no signed ring-state copy) is still
    /// read by an unpinned controller, but a key that leaves it is retired only after the
    /// grace counted from when this process saw it missing: a `missing-since` annotation
    /// dated back by whoever can write Secrets here does not shorten it.
    #[tokio::test]
    async fn under_an_unsigned_index_the_retire_grace_runs_from_what_this_process_saw() {
        within("unsigned grace", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            write_unsigned(&writer, "kseal/fleet", &[&a, &b], &a).await;
            let mut leader = mirror(ring(dir.path(), None).await, &client);
            assert_eq!(leader.sync().await.unwrap().created.len(), 2);
            assert_eq!(leader.pin.anchor, None, "an unsigned ring pins nothing");
            write_unsigned(&writer, "kseal/fleet", &[&a], &a).await;
            leader.retire_grace = Duration::from_secs(3600);
            assert!(leader.sync().await.unwrap().retired.is_empty());
            let kid_b = Kid::of(b.public_key());
            let marked = mirror_secret(&client, &kid_b).await.unwrap();
            let backdated = serde_json::json!({"metadata": {"annotations": {
                MISSING_SINCE_ANNOTATION: "2020-01-01T00:00:00Z",
            }}});
            leader
                .api
                .patch(
                    &marked.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&backdated),
                )
                .await
                .unwrap();
            assert!(
                leader.sync().await.unwrap().retired.is_empty(),
                "the grace runs from when this process saw it missing"
            );
            assert!(mirror_secret(&client, &kid_b).await.is_some());
            leader.retire_grace = Duration::ZERO;
            assert_eq!(leader.sync().await.unwrap().retired.len(), 1);
        })
        .await;
    }

    /// A fork that hands the root from the old ring-key anchor to a dedicated root of the
    /// attacker's, planted as ring state: a follower that saw the ring's dedicated root takes
    /// the ring's copy; one that saw none cannot tell the two apart and takes neither.
    #[tokio::test]
    async fn copies_naming_different_dedicated_roots_are_not_taken_without_a_seen_root() {
        within("dedicated conflict", async {
            let (dir, root_dir, evil_dir) = (
                tempfile::tempdir().unwrap(),
                tempfile::tempdir().unwrap(),
                tempfile::tempdir().unwrap(),
            );
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let (root, fork) =
                moved_ring_and_fork(dir.path(), root_dir.path(), &a, &b, &evil).await;
            let mut fork = Index::parse_any_ring(&fork, "fork").unwrap();
            let evil_root = file_root(evil_dir.path()).await;
            let record = kseal_keystore::trust::dedicated_record(
                &fork.ring,
                2,
                Some(&Kid::of(a.public_key())),
                &evil_root,
                async |message: &[u8]| kseal_keystore::trust::sign_with_pair(&a, message).map(Some),
            )
            .await
            .unwrap();
            fork.roots.push(record);
            kseal_keystore::trust::sign_index_dedicated(&mut fork, &evil_root)
                .await
                .unwrap();
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            let mut seen = mirror(ring(dir.path(), Some(&a)).await, &client);
            seen.follow().await.unwrap();
            assert_eq!(seen.pin.seen_root, Some((2, root.clone())));
            let ring_name = leader.ring.name().to_owned();
            leader
                .api
                .create(
                    &PostParams::default(),
                    &ring_state_secret(&ring_name, "kseal-ring-state-evil-root", &fork.to_json()),
                )
                .await
                .unwrap();
            seen.follow().await.unwrap();
            assert_eq!(
                seen.state.ring_view.current().unwrap().active,
                Some(Kid::of(b.public_key()))
            );
            let found = seen.load_state().await.unwrap().unwrap();
            assert_ne!(found.name, "kseal-ring-state-evil-root");
            let fresh = mirror(ring(dir.path(), Some(&a)).await, &client);
            assert!(
                fresh.load_state().await.unwrap().is_none(),
                "two dedicated roots at root 2: neither copy is taken"
            );
        })
        .await;
    }

    /// Rewrites the history marker as an older kseal wrote it: no digest, no pending write.
    async fn legacy_marker(writer: &Ring) {
        strip_marker(writer, &["digest", "next"]).await;
    }

    /// Rewrites the history marker of `writer` without `fields`.
    async fn strip_marker(writer: &Ring, fields: &[&str]) {
        let (text, version) = writer
            .store()
            .read(&writer.root_name(), None)
            .await
            .unwrap()
            .unwrap();
        let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
        for field in fields {
            marker.as_object_mut().unwrap().remove(*field);
        }
        writer
            .store()
            .compare_and_swap(
                &writer.root_name(),
                &marker.to_string(),
                Some(&version),
                &[],
            )
            .await
            .unwrap();
    }

    /// A fork of `index` at `version`, signed by the ring key `root`: `evil` active, the
    /// genuine active key retired.
    fn fork_of(index: &Index, version: u64, root: &KeyPair, evil: &KeyPair) -> Index {
        let mut fork = index.clone();
        let genuine = fork.active.clone().unwrap();
        fork.keys.retain(|e| e.kid != genuine);
        fork.retired.push(
            serde_json::from_value(serde_json::json!({
                "kid": genuine.as_str(),
                "retired": jiff::Timestamp::now().to_string(),
            }))
            .unwrap(),
        );
        fork.keys
            .push(IndexEntry::new(evil.certificate(), std::time::SystemTime::now()).unwrap());
        fork.active = Some(Kid::of(evil.public_key()));
        fork.version = version;
        fork.updated = jiff::Timestamp::now();
        kseal_keystore::trust::sign_index(&mut fork, root).unwrap();
        fork
    }

    /// Issue 35, attack review round 16, N2: under a history marker with no version (builds
    /// from before versions were recorded), nothing was checked: a fork at the next version,
    /// signed with a ring key, sealed on every replica. Now such a marker fails closed like
    /// one with a version: the genuine index is withheld until adopted, the fork is withheld
    /// too and its retirement of the genuine key removes no mirror; once the seeder puts its
    /// index back and adopts it, the genuine key seals.
    #[tokio::test]
    async fn under_a_marker_without_a_version_nothing_seals_before_an_adoption() {
        within("versionless", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let evil = pair();
            let (writer, a, b, mut leader) =
                ring_and_leader(dir.path(), &client, &["version", "digest", "next"]).await;
            let view = leader.state.ring_view.current().unwrap();
            assert!(view.withheld.is_some(), "sealed unadopted: {view:?}");
            let kept = mirror_secret(&client, &Kid::of(b.public_key()))
                .await
                .unwrap();
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();
            let view = follower.state.ring_view.current().unwrap();
            assert!(view.withheld.is_some(), "a follower sealed: {view:?}");

            let genuine = writer.require_snapshot().await.unwrap().index;
            let fork = fork_of(&genuine, genuine.version + 1, &a, &evil);
            overwrite(&writer, &fork.to_json()).await;
            let _ = leader.sync().await;
            let _ = follower.follow().await;
            for (who, m) in [("leader", &leader), ("follower", &follower)] {
                let view = m.state.ring_view.current().unwrap();
                assert!(
                    view.withheld.is_some() || view.active != fork.active,
                    "the {who} seals the fork: {view:?}"
                );
            }
            assert_kept(&client, &b, &kept).await;

            overwrite(&writer, &genuine.to_json()).await;
            vouch(&writer).await;
            leader.sync().await.unwrap();
            let view = leader.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None, "adopted: sealing resumes");
            assert_kept(&client, &b, &kept).await;
            leader.write_state().await;
            follower.follow().await.unwrap();
            let view = follower.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None, "the follower seals again");
        })
        .await;
    }

    /// Issue 35, attack review round 18, ROOT: under a history marker with no version, a
    /// fork signed with the anchor that hands the history to a dedicated root of the
    /// attacker's was withheld, but the leader kept that root as the newest it saw: once the
    /// seeder adopted the real index, it refused it ("does not extend root 2") until
    /// restarted, and its Warning `RingAnchorSuperseded` told operators to pin the attacker's
    /// key. Nothing such a marker cannot vouch for is remembered as a root now.
    #[tokio::test]
    async fn under_a_marker_without_a_version_a_forks_root_is_not_remembered() {
        within("versionless root", async {
            let (dir, root_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (writer, a, b, mut leader) =
                ring_and_leader(dir.path(), &client, &["version", "digest", "next"]).await;
            let genuine = writer.require_snapshot().await.unwrap().index;
            let theirs = file_root(root_dir.path()).await;
            let mut fork = genuine.clone();
            let record = kseal_keystore::trust::dedicated_record(
                &fork.ring,
                2,
                Some(&Kid::of(a.public_key())),
                &theirs,
                async |message: &[u8]| kseal_keystore::trust::sign_with_pair(&a, message).map(Some),
            )
            .await
            .unwrap();
            fork.roots.push(record);
            fork.version = genuine.version + 1;
            fork.expires = Some(jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24));
            kseal_keystore::trust::sign_index_dedicated(&mut fork, &theirs)
                .await
                .unwrap();
            overwrite(&writer, &fork.to_json()).await;
            let _ = leader.sync().await;
            let view = leader.state.ring_view.current().unwrap();
            assert!(view.withheld.is_some(), "the fork seals: {view:?}");
            assert_eq!(leader.pin.seen_root, None, "the fork's root was remembered");
            assert!(
                events_with_reason(&client, "RingAnchorSuperseded")
                    .await
                    .is_empty(),
                "told to pin the fork's root"
            );
            overwrite(&writer, &genuine.to_json()).await;
            vouch(&writer).await;
            leader.sync().await.unwrap();
            let view = leader.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None, "adopted: sealing resumes");
        })
        .await;
    }

    /// A two-key ring (`a` its anchor, `b` active) whose history marker lacks `fields` (as
    /// older builds wrote it), and a leader synced on it.
    async fn ring_and_leader(
        dir: &std::path::Path,
        client: &Client,
        fields: &[&str],
    ) -> (Ring, KeyPair, KeyPair, Mirror) {
        let (a, b) = (pair(), pair());
        let writer = ring(dir, None).await;
        writer.push(&a).await.unwrap();
        writer.push(&b).await.unwrap();
        writer
            .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
            .await
            .unwrap();
        strip_marker(&writer, fields).await;
        let leader = mirror(ring(dir, Some(&a)).await, client);
        leader.state.leadership.assume(true);
        let mut leader = leader;
        leader.sync().await.unwrap();
        (writer, a, b, leader)
    }

    /// A two-key ring (`b` active) under a marker an older kseal wrote, a leader and a
    /// follower on its index, and a fork at the marker's version in the store.
    async fn legacy_ring_with_fork(
        dir: &std::path::Path,
        client: &Client,
    ) -> (Ring, KeyPair, KeyPair, Mirror, Mirror, Index) {
        let evil = pair();
        let (writer, a, b, mut leader) = ring_and_leader(dir, client, &["digest", "next"]).await;
        let mut follower = mirror(ring(dir, Some(&a)).await, client);
        follower.follow().await.unwrap();
        let genuine = writer.require_snapshot().await.unwrap().index;
        assert_eq!(
            follower.state.ring_view.current().unwrap().active,
            genuine.active
        );
        let fork = fork_of(&genuine, genuine.version, &a, &evil);
        overwrite(&writer, &fork.to_json()).await;
        // The running leader refuses it (round 11, L1).
        let err = leader.sync().await.unwrap_err();
        assert!(
            crate::error_chain(&err).contains("like the index held"),
            "{err}"
        );
        (writer, a, b, leader, follower, genuine)
    }

    /// Every Event with `reason`, whatever it is about.
    async fn events_with_reason(
        client: &Client,
        reason: &str,
    ) -> Vec<k8s_openapi::api::events::v1::Event> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), "kseal")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Replaces the index of the ring-state Secret `name` with `text`, as whoever can write
    /// Secrets in the controller namespace.
    async fn plant_copy(client: &Client, name: &str, text: &str) {
        let api = Api::<Secret>::namespaced(client.clone(), "kseal");
        let mut secret = api.get(name).await.unwrap();
        secret
            .data
            .get_or_insert_with(Default::default)
            .insert(INDEX_ITEM.into(), ByteString(text.as_bytes().to_vec()));
        api.replace(name, &PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// The mirror of `pair` is there, the same Secret as `kept`, never marked as leaving.
    async fn assert_kept(client: &Client, pair: &KeyPair, kept: &Secret) {
        let now = mirror_secret(client, &Kid::of(pair.public_key()))
            .await
            .expect("the live mirror was removed");
        assert_eq!(now.metadata.uid, kept.metadata.uid);
        assert!(
            !now.annotations().contains_key(MISSING_SINCE_ANNOTATION),
            "the live mirror was scheduled for deletion"
        );
    }

    /// Issue 35, attack review rounds 12 (A2) and 13 (R1): under a marker an older kseal
    /// wrote, a follower that becomes leader holds no index of its own; the store's fork at
    /// the marker's version differs from the copy it followed. It refuses neither and seals
    /// neither: the reason (and a `SealingWithheld` Warning) names both digests, and no mirror
    /// leaves. Restarted on the copy it wrote, the same; once the seeder puts the genuine
    /// index back and adopts it, its active key seals.
    #[tokio::test]
    async fn a_new_or_restarted_leader_seals_neither_the_store_nor_its_copy_when_they_differ() {
        within("takeover", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (writer, a, b, leader, mut follower, genuine) =
                legacy_ring_with_fork(dir.path(), &client).await;
            let fork = writer.require_snapshot().await.unwrap().index;
            let kept = mirror_secret(&client, &Kid::of(b.public_key()))
                .await
                .unwrap();
            drop(leader);
            follower.state.leadership.assume(true);
            assert!(
                !follower.start_from_copy().await,
                "no copy taken: a digest-less marker"
            );
            follower
                .sync()
                .await
                .expect("a copy is no reference to refuse the store's index by");
            let view = follower.state.ring_view.current().unwrap();
            let why = view.withheld.clone().expect("nothing seals");
            for part in [
                &genuine.digest(),
                &fork.digest(),
                "--adopt-index",
                "records no digest",
            ] {
                assert!(why.contains(part), "{part}: {why}");
            }
            assert_kept(&client, &b, &kept).await;
            // The copy the old leader wrote disagrees with the store's index: neither is
            // rewritten, so the Warning goes where a leader without a copy reports.
            assert_eq!(follower.cache.state_name, None);
            let events = events_with_reason(&client, "SealingWithheld").await;
            assert!(
                events.iter().any(|e| e.note.as_deref().is_some_and(|n| {
                    n.contains(&genuine.digest()) && n.contains(&fork.digest())
                })),
                "{events:?}"
            );

            // Restarted: the copy still disagrees with the store's fork; nothing seals.
            let restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            restarted.state.leadership.assume(true);
            let mut restarted = restarted;
            restarted.sync().await.unwrap();
            let view = restarted.state.ring_view.current().unwrap();
            assert!(view.withheld.is_some(), "{view:?}");
            assert_kept(&client, &b, &kept).await;

            // The seeder puts its index back and adopts it: the genuine key seals.
            overwrite(&writer, &genuine.to_json()).await;
            vouch(&writer).await;
            restarted.sync().await.unwrap();
            let view = restarted.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None);
        })
        .await;
    }

    /// Issue 35, attack review round 14, OBS1: under a marker an older kseal wrote, the
    /// store holds a fork at the marker's version and whoever can write Secrets here adds a
    /// rival ring-state copy holding the same fork. The follower that takes over never takes
    /// the rival for its own: neither copy is called forged (an operator would delete the
    /// genuine one) nor rewritten; a `RingStateUnvouched` Warning on each names both. Once the
    /// seeder adopts its index, the leader rewrites the genuine copy and names the rival.
    #[tokio::test]
    async fn a_takeover_under_a_digest_less_marker_never_calls_the_genuine_copy_forged() {
        within("OBS1", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (writer, _a, b, leader, mut follower, genuine) =
                legacy_ring_with_fork(dir.path(), &client).await;
            let fork = writer.require_snapshot().await.unwrap().index;
            let api = Api::<Secret>::namespaced(client.clone(), "kseal");
            let own = leader.cache.state_name.clone().unwrap();
            let copy = api.get(&own).await.unwrap();
            let mut rival = Secret {
                metadata: ObjectMeta {
                    name: Some("kseal-ring-state-zzzz".into()),
                    namespace: Some("kseal".into()),
                    labels: copy.metadata.labels.clone(),
                    annotations: copy.metadata.annotations.clone(),
                    ..ObjectMeta::default()
                },
                type_: copy.type_.clone(),
                data: copy.data.clone(),
                ..Secret::default()
            };
            rival
                .data
                .get_or_insert_with(Default::default)
                .insert(INDEX_ITEM.into(), ByteString(fork.to_json().into_bytes()));
            api.create(&PostParams::default(), &rival).await.unwrap();
            drop(leader);

            follower.state.leadership.assume(true);
            follower.start_from_copy().await;
            follower.sync().await.unwrap();
            follower.write_state().await;
            assert!(
                follower
                    .state
                    .ring_view
                    .current()
                    .unwrap()
                    .withheld
                    .is_some()
            );
            for name in [own.as_str(), "kseal-ring-state-zzzz"] {
                let forged = events_about(&client, name, "RingStateForged").await;
                assert!(forged.is_empty(), "{name} called forged: {forged:?}");
                let repaired = events_about(&client, name, "RingStateRepaired").await;
                assert!(repaired.is_empty(), "{name} rewritten: {repaired:?}");
                let unvouched = events_about(&client, name, "RingStateUnvouched").await;
                let note = unvouched
                    .first()
                    .and_then(|e| e.note.clone())
                    .unwrap_or_else(|| panic!("{name} not named as unvouched"));
                for part in [
                    own.as_str(),
                    "kseal-ring-state-zzzz",
                    &genuine.digest(),
                    &fork.digest(),
                    "records no digest",
                    "--adopt-index",
                ] {
                    assert!(note.contains(part), "{part}: {note}");
                }
            }
            let index_of = |s: Secret| s.data.unwrap()[INDEX_ITEM].0.clone();
            assert_eq!(
                index_of(api.get(&own).await.unwrap()),
                index_of(copy.clone()),
                "the genuine copy was rewritten"
            );
            assert_eq!(follower.cache.state_name, None);

            // The seeder puts its index back and adopts it: the leader writes the genuine
            // copy, which the marker now vouches for, and names the rival.
            overwrite(&writer, &genuine.to_json()).await;
            vouch(&writer).await;
            follower.sync().await.unwrap();
            let view = follower.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None);
            assert_eq!(follower.cache.state_name.as_deref(), Some(own.as_str()));
            assert!(
                events_about(&client, &own, "RingStateForged")
                    .await
                    .is_empty()
            );
            let named = events_about(&client, "kseal-ring-state-zzzz", "RingStateForged").await;
            assert_eq!(named.len(), 1, "{named:?}");
        })
        .await;
    }

    /// Issue 35, attack review round 13, R1: ring key and Secret write only. While the leader
    /// is down, its ring-state copy is overwritten with a fork at the marker's version (the
    /// attacker's key active, the genuine one retired). Restarted, the replica follows the
    /// copy before it leads, then leads: nothing seals from the copy, the store's real index
    /// is not refused as a fork of it, no mirror leaves; adopted, the genuine key seals.
    #[tokio::test]
    async fn a_planted_copy_never_seals_nor_refuses_the_real_index_after_a_restart() {
        within("R1", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            writer.push(&b).await.unwrap();
            writer
                .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
                .await
                .unwrap();
            legacy_marker(&writer).await;
            let leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.state.leadership.assume(true);
            let mut leader = leader;
            leader.sync().await.unwrap();
            let why = leader.state.ring_view.current().unwrap().withheld.clone();
            // The seeder checks what it wrote before it adopts: never a digest `keys list`
            // prints, which may be a fork's (attack review, round 14, AF1).
            let why = why.unwrap();
            for part in [
                "retired keys",
                "without --adopt-index",
                "two indexes of that version",
            ] {
                assert!(why.contains(part), "{part}: {why}");
            }
            assert!(!why.contains("keys list"), "{why}");
            let name = leader.cache.state_name.clone().unwrap();
            let kept = mirror_secret(&client, &Kid::of(b.public_key()))
                .await
                .unwrap();
            drop(leader);
            let genuine = writer.require_snapshot().await.unwrap().index;
            let fork = fork_of(&genuine, genuine.version, &a, &evil);
            plant_copy(&client, &name, &fork.to_json()).await;

            let restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            let mut restarted = restarted;
            restarted.follow().await.unwrap();
            let view = restarted.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(evil.public_key())));
            assert!(view.withheld.is_some(), "the planted copy seals: {view:?}");
            restarted.state.leadership.assume(true);
            restarted.start_from_copy().await;
            restarted
                .sync()
                .await
                .expect("the real index is not refused as a fork of the copy");
            let view = restarted.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            let why = view.withheld.clone().expect("nothing seals");
            assert!(why.contains(&genuine.digest()), "{why}");
            assert!(why.contains(&fork.digest()), "{why}");
            assert_kept(&client, &b, &kept).await;

            vouch(&writer).await;
            restarted.sync().await.unwrap();
            let view = restarted.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None, "adopted: sealing resumes");
        })
        .await;
    }

    /// Issue 35, attack review round 13, R2: as R1, with the fork written into the store too
    /// (copy and store agree). The restarted leader takes the fork's view but seals nothing
    /// and ignores its retirement of the live key, whose mirror stays; a follower that had
    /// followed the fork keeps it withheld once the seeder adopts the genuine index, and a
    /// follower on the genuine copy seals again at its next poll, without a new copy.
    #[tokio::test]
    async fn a_fork_in_copy_and_store_never_seals_nor_removes_a_mirror() {
        within("R2", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (writer, a, b, leader, mut follower, genuine) =
                legacy_ring_with_fork(dir.path(), &client).await;
            let fork = writer.require_snapshot().await.unwrap().index;
            let name = leader.cache.state_name.clone().unwrap();
            drop(leader);
            let kept = mirror_secret(&client, &Kid::of(b.public_key()))
                .await
                .unwrap();
            plant_copy(&client, &name, &fork.to_json()).await;
            let mut fork_follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            fork_follower.follow().await.unwrap();
            let restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            restarted.state.leadership.assume(true);
            let mut restarted = restarted;
            restarted.sync().await.unwrap();
            let view = restarted.state.ring_view.current().unwrap();
            assert_ne!(view.active, Some(Kid::of(b.public_key())));
            assert!(view.withheld.is_some(), "the fork seals: {view:?}");
            assert_kept(&client, &b, &kept).await;
            assert!(
                events_about(&client, &kept.name_any(), "KeyLeftRing")
                    .await
                    .is_empty()
            );

            // The seeder puts its index back and records its digest (the index write of the
            // adoption not done yet): the follower of the genuine copy seals again; the one
            // that followed the fork, and the leader holding it, do not.
            overwrite(&writer, &genuine.to_json()).await;
            vouch(&writer).await;
            assert!(
                follower
                    .state
                    .ring_view
                    .current()
                    .unwrap()
                    .withheld
                    .is_some()
            );
            // The leader's copy holds the fork: refused, the view followed stays.
            let refused = follower.follow().await.unwrap_err();
            assert_eq!(refused.reason(), "untrusted");
            let view = follower.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None, "the follower seals again");
            let _ = fork_follower.follow().await;
            let view = fork_follower.state.ring_view.current().unwrap();
            assert!(view.withheld.is_some(), "the fork stays withheld: {view:?}");
            restarted.sync().await.unwrap();
            let view = restarted.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(Kid::of(b.public_key())));
            assert_eq!(view.withheld, None);
            assert_kept(&client, &b, &kept).await;
        })
        .await;
    }

    /// Issue 35, attack review round 12, A3: a leader restarted onto a fork (no copy to
    /// compare with: the documented case) refuses the seeder's index restored at the same
    /// version, and says to adopt it rather than restore it; once the marker records the
    /// genuine index as written, it replaces the fork, with a Warning.
    #[tokio::test]
    async fn an_index_the_marker_records_as_written_replaces_a_held_fork() {
        within("adopt", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (writer, a, b, _leader, _follower, genuine) =
                legacy_ring_with_fork(dir.path(), &client).await;
            let api = Api::<Secret>::namespaced(client.clone(), "kseal");
            for s in api
                .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
                .await
                .unwrap()
                .items
            {
                api.delete(&s.name_any(), &DeleteParams::default())
                    .await
                    .unwrap();
            }
            let restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            restarted.state.leadership.assume(true);
            let mut restarted = restarted;
            restarted
                .sync()
                .await
                .expect("nothing to compare: the fork is taken");
            assert_ne!(
                restarted.state.ring_view.current().unwrap().active,
                Some(Kid::of(b.public_key()))
            );
            overwrite(&writer, &genuine.to_json()).await;
            let err = restarted.sync().await.unwrap_err();
            let message = crate::error_chain(&err);
            assert!(message.contains("like the index held"), "{message}");
            assert!(
                message.contains("kseal keys refresh --adopt-index"),
                "adopt, not restore: {message}"
            );
            assert!(!message.contains("restores the index"), "{message}");
            vouch(&writer).await;
            restarted.sync().await.unwrap();
            assert_eq!(
                restarted.state.ring_view.current().unwrap().active,
                Some(Kid::of(b.public_key())),
                "the index the marker records as written replaces the fork"
            );
            let name = restarted.cache.state_name.clone().unwrap();
            let events = events_about(&client, &name, "RingIndexReplaced").await;
            assert_eq!(events.len(), 1, "{events:?}");
        })
        .await;
    }

    /// Issue 35, attack review round 12, F1: a rival ring-state copy (a fork at a higher
    /// version, verifying under the pin, planted by whoever can write Secrets here) does not
    /// freeze a follower: it takes the newest copy the marker vouches for, the leader's, and
    /// `load_state` returns that one too.
    #[tokio::test]
    async fn a_rival_copy_at_a_higher_version_never_hides_the_leaders() {
        within("rival", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, b, c, evil) = (pair(), pair(), pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            writer.push(&b).await.unwrap();
            writer
                .activate(Kid::of(b.public_key()).as_str(), Duration::ZERO)
                .await
                .unwrap();
            let leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.state.leadership.assume(true);
            let mut leader = leader;
            leader.sync().await.unwrap();
            let own = leader.cache.state_name.clone().unwrap();
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();
            let genuine = writer.require_snapshot().await.unwrap().index;
            let rival = fork_of(&genuine, 1000, &a, &evil);
            let api = Api::<Secret>::namespaced(client.clone(), "kseal");
            api.create(
                &PostParams::default(),
                &ring_state_secret(
                    leader.ring.name(),
                    "kseal-ring-state-zzzz",
                    &rival.to_json(),
                ),
            )
            .await
            .unwrap();
            // Refused (logged), skipped: the copy followed stays.
            follower.follow().await.unwrap();
            assert_eq!(
                follower.state.ring_view.current().unwrap().active,
                Some(Kid::of(b.public_key()))
            );

            // The seeder activates another key: the leader writes it, the follower takes it.
            writer.push(&c).await.unwrap();
            writer
                .activate(Kid::of(c.public_key()).as_str(), Duration::ZERO)
                .await
                .unwrap();
            leader.sync().await.unwrap();
            follower.follow().await.unwrap();
            assert_eq!(
                follower.state.ring_view.current().unwrap().active,
                Some(Kid::of(c.public_key())),
                "the follower follows the leader past the rival"
            );
            assert_eq!(leader.load_state().await.unwrap().unwrap().name, own);
            assert_eq!(follower.load_state().await.unwrap().unwrap().name, own);
            // A fresh follower too.
            let mut fresh = mirror(ring(dir.path(), Some(&a)).await, &client);
            fresh.follow().await.unwrap();
            assert_eq!(
                fresh.state.ring_view.current().unwrap().active,
                Some(Kid::of(c.public_key()))
            );
            assert!(
                api.get_opt("kseal-ring-state-zzzz")
                    .await
                    .unwrap()
                    .is_some()
            );
        })
        .await;
    }
}

/// The ring-state tests' helpers that the pinning tests share.
#[cfg(test)]
pub(super) mod test_support {
    pub(in crate::keys::source) use super::tests::{
        break_file, events_about, mend_file, mirror, mirror_secret, moved_ring_and_fork, pair,
        ring, ring_state_secret, within, write_unsigned,
    };
}
