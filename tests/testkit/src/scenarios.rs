//! Behaviour scenarios, generic over a [`kube::Client`].
//!
//! Each scenario checks resulting state against what a real kube-apiserver does. They run
//! against the in-process [`crate::TestApiServer`], against it over `127.0.0.1`, and against a
//! real kube-apiserver (1.20, with the garbage-collector and namespace controllers) to keep the
//! fake honest. Every scenario uses its own uniquely named namespace (and CRD group), so they
//! can share one real server and run in parallel. None relies on features newer than
//! Kubernetes 1.20 (no streaming lists).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::Status;
use kube::{Client, Resource, ResourceExt as _};
use serde_json::{Value, json};

/// How long to wait for asynchronous effects (GC, namespace cleanup, CRD establishment).
const DEADLINE: Duration = Duration::from_secs(60);

/// A name unique to this run: `prefix` plus 8 random lowercase characters.
pub fn unique(prefix: &str) -> String {
    let mut b = [0u8; 8];
    crate::store::fill_random(&mut b);
    let s: String = b.iter().map(|x| (b'a' + x % 26) as char).collect();
    format!("{prefix}-{s}")
}

/// Polls `f` until it returns `Ok(Some(_))`, failing after `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let end = tokio::time::Instant::now() + deadline;
    let mut last_err = None;
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= end {
            match last_err {
                Some(e) => bail!("timed out waiting for {what}; last error: {e:#}"),
                None => bail!("timed out waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The API error of a failed call, or an error if the call succeeded or failed otherwise.
pub fn api_error<T: Debug>(res: Result<T, kube::Error>) -> anyhow::Result<Box<Status>> {
    match res {
        Err(kube::Error::Api(s)) => Ok(s),
        Err(e) => bail!("expected an API error, got {e:#}"),
        Ok(v) => bail!("expected an API error, got success: {v:?}"),
    }
}

/// Checks code and reason of an API error.
pub fn expect_error<T: Debug>(
    res: Result<T, kube::Error>,
    code: u16,
    reason: &str,
) -> anyhow::Result<Box<Status>> {
    let e = api_error(res)?;
    ensure!(
        e.code == code && e.reason == reason,
        "expected {code} {reason}, got {} {}: {}",
        e.code,
        e.reason,
        e.message
    );
    Ok(e)
}

/// Creates a uniquely named namespace.
pub async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"kseal.dev/test": "true"}}}),
    )?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating namespace")?;
    Ok(name)
}

/// Deletes a namespace, ignoring errors (cleanup).
pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

fn cm(name: &str, data: Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "data": data}),
    )?)
}

fn rv<K: Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

async fn run_in_namespace<F, Fut>(client: Client, prefix: &str, f: F) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let ns = create_namespace(&client, prefix).await?;
    let res = f(ns.clone()).await;
    delete_namespace(&client, &ns).await;
    res
}

