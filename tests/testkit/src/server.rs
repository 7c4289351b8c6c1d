//! HTTP layer: routing, discovery, request dispatch, watch streams.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult, FieldError};
use crate::faults::{Faults, RequestRecord};
use crate::registry::{self, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, Event, State, WriteReq};

/// Shared state of one test API server.
pub(crate) struct Inner {
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) faults: Faults,
    pub(crate) bookmark_interval: Mutex<Duration>,
    pub(crate) address: Mutex<String>,
    pub(crate) proxies: Mutex<crate::proxy::ProxyTargets>,
    /// Nanoseconds the API's state lock has been held in all, through [`Inner::lock`]: every
    /// request that reads or writes objects holds it, one at a time.
    pub(crate) lock_held_nanos: AtomicU64,
}

impl Inner {
    pub(crate) fn proxy_target(&self, ns: &str, name: &str) -> Option<crate::proxy::ProxyTarget> {
        self.proxies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
    }

    pub(crate) fn lock(&self) -> Held<'_> {
        // A panic while holding the lock already failed the test; keep serving.
        let guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Held {
            guard,
            since: Instant::now(),
            total: &self.lock_held_nanos,
        }
    }
}

/// Releases the lock, then drops the events the request's writes pushed out of the event log
/// (with them, often the last copy of an older state of an object): not under the lock.
fn release(mut st: Held<'_>) {
    let retired = st.take_retired();
    drop(st);
    drop(retired);
}

/// The state lock, held: adds how long to [`Inner::lock_held_nanos`] when released.
pub(crate) struct Held<'a> {
    guard: MutexGuard<'a, State>,
    since: Instant,
    total: &'a AtomicU64,
}

impl std::ops::Deref for Held<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.total.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// Purely syntactic parse of a resource path.
#[derive(Debug, Clone)]
pub(crate) struct Parts {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) ns: Option<String>,
    pub(crate) plural: String,
    pub(crate) name: Option<String>,
    pub(crate) sub: Option<String>,
}

pub(crate) fn parse_parts(path: &str) -> Option<Parts> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return None,
    };
    let (ns, rest) = if rest.len() >= 3
        && rest[0] == "namespaces"
        && !(rest.len() == 3 && matches!(rest[2], "status" | "finalize"))
    {
        (Some(rest[1].to_owned()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.len() > 3 || rest.iter().any(|s| s.is_empty()) {
        return None;
    }
    Some(Parts {
        group: group.to_owned(),
        version: version.to_owned(),
        ns,
        plural: rest[0].to_owned(),
        name: rest.get(1).map(|s| (*s).to_owned()),
        sub: rest.get(2).map(|s| (*s).to_owned()),
    })
}

fn json_response(code: u16, v: &Value) -> Response {
    bytes_response(code, serde_json::to_vec(v).unwrap_or_default())
}

/// `json_response(code, &render(rt, version, obj))`, written without copying `obj`.
fn shown_response(code: u16, rt: &ResourceType, version: &str, obj: &Value) -> Response {
    if rt.events_v1 {
        return json_response(code, &render(rt, version, obj));
    }
    let api_version = rt.api_version(version);
    let shown = Shown::with_api_version(obj, &api_version);
    bytes_response(code, serde_json::to_vec(&shown).unwrap_or_default())
}

fn bytes_response(code: u16, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.to_status())
}

/// The axum fallback handler: every request comes through here.
pub(crate) async fn handle(
    axum::extract::State(inner): axum::extract::State<Arc<Inner>>,
    req: Request,
) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let path = uri.path().to_owned();
    let query: HashMap<String, String> = axum::extract::Query::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let headers = req.headers().clone();
    if let Some(d) = inner.faults.delay() {
        tokio::time::sleep(d).await;
    }
    let resource = parse_parts(&path).map(|p| p.plural);
    let is_watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let resp = if let Some(code) = inner
        .faults
        .take(&method, &path, resource.as_deref(), is_watch)
    {
        error_response(&ApiError::injected(code))
    } else {
        match axum::body::to_bytes(req.into_body(), 64 << 20).await {
            Ok(body) => match crate::proxy::parse_proxy_path(&path) {
                Some((ns, name, tail)) => {
                    crate::proxy::forward(
                        &inner,
                        method.clone(),
                        uri.query(),
                        &headers,
                        body,
                        &ns,
                        &name,
                        &tail,
                    )
                    .await
                }
                None => dispatch(&inner, &method, &path, &query, &headers, body),
            },
            Err(e) => error_response(&ApiError::bad_request(format!("reading request body: {e}"))),
        }
    };
    inner.faults.record(RequestRecord {
        method: method.to_string(),
        path,
        query: uri.query().map(str::to_owned),
        status: resp.status().as_u16(),
        at_us: crate::faults::unix_micros(),
    });
    resp
}

