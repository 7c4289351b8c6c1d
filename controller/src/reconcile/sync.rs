//! One sync of a SealedSecret's Secret: read or create, compare, write (bounded attempts,
//! fenced), and how its errors are classified (transient, API server unreachable).

use super::*;

pub(super) fn is_immutable_error(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422
        && s.message.ends_with("field is immutable when `immutable` is set"))
}

/// Whether retrying may succeed without any change: server errors, throttling, conflicts
/// and transport failures.
pub(super) fn is_transient(error: &Error) -> bool {
    match error {
        Error::GetSecret(e) | Error::ApplySecret(e) | Error::Status(e) | Error::Kube(e) => {
            match api_code(e) {
                Some(code) => code >= 500 || code == 429 || code == 409,
                None => true,
            }
        }
        _ => false,
    }
}

/// Whether the request did not reach an answering API server: a transport error, or a 5xx
/// (not a 409 conflict nor a 429, which an answering server sends).
pub(super) fn unreachable(error: &Error) -> bool {
    match error {
        Error::GetSecret(e) | Error::ApplySecret(e) | Error::Status(e) | Error::Kube(e) => {
            crate::cluster::apihealth::unreachable(e)
        }
        _ => false,
    }
}

/// What a step's result says about the API server: `Some(true)` when it answered (`wrote`:
/// a write went through; or it answered a request with an error status of its own),
/// `Some(false)` when it could not be reached, `None` when the step got no answer either
/// way (its outcome came from the caches, or it failed before any request).
pub(super) fn reachability(result: Result<bool, &Error>) -> Option<bool> {
    match result {
        Ok(wrote) => wrote.then_some(true),
        Err(e) if unreachable(e) => Some(false),
        Err(Error::GetSecret(_) | Error::ApplySecret(_) | Error::Status(_) | Error::Kube(_)) => {
            Some(true)
        }
        Err(_) => None,
    }
}

/// Tells the API server's health tracker what `step` learned ([`reachability`]): only an
/// answer marks it reachable again, so an outcome read from the caches during an outage
/// does not announce a recovery and reset every backoff.
pub(super) fn report_reachability(ctx: &Context, step: &'static str, result: Result<bool, &Error>) {
    match (reachability(result), result) {
        (Some(false), Err(e)) => ctx.state.api_unreachable(step, e),
        (Some(true), _) => ctx.state.api_answered(),
        _ => {}
    }
}

pub(super) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Marks a write of an object's Secret as in flight, until dropped (also when the reconcile
/// is cancelled mid-write).
pub(super) struct Writing<'a> {
    pub(super) ctx: &'a Context,
    pub(super) oref: &'a SsRef,
}

impl<'a> Writing<'a> {
    pub(super) fn start(ctx: &'a Context, oref: &'a SsRef) -> Self {
        ctx.with_object(oref, |o| o.writing = true);
        Self { ctx, oref }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.ctx.with_object(self.oref, |o| o.writing = false);
    }
}

