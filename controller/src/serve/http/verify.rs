//! `/v1/verify` and `/v1/rotate`: the request body read with its limits, the values counted
//! against the request's budget, and the RSA work on the pool's HTTP share.

use super::*;
use http_body_util::BodyExt as _;
use kseal_keys::KeyId;

pub(super) async fn read_body(app: &App, request: Request) -> Result<Bytes, Problem> {
    let limit = app.options.max_body_bytes;
    let read = axum::body::to_bytes(request.into_body(), limit);
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Err(_) => Err(Problem::new(
            StatusCode::REQUEST_TIMEOUT,
            "request body not received in time",
        )),
        // axum reports an over-long body as a length-limit error.
        Ok(Err(e)) if is_length_limit(&e) => Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {limit} bytes"),
        )),
        Ok(Err(_)) => Err(Problem::bad_request("cannot read request body")),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

pub(super) fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A parsed request: the typed object for the crypto, and the raw JSON value so the answer
/// keeps every field the caller sent (including ones the types do not know) unchanged.
pub(super) struct Parsed {
    pub(super) sealed: SealedSecret,
    pub(super) raw: Value,
}

/// Parses one SealedSecret from JSON or YAML, under the budgets of
/// [`kseal_api::request`]: `400` for a body that is not one object, `422` for an object that
/// is not a valid SealedSecret.
pub(super) fn parse_sealed_secret(body: &[u8]) -> Result<Parsed, Problem> {
    let parsed = kseal_api::request::parse_sealed_secret(body).map_err(|e| {
        let status = if e.is_malformed() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNPROCESSABLE_ENTITY
        };
        Problem::new(status, e.to_string())
    })?;
    Ok(Parsed {
        sealed: parsed.sealed,
        raw: parsed.raw,
    })
}

/// What opening a SealedSecret's items gave.
pub(super) struct OpenedItems {
    /// The labels the values opened with: re-seal item `k` with `label.item(k)`.
    pub(super) label: kseal_api::ItemsLabel,
    /// `encryptedData` items, opened (zeroized on drop), each with the key that opened it.
    pub(super) items: Vec<(String, Plaintext, KeyId)>,
    /// The deprecated `spec.data` blob, opened, with the key that opened it.
    pub(super) deprecated: Option<(Plaintext, KeyId)>,
}

/// What one verify or rotate may spend on RSA work, and what it spent.
pub(super) struct Budget<'a> {
    /// The admitted job: a slot is taken per value.
    pub(super) job: &'a HttpJob,
    /// When waiting for slots ends with 503.
    pub(super) deadline: Instant,
    /// Go on after a value fails, to name every failing one (`?all=true`).
    pub(super) all: bool,
    pub(super) stats: OpenStats,
}

/// Values (`encryptedData` items plus the deprecated `data`) in `sealed`, refused with 413
/// beyond `max`.
pub(super) fn count_values(sealed: &SealedSecret, max: usize) -> Result<usize, Problem> {
    let spec = &sealed.spec;
    let count = spec.encrypted_data.len()
        + usize::from(spec.data.as_deref().is_some_and(|d| !d.is_empty()));
    if count > max {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the SealedSecret holds {count} sealed values; this controller accepts at most {max} per request (--max-request-items)"
            ),
        ));
    }
    Ok(count)
}

/// RSA private-key operations opening `values` values of `sealed` may cost at most: one per
/// value when it names a ring key ([`HintPolicy::Binds`]), else one per ring key.
pub(super) fn worst_case_operations(sealed: &SealedSecret, ring: &KeyRing, values: usize) -> u64 {
    let per_value = match sealed.sealing_key_hint() {
        Some(hint) if ring.get(&hint).is_some() => 1,
        _ => ring.len(),
    };
    u64::try_from(values.saturating_mul(per_value)).unwrap_or(u64::MAX)
}

/// Rate-limit units `operations` RSA operations cost (at least the one admission took).
pub(super) fn units(operations: u64) -> i64 {
    i64::try_from(operations.div_ceil(RSA_OPERATIONS_PER_UNIT).max(1)).unwrap_or(i64::MAX)
}

