//! What every layer above the devices shares: the vdevs, the allocator, the
//! txg engine, the tunables and the block cache, with the block-level read,
//! write and free operations built from them.
//!
//! A block is read from its first copy that verifies: a copy that fails its
//! checksum counts a checksum error against its device and the next copy is
//! tried, so `copies=2` heals around a damaged sector. A block is written by
//! allocating each copy (on different vdevs where possible) and queueing the
//! writes into the txg's write group. Frees are deferred by the allocator
//! until the txg is two syncs old. Every free passes the block reference
//! table first (`brt`): a cloned block loses one reference instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::{BlockPtr, Dva, MAX_DVAS};

use crate::arc::{BlockKey, Held, L2Arc, PoolCache};
use crate::error::{Error, ErrorKind, Result};
use crate::io::block::BlockData;
use crate::io::{block, IoClass, Leaf, Prepared, WriteGroup};
use crate::pool::alloc::metaslab::Allocator;
use crate::pool::brt::Brt;
use crate::tunables::Tunables;
use crate::txg::TxgEngine;

/// One top-level vdev (a single leaf device: tarn stripes over them).
pub struct TopVdev {
    pub id: u32,
    pub guid: u64,
    pub ashift: u8,
    /// The path the device was opened at.
    pub path: String,
    /// Usable device size (a multiple of the label size).
    pub dev_size: u64,
    pub leaf: Leaf,
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
    pub vdevs: Vec<TopVdev>,
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
    /// Prefetch reads under way, by block.
    pub inflight: Mutex<HashMap<BlockKey, Arc<Inflight>>>,
    pub prefetch_stats: PrefetchStats,
    /// Extra references of cloned blocks (block cloning).
    pub brt: Brt,
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
    /// Reads and verifies the block `bp` names; `what` names it for errors.
    pub fn read_block(&self, bp: &BlockPtr, class: IoClass, what: &dyn Fn() -> String) -> Result<Arc<BlockData>> {
        self.read_block_cached(bp, class, what, true, true)
    }