/// Create, get, list (selectors), replace, patch, delete, and the Status errors around them.
pub async fn crud_and_errors(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-crud", |ns| async move {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let pp = PostParams::default();
        let mut a = cm("a", json!({"k": "v"}))?;
        a.metadata.labels = Some([("app".to_owned(), "kt".to_owned())].into());
        let created = cms.create(&pp, &a).await?;
        ensure!(created.metadata.uid.as_deref().is_some_and(|u| !u.is_empty()), "uid set on create");
        ensure!(!rv(&created).is_empty(), "resourceVersion set on create");
        ensure!(created.metadata.creation_timestamp.is_some(), "creationTimestamp set");
        ensure!(created.metadata.generation.is_none(), "configmaps have no generation");
        ensure!(created.metadata.namespace.as_deref() == Some(ns.as_str()), "namespace set from the URL");

        let e = expect_error(cms.create(&pp, &a).await, 409, "AlreadyExists")?;
        ensure!(e.message == "configmaps \"a\" already exists", "message: {}", e.message);
        let e = expect_error(cms.get("missing").await, 404, "NotFound")?;
        ensure!(e.message == "configmaps \"missing\" not found", "message: {}", e.message);
        let d = e.details.context("404 details")?;
        ensure!(d.name == "missing" && d.kind == "configmaps", "404 details: {d:?}");
        ensure!(cms.get_opt("missing").await?.is_none(), "get_opt maps 404 to None");

        let nowhere = unique("kt-nowhere");
        let e = expect_error(
            Api::<ConfigMap>::namespaced(client.clone(), &nowhere).create(&pp, &a).await,
            404,
            "NotFound",
        )?;
        ensure!(e.message == format!("namespaces \"{nowhere}\" not found"), "message: {}", e.message);

        let e = expect_error(cms.create(&pp, &cm("", json!({}))?).await, 422, "Invalid")?;
        ensure!(e.message.contains("metadata.name: Required value"), "message: {}", e.message);
        expect_error(cms.create(&pp, &cm("Bad_Name", json!({}))?).await, 422, "Invalid")?;
        let mut bad_label = cm("c", json!({}))?;
        bad_label.metadata.labels = Some([("app".to_owned(), "not valid!".to_owned())].into());
        let e = expect_error(cms.create(&pp, &bad_label).await, 422, "Invalid")?;
        ensure!(e.message.contains("metadata.labels: Invalid value: \"not valid!\""), "message: {}", e.message);
        let bad_owner: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "c", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": ""}]}}),
        )?;
        let e = expect_error(cms.create(&pp, &bad_owner).await, 422, "Invalid")?;
        ensure!(e.message.contains("metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty"), "message: {}", e.message);
        let mut with_rv = cm("c", json!({}))?;
        with_rv.metadata.resource_version = Some(rv(&created));
        let e = expect_error(cms.create(&pp, &with_rv).await, 500, "")?;
        ensure!(e.message == "resourceVersion should not be set on objects to be created", "message: {}", e.message);
        let mut other_ns = cm("c", json!({}))?;
        other_ns.metadata.namespace = Some("default".into());
        let e = expect_error(cms.create(&pp, &other_ns).await, 400, "BadRequest")?;
        ensure!(e.message.contains("does not match the namespace"), "message: {}", e.message);

        // Replace: current RV succeeds, stale RV conflicts.
        let mut upd = created.clone();
        upd.data = Some([("k".to_owned(), "v2".to_owned())].into());
        let replaced = cms.replace("a", &pp, &upd).await?;
        ensure!(rv(&replaced) != rv(&created), "replace bumps resourceVersion");
        let e = expect_error(cms.replace("a", &pp, &upd).await, 409, "Conflict")?;
        ensure!(e.message.contains("the object has been modified"), "message: {}", e.message);
        // A PUT that changes nothing does not bump the resourceVersion.
        let same = cms.replace("a", &pp, &replaced).await?;
        ensure!(rv(&same) == rv(&replaced), "no-op PUT keeps resourceVersion");
        // Same for a merge patch.
        let same = cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v2"}}))).await?;
        ensure!(rv(&same) == rv(&replaced), "no-op merge patch keeps resourceVersion");
        // A patch carrying a stale RV conflicts.
        let stale = json!({"metadata": {"resourceVersion": rv(&created)}, "data": {"k": "v3"}});
        expect_error(cms.patch("a", &PatchParams::default(), &Patch::Merge(stale)).await, 409, "Conflict")?;
        let patched = cms
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": null, "n": "1"}})))
            .await?;
        ensure!(patched.data == Some([("n".to_owned(), "1".to_owned())].into()), "merge patch: {:?}", patched.data);
        // uid is immutable; creationTimestamp is silently kept.
        let e = expect_error(
            cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}})))
                .await,
            422,
            "Invalid",
        )?;
        ensure!(e.message.contains("metadata.uid: Invalid value") && e.message.ends_with("field is immutable"), "message: {}", e.message);
        let kept = cms
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"creationTimestamp": "2000-01-01T00:00:00Z"}})))
            .await?;
        ensure!(kept.metadata.creation_timestamp == created.metadata.creation_timestamp, "creationTimestamp kept");
        // Strategic merge patch on a built-in type merges maps.
        let patched = cms
            .patch("a", &PatchParams::default(), &Patch::Strategic(json!({"metadata": {"labels": {"x": "y"}}})))
            .await?;
        ensure!(patched.labels().get("app").map(String::as_str) == Some("kt"), "labels kept");
        ensure!(patched.labels().get("x").map(String::as_str) == Some("y"), "label added");
        // JSON patch, with the `test` of null that kube-runtime's finalizer() uses.
        let jp: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["kseal.dev/test"]}
        ]))?;
        let patched = cms.patch("a", &PatchParams::default(), &Patch::Json::<()>(jp)).await?;
        ensure!(patched.finalizers() == ["kseal.dev/test".to_owned()], "finalizer added");
        let jp: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "other"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]))?;
        expect_error(cms.patch("a", &PatchParams::default(), &Patch::Json::<()>(jp)).await, 422, "Invalid")?;
        let jp: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "kseal.dev/test"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]))?;
        let patched = cms.patch("a", &PatchParams::default(), &Patch::Json::<()>(jp)).await?;
        ensure!(patched.finalizers().is_empty(), "finalizer removed");

        // Selectors.
        cms.create(&pp, &cm("b", json!({}))?).await?;
        let l = cms.list(&ListParams::default().labels("app=kt")).await?;
        ensure!(l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>() == ["a"], "label selector");
        ensure!(l.metadata.resource_version.as_deref().is_some_and(|r| !r.is_empty()), "list RV");
        let l = cms.list(&ListParams::default().fields("metadata.name=b")).await?;
        ensure!(l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>() == ["b"], "field selector");
        let e = expect_error(cms.list(&ListParams::default().fields("data.k=v")).await, 400, "BadRequest")?;
        ensure!(
            e.message == "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            "message: {}",
            e.message
        );
        let l = cms.list(&ListParams::default().labels("app!=kt")).await?;
        ensure!(l.items.iter().all(|c| c.name_any() != "a"), "negated label selector");
        // Built-in list items carry no apiVersion/kind in JSON; get responses do.
        let raw_list: Value = serde_json::from_str(
            &client
                .request_text(http::Request::get(format!("/api/v1/namespaces/{ns}/configmaps")).body(Vec::new())?)
                .await?,
        )?;
        ensure!(raw_list["kind"] == "ConfigMapList" && raw_list["apiVersion"] == "v1", "list kind: {raw_list}");
        let first = &raw_list["items"][0];
        ensure!(first.get("kind").is_none() && first.get("apiVersion").is_none(), "item: {first}");
        let raw_get: Value = serde_json::from_str(
            &client
                .request_text(http::Request::get(format!("/api/v1/namespaces/{ns}/configmaps/a")).body(Vec::new())?)
                .await?,
        )?;
        ensure!(raw_get["kind"] == "ConfigMap" && raw_get["apiVersion"] == "v1", "get kind: {raw_get}");
        let l = cms.list(&ListParams::default().limit(1)).await?;
        ensure!(l.items.len() == 1 && l.metadata.continue_.is_some(), "pagination");
        let next = cms.list(&ListParams::default().limit(1).continue_token(l.metadata.continue_.as_deref().unwrap_or_default())).await?;
        ensure!(next.items.len() == 1 && next.items[0].name_any() != l.items[0].name_any(), "second page");
        // Walking every page of one: each object once, in order, and no token after the last.
        let whole: Vec<String> = cms.list(&ListParams::default()).await?.items.iter().map(|c| c.name_any()).collect();
        let (mut walked, mut token) = (Vec::new(), None::<String>);
        loop {
            let mut lp = ListParams::default().limit(1);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = cms.list(&lp).await?;
            walked.extend(page.items.iter().map(|c| c.name_any()));
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() || walked.len() > whole.len() {
                break;
            }
        }
        ensure!(walked == whole, "paged walk {walked:?} against the whole list {whole:?}");

        // Delete: immediate deletion returns a Status; preconditions conflict.
        let b = cms.get("b").await?;
        let dp = DeleteParams { preconditions: Some(Preconditions { uid: Some("wrong".into()), resource_version: None }), ..Default::default() };
        let e = expect_error(cms.delete("b", &dp).await, 409, "Conflict")?;
        ensure!(e.message.contains("the UID in the precondition (wrong) does not match the UID in record"), "message: {}", e.message);
        let dp = DeleteParams { preconditions: Some(Preconditions { uid: None, resource_version: Some("1".into()) }), ..Default::default() };
        expect_error(cms.delete("b", &dp).await, 409, "Conflict")?;
        let dp = DeleteParams { preconditions: Some(Preconditions { uid: b.metadata.uid.clone(), resource_version: Some(rv(&b)) }), ..Default::default() };
        let res = cms.delete("b", &dp).await?;
        let status = res.right().context("immediate delete returns a Status")?;
        ensure!(status.details.as_ref().is_some_and(|d| d.name == "b" && d.kind == "configmaps"), "delete status: {status:?}");
        expect_error(cms.get("b").await, 404, "NotFound")?;
        expect_error(cms.delete("b", &DeleteParams::default()).await, 404, "NotFound")?;

        // Secrets: stringData merges into data; data must be base64.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s"}, "data": {"a": "YQ=="}, "stringData": {"b": "bee"}
        }))?;
        let s = secrets.create(&pp, &s).await?;
        let data = s.data.clone().unwrap_or_default();
        ensure!(data.get("a").map(|b| b.0.as_slice()) == Some(b"a".as_slice()), "data kept");
        ensure!(data.get("b").map(|b| b.0.as_slice()) == Some(b"bee".as_slice()), "stringData merged");
        ensure!(s.string_data.is_none(), "stringData not stored");
        ensure!(s.type_.as_deref() == Some("Opaque"), "type defaults to Opaque");
        let raw: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<Secret>(&()));
        let bad: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"x": "not base64!"}
        }))?;
        expect_error(raw.create(&pp, &bad).await, 400, "BadRequest")?;
        use base64::Engine as _;
        let big: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"},
            "data": {"x": base64::engine::general_purpose::STANDARD.encode(vec![b'x'; (1 << 20) + 1])}
        }))?;
        let e = expect_error(raw.create(&pp, &big).await, 422, "Invalid")?;
        ensure!(e.message == "Secret \"big\" is invalid: data: Too long: must have at most 1048576 bytes", "message: {}", e.message);
        // Services get the apiserver's defaults.
        let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
        let svc: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"name": "http", "port": 8080}]}}))?;
        let spec = svcs.create(&pp, &svc).await?.spec.context("service spec")?;
        ensure!(spec.type_.as_deref() == Some("ClusterIP"), "type: {:?}", spec.type_);
        ensure!(spec.cluster_ip.as_deref().is_some_and(|ip| !ip.is_empty()), "clusterIP allocated");
        let port = &spec.ports.unwrap_or_default()[0];
        ensure!(port.protocol.as_deref() == Some("TCP"), "protocol: {:?}", port.protocol);
        ensure!(
            port.target_port == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080)),
            "targetPort: {:?}",
            port.target_port
        );
        // Strategic merge patch: the patch's list items come first, keyed lists merge by key.
        let svc = svcs
            .patch(
                "svc",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"ports": [{"name": "extra", "port": 9090}, {"name": "web", "port": 8080}]}})),
            )
            .await?;
        let ports: Vec<(Option<String>, i32)> =
            svc.spec.and_then(|s| s.ports).unwrap_or_default().into_iter().map(|p| (p.name, p.port)).collect();
        ensure!(ports == [(Some("extra".into()), 9090), (Some("web".into()), 8080)], "ports: {ports:?}");
        let mut fin = cm("fin", json!({}))?;
        fin.metadata.finalizers = Some(vec!["kseal.dev/a".into()]);
        cms.create(&pp, &fin).await?;
        let fin = cms
            .patch("fin", &PatchParams::default(), &Patch::Strategic(json!({"metadata": {"finalizers": ["kseal.dev/b"]}})))
            .await?;
        ensure!(fin.finalizers() == ["kseal.dev/b".to_owned(), "kseal.dev/a".to_owned()], "finalizers: {:?}", fin.finalizers());
        cms.patch("fin", &PatchParams::default(), &Patch::Strategic(json!({"metadata": {"finalizers": null}}))).await?;
        Ok(())
    })
    .await
}

