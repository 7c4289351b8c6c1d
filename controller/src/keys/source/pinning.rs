//! Pinning the ring's trust anchor: the store's history marker (`R/root`, a directory's
//! `root.json`) read once per process ([`MarkerFacts`]) as a floor and a seen dedicated root
//! that histories must extend, the anchor persisted in the ring-state Secrets adopted after a
//! restart, the refusal of an unsigned index once a signed history was seen, and the log
//! lines, Events and metrics that say what was pinned or superseded.

use super::*;

impl Mirror {
    /// Whether `index` passes through the newest dedicated root this controller saw (true
    /// when it saw none).
    pub(super) fn extends_seen_root(&self, index: &Index) -> bool {
        self.pin.seen_root.as_ref().is_none_or(|(seq, kid)| {
            usize::try_from(*seq)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| index.roots.get(i))
                .is_some_and(|r| &r.kid == kid)
        })
    }

    /// A replica started without `--ring-anchor`, once: the anchor it pinned on first use
    /// before this start is persisted in the ring-state Secret (the signed history of its
    /// `index.json`, re-verified here), so it is not pinned again from whatever the store
    /// holds now. The anchor the store's history marker names (`R/root`, a directory's
    /// `root.json`: only the seeder writes it on Secrets Manager) comes first; else the one
    /// anchor every signed copy of this ring verifies from (copies of several anchors pin
    /// none). The copy's view is not taken before the store's index verifies under it. Once a
    /// signed copy or the marker exists, an unsigned index is refused.
    pub(super) async fn adopt_persisted_anchor(&mut self) -> Result<(), SyncError> {
        if self.cache.persisted_checked || self.pin.anchor.is_some() {
            return Ok(());
        }
        // Not before the store's history marker answered (attack review, round 3): while the
        // store cannot be read, a copy planted here would pin its anchor and raise the floor
        // past the real index. Nothing seals meanwhile; retried at the next poll.
        if !self.cache.marker_applied {
            return Ok(());
        }
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        let marker = self.marker_anchor().await;
        self.cache.persisted_checked = true;
        let trust = kseal_keystore::Trust::first_use().accept_expired(true);
        let mut anchors: BTreeMap<Kid, String> = BTreeMap::new();
        for secret in &listed.items {
            let Some(text) = self.own_copy_index(secret) else {
                continue;
            };
            let text = text.ok();
            if let Some(Ok((_, Verified::Signed { anchor, .. }))) =
                text.map(|t| parse_ring_state(t, self.expected_ring.as_deref(), &trust))
            {
                anchors.entry(anchor).or_insert_with(|| secret.name_any());
            }
        }
        if self.directory_marker_conflict(&marker, &anchors).await {
            return Ok(());
        }
        let first = anchors.iter().next().map(|(k, v)| (k.clone(), v.clone()));
        let (anchor, from) = match (marker, first) {
            (Some(anchor), _) => {
                self.pin.unsigned_refused = Some(format!(
                    "the ring's history marker {} names its anchor",
                    self.ring.root_name()
                ));
                for (other, secret) in anchors.iter().filter(|(k, _)| **k != anchor) {
                    tracing::warn!(
                        secret = %secret,
                        "ring-state Secret {secret} holds a history of anchor {}, not the \
                         anchor {} the ring's history marker names: ignored",
                        other.short(),
                        anchor.short()
                    );
                }
                (
                    anchor,
                    format!("the ring's history marker {}", self.ring.root_name()),
                )
            }
            (None, None) => return Ok(()),
            (None, Some((anchor, secret))) => {
                self.pin.unsigned_refused = Some(format!(
                    "this controller accepted a signed history of the ring before (ring-state \
                     Secret {secret})"
                ));
                if anchors.len() > 1 {
                    let note = format!(
                        "ring-state Secrets of ring {} hold histories of different anchors \
                         ({}): nothing is pinned, from them or from the store, and nothing \
                         seals until --ring-anchor (keySource.ringAnchor) names the ring's \
                         anchor or dedicated root",
                        self.ring.name(),
                        anchors
                            .keys()
                            .map(Kid::short)
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    tracing::warn!("{note}");
                    if let Some(reference) = self.state_reference(Some(&secret)) {
                        self.warn_on(&reference, "RingAnchorConflict", note.clone())
                            .await;
                    }
                    self.cache.anchor_conflict = Some(note);
                    return Ok(());
                }
                (anchor, format!("the verified ring-state Secret {secret}"))
            }
        };
        self.cache.anchor_from_state = true;
        self.pin_anchor(anchor, &from).await;
        Ok(())
    }

    /// Directory rings only: whether the history marker's anchor (`marker`) and the anchors
    /// of the verified ring-state Secrets (`anchors`) disagree; if so, says so and pins nothing.
    async fn directory_marker_conflict(
        &mut self,
        marker: &Option<Kid>,
        anchors: &BTreeMap<Kid, String>,
    ) -> bool {
        // A directory ring's root.json is as writable as its index.json (its directory's
        // permissions protect both): there it is one more claimant, not the word of a seeder
        // nobody else can imitate. When it and the verified copies name different anchors,
        // nothing is pinned, from them or from the store (attack review, round 3).
        if let (Some(marker), kseal_keystore::Store::Directory(_)) = (&marker, self.ring.store())
            && !anchors.is_empty()
            && (anchors.len() > 1 || !anchors.contains_key(marker))
        {
            let note = format!(
                "the ring's history marker {} names anchor {}, but the verified ring-state \
                 Secrets of ring {} hold histories of anchor {}: nothing is pinned, and nothing \
                 seals until --ring-anchor (keySource.ringAnchor) names the ring's anchor or \
                 dedicated root (a directory ring's root.json is no better protected than its \
                 index.json)",
                self.ring.root_name(),
                marker.short(),
                self.ring.name(),
                anchors
                    .keys()
                    .map(Kid::short)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            tracing::warn!("{note}");
            self.pin.unsigned_refused = Some(format!(
                "the ring's history marker {} exists",
                self.ring.root_name()
            ));
            if let Some(reference) =
                self.state_reference(anchors.values().next().map(String::as_str))
            {
                self.warn_on(&reference, "RingAnchorConflict", note.clone())
                    .await;
            }
            self.cache.anchor_conflict = Some(note);
            return true;
        }
        false
    }

    /// Takes the store's history marker's version as a floor and its dedicated root as seen,
    /// once per process (again after a failed read), before any ring-state copy is used: the
    /// marker is written only by the seeder (`R/root`; an index writer cannot reach it), so a
    /// restarted controller pinned at a superseded ring key, or not pinned, never takes a
    /// planted or replayed copy of a fork signed with ring keys, nor one older than the
    /// seeder's last write (attack review, round 2). Applied whatever the pin names.
    pub(super) async fn apply_marker(&mut self) -> Result<(), kseal_keystore::Error> {
        // A marker read in an earlier poll is not used again without a read (see
        // [`Mirror::check_vouched`]); one read here is, once.
        self.cache.vouching_fresh = false;
        if self.cache.marker_applied {
            return Ok(());
        }
        let read = self.ring.store().read(&self.ring.root_name(), None).await;
        count(&self.state, "get_marker", outcome(&read));
        let text = match read {
            Ok(Some((text, version))) => {
                self.cache.marker_version = Some(version);
                text
            }
            Ok(None) => {
                self.cache.marker_applied = true;
                return Ok(());
            }
            // Nothing from the store is taken before the marker answered (attack review,
            // round 4: a leader pinned at a ring key whose marker read failed at its restart
            // took a fork from the index, signed with a ring key). The caller says so.
            Err(e) => return Err(e),
        };
        self.cache.marker_applied = true;
        self.cache.vouching = kseal_keystore::Marker::parse(&text);
        self.cache.marker = self.cache.vouching.as_ref().map(MarkerFacts::of);
        self.cache.vouching_fresh = true;
        let Some(marker) = self.cache.marker.clone() else {
            tracing::warn!(
                "the ring's history marker {} is not what kseal writes: ignored",
                self.ring.root_name()
            );
            return Ok(());
        };
        // Whatever the pin: the marker is this ring's (its name in the store), written by its
        // seeder alone. A pin at a ring key from the middle of the chain names neither the
        // marker's anchor nor its root, yet a fork from that key must still pass through the
        // root (attack review, round 4); a pin of another history verifies nothing here anyway.
        if marker.version > self.pin.floor {
            self.pin.floor = marker.version;
        }
        self.pin.see_root(marker.root);
        Ok(())
    }

    /// The history marker read failed: what the loop reports (the store's error, with why
    /// nothing is read from the store meanwhile).
    pub(super) fn marker_unread(&self, e: kseal_keystore::Error) -> SyncError {
        tracing::debug!(
            "the ring's history marker {} could not be read: nothing is taken from the store \
             before it answers",
            self.ring.root_name()
        );
        self.store_err(e)
    }

    /// The anchor the store's history marker names (read only; `None` without a marker, or
    /// when it cannot be read: a failure is logged, the copies still count).
    async fn marker_anchor(&self) -> Option<Kid> {
        // Read once per process by apply_marker, which runs first.
        self.cache.marker.as_ref().and_then(|m| m.anchor.clone())
    }

    /// An unsigned (schema 1) index read from the store, with no anchor pinned: refused when
    /// this controller accepted a signed history of the ring before, or when the store's
    /// history marker (`R/root`, a directory's `root.json`, written by the first signed
    /// write and never removed by an index writer) exists. A signed index replaced by an
    /// unsigned one would otherwise hand its writer the sealing key.
    pub(super) async fn unsigned_allowed(&mut self, verified: &Verified) -> Result<(), SyncError> {
        // Persisted anchors that disagree: the store's index is not pinned on first use
        // either (whoever planted the disagreement may be the one who wrote it).
        if self.pin.anchor.is_none()
            && let Some(note) = &self.cache.anchor_conflict
        {
            return Err(self.store_err(kseal_keystore::Error::Untrusted {
                what: self.ring.index_name(),
                reason: note.clone(),
            }));
        }
        if !matches!(verified, Verified::Unsigned) {
            return Ok(());
        }
        let refused = match self.pin.unsigned_refused.clone() {
            Some(reason) => Some(reason),
            None => {
                let marker = self.ring.store().read(&self.ring.root_name(), None).await;
                count(&self.state, "get_marker", outcome(&marker));
                match marker.map_err(|e| self.store_err(e))? {
                    Some(_) => Some(format!(
                        "the ring's history marker {} exists: its history was signed",
                        self.ring.root_name()
                    )),
                    None => None,
                }
            }
        };
        let Some(refused) = refused else {
            return Ok(());
        };
        Err(self.store_err(kseal_keystore::Error::Untrusted {
            what: self.ring.index_name(),
            reason: format!(
                "it is not signed, but {refused}: a signed index was replaced by an unsigned \
                 one. Do not sign it; restore the signed index from the store's previous \
                 version"
            ),
        }))
    }

    /// When the pin names a key other than the newest dedicated root of the verified history
    /// (pinned at the ring key anchor before the ring moved to a dedicated root): the gauge,
    /// a log line and one `RingAnchorSuperseded` Warning per dedicated root. The pin keeps
    /// working (that root's chain passes through it), and forks from before that root are
    /// refused all the same, but the pin should move to it.
    pub(super) async fn note_superseded(&mut self, found: Option<&str>) {
        let Some((anchor, (seq, root))) = self.pin.superseded() else {
            self.state
                .metrics
                .key_source_ring_anchor_superseded
                .set(self.ring.name(), 0);
            return;
        };
        let (anchor, seq, root) = (anchor.clone(), *seq, root.clone());
        self.state
            .metrics
            .key_source_ring_anchor_superseded
            .set(self.ring.name(), 1);
        if self.cache.superseded_warned.as_ref() == Some(&root) {
            return;
        }
        let note = format!(
            "pinned at {anchor} but the ring {}'s history is rooted at dedicated root {root} \
             (root {seq} of its chain; seen at version {}): move --ring-anchor / \
             keySource.ringAnchor to {root}",
            self.ring.name(),
            self.pin.floor
        );
        // On the ring-state Secret only (it is written within this sync, or found).
        let Some(reference) = self.ring_state_reference(found) else {
            return;
        };
        tracing::warn!(anchor = %anchor, root = %root, "{note}");
        self.warn_on(&reference, "RingAnchorSuperseded", note).await;
        self.cache.superseded_warned = Some(root);
    }

    /// Pins `anchor` on first use: says so in a log line, an Event and a metric.
    pub(super) async fn pin_anchor(&mut self, anchor: Kid, from: &str) {
        self.pin.anchor = Some(anchor.clone());
        self.state
            .metrics
            .key_source_ring_anchor_pinned
            .set(self.ring.name(), 1);
        let note = format!(
            "pinned the trust anchor {} of ring {} on first use (read from {from}); from now on \
             only histories rooted there are accepted. Give --ring-anchor {anchor} to pin it \
             from the start",
            anchor.short(),
            self.ring.name()
        );
        tracing::warn!(anchor = %anchor, "{note}");
        match self.cache.state_ref.clone() {
            Some(reference) => self.anchor_pinned_event(note, &reference).await,
            None => self.cache.pin_event_pending = Some(note),
        }
    }

    /// The `RingAnchorPinned` event, on the ring-state Secret.
    pub(super) async fn anchor_pinned_event(&self, note: String, reference: &ObjectReference) {
        let event = Event {
            type_: EventType::Normal,
            reason: "RingAnchorPinned".into(),
            note: Some(note),
            action: "VerifyRing".into(),
            secondary: None,
        };
        if self.may_write().is_err() {
            return;
        }
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::debug!(error = %crate::error_chain(&e), "failed to publish key-source event");
        }
    }
}

