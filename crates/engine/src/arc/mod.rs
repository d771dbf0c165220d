//! The block cache: decompressed blocks kept in memory, keyed by address.
//!
//! This is the placeholder for the ARC (issue 4 replaces it with MRU/MFU
//! lists, ghost lists and an L2ARC). It is a plain LRU bounded by bytes,
//! keyed by (vdev, offset, birth txg) of a block's first copy — a block's
//! address and birth identify its content for as long as it is allocated,
//! because blocks are never overwritten in place. Metadata blocks are inserted
//! when written as well as when read, so the block tree stays warm across
//! syncs. Sharded by key so concurrent readers rarely meet on one lock.
//!
//! Invariants: each shard's byte count equals the sum of its entries' sizes
//! and stays within its share of the limit after every insert.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::io::block::BlockData;

const SHARDS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub vdev: u32,
    pub offset: u64,
    pub birth: u64,
}

struct Shard {
    map: HashMap<BlockKey, (Arc<BlockData>, u64)>,
    lru: BTreeMap<u64, BlockKey>,
    bytes: u64,
    tick: u64,
}

#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub metadata_hits: AtomicU64,
    pub metadata_misses: AtomicU64,
}

pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    limit_bytes: AtomicU64,
    pub stats: CacheStats,
}

impl BlockCache {
    pub fn new(limit_bytes: u64) -> Self {
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(Shard { map: HashMap::new(), lru: BTreeMap::new(), bytes: 0, tick: 0 }))
            .collect();
        BlockCache { shards, limit_bytes: AtomicU64::new(limit_bytes), stats: CacheStats::default() }
    }

    pub fn set_limit(&self, bytes: u64) {
        self.limit_bytes.store(bytes, Ordering::Relaxed);
    }

    fn shard(&self, k: &BlockKey) -> &Mutex<Shard> {
        let h = (k.offset >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k.vdev as u64;
        &self.shards[(h >> 59) as usize % SHARDS]
    }

    pub fn get(&self, k: &BlockKey, metadata: bool) -> Option<Arc<BlockData>> {
        let mut s = self.shard(k).lock();
        s.tick += 1;
        let tick = s.tick;
        let hit = match s.map.get_mut(k) {
            Some((v, t)) => {
                let old = *t;
                *t = tick;
                Some((v.clone(), old))
            }
            None => None,
        };
        let (hits, misses) = if metadata {
            (&self.stats.metadata_hits, &self.stats.metadata_misses)
        } else {
            (&self.stats.hits, &self.stats.misses)
        };
        match hit {
            Some((v, old)) => {
                s.lru.remove(&old);
                s.lru.insert(tick, *k);
                hits.fetch_add(1, Ordering::Relaxed);
                Some(v)
            }
            None => {
                misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    pub fn insert(&self, k: BlockKey, v: Arc<BlockData>) {
        let limit = self.limit_bytes.load(Ordering::Relaxed) / SHARDS as u64;
        let size = v.len() as u64;
        if size > limit {
            return;
        }
        let mut s = self.shard(&k).lock();
        s.tick += 1;
        let tick = s.tick;
        if let Some((old, t)) = s.map.insert(k, (v, tick)) {
            s.bytes -= old.len() as u64;
            s.lru.remove(&t);
        }
        s.lru.insert(tick, k);
        s.bytes += size;
        while s.bytes > limit {
            let Some((_, victim)) = s.lru.pop_first() else { break };
            if let Some((old, _)) = s.map.remove(&victim) {
                s.bytes -= old.len() as u64;
            }
        }
    }

    /// True when the block is cached (no statistics, no LRU update).
    pub fn contains(&self, k: &BlockKey) -> bool {
        self.shard(k).lock().map.contains_key(k)
    }

    /// Forgets a block (its space was freed and may be reused).
    pub fn remove(&self, k: &BlockKey) {
        let mut s = self.shard(k).lock();
        if let Some((old, t)) = s.map.remove(k) {
            s.bytes -= old.len() as u64;
            s.lru.remove(&t);
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_bounded() {
        let c = BlockCache::new(16 * 8192);
        for i in 0..1000u64 {
            c.insert(BlockKey { vdev: 0, offset: i * 4096, birth: 1 }, Arc::new(BlockData::zeroed(4096)));
        }
        assert!(c.size_bytes() <= 16 * 8192);
        let k = BlockKey { vdev: 0, offset: 999 * 4096, birth: 1 };
        assert!(c.get(&k, false).is_some());
        c.remove(&k);
        assert!(c.get(&k, false).is_none());
        assert!(c.stats.hits.load(Ordering::Relaxed) >= 1);
    }
}
