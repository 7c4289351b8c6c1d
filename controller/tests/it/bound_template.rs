//! Template binding (issue 35) through the controller: a template-bound SealedSecret opens;
//! once its `spec.template` is edited it fails with one fixed message and a Warning that
//! hold nothing computed from the values, and the outcome is the same for a right and a
//! wrong guess. Runs on kseal's test API server and on the reference kube-apiserver (where
//! the object is applied with `kubectl` and read back, and its template digest must not
//! change).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::binding::template_digest;
use kseal_api::constants::{NAMESPACE_WIDE_ANNOTATION, TEMPLATE_BINDING_ANNOTATION};
use kseal_api::{SealOptions, SealedSecret, TEMPLATE_BINDING_MISMATCH, seal_secret};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

/// A namespace-wide bound SealedSecret (so two objects fail with the very same words: the
/// scope target names the namespace only).
fn bound(ns: &str, name: &str) -> SealedSecret {
    let mut s = secret(ns, name, &[("password", "Hunter2")]);
    s.metadata.labels = Some(map(&[("app", "db")]));
    s.metadata.annotations = Some(map(&[(NAMESPACE_WIDE_ANNOTATION, "true")]));
    let options = SealOptions {
        bind_template: true,
        ..SealOptions::default()
    };
    seal_secret(&s, key(0).public_key(), &options).unwrap()
}

/// Creates `ss`: with `kubectl apply` on the reference apiserver when `kubectl` is given,
/// else through the API.
async fn apply(client: &Client, ss: &SealedSecret, kubectl: Option<&(String, String)>) {
    let Some((kubectl, kubeconfig)) = kubectl else {
        create_ss(client, ss).await;
        return;
    };
    let mut doc = serde_json::to_value(ss).unwrap();
    doc["apiVersion"] = json!("bitnami.com/v1alpha1");
    doc["kind"] = json!("SealedSecret");
    let yaml = serde_saphyr::to_string(&doc).unwrap();
    let mut child = std::process::Command::new(kubectl)
        .args(["--kubeconfig", kubeconfig, "apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn edit_template(client: &Client, ns: &str, name: &str, source: &str) {
    Api::<SealedSecret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"data": {"out": source}}}})),
        )
        .await
        .unwrap();
}