/// Whether a signed copy (`name`, its history `index`) extends the dedicated root `required`
/// (true without one, and for an unsigned copy); a copy that does not is logged.
pub(super) fn extends_required(
    required: Option<&(u64, Kid)>,
    verified: &Verified,
    index: &Index,
    name: &str,
) -> bool {
    if let (Some((seq, kid)), Verified::Signed { .. }) = (required, verified) {
        let extends = usize::try_from(*seq)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| index.roots.get(i))
            .is_some_and(|r| &r.kid == kid);
        if !extends {
            tracing::warn!(
                secret = %name,
                "ignoring a ring-state Secret: its history does not extend the ring's \
                 dedicated root {seq} ({}): a fork from an older root",
                kid.short()
            );
            return false;
        }
    }
    true
}

/// What a controller takes from the store's history marker (`R/root`, `root.json`): the
/// history's anchor, the last version the seeder wrote and its newest dedicated root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MarkerFacts {
    pub(super) anchor: Option<Kid>,
    pub(super) version: u64,
    pub(super) root: Option<(u64, Kid)>,
}

impl MarkerFacts {
    /// The facts this controller keeps of a marker read ([`kseal_keystore::Marker::parse`]).
    pub(super) fn of(marker: &kseal_keystore::Marker) -> Self {
        Self {
            anchor: marker.anchor.clone(),
            version: marker.version,
            root: marker.root.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The anchor pinning on the in-process test API server and a directory ring, with the
    //! ring-state tests' helpers: no emulator, no controller, every test under a deadline.

    use kseal_keystore::{AwsOptions, Trust};

    use super::*;
    use crate::keys::source::ringstate::test_support::{
        break_file, events_about, mend_file, mirror, mirror_secret, moved_ring_and_fork, pair,
        ring, ring_state_secret, within, write_unsigned,
    };
    use crate::keys::source::tests::server;

    /// Attack review, round 3: a controller pinned at the old ring-key anchor (its pin not
    /// moved to the dedicated root), restarted while the store cannot be read, with the fork
    /// (signed by that ring key, at a higher version) written into the ring-state Secret in
    /// place of the leader's copy. It published the copy, raised its floor past the real
    /// index, sealed to the fork's key and refused the real index once the store answered.
    /// Now it takes no copy until the history marker answered, and then refuses the fork.
    #[tokio::test]
    async fn a_restart_pinned_at_a_ring_key_takes_no_copy_before_the_marker_answers() {
        within("ring-key restart", async {
            let (dir, root_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let (root, fork) =
                moved_ring_and_fork(dir.path(), root_dir.path(), &a, &b, &evil).await;
            let (kid_b, kid_evil) = (Kid::of(b.public_key()), Kid::of(evil.public_key()));
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.sync().await.unwrap();
            let real_version = leader.pin.floor;
            let name = leader.load_state().await.unwrap().unwrap().name;
            drop(leader);

            // The Secret writer puts the fork into the leader's copy; the store goes away.
            let api: Api<Secret> = Api::namespaced(client.clone(), "kseal");
            let mut copy = api.get(&name).await.unwrap();
            copy.data
                .as_mut()
                .unwrap()
                .insert(INDEX_ITEM.into(), ByteString(fork.clone().into_bytes()));
            api.replace(&name, &PostParams::default(), &copy)
                .await
                .unwrap();
            let (index_file, marker_file) =
                (dir.path().join("index.json"), dir.path().join("root.json"));
            let index_text = break_file(&index_file);
            let marker_text = break_file(&marker_file);

            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.follow().await.unwrap();
            assert!(
                follower.state.ring_view.current().is_none(),
                "nothing seals from a copy a ring-key pin cannot tell from a fork"
            );
            assert_eq!(follower.pin.floor, 0, "the fork raised no floor");
            let mut restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            restarted.retire_grace = Duration::ZERO;
            assert!(restarted.sync().await.is_err(), "the store does not answer");
            assert!(restarted.state.ring_view.current().is_none());
            assert_eq!(restarted.pin.floor, 0);
            assert!(mirror_secret(&client, &kid_evil).await.is_none());
            assert!(mirror_secret(&client, &kid_b).await.is_some());

            // The store answers again: the marker names the dedicated root, the fork copy is
            // refused, the leader reads the real index and repairs the copy.
            mend_file(&index_file, &index_text);
            mend_file(&marker_file, &marker_text);
            restarted.sync().await.unwrap();
            assert_eq!(restarted.pin.seen_root, Some((2, root.clone())));
            assert_eq!(restarted.pin.floor, real_version);
            let view = restarted.state.ring_view.current().unwrap();
            assert_eq!(view.active, Some(kid_b.clone()));
            follower.follow().await.unwrap();
            assert_eq!(
                follower.state.ring_view.current().unwrap().active,
                Some(kid_b.clone())
            );
            assert_eq!(follower.pin.seen_root, Some((2, root.clone())));
            // The copy replicas read holds the real index (the fork's stays, named forged).
            let found = restarted.load_state().await.unwrap().unwrap();
            assert_eq!(found.version, real_version);
            assert!(found.text != fork, "the copy taken is not the fork");

            // Pinned at the dedicated root too, a restart during an outage takes no copy:
            // whether a pin is a dedicated root cannot be told before the marker answered
            // (attack review, round 5: a ring key can sign a chain calling itself one).
            let broken = break_file(&marker_file);
            let at_root = ring(dir.path(), None)
                .await
                .with_trust(Trust::anchored(root.clone()));
            let mut follower = mirror(at_root, &client);
            follower.follow().await.unwrap();
            assert!(follower.state.ring_view.current().is_none());
            mend_file(&marker_file, &broken);
            follower.follow().await.unwrap();
            assert_eq!(
                follower.state.ring_view.current().unwrap().active,
                Some(kid_b)
            );
        })
        .await;
    }

    /// Attack review, round 4: a leader pinned at the old ring-key anchor whose history marker
    /// read failed at its restart (one throttled call, a role without `R/root`) while the
    /// index answered took a fork signed with that ring key from the index, dropped the
    /// active key's mirror and kept the fork after the marker answered. Now no index is read
    /// before the marker answered, and a chain that calls a ring key this controller mirrored
    /// a dedicated root is no reason to take a copy before it either.
    #[tokio::test]
    async fn nothing_from_the_store_or_a_forged_dedicated_copy_before_the_marker_answers() {
        within("marker first", async {
            let (dir, root_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (_server, client) = server().await;
            let (a, b, evil) = (pair(), pair(), pair());
            let (root, fork) =
                moved_ring_and_fork(dir.path(), root_dir.path(), &a, &b, &evil).await;
            let (kid_b, kid_evil) = (Kid::of(b.public_key()), Kid::of(evil.public_key()));
            let mut leader = mirror(ring(dir.path(), Some(&a)).await, &client);
            leader.retire_grace = Duration::ZERO;
            leader.sync().await.unwrap();
            let real_version = leader.pin.floor;
            drop(leader);

            // The index writer puts the fork in place; only the marker cannot be read.
            let writer = ring(dir.path(), None).await;
            let version = writer.index_version().await.unwrap();
            writer
                .store()
                .compare_and_swap(&writer.index_name(), &fork, version.as_ref(), &[])
                .await
                .unwrap();
            let marker_file = dir.path().join("root.json");
            let marker_text = break_file(&marker_file);
            let mut restarted = mirror(ring(dir.path(), Some(&a)).await, &client);
            restarted.retire_grace = Duration::ZERO;
            let err = restarted.sync().await.unwrap_err();
            assert!(
                crate::error_chain(&err).contains("root.json"),
                "{}",
                crate::error_chain(&err)
            );
            assert!(restarted.state.ring_view.current().is_none());
            assert!(restarted.cache.index.is_none(), "no index taken");
            assert!(mirror_secret(&client, &kid_b).await.is_some());
            assert!(mirror_secret(&client, &kid_evil).await.is_none());
            // A follower too: pinned, it takes nothing; unpinned, it reads no index.
            let mut unpinned = mirror(ring(dir.path(), None).await, &client);
            assert!(unpinned.follow().await.is_err());
            assert!(unpinned.state.ring_view.current().is_none());
            assert_eq!(unpinned.pin.anchor, None);

            // A copy of a history that calls the ring key `a` a dedicated root (whoever
            // holds `a` can sign one), planted with a higher version: not taken before the
            // marker answered, since `a` is a key this controller mirrored.
            let forged_dir = tempfile::tempdir().unwrap();
            let key_path = forged_dir.path().join("a.pem");
            std::fs::write(&key_path, a.private_key().to_pkcs8_pem().as_bytes()).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))
                    .unwrap();
            }
            let as_root = kseal_keystore::RootSigner::open(
                &kseal_keystore::RootKey::File(key_path),
                &AwsOptions::default(),
            )
            .await
            .unwrap();
            let forged_ring = ring(&forged_dir.path().join("ring"), None)
                .await
                .with_root(as_root);
            forged_ring.push(&evil).await.unwrap();
            let (forged_text, _) = forged_ring.snapshot_text(None).await.unwrap().unwrap();
            let forged = Index::parse_any_ring(&forged_text, "forged").unwrap();
            assert!(
                forged.roots[0].dedicated && forged.roots[0].kid == Kid::of(a.public_key()),
                "the forged history calls the ring key a dedicated root"
            );
            let planted = ring_state_secret(
                restarted.ring.name(),
                &format!("{RING_STATE_PREFIX}forged"),
                &forged_text,
            );
            restarted
                .api
                .create(&PostParams::default(), &planted)
                .await
                .unwrap();
            let mut follower = mirror(ring(dir.path(), Some(&a)).await, &client);
            follower.seed_from_mirror().await.unwrap();
            follower.follow().await.unwrap();
            assert!(
                follower.state.ring_view.current().is_none(),
                "the forged 'dedicated' copy is not taken"
            );

            // The marker answers: the fork is refused, nothing was dropped.
            mend_file(&marker_file, &marker_text);
            let err = restarted.sync().await.unwrap_err();
            assert_eq!(err.reason(), "untrusted", "{}", crate::error_chain(&err));
            assert_eq!(restarted.pin.floor, real_version);
            assert_eq!(restarted.pin.seen_root, Some((2, root)));
            assert!(mirror_secret(&client, &kid_b).await.is_some());
            assert!(mirror_secret(&client, &kid_evil).await.is_none());
        })
        .await;
    }

    /// Attack review, round 3: on a directory ring, root.json is as writable as index.json.
    /// An unpinned controller restarted after both were replaced by another history (the
    /// ring-state copy still holds the real one) pinned the new root.json's anchor. Now the
    /// disagreement pins nothing, from either or from the store, with a Warning that says
    /// what to do.
    #[tokio::test]
    async fn an_unpinned_restart_pins_nothing_when_root_json_and_the_copies_disagree() {
        within("dir anchor conflict", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, evil) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            let mut first = mirror(ring(dir.path(), None).await, &client);
            first.sync().await.unwrap();
            assert_eq!(first.pin.anchor, Some(Kid::of(a.public_key())));
            let name = first.load_state().await.unwrap().unwrap().name;
            drop(first);

            let other = tempfile::tempdir().unwrap();
            let foreign = ring(other.path(), None).await;
            foreign.push(&evil).await.unwrap();
            for file in ["index.json", "root.json"] {
                std::fs::copy(other.path().join(file), dir.path().join(file)).unwrap();
            }
            let mut restarted = mirror(ring(dir.path(), None).await, &client);
            let err = restarted.sync().await.unwrap_err();
            let chain = crate::error_chain(&err);
            assert_eq!(err.reason(), "untrusted", "{chain}");
            assert!(
                chain.contains("nothing is pinned") && chain.contains("--ring-anchor"),
                "{chain}"
            );
            assert_eq!(restarted.pin.anchor, None);
            assert!(restarted.state.ring_view.current().is_none());
            assert!(
                mirror_secret(&client, &Kid::of(evil.public_key()))
                    .await
                    .is_none()
            );
            let events = events_about(&client, &name, "RingAnchorConflict").await;
            assert_eq!(events.len(), 1, "{events:?}");
            let mut follower = mirror(ring(dir.path(), None).await, &client);
            assert_eq!(follower.follow().await.unwrap_err().reason(), "untrusted");
            assert!(follower.state.ring_view.current().is_none());
        })
        .await;
    }

    /// Issue 35, security review BROKE #3: a controller started without `--ring-anchor` that
    /// accepted a signed history refuses, after a restart, an unsigned index put in its place
    /// (whether the store's history marker is still there or was removed with it), and is
    /// not pinned again from another signed history the store holds now: the anchor persisted
    /// in its verified ring-state copy stays the pin.
    #[tokio::test]
    async fn an_unpinned_controller_never_takes_an_unsigned_index_or_a_new_anchor_after_a_restart()
    {
        within("unpinned restart", async {
            let dir = tempfile::tempdir().unwrap();
            let (_server, client) = server().await;
            let (a, evil) = (pair(), pair());
            let writer = ring(dir.path(), None).await;
            writer.push(&a).await.unwrap();
            let ring_name = writer.require_snapshot().await.unwrap().index.ring;
            let mut first = mirror(ring(dir.path(), None).await, &client);
            first.sync().await.unwrap();
            assert_eq!(first.pin.anchor, Some(Kid::of(a.public_key())));
            drop(first);

            write_unsigned(&writer, &ring_name, &[&a, &evil], &evil).await;
            let marker = dir.path().join("root.json");
            assert!(
                marker.exists(),
                "the first signed write left the history marker"
            );
            for (case, remove_marker) in [("marker", false), ("ring-state copy", true)] {
                if remove_marker {
                    std::fs::remove_file(&marker).unwrap();
                }
                let mut restarted = mirror(ring(dir.path(), None).await, &client);
                let err = restarted.sync().await.unwrap_err();
                let chain = crate::error_chain(&err);
                assert_eq!(err.reason(), "untrusted", "{case}: {chain}");
                assert!(
                    chain.contains("it is not signed")
                        && chain.contains("restore the signed index"),
                    "{case}: {chain}"
                );
                assert_eq!(
                    restarted.pin.anchor,
                    Some(Kid::of(a.public_key())),
                    "{case}: the anchor pinned before the restart"
                );
                assert!(
                    restarted.state.ring_view.current().is_none(),
                    "{case}: nothing seals"
                );
                assert!(
                    mirror_secret(&client, &Kid::of(evil.public_key()))
                        .await
                        .is_none()
                );
                // A follower too.
                let mut follower = mirror(ring(dir.path(), None).await, &client);
                assert_eq!(follower.follow().await.unwrap_err().reason(), "untrusted");
                assert!(follower.state.ring_view.current().is_none());
            }

            // Another signed history in the store: not pinned anew.
            let other = tempfile::tempdir().unwrap();
            let foreign = ring(other.path(), None).await;
            foreign.push(&evil).await.unwrap();
            let (text, _) = foreign.snapshot_text(None).await.unwrap().unwrap();
            let version = writer.index_version().await.unwrap();
            writer
                .store()
                .compare_and_swap(&writer.index_name(), &text, version.as_ref(), &[])
                .await
                .unwrap();
            let mut restarted = mirror(ring(dir.path(), None).await, &client);
            let err = restarted.sync().await.unwrap_err();
            assert_eq!(err.reason(), "untrusted", "{}", crate::error_chain(&err));
            assert_eq!(restarted.pin.anchor, Some(Kid::of(a.public_key())));
        })
        .await;
    }
}
