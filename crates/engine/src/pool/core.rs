//! What every layer above the devices shares: the vdevs, the allocator, the
//! txg engine, the tunables and the block cache, with the block-level read,
//! write and free operations built from them.
//!
//! A block is read from its first copy that verifies: a copy that fails its
//! checksum counts a checksum error against its device and the next copy is
//! tried, so `copies=2` heals around a damaged sector. Every failed copy is
//! an ereport in the pool's event ring and the daemon log (`events`), and a
//! block no copy of which verifies enters the pool's error log under its
//! bookmark when the reader gave one (`errlog`). A block is written by
//! allocating each copy (on different vdevs where possible, else an eighth
//! of the device apart: `Allocator::alloc_ditto`) and queueing the writes
//! into the txg's write group. How many copies a block gets is its writer's
//! choice (`WriteProps::copies_for`: data `copies`, metadata one more under
//! `redundant_metadata`, pool-wide metadata three). Frees are deferred by
//! the allocator until the txg is two syncs old. Every free passes the
//! block reference table first (`brt`): a cloned block loses one reference
//! instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::{BlockPtr, Dva, MAX_DVAS};

use crate::arc::{BlockKey, Held, L2Arc, PoolCache};
use crate::error::{Error, ErrorKind, Result};
use crate::io::block::BlockData;
use crate::io::{block, IoClass, Prepared, WriteGroup};
use crate::pool::alloc::metaslab::Allocator;
use crate::pool::brt::Brt;
use crate::pool::errlog::{Bookmark, ErrorLog};
use crate::pool::events::{class, EventLog, Limit, Post};
use crate::tunables::Tunables;
use crate::txg::TxgEngine;
use crate::vdev::{ReadCheck, Vdev};

/// Free space is counted per piece size, for blocks of up to `2^(PIECE_MIN_SHIFT + i)`
/// bytes, `i < PIECE_CLASSES`: 512 B … 16 MiB, the largest block.
pub const PIECE_MIN_SHIFT: u32 = 9;
pub const PIECE_CLASSES: usize = 16;
/// The smallest piece an admission counts in: any change may dirty a dnode
/// block, which needs a piece of its own size.
pub const PIECE_MIN_ADMIT: u64 = tarn_ondisk::dnode::DNODE_BLOCK_SIZE as u64;

/// The class of the smallest piece that holds a `bytes`-byte block, never
/// below [`PIECE_MIN_ADMIT`].
pub fn piece_class(bytes: u64) -> usize {
    let b = bytes.max(PIECE_MIN_ADMIT);
    let shift = 64 - (b - 1).leading_zeros();
    (shift.saturating_sub(PIECE_MIN_SHIFT) as usize).min(PIECE_CLASSES - 1)
}

/// Copies of every block of pool-wide metadata: the meta object set (its
/// root, which the uberblock names, and every block below it) and the space
/// checkpoint and log. Without them the pool cannot be imported; OpenZFS
/// also keeps three.
pub const POOL_METADATA_COPIES: u8 = 3;

/// A top-level vdev: blocks are striped over them (see `vdev`).
pub type TopVdev = crate::vdev::Vdev;

/// A leaf device of the pool as the administrator names it: its path (as
/// `pool status` shows it) and guid, with its I/O object.
#[derive(Clone)]
pub struct LeafRef {
    pub guid: u64,
    pub path: String,
    pub leaf: Arc<crate::io::Leaf>,
}

/// Whether `which` — a path, another name of the same file or block
/// device, or a guid in decimal or `0x` hex — names the device recorded as
/// `path` with `guid` (zinject's and zpool's ways of naming a vdev).
pub(crate) fn names_device(which: &str, path: &str, guid: u64) -> bool {
    let hex = which.strip_prefix("0x").and_then(|h| u64::from_str_radix(h, 16).ok());
    if which == path || which == guid.to_string() || hex == Some(guid) {
        return true;
    }
    let id = |p: &str| std::fs::metadata(p).ok().and_then(|m| crate::sys::inuse::DeviceId::of(&m));
    matches!((id(which), id(path)), (Some(a), Some(b)) if a == b)
}

