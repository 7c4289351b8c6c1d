//! Several fleet rings in one controller, each bound to a namespace of its own (issue 36), end
//! to end: two rings in AWS Secrets Manager (the moto emulator), seeded and pinned with `kseal
//! keys push` / `kseal keys trust`; a controller started from real flags, `--key-source
//! secretsmanager://SHARED --key-source secretsmanager://TEAM --ring-anchor SHARED=KID
//! --ring-anchor TEAM=KID --ring-namespaces TEAM=<team namespace> --ring-namespaces
//! SHARED=<other namespace>`.
//!
//! 1. Namespaces: the team's (TEAM is bound to it) and another one (SHARED is bound to it).
//! 2. `kseal seal --cert secretsmanager://TEAM` seals a cluster-wide and a strict value for the
//!    team namespace; `--cert secretsmanager://SHARED` one value for each namespace. The team
//!    values open in the team namespace, the shared value in the other one; the shared value
//!    sealed for the team namespace is refused there, naming SHARED's binding.
//! 3. The very same cluster-wide TEAM SealedSecret (same `encryptedData`: its scope lets it open
//!    anywhere) applied in the other namespace, with the `kseal.dev/sealing-key` hint `kseal
//!    seal` wrote, without it, and with a hint forged to name the shared ring's key (the
//!    attacker who may create SealedSecrets there): no Secret, and `Synced=False` names the
//!    binding, never the value.
//! 4. The certificates: `GET /v1/cert.pem?ring=TEAM` (the controller's real HTTP server) is
//!    what `kseal cert --cert secretsmanager://TEAM` prints, `?ring=SHARED` the shared ring's,
//!    `?namespace=NS` the certificate of the ring bound to NS, `?ring=<unknown>` a 404 naming
//!    the rings, `/v1/certs` lists the rings with their sealing keys and bindings; the state's
//!    claims say the same.
//! 5. A controller with the shared ring only (no binding) builds no claims, and the shared
//!    values open in both namespaces as before.
//!
//! Runs on kseal-testkit's API server and on the reference kube-apiserver
//! (`KSEAL_REFAPI_KUBECONFIG`); needs the emulator (`KSEAL_TEST_SM_ENDPOINT`, with dummy AWS
//! credentials in the environment) and the `kseal` binary next to this test binary. Without
//! the emulator or the reference kube-apiserver the runs skip loudly, and fail under
//! `CI=true`. Every run has its own ring prefixes and namespaces; waits are bounded.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use clap::Parser as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kseal_api::SealedSecret;
use kseal_api::constants::SEALING_KEY_ANNOTATION;
use kseal_controller::config::{Args, Namespaces};
use kseal_controller::keys::{KeyRequester, KeyRequests};
use kseal_controller::serve::http::{ApiOptions, serve_listeners};
use kseal_controller::{Config, State};
use kseal_keystore::IndexEntry;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::{eventually, unique};
use kseal_testkit::sm;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::fleet::{
    Cli, anchor_of, apply, ensure_crd, hint, index, parse_sealed, real_client,
    require_aws_credentials, wait_data,
};

/// How long any asynchronous effect may take (a hung run, not a measurement).
const DEADLINE: Duration = Duration::from_secs(60);

/// The namespaces of one run: two controller namespaces (the bound controller's and the
/// single-ring one's, each starting empty), the team's and another one.
struct Names {
    ctrl: String,
    ctrl_single: String,
    team: String,
    other: String,
}

impl Names {
    fn new() -> Self {
        Self {
            ctrl: unique("kseal-rings"),
            ctrl_single: unique("kseal-one-ring"),
            team: unique("team-a"),
            other: unique("other"),
        }
    }

