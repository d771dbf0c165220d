//! Per-leaf-device I/O scheduler queue (the "vdev queue").
//!
//! # Purpose
//!
//! Each leaf device has one [`VdevQueue`]. Callers enqueue block I/Os tagged
//! with a class (why the I/O exists) and a kind (read or write). The device
//! worker calls [`VdevQueue::next_issue`] to get the next operation to send to
//! the device, and calls [`VdevQueue::complete`] when that operation finishes.
//! The queue makes three decisions:
//!
//! 1. **Which class goes next.** Latency-sensitive I/O must not wait behind
//!    bulk background work, but background work must still make progress.
//! 2. **Which I/O within the class.** The device should see mostly sequential
//!    sweeps rather than random seeks.
//! 3. **How much to merge.** Many small adjacent I/Os should become one large
//!    device operation.
//!
//! It is a plain data structure. It has no threads, reads no clocks and does
//! no device access. The caller passes time in as nanoseconds, so behaviour is
//! deterministic in tests. The behaviour follows OpenZFS's `vdev_queue.c`, and
//! the doc comments on [`QueueLimits`] give the matching OpenZFS module
//! parameter names. The code is written from scratch, not copied.
//!
//! # Classes and their limits
//!
//! An I/O is *active* from the moment `next_issue` hands it out until the
//! caller reports `complete` for it. An aggregated issue counts as **one**
//! active I/O, however many parts it carries.
//!
//! | class      | min_active | max_active          | order within class | interactive |
//! |------------|-----------:|---------------------|--------------------|-------------|
//! | SyncRead   |         10 | 10                  | FIFO               | yes         |
//! | SyncWrite  |         10 | 10                  | FIFO               | yes         |
//! | AsyncRead  |          1 | 3                   | time bucket, LBA   | yes         |
//! | AsyncWrite |          2 | 10, dynamic (below) | time bucket, LBA   | yes         |
//! | Scrub      |          1 | 3, held (below)     | time bucket, LBA   | no          |
//! | Trim       |          1 | 2                   | time bucket, LBA   | no          |
//!
//! Across all classes at most `max_active_total` (default 1000) I/Os may be
//! active.
//!
//! Each class has a **floor**, `min(min_active, max_active)`. The `min()`
//! handles a misconfigured floor that is above the ceiling: the ceiling wins.
//! Each class also has a **ceiling**. For most classes the ceiling is
//! `max_active`. AsyncWrite and Scrub compute theirs as described below.
//! A class's floor is never above its ceiling, and its ceiling is never above
//! its `max_active`.
//!
//! # Choosing a class
//!
//! 1. If `active_total >= max_active_total`, nothing is issued.
//! 2. **Floor pass.** Visit the classes round-robin, starting with the class
//!    after the one served last. Pick the first class that has queued I/O and
//!    has fewer active I/Os than its floor. This guarantees every class its
//!    minimum depth even when higher-priority work floods the queue. Because
//!    the scan rotates, no class can starve the others when
//!    `max_active_total` leaves room for only a few I/Os.
//! 3. **Ceiling pass.** Visit the classes in priority order: SyncRead,
//!    SyncWrite, AsyncRead, AsyncWrite, Scrub, Trim. Pick the first class
//!    that has queued I/O and has fewer active I/Os than its ceiling.
//!
//! ## Async-write depth follows dirty data
//!
//! With little dirty data, writing back slowly keeps read latency low and
//! gives adjacent writes time to collect and aggregate. As dirty data nears
//! the pool's limit, the write throttle would soon start delaying writers, so
//! the queue issues more writes to drain it. If `d` is the dirty level as a
//! percentage of `dirty_max`:
//!
//! ```text
//!   ceiling = min_active                      d <  min_dirty%   (30)
//!           = max_active                      d >  max_dirty%   (60)
//!           = min_active + (dirty - lo) * (max_active - min_active) / (hi - lo)
//!                                             otherwise, lo/hi = the two
//!                                             percentages of dirty_max in bytes
//!
//!  async-write
//!  max_active
//!       ^
//!    10 +                          o------------------  = max_active
//!       |                        / |
//!       |                      /   |
//!     6 +  -  -  -  -  -  - o      |
//!       |                 / |      |
//!       |               /   |      |
//!     2 +--------------o    |      |                     = min_active
//!       |              |    |      |
//!     0 +--------------+----+------+------------------> dirty data,
//!       0             30   45     60                100   % of dirty_max
//! ```
//!
//! `dirty_max == 0` means the dirty level is unknown. The queue treats that
//! as 0 % (the state before the first [`VdevQueue::set_dirty`] call).
//!
//! ## Scrub is held back behind interactive I/O
//!
//! SyncRead, SyncWrite, AsyncRead and AsyncWrite are *interactive*: someone
//! is waiting for them, either directly or through the write throttle. Scrub
//! and Trim are not. The Scrub ceiling is recomputed on every choice, using
//! these rules (a "hold-off counter" is kept):
//!
//! * While **any interactive I/O is active**, the Scrub ceiling equals its
//!   floor, so Scrub gets only its guaranteed trickle.
//! * **Every interactive completion** sets the hold-off counter to
//!   `nia_credit`. Each Scrub or Trim completion that happens while no
//!   interactive I/O is active lowers the counter by one. While the counter
//!   is non-zero, the Scrub ceiling is `min(max(1, floor), max_active)`.
//! * **Otherwise** the Scrub ceiling is `max_active`.
//!
//! Interactive I/O often arrives in bursts separated by short idle gaps. The
//! hold-off stops Scrub from jumping to full depth in the first gap and then
//! getting in the way of the next burst. The `max(1, ..)` lets Scrub count
//! the hold-off down itself when its floor is 0. Without it, the queue could
//! stall forever with scrub I/O queued and nothing active. OpenZFS also
//! rations the number of Scrub *issues* during interactive activity
//! (`vq_nia_credit`). This queue uses the simpler rule above instead.
//! OpenZFS counts Trim as interactive. Here Trim is neither interactive nor
//! held back.
//!
//! # Ordering within a class
//!
//! * **SyncRead and SyncWrite are FIFO.** Someone waits on each of them, so
//!   the oldest goes first.
//! * **All other classes** are ordered by `(enqueued_ns / bucket_ns, offset)`.
//!   The queue takes the oldest non-empty time bucket. Inside it, it issues
//!   the first I/O at or after the device's *head*, which is the end of the
//!   last issue of any class. If there is none, it wraps to the lowest offset
//!   in that bucket. A stream of writes is therefore issued as an elevator
//!   sweep. The time buckets make sure an I/O that the head has passed waits
//!   no longer than about one bucket (0.5 s) behind newer I/O. The clock is
//!   made monotonic: `now_ns` values lower than one already seen are raised to
//!   it. This stops a clock that steps backwards from putting new I/O ahead of
//!   old I/O. Changing `bucket_ns` re-buckets everything already queued.
//!
//! # Aggregation
//!
//! The chosen I/O grows by taking in queued I/Os of the **same class and
//! kind**, first backwards and then forwards in offset order. Each class and
//! kind has its own offset index, so neighbours are found no matter which time
//! bucket they are in. A neighbour is merged only if:
//!
//! * it does not overlap the current range (overlaps are never merged);
//! * the gap between it and the current range is at most the gap limit:
//!   `read_gap_limit_bytes` for reads, `write_gap_limit_bytes` for writes,
//!   and always 0 for Trim (trimming a gap would destroy data);
//! * the whole span stays at or below
//!   `min(aggregation_limit_bytes, 16 MiB)`.
//!
//! An I/O that is already at or above the limit is issued alone. An
//! aggregation limit of 0 turns aggregation off. The caller issues the whole
//! span as one device operation. For reads, gaps between parts are read into a
//! throwaway buffer. For writes the parts are exactly adjacent unless the
//! caller set a non-zero write gap limit, in which case the caller must fill
//! the gaps. A length that would run past `u64::MAX` is cut short at enqueue.
//!
//! # Invariants
//!
//! [`VdevQueue::check_invariants`] enforces these. It runs at the end of
//! every mutating call when `debug_assertions` are on.
//!
//! 1. Every queued I/O appears exactly once in the entry map, once in its
//!    class's order index and once in its class and kind offset index. There
//!    are no other index entries. Checked as: the index sizes agree with each
//!    other, their sum is `queued_total()`, and every entry's keys are present.
//!    Stale index entries would leak memory and could point at a freed id.
//! 2. Every non-FIFO order key carries `enqueued_ns / bucket_ns` for the
//!    current `bucket_ns`. Removal rebuilds keys from the entry, so a stale
//!    key could never be removed.
//! 3. `active_total` equals the sum of the per-class active counts.
//! 4. `active[c] <= max_active[c]` and `active_total <= max_active_total`.
//!    The one exception is a `set_limits` that lowered a limit below what was
//!    already active. In that case the count at that moment is allowed until
//!    the next `set_limits`. Nothing new is issued while over the limit, so
//!    the count can only fall.
//! 5. For every class, floor <= ceiling <= `max_active`. This includes the
//!    dynamic AsyncWrite and Scrub ceilings.
//! 6. `hold-off <= nia_credit`.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};

