//! # Space log and checkpoint encoding
//!
//! ## Purpose
//! tarn persists free space the way OpenZFS's log-spacemap feature does:
//! every txg appends one **record set** ([`TxgRecords`]) listing the extents
//! allocated and freed in that txg, and every so often the complete
//! free-space state is written as a **checkpoint** ([`Checkpoint`]), after
//! which older record sets can be dropped.  Import = decode the newest
//! checkpoint, then replay the record sets written after it, in txg order
//! (see `metaslab::Allocator::load_checkpoint` / `replay`).
//!
//! This module only converts those structures to and from bytes.  It does no
//! semantic validation (overlaps, bounds): that is the allocator's job when
//! it applies them.  There is no checksum here — the block that stores the
//! bytes carries one.
//!
//! ## Invariants / guarantees
//! * `decode(encode(x)) == x` for **every** value, including unsorted,
//!   unaligned, zero-length and wrapping extents (deltas are zig-zag signed
//!   and computed with wrapping arithmetic, the unit shift is chosen so no
//!   bits are lost).
//! * Decoding arbitrary bytes returns `Ok` or `Err`, never panics, and
//!   allocates memory proportional to the input length only: every count is
//!   checked against the bytes remaining (each counted item needs at least a
//!   known number of bytes) before anything is reserved.
//! * Decoding is strict: wrong magic, unknown version, truncated input,
//!   overlong or >64-bit varints, empty groups, values that overflow `u64`
//!   when scaled, and trailing bytes are all errors.
//! * `encode_records(r).len() <= encoded_records_upper_bound(r.allocs.len(),
//!   r.frees.len())` and `encode_checkpoint(c).len() <=
//!   encoded_checkpoint_upper_bound(c, 0)` always.
//!
//! ## Byte layout (format version 1)
//! Primitive types:
//! * `u8`, `u16le`, `u64le` — fixed-width little-endian integers.
//! * `varint` — unsigned LEB128: 7 value bits per byte, least significant
//!   group first, high bit set on every byte except the last.  At most 10
//!   bytes; the 10th byte may only be `0x00` or `0x01`; a multi-byte varint
//!   whose last byte is `0x00` (overlong) is rejected.
//! * `svarint` — a signed 64-bit value zig-zag mapped to unsigned
//!   (`(v << 1) ^ (v >> 63)`, so 0,-1,1,-2… become 0,1,2,3…) then `varint`.
//! * `unit` — a `u8` shift `0..=63`; the following offsets and lengths are
//!   stored in units of `2^unit` bytes (for allocator output this is the
//!   vdev's sector shift, so a 1 MiB delta on a 4K-sector vdev costs 2 bytes).
//! * `entry` — an extent relative to a running cursor `prev` (in units):
//!   `svarint delta, varint len`, where
//!   `offset_units = prev + delta` (mod 2^64), `offset = offset_units << unit`,
//!   `len = len_units << unit` (the shift must not overflow), and then
//!   `prev = offset_units + len_units` (mod 2^64).  For sorted, disjoint
//!   extents `delta` is simply the gap since the previous extent's end.
//!
//! ### Record set (`TxgRecords`)
//! ```text
//! magic    4 bytes  "TSL1"
//! version  u16le    1
//! txg      u64le
//! allocs   extent-list
//! frees    extent-list
//!
//! extent-list := ngroups:varint, group × ngroups
//! group       := vdev:varint (<= u32::MAX), unit:u8, n:varint (>= 1),
//!                entry × n            -- prev starts at 0 for each group
//! ```
//! A group holds a maximal run of consecutive list elements with the same
//! vdev (the allocator emits lists sorted by (vdev, offset), so one group
//! per vdev); `unit` is the largest shift dividing every offset and length
//! in the group (capped at 63).
//!
//! ### Checkpoint (`Checkpoint`)
//! ```text
//! magic    4 bytes  "TSC1"
//! version  u16le    1
//! txg      u64le
//! nvdevs   varint
//! vdev × nvdevs:
//!   vdev      varint (<= u32::MAX)
//!   ashift    u8
//!   unit      u8   (<= min(ashift, 63))
//!   start     varint   (units)
//!   size      varint   (units)
//!   nfree     varint
//!   entry × nfree              -- free ranges; prev starts at start (units)
//!   ngroups   varint           -- deferred frees, grouped by txg
//!   group × ngroups:
//!     txg     varint           -- absolute txg the range was freed in
//!     n       varint (>= 1)
//!     entry × n                -- prev starts at start (units) per group
//! ```
//! `unit` is `min(ashift, 63, largest shift dividing start, size and every
//! offset/length of the vdev)`.  A deferred group is a maximal run of
//! consecutive `deferred` elements with the same txg.
//!
//! ## Sizing before serializing
//! The log block (or checkpoint block) has to be allocated before its
//! content is final, because its own allocation is one of the records.  Two
//! bounds are offered:
//! * [`encoded_records_upper_bound`] — from counts only: worst case
//!   [`WORST_EXTENT_BYTES`] per extent.  Always safe, but ~10× the typical size.
//! * [`encoded_records_upper_bound_for`] — the exact size of the records so
//!   far (computed with each group's unit capped at the vdev's sector
//!   shift) plus [`EXTRA_EXTENT_BYTES`] per extent the caller will still add.
//!   Capping the unit makes the bound robust to a new extent lowering a
//!   group's unit.  `metaslab::Allocator::records_upper_bound` wraps it.
//! * [`encoded_checkpoint_upper_bound`] — exact size of a checkpoint plus
//!   [`EXTRA_EXTENT_BYTES`] per allocation or free performed before the final
//!   `checkpoint()` call (no `txg_synced` in between).

