//! Whether the API server answers, as the watches and reconciles see it, and errors repeated
//! in a burst logged once with a count.
//!
//! A watch failure or a reconcile that could not reach the API server (a transport error, a
//! 5xx) marks it unreachable: one warn line, `kseal_api_server_reachable 0`, and every watch
//! failure counted in `kseal_watch_failures_total{watch}`. The next watch event or successful
//! reconcile marks it reachable again: one info line with how many failures were seen, and
//! [`ApiHealth::recoveries`] wakes the reconciler, which resets the backoff of the objects
//! that failed only because the API server was away and reconciles them at once.
//!
//! A request that gets no answer within its deadline counts as a failure to reach it, like a
//! transport error: a paused (SIGSTOP) or partitioned API server accepts connections and
//! answers nothing, and the client has no read timeout, so without deadlines nothing ever
//! failed and the outage went unreported. The reconciler's requests run under
//! [`REQUEST_DEADLINE`] ([`within_deadline`]), the leader election's under its renew
//! deadline, and a probe ([`probe`]: `GET /version` under [`PROBE_DEADLINE`]) asks whenever
//! nothing answered for [`PROBE_PERIOD`], so a quiet cluster's outage is seen too: within
//! `PROBE_PERIOD` × 2 + `PROBE_DEADLINE` (11 s) of the last answer.
//!
//! The features the API server's RBAC refuses (`crate::cluster::denied`) are kept here too:
//! the metrics port's `/readyz` lists them with the outage ([`ApiHealth::readyz_line`]).
//!
//! This module depends on nothing else in the crate but `denied` and `fault` (the probe
//! reports through callbacks).

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long a burst of the same error stays one log line.
pub(crate) const BURST_WINDOW: Duration = Duration::from_secs(30);
/// How long a request of the reconciler waits for the API server's answer: a Secret read or
/// write, a status patch or an Event normally takes milliseconds, and an overloaded server
/// answers 429 rather than nothing.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// How long the probe may go without any answer from the API server before it asks.
pub(crate) const PROBE_PERIOD: Duration = Duration::from_secs(3);
/// How long the probe waits for the answer to `GET /version`.
pub(crate) const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// A request that got no answer within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no answer from the API server within {:.0} s", .0.as_secs_f64())]
pub(crate) struct NoAnswer(pub(crate) Duration);

impl NoAnswer {
    /// As a kube error: a `504 Timeout` status made on this side, as a proxy in front of the
    /// API server would answer, so that it counts as [`unreachable`] and transient, and an
    /// error chain shows it once (kube's transport variants repeat their cause).
    pub(crate) fn into_kube(self) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(&self.to_string(), "Timeout")
                .with_code(504)
                .boxed(),
        )
    }
}

/// Runs `request` under [`REQUEST_DEADLINE`]: no answer by then is a [`NoAnswer`] transport
/// error, which counts towards an outage like a refused connection.
pub(crate) async fn within_deadline<T>(
    request: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    within(REQUEST_DEADLINE, request).await
}

/// Runs `request` under `deadline` ([`within_deadline`]).
pub(crate) async fn within<T>(
    deadline: Duration,
    request: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    tokio::time::timeout(deadline, request)
        .await
        .unwrap_or_else(|_| Err(NoAnswer(deadline).into_kube()))
}

/// A kind of error logged at most once per [`BURST_WINDOW`], with the count of the ones in
/// between.
#[derive(Debug, Default)]
pub(crate) struct Burst {
    /// When the last line was logged, and how many were suppressed since.
    last: Mutex<Option<(Instant, u64)>>,
}

impl Burst {
    /// Records one occurrence; `Some(n)` when a line is due now (`n` occurrences were not
    /// logged since the last line), `None` to stay quiet.
    pub(crate) fn hit(&self) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match &mut *last {
            Some((at, suppressed)) if now.duration_since(*at) < BURST_WINDOW => {
                *suppressed += 1;
                None
            }
            Some((at, suppressed)) => {
                let n = *suppressed;
                *at = now;
                *suppressed = 0;
                Some(n)
            }
            None => {
                *last = Some((now, 0));
                Some(0)
            }
        }
    }

    /// Ends the burst: returns how many occurrences were not logged, and starts afresh.
    pub(crate) fn settle(&self) -> u64 {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .map_or(0, |(_, n)| n)
    }
}

