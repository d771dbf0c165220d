//! The L2ARC: a second cache level on fast devices (`tarn pool add POOL
//! cache DEV`), fed from the ARC's eviction end and persistent across
//! export and import, in the design of OpenZFS's l2arc (arc.c).
//!
//! ## Feeding
//! Cache devices belong to a pool, and the ARC is the process's: a pool's
//! feed takes only that pool's blocks (as OpenZFS's feed skips buffers of
//! other pools). A feed thread wakes every `l2arc_feed_secs` (every
//! `l2arc_feed_min_ms` while the previous feed filled its quota) and scans
//! the least recently used end of the ARC's lists — MFU metadata, MRU
//! metadata, MFU data, MRU data — down to `l2arc_write_max ×
//! l2arc_headroom` bytes, for blocks not yet on a cache device. Prefetched blocks are skipped
//! (`l2arc_noprefetch`). Up to `l2arc_write_max` bytes per feed (twice that
//! while the device has never wrapped: OpenZFS's boost) are written to one
//! device, round-robin over devices, as one sequential write.
//!
//! Blocks are stored exactly as on the pool's disks — compressed — so a read
//! verifies against the block pointer's own checksum. The ARC holds blocks
//! in that same form (`Held`), so the feed writes the bytes it finds there,
//! after checking them against the pointer's checksum once more (a block
//! that fails is skipped and counted: damaged memory is not spread to the
//! cache device). A block read back enters the ARC in its stored form too.
//!
//! ## Device layout
//! ```text
//!   0      4 KiB header: magic, pool and device guids, size, write hand,
//!          lap, newest log block (offset, length, checksum), blake3 of it all
//!   4 KiB  ring: [data blocks of a feed][log block] [data …][log] …
//! ```
//! The hand moves forward and wraps to 4 KiB; before a region is written,
//! index entries pointing into it are dropped. Each feed ends with a *log
//! block*: its lap, the previous log block's location and checksum, and an
//! entry (block pointer, device offset) per block written. On import the
//! chain is walked from the header backwards while log blocks verify:
//! entries of the current lap are kept, entries of the previous lap are kept
//! if they lie beyond the hand (not yet overwritten), and the walk stops at
//! anything older. A stale entry cannot return wrong data: every read
//! verifies the block pointer's checksum, and a failure only drops the entry.
//!
//! ## Memory
//! An index entry costs about 96 bytes (with the hash map's share). Feeding
//! stops while the pool's index would exceed `l2arc_meta_percent` of the
//! ARC's target (each pool's index by itself: OpenZFS bounds all devices'
//! headers together).
//!
//! Invariants (`check_invariants`): every index entry lies inside its
//! device's ring; `size`, `logical` and `allocated` equal the sums of the
//! entries' physical, logical and on-device sizes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::{BlockPtr, BP_SIZE};

use super::{BlockKey, Held, PoolCache};
use crate::error::{Error, Result};
use crate::io::block::BlockData;
use crate::io::checksum;
use crate::sys::buf::AlignedBuf;
use crate::sys::device::BlockDevice;

const HEADER_BYTES: u64 = 4096;
const ALIGN: u64 = 4096;
/// Smallest cache device: the header and a ring of 16 blocks.
pub const MIN_DEVICE_BYTES: u64 = HEADER_BYTES + 16 * ALIGN;
const MAGIC: &[u8; 8] = b"TARNL2C1";
const LOG_MAGIC: &[u8; 8] = b"TARNL2LG";
/// Log block header: magic, lap, entry count, prev offset, prev length, prev checksum.
const LOG_HEADER: usize = 8 + 8 + 8 + 8 + 8 + 32;
const ENTRY_BYTES: usize = BP_SIZE + 8;
/// Per index entry, for the memory bound.
const ENTRY_MEM: u64 = 96;
/// Most log blocks walked on import (bounds the rebuild of a corrupt chain).
const MAX_LOG_WALK: usize = 1 << 20;

/// L2ARC tunables (OpenZFS names), copied from `Tunables` when they change.
#[derive(Clone, Copy, Debug)]
pub struct L2Params {
    pub write_max: u64,
    pub write_boost: u64,
    pub headroom: u64,
    pub feed_secs: u64,
    pub feed_min_ms: u64,
    pub noprefetch: bool,
    pub meta_percent: u64,
    pub rebuild: bool,
}

