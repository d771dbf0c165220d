//! The ARC: the adaptive replacement cache of verified blocks, held as they
//! lie on disk (compressed where they were written compressed), in the
//! design of OpenZFS 2.2+ (arc.c).
//!
//! There is one ARC per process (`shared.rs`), as OpenZFS has one per host:
//! every pool the process opens caches in it, through a `PoolCache` that
//! numbers the pool in the ARC's keys and drops its blocks when it closes.
//!
//! A block is found by (pool, vdev, offset, birth txg) of its first copy: a
//! block's address and birth name its content for as long as it is
//! allocated, because blocks are never overwritten in place.
//!
//! ## States
//! Each cached block is *data* or *metadata* (an indirect block, or a block
//! of a metadata object type) and lives on one of four lists per kind:
//!
//! ```text
//!   miss ──insert──▶ MRU ──hit after ≥ zfs_arc_min_mfu_ms──▶ MFU ◀─┐
//!                     │                                      │    │ hit
//!                  evict                                  evict ──┘
//!                     ▼                                      ▼
//!                 MRU ghost ───read again (ghost hit)──▶ MFU (revived)
//!                                   MFU ghost ──read again──┘
//! ```
//! Ghosts remember only the key and size of what was evicted. A ghost hit
//! says "that list was too small" and steers the targets.
//!
//! ## Targets and adaptation
//! `c` is the target size, between `zfs_arc_min` and `zfs_arc_max`. Three
//! fractions divide it: the metadata share of `c` (starts at 1/4), the MRU
//! share of metadata and the MRU share of data (each start at 1/2). Before
//! each eviction pass the fractions move toward the side whose ghost lists
//! were hit since the last pass, in proportion to the ghost-hit bytes over
//! the ghost-list bytes, damped near 0 and 1 so no list is starved. Data
//! ghost hits weigh `100 / zfs_arc_meta_balance` as much as metadata ghost
//! hits (default 500: one fifth), so metadata — whose misses cost several
//! reads — is favoured.
//!
//! Eviction walks MRU-metadata, MFU-metadata, MRU-data, MFU-data, each down
//! to its target, then anything still above `c` from the same order. Each
//! ghost list is kept below half of `c` (OpenZFS caps each at half of the
//! live states; the classic ARC bound, live + ghost ≤ 2c, follows).
//!
//! ## Sizing and the host
//! `c` starts at `zfs_arc_max`. The process ARC's one sampler thread
//! (`adapt_to_host`, `host.rs`, once a second) reads the host's memory —
//! MemAvailable, the memory cgroup's limit and usage with its clean page
//! cache counted as room, PSI `some avg10` — and when memory is short
//! takes the shortfall from what the ARC holds, once (never below
//! `zfs_arc_min`), evicts at once and returns the memory to the host; with
//! room above a band over the reserve it grows `c` back by at most 1/32 of
//! the maximum per sample (see `host.rs` for the curve). Prefetched blocks
//! enter MRU marked as prefetch; their first demand hit counts as a
//! prefetch hit and does not promote them.
//!
//! ## Concurrency
//! The cache is split into `SHARDS` independent shards by key hash, each an
//! ARC of its own with 1/SHARDS of every target (of `c` less the
//! decompressed copies); the fractions, the counters and the decompressed
//! copies are shared. A lookup takes one shard's lock, and for compressed
//! metadata the copies' lock under it (never the other way round);
//! decompression happens after both are released.
//!
//! ## Compressed blocks
//! A block is held in its on-disk form (`held::Held`): a block written
//! compressed stays compressed in memory and is decompressed on every hit
//! into a buffer the reader owns, so the ARC holds as many blocks as the
//! pool's compression ratio allows. Sizes count the bytes held: a list's
//! size, the data and metadata sizes and `c` itself are in compressed bytes
//! (arcstats' `compressed_size`), and `uncompressed_size` is what the same
//! blocks take decompressed. Compressed *metadata* also gets a bounded set
//! of decompressed copies (`held::Decompressed`), since it is looked up on
//! every read; their bytes are the `overhead_size`, part of the ARC's size
//! and of what `c` bounds. The L2ARC writes the held bytes unchanged.
//!
//! Invariants (checked by `check_invariants`, run in tests):
//! - each list's byte count equals the sum of its headers' sizes, and each
//!   shard's logical byte count the sum of its live headers' logical sizes;
//! - a ghost header holds no data and a live one does;
//! - every header in the map is on exactly the list its state names;
//! - a held block's size is its header's size, and a compressed one has its
//!   block pointer (needed to decompress it);
//! - every decompressed copy belongs to a live compressed metadata block.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use tarn_ondisk::bp::BlockPtr;

use crate::io::block::BlockData;
use held::Decompressed;

mod held;
mod host;
pub mod l2;
mod shared;
pub use held::Held;
pub use shared::{shared, PoolCache, HOST_SAMPLE_PERIOD};
pub use host::{default_arc_max, default_arc_min, host_memory, host_samples, HostMemory};
pub use l2::{L2Arc, L2Params};

const SHARDS: usize = 16;
/// Default share of `c` for decompressed metadata copies, in percent: a
/// random read looks its block pointer up in an indirect block, and with
/// fewer copies than the hot indirect blocks each such read decompresses
/// 128 KiB (docs/benchmarks.md, "Compressed ARC": 3 % ran the ARC-sizing
/// experiment at a third of the reads/s of 25 %). A ceiling, not a
/// reservation: copies exist only for metadata in use.
pub const DEFAULT_COPIES_PCT: u64 = 25;
/// Fractions are fixed point with this many bits.
const FRAC_ONE: u64 = 1 << 32;

