//! The block reference table (BRT) on disk: for every block that block
//! cloning made more than one pointer to, how many *extra* pointers it has,
//! keyed by the address of its first copy. A block referenced once has no
//! entry; an entry with refcount `n` means `n + 1` pointers.
//!
//! The table is one object of the meta object set (type 18, named by the
//! pool directory's `brt` key), made of 4 KiB blocks: a header, then a
//! hash table of `nbuckets` buckets, one block each.
//!
//! ```text
//! block 0 — header                      block 1 + b — bucket b
//!   0  8 magic "TARNBRT1"                  0  4 magic "TBRB"
//!   8  4 version (1)                       4  2 count (≤ 127)
//!  12  4 reserved (zero)                   6 10 reserved (zero)
//!  16  8 nbuckets (a power of two)        16 32 × count entries, ascending by key:
//!  24  8 entries                                 0 4 vdev | 4 4 reserved (zero)
//!  32  8 used_bytes  Σ asize                     8 8 offset (of the first copy)
//!  40  8 saved_bytes Σ asize × refcount         16 8 asize (all copies of the block)
//!  48 …  reserved (zero)                        24 8 refcount (≥ 1)
//!                                        …     zero
//! ```
//!
//! A key `(vdev, offset)` lives in bucket
//! `u64_le(BLAKE3(vdev u32 LE ‖ offset u64 LE)[0..8]) mod nbuckets`. An
//! all-zero block (a hole) is an empty bucket. The encoding is canonical:
//! every byte not in a field is zero and entries are strictly ascending, so
//! decoding and re-encoding gives the same bytes.
//!
//! Invariants (checked by the decoders): `nbuckets` is a power of two of at
//! most [`BUCKETS_MAX`]; a bucket holds at most [`BUCKET_ENTRIES_MAX`]
//! entries, each with refcount ≥ 1 and a non-zero asize that is a multiple
//! of 512; with no entries both byte totals are zero, and
//! `saved_bytes ≥ used_bytes` (every refcount is at least 1).

use crate::bp::BlockPtr;
use crate::codec::{le_u32, le_u64, put_u32, put_u64, DecodeError};

/// Size of every block of the table object.
pub const BRT_BLOCK_SIZE: usize = 4096;
/// Bytes of one entry.
pub const ENTRY_SIZE: usize = 32;
/// Bytes before a bucket's entries.
const BUCKET_HEAD: usize = 16;
/// Entries one bucket holds.
pub const BUCKET_ENTRIES_MAX: usize = (BRT_BLOCK_SIZE - BUCKET_HEAD) / ENTRY_SIZE;
/// Most buckets a table may have (2^32 × 4 KiB = 16 TiB of table).
pub const BUCKETS_MAX: u64 = 1 << 32;
/// The table format this code reads and writes.
pub const BRT_VERSION: u32 = 1;

const HEADER_MAGIC: &[u8; 8] = b"TARNBRT1";
const BUCKET_MAGIC: &[u8; 4] = b"TBRB";

const _: () = assert!(BUCKET_ENTRIES_MAX == 127);

/// What identifies a block: its first copy's vdev and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrtKey {
    pub vdev: u32,
    pub offset: u64,
}

impl BrtKey {
    /// The key of the block `bp` names (a normal pointer: not a hole, not embedded).
    pub fn of(bp: &BlockPtr) -> BrtKey {
        BrtKey { vdev: bp.dva[0].vdev, offset: bp.dva[0].offset }
    }

    /// The bucket this key lives in, in a table of `nbuckets` (a power of two).
    pub fn bucket(&self, nbuckets: u64) -> u64 {
        debug_assert!(nbuckets.is_power_of_two());
        let mut b = [0u8; 12];
        put_u32(&mut b, 0, self.vdev);
        put_u64(&mut b, 4, self.offset);
        let h = blake3::hash(&b);
        le_u64(h.as_bytes(), 0) & (nbuckets - 1)
    }
}

