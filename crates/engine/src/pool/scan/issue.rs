//! One pass of a scan: gather, filter, sort, skip what an earlier pass
//! checked, and read in device order, repairing as it goes (the steps of
//! `pool::scan`'s module docs). A scrub in logical order
//! (`zfs_scan_legacy`) skips the sort and the skip: it reads the copies in
//! the order the walk found their blocks, and commits no position.
//!
//! The pass's thread issues the runs' reads in order, each without
//! waiting for it, while the run's leaf has less than
//! `zfs_scan_vdev_limit` bytes read and not yet checked (`InFlight`);
//! a read's completion hands its data to the workers, which check and
//! repair. So each device always has scan reads queued — the scheduler
//! still issues at most `zfs_vdev_scrub_max_active` of them at once —
//! and checksums never stand between two reads:
//!
//! ```text
//!   pass thread:  run 0 → read_async ─┐   run 1 → read_async ─┐   (waits while
//!                                     │                       │    the leaf is
//!   leaf's issue threads:   preadv ───┤         preadv ───────┤    at its limit)
//!                                     ▼                       ▼
//!   workers (SCAN_WORKERS):   check run 0, repair     check run 1 …
//!                             release its bytes → the pass thread may issue
//! ```
//!
//! Workers finish runs out of order; a run's
//! figures reach the scanner (and so the record) only when every run
//! before it has finished too (`Progress`), so the position the record
//! saves always has every copy at or before it checked — and repaired,
//! since a bad copy is repaired, write flushed, before its run counts as
//! finished. Every run issued is checked (a read always completes), and
//! once the pass is halted no more are issued, so when a halted pass ends
//! every run it issued is committed: the figures of an export count each
//! repair. (A power cut can still fall between a
//! repair and the sync that records its run; the run is then checked
//! again, finds the copy good, and the repair goes uncounted.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use tarn_ondisk::bp::BlockPtr;

use super::{block_name, ScanFunc, ScanOrder, ScanPosition, ScanReport, Scanner, SCAN_EXTENT, SCAN_WORKERS};
use crate::io::block;
use crate::io::{IoClass, Leaf};
use crate::sys::buf::AlignedBuf;
use crate::pool::core::{FailedCopy, PoolCore};
use crate::pool::errlog::Bookmark;
use crate::vdev::{Kind, ReadCheck, Vdev};

/// How a pass ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PassEnd {
    /// Every copy checked.
    Finished,
    /// `scrub -s`: the scan is over.
    Canceled,
    /// The pool closes: the scan continues at the next import.
    Stopped,
}

/// One copy to check: where it is, and its block. A mirror holds each of
/// its copies once per child: each is checked (and repaired) on its own.
#[derive(Clone, Copy)]
struct Copy {
    vdev: u32,
    /// The leaf of the top-level vdev holding it (`Vdev::scan_leaf`).
    child: u32,
    offset: u64,
    /// Bytes to read: psize rounded up to whole sectors.
    len: u64,
    block: usize,
}

impl Copy {
    fn key(&self) -> ScanPosition {
        ScanPosition { vdev: self.vdev, child: self.child, offset: self.offset }
    }

    /// The leaf's vdev and its scheduler (None: no such leaf, or not a
    /// leaf).
    fn leaf(&self, core: &PoolCore) -> Option<(Arc<Vdev>, Arc<Leaf>)> {
        let v = core.vdevs.get(self.vdev as usize)?.scan_leaf(self.child as usize)?;
        let l = v.leaf_arc()?;
        Some((v, l))
    }
}

/// The blocks of a pass: pointer, where it sits (for the error log), and
/// the sort key of its first copy (the copy that reports the block lost).
struct Blocks {
    bps: Vec<BlockPtr>,
    marks: Vec<Option<Bookmark>>,
    first: Vec<ScanPosition>,
}

/// What checking one run found (the counts of a report); added to the
/// scan's figures in run order.
#[derive(Default)]
pub(super) struct RunFigures {
    pub counts: ScanReport,
    /// The run's last copy: with every earlier run, the new position
    /// (None in logical order, which has no position).
    pub last: Option<ScanPosition>,
}

/// Runs `0..next` finished and committed; later ones finished, waiting
/// for the runs before them. At most as many entries as runs.
struct Progress {
    next: usize,
    pending: BTreeMap<usize, RunFigures>,
}

