//! The mirror: reading the ring's new keys and writing each usable key into a proven mirror
//! key Secret, marking the active one, and removing a key that left the ring only after the
//! grace, never the last one, and under a signed index only once that index retires it.

use super::*;

impl Mirror {
    /// One Warning event (on the ring-state Secret) each time the active key becomes unusable
    /// for a new reason; the key loader keeps the readiness detail and the gauge.
    pub(super) async fn warn_active_unavailable(&mut self, active_mirrored: bool) {
        let Some(index) = &self.cache.index else {
            return;
        };
        let withheld = self.cache.withheld.clone();
        let problem = match (&index.active, active_mirrored) {
            _ if withheld.is_some() => withheld.clone(),
            (Some(_), true) => None,
            (None, _) => Some(format!("ring {} names no active key", self.ring.name())),
            (Some(active), false) => {
                // What seals now, from the loader (a key Secret that is not a proven mirror may
                // hold a kid and seal: attack review, rounds 9 and 10, where "no key seals" and
                // "the last verified active key keeps sealing" were said while another key
                // sealed).
                let sealing = self
                    .state
                    .keys
                    .ring()
                    .sealing_key()
                    .map(|k| Kid::of(k.public_key()));
                let now = match (&sealing, &self.cache.last_active) {
                    (Some(k), Some(last)) if k == last && last != active => format!(
                        "the last verified active key {} keeps sealing",
                        last.short()
                    ),
                    (Some(k), _) if k == active => format!(
                        "it seals from a key Secret in this namespace that is not a mirror of \
                         the ring (check who wrote it: {})",
                        active.short()
                    ),
                    (Some(k), _) => format!("key {} seals meanwhile", k.short()),
                    (None, _) => "no key seals".to_owned(),
                };
                Some(format!(
                    "the active key {} of ring {} could not be mirrored; {now}",
                    active.short(),
                    self.ring.name(),
                ))
            }
        };
        if problem == self.cache.active_warned {
            return;
        }
        self.cache.active_warned.clone_from(&problem);
        // No copy of its own (none written: copies a digest-less marker cannot vouch for
        // disagree): on the Lease, else the Pod, never silent.
        let reference = self
            .cache
            .state_ref
            .clone()
            .or_else(|| self.state_reference(None));
        let (Some(problem), Some(reference)) = (problem, reference) else {
            return;
        };
        tracing::warn!("{problem}");
        let reason = if withheld.is_some() {
            "SealingWithheld"
        } else {
            "ActiveKeyUnavailable"
        };
        self.event_on(&reference, EventType::Warning, reason, problem)
            .await;
    }