    fn all(&self) -> [&str; 4] {
        [&self.ctrl, &self.ctrl_single, &self.team, &self.other]
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

/// One seeded ring: its name (the Secrets Manager prefix), its anchor and active key.
struct SeededRing {
    name: String,
    anchor: String,
    active: IndexEntry,
}

impl SeededRing {
    /// `kseal keys push` (a new ring of one key) and `kseal keys trust` (its pin, next to the
    /// other rings' in the CLI's `.kseal.yaml`).
    async fn seed(cli: &Cli, endpoint: &str, test: &str) -> Self {
        let name = sm::unique_prefix(test);
        let pushed = cli.keys(&name, &["push", "--key-size", "2048"]);
        let (keys, active) = index(endpoint, &name).await;
        assert_eq!(keys.len(), 1, "a new ring has one key: {pushed}");
        cli.keys(&name, &["trust"]);
        let anchor = anchor_of(endpoint, &name).await.to_string();
        assert!(
            cli.read(".kseal.yaml")
                .contains(&format!("anchor: {anchor}")),
            "ring {name} is pinned"
        );
        Self {
            name,
            anchor,
            active,
        }
    }

    fn cert_arg(&self) -> String {
        format!("secretsmanager://{}", self.name)
    }

    /// `--key-source URL --ring-anchor NAME=KID`.
    fn flags(&self) -> [String; 4] {
        [
            "--key-source".to_owned(),
            self.cert_arg(),
            "--ring-anchor".to_owned(),
            format!("{}={}", self.name, self.anchor),
        ]
    }
}

/// A Secret manifest with one item.
fn secret(name: &str, namespace: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\n\
         stringData:\n  token: {value}\n"
    )
}

fn data(value: &str) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([("token".to_owned(), value.as_bytes().to_vec())])
}

/// `kseal seal --cert secretsmanager://RING --scope SCOPE` of [`secret`].
fn seal(cli: &Cli, ring: &SeededRing, scope: &str, manifest: &str) -> SealedSecret {
    let out = cli.run_blocking(
        &["seal", "--cert", &ring.cert_arg(), "--scope", scope],
        Some(manifest),
    );
    parse_sealed(&out, "`kseal seal` output")
}

/// `sealed` (cluster-wide) as someone applies it elsewhere: in `namespace`, named `name`, its
/// `encryptedData` untouched; the sealing-key hint kept (`Keep`), removed (`None`) or replaced.
fn moved(sealed: &SealedSecret, namespace: &str, name: &str, hint: Hint<'_>) -> SealedSecret {
    let mut value = serde_json::to_value(sealed).expect("SealedSecret as JSON");
    value["metadata"]["namespace"] = json!(namespace);
    value["metadata"]["name"] = json!(name);
    if let Some(template) = value["spec"]["template"]["metadata"].as_object_mut() {
        if template.contains_key("namespace") {
            template.insert("namespace".into(), json!(namespace));
        }
        if template.contains_key("name") {
            template.insert("name".into(), json!(name));
        }
    }
    let annotations = &mut value["metadata"]["annotations"];
    match hint {
        Hint::Keep => {}
        Hint::None => {
            if let Some(map) = annotations.as_object_mut() {
                map.remove(SEALING_KEY_ANNOTATION);
            }
        }
        Hint::Forged(fingerprint) => {
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations[SEALING_KEY_ANNOTATION] = json!(fingerprint);
        }
    }
    serde_json::from_value(value).expect("the moved SealedSecret")
}

#[derive(Clone, Copy)]
enum Hint<'a> {
    Keep,
    None,
    Forged(&'a str),
}

