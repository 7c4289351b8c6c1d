//! Key renewal (Bitnami's `--key-renew-period`, `--key-cutoff-time` and SIGUSR1) with the
//! controller's key loader and reconciler against kseal-testkit's API server.
//!
//! Nothing here depends on timing: positive outcomes are polled for with generous deadlines,
//! and "nothing happens" is checked only after the key loader has visibly run several more
//! times (its sealing-key age gauge, refreshed on every 2 s tick, has moved on).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use crate::common::*;
use axum::body::Body;
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Secret;
use kseal_api::constants::{SEALING_KEY_LABEL, SEALING_KEY_LABEL_ACTIVE};
use kseal_controller::keys::renewal::Renewal;
use kseal_controller::serve::http::{ApiOptions, api_router};
use kseal_controller::{Config, State};
use kseal_keys::{Certificate, KeyPair};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt as _};
use tower::ServiceExt as _;

/// Generous: key generation and the 2 s loader tick on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

/// A fresh API server with the CRD and a controller namespace holding `old` (a test-only key
/// whose certificate starts a day ago) as `sealed-secrets-key-old`.
async fn setup(prefix: &str) -> (TestApiServer, Client, String) {
    let server = TestApiServer::new();
    let client = server.client();
    ensure_crd(&client).await;
    let ctrl = namespace(&client, prefix).await;
    put_key(
        &client,
        &ctrl,
        "sealed-secrets-key-old",
        older_key(),
        Some("active"),
    )
    .await;
    (server, client, ctrl)
}

/// A controller for `ctrl` (watching `ctrl` only) that may generate keys, with `renewal`.
fn generating(ctrl: &str, renewal: Renewal) -> Config {
    let mut c = config(ctrl, &[ctrl]);
    c.generate_key_if_missing = true;
    c.key_renewal = renewal;
    c
}

/// The active key Secrets in `ns`.
async fn key_secrets(client: &Client, ns: &str) -> Vec<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(
            &ListParams::default()
                .labels(&format!("{SEALING_KEY_LABEL}={SEALING_KEY_LABEL_ACTIVE}")),
        )
        .await
        .unwrap()
        .items
}

/// Waits until `ns` holds at least `n` active key Secrets and returns them.
async fn wait_key_secrets(client: &Client, ns: &str, n: usize) -> Vec<Secret> {
    eventually(&format!("{n} key Secrets"), PATIENCE, || async {
        let keys = key_secrets(client, ns).await;
        Ok((keys.len() >= n).then_some(keys))
    })
    .await
    .unwrap()
}

/// Waits until the replica's ring holds `n` keys.
async fn wait_ring(state: &State, n: usize) {
    eventually(&format!("{n} keys in the ring"), PATIENCE, || async {
        Ok((state.keys.ring().len() == n).then_some(()))
    })
    .await
    .unwrap();
}

/// Returns once the key loader has run through several more ticks than when called: any
/// generation it was going to do by then has been stored.
async fn loader_ticks_on(state: &State) {
    let age = || state.metrics.sealing_key_age_seconds.get();
    let start = age();
    eventually("the key loader ticks on", PATIENCE, || async {
        Ok((age() >= start + 5).then_some(()))
    })
    .await
    .unwrap();
}

fn generated(state: &State, reason: &str) -> u64 {
    state
        .metrics
        .keys_generated
        .get_or_create(&kseal_controller::metrics::KeyGenerationLabels {
            reason: reason.to_owned(),
        })
        .get()
}

fn generated_total(state: &State) -> u64 {
    ["missing", "cutoff", "period", "requested"]
        .iter()
        .map(|r| generated(state, r))
        .sum()
}