async fn next_event<K, S>(stream: &mut S) -> anyhow::Result<(String, K)>
where
    K: Clone,
    S: futures::Stream<Item = Result<WatchEvent<K>, kube::Error>> + Unpin,
{
    let end = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ev = tokio::time::timeout_at(end, stream.next())
            .await
            .context("timed out waiting for a watch event")?
            .context("watch stream ended")??;
        return Ok(match ev {
            WatchEvent::Added(o) => ("ADDED".into(), o),
            WatchEvent::Modified(o) => ("MODIFIED".into(), o),
            WatchEvent::Deleted(o) => ("DELETED".into(), o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => bail!("watch error: {} {}", e.code, e.message),
        });
    }
}

/// Watches resume from a resourceVersion, see selector transitions, and no-op writes send no events.
pub async fn watch_resume(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-watch", |ns| async move {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let pp = PostParams::default();
        cms.create(&pp, &cm("w1", json!({"k": "1"}))?).await?;
        let rv0 = cms
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        cms.patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await?;
        let mut w2 = cm("w2", json!({}))?;
        w2.metadata.labels = Some([("sel".to_owned(), "yes".to_owned())].into());
        cms.create(&pp, &w2).await?;
        cms.delete("w1", &DeleteParams::default()).await?;

        // Resume from rv0: exactly the three changes, in order.
        let wp = WatchParams::default().timeout(30);
        let mut s = cms.watch(&wp, &rv0).await?.boxed();
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "MODIFIED"
                && o.name_any() == "w1"
                && o.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("2"),
            "1st: {t} {}",
            o.name_any()
        );
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "ADDED" && o.name_any() == "w2",
            "2nd: {t} {}",
            o.name_any()
        );
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "DELETED" && o.name_any() == "w1",
            "3rd: {t} {}",
            o.name_any()
        );

        // Label selector transitions: leaving is DELETED, entering is ADDED.
        let l = cms.list(&ListParams::default().labels("sel=yes")).await?;
        ensure!(l.items.len() == 1, "one object matches");
        let rv1 = l.metadata.resource_version.unwrap_or_default();
        let mut s = cms
            .watch(&wp.clone().labels("sel=yes"), &rv1)
            .await?
            .boxed();
        cms.patch(
            "w2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
        )
        .await?;
        cms.patch(
            "w2",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ignored": "x"}})),
        )
        .await?;
        cms.patch(
            "w2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
        )
        .await?;
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "DELETED" && o.name_any() == "w2",
            "leaving the selector: {t}"
        );
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "ADDED"
                && o.name_any() == "w2"
                && o.data.as_ref().is_some_and(|d| d.contains_key("ignored")),
            "entering the selector: {t}"
        );

        // Metadata-only requests (kube's *_metadata, metadata_watcher) get PartialObjectMetadata.
        let pl = cms.list_metadata(&ListParams::default()).await?;
        ensure!(
            pl.items.iter().any(|m| m.name_any() == "w2"),
            "list_metadata: {:?}",
            pl.items.iter().map(|m| m.name_any()).collect::<Vec<_>>()
        );
        ensure!(
            pl.types.kind == "PartialObjectMetadataList",
            "list kind: {}",
            pl.types.kind
        );
        let pm = cms.get_metadata("w2").await?;
        ensure!(
            pm.types.as_ref().is_some_and(
                |t| t.kind == "PartialObjectMetadata" && t.api_version == "meta.k8s.io/v1"
            ),
            "get_metadata: {:?}",
            pm.types
        );
        let rvm = pl.metadata.resource_version.clone().unwrap_or_default();
        let mut s = cms
            .watch_metadata(&wp.clone().fields("metadata.name=w2"), &rvm)
            .await?
            .boxed();
        cms.patch(
            "w2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"m": "1"}}})),
        )
        .await?;
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "MODIFIED" && o.annotations().get("m").map(String::as_str) == Some("1"),
            "watch_metadata: {t}"
        );
        ensure!(
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "PartialObjectMetadata"),
            "watch_metadata kind: {:?}",
            o.types
        );
        // Field selector, and no event for a no-op write.
        let rv2 = cms
            .list(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        let mut s = cms
            .watch(&wp.clone().fields("metadata.name=w3"), &rv2)
            .await?
            .boxed();
        cms.create(&pp, &cm("w4", json!({}))?).await?;
        cms.create(&pp, &cm("w3", json!({"a": "1"}))?).await?;
        cms.patch(
            "w3",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        )
        .await?;
        let cur = cms.get("w3").await?;
        cms.replace("w3", &pp, &cur).await?;
        cms.patch(
            "w3",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await?;
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "ADDED" && o.name_any() == "w3",
            "field selector filters w4: {t} {}",
            o.name_any()
        );
        let (t, o) = next_event(&mut s).await?;
        ensure!(
            t == "MODIFIED"
                && o.data.as_ref().and_then(|d| d.get("a")).map(String::as_str) == Some("2"),
            "no-op writes send no event: {t} {:?}",
            o.data
        );
        Ok(())
    })
    .await
}

