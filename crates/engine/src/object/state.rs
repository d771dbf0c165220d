//! One object in memory: its synced dnode, its cached indirect blocks and its
//! per-txg dirty records — and the lookups that combine them.
//!
//! An object's content at any moment is the newest of: the dirty record of the
//! open txg, those of txgs still quiescing or syncing, and the block tree on
//! disk. A dirty record holds whole logical blocks (copy-on-write: a partial
//! write first copies the current block), blocks cloned from other block
//! pointers (block cloning: the pointer, not the data) and the block ranges
//! freed in that txg. Records stay until their txg's sync has finished
//! writing, so readers never see a block pointer whose write has not landed.
//!
//! Invariants:
//! - at most one dirty record per txg slot, and its txg is open, quiescing or
//!   syncing;
//! - every dirty block buffer is exactly the object's block size in its txg,
//!   rounded to 512 bytes;
//! - a block id is in at most one of a record's `blocks` and `clones`; a
//!   clone's pointer has the record's block size as its lsize;
//! - indirect blocks held by the object are keyed (level, index), level 1
//!   or above; they are there only while the sync path changes them (loaded
//!   by `ensure_path`, dropped when their txg's writes have landed). Readers
//!   find clean indirect blocks in the ARC (`tree_bp_in`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_ondisk::bp::{BlockPtr, BP_SIZE};
use tarn_ondisk::dnode::{Dnode, BPS_PER_INDIRECT, INDIRECT_BLOCK_SIZE};

use super::ReadCaching;
use crate::error::{Error, Result};
use crate::io::IoClass;
use crate::pool::brt::CloneRef;
use crate::pool::core::PoolCore;
use crate::pool::errlog::Bookmark;
use crate::sys::buf::AlignedBuf;
use crate::txg::TXG_SIZE;

pub(crate) const IND_SHIFT: u32 = 10;
const _: () = assert!(1u64 << IND_SHIFT == BPS_PER_INDIRECT);

/// A block of a txg given by another block's pointer instead of data (a
/// clone). A normal pointer carries its claim on the block reference
/// table, which dropping the record before its txg syncs withdraws; holes
/// and embedded pointers need none.
pub(crate) struct Cloned {
    /// The source's pointer as read (its births; the sync gives the linked
    /// pointer the txg's logical birth).
    pub bp: BlockPtr,
    pub claim: Option<CloneRef>,
}

/// A dirty block an intent log's indirect write already put on disk
/// (OpenZFS's `dr_override`, set by `dmu_sync`): the txg's sync links `bp`
/// instead of writing the block again — if the record still holds `buf`
/// itself for the block. A block changed since (a new buffer: writes
/// copy a shared one), forgotten, freed or made inline drops it, and the
/// sync frees `bp`, a transient allocation until then (`prewrite.rs`).
pub(crate) struct Override {
    pub buf: Arc<AlignedBuf>,
    pub bp: BlockPtr,
}

/// Changes to one object within one txg.
pub(crate) struct DirtyRec {
    pub txg: u64,
    pub blocks: BTreeMap<u64, Arc<AlignedBuf>>,
    /// Blocks cloned in this txg (never also in `blocks`).
    pub clones: BTreeMap<u64, Cloned>,
    /// Block ranges [start, end) freed in this txg, in order of the frees.
    pub frees: Vec<(u64, u64)>,
    pub size: u64,
    pub blksz: u32,
    pub maxblkid: u64,
    pub created: bool,
    pub freed: bool,
    pub bonus: Option<Vec<u8>>,
    /// Blocks already written by the intent log, by block id.
    pub overrides: BTreeMap<u64, Override>,
    /// The txg's sync has taken the record's blocks: no override joins.
    pub syncing: bool,
    /// Prewritten blocks of this txg nothing will link (a newer buffer's
    /// replaced them): freed by the txg's sync.
    pub dropped: Vec<BlockPtr>,
}

