//! One ARC per process, and each pool's handle on it.
//!
//! OpenZFS has one ARC for every pool of the host: one target, one
//! `zfs_arc_max`, one set of arcstats, one reclaim thread. tarn does the
//! same per process ([`shared`]): every pool the daemon imports (and every
//! pool `tarn bench` or `inspect` opens) caches in it, so two pools cannot
//! take twice `zfs_arc_max`, and a busy pool may use the memory an idle one
//! does not. The process ARC is made at first use with the default limits
//! and starts the one host sampler (`host.rs`); pools apply their tunables
//! to it when they open and when one changes — in the daemon every pool has
//! the daemon's tunables, so they agree. A caller may give a pool a cache
//! of its own instead (`OpenOptions::arc`): tests that measure one pool's
//! cache do.
//!
//! A pool reaches the ARC through a [`PoolCache`]: its number in the ARC's
//! keys (`BlockKey::pool`), given out once per open and never reused, so the
//! blocks of two pools — or of one pool closed and opened again, or opened
//! twice read-only — are never confused, whatever their addresses. When the
//! pool closes (export, or its last handle dropped), its blocks and ghosts
//! leave the ARC (OpenZFS's `arc_flush` of the spa at export), and blocks
//! it would insert afterwards are not kept.
//!
//! Counters are the ARC's: a hit of one pool and a hit of another are both
//! hits of the one ARC, as arcstats counts them. Cache devices stay the
//! pool's (`l2.rs`); the feed takes only its pool's blocks from the ARC.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use tarn_ondisk::bp::BlockPtr;

use super::{ArcSizes, ArcStats, BlockCache, BlockKey, Held};
use crate::error::{Error, Result};
use crate::io::block::BlockData;

/// How often the process ARC's sampler looks at the host's memory.
pub const HOST_SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

static SHARED: OnceLock<Arc<BlockCache>> = OnceLock::new();

/// The process's ARC. Made at first use with the default limits for the
/// host's memory (a quarter of it or of the cgroup's limit; see
/// `default_arc_max`), with its host sampler running.
pub fn shared() -> Arc<BlockCache> {
    SHARED
        .get_or_init(|| {
            let t = crate::tunables::Tunables::default();
            let c = Arc::new(BlockCache::new(t.zfs_arc_max, t.zfs_arc_min));
            c.apply_tunables(&t);
            c.start_host_sampler(HOST_SAMPLE_PERIOD);
            c
        })
        .clone()
}

/// Pool numbers handed out so far (0 is never given: unit tests and
/// per-pool maps use it).
static NEXT_POOL: AtomicU32 = AtomicU32::new(1);

/// A pool's handle on the ARC it caches in: builds the pool's keys and
/// drops the pool's blocks when it closes.
pub struct PoolCache {
    arc: Arc<BlockCache>,
    pool: u32,
    /// Set at close: nothing more of this pool enters the ARC.
    detached: AtomicBool,
}

impl PoolCache {
    /// Attaches a new pool to `arc`, under a number no other pool of this
    /// process had.
    pub fn attach(arc: Arc<BlockCache>) -> Result<PoolCache> {
        let pool = NEXT_POOL
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .map_err(|_| Error::invalid("the ARC has numbered 2^32 pool opens in this process and has no number left; restart the daemon"))?;
        assert!(pool != 0, "pool number 0 is never given out");
        Ok(PoolCache { arc, pool, detached: AtomicBool::new(false) })
    }

    /// The ARC's key of the block `bp` names in this pool.
    pub fn key(&self, bp: &BlockPtr) -> BlockKey {
        BlockKey { pool: self.pool, ..BlockKey::of(bp) }
    }

    /// The pool's number in the ARC's keys.
    pub fn pool(&self) -> u32 {
        self.pool
    }

    /// The ARC itself (shared with the process's other pools).
    pub fn arc(&self) -> &Arc<BlockCache> {
        &self.arc
    }

    /// A demand lookup of the block `bp` names (see `BlockCache::get`).
    pub fn get(&self, bp: &BlockPtr, meta: bool) -> Option<Arc<BlockData>> {
        self.arc.get(&self.key(bp), meta)
    }

    /// Keeps the block `bp` names (see `BlockCache::insert_block`), unless
    /// the pool has closed.
    pub fn insert_block(&self, bp: &BlockPtr, held: Held, logical: Option<&Arc<BlockData>>, prefetch: bool, l2: bool) {
        if self.detached.load(Ordering::Acquire) {
            return;
        }
        self.arc.insert_block(self.pool, bp, held, logical, prefetch, l2);
    }

    /// True when the block `bp` names is cached (no statistics).
    pub fn contains(&self, bp: &BlockPtr) -> bool {
        self.arc.contains(&self.key(bp))
    }

    /// Forgets the block `bp` names (freed: its space may be reused).
    pub fn remove(&self, bp: &BlockPtr) {
        self.arc.remove(&self.key(bp));
    }

    /// This pool's blocks at the ARC's eviction end, for its cache devices.
    pub fn eviction_candidates(&self, max_bytes: u64, noprefetch: bool) -> Vec<(BlockPtr, Held)> {
        self.arc.eviction_candidates(self.pool, max_bytes, noprefetch)
    }

    /// The ARC's sizes and targets (all pools').
    pub fn sizes(&self) -> ArcSizes {
        self.arc.sizes()
    }

    /// The ARC's counters (all pools').
    pub fn stats(&self) -> &ArcStats {
        &self.arc.stats
    }

    /// Drops the pool's blocks, live and ghost, and keeps out any it would
    /// insert from now on (export, close). Idempotent.
    pub fn detach(&self) {
        self.detached.store(true, Ordering::Release);
        self.arc.drop_pool(self.pool);
    }
}

impl Drop for PoolCache {
    /// A pool dropped without closing, or a reader that inserted a block
    /// between `detach`'s flag and its sweep: nothing of it stays.
    fn drop(&mut self) {
        self.detach();
    }
}