/// Server-side apply: create, merge with other managers, prune what a manager stopped applying.
pub async fn ssa_prune(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-ssa", |ns| async move {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let a = PatchParams::apply("kt-a").force();
        let b = PatchParams::apply("kt-b");
        let body = |data: Value, labels: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s", "labels": labels}, "data": data})
        };
        let o = cms.patch("s", &a, &Patch::Apply(body(json!({"a": "1", "b": "2"}), json!({"l1": "x", "l2": "y"})))).await?;
        ensure!(o.data == Some([("a".into(), "1".into()), ("b".into(), "2".into())].into()), "created: {:?}", o.data);
        let o = cms.patch("s", &b, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"c": "3"}}))).await?;
        ensure!(o.data.as_ref().is_some_and(|d| d.len() == 3), "merged: {:?}", o.data);
        let o = cms.patch("s", &a, &Patch::Apply(body(json!({"a": "1"}), json!({"l1": "x"})))).await?;
        ensure!(
            o.data == Some([("a".into(), "1".into()), ("c".into(), "3".into())].into()),
            "b pruned, c kept: {:?}",
            o.data
        );
        ensure!(o.labels().get("l2").is_none() && o.labels().get("l1").is_some(), "label pruned: {:?}", o.labels());
        let mf = o.metadata.managed_fields.clone().unwrap_or_default();
        for m in ["kt-a", "kt-b"] {
            let e = mf.iter().find(|e| e.manager.as_deref() == Some(m)).with_context(|| format!("managedFields entry for {m}: {mf:?}"))?;
            ensure!(e.operation.as_deref() == Some("Apply"), "operation Apply");
            ensure!(e.api_version.as_deref() == Some("v1"), "apiVersion");
            ensure!(e.fields_type.as_deref() == Some("FieldsV1"), "fieldsType");
        }
        let again = cms.patch("s", &a, &Patch::Apply(body(json!({"a": "1"}), json!({"l1": "x"})))).await?;
        ensure!(rv(&again) == rv(&o), "no-op apply keeps resourceVersion");
        // An update by another client is kept by later applies that do not mention the field.
        cms.patch("s", &PatchParams::default(), &Patch::Merge(json!({"data": {"u": "9"}}))).await?;
        let o = cms.patch("s", &a, &Patch::Apply(body(json!({"a": "2"}), json!({"l1": "x"})))).await?;
        ensure!(o.data.as_ref().and_then(|d| d.get("u")).map(String::as_str) == Some("9"), "foreign field kept");
        ensure!(o.data.as_ref().and_then(|d| d.get("a")).map(String::as_str) == Some("2"), "applied value");
        // Conflicts between managers; force takes the field over.
        let conflicting = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"c": "3", "a": "5"}});
        let e = expect_error(cms.patch("s", &b, &Patch::Apply(conflicting.clone())).await, 409, "Conflict")?;
        ensure!(e.message == "Apply failed with 1 conflict: conflict with \"kt-a\": .data.a", "message: {}", e.message);
        let o = cms.patch("s", &b.clone().force(), &Patch::Apply(conflicting)).await?;
        ensure!(o.data.as_ref().and_then(|d| d.get("a")).map(String::as_str) == Some("5"), "forced value");
        let o = cms.patch("s", &a, &Patch::Apply(body(json!({}), json!({"l1": "x"})))).await?;
        ensure!(o.data.as_ref().and_then(|d| d.get("a")).map(String::as_str) == Some("5"), "kt-a lost data.a to kt-b, so it is not pruned: {:?}", o.data);
        // A field last written by a non-apply update conflicts too.
        let e = expect_error(
            cms.patch("s", &PatchParams::apply("kt-c"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"u": "0"}}))).await,
            409,
            "Conflict",
        )?;
        ensure!(e.message.starts_with("Apply failed with 1 conflict: conflict with ") && e.message.ends_with(": .data.u"), "message: {}", e.message);
        // Secrets: a key removed from the applied configuration disappears.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let sbody = |data: Value| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque", "data": data});
        secrets.patch("s", &a, &Patch::Apply(sbody(json!({"x": "eA==", "y": "eQ=="})))).await?;
        let s = secrets.patch("s", &a, &Patch::Apply(sbody(json!({"x": "eA=="})))).await?;
        let keys: Vec<String> = s.data.unwrap_or_default().into_keys().collect();
        ensure!(keys == ["x"], "secret key pruned: {keys:?}");
        Ok(())
    })
    .await
}

