//! Scrub: read every copy of every block the pool references, check each
//! against its block pointer's checksum, and rewrite a damaged copy from a
//! good one (OpenZFS's `dsl_scan` with its sorted issue). What repairs is
//! the other copies: a mirror's children, and ditto copies — `copies`, and
//! the extra copies `redundant_metadata` gives metadata. A scan covers the
//! tree of one synced txg N, keeps its figures and its position in the
//! MOS, and continues after an export, a crash or a killed daemon.
//!
//! ```text
//!  1. hold frees      allocator: frees after the walked txg stay deferred
//!  2. gather          walk the last synced tree (verify's walker):
//!                     metadata read on the way, every block noted once;
//!                     keep the blocks born (physically) by txg N
//!  3. sort            one entry per copy and leaf (a mirror holds each
//!                     copy once per child), by (offset / SCAN_EXTENT,
//!                     vdev, child, offset) — each leaf in ascending
//!                     offsets, all leaves at once (`ScanOrder`); drop the
//!                     copies at or before the saved position
//!  4. issue           adjacent copies read as one extent (≤ SCAN_EXTENT
//!                     and tarn_scan_read_max_bytes, 128 KiB),
//!                     issued in order without waiting, up to
//!                     zfs_scan_vdev_limit bytes read and not yet checked
//!                     per leaf; SCAN_WORKERS threads check each copy on
//!                     its own as its run's read completes;
//!                     IoClass::Scrub, so the scheduler gives foreground
//!                     I/O priority; one run at a time
//!                     after zfs_scrub_delay_ms while foreground I/O is
//!                     recent (`idle`: the scheduler cannot see leaves
//!                     that share a disk); paced by
//!                     tarn_scan_limit_bytes_per_sec (each run charged
//!                     as it is issued)
//!  5. repair          a bad copy at once: another copy of its block (on
//!                     another child, or another DVA) read, checked and
//!                     written over it, flushed (the scan keeps no data
//!                     in memory)
//!  6. commit          a run's figures join the scan's, and the position
//!                     moves past it, once every earlier run is done too
//!  7. release frees
//! ```
//!
//! Why the hold makes repair safe: a pass reads the tree of synced txg R
//! while the pool goes on. A block of that tree freed later (txg > R)
//! would, once its deferral ended, be allocated to new data; a repair
//! written there afterwards would destroy it. While the hold lasts, such
//! frees stay deferred (`Allocator::hold_frees_after`), so every copy the
//! pass found is still the block it was, or free space: rewriting the
//! block's own bytes there is harmless either way. The cost: space freed
//! during a scan (the scan record's own MOS updates included, a few blocks
//! a txg) becomes allocatable only when the pass ends.
//!
//! A block no copy of which verifies is an error of the report and enters
//! the pool's error log under its bookmark (`status -v` names its file);
//! its first copy in sorted order reports it, so once per scan. Every bad
//! copy counts a checksum error against its device, as a read does, and
//! is a checksum ereport in the pool's events (`events`).
//!
//! ## The record, and resuming
//! The scan's state lives in a MOS object (`record`, docs/format.md §11c):
//! function (scrub, or resilver), state (scanning, finished, canceled),
//! when paused, the txg N it covers, start and end time, bytes to examine
//! and examined, copies, reads, bad and repaired copies, errors, time
//! spent, its order, and — for a scrub — the *position*: the greatest
//! (vdev, child, offset), in the scan's order, such that every copy at or
//! before it has been checked and, if bad, repaired. The
//! sync thread writes it in every txg in which it changed (a pass changes
//! it with every run it commits), so an idle pool syncs every
//! `zfs_txg_timeout` while a scan runs; never per I/O.
//!
//! Import loads the record. A finished or canceled scan is what `status`
//! shows; a scrub under way continues at once (a paused one when `pool
//! scrub` resumes it): a new pass walks the tree of the txg R now synced,
//! keeps the blocks whose physical birth is ≤ N, drops the copies at or
//! before the position, and adds its figures to the saved ones. Closing
//! the pool (export, daemon stop) stops a pass without ending the scan;
//! `-s` ends it as canceled. A resilver keeps no position: the leaves'
//! DTLs (`pool::resilver`) say what is left, and import starts a new one
//! from them — which goes first, ending a scrub under way as canceled.
//!
//! Why the position is a sound resume key although the tree changes
//! between N and R (blocks freed, their space reallocated): a block never
//! moves, and it is referenced from the txg that wrote it until the txg
//! that frees it, never after (a clone copies a pointer that is live; a
//! rollback returns to a snapshot that still references its blocks). Take
//! a copy the new pass finds with physical birth b ≤ N: its block is
//! referenced at R, so it was at N too, at the same DVA, and the first
//! pass sorted this very copy under the same key. If that key is at or
//! before the position, the first pass checked it; else the new pass
//! does. So every copy of N's tree that still exists is checked once, and
//! none twice. Space freed and reallocated after N holds blocks of
//! physical birth > N, which the birth filter drops wherever they sit —
//! before the position or after it (they are new, checksummed as they
//! were written). A cloned block is new in its file but old on disk,
//! hence the *physical* birth. The figures agree: they count the copies of
//! committed runs only, so a run a crash interrupted is read again and
//! counted once — though a repair it made before the crash then goes
//! uncounted (the copy reads good). (Two blocks sharing a DVA — a damaged
//! pool — would share a key; `verify` reports that.) A mirror child is
//! keyed by its place among its vdev's children, which no command
//! changes yet; attach and detach will have to keep it (or restart the
//! scrub) — a child that was down in the first pass and is back is skipped
//! where the position has passed it, its resilver's business.
//!
//! ## Logical order (`zfs_scan_legacy`)
//! For comparison, a scrub can read its copies as the walk found their
//! blocks (OpenZFS's scan before sorted issue): step 3 keeps the walk's
//! order and drops nothing; runs still merge copies that happen to be
//! adjacent. The order is chosen when the scan starts and kept in the
//! record, so a change of the tunable applies to the next scrub. Such a
//! scan commits no position — a place in the walk is no resume key, since
//! the tree the next pass walks differs — so a pass that continues it
//! after an import starts over (`Scanner::start_over`): the same scan
//! (start time kept, `resumes` counted), figures from zero, the tree of
//! the txg now synced, every copy checked again. Honest, and no copy is
//! counted twice; what the first pass did is lost except its repairs.
//!
//! A pool runs at most one scan at a time, on a thread of its own
//! (`Scanner`): `tarn pool scrub` starts it (or resumes a paused one), `-p`
//! pauses it and `-s` cancels it (both take effect between extents; a
//! paused pass keeps its hold on frees), and `status` shows its progress
//! with a rate and a time left — measured over this pass only, since the
//! saved figures were made by another process — and, once done, what it
//! found (as zpool's "scan:" line).
//!
//! ## Bounds
//! - memory of a pass: one entry per block and per copy of the synced tree
//!   (as verify's walk), plus the figures of at most one entry per run
//!   finished ahead of a slower worker;
//! - per leaf, at most `zfs_scan_vdev_limit` bytes of runs (each ≤
//!   `tarn_scan_read_max_bytes` and `SCAN_EXTENT`, or one larger block) read and not yet checked — or one
//!   run, when a run alone exceeds it; `SCAN_WORKERS` threads check them;
//!   at most `SCAN_ERRORS_KEPT` error messages kept (all counted);
//! - pacing waits in slices of at most `PACE_SLICE`, so pause, cancel and
//!   close are seen within one.
//!
//! ## Invariants
//! - the position only moves forward within a pass, and every copy at or
//!   before it is checked (`Progress` commits runs in order);
//! - bad ≤ copies checked, for a scrub repaired ≤ bad, walk errors ≤
//!   errors (`record::check`, before every write and after every read);
//! - a pass never covers a txg newer than the tree it walks (`issue::pass`).
//!
//! Why all leaves at once: sorted leaf after leaf (vdev, child, offset),
//! the workers all read the same leaf, so a scrub of a mirror of two
//! disks kept one idle and took twice the time its disks allow; windows
//! of `SCAN_EXTENT` of offsets interleave the leaves while each still
//! sees ascending offsets.
//!
//! Why reads are issued ahead of the checks, per leaf: four workers that
//! each read a run and then checksummed it kept about two reads on each
//! of a mirror's devices, none queued while a checksum ran, and fewer
//! than one per device on a pool of more than four; OpenZFS keeps
//! `zfs_scan_vdev_limit` (16 MiB) in flight on every leaf, and so does
//! `issue` now, whatever the number of leaves. Scans recorded before this order (no `order`
//! in the record) continue leaf after leaf (`ScanOrder::ChildByChild`):
//! their position means nothing in another order.
//!
//! A RAID-Z copy is checked whole, once (child 0 in its key): its vdev
//! reads every column, parity included, verifies the block, rebuilds wrong
//! columns from parity and rewrites them (`Vdev::scrub_columns`); a copy
//! parity cannot heal is rewritten whole from another copy of its block
//! (`Vdev::rewrite_columns`), if it has one.

