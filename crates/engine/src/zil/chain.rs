//! The chain on the devices: writing a round's blocks, reading a chain back
//! (claim at import, replay), and the log blocks' space (transient
//! allocations, see `pool/alloc/metaslab.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_ondisk::zil::{self as ondisk, BlockHeader, BlockRead, LogPtr, Record, LOG_BLOCK_MIN};

use super::commit::{FillResult, Flight};
use super::log::{abandon_chain, Chain, Itx, LiveBlock, LogSource, LogState, Zil};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{IoClass, WriteGroup};
use crate::object::Tx;
use crate::pool::core::PoolCore;
use crate::sys::buf::AlignedBuf;
use crate::vdev::ReadCheck;

/// Most blocks a chain walk follows: far beyond any real chain (a txg's
/// worth of log), a bound on what a damaged or looping chain costs.
const CHAIN_BLOCKS_MAX: usize = 1 << 20;

impl PoolCore {
    /// Allocates a log block of `size` bytes (transient: see the allocator)
    /// on a top-level vdev that takes writes; `seq` is the block's number.
    /// A log vdev that takes writes first (`pool::log_vdev`); else the
    /// main pool, never from the space writers were admitted against
    /// (dirty data and the slop reserve): the sync must still find it.
    pub(crate) fn alloc_log_block(&self, size: u32, seq: u64) -> Result<LogPtr> {
        let targets = self.log_targets();
        if !targets.is_empty() {
            let normal: Vec<u32> = self.vdevs.all().iter().map(|v| v.id()).filter(|id| !targets.contains(id)).collect();
            if let Ok((vdev, offset, asize)) = self.alloc.lock().alloc_transient(size as u64, &targets, &normal) {
                assert!(self.logs.contains(vdev), "pool '{}': a log block on vdev {}, no log vdev", self.name, vdev);
                return Ok(LogPtr { vdev, size, offset, asize, seq });
            }
        }
        if self.room_bytes(size as u64) < size as u64 * 2 {
            return Err(Error::no_space(format!("pool '{}': no room for a log block beside the dirty data and the reserve", self.name)));
        }
        let down: Vec<u32> = self.vdevs.all().iter().filter(|v| !v.writable() || self.logs.contains(v.id())).map(|v| v.id()).collect();
        let (vdev, offset, asize) = self
            .alloc
            .lock()
            .alloc_transient(size as u64, &[], &down)
            .map_err(|e| Error::no_space(format!("pool '{}': no room for a log block of {} bytes: {}", self.name, size, e)))?;
        self.took_space(asize);
        Ok(LogPtr { vdev, size, offset, asize, seq })
    }

    /// Frees a log block in txg `txg` (deferred, unrecorded).
    pub(crate) fn free_log_block(&self, p: &LogPtr, txg: u64) -> Result<()> {
        if p.is_none() {
            return Ok(());
        }
        self.alloc.lock().free_transient(p.vdev, p.offset, p.asize, txg).map_err(|e| {
            Error::corrupt(format!("pool '{}': freeing log block {}:{:#x}+{:#x}: {}", self.name, p.vdev, p.offset, p.asize, e))
        })
    }

    /// Takes the place of a log block found at import out of free space.
    fn claim_log_block(&self, p: &LogPtr) -> Result<()> {
        self.alloc.lock().claim_transient(p.vdev, p.offset, p.asize).map_err(|e| {
            Error::corrupt(format!("pool '{}': log block {}:{:#x}+{:#x} cannot be claimed: {}", self.name, p.vdev, p.offset, p.asize, e))
        })
    }
}

/// A chain read back: its blocks that verify (with their records), and
/// the place after the last.
pub(crate) type Walked = (Vec<(LogPtr, Vec<Record>)>, LogPtr);

/// A block of a round, ready to be written.
pub(super) struct Planned {
    pub ptr: LogPtr,
    records: Vec<Record>,
    next: LogPtr,
}

