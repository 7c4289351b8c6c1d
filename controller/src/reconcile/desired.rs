//! The desired Secret: unsealing a SealedSecret (on the RSA pool), how it is written over an
//! existing Secret (owned, managed or patched) and whether an existing Secret is in sync.

use super::*;

/// The data items a SealedSecret produces, when known without decrypting (not for the
/// deprecated whole-Secret `spec.data`).
pub(super) fn expected_items(ss: &SealedSecret) -> Option<BTreeSet<String>> {
    if ss.spec.data.as_deref().is_some_and(|d| !d.is_empty()) {
        return None;
    }
    let mut items: BTreeSet<String> = ss.spec.encrypted_data.keys().cloned().collect();
    if let Some(data) = ss.spec.template.as_ref().and_then(|t| t.data.as_ref()) {
        for (key, value) in data {
            if value.is_some() {
                items.insert(key.clone());
            } else {
                items.remove(key);
            }
        }
    }
    Some(items)
}

pub(super) fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

pub(super) fn is_true(meta: &kube::api::ObjectMeta, key: &str) -> bool {
    annotation(meta, key) == Some(TRUE)
}

pub(super) fn controlled_by(secret: &Secret, uid: &str) -> bool {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

pub(super) fn skips_owner_reference(ss: &SealedSecret) -> bool {
    ss.spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .is_some_and(|m| is_true(m, SKIP_SET_OWNER_REFERENCES_ANNOTATION))
}

/// How an existing Secret may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Replace data, labels, annotations and owner references (ours, or `managed`).
    Replace,
    /// Merge data, labels and annotations; take ownership only when also `managed`.
    Patch { own: bool },
}

/// How `existing` may be written for `ss`, or [`Error::Unmanaged`]. Besides Bitnami's rules
/// (controlled by `ss`, or marked `managed` or `patch`), a Secret that `ss` asks to create
/// without an owner reference is ours when it carries our spec digest: without that, the
/// Secret kseal created would be "unmanaged" from the second reconcile on.
pub(super) fn mode_for(existing: &Secret, ss: &SealedSecret, uid: &str) -> Result<Mode> {
    let meta = &existing.metadata;
    let managed = is_true(meta, MANAGED_ANNOTATION);
    let ours_without_owner =
        skips_owner_reference(ss) && annotation(meta, SPEC_DIGEST_ANNOTATION).is_some();
    if is_true(meta, PATCH_ANNOTATION) {
        Ok(Mode::Patch { own: managed })
    } else if managed || controlled_by(existing, uid) || ours_without_owner {
        Ok(Mode::Replace)
    } else {
        Err(Error::Unmanaged {
            name: existing.name_any(),
        })
    }
}

pub(super) fn secret_type(s: &Secret) -> &str {
    s.type_.as_deref().unwrap_or("Opaque")
}

pub(super) fn empty_data() -> BTreeMap<String, ByteString> {
    BTreeMap::new()
}

/// Whether the existing Secret still holds what we wrote for `ss`, checked without
/// decrypting anything: digest (the current form, or the v1 form of a Secret written
/// before it), MAC over the data, owner reference, template labels and annotations present.
pub(super) fn in_sync(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    ss: &SealedSecret,
    existing: &Secret,
    mode: Mode,
    digest: &str,
    mac: MacCheck<'_>,
) -> bool {
    let meta = &existing.metadata;
    // From here on `digest` is the digest as stored, which the MAC covers.
    let Some(digest) = annotation(meta, SPEC_DIGEST_ANNOTATION)
        .filter(|stored| formats::digest_matches(stored, ss, digest))
    else {
        return false;
    };
    let uid = ss.metadata.uid.as_deref().unwrap_or_default();
    let wants_owner = !skips_owner_reference(ss)
        && matches!(mode, Mode::Replace | Mode::Patch { own: true })
        && !uid.is_empty();
    if wants_owner && !controlled_by(existing, uid) {
        return false;
    }
    if !ctx.config.drift_correction {
        return true;
    }
    let template_meta = ss.spec.template.as_ref().and_then(|t| t.metadata.as_ref());
    if ss.spec.data.is_none() {
        let subset = |want: Option<&BTreeMap<String, String>>,
                      have: Option<&BTreeMap<String, String>>| {
            want.into_iter()
                .flatten()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
        };
        let Some(tm) = template_meta else {
            return mac.verifies(ctx, ring, ss, existing, mode, digest);
        };
        let mut want_annotations = tm.annotations.clone().unwrap_or_default();
        want_annotations.remove(SPEC_DIGEST_ANNOTATION);
        want_annotations.remove(DATA_MAC_ANNOTATION);
        if !subset(tm.labels.as_ref(), meta.labels.as_ref())
            || !subset(Some(&want_annotations), meta.annotations.as_ref())
        {
            return false;
        }
        if let Some(t) = ss.spec.template.as_ref().and_then(|t| t.type_.as_deref())
            && t != secret_type(existing)
        {
            return false;
        }
    }
    mac.verifies(ctx, ring, ss, existing, mode, digest)
}

