//! Writing one txg of an object's changes: the syncing side of the object layer.
//!
//! For each dirty object of the txg, in three phases:
//!   A. snapshot its dirty record (blocks, frees, final size) under its lock;
//!   B. prepare dirty blocks — zero detection, compression, checksum — in
//!      parallel (rayon), without any lock, a batch of about 8 MiB at a time;
//!   C. under the object's lock again: apply the frees, allocate and queue
//!      each batch in block order (so consecutive blocks get adjacent
//!      addresses and the scheduler merges their writes), then rewrite the
//!      dirty indirect blocks bottom-up and encode the new dnode.
//! Batching lets the devices start on the first blocks while later ones are
//! still being checksummed, instead of idling through the whole CPU phase.
//! Freed blocks go to the allocator's deferred-free list. A small object whose
//! data fits its reserved dnode slots is stored inline instead of in a block.
//! Cloned blocks (phase C, before the data blocks) are linked, not written:
//! the pointer gets the txg as its logical birth and keeps its physical
//! birth; one whose source the block reference table refused (freed by the
//! previous sync) is linked as a copy of its data instead.

use std::sync::Arc;

use rayon::prelude::*;
use tarn_ondisk::bp::{BlockPtr, ObjectType};
use tarn_ondisk::dnode::{Dnode, BPS_PER_INDIRECT, INDIRECT_BLOCK_SIZE, MAX_LEVELS, SLOT_SIZE};

use super::state::{slot, IndBlock, ObjState, IND_SHIFT};
use super::Object;
use crate::error::{Error, Result};
use crate::io::block::BlockData;
use crate::io::{block, IoClass, Prepared, WriteGroup, WriteProps};
use crate::pool::brt::Linked;
use crate::pool::core::PoolCore;
use crate::sys::buf::AlignedBuf;

pub(crate) struct SyncCtx<'a> {
    pub core: &'a PoolCore,
    pub txg: u64,
    pub group: &'a Arc<WriteGroup>,
    pub props: WriteProps,
    /// The object set's cache policies: what the blocks this sync reads
    /// and the indirect blocks it writes may leave in the ARC and L2ARC.
    pub caching: super::ReadCaching,
    pub inline_max: u64,
    /// The object set's owner, told of every block written and freed.
    pub owner: Option<&'a dyn super::ObjsetOwner>,
}

impl SyncCtx<'_> {
    /// Frees a block the object set no longer references (through its owner,
    /// which may keep it for a snapshot).
    fn free(&self, bp: &BlockPtr) -> Result<()> {
        match self.owner {
            Some(o) => o.block_freed(self.core, bp, self.txg),
            None => self.core.free_block(bp, self.txg),
        }
    }

    /// A block the set now references without writing it (a clone).
    fn born(&self, bp: &BlockPtr) {
        if let Some(o) = self.owner {
            o.block_born(bp);
        }
    }

    /// Writes a block, inserting `cache_as` (the logical content) into the ARC.
    fn write_block_cached(&self, prep: Prepared, copies: u8, retire: u64, cache_as: Option<Arc<BlockData>>) -> Result<BlockPtr> {
        let bp = self.core.write_block(prep, self.txg, copies, self.group, retire, cache_as)?;
        if let Some(o) = self.owner {
            o.block_born(&bp);
        }
        Ok(bp)
    }
}

/// What a synced object contributes to its dnode block.
pub(crate) struct DnodeUpdate {
    pub id: u64,
    /// The dnode padded to its reserved slots; None when the object was freed.
    pub encoded: Option<Vec<u8>>,
    pub slots: usize,
    /// Change of the object's allocated bytes in this txg.
    pub used_delta: i64,
}

/// A clone to link: block id, the source's pointer, its claim's id.
struct CloneWork {
    blkid: u64,
    bp: BlockPtr,
    claim: Option<u64>,
}

