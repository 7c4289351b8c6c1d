//! Rotation that waits for the fleet, and retirement that refuses while a cluster still uses
//! the key (issue 38), end to end with real controllers: three clusters (controllers, each on
//! its own in-process test API server) on one ring write their fleet records; one is stopped
//! and `kseal fleet status` shows it silent; `kseal keys rotate --wait-for all` pushes a key
//! and waits, not activating while the stopped cluster is missing; the cluster comes back, and
//! the rotation activates. `kseal keys retire` of the old key is refused while a cluster still
//! opens objects with it, and succeeds once they are re-sealed with the new key and applied
//! again.
//!
//! Runs on a directory ring (nothing else needed), on a Secrets Manager ring with its records
//! in SSM Parameter Store (the moto emulator, `KSEAL_TEST_SM_ENDPOINT`), and with the three
//! clusters on the reference kube-apiserver (`KSEAL_REFAPI_KUBECONFIG`); each skipped loudly
//! without what it needs, failing under `CI=true`. Needs the `kseal` and `kseal-ring` binaries
//! next to this test binary (`cargo build -p kseal-cli`).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kseal_api::SealedSecret;
use kseal_controller::config::{Args, KeySourceConfig, Namespaces};
use kseal_controller::fleet::Options;
use kseal_controller::keys::{KeyRequester, KeyRequests};
use kseal_controller::{Config, State};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_keystore::{Ack, AwsOptions, ClusterId, FleetStore, Kid, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kseal_testkit::sm;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

/// How long any asynchronous effect may take (a hung run, not a measurement).
const DEADLINE: Duration = Duration::from_secs(90);

/// A test-only 2048-bit key; do not copy: kseal generates 4096-bit keys.
fn key() -> KeyPair {
    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("a key pair")
}

fn kid(pair: &KeyPair) -> Kid {
    Kid::of(pair.public_key())
}

fn kseal_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let bin = dir.join(format!("kseal{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the kseal CLI is not at {}: build it with `cargo build -p kseal-cli`",
        bin.display()
    );
    bin
}

/// Where the ring is, as the CLI and the controllers name it.
struct Where {
    location: Location,
    aws: AwsOptions,
    ring_arg: String,
    endpoint: Option<String>,
    home: tempfile::TempDir,
}

impl Where {
    fn directory() -> Self {
        let home = tempfile::tempdir().expect("a temporary directory");
        let path = home.path().join("ring");
        Self {
            ring_arg: format!("dir://{}", path.display()),
            location: Location::Directory {
                path,
                insecure_perms: true,
            },
            aws: AwsOptions::default(),
            endpoint: None,
            home,
        }
    }

    fn secrets_manager(endpoint: &str, prefix: &str) -> Self {
        Self {
            location: Location::SecretsManager {
                prefix: prefix.to_owned(),
                region: None,
            },
            aws: AwsOptions {
                endpoint_url: Some(endpoint.to_owned()),
                region: Some("us-east-1".to_owned()),
                ..AwsOptions::default()
            },
            ring_arg: prefix.to_owned(),
            endpoint: Some(endpoint.to_owned()),
            home: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// `kseal ARGS --ring RING --insecure-perms`, ready to run.
    fn kseal(&self, args: &[&str]) -> Command {
        let mut command = Command::new(kseal_binary());
        command
            .args(args)
            .args(["--ring", &self.ring_arg, "--insecure-perms"])
            .current_dir(self.home.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(endpoint) = &self.endpoint {
            command.env("KSEAL_AWS_ENDPOINT_URL", endpoint);
        }
        command
    }

    /// Runs `kseal ARGS`: (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut command = self.kseal(args);
        let out = tokio::task::block_in_place(|| command.output()).expect("kseal runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            !stdout.contains("PRIVATE KEY") && !stderr.contains("PRIVATE KEY"),
            "{stderr}"
        );
        (out.status.code().unwrap_or(-1), stdout, stderr)
    }

    /// `fleet status -o json`'s row of `cluster`.
    fn status_of(&self, cluster: &str) -> Value {
        let (code, stdout, stderr) = self.run(&["fleet", "status", "-o", "json"]);
        assert_eq!(code, 0, "fleet status failed: {stderr}");
        let report: Value = serde_json::from_str(&stdout).expect("fleet status JSON");
        report["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .find(|row| row["cluster"] == cluster)
            .cloned()
            .unwrap_or(Value::Null)
    }
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// One cluster: its own test API server, or namespaces of its own on a shared reference
/// kube-apiserver. Its controller runs while [`Controller`] does.
struct Cluster {
    server: Option<TestApiServer>,
    client: Client,
    /// The controller's namespace.
    ctrl: String,
    /// The namespace it watches.
    apps: String,
}

impl Cluster {
    /// A cluster on a test API server of its own, or (with `shared`) with namespaces named
    /// after `tag` on that server.
    async fn new(shared: Option<&Client>, tag: &str) -> Self {
        let (server, client, ctrl, apps) = match shared {
            Some(client) => (
                None,
                client.clone(),
                format!("kseal-{tag}"),
                format!("apps-{tag}"),
            ),
            None => {
                let server = TestApiServer::new();
                let client = server.client();
                (Some(server), client, "kseal".to_owned(), "apps".to_owned())
            }
        };
        crate::fleet::ensure_crd(&client).await;
        create_namespace(&client, &ctrl).await;
        create_namespace(&client, &apps).await;
        Self {
            server,
            client,
            ctrl,
            apps,
        }
    }

    /// Deletes the namespaces made for a cluster on a shared server.
    async fn delete(&self) {
        if self.server.is_none() {
            let api = Api::<Namespace>::all(self.client.clone());
            for name in [&self.ctrl, &self.apps] {
                let _ = api.delete(name, &Default::default()).await;
            }
        }
    }

    /// Starts the cluster's controller (leading), `id` its `--cluster-id`.
    fn controller(&self, place: &Where, id: &str, heartbeat: Duration) -> Controller {
        let argv = [
            "kseal-controller",
            "--controller-namespace",
            &self.ctrl,
            "--leader-elect",
            "false",
            "--cluster-id",
            id,
        ];
        let mut config = Config::from_args(Args::try_parse_from(argv).unwrap(), None).unwrap();
        config.namespaces = Namespaces::Only(vec![self.apps.clone()]);
        config.key_source = Some(KeySourceConfig {
            location: place.location.clone(),
            interval: Duration::from_secs(3600),
            retire_grace: Duration::from_secs(3600),
            refresh_spacing: Duration::from_millis(100),
            aws: place.aws.clone(),
            anchor: None,
        });
        let state = State::new();
        state.leadership.assume(true);
        let config = Arc::new(config);
        let (stop, stop_rx) = watch::channel(false);
        let (requester, requests) = KeyRequests::channel();
        let spawned = kseal_controller::spawn(&self.client, &config, &state, requests, &stop_rx);
        let writer = tokio::spawn(kseal_controller::fleet::run(
            self.client.clone(),
            config.clone(),
            state.clone(),
            Options {
                heartbeat,
                recount: Duration::from_millis(300),
                check: Duration::from_millis(200),
                retry_min: Duration::from_millis(200),
                retry_max: Duration::from_secs(1),
            },
            stop_rx,
        ));
        Controller {
            state,
            stop,
            tasks: vec![spawned.keys, spawned.remote, spawned.reconciler, writer],
            _requester: requester,
        }
    }

    /// Seals a Secret `name` in `apps` with `pair` (annotated with its key, as `kseal seal`
    /// does) and applies it, replacing what was there.
    async fn apply_sealed(&self, name: &str, pair: &KeyPair) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.apps},
            "stringData": {"password": "s3cr3t"}
        }))
        .unwrap();
        let mut sealed = kseal_api::seal_secret(
            &secret,
            pair.public_key(),
            &kseal_api::SealOptions::default(),
        )
        .unwrap();
        let api = Api::<SealedSecret>::namespaced(self.client.clone(), &self.apps);
        let applied = match api.get_opt(name).await.unwrap() {
            Some(existing) => {
                sealed.metadata.resource_version = existing.metadata.resource_version;
                api.replace(name, &PostParams::default(), &sealed).await
            }
            None => api.create(&PostParams::default(), &sealed).await,
        };
        applied.unwrap_or_else(|e| panic!("applying {name}: {e}"));
    }
}

