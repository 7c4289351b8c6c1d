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
pub enum MacVerdict {
    /// The MAC verified over every data item, with the MAC key of this ring key.
    Verified(KeyId),
    /// No annotation, or it did not verify, or its key was not in the ring then: the
    /// reconcile reads the Secret itself.
    Unknown,
}

/// One Secret as the reconciler needs it: no data, and in compact form (a map node or a
/// `Secret` struct per cached Secret is most of its memory at 10,000 objects).
#[derive(Debug)]
pub struct CachedSecret {
    name: Box<str>,
    namespace: Box<str>,
    labels: Box<[(Box<str>, Box<str>)]>,
    /// Without the last-applied annotation.
    annotations: Box<[(Box<str>, Box<str>)]>,
    /// The UID of the controlling owner, if any (what the in-sync check compares).
    controller_uid: Option<Box<str>>,
    type_: Option<Box<str>>,
    /// The data-MAC verdict over every item (what a Secret written whole by the controller
    /// carries; a `patch` Secret's MAC covers only some items and is always read).
    pub mac: MacVerdict,
}

fn compact(map: Option<BTreeMap<String, String>>) -> Box<[(Box<str>, Box<str>)]> {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
        .collect()
}

fn expand(pairs: &[(Box<str>, Box<str>)]) -> Option<BTreeMap<String, String>> {
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
    pub fn new(secret: Secret, mac: MacVerdict) -> Self {
        let secret = strip(secret);
        let meta = secret.metadata;
        let controller_uid = meta
            .owner_references
            .into_iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.into_boxed_str());
        Self {
            name: meta.name.unwrap_or_default().into_boxed_str(),
            namespace: meta.namespace.unwrap_or_default().into_boxed_str(),
            labels: compact(meta.labels),
            annotations: compact(meta.annotations),
            controller_uid,
            type_: secret.type_.map(String::into_boxed_str),
            mac,
        }
    }

    /// The Secret as the in-sync check reads it: name, namespace, labels, annotations, the
    /// controlling owner's UID and the type; no data, no resourceVersion (a write always
    /// reads the Secret first).
    pub fn to_secret(&self) -> Secret {
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
        (self.namespace.to_string(), self.name.to_string())
    }
}

/// What the cache says of a Secret.
#[derive(Debug)]
pub enum Lookup {
    /// The namespace's watch has listed and holds no such Secret.
    Absent,
    /// The Secret as last seen.
    Present(Arc<CachedSecret>),
    /// The namespace has not been listed yet (or the watch is off): read the API server.
    NotListed,
}

/// A Secret's (namespace, name).
type Key = (String, String);

/// How long after start a reconcile waits for its namespace's first Secret list, at most;
/// later, or when the watch cannot list (no permission), it reads the API server instead.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

/// Secrets by (namespace, name), from the Secret watches of every watched scope.
pub struct SecretCache {
    entries: Mutex<HashMap<Key, Arc<CachedSecret>>>,
    /// Scopes (`None`: every namespace) whose watch completed a list at least once.
    listed: Mutex<HashSet<Option<String>>>,
    /// Keys seen during the re-list in progress, per scope.
    relisting: Mutex<HashMap<Option<String>, HashSet<Key>>>,
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
        secret.metadata.namespace.clone()?,
        secret.metadata.name.clone()?,
    ))
}

/// Removes what the reconciler never reads, wiping the data as it goes.
pub fn strip(mut secret: Secret) -> Secret {
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
    pub fn lookup(&self, namespace: &str, name: &str) -> Lookup {
        if !self.is_listed(namespace) {
            return Lookup::NotListed;
        }
        match lock(&self.entries).get(&(namespace.to_owned(), name.to_owned())) {
            Some(cached) => Lookup::Present(cached.clone()),
            None => Lookup::Absent,
        }
    }

    /// Waits until `namespace` has been listed, for at most 30 s after start
    /// (a restart then confirms every Secret from the list, not with a GET each).
    pub async fn wait_listed(&self, namespace: &str) {
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
    pub fn apply(&self, scope: &Option<String>, cached: CachedSecret) {
        if cached.name.is_empty() || cached.namespace.is_empty() {
            return;
        }
        let key = cached.key();
        if let Some(seen) = lock(&self.relisting).get_mut(scope) {
            seen.insert(key.clone());
        }
        lock(&self.entries).insert(key, Arc::new(cached));
    }

    /// Forgets a deleted Secret.
    pub fn delete(&self, secret: &Secret) {
        if let Some(key) = key_of(secret) {
            lock(&self.entries).remove(&key);
        }
    }

    /// A (re-)list of `scope` begins.
    pub fn list_started(&self, scope: &Option<String>) {
        lock(&self.relisting).insert(scope.clone(), HashSet::new());
    }

    /// The (re-)list of `scope` is complete: Secrets of the scope it did not list are gone.
    pub fn list_done(&self, scope: &Option<String>) {
        let Some(seen) = lock(&self.relisting).remove(scope) else {
            return;
        };
        lock(&self.entries).retain(|key, _| {
            let in_scope = scope.as_ref().is_none_or(|ns| *ns == key.0);
            !in_scope || seen.contains(key)
        });
        lock(&self.listed).insert(scope.clone());
        self.lists.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Secrets held (for tests and metrics).
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Whether no Secret is held.
    pub fn is_empty(&self) -> bool {
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
}
