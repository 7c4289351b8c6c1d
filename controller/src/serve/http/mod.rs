//! The controller's HTTP servers.
//!
//! The API server (`--listen-addr`) serves, on every replica (leader or not):
//! - `GET /healthz`: liveness, `200 ok\n` (Bitnami's body);
//! - `GET /readyz`: `200 ok\n` once keys are loaded and the caches synced, else `503` with
//!   the reasons: classes only (`key source not read yet (access denied)`), never the key
//!   store's error chain, which can name accounts and roles;
//! - `GET /v1/cert.pem`: the sealing key's certificate (`application/x-pem-file`);
//! - `GET /v1/certs`: every public certificate with its fingerprint (JSON);
//! - `POST /v1/verify`: whether every item of one SealedSecret opens with the key ring;
//! - `POST /v1/rotate`: the same SealedSecret re-sealed with the sealing key;
//! - `POST /v1/refresh`: check the fleet key ring now (with `--key-source`).
//!
//! The metrics server (`--listen-metrics-addr`) serves `GET /metrics` and `GET /readyz` with
//! the detail: the same status and first line, plus the key source's last error as the logs
//! have it, an API server outage, the ring index's expiry, and the SealedSecrets each kid
//! opened (`objects by kid …`: the fleet writer's last count, 8 kids at most, the others
//! summed up).
//!
//! Unlike Bitnami's endpoints (reference §4.6), verify and rotate never render
//! `spec.template.data` (rendering turned them into a decryption oracle), take the scope only
//! from the top-level metadata (never from the template), are both rate-limited per client,
//! and run their RSA work on blocking threads, at most a few at a time. Responses never hold
//! plaintext, and nothing here logs item values.
//!
//! # RSA work per request and per client
//!
//! - A request holds at most `--max-request-items` values (256 by default; more is refused
//!   with 413 before any RSA work).
//! - A value whose SealedSecret names a ring key (`kseal.dev/sealing-key`) is tried with that
//!   key only ([`HintPolicy::Binds`]); without a hint, or with a hint the ring lacks, every
//!   key of the envelope's size is tried (Bitnami's format carries no key id). So one request
//!   costs at most `--max-request-items` × ring size RSA private-key operations, and at most
//!   `--max-request-items` when it names a ring key.
//! - A verify stops at its first failing value (`?all=true` names every failing value) and a
//!   rotate at its first failing value.
//! - The rate limiter counts RSA work, not requests: admission costs one unit, which covers
//!   [`RSA_OPERATIONS_PER_UNIT`] operations; each further (started) block of that many costs
//!   one more unit, reserved for the worst case before the work and settled after. A client
//!   in debt is answered 429 with `Retry-After` until its bucket recovers.
//! - The work runs on the RSA slots shared with the reconciler (`crate::serve::rsapool`), which
//!   goes first; when the HTTP share and its short queue are taken the answer is 503 with
//!   `Retry-After` at once. Among clients the share is fair: a client's part shrinks with the
//!   number of active clients, the client that used the share least lately gets the next free
//!   slot, and a client holding no request takes the place of the heaviest one's (which stops
//!   with 503), so a flood from many addresses leaves another client answered.

mod limit;
mod verify;

use self::limit::*;
use self::verify::*;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, MatchedPath, Request, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{HintPolicy, KeyRing, Label, OpenStats, Plaintext, Scope};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::metrics::{HttpLabels, HttpRouteLabels};
use crate::net::{Client, PeerAddr, TrustedProxies};
use crate::serve::ratelimit::RateLimiter;
use crate::serve::rsapool::{HTTP_WAIT, HttpJob};
use crate::{Config, Error, Result, State};

/// Largest request body verify and rotate accept (a Kubernetes object is at most ~1.5 MiB;
/// a Secret's data at most 1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How long a client may take to send its request body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Content type of `/v1/cert.pem` (Bitnami's).
pub const PEM_CONTENT_TYPE: &str = "application/x-pem-file";
/// Content type of `/metrics`: prometheus-client writes OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Connections with no bytes read or written for this long are closed (Bitnami's read and
/// write timeouts are 2 minutes): a stalled or slow-dripping client cannot hold a connection,
/// or delay a graceful shutdown, forever.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Rate-limiter entries kept at most (Bitnami's store holds 65 536).
const RATE_LIMIT_ENTRIES: usize = 65_536;
/// Values (items) one verify or rotate request may hold by default (`--max-request-items`).
pub const DEFAULT_MAX_REQUEST_ITEMS: usize = 256;
/// RSA private-key operations one rate-limit unit (one request's worth) covers.
pub const RSA_OPERATIONS_PER_UNIT: u64 = 16;
const TEXT: &str = "text/plain; charset=utf-8";

