//! # Metaslab allocator
//!
//! ## Purpose
//! Decides where every block of the pool goes, tracks which space is
//! allocated, free or *deferred* (freed but not yet reusable), produces the
//! per-txg space-log records and full checkpoints that persist that state
//! (encoded by `spacelog`), and rebuilds the state on import.  Modelled on
//! OpenZFS `metaslab.c` with the log-spacemap feature; simplified where
//! userspace and copy-on-write-only workloads allow.
//!
//! ## Layout
//! * The pool ([`Allocator`]) has top-level vdevs, indexed by vdev id.
//! * Each vdev ([`VdevSpace`]) offers `[start, start+size)` and is cut into
//!   metaslabs of `2^metaslab_shift` bytes (the last may be shorter).
//!   Metaslabs exist so that allocation decisions are local: each has its own
//!   free [`RangeTree`], a weight, and two cursors per copy slot.  Metaslab boundaries are
//!   purely an in-memory device — nothing on disk depends on them (records
//!   and checkpoints hold absolute extents), so the shift may change between
//!   imports.
//! * Metaslab size: `highbit(size / 200)` (≈100–200 metaslabs, like OpenZFS
//!   `vdev_metaslab_set_size`), clamped to `[2^26, 2^34]`, and grown further
//!   only if a vdev would otherwise exceed 131072 metaslabs.
//!
//! ## Allocation policy (and why)
//! 1. **Stripe across vdevs with a rotor.**  Allocation starts at the rotor
//!    vdev and stays there until about `aliquot` bytes (default 1 MiB, OpenZFS
//!    `metaslab_aliquot`) were allocated, then the rotor moves on.  1 MiB
//!    matches the I/O aggregation limit: each vdev receives runs of at least
//!    1 MiB of adjacent blocks, which the I/O scheduler merges into full-size
//!    I/Os, while consecutive MiBs land on different vdevs to use them in
//!    parallel.  Each vdev's quota is `aliquot + bias`, with
//!    `bias = (ratio - 100) * aliquot / 100` and
//!    `ratio = 100 * vdev_free * nvdevs / pool_free` (OpenZFS `mg_bias`), so
//!    emptier vdevs receive more and the pool converges to even fullness.
//!    A vdev that cannot satisfy a request is skipped and the rotor moves to
//!    the vdev that could.
//! 2. **Two size classes.**  Requests smaller than `small_block_bytes`
//!    (default `max(64 KiB, 4 sectors)`) are "small".  64 KiB is above
//!    typical metadata (16 KiB dnode blocks, compressed indirect blocks,
//!    small files) and below the 128 KiB default record size, so that
//!    streaming data — even compressed ~2:1 — stays in the large class.
//!    Each class has its own active metaslab per vdev and its own cursor per
//!    metaslab, so metadata written in the same txg as a large sequential
//!    write does not land in the middle of its run.
//! 3. **Cursor first-fit inside the active metaslab.**  The next allocation
//!    starts exactly where the previous one of the same class ended
//!    (`RangeTree::first_fit_from`), so a stream of 1 MiB blocks is laid out
//!    back to back; holes before the cursor are only revisited after wrapping.
//!    A fresh metaslab's large cursor is at its start and its small cursor
//!    at its middle, so even when both classes must share one metaslab (a
//!    vdev smaller than two metaslabs) they do not interleave at first.
//!    Alignment is the sector size only — blocks are not power-of-two
//!    aligned, that would waste space between differently sized blocks.
//! 4. **Metaslab choice by weight.**  Weight = (largest free segment, free
//!    bytes), kept in a per-vdev ordered index so choosing is O(log n).  The
//!    large class takes the *heaviest* metaslab (longest runs; ties broken
//!    towards low offsets, which are the faster outer tracks of a disk).  The
//!    small class takes the *lightest metaslab that still fits* (ties towards
//!    high offsets): small blocks fill holes in already-fragmented metaslabs
//!    instead of breaking up big free regions.  Each class avoids the other
//!    class's active metaslab unless it is the only candidate.  A class
//!    switches metaslab only when its active one cannot fit the request.
//! 5. **No gang blocks.**  A request must fit in one free segment of one
//!    metaslab.  If no allowed vdev has such a segment — pool full, or free
//!    space fragmented into pieces smaller than the request — `alloc` returns
//!    [`AllocError::NoSpace`].  Since metaslabs are at least 64 MiB, any
//!    request up to 64 MiB fits on an empty metaslab, i.e. a 16 MiB block
//!    plus parity overhead up to 4× (raidz3 on 4 disks, the worst case).
//! 6. **Exclusion is strict.**  Vdevs in `exclude` are never used.
//! 7. **Further copies apart** ([`Allocator::alloc_ditto`]).  The second and
//!    third copy of a block (`copies`, and the extra copies of metadata) go
//!    to a vdev that holds no copy of it when one has room, like OpenZFS's
//!    ditto blocks.  Otherwise (one vdev, or the others full) they go on a
//!    vdev that does, at least `ditto_distance` = 1/8 of the vdev from each
//!    copy there (bytes between the extents; OpenZFS
//!    `ditto_same_vdev_distance_shift`), failing that at least
//!    `ditto_min_distance` = min(1/8 of the vdev, 16 MiB), and failing that
//!    wherever they fit — reported, never silent (`Ditto::apart`).  So no
//!    region of a few MiB holds two copies of one block, and the damage that
//!    destroys a copy (a bad stretch of disk, a stray write) spares the
//!    others.  Copies sharing a vdev each take a *copy slot* (0, 1, 2) with
//!    its own active metaslab per class and its own cursors, so one txg's
//!    second copies stream into a region of their own just as its first
//!    copies do, and the scheduler still merges them into large writes.
//!    Slot k's metaslab is chosen in the class's order, preferring
//!    metaslabs no other slot is using; inside it, the copy takes the first
//!    fit from the slot's cursor within the windows the distance leaves.
//! 8. **RAID-Z sizes.**  A RAID-Z vdev's config carries its geometry
//!    (`AllocConfig::raidz`): a request of `n` bytes takes
//!    `RaidzGeometry::asize(n)` — its data sectors, a parity sector per
//!    row and column, rounded to `nparity + 1` sectors so that every gap
//!    left between blocks can hold a block — and that is the length
//!    returned and recorded (a DVA's asize). The free space writers are
//!    admitted against (`space_by_piece`) is deflated by what parity
//!    takes of a 128 KiB block, as OpenZFS's `vdev_deflate_ratio`: the
//!    data such space holds in blocks of that size. Smaller blocks take
//!    relatively more (a one-sector block takes `nparity + 1` sectors);
//!    the slop reserve covers the difference, as in OpenZFS. The raw
//!    figures (`space`) stay raw, as `zpool list` shows them.
//!
//! ## Deferred frees and txgs
//! A block freed in txg N stays *deferred* until `txg_synced(N + 2)`
//! (OpenZFS `TXG_DEFER_SIZE`), so a crash can still roll back to either of
//! the two previous uberblocks without finding their blocks overwritten.
//! Deferred space is neither free nor allocated.  Allocations and frees must
//! name an *open* txg, i.e. one greater than the highest txg passed to
//! [`Allocator::txg_synced`]; this is what guarantees that one txg's record
//! set never contains the same range twice.
//!
//! ## Space log records
//! Every allocation and free is also added to a per-txg, per-vdev record
//! `RangeTree`, so adjacent extents coalesce (a 1 GiB sequential write is one
//! record).  [`Allocator::take_records`] hands them out sorted by
//! (vdev, offset) and forgets them.  Protocol for writing txg N's log block:
//! `records_upper_bound(N, k)` → allocate the log block (k extents) in txg N →
//! `take_records(N)` → encode → write.  Replay applies a record set's
//! allocations, then its frees (frees are deferred, so nothing freed in a txg
//! can have been reallocated in the same txg), then releases the deferrals
//! of txgs `<= current_txg - 2`.  Releasing relative to the imported txg
//! rather than the log's txg is safe (later logs never use space that was
//! still deferred when they were written) and also covers txgs that wrote no
//! log.
//!
//! ## Checkpoints
//! [`Allocator::checkpoint`] returns the free ranges (coalesced across
//! metaslab boundaries, so the form is canonical) and the deferred ranges
//! with their txgs; `Checkpoint::txg` is the highest txg the allocator has
//! seen.  A checkpoint written during the sync of txg C must be taken after
//! every allocation of txg C (including its own blocks) and replaces the log
//! of txg C; import loads it and replays logs with txg > C.  Import sequence:
//! `add_vdev` for every vdev in the config (optional for vdevs the checkpoint
//! lists; required for vdevs added after it), `load_checkpoint`, `replay`
//! each later log with the uberblock's txg as `current_txg`, then
//! `txg_synced(current_txg)` (needed only if there was no log to replay).
//!
//! ## Transient allocations (intent-log blocks)
//! Log blocks are written between txg syncs and live only until the txgs
//! of their records sync, so they never enter the space log: a transient
//! allocation (`alloc_transient`) takes space out of the free trees and
//! counts it allocated in memory only, and `checkpoint` reports it as
//! free. On disk a log block's space is therefore always free; after a
//! crash, import claims (`claim_transient`) the blocks every dataset's log
//! chain still reaches before anything else allocates, so nothing can
//! overwrite them before they are replayed. `free_transient` defers the
//! space like any free (a crash may import the txg before the one whose
//! log header stopped naming the block) but records nothing.
//!
//! ## The log class (separate intent-log devices)
//! A vdev may be in the *log* class (`set_log`, a pool's log vdevs, zpool's
//! `log` allocation class): `alloc` and `alloc_ditto` never place a block
//! there, and its space is not the pool's (`space().total` and
//! `space_by_piece` leave it out, so no writer is admitted against it).
//! Only transient allocations go there: `alloc_transient` tries the vdevs
//! it is told to prefer (the log vdevs that take writes) and then the
//! normal class. The class is part of the vdev's configuration, not of the
//! checkpoint: `load_checkpoint` keeps it for every vdev it replaces.
//!
//! ## Invariants (checked by [`Allocator::check_invariants`])
//! 1. Per vdev: `free + deferred + allocated == size`, with `free` the sum of
//!    the metaslab trees and `allocated` a counter maintained independently.
//! 2. Metaslabs tile `[start, start+size)` in order; each free segment lies
//!    inside its metaslab and is sector aligned; every tree is coalesced.
//! 3. Deferred ranges are disjoint from free space, and the per-txg deferred
//!    trees are pairwise disjoint with their union equal to `deferred_all`.
//! 4. Each metaslab's cached weight matches its tree, and the weight index
//!    holds exactly one key per metaslab.
//! 5. Transient extents are allocated space (`transient` ⊆ allocated) and
//!    count in `allocated`.
//! 7. A log-class vdev holds transient allocations only (`check_log_class`).
//! 6. No internal inconsistency has been detected (`fault` is empty); paths
//!    that cannot return an error (`txg_synced`) record one there.
//!
//! And per block, checked by [`Allocator::check_copies_apart`] when a block
//! is written (`PoolCore::write_block`) and by the pool checker for every
//! block pointer: its copies are on different vdevs or at least
//! `ditto_min_distance` apart, unless `alloc_ditto` reported otherwise.
//!
//! ## Complexity
//! `alloc`, `free` and `is_allocated` are O(log n) in the number of free
//! segments (the first-fit scan is capped at `FIRST_FIT_MAX_PROBES`), plus
//! O(number of vdevs) for the rotor; an extent spanning metaslabs costs one
//! O(log n) step per metaslab touched.  `txg_synced` is O(log n) per
//! released range.  `checkpoint`, `space` and `check_invariants` are linear.
//! Every loop is bounded by the number of vdevs, metaslabs or ranges.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::range_tree::{RangeTree, HISTOGRAM_BUCKETS};
use crate::vdev::raidz::RaidzGeometry;
use super::spacelog::{
    encoded_records_upper_bound_for, Checkpoint, Extent, TxgRecords, VdevCheckpoint,
};

/// Smallest supported sector shift (512 B).
pub const MIN_ASHIFT: u8 = 9;
/// Largest supported sector shift (64 KiB).
pub const MAX_ASHIFT: u8 = 16;
/// Sector shift used when the caller has no better information (4 KiB).
pub const DEFAULT_ASHIFT: u8 = 12;
/// Metaslab count the default size aims for.
pub const TARGET_METASLABS_PER_VDEV: u64 = 200;
/// Smallest default metaslab (64 MiB): holds a 16 MiB block with 4× parity.
pub const MIN_METASLAB_SHIFT: u8 = 26;
/// Largest default metaslab (16 GiB) unless the count limit forces more.
pub const MAX_METASLAB_SHIFT: u8 = 34;
/// Hard cap on metaslabs per vdev (OpenZFS `zfs_vdev_ms_count_limit`).
pub const MAX_METASLABS_PER_VDEV: u64 = 1 << 17;
/// Requests below this are "small" (see module docs).
pub const DEFAULT_SMALL_BLOCK_BYTES: u64 = 64 << 10;
/// Bytes allocated on one vdev before the rotor moves on.
pub const DEFAULT_ALIQUOT: u64 = 1 << 20;
/// The block size whose parity overhead deflates a RAID-Z vdev's space for
/// writers (policy point 8; OpenZFS's `vdev_deflate_ratio` uses the same
/// 128 KiB, its old largest block).
pub const DEFLATE_BLOCK_BYTES: u64 = 128 << 10;
/// A free in txg N becomes allocatable when txg N + TXG_DEFER_SIZE synced.
pub const TXG_DEFER_SIZE: u64 = 2;
/// Vdev ids must be below this (bounds memory when loading a checkpoint).
pub const MAX_VDEVS: u32 = 1 << 16;

const SMALL: usize = 0;
const LARGE: usize = 1;

/// Copy slots per vdev: a block has at most three copies, and the copies
/// that share a vdev each stream from their own active metaslab and cursor
/// (policy point 7). Slot 0 is a block's first copy on a vdev.
const COPY_SLOTS: usize = 3;
/// Copies of one block on one vdev are placed at least 1/2^3 of the vdev
/// apart when there is room (OpenZFS `ditto_same_vdev_distance_shift`).
pub const DITTO_DISTANCE_SHIFT: u32 = 3;
/// The least distance the allocator accepts before giving up on distance:
/// 1/8 of the vdev, but no more than this.
pub const DITTO_MIN_DISTANCE_BYTES: u64 = 16 << 20;
/// Metaslabs `VdevSpace::alloc_ditto` searches, at most, for one copy at
/// one distance (each search is itself bounded by the range tree's probes).
const DITTO_MAX_PROBES: usize = 64;

/// OpenZFS `zfs_frag_table`: fragmentation % attributed to free space held
/// in segments of 2^9 (512 B) … 2^24 (16 MiB) bytes; larger segments are 0.
const FRAG_TABLE: [u64; 16] = [
    100, 100, 98, 95, 90, 80, 70, 60, 50, 40, 30, 20, 15, 10, 5, 0,
];

/// Errors from the allocator.  Except for `Internal`, a failed call leaves
/// the allocator unchanged (replay/load: see their docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// No allowed vdev has a free segment large enough (gang blocks are not
    /// supported, so fragmentation alone can cause this).
    NoSpace,
    /// Zero-byte allocation request.
    InvalidSize(u64),
    UnknownVdev(u32),
    VdevExists(u32),
    /// Bad vdev geometry or configuration.
    InvalidVdev(String),
    /// Allocation or free in a txg that has already synced.
    TxgNotOpen {
        txg: u64,
        synced: u64,
    },
    /// Extent is zero-length, misaligned or outside the vdev.
    BadExtent {
        vdev: u32,
        offset: u64,
        len: u64,
    },
    /// Free of space that is not (entirely) allocated: a double free.
    NotAllocated {
        vdev: u32,
        offset: u64,
        len: u64,
    },
    /// Checkpoint or log record contradicts the current state.
    Inconsistent(String),
    /// A broken internal invariant (a bug); see `check_invariants`.
    Internal(String),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::NoSpace => write!(f, "no space"),
            AllocError::InvalidSize(s) => write!(f, "invalid allocation size {s}"),
            AllocError::UnknownVdev(v) => write!(f, "unknown vdev {v}"),
            AllocError::VdevExists(v) => write!(f, "vdev {v} already exists"),
            AllocError::InvalidVdev(m) => write!(f, "invalid vdev: {m}"),
            AllocError::TxgNotOpen { txg, synced } => {
                write!(f, "txg {txg} is not open (txg {synced} already synced)")
            }
            AllocError::BadExtent { vdev, offset, len } => {
                write!(f, "bad extent {vdev}:{offset:#x}+{len:#x}")
            }
            AllocError::NotAllocated { vdev, offset, len } => {
                write!(
                    f,
                    "extent {vdev}:{offset:#x}+{len:#x} is not allocated (double free?)"
                )
            }
            AllocError::Inconsistent(m) => write!(f, "inconsistent space state: {m}"),
            AllocError::Internal(m) => write!(f, "internal allocator error: {m}"),
        }
    }
}

