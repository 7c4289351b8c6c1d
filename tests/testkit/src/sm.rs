//! AWS Secrets Manager test support: the emulator's endpoint, per-test secret names, and
//! [`FaultProxy`], a loopback HTTP proxy that injects Secrets Manager errors and outages.
//!
//! The emulator is moto's standalone server, started by `tests/moto/start.sh` (scripts/test.sh
//! does it and sets [`ENDPOINT_VAR`] for `cargo test`). Its state lives in memory and is shared
//! by every test of a run: give each test its own names ([`unique_prefix`]) and never reset it.
//! moto does not check signatures or credentials, so dummy keys and region `us-east-1` work.
//!
//! ```no_run
//! # async fn demo() {
//! use kseal_testkit::sm::{self, Fault, FaultProxy};
//! let Some(endpoint) = sm::endpoint() else { return }; // skipped (fails under CI=true)
//! let prefix = sm::unique_prefix("ring_rotation");       // kseal-test/ring_rotation-<hex>
//! let proxy = FaultProxy::start(&endpoint).await;
//! proxy.inject("GetSecretValue", Fault::Throttle, 2);   // two throttles, then forwarded
//! // ... point the SDK at proxy.url() and use names under `prefix` ...
//! assert_eq!(proxy.count("GetSecretValue"), 3);
//! # }
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The variable holding the emulator's base URL, `http://127.0.0.1:PORT`.
pub const ENDPOINT_VAR: &str = "KSEAL_TEST_SM_ENDPOINT";

/// The Secrets Manager emulator's base URL from [`ENDPOINT_VAR`].
///
/// When it is unset (or empty) this panics under `CI=true`, where the emulator is required, and
/// elsewhere prints a `SKIPPED: ...` line to stderr and returns `None`: the calling test should
/// return early. This is the rule the reference kube-apiserver tests follow for
/// `KSEAL_REFAPI_KUBECONFIG`.
pub fn endpoint() -> Option<String> {
    let test = std::thread::current().name().map(str::to_owned);
    let decided = decide_endpoint(
        std::env::var(ENDPOINT_VAR).ok(),
        std::env::var("CI").as_deref() == Ok("true"),
    );
    if decided.is_none() {
        // libtest names each test's thread after the test.
        let test = test.filter(|t| t != "main");
        crate::skipped(&format!(
            "SKIPPED: {} needs the Secrets Manager emulator: set {ENDPOINT_VAR} \
             (scripts/test.sh starts moto and sets it; by hand: eval \"$(bash tests/moto/start.sh)\"; \
             export {ENDPOINT_VAR})",
            test.as_deref().unwrap_or("this test")
        ));
    }
    decided
}

/// The endpoint from `value`, `None` to skip, or a panic under `ci` without one.
fn decide_endpoint(value: Option<String>, ci: bool) -> Option<String> {
    if let Some(v) = value.filter(|v| !v.trim().is_empty()) {
        return Some(v.trim().trim_end_matches('/').to_owned());
    }
    assert!(
        !ci,
        "{ENDPOINT_VAR} is not set, but CI=true: the Secrets Manager emulator is required under \
         CI=true: run tests through scripts/test.sh"
    );
    None
}