/// A running controller.
struct Controller {
    state: State,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _requester: KeyRequester,
}

impl Controller {
    async fn stop(self) {
        self.stop.send_replace(true);
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(DEADLINE, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// Waits until `cluster`'s record says `check`.
async fn wait_record(store: &FleetStore, cluster: &str, what: &str, check: impl Fn(&Ack) -> bool) {
    let id = ClusterId::parse(cluster).unwrap();
    eventually(&format!("{cluster}: {what}"), DEADLINE, || async {
        Ok(store.read(&id).await?.filter(|a| check(a)).map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Waits (bounded) for `child` to exit: (exit code, stderr).
async fn finish(child: Child) -> (i32, String) {
    let out = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("kseal keys rotate finished in time")
    .unwrap()
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn rotation_waits_for_a_stopped_cluster_and_retire_waits_for_reseals(
    place: Where,
    shared: Option<Client>,
) {
    let first = key();
    let ring = Ring::open(&place.location, &place.aws).await.unwrap();
    ring.push(&first).await.unwrap();
    let store = FleetStore::open(&place.location, &place.aws).await.unwrap();
    let hour = Duration::from_secs(3600);
    // Namespaces of their own on a shared server, unique to this run.
    let run = &kid(&first).to_string()[..8];
    let shared = shared.as_ref();
    let a = Cluster::new(shared, &format!("r{run}-a")).await;
    let b = Cluster::new(shared, &format!("r{run}-b")).await;
    let c = Cluster::new(shared, &format!("r{run}-c")).await;
    let ctl_a = a.controller(&place, "cluster-a", hour);
    // b writes every 2 s while it runs, so it turns silent 4 s after it stops.
    let ctl_b = b.controller(&place, "cluster-b", Duration::from_secs(2));
    let ctl_c = c.controller(&place, "cluster-c", hour);
    for name in ["db", "api"] {
        a.apply_sealed(name, &first).await;
    }
    let v1 = ring.require_snapshot().await.unwrap().index.version;
    for cluster in ["cluster-a", "cluster-b", "cluster-c"] {
        wait_record(&store, cluster, "holds the ring", |ack| {
            ack.index_version == v1 && ack.held == [kid(&first)]
        })
        .await;
    }
    wait_record(&store, "cluster-a", "counts its two objects", |ack| {
        ack.objects.get(&kid(&first)) == Some(&2)
    })
    .await;

    // b stops and turns silent.
    ctl_b.stop().await;
    eventually("cluster-b reported silent", DEADLINE, || async {
        Ok((place.status_of("cluster-b")["status"] == "silent").then_some(()))
    })
    .await
    .unwrap();

    // The rotation pushes its key and waits for all three.
    let child = place
        .kseal(&[
            "keys",
            "rotate",
            "--key-size",
            "2048",
            "--yes",
            "--wait-for",
            "all",
            "--timeout",
            "80s",
            "--wait-poll",
            "200ms",
        ])
        .spawn()
        .unwrap();
    let new = eventually("the rotated key in the ring", DEADLINE, || async {
        let index = ring.require_snapshot().await?.index;
        Ok(index
            .keys
            .iter()
            .find(|e| e.kid != kid(&first))
            .map(|e| (e.kid.clone(), index.version)))
    })
    .await
    .unwrap();
    let (new_kid, v2) = new;
    for ctl in [&ctl_a, &ctl_c] {
        ctl.state.refresh.request();
    }
    for cluster in ["cluster-a", "cluster-c"] {
        wait_record(&store, cluster, "holds the pending key", |ack| {
            ack.index_version >= v2 && ack.held.contains(&new_kid)
        })
        .await;
    }
    // Two of three hold it; b is silent: nothing is activated.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        ring.require_snapshot().await.unwrap().index.active,
        Some(kid(&first)),
        "activated while cluster-b was silent"
    );
    // b comes back, reads the ring, reports the key: the rotation activates it.
    let ctl_b = b.controller(&place, "cluster-b", Duration::from_secs(2));
    let (code, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("waiting for cluster-b (silent"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "3/3 clusters hold key {}; activating",
            new_kid.short()
        )),
        "{stderr}"
    );
    assert_eq!(
        ring.require_snapshot().await.unwrap().index.active,
        Some(new_kid.clone())
    );

    // Retiring the old key is refused while cluster a still opens objects with it.
    let empty = tempfile::tempdir().unwrap();
    let check = empty.path().display().to_string();
    let old = kid(&first).to_string();
    let retire = [
        "keys",
        "retire",
        &old,
        "--check",
        &check,
        "--allow-none",
        "--yes",
    ];
    let (code, _, stderr) = place.run(&retire);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "key {} still opens SealedSecrets in 1 cluster that reported recently: cluster-a \
             (2 SealedSecrets)",
            kid(&first).short()
        )),
        "{stderr}"
    );
    assert!(
        ring.require_snapshot()
            .await
            .unwrap()
            .index
            .entry(&kid(&first))
            .is_some()
    );
    // Re-sealed with the active key (what `kseal reseal --stale` writes) and applied again:
    // once cluster a reports no object on the old key, it may go.
    ctl_a.state.refresh.request();
    wait_record(&store, "cluster-a", "holds the active key", |ack| {
        ack.sealing.as_ref() == Some(&new_kid)
    })
    .await;
    let second = ring.read_key(&new_kid).await.unwrap();
    for name in ["db", "api"] {
        a.apply_sealed(name, &second).await;
    }
    wait_record(&store, "cluster-a", "has no object on the old key", |ack| {
        !ack.objects.contains_key(&kid(&first)) && ack.objects.get(&new_kid) == Some(&2)
    })
    .await;
    let (code, _, stderr) = place.run(&retire);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("3 clusters reported recently: none opens SealedSecrets with key"),
        "{stderr}"
    );
    assert!(
        ring.require_snapshot()
            .await
            .unwrap()
            .index
            .entry(&kid(&first))
            .is_none()
    );
    for ctl in [ctl_a, ctl_b, ctl_c] {
        ctl.stop().await;
    }
    for cluster in [a, b, c] {
        cluster.delete().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_wait_for_all_and_retire_on_a_directory_ring() {
    rotation_waits_for_a_stopped_cluster_and_retire_waits_for_reseals(Where::directory(), None)
        .await;
}

/// The three clusters on one reference kube-apiserver, each with namespaces of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_wait_for_all_and_retire_on_a_real_apiserver() {
    if let Some(client) = crate::fleet::real_client("rotation that waits for the fleet").await {
        rotation_waits_for_a_stopped_cluster_and_retire_waits_for_reseals(
            Where::directory(),
            Some(client),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_wait_for_all_and_retire_on_secrets_manager() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("fleet_rotate");
    rotation_waits_for_a_stopped_cluster_and_retire_waits_for_reseals(
        Where::secrets_manager(&endpoint, &prefix),
        None,
    )
    .await;
}
