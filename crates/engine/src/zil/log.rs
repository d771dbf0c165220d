//! One dataset's log in memory: its records, its commit rounds, its chain
//! and the header the dataset's sync writes. See the module docs.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tarn_ondisk::zil::{LogPtr, LogRecord, ZilHeader};

use super::commit::{check_flights, Flight, Flushes};
use crate::error::Result;
use crate::pool::core::PoolCore;

/// A record in memory: a change and its place in the log's history. A
/// write's record carries no data (`len` bytes at its offset) until it is
/// committed.
#[derive(Clone, Debug)]
pub struct Itx {
    pub seq: u64,
    pub txg: u64,
    pub rec: LogRecord,
    /// A write's length (its data is read when committed).
    pub len: u64,
    /// A commit that takes it syncs the txg instead of writing the log
    /// (a clone: its blocks are shared, not copied into the log).
    pub txg_sync: bool,
}

/// What a commit asks the POSIX layer for.
pub trait LogSource {
    /// The records to write for `itx`: a write's data read now, split into
    /// records of at most `WRITE_DATA_MAX` bytes; none when its object is
    /// gone (a later record removes it).
    fn fill(&self, itx: &Itx) -> Result<Vec<LogRecord>>;
}

/// Counters of one log (OpenZFS's zil kstats), for `tarn zilstat`.
#[derive(Default)]
pub struct ZilStats {
    /// `commit` calls, and those that found nothing to write.
    pub commits: AtomicU64,
    pub commits_empty: AtomicU64,
    /// Rounds written, log blocks written and their bytes (used, and as
    /// allocated).
    pub rounds: AtomicU64,
    pub blocks: AtomicU64,
    pub bytes_used: AtomicU64,
    pub bytes_alloc: AtomicU64,
    /// Records written, by kind (`LogRecord::NAMES`), and write data bytes
    /// copied into the log.
    pub records: [AtomicU64; 10],
    pub write_bytes: AtomicU64,
    /// Write data written in place and logged by pointer (OpenZFS's
    /// `zil_itx_indirect_bytes`; their count is `records`' "indirect").
    pub indirect_bytes: AtomicU64,
    /// Commits that synced the txg instead (a failed log write, no space,
    /// too much data) and rounds that waited for a new chain's header.
    pub fallbacks: AtomicU64,
    pub chain_waits: AtomicU64,
    /// Records logged (itxs made).
    pub itxs: AtomicU64,
    /// Time spent writing rounds (fill, write, flush), and time callers
    /// spent in `commit` (waiting for their round included), in ns.
    pub round_ns: AtomicU64,
    pub commit_ns: AtomicU64,
    /// Replays that ended early at an indirect record whose block did not
    /// verify.
    pub replay_ended_bad_block: AtomicU64,
    /// Where a round's time goes, in ns: filling its records, writing its
    /// blocks (issue to completion), flushing devices.
    pub fill_ns: AtomicU64,
    pub write_ns: AtomicU64,
    pub flush_ns: AtomicU64,
    /// Device flushes of log blocks (one may serve several rounds), and
    /// rounds that waited for company (`zfs_commit_timeout_pct`).
    pub flushes: AtomicU64,
    pub company_waits: AtomicU64,
    /// Times a committer that could open a round waited to catch the next
    /// flush instead (`commit::catch_next_flush`).
    pub flush_holds: AtomicU64,
    /// The most rounds that were in flight at once.
    pub in_flight_max: AtomicU64,
}

/// A block written and not yet freed.
#[derive(Clone, Copy, Debug)]
pub(super) struct LiveBlock {
    pub ptr: LogPtr,
    /// Its chain: blocks of an abandoned chain are freed at the next sync.
    pub guid: u64,
    /// The newest txg of its records: once on disk, the block is moot.
    pub max_txg: u64,
}

/// The chain being written.
#[derive(Clone, Copy, Debug)]
pub(super) struct Chain {
    pub guid: u64,
    /// Where the next block goes (allocated, not written).
    pub next: LogPtr,
    /// Blocks count as durable once this txg has synced: it carries the
    /// first header naming the chain (0: one already has).
    pub durable_txg: u64,
}

