//! The SealedSecret's status condition and Events: which condition a result gives, when a
//! status patch is needed, and the patch and the Event themselves (fenced).

use serde::Serialize;

use super::*;

/// The Synced condition a reconcile result calls for.
pub(super) struct DesiredCondition {
    pub(super) status: &'static str,
    pub(super) reason: &'static str,
    pub(super) message: Option<String>,
}

pub(super) fn condition_for(result: &Result<Outcome>) -> DesiredCondition {
    match result {
        Ok(_) => DesiredCondition {
            status: CONDITION_TRUE,
            reason: reason::UNSEALED,
            message: None,
        },
        Err(e) => DesiredCondition {
            status: CONDITION_FALSE,
            reason: match e {
                Error::Unseal(_)
                | Error::KeyNotLoaded { .. }
                | Error::RingBinding { .. }
                | Error::NoKeys => reason::UNSEAL_FAILED,
                Error::DeprecatedDataRejected => reason::DEPRECATED_DATA_REJECTED,
                Error::Unmanaged { .. } => reason::UNMANAGED,
                Error::Immutable { .. } => reason::IMMUTABLE,
                _ => reason::UPDATE_FAILED,
            },
            message: Some(crate::error_chain(e)),
        },
    }
}

pub(super) fn condition_matches(
    status: Option<&kseal_api::SealedSecretStatus>,
    want: &DesiredCondition,
    generation: Option<i64>,
) -> bool {
    let Some(status) = status else { return false };
    let synced = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION_SYNCED);
    synced.is_some_and(|c| {
        c.status == want.status
            && c.reason.as_deref() == Some(want.reason)
            && c.message.as_deref().filter(|m| !m.is_empty()) == want.message.as_deref()
    }) && status.observed_generation == generation
}

/// Writes the Synced condition if it changed. Returns whether it wrote.
pub(super) async fn write_status(
    ctx: &Context,
    ss: &SealedSecret,
    want: &DesiredCondition,
    fence: &Fence,
) -> Result<bool> {
    let generation = ss.metadata.generation;
    if !ctx.config.update_status || condition_matches(ss.status.as_ref(), want, generation) {
        return Ok(false);
    }
    let (Some(name), Some(namespace)) = (
        ss.metadata.name.as_deref(),
        ss.metadata.namespace.as_deref(),
    ) else {
        return Err(Error::MissingMetadata("name"));
    };
    // Built only for a read after a conflict (kube formats its URL each time).
    let api = || Api::<SealedSecret>::namespaced(ctx.client.clone(), namespace);
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let mut read: Option<SealedSecret> = None;
    for attempt in 1..=WRITE_ATTEMPTS {
        // The first patch is computed from the object this reconcile read (the watch's cache:
        // no request) and guarded by its resourceVersion, so it applies only if nothing
        // changed since; after a conflict, from a fresh read.
        let fresh: &SealedSecret = if attempt == 1 && ss.metadata.resource_version.is_some() {
            ss
        } else {
            let sealed = api();
            let whole = crate::cluster::denied::get_whole(&sealed, &ctx.state.api.degraded, name);
            match crate::cluster::apihealth::within_deadline(whole).await {
                Ok(f) => read.insert(f),
                Err(e) if api_code(&e) == Some(404) => return Ok(false),
                Err(e) => return Err(Error::Status(e)),
            }
        };
        if fresh.metadata.uid != ss.metadata.uid {
            return Ok(false);
        }
        // The status speaks for the generation this reconcile read. A newer generation's
        // reconcile writes its own, and an observedGeneration never goes back.
        let observed = fresh.status.as_ref().and_then(|s| s.observed_generation);
        if fresh.metadata.generation > generation || observed > generation {
            return Ok(false);
        }
        if condition_matches(fresh.status.as_ref(), want, generation) {
            return Ok(false);
        }
        let now = Time(jiff::Timestamp::now());
        let mut conditions: Vec<SealedSecretCondition> = fresh
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let previous = conditions.iter().position(|c| c.type_ == CONDITION_SYNCED);
        let transition = match previous.map(|i| &conditions[i]) {
            Some(c) if c.status == want.status => {
                c.last_transition_time.clone().or(Some(now.clone()))
            }
            _ => Some(now.clone()),
        };
        let condition = SealedSecretCondition {
            last_transition_time: transition,
            last_update_time: Some(now),
            message: want.message.clone(),
            reason: Some(want.reason.to_owned()),
            status: want.status.to_owned(),
            type_: CONDITION_SYNCED.to_owned(),
        };
        match previous {
            Some(i) => conditions[i] = condition,
            None => conditions.insert(0, condition),
        }
        // A generation the object lacks is never written: with none, an observedGeneration
        // already there returned above, so the patch leaves it absent either way.
        let status = kseal_api::SealedSecretStatus {
            conditions: Some(conditions),
            observed_generation: generation,
        };
        let patch = StatusPatch {
            metadata: PatchMeta {
                resource_version: fresh.metadata.resource_version.as_deref(),
            },
            status: &status,
        };
        fence.check().map_err(Error::Fenced)?;
        let patched = writes::patch_status::<SealedSecret, _>(
            &ctx.client,
            namespace,
            name,
            &pp,
            &Patch::Merge(&patch),
        )
        .await;
        match patched {
            Ok(_) => return Ok(true),
            Err(e) if api_code(&e) == Some(409) && attempt < WRITE_ATTEMPTS => continue,
            Err(e) if api_code(&e) == Some(404) => return Ok(false),
            // Bitnami's roles grant `update` on the status, not `patch` (cluster::denied).
            Err(e) if crate::cluster::denied::forbidden(&e) => {
                let degraded = &ctx.state.api.degraded;
                return crate::cluster::denied::update_status(&ctx.client, degraded, fresh, status)
                    .await
                    .map_err(Error::Status);
            }
            Err(e) => return Err(Error::Status(e)),
        }
    }
    Ok(false)
}