/// A cached block's name: the pool it belongs to (its number in the ARC,
/// see `PoolCache`), its first copy's address and the txg that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub pool: u32,
    pub vdev: u32,
    pub offset: u64,
    pub birth: u64,
}

impl BlockKey {
    /// The key of the block `bp` names within its pool (pool number 0):
    /// its first copy's address and the txg that wrote it there (the
    /// physical birth), so that a block-cloned pointer, born again in a
    /// later txg, finds the same cached block as its source. For maps that
    /// belong to one pool (the L2ARC's index, reads in flight); the ARC is
    /// shared, and its keys come from `PoolCache::key`.
    pub fn of(bp: &BlockPtr) -> BlockKey {
        BlockKey { pool: 0, vdev: bp.dva[0].vdev, offset: bp.dva[0].offset, birth: bp.physical_birth() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Mru = 0,
    Mfu = 1,
    MruGhost = 2,
    MfuGhost = 3,
}

impl State {
    fn is_ghost(self) -> bool {
        matches!(self, State::MruGhost | State::MfuGhost)
    }
}

/// The list index of (state, metadata?).
const fn list_of(state: State, meta: bool) -> usize {
    state as usize * 2 + meta as usize
}

/// The live lists in eviction order: MRU-metadata, MFU-metadata, MRU-data,
/// MFU-data.
const EVICTION_ORDER: [usize; 4] = [list_of(State::Mru, true), list_of(State::Mfu, true), list_of(State::Mru, false), list_of(State::Mfu, false)];

struct Hdr {
    state: State,
    meta: bool,
    prefetch: bool,
    /// Bytes held (for a ghost: held before it was evicted).
    size: u64,
    /// The block's logical size.
    lsize: u64,
    data: Option<Held>,
    /// The block's pointer: to decompress it and for the L2ARC feed (None
    /// only for blocks cached uncompressed by key alone).
    bp: Option<BlockPtr>,
    /// The L2ARC may take it (the dataset's `secondarycache` allows).
    l2: bool,
    tick: u64,
    last_access: Instant,
}

#[derive(Default)]
struct List {
    order: BTreeMap<u64, BlockKey>,
    bytes: u64,
}

#[derive(Default)]
struct Shard {
    map: HashMap<BlockKey, Hdr>,
    lists: [List; 8],
    /// Logical bytes of the live blocks (arcstats' uncompressed_size).
    logical_bytes: u64,
    tick: u64,
}

impl Shard {
    fn unlink(&mut self, k: &BlockKey) -> Option<Hdr> {
        let h = self.map.remove(k)?;
        let l = &mut self.lists[list_of(h.state, h.meta)];
        l.order.remove(&h.tick);
        l.bytes -= h.size;
        if !h.state.is_ghost() {
            self.logical_bytes -= h.lsize;
        }
        Some(h)
    }

    fn link(&mut self, k: BlockKey, mut h: Hdr) {
        self.tick += 1;
        h.tick = self.tick;
        let l = &mut self.lists[list_of(h.state, h.meta)];
        l.order.insert(h.tick, k);
        l.bytes += h.size;
        if !h.state.is_ghost() {
            self.logical_bytes += h.lsize;
        }
        self.map.insert(k, h);
    }

    fn live_bytes(&self) -> u64 {
        self.lists[..4].iter().map(|l| l.bytes).sum()
    }

    /// Moves the least recent block of `list` to its ghost list (or drops a
    /// ghost), and its decompressed copy with it. Returns the bytes freed.
    fn evict_one(&mut self, list: usize, copies: &Decompressed) -> u64 {
        let Some((_, k)) = self.lists[list].order.first_key_value().map(|(t, k)| (*t, *k)) else { return 0 };
        let Some(mut h) = self.unlink(&k) else { return 0 };
        if h.state.is_ghost() {
            return 0;
        }
        if h.data.as_ref().is_some_and(Held::is_compressed) && h.meta {
            copies.remove(&k);
        }
        h.data = None;
        h.state = if h.state == State::Mru { State::MruGhost } else { State::MfuGhost };
        let freed = h.size;
        self.link(k, h);
        freed
    }
}

/// Counters, as arcstats names them.
#[derive(Debug, Default)]
pub struct ArcStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub demand_data_hits: AtomicU64,
    pub demand_data_misses: AtomicU64,
    pub demand_metadata_hits: AtomicU64,
    pub demand_metadata_misses: AtomicU64,
    pub prefetch_data_hits: AtomicU64,
    pub prefetch_data_misses: AtomicU64,
    pub prefetch_metadata_hits: AtomicU64,
    pub prefetch_metadata_misses: AtomicU64,
    pub mru_hits: AtomicU64,
    pub mfu_hits: AtomicU64,
    pub mru_ghost_hits: AtomicU64,
    pub mfu_ghost_hits: AtomicU64,
    pub evicted_bytes: AtomicU64,
    pub memory_throttle_count: AtomicU64,
}

/// A snapshot of sizes and targets, for `arcstat` and tests. Sizes of
/// blocks are the bytes held (compressed where the block is); `size` is
/// `compressed_size` plus `overhead_size`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ArcSizes {
    pub size: u64,
    pub c: u64,
    pub c_min: u64,
    pub c_max: u64,
    pub data_size: u64,
    pub metadata_size: u64,
    pub mru_size: u64,
    pub mfu_size: u64,
    pub mru_ghost_size: u64,
    pub mfu_ghost_size: u64,
    pub mru_metadata: u64,
    pub mfu_metadata: u64,
    pub mru_data: u64,
    pub mfu_data: u64,
    /// The three adaptive fractions, in percent.
    pub meta_pct: f64,
    pub mru_meta_pct: f64,
    pub mru_data_pct: f64,
    pub blocks: u64,
    /// Bytes held for the live blocks, as on disk (arcstats' compressed_size).
    #[serde(default)]
    pub compressed_size: u64,
    /// What the same blocks take decompressed (uncompressed_size).
    #[serde(default)]
    pub uncompressed_size: u64,
    /// Decompressed copies of compressed metadata (overhead_size).
    #[serde(default)]
    pub overhead_size: u64,
}