/// Number of I/O classes. Arrays are sized by this constant so a class can be
/// added without changing any signature.
pub const IO_CLASSES: usize = 6;

/// Largest span one aggregated issue may ever cover, whatever
/// `aggregation_limit_bytes` says (OpenZFS: the 16 MiB maximum block size).
pub const AGGREGATION_HARD_MAX_BYTES: u64 = 16 << 20;

/// Above this many queued I/Os the per-entry part of `check_invariants` is
/// skipped outside unit tests. It is O(n) per call, and debug builds of the
/// engine must stay usable with deep queues.
const DEEP_CHECK_MAX_ENTRIES: usize = 4096;

/// Why an I/O exists. The declaration order is the priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoClass {
    SyncRead = 0,
    SyncWrite = 1,
    AsyncRead = 2,
    AsyncWrite = 3,
    Scrub = 4,
    Trim = 5,
}

impl IoClass {
    /// All classes in priority order; `ALL[c.index()] == c`.
    pub const ALL: [IoClass; IO_CLASSES] = [
        IoClass::SyncRead,
        IoClass::SyncWrite,
        IoClass::AsyncRead,
        IoClass::AsyncWrite,
        IoClass::Scrub,
        IoClass::Trim,
    ];

    /// Index into per-class arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// True for classes someone is waiting on. These hold Scrub back.
    pub const fn is_interactive(self) -> bool {
        matches!(
            self,
            IoClass::SyncRead | IoClass::SyncWrite | IoClass::AsyncRead | IoClass::AsyncWrite
        )
    }

    /// True for classes issued in arrival order instead of LBA order.
    pub const fn is_fifo(self) -> bool {
        matches!(self, IoClass::SyncRead | IoClass::SyncWrite)
    }
}

/// Direction of an I/O. Only I/Os of the same kind are aggregated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoKind {
    Read,
    Write,
}

impl IoKind {
    const fn index(self) -> usize {
        match self {
            IoKind::Read => 0,
            IoKind::Write => 1,
        }
    }
}

/// Queue tunables. They can be changed at runtime with
/// [`VdevQueue::set_limits`]. Per-class arrays are indexed by
/// [`IoClass::index`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Guaranteed depth per class: `zfs_vdev_{sync_read,sync_write,async_read,
    /// async_write,scrub,trim}_min_active` = 10, 10, 1, 2, 1, 1.
    pub min_active: [u32; IO_CLASSES],
    /// Maximum depth per class: `zfs_vdev_*_max_active` = 10, 10, 3, 10, 3, 2.
    /// For AsyncWrite this is the top of the dirty-data ramp.
    pub max_active: [u32; IO_CLASSES],
    /// Maximum depth over all classes: `zfs_vdev_max_active` = 1000.
    pub max_active_total: u32,
    /// Largest aggregated span: `zfs_vdev_aggregation_limit` = 1 MiB. Capped
    /// at [`AGGREGATION_HARD_MAX_BYTES`]. 0 turns aggregation off.
    pub aggregation_limit_bytes: u64,
    /// Largest gap bridged between aggregated reads:
    /// `zfs_vdev_read_gap_limit` = 32 KiB.
    pub read_gap_limit_bytes: u64,
    /// Largest gap bridged between aggregated writes. OpenZFS
    /// `zfs_vdev_write_gap_limit` is 4 KiB. The default here is 0, so writes
    /// must be exactly adjacent.
    pub write_gap_limit_bytes: u64,
    /// Dirty percentage below which AsyncWrite runs at `min_active`:
    /// `zfs_vdev_async_write_active_min_dirty_percent` = 30.
    pub async_write_active_min_dirty_percent: u32,
    /// Dirty percentage above which AsyncWrite runs at `max_active`:
    /// `zfs_vdev_async_write_active_max_dirty_percent` = 60.
    pub async_write_active_max_dirty_percent: u32,
    /// Completions Scrub stays held back after interactive I/O stops
    /// (`zfs_vdev_nia_credit` = 5). See the module doc for the exact rule.
    pub nia_credit: u32,
    /// Width of the time buckets used for LBA ordering, in ns (0.5 s; OpenZFS
    /// uses about 0.54 s). 0 means a single bucket: a pure elevator, with no
    /// bound on waiting.
    pub bucket_ns: u64,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            min_active: [10, 10, 1, 2, 1, 1],
            max_active: [10, 10, 3, 10, 3, 2],
            max_active_total: 1000,
            aggregation_limit_bytes: 1 << 20,
            read_gap_limit_bytes: 32 << 10,
            write_gap_limit_bytes: 0,
            async_write_active_min_dirty_percent: 30,
            async_write_active_max_dirty_percent: 60,
            nia_credit: 5,
            bucket_ns: 500_000_000,
        }
    }
}