/// The status patch's body: the resourceVersion it applies to and the new status, written
/// straight from their fields (no `serde_json::Value` built first).
#[derive(Debug, Serialize)]
struct StatusPatch<'a> {
    metadata: PatchMeta<'a>,
    status: &'a kseal_api::SealedSecretStatus,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PatchMeta<'a> {
    resource_version: Option<&'a str>,
}

/// The `action` of the controller's Events.
pub(super) const EVENT_ACTION: &str = "Unseal";

pub(super) async fn publish_event(
    ctx: &Context,
    fence: &Fence,
    ss: &SealedSecret,
    type_: EventType,
    reason: &str,
    note: String,
) {
    if let Err(e) = fence.check() {
        fenced(ctx, "event", e);
        return;
    }
    match type_ {
        // A Normal event goes out once per write of the Secret, so it starts no series: written
        // directly, reading nothing of the answer back. (kube's `Recorder` would keep one event
        // per SealedSecret for 6 minutes after a cold start, 27 MiB for 10,000 objects, only to
        // count repeats the reconciler does not produce, and parse each answer whole.)
        EventType::Normal => {
            let Some(namespace) = ss.metadata.namespace.as_deref() else {
                return;
            };
            let event = writes::event(
                &ctx.reporter,
                ss.object_ref(&()),
                "Normal",
                reason,
                EVENT_ACTION,
                note,
            );
            let pp = PostParams::default();
            if let Err(e) = writes::create_unread(&ctx.client, namespace, &pp, &event).await {
                crate::cluster::denied::event_failed(&ctx.state.api.degraded, &e);
            }
        }
        // Warnings repeat while an object keeps failing: the shared recorder counts them into
        // a series instead of writing one event each time.
        EventType::Warning => {
            let event = Event {
                type_,
                reason: reason.to_owned(),
                note: Some(note),
                action: EVENT_ACTION.to_owned(),
                secondary: None,
            };
            let reference = ss.object_ref(&());
            let published = crate::cluster::apihealth::within_deadline(
                ctx.recorder.publish(&event, &reference),
            );
            if let Err(e) = published.await {
                crate::cluster::denied::event_failed(&ctx.state.api.degraded, &e);
            }
        }
    }
}
