//! `kseal-testkit`: a stateful test Kubernetes API server for kseal's controller and CLI tests.
//!
//! [`TestApiServer`] keeps objects in memory and serves them over the Kubernetes REST API (JSON
//! only), either in-process through [`TestApiServer::client`] or on `127.0.0.1` through
//! [`TestApiServer::serve`] (with a kubeconfig for `kubectl` and kseal's binaries). It models
//! what controllers depend on: one global resourceVersion, watches resumable from an event log
//! (410 Expired after compaction), bookmarks, label and field selectors, Status error bodies,
//! merge/JSON/strategic merge patches and server-side apply, the status subresource and
//! `metadata.generation`, finalizers, ownerReference garbage collection, namespaces, CRDs
//! (so SealedSecrets can be served), discovery, metadata-only (PartialObjectMetadata) requests and
//! the Service proxy subresource ([`TestApiServer::set_service_proxy`], how the CLI reaches the
//! controller's `/v1/cert.pem`). [`Faults`] injects failures.
//!
//! [`sm`] supports tests against AWS Secrets Manager: the emulator's endpoint (moto, started by
//! `tests/moto/start.sh`), per-test secret names, and [`sm::FaultProxy`] for throttling, server
//! errors, access denials and outages.
//!
//! [`scenarios`] holds behaviour checks generic over a [`kube::Client`], run against this server
//! and against a real kube-apiserver to keep the fake honest.
//!
//! Known approximations (differences from a real apiserver; each one is a candidate bug):
//! - strategic merge patch is a merge patch plus a fixed table of keyed lists (`conditions` by
//!   `type`, `containers`/`env`/`volumes`/... by `name`, `ownerReferences` by `uid`,
//!   `finalizers` as a set) and the `$patch: replace|delete` and `$deleteFromPrimitiveList`
//!   directives; custom resources get 415 as on a real server;
//! - server-side apply keeps field ownership in `managedFields` and reports conflicts, but list
//!   and map types come from the same fixed table (custom resources: lists are atomic) instead
//!   of OpenAPI schemas, and `fieldsV1` of non-apply updates records the changed fields only;
//! - garbage collection runs synchronously when an owner is removed (a real server does it
//!   asynchronously, so tests must poll); Orphan and Foreground deletion set the `orphan` /
//!   `foregroundDeletion` finalizer and deletionTimestamp like the apiserver, then do the
//!   collector's work and remove the finalizer at once (`blockOwnerDeletion` is not
//!   considered); dependents whose owners never existed are not collected;
//! - deleting a namespace deletes its contents at once and the namespace when it is empty
//!   (objects with finalizers keep it Terminating); `spec.finalizers` is not used; deleting a
//!   CRD deletes its objects at once and removes the CRD (and the resource) when none is left;
//! - lists ignore `resourceVersion`/`resourceVersionMatch` and always serve the latest state;
//!   `continue` tokens never expire;
//! - events.k8s.io/v1 Events are stored as core/v1 Events with a field-renaming conversion;
//!   their error messages name the core resource;
//! - a Service's proxy goes to the target set with [`TestApiServer::set_service_proxy`] (503
//!   without one, as for a Service without endpoints); there are no Endpoints objects, and
//!   ClusterIPs are allocated from 10.0.0.0/24 without tracking;
//! - the version reported is 1.33 (the k8s-openapi feature in use), while the reference
//!   server is 1.20; features between the two (streaming lists) are served;
//! - no protobuf, CBOR, authentication, authorization, admission, defaulting beyond Secrets,
//!   Namespaces and CRDs, or schema validation; the OpenAPI endpoints return 404 (use
//!   `kubectl --validate=false`).

mod error;
mod faults;
mod gojson;
mod managed;
mod merge;
mod proxy;
mod registry;
pub mod scenarios;
mod selector;
mod server;
pub mod sm;
pub mod standalone;
mod store;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

pub use faults::{FaultRule, Faults, RequestRecord, unix_micros};
pub use proxy::ProxyTarget;

use server::Inner;

/// The request log of a server started with [`TestApiServer::serve_with_admin`]: `GET` for the
/// log (a JSON array of [`RequestRecord`]s), `DELETE` to clear it. Test-only.
pub const ADMIN_REQUESTS_PATH: &str = "/_testkit/requests";
/// `GET`: how long the server's state lock has been held in all, as
/// `{"heldNanos": N}` ([`TestApiServer::lock_held`]), for a client in another process.
/// Test-only, served like [`ADMIN_REQUESTS_PATH`].
pub const ADMIN_LOCK_PATH: &str = "/_testkit/lock";
/// `GET ?method=M&suffix=S&status=C`: how many logged requests had method `M`, a path ending
/// in `S` and answer `C` ([`TestApiServer::count_requests`]), as `{"count": N}`. A benchmark
/// follows its progress with it without copying the log. Test-only, served like
/// [`ADMIN_REQUESTS_PATH`].
pub const ADMIN_COUNT_PATH: &str = "/_testkit/requests/count";
use store::State;