impl Progress {
    fn finished(&mut self, run: usize, fig: RunFigures, scanner: &Scanner) {
        assert!(run >= self.next, "run {} finished twice", run);
        self.pending.insert(run, fig);
        while let Some(f) = self.pending.remove(&self.next) {
            scanner.commit(f);
            self.next += 1;
        }
    }
}

/// Scans the tree of synced txg `tree_txg` (its MOS root and space
/// blocks) as the scanner's plan says: only blocks born by the scan's txg,
/// only copies after its position, in its order. The caller holds frees
/// after `tree_txg`. `paused` runs after the gather, before any read
/// (tests).
pub(crate) fn pass(core: &PoolCore, scanner: &Scanner, mos: &BlockPtr, tree_txg: u64, space_blocks: &[BlockPtr], paused: &mut dyn FnMut()) -> PassEnd {
    let legacy = core.tunables.read().zfs_scan_legacy != 0;
    let (scan_txg, order, after) = scanner.plan(tree_txg, legacy);
    assert!(scan_txg <= tree_txg, "scan of txg {} resumed on the older tree of txg {}", scan_txg, tree_txg);
    let (gathered, mut walk_errors) = crate::pool::verify::gather(core, mos, tree_txg, space_blocks);
    // Blocks written after the scan began are not its business (their
    // copies were checked by the write itself); see the module docs of
    // `pool::scan` for why the position stays sound.
    let (bps, marks): (Vec<BlockPtr>, Vec<Option<Bookmark>>) = gathered.into_iter().filter(|(bp, _)| bp.physical_birth() <= scan_txg).unzip();
    paused();
    let (mut copies, first) = copies_of(core, &bps, order, &mut walk_errors);
    let blocks = Blocks { bps, marks, first };
    if order != ScanOrder::Logical {
        copies.sort_by_key(|c| order.key(&c.key()));
    }
    if let Some(p) = after {
        assert_ne!(order, ScanOrder::Logical, "a position in a scan of logical order");
        copies.retain(|c| order.key(&c.key()) > order.key(&p));
    }
    scanner.pass_gathered(walk_errors, copies.iter().map(|c| c.len).sum(), blocks.bps.len() as u64);
    let read_max = core.tunables.read().tarn_scan_read_max_bytes.min(SCAN_EXTENT);
    let runs = runs(&copies, read_max);
    let done = issue(core, &blocks, &runs, scanner, order);
    match scanner.halted() {
        _ if done == runs.len() => PassEnd::Finished,
        Some(end) => end,
        None => unreachable!("the workers stop early only when the scan is halted"),
    }
}

/// Every copy of every block on every leaf that holds it, in the order of
/// `bps` (the walk's), and each block's first copy in `order` (the one
/// that reports it lost; any fixed one would do: it is checked by
/// exactly one pass). A copy that lies outside its device is an error,
/// not read.
fn copies_of(core: &PoolCore, bps: &[BlockPtr], order: ScanOrder, errors: &mut Vec<String>) -> (Vec<Copy>, Vec<ScanPosition>) {
    let mut out = Vec::with_capacity(bps.len() * 2);
    let mut first = vec![ScanPosition { vdev: u32::MAX, child: u32::MAX, offset: u64::MAX }; bps.len()];
    for (i, bp) in bps.iter().enumerate() {
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            match core.copy_extent(bp, dva) {
                Ok((v, len)) => {
                    for child in v.scan_leaves() {
                        let c = Copy { vdev: dva.vdev, child: child as u32, offset: dva.offset, len, block: i };
                        first[i] = std::cmp::min_by_key(first[i], c.key(), |p| order.key(p));
                        out.push(c);
                    }
                }
                Err(e) => errors.push(format!("{} block (birth {}): {}", bp.otype.name(), bp.birth, e)),
            }
        }
    }
    (out, first)
}

/// Splits copies into runs read as one extent: same vdev, each starting
/// where the previous one's read ended, at most `read_max` bytes
/// (`tarn_scan_read_max_bytes`, at most `SCAN_EXTENT`; a single larger
/// copy is a run of its own). Sorted copies of adjacent blocks
/// merge; in logical order only blocks the walk found one after the other
/// that also lie one after the other on the same leaf do (a plain
/// device's; a mirror's children alternate).
fn runs(copies: &[Copy], read_max: u64) -> Vec<&[Copy]> {
    let mut out = Vec::new();
    let mut first = 0;
    for i in 1..=copies.len() {
        let split = i == copies.len() || {
            let (a, b, head) = (&copies[i - 1], &copies[i], &copies[first]);
            b.vdev != a.vdev || b.child != a.child || b.offset != a.offset + a.len || b.offset + b.len - head.offset > read_max
        };
        if split {
            out.push(&copies[first..i]);
            first = i;
        }
    }
    out
}