/// One block's extra references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrtEntry {
    pub key: BrtKey,
    /// Allocated bytes of the block, all copies: what each extra reference saves.
    pub asize: u64,
    /// Extra references (pointers beyond the first), at least 1.
    pub refcount: u64,
}

/// Block 0 of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BrtHeader {
    pub nbuckets: u64,
    pub entries: u64,
    /// Σ asize over the entries: space the cloned blocks take (once each),
    /// OpenZFS's `bcloneused`.
    pub used_bytes: u64,
    /// Σ asize × refcount: space the clones would take as copies,
    /// OpenZFS's `bclonesaved`.
    pub saved_bytes: u64,
}

fn err(what: &'static str, reason: impl Into<String>) -> DecodeError {
    DecodeError::new(what, reason)
}

impl BrtHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BRT_BLOCK_SIZE];
        b[..8].copy_from_slice(HEADER_MAGIC);
        put_u32(&mut b, 8, BRT_VERSION);
        put_u64(&mut b, 16, self.nbuckets);
        put_u64(&mut b, 24, self.entries);
        put_u64(&mut b, 32, self.used_bytes);
        put_u64(&mut b, 40, self.saved_bytes);
        b
    }

    pub fn decode(b: &[u8]) -> Result<BrtHeader, DecodeError> {
        const W: &str = "block reference table header";
        if b.len() != BRT_BLOCK_SIZE {
            return Err(err(W, format!("{} bytes, not {}", b.len(), BRT_BLOCK_SIZE)));
        }
        if &b[..8] != HEADER_MAGIC {
            return Err(err(W, "bad magic"));
        }
        let version = le_u32(b, 8);
        if version != BRT_VERSION {
            return Err(err(W, format!("version {} (this tarn reads {})", version, BRT_VERSION)));
        }
        if le_u32(b, 12) != 0 || b[48..].iter().any(|&x| x != 0) {
            return Err(err(W, "reserved bytes are not zero"));
        }
        let h = BrtHeader { nbuckets: le_u64(b, 16), entries: le_u64(b, 24), used_bytes: le_u64(b, 32), saved_bytes: le_u64(b, 40) };
        if !h.nbuckets.is_power_of_two() || h.nbuckets > BUCKETS_MAX {
            return Err(err(W, format!("{} buckets: not a power of two up to 2^32", h.nbuckets)));
        }
        if h.entries > h.nbuckets * BUCKET_ENTRIES_MAX as u64 {
            return Err(err(W, format!("{} entries do not fit {} buckets", h.entries, h.nbuckets)));
        }
        if h.entries == 0 && (h.used_bytes != 0 || h.saved_bytes != 0) {
            return Err(err(W, "byte totals without entries"));
        }
        if h.saved_bytes < h.used_bytes {
            return Err(err(W, format!("saved {} below used {}: a refcount below 1", h.saved_bytes, h.used_bytes)));
        }
        Ok(h)
    }
}

/// Encodes a bucket; `entries` must be strictly ascending by key and at
/// most [`BUCKET_ENTRIES_MAX`] (callers split the table before).
pub fn encode_bucket(entries: &[BrtEntry]) -> Vec<u8> {
    assert!(entries.len() <= BUCKET_ENTRIES_MAX, "a bucket of {} entries", entries.len());
    assert!(entries.windows(2).all(|w| w[0].key < w[1].key), "bucket entries out of order");
    let mut b = vec![0u8; BRT_BLOCK_SIZE];
    if entries.is_empty() {
        // A zero block: written as a hole.
        return b;
    }
    b[..4].copy_from_slice(BUCKET_MAGIC);
    b[4..6].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        assert!(e.refcount >= 1 && e.asize > 0, "entry {:?} cannot be stored", e);
        let o = BUCKET_HEAD + i * ENTRY_SIZE;
        put_u32(&mut b, o, e.key.vdev);
        put_u64(&mut b, o + 8, e.key.offset);
        put_u64(&mut b, o + 16, e.asize);
        put_u64(&mut b, o + 24, e.refcount);
    }
    b
}