/// `GET /v1/cert.pem` from the replica's API router.
async fn served_cert(state: &State) -> Certificate {
    let response = api_router(state.clone(), ApiOptions::default())
        .oneshot(
            http::Request::get("/v1/cert.pem")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Certificate::from_pem(std::str::from_utf8(&body).unwrap()).unwrap()
}

fn cutoff_in(offset: Duration, later: bool) -> Option<SystemTime> {
    let now = SystemTime::now();
    Some(if later { now + offset } else { now - offset })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_key_is_renewed_every_period_and_keeps_unsealing() {
    let (_server, client, ctrl) = setup("kseal-renew").await;
    // Sealed with the old key before any renewal.
    let before = create_ss(
        &client,
        &seal(&secret(&ctrl, "before", &[("a", "1")]), older_key()),
    )
    .await;
    let running = Running::start(
        &client,
        generating(
            &ctrl,
            Renewal {
                period: Some(Duration::from_secs(2)),
                cutoff: None,
            },
        ),
    )
    .await;

    // The day-old key is renewed at once; the new key is renewed again one period later.
    let keys = wait_key_secrets(&client, &ctrl, 3).await;
    for k in &keys {
        assert_eq!(k.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(
            k.labels().get(SEALING_KEY_LABEL).map(String::as_str),
            Some(SEALING_KEY_LABEL_ACTIVE)
        );
        let data = k.data.as_ref().unwrap();
        assert!(data.contains_key("tls.crt") && data.contains_key("tls.key"));
    }
    let generated_names: Vec<String> = keys
        .iter()
        .map(|k| k.name_any())
        .filter(|n| n != "sealed-secrets-key-old")
        .collect();
    assert!(generated_names.len() >= 2, "{generated_names:?}");
    for name in &generated_names {
        assert!(name.starts_with("sealed-secrets-key"), "{name}");
    }
    let periodic = generated(&running.state, "period");
    assert!(periodic >= 2, "period renewals counted: {periodic}");

    // The old key stays active; the newest key seals and is the one served.
    let old = Api::<Secret>::namespaced(client.clone(), &ctrl)
        .get("sealed-secrets-key-old")
        .await
        .unwrap();
    assert_eq!(
        old.labels().get(SEALING_KEY_LABEL).map(String::as_str),
        Some(SEALING_KEY_LABEL_ACTIVE)
    );
    let served = eventually("a renewed key served", PATIENCE, || async {
        let ring = running.state.keys.ring();
        let sealing = ring.sealing_key().map(|k| k.id().clone());
        let served = served_cert(&running.state).await;
        let renewed = ring.len() >= 2
            && ring.get(older_key().id()).is_some()
            && Some(served.id()) == sealing.as_ref()
            && served.id() != older_key().id();
        Ok(renewed.then_some(served))
    })
    .await
    .unwrap();

    // What was sealed with the old key still unseals, before and after the renewal, and so
    // does what is sealed with the served certificate.
    wait_synced(&client, &ctrl, "before", "True", "Unsealed").await;
    assert!(owned_by(
        &wait_secret(&client, &ctrl, "before", "secret", |_| true).await,
        &before
    ));
    create_ss(
        &client,
        &seal(&secret(&ctrl, "after", &[("b", "2")]), older_key()),
    )
    .await;
    wait_synced(&client, &ctrl, "after", "True", "Unsealed").await;
    let fresh = kseal_api::seal_secret(
        &secret(&ctrl, "fresh", &[("c", "3")]),
        served.public_key(),
        &kseal_api::SealOptions::default(),
    )
    .unwrap();
    create_ss(&client, &fresh).await;
    let s = wait_secret(
        &client,
        &ctrl,
        "fresh",
        "secret sealed with the new key",
        |_| true,
    )
    .await;
    assert_eq!(data_of(&s), map(&[("c", "3")]));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_generation_no_key_is_ever_created() {
    let (_server, client, ctrl) = setup("kseal-nogen").await;
    let mut config = generating(
        &ctrl,
        Renewal {
            period: Some(Duration::from_secs(1)),
            cutoff: cutoff_in(HOUR, true),
        },
    );
    config.generate_key_if_missing = false;
    let running = Running::start(&client, config).await;
    wait_ring(&running.state, 1).await;
    // What SIGUSR1 does: logged and ignored.
    running.requester.request();
    loader_ticks_on(&running.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 1);
    assert_eq!(generated_total(&running.state), 0);
    assert_eq!(
        served_cert(&running.state).await.id(),
        older_key().id(),
        "the old key still seals"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cutoff_after_the_newest_key_generates_exactly_one_key() {
    let (_server, client, ctrl) = setup("kseal-cutoff").await;
    // The old key is a day old; the cutoff an hour ago; no periodic renewal.
    let running = Running::start(
        &client,
        generating(
            &ctrl,
            Renewal {
                period: None,
                cutoff: cutoff_in(HOUR, false),
            },
        ),
    )
    .await;
    wait_key_secrets(&client, &ctrl, 2).await;
    wait_ring(&running.state, 2).await;
    loader_ticks_on(&running.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 2);
    assert_eq!(generated(&running.state, "cutoff"), 1);
    assert_eq!(generated_total(&running.state), 1);
    assert_ne!(served_cert(&running.state).await.id(), older_key().id());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cutoff_in_the_future_generates_one_key_per_start() {
    let (_server, client, ctrl) = setup("kseal-cutoff-future").await;
    let renewal = Renewal {
        period: None,
        cutoff: cutoff_in(24 * HOUR, true),
    };
    let running = Running::start(&client, generating(&ctrl, renewal)).await;
    wait_key_secrets(&client, &ctrl, 2).await;
    wait_ring(&running.state, 2).await;
    loader_ticks_on(&running.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 2);
    assert_eq!(generated(&running.state, "cutoff"), 1);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_never_generates_until_it_leads() {
    let (_server, client, ctrl) = setup("kseal-follower").await;
    // The day-old key is due for renewal, and a key is requested (SIGUSR1).
    let renewal = Renewal {
        period: Some(HOUR),
        cutoff: cutoff_in(HOUR, false),
    };
    let follower = Running::start_as(&client, generating(&ctrl, renewal), false).await;
    wait_ring(&follower.state, 1).await;
    follower.requester.request();
    loader_ticks_on(&follower.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 1);
    assert_eq!(generated_total(&follower.state), 0);

    // Leading, it renews once: the new key is fresh, so neither the period nor the cutoff
    // asks for another.
    follower.state.leadership.assume(true);
    wait_key_secrets(&client, &ctrl, 2).await;
    wait_ring(&follower.state, 2).await;
    loader_ticks_on(&follower.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 2);
    assert_eq!(generated_total(&follower.state), 1);
    follower.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_continues_the_schedule_without_a_duplicate_key() {
    let (_server, client, ctrl) = setup("kseal-failover").await;
    let renewal = Renewal {
        period: Some(HOUR),
        cutoff: None,
    };
    let leader = Running::start(&client, generating(&ctrl, renewal)).await;
    let follower = Running::start_as(&client, generating(&ctrl, renewal), false).await;
    wait_key_secrets(&client, &ctrl, 2).await;
    wait_ring(&follower.state, 2).await;
    assert_eq!(generated(&leader.state, "period"), 1);
    leader.stop().await;

    // The follower takes over: the newest key is minutes old, not a period.
    follower.state.leadership.assume(true);
    loader_ticks_on(&follower.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 2);
    assert_eq!(generated_total(&follower.state), 0);
    follower.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_generates_a_key_even_without_a_period() {
    let (_server, client, ctrl) = setup("kseal-request").await;
    let running = Running::start(&client, generating(&ctrl, Renewal::default())).await;
    wait_ring(&running.state, 1).await;
    loader_ticks_on(&running.state).await;
    assert_eq!(key_secrets(&client, &ctrl).await.len(), 1);
    running.requester.request();
    wait_key_secrets(&client, &ctrl, 2).await;
    wait_ring(&running.state, 2).await;
    assert_eq!(generated(&running.state, "requested"), 1);
    let sealing: KeyPair = running.state.keys.ring().sealing_key().unwrap().clone();
    assert_ne!(sealing.id(), older_key().id());
    assert_eq!(served_cert(&running.state).await.id(), sealing.id());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_keys_carry_the_configured_labels_and_annotations() {
    let (_server, client, ctrl) = setup("kseal-keymeta").await;
    let mut config = generating(
        &ctrl,
        Renewal {
            period: None,
            cutoff: cutoff_in(HOUR, false),
        },
    );
    config.key_labels = [
        ("team".to_owned(), "platform".to_owned()),
        (SEALING_KEY_LABEL.to_owned(), "compromised".to_owned()),
    ]
    .into();
    config.key_annotations = [("example.com/owner".to_owned(), "platform team".to_owned())].into();
    let running = Running::start(&client, config).await;
    let keys = wait_key_secrets(&client, &ctrl, 2).await;
    let new = keys
        .iter()
        .find(|s| s.name_any() != "sealed-secrets-key-old")
        .expect("the generated key");
    let labels = new.labels();
    assert_eq!(labels[SEALING_KEY_LABEL], SEALING_KEY_LABEL_ACTIVE);
    assert_eq!(labels["team"], "platform");
    assert_eq!(new.annotations()["example.com/owner"], "platform team");
    let old = keys
        .iter()
        .find(|s| s.name_any() == "sealed-secrets-key-old")
        .expect("the old key");
    assert!(
        !old.labels().contains_key("team"),
        "existing keys are left as they are"
    );
    running.stop().await;
}
