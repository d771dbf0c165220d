//! Block cloning's block reference table (OpenZFS's `brt.c`).
//!
//! ## Purpose
//! Cloning a range of a file (`Objset::clone_range`, what `copy_file_range`
//! uses) gives the destination new block pointers to the source's data
//! blocks instead of copies. A block then has several pointers, in one or
//! several datasets, each freed on its own schedule (overwrites, snapshot
//! destroys, file-system destroys). The table counts, per block, the
//! pointers beyond the first; every free goes through
//! [`PoolCore::free_block`], which asks [`Brt::release`] first: a block with
//! an entry loses one reference and stays, a block without one is freed.
//! Only level-0 plain-data blocks are ever cloned, so every other free skips
//! the table.
//!
//! ## Births
//! A cloned pointer gets a *logical* birth of the clone's txg (it is new in
//! its file, so dead lists, rollback and destroy treat it as born then, and
//! the destination's snapshots account for it exactly) and keeps the source
//! block's *physical* birth (`BlockPtr::phys_birth`).
//!
//! ## A clone through its txg
//! ```text
//!  open context, txg t            sync of t                               sync of t+1
//!  ───────────────────            ─────────                               ───────────
//!  source block not dirty     1. apply: per pending clone, its block
//!  in any unsynced txg:          still allocated → +1 (applied),
//!  dest gets a clone record      else (freed by the sync of t−1) refused
//!  (the pointer and a         2. datasets sync: a clone record links its
//!  `CloneRef`) ── pending        pointer (applied) or a copy of the data
//!                                (refused, read before its free lands);
//!  the record dropped before     frees of the txg decrement or free
//!  t syncs (truncate,         3. applied clones no record linked (the
//!  rewrite, rollback):           dataset was rolled back or destroyed
//!  pending withdrawn             in t) → −1, as a free
//!                             4. flush: changed entries into the MOS
//!                                object, in t — with the pointers
//! ```
//! Because step 1 precedes every free of txg t, a source overwritten or
//! freed in the very txg of its clone finds the entry and only decrements.
//! A source freed by the sync of t−1 while the clone of t read its pointer
//! (a rollback or destroy racing the clone) is no longer allocated at step
//! 1; its data is still on disk (frees are deferred two txgs), so the
//! destination gets a copy. The table and the pointers change in the same
//! txg: a power cut leaves both as of one uberblock.
//!
//! ## On disk
//! One MOS object (format.md §11a, `tarn_ondisk::brt`): a header with the
//! totals and a hash table of 4 KiB buckets of 127 entries. A flush reads
//! and rewrites only the buckets of changed entries; a bucket that
//! overflows doubles the table (every entry rewritten, amortized O(1)).
//! The object is created, and the pool's `block_cloning` feature turned on,
//! by the first flush that has an entry.
//!
//! ## Cost of a free
//! Every free of a plain-data block would need a bucket read. As OpenZFS,
//! the table keeps in memory the number of entries per 16 MiB region of
//! each vdev ([`REGION_SHIFT`]); a free in a region without entries skips
//! the lookup. The counts are not stored: they are rebuilt from the buckets
//! the first time the table is used after import (one read of the table).
//! A table without entries costs nothing.
//!
//! ## Invariants ([`Brt::check_invariants`], and `pool::verify` against the trees)
//! - an entry's refcount is at least 1, and its asize is its block's;
//! - the header's totals are the sums over the entries;
//! - the region counts sum to the entry count;
//! - a clone is pending in at most one txg, and applied or refused only
//!   during the sync of that txg;
//! - every pointer to a block is counted: `pointers = 1 + refcount`
//!   (verified by `Pool::verify`, which walks every tree).
//!
//! ## Bounds
//! Pending clones are bounded by the dirty-data limit: each cloned block
//! counts 1 KiB of dirty data in its txg (`object::clone`), so at most
//! `zfs_dirty_data_max / 1 KiB` are in flight. The changed entries of a txg
//! are bounded by those plus its frees; the region counts by vdev size /
//! 16 MiB × 4 bytes (256 KiB per TiB).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use tarn_ondisk::bp::{BlockPtr, ObjectType};
use tarn_ondisk::brt::{decode_bucket, encode_bucket, BrtEntry, BrtHeader, BrtKey, BRT_BLOCK_SIZE, BUCKETS_MAX, BUCKET_ENTRIES_MAX};

