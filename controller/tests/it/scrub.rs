//! Error text never carries Secret data: a `kubernetes.io/dockerconfigjson` SealedSecret whose
//! value is not JSON is refused by the API server with a message that quotes the value's
//! first byte (`invalid character 'H' looking for beginning of value`); the controller's
//! status and Events must not repeat it. Against kseal-testkit's API server, and against the
//! reference kube-apiserver when `KSEAL_REFAPI_KUBECONFIG` is set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use k8s_openapi::api::core::v1::Secret;
use kseal_controller::reconcile::reason;
use kseal_testkit::TestApiServer;
use kube::Client;
use kube::api::{Api, PostParams};

/// Not JSON, and every byte of it is a letter no message should show.
const PLAINTEXT: &str = "HqZx7-Vv9kJw";

/// What the controller writes instead of the API server's validation error on the data.
const DATA_WITHHELD: &str = "the API server refused the Secret's data (validation failed; details withheld: they could reveal values)";

/// What kube-apiserver 1.20.2 answers for a Secret holding [`PLAINTEXT`].
const APISERVER_MESSAGE: &str = "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'H' looking for beginning of value";

fn docker_secret(namespace: &str, name: &str) -> Secret {
    let mut s = secret(namespace, name, &[(".dockerconfigjson", PLAINTEXT)]);
    s.type_ = Some("kubernetes.io/dockerconfigjson".to_owned());
    s
}

/// Whether `text` shows any byte of the plaintext in quotes, or a run of it.
fn leaks(text: &str) -> bool {
    PLAINTEXT
        .chars()
        .any(|c| text.contains(&format!("'{c}'")) || text.contains(&format!("\"{c}\"")))
        || PLAINTEXT
            .as_bytes()
            .windows(3)
            .any(|w| text.contains(std::str::from_utf8(w).unwrap()))
}

async fn dockerconfigjson_error_keeps_the_plaintext_out_of_status_and_events(client: Client) {
    let cluster = Cluster::new(client.clone()).await;
    let ns = cluster.app.clone();

    // The API server itself quotes the byte (this is what the controller has to scrub).
    let direct = Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &docker_secret(&ns, "direct"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = direct else {
        panic!("expected an API error, got {direct}");
    };
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        format!("Secret \"direct\" is invalid: {APISERVER_MESSAGE}")
    );

    let running = Running::start(&client, cluster.config()).await;
    let ss = seal(&docker_secret(&ns, "pull"), key(0));
    assert_eq!(
        ss.spec.template.as_ref().and_then(|t| t.type_.as_deref()),
        Some("kubernetes.io/dockerconfigjson")
    );
    create_ss(&client, &ss).await;
    let synced = wait_synced(&client, &ns, "pull", "False", reason::UPDATE_FAILED).await;
    let message = synced
        .synced_condition()
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    // Every validation error on the data reads the same (which Go error it was could
    // depend on the value): one fixed sentence, no key, no detail.
    assert!(message.contains(DATA_WITHHELD), "{message}");
    assert!(!message.contains("invalid character"), "{message}");
    assert!(!leaks(&message), "status: {message}");

    let event = wait_event(&client, &ns, "pull", "ErrUpdateFailed").await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains(DATA_WITHHELD), "{note}");
    assert!(!leaks(&note), "event: {note}");
    for e in events(&client, &ns, "pull", "ErrUpdateFailed").await {
        let note = e.note.unwrap_or_default();
        assert!(!leaks(&note), "event: {note}");
    }
    assert!(
        Api::<Secret>::namespaced(client.clone(), &ns)
            .get_opt("pull")
            .await
            .unwrap()
            .is_none()
    );
    running.stop().await;
    cluster.cleanup().await;
}

#[test]
fn the_leak_check_sees_a_quoted_byte() {
    assert!(leaks(APISERVER_MESSAGE));
    assert!(!leaks(
        "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character … looking for beginning of value"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerconfigjson_error_keeps_the_plaintext_out_of_status_and_events_on_the_test_server() {
    let server = TestApiServer::new();
    dockerconfigjson_error_keeps_the_plaintext_out_of_status_and_events(server.client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerconfigjson_error_keeps_the_plaintext_out_of_status_and_events_on_a_real_apiserver() {
    if let Some(client) =
        real_client("dockerconfigjson_error_keeps_the_plaintext_out_of_status_and_events").await
    {
        dockerconfigjson_error_keeps_the_plaintext_out_of_status_and_events(client).await;
    }
}
