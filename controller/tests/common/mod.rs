//! Shared test harness: keys, SealedSecret builders, a controller runner and polling helpers.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::Parser as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kseal_api::{SealOptions, SealedSecret, seal_secret};
use kseal_controller::config::{Args, Namespaces};
use kseal_controller::keys::{self, KeyRequester, KeyRequests};
use kseal_controller::{Config, State};
use kseal_keys::{CertificateOptions, KeyPair, KeySize};
use kseal_testkit::scenarios::{eventually, unique};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::sync::watch;

/// How long any asynchronous effect may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Test-only 2048-bit keys (fast to generate and use), generated once per test binary.
/// Never use 2048-bit keys generated like this for anything real.
pub fn key(index: usize) -> &'static KeyPair {
    static KEYS: OnceLock<Vec<KeyPair>> = OnceLock::new();
    &KEYS.get_or_init(|| {
        (0..3)
            .map(|_| KeyPair::generate(KeySize::Rsa2048, &CertificateOptions::default()).unwrap())
            .collect()
    })[index]
}

/// A test-only 2048-bit key whose certificate starts a day earlier than the others', so it
/// is never the sealing key next to them.
pub fn older_key() -> &'static KeyPair {
    static KEY: OnceLock<KeyPair> = OnceLock::new();
    KEY.get_or_init(|| {
        let options = CertificateOptions {
            not_before: std::time::SystemTime::now() - Duration::from_secs(86_400),
            ..CertificateOptions::default()
        };
        KeyPair::generate(KeySize::Rsa2048, &options).unwrap()
    })
}

/// Registers the SealedSecret CRD from `deploy/crd.yaml` (server-side apply) and waits until
/// it is served.
pub async fn ensure_crd(client: &Client) {
    let yaml = include_str!("../../../deploy/crd.yaml");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(yaml).unwrap();
    let mut value = serde_json::to_value(&crd).unwrap();
    value["apiVersion"] = json!("apiextensions.k8s.io/v1");
    value["kind"] = json!("CustomResourceDefinition");
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            "sealedsecrets.bitnami.com",
            &PatchParams::apply("kseal-tests").force(),
            &Patch::Apply(value),
        )
        .await
        .unwrap();
    let api: Api<SealedSecret> = Api::all(client.clone());
    eventually("CRD served", DEADLINE, || async {
        Ok(api
            .list(&ListParams::default().limit(1))
            .await
            .ok()
            .map(|_| ()))
    })
    .await
    .unwrap();
}

pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Stores `pair` as a Bitnami key Secret `name` in `namespace` with the key label `label`
/// (`None`: unlabelled).
pub async fn put_key(
    client: &Client,
    namespace: &str,
    name: &str,
    pair: &KeyPair,
    label: Option<&str>,
) {
    let mut secret = keys::key_secret("sealed-secrets-key", namespace, pair).unwrap();
    secret.metadata.generate_name = None;
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.labels = label.map(|l| {
        BTreeMap::from([(
            kseal_api::constants::SEALING_KEY_LABEL.to_owned(),
            l.to_owned(),
        )])
    });
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A plain Secret to seal.
pub fn secret(namespace: &str, name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Seals `secret` with `pair` (as kubeseal would).
pub fn seal(secret: &Secret, pair: &KeyPair) -> SealedSecret {
    seal_secret(secret, pair.public_key(), &SealOptions::default()).unwrap()
}

pub async fn create_ss(client: &Client, ss: &SealedSecret) -> SealedSecret {
    Api::<SealedSecret>::namespaced(client.clone(), ss.metadata.namespace.as_deref().unwrap())
        .create(&PostParams::default(), ss)
        .await
        .unwrap()
}

/// A test controller configuration: controller namespace `ctrl`, watching `watched`.
pub fn config(ctrl: &str, watched: &[&str]) -> Config {
    let args = Args::try_parse_from([
        "kseal-controller",
        "--controller-namespace",
        ctrl,
        "--leader-elect",
        "false",
        "--key-size",
        "2048",
    ])
    .unwrap();
    let mut c = Config::from_args(args, None).unwrap();
    c.namespaces = Namespaces::Only(watched.iter().map(|s| (*s).to_owned()).collect());
    c.resync_period = Some(Duration::from_secs(60));
    c
}

/// A controller (key loader + reconciler) running in this process.
pub struct Running {
    pub state: State,
    /// What SIGUSR1 does in the binary.
    pub requester: KeyRequester,
    stop: watch::Sender<bool>,
    tasks: kseal_controller::Tasks,
}

impl Running {
    /// Starts as the leader.
    pub async fn start(client: &Client, config: Config) -> Self {
        Self::start_as(client, config, true).await
    }

    /// Starts as the leader or not; call `state.leadership.assume` later to change it.
    pub async fn start_as(client: &Client, config: Config, leader: bool) -> Self {
        let state = State::new();
        state.leadership.assume(leader);
        let config = Arc::new(config);
        let (stop, stop_rx) = watch::channel(false);
        let (requester, requests) = KeyRequests::channel();
        let tasks = kseal_controller::spawn(client, &config, &state, requests, &stop_rx);
        Self {
            state,
            requester,
            stop,
            tasks,
        }
    }

    /// Stops and waits for running reconciles to finish.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = tokio::time::timeout(DEADLINE, self.tasks.reconciler).await;
        let _ = tokio::time::timeout(DEADLINE, self.tasks.keys).await;
        let _ = tokio::time::timeout(DEADLINE, self.tasks.remote).await;
    }

    pub fn rsa_operations(&self) -> u64 {
        self.state.metrics.rsa_operations.get()
    }

    pub fn reconciles(&self, outcome: &str) -> u64 {
        self.state
            .metrics
            .reconciles
            .get_or_create(&kseal_controller::metrics::OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .get()
    }
}

/// Waits until the Secret exists and `check` accepts it.
pub async fn wait_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&Secret) -> bool,
) -> Secret {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    eventually(what, DEADLINE, || async {
        Ok(api.get_opt(name).await?.filter(|s| check(s)))
    })
    .await
    .unwrap()
}

