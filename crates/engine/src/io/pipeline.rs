//! Issuing I/O to leaf devices.
//!
//! Each leaf device has a [`VdevQueue`] (the scheduler) and a fixed set of
//! issue threads. A caller enqueues a read or write with its I/O class; every
//! thread loops taking the next [`Issue`] the scheduler allows — which may be
//! several adjacent requests merged into one — performing it with one
//! positional scatter/gather system call, and reporting completion. Because the
//! device calls are synchronous, the number of operations truly in flight is
//! the number of threads inside a device call, which the scheduler bounds per
//! class; `tarn_vdev_threads` bounds the total.
//!
//! Writes are grouped: the txg sync enqueues every block of a txg into one
//! [`WriteGroup`] and waits for the group. Each completed write calls the
//! group's callback with the dirty bytes its block carried, which is how dirty
//! data retires the moment its physical write lands (the write throttle depends
//! on that). Reads wait on a [`ReadSlot`] for their own buffer.
//!
//! Invariants: every enqueued request completes exactly once (success or
//! error), including when the leaf shuts down; a thread never holds the queue
//! lock during a device call.
//!
//! # Faults
//!
//! A leaf is online until something shows its device cannot keep what is
//! written to it; then it is faulted for good (the first reason stays) and
//! its fault hook runs once (the pool suspends when the leaf's top-level
//! vdev can no longer take writes). What faults it, as OpenZFS's
//! vdev_file/vdev_disk fault a vdev on errors its probe confirms:
//! - a failed write or cache flush (EIO, EROFS, ENOSPC of the file system
//!   under an image file …): `FAULTED` with the error, or what the device's
//!   `health()` says when that is more precise (a removed device);
//! - a failed read or a checksum error when the device's `health()` is not
//!   online (a truncated file reads short or zeros); a read error on a
//!   healthy device is a bad sector: counted, not a fault;
//! - `check()` finding it unhealthy (the sync thread asks before every
//!   uberblock).
//!
//! A failed write faults the leaf (and runs the hook) before its group
//! hears of the failure: whoever waits for it finds the pool already
//! suspended. Then its fate is decided, the leaf already down:
//! - tolerated — its group completes without error — when the block is
//!   held without this leaf (`Leaf::set_served_hook`: the leaf's top-level
//!   vdev still holds the txg being synced: a mirror with another child up
//!   that did not miss it, RAID-Z with no more children down or behind
//!   than parity); the leaf's DTL records the txg and resilver repairs it
//!   later;
//! - else parked (`Leaf::set_park_failed_writes`, a group that may wait):
//!   kept, its group not completed, so the txg being synced is neither
//!   written nor lost until `pool clear` queues it again (`resume_parked`)
//!   or the pool closes (`fail_parked`);
//! - else failed (an intent-log write, which has a fallback).
//!
//! Deciding after the fault is what keeps a block from being dropped by
//! every child: faults stay until `pool clear` (and a leaf it takes back
//! keeps the txg in its DTL), so of the children that fail one block's
//! writes, the last to decide sees all the others down or behind, and a
//! mirror's last child (RAID-Z's child past parity) parks. `Vdev::write`
//! skips children that are down by the same rule, keeping the block on
//! them without issuing it (`Leaf::hold`) when the vdev may lack the txg.
//!
//! A write that fails on the device the leaf had before a `reopen` (`pool
//! clear` took it back while the write was under way) is queued again,
//! neither faulting the leaf nor parked where the clear's `resume_parked`
//! has already been.
//!
//! # Injected faults
//!
//! Every device call — queued reads and writes, direct writes, flushes —
//! and every health check passes the leaf's injection handlers first
//! (`inject`, `tarn inject`): they may fail the call without reaching the
//! device, damage what a read returns, delay it, or answer the health
//! check as a removed device. What follows is the path above, unchanged:
//! an injected write error faults the leaf as a real one does.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::inject::{LeafInjections, Op};
use super::queue::{IoClass, IoKind, Issue, QueueLimits, QueueStats, QueuedIo, VdevQueue};
use super::stats::LeafIo;
use crate::sys::buf::AlignedBuf;
use crate::sys::device::{BlockDevice, Health};

/// Completion of a set of writes.
pub struct WriteGroup {
    st: Mutex<(u64, Option<String>)>,
    cv: Condvar,
    on_written: Option<Box<dyn Fn(u64) + Send + Sync>>,
    /// Failed writes may be parked (`Leaf::set_park_failed_writes`): not
    /// for writers that have a fallback and must not wait for a device
    /// (intent-log blocks).
    parks: bool,
}