/// Ghost-hit bytes since the last adaptation, per list (ghost lists only).
#[derive(Default)]
struct GhostHits {
    mru_meta: AtomicU64,
    mfu_meta: AtomicU64,
    mru_data: AtomicU64,
    mfu_data: AtomicU64,
}

pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    c: AtomicU64,
    c_min: AtomicU64,
    c_max: AtomicU64,
    /// Fixed-point fractions (of FRAC_ONE): metadata share of c, MRU share
    /// of metadata, MRU share of data.
    meta_frac: AtomicU64,
    pm_frac: AtomicU64,
    pd_frac: AtomicU64,
    meta_balance: AtomicU64,
    min_mfu_ms: AtomicU64,
    ghost_hits: GhostHits,
    adapt_lock: Mutex<()>,
    /// Decompressed copies of compressed metadata, and their share of `c`
    /// in percent (`tarn_arc_meta_decompressed_percent`).
    copies: Decompressed,
    copies_pct: AtomicU64,
    /// What the host sampler remembers between samples (`host.rs`).
    sizing: Mutex<host::Sizing>,
    pub stats: ArcStats,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let z = self.sizes();
        f.debug_struct("BlockCache").field("size", &z.size).field("c", &z.c).field("c_min", &z.c_min).field("c_max", &z.c_max).finish()
    }
}

