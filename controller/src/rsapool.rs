//! One pool of RSA slots, shared by the reconciler and the HTTP API, that serves the
//! reconciler first.
//!
//! RSA private-key operations are the controller's CPU-heavy work. The pool has `slots`
//! (`--concurrency`) places; whoever holds one may run RSA work on a blocking thread.
//!
//! - **Reconciles** acquire a slot for one unseal ([`RsaPool::reconcile`]) and may use every
//!   slot. A free slot always goes to a waiting reconcile first.
//! - **HTTP jobs** (one verify or rotate request each) are first admitted
//!   ([`RsaPool::admit_http`]): at most `http_share + http_queue` jobs at once and at most
//!   `http_share` per client; beyond that the request is refused at once (the caller answers
//!   503 with `Retry-After`) instead of queueing. An admitted job then takes a slot **per
//!   item** ([`HttpJob::slot`]), only while no reconcile waits and fewer than `http_share`
//!   (half the slots and half the CPUs, at least one) are held by HTTP work. So a reconcile that arrives while
//!   every slot is busy waits for at most one item's RSA work (the keys it may try), never for
//!   a whole request.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::ratelimit::Client;

/// Slots of a pool before [`RsaPool::configure`] (`--concurrency`'s default).
pub const DEFAULT_SLOTS: usize = 4;
/// Admitted HTTP jobs that may wait, per slot of the HTTP share.
const QUEUE_PER_HTTP_SLOT: usize = 2;

/// The pool; see the [module](self) documentation.
#[derive(Debug)]
pub struct RsaPool {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// CPUs of the machine (the HTTP share is at most half of them).
    cores: usize,
    slots: usize,
    http_share: usize,
    http_queue: usize,
    busy: usize,
    http_busy: usize,
    next_id: u64,
    reconcile_waiting: VecDeque<(u64, oneshot::Sender<()>)>,
    http_waiting: VecDeque<(u64, mpsc::SyncSender<()>)>,
    http_jobs: usize,
    per_client: HashMap<Client, usize>,
}

/// Who holds a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reconcile,
    Http,
}

/// The HTTP share of the pool is taken: retry later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// How the pool is split, for tests and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Slots in all.
    pub slots: usize,
    /// Slots HTTP work may hold at most.
    pub http_share: usize,
    /// HTTP jobs admitted at most (running or waiting).
    pub http_jobs: usize,
}

impl Inner {
    fn shape(slots: usize, cores: usize) -> (usize, usize, usize) {
        let slots = slots.max(1);
        let share = (slots / 2).min(cores / 2).max(1);
        (slots, share, share * QUEUE_PER_HTTP_SLOT)
    }

    /// Hands free slots to waiters: reconciles first, then HTTP jobs within their share. A
    /// waiter that is gone still owns what it was handed; its guard gives it back.
    fn dispatch(&mut self) {
        while self.busy < self.slots {
            if let Some((_, tx)) = self.reconcile_waiting.pop_front() {
                self.busy += 1;
                let _ = tx.send(());
                continue;
            }
            if self.http_busy < self.http_share
                && let Some((_, tx)) = self.http_waiting.pop_front()
            {
                self.busy += 1;
                self.http_busy += 1;
                let _ = tx.send(());
                continue;
            }
            break;
        }
    }

    fn release(&mut self, kind: Kind) {
        self.busy = self.busy.saturating_sub(1);
        if kind == Kind::Http {
            self.http_busy = self.http_busy.saturating_sub(1);
        }
        self.dispatch();
    }

    fn id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }
}

impl RsaPool {
    /// A pool of `slots` slots (at least one) on this machine's CPUs.
    pub fn new(slots: usize) -> Arc<Self> {
        Self::with_cores(slots, crate::config::cpus())
    }

