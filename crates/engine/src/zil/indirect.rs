//! Indirect writes (OpenZFS's WR_INDIRECT): which write data goes into
//! the log and which is written in place, and the blocks written in place
//! after a crash — claimed at import, read back by replay, freed with the
//! chain. The writing itself is the object layer's (`object/prewrite.rs`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use tarn_ondisk::bp::BlockPtr;
use tarn_ondisk::zil::{LogRecord, Record, WRITE_DATA_MAX};

use super::log::Zil;
use crate::error::{Error, ErrorKind, Result};
use crate::io::{block, IoClass};
use crate::io::block::BlockData;
use crate::vdev::ReadCheck;

/// How a commit logs one write (`Zil::write_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritePolicy {
    /// Whole blocks are written in place and logged by pointer.
    pub indirect: bool,
    /// With `indirect`, a block the write covers only in part is written
    /// in place too when the part is at least this long
    /// (`zfs_immediate_write_sz`): a large write(2) that reaches the file
    /// system as two requests (an unaligned buffer spans one page more
    /// than the transport takes) leaves one block split between them.
    pub min_part: u64,
    /// Most data one copied record carries (`zil_maxcopied`).
    pub max_copied: usize,
}

/// A block named by an indirect record of a chain found at import, claimed
/// (a transient allocation) until the chain is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ClaimedData {
    pub guid: u64,
    pub vdev: u32,
    pub offset: u64,
    pub asize: u64,
}

impl Zil {
    /// `logbias` of the dataset: true for `throughput`.
    pub fn set_logbias_throughput(&self, on: bool) {
        self.throughput.store(on, Ordering::Relaxed);
    }

    pub fn logbias_throughput(&self) -> bool {
        self.throughput.load(Ordering::Relaxed)
    }

    /// How to log a write of `len` bytes (zfs_log.c's `zfs_log_write`):
    /// with `logbias=throughput` its whole blocks are written in place;
    /// with `latency`, only when it is at least `zfs_immediate_write_sz`
    /// and the pool has no log device taking writes (a fast log device
    /// makes copying the data cheaper than a write to the main pool).
    /// A block the write covers only in part is written in place too when
    /// the part is at least `zfs_immediate_write_sz` (OpenZFS logs every
    /// block of an indirect write by pointer, however little of it the
    /// write covers); smaller parts are copied, `zil_maxcopied` bytes a
    /// record.
    pub fn write_policy(&self, len: u64) -> WritePolicy {
        let t = self.core.tunables.read();
        let max_copied = (t.zil_maxcopied as usize).clamp(512, WRITE_DATA_MAX);
        let indirect = self.logbias_throughput() || (len >= t.zfs_immediate_write_sz && self.core.log_targets().is_empty());
        WritePolicy { indirect, max_copied, min_part: t.zfs_immediate_write_sz.max(1) }
    }

    /// Import: claims the blocks the chain's indirect records name that
    /// no synced txg owns — born after `claim_txg` (OpenZFS's
    /// `zil_claim_write`): on disk they are free, the txgs that would have
    /// adopted them lost to the crash. Blocks of earlier txgs were adopted
    /// (or freed) by their sync and are not the log's. Each block once,
    /// however many records name it.
    pub(super) fn claim_indirect(&self, guid: u64, records: &[&Record], claim_txg: u64, out: &mut Vec<ClaimedData>) -> Result<()> {
        let mut seen = BTreeSet::new();
        for r in records {
            let LogRecord::WriteIndirect { bp, .. } = &r.rec else { continue };
            if bp.birth <= claim_txg {
                continue;
            }
            let d = bp.dva[0];
            if !seen.insert((d.vdev, d.offset)) {
                continue;
            }
            if self.core.logs.contains(d.vdev) {
                return Err(Error::corrupt(format!("{}: record {} names a data block on log vdev {}", self.what(), r.seq, d.vdev)));
            }
            self.core.alloc.lock().claim_transient(d.vdev, d.offset, d.asize).map_err(|e| {
                Error::corrupt(format!("{}: record {}: block {}:{:#x}+{:#x} cannot be claimed: {}", self.what(), r.seq, d.vdev, d.offset, d.asize, e))
            })?;
            out.push(ClaimedData { guid, vdev: d.vdev, offset: d.offset, asize: d.asize });
        }
        Ok(())
    }

    /// Frees the claimed blocks of chains no longer named (syncing
    /// context of `txg`): replayed, discarded or retired.
    pub(super) fn free_claimed_data(&self, data: &mut Vec<ClaimedData>, keep: &[u64], txg: u64) -> Result<()> {
        let mut res = Ok(());
        data.retain(|c| {
            if keep.contains(&c.guid) || res.is_err() {
                return true;
            }
            res = self.core.alloc.lock().free_transient(c.vdev, c.offset, c.asize, txg).map_err(|e| {
                Error::corrupt(format!("{}: freeing claimed block {}:{:#x}+{:#x}: {}", self.what(), c.vdev, c.offset, c.asize, e))
            });
            res.is_err()
        });
        res
    }

    /// Bytes of blocks claimed at import for indirect records and not yet
    /// freed (for tests and `zilstat`).
    pub fn claimed_data_bytes(&self) -> u64 {
        self.st.lock().data.iter().map(|c| c.asize).sum()
    }

    /// The blocks the indirect records of the chain import found name, in
    /// log order (for tests and inspection).
    pub fn indirect_blocks(&self) -> Result<Vec<BlockPtr>> {
        let h = self.replay_start();
        if h.guid == 0 {
            return Ok(Vec::new());
        }
        let (blocks, _) = self.walk(h.guid, h.first)?;
        Ok(blocks
            .iter()
            .flat_map(|(_, r)| r)
            .filter_map(|r| match &r.rec {
                LogRecord::WriteIndirect { bp, .. } => Some(*bp),
                _ => None,
            })
            .collect())
    }

    /// Replay: the data of an indirect record's block, verified; None when
    /// it does not verify (a write torn by the crash before the commit
    /// flushed it: the record was never acknowledged). Read speculatively,
    /// as log blocks are: a block that does not verify is expected, not a
    /// device's fault.
    pub(crate) fn read_indirect(&self, bp: &BlockPtr) -> Result<Option<BlockData>> {
        let dva = bp.dva[0];
        let (v, len) = match self.core.copy_extent(bp, &dva) {
            Ok(x) => x,
            Err(_) => return Ok(None),
        };
        let check = |raw: &[u8]| block::verify(bp, raw).is_ok();
        let rc = ReadCheck { check: &check, repair: false, failed: &|_, _, _| {}, speculative: true };
        match v.read_checked(IoClass::SyncRead, dva.offset, len, bp.birth, &rc) {
            Ok(raw) => Ok(Some(block::decode(bp, raw).map_err(|e| e.context(self.what()))?)),
            Err(e) if e.kind == ErrorKind::Corrupt => Ok(None),
            Err(e) => Err(e.context(format!("{}: indirect write block {}:{:#x}", self.what(), dva.vdev, dva.offset))),
        }
    }
}

/// The vdevs an indirect record's block is on (a round flushes them with
/// its log blocks).
pub(super) fn data_vdevs(records: &[Record]) -> Vec<u32> {
    let mut v: Vec<u32> = records
        .iter()
        .filter_map(|r| match &r.rec {
            LogRecord::WriteIndirect { bp, .. } => Some(bp.dva[0].vdev),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
