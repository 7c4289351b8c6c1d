//! How many SealedSecrets kube-runtime's scheduler holds at once.
//!
//! kube-runtime's `Controller` takes every trigger into its scheduler at once: a delay queue,
//! a map of scheduled requests and a set of pending ones, each with its own copy of the
//! object's reference. On a cold start, a restart or a key-ring change that is every
//! SealedSecret, about 700 bytes each for as long as the backlog lasts, and the scheduler's
//! tables keep that size afterwards (10,000 objects: 7 MiB of a 64 MiB peak).
//!
//! The SealedSecret triggers (the watch's, a key-ring change's, a leadership gain's) go
//! through this queue instead: it keeps `namespace/name` per waiting object (one allocation) (a repeat
//! of one already waiting is not queued again) and hands the controller at most `bound`
//! objects that have not started reconciling. An object is done when its reconcile starts
//! ([`Admission::started`]) or kube-runtime reports it gone from the store
//! ([`Admission::started`] too). A reference that neither ever releases (none is known) is
//! released after [`STALE`], so a leak can slow the queue but never stop it.
//!
//! Triggers of the Secret watch and of an API server's recovery go to the scheduler as
//! before: they name only the objects they concern.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cache::sealed::CachedSealed;

/// An object handed to the scheduler that neither started nor was reported gone within this
/// long no longer counts against the bound.
pub(crate) const STALE: Duration = Duration::from_secs(60);

/// How often a consumer waiting for room looks for stale objects.
const STALE_CHECK: Duration = Duration::from_secs(1);

/// `namespace/name` (neither may hold a `/`), one allocation shared by the queue and the
/// set of queued objects.
type Key = Arc<str>;

fn key(namespace: &str, name: &str) -> Key {
    format!("{namespace}/{name}").into()
}

/// The queue; see the [module](self) documentation.
#[derive(Debug)]
pub(crate) struct Admission {
    inner: Mutex<Inner>,
    changed: Notify,
    bound: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per scope (the namespace a controller watches; `None`: all of them), in arrival order.
    waiting: HashMap<Option<Box<str>>, VecDeque<Key>>,
    /// Waiting objects, so a repeat is not queued twice.
    queued: HashSet<Key>,
    /// Handed to the scheduler, not started yet, with when.
    admitted: HashMap<Key, Instant>,
    /// No entry of `admitted` is older (a lower bound; `None` while it is empty): a full
    /// queue looks for stale entries only once one can be, not at every call.
    oldest: Option<Instant>,
}

impl Admission {
    /// A queue handing out at most `bound` (at least 1) objects not yet started.
    pub(crate) fn new(bound: usize) -> Self {
        Self {
            inner: Mutex::default(),
            changed: Notify::new(),
            bound: bound.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each update leaves the maps consistent, even if a holder panicked.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `namespace/name` for the controller of `scope`, unless it already waits.
    pub(crate) fn push(&self, scope: Option<&str>, namespace: &str, name: &str) {
        let k = key(namespace, name);
        let mut inner = self.lock();
        if inner.queued.contains(&k) {
            return;
        }
        inner.queued.insert(k.clone());
        let queue = inner.waiting.entry(scope.map(Into::into)).or_default();
        queue.push_back(k);
        // A consumer waits on a push only while its queue is empty (a full bound waits for a
        // start instead): one wake-up per burst, not one per object.
        let was_empty = queue.len() == 1;
        drop(inner);
        if was_empty {
            self.changed.notify_waiters();
        }
    }

    /// The reconcile of `namespace/name` started (or the object is gone): it no longer
    /// counts against the bound.
    pub(crate) fn started(&self, namespace: &str, name: &str) {
        let mut inner = self.lock();
        // Only a full bound keeps a consumer with objects waiting from taking the next.
        let was_full = inner.admitted.len() >= self.bound;
        if inner.admitted.remove(&key(namespace, name)).is_some() && was_full {
            drop(inner);
            self.changed.notify_waiters();
        }
    }

    /// Objects waiting, in every scope.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().queued.len()
    }

    /// Objects handed out and not started yet.
    #[cfg(test)]
    pub(crate) fn admitted(&self) -> usize {
        self.lock().admitted.len()
    }

    /// The next object for the controller of `scope`, once one waits and there is room.
    pub(crate) async fn next(&self, scope: Option<&str>) -> ObjectRef<CachedSealed> {
        let scope: Option<Box<str>> = scope.map(Into::into);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(r) = self.try_next(&scope) {
                return r;
            }
            let stale_check = tokio::time::sleep(STALE_CHECK);
            tokio::select! {
                () = changed => {}
                () = stale_check => {}
            }
        }
    }

    fn try_next(&self, scope: &Option<Box<str>>) -> Option<ObjectRef<CachedSealed>> {
        let mut inner = self.lock();
        let Inner {
            waiting,
            queued,
            admitted,
            oldest,
        } = &mut *inner;
        let queue = waiting.get_mut(scope)?;
        let front = queue.front()?;
        let now = Instant::now();
        if admitted.len() >= self.bound && !admitted.contains_key(front) {
            // A full bound is the steady state of a backlog (each start makes room for one),
            // so the sweep runs only when the oldest entry may have gone stale.
            if oldest.is_some_and(|o| now.duration_since(o) >= STALE) {
                admitted.retain(|_, at| now.duration_since(*at) < STALE);
                *oldest = admitted.values().min().copied();
            }
            if admitted.len() >= self.bound {
                return None;
            }
        }
        let k = queue.pop_front()?;
        if queue.is_empty() {
            waiting.remove(scope);
        }
        queued.remove(&k);
        let (namespace, name) = k.split_once('/').unwrap_or(("", &k));
        let r = ObjectRef::new(name).within(namespace);
        if admitted.is_empty() {
            *oldest = Some(now);
        }
        admitted.insert(k, now);
        Some(r)
    }

