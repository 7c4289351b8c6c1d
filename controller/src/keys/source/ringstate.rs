//! The ring-state Secret: how the leader publishes the ring's verified index and what it saw
//! (kids ever named, the last active kid) for followers and for itself after a restart, how
//! followers derive their ring view from it, and pinning the ring's anchor.

use super::*;

impl Mirror {
    /// Reads the ring-state Secrets of this ring and returns the view of the one that parses
    /// with the newest `updated` (several can exist: a leader's, a stale one, a forged one;
    /// until the index is signed a forged one is as good as write access to Secrets here).
    pub async fn load_state(&self) -> Result<Option<FoundState>, SyncError> {
        let trust = self.pin.trust();
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{RING_STATE_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        let mut best: Option<FoundState> = None;
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
            let (index, version) = match parse_ring_state(
                &text,
                self.expected_ring.as_deref(),
                &trust,
            ) {
                Ok((index, Verified::Signed { version, .. })) => (index, version),
                Ok((index, Verified::Unsigned)) => (index, 0),
                Err(e) => {
                    tracing::warn!(secret = %secret.name_any(), "ignoring a ring-state Secret: {}", crate::error_chain(&e));
                    continue;
                }
            };
            if best
                .as_ref()
                .is_some_and(|b| (b.version, b.view.updated) >= (version, index.updated))
            {
                continue;
            }
            let ever = item(KIDS_EVER_ITEM)
                .map(|t| parse_kids(&t))
                .unwrap_or_default();
            let last_active = item(LAST_ACTIVE_ITEM).and_then(|t| Kid::parse(t.trim()).ok());
            best = Some(FoundState {
                version,
                view: RingView::new(&index, &ever, last_active),
                name: secret.name_any(),
            });
        }
        Ok(best)
    }

    /// A follower's poll: publishes the ring-state Secret's view, verified under the pinned
    /// anchor. A replica with no anchor pinned yet (no `--ring-anchor`) pins from the store
    /// itself (one read of the index), never from a Secret that whoever can write Secrets in
    /// this namespace could have written; until it has, it takes no view, so it seals nothing.
    pub async fn follow(&mut self) -> Result<(), SyncError> {
        let mut from_store = None;
        if self.pin.anchor.is_none() {
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
            self.accepted(&verified).await;
            from_store = Some(index);
        }
        // An unsigned ring (no anchor): its own index, never a Secret's copy of it.
        let found = match self.pin.anchor {
            Some(_) => self.load_state().await?,
            None => None,
        };
        match (found, from_store) {
            (Some(found), _) => {
                // A follower's floor too only rises: a ring-state Secret rewritten with an
                // older signed index of the ring is then refused (load_state verifies with
                // it), and the follower keeps the view it has.
                self.pin.floor = self.pin.floor.max(found.version);
                self.state.ring_view.publish(found.view);
            }
            (None, Some(index)) => {
                let view = RingView::new(&index, &self.cache.ever, self.cache.last_active.clone());
                self.state.ring_view.publish(view);
            }
            (None, None) => {}
        }
        // A follower keeps the view it holds past its expiry too (an expired copy is refused
        // above): the gauge says so; the leader's Event names it.
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
            .set(i64::from(expired));
        Ok(())
    }

