//! The controller's HTTP servers.
//!
//! The API server (`--listen-addr`) serves, on every replica (leader or not):
//! - `GET /healthz`: liveness, `200 ok\n` (Bitnami's body);
//! - `GET /readyz`: `200 ok\n` once keys are loaded and the caches synced, else `503` with
//!   the reasons;
//! - `GET /v1/cert.pem`: the sealing key's certificate (`application/x-pem-file`);
//! - `GET /v1/certs`: every public certificate with its fingerprint (JSON);
//! - `POST /v1/verify`: whether every item of one SealedSecret opens with the key ring;
//! - `POST /v1/rotate`: the same SealedSecret re-sealed with the sealing key;
//! - `POST /v1/refresh`: check the fleet key ring now (with `--key-source`).
//!
//! The metrics server (`--listen-metrics-addr`) serves `GET /metrics`.
//!
//! Unlike Bitnami's endpoints (reference §4.6), verify and rotate never render
//! `spec.template.data` (rendering turned them into a decryption oracle), take the scope only
//! from the top-level metadata (never from the template), are both rate-limited per client,
//! and run their RSA work on blocking threads, at most a few at a time. Responses never hold
//! plaintext, and nothing here logs item values.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, MatchedPath, Request, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::FutureExt as _;
use ipnet::IpNet;
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_keys::{KeyRing, Label, OpenStats, Plaintext, Scope};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::{HttpLabels, HttpRouteLabels};
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
const TEXT: &str = "text/plain; charset=utf-8";

/// The proxies whose `X-Forwarded-For` entries the rate limiter believes
/// (`--trusted-proxies`): CIDRs or single addresses, IPv4 and IPv6. Empty (the default): no
/// forwarding header is believed, every client is its peer address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses a comma-separated list of CIDRs (`10.0.0.0/8`, `fd00::/8`) and single addresses
    /// (`192.0.2.1`); empty items are skipped. The error names the bad item.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut nets = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let net = if item.contains('/') {
                item.parse::<IpNet>().map(|n| n.trunc()).map_err(|_| {
                    format!(
                        "{item:?}: not a CIDR (an IPv4 or IPv6 address, '/', a prefix length of at most 32 or 128)"
                    )
                })?
            } else {
                let ip = item
                    .parse::<IpAddr>()
                    .map_err(|_| format!("{item:?}: not an IP address or CIDR"))?;
                IpNet::from(ip)
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `ip` is a trusted proxy; an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, how a
    /// dual-stack socket reports an IPv4 peer) counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let canonical = ip.to_canonical();
        self.0
            .iter()
            .any(|net| net.contains(&canonical) || net.contains(&ip))
    }
}

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
    /// RSA jobs (one verify or rotate request each) run at the same time at most; further
    /// requests wait. Keeps CPU for the reconciler.
    pub max_concurrent_rsa_jobs: usize,
    /// Connections idle for this long are closed ([`IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// Proxies whose `X-Forwarded-For` entries name the client (default: none).
    pub trusted_proxies: TrustedProxies,
}

