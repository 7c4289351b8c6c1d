//! Namespace labels, for rings bound by `--ring-namespace-selector`: a watch of the cluster's
//! Namespaces (their labels only are kept), started only when a binding has a selector.
//!
//! Until the first list finished (or while the watch cannot list), a namespace's labels are
//! not known and no selector matches it: a SealedSecret there waits for a key rather than
//! being opened by a ring that may not be bound to it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt as _};

/// The labels of every Namespace, as the watch last saw them.
#[derive(Debug, Default)]
pub struct NamespaceLabels {
    /// `None` until the first list completed.
    labels: RwLock<Option<HashMap<String, BTreeMap<String, String>>>>,
    /// Bumped at every change, so the reconciler can retry objects that waited for labels.
    changes: tokio::sync::watch::Sender<u64>,
}

impl NamespaceLabels {
    /// The labels of `namespace` (`None`: not known: the first list has not completed, or no
    /// such namespace).
    pub fn get(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.labels
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()?
            .get(namespace)
            .cloned()
    }

    /// Notified at each change of any namespace's labels.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn set(&self, namespace: &Namespace) {
        let mut guard = self.labels.write().unwrap_or_else(PoisonError::into_inner);
        let map = guard.get_or_insert_with(HashMap::new);
        let labels = namespace.labels().clone();
        if map.get(&namespace.name_any()) != Some(&labels) {
            map.insert(namespace.name_any(), labels);
            drop(guard);
            self.changes.send_modify(|n| *n += 1);
        }
    }

    fn replace(&self, all: HashMap<String, BTreeMap<String, String>>) {
        *self.labels.write().unwrap_or_else(PoisonError::into_inner) = Some(all);
        self.changes.send_modify(|n| *n += 1);
    }

    fn remove(&self, namespace: &Namespace) {
        let mut guard = self.labels.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(map) = guard.as_mut() {
            map.remove(&namespace.name_any());
        }
    }
}

/// Watches Namespaces into `labels` until `shutdown` turns true, retrying with `backoff`.
/// `report` hears of every answer (`None`) and every watch failure, so the caller can count
/// them and track the API server's reachability.
pub async fn run(
    client: Client,
    labels: Arc<NamespaceLabels>,
    backoff: impl kube::runtime::utils::Backoff + 'static,
    report: impl Fn(Option<&watcher::Error>) + Send,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<Namespace> = Api::all(client);
    let mut events =
        kube::runtime::WatchStreamExt::backoff(watcher(api, watcher::Config::default()), backoff)
            .boxed();
    let mut relist: Option<HashMap<String, BTreeMap<String, String>>> = None;
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let Some(event) = event else { return };
        match event {
            Ok(watcher::Event::Init) => relist = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(ns)) => {
                relist
                    .get_or_insert_with(HashMap::new)
                    .insert(ns.name_any(), ns.labels().clone());
            }
            Ok(watcher::Event::InitDone) => {
                report(None);
                labels.replace(relist.take().unwrap_or_default());
            }
            Ok(watcher::Event::Apply(ns)) => {
                report(None);
                labels.set(&ns);
            }
            Ok(watcher::Event::Delete(ns)) => labels.remove(&ns),
            Err(e) => report(Some(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, labels: &[(&str, &str)]) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.to_owned());
        ns.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        ns
    }

    #[test]
    fn labels_are_unknown_until_listed_then_follow_changes() {
        let labels = NamespaceLabels::default();
        let mut changes = labels.subscribe();
        labels.set(&ns("early", &[("a", "b")]));
        assert_eq!(labels.get("early").unwrap()["a"], "b");
        labels.replace(HashMap::new());
        assert!(labels.get("early").is_none());
        labels.set(&ns("team-a", &[("kseal.dev/tenant", "team-a")]));
        assert_eq!(labels.get("team-a").unwrap()["kseal.dev/tenant"], "team-a");
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        // The same labels again: no change.
        labels.set(&ns("team-a", &[("kseal.dev/tenant", "team-a")]));
        assert!(!changes.has_changed().unwrap());
        labels.remove(&ns("team-a", &[]));
        assert!(labels.get("team-a").is_none());
    }
}
