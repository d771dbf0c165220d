//! The checker: walks every block reachable from the last synced uberblock,
//! verifies each one's checksum and structure, and cross-checks the
//! allocator — every referenced copy must be allocated, no two copies may
//! overlap, and the allocated total must equal what is referenced (no leaks).
//! It counts blocks by their number of copies and those whose copies lie
//! nearer each other than the allocator's minimum (`near_copies`: the
//! placement invariant, which only a full vdev may excuse).
//!
//! Snapshots, clones and dead lists share blocks. Each dataset record's tree
//! is walked only below pointers born after its previous snapshot (or
//! origin), as OpenZFS's traversal does: an older pointer is shared with
//! that snapshot, which walks it. So every block pointer is visited once
//! per *instance* — once in all, unless block cloning made several pointers
//! to the same block, each of which is visited. A block is read once
//! however often it is visited. Every dead-list entry must be a block of
//! some snapshot's tree.
//!
//! Block cloning: a block visited `n` times must have a block reference
//! table entry with refcount `n − 1` (none when `n` is 1), and every entry
//! must describe a block visited `refcount + 1` times with its size; the
//! table's header totals must be the sums of its entries.
//!
//! It reads the on-disk state only (not in-memory dirty data), through the
//! same decoders import uses, so it is an independent opinion on whether a
//! pool is consistent. The crash tests run it after every simulated power cut;
//! `tarn inspect --verify` runs it on a real pool. Walks use explicit stacks.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_ondisk::bp::{BlockPtr, ObjectType, BP_SIZE};
use tarn_ondisk::brt::{decode_bucket, BrtEntry, BrtHeader, BrtKey, BRT_BLOCK_SIZE};
use tarn_ondisk::dnode::{Dnode, ObjsetPhys, SLOTS_PER_BLOCK, SLOT_SIZE};
use tarn_ondisk::kv;

use super::core::PoolCore;
use super::errlog::Bookmark;
use crate::error::Result;
use crate::io::block::BlockData;
use crate::io::IoClass;

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    pub txg: u64,
    pub blocks: u64,
    pub embedded_blocks: u64,
    pub allocated_bytes: u64,
    pub referenced_bytes: u64,
    pub objects: u64,
    /// Bytes of the MOS's blocks and of the space checkpoint and log.
    pub mos_bytes: u64,
    pub space_bytes: u64,
    /// Dead-list entries seen (a block on several dead lists counts each time).
    pub dead_entries: u64,
    /// The block reference table as stored: its entries and their
    /// totals (bytes the cloned blocks take once, and bytes their extra
    /// references would take as copies).
    pub brt_entries: u64,
    pub brt_used_bytes: u64,
    pub brt_saved_bytes: u64,
    /// Block pointers visited beyond the first of their block (clones).
    pub extra_references: u64,
    /// Blocks by their number of copies (index 1 to 3).
    pub blocks_by_copies: [u64; 4],
    /// Blocks whose copies share a vdev nearer than the allocator's minimum
    /// distance (`Allocator::check_copies_apart`): placed so only when a
    /// vdev had no room far enough apart. Not an error, but one damaged
    /// region can take all their copies. The first few are described in
    /// `near_copy_examples`.
    pub near_copies: u64,
    pub near_copy_examples: Vec<String>,
    pub errors: Vec<String>,
    /// How many of `errors` are unreadable data blocks (level 0 of plain
    /// data objects); the others are metadata or structure.
    pub data_errors: u64,
}

/// Near-copy blocks described in a report, at most.
const NEAR_EXAMPLES_MAX: usize = 10;

struct Walker<'a> {
    core: &'a PoolCore,
    rep: VerifyReport,
    extents: Vec<(u32, u64, u64, String)>,
    /// Blocks noted, by their first copy: pointers visited and size.
    seen: HashMap<BrtKey, (u64, u64)>,
    /// For a scan (`gather`): every block noted, once; data blocks are
    /// then noted without being read (the scan reads every copy itself).
    collect: Option<Vec<(BlockPtr, Option<Bookmark>)>>,
    /// Where the block being noted sits (for the scan's error log
    /// entries): set by the walk before each `note`.
    at: Option<Bookmark>,
}

