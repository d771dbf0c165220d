//! Transaction groups and the write throttle.
//!
//! Every change to a pool belongs to a transaction group (txg). A txg moves
//! through three states:
//!
//! ```text
//!   open ──(sync starts)──▶ quiescing ──(holds drained)──▶ syncing ──▶ synced
//!   new transactions        no new joiners; waits         written out by the
//!   join it                 for writers inside it         sync thread, then its
//!                                                         uberblock
//! ```
//!
//! A new txg opens the moment the previous one starts quiescing, so writers
//! never wait for a sync to finish unless the throttle tells them to. The sync
//! thread starts a sync when `zfs_txg_timeout` seconds have passed since the
//! previous sync *started*, when the open txg holds more than
//! `zfs_dirty_data_sync_percent` of `zfs_dirty_data_max`, or when someone waits
//! for a txg (fsync before the intent log exists, export, tests).
//!
//! ## Dirty data and the write throttle
//! Dirtying a block adds its logical size to its txg's and the pool's dirty
//! total; each physical write retires its block's bytes the moment it
//! completes, not at the end of the txg, so the total falls smoothly while a
//! sync runs. Before joining a txg a writer passes the throttle:
//!
//! ```text
//!  delay                       delay = zfs_delay_scale × (dirty − min) / (max − dirty)
//!  100ms ┤                  ┃  min = zfs_delay_min_dirty_percent (60 %) of max
//!        │                  ┃  capped at zfs_delay_max_ns (100 ms); at max, writers
//!   10ms ┤                 ╱┃  block until dirty data retires
//!        │               ╱  ┃
//!    1ms ┤           ___╱   ┃
//!        │     _____╱       ┃
//!      0 ┼━━━━━┷━━━━━━━━━━━━┫
//!        0%   60%   80%  95% 100%  dirty / zfs_dirty_data_max
//! ```
//!
//! Concurrent writers are spaced one delay apart: each computes
//! `wakeup = max(start + delay, last_wakeup + delay)` under a lock and sleeps
//! until then, so N threads get the same total rate as one (an inverse-IOPS
//! limit), and a writer is delayed at most once per transaction. Under a
//! steady overload the dirty level settles where the delay matches the
//! device's drain rate instead of swinging to the hard limit. Counters:
//! `delayed` (OpenZFS dmu_tx_dirty_delay) and `over_max` (dmu_tx_dirty_over_max).
//!
//! Invariants (checked by [`TxgEngine::check_invariants`]):
//! - synced < open, and at most one txg is quiescing or syncing;
//! - the pool's dirty total equals the sum of the per-txg totals;
//! - only the open txg takes new holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, ErrorKind, Result};
use crate::tunables::Tunables;

thread_local! {
    /// Set while this thread serves an administrative request
    /// (`FailFast`): it never waits out a suspension.
    static FAIL_FAST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While held, transactions and sync waits of this thread fail at once on
/// a suspended pool even with `failmode=wait`. The daemon holds one while
/// it serves a request: an administrative command that waited for `pool
/// clear` would hold the daemon's state lock that `pool clear` needs.
/// Only the file systems' writers wait.
pub struct FailFast {
    was: bool,
}

impl FailFast {
    pub fn new() -> FailFast {
        FailFast { was: FAIL_FAST.with(|f| f.replace(true)) }
    }
}

impl Default for FailFast {
    fn default() -> Self {
        FailFast::new()
    }
}

impl Drop for FailFast {
    fn drop(&mut self) {
        FAIL_FAST.with(|f| f.set(self.was));
    }
}

/// Per-txg arrays are indexed by txg & TXG_MASK (OpenZFS TXG_SIZE = 4).
pub const TXG_SIZE: usize = 4;
const TXG_MASK: u64 = TXG_SIZE as u64 - 1;

/// The throttle's and the sync trigger's view of the tunables.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleParams {
    pub dirty_max: u64,
    pub delay_min_percent: u32,
    pub delay_scale_ns: u64,
    pub delay_max_ns: u64,
    pub sync_percent: u32,
    pub txg_timeout: Duration,
}

impl ThrottleParams {
    pub fn from_tunables(t: &Tunables) -> Self {
        ThrottleParams {
            dirty_max: t.zfs_dirty_data_max,
            delay_min_percent: t.zfs_delay_min_dirty_percent,
            delay_scale_ns: t.zfs_delay_scale,
            delay_max_ns: t.zfs_delay_max_ns,
            sync_percent: t.zfs_dirty_data_sync_percent,
            txg_timeout: Duration::from_secs(t.zfs_txg_timeout),
        }
    }

