//! When the key-source loop acts ([`Schedule`]): its polls, the backoff after a failed
//! sync and the probe that ends it as soon as the store answers, the spread of a restarted
//! fleet's first reads, and a follower's turn; [`super::run`] drives it.

use super::*;

/// Sleeps until `at` (forever for `None`: the branch is then disabled anyway).
pub(super) async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When the key-source loop acts next, and how long it backs off after a failed sync.
pub(super) struct Schedule {
    pub(super) next: tokio::time::Instant,
    pub(super) backoff: Duration,
    /// When the leader last started a sync.
    pub(super) last_poll: Option<tokio::time::Instant>,
    /// When the leader probes the store next, while a sync that failed on the store backs
    /// off ([`PROBE_PERIOD`]), or after a sync that found keys of the index missing
    /// ([`super::absent`]).
    pub(super) probe: Option<tokio::time::Instant>,
    /// Whether `probe` looks for missing keys (else for the store's answer).
    pub(super) probe_absent: bool,
    /// Whether the start-up sync was looked at for the start spread ([`start_wait`]).
    pub(super) start_checked: bool,
    /// Whether a sync succeeded in this process: the poll after the first is drawn over a
    /// whole interval ([`first_poll_wait`]).
    pub(super) synced_once: bool,
    /// Whether the first leader sync waited its part of [`START_MARKER_SPREAD`].
    pub(super) marker_waited: bool,
    /// The trigger a wait put off (the sync it leads to is counted under it).
    pub(super) deferred: Option<&'static str>,
}

/// The longest a leader's first read of the store (the history marker, before anything seals)
/// waits after its start or its first leadership (a random part of it, at most the interval).
pub const START_MARKER_SPREAD: Duration = Duration::from_secs(3);

/// A random part of [`START_MARKER_SPREAD`] (at most `interval`): 1,000 clusters restarting
/// in the same second read their markers over three seconds, not one.
pub(super) fn marker_wait(interval: Duration) -> Duration {
    crate::timing::spread(START_MARKER_SPREAD.min(interval))
}

/// The longest a restarted leader that seals from its verified ring-state copy waits before it
/// reads the store (a random part of it, never more than the interval).
pub const START_SPREAD: Duration = Duration::from_secs(30);

/// How long a restarted leader that seals from its verified copy waits before reading the
/// store: uniform over `START_SPREAD` (at most `interval`). 1,000 clusters restarting in
/// the same second then make about 70 store reads a second, not 2,000 in one.
pub(super) fn start_wait(interval: Duration) -> Duration {
    crate::timing::spread(START_SPREAD.min(interval))
}

/// The wait after the first successful sync of a process: uniform over one `interval` (at
/// least a second), not one interval ±10 %. Clusters restarted together (an upgrade) would
/// otherwise keep polling within seconds of each other for hours, the jitter spreading them
/// only with the square root of the polls; so would their acknowledgements of a key pushed
/// then. Later waits are the interval ±10 %.
pub(super) fn first_poll_wait(interval: Duration) -> Duration {
    crate::timing::spread(interval).max(Duration::from_secs(1).min(interval))
}

