//! Every scenario against (a) the in-process fake, (b) the fake over 127.0.0.1 through a
//! kubeconfig, and (c) a real kube-apiserver when `KSEAL_REFAPI_KUBECONFIG` is set.

use kseal_testkit::{TestApiServer, scenarios};

async fn client_from_kubeconfig(path: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("reading kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("loading kubeconfig");
    kube::Client::try_from(cfg).expect("building client")
}

/// A client for the reference kube-apiserver, or `None` (skip) when it is not configured.
async fn real_client() -> Option<kube::Client> {
    match std::env::var("KSEAL_REFAPI_KUBECONFIG") {
        Ok(path) if !path.is_empty() => Some(client_from_kubeconfig(path.as_ref()).await),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "KSEAL_REFAPI_KUBECONFIG is not set, but CI=true: CI must run the scenarios against the reference kube-apiserver"
            );
            kseal_testkit::skipped(
                "SKIPPED: set KSEAL_REFAPI_KUBECONFIG to run this scenario against a real kube-apiserver",
            );
            None
        }
    }
}

macro_rules! scenario {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn passes_against_in_process_server() {
                let server = TestApiServer::new();
                if let Err(e) = scenarios::$name(server.client()).await {
                    panic!("{}: {e:#}", stringify!($name));
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn passes_against_server_over_tcp_with_kubeconfig() {
                let server = TestApiServer::new();
                let served = server.serve().await.expect("serving");
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("kubeconfig");
                served.write_kubeconfig(&path).expect("writing kubeconfig");
                let client = client_from_kubeconfig(&path).await;
                if let Err(e) = scenarios::$name(client).await {
                    panic!("{}: {e:#}", stringify!($name));
                }
                assert!(!server.requests().is_empty(), "requests went over TCP");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn passes_against_real_apiserver() {
                if let Some(client) = real_client().await {
                    if let Err(e) = scenarios::$name(client).await {
                        panic!("{} (real kube-apiserver): {e:#}", stringify!($name));
                    }
                }
            }
        }
    };
}

scenario!(crud_and_errors);
scenario!(watch_resume);
scenario!(ssa_prune);
scenario!(status_and_generation);
scenario!(finalizers);
scenario!(garbage_collection);
scenario!(namespace_lifecycle);
scenario!(crd_sealed_secret);
scenario!(immutable_secret);
scenario!(secret_types);
scenario!(leases_and_events);

/// As against a shared real server: every scenario at once against one served fake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_scenarios_pass_concurrently_against_one_shared_server() {
    let server = TestApiServer::new();
    let served = server.serve().await.expect("serving");
    let client = served.client().expect("client");
    let c = || client.clone();
    let results = futures::join!(
        scenarios::crud_and_errors(c()),
        scenarios::watch_resume(c()),
        scenarios::ssa_prune(c()),
        scenarios::status_and_generation(c()),
        scenarios::finalizers(c()),
        scenarios::garbage_collection(c()),
        scenarios::namespace_lifecycle(c()),
        scenarios::crd_sealed_secret(c()),
        scenarios::immutable_secret(c()),
        scenarios::secret_types(c()),
        scenarios::leases_and_events(c()),
        scenarios::crd_sealed_secret(c()),
    );
    let results = [
        results.0, results.1, results.2, results.3, results.4, results.5, results.6, results.7,
        results.8, results.9, results.10, results.11,
    ];
    for (i, r) in results.into_iter().enumerate() {
        if let Err(e) = r {
            panic!("scenario #{i}: {e:#}");
        }
    }
}