    /// A pool of `slots` slots for a machine with `cores` CPUs.
    pub fn with_cores(slots: usize, cores: usize) -> Arc<Self> {
        let (slots, http_share, http_queue) = Inner::shape(slots, cores);
        Arc::new(Self {
            inner: Mutex::new(Inner {
                cores,
                slots,
                http_share,
                http_queue,
                busy: 0,
                http_busy: 0,
                next_id: 0,
                reconcile_waiting: VecDeque::new(),
                http_waiting: VecDeque::new(),
                http_jobs: 0,
                per_client: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update keeps the counters consistent before it can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the number of slots (`--concurrency`, when the reconciler starts).
    pub fn configure(&self, slots: usize) {
        let mut inner = self.lock();
        (inner.slots, inner.http_share, inner.http_queue) = Inner::shape(slots, inner.cores);
        inner.dispatch();
    }

    /// How the pool is split.
    pub fn shape(&self) -> Shape {
        let inner = self.lock();
        Shape {
            slots: inner.slots,
            http_share: inner.http_share,
            http_jobs: inner.http_share + inner.http_queue,
        }
    }

    /// A slot for one unseal, ahead of every HTTP job. Cancel-safe.
    pub async fn reconcile(self: &Arc<Self>) -> RsaSlot {
        let (id, rx) = {
            let mut inner = self.lock();
            if inner.busy < inner.slots && inner.reconcile_waiting.is_empty() {
                inner.busy += 1;
                return self.slot(Kind::Reconcile);
            }
            let (tx, rx) = oneshot::channel();
            let id = inner.id();
            inner.reconcile_waiting.push_back((id, tx));
            (id, rx)
        };
        let mut guard = Waiting {
            pool: self,
            id,
            done: false,
        };
        // The sender lives in the queue until it is handed a slot; the pool outlives this.
        let _ = rx.await;
        guard.done = true;
        self.slot(Kind::Reconcile)
    }

    /// Admits one HTTP job for `client`, or refuses at once when the HTTP share and its
    /// queue are taken, or when `client` already has its share of jobs.
    pub fn admit_http(self: &Arc<Self>, client: Client) -> Result<HttpJob, Busy> {
        let mut inner = self.lock();
        let share = inner.http_share;
        if inner.http_jobs >= share + inner.http_queue
            || inner.per_client.get(&client).copied().unwrap_or(0) >= share
        {
            return Err(Busy);
        }
        inner.http_jobs += 1;
        *inner.per_client.entry(client).or_insert(0) += 1;
        Ok(HttpJob {
            pool: self.clone(),
            client,
        })
    }

    fn slot(self: &Arc<Self>, kind: Kind) -> RsaSlot {
        RsaSlot {
            pool: self.clone(),
            kind,
        }
    }
}

/// Gives back a slot handed to a reconcile that stopped waiting (its future was dropped).
struct Waiting<'a> {
    pool: &'a Arc<RsaPool>,
    id: u64,
    done: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut inner = self.pool.lock();
        let queued = inner
            .reconcile_waiting
            .iter()
            .position(|(i, _)| *i == self.id);
        match queued {
            Some(at) => {
                inner.reconcile_waiting.remove(at);
            }
            // Handed a slot it never took.
            None => inner.release(Kind::Reconcile),
        }
    }
}

/// A held slot; dropping it frees the slot for the next waiter.
#[derive(Debug)]
pub struct RsaSlot {
    pool: Arc<RsaPool>,
    kind: Kind,
}

impl Drop for RsaSlot {
    fn drop(&mut self) {
        self.pool.lock().release(self.kind);
    }
}

/// An admitted HTTP job; dropping it lets another in.
#[derive(Debug)]
pub struct HttpJob {
    pool: Arc<RsaPool>,
    client: Client,
}

impl HttpJob {
    /// Waits (blocking the thread: call it from the job's blocking thread) for a slot for
    /// one item, until `deadline`. Reconciles that wait, or arrive meanwhile, go first.
    pub fn slot(&self, deadline: Instant) -> Result<RsaSlot, Busy> {
        let pool = &self.pool;
        let (id, rx) = {
            let mut inner = pool.lock();
            if inner.busy < inner.slots
                && inner.http_busy < inner.http_share
                && inner.reconcile_waiting.is_empty()
                && inner.http_waiting.is_empty()
            {
                inner.busy += 1;
                inner.http_busy += 1;
                return Ok(pool.slot(Kind::Http));
            }
            let (tx, rx) = mpsc::sync_channel(1);
            let id = inner.id();
            inner.http_waiting.push_back((id, tx));
            (id, rx)
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        if rx.recv_timeout(wait).is_ok() {
            return Ok(pool.slot(Kind::Http));
        }
        let mut inner = pool.lock();
        match inner.http_waiting.iter().position(|(i, _)| *i == id) {
            Some(at) => {
                inner.http_waiting.remove(at);
                Err(Busy)
            }
            // Handed a slot just as the wait ended (under the lock, so it is in the channel).
            None => Ok(pool.slot(Kind::Http)),
        }
    }
}

impl Drop for HttpJob {
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        inner.http_jobs = inner.http_jobs.saturating_sub(1);
        if let Some(count) = inner.per_client.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                inner.per_client.remove(&self.client);
            }
        }
    }
}

/// How long an admitted HTTP job may wait for slots in all before it is answered 503.
pub const HTTP_WAIT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: u8) -> Client {
        Client::V4(std::net::Ipv4Addr::new(192, 0, 2, n))
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    #[test]
    fn the_http_share_is_half_the_slots_and_at_least_one() {
        for (slots, share, jobs) in [(1, 1, 3), (2, 1, 3), (4, 2, 6), (5, 2, 6), (16, 8, 24)] {
            let shape = RsaPool::with_cores(slots, 64).shape();
            assert_eq!(
                shape,
                Shape {
                    slots,
                    http_share: share,
                    http_jobs: jobs
                }
            );
        }
        // And at most half the CPUs.
        assert_eq!(RsaPool::with_cores(16, 2).shape().http_share, 1);
        assert_eq!(RsaPool::with_cores(16, 6).shape().http_share, 3);
        let pool = RsaPool::with_cores(4, 64);
        pool.configure(0);
        assert_eq!(pool.shape().slots, 1);
    }

    #[test]
    fn http_work_holds_at_most_its_share() {
        let pool = RsaPool::with_cores(4, 64);
        let a = pool.admit_http(client(1)).unwrap();
        let b = pool.admit_http(client(2)).unwrap();
        let s1 = a.slot(soon()).unwrap();
        let s2 = b.slot(soon()).unwrap();
        // Two of four slots are HTTP's share: a third item waits, then gives up.
        assert_eq!(a.slot(soon()).unwrap_err(), Busy);
        drop(s1);
        let s3 = a.slot(soon()).unwrap();
        drop((s2, s3));
    }

    #[test]
    fn admission_is_bounded_in_all_and_per_client() {
        let pool = RsaPool::with_cores(4, 64);
        let mine: Vec<_> = (0..2)
            .map(|_| pool.admit_http(client(1)).unwrap())
            .collect();
        // A client holds at most the HTTP share of jobs.
        assert_eq!(pool.admit_http(client(1)).unwrap_err(), Busy);
        let others: Vec<_> = (2..6)
            .map(|n| pool.admit_http(client(n)).unwrap())
            .collect();
        // Six jobs in all: the queue is full, whoever asks.
        assert_eq!(pool.admit_http(client(9)).unwrap_err(), Busy);
        drop(others);
        let again = pool.admit_http(client(9)).unwrap();
        drop((mine, again));
        assert_eq!(pool.lock().http_jobs, 0);
        assert!(pool.lock().per_client.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_reconcile_goes_before_waiting_http_items() {
        let pool = RsaPool::new(2);
        // Reconciles hold both slots.
        let r1 = pool.reconcile().await;
        let r2 = pool.reconcile().await;
        // An HTTP item waits on a blocking thread.
        let job = pool.admit_http(client(1)).unwrap();
        let http = tokio::task::spawn_blocking(move || {
            let slot = job.slot(Instant::now() + Duration::from_secs(20));
            (slot.is_ok(), job)
        });
        while pool.lock().http_waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // A reconcile arrives after it, and waits too.
        let waiting = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.reconcile().await })
        };
        while pool.lock().reconcile_waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // One slot frees: the reconcile gets it, the HTTP item still waits.
        drop(r1);
        let r3 = waiting.await.unwrap();
        assert_eq!(pool.lock().http_waiting.len(), 1);
        drop(r2);
        let (got, job) = http.await.unwrap();
        assert!(got);
        drop((r3, job));
        let inner = pool.lock();
        assert_eq!((inner.busy, inner.http_busy), (0, 0));
    }

    #[tokio::test]
    async fn a_cancelled_reconcile_wait_gives_its_slot_back() {
        let pool = RsaPool::new(1);
        let held = pool.reconcile().await;
        let wait = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.reconcile().await })
        };
        while pool.lock().reconcile_waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        wait.abort();
        let _ = wait.await;
        assert!(pool.lock().reconcile_waiting.is_empty());
        drop(held);
        // The slot is free again: neither lost nor held twice.
        let again = pool.reconcile().await;
        assert_eq!(pool.lock().busy, 1);
        drop(again);
        assert_eq!(pool.lock().busy, 0);
    }
}