impl BlockCache {
    /// A cache with target and maximum `max` bytes and minimum `min`.
    pub fn new(max: u64, min: u64) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        let min = min.min(max);
        BlockCache {
            shards,
            c: AtomicU64::new(max),
            c_min: AtomicU64::new(min),
            c_max: AtomicU64::new(max),
            meta_frac: AtomicU64::new(FRAC_ONE / 4),
            pm_frac: AtomicU64::new(FRAC_ONE / 2),
            pd_frac: AtomicU64::new(FRAC_ONE / 2),
            meta_balance: AtomicU64::new(500),
            min_mfu_ms: AtomicU64::new(62),
            ghost_hits: GhostHits::default(),
            adapt_lock: Mutex::new(()),
            copies: Decompressed::default(),
            copies_pct: AtomicU64::new(DEFAULT_COPIES_PCT),
            sizing: Mutex::new(host::Sizing::default()),
            stats: ArcStats::default(),
        }
    }

    /// Sets `zfs_arc_max` / `zfs_arc_min` on the live cache; a lower maximum
    /// evicts at once. A target at its maximum follows a raised maximum
    /// (the process ARC is made with the defaults, then the daemon's
    /// tunables apply); one the host has lowered stays, to grow as the
    /// host allows.
    pub fn set_limits(&self, max: u64, min: u64) {
        let min = min.min(max);
        let old_max = self.c_max.swap(max, Ordering::Relaxed);
        self.c_min.store(min, Ordering::Relaxed);
        let c = self.c.load(Ordering::Relaxed);
        let c = if c >= old_max { max } else { c.clamp(min, max) };
        self.c.store(c, Ordering::Relaxed);
        self.evict_all_shards();
    }

    /// Applies the ARC's tunables (at open, and when one changes live).
    pub fn apply_tunables(&self, t: &crate::tunables::Tunables) {
        self.set_meta_balance(t.zfs_arc_meta_balance);
        self.set_meta_decompressed_percent(t.tarn_arc_meta_decompressed_percent);
        self.set_limits(t.zfs_arc_max, t.zfs_arc_min);
    }

    pub fn set_meta_balance(&self, balance: u64) {
        self.meta_balance.store(balance.max(1), Ordering::Relaxed);
    }

    pub fn set_min_mfu_ms(&self, ms: u64) {
        self.min_mfu_ms.store(ms, Ordering::Relaxed);
    }

    /// Sets the share of `c` (percent) decompressed metadata copies may take.
    pub fn set_meta_decompressed_percent(&self, pct: u64) {
        self.copies_pct.store(pct.min(100), Ordering::Relaxed);
        self.copies.trim(self.copies_max());
    }

    fn copies_max(&self) -> u64 {
        self.c.load(Ordering::Relaxed) / 100 * self.copies_pct.load(Ordering::Relaxed)
    }

    /// The target of each shard's held bytes: `c` less the decompressed
    /// copies, split evenly.
    fn shard_target(&self) -> u64 {
        self.c.load(Ordering::Relaxed).saturating_sub(self.copies.bytes()) / SHARDS as u64
    }

    fn shard_of(&self, k: &BlockKey) -> &Mutex<Shard> {
        let h = (k.offset >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k.vdev as u64 | (k.pool as u64) << 32).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        &self.shards[(h >> 58) as usize % SHARDS]
    }

    fn count(&self, meta: bool, prefetch: bool, hit: bool) {
        let s = &self.stats;
        let c = match (prefetch, meta, hit) {
            (false, false, true) => &s.demand_data_hits,
            (false, false, false) => &s.demand_data_misses,
            (false, true, true) => &s.demand_metadata_hits,
            (false, true, false) => &s.demand_metadata_misses,
            (true, false, true) => &s.prefetch_data_hits,
            (true, false, false) => &s.prefetch_data_misses,
            (true, true, true) => &s.prefetch_metadata_hits,
            (true, true, false) => &s.prefetch_metadata_misses,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if hit { &s.hits } else { &s.misses }.fetch_add(1, Ordering::Relaxed);
    }

    /// A demand lookup: counts a hit or miss and updates the block's state.
    /// A compressed block is decompressed into a new buffer (outside the
    /// shard's lock), unless it is metadata with a decompressed copy kept.
    pub fn get(&self, k: &BlockKey, meta: bool) -> Option<Arc<BlockData>> {
        let now = Instant::now();
        let min_mfu = self.min_mfu_ms.load(Ordering::Relaxed) as u128;
        let mut s = self.shard_of(k).lock();
        let (state, prefetch, age_ms) = match s.map.get(k) {
            Some(h) if !h.state.is_ghost() => (h.state, h.prefetch, now.duration_since(h.last_access).as_millis()),
            _ => {
                drop(s);
                self.count(meta, false, false);
                return None;
            }
        };
        let mut h = s.unlink(k).expect("header present");
        let (held, bp, copyable) = (h.data.clone().expect("a live header holds data"), h.bp, h.meta);
        if prefetch {
            // The first demand read of a prefetched block: counted as a
            // prefetch hit, and the block stays most-recently-used.
            h.prefetch = false;
        } else if state == State::Mru && age_ms >= min_mfu {
            h.state = State::Mfu;
        }
        h.last_access = now;
        let on_mfu = state == State::Mfu;
        s.link(*k, h);
        let copyable = copyable && held.is_compressed();
        let copy = if copyable { self.copies.get(k) } else { None };
        drop(s);
        let data = match copy {
            Some(d) => d,
            None => match held.logical(bp.as_ref()) {
                Ok(d) => {
                    if copyable {
                        self.keep_copy(k, &d);
                    }
                    d
                }
                Err(_) => {
                    // Verified when it entered, so only damaged memory gets
                    // here: drop the block and let the caller read it again.
                    self.remove(k);
                    self.count(meta, false, false);
                    return None;
                }
            },
        };
        self.count(meta, prefetch, true);
        if on_mfu { &self.stats.mfu_hits } else { &self.stats.mru_hits }.fetch_add(1, Ordering::Relaxed);
        Some(data)
    }

    /// Keeps `d` as the decompressed copy of `k`, if `k` is still a live
    /// compressed metadata block.
    fn keep_copy(&self, k: &BlockKey, d: &Arc<BlockData>) {
        let s = self.shard_of(k).lock();
        if s.map.get(k).is_some_and(|h| h.meta && h.data.as_ref().is_some_and(Held::is_compressed)) {
            self.copies.put(*k, d.clone(), self.copies_max());
        }
    }

    /// Adds a block by key alone, held as is (tests and callers without a
    /// block pointer). A ghost of it revives into MFU (a demand read) and
    /// steers the targets toward its list.
    pub fn insert(&self, k: BlockKey, v: Arc<BlockData>, meta: bool) {
        let lsize = v.len() as u64;
        self.insert_as(k, Held::AsIs(v), lsize, meta, false, None, true, None)
    }

    /// As `insert`, for a block read ahead: it enters MRU marked as prefetch.
    pub fn insert_prefetch(&self, k: BlockKey, v: Arc<BlockData>, meta: bool) {
        self.count(meta, true, false);
        let lsize = v.len() as u64;
        self.insert_as(k, Held::AsIs(v), lsize, meta, true, None, true, None)
    }

    /// Adds the block `bp` names, held as `held` (see `Held::read` and
    /// `Held::written`). `logical`, its content when the caller has it,
    /// becomes the decompressed copy of compressed metadata; `prefetch`
    /// marks a block read ahead; `l2` says whether the L2ARC may take it
    /// (the dataset's `secondarycache`).
    pub fn insert_block(&self, pool: u32, bp: &BlockPtr, held: Held, logical: Option<&Arc<BlockData>>, prefetch: bool, l2: bool) {
        let meta = bp.otype.is_metadata() || bp.level > 0;
        if prefetch {
            self.count(meta, true, false);
        }
        self.insert_as(BlockKey { pool, ..BlockKey::of(bp) }, held, bp.lsize as u64, meta, prefetch, Some(*bp), l2, logical)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_as(&self, k: BlockKey, held: Held, lsize: u64, meta: bool, prefetch: bool, bp: Option<BlockPtr>, l2: bool, logical: Option<&Arc<BlockData>>) {
        let size = held.bytes();
        if size > self.c.load(Ordering::Relaxed) / SHARDS as u64 {
            return;
        }
        let copy = logical.filter(|_| meta && held.is_compressed());
        let mut s = self.shard_of(&k).lock();
        let mut state = State::Mru;
        if let Some(old) = s.unlink(&k) {
            match old.state {
                State::MruGhost | State::MfuGhost => {
                    let (stat, acc) = match (old.state, old.meta) {
                        (State::MruGhost, true) => (&self.stats.mru_ghost_hits, &self.ghost_hits.mru_meta),
                        (State::MruGhost, false) => (&self.stats.mru_ghost_hits, &self.ghost_hits.mru_data),
                        (_, true) => (&self.stats.mfu_ghost_hits, &self.ghost_hits.mfu_meta),
                        (_, false) => (&self.stats.mfu_ghost_hits, &self.ghost_hits.mfu_data),
                    };
                    stat.fetch_add(1, Ordering::Relaxed);
                    acc.fetch_add(old.size, Ordering::Relaxed);
                    if !prefetch {
                        state = State::Mfu;
                    }
                }
                live => {
                    state = live;
                    if copy.is_none() && old.meta && old.data.as_ref().is_some_and(Held::is_compressed) {
                        // Its copy would outlive the form it was made from.
                        self.copies.remove(&k);
                    }
                }
            }
        }
        s.link(k, Hdr { state, meta, prefetch, size, lsize, data: Some(held), bp, l2, tick: 0, last_access: Instant::now() });
        if let Some(d) = copy {
            // Under the shard's lock: the block cannot be evicted before its
            // copy is registered (eviction drops copies under that lock).
            self.copies.put(k, d.clone(), self.copies_max());
        }
        drop(s);
        self.adapt();
        self.evict_shard(self.shard_of(&k));
    }

    /// Blocks of `pool` at the eviction end of the live lists, up to
    /// `max_bytes`, in the L2ARC's order: MFU metadata, MRU metadata, MFU
    /// data, MRU data (each shard contributing its share). Only blocks with
    /// a pointer; prefetched ones skipped if `noprefetch`. (A pool's cache
    /// devices take only its own blocks, as OpenZFS's feed does.)
    pub fn eviction_candidates(&self, pool: u32, max_bytes: u64, noprefetch: bool) -> Vec<(BlockPtr, Held)> {
        let per_shard = (max_bytes / SHARDS as u64).max(1);
        let mut out = Vec::new();
        for shard in &self.shards {
            let s = shard.lock();
            let mut taken = 0;
            'lists: for list in [list_of(State::Mfu, true), list_of(State::Mru, true), list_of(State::Mfu, false), list_of(State::Mru, false)] {
                for k in s.lists[list].order.values() {
                    if taken >= per_shard {
                        break 'lists;
                    }
                    let Some(h) = s.map.get(k) else { continue };
                    if k.pool != pool || (noprefetch && h.prefetch) || !h.l2 {
                        continue;
                    }
                    if let (Some(bp), Some(d)) = (h.bp, h.data.as_ref()) {
                        taken += h.size;
                        out.push((bp, d.clone()));
                    }
                }
            }
        }
        out
    }

    /// True when the block is cached (no statistics, no state change).
    pub fn contains(&self, k: &BlockKey) -> bool {
        self.shard_of(k).lock().map.get(k).is_some_and(|h| !h.state.is_ghost())
    }

    /// Forgets a block (its space was freed and may be reused).
    pub fn remove(&self, k: &BlockKey) {
        let mut s = self.shard_of(k).lock();
        s.unlink(k);
        self.copies.remove(k);
    }

    /// Forgets every block of `pool`, live or ghost, and their decompressed
    /// copies (the pool is being closed; its number is never used again).
    /// Walks every shard: export is rare, and a pool's blocks are spread
    /// over all of them. Returns the bytes of live blocks dropped.
    pub fn drop_pool(&self, pool: u32) -> u64 {
        let mut dropped = 0;
        for shard in &self.shards {
            let mut s = shard.lock();
            let keys: Vec<BlockKey> = s.map.keys().filter(|k| k.pool == pool).copied().collect();
            for k in keys {
                if let Some(h) = s.unlink(&k) {
                    if !h.state.is_ghost() {
                        dropped += h.size;
                    }
                }
                // Under the shard's lock, as eviction drops copies.
                self.copies.remove(&k);
            }
        }
        dropped
    }

    /// True when the ARC holds anything of `pool`, live or ghost (tests).
    pub fn holds_pool(&self, pool: u32) -> bool {
        self.shards.iter().any(|s| s.lock().map.keys().any(|k| k.pool == pool)) || self.copies.keys().iter().any(|k| k.pool == pool)
    }

    /// Bytes held: the blocks as held plus the decompressed copies.
    pub fn size_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().live_bytes()).sum::<u64>() + self.copies.bytes()
    }

    /// Per-shard targets of the four live lists, from the fractions.
    fn targets(&self) -> [u64; 4] {
        let c = self.shard_target();
        let part = |v: u64, f: &AtomicU64| ((v as u128 * f.load(Ordering::Relaxed) as u128) >> 32) as u64;
        let meta = part(c, &self.meta_frac);
        let data = c - meta;
        let mru_meta = part(meta, &self.pm_frac);
        let mru_data = part(data, &self.pd_frac);
        // Order: MRU-data, MRU-meta, MFU-data, MFU-meta as list_of numbers them.
        [mru_data, mru_meta, data - mru_data, meta - mru_meta]
    }

    fn evict_shard(&self, shard: &Mutex<Shard>) {
        let c = self.shard_target();
        let t = self.targets();
        let mut s = shard.lock();
        let mut freed = 0;
        if s.live_bytes() > c {
            // Eviction order: MRU-metadata, MFU-metadata, MRU-data, MFU-data,
            // each down to its target; then anything, same order.
            for list in EVICTION_ORDER {
                while s.live_bytes() > c && s.lists[list].bytes > t[list] {
                    freed += s.evict_one(list, &self.copies);
                }
            }
            for list in EVICTION_ORDER {
                while s.live_bytes() > c && s.lists[list].bytes > 0 {
                    freed += s.evict_one(list, &self.copies);
                }
            }
        }
        // Ghost lists: each state's ghosts stay below half of c.
        for (g0, g1) in [(list_of(State::MruGhost, false), list_of(State::MruGhost, true)), (list_of(State::MfuGhost, false), list_of(State::MfuGhost, true))] {
            while s.lists[g0].bytes + s.lists[g1].bytes > c / 2 {
                let victim = if s.lists[g0].bytes >= s.lists[g1].bytes { g0 } else { g1 };
                s.evict_one(victim, &self.copies);
            }
        }
        drop(s);
        if freed > 0 {
            self.stats.evicted_bytes.fetch_add(freed, Ordering::Relaxed);
        }
    }

    fn evict_all_shards(&self) {
        self.copies.trim(self.copies_max());
        for s in &self.shards {
            self.evict_shard(s);
        }
    }

    /// Moves the fractions toward the lists whose ghosts were hit.
    fn adapt(&self) {
        let Some(_g) = self.adapt_lock.try_lock() else { return };
        let gh = &self.ghost_hits;
        let take = |a: &AtomicU64| a.swap(0, Ordering::Relaxed);
        let (mrum, mfum, mrud, mfud) = (take(&gh.mru_meta), take(&gh.mfu_meta), take(&gh.mru_data), take(&gh.mfu_data));
        if mrum + mfum + mrud + mfud == 0 {
            return;
        }
        let sz = self.sizes();
        let balance = self.meta_balance.load(Ordering::Relaxed);
        let ghost_total = sz.mru_ghost_size + sz.mfu_ghost_size;
        // Metadata share: metadata ghost hits push it up, data ghost hits
        // (weighted 100/balance) push it down.
        let up = mrum + mfum;
        let down = (mrud + mfud) * 100 / balance;
        adjust(&self.meta_frac, ghost_total, up, down);
        adjust(&self.pm_frac, ghost_total, mrum, mfum);
        adjust(&self.pd_frac, ghost_total, mrud, mfud);
    }

    pub fn sizes(&self) -> ArcSizes {
        let mut z = ArcSizes {
            c: self.c.load(Ordering::Relaxed),
            c_min: self.c_min.load(Ordering::Relaxed),
            c_max: self.c_max.load(Ordering::Relaxed),
            ..Default::default()
        };
        let pct = |f: &AtomicU64| f.load(Ordering::Relaxed) as f64 * 100.0 / FRAC_ONE as f64;
        z.meta_pct = pct(&self.meta_frac);
        z.mru_meta_pct = pct(&self.pm_frac);
        z.mru_data_pct = pct(&self.pd_frac);
        for s in &self.shards {
            let s = s.lock();
            let b = |st: State, m: bool| s.lists[list_of(st, m)].bytes;
            z.mru_data += b(State::Mru, false);
            z.mru_metadata += b(State::Mru, true);
            z.mfu_data += b(State::Mfu, false);
            z.mfu_metadata += b(State::Mfu, true);
            z.mru_ghost_size += b(State::MruGhost, false) + b(State::MruGhost, true);
            z.mfu_ghost_size += b(State::MfuGhost, false) + b(State::MfuGhost, true);
            z.blocks += s.lists[..4].iter().map(|l| l.order.len() as u64).sum::<u64>();
            z.uncompressed_size += s.logical_bytes;
        }
        z.mru_size = z.mru_data + z.mru_metadata;
        z.mfu_size = z.mfu_data + z.mfu_metadata;
        z.data_size = z.mru_data + z.mfu_data;
        z.metadata_size = z.mru_metadata + z.mfu_metadata;
        z.compressed_size = z.data_size + z.metadata_size;
        z.overhead_size = self.copies.bytes();
        z.size = z.compressed_size + z.overhead_size;
        z
    }

    /// Checks the invariants in the module comment.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (i, s) in self.shards.iter().enumerate() {
            let s = s.lock();
            let mut sums = [0u64; 8];
            let mut counts = [0usize; 8];
            let mut logical = 0;
            for (k, h) in &s.map {
                let l = list_of(h.state, h.meta);
                sums[l] += h.size;
                counts[l] += 1;
                if h.state.is_ghost() == h.data.is_some() {
                    return Err(format!("shard {}: {:?} in state {:?} has data: {}", i, k, h.state, h.data.is_some()));
                }
                if let Some(d) = &h.data {
                    logical += h.lsize;
                    if d.bytes() != h.size || (d.is_compressed() && h.bp.is_none()) {
                        return Err(format!("shard {}: {:?} holds {} bytes, its header says {} (pointer known: {})", i, k, d.bytes(), h.size, h.bp.is_some()));
                    }
                }
                if s.lists[l].order.get(&h.tick) != Some(k) {
                    return Err(format!("shard {}: {:?} is not on its list {:?}", i, k, h.state));
                }
            }
            for l in 0..8 {
                if sums[l] != s.lists[l].bytes || counts[l] != s.lists[l].order.len() {
                    return Err(format!("shard {}: list {} holds {} bytes in {} entries, headers say {} in {}", i, l, s.lists[l].bytes, s.lists[l].order.len(), sums[l], counts[l]));
                }
            }
            if logical != s.logical_bytes {
                return Err(format!("shard {}: live blocks are {} bytes logical, counted {}", i, logical, s.logical_bytes));
            }
        }
        self.copies.check()?;
        for k in self.copies.keys() {
            // Shard first, then the copies: the order every path takes.
            let s = self.shard_of(&k).lock();
            let owner = s.map.get(&k).is_some_and(|h| h.meta && h.data.as_ref().is_some_and(Held::is_compressed));
            if self.copies.contains(&k) && !owner {
                return Err(format!("{:?} has a decompressed copy but is no live compressed metadata block", k));
            }
        }
        Ok(())
    }
}

