//! The reconciler's view of Secrets, kept from the Secret watch, so that confirming a
//! Secret that is already in sync costs no request and creating a missing one needs no read
//! first (a cold start, a restart and a resync of N objects read O(pages), not N GETs).
//!
//! Only what the in-sync check reads is kept per Secret, in compact form: name, namespace,
//! labels, annotations (without `kubectl.kubernetes.io/last-applied-configuration`, which
//! can hold the data of a Secret applied with kubectl), the controlling owner's UID and the
//! type. The data is checked when the event arrives against the
//! `kseal.dev/data-mac` annotation (an HMAC keyed from the ring, see [`crate::formats`]) and
//! then wiped: the cache keeps the verdict and the key it was made with, never a byte of
//! data nor a hash of it.
//!
//! The cache is a shortcut, never an authority for a write:
//! - **in sync by the cache** ends the reconcile (as a GET would have). A change the watch
//!   has not delivered yet triggers a reconcile of its own when it arrives (the cache is
//!   updated before that trigger fires);
//! - **absent by the cache** creates the Secret without reading it first; one that exists
//!   after all (a lagging watch) answers 409 AlreadyExists and the reconcile reads it and
//!   decides as before: a Secret that is not ours is never written;
//! - anything else (out of sync, not ours, patched, a MAC made with a key the ring lacks,
//!   a namespace whose watch has not listed yet) reads the Secret with a GET, as before.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kseal_keys::KeyId;
use tokio::sync::watch;
use zeroize::Zeroize as _;

/// `kubectl apply` keeps the whole applied object here, data included.
pub(crate) const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the data-MAC annotation says of the data, decided when the Secret arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MacVerdict {
    /// The MAC verified over every data item, with the MAC key of this ring key.
    Verified(KeyId),
    /// No annotation, or it did not verify, or its key was not in the ring then: the
    /// reconcile reads the Secret itself.
    Unknown,
}

/// A Secret as the Secret watch reads it: whole, data included (checked against its MAC as it
/// arrives, then wiped: [`CachedSecret::new`]), but without `managedFields`, which serde skips
/// without building ([`crate::cache::wire`]). Otherwise read as `Secret`'s own parser reads it: every
/// field may be absent, and an `apiVersion` or `kind` that is there must be `v1` `Secret`.
#[derive(Clone)]
pub(crate) struct WatchedSecret(pub Secret);

/// Never the data.
impl std::fmt::Debug for WatchedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedSecret")
            .field("namespace", &self.0.metadata.namespace)
            .field("name", &self.0.metadata.name)
            .finish_non_exhaustive()
    }
}

impl kube::Resource for WatchedSecret {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Secret as kube::Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <Secret as kube::Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <Secret as kube::Resource>::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        <Secret as kube::Resource>::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <Secret as kube::Resource>::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> serde::Deserialize<'de> for WatchedSecret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            #[serde(default)]
            api_version: Option<String>,
            #[serde(default)]
            kind: Option<String>,
            #[serde(default)]
            data: Option<BTreeMap<String, k8s_openapi::ByteString>>,
            #[serde(default)]
            immutable: Option<bool>,
            #[serde(default)]
            metadata: Option<crate::cache::wire::WireMeta>,
            #[serde(default)]
            string_data: Option<BTreeMap<String, String>>,
            #[serde(default, rename = "type")]
            type_: Option<String>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let secret = Secret {
            data: wire.data,
            immutable: wire.immutable,
            metadata: wire
                .metadata
                .map(crate::cache::wire::WireMeta::into_meta)
                .unwrap_or_default(),
            string_data: wire.string_data,
            type_: wire.type_,
        };
        // Checked after the data is read, so that a refused object's data is wiped too.
        for (field, got, want) in [
            ("apiVersion", &wire.api_version, "v1"),
            ("kind", &wire.kind, "Secret"),
        ] {
            if let Some(got) = got.as_deref().filter(|g| *g != want) {
                drop(strip(secret));
                return Err(serde::de::Error::invalid_value(
                    serde::de::Unexpected::Str(got),
                    &format!("{field} {want}").as_str(),
                ));
            }
        }
        Ok(Self(secret))
    }
}