impl DirtyRec {
    /// Makes `buf` the txg's content of block `blkid`, replacing a clone.
    pub fn put_block(&mut self, blkid: u64, buf: Arc<AlignedBuf>) -> Option<Arc<AlignedBuf>> {
        self.clones.remove(&blkid);
        self.blocks.insert(blkid, buf)
    }

    /// Forgets the txg's blocks and clones in [start, end) (a free of that
    /// range follows).
    pub fn forget_range(&mut self, start: u64, end: u64) {
        self.blocks.retain(|&b, _| b < start || b >= end);
        self.clones.retain(|&b, _| b < start || b >= end);
    }

    /// Whether this record changes block `blkid` (data, clone or free).
    pub fn touches(&self, blkid: u64) -> bool {
        self.blocks.contains_key(&blkid) || self.clones.contains_key(&blkid) || self.frees.iter().any(|&(s, e)| blkid >= s && blkid < e)
    }
}

pub(crate) struct IndBlock {
    pub bps: Vec<BlockPtr>,
    pub dirty: bool,
}

impl IndBlock {
    pub fn holes() -> Self {
        IndBlock { bps: vec![BlockPtr::default(); BPS_PER_INDIRECT as usize], dirty: false }
    }

    pub fn decode(data: &[u8]) -> Result<Self> {
        if data.len() != INDIRECT_BLOCK_SIZE {
            return Err(Error::corrupt(format!("indirect block of {} bytes", data.len())));
        }
        let bps = data.chunks_exact(BP_SIZE).map(BlockPtr::decode).collect::<Result<Vec<_>, _>>()?;
        Ok(IndBlock { bps, dirty: false })
    }

    pub fn encode(&self) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(INDIRECT_BLOCK_SIZE);
        for (i, bp) in self.bps.iter().enumerate() {
            bp.encode(&mut b[i * BP_SIZE..(i + 1) * BP_SIZE]);
        }
        b
    }
}

/// Where a block's current content comes from. A block pointer (128 bytes)
/// is held by value: boxing it would cost an allocation on every read.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Source {
    Dirty(Arc<AlignedBuf>),
    Zero,
    Inline(Vec<u8>),
    /// A block on disk, with where it sits (its reads enter the error log
    /// under that bookmark when no copy can be read).
    Bp(BlockPtr, Bookmark),
}

pub(crate) struct ObjState {
    /// The object set's number and the object's: the bookmarks of the
    /// object's blocks start with them (`errlog`).
    pub objset: u64,
    pub object: u64,
    /// The dnode as of the last sync (block tree, sizes).
    pub dn: Dnode,
    /// Current logical view, including unsynced changes.
    pub size: u64,
    pub blksz: u32,
    pub maxblkid: u64,
    pub freed: bool,
    pub bonus: Vec<u8>,
    /// Dnode slots reserved for this object.
    pub slots: usize,
    /// Read-ahead streams (at most `MAX_STREAMS`), most recently used last.
    pub streams: Vec<Stream>,
    pub ind: HashMap<(u8, u64), IndBlock>,
    pub dirty: [Option<DirtyRec>; TXG_SIZE],
}

/// Sequential streams tracked per object (dmu_zfetch's zfetch_max_streams).
pub const MAX_STREAMS: usize = 8;

/// One sequential read stream: where its next read would start, how far
/// ahead to read (bytes) and the first block not yet read ahead.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stream {
    pub next: u64,
    pub dist: u64,
    pub until: u64,
}

pub(crate) fn slot(txg: u64) -> usize {
    (txg % TXG_SIZE as u64) as usize
}

impl ObjState {
    pub fn new(objset: u64, object: u64, dn: Dnode, slots: usize) -> Self {
        ObjState {
            objset,
            object,
            size: dn.size,
            blksz: dn.datablksz,
            maxblkid: dn.maxblkid,
            freed: false,
            bonus: dn.bonus.clone(),
            slots,
            streams: Vec::new(),
            dn,
            ind: HashMap::new(),
            dirty: Default::default(),
        }
    }