use std::fmt;

/// Magic of an encoded record set.
pub const RECORDS_MAGIC: [u8; 4] = *b"TSL1";
/// Magic of an encoded checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 4] = *b"TSC1";
/// The only format version this code writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Bytes of magic + version + txg.
pub const HEADER_BYTES: usize = 14;
/// Longest LEB128 encoding of a u64.
pub const MAX_VARINT_BYTES: usize = 10;
/// Worst-case bytes one extent can add to a record set: its own group
/// (vdev ≤ 5, unit 1, n 1) plus a 10-byte delta and a 10-byte length.
/// (A group of n extents costs at most 6 + varint(n) + 20n ≤ 27n bytes.)
pub const WORST_EXTENT_BYTES: usize = 27;
/// Bytes reserved per extent still to be added to already-sized records or
/// checkpoints (worst case 27 + 1 for a group-count varint growing, or a new
/// deferred group of 10 + 1 + 20 + 1 bytes; rounded up).
pub const EXTRA_EXTENT_BYTES: usize = 48;

const MAX_UNIT: u32 = 63;
// Minimum encoded sizes, used to cap counts by the input length.
const MIN_ENTRY_BYTES: usize = 2;
const MIN_GROUP_BYTES: usize = 3 + MIN_ENTRY_BYTES;
const MIN_DEFERRED_GROUP_BYTES: usize = 2 + MIN_ENTRY_BYTES;
const MIN_VDEV_BYTES: usize = 7;

/// One contiguous extent on a top-level vdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Extent {
    pub vdev: u32,
    pub offset: u64,
    pub len: u64,
}

/// Everything allocated and freed in one txg.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxgRecords {
    pub txg: u64,
    pub allocs: Vec<Extent>,
    pub frees: Vec<Extent>,
}

/// Free-space state of one top-level vdev.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VdevCheckpoint {
    pub vdev: u32,
    pub start: u64,
    pub size: u64,
    pub ashift: u8,
    /// Allocatable ranges `(offset, len)`.
    pub free: Vec<(u64, u64)>,
    /// Freed but not yet reusable ranges `(txg freed in, offset, len)`.
    pub deferred: Vec<(u64, u64, u64)>,
}

/// Complete free-space state of the pool as of the end of `txg`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoint {
    pub txg: u64,
    pub vdevs: Vec<VdevCheckpoint>,
}

/// Why bytes could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    BadMagic,
    UnsupportedVersion(u16),
    Truncated,
    VarintOverflow,
    OverlongVarint,
    /// A count is larger than the remaining input could possibly hold.
    CountTooLarge,
    BadValue(&'static str),
    TrailingBytes(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::BadMagic => write!(f, "bad magic"),
            DecodeError::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            DecodeError::Truncated => write!(f, "input truncated"),
            DecodeError::VarintOverflow => write!(f, "varint exceeds 64 bits"),
            DecodeError::OverlongVarint => write!(f, "overlong varint"),
            DecodeError::CountTooLarge => write!(f, "count exceeds remaining input"),
            DecodeError::BadValue(what) => write!(f, "invalid value: {what}"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} trailing bytes"),
        }
    }
}

