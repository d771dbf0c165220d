//! What the ARC holds of a block: its bytes as they lie on disk (OpenZFS's
//! compressed ARC, `b_pabd`). A block stored compressed is held compressed
//! and decompressed into a fresh buffer on every hit; a block stored as is
//! is held as its logical content, shared with the readers.
//!
//! Compressed metadata is read again and again (every random read of a file
//! looks its pointer up in an indirect block), so the ARC also keeps a
//! bounded set of decompressed copies of it ([`Decompressed`], the role of
//! OpenZFS's dbuf metadata cache). Their bytes are the ARC's *overhead*:
//! counted in its size, evicted least recently used first when they exceed
//! `tarn_arc_meta_decompressed_percent` of the target (default a quarter:
//! see `DEFAULT_COPIES_PCT`), and dropped with their block. Data gets no such copies: file data that is read again is
//! served by the kernel's page cache above the FUSE mount.
//!
//! Invariants (checked by `Decompressed::check` from the ARC's
//! `check_invariants`): the byte count equals the sum of the copies' sizes;
//! the LRU order and the map hold the same keys; every copy belongs to a
//! live, compressed metadata block of the ARC (checked by the caller).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_ondisk::bp::BlockPtr;

use super::BlockKey;
use crate::error::Result;
use crate::io::block::{self, BlockData};
use crate::sys::buf::AlignedBuf;

/// A block's bytes in the ARC.
#[derive(Clone)]
pub enum Held {
    /// Stored as is on disk: the logical content, shared with readers.
    AsIs(Arc<BlockData>),
    /// Stored compressed: the physical payload (psize bytes).
    Compressed(Arc<[u8]>),
}

impl Held {
    /// Verifies `raw` (read for `bp` from a device or a cache device) and
    /// returns the block's logical content and what the ARC keeps of it.
    pub fn read(bp: &BlockPtr, raw: AlignedBuf) -> Result<(Arc<BlockData>, Held)> {
        block::verify(bp, &raw)?;
        Self::read_verified(bp, raw)
    }

    /// As `read`, for bytes already checked against the block's checksum
    /// (a vdev's `read_checked`).
    pub fn read_verified(bp: &BlockPtr, raw: AlignedBuf) -> Result<(Arc<BlockData>, Held)> {
        if block::stored_as_is(bp) {
            let d = Arc::new(BlockData::new(raw, bp.psize as usize));
            return Ok((d.clone(), Held::AsIs(d)));
        }
        // The payload is copied out of the sector-padded read buffer: the
        // ARC then holds psize bytes, not whole sectors.
        let payload: Arc<[u8]> = Arc::from(&raw[..bp.psize as usize]);
        let d = block::decompress(bp, &payload)?;
        Ok((Arc::new(d), Held::Compressed(payload)))
    }

    /// What the ARC keeps of a block just written: `phys` is what went to
    /// disk (at least psize bytes), `logical` its content.
    pub fn written(bp: &BlockPtr, phys: &[u8], logical: Arc<BlockData>) -> Held {
        if block::stored_as_is(bp) {
            Held::AsIs(logical)
        } else {
            Held::Compressed(Arc::from(&phys[..bp.psize as usize]))
        }
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> u64 {
        match self {
            Held::AsIs(d) => d.len() as u64,
            Held::Compressed(p) => p.len() as u64,
        }
    }

    pub fn is_compressed(&self) -> bool {
        matches!(self, Held::Compressed(_))
    }

    /// The block's physical payload, as on disk, if `bp` describes these
    /// bytes (None for a block cached without its pointer's form).
    pub fn physical(&self, bp: &BlockPtr) -> Option<&[u8]> {
        let p: &[u8] = match self {
            Held::AsIs(d) if block::stored_as_is(bp) => d,
            Held::Compressed(p) if !block::stored_as_is(bp) => p,
            _ => return None,
        };
        (p.len() == bp.psize as usize).then_some(p)
    }

    /// The logical content: shared, or decompressed into a new buffer.
    pub fn logical(&self, bp: Option<&BlockPtr>) -> Result<Arc<BlockData>> {
        match (self, bp) {
            (Held::AsIs(d), _) => Ok(d.clone()),
            (Held::Compressed(p), Some(bp)) => Ok(Arc::new(block::decompress(bp, p)?)),
            (Held::Compressed(_), None) => Err(crate::error::Error::corrupt("compressed ARC block without its pointer")),
        }
    }
}

/// Decompressed copies of compressed metadata blocks, least recently used
/// first out, under a byte budget set by the caller.
#[derive(Default)]
pub struct Decompressed {
    inner: Mutex<Lru>,
    /// A copy of `Lru::bytes`, read without the lock (eviction targets).
    bytes: AtomicU64,
}

#[derive(Default)]
struct Lru {
    map: HashMap<BlockKey, (Arc<BlockData>, u64)>,
    order: BTreeMap<u64, BlockKey>,
    bytes: u64,
    tick: u64,
}

impl Lru {
    fn remove(&mut self, k: &BlockKey) {
        if let Some((d, t)) = self.map.remove(k) {
            self.order.remove(&t);
            self.bytes -= d.len() as u64;
        }
    }

