//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! Every replica serves HTTP; only the leader writes (Secrets, status, generated keys). A
//! replica is leader while it holds the Lease `--leader-election-lease` in the controller
//! namespace. [`State::leadership`] publishes it as an event (a new term, with a new epoch, on
//! every acquisition; see `crate::cluster::leadership`) and fences every write with the local lease
//! deadline (the moment before the last successful write of the Lease was sent, plus
//! [`LeaderConfig::renew_deadline`]); the `kseal_is_leader` gauge says so too.
//!
//! The protocol is client-go's:
//! - **Acquire** when the Lease is absent (create; `409 AlreadyExists` means another replica
//!   won), released (empty `holderIdentity`) or expired, by replacing it with a
//!   `resourceVersion` precondition (`409 Conflict` means another replica won). Taking over
//!   from another holder increments `leaseTransitions` and sets `acquireTime`.
//! - **Renew** every [`LeaderConfig::renew_period`] the same way.
//! - **Expired** means either the holder's `renewTime + leaseDurationSeconds` is in the past
//!   by this replica's clock, or this replica has watched the same record (same
//!   `resourceVersion`) go unchanged for `leaseDurationSeconds` by its own monotonic clock.
//! - **Step down** at once when a renewal finds another holder or gets a `409`, and also
//!   when no renewal succeeded for [`LeaderConfig::renew_deadline`] (measured from the
//!   moment before the last successful write was sent). The deadline is shorter than the
//!   lease, so the old leader stops writing before anyone can take over, even with a few
//!   seconds of clock skew between nodes.
//! - **Release** on graceful shutdown: stop writing first, then clear `holderIdentity` and
//!   shorten the lease to one second, so another replica takes over at its next retry.
//!
//! Without election (`--leader-elect=false`) the replica is always leader.
//!
//! **Refused by RBAC.** When the API server refuses the Lease (`403`) before this replica ever
//! held it, as under Bitnami's Helm chart, whose roles grant no Lease, election is turned off
//! for the life of the process: the replica leads alone, without a deadline, as Bitnami's
//! controller (which has no election) always does. One WARN line names the refused permission
//! and the fix, and the metrics port's `/readyz` lists it (`crate::cluster::denied`). Two such
//! replicas would both write, as two of Bitnami's would: run one. A refusal after the Lease was
//! held is a failure like any other (the replica steps down at its deadline).

use std::future::Future;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

use crate::cluster::denied::{self, describe};
use crate::{Config, Error, Result, State};