#[derive(Debug, Default)]
pub struct L2Stats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub feeds: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Blocks the feed found not as their pointer describes (skipped).
    pub write_skipped: AtomicU64,
    pub read_bytes: AtomicU64,
    pub cksum_bad: AtomicU64,
    pub io_errors: AtomicU64,
    /// Entries dropped because the hand came around to them.
    pub evicted: AtomicU64,
    /// Blocks put back in the index from log blocks at import.
    pub rebuilt: AtomicU64,
    /// Log blocks read at import.
    pub log_blocks: AtomicU64,
    /// Cache devices whose index was rebuilt at import.
    pub rebuild_success: AtomicU64,
}

/// Where a cached block lies. The reader brings the block pointer; the
/// entry keeps only what tells a stale entry apart (size and checksum
/// prefix), and the logical size for the statistics — about 80 bytes with
/// the hash map's share.
#[derive(Clone, Copy, Debug)]
struct Entry {
    dev: u64,
    offset: u64,
    psize: u32,
    lsize: u32,
    cksum: [u8; 8],
}

impl Entry {
    fn new(dev: u64, offset: u64, bp: &BlockPtr) -> Entry {
        let mut cksum = [0u8; 8];
        cksum.copy_from_slice(&bp.cksum[..8]);
        Entry { dev, offset, psize: bp.psize, lsize: bp.lsize, cksum }
    }

    fn matches(&self, bp: &BlockPtr) -> bool {
        self.psize == bp.psize && self.cksum[..] == bp.cksum[..8]
    }
}

/// Where a cache device's ring stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ring {
    hand: u64,
    lap: u64,
    last_log: (u64, u64, [u8; 32]),
}

pub struct CacheDev {
    pub guid: u64,
    pub path: String,
    dev: Arc<dyn BlockDevice>,
    size: u64,
    ring: Mutex<Ring>,
    /// Held for a whole batch write: two feeders (the feed thread and a
    /// caller of `feed`) must not both take the same hand position, or the
    /// index would hold entries for bytes the other batch overwrote.
    writer: Mutex<()>,
    /// Its device operations that completed, and their bytes (`pool
    /// iostat -v`'s cache rows).
    io: [AtomicU64; 4],
}

/// `CacheDev::io`'s counters.
const READ_OPS: usize = 0;
const READ_BYTES: usize = 1;
const WRITE_OPS: usize = 2;
const WRITE_BYTES: usize = 3;

impl CacheDev {
    /// Reads from the device, counted.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.dev.read_at(buf, offset)?;
        self.io[READ_OPS].fetch_add(1, Ordering::Relaxed);
        self.io[READ_BYTES].fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Writes to the device, counted.
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.dev.write_at(buf, offset)?;
        self.io[WRITE_OPS].fetch_add(1, Ordering::Relaxed);
        self.io[WRITE_BYTES].fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A cache device's I/O as `pool iostat -v` shows it.
#[derive(Clone, Debug, Default)]
pub struct CacheDevIo {
    pub guid: u64,
    pub path: String,
    pub size: u64,
    /// Bytes of the ring written: up to the hand on the first lap, all of
    /// it once the hand has wrapped (zpool's alloc of a cache device).
    pub used: u64,
    /// Whether the device answers (`BlockDevice::health`).
    pub online: bool,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

impl std::fmt::Debug for CacheDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheDev").field("guid", &self.guid).field("path", &self.path).finish()
    }
}

/// A cache device as `status` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CacheDevStatus {
    #[serde(with = "crate::guid_json")]
    pub guid: u64,
    pub path: String,
    pub size: u64,
    pub hand: u64,
    pub lap: u64,
}

