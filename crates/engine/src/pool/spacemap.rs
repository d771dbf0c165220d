//! Persisting the allocator: the space log and space checkpoints.
//!
//! Each txg appends one log block listing its allocations and frees (the
//! log block's own allocation included: it is allocated before the records
//! are taken). Log blocks are chained newest to oldest through a block
//! pointer at their start, and the uberblock names the newest. Every
//! `tarn_space_checkpoint_interval` txgs the whole allocator state is written
//! as a checkpoint instead — a chain of chunks of at most 1 MiB, each naming
//! the next — and the old log and checkpoint blocks are freed. Import loads
//! the checkpoint and replays the logs after it, so it reads O(free-space
//! fragments + recent changes), never the whole block tree. (OpenZFS keeps
//! per-metaslab space maps plus a log; one pool-wide checkpoint is simpler and
//! is written rarely.)
//!
//! Log block: `prev block pointer (128 B) | spacelog records`.
//! Checkpoint chunk: `next block pointer (128 B) | bytes of the encoded checkpoint`.

use std::sync::Arc;

use tarn_ondisk::bp::{BlockPtr, ChecksumType, Compression, Dva, ObjectType, BP_SIZE};

use crate::error::{Error, Result};
use crate::io::{checksum, IoClass, WriteGroup};
use crate::pool::alloc::spacelog::{self, TxgRecords};
use crate::pool::core::PoolCore;
use crate::sys::buf::AlignedBuf;

/// Largest space block: checkpoint chunks, and the bound a log block must fit.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Copies of every space block: import cannot proceed without them.
const SPACE_COPIES: u8 = crate::pool::core::POOL_METADATA_COPIES;

/// Queues the write of a space block into its pre-allocated places. The block
/// is stored uncompressed so its size is known before it is allocated. What
/// is written is the payload in whole sectors, as a read of it asks for
/// (`PoolCore::copy_extent`): on RAID-Z the columns follow from that length,
/// so writing the whole allocation would lay the block out differently.
fn write_raw(core: &PoolCore, txg: u64, otype: ObjectType, places: &[(u32, u64, u64)], payload: &[u8], group: &Arc<WriteGroup>) -> Result<BlockPtr> {
    let asize = places.iter().map(|p| p.2).min().unwrap_or(0);
    let phys = payload.len().div_ceil(core.sector) * core.sector;
    if phys as u64 > asize {
        return Err(Error::corrupt(format!("space block of {} bytes exceeds its {} allocated", payload.len(), asize)));
    }
    let mut buf = AlignedBuf::zeroed(phys);
    buf[..payload.len()].copy_from_slice(payload);
    let buf = Arc::new(buf);
    let mut bp = BlockPtr::hole(payload.len() as u32, otype, 0);
    bp.psize = payload.len() as u32;
    bp.compress = Compression::Off;
    bp.checksum = ChecksumType::Blake3;
    bp.cksum = checksum::compute(ChecksumType::Blake3, payload);
    bp.birth = txg;
    bp.fill = 1;
    for (i, &(vdev, offset, asize)) in places.iter().enumerate() {
        bp.dva[i] = Dva { vdev, asize, offset };
        core.vdevs.top(vdev).write(IoClass::AsyncWrite, offset, buf.clone(), group, 0, txg);
    }
    Ok(bp)
}

/// Allocates the copies of one space block (apart from each other, as
/// every block's copies are).
fn alloc(core: &PoolCore, len: usize, txg: u64) -> Result<Vec<(u32, u64, u64)>> {
    let sector = core.sector;
    let len = (len.div_ceil(sector) * sector) as u64;
    core.alloc_copies(len, txg, SPACE_COPIES).map_err(|e| e.context("space log"))
}

/// Writes `txg`'s log block after `prev`; returns its pointer, or None when
/// the txg allocated and freed nothing.
pub fn write_log(core: &PoolCore, txg: u64, prev: &BlockPtr, group: &Arc<WriteGroup>) -> Result<Option<BlockPtr>> {
    let (na, nf) = core.alloc.lock().pending_record_counts(txg);
    if na == 0 && nf == 0 {
        return Ok(None);
    }
    // The log block's own allocation is one more extent in the records.
    let bound = BP_SIZE + core.alloc.lock().records_upper_bound(txg, SPACE_COPIES as usize);
    let place = alloc(core, bound, txg)?;
    let recs = core.alloc.lock().take_records(txg);
    let place = place.as_slice();
    let mut payload = prev.to_bytes().to_vec();
    payload.extend_from_slice(&spacelog::encode_records(&recs));
    write_raw(core, txg, ObjectType::SpaceLog, place, &payload, group).map(Some)
}

