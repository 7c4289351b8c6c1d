//! Per-object state the reconciler keeps between reconciles: failures and backoff, the last
//! condition, what was written; the condition gauge reads it, and a pruner forgets objects
//! that left the store.

use super::*;

/// Per-SealedSecret memory (never holds secret data).
#[derive(Default)]
pub(super) struct ObjectState {
    /// Which key opened which item last time (the next unseal tries it first), for the items
    /// whose key the object hint or the sealing-key annotation does not already name.
    pub(super) item_hints: Box<[(String, KeyId)]>,
    /// Consecutive failures (backoff).
    pub(super) failures: u32,
    /// What few objects need (boxed: one pointer for the others).
    pub(super) rare: Option<Box<RareState>>,
    /// The instance label of the object's condition gauge series, once a reconcile here set
    /// it (its namespace and name are the object's, its condition `Synced`); `None`: no series.
    pub(super) gauge: Option<Box<str>>,
    /// The value of the condition gauge (when `gauge` is set): Synced=True.
    pub(super) synced: bool,
    /// Whether the last reconcile failed (a same-named Secret changing may unblock it).
    pub(super) failing: bool,
    /// Whether that failure was transient (the API server away, throttling, a conflict): the
    /// API server's return resets its backoff.
    pub(super) transient: bool,
    /// The resourceVersion of the Secret as this controller last wrote it: the watch event
    /// of our own write triggers no reconcile (it would only confirm what was just written).
    pub(super) written_version: Option<Box<str>>,
    /// A write of the Secret is in flight: its watch event may come back before its response
    /// (then the response's resourceVersion is not known yet to recognise it).
    pub(super) writing: bool,
    /// Reconcile again at once (set when a change raced with our own write).
    pub(super) recheck: bool,
    /// The Secret was deleted while marked `managed`: its re-creation carries the mark again,
    /// so that deleting it once more brings it back too.
    pub(super) recreate_managed: bool,
}

/// The part of [`ObjectState`] most objects never use.
#[derive(Default)]
pub(super) struct RareState {
    /// The key that opened the deprecated `spec.data`.
    pub(super) object_hint: Option<KeyId>,
    /// The last Warning event published (reason, note), to publish each failure once.
    pub(super) last_warning: Option<(String, String)>,
    /// The resourceVersion of the last Secret event seen while `writing`: if it is not the
    /// version the write returned, someone else wrote, and the object is reconciled again.
    pub(super) raced_version: Option<String>,
}

impl ObjectState {
    pub(super) fn rare(&mut self) -> &mut RareState {
        self.rare.get_or_insert_with(Box::default)
    }

    pub(super) fn object_hint(&self) -> Option<&KeyId> {
        self.rare.as_ref()?.object_hint.as_ref()
    }

    pub(super) fn take_raced_version(&mut self) -> Option<String> {
        self.rare.as_mut()?.raced_version.take()
    }

    pub(super) fn forget_warning(&mut self) {
        if let Some(rare) = self.rare.as_mut() {
            rare.last_warning = None;
        }
    }
}

/// [`ObjectState`]s per namespace and name: keys of 16 bytes and one allocation instead of a
/// 96-byte `ObjectRef` and two. Ordered, so that a scrape of the condition gauge can read it
/// a chunk at a time and resume where it stopped.
#[derive(Default)]
pub(super) struct Objects(pub(super) BTreeMap<Box<str>, BTreeMap<Box<str>, ObjectState>>);

impl Objects {
    pub(super) fn get(&self, oref: &SsRef) -> Option<&ObjectState> {
        self.0
            .get(oref.namespace.as_deref().unwrap_or_default())?
            .get(oref.name.as_str())
    }

    pub(super) fn get_mut(&mut self, oref: &SsRef) -> Option<&mut ObjectState> {
        self.0
            .get_mut(oref.namespace.as_deref().unwrap_or_default())?
            .get_mut(oref.name.as_str())
    }

    /// The entry of `oref`, created if missing (allocating its keys: look up first).
    pub(super) fn entry(&mut self, oref: &SsRef) -> &mut ObjectState {
        let namespace = oref.namespace.as_deref().unwrap_or_default();
        self.0
            .entry(namespace.into())
            .or_default()
            .entry(oref.name.as_str().into())
            .or_default()
    }

    pub(super) fn remove(&mut self, oref: &SsRef) -> Option<ObjectState> {
        let namespace = oref.namespace.as_deref().unwrap_or_default();
        let names = self.0.get_mut(namespace)?;
        let removed = names.remove(oref.name.as_str());
        if names.is_empty() {
            self.0.remove(namespace);
        }
        removed
    }

    pub(super) fn refs(&self) -> impl Iterator<Item = SsRef> + '_ {
        self.0.iter().flat_map(|(namespace, names)| {
            names
                .keys()
                .map(move |name| SsRef::new(name).within(namespace))
        })
    }
}

/// The condition gauge's series: one per object reconciled since it arrived, from its state.
/// A scrape locks the state for one chunk at a time ([`crate::metrics::Scrape`]), so
/// reconciles wait for a chunk, not for a whole scrape (at 100,000 objects on 2 cores a whole
/// scrape used to hold the lock for up to 154 ms under a cold start).
impl crate::metrics::ConditionSeries for Mutex<Objects> {
    fn series_after(
        &self,
        after: Option<&crate::metrics::SeriesCursor>,
        max: usize,
        each: &mut dyn FnMut(&str, &str, &str, i64),
    ) -> Option<crate::metrics::SeriesCursor> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let max = max.max(1);
        let objects = lock(self);
        let namespaces = after.map_or(Unbounded, |c| Included(&*c.namespace));
        let mut visited = 0;
        let mut last: Option<(&str, &str)> = None;
        for (namespace, names) in objects.0.range::<str, _>((namespaces, Unbounded)) {
            let from = match after {
                Some(c) if *c.namespace == **namespace => Excluded(&*c.name),
                _ => Unbounded,
            };
            for (name, o) in names.range::<str, _>((from, Unbounded)) {
                if visited == max {
                    return last.map(|(namespace, name)| crate::metrics::SeriesCursor {
                        namespace: namespace.into(),
                        name: name.into(),
                    });
                }
                visited += 1;
                last = Some((namespace, name));
                if let Some(instance) = &o.gauge {
                    each(namespace, name, instance, if o.synced { 1 } else { -1 });
                }
            }
        }
        None
    }
}

/// Forgets deleted SealedSecrets (hints, backoff, their condition gauge).
pub(super) async fn prune(ctx: Arc<Context>, stores: Vec<Store<CachedSealed>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        // Their condition gauge series go with their state.
        let mut objects = lock(&ctx.objects);
        let gone: Vec<_> = objects
            .refs()
            .filter(|r| stores.iter().all(|s| s.get(r).is_none()))
            .collect();
        for r in &gone {
            objects.remove(r);
        }
    }
}
