//! SealedSecrets as the controller keeps them between reconciles: one compact entry per
//! object in the reflector's store.
//!
//! A whole `SealedSecret` struct costs about 3 KiB in memory for one RSA-4096 value (`cargo
//! bench --bench scale`, measured with heaptrack): every map of `ObjectMeta` and of the spec
//! allocates a full B-tree node however few entries it holds, and every string its own block.
//! The store keeps instead, per object:
//!
//! - the name, namespace and resourceVersion (what the reflector and the watcher key on);
//! - the object itself as compact JSON (one allocation, shared by the store and the event
//!   that delivered it), without `managedFields`, `last-applied-configuration` and the
//!   creation time (see [`slim`]), and without what every object shares (`apiVersion`,
//!   `kind`) or the store's key already holds (name, namespace);
//! - what decides whether an update triggers a reconcile ([`CachedSealed::trigger_fields`]),
//!   computed once as the object arrives.
//!
//! A reconcile parses the JSON back ([`CachedSealed::sealed`]): some microseconds against the
//! RSA work or the round trip of a write. Nothing in it is secret: the values are encrypted.
//!
//! **Synced objects are kept without their encrypted values.** An object whose status says
//! `Synced=True` for its current generation (every object after a restart, and each one once
//! its status write comes back) keeps its item names but not their ciphertexts (on a
//! one-value RSA-4096 object, about half of what is left), and keeps its spec digest
//! instead ([`CachedSealed::stripped_digest`]). What such an object's reconcile can do
//! without them is confirm its Secret as in sync from the Secret cache; anything else (the
//! Secret missing, changed or not ours, an older digest format) reads the SealedSecret whole
//! from the API server first (one GET, on a path that writes anyway). A spec change always
//! changes the generation, so an object with values to unseal arrives with them. Should a
//! path ever try to unseal a stripped object anyway, its empty values fail to open: the
//! reconcile fails visibly and writes no Secret.
//!
//! **Objects waiting to be unsealed keep their values within a budget.** On a cold start the
//! initial list delivers every object long before the RSA work reaches it, so without a
//! bound every ciphertext of the cluster would sit in memory at once (about 750 bytes per
//! RSA-4096 value: 75 MB at 100,000 objects). The encrypted values kept in objects not
//! (yet) synced count against the controller's budget ([`ValueBudget`], `--pending-values-mib`,
//! held in [`crate::state::State`]); an object that would exceed it is kept stripped, with its spec
//! digest, exactly like a synced one, and its reconcile reads it whole (one GET) when its
//! turn comes. The budget is released when the entry is dropped (the object synced, changed
//! or went away). An object that cannot be confirmed from the Secret cache costs one read
//! more past the budget, never a wrong or missing Secret.
//!
//! The watcher parses objects through serde (kube's `DeserializeOwned`), which takes no
//! argument, so the controller hands its budget to that parsing the way a request scope
//! would: [`with_value_budget`] makes it the budget of everything parsed while the given
//! future runs (a tokio task-local). Nothing is process-wide: two controllers in one process
//! (the tests) have a budget each. Outside such a scope an object is kept whole.

use std::borrow::Cow;
use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::NamespaceResourceScope;
use kseal_api::SealedSecret;
use kseal_api::constants::CONDITION_TRUE;
use kseal_keys::BlockTop;
use kube::Resource;
use kube::api::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::cache::secret::LAST_APPLIED_ANNOTATION;

/// A SealedSecret as the reflector stores it (see the [module docs](self)).
///
/// It deserializes from a SealedSecret's JSON (so the watcher builds it straight from list
/// pages and watch events) and speaks for the SealedSecret kind in requests.
#[derive(Clone)]
pub struct CachedSealed {
    /// Name, namespace and resourceVersion only.
    metadata: ObjectMeta,
    /// The slimmed object as JSON.
    body: Arc<Body>,
    /// [`relevant_fields`] of the object.
    relevant: u64,
    /// [`status_behind`] of the object.
    behind: bool,
    /// For an object kept without its encrypted values: its spec digest (the one its Secret
    /// carries when in sync), computed from the whole object as it arrived.
    stripped_digest: Option<[u8; 32]>,
    /// For an object whose values name no key: the top of its largest RSA block
    /// ([`CachedSealed::unhinted_top`]).
    unhinted_top: Option<BlockTop>,
}

