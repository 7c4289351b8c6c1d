//! A stand-in cluster: kseal-testkit's in-process Kubernetes API server with the SealedSecret
//! CRD, and kseal's controller (key-source mirror, key loader, reconciler) running against it
//! as it runs in a pod, started from the same flags.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use axum::body::Body;
use clap::Parser as _;
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kseal_api::SealedSecret;
use kseal_api::constants::CONDITION_SYNCED;
use kseal_controller::config::Args;
use kseal_controller::keys::source as remote;
use kseal_controller::keys::{KeyRequester, KeyRequests};
use kseal_controller::serve::http::{ApiOptions, api_router};
use kseal_controller::{Config, State};
use kseal_keys::Certificate;
use kseal_testkit::TestApiServer;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::{Client, CustomResourceExt as _, ResourceExt as _};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceExt as _;

/// The controller's namespace, as installed by `deploy/`.
pub(crate) const CONTROLLER_NAMESPACE: &str = "kseal-system";
/// How long any step may take before the demo gives up and says what did not happen.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);
/// How long a stopping controller may take to finish what it is doing.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Polls `check` every 100 ms until it returns `Some`, for at most [`PATIENCE`]; the error
/// names `what` did not happen and the last thing `check` reported.
pub(crate) async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut last = String::new();
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(problem) => last = problem,
        }
        if tokio::time::Instant::now() >= deadline {
            if last.is_empty() {
                bail!("{what} did not happen within {} s", PATIENCE.as_secs());
            }
            bail!(
                "{what} did not happen within {} s (last seen: {last})",
                PATIENCE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One cluster: its API server and its running controller.
pub(crate) struct Cluster {
    pub(crate) name: &'static str,
    /// Kept so the in-memory API server lives as long as the cluster.
    _server: TestApiServer,
    pub(crate) client: Client,
    pub(crate) state: State,
    /// What SIGUSR1 would do without a key source; kept open for the key loader.
    _requester: KeyRequester,
    stop: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

impl Cluster {
    /// A fresh API server with the CRD and `namespaces`, and a controller started as
    /// `kseal-controller --controller-namespace kseal-system --leader-elect false
    /// --key-source RING`.
    pub(crate) async fn start(name: &'static str, ring: &str, namespaces: &[&str]) -> Result<Self> {
        let server = TestApiServer::new();
        let client = server.client();
        register_crd(&client).await?;
        for ns in std::iter::once(&CONTROLLER_NAMESPACE).chain(namespaces) {
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some((*ns).to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &namespace)
                .await
                .with_context(|| format!("cluster {name}: failed to create namespace {ns}"))?;
        }

        let args = Args::try_parse_from([
            "kseal-controller",
            "--controller-namespace",
            CONTROLLER_NAMESPACE,
            "--leader-elect",
            "false",
            "--key-source",
            ring,
            // The demo asks for a refresh right after a rotation, within a second of the
            // first read: no reason to make it wait out the 5 s that protect a real key store.
            "--key-source-refresh-spacing",
            "100ms",
        ])
        .context("invalid controller flags")?;
        let config = Arc::new(Config::from_args(args, None).context("invalid controller flags")?);
        anyhow::ensure!(
            config.key_source.is_some(),
            "the controller has no key source"
        );
        let state = State::new();
        // No election with one replica: this one writes (what `--leader-elect false` does).
        state.leadership.assume(true);
        let (stop, stop_rx) = watch::channel(false);
        let (requester, requests) = KeyRequests::channel();
        let spawned = kseal_controller::spawn(&client, &config, &state, requests, &stop_rx);
        let tasks = vec![
            ("key-source mirror", spawned.remote),
            ("key loader", spawned.keys),
            ("reconciler", spawned.reconciler),
        ];
        Ok(Self {
            name,
            _server: server,
            client,
            state,
            _requester: requester,
            stop,
            tasks,
        })
    }

    /// Creates `sealed` (as `kubectl apply` of the committed file would, or Flux).
    pub(crate) async fn apply(&self, sealed: &SealedSecret) -> Result<()> {
        let (ns, name) = (sealed.namespace().unwrap_or_default(), sealed.name_any());
        let mut object = sealed.clone();
        object.metadata.resource_version = None;
        Api::<SealedSecret>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| {
                format!(
                    "cluster {}: failed to create SealedSecret {ns}/{name}",
                    self.name
                )
            })?;
        Ok(())
    }

    /// Waits until the controller wrote the Secret of `sealed` and marked it `Synced=True`.
    pub(crate) async fn wait_unsealed(&self, sealed: &SealedSecret) -> Result<Secret> {
        let (ns, name) = (sealed.namespace().unwrap_or_default(), sealed.name_any());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
        let sealed_api: Api<SealedSecret> = Api::namespaced(self.client.clone(), &ns);
        let what = format!(
            "cluster {}: the controller writing Secret {ns}/{name} from its SealedSecret",
            self.name
        );
        wait_for(&what, || async {
            let ss = sealed_api.get(&name).await.map_err(|e| e.to_string())?;
            let condition = ss.synced_condition().cloned();
            let secret = secrets.get_opt(&name).await.map_err(|e| e.to_string())?;
            match (secret, condition) {
                (Some(secret), Some(c)) if c.status == "True" => Ok(Some(secret)),
                (_, Some(c)) => Err(format!(
                    "{CONDITION_SYNCED}={} {}: {}",
                    c.status,
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default()
                )),
                (_, None) => Err("the SealedSecret has no status yet".to_owned()),
            }
        })
        .await
    }

    /// The Secret `ns/name`, if it exists.
    pub(crate) async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>> {
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .with_context(|| format!("cluster {}: failed to read Secret {ns}/{name}", self.name))
    }

    /// The key Secrets the key-source mirror wrote into the controller namespace.
    pub(crate) async fn mirrors(&self) -> Result<Vec<Secret>> {
        let mut list = Api::<Secret>::namespaced(self.client.clone(), CONTROLLER_NAMESPACE)
            .list(&ListParams::default().labels(&format!("{}=true", remote::MIRROR_LABEL)))
            .await
            .with_context(|| format!("cluster {}: failed to list key Secrets", self.name))?
            .items;
        list.sort_by_key(|s| s.creation_timestamp().map(|t| t.0));
        Ok(list)
    }

    /// Waits until the mirror holds `count` keys with `active` the active one.
    pub(crate) async fn wait_mirrors(&self, count: usize, active: &str) -> Result<Vec<Secret>> {
        let what = format!(
            "cluster {}: the controller mirroring {count} key(s) of the ring, key {} active",
            self.name,
            &active[..active.len().min(12)]
        );
        wait_for(&what, || async {
            let mirrors = self.mirrors().await.map_err(|e| format!("{e:#}"))?;
            let active_ok = mirrors.iter().any(|s| {
                let a = s.annotations();
                a.get(remote::KID_ANNOTATION).map(String::as_str) == Some(active)
                    && a.get(remote::ACTIVE_ANNOTATION).map(String::as_str) == Some("true")
            });
            if mirrors.len() == count && active_ok {
                Ok(Some(mirrors))
            } else {
                Err(format!("{} mirrored key Secret(s)", mirrors.len()))
            }
        })
        .await
    }

    /// The certificate the controller serves on `/v1/cert.pem` (what `kseal cert` and
    /// `kubeseal --fetch-cert` read), through its real HTTP router.
    pub(crate) async fn served_cert(&self) -> Result<Certificate, String> {
        let request = http::Request::get("/v1/cert.pem")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let response = api_router(self.state.clone(), ApiOptions::default())
            .oneshot(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if status != http::StatusCode::OK {
            return Err(format!(
                "/v1/cert.pem answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        let pem = std::str::from_utf8(&body).map_err(|e| e.to_string())?;
        Certificate::from_pem(pem).map_err(|e| e.to_string())
    }

    /// Stops the controller: running reconciles finish, then every task ends.
    pub(crate) async fn stop(self) -> Result<()> {
        self.stop.send_replace(true);
        let mut late = Vec::new();
        for (what, task) in self.tasks {
            let abort = task.abort_handle();
            match tokio::time::timeout(STOP_GRACE, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_panic() => late.push(format!("{what} panicked")),
                Ok(Err(_)) => {}
                Err(_) => {
                    abort.abort();
                    late.push(format!("{what} did not stop in time"));
                }
            }
        }
        if !late.is_empty() {
            bail!(
                "cluster {}: controller shutdown: {}",
                self.name,
                late.join(", ")
            );
        }
        Ok(())
    }
}

/// Registers the `SealedSecret` CRD (the same definition as `deploy/crd.yaml`) and waits until
/// it is served.
async fn register_crd(client: &Client) -> Result<()> {
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &SealedSecret::crd())
        .await
        .context("failed to register the SealedSecret CRD")?;
    let api: Api<SealedSecret> = Api::all(client.clone());
    wait_for("the SealedSecret CRD being served", || async {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(Some(())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}