fn dispatch(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = discovery(inner, method, path) {
        return r;
    }
    if let Some(p) = parse_parts(path) {
        let st = inner.lock();
        if !st.serves_group_version(&p.group, &p.version) {
            return page_not_found();
        }
    }
    match resource_request(inner, method, path, q, headers, &body) {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn discovery(inner: &Arc<Inner>, method: &Method, path: &str) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let st = inner.lock();
    let types = st.type_list();
    let v = match segs.as_slice() {
        [] => {
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]})
        }
        ["version"] => json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-kseal-testkit", "gitCommit": "",
            "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24",
            "compiler": "gc", "platform": "linux/amd64"
        }),
        ["healthz" | "livez" | "readyz"] => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            return Some(r);
        }
        ["api"] => {
            registry::core_versions(&inner.address.lock().map(|a| a.clone()).unwrap_or_default())
        }
        ["api", v] => match registry::resource_list(&types, "", v) {
            Some(v) => v,
            None => return Some(page_not_found()),
        },
        ["apis"] => registry::group_list(&types),
        ["apis", g] => match registry::api_group(&types, g) {
            Some(v) => v,
            None => return Some(page_not_found()),
        },
        ["apis", g, v] => match registry::resource_list(&types, g, v) {
            Some(v) => v,
            None => return Some(page_not_found()),
        },
        _ => return None,
    };
    Some(json_response(200, &v))
}

/// Renders a stored object at the requested version (and shape, for events.k8s.io Events).
fn render(rt: &ResourceType, version: &str, obj: &Value) -> Value {
    if rt.events_v1 {
        return registry::event_to_v1(obj);
    }
    let mut o = obj.clone();
    o["apiVersion"] = rt.api_version(version).into();
    o
}

fn field_manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    ua.split('/')
        .next()
        .unwrap_or("unknown")
        .chars()
        .take(128)
        .collect()
}

fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