impl WriteGroup {
    /// `on_written(bytes)` runs as each write completes successfully, with the
    /// dirty bytes that write retires.
    pub fn new(on_written: Option<Box<dyn Fn(u64) + Send + Sync>>) -> Arc<Self> {
        Arc::new(WriteGroup { st: Mutex::new((0, None)), cv: Condvar::new(), on_written, parks: true })
    }

    /// A group whose failed writes fail it at once, never parked.
    pub fn unparked() -> Arc<Self> {
        Arc::new(WriteGroup { st: Mutex::new((0, None)), cv: Condvar::new(), on_written: None, parks: false })
    }

    fn add(&self) {
        self.st.lock().0 += 1;
    }

    fn done(&self, res: &io::Result<()>, retire: u64, what: &dyn Fn() -> String) {
        if res.is_ok() {
            if let Some(f) = &self.on_written {
                f(retire);
            }
        }
        let mut st = self.st.lock();
        if let Err(e) = res {
            st.1.get_or_insert_with(|| format!("{}: {}", what(), e));
        }
        st.0 -= 1;
        if st.0 == 0 {
            self.cv.notify_all();
        }
    }

    /// Retires `retire` dirty bytes of a block no device took (every child
    /// of its mirror is down): the write is not done, and the sync's device
    /// check, not the group, stops the txg.
    pub fn retire_unwritten(&self, retire: u64) {
        if let Some(f) = &self.on_written {
            f(retire);
        }
    }

    /// Fails the group without a write (a vdev that cannot take the block).
    pub fn fail(&self, why: String) {
        self.st.lock().1.get_or_insert(why);
    }