/// A copy of a block that could not be read from a device, as an ereport
/// names it (`PoolCore::copy_failed`).
pub(crate) struct FailedCopy {
    /// The copy's top-level vdev (its DVA's vdev number).
    pub vdev: u32,
    /// The device that failed: a leaf, or the top-level vdev when no leaf
    /// is to blame.
    pub path: String,
    pub guid: u64,
    /// Where the copy was read on it, and how many bytes.
    pub offset: u64,
    pub size: u64,
    /// Corrupt (a checksum ereport) or not (an io ereport), and why.
    pub kind: ErrorKind,
    pub error: String,
}

impl FailedCopy {
    pub(crate) fn on(vdev: u32, dev: &Vdev, offset: u64, size: u64, e: &Error) -> FailedCopy {
        FailedCopy { vdev, path: dev.path.clone(), guid: dev.guid, offset, size, kind: e.kind, error: e.to_string() }
    }
}

/// A block being read ahead; demand readers of it wait here instead of
/// issuing a second read.
pub struct Inflight {
    res: Mutex<Option<std::result::Result<Arc<BlockData>, String>>>,
    cv: parking_lot::Condvar,
}

impl Inflight {
    fn wait(&self) -> std::result::Result<Arc<BlockData>, String> {
        let mut g = self.res.lock();
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            self.cv.wait(&mut g);
        }
    }
}

pub struct PoolCore {
    pub name: String,
    pub guid: u64,
    pub vdevs: super::vdevs::VdevSet,
    pub alloc: Mutex<Allocator>,
    pub txg: Arc<TxgEngine>,
    pub tunables: RwLock<Tunables>,
    /// The pool's handle on the ARC (the process's, unless it was opened
    /// with a cache of its own).
    pub cache: Arc<PoolCache>,
    /// Cache devices (empty until `pool add … cache`).
    pub l2: Arc<L2Arc>,
    /// Allocation unit of the pool: the largest sector of its vdevs.
    pub sector: usize,
    pub readonly: bool,
    /// Pool size and free bytes as of the last sync (see `refresh_space`).
    pub size_bytes: AtomicU64,
    pub free_bytes: AtomicU64,
    /// Freed bytes the allocator holds back until two more txgs sync, as
    /// of the last sync: free for writers that wait for them (`room`).
    pub deferred_bytes: AtomicU64,
    /// Of `free_bytes` and `deferred_bytes`, per piece class (see
    /// [`piece_class`]), what blocks of up to that size surely fit into, as
    /// of the last sync: what writers are admitted against.
    pub usable_bytes: [AtomicU64; PIECE_CLASSES],
    pub deferred_usable_bytes: [AtomicU64; PIECE_CLASSES],
    /// Bytes of written data the kernel may hold, per mount of the pool's
    /// file systems, before they reach the pool (the FUSE write-back
    /// cache): see `posix::FileSystem::kernel_cache`.
    pub kernel_caches: Mutex<HashMap<u64, u64>>,
    /// Prefetch reads under way, by block.
    pub inflight: Mutex<HashMap<BlockKey, Arc<Inflight>>>,
    pub prefetch_stats: PrefetchStats,
    /// Extra references of cloned blocks (block cloning).
    pub brt: Brt,
    /// Blocks no copy of which could be read.
    pub errlog: ErrorLog,
    /// What happened to the pool (`pool events`); shared with the devices'
    /// fault hooks and the daemon's followers.
    pub events: Arc<EventLog>,
    /// Blocks written since import with copies nearer each other than the
    /// allocator's minimum distance (no room far enough apart).
    pub near_copies: AtomicU64,
    /// Blocks the intent log wrote in place that nothing will link and
    /// whose record is gone or syncing: freed by the next sync
    /// (`object/prewrite.rs`, invariant 3).
    pub(crate) prewritten_frees: Mutex<Vec<BlockPtr>>,
    /// The hot spares standing by, and what wakes the spare thread
    /// (`pool::spare`).
    pub spares: super::spare::SpareSet,
    /// The separate intent-log devices (`pool::log_vdev`).
    pub logs: super::log_vdev::LogVdevs,
    /// When foreground I/O last reached the devices: a scan backs off
    /// while it is recent (`pool::scan::idle`).
    pub foreground: super::scan::ForegroundIo,
}

#[derive(Debug, Default)]
pub struct PrefetchStats {
    /// Blocks read ahead.
    pub issued: AtomicU64,
    /// Demand reads that found their block read ahead (cached or in flight).
    pub hits: AtomicU64,
    /// Reads that continued a sequential stream, and reads no stream expected.
    pub stream_hits: AtomicU64,
    pub stream_misses: AtomicU64,
}