/// Runs read and not yet checked, per leaf: the bytes `zfs_scan_vdev_limit`
/// bounds, and the checks waiting for a worker (OpenZFS's scan queues:
/// `zfs_scan_vdev_limit` bytes in flight per leaf, checked as they
/// complete). Shared with the read completions, which run on the leaves'
/// issue threads.
#[derive(Default)]
struct InFlight {
    st: Mutex<InFlightState>,
    /// For the issuer: a run's bytes were released (or a worker died).
    room: parking_lot::Condvar,
    /// For the workers: a check is ready, or no more will be. Two
    /// condition variables, so a completion wakes one worker and a
    /// release the issuer, not every thread of the pass.
    work: parking_lot::Condvar,
}

#[derive(Default)]
struct InFlightState {
    /// Bytes issued and not yet checked, by (vdev, child).
    bytes: BTreeMap<(u32, u32), u64>,
    /// Checks ready: the run, and what its read returned (None: the worker
    /// reads it itself — a RAID-Z copy, or a leaf that is gone).
    ready: std::collections::VecDeque<(usize, Option<std::io::Result<AlignedBuf>>)>,
    /// The issuer took its last run: workers stop once every run is checked.
    issued_all: bool,
    /// A worker panicked: its run's bytes are never released, so the
    /// issuer must not wait for them (the scope then passes the panic on).
    broken: bool,
}

impl InFlight {
    fn total(st: &InFlightState) -> u64 {
        st.bytes.values().sum()
    }

    /// Waits until `bytes` more fit on `leaf` (or nothing is in flight on
    /// it: a run larger than the limit goes alone), then counts them;
    /// false when a worker died.
    fn admit(&self, leaf: (u32, u32), bytes: u64, limit: u64) -> bool {
        let mut st = self.st.lock();
        loop {
            let now = st.bytes.get(&leaf).copied().unwrap_or(0);
            if st.broken {
                return false;
            }
            if now == 0 || now + bytes <= limit {
                *st.bytes.entry(leaf).or_insert(0) += bytes;
                return true;
            }
            self.room.wait(&mut st);
        }
    }

    /// Waits until nothing is in flight (the back-off's one run at a
    /// time), or a worker died.
    fn drain(&self) {
        let mut st = self.st.lock();
        while Self::total(&st) > 0 && !st.broken {
            self.room.wait(&mut st);
        }
    }

    fn broke(&self) {
        self.st.lock().broken = true;
        self.room.notify_all();
    }

    fn ready(&self, run: usize, data: Option<std::io::Result<AlignedBuf>>) {
        self.st.lock().ready.push_back((run, data));
        self.work.notify_one();
    }

    /// The next check, waiting for one; None once the issuer is done and
    /// every run it issued was checked (a read still in flight has its
    /// bytes counted until its check ends).
    fn next(&self) -> Option<(usize, Option<std::io::Result<AlignedBuf>>)> {
        let mut st = self.st.lock();
        loop {
            if let Some(c) = st.ready.pop_front() {
                return Some(c);
            }
            if st.issued_all && Self::total(&st) == 0 {
                return None;
            }
            self.work.wait(&mut st);
        }
    }

    /// A run was checked: its bytes no longer count.
    fn release(&self, leaf: (u32, u32), bytes: u64) {
        let mut st = self.st.lock();
        let now = st.bytes.get_mut(&leaf).expect("a run released on a leaf it was not admitted to");
        assert!(*now >= bytes, "leaf {:?}: {} bytes released of {} in flight", leaf, bytes, now);
        *now -= bytes;
        if *now == 0 {
            st.bytes.remove(&leaf);
        }
        let last = st.issued_all && Self::total(&st) == 0;
        drop(st);
        self.room.notify_one();
        if last {
            // The other workers wait for a check that will not come.
            self.work.notify_all();
        }
    }

    fn issued_all(&self) {
        self.st.lock().issued_all = true;
        self.work.notify_all();
    }
}