/// The query of [`ADMIN_COUNT_PATH`].
#[derive(serde::Deserialize)]
struct CountQuery {
    method: String,
    suffix: String,
    status: u16,
}

/// An in-memory Kubernetes API server for tests. Cheap to clone (shared state).
#[derive(Clone)]
pub struct TestApiServer {
    inner: Arc<Inner>,
}

impl Default for TestApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("resource_version", &self.inner.lock().rv())
            .finish()
    }
}

impl TestApiServer {
    /// A server with the built-in resources and the namespaces `default`, `kube-system`,
    /// `kube-public` and `kube-node-lease`.
    pub fn new() -> Self {
        let state = Arc::new(Mutex::new(State::new()));
        Self {
            inner: Arc::new(Inner {
                faults: Faults::new(state.clone()),
                state,
                bookmark_interval: Mutex::new(Duration::from_secs(1)),
                address: Mutex::new("127.0.0.1:0".to_owned()),
                proxies: Mutex::default(),
                lock_held_nanos: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// The axum router serving the API (also a tower `Service`).
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .fallback(server::handle)
            .with_state(self.inner.clone())
    }

    /// A client talking to this server in-process (no socket), default namespace `default`.
    /// Call it inside a Tokio runtime (the client's buffer and each watch spawn a task).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// Serves the API on `127.0.0.1` on a free port until the returned handle is dropped.
    pub async fn serve(&self) -> std::io::Result<ServedApiServer> {
        self.serve_router(self.router()).await
    }

    /// Like [`TestApiServer::serve`], plus test-only admin endpoints for a client in another
    /// process (the `kseal-testapi` binary, the scale benchmark's separate server):
    /// `GET /_testkit/requests` returns the request log as a JSON array of [`RequestRecord`]s
    /// and `DELETE /_testkit/requests` clears it; `GET /_testkit/lock` gives
    /// [`TestApiServer::lock_held`] (`{"heldNanos": N}`). These paths are not Kubernetes API paths,
    /// are not themselves logged, and, like the API, are served on `127.0.0.1` only.
    pub async fn serve_with_admin(&self) -> std::io::Result<ServedApiServer> {
        self.serve_router(self.admin_router().merge(self.router()))
            .await
    }

    /// The admin endpoints of [`TestApiServer::serve_with_admin`].
    fn admin_router(&self) -> axum::Router {
        use axum::routing::get;
        let (get_log, clear_log, held, count) =
            (self.clone(), self.clone(), self.clone(), self.clone());
        axum::Router::new()
            .route(
                ADMIN_REQUESTS_PATH,
                get(move || async move { axum::Json(get_log.requests()) }).delete(
                    move || async move {
                        clear_log.clear_requests();
                        http::StatusCode::NO_CONTENT
                    },
                ),
            )
            .route(
                ADMIN_LOCK_PATH,
                get(move || async move {
                    let nanos = u64::try_from(held.lock_held().as_nanos()).unwrap_or(u64::MAX);
                    axum::Json(serde_json::json!({ "heldNanos": nanos }))
                }),
            )
            .route(
                ADMIN_COUNT_PATH,
                get(
                    move |axum::extract::Query(q): axum::extract::Query<CountQuery>| async move {
                        let n = count.count_requests(&q.method, &q.suffix, q.status);
                        axum::Json(serde_json::json!({ "count": n }))
                    },
                ),
            )
    }

    async fn serve_router(&self, router: axum::Router) -> std::io::Result<ServedApiServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        if let Ok(mut a) = self.inner.address.lock() {
            *a = addr.to_string();
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = rx.await;
            };
            if let Err(e) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::warn!(error = %e, "test API server stopped");
            }
        });
        Ok(ServedApiServer {
            addr,
            shutdown: Some(tx),
            task,
            server: self.clone(),
        })
    }

    /// Routes the proxy subresource of Service `namespace/name`
    /// (`/api/v1/namespaces/{namespace}/services/[scheme:]{name}[:port]/proxy/...`) to `target`,
    /// as kube-proxy would route to the Service's endpoints. The Service object itself must
    /// exist (404 otherwise); without a target the proxy answers 503 like a Service without
    /// endpoints.
    pub fn set_service_proxy(&self, namespace: &str, name: &str, target: ProxyTarget) {
        if let Ok(mut p) = self.inner.proxies.lock() {
            p.insert((namespace.to_owned(), name.to_owned()), target);
        }
    }

    /// Fault injection (failing requests, dropping watches, compacting the log, delays).
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner.faults.requests()
    }

    /// Clears the request log.
    pub fn clear_requests(&self) {
        self.inner.faults.clear_requests();
    }

    /// How many logged requests had `method`, a path ending in `path_suffix` and the answer
    /// `status`: [`TestApiServer::requests`] filtered and counted, without the copy.
    pub fn count_requests(&self, method: &str, path_suffix: &str, status: u16) -> usize {
        self.inner.faults.count_requests(|r| {
            r.status == status && r.method == method && r.path.ends_with(path_suffix)
        })
    }

    /// How long the state lock has been held in all since the server was created. Every
    /// request that reads or writes objects holds it, one at a time, so over a stretch of
    /// wall time its growth says how close the server came to answering one request at a
    /// time (a share near 100 % means requests queued for it).
    pub fn lock_held(&self) -> Duration {
        Duration::from_nanos(
            self.inner
                .lock_held_nanos
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (default 1 s).
    pub fn set_bookmark_interval(&self, every: Duration) {
        if let Ok(mut b) = self.inner.bookmark_interval.lock() {
            *b = every.max(Duration::from_millis(10));
        }
    }

    /// Number of watch streams currently open (useful to wait until a controller is watching).
    pub fn open_watches(&self) -> usize {
        self.inner.lock().open_watches()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.lock().rv()
    }

    /// Server-side applies every document of a YAML (or JSON) text as field manager
    /// `kseal-testkit`, creating or updating the objects, e.g. a CRD manifest. Namespaced
    /// objects without a namespace go to `default`. Returns the stored objects.
    pub fn apply_yaml(&self, yaml: &str) -> anyhow::Result<Vec<Value>> {
        // Empty documents are skipped.
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(yaml).context("parsing YAML documents")?;
        let mut out = Vec::new();
        for v in docs {
            if v.is_null() {
                continue;
            }
            out.push(self.apply_value(v)?);
        }
        Ok(out)
    }

    /// Server-side applies one object (see [`TestApiServer::apply_yaml`]).
    pub fn apply_value(&self, obj: Value) -> anyhow::Result<Value> {
        let api_version = obj["apiVersion"]
            .as_str()
            .context("object has no apiVersion")?
            .to_owned();
        let kind = obj["kind"]
            .as_str()
            .context("object has no kind")?
            .to_owned();
        let name = obj["metadata"]["name"]
            .as_str()
            .context("object has no metadata.name")?
            .to_owned();
        let mut st = self.inner.lock();
        let (rt, version) = st
            .resolve_kind(&api_version, &kind)
            .with_context(|| format!("no resource for {api_version} {kind}"))?;
        let ns = if rt.namespaced {
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned()
        } else {
            String::new()
        };
        let (out, _) = st
            .apply(
                &rt,
                &ns,
                &name,
                obj,
                "kseal-testkit",
                false,
                true,
                &version,
                false,
            )
            .map_err(|e| anyhow::anyhow!("applying {kind} {name}: {} ({})", e.message, e.code))?;
        Ok(Arc::unwrap_or_clone(out))
    }

    /// The stored object, if present (`api_version` like `v1` or `bitnami.com/v1alpha1`;
    /// `namespace` empty for cluster-scoped kinds).
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let st = self.inner.lock();
        let (rt, _) = st.resolve_kind(api_version, kind)?;
        st.get(&rt.key(), namespace, name).cloned()
    }
}