impl PoolCore {
    /// Every leaf's scheduler with its path and guid (`tarn inject`).
    pub fn leaf_refs(&self) -> impl Iterator<Item = LeafRef> {
        self.leaves().into_iter().filter_map(|(_, v)| v.leaf_arc().map(|leaf| LeafRef { guid: v.guid, path: v.path.clone(), leaf }))
    }

    /// Reads and verifies the block `bp` names; `what` names it for errors.
    /// For blocks that are not in an object set's tree (space maps, labels'
    /// targets, tools' walks): a read that finds no good copy is reported
    /// but enters no error log.
    pub fn read_block(&self, bp: &BlockPtr, class: IoClass, what: &dyn Fn() -> String) -> Result<Arc<BlockData>> {
        self.read_block_cached(bp, class, what, true, true, None)
    }

    /// As `read_block`; a block read from a device enters the ARC only if
    /// `keep` (the dataset's `primarycache`), and may go on to the L2ARC
    /// only if `l2` (its `secondarycache`). `at` is where the block sits in
    /// its object set's tree, when the reader knows: a read that finds no
    /// good copy enters the error log under it, one that succeeds clears
    /// it from there (see `errlog`).
    pub fn read_block_cached(&self, bp: &BlockPtr, class: IoClass, what: &dyn Fn() -> String, keep: bool, l2: bool, at: Option<&Bookmark>) -> Result<Arc<BlockData>> {
        let res = self.read_block_from(bp, class, what, keep, l2, at);
        if let (Ok(_), Some(at)) = (&res, at) {
            self.errlog.cleared_by_read(at);
        }
        res
    }

