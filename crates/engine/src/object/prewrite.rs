//! Writing dirty blocks before their txg syncs, for the intent log's
//! indirect writes (OpenZFS's `dmu_sync` and `dr_override`).
//!
//! A commit that logs a whole block indirectly (`crate::zil`, "Indirect
//! writes") asks for it here: the block's current dirty buffer — the
//! newest record that touches it must hold it, and its txg's sync must
//! not have begun — is prepared as the sync would (compression,
//! checksum, with the txg as its birth), written to a *transient* place
//! of the normal class (`Allocator::alloc_transient`: allocated in
//! memory, free on disk) and, once the write has landed, remembered in
//! the record as an [`Override`]. The log records the pointer.
//!
//! ```text
//!  write(2) ─▶ dirty buffer B of txg T
//!  commit   ─▶ B written at P (transient) ─▶ record T: override (B, P) ─▶ log: "block at P"
//!  sync T   ─▶ record still holds B? ─ yes ─▶ P adopted (recorded in T's space log), linked
//!                                    └ no ──▶ B written as usual, P freed (deferred, unrecorded)
//! ```
//!
//! So a block logged indirectly is written once. Whatever happens to the
//! block between the commit and the sync is caught by the one test — is
//! the buffer the record holds still `B` itself: a later write in the same
//! txg copies `B` (the override holds a reference, so `Arc::make_mut`
//! copies) and the record gets a new buffer; a truncate or hole punch
//! forgets it; a clone replaces it; an object freed or moved into its
//! dnode takes no block. A snapshot taken meanwhile changes nothing: the
//! sync links `P` where it would have linked the block it wrote, with the
//! same birth. `P` has exactly one owner at any time: the record until its
//! sync (which adopts or frees it), the log's chain after a crash (import
//! claims the blocks of records still to replay, `zil/indirect.rs`).
//!
//! Space: a prewritten block is allocated (transiently) while its dirty
//! bytes still count, so the free space writers may dirty
//! (`PoolCore::room_bytes`: free less the dirty bytes not yet *placed*)
//! would count it twice. An override's bytes count as placed from its
//! attach: they retire when the sync links the block, and are unplaced
//! when the override is replaced or left stale (the sync writes the
//! buffer anew and places it again).
//!
//! Invariants:
//! 1. An override's block is a transient allocation until its sync, and
//!    its pointer's birth is the record's txg (`attach`).
//! 2. Overrides join only records whose sync has not begun (`syncing`),
//!    and only after their write has landed, so a sync never links a
//!    block still in flight.
//! 3. A prewritten block is freed only in syncing context, by the sync of
//!    its txg (`birth`) or a later one — never in open context. An open
//!    context free would be deferred in the open txg, and the space
//!    checkpoint the syncing txg writes would carry that deferral: a crash
//!    importing the syncing txg would find the block deferred and the
//!    log's claim of it would fail (the log may still name the block).
//!    Freed in the sync of txg S ≥ birth, the block is claimed after a
//!    crash only if the import is before S (birth > claim txg), where the
//!    free never happened.

use std::sync::Arc;

use tarn_ondisk::bp::{BlockPtr, ChecksumType, Dva, ObjectType};

use super::objset::Objset;
use super::state::{slot, ObjState, Override};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{block, IoClass, Prepared, WriteGroup};
use crate::pool::core::PoolCore;
use crate::sys::buf::AlignedBuf;

impl PoolCore {
    /// Syncing context of `txg`: frees the prewritten blocks left to the
    /// next sync (`prewritten_frees`) — those born by `txg`.
    pub(crate) fn free_dropped_prewritten(&self, txg: u64) -> Result<()> {
        let mut later = Vec::new();
        let todo = std::mem::take(&mut *self.prewritten_frees.lock());
        for bp in todo {
            if bp.birth > txg {
                later.push(bp);
                continue;
            }
            self.free_prewritten(&bp, txg)?;
        }
        self.prewritten_frees.lock().extend(later);
        Ok(())
    }

