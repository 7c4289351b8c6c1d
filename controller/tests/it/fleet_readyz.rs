//! The metrics port's `/readyz` detail, served over TCP by the real HTTP servers, names how
//! many SealedSecrets each key opened, as the fleet acknowledgement writer counts them while
//! the reconciler unseals (a directory ring as key source, kseal-testkit's API server).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use kseal_controller::config::KeySourceConfig;
use kseal_controller::serve::http::{ApiOptions, serve_listeners};
use kseal_keystore::{AwsOptions, ClusterId, Kid, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use tokio::sync::watch;

/// `GET path` on `127.0.0.1:port`: the status and body.
async fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: kseal\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// Two objects opened with the ring's key (one annotated, one as kubeseal writes it, without
/// the annotation) and one sealed for a key the cluster does not hold: the metrics port's
/// `/readyz` says `<kid>=2 unattributed=1`; the API port's `/readyz` says nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_ports_readyz_names_the_objects_each_key_opened() {
    let server = TestApiServer::new();
    let client = server.client();
    let cluster = Cluster::new(client.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let location =
        Location::parse(&format!("dir://{}", dir.path().join("ring").display())).unwrap();
    let ring = Ring::open(&location, &AwsOptions::default()).await.unwrap();
    ring.push(key(1)).await.unwrap();
    let mut config = cluster.config();
    config.key_source = Some(KeySourceConfig {
        location,
        interval: Duration::from_secs(3600),
        retire_grace: Duration::from_secs(7 * 86_400),
        refresh_spacing: Duration::from_secs(5),
        aws: AwsOptions::default(),
        anchor: None,
    });
    config.cluster_id = Some(ClusterId::parse("c1").unwrap());
    let running = Running::start(&client, config.clone()).await;
    let state = running.state.clone();

    // The acknowledgement writer, counting every second instead of every key-source
    // interval, and the two HTTP servers on ports of their own.
    let (stop, stop_rx) = watch::channel(false);
    let options = kseal_controller::fleet::Options {
        heartbeat: Duration::from_secs(3600),
        recount: Duration::from_secs(1),
        check: Duration::from_millis(100),
        retry_min: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
    };
    let fleet = tokio::spawn(kseal_controller::fleet::run(
        client.clone(),
        Arc::new(config),
        state.clone(),
        options,
        stop_rx.clone(),
    ));
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (api_port, metrics_port) = (
        api.local_addr().unwrap().port(),
        metrics.local_addr().unwrap().port(),
    );
    let mut stopped = stop_rx.clone();
    let http = tokio::spawn(serve_listeners(
        api,
        metrics,
        state.clone(),
        ApiOptions::default(),
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));

    let without_hint = |pair| {
        let mut sealed = seal(&secret(&cluster.app, "plain", &[("a", "1")]), pair);
        if let Some(annotations) = sealed.metadata.annotations.as_mut() {
            annotations.remove(kseal_api::constants::SEALING_KEY_ANNOTATION);
        }
        sealed
    };
    create_ss(
        &client,
        &seal(&secret(&cluster.app, "hinted", &[("a", "1")]), key(1)),
    )
    .await;
    create_ss(&client, &without_hint(key(1))).await;
    let mut foreign = without_hint(key(2));
    foreign.metadata.name = Some("foreign".into());
    create_ss(&client, &foreign).await;
    wait_synced(&client, &cluster.app, "hinted", "True", "Unsealed").await;
    wait_synced(&client, &cluster.app, "plain", "True", "Unsealed").await;

    let expected = format!(
        "objects by kid (ring {}): {}=2 unattributed=1\n",
        ring.name(),
        Kid::of(key(1).public_key()).short()
    );
    let body = eventually("the objects line on /readyz", DEADLINE, || async {
        let (status, body) = get(metrics_port, "/readyz").await?;
        Ok((status == 200 && body.ends_with(&expected)).then_some(body))
    })
    .await;
    let body = match body {
        Ok(body) => body,
        Err(e) => panic!("{e}; last answer: {:?}", get(metrics_port, "/readyz").await),
    };
    assert!(body.starts_with("ok"), "{body}");
    assert_eq!(body.matches("objects by kid").count(), 1, "{body}");
    // The API port (probes, anyone who reaches it) keeps to the readiness answer.
    let (status, api_body) = get(api_port, "/readyz").await.unwrap();
    assert_eq!(status, 200, "{api_body}");
    assert!(!api_body.contains("objects"), "{api_body}");

    stop.send_replace(true);
    let _ = tokio::time::timeout(DEADLINE, http).await;
    let _ = tokio::time::timeout(DEADLINE, fleet).await;
    running.stop().await;
    cluster.cleanup().await;
}
