//! One pool of RSA slots, shared by the reconciler and the HTTP API, that serves the
//! reconciler first.
//!
//! RSA private-key operations are the controller's CPU-heavy work. The pool has `slots`
//! (`--concurrency`) places; whoever holds one may run RSA work.
//!
//! - **Reconciles** hand their unseal to the pool as a job ([`RsaPool::unseal`]) and may use
//!   every slot. The pool's own threads (at most one per slot) run the jobs in order; a
//!   thread that finishes one takes the next queued job at once, so the slots stay busy
//!   without a round trip through the async runtime between two unseals. A free slot always
//!   goes to a queued reconcile job first.
//! - **HTTP jobs** (one verify or rotate request each) are first admitted
//!   ([`RsaPool::admit_http`]): at most `http_share + http_queue` jobs at once and at most
//!   `http_share` per client; beyond that the request is refused at once (the caller answers
//!   503 with `Retry-After`) instead of queueing. An admitted job then takes a slot **per
//!   item** ([`HttpJob::slot`]) on its own blocking thread, only while no reconcile job is
//!   queued and fewer than `http_share` (half the slots and half the CPUs, at least one) are
//!   held by HTTP work. So a reconcile that arrives while every slot is busy waits for at
//!   most one item's RSA work (the keys it may try), never for a whole request.
//!
//! **Why the reconciles' unseals run on threads of the pool** rather than each taking a slot
//! and then a thread of tokio's blocking pool: with the handover through the async runtime
//! (the freed slot woke the next reconcile's task, which started a blocking task, which woke
//! a blocking thread), a slot stood empty for a while after every unseal, longer whenever the
//! async threads were busy. A cold start on 2 cores left about 14 % of the CPUs idle
//! (`cargo bench --bench scale`, docs/benchmarks.md).

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::net::Client;

/// Slots of a pool before [`RsaPool::configure`] (`--concurrency`'s default).
pub(crate) const DEFAULT_SLOTS: usize = 4;
/// Admitted HTTP jobs that may wait, per slot of the HTTP share.
const QUEUE_PER_HTTP_SLOT: usize = 2;
/// Name of the pool's threads (as `top -H` and `/proc/PID/task/*/comm` show them).
const THREAD_NAME: &str = "kseal-rsa";

/// The pool; see the [module](self) documentation.
#[derive(Debug)]
pub struct RsaPool {
    shared: Arc<Shared>,
}

/// What the pool and its threads share.
#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    /// Signalled when a queued reconcile job may start (or the pool closes).
    work: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update keeps the counters consistent before it can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A reconcile's unseal, queued until a thread of the pool runs it.
type Job = Box<dyn FnOnce() + Send>;

struct Inner {
    /// CPUs of the machine (the HTTP share is at most half of them).
    cores: usize,
    slots: usize,
    http_share: usize,
    http_queue: usize,
    busy: usize,
    http_busy: usize,
    next_id: u64,
    /// Reconcile jobs waiting for a slot, oldest first.
    jobs: VecDeque<Job>,
    /// The pool's threads, and how many of them wait for a job.
    threads: usize,
    idle_threads: usize,
    /// The pool was dropped: its threads end.
    closed: bool,
    http_waiting: VecDeque<(u64, mpsc::SyncSender<()>)>,
    http_jobs: usize,
    per_client: HashMap<Client, usize>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("slots", &self.slots)
            .field("busy", &self.busy)
            .field("http_busy", &self.http_busy)
            .field("jobs", &self.jobs.len())
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

/// The HTTP share of the pool is taken: retry later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// A reconcile job did not finish: it panicked, or the pool could not start a thread for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

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

    /// Hands free slots out: to queued reconcile jobs first (waking idle threads of the pool
    /// for them), then to waiting HTTP items within their share, and to those only while no
    /// reconcile job is queued. An HTTP waiter that is gone still owns what it was handed.
    fn dispatch(&mut self, work: &Condvar) {
        let free = self.slots.saturating_sub(self.busy);
        for _ in 0..free.min(self.jobs.len()).min(self.idle_threads) {
            work.notify_one();
        }
        if !self.jobs.is_empty() {
            return;
        }
        while self.busy < self.slots && self.http_busy < self.http_share {
            let Some((_, tx)) = self.http_waiting.pop_front() else {
                break;
            };
            self.busy += 1;
            self.http_busy += 1;
            let _ = tx.send(());
        }
    }

    /// Gives back a slot HTTP work held.
    fn release_http(&mut self, work: &Condvar) {
        self.busy = self.busy.saturating_sub(1);
        self.http_busy = self.http_busy.saturating_sub(1);
        self.dispatch(work);
    }

    fn id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }
}

