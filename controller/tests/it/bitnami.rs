//! Bitnami's Helm chart as a contract: the binary, run under the name `controller` (the
//! chart's `command`) with the arguments the chart renders (`tests/fixtures/bitnami-chart.yaml`,
//! chart 2.18.5 / controller v0.36.6), loads a Bitnami key Secret and unseals, on the test API
//! server and on the reference kube-apiserver (`KSEAL_REFAPI_KUBECONFIG`).
//!
//! Two things differ from a pod, both outside the command line: the namespace comes from
//! `POD_NAMESPACE` (a pod reads its service account's), and the ports of `:8080` and `:8081`
//! are free ones, still written `:PORT`, so that parallel tests do not collide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;

const BIN: &str = env!("CARGO_BIN_EXE_kseal-controller");

/// One rendering of the chart's controller container.
#[derive(serde::Deserialize)]
struct Rendering {
    command: Vec<String>,
    args: Vec<String>,
    env: Vec<EnvVar>,
}

#[derive(serde::Deserialize)]
struct EnvVar {
    name: String,
    value: String,
}

fn rendering(which: &str) -> Rendering {
    let text = include_str!("../fixtures/bitnami-chart.yaml");
    let mut all: std::collections::BTreeMap<String, Rendering> =
        serde_saphyr::from_str(text).unwrap();
    all.remove(which).unwrap()
}

/// `dir/controller`, a symlink to the binary, as in the image (`/usr/local/bin/controller`).
fn controller_link(dir: &Path, rendering: &Rendering) -> PathBuf {
    assert_eq!(rendering.command, ["controller"]);
    let link = dir.join("controller");
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    link
}

/// The rendering's command with only its own environment: no `KSEAL_*` or
/// `SEALED_SECRETS_*` variable of the test's, the rendering's `env`, then `env`.
fn command(link: &Path, rendering: &Rendering, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(link);
    for (name, _) in std::env::vars() {
        if name.starts_with("KSEAL_")
            || name.starts_with("SEALED_SECRETS_")
            || name == "POD_NAMESPACE"
            || name == "POD_NAME"
        {
            cmd.env_remove(name);
        }
    }
    for var in &rendering.env {
        cmd.env(&var.name, &var.value);
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// The rendering's arguments with each `:8080`-style port replaced by a free one.
fn args_with_ports(rendering: &Rendering, api: u16, metrics: u16) -> Vec<String> {
    rendering
        .args
        .iter()
        .map(|a| match a.as_str() {
            ":8080" => format!(":{api}"),
            ":8081" => format!(":{metrics}"),
            _ => a.clone(),
        })
        .collect()
}

/// A port free on every IPv4 interface (`:PORT` listens on all of them).
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:port: the status and body.
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: kseal\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_owned()))
}