/// Opens every item of `sealed` with `ring`, **without** rendering `spec.template`: the label
/// comes from the top-level name, namespace and scope annotations, bound to the template's
/// digest when the object is template-bound ([`kseal_api::binding`]). Takes an RSA slot per value and adds the operations spent to the
/// budget; stops at the first value that fails unless the budget asks for all.
pub(super) fn open_items(
    sealed: &SealedSecret,
    ring: &KeyRing,
    accept_deprecated_v1_data: bool,
    budget: &mut Budget<'_>,
) -> Result<OpenedItems, Problem> {
    let meta = &sealed.metadata;
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Problem::bad_request("the SealedSecret has no metadata.name"))?;
    let scope = sealed.scope();
    let namespace = meta.namespace.as_deref().filter(|n| !n.is_empty());
    if namespace.is_none() && scope != Scope::Cluster {
        return Err(Problem::bad_request(format!(
            "the {scope} SealedSecret `{name}` has no metadata.namespace"
        )));
    }
    // Public metadata, named in failures: it answers "renamed or moved?" and nothing else.
    // A template-bound object's label also commits to its `spec.template` (digested, never
    // rendered) and each item to its name: an edited template or a value moved to another
    // item fails here like a wrong key, and rotate keeps the binding.
    let (label, tried) = kseal_api::items_label(sealed, namespace.unwrap_or_default(), name)
        .map_err(|e| Problem::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    let spec = &sealed.spec;
    let deprecated = spec.data.as_deref().filter(|d| !d.is_empty());
    if deprecated.is_some() && !spec.encrypted_data.is_empty() {
        return Err(Problem::bad_request(
            "cannot use the field 'encryptedData' and the deprecated field 'data' at the same time",
        ));
    }
    if deprecated.is_some() && !accept_deprecated_v1_data {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "the deprecated field 'data' is not accepted by this controller",
        ));
    }

    // Structural checks on public bytes first, before any RSA operation.
    let Envelopes {
        items: envelopes,
        deprecated,
    } = decode_envelopes(&spec.encrypted_data, deprecated)?;
    if (!envelopes.is_empty() || deprecated.is_some()) && ring.is_empty() {
        return Err(no_keys());
    }

    // A hint naming a ring key binds: a value that fails with it fails (one RSA operation).
    // Otherwise the key that opened the previous value is tried first (it only orders).
    let bound = sealed
        .sealing_key_hint()
        .filter(|hint| ring.get(hint).is_some());
    let mut learned = None;
    let mut open = |label: &Label, bytes: &[u8], budget: &mut Budget<'_>| {
        let _slot = budget
            .job
            .slot(budget.deadline)
            .map_err(|_| Problem::rsa_busy())?;
        let (hint, policy) = match &bound {
            Some(hint) => (Some(hint), HintPolicy::Binds),
            None => (learned.as_ref(), HintPolicy::Orders),
        };
        let opened = ring.open_with(label, bytes, hint, policy, &mut budget.stats);
        if let Ok(opened) = &opened {
            learned = Some(opened.key.clone());
        }
        Ok::<_, Problem>(opened.ok().map(|o| (o.plaintext, o.key)))
    };
    let mut items = Vec::with_capacity(envelopes.len());
    let mut failed = Vec::new();
    for (item, bytes) in &envelopes {
        match open(&label.item(item), bytes, budget)? {
            Some((plaintext, key)) => items.push(((*item).clone(), plaintext, key)),
            None => {
                failed.push(format!("`{item}`"));
                if !budget.all {
                    break;
                }
            }
        }
    }
    if !failed.is_empty() {
        // `items` is dropped here, zeroizing what did open.
        return Err(not_opened(&failed, envelopes.len(), budget.all, &tried));
    }
    let deprecated = match deprecated {
        None => None,
        Some(bytes) => Some(open(label.whole(), &bytes, budget)?.ok_or_else(|| {
            conflict(format!(
                "no key could decrypt the deprecated field 'data' (tried {tried})"
            ))
        })?),
    };
    Ok(OpenedItems {
        label,
        items,
        deprecated,
    })
}