impl<'a> Walker<'a> {
    /// Notes a block; false if it was seen before. A level-0 data block
    /// seen again is another pointer to it (a clone) and is counted.
    fn note(&mut self, bp: &BlockPtr, what: &str) -> bool {
        if bp.is_embedded() {
            self.rep.embedded_blocks += 1;
            return true;
        }
        if bp.is_hole() {
            return true;
        }
        if let Some(s) = self.seen.get_mut(&BrtKey::of(bp)) {
            if crate::pool::brt::may_be_cloned(bp) {
                s.0 += 1;
                self.rep.extra_references += 1;
            }
            return false;
        }
        self.seen.insert(BrtKey::of(bp), (1, bp.asize_total()));
        self.rep.blocks += 1;
        if let Some(c) = &mut self.collect {
            c.push((*bp, self.at));
        }
        for d in bp.dva.iter().filter(|d| !d.is_empty()) {
            self.rep.referenced_bytes += d.asize;
            self.extents.push((d.vdev, d.offset, d.asize, what.to_string()));
        }
        self.check_placement(bp, what);
        true
    }

    /// Counts the block's copies and checks they lie apart.
    fn check_placement(&mut self, bp: &BlockPtr, what: &str) {
        let copies: Vec<(u32, u64, u64)> = bp.dva.iter().filter(|d| !d.is_empty()).map(|d| (d.vdev, d.offset, d.asize)).collect();
        self.rep.blocks_by_copies[copies.len().min(3)] += 1;
        if let Err(e) = self.core.alloc.lock().check_copies_apart(&copies) {
            self.rep.near_copies += 1;
            if self.rep.near_copy_examples.len() < NEAR_EXAMPLES_MAX {
                self.rep.near_copy_examples.push(format!("{}: {}", what, e));
            }
        }
    }

    /// Reads a block not seen before (None: seen, or unreadable).
    fn read(&mut self, bp: &BlockPtr, what: &str) -> Option<Arc<BlockData>> {
        if !self.note(bp, what) {
            return None;
        }
        self.read_noted(bp, what)
    }

