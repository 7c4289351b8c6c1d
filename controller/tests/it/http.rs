//! The API and metrics routers, in-process (`tower::ServiceExt::oneshot`), plus one run
//! over real sockets with graceful shutdown.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use http::{Request, Response, StatusCode, header};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kseal_api::constants::{CLUSTER_WIDE_ANNOTATION, SEALING_KEY_ANNOTATION};
use kseal_api::{SealOptions, SealedSecret, seal_secret};
use kseal_controller::State;
use kseal_controller::net::TrustedProxies;
use kseal_controller::serve::http::{ApiOptions, api_router, metrics_router, serve_listeners};
use kseal_keys::{CertificateOptions, KeyPair, KeyRing, KeySize, Scope};
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// Two 2048-bit keys, generated once per test binary. Test-only: 2048 bits keeps the suite
/// fast; do not copy into production code. `.0` is older than `.1`.
fn keys() -> &'static (KeyPair, KeyPair) {
    static KEYS: OnceLock<(KeyPair, KeyPair)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let generate = |secs: u64| {
            KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default())
                .expect("keygen")
                .with_order_time(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        };
        (generate(1_000_000), generate(2_000_000))
    })
}

fn old_key() -> &'static KeyPair {
    &keys().0
}

fn new_key() -> &'static KeyPair {
    &keys().1
}

fn ring_of(pairs: &[&KeyPair]) -> KeyRing {
    pairs.iter().map(|p| (*p).clone()).collect()
}

fn state_with(ring: KeyRing) -> State {
    let state = State::new();
    state.keys.replace(ring);
    state
}

fn generous() -> ApiOptions {
    ApiOptions {
        rate_limit: 1000.0,
        rate_limit_burst: 1000,
        ..ApiOptions::default()
    }
}

fn router(state: &State) -> axum::Router {
    api_router(state.clone(), generous())
}

/// A Secret `ns/name` with two items, sealed for `key`; `annotations` go on the Secret
/// (so they select the scope and travel into the template).
fn sealed_for(key: &KeyPair, annotations: &[(&str, &str)]) -> SealedSecret {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("db".into()),
            namespace: Some("prod".into()),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
            labels: Some(BTreeMap::from([("app".to_owned(), "db".to_owned())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("password".to_owned(), ByteString(b"hunter2".to_vec())),
            ("user".to_owned(), ByteString(b"admin".to_vec())),
        ])),
        ..Secret::default()
    };
    seal_secret(&secret, key.public_key(), &SealOptions::default()).expect("sealing")
}

fn to_json(sealed: &SealedSecret) -> Value {
    serde_json::to_value(sealed).expect("serializing")
}

async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: impl Into<Body>,
) -> Response<Body> {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(body.into())
        .expect("request");
    app.clone().oneshot(request).await.expect("infallible")
}

async fn post_json(app: &axum::Router, uri: &str, body: &Value) -> (StatusCode, String) {
    let response = send(app, "POST", uri, body.to_string()).await;
    let status = response.status();
    (status, body_text(response).await)
}

async fn body_text(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    String::from_utf8(bytes.to_vec()).expect("utf-8 body")
}

/// Opens every `encryptedData` item of `sealed` with `ring` under `label_scope`, returning
/// the plaintexts, or `None` if any item fails.
fn open_all(sealed: &Value, ring: &KeyRing, scope: Scope) -> Option<BTreeMap<String, Vec<u8>>> {
    let label = scope.label("prod", "db");
    let items = sealed["spec"]["encryptedData"].as_object()?;
    items
        .iter()
        .map(|(k, v)| {
            let opened = ring.open_base64(&label, v.as_str()?, None).ok()?;
            Some((k.clone(), opened.plaintext.expose().to_vec()))
        })
        .collect()
}