mod idle;
mod issue;
mod record;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::core::PoolCore;
use super::events::{class, EventLog, Post};
use crate::error::{Error, ErrorKind, Result};
use crate::object::Objset;
use crate::sys::clock::now_secs;

pub use idle::ForegroundIo;
pub(crate) use issue::{pass, PassEnd};

/// The event of a scan starting; a resilver's says which kind
/// (`resilver_type`: healing, or sequential for a rebuild, as OpenZFS's).
fn start_post(func: ScanFunc, rebuild_vdev: Option<&str>) -> Post {
    match func {
        ScanFunc::Scrub => Post::new(class::SCRUB_START),
        ScanFunc::Resilver => with_type(Post::new(class::RESILVER_START), rebuild_vdev),
    }
}

/// A resilver event's `resilver_type` (and the vdev a rebuild copies).
fn with_type(p: Post, rebuild_vdev: Option<&str>) -> Post {
    match rebuild_vdev {
        Some(v) => p.text("resilver_type", "sequential").text("rebuild_vdev", v),
        None => p.text("resilver_type", "healing"),
    }
}

/// The event of a scan that ended (not a pass stopped by a close: the
/// scan goes on at the next import): scrub_finish, scrub_abort
/// (canceled), resilver_finish (with `scan_canceled`: OpenZFS has no
/// resilver abort, its resilvers restart instead), with its figures.
fn end_post(func: ScanFunc, r: &ScanReport, canceled: bool, rebuild_vdev: Option<&str>) -> Post {
    let cls = match (func, canceled) {
        (ScanFunc::Scrub, true) => class::SCRUB_ABORT,
        (ScanFunc::Scrub, false) => class::SCRUB_FINISH,
        (ScanFunc::Resilver, _) => class::RESILVER_FINISH,
    };
    let what = match rebuild_vdev {
        Some(v) => format!("sequential resilver of {}", v),
        None => func.name().to_string(),
    };
    let line = format!(
        "{} of txg {} {}: {} copies of {} blocks checked ({} bytes), {} bad, {} repaired ({} bytes), {} errors, in {:.1} s",
        what,
        r.txg,
        if canceled { "canceled" } else { "finished" },
        r.copies,
        r.blocks,
        r.bytes,
        r.bad_copies,
        r.repaired_copies,
        r.repaired_bytes,
        r.error_count,
        r.seconds
    );
    let p = if func == ScanFunc::Resilver { with_type(Post::new(cls), rebuild_vdev) } else { Post::new(cls) };
    p.dec("scan_txg", r.txg)
        .dec("scan_blocks", r.blocks)
        .dec("scan_copies", r.copies)
        .dec("scan_bytes", r.bytes)
        .dec("scan_bad_copies", r.bad_copies)
        .dec("scan_repaired_copies", r.repaired_copies)
        .dec("scan_repaired_bytes", r.repaired_bytes)
        .dec("scan_errors", r.error_count)
        .dec("scan_ms", (r.seconds * 1000.0) as u64)
        .dec("scan_canceled", u64::from(canceled))
        .line(line)
}

