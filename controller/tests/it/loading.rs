//! A new cluster whose key source mirrors a three-key ring one key at a time: objects sealed
//! with the key mirrored last wait for it (no `UnsealFailed`, no Warning event), then
//! unseal; a directory ring (no emulator needed), on kseal-testkit's API server and the
//! reference kube-apiserver, the controller's key-Secret creates slowed down so that the ring
//! is published part by part.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::*;
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_controller::config::KeySourceConfig;
use kseal_keystore::{AwsOptions, Location, Ring};
use kseal_testkit::TestApiServer;
use kube::api::Api;

/// A client that sends every request through `client`, the Secret creates in namespace `ns`
/// (the mirrors) each `delay` later.
fn slow_creates(client: kube::Client, ns: &str, delay: Duration) -> kube::Client {
    let path = format!("/api/v1/namespaces/{ns}/secrets");
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        let slow = request.method() == http::Method::POST && request.uri().path() == path;
        async move {
            if slow {
                tokio::time::sleep(delay).await;
            }
            client.send(request).await
        }
    });
    kube::Client::new(service, "default")
}

async fn a_new_cluster_waits_for_the_key_it_is_still_loading_without_reporting_a_failure(
    client: kube::Client,
) {
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let app = namespace(&client, "kseal-app").await;
    // The ring: key 0 active, then keys 1 and 2; the index lists them in that order and the
    // mirror follows it, so key 2 comes last.
    let dir = tempfile::tempdir().unwrap();
    let location =
        Location::parse(&format!("dir://{}", dir.path().join("ring").display())).unwrap();
    let ring = Ring::open(&location, &AwsOptions::default()).await.unwrap();
    for pair in [key(0), key(1), key(2)] {
        ring.push(pair).await.unwrap();
    }
    // Sealed with key 2 before the cluster exists: half with the sealing-key hint (kseal's
    // output), half without (kubeseal's).
    let names: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let mut ss: SealedSecret = seal(&secret(&app, name, &[("k", name)]), key(2));
        if i % 2 == 1 {
            if let Some(a) = ss.metadata.annotations.as_mut() {
                a.remove(SEALING_KEY_ANNOTATION);
            }
            assert!(ss.sealing_key_hint().is_none());
        } else {
            assert!(ss.sealing_key_hint().is_some());
        }
        create_ss(&client, &ss).await;
    }

    let mut config = config(&ctrl, &[&app]);
    config.key_source = Some(KeySourceConfig {
        location,
        interval: Duration::from_secs(3600),
        retire_grace: Duration::from_secs(7 * 86_400),
        refresh_spacing: Duration::from_secs(5),
        aws: AwsOptions::default(),
        anchor: None,
    });
    let controller_client = slow_creates(client.clone(), &ctrl, Duration::from_millis(400));
    let running = Running::start(&controller_client, config).await;
    for name in &names {
        let s = wait_secret(&client, &app, name, "the Secret", |_| true).await;
        assert_eq!(data_of(&s)["k"], *name);
        wait_synced(&client, &app, name, "True", "Unsealed").await;
    }
    assert_eq!(running.state.keys.ring().len(), 3);
    // The objects were reconciled while key 2 was still loading, and waited.
    assert!(
        running.reconciles("key_still_loading") >= 1,
        "no reconcile ran before the whole ring was loaded: the test proves nothing"
    );
    assert_eq!(running.reconciles("failed"), 0);
    let sealed: Api<SealedSecret> = Api::namespaced(client.clone(), &app);
    for name in &names {
        assert!(
            events(&client, &app, name, "ErrUnsealFailed")
                .await
                .is_empty(),
            "{name}: a Warning event for a key still loading"
        );
        let ss = sealed.get(name).await.unwrap();
        assert_eq!(
            ss.synced_condition().and_then(|c| c.reason.as_deref()),
            Some("Unsealed")
        );
    }
    let text = running.state.metrics.encode();
    assert!(
        !text.contains("sealed_secrets_controller_unseal_errors_total{"),
        "{text}"
    );
    running.stop().await;
    delete_namespace(&client, &app).await;
    delete_namespace(&client, &ctrl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_waits_for_the_key_it_is_still_loading_on_the_test_server() {
    a_new_cluster_waits_for_the_key_it_is_still_loading_without_reporting_a_failure(
        TestApiServer::new().client(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_cluster_waits_for_the_key_it_is_still_loading_on_a_real_apiserver() {
    if let Some(client) = real_client("a new cluster loading its ring").await {
        a_new_cluster_waits_for_the_key_it_is_still_loading_without_reporting_a_failure(client)
            .await;
    }
}
