//! Bitnami's Helm chart as a contract: the binary, run under the name `controller` (the
//! chart's `command`) with the arguments the chart renders (`tests/fixtures/bitnami-chart.yaml`,
//! chart 2.18.5 / controller v0.36.6), loads a Bitnami key Secret and unseals, on the test API
//! server and on the reference kube-apiserver (`KSEAL_REFAPI_KUBECONFIG`); and `helm install`
//! of Bitnami's chart with kseal's image, run under the chart's own RBAC, with and without the
//! extra rules docs/bitnami.md gives. The chart installed is kseal's model of Bitnami's chart
//! 2.18.5 (`tests/fixtures/bitnami/model`: the same objects, RBAC rules and command line), or
//! Bitnami's real chart where `KSEAL_BITNAMI_CHART` names its directory; with that variable
//! set, a test also compares the two renderings object for object.
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
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("failed to configure the Kubernetes client"),
        "{stderr}"
    );
    // JSON lines (--log-format json); the level filter INFO kept the start line, which
    // --log-info-stdout sends to stdout; WARN and ERROR lines stay on stderr.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with('{') && l.contains("starting kseal-controller")),
        "{stdout}"
    );
    for line in stdout.lines() {
        assert!(line.contains(r#""level":"INFO""#), "{line}");
    }
    for line in stderr.lines().filter(|l| l.starts_with('{')) {
        assert!(
            line.contains(r#""level":"WARN""#) || line.contains(r#""level":"ERROR""#),
            "{line}"
        );
    }
    for flag in [
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
    // Secrets), --skip-recreate, --log-info-stdout, SEALED_SECRETS_KEY_SIZE.
    for implemented in [
        "watch-for-secrets",
        "skip-recreate",
        "log-info-stdout",
        "KEY_SIZE",
    ] {
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

/// The helm to run (`deploy/find-helm.sh`: `$KSEAL_HELM`, `helm` on `PATH`, else the pinned
/// one it installs into `~/.cache/kseal-helm`), or `None` (skip loudly; fail under `CI=true`).
fn find_helm(test: &str) -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .arg("-c")
        .arg("log() { echo \"$*\" >&2; }; source deploy/find-helm.sh && find_helm")
        .current_dir(&repo)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let path = String::from_utf8(out.stdout).unwrap();
    if out.status.success() && !path.trim().is_empty() {
        return Some(PathBuf::from(path.trim()));
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no helm (deploy/find-helm.sh), but CI=true: {test} must run"
    );
    kseal_testkit::skipped(&format!(
        "SKIPPED: {test} needs helm (deploy/find-helm.sh could not find or install it)"
    ));
    None
}

fn run_helm(helm: &Path, kubeconfig: &Path, args: &[&str]) {
    let out = Command::new(helm)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("kseal-test-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("kseal-test-helm-config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("kseal-test-helm-data"),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/bitnami")
}

/// The chart `helm install` uses: `$KSEAL_BITNAMI_CHART` (the directory of Bitnami's chart,
/// `helm/sealed-secrets` in bitnami-labs/sealed-secrets) when set, else kseal's model of
/// Bitnami's chart 2.18.5 (`tests/fixtures/bitnami/model`; its README).
fn bitnami_chart() -> PathBuf {
    std::env::var_os("KSEAL_BITNAMI_CHART")
        .filter(|p| !p.is_empty())
        .map_or_else(|| fixtures().join("model"), PathBuf::from)
}

/// One rendered object's identity: kind, name, namespace (empty for cluster-scoped ones).
type ObjectKey = (String, String, String);

/// `helm template` of `chart` as `release` in `namespace` with `args`: each object by its
/// kind, name and namespace, without labels and annotations (the chart's own label names
/// itself), and without nulls and empty maps or lists (the API server drops them).
fn rendered(
    helm: &Path,
    chart: &Path,
    release: &str,
    namespace: &str,
    args: &[&str],
) -> std::collections::BTreeMap<ObjectKey, serde_json::Value> {
    fn strip(value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        let empty = |v: &Value| {
            v.is_null()
                || v.as_object().is_some_and(|o| o.is_empty())
                || v.as_array().is_some_and(|a| a.is_empty())
        };
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (k, strip(v)))
                    .filter(|(_, v)| !empty(v))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(strip).collect()),
            other => other,
        }
    }
    let out = Command::new(helm)
        .args(["template", release])
        .arg(chart)
        .args(["--namespace", namespace, "--skip-crds"])
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("kseal-test-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("kseal-test-helm-config"),
        )
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "helm template {}: {}",
        chart.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let mut objects = std::collections::BTreeMap::new();
    for mut doc in docs.into_iter().filter(|d| !d.is_null()) {
        let meta = doc["metadata"].as_object_mut().unwrap();
        meta.remove("labels");
        meta.remove("annotations");
        let field = |f: &str| {
            doc.pointer(f)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let key = (
            field("/kind"),
            field("/metadata/name"),
            field("/metadata/namespace"),
        );
        assert!(
            objects.insert(key.clone(), strip(doc)).is_none(),
            "{key:?} twice"
        );
    }
    objects
}

/// kseal's model of Bitnami's chart renders Bitnami's object names with the default values
/// (the release name Bitnami's README uses); with `KSEAL_BITNAMI_CHART` set, it renders what
/// that chart renders, object for object (RBAC rules, bindings, the Deployment's command
/// line, ports, probes and security contexts, the Services), with the default values and with
/// those `helm install` gets in the tests above.
#[test]
fn kseals_model_of_bitnamis_chart_renders_what_the_chart_renders() {
    let test = "kseals_model_of_bitnamis_chart_renders_what_the_chart_renders";
    let Some(helm) = find_helm(test) else {
        return;
    };
    let model = fixtures().join("model");
    let extra = fixtures().join("kseal-rbac-values.yaml");
    let set = "image.registry=ghcr.io,image.repository=kseal-dev/kseal-controller,\
               image.tag=0.0.0,additionalNamespaces={app-a,app-b},rbac.clusterRoleName=rel";
    let cases: [(&str, &str, Vec<&str>); 2] = [
        ("sealed-secrets-controller", "kube-system", vec![]),
        (
            "rel",
            "ctrl",
            vec!["--set", set, "--values", extra.to_str().unwrap()],
        ),
    ];
    let defaults = rendered(&helm, &model, cases[0].0, cases[0].1, &cases[0].2);
    let key = |kind: &str, name: &str, ns: &str| (kind.to_owned(), name.to_owned(), ns.to_owned());
    let names: Vec<ObjectKey> = defaults.keys().cloned().collect();
    let ctrl = "sealed-secrets-controller";
    assert_eq!(
        names,
        [
            key("ClusterRole", "secrets-unsealer", ""),
            key("ClusterRoleBinding", ctrl, ""),
            key("Deployment", ctrl, "kube-system"),
            key("Role", "sealed-secrets-controller-key-admin", "kube-system"),
            key(
                "Role",
                "sealed-secrets-controller-service-proxier",
                "kube-system"
            ),
            key(
                "RoleBinding",
                "sealed-secrets-controller-key-admin",
                "kube-system"
            ),
            key(
                "RoleBinding",
                "sealed-secrets-controller-service-proxier",
                "kube-system"
            ),
            key("Service", ctrl, "kube-system"),
            key(
                "Service",
                "sealed-secrets-controller-metrics",
                "kube-system"
            ),
            key("ServiceAccount", ctrl, "kube-system"),
        ]
    );
    let container = &defaults[&key("Deployment", ctrl, "kube-system")]
        .pointer("/spec/template/spec/containers/0")
        .unwrap()
        .clone();
    assert_eq!(container["command"], serde_json::json!(["controller"]));
    assert_eq!(
        container["args"],
        serde_json::json!([
            "--update-status",
            "--key-prefix",
            "sealed-secrets-key",
            "--listen-addr",
            ":8080",
            "--listen-metrics-addr",
            ":8081"
        ])
    );

    let Some(real) = std::env::var_os("KSEAL_BITNAMI_CHART").filter(|p| !p.is_empty()) else {
        kseal_testkit::skipped(&format!(
            "SKIPPED: {test}: the comparison with Bitnami's chart needs KSEAL_BITNAMI_CHART \
             (the directory of its helm/sealed-secrets)"
        ));
        return;
    };
    for (release, namespace, args) in &cases {
        let want = rendered(&helm, Path::new(&real), release, namespace, args);
        let got = rendered(&helm, &model, release, namespace, args);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "objects, release {release}"
        );
        for (key, object) in &want {
            assert_eq!(&got[key], object, "{key:?}, release {release}");
        }
    }
}

/// A kubeconfig for the same server as `admin`, authenticated with `token` (the chart's
/// ServiceAccount's), written as JSON (a kubeconfig is YAML, JSON is YAML).
fn token_kubeconfig(admin: &Path, token: &str, path: &Path) {
    let mut kc = kube::config::Kubeconfig::read_from(admin).unwrap();
    assert_eq!(kc.auth_infos.len(), 1, "one user in {}", admin.display());
    let user = kc.auth_infos[0].auth_info.as_mut().unwrap();
    *user = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..kube::config::AuthInfo::default()
    };
    std::fs::write(path, serde_json::to_vec(&kc).unwrap()).unwrap();
}

/// `helm install` of Bitnami's chart 2.18.5 ([`bitnami_chart`]: kseal's model of it, or the
/// real one) with kseal's image on the reference kube-apiserver, then the Deployment it made, run as a
/// kubelet would (no kubelet here): its command under the name `controller`, its arguments and
/// environment as the API server stored them, authenticated with its ServiceAccount's token.
/// So the RBAC in force is the chart's, which grants no Lease, no `events.k8s.io` Event and
/// only `update` on the status (no `get`): kseal leads alone, logs instead of Events, writes
/// its status with an update and reads whole SealedSecrets with a `get`, says so once each at
/// WARN (or INFO, for what works) and on the metrics port's `/readyz`, and unseals, also a
/// Secret deleted after it was unsealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_of_bitnamis_chart_with_kseals_image_unseals_on_the_reference_apiserver() {
    helm_install_unseals(
        "helm_install_of_bitnamis_chart_with_kseals_image_unseals_on_the_reference_apiserver",
        false,
    )
    .await;
}