impl CachedSealed {
    /// The compact form of `ss` (slimmed first).
    ///
    /// # Errors
    /// When `ss` cannot be written as JSON (a SealedSecret always can).
    /// Within a [`with_value_budget`] scope, the values of an object not yet synced count
    /// against that budget; outside one, the object is kept whole.
    pub fn new(ss: SealedSecret) -> Result<Self, serde_json::Error> {
        let budget = SCOPED_BUDGET.try_with(Arc::clone).ok();
        Self::within(ss, budget.as_ref())
    }

    /// [`CachedSealed::new`], counting the values of an object not yet synced against
    /// `budget`, when there is one.
    fn within(
        mut ss: SealedSecret,
        budget: Option<&Arc<ValueBudget>>,
    ) -> Result<Self, serde_json::Error> {
        slim(&mut ss);
        // Before the values may be stripped: a synced object's Secret may still have to be
        // written again (deleted, or changed by hand).
        let unhinted_top = (ss.sealing_key_hint().is_none())
            .then(|| {
                (ss.spec.encrypted_data.values())
                    .filter_map(|value| BlockTop::of_base64_value(value))
                    .max()
            })
            .flatten();
        let values: usize = ss.spec.encrypted_data.values().map(String::len).sum();
        let (kept, strip) = match budget {
            _ if synced(&ss) => (None, values > 0),
            _ if values == 0 => (None, false),
            None => (None, false),
            Some(budget) => {
                let kept = ValueBudget::reserve(budget, values);
                let strip = kept.is_none();
                (kept, strip)
            }
        };
        let stripped_digest = strip.then(|| {
            let digest = crate::formats::spec_digest_bytes(&ss);
            for value in ss.spec.encrypted_data.values_mut() {
                *value = String::new();
            }
            digest
        });
        // Kept once, in the store's key, not again in the JSON.
        let metadata = ObjectMeta {
            name: ss.metadata.name.take(),
            namespace: ss.metadata.namespace.take(),
            resource_version: ss.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        };
        // Sized up front for the values plus the rest of a typical object: written with
        // `to_vec`, the buffer grew by doubling, copying the ciphertexts at each step.
        let kept_values: usize = ss.spec.encrypted_data.values().map(String::len).sum();
        let mut json = Vec::with_capacity(kept_values + STORED_OVERHEAD);
        serde_json::to_writer(
            &mut json,
            &Stored {
                metadata: &ss.metadata,
                spec: &ss.spec,
                status: ss.status.as_ref(),
            },
        )?;
        let body = Arc::new(Body {
            json: json.into(),
            _kept: kept,
        });
        Ok(Self {
            relevant: relevant_fields(&ss),
            behind: status_behind(&ss),
            metadata,
            body,
            stripped_digest,
            unhinted_top,
        })
    }

    /// The SealedSecret, parsed back.
    ///
    /// # Errors
    /// Never for an entry made by [`CachedSealed::new`]; a parse error otherwise.
    pub fn sealed(&self) -> Result<SealedSecret, serde_json::Error> {
        let mut ss: SealedSecret = serde_json::from_slice(&self.body.json)?;
        ss.metadata.name.clone_from(&self.metadata.name);
        ss.metadata.namespace.clone_from(&self.metadata.namespace);
        Ok(ss)
    }

    /// The spec digest of an object kept without its encrypted values (see the
    /// [module docs](self)); `None` for an object kept whole.
    pub fn stripped_digest(&self) -> Option<String> {
        self.stripped_digest
            .as_ref()
            .map(crate::formats::format_spec_digest)
    }

    /// For an object whose values name no key (no `kseal.dev/sealing-key` annotation): the
    /// length and leading bits of its largest RSA block, computed from the first characters
    /// of each value as it arrived (before a synced object's values are dropped). The
    /// namespace's largest one guides the first unseal there ([`kseal_keys::BlockTop`]).
    pub fn unhinted_top(&self) -> Option<BlockTop> {
        self.unhinted_top
    }