/// The unsealed Secret with our annotations, ready to write. Its data is zeroized when it is
/// dropped (it may wait for a retry in [`retained`](super::retained)).
pub(super) struct Desired {
    pub(super) secret: Secret,
    /// The keys that opened its items (and its deprecated `data` blob).
    pub(super) opened_by: Vec<KeyId>,
    /// The key its MAC names (the ring's preferred key when it was unsealed); `None` only
    /// until the MAC is stamped.
    pub(super) mac_key: Option<KeyId>,
    /// RSA private-key operations its unseal spent, not yet counted by outcome
    /// (`kseal_unseal_rsa_operations_total`); 0 once counted.
    pub(super) rsa_operations: u64,
    /// When it was unsealed: a result kept for a retry expires this long after, however
    /// often the retry fails ([`retained`](super::retained)).
    pub(super) unsealed_at: Instant,
}

impl Desired {
    /// Whether a result unsealed earlier may still be written: every key that opened it still
    /// opens in the object's namespace (`scoped`: a key left the ring, was marked
    /// compromised, or its ring's binding no longer covers the namespace), and the key its MAC
    /// names is still in the ring (`full`).
    pub(super) fn still_opens(&self, scoped: &KeyRing, full: &KeyRing) -> bool {
        self.opened_by.iter().all(|id| scoped.get(id).is_some())
            && self
                .mac_key
                .as_ref()
                .is_some_and(|id| full.get(id).is_some())
    }

    /// Overwrites the data with zeros.
    pub(super) fn wipe(&mut self) {
        wipe_data(&mut self.secret);
    }
}

/// Overwrites `secret`'s data values with zeros (`zeroize` clears each value's whole
/// allocation, then empties it).
pub(super) fn wipe_data(secret: &mut Secret) {
    use zeroize::Zeroize as _;
    for value in secret.data.iter_mut().flat_map(|d| d.values_mut()) {
        value.0.zeroize();
    }
}

/// A Secret that holds plaintext outside a [`Desired`]: the Secret read back before a
/// replace, the copies a write is built from. Its data is zeroized when it is dropped.
pub(super) struct Plain(pub(super) Secret);

impl Drop for Plain {
    fn drop(&mut self) {
        wipe_data(&mut self.0);
    }
}

impl Drop for Desired {
    fn drop(&mut self) {
        self.wipe();
    }
}