    /// A Secret that looks like a mirror of this ring but is not a proven one: one Warning
    /// event and a count per Secret and reason; the Secret itself is never touched.
    pub(super) async fn warn_unproven(
        &mut self,
        secret: &Secret,
        reason: &'static str,
        note: String,
    ) {
        let uid = secret
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| secret.name_any());
        if !self.cache.warned.insert((uid, reason)) {
            return;
        }
        self.state
            .metrics
            .key_source_mirror_conflicts
            .get_or_create(&KeyErrorLabels {
                reason: reason.to_owned(),
            })
            .inc();
        tracing::warn!(secret = %secret.name_any(), reason, "{note}");
        self.event(secret, EventType::Warning, "NotAMirror", note)
            .await;
    }

    /// Reads the keys of the index that are not cached yet: new ones, and ones listed but not
    /// readable at the last poll (e.g. a replica region lagging), which are retried at every
    /// poll without re-reading the index and looked for between polls ([`super::absent`]).
    pub(super) async fn read_new_keys(&mut self, report: &mut SyncReport) -> Result<(), SyncError> {
        let Some(index) = self.cache.index.clone() else {
            return Ok(());
        };
        let mut missing = Vec::new();
        for entry in &index.keys {
            if self.cache.keys.contains_key(&entry.kid) {
                continue;
            }
            // Found but refused before: read again only once the store's version of it
            // changed (one metadata call instead of a read and the same refusal).
            if let Some(seen) = self.cache.absent.seen(&entry.kid) {
                let now = self.ring.key_version(&entry.kid).await;
                count(&self.state, "describe_key", outcome(&now));
                if matches!(&now, Ok(Some(v)) if *v == seen) {
                    missing.push((entry.kid.clone(), Some(seen)));
                    continue;
                }
            }
            let read = self.ring.read_key(&entry.kid).await;
            count(&self.state, "get_key", outcome(&read));
            report.keys_read += 1;
            match read {
                Ok(pair) => {
                    self.cache.keys.insert(entry.kid.clone(), pair);
                }
                Err(
                    e @ (kseal_keystore::Error::BadKey { .. }
                    | kseal_keystore::Error::Malformed { .. }),
                ) => {
                    tracing::warn!(
                        kid = %entry.kid.short(),
                        reason = e.reason(),
                        "skipping a key of the ring: {}",
                        crate::error_chain(&e)
                    );
                    self.state
                        .metrics
                        .key_load_errors
                        .get_or_create(&crate::metrics::KeyErrorLabels {
                            reason: "remote_invalid".to_owned(),
                        })
                        .inc();
                    // Not kept as a verdict: read again once the store's version of it
                    // changes, at a poll or a probe (a directory restore copied file by file
                    // and caught half done).
                    let seen = self.ring.key_version(&entry.kid).await.ok().flatten();
                    missing.push((entry.kid.clone(), seen));
                }
                // Listed but not readable (yet): not cached, without failing the other keys;
                // the leader looks for it between polls ([`super::absent`]).
                Err(e @ kseal_keystore::Error::NotFound { .. }) => {
                    if !self.cache.absent.contains(&entry.kid) {
                        tracing::warn!(
                            kid = %entry.kid.short(),
                            "a key of the ring's index is missing from the store; looking for it \
                             until it is back: {}",
                            crate::error_chain(&e)
                        );
                    }
                    missing.push((entry.kid.clone(), None));
                }
                Err(e) => return Err(self.store_err(e)),
            }
        }
        self.cache
            .absent
            .found_missing(missing, tokio::time::Instant::now());
        Ok(())
    }

    pub(super) fn publish_gauges(&self) {
        let Some(index) = &self.cache.index else {
            return;
        };
        let metrics = &self.state.metrics;
        metrics
            .key_source_ring_keys
            .set(i64::try_from(index.keys.len()).unwrap_or(i64::MAX));
        metrics.key_source_key_age_seconds.clear();
        let now = jiff::Timestamp::now();
        for entry in &index.keys {
            let age = now.duration_since(entry.added).as_secs();
            metrics
                .key_source_key_age_seconds
                .get_or_create(&crate::metrics::KidLabels {
                    kid: entry.kid.short().to_owned(),
                })
                .set(age);
        }
    }

    pub(super) fn desired_secret(&self, kid: &Kid, pair: &KeyPair, active: bool) -> Option<Secret> {
        let entry = KeyEntry::from_pair(pair).ok()?;
        let data = BTreeMap::from([
            (
                PRIVATE_KEY_ITEM.to_owned(),
                ByteString(entry.private_key_pem().as_bytes().to_vec()),
            ),
            (
                CERTIFICATE_ITEM.to_owned(),
                ByteString(entry.certificate_pem().as_bytes().to_vec()),
            ),
        ]);
        Some(Secret {
            metadata: ObjectMeta {
                generate_name: Some(mirror_name_prefix(kid)),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (
                        SEALING_KEY_LABEL.to_owned(),
                        SEALING_KEY_LABEL_ACTIVE.to_owned(),
                    ),
                    (MIRROR_LABEL.to_owned(), "true".to_owned()),
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        "kseal-controller".to_owned(),
                    ),
                ])),
                annotations: Some(BTreeMap::from([
                    (KID_ANNOTATION.to_owned(), kid.to_string()),
                    (RING_ANNOTATION.to_owned(), self.ring.name().to_owned()),
                    (SOURCE_ANNOTATION.to_owned(), self.source.clone()),
                    (ACTIVE_ANNOTATION.to_owned(), active.to_string()),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some(KEY_SECRET_TYPE.to_owned()),
            data: Some(data),
            ..Secret::default()
        })
    }

    pub(super) async fn event(
        &self,
        secret: &Secret,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.event_on(&secret.object_ref(&()), type_, reason, note)
            .await;
    }

    pub(super) async fn event_on(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(bounded_note(reason, note)),
            action: "MirrorKey".into(),
            secondary: None,
        };
        if self.may_write().is_err() {
            return;
        }
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(
                reason,
                error = %crate::error_chain(&e),
                "failed to publish key-source event"
            );
        }
    }

    /// A Warning Event whose note names what happened, published as an Event of its own:
    /// the shared recorder would fold it into an earlier Event with the same reason on the
    /// same object, whose note names something else. Callers publish each once (per refusal,
    /// index version or repair), so nothing needs folding.
    pub(super) async fn warn_on(&self, reference: &ObjectReference, reason: &str, note: String) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(bounded_note(reason, note)),
            action: "VerifyRing".into(),
            secondary: None,
        };
        if self.may_write().is_err() {
            return;
        }
        let recorder = Recorder::new(self.api.clone().into_client(), self.reporter.clone());
        if let Err(e) = recorder.publish(&event, reference).await {
            tracing::warn!(
                reason,
                error = %crate::error_chain(&e),
                "failed to publish key-source event"
            );
        }
    }

    pub(super) async fn activated_event(&self, secret: &Secret, entry: &IndexEntry) {
        let note = format!(
            "key {} ({}) of ring {} seals from now on",
            entry.kid.short(),
            entry.fingerprint,
            self.ring.name()
        );
        self.event(secret, EventType::Normal, "SealingKeyActivated", note)
            .await;
    }

    /// Brings the mirror in line with the index: lists this ring's mirrors, mirrors the
    /// index's usable keys, then marks and retires the mirrors of keys that left it.
    pub(super) async fn reconcile_mirror(
        &mut self,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let Some(index) = self.cache.index.clone() else {
            return Ok(());
        };
        let ours = self.list_ours().await?;
        let mirrored_in_index = self.mirror_index_keys(&index, &ours, report).await?;
        self.retire_departed(&index, &ours, mirrored_in_index, report)
            .await
    }

    /// Lists the labelled mirrors of this ring, with the kid each is filed under and whether
    /// its material proves it.
    async fn list_ours(&self) -> Result<Vec<Filed>, SyncError> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{MIRROR_LABEL}=true")))
            .await
            .map_err(|e| self.kube_err(e))?;
        Ok(listed
            .items
            .into_iter()
            .filter(|s| {
                s.annotations().get(RING_ANNOTATION).map(String::as_str) == Some(self.ring.name())
            })
            .map(|s| {
                let kid = s
                    .annotations()
                    .get(KID_ANNOTATION)
                    .and_then(|k| Kid::parse(k).ok());
                let proven = kid.as_ref().is_some_and(|k| mirrored_pair(&s, k).is_some());
                Filed {
                    secret: s,
                    kid,
                    proven,
                }
            })
            .collect())
    }

    /// Keys of the index: create missing mirrors, fix the active flag, clear missing marks.
    /// Returns how many keys of the index have a proven mirror.
    async fn mirror_index_keys(
        &mut self,
        index: &Index,
        ours: &[Filed],
        report: &mut SyncReport,
    ) -> Result<usize, SyncError> {
        let any_proven = ours.iter().any(|f| f.proven);
        let mut mirrored_in_index = 0usize;
        for entry in &index.keys {
            let Some(pair) = self.cache.keys.get(&entry.kid) else {
                continue;
            };
            let pair = pair.clone();
            // Under a withheld index no mirror is flagged active: nothing seals from it.
            let active = index.active.as_ref() == Some(&entry.kid) && self.cache.withheld.is_none();
            let filed: Vec<&Filed> = ours
                .iter()
                .filter(|f| f.kid.as_ref() == Some(&entry.kid))
                .collect();
            let existing = filed.iter().find(|f| f.proven).map(|f| &f.secret);
            let unproven: Vec<Secret> = filed
                .iter()
                .filter(|f| !f.proven)
                .map(|f| f.secret.clone())
                .collect();
            for secret in &unproven {
                let note = format!(
                    "this Secret is labelled as the mirror of key {} of ring {} but does not hold that key: it is not used as the mirror and is left as it is",
                    entry.kid.short(),
                    self.ring.name()
                );
                self.warn_unproven(secret, "material_mismatch", note).await;
            }
            let key = IndexKey {
                entry,
                active,
                any_proven,
            };
            let mirrored = match existing {
                None => {
                    self.create_mirror(&key, &pair, !unproven.is_empty(), report)
                        .await?
                }
                Some(secret) => {
                    self.update_mirror(&key, secret, report).await?;
                    true
                }
            };
            if mirrored {
                mirrored_in_index += 1;
            }
        }
        Ok(mirrored_in_index)
    }

    /// Creates the mirror of a key of the index that has no proven one (`repairs`: Secrets
    /// filed under its kid do not hold it). Returns whether the mirror now exists.
    async fn create_mirror(
        &mut self,
        key: &IndexKey<'_>,
        pair: &KeyPair,
        repairs: bool,
        report: &mut SyncReport,
    ) -> Result<bool, SyncError> {
        let IndexKey {
            entry,
            active,
            any_proven,
        } = *key;
        let Some(secret) = self.desired_secret(&entry.kid, pair, active) else {
            return Ok(false);
        };
        self.may_write()?;
        match self.api.create(&PostParams::default(), &secret).await {
            Ok(created) => {
                report.active_mirrored |= active;
                report.created.push(created.name_any());
                if active && any_proven {
                    // Mirrored and activated in one poll (`rotate --now`).
                    report.activated = Some(created.name_any());
                    self.activated_event(&created, entry).await;
                }
                tracing::info!(
                    secret = %created.name_any(),
                    kid = %entry.kid.short(),
                    fingerprint = %entry.fingerprint,
                    active,
                    "mirrored a key of the fleet ring"
                );
                let (reason, note) = if !repairs {
                    (
                        "KeyMirrored",
                        format!(
                            "key {} ({}) of ring {} mirrored{}",
                            entry.kid.short(),
                            entry.fingerprint,
                            self.ring.name(),
                            if active { "; it seals" } else { "" }
                        ),
                    )
                } else {
                    report.repaired.push(created.name_any());
                    (
                        "MirrorRepaired",
                        format!(
                            "key {} of ring {} mirrored anew: the Secret filed under it did not hold it (left as it is)",
                            entry.kid.short(),
                            self.ring.name()
                        ),
                    )
                };
                self.event(&created, EventType::Normal, reason, note).await;
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // The generated name was taken: try again at the next poll.
                self.state
                    .metrics
                    .key_source_mirror_conflicts
                    .get_or_create(&KeyErrorLabels {
                        reason: "name_taken".to_owned(),
                    })
                    .inc();
                tracing::warn!(
                    kid = %entry.kid.short(),
                    "cannot mirror key {} of ring {} yet: the generated name was taken; retrying at the next poll",
                    entry.kid.short(),
                    self.ring.name()
                );
                Ok(false)
            }
            Err(e) => Err(self.kube_err(e)),
        }
    }

    /// Sets the active flag of a key's proven mirror and clears its missing mark, when either
    /// is off.
    async fn update_mirror(
        &mut self,
        key: &IndexKey<'_>,
        secret: &Secret,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let IndexKey { entry, active, .. } = *key;
        report.active_mirrored |= active;
        let annotations = secret.annotations();
        let active_now = annotations.get(ACTIVE_ANNOTATION).map(String::as_str) == Some("true");
        let missing = annotations.contains_key(MISSING_SINCE_ANNOTATION);
        if active_now != active || missing {
            let patch = serde_json::json!({"metadata": {"annotations": {
                ACTIVE_ANNOTATION: active.to_string(),
                MISSING_SINCE_ANNOTATION: null,
            }}});
            self.may_write()?;
            let patched = self
                .api
                .patch(
                    &secret.name_any(),
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(|e| self.kube_err(e))?;
            if active && !active_now {
                report.activated = Some(patched.name_any());
                tracing::info!(
                    secret = %patched.name_any(),
                    kid = %entry.kid.short(),
                    "the fleet ring's sealing key changed: new SealedSecrets are sealed with {}",
                    entry.kid.short()
                );
                self.activated_event(&patched, entry).await;
            }
        }
        Ok(())
    }

    /// Mirrors of keys no longer in the index: mark, then remove after the grace period,
    /// never the ring's last mirrored key, and only proven mirrors of a key this
    /// controller saw in the ring (a hand-made Secret is never touched). Under a signed
    /// index, only a key the index lists as retired (the seeder's `kseal keys retire`) leaves
    /// the mirror: one that merely vanished from it (an older signed index replayed, with the
    /// ring-state Secret rolled back to match) is kept, with a Warning. An unsigned index (an
    /// older kseal) proves nothing either way: there a key that left it is retired as before.
    async fn retire_departed(
        &mut self,
        index: &Index,
        ours: &[Filed],
        mirrored_in_index: usize,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let now = jiff::Timestamp::now();
        let signed = index.schema != kseal_keystore::UNSIGNED_INDEX_SCHEMA;
        if self.cache.withheld.is_none() {
            self.cache.withheld_kept.clear();
        }
        self.cache
            .missing_seen
            .retain(|kid, _| index.entry(kid).is_none());
        let mut kept = 0usize;
        for Filed {
            secret,
            kid,
            proven,
        } in ours
        {
            if kid.as_ref().is_some_and(|k| index.entry(k).is_some()) {
                continue;
            }
            // An index the history marker cannot vouch for retires nothing (attack review,
            // round 13, R2: a fork retiring the live active key removed its mirror).
            if self.cache.withheld.is_some() {
                if let Some(kid) = kid
                    && self.cache.withheld_kept.insert(kid.clone())
                {
                    tracing::warn!(
                        secret = %secret.name_any(),
                        kid = %kid.short(),
                        "key {} is not in version {} of ring {}'s index, which the history \
                         marker cannot vouch for: its retirements are ignored and this mirror \
                         is kept",
                        kid.short(),
                        index.version,
                        self.ring.name()
                    );
                }
                continue;
            }
            let Some(kid) = kid.as_ref().filter(|k| self.cache.ever.contains(*k)) else {
                let note = format!(
                    "this Secret is labelled as a mirror of ring {} under a key the ring never listed: it opens like any key Secret, but it is not a mirror and is never changed nor removed",
                    self.ring.name()
                );
                self.warn_unproven(secret, "unknown_kid", note).await;
                continue;
            };
            if !proven {
                let note = format!(
                    "this Secret is labelled as the mirror of key {} of ring {} but does not hold that key: it is never changed nor removed",
                    kid.short(),
                    self.ring.name()
                );
                self.warn_unproven(secret, "material_mismatch", note).await;
                continue;
            }
            if signed && !index.retired.iter().any(|r| &r.kid == kid) {
                kept += 1;
                self.keep_unretired(secret, kid, index).await?;
                continue;
            }
            // Under an unsigned index, the grace runs from when this process first saw the
            // key missing too: an annotation dated back by whoever can write Secrets here
            // does not shorten it.
            let first_seen = *self.cache.missing_seen.entry(kid.clone()).or_insert(now);
            let since = secret
                .annotations()
                .get(MISSING_SINCE_ANNOTATION)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let Some(since) = since else {
                self.mark_missing(secret, now).await?;
                continue;
            };
            // The grace runs from the signed retirement too (an annotation dated back by
            // whoever can write Secrets here does not shorten it), and a date ahead of now
            // is no time gone.
            let retired_at = index
                .retired
                .iter()
                .find(|r| &r.kid == kid)
                .map(|r| r.retired);
            let since = match retired_at {
                Some(at) if signed => since.max(at),
                _ if !signed => since.max(first_seen),
                _ => since,
            };
            let gone_for = now.duration_since(since);
            if gone_for.is_negative() || gone_for.unsigned_abs() < self.retire_grace {
                continue;
            }
            if mirrored_in_index == 0 {
                tracing::warn!(
                    secret = %secret.name_any(),
                    "keeping a retired key's mirror: it would leave this cluster without any key of the ring"
                );
                continue;
            }
            self.remove_retired(secret, kid, report).await?;
        }
        self.state
            .metrics
            .key_source_mirrors_kept_unretired
            .set(self.ring.name(), i64::try_from(kept).unwrap_or(i64::MAX));
        Ok(())
    }

    /// The proven mirror of `kid`, which the signed `index` neither lists nor retired: kept
    /// (no longer flagged active), with one `KeyMissingFromRing` Warning per index version.
    async fn keep_unretired(
        &mut self,
        secret: &Secret,
        kid: &Kid,
        index: &Index,
    ) -> Result<(), SyncError> {
        if secret
            .annotations()
            .get(ACTIVE_ANNOTATION)
            .map(String::as_str)
            == Some("true")
        {
            let patch = serde_json::json!({"metadata": {"annotations": {
                ACTIVE_ANNOTATION: "false",
            }}});
            self.may_write()?;
            self.api
                .patch(
                    &secret.name_any(),
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(|e| self.kube_err(e))?;
        }
        if self.cache.kept_warned.get(kid) == Some(&index.version) {
            return Ok(());
        }
        let note = format!(
            "key {} is missing from version {} of ring {}'s signed index, which does not retire \
             it: its mirror is kept (only a key the signed index retires is removed), and \
             SealedSecrets sealed with it keep opening. The index may be an older one replayed \
             or rolled back; the seeder retires a key with `kseal keys retire`",
            kid.short(),
            index.version,
            self.ring.name()
        );
        tracing::warn!(secret = %secret.name_any(), kid = %kid.short(), "{note}");
        self.warn_on(&secret.object_ref(&()), "KeyMissingFromRing", note)
            .await;
        self.cache.kept_warned.insert(kid.clone(), index.version);
        Ok(())
    }

    /// Marks the mirror of a key that left the ring as missing since `now` (and no longer
    /// active), which starts its retire grace.
    async fn mark_missing(&self, secret: &Secret, now: jiff::Timestamp) -> Result<(), SyncError> {
        let annotations = secret.annotations();
        let mut patch = serde_json::json!({"metadata": {"annotations": {
            MISSING_SINCE_ANNOTATION: now.to_string(),
        }}});
        if annotations.get(ACTIVE_ANNOTATION).map(String::as_str) == Some("true") {
            patch["metadata"]["annotations"][ACTIVE_ANNOTATION] = "false".into();
        }
        self.may_write()?;
        self.api
            .patch(
                &secret.name_any(),
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| self.kube_err(e))?;
        tracing::warn!(
            secret = %secret.name_any(),
            grace = ?self.retire_grace,
            "a mirrored key left the fleet ring; its mirror is removed after the retire grace"
        );
        self.event(
            secret,
            EventType::Warning,
            "KeyLeftRing",
            format!(
                "this key left ring {}: its mirror is removed after the retire grace ({}) \
                 unless the ring lists it again; SealedSecrets sealed with it stop opening \
                 then",
                self.ring.name(),
                jiff::SignedDuration::try_from(self.retire_grace)
                    .map(|d| format!("{d:#}"))
                    .unwrap_or_else(|_| format!("{:?}", self.retire_grace))
            ),
        )
        .await;
        Ok(())
    }

    /// Deletes the mirror of a key retired past its grace (unless it changed or went
    /// meanwhile), with a `KeyRetired` event.
    async fn remove_retired(
        &self,
        secret: &Secret,
        kid: &Kid,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: secret.metadata.uid.clone(),
                resource_version: secret.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        self.may_write()?;
        match self.api.delete(&secret.name_any(), &params).await {
            Ok(_) => {
                report.retired.push(secret.name_any());
                tracing::info!(secret = %secret.name_any(), "removed the mirror of a key retired from the fleet ring");
                self.event(
                    secret,
                    EventType::Normal,
                    "KeyRetired",
                    format!(
                        "key {} left ring {} over {} ago: its mirror is removed",
                        kid.short(),
                        self.ring.name(),
                        jiff::SignedDuration::try_from(self.retire_grace)
                            .map(|d| format!("{d:#}"))
                            .unwrap_or_default()
                    ),
                )
                .await;
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(e) => Err(self.kube_err(e)),
        }
    }
}

/// A labelled mirror of this ring, with the kid it is filed under and whether its material
/// proves it (labels and annotations alone prove nothing).
struct Filed {
    secret: Secret,
    kid: Option<Kid>,
    proven: bool,
}

/// A key of the index being mirrored, and what decides its mirror's flags and events.
#[derive(Clone, Copy)]
struct IndexKey<'a> {
    entry: &'a IndexEntry,
    /// The index names it active.
    active: bool,
    /// Some Secret of this ring is a proven mirror (so a new active key is an activation).
    any_proven: bool,
}

/// The key a mirror Secret holds, if it is usable (certificate matching the private key) and
/// its hash is `kid`.
pub(super) fn mirrored_pair(secret: &Secret, kid: &Kid) -> Option<KeyPair> {
    let pem = crate::keys::material_from_secret(secret).pem.ok()?;
    KeyPair::from_pem(&pem.private_key, &pem.certificate)
        .ok()
        .filter(|pair| &Kid::of(pair.public_key()) == kid)
}

/// The most an Event's note may hold: the API server refuses a longer one (`events.k8s.io/v1`
/// `note`, 1 KiB), and the Event is then lost.
const MAX_NOTE_BYTES: usize = 1024;

/// `note`, cut to what an Event may hold (at a character boundary, with how much was cut):
/// some notes list what whoever writes Secrets here named (ring-state copies), so their length
/// is theirs to choose (attack review, round 15: a Warning naming two planted copies was over
/// 1 KiB and never published). A cut note is logged whole, at WARN.
fn bounded_note(reason: &str, note: String) -> String {
    if note.len() <= MAX_NOTE_BYTES {
        return note;
    }
    const TAIL: usize = 64;
    let mut end = MAX_NOTE_BYTES - TAIL;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    tracing::warn!(reason, note = %note, "an Event's note was cut to 1 KiB: this is it whole");
    format!(
        "{} … ({} bytes more: the controller's log has the whole note)",
        &note[..end],
        note.len() - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_note_is_cut_to_what_the_api_server_takes() {
        let short = "a".repeat(MAX_NOTE_BYTES);
        assert_eq!(bounded_note("R", short.clone()), short);
        // Planted copies' names make a note as long as whoever wrote them wants.
        let long = format!("{} {}", "ring-state copy ".repeat(100), "é".repeat(300));
        let cut = bounded_note("R", long.clone());
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert!(cut.starts_with("ring-state copy ring-state copy"));
        assert!(cut.ends_with("bytes more: the controller's log has the whole note)"));
        // Cut at a character boundary, whatever the text.
        let accents = "é".repeat(MAX_NOTE_BYTES);
        let cut = bounded_note("R", accents);
        assert!(cut.len() <= MAX_NOTE_BYTES);
        assert!(cut.starts_with('é'));
    }
}