impl std::error::Error for AllocError {}

/// Per-vdev allocation parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocConfig {
    /// Sector shift, `MIN_ASHIFT..=MAX_ASHIFT`.
    pub ashift: u8,
    /// Metaslab size is `2^metaslab_shift` bytes.
    pub metaslab_shift: u8,
    /// Requests strictly below this many bytes use the small class.
    pub small_block_bytes: u64,
    /// A RAID-Z vdev's geometry: a block of `n` bytes takes
    /// `geometry.asize(n)` (data, parity and the rounding to `nparity + 1`
    /// sectors), not `n` rounded to a sector (policy point 8).
    pub raidz: Option<RaidzGeometry>,
}

fn metaslab_count(size: u64, shift: u8) -> u64 {
    if shift >= 64 {
        return u64::from(size > 0);
    }
    (size >> shift) + u64::from(size & ((1u64 << shift) - 1) != 0)
}

impl AllocConfig {
    /// The default configuration for a vdev of `size` bytes (see module docs).
    pub fn for_vdev(size: u64, ashift: u8) -> AllocConfig {
        let target = size / TARGET_METASLABS_PER_VDEV;
        let highbit = (64 - target.leading_zeros()) as u8;
        let mut shift = highbit.clamp(MIN_METASLAB_SHIFT, MAX_METASLAB_SHIFT);
        while shift < 63 && metaslab_count(size, shift) > MAX_METASLABS_PER_VDEV {
            shift += 1;
        }
        let sector = 1u64 << ashift.min(MAX_ASHIFT);
        AllocConfig {
            ashift,
            metaslab_shift: shift,
            small_block_bytes: DEFAULT_SMALL_BLOCK_BYTES.max(4 * sector),
            raidz: None,
        }
    }

    /// The configuration of a RAID-Z vdev of `size` bytes (its children's
    /// sectors together) with geometry `g`.
    pub fn for_raidz(size: u64, g: RaidzGeometry) -> AllocConfig {
        let ashift = g.ashift() as u8;
        AllocConfig { raidz: Some(g), ..AllocConfig::for_vdev(size, ashift) }
    }

    /// Bytes a request of `size` bytes takes: rounded up to the sector, or
    /// on RAID-Z its data, parity and skip sectors. `None` on overflow.
    pub fn asize(&self, size: u64) -> Option<u64> {
        let mask = self.sector_size() - 1;
        let len = size.checked_add(mask)? & !mask;
        match self.raidz {
            Some(g) if len > 0 => Some(g.asize(len)),
            _ => Some(len),
        }
    }

    /// What a block of `DEFLATE_BLOCK_BYTES` takes over its own size, as
    /// a fraction (numerator, denominator): 1 except on RAID-Z.
    fn inflation(&self) -> (u64, u64) {
        match self.raidz {
            Some(g) => (g.asize(DEFLATE_BLOCK_BYTES), DEFLATE_BLOCK_BYTES),
            None => (1, 1),
        }
    }

    /// Sector size in bytes.
    pub fn sector_size(&self) -> u64 {
        1u64 << self.ashift.min(MAX_ASHIFT)
    }

    /// Validate this config for a vdev at `[start, start+size)`; returns the
    /// metaslab count.
    fn validate(&self, start: u64, size: u64) -> Result<u64, AllocError> {
        let bad = |m: String| Err(AllocError::InvalidVdev(m));
        if !(MIN_ASHIFT..=MAX_ASHIFT).contains(&self.ashift) {
            return bad(format!(
                "ashift {} outside {MIN_ASHIFT}..={MAX_ASHIFT}",
                self.ashift
            ));
        }
        if self.metaslab_shift < self.ashift || self.metaslab_shift > 63 {
            return bad(format!("metaslab_shift {} invalid", self.metaslab_shift));
        }
        if let Some(g) = self.raidz.filter(|g| g.ashift() != u32::from(self.ashift)) {
            return bad(format!("raidz sectors of ashift {} on a vdev of ashift {}", g.ashift(), self.ashift));
        }
        let mask = self.sector_size() - 1;
        if size == 0 || size & mask != 0 || start & mask != 0 {
            return bad(format!(
                "start {start:#x} / size {size:#x} not sector aligned or empty"
            ));
        }
        if start.checked_add(size).is_none() {
            return bad("start + size overflows".into());
        }
        let count = metaslab_count(size, self.metaslab_shift);
        if count > MAX_METASLABS_PER_VDEV {
            return bad(format!("{count} metaslabs exceed {MAX_METASLABS_PER_VDEV}"));
        }
        Ok(count)
    }
}

/// Where [`Allocator::alloc_ditto`] put a further copy of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ditto {
    pub vdev: u32,
    pub offset: u64,
    /// Allocated length (the request rounded up to the sector size, or its
    /// RAID-Z asize).
    pub len: u64,
    /// False only when the copy had to go nearer to another copy of the
    /// block than [`VdevSpace::ditto_min_distance`] (no room far enough).
    pub apart: bool,
}

/// Bytes between two extents (0 when they touch or overlap).
fn extent_gap(a: (u64, u64), b: (u64, u64)) -> u64 {
    let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
    second.0.saturating_sub(first.0.saturating_add(first.1))
}

/// Where a fresh metaslab's cursors start, in eighths of it: slot 0's small
/// class mid-metaslab (if both classes ever share a metaslab, e.g. on a
/// vdev with one, the large run from the start gets half of it before
/// meeting small blocks), the further copy slots a quarter and three
/// eighths further on, so that streams sharing a metaslab begin apart.
fn initial_cursors(start: u64, len: u64, mask: u64) -> [[u64; 2]; COPY_SLOTS] {
    let at = |eighths: u64| start + ((len / 8 * eighths) & !mask);
    let mut c = [[0; 2]; COPY_SLOTS];
    c[0][SMALL] = at(4);
    c[0][LARGE] = start;
    c[1][SMALL] = at(6);
    c[1][LARGE] = at(2);
    c[2][SMALL] = at(7);
    c[2][LARGE] = at(3);
    c
}

/// Zones a further copy of `len` bytes must keep out of: `[off - gap,
/// off + len + gap)` around each copy `(off, len)`, ordered by start.
fn keep_out(copies: &[(u64, u64)], gap: u64) -> Vec<(u64, u64)> {
    let mut z: Vec<(u64, u64)> = copies.iter().map(|&(o, l)| (o.saturating_sub(gap), o.saturating_add(l).saturating_add(gap))).collect();
    z.sort_unstable();
    z
}

/// `[start, end)` less the (ordered) zones: the windows a copy may lie in.
fn windows(start: u64, end: u64, zones: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(zones.len() + 1);
    let mut at = start;
    for &(lo, hi) in zones {
        if lo > at {
            out.push((at, lo.min(end)));
        }
        at = at.max(hi);
        if at >= end {
            break;
        }
    }
    if at < end {
        out.push((at, end));
    }
    out
}

/// Space totals for one vdev or the whole pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpaceSummary {
    pub size: u64,
    pub allocated: u64,
    /// Allocatable bytes (deferred frees are *not* counted as free).
    pub free: u64,
    /// Freed bytes waiting for their txg + 2 to sync.
    pub deferred: u64,
    /// Largest single allocation that could currently succeed.
    pub largest_free: u64,
    /// 0 (free space in ≥ 16 MiB segments) … 100 (all in ≤ 1 KiB segments);
    /// 0 when nothing is free.  OpenZFS's histogram-based metric.
    pub fragmentation_pct: u32,
    pub metaslab_count: u64,
}

/// [`Allocator::space`] result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpaceStats {
    pub total: SpaceSummary,
    /// `(vdev id, summary)` in vdev id order.
    pub vdevs: Vec<(u32, SpaceSummary)>,
}

/// Fragmentation % from a free-segment histogram (segment-count per
/// power-of-two size): space-weighted average of `FRAG_TABLE`.
fn fragmentation(hist: &[u64; HISTOGRAM_BUCKETS]) -> u32 {
    let (mut total, mut weighted) = (0u128, 0u128);
    for (i, &count) in hist.iter().enumerate() {
        let space = u128::from(count) << i;
        let frag = match i {
            0..=8 => 100,
            9..=24 => FRAG_TABLE[i - 9],
            _ => 0,
        };
        total += space;
        weighted += space * u128::from(frag);
    }
    if total == 0 {
        return 0;
    }
    (weighted / total) as u32
}

/// Ordering key of a metaslab in the weight index: heavier sorts later; among
/// equal weights the lower index sorts later (so "heaviest" prefers low
/// offsets and "lightest" prefers high offsets).
type WeightKey = (u64, u64, u32);

#[derive(Debug, Clone)]
struct Metaslab {
    start: u64,
    size: u64,
    free: RangeTree,
    /// Cached (largest free segment, free bytes).
    weight: (u64, u64),
    /// Where the next allocation of each class starts looking, for each
    /// copy slot (slot 0: a block's first copy on this vdev; slots 1 and 2:
    /// its further copies there, see `VdevSpace::alloc_ditto`).
    cursor: [[u64; 2]; COPY_SLOTS],
}

impl Metaslab {
    fn end(&self) -> u64 {
        self.start + self.size
    }

    fn computed_weight(&self) -> (u64, u64) {
        (self.free.largest().map_or(0, |(_, l)| l), self.free.space())
    }
}

fn weight_key(w: (u64, u64), idx: usize) -> WeightKey {
    (w.0, w.1, u32::MAX - idx as u32)
}

fn key_index(k: &WeightKey) -> usize {
    (u32::MAX - k.2) as usize
}

/// Splits `[cur, end)` at metaslab boundaries: yields `(index, off, len)`.
struct Pieces {
    base: u64,
    shift: u8,
    cur: u64,
    end: u64,
}

impl Iterator for Pieces {
    type Item = (usize, u64, u64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.cur >= self.end {
            return None;
        }
        let idx = (self.cur - self.base) >> self.shift;
        let ms_end = u128::from(self.base) + (u128::from(idx + 1) << self.shift);
        let piece_end = ms_end.min(u128::from(self.end)) as u64;
        let piece = (idx as usize, self.cur, piece_end - self.cur);
        self.cur = piece_end;
        Some(piece)
    }
}

/// Space state of one top-level vdev.
#[derive(Debug, Clone)]
pub struct VdevSpace {
    id: u32,
    start: u64,
    size: u64,
    cfg: AllocConfig,
    metaslabs: Vec<Metaslab>,
    by_weight: BTreeSet<WeightKey>,
    /// Active metaslab of each copy slot and class (`SMALL`, `LARGE`).
    active: [[Option<usize>; 2]; COPY_SLOTS],
    free_bytes: u64,
    allocated: u64,
    /// txg freed in → ranges; released by `release_through`.
    deferred: BTreeMap<u64, RangeTree>,
    /// Union of `deferred`, for O(log n) double-free checks.
    deferred_all: RangeTree,
    /// Transient allocations (log blocks): allocated in memory, free in
    /// checkpoints and never in the space log.
    transient: RangeTree,
    /// In the log class: only transient allocations land here.
    log: bool,
}

impl VdevSpace {
    /// Where the vdev's allocatable space starts, and its bytes.
    pub fn extent(&self) -> (u64, u64) {
        (self.start, self.size)
    }

    /// A vdev whose space is entirely free (`all_free`) or entirely allocated.
    fn new(
        id: u32,
        start: u64,
        size: u64,
        cfg: AllocConfig,
        all_free: bool,
    ) -> Result<Self, AllocError> {
        let count = cfg.validate(start, size)?;
        let ms_size = 1u64 << cfg.metaslab_shift;
        let mut vs = VdevSpace {
            id,
            start,
            size,
            cfg,
            metaslabs: Vec::with_capacity(count as usize),
            by_weight: BTreeSet::new(),
            active: [[None; 2]; COPY_SLOTS],
            free_bytes: 0,
            allocated: size,
            deferred: BTreeMap::new(),
            deferred_all: RangeTree::new(),
            transient: RangeTree::new(),
            log: false,
        };
        let mask = cfg.sector_size() - 1;
        for i in 0..count {
            let ms_start = start + i * ms_size;
            let len = (start + size - ms_start).min(ms_size);
            vs.metaslabs.push(Metaslab {
                start: ms_start,
                size: len,
                free: RangeTree::new(),
                weight: (0, 0),
                cursor: initial_cursors(ms_start, len, mask),
            });
            vs.by_weight.insert(weight_key((0, 0), i as usize));
        }
        if all_free {
            vs.add_free(start, size).map_err(AllocError::Internal)?;
            vs.allocated = 0;
        }
        Ok(vs)
    }

    /// Vdev id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Allocatable range `(start, size)`.
    pub fn range(&self) -> (u64, u64) {
        (self.start, self.size)
    }

    /// The configuration in use.
    pub fn config(&self) -> AllocConfig {
        self.cfg
    }

    /// Number of metaslabs.
    pub fn metaslab_count(&self) -> usize {
        self.metaslabs.len()
    }

    fn sector(&self) -> u64 {
        self.cfg.sector_size()
    }

    /// Apply `f` to metaslab `idx`'s tree, keeping weight index and free
    /// byte count in step with whatever `f` changed.
    fn update_ms<R, E>(
        &mut self,
        idx: usize,
        f: impl FnOnce(&mut RangeTree) -> Result<R, E>,
    ) -> Result<R, E> {
        let ms = &mut self.metaslabs[idx];
        let (old_weight, old_space) = (ms.weight, ms.free.space());
        let result = f(&mut ms.free);
        ms.weight = ms.computed_weight();
        let (new_weight, new_space) = (ms.weight, ms.free.space());
        if new_weight != old_weight {
            self.by_weight.remove(&weight_key(old_weight, idx));
            self.by_weight.insert(weight_key(new_weight, idx));
        }
        self.free_bytes = self.free_bytes - old_space + new_space;
        result
    }

    /// Pieces of an extent that is already known to lie inside the vdev.
    fn pieces(&self, off: u64, len: u64) -> Pieces {
        Pieces {
            base: self.start,
            shift: self.cfg.metaslab_shift,
            cur: off,
            end: off + len,
        }
    }

    fn in_bounds(&self, off: u64, len: u64) -> bool {
        matches!(off.checked_add(len), Some(end) if off >= self.start && end <= self.start + self.size)
    }

    /// Non-empty, sector-aligned and inside the vdev.
    fn check_extent(&self, off: u64, len: u64) -> Result<(), AllocError> {
        let mask = self.sector() - 1;
        if len == 0 || off & mask != 0 || len & mask != 0 || !self.in_bounds(off, len) {
            return Err(AllocError::BadExtent {
                vdev: self.id,
                offset: off,
                len,
            });
        }
        Ok(())
    }

    fn overlaps_free(&self, off: u64, len: u64) -> bool {
        self.pieces(off, len)
            .any(|(i, o, l)| self.metaslabs[i].free.overlaps(o, l))
    }

    fn is_free(&self, off: u64, len: u64) -> bool {
        self.pieces(off, len)
            .all(|(i, o, l)| self.metaslabs[i].free.contains(o, l))
    }

