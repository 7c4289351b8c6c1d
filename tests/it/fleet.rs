//! The fleet mission end to end: one key ring in AWS Secrets Manager (the moto emulator) is the
//! only key source of every cluster, including clusters that do not exist yet.
//!
//! 1. `kseal keys push` seeds the ring. Before any cluster exists, `kseal create
//!    git-credentials` (Flux) and `kseal create aws-credentials` (Crossplane) seal the bootstrap
//!    Secrets with `--cert secretsmanager://RING`.
//! 2. A controller starts on a brand-new cluster: an empty controller namespace (no key
//!    Secret), key generation off, the ring as `--key-source`. The bootstrap SealedSecrets are
//!    applied at once, as Flux would; the controller mirrors the ring and unseals them.
//! 3. `kseal keys rotate --now`; after a refresh the cluster seals with the new key (`kseal
//!    seal --cert secretsmanager://RING` carries its fingerprint) and still opens the old
//!    SealedSecrets.
//! 4. A second cluster, started after the rotation, opens the old SealedSecrets and the new one.
//!
//! Runs on kseal-testkit's API server (two servers, so the two clusters have the same namespace
//! names and the very same files are applied to both) and on the reference kube-apiserver (one
//! server: the second cluster has namespaces of its own, and its copies of the bootstrap
//! SealedSecrets are sealed for them, also before any cluster exists and with the first key).
//! Each run has its own ring prefix and namespaces. Assertions are on resulting state (ring
//! contents, Secret data), with bounded waits.
//!
//! Needs the Secrets Manager emulator (`KSEAL_TEST_SM_ENDPOINT`, with dummy AWS credentials in
//! the environment: the in-process controllers use the default credential chain), and the
//! `kseal` binary next to this test binary (`cargo test --workspace` builds it). Without the
//! emulator or the reference kube-apiserver the runs skip loudly, and fail under `CI=true`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use clap::Parser as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_controller::config::{Args, KeySourceConfig, Namespaces};
use kseal_controller::keys::source as remote;
use kseal_controller::keys::{KeyRequester, KeyRequests};
use kseal_controller::{Config, State};
use kseal_keystore::{AwsOptions, IndexEntry, Location, Ring};
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::{eventually, unique};
use kseal_testkit::sm;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::sync::watch;

/// How long any asynchronous effect may take (a hung run, not a measurement).
const DEADLINE: Duration = Duration::from_secs(60);

const KNOWN_HOSTS: &str =
    "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n";
/// AWS's documentation example keys: not real credentials.
const ACCESS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

/// The Secret sealed after the rotation.
fn app_secret(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: {namespace}\n\
         stringData:\n  password: rotated-s3cr3t\n  user: app\n"
    )
}

fn app_data() -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        ("password".to_owned(), b"rotated-s3cr3t".to_vec()),
        ("user".to_owned(), b"app".to_vec()),
    ])
}

fn crossplane_data() -> BTreeMap<String, Vec<u8>> {
    let ini = format!(
        "[default]\naws_access_key_id = {ACCESS_KEY_ID}\naws_secret_access_key = {SECRET_ACCESS_KEY}\n"
    );
    BTreeMap::from([("credentials".to_owned(), ini.into_bytes())])
}

// ---------------------------------------------------------------------------------------
// the kseal CLI

/// The `kseal` binary cargo built next to this test binary: `target/<profile>/deps/it-<hash>`
/// runs, `target/<profile>/kseal` is the CLI (another package's binary, so no
/// `CARGO_BIN_EXE_kseal` here).
fn kseal_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let bin = profile_dir.join(format!("kseal{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the kseal CLI is not at {}: build it with `cargo build -p kseal-cli` (`cargo test \
         --workspace` builds it)",
        bin.display()
    );
    bin
}

/// Runs `kseal` in a directory of its own, with a clean environment: dummy AWS credentials
/// (moto checks none), region us-east-1, no instance metadata, empty AWS config files, and the
/// emulator as `KSEAL_AWS_ENDPOINT_URL` (what `--cert secretsmanager://…` reads).
pub(crate) struct Cli {
    bin: PathBuf,
    endpoint: String,
    dir: tempfile::TempDir,
}