/// A block as a scan's reports name it.
pub(crate) fn block_name(bp: &tarn_ondisk::bp::BlockPtr) -> String {
    format!("{} block (level {}, birth {})", bp.otype.name(), bp.level, bp.birth)
}

/// The longest run of adjacent copies read in one request.
pub const SCAN_EXTENT: u64 = 1 << 20;
/// Threads that check a scrub's runs as their reads complete (the reads
/// themselves are bounded per leaf by `zfs_scan_vdev_limit`); a resilver's
/// copies in flight. The scrub class's queue limits still apply below:
/// foreground I/O goes first.
pub const SCAN_WORKERS: usize = 4;
/// Error messages a scan keeps (all are counted).
pub const SCAN_ERRORS_KEPT: usize = 100;
/// Longest sleep of a paced worker before it looks at pause, cancel and
/// the limit again.
const PACE_SLICE: Duration = Duration::from_millis(50);

/// What a scrub found and did: all of it, across resumes, except the
/// error messages (this import's passes only).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScanReport {
    /// The txg whose tree the scan covers (N; blocks born later are not
    /// checked).
    pub txg: u64,
    /// Blocks of that tree, as its first pass found them.
    pub blocks: u64,
    /// Copies read and checked, and their allocated bytes.
    pub copies: u64,
    pub bytes: u64,
    /// Device reads issued (runs of adjacent copies).
    pub reads: u64,
    /// Copies that failed their checksum or could not be read.
    pub bad_copies: u64,
    /// Bad copies rewritten from a good copy, and their bytes.
    pub repaired_copies: u64,
    pub repaired_bytes: u64,
    /// Errors: blocks with no good copy, repairs that failed, and errors
    /// of the last walk (metadata that could not be read, copies outside
    /// their device; counted anew by each pass).
    #[serde(default)]
    pub error_count: u64,
    #[serde(default)]
    pub walk_error_count: u64,
    /// The first `SCAN_ERRORS_KEPT` errors of this import's passes.
    pub errors: Vec<String>,
    /// Time spent scanning (paused time excluded), all passes.
    pub seconds: f64,
}

impl ScanReport {
    /// Counts an error, keeping its message while there is room.
    pub(crate) fn error(&mut self, why: String) {
        self.error_count += 1;
        if self.errors.len() < SCAN_ERRORS_KEPT {
            self.errors.push(why);
        }
    }

    /// Adds the counts of a run (or a worker's share) to these.
    pub(crate) fn add(&mut self, run: ScanReport) {
        self.copies += run.copies;
        self.bytes += run.bytes;
        self.reads += run.reads;
        self.bad_copies += run.bad_copies;
        self.repaired_copies += run.repaired_copies;
        self.repaired_bytes += run.repaired_bytes;
        self.error_count += run.error_count;
        let room = SCAN_ERRORS_KEPT.saturating_sub(self.errors.len());
        self.errors.extend(run.errors.into_iter().take(room));
    }
}

/// Where a pool's scan is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScanState {
    /// No scan recorded.
    #[default]
    None,
    Scanning,
    Finished,
    Canceled,
}

/// What a scan does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScanFunc {
    /// Check every copy, repair the damaged ones (`pool::scan`).
    #[default]
    Scrub,
    /// Copy onto leaves what they missed (`pool::resilver`).
    Resilver,
}

impl ScanFunc {
    pub fn name(self) -> &'static str {
        match self {
            ScanFunc::Scrub => "scrub",
            ScanFunc::Resilver => "resilver",
        }
    }
}

/// The order in which a scrub reads its copies, fixed when it starts
/// (`zfs_scan_legacy`) and kept in its record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScanOrder {
    /// By (offset / SCAN_EXTENT, vdev, child, offset): every device sees
    /// ascending offsets, and all of them are read at once — each 1 MiB
    /// window of offsets on every leaf in turn, so the workers spread over
    /// the leaves; the position says how far the scan got.
    #[default]
    Sorted,
    /// By (vdev, child, offset): one leaf after the other. The order of
    /// scans recorded before `Sorted` (their record has no `order`), which
    /// continue in it.
    ChildByChild,
    /// As the walk of the tree finds the blocks (OpenZFS's legacy scan):
    /// no position; a pass that continues the scan starts it over.
    Logical,
}

