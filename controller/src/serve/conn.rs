//! Connection limits of the HTTP servers, so that slow or idle clients cannot make them
//! unanswerable.
//!
//! Each listener has its own accept loop ([`serve`]) and its own [`Tracker`]:
//! - **Per client.** One client holds at most `max_per_client` connections; an IPv4 client is
//!   its address, an IPv6 client its /64 (one host usually owns a whole /64), an IPv4-mapped
//!   IPv6 address counts as its IPv4 address. A connection over the cap is closed at once.
//! - **Per listener.** The listener holds at most `max_connections`. When it is full, a new
//!   connection takes the place of an *evictable* one, which is closed: one of the client
//!   holding the most connections, and of its connections first the one that has waited
//!   longest for a request head (connected and sent no complete request yet, dripping its
//!   header, or idle between keep-alive requests), then the oldest serving only probes. Only
//!   when every held connection is serving a non-probe request is the new connection closed
//!   instead. The accept loop never waits for room.
//! - **Reserved capacity.** At most `max_connections - reserved` non-probe requests (probes:
//!   `/healthz`, `/readyz`, `/v1/cert.pem`, and everything on the metrics listener) are in
//!   flight at once; a further one is answered `503` at once and its connection closed. So
//!   at least `reserved` held connections are always free or evictable, and a new connection,
//!   a probe's included, is always admitted (unless its client is at its own cap). A probe
//!   client holds one connection, so it loses it only once every evictable connection belongs
//!   to a client holding just one, and every older one of those was evicted first: an
//!   attacker needs as many addresses (IPv6 /64s) as the listener holds connections, and as
//!   many new connections within the few milliseconds a probe takes.
//! - **Header timeout.** The whole request head must arrive within `header_timeout` of the
//!   connection's start or of the previous response (hyper's `header_read_timeout`), or the
//!   connection is closed: a dripping client cannot hold a connection, and a keep-alive
//!   connection idles at most this long. Bodies and responses keep the idle timeout: no
//!   progress for `idle_timeout` closes the connection.
//!
//! Only HTTP/1.1 is served (Bitnami's controller serves no cleartext HTTP/2 either).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::metrics::{ConnectionDropLabels, ListenerLabels, Metrics};
use crate::net::{Client, PeerAddr};

/// Default `--max-connections`, lowered to a quarter of the open-file limit.
pub(crate) const MAX_CONNECTIONS: usize = 512;
/// Default `--metrics-max-connections`, lowered to a sixteenth of the open-file limit.
pub(crate) const METRICS_MAX_CONNECTIONS: usize = 64;
/// Default `--max-connections-per-client`.
pub(crate) const MAX_CONNECTIONS_PER_CLIENT: usize = 32;
/// Default `--header-read-timeout`.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Refused connections are logged at most this often per listener.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections held at most.
    pub max_connections: usize,
    /// Connections one client (IPv4 address, IPv6 /64) holds at most.
    pub max_per_client: usize,
    /// The whole request head must arrive within this.
    pub header_timeout: Duration,
    /// Reads and writes without progress for this long close the connection.
    pub idle_timeout: Duration,
}

impl Limits {
    /// Slots kept for probes: non-probe requests in flight are at most
    /// `max_connections - reserved()` (an eighth of the cap, 1 to 64).
    pub(crate) fn reserved(&self) -> usize {
        (self.max_connections / 8)
            .clamp(1, 64)
            .min(self.max_connections)
    }
}

/// `preferred`, lowered to `limit / divisor` (at least 1) under an open-file limit.
pub(crate) fn default_cap(preferred: usize, limit: Option<u64>, divisor: u64) -> usize {
    match limit {
        Some(limit) => {
            let cap = usize::try_from(limit / divisor).unwrap_or(usize::MAX);
            preferred.min(cap).max(1)
        }
        None => preferred,
    }
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The client holds `max_per_client` connections.
    ClientLimit,
    /// The listener is full and every connection is in the middle of a request.
    ListenerLimit,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Self::ClientLimit => "client_limit",
            Self::ListenerLimit => "listener_limit",
        }
    }
}