impl Schedule {
    /// A probe while a failed sync backs off (whether the store answers again) or after a
    /// sync that found keys missing (whether one is there now): the trigger of the sync to
    /// run at once (`store_answered`, `key_restored`), or `None` with the next probe
    /// scheduled.
    pub(super) async fn probe_answered(
        &mut self,
        mirror: &mut Mirror,
        state: &State,
    ) -> Option<&'static str> {
        self.probe = None;
        if !state.is_leader() {
            return None;
        }
        if self.probe_absent {
            if mirror.missing_key_back().await {
                return Some("key_restored");
            }
            self.probe = mirror.next_absent_probe();
            return None;
        }
        if !mirror.store_answers().await {
            self.probe =
                Some(tokio::time::Instant::now() + crate::timing::jitter(PROBE_PERIOD, 0.2));
            return None;
        }
        tracing::info!("the key store answers again: reading the key ring now");
        Some("store_answered")
    }

    /// At a leader's start or new term (`trigger`): whether the loop waits before its first
    /// read of the store. A restarted leader that seals from its verified ring-state copy
    /// reads the store a random part of START_SPREAD later: a fleet restarted at once (an
    /// upgrade rolled out everywhere) spreads its start-up reads of the index and the history
    /// marker over that window instead of one second of the account's quota. Its mirrored
    /// keys open meanwhile; one with nothing to seal from reads the store at once.
    pub(super) async fn start_waits(
        &mut self,
        mirror: &mut Mirror,
        state: &State,
        config: &crate::config::KeySourceConfig,
        trigger: &'static str,
    ) -> bool {
        if self.start_checked || !state.is_leader() {
            return false;
        }
        // First a random part of START_MARKER_SPREAD: the history marker (and, for a leader
        // with no copy to seal from, the index) is read before anything seals, so that wait
        // is short; it still spreads a fleet restarted in one second over it.
        if !self.marker_waited {
            self.marker_waited = true;
            let wait = marker_wait(config.interval);
            if !wait.is_zero() {
                self.deferred = Some(trigger);
                self.next = tokio::time::Instant::now() + wait;
                return true;
            }
        }
        self.start_checked = true;
        if mirror.start_from_copy().await {
            let wait = start_wait(config.interval);
            tracing::info!(
                wait = ?wait,
                "sealing from the verified ring-state copy; reading the key ring in {wait:?}"
            );
            self.next = tokio::time::Instant::now() + wait;
            return true;
        }
        false
    }

    /// A follower's turn: it takes the ring view from the ring-state Secret the leader
    /// writes, and the keys from the mirror; it polls the store once leading.
    pub(super) async fn follow(
        &mut self,
        mirror: &mut Mirror,
        config: &crate::config::KeySourceConfig,
    ) {
        mirror.forget_missing();
        if let Err(e) = mirror.follow().await {
            tracing::debug!(
                "reading the ring-state Secret failed: {}",
                crate::error_chain(&e)
            );
        }
        mirror.note_ignored_state().await;
        self.next = tokio::time::Instant::now() + STATE_POLL.min(config.interval);
    }

    /// One sync by the leader, fenced to its current term and counted by `trigger`; reports
    /// the outcome and schedules the next sync (the interval, at once after losing the
    /// lead, or the doubling backoff after a failure).
    pub(super) async fn leader_sync(
        &mut self,
        mirror: &mut Mirror,
        state: &State,
        config: &crate::config::KeySourceConfig,
        trigger: &'static str,
    ) {
        self.last_poll = Some(tokio::time::Instant::now());
        self.probe = None;
        self.probe_absent = false;
        // Taken before the first read: a sync that outlives this term writes nothing more.
        let Some(fence) = state.leadership.fence() else {
            return;
        };
        mirror.set_fence(Some(fence));
        state
            .metrics
            .key_source_sync_triggers
            .get_or_create(&crate::metrics::TriggerLabels {
                trigger: trigger.to_owned(),
            })
            .inc();
        match mirror.sync().await {
            Ok(report) => {
                self.backoff = BACKOFF_MIN;
                state.readiness.key_source_ok();
                state
                    .metrics
                    .key_source_last_success
                    .set(jiff::Timestamp::now().as_second());
                count(state, "sync", "ok");
                if report != SyncReport::default() {
                    tracing::debug!(?report, "key ring synced");
                }
                let wait = if self.synced_once {
                    crate::timing::jitter(config.interval, 0.1)
                } else {
                    first_poll_wait(config.interval)
                };
                self.synced_once = true;
                self.next = tokio::time::Instant::now() + wait;
                // Keys the index lists but the store did not hold: looked for meanwhile.
                self.probe = mirror.next_absent_probe();
                self.probe_absent = self.probe.is_some();
            }
            Err(SyncError::Fenced(e)) => {
                // Not a problem of the key source: followers read the view the new leader
                // writes.
                tracing::info!(reason = %e, "key-source sync stopped: this replica no longer leads");
                self.next = tokio::time::Instant::now();
            }
            Err(e) => {
                let message = crate::error_chain(&e);
                tracing::warn!(reason = e.reason(), retry_in = ?self.backoff, "key source: {message}");
                // A new leader that cannot read the store still puts back the newer verified
                // copy it followed, should the ring-state copy have been rolled back; a leader
                // that verified an index puts its copy back if it was removed or rolled back
                // meanwhile (attack review, round 4: followers restarted during an outage took
                // an older copy planted in its place).
                mirror.restore_followed().await;
                mirror.write_state().await;
                if matches!(e.reason(), "untrusted" | "malformed") {
                    // A new leader that has written no copy yet: on the copy it found, else the
                    // one it followed or compared with (attack review, round 12, A2).
                    let found = mirror.cache.found_state.clone().or_else(|| {
                        mirror
                            .cache
                            .followed
                            .as_ref()
                            .or(mirror.cache.unvouched_copy.as_ref())
                            .map(|f| f.name.clone())
                    });
                    mirror
                        .refused_index_event(refusal_kind(&e), &message, found.as_deref())
                        .await;
                }
                state.readiness.key_source_failed(e.reason(), &message);
                count(state, "sync", e.reason());
                let now = tokio::time::Instant::now();
                self.next = now + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                // A failure of the store (not of the API server) ends as soon as the store
                // answers differently: probe it meanwhile.
                if matches!(e, SyncError::Store { .. } | SyncError::NoRing { .. }) {
                    self.probe = Some(now + crate::timing::jitter(PROBE_PERIOD, 0.2));
                }
                mirror.note_ignored_state().await;
            }
        }
    }
}