impl ScanOrder {
    /// Where the copy at `p` comes in this order (for `Logical`, which has
    /// no position, the key of `ChildByChild`: only to pick one copy of a
    /// block).
    pub fn key(self, p: &ScanPosition) -> (u64, u32, u32, u64) {
        match self {
            ScanOrder::Sorted => (p.offset / SCAN_EXTENT, p.vdev, p.child, p.offset),
            ScanOrder::ChildByChild | ScanOrder::Logical => (0, p.vdev, p.child, p.offset),
        }
    }
}

/// A copy's place: (vdev, child, offset). `child` is the leaf's place in
/// `Vdev::scan_leaves` (0 for a plain device). Compared only through the
/// scan's order (`ScanOrder::key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanPosition {
    pub vdev: u32,
    #[serde(default)]
    pub child: u32,
    pub offset: u64,
}

/// A pool's scan as `status` shows it: its state, times (seconds since the
/// epoch), bytes to read and read so far, where it is, and what it found.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScanStatus {
    #[serde(default)]
    pub func: ScanFunc,
    pub state: ScanState,
    /// How a scrub orders its reads (a resilver: `Sorted`).
    #[serde(default)]
    pub order: ScanOrder,
    /// When the running scan was paused (0: it is not).
    #[serde(default)]
    pub paused_since: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub to_examine: u64,
    pub examined: u64,
    /// Every copy at or before it has been checked (None: none yet).
    #[serde(default)]
    pub position: Option<ScanPosition>,
    /// Passes that continued the scan (after an import).
    #[serde(default)]
    pub resumes: u64,
    /// The rate of the running pass (bytes checked a second, paused time
    /// excluded) and the seconds left at that rate, when known.
    #[serde(default)]
    pub rate_bytes_per_sec: u64,
    #[serde(default)]
    pub eta_secs: Option<u64>,
    pub report: ScanReport,
    /// A resilver that is a sequential rebuild (`pool::rebuild`): the
    /// top-level vdev it rebuilds, as `status` names it ("mirror-0").
    #[serde(default)]
    pub rebuild_vdev: Option<String>,
    /// The sequential rebuild that ended just before this scan (the scrub
    /// it started): `status` shows it beside the scrub, as zpool does.
    #[serde(default)]
    pub rebuild: Option<RebuildDone>,
}

/// A finished sequential rebuild, as `status` shows it after the scrub it
/// started has taken the scan's place.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RebuildDone {
    /// The top-level vdev rebuilt ("mirror-0").
    pub vdev: String,
    /// Bytes copied onto the new devices.
    pub bytes: u64,
    pub seconds: f64,
    pub errors: u64,
    pub end_time: u64,
}

/// What starting a scan needs of its caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// A paused pass continues on its thread.
    Resumed,
    /// A pass must be run (a new scan, or one continuing from its record).
    Run,
}

/// The running pass, for its rate and the scan's time.
struct Pass {
    start: Instant,
    examined_at_start: u64,
    seconds_before: f64,
    paused: Duration,
    paused_at: Option<Instant>,
}

impl Pass {
    fn new(examined: u64, seconds_before: f64) -> Pass {
        Pass { start: Instant::now(), examined_at_start: examined, seconds_before, paused: Duration::ZERO, paused_at: None }
    }

    /// Seconds the pass has scanned (not paused).
    fn active_secs(&self) -> f64 {
        let paused_now = self.paused_at.map_or(Duration::ZERO, |t| t.elapsed());
        self.start.elapsed().saturating_sub(self.paused + paused_now).as_secs_f64()
    }
}

#[derive(Default)]
struct Inner {
    status: ScanStatus,
    /// A pass runs (on the pool's scan thread, or `scrub_pausing`'s caller).
    running: bool,
    /// The pool closed: no pass runs again in this import.
    closed: bool,
    /// The record changed since the sync thread last wrote it.
    dirty: bool,
    /// The MOS object holding the record (0: none yet).
    object: u64,
    pass: Option<Pass>,
}

/// Why the running pass stops: nothing, `-s`, or the pool closing.
const HALT_NONE: u8 = 0;
const HALT_CANCEL: u8 = 1;
const HALT_STOP: u8 = 2;

/// The one scan a pool may run (see the module docs).
pub struct Scanner {
    pool: String,
    /// Where the scan's start, pause, resume and end are posted.
    events: Arc<EventLog>,
    st: Mutex<Inner>,
    done: Condvar,
    halt: AtomicU8,
    /// Set while paused (`pool scrub -p`); the workers wait on `resumed`.
    paused: Mutex<bool>,
    resumed: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Pacing: when the credit was last refilled, and the bytes it allows.
    pace: Mutex<(Instant, f64)>,
    /// The back-off while foreground I/O is recent (`idle`).
    backoff: idle::Backoff,
}

impl Scanner {
    pub(crate) fn new(pool: &str, events: Arc<EventLog>) -> Scanner {
        Scanner {
            pool: pool.to_string(),
            events,
            st: Mutex::new(Inner::default()),
            done: Condvar::new(),
            halt: AtomicU8::new(HALT_NONE),
            paused: Mutex::new(false),
            resumed: Condvar::new(),
            thread: Mutex::new(None),
            pace: Mutex::new((Instant::now(), 0.0)),
            backoff: idle::Backoff::default(),
        }
    }