use super::core::PoolCore;
use crate::error::{Error, Result};
use crate::object::Objset;

/// The table's regions are 2^24 bytes (16 MiB) of a vdev.
pub const REGION_SHIFT: u32 = 24;

/// Whether a block may have a table entry: only level-0 plain data is cloned.
pub fn may_be_cloned(bp: &BlockPtr) -> bool {
    bp.level == 0 && bp.otype == ObjectType::PlainData && !bp.is_hole() && !bp.is_embedded()
}

/// Figures `tarn pool get` shows (OpenZFS's `bcloneused`, `bclonesaved`,
/// `bcloneratio`) and counters since import.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BrtStats {
    /// Blocks with an entry.
    pub entries: u64,
    /// Bytes those blocks take, counted once.
    pub used_bytes: u64,
    /// Bytes their extra references would take as copies.
    pub saved_bytes: u64,
    /// Blocks cloned since import (applied in a sync).
    pub cloned_blocks: u64,
    /// Clones whose source was freed before their txg synced (copied instead).
    pub refused_blocks: u64,
}

impl BrtStats {
    /// `(used + saved) / used` in hundredths, 100 when nothing is cloned.
    pub fn ratio_percent(&self) -> u64 {
        if self.used_bytes == 0 {
            100
        } else {
            ((self.used_bytes as u128 + self.saved_bytes as u128) * 100 / self.used_bytes as u128) as u64
        }
    }
}

/// Clones of open txgs and the outcome of the syncing txg's apply.
#[derive(Default)]
struct Pending {
    next_id: u64,
    /// Made in open context, not yet applied: id → (txg, pointer).
    open: HashMap<u64, (u64, BlockPtr)>,
    /// Applied in the txg being synced, not yet linked by their record.
    applied: HashMap<u64, BlockPtr>,
    /// Refused in the txg being synced (their source was freed meanwhile).
    refused: HashSet<u64>,
}

/// A clone record's claim on its source block. Dropping it before its txg's
/// sync applies it withdraws the clone (the record was discarded: a
/// rewrite, truncate or free of the destination block in the same txg).
pub struct CloneRef {
    pending: Arc<Mutex<Pending>>,
    pub(crate) id: u64,
}

impl Drop for CloneRef {
    fn drop(&mut self) {
        self.pending.lock().open.remove(&self.id);
    }
}

impl std::fmt::Debug for CloneRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CloneRef({})", self.id)
    }
}

/// What the sync does with a clone record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linked {
    /// The block gained a reference: link the pointer.
    Shared,
    /// The block was freed by the previous sync: link a copy of its data.
    Refused,
}

/// The table as the syncing context sees it.
#[derive(Default)]
struct Table {
    /// The MOS object (0: none yet).
    obj: u64,
    /// Totals including `changes`; `nbuckets` is the stored layout's.
    header: BrtHeader,
    /// Entries changed since the last flush (refcount 0: removed).
    changes: BTreeMap<BrtKey, BrtEntry>,
    /// Entries per region, per vdev; None until first needed. While None,
    /// `changes` is empty (every change builds it first).
    regions: Option<HashMap<u32, Vec<u32>>>,
    /// The last txg flushed: no change may follow in that txg.
    flushed_txg: u64,
}

pub struct Brt {
    pending: Arc<Mutex<Pending>>,
    table: Mutex<Table>,
    /// The meta object set, which holds the table object.
    mos: OnceLock<Weak<Objset>>,
    cloned: AtomicU64,
    refused: AtomicU64,
}

impl Default for Brt {
    fn default() -> Self {
        Self::new()
    }
}