impl Zil {
    /// Fills a round's records: a write's data read now. A round holding a
    /// record made durable by its txg, or more bytes than
    /// `tarn_zil_commit_max_bytes`, syncs the txg instead.
    pub(super) fn fill_round(&self, itxs: Vec<Itx>, src: &dyn LogSource) -> Result<FillResult> {
        if let Some(i) = itxs.iter().find(|i| i.txg_sync) {
            return Ok(FillResult::FallBack(format!("record {} is made durable by its txg", i.seq)));
        }
        let mut records = Vec::new();
        for itx in &itxs {
            let recs = src.fill(itx)?;
            let n = recs.len();
            for (i, rec) in recs.into_iter().enumerate() {
                records.push(Record { seq: itx.seq, txg: itx.txg, more: i + 1 < n, rec });
            }
        }
        if records.is_empty() {
            return Ok(FillResult::Records(records));
        }
        let data: u64 = records.iter().map(|r| r.encoded_len() as u64).sum();
        let max = self.core.tunables.read().tarn_zil_commit_max_bytes;
        if data > max {
            return Ok(FillResult::FallBack(format!("{} bytes of records, more than tarn_zil_commit_max_bytes ({})", data, max)));
        }
        Ok(FillResult::Records(records))
    }

    /// Places the records in blocks after the chain's last: as many as fill
    /// each block, the rest in the next. Starts a chain if there is none.
    /// Called in round order (the chain's order).
    pub(super) fn plan(&self, st: &mut LogState, records: Vec<Record>) -> Result<Vec<Planned>> {
        let max_block = ondisk::LOG_BLOCK_MAX;
        let total: usize = records.iter().map(Record::encoded_len).sum();
        if st.chain.is_some_and(|c| c.next.is_none()) {
            // Import could not claim its next place: a new chain.
            abandon_chain(st);
        }
        if st.chain.is_none() {
            st.chain = Some(self.new_chain(block_size(total, max_block))?);
        }
        let chain = st.chain.expect("just made");
        let mut out: Vec<Planned> = Vec::new();
        let mut cur = chain.next;
        let mut left = records.into_iter().peekable();
        while left.peek().is_some() {
            let room = ondisk::block_room(cur.size);
            let mut used = 0;
            let mut here = Vec::new();
            while let Some(r) = left.peek() {
                let n = r.encoded_len();
                if used + n > room {
                    break;
                }
                used += n;
                here.push(left.next().expect("peeked"));
            }
            if here.is_empty() {
                // A record larger than the planned block: the block is
                // written empty-handed and the record goes to a big enough one.
                let n = left.peek().map_or(0, Record::encoded_len);
                let next = self.core.alloc_log_block(block_size(n, max_block), cur.seq + 1)?;
                out.push(Planned { ptr: cur, records: here, next });
                cur = next;
                continue;
            }
            let rest: usize = left.clone().map(|r| r.encoded_len()).sum();
            let next_size = block_size(if rest > 0 { rest } else { used }, max_block);
            let next = self.core.alloc_log_block(next_size, cur.seq + 1)?;
            out.push(Planned { ptr: cur, records: here, next });
            cur = next;
        }
        st.chain = Some(Chain { next: cur, ..chain });
        Ok(out)
    }

    /// A new chain: a fresh guid and a first block; usable once the txg
    /// that writes a header naming it has synced.
    fn new_chain(&self, size: u32) -> Result<Chain> {
        let tx = Tx::begin(&self.core)?;
        let guid = crate::pool::new_guid(&format!("{}/zil", self.name.lock())) | 1;
        let next = self.core.alloc_log_block(size, 1)?;
        Ok(Chain { guid, next, durable_txg: tx.txg() })
    }