    /// Takes the record of MOS object `obj` (import); a scan that was
    /// running stays `Scanning` (paused if it was) until a pass runs.
    pub(crate) fn restore(&self, mos: &Objset, obj: u64) -> Result<()> {
        let mut st = self.st.lock();
        // Kept even when the record is unreadable: the next one overwrites it.
        st.object = obj;
        st.status = record::load(mos, obj)?;
        *self.paused.lock() = st.status.paused_since != 0;
        Ok(())
    }

    /// Whether import found a scrub to continue now (under way, not
    /// paused).
    pub(crate) fn continues_after_import(&self) -> bool {
        let st = self.st.lock();
        st.status.state == ScanState::Scanning && st.status.func == ScanFunc::Scrub && st.status.paused_since == 0 && !st.running
    }

    /// A resilver the record has under way, with no pass and nothing left
    /// to resilver (its end was not synced): it finished.
    pub(crate) fn end_idle_resilver(&self) {
        let st = self.st.lock();
        let idle = st.status.state == ScanState::Scanning && st.status.func == ScanFunc::Resilver && !st.running;
        drop(st);
        if idle {
            self.end(PassEnd::Finished, None);
        }
    }

    /// Starts a scan of `func`, continues a scrub from its record, or
    /// resumes a paused pass; refuses while one runs. A resilver replaces
    /// a scan restored from the record (the caller cancels a scrub first).
    pub(crate) fn start(&self, func: ScanFunc) -> Result<Start> {
        self.start_as(func, None)
    }

    /// As `start`; a resilver with `rebuild_vdev` is a sequential rebuild
    /// of that top-level vdev (`pool::rebuild`).
    pub(crate) fn start_as(&self, func: ScanFunc, rebuild_vdev: Option<String>) -> Result<Start> {
        assert!(rebuild_vdev.is_none() || func == ScanFunc::Resilver, "pool '{}': only a resilver rebuilds", self.pool);
        let mut st = self.st.lock();
        if st.closed {
            return Err(Error::invalid(format!("pool '{}' is closed", self.pool)));
        }
        let under_way = st.status.state == ScanState::Scanning;
        if under_way && st.running {
            if st.status.paused_since != 0 && func == ScanFunc::Scrub {
                self.unpause(&mut st);
                self.events.post(Post::new(class::SCRUB_RESUME));
                return Ok(Start::Resumed);
            }
            let how = match st.status.func {
                ScanFunc::Scrub => format!("currently scrubbing; use 'tarn pool scrub -s {}' to cancel", self.pool),
                ScanFunc::Resilver => "currently resilvering".to_string(),
            };
            return Err(Error::new(ErrorKind::Busy, format!("cannot {} '{}': {}", func.name(), self.pool, how)));
        }
        if under_way && func == ScanFunc::Scrub && st.status.func == ScanFunc::Scrub {
            self.unpause(&mut st);
            st.pass = Some(Pass::new(st.status.examined, st.status.report.seconds));
            self.events.post(Post::new(class::SCRUB_RESUME).dec("scan_examined_bytes", st.status.examined));
        } else {
            self.events.post(start_post(func, rebuild_vdev.as_deref()));
            // A scrub keeps the rebuild that came before it on show.
            let rebuild = if func == ScanFunc::Scrub { st.status.rebuild.take() } else { None };
            st.status = ScanStatus { func, state: ScanState::Scanning, start_time: now_secs(), rebuild_vdev, rebuild, ..Default::default() };
            *self.paused.lock() = false;
            st.pass = Some(Pass::new(0, 0.0));
        }
        // The thread of the previous pass has ended (it cleared `running`
        // last); reap it.
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.halt.store(HALT_NONE, Ordering::Release);
        st.running = true;
        st.dirty = true;
        Ok(Start::Run)
    }

    pub(crate) fn set_thread(&self, t: JoinHandle<()>) {
        *self.thread.lock() = Some(t);
    }

    /// The pass about to walk the tree of `tree_txg`: the txg the scan
    /// covers, its order and where it continues from. A new scan takes
    /// this txg, and the order `legacy` says; a scan in logical order
    /// that was stopped starts over on this tree (it has no position).
    fn plan(&self, tree_txg: u64, legacy: bool) -> (u64, ScanOrder, Option<ScanPosition>) {
        let mut st = self.st.lock();
        assert!(st.running, "scan of pool '{}' planned without a pass", self.pool);
        if st.status.report.txg == 0 {
            st.status.report.txg = tree_txg;
            st.status.order = if legacy { ScanOrder::Logical } else { ScanOrder::Sorted };
        } else {
            st.status.resumes += 1;
            if st.status.order == ScanOrder::Logical {
                self.start_over(&mut st, tree_txg);
            }
        }
        st.dirty = true;
        assert!(st.status.order != ScanOrder::Logical || st.status.position.is_none(), "scan of pool '{}' in logical order with a position", self.pool);
        (st.status.report.txg, st.status.order, st.status.position)
    }

