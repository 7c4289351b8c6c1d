//! What triggers a reconcile besides the SealedSecret watch: Secret changes, the first keys,
//! a ring change, gaining leadership and an API server that answers again.

use super::*;
use crate::reconcile::affinity::Affinity;

/// Maps a Secret event to the SealedSecret to reconcile: the controlling SealedSecret, the
/// same-named one when the Secret is marked `managed`, or the same-named one while its last
/// reconcile failed (so removing a blocking Secret, or marking it managed, takes effect at
/// once). Deleting an unowned Secret does not re-create it (as in Bitnami).
pub(super) fn secret_trigger(
    ctx: &Context,
    meta: &kube::api::ObjectMeta,
    deleted: bool,
) -> Option<SsRef> {
    let namespace = meta.namespace.as_deref()?;
    let managed = is_true(meta, MANAGED_ANNOTATION);
    if let Some(owner) = meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true) && o.kind == KIND && o.api_version.starts_with("bitnami.com/")
    }) {
        let oref = ObjectRef::new(&owner.name).within(namespace);
        if deleted && managed {
            ctx.with_object(&oref, |o| o.recreate_managed = true);
        }
        // Our own write coming back: nothing changed since (any other write changes the
        // resourceVersion; a deletion always triggers).
        let own_write = !deleted
            && meta.resource_version.is_some()
            && lock(&ctx.objects).get_mut(&oref).is_some_and(|o| {
                if o.writing {
                    // Decided when the write returns (see `sync`): ours, or a recheck.
                    o.rare().raced_version.clone_from(&meta.resource_version);
                    return true;
                }
                o.written_version.as_deref() == meta.resource_version.as_deref()
            });
        return (!own_write).then_some(oref);
    }
    let oref = ObjectRef::new(meta.name.as_deref()?).within(namespace);
    if managed {
        if deleted {
            // Only the same-named SealedSecret's reconcile acts on this; without one, the
            // entry is pruned like any other.
            ctx.with_object(&oref, |o| o.recreate_managed = true);
        }
        return Some(oref);
    }
    // Decided from in-process state set when a reconcile ends, never from a cache that may
    // lag behind.
    let failing = lock(&ctx.objects).get(&oref).is_some_and(|o| o.failing);
    failing.then_some(oref)
}

/// SealedSecrets to reconcile from their watch, which also fills the store (`writer`): every
/// object of a (re-)list, since changes may have been missed while the watch was down, then
/// only updates that change [`relevant_fields`](crate::cache::sealed::relevant_fields) (like
/// Bitnami, our own status writes do not trigger a reconcile), or that turn the status
/// [behind](crate::cache::sealed::status_behind) the generation. An update is compared with
/// the store's entry before the update is applied to it.
pub(super) fn sealed_triggers(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<CachedSealed>>> + Send + 'static,
    state: State,
    mut writer: reflector::store::Writer<CachedSealed>,
    admission: Arc<Admission>,
    affinity: Affinity,
    scope: Option<String>,
) -> impl futures::Stream<Item = watcher::Result<CachedSealed>> + Send + 'static {
    let reader = writer.as_reader();
    events.filter_map(move |event| {
        let mut event = match event {
            Ok(event) => {
                // `Init` starts a (re)list before any request is sent: it is no answer (a
                // refused connection announced "reachable again" at every retry).
                if !matches!(event, watcher::Event::Init) {
                    state.api_answered();
                }
                event
            }
            // Counted and logged here (once per burst); the watcher retries it.
            Err(e) => {
                state.watch_failed("sealedsecrets", &e);
                return futures::future::ready(None);
            }
        };
        if let watcher::Event::Apply(ss) | watcher::Event::InitApply(ss) = &mut event {
            ss.forget_version();
            // Values that name no key: their largest RSA block guides the namespace's first
            // unseal ([`Affinity::observe`]).
            if let (Some(top), Some(namespace)) = (ss.unhinted_top(), &ss.meta().namespace) {
                affinity.observe(namespace, top);
            }
        }
        let trigger = match &event {
            watcher::Event::InitApply(_) => true,
            watcher::Event::Apply(ss) => {
                let now = ss.trigger_fields();
                let before = reader
                    .get(&ObjectRef::from_obj(ss))
                    .map(|b| b.trigger_fields());
                let turned_behind = now.1 && !before.is_some_and(|b| b.1);
                before.map(|b| b.0) != Some(now.0) || turned_behind
            }
            watcher::Event::Init | watcher::Event::InitDone | watcher::Event::Delete(_) => false,
        };
        writer.apply_watcher_event(&event);
        // Triggers queue for the scheduler (`admission`); this stream itself yields nothing.
        if let watcher::Event::Apply(ss) | watcher::Event::InitApply(ss) = &event
            && trigger
            && let (Some(namespace), Some(name)) = (&ss.meta().namespace, &ss.meta().name)
        {
            admission.push(scope.as_deref(), namespace, name);
        }
        futures::future::ready(None)
    })
}