/// A uniquely named CRD (group `<unique>.testkit.kseal.dev`, kind `Widget`) with a status
/// subresource; waits until it is established and served.
pub async fn create_widget_crd(client: &Client) -> anyhow::Result<ApiResource> {
    let group = format!("{}.testkit.kseal.dev", unique("g"));
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wdg"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .context("creating CRD")?;
    let gvk = GroupVersionKind::gvk(&group, "v1", "Widget");
    wait_established(client, &format!("widgets.{group}"), &gvk).await
}

async fn wait_established(
    client: &Client,
    crd_name: &str,
    gvk: &GroupVersionKind,
) -> anyhow::Result<ApiResource> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually("CRD established", DEADLINE, || async {
        let c = crds.get(crd_name).await?;
        let established = c
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        Ok(established.then_some(()))
    })
    .await?;
    eventually("CRD served", DEADLINE, || async {
        let (ar, caps) = kube::discovery::pinned_kind(client, gvk).await?;
        ensure!(caps.scope == kube::discovery::Scope::Namespaced, "scope");
        Ok(Some(ar))
    })
    .await
}

/// Status subresource split and `metadata.generation` on a custom resource.
pub async fn status_and_generation(client: Client) -> anyhow::Result<()> {
    let ar = create_widget_crd(&client).await?;
    let crd_name = format!("widgets.{}", ar.group);
    let res = run_in_namespace(client.clone(), "kt-status", |ns| {
        let client = client.clone();
        let ar = ar.clone();
        async move {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": ar.api_version, "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"size": 1}, "status": {"phase": "Bogus"}
            }))?;
            let o = api.create(&PostParams::default(), &obj).await?;
            ensure!(o.metadata.generation == Some(1), "generation starts at 1");
            ensure!(o.data.get("status").is_none(), "status ignored on create: {:?}", o.data);
            let pp = PatchParams::default();
            let o = api
                .patch_status("w", &pp, &Patch::Merge(json!({"spec": {"size": 5}, "status": {"phase": "Ready", "observedGeneration": 1}})))
                .await?;
            ensure!(o.data["status"]["phase"] == "Ready", "status written: {:?}", o.data);
            ensure!(o.data["spec"]["size"] == 1, "/status ignores spec");
            ensure!(o.metadata.generation == Some(1), "status does not bump generation");
            let o = api.patch("w", &pp, &Patch::Merge(json!({"spec": {"size": 2}, "status": {"phase": "Ignored"}}))).await?;
            ensure!(o.metadata.generation == Some(2), "spec change bumps generation");
            ensure!(o.data["status"]["phase"] == "Ready", "main endpoint ignores status");
            let o2 = api.patch("w", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}))).await?;
            ensure!(o2.metadata.generation == Some(2), "metadata change keeps generation");
            let o3 = api.patch("w", &pp, &Patch::Merge(json!({"status": {"phase": "Other"}}))).await?;
            ensure!(rv(&o3) == rv(&o2), "status-only write on main endpoint is a no-op");
            let o4 = api
                .patch_status("w", &PatchParams::apply("kt-status").force(), &Patch::Apply(json!({
                    "apiVersion": ar.api_version, "kind": "Widget", "metadata": {"name": "w"},
                    "status": {"phase": "Applied"}
                })))
                .await?;
            ensure!(o4.data["status"]["phase"] == "Applied" && o4.data["spec"]["size"] == 2, "status apply: {:?}", o4.data);
            // Custom resources need a resourceVersion on PUT, and refuse strategic merge patches.
            let mut put = o4.clone();
            put.metadata.resource_version = None;
            put.metadata.managed_fields = None;
            expect_error(api.replace("w", &PostParams::default(), &put).await, 422, "Invalid")?;
            expect_error(api.patch("w", &pp, &Patch::Strategic(json!({"spec": {"size": 3}}))).await, 415, "UnsupportedMediaType")?;
            let mut put = o4.clone();
            put.data["spec"]["size"] = json!(3);
            let o5 = api.replace("w", &PostParams::default(), &put).await?;
            ensure!(o5.metadata.generation == Some(3), "PUT spec change bumps generation");

            // Deleting the CRD: it stays Terminating while an object holds a finalizer, new
            // objects are refused, and it goes once the object is gone.
            api.patch("w", &pp, &Patch::Merge(json!({"metadata": {"finalizers": ["kseal.dev/hold"]}}))).await?;
            let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
            let crd_name = format!("widgets.{}", ar.group);
            let crd = crds.delete(&crd_name, &DeleteParams::default()).await?.left().context("CRD delete returns the CRD")?;
            ensure!(
                crd.metadata.deletion_timestamp.is_some()
                    && crd.finalizers().contains(&"customresourcecleanup.apiextensions.k8s.io".to_owned()),
                "CRD terminating: {:?}",
                crd.finalizers()
            );
            let w = eventually("object being deleted", DEADLINE, || async {
                let w = api.get("w").await?;
                Ok(w.metadata.deletion_timestamp.is_some().then_some(w))
            })
            .await?;
            ensure!(w.metadata.generation == Some(4), "deletion bumps generation: {:?}", w.metadata.generation);
            let another: DynamicObject = serde_json::from_value(json!({
                "apiVersion": ar.api_version, "kind": "Widget", "metadata": {"name": "w2"}, "spec": {}
            }))?;
            let e = expect_error(api.create(&PostParams::default(), &another).await, 405, "MethodNotAllowed")?;
            ensure!(e.message == "create not allowed while custom resource definition is terminating", "message: {}", e.message);
            api.patch("w", &pp, &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
            eventually("CRD gone", DEADLINE, || async { Ok(crds.get_opt(&crd_name).await?.is_none().then_some(())) }).await?;
            Ok(())
        }
    })
    .await;
    let _ = Api::<CustomResourceDefinition>::all(client.clone())
        .delete(&crd_name, &DeleteParams::default())
        .await;
    res
}

