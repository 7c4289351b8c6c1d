//! The real `kseal-controller` binary against the test API server served on 127.0.0.1
//! through a kubeconfig.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kube::Api;

const BIN: &str = env!("CARGO_BIN_EXE_kseal-controller");

fn controller_command() -> Command {
    let mut cmd = Command::new(BIN);
    // Only the flags and KUBECONFIG of this test count.
    for (name, _) in std::env::vars() {
        if name.starts_with("KSEAL_") || name == "POD_NAMESPACE" || name == "POD_NAME" {
            cmd.env_remove(name);
        }
    }
    cmd
}

#[test]
fn version_flag_prints_the_version_and_commit() {
    let out = controller_command().arg("--version").output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.trim();
    assert_eq!(
        line,
        format!("kseal-controller {}", kseal_controller::VERSION)
    );
    let prefix = format!("kseal-controller {} (commit ", env!("CARGO_PKG_VERSION"));
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("`{line}` does not start with `{prefix}`"));
    let commit = rest.split(',').next().unwrap();
    assert_eq!(commit, kseal_controller::COMMIT);
    assert!(
        commit == "unknown" || (commit.len() >= 7 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "not a commit id: `{commit}`"
    );
}

#[test]
fn invalid_flags_fail_with_a_message() {
    let out = controller_command()
        .args(["--key-size", "1024"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unsupported --key-size 1024"));
    let out = controller_command()
        .args(["--key-cutoff-time", "yesterday"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("invalid --key-cutoff-time \"yesterday\": use RFC 1123 with a numeric zone"),
        "{stderr}"
    );
    let out = controller_command()
        .args(["--key-source", "s3://bucket/ring"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "invalid --key-source: invalid ring location \"s3://bucket/ring\": unknown scheme"
        ),
        "{stderr}"
    );
    let out = controller_command()
        .args([
            "--key-source",
            "secretsmanager://kseal/fleet",
            "--generate-key-if-missing=true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("exclude each other"), "{stderr}");
    let out = controller_command()
        .env("KSEAL_TRUSTED_PROXIES", "10.0.0.0/8,10.1.2.3/33")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --trusted-proxies item \"10.1.2.3/33\""),
        "{stderr}"
    );
}

/// The binary with `--key-source dir://…` (a directory ring, as the Secrets Store CSI driver
/// mounts one): keys come from the ring, and SIGUSR1 checks the ring instead of generating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_reads_a_directory_ring_and_sigusr1_refreshes_it() {
    use kseal_keystore::{AwsOptions, Location, Ring};
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let client = served.client().unwrap();
    let cluster = Cluster::new(client.clone()).await;
    let ring_dir = dir.path().join("ring");
    let location = Location::parse(&format!("dir://{}", ring_dir.display())).unwrap();
    let ring = Ring::open(&location, &AwsOptions::default()).await.unwrap();
    ring.push(key(1)).await.unwrap();
    let log = dir.path().join("controller.log");
    let child = spawn_controller(
        &kubeconfig,
        &cluster,
        &log,
        &["--key-source", &location.to_string()],
    );
    create_ss(
        &client,
        &seal(&secret(&cluster.app, "s", &[("a", "1")]), key(1)),
    )
    .await;
    wait_synced(&client, &cluster.app, "s", "True", "Unsealed").await;

    ring.push(key(2)).await.unwrap();
    ring.activate(
        kseal_keystore::Kid::of(key(2).public_key()).as_str(),
        Duration::ZERO,
    )
    .await
    .unwrap();
    signal(&child, "USR1");
    let mirrors = |client: kube::Client, ns: String| async move {
        kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, &ns)
            .list(&kube::api::ListParams::default().labels("kseal.dev/mirror=true"))
            .await
            .map(|l| l.items.len())
    };
    eventually(
        "the pushed key mirrored after SIGUSR1",
        Duration::from_secs(30),
        || {
            let (client, ns) = (client.clone(), cluster.ctrl.clone());
            async move { Ok((mirrors(client, ns).await? == 2).then_some(())) }
        },
    )
    .await
    .unwrap();
    let log = terminate(child, &log).await;
    assert!(
        log.contains("SIGUSR1: checking the fleet key ring now"),
        "{log}"
    );
    assert!(log.contains("mirrored a key of the fleet ring"), "{log}");
    assert!(!log.contains("PRIVATE KEY"), "{log}");
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_is_elected_unseals_over_a_kubeconfig_and_releases_the_lease_on_sigterm() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let client = served.client().unwrap();
    let cluster = Cluster::new(client.clone()).await;
    let ns = cluster.app.clone();

    let log_path = dir.path().join("controller.log");
    let mut child = controller_command()
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "kseal-controller-test-0")
        .args([
            "--controller-namespace",
            &cluster.ctrl,
            "--additional-namespaces",
            &ns,
            "--listen-addr",
            "127.0.0.1:0",
            "--listen-metrics-addr",
            "127.0.0.1:0",
            "--log-level",
            "debug",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();

    let ss = create_ss(
        &client,
        &seal(
            &secret(&ns, "bin", &[("password", "correct-horse-battery")]),
            key(0),
        ),
    )
    .await;
    let s = wait_secret(&client, &ns, "bin", "secret from the binary", |_| true).await;
    assert_eq!(data_of(&s), map(&[("password", "correct-horse-battery")]));
    assert!(owned_by(&s, &ss));
    wait_synced(&client, &ns, "bin", "True", "Unsealed").await;

    // SIGTERM: graceful shutdown, exit status 0.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = eventually("controller exits", Duration::from_secs(30), || {
        let r = child.try_wait().map_err(anyhow::Error::from);
        async move { r }
    })
    .await
    .unwrap_or_else(|e| {
        let _ = child.kill();
        panic!("{e}");
    });
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(exit.success(), "exit {exit:?}; log:\n{log}");
    assert!(log.contains("starting kseal-controller"), "{log}");
    assert!(
        !log.contains("correct-horse-battery"),
        "plaintext in the log"
    );
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");
    // The replica was elected through the Lease and released it on shutdown.
    let lease = Api::<Lease>::namespaced(client.clone(), &cluster.ctrl)
        .get("kseal-controller")
        .await
        .unwrap();
    let spec = lease.spec.unwrap_or_default();
    assert!(
        spec.holder_identity.as_deref().is_none_or(str::is_empty),
        "lease released: {:?}",
        spec.holder_identity
    );
    assert!(spec.lease_transitions.is_some() || spec.acquire_time.is_some());
    drop(served);
}