pub(super) async fn unseal(
    ctx: &Context,
    oref: &SsRef,
    ss: &Arc<SealedSecret>,
    ring: &Arc<KeyRing>,
    digest: &str,
) -> Result<Desired> {
    if ring.is_empty() {
        return Err(Error::NoKeys);
    }
    // With rings bound to namespaces, only the keys that open in this namespace are tried.
    let namespace = ss.metadata.namespace.as_deref().unwrap_or_default();
    let scoped = ctx.state.scoped(namespace);
    if let Some(refusal) = scoped.hinted_refusal(ss, namespace) {
        // The value names a key of a ring bound elsewhere: refused without an RSA operation.
        return Err(Error::RingBinding {
            reason: format!("it names {refusal}"),
            source: None,
        });
    }
    let (item_hints, object_hint) = ctx.with_object(oref, |o| {
        (
            o.item_hints.iter().cloned().collect(),
            o.object_hint().cloned(),
        )
    });
    // Held until this unseal has taught the affinity (only waits on a cold start).
    let (suggestions, _cold_turn) = ctx.affinity.suggest_waiting(ss).await;
    let mut options = UnsealOptions {
        accept_deprecated_v1_data: ctx.config.accept_deprecated_v1_data,
        item_hints,
        object_hint,
        ..UnsealOptions::default()
    };
    let (sealed, keys) = (ss.clone(), scoped.ring.clone());
    // RSA work runs on the RSA pool's threads, off the async worker threads.
    let (result, stats, cpu) = ctx
        .rsa_slots
        .unseal(move || {
            // Taken now that the slot is granted, from what the unseals before it taught;
            // only keys that open in this namespace.
            let suggested = suggestions.keys(&keys);
            options.preferred_keys = suggested.keys;
            options.guesses = suggested.guesses;
            options.guesses_at = suggested.guesses_at;
            let started = thread_cpu_time();
            let mut stats = OpenStats::default();
            let result = kseal_api::unseal_counted(&sealed, &keys, &options, &mut stats);
            (result, stats, thread_cpu_time().saturating_sub(started))
        })
        .await
        .map_err(|_| Error::Task)?;
    ctx.state
        .metrics
        .rsa_operations
        .inc_by(stats.rsa_operations);
    ctx.state.metrics.unseal_cpu.inc_by(cpu.as_secs_f64());
    let unsealed = match result {
        Ok(unsealed) => unsealed,
        Err(e) => {
            count_rsa(ctx, "unseal_failed", stats.rsa_operations);
            if let Some(not_tried) = scoped.not_tried()
                && matches!(e, kseal_api::Error::Decrypt { .. })
            {
                return Err(Error::RingBinding {
                    reason: format!(
                        "no key that opens in namespace {namespace} decrypts it (not tried here: {not_tried})"
                    ),
                    source: Some(Box::new(e)),
                });
            }
            return Err(
                super::loading::not_loaded(&e, ctx.state.ring_view.current())
                    .unwrap_or(Error::Unseal(e)),
            );
        }
    };
    ctx.affinity
        .learn(ss, &unsealed, |id| scoped.ring.get(id).is_some());
    ctx.state.opened.record(ss, &unsealed);
    remember_hints(ctx, oref, ss, &unsealed);
    let mut opened_by: Vec<KeyId> = unsealed.keys.values().cloned().collect();
    opened_by.extend(unsealed.deprecated_data_key.iter().cloned());
    // From here on the data is in `desired`, which zeroizes it when dropped.
    let mut desired = Desired {
        secret: unsealed.secret,
        opened_by,
        mac_key: None,
        rsa_operations: stats.rsa_operations,
        unsealed_at: Instant::now(),
    };
    let secret = &mut desired.secret;
    normalize(secret);
    desired.mac_key = Some(stamp_mac(ctx, ring, digest, secret)?);
    Ok(desired)
}

/// Teaches the object's key hints what opened it: the deprecated blob's key as the object
/// hint, and an item hint for each item another key than the implied one opened.
fn remember_hints(ctx: &Context, oref: &SsRef, ss: &SealedSecret, unsealed: &kseal_api::Unsealed) {
    let annotation_hint = ss.sealing_key_hint();
    ctx.with_object(oref, |o| {
        if unsealed.deprecated_data_key.is_some() {
            o.rare().object_hint = unsealed.deprecated_data_key.clone();
        }
        // An item opened by the key the next unseal tries first anyway (the object hint, or
        // the sealing-key annotation) needs no hint of its own: most objects keep none.
        let implied = o.object_hint().or(annotation_hint.as_ref()).cloned();
        o.item_hints = unsealed
            .keys
            .iter()
            .filter(|(_, key)| implied.as_ref() != Some(*key))
            .map(|(item, key)| (item.clone(), key.clone()))
            .collect();
    });
}

/// Annotates `secret` with the spec digest and the MAC over its data; the key the MAC was
/// made with.
fn stamp_mac(
    ctx: &Context,
    ring: &Arc<KeyRing>,
    digest: &str,
    secret: &mut Secret,
) -> Result<KeyId> {
    // The MAC key is the preferred key even while sealing is disabled (a fleet ring whose
    // active key is unusable still unseals).
    let sealing = ring.preferred_key().ok_or(Error::NoKeys)?;
    let key = ctx
        .mac_key(ring, MacVersion::V2, sealing.id())
        .ok_or(Error::NoKeys)?;
    let empty = empty_data();
    let tag = formats::mac_over(
        MacVersion::V2,
        &key,
        digest,
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default(),
        secret_type(secret),
        secret.data.as_ref().unwrap_or(&empty).iter(),
    )
    .ok_or(Error::NoKeys)?
    .finalize()
    .into_bytes();
    let annotations = secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(SPEC_DIGEST_ANNOTATION.to_owned(), digest.to_owned());
    annotations.insert(
        DATA_MAC_ANNOTATION.to_owned(),
        formats::format_mac(sealing.id(), tag.as_slice()),
    );
    Ok(sealing.id().clone())
}