/// One I/O handed to [`VdevQueue::enqueue`]. The queue records the enqueue
/// time itself.
#[derive(Debug)]
pub struct QueuedIo<T> {
    pub class: IoClass,
    pub kind: IoKind,
    pub offset: u64,
    pub len: u64,
    pub payload: T,
}

impl<T> QueuedIo<T> {
    pub fn new(class: IoClass, kind: IoKind, offset: u64, len: u64, payload: T) -> Self {
        QueuedIo {
            class,
            kind,
            offset,
            len,
            payload,
        }
    }
}

/// What the caller issues as ONE device operation.
#[derive(Debug)]
pub struct Issue<T> {
    pub class: IoClass,
    pub kind: IoKind,
    /// The whole merged range, `offset .. offset + len`.
    pub offset: u64,
    pub len: u64,
    /// `(offset, len, payload)` in offset order. Parts never overlap. For reads
    /// there may be gaps (up to the read gap limit) between parts. For writes,
    /// parts are exactly adjacent unless a write gap limit is set.
    pub parts: Vec<(u64, u64, T)>,
}

/// Per-class counters. `queued` and `active` are snapshots; the rest are
/// running totals since the queue was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    pub queued: usize,
    pub active: u32,
    /// Device operations issued.
    pub issued_ops: u64,
    /// Caller I/Os issued (the sum of `parts.len()`).
    pub issued_parts: u64,
    /// Parts that rode along in another I/O's operation (`parts.len() - 1`
    /// per op).
    pub aggregated_parts: u64,
    /// Device bytes issued (whole spans, gaps included).
    pub issued_bytes: u64,
    /// Bytes in spans that belonged to no part (bridged gaps).
    pub gap_bytes: u64,
    pub completed: u64,
    /// Sum over issued parts of (issue time - enqueue time).
    pub queue_wait_ns: u64,
}

/// Snapshot returned by [`VdevQueue::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Indexed by [`IoClass::index`].
    pub classes: [ClassStats; IO_CLASSES],
    pub queued_total: usize,
    pub active_total: u32,
    /// Current ceiling of each class (AsyncWrite's follows dirty data).
    pub max_active: [u32; IO_CLASSES],
    /// Current dynamic AsyncWrite ceiling.
    pub async_write_max_active: u32,
    /// Current Scrub ceiling (lower than `max_active` while held back).
    pub scrub_max_active: u32,
    /// Remaining Scrub hold-off completions.
    pub nia_holdoff: u32,
}

/// A queued I/O as the queue stores it.
#[derive(Debug)]
struct Entry<T> {
    class: IoClass,
    kind: IoKind,
    offset: u64,
    /// Clamped at enqueue so that `offset + len` cannot overflow.
    len: u64,
    /// `enqueued_ns / bucket_ns`, stored because it is part of the order key.
    bucket: u64,
    enqueued_ns: u64,
    payload: T,
}

impl<T> Entry<T> {
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// `(bucket, offset, id)` for LBA-ordered classes; `(0, 0, id)` for FIFO ones
/// (ids grow with arrival).
type OrderKey = (u64, u64, u64);

fn order_key<T>(id: u64, e: &Entry<T>) -> OrderKey {
    if e.class.is_fifo() {
        (0, 0, id)
    } else {
        (e.bucket, e.offset, id)
    }
}

fn bucket_of(ns: u64, bucket_ns: u64) -> u64 {
    ns.checked_div(bucket_ns).unwrap_or(0)
}

/// Per-class indexes and counters.
#[derive(Debug, Default)]
struct ClassState {
    /// Issue order. The smallest key is the oldest bucket, or the FIFO head.
    order: BTreeSet<OrderKey>,
    /// `(offset, id)` per [`IoKind::index`], used to find aggregation
    /// neighbours in any bucket.
    by_offset: [BTreeSet<(u64, u64)>; 2],
    active: u32,
    /// Active count allowed above `max_active` after a lowering `set_limits`
    /// (invariant 4). 0 when not over the limit.
    grace: u32,
    stats: ClassStats,
}

/// The I/O scheduler queue of one leaf device. See the module documentation.
#[derive(Debug)]
pub struct VdevQueue<T> {
    limits: QueueLimits,
    entries: HashMap<u64, Entry<T>>,
    classes: [ClassState; IO_CLASSES],
    next_id: u64,
    active_total: u32,
    total_grace: u32,
    /// Class served last; the floor pass starts after it.
    last_class: usize,
    /// End of the last issue: the device head position used by the elevator.
    last_end: u64,
    /// Highest `now_ns` seen, which keeps enqueue times monotonic.
    clock_ns: u64,
    dirty_bytes: u64,
    dirty_max_bytes: u64,
    /// Completions remaining before Scrub may run at full depth.
    nia_holdoff: u32,
}

impl<T> VdevQueue<T> {
    pub fn new(limits: QueueLimits) -> Self {
        VdevQueue {
            limits,
            entries: HashMap::new(),
            classes: Default::default(),
            next_id: 0,
            active_total: 0,
            total_grace: 0,
            // Start the first floor pass at SyncRead.
            last_class: IO_CLASSES - 1,
            last_end: 0,
            clock_ns: 0,
            dirty_bytes: 0,
            dirty_max_bytes: 0,
            nia_holdoff: 0,
        }
    }

    pub fn limits(&self) -> &QueueLimits {
        &self.limits
    }

    /// Replace the tunables. Active I/O above a lowered limit stays active:
    /// nothing new of that class is issued until the count drops below the
    /// limit.
    pub fn set_limits(&mut self, limits: QueueLimits) {
        let rebucket = limits.bucket_ns != self.limits.bucket_ns;
        self.limits = limits;
        for (i, st) in self.classes.iter_mut().enumerate() {
            st.grace = over_limit(st.active, self.limits.max_active[i]);
        }
        self.total_grace = over_limit(self.active_total, self.limits.max_active_total);
        self.nia_holdoff = self.nia_holdoff.min(self.limits.nia_credit);
        if rebucket {
            self.rebucket();
        }
        self.check_invariants_debug();
    }

    /// Recompute every order key for a new `bucket_ns` (invariant 2).
    fn rebucket(&mut self) {
        for st in self.classes.iter_mut() {
            st.order.clear();
        }
        for (&id, e) in self.entries.iter_mut() {
            e.bucket = bucket_of(e.enqueued_ns, self.limits.bucket_ns);
            self.classes[e.class.index()].order.insert(order_key(id, e));
        }
    }