/// A thread of the pool: runs queued reconcile jobs while a slot is free, one after the
/// other without letting go of the slot in between, and waits otherwise. Ends when the pool
/// is dropped, or when it is one thread more than the slots.
fn run_jobs(shared: &Shared) {
    let mut inner = shared.lock();
    loop {
        if inner.closed || inner.threads > inner.slots {
            inner.threads -= 1;
            inner.dispatch(&shared.work);
            return;
        }
        if inner.busy < inner.slots
            && let Some(job) = inner.jobs.pop_front()
        {
            inner.busy += 1;
            drop(inner);
            // A panic ends the job, not the thread: the job's answer channel is dropped
            // with it, which its caller sees as `Failed`.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            inner = shared.lock();
            // The next queued job (if any) takes this slot on this thread, at once.
            inner.busy -= 1;
            continue;
        }
        // No job this thread may run: the slot it left goes to waiting HTTP items.
        inner.dispatch(&shared.work);
        inner.idle_threads += 1;
        inner = shared
            .work
            .wait(inner)
            .unwrap_or_else(PoisonError::into_inner);
        inner.idle_threads -= 1;
    }
}

impl RsaPool {
    /// A pool of `slots` slots (at least one) on this machine's CPUs.
    pub fn new(slots: usize) -> Arc<Self> {
        Self::with_cores(slots, crate::host::cpus())
    }

    /// A pool of `slots` slots for a machine with `cores` CPUs. Its threads start with the
    /// first reconcile job.
    pub fn with_cores(slots: usize, cores: usize) -> Arc<Self> {
        let (slots, http_share, http_queue) = Inner::shape(slots, cores);
        Arc::new(Self {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    cores,
                    slots,
                    http_share,
                    http_queue,
                    busy: 0,
                    http_busy: 0,
                    next_id: 0,
                    jobs: VecDeque::new(),
                    threads: 0,
                    idle_threads: 0,
                    closed: false,
                    http_waiting: VecDeque::new(),
                    http_jobs: 0,
                    per_client: HashMap::new(),
                }),
                work: Condvar::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.shared.lock()
    }

    /// Sets the number of slots (`--concurrency`, when the reconciler starts).
    pub fn configure(&self, slots: usize) {
        let mut inner = self.lock();
        (inner.slots, inner.http_share, inner.http_queue) = Inner::shape(slots, inner.cores);
        inner.dispatch(&self.shared.work);
        // Threads beyond the new number of slots end when they next look for work.
        self.shared.work.notify_all();
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

    /// Runs a reconcile's unseal `work` on a thread of the pool, in a slot, ahead of every
    /// HTTP item, and returns what it returned. Cancel-safe: a job whose caller stopped
    /// waiting is skipped if it has not started.
    ///
    /// # Errors
    /// [`Failed`] when `work` panicked, or when no thread could be started to run it.
    pub async fn unseal<T, F>(&self, work: F) -> Result<T, Failed>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            if !tx.is_closed() {
                let _ = tx.send(work());
            }
        });
        let start_thread = {
            let mut inner = self.lock();
            inner.jobs.push_back(job);
            let start = inner.idle_threads == 0 && inner.threads < inner.slots;
            if start {
                inner.threads += 1;
            }
            inner.dispatch(&self.shared.work);
            start
        };
        if start_thread {
            let shared = self.shared.clone();
            let started = std::thread::Builder::new()
                .name(THREAD_NAME.to_owned())
                .spawn(move || run_jobs(&shared));
            if started.is_err() {
                let mut inner = self.lock();
                inner.threads -= 1;
                if inner.threads == 0 {
                    // Nothing would ever run the queued jobs: their callers fail instead.
                    inner.jobs.clear();
                }
            }
        }
        rx.await.map_err(|_| Failed)
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

    fn http_slot(self: &Arc<Self>) -> RsaSlot {
        RsaSlot { pool: self.clone() }
    }
}

impl Drop for RsaPool {
    fn drop(&mut self) {
        let mut inner = self.lock();
        inner.closed = true;
        // Their callers see `Failed`.
        inner.jobs.clear();
        self.shared.work.notify_all();
    }
}

/// A slot held by HTTP work; dropping it frees the slot for the next waiter.
#[derive(Debug)]
pub struct RsaSlot {
    pool: Arc<RsaPool>,
}