    fn read_block_from(&self, bp: &BlockPtr, class: IoClass, what: &dyn Fn() -> String, keep: bool, l2: bool, at: Option<&Bookmark>) -> Result<Arc<BlockData>> {
        if let Some(d) = block::decode_inline(bp).map_err(|e| e.context(what()))? {
            return Ok(Arc::new(d));
        }
        let key = BlockKey::of(bp);
        let meta = bp.otype.is_metadata() || bp.level > 0;
        if let Some(d) = self.cache.get(bp, meta) {
            return Ok(d);
        }
        let pending = self.inflight.lock().get(&key).cloned();
        if let Some(p) = pending {
            if let Ok(d) = p.wait() {
                self.prefetch_stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(d);
            }
            // A failed read-ahead is retried as a demand read (other copies).
        }
        if let Some((d, held)) = self.l2.read(bp) {
            if keep {
                self.cache.insert_block(bp, held, Some(&d), false, l2);
            }
            return Ok(d);
        }
        // A dataset's block read from a device is foreground I/O, which a
        // scan yields to; the MOS's (read by the sync thread) and the
        // scan's own (its class) are not.
        if class != IoClass::Scrub && at.is_some_and(|a| a.objset != 0) {
            self.foreground.note();
        }
        let mut failed: Vec<FailedCopy> = Vec::with_capacity(MAX_DVAS);
        let mut last = None;
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            match self.read_copy(bp, dva, class, &mut failed) {
                Ok((d, held)) => {
                    self.copies_failed(&failed, true, at, what);
                    if keep {
                        self.cache.insert_block(bp, held, Some(&d), false, l2);
                    }
                    return Ok(d);
                }
                Err(e) => last = Some(e),
            }
        }
        self.copies_failed(&failed, false, at, what);
        let e = last.unwrap_or_else(|| Error::corrupt("block pointer has no copies"));
        Err(e.context(format!("pool '{}': {}", self.name, what())))
    }

    /// Posts an ereport for each copy of a block that failed, and records
    /// a block no copy of which could be read (`!served`) in the error log
    /// (a data ereport when it is new there).
    fn copies_failed(&self, failed: &[FailedCopy], served: bool, at: Option<&Bookmark>, what: &dyn Fn() -> String) {
        let outcome = if served { "another copy served the read" } else { "no copy could be read: permanent error" };
        for f in failed {
            self.copy_failed(f, outcome, at, what);
        }
        if let (false, Some(at)) = (served, at) {
            self.record_lost(at, what);
        }
    }

    /// Posts the ereport of one failed copy: checksum for a copy that read
    /// but did not verify, io for one the device could not read (rate
    /// limited per device and once per copy: `events`).
    pub(crate) fn copy_failed(&self, f: &FailedCopy, outcome: &str, at: Option<&Bookmark>, what: &dyn Fn() -> String) {
        let (cls, kind) = if f.kind == ErrorKind::Corrupt { (class::CHECKSUM, "checksum") } else { (class::IO, "read") };
        self.events.post_limited(Limit { key: f.guid, offset: Some(f.offset) }, cls, || {
            let at_text = at.map(|b| format!(" ({})", b)).unwrap_or_default();
            let mut p = Post::new(cls).vdev(&f.path, f.guid);
            if let Some(b) = at {
                p = p.bookmark(b);
            }
            let line = format!("{} error on vdev {} ('{}') at offset {:#x} ({} bytes): {}{}: {}; {}", kind, f.vdev, f.path, f.offset, f.size, what(), at_text, f.error, outcome);
            p.hex("zio_offset", f.offset).dec("zio_size", f.size).text("zio_err", &f.error).text("block", &what()).text("outcome", outcome).line(line)
        });
    }

    /// A block no copy of which could be read: into the error log, and a
    /// data ereport when it is new there.
    pub(crate) fn record_lost(&self, at: &Bookmark, what: &dyn Fn() -> String) {
        if !self.errlog.record(*at) {
            return;
        }
        self.events.post_limited(Limit { key: self.guid, offset: None }, class::DATA, || {
            Post::new(class::DATA).bookmark(at).text("block", &what()).line(format!("permanent error: no copy of {} ({}) could be read", what(), at))
        });
    }

    /// A copy of `dva` that failed as a whole (outside its device, no child
    /// to read): its top-level vdev is the device to blame.
    fn top_failed(&self, dva: &Dva, e: &Error) -> FailedCopy {
        match self.vdevs.get(dva.vdev as usize) {
            Some(v) => FailedCopy::on(dva.vdev, &v, dva.offset, dva.asize, e),
            None => FailedCopy { vdev: dva.vdev, path: "?".into(), guid: 0, offset: dva.offset, size: dva.asize, kind: e.kind, error: e.to_string() },
        }
    }

    /// The vdev of a copy and the bytes to read for it (psize in whole
    /// sectors), checked to lie within its allocation and its device (on
    /// RAID-Z, what the block takes there: its asize, parity included).
    pub(crate) fn copy_extent(&self, bp: &BlockPtr, dva: &Dva) -> Result<(Arc<TopVdev>, u64)> {
        let v = self.vdevs.get(dva.vdev as usize).ok_or_else(|| {
            Error::corrupt(format!("block on vdev {} which the pool does not have", dva.vdev))
        })?;
        let len = (bp.psize as u64).div_ceil(1 << v.ashift) << v.ashift;
        let need = v.alloc_size(len);
        // A corrupt offset near u64::MAX must not wrap past the check.
        let fits = dva.offset.checked_add(need).is_some_and(|end| end <= v.dev_size);
        if len == 0 || need > dva.asize || !fits {
            return Err(Error::corrupt(format!("block at {}:{:#x} lies outside its device", dva.vdev, dva.offset)));
        }
        Ok((v, len))
    }

    /// Reads one copy: the block's content and its stored form (`Held`).
    /// The vdev checks the bytes against the block's checksum (a mirror
    /// or RAID-Z vdev finds good ones on another child and repairs the
    /// bad, see `vdev`).
    /// Every device that failed on the way goes to `failed`: the leaves
    /// the vdev read from, or the vdev itself when none is to blame.
    fn read_copy(&self, bp: &BlockPtr, dva: &Dva, class: IoClass, failed: &mut Vec<FailedCopy>) -> Result<(Arc<BlockData>, Held)> {
        let (v, len) = self.copy_extent(bp, dva).inspect_err(|e| failed.push(self.top_failed(dva, e)))?;
        let check = |raw: &[u8]| block::verify(bp, raw).is_ok();
        let leaves = std::cell::RefCell::new(Vec::new());
        let report = |leaf: &Vdev, offset: u64, e: &Error| leaves.borrow_mut().push(FailedCopy::on(dva.vdev, leaf, offset, len, e));
        let res = v.read_checked(class, dva.offset, len, bp.birth, &ReadCheck { check: &check, repair: !self.readonly, failed: &report, speculative: false });
        let mut leaves = leaves.into_inner();
        if let (Err(e), true) = (&res, leaves.is_empty()) {
            leaves.push(self.top_failed(dva, e));
        }
        failed.append(&mut leaves);
        Held::read_verified(bp, res?)
    }

    /// Starts reading `bp` into the cache in the async-read class, unless it
    /// is cached or already on its way.
    pub fn prefetch(self: &Arc<Self>, bp: &BlockPtr) {
        if bp.is_hole() || bp.is_embedded() {
            return;
        }
        let key = BlockKey::of(bp);
        if self.cache.contains(bp) {
            return;
        }
        let dva = bp.dva[0];
        let Ok((v, len)) = self.copy_extent(bp, &dva) else { return };
        let inflight = Arc::new(Inflight { res: Mutex::new(None), cv: parking_lot::Condvar::new() });
        {
            let mut m = self.inflight.lock();
            if m.contains_key(&key) {
                return;
            }
            m.insert(key, inflight.clone());
        }
        self.prefetch_stats.issued.fetch_add(1, Ordering::Relaxed);
        // Read-ahead serves a reader: foreground, for the scan's back-off.
        self.foreground.note();
        let core = self.clone();
        let bp = *bp;
        let unqueue = self.clone();
        let queued = v.read_async(
            IoClass::AsyncRead,
            dva.offset,
            len,
            bp.birth,
            Box::new(move |res| {
                let r = match res {
                    Ok(raw) => Held::read(&bp, raw).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                let r = r.map(|(d, held)| {
                    core.cache.insert_block(&bp, held, Some(&d), true, true);
                    d
                });
                core.inflight.lock().remove(&key);
                *inflight.res.lock() = Some(r);
                inflight.cv.notify_all();
            }),
        );
        if !queued {
            // Not read ahead here (no child to read, or a RAID-Z data
            // column on a child that is down or missed its txg): demand
            // readers read it themselves.
            let pending = unqueue.inflight.lock().remove(&key);
            if let Some(p) = pending {
                *p.res.lock() = Some(Err("not read ahead".into()));
                p.cv.notify_all();
            }
        }
    }

    /// Allocates `copies` copies of a prepared block and queues their writes.
    /// `retire` dirty bytes retire when the first copy is written.
    pub fn write_block(
        &self,
        prep: Prepared,
        txg: u64,
        copies: u8,
        group: &Arc<WriteGroup>,
        retire: u64,
        cache_as: Option<Arc<BlockData>>,
    ) -> Result<BlockPtr> {
        let mut bp = prep.bp;
        let Some(phys) = prep.phys else { return Ok(bp) };
        let places = self.alloc_copies(phys.len() as u64, txg, copies)?;
        for (i, &(vdev, offset, asize)) in places.iter().enumerate() {
            bp.dva[i] = Dva { vdev, asize, offset };
        }
        // The free-space figures dropped with the allocation; until the
        // write retires `retire`, space checks must not count it twice.
        self.txg.dirty_placed(retire);
        for (i, dva) in bp.dva.iter().filter(|d| !d.is_empty()).enumerate() {
            let v = self.vdevs.top(dva.vdev);
            v.write(IoClass::AsyncWrite, dva.offset, phys.clone(), group, if i == 0 { retire } else { 0 }, txg);
        }
        if let Some(d) = cache_as {
            self.cache.insert_block(&bp, Held::written(&bp, &phys, d.clone()), Some(&d), false, true);
        }
        Ok(bp)
    }

    /// Allocates `copies` copies (1 to 3) of a block of `len` bytes: the
    /// first where the allocator's policy puts it, the others on other
    /// vdevs or far from it on the same one (`Allocator::alloc_ditto`), so
    /// that no one damaged region holds two of them. Returns (vdev, offset,
    /// allocated length) per copy. A copy the allocator could only place
    /// near another (a vdev too full to keep the distance) is counted in
    /// `near_copies`; every other block is checked to be apart.
    pub fn alloc_copies(&self, len: u64, txg: u64, copies: u8) -> Result<Vec<(u32, u64, u64)>> {
        let copies = (copies as usize).clamp(1, MAX_DVAS);
        let mut a = self.alloc.lock();
        let no_space = |e: crate::pool::alloc::metaslab::AllocError| Error::no_space(format!("pool '{}': cannot allocate {} bytes: {}", self.name, len, e));
        let mut places = Vec::with_capacity(copies);
        places.push(a.alloc(len, txg, &[]).map_err(no_space)?);
        let mut apart = true;
        while places.len() < copies {
            let d = a.alloc_ditto(len, txg, &places).map_err(no_space)?;
            apart &= d.apart;
            places.push((d.vdev, d.offset, d.len));
        }
        if apart {
            // Cheap (three copies at most): a broken placement is a bug.
            if let Err(e) = a.check_copies_apart(&places) {
                panic!("pool '{}': {}", self.name, e);
            }
        } else {
            self.near_copies.fetch_add(1, Ordering::Relaxed);
        }
        drop(a);
        self.took_space(places.iter().map(|p| p.2).sum());
        Ok(places)
    }

    /// The writers' figure follows allocations as they happen: a block
    /// written during a sync retires its dirty bytes at once, and until
    /// the next `refresh_space` it would otherwise be counted neither as
    /// dirty nor as allocated — letting writers admit up to a txg of data
    /// more than the pool holds, which the sync then cannot allocate.
    pub(crate) fn took_space(&self, asize: u64) {
        let _ = self.free_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some(f.saturating_sub(asize)));
        for u in &self.usable_bytes {
            let _ = u.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some(f.saturating_sub(asize)));
        }
    }

    /// Drops one reference to the block `bp` names: a cloned block with
    /// references left only loses one in the block reference table;
    /// otherwise every copy is freed (deferred two txgs by the allocator).
    /// Every free in the pool comes here (syncing context).
    pub fn free_block(&self, bp: &BlockPtr, txg: u64) -> Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        if self.brt.release(bp, txg).map_err(|e| e.context(format!("pool '{}'", self.name)))? {
            return Ok(());
        }
        self.cache.remove(bp);
        self.l2.remove(bp);
        let mut a = self.alloc.lock();
        for d in bp.dva.iter().filter(|d| !d.is_empty()) {
            a.free(d.vdev, d.offset, d.asize, txg).map_err(|e| {
                Error::corrupt(format!("pool '{}': freeing {}:{:#x}+{:#x}: {:?}", self.name, d.vdev, d.offset, d.asize, e))
            })?;
        }
        Ok(())
    }

    /// Space that writers may still dirty: free space less what dirty data
    /// will take and a slop reserve (1/32 of the pool, as OpenZFS) kept for
    /// metadata and frees, so a full pool still syncs and deletes. Free
    /// space counts only where the allocator can surely place the blocks
    /// (`usable_bytes`): without gang blocks, free space in pieces smaller
    /// than a block cannot take it, and admitting data on the strength of
    /// such pieces fails the sync and suspends the pool. So the change and
    /// all dirty data must fit pieces that hold `piece`-byte blocks (the
    /// largest the change dirties), and together with the slop, pieces that
    /// hold metadata blocks. Counts only space the allocator can hand out
    /// now: a writer that finds it short while frees are on their way waits
    /// for them first (`Objset::begin_for`).
    pub fn check_space(&self, bytes: u64, piece: u64) -> Result<()> {
        let dirty = self.txg.dirty_unplaced();
        let want = bytes.saturating_add(dirty);
        let (usable, piece) = self.usable(piece, false);
        let (small, _) = self.usable(PIECE_MIN_ADMIT, false);
        let slop = self.slop_bytes();
        if usable < want || small < want.saturating_add(slop) {
            let free = self.free_bytes.load(Ordering::Relaxed);
            return Err(Error::no_space(format!(
                "pool '{}' is out of space: {} bytes free, {} of them in pieces that hold {}-byte blocks and {} in pieces that hold metadata; {} dirty, {} reserved for metadata, {} asked",
                self.name, free, usable, piece, small, dirty, slop, bytes
            )));
        }
        Ok(())
    }

    /// Usable bytes for blocks of up to `piece` (raised to the smallest
    /// admitted piece), free now or (`deferred`) on their way back; and
    /// the piece size they were counted for.
    fn usable(&self, piece: u64, deferred: bool) -> (u64, u64) {
        let i = piece_class(piece);
        let mut u = self.usable_bytes[i].load(Ordering::Relaxed);
        if deferred {
            u = u.saturating_add(self.deferred_usable_bytes[i].load(Ordering::Relaxed));
        }
        (u, 1 << (PIECE_MIN_SHIFT + i as u32))
    }

    /// The reserve kept for metadata and frees: 1/32 of the pool, at least 4 MiB.
    pub fn slop_bytes(&self) -> u64 {
        (self.size_bytes.load(Ordering::Relaxed) / 32).max(4 << 20)
    }

    /// What writers of blocks of up to `piece` bytes may fill as of the
    /// last sync, dirty data aside: usable free and deferred space, and
    /// with the slop kept back in pieces for metadata (as `check_space`).
    /// Deferred frees count: a writer that needs them waits the two syncs
    /// until they are allocatable (OpenZFS counts them free the same way,
    /// from its space accounting).
    pub fn unreserved_bytes(&self, piece: u64) -> u64 {
        let data = self.usable(piece, true).0;
        let small = self.usable(PIECE_MIN_ADMIT, true).0.saturating_sub(self.slop_bytes());
        data.min(small)
    }

    /// What writers of blocks of up to `piece` bytes may still dirty now:
    /// `unreserved_bytes` less the dirty data of every unsynced txg
    /// (`statfs`'s available space).
    pub fn room_bytes(&self, piece: u64) -> u64 {
        self.unreserved_bytes(piece).saturating_sub(self.txg.dirty_unplaced())
    }

    /// Whether a sync may give writers space back: frees wait in the
    /// allocator for their txg + 2, or a txg not yet synced has changes
    /// (a delete not yet applied, a quota's pending writes settling).
    pub fn frees_pending(&self) -> bool {
        self.deferred_bytes.load(Ordering::Relaxed) > 0 || self.txg.unsynced_changes()
    }

    /// Refreshes the space figures writers check (after each sync): computing
    /// them walks the allocator, too slow for every write.
    pub fn refresh_space(&self) {
        // Stored under the allocator's lock, as `alloc_copies` lowers it.
        let a = self.alloc.lock();
        let s = a.space();
        let (usable, deferred) = a.space_by_piece::<PIECE_CLASSES>(PIECE_MIN_SHIFT);
        self.size_bytes.store(s.total.size, Ordering::Relaxed);
        self.free_bytes.store(s.total.free, Ordering::Relaxed);
        self.deferred_bytes.store(s.total.deferred, Ordering::Relaxed);
        for i in 0..PIECE_CLASSES {
            self.usable_bytes[i].store(usable[i], Ordering::Relaxed);
            self.deferred_usable_bytes[i].store(deferred[i], Ordering::Relaxed);
        }
        drop(a);
        assert!(usable[0] <= s.total.free, "pool '{}': {} usable of {} free bytes", self.name, usable[0], s.total.free);
        assert!(usable.windows(2).all(|w| w[0] >= w[1]), "pool '{}': usable space grows with the piece size: {:?}", self.name, usable);
    }

    /// Records what the kernel may hold for mount `mount` (0: none).
    pub fn set_kernel_cache(&self, mount: u64, bytes: u64) {
        let mut m = self.kernel_caches.lock();
        if bytes == 0 {
            m.remove(&mount);
        } else {
            m.insert(mount, bytes);
        }
    }

    /// What the kernel may hold for all the pool's mounts together.
    pub fn kernel_cache_bytes(&self) -> u64 {
        self.kernel_caches.lock().values().fold(0u64, |a, &b| a.saturating_add(b))
    }

    pub fn check_writable(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::new(ErrorKind::Invalid, format!("pool '{}' is open read-only", self.name)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_classes_round_up_and_start_at_a_dnode_block() {
        let size = |b: u64| 1u64 << (PIECE_MIN_SHIFT + piece_class(b) as u32);
        assert_eq!(size(0), PIECE_MIN_ADMIT);
        assert_eq!(size(512), PIECE_MIN_ADMIT);
        assert_eq!(size(16 << 10), 16 << 10);
        assert_eq!(size((16 << 10) + 1), 32 << 10);
        assert_eq!(size(128 << 10), 128 << 10);
        assert_eq!(size(16 << 20), 16 << 20);
        assert_eq!(piece_class(u64::MAX), PIECE_CLASSES - 1);
    }
}