pub struct L2Arc {
    pool_guid: u64,
    devs: RwLock<Vec<Arc<CacheDev>>>,
    index: Mutex<HashMap<BlockKey, Entry>>,
    /// Sums over the index: bytes as stored (psize), logical bytes, and
    /// bytes the entries occupy on the devices (whole 4 KiB units).
    size: AtomicU64,
    logical: AtomicU64,
    allocated: AtomicU64,
    next_dev: AtomicU64,
    params: Mutex<L2Params>,
    stop: Arc<AtomicBool>,
    feeding: AtomicBool,
    pub stats: L2Stats,
}

fn round_up(v: u64) -> u64 {
    v.div_ceil(ALIGN) * ALIGN
}

fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

fn encode_header(pool_guid: u64, d: &CacheDev, r: &Ring) -> AlignedBuf {
    encode_header_fields(pool_guid, d.guid, d.size, r)
}

fn encode_header_fields(pool_guid: u64, dev_guid: u64, dev_size: u64, r: &Ring) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(HEADER_BYTES as usize);
    b[0..8].copy_from_slice(MAGIC);
    let mut o = 8;
    for v in [pool_guid, dev_guid, dev_size, r.hand, r.lap, r.last_log.0, r.last_log.1] {
        b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        o += 8;
    }
    b[o..o + 32].copy_from_slice(&r.last_log.2);
    o += 32;
    let h = blake3::hash(&b[..o]);
    b[o..o + 32].copy_from_slice(h.as_bytes());
    b
}

/// Decodes a header: (pool guid, device guid, size, ring).
fn decode_header(b: &[u8]) -> Option<(u64, u64, u64, Ring)> {
    let end = 8 + 7 * 8 + 32;
    if b.len() < end + 32 || &b[0..8] != MAGIC || blake3::hash(&b[..end]).as_bytes() != &b[end..end + 32] {
        return None;
    }
    let f = |i: usize| le64(b, 8 + i * 8);
    let mut ck = [0u8; 32];
    ck.copy_from_slice(&b[end - 32..end]);
    Some((f(0), f(1), f(2), Ring { hand: f(3), lap: f(4), last_log: (f(5), f(6), ck) }))
}

/// For the fuzz body: decodes a header, and if it decodes, checks that
/// re-encoding gives the same bytes. Returns whether it decoded.
#[doc(hidden)]
pub fn fuzz_header(b: &[u8]) -> bool {
    let Some((pool, guid, size, ring)) = decode_header(b) else { return false };
    let again = encode_header_fields(pool, guid, size, &ring);
    assert_eq!(decode_header(&again), Some((pool, guid, size, ring)));
    true
}

/// For the fuzz body: a header with valid magic and checksum around
/// arbitrary field bytes.
#[doc(hidden)]
pub fn seal_header(fields: &[u8]) -> Vec<u8> {
    let end = 8 + 7 * 8 + 32;
    let mut b = vec![0u8; HEADER_BYTES as usize];
    b[0..8].copy_from_slice(MAGIC);
    let n = fields.len().min(end - 8);
    b[8..8 + n].copy_from_slice(&fields[..n]);
    let h = blake3::hash(&b[..end]);
    b[end..end + 32].copy_from_slice(h.as_bytes());
    b
}

/// Reads the pool guid and device guid a cache device's header names, if
/// it carries a valid header.
pub fn read_cache_label(dev: &dyn BlockDevice) -> Option<(u64, u64)> {
    let mut b = AlignedBuf::zeroed(HEADER_BYTES as usize);
    dev.read_at(&mut b, 0).ok()?;
    decode_header(&b).map(|(p, g, _, _)| (p, g))
}

impl L2Arc {
    pub fn new(pool_guid: u64, params: L2Params) -> Self {
        L2Arc {
            pool_guid,
            devs: RwLock::new(Vec::new()),
            index: Mutex::new(HashMap::new()),
            size: AtomicU64::new(0),
            logical: AtomicU64::new(0),
            allocated: AtomicU64::new(0),
            next_dev: AtomicU64::new(0),
            params: Mutex::new(params),
            stop: Arc::new(AtomicBool::new(false)),
            feeding: AtomicBool::new(false),
            stats: L2Stats::default(),
        }
    }

    pub fn set_params(&self, p: L2Params) {
        *self.params.lock() = p;
    }

    pub fn has_devices(&self) -> bool {
        !self.devs.read().is_empty()
    }

