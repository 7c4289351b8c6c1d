//! The reconciler's writes, reading back only what it keeps of the answer.
//!
//! kube's `Api::create`, `Api::replace` and `Api::patch_status` parse the API server's answer
//! into the whole object: a Secret with its data, a SealedSecret with every ciphertext and
//! its `managedFields`, an Event. The reconciler keeps at most the resourceVersion a Secret
//! write returned. These functions send the same requests (same paths, parameters, bodies and
//! error handling: a refusal is the same `kube::Error::Api`) and read only that metadata
//! from a Secret write's answer (serde skips the rest without building it), and nothing at
//! all from a status patch's or an Event's. On a cold start this is three objects parsed and
//! dropped per SealedSecret that no longer are, and two answers not even scanned.
//!
//! Every request runs under the reconciler's deadline
//! ([`crate::cluster::apihealth::REQUEST_DEADLINE`]): no answer by then fails it as a `504`,
//! which counts towards an API-server outage.
//!
//! The answers are read as the bytes hyper received, not through kube's `request_text`,
//! which copies each answer into a `String` and checks it as UTF-8 first: a Secret write's
//! answer is parsed from its bytes, and a status patch's or an Event's is read to its end
//! (so the connection serves the next request) without being kept. A Secret's answer holds
//! its data in base64: skipped by serde, it is never copied out of the answer's bytes, which
//! are dropped with it.
//!
//! A Secret write's request body holds the Secret's data, and its answer echoes it: both are
//! zeroized once sent and read ([`zeroized_body`], and the answer's bytes in [`send`]), like
//! the unsealed result they came from. What hyper and the TLS layer keep in their own
//! buffers meanwhile is theirs to overwrite.

use std::fmt::Debug;

use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::Body;
use kube::core::{Request, Status};
use kube::runtime::events::Reporter;
use kube::{Client, Resource};
use serde::{Deserialize, Serialize};

use crate::cluster::apihealth::within_deadline;

/// The part of a write's answer the reconciler keeps.
#[derive(Debug, Default, Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    resource_version: Option<String>,
}

fn request<K: Resource<DynamicType = ()>>(namespace: &str) -> Request {
    Request::new(K::url_path(&(), Some(namespace)))
}

fn body<K: Serialize>(object: &K) -> kube::Result<Vec<u8>> {
    // A Secret's or an Event's body is about 1 KiB: `to_vec` starts at 128 bytes and grows
    // by doubling, copying what it wrote at each step.
    let mut body = Vec::with_capacity(1024);
    serde_json::to_writer(&mut body, object).map_err(kube::Error::SerdeError)?;
    Ok(body)
}

/// Sends a built request as kube's `Api` method `verb` does (the verb names the request in
/// kube's tracing) and returns the answer's resourceVersion, parsed from the answer's bytes
/// as they came (kube's `request` copies them into a `String` first).
async fn send(
    client: &Client,
    built: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> kube::Result<Option<String>> {
    let request = named(built, verb)?;
    let bytes = within_deadline(async {
        let body = answered(client, request).await?;
        // The answer to a Secret write echoes its data: wiped when dropped. `Vec::from`
        // takes the buffer over without a copy when nothing else shares it.
        Ok(zeroize::Zeroizing::new(Vec::from(
            body.collect().await?.to_bytes(),
        )))
    })
    .await?;
    let written: Written = serde_json::from_slice(&bytes).map_err(kube::Error::SerdeError)?;
    Ok(written.metadata.resource_version)
}

/// Sends `request` and returns the answer's body when its status is a success. An error
/// status becomes the `kube::Error::Api` kube's own `request_text` returns: the answer's
/// `Status` when it is one, else a failure with the answer's text and the status code.
async fn answered(client: &Client, request: http::Request<Vec<u8>>) -> kube::Result<Body> {
    let answer = client.send(request.map(zeroized_body)).await?;
    let status = answer.status();
    if status.is_client_error() || status.is_server_error() {
        let bytes = answer.into_body().collect().await?.to_bytes();
        return Err(api_error(status.as_u16(), &bytes));
    }
    Ok(answer.into_body())
}

/// `body` as a request body that is zeroized when the last reference to it goes: after it
/// was sent, and after kube's retry layer dropped its copy (a clone shares the buffer).
fn zeroized_body(body: Vec<u8>) -> Body {
    Body::from(bytes::Bytes::from_owner(zeroize::Zeroizing::new(body)))
}

/// The error kube's `request_text` makes of an error answer (`handle_api_errors`).
fn api_error(code: u16, answer: &[u8]) -> kube::Error {
    if let Ok(status) = serde_json::from_slice::<Status>(answer) {
        return kube::Error::Api(status.boxed());
    }
    let text = String::from_utf8_lossy(answer);
    kube::Error::Api(
        Status::failure(text.trim(), "Failed to parse error data")
            .with_code(code)
            .boxed(),
    )
}

/// A built request, named `verb` for kube's tracing as kube's `Api` methods name theirs.
fn named(
    built: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> kube::Result<http::Request<Vec<u8>>> {
    let mut req = built.map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert(verb);
    Ok(req)
}

/// Sends a built request whose answer the reconciler does not read at all (a status patch,
/// an Event): the same status handling as [`send`] (a refusal is the same
/// `kube::Error::Api`), and a successful answer's body is read to its end (so the connection
/// serves the next request) without being collected or copied. A status patch answers with
/// the whole SealedSecret, every ciphertext and `managedFields` included.
async fn send_unread(
    client: &Client,
    built: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> kube::Result<()> {
    let request = named(built, verb)?;
    within_deadline(async {
        let mut body = answered(client, request).await?;
        while let Some(frame) = body.frame().await {
            frame?;
        }
        Ok(())
    })
    .await
}

/// `Api::<K>::namespaced(client, namespace).create(pp, object)`, returning the created
/// object's resourceVersion.
pub(crate) async fn create<K>(
    client: &Client,
    namespace: &str,
    pp: &PostParams,
    object: &K,
) -> kube::Result<Option<String>>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    send(
        client,
        request::<K>(namespace).create(pp, body(object)?),
        "create",
    )
    .await
}

/// `Api::<K>::namespaced(client, namespace).replace(name, pp, object)`, returning the new
/// resourceVersion.
pub(crate) async fn replace<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    pp: &PostParams,
    object: &K,
) -> kube::Result<Option<String>>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    send(
        client,
        request::<K>(namespace).replace(name, pp, body(object)?),
        "replace",
    )
    .await
}