    /// Reads a block just noted (None: unreadable, the error recorded).
    fn read_noted(&mut self, bp: &BlockPtr, what: &str) -> Option<Arc<BlockData>> {
        match self.core.read_block(bp, IoClass::Scrub, &|| what.to_string()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.rep.errors.push(e.to_string());
                None
            }
        }
    }

    /// Every block of one object's tree born after `min_txg`; returns its
    /// level-0 data when asked (for the dnode array and small maps), else
    /// None.
    fn walk_object(&mut self, dn: &Dnode, (objset, object): (u64, u64), what: &str, keep_data: bool, min_txg: u64) -> Vec<(u64, Arc<BlockData>)> {
        let mut out = Vec::new();
        let Some(top) = dn.blkptr else { return out };
        let mut stack = vec![(top, 0u64)];
        while let Some((bp, index)) = stack.pop() {
            if bp.is_hole() || bp.birth <= min_txg {
                continue;
            }
            let label = format!("{} L{} #{}", what, bp.level, index);
            self.at = Some(Bookmark::block(objset, object, bp.level, index));
            if bp.level == 0 && !keep_data {
                // Data blocks are read and verified but not kept (a scan
                // reads them later, every copy, in device order).
                if self.note(&bp, &label) && self.collect.is_none() && self.read_noted(&bp, &label).is_none() {
                    self.rep.data_errors += 1;
                }
                continue;
            }
            let Some(data) = self.read(&bp, &label) else { continue };
            if bp.level == 0 {
                out.push((index, data));
                continue;
            }
            for (i, chunk) in data.chunks_exact(BP_SIZE).enumerate() {
                match BlockPtr::decode(chunk) {
                    Ok(child) if !child.is_hole() => {
                        if child.level + 1 != bp.level {
                            self.rep.errors.push(format!("{}: child {} at level {} under level {}", label, i, child.level, bp.level));
                            continue;
                        }
                        stack.push((child, (index << 10) + i as u64));
                    }
                    Ok(_) => {}
                    Err(e) => self.rep.errors.push(format!("{} entry {}: {}", label, i, e)),
                }
            }
        }
        out
    }

    /// Every object of an object set, below pointers born after `min_txg`
    /// (older ones belong to a snapshot walked on its own); returns the
    /// dnodes found by number.
    fn walk_objset(&mut self, root: &BlockPtr, objset: u64, name: &str, min_txg: u64) -> Vec<(u64, Dnode)> {
        if root.birth <= min_txg {
            return vec![];
        }
        self.at = Some(Bookmark::objset_root(objset));
        let Some(data) = self.read(root, &format!("root block of '{}'", name)) else { return vec![] };
        let phys = match ObjsetPhys::decode(&data) {
            Ok(p) => p,
            Err(e) => {
                self.rep.errors.push(format!("'{}': {}", name, e));
                return vec![];
            }
        };
        let blocks = self.walk_object(&phys.meta_dnode, (objset, 0), &format!("'{}' dnode array", name), true, min_txg);
        let mut dnodes = Vec::new();
        for (blkid, data) in blocks {
            let mut slot = 0;
            while slot < SLOTS_PER_BLOCK && (slot + 1) * SLOT_SIZE <= data.len() {
                let obj = blkid * SLOTS_PER_BLOCK as u64 + slot as u64;
                match Dnode::decode(&data[slot * SLOT_SIZE..]) {
                    Ok(Some(dn)) => {
                        slot += dn.slots().max(1);
                        dnodes.push((obj, dn));
                    }
                    Ok(None) => slot += 1,
                    Err(e) => {
                        self.rep.errors.push(format!("'{}' object {}: {}", name, obj, e));
                        slot += 1;
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (obj, dn) in dnodes {
            self.rep.objects += 1;
            let keep = dn.otype != ObjectType::PlainData;
            let data = self.walk_object(&dn, (objset, obj), &format!("'{}' object {}", name, obj), keep, min_txg);
            let _ = data;
            out.push((obj, dn));
        }
        out
    }

    fn check_extents(&mut self) {
        self.extents.sort_by_key(|e| (e.0, e.1));
        for w in self.extents.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if a.0 == b.0 && a.1 + a.2 > b.1 {
                self.rep.errors.push(format!("{} and {} overlap on vdev {} at {:#x}", a.3, b.3, a.0, b.1));
            }
        }
        let alloc = self.core.alloc.lock();
        for (v, off, len, what) in &self.extents {
            if !alloc.is_allocated(*v, *off, *len) {
                self.rep.errors.push(format!("{} at {}:{:#x}+{:#x} is not allocated", what, v, off, len));
            }
            if alloc.overlaps_transient(*v, *off, *len) {
                self.rep.errors.push(format!("{} at {}:{:#x}+{:#x} overlaps an intent-log block", what, v, off, len));
            }
        }
        // Intent-log blocks are allocated in memory only (no tree holds
        // them: see the allocator's "Transient allocations").
        let space = alloc.space();
        let held = space.total.allocated - alloc.transient_bytes();
        self.rep.allocated_bytes = held;
        if held != self.rep.referenced_bytes {
            self.rep.errors.push(format!(
                "allocator holds {} bytes but blocks reference {} (leak of {} bytes)",
                held,
                self.rep.referenced_bytes,
                held as i64 - self.rep.referenced_bytes as i64
            ));
        }
    }
}

impl Walker<'_> {
    /// The space blocks, the MOS and every dataset's tree (each below the
    /// pointers its previous snapshot shares). Returns the MOS's dead lists
    /// and block reference tables, which the checker reads next.
    #[allow(clippy::type_complexity)]
    fn walk_pool(&mut self, mos: &BlockPtr, space_blocks: &[BlockPtr]) -> (Vec<(u64, Dnode)>, Vec<(u64, Dnode)>) {
        let core = self.core;
        let w = self;
        for bp in space_blocks {
            w.note(bp, "space map block");
        }
        w.rep.space_bytes = w.rep.referenced_bytes;
        let mos_objects = w.walk_objset(mos, 0, "$MOS", 0);
        w.rep.mos_bytes = w.rep.referenced_bytes - w.rep.space_bytes;
        let mut dead = Vec::new();
        let mut brt = Vec::new();
        // Dataset records name the dataset object sets.
        for (obj, dn) in &mos_objects {
            if dn.otype == ObjectType::DeadList {
                dead.push((*obj, dn.clone()));
                continue;
            }
            if dn.otype == ObjectType::BlockRefTable {
                brt.push((*obj, dn.clone()));
                continue;
            }
            if dn.otype != ObjectType::DatasetRecord {
                continue;
            }
            let data = match &dn.inline {
                Some(d) => d.clone(),
                None => match dn.blkptr.map(|bp| core.read_block(&bp, IoClass::Scrub, &|| format!("dataset record {}", obj))) {
                    Some(Ok(d)) => d[..dn.size as usize].to_vec(),
                    _ => continue,
                },
            };
            let rec = match kv::decode(&data) {
                Ok(r) => r,
                Err(e) => {
                    w.rep.errors.push(format!("dataset record {}: {}", obj, e));
                    continue;
                }
            };
            let name = kv::get_str(&rec, "name").unwrap_or("?").to_string();
            let min_txg = kv::get_u64(&rec, "prev_snap_txg").unwrap_or(0);
            match rec.get("bp").map(|b| BlockPtr::decode(b)) {
                Some(Ok(bp)) if bp.is_hole() => {}
                Some(Ok(bp)) => {
                    w.walk_objset(&bp, *obj, &name, min_txg);
                }
                Some(Err(e)) => w.rep.errors.push(format!("dataset '{}': {}", name, e)),
                None => w.rep.errors.push(format!("dataset '{}' has no root block", name)),
            }
        }
        (dead, brt)
    }
}

/// Every block the last synced tree references, once each, for a scan:
/// metadata read (and verified) on the way, data blocks only noted. The
/// errors met on the way are returned with them.
pub(crate) fn gather(core: &PoolCore, mos: &BlockPtr, txg: u64, space_blocks: &[BlockPtr]) -> (Vec<(BlockPtr, Option<Bookmark>)>, Vec<String>) {
    let mut w = Walker { core, rep: VerifyReport { txg, ..Default::default() }, extents: Vec::new(), seen: HashMap::new(), collect: Some(Vec::new()), at: None };
    w.walk_pool(mos, space_blocks);
    (w.collect.take().unwrap_or_default(), w.rep.errors)
}

/// Walks the pool as of `ub` (see module docs). `space_blocks` are the
/// blocks of the space checkpoint and log, which nothing else references.
pub(crate) fn verify(core: &PoolCore, mos: &BlockPtr, txg: u64, space_blocks: &[BlockPtr]) -> Result<VerifyReport> {
    let mut w = Walker { core, rep: VerifyReport { txg, ..Default::default() }, extents: Vec::new(), seen: HashMap::new(), collect: None, at: None };
    let (dead, brt) = w.walk_pool(mos, space_blocks);
    // Dead-list entries: blocks that snapshots hold and their successors
    // no longer do, so each must have been reached through some tree.
    let tree_blocks: std::collections::HashSet<BrtKey> = w.seen.keys().copied().collect();
    for (obj, dn) in dead {
        let data = object_bytes(core, &mut w, obj, &dn);
        for (i, chunk) in data.chunks_exact(BP_SIZE).enumerate() {
            match BlockPtr::decode(chunk) {
                Ok(bp) if bp.is_hole() || bp.is_embedded() => w.rep.errors.push(format!("dead list {} entry {} holds no block", obj, i)),
                Ok(bp) => {
                    w.rep.dead_entries += 1;
                    if !tree_blocks.contains(&BrtKey::of(&bp)) {
                        w.rep.errors.push(format!("dead list {} entry {} (born {}) is in no snapshot", obj, i, bp.birth));
                        w.note(&bp, &format!("dead list {} entry {}", obj, i));
                    }
                }
                Err(e) => w.rep.errors.push(format!("dead list {} entry {}: {}", obj, i, e)),
            }
        }
    }
    if brt.len() > 1 {
        w.rep.errors.push(format!("{} block reference tables in the MOS", brt.len()));
    }
    let table = match brt.first() {
        Some((obj, dn)) => read_brt(core, &mut w, *obj, dn),
        None => BTreeMap::new(),
    };
    w.check_references(&table);
    w.check_extents();
    Ok(w.rep)
}

/// The stored block reference table: its entries by key (header totals
/// checked against them, errors noted).
fn read_brt(core: &PoolCore, w: &mut Walker, obj: u64, dn: &Dnode) -> BTreeMap<BrtKey, BrtEntry> {
    let mut out = BTreeMap::new();
    let data = object_bytes(core, w, obj, dn);
    let header = match data.get(..BRT_BLOCK_SIZE).map(BrtHeader::decode) {
        Some(Ok(h)) => h,
        Some(Err(e)) => {
            w.rep.errors.push(format!("block reference table (MOS object {}): {}", obj, e));
            return out;
        }
        None => {
            w.rep.errors.push(format!("block reference table (MOS object {}) has no header", obj));
            return out;
        }
    };
    for (b, chunk) in data[BRT_BLOCK_SIZE..].chunks(BRT_BLOCK_SIZE).enumerate() {
        if b as u64 >= header.nbuckets {
            break;
        }
        let mut block = chunk.to_vec();
        block.resize(BRT_BLOCK_SIZE, 0);
        match decode_bucket(&block) {
            Ok(es) => {
                for e in es {
                    if e.key.bucket(header.nbuckets) != b as u64 {
                        w.rep.errors.push(format!("block reference table: entry {}:{:#x} is in bucket {} of {}", e.key.vdev, e.key.offset, b, header.nbuckets));
                    }
                    out.insert(e.key, e);
                }
            }
            Err(e) => w.rep.errors.push(format!("block reference table bucket {}: {}", b, e)),
        }
    }
    let used: u64 = out.values().map(|e| e.asize).sum();
    let saved: u64 = out.values().map(|e| e.asize * e.refcount).sum();
    if (out.len() as u64, used, saved) != (header.entries, header.used_bytes, header.saved_bytes) {
        w.rep.errors.push(format!(
            "block reference table: entries sum to ({} entries, {} used, {} saved), its header says ({}, {}, {})",
            out.len(),
            used,
            saved,
            header.entries,
            header.used_bytes,
            header.saved_bytes
        ));
    }
    w.rep.brt_entries = header.entries;
    w.rep.brt_used_bytes = header.used_bytes;
    w.rep.brt_saved_bytes = header.saved_bytes;
    out
}

impl Walker<'_> {
    /// Every block visited `n` times has refcount `n − 1` in the table, and
    /// every entry is a block visited `refcount + 1` times.
    fn check_references(&mut self, table: &BTreeMap<BrtKey, BrtEntry>) {
        for (key, &(n, asize)) in &self.seen {
            let want = table.get(key).map_or(0, |e| e.refcount);
            if n != want + 1 {
                self.rep.errors.push(format!(
                    "block {}:{:#x} has {} pointers but the block reference table counts {} extra ({})",
                    key.vdev,
                    key.offset,
                    n,
                    want,
                    if n > want + 1 { "a free would lose data" } else { "its space would leak" }
                ));
            }
            if let Some(e) = table.get(key).filter(|e| e.asize != asize) {
                self.rep.errors.push(format!("block {}:{:#x} has {} bytes, its table entry {}", key.vdev, key.offset, asize, e.asize));
            }
        }
        for key in table.keys().filter(|k| !self.seen.contains_key(k)) {
            self.rep.errors.push(format!("block reference table entry {}:{:#x} names a block no tree references (leak)", key.vdev, key.offset));
        }
    }
}