    /// A scan in logical order continues in a new pass (after an import):
    /// it knows which copies it checked only by their place in the walk of
    /// a tree that has changed since, so it checks them all again, on the
    /// tree of `tree_txg`, with its figures and time from zero (counting
    /// none twice). Its start time stays; `resumes` counts the pass.
    fn start_over(&self, st: &mut Inner, tree_txg: u64) {
        let s = &mut st.status;
        let line = format!("{} in logical order starts over on the tree of txg {}: it had checked {} bytes, but keeps no position", s.func.name(), tree_txg, s.examined);
        s.report = ScanReport { txg: tree_txg, ..Default::default() };
        (s.examined, s.to_examine, s.position) = (0, 0, None);
        st.pass = Some(Pass::new(0, 0.0));
        self.events.post(Post::new(class::SCRUB_START).dec("scan_txg", tree_txg).line(line));
    }

    /// The pass gathered its blocks: this walk's errors replace the last
    /// walk's, and the bytes still to check give the total.
    fn pass_gathered(&self, walk_errors: Vec<String>, remaining: u64, blocks: u64) {
        let mut st = self.st.lock();
        let r = &mut st.status.report;
        r.error_count -= r.walk_error_count;
        r.walk_error_count = walk_errors.len() as u64;
        walk_errors.into_iter().for_each(|e| r.error(e));
        if r.blocks == 0 {
            r.blocks = blocks;
        }
        st.status.to_examine = st.status.examined + remaining;
        st.dirty = true;
    }

    /// A run, and every run before it, is done: its figures join the
    /// scan's and the position moves past it.
    fn commit(&self, f: issue::RunFigures) {
        let mut st = self.st.lock();
        let s = &mut st.status;
        if let (Some(old), Some(new)) = (s.position, f.last) {
            assert!(s.order.key(&new) > s.order.key(&old), "scan position of pool '{}' moving back from {:?} to {:?}", self.pool, old, new);
        }
        s.position = f.last.or(s.position);
        s.report.add(f.counts);
        s.examined = s.report.bytes;
        st.dirty = true;
    }

    /// A resilver's figures (it counts as it copies; no position).
    pub(crate) fn set_to_examine(&self, bytes: u64) {
        let mut st = self.st.lock();
        st.status.to_examine = bytes;
        st.dirty = true;
    }

    pub(crate) fn set_examined(&self, bytes: u64) {
        let mut st = self.st.lock();
        st.status.examined = bytes;
        st.dirty = true;
    }

    /// A resilver's report, once it has ended.
    pub(crate) fn set_report(&self, report: ScanReport) {
        let mut st = self.st.lock();
        st.status.examined = st.status.examined.max(report.bytes);
        st.status.report = report;
        st.dirty = true;
    }

    /// Records the end of a pass (its thread's last step): the scan is
    /// over unless the pass was stopped by the pool closing.
    pub(crate) fn end(&self, how: PassEnd, failure: Option<String>) {
        let mut st = self.st.lock();
        if let Some(pass) = st.pass.take() {
            st.status.report.seconds = pass.seconds_before + pass.active_secs();
        }
        if let Some(why) = failure {
            st.status.report.error(why);
        }
        if how != PassEnd::Stopped {
            st.status.state = if how == PassEnd::Finished { ScanState::Finished } else { ScanState::Canceled };
            st.status.end_time = now_secs();
            st.status.paused_since = 0;
            *self.paused.lock() = false;
            // Posted before waiters wake: whoever waits for the scan finds it.
            self.events.post(end_post(st.status.func, &st.status.report, how == PassEnd::Canceled, st.status.rebuild_vdev.as_deref()));
        }
        st.running = false;
        st.dirty = true;
        self.done.notify_all();
    }

    /// Ends a sequential rebuild that finished and starts the scrub that
    /// checks what it copied, in one step (`pool wait -t resilver` sees
    /// the rebuild end; a wait for the scan waits for the scrub too); the
    /// caller's thread runs the scrub's pass. False (the rebuild ended,
    /// no scrub) when the pass was halted meanwhile.
    pub(crate) fn end_rebuild_then_scrub(&self) -> bool {
        let mut st = self.st.lock();
        assert!(st.running && st.status.func == ScanFunc::Resilver, "pool '{}': no rebuild to end", self.pool);
        let Some(vdev) = st.status.rebuild_vdev.clone() else { panic!("pool '{}': a healing resilver ended as a rebuild", self.pool) };
        if let Some(pass) = st.pass.take() {
            st.status.report.seconds = pass.seconds_before + pass.active_secs();
        }
        let end_time = now_secs();
        let r = &st.status.report;
        self.events.post(end_post(ScanFunc::Resilver, r, false, Some(&vdev)));
        let done = RebuildDone { vdev, bytes: r.repaired_bytes, seconds: r.seconds, errors: r.error_count, end_time };
        if self.halted().is_some() || st.closed {
            st.status.state = ScanState::Finished;
            st.status.end_time = end_time;
            st.running = false;
            st.dirty = true;
            self.done.notify_all();
            return false;
        }
        self.events.post(start_post(ScanFunc::Scrub, None).text("started_by", "sequential resilver"));
        st.status = ScanStatus { func: ScanFunc::Scrub, state: ScanState::Scanning, start_time: end_time, rebuild: Some(done), ..Default::default() };
        *self.paused.lock() = false;
        st.pass = Some(Pass::new(0, 0.0));
        st.dirty = true;
        self.done.notify_all();
        true
    }