    fn trim(&mut self, max_bytes: u64) {
        while self.bytes > max_bytes {
            let Some((_, k)) = self.order.pop_first() else { break };
            if let Some((d, _)) = self.map.remove(&k) {
                self.bytes -= d.len() as u64;
            }
        }
    }
}

impl Decompressed {
    /// The copy of `k`, if kept (it becomes the most recently used).
    pub fn get(&self, k: &BlockKey) -> Option<Arc<BlockData>> {
        let mut l = self.inner.lock();
        l.tick += 1;
        let tick = l.tick;
        let (d, old) = l.map.get_mut(k).map(|(d, t)| (d.clone(), std::mem::replace(t, tick)))?;
        l.order.remove(&old);
        l.order.insert(tick, *k);
        Some(d)
    }

    /// Keeps a copy of `k`, then evicts the least recently used copies down
    /// to `max_bytes`. A copy larger than the budget is not kept.
    pub fn put(&self, k: BlockKey, d: Arc<BlockData>, max_bytes: u64) {
        if d.len() as u64 > max_bytes {
            return;
        }
        let mut l = self.inner.lock();
        l.remove(&k);
        l.tick += 1;
        let tick = l.tick;
        l.bytes += d.len() as u64;
        l.order.insert(tick, k);
        l.map.insert(k, (d, tick));
        l.trim(max_bytes);
        self.bytes.store(l.bytes, Ordering::Relaxed);
    }

    pub fn remove(&self, k: &BlockKey) {
        let mut l = self.inner.lock();
        l.remove(k);
        self.bytes.store(l.bytes, Ordering::Relaxed);
    }

    pub fn trim(&self, max_bytes: u64) {
        let mut l = self.inner.lock();
        l.trim(max_bytes);
        self.bytes.store(l.bytes, Ordering::Relaxed);
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn contains(&self, k: &BlockKey) -> bool {
        self.inner.lock().map.contains_key(k)
    }

    pub fn keys(&self) -> Vec<BlockKey> {
        self.inner.lock().map.keys().copied().collect()
    }

    /// The invariants of the module comment that need no ARC lock.
    pub fn check(&self) -> std::result::Result<(), String> {
        let l = self.inner.lock();
        let sum: u64 = l.map.values().map(|(d, _)| d.len() as u64).sum();
        if sum != l.bytes || l.bytes != self.bytes() {
            return Err(format!("decompressed copies hold {} bytes, counted {} and {}", sum, l.bytes, self.bytes()));
        }
        if l.order.len() != l.map.len() || l.order.iter().any(|(t, k)| l.map.get(k).map(|e| e.1) != Some(*t)) {
            return Err("decompressed copies: the LRU order and the map disagree".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> BlockKey {
        BlockKey { pool: 1, vdev: 0, offset: i << 12, birth: 1 }
    }

    #[test]
    fn copies_stay_within_budget_least_recent_out() {
        let c = Decompressed::default();
        for i in 0..4 {
            c.put(key(i), Arc::new(BlockData::zeroed(4096)), 3 * 4096);
        }
        assert_eq!(c.bytes(), 3 * 4096);
        assert!(!c.contains(&key(0)), "the oldest copy went first");
        assert!(c.get(&key(1)).is_some());
        c.put(key(9), Arc::new(BlockData::zeroed(4096)), 3 * 4096);
        assert!(c.contains(&key(1)), "a copy just used stays");
        assert!(!c.contains(&key(2)));
        c.put(key(10), Arc::new(BlockData::zeroed(8192)), 4096);
        assert!(!c.contains(&key(10)), "larger than the budget: not kept");
        c.trim(0);
        assert_eq!(c.bytes(), 0);
        c.check().unwrap();
    }
}
