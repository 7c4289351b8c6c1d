//! One sync of a SealedSecret's Secret: read or create, compare, write (bounded attempts,
//! fenced), and how its errors are classified (transient, API server unreachable).

use super::*;

use crate::cluster::apihealth::within_deadline;

pub(super) fn is_immutable_error(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422
        && s.message.ends_with("field is immutable when `immutable` is set"))
}

/// Whether retrying may succeed without any change: server errors (not etcd's refusal of an
/// object too large), throttling, conflicts and transport failures
/// ([`crate::cluster::fault::Fault::may_pass_again`]).
pub(super) fn is_transient(error: &Error) -> bool {
    match error {
        Error::GetSecret(e) | Error::ApplySecret(e) | Error::Status(e) | Error::Kube(e) => {
            crate::cluster::fault::Fault::of(e).may_pass_again()
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
    let job = SecretSync::new(ctx, ss, stripped_digest, fence)?;
    // Unsealed at most once per sync, when first needed (or taken from `ctx.retained`).
    let mut desired: Option<Desired> = None;
    let result = job.attempts(&mut desired).await;
    job.finish(&result, desired);
    result
}

/// A write's answer: what it did and the resourceVersion it wrote.
type Sent = kube::Result<(Outcome, Option<String>)>;

/// What every attempt of one sync shares.
struct SecretSync<'a> {
    ctx: &'a Context,
    ss: &'a Arc<SealedSecret>,
    fence: &'a Fence,
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    oref: SsRef,
    /// `ss` was cached without its encrypted values.
    stripped: bool,
    digest: String,
    ring: Arc<KeyRing>,
    pp: PostParams,
}

impl<'a> SecretSync<'a> {
    /// Takes the SealedSecret's name, namespace and uid, and refuses deprecated `spec.data`
    /// when the controller does.
    fn new(
        ctx: &'a Context,
        ss: &'a Arc<SealedSecret>,
        stripped_digest: Option<String>,
        fence: &'a Fence,
    ) -> Result<Self> {
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
        let stripped = stripped_digest.is_some();
        let digest = stripped_digest.unwrap_or_else(|| formats::spec_digest(ss));
        let ring = ctx.state.keys.ring();
        Ok(Self {
            ctx,
            ss,
            fence,
            name,
            namespace,
            uid,
            oref,
            stripped,
            digest,
            ring,
            pp: PostParams {
                dry_run: false,
                field_manager: Some(FIELD_MANAGER.to_owned()),
            },
        })
    }

    /// The Secrets API of the namespace: built only for a read the cache cannot answer (kube
    /// formats its URL each time).
    fn secrets(&self) -> Api<Secret> {
        Api::<Secret>::namespaced(self.ctx.client.clone(), self.namespace)
    }

    /// Reads, compares and writes the Secret, at most [`WRITE_ATTEMPTS`] times.
    async fn attempts(&self, desired: &mut Option<Desired>) -> Result<Outcome> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let existing = match self.look(attempt).await? {
                ControlFlow::Break(outcome) => return Ok(outcome),
                // The Secret read back holds plaintext: zeroized when this attempt ends.
                ControlFlow::Continue(existing) => existing.map(Plain),
            };
            let sent = match &existing {
                None => self.create(desired).await?,
                Some(existing) => match self.replace(&existing.0, desired).await? {
                    ControlFlow::Break(outcome) => return Ok(outcome),
                    ControlFlow::Continue(sent) => sent,
                },
            };
            if let ControlFlow::Break(done) = self.settle(sent, attempt) {
                return done;
            }
        }
    }

    /// Counts the sync's RSA work by what became of it, and keeps its unsealed result for
    /// the retry when the write failed ([`retained`](super::retained)).
    fn finish(&self, result: &Result<Outcome>, desired: Option<Desired>) {
        let ctx = self.ctx;
        let Some(mut d) = desired else {
            // Nothing unsealed: a result kept from before stays for the retry, unless the
            // Secret is settled another way or this replica may no longer write.
            if result.is_ok() || matches!(result, Err(Error::Fenced(_))) {
                ctx.retained.forget(self.uid);
            }
            return;
        };
        let spent = std::mem::take(&mut d.rsa_operations);
        match result {
            Ok(Outcome::Created | Outcome::Updated) => count_rsa(ctx, "written", spent),
            Ok(Outcome::Unchanged) => count_rsa(ctx, "unchanged", spent),
            // A failure that may pass at a retry keeps the result for it; a refusal that only
            // a change can undo drops it ([`retained`](super::retained)).
            Err(e) if is_transient(e) => {
                count_rsa(ctx, "retained", spent);
                ctx.retained
                    .put(self.uid, &retained::key_of(&self.digest, self.ss), d);
            }
            Err(_) => count_rsa(ctx, "discarded", spent),
        }
    }

    /// The Secret to write: unsealed at the first call of the sync, or the result a failed
    /// write of the same spec kept ([`Error::Incomplete`] when it must be unsealed and `ss`
    /// was cached without its encrypted values).
    async fn unsealed<'d>(&self, desired: &'d mut Option<Desired>) -> Result<&'d Desired> {
        let d = match desired.take() {
            Some(d) => d,
            None => match self.ctx.retained.take(
                self.uid,
                &retained::key_of(&self.digest, self.ss),
                |d| {
                    // The binding of now: the namespace may have left a ring since.
                    d.still_opens(&self.ctx.state.scoped(self.namespace).ring, &self.ring)
                },
            ) {
                Some(d) => {
                    self.ctx.state.metrics.unseal_results_reused.inc();
                    d
                }
                None if self.stripped => return Err(Error::Incomplete),
                None => unseal(self.ctx, &self.oref, self.ss, &self.ring, &self.digest).await?,
            },
        };
        Ok(desired.insert(d))
    }

    /// The Secret as it is now (`None`: missing), or `Break` when the cache shows it in sync.
    async fn look(&self, attempt: usize) -> Result<ControlFlow<Outcome, Option<Secret>>> {
        // The first look goes to the watched cache: a Secret in sync ends here and a missing
        // one is created without a read. Anything else, and every retry, reads the Secret.
        let cached = if attempt == 1 {
            self.ctx.secrets.lookup(self.namespace, self.name)
        } else {
            Lookup::NotListed
        };
        let existing = match cached {
            Lookup::Absent => None,
            Lookup::Present(c) => {
                let seen = c.to_secret();
                let mode = mode_for(&seen, self.ss, self.uid);
                let mac = MacCheck::Cached(&c.mac);
                if mode.is_ok_and(|m| {
                    in_sync(self.ctx, &self.ring, self.ss, &seen, m, &self.digest, mac)
                }) {
                    self.ctx
                        .with_object(&self.oref, |o| o.recreate_managed = false);
                    return Ok(ControlFlow::Break(Outcome::Unchanged));
                }
                within_deadline(self.secrets().get_opt(self.name))
                    .await
                    .map_err(Error::GetSecret)?
            }
            Lookup::NotListed => within_deadline(self.secrets().get_opt(self.name))
                .await
                .map_err(Error::GetSecret)?,
        };
        Ok(ControlFlow::Continue(existing))
    }

    /// Creates the missing Secret (marked `managed` again when the one deleted was).
    async fn create(&self, desired: &mut Option<Desired>) -> Result<Sent> {
        let ctx = self.ctx;
        let d = self.unsealed(desired).await?;
        let managed = ctx.with_object(&self.oref, |o| o.recreate_managed);
        self.fence.check().map_err(Error::Fenced)?;
        let _writing = Writing::start(ctx, &self.oref);
        let created = if managed {
            let mut s = Plain(d.secret.clone());
            s.0.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(MANAGED_ANNOTATION.to_owned(), TRUE.to_owned());
            writes::create(&ctx.client, self.namespace, &self.pp, &s.0).await
        } else {
            writes::create(&ctx.client, self.namespace, &self.pp, &d.secret).await
        };
        if created.is_ok() && managed {
            ctx.with_object(&self.oref, |o| o.recreate_managed = false);
        }
        Ok(created.map(|version| (Outcome::Created, version)))
    }

    /// Replaces `existing` with what `ss` seals, or `Break` when nothing is to change.
    async fn replace(
        &self,
        existing: &Secret,
        desired: &mut Option<Desired>,
    ) -> Result<ControlFlow<Outcome, Sent>> {
        let ctx = self.ctx;
        ctx.with_object(&self.oref, |o| o.recreate_managed = false);
        let mode = mode_for(existing, self.ss, self.uid)?;
        if desired.is_none()
            && in_sync(
                ctx,
                &self.ring,
                self.ss,
                existing,
                mode,
                &self.digest,
                MacCheck::Data,
            )
        {
            return Ok(ControlFlow::Break(Outcome::Unchanged));
        }
        let d = self.unsealed(desired).await?;
        let mut current = Plain(existing.clone());
        normalize(&mut current.0);
        let next = updated(&current.0, &d.secret, mode);
        if next.0 == current.0 {
            return Ok(ControlFlow::Break(Outcome::Unchanged));
        }
        if existing.immutable == Some(true) && next.0.data != current.0.data {
            return Err(Error::Immutable {
                name: self.name.to_owned(),
            });
        }
        self.fence.check().map_err(Error::Fenced)?;
        let _writing = Writing::start(ctx, &self.oref);
        Ok(ControlFlow::Continue(
            writes::replace(&ctx.client, self.namespace, self.name, &self.pp, &next.0)
                .await
                .map(|version| (Outcome::Updated, version)),
        ))
    }

    /// Takes a write's answer: the sync's result (`Break`), or `Continue` to read the Secret
    /// again after a conflict.
    fn settle(&self, sent: Sent, attempt: usize) -> ControlFlow<Result<Outcome>> {
        // (`Writing` has already cleared `writing`.)
        let raced = self.ctx.with_object(&self.oref, |o| o.take_raced_version());
        match sent {
            Ok((outcome, version)) => {
                self.ctx.with_object(&self.oref, |o| {
                    // A Secret event that arrived during the write and is not the write itself.
                    o.recheck |= raced.is_some_and(|r| Some(r) != version);
                    o.written_version = version.map(String::into_boxed_str);
                });
                ControlFlow::Break(Ok(outcome))
            }
            Err(e) if is_immutable_error(&e) => ControlFlow::Break(Err(Error::Immutable {
                name: self.name.to_owned(),
            })),
            // Someone else wrote in between (409 Conflict / AlreadyExists): read again.
            Err(e) if api_code(&e) == Some(409) && attempt < WRITE_ATTEMPTS => {
                tracing::debug!("secret changed while writing; retrying");
                ControlFlow::Continue(())
            }
            Err(e) => ControlFlow::Break(Err(Error::ApplySecret(e))),
        }
    }
}