impl ApiOptions {
    /// The options `config` selects.
    pub fn from_config(config: &Config) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            rate_limit: config.rate_limit.0,
            rate_limit_burst: config.rate_limit.1,
            accept_deprecated_v1_data: config.accept_deprecated_v1_data,
            max_body_bytes: MAX_BODY_BYTES,
            max_concurrent_rsa_jobs: (cores / 2).max(1),
            idle_timeout: IDLE_TIMEOUT,
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
            max_concurrent_rsa_jobs: 1,
            idle_timeout: IDLE_TIMEOUT,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

#[derive(Clone)]
struct App {
    state: State,
    options: Arc<ApiOptions>,
    limiter: Arc<RateLimiter>,
    rsa_jobs: Arc<Semaphore>,
}

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
        rsa_jobs: Arc::new(Semaphore::new(options.max_concurrent_rsa_jobs.max(1))),
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

/// The metrics server's router: `GET /metrics`.
pub fn metrics_router(state: State) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
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
/// `shutdown` completes; in-flight requests then finish (graceful shutdown).
pub async fn serve_listeners(
    api: TcpListener,
    metrics: TcpListener,
    state: State,
    options: ApiOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let api_addr = local_addr(&api)?;
    let metrics_addr = local_addr(&metrics)?;
    tracing::info!(api = %api_addr, metrics = %metrics_addr, "serving HTTP");
    let shutdown = shutdown.shared();
    let idle = options.idle_timeout;
    let api_server = axum::serve(
        TimedListener::new(api, idle),
        api_router(state.clone(), options).into_make_service_with_connect_info::<PeerAddr>(),
    )
    .with_graceful_shutdown(shutdown.clone());
    let metrics_server = axum::serve(
        TimedListener::new(metrics, idle),
        metrics_router(state).into_make_service(),
    )
    .with_graceful_shutdown(shutdown);
    let (a, m) = tokio::join!(api_server.into_future(), metrics_server.into_future());
    a.map_err(|source| Error::Serve {
        addr: api_addr,
        source,
    })?;
    m.map_err(|source| Error::Serve {
        addr: metrics_addr,
        source,
    })?;
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
// Connections

/// A TCP listener whose connections close after [`ApiOptions::idle_timeout`] without
/// progress.
struct TimedListener {
    inner: TcpListener,
    idle: Duration,
}

impl TimedListener {
    fn new(inner: TcpListener, idle: Duration) -> Self {
        Self { inner, idle }
    }
}

impl axum::serve::Listener for TimedListener {
    type Io = IdleTimeout<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        (IdleTimeout::new(io, self.idle), addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The peer address of a connection accepted by [`serve_listeners`] (axum's `ConnectInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TimedListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TimedListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

/// Fails reads and writes that have made no progress for `idle`; any progress restarts the
/// clock.
struct IdleTimeout<T> {
    inner: T,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<T> IdleTimeout<T> {
    fn new(inner: T, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn progressed(&mut self) {
        let next = tokio::time::Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// Called when the inner IO is pending: an error once the deadline has passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connection idle for too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn after<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        match polled {
            Poll::Ready(result) => {
                self.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => self.expired(cx).map(Err),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.after(cx, polled)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.after(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.after(cx, polled)
    }
}

// ---------------------------------------------------------------------------------------
// Responses

/// An error answer: a status and a one-line text that never holds secret material.
#[derive(Debug)]
struct Problem {
    status: StatusCode,
    message: String,
}

impl Problem {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        text(self.status, format!("{}\n", self.message))
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

async fn readyz(AxumState(app): AxumState<App>) -> Response {
    use std::sync::atomic::Ordering;
    let readiness = &app.state.readiness;
    if readiness.is_ready() {
        return match readiness.sealing_problem() {
            Some(p) => text(StatusCode::OK, format!("ok (warning: {})\n", p.message)),
            None => text(StatusCode::OK, "ok\n"),
        };
    }
    let mut reasons = Vec::new();
    if !readiness.keys_loaded.load(Ordering::Acquire) {
        reasons.push("no keys loaded".to_owned());
    }
    if !readiness.caches_synced.load(Ordering::Acquire) {
        reasons.push("caches not synced".to_owned());
    }
    if let Some(source) = readiness.key_source_blocking() {
        reasons.push(match source.problem {
            Some(problem) => format!("key source not read yet: {problem}"),
            None => "key source not read yet".to_owned(),
        });
    }
    text(
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
    let mut response = (StatusCode::OK, state.metrics.encode()).into_response();
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

/// A keyed GCRA limiter (a token bucket without a refill task): each key may make `burst`
/// requests at once and `rate` per second sustained.
#[derive(Debug)]
struct RateLimiter {
    /// Time between two requests at the sustained rate.
    emission: Duration,
    /// How far ahead of now a key's theoretical arrival time may run (`(burst - 1) ×
    /// emission`).
    tolerance: Duration,
    capacity: usize,
    /// Theoretical arrival time of each key's next request.
    tat: Mutex<HashMap<String, Instant>>,
}

impl RateLimiter {
    fn new(rate: f64, burst: u32, capacity: usize) -> Self {
        // Config validates rate > 0 and finite; fall back to one per second otherwise.
        let emission = if rate.is_finite() && rate > 0.0 {
            Duration::try_from_secs_f64(1.0 / rate).unwrap_or(Duration::from_secs(1))
        } else {
            Duration::from_secs(1)
        };
        Self {
            emission,
            tolerance: emission.saturating_mul(burst.max(1) - 1),
            capacity: capacity.max(1),
            tat: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a request for `key` at `now`, or says how long to wait.
    fn check(&self, key: &str, now: Instant) -> Result<(), Duration> {
        // A panic while holding this lock cannot leave the map inconsistent.
        let mut tat = self.tat.lock().unwrap_or_else(PoisonError::into_inner);
        let current = tat.get(key).copied().map_or(now, |t| t.max(now));
        if let Some(allowed_at) = current.checked_sub(self.tolerance)
            && allowed_at > now
        {
            return Err(allowed_at - now);
        }
        if !tat.contains_key(key) && tat.len() >= self.capacity {
            // Entries whose time has passed are equivalent to absent ones.
            tat.retain(|_, t| *t > now);
            if tat.len() >= self.capacity {
                // Still full (many clients): forget the key closest to a full bucket.
                if let Some(oldest) = tat.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone()) {
                    tat.remove(&oldest);
                }
            }
        }
        tat.insert(key.to_owned(), current + self.emission);
        Ok(())
    }
}

/// The client a request is counted against: an IP address, or `unknown` without
/// connection info.
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
fn client_key(headers: &HeaderMap, peer: Option<SocketAddr>, trusted: &TrustedProxies) -> String {
    let Some(peer) = peer else {
        return "unknown".to_owned();
    };
    let mut client = peer.ip().to_canonical();
    if trusted.is_empty() || !trusted.contains(client) {
        return client.to_string();
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
    client.to_string()
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

async fn rate_limit(
    AxumState(app): AxumState<App>,
    path: MatchedPath,
    request: Request,
    next: Next,
) -> Response {
    let extensions = request.extensions();
    let peer = extensions
        .get::<ConnectInfo<PeerAddr>>()
        .map(|c| c.0.0)
        .or_else(|| extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
    let client = client_key(request.headers(), peer, &app.options.trusted_proxies);
    let key = format!("{}|{client}", path.as_str());
    match app.limiter.check(&key, Instant::now()) {
        Ok(()) => next.run(request).await,
        Err(wait) => {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let mut response = Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate limit exceeded: retry after {} s", seconds.max(1)),
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
            response
        }
    }
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

/// Opens every item of `sealed` with `ring`, **without** looking at `spec.template` at all:
/// the label comes from the top-level name, namespace and scope annotations only, and no
/// template is rendered. Adds the RSA operations spent to `stats`.
fn open_items(
    sealed: &SealedSecret,
    ring: &KeyRing,
    accept_deprecated_v1_data: bool,
    stats: &mut OpenStats,
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

    // Hint: only orders the attempts, never changes the result.
    let hint = sealed.sealing_key_hint();
    let mut items = Vec::with_capacity(envelopes.len());
    let mut failed = Vec::new();
    for (item, bytes) in &envelopes {
        match ring.open_counted(&label, bytes, hint.as_ref(), stats) {
            Ok(opened) => items.push(((*item).clone(), opened.plaintext)),
            Err(_) => failed.push(format!("`{item}`")),
        }
    }
    if !failed.is_empty() {
        // `items` is dropped here, zeroizing what did open.
        return Err(conflict(format!(
            "no key could decrypt items {} (tried {tried})",
            failed.join(", ")
        )));
    }
    let deprecated = match deprecated {
        None => None,
        Some(bytes) => Some(
            ring.open_counted(&label, &bytes, hint.as_ref(), stats)
                .map_err(|_| {
                    conflict(format!(
                        "no key could decrypt the deprecated field 'data' (tried {tried})"
                    ))
                })?
                .plaintext,
        ),
    };
    Ok(OpenedItems {
        label,
        items,
        deprecated,
    })
}

/// Runs RSA work on a blocking thread, at most `max_concurrent_rsa_jobs` at a time, and
/// counts its RSA operations whatever the outcome.
async fn rsa_job<T: Send + 'static>(
    app: &App,
    job: impl FnOnce(&KeyRing, &mut OpenStats) -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    let permit = app
        .rsa_jobs
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| Problem::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
    let ring = app.state.keys.ring();
    let metrics = app.state.metrics.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut stats = OpenStats::default();
        let result = job(&ring, &mut stats);
        metrics.rsa_operations.inc_by(stats.rsa_operations);
        result
    })
    .await
    .map_err(|_| Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error"))?
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
        let body = read_body(&app, request).await?;
        let Parsed { sealed, .. } = parse_sealed_secret(&body)?;
        let accept_v1 = app.options.accept_deprecated_v1_data;
        let object = object_ref(&sealed);
        let count = rsa_job(&app, move |ring, stats| {
            let opened = open_items(&sealed, ring, accept_v1, stats)?;
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
        let body = read_body(&app, request).await?;
        let Parsed { sealed, mut raw } = parse_sealed_secret(&body)?;
        let accept_v1 = app.options.accept_deprecated_v1_data;
        let object = object_ref(&sealed);
        let refusal = app.state.readiness.sealing_problem();
        let resealed = rsa_job(&app, move |ring, stats| {
            let opened = open_items(&sealed, ring, accept_v1, stats)?;
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
    fn gcra_admits_the_burst_then_spaces_requests() {
        let limiter = RateLimiter::new(2.0, 3, 16);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check("a", t0).is_ok());
        }
        let wait = limiter.check("a", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        // Another client has its own bucket.
        assert!(limiter.check("b", t0).is_ok());
        // After one emission interval, one more request.
        let t1 = t0 + Duration::from_millis(500);
        assert!(limiter.check("a", t1).is_ok());
        assert!(limiter.check("a", t1).is_err());
    }

    #[test]
    fn gcra_store_stays_bounded() {
        let limiter = RateLimiter::new(1.0, 1, 4);
        let t0 = Instant::now();
        for i in 0..100 {
            assert!(limiter.check(&format!("k{i}"), t0).is_ok());
        }
        assert!(limiter.tat.lock().unwrap().len() <= 4);
    }

    #[test]
    fn client_key_believes_forwarded_for_only_from_trusted_proxies() {
        let mut headers = HeaderMap::new();
        let none = TrustedProxies::default();
        let proxies = TrustedProxies::parse("10.0.0.0/8").unwrap();
        let peer: SocketAddr = "10.0.0.1:5555".parse().unwrap();
        assert_eq!(client_key(&headers, Some(peer), &none), "10.0.0.1");
        assert_eq!(client_key(&headers, None, &proxies), "unknown");
        headers.insert("x-forwarded-for", "1.2.3.4, 5.6.7.8".parse().unwrap());
        assert_eq!(client_key(&headers, Some(peer), &none), "10.0.0.1");
        assert_eq!(client_key(&headers, None, &proxies), "unknown");
        assert_eq!(client_key(&headers, Some(peer), &proxies), "5.6.7.8");
        let outside: SocketAddr = "192.0.2.1:5555".parse().unwrap();
        assert_eq!(client_key(&headers, Some(outside), &proxies), "192.0.2.1");
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