fn resource_request(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    let parts = parse_parts(path).ok_or_else(ApiError::no_route)?;
    // A JSON body is decoded before the server's one lock is taken (it needs no state, and
    // is much of a write's cost); its error still comes where it came before (after the
    // route's). An apply patch is YAML, decoded under the lock as before.
    let is_apply = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/apply-patch+yaml"));
    let mut parsed = (matches!(*method, Method::POST | Method::PUT | Method::PATCH)
        && parts.name.is_some() != (*method == Method::POST)
        && !is_apply)
        .then(|| parse_json(body));
    let mut body_json = move || parsed.take().unwrap_or_else(|| parse_json(body));
    let mut st = inner.lock();
    let rt = st
        .resolve(&parts.group, &parts.version, &parts.plural)
        .ok_or_else(ApiError::no_route)?;
    if parts.ns.is_some() && !rt.namespaced {
        return Err(ApiError::no_route());
    }
    let status_sub = match parts.sub.as_deref() {
        None => false,
        Some("status") if rt.status => true,
        Some("finalize") if rt.plural == "namespaces" && rt.group.is_empty() => false,
        Some(_) => return Err(ApiError::no_route()),
    };
    let version = parts.version.clone();
    // Writes go to the storage type: events.k8s.io Events are stored as core/v1 Events.
    let (wrt, wversion) = if rt.events_v1 {
        (
            st.resolve("", "v1", "events")
                .ok_or_else(ApiError::no_route)?,
            "v1".to_owned(),
        )
    } else {
        (rt.clone(), version.clone())
    };
    let to_store = |v: Value| {
        if rt.events_v1 {
            registry::event_from_v1(&v)
        } else {
            v
        }
    };
    let ns = parts.ns.clone().unwrap_or_default();
    let dry_run = q.contains_key("dryRun");
    let manager = field_manager(q, headers);
    let partial = wants_partial_metadata(headers);
    let Some(name) = parts.name.clone() else {
        // Collection.
        if rt.namespaced && parts.ns.is_none() && *method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        let ns_filter = parts.ns.as_deref();
        return match *method {
            Method::GET => {
                let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
                if watch {
                    let rx = start_watch(&mut st, &rt, &version, ns_filter, q)?;
                    drop(st);
                    let interval = *inner
                        .bookmark_interval
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    Ok(watch_response(rt, version, rx, q, interval, partial))
                } else {
                    list(&st, &rt, &version, ns_filter, q, partial)
                }
            }
            Method::POST => {
                let obj = to_store(body_json()?);
                let created =
                    st.create(&wrt, ns_filter, obj, &manager, "Update", &wversion, dry_run)?;
                // The answer is encoded after the lock is released: other requests wait less.
                release(st);
                Ok(shown_response(201, &rt, &version, &created))
            }
            Method::DELETE => {
                let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str))?;
                let field = field_selector(&rt, q)?;
                let names = st
                    .list(&rt.key(), ns_filter)
                    .into_iter()
                    .filter(|o| {
                        let shown = render(&rt, &version, o);
                        label.matches(&shown) && field.matches(&shown)
                    })
                    .map(|o| {
                        let m = &o["metadata"];
                        let s = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
                        (s("namespace"), s("name"))
                    })
                    .collect();
                let opts = delete_opts(q, body)?;
                let items: Vec<Value> = st
                    .delete_many(&wrt, names, &opts)
                    .iter()
                    .map(|o| render(&rt, &version, o))
                    .collect();
                Ok(json_response(
                    200,
                    &json!({
                        "kind": rt.list_kind, "apiVersion": rt.api_version(&version),
                        "metadata": {"resourceVersion": st.rv().to_string()}, "items": items,
                    }),
                ))
            }
            _ => Err(ApiError::method_not_allowed()),
        };
    };
    if rt.namespaced && parts.ns.is_none() {
        return Err(ApiError::no_route());
    }
    let tk = rt.key();
    match *method {
        Method::GET => {
            let obj = st
                .shared(&tk, &ns, &name)
                .cloned()
                .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, &name))?;
            // Encoded after the lock is released, from the stored object (writes replace it,
            // never change it in place).
            release(st);
            if partial {
                Ok(json_response(
                    200,
                    &partial_metadata(&render(&rt, &version, &obj)),
                ))
            } else {
                Ok(shown_response(200, &rt, &version, &obj))
            }
        }
        Method::PUT => {
            let obj = to_store(body_json()?);
            if st.get(&tk, &ns, &name).is_none() {
                if rt.create_on_update && !status_sub {
                    let nsarg = rt.namespaced.then_some(ns.as_str());
                    let mut obj = obj;
                    if !obj.is_object() {
                        return Err(ApiError::bad_request(
                            "the object provided is not a JSON object",
                        ));
                    }
                    if let Some(n) = obj["metadata"]["name"].as_str().filter(|n| *n != name) {
                        return Err(ApiError::bad_request(format!(
                            "the name of the object ({n}) does not match the name on the URL ({name})"
                        )));
                    }
                    crate::store::meta_mut(&mut obj).insert("name".into(), name.clone().into());
                    let created =
                        st.create(&wrt, nsarg, obj, &manager, "Update", &wversion, dry_run)?;
                    release(st);
                    return Ok(shown_response(201, &rt, &version, &created));
                }
                return Err(ApiError::not_found(&rt.group, &rt.plural, &name));
            }
            let out = st.write_existing(
                &wrt,
                &ns,
                &name,
                obj,
                WriteReq {
                    status: status_sub,
                    manager: &manager,
                    is_put: true,
                    version: &wversion,
                    managed: None,
                    dry_run,
                },
            )?;
            release(st);
            Ok(shown_response(200, &rt, &version, &out))
        }
        Method::PATCH => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let ct = ct.split(';').next().unwrap_or_default().trim().to_owned();
            if ct == "application/apply-patch+yaml" {
                if q.get("fieldManager").is_none_or(String::is_empty) {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "PatchOptions",
                        "",
                        &[FieldError::required(
                            "fieldManager",
                            "is required for apply patch",
                        )],
                    ));
                }
                let text =
                    std::str::from_utf8(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
                let cfg: Value = serde_saphyr::from_str(text)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                let (out, created) = st.apply(
                    &wrt,
                    &ns,
                    &name,
                    to_store(cfg),
                    &manager,
                    status_sub,
                    q.get("force").is_some_and(|f| f == "true"),
                    &wversion,
                    dry_run,
                )?;
                return Ok(json_response(
                    if created { 201 } else { 200 },
                    &render(&rt, &version, &out),
                ));
            }
            let old = st
                .get(&tk, &ns, &name)
                .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, &name))?;
            let patch = body_json()?;
            let mut new = render(&rt, &version, old);
            match ct.as_str() {
                "application/merge-patch+json" => {
                    if !patch.is_object() {
                        return Err(merge_patch_not_object(&patch));
                    }
                    crate::merge::merge_patch(&mut new, &patch);
                }
                "application/json-patch+json" => crate::merge::json_patch(&mut new, &patch)?,
                "application/strategic-merge-patch+json" => {
                    if !rt.builtin {
                        return Err(ApiError::unsupported_media_type());
                    }
                    if !patch.is_object() {
                        return Err(merge_patch_not_object(&patch));
                    }
                    crate::merge::merge_keyed(&mut new, &patch, &mut Vec::new(), true, true);
                }
                _ => {
                    return Err(ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        "415: Unsupported Media Type",
                    ));
                }
            }
            let out = st.write_existing(
                &wrt,
                &ns,
                &name,
                to_store(new),
                WriteReq {
                    status: status_sub,
                    manager: &manager,
                    is_put: false,
                    version: &wversion,
                    managed: None,
                    dry_run,
                },
            )?;
            release(st);
            Ok(shown_response(200, &rt, &version, &out))
        }
        Method::DELETE => {
            if status_sub {
                return Err(ApiError::method_not_allowed());
            }
            let opts = delete_opts(q, body)?;
            let out = st.delete(&wrt, &ns, &name, &opts)?;
            let out = if out["kind"] == "Status" {
                out
            } else {
                render(&rt, &version, &out)
            };
            Ok(json_response(200, &out))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOpts> {
    let mut opts = DeleteOpts {
        dry_run: q.contains_key("dryRun"),
        ..Default::default()
    };
    opts.propagation = q.get("propagationPolicy").cloned();
    if q.get("orphanDependents").is_some_and(|v| v == "true") {
        opts.propagation = Some("Orphan".into());
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = parse_json(body)?;
        if let Some(p) = v["propagationPolicy"].as_str() {
            opts.propagation = Some(p.to_owned());
        }
        if v["orphanDependents"].as_bool() == Some(true) {
            opts.propagation = Some("Orphan".into());
        }
        opts.uid = v["preconditions"]["uid"].as_str().map(str::to_owned);
        opts.resource_version = v["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        if v["dryRun"].as_array().is_some_and(|a| !a.is_empty()) {
            opts.dry_run = true;
        }
    }
    Ok(opts)
}

fn list(
    st: &State,
    rt: &ResourceType,
    version: &str,
    ns: Option<&str>,
    q: &HashMap<String, String>,
    partial: bool,
) -> ApiResult<Response> {
    let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str))?;
    let field = field_selector(rt, q)?;
    let start = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    // Start after the last page's key (a range of the ordered store, not a walk of the
    // objects before it), and render (a deep copy) only to evaluate a selector: each page of
    // a paged list of N objects must not copy, nor key, all N of them.
    let mut matching = st.list_after(&rt.key(), ns, start.as_ref()).filter(|o| {
        if label.is_empty() && field.is_empty() {
            return true;
        }
        let shown = render(rt, version, o);
        label.matches(&shown) && field.matches(&shown)
    });
    let page: Vec<&Value> = matching.by_ref().take(limit).collect();
    let remaining = matching.count();
    // Items are serialized straight from the store (no deep copy of each object, which cost
    // a paged list of N objects most of its time and, under the server's one lock, held up
    // every other request); partial metadata and events.k8s.io Events are still rendered.
    let served_version = rt.api_version(version);
    let items: Vec<ListItem<'_>> = page
        .iter()
        .map(|o| {
            if partial {
                ListItem::Owned(partial_metadata(&render(rt, version, o)))
            } else if rt.events_v1 {
                let mut o = render(rt, version, o);
                if rt.builtin
                    && let Some(m) = o.as_object_mut()
                {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                ListItem::Owned(o)
            } else if rt.builtin {
                ListItem::Shown(Shown::without_type(o))
            } else {
                ListItem::Shown(Shown::with_api_version(o, &served_version))
            }
        })
        .collect();
    let mut metadata = json!({"resourceVersion": st.rv().to_string()});
    if remaining > 0
        && let Some(last) = page.last()
    {
        metadata["continue"] = encode_continue(&obj_key(last)).into();
        metadata["remainingItemCount"] = remaining.into();
    }
    let api_version = if partial {
        "meta.k8s.io/v1"
    } else {
        served_version.as_str()
    };
    let kind = if partial {
        "PartialObjectMetadataList"
    } else {
        rt.list_kind.as_str()
    };
    // The keys in the order a `Value` map writes them (sorted), as before.
    let body = ListBody {
        api_version,
        items,
        kind,
        metadata,
    };
    Ok(bytes_response(
        200,
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

/// A list response, serialized with its keys in `serde_json::Map`'s (sorted) order.
#[derive(serde::Serialize)]
struct ListBody<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    items: Vec<ListItem<'a>>,
    kind: &'a str,
    metadata: Value,
}

/// One item of a list response: a stored object shown as is, or one rendered apart.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum ListItem<'a> {
    Shown(Shown<'a>),
    Owned(Value),
}

/// A stored object serialized as [`render`] shows it (its `apiVersion` set to the served
/// version's), or, as a built-in type's list item, without `apiVersion` and `kind`; written
/// straight from the store, with the same bytes as rendering a copy.
struct Shown<'a> {
    obj: &'a Value,
    /// `Some`: the `apiVersion` to show; `None`: show neither `apiVersion` nor `kind`.
    api_version: Option<&'a str>,
}

impl<'a> Shown<'a> {
    fn with_api_version(obj: &'a Value, api_version: &'a str) -> Self {
        Self {
            obj,
            api_version: Some(api_version),
        }
    }

    fn without_type(obj: &'a Value) -> Self {
        Self {
            obj,
            api_version: None,
        }
    }
}

impl serde::Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let Some(map) = self.obj.as_object() else {
            return self.obj.serialize(s);
        };
        let mut m = s.serialize_map(None)?;
        // `apiVersion` goes where a sorted map would put it: replacing the stored one, or
        // before the first key after it.
        let mut pending = self.api_version;
        for (k, v) in map {
            if let Some(av) = pending
                && k.as_str() >= "apiVersion"
            {
                m.serialize_entry("apiVersion", av)?;
                pending = None;
                if k == "apiVersion" {
                    continue;
                }
            }
            if self.api_version.is_none() && (k == "apiVersion" || k == "kind") {
                continue;
            }
            m.serialize_entry(k, v)?;
        }
        if let Some(av) = pending {
            m.serialize_entry("apiVersion", av)?;
        }
        m.end()
    }
}