    pub fn enqueue(&mut self, io: QueuedIo<T>, now_ns: u64) {
        self.clock_ns = self.clock_ns.max(now_ns);
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let e = Entry {
            class: io.class,
            kind: io.kind,
            offset: io.offset,
            len: io.len.min(u64::MAX - io.offset),
            bucket: bucket_of(self.clock_ns, self.limits.bucket_ns),
            enqueued_ns: self.clock_ns,
            payload: io.payload,
        };
        let st = &mut self.classes[e.class.index()];
        st.order.insert(order_key(id, &e));
        st.by_offset[e.kind.index()].insert((e.offset, id));
        self.entries.insert(id, e);
        self.check_invariants_debug();
    }

    /// Tell the queue the pool's dirty-data level. This sets the AsyncWrite
    /// depth. `dirty_max_bytes == 0` means unknown and is treated as 0 %.
    pub fn set_dirty(&mut self, dirty_bytes: u64, dirty_max_bytes: u64) {
        self.dirty_bytes = dirty_bytes;
        self.dirty_max_bytes = dirty_max_bytes;
        self.check_invariants_debug();
    }

    /// Choose the next I/O to issue, merged with its neighbours, and mark it
    /// active. Returns None when nothing may issue now: every class is empty
    /// or at its limit. The caller must call `complete(issue.class)` once
    /// the device operation finishes.
    pub fn next_issue(&mut self, now_ns: u64) -> Option<Issue<T>> {
        self.clock_ns = self.clock_ns.max(now_ns);
        let class = self.choose_class()?;
        let first = self.pick_in_class(class)?;
        let ids = self.aggregate(class, first);
        let issue = self.take_parts(class, &ids)?;
        let i = class.index();
        debug_assert!(
            self.classes[i].active < self.class_max_active(class).max(self.class_floor(class))
        );
        self.classes[i].active += 1;
        self.active_total += 1;
        self.last_class = i;
        self.last_end = issue.offset.saturating_add(issue.len);
        self.check_invariants_debug();
        Some(issue)
    }

    /// One device operation of `class` has finished. A completion for a
    /// class with nothing active is a caller bug: it fails a debug assertion,
    /// and in release builds it is ignored.
    pub fn complete(&mut self, class: IoClass) {
        let i = class.index();
        debug_assert!(
            self.classes[i].active > 0,
            "complete({class:?}) with no active I/O"
        );
        if self.classes[i].active == 0 {
            return;
        }
        self.classes[i].active -= 1;
        self.active_total = self.active_total.saturating_sub(1);
        let st = &mut self.classes[i];
        st.stats.completed = st.stats.completed.saturating_add(1);
        if class.is_interactive() {
            self.nia_holdoff = self.limits.nia_credit;
        } else if self.interactive_active() == 0 {
            self.nia_holdoff = self.nia_holdoff.saturating_sub(1);
        }
        self.check_invariants_debug();
    }

    /// Current dynamic AsyncWrite ceiling, set by the dirty-data level (see
    /// the plot in the module doc).
    pub fn async_write_max_active(&self) -> u32 {
        let lo_n = self.class_floor(IoClass::AsyncWrite);
        let hi_n = self.limits.max_active[IoClass::AsyncWrite.index()];
        if self.dirty_max_bytes == 0 {
            return lo_n;
        }
        let dmax = u128::from(self.dirty_max_bytes);
        let lo = dmax * u128::from(self.limits.async_write_active_min_dirty_percent) / 100;
        let hi = dmax * u128::from(self.limits.async_write_active_max_dirty_percent) / 100;
        let d = u128::from(self.dirty_bytes);
        if d < lo {
            return lo_n;
        }
        if d > hi || hi <= lo {
            // hi <= lo (inverted percentages) degenerates into a step.
            return hi_n;
        }
        // lo <= d <= hi and lo_n <= hi_n, so the result is in [lo_n, hi_n].
        let step = (d - lo) * u128::from(hi_n - lo_n) / (hi - lo);
        lo_n + u32::try_from(step).unwrap_or(hi_n - lo_n)
    }

    /// Current ceiling of `class`. Nothing more of it issues once this many
    /// are active.
    pub fn class_max_active(&self, class: IoClass) -> u32 {
        match class {
            IoClass::AsyncWrite => self.async_write_max_active(),
            IoClass::Scrub => self.scrub_max_active(),
            _ => self.limits.max_active[class.index()],
        }
    }

    pub fn stats(&self) -> QueueStats {
        let mut classes = [ClassStats::default(); IO_CLASSES];
        for (out, st) in classes.iter_mut().zip(self.classes.iter()) {
            *out = ClassStats {
                queued: st.order.len(),
                active: st.active,
                ..st.stats
            };
        }
        QueueStats {
            classes,
            queued_total: self.queued_total(),
            active_total: self.active_total,
            max_active: std::array::from_fn(|i| self.class_max_active(IoClass::ALL[i])),
            async_write_max_active: self.async_write_max_active(),
            scrub_max_active: self.scrub_max_active(),
            nia_holdoff: self.nia_holdoff,
        }
    }

    /// True when no I/O is waiting. Issued I/O may still be active; see
    /// [`VdevQueue::is_idle`].
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when nothing is queued and nothing is active.
    pub fn is_idle(&self) -> bool {
        self.is_empty() && self.active_total == 0
    }

    pub fn active_total(&self) -> u32 {
        self.active_total
    }

    pub fn queued_total(&self) -> usize {
        self.entries.len()
    }

    // ----- class choice -------------------------------------------------

    /// Guaranteed depth. A floor above the ceiling is a misconfiguration; the
    /// ceiling wins.
    fn class_floor(&self, class: IoClass) -> u32 {
        let i = class.index();
        self.limits.min_active[i].min(self.limits.max_active[i])
    }

    /// Scrub ceiling, following the hold-back rule in the module doc.
    fn scrub_max_active(&self) -> u32 {
        let max = self.limits.max_active[IoClass::Scrub.index()];
        let floor = self.class_floor(IoClass::Scrub);
        if self.interactive_active() > 0 {
            floor
        } else if self.nia_holdoff > 0 {
            // max(1, ..): Scrub must be able to count the hold-off down itself.
            floor.max(1).min(max)
        } else {
            max
        }
    }

    fn interactive_active(&self) -> u32 {
        IoClass::ALL
            .iter()
            .filter(|c| c.is_interactive())
            .fold(0u32, |acc, c| {
                acc.saturating_add(self.classes[c.index()].active)
            })
    }

    fn has_room(&self, class: IoClass, cap: u32) -> bool {
        let st = &self.classes[class.index()];
        !st.order.is_empty() && st.active < cap
    }

    fn choose_class(&self) -> Option<IoClass> {
        if self.active_total >= self.limits.max_active_total {
            return None;
        }
        for step in 1..=IO_CLASSES {
            let class = IoClass::ALL[(self.last_class + step) % IO_CLASSES];
            if self.has_room(class, self.class_floor(class)) {
                return Some(class);
            }
        }
        IoClass::ALL
            .into_iter()
            .find(|&class| self.has_room(class, self.class_max_active(class)))
    }

    // ----- I/O choice and aggregation ------------------------------------