/// Writes a checkpoint of the allocator as of `txg` (after freeing `old`
/// blocks); returns the pointer to its first chunk and all chunk pointers.
pub fn write_checkpoint(core: &PoolCore, txg: u64, old: &[BlockPtr], group: &Arc<WriteGroup>) -> Result<(BlockPtr, Vec<BlockPtr>)> {
    for bp in old {
        core.free_block(bp, txg)?;
    }
    // Each allocation can split one free range in two, adding one extent:
    // the chunks' own copies add up to SPACE_COPIES extents each. The bound
    // is taken once for one chunk, then again for the chunks that needs;
    // the 64 spare extents cover the few chunks the second pass may add.
    let (estimate, nchunks) = {
        let cp = core.alloc.lock().checkpoint();
        let extra = |chunks: usize| 64 + SPACE_COPIES as usize * chunks;
        let chunks_for = |bytes: usize| bytes.div_ceil(CHUNK_BYTES - BP_SIZE).max(1);
        let first = chunks_for(spacelog::encoded_checkpoint_upper_bound(&cp, extra(1)));
        let estimate = spacelog::encoded_checkpoint_upper_bound(&cp, extra(first));
        (estimate, chunks_for(estimate))
    };
    let mut places = Vec::with_capacity(nchunks);
    for i in 0..nchunks {
        let remaining = estimate.saturating_sub(i * (CHUNK_BYTES - BP_SIZE));
        places.push(alloc(core, (remaining + BP_SIZE).min(CHUNK_BYTES), txg)?);
    }
    let cp = core.alloc.lock().checkpoint();
    let bytes = spacelog::encode_checkpoint(&cp);
    // Whatever the allocator recorded for this txg is inside the checkpoint.
    let _ = core.alloc.lock().take_records(txg);
    let pieces: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES - BP_SIZE).collect();
    if pieces.len() > places.len() {
        return Err(Error::corrupt("space checkpoint outgrew its estimate"));
    }
    let mut next = BlockPtr::default();
    let mut bps = Vec::with_capacity(places.len());
    for (i, place) in places.iter().enumerate().rev() {
        let piece = pieces.get(i).copied().unwrap_or(&[]);
        let mut payload = next.to_bytes().to_vec();
        payload.extend_from_slice(piece);
        next = write_raw(core, txg, ObjectType::SpaceCheckpoint, place, &payload, group)?;
        bps.push(next);
    }
    bps.reverse();
    Ok((next, bps))
}

fn read_raw(core: &PoolCore, bp: &BlockPtr, what: &str) -> Result<(BlockPtr, Vec<u8>)> {
    let data = core.read_block(bp, IoClass::SyncRead, &|| what.to_string())?;
    if data.len() < BP_SIZE {
        return Err(Error::corrupt(format!("{} block too short", what)));
    }
    let link = BlockPtr::decode(&data[..BP_SIZE]).map_err(|e| Error::from(e).context(what.to_string()))?;
    Ok((link, data[BP_SIZE..].to_vec()))
}

/// Loads the allocator from the checkpoint at `cp` and the log chain ending
/// at `head`; returns the chain pointers (checkpoint chunks, log blocks).
pub fn load(core: &PoolCore, cp: &BlockPtr, head: &BlockPtr, current_txg: u64) -> Result<(Vec<BlockPtr>, Vec<BlockPtr>)> {
    let mut cp_bps = Vec::new();
    let mut bytes = Vec::new();
    let mut at = *cp;
    while !at.is_hole() {
        if cp_bps.len() > 1 << 16 {
            return Err(Error::corrupt("space checkpoint chain does not end"));
        }
        cp_bps.push(at);
        let (next, piece) = read_raw(core, &at, "space checkpoint")?;
        bytes.extend_from_slice(&piece);
        at = next;
    }
    let checkpoint = spacelog::decode_checkpoint(&bytes)
        .map_err(|e| Error::corrupt(format!("pool '{}': space checkpoint: {:?}", core.name, e)))?;
    let mut logs = Vec::new();
    let mut log_bps = Vec::new();
    let mut at = *head;
    while !at.is_hole() {
        if log_bps.len() > 1 << 16 {
            return Err(Error::corrupt("space log chain does not end"));
        }
        log_bps.push(at);
        let (prev, body) = read_raw(core, &at, "space log")?;
        let recs: TxgRecords = spacelog::decode_records(&body)
            .map_err(|e| Error::corrupt(format!("pool '{}': space log: {:?}", core.name, e)))?;
        logs.push(recs);
        at = prev;
    }
    logs.reverse();
    log_bps.reverse();
    let mut a = core.alloc.lock();
    a.load_checkpoint(&checkpoint)
        .map_err(|e| Error::corrupt(format!("pool '{}': loading space checkpoint: {:?}", core.name, e)))?;
    for r in &logs {
        a.replay(r, current_txg)
            .map_err(|e| Error::corrupt(format!("pool '{}': replaying space log of txg {}: {:?}", core.name, r.txg, e)))?;
    }
    Ok((cp_bps, log_bps))
}