    /// Make an in-bounds range free (all or nothing).
    fn add_free(&mut self, off: u64, len: u64) -> Result<(), String> {
        if self.overlaps_free(off, len) {
            return Err(format!(
                "vdev {}: {off:#x}+{len:#x} is already free",
                self.id
            ));
        }
        for (i, o, l) in self.pieces(off, len) {
            self.update_ms(i, |t| t.add(o, l))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Take an in-bounds range out of free space (all or nothing).
    fn take_free(&mut self, off: u64, len: u64) -> Result<(), String> {
        if !self.is_free(off, len) {
            return Err(format!("vdev {}: {off:#x}+{len:#x} is not free", self.id));
        }
        for (i, o, l) in self.pieces(off, len) {
            self.update_ms(i, |t| t.remove(o, l))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Allocate `size` bytes rounded up to the sector size (on RAID-Z, its
    /// asize); `None` if this vdev has no segment large enough.
    fn alloc(&mut self, size: u64) -> Result<Option<(u64, u64)>, AllocError> {
        let Some(len) = self.cfg.asize(size) else {
            return Ok(None);
        };
        let class = self.class_of(len);
        if let Some(idx) = self.active[0][class] {
            if let Some(off) = self.alloc_in(idx, class, len)? {
                return Ok(Some((off, len)));
            }
        }
        let Some(idx) = self.select(class, len) else {
            return Ok(None);
        };
        self.active[0][class] = Some(idx);
        Ok(self.alloc_in(idx, class, len)?.map(|off| (off, len)))
    }

    /// Cursor first-fit inside metaslab `idx`.
    fn alloc_in(&mut self, idx: usize, class: usize, len: u64) -> Result<Option<u64>, AllocError> {
        let sector = self.sector();
        let ms = &self.metaslabs[idx];
        if ms.weight.0 < len {
            return Ok(None);
        }
        let Some(off) = ms.free.first_fit_from(ms.cursor[0][class], len, sector) else {
            return Ok(None);
        };
        self.take_at(idx, class, 0, off, len)?;
        Ok(Some(off))
    }

    /// How far apart (bytes between their extents) the copies of one block
    /// on this vdev are placed when there is room: 1/8 of the vdev.
    pub fn ditto_distance(&self) -> u64 {
        self.size >> DITTO_DISTANCE_SHIFT
    }

    /// The least distance between copies of one block on this vdev the
    /// allocator accepts before placing a copy wherever it fits: 1/8 of
    /// the vdev, at most [`DITTO_MIN_DISTANCE_BYTES`].
    pub fn ditto_min_distance(&self) -> u64 {
        self.ditto_distance().min(DITTO_MIN_DISTANCE_BYTES)
    }

    fn class_of(&self, len: u64) -> usize {
        if len < self.cfg.small_block_bytes {
            SMALL
        } else {
            LARGE
        }
    }

    /// Allocates a further copy of a block whose copies on this vdev so far
    /// are `others` (offset, len): `size` bytes (rounded up to the sector)
    /// lying at least `gap` bytes from each of them (policy point 7). The
    /// copy takes slot `others.len()`, whose own active metaslab and cursor
    /// keep one txg's further copies streaming as its first copies do.
    fn alloc_ditto(&mut self, size: u64, others: &[(u64, u64)], gap: u64) -> Result<Option<(u64, u64)>, AllocError> {
        let slot = others.len();
        assert!((1..COPY_SLOTS).contains(&slot), "vdev {}: a further copy with {} copies before it", self.id, slot);
        let Some(len) = self.cfg.asize(size) else {
            return Ok(None);
        };
        let class = self.class_of(len);
        let zones = keep_out(others, gap);
        if let Some(idx) = self.active[slot][class] {
            let ms = &self.metaslabs[idx];
            let w = windows(ms.start, ms.end(), &zones);
            if let Some(off) = self.alloc_in_windows(idx, class, slot, len, &w)? {
                return Ok(Some((off, len)));
            }
        }
        let mut probes = 0;
        for idx in self.ditto_candidates(class, slot, len) {
            let ms = &self.metaslabs[idx];
            let w = windows(ms.start, ms.end(), &zones);
            if w.is_empty() {
                continue;
            }
            probes += 1;
            if probes > DITTO_MAX_PROBES {
                break;
            }
            if let Some(off) = self.alloc_in_windows(idx, class, slot, len, &w)? {
                self.active[slot][class] = Some(idx);
                return Ok(Some((off, len)));
            }
        }
        Ok(None)
    }

    /// Metaslabs that can hold `len` bytes, in the class's order of
    /// preference (policy point 4); those active for another copy slot come
    /// last, as their own streams run there.
    fn ditto_candidates(&self, class: usize, slot: usize, len: u64) -> Vec<usize> {
        let fitting: Vec<usize> = if class == LARGE {
            self.by_weight.iter().rev().take_while(|k| k.0 >= len).map(key_index).collect()
        } else {
            self.by_weight.range((len, 0, 0)..).map(key_index).collect()
        };
        let busy = |i: usize| self.active.iter().enumerate().any(|(s, a)| s != slot && a.contains(&Some(i)));
        let (idle, busy): (Vec<usize>, Vec<usize>) = fitting.into_iter().partition(|&i| !busy(i));
        idle.into_iter().chain(busy).collect()
    }

    /// First fit of `len` bytes inside the windows of metaslab `idx`: from
    /// the cursor of `slot` and `class` on, then from each window's start.
    fn alloc_in_windows(&mut self, idx: usize, class: usize, slot: usize, len: u64, windows: &[(u64, u64)]) -> Result<Option<u64>, AllocError> {
        let sector = self.sector();
        let ms = &self.metaslabs[idx];
        if ms.weight.0 < len {
            return Ok(None);
        }
        let cursor = ms.cursor[slot][class];
        let from_cursor = windows.iter().filter(|w| w.1 > cursor).map(|&(a, b)| (a.max(cursor), a, b));
        let from_start = windows.iter().map(|&(a, b)| (a, a, b));
        let found = from_cursor.chain(from_start).find_map(|(from, a, b)| ms.free.first_fit_between(from, a, b, len, sector));
        let Some(off) = found else { return Ok(None) };
        debug_assert!(windows.iter().any(|&(a, b)| a <= off && off + len <= b), "vdev {}: copy at {off:#x} outside its windows", self.id);
        self.take_at(idx, class, slot, off, len)?;
        Ok(Some(off))
    }

    /// Allocates `[off, off+len)`, which a first-fit search of metaslab
    /// `idx` returned, and moves the cursor of `slot` and `class` past it.
    fn take_at(&mut self, idx: usize, class: usize, slot: usize, off: u64, len: u64) -> Result<(), AllocError> {
        self.update_ms(idx, |t| t.remove(off, len)).map_err(|e| {
            AllocError::Internal(format!(
                "vdev {}: first fit returned unusable range: {e}",
                self.id
            ))
        })?;
        self.metaslabs[idx].cursor[slot][class] = off + len;
        self.allocated += len;
        Ok(())
    }

    /// Pick a metaslab for `class` that can hold `len` (policy point 4).
    fn select(&self, class: usize, len: u64) -> Option<usize> {
        let mut cands: [Option<&WeightKey>; 2] = [None, None];
        if class == LARGE {
            let heaviest = self.by_weight.iter().rev().take_while(|k| k.0 >= len);
            cands
                .iter_mut()
                .zip(heaviest)
                .for_each(|(c, k)| *c = Some(k));
        } else {
            let lightest_fitting = self.by_weight.range((len, 0, 0)..);
            cands
                .iter_mut()
                .zip(lightest_fitting)
                .for_each(|(c, k)| *c = Some(k));
        }
        let other = self.active[0][1 - class];
        let first = key_index(cands[0]?);
        if Some(first) != other {
            return Some(first);
        }
        Some(cands[1].map_or(first, key_index))
    }

    /// Defer a free of allocated space until `txg` + 2 has synced.
    fn defer_free(&mut self, off: u64, len: u64, txg: u64) -> Result<(), AllocError> {
        self.check_extent(off, len)?;
        if self.overlaps_free(off, len) || self.deferred_all.overlaps(off, len) {
            return Err(AllocError::NotAllocated {
                vdev: self.id,
                offset: off,
                len,
            });
        }
        let internal = |e: super::range_tree::RangeError| AllocError::Internal(e.to_string());
        self.deferred_all.add(off, len).map_err(internal)?;
        self.deferred
            .entry(txg)
            .or_default()
            .add(off, len)
            .map_err(internal)?;
        self.allocated -= len;
        Ok(())
    }

    /// Make every deferral with txg ≤ `limit` allocatable.
    fn release_through(&mut self, limit: u64) -> Result<(), String> {
        let keep = match limit.checked_add(1) {
            Some(first_kept) => self.deferred.split_off(&first_kept),
            None => BTreeMap::new(),
        };
        let release = std::mem::replace(&mut self.deferred, keep);
        for tree in release.values() {
            for (off, len) in tree.iter() {
                self.deferred_all
                    .remove(off, len)
                    .map_err(|e| e.to_string())?;
                self.add_free(off, len)?;
            }
        }
        Ok(())
    }

    /// Replay an allocation record: the extent must be entirely free.
    fn replay_alloc(&mut self, off: u64, len: u64) -> Result<(), AllocError> {
        self.check_extent(off, len)
            .map_err(|e| AllocError::Inconsistent(format!("alloc record: {e}")))?;
        self.take_free(off, len).map_err(AllocError::Inconsistent)?;
        self.allocated += len;
        Ok(())
    }

    /// A free extent becomes a transient allocation (`claim_transient`).
    fn claim_transient(&mut self, off: u64, len: u64) -> Result<(), AllocError> {
        self.check_extent(off, len)?;
        self.take_free(off, len).map_err(AllocError::Inconsistent)?;
        self.allocated += len;
        self.transient.add(off, len).map_err(|e| AllocError::Internal(e.to_string()))
    }

    /// A transient allocation is freed in `txg` (deferred, unrecorded).
    fn free_transient(&mut self, off: u64, len: u64, txg: u64) -> Result<(), AllocError> {
        if !self.transient.contains(off, len) {
            return Err(AllocError::NotAllocated { vdev: self.id, offset: off, len });
        }
        self.transient.remove(off, len).map_err(|e| AllocError::Internal(e.to_string()))?;
        self.defer_free(off, len, txg)
    }

    /// Fill a freshly created all-allocated vdev from its checkpoint.
    fn load(&mut self, v: &VdevCheckpoint) -> Result<(), AllocError> {
        let bad = |m: String| AllocError::Inconsistent(format!("checkpoint vdev {}: {m}", v.vdev));
        for &(off, len) in &v.free {
            self.check_extent(off, len)
                .map_err(|e| bad(e.to_string()))?;
            self.add_free(off, len).map_err(bad)?;
            self.allocated -= len;
        }
        for &(txg, off, len) in &v.deferred {
            self.check_extent(off, len)
                .map_err(|e| bad(e.to_string()))?;
            if self.overlaps_free(off, len) {
                return Err(bad(format!(
                    "deferred {off:#x}+{len:#x} overlaps free space"
                )));
            }
            self.deferred_all
                .add(off, len)
                .map_err(|e| bad(format!("deferred: {e}")))?;
            self.deferred
                .entry(txg)
                .or_default()
                .add(off, len)
                .map_err(|e| bad(e.to_string()))?;
            self.allocated -= len;
        }
        Ok(())
    }

    /// Invariant 7: a log-class vdev's allocated bytes are all transient
    /// (`alloc` and `alloc_ditto` skip the class, so only `alloc_transient`
    /// and `claim_transient` allocate there).
    fn check_log_class(&self) -> Result<(), String> {
        if self.log && self.allocated != self.transient.space() {
            return Err(format!("a log vdev with {} bytes allocated, {} of them log blocks", self.allocated, self.transient.space()));
        }
        Ok(())
    }

    fn checkpoint(&self) -> VdevCheckpoint {
        let mut free: Vec<(u64, u64)> = Vec::new();
        let mut pieces: Vec<(u64, u64)> = self.metaslabs.iter().flat_map(|ms| ms.free.iter()).collect();
        if !self.transient.is_empty() {
            // Log blocks are free on disk (module docs, "Transient allocations").
            pieces.extend(self.transient.iter());
            pieces.sort_unstable();
        }
        for (s, l) in pieces {
            match free.last_mut() {
                Some(last) if last.0 + last.1 == s => last.1 += l,
                _ => free.push((s, l)),
            }
        }
        let deferred = self
            .deferred
            .iter()
            .flat_map(|(&txg, t)| t.iter().map(move |(o, l)| (txg, o, l)))
            .collect();
        VdevCheckpoint {
            vdev: self.id,
            start: self.start,
            size: self.size,
            ashift: self.cfg.ashift,
            free,
            deferred,
        }
    }

    fn histogram(&self) -> [u64; HISTOGRAM_BUCKETS] {
        let mut hist = [0u64; HISTOGRAM_BUCKETS];
        for ms in &self.metaslabs {
            for (h, c) in hist.iter_mut().zip(ms.free.histogram()) {
                *h += c;
            }
        }
        hist
    }

    /// (free, deferred) bytes that blocks of each piece size surely fit
    /// into (see `RangeTree::space_by_piece`); on RAID-Z, the data those
    /// bytes hold once parity is taken (deflated, policy point 8).
    fn space_by_piece<const N: usize>(&self, min_shift: u32) -> ([u64; N], [u64; N]) {
        let mut free = [0u64; N];
        for ms in &self.metaslabs {
            for (f, x) in free.iter_mut().zip(ms.free.space_by_piece::<N>(min_shift)) {
                *f = f.saturating_add(x);
            }
        }
        let mut deferred = self.deferred_all.space_by_piece::<N>(min_shift);
        let (num, den) = self.cfg.inflation();
        for x in free.iter_mut().chain(deferred.iter_mut()) {
            *x = (u128::from(*x) * u128::from(den) / u128::from(num)) as u64;
        }
        (free, deferred)
    }

    fn summary(&self) -> SpaceSummary {
        SpaceSummary {
            size: self.size,
            allocated: self.allocated,
            free: self.free_bytes,
            deferred: self.deferred_all.space(),
            largest_free: self.by_weight.iter().next_back().map_or(0, |k| k.0),
            fragmentation_pct: fragmentation(&self.histogram()),
            metaslab_count: self.metaslabs.len() as u64,
        }
    }

    /// What a sequential rebuild copies (`pool::rebuild`): every range of
    /// the vdev that is not free — allocated or deferred — except the
    /// transient allocations (intent-log blocks, written through the tree
    /// as they are made), in offset order, coalesced.
    fn rebuild_segments(&self) -> Vec<(u64, u64)> {
        let mut used = Vec::new();
        let mut cursor = self.start;
        for ms in &self.metaslabs {
            for (off, len) in ms.free.iter() {
                if off > cursor {
                    used.push((cursor, off - cursor));
                }
                cursor = off + len;
            }
        }
        if cursor < self.start + self.size {
            used.push((cursor, self.start + self.size - cursor));
        }
        subtract(&used, &self.transient)
    }

    fn is_allocated(&self, off: u64, len: u64) -> bool {
        len > 0
            && self.in_bounds(off, len)
            && !self.overlaps_free(off, len)
            && !self.deferred_all.overlaps(off, len)
    }

    /// Invariants 1–4 of the module docs.
    fn check(&self) -> Result<(), String> {
        self.check_metaslabs()?;
        self.check_deferred()?;
        for (off, len) in self.transient.iter() {
            if self.overlaps_free(off, len) || self.deferred_all.overlaps(off, len) {
                return Err(format!("transient {off:#x}+{len:#x} is not allocated"));
            }
        }
        let total = u128::from(self.free_bytes)
            + u128::from(self.allocated)
            + u128::from(self.deferred_all.space());
        if total != u128::from(self.size) {
            return Err(format!(
                "free {} + allocated {} + deferred {} != size {}",
                self.free_bytes,
                self.allocated,
                self.deferred_all.space(),
                self.size
            ));
        }
        if self
            .active
            .iter()
            .flatten()
            .flatten()
            .any(|&i| i >= self.metaslabs.len())
        {
            return Err("active metaslab index out of range".into());
        }
        Ok(())
    }

    fn check_metaslabs(&self) -> Result<(), String> {
        let (mask, mut expect_start, mut free) = (self.sector() - 1, self.start, 0u64);
        if self.by_weight.len() != self.metaslabs.len() {
            return Err("weight index size != metaslab count".into());
        }
        for (i, ms) in self.metaslabs.iter().enumerate() {
            if ms.start != expect_start || ms.size == 0 || ms.size > 1u64 << self.cfg.metaslab_shift
            {
                return Err(format!("metaslab {i} does not tile the vdev"));
            }
            ms.free.check().map_err(|e| format!("metaslab {i}: {e}"))?;
            for (s, l) in ms.free.iter() {
                if s < ms.start || s + l > ms.end() || s & mask != 0 || l & mask != 0 {
                    return Err(format!("metaslab {i}: segment {s:#x}+{l:#x} misplaced"));
                }
            }
            if ms.weight != ms.computed_weight()
                || !self.by_weight.contains(&weight_key(ms.weight, i))
            {
                return Err(format!("metaslab {i}: weight inconsistent"));
            }
            free += ms.free.space();
            expect_start = ms.end();
        }
        if expect_start != self.start + self.size || free != self.free_bytes {
            return Err("metaslabs do not cover the vdev or free count drifted".into());
        }
        Ok(())
    }

    fn check_deferred(&self) -> Result<(), String> {
        self.deferred_all.check()?;
        let mut union = RangeTree::new();
        for (txg, tree) in &self.deferred {
            tree.check()?;
            for (o, l) in tree.iter() {
                union
                    .add(o, l)
                    .map_err(|e| format!("deferred txg {txg} overlaps another txg: {e}"))?;
            }
        }
        if union != self.deferred_all {
            return Err("deferred_all differs from union of per-txg deferrals".into());
        }
        for (o, l) in self.deferred_all.iter() {
            if self.check_extent(o, l).is_err() || self.overlaps_free(o, l) {
                return Err(format!(
                    "deferred {o:#x}+{l:#x} out of bounds or overlaps free space"
                ));
            }
        }
        Ok(())
    }
}

/// `segs` (sorted, disjoint) without the ranges of `tree`.
fn subtract(segs: &[(u64, u64)], tree: &RangeTree) -> Vec<(u64, u64)> {
    if tree.is_empty() {
        return segs.to_vec();
    }
    let holes: Vec<(u64, u64)> = tree.iter().collect();
    let mut out = Vec::with_capacity(segs.len() + holes.len());
    let mut h = 0;
    for &(start, len) in segs {
        let (mut cur, end) = (start, start + len);
        while h < holes.len() && holes[h].0 + holes[h].1 <= cur {
            h += 1;
        }
        let mut k = h;
        while k < holes.len() && holes[k].0 < end {
            let (ho, hl) = holes[k];
            if ho > cur {
                out.push((cur, ho - cur));
            }
            cur = cur.max(ho + hl);
            k += 1;
        }
        if cur < end {
            out.push((cur, end - cur));
        }
    }
    out
}

/// Records collected for one txg, per vdev, coalesced.
#[derive(Debug, Clone, Default)]
struct PendingTxg {
    allocs: BTreeMap<u32, RangeTree>,
    frees: BTreeMap<u32, RangeTree>,
}

fn flatten(m: &BTreeMap<u32, RangeTree>) -> Vec<Extent> {
    m.iter()
        .flat_map(|(&vdev, t)| {
            t.iter()
                .map(move |(offset, len)| Extent { vdev, offset, len })
        })
        .collect()
}

/// The pool-wide allocator (see module docs).
#[derive(Debug, Clone)]
pub struct Allocator {
    vdevs: Vec<Option<Box<VdevSpace>>>,
    rotor: usize,
    /// Bytes allocated since the rotor last moved.
    rotor_bytes: u64,
    aliquot: u64,
    pending: BTreeMap<u64, PendingTxg>,
    /// Highest txg passed to `txg_synced` (or implied by import).
    synced_txg: Option<u64>,
    /// Highest txg seen anywhere; becomes `Checkpoint::txg`.
    hwm_txg: u64,
    /// Txg of the checkpoint loaded or the last record set replayed.
    replayed_txg: Option<u64>,
    /// First internal inconsistency detected on a path that cannot fail.
    fault: Option<String>,
    /// While a scan reads and repairs the blocks of txg N's tree: frees of
    /// txgs after N stay deferred (`hold_frees_after`), so no block of that
    /// tree is reallocated under the scan. How many scans hold, and N.
    scan_hold: Option<(u32, u64)>,
}

impl Default for Allocator {
    fn default() -> Self {
        Self::new()
    }
}

impl Allocator {
    /// An empty pool (no vdevs).
    pub fn new() -> Self {
        Allocator {
            vdevs: Vec::new(),
            rotor: 0,
            rotor_bytes: 0,
            aliquot: DEFAULT_ALIQUOT,
            pending: BTreeMap::new(),
            synced_txg: None,
            hwm_txg: 0,
            replayed_txg: None,
            fault: None,
            scan_hold: None,
        }
    }

    /// Bytes allocated on one vdev before the rotor moves on.
    pub fn aliquot(&self) -> u64 {
        self.aliquot
    }

    /// Change the aliquot (minimum 1 byte).
    pub fn set_aliquot(&mut self, bytes: u64) {
        self.aliquot = bytes.max(1);
    }

    /// Add an entirely free top-level vdev with the default configuration.
    pub fn add_vdev(
        &mut self,
        vdev: u32,
        start: u64,
        size: u64,
        ashift: u8,
    ) -> Result<(), AllocError> {
        self.add_vdev_with_config(vdev, start, size, AllocConfig::for_vdev(size, ashift))
    }

    /// Add an entirely free top-level vdev with an explicit configuration.
    pub fn add_vdev_with_config(
        &mut self,
        vdev: u32,
        start: u64,
        size: u64,
        cfg: AllocConfig,
    ) -> Result<(), AllocError> {
        if vdev >= MAX_VDEVS {
            return Err(AllocError::InvalidVdev(format!(
                "vdev id {vdev} >= {MAX_VDEVS}"
            )));
        }
        if self.vdev(vdev).is_some() {
            return Err(AllocError::VdevExists(vdev));
        }
        let vs = VdevSpace::new(vdev, start, size, cfg, true)?;
        let idx = vdev as usize;
        if self.vdevs.len() <= idx {
            self.vdevs.resize_with(idx + 1, || None);
        }
        self.vdevs[idx] = Some(Box::new(vs));
        Ok(())
    }

    /// Ids of all vdevs, ascending.
    pub fn vdev_ids(&self) -> Vec<u32> {
        self.vdevs.iter().flatten().map(|v| v.id).collect()
    }

    /// One vdev's space state.
    pub fn vdev(&self, vdev: u32) -> Option<&VdevSpace> {
        self.vdevs.get(vdev as usize).and_then(|v| v.as_deref())
    }

    fn vdev_mut(&mut self, vdev: u32) -> Result<&mut VdevSpace, AllocError> {
        self.vdevs
            .get_mut(vdev as usize)
            .and_then(|v| v.as_deref_mut())
            .ok_or(AllocError::UnknownVdev(vdev))
    }

    fn check_open_txg(&self, txg: u64) -> Result<(), AllocError> {
        match self.synced_txg {
            Some(synced) if txg <= synced => Err(AllocError::TxgNotOpen { txg, synced }),
            _ => Ok(()),
        }
    }

    /// Allocate `size` bytes (rounded up to the chosen vdev's sector size;
    /// on RAID-Z, its asize: policy point 8) in txg `txg`, never on a vdev listed in `exclude`.  Returns
    /// `(vdev, offset, allocated len)`.  See the module docs for the policy.
    pub fn alloc(
        &mut self,
        size: u64,
        txg: u64,
        exclude: &[u32],
    ) -> Result<(u32, u64, u64), AllocError> {
        if size == 0 {
            return Err(AllocError::InvalidSize(size));
        }
        self.check_open_txg(txg)?;
        let n = self.vdevs.len();
        let rotor = if self.rotor < n { self.rotor } else { 0 };
        let mut rotor_failed = false;
        for step in 0..n {
            let idx = (rotor + step) % n;
            let Some(vs) = self.vdevs[idx].as_deref_mut() else {
                rotor_failed |= step == 0;
                continue;
            };
            if vs.log {
                // Not the normal class: like a missing vdev, the rotor moves on.
                rotor_failed |= step == 0;
                continue;
            }
            if exclude.contains(&vs.id) {
                continue;
            }
            match vs.alloc(size)? {
                Some((off, len)) => {
                    let vdev = vs.id;
                    self.advance_rotor(idx, rotor, rotor_failed, len);
                    self.hwm_txg = self.hwm_txg.max(txg);
                    self.record(txg, vdev, off, len, true)?;
                    return Ok((vdev, off, len));
                }
                None => rotor_failed |= step == 0,
            }
        }
        Err(AllocError::NoSpace)
    }

    /// Allocates a further copy (the second or third) of a block whose
    /// copies so far are `placed` (vdev, offset, len), in txg `txg`
    /// (policy point 7): on a vdev holding none of them if one has room (as
    /// `alloc` does); else on one that does, at least `ditto_distance` from
    /// each copy there, failing that at least `ditto_min_distance`, and
    /// failing that wherever it fits (then `apart` is false).
    pub fn alloc_ditto(&mut self, size: u64, txg: u64, placed: &[(u32, u64, u64)]) -> Result<Ditto, AllocError> {
        assert!((1..COPY_SLOTS).contains(&placed.len()), "a further copy after {} copies", placed.len());
        let mut used: Vec<u32> = placed.iter().map(|p| p.0).collect();
        used.sort_unstable();
        used.dedup();
        match self.alloc(size, txg, &used) {
            Ok((vdev, offset, len)) => return Ok(Ditto { vdev, offset, len, apart: true }),
            Err(AllocError::NoSpace) => {}
            Err(e) => return Err(e),
        }
        for far in [true, false] {
            for &v in &used {
                let vs = self.vdev_mut(v)?;
                let gap = if far { vs.ditto_distance() } else { vs.ditto_min_distance() };
                if !far && gap == vs.ditto_distance() {
                    continue; // already tried
                }
                let others: Vec<(u64, u64)> = placed.iter().filter(|p| p.0 == v).map(|p| (p.1, p.2)).collect();
                if let Some((offset, len)) = vs.alloc_ditto(size, &others, gap)? {
                    return self.placed_ditto(v, offset, len, txg, true);
                }
            }
        }
        for &v in &used {
            let others: Vec<(u64, u64)> = placed.iter().filter(|p| p.0 == v).map(|p| (p.1, p.2)).collect();
            let vs = self.vdev_mut(v)?;
            if let Some((offset, len)) = vs.alloc_ditto(size, &others, 0)? {
                let min = vs.ditto_min_distance();
                let apart = others.iter().all(|&o| extent_gap(o, (offset, len)) >= min);
                return self.placed_ditto(v, offset, len, txg, apart);
            }
        }
        Err(AllocError::NoSpace)
    }

    /// Bookkeeping of a further copy placed on a vdev that holds another.
    fn placed_ditto(&mut self, vdev: u32, offset: u64, len: u64, txg: u64, apart: bool) -> Result<Ditto, AllocError> {
        // It counts towards the vdev's turn if the rotor is there, and
        // never moves the rotor elsewhere.
        self.advance_rotor(vdev as usize, self.rotor, false, len);
        self.hwm_txg = self.hwm_txg.max(txg);
        self.record(txg, vdev, offset, len, true)?;
        Ok(Ditto { vdev, offset, len, apart })
    }

    /// The invariant of ditto placement (policy point 7): the copies of one
    /// block, `(vdev, offset, len)` each, are on different vdevs or at least
    /// `ditto_min_distance` of their vdev apart (bytes between extents). It
    /// holds for every block unless `alloc_ditto` returned `apart: false`
    /// (a vdev too full or fragmented to keep the distance).
    pub fn check_copies_apart(&self, copies: &[(u32, u64, u64)]) -> Result<(), String> {
        for (i, a) in copies.iter().enumerate() {
            for b in copies[i + 1..].iter().filter(|b| b.0 == a.0) {
                let min = self.vdev(a.0).map_or(0, VdevSpace::ditto_min_distance);
                let gap = extent_gap((a.1, a.2), (b.1, b.2));
                if gap < min {
                    return Err(format!(
                        "copies at {}:{:#x} and {}:{:#x} are {} bytes apart, less than the {} required",
                        a.0, a.1, b.0, b.1, gap, min
                    ));
                }
            }
        }
        Ok(())
    }

    /// Rotor bookkeeping after allocating `len` bytes on vdev index `idx`.
    fn advance_rotor(&mut self, idx: usize, rotor: usize, rotor_failed: bool, len: u64) {
        if idx != rotor {
            if !rotor_failed {
                // The rotor vdev was only excluded (e.g. second copy of a
                // block): its turn is not over.
                return;
            }
            self.rotor = idx;
            self.rotor_bytes = 0;
        }
        self.rotor_bytes = self.rotor_bytes.saturating_add(len);
        if self.rotor_bytes >= self.quota(idx) {
            self.rotor = (idx + 1) % self.vdevs.len().max(1);
            self.rotor_bytes = 0;
        }
    }

    /// `aliquot + bias` for vdev index `idx` (OpenZFS `mg_bias`).
    fn quota(&self, idx: usize) -> u64 {
        let (mut total, mut groups) = (0i128, 0i128);
        for vs in self.vdevs.iter().flatten().filter(|v| !v.log) {
            total += i128::from(vs.free_bytes);
            groups += 1;
        }
        let mine = self.vdevs[idx]
            .as_deref()
            .map_or(0, |v| i128::from(v.free_bytes));
        let ratio = mine * groups * 100 / (total + 1);
        let aliquot = i128::from(self.aliquot);
        let bias = (ratio - 100) * aliquot / 100;
        (aliquot + bias).clamp(1, i128::from(u64::MAX)) as u64
    }

    fn record(
        &mut self,
        txg: u64,
        vdev: u32,
        off: u64,
        len: u64,
        alloc: bool,
    ) -> Result<(), AllocError> {
        let p = self.pending.entry(txg).or_default();
        let map = if alloc { &mut p.allocs } else { &mut p.frees };
        if let Err(e) = map.entry(vdev).or_default().add(off, len) {
            let msg = format!("txg {txg} record for vdev {vdev}: {e}");
            self.fault.get_or_insert_with(|| msg.clone());
            return Err(AllocError::Internal(msg));
        }
        Ok(())
    }

    /// Free an allocated extent in txg `txg`.  The space stays deferred until
    /// `txg_synced(txg + 2)`.  Errors (nothing changed) if the extent is
    /// misaligned, outside the vdev, or not entirely allocated.
    pub fn free(&mut self, vdev: u32, offset: u64, len: u64, txg: u64) -> Result<(), AllocError> {
        self.check_open_txg(txg)?;
        self.vdev_mut(vdev)?.defer_free(offset, len, txg)?;
        self.hwm_txg = self.hwm_txg.max(txg);
        self.record(txg, vdev, offset, len, false)
    }

    /// `txg` has fully synced: frees of `txg - 2` and earlier become
    /// allocatable, and `txg` and earlier are closed for alloc/free.
    /// Idempotent; an older `txg` than already seen releases nothing new.
    pub fn txg_synced(&mut self, txg: u64) {
        self.synced_txg = Some(self.synced_txg.map_or(txg, |s| s.max(txg)));
        self.hwm_txg = self.hwm_txg.max(txg);
        if let Some(limit) = txg.checked_sub(TXG_DEFER_SIZE) {
            let limit = self.scan_hold.map_or(limit, |(_, held)| limit.min(held));
            self.release_through(limit);
        }
    }

    /// A scan is about to read (and repair in place) the blocks of txg
    /// `txg`'s tree, which later txgs may free: until the matching
    /// `release_frees_hold`, frees of txgs after `txg` stay deferred, so
    /// none of those blocks is reallocated and overwritten under the scan.
    /// Several holds keep the oldest txg.
    pub fn hold_frees_after(&mut self, txg: u64) {
        self.scan_hold = Some(match self.scan_hold {
            Some((n, held)) => (n + 1, held.min(txg)),
            None => (1, txg),
        });
    }

    /// A sequential rebuild is about to copy the ranges that are not free
    /// now (`rebuild_segments`): until the matching `release_frees_hold`,
    /// no deferred free is released, so none of those ranges becomes
    /// allocatable (and rewritten) under the copy.
    pub fn hold_all_frees(&mut self) {
        let held = self.synced_txg.map_or(0, |t| t.saturating_sub(TXG_DEFER_SIZE));
        self.hold_frees_after(held);
    }

    /// The ranges of vdev `vdev` a sequential rebuild copies (see
    /// `VdevSpace::rebuild_segments`); None for an unknown vdev.
    pub fn rebuild_segments(&self, vdev: u32) -> Option<Vec<(u64, u64)>> {
        self.vdev(vdev).map(|v| v.rebuild_segments())
    }

    /// Ends one `hold_frees_after`; with none left, the frees it kept
    /// deferred become allocatable as `txg_synced` would have made them.
    pub fn release_frees_hold(&mut self) {
        self.scan_hold = match self.scan_hold {
            Some((n, held)) if n > 1 => Some((n - 1, held)),
            Some(_) => None,
            None => panic!("release_frees_hold without a hold"),
        };
        if self.scan_hold.is_none() {
            if let Some(limit) = self.synced_txg.and_then(|t| t.checked_sub(TXG_DEFER_SIZE)) {
                self.release_through(limit);
            }
        }
    }

    fn release_through(&mut self, limit: u64) {
        for vs in self.vdevs.iter_mut().flatten() {
            if let Err(e) = vs.release_through(limit) {
                self.fault.get_or_insert(e);
            }
        }
    }

    /// Number of (coalesced) allocation and free extents recorded for `txg`.
    pub fn pending_record_counts(&self, txg: u64) -> (usize, usize) {
        self.pending.get(&txg).map_or((0, 0), |p| {
            let count = |m: &BTreeMap<u32, RangeTree>| m.values().map(RangeTree::count).sum();
            (count(&p.allocs), count(&p.frees))
        })
    }

    /// Bytes that `encode_records(take_records(txg))` will need at most after
    /// `extra_extents` further allocations/frees in `txg` (e.g. the log block
    /// itself).  Much tighter than the count-only bound.
    pub fn records_upper_bound(&self, txg: u64, extra_extents: usize) -> usize {
        let snapshot = self
            .pending
            .get(&txg)
            .map_or_else(TxgRecords::default, |p| TxgRecords {
                txg,
                allocs: flatten(&p.allocs),
                frees: flatten(&p.frees),
            });
        let unit_cap = |vdev: u32| self.vdev(vdev).map_or(0, |v| u32::from(v.cfg.ashift));
        encoded_records_upper_bound_for(&snapshot, extra_extents, &unit_cap)
    }

    /// Everything allocated and freed in `txg` so far, sorted by (vdev,
    /// offset) with adjacent extents coalesced.  The records are forgotten.
    pub fn take_records(&mut self, txg: u64) -> TxgRecords {
        self.hwm_txg = self.hwm_txg.max(txg);
        let p = self.pending.remove(&txg).unwrap_or_default();
        TxgRecords {
            txg,
            allocs: flatten(&p.allocs),
            frees: flatten(&p.frees),
        }
    }

    /// Rebuild the state from a checkpoint (import step 1).  Every vdev in
    /// the checkpoint is replaced by its checkpointed state; a vdev already
    /// added with identical geometry keeps its configuration, others get the
    /// default.  Vdevs already added but absent from the checkpoint (added to
    /// the pool after it was written) are kept as they are.  Pending records,
    /// rotor and cursors are reset.  On error nothing is changed.
    pub fn load_checkpoint(&mut self, cp: &Checkpoint) -> Result<(), AllocError> {
        let mut vdevs: Vec<Option<Box<VdevSpace>>> = Vec::new();
        for v in &cp.vdevs {
            if v.vdev >= MAX_VDEVS {
                return Err(AllocError::Inconsistent(format!(
                    "checkpoint vdev id {} too large",
                    v.vdev
                )));
            }
            let idx = v.vdev as usize;
            if vdevs.len() <= idx {
                vdevs.resize_with(idx + 1, || None);
            }
            if vdevs[idx].is_some() {
                return Err(AllocError::Inconsistent(format!(
                    "checkpoint lists vdev {} twice",
                    v.vdev
                )));
            }
            let cfg = match self.vdev(v.vdev) {
                Some(old)
                    if (old.start, old.size, old.cfg.ashift) == (v.start, v.size, v.ashift) =>
                {
                    old.cfg
                }
                _ => AllocConfig::for_vdev(v.size, v.ashift),
            };
            let mut vs = VdevSpace::new(v.vdev, v.start, v.size, cfg, false)?;
            // The class is configuration, not space state: the checkpoint
            // does not carry it (a pool lost its log class here once).
            vs.log = self.vdev(v.vdev).is_some_and(|old| old.log);
            vs.load(v)?;
            vdevs[idx] = Some(Box::new(vs));
        }
        for old in std::mem::take(&mut self.vdevs).into_iter().flatten() {
            let idx = old.id as usize;
            if vdevs.len() <= idx {
                vdevs.resize_with(idx + 1, || None);
            }
            if vdevs[idx].is_none() {
                vdevs[idx] = Some(old);
            }
        }
        *self = Allocator {
            vdevs,
            aliquot: self.aliquot,
            synced_txg: Some(cp.txg),
            hwm_txg: cp.txg,
            replayed_txg: Some(cp.txg),
            ..Allocator::new()
        };
        Ok(())
    }

    /// Apply one logged txg (import step 2, in increasing txg order, only
    /// txgs after the checkpoint).  `current_txg` is the txg of the
    /// uberblock being imported; after applying, deferrals of txgs up to
    /// `current_txg - 2` are released, so frees of the last two txgs stay
    /// deferred.  Errors if the record set is out of order, newer than
    /// `current_txg`, allocates non-free space or frees non-allocated space;
    /// each extent is applied atomically, but after an error the allocator
    /// holds a partially replayed state and must be discarded.
    pub fn replay(&mut self, recs: &TxgRecords, current_txg: u64) -> Result<(), AllocError> {
        let order = |m: String| Err(AllocError::Inconsistent(m));
        if recs.txg > current_txg {
            return order(format!(
                "log of txg {} is newer than current txg {current_txg}",
                recs.txg
            ));
        }
        if let Some(prev) = self.replayed_txg.filter(|&p| recs.txg <= p) {
            return order(format!("log of txg {} replayed after txg {prev}", recs.txg));
        }
        // When txg R allocated, txg R-1 had synced and released the frees
        // of txg R-3 and older; a checkpoint taken during the sync of txg C
        // still lists the frees of C-2 as deferred. Release them as the live
        // allocator had, or an allocation of such space looks like a
        // double allocation.
        if let Some(prev) = recs.txg.checked_sub(1) {
            self.txg_synced(prev);
        }
        for e in &recs.allocs {
            self.vdev_mut(e.vdev)?.replay_alloc(e.offset, e.len)?;
        }
        for e in &recs.frees {
            let vs = self.vdev_mut(e.vdev)?;
            vs.defer_free(e.offset, e.len, recs.txg).map_err(|err| {
                AllocError::Inconsistent(format!("txg {} free record: {err}", recs.txg))
            })?;
        }
        self.replayed_txg = Some(recs.txg);
        self.txg_synced(current_txg);
        match &self.fault {
            Some(f) => Err(AllocError::Internal(f.clone())),
            None => Ok(()),
        }
    }

    /// Allocates `size` bytes for a log block (module docs, "Transient
    /// allocations" and "The log class"): on the first vdev of `prefer`
    /// with room, else on a vdev of the normal class not in `exclude`.
    /// Nothing is recorded for any txg.
    pub fn alloc_transient(&mut self, size: u64, prefer: &[u32], exclude: &[u32]) -> Result<(u32, u64, u64), AllocError> {
        if size == 0 {
            return Err(AllocError::InvalidSize(size));
        }
        let normal: Vec<u32> = self.vdevs.iter().flatten().filter(|v| !v.log && !prefer.contains(&v.id)).map(|v| v.id).collect();
        let order: Vec<u32> = prefer.iter().copied().chain(normal).collect();
        for id in order.into_iter().filter(|v| !exclude.contains(v)) {
            let Ok(vs) = self.vdev_mut(id) else { continue };
            if let Some((off, len)) = vs.alloc(size)? {
                vs.transient.add(off, len).map_err(|e| AllocError::Internal(e.to_string()))?;
                return Ok((id, off, len));
            }
        }
        Err(AllocError::NoSpace)
    }

    /// Takes a log block found at import out of the free space (it must be
    /// free: on disk, log blocks always are) as a transient allocation.
    pub fn claim_transient(&mut self, vdev: u32, offset: u64, len: u64) -> Result<(), AllocError> {
        self.vdev_mut(vdev)?.claim_transient(offset, len)
    }

    /// Frees a transient allocation in txg `txg`: deferred like any free
    /// until `txg + 2` has synced, and recorded nowhere.
    pub fn free_transient(&mut self, vdev: u32, offset: u64, len: u64, txg: u64) -> Result<(), AllocError> {
        self.check_open_txg(txg)?;
        self.vdev_mut(vdev)?.free_transient(offset, len, txg)
    }

    /// A transient allocation of the normal class becomes an ordinary one
    /// of txg `txg`, recorded in its space log like any allocation: a block
    /// an intent log's indirect write put in place, taken into its file's
    /// tree by the sync of the txg that holds the write (OpenZFS's
    /// `dr_override`). Its space was counted allocated since
    /// `alloc_transient`; only the record is new.
    pub fn adopt_transient(&mut self, vdev: u32, offset: u64, len: u64, txg: u64) -> Result<(), AllocError> {
        self.check_open_txg(txg)?;
        let vs = self.vdev_mut(vdev)?;
        if vs.log {
            return Err(AllocError::Inconsistent(format!("a block on log vdev {} cannot join a txg", vdev)));
        }
        if !vs.transient.contains(offset, len) {
            return Err(AllocError::NotAllocated { vdev, offset, len });
        }
        vs.transient.remove(offset, len).map_err(|e| AllocError::Internal(e.to_string()))?;
        self.hwm_txg = self.hwm_txg.max(txg);
        self.record(txg, vdev, offset, len, true)
    }

    /// Bytes held by transient allocations on vdevs of the normal class
    /// (counted in `space().total.allocated`).
    pub fn transient_bytes(&self) -> u64 {
        self.vdevs.iter().flatten().filter(|v| !v.log).map(|v| v.transient.space()).sum()
    }

    /// Puts vdev `vdev` in the log class (`log`) or the normal one. A vdev
    /// leaves the log class only empty, and joins it only empty.
    pub fn set_log(&mut self, vdev: u32, log: bool) -> Result<(), AllocError> {
        let vs = self.vdev_mut(vdev)?;
        if vs.log != log && vs.allocated + vs.deferred_all.space() != 0 {
            return Err(AllocError::Inconsistent(format!("vdev {} changes class with {} bytes allocated", vdev, vs.allocated)));
        }
        vs.log = log;
        Ok(())
    }

    /// Whether vdev `vdev` is in the log class.
    pub fn is_log(&self, vdev: u32) -> bool {
        self.vdev(vdev).is_some_and(|v| v.log)
    }

    /// The vdevs of the log class, ascending.
    pub fn log_vdevs(&self) -> Vec<u32> {
        self.vdevs.iter().flatten().filter(|v| v.log).map(|v| v.id).collect()
    }

    /// Bytes allocated or deferred on vdev `vdev` (0 when it is gone).
    pub fn held_bytes(&self, vdev: u32) -> u64 {
        self.vdev(vdev).map_or(0, |v| v.allocated + v.deferred_all.space())
    }

    /// Takes out an empty log-class vdev (`pool remove` of a log device):
    /// nothing allocated or deferred on it.
    pub fn remove_vdev(&mut self, vdev: u32) -> Result<(), AllocError> {
        let vs = self.vdev_mut(vdev)?;
        if !vs.log {
            return Err(AllocError::Inconsistent(format!("vdev {} is not a log vdev: it cannot be taken out", vdev)));
        }
        self.forget_vdev(vdev)
    }

    /// Import: takes out a vdev a checkpoint listed that the pool no longer
    /// has (a log vdev removed after the checkpoint was written): it must
    /// be empty, as a removed log vdev is (log blocks are free on disk).
    pub fn forget_vdev(&mut self, vdev: u32) -> Result<(), AllocError> {
        let vs = self.vdev_mut(vdev)?;
        let held = vs.allocated + vs.deferred_all.space();
        if held != 0 {
            return Err(AllocError::Inconsistent(format!("vdev {} still holds {} bytes", vdev, held)));
        }
        self.vdevs[vdev as usize] = None;
        while self.vdevs.last().is_some_and(|v| v.is_none()) {
            self.vdevs.pop();
        }
        if self.rotor >= self.vdevs.len() {
            self.rotor = 0;
            self.rotor_bytes = 0;
        }
        Ok(())
    }

    /// Whether any byte of the extent is a transient allocation.
    pub fn overlaps_transient(&self, vdev: u32, offset: u64, len: u64) -> bool {
        self.vdev(vdev).is_some_and(|v| v.transient.overlaps(offset, len))
    }

    /// The full free-space state (free and deferred ranges per vdev).
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            txg: self.hwm_txg,
            vdevs: self
                .vdevs
                .iter()
                .flatten()
                .map(|v| v.checkpoint())
                .collect(),
        }
    }

    /// (free, deferred) bytes of the pool that blocks of up to each piece
    /// size `2^(min_shift + i)` surely fit into: free space counts only in
    /// segments of at least the piece (there are no gang blocks to split a
    /// block over smaller ones), less what a segment's last block may
    /// leave unused. Deferred frees are counted the same way, as they lie
    /// now (they can only grow by joining their neighbours when released).
    pub fn space_by_piece<const N: usize>(&self, min_shift: u32) -> ([u64; N], [u64; N]) {
        let (mut free, mut deferred) = ([0u64; N], [0u64; N]);
        for vs in self.vdevs.iter().flatten().filter(|v| !v.log) {
            let (f, d) = vs.space_by_piece::<N>(min_shift);
            for i in 0..N {
                free[i] = free[i].saturating_add(f[i]);
                deferred[i] = deferred[i].saturating_add(d[i]);
            }
        }
        (free, deferred)
    }

    /// Space accounting per vdev and for the pool.
    pub fn space(&self) -> SpaceStats {
        let mut stats = SpaceStats::default();
        let mut hist = [0u64; HISTOGRAM_BUCKETS];
        for vs in self.vdevs.iter().flatten() {
            let s = vs.summary();
            stats.vdevs.push((vs.id, s));
            if vs.log {
                // Not the pool's space (module docs, "The log class").
                continue;
            }
            // Saturating: several near-2^64-byte vdevs must not panic here.
            let t = &mut stats.total;
            t.size = t.size.saturating_add(s.size);
            t.allocated = t.allocated.saturating_add(s.allocated);
            t.free = t.free.saturating_add(s.free);
            t.deferred = t.deferred.saturating_add(s.deferred);
            t.largest_free = t.largest_free.max(s.largest_free);
            t.metaslab_count += s.metaslab_count;
            for (h, c) in hist.iter_mut().zip(vs.histogram()) {
                *h = h.saturating_add(c);
            }
        }
        stats.total.fragmentation_pct = fragmentation(&hist);
        stats
    }

    /// True iff `len > 0`, the extent lies inside vdev `vdev`, and none of
    /// its bytes is free or deferred — i.e. it is live space that a
    /// verification walk may find referenced.  Alignment is not required.
    pub fn is_allocated(&self, vdev: u32, offset: u64, len: u64) -> bool {
        self.vdev(vdev).is_some_and(|v| v.is_allocated(offset, len))
    }

    /// Verify every invariant in the module docs (linear time; for tests
    /// and debug checks).
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(f) = &self.fault {
            return Err(format!("fault recorded: {f}"));
        }
        for (i, v) in self.vdevs.iter().enumerate() {
            if let Some(vs) = v {
                if vs.id as usize != i {
                    return Err(format!("vdev {} stored at index {i}", vs.id));
                }
                vs.check().map_err(|e| format!("vdev {i}: {e}"))?;
                vs.check_log_class().map_err(|e| format!("vdev {i}: {e}"))?;
            }
        }
        if self.rotor > self.vdevs.len() {
            return Err("rotor out of range".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::spacelog::{
        decode_checkpoint, decode_records, encode_checkpoint, encode_records,
        encoded_checkpoint_upper_bound, encoded_records_upper_bound,
    };
    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const LABEL: u64 = 4 * MIB;

    fn xorshift(s: &mut u64) -> u64 {
        let mut x = *s;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x;
        x
    }

    fn one_vdev(size: u64) -> Allocator {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, size, DEFAULT_ASHIFT).unwrap();
        a
    }

    fn ms_size(a: &Allocator, vdev: u32) -> u64 {
        1u64 << a.vdev(vdev).unwrap().config().metaslab_shift
    }

    /// Fill vdev 0 with `block`-sized allocations in txg 1; returns them.
    fn fill(a: &mut Allocator, block: u64) -> Vec<(u32, u64, u64)> {
        let mut out = Vec::new();
        loop {
            match a.alloc(block, 1, &[]) {
                Ok(x) => out.push(x),
                Err(AllocError::NoSpace) => return out,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A rebuild copies what is allocated or deferred, never free space or
    /// a log block, in offset order; while it holds, nothing deferred is
    /// released, so no range it copies becomes allocatable.
    #[test]
    fn rebuild_segments_are_the_used_space_without_log_blocks() {
        let mut a = one_vdev(256 << 20);
        let x = a.alloc(1 << 20, 1, &[]).unwrap();
        let y = a.alloc(1 << 20, 1, &[]).unwrap();
        let z = a.alloc(1 << 20, 1, &[]).unwrap();
        a.txg_synced(1);
        a.free(y.0, y.1, y.2, 2).unwrap();
        let log = a.alloc_transient(8192, &[], &[]).unwrap();
        let segs = a.rebuild_segments(0).unwrap();
        let total: u64 = segs.iter().map(|s| s.1).sum();
        assert_eq!(total, x.2 + y.2 + z.2, "allocated and deferred, not the log block: {segs:x?}");
        assert!(segs.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0), "sorted, disjoint, coalesced: {segs:x?}");
        assert!(segs.iter().all(|&(o, l)| o + l <= log.1 || o >= log.1 + log.2), "the log block is left out: {segs:x?}");
        a.hold_all_frees();
        a.txg_synced(2);
        a.txg_synced(5);
        assert_eq!(a.space().total.deferred, y.2, "a free deferred under the hold stays deferred");
        a.release_frees_hold();
        assert_eq!(a.space().total.deferred, 0, "released with the hold");
        a.check_invariants().unwrap();
    }

    /// Log blocks: a transient allocation is allocated in memory, free in
    /// the checkpoint and in no txg's records; claimed back after an
    /// "import" from that checkpoint; freed deferred, unrecorded.
    #[test]
    fn transient_allocations_stay_out_of_the_space_log() {
        let mut a = one_vdev(256 << 20);
        let data = a.alloc(1 << 20, 1, &[]).unwrap();
        let (v, off, len) = a.alloc_transient(8192, &[], &[]).unwrap();
        assert!(a.is_allocated(v, off, len) && a.overlaps_transient(v, off, len));
        assert_eq!(a.transient_bytes(), len);
        a.check_invariants().unwrap();
        let recs = a.take_records(1);
        assert_eq!(recs.allocs.len(), 1, "only the data block is recorded: {:?}", recs.allocs);
        let cp = a.checkpoint();
        let mut b = Allocator::new();
        b.add_vdev(0, LABEL, 256 << 20, DEFAULT_ASHIFT).unwrap();
        b.load_checkpoint(&cp).unwrap();
        assert!(!b.is_allocated(v, off, len), "the checkpoint shows the log block free");
        assert!(b.is_allocated(data.0, data.1, data.2));
        b.claim_transient(v, off, len).unwrap();
        assert!(b.claim_transient(v, off, len).is_err(), "claimed twice");
        assert!(b.claim_transient(data.0, data.1, data.2).is_err(), "a data block is no log block");
        assert!(b.free_transient(data.0, data.1, data.2, 2).is_err(), "a data block is not transient");
        b.free_transient(v, off, len, 2).unwrap();
        assert_eq!(b.transient_bytes(), 0);
        assert_eq!(b.take_records(2).frees.len(), 0, "the free is recorded nowhere");
        assert_eq!(b.space().total.deferred, len);
        b.txg_synced(4);
        assert_eq!(b.space().total.deferred, 0);
        b.check_invariants().unwrap();
    }

    /// An indirect write's block: transient until the sync of its txg
    /// adopts it, then recorded in that txg's space log and in the
    /// checkpoint like any block; never twice, never a block not transient.
    #[test]
    fn an_adopted_transient_block_is_an_ordinary_allocation() {
        let mut a = one_vdev(256 << 20);
        let (v, off, len) = a.alloc_transient(128 << 10, &[], &[]).unwrap();
        let data = a.alloc(1 << 20, 3, &[]).unwrap();
        a.adopt_transient(v, off, len, 3).unwrap();
        assert_eq!(a.transient_bytes(), 0);
        assert!(a.is_allocated(v, off, len));
        assert!(a.adopt_transient(v, off, len, 3).is_err(), "adopted twice");
        assert!(a.adopt_transient(data.0, data.1, data.2, 3).is_err(), "not transient");
        a.check_invariants().unwrap();
        let recs = a.take_records(3);
        let allocs: u64 = recs.allocs.iter().map(|e| e.len).sum();
        assert_eq!(allocs, len + data.2, "the adopted block is in the txg's records");
        a.txg_synced(3);
        let (v2, off2, len2) = a.alloc_transient(128 << 10, &[], &[]).unwrap();
        assert!(a.adopt_transient(v2, off2, len2, 3).is_err(), "txg 3 has synced");
        let mut b = Allocator::new();
        b.add_vdev(0, LABEL, 256 << 20, DEFAULT_ASHIFT).unwrap();
        b.load_checkpoint(&a.checkpoint()).unwrap();
        assert!(b.is_allocated(v, off, len), "the checkpoint keeps the adopted block");
        assert!(!b.is_allocated(v2, off2, len2), "and shows the transient one free");
    }

    #[test]
    fn the_log_class_takes_log_blocks_only_and_survives_a_checkpoint() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, 256 << 20, DEFAULT_ASHIFT).unwrap();
        a.add_vdev(1, LABEL, 256 << 20, DEFAULT_ASHIFT).unwrap();
        a.set_log(1, true).unwrap();
        assert_eq!(a.space().total.size, 256 << 20, "a log vdev is not the pool's space");
        for _ in 0..64 {
            let (v, _, _) = a.alloc(128 << 10, 1, &[]).unwrap();
            assert_eq!(v, 0, "an ordinary block on the log vdev");
        }
        let (v, off, len) = a.alloc_transient(4096, &a.log_vdevs(), &[]).unwrap();
        assert_eq!(v, 1, "a log block prefers the log vdev");
        a.check_invariants().unwrap();
        // The log vdev down: the normal class, never another log vdev.
        let (v2, _, _) = a.alloc_transient(4096, &[], &[1]).unwrap();
        assert_eq!(v2, 0);
        let (v3, _, _) = a.alloc_transient(4096, &[], &[]).unwrap();
        assert_eq!(v3, 0, "a log vdev not preferred (failed) is not used");
        // Import: the checkpoint knows nothing of classes.
        let cp = a.checkpoint();
        let mut b = Allocator::new();
        b.add_vdev(0, LABEL, 256 << 20, DEFAULT_ASHIFT).unwrap();
        b.add_vdev(1, LABEL, 256 << 20, DEFAULT_ASHIFT).unwrap();
        b.set_log(1, true).unwrap();
        b.load_checkpoint(&cp).unwrap();
        assert!(b.is_log(1), "load_checkpoint lost the class");
        assert_eq!(b.log_vdevs(), vec![1]);
        b.claim_transient(v, off, len).unwrap();
        assert!(b.set_log(1, false).is_err(), "a vdev holding blocks changes class");
        assert!(b.remove_vdev(1).is_err(), "a log vdev holding a block is taken out");
        assert!(b.remove_vdev(0).is_err(), "a vdev of the normal class is taken out");
        b.free_transient(v, off, len, 2).unwrap();
        b.txg_synced(4);
        b.remove_vdev(1).unwrap();
        assert_eq!(b.vdev_ids(), vec![0]);
        b.check_invariants().unwrap();
    }

    #[test]
    fn a_scan_hold_keeps_later_frees_deferred_until_released() {
        let mut a = one_vdev(64 << 20);
        let (v, off, len) = a.alloc(1 << 20, 1, &[]).unwrap();
        a.txg_synced(1);
        a.hold_frees_after(1);
        a.free(v, off, len, 2).unwrap();
        for t in 2..10 {
            a.txg_synced(t);
            assert_eq!(a.space().total.deferred, len, "txg {t}: a block of txg 1's tree freed in txg 2 stays deferred under the hold");
        }
        a.hold_frees_after(5);
        a.release_frees_hold();
        assert_eq!(a.space().total.deferred, len, "one hold is left");
        a.release_frees_hold();
        assert_eq!(a.space().total.deferred, 0, "released as txg_synced(9) would have");
        a.check_invariants().unwrap();
    }

    /// Policy point 8: a RAID-Z vdev hands out its geometry's asize (data,
    /// parity, rounding to nparity + 1 sectors), frees take it back, and
    /// the space writers see is deflated by parity; a plain vdev beside it
    /// keeps sector rounding.
    #[test]
    fn raidz_vdevs_allocate_their_asize_and_deflate_space() {
        let g = RaidzGeometry::new(6, 2, 12).unwrap();
        let mut a = Allocator::new();
        a.add_vdev_with_config(0, 0, GIB, AllocConfig::for_raidz(GIB, g)).unwrap();
        a.add_vdev(1, 0, GIB, 12).unwrap();
        // One sector of data: 1 + 2 parity = 3 sectors, already a multiple of 3.
        let (v, off, len) = a.alloc(100, 1, &[1]).unwrap();
        assert_eq!((v, len), (0, 3 * 4096));
        assert_eq!(off % 4096, 0);
        // 128 KiB: 32 data sectors in 8 rows of 4, 16 parity: 48 sectors.
        assert_eq!(a.alloc(128 * KIB, 1, &[1]).unwrap().2, 48 * 4096);
        // 5 data sectors: 2 rows, 4 parity, 9 sectors (a multiple of 3).
        assert_eq!(a.alloc(5 * 4096, 1, &[1]).unwrap().2, 9 * 4096);
        assert_eq!(a.alloc(100, 1, &[0]).unwrap().2, 4096, "the plain vdev rounds to its sector");
        let d = a.alloc_ditto(8192, 1, &[(1, 0, 8192)]).unwrap();
        assert_eq!((d.vdev, d.len), (0, 6 * 4096), "a further copy on RAID-Z takes its asize too");
        a.free(0, off, len, 1).unwrap();
        a.check_invariants().unwrap();
        let (free, _) = a.vdev(0).unwrap().space_by_piece::<16>(9);
        let raw = a.vdev(0).unwrap().free_bytes;
        // 128 KiB takes 192 KiB: writers see two thirds of the free space.
        assert!(free[8] <= raw * 2 / 3 && free[8] + 2 * MIB > raw * 2 / 3, "{} of {}", free[8], raw);
        assert!(a.space().total.free >= raw, "raw figures stay raw");
        let wrong = AllocConfig { raidz: Some(RaidzGeometry::new(6, 2, 9).unwrap()), ..AllocConfig::for_vdev(GIB, 12) };
        assert!(matches!(a.add_vdev_with_config(2, 0, GIB, wrong), Err(AllocError::InvalidVdev(_))));
    }

    #[test]
    fn default_config() {
        let c = AllocConfig::for_vdev(GIB, 12);
        assert_eq!((c.metaslab_shift, c.small_block_bytes), (26, 64 * KIB));
        assert_eq!(AllocConfig::for_vdev(1 << 40, 12).metaslab_shift, 33); // 128 metaslabs
        assert_eq!(AllocConfig::for_vdev(100 << 40, 12).metaslab_shift, 34);
        let huge = AllocConfig::for_vdev(1 << 62, 12);
        assert_eq!(
            metaslab_count(1 << 62, huge.metaslab_shift),
            MAX_METASLABS_PER_VDEV
        );
        assert_eq!(AllocConfig::for_vdev(GIB, 16).small_block_bytes, 256 * KIB);
        for size in [MIB, 3 * GIB, 7 << 40, !4095u64] {
            let c = AllocConfig::for_vdev(size, 12);
            let n = metaslab_count(size, c.metaslab_shift);
            assert!(
                n <= TARGET_METASLABS_PER_VDEV || c.metaslab_shift >= MAX_METASLAB_SHIFT,
                "{size}"
            );
            assert!(
                n >= 100 || c.metaslab_shift == MIN_METASLAB_SHIFT || n <= MAX_METASLABS_PER_VDEV
            );
        }
    }

    #[test]
    fn add_vdev_validation() {
        let mut a = Allocator::new();
        assert!(matches!(
            a.add_vdev(0, 0, GIB, 8),
            Err(AllocError::InvalidVdev(_))
        ));
        assert!(matches!(
            a.add_vdev(0, 0, GIB, 17),
            Err(AllocError::InvalidVdev(_))
        ));
        assert!(matches!(
            a.add_vdev(0, 0, 0, 12),
            Err(AllocError::InvalidVdev(_))
        ));
        assert!(matches!(
            a.add_vdev(0, 512, GIB, 12),
            Err(AllocError::InvalidVdev(_))
        ));
        assert!(matches!(
            a.add_vdev(0, 0, GIB + 512, 12),
            Err(AllocError::InvalidVdev(_))
        ));
        assert!(matches!(
            a.add_vdev(0, !4095u64, GIB, 12),
            Err(AllocError::InvalidVdev(_))
        ));
        assert!(matches!(
            a.add_vdev(MAX_VDEVS, 0, GIB, 12),
            Err(AllocError::InvalidVdev(_))
        ));
        a.add_vdev(3, LABEL, GIB, 12).unwrap();
        assert_eq!(
            a.add_vdev(3, LABEL, GIB, 12),
            Err(AllocError::VdevExists(3))
        );
        assert_eq!(a.vdev_ids(), vec![3]);
        let s = a.space();
        assert_eq!(
            (s.total.size, s.total.free, s.total.allocated),
            (GIB, GIB, 0)
        );
        assert_eq!((s.total.metaslab_count, s.total.fragmentation_pct), (16, 0));
        assert_eq!(s.total.largest_free, 64 * MIB);
        a.check_invariants().unwrap();
    }

    #[test]
    fn sequential_large_allocations_are_contiguous() {
        let mut a = one_vdev(2 * GIB);
        let ms = ms_size(&a, 0);
        let mut prev: Option<u64> = None;
        let mut breaks = 0;
        for _ in 0..1000 {
            let (v, off, len) = a.alloc(MIB, 1, &[]).unwrap();
            assert_eq!((v, len), (0, MIB));
            if let Some(p) = prev.filter(|p| off != p + MIB) {
                assert_eq!(
                    (off - LABEL) % ms,
                    0,
                    "break after {p:#x} not at a metaslab boundary"
                );
                breaks += 1;
            }
            prev = Some(off);
        }
        assert!(breaks <= 1000 * MIB / ms);
        // The records of the whole stream coalesce into one extent.
        assert_eq!(a.pending_record_counts(1), (1, 0));
        a.check_invariants().unwrap();
    }

    #[test]
    fn small_allocations_do_not_break_large_run() {
        let mut a = one_vdev(2 * GIB);
        let ms = ms_size(&a, 0);
        let mut rng = 42u64;
        let (mut large, mut small) = (Vec::new(), Vec::new());
        for _ in 0..1000 {
            large.push(a.alloc(MIB, 1, &[]).unwrap().1);
            for _ in 0..1 + xorshift(&mut rng) % 3 {
                let size = 512 + xorshift(&mut rng) % (56 * KIB);
                let (_, off, len) = a.alloc(size, 1, &[]).unwrap();
                assert!(len < DEFAULT_SMALL_BLOCK_BYTES);
                small.push(off);
            }
        }
        for w in large.windows(2) {
            assert!(
                w[1] == w[0] + MIB || (w[1] - LABEL).is_multiple_of(ms),
                "{:#x} -> {:#x}",
                w[0],
                w[1]
            );
        }
        // Small blocks live in metaslabs that hold no large block.
        let ms_of = |off: u64| (off - LABEL) / ms;
        let large_ms: BTreeSet<u64> = large.iter().map(|&o| ms_of(o)).collect();
        assert!(small.iter().all(|&o| !large_ms.contains(&ms_of(o))));
        a.check_invariants().unwrap();
    }

    #[test]
    fn stripe_alternates_evenly_and_stays_contiguous_per_vdev() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, 2 * GIB, 12).unwrap();
        a.add_vdev(1, LABEL, 2 * GIB, 12).unwrap();
        let mut bytes = [0u64; 2];
        let mut last: [Option<u64>; 2] = [None; 2];
        let mut run = (u32::MAX, 0u64);
        for i in 0..3000u64 {
            let size = if i % 3 == 0 { MIB } else { 128 * KIB };
            let (v, off, len) = a.alloc(size, 1, &[]).unwrap();
            bytes[v as usize] += len;
            if let Some(p) = last[v as usize] {
                assert!(
                    off == p || (off - LABEL).is_multiple_of(ms_size(&a, v)),
                    "vdev {v} not contiguous"
                );
            }
            last[v as usize] = Some(off + len);
            run = if run.0 == v {
                (v, run.1 + len)
            } else {
                (v, len)
            };
            assert!(run.1 <= 2 * MIB, "stayed on vdev {v} for {} bytes", run.1);
        }
        let diff = bytes[0].abs_diff(bytes[1]);
        assert!(diff <= 2 * MIB, "uneven stripe {bytes:?}");
    }

    #[test]
    fn rotor_favours_emptier_vdev() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, GIB, 12).unwrap();
        a.add_vdev(1, LABEL, 3 * GIB, 12).unwrap();
        let mut bytes = [0u64; 2];
        for _ in 0..2000 {
            let (v, _, len) = a.alloc(128 * KIB, 1, &[]).unwrap();
            bytes[v as usize] += len;
        }
        assert!(bytes[1] > 2 * bytes[0], "{bytes:?}");
    }