/// Deletion with finalizers: deletionTimestamp, no new finalizers, removal with the last one.
pub async fn finalizers(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-fin", |ns| async move {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let mut f = cm("f", json!({}))?;
        f.metadata.finalizers = Some(vec!["kseal.dev/a".into(), "kseal.dev/b".into()]);
        cms.create(&PostParams::default(), &f).await?;
        let res = cms.delete("f", &DeleteParams::default()).await?;
        let o = res.left().context("delete with finalizers returns the object")?;
        ensure!(o.metadata.deletion_timestamp.is_some(), "deletionTimestamp set");
        let o = cms.get("f").await?;
        ensure!(o.metadata.deletion_timestamp.is_some() && o.finalizers().len() == 2, "still there, terminating");
        let e = expect_error(
            cms.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["kseal.dev/a", "kseal.dev/b", "kseal.dev/c"]}}))).await,
            422,
            "Invalid",
        )?;
        ensure!(e.message.contains("no new finalizers can be added if the object is being deleted"), "message: {}", e.message);
        ensure!(cms.delete("f", &DeleteParams::default()).await?.is_left(), "second delete returns the object");
        let wp = WatchParams::default().timeout(30).fields("metadata.name=f");
        let mut s = cms.watch(&wp, &rv(&o)).await?.boxed();
        cms.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["kseal.dev/b"]}}))).await?;
        ensure!(cms.get_opt("f").await?.is_some(), "one finalizer left");
        cms.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await?;
        ensure!(cms.get_opt("f").await?.is_none(), "removed with the last finalizer");
        let (t, _) = next_event(&mut s).await?;
        ensure!(t == "MODIFIED", "first: {t}");
        let (t, o) = next_event(&mut s).await?;
        ensure!(t == "DELETED" && o.name_any() == "f", "then: {t}");
        Ok(())
    })
    .await
}

fn owner_ref(o: &ConfigMap) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.name_any(), "uid": o.metadata.uid})
}

/// ownerReference garbage collection: background deletion, dangling references, orphaning.
pub async fn garbage_collection(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-gc", |ns| async move {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let pp = PostParams::default();
        let owner = cms.create(&pp, &cm("owner", json!({}))?).await?;
        let owner2 = cms.create(&pp, &cm("owner2", json!({}))?).await?;
        let owner3 = cms.create(&pp, &cm("owner3", json!({}))?).await?;
        let secret = |name: &str, refs: Vec<Value>| -> anyhow::Result<Secret> {
            Ok(serde_json::from_value(
                json!({"metadata": {"name": name, "ownerReferences": refs}, "data": {"k": "dg=="}}),
            )?)
        };
        secrets
            .create(&pp, &secret("dep1", vec![owner_ref(&owner)])?)
            .await?;
        secrets
            .create(
                &pp,
                &secret("dep2", vec![owner_ref(&owner), owner_ref(&owner2)])?,
            )
            .await?;
        secrets
            .create(&pp, &secret("orph", vec![owner_ref(&owner3)])?)
            .await?;
        let res = cms.delete("owner", &DeleteParams::background()).await?;
        ensure!(res.is_right(), "background deletion returns a Status");
        eventually("dep1 collected", DEADLINE, || async {
            Ok(secrets.get_opt("dep1").await?.is_none().then_some(()))
        })
        .await?;
        let uid2 = owner2.metadata.uid.clone();
        eventually(
            "dangling ownerReference removed from dep2",
            DEADLINE,
            || async {
                let d = secrets.get("dep2").await?;
                let uids: Vec<String> =
                    d.owner_references().iter().map(|r| r.uid.clone()).collect();
                Ok((uids == [uid2.clone().unwrap_or_default()]).then_some(()))
            },
        )
        .await?;
        let o = cms
            .delete("owner3", &DeleteParams::orphan())
            .await?
            .left()
            .context("orphan deletion returns the object")?;
        ensure!(
            o.metadata.deletion_timestamp.is_some()
                && o.finalizers().contains(&"orphan".to_owned()),
            "orphan finalizer: {:?}",
            o.finalizers()
        );
        eventually("owner3 gone", DEADLINE, || async {
            Ok(cms.get_opt("owner3").await?.is_none().then_some(()))
        })
        .await?;
        let o = secrets
            .get("orph")
            .await
            .context("orphaned dependent survives")?;
        ensure!(
            o.owner_references().is_empty(),
            "orphan lost its ownerReference: {:?}",
            o.owner_references()
        );
        ensure!(owner3.metadata.uid.is_some(), "owner3 had a uid");
        // Explicit Foreground policy also removes the dependents eventually.
        let owner4 = cms.create(&pp, &cm("owner4", json!({}))?).await?;
        secrets
            .create(&pp, &secret("dep4", vec![owner_ref(&owner4)])?)
            .await?;
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..Default::default()
        };
        let o = cms
            .delete("owner4", &dp)
            .await?
            .left()
            .context("foreground deletion returns the object")?;
        ensure!(
            o.metadata.deletion_timestamp.is_some()
                && o.finalizers().contains(&"foregroundDeletion".to_owned()),
            "foregroundDeletion finalizer: {:?}",
            o.finalizers()
        );
        eventually("foreground deletion", DEADLINE, || async {
            Ok(
                (secrets.get_opt("dep4").await?.is_none()
                    && cms.get_opt("owner4").await?.is_none())
                .then_some(()),
            )
        })
        .await?;
        Ok(())
    })
    .await
}

/// Deleting a namespace deletes its contents, then the namespace.
pub async fn namespace_lifecycle(client: Client) -> anyhow::Result<()> {
    let ns = create_namespace(&client, "kt-ns").await?;
    let nss: Api<Namespace> = Api::all(client.clone());
    let n = nss.get(&ns).await?;
    ensure!(
        n.status.and_then(|s| s.phase).as_deref() == Some("Active"),
        "namespace Active"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(&PostParams::default(), &cm("c", json!({}))?)
        .await?;
    let mut held = cm("held", json!({}))?;
    held.metadata.finalizers = Some(vec!["kseal.dev/hold".into()]);
    cms.create(&PostParams::default(), &held).await?;
    let res = nss.delete(&ns, &DeleteParams::default()).await?;
    let n = res
        .left()
        .context("namespace delete returns the namespace")?;
    ensure!(
        n.status.and_then(|s| s.phase).as_deref() == Some("Terminating"),
        "Terminating"
    );
    eventually("namespace contents deleted", DEADLINE, || async {
        Ok(cms.get_opt("c").await?.is_none().then_some(()))
    })
    .await?;
    // An object with a finalizer keeps the namespace Terminating; nothing new can be created.
    eventually("held object terminating", DEADLINE, || async {
        Ok(cms
            .get("held")
            .await?
            .metadata
            .deletion_timestamp
            .map(|_| ()))
    })
    .await?;
    let n = nss.get(&ns).await?;
    ensure!(
        n.status.and_then(|s| s.phase).as_deref() == Some("Terminating"),
        "still Terminating"
    );
    let e = expect_error(
        cms.create(&PostParams::default(), &cm("new", json!({}))?)
            .await,
        403,
        "Forbidden",
    )?;
    ensure!(
        e.message
            == format!(
                "configmaps \"new\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"
            ),
        "message: {}",
        e.message
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually("namespace deleted", DEADLINE, || async {
        Ok(nss.get_opt(&ns).await?.is_none().then_some(()))
    })
    .await?;
    for d in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        ensure!(nss.get_opt(d).await?.is_some(), "built-in namespace {d}");
    }
    Ok(())
}

/// The SealedSecret CRD (as Bitnami ships it: `bitnami.com/v1alpha1`, namespaced, status).
pub fn sealed_secret_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "sealedsecrets.bitnami.com"},
        "spec": {
            "group": "bitnami.com",
            "names": {"kind": "SealedSecret", "listKind": "SealedSecretList", "plural": "sealedsecrets", "singular": "sealedsecret"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    },
                    "required": ["spec"]
                }}
            }]
        }
    })
}