    /// The dirty record for `txg`, created on first use.
    pub fn rec(&mut self, txg: u64) -> &mut DirtyRec {
        let (size, blksz, maxblkid) = (self.size, self.blksz, self.maxblkid);
        let r = &mut self.dirty[slot(txg)];
        if r.as_ref().is_some_and(|r| r.txg != txg) {
            // A record of txg - 4 would still be here only if its sync never
            // ran, which the txg engine rules out.
            panic!("dirty record slot of txg {} still holds another txg", txg);
        }
        r.get_or_insert_with(|| DirtyRec {
            txg,
            blocks: BTreeMap::new(),
            clones: BTreeMap::new(),
            frees: Vec::new(),
            size,
            blksz,
            maxblkid,
            created: false,
            freed: false,
            bonus: None,
            overrides: BTreeMap::new(),
            syncing: false,
            dropped: Vec::new(),
        })
    }

    /// The bookmark of the object's block `blkid` at `level`.
    pub fn at(&self, level: u8, blkid: u64) -> Bookmark {
        Bookmark::block(self.objset, self.object, level, blkid)
    }

    pub fn has_dirty(&self) -> bool {
        self.dirty.iter().any(|r| r.is_some())
    }

    /// Dirty records, newest first.
    pub(crate) fn recs_newest_first(&self) -> Vec<&DirtyRec> {
        let mut v: Vec<&DirtyRec> = self.dirty.iter().flatten().collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.txg));
        v
    }

    /// The current content of block `blkid`.
    pub fn resolve(&mut self, core: &PoolCore, blkid: u64) -> Result<Source> {
        self.resolve_in(core, blkid, ReadCaching::ALL)
    }

    /// As `resolve`, leaving the indirect blocks it reads in the caches
    /// only as `rc` allows.
    pub fn resolve_in(&mut self, core: &PoolCore, blkid: u64, rc: ReadCaching) -> Result<Source> {
        for r in self.recs_newest_first() {
            if let Some(b) = r.blocks.get(&blkid) {
                return Ok(Source::Dirty(b.clone()));
            }
            if let Some(c) = r.clones.get(&blkid) {
                return Ok(if c.bp.is_hole() { Source::Zero } else { Source::Bp(c.bp, self.at(0, blkid)) });
            }
            if r.frees.iter().any(|&(s, e)| blkid >= s && blkid < e) {
                return Ok(Source::Zero);
            }
        }
        if let Some(d) = &self.dn.inline {
            return Ok(if blkid == 0 { Source::Inline(d.clone()) } else { Source::Zero });
        }
        Ok(match self.tree_bp_in(core, blkid, rc)? {
            Some(bp) if !bp.is_hole() => Source::Bp(bp, self.at(0, blkid)),
            _ => Source::Zero,
        })
    }

    /// L0 block pointers covered by the top block pointer.
    pub fn span(&self) -> u64 {
        if self.dn.nlevels == 0 {
            return 0;
        }
        1u64.checked_shl(IND_SHIFT * (self.dn.nlevels as u32 - 1)).unwrap_or(u64::MAX)
    }

    /// The synced tree's pointer for `blkid` (None: beyond the tree); the
    /// indirect blocks read on the way stay in the caches only as `rc`
    /// allows (`ReadCaching::ALL` for the pool's own objects).
    pub fn tree_bp_in(&mut self, core: &PoolCore, blkid: u64, rc: ReadCaching) -> Result<Option<BlockPtr>> {
        let Some(top) = self.dn.blkptr else { return Ok(None) };
        if blkid >= self.span() {
            return Ok(None);
        }
        let nl = self.dn.nlevels;
        if nl == 1 {
            return Ok(Some(top));
        }
        // Walk down from the top. A level's block is taken from the map when
        // the sync path holds it there (it may be newer than the ARC's
        // copy); otherwise its one pointer is read out of the block in the
        // ARC, so clean indirect blocks live — and are evicted — in the ARC
        // like all metadata, not in the object.
        let mut bp = top;
        for l in (1..nl).rev() {
            let idx = blkid >> (IND_SHIFT * l as u32);
            let slot = ((blkid >> (IND_SHIFT * (l as u32 - 1))) & (BPS_PER_INDIRECT - 1)) as usize;
            if let Some(b) = self.ind.get(&(l, idx)) {
                bp = b.bps[slot];
                continue;
            }
            if bp.is_hole() {
                return Ok(Some(BlockPtr::default()));
            }
            let (keep, l2) = rc.of(&bp);
            let at = self.at(l, idx);
            let data = core.read_block_cached(&bp, IoClass::SyncRead, &|| format!("indirect block L{} #{}", l, idx), keep, l2, Some(&at))?;
            if data.len() != INDIRECT_BLOCK_SIZE {
                return Err(Error::corrupt(format!("indirect block L{} #{} of {} bytes", l, idx, data.len())));
            }
            bp = BlockPtr::decode(&data[slot * BP_SIZE..(slot + 1) * BP_SIZE])?;
        }
        Ok(Some(bp))
    }

    /// Loads the indirect blocks on the path to `blkid`, top down.
    pub fn ensure_path(&mut self, core: &PoolCore, blkid: u64) -> Result<()> {
        self.ensure_path_in(core, blkid, ReadCaching::ALL)
    }

    /// As `ensure_path`, under the object set's cache policies.
    pub fn ensure_path_in(&mut self, core: &PoolCore, blkid: u64, rc: ReadCaching) -> Result<()> {
        let nl = self.dn.nlevels;
        for l in (1..nl).rev() {
            let key = (l, blkid >> (IND_SHIFT * l as u32));
            if self.ind.contains_key(&key) {
                continue;
            }
            let parent = if l == nl - 1 {
                self.dn.blkptr.unwrap_or_default()
            } else {
                let pk = (l + 1, blkid >> (IND_SHIFT * (l as u32 + 1)));
                let idx = (key.1 & (BPS_PER_INDIRECT - 1)) as usize;
                self.ind.get(&pk).map(|b| b.bps[idx]).unwrap_or_default()
            };
            let block = if parent.is_hole() {
                IndBlock::holes()
            } else {
                let (keep, l2) = rc.of(&parent);
                let at = self.at(l, key.1);
                let data = core.read_block_cached(&parent, IoClass::SyncRead, &|| format!("indirect block L{} #{}", l, key.1), keep, l2, Some(&at))?;
                IndBlock::decode(&data)?
            };
            self.ind.insert(key, block);
        }
        Ok(())
    }

    /// Reads a block's content into `out` (zero-filled beyond what it has).
    pub fn fetch(core: &PoolCore, src: &Source, out: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        Self::copy_range(core, src, 0, out, what)
    }

    /// As `fetch`, under an object set's cache policies.
    pub fn fetch_in(core: &PoolCore, src: &Source, out: &mut [u8], what: &dyn Fn() -> String, rc: ReadCaching) -> Result<()> {
        Self::copy_range_cached(core, src, 0, out, what, rc)
    }

    /// Copies the block's bytes from `start` into `out`, zero-filling what
    /// lies beyond its data — one copy from wherever the block is.
    pub fn copy_range(core: &PoolCore, src: &Source, start: usize, out: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        Self::copy_range_cached(core, src, start, out, what, ReadCaching::ALL)
    }

    /// As `copy_range`, under a dataset's cache policies (see
    /// `PoolCore::read_block_cached`).
    pub fn copy_range_cached(core: &PoolCore, src: &Source, start: usize, out: &mut [u8], what: &dyn Fn() -> String, rc: ReadCaching) -> Result<()> {
        let copy = |out: &mut [u8], d: &[u8]| {
            let d = d.get(start..).unwrap_or(&[]);
            let n = out.len().min(d.len());
            out[..n].copy_from_slice(&d[..n]);
            out[n..].fill(0);
        };
        match src {
            Source::Zero => out.fill(0),
            Source::Dirty(b) => copy(out, b),
            Source::Inline(d) => copy(out, d),
            Source::Bp(bp, at) => {
                let (keep, l2) = rc.of(bp);
                let d = core.read_block_cached(bp, IoClass::SyncRead, what, keep, l2, Some(at))?;
                copy(out, &d)
            }
        }
        Ok(())
    }
}
