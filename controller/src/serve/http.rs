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
//! have it.
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
//! - The work runs on the RSA slots shared with the reconciler ([`crate::serve::rsapool`]), which
//!   goes first; when the HTTP share and its short queue are taken the answer is 503 with
//!   `Retry-After` at once.

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
/// has its own connection limits ([`crate::serve::conn`]).
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
    let (status, body) = readiness_report(&app.state.readiness, false);
    text(status, body)
}

/// The metrics port's `/readyz`: the same answer, plus the key source's last error and an
/// API server outage (`kseal_api_server_reachable` says the same).
async fn readyz_detail(AxumState(state): AxumState<State>) -> Response {
    let (status, mut body) = readiness_report(&state.readiness, true);
    if let Some(line) = state.api.readyz_line() {
        body.push_str(&line);
    }
    text(status, body)
}

/// `/readyz`'s status and body. Without `detail` (the API port, which anyone who can reach the
/// probe port reads) a key source's failure is named by its class only, e.g. `key source not
/// read yet (access denied)`: the store's error chain can carry account ids, role ARNs and
/// secret names. With `detail` (the metrics port) the chain follows, as the logs have it.
/// The sealing warning (`ok (warning: …)`) is the controller's own text, naming short kids
/// only, on both.
fn readiness_report(readiness: &crate::state::Readiness, detail: bool) -> (StatusCode, String) {
    use std::sync::atomic::Ordering;
    if readiness.is_ready() {
        let mut body = match readiness.sealing_problem() {
            Some(p) => format!("ok (warning: {})\n", p.message),
            None => "ok\n".to_owned(),
        };
        // A mirror keeps the replica ready while the store fails: the detail says so.
        if let Some(problem) = readiness
            .key_source()
            .and_then(|s| s.problem)
            .filter(|_| detail)
        {
            body.push_str(&format!("key source: last read failed: {problem}\n"));
        }
        return (StatusCode::OK, body);
    }
    let mut reasons = Vec::new();
    if !readiness.keys_loaded.load(Ordering::Acquire) {
        reasons.push("no keys loaded".to_owned());
    }
    if !readiness.caches_synced.load(Ordering::Acquire) {
        reasons.push("caches not synced".to_owned());
    }
    if let Some(source) = readiness.key_source_blocking() {
        let class = source.reason.map(crate::state::reason_class);
        reasons.push(match (class, source.problem) {
            (Some(class), Some(problem)) if detail => {
                format!("key source not read yet ({class}): {problem}")
            }
            (Some(class), _) => format!("key source not read yet ({class})"),
            (None, _) => "key source not read yet".to_owned(),
        });
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not ready: {}\n", reasons.join(", ")),
    )
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

async fn cert_pem(AxumState(app): AxumState<App>) -> Response {
    let ring = app.state.keys.ring();
    let Some(key) = ring.sealing_key() else {
        return no_sealing_key(app.state.readiness.sealing_problem().as_ref()).into_response();
    };
    let mut response = (StatusCode::OK, key.certificate().to_pem()).into_response();
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
    let sealing = ring.sealing_key().map(|k| k.id().to_string());
    let certificates: Vec<Value> = ring
        .keys()
        .map(|k| {
            let cert = k.certificate();
            json!({
                "fingerprint": k.id().to_string(),
                "sealing": Some(k.id().to_string()) == sealing,
                "notBefore": rfc3339(cert.not_before()),
                "notAfter": rfc3339(cert.not_after()),
                "bits": k.public_key().bits(),
                "pem": cert.to_pem(),
            })
        })
        .collect();
    axum::Json(json!({ "sealingKey": sealing, "certificates": certificates })).into_response()
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

// ---------------------------------------------------------------------------------------
// Rate limiting

/// The client a request is counted against: an IPv4 address or an IPv6 /64 ([`Client`]), or
/// [`Client::Unknown`] without connection info.
///
/// Forwarding headers are believed only from `trusted` proxies (`--trusted-proxies`;
/// default none): from any other peer, and when the peer is unknown, the header is ignored
/// and the peer address is the client, so a client that reaches the controller directly
/// cannot choose its bucket. From a trusted proxy, `X-Forwarded-For` (every such header, in
/// order, as one list) is walked from the right: each trusted address passes the question on
/// to the entry on its left; the first untrusted address is the client. Entries a client
/// wrote itself are left of the one its first proxy appended, so they are never reached. A
/// malformed entry (`unknown`, a host name) stops the walk: the proxy that passed it on is
/// the client. Only `X-Forwarded-For` is read (what the Kubernetes API server's service
/// proxy, kubeseal's path to the controller, and common ingress controllers append); the
/// RFC 7239 `Forwarded` header is ignored. IPv4-mapped IPv6 addresses count as their IPv4
/// address, so a dual-stack listener keys an IPv4 client the same way.
fn client_key(headers: &HeaderMap, peer: Option<SocketAddr>, trusted: &TrustedProxies) -> Client {
    let Some(peer) = peer else {
        return Client::Unknown;
    };
    let mut client = peer.ip().to_canonical();
    if trusted.is_empty() || !trusted.contains(client) {
        return Client::from_ip(client);
    }
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    for entry in entries.iter().rev() {
        if !trusted.contains(client) {
            break;
        }
        match parse_forwarded_address(entry) {
            Some(ip) => client = ip.to_canonical(),
            None => break,
        }
    }
    Client::from_ip(client)
}

/// One `X-Forwarded-For` entry: an IP address, optionally with a port (`192.0.2.1:4711`,
/// `[2001:db8::1]:4711`) or in brackets.
fn parse_forwarded_address(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port_ok = after.is_empty()
            || after
                .strip_prefix(':')
                .is_some_and(|p| p.parse::<u16>().is_ok());
        return port_ok.then(|| inside.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6))?;
    }
    entry.parse::<SocketAddr>().ok().map(|a| a.ip())
}