/// SealedSecrets to reconcile from the Secret watch of `scope`: [`secret_trigger`] for each
/// change, and every SealedSecret after a re-list (a Secret deleted while the watch was down
/// shows up as nothing at all). Each event first updates the [Secret cache](SecretCache),
/// so a reconcile it triggers reads the Secret as the event delivered it.
pub(super) fn secret_triggers(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<WatchedSecret>>> + Send + 'static,
    ctx: Arc<Context>,
    store: Store<CachedSealed>,
    scope: Option<String>,
) -> impl futures::Stream<Item = SsRef> + Send + 'static {
    let cache = {
        let scope = scope.clone();
        move |ctx: &Context, secret: Secret| {
            let mac = mac_verdict(ctx, &secret);
            ctx.secrets.apply(&scope, CachedSecret::new(secret, mac));
        }
    };
    events
        .scan(false, move |listed_before, event| {
            if event.is_ok() {
                ctx.state.api_answered();
            }
            let refs: Vec<SsRef> = match event {
                Ok(watcher::Event::Apply(WatchedSecret(s))) => {
                    let refs = secret_trigger(&ctx, &s.metadata, false);
                    cache(&ctx, s);
                    refs.into_iter().collect()
                }
                Ok(watcher::Event::Delete(WatchedSecret(s))) => {
                    ctx.secrets.delete(&s);
                    secret_trigger(&ctx, &s.metadata, true)
                        .into_iter()
                        .collect()
                }
                Ok(watcher::Event::Init) => {
                    ctx.secrets.list_started(&scope);
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(WatchedSecret(s))) => {
                    cache(&ctx, s);
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    ctx.secrets.list_done(&scope);
                    let relist = std::mem::replace(listed_before, true);
                    if relist {
                        store
                            .state()
                            .iter()
                            .map(|ss| ObjectRef::from_obj(&**ss))
                            .collect()
                    } else {
                        Vec::new()
                    }
                }
                Err(e) => {
                    ctx.state.watch_failed("secrets", &e);
                    Vec::new()
                }
            };
            futures::future::ready(Some(futures::stream::iter(refs)))
        })
        .flatten()
}

/// Resolves once the key ring holds a key (at once when it already does).
pub(super) async fn first_keys(state: State) {
    let mut rx = state.keys.subscribe();
    if rx.wait_for(|ring| !ring.is_empty()).await.is_err() {
        // The ring's sender is gone: no key will ever come.
        futures::future::pending::<()>().await;
    }
}