/// Options of the API server, from [`Config`].
#[derive(Debug, Clone, PartialEq)]
pub struct ApiOptions {
    /// verify/rotate requests per second per client, sustained.
    pub rate_limit: f64,
    /// verify/rotate burst per client.
    pub rate_limit_burst: u32,
    /// Accept the deprecated `spec.data` format in verify and rotate.
    pub accept_deprecated_v1_data: bool,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Values (`encryptedData` items, or the deprecated `data`) one verify or rotate request
    /// may hold; more is refused before any RSA work.
    pub max_request_items: usize,
    /// Connections idle for this long are closed ([`IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// The whole request head must arrive within this (`--header-read-timeout`).
    pub header_read_timeout: Duration,
    /// Connections the API listener holds at most (`--max-connections`).
    pub max_connections: usize,
    /// Connections one client holds at most on each listener
    /// (`--max-connections-per-client`).
    pub max_connections_per_client: usize,
    /// Connections the metrics listener holds at most (`--metrics-max-connections`).
    pub metrics_max_connections: usize,
    /// Proxies whose `X-Forwarded-For` entries name the client (default: none).
    pub trusted_proxies: TrustedProxies,
}

impl ApiOptions {
    /// The options `config` selects.
    pub fn from_config(config: &Config) -> Self {
        Self {
            rate_limit: config.rate_limit.0,
            rate_limit_burst: config.rate_limit.1,
            accept_deprecated_v1_data: config.accept_deprecated_v1_data,
            max_body_bytes: MAX_BODY_BYTES,
            max_request_items: config.max_request_items,
            idle_timeout: IDLE_TIMEOUT,
            header_read_timeout: config.header_read_timeout,
            max_connections: config.max_connections,
            max_connections_per_client: config.max_connections_per_client,
            metrics_max_connections: config.metrics_max_connections,
            trusted_proxies: config.trusted_proxies.clone(),
        }
    }
}

impl Default for ApiOptions {
    /// Bitnami's defaults: 2 requests per second, burst 2.
    fn default() -> Self {
        Self {
            rate_limit: 2.0,
            rate_limit_burst: 2,
            accept_deprecated_v1_data: true,
            max_body_bytes: MAX_BODY_BYTES,
            max_request_items: DEFAULT_MAX_REQUEST_ITEMS,
            idle_timeout: IDLE_TIMEOUT,
            header_read_timeout: crate::serve::conn::HEADER_READ_TIMEOUT,
            max_connections: crate::serve::conn::MAX_CONNECTIONS,
            max_connections_per_client: crate::serve::conn::MAX_CONNECTIONS_PER_CLIENT,
            metrics_max_connections: crate::serve::conn::METRICS_MAX_CONNECTIONS,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

#[derive(Clone)]
struct App {
    state: State,
    options: Arc<ApiOptions>,
    limiter: Arc<RateLimiter<BucketKey>>,
}

/// A rate-limit bucket: the route and the client.
type BucketKey = (&'static str, Client);

/// The API server's router (no socket; usable in-process with `tower::ServiceExt::oneshot`).
///
/// The rate limiter keys on the peer address (or, from a proxy in
/// [`ApiOptions::trusted_proxies`], the client its `X-Forwarded-For` names), which axum
/// provides only when served with `into_make_service_with_connect_info::<SocketAddr>()` or
/// `::<PeerAddr>()` (as [`serve_listeners`] does); without it every caller shares one bucket.
pub fn api_router(state: State, options: ApiOptions) -> Router {
    let app = App {
        limiter: Arc::new(RateLimiter::new(
            options.rate_limit,
            options.rate_limit_burst,
            RATE_LIMIT_ENTRIES,
        )),
        options: Arc::new(options),
        state,
    };
    let limited = Router::new()
        .route("/v1/verify", post(verify))
        .route("/v1/rotate", post(rotate))
        .route("/v1/refresh", post(refresh))
        .route_layer(middleware::from_fn_with_state(app.clone(), rate_limit));
    let v1 = Router::new()
        .route("/v1/cert.pem", get(cert_pem))
        .route("/v1/certs", get(certs))
        .merge(limited)
        // Outermost, so that 429s and 413s are counted too.
        .route_layer(middleware::from_fn_with_state(app.clone(), track));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(v1)
        .with_state(app)
}

/// The metrics server's router: `GET /metrics`, and `GET /readyz` with the detail the API
/// port's `/readyz` leaves out (the key source's error chain).
pub fn metrics_router(state: State) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz_detail))
        .with_state(state)
}

/// Binds the API (`--listen-addr`) and metrics (`--listen-metrics-addr`) listeners. The
/// binary binds them before it starts anything else, so a port that is taken stops it at
/// once, before it joins the leader election.
pub async fn bind(config: &Config) -> Result<(TcpListener, TcpListener)> {
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Serve { addr, source })
    };
    Ok((
        bind(config.listen_addr).await?,
        bind(config.listen_metrics_addr).await?,
    ))
}

