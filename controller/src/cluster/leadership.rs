//! Leadership as an event, and the fence every write goes through.
//!
//! [`leader`](crate::cluster::leader) publishes; everything else subscribes or checks:
//! - [`Leadership::subscribe`] yields a [`Term`] each time this replica starts or stops
//!   leading (the key-source loop reads the ring the moment it leads; the reconciler
//!   reconciles everything), never on a plain renewal;
//! - [`Leadership::fence`] is taken when a piece of work starts (a reconcile, a key-source
//!   sync), and [`Fence::check`] is called right before each API write it makes. It passes only
//!   while the replica still leads in the same term (epoch) and before the local lease
//!   deadline: the moment before the last successful renewal was sent, plus the renew
//!   deadline (the lease duration less a safety margin). The deadline is measured on the
//!   monotonic clock, which keeps running while the process is frozen (SIGSTOP, a paused VM):
//!   a leader that wakes up after its lease ran out refuses its writes before its elector has
//!   even noticed, and work begun in an older term is dropped.
//!
//! This module depends on nothing else in the crate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

/// One leadership state: whether this replica leads, and the term it leads in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    /// Whether this replica holds the leader Lease.
    pub leading: bool,
    /// Increments on every acquisition (0: never led).
    pub epoch: u64,
}

#[derive(Debug)]
struct Inner {
    tx: watch::Sender<Term>,
    /// While leading: the instant after which no write may be sent (`None`: no deadline,
    /// leadership without election).
    deadline: Mutex<Option<Instant>>,
    /// Writes refused by [`Fence::check`].
    refused: AtomicU64,
}

/// This replica's leadership, shared by every task (cheap to clone).
#[derive(Debug, Clone)]
pub struct Leadership(Arc<Inner>);

impl Default for Leadership {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Fenced {
    /// This replica does not lead (any more).
    #[error("this replica is not the leader")]
    NotLeader,
    /// It leads again, but in a later term than the work began in.
    #[error("the leadership term this work began in has ended")]
    StaleEpoch,
    /// The local lease deadline passed (no renewal in time, e.g. a frozen process).
    #[error("the leader lease may have expired (no renewal before the local deadline)")]
    DeadlinePassed,
}

impl Leadership {
    /// Not leading, never led.
    pub fn new() -> Self {
        let (tx, _) = watch::channel(Term {
            leading: false,
            epoch: 0,
        });
        Self(Arc::new(Inner {
            tx,
            deadline: Mutex::new(None),
            refused: AtomicU64::new(0),
        }))
    }

    fn set_deadline(&self, deadline: Option<Instant>) {
        *self
            .0
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = deadline;
    }

    fn deadline(&self) -> Option<Instant> {
        *self
            .0
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The Lease was acquired or renewed: writes may go out until `deadline` (`None`: no
    /// deadline). Starts a new term if this replica was not leading; returns whether it did.
    pub fn hold(&self, deadline: Option<Instant>) -> bool {
        // The deadline first: a subscriber woken by the new term can write at once.
        self.set_deadline(deadline);
        self.0.tx.send_if_modified(|term| {
            if term.leading {
                return false;
            }
            term.leading = true;
            term.epoch += 1;
            true
        })
    }

    /// The leadership ended (stepped down, lost, released). Returns whether it was held.
    pub fn lose(&self) -> bool {
        let was = self.0.tx.send_if_modified(|term| {
            let was = term.leading;
            term.leading = false;
            was
        });
        self.set_deadline(None);
        was
    }

    /// Leads (or not) without election and without a deadline: `--leader-elect=false`, and
    /// tests that play the elector.
    pub fn assume(&self, leading: bool) {
        if leading {
            self.hold(None);
        } else {
            self.lose();
        }
    }

    /// The current term.
    pub fn term(&self) -> Term {
        *self.0.tx.borrow()
    }

    /// Whether this replica leads now and its local lease deadline has not passed.
    pub fn is_leader(&self) -> bool {
        self.term().leading && self.deadline().is_none_or(|d| Instant::now() < d)
    }

    /// Woken on every change of [`Term`] (not on renewals).
    pub fn subscribe(&self) -> watch::Receiver<Term> {
        self.0.tx.subscribe()
    }

    /// A fence for work starting now, or `None` when this replica does not lead.
    pub fn fence(&self) -> Option<Fence> {
        let term = self.term();
        (term.leading && self.is_leader()).then(|| Fence {
            leadership: self.clone(),
            epoch: term.epoch,
        })
    }

    /// Writes refused so far.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }
}

/// Work begun in one leadership term: [`Fence::check`] before each write.
#[derive(Debug, Clone)]
pub struct Fence {
    leadership: Leadership,
    epoch: u64,
}

impl Fence {
    /// The term the work began in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Ok while the write may go out: still leading, in the same term, before the deadline.
    /// A refusal is counted ([`Leadership::refused`]).
    pub fn check(&self) -> Result<(), Fenced> {
        let term = self.leadership.term();
        let result = if !term.leading {
            Err(Fenced::NotLeader)
        } else if term.epoch != self.epoch {
            Err(Fenced::StaleEpoch)
        } else if self
            .leadership
            .deadline()
            .is_some_and(|d| Instant::now() >= d)
        {
            Err(Fenced::DeadlinePassed)
        } else {
            Ok(())
        };
        if result.is_err() {
            self.leadership.0.refused.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_fence_refuses_after_the_deadline_and_in_a_later_term() {
        let l = Leadership::new();
        assert!(l.fence().is_none());
        let mut rx = l.subscribe();
        assert!(l.hold(Some(Instant::now() + Duration::from_secs(10))));
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            *rx.borrow_and_update(),
            Term {
                leading: true,
                epoch: 1
            }
        );
        let fence = l.fence().unwrap();
        assert_eq!(fence.check(), Ok(()));
        // A renewal is not a new term and wakes nobody.
        assert!(!l.hold(Some(Instant::now() + Duration::from_secs(20))));
        assert!(!rx.has_changed().unwrap());
        // A renewal whose deadline is already over (a process frozen past its lease).
        l.hold(Some(Instant::now()));
        assert!(!l.is_leader());
        assert_eq!(fence.check(), Err(Fenced::DeadlinePassed));
        // Lost and won again: work of the first term is dropped, new work goes out.
        assert!(l.lose());
        assert_eq!(fence.check(), Err(Fenced::NotLeader));
        l.hold(Some(Instant::now() + Duration::from_secs(10)));
        assert_eq!(fence.check(), Err(Fenced::StaleEpoch));
        assert_eq!(l.fence().unwrap().check(), Ok(()));
        assert_eq!(l.term().epoch, 2);
        assert_eq!(l.refused(), 3);
    }

    #[test]
    fn without_election_there_is_no_deadline() {
        let l = Leadership::new();
        l.assume(true);
        assert!(l.is_leader());
        assert_eq!(l.fence().unwrap().check(), Ok(()));
        l.assume(false);
        assert!(!l.is_leader());
    }
}