/// Registers the SealedSecret CRD if it is missing and CRUDs a SealedSecret with a status and an
/// owned Secret.
pub async fn crd_sealed_secret(client: Client) -> anyhow::Result<()> {
    // Register the CRD unless someone (another test, the project's own CRD) already did; never
    // overwrite it, since other tests may share the server.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt("sealedsecrets.bitnami.com").await?.is_none() {
        let crd: CustomResourceDefinition = serde_json::from_value(sealed_secret_crd())?;
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context("creating the SealedSecret CRD"),
        }
    }
    let gvk = GroupVersionKind::gvk("bitnami.com", "v1alpha1", "SealedSecret");
    let ar = wait_established(&client, "sealedsecrets.bitnami.com", &gvk).await?;
    ensure!(ar.plural == "sealedsecrets", "plural: {}", ar.plural);
    let (_, caps) = kube::discovery::pinned_kind(&client, &gvk).await?;
    ensure!(
        caps.subresources
            .iter()
            .any(|(r, _)| r.plural == "sealedsecrets/status" || r.plural == "status"),
        "status subresource discovered: {:?}",
        caps.subresources
            .iter()
            .map(|s| &s.0.plural)
            .collect::<Vec<_>>()
    );
    run_in_namespace(client.clone(), "kt-ss", |ns| async move {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let ss: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
            "metadata": {"name": "mysecret"},
            "spec": {"encryptedData": {"password": "AgBy3i4OJSWK+PiTySYZZA=="}, "template": {"metadata": {"labels": {"app": "x"}}}}
        }))?;
        let created = api.create(&PostParams::default(), &ss).await?;
        ensure!(created.metadata.generation == Some(1), "generation 1");
        ensure!(created.types.as_ref().is_some_and(|t| t.kind == "SealedSecret"), "kind set");
        let l = api.list(&ListParams::default()).await?;
        ensure!(l.items.len() == 1 && l.items[0].types.as_ref().is_some_and(|t| t.kind == "SealedSecret"), "custom resource list items keep kind");
        let o = api
            .patch_status("mysecret", &PatchParams::default(), &Patch::Merge(json!({"status": {"observedGeneration": 1, "conditions": [{"type": "Synced", "status": "True"}]}})))
            .await?;
        ensure!(o.data["status"]["conditions"][0]["type"] == "Synced", "status: {:?}", o.data);
        // An owned Secret, as the controller creates it, is collected with its SealedSecret.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "mysecret", "ownerReferences": [{
                "apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret", "name": "mysecret",
                "uid": created.metadata.uid, "controller": true
            }]},
            "data": {"password": "cw=="}
        }))?;
        secrets.patch("mysecret", &PatchParams::apply("kt-controller").force(), &Patch::Apply(serde_json::to_value(&s)?.as_object().map(|m| {
            let mut m = m.clone();
            m.insert("apiVersion".into(), "v1".into());
            m.insert("kind".into(), "Secret".into());
            Value::Object(m)
        }).unwrap_or_default())).await?;
        api.delete("mysecret", &DeleteParams::default()).await?;
        eventually("owned secret collected", DEADLINE, || async { Ok(secrets.get_opt("mysecret").await?.is_none().then_some(())) }).await?;
        Ok(())
    })
    .await
}

/// Immutable Secrets reject data changes with 422.
pub async fn immutable_secret(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-imm", |ns| async move {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let s: Secret = serde_json::from_value(
            json!({"metadata": {"name": "i"}, "immutable": true, "data": {"a": "YQ=="}}),
        )?;
        secrets.create(&PostParams::default(), &s).await?;
        let pp = PatchParams::default();
        let e = expect_error(
            secrets
                .patch("i", &pp, &Patch::Merge(json!({"data": {"a": "Yg=="}})))
                .await,
            422,
            "Invalid",
        )?;
        ensure!(
            e.message
                .ends_with("field is immutable when `immutable` is set"),
            "message: {}",
            e.message
        );
        ensure!(
            e.message.starts_with("Secret \"i\" is invalid"),
            "message: {}",
            e.message
        );
        expect_error(
            secrets
                .patch("i", &pp, &Patch::Merge(json!({"immutable": false})))
                .await,
            422,
            "Invalid",
        )?;
        expect_error(
            secrets
                .patch("i", &pp, &Patch::Merge(json!({"stringData": {"b": "new"}})))
                .await,
            422,
            "Invalid",
        )?;
        let o = secrets
            .patch(
                "i",
                &pp,
                &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}})),
            )
            .await?;
        ensure!(o.labels().get("l").is_some(), "metadata stays mutable");
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let mut c = cm("i", json!({"a": "1"}))?;
        c.immutable = Some(true);
        cms.create(&PostParams::default(), &c).await?;
        let e = expect_error(
            cms.patch("i", &pp, &Patch::Merge(json!({"data": {"a": "2"}})))
                .await,
            422,
            "Invalid",
        )?;
        ensure!(
            e.message
                .ends_with("field is immutable when `immutable` is set"),
            "message: {}",
            e.message
        );
        secrets.delete("i", &DeleteParams::default()).await?;
        Ok(())
    })
    .await
}