/// A `409` (a value no key opened, or one that is not a sealed value).
fn conflict(message: String) -> Problem {
    Problem::new(StatusCode::CONFLICT, message)
}

/// The envelopes of a SealedSecret's values, decoded and parsed (public bytes only).
struct Envelopes<'a> {
    /// Each `encryptedData` item's.
    items: Vec<(&'a String, Vec<u8>)>,
    /// The deprecated `spec.data` blob's.
    deprecated: Option<Vec<u8>>,
}

/// Decodes and parses each item's envelope and the deprecated blob's: `409` naming the first
/// that is not a valid sealed value.
fn decode_envelopes<'a>(
    encrypted_data: &'a std::collections::BTreeMap<String, String>,
    deprecated: Option<&str>,
) -> Result<Envelopes<'a>, Problem> {
    let decode = |text: &str| -> kseal_keys::Result<Vec<u8>> {
        let bytes = kseal_keys::envelope::decode_base64(text)?;
        kseal_keys::envelope::Envelope::parse(&bytes)?;
        Ok(bytes)
    };
    let mut envelopes = Vec::with_capacity(encrypted_data.len());
    for (item, value) in encrypted_data {
        let bytes = decode(value)
            .map_err(|_| conflict(format!("item `{item}` is not a valid sealed value")))?;
        envelopes.push((item, bytes));
    }
    let deprecated = deprecated
        .map(|blob| {
            decode(blob).map_err(|_| {
                conflict("the deprecated field 'data' is not a valid sealed value".into())
            })
        })
        .transpose()?;
    Ok(Envelopes {
        items: envelopes,
        deprecated,
    })
}

/// The `409` for the items no key opened (`failed`, of `values`): names them and the
/// scope tried, and says when it stopped at the first failure.
fn not_opened(
    failed: &[String],
    values: usize,
    all: bool,
    tried: &kseal_api::ScopeTarget,
) -> Problem {
    let rest = if all || failed.len() == values {
        ""
    } else {
        "; stopped at the first failure (?all=true names every one)"
    };
    let binding = if tried.template_bound {
        format!("{}, or ", kseal_api::TEMPLATE_BINDING_MISMATCH)
    } else {
        String::new()
    };
    conflict(format!(
        "{binding}no key could decrypt items {} (tried {tried}){rest}",
        failed.join(", ")
    ))
}

/// Admits the request as one HTTP job of the shared RSA pool, **before its body is read**
/// (issue 40), then reads the body under [`read_body`]'s limits.
///
/// Refused with 503 and `Retry-After` when the request's client holds its allowance or the
/// HTTP share is taken: the body is then dropped unparsed ([`discard_body`]), so a flood's
/// bodies cost no parsing and hold no place. Also 503 when the body was slow to arrive and
/// a client holding no job took the place meanwhile ([`HttpJob::body_read`]).
pub(super) async fn admit_and_read(
    app: &App,
    request: Request,
) -> Result<(Admitted, Bytes), Problem> {
    let bucket = request.extensions().get::<Bucket>().copied();
    let client = bucket.map_or(Client::Unknown, |b| b.0.1);
    let job = match app
        .state
        .rsa
        .admit_http_reporting(client, &app.state.metrics.http_fair_share)
    {
        Ok(job) => job,
        Err(_) => {
            discard_body(app, request).await;
            return Err(Problem::rsa_busy());
        }
    };
    let body = read_body(app, request).await?;
    job.body_read().map_err(|_| Problem::rsa_busy())?;
    Ok((Admitted { job, bucket }, body))
}