    /// The delay for a transaction at `dirty` bytes (the curve above).
    pub fn delay_ns(&self, dirty: u64) -> u64 {
        let min = self.dirty_max / 100 * self.delay_min_percent as u64;
        if dirty <= min {
            return 0;
        }
        if dirty >= self.dirty_max {
            return self.delay_max_ns;
        }
        let num = self.delay_scale_ns as u128 * (dirty - min) as u128;
        let d = num / (self.dirty_max - dirty) as u128;
        d.min(self.delay_max_ns as u128) as u64
    }
}

#[derive(Debug, Default)]
pub struct ThrottleStats {
    /// Transactions that slept on the delay curve.
    pub delayed: AtomicU64,
    /// Transactions that found dirty data at the hard limit.
    pub over_max: AtomicU64,
    /// Total nanoseconds slept by delayed transactions.
    pub delay_ns_total: AtomicU64,
    /// Writers waiting now on a suspended pool (`failmode=wait`).
    pub failmode_blocked: AtomicU64,
}

struct State {
    open: u64,
    quiescing: Option<u64>,
    syncing: Option<u64>,
    synced: u64,
    holds: [u64; TXG_SIZE],
    dirty: [u64; TXG_SIZE],
    dirty_total: u64,
    /// Highest txg someone is waiting to see synced.
    wanted: u64,
    kicked: bool,
    last_sync_start: Instant,
    shutdown: bool,
    /// Set when a sync failed or a device faulted (`suspend`): the pool
    /// takes no more writes. A failed sync's reason (the txg, the
    /// operation) replaces a fault's; after that the reason stays.
    failed: Option<String>,
    failed_by_sync: bool,
    /// The pool's `failmode` is `wait`: while a device fault suspends it
    /// (resumable by `pool clear`), writers block instead of failing (sync
    /// waiters — fsync — still fail); a failed sync, which nothing
    /// resumes, fails them too.
    /// Off for `continue`, and once the pool closes (`give_up_waiting`).
    wait_on_fault: bool,
    /// The sync under way waits for a device (writes parked in its leaf):
    /// it ends only with `resume` or the pool's close.
    sync_parked: bool,
    /// Dirty bytes of the syncing txg when its sync began, and, once it
    /// failed, how many of them had been written (lost all the same: no
    /// uberblock names them).
    syncing_dirty0: u64,
    lost_written: u64,
    /// Per txg slot: when it opened, how long it took to quiesce, and the
    /// transactions that were delayed or stalled at the limit joining it.
    opened_at: [Instant; TXG_SIZE],
    open_ns: [u64; TXG_SIZE],
    quiesce_ns: [u64; TXG_SIZE],
    delayed: [u64; TXG_SIZE],
    stalled: [u64; TXG_SIZE],
    /// Per txg slot: transactions that joined it (any change at all).
    joined: [u64; TXG_SIZE],
}

/// How one txg spent its time before syncing, and what the throttle did to
/// its writers.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TxgTiming {
    /// Milliseconds the txg was open (accepting writers).
    pub open_ms: f64,
    /// Milliseconds it waited for its last writers after closing.
    pub quiesce_ms: f64,
    /// Transactions delayed by the throttle, and stalled at the dirty limit.
    pub delayed: u64,
    pub stalled: u64,
}

/// What a suspended pool cannot write (`TxgEngine::lost`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lost {
    /// The last txg on disk.
    pub synced: u64,
    /// The txgs whose changes are lost: `first ..= last` (empty when
    /// `last < first`: nothing was changed after the last sync).
    pub first: u64,
    pub last: u64,
    /// Bytes of changes they held.
    pub dirty_bytes: u64,
}

/// The txg state machine, dirty accounting and throttle of one pool.
pub struct TxgEngine {
    pool: String,
    st: Mutex<State>,
    /// Wakes the sync thread and txg waiters.
    cv: Condvar,
    /// Wakes writers blocked at the dirty limit.
    dirty_cv: Condvar,
    last_wakeup: Mutex<Instant>,
    params: Mutex<ThrottleParams>,
    /// Lock-free copy of the dirty total, read on every I/O issue.
    dirty_total: AtomicU64,
    /// Dirty bytes whose blocks the sync has allocated but whose writes
    /// have not landed: the pool's free space no longer counts them, so
    /// space checks must not count them as still to be allocated.
    placed: AtomicU64,
    pub stats: ThrottleStats,
}