/// The same with the extra RBAC docs/bitnami.md gives (`tests/fixtures/bitnami/kseal-rbac-values.yaml`,
/// the chart's `extraDeploy`): nothing is turned off, the replica holds the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_of_bitnamis_chart_with_the_extra_rbac_turns_nothing_off() {
    helm_install_unseals(
        "helm_install_of_bitnamis_chart_with_the_extra_rbac_turns_nothing_off",
        true,
    )
    .await;
}

async fn helm_install_unseals(test: &str, extra_rbac: bool) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use kube::Api;

    let Some(client) = real_client(test).await else {
        return;
    };
    let Some(helm) = find_helm(test) else {
        return;
    };
    let admin = PathBuf::from(std::env::var("KSEAL_REFAPI_KUBECONFIG").unwrap());
    // The CRD (kseal's; helm leaves an existing one alone), the migrating user's Bitnami key
    // Secret (labelled active) in the release namespace, an app namespace.
    let cluster = Cluster::new(client.clone()).await;
    let release = cluster.ctrl.as_str();
    let chart = bitnami_chart();
    let image_tag = env!("CARGO_PKG_VERSION");
    let values = format!(
        "image.registry=ghcr.io,image.repository=kseal-dev/kseal-controller,image.tag={image_tag},\
         additionalNamespaces={{{app}}},rbac.clusterRoleName={release}",
        app = cluster.app
    );
    let extra = fixtures().join("kseal-rbac-values.yaml");
    let mut install = vec![
        "install",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        release,
        "--set",
        &values,
        // The CRD is there already (kseal's, the same API); helm 4 would apply the chart's
        // server-side and conflict on the fields kseal's manager owns.
        "--skip-crds",
    ];
    if extra_rbac {
        install.extend(["--values", extra.to_str().unwrap()]);
    }
    run_helm(&helm, &admin, &install);

    // What the API server stored: the Deployment, its ServiceAccount and that one's token.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), release);
    let deployment = deployments
        .get(&format!("{release}-sealed-secrets"))
        .await
        .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(format!("ghcr.io/kseal-dev/kseal-controller:{image_tag}").as_str())
    );
    let stored = Rendering {
        command: container.command.clone().unwrap_or_default(),
        args: container.args.clone().unwrap_or_default(),
        env: container
            .env
            .iter()
            .flatten()
            .map(|e| EnvVar {
                name: e.name.clone(),
                value: e.value.clone().unwrap_or_default(),
            })
            .collect(),
    };
    let sa_name = pod.service_account_name.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), release);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), release);
    let token = eventually("the ServiceAccount's token", DEADLINE, || async {
        let Some(sa) = accounts.get_opt(&sa_name).await? else {
            return Ok(None);
        };
        let Some(name) = sa.secrets.iter().flatten().find_map(|r| r.name.clone()) else {
            return Ok(None);
        };
        let secret = secrets.get(&name).await?;
        Ok(secret
            .data
            .and_then(|d| d.get("token").cloned())
            .map(|t| String::from_utf8(t.0).unwrap()))
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    token_kubeconfig(&admin, &token, &kubeconfig);

    let link = controller_link(dir.path(), &stored);
    let (api, metrics) = (free_port(), free_port());
    let log = dir.path().join("controller.log");
    let child = command(
        &link,
        &stored,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("POD_NAMESPACE", release),
            ("POD_NAME", "sealed-secrets-test-0"),
        ],
    )
    .args(args_with_ports(&stored, api, metrics))
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();

    let ss = create_ss(
        &client,
        &seal(
            &secret(&cluster.app, "db", &[("password", "from-helm-install")]),
            key(0),
        ),
    )
    .await;
    let s = wait_secret(
        &client,
        &cluster.app,
        "db",
        "unsealed under Bitnami's RBAC",
        |_| true,
    )
    .await;
    assert_eq!(data_of(&s), map(&[("password", "from-helm-install")]));
    assert!(owned_by(&s, &ss));
    // `--update-status`: written with an update, which the chart's role grants.
    wait_synced(&client, &cluster.app, "db", "True", "Unsealed").await;
    // A deleted Secret comes back: its SealedSecret, cached without its encrypted values, is
    // read whole (with a `get` where the chart grants no `get` on the status subresource).
    let uid = s.metadata.uid.clone();
    Api::<Secret>::namespaced(client.clone(), &cluster.app)
        .delete("db", &Default::default())
        .await
        .unwrap();
    let s = wait_secret(&client, &cluster.app, "db", "re-created", |s| {
        s.metadata.uid != uid
    })
    .await;
    assert_eq!(data_of(&s), map(&[("password", "from-helm-install")]));

    // The certificate is served on `:PORT`, as kubeseal --fetch-cert expects.
    let (status, cert) = get(api, "/v1/cert.pem").unwrap();
    assert_eq!(status, 200);
    assert_eq!(cert.trim(), key(0).certificate().to_pem().trim());

    // The metrics port's /readyz names each feature the chart's RBAC turned off, and only those.
    let degraded = [
        "leader election off",
        "events off",
        "status: written with an update",
        "sealedsecrets: read with get",
    ];
    let (status, body) = eventually("readyz", DEADLINE, || async {
        Ok(get(metrics, "/readyz")
            .ok()
            .filter(|(s, b)| *s == 200 && (extra_rbac || degraded.iter().all(|d| b.contains(d)))))
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    if extra_rbac {
        assert_eq!(body, "ok\n");
        let lease =
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), release)
                .get("kseal-controller")
                .await
                .unwrap();
        assert!(lease.spec.unwrap().holder_identity.is_some());
    } else {
        assert!(body.starts_with("ok\n"), "{body}");
        assert_eq!(body.lines().count(), 1 + degraded.len(), "{body}");
    }

    let log = crate::binary::terminate(child, &log).await;
    let warned = |what: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(what))
            .count()
    };
    for off in ["leader election off", "events off", "status off"] {
        let want = usize::from(!extra_rbac && off != "status off");
        assert_eq!(warned(off), want, "WARN lines for {off:?}:\n{log}");
    }
    assert!(!log.contains("from-helm-install"), "plaintext in the log");
    assert!(!log.contains(" ERROR "), "{log}");

    run_helm(
        &helm,
        &admin,
        &["uninstall", release, "--namespace", release],
    );
    cluster.cleanup().await;
}

