//! `--pending-values-mib`: SealedSecrets waiting to be unsealed keep their encrypted values in
//! memory only within a budget; past it they are cached without them and read whole (one GET
//! through the status subresource) when reconciled. The budget is process-wide, so this file
//! is a test binary of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use kseal_testkit::TestApiServer;

fn status_reads(server: &TestApiServer, ns: &str) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET"
                && r.path.starts_with(&format!(
                    "/apis/bitnami.com/v1alpha1/namespaces/{ns}/sealedsecrets/"
                ))
                && r.path.ends_with("/status")
        })
        .map(|r| r.path)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_value_budget_waiting_objects_are_read_whole_and_unsealed_all_the_same() {
    let server = TestApiServer::new();
    let cl = Cluster::new(server.client()).await;
    let (client, ns) = (cl.client.clone(), cl.app.clone());
    // Created before the controller starts: they arrive in its initial list, not synced.
    for (name, value) in [("a", "1"), ("b", "2"), ("c", "3")] {
        create_ss(&client, &seal(&secret(&ns, name, &[("v", value)]), key(0))).await;
    }
    server.clear_requests();
    let mut config = cl.config();
    config.pending_value_bytes = 0;
    let running = Running::start(&client, config).await;
    for (name, value) in [("a", "1"), ("b", "2"), ("c", "3")] {
        wait_secret(&client, &ns, name, "unsealed from the read object", |s| {
            data_of(s) == map(&[("v", value)])
        })
        .await;
        wait_synced(&client, &ns, name, "True", "Unsealed").await;
    }
    let mut reads = status_reads(&server, &ns);
    reads.sort();
    assert_eq!(
        reads,
        ["a", "b", "c"].map(|n| format!(
            "/apis/bitnami.com/v1alpha1/namespaces/{ns}/sealedsecrets/{n}/status"
        )),
        "one read each, none kept its values"
    );
    assert_eq!(kseal_controller::sealedcache::value_budget_held(), 0);

    // One created while it runs: past the budget too, the same way.
    server.clear_requests();
    create_ss(&client, &seal(&secret(&ns, "d", &[("v", "4")]), key(0))).await;
    wait_secret(&client, &ns, "d", "unsealed", |s| {
        data_of(s) == map(&[("v", "4")])
    })
    .await;
    assert_eq!(status_reads(&server, &ns).len(), 1);

    // With room, a new object is unsealed from the cache, without a read, and the budget it
    // held is given back once it is synced (its cached entry is kept without values).
    kseal_controller::sealedcache::set_value_budget(1 << 20);
    server.clear_requests();
    create_ss(&client, &seal(&secret(&ns, "e", &[("v", "5")]), key(0))).await;
    wait_secret(&client, &ns, "e", "unsealed", |s| {
        data_of(s) == map(&[("v", "5")])
    })
    .await;
    wait_synced(&client, &ns, "e", "True", "Unsealed").await;
    assert!(
        status_reads(&server, &ns).is_empty(),
        "no read within the budget"
    );
    kseal_testkit::scenarios::eventually("budget given back", DEADLINE, || async {
        Ok((kseal_controller::sealedcache::value_budget_held() == 0).then_some(()))
    })
    .await
    .unwrap();
    running.stop().await;
}