/// Moves a fraction up by `up` and down by `down` ghost-hit bytes, each
/// relative to the ghost lists' size `total`. A step is at most 1/8 of the
/// distance to the bound it moves toward (damping near 0 and 1), and the
/// fraction stays within [1/64, 63/64].
fn adjust(frac: &AtomicU64, total: u64, up: u64, down: u64) {
    if up == down {
        return;
    }
    let f = frac.load(Ordering::Relaxed) as f64 / FRAC_ONE as f64;
    let total = total.max(1) as f64;
    let delta = (up as f64 - down as f64) / total;
    let step = if delta > 0.0 { (delta * (1.0 - f)).min((1.0 - f) / 8.0) } else { (delta * f).max(-f / 8.0) };
    let nf = (f + step).clamp(1.0 / 64.0, 63.0 / 64.0);
    frac.store((nf * FRAC_ONE as f64) as u64, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> BlockKey {
        BlockKey { pool: 1, vdev: 0, offset: i * 4096, birth: 1 }
    }

    fn blk() -> Arc<BlockData> {
        Arc::new(BlockData::zeroed(4096))
    }

    #[test]
    fn a_cloned_pointer_has_its_sources_key() {
        let mut src = BlockPtr::hole(4096, tarn_ondisk::bp::ObjectType::PlainData, 0);
        src.dva[0].vdev = 1;
        src.dva[0].offset = 1 << 20;
        src.birth = 7;
        let clone = BlockPtr { birth: 9, phys_birth: 7, ..src };
        assert_eq!(BlockKey::of(&clone), BlockKey::of(&src));
        let rewritten = BlockPtr { birth: 9, phys_birth: 0, ..src };
        assert_ne!(BlockKey::of(&rewritten), BlockKey::of(&src), "the same address written in another txg is another block");
    }

    #[test]
    fn bounded_and_consistent() {
        let c = BlockCache::new(64 * 4096 * SHARDS as u64, 0);
        for i in 0..10_000u64 {
            c.insert(key(i), blk(), i % 3 == 0);
        }
        assert!(c.size_bytes() <= 64 * 4096 * SHARDS as u64);
        c.check_invariants().unwrap();
        let z = c.sizes();
        assert!(z.mru_ghost_size > 0, "evicted blocks leave ghosts");
        assert!(z.mru_ghost_size <= z.c / 2 + 4096 * SHARDS as u64);
    }

    /// Regression: the process ARC is made with the default maximum and
    /// the daemon's `zfs_arc_max` applied after; the target stayed at the
    /// default and had to grow to the configured maximum a step a second.
    #[test]
    fn a_target_at_its_maximum_follows_a_raised_maximum() {
        let c = BlockCache::new(256 << 20, 32 << 20);
        c.set_limits(768 << 20, 32 << 20);
        assert_eq!(c.sizes().c, 768 << 20);
        c.set_limits(64 << 20, 32 << 20);
        assert_eq!(c.sizes().c, 64 << 20, "a lower maximum lowers the target");
        c.set_limits(64 << 20, 8 << 20);
        c.shrink(1 << 30);
        let lowered = c.sizes().c;
        assert!(lowered < 64 << 20);
        c.set_limits(128 << 20, 8 << 20);
        assert_eq!(c.sizes().c, lowered, "a target the host lowered stays where it is");
    }

    #[test]
    fn second_hit_after_min_time_promotes_to_mfu() {
        let c = BlockCache::new(1 << 30, 0);
        c.set_min_mfu_ms(0);
        c.insert(key(1), blk(), false);
        assert!(c.get(&key(1), false).is_some());
        let z = c.sizes();
        assert_eq!(z.mfu_data, 4096);
        assert_eq!(z.mru_data, 0);
        assert_eq!(c.stats.demand_data_hits.load(Ordering::Relaxed), 1);
        // Within the minimum time a hit stays in MRU.
        c.set_min_mfu_ms(60_000);
        c.insert(key(2), blk(), false);
        c.get(&key(2), false);
        assert_eq!(c.sizes().mru_data, 4096);
        c.remove(&key(1));
        assert!(c.get(&key(1), false).is_none());
        assert_eq!(c.stats.demand_data_misses.load(Ordering::Relaxed), 1);
        c.check_invariants().unwrap();
    }

    #[test]
    fn prefetch_hit_counts_and_stays_mru() {
        let c = BlockCache::new(1 << 30, 0);
        c.set_min_mfu_ms(0);
        c.insert_prefetch(key(5), blk(), false);
        assert!(c.get(&key(5), false).is_some());
        assert_eq!(c.stats.prefetch_data_hits.load(Ordering::Relaxed), 1);
        assert_eq!(c.sizes().mru_data, 4096);
        assert!(c.get(&key(5), false).is_some());
        assert_eq!(c.sizes().mfu_data, 4096, "the second demand hit promotes");
    }

    #[test]
    fn metadata_ghost_hits_raise_the_metadata_share() {
        let cap = 32 * 4096 * SHARDS as u64;
        let c = BlockCache::new(cap, 0);
        let start = c.sizes().meta_pct;
        // A metadata working set larger than the metadata target, with data
        // streaming past: metadata keeps missing into its ghost list.
        for round in 0..20u64 {
            for i in 0..400u64 {
                let k = key(i);
                if c.get(&k, true).is_none() {
                    c.insert(k, blk(), true);
                }
            }
            for i in 0..200u64 {
                c.insert(key(1_000_000 + round * 200 + i), blk(), false);
            }
        }
        let z = c.sizes();
        assert!(z.meta_pct > start, "metadata share {} did not rise above {}", z.meta_pct, start);
        assert!(c.stats.mru_ghost_hits.load(Ordering::Relaxed) + c.stats.mfu_ghost_hits.load(Ordering::Relaxed) > 0);
        c.check_invariants().unwrap();
    }

    #[test]
    fn ghost_hit_revives_into_mfu() {
        let c = BlockCache::new(4 * 4096 * SHARDS as u64, 0);
        // Fill one shard's share past its target so key(0) is evicted.
        let k0 = key(0);
        c.insert(k0, blk(), false);
        let mut i = 1;
        while c.contains(&k0) {
            c.insert(key(i), blk(), false);
            i += 1;
        }
        c.insert(k0, blk(), false);
        assert_eq!(c.stats.mru_ghost_hits.load(Ordering::Relaxed), 1);
        assert!(c.sizes().mfu_data >= 4096);
        c.check_invariants().unwrap();
    }

    /// A block prepared for writing as the pool would (lz4, 4 KiB sectors):
    /// its pointer (with a made-up address) and physical bytes.
    fn written(i: u64, otype: tarn_ondisk::ObjectType, level: u8, compressible: bool) -> (BlockPtr, Arc<BlockData>, Held) {
        use crate::io::{block, CompressSetting, WriteProps};
        let mut x = 0x9E37_79B9_7F4A_7C15 ^ i;
        let mut random = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        let data: Vec<u8> = (0..131072u64).map(|j| if compressible { (j / 512 % 7) as u8 + (i % 200) as u8 + 1 } else { random() }).collect();
        let buf = Arc::new(crate::sys::buf::AlignedBuf::from_slice(&data));
        let props = WriteProps { compress: CompressSetting::Lz4, checksum: tarn_ondisk::ChecksumType::Fletcher4, copies: 1, redundant_metadata: Default::default() };
        let prep = block::prepare(&buf, data.len(), otype, level, 7, props, 4096);
        let mut bp = prep.bp;
        bp.dva[0] = tarn_ondisk::bp::Dva { vdev: 0, asize: 1 << 20, offset: i << 20 };
        let logical = Arc::new(BlockData::new(crate::sys::buf::AlignedBuf::from_slice(&data), data.len()));
        let held = Held::written(&bp, prep.phys.as_ref().expect("not a hole"), logical.clone());
        (bp, logical, held)
    }

    #[test]
    fn compressed_blocks_are_held_compressed_and_decompressed_on_hits() {
        let c = BlockCache::new(1 << 30, 0);
        let (bp, logical, held) = written(1, tarn_ondisk::ObjectType::PlainData, 0, true);
        assert!(held.is_compressed());
        let psize = bp.psize as u64;
        assert!(psize < 131072 / 4, "the pattern compresses ({} bytes)", psize);
        c.insert_block(0, &bp, held, Some(&logical), false, true);
        let z = c.sizes();
        assert_eq!((z.data_size, z.compressed_size, z.uncompressed_size, z.overhead_size), (psize, psize, 131072, 0));
        assert_eq!(z.size, psize, "the ARC counts the compressed bytes it holds");
        let got = c.get(&BlockKey::of(&bp), false).expect("a hit");
        assert_eq!(&got[..], &logical[..]);
        assert!(!Arc::ptr_eq(&got, &logical), "data is decompressed into a buffer of the reader's");
        assert_eq!(c.sizes().overhead_size, 0, "data keeps no decompressed copy");
        // Incompressible data is held as is and shared.
        let (bp2, logical2, held2) = written(2, tarn_ondisk::ObjectType::PlainData, 0, false);
        assert!(!held2.is_compressed());
        c.insert_block(0, &bp2, held2, Some(&logical2), false, true);
        assert!(Arc::ptr_eq(&c.get(&BlockKey::of(&bp2), false).unwrap(), &logical2));
        assert_eq!(c.sizes().uncompressed_size, 2 * 131072);
        c.check_invariants().unwrap();
    }

    #[test]
    fn compressed_metadata_keeps_a_bounded_decompressed_copy() {
        let c = BlockCache::new(64 << 20, 0);
        c.set_meta_decompressed_percent(1); // 655 KiB: five 128 KiB copies
        let blocks: Vec<_> = (0..8).map(|i| written(10 + i, tarn_ondisk::ObjectType::PlainData, 1, true)).collect();
        for (bp, logical, held) in &blocks {
            c.insert_block(0, bp, held.clone(), Some(logical), false, true);
        }
        let z = c.sizes();
        assert_eq!(z.overhead_size, 5 * 131072, "copies within 1% of c, the newest kept");
        assert_eq!(z.size, z.compressed_size + z.overhead_size);
        let (bp, logical, _) = &blocks[7];
        let a = c.get(&BlockKey::of(bp), true).unwrap();
        assert!(Arc::ptr_eq(&a, logical), "a hit on hot metadata shares its copy");
        let (bp0, logical0, _) = &blocks[0];
        let b = c.get(&BlockKey::of(bp0), true).unwrap();
        assert_eq!(&b[..], &logical0[..]);
        assert!(Arc::ptr_eq(&c.get(&BlockKey::of(bp0), true).unwrap(), &b), "decompressed once, then kept");
        c.remove(&BlockKey::of(bp0));
        c.check_invariants().unwrap();
        c.set_meta_decompressed_percent(0);
        assert_eq!(c.sizes().overhead_size, 0);
        c.check_invariants().unwrap();
    }

    #[test]
    fn evicted_metadata_takes_its_copy_along() {
        // 1 MiB: half for copies (three), 40 KiB of compressed blocks (of
        // about 600 bytes) per shard.
        let c = BlockCache::new(1 << 20, 0);
        c.set_meta_decompressed_percent(50);
        for i in 0..2000 {
            let (bp, logical, held) = written(100 + i, tarn_ondisk::ObjectType::DnodeArray, 0, true);
            c.insert_block(0, &bp, held, Some(&logical), false, true);
            if i % 50 == 0 {
                c.check_invariants().unwrap();
            }
            assert!(c.size_bytes() <= 1 << 20, "size {} within c", c.size_bytes());
        }
        assert!(c.stats.evicted_bytes.load(Ordering::Relaxed) > 0, "{:?}", c.sizes());
        assert!(c.sizes().overhead_size > 0);
        c.check_invariants().unwrap();
    }
}