/// One Secret as the reconciler needs it: no data, and in compact form (a map node or a
/// `Secret` struct per cached Secret is most of its memory at 10,000 objects).
///
/// Nothing is kept twice: the name and namespace are shared with the cache's key (and the
/// namespace with every other Secret of the namespace), and the label and annotation keys,
/// values and types every Secret the controller writes carries are static
/// strings, not a copy per Secret: about 200 bytes less per Secret, 21 MiB of peak RSS at
/// 100,000 objects (`cargo bench --bench scale`).
#[derive(Debug)]
pub(crate) struct CachedSecret {
    name: Arc<str>,
    namespace: Arc<str>,
    labels: Box<[(Text, Text)]>,
    /// Without the last-applied annotation.
    annotations: Box<[(Text, Text)]>,
    /// The UID of the controlling owner, if any (what the in-sync check compares).
    controller_uid: Option<Box<str>>,
    type_: Option<Text>,
    /// The data-MAC verdict over every item (what a Secret written whole by the controller
    /// carries; a `patch` Secret's MAC covers only some items and is always read).
    pub mac: MacVerdict,
}

/// A label or annotation key or value, or a type, as the cache keeps it: static when it is
/// one of [`SHARED`], owned otherwise.
type Text = Cow<'static, str>;

/// The metadata strings on every Secret the controller writes (and on many others): kept as
/// these static strings instead of a copy per cached Secret. A fixed list, so that what
/// Secrets carry cannot grow it.
const SHARED: [&str; 9] = [
    crate::formats::SPEC_DIGEST_ANNOTATION,
    crate::formats::DATA_MAC_ANNOTATION,
    kseal_api::constants::MANAGED_ANNOTATION,
    kseal_api::constants::INSTANCE_LABEL,
    "true",
    "Opaque",
    "kubernetes.io/basic-auth",
    "kubernetes.io/dockerconfigjson",
    "kubernetes.io/tls",
];

fn text(s: String) -> Text {
    SHARED
        .iter()
        .find(|shared| **shared == s)
        .map_or_else(|| Cow::Owned(s), |shared| Cow::Borrowed(*shared))
}

fn compact(map: Option<BTreeMap<String, String>>) -> Box<[(Text, Text)]> {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (text(k), text(v)))
        .collect()
}

fn expand(pairs: &[(Text, Text)]) -> Option<BTreeMap<String, String>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

impl CachedSecret {
    /// The cached form of a Secret the watch delivered, with `mac` its data-MAC verdict;
    /// the data is wiped.
    pub(crate) fn new(secret: Secret, mac: MacVerdict) -> Self {
        let secret = strip(secret);
        let meta = secret.metadata;
        let controller_uid = meta
            .owner_references
            .into_iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.into_boxed_str());
        Self {
            name: meta.name.unwrap_or_default().into(),
            namespace: meta.namespace.unwrap_or_default().into(),
            labels: compact(meta.labels),
            annotations: compact(meta.annotations),
            controller_uid,
            type_: secret.type_.map(text),
            mac,
        }
    }

    /// The Secret as the in-sync check reads it: name, namespace, labels, annotations, the
    /// controlling owner's UID and the type; no data, no resourceVersion (a write always
    /// reads the Secret first).
    pub(crate) fn to_secret(&self) -> Secret {
        let owner = self.controller_uid.as_ref().map(|uid| {
            vec![OwnerReference {
                controller: Some(true),
                uid: uid.to_string(),
                ..OwnerReference::default()
            }]
        });
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name.to_string()),
                namespace: Some(self.namespace.to_string()),
                labels: expand(&self.labels),
                annotations: expand(&self.annotations),
                owner_references: owner,
                ..ObjectMeta::default()
            },
            type_: self.type_.as_ref().map(|t| t.to_string()),
            ..Secret::default()
        }
    }

    fn key(&self) -> Key {
        (self.namespace.clone(), self.name.clone())
    }
}

/// What the cache says of a Secret.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// The namespace's watch has listed and holds no such Secret.
    Absent,
    /// The Secret as last seen.
    Present(Arc<CachedSecret>),
    /// The namespace has not been listed yet (or the watch is off): read the API server.
    NotListed,
}

/// A Secret's (namespace, name), shared with its entry.
type Key = (Arc<str>, Arc<str>);

/// How long after start a reconcile waits for its namespace's first Secret list, at most;
/// later, or when the watch cannot list (no permission), it reads the API server instead.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

/// Secrets by (namespace, name), from the Secret watches of every watched scope.
pub(crate) struct SecretCache {
    entries: Mutex<HashMap<Key, Arc<CachedSecret>>>,
    /// Scopes (`None`: every namespace) whose watch completed a list at least once.
    listed: Mutex<HashSet<Option<String>>>,
    /// Keys seen during the re-list in progress, per scope.
    relisting: Mutex<HashMap<Option<String>, HashSet<Key>>>,
    /// One copy of each namespace name, shared by its entries (pruned at each list).
    namespaces: Mutex<HashSet<Arc<str>>>,
    /// Bumped on each completed list, for [`SecretCache::wait_listed`].
    lists: watch::Sender<u64>,
    /// Until when a reconcile waits for its namespace's first list.
    wait_until: tokio::time::Instant,
}