/// Starts the binary as the only replica for `cluster`, logging to `log`, with `extra` flags.
fn spawn_controller(
    kubeconfig: &std::path::Path,
    cluster: &Cluster,
    log: &std::path::Path,
    extra: &[&str],
) -> std::process::Child {
    spawn_controller_at(kubeconfig, cluster, log, "127.0.0.1:0", extra)
}

/// [`spawn_controller`] with its API on `listen_addr`.
fn spawn_controller_at(
    kubeconfig: &std::path::Path,
    cluster: &Cluster,
    log: &std::path::Path,
    listen_addr: &str,
    extra: &[&str],
) -> std::process::Child {
    controller_command()
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", "kseal-controller-test-0")
        .args([
            "--controller-namespace",
            &cluster.ctrl,
            "--additional-namespaces",
            &cluster.app,
            "--listen-addr",
            listen_addr,
            "--listen-metrics-addr",
            "127.0.0.1:0",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Sends SIGTERM and asserts a clean exit; returns the log.
pub(crate) async fn terminate(mut child: std::process::Child, log: &std::path::Path) -> String {
    signal(&child, "TERM");
    let exit = eventually("controller exits", Duration::from_secs(30), || {
        let r = child.try_wait().map_err(anyhow::Error::from);
        async move { r }
    })
    .await
    .unwrap_or_else(|e| {
        let _ = child.kill();
        panic!("{e}");
    });
    let log = std::fs::read_to_string(log).unwrap();
    assert!(exit.success(), "exit {exit:?}; log:\n{log}");
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");
    log
}

async fn key_secret_count(client: &kube::Client, ns: &str) -> usize {
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().labels(&format!(
            "{}=active",
            kseal_api::constants::SEALING_KEY_LABEL
        )))
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_makes_the_leader_generate_a_key() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let client = served.client().unwrap();
    let cluster = Cluster::new(client.clone()).await;
    let log = dir.path().join("controller.log");
    let child = spawn_controller(
        &kubeconfig,
        &cluster,
        &log,
        &[
            "--generate-key-if-missing=true",
            "--key-size",
            "2048",
            "--key-renew-period",
            "0",
        ],
    );
    // Unsealing proves the replica leads (and has installed its signal handlers).
    create_ss(
        &client,
        &seal(&secret(&cluster.app, "s", &[("a", "1")]), key(0)),
    )
    .await;
    wait_synced(&client, &cluster.app, "s", "True", "Unsealed").await;
    assert_eq!(key_secret_count(&client, &cluster.ctrl).await, 1);
    signal(&child, "USR1");
    eventually(
        "a key generated on SIGUSR1",
        Duration::from_secs(30),
        || async { Ok((key_secret_count(&client, &cluster.ctrl).await == 2).then_some(())) },
    )
    .await
    .unwrap();
    let log = terminate(child, &log).await;
    assert!(log.contains("generated a new sealing key"), "{log}");
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_without_generation_warns_and_changes_nothing() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let client = served.client().unwrap();
    let cluster = Cluster::new(client.clone()).await;
    let log_path = dir.path().join("controller.log");
    let mut child = spawn_controller(
        &kubeconfig,
        &cluster,
        &log_path,
        &["--key-renew-period", "1s"],
    );
    create_ss(
        &client,
        &seal(&secret(&cluster.app, "s", &[("a", "1")]), key(0)),
    )
    .await;
    wait_synced(&client, &cluster.app, "s", "True", "Unsealed").await;
    signal(&child, "USR1");
    eventually("the warning about SIGUSR1", Duration::from_secs(30), || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        async move {
            Ok(log
                .contains("in-cluster key generation is off")
                .then_some(()))
        }
    })
    .await
    .unwrap();
    assert!(child.try_wait().unwrap().is_none(), "still running");
    assert_eq!(key_secret_count(&client, &cluster.ctrl).await, 1);
    let log = terminate(child, &log_path).await;
    assert!(
        log.contains(
            "--key-renew-period ignored: key renewal needs --generate-key-if-missing=true"
        ),
        "{log}"
    );
    drop(served);
}

/// A listen address that is taken stops the binary before it does anything in the cluster:
/// no Lease is taken (nothing to release or wait for), and the error names the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_port_stops_the_binary_before_it_joins_the_election() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let client = served.client().unwrap();
    let cluster = Cluster::new(client.clone()).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let log = dir.path().join("controller.log");
    let mut child = spawn_controller_at(&kubeconfig, &cluster, &log, &addr, &[]);
    // Generous: the process has nothing to wait for, so it ends as soon as it starts.
    let mut status = None;
    for _ in 0..600 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the controller kept running with its port taken");
    };
    assert!(!status.success());
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains(&addr), "{stderr}");
    let leases = Api::<Lease>::namespaced(client.clone(), &cluster.ctrl)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        leases.items.is_empty(),
        "a Lease was taken: {:?}",
        leases.items
    );
    drop(taken);
}

