//! Behaviour of the fake that the scenarios cannot check against a real server: features newer
//! than Kubernetes 1.20 (streaming lists), fault injection, the request log, and driving
//! kube-runtime's watcher and Controller.

// Helpers outside `#[test]` functions unwrap too; a panic is a test failure here.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kseal_testkit::scenarios::{eventually, expect_error};
use kseal_testkit::{FaultRule, TestApiServer};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt as _, finalizer, reflector, watcher};
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(10);

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

async fn first_event<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = Result<WatchEvent<ConfigMap>, kube::Error>> + Unpin,
{
    tokio::time::timeout(DEADLINE, s.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("event")
}

#[tokio::test]
async fn watch_from_compacted_resource_version_gets_410_expired() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let created = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let old_rv = created.resource_version().unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    server.faults().compact();
    let mut s = cms
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    match first_event(&mut s).await {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // Resuming from the current RV still works.
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert!(matches!(first_event(&mut s).await, WatchEvent::Added(o) if o.name_any() == "b"));
}

#[tokio::test]
async fn bookmarks_carry_the_latest_resource_version() {
    let server = TestApiServer::new();
    server.set_bookmark_interval(Duration::from_millis(20));
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = cms
        .watch(
            &WatchParams {
                bookmarks: true,
                ..Default::default()
            },
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let created = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert!(matches!(first_event(&mut s).await, WatchEvent::Added(_)));
    match first_event(&mut s).await {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata.resource_version,
            created.resource_version().unwrap()
        ),
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

/// Waits for a watch stream to end; bookmarks may come first.
async fn assert_stream_ends<S>(s: &mut S)
where
    S: futures::Stream<Item = Result<WatchEvent<ConfigMap>, kube::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(DEADLINE, s.next())
            .await
            .expect("stream ends in time")
        {
            None => return,
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn watch_ends_after_timeout_seconds_and_when_watches_are_dropped() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = cms
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    assert_stream_ends(&mut s).await;
    let mut s = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    server.faults().drop_watches();
    assert_stream_ends(&mut s).await;
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_end_bookmark() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    for n in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut names = Vec::new();
    loop {
        let ev = tokio::time::timeout(DEADLINE, events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => names.push(o.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, ["a", "b", "c"]);
    let watches: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_watch())
        .collect();
    assert!(
        watches[0]
            .query
            .as_deref()
            .unwrap()
            .contains("sendInitialEvents=true"),
        "{watches:?}"
    );
}

#[tokio::test]
async fn injected_faults_fail_matching_requests_and_the_log_records_them() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    server.clear_requests();
    server.faults().fail(
        FaultRule::new(500)
            .method("PATCH")
            .resource("configmaps")
            .times(2),
    );
    server
        .faults()
        .fail(FaultRule::new(429).path_contains("/secrets"));
    let patch = Patch::Merge(json!({"data": {"k": "2"}}));
    expect_error(
        cms.patch("a", &PatchParams::default(), &patch).await,
        500,
        "InternalError",
    )
    .unwrap();
    // GETs are not matched by the PATCH rule.
    cms.get("a").await.unwrap();
    expect_error(
        cms.patch("a", &PatchParams::default(), &patch).await,
        500,
        "InternalError",
    )
    .unwrap();
    assert_eq!(
        cms.patch("a", &PatchParams::default(), &patch)
            .await
            .unwrap()
            .data
            .unwrap()["k"],
        "2"
    );
    let secrets: Api<Secret> = Api::default_namespaced(server.client());
    expect_error(
        secrets.list(&ListParams::default()).await,
        429,
        "TooManyRequests",
    )
    .unwrap();
    assert_eq!(server.faults().pending(), 0);
    server.faults().fail(FaultRule::new(403));
    server.faults().clear();
    secrets.list(&ListParams::default()).await.unwrap();

    let log = server.requests();
    let summary: Vec<(String, u16)> = log.iter().map(|r| (r.method.clone(), r.status)).collect();
    assert_eq!(
        summary,
        [
            ("PATCH".into(), 500),
            ("GET".into(), 200),
            ("PATCH".into(), 500),
            ("PATCH".into(), 200),
            ("GET".into(), 429),
            ("GET".into(), 200)
        ]
    );
    assert_eq!(log[0].path, "/api/v1/namespaces/default/configmaps/a");
    server.clear_requests();
    assert!(server.requests().is_empty());

    server.faults().set_delay(Some(Duration::from_millis(5)));
    cms.get("a").await.unwrap();
    server.faults().set_delay(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoint_serves_and_clears_the_request_log_over_tcp() {
    let server = TestApiServer::new();
    let served = server.serve_with_admin().await.unwrap();
    let client = served.client().unwrap();
    let admin = || kseal_testkit::ADMIN_REQUESTS_PATH;
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    let log: Vec<kseal_testkit::RequestRecord> = client
        .request(http::Request::get(admin()).body(Vec::new()).unwrap())
        .await
        .unwrap();
    // The admin request itself is not logged.
    assert_eq!(log, server.requests());
    // The count endpoint filters by method, path suffix and answer, as the in-process call.
    let count = |query: &'static str| {
        let client = client.clone();
        async move {
            let v: serde_json::Value = client
                .request(
                    http::Request::get(format!("{}?{query}", kseal_testkit::ADMIN_COUNT_PATH))
                        .body(Vec::new())
                        .unwrap(),
                )
                .await
                .unwrap();
            v["count"].as_u64().expect("count")
        }
    };
    assert_eq!(count("method=GET&suffix=/configmaps&status=200").await, 1);
    assert_eq!(count("method=POST&suffix=/configmaps&status=200").await, 0);
    assert_eq!(count("method=GET&suffix=/secrets&status=200").await, 0);
    assert_eq!(count("method=GET&suffix=/configmaps&status=404").await, 0);
    assert_eq!(server.count_requests("GET", "/configmaps", 200), 1);
    assert_eq!(
        log.iter()
            .map(|r| (r.method.as_str(), r.path.as_str()))
            .collect::<Vec<_>>(),
        [("GET", "/api/v1/namespaces/default/configmaps")]
    );
    client
        .request_text(http::Request::delete(admin()).body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert!(server.requests().is_empty());
    // The plain `serve` has no admin endpoint: the path is not an API path.
    let plain = server.serve().await.unwrap();
    let (code, _) = raw_http(&plain.addr().to_string(), "GET", admin(), "", "").await;
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lock_endpoint_reports_the_time_the_state_lock_was_held() {
    let server = TestApiServer::new();
    let served = server.serve_with_admin().await.unwrap();
    let client = served.client().unwrap();
    let held = || async {
        let v: serde_json::Value = client
            .request(
                http::Request::get(kseal_testkit::ADMIN_LOCK_PATH)
                    .body(Vec::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        v["heldNanos"].as_u64().expect("heldNanos")
    };
    let before = held().await;
    assert_eq!(u128::from(before), server.lock_held().as_nanos());
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    for i in 0..20 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    cms.list(&ListParams::default()).await.unwrap();
    let after = held().await;
    // Every create and the list held it; the admin requests themselves do not.
    assert!(after > before, "{before} -> {after}");
    assert_eq!(u128::from(after), server.lock_held().as_nanos());
}

#[tokio::test]
async fn watcher_relists_after_compaction_and_dropped_watches() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default()).default_backoff(),
    )
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 1);
    // While disconnected, changes happen and the log is compacted: the resume gets 410 and
    // the watcher lists again.
    server
        .faults()
        .fail(FaultRule::new(500).watch(true).times(usize::MAX));
    server.faults().drop_watches();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    cms.delete("a", &Default::default()).await.unwrap();
    server.faults().compact();
    server.faults().clear();
    eventually("reflector sees b only", Duration::from_secs(20), || async {
        let mut names: Vec<String> = reader.state().iter().map(|o| o.name_any()).collect();
        names.sort();
        Ok((names == ["b"]).then_some(()))
    })
    .await
    .unwrap();
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch())
        .count();
    assert!(lists >= 2, "re-listed: {:?}", server.requests());
    task.abort();
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(#[source] kube::Error);

/// A tiny controller in the shape kseal's uses: a finalizer, an owned Secret written with
/// server-side apply, and a status-like annotation patch.
async fn reconcile(
    cm: Arc<ConfigMap>,
    client: Arc<kube::Client>,
) -> Result<Action, finalizer::Error<ReconcileError>> {
    let ns = cm.namespace().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced((*client).clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced((*client).clone(), &ns);
    finalizer(&cms, "kseal.dev/test", cm, |ev| async move {
        match ev {
            finalizer::Event::Apply(cm) => {
                let owner = cm.controller_owner_ref(&()).unwrap();
                let data: serde_json::Map<String, serde_json::Value> = cm
                    .data
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| {
                        use base64::Engine as _;
                        (
                            k,
                            base64::engine::general_purpose::STANDARD.encode(v).into(),
                        )
                    })
                    .collect();
                let secret = json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": cm.name_any(), "ownerReferences": [owner]},
                    "data": data,
                });
                secrets
                    .patch(
                        &cm.name_any(),
                        &PatchParams::apply("kt-controller").force(),
                        &Patch::Apply(secret),
                    )
                    .await
                    .map_err(ReconcileError)?;
                Ok(Action::await_change())
            }
            finalizer::Event::Cleanup(cm) => {
                let _ = secrets.delete(&cm.name_any(), &Default::default()).await;
                Ok(Action::await_change())
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_with_finalizer_and_owned_secret_converges() {
    let server = TestApiServer::new();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let controller = Controller::new(cms.clone(), watcher::Config::default())
        .owns(secrets.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(200)),
            Arc::new(client.clone()),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    let mut src = cm("src");
    src.data = Some([("a".into(), "1".into()), ("b".into(), "2".into())].into());
    cms.create(&PostParams::default(), &src).await.unwrap();
    let keys = |s: &Secret| {
        s.data
            .clone()
            .unwrap_or_default()
            .into_keys()
            .collect::<Vec<_>>()
    };
    eventually("secret created", DEADLINE, || async {
        Ok(secrets
            .get_opt("src")
            .await?
            .filter(|s| keys(s) == ["a", "b"])
            .map(|_| ()))
    })
    .await
    .unwrap();
    assert_eq!(
        cms.get("src").await.unwrap().finalizers(),
        ["kseal.dev/test"]
    );

    // Deleting the owned Secret triggers a reconcile that restores it.
    secrets.delete("src", &Default::default()).await.unwrap();
    eventually("secret re-created", DEADLINE, || async {
        Ok(secrets.get_opt("src").await?.map(|_| ()))
    })
    .await
    .unwrap();

    // A key removed from the source is pruned from the Secret (server-side apply).
    cms.patch(
        "src",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"b": null}})),
    )
    .await
    .unwrap();
    eventually("key pruned", DEADLINE, || async {
        Ok(secrets
            .get_opt("src")
            .await?
            .filter(|s| keys(s) == ["a"])
            .map(|_| ()))
    })
    .await
    .unwrap();

    // Deleting the source runs the cleanup and removes the finalizer.
    cms.delete("src", &Default::default()).await.unwrap();
    eventually("source and secret gone", DEADLINE, || async {
        Ok(
            (cms.get_opt("src").await?.is_none() && secrets.get_opt("src").await?.is_none())
                .then_some(()),
        )
    })
    .await
    .unwrap();
    task.abort();
}

#[tokio::test]
async fn apply_yaml_registers_crds_and_discovery_serves_them() {
    let server = TestApiServer::new();
    let crd = serde_saphyr::to_string(&kseal_testkit::scenarios::sealed_secret_crd()).unwrap();
    let yaml = format!(
        "{crd}---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n---\n\
         apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: s\n  namespace: apps\n\
         spec:\n  encryptedData:\n    k: AgA=\n"
    );
    let objs = server.apply_yaml(&yaml).unwrap();
    assert_eq!(objs.len(), 3);
    let crd = server
        .get(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "sealedsecrets.bitnami.com",
        )
        .unwrap();
    assert_eq!(crd["status"]["conditions"][1]["type"], "Established");
    assert_eq!(crd["status"]["conditions"][1]["status"], "True");
    let ss = server
        .get("bitnami.com/v1alpha1", "SealedSecret", "apps", "s")
        .unwrap();
    assert_eq!(ss["metadata"]["generation"], 1);

    let client = server.client();
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let group = discovery
        .get("bitnami.com")
        .expect("bitnami.com discovered");
    let (ar, caps) = group
        .recommended_kind("SealedSecret")
        .expect("SealedSecret");
    assert_eq!(ar.plural, "sealedsecrets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(discovery.get("").is_some() && discovery.get("coordination.k8s.io").is_some());
    let gvk = GroupVersionKind::gvk("bitnami.com", "v1alpha1", "SealedSecret");
    let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "apps", &ar);
    assert_eq!(
        api.get("s").await.unwrap().data["spec"]["encryptedData"]["k"],
        "AgA="
    );
    // Deleting the CRD removes the resource and its objects.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.delete("sealedsecrets.bitnami.com", &Default::default())
        .await
        .unwrap();
    assert!(
        server
            .get("bitnami.com/v1alpha1", "SealedSecret", "apps", "s")
            .is_none()
    );
    let ar = ApiResource::from_gvk_with_plural(&gvk, "sealedsecrets");
    let api: Api<DynamicObject> = Api::namespaced_with(client, "apps", &ar);
    // The group is no longer served at all: the apiserver's plain-text 404.
    let e = kseal_testkit::scenarios::api_error(api.get("s").await).unwrap();
    assert_eq!(e.code, 404);
}

#[tokio::test]
async fn ssa_without_field_manager_and_patch_errors_match_the_apiserver() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let addr = served.addr().to_string();
    let http = |m, p, c, b| raw_http(&addr, m, p, c, b);
    let (code, body) = http(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        "application/apply-patch+yaml",
        "{}",
    )
    .await;
    assert_eq!(code, 422);
    assert!(
        body.contains("PatchOptions.meta.k8s.io \\\"\\\" is invalid: fieldManager: Required value"),
        "{body}"
    );
    let (code, body) = http("GET", "/apis/nope.example/v1/things", "", "").await;
    assert_eq!((code, body.as_str()), (404, "404 page not found\n"));
    let (code, body) = http(
        "POST",
        "/api/v1/namespaces/default/configmaps/x",
        "application/json",
        "{}",
    )
    .await;
    assert_eq!(code, 405, "{body}");
    let (code, body) = http(
        "GET",
        "/api/v1/namespaces/default/configmaps/x/status",
        "",
        "",
    )
    .await;
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("the server could not find the requested resource"),
        "{body}"
    );
}

/// A minimal HTTP/1.1 request over a TCP socket: status code and body.
async fn raw_http(addr: &str, method: &str, path: &str, ct: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let ct = if ct.is_empty() {
        String::new()
    } else {
        format!("Content-Type: {ct}\r\n")
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{ct}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_proxy_reaches_router_and_url_targets() {
    use axum::routing::{get, post};
    let server = TestApiServer::new();
    let client = server.client();
    let path = "/api/v1/namespaces/kube-system/services/http:sealed-secrets-controller:http/proxy/v1/cert.pem";
    let get_req = || http::Request::get(path).body(Vec::new()).unwrap();
    // No Service: 404 like the apiserver.
    let e = kseal_testkit::scenarios::api_error(client.request_text(get_req()).await).unwrap();
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "services \"sealed-secrets-controller\" not found")
    );
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "sealed-secrets-controller", "namespace": "kube-system"},
        "spec": {"ports": [{"name": "http", "port": 8080}]}
    }))
    .unwrap();
    let svcs: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "kube-system");
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let spec = svc.spec.unwrap();
    assert!(
        spec.cluster_ip.is_some_and(|ip| !ip.is_empty()),
        "clusterIP allocated"
    );
    assert_eq!(spec.ports.unwrap()[0].protocol.as_deref(), Some("TCP"));
    // A Service without a target: 503 like a Service without endpoints.
    let e = kseal_testkit::scenarios::api_error(client.request_text(get_req()).await).unwrap();
    assert_eq!(e.code, 503);

    let api = axum::Router::new()
        .route(
            "/v1/cert.pem",
            get(|| async { "-----BEGIN CERTIFICATE-----\n" }),
        )
        .route(
            "/v1/verify",
            post(|body: String| async move { (http::StatusCode::CONFLICT, body) }),
        );
    server.set_service_proxy(
        "kube-system",
        "sealed-secrets-controller",
        kseal_testkit::ProxyTarget::Router(api.clone()),
    );
    assert_eq!(
        client.request_text(get_req()).await.unwrap(),
        "-----BEGIN CERTIFICATE-----\n"
    );
    let verify = http::Request::post(path.replace("cert.pem", "verify"))
        .body(kube::client::Body::from(b"{}".to_vec()))
        .unwrap();
    let resp = client.send(verify).await.unwrap();
    assert_eq!(resp.status(), 409, "the target's status passes through");

    // Over TCP on both sides: the apiserver forwards to the controller's listener.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = format!("http://{}", listener.local_addr().unwrap());
    let backend_task = tokio::spawn(async move { axum::serve(listener, api).await });
    server.set_service_proxy(
        "kube-system",
        "sealed-secrets-controller",
        kseal_testkit::ProxyTarget::Url(backend),
    );
    let served = server.serve().await.unwrap();
    let tcp_client = served.client().unwrap();
    assert_eq!(
        tcp_client.request_text(get_req()).await.unwrap(),
        "-----BEGIN CERTIFICATE-----\n"
    );
    backend_task.abort();
}