/// A [`TestApiServer`] listening on `127.0.0.1`. Stops serving when dropped.
pub struct ServedApiServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    server: TestApiServer,
}

impl std::fmt::Debug for ServedApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedApiServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ServedApiServer {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server behind this listener.
    pub fn server(&self) -> &TestApiServer {
        &self.server
    }

    /// A kubeconfig (YAML) for this server, context `kseal-testkit`, namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kseal-testkit\n  cluster:\n    server: {url}\n\
             users:\n- name: kseal-testkit\n  user: {{}}\ncontexts:\n- name: kseal-testkit\n  context:\n    \
             cluster: kseal-testkit\n    user: kseal-testkit\n    namespace: default\n\
             current-context: kseal-testkit\n",
            url = self.url()
        )
    }

    /// Writes [`ServedApiServer::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// A client connecting over TCP, as the binaries do.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        let config = kube::Config::new(self.url().parse().context("parsing server URL")?);
        kube::Client::try_from(config).context("building client")
    }
}

impl Drop for ServedApiServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.abort();
    }
}

/// Reports a test (or one check of a test) that could not run on this machine: prints `message`
/// (which should start with `SKIPPED:`) to stderr and, when `KSEAL_SKIP_LOG` names a file
/// (scripts/test.sh sets it), appends a line to it, so that the run's summary counts the test as
/// skipped rather than passed (libtest captures the output of passing tests, so the printed
/// line alone is not seen). Callers fail instead under `CI=true`, where nothing may be skipped.
pub fn skipped(message: &str) {
    use std::io::Write as _;
    eprintln!("{message}");
    let Some(path) = std::env::var_os("KSEAL_SKIP_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("?")
        .to_owned();
    let line = format!("{test}\t{}\n", message.replace('\n', " "));
    // One write per line with O_APPEND: lines from parallel tests do not interleave.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}