impl Default for SecretCache {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            listed: Mutex::default(),
            relisting: Mutex::default(),
            namespaces: Mutex::default(),
            lists: watch::Sender::new(0),
            wait_until: tokio::time::Instant::now() + FIRST_LIST_WAIT,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one insert or remove: consistent even if a holder panicked.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key_of(secret: &Secret) -> Option<Key> {
    Some((
        secret.metadata.namespace.as_deref()?.into(),
        secret.metadata.name.as_deref()?.into(),
    ))
}

/// Removes what the reconciler never reads, wiping the data as it goes.
pub(crate) fn strip(mut secret: Secret) -> Secret {
    if let Some(data) = secret.data.as_mut() {
        for value in data.values_mut() {
            value.0.zeroize();
        }
    }
    if let Some(data) = secret.string_data.as_mut() {
        for value in data.values_mut() {
            value.zeroize();
        }
    }
    secret.data = None;
    secret.string_data = None;
    let meta = &mut secret.metadata;
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut()
        && let Some(mut applied) = annotations.remove(LAST_APPLIED_ANNOTATION)
    {
        applied.zeroize();
    }
    secret
}

impl SecretCache {
    /// What the cache says of `namespace/name`.
    pub(crate) fn lookup(&self, namespace: &str, name: &str) -> Lookup {
        if !self.is_listed(namespace) {
            return Lookup::NotListed;
        }
        match lock(&self.entries).get(&(namespace.into(), name.into())) {
            Some(cached) => Lookup::Present(cached.clone()),
            None => Lookup::Absent,
        }
    }

    /// Waits until `namespace` has been listed, for at most 30 s after start
    /// (a restart then confirms every Secret from the list, not with a GET each).
    pub(crate) async fn wait_listed(&self, namespace: &str) {
        if self.is_listed(namespace) {
            return;
        }
        let mut rx = self.lists.subscribe();
        // Past the deadline (or without a sender), the reconcile goes on and reads instead.
        let _ =
            tokio::time::timeout_at(self.wait_until, rx.wait_for(|_| self.is_listed(namespace)))
                .await;
    }

    fn is_listed(&self, namespace: &str) -> bool {
        let listed = lock(&self.listed);
        listed.contains(&None) || listed.contains(&Some(namespace.to_owned()))
    }

    /// Stores a Secret seen by the watch of `scope`.
    pub(crate) fn apply(&self, scope: &Option<String>, mut cached: CachedSecret) {
        if cached.name.is_empty() || cached.namespace.is_empty() {
            return;
        }
        {
            let mut namespaces = lock(&self.namespaces);
            match namespaces.get(&cached.namespace) {
                Some(shared) => cached.namespace = shared.clone(),
                None => {
                    namespaces.insert(cached.namespace.clone());
                }
            }
        }
        let key = cached.key();
        if let Some(seen) = lock(&self.relisting).get_mut(scope) {
            seen.insert(key.clone());
        }
        lock(&self.entries).insert(key, Arc::new(cached));
    }

    /// Forgets a deleted Secret.
    pub(crate) fn delete(&self, secret: &Secret) {
        if let Some(key) = key_of(secret) {
            lock(&self.entries).remove(&key);
        }
    }

    /// A (re-)list of `scope` begins.
    pub(crate) fn list_started(&self, scope: &Option<String>) {
        lock(&self.relisting).insert(scope.clone(), HashSet::new());
    }