/// Serves the API and metrics routers on listeners from [`bind`] (tests bind port 0) until
/// `shutdown` completes; in-flight requests then finish (graceful shutdown). Each listener
/// has its own connection limits (`crate::serve::conn`).
pub async fn serve_listeners(
    api: TcpListener,
    metrics: TcpListener,
    state: State,
    options: ApiOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    use crate::serve::conn::{self, Limits, Tracker};
    let api_addr = local_addr(&api)?;
    let metrics_addr = local_addr(&metrics)?;
    let api_limits = Limits {
        max_connections: options.max_connections.max(1),
        max_per_client: options.max_connections_per_client.max(1),
        header_timeout: options.header_read_timeout,
        idle_timeout: options.idle_timeout,
    };
    let metrics_limits = Limits {
        max_connections: options.metrics_max_connections.max(1),
        ..api_limits
    };
    tracing::info!(
        api = %api_addr,
        metrics = %metrics_addr,
        max_connections = api_limits.max_connections,
        reserved_for_probes = api_limits.reserved(),
        metrics_max_connections = metrics_limits.max_connections,
        max_connections_per_client = api_limits.max_per_client,
        header_read_timeout = ?api_limits.header_timeout,
        idle_timeout = ?api_limits.idle_timeout,
        "serving HTTP"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let api_tracker = Tracker::new("api", api_limits, state.metrics.clone());
    let metrics_tracker = Tracker::new("metrics", metrics_limits, state.metrics.clone());
    let api_server = conn::serve(
        api,
        api_router(state.clone(), options),
        api_tracker,
        conn::is_api_probe,
        stop_rx.clone(),
    );
    let metrics_server = conn::serve(
        metrics,
        metrics_router(state),
        metrics_tracker,
        |_| true,
        stop_rx,
    );
    let stop = async move {
        shutdown.await;
        stop_tx.send_replace(true);
    };
    tokio::join!(api_server, metrics_server, stop);
    tracing::info!("HTTP servers stopped");
    Ok(())
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr> {
    listener.local_addr().map_err(|source| Error::Serve {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}

// ---------------------------------------------------------------------------------------
// Connections (limits and timeouts: crate::serve::conn)

// ---------------------------------------------------------------------------------------
// Responses

/// An error answer: a status and a one-line text that never holds secret material.
#[derive(Debug)]
struct Problem {
    status: StatusCode,
    message: String,
    /// `Retry-After`, in whole seconds.
    retry_after: Option<u64>,
}

impl Problem {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// `what: retry after N s`, with `Retry-After: N` (whole seconds, at least 1).
    fn retry(status: StatusCode, what: &str, wait: Duration) -> Self {
        let seconds = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
        Self {
            retry_after: Some(seconds),
            ..Self::new(status, format!("{what}: retry after {seconds} s"))
        }
    }

    /// The HTTP share of the RSA slots is taken (reconciles go first).
    fn rsa_busy() -> Self {
        Self::retry(
            StatusCode::SERVICE_UNAVAILABLE,
            "the RSA workers are busy (unsealing goes first)",
            Duration::from_secs(1),
        )
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = text(self.status, format!("{}\n", self.message));
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

fn text(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = (status, body.into()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(TEXT));
    response
}

fn no_keys() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no sealing key is loaded yet",
    )
}

/// No key seals: why, when a fleet ring's active key is the reason.
fn no_sealing_key(problem: Option<&crate::state::SealingProblem>) -> Problem {
    match problem {
        Some(p) => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no key seals: {}", p.message),
        ),
        None => no_keys(),
    }
}

// ---------------------------------------------------------------------------------------
// Health, certificates, metrics

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n")
}

/// The API port's `/readyz`: reason classes only.
async fn readyz(AxumState(app): AxumState<App>) -> Response {
    let (status, body) = readiness_report(&app.state, false);
    text(status, body)
}

/// The metrics port's `/readyz`: the same answer, plus the key source's last error, an API
/// server outage (`kseal_api_server_reachable` says the same), the ring index's expiry and
/// the objects per kid (`kseal_objects_by_kid` says the same, for every kid).
async fn readyz_detail(AxumState(state): AxumState<State>) -> Response {
    let (status, mut body) = readiness_report(&state, true);
    if let Some(line) = state.api.readyz_line() {
        body.push_str(&line);
    }
    if let Some(line) = state
        .ring_view
        .current()
        .and_then(|view| view.expiry_line(jiff::Timestamp::now()))
    {
        body.push_str(&line);
    }
    if let Some(line) = objects_line(&state) {
        body.push_str(&line);
    }
    text(status, body)
}

/// Kids named one by one on the `/readyz` objects line; the others are summed up, so that the
/// line stays short on a ring with many keys.
const OBJECTS_LINE_KIDS: usize = 8;

/// The metrics port's `/readyz` line about SealedSecrets per kid, as the fleet
/// acknowledgement last counted them (by the keys that opened them: `crate::fleet`), one line
/// per ring, e.g.
/// `objects by kid (ring kseal/fleet): 0123456789ab=40 fedcba987654=3 unattributed=1`; `None`
/// before the first count (and without a key source or a cluster id, or on a replica that
/// never led). Public figures only: short kids and counts.
fn objects_line(state: &State) -> Option<String> {
    let counts = state
        .metrics
        .fleet
        .detail
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // One line per ring (several with several `--key-source` rings).
    let lines: String = counts
        .values()
        .map(|counts| render_objects_line(counts, OBJECTS_LINE_KIDS))
        .collect();
    (!lines.is_empty()).then_some(lines)
}

/// `counts` as one line: the `max_kids` kids with the most objects (ties in kid order),
/// listed in kid order, then how many other kids there are and their objects together
/// (`(+3 more kids: 12)`), then the unattributed objects.
fn render_objects_line(counts: &crate::fleet::metrics::Counts, max_kids: usize) -> String {
    use std::fmt::Write as _;
    let mut kids: Vec<_> = counts.by_kid.iter().collect();
    // Stable: equal counts keep the map's kid order.
    kids.sort_by(|a, b| b.1.cmp(a.1));
    let more = kids.split_off(max_kids.min(kids.len()));
    kids.sort_by(|a, b| a.0.cmp(b.0));
    let mut line = format!("objects by kid (ring {}):", counts.ring);
    for (kid, n) in kids {
        let _ = write!(line, " {}={n}", kid.short());
    }
    if !more.is_empty() {
        let objects = more
            .iter()
            .fold(0_u64, |sum, (_, n)| sum.saturating_add(**n));
        let noun = if more.len() == 1 { "kid" } else { "kids" };
        let _ = write!(line, " (+{} more {noun}: {objects})", more.len());
    }
    let _ = writeln!(line, " unattributed={}", counts.unattributed);
    line
}

/// `/readyz`'s status and body. Without `detail` (the API port, which anyone who can reach the
/// probe port reads) a key source's failure is named by its class only, e.g. `key source not
/// read yet (access denied)`: the store's error chain can carry account ids, role ARNs and
/// secret names. With `detail` (the metrics port) the chain follows, as the logs have it.
/// The sealing warning (`ok (warning: …)`) is the controller's own text, naming short kids
/// only, on both.
fn readiness_report(state: &State, detail: bool) -> (StatusCode, String) {
    use std::sync::atomic::Ordering;
    let readiness = &state.readiness;
    // The further `--key-source` rings' own sealing problems, named by ring.
    let more_warnings: Vec<String> = state
        .ring_states()
        .into_iter()
        .skip(1)
        .filter_map(|(name, s)| {
            Some(format!(
                "ring {name}: {}",
                s.readiness.sealing_problem()?.message
            ))
        })
        .collect();
    if state.is_ready() {
        let mut warnings: Vec<String> = state
            .sealing_problem()
            .map(|p| p.message)
            .into_iter()
            .collect();
        warnings.extend(more_warnings);
        let mut body = if warnings.is_empty() {
            "ok\n".to_owned()
        } else {
            format!("ok (warning: {})\n", warnings.join("; "))
        };
        // A mirror keeps the replica ready while the store fails: the detail says so.
        if let Some(problem) = readiness
            .key_source()
            .and_then(|s| s.problem)
            .filter(|_| detail)
        {
            body.push_str(&format!("key source: last read failed: {problem}\n"));
        }
        if detail {
            for line in missing_keys(state) {
                body.push_str(&format!("{line}\n"));
            }
        }
        return (StatusCode::OK, body);
    }
    let mut reasons = Vec::new();
    if !readiness.keys_loaded.load(Ordering::Acquire) {
        reasons.push("no keys loaded".to_owned());
        reasons.extend(missing_keys(state));
    }
    if !readiness.caches_synced.load(Ordering::Acquire) {
        reasons.push("caches not synced".to_owned());
    }
    let blocking = readiness
        .key_source_blocking()
        .map(|s| (None, s))
        .into_iter()
        .chain(
            state
                .rings_blocking()
                .into_iter()
                .map(|(name, s)| (Some(name), s)),
        );
    for (ring, source) in blocking {
        let what = match &ring {
            Some(name) => format!("key source {name}"),
            None => "key source".to_owned(),
        };
        let class = source.reason.map(crate::state::reason_class);
        reasons.push(match (class, source.problem) {
            (Some(class), Some(problem)) if detail => {
                format!("{what} not read yet ({class}): {problem}")
            }
            (Some(class), _) => format!("{what} not read yet ({class})"),
            (None, _) => format!("{what} not read yet"),
        });
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not ready: {}\n", reasons.join(", ")),
    )
}

/// For each ring with keys its verified index lists that the store did not hold at the last
/// sync: a line naming them (short kids, the controller's own text).
fn missing_keys(state: &State) -> Vec<String> {
    state
        .ring_states()
        .into_iter()
        .filter_map(|(name, s)| {
            let missing = s.readiness.key_source()?.missing;
            let kids = missing.join(", ");
            let ring = if name.is_empty() {
                String::new()
            } else {
                format!(" of ring {name}")
            };
            match missing.len() {
                0 => None,
                1 => Some(format!(
                    "key {kids}{ring} missing from the store or unreadable (looking for it)"
                )),
                n => Some(format!(
                    "{n} keys{ring} missing from the store or unreadable (looking for them): {kids}"
                )),
            }
        })
        .collect()
}

/// `POST /v1/refresh`: check the fleet key ring now (rate-limited like verify and rotate;
/// requests close together are merged).
async fn refresh(AxumState(app): AxumState<App>) -> Response {
    if app.state.readiness.key_source().is_none() {
        return text(
            StatusCode::NOT_FOUND,
            "no key source configured (--key-source)\n",
        );
    }
    app.state.refresh.request();
    text(StatusCode::ACCEPTED, "refresh requested\n")
}

/// The value of `name` in a query string, percent-decoded (`None`: absent or not UTF-8).
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    let raw = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The certificate that `GET /v1/cert.pem` serves: the sealing key's; with `?ring=NAME` that
/// `--key-source` ring's active key's; with `?namespace=NS` the key that seals for a
/// SealedSecret in NS (with rings bound to namespaces, the first ring bound there).
fn sealing_certificate(app: &App, query: Option<&str>) -> Result<String, Problem> {
    if let Some(name) = query_value(query, "ring") {
        return ring_certificate(app, &name);
    }
    let ring = match query_value(query, "namespace") {
        Some(namespace) => {
            let scoped = app.state.scoped(&namespace);
            if let (None, Some((claims, mask))) = (scoped.ring.sealing_key(), &scoped.bound) {
                // Say which ring would seal there and why it does not.
                let first = (0..claims.rings().len()).find(|i| mask & (1 << i) != 0);
                let why = match first.map(|i| &claims.rings()[i]) {
                    None => format!("no ring of this controller opens in namespace {namespace}"),
                    Some(ring) => match claims.sealing_of(&ring.name) {
                        Some(Err(why)) => format!(
                            "ring {} seals for namespace {namespace}, and {why}",
                            ring.name
                        ),
                        _ => format!(
                            "ring {} seals for namespace {namespace}, and none of its keys is loaded yet",
                            ring.name
                        ),
                    },
                };
                return Err(Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no key seals: {why}"),
                ));
            }
            scoped.ring
        }
        None => {
            // With several rings: the first ring's own sealing key (chosen among its own
            // mirrors only), as `?ring=` serves it.
            if let Some(claims) = app.state.keys.claims()
                && let Some(first) = claims.rings().first()
            {
                return ring_certificate(app, &first.name);
            }
            app.state.keys.ring()
        }
    };
    match ring.sealing_key() {
        Some(key) => Ok(key.certificate().to_pem()),
        None => Err(no_sealing_key(app.state.sealing_problem().as_ref())),
    }
}

/// `GET /v1/cert.pem?ring=NAME`: the sealing certificate of `--key-source` ring `name`.
fn ring_certificate(app: &App, name: &str) -> Result<String, Problem> {
    let names = app.state.rings.names();
    let listed = || {
        if names.is_empty() {
            "this controller mirrors no ring (--key-source)".to_owned()
        } else {
            format!("this controller's rings: {}", names.join(", "))
        }
    };
    let Some(at) = names.iter().position(|n| n == name) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("no ring {name:?} here ({})", listed()),
        ));
    };
    let full = app.state.keys.ring();
    let sealing = match app.state.keys.claims() {
        Some(claims) => claims.sealing_of(name).cloned(),
        // A single unbound ring: the ring's sealing key.
        None if at == 0 => Some(
            full.sealing_key()
                .map(|k| k.id().clone())
                .ok_or_else(String::new),
        ),
        None => None,
    };
    match sealing {
        Some(Ok(id)) => full
            .get(&id)
            .map(|k| k.certificate().to_pem())
            .ok_or_else(no_keys),
        Some(Err(why)) if !why.is_empty() => Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no key of ring {name} seals: {why}"),
        )),
        _ if at == 0 => Err(no_sealing_key(app.state.sealing_problem().as_ref())),
        _ => Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no key of ring {name} seals yet: its keys are still loading"),
        )),
    }
}