/// Leases (leader election) and events.k8s.io Events from kube-runtime's Recorder.
pub async fn leases_and_events(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-lease", |ns| async move {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let l: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))?;
        let l = leases.create(&PostParams::default(), &l).await?;
        let mut taken = l.clone();
        taken.spec.get_or_insert_with(Default::default).holder_identity = Some("b".into());
        let taken = leases.replace("leader", &PostParams::default(), &taken).await?;
        expect_error(leases.replace("leader", &PostParams::default(), &l).await, 409, "Conflict")?;
        ensure!(taken.spec.and_then(|s| s.holder_identity).as_deref() == Some("b"), "lease taken");

        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let c = cms.create(&PostParams::default(), &cm("evt", json!({}))?).await?;
        let recorder = kube::runtime::events::Recorder::new(client.clone(), "kseal-testkit".into());
        let ev = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "Unsealed".into(),
            note: Some("hello".into()),
            action: "Unseal".into(),
            secondary: None,
        };
        recorder.publish(&ev, &c.object_ref(&())).await?;
        recorder.publish(&ev, &c.object_ref(&())).await?;
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
        let list = events.list(&ListParams::default()).await?;
        let e = list.items.iter().find(|e| e.reason.as_deref() == Some("Unsealed")).context("event recorded")?;
        ensure!(e.note.as_deref() == Some("hello"), "note");
        ensure!(e.series.as_ref().is_some_and(|s| s.count == 2), "second publish patches the series: {:?}", e.series);
        ensure!(e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("evt"), "regarding");
        // Both Event APIs serve the same objects.
        let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
        let ce = core.get(&e.name_any()).await?;
        ensure!(ce.message.as_deref() == Some("hello") && ce.reason.as_deref() == Some("Unsealed"), "core/v1 view: {:?}", ce.message);
        ensure!(ce.involved_object.name.as_deref() == Some("evt"), "involvedObject");
        ensure!(ce.reporting_component.as_deref() == Some("kseal-testkit"), "reportingComponent: {:?}", ce.reporting_component);
        let by_field = events.list(&ListParams::default().fields("regarding.name=evt")).await?;
        ensure!(by_field.items.len() == 1, "events.k8s.io field selector on regarding.name");
        Ok(())
    })
    .await
}

/// Typed Secrets are checked as kube-apiserver 1.20 checks them (`ValidateSecret`), with its
/// messages; the two Docker types quote Go's JSON parser, which quotes a byte of the value
/// (what kseal-controller must not repeat in status and Events).
pub async fn secret_types(client: Client) -> anyhow::Result<()> {
    run_in_namespace(client.clone(), "kt-types", |ns| async move {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let redacted = "Invalid value: \"<secret contents redacted>\"";
        let refused = [
            (
                "kubernetes.io/dockerconfigjson",
                json!({".dockerconfigjson": "SHVudGVyMg=="}),
                format!("data[.dockerconfigjson]: {redacted}: invalid character 'H' looking for beginning of value"),
            ),
            (
                "kubernetes.io/dockerconfigjson",
                json!({".dockerconfigjson": "eyJhIjoxfVpx"}),
                format!("data[.dockerconfigjson]: {redacted}: invalid character 'Z' after top-level value"),
            ),
            (
                "kubernetes.io/dockerconfigjson",
                json!({".dockerconfigjson": "WzEsMl0="}),
                format!("data[.dockerconfigjson]: {redacted}: json: cannot unmarshal array into Go value of type map[string]interface {{}}"),
            ),
            (
                "kubernetes.io/dockerconfigjson",
                json!({"other": "eA=="}),
                "data[.dockerconfigjson]: Required value".to_owned(),
            ),
            (
                "kubernetes.io/dockercfg",
                json!({".dockercfg": "eyJhIiAxfQ=="}),
                format!("data[.dockercfg]: {redacted}: invalid character '1' after object key"),
            ),
            (
                "kubernetes.io/basic-auth",
                json!({"x": "eA=="}),
                "[data[%s][username]: Required value, data[%s][password]: Required value]".to_owned(),
            ),
            (
                "kubernetes.io/ssh-auth",
                json!({"ssh-privatekey": ""}),
                "data[%s][ssh-privatekey]: Required value".to_owned(),
            ),
            (
                "kubernetes.io/tls",
                json!({}),
                "[data[tls.crt]: Required value, data[tls.key]: Required value]".to_owned(),
            ),
        ];
        for (i, (type_, data, want)) in refused.into_iter().enumerate() {
            let name = format!("r{i}");
            let s: Secret = serde_json::from_value(
                json!({"metadata": {"name": name}, "type": type_, "data": data}),
            )?;
            let e = expect_error(
                secrets.create(&PostParams::default(), &s).await,
                422,
                "Invalid",
            )?;
            ensure!(
                e.message == format!("Secret \"{name}\" is invalid: {want}"),
                "{type_}: message: {}",
                e.message
            );
        }
        let accepted = [
            ("kubernetes.io/dockerconfigjson", json!({".dockerconfigjson": "eyJhdXRocyI6e319"})),
            ("kubernetes.io/dockerconfigjson", json!({".dockerconfigjson": "bnVsbA=="})),
            ("kubernetes.io/basic-auth", json!({"password": ""})),
            ("kubernetes.io/tls", json!({"tls.crt": "", "tls.key": ""})),
        ];
        for (i, (type_, data)) in accepted.into_iter().enumerate() {
            let s: Secret = serde_json::from_value(
                json!({"metadata": {"name": format!("a{i}")}, "type": type_, "data": data}),
            )?;
            secrets
                .create(&PostParams::default(), &s)
                .await
                .with_context(|| format!("{type_} {i}"))?;
        }
        Ok(())
    })
    .await
}

/// Runs every scenario, one after another, naming the one that failed.
pub async fn all(client: Client) -> anyhow::Result<()> {
    crud_and_errors(client.clone())
        .await
        .context("crud_and_errors")?;
    watch_resume(client.clone()).await.context("watch_resume")?;
    ssa_prune(client.clone()).await.context("ssa_prune")?;
    status_and_generation(client.clone())
        .await
        .context("status_and_generation")?;
    finalizers(client.clone()).await.context("finalizers")?;
    garbage_collection(client.clone())
        .await
        .context("garbage_collection")?;
    namespace_lifecycle(client.clone())
        .await
        .context("namespace_lifecycle")?;
    crd_sealed_secret(client.clone())
        .await
        .context("crd_sealed_secret")?;
    immutable_secret(client.clone())
        .await
        .context("immutable_secret")?;
    secret_types(client.clone()).await.context("secret_types")?;
    leases_and_events(client)
        .await
        .context("leases_and_events")?;
    Ok(())
}