impl Cli {
    pub(crate) fn new(endpoint: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for name in ["aws-config", "aws-credentials"] {
            std::fs::write(dir.path().join(name), "").expect("an empty AWS config file");
        }
        std::fs::write(dir.path().join("known_hosts"), KNOWN_HOSTS).expect("known_hosts");
        Self {
            bin: kseal_binary(),
            endpoint: endpoint.to_owned(),
            dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Runs `kseal args` (with `input` on stdin), which must succeed; returns its stdout.
    fn run(&self, args: &[&str], input: Option<&str>) -> String {
        let (success, stdout, stderr) = self.output(args, input);
        assert!(success, "`kseal {}` failed:\n{stderr}", args.join(" "),);
        stdout
    }

    /// Runs `kseal args`, which must fail; returns its stderr.
    fn try_run(&self, args: &[&str], input: Option<&str>) -> String {
        let (success, _, stderr) = tokio::task::block_in_place(|| self.output(args, input));
        assert!(!success, "`kseal {}` succeeded", args.join(" "));
        stderr
    }

    fn output(&self, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        let home = self.dir.path();
        let mut child = Command::new(&self.bin)
            .args(args)
            .current_dir(home)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", home.join("aws-config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", home.join("aws-credentials"))
            .env("KSEAL_AWS_ENDPOINT_URL", &self.endpoint)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(text) = input {
            stdin
                .write_all(text.as_bytes())
                .expect("writing kseal's stdin");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("kseal runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        for text in [&stdout, &stderr] {
            assert!(
                !text.contains("PRIVATE KEY"),
                "`kseal {}` printed a private key",
                args.join(" ")
            );
        }
        (out.status.success(), stdout, stderr)
    }

    /// [`Cli::run`] from async code (the CLI blocks; other tasks keep running).
    pub(crate) fn run_blocking(&self, args: &[&str], input: Option<&str>) -> String {
        tokio::task::block_in_place(|| self.run(args, input))
    }

    /// `kseal keys ARGS --ring RING --endpoint-url MOTO`.
    pub(crate) fn keys(&self, ring: &str, args: &[&str]) -> String {
        let mut all = vec!["keys"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ring", ring, "--endpoint-url", &self.endpoint]);
        self.run_blocking(&all, None)
    }
}

// ---------------------------------------------------------------------------------------
// the ring, as the test reads it

async fn open_ring(endpoint: &str, prefix: &str) -> Ring {
    let location = Location::SecretsManager {
        prefix: prefix.to_owned(),
        region: None,
    };
    Ring::open(&location, &aws_options(endpoint))
        .await
        .expect("open the ring")
}

fn aws_options(endpoint: &str) -> AwsOptions {
    AwsOptions {
        endpoint_url: Some(endpoint.to_owned()),
        region: Some("us-east-1".to_owned()),
        ..AwsOptions::default()
    }
}

/// The ring's index entries and its active entry.
pub(crate) async fn index(endpoint: &str, prefix: &str) -> (Vec<IndexEntry>, IndexEntry) {
    let index = open_ring(endpoint, prefix)
        .await
        .require_snapshot()
        .await
        .expect("read the ring's index")
        .index;
    let active = index
        .active_entry()
        .cloned()
        .expect("the ring has an active key");
    (index.keys, active)
}

/// The ring's trust anchor, as `kseal keys list -o json | jq .roots[0].kid` shows it.
pub(crate) async fn anchor_of(endpoint: &str, prefix: &str) -> kseal_keystore::Kid {
    let snapshot = open_ring(endpoint, prefix)
        .await
        .require_snapshot()
        .await
        .expect("read the ring's index");
    snapshot
        .verified
        .anchor()
        .cloned()
        .expect("a signed ring history")
}

/// The in-process controllers read AWS credentials like the real one: from the environment.
pub(crate) fn require_aws_credentials() {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    assert!(
        set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"),
        "the fleet test runs controllers in this process, which read AWS credentials from the \
         environment: set AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
         AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true (scripts/test.sh does)"
    );
}

// ---------------------------------------------------------------------------------------
// clusters

/// The namespaces of one cluster: the controller's (empty at start: no key Secret) and the
/// bootstrap consumers'.
#[derive(Debug, Clone)]
struct Names {
    ctrl: String,
    flux: String,
    crossplane: String,
    apps: String,
}

impl Names {
    fn new() -> Self {
        Self {
            ctrl: unique("kseal-fleet"),
            flux: unique("flux-system"),
            crossplane: unique("crossplane-system"),
            apps: unique("apps"),
        }
    }

    fn all(&self) -> [&str; 4] {
        [&self.ctrl, &self.flux, &self.crossplane, &self.apps]
    }

    async fn create(&self, client: &Client) {
        let api = Api::<Namespace>::all(client.clone());
        for name in self.all() {
            let ns: Namespace = serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {"kseal.dev/test": "true"}}}),
            )
            .expect("namespace");
            api.create(&PostParams::default(), &ns)
                .await
                .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        }
    }