/// A writer's membership of a txg; the txg cannot finish quiescing until it is
/// released (by `TxgEngine::release`).
#[derive(Debug)]
pub struct TxHold {
    pub txg: u64,
}

impl TxgEngine {
    /// `last_synced` is the txg of the uberblock the pool opened at.
    pub fn new(pool: &str, last_synced: u64, params: ThrottleParams) -> Self {
        let now = Instant::now();
        TxgEngine {
            pool: pool.to_string(),
            st: Mutex::new(State {
                open: last_synced + 1,
                quiescing: None,
                syncing: None,
                synced: last_synced,
                holds: [0; TXG_SIZE],
                dirty: [0; TXG_SIZE],
                dirty_total: 0,
                wanted: 0,
                kicked: false,
                last_sync_start: now,
                shutdown: false,
                failed: None,
                failed_by_sync: false,
                wait_on_fault: false,
                sync_parked: false,
                syncing_dirty0: 0,
                lost_written: 0,
                opened_at: [now; TXG_SIZE],
                open_ns: [0; TXG_SIZE],
                quiesce_ns: [0; TXG_SIZE],
                delayed: [0; TXG_SIZE],
                stalled: [0; TXG_SIZE],
                joined: [0; TXG_SIZE],
            }),
            cv: Condvar::new(),
            dirty_cv: Condvar::new(),
            last_wakeup: Mutex::new(now),
            params: Mutex::new(params),
            dirty_total: AtomicU64::new(0),
            placed: AtomicU64::new(0),
            stats: ThrottleStats::default(),
        }
    }

    pub fn set_params(&self, p: ThrottleParams) {
        *self.params.lock() = p;
        // A raised limit may release writers blocked at the old one.
        self.dirty_cv.notify_all();
    }

    pub fn params(&self) -> ThrottleParams {
        *self.params.lock()
    }

    pub fn dirty_total(&self) -> u64 {
        self.dirty_total.load(Ordering::Relaxed)
    }

    pub fn open_txg(&self) -> u64 {
        self.st.lock().open
    }

    pub fn synced_txg(&self) -> u64 {
        self.st.lock().synced
    }

    /// Whether a txg that has not finished syncing (open, quiescing or
    /// syncing) had any transaction join it: a sync would change the space
    /// figures writers check.
    pub fn unsynced_changes(&self) -> bool {
        let st = self.st.lock();
        let txgs = [Some(st.open), st.quiescing, st.syncing];
        txgs.into_iter().flatten().any(|t| st.joined[(t & TXG_MASK) as usize] > 0)
    }