/// The leaf a run's bytes count against, and the bytes: a RAID-Z copy
/// counts against its top-level vdev (child 0 in its key), which reads
/// its columns itself.
fn run_extent(run: &[Copy]) -> ((u32, u32), u64) {
    let (head, last) = (run[0], run[run.len() - 1]);
    ((head.vdev, head.child), last.offset + last.len - head.offset)
}

/// Reads the runs in order and checks them as their reads complete: this
/// thread issues each run's read without waiting for it, keeping at most
/// `zfs_scan_vdev_limit` bytes read and not yet checked per leaf (a larger
/// run alone), so every leaf has reads queued while earlier ones are
/// checked; `SCAN_WORKERS` threads check what comes back and repair. While
/// foreground I/O is recent one run at a time, after the delay, read and
/// checked before the next (`Scanner::yield_turn`); paced by
/// `tarn_scan_limit_bytes_per_sec` (each run charged as it is issued);
/// waiting while the scan is paused, and issuing no more runs once it is
/// halted — every run issued is checked and committed, so the committed
/// runs are exactly those issued. Returns how many. In logical order a
/// run moves no position.
fn issue(core: &PoolCore, blocks: &Blocks, runs: &[&[Copy]], scanner: &Scanner, order: ScanOrder) -> usize {
    let progress = Mutex::new(Progress { next: 0, pending: BTreeMap::new() });
    let inflight = Arc::new(InFlight::default());
    let mut taken = 0;
    std::thread::scope(|s| {
        for _ in 0..SCAN_WORKERS {
            s.spawn(|| {
                // A panic in a check leaves its bytes counted: tell the
                // issuer not to wait for them.
                struct Worker<'a>(&'a InFlight);
                impl Drop for Worker<'_> {
                    fn drop(&mut self) {
                        if std::thread::panicking() {
                            self.0.broke();
                        }
                    }
                }
                let _w = Worker(&inflight);
                while let Some((i, data)) = inflight.next() {
                    let mut fig = check_run(core, blocks, runs[i], data);
                    let (leaf, bytes) = run_extent(runs[i]);
                    inflight.release(leaf, bytes);
                    if order == ScanOrder::Logical {
                        fig.last = None;
                    }
                    progress.lock().finished(i, fig, scanner);
                }
            });
        }
        // Whatever happens below, the workers must hear that no more come.
        struct Last<'a>(&'a InFlight);
        impl Drop for Last<'_> {
            fn drop(&mut self) {
                self.0.issued_all();
            }
        }
        let _last = Last(&inflight);
        for (i, run) in runs.iter().enumerate() {
            scanner.while_paused();
            // While foreground I/O is recent: one run at a time, after
            // the delay (`idle`); the turn is held until the run is checked.
            let turn = scanner.yield_turn(core, ScanFunc::Scrub);
            if scanner.halted().is_some() {
                return;
            }
            if turn.is_some() {
                inflight.drain();
            }
            let (leaf, bytes) = run_extent(run);
            let limit = core.tunables.read().zfs_scan_vdev_limit;
            if !inflight.admit(leaf, bytes, limit) {
                return;
            }
            taken = i + 1;
            start_read(core, run, i, &inflight);
            if turn.is_some() {
                inflight.drain();
            }
            drop(turn);
            scanner.pace(core, bytes);
        }
    });
    let p = progress.into_inner();
    assert!(p.pending.is_empty() && p.next == taken, "{} runs committed of {} taken", p.next, taken);
    p.next
}

/// Issues run `i`'s read; its completion hands the data to the workers.
/// A RAID-Z copy, or a run whose leaf is gone, goes to them unread.
fn start_read(core: &PoolCore, run: &[Copy], i: usize, inflight: &Arc<InFlight>) {
    let head = run[0];
    let leaf = match core.vdevs.top(head.vdev).kind {
        Kind::Raidz(_) => None,
        _ => head.leaf(core),
    };
    let Some((_, leaf)) = leaf else {
        return inflight.ready(i, None);
    };
    let (_, len) = run_extent(run);
    let to = inflight.clone();
    leaf.read_async(IoClass::Scrub, head.offset, len, Box::new(move |res| to.ready(i, Some(res))));
}