    /// Cancels the scan (`scrub -s`), waiting for its pass to stop; false
    /// if no scan is under way.
    pub fn cancel(&self) -> bool {
        let mut st = self.st.lock();
        if st.status.state != ScanState::Scanning {
            return false;
        }
        if !st.running {
            // A scan restored paused: no pass to stop.
            drop(st);
            self.end(PassEnd::Canceled, None);
            return true;
        }
        self.halt.store(HALT_CANCEL, Ordering::Release);
        self.set_paused(false);
        while st.running {
            self.done.wait(&mut st);
        }
        true
    }

    /// Stops a running pass for good in this import (the pool closes, or
    /// was opened read-only); the scan stays `Scanning`, paused or not,
    /// for the next import, and `wait` no longer waits for it.
    pub(crate) fn stop(&self) {
        let mut st = self.st.lock();
        st.closed = true;
        if st.running {
            self.halt.store(HALT_STOP, Ordering::Release);
            // Wakes paused workers to stop; the status keeps `paused_since`.
            self.set_paused(false);
            while st.running {
                self.done.wait(&mut st);
            }
        }
        self.done.notify_all();
    }

    /// Pauses the scan (its reads stop after the extents in flight; the
    /// allocator's hold stays); false if none is under way.
    pub fn pause(&self) -> bool {
        let mut st = self.st.lock();
        if st.status.state != ScanState::Scanning {
            return false;
        }
        if st.status.paused_since == 0 {
            st.status.paused_since = now_secs().max(1);
            if let Some(p) = &mut st.pass {
                p.paused_at = Some(Instant::now());
            }
            st.dirty = true;
            self.events.post(Post::new(class::SCRUB_PAUSED));
        }
        self.set_paused(true);
        true
    }

    fn unpause(&self, st: &mut Inner) {
        st.status.paused_since = 0;
        if let Some(p) = &mut st.pass {
            if let Some(at) = p.paused_at.take() {
                p.paused += at.elapsed();
            }
        }
        st.dirty = true;
        self.set_paused(false);
    }

    fn set_paused(&self, on: bool) {
        *self.paused.lock() = on;
        self.resumed.notify_all();
    }

    /// Blocks while the scan is paused (and not halted).
    pub(crate) fn while_paused(&self) {
        let mut p = self.paused.lock();
        while *p && self.halted().is_none() {
            self.resumed.wait(&mut p);
        }
    }

    /// Whether the running pass must stop (canceled, or the pool closes).
    pub(crate) fn canceled(&self) -> bool {
        self.halted().is_some()
    }

    /// Why the running pass must stop, if it must.
    pub(crate) fn halted(&self) -> Option<PassEnd> {
        match self.halt.load(Ordering::Acquire) {
            HALT_CANCEL => Some(PassEnd::Canceled),
            HALT_STOP => Some(PassEnd::Stopped),
            _ => None,
        }
    }

    /// Charges `bytes` just issued or read to `tarn_scan_limit_bytes_per_sec` (0: no
    /// limit) and waits until the credit, refilled at the limit and at
    /// most `SCAN_EXTENT` ahead, is no longer negative; pause and halt cut
    /// the wait short (the debt stays). The limit is read anew every
    /// slice, so a change applies at once.
    pub(crate) fn pace(&self, core: &PoolCore, bytes: u64) {
        let mut charge = bytes as f64;
        loop {
            let limit = core.tunables.read().tarn_scan_limit_bytes_per_sec as f64;
            let wait = {
                let mut p = self.pace.lock();
                let now = Instant::now();
                p.1 = (p.1 + now.duration_since(p.0).as_secs_f64() * limit).min(SCAN_EXTENT as f64) - charge;
                p.0 = now;
                charge = 0.0;
                if limit == 0.0 {
                    p.1 = 0.0;
                }
                if p.1 >= 0.0 {
                    return;
                }
                Duration::from_secs_f64(-p.1 / limit)
            };
            if self.halted().is_some() || *self.paused.lock() {
                return;
            }
            std::thread::sleep(wait.min(PACE_SLICE));
        }
    }

