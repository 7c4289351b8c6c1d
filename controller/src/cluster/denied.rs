//! Features the API server's RBAC refuses, turned off one by one instead of failing.
//!
//! A replica installed with other roles than kseal's (Bitnami's Helm chart grants no
//! `coordination.k8s.io` Lease, Events only in the core group, and `update` but not `patch` on
//! `sealedsecrets/status`) still unseals: leader election off (the replica leads alone, as
//! Bitnami's controller always does; `crate::cluster::leader`), Events off (the log has what
//! they would say), the status written with an update instead of a patch, or not at all. Each
//! is logged once at WARN with the refused permission and the fix, and listed on the metrics
//! port's `/readyz` for as long as the process runs ([`Degraded::lines`]); never silent.
//!
//! This module depends on nothing else in the crate but `fault` and `scrub`.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Whether the API server refused the request for lack of permission (a `403 Forbidden` that
/// is neither a namespace being deleted nor an admission denial:
/// [`crate::cluster::fault::Fault::not_permitted`]). Only such a refusal turns a feature off
/// (attack review of issue 40, round 2: one Event in a namespace being deleted listed Events
/// as off on `/readyz` for the life of the process).
pub(crate) fn forbidden(error: &kube::Error) -> bool {
    crate::cluster::fault::Fault::of(error).not_permitted()
}

/// The features turned off, each with its `/readyz` line.
#[derive(Debug, Default)]
pub struct Degraded(Mutex<BTreeMap<&'static str, String>>);

impl Degraded {
    /// Records `feature` as degraded, described by `line` (the permission and the fix; no
    /// secret material). Returns whether this is the first time, i.e. whether to log it.
    pub fn record(&self, feature: &'static str, line: impl FnOnce() -> String) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.contains_key(feature) {
            return false;
        }
        map.insert(feature, line());
        true
    }

    /// Whether `feature` was recorded.
    pub fn contains(&self, feature: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(feature)
    }

    /// One line per feature turned off, in name order, each ending in a newline.
    pub fn lines(&self) -> String {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().map(|line| format!("{line}\n")).collect()
    }
}

/// An Event the API server did not take. A refusal turns Events off with one WARN line (later
/// refusals are not logged); other failures are logged at debug, as before.
pub(crate) fn event_failed(degraded: &Degraded, error: &kube::Error) {
    if forbidden(error) {
        let first = degraded.record("events", || {
            format!(
                "events off: the API server refused an Event ({}); the log says what they \
                 would: grant create and patch on events.k8s.io events (docs/bitnami.md)",
                describe(error)
            )
        });
        if first {
            tracing::warn!(
                error = %describe(error),
                "events off: the API server refused an Event; the log says what they would: \
                 grant create and patch on events.k8s.io events (docs/bitnami.md)"
            );
        }
        return;
    }
    tracing::debug!(error = %describe(error), "failed to publish event");
}