/// A secret-name prefix unique to this test and run: `kseal-test/<test>-<16 hex digits>`.
///
/// The emulator's state is shared by tests running in parallel (and by earlier runs against
/// the same server), so each test keeps its secrets under its own prefix. Characters that
/// Secrets Manager does not allow in names are replaced by `-` (so `mod::test` becomes
/// `mod--test`); the prefix never ends in `-` plus six characters, which would look like the
/// random suffix of a secret's ARN.
pub fn unique_prefix(test: &str) -> String {
    let test: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_+=.@-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let mut b = [0u8; 8];
    crate::store::fill_random(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("kseal-test/{test}-{hex}")
}

/// Calls one Secrets Manager operation on the emulator directly, as an operator's `aws
/// secretsmanager` would (`DeleteSecret`, `RestoreSecret`, ...): its JSON answer, or a
/// refusal's status and body. For a test's own moves outside kseal's code; moto checks no
/// signature, so the `Authorization` header only names the region.
///
/// # Errors
/// When the emulator cannot be reached or refuses the call.
pub async fn admin(
    endpoint: &str,
    operation: &str,
    input: serde_json::Value,
) -> Result<serde_json::Value, String> {
    let client: Client<HttpConnector, Body> = Client::builder(TokioExecutor::new()).build_http();
    let request = Request::post(format!("{}/", endpoint.trim_end_matches('/')))
        .header(header::CONTENT_TYPE, "application/x-amz-json-1.1")
        .header("x-amz-target", format!("secretsmanager.{operation}"))
        .header(
            header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/secretsmanager/aws4_request, \
             SignedHeaders=host, Signature=0",
        )
        .body(Body::from(input.to_string()))
        .map_err(|e| format!("{operation}: {e}"))?;
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("{operation}: {e}"))?;
    let status = response.status();
    let body = axum::body::to_bytes(Body::new(response.into_body()), 1 << 20)
        .await
        .map_err(|e| format!("{operation}: reading the answer: {e}"))?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(format!("{operation}: {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("{operation}: the answer is not JSON: {e}"))
}

/// An error [`FaultProxy`] answers instead of forwarding a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 400 `{"__type":"ThrottlingException","message":"Rate exceeded"}`: retried by the
    /// SDK's standard retry policy (3 attempts in all).
    Throttle,
    /// HTTP 500 `{"__type":"InternalServiceError","message":"injected"}`: a transient server
    /// error, retried by the SDK.
    ServerError,
    /// HTTP 400 `{"__type":"AccessDeniedException",...}`: not retried.
    AccessDenied,
    /// HTTP 403 with an XML body and no error type, as a proxy or the emulator's IAM
    /// enforcement answers a denied call: not parseable by the JSON protocol.
    Forbidden,
    /// The connection is closed after the request is read, without any response, as when the
    /// service is unreachable or a connection breaks. The Rust SDK classifies this as a
    /// transient I/O failure, retries it, and finally reports `SdkError::DispatchFailure`, the
    /// error it reports when the endpoint refuses connections.
    Down,
}

impl Fault {
    /// Status and body of the error response (`None` for [`Fault::Down`]).
    fn response(self, operation: &str) -> Option<(StatusCode, String)> {
        let (status, body) = match self {
            Self::Throttle => (
                StatusCode::BAD_REQUEST,
                serde_json::json!({"__type": "ThrottlingException", "message": "Rate exceeded"}),
            ),
            Self::ServerError => (
                StatusCode::INTERNAL_SERVER_ERROR,
                serde_json::json!({"__type": "InternalServiceError", "message": "injected"}),
            ),
            Self::AccessDenied => (
                StatusCode::BAD_REQUEST,
                serde_json::json!({
                    "__type": "AccessDeniedException",
                    "message": format!(
                        "User: arn:aws:iam::123456789012:user/kseal-test is not authorized to \
                         perform: secretsmanager:{operation} because no identity-based policy \
                         allows the secretsmanager:{operation} action (injected)"
                    ),
                }),
            ),
            Self::Forbidden => {
                return Some((
                    StatusCode::FORBIDDEN,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ErrorResponse><Error>\
                     <Code>AccessDenied</Code><Message>injected</Message></Error>\
                     </ErrorResponse>"
                        .to_owned(),
                ));
            }
            Self::Down => return None,
        };
        Some((status, body.to_string()))
    }

    fn content_type(self) -> &'static str {
        match self {
            Self::Forbidden => "text/html; charset=utf-8",
            _ => "application/x-amz-json-1.1",
        }
    }
}