struct Work {
    obj: Arc<Object>,
    otype: ObjectType,
    blocks: Vec<(u64, Arc<AlignedBuf>)>,
    clones: Vec<CloneWork>,
    /// Blocks of `blocks` the intent log already wrote (`prewrite.rs`):
    /// linked, not written. Sorted by block id.
    linked: Vec<(u64, BlockPtr, u64)>,
    /// Prewritten blocks nothing links: freed.
    stale: Vec<BlockPtr>,
    inline: bool,
    freed: bool,
}

/// Syncs `objs` for ctx.txg; objects without a record for it are skipped.
pub(crate) fn sync_objects(ctx: &SyncCtx, objs: &[Arc<Object>]) -> Result<Vec<DnodeUpdate>> {
    let work: Vec<Work> = objs.iter().filter_map(|o| snapshot(ctx, o)).collect();
    let mut used = vec![0i64; work.len()];
    let mut out = Vec::with_capacity(work.len());
    let mut batch: Vec<(usize, usize)> = Vec::new();
    let mut batch_bytes = 0usize;
    // Objects whose blocks have all been put in a batch, waiting for it.
    let mut awaiting: Vec<usize> = Vec::new();
    for (w, wk) in work.iter().enumerate() {
        used[w] += begin_object(ctx, wk)?;
        if !wk.inline && !wk.freed {
            for (b, (blkid, buf)) in wk.blocks.iter().enumerate() {
                if wk.linked.binary_search_by_key(blkid, |l| l.0).is_ok() {
                    continue;
                }
                batch.push((w, b));
                batch_bytes += buf.len();
                if batch_bytes >= BATCH_BYTES {
                    flush_batch(ctx, &work, &mut batch, &mut used)?;
                    batch_bytes = 0;
                    end_objects(ctx, &work, &mut awaiting, &used, &mut out)?;
                }
            }
        }
        awaiting.push(w);
        if batch.is_empty() {
            end_objects(ctx, &work, &mut awaiting, &used, &mut out)?;
        }
    }
    flush_batch(ctx, &work, &mut batch, &mut used)?;
    end_objects(ctx, &work, &mut awaiting, &used, &mut out)?;
    Ok(out)
}

/// Blocks prepared in parallel before their writes are queued.
const BATCH_BYTES: usize = 8 << 20;