    #[test]
    fn frees_are_deferred_two_txgs() {
        let mut a = one_vdev(64 * MIB);
        let blocks = fill(&mut a, MIB);
        assert_eq!(blocks.len(), 64);
        a.take_records(1);
        a.txg_synced(1);
        let (v, off, len) = blocks[10];
        a.free(v, off, len, 2).unwrap();
        assert!(!a.is_allocated(v, off, len));
        let s = a.space().total;
        assert_eq!((s.free, s.deferred, s.allocated), (0, MIB, 63 * MIB));
        assert_eq!(a.alloc(4096, 2, &[]), Err(AllocError::NoSpace));
        a.txg_synced(2);
        assert_eq!(a.alloc(4096, 3, &[]), Err(AllocError::NoSpace));
        a.txg_synced(3);
        assert_eq!(a.alloc(4096, 4, &[]), Err(AllocError::NoSpace));
        a.txg_synced(4); // txg 2 + 2 synced: the free is reusable now
        assert_eq!(a.space().total.deferred, 0);
        assert_eq!(a.alloc(MIB, 5, &[]), Ok((0, off, MIB)));
        assert_eq!(
            a.alloc(4096, 4, &[]),
            Err(AllocError::TxgNotOpen { txg: 4, synced: 4 })
        );
        assert!(matches!(
            a.free(0, off, MIB, 3),
            Err(AllocError::TxgNotOpen { .. })
        ));
        a.check_invariants().unwrap();
    }

