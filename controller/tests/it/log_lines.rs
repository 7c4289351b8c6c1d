//! Per-object WARN lines are rate-limited with a count: many objects failing the same way
//! write one line per reason and burst window (their conditions and Warning events still name
//! each one), against kseal-testkit's API server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use crate::common::*;
use kseal_testkit::TestApiServer;
use kseal_testkit::scenarios::eventually;

/// Log output kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    fn lines_with(&self, text: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

/// Eight objects sealed with a key the ring does not hold, each failing again and again: one
/// WARN line, not one per attempt. (On a current-thread runtime, so that the log subscriber
/// set for this test sees every reconcile.)
#[tokio::test(flavor = "current_thread")]
async fn objects_failing_the_same_way_write_one_warn_line_per_window() {
    const OBJECTS: usize = 8;
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = TestApiServer::new();
    let cluster = Cluster::new(server.client()).await;
    let (client, app) = (cluster.client.clone(), cluster.app.clone());
    for i in 0..OBJECTS {
        let name = format!("s{i}");
        create_ss(&client, &seal(&secret(&app, &name, &[("k", "v")]), key(1))).await;
    }
    let running = Running::start(&client, cluster.config()).await;
    // Every object failed at least three times (backoff 0.5 s, 1 s, …).
    eventually("every object failed three times", DEADLINE, || async {
        Ok((running.reconciles("failed") >= 3 * OBJECTS as u64).then_some(()))
    })
    .await
    .unwrap();
    for i in 0..OBJECTS {
        wait_synced(&client, &app, &format!("s{i}"), "False", "UnsealFailed").await;
    }
    let failed = running.reconciles("failed");
    let lines = captured.lines_with("reconcile failed");
    assert_eq!(
        lines.len(),
        1,
        "{failed} failed reconciles wrote these WARN lines:\n{}",
        lines.join("\n")
    );
    assert!(lines[0].contains("reason=\"UnsealFailed\""), "{}", lines[0]);
    assert!(lines[0].contains("not_logged=0"), "{}", lines[0]);
    running.stop().await;
    cluster.cleanup().await;
}
