//! Controller flow under start-up and leadership changes, against kseal-testkit's API server:
//! nothing is reconciled before the first keys load, and no write leaves a replica whose
//! leadership ended (the fence).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::SealedSecret;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kube::api::Api;

fn reconciles(state: &kseal_controller::State, outcome: &str) -> u64 {
    state
        .metrics
        .reconciles
        .get_or_create(&kseal_controller::metrics::OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .get()
}

/// A new cluster: SealedSecrets exist before any key does. They wait untouched (no
/// `UnsealFailed`, no Warning event, no status, no error count) and are unsealed as soon as
/// the first key loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_secrets_wait_untouched_until_the_first_keys_load() {
    let server = TestApiServer::new();
    let client = server.client();
    ensure_crd(&client).await;
    let ctrl = namespace(&client, "kseal-ctrl").await;
    let app = namespace(&client, "kseal-app").await;
    let names = ["a", "b", "c"];
    for name in names {
        create_ss(&client, &seal(&secret(&app, name, &[("k", name)]), key(0))).await;
    }
    let running = Running::start(&client, config(&ctrl, &[&app])).await;
    eventually("every object was considered", DEADLINE, || async {
        Ok((reconciles(&running.state, "waiting_for_keys") >= 3).then_some(()))
    })
    .await
    .unwrap();
    let sealed: Api<SealedSecret> = Api::namespaced(client.clone(), &app);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &app);
    for name in names {
        let ss = sealed.get(name).await.unwrap();
        assert!(
            ss.status.is_none(),
            "{name}: no status while no key is loaded"
        );
        assert!(secrets.get_opt(name).await.unwrap().is_none());
        assert!(
            events(&client, &app, name, "ErrUnsealFailed")
                .await
                .is_empty()
        );
    }
    assert_eq!(reconciles(&running.state, "failed"), 0);
    assert!(
        !running
            .state
            .metrics
            .encode()
            .contains("sealed_secrets_controller_unseal_errors_total{")
    );

    put_key(
        &client,
        &ctrl,
        "sealed-secrets-key0",
        key(0),
        Some("active"),
    )
    .await;
    for name in names {
        wait_synced(&client, &app, name, "True", "Unsealed").await;
        let s = wait_secret(&client, &app, name, "the Secret", |_| true).await;
        assert_eq!(data_of(&s)["k"], name);
        assert!(
            events(&client, &app, name, "ErrUnsealFailed")
                .await
                .is_empty()
        );
    }
    assert_eq!(reconciles(&running.state, "failed"), 0);
    running.stop().await;
}

/// A key that is genuinely missing from a loaded ring still fails, with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_missing_from_a_loaded_ring_still_fails_with_its_reason() {
    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let client = cluster.client.clone();
    let app = cluster.app.clone();
    create_ss(&client, &seal(&secret(&app, "x", &[("k", "v")]), key(1))).await;
    let running = Running::start(&client, cluster.config()).await;
    wait_synced(&client, &app, "x", "False", "UnsealFailed").await;
    wait_event(&client, &app, "x", "ErrUnsealFailed").await;
    running.stop().await;
}