    #[test]
    fn double_and_invalid_frees_are_errors() {
        let mut a = one_vdev(GIB);
        let (v, off, len) = a.alloc(64 * KIB, 1, &[]).unwrap();
        let (_, off2, len2) = a.alloc(64 * KIB, 1, &[]).unwrap();
        a.free(v, off, len, 1).unwrap();
        let before = a.checkpoint();
        let not_alloc = Err(AllocError::NotAllocated {
            vdev: 0,
            offset: off,
            len,
        });
        assert_eq!(a.free(v, off, len, 1), not_alloc);
        assert_eq!(a.free(v, off, len, 2), not_alloc); // still deferred
        assert!(matches!(
            a.free(v, off, len + len2, 2),
            Err(AllocError::NotAllocated { .. })
        ));
        assert!(matches!(
            a.free(v, off2 + len2, 4096, 2),
            Err(AllocError::NotAllocated { .. })
        ));
        assert!(matches!(
            a.free(v, off2 + 1, 4096, 2),
            Err(AllocError::BadExtent { .. })
        ));
        assert!(matches!(
            a.free(v, off2, 0, 2),
            Err(AllocError::BadExtent { .. })
        ));
        assert!(matches!(
            a.free(v, 0, 4096, 2),
            Err(AllocError::BadExtent { .. })
        ));
        assert!(matches!(
            a.free(v, !4095u64, 8192, 2),
            Err(AllocError::BadExtent { .. })
        ));
        assert_eq!(a.free(9, off2, len2, 2), Err(AllocError::UnknownVdev(9)));
        assert_eq!(a.checkpoint(), before, "failed frees must change nothing");
        a.txg_synced(3);
        assert!(matches!(
            a.free(v, off, len, 4),
            Err(AllocError::NotAllocated { .. })
        ));
        a.free(v, off2, len2, 4).unwrap();
        a.check_invariants().unwrap();
    }

