//! Who a request counts against (an IPv4 address or IPv6 /64, through trusted proxies only)
//! and the rate-limit middleware of the routes that cost RSA work.

use super::*;

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
pub(super) fn client_key(
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
    trusted: &TrustedProxies,
) -> Client {
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
pub(super) fn parse_forwarded_address(entry: &str) -> Option<IpAddr> {
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
pub(super) struct Bucket(pub(super) BucketKey);

pub(super) async fn rate_limit(
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
pub(super) fn retry_after(status: StatusCode, what: &str, wait: Duration) -> Response {
    Problem::retry(status, what, wait).into_response()
}