#[tokio::test]
async fn healthz_answers_ok_like_bitnami() {
    let app = router(&State::new());
    let response = send(&app, "GET", "/healthz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "ok\n");
}

#[tokio::test]
async fn readyz_reports_what_is_missing_until_ready() {
    let state = State::new();
    let app = router(&state);
    let response = send(&app, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let text = body_text(response).await;
    assert!(
        text.contains("no keys loaded") && text.contains("caches not synced"),
        "{text}"
    );

    state.readiness.keys_loaded.store(true, Ordering::Release);
    let response = send(&app, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body_text(response).await, "not ready: caches not synced\n");

    state.readiness.caches_synced.store(true, Ordering::Release);
    let response = send(&app, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "ok\n");
}

/// What Secrets Manager answers a denied `GetSecretValue`: the caller's account and role.
const AWS_DENIAL: &str = "access denied: GetSecretValue on kseal/fleet/index: service error: AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/kseal-controller/i-0abc is not authorized to perform: secretsmanager:GetSecretValue on resource: arn:aws:secretsmanager:eu-west-1:123456789012:secret:kseal/fleet/index-AbCdEf because no identity-based policy allows the secretsmanager:GetSecretValue action";

#[tokio::test]
async fn readyz_names_a_key_source_denial_by_its_class_and_only_the_metrics_port_by_its_arns() {
    let state = State::new();
    state.readiness.keys_loaded.store(true, Ordering::Release);
    state.readiness.caches_synced.store(true, Ordering::Release);
    state.readiness.key_source_configured();
    state
        .readiness
        .key_source_failed("access_denied", AWS_DENIAL);
    let api = router(&state);
    let metrics = metrics_router(state.clone());

    let response = send(&api, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body_text(response).await,
        "not ready: key source not read yet (access denied)\n"
    );

    let response = send(&metrics, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let text = body_text(response).await;
    assert_eq!(
        text,
        format!(
            "not ready: key source not read yet (access denied): access_denied: {AWS_DENIAL}\n"
        )
    );
    assert!(text.contains("arn:aws:sts::123456789012:assumed-role/kseal-controller"));

    // Ready through a mirror while the store still denies: the API port says ok, the metrics
    // port adds the last failure.
    state.readiness.key_source_mirror_found();
    let response = send(&api, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "ok\n");
    let response = send(&metrics, "GET", "/readyz", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = body_text(response).await;
    assert!(
        text.starts_with("ok\nkey source: last read failed: access_denied: "),
        "{text}"
    );
    assert!(text.contains("123456789012"), "{text}");
}

#[tokio::test]
async fn readyz_classes_every_key_source_reason() {
    for (reason, class) in [
        ("access_denied", "access denied"),
        ("no_credentials", "no credentials"),
        ("not_found", "not found"),
        ("network", "unreachable"),
        ("throttled", "unreachable"),
        ("service", "unreachable"),
        ("untrusted", "untrusted"),
        ("malformed", "malformed"),
        ("bad_key", "malformed"),
        ("conflict", "other"),
        ("kube", "other"),
        ("io", "other"),
    ] {
        let state = State::new();
        state.readiness.keys_loaded.store(true, Ordering::Release);
        state.readiness.caches_synced.store(true, Ordering::Release);
        state.readiness.key_source_configured();
        state
            .readiness
            .key_source_failed(reason, "detail arn:aws:iam::123456789012:role/x");
        let response = send(&router(&state), "GET", "/readyz", Body::empty()).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body_text(response).await,
            format!("not ready: key source not read yet ({class})\n"),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn cert_pem_is_the_sealing_certificate_or_503_without_keys() {
    let empty = router(&State::new());
    let response = send(&empty, "GET", "/v1/cert.pem", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(body_text(response).await.contains("no sealing key"));

    let app = router(&state_with(ring_of(&[old_key(), new_key()])));
    let response = send(&app, "GET", "/v1/cert.pem", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/x-pem-file"
    );
    let pem = body_text(response).await;
    assert_eq!(pem, new_key().certificate().to_pem());
    assert!(!pem.contains("PRIVATE KEY"));

    let response = send(&app, "GET", "/v1/certs", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let listing: Value = serde_json::from_str(&body_text(response).await).expect("json");
    assert_eq!(listing["sealingKey"], new_key().id().to_string());
    let certs = listing["certificates"].as_array().expect("array");
    assert_eq!(certs.len(), 2);
    assert_eq!(certs[0]["fingerprint"], new_key().id().to_string());
    assert_eq!(certs[0]["sealing"], true);
    assert_eq!(certs[1]["fingerprint"], old_key().id().to_string());
    assert_eq!(certs[1]["sealing"], false);
    assert!(!listing.to_string().contains("PRIVATE"));
}

#[tokio::test]
async fn verify_accepts_json_and_yaml_that_decrypt() {
    let state = state_with(ring_of(&[old_key(), new_key()]));
    let app = router(&state);
    let sealed = sealed_for(old_key(), &[]);
    let (status, text) = post_json(&app, "/v1/verify", &to_json(&sealed)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(!text.contains("hunter2"));

    let yaml = serde_saphyr::to_string(&sealed).expect("yaml");
    let response = send(&app, "POST", "/v1/verify", yaml).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        state
            .metrics
            .encode()
            .contains("kseal_rsa_operations_total")
    );
}

#[tokio::test]
async fn verify_rejects_bad_input_with_clear_errors() {
    let app = router(&state_with(ring_of(&[new_key()])));
    let sealed = to_json(&sealed_for(new_key(), &[]));
    let yaml = serde_saphyr::to_string(&sealed).expect("yaml");

    let response = send(&app, "POST", "/v1/verify", format!("{yaml}---\n{yaml}")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(response).await.contains("multi-document"));

    let response = send(&app, "POST", "/v1/verify", "").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(response).await.contains("empty request body"));

    let response = send(&app, "POST", "/v1/verify", "{not json").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(body_text(response).await.starts_with("invalid JSON"));

    let mut secret = sealed.clone();
    secret["kind"] = json!("Secret");
    secret["apiVersion"] = json!("v1");
    let (status, text) = post_json(&app, "/v1/verify", &secret).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        text.contains("expected apiVersion bitnami.com/v1alpha1, kind SealedSecret"),
        "{text}"
    );

    let mut no_name = sealed.clone();
    no_name["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("name");
    let (status, text) = post_json(&app, "/v1/verify", &no_name).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("no metadata.name"), "{text}");

    let huge = vec![b' '; 2 * 1024 * 1024];
    let response = send(&app, "POST", "/v1/verify", huge).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    let response = send(&app, "GET", "/v1/verify", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn verify_and_rotate_refuse_yaml_bombs_with_400() {
    let app = router(&state_with(ring_of(&[new_key()])));
    let head = "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: a}\n";
    let mut laughs =
        format!("{head}spec:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (previous, name) in ('a'..='h').zip('b'..='i') {
        let refs = vec![format!("*{previous}"); 9].join(", ");
        laughs.push_str(&format!("  {name}: &{name} [{refs}]\n"));
    }
    let mut anchors = format!("{head}spec:\n  encryptedData:\n");
    for i in 0.. {
        if anchors.len() > 1000 * 1024 {
            break;
        }
        anchors.push_str(&format!("    k{i}: &a{i} AgB\n"));
    }
    let deep = format!("{head}spec: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    for (what, body, expected) in [
        ("billion laughs", laughs, "anchors and aliases"),
        ("a megabyte of anchors", anchors, "anchors and aliases"),
        ("deep nesting", deep, "line 4"),
    ] {
        for path in ["/v1/verify", "/v1/rotate"] {
            let response = send(&app, "POST", path, body.clone()).await;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}: {path}");
            let text = body_text(response).await;
            assert!(text.starts_with("invalid YAML: "), "{what}: {text}");
            assert!(text.contains(expected), "{what}: {text}");
        }
    }
}

#[tokio::test]
async fn verify_answers_409_when_an_item_does_not_decrypt() {
    let app = router(&state_with(ring_of(&[new_key()])));
    // Sealed with a key the ring does not have.
    let foreign = to_json(&sealed_for(old_key(), &[]));
    // By default the verify stops at the first failing item, and says so.
    let (status, text) = post_json(&app, "/v1/verify", &foreign).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        text.contains("`password`")
            && !text.contains("`user`")
            && text.contains("stopped at the first failure"),
        "{text}"
    );
    // `?all=true` names every failing item.
    let (status, text) = post_json(&app, "/v1/verify?all=true", &foreign).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        text.contains("`password`") && text.contains("`user`") && !text.contains("stopped"),
        "{text}"
    );
    // The label tried is named (public metadata: answers "renamed or moved?").
    assert!(text.contains(r#"(tried strict scope "prod/db")"#), "{text}");
    // A SealedSecret moved to another namespace: the answer says which label was tried.
    let mut moved = to_json(&sealed_for(new_key(), &[]));
    moved["metadata"]["namespace"] = json!("staging");
    let (status, text) = post_json(&app, "/v1/verify", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        text.contains(r#"(tried strict scope "staging/db")"#),
        "{text}"
    );

    // An item swapped in from elsewhere, or garbage.
    let mut tampered = to_json(&sealed_for(new_key(), &[]));
    tampered["spec"]["encryptedData"]["user"] = json!("bm90IGEgc2VhbGVkIHZhbHVl");
    let (status, text) = post_json(&app, "/v1/verify", &tampered).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(text.contains("`user`"), "{text}");
}

#[tokio::test]
async fn verify_result_does_not_depend_on_template_data() {
    let app = router(&state_with(ring_of(&[new_key()])));
    let good = to_json(&sealed_for(new_key(), &[]));
    let foreign = to_json(&sealed_for(old_key(), &[]));
    let mut bad = good.clone();
    bad["spec"]["encryptedData"]["user"] = foreign["spec"]["encryptedData"]["user"].clone();
    // Crafted templates an attacker would use to learn about the plaintext if they were
    // rendered: failing or succeeding depending on the value.
    let templates = [
        json!(null),
        json!({}),
        json!({"probe": "{{ if eq .password \"hunter2\" }}{{ else }}{{ fail \"no\" }}{{ end }}"}),
        json!({"probe": "{{ if eq .password \"guess\" }}{{ else }}{{ fail \"no\" }}{{ end }}"}),
        json!({"probe": "{{ index . \"missing\" | required \"x\" }}", "password": null}),
        json!({"probe": "{{ unclosed"}),
    ];
    for template in templates {
        for (object, expected) in [(&good, StatusCode::OK), (&bad, StatusCode::CONFLICT)] {
            let mut object = object.clone();
            object["spec"]["template"]["data"] = template.clone();
            let (status, text) = post_json(&app, "/v1/verify", &object).await;
            assert_eq!(status, expected, "template {template}: {text}");
            assert!(!text.contains("hunter2"));
        }
    }
}

#[tokio::test]
async fn verify_of_a_moved_or_renamed_strict_sealed_secret_conflicts() {
    let app = router(&state_with(ring_of(&[new_key()])));
    let sealed = to_json(&sealed_for(new_key(), &[]));
    let mut moved = sealed.clone();
    moved["metadata"]["namespace"] = json!("attacker");
    let (status, _) = post_json(&app, "/v1/verify", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let mut renamed = sealed.clone();
    renamed["metadata"]["name"] = json!("other");
    let (status, _) = post_json(&app, "/v1/verify", &renamed).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A cluster-wide annotation in the template does not widen the scope.
    let mut widened = moved.clone();
    widened["spec"]["template"]["metadata"]["annotations"] =
        json!({ CLUSTER_WIDE_ANNOTATION: "true" });
    widened["spec"]["template"]["metadata"]["namespace"] = json!("attacker");
    let (status, _) = post_json(&app, "/v1/verify", &widened).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Genuinely cluster-wide (top-level annotation, sealed with the empty label) moves freely.
    let mut cluster = to_json(&sealed_for(new_key(), &[(CLUSTER_WIDE_ANNOTATION, "true")]));
    cluster["metadata"]["namespace"] = json!("elsewhere");
    cluster["metadata"]["name"] = json!("renamed");
    let (status, text) = post_json(&app, "/v1/verify", &cluster).await;
    assert_eq!(status, StatusCode::OK, "{text}");
}

#[tokio::test]
async fn verify_checks_deprecated_data_blobs() {
    let app = router(&state_with(ring_of(&[new_key()])));
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                        "data": {"password": "aHVudGVyMg=="}});
    let blob = kseal_keys::seal_base64(
        new_key().public_key(),
        &Scope::Strict.label("prod", "db"),
        secret.to_string().as_bytes(),
    )
    .expect("seal");
    let v1 = json!({"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
                    "metadata": {"name": "db", "namespace": "prod"}, "spec": {"data": blob}});
    let (status, text) = post_json(&app, "/v1/verify", &v1).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let mut moved = v1.clone();
    moved["metadata"]["name"] = json!("other");
    let (status, _) = post_json(&app, "/v1/verify", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let strict = api_router(
        state_with(ring_of(&[new_key()])),
        ApiOptions {
            accept_deprecated_v1_data: false,
            ..generous()
        },
    );
    let (status, text) = post_json(&strict, "/v1/verify", &v1).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(text.contains("not accepted"), "{text}");
}

#[tokio::test]
async fn verify_without_keys_is_503() {
    let app = router(&State::new());
    let (status, text) = post_json(&app, "/v1/verify", &to_json(&sealed_for(new_key(), &[]))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
}

#[tokio::test]
async fn rotate_reseals_with_the_newest_key_and_keeps_the_template() {
    let app = router(&state_with(ring_of(&[old_key(), new_key()])));
    let mut input = to_json(&sealed_for(old_key(), &[]));
    let template_data = json!({
        "config.json": "{\"password\": {{ toJson .password }}}",
        "dsn": "postgres://{{ .user }}:{{ .password }}@db",
        "dropped": null,
    });
    input["spec"]["template"]["data"] = template_data.clone();
    input["spec"]["template"]["metadata"]["x-unknown-field"] = json!({"kept": [1, 2]});
    input["status"] = json!({"observedGeneration": 3});
    let before = input.clone();

    let (status, text) = post_json(&app, "/v1/rotate", &input).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(!text.contains("hunter2") && !text.contains("admin\""));
    let output: Value = serde_json::from_str(&text).expect("json");

    // Opens with the new key only, to the same values.
    let plain = open_all(&output, &ring_of(&[new_key()]), Scope::Strict).expect("opens with new");
    assert_eq!(plain["password"], b"hunter2");
    assert_eq!(plain["user"], b"admin");
    assert!(open_all(&output, &ring_of(&[old_key()]), Scope::Strict).is_none());
    // The input was sealed with the old key only.
    assert!(open_all(&before, &ring_of(&[new_key()]), Scope::Strict).is_none());

    // The template is untouched, byte for byte.
    assert_eq!(output["spec"]["template"], before["spec"]["template"]);
    assert_eq!(
        serde_json::to_string(&output["spec"]["template"]["data"]).expect("json"),
        serde_json::to_string(&template_data).expect("json")
    );
    assert_eq!(
        output["metadata"]["annotations"][SEALING_KEY_ANNOTATION],
        new_key().id().to_string()
    );
    assert_eq!(output["metadata"]["name"], "db");
    assert_eq!(output["metadata"]["namespace"], "prod");
    assert!(output.get("status").is_none());

    // And the result verifies.
    let (status, _) = post_json(&app, "/v1/verify", &output).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn rotate_never_widens_the_scope_from_the_template() {
    let app = router(&state_with(ring_of(&[old_key(), new_key()])));
    let mut input = to_json(&sealed_for(old_key(), &[]));
    // The template claims cluster-wide; the top level (what the label was bound to) is strict.
    input["spec"]["template"]["metadata"]["annotations"] =
        json!({ CLUSTER_WIDE_ANNOTATION: "true" });
    let (status, text) = post_json(&app, "/v1/rotate", &input).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let output: Value = serde_json::from_str(&text).expect("json");
    let new_only = ring_of(&[new_key()]);
    assert!(open_all(&output, &new_only, Scope::Strict).is_some());
    assert!(open_all(&output, &new_only, Scope::Cluster).is_none());
    assert!(open_all(&output, &new_only, Scope::Namespace).is_none());
    assert_eq!(
        output["metadata"]["annotations"].get(CLUSTER_WIDE_ANNOTATION),
        None
    );
    assert_eq!(
        output["spec"]["template"]["metadata"]["annotations"][CLUSTER_WIDE_ANNOTATION],
        "true"
    );

    // Moving it while claiming cluster-wide in the template does not open either.
    let mut moved = input.clone();
    moved["metadata"]["namespace"] = json!("attacker");
    let (status, _) = post_json(&app, "/v1/rotate", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn rotate_conflicts_or_rejects_when_it_cannot_reseal() {
    let app = router(&state_with(ring_of(&[new_key()])));
    let (status, text) = post_json(&app, "/v1/rotate", &to_json(&sealed_for(old_key(), &[]))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    let response = send(&app, "POST", "/v1/rotate", "- just\n- a list\n").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn rotate_reseals_deprecated_data_in_place() {
    let app = router(&state_with(ring_of(&[old_key(), new_key()])));
    let label = Scope::Strict.label("prod", "db");
    let blob = kseal_keys::seal_base64(old_key().public_key(), &label, b"{\"kind\":\"Secret\"}")
        .expect("seal");
    let v1 = json!({"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
                    "metadata": {"name": "db", "namespace": "prod"}, "spec": {"data": blob}});
    let (status, text) = post_json(&app, "/v1/rotate", &v1).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let output: Value = serde_json::from_str(&text).expect("json");
    let resealed = output["spec"]["data"].as_str().expect("data");
    let opened = ring_of(&[new_key()])
        .open_base64(&label, resealed, None)
        .expect("opens with the new key");
    assert_eq!(opened.plaintext.expose(), b"{\"kind\":\"Secret\"}");
}

#[tokio::test]
async fn verify_and_rotate_are_rate_limited_per_client() {
    let state = state_with(ring_of(&[new_key()]));
    let app = api_router(
        state.clone(),
        ApiOptions {
            rate_limit: 0.01,
            rate_limit_burst: 2,
            ..ApiOptions::default()
        },
    );
    let body = to_json(&sealed_for(new_key(), &[])).to_string();
    // Each client's own connection: the peer address is the client.
    let from = |client: &str, path: &str| post_from(&format!("{client}:40000"), None, path, &body);
    for _ in 0..2 {
        let response = app
            .clone()
            .oneshot(from("10.1.1.1", "/v1/verify"))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = app
        .clone()
        .oneshot(from("10.1.1.1", "/v1/verify"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = response.headers()[header::RETRY_AFTER]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    // A forwarding header the client sends itself does not escape the limit.
    let response = app
        .clone()
        .oneshot(post_from(
            "10.1.1.1:40001",
            Some("10.2.2.2"),
            "/v1/verify",
            &body,
        ))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    // Other clients and the other path have their own buckets.
    let response = app
        .clone()
        .oneshot(from("10.2.2.2", "/v1/verify"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    let response = app
        .clone()
        .oneshot(from("10.1.1.1", "/v1/rotate"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    // Certificates and health are not limited.
    for _ in 0..5 {
        let response = send(&app, "GET", "/v1/cert.pem", Body::empty()).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let metrics = state.metrics.encode();
    assert!(
        metrics.contains(
            "sealed_secrets_controller_http_requests_total{path=\"/v1/verify\",code=\"429\",method=\"POST\"} 2"
        ),
        "{metrics}"
    );
}

/// A POST from the peer `peer` (as the server's connection info gives it), with an
/// `X-Forwarded-For` header when `forwarded` is set.
fn post_from(peer: &str, forwarded: Option<&str>, path: &str, body: &str) -> Request<Body> {
    let peer: std::net::SocketAddr = peer.parse().expect("socket address");
    let mut request = Request::builder()
        .method("POST")
        .uri(path)
        .extension(axum::extract::ConnectInfo(peer));
    if let Some(forwarded) = forwarded {
        request = request.header("x-forwarded-for", forwarded);
    }
    request.body(Body::from(body.to_owned())).expect("request")
}

/// Sends `requests` in order and returns their status codes.
async fn statuses(app: &axum::Router, requests: Vec<Request<Body>>) -> Vec<u16> {
    let mut out = Vec::new();
    for request in requests {
        let response = app.clone().oneshot(request).await.expect("ok");
        out.push(response.status().as_u16());
    }
    out
}

fn limited(burst: u32, trusted: &[&str]) -> ApiOptions {
    ApiOptions {
        rate_limit: 0.01,
        rate_limit_burst: burst,
        trusted_proxies: TrustedProxies::parse(&trusted.join(",")).expect("valid CIDRs"),
        ..ApiOptions::default()
    }
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_counts_against_the_peer() {
    let body = to_json(&sealed_for(new_key(), &[])).to_string();
    // Default: no proxy is trusted, whatever the header says.
    let app = api_router(state_with(ring_of(&[new_key()])), limited(2, &[]));
    let spoofed = [
        "203.0.113.1",
        "203.0.113.2",
        "203.0.113.3, 198.51.100.9",
        "::1",
    ];
    let requests = spoofed
        .iter()
        .map(|xff| post_from("192.0.2.10:50000", Some(xff), "/v1/verify", &body))
        .collect();
    assert_eq!(statuses(&app, requests).await, [200, 200, 429, 429]);
    // The same peer as an IPv4-mapped IPv6 address is the same client.
    let mapped = post_from("[::ffff:192.0.2.10]:50001", None, "/v1/verify", &body);
    assert_eq!(statuses(&app, vec![mapped]).await, [429]);
    // Another peer has its own bucket.
    let other = post_from("192.0.2.11:50000", Some("203.0.113.1"), "/v1/verify", &body);
    assert_eq!(statuses(&app, vec![other]).await, [200]);

    // Trusting some proxies does not make other peers' headers believed.
    let app = api_router(
        state_with(ring_of(&[new_key()])),
        limited(1, &["10.0.0.0/8"]),
    );
    let requests = ["203.0.113.1", "203.0.113.2"]
        .iter()
        .map(|xff| post_from("192.0.2.10:50000", Some(xff), "/v1/verify", &body))
        .collect();
    assert_eq!(statuses(&app, requests).await, [200, 429]);
    // Without connection info the peer is unknown: headers are not believed either.
    let app = api_router(
        state_with(ring_of(&[new_key()])),
        limited(1, &["0.0.0.0/0"]),
    );
    let requests = ["203.0.113.1", "203.0.113.2"]
        .iter()
        .map(|xff| {
            Request::builder()
                .method("POST")
                .uri("/v1/verify")
                .header("x-forwarded-for", *xff)
                .body(Body::from(body.clone()))
                .expect("request")
        })
        .collect();
    assert_eq!(statuses(&app, requests).await, [200, 429]);
}

#[tokio::test]
async fn behind_trusted_proxies_each_forwarded_client_has_its_own_bucket() {
    let body = to_json(&sealed_for(new_key(), &[])).to_string();
    let app = api_router(
        state_with(ring_of(&[new_key()])),
        limited(1, &["10.0.0.0/8", "fd00::/8", "192.0.2.1"]),
    );
    let via = |peer: &str, xff: &str| post_from(peer, Some(xff), "/v1/verify", &body);
    // Distinct clients behind one proxy: distinct buckets; each is limited.
    assert_eq!(
        statuses(
            &app,
            vec![
                via("10.0.0.5:1000", "203.0.113.7"),
                via("10.0.0.5:1001", "203.0.113.8"),
                via("10.0.0.5:1002", "203.0.113.7"),
            ]
        )
        .await,
        [200, 200, 429]
    );
    // Chains: entries are walked from the right, skipping trusted proxies; what the client
    // put on the left is never reached.
    assert_eq!(
        statuses(
            &app,
            vec![
                via("10.0.0.5:1003", "198.51.100.1, 203.0.113.7, 10.9.9.9"),
                via("10.0.0.5:1004", "203.0.113.7,10.9.9.9, 10.0.0.6"),
                via("192.0.2.1:1005", "198.51.100.2, 203.0.113.7"),
            ]
        )
        .await,
        [429, 429, 429]
    );
    // Repeated headers are one list, in order.
    let two_headers = Request::builder()
        .method("POST")
        .uri("/v1/verify")
        .extension(axum::extract::ConnectInfo(
            "10.0.0.5:1006"
                .parse::<std::net::SocketAddr>()
                .expect("addr"),
        ))
        .header("x-forwarded-for", "198.51.100.3")
        .header("x-forwarded-for", "203.0.113.7")
        .body(Body::from(body.clone()))
        .expect("request");
    assert_eq!(statuses(&app, vec![two_headers]).await, [429]);
    // IPv6, an IPv4-mapped proxy address, ports and brackets.
    assert_eq!(
        statuses(
            &app,
            vec![
                via("[fd00::1]:1000", "2001:db8::1"),
                via("[fd00::2]:1000", "[2001:db8::1]:4711"),
                via("[::ffff:10.0.0.5]:1000", "203.0.113.9"),
                via("10.0.0.5:1000", "203.0.113.9:4711"),
            ]
        )
        .await,
        [200, 429, 200, 429]
    );
    // Only trusted proxies in the header: the leftmost one is the client. A malformed
    // entry stops the walk: the proxy that passed it on is the client.
    assert_eq!(
        statuses(
            &app,
            vec![
                via("10.0.0.5:1000", "10.3.3.3"),
                via("10.0.0.7:1000", "not-an-address, 10.3.3.3"),
                via("10.0.0.8:1000", "203.0.113.10, unknown"),
                via("10.0.0.8:1000", "203.0.113.11, unknown"),
            ]
        )
        .await,
        [200, 429, 200, 429]
    );
    // A trusted proxy without the header: the proxy itself.
    assert_eq!(
        statuses(
            &app,
            vec![
                post_from("10.0.0.9:1000", None, "/v1/verify", &body),
                post_from("10.0.0.9:1001", None, "/v1/verify", &body),
            ]
        )
        .await,
        [200, 429]
    );
}

#[test]
fn trusted_proxies_parse_cidrs_and_addresses_and_name_bad_items() {
    let t = TrustedProxies::parse(" 10.0.0.0/8, fd00::/8,192.0.2.1 ,,2001:db8::1").expect("ok");
    for ip in [
        "10.1.2.3",
        "fd00::5",
        "192.0.2.1",
        "2001:db8::1",
        "::ffff:10.0.0.1",
    ] {
        assert!(t.contains(ip.parse().expect("ip")), "{ip}");
    }
    for ip in ["11.0.0.1", "192.0.2.2", "2001:db8::2", "::ffff:192.0.2.2"] {
        assert!(!t.contains(ip.parse().expect("ip")), "{ip}");
    }
    assert!(TrustedProxies::parse("").expect("empty").is_empty());
    for bad in [
        "10.0.0.0/33",
        "10.0.0/8",
        "fd00::/129",
        "example.com",
        "10.0.0.0/8/1",
    ] {
        let e = TrustedProxies::parse(&format!("10.0.0.0/8,{bad}")).unwrap_err();
        assert!(e.starts_with(&format!("{bad:?}")), "{bad}: {e}");
    }
}

#[tokio::test]
async fn metrics_endpoint_exposes_bitnami_names_and_counts_requests() {
    let state = state_with(ring_of(&[new_key()]));
    let app = router(&state);
    for _ in 0..3 {
        send(&app, "GET", "/v1/cert.pem", Body::empty()).await;
    }
    let (status, _) = post_json(&app, "/v1/verify", &to_json(&sealed_for(new_key(), &[]))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post_json(&app, "/v1/verify", &to_json(&sealed_for(old_key(), &[]))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    send(&app, "GET", "/healthz", Body::empty()).await;

    let metrics = metrics_router(state.clone());
    let response = send(&metrics, "GET", "/metrics", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = body_text(response).await;
    for line in [
        "sealed_secrets_controller_build_info{revision=",
        "sealed_secrets_controller_http_requests_total{path=\"/v1/cert.pem\",code=\"200\",method=\"GET\"} 3",
        "sealed_secrets_controller_http_requests_total{path=\"/v1/verify\",code=\"200\",method=\"POST\"} 1",
        "sealed_secrets_controller_http_requests_total{path=\"/v1/verify\",code=\"409\",method=\"POST\"} 1",
        "sealed_secrets_controller_http_request_duration_seconds_count{path=\"/v1/verify\",method=\"POST\"} 2",
        "sealed_secrets_controller_unseal_requests_total",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    assert!(text.ends_with("\n# EOF\n") && text.matches("# EOF").count() == 1);
    // Health checks are not instrumented (as in Bitnami), and RSA work is counted.
    assert!(!text.contains("/healthz"));
    let rsa: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("kseal_rsa_operations_total "))
        .expect("rsa counter")
        .trim()
        .parse()
        .expect("number");
    // Two items opened by the one key; the old-key object tries the same key and fails,
    // with RSA work unless the public pre-check rules the key out (its RSA block not below
    // the key's modulus), so at least two.
    assert!(rsa >= 2, "{rsa}");
}

/// `count` objects in one namespace, `obj00000`, `obj00001`, ...: every one with a series.
struct ManyObjects {
    count: usize,
}

impl kseal_controller::metrics::ConditionSeries for ManyObjects {
    fn series_after(
        &self,
        after: Option<&kseal_controller::metrics::SeriesCursor>,
        max: usize,
        each: &mut dyn FnMut(&str, &str, &str, i64),
    ) -> Option<kseal_controller::metrics::SeriesCursor> {
        let start = after.map_or(0, |c| {
            c.name
                .trim_start_matches("obj")
                .parse::<usize>()
                .expect("own name")
                + 1
        });
        let end = (start + max).min(self.count);
        for i in start..end {
            each(
                "ns",
                &format!("obj{i:05}"),
                "app",
                if i % 2 == 0 { 1 } else { -1 },
            );
        }
        (end < self.count).then(|| kseal_controller::metrics::SeriesCursor {
            namespace: "ns".into(),
            name: format!("obj{:05}", end - 1).into(),
        })
    }
}

/// `/metrics` streams one series per SealedSecret a chunk at a time: every series once, in
/// one well-formed text that ends with `# EOF`.
#[tokio::test]
async fn metrics_endpoint_streams_every_condition_series_once() {
    let state = state_with(ring_of(&[new_key()]));
    let count = 5_000;
    state
        .metrics
        .condition_info
        .bind(std::sync::Arc::new(ManyObjects { count }));
    let metrics = metrics_router(state.clone());
    let response = send(&metrics, "GET", "/metrics", Body::empty()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = body_text(response).await;
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("sealed_secrets_controller_condition_info{"))
        .collect();
    assert_eq!(series.len(), count);
    assert_eq!(
        series[1],
        "sealed_secrets_controller_condition_info{namespace=\"ns\",name=\"obj00001\",condition=\"Synced\",ss_app_kubernetes_io_instance=\"app\"} -1"
    );
    let names: Vec<&str> = series
        .iter()
        .map(|l| {
            l.split("name=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .expect("name")
        })
        .collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "each once, in order");
    assert_eq!(
        text.matches("# TYPE sealed_secrets_controller_condition_info gauge\n")
            .count(),
        1
    );
    assert!(
        text.ends_with(" 1\n# EOF\n") || text.ends_with(" -1\n# EOF\n"),
        "{}",
        &text[text.len() - 200..]
    );
    assert!(text.contains("sealed_secrets_controller_build_info{revision="));
}

#[tokio::test]
async fn both_servers_serve_over_tcp_and_shut_down_gracefully() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let state = state_with(ring_of(&[new_key()]));
    let api = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let (api_addr, metrics_addr) = (
        api.local_addr().expect("addr"),
        metrics.local_addr().expect("addr"),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_listeners(api, metrics, state, generous(), async {
        let _ = stopped.await;
    }));
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: kseal\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut out = String::new();
        stream.read_to_string(&mut out).await.expect("read");
        out
    }
    let health = get(api_addr, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.ends_with("\r\n\r\nok\n"), "{health}");
    let cert = get(api_addr, "/v1/cert.pem").await;
    assert!(cert.contains("BEGIN CERTIFICATE"), "{cert}");
    let metrics = get(metrics_addr, "/metrics").await;
    assert!(metrics.contains("/v1/cert.pem"), "{metrics}");
    // The metrics server serves only /metrics, the API server not /metrics.
    assert!(get(api_addr, "/metrics").await.starts_with("HTTP/1.1 404"));

    stop.send(()).expect("server running");
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("servers stop after shutdown")
        .expect("task")
        .expect("serve ok");
}

async fn start_tcp(
    options: ApiOptions,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<kseal_controller::Result<()>>,
) {
    let state = state_with(ring_of(&[new_key()]));
    let api = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = api.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_listeners(api, metrics, state, options, async {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

/// Sends one raw HTTP/1.1 request and returns the whole response.
async fn raw_request(addr: std::net::SocketAddr, request: String) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_the_rate_limit_keys_on_the_peer_address() {
    let (addr, stop, server) = start_tcp(ApiOptions {
        rate_limit: 0.01,
        rate_limit_burst: 1,
        ..ApiOptions::default()
    })
    .await;
    let body = to_json(&sealed_for(new_key(), &[])).to_string();
    // A client that reaches the controller directly cannot pick its bucket with a forwarding
    // header: each request claims another address.
    let post = |forwarded: &str| {
        format!(
            "POST /v1/verify HTTP/1.1\r\nHost: kseal\r\nX-Forwarded-For: {forwarded}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let first = raw_request(addr, post("203.0.113.1")).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let second = raw_request(addr, post("203.0.113.2")).await;
    assert!(second.starts_with("HTTP/1.1 429"), "{second}");
    assert!(
        second.to_ascii_lowercase().contains("retry-after:"),
        "{second}"
    );
    stop.send(()).expect("running");
    server.await.expect("task").expect("serve ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_and_do_not_block_shutdown() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (addr, stop, server) = start_tcp(ApiOptions {
        idle_timeout: Duration::from_millis(300),
        ..generous()
    })
    .await;
    // One client never sends anything, one stops in the middle of the request line.
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /hea").await.expect("write");
    for stream in [&mut silent, &mut slow] {
        let mut buf = Vec::new();
        // EOF or a reset: either way the server hung up without the client doing anything.
        let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut buf))
            .await
            .expect("the server closes an idle connection");
    }
    // A stalled connection open at shutdown does not keep the server running.
    let _stalled = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stop.send(()).expect("running");
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("servers stop after shutdown")
        .expect("task")
        .expect("serve ok");
}

/// `kseal_rsa_operations_total` of `state`.
fn rsa_operations(state: &State) -> u64 {
    state
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("kseal_rsa_operations_total "))
        .expect("rsa counter")
        .trim()
        .parse()
        .expect("number")
}

/// `count` items `k0`, `k1`, … sealed for `key` into `prod/db`.
fn sealed_items(key: &KeyPair, count: usize) -> Value {
    let mut sealed = to_json(&sealed_for(key, &[]));
    let data = sealed["spec"]["encryptedData"]
        .as_object_mut()
        .expect("encryptedData");
    let one = data.values().next().expect("an item").clone();
    data.clear();
    // The same sealed value under every name: names are not part of the label.
    for i in 0..count {
        data.insert(format!("k{i:03}"), one.clone());
    }
    sealed
}

#[tokio::test]
async fn a_request_over_the_item_cap_is_refused_before_any_rsa_work() {
    let state = state_with(ring_of(&[new_key()]));
    let app = api_router(
        state.clone(),
        ApiOptions {
            max_request_items: 3,
            ..generous()
        },
    );
    for path in ["/v1/verify", "/v1/rotate"] {
        let (status, text) = post_json(&app, path, &sealed_items(new_key(), 4)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert!(
            text.contains("holds 4 sealed values")
                && text.contains("at most 3 per request (--max-request-items)"),
            "{text}"
        );
    }
    assert_eq!(rsa_operations(&state), 0);
    let (status, _) = post_json(&app, "/v1/verify", &sealed_items(new_key(), 3)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rsa_operations(&state), 3);
}

#[tokio::test]
async fn a_hint_naming_a_ring_key_is_the_only_key_tried() {
    let state = state_with(ring_of(&[old_key(), new_key()]));
    let app = router(&state);
    // Moved to another namespace: no key opens any item.
    let mut moved = to_json(&sealed_for(new_key(), &[]));
    moved["metadata"]["namespace"] = json!("staging");
    assert_eq!(
        moved["metadata"]["annotations"][SEALING_KEY_ANNOTATION],
        json!(new_key().id().to_string())
    );
    // The hint names a ring key: one RSA operation per item, and the verify stops at the
    // first failing item.
    let (status, _) = post_json(&app, "/v1/verify", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(rsa_operations(&state), 1);
    let (status, _) = post_json(&app, "/v1/verify?all=true", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(rsa_operations(&state), 1 + 2);
    // Without a hint every key is tried (Bitnami's values carry no key id).
    moved["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove(SEALING_KEY_ANNOTATION);
    let (status, _) = post_json(&app, "/v1/verify?all=true", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Two keys per item, less the old key where the item's RSA block is not below its
    // modulus (ruled out without RSA work).
    let old_key_tried: u64 = moved["spec"]["encryptedData"]
        .as_object()
        .expect("encryptedData")
        .values()
        .map(|v| {
            let bytes =
                kseal_keys::envelope::decode_base64(v.as_str().expect("a string")).expect("base64");
            u64::from(old_key().public_key().may_have_sealed(&bytes))
        })
        .sum();
    assert_eq!(rsa_operations(&state), 3 + 2 + old_key_tried);
}

#[tokio::test]
async fn rsa_work_is_charged_to_the_client_bucket() {
    let state = state_with(ring_of(&[new_key()]));
    let app = api_router(state, limited(2, &[]));
    let big = sealed_items(new_key(), 40).to_string();
    let small = to_json(&sealed_for(new_key(), &[])).to_string();
    // 40 RSA operations: three units, one more than the burst of two.
    let first = vec![post_from("192.0.2.20:1000", None, "/v1/verify", &big)];
    assert_eq!(statuses(&app, first).await, [200]);
    let response = app
        .clone()
        .oneshot(post_from("192.0.2.20:1001", None, "/v1/verify", &small))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = response.headers()[header::RETRY_AFTER]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    // Rate 0.01/s: the debt is about two units, 200 s.
    assert!((100..=300).contains(&retry), "{retry}");
    // Small requests (at most 16 operations) cost one unit each, as before.
    let requests = (0..3)
        .map(|i| post_from(&format!("192.0.2.21:{i}"), None, "/v1/verify", &small))
        .collect();
    assert_eq!(statuses(&app, requests).await, [200, 200, 429]);
}

#[tokio::test]
async fn a_full_http_share_of_the_rsa_pool_answers_503_with_retry_after_at_once() {
    let state = state_with(ring_of(&[new_key()]));
    let app = router(&state);
    let shape = state.rsa.shape();
    let held: Vec<_> = (0..shape.http_jobs)
        .map(|i| {
            let client = kseal_controller::net::Client::V4(std::net::Ipv4Addr::new(
                198,
                51,
                100,
                u8::try_from(i).expect("few"),
            ));
            state.rsa.admit_http(client).expect("admitted")
        })
        .collect();
    let response = send(
        &app,
        "POST",
        "/v1/verify",
        to_json(&sealed_for(new_key(), &[])).to_string(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    assert_eq!(rsa_operations(&state), 0);
    drop(held);
    let (status, _) = post_json(&app, "/v1/verify", &to_json(&sealed_for(new_key(), &[]))).await;
    assert_eq!(status, StatusCode::OK);
}

/// Two rings: `kseal/shared` (old key, unbound, seals by default) and `kseal/team-a` (new
/// key, bound to namespace team-a), as the key loader publishes them.
fn state_with_bound_rings() -> State {
    use kseal_controller::keys::binding::{BoundRing, Claims, LoadedKey, RingBinding};
    let state = State::new();
    state.add_rings(&["kseal/shared".to_owned(), "kseal/team-a".to_owned()]);
    let mut ring = ring_of(&[old_key(), new_key()]);
    ring.set_sealing_key(old_key().id());
    let rings: std::sync::Arc<[BoundRing]> = std::sync::Arc::from(vec![
        BoundRing {
            name: "kseal/shared".into(),
            binding: None,
            verified: true,
        },
        BoundRing {
            name: "kseal/team-a".into(),
            binding: Some(RingBinding {
                namespaces: ["team-a".to_owned()].into(),
                selector: None,
            }),
            verified: true,
        },
    ]);
    let claims = Claims::build(
        rings,
        [
            LoadedKey {
                id: old_key().id().clone(),
                listed_by: 0b01,
                mirror: true,
                named_rings: 1 << 0,
                names_other: false,
            },
            LoadedKey {
                id: new_key().id().clone(),
                listed_by: 0b10,
                mirror: true,
                named_rings: 1 << 1,
                names_other: false,
            },
        ],
        vec![Ok(old_key().id().clone()), Ok(new_key().id().clone())],
    );
    state.keys.replace_with(ring, Some(claims));
    state
}

/// A cluster-wide value of ring team-a, as `kseal seal --scope cluster-wide` writes it, in
/// namespace `namespace`, with or without its `kseal.dev/sealing-key` hint.
fn team_value(namespace: &str, hinted: bool) -> Value {
    let mut value = to_json(&sealed_for(new_key(), &[(CLUSTER_WIDE_ANNOTATION, "true")]));
    value["metadata"]["namespace"] = json!(namespace);
    let annotations = value["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations");
    if hinted {
        annotations.insert(
            SEALING_KEY_ANNOTATION.to_owned(),
            json!(new_key().id().to_string()),
        );
    } else {
        annotations.remove(SEALING_KEY_ANNOTATION);
    }
    value
}

#[tokio::test]
async fn a_bound_ring_opens_only_in_its_namespaces_and_rotate_keeps_values_in_their_ring() {
    let app = router(&state_with_bound_rings());
    // Outside team-a: refused, naming the binding (hinted: before any RSA operation).
    let (status, text) = post_json(&app, "/v1/verify", &team_value("prod", true)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert!(
        text.contains("of ring kseal/team-a (bound to namespaces team-a), which does not open in namespace prod"),
        "{text}"
    );
    let (status, text) = post_json(&app, "/v1/verify", &team_value("prod", false)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    for path in ["/v1/rotate"] {
        let (status, _) = post_json(&app, path, &team_value("prod", false)).await;
        assert_eq!(status, StatusCode::CONFLICT);
    }
    // Without a namespace (cluster-wide objects may lack one): the unbound rings only.
    let mut nowhere = team_value("prod", false);
    nowhere["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let (status, _) = post_json(&app, "/v1/verify", &nowhere).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // In team-a it opens; rotate re-seals it with team-a's key, not with the shared ring's
    // (which seals by default and opens everywhere): the request's namespace is the
    // caller's word, so a value must never leave its ring.
    let (status, text) = post_json(&app, "/v1/verify", &team_value("team-a", false)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, text) = post_json(&app, "/v1/rotate", &team_value("team-a", false)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let output: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        output["metadata"]["annotations"][SEALING_KEY_ANNOTATION],
        new_key().id().to_string()
    );
    let label = Scope::Cluster.label("", "");
    for value in output["spec"]["encryptedData"]
        .as_object()
        .unwrap()
        .values()
    {
        let value = value.as_str().unwrap();
        assert!(
            ring_of(&[new_key()])
                .open_base64(&label, value, None)
                .is_ok()
        );
        assert!(
            ring_of(&[old_key()])
                .open_base64(&label, value, None)
                .is_err()
        );
    }
    // The re-sealed value moved to another namespace is still refused there.
    let mut moved = output.clone();
    moved["metadata"]["namespace"] = json!("prod");
    let (status, _) = post_json(&app, "/v1/verify", &moved).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A shared-ring value opens everywhere and rotates with the shared ring's key.
    let mut shared = to_json(&sealed_for(old_key(), &[(CLUSTER_WIDE_ANNOTATION, "true")]));
    shared["metadata"]["namespace"] = json!("team-a");
    let (status, text) = post_json(&app, "/v1/rotate", &shared).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let output: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        output["metadata"]["annotations"][SEALING_KEY_ANNOTATION],
        old_key().id().to_string()
    );
}

#[tokio::test]
async fn each_ring_serves_its_certificate() {
    let app = router(&state_with_bound_rings());
    let get = |uri: &'static str| {
        let app = app.clone();
        async move {
            let response = send(&app, "GET", uri, Body::empty()).await;
            let status = response.status();
            (status, body_text(response).await)
        }
    };
    let pem = |k: &KeyPair| k.certificate().to_pem();
    assert_eq!(get("/v1/cert.pem").await, (StatusCode::OK, pem(old_key())));
    assert_eq!(
        get("/v1/cert.pem?ring=kseal%2Fteam-a").await,
        (StatusCode::OK, pem(new_key()))
    );
    assert_eq!(
        get("/v1/cert.pem?ring=kseal/shared").await,
        (StatusCode::OK, pem(old_key()))
    );
    let (status, text) = get("/v1/cert.pem?ring=kseal/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(text.contains("kseal/shared, kseal/team-a"), "{text}");
    // By namespace: the first ring that opens there seals (the shared one, unbound).
    assert_eq!(
        get("/v1/cert.pem?namespace=team-a").await,
        (StatusCode::OK, pem(old_key()))
    );
    let (status, text) = get("/v1/certs").await;
    assert_eq!(status, StatusCode::OK);
    let certs: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(certs["rings"][1]["name"], "kseal/team-a");
    assert_eq!(certs["rings"][1]["sealingKey"], new_key().id().to_string());
    assert_eq!(certs["rings"][1]["binding"], "namespaces team-a");
    assert_eq!(certs["rings"][0]["binding"], Value::Null);
}

#[tokio::test]
async fn rotate_of_values_from_two_rings_keeps_each_in_its_ring_and_names_no_key() {
    let app = router(&state_with_bound_rings());
    // `password` sealed to the shared ring, `user` to team-a's, cluster-wide, in team-a.
    let mut mixed = team_value("team-a", false);
    let shared = to_json(&sealed_for(old_key(), &[(CLUSTER_WIDE_ANNOTATION, "true")]));
    mixed["spec"]["encryptedData"]["password"] =
        shared["spec"]["encryptedData"]["password"].clone();
    let (status, text) = post_json(&app, "/v1/rotate", &mixed).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let output: Value = serde_json::from_str(&text).expect("json");
    // A hint binds: naming one of the two keys would make the other value fail.
    assert_eq!(
        output["metadata"]["annotations"].get(SEALING_KEY_ANNOTATION),
        None,
        "{output}"
    );
    let label = Scope::Cluster.label("", "");
    let value = |item: &str| {
        output["spec"]["encryptedData"][item]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        ring_of(&[old_key()])
            .open_base64(&label, &value("password"), None)
            .is_ok()
    );
    assert!(
        ring_of(&[new_key()])
            .open_base64(&label, &value("user"), None)
            .is_ok()
    );
    assert!(
        ring_of(&[old_key()])
            .open_base64(&label, &value("user"), None)
            .is_err()
    );
    let (status, text) = post_json(&app, "/v1/verify", &output).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // Outside team-a the team value is not tried, and the answer says which ring was not.
    let mut elsewhere = output.clone();
    elsewhere["metadata"]["namespace"] = json!("prod");
    let (status, text) = post_json(&app, "/v1/verify", &elsewhere).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert!(
        text.contains(
            "not tried in this namespace: ring kseal/team-a (bound to namespaces team-a)"
        ),
        "{text}"
    );
}