    #[test]
    fn nospace_when_full_or_fragmented_and_space_returns() {
        let mut a = one_vdev(64 * MIB);
        let blocks = fill(&mut a, 4096);
        assert_eq!(blocks.len(), 16384);
        assert_eq!(a.alloc(1, 1, &[]), Err(AllocError::NoSpace));
        assert_eq!(a.space().total.free, 0);
        for &(v, o, l) in blocks.iter().step_by(2) {
            a.free(v, o, l, 2).unwrap();
        }
        assert_eq!(a.alloc(4096, 2, &[]), Err(AllocError::NoSpace));
        for t in 1..=4 {
            a.txg_synced(t);
        }
        let s = a.space().total;
        assert_eq!(
            (s.free, s.largest_free, s.fragmentation_pct),
            (32 * MIB, 4096, 95)
        );
        // Half the pool is free, but no gang blocks: 8 KiB cannot be placed.
        assert_eq!(a.alloc(8192, 5, &[]), Err(AllocError::NoSpace));
        assert_eq!(a.alloc(4096, 5, &[]).map(|x| x.2), Ok(4096));
        for &(v, o, l) in blocks.iter().skip(1).step_by(2) {
            a.free(v, o, l, 5).unwrap();
        }
        for t in 5..=7 {
            a.txg_synced(t);
        }
        // Everything but the one block from txg 5 is back; and contiguous.
        let s = a.space().total;
        assert_eq!(s.free, 64 * MIB - 4096);
        assert!(s.largest_free >= 32 * MIB - 4096);
        assert!(a.alloc(16 * MIB, 8, &[]).is_ok());
        a.check_invariants().unwrap();
    }