    /// FIFO head. For LBA classes: the first I/O at or after the head in the
    /// oldest bucket, or else the lowest offset in that bucket.
    fn pick_in_class(&self, class: IoClass) -> Option<u64> {
        let order = &self.classes[class.index()].order;
        let &(bucket, _, first_id) = order.iter().next()?;
        if class.is_fifo() {
            return Some(first_id);
        }
        // from <= to always holds, so range() cannot panic.
        let from = (bucket, self.last_end, 0);
        let to = (bucket, u64::MAX, u64::MAX);
        Some(order.range(from..=to).next().map_or(first_id, |k| k.2))
    }

    fn gap_limit(&self, class: IoClass, kind: IoKind) -> u64 {
        match (class, kind) {
            (IoClass::Trim, _) => 0,
            (_, IoKind::Read) => self.limits.read_gap_limit_bytes,
            (_, IoKind::Write) => self.limits.write_gap_limit_bytes,
        }
    }

    /// Ids to issue together with `first_id`, in offset order (see the
    /// Aggregation section of the module doc).
    fn aggregate(&self, class: IoClass, first_id: u64) -> Vec<u64> {
        let Some(first) = self.entries.get(&first_id) else {
            return Vec::new();
        };
        let limit = self
            .limits
            .aggregation_limit_bytes
            .min(AGGREGATION_HARD_MAX_BYTES);
        if first.len >= limit {
            return vec![first_id];
        }
        let gap = self.gap_limit(class, first.kind);
        let index = &self.classes[class.index()].by_offset[first.kind.index()];
        let key = (first.offset, first_id);
        let (mut start, mut end) = (first.offset, first.end());
        let mut ids = Vec::new();
        for &(_, id) in index.range(..key).rev() {
            let Some(p) = self.entries.get(&id) else {
                break;
            };
            if p.end() > start || start - p.end() > gap || end - p.offset > limit {
                break;
            }
            start = p.offset;
            ids.push(id);
        }
        ids.reverse();
        ids.push(first_id);
        for &(_, id) in index.range((Excluded(key), Unbounded)) {
            let Some(n) = self.entries.get(&id) else {
                break;
            };
            if n.offset < end || n.offset - end > gap || n.end() - start > limit {
                break;
            }
            end = n.end();
            ids.push(id);
        }
        ids
    }

    /// Remove `ids` (in offset order) from every index and build the issue.
    fn take_parts(&mut self, class: IoClass, ids: &[u64]) -> Option<Issue<T>> {
        let mut parts = Vec::with_capacity(ids.len());
        let mut kind = IoKind::Read;
        let mut wait_ns = 0u64;
        for id in ids {
            let Some(e) = self.entries.remove(id) else {
                continue;
            };
            let st = &mut self.classes[class.index()];
            st.order.remove(&order_key(*id, &e));
            st.by_offset[e.kind.index()].remove(&(e.offset, *id));
            wait_ns = wait_ns.saturating_add(self.clock_ns.saturating_sub(e.enqueued_ns));
            kind = e.kind;
            parts.push((e.offset, e.len, e.payload));
        }
        let offset = parts.first()?.0;
        let last = parts.last()?;
        let len = last.0.saturating_add(last.1).saturating_sub(offset);
        let issue = Issue {
            class,
            kind,
            offset,
            len,
            parts,
        };
        self.record_issue(&issue, wait_ns);
        Some(issue)
    }

    fn record_issue(&mut self, issue: &Issue<T>, wait_ns: u64) {
        let n = issue.parts.len() as u64;
        let payload: u64 = issue.parts.iter().fold(0, |a, p| a.saturating_add(p.1));
        let s = &mut self.classes[issue.class.index()].stats;
        s.issued_ops = s.issued_ops.saturating_add(1);
        s.issued_parts = s.issued_parts.saturating_add(n);
        s.aggregated_parts = s.aggregated_parts.saturating_add(n.saturating_sub(1));
        s.issued_bytes = s.issued_bytes.saturating_add(issue.len);
        s.gap_bytes = s
            .gap_bytes
            .saturating_add(issue.len.saturating_sub(payload));
        s.queue_wait_ns = s.queue_wait_ns.saturating_add(wait_ns);
    }

    // ----- invariants ----------------------------------------------------