fn obj_key(o: &Value) -> (String, String) {
    let m = &o["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_owned(),
        m["name"].as_str().unwrap_or_default().to_owned(),
    )
}

fn encode_continue(k: &(String, String)) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}\n{}", k.0, k.1))
}

fn decode_continue(c: &str) -> ApiResult<(String, String)> {
    use base64::Engine as _;
    let bad = || ApiError::bad_request("invalid continue token");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .map_err(|_| bad())?;
    let s = String::from_utf8(raw).map_err(|_| bad())?;
    let (a, b) = s.split_once('\n').ok_or_else(bad)?;
    Ok((a.to_owned(), b.to_owned()))
}

/// What a watch task needs, captured under the store lock.
pub(crate) struct WatchStart {
    rt: ResourceType,
    version: String,
    initial: Vec<Arc<Event>>,
    error: Option<ApiError>,
    rx: mpsc::UnboundedReceiver<Arc<Event>>,
    start_rv: u64,
    ns: Option<String>,
    label: LabelSelector,
    field: FieldSelector,
    initial_end_bookmark: bool,
}

fn start_watch(
    st: &mut State,
    rt: &ResourceType,
    version: &str,
    ns: Option<&str>,
    q: &HashMap<String, String>,
) -> ApiResult<WatchStart> {
    let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str))?;
    let field = field_selector(rt, q)?;
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let rv = q
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or_default();
    let tk = rt.key();
    let mut error = None;
    let initial: Vec<Arc<Event>> = if send_initial || rv.is_empty() || rv == "0" {
        st.shared_after(&tk, ns, None)
            .map(|o| {
                Arc::new(Event {
                    rv: st.rv(),
                    tkey: tk.clone(),
                    ns: o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    etype: "ADDED",
                    obj: Arc::clone(o),
                    old: None,
                })
            })
            .collect()
    } else {
        let n: u64 = rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?;
        match st.events_since(&tk, n) {
            Ok(evs) => evs,
            Err(e) => {
                error = Some(e);
                Vec::new()
            }
        }
    };
    let rx = st.subscribe(&tk);
    Ok(WatchStart {
        rt: rt.clone(),
        version: version.to_owned(),
        initial,
        error,
        rx,
        start_rv: st.rv(),
        ns: ns.map(str::to_owned),
        label,
        field,
        initial_end_bookmark: send_initial,
    })
}