/// A free port on 127.0.0.1 (bound and released; the binary binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the binary with its API on `127.0.0.1:port` and waits until `/readyz` answers 200.
async fn spawn_serving(
    kubeconfig: &std::path::Path,
    cluster: &Cluster,
    log: &std::path::Path,
    port: u16,
    extra: &[&str],
) -> std::process::Child {
    let mut child = spawn_controller_at(
        kubeconfig,
        cluster,
        log,
        &format!("127.0.0.1:{port}"),
        extra,
    );
    let from = std::net::Ipv4Addr::LOCALHOST;
    let ready = eventually("the controller is ready", DEADLINE, || async move {
        Ok(http(from, port, "GET", "/readyz", "")
            .await
            .ok()
            .filter(|(status, _)| *status == 200))
    })
    .await;
    if let Err(e) = ready {
        let _ = child.kill();
        panic!("{e}; log:\n{}", std::fs::read_to_string(log).unwrap());
    }
    child
}

/// One HTTP/1.1 request from the source address `from` to `127.0.0.1:port`: the status and
/// body.
async fn http(
    from: std::net::Ipv4Addr,
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((from, 0).into())?;
    let mut stream = socket
        .connect((std::net::Ipv4Addr::LOCALHOST, port).into())
        .await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: kseal\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
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

/// A SealedSecret `ns/name` with `count` items sealed for `pair`, without the
/// `kseal.dev/sealing-key` hint (so a ring that lacks `pair` tries every key), as JSON.
fn sealed_items_json(ns: &str, name: &str, count: usize, pair: &kseal_keys::KeyPair) -> String {
    let values: Vec<(String, String)> = (0..count)
        .map(|i| (format!("k{i:04}"), format!("value-{i}")))
        .collect();
    let data: Vec<(&str, &str)> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut ss = seal(&secret(ns, name, &data), pair);
    if let Some(annotations) = ss.metadata.annotations.as_mut() {
        annotations.remove(kseal_api::constants::SEALING_KEY_ANNOTATION);
    }
    serde_json::to_string(&ss).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verify_over_the_item_cap_is_refused_with_the_cap_named() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let cluster = Cluster::new(served.client().unwrap()).await;
    let log = dir.path().join("controller.log");
    let port = free_port();
    let child = spawn_serving(
        &kubeconfig,
        &cluster,
        &log,
        port,
        &["--max-request-items", "8"],
    )
    .await;
    let local = std::net::Ipv4Addr::LOCALHOST;
    let over = sealed_items_json(&cluster.app, "big", 9, key(0));
    let (status, body) = http(local, port, "POST", "/v1/verify", &over)
        .await
        .unwrap();
    assert_eq!(status, 413, "{body}");
    assert!(
        body.contains("holds 9 sealed values")
            && body.contains("at most 8 per request (--max-request-items)"),
        "{body}"
    );
    let within = sealed_items_json(&cluster.app, "big", 8, key(0));
    let (status, body) = http(local, port, "POST", "/v1/verify", &within)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    terminate(child, &log).await;
    drop(served);
}

/// One client floods `/v1/verify` with the most expensive requests it may send (256 items
/// sealed for a key outside the ring, `?all=true`, no rate limit to speak of); unsealing
/// and another client's small verify do not wait behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_verify_flood_from_one_client_starves_neither_unsealing_nor_other_clients() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Instant;

    const FLOOD_WORKERS: usize = 8;
    const FLOOD_REQUESTS: usize = 300;
    const FLOOD_FOR: Duration = Duration::from_secs(20);

    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let client = served.client().unwrap();
    let cluster = Cluster::new(client.clone()).await;
    // A second ring key: each item of the flood costs two RSA operations.
    crate::common::put_key(
        &client,
        &cluster.ctrl,
        "sealed-secrets-key2",
        key(2),
        Some("active"),
    )
    .await;
    let log = dir.path().join("controller.log");
    let port = free_port();
    let child = spawn_serving(
        &kubeconfig,
        &cluster,
        &log,
        port,
        &["--rate-limit", "1000", "--rate-limit-burst", "1000"],
    )
    .await;

    let flood_body = Arc::new(sealed_items_json(&cluster.app, "flood", 256, key(1)));
    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let workers: Vec<_> = (0..FLOOD_WORKERS)
        .map(|_| {
            let (body, sent, stop, statuses) = (
                flood_body.clone(),
                sent.clone(),
                stop.clone(),
                statuses.clone(),
            );
            tokio::spawn(async move {
                let local = std::net::Ipv4Addr::LOCALHOST;
                while !stop.load(Ordering::Relaxed)
                    && started.elapsed() < FLOOD_FOR
                    && sent.fetch_add(1, Ordering::Relaxed) < FLOOD_REQUESTS
                {
                    let status = http(local, port, "POST", "/v1/verify?all=true", &body)
                        .await
                        .map_or(0, |(s, _)| s);
                    statuses.lock().unwrap().push(status);
                    if status != 409 {
                        // Refused at once (503/429): an attacker gains nothing by hammering
                        // faster, and the request count stays bounded.
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
            })
        })
        .collect();
    // Let the flood fill the queues.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Another client (source address 127.0.0.2): a one-item verify.
    let other = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let small = sealed_items_json(&cluster.app, "small", 1, key(0));
    let mut verify_latencies = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let (status, body) = http(other, port, "POST", "/v1/verify", &small)
            .await
            .unwrap();
        verify_latencies.push(t.elapsed());
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A SealedSecret applied meanwhile.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &cluster.app);
    let mut unseal_latencies = Vec::new();
    for i in 0..3 {
        let name = format!("during-flood-{i}");
        let t = Instant::now();
        create_ss(
            &client,
            &seal(&secret(&cluster.app, &name, &[("password", "pw")]), key(0)),
        )
        .await;
        while secrets.get_opt(&name).await.unwrap().is_none() && t.elapsed() < DEADLINE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        unseal_latencies.push(t.elapsed());
    }
    let flood_running = !workers.iter().all(tokio::task::JoinHandle::is_finished);
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let statuses = std::mem::take(&mut *statuses.lock().unwrap());
    let count = |code: u16| statuses.iter().filter(|s| **s == code).count();
    // The figures (docs/benchmarks.md), whatever the outcome.
    eprintln!(
        "flood: {} requests in {:.1} s (409: {}, 503: {}, 429: {}, other: {}); running until measured: {flood_running}",
        statuses.len(),
        started.elapsed().as_secs_f64(),
        count(409),
        count(503),
        count(429),
        statuses.len() - count(409) - count(503) - count(429),
    );
    eprintln!("one-item verify from another client: {verify_latencies:?}");
    eprintln!("SealedSecret applied to Secret written: {unseal_latencies:?}");
    let log_text = terminate(child, &log).await;
    assert!(!log_text.contains("value-1"), "plaintext in the log");

    // The flood was real: it cost RSA work (409s) for the whole measurement.
    assert!(count(409) > 0, "{statuses:?}");
    assert!(flood_running, "the flood ended before the measurements");
    for latency in &unseal_latencies {
        assert!(*latency < Duration::from_secs(2), "{unseal_latencies:?}");
    }
    // The median: one sample can lose its CPU to anything else on a shared test machine.
    let mut sorted = verify_latencies.clone();
    sorted.sort();
    assert!(
        sorted[sorted.len() / 2] < Duration::from_millis(100),
        "{verify_latencies:?}"
    );
    drop(served);
}