    /// What decides whether an update of the object triggers a reconcile: its
    /// [relevant fields](relevant_fields) and whether its status is [behind](status_behind)
    /// its generation.
    pub fn trigger_fields(&self) -> (u64, bool) {
        (self.relevant, self.behind)
    }

    /// Drops the resourceVersion once the watcher has read it: the store's key then carries
    /// no copy of it (the JSON keeps it for the reconcile).
    pub(crate) fn forget_version(&mut self) {
        self.metadata.resource_version = None;
    }
}

/// What the JSON of a cached object holds: the SealedSecret without `apiVersion` and `kind`
/// (the same for every object; parsing ignores them), and without the name and namespace
/// (the store's key has them) or the creation time (never read). About 150 bytes fewer per
/// object than the whole object's JSON, 15 MB at 100,000 objects.
#[derive(serde::Serialize)]
struct Stored<'a> {
    metadata: &'a ObjectMeta,
    spec: &'a kseal_api::SealedSecretSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a kseal_api::SealedSecretStatus>,
}

/// Room for what a cached object's JSON holds besides its encrypted values (metadata,
/// template, status): about 600 bytes for the bench's objects; larger ones grow the buffer.
const STORED_OVERHEAD: usize = 1024;

/// A cached object's JSON, and the share of the value budget it holds.
struct Body {
    json: Box<[u8]>,
    /// Bytes of encrypted values counted against a budget, given back on drop.
    _kept: Option<Kept>,
}

/// Bytes reserved in a [`ValueBudget`]; released when dropped.
struct Kept {
    budget: Arc<ValueBudget>,
    bytes: usize,
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// How many bytes of encrypted values cached objects not yet synced may hold together (see
/// the [module docs](self)). One per controller, in its [`crate::state::State`].
#[derive(Debug)]
pub struct ValueBudget {
    limit: AtomicUsize,
    held: AtomicUsize,
}

impl ValueBudget {
    /// A budget of `limit` bytes, none held.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: AtomicUsize::new(limit),
            held: AtomicUsize::new(0),
        })
    }

    /// Sets the limit (`--pending-values-mib`). Objects already cached keep what they hold.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// Bytes of encrypted values the cached SealedSecrets not yet synced hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Reserves `bytes`, or `None` when that would exceed the limit.
    fn reserve(budget: &Arc<Self>, bytes: usize) -> Option<Kept> {
        let limit = budget.limit.load(Ordering::Relaxed);
        budget
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|total| *total <= limit)
            })
            .ok()
            .map(|_| Kept {
                budget: Arc::clone(budget),
                bytes,
            })
    }
}

/// The default of `--pending-values-mib`.
pub const DEFAULT_VALUE_BUDGET_MIB: u32 = 16;

/// The default budget in bytes.
pub const DEFAULT_VALUE_BUDGET_BYTES: usize = DEFAULT_VALUE_BUDGET_MIB as usize * 1024 * 1024;

tokio::task_local! {
    /// The budget of the objects parsed while a [`with_value_budget`] future runs.
    static SCOPED_BUDGET: Arc<ValueBudget>;
}

/// Runs `fut` with `budget` as the budget of every SealedSecret the watcher parses while it
/// runs (see the [module docs](self)). Tasks it spawns do not inherit it.
pub async fn with_value_budget<F: std::future::Future>(
    budget: Arc<ValueBudget>,
    fut: F,
) -> F::Output {
    SCOPED_BUDGET.scope(budget, fut).await
}

impl std::fmt::Debug for CachedSealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSealed")
            .field("namespace", &self.metadata.namespace)
            .field("name", &self.metadata.name)
            .field("bytes", &self.body.json.len())
            .finish_non_exhaustive()
    }
}

impl<'de> Deserialize<'de> for CachedSealed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let ss = SealedSecret {
            metadata: wire.metadata.into_meta(),
            spec: wire.spec,
            status: wire.status,
        };
        Self::new(ss).map_err(serde::de::Error::custom)
    }
}

/// A SealedSecret as the watcher reads it: what `SealedSecret`'s own parser reads (the same
/// required fields: `metadata` and `spec`), except `managedFields`, which serde skips
/// without building. Every write adds to them, so on a cold start each object arrives twice
/// with them (listed, then its status written), as nested JSON maps that [`slim`] would only
/// drop again.
#[derive(Deserialize)]
struct Wire {
    metadata: crate::cache::wire::WireMeta,
    spec: kseal_api::SealedSecretSpec,
    #[serde(default)]
    status: Option<kseal_api::SealedSecretStatus>,
}