impl Drop for RsaSlot {
    fn drop(&mut self) {
        self.pool.lock().release_http(&self.pool.shared.work);
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
    /// one item, until `deadline`. Queued reconcile jobs, and those queued meanwhile, go
    /// first.
    pub fn slot(&self, deadline: Instant) -> Result<RsaSlot, Busy> {
        let pool = &self.pool;
        let (id, rx) = {
            let mut inner = pool.lock();
            if inner.busy < inner.slots
                && inner.http_busy < inner.http_share
                && inner.jobs.is_empty()
                && inner.http_waiting.is_empty()
            {
                inner.busy += 1;
                inner.http_busy += 1;
                return Ok(pool.http_slot());
            }
            let (tx, rx) = mpsc::sync_channel(1);
            let id = inner.id();
            inner.http_waiting.push_back((id, tx));
            (id, rx)
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        if rx.recv_timeout(wait).is_ok() {
            return Ok(pool.http_slot());
        }
        let mut inner = pool.lock();
        match inner.http_waiting.iter().position(|(i, _)| *i == id) {
            Some(at) => {
                inner.http_waiting.remove(at);
                Err(Busy)
            }
            // Handed a slot just as the wait ended (under the lock, so it is in the channel).
            None => Ok(pool.http_slot()),
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
pub(crate) const HTTP_WAIT: Duration = Duration::from_secs(10);

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

    /// A job that holds its slot until `gate` is opened (or dropped), then returns `value`.
    fn gated(
        pool: &Arc<RsaPool>,
        value: u32,
    ) -> (
        tokio::task::JoinHandle<Result<u32, Failed>>,
        mpsc::Sender<()>,
    ) {
        let (gate, wait) = mpsc::channel::<()>();
        let pool = pool.clone();
        let job = tokio::spawn(async move {
            pool.unseal(move || {
                let _ = wait.recv();
                value
            })
            .await
        });
        (job, gate)
    }

    async fn until(pool: &RsaPool, what: impl Fn(&Inner) -> bool) {
        while !what(&pool.lock()) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_reconcile_job_goes_before_waiting_http_items() {
        let pool = RsaPool::new(2);
        // Reconcile jobs hold both slots.
        let (r1, g1) = gated(&pool, 1);
        let (r2, g2) = gated(&pool, 2);
        until(&pool, |i| i.busy == 2).await;
        // An HTTP item waits on a blocking thread.
        let job = pool.admit_http(client(1)).unwrap();
        let http = tokio::task::spawn_blocking(move || {
            let slot = job.slot(Instant::now() + Duration::from_secs(20));
            (slot.is_ok(), job)
        });
        until(&pool, |i| i.http_waiting.len() == 1).await;
        // A reconcile job arrives after it, and is queued.
        let (r3, g3) = gated(&pool, 3);
        until(&pool, |i| i.jobs.len() == 1).await;
        // One slot frees: the reconcile job takes it, the HTTP item still waits.
        drop(g1);
        assert_eq!(r1.await.unwrap(), Ok(1));
        until(&pool, |i| i.jobs.is_empty() && i.busy == 2).await;
        assert_eq!(pool.lock().http_waiting.len(), 1);
        assert_eq!(pool.lock().http_busy, 0);
        // The next slot to free, with no reconcile job queued, goes to the HTTP item.
        drop(g2);
        assert_eq!(r2.await.unwrap(), Ok(2));
        let (got, job) = http.await.unwrap();
        assert!(got);
        drop(g3);
        assert_eq!(r3.await.unwrap(), Ok(3));
        drop(job);
        until(&pool, |i| i.busy == 0).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_job_does_not_run_and_its_slot_is_not_lost() {
        let pool = RsaPool::new(1);
        let (held, gate) = gated(&pool, 1);
        until(&pool, |i| i.busy == 1).await;
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let wait = {
            let (pool, ran) = (pool.clone(), ran.clone());
            tokio::spawn(async move {
                pool.unseal(move || ran.store(true, std::sync::atomic::Ordering::SeqCst))
                    .await
            })
        };
        until(&pool, |i| i.jobs.len() == 1).await;
        wait.abort();
        let _ = wait.await;
        drop(gate);
        assert_eq!(held.await.unwrap(), Ok(1));
        // The slot is free again: neither lost nor held twice, and the abandoned job was
        // skipped.
        assert_eq!(pool.unseal(|| 7).await, Ok(7));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        until(&pool, |i| i.busy == 0 && i.jobs.is_empty()).await;
    }

    #[tokio::test]
    async fn a_panicking_job_fails_its_caller_and_the_pool_goes_on() {
        let pool = RsaPool::new(1);
        let failed: Result<(), Failed> = pool.unseal(|| panic!("a job's panic")).await;
        assert_eq!(failed, Err(Failed));
        assert_eq!(pool.unseal(|| 7).await, Ok(7));
        until(&pool, |i| i.busy == 0 && i.threads == 1).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn no_more_jobs_run_at_once_than_slots_and_no_more_threads_start() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let pool = RsaPool::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..12)
            .map(|n| {
                let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    pool.unseal(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
                        running.fetch_sub(1, Ordering::SeqCst);
                        n
                    })
                    .await
                })
            })
            .collect();
        for (n, job) in jobs.into_iter().enumerate() {
            assert_eq!(job.await.unwrap(), Ok(n));
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert!(pool.lock().threads <= 2, "{:?}", pool.lock());
        // Fewer slots: the thread beyond them ends.
        pool.configure(1);
        until(&pool, |i| i.threads <= 1).await;
        assert_eq!(pool.unseal(|| 1).await, Ok(1));
    }

    #[tokio::test]
    async fn dropping_the_pool_ends_its_threads() {
        let pool = RsaPool::new(2);
        assert_eq!(pool.unseal(|| 1).await, Ok(1));
        let shared = pool.shared.clone();
        assert_eq!(shared.lock().threads, 1);
        drop(pool);
        while shared.lock().threads > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(shared.lock().closed);
    }
}