impl std::error::Error for DecodeError {}

// ---------------------------------------------------------------- writing

/// Destination of encoded bytes: a buffer, or a counter so that size
/// computations share the exact code path of the encoder.
trait Sink {
    fn put(&mut self, bytes: &[u8]);

    fn put_u8(&mut self, v: u8) {
        self.put(&[v]);
    }

    fn put_varint(&mut self, mut v: u64) {
        let mut buf = [0u8; MAX_VARINT_BYTES];
        let mut n = 0;
        while v >= 0x80 {
            buf[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        buf[n] = v as u8;
        self.put(&buf[..=n]);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

struct Counter(usize);

impl Sink for Counter {
    fn put(&mut self, bytes: &[u8]) {
        self.0 = self.0.saturating_add(bytes.len());
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Largest shift (≤ cap, ≤ 63) dividing every value OR-ed into `acc`.
fn unit_of(acc: u64, cap: u32) -> u32 {
    acc.trailing_zeros().min(cap).min(MAX_UNIT)
}

fn put_header<S: Sink>(s: &mut S, magic: &[u8; 4], txg: u64) {
    s.put(magic);
    s.put(&FORMAT_VERSION.to_le_bytes());
    s.put(&txg.to_le_bytes());
}

/// One `entry` (see module docs); `off`/`len` already in units.
fn put_entry<S: Sink>(s: &mut S, prev: &mut u64, off: u64, len: u64) {
    s.put_varint(zigzag(off.wrapping_sub(*prev) as i64));
    s.put_varint(len);
    *prev = off.wrapping_add(len);
}

/// `unit_cap(vdev)` lowers a group's unit (only used for size bounds).
fn put_extent_list<S: Sink>(s: &mut S, list: &[Extent], unit_cap: &dyn Fn(u32) -> u32) {
    let same_vdev = |a: &Extent, b: &Extent| a.vdev == b.vdev;
    s.put_varint(list.chunk_by(same_vdev).count() as u64);
    for group in list.chunk_by(same_vdev) {
        let vdev = group[0].vdev;
        let acc = group.iter().fold(0u64, |a, e| a | e.offset | e.len);
        let unit = unit_of(acc, unit_cap(vdev));
        s.put_varint(u64::from(vdev));
        s.put_u8(unit as u8);
        s.put_varint(group.len() as u64);
        let mut prev = 0u64;
        for e in group {
            put_entry(s, &mut prev, e.offset >> unit, e.len >> unit);
        }
    }
}

fn put_records<S: Sink>(s: &mut S, r: &TxgRecords, unit_cap: &dyn Fn(u32) -> u32) {
    put_header(s, &RECORDS_MAGIC, r.txg);
    put_extent_list(s, &r.allocs, unit_cap);
    put_extent_list(s, &r.frees, unit_cap);
}

fn vdev_unit(v: &VdevCheckpoint) -> u32 {
    let mut acc = v.start | v.size;
    acc = v.free.iter().fold(acc, |a, &(o, l)| a | o | l);
    acc = v.deferred.iter().fold(acc, |a, &(_, o, l)| a | o | l);
    unit_of(acc, u32::from(v.ashift))
}

fn put_vdev<S: Sink>(s: &mut S, v: &VdevCheckpoint) {
    let unit = vdev_unit(v);
    let start = v.start >> unit;
    s.put_varint(u64::from(v.vdev));
    s.put_u8(v.ashift);
    s.put_u8(unit as u8);
    s.put_varint(start);
    s.put_varint(v.size >> unit);
    s.put_varint(v.free.len() as u64);
    let mut prev = start;
    for &(o, l) in &v.free {
        put_entry(s, &mut prev, o >> unit, l >> unit);
    }
    let same_txg = |a: &(u64, u64, u64), b: &(u64, u64, u64)| a.0 == b.0;
    s.put_varint(v.deferred.chunk_by(same_txg).count() as u64);
    for group in v.deferred.chunk_by(same_txg) {
        s.put_varint(group[0].0);
        s.put_varint(group.len() as u64);
        let mut prev = start;
        for &(_, o, l) in group {
            put_entry(s, &mut prev, o >> unit, l >> unit);
        }
    }
}

fn put_checkpoint<S: Sink>(s: &mut S, c: &Checkpoint) {
    put_header(s, &CHECKPOINT_MAGIC, c.txg);
    s.put_varint(c.vdevs.len() as u64);
    for v in &c.vdevs {
        put_vdev(s, v);
    }
}

/// Serialize a record set (layout in the module docs).
pub fn encode_records(r: &TxgRecords) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_records_upper_bound_for(r, 0, &|_| MAX_UNIT));
    put_records(&mut out, r, &|_| MAX_UNIT);
    out
}

/// Serialize a checkpoint (layout in the module docs).
pub fn encode_checkpoint(c: &Checkpoint) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_checkpoint_upper_bound(c, 0));
    put_checkpoint(&mut out, c);
    out
}

/// Upper bound of `encode_records(r).len()` for any `r` with `nallocs`
/// allocation and `nfrees` free extents (saturates instead of overflowing).
pub fn encoded_records_upper_bound(nallocs: usize, nfrees: usize) -> usize {
    let extents = nallocs.saturating_add(nfrees);
    (HEADER_BYTES + 2 * MAX_VARINT_BYTES).saturating_add(WORST_EXTENT_BYTES.saturating_mul(extents))
}

/// Tight bound: the size of `r` encoded with each group's unit capped at
/// `unit_cap(vdev)` (pass the vdev's ashift), plus [`EXTRA_EXTENT_BYTES`]
/// for each of `extra_extents` extents the caller will still add, each
/// aligned to `2^unit_cap(vdev)` and inserted into sorted, coalesced lists
/// (as `metaslab::Allocator` produces them).
pub fn encoded_records_upper_bound_for(
    r: &TxgRecords,
    extra_extents: usize,
    unit_cap: &dyn Fn(u32) -> u32,
) -> usize {
    let mut c = Counter(0);
    put_records(&mut c, r, unit_cap);
    c.0.saturating_add(EXTRA_EXTENT_BYTES.saturating_mul(extra_extents))
}

/// Exact encoded size of `c` plus [`EXTRA_EXTENT_BYTES`] per allocation or
/// free the caller will perform before taking the checkpoint it writes.
pub fn encoded_checkpoint_upper_bound(c: &Checkpoint, extra_extents: usize) -> usize {
    let mut n = Counter(0);
    put_checkpoint(&mut n, c);
    n.0.saturating_add(EXTRA_EXTENT_BYTES.saturating_mul(extra_extents))
}

// ---------------------------------------------------------------- reading

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let out = self
            .buf
            .get(self.pos..self.pos.saturating_add(n))
            .ok_or(DecodeError::Truncated)?;
        self.pos += n;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    fn u64_le(&mut self) -> Result<u64, DecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn header(&mut self, magic: &[u8; 4]) -> Result<u64, DecodeError> {
        if self.bytes(4).map_err(|_| DecodeError::BadMagic)? != magic {
            return Err(DecodeError::BadMagic);
        }
        let mut v = [0u8; 2];
        v.copy_from_slice(self.bytes(2)?);
        let version = u16::from_le_bytes(v);
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        self.u64_le()
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..MAX_VARINT_BYTES {
            let byte = self.u8()?;
            if i == MAX_VARINT_BYTES - 1 && byte > 1 {
                return Err(DecodeError::VarintOverflow);
            }
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(DecodeError::OverlongVarint);
                }
                return Ok(v);
            }
        }
        Err(DecodeError::VarintOverflow)
    }

    /// A count of items each needing at least `min_item` bytes; refusing
    /// counts the input cannot hold bounds every later allocation.
    fn count(&mut self, min_item: usize) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() / min_item => Ok(n),
            _ => Err(DecodeError::CountTooLarge),
        }
    }

    fn vdev_id(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError::BadValue("vdev id exceeds u32"))
    }

    fn unit(&mut self) -> Result<u32, DecodeError> {
        let u = u32::from(self.u8()?);
        if u > MAX_UNIT {
            return Err(DecodeError::BadValue("unit shift above 63"));
        }
        Ok(u)
    }

    /// One `entry`; returns byte offset and length.
    fn entry(&mut self, prev: &mut u64, unit: u32) -> Result<(u64, u64), DecodeError> {
        let delta = unzigzag(self.varint()?);
        let off = prev.wrapping_add(delta as u64);
        let len = self.varint()?;
        *prev = off.wrapping_add(len);
        Ok((scale(off, unit)?, scale(len, unit)?))
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

fn scale(units: u64, unit: u32) -> Result<u64, DecodeError> {
    let v = units << unit;
    if v >> unit != units {
        return Err(DecodeError::BadValue("value overflows u64"));
    }
    Ok(v)
}

fn read_extent_list(r: &mut Reader<'_>) -> Result<Vec<Extent>, DecodeError> {
    let ngroups = r.count(MIN_GROUP_BYTES)?;
    let mut out = Vec::new();
    for _ in 0..ngroups {
        let vdev = r.vdev_id()?;
        let unit = r.unit()?;
        let n = r.count(MIN_ENTRY_BYTES)?;
        if n == 0 {
            return Err(DecodeError::BadValue("empty extent group"));
        }
        out.reserve(n);
        let mut prev = 0u64;
        for _ in 0..n {
            let (offset, len) = r.entry(&mut prev, unit)?;
            out.push(Extent { vdev, offset, len });
        }
    }
    Ok(out)
}

/// Parse a record set; never panics, memory bounded by `b.len()`.
pub fn decode_records(b: &[u8]) -> Result<TxgRecords, DecodeError> {
    let mut r = Reader { buf: b, pos: 0 };
    let txg = r.header(&RECORDS_MAGIC)?;
    let allocs = read_extent_list(&mut r)?;
    let frees = read_extent_list(&mut r)?;
    r.finish()?;
    Ok(TxgRecords { txg, allocs, frees })
}

fn read_deferred(
    r: &mut Reader<'_>,
    start: u64,
    unit: u32,
) -> Result<Vec<(u64, u64, u64)>, DecodeError> {
    let ngroups = r.count(MIN_DEFERRED_GROUP_BYTES)?;
    let mut out = Vec::new();
    for _ in 0..ngroups {
        let txg = r.varint()?;
        let n = r.count(MIN_ENTRY_BYTES)?;
        if n == 0 {
            return Err(DecodeError::BadValue("empty deferred group"));
        }
        out.reserve(n);
        let mut prev = start;
        for _ in 0..n {
            let (o, l) = r.entry(&mut prev, unit)?;
            out.push((txg, o, l));
        }
    }
    Ok(out)
}

fn read_vdev(r: &mut Reader<'_>) -> Result<VdevCheckpoint, DecodeError> {
    let vdev = r.vdev_id()?;
    let ashift = r.u8()?;
    let unit = r.unit()?;
    if unit > u32::from(ashift) {
        return Err(DecodeError::BadValue("unit shift above ashift"));
    }
    let start_units = r.varint()?;
    let start = scale(start_units, unit)?;
    let size = scale(r.varint()?, unit)?;
    let nfree = r.count(MIN_ENTRY_BYTES)?;
    let mut free = Vec::with_capacity(nfree);
    let mut prev = start_units;
    for _ in 0..nfree {
        free.push(r.entry(&mut prev, unit)?);
    }
    let deferred = read_deferred(r, start_units, unit)?;
    Ok(VdevCheckpoint {
        vdev,
        start,
        size,
        ashift,
        free,
        deferred,
    })
}

/// Parse a checkpoint; never panics, memory bounded by `b.len()`.
pub fn decode_checkpoint(b: &[u8]) -> Result<Checkpoint, DecodeError> {
    let mut r = Reader { buf: b, pos: 0 };
    let txg = r.header(&CHECKPOINT_MAGIC)?;
    let nvdevs = r.count(MIN_VDEV_BYTES)?;
    let mut vdevs = Vec::with_capacity(nvdevs);
    for _ in 0..nvdevs {
        vdevs.push(read_vdev(&mut r)?);
    }
    r.finish()?;
    Ok(Checkpoint { txg, vdevs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(s: &mut u64) -> u64 {
        let mut x = *s;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x;
        x
    }

    /// Values biased towards the interesting: small, aligned, extreme.
    fn value(rng: &mut u64) -> u64 {
        let r = xorshift(rng);
        match r % 8 {
            0 => 0,
            1 => u64::MAX - (r >> 60),
            2 => r,
            3 => (r >> 40) << 9,
            _ => ((r >> 20) % (1 << 30)) << 12,
        }
    }

    fn random_records(rng: &mut u64, max: u64) -> TxgRecords {
        let list = |rng: &mut u64| {
            let n = xorshift(rng) % (max + 1);
            let mut v: Vec<Extent> = (0..n)
                .map(|_| Extent {
                    vdev: (xorshift(rng) % 4) as u32
                        * if xorshift(rng).is_multiple_of(50) {
                            u32::MAX / 3
                        } else {
                            1
                        },
                    offset: value(rng),
                    len: value(rng),
                })
                .collect();
            if xorshift(rng).is_multiple_of(2) {
                v.sort();
            }
            v
        };
        let allocs = list(rng);
        let frees = list(rng);
        TxgRecords {
            txg: value(rng),
            allocs,
            frees,
        }
    }

    fn random_checkpoint(rng: &mut u64, max: u64) -> Checkpoint {
        let nv = xorshift(rng) % 4;
        let vdevs = (0..nv)
            .map(|i| {
                let ashift = if xorshift(rng).is_multiple_of(20) {
                    xorshift(rng) as u8
                } else {
                    9 + (xorshift(rng) % 8) as u8
                };
                let nf = xorshift(rng) % (max + 1);
                let nd = xorshift(rng) % (max / 2 + 1);
                let base_txg = value(rng);
                VdevCheckpoint {
                    vdev: i as u32 * 7,
                    start: value(rng),
                    size: value(rng),
                    ashift,
                    free: (0..nf).map(|_| (value(rng), value(rng))).collect(),
                    deferred: (0..nd)
                        .map(|_| {
                            (
                                base_txg.wrapping_add(xorshift(rng) % 3),
                                value(rng),
                                value(rng),
                            )
                        })
                        .collect(),
                }
            })
            .collect();
        Checkpoint {
            txg: value(rng),
            vdevs,
        }
    }

    #[test]
    fn records_round_trip_and_bound() {
        let empty = TxgRecords::default();
        assert_eq!(decode_records(&encode_records(&empty)), Ok(empty));
        let mut rng = 0x1234_5678_9abc_def1;
        for i in 0..3000 {
            let r = random_records(&mut rng, if i % 10 == 0 { 400 } else { 20 });
            let bytes = encode_records(&r);
            assert_eq!(decode_records(&bytes).as_ref(), Ok(&r));
            assert!(bytes.len() <= encoded_records_upper_bound(r.allocs.len(), r.frees.len()));
            assert_eq!(bytes.len(), encoded_records_upper_bound_for(&r, 0, &|_| 63));
            assert!(bytes.len() <= encoded_records_upper_bound_for(&r, 0, &|_| 9));
            assert_eq!(decode_checkpoint(&bytes), Err(DecodeError::BadMagic));
        }
    }

    #[test]
    fn checkpoint_round_trip_and_bound() {
        let empty = Checkpoint::default();
        assert_eq!(decode_checkpoint(&encode_checkpoint(&empty)), Ok(empty));
        let mut rng = 0xfeed_f00d_dead_beef;
        for i in 0..3000 {
            let c = random_checkpoint(&mut rng, if i % 10 == 0 { 300 } else { 12 });
            let bytes = encode_checkpoint(&c);
            assert_eq!(decode_checkpoint(&bytes).as_ref(), Ok(&c));
            assert_eq!(bytes.len(), encoded_checkpoint_upper_bound(&c, 0));
            assert_eq!(decode_records(&bytes), Err(DecodeError::BadMagic));
        }
    }

    #[test]
    fn sequential_records_are_compact() {
        // 4000 allocations of 128 KiB on two vdevs, most of them adjacent or
        // separated by small gaps, as a busy txg produces them.
        let mut allocs = Vec::new();
        for vdev in 0..2u32 {
            let mut off = 4 << 20;
            for i in 0..2000u64 {
                allocs.push(Extent {
                    vdev,
                    offset: off,
                    len: 128 << 10,
                });
                off += (128 << 10) + (i % 3) * 4096;
            }
        }
        let r = TxgRecords {
            txg: 77,
            allocs,
            frees: Vec::new(),
        };
        let bytes = encode_records(&r);
        assert!(bytes.len() <= 4000 * 3 + 64, "{} bytes", bytes.len());
        assert_eq!(decode_records(&bytes), Ok(r));
    }

    #[test]
    fn malformed_headers_and_counts() {
        let good = encode_records(&TxgRecords {
            txg: 1,
            allocs: Vec::new(),
            frees: Vec::new(),
        });
        assert_eq!(decode_records(&[]), Err(DecodeError::BadMagic));
        assert_eq!(decode_records(&good[..10]), Err(DecodeError::Truncated));
        let mut v = good.clone();
        v[4] = 2;
        assert_eq!(decode_records(&v), Err(DecodeError::UnsupportedVersion(2)));
        let mut v = good.clone();
        v.push(0);
        assert_eq!(decode_records(&v), Err(DecodeError::TrailingBytes(1)));
        // A group count of u64::MAX must be refused before any allocation.
        let mut v = good[..HEADER_BYTES].to_vec();
        v.extend_from_slice(&[0xff; 9]);
        v.push(0x01);
        assert_eq!(decode_records(&v), Err(DecodeError::CountTooLarge));
        let mut v = good[..HEADER_BYTES].to_vec();
        v.extend_from_slice(&[0xff; 10]);
        assert_eq!(decode_records(&v), Err(DecodeError::VarintOverflow));
        let mut v = good[..HEADER_BYTES].to_vec();
        v.extend_from_slice(&[0x80, 0x00, 0x00]);
        assert_eq!(decode_records(&v), Err(DecodeError::OverlongVarint));
        let mut v = CHECKPOINT_MAGIC.to_vec();
        v.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(decode_checkpoint(&v), Err(DecodeError::CountTooLarge));
    }

    fn mutate(rng: &mut u64, src: &[u8]) -> Vec<u8> {
        let mut v = src.to_vec();
        for _ in 0..1 + xorshift(rng) % 4 {
            let r = xorshift(rng);
            let pos = if v.is_empty() {
                0
            } else {
                (r >> 8) as usize % v.len()
            };
            match r % 7 {
                0 if !v.is_empty() => v[pos] ^= 1 << ((r >> 40) % 8),
                1 if !v.is_empty() => v[pos] = (r >> 32) as u8,
                2 => v.truncate(pos),
                3 => v.insert(pos, (r >> 24) as u8),
                4 if !v.is_empty() => {
                    v.remove(pos);
                }
                5 => v.splice(pos..pos, [0xff; 9].iter().copied()).for_each(drop),
                _ => v.extend((0..r % 16).map(|i| (r >> (i % 8)) as u8)),
            }
        }
        v
    }

    #[test]
    fn fuzz_decoders_never_panic() {
        let mut rng = 0x0dd_ba11_cafe_babe;
        let mut seeds = Vec::new();
        for i in 0..40 {
            seeds.push(encode_records(&random_records(&mut rng, 1 + i % 30)));
            seeds.push(encode_checkpoint(&random_checkpoint(&mut rng, 1 + i % 20)));
        }
        let mut ok = 0;
        for i in 0..100_000 {
            let input = if i % 10 == 0 {
                // Pure noise, sometimes behind a valid header.
                let n = xorshift(&mut rng) % 64;
                let mut v: Vec<u8> = (0..n).map(|_| xorshift(&mut rng) as u8).collect();
                if i % 20 == 0 {
                    let seed = &seeds[(i / 20) % seeds.len()];
                    v.splice(0..0, seed[..HEADER_BYTES].iter().copied());
                }
                v
            } else {
                let seed = &seeds[xorshift(&mut rng) as usize % seeds.len()];
                mutate(&mut rng, seed)
            };
            if let Ok(r) = decode_records(&input) {
                ok += 1;
                assert_eq!(decode_records(&encode_records(&r)), Ok(r));
            }
            if let Ok(c) = decode_checkpoint(&input) {
                ok += 1;
                assert_eq!(decode_checkpoint(&encode_checkpoint(&c)), Ok(c));
            }
        }
        // Some mutations (e.g. flipping a value bit) still decode; that is
        // fine, the block checksum is what catches those.
        assert!(ok > 0);
    }
}