impl Brt {
    pub fn new() -> Brt {
        Brt {
            pending: Arc::new(Mutex::new(Pending::default())),
            table: Mutex::new(Table::default()),
            mos: OnceLock::new(),
            cloned: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Gives the table the meta object set it lives in (once, at open).
    pub(crate) fn attach(&self, mos: &Arc<Objset>) {
        let _ = self.mos.set(Arc::downgrade(mos));
    }

    fn mos(&self) -> Result<Arc<Objset>> {
        self.mos.get().and_then(|w| w.upgrade()).ok_or_else(|| Error::corrupt("the block reference table has no meta object set"))
    }

    /// Opens the table stored in MOS object `obj` (import).
    pub(crate) fn load(&self, obj: u64) -> Result<()> {
        let mos = self.mos()?;
        let info = mos.info(obj).map_err(|e| e.context("block reference table"))?;
        if info.otype != ObjectType::BlockRefTable {
            return Err(Error::corrupt(format!("block reference table: MOS object {} is a {}", obj, info.otype.name())));
        }
        let b = mos.read(obj, 0, BRT_BLOCK_SIZE)?;
        let header = BrtHeader::decode(&b).map_err(|e| Error::from(e).context(format!("MOS object {}", obj)))?;
        let mut t = self.table.lock();
        *t = Table { obj, header, ..Default::default() };
        Ok(())
    }

    /// The MOS object holding the table (0: none).
    pub fn object(&self) -> u64 {
        self.table.lock().obj
    }

    pub fn stats(&self) -> BrtStats {
        let h = self.table.lock().header;
        BrtStats {
            entries: h.entries,
            used_bytes: h.used_bytes,
            saved_bytes: h.saved_bytes,
            cloned_blocks: self.cloned.load(Ordering::Relaxed),
            refused_blocks: self.refused.load(Ordering::Relaxed),
        }
    }

    /// Open context: a clone of `bp` made in `txg` (`bp` a normal pointer).
    /// The returned claim lives in the destination's clone record.
    pub(crate) fn add_clone(&self, bp: &BlockPtr, txg: u64) -> CloneRef {
        assert!(may_be_cloned(bp), "cloning a block that is not plain data: {:?}", bp);
        let mut p = self.pending.lock();
        p.next_id += 1;
        let id = p.next_id;
        p.open.insert(id, (txg, *bp));
        CloneRef { pending: self.pending.clone(), id }
    }

    /// Start of the sync of `txg`, before anything is freed: every clone of
    /// the txg adds its reference, or is refused when its block is no
    /// longer allocated (freed by the previous sync after the clone read
    /// the pointer).
    pub(crate) fn apply(&self, core: &PoolCore, txg: u64) -> Result<()> {
        let clones: Vec<(u64, BlockPtr)> = {
            let mut p = self.pending.lock();
            assert!(p.applied.is_empty() && p.refused.is_empty(), "clones of an earlier txg were never settled");
            if let Some((id, (t, _))) = p.open.iter().find(|(_, (t, _))| *t < txg) {
                return Err(Error::corrupt(format!("clone {} of txg {} was never applied", id, t)));
            }
            let ids: Vec<u64> = p.open.iter().filter(|(_, (t, _))| *t == txg).map(|(id, _)| *id).collect();
            ids.into_iter().filter_map(|id| p.open.remove(&id).map(|(_, bp)| (id, bp))).collect()
        };
        if clones.is_empty() {
            return Ok(());
        }
        let mut applied = HashMap::with_capacity(clones.len());
        let mut refused = HashSet::new();
        {
            let mut t = self.table.lock();
            for (id, bp) in clones {
                let live = {
                    let a = core.alloc.lock();
                    bp.dva.iter().filter(|d| !d.is_empty()).all(|d| a.is_allocated(d.vdev, d.offset, d.asize))
                };
                if live {
                    self.add_ref(&mut t, &bp, txg)?;
                    applied.insert(id, bp);
                } else {
                    refused.insert(id);
                }
            }
        }
        self.cloned.fetch_add(applied.len() as u64, Ordering::Relaxed);
        self.refused.fetch_add(refused.len() as u64, Ordering::Relaxed);
        let mut p = self.pending.lock();
        p.applied = applied;
        p.refused = refused;
        Ok(())
    }

    /// The sync links the clone record whose claim is `id`: was its
    /// reference added?
    pub(crate) fn take(&self, id: u64) -> Result<Linked> {
        let mut p = self.pending.lock();
        if p.applied.remove(&id).is_some() {
            return Ok(Linked::Shared);
        }
        if p.refused.remove(&id) {
            return Ok(Linked::Refused);
        }
        Err(Error::corrupt(format!("clone {} is linked but was not applied in this txg", id)))
    }

    /// After the datasets synced: clones applied but linked by no record
    /// (their dataset was rolled back or destroyed in this txg) give their
    /// reference back — a free, which frees the block if no one else has it.
    pub(crate) fn release_unlinked(&self, core: &PoolCore, txg: u64) -> Result<()> {
        let left: Vec<BlockPtr> = {
            let mut p = self.pending.lock();
            p.refused.clear();
            std::mem::take(&mut p.applied).into_values().collect()
        };
        for bp in left {
            core.free_block(&bp, txg)?;
        }
        Ok(())
    }

    /// A free of `bp` in `txg` (syncing context): true when the block had
    /// an entry, which lost one reference — the caller must not free it.
    pub(crate) fn release(&self, bp: &BlockPtr, txg: u64) -> Result<bool> {
        if !may_be_cloned(bp) {
            return Ok(false);
        }
        let mut t = self.table.lock();
        if t.header.entries == 0 {
            return Ok(false);
        }
        self.ensure_regions(&mut t)?;
        let key = BrtKey::of(bp);
        if !t.in_used_region(key) {
            return Ok(false);
        }
        let Some(mut e) = self.get(&t, key)? else { return Ok(false) };
        Self::check_changeable(&t, txg)?;
        Self::check_entry(bp, &e)?;
        e.refcount -= 1;
        t.header.saved_bytes -= e.asize;
        if e.refcount == 0 {
            t.header.entries -= 1;
            t.header.used_bytes -= e.asize;
            t.count_region(key, false);
        }
        t.changes.insert(key, e);
        Ok(true)
    }

    /// One reference more for `bp`'s block (syncing context).
    fn add_ref(&self, t: &mut Table, bp: &BlockPtr, txg: u64) -> Result<()> {
        Self::check_changeable(t, txg)?;
        self.ensure_regions(t)?;
        let key = BrtKey::of(bp);
        let asize = bp.asize_total();
        let e = match self.get(t, key)? {
            Some(mut e) => {
                Self::check_entry(bp, &e)?;
                e.refcount += 1;
                e
            }
            None => {
                t.header.entries += 1;
                t.header.used_bytes += asize;
                t.count_region(key, true);
                BrtEntry { key, asize, refcount: 1 }
            }
        };
        t.header.saved_bytes += asize;
        t.changes.insert(key, e);
        Ok(())
    }

    /// Changes of a txg come before its flush.
    fn check_changeable(t: &Table, txg: u64) -> Result<()> {
        if txg <= t.flushed_txg {
            return Err(Error::corrupt(format!("block reference table changed in txg {} after its flush", txg)));
        }
        Ok(())
    }

    /// An entry describes the block of the pointer that found it.
    fn check_entry(bp: &BlockPtr, e: &BrtEntry) -> Result<()> {
        if e.asize != bp.asize_total() {
            return Err(Error::corrupt(format!(
                "block reference table: block at {}:{:#x} has {} bytes, its entry {}",
                e.key.vdev,
                e.key.offset,
                bp.asize_total(),
                e.asize
            )));
        }
        Ok(())
    }

    /// The entry of `key` as of now (changes first, then the stored table).
    fn get(&self, t: &Table, key: BrtKey) -> Result<Option<BrtEntry>> {
        if let Some(e) = t.changes.get(&key) {
            return Ok((e.refcount > 0).then_some(*e));
        }
        if t.obj == 0 {
            return Ok(None);
        }
        let bucket = self.read_bucket(t, key.bucket(t.header.nbuckets))?;
        Ok(bucket.binary_search_by_key(&key, |e| e.key).ok().map(|i| bucket[i]))
    }

    fn read_bucket(&self, t: &Table, b: u64) -> Result<Vec<BrtEntry>> {
        let mos = self.mos()?;
        let data = mos.read(t.obj, (1 + b) * BRT_BLOCK_SIZE as u64, BRT_BLOCK_SIZE)?;
        if data.is_empty() {
            return Ok(Vec::new());
        }
        decode_bucket(&data).map_err(|e| Error::from(e).context(format!("bucket {} of the block reference table", b)))
    }

    /// Every stored entry (a rebuild or the region counts).
    fn read_all(&self, t: &Table) -> Result<Vec<BrtEntry>> {
        let mut out = Vec::new();
        if t.obj == 0 {
            return Ok(out);
        }
        for b in 0..t.header.nbuckets {
            out.extend(self.read_bucket(t, b)?);
        }
        Ok(out)
    }

    fn ensure_regions(&self, t: &mut Table) -> Result<()> {
        if t.regions.is_some() {
            return Ok(());
        }
        debug_assert!(t.changes.is_empty(), "changes before the region counts");
        let entries = self.read_all(t)?;
        if entries.len() as u64 != t.header.entries {
            return Err(Error::corrupt(format!("block reference table holds {} entries, its header says {}", entries.len(), t.header.entries)));
        }
        t.regions = Some(HashMap::new());
        for e in entries {
            t.count_region(e.key, true);
        }
        Ok(())
    }

    /// End of the txg's changes (syncing context, before the MOS syncs):
    /// writes the changed entries into the table object, creating it on the
    /// first entry. Returns the object when this flush created it.
    pub(crate) fn flush(&self, mos: &Objset, txg: u64) -> Result<Option<u64>> {
        let mut t = self.table.lock();
        t.flushed_txg = txg;
        if t.changes.is_empty() {
            return Ok(None);
        }
        let mut created = None;
        if t.obj == 0 {
            t.obj = mos.create_in_blksz(txg, ObjectType::BlockRefTable, 3, BRT_BLOCK_SIZE as u32)?;
            t.header.nbuckets = 1;
            created = Some(t.obj);
        }
        let changes = std::mem::take(&mut t.changes);
        let nb = t.header.nbuckets;
        let mut by_bucket: BTreeMap<u64, Vec<BrtEntry>> = BTreeMap::new();
        for e in changes.values() {
            by_bucket.entry(e.key.bucket(nb)).or_default().push(*e);
        }
        let mut merged = Vec::with_capacity(by_bucket.len());
        let mut overflow = false;
        for (b, ch) in by_bucket {
            let es = if created.is_some() { Vec::new() } else { self.read_bucket(&t, b)? };
            let es = merge(es, &ch);
            overflow |= es.len() > BUCKET_ENTRIES_MAX;
            merged.push((b, es));
        }
        if overflow {
            let all = merge(self.read_all(&t)?, &changes.into_values().collect::<Vec<_>>());
            self.rebuild(&mut t, mos, txg, all)?;
        } else {
            for (b, es) in merged {
                mos.write_txg(txg, t.obj, (1 + b) * BRT_BLOCK_SIZE as u64, &encode_bucket(&es))?;
            }
        }
        mos.write_txg(txg, t.obj, 0, &t.header.encode())?;
        Ok(created)
    }

    /// Rewrites the whole table with as many buckets as it takes for no
    /// bucket to overflow (at least twice as many as before).
    fn rebuild(&self, t: &mut Table, mos: &Objset, txg: u64, all: Vec<BrtEntry>) -> Result<()> {
        let mut nb = t.header.nbuckets * 2;
        let buckets = loop {
            if nb > BUCKETS_MAX {
                return Err(Error::no_space(format!("block reference table of {} entries needs more than {} buckets", all.len(), BUCKETS_MAX)));
            }
            let mut buckets: BTreeMap<u64, Vec<BrtEntry>> = BTreeMap::new();
            for e in &all {
                buckets.entry(e.key.bucket(nb)).or_default().push(*e);
            }
            if buckets.values().all(|b| b.len() <= BUCKET_ENTRIES_MAX) {
                break buckets;
            }
            nb *= 2;
        };
        // Buckets no entry hashes to are written too: they may hold stale
        // entries of the old layout.
        for b in 0..nb {
            let es = buckets.get(&b).map_or(&[][..], |v| v.as_slice());
            mos.write_txg(txg, t.obj, (1 + b) * BRT_BLOCK_SIZE as u64, &encode_bucket(es))?;
        }
        t.header.nbuckets = nb;
        Ok(())
    }

    /// The table's own invariants (walks it: tests and `verify`).
    pub fn check_invariants(&self) -> Result<()> {
        let t = self.table.lock();
        let mut entries = self.read_all(&t)?;
        entries = merge(entries, &t.changes.values().copied().collect::<Vec<_>>());
        let (n, used, saved) = entries.iter().fold((0u64, 0u64, 0u64), |(n, u, s), e| (n + 1, u + e.asize, s + e.asize * e.refcount));
        let h = t.header;
        if (n, used, saved) != (h.entries, h.used_bytes, h.saved_bytes) {
            return Err(Error::corrupt(format!(
                "block reference table: entries sum to ({}, {}, {}), the header says ({}, {}, {})",
                n, used, saved, h.entries, h.used_bytes, h.saved_bytes
            )));
        }
        if let Some(r) = &t.regions {
            let counted: u64 = r.values().flatten().map(|&c| c as u64).sum();
            if counted != n {
                return Err(Error::corrupt(format!("block reference table: regions count {} entries of {}", counted, n)));
            }
        }
        Ok(())
    }
}

impl Table {
    fn count_region(&mut self, key: BrtKey, add: bool) {
        let regions = self.regions.as_mut().expect("region counts are built before any change");
        let v = regions.entry(key.vdev).or_default();
        let i = (key.offset >> REGION_SHIFT) as usize;
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        if add {
            v[i] += 1;
        } else {
            v[i] = v[i].checked_sub(1).expect("a region count below zero");
        }
    }

    fn in_used_region(&self, key: BrtKey) -> bool {
        let regions = self.regions.as_ref().expect("region counts are built before any lookup");
        regions.get(&key.vdev).and_then(|v| v.get((key.offset >> REGION_SHIFT) as usize)).is_some_and(|&c| c > 0)
    }
}

/// `stored` (ascending) with `changes` applied: changed entries replace
/// stored ones, refcount 0 removes. The result is ascending.
fn merge(stored: Vec<BrtEntry>, changes: &[BrtEntry]) -> Vec<BrtEntry> {
    let mut m: BTreeMap<BrtKey, BrtEntry> = stored.into_iter().map(|e| (e.key, e)).collect();
    for c in changes {
        if c.refcount == 0 {
            m.remove(&c.key);
        } else {
            m.insert(c.key, *c);
        }
    }
    m.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_ondisk::bp::Dva;

    fn bp(offset: u64) -> BlockPtr {
        let mut b = BlockPtr::hole(131072, ObjectType::PlainData, 0);
        b.dva[0] = Dva { vdev: 0, asize: 131072, offset };
        b.psize = 131072;
        b.birth = 5;
        b
    }

    #[test]
    fn merge_replaces_and_removes() {
        let e = |o: u64, r: u64| BrtEntry { key: BrtKey { vdev: 0, offset: o }, asize: 512, refcount: r };
        assert_eq!(merge(vec![e(1, 1), e(2, 2), e(3, 1)], &[e(2, 0), e(3, 4), e(0, 1)]), vec![e(0, 1), e(1, 1), e(3, 4)]);
    }

    #[test]
    fn a_dropped_claim_withdraws_its_clone() {
        let brt = Brt::new();
        let a = brt.add_clone(&bp(0x100000), 7);
        let b = brt.add_clone(&bp(0x200000), 7);
        drop(a);
        let p = brt.pending.lock();
        assert_eq!(p.open.len(), 1);
        assert!(p.open.contains_key(&b.id));
    }

    #[test]
    fn ratio_is_in_hundredths() {
        let s = BrtStats { used_bytes: 100, saved_bytes: 150, ..Default::default() };
        assert_eq!(s.ratio_percent(), 250);
        assert_eq!(BrtStats::default().ratio_percent(), 100);
    }
}