async fn cert_pem(AxumState(app): AxumState<App>, uri: axum::http::Uri) -> Response {
    let pem = match sealing_certificate(&app, uri.query()) {
        Ok(pem) => pem,
        Err(problem) => return problem.into_response(),
    };
    let mut response = (StatusCode::OK, pem).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(PEM_CONTENT_TYPE),
    );
    response
}

fn rfc3339(time: SystemTime) -> Option<String> {
    jiff::Timestamp::try_from(time).ok().map(|t| t.to_string())
}

async fn certs(AxumState(app): AxumState<App>) -> Response {
    let ring = app.state.keys.ring();
    let claims = app.state.keys.claims();
    // With several rings, the first ring's own sealing key (as plain `/v1/cert.pem` serves).
    let sealing = match claims.as_ref().and_then(|c| {
        c.rings()
            .first()
            .map(|first| c.sealing_of(&first.name).and_then(|s| s.as_ref().ok()))
    }) {
        Some(first) => first.map(ToString::to_string),
        None => ring.sealing_key().map(|k| k.id().to_string()),
    };
    let certificates: Vec<Value> = ring
        .keys()
        .map(|k| {
            let cert = k.certificate();
            let mut entry = json!({
                "fingerprint": k.id().to_string(),
                "sealing": Some(k.id().to_string()) == sealing,
                "notBefore": rfc3339(cert.not_before()),
                "notAfter": rfc3339(cert.not_after()),
                "bits": k.public_key().bits(),
                "pem": cert.to_pem(),
            });
            // With several rings: which ones the key belongs to.
            if let Some(claims) = &claims {
                entry["rings"] = json!(claims.rings_of(k.id()));
            }
            entry
        })
        .collect();
    let mut body = json!({ "sealingKey": sealing, "certificates": certificates });
    if let Some(claims) = &claims {
        // Each ring's sealing key (`null`: none seals), and where it opens.
        let rings: Vec<Value> = claims
            .rings()
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "sealingKey": claims.sealing_of(&r.name).and_then(|s| s.as_ref().ok()).map(ToString::to_string),
                    "binding": r.binding.as_ref().map(crate::keys::binding::RingBinding::describe),
                })
            })
            .collect();
        body["rings"] = json!(rings);
    }
    axum::Json(body).into_response()
}