    /// Bytes of blocks (as stored) the index covers.
    pub fn size_bytes(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    /// What the indexed blocks are decompressed (arcstats' l2_size).
    pub fn logical_bytes(&self) -> u64 {
        self.logical.load(Ordering::Relaxed)
    }

    /// Device bytes the indexed blocks occupy (arcstats' l2_asize).
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Counts an entry into (`add`) or out of the index's sums.
    fn account(&self, e: &Entry, add: bool) {
        for (sum, v) in [(&self.size, e.psize as u64), (&self.logical, e.lsize as u64), (&self.allocated, round_up(e.psize as u64))] {
            if add {
                sum.fetch_add(v, Ordering::Relaxed);
            } else {
                sum.fetch_sub(v, Ordering::Relaxed);
            }
        }
    }

    /// Adds an entry to the locked index (replacing one for the same block).
    fn index_insert(&self, idx: &mut HashMap<BlockKey, Entry>, key: BlockKey, e: Entry) -> bool {
        let old = idx.insert(key, e);
        if let Some(o) = &old {
            self.account(o, false);
        }
        self.account(&e, true);
        old.is_none()
    }

    pub fn entries(&self) -> usize {
        self.index.lock().len()
    }

    pub fn devices(&self) -> Vec<CacheDevStatus> {
        self.devs
            .read()
            .iter()
            .map(|d| {
                let r = *d.ring.lock();
                CacheDevStatus { guid: d.guid, path: d.path.clone(), size: d.size, hand: r.hand, lap: r.lap }
            })
            .collect()
    }

    /// Every device's I/O counters since it was added (or the pool
    /// imported), with its ring's use.
    pub fn device_io(&self) -> Vec<CacheDevIo> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.devs
            .read()
            .iter()
            .map(|d| {
                let r = *d.ring.lock();
                CacheDevIo {
                    guid: d.guid,
                    path: d.path.clone(),
                    size: d.size,
                    used: if r.lap > 0 { d.size } else { r.hand.min(d.size) },
                    online: d.dev.health() == crate::sys::device::Health::Online,
                    read_ops: load(&d.io[READ_OPS]),
                    read_bytes: load(&d.io[READ_BYTES]),
                    write_ops: load(&d.io[WRITE_OPS]),
                    write_bytes: load(&d.io[WRITE_BYTES]),
                }
            })
            .collect()
    }

    /// Adds a device. `fresh`: write a new, empty header (the device was
    /// just added); otherwise rebuild the index from its log blocks.
    pub fn add_device(&self, guid: u64, path: &str, dev: Arc<dyn BlockDevice>, fresh: bool) -> Result<()> {
        let size = dev.size_bytes() / ALIGN * ALIGN;
        if size < MIN_DEVICE_BYTES {
            return Err(Error::invalid(format!("cache device {} is too small ({} bytes)", path, size)));
        }
        if self.devs.read().iter().any(|d| d.guid == guid || d.path == path) {
            return Err(Error::new(crate::ErrorKind::Exists, format!("{} is already a cache device of this pool", path)));
        }
        let d = Arc::new(CacheDev { guid, path: path.to_string(), dev, size, ring: Mutex::new(Ring { hand: HEADER_BYTES, lap: 0, last_log: (0, 0, [0; 32]) }), writer: Mutex::new(()), io: Default::default() });
        if fresh {
            self.write_header(&d).map_err(|e| Error::io(format!("writing the cache header of {}", path), e))?;
        } else {
            self.rebuild(&d);
        }
        self.devs.write().push(d);
        Ok(())
    }

    /// Removes a device and forgets what it held.
    pub fn remove_device(&self, guid: u64) -> bool {
        let mut devs = self.devs.write();
        let before = devs.len();
        devs.retain(|d| d.guid != guid);
        let removed = devs.len() != before;
        drop(devs);
        if removed {
            let mut idx = self.index.lock();
            idx.retain(|_, e| {
                let keep = e.dev != guid;
                if !keep {
                    self.account(e, false);
                }
                keep
            });
        }
        removed
    }

    fn write_header(&self, d: &CacheDev) -> std::io::Result<()> {
        let r = *d.ring.lock();
        d.write_at(&encode_header(self.pool_guid, d, &r), 0)
    }