    async fn delete(&self, client: &Client) {
        let api = Api::<Namespace>::all(client.clone());
        for name in self.all() {
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }
}

/// Registers the SealedSecret CRD from `deploy/crd.yaml` and waits until it is served.
pub(crate) async fn ensure_crd(client: &Client) {
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(include_str!("../../deploy/crd.yaml")).expect("deploy/crd.yaml");
    let mut value = serde_json::to_value(&crd).expect("CRD as JSON");
    value["apiVersion"] = json!("apiextensions.k8s.io/v1");
    value["kind"] = json!("CustomResourceDefinition");
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            "sealedsecrets.bitnami.com",
            &PatchParams::apply("kseal-tests").force(),
            &Patch::Apply(value),
        )
        .await
        .expect("apply the SealedSecret CRD");
    let api: Api<SealedSecret> = Api::all(client.clone());
    eventually("the SealedSecret CRD to be served", DEADLINE, || async {
        Ok(api
            .list(&ListParams::default().limit(1))
            .await
            .ok()
            .map(|_| ()))
    })
    .await
    .expect("CRD served");
}

/// A controller as `main` wires it with `--key-source`: key loader, reconciler and the
/// key-source loop, as the leader, in this process.
struct Controller {
    name: &'static str,
    state: State,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _requester: KeyRequester,
}

impl Controller {
    async fn start(
        name: &'static str,
        client: &Client,
        names: &Names,
        ring: &str,
        endpoint: &str,
    ) -> Self {
        let args = Args::try_parse_from([
            "kseal-controller",
            "--controller-namespace",
            &names.ctrl,
            "--leader-elect",
            "false",
        ])
        .expect("controller flags");
        let mut config = Config::from_args(args, None).expect("controller config");
        config.namespaces = Namespaces::Only(vec![
            names.flux.clone(),
            names.crossplane.clone(),
            names.apps.clone(),
        ]);
        let source = KeySourceConfig {
            location: Location::SecretsManager {
                prefix: ring.to_owned(),
                region: None,
            },
            interval: Duration::from_secs(3600),
            retire_grace: Duration::from_secs(168 * 3600),
            refresh_spacing: Duration::from_secs(5),
            aws: aws_options(endpoint),
            // The anchor the README tells a user to give (Helm keySource.ringAnchor).
            anchor: Some(anchor_of(endpoint, ring).await),
        };
        config.key_source = Some(source);
        assert!(
            !config.generate_key_if_missing,
            "keys come from the ring only"
        );
        let state = State::new();
        state.leadership.assume(true);
        let config = Arc::new(config);
        let (stop, stop_rx) = watch::channel(false);
        let (requester, requests) = KeyRequests::channel();
        let spawned = kseal_controller::spawn(client, &config, &state, requests, &stop_rx);
        let tasks = vec![spawned.keys, spawned.remote, spawned.reconciler];
        Self {
            name,
            state,
            stop,
            tasks,
            _requester: requester,
        }
    }