    /// Writes a prepared data block of txg `txg` now, to a transient place
    /// of the normal class (never a log vdev: the block outlives the log);
    /// the write joins `group`. Returns the block's pointer.
    pub(crate) fn prewrite_block(&self, prep: &Prepared, txg: u64, group: &Arc<WriteGroup>) -> Result<BlockPtr> {
        let phys = prep.phys.clone().ok_or_else(|| Error::invalid("a hole or embedded block is not written"))?;
        let skip: Vec<u32> = self.vdevs.all().iter().filter(|v| !v.writable() || self.logs.contains(v.id())).map(|v| v.id()).collect();
        let (vdev, offset, asize) = self
            .alloc
            .lock()
            .alloc_transient(phys.len() as u64, &[], &skip)
            .map_err(|e| Error::no_space(format!("pool '{}': no room to write a block of {} bytes for the intent log: {}", self.name, phys.len(), e)))?;
        self.took_space(asize);

        let mut bp = prep.bp;
        bp.dva[0] = Dva { vdev, asize, offset };
        self.vdevs.top(vdev).write(IoClass::SyncWrite, offset, phys, group, 0, txg);
        Ok(bp)
    }

    /// The sync of `txg` takes a prewritten block into its tree: an
    /// ordinary allocation of `txg` from now on.
    pub(crate) fn adopt_prewritten(&self, bp: &BlockPtr, txg: u64) -> Result<()> {
        let d = bp.dva[0];

        self.alloc.lock().adopt_transient(d.vdev, d.offset, d.asize, txg).map_err(|e| {
            Error::corrupt(format!("pool '{}': the intent log's block {}:{:#x}+{:#x} cannot join txg {}: {}", self.name, d.vdev, d.offset, d.asize, txg, e))
        })
    }

    /// Frees a prewritten block nothing will link (deferred, unrecorded,
    /// as a log block); syncing context of `txg` ≥ the block's birth.
    pub(crate) fn free_prewritten(&self, bp: &BlockPtr, txg: u64) -> Result<()> {
        let d = bp.dva[0];
        assert!(bp.birth <= txg, "a prewritten block of txg {} freed in txg {}", bp.birth, txg);
        self.alloc.lock().free_transient(d.vdev, d.offset, d.asize, txg).map_err(|e| {
            Error::corrupt(format!("pool '{}': freeing the intent log's block {}:{:#x}+{:#x}: {}", self.name, d.vdev, d.offset, d.asize, e))
        })
    }
}

/// A block to prewrite: its id, its record's txg and buffer.
struct Todo {
    blkid: u64,
    txg: u64,
    buf: Arc<AlignedBuf>,
}

impl Objset {
    /// Writes the blocks of object `obj` that `[offset, offset + len)`
    /// covers inside the object's size now — whole, or in a part of at
    /// least `min_part` bytes — for an indirect log record each (module
    /// docs). Returns the part of the range each block written holds
    /// (offset, length) with its pointer, in order; a block that cannot be
    /// — on disk already, being synced, freed or cloned in a newer txg,
    /// all zeros, the object's only block still growing, or a set whose
    /// blocks are not one checksummed copy — is left out, and the caller
    /// copies its data into the log instead.
    pub fn prewrite_range(&self, obj: u64, offset: u64, len: u64, min_part: u64) -> Result<Vec<(u64, u32, BlockPtr)>> {
        let props = self.props();
        if props.write.copies != 1 || props.write.checksum == ChecksumType::Off {
            return Ok(Vec::new());
        }
        let o = self.object(obj)?;
        let mut out = Vec::new();
        let mut todo = Vec::new();
        let bs;
        let end;
        {
            let st = o.st.lock();
            if st.dn.otype != ObjectType::PlainData || st.freed {
                return Ok(Vec::new());
            }
            bs = st.blksz as u64;
            end = offset.saturating_add(len).min(st.size);
            if bs == 0 || end <= offset {
                return Ok(Vec::new());
            }
            for blkid in offset / bs..end.div_ceil(bs) {
                let (from, to) = part(blkid, bs, offset, end);
                if to - from < bs && to - from < min_part {
                    continue;
                }
                match current(&st, blkid) {
                    Current::Written(bp) => out.push((from, (to - from) as u32, bp)),
                    Current::Dirty(txg, buf) => todo.push(Todo { blkid, txg, buf }),
                    Current::No => {}
                }
            }
            if todo.is_empty() {
                return Ok(out);
            }
            // Dirty buffers are the block size; a block of another size
            // (the object's only block still growing) is copied.
            todo.retain(|t| t.buf.len() as u64 == bs);
        }
        let written = self.write_todo(todo, props.write)?;
        let mut st = o.st.lock();
        for (t, bp) in written {
            let (from, to) = part(t.blkid, bs, offset, end);
            attach(&self.core, &mut st, t, bp).map_err(|e| e.context(self.what(obj)))?;
            out.push((from, (to - from) as u32, bp));
        }
        out.sort_by_key(|(off, _, _)| *off);
        Ok(out)
    }