    /// Writes a round's blocks of chain `guid` and waits for the writes;
    /// returns the top-level vdevs to flush: those written, and
    /// `data_vdevs` (where indirect records' blocks were written, before
    /// the round). A block for a lone device is written on this thread
    /// (`Leaf::write_now`): queued, it cost two thread hand-offs per
    /// commit (to an issue thread and back), the largest share of a
    /// one-writer commit after the device's own write and flush. Others
    /// (mirrors, RAID-Z) go through the scheduler as sync writes, together.
    pub(super) fn write_blocks(&self, guid: u64, planned: &[Planned], data_vdevs: &[u32]) -> Result<Vec<u32>> {
        assert!(guid != 0, "{}: blocks of no chain", self.what());
        let group = WriteGroup::unparked();
        let txg = self.core.txg.open_txg();
        let mut tops: Vec<u32> = Vec::new();
        let mut failed = None;
        for p in planned {
            let h = BlockHeader { guid, dataset: self.dataset, seq: p.ptr.seq, used: 0, nrecords: p.records.len() as u32, next: p.next };
            let buf = AlignedBuf::from_slice(&ondisk::encode_block(&h, &p.records, p.ptr.size as usize));
            let top = self.core.vdevs.top(p.ptr.vdev);
            // Someone waits for a log write: a scan backs off (`pool::scan::idle`).
            self.core.foreground.note();
            match top.leaf().filter(|_| top.up()) {
                // A failed write faults the leaf; the round falls back.
                Some(l) => {
                    if let Err(e) = l.write_now(&buf, p.ptr.offset) {
                        failed.get_or_insert(e.to_string());
                    }
                }
                None => top.write(IoClass::SyncWrite, p.ptr.offset, Arc::new(buf), &group, 0, txg),
            }
            if !tops.contains(&top.id()) {
                tops.push(top.id());
            }
        }
        // Every write has ended before the blocks can be given back.
        let queued = group.wait();
        if let Some(e) = failed.or(queued.err()) {
            return Err(Error::new(ErrorKind::Io, format!("{}: {}", self.what(), e)));
        }
        for &v in data_vdevs {
            if !tops.contains(&v) {
                tops.push(v);
            }
        }
        Ok(tops)
    }

    /// Flushes the devices of top-level vdevs `tops`: every log block
    /// written to them before is durable after.
    pub(super) fn flush_tops(&self, tops: &[u32]) -> Result<()> {
        for &id in tops {
            let top = self.core.vdevs.top(id);
            for leaf in top.leaf_arcs().iter().filter(|l| l.up()) {
                if let Some(l) = leaf.leaf() {
                    // A failed flush faults the leaf; the check below decides.
                    let _ = l.flush();
                }
            }
            if !top.writable() {
                return Err(Error::new(ErrorKind::Io, format!("{}: vdev {} lost its last device while the log was written", self.what(), top.path)));
            }
        }
        Ok(())
    }

    /// A round is acknowledged (in order): its blocks join the live list,
    /// holding their records (`logged`) or nothing (its chain was dropped:
    /// they are freed with it).
    pub(super) fn round_written(&self, st: &mut LogState, f: &Flight, planned: Vec<Planned>, logged: bool) {
        if !logged {
            for p in planned {
                st.blocks.push_back(LiveBlock { ptr: p.ptr, guid: f.guid, max_txg: 0 });
            }
            return;
        }
        if let Some(c) = st.chain.as_mut().filter(|c| c.guid == f.guid) {
            c.durable_txg = 0;
        }
        if !planned.is_empty() {
            self.stats.rounds.fetch_add(1, Ordering::Relaxed);
        }
        for p in planned {
            let max_txg = p.records.iter().map(|r| r.txg).max().unwrap_or(0);
            for r in &p.records {
                self.stats.records[r.rec.kind_index()].fetch_add(1, Ordering::Relaxed);
                match &r.rec {
                    ondisk::LogRecord::Write { data, .. } => self.stats.write_bytes.fetch_add(data.len() as u64, Ordering::Relaxed),
                    ondisk::LogRecord::WriteIndirect { len, .. } => self.stats.indirect_bytes.fetch_add(*len as u64, Ordering::Relaxed),
                    _ => 0,
                };
            }
            self.stats.blocks.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_used.fetch_add(p.records.iter().map(|r| r.encoded_len() as u64).sum::<u64>() + ondisk::BLOCK_HEADER as u64, Ordering::Relaxed);
            self.stats.bytes_alloc.fetch_add(p.ptr.asize, Ordering::Relaxed);
            st.blocks.push_back(LiveBlock { ptr: p.ptr, guid: f.guid, max_txg });
        }
    }