/// The scenario: a migrating Bitnami user's cluster (the CRD, a labelled Bitnami key Secret in
/// the controller namespace), the chart's default command line, a SealedSecret sealed to that
/// key: it is unsealed, its status written (`--update-status`), and the certificate served on
/// `:PORT`.
async fn chart_command_line_unseals(client: kube::Client, kubeconfig: &Path) {
    let cluster = Cluster::new(client.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let chart = rendering("default");
    let link = controller_link(dir.path(), &chart);
    let (api, metrics) = (free_port(), free_port());
    let log = dir.path().join("controller.log");
    let child = command(
        &link,
        &chart,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("POD_NAMESPACE", &cluster.ctrl),
            ("POD_NAME", "sealed-secrets-controller-test-0"),
            // Bitnami's variable for --additional-namespaces: this controller watches only
            // the test's namespaces (kseal: additional namespaces imply not all), so that it
            // leaves other tests' SealedSecrets alone.
            ("SEALED_SECRETS_ADDITIONAL_NAMESPACES", &cluster.app),
        ],
    )
    .args(args_with_ports(&chart, api, metrics))
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();

    let ss = create_ss(
        &client,
        &seal(
            &secret(&cluster.app, "db", &[("password", "from-a-bitnami-chart")]),
            key(0),
        ),
    )
    .await;
    let s = wait_secret(
        &client,
        &cluster.app,
        "db",
        "unsealed by `controller`",
        |_| true,
    )
    .await;
    assert_eq!(data_of(&s), map(&[("password", "from-a-bitnami-chart")]));
    assert!(owned_by(&s, &ss));
    wait_synced(&client, &cluster.app, "db", "True", "Unsealed").await;

    // `--listen-addr :PORT` listens on every IPv4 interface, loopback included, and serves
    // the Bitnami key's certificate, as kubeseal --fetch-cert expects.
    let (status, body) = eventually("certificate served on :PORT", DEADLINE, || async {
        Ok(get(api, "/v1/cert.pem").ok().filter(|(s, _)| *s == 200))
    })
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body.trim(), key(0).certificate().to_pem().trim());
    let (status, _) = get(metrics, "/metrics").unwrap();
    assert_eq!(status, 200);

    let log = crate::binary::terminate(child, &log).await;
    assert!(log.contains("starting kseal-controller"), "{log}");
    // The chart's defaults are kseal's meaning: nothing is ignored.
    assert!(!log.contains(" ignored: "), "{log}");
    assert!(
        !log.contains("from-a-bitnami-chart"),
        "plaintext in the log"
    );
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");
    cluster.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitnamis_chart_command_line_unseals_on_the_test_api_server() {
    let server = TestApiServer::new();
    let served = server.serve().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    chart_command_line_unseals(served.client().unwrap(), &kubeconfig).await;
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitnamis_chart_command_line_unseals_on_the_reference_apiserver() {
    let test = "bitnamis_chart_command_line_unseals_on_the_reference_apiserver";
    let Some(client) = real_client(test).await else {
        return;
    };
    let kubeconfig = PathBuf::from(std::env::var("KSEAL_REFAPI_KUBECONFIG").unwrap());
    chart_command_line_unseals(client, &kubeconfig).await;
}

/// Every flag the chart can render is accepted; those kseal ignores are named once each, with
/// what kseal does instead, and nothing else stops the start (the process gets as far as the
/// Kubernetes client: exit 1, not the flag error's 2).
#[test]
fn every_flag_bitnamis_chart_renders_is_accepted_and_the_ignored_ones_are_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let chart = rendering("all-values");
    let link = controller_link(dir.path(), &chart);
    let (api, metrics) = (free_port(), free_port());
    let missing = dir.path().join("no-kubeconfig");
    let out = command(
        &link,
        &chart,
        &[
            ("KUBECONFIG", missing.to_str().unwrap()),
            ("POD_NAMESPACE", "kube-system"),
            ("SEALED_SECRETS_KEY_SIZE", "2048"),
            ("SEALED_SECRETS_OLD_GC_BEHAVIOR", "true"),
            ("SEALED_SECRETS_NO_SUCH_FLAG", "1"),
        ],
    )
    .args(args_with_ports(&chart, api, metrics))
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("failed to configure the Kubernetes client"),
        "{stderr}"
    );
    // JSON lines (--log-format json); the level filter INFO kept the start line.
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with('{') && l.contains("starting kseal-controller")),
        "{stderr}"
    );
    for flag in [
        "--log-info-stdout (SEALED_SECRETS_LOG_INFO_STDOUT) ignored: ",
        "--max-unseal-retries (SEALED_SECRETS_MAX_UNSEAL_RETRIES) ignored: ",
        "--kubeclient-qps (SEALED_SECRETS_KUBECLIENT_QPS) ignored: ",
        "--kubeclient-burst (SEALED_SECRETS_KUBECLIENT_BURST) ignored: ",
        "--old-gc-behavior (SEALED_SECRETS_OLD_GC_BEHAVIOR) ignored: ",
        "SEALED_SECRETS_NO_SUCH_FLAG ignored: Bitnami's controller has no flag --no-such-flag",
        // Bitnami's controller renews keys itself; kseal's generation is off by default.
        "--key-renew-period and --key-cutoff-time ignored: key renewal needs --generate-key-if-missing=true",
    ] {
        assert_eq!(stderr.matches(flag).count(), 1, "{flag}\n{stderr}");
    }
    // Implemented ones are not reported: --watch-for-secrets (kseal always watches the key
    // Secrets), --skip-recreate, SEALED_SECRETS_KEY_SIZE.
    for implemented in ["watch-for-secrets", "skip-recreate", "KEY_SIZE"] {
        assert!(!stderr.contains(implemented), "{implemented}\n{stderr}");
    }

    // A Bitnami variable kseal cannot use stops the start, naming it.
    let out = command(&link, &chart, &[("SEALED_SECRETS_KEY_TTL", "ten years")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(
            "error: invalid SEALED_SECRETS_KEY_TTL: invalid value 'ten years' for '--key-ttl"
        ),
        "{stderr}"
    );
}