/// [`Burst`]s by kind (a condition reason, a step): each kind of failure logged at most once
/// per [`BURST_WINDOW`], with the count of the ones in between, so that many objects failing
/// the same way (200 objects sealed with a key not fetched yet) write a line per window, not
/// one per attempt; the objects' status conditions and events still name each one.
#[derive(Debug, Default)]
pub(crate) struct Bursts {
    by_kind: Mutex<std::collections::HashMap<&'static str, Burst>>,
}

impl Bursts {
    /// Records one occurrence of `kind`: `Some(n)` when a line is due now (`n` occurrences
    /// of `kind` were not logged since its last line), `None` to stay quiet.
    pub(crate) fn hit(&self, kind: &'static str) -> Option<u64> {
        self.by_kind
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kind)
            .or_default()
            .hit()
    }
}

/// Whether a request's error means the API server was not reached
/// ([`crate::cluster::fault::Fault::unreachable`]).
pub(crate) fn unreachable(error: &kube::Error) -> bool {
    crate::cluster::fault::Fault::of(error).unreachable()
}

/// What the controller knows about the API server's reachability.
#[derive(Debug)]
pub struct ApiHealth {
    reachable: AtomicBool,
    /// Failures seen since it became unreachable.
    failures: AtomicU64,
    /// When it became unreachable.
    since: Mutex<Option<Instant>>,
    /// Watch failures while unreachable, logged once per burst.
    burst: Burst,
    /// Changes of reachability, logged once per burst too: a partial outage (one resource
    /// failing, others answering) flips it at every request.
    flips: Burst,
    /// Whether the current outage was announced (its recovery is then announced too).
    announced: AtomicBool,
    /// Counts recoveries (unreachable → reachable).
    recovered: watch::Sender<u64>,
    /// When the API server last answered, in milliseconds since `born` (for the probe).
    last_answer_ms: AtomicU64,
    born: Instant,
    /// Features turned off because the API server refused them (RBAC).
    pub degraded: super::denied::Degraded,
}

impl Default for ApiHealth {
    fn default() -> Self {
        Self {
            reachable: AtomicBool::new(true),
            failures: AtomicU64::new(0),
            since: Mutex::new(None),
            burst: Burst::default(),
            flips: Burst::default(),
            announced: AtomicBool::new(false),
            recovered: watch::channel(0).0,
            last_answer_ms: AtomicU64::new(0),
            born: Instant::now(),
            degraded: super::denied::Degraded::default(),
        }
    }
}

/// The API server answered again after failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Failures seen while it was unreachable.
    pub failures: u64,
    /// How long it was unreachable.
    pub down_for: Duration,
    /// Whether to log it: the outage was announced (not a flip within a burst window).
    pub announce: bool,
}

/// What a failure changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It was reachable until now: log a warning (`Again(None)` instead when it already
    /// flipped within the burst window).
    Lost,
    /// Still unreachable; `Some(n)`: log a line now (`n` failures not logged since).
    Again(Option<u64>),
}

impl ApiHealth {
    /// Whether the API server answered last time.
    pub fn is_reachable(&self) -> bool {
        self.reachable.load(Ordering::Acquire)
    }

    /// While unreachable: for how long, and how many requests failed meanwhile.
    pub fn outage(&self) -> Option<(Duration, u64)> {
        if self.is_reachable() {
            return None;
        }
        let since = *self.since.lock().unwrap_or_else(PoisonError::into_inner);
        Some((
            since.map_or(Duration::ZERO, |t| t.elapsed()),
            self.failures.load(Ordering::Relaxed),
        ))
    }