/// Brings the Secret in line with `ss`. `stripped_digest`: `ss` was cached without its
/// encrypted values and this is its spec digest; if the Secret cannot be confirmed without
/// them, [`Error::Incomplete`] (before any write).
pub(super) async fn sync(
    ctx: &Context,
    ss: &Arc<SealedSecret>,
    stripped_digest: Option<String>,
    fence: &Fence,
) -> Result<Outcome> {
    let name = ss
        .metadata
        .name
        .as_deref()
        .ok_or(Error::MissingMetadata("name"))?;
    let namespace = ss
        .metadata
        .namespace
        .as_deref()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let uid = ss
        .metadata
        .uid
        .as_deref()
        .ok_or(Error::MissingMetadata("uid"))?;
    if !ctx.config.accept_deprecated_v1_data
        && ss.spec.data.as_deref().is_some_and(|d| !d.is_empty())
    {
        // Before the in-sync check: a v1 SealedSecret synced while the format was accepted
        // must stop too, not stay `Synced=True` on the strength of its old Secret.
        return Err(Error::DeprecatedDataRejected);
    }
    let oref = SsRef::new(name).within(namespace);
    // Built only for a read the cache cannot answer (kube formats its URL each time).
    let secrets = || Api::<Secret>::namespaced(ctx.client.clone(), namespace);
    let stripped = stripped_digest.is_some();
    let digest = stripped_digest.unwrap_or_else(|| formats::spec_digest(ss));
    let ring = ctx.state.keys.ring();
    let unseal = async || {
        if stripped {
            return Err(Error::Incomplete);
        }
        unseal(ctx, &oref, ss, &ring, &digest).await
    };
    let mut desired: Option<Desired> = None;
    let pp = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        // The first look goes to the watched cache: a Secret in sync ends here and a missing
        // one is created without a read. Anything else, and every retry, reads the Secret.
        let cached = if attempt == 1 {
            ctx.secrets.lookup(namespace, name)
        } else {
            Lookup::NotListed
        };
        let existing = match cached {
            Lookup::Absent => None,
            Lookup::Present(c) => {
                let seen = c.to_secret();
                let mode = mode_for(&seen, ss, uid);
                let mac = MacCheck::Cached(&c.mac);
                if mode.is_ok_and(|m| in_sync(ctx, &ring, ss, &seen, m, &digest, mac)) {
                    ctx.with_object(&oref, |o| o.recreate_managed = false);
                    return Ok(Outcome::Unchanged);
                }
                secrets().get_opt(name).await.map_err(Error::GetSecret)?
            }
            Lookup::NotListed => secrets().get_opt(name).await.map_err(Error::GetSecret)?,
        };
        let result = match &existing {
            None => {
                if desired.is_none() {
                    desired = Some(unseal().await?);
                }
                let Some(d) = &desired else { continue };
                let managed = ctx.with_object(&oref, |o| o.recreate_managed);
                fence.check().map_err(Error::Fenced)?;
                let _writing = Writing::start(ctx, &oref);
                let created = if managed {
                    let mut s = d.secret.clone();
                    s.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(MANAGED_ANNOTATION.to_owned(), TRUE.to_owned());
                    writes::create(&ctx.client, namespace, &pp, &s).await
                } else {
                    writes::create(&ctx.client, namespace, &pp, &d.secret).await
                };
                if created.is_ok() && managed {
                    ctx.with_object(&oref, |o| o.recreate_managed = false);
                }
                created.map(|version| (Outcome::Created, version))
            }
            Some(existing) => {
                ctx.with_object(&oref, |o| o.recreate_managed = false);
                let mode = mode_for(existing, ss, uid)?;
                if desired.is_none()
                    && in_sync(ctx, &ring, ss, existing, mode, &digest, MacCheck::Data)
                {
                    return Ok(Outcome::Unchanged);
                }
                if desired.is_none() {
                    desired = Some(unseal().await?);
                }
                let Some(d) = &desired else { continue };
                let mut current = existing.clone();
                normalize(&mut current);
                let next = updated(&current, &d.secret, mode);
                if next == current {
                    return Ok(Outcome::Unchanged);
                }
                if existing.immutable == Some(true) && next.data != current.data {
                    return Err(Error::Immutable {
                        name: name.to_owned(),
                    });
                }
                fence.check().map_err(Error::Fenced)?;
                let _writing = Writing::start(ctx, &oref);
                writes::replace(&ctx.client, namespace, name, &pp, &next)
                    .await
                    .map(|version| (Outcome::Updated, version))
            }
        };
        // (`Writing` has already cleared `writing`.)
        let raced = ctx.with_object(&oref, |o| o.take_raced_version());
        match result {
            Ok((outcome, version)) => {
                ctx.with_object(&oref, |o| {
                    // A Secret event that arrived during the write and is not the write itself.
                    o.recheck |= raced.is_some_and(|r| Some(r) != version);
                    o.written_version = version.map(String::into_boxed_str);
                });
                return Ok(outcome);
            }
            Err(e) if is_immutable_error(&e) => {
                return Err(Error::Immutable {
                    name: name.to_owned(),
                });
            }
            // Someone else wrote in between (409 Conflict / AlreadyExists): read again.
            Err(e) if api_code(&e) == Some(409) && attempt < WRITE_ATTEMPTS => {
                tracing::debug!("secret changed while writing; retrying");
            }
            Err(e) => return Err(Error::ApplySecret(e)),
        }
    }
}