/// Reads and drops a refused request's body, so its client reads the refusal rather than a
/// connection reset with the body unread: at most `--max-body-bytes` of it, within
/// [`BODY_READ_TIMEOUT`] (the bounds of an admitted body), and none when the client waits for
/// `100 Continue` before sending it. A longer or slower body is left to the server, which
/// closes the connection instead. Dropping costs no parsing and no memory beyond a frame.
pub(super) async fn discard_body(app: &App, request: Request) {
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        return;
    }
    let limit = app.options.max_body_bytes;
    let mut body = request.into_body();
    let drain = async {
        let mut read = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            read = read.saturating_add(frame.data_ref().map_or(0, Bytes::len));
            if read > limit {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(BODY_READ_TIMEOUT, drain).await;
}

/// An admitted request: its place in the RSA pool, and the rate-limit bucket it is charged to.
pub(super) struct Admitted {
    job: HttpJob,
    bucket: Option<Bucket>,
}

/// Runs RSA work on a blocking thread as the `admitted` HTTP job of the shared RSA pool
/// ([`admit`]), charges the client's bucket for the worst case before and settles it to what
/// was spent after, and counts the RSA operations whatever the outcome.
pub(super) async fn rsa_job<T: Send + 'static>(
    app: &App,
    admitted: Admitted,
    ring: Arc<KeyRing>,
    worst_case: u64,
    all: bool,
    job: impl FnOnce(&KeyRing, &mut Budget<'_>) -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    // Admission charged one unit; reserve the rest of the worst case now, so concurrent
    // requests of the same client see the debt at once.
    let Admitted {
        job: admitted,
        bucket,
    } = admitted;
    let reserved = units(worst_case) - 1;
    let charge = |extra: i64| {
        if let Some(Bucket(key)) = &bucket {
            app.limiter.charge(key, Instant::now(), extra);
        }
    };
    charge(reserved);
    let metrics = app.state.metrics.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let mut budget = Budget {
            job: &admitted,
            deadline: Instant::now() + HTTP_WAIT,
            all,
            stats: OpenStats::default(),
        };
        let result = job(&ring, &mut budget);
        let spent = budget.stats.rsa_operations;
        metrics.rsa_operations.inc_by(spent);
        (result, spent)
    })
    .await;
    match joined {
        Ok((result, spent)) => {
            charge(units(spent) - 1 - reserved);
            result
        }
        // The reservation stays charged.
        Err(_) => Err(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error",
        )),
    }
}

/// Whether the query asks to name every failing value (`?all`, `?all=true`, `?all=1`).
pub(super) fn wants_all(request: &Request) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "all" | "all=true" | "all=1"))
    })
}

pub(super) fn object_ref(sealed: &SealedSecret) -> String {
    format!(
        "{}/{}",
        sealed.metadata.namespace.as_deref().unwrap_or(""),
        sealed.metadata.name.as_deref().unwrap_or("")
    )
}

/// The keys that may open `sealed` where it says it lives (with rings bound to namespaces,
/// only the rings bound to its namespace; see [`crate::keys::binding`]). A SealedSecret that
/// names a key of a ring bound elsewhere is refused before any RSA operation, naming the
/// binding.
fn scoped_ring(app: &App, sealed: &SealedSecret) -> Result<crate::state::Scoped, Problem> {
    let namespace = sealed.metadata.namespace.as_deref().unwrap_or_default();
    let scoped = app.state.scoped(namespace);
    if let Some(refusal) = scoped.hinted_refusal(sealed, namespace) {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            format!("the SealedSecret names {refusal}"),
        ));
    }
    Ok(scoped)
}

/// A `409` (a value no key opened) with bound rings also names the rings whose keys were not
/// tried in the object's namespace, and their bindings.
fn with_not_tried(mut problem: Problem, not_tried: Option<&str>) -> Problem {
    if let (StatusCode::CONFLICT, Some(rings)) = (problem.status, not_tried) {
        problem.message = format!("{} (not tried in this namespace: {rings})", problem.message);
    }
    problem
}

/// The sealing key's fingerprint for a rotate with no value to re-seal.
fn key_for_empty(
    ring: &KeyRing,
    refusal: Option<&crate::state::SealingProblem>,
) -> Result<String, Problem> {
    ring.sealing_key()
        .map(|k| k.id().to_string())
        .ok_or_else(|| no_sealing_key(refusal))
}