    /// Reads the ring state and log chain of `d` back into the index.
    fn rebuild(&self, d: &Arc<CacheDev>) {
        let mut b = AlignedBuf::zeroed(HEADER_BYTES as usize);
        if d.read_at(&mut b, 0).is_err() {
            return;
        }
        let Some((pool, guid, size, ring)) = decode_header(&b) else { return };
        if pool != self.pool_guid || guid != d.guid || size != d.size || ring.hand < HEADER_BYTES || ring.hand > d.size {
            return;
        }
        *d.ring.lock() = ring;
        if !self.params.lock().rebuild {
            return;
        }
        self.stats.rebuild_success.fetch_add(1, Ordering::Relaxed);
        let mut next = ring.last_log;
        let mut idx = self.index.lock();
        for _ in 0..MAX_LOG_WALK {
            let (off, len, ck) = next;
            if len == 0 || off < HEADER_BYTES || off.saturating_add(len) > d.size || len > 64 << 20 {
                break;
            }
            let mut buf = AlignedBuf::zeroed(len as usize);
            if d.read_at(&mut buf, off).is_err() || blake3::hash(&buf).as_bytes() != &ck {
                break;
            }
            let Some((lap, prev, entries)) = decode_log(&buf) else { break };
            // Current lap: everything stands. Previous lap: what lies beyond
            // the hand stands. Older: overwritten.
            let keep_from = if lap == ring.lap {
                HEADER_BYTES
            } else if lap + 1 == ring.lap && off >= ring.hand {
                ring.hand
            } else {
                break;
            };
            self.stats.log_blocks.fetch_add(1, Ordering::Relaxed);
            for (bp, doff) in entries {
                let plen = round_up(bp.psize as u64);
                let usable = doff >= keep_from && doff + plen <= d.size && bp.validate().is_ok() && !bp.is_hole() && !bp.is_embedded();
                if usable && self.index_insert(&mut idx, BlockKey::of(&bp), Entry::new(d.guid, doff, &bp)) {
                    self.stats.rebuilt.fetch_add(1, Ordering::Relaxed);
                }
            }
            next = prev;
        }
    }