impl Resource for CachedSealed {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        SealedSecret::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        SealedSecret::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        SealedSecret::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        SealedSecret::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        SealedSecret::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Whether the status says the object is unsealed as it is now: `Synced=True` for its current
/// generation. Such an object is kept without its encrypted values.
fn synced(ss: &SealedSecret) -> bool {
    let status = ss.status.as_ref();
    ss.spec.encrypted_data.values().any(|v| !v.is_empty())
        && status.and_then(|s| s.observed_generation).is_some()
        && status.and_then(|s| s.observed_generation) == ss.metadata.generation
        && ss
            .synced_condition()
            .is_some_and(|c| c.status == CONDITION_TRUE)
}

/// Drops what the controller never reads from a cached SealedSecret: `managedFields` (nested
/// JSON maps, most of a cached object's memory; measured with `cargo bench --bench scale`) and
/// the `kubectl.kubernetes.io/last-applied-configuration` annotation, a second copy of the
/// whole object (every encrypted value) on objects applied client-side (`kubectl apply`,
/// Argo CD's default); and the creation time, which nothing the controller does with a
/// SealedSecret reads. None of them takes part in the spec digest, the scope or the
/// sealing-key hint.
pub fn slim(ss: &mut SealedSecret) {
    ss.metadata.managed_fields = None;
    ss.metadata.creation_timestamp = None;
    if let Some(annotations) = ss.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// What a SealedSecret change must touch to trigger a reconcile: identity, spec (through the
/// generation), labels, annotations (scope) and deletion. Status-only updates do not.
pub fn relevant_fields(ss: &SealedSecret) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let m = &ss.metadata;
    (&m.uid, m.generation, &m.labels, &m.annotations).hash(&mut h);
    m.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// Whether the status speaks for an older generation than the object's: written by a replica
/// that read a stale object (a deposed leader). Turning behind triggers a reconcile, which
/// repairs it; the controller's own status writes never turn it behind.
pub fn status_behind(ss: &SealedSecret) -> bool {
    ss.status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .is_some_and(|observed| Some(observed) < ss.metadata.generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt as _;

    fn object() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "bitnami.com/v1alpha1",
            "kind": "SealedSecret",
            "metadata": {
                "name": "n", "namespace": "ns", "uid": "u", "generation": 2,
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "resourceVersion": "17",
                "labels": {"a": "b"},
                "annotations": {"c": "d",
                    "sealedsecrets.bitnami.com/namespace-wide": "true",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}"},
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {
                "encryptedData": {"k": "AgA="},
                "template": {"metadata": {"labels": {"x": "y"}}, "type": "Opaque"}
            },
            "status": {"observedGeneration": 1, "conditions": [
                {"type": "Synced", "status": "True", "reason": "Unsealed"}]}
        })
    }

    #[test]
    fn the_watchers_form_reads_every_field_the_whole_object_does_but_managed_fields() {
        let mut whole = object();
        let meta = whole["metadata"].as_object_mut().unwrap();
        meta.insert("deletionGracePeriodSeconds".into(), 30.into());
        meta.insert("deletionTimestamp".into(), "2026-11-27T11:00:00Z".into());
        meta.insert("finalizers".into(), serde_json::json!(["f"]));
        meta.insert("generateName".into(), "n-".into());
        meta.insert("selfLink".into(), "/x".into());
        meta.insert(
            "ownerReferences".into(),
            serde_json::json!([{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "ou",
                "controller": true}]),
        );
        let mut expected: SealedSecret = serde_json::from_value(whole.clone()).unwrap();
        slim(&mut expected);
        let cached: CachedSealed = serde_json::from_value(whole.clone()).unwrap();
        assert_eq!(cached.sealed().unwrap(), expected);
        assert_eq!(
            cached.trigger_fields(),
            (relevant_fields(&expected), status_behind(&expected))
        );
        // `null` reads as absent, as in `ObjectMeta`; no status reads as none.
        let mut nulls = object();
        for key in ["labels", "annotations", "uid", "generation"] {
            nulls["metadata"][key] = serde_json::Value::Null;
        }
        nulls.as_object_mut().unwrap().remove("status");
        let mut expected: SealedSecret = serde_json::from_value(nulls.clone()).unwrap();
        slim(&mut expected);
        let cached: CachedSealed = serde_json::from_value(nulls).unwrap();
        assert_eq!(cached.sealed().unwrap(), expected);
        // What the whole object requires, this form requires too.
        for required in ["metadata", "spec"] {
            let mut missing = object();
            missing.as_object_mut().unwrap().remove(required);
            assert!(serde_json::from_value::<SealedSecret>(missing.clone()).is_err());
            assert!(
                serde_json::from_value::<CachedSealed>(missing).is_err(),
                "{required}"
            );
        }
    }

    #[test]
    fn the_cached_form_gives_back_the_object_without_managed_fields_and_the_last_applied_copy() {
        let ss: SealedSecret = serde_json::from_value(object()).unwrap();
        let cached: CachedSealed = serde_json::from_value(object()).unwrap();
        let mut expected = ss.clone();
        slim(&mut expected);
        assert!(ss.metadata.creation_timestamp.is_some());
        assert!(expected.metadata.creation_timestamp.is_none());
        assert!(expected.metadata.managed_fields.is_none());
        assert!(!expected.annotations().contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(cached.sealed().unwrap(), expected);
        // What every object shares, or the store's key already holds, is not in the JSON.
        let json = String::from_utf8_lossy(&cached.body.json).into_owned();
        for absent in [
            "apiVersion",
            "kind",
            "creationTimestamp",
            "\"name\"",
            "\"namespace\"",
        ] {
            assert!(!json.contains(absent), "{absent} in {json}");
        }
        assert_eq!(expected.scope(), ss.scope());
        assert_eq!(
            crate::formats::spec_digest(&expected),
            crate::formats::spec_digest(&ss)
        );
        // The store keys on name and namespace; the watcher reads the resourceVersion.
        assert_eq!(cached.name_any(), "n");
        assert_eq!(cached.namespace().as_deref(), Some("ns"));
        assert_eq!(cached.resource_version().as_deref(), Some("17"));
        assert!(cached.uid().is_none() && cached.labels().is_empty());
        assert_eq!(
            cached.trigger_fields(),
            (relevant_fields(&expected), status_behind(&expected))
        );
        assert!(
            cached.trigger_fields().1,
            "observedGeneration 1 < generation 2"
        );
        let mut forgotten = cached.clone();
        forgotten.forget_version();
        assert!(forgotten.resource_version().is_none());
        assert_eq!(forgotten.sealed().unwrap(), expected, "the JSON keeps it");
        // Debug output names the object, nothing of its values.
        let debug = format!("{cached:?}");
        assert!(
            debug.contains("\"n\"") && !debug.contains("AgA="),
            "{debug}"
        );
        assert_eq!(
            CachedSealed::url_path(&(), Some("ns")),
            SealedSecret::url_path(&(), Some("ns"))
        );
    }

    #[test]
    fn relevant_fields_ignore_the_status_and_the_resource_version() {
        let ss: SealedSecret = serde_json::from_value(object()).unwrap();
        let mut other = ss.clone();
        other.status = None;
        other.metadata.resource_version = Some("18".into());
        assert_eq!(relevant_fields(&ss), relevant_fields(&other));
        other.metadata.generation = Some(3);
        assert_ne!(relevant_fields(&ss), relevant_fields(&other));
        let mut labelled = ss.clone();
        labelled.labels_mut().insert("e".into(), "f".into());
        assert_ne!(relevant_fields(&ss), relevant_fields(&labelled));
    }

    #[test]
    fn objects_waiting_to_be_unsealed_keep_their_values_within_the_budget_and_give_it_back() {
        // The test's own budget: room for two values of "AgA=" (4 bytes each).
        let eight = ValueBudget::new(8);
        let budget = Some(&eight);
        let held = || eight.held();
        let waiting = |name: &str| {
            let mut v = object();
            v["metadata"]["name"] = name.into();
            v.as_object_mut().unwrap().remove("status");
            let ss: SealedSecret = serde_json::from_value(v).unwrap();
            let mut whole = ss.clone();
            slim(&mut whole);
            (whole, CachedSealed::within(ss, budget).unwrap())
        };
        let (first_whole, first) = waiting("a");
        let (_, second) = waiting("b");
        assert_eq!(held(), 8);
        assert!(first.stripped_digest().is_none() && second.stripped_digest().is_none());
        assert_eq!(first.sealed().unwrap(), first_whole, "kept whole");

        // Past the budget: kept like a synced object, without values, with its digest.
        let (third_whole, third) = waiting("c");
        assert_eq!(held(), 8);
        assert_eq!(
            third.stripped_digest(),
            Some(crate::formats::spec_digest(&third_whole))
        );
        let kept = third.sealed().unwrap();
        assert_eq!(kept.spec.encrypted_data["k"], "");
        assert_eq!(kept.status, None, "still waiting: no status invented");
        assert_eq!(third.trigger_fields().0, relevant_fields(&third_whole));

        // Clones share the reservation; the last one dropped gives it back.
        let clone = first.clone();
        drop(first);
        assert_eq!(held(), 8);
        drop(clone);
        assert_eq!(held(), 4);
        let (_, fourth) = waiting("d");
        assert!(fourth.stripped_digest().is_none(), "room again");
        drop((second, third, fourth));
        assert_eq!(held(), 0);

        // A synced object never counts, and a budget of 0 keeps every waiting object bare.
        let none = ValueBudget::new(0);
        let synced: SealedSecret = {
            let mut v = object();
            v["status"]["observedGeneration"] = 2.into();
            serde_json::from_value(v).unwrap()
        };
        let cached = CachedSealed::within(synced, Some(&none)).unwrap();
        assert!(cached.stripped_digest().is_some());
        let (_, bare) = {
            let mut v = object();
            v.as_object_mut().unwrap().remove("status");
            let ss: SealedSecret = serde_json::from_value(v).unwrap();
            (ss.clone(), CachedSealed::within(ss, Some(&none)).unwrap())
        };
        assert!(bare.stripped_digest().is_some());
        assert_eq!(none.held(), 0);

        // Outside any budget (no controller's scope): kept whole, nothing counted.
        let mut v = object();
        v.as_object_mut().unwrap().remove("status");
        let ss: SealedSecret = serde_json::from_value(v).unwrap();
        assert!(CachedSealed::new(ss).unwrap().stripped_digest().is_none());
    }

    #[test]
    fn only_an_object_synced_for_its_generation_is_kept_without_its_values() {
        let with = |observed: Option<i64>, status: Option<&str>| {
            let mut v = object();
            v["metadata"].as_object_mut().unwrap().remove("annotations");
            match (observed, status) {
                (None, None) => {
                    v.as_object_mut().unwrap().remove("status");
                }
                _ => {
                    v["status"] = serde_json::json!({"observedGeneration": observed,
                        "conditions": [{"type": "Synced", "status": status}]});
                }
            }
            let mut ss: SealedSecret = serde_json::from_value(v).unwrap();
            slim(&mut ss);
            (ss.clone(), CachedSealed::new(ss).unwrap())
        };
        let (whole, stripped) = with(Some(2), Some("True"));
        assert_eq!(
            stripped.stripped_digest(),
            Some(crate::formats::spec_digest(&whole)),
            "the digest of the object with its values"
        );
        let kept = stripped.sealed().unwrap();
        assert_eq!(kept.spec.encrypted_data.len(), 1);
        assert_eq!(kept.spec.encrypted_data["k"], "");
        assert_eq!(kept.spec.template, whole.spec.template);
        assert_eq!(kept.status, whole.status);
        assert_eq!(stripped.trigger_fields(), (relevant_fields(&whole), false));
        for (observed, status) in [
            (Some(1), Some("True")),
            (Some(2), Some("False")),
            (None, Some("True")),
            (None, None),
        ] {
            let (whole, cached) = with(observed, status);
            assert!(
                cached.stripped_digest().is_none(),
                "{observed:?} {status:?}"
            );
            assert_eq!(cached.sealed().unwrap(), whole);
        }
    }
}