    /// Runs the `n` copies of a copying pass (resilver, sequential
    /// rebuild) on `workers` threads, in index order: before each, the
    /// worker waits out a pause and takes its back-off turn (`yield_turn`);
    /// `copy(i, report)` does copy `i` and returns its bytes, which are
    /// then paced (`tarn_scan_limit_bytes_per_sec`) and counted as
    /// examined. Stops early when the pass is canceled. Each worker's
    /// report.
    pub(crate) fn run_copies(&self, core: &PoolCore, workers: usize, n: usize, copy: impl Fn(usize, &mut ScanReport) -> u64 + Sync) -> Vec<ScanReport> {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let examined = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| {
                        let mut r = ScanReport::default();
                        loop {
                            self.while_paused();
                            // Backed off while foreground I/O is recent.
                            let turn = self.yield_turn(core, ScanFunc::Resilver);
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= n || self.canceled() {
                                return r;
                            }
                            let len = copy(i, &mut r);
                            drop(turn);
                            self.pace(core, len);
                            self.set_examined(examined.fetch_add(len, Ordering::Relaxed) + len);
                        }
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().expect("a copying scan worker panicked")).collect()
        })
    }

    /// Before a scan I/O of kind `func` (a rebuild is a resilver): while
    /// foreground I/O is recent (`idle`), waits for the other workers'
    /// backed-off I/O and for the delay after it, and returns the turn to
    /// hold for the I/O's length — so at most one scan I/O is in flight.
    /// None when the pool is idle (full depth), or when the foreground went
    /// quiet, the pass was paused or halted meanwhile. The tunables are
    /// read anew every slice, so a change applies at once.
    pub(crate) fn yield_turn<'a>(&'a self, core: &'a PoolCore, func: ScanFunc) -> Option<idle::Turn<'a>> {
        let fg = &core.foreground;
        let knobs = || {
            let t = core.tunables.read();
            let delay = match func {
                ScanFunc::Scrub => t.zfs_scrub_delay_ms,
                ScanFunc::Resilver => t.zfs_resilver_delay_ms,
            };
            (t.zfs_scan_idle_ms, delay)
        };
        let (idle_ms, delay) = knobs();
        if !idle::busy(fg.now_ms(), fg.last_ms(), idle_ms, delay) {
            return None;
        }
        let gate = self.backoff.lock();
        loop {
            let (idle_ms, delay) = knobs();
            let now = fg.now_ms();
            if !idle::busy(now, fg.last_ms(), idle_ms, delay) || self.halted().is_some() || *self.paused.lock() {
                return None;
            }
            let wait = idle::wait_ms(now, *gate, delay);
            if wait == 0 {
                return Some(self.backoff.turn(gate, fg));
            }
            std::thread::sleep(Duration::from_millis(wait).min(PACE_SLICE));
        }
    }

    /// Scan I/Os issued backed off (one at a time, after the delay) since
    /// the pool opened.
    pub fn yielded_ios(&self) -> u64 {
        self.backoff.yielded()
    }

    /// Waits until no scan is under way (or the pool closed); returns the
    /// status then. A paused scan is waited for until resumed and ended.
    pub fn wait(&self) -> ScanStatus {
        let mut st = self.st.lock();
        while st.status.state == ScanState::Scanning && !st.closed {
            self.done.wait(&mut st);
        }
        drop(st);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.status()
    }

    /// Waits until no scan of `func` is under way (or the pool closed):
    /// `pool wait -t resilver` — a sequential rebuild's end, not the scrub
    /// it starts. Returns the status then.
    pub fn wait_for(&self, func: ScanFunc) -> ScanStatus {
        let mut st = self.st.lock();
        while st.status.state == ScanState::Scanning && st.status.func == func && !st.closed {
            self.done.wait(&mut st);
        }
        drop(st);
        self.status()
    }

    pub fn status(&self) -> ScanStatus {
        let st = self.st.lock();
        let mut s = st.status.clone();
        if let Some(p) = &st.pass {
            let secs = p.active_secs();
            s.report.seconds = p.seconds_before + secs;
            let done = s.examined.saturating_sub(p.examined_at_start);
            if secs >= 1.0 && done > 0 {
                s.rate_bytes_per_sec = (done as f64 / secs) as u64;
                s.eta_secs = Some((s.to_examine.saturating_sub(s.examined) as f64 / s.rate_bytes_per_sec.max(1) as f64) as u64);
            }
        }
        s
    }

    /// Whether the record changed since it was last written.
    pub(crate) fn is_dirty(&self) -> bool {
        self.st.lock().dirty
    }

    /// Writes the record into `txg` when it changed (syncing context);
    /// returns the object's number when this flush created it (the pool
    /// directory must then name it). Taken under the lock, written without
    /// it (passes commit meanwhile; they set `dirty` again).
    pub(crate) fn flush(&self, mos: &Objset, txg: u64) -> Result<Option<u64>> {
        let (obj, map) = {
            let mut st = self.st.lock();
            if !st.dirty || st.status.state == ScanState::None {
                return Ok(None);
            }
            st.dirty = false;
            let mut s = st.status.clone();
            if let Some(p) = &st.pass {
                s.report.seconds = p.seconds_before + p.active_secs();
            }
            (st.object, record::encode(&s))
        };
        let written = record::write(mos, txg, obj, &map)?;
        if obj != 0 {
            return Ok(None);
        }
        self.st.lock().object = written;
        Ok(Some(written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restored(func: ScanFunc, paused_since: u64) -> Scanner {
        let s = Scanner::new("t", Arc::new(EventLog::new("t", 1, crate::pool::events::EventLimits { len_max: 16, per_second: 20 })));
        s.st.lock().status = ScanStatus { func, state: ScanState::Scanning, paused_since, start_time: 1, ..Default::default() };
        s
    }

    #[test]
    fn import_continues_only_a_running_scrub_and_ends_an_idle_resilver() {
        assert!(restored(ScanFunc::Scrub, 0).continues_after_import());
        assert!(!restored(ScanFunc::Scrub, 5).continues_after_import(), "a paused scrub waits");
        let r = restored(ScanFunc::Resilver, 0);
        assert!(!r.continues_after_import(), "a resilver starts from the DTLs, not the record");
        r.end_idle_resilver();
        let st = r.status();
        assert!(st.state == ScanState::Finished && st.end_time > 0, "{st:?}");
        let s = restored(ScanFunc::Scrub, 0);
        s.end_idle_resilver();
        assert_eq!(s.status().state, ScanState::Scanning, "a scrub is not a resilver");
    }

    #[test]
    fn a_scan_restored_paused_is_canceled_without_a_pass() {
        let s = restored(ScanFunc::Scrub, 5);
        assert!(s.cancel());
        assert_eq!(s.status().state, ScanState::Canceled);
        assert!(!s.cancel(), "nothing left to cancel");
        assert!(s.is_dirty(), "the record says so at the next sync");
    }
}