    /// The controller of `scope`'s triggers: [`Admission::next`], forever.
    pub(crate) fn stream(
        self: Arc<Self>,
        scope: Option<String>,
    ) -> impl futures::Stream<Item = ObjectRef<CachedSealed>> + Send + 'static {
        futures::stream::unfold((self, scope), |(admission, scope)| async move {
            let r = admission.next(scope.as_deref()).await;
            Some((r, (admission, scope)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt as _;

    fn name(r: &ObjectRef<CachedSealed>) -> (&str, &str) {
        (r.namespace.as_deref().unwrap_or_default(), r.name.as_str())
    }

    #[tokio::test]
    async fn hands_out_in_order_up_to_the_bound_and_more_as_reconciles_start() {
        let a = Admission::new(2);
        for n in ["a", "b", "c"] {
            a.push(None, "ns", n);
        }
        assert_eq!(a.waiting(), 3);
        assert_eq!(name(&a.next(None).await), ("ns", "a"));
        assert_eq!(name(&a.next(None).await), ("ns", "b"));
        assert_eq!(a.admitted(), 2);
        // Full: `c` waits until a reconcile starts.
        assert!(a.next(None).now_or_never().is_none());
        a.started("ns", "a");
        assert_eq!(name(&a.next(None).await), ("ns", "c"));
        assert_eq!((a.waiting(), a.admitted()), (0, 2));
        // A start of something never handed out changes nothing.
        a.started("ns", "zzz");
        assert_eq!(a.admitted(), 2);
    }

    #[tokio::test]
    async fn a_repeat_is_queued_once_and_an_admitted_object_passes_a_full_queue() {
        let a = Admission::new(1);
        a.push(None, "ns", "a");
        a.push(None, "ns", "a");
        assert_eq!(a.waiting(), 1);
        assert_eq!(name(&a.next(None).await), ("ns", "a"));
        // Triggered again before its reconcile started: no room, but it is already counted.
        a.push(None, "ns", "a");
        assert_eq!(name(&a.next(None).await), ("ns", "a"));
        assert_eq!(a.admitted(), 1);
    }

    #[tokio::test]
    async fn scopes_have_their_own_queues() {
        let a = Admission::new(10);
        a.push(Some("one"), "one", "x");
        a.push(Some("two"), "two", "y");
        assert!(a.next(Some("three")).now_or_never().is_none());
        assert_eq!(name(&a.next(Some("two")).await), ("two", "y"));
        assert_eq!(name(&a.next(Some("one")).await), ("one", "x"));
    }

    #[tokio::test]
    async fn a_waiting_consumer_wakes_on_a_push_and_on_a_start() {
        let a = Arc::new(Admission::new(1));
        let consumer = tokio::spawn({
            let a = a.clone();
            async move { name(&a.next(None).await).1.to_owned() }
        });
        tokio::task::yield_now().await;
        a.push(None, "ns", "a");
        assert_eq!(consumer.await.unwrap(), "a");

        a.push(None, "ns", "b");
        let consumer = tokio::spawn({
            let a = a.clone();
            async move { name(&a.next(None).await).1.to_owned() }
        });
        tokio::task::yield_now().await;
        assert!(!consumer.is_finished());
        a.started("ns", "a");
        assert_eq!(consumer.await.unwrap(), "b");
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_never_started_stops_counting_after_stale() {
        let a = Admission::new(1);
        a.push(None, "ns", "lost");
        a.push(None, "ns", "next");
        assert_eq!(name(&a.next(None).await), ("ns", "lost"));
        let started = Instant::now();
        // Auto-advancing time: the wait ends at the first stale check past STALE.
        assert_eq!(name(&a.next(None).await), ("ns", "next"));
        let waited = started.elapsed();
        assert!(
            waited >= STALE && waited <= STALE + STALE_CHECK,
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_object_goes_stale_on_its_own_clock() {
        let a = Admission::new(2);
        for n in ["first", "second", "third", "fourth"] {
            a.push(None, "ns", n);
        }
        let t0 = Instant::now();
        assert_eq!(name(&a.next(None).await), ("ns", "first"));
        tokio::time::advance(STALE / 2).await;
        assert_eq!(name(&a.next(None).await), ("ns", "second"));
        // Full: `first` stops counting at STALE, `second` half a STALE later.
        assert_eq!(name(&a.next(None).await), ("ns", "third"));
        let waited = t0.elapsed();
        assert!(
            waited >= STALE && waited <= STALE + STALE_CHECK,
            "{waited:?}"
        );
        assert_eq!(a.admitted(), 2);
        assert_eq!(name(&a.next(None).await), ("ns", "fourth"));
        let waited = t0.elapsed();
        assert!(
            waited >= STALE + STALE / 2 && waited <= STALE + STALE / 2 + STALE_CHECK,
            "{waited:?}"
        );
        // A start releases at once, stale or not.
        a.started("ns", "third");
        assert_eq!(a.admitted(), 1);
    }
}
