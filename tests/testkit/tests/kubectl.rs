//! `kubectl` against the served fake: get, create, apply --server-side, delete, get --raw.
//!
//! Uses `$KSEAL_KUBECTL` or `kubectl` on PATH (Debian's `kubernetes-client` is 1.20). When no
//! kubectl is found the test fails under `CI=true` and is skipped loudly otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use kseal_testkit::TestApiServer;
use serde_json::Value;

fn kubectl_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KSEAL_KUBECTL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

/// Runs kubectl with an isolated HOME/cache; returns (success, stdout, stderr).
async fn kubectl(
    bin: &Path,
    kubeconfig: &Path,
    home: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let (bin, kubeconfig, home) = (bin.to_owned(), kubeconfig.to_owned(), home.to_owned());
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let stdin = stdin.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut cmd = Command::new(&bin);
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(home.join("cache"))
            .args(&args)
            .env("HOME", &home)
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("running kubectl");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("writing stdin");
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("kubectl output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("kubectl task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_creates_applies_and_deletes_against_the_served_fake() {
    let Some(bin) = kubectl_binary() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "kubectl is not on PATH (and KSEAL_KUBECTL is unset), but CI=true: install kubernetes-client"
        );
        kseal_testkit::skipped(
            "SKIPPED: kubectl not found; install Debian's kubernetes-client or set KSEAL_KUBECTL",
        );
        return;
    };
    let server = TestApiServer::new();
    let served = server.serve().await.expect("serving");
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    served.write_kubeconfig(&kc).expect("kubeconfig");
    let run = |args: &'static [&'static str], stdin: Option<&'static str>| {
        kubectl(&bin, &kc, dir.path(), args, stdin)
    };

    let (ok, out, err) = run(&["get", "namespaces", "-o", "name"], None).await;
    assert!(ok, "get ns: {err}");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(out.contains(&format!("namespace/{ns}")), "{out}");
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kc\n  namespace: default\ndata:\n  a: \"1\"\n  b: \"2\"\n";
    let (ok, out, err) = run(&["create", "--validate=false", "-f", "-"], Some(CM)).await;
    assert!(ok, "create: {out} {err}");
    let (ok, _, err) = run(&["create", "--validate=false", "-f", "-"], Some(CM)).await;
    assert!(
        !ok && err.contains("AlreadyExists") || err.contains("already exists"),
        "second create fails: {err}"
    );

    const APPLIED: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kc2\n  namespace: default\ndata:\n  a: \"1\"\n  b: \"2\"\n";
    let (ok, out, err) = run(
        &["apply", "--server-side", "--validate=false", "-f", "-"],
        Some(APPLIED),
    )
    .await;
    assert!(ok, "apply: {out} {err}");
    const PRUNED: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kc2\n  namespace: default\ndata:\n  a: \"3\"\n";
    let (ok, out, err) = run(
        &["apply", "--server-side", "--validate=false", "-f", "-"],
        Some(PRUNED),
    )
    .await;
    assert!(ok, "re-apply: {out} {err}");
    let (ok, out, err) = run(&["get", "configmap", "kc2", "-o", "json"], None).await;
    assert!(ok, "get: {err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        v["data"],
        serde_json::json!({"a": "3"}),
        "b pruned by server-side apply"
    );
    // Newer kubectl hides managedFields in its output; read them from the server.
    let stored = server
        .get("v1", "ConfigMap", "default", "kc2")
        .expect("stored");
    let managers: Vec<&str> = stored["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert!(
        managers.iter().any(|m| m.starts_with("kubectl")),
        "{managers:?}"
    );

    let (ok, out, err) = run(&["get", "cm"], None).await;
    assert!(
        ok && out.contains("kc") && out.contains("kc2"),
        "table: {out} {err}"
    );
    let (ok, out, err) = run(
        &["get", "--raw", "/api/v1/namespaces/default/configmaps"],
        None,
    )
    .await;
    assert!(ok, "get --raw: {err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["kind"], "ConfigMapList");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(2));

    let (ok, out, err) = run(&["delete", "configmap", "kc", "kc2"], None).await;
    assert!(ok, "delete: {out} {err}");
    assert!(server.get("v1", "ConfigMap", "default", "kc").is_none());
    assert!(server.get("v1", "ConfigMap", "default", "kc2").is_none());
    let (ok, _, err) = run(&["get", "configmap", "kc"], None).await;
    assert!(
        !ok && err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
}