    /// Reads the block `ptr` names in chain `guid` (speculatively: a block
    /// that does not verify is the chain's end, not an error of a device).
    fn read_block(&self, guid: u64, ptr: &LogPtr) -> Result<BlockRead> {
        if self.core.vdevs.get(ptr.vdev as usize).is_none() {
            return Ok(BlockRead::End(format!("vdev {} does not exist", ptr.vdev)));
        }
        let top = self.core.vdevs.top(ptr.vdev);
        if self.core.logs.contains(ptr.vdev) && !top.state().usable() {
            // A log vdev that is gone (`import --missing-log`): the chain
            // ends here and what it held is lost (said by `claim`).
            return Ok(BlockRead::End(format!("on log vdev {}, which is {}", top.path, top.state().name())));
        }
        let ok = |b: &[u8]| matches!(ondisk::decode_block(b, guid, self.dataset, ptr), Ok(BlockRead::Valid(..)));
        let rc = ReadCheck { check: &ok, repair: false, failed: &|_, _, _| {}, speculative: true };
        match top.read_checked(IoClass::SyncRead, ptr.offset, ptr.size as u64, 0, &rc) {
            Ok(b) => ondisk::decode_block(&b, guid, self.dataset, ptr).map_err(|e| Error::corrupt(format!("{}: block {}: {}", self.what(), ptr.seq, e))),
            Err(e) if e.kind == ErrorKind::Corrupt => Ok(BlockRead::End("does not verify".into())),
            Err(e) => Err(e.context(format!("{}: block {}", self.what(), ptr.seq))),
        }
    }

    /// Walks the chain from `first`: the blocks that verify with their
    /// records, and the place after the last.
    pub(crate) fn walk(&self, guid: u64, first: LogPtr) -> Result<Walked> {
        let mut out = Vec::new();
        let mut cur = first;
        while !cur.is_none() && out.len() < CHAIN_BLOCKS_MAX {
            match self.read_block(guid, &cur)? {
                BlockRead::Valid(h, recs) => {
                    out.push((cur, recs));
                    cur = h.next;
                }
                BlockRead::End(_) => break,
            }
        }
        Ok((out, cur))
    }

    /// Import: claims the chain's blocks and the place after them, so
    /// nothing allocates over them; a chain holding records is marked for
    /// replay with `imported_txg` as its claim txg (unless it has one).
    pub(crate) fn claim(&self, imported_txg: u64) -> Result<()> {
        let h = self.st.lock().written;
        if h.guid == 0 {
            return Ok(());
        }
        // Until claimed, the chain owns no place: a claim that fails part
        // way must not have `discard` free a place it never took (it did:
        // the header's first block, claimed, went on the free list twice).
        if let Some(c) = self.st.lock().chain.as_mut() {
            c.next = LogPtr::default();
        }
        let (blocks, end) = self.walk(h.guid, h.first)?;
        if !end.is_none() && self.core.logs.contains(end.vdev) && self.core.vdevs.get(end.vdev as usize).is_some_and(|v| !v.state().usable()) {
            self.core.log_records_discarded(&self.what(), end.vdev, end.seq);
        }
        let mut st = self.st.lock();
        for (ptr, _) in &blocks {
            self.core.claim_log_block(ptr).map_err(|e| e.context(self.what()))?;
            st.blocks.push_back(LiveBlock { ptr: *ptr, guid: h.guid, max_txg: u64::MAX });
        }
        let claim_txg = if st.claim_txg == 0 { imported_txg } else { st.claim_txg };
        let records: Vec<&Record> = blocks.iter().flat_map(|(_, r)| r).collect();
        // Held (and freed with the chain) even when a later block of data
        // cannot be claimed and the log is discarded.
        let mut data = Vec::new();
        let res = self.claim_indirect(h.guid, &records, claim_txg, &mut data);
        st.data.extend(data);
        res?;
        // Where the chain goes on: unless that place is taken (or on no
        // device), then the next commit starts a new chain.
        let usable = |p: &LogPtr| self.core.vdevs.get(p.vdev as usize).is_some_and(|v| v.writable());
        let next = if !end.is_none() && usable(&end) && self.core.claim_log_block(&end).is_ok() { end } else { LogPtr::default() };
        if let Some(c) = st.chain.as_mut() {
            c.next = next;
        }
        if !blocks.is_empty() {
            st.needs_replay = true;
            if st.claim_txg == 0 {
                st.claim_txg = imported_txg;
            }
        }
        Ok(())
    }
}

/// The block size for `bytes` of records: whole 4 KiB, from 4 KiB to the
/// largest log block.
fn block_size(bytes: usize, max_block: u32) -> u32 {
    let want = (bytes + ondisk::BLOCK_HEADER).div_ceil(LOG_BLOCK_MIN as usize) * LOG_BLOCK_MIN as usize;
    (want as u32).clamp(LOG_BLOCK_MIN, max_block.max(LOG_BLOCK_MIN))
}