async fn scenario(client: Client, kubectl: Option<(String, String)>) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    let running = Running::start(&client, cl.config()).await;
    let ssapi: Api<SealedSecret> = Api::namespaced(client.clone(), &ns);

    // Bound objects open, and the apiserver round trip keeps their digest.
    for name in ["right", "wrong"] {
        let ss = bound(&ns, name);
        apply(&client, &ss, kubectl.as_ref()).await;
        let stored = ssapi.get(name).await.unwrap();
        assert_eq!(
            template_digest(stored.spec.template.as_ref()),
            template_digest(ss.spec.template.as_ref()),
            "the apiserver changed the template of {name}"
        );
        assert_eq!(
            stored.annotations().get(TEMPLATE_BINDING_ANNOTATION),
            Some(&"v1".to_owned())
        );
        let s = wait_secret(&client, &ns, name, "bound secret", |_| true).await;
        assert_eq!(data_of(&s), map(&[("password", "Hunter2")]));
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
    }

    // The attacker edits each template with a guess; one guess is right.
    let probe = |guess: &str| {
        format!(r#"{{{{ if eq .password "{guess}" }}}}{{{{ fail "yes" }}}}{{{{ end }}}}x"#)
    };
    edit_template(&client, &ns, "right", &probe("Hunter2")).await;
    edit_template(&client, &ns, "wrong", &probe("nope")).await;
    let mut outcomes = Vec::new();
    for name in ["right", "wrong"] {
        let failed = wait_synced(&client, &ns, name, "False", "UnsealFailed").await;
        let message = failed.synced_condition().unwrap().message.clone().unwrap();
        assert!(message.contains(TEMPLATE_BINDING_MISMATCH), "{message}");
        for leak in ["Hunter2", "yes", "line", "`out`"] {
            assert!(!message.contains(leak), "{leak:?} in {message}");
        }
        let note = wait_event(&client, &ns, name, "ErrUnsealFailed")
            .await
            .note
            .unwrap_or_default();
        assert!(note.contains(TEMPLATE_BINDING_MISMATCH), "{note}");
        assert!(!note.contains("Hunter2") && !note.contains("yes"), "{note}");
        // Nothing was rendered: the Secret still holds what the bound template gave.
        let s = Api::<Secret>::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .unwrap();
        assert_eq!(data_of(&s), map(&[("password", "Hunter2")]));
        outcomes.push((message, note));
    }
    assert_eq!(outcomes[0], outcomes[1], "the outcome depends on the guess");

    // Removing the binding annotation does not bring rendering back: the label differs.
    ssapi
        .patch(
            "wrong",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {TEMPLATE_BINDING_ANNOTATION: null}}}),
            ),
        )
        .await
        .unwrap();
    let stripped = ssapi.get("wrong").await.unwrap();
    assert!(
        !stripped
            .annotations()
            .contains_key(TEMPLATE_BINDING_ANNOTATION)
    );
    // An annotation edit keeps the generation: wait for the message itself.
    eventually("unbound object refused", DEADLINE, || async {
        let ss = ssapi.get("wrong").await?;
        let c = ss.synced_condition().cloned();
        Ok(c.filter(|c| {
            c.status == "False"
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.contains("failed to decrypt items `password`"))
        }))
    })
    .await
    .unwrap();
    let s = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("wrong")
        .await
        .unwrap();
    assert_eq!(data_of(&s), map(&[("password", "Hunter2")]));

    running.stop().await;
    cl.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_edit_reveals_nothing_about_the_values_on_the_test_server() {
    scenario(TestApiServer::new().client(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_edit_reveals_nothing_about_the_values_on_a_real_apiserver() {
    let test = "a_template_edit_reveals_nothing_about_the_values";
    let Some(client) = real_client(test).await else {
        return;
    };
    // Applied with the reference kubectl, as a GitOps tool would.
    let kubectl = match (
        std::env::var("KSEAL_REFAPI_KUBECTL"),
        std::env::var("KSEAL_REFAPI_KUBECONFIG"),
    ) {
        (Ok(k), Ok(c)) if !k.is_empty() => Some((k, c)),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "KSEAL_REFAPI_KUBECTL is not set, but CI=true"
            );
            kseal_testkit::skipped(&format!(
                "{test}: KSEAL_REFAPI_KUBECTL is not set: created through the API instead of kubectl"
            ));
            None
        }
    };
    scenario(client, kubectl).await;
}

/// `/v1/verify` opens a bound object only with its own template (digested, never rendered),
/// answers a right and a wrong guess the same, and `/v1/rotate` keeps the binding.
#[tokio::test]
async fn verify_and_rotate_honour_the_template_binding() {
    use axum::body::Body;
    use http::{Request, StatusCode};
    use kseal_controller::State;
    use kseal_controller::serve::http::{ApiOptions, api_router};
    use tower::ServiceExt as _;

    let state = State::new();
    state.keys.replace(
        [key(0).clone()]
            .into_iter()
            .collect::<kseal_keys::KeyRing>(),
    );
    let app = api_router(
        state,
        ApiOptions {
            rate_limit: 1000.0,
            rate_limit_burst: 1000,
            ..ApiOptions::default()
        },
    );
    let post = |uri: &'static str, body: serde_json::Value| {
        let app = app.clone();
        async move {
            let request = Request::builder()
                .method("POST")
                .uri(uri)
                .body(Body::from(body.to_string()))
                .unwrap();
            let response = app.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, String::from_utf8(bytes.to_vec()).unwrap())
        }
    };
    let sealed = serde_json::to_value(bound("prod", "db")).unwrap();
    let (status, text) = post("/v1/verify", sealed.clone()).await;
    assert_eq!(status, StatusCode::OK, "{text}");

    let mut answers = Vec::new();
    for guess in ["Hunter2", "nope"] {
        let mut edited = sealed.clone();
        edited["spec"]["template"]["data"] = json!({
            "out": format!(r#"{{{{ if eq .password "{guess}" }}}}{{{{ fail "yes" }}}}{{{{ end }}}}"#)
        });
        answers.push(post("/v1/verify", edited).await);
    }
    assert_eq!(answers[0], answers[1], "the answer depends on the guess");
    assert_eq!(answers[0].0, StatusCode::CONFLICT);
    assert!(
        answers[0].1.contains(TEMPLATE_BINDING_MISMATCH),
        "{}",
        answers[0].1
    );

    // Rotate re-seals with the bound label: the result still opens only with its template.
    let (status, text) = post("/v1/rotate", sealed.clone()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let rotated: SealedSecret = serde_json::from_str(&text).unwrap();
    let ring: kseal_keys::KeyRing = [key(0).clone()].into_iter().collect();
    let secret = kseal_api::unseal(&rotated, &ring).unwrap();
    assert_eq!(data_of(&secret), map(&[("password", "Hunter2")]));
    let mut edited = rotated.clone();
    edited.spec.template.as_mut().unwrap().type_ = Some("Opaque".into());
    assert!(matches!(
        kseal_api::unseal(&edited, &ring).unwrap_err(),
        kseal_api::Error::TemplateBinding { .. }
    ));
}