/// The rate-limit bucket a request was admitted from, for charging its RSA work.
#[derive(Debug, Clone, Copy)]
struct Bucket(BucketKey);

async fn rate_limit(
    AxumState(app): AxumState<App>,
    path: MatchedPath,
    mut request: Request,
    next: Next,
) -> Response {
    let extensions = request.extensions();
    let peer = extensions
        .get::<ConnectInfo<PeerAddr>>()
        .map(|c| c.0.0)
        .or_else(|| extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    let client = client_key(request.headers(), peer, &app.options.trusted_proxies);
    let route = match path.as_str() {
        "/v1/verify" => "verify",
        "/v1/rotate" => "rotate",
        _ => "refresh",
    };
    let key = (route, client);
    match app.limiter.check(&key, Instant::now()) {
        Ok(()) => {
            request.extensions_mut().insert(Bucket(key));
            next.run(request).await
        }
        Err(wait) => retry_after(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded", wait),
    }
}

/// A refusal with `Retry-After` (whole seconds, at least 1).
fn retry_after(status: StatusCode, what: &str, wait: Duration) -> Response {
    Problem::retry(status, what, wait).into_response()
}

// ---------------------------------------------------------------------------------------
// verify and rotate

async fn read_body(app: &App, request: Request) -> Result<Bytes, Problem> {
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

fn is_length_limit(error: &axum::Error) -> bool {
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
struct Parsed {
    sealed: SealedSecret,
    raw: Value,
}

/// Parses one SealedSecret from JSON or YAML, under the budgets of
/// [`kseal_api::request`]: `400` for a body that is not one object, `422` for an object that
/// is not a valid SealedSecret.
fn parse_sealed_secret(body: &[u8]) -> Result<Parsed, Problem> {
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
struct OpenedItems {
    label: Label,
    /// `encryptedData` items, opened (zeroized on drop).
    items: Vec<(String, Plaintext)>,
    /// The deprecated `spec.data` blob, opened.
    deprecated: Option<Plaintext>,
}

/// What one verify or rotate may spend on RSA work, and what it spent.
struct Budget<'a> {
    /// The admitted job: a slot is taken per value.
    job: &'a HttpJob,
    /// When waiting for slots ends with 503.
    deadline: Instant,
    /// Go on after a value fails, to name every failing one (`?all=true`).
    all: bool,
    stats: OpenStats,
}

/// Values (`encryptedData` items plus the deprecated `data`) in `sealed`, refused with 413
/// beyond `max`.
fn count_values(sealed: &SealedSecret, max: usize) -> Result<usize, Problem> {
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
fn worst_case_operations(sealed: &SealedSecret, ring: &KeyRing, values: usize) -> u64 {
    let per_value = match sealed.sealing_key_hint() {
        Some(hint) if ring.get(&hint).is_some() => 1,
        _ => ring.len(),
    };
    u64::try_from(values.saturating_mul(per_value)).unwrap_or(u64::MAX)
}

/// Rate-limit units `operations` RSA operations cost (at least the one admission took).
fn units(operations: u64) -> i64 {
    i64::try_from(operations.div_ceil(RSA_OPERATIONS_PER_UNIT).max(1)).unwrap_or(i64::MAX)
}

/// Opens every item of `sealed` with `ring`, **without** looking at `spec.template` at all:
/// the label comes from the top-level name, namespace and scope annotations only, and no
/// template is rendered. Takes an RSA slot per value and adds the operations spent to the
/// budget; stops at the first value that fails unless the budget asks for all.
fn open_items(
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
    let label = scope.label(namespace.unwrap_or_default(), name);
    // Public metadata, named in failures: it answers "renamed or moved?" and nothing else.
    let tried = kseal_api::ScopeTarget::new(scope, namespace.unwrap_or_default(), name);
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
    let conflict = |message: String| Problem::new(StatusCode::CONFLICT, message);

    // Structural checks on public bytes first, before any RSA operation.
    let decode = |text: &str| -> kseal_keys::Result<Vec<u8>> {
        let bytes = kseal_keys::envelope::decode_base64(text)?;
        kseal_keys::envelope::Envelope::parse(&bytes)?;
        Ok(bytes)
    };
    let mut envelopes = Vec::with_capacity(spec.encrypted_data.len());
    for (item, value) in &spec.encrypted_data {
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
    if (!envelopes.is_empty() || deprecated.is_some()) && ring.is_empty() {
        return Err(no_keys());
    }

    // A hint naming a ring key binds: a value that fails with it fails (one RSA operation).
    // Otherwise the key that opened the previous value is tried first (it only orders).
    let bound = sealed
        .sealing_key_hint()
        .filter(|hint| ring.get(hint).is_some());
    let mut learned = None;
    let mut open = |bytes: &[u8], budget: &mut Budget<'_>| {
        let _slot = budget
            .job
            .slot(budget.deadline)
            .map_err(|_| Problem::rsa_busy())?;
        let (hint, policy) = match &bound {
            Some(hint) => (Some(hint), HintPolicy::Binds),
            None => (learned.as_ref(), HintPolicy::Orders),
        };
        let opened = ring.open_with(&label, bytes, hint, policy, &mut budget.stats);
        if let Ok(opened) = &opened {
            learned = Some(opened.key.clone());
        }
        Ok::<_, Problem>(opened.ok().map(|o| o.plaintext))
    };
    let mut items = Vec::with_capacity(envelopes.len());
    let mut failed = Vec::new();
    for (item, bytes) in &envelopes {
        match open(bytes, budget)? {
            Some(plaintext) => items.push(((*item).clone(), plaintext)),
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
        let rest = if budget.all || failed.len() == envelopes.len() {
            ""
        } else {
            "; stopped at the first failure (?all=true names every one)"
        };
        return Err(conflict(format!(
            "no key could decrypt items {} (tried {tried}){rest}",
            failed.join(", ")
        )));
    }
    let deprecated = match deprecated {
        None => None,
        Some(bytes) => Some(open(&bytes, budget)?.ok_or_else(|| {
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

/// Runs RSA work on a blocking thread as one admitted HTTP job of the shared RSA pool
/// (refused with 503 and `Retry-After` when its HTTP share is taken), charges the client's
/// bucket for the worst case before and settles it to what was spent after, and counts the
/// RSA operations whatever the outcome.
async fn rsa_job<T: Send + 'static>(
    app: &App,
    bucket: Option<Bucket>,
    ring: Arc<KeyRing>,
    worst_case: u64,
    all: bool,
    job: impl FnOnce(&KeyRing, &mut Budget<'_>) -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    let client = bucket.map_or(Client::Unknown, |b| b.0.1);
    let admitted = app
        .state
        .rsa
        .admit_http(client)
        .map_err(|_| Problem::rsa_busy())?;
    // Admission charged one unit; reserve the rest of the worst case now, so concurrent
    // requests of the same client see the debt at once.
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
fn wants_all(request: &Request) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "all" | "all=true" | "all=1"))
    })
}

fn object_ref(sealed: &SealedSecret) -> String {
    format!(
        "{}/{}",
        sealed.metadata.namespace.as_deref().unwrap_or(""),
        sealed.metadata.name.as_deref().unwrap_or("")
    )
}

/// `POST /v1/verify`: `200` when every item opens, `409` when one does not.
async fn verify(AxumState(app): AxumState<App>, request: Request) -> Response {
    let result = async {
        let bucket = request.extensions().get::<Bucket>().copied();
        let all = wants_all(&request);
        let body = read_body(&app, request).await?;
        let Parsed { sealed, .. } = parse_sealed_secret(&body)?;
        let values = count_values(&sealed, app.options.max_request_items)?;
        let ring = app.state.keys.ring();
        let worst_case = worst_case_operations(&sealed, &ring, values);
        let accept_v1 = app.options.accept_deprecated_v1_data;
        let object = object_ref(&sealed);
        let count = rsa_job(&app, bucket, ring, worst_case, all, move |ring, budget| {
            let opened = open_items(&sealed, ring, accept_v1, budget)?;
            Ok(opened.items.len() + usize::from(opened.deprecated.is_some()))
        })
        .await
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
async fn rotate(AxumState(app): AxumState<App>, request: Request) -> Response {
    let result = async {
        let bucket = request.extensions().get::<Bucket>().copied();
        let all = wants_all(&request);
        let body = read_body(&app, request).await?;
        let Parsed { sealed, mut raw } = parse_sealed_secret(&body)?;
        let values = count_values(&sealed, app.options.max_request_items)?;
        let ring = app.state.keys.ring();
        let worst_case = worst_case_operations(&sealed, &ring, values);
        let accept_v1 = app.options.accept_deprecated_v1_data;
        let object = object_ref(&sealed);
        let refusal = app.state.readiness.sealing_problem();
        let resealed = rsa_job(&app, bucket, ring, worst_case, all, move |ring, budget| {
            let opened = open_items(&sealed, ring, accept_v1, budget)?;
            let key = ring
                .sealing_key()
                .ok_or_else(|| no_sealing_key(refusal.as_ref()))?;
            let seal = |what: &str, plaintext: &Plaintext| {
                kseal_keys::seal_base64(key.public_key(), &opened.label, plaintext.expose())
                    .map_err(|_| {
                        Problem::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!("failed to re-seal {what}"),
                        )
                    })
            };
            let mut items = Vec::with_capacity(opened.items.len());
            for (item, plaintext) in &opened.items {
                items.push((item.clone(), seal(&format!("item `{item}`"), plaintext)?));
            }
            let deprecated = opened
                .deprecated
                .as_ref()
                .map(|p| seal("the deprecated field 'data'", p))
                .transpose()?;
            Ok((items, deprecated, key.id().to_string()))
        })
        .await
        .inspect_err(|p| tracing::debug!(object, status = %p.status, "rotate failed"))?;
        let (items, deprecated, key_id) = resealed;
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
        annotations.as_object_mut().ok_or_else(invalid)?.insert(
            SEALING_KEY_ANNOTATION.to_owned(),
            Value::String(key_id.clone()),
        );
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
        tracing::info!(object, key = %key_id, "re-sealed with the sealing key");
        Ok::<_, Problem>(axum::Json(raw).into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn multi_document_yaml_is_rejected() {
        let body = b"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: a}\n---\napiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: b}\n";
        let p = parse_sealed_secret(body).err().unwrap();
        assert_eq!(p.status, StatusCode::BAD_REQUEST);
        assert!(p.message.contains("multi-document"), "{}", p.message);
    }
}