    fn check_invariants_debug(&self) {
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Assert the invariants listed in the module doc. Panics on violation.
    /// A violation is always a bug in this module, never a caller error.
    pub fn check_invariants(&self) {
        self.check_index_sizes();
        self.check_active_counts();
        self.check_ceilings();
        if cfg!(test) || self.entries.len() <= DEEP_CHECK_MAX_ENTRIES {
            self.check_entries_indexed();
        }
    }

    /// Invariant 1, the cheap half: all indexes hold the same number of keys.
    fn check_index_sizes(&self) {
        let mut sum = 0usize;
        for (i, st) in self.classes.iter().enumerate() {
            let by_offset = st.by_offset[0].len() + st.by_offset[1].len();
            assert_eq!(
                st.order.len(),
                by_offset,
                "class {i}: order/offset index sizes differ"
            );
            sum += st.order.len();
        }
        assert_eq!(
            sum,
            self.entries.len(),
            "index sizes do not add up to queued_total"
        );
    }

    /// Invariants 3 and 4.
    fn check_active_counts(&self) {
        let mut sum = 0u64;
        for (i, st) in self.classes.iter().enumerate() {
            let cap = self.limits.max_active[i].max(st.grace);
            assert!(
                st.active <= cap,
                "class {i}: {} active > limit {cap}",
                st.active
            );
            sum += u64::from(st.active);
        }
        assert_eq!(
            sum,
            u64::from(self.active_total),
            "active_total != sum of classes"
        );
        let cap = self.limits.max_active_total.max(self.total_grace);
        assert!(
            self.active_total <= cap,
            "{} active > total limit {cap}",
            self.active_total
        );
    }

    /// Invariants 5 and 6.
    fn check_ceilings(&self) {
        for class in IoClass::ALL {
            let (floor, ceil) = (self.class_floor(class), self.class_max_active(class));
            let max = self.limits.max_active[class.index()];
            assert!(
                floor <= ceil && ceil <= max,
                "{class:?}: floor {floor} ceil {ceil} max {max}"
            );
        }
        assert!(
            self.nia_holdoff <= self.limits.nia_credit,
            "hold-off above nia_credit"
        );
        assert!(self.last_class < IO_CLASSES);
    }

    /// Invariants 1 and 2, the O(n) half. Together with the size check this
    /// proves that the indexes hold exactly the queued entries.
    fn check_entries_indexed(&self) {
        for (&id, e) in &self.entries {
            let st = &self.classes[e.class.index()];
            assert!(
                st.order.contains(&order_key(id, e)),
                "id {id} missing from order index"
            );
            assert!(
                st.by_offset[e.kind.index()].contains(&(e.offset, id)),
                "id {id} not in offset index"
            );
            assert!(
                e.offset.checked_add(e.len).is_some(),
                "id {id}: range overflows"
            );
            assert_eq!(
                e.bucket,
                bucket_of(e.enqueued_ns, self.limits.bucket_ns),
                "id {id}: stale bucket"
            );
        }
    }
}

/// The active count to tolerate above `limit`, or 0 if not over it.
fn over_limit(active: u32, limit: u32) -> u32 {
    if active > limit {
        active
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;
    const M: u64 = 1024 * 1024;

    fn io(class: IoClass, kind: IoKind, offset: u64, len: u64, p: u32) -> QueuedIo<u32> {
        QueuedIo::new(class, kind, offset, len, p)
    }

    fn payloads(issue: &Issue<u32>) -> Vec<u32> {
        issue.parts.iter().map(|p| p.2).collect()
    }

    /// Issue and immediately complete until empty; return payload order.
    fn drain_serial(q: &mut VdevQueue<u32>) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        while let Some(issue) = q.next_issue(0) {
            out.push(payloads(&issue));
            q.complete(issue.class);
        }
        out
    }

    #[test]
    fn priority_order_when_no_floors() {
        let l = QueueLimits {
            min_active: [0; IO_CLASSES],
            ..QueueLimits::default()
        };
        let mut q = VdevQueue::new(l);
        q.set_dirty(100, 100);
        for (i, c) in IoClass::ALL.iter().enumerate().rev() {
            let kind = if i % 2 == 0 {
                IoKind::Read
            } else {
                IoKind::Write
            };
            q.enqueue(io(*c, kind, i as u64 * 10 * M, 4 * K, i as u32), 0);
        }
        assert_eq!(
            drain_serial(&mut q),
            vec![vec![0], vec![1], vec![2], vec![3], vec![4], vec![5]]
        );
    }

    #[test]
    fn min_active_round_robin_then_priority() {
        let l = QueueLimits {
            min_active: [1; IO_CLASSES],
            max_active: [10; IO_CLASSES],
            ..QueueLimits::default()
        };
        let mut q = VdevQueue::new(l);
        let mut p = 0;
        for c in [IoClass::SyncRead, IoClass::AsyncRead, IoClass::Scrub] {
            for _ in 0..2 {
                q.enqueue(io(c, IoKind::Read, u64::from(p) * 10 * M, 4 * K, p), 0);
                p += 1;
            }
        }
        let mut order = Vec::new();
        while let Some(issue) = q.next_issue(0) {
            order.push(issue.class);
        }
        use IoClass::*;
        // Floor pass: one each, round robin. Then the ceiling pass by
        // priority. Scrub is held at its floor (1) while interactive I/O is
        // active.
        assert_eq!(order, vec![SyncRead, AsyncRead, Scrub, SyncRead, AsyncRead]);
        assert_eq!(q.queued_total(), 1);
    }

    #[test]
    fn round_robin_floor_pass_rotates_under_total_limit() {
        let l = QueueLimits {
            max_active_total: 1,
            ..QueueLimits::default()
        };
        let mut q = VdevQueue::new(l);
        for i in 0..4u32 {
            q.enqueue(
                io(
                    IoClass::SyncRead,
                    IoKind::Read,
                    u64::from(i) * 10 * M,
                    4 * K,
                    i,
                ),
                0,
            );
            q.enqueue(
                io(
                    IoClass::AsyncRead,
                    IoKind::Read,
                    u64::from(i) * 10 * M + 5 * M,
                    4 * K,
                    100 + i,
                ),
                0,
            );
        }
        let mut classes = Vec::new();
        while let Some(issue) = q.next_issue(0) {
            assert!(q.next_issue(0).is_none(), "total limit of 1 must hold");
            classes.push(issue.class);
            q.complete(issue.class);
        }
        // Both are below their floor, so the floor pass alternates between them.
        assert_eq!(
            &classes[..4],
            &[
                IoClass::SyncRead,
                IoClass::AsyncRead,
                IoClass::SyncRead,
                IoClass::AsyncRead
            ]
        );
    }

    #[test]
    fn async_write_depth_follows_dirty() {
        let mut q: VdevQueue<u32> = VdevQueue::new(QueueLimits::default());
        assert_eq!(
            q.async_write_max_active(),
            2,
            "unknown dirty level acts as 0 %"
        );
        for (pct, want) in [(0, 2), (30, 2), (45, 6), (60, 10), (90, 10)] {
            q.set_dirty(pct * 1000, 100_000);
            assert_eq!(q.async_write_max_active(), want, "at {pct}% dirty");
        }
        q.set_dirty(45_000, 100_000);
        for i in 0..20u32 {
            q.enqueue(
                io(
                    IoClass::AsyncWrite,
                    IoKind::Write,
                    u64::from(i) * M,
                    4 * K,
                    i,
                ),
                0,
            );
        }
        let mut n = 0;
        while q.next_issue(0).is_some() {
            n += 1;
        }
        assert_eq!(n, 6);
    }

    #[test]
    fn sync_classes_are_fifo() {
        for c in [IoClass::SyncRead, IoClass::SyncWrite] {
            let mut q = VdevQueue::new(QueueLimits::default());
            for (i, off) in [50u64, 10, 30, 0, 40].iter().enumerate() {
                q.enqueue(io(c, IoKind::Read, off * M, 4 * K, i as u32), i as u64);
            }
            assert_eq!(
                drain_serial(&mut q),
                vec![vec![0], vec![1], vec![2], vec![3], vec![4]]
            );
        }
    }

    #[test]
    fn async_writes_issue_as_elevator_sweep() {
        let mut q = VdevQueue::new(QueueLimits::default());
        for off in [5u64, 1, 3] {
            q.enqueue(
                io(
                    IoClass::AsyncWrite,
                    IoKind::Write,
                    off * M,
                    4 * K,
                    off as u32,
                ),
                0,
            );
        }
        let first: Vec<u32> = (0..2)
            .map(|_| {
                let i = q.next_issue(0).expect("issue");
                q.complete(i.class);
                i.parts[0].2
            })
            .collect();
        assert_eq!(first, vec![1, 3]);
        // Head is now just past 3 MiB. New I/O at 2 and 8 joins the same bucket.
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 8 * M, 4 * K, 8), 1);
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 2 * M, 4 * K, 2), 2);
        assert_eq!(drain_serial(&mut q), vec![vec![5], vec![8], vec![2]]);
    }

    #[test]
    fn older_bucket_goes_first() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 9 * M, 4 * K, 9), 0);
        q.enqueue(
            io(IoClass::AsyncWrite, IoKind::Write, 0, 4 * K, 0),
            1_000_000_000,
        );
        assert_eq!(drain_serial(&mut q), vec![vec![9], vec![0]]);
    }

    #[test]
    fn rebucket_on_bucket_ns_change() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 9 * M, 4 * K, 9), 0);
        q.enqueue(
            io(IoClass::AsyncWrite, IoKind::Write, 0, 4 * K, 0),
            1_000_000_000,
        );
        let mut l = q.limits().clone();
        l.bucket_ns = 0; // a single bucket: pure elevator
        q.set_limits(l);
        assert_eq!(drain_serial(&mut q), vec![vec![0], vec![9]]);
    }

    #[test]
    fn eight_adjacent_writes_aggregate_to_one_mib() {
        let mut q = VdevQueue::new(QueueLimits::default());
        for i in 0..9u32 {
            // Spread across buckets: neighbours must be found regardless.
            q.enqueue(
                io(
                    IoClass::AsyncWrite,
                    IoKind::Write,
                    u64::from(i) * 128 * K,
                    128 * K,
                    i,
                ),
                u64::from(i) * 300_000_000,
            );
        }
        let a = q.next_issue(0).expect("issue");
        assert_eq!((a.offset, a.len, a.parts.len()), (0, M, 8));
        assert_eq!(payloads(&a), (0..8).collect::<Vec<_>>());
        let b = q.next_issue(0).expect("issue");
        assert_eq!((b.offset, b.len, payloads(&b)), (M, 128 * K, vec![8]));
        assert!(q.is_empty());
        let s = q.stats().classes[IoClass::AsyncWrite.index()];
        assert_eq!(
            (
                s.issued_ops,
                s.issued_parts,
                s.aggregated_parts,
                s.issued_bytes
            ),
            (2, 9, 7, 9 * 128 * K)
        );
    }

    #[test]
    fn aggregation_grows_backwards_and_forwards() {
        let mut q = VdevQueue::new(QueueLimits::default());
        for (p, off) in [(0u32, 128 * K), (1, 0), (2, 256 * K)] {
            q.enqueue(io(IoClass::SyncWrite, IoKind::Write, off, 128 * K, p), 0);
        }
        let a = q.next_issue(0).expect("issue");
        assert_eq!((a.offset, a.len, payloads(&a)), (0, 384 * K, vec![1, 0, 2]));
    }

    #[test]
    fn oversized_io_issued_alone() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 0, 2 * M, 0), 0);
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 2 * M, 4 * K, 1), 0);
        assert_eq!(drain_serial(&mut q), vec![vec![0], vec![1]]);
    }

    #[test]
    fn write_gaps_not_bridged_by_default() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 0, 4 * K, 0), 0);
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 8 * K, 4 * K, 1), 0);
        assert_eq!(drain_serial(&mut q), vec![vec![0], vec![1]]);

        let l = QueueLimits {
            write_gap_limit_bytes: 4 * K,
            ..QueueLimits::default()
        };
        let mut q = VdevQueue::new(l);
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 0, 4 * K, 0), 0);
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 8 * K, 4 * K, 1), 0);
        assert_eq!(drain_serial(&mut q), vec![vec![0, 1]]);
        assert_eq!(
            q.stats().classes[IoClass::AsyncWrite.index()].gap_bytes,
            4 * K
        );
    }

    #[test]
    fn trim_never_bridges_gaps() {
        let l = QueueLimits {
            write_gap_limit_bytes: 64 * K,
            read_gap_limit_bytes: 64 * K,
            ..QueueLimits::default()
        };
        let mut q = VdevQueue::new(l);
        q.enqueue(io(IoClass::Trim, IoKind::Write, 0, 4 * K, 0), 0);
        q.enqueue(io(IoClass::Trim, IoKind::Write, 8 * K, 4 * K, 1), 0);
        q.enqueue(io(IoClass::Trim, IoKind::Write, 12 * K, 4 * K, 2), 0);
        assert_eq!(drain_serial(&mut q), vec![vec![0], vec![1, 2]]);
    }

    #[test]
    fn read_gaps_bridged_up_to_limit() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 0, 4 * K, 0), 0);
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 36 * K, 4 * K, 1), 0); // gap 32 KiB
        q.enqueue(
            io(IoClass::AsyncRead, IoKind::Read, 72 * K + 1, 4 * K, 2),
            0,
        ); // gap 32 KiB + 1
        let a = q.next_issue(0).expect("issue");
        assert_eq!((a.offset, a.len, payloads(&a)), (0, 40 * K, vec![0, 1]));
        let b = q.next_issue(0).expect("issue");
        assert_eq!(payloads(&b), vec![2]);
    }

    #[test]
    fn classes_and_kinds_never_merge() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Write, 0, 4 * K, 0), 0);
        q.enqueue(io(IoClass::SyncWrite, IoKind::Write, 4 * K, 4 * K, 1), 0);
        q.enqueue(io(IoClass::AsyncWrite, IoKind::Read, 8 * K, 4 * K, 2), 0);
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 12 * K, 4 * K, 3), 0);
        q.enqueue(io(IoClass::Scrub, IoKind::Read, 16 * K, 4 * K, 4), 0);
        let mut seen = Vec::new();
        while let Some(i) = q.next_issue(0) {
            assert_eq!(i.parts.len(), 1);
            seen.push(i.parts[0].2);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn scrub_held_back_while_interactive_active() {
        let mut q = VdevQueue::new(QueueLimits::default()); // scrub 1/3, nia 5
        for i in 0..20u32 {
            q.enqueue(
                io(IoClass::Scrub, IoKind::Read, u64::from(i) * M, 4 * K, i),
                0,
            );
        }
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 100 * M, 4 * K, 99), 0);
        let mut active = Vec::new();
        while let Some(i) = q.next_issue(0) {
            active.push(i.class);
        }
        let scrub = IoClass::Scrub.index();
        assert_eq!(q.stats().classes[scrub].active, 1, "held to min_active");
        q.complete(IoClass::AsyncRead);
        assert!(q.next_issue(0).is_none(), "still held during the hold-off");
        for n in 0..5 {
            assert_eq!(q.stats().nia_holdoff, 5 - n);
            q.complete(IoClass::Scrub);
            assert!(q.next_issue(0).is_some());
            assert!(q.next_issue(0).is_none() || n == 4);
        }
        // Hold-off is over: Scrub may now run at max_active (3).
        while q.next_issue(0).is_some() {}
        assert_eq!(q.stats().classes[scrub].active, 3);
    }

    #[test]
    fn lowering_limits_leaves_active_but_blocks_new() {
        let mut q = VdevQueue::new(QueueLimits::default());
        for i in 0..20u32 {
            q.enqueue(
                io(IoClass::SyncRead, IoKind::Read, u64::from(i) * M, 4 * K, i),
                0,
            );
        }
        while q.next_issue(0).is_some() {}
        assert_eq!(q.active_total(), 10);
        let mut l = q.limits().clone();
        l.max_active[0] = 2;
        l.max_active_total = 3;
        q.set_limits(l);
        for _ in 0..7 {
            assert!(q.next_issue(0).is_none());
            q.complete(IoClass::SyncRead);
        }
        assert!(q.next_issue(0).is_none(), "3 active, class limit 2");
        q.complete(IoClass::SyncRead);
        assert!(q.next_issue(0).is_none(), "2 active, class limit 2");
        q.complete(IoClass::SyncRead);
        assert!(q.next_issue(0).is_some());
    }

    #[test]
    fn hostile_ranges_do_not_panic() {
        let mut q = VdevQueue::new(QueueLimits::default());
        q.enqueue(
            io(IoClass::AsyncRead, IoKind::Read, u64::MAX - 10, 100, 0),
            u64::MAX,
        );
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, u64::MAX, 0, 1), 0);
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 0, 0, 2), 0);
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 0, 0, 3), 0);
        q.enqueue(io(IoClass::AsyncRead, IoKind::Read, 0, u64::MAX, 4), 0);
        let mut n = 0;
        while let Some(i) = q.next_issue(u64::MAX) {
            n += i.parts.len();
            q.complete(i.class);
        }
        assert_eq!(n, 5);
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "with no active I/O"))]
    fn complete_without_active_saturates() {
        let mut q: VdevQueue<u32> = VdevQueue::new(QueueLimits::default());
        q.complete(IoClass::Trim);
        assert_eq!(q.active_total(), 0);
    }

    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    type Meta = HashMap<u32, (IoClass, IoKind, u64, u64)>;

    fn random_io(rng: &mut XorShift, p: u32) -> QueuedIo<u32> {
        let class = IoClass::ALL[rng.below(IO_CLASSES as u64) as usize];
        let kind = if rng.below(2) == 0 {
            IoKind::Read
        } else {
            IoKind::Write
        };
        let offset = rng.below(1024) * 4 * K
            + if rng.below(10) == 0 {
                rng.below(4 * K)
            } else {
                0
            };
        let len = match rng.below(20) {
            0 => 2 * M,
            1 => 0,
            2..=4 => (1 + rng.below(64)) * 4 * K,
            _ => (1 + rng.below(4)) * 4 * K,
        };
        io(class, kind, offset, len, p)
    }

    fn random_limits(rng: &mut XorShift) -> QueueLimits {
        let mut l = QueueLimits::default();
        for i in 0..IO_CLASSES {
            l.min_active[i] = rng.below(4) as u32;
            l.max_active[i] = rng.below(6) as u32;
        }
        l.max_active_total = [0, 1, 4, 1000][rng.below(4) as usize];
        l.aggregation_limit_bytes = [0, 64 * K, M, 32 * M][rng.below(4) as usize];
        l.read_gap_limit_bytes = rng.below(3) * 16 * K;
        l.write_gap_limit_bytes = rng.below(2) * 8 * K;
        l.nia_credit = rng.below(6) as u32;
        l.bucket_ns = [0, 1_000, 500_000_000][rng.below(3) as usize];
        l
    }

    /// Check one issue against what was enqueued and the limits at the time.
    fn check_issue(i: &Issue<u32>, l: &QueueLimits, meta: &Meta, issued: &mut [bool]) {
        assert!(!i.parts.is_empty());
        assert_eq!(i.offset, i.parts[0].0);
        let last = i.parts[i.parts.len() - 1];
        assert_eq!(i.offset + i.len, last.0 + last.1);
        let limit = l.aggregation_limit_bytes.min(AGGREGATION_HARD_MAX_BYTES);
        assert!(
            i.parts.len() == 1 || i.len <= limit,
            "span {} over limit {limit}",
            i.len
        );
        let gap = match (i.class, i.kind) {
            (IoClass::Trim, _) => 0,
            (_, IoKind::Read) => l.read_gap_limit_bytes,
            (_, IoKind::Write) => l.write_gap_limit_bytes,
        };
        for w in i.parts.windows(2) {
            let end = w[0].0 + w[0].1;
            assert!(w[1].0 >= end && w[1].0 - end <= gap, "bad gap/overlap");
        }
        for &(off, len, p) in &i.parts {
            assert_eq!(meta[&p], (i.class, i.kind, off, len), "part {p} altered");
            assert!(!issued[p as usize], "payload {p} issued twice");
            issued[p as usize] = true;
        }
    }

    /// One `next_issue` call, checked against the limits in force before it.
    fn step_issue(
        q: &mut VdevQueue<u32>,
        meta: &Meta,
        issued: &mut [bool],
        out: &mut Vec<IoClass>,
    ) {
        let before = q.stats();
        let Some(i) = q.next_issue(0) else { return };
        let l = q.limits().clone();
        let c = i.class.index();
        assert!(before.active_total < l.max_active_total);
        assert!(before.classes[c].active < l.max_active[c]);
        if i.class == IoClass::AsyncWrite {
            assert!(before.classes[c].active < before.async_write_max_active.max(l.min_active[c]));
        }
        if i.class == IoClass::Scrub {
            assert!(before.classes[c].active < before.scrub_max_active.max(l.min_active[c]));
        }
        check_issue(&i, &l, meta, issued);
        out.push(i.class);
    }

    #[test]
    fn randomized_operations() {
        const OPS: usize = 10_000;
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut q = VdevQueue::new(QueueLimits::default());
        let (mut meta, mut issued) = (Meta::new(), vec![false; OPS]);
        let mut outstanding: Vec<IoClass> = Vec::new();
        let mut now = 0u64;
        for step in 0..OPS {
            now += rng.below(50_000_000);
            match rng.below(100) {
                0..=39 => {
                    let x = random_io(&mut rng, step as u32);
                    meta.insert(
                        step as u32,
                        (x.class, x.kind, x.offset, x.len.min(u64::MAX - x.offset)),
                    );
                    q.enqueue(x, now);
                }
                40..=69 => step_issue(&mut q, &meta, &mut issued, &mut outstanding),
                70..=96 if !outstanding.is_empty() => {
                    let c = outstanding.swap_remove(rng.below(outstanding.len() as u64) as usize);
                    q.complete(c);
                }
                97 | 98 => q.set_dirty(rng.below(1000), 1000),
                99 => q.set_limits(random_limits(&mut rng)),
                _ => {}
            }
            assert_eq!(q.active_total() as usize, outstanding.len());
        }
        // Drain with default limits and full dirty data: everything must come out.
        q.set_limits(QueueLimits::default());
        q.set_dirty(1000, 1000);
        let mut guard = 0;
        while !q.is_idle() {
            guard += 1;
            assert!(guard < 10 * OPS, "queue failed to drain");
            step_issue(&mut q, &meta, &mut issued, &mut outstanding);
            if let Some(c) = outstanding.pop() {
                q.complete(c);
            }
        }
        assert!(outstanding.is_empty());
        for p in meta.keys() {
            assert!(issued[*p as usize], "payload {p} never issued");
        }
        assert_eq!(issued.iter().filter(|b| **b).count(), meta.len());
        let s = q.stats();
        let parts: u64 = s.classes.iter().map(|c| c.issued_parts).sum();
        assert_eq!(parts as usize, meta.len());
    }
}