    /// Waits until the controller is ready with `keys` keys and `sealing` (a fingerprint)
    /// seals.
    async fn wait_ring(&self, what: &str, keys: usize, sealing: &str) {
        let state = &self.state;
        let result = eventually(what, DEADLINE, || async {
            let ring = state.keys.ring();
            let ok = state.readiness.is_ready()
                && ring.len() == keys
                && ring.sealing_key().map(|k| k.id().to_string()).as_deref() == Some(sealing);
            Ok(ok.then_some(()))
        })
        .await;
        if let Err(e) = result {
            let ring = state.keys.ring();
            panic!(
                "{}: {e:#}: ready={}, {} keys, sealing key {:?}, key source {:?}",
                self.name,
                state.readiness.is_ready(),
                ring.len(),
                ring.sealing_key().map(|k| k.id().to_string()),
                state.readiness.key_source()
            );
        }
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

/// The key Secrets the controller mirrored from the ring: kid → whether it is the active one.
async fn mirrors(client: &Client, ctrl: &str) -> BTreeMap<String, bool> {
    Api::<Secret>::namespaced(client.clone(), ctrl)
        .list(&ListParams::default().labels(&format!("{}=true", remote::MIRROR_LABEL)))
        .await
        .expect("list the mirror Secrets")
        .items
        .iter()
        .map(|s| {
            let a = s.annotations();
            (
                a.get(remote::KID_ANNOTATION).cloned().unwrap_or_default(),
                a.get(remote::ACTIVE_ANNOTATION).map(String::as_str) == Some("true"),
            )
        })
        .collect()
}

/// The data of Secret `namespace/name` once the controller wrote it.
pub(crate) async fn wait_data(
    client: &Client,
    cluster: &str,
    namespace: &str,
    name: &str,
) -> (Secret, BTreeMap<String, Vec<u8>>) {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = eventually(
        &format!("{cluster}: Secret {namespace}/{name} to be unsealed"),
        DEADLINE,
        || async { Ok(api.get_opt(name).await?) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    let data = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    (secret, data)
}

pub(crate) async fn apply(client: &Client, ss: &SealedSecret) {
    let namespace = ss.metadata.namespace.as_deref().expect("a namespace");
    Api::<SealedSecret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), ss)
        .await
        .unwrap_or_else(|e| panic!("creating SealedSecret {namespace}/{}: {e}", ss.name_any()));
}

pub(crate) fn parse_sealed(text: &str, what: &str) -> SealedSecret {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{what} is not a SealedSecret: {e}"))
}

pub(crate) fn hint(ss: &SealedSecret) -> &str {
    ss.annotations()
        .get(SEALING_KEY_ANNOTATION)
        .map_or("", String::as_str)
}

// ---------------------------------------------------------------------------------------
// the bootstrap Secrets

/// The two bootstrap SealedSecrets for one cluster's namespaces, as the CLI wrote them.
#[derive(Clone)]
struct Bootstrap {
    flux: SealedSecret,
    crossplane: SealedSecret,
    /// The deploy key's public half (`--public-key-out`).
    deploy_key: String,
}

impl Bootstrap {
    /// Seals them with the ring's active key; no cluster is needed.
    fn seal(cli: &Cli, ring: &str, names: &Names) -> Self {
        let cert = format!("secretsmanager://{ring}");
        let (flux_file, pub_file, aws_file) = (
            format!("flux-{}.yaml", names.flux),
            format!("deploy-key-{}.pub", names.flux),
            format!("aws-{}.yaml", names.crossplane),
        );
        cli.run_blocking(
            &[
                "create",
                "git-credentials",
                "--cert",
                &cert,
                "--generate-key",
                "--known-hosts-file",
                "known_hosts",
                "--public-key-out",
                &pub_file,
                "-n",
                &names.flux,
                "-w",
                &flux_file,
            ],
            None,
        );
        cli.run_blocking(
            &[
                "create",
                "aws-credentials",
                "--cert",
                &cert,
                "--access-key-id",
                ACCESS_KEY_ID,
                "--secret-access-key-stdin",
                "-n",
                &names.crossplane,
                "-w",
                &aws_file,
            ],
            Some(SECRET_ACCESS_KEY),
        );
        let flux = parse_sealed(&cli.read(&flux_file), &flux_file);
        let crossplane = parse_sealed(&cli.read(&aws_file), &aws_file);
        assert_eq!(
            (flux.name_any(), flux.namespace()),
            ("flux-system".to_owned(), Some(names.flux.clone()))
        );
        assert_eq!(
            (crossplane.name_any(), crossplane.namespace()),
            ("aws-credentials".to_owned(), Some(names.crossplane.clone()))
        );
        Self {
            flux,
            crossplane,
            deploy_key: cli.read(&pub_file),
        }
    }

    async fn apply(&self, client: &Client) {
        apply(client, &self.flux).await;
        apply(client, &self.crossplane).await;
    }

    /// Both Secrets exist with the data that was sealed.
    async fn check(&self, client: &Client, cluster: &str, names: &Names) -> Secret {
        let (flux, data) = wait_data(client, cluster, &names.flux, "flux-system").await;
        check_flux(&data, &self.deploy_key);
        let (_, data) = wait_data(client, cluster, &names.crossplane, "aws-credentials").await;
        assert_eq!(data, crossplane_data(), "{cluster}: the Crossplane Secret");
        flux
    }
}

/// Flux's SSH Secret: the generated private key, its public half (as written to the
/// `--public-key-out` file) and the known hosts.
fn check_flux(data: &BTreeMap<String, Vec<u8>>, deploy_key: &str) {
    let keys: BTreeSet<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["identity", "identity.pub", "known_hosts"]),
        "the Flux Secret's items"
    );
    assert_eq!(data["known_hosts"], KNOWN_HOSTS.as_bytes());
    assert_eq!(data["identity.pub"], deploy_key.as_bytes());
    // The private key is the one the public key belongs to: an OpenSSH key file holds its
    // public key blob.
    let identity = std::str::from_utf8(&data["identity"]).expect("identity is text");
    let body: String = identity
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert!(
        identity.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"),
        "identity is an OpenSSH private key"
    );
    let file = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("identity's base64");
    let blob = deploy_key
        .split_whitespace()
        .nth(1)
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .expect("the deploy key is `ssh-ed25519 BASE64 comment`");
    assert!(
        file.windows(blob.len()).any(|w| w == blob.as_slice()),
        "identity does not hold the public key of identity.pub"
    );
}