/// Counts `n` RSA operations of the reconciler under `outcome`
/// (`kseal_unseal_rsa_operations_total`).
pub(super) fn count_rsa(ctx: &Context, outcome: &str, n: u64) {
    if n == 0 {
        return;
    }
    ctx.state
        .metrics
        .unseal_rsa_operations
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .inc_by(n);
}

/// CPU time of the calling thread so far.
pub(super) fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or_default(),
        u32::try_from(t.tv_nsec).unwrap_or_default(),
    )
}

/// Empty maps and lists read back from the API server as absent; compare like with like.
pub(super) fn normalize(s: &mut Secret) {
    let m = &mut s.metadata;
    if m.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        m.labels = None;
    }
    if m.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        m.annotations = None;
    }
    if m.owner_references.as_ref().is_some_and(Vec::is_empty) {
        m.owner_references = None;
    }
    if s.data.as_ref().is_some_and(BTreeMap::is_empty) {
        s.data = None;
    }
}

/// The existing Secret changed as `mode` prescribes. The values it replaces are zeroized in
/// the copy before they go.
pub(super) fn updated(existing: &Secret, desired: &Secret, mode: Mode) -> Plain {
    let mut out = Plain(existing.clone());
    let s = &mut out.0;
    let d = &desired.metadata;
    match mode {
        Mode::Replace => {
            let managed = is_true(&existing.metadata, MANAGED_ANNOTATION);
            s.metadata.labels = d.labels.clone();
            s.metadata.annotations = d.annotations.clone();
            if managed {
                // Still managed: a deletion re-creates it at once (see `secret_trigger`),
                // with or without an owner reference.
                s.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(MANAGED_ANNOTATION.to_owned(), TRUE.to_owned());
            }
            s.metadata.owner_references = d.owner_references.clone();
            wipe_data(s);
            s.data = desired.data.clone();
        }
        Mode::Patch { own } => {
            let merge = |into: &mut Option<BTreeMap<String, String>>,
                         from: &Option<BTreeMap<String, String>>| {
                if let Some(from) = from {
                    into.get_or_insert_with(BTreeMap::new)
                        .extend(from.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            };
            merge(&mut s.metadata.labels, &d.labels);
            merge(&mut s.metadata.annotations, &d.annotations);
            if own {
                s.metadata.owner_references = d.owner_references.clone();
            }
            if let Some(data) = &desired.data {
                let into = s.data.get_or_insert_with(BTreeMap::new);
                for (k, v) in data {
                    if let Some(mut old) = into.insert(k.clone(), v.clone()) {
                        zeroize::Zeroize::zeroize(&mut old.0);
                    }
                }
            }
        }
    }
    if desired.type_.is_some() {
        s.type_ = desired.type_.clone();
    }
    s.string_data = None;
    normalize(s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_wiped_secret_holds_no_value_and_keeps_its_keys() {
        let mut s = secret(&[("a", b"hunter2"), ("b", b"x")]);
        wipe_data(&mut s);
        let data = s.data.unwrap();
        assert_eq!(data.len(), 2);
        assert!(data.values().all(|v| v.0.is_empty()));
    }

    #[test]
    fn an_update_takes_the_desired_values_in_both_modes() {
        let existing = secret(&[("a", b"old"), ("kept", b"theirs")]);
        let desired = secret(&[("a", b"new")]);
        let replaced = updated(&existing, &desired, Mode::Replace);
        assert_eq!(replaced.0.data, desired.data);
        let patched = updated(&existing, &desired, Mode::Patch { own: false });
        let data = patched.0.data.as_ref().unwrap();
        assert_eq!(data["a"].0, b"new");
        assert_eq!(data["kept"].0, b"theirs");
        // The Secret read back is untouched: only the copy's replaced values were wiped.
        assert_eq!(existing.data.as_ref().unwrap()["a"].0, b"old");
    }
}