#[tokio::test]
async fn malformed_bodies_get_client_errors_never_a_crash() {
    let server = TestApiServer::new();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    let bodies = [
        "[]",
        "1",
        "\"s\"",
        "null",
        "not json",
        r#"{"metadata": 5}"#,
        r#"{"metadata": {"name": 5, "labels": [1]}}"#,
        r#"{"metadata": {"name": "x", "ownerReferences": [1, {"uid": 2}]}}"#,
        r#"{"metadata": {"name": "x", "finalizers": "f"}}"#,
        r#"{"metadata": {"name": "x"}, "spec": {"ports": [1, {"port": "a"}]}}"#,
        r#"{"metadata": {"name": "x"}, "data": [], "stringData": 1}"#,
        r#"{"metadata": {"name": "x"}, "spec": {"names": "n", "versions": 3}}"#,
        r#"[{"op": "bogus"}]"#,
        r#"[{"op": "add", "path": "/metadata/labels/a", "value": "b"}]"#,
    ];
    let collections = [
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/secrets",
        "/api/v1/namespaces/default/services",
        "/api/v1/namespaces",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    ];
    let content_types = [
        "application/json",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];
    for coll in collections {
        for body in bodies {
            let mut requests = vec![("POST", coll.to_owned(), "application/json")];
            for ct in content_types {
                requests.push(("PATCH", format!("{coll}/x?fieldManager=m"), ct));
            }
            requests.push(("PUT", format!("{coll}/x"), "application/json"));
            requests.push(("DELETE", format!("{coll}/x"), "application/json"));
            for (method, path, ct) in requests {
                let req = http::Request::builder()
                    .method(method)
                    .uri(&path)
                    .header("content-type", ct)
                    .body(kube::client::Body::from(body.as_bytes().to_vec()))
                    .unwrap();
                let resp = client.send(req).await.unwrap();
                assert!(
                    resp.status().as_u16() < 500,
                    "{method} {path} {ct} {body}: {}",
                    resp.status()
                );
            }
        }
    }
}