/// `Api::<K>::namespaced(client, namespace).patch_status(name, pp, patch)`.
pub(crate) async fn patch_status<K, P>(
    client: &Client,
    namespace: &str,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<()>
where
    K: Resource<DynamicType = ()>,
    P: Serialize + Debug,
{
    send_unread(
        client,
        request::<K>(namespace).patch_subresource("status", name, pp, patch),
        "patch_status",
    )
    .await
}

/// `Api::<K>::namespaced(client, namespace).create(pp, object)` for an object whose answer
/// is not read (an Event).
pub(crate) async fn create_unread<K>(
    client: &Client,
    namespace: &str,
    pp: &PostParams,
    object: &K,
) -> kube::Result<()>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    send_unread(
        client,
        request::<K>(namespace).create(pp, body(object)?),
        "create",
    )
    .await
}

/// A new `events.k8s.io/v1` Event about `regarding`, as kube's `Recorder` builds one that
/// starts no series: named `<object>.<nanoseconds, hex>`, in the object's namespace.
pub(crate) fn event(
    reporter: &Reporter,
    regarding: ObjectReference,
    type_: &str,
    reason: &str,
    action: &str,
    note: String,
) -> K8sEvent {
    let now = jiff::Timestamp::now();
    let name = format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or(&reporter.controller),
        now.as_nanosecond()
    );
    K8sEvent {
        action: Some(action.to_owned()),
        reason: Some(reason.to_owned()),
        event_time: Some(MicroTime(now)),
        note: Some(note),
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(name),
            ..ObjectMeta::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(type_.to_owned()),
        regarding: Some(regarding),
        ..K8sEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_zeroized_body_sends_the_same_bytes_and_survives_a_retry_clone() {
        let body = zeroized_body(br#"{"data":{"k":"c2VjcmV0"}}"#.to_vec());
        // kube's retry layer keeps a clone of the request to send it again.
        let again = body.try_clone().expect("a full body clones");
        let sent = body.collect().await.unwrap().to_bytes();
        assert_eq!(&sent[..], br#"{"data":{"k":"c2VjcmV0"}}"#);
        drop(sent);
        let resent = again.collect().await.unwrap().to_bytes();
        assert_eq!(&resent[..], br#"{"data":{"k":"c2VjcmV0"}}"#);
    }

    #[test]
    fn an_answer_is_read_for_its_resource_version_only() {
        let answer = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a","resourceVersion":"42",
            "managedFields":[{"manager":"m","fieldsV1":{"f:data":{}}}]},"data":{"k":"c2VjcmV0"}}"#;
        let w: Written = serde_json::from_str(answer).unwrap();
        assert_eq!(w.metadata.resource_version.as_deref(), Some("42"));
        let bare: Written = serde_json::from_str("{}").unwrap();
        assert_eq!(bare.metadata.resource_version, None);
    }

    #[test]
    fn an_error_answer_is_the_error_kubes_request_text_returns() {
        let refused = br#"{"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"secrets \"db\" already exists","reason":"AlreadyExists","code":409}"#;
        let kube::Error::Api(status) = api_error(409, refused) else {
            panic!("not an API error");
        };
        assert_eq!(status.code, 409);
        assert_eq!(status.reason, "AlreadyExists");
        assert_eq!(status.message, r#"secrets "db" already exists"#);
        // A proxy's answer that is no Status: its text, trimmed, with the answer's code.
        let kube::Error::Api(status) = api_error(502, b"  <html>bad gateway</html>\n") else {
            panic!("not an API error");
        };
        assert_eq!(status.code, 502);
        assert_eq!(status.message, "<html>bad gateway</html>");
        assert_eq!(status.reason, "Failed to parse error data");
        assert!(status.is_failure());
    }

    #[test]
    fn an_event_matches_what_kubes_recorder_writes() {
        let reporter = Reporter {
            controller: "kseal".into(),
            instance: Some("kseal-0".into()),
        };
        let regarding = ObjectReference {
            name: Some("db".into()),
            namespace: Some("team".into()),
            ..ObjectReference::default()
        };
        let e = event(
            &reporter,
            regarding.clone(),
            "Normal",
            "Unsealed",
            "Unseal",
            "done".into(),
        );
        assert!(e.metadata.name.as_deref().unwrap().starts_with("db."));
        assert_eq!(e.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(e.regarding, Some(regarding));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reason.as_deref(), Some("Unsealed"));
        assert_eq!(e.action.as_deref(), Some("Unseal"));
        assert_eq!(e.note.as_deref(), Some("done"));
        assert_eq!(e.reporting_controller.as_deref(), Some("kseal"));
        assert_eq!(e.reporting_instance.as_deref(), Some("kseal-0"));
        assert!(e.event_time.is_some() && e.series.is_none());
    }
}