impl WatchStart {
    fn matches(&self, ev_ns: &str, obj: &Value) -> bool {
        if self.ns.as_deref().is_some_and(|n| n != ev_ns) {
            return false;
        }
        if self.label.is_empty() && self.field.is_empty() {
            // Nothing to look at: no copy of every changed object for every watcher.
            return true;
        }
        let shown = render(&self.rt, &self.version, obj);
        self.label.matches(&shown) && self.field.matches(&shown)
    }

    /// The event type a filtered watcher sees, if any (selector transitions included).
    fn translate(&self, ev: &Event) -> Option<&'static str> {
        let now = self.matches(&ev.ns, &ev.obj);
        let before = ev.old.as_ref().is_some_and(|o| self.matches(&ev.ns, o));
        match ev.etype {
            "MODIFIED" => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
            t => now.then_some(t),
        }
    }
}

/// One watch event line, `type` first as kube-apiserver writes it: a client decodes an
/// adjacently tagged event in one pass only when the tag comes before the object (a `json!`
/// map would sort `object` first and make every client buffer the whole object).
fn event_line(etype: &str, object: impl serde::Serialize) -> Bytes {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(b"{\"type\":");
    serde_json::to_writer(&mut v, etype).unwrap_or_default();
    v.extend_from_slice(b",\"object\":");
    serde_json::to_writer(&mut v, &object).unwrap_or_default();
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

fn watch_response(
    rt: ResourceType,
    version: String,
    mut w: WatchStart,
    q: &HashMap<String, String>,
    bookmark_every: Duration,
    partial: bool,
) -> Response {
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0);
    let (tx, body_rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    tokio::spawn(async move {
        let shown = |obj: &Value| {
            let o = render(&rt, &version, obj);
            if partial { partial_metadata(&o) } else { o }
        };
        let bookmark = |rv: u64, initial_end: bool| {
            let mut md = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line("BOOKMARK", shown(&json!({"kind": rt.kind, "metadata": md})))
        };
        // A changed object is encoded straight from the event, without a copy, unless it is
        // shown otherwise (as metadata only, or as an events.k8s.io Event).
        let api_version = rt.api_version(&version);
        let changed = |etype: &str, obj: &Value| {
            if partial || rt.events_v1 {
                event_line(etype, shown(obj))
            } else {
                event_line(etype, Shown::with_api_version(obj, &api_version))
            }
        };
        if let Some(e) = w.error.take() {
            let _ = tx.send(Ok(event_line("ERROR", e.to_status()))).await;
            return;
        }
        for ev in std::mem::take(&mut w.initial) {
            if let Some(t) = w.translate(&ev)
                && tx.send(Ok(changed(t, &ev.obj))).await.is_err()
            {
                return;
            }
        }
        let mut last_rv = w.start_rv;
        if w.initial_end_bookmark && tx.send(Ok(bookmark(last_rv, true))).await.is_err() {
            return;
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs(t));
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
        loop {
            let line = tokio::select! {
                () = tx.closed() => break,
                () = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => break,
                _ = ticker.tick(), if bookmarks => bookmark(last_rv, false),
                ev = w.rx.recv() => match ev {
                    None => break,
                    Some(ev) => {
                        last_rv = last_rv.max(ev.rv);
                        match w.translate(&ev) {
                            Some(t) => changed(t, &ev.obj),
                            None => continue,
                        }
                    }
                },
            };
            if tx.send(Ok(line)).await.is_err() {
                break;
            }
        }
    });
    let mut r = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(body_rx),
    ));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// A merge or strategic patch that is not a JSON object: 422, as the apiserver answers.