/// Waits until the Secret is gone (garbage collection on a real cluster can take a minute).
pub async fn wait_gone(client: &Client, namespace: &str, name: &str) {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    eventually("secret gone", Duration::from_secs(60), || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap();
}

/// Waits until the SealedSecret's Synced condition has `status` and `reason`.
pub async fn wait_synced(
    client: &Client,
    namespace: &str,
    name: &str,
    status: &str,
    reason: &str,
) -> SealedSecret {
    let api: Api<SealedSecret> = Api::namespaced(client.clone(), namespace);
    eventually(
        &format!("{namespace}/{name} Synced={status} ({reason})"),
        DEADLINE,
        || async {
            let ss = api.get(name).await?;
            let ok = ss
                .synced_condition()
                .is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason))
                && ss.status.as_ref().and_then(|s| s.observed_generation) == ss.metadata.generation;
            Ok(ok.then_some(ss))
        },
    )
    .await
    .unwrap()
}

/// Events about `name` with `reason`.
pub async fn events(client: &Client, namespace: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

pub async fn wait_event(client: &Client, namespace: &str, name: &str, reason: &str) -> Event {
    eventually(&format!("event {reason} on {name}"), DEADLINE, || async {
        Ok(events(client, namespace, name, reason)
            .await
            .into_iter()
            .next())
    })
    .await
    .unwrap()
}

pub fn data_of(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub fn owned_by(s: &Secret, ss: &SealedSecret) -> bool {
    s.owner_references().iter().any(|o| {
        o.controller == Some(true)
            && Some(&o.uid) == ss.metadata.uid.as_ref()
            && o.kind == "SealedSecret"
            && o.api_version == "bitnami.com/v1alpha1"
    })
}

/// A cluster with the CRD, a controller namespace holding key 0 and an app namespace.
pub struct Cluster {
    pub client: Client,
    pub ctrl: String,
    pub app: String,
}

impl Cluster {
    pub async fn new(client: Client) -> Self {
        ensure_crd(&client).await;
        let ctrl = namespace(&client, "kseal-ctrl").await;
        let app = namespace(&client, "kseal-app").await;
        put_key(
            &client,
            &ctrl,
            "sealed-secrets-key0",
            key(0),
            Some("active"),
        )
        .await;
        Self { client, ctrl, app }
    }

    pub fn config(&self) -> Config {
        config(&self.ctrl, &[&self.app])
    }

    pub async fn cleanup(&self) {
        delete_namespace(&self.client, &self.app).await;
        delete_namespace(&self.client, &self.ctrl).await;
    }
}

/// A client for the reference kube-apiserver (`KSEAL_REFAPI_KUBECONFIG`, set by
/// scripts/test.sh), or `None` (skip loudly; fail under `CI=true`).
pub async fn real_client(test: &str) -> Option<Client> {
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
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    Some(Client::try_from(cfg).unwrap())
}
