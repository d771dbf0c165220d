//! Scrub: read every copy of every block the pool references, check each
//! against its block pointer's checksum, and rewrite a damaged copy from a
//! good one (OpenZFS's `dsl_scan` with its sorted issue, for a pool of
//! plain vdevs: what repairs is the ditto copies — `copies`, and the extra
//! copies `redundant_metadata` gives metadata).
//!
//! ```text
//!  1. hold frees      allocator: frees after txg N stay deferred
//!  2. gather          walk txg N's tree (verify's walker): metadata read
//!                     on the way, every block pointer noted once
//!  3. sort            one entry per copy, by (vdev, offset)
//!  4. issue           adjacent copies read as one extent (≤ SCAN_EXTENT),
//!                     SCAN_WORKERS extents in flight, each copy checked
//!                     on its own; IoClass::Scrub, so the scheduler gives
//!                     foreground I/O priority
//!  5. repair          a block with a bad copy and a good one: the good
//!                     copy read again, checked, written over the bad
//!                     one, flushed (the scan keeps no data in memory)
//!  6. release frees
//! ```
//!
//! Why the hold makes repair safe: the scan reads the tree of the synced
//! txg N while the pool goes on. A block of that tree freed later (txg >
//! N) would, once its deferral ended, be allocated to new data; a repair
//! written there afterwards would destroy it. While the hold lasts, such
//! frees stay deferred (`Allocator::hold_frees_after`), so every copy the
//! scan found is still the block it was, or free space: rewriting the
//! block's own bytes there is harmless either way. The cost: space freed
//! during a scan becomes allocatable only when it ends.
//!
//! A block no copy of which verifies is an error of the report and enters
//! the pool's error log under its bookmark (`status -v` names its file);
//! every bad copy counts a checksum error against its device, as a read
//! does.
//!
//! A pool runs at most one scan at a time, on a thread of its own
//! (`Scanner`): `tarn pool scrub` starts it (or resumes a paused one), `-p`
//! pauses it and `-s` cancels it (both take effect between extents; a
//! paused scan keeps its hold on frees), export and close cancel it first, and `status` shows
//! its progress and, once done, what it found (as zpool's "scan:" line).
//!
//! A mirror's copies are checked on each child (a `Copy` per child, sorted
//! per device) and a bad one is rewritten from a good copy on any child.
//! The same thread runs a resilver (`pool::resilver`), which shares the
//! free hold, pause and cancel.
//!
//! Not yet (issue 12): a position persisted across export and
//! restarts, the last scan's result kept on disk; RAID-Z children.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use tarn_ondisk::bp::BlockPtr;

use super::core::PoolCore;
use super::errlog::Bookmark;
use crate::io::block;
use crate::io::IoClass;

/// The longest run of adjacent copies read in one request.
pub const SCAN_EXTENT: u64 = 1 << 20;
/// Reads a scan keeps in flight (the scrub class's queue limits still
/// apply below: foreground I/O goes first).
pub const SCAN_WORKERS: usize = 4;

/// What a scrub found and did.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScanReport {
    /// The synced txg whose tree was scanned.
    pub txg: u64,
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
    /// Blocks with no good copy, repairs that failed, and errors of the
    /// walk (metadata that could not be read).
    pub errors: Vec<String>,
    pub seconds: f64,
}

/// Where a pool's scan is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScanState {
    /// No scan since the pool was imported.
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

/// A pool's scan as `status` shows it: its state, times (seconds since the
/// epoch), bytes to read and read so far, and what it found.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScanStatus {
    #[serde(default)]
    pub func: ScanFunc,
    pub state: ScanState,
    /// When the running scan was paused (0: it is not).
    #[serde(default)]
    pub paused_since: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub to_examine: u64,
    pub examined: u64,
    pub report: ScanReport,
}