    /// Looks a block up; on a hit returns it verified — its logical content
    /// and its stored form, for the ARC.
    pub fn read(&self, bp: &BlockPtr) -> Option<(Arc<BlockData>, Held)> {
        if !self.has_devices() {
            return None;
        }
        let key = BlockKey::of(bp);
        let e = self.index.lock().get(&key).copied();
        let Some(e) = e.filter(|e| e.matches(bp)) else {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let dev = self.devs.read().iter().find(|d| d.guid == e.dev).cloned();
        let Some(dev) = dev else {
            self.drop_entry(&key);
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let len = round_up(bp.psize as u64);
        let mut raw = AlignedBuf::zeroed(len as usize);
        if dev.read_at(&mut raw, e.offset).is_err() {
            self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
            self.drop_entry(&key);
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match Held::read(bp, raw) {
            Ok(d) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                self.stats.read_bytes.fetch_add(len, Ordering::Relaxed);
                Some(d)
            }
            Err(_) => {
                // Overwritten or damaged: a miss, never wrong data.
                self.stats.cksum_bad.fetch_add(1, Ordering::Relaxed);
                self.drop_entry(&key);
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn drop_entry(&self, key: &BlockKey) {
        if let Some(e) = self.index.lock().remove(key) {
            self.account(&e, false);
        }
    }

    /// Forgets a block that was freed.
    pub fn remove(&self, bp: &BlockPtr) {
        if self.has_devices() {
            self.drop_entry(&BlockKey::of(bp));
        }
    }

    /// The block as stored on the pool's disks — the bytes the ARC holds —
    /// if they match the pointer's checksum.
    fn physical(bp: &BlockPtr, held: &Held) -> Option<Vec<u8>> {
        let phys = held.physical(bp)?;
        checksum::verify(bp.checksum, phys, &bp.cksum).then(|| phys.to_vec())
    }

    /// One feed: picks blocks from the ARC's eviction end and writes them
    /// with a log block to the next device. Returns the bytes written.
    pub fn feed(&self, arc: &PoolCache) -> u64 {
        let p = *self.params.lock();
        let dev = {
            let devs = self.devs.read();
            if devs.is_empty() {
                return 0;
            }
            let i = self.next_dev.fetch_add(1, Ordering::Relaxed) as usize % devs.len();
            devs[i].clone()
        };
        // The memory bound on the index.
        let c = arc.sizes().c;
        if (self.entries() as u64 + 1) * ENTRY_MEM > c / 100 * p.meta_percent {
            return 0;
        }
        let ring = *dev.ring.lock();
        let quota = if ring.lap == 0 { p.write_max + p.write_boost } else { p.write_max };
        let quota = quota.min((dev.size - HEADER_BYTES) / 4);
        let candidates = arc.eviction_candidates(quota * p.headroom.max(1), p.noprefetch);
        let mut batch: Vec<(BlockPtr, Vec<u8>)> = Vec::new();
        let mut bytes = 0u64;
        {
            let idx = self.index.lock();
            for (bp, data) in candidates {
                if idx.contains_key(&BlockKey::of(&bp)) {
                    continue;
                }
                let Some(phys) = Self::physical(&bp, &data) else {
                    self.stats.write_skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let len = round_up(phys.len() as u64);
                if bytes + len > quota {
                    break;
                }
                bytes += len;
                batch.push((bp, phys));
            }
        }
        if batch.is_empty() {
            return 0;
        }
        let written = self.write_batch(&dev, batch).unwrap_or_else(|_| {
            self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
            0
        });
        // Counted once its write is done (or failed): a reader that sees
        // the feed sees its write in `writes` (or `io_errors`) too.
        self.stats.feeds.fetch_add(1, Ordering::Relaxed);
        written
    }

    fn write_batch(&self, dev: &Arc<CacheDev>, batch: Vec<(BlockPtr, Vec<u8>)>) -> std::io::Result<u64> {
        let data_len: u64 = batch.iter().map(|(_, p)| round_up(p.len() as u64)).sum();
        let log_len = round_up((LOG_HEADER + batch.len() * ENTRY_BYTES) as u64);
        let total = data_len + log_len;
        let _writing = dev.writer.lock();
        let mut ring = *dev.ring.lock();
        if ring.hand + total > dev.size {
            ring.hand = HEADER_BYTES;
            ring.lap += 1;
        }
        let start = ring.hand;
        self.evict_range(dev.guid, start, start + total);
        let mut buf = AlignedBuf::zeroed(total as usize);
        let mut o = 0usize;
        let mut entries = Vec::with_capacity(batch.len());
        for (bp, phys) in &batch {
            buf[o..o + phys.len()].copy_from_slice(phys);
            entries.push((*bp, start + o as u64));
            o += round_up(phys.len() as u64) as usize;
        }
        let log = encode_log(ring.lap, ring.last_log, &entries, log_len as usize);
        buf[o..o + log.len()].copy_from_slice(&log);
        dev.write_at(&buf, start)?;
        ring.last_log = (start + data_len, log_len, *blake3::hash(&log).as_bytes());
        ring.hand = start + total;
        *dev.ring.lock() = ring;
        self.write_header(dev)?;
        let mut idx = self.index.lock();
        for (bp, off) in entries {
            self.index_insert(&mut idx, BlockKey::of(&bp), Entry::new(dev.guid, off, &bp));
        }
        drop(idx);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats.write_bytes.fetch_add(total, Ordering::Relaxed);
        Ok(total)
    }

    /// Drops index entries of `dev` that overlap [from, to).
    fn evict_range(&self, dev: u64, from: u64, to: u64) {
        let mut idx = self.index.lock();
        let mut n = 0;
        idx.retain(|_, e| {
            let end = e.offset + round_up(e.psize as u64);
            let keep = e.dev != dev || end <= from || e.offset >= to;
            if !keep {
                self.account(e, false);
                n += 1;
            }
            keep
        });
        self.stats.evicted.fetch_add(n, Ordering::Relaxed);
    }

    /// Writes every device's header and flushes (export).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for d in self.devs.read().iter() {
            let _ = self.write_header(d);
            let _ = d.dev.flush();
        }
    }

    /// Starts the feed thread; it holds only weak references and ends when
    /// the pool is gone or shut down.
    pub fn start_feeding(self: &Arc<Self>, arc: &Arc<PoolCache>) {
        if self.feeding.swap(true, Ordering::SeqCst) {
            return;
        }
        let (l2, arc) = (Arc::downgrade(self), Arc::downgrade(arc));
        let stop = self.stop.clone();
        let _ = std::thread::Builder::new().name("tarn-l2arc-feed".into()).spawn(move || feed_loop(l2, arc, stop));
    }

    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let devs: HashMap<u64, u64> = self.devs.read().iter().map(|d| (d.guid, d.size)).collect();
        let idx = self.index.lock();
        let (mut sum, mut logical, mut allocated) = (0, 0, 0);
        for (k, e) in idx.iter() {
            let Some(size) = devs.get(&e.dev) else { return Err(format!("{:?} on a device that is gone", k)) };
            if e.offset < HEADER_BYTES || e.offset + round_up(e.psize as u64) > *size {
                return Err(format!("{:?} at {} lies outside the ring", k, e.offset));
            }
            sum += e.psize as u64;
            logical += e.lsize as u64;
            allocated += round_up(e.psize as u64);
        }
        let counted = (self.size_bytes(), self.logical_bytes(), self.allocated_bytes());
        if (sum, logical, allocated) != counted {
            return Err(format!("index holds {} bytes ({} logical, {} on devices), counted {:?}", sum, logical, allocated, counted));
        }
        Ok(())
    }
}

fn feed_loop(l2: Weak<L2Arc>, arc: Weak<PoolCache>, stop: Arc<AtomicBool>) {
    let mut wait = Duration::from_secs(1);
    loop {
        std::thread::sleep(wait);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let (Some(l2), Some(arc)) = (l2.upgrade(), arc.upgrade()) else { return };
        let p = *l2.params.lock();
        let wrote = l2.feed(&arc);
        // Busy (the ARC turned over enough to fill an eighth of the quota):
        // come back sooner, so blocks passing through a small ARC are caught.
        wait = if wrote * 8 >= p.write_max { Duration::from_millis(p.feed_min_ms.max(10)) } else { Duration::from_secs(p.feed_secs.max(1)) };
    }
}

pub(crate) fn encode_log(lap: u64, prev: (u64, u64, [u8; 32]), entries: &[(BlockPtr, u64)], len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[0..8].copy_from_slice(LOG_MAGIC);
    b[8..16].copy_from_slice(&lap.to_le_bytes());
    b[16..24].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    b[24..32].copy_from_slice(&prev.0.to_le_bytes());
    b[32..40].copy_from_slice(&prev.1.to_le_bytes());
    b[40..72].copy_from_slice(&prev.2);
    let mut o = LOG_HEADER;
    for (bp, off) in entries {
        bp.encode(&mut b[o..o + BP_SIZE]);
        b[o + BP_SIZE..o + ENTRY_BYTES].copy_from_slice(&off.to_le_bytes());
        o += ENTRY_BYTES;
    }
    b
}

/// Decodes a log block: (lap, previous log, entries). None if malformed.
#[allow(clippy::type_complexity)]
pub fn decode_log(b: &[u8]) -> Option<(u64, (u64, u64, [u8; 32]), Vec<(BlockPtr, u64)>)> {
    if b.len() < LOG_HEADER || &b[0..8] != LOG_MAGIC {
        return None;
    }
    let n = le64(b, 16) as usize;
    if n > (b.len() - LOG_HEADER) / ENTRY_BYTES {
        return None;
    }
    let mut ck = [0u8; 32];
    ck.copy_from_slice(&b[40..72]);
    let prev = (le64(b, 24), le64(b, 32), ck);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let o = LOG_HEADER + i * ENTRY_BYTES;
        let bp = BlockPtr::decode(&b[o..o + BP_SIZE]).ok()?;
        out.push((bp, le64(b, o + BP_SIZE)));
    }
    Some((le64(b, 8), prev, out))
}