pub(super) struct LogState {
    pub next_seq: u64,
    /// Namespace records, in sequence order.
    pub namespace: Vec<Itx>,
    /// Other records per object, each in sequence order.
    pub by_object: HashMap<u64, Vec<Itx>>,
    /// Records taken by commits, for the next round.
    pub pending: Vec<Itx>,
    /// Rounds opened, placed on the chain, and acknowledged (each a count:
    /// done <= planned <= started).
    pub rounds_started: u64,
    pub rounds_planned: u64,
    pub rounds_done: u64,
    /// Rounds planned and not yet acknowledged, in round order.
    pub flights: VecDeque<Flight>,
    pub flushes: Flushes,
    pub writing: super::commit::Writing,
    /// Callers inside `commit`, and whether one is opening a round (waiting
    /// for company).
    pub committers: u32,
    pub opening: bool,
    /// The last round's write and flush time, ns (the commit timeout is a
    /// share of it).
    pub latency_ns: u64,
    /// Rounds that failed and could not fall back (the error).
    pub failed: HashMap<u64, String>,
    pub chain: Option<Chain>,
    pub blocks: VecDeque<LiveBlock>,
    /// Header fields kept across syncs.
    pub claim_txg: u64,
    pub replay_seq: u64,
    /// Replayed records: (txg of the transaction, seq).
    pub replay_marks: Vec<(u64, u64)>,
    /// The header the last sync wrote (or import read).
    pub written: ZilHeader,
    /// Import found records to replay; cleared by `finish_replay`.
    pub needs_replay: bool,
    /// A replayed chain being dropped (`finish_replay`): syncs of txgs
    /// before `from` — which may still hold replayed changes — write its
    /// header (with the records replayed so far); `from` writes the new.
    pub retiring: Option<Retiring>,
    /// Blocks of indirect records claimed at import, held until their
    /// chain is no longer named (`indirect.rs`).
    pub data: Vec<super::indirect::ClaimedData>,
}

impl LogState {
    /// The state of a log whose record holds `header`: its chain (if it
    /// names one) goes on at the header's first place, nothing in memory.
    pub(super) fn new(header: ZilHeader) -> LogState {
        let chain = (header.guid != 0).then_some(Chain { guid: header.guid, next: header.first, durable_txg: 0 });
        LogState {
            next_seq: 1,
            namespace: Vec::new(),
            by_object: HashMap::new(),
            pending: Vec::new(),
            rounds_started: 0,
            rounds_planned: 0,
            rounds_done: 0,
            flights: VecDeque::new(),
            flushes: Flushes::default(),
            writing: Default::default(),
            committers: 0,
            opening: false,
            latency_ns: 0,
            failed: HashMap::new(),
            chain,
            blocks: VecDeque::new(),
            claim_txg: header.claim_txg,
            replay_seq: header.replay_seq,
            replay_marks: Vec::new(),
            written: header,
            needs_replay: false,
            retiring: None,
            data: Vec::new(),
        }
    }
}

/// The header of a replayed chain, until the txg that drops it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Retiring {
    pub header: ZilHeader,
    pub from: u64,
}

/// One dataset's intent log.
pub struct Zil {
    pub(super) core: Arc<PoolCore>,
    /// The dataset's id (its record's object number).
    pub(super) dataset: u64,
    pub(super) name: Mutex<String>,
    pub(super) st: Mutex<LogState>,
    pub(super) cv: Condvar,
    pub stats: ZilStats,
    /// `logbias=throughput` (`indirect.rs`).
    pub(super) throughput: AtomicBool,
}

impl Zil {
    /// The log of dataset `dataset` whose record holds `header` (the
    /// default header: no log yet).
    pub(crate) fn new(core: Arc<PoolCore>, dataset: u64, name: &str, header: ZilHeader) -> Arc<Zil> {
        Arc::new(Zil { core, dataset, name: Mutex::new(name.to_string()), st: Mutex::new(LogState::new(header)), cv: Condvar::new(), stats: ZilStats::default(), throughput: AtomicBool::new(false) })
    }

    pub(crate) fn what(&self) -> String {
        format!("intent log of '{}'", self.name.lock())
    }

    /// The file system was renamed (messages name it).
    pub(crate) fn renamed(&self, name: &str) {
        *self.name.lock() = name.to_string();
    }

    /// Logs a change made in `txg` (call inside its transaction, under the
    /// locks that order it). `len`: a write's length, its data read at
    /// commit.
    pub fn log(&self, txg: u64, rec: LogRecord, len: u64) {
        self.log_itx(txg, rec, len, false);
    }

    /// As `log`, for a change a commit makes durable by syncing its txg.
    pub fn log_by_txg(&self, txg: u64, rec: LogRecord, len: u64) {
        self.log_itx(txg, rec, len, true);
    }