    fn failed_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Suspended,
            format!("pool '{}' is suspended after an I/O failure: {}", self.pool, why),
        )
    }

    /// `failmode=wait` (true) or `continue` (false): see `State::wait_on_fault`.
    /// Writers blocked by `wait` are woken to fail when it becomes `continue`.
    pub fn set_failmode_wait(&self, wait: bool) {
        self.st.lock().wait_on_fault = wait;
        self.cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// The pool closes (or an administrator discards a suspended pool):
    /// whoever `failmode=wait` holds gets the suspension error now.
    pub fn give_up_waiting(&self) {
        self.set_failmode_wait(false);
    }

    /// Writers blocked by `failmode=wait` on a suspended pool right now.
    pub fn blocked_by_failmode(&self) -> u64 {
        self.stats.failmode_blocked.load(Ordering::Relaxed)
    }

    /// Whether a suspension makes callers wait for `pool clear` rather
    /// than fail: `failmode=wait`, a device fault (resumable) and the pool
    /// not closing — and the caller not an administrative request
    /// (`FailFast`).
    fn waits_out(st: &State) -> bool {
        st.wait_on_fault && !st.failed_by_sync && !st.shutdown && !FAIL_FAST.with(|f| f.get())
    }

    /// Joins the open txg after passing the write throttle. On a pool
    /// suspended by a device fault, fails at once (`failmode=continue`) or
    /// waits until `pool clear` resumes it or the pool closes (`wait`).
    pub fn assign(&self) -> Result<TxHold> {
        let start = Instant::now();
        let mut delayed = false;
        loop {
            let p = self.params();
            {
                let mut st = self.st.lock();
                if let Some(why) = &st.failed {
                    if !Self::waits_out(&st) {
                        return Err(self.failed_error(why));
                    }
                    self.stats.failmode_blocked.fetch_add(1, Ordering::Relaxed);
                    self.dirty_cv.wait_for(&mut st, Duration::from_millis(200));
                    self.stats.failmode_blocked.fetch_sub(1, Ordering::Relaxed);
                    continue;
                }
                if st.shutdown {
                    return Err(Error::new(ErrorKind::Busy, format!("pool '{}' is closing", self.pool)));
                }
                if st.dirty_total >= p.dirty_max {
                    self.stats.over_max.fetch_add(1, Ordering::Relaxed);
                    let i = (st.open & TXG_MASK) as usize;
                    st.stalled[i] += 1;
                    st.kicked = true;
                    self.cv.notify_all();
                    // Bounded wait: re-check params and failure at least every 100 ms.
                    self.dirty_cv.wait_for(&mut st, Duration::from_millis(100));
                    continue;
                }
                if delayed || st.dirty_total <= p.dirty_max / 100 * p.delay_min_percent as u64 {
                    let txg = st.open;
                    st.holds[(txg & TXG_MASK) as usize] += 1;
                    st.joined[(txg & TXG_MASK) as usize] += 1;
                    if delayed {
                        st.delayed[(txg & TXG_MASK) as usize] += 1;
                    }
                    return Ok(TxHold { txg });
                }
            }
            self.delay(start, &p);
            delayed = true;
        }
    }

    fn delay(&self, start: Instant, p: &ThrottleParams) {
        let d = p.delay_ns(self.dirty_total());
        if d == 0 {
            return;
        }
        let d = Duration::from_nanos(d);
        let wakeup = {
            let mut last = self.last_wakeup.lock();
            let w = (start + d).max(*last + d);
            *last = w;
            w
        };
        self.stats.delayed.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        if wakeup > now {
            self.stats.delay_ns_total.fetch_add((wakeup - now).as_nanos() as u64, Ordering::Relaxed);
            std::thread::sleep(wakeup - now);
        }
    }

    pub fn release(&self, hold: TxHold) {
        let mut st = self.st.lock();
        let i = (hold.txg & TXG_MASK) as usize;
        assert!(st.holds[i] > 0, "release of txg {} without a hold", hold.txg);
        st.holds[i] -= 1;
        if st.holds[i] == 0 && st.quiescing == Some(hold.txg) {
            self.cv.notify_all();
        }
    }

    /// Accounts `bytes` of newly dirtied data to `txg`.
    pub fn dirty_add(&self, txg: u64, bytes: u64) {
        let p = self.params();
        let mut st = self.st.lock();
        st.dirty[(txg & TXG_MASK) as usize] += bytes;
        st.dirty_total += bytes;
        self.dirty_total.store(st.dirty_total, Ordering::Relaxed);
        let open_dirty = st.dirty[(st.open & TXG_MASK) as usize];
        if open_dirty > p.dirty_max / 100 * p.sync_percent as u64 && !st.kicked {
            st.kicked = true;
            self.cv.notify_all();
        }
    }

    /// The sync allocated the block of `bytes` dirty bytes; they retire
    /// when its write lands (`dirty_retire`).
    pub fn dirty_placed(&self, bytes: u64) {
        self.placed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes back `dirty_placed` for bytes whose block will not be linked
    /// after all (a prewritten block the sync does not adopt).
    pub fn dirty_unplace(&self, bytes: u64) {
        let _ = self.placed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| Some(p.saturating_sub(bytes)));
    }

    /// Dirty bytes that still need space: those whose blocks are not
    /// allocated yet.
    pub fn dirty_unplaced(&self) -> u64 {
        self.dirty_total().saturating_sub(self.placed.load(Ordering::Relaxed))
    }

    /// Retires `bytes` of `txg`'s dirty data (a write completed).
    pub fn dirty_retire(&self, txg: u64, bytes: u64) {
        let _ = self.placed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| Some(p.saturating_sub(bytes)));
        let mut st = self.st.lock();
        let i = (txg & TXG_MASK) as usize;
        let b = bytes.min(st.dirty[i]);
        st.dirty[i] -= b;
        st.dirty_total -= b;
        self.dirty_total.store(st.dirty_total, Ordering::Relaxed);
        drop(st);
        self.dirty_cv.notify_all();
    }

    /// Dirty bytes still accounted to `txg`.
    pub fn dirty_of(&self, txg: u64) -> u64 {
        self.st.lock().dirty[(txg & TXG_MASK) as usize]
    }

    /// Asks for a sync soon (without waiting).
    pub fn kick(&self) {
        let mut st = self.st.lock();
        st.kicked = true;
        self.cv.notify_all();
    }

    /// Waits until `txg` (0: the currently open one) has synced.
    pub fn wait_synced(&self, txg: u64) -> Result<()> {
        let mut st = self.st.lock();
        let target = if txg == 0 { st.open } else { txg };
        st.wanted = st.wanted.max(target);
        self.cv.notify_all();
        while st.synced < target {
            // A sync under way when a device faulted stops before its
            // uberblock; waiting for it gives the caller its reason (the
            // txg, what failed) rather than the fault's alone — unless it
            // waits for the device (its writes parked: `sync_parked`).
            // Even with `failmode=wait`: only writers wait for `pool
            // clear`; an fsync returns the error (as OpenZFS's since 2.3).
            if let (Some(why), true) = (&st.failed, st.syncing.is_none() || st.sync_parked) {
                return Err(self.failed_error(why));
            }
            if st.shutdown {
                return Err(Error::new(ErrorKind::Busy, format!("pool '{}' is closing", self.pool)));
            }
            self.cv.wait_for(&mut st, Duration::from_millis(200));
        }
        Ok(())
    }

    /// Sync thread: waits until a sync is due, then closes the open txg, waits
    /// for its holders and returns it (now syncing). `has_work` says whether
    /// anything was changed in the open txg. None means shut down.
    pub fn next_sync(&self, has_work: &dyn Fn(u64) -> bool) -> Option<u64> {
        let mut st = self.st.lock();
        loop {
            if st.failed.is_some() {
                // Suspended. A failed sync is final, and a suspended pool
                // closes without writing; a device fault found between
                // syncs waits for `resume` (`pool clear`) — the thread
                // must outlive it, or nothing would sync after the clear.
                if st.failed_by_sync || st.shutdown {
                    return None;
                }
                self.cv.wait_for(&mut st, Duration::from_millis(200));
                continue;
            } else if st.shutdown && st.holds[(st.open & TXG_MASK) as usize] == 0 {
                // Shutting down: sync what is dirty once more, then stop.
                if !has_work(st.open) && st.wanted < st.open {
                    return None;
                }
            } else {
                let timeout = self.params().txg_timeout;
                let due = st.last_sync_start.elapsed() >= timeout;
                let want = st.wanted >= st.open || st.kicked;
                if !(want || due && has_work(st.open)) {
                    let wait = timeout.saturating_sub(st.last_sync_start.elapsed());
                    self.cv.wait_for(&mut st, wait.max(Duration::from_millis(1)));
                    continue;
                }
            }
            return Some(self.quiesce(&mut st));
        }
    }

    fn quiesce(&self, st: &mut parking_lot::MutexGuard<'_, State>) -> u64 {
        let txg = st.open;
        let now = Instant::now();
        st.kicked = false;
        st.last_sync_start = now;
        st.quiescing = Some(txg);
        st.open = txg + 1;
        let next = ((txg + 1) & TXG_MASK) as usize;
        st.opened_at[next] = now;
        st.quiesce_ns[next] = 0;
        st.delayed[next] = 0;
        st.stalled[next] = 0;
        st.joined[next] = 0;
        let i = (txg & TXG_MASK) as usize;
        st.open_ns[i] = now.saturating_duration_since(st.opened_at[i]).as_nanos() as u64;
        while st.holds[i] > 0 {
            self.cv.wait(st);
        }
        st.quiesce_ns[i] = now.elapsed().as_nanos() as u64;
        st.quiescing = None;
        st.syncing = Some(txg);
        st.syncing_dirty0 = st.dirty[i];
        txg
    }

    /// Sync thread: `txg` is on disk. Whatever dirty data is still accounted to
    /// it (blocks that became holes or were freed before being written) retires.
    pub fn sync_done(&self, txg: u64) {
        let mut st = self.st.lock();
        assert_eq!(st.syncing, Some(txg));
        let i = (txg & TXG_MASK) as usize;
        st.dirty_total -= st.dirty[i];
        st.dirty[i] = 0;
        self.dirty_total.store(st.dirty_total, Ordering::Relaxed);
        st.synced = txg;
        st.syncing = None;
        drop(st);
        self.cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// Sync thread: `txg` could not be written. The pool refuses further
    /// writes. The reason names the txg and what failed, so it replaces
    /// that of a device fault found meanwhile (`suspend`), which is why the
    /// sync failed.
    pub fn sync_failed(&self, txg: u64, why: String) {
        let mut st = self.st.lock();
        if !st.failed_by_sync {
            st.failed = Some(format!("txg {}: {}", txg, why));
            st.failed_by_sync = true;
        }
        let i = (txg & TXG_MASK) as usize;
        st.lost_written = st.syncing_dirty0.saturating_sub(st.dirty[i]);
        st.syncing = None;
        drop(st);
        self.cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// Suspends the pool because a device faulted: writers and waiters get
    /// `Suspended` from now on, and the sync thread stops before its next
    /// uberblock. The first fault's reason stays (until a failed sync's, or
    /// `note_sync_waits`).
    pub fn suspend(&self, why: String) {
        let mut st = self.st.lock();
        if st.failed.is_none() {
            st.failed = Some(why);
        }
        drop(st);
        self.cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// The sync of `txg` waits for `pool clear` after its step `why`
    /// failed (the uberblock write): the suspension's reason says so, as a
    /// failed sync's does, in place of the fault's. Nothing when the pool
    /// was resumed meanwhile.
    pub fn note_sync_waits(&self, txg: u64, why: &str) {
        let mut st = self.st.lock();
        if st.failed.is_some() && !st.failed_by_sync {
            st.failed = Some(format!("txg {}: {}", txg, why));
        }
    }

    /// Notes that the sync under way waits for a device (its failed
    /// writes parked): waiters get the suspension at once.
    pub fn note_sync_parked(&self) {
        self.st.lock().sync_parked = true;
        self.cv.notify_all();
    }

    /// Ends a suspension a device fault caused (`suspend`), the device
    /// being back (`pool clear`): writers and the sync go on. Refused with
    /// the reason when a sync failed: its txg cannot be written again.
    pub fn resume(&self) -> std::result::Result<(), String> {
        let mut st = self.st.lock();
        if st.failed_by_sync {
            return Err(st.failed.clone().unwrap_or_default());
        }
        st.failed = None;
        st.sync_parked = false;
        drop(st);
        self.cv.notify_all();
        self.dirty_cv.notify_all();
        Ok(())
    }

    /// What a suspended pool cannot write: every txg after the last synced
    /// one, and the dirty bytes they held (those of a failed sync counted
    /// whole, written or not). `None` while the pool is not suspended.
    pub fn lost(&self) -> Option<Lost> {
        let st = self.st.lock();
        st.failed.as_ref()?;
        let last = if st.dirty[(st.open & TXG_MASK) as usize] > 0 { st.open } else { st.open - 1 };
        // A sync still under way (it stops before its uberblock) has
        // retired what it wrote so far.
        let written = match st.syncing {
            Some(t) => st.syncing_dirty0.saturating_sub(st.dirty[(t & TXG_MASK) as usize]),
            None => st.lost_written,
        };
        Some(Lost { synced: st.synced, first: st.synced + 1, last: last.max(st.synced), dirty_bytes: st.dirty_total + written })
    }

    /// The open and quiesce times and throttle counts of `txg`, valid while
    /// it syncs (its slot is reused four txgs later).
    pub fn timing(&self, txg: u64) -> TxgTiming {
        let st = self.st.lock();
        let i = (txg & TXG_MASK) as usize;
        TxgTiming {
            open_ms: st.open_ns[i] as f64 / 1e6,
            quiesce_ms: st.quiesce_ns[i] as f64 / 1e6,
            delayed: st.delayed[i],
            stalled: st.stalled[i],
        }
    }

    /// The sync under way waits for `resume` (`pool clear`) before writing
    /// anything: true once resumed; false at once when the suspension is a
    /// failed sync's, or when the pool closes. Waiters meanwhile get the
    /// suspension's error (`sync_parked`).
    pub fn wait_resumed(&self) -> bool {
        let mut st = self.st.lock();
        st.sync_parked = true;
        self.cv.notify_all();
        loop {
            if st.failed.is_none() {
                return true;
            }
            if st.failed_by_sync || st.shutdown {
                return false;
            }
            self.cv.wait_for(&mut st, Duration::from_millis(200));
        }
    }

    /// Suspended by a device fault that `pool clear` can end (`resume`);
    /// false when not suspended or when a sync failed.
    pub fn resumable(&self) -> bool {
        let st = self.st.lock();
        st.failed.is_some() && !st.failed_by_sync
    }

    pub fn failure(&self) -> Option<String> {
        self.st.lock().failed.clone()
    }

    /// Asks the sync thread to write what is dirty and stop.
    pub fn shutdown(&self) {
        let mut st = self.st.lock();
        st.shutdown = true;
        drop(st);
        self.cv.notify_all();
        self.dirty_cv.notify_all();
    }

    /// (open, quiescing, syncing, synced) for status displays.
    pub fn states(&self) -> (u64, Option<u64>, Option<u64>, u64) {
        let st = self.st.lock();
        (st.open, st.quiescing, st.syncing, st.synced)
    }

    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let st = self.st.lock();
        if st.synced >= st.open {
            return Err(format!("synced txg {} >= open txg {}", st.synced, st.open));
        }
        if st.quiescing.is_some() && st.syncing.is_some() {
            return Err("a txg is quiescing while another syncs".into());
        }
        let sum: u64 = st.dirty.iter().sum();
        if sum != st.dirty_total {
            return Err(format!("dirty total {} != per-txg sum {}", st.dirty_total, sum));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn params(max: u64) -> ThrottleParams {
        ThrottleParams {
            dirty_max: max,
            delay_min_percent: 60,
            delay_scale_ns: 500_000,
            delay_max_ns: 100_000_000,
            sync_percent: 20,
            txg_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn delay_curve_matches_openzfs_figures() {
        let p = params(1000 << 20);
        let at = |pct: u64| p.delay_ns((1000u64 << 20) / 100 * pct);
        assert_eq!(at(50), 0);
        assert_eq!(at(60), 0);
        assert_eq!(at(80), 500_000); // 500 µs at 80 %
        assert_eq!(at(90), 1_500_000);
        assert_eq!(at(95), 3_500_000);
        assert_eq!(at(99), 19_500_000);
        assert_eq!(at(100), 100_000_000);
        assert_eq!(p.delay_ns(u64::MAX / 2), 100_000_000);
    }

    #[test]
    fn txg_lifecycle() {
        let t = Arc::new(TxgEngine::new("t", 4, params(64 << 20)));
        let h = t.assign().unwrap();
        assert_eq!(h.txg, 5);
        t.dirty_add(5, 4096);
        assert_eq!(t.dirty_total(), 4096);
        let t2 = t.clone();
        let syncer = std::thread::spawn(move || {
            t2.kick();
            let txg = t2.next_sync(&|_| true).unwrap();
            t2.dirty_retire(txg, 4096);
            t2.sync_done(txg);
            txg
        });
        std::thread::sleep(Duration::from_millis(20));
        // The sync cannot complete while we hold txg 5.
        assert_eq!(t.synced_txg(), 4);
        t.release(h);
        assert_eq!(syncer.join().unwrap(), 5);
        assert_eq!(t.synced_txg(), 5);
        assert_eq!(t.dirty_total(), 0);
        assert_eq!(t.assign().unwrap().txg, 6);
        t.check_invariants().unwrap();
    }

    #[test]
    fn delayed_writers_are_spaced() {
        let t = Arc::new(TxgEngine::new("t", 1, params(100 << 20)));
        // 80 % dirty → 500 µs each; 40 transactions from 4 threads ≈ 20 ms total.
        t.dirty_add(2, 80 << 20);
        let start = Instant::now();
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        let h = t.assign().unwrap();
                        t.release(h);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let el = start.elapsed();
        assert!(el >= Duration::from_millis(19), "40 delayed txs took only {:?}", el);
        assert_eq!(t.stats.delayed.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn hard_limit_blocks_until_retired() {
        let t = Arc::new(TxgEngine::new("t", 1, params(10 << 20)));
        t.dirty_add(2, 10 << 20);
        let t2 = t.clone();
        let w = std::thread::spawn(move || t2.assign().map(|h| h.txg));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!w.is_finished());
        t.dirty_retire(2, 10 << 20);
        assert_eq!(w.join().unwrap().unwrap(), 2);
        assert!(t.stats.over_max.load(Ordering::Relaxed) >= 1);
    }

    #[test]
    fn failure_suspends_writers() {
        let t = TxgEngine::new("t", 1, params(10 << 20));
        t.kick();
        let txg = t.next_sync(&|_| true).unwrap();
        t.sync_failed(txg, "device gone".into());
        let e = t.assign().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Suspended);
        assert!(e.msg.contains("device gone"));
        assert!(t.wait_synced(txg).is_err());
    }

    /// Pins: a device fault found between syncs (a failed log write)
    /// ended the sync thread's loop, so after `pool clear` resumed the pool
    /// nothing synced and every fsync waited forever. The loop now waits
    /// out a resumable suspension, and ends at a failed sync or the close.
    #[test]
    fn the_sync_loop_outlives_a_suspension_between_syncs() {
        let t = Arc::new(TxgEngine::new("t", 1, params(10 << 20)));
        let t2 = t.clone();
        let syncer = std::thread::spawn(move || {
            while let Some(txg) = t2.next_sync(&|_| true) {
                t2.sync_done(txg);
            }
        });
        t.suspend("disk gone".into());
        std::thread::sleep(Duration::from_millis(300));
        assert!(!syncer.is_finished(), "the sync thread waits for the clear");
        t.resume().unwrap();
        let hold = t.assign().unwrap();
        let txg = hold.txg;
        t.release(hold);
        t.wait_synced(txg).expect("a txg after the clear syncs");
        t.suspend("disk gone again".into());
        t.shutdown();
        syncer.join().unwrap();
    }

    /// failmode=wait: a writer on a pool a device fault suspended blocks
    /// until `resume` (pool clear), then joins the open txg.
    #[test]
    fn failmode_wait_blocks_writers_until_resume() {
        let t = Arc::new(TxgEngine::new("t", 1, params(10 << 20)));
        t.set_failmode_wait(true);
        t.suspend("disk gone".into());
        let t2 = t.clone();
        let w = std::thread::spawn(move || t2.assign().map(|h| h.txg));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!w.is_finished(), "the writer waits for clear");
        assert_eq!(t.blocked_by_failmode(), 1);
        t.resume().unwrap();
        assert_eq!(w.join().unwrap().unwrap(), 2);
        assert_eq!(t.blocked_by_failmode(), 0);
    }

    /// An administrative request (`FailFast`) fails at once under
    /// failmode=wait, as it would hold the daemon's lock `pool clear` needs;
    /// the guard's end restores waiting.
    #[test]
    fn failmode_wait_spares_administrative_requests() {
        let t = TxgEngine::new("t", 1, params(10 << 20));
        t.set_failmode_wait(true);
        t.suspend("disk gone".into());
        {
            let _admin = FailFast::new();
            assert_eq!(t.assign().unwrap_err().kind, ErrorKind::Suspended);
        }
        assert!(!FAIL_FAST.with(|f| f.get()), "the guard restores the thread's mode");
    }

    /// failmode=wait: closing the pool (or switching to continue) ends the
    /// wait with the suspension's error; a failed sync never waits.
    #[test]
    fn failmode_wait_gives_up_at_close_and_on_a_failed_sync() {
        let t = Arc::new(TxgEngine::new("t", 1, params(10 << 20)));
        t.set_failmode_wait(true);
        t.suspend("disk gone".into());
        let t2 = t.clone();
        let w = std::thread::spawn(move || t2.assign().map(|h| h.txg));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!w.is_finished());
        t.give_up_waiting();
        let e = w.join().unwrap().unwrap_err();
        assert!(e.kind == ErrorKind::Suspended && e.msg.contains("disk gone"), "{e:?}");

        let t = TxgEngine::new("t", 1, params(10 << 20));
        t.set_failmode_wait(true);
        t.kick();
        let txg = t.next_sync(&|_| true).unwrap();
        t.sync_failed(txg, "label write failed".into());
        assert_eq!(t.assign().unwrap_err().kind, ErrorKind::Suspended);
        assert!(t.wait_synced(txg).is_err());
    }
}
