//! What every layer above the devices shares: the vdevs, the allocator, the
//! txg engine, the tunables and the block cache, with the block-level read,
//! write and free operations built from them.
//!
//! A block is read from its first copy that verifies: a copy that fails its
//! checksum counts a checksum error against its device and the next copy is
//! tried, so `copies=2` heals around a damaged sector. A block is written by
//! allocating each copy (on different vdevs where possible) and queueing the
//! writes into the txg's write group. Frees are deferred by the allocator
//! until the txg is two syncs old.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::{BlockPtr, Dva, MAX_DVAS};

use crate::arc::{BlockCache, BlockKey};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{block, IoClass, Leaf, Prepared, WriteGroup};
use crate::pool::alloc::metaslab::Allocator;
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

pub struct PoolCore {
    pub name: String,
    pub guid: u64,
    pub vdevs: Vec<TopVdev>,
    pub alloc: Mutex<Allocator>,
    pub txg: Arc<TxgEngine>,
    pub tunables: RwLock<Tunables>,
    pub cache: BlockCache,
    /// Allocation unit of the pool: the largest sector of its vdevs.
    pub sector: usize,
    pub readonly: bool,
    /// Pool size and free bytes as of the last sync (see `refresh_space`).
    pub size_bytes: AtomicU64,
    pub free_bytes: AtomicU64,
}

fn key_of(bp: &BlockPtr) -> BlockKey {
    BlockKey { vdev: bp.dva[0].vdev, offset: bp.dva[0].offset, birth: bp.birth }
}

impl PoolCore {
    /// Reads and verifies the block `bp` names; `what` names it for errors.
    pub fn read_block(&self, bp: &BlockPtr, class: IoClass, what: &dyn Fn() -> String) -> Result<Arc<Vec<u8>>> {
        if let Some(d) = block::decode_inline(bp).map_err(|e| e.context(what()))? {
            return Ok(Arc::new(d));
        }
        let key = key_of(bp);
        let meta = bp.otype.is_metadata() || bp.level > 0;
        if let Some(d) = self.cache.get(&key, meta) {
            return Ok(d);
        }
        let mut last_err = None;
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            match self.read_copy(bp, dva, class) {
                Ok(d) => {
                    let d = Arc::new(d);
                    self.cache.insert(key, d.clone());
                    return Ok(d);
                }
                Err(e) => last_err = Some(e),
            }
        }
        let e = last_err.unwrap_or_else(|| Error::corrupt("block pointer has no copies"));
        Err(e.context(format!("pool '{}': {}", self.name, what())))
    }

    fn read_copy(&self, bp: &BlockPtr, dva: &Dva, class: IoClass) -> Result<Vec<u8>> {
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
        block::decode(bp, &raw).inspect_err(|e| {
            if e.kind == ErrorKind::Corrupt {
                v.leaf.note_checksum_error();
            }
        })
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
        cache_as: Option<Arc<Vec<u8>>>,
    ) -> Result<BlockPtr> {
        let mut bp = prep.bp;
        let Some(phys) = prep.phys else { return Ok(bp) };
        let copies = (copies as usize).clamp(1, MAX_DVAS);
        let mut used: Vec<u32> = Vec::with_capacity(copies);
        for i in 0..copies {
            let (vdev, offset, asize) = {
                let mut a = self.alloc.lock();
                a.alloc(phys.len() as u64, txg, &used).map_err(|e| {
                    Error::no_space(format!("pool '{}': cannot allocate {} bytes: {:?}", self.name, phys.len(), e))
                })?
            };
            used.push(vdev);
            bp.dva[i] = Dva { vdev, asize, offset };
        }
        for (i, dva) in bp.dva.iter().filter(|d| !d.is_empty()).enumerate() {
            let leaf = &self.vdevs[dva.vdev as usize].leaf;
            leaf.write(IoClass::AsyncWrite, dva.offset, phys.clone(), group, if i == 0 { retire } else { 0 });
        }
        if let Some(d) = cache_as {
            self.cache.insert(key_of(&bp), d);
        }
        Ok(bp)
    }

    /// Frees every copy of `bp` (deferred two txgs by the allocator).
    pub fn free_block(&self, bp: &BlockPtr, txg: u64) -> Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        self.cache.remove(&key_of(bp));
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
        let size = self.size_bytes.load(Ordering::Relaxed);
        let free = self.free_bytes.load(Ordering::Relaxed);
        let slop = (size / 32).max(4 << 20);
        let need = bytes + self.txg.dirty_total() + slop;
        if free < need {
            return Err(Error::no_space(format!(
                "pool '{}' is out of space ({} bytes free, {} reserved)",
                self.name, free, slop
            )));
        }
        Ok(())
    }

    /// Refreshes the space figures writers check (after each sync): computing
    /// them walks the allocator, too slow for every write.
    pub fn refresh_space(&self) {
        let s = self.alloc.lock().space();
        self.size_bytes.store(s.total.size, Ordering::Relaxed);
        self.free_bytes.store(s.total.free, Ordering::Relaxed);
    }

    pub fn check_writable(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::new(ErrorKind::Invalid, format!("pool '{}' is open read-only", self.name)));
        }
        Ok(())
    }
}