/// The open connections of one listener.
#[derive(Debug)]
pub(crate) struct Tracker {
    listener: &'static str,
    limits: Limits,
    metrics: Arc<Metrics>,
    inner: Mutex<Inner>,
    /// Non-probe requests in flight.
    general: AtomicUsize,
    refusals: Mutex<RefusalLog>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    connections: HashMap<u64, Entry>,
    clients: HashMap<Client, usize>,
    /// The connections that may be evicted, in eviction order: those waiting for a request
    /// head (rank 0), then those serving only probes (rank 1), each oldest first. A
    /// connection serving a non-probe request is not here.
    evictable: BTreeSet<(u8, Instant, u64)>,
    peak: usize,
    client_peak: usize,
}

#[derive(Debug)]
struct Entry {
    client: Client,
    /// Non-probe requests in flight.
    general: usize,
    /// Probe requests in flight.
    probes: usize,
    /// When the connection was accepted or last changed state.
    since: Instant,
    evict: Arc<Notify>,
}

impl Entry {
    /// The connection's key in [`Inner::evictable`], `None` while it serves a non-probe
    /// request.
    fn evictable_key(&self, id: u64) -> Option<(u8, Instant, u64)> {
        match (self.general, self.probes) {
            (0, 0) => Some((0, self.since, id)),
            (0, _) => Some((1, self.since, id)),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl Tracker {
    /// A tracker for the listener named `listener` (the metrics label).
    pub(crate) fn new(listener: &'static str, limits: Limits, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            listener,
            limits,
            metrics,
            inner: Mutex::new(Inner::default()),
            general: AtomicUsize::new(0),
            refusals: Mutex::new(RefusalLog::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn labels(&self) -> ListenerLabels {
        ListenerLabels {
            listener: self.listener.to_owned(),
        }
    }

    fn count_drop(&self, reason: &str) {
        self.metrics
            .http_connections_dropped
            .get_or_create(&ConnectionDropLabels {
                listener: self.listener.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Admits a connection from `ip`, evicting the connection that has waited longest for a
    /// request head when the listener is full.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let client = Client::from_ip(ip);
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.clients.get(&client).copied().unwrap_or(0) >= self.limits.max_per_client {
            drop(inner);
            self.refused(Refused::ClientLimit, client);
            return Err(Refused::ClientLimit);
        }
        if inner.connections.len() >= self.limits.max_connections {
            let Some(victim) = inner.victim() else {
                drop(inner);
                self.refused(Refused::ListenerLimit, client);
                return Err(Refused::ListenerLimit);
            };
            if let Some(entry) = inner.remove(victim)
                && let Some(key) = entry.evictable_key(victim)
            {
                inner.evictable.remove(&key);
                entry.evict.notify_one();
            }
            self.count_drop("evicted");
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let evict = Arc::new(Notify::new());
        inner.connections.insert(
            id,
            Entry {
                client,
                general: 0,
                probes: 0,
                since: now,
                evict: evict.clone(),
            },
        );
        inner.evictable.insert((0, now, id));
        let held = inner.clients.entry(client).or_insert(0);
        *held += 1;
        let held = *held;
        inner.peak = inner.peak.max(inner.connections.len());
        inner.client_peak = inner.client_peak.max(held);
        let (open, peak, client_peak) = (inner.connections.len(), inner.peak, inner.client_peak);
        drop(inner);
        let labels = self.labels();
        let gauge = |family: &prometheus_client::metrics::family::Family<
            ListenerLabels,
            prometheus_client::metrics::gauge::Gauge,
        >,
                     value: usize| {
            family
                .get_or_create(&labels)
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        gauge(&self.metrics.http_connections, open);
        gauge(&self.metrics.http_connections_peak, peak);
        gauge(&self.metrics.http_client_connections_peak, client_peak);
        Ok(Slot {
            tracker: self.clone(),
            id,
            evict,
        })
    }

    fn refused(&self, reason: Refused, client: Client) {
        self.count_drop(reason.label());
        let mut log = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        log.unlogged += 1;
        let now = Instant::now();
        if log
            .last
            .is_none_or(|last| now.duration_since(last) >= REFUSAL_LOG_INTERVAL)
        {
            tracing::warn!(
                listener = self.listener,
                refused = log.unlogged,
                last_reason = reason.label(),
                last_client = %client,
                max_connections = self.limits.max_connections,
                max_connections_per_client = self.limits.max_per_client,
                "refusing connections over the limit (logged at most every 10 s; see kseal_http_connections_dropped_total)"
            );
            log.last = Some(now);
            log.unlogged = 0;
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.lock().connections.len()
    }

    /// The most connections held at once, and by one client.
    #[cfg(test)]
    pub(crate) fn peaks(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.peak, inner.client_peak)
    }

    fn close(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(entry) = inner.remove(id)
            && let Some(key) = entry.evictable_key(id)
        {
            inner.evictable.remove(&key);
        }
        let open = inner.connections.len();
        drop(inner);
        self.metrics
            .http_connections
            .get_or_create(&self.labels())
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Applies `change` to connection `id`'s request counts, keeping its place in
    /// `evictable` (the clock restarts).
    fn update(&self, id: u64, change: impl FnOnce(&mut Entry)) {
        let mut inner = self.lock();
        let Some(entry) = inner.connections.get_mut(&id) else {
            return;
        };
        let old = entry.evictable_key(id);
        change(entry);
        entry.since = Instant::now();
        let new = entry.evictable_key(id);
        if let Some(old) = old {
            inner.evictable.remove(&old);
        }
        if let Some(new) = new {
            inner.evictable.insert(new);
        }
    }

    /// A permit for a non-probe request, unless `max_connections - reserved` are in flight.
    fn general_permit(self: &Arc<Self>) -> Option<GeneralPermit> {
        let limit = self
            .limits
            .max_connections
            .saturating_sub(self.limits.reserved())
            .max(1);
        self.general
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| GeneralPermit(self.clone()))
    }
}

impl Inner {
    /// The connection to evict: of the clients holding the most connections, the evictable
    /// connection first in `evictable` order. A client with one connection (a probe, say)
    /// loses it only when every evictable connection belongs to a client with just one.
    /// (A linear scan: at most `max_connections` entries, only when the listener is full.)
    fn victim(&self) -> Option<u64> {
        let held = |id: &u64| {
            self.connections
                .get(id)
                .and_then(|entry| self.clients.get(&entry.client))
                .copied()
                .unwrap_or(0)
        };
        let most = self.evictable.iter().map(|(_, _, id)| held(id)).max()?;
        self.evictable
            .iter()
            .map(|(_, _, id)| *id)
            .find(|id| held(id) == most)
    }

    /// Forgets connection `id` (not its place in `evictable`).
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.connections.remove(&id)?;
        if let Some(held) = self.clients.get_mut(&entry.client) {
            *held -= 1;
            if *held == 0 {
                self.clients.remove(&entry.client);
            }
        }
        Some(entry)
    }
}

/// A held connection; dropping it frees its slot.
#[derive(Debug)]
pub(crate) struct Slot {
    tracker: Arc<Tracker>,
    id: u64,
    evict: Arc<Notify>,
}

impl Slot {
    /// Marks a request in flight until the guard drops. A connection serving a non-probe
    /// request is never evicted; one serving a probe only after every connection waiting for
    /// a request head.
    pub(crate) fn request(&self, probe: bool) -> RequestGuard {
        self.tracker.update(self.id, |entry| {
            if probe {
                entry.probes += 1;
            } else {
                entry.general += 1;
            }
        });
        RequestGuard {
            tracker: self.tracker.clone(),
            id: self.id,
            probe,
        }
    }

    /// Resolves when the connection was evicted to make room for another.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.tracker.close(self.id);
    }
}

/// A request in flight on a [`Slot`].
#[derive(Debug)]
pub(crate) struct RequestGuard {
    tracker: Arc<Tracker>,
    id: u64,
    probe: bool,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let probe = self.probe;
        self.tracker.update(self.id, |entry| {
            let count = if probe {
                &mut entry.probes
            } else {
                &mut entry.general
            };
            *count = count.saturating_sub(1);
        });
    }
}

#[derive(Debug)]
struct GeneralPermit(Arc<Tracker>);

impl Drop for GeneralPermit {
    fn drop(&mut self) {
        self.0.general.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether `path` on the API listener is a probe, answered from reserved capacity.
pub(crate) fn is_api_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/v1/cert.pem")
}

/// Serves `router` on `listener` under `tracker`'s limits until `shutdown` turns true, then
/// lets in-flight requests finish (graceful shutdown). Each request carries
/// `ConnectInfo<PeerAddr>`. `is_probe` tells the requests served from reserved capacity.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    tracker: Arc<Tracker>,
    is_probe: fn(&str) -> bool,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut shutdown) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = tracker.admit(peer.ip()) else {
                        // Refused: closed at once, counted and logged by the tracker.
                        drop(stream);
                        continue;
                    };
                    tasks.spawn(connection(
                        stream,
                        peer,
                        slot,
                        router.clone(),
                        tracker.clone(),
                        is_probe,
                        shutdown.clone(),
                    ));
                }
                Err(error) => accept_failed(&tracker, &error).await,
            },
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// Resolves once `shutdown` is true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

async fn accept_failed(tracker: &Tracker, error: &std::io::Error) {
    use std::io::ErrorKind;
    // The peer gave up before we accepted: nothing to wait for.
    if matches!(
        error.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    // Out of file descriptors or memory: the caps should prevent it; back off a little rather
    // than spin. Logged as refusals are, rate-limited.
    {
        let mut log = tracker
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if log
            .last
            .is_none_or(|last| now.duration_since(last) >= REFUSAL_LOG_INTERVAL)
        {
            tracing::error!(listener = tracker.listener, error = %error, "accept failed");
            log.last = Some(now);
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    router: Router,
    tracker: Arc<Tracker>,
    is_probe: fn(&str) -> bool,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let limits = tracker.limits;
    let io = TokioIo::new(IdleTimeout::new(stream, limits.idle_timeout));
    let slot = Arc::new(slot);
    let service = {
        let slot = slot.clone();
        let tracker = tracker.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let probe = is_probe(request.uri().path());
            let permit = if probe {
                None
            } else {
                match tracker.general_permit() {
                    Some(permit) => Some(permit),
                    None => {
                        tracker.count_drop("busy");
                        return futures::future::Either::Left(std::future::ready(Ok::<
                            _,
                            std::convert::Infallible,
                        >(
                            busy()
                        )));
                    }
                }
            };
            let in_flight = slot.request(probe);
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(PeerAddr(peer)));
            let router = router.clone();
            futures::future::Either::Right(async move {
                let response = match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                // The connection counts as busy until the body is written.
                Ok(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _held = (&in_flight, &permit);
                        frame
                    }))
                }))
            })
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                if error.is_timeout() {
                    tracker.count_drop("header_timeout");
                }
                tracing::debug!(listener = tracker.listener, error = %error, "connection closed");
            }
        }
        () = slot.evicted() => {
            tracing::debug!(listener = tracker.listener, "connection evicted to make room");
        }
        () = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

fn busy() -> Response<Body> {
    let mut response = Response::new(Body::from("server busy, retry later\n"));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
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
        let next = Instant::now() + self.idle;
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt as _;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test address")
    }

