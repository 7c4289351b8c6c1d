//! Fleet acknowledgements end to end (issue 38): three clusters (controllers, each on its own
//! in-process test API server) on one ring write their records; `kseal fleet status` shows
//! them current; a pending key shows up in each record after a refresh, and polls that change
//! nothing write nothing; one cluster is stopped and turns silent, and `--require current`
//! fails naming it.
//!
//! Runs on a directory ring (nothing else needed) and on a Secrets Manager ring with its
//! records in SSM Parameter Store (the moto emulator, `KSEAL_TEST_SM_ENDPOINT`; skipped
//! loudly without it, failing under `CI=true`). Needs the `kseal` and `kseal-ring` binaries
//! next to this test binary (`cargo build -p kseal-cli`).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
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
use kseal_keystore::{AwsOptions, ClusterId, FleetStore, Kid, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;
use kseal_testkit::sm;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

/// How long any asynchronous effect may take (a hung run, not a measurement).
const DEADLINE: Duration = Duration::from_secs(60);

/// A test-only 2048-bit key; do not copy: kseal generates 4096-bit keys.
fn key() -> KeyPair {
    KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).expect("a key pair")
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
    /// `--ring` for the CLI.
    ring_arg: String,
    endpoint: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Where {
    fn directory() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ring");
        Self {
            ring_arg: format!("dir://{}", path.display()),
            location: Location::Directory {
                path,
                insecure_perms: true,
            },
            aws: AwsOptions::default(),
            endpoint: None,
            _dir: Some(dir),
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
            _dir: None,
        }
    }

    /// `kseal fleet status --ring RING ARGS`: (exit code, stdout, stderr).
    fn status(&self, args: &[&str]) -> (i32, String, String) {
        let home = tempfile::tempdir().expect("a home directory");
        let mut command = Command::new(kseal_binary());
        command
            .args([
                "fleet",
                "status",
                "--ring",
                &self.ring_arg,
                "--insecure-perms",
            ])
            .args(args)
            .current_dir(home.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        if let Some(endpoint) = &self.endpoint {
            command.env("KSEAL_AWS_ENDPOINT_URL", endpoint);
        }
        let out = tokio::task::block_in_place(|| command.output()).expect("kseal runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `fleet status -o json`, parsed: cluster → its row.
    fn json(&self) -> std::collections::BTreeMap<String, Value> {
        let (code, stdout, stderr) = self.status(&["-o", "json"]);
        assert_eq!(code, 0, "fleet status failed: {stderr}");
        let report: Value = serde_json::from_str(&stdout).expect("fleet status JSON");
        report["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .map(|row| {
                (
                    row["cluster"].as_str().unwrap_or("").to_owned(),
                    row.clone(),
                )
            })
            .collect()
    }
}

async fn create_namespace(client: &Client, name: &str) -> Namespace {
    // (kube-system exists already: the test API server creates the built-in namespaces.)
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"))
}

/// One cluster: its API server and its controller (key loader, key-source loop, reconciler
/// and the acknowledgement writer), leading.
struct Cluster {
    _server: TestApiServer,
    client: Client,
    state: State,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _requester: KeyRequester,
}

impl Cluster {
    /// `cluster_id`: `--cluster-id`, or `None` for the default (the kube-system UID).
    async fn start(place: &Where, cluster_id: Option<&str>, heartbeat: Duration) -> Self {
        let server = TestApiServer::new();
        let client = server.client();
        crate::fleet::ensure_crd(&client).await;
        create_namespace(&client, "kseal").await;
        create_namespace(&client, "apps").await;
        let mut argv = vec!["kseal-controller", "--controller-namespace", "kseal"];
        argv.extend_from_slice(&["--leader-elect", "false"]);
        if let Some(id) = cluster_id {
            argv.extend_from_slice(&["--cluster-id", id]);
        }
        let mut config = Config::from_args(Args::try_parse_from(argv).unwrap(), None).unwrap();
        config.namespaces = Namespaces::Only(vec!["apps".to_owned()]);
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
        let spawned = kseal_controller::spawn(&client, &config, &state, requests, &stop_rx);
        let writer = tokio::spawn(kseal_controller::fleet::run(
            client.clone(),
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
        Self {
            _server: server,
            client,
            state,
            stop,
            tasks: vec![spawned.keys, spawned.remote, spawned.reconciler, writer],
            _requester: requester,
        }
    }

    fn writes(&self, outcome: &str) -> u64 {
        self.state
            .metrics
            .fleet
            .ack_writes
            .get_or_create(&kseal_controller::fleet::AckOutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .get()
    }

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

fn kid(pair: &KeyPair) -> Kid {
    Kid::of(pair.public_key())
}

/// Waits until `cluster`'s record says `check`.
async fn wait_record(
    store: &FleetStore,
    cluster: &str,
    what: &str,
    check: impl Fn(&kseal_keystore::Ack) -> bool,
) {
    let id = ClusterId::parse(cluster).unwrap();
    eventually(&format!("{cluster}: {what}"), DEADLINE, || async {
        Ok(store.read(&id).await?.filter(|a| check(a)).map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
}

async fn three_clusters_acknowledge_and_a_stopped_one_turns_silent(place: Where) {
    let first = key();
    let ring = Ring::open(&place.location, &place.aws).await.unwrap();
    ring.push(&first).await.unwrap();
    let store = FleetStore::open(&place.location, &place.aws).await.unwrap();

    // Heartbeats: an hour for a and c (only changes write), two seconds for b, which is
    // stopped below and so turns silent after two of them.
    let hour = Duration::from_secs(3600);
    let a = Cluster::start(&place, Some("cluster-a"), hour).await;
    let b = Cluster::start(&place, Some("cluster-b"), Duration::from_secs(2)).await;
    let c = Cluster::start(&place, None, hour).await;
    let c_id = Api::<Namespace>::all(c.client.clone())
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .expect("the test API server gives namespaces a UID");

    // Two SealedSecrets on cluster a, sealed by the ring's key: counted under its kid.
    for name in ["db", "api"] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "apps"},
            "stringData": {"password": "s3cr3t"}
        }))
        .unwrap();
        let sealed = kseal_api::seal_secret(
            &secret,
            first.public_key(),
            &kseal_api::SealOptions::default(),
        )
        .unwrap();
        Api::<SealedSecret>::namespaced(a.client.clone(), "apps")
            .create(&PostParams::default(), &sealed)
            .await
            .unwrap();
    }
    let version = ring.require_snapshot().await.unwrap().index.version;
    for cluster in ["cluster-a", "cluster-b", c_id.as_str()] {
        wait_record(
            &store,
            cluster,
            "holds the ring and seals with its key",
            |ack| {
                ack.index_version == version
                    && ack.held == [kid(&first)]
                    && ack.sealing.as_ref() == Some(&kid(&first))
            },
        )
        .await;
    }
    wait_record(&store, "cluster-a", "counts its two objects", |ack| {
        ack.objects.get(&kid(&first)) == Some(&2) && ack.unattributed == 0
    })
    .await;

    let rows = place.json();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (name, row) in &rows {
        assert_eq!(row["status"], "current", "{name}: {row}");
    }
    let (code, table, stderr) = place.status(&["--require", "current"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.starts_with("CLUSTER") && table.contains("cluster-a") && table.contains(&c_id),
        "{table}"
    );
    assert!(
        table.contains(&format!("{}=2", kid(&first).short())),
        "{table}"
    );
    assert!(stderr.contains("3 clusters: 3 current"), "{stderr}");

    // Polls that change nothing write nothing (cluster a's heartbeat is an hour away).
    let written = a.writes("written");
    let refreshes = || {
        a.state
            .metrics
            .key_source_sync_triggers
            .get_or_create(&kseal_controller::metrics::TriggerLabels {
                trigger: "refresh".to_owned(),
            })
            .get()
    };
    for _ in 0..3 {
        let before = refreshes();
        // Asked again at every look: a request that arrives within the refresh spacing of a
        // poll (a slow machine) is merged into the next poll, which is not counted as one.
        eventually("a poll of the ring", DEADLINE, || async {
            if refreshes() > before {
                return Ok(Some(()));
            }
            a.state.refresh.request();
            Ok(None)
        })
        .await
        .unwrap();
        // Several of the writer's looks (every 200 ms) after the poll.
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert_eq!(
        a.writes("written"),
        written,
        "a poll that changes nothing wrote"
    );

    // A pushed (pending) key: each running cluster reports holding it after its next poll.
    let second = key();
    ring.push(&second).await.unwrap();
    for cluster in [&a, &b, &c] {
        cluster.state.refresh.request();
    }
    for name in ["cluster-a", "cluster-b", c_id.as_str()] {
        wait_record(&store, name, "holds the pending key", |ack| {
            ack.held.contains(&kid(&second))
        })
        .await;
    }
    assert!(a.writes("written") > written, "the change was written");

    // Cluster b stops: after two heartbeats it is silent, and CI's gate fails naming it.
    b.stop().await;
    eventually("cluster-b reported silent", DEADLINE, || async {
        let rows = place.json();
        Ok(
            (rows.get("cluster-b").map(|r| r["status"].clone()) == Some(json!("silent")))
                .then_some(rows),
        )
    })
    .await
    .map(|rows| {
        assert_eq!(rows["cluster-a"]["status"], "current", "{rows:?}");
        assert_eq!(rows[&c_id]["status"], "current", "{rows:?}");
        assert_eq!(rows["cluster-a"]["standing"]["holdsPending"], true);
    })
    .unwrap();
    let (code, _, stderr) = place.status(&["--require", "current"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "error: --require current: 1 of 3 clusters not current: cluster-b (silent: silent for"
        ),
        "{stderr}"
    );
    a.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_status_on_a_directory_ring() {
    three_clusters_acknowledge_and_a_stopped_one_turns_silent(Where::directory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_status_on_secrets_manager_with_records_in_parameter_store() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let prefix = sm::unique_prefix("fleet_ack");
    three_clusters_acknowledge_and_a_stopped_one_turns_silent(Where::secrets_manager(
        &endpoint, &prefix,
    ))
    .await;
}