/// Leader election under roles that grant no Lease (Bitnami's): `leader::run` against the
/// test API server, every Lease request refused with 403 from the start.
async fn run_leader(
    client: kube::Client,
    state: &kseal_controller::State,
    config: kseal_controller::cluster::leader::LeaderConfig,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<kseal_controller::Result<()>>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(kseal_controller::cluster::leader::run(
        client,
        state.clone(),
        Some(config),
        async {
            let _ = stopped.await;
        },
    ));
    (stop, task)
}

fn lease_config(identity: &str) -> kseal_controller::cluster::leader::LeaderConfig {
    kseal_controller::cluster::leader::LeaderConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1200),
        renew_period: Duration::from_millis(200),
        retry_period: Duration::from_millis(100),
        ..kseal_controller::cluster::leader::LeaderConfig::new(
            "kube-system",
            "kseal-controller",
            identity,
        )
    }
}

/// A Lease refused before this replica ever held it turns election off: the replica leads
/// alone (as Bitnami's controller, which has no election, always does), and the metrics
/// port's `/readyz` says so with the permission and the fix; it stops asking for the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_refused_from_the_start_turns_election_off_and_the_replica_leads_alone() {
    use kseal_testkit::FaultRule;
    let server = TestApiServer::new();
    server
        .faults()
        .fail(FaultRule::new(403).resource("leases").times(usize::MAX));
    let state = kseal_controller::State::new();
    let (stop, task) = run_leader(server.client(), &state, lease_config("a")).await;
    eventually("the replica leads alone", DEADLINE, || async {
        Ok(state.is_leader().then_some(()))
    })
    .await
    .unwrap();
    let line = state.api.readyz_line().unwrap();
    assert!(line.starts_with("leader election off: "), "{line}");
    assert!(line.contains("(403 "), "{line}");
    assert!(
        line.contains(
            r#"leases.coordination.k8s.io "kseal-controller" in namespace "kube-system""#
        ),
        "{line}"
    );
    // No further Lease request: a few retry periods pass without one.
    let asked = || {
        server
            .requests()
            .iter()
            .filter(|r| r.path.contains("/leases"))
            .count()
    };
    let before = asked();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(asked(), before);
    assert!(state.is_leader());
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert!(!state.is_leader(), "not leading after shutdown");
}

/// A refusal after the Lease was held is a failure like any other: the leader steps down at
/// its renew deadline instead of leading alone (another replica may hold the Lease next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_refused_after_it_was_held_makes_the_leader_step_down() {
    use kseal_testkit::FaultRule;
    let server = TestApiServer::new();
    let state = kseal_controller::State::new();
    let (stop, task) = run_leader(server.client(), &state, lease_config("a")).await;
    eventually("a leads", DEADLINE, || async {
        Ok(state.is_leader().then_some(()))
    })
    .await
    .unwrap();
    server
        .faults()
        .fail(FaultRule::new(403).resource("leases").times(usize::MAX));
    eventually("a steps down", DEADLINE, || async {
        Ok((!state.is_leader()).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(state.api.readyz_line(), None, "election is not turned off");
    server.faults().clear();
    eventually("a leads again", DEADLINE, || async {
        Ok(state.is_leader().then_some(()))
    })
    .await
    .unwrap();
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