/// `POST /v1/verify`: `200` when every item opens, `409` when one does not.
pub(super) async fn verify(AxumState(app): AxumState<App>, request: Request) -> Response {
    let result = async {
        let all = wants_all(&request);
        let (place, body) = admit_and_read(&app, request).await?;
        let Parsed { sealed, .. } = parse_sealed_secret(&body)?;
        let values = count_values(&sealed, app.options.max_request_items)?;
        let scoped = scoped_ring(&app, &sealed)?;
        let not_tried = scoped.not_tried();
        let ring = scoped.ring;
        let worst_case = worst_case_operations(&sealed, &ring, values);
        let accept_v1 = app.options.accept_deprecated_v1_data;
        let object = object_ref(&sealed);
        let count = rsa_job(&app, place, ring, worst_case, all, move |ring, budget| {
            let opened = open_items(&sealed, ring, accept_v1, budget)?;
            Ok(opened.items.len() + usize::from(opened.deprecated.is_some()))
        })
        .await
        .map_err(|p| with_not_tried(p, not_tried.as_deref()))
        .inspect_err(|p| tracing::debug!(object, status = %p.status, "verify failed"))?;
        tracing::debug!(object, items = count, "verified");
        Ok::<_, Problem>(text(
            StatusCode::OK,
            format!("ok: {count} sealed values decrypt\n"),
        ))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/rotate`: the SealedSecret re-sealed with the sealing key.
///
/// Only `spec.encryptedData` values (or the deprecated `spec.data`), the top-level
/// `kseal.dev/sealing-key` annotation and `status` (dropped) change; everything else,
/// `spec.template` included, comes back exactly as sent. Each value is re-sealed under the
/// label it was opened with, so the scope never changes (CVE-2026-22728).
pub(super) async fn rotate(AxumState(app): AxumState<App>, request: Request) -> Response {
    let result = async {
        let all = wants_all(&request);
        let (place, body) = admit_and_read(&app, request).await?;
        let Parsed { sealed, mut raw } = parse_sealed_secret(&body)?;
        let values = count_values(&sealed, app.options.max_request_items)?;
        let scoped = scoped_ring(&app, &sealed)?;
        let not_tried = scoped.not_tried();
        let ring = scoped.ring.clone();
        let worst_case = worst_case_operations(&sealed, &ring, values);
        let accept_v1 = app.options.accept_deprecated_v1_data;
        let object = object_ref(&sealed);
        let refusal = app.state.sealing_problem();
        let resealed = rsa_job(&app, place, ring, worst_case, all, move |ring, budget| {
            let opened = open_items(&sealed, ring, accept_v1, budget)?;
            reseal(&opened, ring, &scoped, refusal.as_ref())
        })
        .await
        .map_err(|p| with_not_tried(p, not_tried.as_deref()))
        .inspect_err(|p| tracing::debug!(object, status = %p.status, "rotate failed"))?;
        let Resealed {
            items,
            deprecated,
            key_id,
        } = resealed;
        write_resealed(&mut raw, items, deprecated, key_id.as_deref())?;
        tracing::info!(
            object,
            key = key_id.as_deref().unwrap_or("several"),
            "re-sealed with the sealing key"
        );
        Ok::<_, Problem>(axum::Json(raw).into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// What rotate re-sealed: each item's new value, the deprecated blob's, and the key the
/// annotation is to name (none when keys of several rings re-sealed).
struct Resealed {
    items: Vec<(String, String)>,
    deprecated: Option<String>,
    key_id: Option<String>,
}

/// Re-seals what `open_items` opened, each value under the label it was opened with.
fn reseal(
    opened: &OpenedItems,
    ring: &KeyRing,
    scoped: &crate::state::Scoped,
    refusal: Option<&crate::state::SealingProblem>,
) -> Result<Resealed, Problem> {
    // With rings bound to namespaces, each value is re-sealed with the sealing key of
    // the ring whose key opened it, never moved to another ring: the request's
    // namespace is the caller's word, and a cluster-wide value re-sealed to a ring
    // bound more widely would open where its own ring does not.
    let key_for = |opener: &KeyId| -> Result<&kseal_keys::KeyPair, Problem> {
        if let Some((claims, _)) = &scoped.bound
            && let Some(home) = claims.home_sealing(opener)
        {
            return match home {
                (_, Ok(id)) => scoped.full.get(id).ok_or_else(|| no_sealing_key(refusal)),
                ("", Err(why)) => Err(Problem::new(
                    StatusCode::CONFLICT,
                    format!("cannot re-seal: {why}"),
                )),
                (ring_name, Err(why)) => Err(Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "no key seals for ring {ring_name}, whose key opened this SealedSecret: {why}"
                    ),
                )),
            };
        }
        ring.sealing_key().ok_or_else(|| no_sealing_key(refusal))
    };
    let seal = |what: &str, key: &kseal_keys::KeyPair, label: &Label, plaintext: &Plaintext| {
        kseal_keys::seal_base64(key.public_key(), label, plaintext.expose()).map_err(|_| {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("failed to re-seal {what}"),
            )
        })
    };
    let mut items = Vec::with_capacity(opened.items.len());
    let mut first_key: Option<String> = None;
    let mut mixed = false;
    let mut note = |id: String| match &first_key {
        Some(first) => mixed |= *first != id,
        None => first_key = Some(id),
    };
    for (item, plaintext, opener) in &opened.items {
        let key = key_for(opener)?;
        note(key.id().to_string());
        let label = opened.label.item(item);
        items.push((
            item.clone(),
            seal(&format!("item `{item}`"), key, &label, plaintext)?,
        ));
    }
    let deprecated = match &opened.deprecated {
        None => None,
        Some((plaintext, opener)) => {
            let key = key_for(opener)?;
            note(key.id().to_string());
            Some(seal(
                "the deprecated field 'data'",
                key,
                opened.label.whole(),
                plaintext,
            )?)
        }
    };
    // The annotation names the key that re-sealed every value; with values re-sealed
    // by keys of different rings it names none (a hint binds: naming one would make
    // the others fail), and with nothing to re-seal it names the sealing key here.
    let key_id = match first_key {
        Some(_) if mixed => None,
        Some(id) => Some(id),
        None => Some(key_for_empty(ring, refusal)?),
    };
    Ok(Resealed {
        items,
        deprecated,
        key_id,
    })
}

/// Writes the re-sealed values and the sealing-key annotation into the request's JSON, and
/// drops its `status`; every other field stays as sent.
fn write_resealed(
    raw: &mut Value,
    items: Vec<(String, String)>,
    deprecated: Option<String>,
    key_id: Option<&str>,
) -> Result<(), Problem> {
    // The typed parse succeeded, so `raw` is an object with a `metadata` and `spec`
    // that are objects or absent; anything else is answered with 422 below.
    let invalid = || {
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid SealedSecret: metadata and spec must be objects",
        )
    };
    let root = raw.as_object_mut().ok_or_else(invalid)?;
    root.remove("status");
    let metadata = root
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(invalid)?;
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if annotations.is_null() {
        *annotations = json!({});
    }
    let annotations = annotations.as_object_mut().ok_or_else(invalid)?;
    match key_id {
        Some(id) => {
            annotations.insert(
                SEALING_KEY_ANNOTATION.to_owned(),
                Value::String(id.to_owned()),
            );
        }
        None => {
            annotations.remove(SEALING_KEY_ANNOTATION);
        }
    }
    let spec = root
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(invalid)?;
    if !items.is_empty() {
        let data = spec
            .get_mut("encryptedData")
            .and_then(Value::as_object_mut)
            .ok_or_else(invalid)?;
        for (item, value) in items {
            data.insert(item, Value::String(value));
        }
    }
    if let Some(blob) = deprecated {
        spec.insert("data".to_owned(), Value::String(blob));
    }
    Ok(())
}