#[tokio::test]
async fn dry_run_writes_change_nothing() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = cms.create(&dry, &cm("d")).await.unwrap();
    assert_eq!(created.name_any(), "d");
    assert!(cms.get_opt("d").await.unwrap().is_none());
    cms.create(&PostParams::default(), &cm("d")).await.unwrap();
    let rv = server.resource_version();
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let patched = cms
        .patch("d", &pp, &Patch::Merge(json!({"data": {"k": "dry"}})))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "dry");
    let dp = kube::api::DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    cms.delete("d", &dp).await.unwrap();
    cms.delete_collection(&dp, &ListParams::default())
        .await
        .unwrap();
    assert_eq!(cms.get("d").await.unwrap().data.unwrap()["k"], "v");
    assert_eq!(server.resource_version(), rv, "nothing was written");
}

/// Paged lists return every object exactly once, in (namespace, name) order, with and without
/// selectors and whatever the page size (the list skips earlier pages by key before it copies
/// objects to evaluate selectors).
#[tokio::test]
async fn paged_lists_with_and_without_selectors_return_each_object_once() {
    let server = TestApiServer::new();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..23 {
        let mut c = cm(&format!("cm-{i:02}"));
        if i % 3 == 0 {
            c.labels_mut().insert("third".into(), "yes".into());
        }
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    async fn paged(cms: &Api<ConfigMap>, lp: ListParams) -> Vec<String> {
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut page = lp.clone();
            if let Some(t) = &token {
                page = page.continue_token(t);
            }
            let l = cms.list(&page).await.unwrap();
            names.extend(l.items.iter().map(|c| c.name_any()));
            token = l.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return names;
            }
        }
    }
    let all: Vec<String> = (0..23).map(|i| format!("cm-{i:02}")).collect();
    let thirds: Vec<String> = (0..23)
        .filter(|i| i % 3 == 0)
        .map(|i| format!("cm-{i:02}"))
        .collect();
    for limit in [1, 4, 5, 23, 100] {
        let lp = ListParams::default().limit(limit);
        assert_eq!(paged(&cms, lp.clone()).await, all, "limit {limit}");
        assert_eq!(
            paged(&cms, lp.clone().labels("third=yes")).await,
            thirds,
            "limit {limit}, label selector"
        );
        assert_eq!(
            paged(&cms, lp.clone().fields("metadata.name!=cm-00")).await,
            all[1..].to_vec(),
            "limit {limit}, field selector"
        );
    }
    let first = cms
        .list(&ListParams::default().limit(4).labels("third=yes"))
        .await
        .unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(4));
}