/// Writes `status` on `fresh` (the SealedSecret the refused patch was computed from, with its
/// `resourceVersion`) with an update of the status subresource, after the API server refused
/// the patch: Bitnami's roles grant `update` on `sealedsecrets/status`, not `patch`. The
/// update says so once (INFO) and on `/readyz`; if it is refused too, the status is off: one
/// WARN line, and `Ok(false)` (not written) from then on without asking. A `409` is returned
/// as is (the reconcile retries).
pub(crate) async fn update_status(
    client: &kube::Client,
    degraded: &Degraded,
    fresh: &kseal_api::SealedSecret,
    status: kseal_api::SealedSecretStatus,
) -> kube::Result<bool> {
    if degraded.contains("status") {
        return Ok(false);
    }
    let (Some(name), Some(namespace)) = (
        fresh.metadata.name.as_deref(),
        fresh.metadata.namespace.as_deref(),
    ) else {
        return Ok(false);
    };
    let mut object = fresh.clone();
    object.status = Some(status);
    let api = kube::Api::<kseal_api::SealedSecret>::namespaced(client.clone(), namespace);
    let pp = kube::api::PostParams {
        field_manager: Some(kseal_api::constants::FIELD_MANAGER.to_owned()),
        ..kube::api::PostParams::default()
    };
    match api.replace_status(name, &pp, &object).await {
        Ok(_) => {
            let first = degraded.record("status-update", || {
                "status: written with an update (the API server refused a patch of \
                 sealedsecrets/status; grant patch to use it, docs/bitnami.md)"
                    .to_owned()
            });
            if first {
                tracing::info!(
                    "status written with an update: the API server refused a patch of \
                     sealedsecrets/status (docs/bitnami.md)"
                );
            }
            Ok(true)
        }
        Err(error) if forbidden(&error) => {
            let first = degraded.record("status", || {
                format!(
                    "status off: the API server refused both a patch and an update of \
                     sealedsecrets/status ({}); grant update or patch on it (docs/bitnami.md)",
                    describe(&error)
                )
            });
            if first {
                tracing::warn!(
                    error = %describe(&error),
                    "status off: the API server refused both a patch and an update of \
                     sealedsecrets/status; no status is written: grant update or patch on it \
                     (docs/bitnami.md)"
                );
            }
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// The whole SealedSecret `name`, read through its status subresource (kseal's roles grant
/// `get` there, not on SealedSecrets), or, when the API server refuses that, with a plain
/// `get` (Bitnami's roles grant that instead): said once (INFO) and on `/readyz`.
pub(crate) async fn get_whole(
    api: &kube::Api<kseal_api::SealedSecret>,
    degraded: &Degraded,
    name: &str,
) -> kube::Result<kseal_api::SealedSecret> {
    if !degraded.contains("status-get") {
        match api.get_status(name).await {
            Err(error) if forbidden(&error) => {
                degraded.record("status-get", || {
                    format!(
                        "sealedsecrets: read with get (the API server refused get on \
                         sealedsecrets/status: {}; docs/bitnami.md)",
                        describe(&error)
                    )
                });
                tracing::info!(
                    error = %describe(&error),
                    "whole SealedSecrets are read with get: the API server refused get on \
                     sealedsecrets/status (docs/bitnami.md)"
                );
            }
            other => return other,
        }
    }
    api.get(name).await
}

/// A Kubernetes error on one line, scrubbed like every error the controller writes
/// (`crate::scrub`): an RBAC refusal names only the user, the verb and the resource, but an
/// Event or a status refused by an admission policy may quote what was sent.
pub(crate) fn describe(error: &kube::Error) -> String {
    crate::scrub::scrub(&match error {
        kube::Error::Api(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("events.events.k8s.io is forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        )
    }

    #[test]
    fn a_feature_is_recorded_once_and_listed() {
        let d = Degraded::default();
        assert_eq!(d.lines(), "");
        assert!(d.record("lease", || "leader election off: x".into()));
        assert!(!d.record("lease", || unreachable!("recorded once")));
        assert!(d.record("events", || "events off: y".into()));
        assert_eq!(d.lines(), "events off: y\nleader election off: x\n");
        assert!(d.contains("lease") && !d.contains("status"));
    }

    #[test]
    fn only_a_refusal_turns_events_off() {
        let d = Degraded::default();
        event_failed(
            &d,
            &kube::Error::Api(
                kube::core::Status::failure("conflict", "Conflict")
                    .with_code(409)
                    .boxed(),
            ),
        );
        assert!(!d.contains("events"));
        // 403s that are not about permissions.
        for message in [
            "events.events.k8s.io \"x.1\" is forbidden: unable to create new content in namespace gone because it is being terminated",
            "admission webhook \"e.example.com\" denied the request: no",
            "events.events.k8s.io \"x.1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no",
        ] {
            let error = kube::Error::Api(
                kube::core::Status::failure(message, "Forbidden")
                    .with_code(403)
                    .boxed(),
            );
            assert!(!forbidden(&error), "{message}");
            event_failed(&d, &error);
        }
        assert!(!d.contains("events"));
        event_failed(&d, &refused());
        event_failed(&d, &refused());
        let lines = d.lines();
        assert_eq!(lines.matches("events off: ").count(), 1, "{lines}");
        assert!(
            lines.contains("events.events.k8s.io is forbidden (403 Forbidden)"),
            "{lines}"
        );
    }

    #[test]
    fn a_described_denial_quotes_nothing_it_was_sent() {
        let error = kube::Error::Api(
            kube::core::Status::failure(
                "admission webhook \"e.example.com\" denied the request: message hunter2",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        );
        let line = describe(&error);
        assert!(!line.contains("hunter2"), "{line}");
        assert!(line.ends_with("(403 Forbidden)"), "{line}");
        assert_eq!(
            describe(&refused()),
            "events.events.k8s.io is forbidden (403 Forbidden)"
        );
    }
}