    fn tracker(max_connections: usize, max_per_client: usize) -> (Arc<Tracker>, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new());
        let limits = Limits {
            max_connections,
            max_per_client,
            header_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: Duration::from_secs(120),
        };
        (Tracker::new("api", limits, metrics.clone()), metrics)
    }

    fn evicted(slot: &Slot) -> bool {
        slot.evicted().now_or_never().is_some()
    }

    #[test]
    fn ipv4_clients_are_addresses_and_ipv6_clients_are_slash_64s() {
        assert_eq!(
            Client::from_ip(ip("10.0.0.1")),
            Client::from_ip(ip("10.0.0.1"))
        );
        assert_ne!(
            Client::from_ip(ip("10.0.0.1")),
            Client::from_ip(ip("10.0.0.2"))
        );
        assert_eq!(
            Client::from_ip(ip("2001:db8:1:2::1")),
            Client::from_ip(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"))
        );
        assert_ne!(
            Client::from_ip(ip("2001:db8:1:2::1")),
            Client::from_ip(ip("2001:db8:1:3::1"))
        );
        assert_eq!(
            Client::from_ip(ip("::ffff:192.0.2.7")),
            Client::from_ip(ip("192.0.2.7"))
        );
        assert_eq!(
            Client::from_ip(ip("2001:db8:1:2::1")).to_string(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            Client::from_ip(ip("::ffff:192.0.2.7")).to_string(),
            "192.0.2.7"
        );
    }

    #[test]
    fn a_client_holds_at_most_its_cap_per_address_or_slash_64() {
        let (tracker, metrics) = tracker(100, 2);
        let a1 = tracker.admit(ip("10.0.0.1")).expect("first");
        let _a2 = tracker
            .admit(ip("::ffff:10.0.0.1"))
            .expect("second, mapped");
        assert_eq!(
            tracker.admit(ip("10.0.0.1")).err(),
            Some(Refused::ClientLimit)
        );
        let _b = tracker.admit(ip("10.0.0.2")).expect("another address");
        let _v1 = tracker.admit(ip("2001:db8::1")).expect("v6");
        let _v2 = tracker.admit(ip("2001:db8::2")).expect("v6, same /64");
        assert_eq!(
            tracker.admit(ip("2001:db8::3")).err(),
            Some(Refused::ClientLimit)
        );
        let _w = tracker.admit(ip("2001:db8:0:1::1")).expect("another /64");
        // A closed connection frees its client's slot.
        drop(a1);
        let _a3 = tracker.admit(ip("10.0.0.1")).expect("room again");
        assert_eq!(tracker.open(), 6);
        assert_eq!(tracker.peaks(), (6, 2));
        let text = metrics.encode();
        assert!(
            text.contains(
                "kseal_http_connections_dropped_total{listener=\"api\",reason=\"client_limit\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("kseal_http_client_connections_peak{listener=\"api\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn a_full_listener_evicts_waiting_then_probe_connections_never_busy_ones() {
        let (tracker, metrics) = tracker(3, 10);
        let waiting = tracker.admit(ip("10.0.0.1")).expect("1");
        let probing = tracker.admit(ip("10.0.0.2")).expect("2");
        let working = tracker.admit(ip("10.0.0.3")).expect("3");
        let _probe = probing.request(true);
        let _work = working.request(false);
        // Full: the connection waiting for a request head makes room.
        let newer = tracker.admit(ip("10.0.0.4")).expect("4 evicts 1");
        assert!(evicted(&waiting));
        assert!(!evicted(&probing) && !evicted(&working));
        // Then the newer waiting one, before the one serving a probe.
        let newest = tracker.admit(ip("10.0.0.5")).expect("5 evicts 4");
        assert!(evicted(&newer) && !evicted(&probing));
        let _busy = newest.request(false);
        let _last = tracker.admit(ip("10.0.0.6")).expect("6 evicts 2");
        assert!(evicted(&probing));
        let _also = tracker.admit(ip("10.0.0.7")).expect("7 evicts 6");
        // Two busy with non-probe requests and a waiting one: the waiting one goes ...
        assert_eq!(tracker.open(), 3);
        drop(_work);
        // ... and a connection whose request finished waits again (evictable).
        let _eighth = tracker.admit(ip("10.0.0.8")).expect("8 evicts 7");
        let _ninth = tracker.admit(ip("10.0.0.9")).expect("9 evicts 3");
        assert!(evicted(&working));
        assert_eq!(tracker.peaks().0, 3);
        let text = metrics.encode();
        assert!(
            text.contains(
                "kseal_http_connections_dropped_total{listener=\"api\",reason=\"evicted\"} 6"
            ),
            "{text}"
        );
        assert!(
            text.contains("kseal_http_connections_peak{listener=\"api\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn a_full_listener_evicts_from_the_client_holding_the_most_first() {
        let (tracker, _) = tracker(4, 10);
        let probe = tracker.admit(ip("10.0.0.1")).expect("oldest, alone");
        let hostile: Vec<_> = (0..3)
            .map(|_| tracker.admit(ip("2001:db8::1")).expect("hostile /64"))
            .collect();
        let _new = tracker
            .admit(ip("2001:db8:0:0:1::9"))
            .expect("a fourth from the same /64");
        assert!(!evicted(&probe), "the single connection is older but stays");
        assert!(evicted(&hostile[0]));
        let _next = tracker.admit(ip("10.0.0.2")).expect("another");
        assert!(!evicted(&probe));
        assert!(evicted(&hostile[1]));
    }

    #[test]
    fn a_full_listener_of_busy_connections_refuses_the_new_one() {
        let (tracker, metrics) = tracker(2, 10);
        let a = tracker.admit(ip("10.0.0.1")).expect("1");
        let b = tracker.admit(ip("10.0.0.2")).expect("2");
        let _ra = a.request(false);
        let _rb = b.request(false);
        assert_eq!(
            tracker.admit(ip("10.0.0.3")).err(),
            Some(Refused::ListenerLimit)
        );
        assert!(!evicted(&a) && !evicted(&b));
        assert!(metrics.encode().contains(
            "kseal_http_connections_dropped_total{listener=\"api\",reason=\"listener_limit\"} 1"
        ));
    }

    #[test]
    fn non_probe_requests_leave_the_reserved_room() {
        let (tracker, _) = tracker(16, 16);
        assert_eq!(tracker.limits.reserved(), 2);
        let permits: Vec<_> = (0..14)
            .map(|_| tracker.general_permit().expect("under the limit"))
            .collect();
        assert!(tracker.general_permit().is_none());
        drop(permits);
        assert!(tracker.general_permit().is_some());
    }

    #[test]
    fn reserved_room_and_default_caps_scale_with_their_limits() {
        let limits = |max_connections| Limits {
            max_connections,
            max_per_client: 1,
            header_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: HEADER_READ_TIMEOUT,
        };
        assert_eq!(limits(512).reserved(), 64);
        assert_eq!(limits(1024).reserved(), 64);
        assert_eq!(limits(64).reserved(), 8);
        assert_eq!(limits(4).reserved(), 1);
        assert_eq!(limits(1).reserved(), 1);
        assert_eq!(default_cap(512, Some(1024), 4), 256);
        assert_eq!(default_cap(512, Some(1 << 20), 4), 512);
        assert_eq!(default_cap(512, None, 4), 512);
        assert_eq!(default_cap(64, Some(256), 16), 16);
        assert_eq!(default_cap(512, Some(2), 4), 1);
    }

    #[test]
    fn only_probe_paths_are_probes() {
        for path in ["/healthz", "/readyz", "/v1/cert.pem"] {
            assert!(is_api_probe(path), "{path}");
        }
        for path in [
            "/v1/certs",
            "/v1/verify",
            "/v1/rotate",
            "/v1/refresh",
            "/",
            "/readyz/",
        ] {
            assert!(!is_api_probe(path), "{path}");
        }
    }
}