    #[test]
    fn largest_blocks_and_single_sectors_are_allocatable() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, GIB, 9).unwrap();
        assert_eq!(a.alloc(1, 1, &[]).map(|x| x.2), Ok(512));
        let big = 16 * MIB + 3 * 512;
        assert_eq!(a.alloc(big, 1, &[]).map(|x| x.2), Ok(big));
        assert_eq!(a.alloc(64 * MIB, 1, &[]).map(|x| x.2), Ok(64 * MIB));
        assert_eq!(a.alloc(64 * MIB + 512, 1, &[]), Err(AllocError::NoSpace));
        assert_eq!(a.alloc(u64::MAX, 1, &[]), Err(AllocError::NoSpace));
        assert_eq!(a.alloc(0, 1, &[]), Err(AllocError::InvalidSize(0)));
        a.check_invariants().unwrap();
    }

    #[test]
    fn shared_metaslab_keeps_large_run_contiguous() {
        // 48 MiB: one metaslab, so both classes must share it.
        let mut a = one_vdev(48 * MIB);
        assert_eq!(a.vdev(0).unwrap().metaslab_count(), 1);
        let mut prev = None;
        for i in 0..20u64 {
            let (_, off, _) = a.alloc(MIB, 1, &[]).unwrap();
            assert!(
                prev.is_none_or(|p| off == p + MIB),
                "large run broken at {i}"
            );
            prev = Some(off);
            let (_, small, _) = a.alloc(4096 * (1 + i % 3), 1, &[]).unwrap();
            assert!(small >= LABEL + 24 * MIB);
        }
        a.check_invariants().unwrap();
    }

    #[test]
    fn load_checkpoint_keeps_vdevs_added_later() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, GIB, 12).unwrap();
        a.alloc(MIB, 1, &[]).unwrap();
        let cp = a.checkpoint();
        let mut b = Allocator::new();
        b.add_vdev(0, LABEL, GIB, 12).unwrap();
        b.add_vdev(1, LABEL, GIB, 12).unwrap(); // added after the checkpoint
        b.load_checkpoint(&cp).unwrap();
        assert_eq!(b.vdev_ids(), vec![0, 1]);
        let s = b.space();
        assert_eq!((s.vdevs[0].1.allocated, s.vdevs[1].1.allocated), (MIB, 0));
        b.check_invariants().unwrap();
    }

    #[test]
    fn exclude_is_honoured() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, GIB, 12).unwrap();
        a.add_vdev(1, LABEL, GIB, 12).unwrap();
        for _ in 0..200 {
            let (v0, ..) = a.alloc(128 * KIB, 1, &[]).unwrap();
            let (v1, ..) = a.alloc(128 * KIB, 1, &[v0]).unwrap();
            assert_ne!(v0, v1);
        }
        assert_eq!(a.alloc(4096, 1, &[0, 1]), Err(AllocError::NoSpace));
        // Exclusion does not steal the rotor's turn: plain allocations still
        // alternate evenly.
        let s = a.space();
        assert_eq!(s.vdevs[0].1.allocated, s.vdevs[1].1.allocated);
    }

    /// A block of `size` bytes with `n` copies, as the pool places them.
    fn block(a: &mut Allocator, size: u64, txg: u64, n: usize) -> Vec<(u32, u64, u64)> {
        let mut placed = vec![a.alloc(size, txg, &[]).unwrap()];
        while placed.len() < n {
            let d = a.alloc_ditto(size, txg, &placed).unwrap();
            assert!(d.apart, "copy {} of a block at {:?} is not apart", placed.len(), placed);
            placed.push((d.vdev, d.offset, d.len));
        }
        a.check_copies_apart(&placed).unwrap();
        placed
    }

    /// How many times each copy's stream jumps (consecutive blocks' copies
    /// not adjacent).
    fn jumps(blocks: &[Vec<(u32, u64, u64)>], copy: usize) -> usize {
        blocks.windows(2).filter(|w| w[0][copy].1 + w[0][copy].2 != w[1][copy].1).count()
    }

    #[test]
    fn further_copies_on_one_vdev_stream_an_eighth_of_it_apart() {
        let mut a = one_vdev(2 * GIB);
        let blocks: Vec<Vec<(u32, u64, u64)>> = (0..2000).map(|i| block(&mut a, 4 * KIB + (i % 3) * KIB, 1, 3)).collect();
        for b in &blocks {
            for (i, x) in b.iter().enumerate() {
                for y in &b[i + 1..] {
                    assert!(extent_gap((x.1, x.2), (y.1, y.2)) >= 2 * GIB / 8, "{b:?}");
                }
            }
        }
        // Each copy slot streams: its blocks lie back to back.
        for copy in 0..3 {
            assert!(jumps(&blocks, copy) <= 2, "copy {copy} jumps {} times", jumps(&blocks, copy));
        }
        // Three streams coalesce into (about) three space-log records.
        assert!(a.pending_record_counts(1).0 <= 6, "{:?}", a.pending_record_counts(1));
        a.check_invariants().unwrap();
    }

    #[test]
    fn further_copies_fit_apart_on_the_smallest_vdev() {
        // 60 MiB: one metaslab, so the copies share it and keep 7.5 MiB apart.
        let mut a = one_vdev(60 * MIB);
        assert_eq!(a.vdev(0).unwrap().metaslab_count(), 1);
        let min = a.vdev(0).unwrap().ditto_min_distance();
        assert_eq!(min, 60 * MIB / 8);
        let blocks: Vec<Vec<(u32, u64, u64)>> = (0..500).map(|_| block(&mut a, 16 * KIB, 1, 3)).collect();
        assert!(jumps(&blocks, 1) <= 2 && jumps(&blocks, 2) <= 2);
        a.check_invariants().unwrap();
    }

    #[test]
    fn further_copies_go_to_other_vdevs_first() {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, GIB, 12).unwrap();
        a.add_vdev(1, LABEL, GIB, 12).unwrap();
        for _ in 0..300 {
            let b = block(&mut a, 8 * KIB, 1, 3);
            assert_ne!(b[0].0, b[1].0, "second copy on another vdev: {b:?}");
            // The third has no vdev of its own: apart on one of the two.
            let twin = b.iter().find(|c| c.0 == b[2].0 && c.1 != b[2].1).unwrap();
            assert!(extent_gap((twin.1, twin.2), (b[2].1, b[2].2)) >= GIB / 8);
        }
        // A vdev that is full takes no copy; its copies go apart on the other.
        let mut a = two_vdevs();
        while a.alloc(MIB, 1, &[0]).is_ok() {}
        let b = block(&mut a, 4 * KIB, 1, 2);
        assert_eq!((b[0].0, b[1].0), (0, 0));
        a.check_invariants().unwrap();
    }

    #[test]
    fn a_copy_that_cannot_keep_the_distance_is_reported() {
        // 64 MiB: fill it, then free two sectors 8 KiB apart.
        let mut a = one_vdev(64 * MIB);
        let all = fill(&mut a, 4 * KIB);
        a.txg_synced(1);
        let (v, o, l) = all[all.len() / 2];
        a.free(v, o, l, 2).unwrap();
        a.free(v, o + 2 * l, l, 2).unwrap();
        a.txg_synced(4);
        let first = a.alloc(l, 5, &[]).unwrap();
        let d = a.alloc_ditto(l, 5, &[first]).unwrap();
        assert!(!d.apart, "{d:?} next to {first:?}");
        let e = a.check_copies_apart(&[first, (d.vdev, d.offset, d.len)]).unwrap_err();
        assert!(e.contains("apart"), "{e}");
        // With no room at all: no space, nothing allocated.
        assert_eq!(a.alloc_ditto(l, 5, &[first]), Err(AllocError::NoSpace));
        a.check_invariants().unwrap();
    }

    /// Random alloc/free traffic over `txgs` txgs; returns the record sets.
    fn churn(
        a: &mut Allocator,
        rng: &mut u64,
        first_txg: u64,
        txgs: u64,
        live: &mut Vec<(u32, u64, u64)>,
    ) -> Vec<TxgRecords> {
        let mut logs = Vec::new();
        for txg in first_txg..first_txg + txgs {
            for _ in 0..xorshift(rng) % 40 {
                let r = xorshift(rng);
                if !r.is_multiple_of(3) || live.is_empty() {
                    let size = 1 + (r >> 8) % if r.is_multiple_of(5) { 2 * MIB } else { 96 * KIB };
                    if let Ok(x) = a.alloc(size, txg, &[]) {
                        live.push(x);
                        // Some blocks get a further copy (metadata).
                        if r.is_multiple_of(4) {
                            if let Ok(d) = a.alloc_ditto(size, txg, &[x]) {
                                live.push((d.vdev, d.offset, d.len));
                            }
                        }
                    }
                } else {
                    let (v, o, l) = live.swap_remove((r >> 8) as usize % live.len());
                    a.free(v, o, l, txg).unwrap();
                }
            }
            logs.push(a.take_records(txg));
            a.txg_synced(txg);
        }
        logs
    }

    fn two_vdevs() -> Allocator {
        let mut a = Allocator::new();
        a.add_vdev(0, LABEL, 200 * MIB, 12).unwrap();
        a.add_vdev(1, 8 * MIB, 100 * MIB, 9).unwrap();
        a
    }

    #[test]
    fn checkpoint_round_trip() {
        let mut rng = 7u64;
        let mut a = two_vdevs();
        let mut live = Vec::new();
        churn(&mut a, &mut rng, 1, 50, &mut live);
        // Leave frees of two txgs deferred.
        let cp = a.checkpoint();
        assert!(cp.vdevs.iter().any(|v| !v.deferred.is_empty()));
        let bytes = encode_checkpoint(&cp);
        let mut b = Allocator::new();
        b.load_checkpoint(&decode_checkpoint(&bytes).unwrap())
            .unwrap();
        assert_eq!(b.checkpoint(), cp);
        assert_eq!(b.space(), a.space());
        b.check_invariants().unwrap();
        assert!(live.iter().all(|&(v, o, l)| b.is_allocated(v, o, l)));
        // The loaded allocator keeps working in step with the original.
        a.txg_synced(51);
        b.txg_synced(51);
        assert_eq!(b.checkpoint(), a.checkpoint());
        let mut live_b = live.clone();
        churn(&mut b, &mut rng, 52, 20, &mut live_b);
        b.check_invariants().unwrap();
    }

    #[test]
    fn load_checkpoint_rejects_inconsistent_state() {
        let a = two_vdevs();
        let good = a.checkpoint();
        let mut target = two_vdevs();
        target.alloc(MIB, 1, &[]).unwrap();
        let before = target.checkpoint();
        let mut bad_cases = Vec::new();
        let mut c = good.clone();
        c.vdevs[0].free.push((LABEL, 4096)); // overlaps the existing free range
        bad_cases.push(c);
        let mut c = good.clone();
        c.vdevs[0].deferred.push((1, LABEL, 4096)); // deferred overlaps free
        bad_cases.push(c);
        let mut c = good.clone();
        c.vdevs[0].free = vec![(0, 4096)]; // outside the vdev
        bad_cases.push(c);
        let mut c = good.clone();
        c.vdevs[0].free = vec![(LABEL + 512, 4096)]; // misaligned
        bad_cases.push(c);
        let mut c = good.clone();
        c.vdevs.push(c.vdevs[0].clone()); // duplicate vdev
        bad_cases.push(c);
        let mut c = good.clone();
        c.vdevs[1].ashift = 3;
        bad_cases.push(c);
        let mut c = good.clone();
        c.vdevs[0].free.clear();
        c.vdevs[0].deferred = vec![(5, LABEL, 8192), (6, LABEL + 4096, 4096)]; // deferred twice
        bad_cases.push(c);
        for c in &bad_cases {
            assert!(target.load_checkpoint(c).is_err(), "{c:?}");
            assert_eq!(
                target.checkpoint(),
                before,
                "failed load must not change state"
            );
        }
    }

    #[test]
    fn replay_reproduces_live_state() {
        let mut rng = 99u64;
        let mut a = two_vdevs();
        let mut live = Vec::new();
        churn(&mut a, &mut rng, 1, 10, &mut live);
        let base = a.checkpoint();
        let logs = churn(&mut a, &mut rng, 11, 300, &mut live);
        let final_txg = 310;
        // Replica 1: replays each txg as it synced.
        let mut b = Allocator::new();
        b.load_checkpoint(&decode_checkpoint(&encode_checkpoint(&base)).unwrap())
            .unwrap();
        // Replica 2: import at the final txg, replaying everything at once.
        let mut c = b.clone();
        for recs in &logs {
            let recs = decode_records(&encode_records(recs)).unwrap();
            b.replay(&recs, recs.txg).unwrap();
            c.replay(&recs, final_txg).unwrap();
            b.check_invariants().unwrap();
        }
        assert_eq!(b.checkpoint(), a.checkpoint());
        assert_eq!(c.checkpoint(), a.checkpoint());
        assert_eq!(c.space(), a.space());
        assert!(live.iter().all(|&(v, o, l)| c.is_allocated(v, o, l)));
    }

    /// Regression: a checkpoint is taken during the sync of txg C, when the
    /// frees of C-2 are still deferred; txg C+1 may allocate that space (it
    /// was released when C synced). Replay refused the allocation as a
    /// double allocation, and the pool could not be imported.
    #[test]
    fn replay_after_mid_sync_checkpoint_releases_old_frees() {
        let mut a = one_vdev(64 << 20);
        let chunk = 1 << 20;
        let mut all = Vec::new();
        while let Ok(x) = a.alloc(chunk, 1, &[]) {
            all.push(x);
        }
        a.txg_synced(1);
        let (v, off, len) = all[7];
        a.free(v, off, len, 2).unwrap();
        a.txg_synced(2);
        a.txg_synced(3);
        // The sync of txg 4 writes a checkpoint: the free of txg 2 is still
        // deferred (it is released by txg_synced(4), after the checkpoint).
        let cp = a.checkpoint();
        let _ = a.take_records(4);
        a.txg_synced(4);
        assert_eq!(a.alloc(chunk, 5, &[]).unwrap(), (v, off, len), "the only free space");
        let recs = a.take_records(5);
        a.txg_synced(5);
        let mut b = Allocator::new();
        b.load_checkpoint(&decode_checkpoint(&encode_checkpoint(&cp)).unwrap()).unwrap();
        b.replay(&recs, 5).expect("txg 5 may allocate what txg 2 freed");
        assert_eq!(b.checkpoint(), a.checkpoint());
    }

    #[test]
    fn replay_rejects_inconsistent_records() {
        let mut a = two_vdevs();
        let (v, off, len) = a.alloc(MIB, 1, &[]).unwrap();
        let recs1 = a.take_records(1);
        a.txg_synced(1);
        let base = Allocator::new();
        let mut b = base.clone();
        b.load_checkpoint(&two_vdevs().checkpoint()).unwrap();
        let fresh = b.clone();
        b.replay(&recs1, 1).unwrap();
        // Same txg again / older txg: out of order.
        assert!(matches!(
            b.replay(&recs1, 2),
            Err(AllocError::Inconsistent(_))
        ));
        // Allocation of space that is already allocated.
        let dup = TxgRecords {
            txg: 2,
            allocs: recs1.allocs.clone(),
            frees: vec![],
        };
        assert!(matches!(
            b.replay(&dup, 2),
            Err(AllocError::Inconsistent(_))
        ));
        // Free of space that is free.
        let mut b = fresh.clone();
        let bad_free = TxgRecords {
            txg: 1,
            allocs: vec![],
            frees: vec![Extent {
                vdev: v,
                offset: off,
                len,
            }],
        };
        assert!(matches!(
            b.replay(&bad_free, 1),
            Err(AllocError::Inconsistent(_))
        ));
        // A log newer than the imported uberblock.
        let mut b = fresh.clone();
        assert!(matches!(
            b.replay(&recs1, 0),
            Err(AllocError::Inconsistent(_))
        ));
        // Unknown vdev / misaligned extent.
        let mut b = fresh.clone();
        let r = TxgRecords {
            txg: 1,
            allocs: vec![Extent {
                vdev: 7,
                offset: off,
                len,
            }],
            frees: vec![],
        };
        assert_eq!(b.replay(&r, 1), Err(AllocError::UnknownVdev(7)));
        let r = TxgRecords {
            txg: 1,
            allocs: vec![Extent {
                vdev: 0,
                offset: off + 1,
                len,
            }],
            frees: vec![],
        };
        assert!(matches!(b.replay(&r, 1), Err(AllocError::Inconsistent(_))));
    }

    #[test]
    fn upper_bounds_hold_for_allocator_output() {
        let mut rng = 0xb0b0u64;
        let mut a = two_vdevs();
        let mut live = Vec::new();
        for txg in 1..400u64 {
            churn_one_txg(&mut a, &mut rng, txg, &mut live);
            let extra = (xorshift(&mut rng) % 4) as usize;
            let bound = a.records_upper_bound(txg, extra);
            let cp_before = a.checkpoint();
            let cp_bound = encoded_checkpoint_upper_bound(&cp_before, extra);
            for _ in 0..extra {
                // The log / checkpoint blocks themselves (or a free of an
                // old one): small, unaligned sizes on either vdev.
                let r = xorshift(&mut rng);
                if r.is_multiple_of(4) && !live.is_empty() {
                    let (v, o, l) = live.swap_remove((r >> 8) as usize % live.len());
                    a.free(v, o, l, txg).unwrap();
                } else if let Ok(x) = a.alloc(1 + (r >> 8) % (256 * KIB), txg, &[]) {
                    live.push(x);
                }
            }
            let cp_len = encode_checkpoint(&a.checkpoint()).len();
            assert!(cp_len <= cp_bound, "checkpoint {cp_len} > {cp_bound}");
            let recs = a.take_records(txg);
            let len = encode_records(&recs).len();
            assert!(len <= bound, "records {len} > tight bound {bound}");
            assert!(len <= encoded_records_upper_bound(recs.allocs.len(), recs.frees.len()));
            a.txg_synced(txg);
        }
    }

    fn churn_one_txg(a: &mut Allocator, rng: &mut u64, txg: u64, live: &mut Vec<(u32, u64, u64)>) {
        for _ in 0..xorshift(rng) % 60 {
            let r = xorshift(rng);
            if r % 5 < 3 || live.is_empty() {
                if let Ok(x) = a.alloc(1 + (r >> 8) % (3 * MIB), txg, &[]) {
                    live.push(x);
                }
            } else {
                let (v, o, l) = live.swap_remove((r >> 8) as usize % live.len());
                a.free(v, o, l, txg).unwrap();
            }
        }
    }

    fn random_size(r: u64) -> u64 {
        match (r >> 8) % 10 {
            0..=5 => 1 + (r >> 16) % (64 * KIB),
            6..=8 => 64 * KIB + (r >> 16) % MIB,
            _ => MIB + (r >> 16) % (3 * MIB),
        }
    }

    fn round_up(size: u64, ashift: u8) -> u64 {
        let mask = (1u64 << ashift) - 1;
        (size + mask) & !mask
    }

    /// Check an allocation result against the request and the space stats.
    fn check_alloc(
        a: &Allocator,
        res: &Result<(u32, u64, u64), AllocError>,
        size: u64,
        exclude: &[u32],
    ) {
        match res {
            Ok((v, o, l)) => {
                let ashift = a.vdev(*v).unwrap().config().ashift;
                assert!(!exclude.contains(v));
                assert_eq!(*l, round_up(size, ashift));
                assert_eq!(o % (1 << ashift), 0);
                assert!(a.is_allocated(*v, *o, *l));
            }
            Err(AllocError::NoSpace) => {
                for (id, s) in a
                    .space()
                    .vdevs
                    .iter()
                    .filter(|(id, _)| !exclude.contains(id))
                {
                    let need = round_up(size, a.vdev(*id).unwrap().config().ashift);
                    assert!(
                        s.largest_free < need,
                        "NoSpace although vdev {id} has {}",
                        s.largest_free
                    );
                }
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }

    /// State of the randomized test: the allocator plus an independent model.
    struct Sim {
        a: Allocator,
        live: Vec<(u32, u64, u64)>,
        /// (vdev, offset, len, txg freed) still within the defer window.
        deferred: Vec<(u32, u64, u64, u64)>,
        logs: Vec<Vec<u8>>,
        txg: u64,
        live_bytes: u64,
        nospace: usize,
        double_frees: usize,
    }

    impl Sim {
        fn alloc(&mut self, r: u64) {
            let size = random_size(r);
            let exclude: Vec<u32> = if (r >> 40).is_multiple_of(8) {
                vec![((r >> 44) % 2) as u32]
            } else {
                vec![]
            };
            let res = self.a.alloc(size, self.txg, &exclude);
            check_alloc(&self.a, &res, size, &exclude);
            self.nospace += usize::from(res.is_err());
            if let Ok(x) = res {
                self.live.push(x);
                self.live_bytes += x.2;
                if (r >> 50).is_multiple_of(4) {
                    self.ditto(x);
                }
            }
        }

        /// A further copy of `x`: apart from it when the allocator says so.
        fn ditto(&mut self, x: (u32, u64, u64)) {
            let Ok(d) = self.a.alloc_ditto(x.2, self.txg, &[x]) else { return };
            let y = (d.vdev, d.offset, d.len);
            assert_eq!(d.apart, self.a.check_copies_apart(&[x, y]).is_ok(), "{x:?} {d:?}");
            assert!(self.a.is_allocated(y.0, y.1, y.2));
            self.live.push(y);
            self.live_bytes += y.2;
        }

        fn free(&mut self, r: u64) {
            let (v, o, l) = self.live.swap_remove((r >> 8) as usize % self.live.len());
            self.a.free(v, o, l, self.txg).unwrap();
            assert!(!self.a.is_allocated(v, o, l));
            self.live_bytes -= l;
            self.deferred.push((v, o, l, self.txg));
        }

        fn bad_free(&mut self, r: u64) {
            let pick = (r >> 8) as usize % self.deferred.len().max(1);
            if let Some(&(v, o, l, _)) = self.deferred.get(pick) {
                let res = self.a.free(v, o, l, self.txg);
                assert!(matches!(res, Err(AllocError::NotAllocated { .. })));
                self.double_frees += 1;
            }
            let v = (r >> 20) as u32 % 2;
            let o = LABEL + (((r >> 24) % (200 * MIB)) & !4095);
            if !self.a.is_allocated(v, o, 8192) {
                assert!(self.a.free(v, o, 8192, self.txg).is_err());
            }
        }

        fn end_txg(&mut self) {
            self.logs
                .push(encode_records(&self.a.take_records(self.txg)));
            self.a.txg_synced(self.txg);
            let txg = self.txg;
            self.deferred.retain(|d| d.3 + TXG_DEFER_SIZE > txg);
            self.txg += 1;
        }

        fn verify(&self, step: u64) {
            self.a
                .check_invariants()
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
            assert_eq!(self.a.space().total.allocated, self.live_bytes);
            if step.is_multiple_of(1000) {
                assert!(self
                    .live
                    .iter()
                    .all(|&(v, o, l)| self.a.is_allocated(v, o, l)));
                let cp = self.a.checkpoint();
                let mut b = Allocator::new();
                let decoded = decode_checkpoint(&encode_checkpoint(&cp)).unwrap();
                b.load_checkpoint(&decoded).unwrap();
                assert_eq!(b.checkpoint(), cp);
            }
        }
    }

    #[test]
    fn randomized_20000_ops() {
        let mut rng = 0x5EED_1234_ABCD_0001u64;
        let a = two_vdevs();
        let base = a.checkpoint();
        let mut sim = Sim {
            a,
            live: Vec::new(),
            deferred: Vec::new(),
            logs: Vec::new(),
            txg: 1,
            live_bytes: 0,
            nospace: 0,
            double_frees: 0,
        };
        for step in 0..20_000u64 {
            let r = xorshift(&mut rng);
            match r % 100 {
                0..=49 => sim.alloc(r),
                50..=84 if !sim.live.is_empty() => sim.free(r),
                85..=89 => sim.bad_free(r),
                _ => sim.end_txg(),
            }
            sim.verify(step);
        }
        // The run must have exercised the full-pool regime and double frees.
        assert!(sim.nospace > 100 && sim.double_frees > 100);
        sim.end_txg();
        // Replaying every log over the initial checkpoint gives the same state.
        let mut b = Allocator::new();
        b.load_checkpoint(&base).unwrap();
        for bytes in &sim.logs {
            let recs = decode_records(bytes).unwrap();
            b.replay(&recs, recs.txg).unwrap();
        }
        b.check_invariants().unwrap();
        assert_eq!(b.checkpoint(), sim.a.checkpoint());
    }
}