/// Timing and identity of leader election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This replica's identity (`holderIdentity`).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (`leaseDurationSeconds`; whole
    /// seconds, at least one).
    pub lease_duration: Duration,
    /// The leader steps down when no renewal succeeded for this long; shorter than
    /// `lease_duration` (the difference absorbs clock skew and request latency).
    pub renew_deadline: Duration,
    /// Time between renewals while leader.
    pub renew_period: Duration,
    /// Time between attempts while not leader, and after a failed renewal.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Defaults: lease 15 s, step down after 10 s without renewal, renew every 5 s, retry
    /// every 2 s (client-go's lease, deadline and retry; a shorter renew period).
    pub fn new(
        namespace: impl Into<String>,
        lease_name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: lease_name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            renew_period: Duration::from_secs(5),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The election `config` asks for, or `None` when `--leader-elect=false`.
    pub fn from_config(config: &Config) -> Option<Self> {
        config.leader_election_lease.as_ref().map(|lease| {
            Self::new(
                config.controller_namespace.clone(),
                lease.clone(),
                config.identity.clone(),
            )
        })
    }

    /// Repairs inconsistent timings so that safety holds: a lease of at least one whole
    /// second, a deadline shorter than the lease, renewals more often than the deadline.
    fn sanitized(mut self) -> Self {
        let secs = self.lease_duration.as_secs().max(1)
            + u64::from(self.lease_duration.subsec_nanos() > 0);
        self.lease_duration = Duration::from_secs(secs.min(i32::MAX as u64));
        if self.renew_deadline.is_zero() || self.renew_deadline >= self.lease_duration {
            self.renew_deadline = self.lease_duration * 2 / 3;
        }
        if self.renew_period.is_zero() || self.renew_period >= self.renew_deadline {
            self.renew_period = self.renew_deadline / 3;
        }
        if self.retry_period.is_zero() {
            self.retry_period = self.renew_period;
        }
        self
    }

    fn lease_seconds(&self) -> i32 {
        // sanitized() keeps the lease within 1..=i32::MAX seconds.
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// Runs leader election until `shutdown` completes, keeping [`State::leadership`] and the
/// `kseal_is_leader` gauge up to date, then releases the Lease if held.
///
/// With `config == None` (election disabled) the replica is leader until shutdown.
/// API errors are logged and retried; this returns an error only if releasing the Lease on
/// shutdown fails (the Lease then expires by itself).
pub async fn run(
    client: kube::Client,
    state: State,
    config: Option<LeaderConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let Some(config) = config else {
        set_leader(&state, Some(None));
        shutdown.await;
        set_leader(&state, None);
        return Ok(());
    };
    let mut elector = Elector::new(client, state.clone(), config.sanitized());
    tokio::pin!(shutdown);
    loop {
        if elector.refused {
            // Election off (see the module docs): this replica leads alone.
            set_leader(&state, Some(None));
            shutdown.await;
            set_leader(&state, None);
            return Ok(());
        }
        let wake = elector.next_wake();
        tokio::select! {
            () = &mut shutdown => break,
            () = tokio::time::sleep_until(wake) => {}
        }
        // Shutdown also interrupts a request in flight.
        tokio::select! {
            () = &mut shutdown => break,
            () = elector.step() => {}
        }
    }
    elector.release().await
}

/// `Some(deadline)`: leading (until `deadline`, `None` without one); `None`: not leading.
fn set_leader(state: &State, leading: Option<Option<Instant>>) {
    state.metrics.is_leader.set(i64::from(leading.is_some()));
    match leading {
        Some(deadline) => {
            if state.leadership.hold(deadline) {
                tracing::info!(epoch = state.leadership.term().epoch, "became leader");
            }
        }
        None => {
            if state.leadership.lose() {
                tracing::info!("no longer leader");
            }
        }
    }
}

/// The Lease record last seen, and when this replica first saw it unchanged.
struct Observed {
    resource_version: Option<String>,
    seen_at: Instant,
}

enum Attempt {
    /// The Lease is ours until the deadline.
    Held,
    /// Another replica holds a valid Lease, or won a race (409).
    Lost,
    /// The request failed; try again.
    Failed(kube::Error),
    /// The renew deadline passed while the requests were in flight.
    TimedOut,
}

struct Elector {
    api: Api<Lease>,
    state: State,
    config: LeaderConfig,
    /// While leader: when the leadership ends unless renewed.
    valid_until: Option<Instant>,
    /// When the next attempt is due.
    next_attempt: Instant,
    observed: Option<Observed>,
    /// Whether this replica ever held the Lease.
    held_once: bool,
    /// The API server refused the Lease before it was ever held: election is off.
    refused: bool,
}

impl Elector {
    fn new(client: kube::Client, state: State, config: LeaderConfig) -> Self {
        set_leader(&state, None);
        Self {
            api: Api::namespaced(client, &config.namespace),
            state,
            config,
            valid_until: None,
            next_attempt: Instant::now(),
            observed: None,
            held_once: false,
            refused: false,
        }
    }

    fn next_wake(&self) -> Instant {
        match self.valid_until {
            Some(until) => self.next_attempt.min(until),
            None => self.next_attempt,
        }
    }

    fn step_down(&mut self) {
        self.valid_until = None;
        set_leader(&self.state, None);
    }

    /// One attempt to acquire or renew; the leadership deadline also bounds the request (and,
    /// while not leading, the renew deadline: a paused API server answers nothing, and the
    /// client has no read timeout).
    async fn step(&mut self) {
        let now = Instant::now();
        if let Some(until) = self.valid_until
            && now >= until
        {
            tracing::warn!(
                deadline = ?self.config.renew_deadline,
                "could not renew the leader lease in time: stepping down"
            );
            self.step_down();
        }
        let started = Instant::now();
        let attempt = match self.valid_until {
            Some(until) => tokio::time::timeout_at(until, self.try_acquire_or_renew())
                .await
                .unwrap_or(Attempt::TimedOut),
            None => tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew())
                .await
                .unwrap_or(Attempt::TimedOut),
        };
        match attempt {
            Attempt::Held => {
                self.state.api_answered();
                self.held_once = true;
                // Measured from before the request was sent: the server may have written
                // the Lease at any moment after that.
                let until = started + self.config.renew_deadline;
                self.valid_until = Some(until);
                self.next_attempt = started + self.config.renew_period;
                set_leader(&self.state, Some(Some(until)));
            }
            Attempt::Lost => {
                self.state.api_answered();
                if self.valid_until.is_some() {
                    tracing::info!("the leader lease was taken over: stepping down");
                }
                self.step_down();
                self.next_attempt = Instant::now() + self.config.retry_period;
            }
            // An API server that cannot be reached is reported once for the whole outage,
            // with the other requests' failures ([`State::api_unreachable`]), not every
            // retry period; an answer it refused with (403, 409...) is the lease's own
            // problem and logged each time.
            Attempt::Failed(error) if crate::cluster::apihealth::unreachable(&error) => {
                self.state
                    .api_unreachable("renewing the leader lease", &error);
                self.after_failure();
            }
            Attempt::Failed(error) if !self.held_once && denied::forbidden(&error) => {
                self.state.api_answered();
                self.refuse(&error);
            }
            Attempt::Failed(error) => {
                self.state.api_answered();
                tracing::warn!(error = %describe(&error), "leader lease request failed");
                self.after_failure();
            }
            // No answer in time counts towards an outage like a refused connection (one
            // line for the whole outage); a leader says why it is about to step down.
            Attempt::TimedOut => {
                let waited = crate::cluster::apihealth::NoAnswer(started.elapsed());
                self.state
                    .api_unreachable("renewing the leader lease", &waited);
                if self.valid_until.is_some() {
                    tracing::warn!("leader lease request did not finish before the renew deadline");
                }
                self.after_failure();
            }
        }
    }

    /// Turns election off (see the module docs), saying so once.
    fn refuse(&mut self, error: &kube::Error) {
        self.refused = true;
        let fix = format!(
            "run a single replica, or grant get, create and update on \
             leases.coordination.k8s.io {:?} in namespace {:?} (docs/bitnami.md)",
            self.config.lease_name, self.config.namespace
        );
        let first = self.state.api.degraded.record("lease", || {
            format!(
                "leader election off: the API server refused the Lease ({}); this replica leads \
                 alone: {fix}",
                describe(error)
            )
        });
        if first {
            tracing::warn!(
                error = %describe(error),
                "leader election off: the API server refused the Lease; this replica leads \
                 alone, as Bitnami's controller does: {fix}"
            );
        }
    }

    fn after_failure(&mut self) {
        let now = Instant::now();
        if self.valid_until.is_some_and(|until| now >= until) {
            tracing::warn!("could not renew the leader lease in time: stepping down");
            self.step_down();
        }
        self.next_attempt = now + self.config.retry_period;
    }

    /// Reads the Lease and writes it as ours if it is absent, ours, released or expired.
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let current = match self.api.get_opt(&self.config.lease_name).await {
            Ok(lease) => lease,
            Err(e) => return Attempt::Failed(e),
        };
        let now = Timestamp::now();
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.our_spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Attempt::Held,
                Err(e) if is_conflict(&e) => Attempt::Lost,
                Err(e) => Attempt::Failed(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let ours = holder == Some(self.config.identity.as_str());
        let resource_version = lease.metadata.resource_version.clone();
        if !ours && holder.is_some() && !self.expired(&spec, resource_version.clone(), now) {
            return Attempt::Lost;
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = if ours {
            LeaseSpec {
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(self.config.lease_seconds()),
                holder_identity: Some(self.config.identity.clone()),
                ..spec
            }
        } else {
            tracing::info!(
                previous = holder.unwrap_or(""),
                "acquiring the leader lease"
            );
            self.our_spec(now, now, transitions.saturating_add(1))
        };
        lease.spec = Some(new_spec);
        // `lease` carries the resourceVersion read above: the replace is a compare-and-swap.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Attempt::Held,
            Err(e) if is_conflict(&e) => Attempt::Lost,
            Err(e) => Attempt::Failed(e),
        }
    }

    fn our_spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_seconds()),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Whether another holder's Lease has expired (see the module docs).
    fn expired(
        &mut self,
        spec: &LeaseSpec,
        resource_version: Option<String>,
        now: Timestamp,
    ) -> bool {
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0).max(1)).unwrap_or(1),
        );
        let local = Instant::now();
        let seen_at = match &self.observed {
            Some(o) if o.resource_version == resource_version => o.seen_at,
            _ => {
                self.observed = Some(Observed {
                    resource_version,
                    seen_at: local,
                });
                local
            }
        };
        if local.duration_since(seen_at) >= duration {
            return true;
        }
        let Ok(signed) = SignedDuration::try_from(duration) else {
            return false;
        };
        spec.renew_time
            .as_ref()
            .and_then(|t| t.0.checked_add(signed).ok())
            .is_some_and(|expiry| expiry < now)
    }

    /// Stops leading, then clears the holder so that another replica takes over at its next
    /// attempt instead of waiting for the Lease to expire.
    async fn release(mut self) -> Result<()> {
        let held = self.valid_until.is_some();
        // Stop writing before anyone else can start.
        self.step_down();
        if !held {
            return Ok(());
        }
        let mut lease = match self.api.get_opt(&self.config.lease_name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return Ok(()),
            Err(e) => return Err(Error::LeaderElection(e)),
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                tracing::info!("released the leader lease");
                Ok(())
            }
            // Someone else wrote it meanwhile: it is not ours to release any more.
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(Error::LeaderElection(e)),
        }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_are_made_safe() {
        let mut c = LeaderConfig::new("ns", "lease", "me");
        c.lease_duration = Duration::from_millis(1500);
        c.renew_deadline = Duration::from_secs(5);
        c.renew_period = Duration::ZERO;
        c.retry_period = Duration::ZERO;
        let c = c.sanitized();
        assert_eq!(c.lease_duration, Duration::from_secs(2));
        assert!(c.renew_deadline < c.lease_duration);
        assert!(!c.renew_period.is_zero() && c.renew_period < c.renew_deadline);
        assert!(!c.retry_period.is_zero());
        let d = LeaderConfig::new("ns", "lease", "me");
        assert_eq!(d.clone().sanitized(), d);
    }
}