    /// Prepares and writes the blocks together, waiting for all; a failed
    /// write frees them all.
    fn write_todo(&self, todo: Vec<Todo>, props: block::WriteProps) -> Result<Vec<(Todo, BlockPtr)>> {
        let group = WriteGroup::unparked();
        let mut written = Vec::with_capacity(todo.len());
        let mut res = Ok(());
        for t in todo {
            let prep = block::prepare(&t.buf, t.buf.len(), ObjectType::PlainData, 0, t.txg, props, self.core.sector);
            if prep.phys.is_none() || prep.bp.is_embedded() {
                continue;
            }
            match self.core.prewrite_block(&prep, t.txg, &group) {
                Ok(bp) => written.push((t, bp)),
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        let res = res.and(group.wait().map_err(|e| Error::new(ErrorKind::Io, format!("'{}': writing blocks for the intent log: {}", self.name.read(), e))));
        if let Err(e) = res {
            // Freed by the next sync, as any prewritten block (invariant 3).
            self.core.prewritten_frees.lock().extend(written.iter().map(|(_, bp)| *bp));
            return Err(e);
        }
        Ok(written)
    }
}

/// The part `[from, to)` of block `blkid` (of `bs` bytes) that the range
/// `[offset, end)` covers.
fn part(blkid: u64, bs: u64, offset: u64, end: u64) -> (u64, u64) {
    ((blkid * bs).max(offset), ((blkid + 1) * bs).min(end))
}

/// What the log can name for a block now. (Short-lived, one at a time:
/// boxing the pointer would only cost an allocation.)
#[allow(clippy::large_enum_variant)]
enum Current {
    /// The newest record holds it, its sync not begun: prewrite this.
    Dirty(u64, Arc<AlignedBuf>),
    /// Already prewritten for the buffer the newest record holds.
    Written(BlockPtr),
    No,
}

fn current(st: &ObjState, blkid: u64) -> Current {
    let Some(r) = st.recs_newest_first().into_iter().find(|r| r.touches(blkid)) else { return Current::No };
    let Some(buf) = r.blocks.get(&blkid).filter(|_| !r.syncing) else { return Current::No };
    match r.overrides.get(&blkid) {
        Some(o) if Arc::ptr_eq(&o.buf, buf) => Current::Written(o.bp),
        _ => Current::Dirty(r.txg, buf.clone()),
    }
}

/// After the write landed: the record of `t.txg` takes the override if it
/// still holds the buffer and its sync has not begun. Otherwise nothing
/// will link the block, but the log may name it (it holds the data the
/// commit logged): it is freed in syncing context, by the sync of its txg
/// or a later one (invariant 3).
fn attach(core: &PoolCore, st: &mut ObjState, t: Todo, bp: BlockPtr) -> Result<()> {
    assert_eq!(bp.birth, t.txg, "a prewritten block is born in its record's txg");
    let Some(rec) = st.dirty[slot(t.txg)].as_mut().filter(|r| r.txg == t.txg && !r.syncing) else {
        core.prewritten_frees.lock().push(bp);
        return Ok(());
    };
    if !rec.blocks.get(&t.blkid).is_some_and(|b| Arc::ptr_eq(b, &t.buf)) {
        rec.dropped.push(bp);
        return Ok(());
    }
    // Its dirty bytes have their place now (see "Space" above).
    core.txg.dirty_placed(t.buf.len() as u64);
    if let Some(old) = rec.overrides.insert(t.blkid, Override { buf: t.buf, bp }) {
        // Another commit prewrote an older buffer of the block (or the
        // same one, racing): only the newest is linked.
        core.txg.dirty_unplace(old.buf.len() as u64);
        rec.dropped.push(old.bp);
    }
    Ok(())
}
