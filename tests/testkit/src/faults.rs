//! Fault injection and the request log.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http::Method;

use crate::store::State;

/// One request the server answered. Serializable for `GET /_testkit/requests`
/// ([`crate::TestApiServer::serve_with_admin`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestRecord {
    /// HTTP method, e.g. `PATCH`.
    pub method: String,
    /// Request path, e.g. `/api/v1/namespaces/default/secrets/x`.
    pub path: String,
    /// Raw query string, if any.
    pub query: Option<String>,
    /// Response status code (200 for watches, which stream).
    pub status: u16,
    /// When the answer was ready (a watch: when it started streaming), in microseconds
    /// since the Unix epoch: benchmarks time a phase by its last write to the microsecond.
    #[serde(default)]
    pub at_us: u64,
}

/// Now, in microseconds since the Unix epoch: the clock of [`RequestRecord::at_us`], for a
/// benchmark to compare its own times with the log's.
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl RequestRecord {
    /// Whether this was a watch request.
    pub fn is_watch(&self) -> bool {
        self.query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
    }
}

/// A rule that makes matching requests fail. Build with [`FaultRule::new`] and the setters.
#[derive(Debug, Clone)]
pub struct FaultRule {
    code: u16,
    times: usize,
    method: Option<Method>,
    path_contains: Option<String>,
    resource: Option<String>,
    watch: Option<bool>,
}

impl FaultRule {
    /// Fail the next matching request with `code` (409, 429, 500, 403, ...). Matches every
    /// request until narrowed.
    pub fn new(code: u16) -> Self {
        Self {
            code,
            times: 1,
            method: None,
            path_contains: None,
            resource: None,
            watch: None,
        }
    }

    /// Fail this many matching requests instead of one.
    #[must_use]
    pub fn times(mut self, n: usize) -> Self {
        self.times = n;
        self
    }

    /// Only requests with this HTTP method (`"PATCH"`, `"GET"`, ...).
    #[must_use]
    pub fn method(mut self, m: &str) -> Self {
        self.method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).ok();
        self
    }

    /// Only requests whose path contains this string.
    #[must_use]
    pub fn path_contains(mut self, s: &str) -> Self {
        self.path_contains = Some(s.to_owned());
        self
    }

    /// Only requests for this resource (plural, e.g. `"secrets"`).
    #[must_use]
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_owned());
        self
    }

    /// Only watch requests (`true`) or only non-watch requests (`false`).
    #[must_use]
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = Some(watch);
        self
    }

    fn matches(&self, method: &Method, path: &str, resource: Option<&str>, watch: bool) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
            && self.resource.as_deref().is_none_or(|r| Some(r) == resource)
            && self.watch.is_none_or(|w| w == watch)
    }
}

/// Fault injection for a test API server; get it from `TestApiServer::faults`.
pub struct Faults {
    state: Arc<Mutex<State>>,
    rules: Mutex<Vec<FaultRule>>,
    delay: Mutex<Option<Duration>>,
    log: Mutex<Vec<RequestRecord>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks already failed the test; keep going.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Faults {
    pub(crate) fn new(state: Arc<Mutex<State>>) -> Self {
        Self {
            state,
            rules: Mutex::default(),
            delay: Mutex::default(),
            log: Mutex::default(),
        }
    }

    /// Makes the next matching requests fail (rules are checked in the order added).
    pub fn fail(&self, rule: FaultRule) {
        if rule.times > 0 {
            lock(&self.rules).push(rule);
        }
    }

    /// Removes all pending failure rules.
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    /// Number of injected failures still pending.
    pub fn pending(&self) -> usize {
        lock(&self.rules).iter().map(|r| r.times).sum()
    }

    /// Closes every open watch stream; clients re-watch from their last resourceVersion.
    pub fn drop_watches(&self) {
        lock(&self.state).drop_watches();
    }

    /// Compacts the event log: watches resuming from an older resourceVersion get an ERROR
    /// event with a 410 Expired Status (clients must re-list).
    pub fn compact(&self) {
        lock(&self.state).compact();
    }

    /// Delays every response by `delay` (`None` to stop).
    pub fn set_delay(&self, delay: Option<Duration>) {
        *lock(&self.delay) = delay;
    }

    pub(crate) fn delay(&self) -> Option<Duration> {
        *lock(&self.delay)
    }

    pub(crate) fn take(
        &self,
        method: &Method,
        path: &str,
        resource: Option<&str>,
        watch: bool,
    ) -> Option<u16> {
        let mut rules = lock(&self.rules);
        let i = rules
            .iter()
            .position(|r| r.matches(method, path, resource, watch))?;
        let code = rules[i].code;
        rules[i].times -= 1;
        if rules[i].times == 0 {
            rules.remove(i);
        }
        Some(code)
    }

    pub(crate) fn record(&self, r: RequestRecord) {
        lock(&self.log).push(r);
    }

    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.log).clone()
    }

    pub(crate) fn clear_requests(&self) {
        lock(&self.log).clear();
    }

    /// How many logged requests `keep` accepts, without copying the log.
    pub(crate) fn count_requests(&self, keep: impl Fn(&RequestRecord) -> bool) -> usize {
        lock(&self.log).iter().filter(|r| keep(r)).count()
    }
}