    fn log_itx(&self, txg: u64, rec: LogRecord, len: u64, txg_sync: bool) {
        let mut st = self.st.lock();
        let seq = st.next_seq;
        st.next_seq += 1;
        let obj = rec.object();
        let itx = Itx { seq, txg, rec, len, txg_sync };
        if obj == 0 {
            st.namespace.push(itx);
        } else {
            st.by_object.entry(obj).or_default().push(itx);
        }
        self.stats.itxs.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes every namespace change and every change to object `obj` (0:
    /// to every object) made so far durable: written to the log and
    /// flushed, or synced with their txg.
    pub fn commit(&self, obj: u64, src: &dyn LogSource) -> Result<()> {
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        let t0 = std::time::Instant::now();
        let res = self.commit_rounds(obj, src);
        self.stats.commit_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        res
    }

    /// Syncing context, txg `txg`: frees the blocks whose records are all
    /// in `txg` or before, and returns the header to write when it changed.
    pub(crate) fn sync(&self, txg: u64) -> Result<Option<ZilHeader>> {
        let mut st = self.st.lock();
        if st.retiring.is_some_and(|r| txg >= r.from) {
            // Every replayed change is in this txg or before: the new
            // header (no claim, nothing replayed) goes with it.
            st.retiring = None;
            st.claim_txg = 0;
            st.replay_seq = 0;
            st.replay_marks.clear();
        }
        let guid = st.chain.map_or(0, |c| c.guid);
        let retiring = st.retiring;
        while let Some(b) = st.blocks.front().copied() {
            if b.guid == guid && b.max_txg > txg || retiring.is_some_and(|r| r.header.guid == b.guid) {
                break;
            }
            st.blocks.pop_front();
            self.core.free_log_block(&b.ptr, txg).map_err(|e| e.context(self.what()))?;
        }
        if !st.data.is_empty() {
            let keep: Vec<u64> = [Some(guid), retiring.map(|r| r.header.guid)].into_iter().flatten().filter(|&g| g != 0).collect();
            let mut data = std::mem::take(&mut st.data);
            let res = self.free_claimed_data(&mut data, &keep, txg);
            st.data = data;
            res?;
        }
        let h = header_now(&st, txg);
        // The marks this txg's header carries are kept as its replay seq
        // (dropping them alone would let the next header go back).
        st.replay_seq = h.replay_seq;
        st.replay_marks.retain(|&(t, _)| t > txg);
        if h == st.written {
            return Ok(None);
        }
        st.written = h;
        Ok(Some(h))
    }

    /// Whether the next sync must write the header (a new chain waits for it).
    pub(crate) fn header_dirty(&self, txg: u64) -> bool {
        let st = self.st.lock();
        header_now(&st, txg) != st.written
    }

    /// `txg` is on disk: its records are moot.
    pub(crate) fn sync_done(&self, txg: u64) {
        let mut st = self.st.lock();
        st.namespace.retain(|i| i.txg > txg);
        st.pending.retain(|i| i.txg > txg);
        st.by_object.retain(|_, v| {
            v.retain(|i| i.txg > txg);
            !v.is_empty()
        });
    }

    /// Forgets every record and abandons the chain (rollback, receive,
    /// destroy: the records describe a state that is gone). Syncing context
    /// of `txg` or open context; the blocks are freed at the next sync.
    pub(crate) fn discard(&self) {
        let mut st = self.st.lock();
        st.namespace.clear();
        st.by_object.clear();
        st.pending.clear();
        abandon_chain(&mut st);
    }

    /// Records logged and not yet on disk (for tests and `zilstat`).
    pub fn outstanding(&self) -> usize {
        let st = self.st.lock();
        st.namespace.len() + st.pending.len() + st.by_object.values().map(Vec::len).sum::<usize>()
    }

    /// Checks invariants 1, 2 and 4 of the module docs.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let st = self.st.lock();
        check_order(&st.namespace).map_err(|e| format!("{}: namespace list: {}", self.what(), e))?;
        for (o, v) in &st.by_object {
            check_order(v).map_err(|e| format!("{}: object {}: {}", self.what(), o, e))?;
            if v.iter().any(|i| i.rec.object() != *o) {
                return Err(format!("{}: a record of another object on object {}'s list", self.what(), o));
            }
        }
        check_blocks(&st).map_err(|e| format!("{}: {}", self.what(), e))?;
        check_flights(&st).map_err(|e| format!("{}: {}", self.what(), e))
    }

    /// The header the last sync wrote (or import read).
    pub fn header(&self) -> ZilHeader {
        self.st.lock().written
    }

    /// Whether a block of this log (written, or the chain's next place)
    /// is on top-level vdev `vdev`.
    pub(crate) fn holds_blocks_on(&self, vdev: u32) -> bool {
        let st = self.st.lock();
        st.blocks.iter().any(|b| b.ptr.vdev == vdev && !b.ptr.is_none()) || st.chain.is_some_and(|c| c.next.vdev == vdev && !c.next.is_none())
    }

    /// `pool remove` of log vdev `vdev`: a chain with blocks there is
    /// retired (kept named until the open txg syncs, then freed), and the
    /// next round starts a new chain elsewhere.
    pub(crate) fn leave_vdev(&self, vdev: u32) {
        if !self.holds_blocks_on(vdev) {
            return;
        }
        let from = self.core.txg.open_txg();
        let mut st = self.st.lock();
        if !st.flights.is_empty() {
            // The rounds in flight finish on their blocks; the next call
            // (`empty_log_vdev` loops) retires the chain.
            return;
        }
        retire_chain(&mut st, from);
    }

    /// Bytes of log blocks this log holds allocated: written and not yet
    /// freed, and the chain's next place (for tests and `zilstat`).
    pub fn held_log_bytes(&self) -> u64 {
        let st = self.st.lock();
        st.blocks.iter().map(|b| b.ptr.asize).sum::<u64>() + st.chain.map_or(0, |c| c.next.asize)
    }

    /// Whether import found records this log must replay.
    pub fn needs_replay(&self) -> bool {
        self.st.lock().needs_replay
    }
}

/// Moves the namespace records and `obj`'s (every object's when 0) to
/// the pending round, keeping sequence order.
pub(super) fn take_for_commit(st: &mut LogState, obj: u64) {
    let mut taken = std::mem::take(&mut st.namespace);
    if obj == 0 {
        for (_, v) in st.by_object.drain() {
            taken.extend(v);
        }
    } else if let Some(v) = st.by_object.remove(&obj) {
        taken.extend(v);
    }
    if taken.is_empty() {
        return;
    }
    st.pending.extend(taken);
    st.pending.sort_by_key(|i| i.seq);
}

/// The header as of the sync of `txg`.
pub(super) fn header_now(st: &LogState, txg: u64) -> ZilHeader {
    if let Some(r) = st.retiring.filter(|r| txg < r.from) {
        let replayed = st.replay_marks.iter().filter(|&&(t, _)| t <= txg).map(|&(_, s)| s).max();
        return ZilHeader { replay_seq: replayed.unwrap_or(0).max(st.replay_seq), ..r.header };
    }
    let Some(c) = st.chain else {
        return ZilHeader { guid: 0, first: LogPtr::default(), claim_txg: st.claim_txg, replay_seq: st.replay_seq };
    };
    let in_flight = || st.flights.iter().find(|f| f.guid == c.guid).and_then(|f| f.first);
    let first = st.blocks.iter().find(|b| b.guid == c.guid).map(|b| b.ptr).or_else(in_flight).unwrap_or(c.next);
    let replayed = st.replay_marks.iter().filter(|&&(t, _)| t <= txg).map(|&(_, s)| s).max();
    ZilHeader { guid: c.guid, first, claim_txg: st.claim_txg, replay_seq: replayed.unwrap_or(0).max(st.replay_seq) }
}

/// Drops the chain: its live blocks are freed at the next sync, the next
/// round starts a new one.
pub(super) fn abandon_chain(st: &mut LogState) {
    if let Some(c) = st.chain.take() {
        // The place the next block would have gone is freed with the rest
        // (none when import could not claim it).
        if !c.next.is_none() {
            st.blocks.push_back(LiveBlock { ptr: c.next, guid: c.guid, max_txg: 0 });
        }
    }
}

/// Drops the chain as `abandon_chain` does, but keeps it named by the
/// header (and its blocks allocated) through the syncs of txgs before
/// `from`: its blocks may hold acknowledged records of txgs up to `from`,
/// and a sync of an earlier txg that dropped it would lose them to a crash
/// (abandoning freed them at the next sync whatever their records' txgs).
/// A chain already retiring (a replayed one) keeps its place; the chain
/// dropped then has no acknowledged record (its first round waits for a
/// header naming it, which comes after the retiring one's last txg).
pub(super) fn retire_chain(st: &mut LogState, from: u64) {
    if st.retiring.is_none() && st.chain.is_some() {
        let header = header_now(st, u64::MAX);
        st.retiring = Some(Retiring { header, from });
    }
    abandon_chain(st);
}

fn check_order(v: &[Itx]) -> std::result::Result<(), String> {
    match v.windows(2).find(|w| w[0].seq >= w[1].seq) {
        Some(w) => Err(format!("record {} before record {}", w[0].seq, w[1].seq)),
        None => Ok(()),
    }
}

fn check_blocks(st: &LogState) -> std::result::Result<(), String> {
    let guid = st.chain.map_or(0, |c| c.guid);
    let mut seen_current = false;
    let mut last_seq = 0;
    for b in &st.blocks {
        if b.guid == guid {
            if seen_current && b.ptr.seq != last_seq + 1 {
                return Err(format!("block {} after block {}", b.ptr.seq, last_seq));
            }
            seen_current = true;
            last_seq = b.ptr.seq;
        } else if seen_current {
            return Err(format!("a block of chain {:#x} after the current chain's", b.guid));
        }
    }
    Ok(())
}

impl Zil {
    /// Replay: record `seq` is applied in `txg` (called inside its
    /// transaction, so the header that txg writes says so).
    pub(crate) fn mark_replayed(&self, txg: u64, seq: u64) {
        self.st.lock().replay_marks.push((txg, seq));
    }

