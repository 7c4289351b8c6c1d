//! `sm::FaultProxy` in front of a tiny echo upstream (no Secrets Manager emulator needed):
//! forwarding is faithful, injected faults answer the chosen operations N times, counts are
//! right, an outage closes connections without a response, and dropping the proxy stops it.

// Helpers outside `#[test]` functions unwrap too; a panic is a test failure here.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kseal_testkit::sm::{self, Fault, FaultProxy};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(10);

/// An upstream on 127.0.0.1 that answers 201 with what it received, as JSON, and counts hits.
struct Upstream {
    url: String,
    hits: Arc<AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self._task.abort();
    }
}

async fn echo(
    hits: Arc<AtomicUsize>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    hits.fetch_add(1, Ordering::SeqCst);
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let echoed = json!({
        "method": method.as_str(),
        "uri": uri.to_string(),
        "headers": headers,
        "body": body.to_vec(),
    });
    Response::builder()
        .status(StatusCode::CREATED)
        .header("content-type", "application/x-amz-json-1.1")
        .header("x-upstream", "echo")
        .body(Body::from(echoed.to_string()))
        .unwrap()
}

async fn upstream() -> Upstream {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let router = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            echo(h.clone(), method, uri, headers, body)
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Upstream {
        url,
        hits,
        _task: task,
    }
}

fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A Secrets Manager-style request for `operation`.
fn sm_request(base: &str, operation: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri(format!("{base}/"))
        .header("content-type", "application/x-amz-json-1.1")
        .header("x-amz-target", format!("secretsmanager.{operation}"))
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/secretsmanager/aws4_request, \
             SignedHeaders=host;x-amz-date;x-amz-target, Signature=0123abcd",
        )
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// Sends a request; `Err` when the connection failed without a response.
async fn send(
    client: &Client<HttpConnector, Body>,
    req: Request<Body>,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let resp = tokio::time::timeout(DEADLINE, client.request(req))
        .await
        .expect("an answer in time")
        .map_err(|e| format!("{e:?}"))?;
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(Body::new(body), usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    Ok((parts.status, parts.headers, body))
}

fn header<'a>(echoed: &'a Value, name: &str) -> Vec<&'a str> {
    echoed["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0] == name)
        .map(|h| h[1].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn forwarding_preserves_method_path_headers_and_body() {
    let up = upstream().await;
    let proxy = FaultProxy::start(&up.url).await;
    let client = client();
    // Not valid UTF-8, with a newline and a NUL: the bytes must arrive unchanged.
    let body: Vec<u8> = vec![b'{', 0, 0xff, b'\n', 0xc3, b'}'];
    let req = Request::builder()
        .method(Method::PUT)
        .uri(format!("{}/some/path?a=1&b=%2F", proxy.url()))
        .header("host", "secretsmanager.us-east-1.amazonaws.com")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=testing/x, Signature=ab",
        )
        .header("x-amz-target", "secretsmanager.PutSecretValue")
        .header("x-amz-date", "20260101T000000Z")
        .header("x-custom", "one")
        .header("x-custom", "two")
        .body(Body::from(body.clone()))
        .unwrap();
    let (status, headers, resp_body) = send(&client, req).await.unwrap();

    assert_eq!(
        status,
        StatusCode::CREATED,
        "the upstream's status is passed back"
    );
    assert_eq!(headers["x-upstream"], "echo");
    assert_eq!(headers["content-type"], "application/x-amz-json-1.1");
    let echoed: Value = serde_json::from_slice(&resp_body).unwrap();
    assert_eq!(echoed["method"], "PUT");
    assert_eq!(echoed["uri"], "/some/path?a=1&b=%2F");
    assert_eq!(echoed["body"], json!(body));
    assert_eq!(
        header(&echoed, "host"),
        ["secretsmanager.us-east-1.amazonaws.com"]
    );
    assert_eq!(
        header(&echoed, "authorization"),
        ["AWS4-HMAC-SHA256 Credential=testing/x, Signature=ab"]
    );
    assert_eq!(
        header(&echoed, "x-amz-target"),
        ["secretsmanager.PutSecretValue"]
    );
    assert_eq!(header(&echoed, "x-amz-date"), ["20260101T000000Z"]);
    assert_eq!(header(&echoed, "x-custom"), ["one", "two"]);
    assert_eq!(header(&echoed, "content-length"), ["6"]);
    assert_eq!(up.hits.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.count("PutSecretValue"), 1);
}

#[tokio::test]
async fn throttle_answers_n_times_then_forwards() {
    let up = upstream().await;
    let proxy = FaultProxy::start(&up.url).await;
    let client = client();
    proxy.inject("GetSecretValue", Fault::Throttle, 2);

    for _ in 0..2 {
        let (status, headers, body) = send(
            &client,
            sm_request(&proxy.url(), "GetSecretValue", r#"{"SecretId":"s"}"#),
        )
        .await
        .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(headers["content-type"], "application/x-amz-json-1.1");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"__type": "ThrottlingException", "message": "Rate exceeded"})
        );
        // Other operations are not affected meanwhile.
        let (status, _, _) = send(&client, sm_request(&proxy.url(), "DescribeSecret", "{}"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::CREATED);
    }
    let (status, _, body) = send(
        &client,
        sm_request(&proxy.url(), "GetSecretValue", r#"{"SecretId":"s"}"#),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::CREATED, "forwarded after two throttles");
    let echoed: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(echoed["body"], json!(br#"{"SecretId":"s"}"#.to_vec()));

    assert_eq!(
        proxy.count("GetSecretValue"),
        3,
        "faulted requests count too"
    );
    assert_eq!(proxy.count("DescribeSecret"), 2);
    assert_eq!(proxy.count("ListSecrets"), 0);
    assert_eq!(proxy.count("*"), 5);
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        3,
        "throttled requests never reach upstream"
    );

    proxy.reset_counts();
    assert_eq!(proxy.count("GetSecretValue"), 0);
    assert_eq!(proxy.count("*"), 0);
}

#[tokio::test]
async fn server_error_access_denied_and_wildcard_rules() {
    let up = upstream().await;
    let proxy = FaultProxy::start(&up.url).await;
    let client = client();
    proxy.inject("DescribeSecret", Fault::AccessDenied, 1);
    proxy.inject("*", Fault::ServerError, 2);
    proxy.inject("ListSecrets", Fault::Throttle, 0); // adds nothing

    let (status, _, body) = send(&client, sm_request(&proxy.url(), "DescribeSecret", "{}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["__type"], "AccessDeniedException");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("secretsmanager:DescribeSecret")
    );

    for op in ["ListSecrets", "GetSecretValue"] {
        let (status, headers, body) = send(&client, sm_request(&proxy.url(), op, "{}"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{op}");
        assert_eq!(headers["content-type"], "application/x-amz-json-1.1");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"__type": "InternalServiceError", "message": "injected"})
        );
    }
    let (status, _, _) = send(&client, sm_request(&proxy.url(), "ListSecrets", "{}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(up.hits.load(Ordering::SeqCst), 1);

    proxy.inject("ListSecrets", Fault::Throttle, 5);
    proxy.clear_faults();
    let (status, _, _) = send(&client, sm_request(&proxy.url(), "ListSecrets", "{}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "cleared rules do not apply");
}

#[tokio::test]
async fn down_fault_closes_the_connection_without_a_response() {
    let up = upstream().await;
    let proxy = FaultProxy::start(&up.url).await;
    let client = client();
    proxy.inject("GetSecretValue", Fault::Down, 1);
    let err = send(&client, sm_request(&proxy.url(), "GetSecretValue", "{}"))
        .await
        .unwrap_err();
    assert!(
        err.contains("IncompleteMessage") || err.contains("connection closed"),
        "{err}"
    );
    let (status, _, _) = send(&client, sm_request(&proxy.url(), "GetSecretValue", "{}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(proxy.count("GetSecretValue"), 2);
    assert_eq!(up.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn set_down_fails_every_request_until_turned_back() {
    let up = upstream().await;
    let proxy = FaultProxy::start(&up.url).await;
    let client = client();
    // A keep-alive connection exists before the outage: it must fail too.
    let (status, _, _) = send(&client, sm_request(&proxy.url(), "ListSecrets", "{}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);

    proxy.inject("GetSecretValue", Fault::Throttle, 1);
    proxy.set_down(true);
    for op in ["GetSecretValue", "DescribeSecret", "ListSecrets"] {
        let r = send(&client, sm_request(&proxy.url(), op, "{}")).await;
        assert!(r.is_err(), "{op} while down: {r:?}");
    }
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        1,
        "nothing reached upstream"
    );
    assert_eq!(proxy.count("*"), 4);

    proxy.set_down(false);
    let (status, _, _) = send(&client, sm_request(&proxy.url(), "GetSecretValue", "{}"))
        .await
        .unwrap();
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the throttle waited for the outage to end"
    );
    let (status, _, _) = send(&client, sm_request(&proxy.url(), "GetSecretValue", "{}"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn unreachable_upstream_closes_the_connection() {
    // A port nobody listens on: bind, note it, close.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let proxy = FaultProxy::start(&dead).await;
    let r = send(&client(), sm_request(&proxy.url(), "ListSecrets", "{}")).await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(proxy.count("ListSecrets"), 1);
}

#[tokio::test]
async fn dropping_the_proxy_stops_it() {
    let up = upstream().await;
    let proxy = FaultProxy::start(&up.url).await;
    let addr = proxy.addr();
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
    drop(proxy);
    let end = tokio::time::Instant::now() + DEADLINE;
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < end,
            "still listening after drop"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn unique_prefixes_differ_and_are_valid_secret_names() {
    let a = sm::unique_prefix("ring::rotation test");
    let b = sm::unique_prefix("ring::rotation test");
    assert_ne!(a, b);
    let rest = a.strip_prefix("kseal-test/ring--rotation-test-").unwrap();
    assert_eq!(rest.len(), 16);
    assert!(rest.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(
        a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+=.@-".contains(c))
    );
}

/// Against the emulator (when `KSEAL_TEST_SM_ENDPOINT` is set; skipped otherwise, required
/// under `CI=true`): raw Secrets Manager JSON calls through the proxy reach moto, which picks
/// the service from the `Authorization` header's credential scope.
#[tokio::test]
async fn forwards_secrets_manager_calls_to_the_emulator() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let proxy = FaultProxy::start(&endpoint).await;
    let client = client();
    let name = format!(
        "{}/secret",
        sm::unique_prefix("forwards_secrets_manager_calls_to_the_emulator")
    );

    let create = json!({"Name": name, "SecretString": "v1"}).to_string();
    let (status, _, body) = send(&client, sm_request(&proxy.url(), "CreateSecret", &create))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let created: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(created["Name"], name.as_str());

    proxy.inject("GetSecretValue", Fault::Throttle, 1);
    let get = json!({"SecretId": name, "VersionStage": "AWSCURRENT"}).to_string();
    let (status, _, body) = send(&client, sm_request(&proxy.url(), "GetSecretValue", &get))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["__type"],
        "ThrottlingException"
    );
    let (status, _, body) = send(&client, sm_request(&proxy.url(), "GetSecretValue", &get))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let got: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(got["SecretString"], "v1");
    assert_eq!(got["VersionId"], created["VersionId"]);

    let missing = json!({"SecretId": format!("{name}-missing")}).to_string();
    let (status, _, body) = send(
        &client,
        sm_request(&proxy.url(), "DescribeSecret", &missing),
    )
    .await
    .unwrap();
    // moto answers 404 here where Secrets Manager answers 400: check the error code only.
    assert!(status.is_client_error(), "{status}");
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["__type"],
        "ResourceNotFoundException"
    );
    assert_eq!(proxy.count("GetSecretValue"), 2);
    assert_eq!(proxy.count("*"), 4);
}