/// Largest dead list or block reference table the checker reads whole
/// (16 M dead entries, or 1 M table buckets): a bound on what a damaged
/// size can make it allocate.
const MOS_OBJECT_MAX_BYTES: u64 = 4 << 30;

/// The content of a MOS object as of the walk (inline or its blocks).
fn object_bytes(core: &PoolCore, w: &mut Walker, obj: u64, dn: &Dnode) -> Vec<u8> {
    if let Some(d) = &dn.inline {
        return d.clone();
    }
    let Some(top) = dn.blkptr else { return Vec::new() };
    if dn.size > MOS_OBJECT_MAX_BYTES {
        w.rep.errors.push(format!("MOS object {} ({}) claims {} bytes", obj, dn.otype.name(), dn.size));
        return Vec::new();
    }
    // The blocks were noted during the MOS walk; read them again here.
    let bs = dn.datablksz as u64;
    let mut out = vec![0u8; dn.size as usize];
    let mut stack = vec![(top, 0u64)];
    while let Some((bp, index)) = stack.pop() {
        if bp.is_hole() {
            continue;
        }
        match core.read_block(&bp, IoClass::Scrub, &|| format!("MOS object {} ({})", obj, dn.otype.name())) {
            Ok(d) if bp.level == 0 => {
                let start = (index * bs) as usize;
                if start < out.len() {
                    let n = d.len().min(out.len() - start);
                    out[start..start + n].copy_from_slice(&d[..n]);
                }
            }
            Ok(d) => {
                for (i, c) in d.chunks_exact(BP_SIZE).enumerate() {
                    if let Ok(child) = BlockPtr::decode(c) {
                        stack.push((child, (index << 10) + i as u64));
                    }
                }
            }
            Err(e) => w.rep.errors.push(e.to_string()),
        }
    }
    out
}