    /// The header fields replay needs: (guid, first, claim txg, replay seq).
    pub(crate) fn replay_start(&self) -> ZilHeader {
        let st = self.st.lock();
        // The claim txg import set (the header read then may lack it).
        ZilHeader { claim_txg: st.claim_txg, replay_seq: st.replay_seq, ..st.written }
    }

    /// Replay is over: the chain is dropped (its blocks freed at the next
    /// sync, with the header naming a new chain).
    /// The replayed changes are in txgs up to the one open now: syncs
    /// before it keep writing the old chain's header (so a crash finds the
    /// records not yet on disk), the first after writes the new one.
    /// Commits from now on start a new chain.
    pub(crate) fn finish_replay(&self) {
        let from = self.core.txg.open_txg();
        let mut st = self.st.lock();
        st.needs_replay = false;
        let old = header_now(&st, u64::MAX);
        st.retiring = Some(Retiring { header: ZilHeader { replay_seq: 0, ..old }, from });
        abandon_chain(&mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(offset: u64, seq: u64) -> LogPtr {
        LogPtr { vdev: 0, size: 4096, offset, asize: 4096, seq }
    }

    /// A log whose chain `guid` has written `blocks` (ptr, newest record
    /// txg) and goes on at `next`.
    fn state(guid: u64, blocks: &[(LogPtr, u64)], next: LogPtr) -> LogState {
        let mut st = LogState::new(ZilHeader::default());
        st.chain = Some(Chain { guid, next, durable_txg: 0 });
        st.blocks = blocks.iter().map(|&(ptr, max_txg)| LiveBlock { ptr, guid, max_txg }).collect();
        st
    }

    /// Regression (a failed log write): the chain was abandoned, and the
    /// next sync — possibly of a txg before the one holding the records
    /// earlier rounds acknowledged — wrote a header without it and freed
    /// its blocks. Retired, it stays named through the syncs before `from`.
    #[test]
    fn a_retired_chain_stays_named_until_its_txg() {
        let mut st = state(0x51, &[(ptr(0x1000, 1), 9), (ptr(0x2000, 2), 10)], ptr(0x3000, 3));
        retire_chain(&mut st, 10);
        assert!(st.chain.is_none(), "the next round starts a new chain");
        for txg in [8, 9] {
            let h = header_now(&st, txg);
            assert_eq!((h.guid, h.first), (0x51, ptr(0x1000, 1)), "txg {txg}: the acknowledged records' chain");
        }
        assert_eq!(header_now(&st, 10).guid, 0, "txg 10 holds every record: the chain goes");
        assert!(st.blocks.iter().any(|b| b.ptr == ptr(0x3000, 3)), "the next place is freed with the chain");
        // A chain already retiring keeps its place; the new one is dropped.
        st.chain = Some(Chain { guid: 0x77, next: ptr(0x4000, 1), durable_txg: 12 });
        retire_chain(&mut st, 12);
        assert_eq!(header_now(&st, 9).guid, 0x51);
    }

    /// A chain whose next place import could not claim frees none.
    #[test]
    fn abandoning_frees_no_unclaimed_place() {
        let mut st = state(0x52, &[], LogPtr::default());
        abandon_chain(&mut st);
        assert!(st.blocks.is_empty(), "{:?}", st.blocks);
    }
}