    /// Waits for every write of the group; the first error if any failed.
    pub fn wait(&self) -> Result<(), String> {
        let mut st = self.st.lock();
        while st.0 > 0 {
            self.cv.wait(&mut st);
        }
        match &st.1 {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// Where a read's data arrives.
pub struct ReadSlot {
    res: Mutex<Option<io::Result<AlignedBuf>>>,
    cv: Condvar,
}

impl ReadSlot {
    fn new() -> Arc<Self> {
        Arc::new(ReadSlot { res: Mutex::new(None), cv: Condvar::new() })
    }
    fn fill(&self, r: io::Result<AlignedBuf>) {
        *self.res.lock() = Some(r);
        self.cv.notify_all();
    }
    fn wait(&self) -> io::Result<AlignedBuf> {
        let mut g = self.res.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// Called on an issue thread with a completed read's data.
pub type ReadDone = Box<dyn FnOnce(io::Result<AlignedBuf>) + Send>;

enum Req {
    /// Writes `buf[range]` (a RAID-Z data column is a run of its block's
    /// buffer, written without a copy).
    Write { buf: Arc<AlignedBuf>, range: Range<usize>, group: Arc<WriteGroup>, retire: u64 },
    Read { slot: Arc<ReadSlot> },
    ReadThen { done: ReadDone },
}

/// A write that failed on a leaf that parks its failed writes (see
/// `Leaf::set_park_failed_writes`): kept, its group not completed, until
/// the leaf is back (`resume_parked`) or the pool gives up (`fail_parked`).
struct Parked {
    offset: u64,
    buf: Arc<AlignedBuf>,
    range: Range<usize>,
    group: Arc<WriteGroup>,
    retire: u64,
}

/// A request with the time it was queued (ns since the leaf's epoch).
struct Timed {
    t0: u64,
    req: Req,
}

/// Operation counters of one leaf, as `zpool status` / `iostat` show them.
#[derive(Debug, Default)]
pub struct LeafStats {
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub checksum_errors: AtomicU64,
    /// Requests that were carried by a merged operation (aggregation at work).
    pub merged_requests: AtomicU64,
    pub flushes: AtomicU64,
}

/// Reports the pool's dirty level to the scheduler (async-write depth).
pub type DirtyGauge = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

/// Runs once, when a leaf becomes faulted, with its name and health.
pub type FaultHook = Box<dyn Fn(&str, &Health) + Send + Sync>;
/// Told when a failed write is parked (`Leaf::set_park_hook`).
pub type ParkHook = Box<dyn Fn() + Send + Sync>;
/// Whether a block is held without this leaf (`Leaf::set_served_hook`).
pub type ServedHook = Box<dyn Fn() -> bool + Send + Sync>;

struct Shared {
    name: String,
    /// Swapped only by `reopen` (`pool online` of a device that came back).
    dev: RwLock<Arc<dyn BlockDevice>>,
    q: Mutex<VdevQueue<Timed>>,
    cv: Condvar,
    stop: AtomicBool,
    epoch: Instant,
    gauge: DirtyGauge,
    stats: LeafStats,
    io: LeafIo,
    /// Set once, by the first fault (see the module docs).
    fault: Mutex<Option<Health>>,
    /// Bumped by each `reopen`, under `fault`'s lock: a write that failed
    /// on the device the leaf had before is the old device's failure.
    reopened: AtomicU64,
    /// Asked after a failed write faulted the leaf: true while the block
    /// is held without it (see the module docs), and the write is
    /// tolerated. None (a leaf no pool hooked): never.
    served: Mutex<Option<ServedHook>>,
    /// Failed writes that are not tolerated are parked instead of failing
    /// their groups (the sync waits for the device to come back).
    park_failed: AtomicBool,
    parked: Mutex<Vec<Parked>>,
    on_fault: Mutex<Option<FaultHook>>,
    /// Told each time a failed write is parked: the fault hook runs once,
    /// at the first fault, and writes parked after it (a leaf that faulted
    /// on an intent-log write, which never parks) must still be known.
    on_park: Mutex<Option<ParkHook>>,
    /// Faults injected on purpose (`tarn inject`); empty but for tests
    /// and rehearsals.
    inject: LeafInjections,
}

impl Shared {
    fn dev(&self) -> Arc<dyn BlockDevice> {
        self.dev.read().clone()
    }

    /// Marks the leaf faulted with `h` unless it already is; the first
    /// fault runs the hook.
    fn fault(&self, h: Health) {
        self.fault_since(h, None);
    }

    /// As `fault`, unless the leaf was reopened since `since` (its
    /// `reopened` count then): false, and nothing done, when it was.
    fn fault_since(&self, h: Health, since: Option<u64>) -> bool {
        debug_assert!(h != Health::Online);
        {
            let mut f = self.fault.lock();
            if since.is_some_and(|n| n != self.reopened.load(Ordering::SeqCst)) {
                return false;
            }
            if f.is_some() {
                return true;
            }
            *f = Some(h.clone());
        }
        if let Some(hook) = self.on_fault.lock().as_ref() {
            hook(&self.name, &h);
        }
        true
    }

    /// Queues a request (see `Leaf::enqueue`).
    fn enqueue(&self, class: IoClass, kind: IoKind, offset: u64, len: u64, req: Req) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let mut q = self.q.lock();
        q.enqueue(QueuedIo::new(class, kind, offset, len, Timed { t0: now, req }), now);
        drop(q);
        self.cv.notify_one();
    }

    /// Queues a write its group already counts (parked, or failed on the
    /// device before a reopen) again.
    fn requeue(&self, offset: u64, buf: Arc<AlignedBuf>, range: Range<usize>, group: Arc<WriteGroup>, retire: u64) {
        let len = range.len() as u64;
        self.enqueue(IoClass::AsyncWrite, IoKind::Write, offset, len, Req::Write { buf, range, group, retire });
    }

    /// Tells the park hook that a write was parked.
    fn told_parked(&self) {
        if let Some(hook) = self.on_park.lock().as_ref() {
            hook();
        }
    }

    /// Whether a block is held without this leaf (`served`).
    fn served(&self) -> bool {
        self.served.lock().as_ref().is_some_and(|f| f())
    }

    /// The device's own verdict, faulting the leaf if it is not online.
    fn check(&self) -> Health {
        if let Some(h) = self.fault.lock().clone() {
            return h;
        }
        let h = self.device_health();
        if h != Health::Online {
            self.fault(h.clone());
        }
        h
    }

    /// What the device says of itself, unless an injected fault makes it
    /// look removed.
    fn device_health(&self) -> Health {
        self.inject.health().unwrap_or_else(|| self.dev().health())
    }

    /// After a failed write or flush: faulted, with the device's verdict
    /// if it has one, else the error — unless the leaf was reopened since
    /// `since` (see `fault_since`).
    fn fault_after(&self, what: &str, e: &io::Error, since: Option<u64>) -> bool {
        let h = match self.device_health() {
            Health::Online => Health::Faulted(format!("{} error: {}", what, e)),
            h => h,
        };
        self.fault_since(h, since)
    }

    /// Runs device call `f` of kind `op` under the injection handlers:
    /// failed without calling the device, or called; then delayed. Also
    /// whether a read's data is to be damaged (`LeafInjections::damage`).
    fn call(&self, op: Op, f: impl FnOnce() -> io::Result<()>) -> (io::Result<()>, bool) {
        let mut v = self.inject.judge(op);
        let res = match v.fail.take() {
            Some(e) => Err(e),
            None => f(),
        };
        v.wait();
        (res, v.damage)
    }
}

/// One leaf device with its scheduler and issue threads.
pub struct Leaf {
    sh: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Leaf {
    pub fn new(name: String, dev: Arc<dyn BlockDevice>, limits: QueueLimits, nthreads: u32, gauge: DirtyGauge) -> Self {
        let sh = Arc::new(Shared {
            name,
            dev: RwLock::new(dev),
            q: Mutex::new(VdevQueue::new(limits)),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            gauge,
            stats: LeafStats::default(),
            io: LeafIo::default(),
            fault: Mutex::new(None),
            reopened: AtomicU64::new(0),
            on_fault: Mutex::new(None),
            on_park: Mutex::new(None),
            served: Mutex::new(None),
            park_failed: AtomicBool::new(false),
            parked: Mutex::new(Vec::new()),
            inject: LeafInjections::default(),
        });
        let threads = (0..nthreads)
            .map(|i| {
                let sh = sh.clone();
                std::thread::Builder::new()
                    .name(format!("tarn-io-{}", i))
                    .spawn(move || worker(&sh))
                    .expect("spawning an I/O thread")
            })
            .collect();
        Leaf { sh, threads: Mutex::new(threads) }
    }

    pub fn name(&self) -> &str {
        &self.sh.name
    }

    pub fn device(&self) -> Arc<dyn BlockDevice> {
        self.sh.dev()
    }

    /// Takes the leaf back into service on `dev` (the device reopened, or
    /// the same one found whole again): the fault is forgotten; the fault
    /// hook runs again on the next fault. Refused (with the device's
    /// verdict) when `dev` is not healthy.
    pub fn reopen(&self, dev: Arc<dyn BlockDevice>) -> Result<(), Health> {
        let h = dev.health();
        if h != Health::Online {
            return Err(h);
        }
        let mut f = self.sh.fault.lock();
        *self.sh.dev.write() = dev;
        *f = None;
        self.sh.reopened.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    pub fn stats(&self) -> &LeafStats {
        &self.sh.stats
    }

    /// Per-class operation counts and latency/size histograms.
    pub fn io_stats(&self) -> &LeafIo {
        &self.sh.io
    }

    pub fn queue_stats(&self) -> QueueStats {
        self.sh.q.lock().stats()
    }

    pub fn set_limits(&self, l: QueueLimits) {
        self.sh.q.lock().set_limits(l);
        self.sh.cv.notify_all();
    }

    fn enqueue(&self, class: IoClass, kind: IoKind, offset: u64, len: u64, req: Req) {
        self.sh.enqueue(class, kind, offset, len, req);
    }

    /// Queues a write of all of `buf` at `offset`.
    pub fn write(&self, class: IoClass, offset: u64, buf: Arc<AlignedBuf>, group: &Arc<WriteGroup>, retire: u64) {
        let all = 0..buf.len();
        self.write_part(class, offset, buf, all, group, retire);
    }

    /// Queues a write of `buf[range]` at `offset` (whole 512-byte units).
    pub fn write_part(&self, class: IoClass, offset: u64, buf: Arc<AlignedBuf>, range: Range<usize>, group: &Arc<WriteGroup>, retire: u64) {
        assert!(range.end <= buf.len() && range.start <= range.end, "{}: write of bytes {:?} of a {}-byte buffer", self.sh.name, range, buf.len());
        group.add();
        let len = range.len() as u64;
        self.enqueue(class, IoKind::Write, offset, len, Req::Write { buf, range, group: group.clone(), retire });
    }

    /// Reads `len` bytes at `offset` through the scheduler and waits.
    pub fn read(&self, class: IoClass, offset: u64, len: u64) -> io::Result<AlignedBuf> {
        let slot = ReadSlot::new();
        self.enqueue(class, IoKind::Read, offset, len, Req::Read { slot: slot.clone() });
        slot.wait()
    }

    /// Queues a read; `done` runs on an issue thread when it completes
    /// (prefetch: the caller does not wait).
    pub fn read_async(&self, class: IoClass, offset: u64, len: u64, done: ReadDone) {
        self.enqueue(class, IoKind::Read, offset, len, Req::ReadThen { done });
    }

    /// Flushes the device's write cache (not queued: it orders against every
    /// write that completed before it, which is all the sync path needs).
    /// A failure faults the leaf.
    pub fn flush(&self) -> io::Result<()> {
        self.sh.stats.flushes.fetch_add(1, Ordering::Relaxed);
        self.sh.call(Op::Flush, || self.sh.dev().flush()).0.inspect_err(|e| {
            self.sh.fault_after("cache flush", e, None);
        })
    }

    /// Writes directly, outside the scheduler (labels and uberblocks, which the
    /// sync path writes alone after everything else has completed). A
    /// failure faults the leaf.
    pub fn write_now(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.sh.stats.write_ops.fetch_add(1, Ordering::Relaxed);
        self.sh.stats.write_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.sh.call(Op::Write, || self.sh.dev().write_at(buf, offset)).0.inspect_err(|e| {
            self.sh.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            self.sh.fault_after("write", e, None);
        })
    }

    /// Counts a checksum error; a device that is no longer whole (a
    /// truncated file reads zeros) is faulted.
    pub fn note_checksum_error(&self) {
        self.sh.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
        self.sh.check();
    }

    /// Runs `f` with the leaf's fault while it is faulted, `reopen` waiting
    /// meanwhile: a suspension made there cannot come after a `pool clear`
    /// that took the leaf back and resumed the pool. Whether it ran.
    pub fn while_faulted(&self, f: impl FnOnce(&Health)) -> bool {
        let g = self.sh.fault.lock();
        g.as_ref().map(f).is_some()
    }

    /// Online, or the fault that took the leaf out (see the module docs).
    pub fn health(&self) -> Health {
        self.sh.fault.lock().clone().unwrap_or(Health::Online)
    }

    /// Asks the device whether it is still whole (faulting the leaf if
    /// not) and returns the leaf's health.
    pub fn check(&self) -> Health {
        self.sh.check()
    }

    /// Faults the leaf from outside (the pool's own checks); the first
    /// fault wins.
    pub fn fault(&self, h: Health) {
        self.sh.fault(h);
    }

    /// Sets what says whether a block is held without this leaf (its
    /// top-level vdev still holds the txg), asked after a failed write
    /// faulted the leaf: the write is then tolerated (see the module docs).
    pub fn set_served_hook(&self, hook: ServedHook) {
        *self.sh.served.lock() = Some(hook);
    }

    /// Parks the writes that fail and are not tolerated (a leaf of the
    /// pool's data vdevs): their groups wait, so the txg being synced is
    /// neither written nor lost, until `resume_parked` or `fail_parked`.
    pub fn set_park_failed_writes(&self, on: bool) {
        self.sh.park_failed.store(on, Ordering::Relaxed);
    }

    /// Keeps the write of `buf[range]` at `offset` as a parked one without
    /// issuing it (its vdev is down: `Vdev::write`; the leaf is faulted,
    /// not offline): queued by `resume_parked`, failed by `fail_parked` —
    /// queued at once if the leaf is back already. False, and nothing
    /// kept, when the leaf does not park or `group` may not wait.
    pub fn hold(&self, offset: u64, buf: Arc<AlignedBuf>, range: Range<usize>, group: &Arc<WriteGroup>, retire: u64) -> bool {
        assert!(range.end <= buf.len() && range.start <= range.end, "{}: held write of bytes {:?} of a {}-byte buffer", self.sh.name, range, buf.len());
        if !group.parks {
            return false;
        }
        {
            let mut parked = self.sh.parked.lock();
            if !self.sh.park_failed.load(Ordering::SeqCst) {
                return false;
            }
            group.add();
            if self.sh.fault.lock().is_none() {
                // Back since the caller found it down (`pool clear`, whose
                // `resume_parked` may be done): written now.
                self.sh.requeue(offset, buf, range, group.clone(), retire);
                return true;
            }
            parked.push(Parked { offset, buf, range, group: group.clone(), retire });
        }
        self.sh.told_parked();
        true
    }

    /// Queues the parked writes again (the device is back); how many.
    pub fn resume_parked(&self) -> usize {
        let parked = std::mem::take(&mut *self.sh.parked.lock());
        let n = parked.len();
        for p in parked {
            // Their groups still count them: queued without `add`.
            self.sh.requeue(p.offset, p.buf, p.range, p.group, p.retire);
        }
        n
    }

    /// Fails the parked writes' groups with `why` (the pool closes without
    /// them); how many.
    pub fn fail_parked(&self, why: &str) -> usize {
        // Writes still queued fail their groups from now on: parked after
        // this, nothing would ever release them (the flag changes under the
        // list's lock, which `perform_write` parks under).
        let parked = {
            let mut p = self.sh.parked.lock();
            self.sh.park_failed.store(false, Ordering::SeqCst);
            std::mem::take(&mut *p)
        };
        let n = parked.len();
        for p in parked {
            let what = || format!("write of {} bytes at {} on {}", p.range.len(), p.offset, self.sh.name);
            p.group.done(&Err(io::Error::other(why.to_string())), p.retire, &what);
        }
        n
    }

    /// The leaf's fault injection handlers (`tarn inject`).
    pub fn injections(&self) -> &LeafInjections {
        &self.sh.inject
    }

    /// Sets what runs when the leaf becomes faulted (once).
    pub fn set_fault_hook(&self, hook: FaultHook) {
        *self.sh.on_fault.lock() = Some(hook);
    }

    /// Sets what is told when a failed write is parked.
    pub fn set_park_hook(&self, hook: ParkHook) {
        *self.sh.on_park.lock() = Some(hook);
    }

    /// Stops the issue threads after the queue drains.
    pub fn shutdown(&self) {
        self.sh.stop.store(true, Ordering::SeqCst);
        self.sh.cv.notify_all();
        let me = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            // The last reference may go on one of the leaf's own workers
            // (a fault hook that drops an old tree holding the leaf): that
            // thread cannot join itself — std panics, the worker dies with
            // its write's group never completed and the sync waits forever.
            // Dropping its handle detaches it: it finishes the I/O at hand,
            // sees `stop` and ends.
            if t.thread().id() == me {
                continue;
            }
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf").field("name", &self.sh.name).finish()
    }
}

/// The leaf as a plain device for the pool's own direct I/O (its labels):
/// through the injection handlers, counted, and faulting the leaf as
/// `write_now` and `flush` do, so that no write bypasses either.
impl BlockDevice for Leaf {
    fn size_bytes(&self) -> u64 {
        self.sh.dev().size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sh.stats.read_ops.fetch_add(1, Ordering::Relaxed);
        let (res, damage) = self.sh.call(Op::Read, || self.sh.dev().read_at(buf, offset));
        match &res {
            Ok(()) if damage => self.sh.inject.damage(buf),
            Ok(()) => {}
            Err(_) => {
                self.sh.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                self.sh.check();
            }
        }
        res
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_now(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        Leaf::flush(self)
    }

    fn name(&self) -> String {
        self.sh.name.clone()
    }

    fn health(&self) -> Health {
        self.check()
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        // A leaf that leaves the tree (a change undone, a device detached)
        // while writes are parked on it: nothing would queue them again,
        // and the sync waiting for them would never end.
        self.fail_parked("the device left the pool");
        self.shutdown();
    }
}

fn worker(sh: &Shared) {
    loop {
        let issue = {
            let mut q = sh.q.lock();
            loop {
                let (dirty, max) = (sh.gauge)();
                q.set_dirty(dirty, max);
                if let Some(i) = q.next_issue(sh.epoch.elapsed().as_nanos() as u64) {
                    break i;
                }
                if sh.stop.load(Ordering::SeqCst) && q.is_empty() {
                    return;
                }
                sh.cv.wait_for(&mut q, Duration::from_millis(100));
            }
        };
        let class = issue.class;
        perform(sh, issue);
        sh.q.lock().complete(class);
        // A completion may let another class (or this one) issue.
        sh.cv.notify_one();
    }
}

fn perform(sh: &Shared, issue: Issue<Timed>) {
    if issue.parts.len() > 1 {
        sh.stats.merged_requests.fetch_add(issue.parts.len() as u64, Ordering::Relaxed);
    }
    match issue.kind {
        IoKind::Write => perform_write(sh, issue),
        IoKind::Read => perform_read(sh, issue),
    }
}

/// Counts a device operation in its class's statistics. Called after the
/// device call and before any caller is told it completed, so a caller that
/// has seen its I/O finish also sees it counted.
fn record(sh: &Shared, issue: &Issue<Timed>, started: Instant) {
    let disk = started.elapsed().as_nanos() as u64;
    let c = sh.io.class(issue.class);
    c.ops.fetch_add(1, Ordering::Relaxed);
    c.bytes.fetch_add(issue.len, Ordering::Relaxed);
    if issue.parts.len() > 1 {
        c.agg_size.record(issue.len);
    }
    c.disk_ns.record(disk);
    let end = sh.epoch.elapsed().as_nanos() as u64;
    for (_, len, t) in &issue.parts {
        c.ind_size.record(*len);
        c.total_ns.record(end.saturating_sub(t.t0));
    }
}

/// Runs a device call; a panic inside it becomes an I/O error, so every
/// request of the issue is still completed and no waiter hangs.
fn guarded(f: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| Err(io::Error::other("the device call panicked")))
}

/// Writes an issue's parts with one device call, counted; the result.
fn write_issue(sh: &Shared, issue: &Issue<Timed>) -> io::Result<()> {
    // A merged write is written back to back: its parts must be adjacent, or
    // bytes would land at the wrong offsets. (The queue never merges across
    // a gap with the write gap limit at 0, which the tunables enforce; should
    // that ever break, the write fails instead of misplacing data.)
    let started = Instant::now();
    let mut pos = issue.offset;
    let mut adjacent = true;
    for (off, len, _) in &issue.parts {
        adjacent &= *off == pos;
        pos += len;
    }
    let res = if !adjacent {
        Err(io::Error::other("internal error: merged write with a gap"))
    } else {
        let bufs: Vec<&[u8]> = issue
            .parts
            .iter()
            .map(|(_, _, t)| match &t.req {
                Req::Write { buf, range, .. } => &buf[range.clone()],
                Req::Read { .. } | Req::ReadThen { .. } => &[][..],
            })
            .collect();
        sh.call(Op::Write, || guarded(|| sh.dev().writev_at(&bufs, issue.offset))).0
    };
    record(sh, issue, started);
    sh.stats.write_ops.fetch_add(1, Ordering::Relaxed);
    match &res {
        Ok(()) => {
            sh.stats.write_bytes.fetch_add(issue.len, Ordering::Relaxed);
        }
        Err(_) => {
            sh.stats.write_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    res
}

fn perform_write(sh: &Shared, issue: Issue<Timed>) {
    let since = sh.reopened.load(Ordering::SeqCst);
    let res = write_issue(sh, &issue);
    let (len, offset) = (issue.len, issue.offset);
    let what = || format!("write of {} bytes at {} on {}", len, offset, sh.name);
    // Faulted first: a sibling deciding about the same block sees this
    // leaf down (see the module docs), and a waiter told of the failure
    // (an intent-log write) finds the pool already suspended — were it to
    // ask for a txg sync first, that sync could start before the fault
    // and fail for good on its writes, where `pool clear` could have
    // resumed it. A failure of the device the leaf had before a reopen
    // (`pool clear` took it back meanwhile) is stale: it neither faults the
    // leaf nor decides anything, and the write is queued again.
    let stale = res.as_ref().is_err_and(|e| !sh.fault_after("write", e, Some(since)));
    let tolerated = res.is_err() && !stale && sh.served();
    let mut done = Vec::with_capacity(issue.parts.len());
    let mut parked_any = false;
    for (off, _, t) in issue.parts {
        if let Req::Write { buf, range, group, retire } = t.req {
            if stale {
                sh.requeue(off, buf, range, group, retire);
                continue;
            }
            if res.is_err() && !tolerated && group.parks {
                let mut parked = sh.parked.lock();
                if sh.park_failed.load(Ordering::SeqCst) {
                    // Reopened since it failed: `resume_parked` may be
                    // done, so it is queued again rather than parked.
                    if sh.reopened.load(Ordering::SeqCst) != since {
                        sh.requeue(off, buf, range, group, retire);
                    } else {
                        parked.push(Parked { offset: off, buf, range, group, retire });
                        parked_any = true;
                    }
                    continue;
                }
            }
            done.push((group, retire));
        }
    }
    if parked_any {
        sh.told_parked();
    }
    let r2 = match &res {
        Ok(()) => Ok(()),
        Err(_) if tolerated => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    };
    for (group, retire) in done {
        group.done(&r2, retire, &what);
    }
}

fn perform_read(sh: &Shared, issue: Issue<Timed>) {
    // One buffer per request plus throwaway buffers for the gaps between them.
    let mut bufs: Vec<AlignedBuf> = Vec::with_capacity(issue.parts.len() * 2);
    let mut is_gap: Vec<bool> = Vec::with_capacity(issue.parts.len() * 2);
    let mut pos = issue.offset;
    for (off, len, _) in issue.parts.iter() {
        if *off > pos {
            bufs.push(AlignedBuf::recycled((*off - pos) as usize));
            is_gap.push(true);
        }
        bufs.push(AlignedBuf::recycled(*len as usize));
        is_gap.push(false);
        pos = off + len;
    }
    let started = Instant::now();
    let (res, damage) = {
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        sh.call(Op::Read, || guarded(|| sh.dev().readv_at(&mut slices, issue.offset)))
    };
    if res.is_ok() && damage {
        // The returned copy only: the device keeps its bytes.
        bufs.iter_mut().for_each(|b| sh.inject.damage(b));
    }
    record(sh, &issue, started);
    sh.stats.read_ops.fetch_add(1, Ordering::Relaxed);
    if res.is_ok() {
        sh.stats.read_bytes.fetch_add(issue.len, Ordering::Relaxed);
    } else {
        sh.stats.read_errors.fetch_add(1, Ordering::Relaxed);
        // A short read of a truncated file or a vanished device faults it;
        // a bad sector on a whole device does not.
        sh.check();
    }
    let mut data = bufs.into_iter().zip(is_gap).filter(|(_, g)| !g).map(|(b, _)| b);
    for (_, _, t) in issue.parts.into_iter() {
        let r = t.req;
        let buf = data.next();
        let result = match (&res, buf) {
            (Ok(()), Some(b)) => Ok(b),
            (Err(e), _) => Err(io::Error::new(e.kind(), format!("{}: {}", sh.name, e))),
            (Ok(()), None) => Err(io::Error::other("read buffer missing")),
        };
        match r {
            Req::Read { slot } => slot.fill(result),
            Req::ReadThen { done } => done(result),
            Req::Write { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fault::{FaultConfig, FaultDevice};

    /// A failed write that is not parked (an intent-log write) reaches its
    /// waiter only after the leaf has faulted and its hook has run: the
    /// waiter finds the pool already suspended. (Told first, the log fell
    /// back to a txg sync that could start before the suspension and fail
    /// for good, where `pool clear` could have resumed it.)
    #[test]
    fn a_failed_write_faults_the_leaf_before_its_waiter_wakes() {
        let dev = FaultDevice::new(1 << 20, 1);
        dev.set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..FaultConfig::default() });
        let leaf = Leaf::new("f.img".into(), Arc::new(dev), QueueLimits::default(), 1, Arc::new(|| (0, 1)));
        let hooked = Arc::new(AtomicBool::new(false));
        let h = hooked.clone();
        leaf.set_fault_hook(Box::new(move |_, _| {
            // A slow hook: a waiter woken before it would see it unfinished.
            std::thread::sleep(Duration::from_millis(100));
            h.store(true, Ordering::SeqCst);
        }));
        let group = WriteGroup::unparked();
        leaf.write(IoClass::SyncWrite, 0, Arc::new(AlignedBuf::from_slice(&[7u8; 4096])), &group, 0);
        let err = group.wait().expect_err("the device refuses writes");
        assert!(err.contains("f.img"), "{}", err);
        assert!(hooked.load(Ordering::SeqCst), "the fault hook ran before the waiter woke");
        assert!(leaf.check() != Health::Online, "the leaf is faulted");
    }

    /// The fault hook may drop the last reference to the leaf on the
    /// leaf's own worker (the pool's hook replacing a tree that held it):
    /// the worker must not try to join itself, and the write's group must
    /// still complete (found hanging the spare power-cut test).
    #[test]
    fn the_last_reference_dropped_on_its_own_worker_completes_the_write() {
        let dev = FaultDevice::new(1 << 20, 2);
        dev.set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..FaultConfig::default() });
        let leaf = Arc::new(Leaf::new("g.img".into(), Arc::new(dev), QueueLimits::default(), 1, Arc::new(|| (0, 1))));
        let held: Arc<Mutex<Option<Arc<Leaf>>>> = Arc::new(Mutex::new(Some(leaf.clone())));
        let h = held.clone();
        leaf.set_fault_hook(Box::new(move |_, _| drop(h.lock().take())));
        let group = WriteGroup::unparked();
        leaf.write(IoClass::SyncWrite, 0, Arc::new(AlignedBuf::from_slice(&[7u8; 4096])), &group, 0);
        drop(leaf);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(group.wait()));
        let res = rx.recv_timeout(Duration::from_secs(20)).expect("the write's group completes");
        assert!(res.is_err(), "the device refused the write");
        assert!(held.lock().is_none(), "the hook dropped the last reference");
    }
}