    /// The (re-)list of `scope` is complete: Secrets of the scope it did not list are gone.
    pub(crate) fn list_done(&self, scope: &Option<String>) {
        let Some(seen) = lock(&self.relisting).remove(scope) else {
            return;
        };
        lock(&self.entries).retain(|key, _| {
            let in_scope = scope.as_ref().is_none_or(|ns| **ns == *key.0);
            !in_scope || seen.contains(key)
        });
        // A namespace no entry uses any more is held here alone.
        lock(&self.namespaces).retain(|ns| Arc::strong_count(ns) > 1);
        lock(&self.listed).insert(scope.clone());
        self.lists.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Secrets held (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Whether no Secret is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(ns: &str, name: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                annotations: Some(BTreeMap::from([
                    (
                        LAST_APPLIED_ANNOTATION.to_owned(),
                        "{\"data\":…}".to_owned(),
                    ),
                    ("keep".to_owned(), "me".to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(b"hunter2".to_vec()),
            )])),
            string_data: Some(BTreeMap::from([("x".to_owned(), "y".to_owned())])),
            ..Secret::default()
        }
    }

    fn cached(s: Secret) -> CachedSecret {
        CachedSecret::new(s, MacVerdict::Unknown)
    }

    #[test]
    fn the_compact_form_keeps_what_the_in_sync_check_reads() {
        let mut s = secret("a", "s");
        s.metadata.labels = Some(BTreeMap::from([("l".to_owned(), "v".to_owned())]));
        s.metadata.uid = Some("secret-uid".to_owned());
        s.metadata.resource_version = Some("7".to_owned());
        s.type_ = Some("kubernetes.io/basic-auth".to_owned());
        s.metadata.owner_references = Some(vec![
            OwnerReference {
                uid: "other".to_owned(),
                ..OwnerReference::default()
            },
            OwnerReference {
                controller: Some(true),
                uid: "ss-uid".to_owned(),
                kind: "SealedSecret".to_owned(),
                ..OwnerReference::default()
            },
        ]);
        let back = CachedSecret::new(s.clone(), MacVerdict::Unknown).to_secret();
        assert_eq!(back.metadata.name, s.metadata.name);
        assert_eq!(back.metadata.namespace, s.metadata.namespace);
        assert_eq!(back.metadata.labels, s.metadata.labels);
        assert_eq!(
            back.metadata.annotations,
            Some(BTreeMap::from([("keep".to_owned(), "me".to_owned())]))
        );
        assert_eq!(back.type_, s.type_);
        assert_eq!(back.data, None);
        let owners = back.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "ss-uid");
        assert_eq!(owners[0].controller, Some(true));
        let bare = CachedSecret::new(Secret::default(), MacVerdict::Unknown).to_secret();
        assert_eq!(bare.metadata.labels, None);
        assert_eq!(bare.metadata.annotations, None);
        assert_eq!(bare.metadata.owner_references, None);
    }