    /// Where ring-level Events go: the ring-state Secret this replica wrote, else the one it
    /// found (`found`).
    pub(super) fn state_reference(&self, found: Option<&str>) -> Option<ObjectReference> {
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
            self.state.metrics.key_source_index_expired.set(0);
            return;
        };
        self.state.metrics.key_source_index_expired.set(1);
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
        self.cache.state_merged = true;
        if let Some(found) = found {
            self.cache.found_state = Some(found.name.clone());
            // The version floor survives a restart: the copy was verified again under the
            // pinned anchor, so whoever can write only the index cannot replay an older
            // signed index to a restarted controller.
            if found.version > self.pin.floor {
                self.pin.floor = found.version;
                self.state
                    .metrics
                    .key_source_ring_version
                    .set(i64::try_from(found.version).unwrap_or(i64::MAX));
            }
            self.cache.ever.extend(found.view.ever.iter().cloned());
            if self.cache.last_active.is_none() {
                self.cache.last_active.clone_from(&found.view.last_active);
            }
            if publish && self.state.ring_view.current().is_none() {
                self.state.ring_view.publish(found.view);
            }
        }
        Ok(())
    }

    /// Records an index accepted from the store: the version floor, and the anchor when this
    /// is the first signed history this controller accepts.
    pub(super) async fn accepted(&mut self, verified: &Verified) {
        self.state
            .metrics
            .key_source_ring_signed
            .set(i64::from(matches!(verified, Verified::Signed { .. })));
        let expires = match verified {
            Verified::Signed { expires, .. } => expires.map_or(0, |e| e.as_second()),
            Verified::Unsigned => 0,
        };
        self.state.metrics.key_source_index_expiry.set(expires);
        if matches!(verified, Verified::Unsigned) {
            tracing::warn!(
                ring = %self.ring.name(),
                "the ring's index is not signed (written by an older kseal): its keys open, but \
                 anyone who can write it chooses the sealing key; the seeder signs it once with \
                 `kseal keys sign`"
            );
        }
        let floor = self.pin.floor;
        if let Some(anchor) = self.pin.accept(verified) {
            self.pin_anchor(anchor, "the ring").await;
        }
        if self.pin.floor != floor {
            self.state
                .metrics
                .key_source_ring_version
                .set(i64::try_from(self.pin.floor).unwrap_or(i64::MAX));
        }
    }

    /// Pins `anchor` on first use: says so in a log line, an Event and a metric.
    pub(super) async fn pin_anchor(&mut self, anchor: Kid, from: &str) {
        self.pin.anchor = Some(anchor.clone());
        self.state.metrics.key_source_ring_anchor_pinned.set(1);
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
        if self.cache.state_written.as_ref() == Some(&data) {
            // Unchanged: written again only if someone removed or changed it (a rolled-back
            // or forged copy is repaired from the index this leader verified).
            if let Some(name) = &self.cache.state_name {
                match self.api.get_opt(name).await {
                    Ok(Some(current)) if current.data.as_ref() == Some(&data) => return,
                    Ok(Some(_)) => {}
                    Ok(None) => self.cache.state_name = None,
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
                let problem = replaced.and_then(|before| self.copy_problem(&before, &data));
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
        let trust = match &self.pin.anchor {
            Some(anchor) => kseal_keystore::Trust::anchored(anchor.clone()).accept_expired(true),
            None => self.pin.trust().accept_expired(true),
        };
        let held = self.cache.index.as_ref().map_or(0, |i| i.version);
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
        // Only a copy this leader wrote can have been rolled back or changed behind it; an
        // older copy found at start, or the one it wrote last, is the ordinary update.
        let ours = self.cache.state_name.as_deref() == Some(before.name_any().as_str());
        let last = self.cache.state_written.as_ref().filter(|_| ours)?;
        if before.data.as_ref() == Some(last) {
            return None;
        }
        Some(if version < held {
            format!("it was rolled back to version {version} of the index")
        } else {
            "its content was changed by someone other than this leader".to_owned()
        })
    }

    /// Writes `data` into this ring's ring-state Secret: the one this replica wrote, else the
    /// one replicas read (the newest verified), else one that fails verification (repaired in
    /// place), else a new one. Returns it, and what it held before when it was replaced.
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
                    .or_else(|| candidates.iter().find(|_| best.is_none()))
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
                self.cache.keys.insert(kid, Ok(pair));
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

    async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
        tokio::time::timeout(DEADLINE, future)
            .await
            .unwrap_or_else(|_| panic!("{what}: still running after {DEADLINE:?}"))
    }

    /// Test-only 2048-bit keys; do not copy (kseal generates 4096-bit keys).
    fn pair() -> KeyPair {
        KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap()
    }

    async fn ring(dir: &std::path::Path, anchor: Option<&KeyPair>) -> Ring {
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

    fn mirror(ring: Ring, client: &Client) -> Mirror {
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
    async fn events_about(
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

    /// The proven mirror of `kid` in the controller namespace, if any.
    async fn mirror_secret(client: &Client, kid: &Kid) -> Option<Secret> {
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
}