async fn metrics(AxumState(state): AxumState<State>) -> Response {
    // Streamed a chunk at a time (one series per SealedSecret: about 13 MB of text at
    // 100,000 objects, which a whole-text encoding held in memory at every scrape); each
    // chunk is a few hundred series, well under a millisecond of an async worker.
    let scrape = state.metrics.scrape();
    let body = axum::body::Body::from_stream(futures::stream::iter(
        scrape.map(Ok::<_, std::convert::Infallible>),
    ));
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
    );
    response
}

/// Counts requests and their latency by matched route (never the raw path, which a client
/// controls), method and status code.
async fn track(
    AxumState(app): AxumState<App>,
    path: MatchedPath,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().as_str().to_owned();
    let path = path.as_str().to_owned();
    let start = Instant::now();
    let response = next.run(request).await;
    let metrics = &app.state.metrics;
    metrics
        .http_duration
        .get_or_create(&HttpRouteLabels {
            path: path.clone(),
            method: method.clone(),
        })
        .observe(start.elapsed().as_secs_f64());
    metrics
        .http_requests
        .get_or_create(&HttpLabels {
            path,
            code: response.status().as_str().to_owned(),
            method,
        })
        .inc();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded_and_bad_escapes_refused() {
        let q = Some("all=1&ring=kseal%2Fteam-a%2Bb&namespace=team-a");
        assert_eq!(query_value(q, "ring").as_deref(), Some("kseal/team-a+b"));
        assert_eq!(query_value(q, "namespace").as_deref(), Some("team-a"));
        assert_eq!(query_value(q, "nope"), None);
        assert_eq!(
            query_value(Some("ring=kseal/x"), "ring").as_deref(),
            Some("kseal/x")
        );
        // A name that only starts like the parameter is another parameter.
        assert_eq!(query_value(Some("ringer=x"), "ring"), None);
        for bad in ["ring=%", "ring=%2", "ring=%zz", "ring=%ff"] {
            assert_eq!(query_value(Some(bad), "ring"), None, "{bad}");
        }
        assert_eq!(query_value(None, "ring"), None);
    }

    #[test]
    fn client_key_believes_forwarded_for_only_from_trusted_proxies() {
        let mut headers = HeaderMap::new();
        let none = TrustedProxies::default();
        let proxies = TrustedProxies::parse("10.0.0.0/8").unwrap();
        let peer: SocketAddr = "10.0.0.1:5555".parse().unwrap();
        let key =
            |headers: &HeaderMap, peer, trusted| client_key(headers, peer, trusted).to_string();
        assert_eq!(key(&headers, Some(peer), &none), "10.0.0.1");
        assert_eq!(key(&headers, None, &proxies), "unknown");
        headers.insert("x-forwarded-for", "1.2.3.4, 5.6.7.8".parse().unwrap());
        assert_eq!(key(&headers, Some(peer), &none), "10.0.0.1");
        assert_eq!(key(&headers, None, &proxies), "unknown");
        assert_eq!(key(&headers, Some(peer), &proxies), "5.6.7.8");
        let outside: SocketAddr = "192.0.2.1:5555".parse().unwrap();
        assert_eq!(key(&headers, Some(outside), &proxies), "192.0.2.1");
        // IPv6 clients count per /64, directly or forwarded.
        let v6: SocketAddr = "[2001:db8:1:2::7]:5555".parse().unwrap();
        assert_eq!(key(&headers, Some(v6), &none), "2001:db8:1:2::/64");
        let mut forwarded = HeaderMap::new();
        forwarded.insert("x-forwarded-for", "2001:db8:9:9:1:2:3:4".parse().unwrap());
        assert_eq!(key(&forwarded, Some(peer), &proxies), "2001:db8:9:9::/64");
    }

    #[test]
    fn forwarded_addresses_may_carry_ports_and_brackets() {
        let ip = |s: &str| parse_forwarded_address(s).map(|a| a.to_string());
        assert_eq!(ip("192.0.2.1").as_deref(), Some("192.0.2.1"));
        assert_eq!(ip("192.0.2.1:80").as_deref(), Some("192.0.2.1"));
        assert_eq!(ip("2001:db8::1").as_deref(), Some("2001:db8::1"));
        assert_eq!(ip("[2001:db8::1]").as_deref(), Some("2001:db8::1"));
        assert_eq!(ip("[2001:db8::1]:443").as_deref(), Some("2001:db8::1"));
        for bad in [
            "unknown",
            "_hidden",
            "[2001:db8::1]x",
            "[192.0.2.1]",
            "192.0.2.1:x",
            "",
        ] {
            assert_eq!(ip(bad), None, "{bad}");
        }
    }

    fn counts(by_kid: &[(char, u64)], unattributed: u64) -> crate::fleet::metrics::Counts {
        crate::fleet::metrics::Counts {
            ring: "kseal/fleet".into(),
            by_kid: by_kid
                .iter()
                .map(|(c, n)| {
                    (
                        kseal_keystore::Kid::parse(&c.to_string().repeat(64)).unwrap(),
                        *n,
                    )
                })
                .collect(),
            unattributed,
        }
    }

    #[test]
    fn the_objects_line_lists_each_kid_in_kid_order() {
        let line = |by_kid: &[(char, u64)], unattributed| {
            render_objects_line(&counts(by_kid, unattributed), OBJECTS_LINE_KIDS)
        };
        assert_eq!(
            line(&[('b', 4), ('a', 120)], 0),
            "objects by kid (ring kseal/fleet): aaaaaaaaaaaa=120 bbbbbbbbbbbb=4 unattributed=0\n"
        );
        assert_eq!(
            line(&[], 3),
            "objects by kid (ring kseal/fleet): unattributed=3\n"
        );
    }

    #[test]
    fn the_objects_line_names_the_kids_with_most_objects_and_sums_up_the_rest() {
        // Ten kids, three shown: the three with most objects (a tie goes to the lower kid),
        // in kid order; the seven others as one figure.
        let by_kid = [
            ('0', 5),
            ('1', 1),
            ('2', 50),
            ('3', 2),
            ('4', 7),
            ('5', 7),
            ('6', 0),
            ('7', 3),
            ('8', 4),
            ('9', 9),
        ];
        assert_eq!(
            render_objects_line(&counts(&by_kid, 2), 3),
            "objects by kid (ring kseal/fleet): 222222222222=50 444444444444=7 999999999999=9 (+7 more kids: 22) unattributed=2\n"
        );
        assert_eq!(
            render_objects_line(&counts(&by_kid[..4], 0), 3),
            "objects by kid (ring kseal/fleet): 000000000000=5 222222222222=50 333333333333=2 (+1 more kid: 1) unattributed=0\n"
        );
        // At the default bound, the line of a ring with 1,000 keys stays short.
        let mut many = counts(&[], 0);
        many.by_kid = (0..1000_u64)
            .map(|i| {
                (
                    kseal_keystore::Kid::parse(&format!("{i:064x}")).unwrap(),
                    1000 + i,
                )
            })
            .collect();
        let line = render_objects_line(&many, OBJECTS_LINE_KIDS);
        assert_eq!(line.matches('=').count(), OBJECTS_LINE_KIDS + 1, "{line}");
        assert!(
            line.ends_with(" (+992 more kids: 1483536) unattributed=0\n"),
            "{line}"
        );
        assert!(line.len() < 250, "{} bytes: {line}", line.len());
    }

    #[tokio::test]
    async fn the_metrics_ports_readyz_prints_the_objects_line_once_counted_and_the_api_port_never()
    {
        use tower::ServiceExt as _;
        let state = State::new();
        let readyz = |router: Router| async move {
            let request = Request::builder()
                .uri("/readyz")
                .body(Body::empty())
                .unwrap();
            let response = router.oneshot(request).await.unwrap();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(body.to_vec()).unwrap()
        };
        let metrics = || metrics_router(state.clone());
        let api = || api_router(state.clone(), ApiOptions::default());
        // Before the first count: no line.
        assert_eq!(
            readyz(metrics()).await,
            "not ready: no keys loaded, caches not synced\n"
        );
        state
            .metrics
            .fleet
            .publish("kseal/fleet", &counts(&[('a', 40), ('f', 3)], 1));
        assert_eq!(
            readyz(metrics()).await,
            "not ready: no keys loaded, caches not synced\nobjects by kid (ring kseal/fleet): aaaaaaaaaaaa=40 ffffffffffff=3 unattributed=1\n"
        );
        assert_eq!(
            readyz(api()).await,
            "not ready: no keys loaded, caches not synced\n"
        );
    }

    /// Keys the index lists that the store did not hold are named on both ports while no key
    /// is loaded (why nothing is ready), and on the metrics port's detail once ready.
    #[tokio::test]
    async fn readyz_names_keys_missing_from_the_store() {
        let state = State::new();
        state.readiness.key_source_configured();
        state.readiness.key_source_ok();
        state
            .readiness
            .key_source_missing(vec!["aaaaaaaaaaaa".into()]);
        for detail in [false, true] {
            let (status, body) = readiness_report(&state, detail);
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                body,
                "not ready: no keys loaded, key aaaaaaaaaaaa missing from the store or unreadable (looking for it), caches not synced\n"
            );
        }
        state
            .readiness
            .key_source_missing(vec!["aaaaaaaaaaaa".into(), "bbbbbbbbbbbb".into()]);
        let (_, body) = readiness_report(&state, false);
        assert!(
            body.contains(
                "2 keys missing from the store or unreadable (looking for them): aaaaaaaaaaaa, bbbbbbbbbbbb"
            ),
            "{body}"
        );
        state.readiness.key_source_missing(Vec::new());
        let (_, body) = readiness_report(&state, true);
        assert!(!body.contains("missing"), "{body}");
    }

    #[test]
    fn multi_document_yaml_is_rejected() {
        let body = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: a}\n---\napiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: b}\n";
        let p = parse_sealed_secret(body).err().unwrap();
        assert_eq!(p.status, StatusCode::BAD_REQUEST);
        assert!(p.message.contains("multi-document"), "{}", p.message);
    }
}