/// After the API server came back: the objects whose last reconcile failed only because it
/// was away (a transient error), with their backoff reset, so they are retried now rather
/// than at the end of a backoff that grew during the outage.
pub(super) fn recovered_triggers(
    ctx: Arc<Context>,
    store: Store<CachedSealed>,
) -> impl futures::Stream<Item = SsRef> + Send + 'static {
    let mut rx = ctx.state.api.recoveries();
    rx.mark_unchanged();
    futures::stream::unfold(rx, move |mut rx| {
        let (ctx, store) = (ctx.clone(), store.clone());
        async move {
            rx.changed().await.ok()?;
            let refs: Vec<SsRef> = {
                let mut objects = lock(&ctx.objects);
                store
                    .state()
                    .iter()
                    .map(|ss| ObjectRef::from_obj(&**ss))
                    .filter(|r| {
                        objects.get_mut(r).is_some_and(|o| {
                            let retry = o.failing && o.transient;
                            if retry {
                                o.failures = 0;
                            }
                            retry
                        })
                    })
                    .collect()
            };
            if !refs.is_empty() {
                tracing::info!(
                    objects = refs.len(),
                    "retrying the SealedSecrets that failed while the API server was away"
                );
            }
            Some((futures::stream::iter(refs), rx))
        }
    })
    .flatten()
}

/// Emits once per change of the key ring.
/// Every SealedSecret of `store`, queued for the scheduler whenever the ring changes, this
/// replica starts leading or the resync period (with jitter) passes: what
/// `Controller::reconcile_all_on` and a requeue per object would do, through `admission`.
pub(super) fn bulk_triggers(
    state: &State,
    store: Store<CachedSealed>,
    admission: Arc<Admission>,
    scope: Option<String>,
    resync: Option<Duration>,
) -> impl futures::Stream<Item = SsRef> + Send + 'static {
    let resyncs = match resync {
        Some(period) => futures::stream::unfold((), move |()| async move {
            tokio::time::sleep(jitter(period, 0.1)).await;
            Some(((), ()))
        })
        .boxed(),
        None => futures::stream::pending().boxed(),
    };
    let signals = futures::stream::select(
        futures::stream::select(ring_changes(state), leadership_gained(state)),
        futures::stream::select(resyncs, label_changes(state)),
    );
    signals.filter_map(move |()| {
        for ss in store.state() {
            if let (Some(namespace), Some(name)) = (&ss.meta().namespace, &ss.meta().name) {
                admission.push(scope.as_deref(), namespace, name);
            }
        }
        futures::future::ready(None)
    })
}

pub(super) fn ring_changes(state: &State) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut rx = state.keys.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// Emits when namespace labels change (only while a ring is bound by a selector: the label
/// watch runs then), so objects that waited for their namespace's labels are retried.
fn label_changes(state: &State) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut rx = state.namespace_labels.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

/// Emits when this replica becomes the leader (each new term), as the elector publishes it.
pub(super) fn leadership_gained(state: &State) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut rx = state.leadership.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if rx.borrow_and_update().leading {
                return Some(((), rx));
            }
        }
    })
}

pub(super) async fn until_true(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        // The sender is gone: nobody can ask for shutdown any more; keep running.
        futures::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apihealth::NoAnswer;

    /// A watch that cannot reach the API server emits `Init` at every retry of its list,
    /// before any request: that is no answer, so an outage is not announced as over (it
    /// was, at every retry: "unreachable", then "reachable again … down_for=122µs").
    #[tokio::test]
    async fn a_relist_starting_is_no_answer_from_the_api_server() {
        let state = State::new();
        let (_store, writer) = reflector::store();
        let error = NoAnswer(Duration::from_secs(5)).into_kube();
        state.api_unreachable("test", &error);
        assert!(!state.api.is_reachable());
        let events =
            futures::stream::iter(vec![Ok(watcher::Event::Init), Ok(watcher::Event::Init)]);
        let triggers = sealed_triggers(
            events,
            state.clone(),
            writer,
            Arc::new(Admission::new(4)),
            Affinity::default(),
            None,
        );
        let out: Vec<_> = triggers.collect().await;
        assert!(out.is_empty());
        assert!(!state.api.is_reachable(), "a relist starting is no answer");
        let (_store, writer) = reflector::store();
        let events =
            futures::stream::iter(vec![Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)]);
        let triggers = sealed_triggers(
            events,
            state.clone(),
            writer,
            Arc::new(Admission::new(4)),
            Affinity::default(),
            None,
        );
        let _: Vec<_> = triggers.collect().await;
        assert!(state.api.is_reachable(), "a finished list is an answer");
    }
}