fn merge_patch_not_object(patch: &Value) -> ApiError {
    ApiError::invalid(
        "",
        "",
        "",
        &[FieldError::invalid(
            "patch",
            &format!("{:?}", patch.to_string()),
            "couldn't get version/kind; json parse error",
        )],
    )
}

/// The Go mux's plain-text 404 for paths outside any served group/version.
fn page_not_found() -> Response {
    let mut r = Response::new(Body::from("404 page not found\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Parses `fieldSelector` and checks the field labels against what the type supports.
fn field_selector(rt: &ResourceType, q: &HashMap<String, String>) -> ApiResult<FieldSelector> {
    let field = FieldSelector::parse(q.get("fieldSelector").map(String::as_str))?;
    let (extra, custom) = rt.field_labels();
    field.check(extra, custom)?;
    Ok(field)
}

/// Whether the client asked for `meta.k8s.io/v1` PartialObjectMetadata (kube's `*_metadata` calls).
fn wants_partial_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    /// A list item written straight from the store has the bytes of a rendered copy: the
    /// served `apiVersion` in a sorted map's place (replaced, inserted first, in the middle or
    /// last), or neither `apiVersion` nor `kind` for a built-in type's list.
    #[test]
    fn shown_items_match_rendered_copies() {
        let objects = [
            json!({"apiVersion": "old/v0", "kind": "K", "metadata": {"name": "a"}, "spec": {"x": [1, 2]}}),
            json!({"kind": "K", "metadata": {"name": "b"}}),
            json!({"Zed": 1, "b": {"c": "d"}}),
            json!({"Zed": 1}),
            json!({}),
        ];
        for o in &objects {
            let mut copy = o.clone();
            copy["apiVersion"] = "g/v1".into();
            assert_eq!(
                serde_json::to_string(&Shown::with_api_version(o, "g/v1")).unwrap(),
                serde_json::to_string(&copy).unwrap(),
                "{o}"
            );
            let mut copy = o.clone();
            if let Some(m) = copy.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            assert_eq!(
                serde_json::to_string(&Shown::without_type(o)).unwrap(),
                serde_json::to_string(&copy).unwrap(),
                "{o}"
            );
        }
    }

    #[tokio::test]
    async fn client_disconnect_ends_the_watch_task() {
        let server = crate::TestApiServer::new();
        let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=true")
            .body(Body::empty())
            .unwrap();
        let resp = server.router().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(server.open_watches(), 1);
        drop(resp);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while server.open_watches() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "watch task still running"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn paths_parse_into_group_version_namespace_and_subresource() {
        let p =
            parse_parts("/apis/bitnami.com/v1alpha1/namespaces/ns/sealedsecrets/s/status").unwrap();
        assert_eq!(
            (
                p.group.as_str(),
                p.version.as_str(),
                p.ns.as_deref(),
                p.plural.as_str(),
                p.name.as_deref(),
                p.sub.as_deref()
            ),
            (
                "bitnami.com",
                "v1alpha1",
                Some("ns"),
                "sealedsecrets",
                Some("s"),
                Some("status")
            )
        );
        let p = parse_parts("/api/v1/namespaces/ns/status").unwrap();
        assert_eq!(
            (p.plural.as_str(), p.name.as_deref(), p.sub.as_deref()),
            ("namespaces", Some("ns"), Some("status"))
        );
        let p = parse_parts("/api/v1/namespaces/ns").unwrap();
        assert_eq!(
            (p.ns, p.plural.as_str(), p.name.as_deref()),
            (None, "namespaces", Some("ns"))
        );
        assert!(parse_parts("/api/v1").is_none());
    }

    #[test]
    fn watch_event_line_has_the_type_first_like_kube_apiserver() {
        let line = event_line(
            "ADDED",
            json!({"metadata": {"name": "a"}, "kind": "Secret"}),
        );
        let text = std::str::from_utf8(&line).unwrap();
        assert!(text.starts_with(r#"{"type":"ADDED","object":{"#), "{text}");
        assert!(text.ends_with("}\n"), "{text}");
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["object"]["metadata"]["name"], "a");
    }
}