/// The one scan a pool may run (see the module docs).
#[derive(Default)]
pub struct Scanner {
    status: Mutex<ScanStatus>,
    done: Condvar,
    cancel: AtomicBool,
    /// Set while paused (`pool scrub -p`); the workers wait on `resumed`.
    paused: Mutex<bool>,
    resumed: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
    to_examine: AtomicU64,
    examined: AtomicU64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Scanner {
    /// Marks a scan started, or says why one cannot start.
    pub(crate) fn begin(&self, pool: &str, func: ScanFunc) -> crate::error::Result<()> {
        let mut st = self.status.lock();
        if st.state == ScanState::Scanning {
            let how = match st.func {
                ScanFunc::Scrub => format!("currently scrubbing; use 'tarn pool scrub -s {}' to cancel", pool),
                ScanFunc::Resilver => "currently resilvering".to_string(),
            };
            return Err(crate::error::Error::new(crate::error::ErrorKind::Busy, format!("cannot {} '{}': {}", func.name(), pool, how)));
        }
        // The thread of the previous scan has ended (it set Finished or
        // Canceled last); reap it.
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.cancel.store(false, Ordering::Release);
        *self.paused.lock() = false;
        self.to_examine.store(0, Ordering::Release);
        self.examined.store(0, Ordering::Release);
        *st = ScanStatus { func, state: ScanState::Scanning, start_time: now(), ..Default::default() };
        Ok(())
    }

    pub(crate) fn set_thread(&self, t: JoinHandle<()>) {
        *self.thread.lock() = Some(t);
    }

    /// Records the scan's end (its thread's last step).
    pub(crate) fn end(&self, report: ScanReport, canceled: bool) {
        let mut st = self.status.lock();
        st.state = if canceled { ScanState::Canceled } else { ScanState::Finished };
        st.end_time = now();
        st.report = report;
        self.done.notify_all();
    }

    /// Asks the running scan to stop and waits for it; false if none runs.
    pub fn cancel(&self) -> bool {
        if self.status.lock().state != ScanState::Scanning {
            return false;
        }
        self.cancel.store(true, Ordering::Release);
        self.set_paused(false);
        self.wait();
        true
    }

    /// Pauses the running scan (its reads stop after the extents in
    /// flight; the allocator's hold stays); false if none runs.
    pub fn pause(&self) -> bool {
        let mut st = self.status.lock();
        if st.state != ScanState::Scanning {
            return false;
        }
        if st.paused_since == 0 {
            st.paused_since = now().max(1);
        }
        drop(st);
        self.set_paused(true);
        true
    }

    /// Resumes a paused scan; false if none is paused.
    pub fn resume(&self) -> bool {
        let mut st = self.status.lock();
        if st.state != ScanState::Scanning || st.paused_since == 0 {
            return false;
        }
        st.paused_since = 0;
        drop(st);
        self.set_paused(false);
        true
    }

    fn set_paused(&self, on: bool) {
        *self.paused.lock() = on;
        self.resumed.notify_all();
    }

    pub(crate) fn set_to_examine(&self, bytes: u64) {
        self.to_examine.store(bytes, Ordering::Release);
    }

    pub(crate) fn set_examined(&self, bytes: u64) {
        self.examined.store(bytes, Ordering::Release);
    }

    /// Blocks while the scan is paused (and not canceled).
    pub(crate) fn while_paused(&self) {
        let mut p = self.paused.lock();
        while *p && !self.canceled() {
            self.resumed.wait(&mut p);
        }
    }

    /// Waits until no scan runs; returns the status then.
    pub fn wait(&self) -> ScanStatus {
        let mut st = self.status.lock();
        while st.state == ScanState::Scanning {
            self.done.wait(&mut st);
        }
        drop(st);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        self.status()
    }

    pub fn status(&self) -> ScanStatus {
        let mut st = self.status.lock().clone();
        if st.state == ScanState::Scanning {
            st.to_examine = self.to_examine.load(Ordering::Acquire);
            st.examined = self.examined.load(Ordering::Acquire);
        }
        st
    }

    pub(crate) fn canceled(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }
}

/// One copy to check: where it is, its block, which of the block's copies.
/// A mirror holds each of its copies once per child: each is checked (and
/// repaired) on its own.
#[derive(Clone, Copy)]
struct Copy {
    vdev: u32,
    /// The leaf of the top-level vdev holding it (`Vdev::scan_leaf`).
    child: usize,
    offset: u64,
    /// Bytes to read: psize rounded up to whole sectors.
    len: u64,
    block: usize,
}

/// Scrubs the tree of synced txg `txg` (its MOS root and space blocks).
/// The caller holds frees after `txg` (see the module docs). `paused`
/// runs between gathering the blocks and reading them (tests: the pool
/// changes under the scan there).
/// Returns the report and whether the scan was canceled (`scanner`'s
/// flag, checked between extents; nothing is repaired then).
pub(crate) fn scrub(core: &PoolCore, scanner: &Scanner, mos: &BlockPtr, txg: u64, space_blocks: &[BlockPtr], paused: &mut dyn FnMut()) -> (ScanReport, bool) {
    let start = Instant::now();
    let (gathered, walk_errors) = super::verify::gather(core, mos, txg, space_blocks);
    let (blocks, marks): (Vec<BlockPtr>, Vec<Option<Bookmark>>) = gathered.into_iter().unzip();
    paused();
    let mut rep = ScanReport { txg, blocks: blocks.len() as u64, errors: walk_errors, ..Default::default() };
    let copies = sorted_copies(core, &blocks, &mut rep);
    scanner.to_examine.store(copies.iter().map(|c| c.len).sum(), Ordering::Release);
    let runs = runs(&copies);
    let verdicts = issue(core, &blocks, &runs, scanner, &mut rep);
    if scanner.canceled() {
        rep.seconds = start.elapsed().as_secs_f64();
        return (rep, true);
    }
    // Per block: its bad copies, and one good copy to repair them from.
    let mut bad: Vec<Vec<Copy>> = vec![Vec::new(); blocks.len()];
    let mut good: Vec<Option<Copy>> = vec![None; blocks.len()];
    for (c, ok) in verdicts {
        if ok {
            good[c.block].get_or_insert(c);
        } else {
            bad[c.block].push(c);
        }
    }
    for (i, bp) in blocks.iter().enumerate() {
        let lost = !bad[i].is_empty() && !repair(core, bp, &bad[i], good[i], &mut rep);
        if let (true, Some(at)) = (lost, marks[i]) {
            core.errlog.record(at);
        }
    }
    rep.seconds = start.elapsed().as_secs_f64();
    (rep, false)
}

/// Every copy of every block, by (vdev, offset). A copy that lies outside
/// its device is an error, not read.
fn sorted_copies(core: &PoolCore, blocks: &[BlockPtr], rep: &mut ScanReport) -> Vec<Copy> {
    let mut out = Vec::with_capacity(blocks.len() * 2);
    for (i, bp) in blocks.iter().enumerate() {
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            match core.copy_extent(bp, dva) {
                Ok((v, len)) => {
                    for child in v.scan_leaves() {
                        out.push(Copy { vdev: dva.vdev, child, offset: dva.offset, len, block: i });
                    }
                }
                Err(e) => rep.errors.push(format!("{} block (birth {}): {}", bp.otype.name(), bp.birth, e)),
            }
        }
    }
    out.sort_by_key(|c| (c.vdev, c.child, c.offset));
    out
}

