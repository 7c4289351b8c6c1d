//! `--pending-values-mib`: SealedSecrets waiting to be unsealed keep their encrypted values in
//! memory only within a budget; past it they are cached without them and read whole (one GET
//! through the status subresource) when reconciled. Each controller has a budget of its own
//! (`State::value_budget`), so these run beside the other tests.
//!
//! The same scenario runs on the in-process test API server (which also shows each read in
//! its request log) and on the reference kube-apiserver (where the controller's
//! `kseal_sealed_secret_reads_total` counts them): that the status subresource answers a
//! `get` with the whole object, spec and encrypted values included, is what the read path
//! relies on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use kseal_testkit::TestApiServer;

/// What the scenario can ask of the API server it runs on.
trait Server {
    /// Forgets the requests seen so far (a no-op where they cannot be seen).
    fn clear_requests(&self) {}
    /// The paths of the status reads of SealedSecrets in `ns` since the last clear, sorted,
    /// where the server shows them.
    fn status_reads(&self, _ns: &str) -> Option<Vec<String>> {
        None
    }
}

struct Reference;
impl Server for Reference {}

impl Server for TestApiServer {
    fn clear_requests(&self) {
        TestApiServer::clear_requests(self);
    }
    fn status_reads(&self, ns: &str) -> Option<Vec<String>> {
        let prefix = format!("/apis/bitnami.com/v1alpha1/namespaces/{ns}/sealedsecrets/");
        let mut reads: Vec<String> = self
            .requests()
            .into_iter()
            .filter(|r| {
                r.method == "GET" && r.path.starts_with(&prefix) && r.path.ends_with("/status")
            })
            .map(|r| r.path)
            .collect();
        reads.sort();
        Some(reads)
    }
}

async fn past_the_value_budget_waiting_objects_are_read_whole(
    client: kube::Client,
    server: &impl Server,
) {
    let cl = Cluster::new(client).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    // Created before the controller starts: they arrive in its initial list, not synced.
    for (name, value) in [("a", "1"), ("b", "2"), ("c", "3")] {
        create_ss(&client, &seal(&secret(&ns, name, &[("v", value)]), key(0))).await;
    }
    server.clear_requests();
    let mut config = cl.config();
    config.pending_value_bytes = 0;
    let running = Running::start(&client, config).await;
    let reads = || running.state.metrics.sealed_secret_reads.get();
    // Kept without their values, they can only have been unsealed from the object read whole:
    // a stripped object's empty values open nothing and fail the reconcile.
    for (name, value) in [("a", "1"), ("b", "2"), ("c", "3")] {
        wait_secret(&client, &ns, name, "unsealed from the read object", |s| {
            data_of(s) == map(&[("v", value)])
        })
        .await;
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
    }
    assert_eq!(reads(), 3, "one read each, none kept its values");
    if let Some(paths) = server.status_reads(&ns) {
        assert_eq!(
            paths,
            ["a", "b", "c"].map(|n| format!(
                "/apis/bitnami.com/v1alpha1/namespaces/{ns}/sealedsecrets/{n}/status"
            )),
        );
    }
    assert_eq!(running.state.value_budget.held(), 0);

    // One created while it runs: past the budget too, the same way.
    server.clear_requests();
    create_ss(&client, &seal(&secret(&ns, "d", &[("v", "4")]), key(0))).await;
    wait_secret(&client, &ns, "d", "unsealed", |s| {
        data_of(s) == map(&[("v", "4")])
    })
    .await;
    assert_eq!(reads(), 4);
    if let Some(paths) = server.status_reads(&ns) {
        assert_eq!(paths.len(), 1);
    }

    // With room, a new object is unsealed from the cache, without a read, and the budget it
    // held is given back once it is synced (its cached entry is kept without values).
    running.state.value_budget.set_limit(1 << 20);
    server.clear_requests();
    create_ss(&client, &seal(&secret(&ns, "e", &[("v", "5")]), key(0))).await;
    wait_secret(&client, &ns, "e", "unsealed", |s| {
        data_of(s) == map(&[("v", "5")])
    })
    .await;
    wait_synced(&client, &ns, "e", "True", "Unsealed").await;
    assert_eq!(reads(), 4, "no read within the budget");
    if let Some(paths) = server.status_reads(&ns) {
        assert!(paths.is_empty(), "no read within the budget: {paths:?}");
    }
    kseal_testkit::scenarios::eventually("budget given back", DEADLINE, || async {
        Ok((running.state.value_budget.held() == 0).then_some(()))
    })
    .await
    .unwrap();
    running.stop().await;
    cl.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_value_budget_waiting_objects_are_read_whole_on_the_test_server() {
    let server = TestApiServer::new();
    past_the_value_budget_waiting_objects_are_read_whole(server.client(), &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_value_budget_waiting_objects_are_read_whole_on_a_real_apiserver() {
    if let Some(client) = real_client("past_the_value_budget_waiting_objects_are_read_whole").await
    {
        past_the_value_budget_waiting_objects_are_read_whole(client, &Reference).await;
    }
}