// ---------------------------------------------------------------------------------------
// the mission

/// Seals the post-rotation Secret for `namespace` with the ring's (new) active key.
fn seal_app(cli: &Cli, ring: &str, namespace: &str) -> SealedSecret {
    let out = cli.run_blocking(
        &["seal", "--cert", &format!("secretsmanager://{ring}")],
        Some(&app_secret(namespace)),
    );
    parse_sealed(&out, "`kseal seal` output")
}

/// The whole mission. `client2` is the second cluster; when it is the same API server as
/// `client1` (`shared`), the second cluster gets namespaces of its own.
async fn run_mission(endpoint: &str, client1: Client, client2: Client, shared: bool) {
    require_aws_credentials();
    let cli = Cli::new(endpoint);
    let ring = sm::unique_prefix("fleet-mission");

    // The ring, seeded once for the whole fleet.
    let pushed = cli.keys(&ring, &["push", "--key-size", "2048"]);
    let (keys, key1) = index(endpoint, &ring).await;
    assert_eq!(keys.len(), 1, "a new ring has one key: {pushed}");

    // The GitOps repository pins the ring's anchor, as the README tells a user to; without the
    // pin nothing seals to the ring.
    let unpinned = cli.try_run(
        &["seal", "--cert", &format!("secretsmanager://{ring}")],
        Some(&app_secret("apps")),
    );
    assert!(
        unpinned.contains("is not pinned") && unpinned.contains("kseal keys trust"),
        "sealing to an unpinned ring must be refused with the way to pin it: {unpinned}"
    );
    cli.keys(&ring, &["trust"]);
    let pin = cli.read(".kseal.yaml");
    assert!(pin.contains(&format!("anchor: {}", keys[0].kid)), "{pin}");

    // Bootstrap Secrets, sealed before any cluster exists.
    let names1 = Names::new();
    let names2 = if shared { Names::new() } else { names1.clone() };
    let boot1 = Bootstrap::seal(&cli, &ring, &names1);
    let boot2 = if shared {
        Bootstrap::seal(&cli, &ring, &names2)
    } else {
        boot1.clone()
    };
    for ss in [
        &boot1.flux,
        &boot1.crossplane,
        &boot2.flux,
        &boot2.crossplane,
    ] {
        assert_eq!(
            hint(ss),
            key1.fingerprint,
            "sealed with the ring's only key"
        );
    }

    // Cluster 1, brand new: the CRD, empty namespaces, the controller, and at once the
    // bootstrap SealedSecrets (as Flux applies them): they unseal once the ring is mirrored.
    ensure_crd(&client1).await;
    names1.create(&client1).await;
    let c1 = Controller::start("cluster 1", &client1, &names1, &ring, endpoint).await;
    boot1.apply(&client1).await;
    let flux1 = boot1.check(&client1, "cluster 1", &names1).await;
    c1.wait_ring("cluster 1 to load the ring", 1, &key1.fingerprint)
        .await;
    assert_eq!(
        mirrors(&client1, &names1.ctrl).await,
        BTreeMap::from([(key1.kid.to_string(), true)]),
        "cluster 1 mirrors the ring's key"
    );

    // Rotation: a new key seals at once (--now); cluster 1 picks it up on a refresh.
    cli.keys(&ring, &["rotate", "--now", "--yes", "--key-size", "2048"]);
    let (keys, key2) = index(endpoint, &ring).await;
    assert_eq!(keys.len(), 2, "the ring holds both keys");
    assert_ne!(
        key2.kid, key1.kid,
        "the rotated ring seals with the new key"
    );
    c1.state.refresh.request();
    c1.wait_ring("cluster 1 to load the rotated ring", 2, &key2.fingerprint)
        .await;
    assert_eq!(
        mirrors(&client1, &names1.ctrl).await,
        BTreeMap::from([(key1.kid.to_string(), false), (key2.kid.to_string(), true)]),
        "cluster 1 mirrors both keys, the new one active"
    );

    // A Secret sealed after the rotation carries the new key, and opens in cluster 1.
    let app1 = seal_app(&cli, &ring, &names1.apps);
    assert_eq!(hint(&app1), key2.fingerprint, "sealed with the new key");
    apply(&client1, &app1).await;
    let (_, data) = wait_data(&client1, "cluster 1", &names1.apps, "db").await;
    assert_eq!(
        data,
        app_data(),
        "cluster 1: the Secret sealed after the rotation"
    );

    // Cluster 1 still opens what the first key sealed: its Flux Secret, deleted, comes back.
    Api::<Secret>::namespaced(client1.clone(), &names1.flux)
        .delete("flux-system", &DeleteParams::default())
        .await
        .expect("delete cluster 1's Flux Secret");
    let api: Api<Secret> = Api::namespaced(client1.clone(), &names1.flux);
    let again = eventually(
        "cluster 1: the deleted Flux Secret to be unsealed again",
        DEADLINE,
        || async {
            Ok(api
                .get_opt("flux-system")
                .await?
                .filter(|s| s.uid() != flux1.uid()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        again.data, flux1.data,
        "cluster 1: the re-created Flux Secret"
    );

    // Cluster 2 starts after the rotation: the old SealedSecrets and the new one all open.
    let app2 = if shared {
        seal_app(&cli, &ring, &names2.apps)
    } else {
        app1.clone()
    };
    assert_eq!(hint(&app2), key2.fingerprint);
    if !shared {
        ensure_crd(&client2).await;
    }
    names2.create(&client2).await;
    let c2 = Controller::start("cluster 2", &client2, &names2, &ring, endpoint).await;
    boot2.apply(&client2).await;
    apply(&client2, &app2).await;
    boot2.check(&client2, "cluster 2", &names2).await;
    let (_, data) = wait_data(&client2, "cluster 2", &names2.apps, "db").await;
    assert_eq!(
        data,
        app_data(),
        "cluster 2: the Secret sealed after the rotation"
    );
    c2.wait_ring("cluster 2 to load the ring", 2, &key2.fingerprint)
        .await;
    assert_eq!(
        mirrors(&client2, &names2.ctrl).await,
        BTreeMap::from([(key1.kid.to_string(), false), (key2.kid.to_string(), true)]),
        "cluster 2 mirrors both keys, the new one active"
    );

    c2.stop().await;
    c1.stop().await;
    names1.delete(&client1).await;
    if shared {
        names2.delete(&client2).await;
    }
}

/// A client for the reference kube-apiserver (`KSEAL_REFAPI_KUBECONFIG`, set by
/// scripts/test.sh), or `None` (skip loudly; fail under `CI=true`).
pub(crate) async fn real_client(test: &str) -> Option<Client> {
    let path = match std::env::var("KSEAL_REFAPI_KUBECONFIG") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "KSEAL_REFAPI_KUBECONFIG is not set, but CI=true: the controller must be tested against the reference kube-apiserver"
            );
            kseal_testkit::skipped(&format!(
                "SKIPPED: {test} against a real kube-apiserver needs KSEAL_REFAPI_KUBECONFIG (scripts/test.sh sets it)"
            ));
            return None;
        }
    };
    let kc = kube::config::Kubeconfig::read_from(path).expect("read the kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("a client config from the kubeconfig");
    Some(Client::try_from(cfg).expect("a client"))
}

mod mission {
    use super::*;

    /// Two clusters: two in-process test API servers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_the_test_server() {
        let Some(endpoint) = sm::endpoint() else {
            return;
        };
        let (one, two) = (TestApiServer::new(), TestApiServer::new());
        super::run_mission(&endpoint, one.client(), two.client(), false).await;
    }

    /// Two clusters on one reference kube-apiserver, each with namespaces of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_real_apiserver() {
        let Some(endpoint) = sm::endpoint() else {
            return;
        };
        if let Some(client) = real_client("the fleet mission").await {
            super::run_mission(&endpoint, client.clone(), client, true).await;
        }
    }
}