/// Splits sorted copies into runs read as one extent: same vdev, each
/// starting where the previous one's read ended, at most `SCAN_EXTENT`.
fn runs(copies: &[Copy]) -> Vec<&[Copy]> {
    let mut out = Vec::new();
    let mut first = 0;
    for i in 1..=copies.len() {
        let split = i == copies.len() || {
            let (a, b, head) = (&copies[i - 1], &copies[i], &copies[first]);
            b.vdev != a.vdev || b.child != a.child || b.offset != a.offset + a.len || b.offset + b.len - head.offset > SCAN_EXTENT
        };
        if split {
            out.push(&copies[first..i]);
            first = i;
        }
    }
    out
}

/// Reads the runs with `SCAN_WORKERS` reads in flight (each worker takes
/// the next run in order, so the device still sees ascending offsets),
/// and returns each copy with whether it verified. Stops early when the
/// scan is canceled.
fn issue(core: &PoolCore, blocks: &[BlockPtr], runs: &[&[Copy]], scanner: &Scanner, rep: &mut ScanReport) -> Vec<(Copy, bool)> {
    let next = AtomicU64::new(0);
    let examined = AtomicU64::new(0);
    let per_worker: Vec<(Vec<(Copy, bool)>, u64)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..SCAN_WORKERS)
            .map(|_| {
                s.spawn(|| {
                    let (mut out, mut reads) = (Vec::new(), 0u64);
                    loop {
                        scanner.while_paused();
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        if i >= runs.len() || scanner.canceled() {
                            return (out, reads);
                        }
                        reads += check_run(core, blocks, runs[i], &mut out);
                        let bytes: u64 = runs[i].iter().map(|c| c.len).sum();
                        scanner.examined.store(examined.fetch_add(bytes, Ordering::Relaxed) + bytes, Ordering::Release);
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a scan worker panicked")).collect()
    });
    let mut out = Vec::new();
    for (verdicts, reads) in per_worker {
        rep.reads += reads;
        for (c, ok) in &verdicts {
            rep.copies += 1;
            rep.bytes += c.len;
            if !ok {
                rep.bad_copies += 1;
                if let Some(l) = core.vdevs[c.vdev as usize].scan_leaf(c.child).and_then(|v| v.leaf()) {
                    l.note_checksum_error();
                }
            }
        }
        out.extend(verdicts);
    }
    out
}

/// Reads one run and checks each copy in it, appending (copy, verified);
/// a failed read checks each copy alone, so one bad sector fails one
/// copy. Returns the reads issued.
fn check_run(core: &PoolCore, blocks: &[BlockPtr], run: &[Copy], out: &mut Vec<(Copy, bool)>) -> u64 {
    let (head, last) = (run[0], run[run.len() - 1]);
    let Some(leaf) = core.vdevs[head.vdev as usize].scan_leaf(head.child).and_then(|v| v.leaf()) else {
        out.extend(run.iter().map(|c| (*c, false)));
        return 0;
    };
    match leaf.read(IoClass::Scrub, head.offset, last.offset + last.len - head.offset) {
        Ok(data) => {
            for c in run {
                let at = (c.offset - head.offset) as usize;
                out.push((*c, block::verify(&blocks[c.block], &data[at..at + c.len as usize]).is_ok()));
            }
            1
        }
        Err(_) if run.len() > 1 => 1 + run.iter().map(|c| check_run(core, blocks, std::slice::from_ref(c), out)).sum::<u64>(),
        Err(_) => {
            out.push((head, false));
            1
        }
    }
}

/// Rewrites the bad copies of `bp` from copy `good` (read again and
/// checked: the scan keeps no data); false (the block reported lost) when
/// it has no good copy.
fn repair(core: &PoolCore, bp: &BlockPtr, bad: &[Copy], good: Option<Copy>, rep: &mut ScanReport) -> bool {
    let lost = |rep: &mut ScanReport, why: &str| {
        rep.errors.push(format!("{} block (level {}, birth {}): {}", bp.otype.name(), bp.level, bp.birth, why));
        false
    };
    let Some(g) = good else {
        return lost(rep, &format!("no copy of {} verifies", bad.len()));
    };
    let leaf_of = |c: &Copy| core.vdevs[c.vdev as usize].scan_leaf(c.child);
    let Some(from) = leaf_of(&g).and_then(|v| v.leaf()) else { return lost(rep, "its good copy's device is gone") };
    let data = match from.read(IoClass::Scrub, g.offset, g.len) {
        Ok(d) if block::verify(bp, &d).is_ok() => d,
        _ => return lost(rep, "its good copy failed when read again for the repair"),
    };
    for c in bad {
        let Some(v) = leaf_of(c) else { continue };
        let Some(l) = v.leaf() else { continue };
        match l.write_now(&data, c.offset).and_then(|_| l.flush()) {
            Ok(()) => {
                rep.repaired_copies += 1;
                rep.repaired_bytes += data.len() as u64;
                v.repaired_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            Err(e) => rep.errors.push(format!("repair of {}:{:#x} on {}: {}", c.vdev, c.offset, v.path, e)),
        }
    }
    true
}