    /// The line the metrics port's `/readyz` adds while the API server is unreachable
    /// (readiness itself does not change: the replica keeps serving its certificates), then
    /// one line per feature its RBAC turned off.
    pub fn readyz_line(&self) -> Option<String> {
        let outage = self.outage().map(|(down, failures)| {
            format!(
                "api server: unreachable for {} s ({failures} failed requests); certificates are \
                 served from the keys already loaded\n",
                down.as_secs()
            )
        });
        let lines = outage.unwrap_or_default() + &self.degraded.lines();
        (!lines.is_empty()).then_some(lines)
    }

    /// A request could not reach the API server.
    pub fn failed(&self) -> Failure {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if self.reachable.swap(false, Ordering::AcqRel) {
            *self.since.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            self.burst.settle();
            self.burst.hit();
            let announce = self.flips.hit().is_some();
            self.announced.store(announce, Ordering::Release);
            if announce {
                Failure::Lost
            } else {
                Failure::Again(None)
            }
        } else {
            Failure::Again(self.burst.hit())
        }
    }

    /// How long ago the API server last answered (since this tracker was made, if never).
    pub fn since_last_answer(&self) -> Duration {
        let at = self.born + Duration::from_millis(self.last_answer_ms.load(Ordering::Relaxed));
        Instant::now().saturating_duration_since(at)
    }

    /// The API server answered. Returns `Some` when it was unreachable until now (and wakes
    /// [`ApiHealth::recoveries`]).
    pub fn answered(&self) -> Option<Recovery> {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_answer_ms.fetch_max(ms, Ordering::Relaxed);
        if self.reachable.load(Ordering::Acquire) || self.reachable.swap(true, Ordering::AcqRel) {
            return None;
        }
        let failures = self.failures.swap(0, Ordering::Relaxed);
        let down_for = self
            .since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .map_or(Duration::ZERO, |s| s.elapsed());
        self.burst.settle();
        self.recovered.send_modify(|n| *n += 1);
        Some(Recovery {
            failures,
            down_for,
            announce: self.announced.swap(false, Ordering::AcqRel),
        })
    }

    /// Woken after each recovery.
    pub fn recoveries(&self) -> watch::Receiver<u64> {
        self.recovered.subscribe()
    }
}

/// What one probe of the API server learned.
#[derive(Debug)]
pub(crate) enum Probed {
    /// Something else answered within [`PROBE_PERIOD`]: no request sent.
    Skipped,
    /// It answered (with its version, or with an error status of its own).
    Answered,
    /// It could not be reached or did not answer within [`PROBE_DEADLINE`].
    Unreachable(kube::Error),
}

/// One probe: `GET /version` under [`PROBE_DEADLINE`], unless `health` saw an answer within
/// [`PROBE_PERIOD`].
pub(crate) async fn probe_once(client: &kube::Client, health: &ApiHealth) -> Probed {
    if health.since_last_answer() < PROBE_PERIOD {
        return Probed::Skipped;
    }
    match within(PROBE_DEADLINE, client.apiserver_version()).await {
        Ok(_) => Probed::Answered,
        Err(e) if unreachable(&e) => Probed::Unreachable(e),
        Err(_) => Probed::Answered,
    }
}