/// Checks one run from what its read returned (`data`; None: read here),
/// repairing bad copies at once; a failed read checks each copy alone, so
/// one bad sector fails one copy. A RAID-Z vdev's copies are checked
/// whole, one by one.
fn check_run(core: &PoolCore, blocks: &Blocks, run: &[Copy], data: Option<std::io::Result<AlignedBuf>>) -> RunFigures {
    let mut fig = RunFigures::default();
    let raidz = matches!(core.vdevs.top(run[0].vdev).kind, Kind::Raidz(_));
    match data {
        _ if raidz => run.iter().for_each(|c| check_columns(core, blocks, c, &mut fig.counts)),
        Some(res) => {
            fig.counts.reads += 1;
            check_read(core, blocks, run, res, &mut fig.counts);
        }
        None => check_extent(core, blocks, run, &mut fig.counts),
    }
    fig.last = Some(run[run.len() - 1].key());
    fig
}

/// Reads a run here and checks it (a copy read again alone after its
/// run's read failed, or a run whose leaf is gone).
fn check_extent(core: &PoolCore, blocks: &Blocks, run: &[Copy], fig: &mut ScanReport) {
    let (head, last) = (run[0], run[run.len() - 1]);
    let Some((_, leaf)) = head.leaf(core) else {
        // The leaf is gone: no copy on it can be read.
        return run.iter().for_each(|c| checked(core, blocks, c, false, fig));
    };
    fig.reads += 1;
    let res = leaf.read(IoClass::Scrub, head.offset, last.offset + last.len - head.offset);
    check_read(core, blocks, run, res, fig);
}

/// Checks each copy of a run against what the run's read returned.
fn check_read(core: &PoolCore, blocks: &Blocks, run: &[Copy], res: std::io::Result<AlignedBuf>, fig: &mut ScanReport) {
    let head = run[0];
    match res {
        Ok(data) => {
            for c in run {
                let at = (c.offset - head.offset) as usize;
                let ok = block::verify(&blocks.bps[c.block], &data[at..at + c.len as usize]).is_ok();
                checked(core, blocks, c, ok, fig);
            }
        }
        Err(_) if run.len() > 1 => run.iter().for_each(|c| check_extent(core, blocks, std::slice::from_ref(c), fig)),
        Err(_) => checked(core, blocks, &head, false, fig),
    }
}

/// Checks a copy on a RAID-Z vdev as a whole (`Vdev::scrub_columns`):
/// every column, parity included, read and verified; the vdev rebuilds
/// wrong columns from parity, rewrites them, and counts each against its
/// child (a checksum or io ereport). A copy it heals is a bad copy
/// repaired; one parity cannot heal is bad, for `checked` to repair from
/// another copy of its block or report lost.
fn check_columns(core: &PoolCore, blocks: &Blocks, c: &Copy, fig: &mut ScanReport) {
    let bp = &blocks.bps[c.block];
    let at = blocks.marks[c.block];
    let check = |raw: &[u8]| block::verify(bp, raw).is_ok();
    let failed = |leaf: &Vdev, offset: u64, e: &crate::error::Error| {
        core.copy_failed(&FailedCopy::on(c.vdev, leaf, offset, c.len, e), "found by a scrub of its RAID-Z columns", at.as_ref(), &|| block_name(bp));
    };
    let rc = ReadCheck { check: &check, repair: !core.readonly, failed: &failed, speculative: false };
    let Some(v) = core.vdevs.top(c.vdev).scrub_columns(c.offset, c.len, bp.birth, &rc) else {
        return checked(core, blocks, c, false, fig);
    };
    fig.reads += v.reads;
    if !v.ok {
        return checked(core, blocks, c, false, fig);
    }
    fig.copies += 1;
    fig.bytes += c.len;
    if v.bad_columns > 0 {
        fig.bad_copies += 1;
        fig.repaired_copies += u64::from(v.repaired_bytes > 0);
    }
    fig.repaired_bytes += v.repaired_bytes;
}

