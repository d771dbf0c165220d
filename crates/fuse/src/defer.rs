//! Requests that wait for the disk without holding a worker: `FSYNC` and
//! `FSYNCDIR` are answered from a thread of this pool, not from the
//! session's worker that read them.
//!
//! ## Why
//! A mount has a few workers (four: a session and its threads exist for
//! every mount, and there may be tens of thousands). An fsync waits for the
//! intent log's round that holds its records — a log write and a device
//! flush — and a worker running it could read nothing else meanwhile. With
//! eight processes each writing and fsyncing, four workers blocked in
//! fsync left none to take the others' WRITEs and FSYNCs: a round could
//! carry at most three commits, whatever the number of writers (measured:
//! 2.1 commits a round with eight fio jobs). The intent log shares a round
//! among all the commits waiting when it starts, so the more fsyncs wait at
//! once, the fewer rounds and flushes each costs.
//!
//! ## How
//! The handler moves the request's reply (fuser's replies may be sent from
//! any thread) and what it needs into a job; a process-wide pool runs it.
//! A job never waits for a thread while a thread could be made: the pool
//! starts one whenever none is idle, up to [`MAX_THREADS`]; beyond that,
//! jobs queue in arrival order. Threads idle for [`IDLE_EXIT`] end, so a
//! quiet daemon keeps none. A job that cannot get a thread (the system
//! refuses one and none exists) runs on the caller's thread: slower, never
//! lost.
//!
//! A lone fsyncer should not pay the hand-over (a thread woken, a few tens
//! of microseconds on these machines): one worker of a mount at a time
//! (when the mount has another) waits in the fsync itself ([`Inline`]);
//! fsyncs past that go to the pool, leaving the other workers to the
//! WRITEs and SETATTRs that concurrent fsyncs wait for.
//!
//! Each mount counts its jobs not yet finished ([`Outstanding`]): unmount
//! waits for them after the session ends, before it syncs and closes the
//! file systems, so no job runs on a file system being closed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Threads the pool may run at once (every mount's jobs together). Each
/// holds one waiting request; the kernel bounds how many requests a
/// mount may have outstanding by the processes that wait on them.
pub const MAX_THREADS: usize = 256;

/// How long an idle pool thread waits for work before it ends.
pub const IDLE_EXIT: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

struct Pool {
    st: Mutex<State>,
    cv: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool { st: Mutex::new(State { queue: VecDeque::new(), threads: 0, idle: 0 }), cv: Condvar::new() })
}

/// Runs `job` on a pool thread, counted in `outstanding` until it returns.
pub fn run(outstanding: &std::sync::Arc<Outstanding>, job: impl FnOnce() + Send + 'static) {
    outstanding.add();
    let out = outstanding.clone();
    let job: Job = Box::new(move || {
        let _done = Done(&out);
        job();
    });
    let p = pool();
    let mut st = p.st.lock();
    st.queue.push_back(job);
    if st.idle >= st.queue.len() || st.threads >= MAX_THREADS {
        // An idle thread takes it, or it waits for the first one free.
        p.cv.notify_one();
        return;
    }
    st.threads += 1;
    drop(st);
    if let Err(e) = std::thread::Builder::new().name("tarn-fuse-wait".into()).spawn(serve) {
        let mut st = p.st.lock();
        st.threads -= 1;
        if st.threads == 0 {
            // No thread will take it: answer on the caller's thread.
            let job = st.queue.pop_front();
            drop(st);
            eprintln!("tarn: cannot start a thread for a waiting request ({e}); answering it on the worker");
            if let Some(j) = job {
                j();
            }
        }
    }
}

/// A pool thread: runs queued jobs until idle too long.
fn serve() {
    let p = pool();
    let mut st = p.st.lock();
    loop {
        if let Some(j) = st.queue.pop_front() {
            drop(st);
            j();
            st = p.st.lock();
            continue;
        }
        st.idle += 1;
        let timed_out = p.cv.wait_for(&mut st, IDLE_EXIT).timed_out();
        st.idle -= 1;
        if timed_out && st.queue.is_empty() {
            st.threads -= 1;
            return;
        }
    }
}

/// A worker waiting in a request itself, while fewer than a bound do
/// (`enter`); the others go to the pool.
pub struct Inline<'a>(&'a AtomicUsize);

impl<'a> Inline<'a> {
    /// Counts one more worker waiting in `busy` if fewer than `max` do.
    pub fn enter(busy: &'a AtomicUsize, max: usize) -> Option<Inline<'a>> {
        busy.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).ok().map(|_| Inline(busy))
    }
}

impl Drop for Inline<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A mount's jobs not yet finished.
#[derive(Default)]
pub struct Outstanding {
    n: Mutex<usize>,
    cv: Condvar,
}

impl Outstanding {
    fn add(&self) {
        *self.n.lock() += 1;
    }

    /// Jobs not yet finished.
    pub fn count(&self) -> usize {
        *self.n.lock()
    }

    /// Waits until every job has finished, at most `limit`; whether they have.
    pub fn wait_none(&self, limit: Duration) -> bool {
        let mut n = self.n.lock();
        let deadline = std::time::Instant::now() + limit;
        while *n > 0 {
            if self.cv.wait_until(&mut n, deadline).timed_out() {
                return *n == 0;
            }
        }
        true
    }
}

struct Done<'a>(&'a Outstanding);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let mut n = self.0.n.lock();
        *n -= 1;
        if *n == 0 {
            self.0.cv.notify_all();
        }
    }
}