/// The `Synced` condition's message once the controller refused `namespace/name`
/// (`Synced=False`).
async fn wait_refused(client: &Client, namespace: &str, name: &str) -> String {
    let api: Api<SealedSecret> = Api::namespaced(client.clone(), namespace);
    eventually(
        &format!("SealedSecret {namespace}/{name} to be refused (Synced=False)"),
        DEADLINE,
        || async {
            let ss = api.get(name).await?;
            Ok(ss.synced_condition().and_then(|c| {
                (c.status == "False")
                    .then(|| c.message.clone())
                    .flatten()
                    .filter(|m| !m.is_empty())
            }))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"))
}

/// `GET path` on the controller's API port: status and body.
async fn http_get(port: u16, path: &str) -> (u16, String) {
    http(port, "GET", path, None).await
}

/// `POST /v1/verify` of `sealed` (as JSON) on the controller's API port: status and body. A
/// `429` (the per-client rate limit, a few requests a second) is asked again a second later.
async fn verify(port: u16, sealed: &SealedSecret) -> (u16, String) {
    let body = serde_json::to_string(sealed).expect("SealedSecret as JSON");
    let started = std::time::Instant::now();
    loop {
        let (status, answer) = http(port, "POST", "/v1/verify", Some(body.clone())).await;
        if status != 429 || started.elapsed() > DEADLINE {
            return (status, answer);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One HTTP/1.1 request on a connection of its own (closed after the answer).
async fn http(port: u16, method: &str, path: &str, body: Option<String>) -> (u16, String) {
    let request = match &body {
        None => format!("{method} {path} HTTP/1.1\r\nHost: kseal\r\nConnection: close\r\n\r\n"),
        Some(body) => format!(
            "{method} {path} HTTP/1.1\r\nHost: kseal\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    };
    let what = format!("{method} {path}");
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connecting to the API port {port}: {e}"));
        stream
            .set_read_timeout(Some(DEADLINE))
            .expect("a read timeout");
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("{what}: sending the request: {e}"));
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let response = String::from_utf8_lossy(&response).into_owned();
        let status = response
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{what}: not an HTTP response: {response:?}"));
        let body = response
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_owned();
        (status, body)
    })
    .await
    .expect("the HTTP task")
}

/// The certificate's fingerprint (the key id the ring's index lists).
fn fingerprint(pem: &str, what: &str) -> String {
    kseal_keys::Certificate::from_pem(pem)
        .unwrap_or_else(|e| panic!("{what} is not a certificate: {e}: {pem:?}"))
        .id()
        .to_string()
}

/// A controller as `main` wires it, from real flags, in this process, as the leader, with its
/// API HTTP server on a port of its own.
struct Controller {
    state: State,
    port: u16,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    http: tokio::task::JoinHandle<kseal_controller::Result<()>>,
    _requester: KeyRequester,
}

impl Controller {
    async fn start(
        client: &Client,
        ctrl: &str,
        namespaces: &[&str],
        endpoint: &str,
        ring_flags: &[String],
    ) -> Self {
        let mut flags: Vec<String> = [
            "kseal-controller",
            "--controller-namespace",
            ctrl,
            "--leader-elect",
            "false",
            "--aws-endpoint-url",
            endpoint,
            "--aws-region",
            "us-east-1",
            "--listen-addr",
            "127.0.0.1:0",
            "--listen-metrics-addr",
            "127.0.0.1:0",
        ]
        .map(str::to_owned)
        .to_vec();
        flags.extend_from_slice(ring_flags);
        let args = Args::try_parse_from(&flags).expect("controller flags");
        let mut config = Config::from_args(args, None).expect("controller config");
        config.namespaces = Namespaces::Only(namespaces.iter().map(|n| (*n).to_owned()).collect());
        let (api, metrics) = kseal_controller::serve::http::bind(&config)
            .await
            .expect("bind the API and metrics ports");
        let port = api.local_addr().expect("the API port").port();
        let state = State::new();
        state.leadership.assume(true);
        let config = Arc::new(config);
        let (stop, stop_rx) = watch::channel(false);
        let (requester, requests) = KeyRequests::channel();
        let spawned = kseal_controller::spawn(client, &config, &state, requests, &stop_rx);
        let mut stopped = stop_rx.clone();
        let http = tokio::spawn(serve_listeners(
            api,
            metrics,
            state.clone(),
            ApiOptions::from_config(&config),
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
        Self {
            state,
            port,
            stop,
            tasks: vec![spawned.keys, spawned.remote, spawned.reconciler],
            http,
            _requester: requester,
        }
    }

    /// Waits until the controller is ready and `check` holds of its state.
    async fn wait(&self, what: &str, check: impl Fn(&State) -> bool) {
        let state = &self.state;
        let result = eventually(what, DEADLINE, || async {
            Ok((state.is_ready() && check(state)).then_some(()))
        })
        .await;
        if let Err(e) = result {
            let ring = state.keys.ring();
            panic!(
                "{e:#}: ready={}, {} keys, sealing key {:?}, rings blocking {:?}, key source {:?}",
                state.is_ready(),
                ring.len(),
                ring.sealing_key().map(|k| k.id().to_string()),
                state.rings_blocking(),
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
        let abort = self.http.abort_handle();
        if tokio::time::timeout(DEADLINE, self.http).await.is_err() {
            abort.abort();
        }
    }
}

/// The sealing key ring `name` has in `state`'s claims, as a fingerprint.
fn claimed_sealing(state: &State, name: &str) -> Option<String> {
    let claims = state.keys.claims()?;
    match claims.sealing_of(name)? {
        Ok(id) => Some(id.to_string()),
        Err(_) => None,
    }
}

/// The key that seals for a SealedSecret in `namespace`, as a fingerprint.
fn scoped_sealing(state: &State, namespace: &str) -> Option<String> {
    state
        .keys
        .scoped(namespace, None)
        .ring
        .sealing_key()
        .map(|k| k.id().to_string())
}

/// The secret values of one run (unique, so a message that held one would be caught).
struct Values {
    team_cw: String,
    team_strict: String,
    shared_team: String,
    shared_other: String,
}

impl Values {
    fn new() -> Self {
        Self {
            team_cw: unique("team-cw-s3cr3t"),
            team_strict: unique("team-strict-s3cr3t"),
            shared_team: unique("shared-team-s3cr3t"),
            shared_other: unique("shared-other-s3cr3t"),
        }
    }

    /// No value, plain or base64, is in `text`.
    fn assert_absent(&self, text: &str, what: &str) {
        for value in [
            &self.team_cw,
            &self.team_strict,
            &self.shared_team,
            &self.shared_other,
        ] {
            let encoded = base64::engine::general_purpose::STANDARD.encode(value);
            assert!(
                !text.contains(value.as_str()) && !text.contains(&encoded),
                "{what} holds a secret value: {text}"
            );
        }
    }
}

async fn run(endpoint: &str, client: Client) {
    require_aws_credentials();
    let cli = Cli::new(endpoint);
    let shared = SeededRing::seed(&cli, endpoint, "fleet-rings-shared").await;
    let team = SeededRing::seed(&cli, endpoint, "fleet-rings-team").await;
    let (shared_fp, team_fp) = (
        shared.active.fingerprint.clone(),
        team.active.fingerprint.clone(),
    );
    assert_ne!(shared_fp, team_fp, "two rings, two keys");

    // 1. Namespaces.
    let names = Names::new();
    ensure_crd(&client).await;
    names.create(&client).await;

    // 2. Sealed with the CLI, no cluster needed.
    let values = Values::new();
    let team_cw = seal(
        &cli,
        &team,
        "cluster-wide",
        &secret("team-cw", &names.team, &values.team_cw),
    );
    let team_strict = seal(
        &cli,
        &team,
        "strict",
        &secret("team-strict", &names.team, &values.team_strict),
    );
    let shared_team = seal(
        &cli,
        &shared,
        "strict",
        &secret("shared", &names.team, &values.shared_team),
    );
    let shared_other = seal(
        &cli,
        &shared,
        "strict",
        &secret("shared", &names.other, &values.shared_other),
    );
    for ss in [&team_cw, &team_strict] {
        assert_eq!(hint(ss), team_fp, "sealed with the team ring's key");
    }
    for ss in [&shared_team, &shared_other] {
        assert_eq!(hint(ss), shared_fp, "sealed with the shared ring's key");
    }

    // The controller, from its flags: both rings pinned, each bound to a namespace of its
    // own: TEAM to the team namespace, SHARED to the other one.
    let mut flags: Vec<String> = shared.flags().into_iter().chain(team.flags()).collect();
    flags.extend([
        "--ring-namespaces".to_owned(),
        format!("{}={}", team.name, names.team),
        "--ring-namespaces".to_owned(),
        format!("{}={}", shared.name, names.other),
    ]);
    let watched = [names.team.as_str(), names.other.as_str()];
    let bound = Controller::start(&client, &names.ctrl, &watched, endpoint, &flags).await;
    bound
        .wait("both rings loaded, each with its sealing key", |s| {
            claimed_sealing(s, &shared.name).as_deref() == Some(shared_fp.as_str())
                && claimed_sealing(s, &team.name).as_deref() == Some(team_fp.as_str())
        })
        .await;

    for ss in [&team_cw, &team_strict, &shared_team, &shared_other] {
        apply(&client, ss).await;
    }
    let (_, got) = wait_data(&client, "bound", &names.team, "team-cw").await;
    assert_eq!(got, data(&values.team_cw), "the team's cluster-wide value");
    let (_, got) = wait_data(&client, "bound", &names.team, "team-strict").await;
    assert_eq!(got, data(&values.team_strict), "the team's strict value");
    // The shared ring's value sealed for the team namespace is not opened there: that ring
    // is bound to the other namespace only.
    let message = wait_refused(&client, &names.team, "shared").await;
    assert!(
        message.contains(&format!(
            "ring {} (bound to namespaces {})",
            shared.name, names.other
        )) && message.contains(&format!("does not open in namespace {}", names.team)),
        "the shared value's refusal in the team namespace names the shared ring's binding: {message}"
    );
    values.assert_absent(&message, "the shared value's status in the team namespace");
    let (shared_other_secret, got) = wait_data(&client, "bound", &names.other, "shared").await;
    assert_eq!(
        got,
        data(&values.shared_other),
        "the shared value in the other namespace"
    );

    // 3. The team's cluster-wide SealedSecret, its encryptedData untouched, in the other
    // namespace: as `kseal seal` wrote it, without the hint (as kubeseal writes it), and with a
    // hint forged to name the shared ring's key, which does open there.
    let hinted = moved(&team_cw, &names.other, "team-cw-hinted", Hint::Keep);
    let plain = moved(&team_cw, &names.other, "team-cw-plain", Hint::None);
    let forged = moved(
        &team_cw,
        &names.other,
        "team-cw-forged",
        Hint::Forged(&shared_fp),
    );
    assert_eq!(
        hinted.spec.encrypted_data, team_cw.spec.encrypted_data,
        "the same encryptedData"
    );
    assert_eq!(hint(&hinted), team_fp);
    assert_eq!(hint(&plain), "");
    for ss in [&hinted, &plain, &forged] {
        apply(&client, ss).await;
    }
    let binding = format!("ring {} (bound to namespaces {})", team.name, names.team);
    let message = wait_refused(&client, &names.other, "team-cw-hinted").await;
    assert!(
        message.contains(&binding)
            && message.contains(&format!("does not open in namespace {}", names.other)),
        "the hinted SealedSecret's refusal names the binding: {message}"
    );
    values.assert_absent(&message, "the hinted SealedSecret's status");
    let hinted_message = message;
    for name in ["team-cw-plain", "team-cw-forged"] {
        let message = wait_refused(&client, &names.other, name).await;
        assert!(
            message.contains(&format!("not tried here: {binding}"))
                && message.contains(&format!(
                    "no key that opens in namespace {} decrypts it",
                    names.other
                )),
            "{name}'s refusal names the binding: {message}"
        );
        values.assert_absent(&message, &format!("{name}'s status"));
    }
    // `/v1/verify` scopes the same way, by the object's own namespace.
    let (status, body) = verify(bound.port, &team_cw).await;
    assert_eq!(
        status, 200,
        "/v1/verify of the team's value in its namespace: {body}"
    );
    let (status, body) = verify(bound.port, &hinted).await;
    assert!(
        status == 409
            && body.contains(&binding)
            && body.contains(&format!("does not open in namespace {}", names.other)),
        "/v1/verify of the hinted copy in {}: {status} {body}",
        names.other
    );
    values.assert_absent(&body, "/v1/verify's answer");
    let (status, body) = verify(bound.port, &plain).await;
    assert_eq!(status, 409, "/v1/verify of the unhinted copy: {body}");
    values.assert_absent(&body, "/v1/verify's answer");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &names.other);
    for name in ["team-cw-hinted", "team-cw-plain", "team-cw-forged"] {
        assert!(
            secrets.get_opt(name).await.expect("get a Secret").is_none(),
            "the team ring's value opened in {} as {name}",
            names.other
        );
    }

    // 4. Certificates: the state's claims, and the controller's HTTP API.
    let claims = bound.state.keys.claims().expect("claims with two rings");
    assert_eq!(
        claims
            .rings()
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        [shared.name.as_str(), team.name.as_str()],
        "the rings, in --key-source order"
    );
    let team_id = kseal_keys::KeyId::parse(&team_fp).expect("the team key's fingerprint");
    assert_eq!(claims.rings_of(&team_id), [team.name.as_str()]);
    assert_eq!(
        scoped_sealing(&bound.state, &names.team).as_deref(),
        Some(team_fp.as_str()),
        "the only ring that opens in the team namespace seals there"
    );
    assert_eq!(
        scoped_sealing(&bound.state, &names.other).as_deref(),
        Some(shared_fp.as_str())
    );
    assert!(
        bound
            .state
            .keys
            .scoped(&names.team, None)
            .ring
            .get(&team_id)
            .is_some(),
        "the team key opens in the team namespace"
    );
    assert!(
        bound
            .state
            .keys
            .scoped(&names.other, None)
            .ring
            .get(&team_id)
            .is_none(),
        "the team key does not open in the other namespace"
    );

    let printed = |ring: &SeededRing| cli.run_blocking(&["cert", "--cert", &ring.cert_arg()], None);
    let (team_cli, shared_cli) = (printed(&team), printed(&shared));
    assert_eq!(fingerprint(&team_cli, "`kseal cert` of TEAM"), team_fp);
    assert_eq!(
        fingerprint(&shared_cli, "`kseal cert` of SHARED"),
        shared_fp
    );
    for (query, expected, what) in [
        (format!("ring={}", team.name), &team_cli, "the team ring"),
        (
            format!("ring={}", shared.name),
            &shared_cli,
            "the shared ring",
        ),
        (
            format!("namespace={}", names.team),
            &team_cli,
            "the team namespace",
        ),
        (
            format!("namespace={}", names.other),
            &shared_cli,
            "the other namespace",
        ),
        (String::new(), &shared_cli, "no query"),
    ] {
        let (status, body) = http_get(bound.port, &format!("/v1/cert.pem?{query}")).await;
        assert_eq!(status, 200, "/v1/cert.pem?{query}: {body}");
        assert_eq!(
            body.trim(),
            expected.trim(),
            "/v1/cert.pem?{query} serves {what}'s certificate"
        );
    }
    let (status, body) = http_get(bound.port, "/v1/cert.pem?ring=nope").await;
    assert_eq!(status, 404, "an unknown ring: {body}");
    assert!(
        body.contains("\"nope\"") && body.contains(&shared.name) && body.contains(&team.name),
        "the 404 names the rings: {body}"
    );
    let (status, body) = http_get(bound.port, "/v1/certs").await;
    assert_eq!(status, 200, "/v1/certs: {body}");
    let certs: Value = serde_json::from_str(&body).expect("/v1/certs is JSON");
    assert_eq!(
        certs["rings"],
        json!([
            {"name": shared.name, "sealingKey": shared_fp,
             "binding": format!("namespaces {}", names.other)},
            {"name": team.name, "sealingKey": team_fp,
             "binding": format!("namespaces {}", names.team)},
        ]),
        "/v1/certs: {body}"
    );
    bound.stop().await;

    // 5. One ring, no binding: no claims, and the shared values open in both namespaces as
    // before: the one the bound controller refused in the team namespace is unsealed, and the
    // other one's Secret, deleted, comes back.
    let flags = shared.flags();
    let single = Controller::start(&client, &names.ctrl_single, &watched, endpoint, &flags).await;
    single
        .wait("the shared ring loaded", |s| {
            s.keys
                .ring()
                .sealing_key()
                .map(|k| k.id().to_string())
                .as_deref()
                == Some(shared_fp.as_str())
        })
        .await;
    assert!(
        single.state.keys.claims().is_none(),
        "one unbound ring builds no claims"
    );
    assert!(single.state.keys.scoped(&names.other, None).bound.is_none());
    for (namespace, old, value) in [
        (&names.team, None, &values.shared_team),
        (
            &names.other,
            Some(&shared_other_secret),
            &values.shared_other,
        ),
    ] {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        if old.is_some() {
            api.delete("shared", &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting Secret {namespace}/shared: {e}"));
        }
        let old_uid = old.and_then(|s| s.uid());
        let again = eventually(
            &format!("Secret {namespace}/shared to be unsealed again by the one-ring controller"),
            DEADLINE,
            || async { Ok(api.get_opt("shared").await?.filter(|s| s.uid() != old_uid)) },
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
        let got: BTreeMap<String, Vec<u8>> = again
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        assert_eq!(
            got,
            data(value),
            "{namespace}/shared, unsealed with one ring"
        );
    }
    let (status, body) = http_get(single.port, "/v1/cert.pem").await;
    assert_eq!((status, body.trim()), (200, shared_cli.trim()));
    single.stop().await;
    names.delete(&client).await;
    // Last, so that everything above is checked and cleaned up first: the hinted refusal names
    // the key as `kseal keys list` shows it (its kid's first 12 hex characters), or its whole
    // fingerprint: `SHA256:` and five characters of base64 name no key one can look up.
    assert!(
        hinted_message.contains(&format!("key {} ", team.active.kid.short()))
            || hinted_message.contains(&format!("key {team_fp} ")),
        "the hinted SealedSecret's refusal names the key ({} or {team_fp}): {hinted_message}",
        team.active.kid.short()
    );
}

/// The in-process test API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_rings_on_the_test_server() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    let server = TestApiServer::new();
    run(&endpoint, server.client()).await;
}

/// The reference kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_rings_on_a_real_apiserver() {
    let Some(endpoint) = sm::endpoint() else {
        return;
    };
    if let Some(client) = real_client("several rings bound to namespaces").await {
        run(&endpoint, client).await;
    }
}