    #[test]
    fn the_watchers_form_reads_a_secret_whole_but_its_managed_fields() {
        let whole = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
            "metadata": {
                "name": "s", "namespace": "a", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "labels": {"l": "v"}, "annotations": {"x": "y"}, "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "bitnami.com/v1alpha1",
                    "kind": "SealedSecret", "name": "s", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "kseal", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}]
            },
            "data": {"k": "c2VjcmV0"},
            "stringData": {"p": "q"}
        });
        let mut expected: Secret = serde_json::from_value(whole.clone()).unwrap();
        expected.metadata.managed_fields = None;
        expected.metadata.creation_timestamp = None;
        let watched: WatchedSecret = serde_json::from_value(whole.clone()).unwrap();
        assert_eq!(watched.0, expected);
        assert!(!format!("{watched:?}").contains("c2VjcmV0"));
        assert!(!format!("{watched:?}").contains("secret"));
        // Absent or `null` fields read as `Secret` reads them.
        let bare: WatchedSecret = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(bare.0, Secret::default());
        let nulls = serde_json::json!({"metadata": null, "data": null, "type": null});
        let nulls: WatchedSecret = serde_json::from_value(nulls).unwrap();
        assert_eq!(nulls.0, Secret::default());
        // Another kind is refused, as `Secret` refuses it.
        for (field, value) in [("apiVersion", "v2"), ("kind", "ConfigMap")] {
            let mut other = whole.clone();
            other[field] = value.into();
            assert!(serde_json::from_value::<Secret>(other.clone()).is_err());
            let e = serde_json::from_value::<WatchedSecret>(other).unwrap_err();
            assert!(e.to_string().contains(value), "{e}");
            assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
        }
    }

    #[test]
    fn stripping_keeps_no_data_and_no_last_applied_configuration() {
        let s = strip(secret("a", "s"));
        assert_eq!(s.data, None);
        assert_eq!(s.string_data, None);
        let annotations = s.metadata.annotations.unwrap_or_default();
        assert!(!annotations.contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(annotations.get("keep").map(String::as_str), Some("me"));
    }

    #[test]
    fn nothing_is_absent_before_the_scope_listed() {
        let cache = SecretCache::default();
        let all = None;
        assert!(matches!(cache.lookup("a", "s"), Lookup::NotListed));
        cache.list_started(&all);
        cache.apply(&all, cached(secret("a", "s")));
        assert!(matches!(cache.lookup("a", "t"), Lookup::NotListed));
        cache.list_done(&all);
        assert!(matches!(cache.lookup("a", "s"), Lookup::Present(_)));
        assert!(matches!(cache.lookup("a", "t"), Lookup::Absent));
        assert!(matches!(cache.lookup("b", "s"), Lookup::Absent));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_waits_for_the_first_list_but_not_forever() {
        let cache = Arc::new(SecretCache::default());
        let all = None;
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_listed("a").await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        cache.list_started(&all);
        cache.list_done(&all);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        // Listed: no wait at all.
        tokio::time::timeout(Duration::from_millis(1), cache.wait_listed("b"))
            .await
            .unwrap();
        // Never listed (the watch cannot list): the wait ends at the deadline.
        let never = SecretCache::default();
        let start = tokio::time::Instant::now();
        never.wait_listed("a").await;
        assert!(start.elapsed() >= FIRST_LIST_WAIT);
        never.wait_listed("a").await;
        assert!(start.elapsed() < FIRST_LIST_WAIT + Duration::from_secs(1));
    }

    #[test]
    fn a_namespace_scope_says_nothing_of_other_namespaces() {
        let cache = SecretCache::default();
        let only_a = Some("a".to_owned());
        cache.list_started(&only_a);
        cache.list_done(&only_a);
        assert!(matches!(cache.lookup("a", "s"), Lookup::Absent));
        assert!(matches!(cache.lookup("b", "s"), Lookup::NotListed));
    }

    #[test]
    fn a_relist_forgets_what_it_did_not_see_in_its_own_scope_only() {
        let cache = SecretCache::default();
        let (a, b) = (Some("a".to_owned()), Some("b".to_owned()));
        for scope in [&a, &b] {
            cache.list_started(scope);
            let ns = scope.as_deref().unwrap_or_default();
            cache.apply(scope, cached(secret(ns, "gone")));
            cache.apply(scope, cached(secret(ns, "kept")));
            cache.list_done(scope);
        }
        assert_eq!(cache.len(), 4);
        // Scope a re-lists (its watch was down) and "gone" was deleted meanwhile.
        cache.list_started(&a);
        cache.apply(&a, cached(secret("a", "kept")));
        // Until the re-list completes, the old view stands.
        assert!(matches!(cache.lookup("a", "gone"), Lookup::Present(_)));
        cache.list_done(&a);
        assert!(matches!(cache.lookup("a", "gone"), Lookup::Absent));
        assert!(matches!(cache.lookup("a", "kept"), Lookup::Present(_)));
        assert!(matches!(cache.lookup("b", "gone"), Lookup::Present(_)));
        cache.delete(&secret("b", "gone"));
        assert!(matches!(cache.lookup("b", "gone"), Lookup::Absent));
    }

    #[test]
    fn entries_share_their_namespace_and_the_strings_every_written_secret_carries() {
        let cache = SecretCache::default();
        let all = None;
        cache.list_started(&all);
        for name in ["s1", "s2"] {
            let mut s = secret("team", name);
            let annotations = s.metadata.annotations.get_or_insert_default();
            annotations.insert(crate::formats::SPEC_DIGEST_ANNOTATION.into(), "v2:x".into());
            annotations.insert(
                kseal_api::constants::MANAGED_ANNOTATION.into(),
                "true".into(),
            );
            s.type_ = Some("Opaque".into());
            cache.apply(&all, cached(s));
        }
        cache.list_done(&all);
        let get = |name| match cache.lookup("team", name) {
            Lookup::Present(c) => c,
            other => panic!("{other:?}"),
        };
        let (s1, s2) = (get("s1"), get("s2"));
        assert!(Arc::ptr_eq(&s1.namespace, &s2.namespace));
        let shared = |t: &Text| matches!(t, Cow::Borrowed(_));
        for (k, v) in s1.annotations.iter() {
            match &**k {
                "keep" => assert!(!shared(k) && !shared(v)),
                "kseal.dev/spec-digest" => assert!(shared(k) && !shared(v)),
                "sealedsecrets.bitnami.com/managed" => assert!(shared(k) && shared(v)),
                other => panic!("unexpected annotation {other}"),
            }
        }
        assert!(s1.type_.as_ref().is_some_and(shared));
        // Read back as they were.
        let back = s1.to_secret();
        let annotations = back.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations["sealedsecrets.bitnami.com/managed"], "true");
        assert_eq!(annotations["kseal.dev/spec-digest"], "v2:x");
        assert_eq!(back.type_.as_deref(), Some("Opaque"));
        // A namespace whose Secrets are all gone is not held on to.
        drop((s1, s2));
        cache.list_started(&all);
        cache.list_done(&all);
        assert!(cache.is_empty());
        assert!(lock(&cache.namespaces).is_empty());
    }
}