/// Prepares a batch of blocks in parallel, then queues their writes.
fn flush_batch(ctx: &SyncCtx, work: &[Work], batch: &mut Vec<(usize, usize)>, used: &mut [i64]) -> Result<()> {
    let sector = ctx.core.sector;
    let prepared: Vec<Prepared> = batch
        .par_iter()
        .map(|&(w, b)| {
            let (_, buf) = &work[w].blocks[b];
            block::prepare(buf, buf.len(), work[w].otype, 0, ctx.txg, ctx.props, sector)
        })
        .collect();
    let mut cur: Option<(usize, parking_lot::MutexGuard<'_, ObjState>)> = None;
    for (&(w, b), prep) in batch.iter().zip(prepared) {
        if cur.as_ref().is_none_or(|(cw, _)| *cw != w) {
            cur = Some((w, work[w].obj.st.lock()));
        }
        let st = &mut cur.as_mut().expect("set above").1;
        let (blkid, buf) = &work[w].blocks[b];
        // Dnode-array blocks are dirtied by the sync itself and were never
        // counted as dirty data; everything else retires its block size.
        let otype = work[w].otype;
        let retire = if otype == ObjectType::DnodeArray { 0 } else { buf.len() as u64 };
        // Blocks of metadata objects (dnode blocks, directories, key/value
        // maps) enter the ARC as written, where the set's primarycache
        // keeps metadata, as indirect blocks do (and OpenZFS's ARC keeps
        // every block it writes): they are read again soon — the next txg
        // that changes a dnode reads its block back to patch it
        // (`patch_dnodes`), the next change of a map reads the map. Data
        // is left to the page cache above the mount. Uncached, a batch of
        // 500 dataset creates in a pool of 44,000 datasets read back ~450
        // name-index buckets (and, before, ~650 MOS dnode blocks) from the
        // device.
        let cache_as = (otype.is_metadata() && ctx.caching.primary.allows(true)).then(|| Arc::new(BlockData::new(AlignedBuf::from_slice(buf), buf.len())));
        used[w] += install_cached(ctx, st, *blkid, prep, retire, cache_as)?;
    }
    batch.clear();
    Ok(())
}

fn end_objects(ctx: &SyncCtx, work: &[Work], awaiting: &mut Vec<usize>, used: &[i64], out: &mut Vec<DnodeUpdate>) -> Result<()> {
    for w in awaiting.drain(..) {
        out.push(end_object(ctx, &work[w], used[w])?);
    }
    Ok(())
}

fn snapshot(ctx: &SyncCtx, o: &Arc<Object>) -> Option<Work> {
    let mut st = o.st.lock();
    // From here on no override joins the record (`prewrite.rs`).
    let (overrides, dropped) = {
        let rec = st.dirty[slot(ctx.txg)].as_mut().filter(|r| r.txg == ctx.txg)?;
        rec.syncing = true;
        (std::mem::take(&mut rec.overrides), std::mem::take(&mut rec.dropped))
    };
    let rec = st.dirty[slot(ctx.txg)].as_ref().filter(|r| r.txg == ctx.txg)?;
    let blocks: Vec<(u64, Arc<AlignedBuf>)> = rec.blocks.iter().map(|(k, v)| (*k, v.clone())).collect();
    let clones: Vec<CloneWork> = rec.clones.iter().map(|(&blkid, c)| CloneWork { blkid, bp: c.bp, claim: c.claim.as_ref().map(|r| r.id) }).collect();
    // The bonus this txg's dnode will carry: its own if it set one, else the
    // synced one (a newer txg's bonus may differ in size).
    let bonus_len = rec.bonus.as_ref().map_or(st.dn.bonus.len(), |b| b.len());
    // A clone keeps its block: a later txg may move the object inline.
    let inline = !rec.freed && clones.is_empty() && wants_inline(ctx, &st, rec.maxblkid, rec.size, bonus_len);
    let (linked, mut stale, unplace) = split_overrides(rec, overrides, inline || rec.freed);
    ctx.core.txg.dirty_unplace(unplace);
    stale.extend(dropped);
    Some(Work { obj: o.clone(), otype: st.dn.otype, blocks, clones, linked, stale, inline, freed: rec.freed })
}

/// The overrides the sync links — those whose block the record still
/// holds as the very buffer written, when the object keeps blocks — with
/// the dirty bytes each retires; the others, to free; and the dirty bytes
/// of those others, no longer placed.
fn split_overrides(rec: &super::state::DirtyRec, overrides: std::collections::BTreeMap<u64, super::state::Override>, no_blocks: bool) -> (Vec<(u64, BlockPtr, u64)>, Vec<BlockPtr>, u64) {
    let mut linked = Vec::new();
    let mut stale = Vec::new();
    let mut unplace = 0;
    for (blkid, o) in overrides {
        let same = rec.blocks.get(&blkid).is_some_and(|b| Arc::ptr_eq(b, &o.buf));
        if same && !no_blocks {
            assert_eq!(o.bp.birth, rec.txg, "an override is born in its record's txg");
            linked.push((blkid, o.bp, o.buf.len() as u64));
        } else {
            stale.push(o.bp);
            // Its dirty bytes will be placed again by this sync's write
            // (`prewrite.rs`, "Space").
            unplace += o.buf.len() as u64;
        }
    }
    (linked, stale, unplace)
}

fn wants_inline(ctx: &SyncCtx, st: &ObjState, maxblkid: u64, size: u64, bonus_len: usize) -> bool {
    if maxblkid != 0 || size > ctx.inline_max || st.dn.otype == ObjectType::DnodeArray {
        return false;
    }
    let need = tarn_ondisk::dnode::Dnode::inline_len(st.dn.gen, bonus_len, size).div_ceil(SLOT_SIZE);
    need <= st.slots
}

/// Before an object's blocks: its frees, and the move into or out of its
/// dnode for small objects. Returns the change in allocated bytes.
fn begin_object(ctx: &SyncCtx, wk: &Work) -> Result<i64> {
    let mut st = wk.obj.st.lock();
    let rec = st.dirty[slot(ctx.txg)].as_ref().ok_or_else(|| Error::corrupt("dirty record vanished"))?;
    let (frees, size, blksz) = (rec.frees.clone(), rec.size, rec.blksz);
    for bp in &wk.stale {
        ctx.core.free_prewritten(bp, ctx.txg)?;
    }
    if wk.freed {
        return Ok(-free_tree(ctx, &mut st)?);
    }
    let mut used = 0;
    for (s, e) in frees {
        used -= free_range(ctx, &mut st, s, e)?;
    }
    if wk.inline {
        used -= make_inline(ctx, &mut st, wk, size)?;
    } else {
        used += leave_inline(ctx, &mut st, wk, blksz)?;
    }
    for c in &wk.clones {
        used += link_clone(ctx, &mut st, c)?;
    }
    for &(blkid, bp, retire) in &wk.linked {
        used += link_prewritten(ctx, &mut st, blkid, bp, retire)?;
    }
    Ok(used)
}

/// Links a block the intent log already wrote (`prewrite.rs`) instead of
/// writing it: its transient place joins the txg's allocations and the
/// dirty bytes it stood for retire now, as no write will retire them.
fn link_prewritten(ctx: &SyncCtx, st: &mut ObjState, blkid: u64, bp: BlockPtr, retire: u64) -> Result<i64> {
    ctx.core.adopt_prewritten(&bp, ctx.txg)?;
    ctx.core.txg.dirty_retire(ctx.txg, retire);
    ctx.born(&bp);
    link(ctx, st, blkid, bp)
}

/// Links a cloned block into the tree: a hole or embedded pointer as is
/// (born now), a shared block under its new logical birth, or — when the
/// block reference table refused the clone — a copy of the data, which is
/// still on disk (its free is deferred).
fn link_clone(ctx: &SyncCtx, st: &mut ObjState, c: &CloneWork) -> Result<i64> {
    let mut new = c.bp;
    if c.bp.is_hole() {
        new = BlockPtr::hole(c.bp.lsize, st.dn.otype, 0);
    } else if !c.bp.is_embedded() {
        let claim = c.claim.ok_or_else(|| Error::corrupt(format!("cloned block {} has no claim on the block reference table", c.blkid)))?;
        if ctx.core.brt.take(claim)? == Linked::Refused {
            let data = ctx.core.read_block(&c.bp, IoClass::SyncRead, &|| format!("source of cloned block {}", c.blkid))?;
            let buf = Arc::new(AlignedBuf::from_slice(&data));
            let prep = block::prepare(&buf, data.len(), st.dn.otype, 0, ctx.txg, ctx.props, ctx.core.sector);
            return install(ctx, st, c.blkid, prep, 0);
        }
        new.phys_birth = c.bp.physical_birth();
        ctx.born(&new);
    }
    new.birth = ctx.txg;
    link(ctx, st, c.blkid, new)
}

/// After an object's blocks: indirect blocks, then the dnode.
fn end_object(ctx: &SyncCtx, wk: &Work, mut used: i64) -> Result<DnodeUpdate> {
    let mut st = wk.obj.st.lock();
    if wk.freed {
        return Ok(DnodeUpdate { id: wk.obj.id, encoded: None, slots: st.slots, used_delta: used });
    }
    if !wk.inline {
        used += write_indirects(ctx, &mut st)?;
    }
    let rec = st.dirty[slot(ctx.txg)].as_ref().ok_or_else(|| Error::corrupt("dirty record vanished"))?;
    let (size, blksz, maxblkid, bonus) = (rec.size, rec.blksz, rec.maxblkid, rec.bonus.clone());
    st.dn.size = size;
    st.dn.datablksz = blksz;
    st.dn.maxblkid = maxblkid;
    if let Some(b) = bonus {
        st.dn.bonus = b;
    }
    st.dn.used_bytes = (st.dn.used_bytes as i64 + used).max(0) as u64;
    // An inline object owns no blocks; its dnode's short form relies on it
    // (the long form might not fit the slots `wants_inline` counted). A
    // count left over would be an accounting bug: loud in tests, and never
    // a failed sync in production.
    debug_assert!(!wk.inline || st.dn.used_bytes == 0, "inline object {} counts {} bytes", wk.obj.id, st.dn.used_bytes);
    if wk.inline {
        st.dn.used_bytes = 0;
    }
    let slots = st.slots;
    let n = st.dn.slots();
    if n > slots {
        return Err(Error::corrupt(format!("object {} needs {} dnode slots, has {}", wk.obj.id, n, slots)));
    }
    let mut enc = vec![0u8; slots * SLOT_SIZE];
    st.dn.encode(&mut enc[..n * SLOT_SIZE]);
    Ok(DnodeUpdate { id: wk.obj.id, encoded: Some(enc), slots, used_delta: used })
}

/// Stores the object's data in its dnode, freeing its blocks; returns the
/// bytes freed. Block 0 may be shorter than the object (a growing truncate
/// past a single small block): the rest reads as zeros.
fn make_inline(ctx: &SyncCtx, st: &mut ObjState, wk: &Work, size: u64) -> Result<i64> {
    let mut d = match wk.blocks.iter().find(|(b, _)| *b == 0) {
        Some((_, b)) => b[..b.len().min(size as usize)].to_vec(),
        None => synced_head(ctx, st, wk.obj.id)?,
    };
    let freed = free_tree(ctx, st)?;
    d.resize(size as usize, 0);
    st.dn.inline = Some(d);
    Ok(freed)
}

/// The content of block 0 in the synced tree (inline data or a block), for
/// an object that becomes inline in a txg that did not dirty block 0: a
/// growing truncate of an inline object, or a shrink to a block boundary.
/// Must run before the tree is freed.
fn synced_head(ctx: &SyncCtx, st: &mut ObjState, id: u64) -> Result<Vec<u8>> {
    if let Some(d) = &st.dn.inline {
        return Ok(d.clone());
    }
    match st.tree_bp_in(ctx.core, 0, ctx.caching)? {
        Some(bp) if !bp.is_hole() => {
            let (keep, l2) = ctx.caching.of(&bp);
            let at = st.at(0, 0);
            let d = ctx.core.read_block_cached(&bp, IoClass::SyncRead, &|| format!("block 0 of object {}", id), keep, l2, Some(&at))?;
            Ok(d.to_vec())
        }
        _ => Ok(Vec::new()),
    }
}

/// An inline object that no longer fits inline: its block 0 must be written
/// even when this txg did not dirty it (an extending truncate).
fn leave_inline(ctx: &SyncCtx, st: &mut ObjState, wk: &Work, blksz: u32) -> Result<i64> {
    let Some(data) = st.dn.inline.take() else { return Ok(0) };
    st.dn.nlevels = 1;
    st.dn.blkptr = Some(BlockPtr::hole(blksz, st.dn.otype, 0));
    if wk.blocks.iter().any(|(b, _)| *b == 0) || wk.clones.iter().any(|c| c.blkid == 0) {
        return Ok(0);
    }
    let mut buf = AlignedBuf::zeroed(blksz as usize);
    let n = data.len().min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    let buf = Arc::new(buf);
    let prep = block::prepare(&buf, buf.len(), st.dn.otype, 0, ctx.txg, ctx.props, ctx.core.sector);
    install(ctx, st, 0, prep, 0)
}

/// Writes one level-0 block and links it into the tree; returns the change in
/// allocated bytes.
fn install(ctx: &SyncCtx, st: &mut ObjState, blkid: u64, prep: Prepared, retire: u64) -> Result<i64> {
    install_cached(ctx, st, blkid, prep, retire, None)
}

/// As `install`, inserting `cache_as` (the block's content) into the ARC.
fn install_cached(ctx: &SyncCtx, st: &mut ObjState, blkid: u64, prep: Prepared, retire: u64, cache_as: Option<Arc<BlockData>>) -> Result<i64> {
    let hole = prep.phys.is_none();
    let new = ctx.write_block_cached(prep, ctx.props.copies_for(st.dn.otype, 0), retire, cache_as)?;
    if hole {
        // Nothing will be written, so nothing would retire these bytes.
        ctx.core.txg.dirty_retire(ctx.txg, retire);
    }
    link(ctx, st, blkid, new)
}

/// Puts `new` at level-0 block `blkid` of the tree and frees the pointer it
/// replaces; returns the change in allocated bytes.
fn link(ctx: &SyncCtx, st: &mut ObjState, blkid: u64, new: BlockPtr) -> Result<i64> {
    let mut used = new.asize_total() as i64;
    if st.dn.nlevels == 0 {
        st.dn.nlevels = 1;
        st.dn.blkptr = Some(BlockPtr::hole(new.lsize, st.dn.otype, 0));
    }
    grow_levels(st, blkid)?;
    let old = if st.dn.nlevels == 1 {
        st.dn.blkptr.replace(new).unwrap_or_default()
    } else {
        st.ensure_path_in(ctx.core, blkid, ctx.caching)?;
        let ind = st.ind.get_mut(&(1, blkid >> IND_SHIFT)).ok_or_else(|| Error::corrupt("L1 missing"))?;
        ind.dirty = true;
        std::mem::replace(&mut ind.bps[(blkid & (BPS_PER_INDIRECT - 1)) as usize], new)
    };
    used -= old.asize_total() as i64;
    ctx.free(&old)?;
    Ok(used)
}

/// Adds levels on top until the tree covers `blkid`.
fn grow_levels(st: &mut ObjState, blkid: u64) -> Result<()> {
    while blkid >= st.span() {
        if st.dn.nlevels >= MAX_LEVELS {
            return Err(Error::invalid(format!("block {} beyond the largest object", blkid)));
        }
        let old_top = st.dn.blkptr.unwrap_or_default();
        let level = st.dn.nlevels;
        let mut ind = IndBlock::holes();
        ind.bps[0] = old_top;
        ind.dirty = true;
        st.ind.insert((level, 0), ind);
        st.dn.nlevels += 1;
        st.dn.blkptr = Some(BlockPtr::hole(INDIRECT_BLOCK_SIZE as u32, st.dn.otype, level));
    }
    Ok(())
}

/// Frees the whole synced tree — data and indirect blocks — and forgets the
/// cached indirect blocks, leaving an object with no blocks; returns bytes
/// freed. (`free_range` frees only level-0 blocks: the indirect blocks above
/// them are rewritten, not freed, by `write_indirects`.)
fn free_tree(ctx: &SyncCtx, st: &mut ObjState) -> Result<i64> {
    let mut freed: i64 = 0;
    // The walk reads the top pointer through `ensure_path`, so it is cleared
    // only afterwards.
    if let Some(top) = st.dn.blkptr {
        // Explicit stack of indirect blocks (level, index) to visit, bounded
        // like free_range's.
        let mut stack = if st.dn.nlevels > 1 && !top.is_hole() { vec![(st.dn.nlevels - 1, 0u64)] } else { vec![] };
        while let Some((l, idx)) = stack.pop() {
            st.ensure_path_in(ctx.core, idx << (IND_SHIFT * l as u32), ctx.caching)?;
            let ind = st.ind.get(&(l, idx)).ok_or_else(|| Error::corrupt("indirect block missing"))?;
            for (c, bp) in ind.bps.iter().enumerate().filter(|(_, bp)| !bp.is_hole()) {
                ctx.free(bp)?;
                freed += bp.asize_total() as i64;
                if l > 1 {
                    stack.push((l - 1, (idx << IND_SHIFT) + c as u64));
                }
            }
        }
        ctx.free(&top)?;
        freed += top.asize_total() as i64;
    }
    st.ind.clear();
    st.dn.blkptr = None;
    st.dn.inline = None;
    st.dn.nlevels = 0;
    Ok(freed)
}

/// Frees the blocks in [start, end) of the synced tree; returns bytes freed.
fn free_range(ctx: &SyncCtx, st: &mut ObjState, start: u64, end: u64) -> Result<i64> {
    if st.dn.nlevels == 0 {
        if start == 0 {
            st.dn.inline = None;
        }
        return Ok(0);
    }
    if st.dn.nlevels == 1 {
        if start > 0 {
            return Ok(0);
        }
        let old = st.dn.blkptr.replace(BlockPtr::hole(st.dn.datablksz, st.dn.otype, 0)).unwrap_or_default();
        ctx.free(&old)?;
        return Ok(old.asize_total() as i64);
    }
    let mut freed: i64 = 0;
    // Explicit stack of indirect blocks (level, index) to visit; its depth is
    // bounded by MAX_LEVELS × BPS_PER_INDIRECT.
    let mut stack = vec![(st.dn.nlevels - 1, 0u64)];
    while let Some((l, idx)) = stack.pop() {
        st.ensure_path_in(ctx.core, idx << (IND_SHIFT * l as u32), ctx.caching)?;
        let child_span = 1u64 << (IND_SHIFT * (l as u32 - 1));
        let ind = st.ind.get_mut(&(l, idx)).ok_or_else(|| Error::corrupt("indirect block missing"))?;
        for c in 0..BPS_PER_INDIRECT {
            let first = ((idx << IND_SHIFT) + c).saturating_mul(child_span);
            let last = first.saturating_add(child_span - 1);
            let bp = ind.bps[c as usize];
            if last < start || first >= end || bp.is_hole() {
                continue;
            }
            if l == 1 {
                ctx.free(&bp)?;
                freed += bp.asize_total() as i64;
                ind.bps[c as usize] = BlockPtr::default();
                ind.dirty = true;
            } else {
                stack.push((l - 1, (idx << IND_SHIFT) + c));
            }
        }
    }
    Ok(freed)
}

/// Writes the dirty indirect blocks bottom-up; returns the change in bytes.
fn write_indirects(ctx: &SyncCtx, st: &mut ObjState) -> Result<i64> {
    let mut used: i64 = 0;
    for l in 1..st.dn.nlevels {
        let mut keys: Vec<u64> = st.ind.iter().filter(|((lv, _), b)| *lv == l && b.dirty).map(|((_, i), _)| *i).collect();
        keys.sort_unstable();
        for idx in keys {
            let (buf, fill) = {
                let ind = st.ind.get_mut(&(l, idx)).ok_or_else(|| Error::corrupt("indirect block missing"))?;
                ind.dirty = false;
                (Arc::new(ind.encode()), ind.bps.iter().map(|b| b.fill).sum::<u64>())
            };
            let mut prep = block::prepare(&buf, buf.len(), st.dn.otype, l, ctx.txg, WriteProps::METADATA, ctx.core.sector);
            // (A prepared pointer has no DVA yet, so `is_hole` cannot tell: a
            // hole is what has neither physical bytes nor an embedded payload.)
            if prep.phys.is_some() || prep.bp.is_embedded() {
                prep.bp.fill = fill;
            }
            // Cached as written: readers look indirect blocks up in the ARC
            // once the object lets go of them (see `ObjState::tree_bp`) —
            // unless the set's primarycache keeps metadata out.
            let cached = ctx.caching.primary.allows(true).then(|| Arc::new(BlockData::new(AlignedBuf::from_slice(&buf), buf.len())));
            let new = ctx.write_block_cached(prep, ctx.props.copies_for(st.dn.otype, l), 0, cached)?;
            used += new.asize_total() as i64;
            let old = if l == st.dn.nlevels - 1 {
                st.dn.blkptr.replace(new).unwrap_or_default()
            } else {
                let p = st.ind.get_mut(&(l + 1, idx >> IND_SHIFT)).ok_or_else(|| Error::corrupt("parent missing"))?;
                p.dirty = true;
                std::mem::replace(&mut p.bps[(idx & (BPS_PER_INDIRECT - 1)) as usize], new)
            };
            used -= old.asize_total() as i64;
            ctx.free(&old)?;
        }
    }
    Ok(used)
}

/// A fresh dnode for a new object.
pub(crate) fn new_dnode(otype: ObjectType, recordsize: u32, txg: u64) -> Dnode {
    let mut dn = Dnode::new(otype, recordsize, txg);
    dn.blkptr = None;
    dn.nlevels = 0;
    dn.inline = None;
    dn
}
