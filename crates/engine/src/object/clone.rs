//! Block cloning in the object layer (OpenZFS's `dmu_brt_clone` and
//! `zfs_clone_range`): a range of one object becomes a range of another —
//! in the same object set or another of the same pool — by giving the
//! destination the source's block pointers instead of copies of its data.
//!
//! Whole blocks only, as OpenZFS: the source and destination offsets must
//! fall at the same place in a block of the source's block size, and the
//! destination must end up with that block size (an empty object adopts
//! it; a one-block object grows to it when its record size allows). A
//! source block may be cloned when its newest content is known by a
//! pointer: the synced tree's, or a clone record not yet synced; a block
//! with dirty data in an unsynced txg is copied instead (OpenZFS refuses or
//! waits for the sync). Holes stay holes and embedded pointers are copied
//! as pointers; a normal pointer is put in the destination's clone record
//! for the open txg together with its claim on the block reference table
//! (`pool::brt`), which the sync of that txg turns into a reference.
//! Whatever cannot be cloned — the unaligned head and tail of the range,
//! blocks of another size, dirty blocks, other object types — is copied.
//!
//! Each call handles a prefix of the range in one transaction: at most
//! [`CLONE_BLOCKS_MAX`] blocks cloned or [`COPY_BYTES_MAX`] bytes copied
//! (one block, when blocks are larger), so a caller loops until done. A
//! cloned block counts 1 KiB of dirty data against its txg (what it holds in
//! memory until the sync), so the write throttle bounds clones too.

use tarn_ondisk::bp::{BlockPtr, ObjectType};

use super::objset::{Objset, Tx, MAX_OBJECT_BYTES};
use super::state::{Cloned, ObjState};
use crate::error::{Error, Result};
use crate::pool::brt::may_be_cloned;

/// Blocks one call clones at most: a transaction's worth of pointers.
pub const CLONE_BLOCKS_MAX: u64 = 1024;
/// Bytes one call copies at most where it cannot clone.
pub const COPY_BYTES_MAX: u64 = 1 << 20;
/// Dirty bytes a cloned block counts against its txg: about the memory its
/// clone record and table entry hold until the sync, so that the dirty-data
/// limit (and the write throttle) bounds the clones of a txg as it bounds
/// writes — 4 GiB of dirty data is at most 4 M clones in flight.
const CLONE_DIRTY_BYTES: u64 = 1 << 10;

/// How much of a range one `clone_range` call handled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CloneProgress {
    /// Bytes from the start of the range now holding the source's content
    /// (0 only when the source has nothing there: it ends before).
    pub done: u64,
    /// Of those, bytes shared with the source (no data copied).
    pub cloned: u64,
}

impl Objset {
    /// Makes `[dst_off, dst_off + len)` of object `dst` hold what
    /// `[src_off, src_off + len)` of object `src` of `src_os` holds, sharing
    /// whole blocks where it can and copying the rest (see the module
    /// docs). Handles a prefix of the range in `tx`; call again for the rest.
    #[allow(clippy::too_many_arguments)]
    pub fn clone_range(&self, tx: &Tx, dst: u64, dst_off: u64, src_os: &Objset, src: u64, src_off: u64, len: u64) -> Result<CloneProgress> {
        self.check_clone_args(dst, dst_off, src_os, src, src_off, len)?;
        if len == 0 {
            return Ok(CloneProgress::default());
        }
        src_os.check_read()?;
        self.check_write(tx.txg(), 0)?;
        let Some(bs) = src_os.clone_blksz(src)? else {
            return self.copy_range(tx, dst, dst_off, src_os, src, src_off, len.min(COPY_BYTES_MAX));
        };
        let bs64 = bs as u64;
        let head = (bs64 - src_off % bs64) % bs64;
        if src_off % bs64 != dst_off % bs64 || len < bs64 + head {
            // Misaligned, or no whole block in reach: bytes it is.
            return self.copy_range(tx, dst, dst_off, src_os, src, src_off, len.min(COPY_BYTES_MAX));
        }
        if head > 0 {
            return self.copy_range(tx, dst, dst_off, src_os, src, src_off, head.min(COPY_BYTES_MAX));
        }
        let n = (len / bs64).min(CLONE_BLOCKS_MAX);
        let bps = src_os.clonable_bps(src, src_off / bs64, n, bs)?;
        let k = bps.iter().take_while(|b| b.is_some()).count() as u64;
        // A block that must be copied is copied alone; the call ends there.
        let copy_one = bs64.max(COPY_BYTES_MAX).min(len);
        if k == 0 {
            return self.copy_range(tx, dst, dst_off, src_os, src, src_off, bs64.min(copy_one));
        }
        self.check_write(tx.txg(), k * bs64)?;
        self.core.check_space(0, tarn_ondisk::dnode::INDIRECT_BLOCK_SIZE as u64)?;
        let bps: Vec<BlockPtr> = bps.into_iter().take(k as usize).flatten().collect();
        if !self.link_clones(tx, dst, dst_off / bs64, bs, &bps)? {
            return self.copy_range(tx, dst, dst_off, src_os, src, src_off, (k * bs64).min(copy_one));
        }
        Ok(CloneProgress { done: k * bs64, cloned: k * bs64 })
    }