#[derive(Debug)]
struct Rule {
    operation: String,
    fault: Fault,
    remaining: usize,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    down: bool,
    counts: HashMap<String, usize>,
    total: usize,
}

impl State {
    /// Counts a request and picks the fault to answer it with, if any.
    fn admit(&mut self, operation: &str) -> Option<Fault> {
        *self.counts.entry(operation.to_owned()).or_default() += 1;
        self.total += 1;
        if self.down {
            return Some(Fault::Down);
        }
        let i = self
            .rules
            .iter()
            .position(|r| r.operation == "*" || r.operation == operation)?;
        let rule = &mut self.rules[i];
        let fault = rule.fault;
        rule.remaining -= 1;
        if rule.remaining == 0 {
            self.rules.remove(i);
        }
        Some(fault)
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    upstream: String,
    client: Client<HttpConnector, Body>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The connection is to be closed without a response ([`Fault::Down`], or the upstream could
/// not be reached). Returning an error from the service makes hyper drop the connection.
#[derive(Debug)]
struct Dropped(&'static str);

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Dropped {}

/// An HTTP/1.1 reverse proxy on `127.0.0.1` in front of a Secrets Manager endpoint (the
/// emulator) that answers chosen operations with errors and can play an outage.
///
/// Requests are matched by operation: the part after the `.` of the `X-Amz-Target` header
/// (`secretsmanager.GetSecretValue` is `GetSecretValue`; a request without the header is
/// operation `""`). Everything not faulted is forwarded unchanged (method, path and query,
/// headers including `Host`, `Authorization` and `X-Amz-Target`, body; only hop-by-hop headers
/// are dropped) and the upstream's status, headers and body are passed back. When the upstream
/// cannot be reached the client's connection is closed, as for [`Fault::Down`].
///
/// Start it inside a Tokio runtime; it serves from tasks of that runtime until dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish()
    }
}

impl FaultProxy {
    /// Listens on `127.0.0.1` on a free port and forwards to `upstream`, a base URL like
    /// `http://127.0.0.1:PORT` (plain HTTP). Panics when it cannot listen.
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("FaultProxy: listening on 127.0.0.1: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("FaultProxy: local address: {e}"));
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        FaultProxy { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT`, the endpoint to give the SDK.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers the next `times` requests for `operation` (`"GetSecretValue"`, ...; `"*"` for any
    /// operation) with `fault`, then forwards again. Rules apply in the order added; a request
    /// uses up one answer of the first rule that matches it. `times == 0` adds nothing.
    pub fn inject(&self, operation: &str, fault: Fault, times: usize) {
        if times == 0 {
            return;
        }
        self.shared.lock().rules.push(Rule {
            operation: operation.to_owned(),
            fault,
            remaining: times,
        });
    }

    /// Removes every rule added by [`FaultProxy::inject`] that is not used up yet.
    pub fn clear_faults(&self) {
        self.shared.lock().rules.clear();
    }

    /// While `true`, every request fails as if the service were unreachable (the connection is
    /// closed without a response, see [`Fault::Down`]); injected rules wait meanwhile.
    pub fn set_down(&self, down: bool) {
        self.shared.lock().down = down;
    }

    /// Requests seen for `operation` (`"*"`: all requests), faulted ones included.
    pub fn count(&self, operation: &str) -> usize {
        let st = self.shared.lock();
        if operation == "*" {
            st.total
        } else {
            st.counts.get(operation).copied().unwrap_or(0)
        }
    }

    /// Sets every count back to zero.
    pub fn reset_counts(&self) {
        let mut st = self.shared.lock();
        st.counts.clear();
        st.total = 0;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "FaultProxy: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
            // An error here is mostly a connection closed on purpose (`Dropped`).
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The operation named by `X-Amz-Target` (`secretsmanager.GetSecretValue` -> `GetSecretValue`).
fn operation(headers: &HeaderMap) -> String {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match target.rsplit_once('.') {
        Some((_, op)) => op.to_owned(),
        None => target.to_owned(),
    }
}

/// Connection-level headers that a proxy must not forward (RFC 9110, section 7.6.1).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (k, v) in from {
        if !is_hop_by_hop(k) {
            to.append(k, v.clone());
        }
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
    let operation = operation(req.headers());
    let fault = shared.lock().admit(&operation);
    let (parts, body) = req.into_parts();
    // Read the whole request first, also when dropping it: closing a socket with unread data
    // would reset the connection instead of closing it.
    let body = axum::body::to_bytes(Body::new(body), usize::MAX)
        .await
        .map_err(|_| Dropped("reading the request body failed"))?;
    if let Some(fault) = fault {
        let Some((status, json)) = fault.response(&operation) else {
            return Err(Dropped("injected: down"));
        };
        let mut resp = Response::new(Body::from(json));
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(fault.content_type()),
        );
        if let Ok(id) = HeaderValue::from_str(&crate::store::new_uid()) {
            h.insert("x-amzn-requestid", id);
        }
        return Ok(resp);
    }
    forward(&shared, parts, body).await
}

async fn forward(
    shared: &Shared,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<Response<Body>, Dropped> {
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let uri: http::Uri = format!("{}{path}", shared.upstream)
        .parse()
        .map_err(|_| Dropped("invalid upstream URL"))?;
    let mut req = Request::new(Body::from(body));
    *req.method_mut() = parts.method;
    *req.uri_mut() = uri;
    // `Host` is kept (it is part of the SigV4 signature); hyper adds one only when it is absent.
    copy_headers(&parts.headers, req.headers_mut());
    let resp = match shared.client.request(req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, upstream = %shared.upstream, "FaultProxy: upstream unreachable");
            return Err(Dropped("upstream unreachable"));
        }
    };
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(Body::new(body), usize::MAX)
        .await
        .map_err(|_| Dropped("reading the upstream response failed"))?;
    let mut out = Response::new(Body::from(body));
    *out.status_mut() = parts.status;
    copy_headers(&parts.headers, out.headers_mut());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_is_taken_from_the_variable() {
        assert_eq!(
            decide_endpoint(Some("http://127.0.0.1:5000/".into()), true).as_deref(),
            Some("http://127.0.0.1:5000")
        );
    }

    #[test]
    fn missing_endpoint_skips_outside_ci() {
        assert_eq!(decide_endpoint(None, false), None);
        assert_eq!(decide_endpoint(Some(" ".into()), false), None);
    }

    #[test]
    #[should_panic(expected = "the Secrets Manager emulator is required under CI=true")]
    fn missing_endpoint_fails_under_ci() {
        let _ = decide_endpoint(Some(String::new()), true);
    }

    #[test]
    fn rules_apply_in_order_and_are_used_up() {
        let mut st = State::default();
        st.rules.push(Rule {
            operation: "GetSecretValue".into(),
            fault: Fault::Throttle,
            remaining: 1,
        });
        st.rules.push(Rule {
            operation: "*".into(),
            fault: Fault::ServerError,
            remaining: 2,
        });
        assert_eq!(st.admit("GetSecretValue"), Some(Fault::Throttle));
        assert_eq!(st.admit("GetSecretValue"), Some(Fault::ServerError));
        assert_eq!(st.admit("DescribeSecret"), Some(Fault::ServerError));
        assert_eq!(st.admit("DescribeSecret"), None);
        assert!(st.rules.is_empty());
        assert_eq!(st.counts["GetSecretValue"], 2);
        assert_eq!(st.total, 4);
    }

    #[test]
    fn operation_is_the_target_suffix() {
        let mut h = HeaderMap::new();
        assert_eq!(operation(&h), "");
        h.insert(
            "x-amz-target",
            HeaderValue::from_static("secretsmanager.GetSecretValue"),
        );
        assert_eq!(operation(&h), "GetSecretValue");
    }
}