/// Decodes a bucket block (an all-zero block is an empty bucket).
pub fn decode_bucket(b: &[u8]) -> Result<Vec<BrtEntry>, DecodeError> {
    const W: &str = "block reference table bucket";
    if b.len() != BRT_BLOCK_SIZE {
        return Err(err(W, format!("{} bytes, not {}", b.len(), BRT_BLOCK_SIZE)));
    }
    if b.iter().all(|&x| x == 0) {
        return Ok(Vec::new());
    }
    if &b[..4] != BUCKET_MAGIC {
        return Err(err(W, "bad magic"));
    }
    let count = u16::from_le_bytes([b[4], b[5]]) as usize;
    if count == 0 || count > BUCKET_ENTRIES_MAX {
        return Err(err(W, format!("{} entries (1 to {} in a stored bucket)", count, BUCKET_ENTRIES_MAX)));
    }
    let end = BUCKET_HEAD + count * ENTRY_SIZE;
    if b[6..BUCKET_HEAD].iter().chain(&b[end..]).any(|&x| x != 0) {
        return Err(err(W, "reserved bytes are not zero"));
    }
    let mut out: Vec<BrtEntry> = Vec::with_capacity(count);
    for i in 0..count {
        let o = BUCKET_HEAD + i * ENTRY_SIZE;
        if le_u32(b, o + 4) != 0 {
            return Err(err(W, format!("entry {}: reserved bytes are not zero", i)));
        }
        let e = BrtEntry { key: BrtKey { vdev: le_u32(b, o), offset: le_u64(b, o + 8) }, asize: le_u64(b, o + 16), refcount: le_u64(b, o + 24) };
        if e.refcount == 0 {
            return Err(err(W, format!("entry {}: refcount 0", i)));
        }
        if e.asize == 0 || !e.asize.is_multiple_of(512) {
            return Err(err(W, format!("entry {}: asize {} is not a positive multiple of 512", i, e.asize)));
        }
        if out.last().is_some_and(|p| p.key >= e.key) {
            return Err(err(W, format!("entry {}: keys not ascending", i)));
        }
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: u64, refcount: u64) -> BrtEntry {
        BrtEntry { key: BrtKey { vdev: 1, offset }, asize: 131072, refcount }
    }

    #[test]
    fn header_round_trips() {
        let h = BrtHeader { nbuckets: 64, entries: 3, used_bytes: 3 << 17, saved_bytes: 5 << 17 };
        assert_eq!(BrtHeader::decode(&h.encode()).unwrap(), h);
        let mut bad = h;
        bad.nbuckets = 48;
        assert!(BrtHeader::decode(&bad.encode()).is_err(), "not a power of two");
        bad = h;
        bad.saved_bytes = 1;
        assert!(BrtHeader::decode(&bad.encode()).is_err(), "saved below used");
    }

    #[test]
    fn bucket_round_trips_and_is_canonical() {
        let es = vec![entry(0x1000, 1), entry(0x20000, 7)];
        let b = encode_bucket(&es);
        assert_eq!(decode_bucket(&b).unwrap(), es);
        assert_eq!(decode_bucket(&encode_bucket(&[])).unwrap(), vec![]);
        let mut swapped = b.clone();
        swapped[BUCKET_HEAD + 8..BUCKET_HEAD + 16].copy_from_slice(&0x30000u64.to_le_bytes());
        assert!(decode_bucket(&swapped).is_err(), "keys must ascend");
        let mut junk = b.clone();
        junk[4000] = 1;
        assert!(decode_bucket(&junk).is_err(), "bytes past the entries must be zero");
        let mut zero = b;
        zero[BUCKET_HEAD + 24..BUCKET_HEAD + 32].fill(0);
        assert!(decode_bucket(&zero).is_err(), "refcount 0 is no entry");
    }

    #[test]
    fn keys_spread_over_buckets() {
        let mut hits = [0u32; 16];
        for i in 0..1600u64 {
            hits[BrtKey { vdev: 0, offset: i << 17 }.bucket(16) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (50..=150).contains(&h)), "uneven: {:?}", hits);
    }
}