/// Probes the API server every [`PROBE_PERIOD`] in which nothing answered ([`probe_once`]),
/// reporting each answer to `answered` and each failure to `unreachable`, until dropped.
pub(crate) async fn probe(
    client: kube::Client,
    health: std::sync::Arc<ApiHealth>,
    answered: impl Fn(),
    unreachable: impl Fn(&kube::Error),
) {
    let mut tick = tokio::time::interval(PROBE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match probe_once(&client, &health).await {
            Probed::Skipped => {}
            Probed::Answered => answered(),
            Probed::Unreachable(e) => unreachable(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_admission_webhook_is_an_answer_not_an_outage() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, "InternalError")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(unreachable(&api(503, "injected outage")));
        assert!(unreachable(&api(500, "etcdserver: request timed out")));
        assert!(unreachable(&kube::Error::Service(
            "connection refused".into()
        )));
        assert!(!unreachable(&api(409, "conflict")));
        assert!(!unreachable(&api(
            500,
            "Internal error occurred: failed calling webhook \"v.example.com\": Post \"https://127.0.0.1:1/x\": dial tcp 127.0.0.1:1: connect: connection refused"
        )));
        assert!(!unreachable(&api(
            500,
            "admission webhook \"echo.example.com\" denied the request: no"
        )));
        assert!(!unreachable(&api(500, "etcdserver: request is too large")));
    }

    #[test]
    fn a_burst_is_one_line_and_recovery_wakes_subscribers() {
        let health = ApiHealth::default();
        let mut rx = health.recoveries();
        assert!(health.is_reachable());
        assert_eq!(health.answered(), None);
        assert_eq!(health.failed(), Failure::Lost);
        for _ in 0..100 {
            assert_eq!(health.failed(), Failure::Again(None));
        }
        assert!(!health.is_reachable());
        assert!(!rx.has_changed().unwrap());
        let recovery = health.answered().unwrap();
        assert_eq!(recovery.failures, 101);
        assert!(recovery.announce);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 1);
        assert_eq!(health.answered(), None);
        // Flapping within the burst window (a partial outage) is quiet, and still tracked.
        for n in 2..12 {
            assert_eq!(health.failed(), Failure::Again(None));
            assert!(!health.is_reachable());
            let recovery = health.answered().unwrap();
            assert!(!recovery.announce);
            assert_eq!(*rx.borrow_and_update(), n);
        }
    }

    #[test]
    fn the_detailed_readyz_names_an_outage_only_while_it_lasts() {
        let health = ApiHealth::default();
        assert_eq!(health.readyz_line(), None);
        health.failed();
        health.failed();
        let line = health.readyz_line().unwrap();
        assert!(
            line.starts_with("api server: unreachable for 0 s (2 failed requests)"),
            "{line}"
        );
        health.answered();
        assert_eq!(health.readyz_line(), None);
    }

    #[test]
    fn each_kind_of_failure_is_its_own_burst() {
        let bursts = Bursts::default();
        assert_eq!(bursts.hit("UnsealFailed"), Some(0));
        assert_eq!(bursts.hit("UnsealFailed"), None);
        assert_eq!(bursts.hit("Unmanaged"), Some(0));
        assert_eq!(bursts.hit("UnsealFailed"), None);
        assert_eq!(bursts.hit("Unmanaged"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_logs_again_after_its_window_with_the_count() {
        let bursts = Bursts::default();
        assert_eq!(bursts.hit("UnsealFailed"), Some(0));
        for _ in 0..1399 {
            assert_eq!(bursts.hit("UnsealFailed"), None);
        }
        tokio::time::advance(BURST_WINDOW).await;
        assert_eq!(bursts.hit("UnsealFailed"), Some(1399));
    }

    #[test]
    fn no_answer_reads_once_and_counts_as_unreachable() {
        let e = NoAnswer(Duration::from_millis(9_700)).into_kube();
        assert!(unreachable(&e));
        let kube::Error::Api(status) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(status.code, 504);
        assert_eq!(status.message, "no answer from the API server within 10 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_an_answer_fails_at_its_deadline() {
        let started = Instant::now();
        let e = within_deadline(futures::future::pending::<kube::Result<()>>())
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), REQUEST_DEADLINE);
        assert!(unreachable(&e), "{e}");
        assert_eq!(within_deadline(async { Ok(7) }).await.unwrap(), 7);
    }

    #[test]
    fn a_burst_counts_what_it_did_not_log() {
        let burst = Burst::default();
        assert_eq!(burst.hit(), Some(0));
        assert_eq!(burst.hit(), None);
        assert_eq!(burst.hit(), None);
        assert_eq!(burst.settle(), 2);
        assert_eq!(burst.hit(), Some(0));
    }
}