/// Counts a checked copy; a bad one is counted against its device and
/// repaired from a good copy of its block, or, when it has none, the block
/// is reported lost — by its first copy only, so once per scan even when
/// a resume falls between its copies.
fn checked(core: &PoolCore, blocks: &Blocks, c: &Copy, ok: bool, fig: &mut ScanReport) {
    fig.copies += 1;
    fig.bytes += c.len;
    if ok {
        return;
    }
    fig.bad_copies += 1;
    if let Some((_, leaf)) = c.leaf(core) {
        leaf.note_checksum_error();
    }
    let bp = &blocks.bps[c.block];
    let outcome = match repair(core, bp, c) {
        Ok(bytes) => {
            fig.repaired_copies += 1;
            fig.repaired_bytes += bytes;
            "found by a scrub and repaired"
        }
        Err(Unrepaired::NoGoodCopy) if blocks.first[c.block] == c.key() => {
            fig.error(format!("{}: no copy verifies", block_name(bp)));
            if let Some(at) = blocks.marks[c.block] {
                core.record_lost(&at, &|| block_name(bp));
            }
            "found by a scrub: no copy verifies"
        }
        Err(Unrepaired::NoGoodCopy) => "found by a scrub: no copy verifies",
        Err(Unrepaired::Write(why)) => {
            fig.error(why);
            "found by a scrub; its repair failed"
        }
    };
    report_bad_copy(core, bp, c, blocks.marks[c.block].as_ref(), outcome);
}

/// Posts the checksum ereport of a bad copy, against the leaf it was read
/// from. A run's copies come from one read, so the scan does not tell a
/// mismatch from a failed read (the device's READ counter does); both are
/// checksum ereports.
fn report_bad_copy(core: &PoolCore, bp: &BlockPtr, c: &Copy, at: Option<&Bookmark>, outcome: &str) {
    let Some((v, _)) = c.leaf(core) else { return };
    let e = crate::error::Error::corrupt("failed verification or could not be read (scrub)");
    core.copy_failed(&FailedCopy::on(c.vdev, &v, c.offset, c.len, &e), outcome, at, &|| block_name(bp));
}

enum Unrepaired {
    NoGoodCopy,
    Write(String),
}

/// Rewrites copy `bad` of `bp` from another copy that verifies — on
/// another child of its mirror or at another DVA — read and checked here
/// (the scan keeps no data), flushed before it returns the bytes written.
/// A RAID-Z copy is read through its vdev, and rewritten whole (every
/// column, parity computed again).
fn repair(core: &PoolCore, bp: &BlockPtr, bad: &Copy) -> Result<u64, Unrepaired> {
    let check = |data: &[u8]| block::verify(bp, data).is_ok();
    let good = bp.dva.iter().filter(|d| !d.is_empty()).find_map(|dva| {
        let (v, len) = core.copy_extent(bp, dva).ok()?;
        v.scan_leaves().into_iter().find_map(|child| {
            let c = Copy { vdev: dva.vdev, child: child as u32, offset: dva.offset, len, block: bad.block };
            if c.key() == bad.key() {
                return None;
            }
            if let Kind::Raidz(_) = v.kind {
                let rc = ReadCheck { check: &check, repair: false, failed: &|_, _, _| {}, speculative: false };
                return v.read_checked(IoClass::Scrub, c.offset, len, bp.birth, &rc).ok();
            }
            let (_, leaf) = c.leaf(core)?;
            leaf.read(IoClass::Scrub, c.offset, len).ok().filter(|data| check(data))
        })
    });
    let data = good.ok_or(Unrepaired::NoGoodCopy)?;
    let top = core.vdevs.top(bad.vdev);
    // On a device of another sector size the good copy's bytes would
    // spill past the bad copy's allocation.
    if bad.len != data.len() as u64 {
        return Err(Unrepaired::Write(format!("repair of {}:{:#x} on {}: its good copy spans {} bytes, it {}", bad.vdev, bad.offset, top.path, data.len(), bad.len)));
    }
    if let Kind::Raidz(_) = top.kind {
        return top.rewrite_columns(bad.offset, &data).map_err(|e| Unrepaired::Write(format!("repair of {}:{:#x} on {}: {}", bad.vdev, bad.offset, top.path, e)));
    }
    let (v, leaf) = bad.leaf(core).ok_or_else(|| Unrepaired::Write(format!("repair of {}:{:#x}: its device is gone", bad.vdev, bad.offset)))?;
    match leaf.write_now(&data, bad.offset).and_then(|_| leaf.flush()) {
        Ok(()) => {
            v.repaired_bytes.fetch_add(bad.len, Ordering::Relaxed);
            Ok(bad.len)
        }
        Err(e) => Err(Unrepaired::Write(format!("repair of {}:{:#x} on {}: {}", bad.vdev, bad.offset, v.path, e))),
    }
}