    /// As `read_block`; a block read from a device enters the ARC only if
    /// `keep` (the dataset's `primarycache`), and may go on to the L2ARC
    /// only if `l2` (its `secondarycache`).
    pub fn read_block_cached(&self, bp: &BlockPtr, class: IoClass, what: &dyn Fn() -> String, keep: bool, l2: bool) -> Result<Arc<BlockData>> {
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
        let mut last_err = None;
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            match self.read_copy(bp, dva, class) {
                Ok((d, held)) => {
                    if keep {
                        self.cache.insert_block(bp, held, Some(&d), false, l2);
                    }
                    return Ok(d);
                }
                Err(e) => last_err = Some(e),
            }
        }
        let e = last_err.unwrap_or_else(|| Error::corrupt("block pointer has no copies"));
        Err(e.context(format!("pool '{}': {}", self.name, what())))
    }

    /// Reads one copy: the block's content and its stored form (`Held`).
    fn read_copy(&self, bp: &BlockPtr, dva: &Dva, class: IoClass) -> Result<(Arc<BlockData>, Held)> {
        let v = self.vdevs.get(dva.vdev as usize).ok_or_else(|| {
            Error::corrupt(format!("block on vdev {} which the pool does not have", dva.vdev))
        })?;
        let len = (bp.psize as u64).div_ceil(1 << v.ashift) << v.ashift;
        // A corrupt offset near u64::MAX must not wrap past the check.
        let fits = dva.offset.checked_add(len).is_some_and(|end| end <= v.dev_size);
        if len > dva.asize || !fits {
            return Err(Error::corrupt(format!("block at {}:{:#x} lies outside its device", dva.vdev, dva.offset)));
        }
        let raw = v
            .leaf
            .read(class, dva.offset, len)
            .map_err(|e| Error::io(format!("read of {} bytes at {:#x} on {}", len, dva.offset, v.path), e))?;
        Held::read(bp, raw).inspect_err(|e| {
            if e.kind == ErrorKind::Corrupt {
                v.leaf.note_checksum_error();
            }
        })
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
        let Some(v) = self.vdevs.get(dva.vdev as usize) else { return };
        let len = (bp.psize as u64).div_ceil(1 << v.ashift) << v.ashift;
        if len > dva.asize || dva.offset + len > v.dev_size {
            return;
        }
        let inflight = Arc::new(Inflight { res: Mutex::new(None), cv: parking_lot::Condvar::new() });
        {
            let mut m = self.inflight.lock();
            if m.contains_key(&key) {
                return;
            }
            m.insert(key, inflight.clone());
        }
        self.prefetch_stats.issued.fetch_add(1, Ordering::Relaxed);
        let core = self.clone();
        let bp = *bp;
        v.leaf.read_async(
            IoClass::AsyncRead,
            dva.offset,
            len,
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
        let copies = (copies as usize).clamp(1, MAX_DVAS);
        let mut used: Vec<u32> = Vec::with_capacity(copies);
        for i in 0..copies {
            let (vdev, offset, asize) = self.alloc_copy(phys.len() as u64, txg, &used)?;
            used.push(vdev);
            bp.dva[i] = Dva { vdev, asize, offset };
        }
        for (i, dva) in bp.dva.iter().filter(|d| !d.is_empty()).enumerate() {
            let leaf = &self.vdevs[dva.vdev as usize].leaf;
            leaf.write(IoClass::AsyncWrite, dva.offset, phys.clone(), group, if i == 0 { retire } else { 0 });
        }
        if let Some(d) = cache_as {
            self.cache.insert_block(&bp, Held::written(&bp, &phys, d.clone()), Some(&d), false, true);
        }
        Ok(bp)
    }

    /// Allocates one copy, on a vdev not in `used` when the pool has one
    /// with room, else anywhere (a second copy on the same vdev still guards
    /// against a bad sector).
    pub fn alloc_copy(&self, len: u64, txg: u64, used: &[u32]) -> Result<(u32, u64, u64)> {
        let mut a = self.alloc.lock();
        let r = match a.alloc(len, txg, used) {
            Err(_) if !used.is_empty() => a.alloc(len, txg, &[]),
            r => r,
        };
        let (vdev, offset, asize) = r.map_err(|e| Error::no_space(format!("pool '{}': cannot allocate {} bytes: {}", self.name, len, e)))?;
        // The writers' figure follows allocations as they happen: a block
        // written during a sync retires its dirty bytes at once, and until
        // the next `refresh_space` it would otherwise be counted neither as
        // dirty nor as allocated — letting writers admit up to a txg of data
        // more than the pool holds, which the sync then cannot allocate.
        let _ = self.free_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| Some(f.saturating_sub(asize)));
        Ok((vdev, offset, asize))
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
    /// metadata and frees, so a full pool still syncs and deletes.
    pub fn check_space(&self, bytes: u64) -> Result<()> {
        let free = self.free_bytes.load(Ordering::Relaxed);
        let slop = self.slop_bytes();
        let need = bytes + self.txg.dirty_total() + slop;
        if free < need {
            return Err(Error::no_space(format!(
                "pool '{}' is out of space ({} bytes free, {} reserved)",
                self.name, free, slop
            )));
        }
        Ok(())
    }

    /// The reserve kept for metadata and frees: 1/32 of the pool, at least 4 MiB.
    pub fn slop_bytes(&self) -> u64 {
        (self.size_bytes.load(Ordering::Relaxed) / 32).max(4 << 20)
    }

    /// Refreshes the space figures writers check (after each sync): computing
    /// them walks the allocator, too slow for every write.
    pub fn refresh_space(&self) {
        // Stored under the allocator's lock, as `alloc_copy` lowers it.
        let a = self.alloc.lock();
        let s = a.space();
        self.size_bytes.store(s.total.size, Ordering::Relaxed);
        self.free_bytes.store(s.total.free, Ordering::Relaxed);
        drop(a);
    }

    pub fn check_writable(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::new(ErrorKind::Invalid, format!("pool '{}' is open read-only", self.name)));
        }
        Ok(())
    }
}