    #[allow(clippy::too_many_arguments)]
    fn check_clone_args(&self, dst: u64, dst_off: u64, src_os: &Objset, src: u64, src_off: u64, len: u64) -> Result<()> {
        if !std::sync::Arc::ptr_eq(&self.core, &src_os.core) {
            return Err(Error::invalid(format!("cannot clone from '{}' into '{}': blocks are shared only within a pool", src_os.name.read(), self.name.read())));
        }
        let fits = |off: u64| off.checked_add(len).is_some_and(|e| e <= MAX_OBJECT_BYTES);
        if !fits(src_off) || !fits(dst_off) {
            return Err(Error::invalid(format!("clone of {} bytes past the largest object size", len)));
        }
        let same = std::ptr::eq(self, src_os) && dst == src;
        if same && src_off < dst_off + len && dst_off < src_off + len {
            return Err(Error::invalid(format!("clone within {}: the ranges overlap", self.what(dst))));
        }
        Ok(())
    }

    /// Copies `len` bytes (what the source has of them) in `tx`.
    #[allow(clippy::too_many_arguments)]
    fn copy_range(&self, tx: &Tx, dst: u64, dst_off: u64, src_os: &Objset, src: u64, src_off: u64, len: u64) -> Result<CloneProgress> {
        let data = src_os.read(src, src_off, len as usize)?;
        self.write(tx, dst, dst_off, &data)?;
        Ok(CloneProgress { done: data.len() as u64, cloned: 0 })
    }

    /// The block size in which `obj`'s blocks may be cloned: None when it
    /// holds its data inline or is not plain data.
    fn clone_blksz(&self, obj: u64) -> Result<Option<u32>> {
        let o = self.object(obj)?;
        let st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        Ok(stable_blksz(&st))
    }

    /// Pointers to the current content of blocks `first..first + n` of
    /// `obj`, each None where the content is dirty data (to be copied):
    /// the newest unsynced record's clone or freed range, else the synced
    /// tree's pointer (a hole beyond it).
    fn clonable_bps(&self, obj: u64, first: u64, n: u64, bs: u32) -> Result<Vec<Option<BlockPtr>>> {
        let o = self.object(obj)?;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        if stable_blksz(&st) != Some(bs) {
            return Ok(vec![None; n as usize]);
        }
        let hole = BlockPtr::hole(bs, ObjectType::PlainData, 0);
        let mut out = Vec::with_capacity(n as usize);
        for blkid in first..first + n {
            let newest = st.recs_newest_first().into_iter().find(|r| r.touches(blkid)).map(|r| {
                if let Some(c) = r.clones.get(&blkid) {
                    Some(c.bp)
                } else if r.blocks.contains_key(&blkid) {
                    None
                } else {
                    Some(hole)
                }
            });
            let bp = match newest {
                Some(b) => b,
                None => Some(st.tree_bp_in(&self.core, blkid, self.caching()).map_err(|e| e.context(self.what(obj)))?.unwrap_or(hole)),
            };
            // Only whole blocks of this size are shared.
            out.push(bp.filter(|b| b.is_hole() || b.lsize == bs));
        }
        Ok(out)
    }

    /// Puts clones of `bps` at blocks `first..` of `obj` in the open txg;
    /// false (nothing cloned) when the object cannot take blocks of `bs`.
    fn link_clones(&self, tx: &Tx, obj: u64, first: u64, bs: u32, bps: &[BlockPtr]) -> Result<bool> {
        let txg = tx.txg();
        let o = self.object(obj)?;
        let mut added = 0;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        if st.dn.otype != ObjectType::PlainData {
            return Ok(false);
        }
        let end = (first + bps.len() as u64) * bs as u64;
        if is_empty_object(&st) {
            // A new file takes the source's block size, even above its
            // record size (as OpenZFS): its first blocks are these.
            st.blksz = bs;
        } else {
            let recordsize = self.props().recordsize;
            self.grow_blksz(&mut st, obj, end, recordsize, txg, &mut added)?;
        }
        if st.blksz != bs {
            self.finish_change(st, obj, txg, added);
            return Ok(false);
        }
        for (i, bp) in bps.iter().enumerate() {
            let hole;
            let bp = if bp.is_hole() {
                hole = BlockPtr::hole(bs, ObjectType::PlainData, 0);
                &hole
            } else {
                bp
            };
            let claim = may_be_cloned(bp).then(|| self.core.brt.add_clone(bp, txg));
            let r = st.rec(txg);
            r.blocks.remove(&(first + i as u64));
            r.clones.insert(first + i as u64, Cloned { bp: *bp, claim });
        }
        st.size = st.size.max(end);
        st.maxblkid = st.maxblkid.max(end / bs as u64 - 1);
        self.finish_change(st, obj, txg, added + CLONE_DIRTY_BYTES * bps.len() as u64);
        Ok(true)
    }
}

/// The object's block size if its blocks may be cloned (see `clone_blksz`).
/// Its size may have changed in an unsynced txg: then the synced tree's
/// pointers have another lsize and are copied (`clonable_bps`).
fn stable_blksz(st: &ObjState) -> Option<u32> {
    (st.dn.otype == ObjectType::PlainData && st.dn.inline.is_none()).then_some(st.blksz)
}

/// An object with no content anywhere: created, never written (or only
/// its attributes), so it may take any block size.
fn is_empty_object(st: &ObjState) -> bool {
    st.size == 0
        && st.maxblkid == 0
        && st.dn.size == 0
        && st.dn.inline.is_none()
        && st.dirty.iter().flatten().all(|r| r.blocks.is_empty() && r.clones.is_empty() && r.frees.is_empty())
}
