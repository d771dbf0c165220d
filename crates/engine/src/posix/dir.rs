//! Directories: a compact form for small ones and an extendible hash (in the
//! manner of OpenZFS's fat ZAP) for large ones, over one object of fixed
//! 4 KiB blocks.
//!
//! Every entry has a 64-bit *key*: the top 42 bits of the BLAKE3 hash of its
//! name, then a 20-bit collision differentiator (the smallest not used by
//! another entry with the same hash). Entries are kept in key order, a key
//! never changes while its entry lives, and readdir cookies are keys — so a
//! cookie stays valid whatever is inserted or removed meanwhile.
//!
//! ```text
//!  compact:  block 0 = one leaf (the object is as long as the leaf's bytes;
//!            small ones live inline in the dnode)
//!  hashed:   block 0 = header ─▶ pointer table (2^depth leaf block numbers,
//!            indexed by the top `depth` bits of the hash) ─▶ leaf blocks
//! ```
//!
//! A leaf covers the hashes whose top `leaf depth` bits equal its prefix;
//! several table slots point to it while its depth is below the table's.
//! An insert that overflows a leaf splits it on the next hash bit (doubling
//! the table first when the leaf's depth is the table's). Lookup reads the
//! header, one table block and one leaf: three block reads at any size.
//! Emptied leaves are kept (as the ZAP keeps them).

use super::api::FileKind;
use super::inode::{kind_from_u8, kind_to_u8};
use crate::error::{Error, Result};
use crate::object::{Objset, Tx};

/// Block size of directory objects.
pub(crate) const DIR_BLOCK: usize = 4096;
const HASH_BITS: u32 = 42;
const CD_BITS: u32 = 20;
/// Deepest pointer table: 2^24 slots (128 MiB), room for over a billion
/// names; a directory whose leaves would need more is full (a bound on the
/// table a doubling reads and writes, whatever the names hash to).
const MAX_TABLE_DEPTH: u8 = 24;
const LEAF_MAGIC: u32 = u32::from_le_bytes(*b"tdlf");
const HEADER_MAGIC: u32 = u32::from_le_bytes(*b"tdhh");
const LEAF_HEADER: usize = 16;
/// key u64, inode u64, kind u8, name length u8.
const ENTRY_HEADER: usize = 18;
const PTRS_PER_BLOCK: u64 = (DIR_BLOCK / 8) as u64;

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: u64,
    pub ino: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
}

/// An entry as it lies in an encoded leaf.
struct RawEntry<'a> {
    key: u64,
    ino: u64,
    kind: FileKind,
    name: &'a [u8],
}

pub(crate) fn name_hash(name: &[u8]) -> u64 {
    let h = blake3::hash(name);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes")) >> (64 - HASH_BITS)
}

/// A leaf: the entries whose hash starts with `prefix` (`depth` bits).
#[derive(Clone, Debug, Default)]
struct Leaf {
    depth: u8,
    prefix: u64,
    entries: Vec<Entry>,
}

impl Leaf {
    fn encoded_len(&self) -> usize {
        LEAF_HEADER + self.entries.iter().map(|e| ENTRY_HEADER + e.name.len()).sum::<usize>()
    }

    fn encode(&self, pad: bool) -> Vec<u8> {
        let mut b = Vec::with_capacity(DIR_BLOCK);
        b.extend_from_slice(&LEAF_MAGIC.to_le_bytes());
        b.push(self.depth);
        b.push(0);
        b.extend_from_slice(&(self.entries.len() as u16).to_le_bytes());
        b.extend_from_slice(&self.prefix.to_le_bytes());
        for e in &self.entries {
            b.extend_from_slice(&e.key.to_le_bytes());
            b.extend_from_slice(&e.ino.to_le_bytes());
            b.push(kind_to_u8(e.kind));
            b.push(e.name.len() as u8);
            b.extend_from_slice(&e.name);
        }
        assert!(b.len() <= DIR_BLOCK, "leaf of {} bytes", b.len());
        if pad {
            b.resize(DIR_BLOCK, 0);
        }
        b
    }

    fn decode(b: &[u8]) -> Result<Leaf> {
        let mut entries = Vec::new();
        let (depth, prefix) = Leaf::scan(b, |e| {
            entries.push(Entry { key: e.key, ino: e.ino, kind: e.kind, name: e.name.to_vec() });
            false
        })?;
        Ok(Leaf { depth, prefix, entries })
    }

    /// Walks the encoded leaf `b`, checking it as `decode` does, and calls
    /// `visit` on each entry in key order until it returns true. Returns the
    /// leaf's depth and prefix. Lookups use it directly: they need one entry
    /// and no copy of the other hundred names in the block.
    fn scan(b: &[u8], mut visit: impl FnMut(&RawEntry) -> bool) -> Result<(u8, u64)> {
        if b.is_empty() {
            return Ok((0, 0));
        }
        if b.len() < LEAF_HEADER || u32::from_le_bytes(b[0..4].try_into().expect("4")) != LEAF_MAGIC {
            return Err(Error::corrupt("directory leaf without its magic"));
        }
        let depth = b[4];
        let count = u16::from_le_bytes([b[6], b[7]]) as usize;
        let prefix = u64::from_le_bytes(b[8..16].try_into().expect("8"));
        if depth as u32 > HASH_BITS || prefix >> depth != 0 {
            return Err(Error::corrupt(format!("directory leaf of depth {} and prefix {:#x}", depth, prefix)));
        }
        let mut o = LEAF_HEADER;
        let mut last: Option<u64> = None;
        for _ in 0..count {
            let h = b.get(o..o + ENTRY_HEADER).ok_or_else(|| Error::corrupt("directory entry past its leaf"))?;
            let key = u64::from_le_bytes(h[0..8].try_into().expect("8"));
            let ino = u64::from_le_bytes(h[8..16].try_into().expect("8"));
            let kind = kind_from_u8(h[16])?;
            let nlen = h[17] as usize;
            let name = b.get(o + ENTRY_HEADER..o + ENTRY_HEADER + nlen).ok_or_else(|| Error::corrupt("directory entry name past its leaf"))?;
            if nlen == 0 || last.is_some_and(|p| p >= key) {
                return Err(Error::corrupt("directory leaf entries out of order"));
            }
            last = Some(key);
            if visit(&RawEntry { key, ino, kind, name }) {
                break;
            }
            o += ENTRY_HEADER + nlen;
        }
        Ok((depth, prefix))
    }

    /// The entry `name` (of hash `hash`) in the encoded leaf `b`, without
    /// decoding the rest; the second value is the leaf's (depth, prefix).
    fn find_raw(b: &[u8], name: &[u8], hash: u64) -> Result<(Option<Entry>, (u8, u64))> {
        let mut found = None;
        let dp = Leaf::scan(b, |e| {
            if e.key >> CD_BITS > hash {
                return true;
            }
            if e.key >> CD_BITS == hash && e.name == name {
                found = Some(Entry { key: e.key, ino: e.ino, kind: e.kind, name: e.name.to_vec() });
                return true;
            }
            false
        })?;
        Ok((found, dp))
    }

    fn find(&self, name: &[u8], hash: u64) -> Option<usize> {
        let start = self.entries.partition_point(|e| e.key >> CD_BITS < hash);
        self.entries[start..].iter().take_while(|e| e.key >> CD_BITS == hash).position(|e| e.name == name).map(|i| start + i)
    }

    /// Inserts with the smallest free collision differentiator.
    fn insert(&mut self, name: &[u8], hash: u64, ino: u64, kind: FileKind) -> Result<()> {
        let start = self.entries.partition_point(|e| e.key >> CD_BITS < hash);
        let mut cd = 0u64;
        let mut at = start;
        while at < self.entries.len() && self.entries[at].key == (hash << CD_BITS | cd) {
            cd += 1;
            at += 1;
        }
        if cd >= 1 << CD_BITS {
            return Err(Error::no_space("too many names with one hash in a directory"));
        }
        self.entries.insert(at, Entry { key: hash << CD_BITS | cd, ino, kind, name: name.to_vec() });
        Ok(())
    }
}

/// The header of a hashed directory (block 0).
#[derive(Clone, Copy, Debug)]
struct Header {
    depth: u8,
    table_blk: u64,
    table_blks: u64,
    next_blk: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; DIR_BLOCK];
        b[0..4].copy_from_slice(&HEADER_MAGIC.to_le_bytes());
        b[4] = self.depth;
        b[8..16].copy_from_slice(&self.table_blk.to_le_bytes());
        b[16..24].copy_from_slice(&self.table_blks.to_le_bytes());
        b[24..32].copy_from_slice(&self.next_blk.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<Header> {
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
        if b.len() < 32 {
            return Err(Error::corrupt("short directory header"));
        }
        let h = Header { depth: b[4], table_blk: u(8), table_blks: u(16), next_blk: u(24) };
        let need = (1u64 << h.depth.min(MAX_TABLE_DEPTH)).div_ceil(PTRS_PER_BLOCK);
        // Bounds keep every block offset computed from the header in range.
        let max_blk = crate::object::MAX_OBJECT_BYTES / DIR_BLOCK as u64;
        let bad_table = h.table_blk == 0 || h.table_blk.saturating_add(h.table_blks) > h.next_blk;
        if h.depth > MAX_TABLE_DEPTH || h.table_blks != need || bad_table || h.next_blk > max_blk {
            return Err(Error::corrupt(format!("directory header {:?}", h)));
        }
        Ok(h)
    }
}

/// A directory object and the transaction changing it.
///
/// Its writes skip the pool's space check: the caller checks for space once,
/// before the whole operation changes anything, so that an insert (which may
/// write a new leaf, the old one, pointers and the header, or a whole new
/// table) never stops half-way on ENOSPC; removals may dip into the slop
/// reserve, so that a full pool can still delete.
pub(crate) struct DirTx<'a> {
    pub os: &'a Objset,
    pub tx: &'a Tx,
    pub dir: u64,
}

impl DirTx<'_> {
    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.os.write_txg(self.tx.txg(), self.dir, off, data)
    }

    fn write_leaf(&self, blk: u64, leaf: &Leaf) -> Result<()> {
        self.write(blk * DIR_BLOCK as u64, &leaf.encode(true))
    }

    fn set_ptrs(&self, h: &Header, from: u64, to: u64, blk: u64) -> Result<()> {
        let bytes: Vec<u8> = (from..to).flat_map(|_| blk.to_le_bytes()).collect();
        self.write(h.table_blk * DIR_BLOCK as u64 + from * 8, &bytes)
    }

    /// Adds an entry; `Exists` if the name is there.
    pub fn insert(&self, name: &[u8], ino: u64, kind: FileKind) -> Result<()> {
        let hash = name_hash(name);
        let Some(mut h) = header(self.os, self.dir)? else {
            let mut leaf = micro_leaf(self.os, self.dir)?;
            if leaf.find(name, hash).is_some() {
                return Err(Error::new(crate::ErrorKind::Exists, "name exists"));
            }
            let before = leaf.clone();
            leaf.insert(name, hash, ino, kind)?;
            if leaf.encoded_len() <= DIR_BLOCK {
                let b = leaf.encode(false);
                self.write(0, &b)?;
                return self.os.truncate(self.tx, self.dir, b.len() as u64);
            }
            self.convert(before)?;
            return self.insert(name, ino, kind);
        };
        // Each pass splits a leaf or doubles the table, raising a depth:
        // bounded by two passes per hash bit.
        for _ in 0..2 * HASH_BITS + 2 {
            let (blk, mut leaf) = hashed_leaf(self.os, self.dir, &h, hash >> (HASH_BITS - h.depth as u32))?;
            if leaf.find(name, hash).is_some() {
                return Err(Error::new(crate::ErrorKind::Exists, "name exists"));
            }
            let before = leaf.clone();
            leaf.insert(name, hash, ino, kind)?;
            if leaf.encoded_len() <= DIR_BLOCK {
                return self.write_leaf(blk, &leaf);
            }
            if before.depth >= MAX_TABLE_DEPTH {
                return Err(Error::no_space("directory full: a leaf of names with one hash prefix cannot split further"));
            }
            if before.depth == h.depth {
                h = self.double(h)?;
            } else {
                h = self.split(h, blk, before)?;
            }
        }
        Err(Error::corrupt("directory insert did not converge"))
    }

    /// The compact form becomes hashed: header, a one-slot table, one leaf.
    fn convert(&self, leaf: Leaf) -> Result<()> {
        let h = Header { depth: 0, table_blk: 1, table_blks: 1, next_blk: 3 };
        self.write(0, &h.encode())?;
        let mut ptrs = vec![0u8; DIR_BLOCK];
        ptrs[0..8].copy_from_slice(&2u64.to_le_bytes());
        self.write(DIR_BLOCK as u64, &ptrs)?;
        self.write_leaf(2, &Leaf { depth: 0, prefix: 0, entries: leaf.entries })
    }

    /// Doubles the pointer table into fresh blocks and frees the old ones.
    fn double(&self, h: Header) -> Result<Header> {
        let old = self.os.read(self.dir, h.table_blk * DIR_BLOCK as u64, (8u64 << h.depth) as usize)?;
        let mut new = Vec::with_capacity(old.len() * 2);
        for p in old.chunks_exact(8) {
            new.extend_from_slice(p);
            new.extend_from_slice(p);
        }
        let depth = h.depth + 1;
        let table_blks = (1u64 << depth).div_ceil(PTRS_PER_BLOCK);
        let nh = Header { depth, table_blk: h.next_blk, table_blks, next_blk: h.next_blk + table_blks };
        self.write(nh.table_blk * DIR_BLOCK as u64, &new)?;
        self.write(0, &nh.encode())?;
        self.os.punch(self.tx, self.dir, h.table_blk * DIR_BLOCK as u64, h.table_blks * DIR_BLOCK as u64)?;
        Ok(nh)
    }

    /// Splits the leaf at `blk` on its next hash bit into itself and a new
    /// leaf, and points the upper half of its table slots at the new one.
    fn split(&self, h: Header, blk: u64, leaf: Leaf) -> Result<Header> {
        let depth = leaf.depth + 1;
        let shift = HASH_BITS - depth as u32;
        let (hi, lo): (Vec<Entry>, Vec<Entry>) = leaf.entries.into_iter().partition(|e| (e.key >> CD_BITS >> shift) & 1 == 1);
        let lo_leaf = Leaf { depth, prefix: leaf.prefix << 1, entries: lo };
        let hi_leaf = Leaf { depth, prefix: leaf.prefix << 1 | 1, entries: hi };
        let new_blk = h.next_blk;
        let nh = Header { next_blk: h.next_blk + 1, ..h };
        self.write_leaf(new_blk, &hi_leaf)?;
        self.write_leaf(blk, &lo_leaf)?;
        let span = h.depth - depth;
        let from = hi_leaf.prefix << span;
        self.set_ptrs(&nh, from, from + (1u64 << span), new_blk)?;
        self.write(0, &nh.encode())?;
        Ok(nh)
    }

    /// Removes the entry `name`; returns it, or None if absent.
    pub fn remove(&self, name: &[u8]) -> Result<Option<Entry>> {
        let hash = name_hash(name);
        let Some(h) = header(self.os, self.dir)? else {
            let mut leaf = micro_leaf(self.os, self.dir)?;
            let Some(i) = leaf.find(name, hash) else { return Ok(None) };
            let e = leaf.entries.remove(i);
            let b = if leaf.entries.is_empty() { Vec::new() } else { leaf.encode(false) };
            self.write(0, &b)?;
            self.os.truncate(self.tx, self.dir, b.len() as u64)?;
            return Ok(Some(e));
        };
        let (blk, mut leaf) = hashed_leaf(self.os, self.dir, &h, hash >> (HASH_BITS - h.depth as u32))?;
        let Some(i) = leaf.find(name, hash) else { return Ok(None) };
        let e = leaf.entries.remove(i);
        self.write_leaf(blk, &leaf)?;
        Ok(Some(e))
    }
}

/// The header of a hashed directory; None for a compact one.
fn header(os: &Objset, dir: u64) -> Result<Option<Header>> {
    let b = os.read(dir, 0, 32)?;
    if b.len() >= 4 && u32::from_le_bytes(b[0..4].try_into().expect("4")) == HEADER_MAGIC {
        return Header::decode(&b).map(Some);
    }
    Ok(None)
}

fn micro_leaf(os: &Objset, dir: u64) -> Result<Leaf> {
    Leaf::decode(&os.read(dir, 0, DIR_BLOCK)?)
}

fn table_ptr(os: &Objset, dir: u64, h: &Header, idx: u64) -> Result<u64> {
    let b = os.read(dir, h.table_blk * DIR_BLOCK as u64 + idx * 8, 8)?;
    let blk = u64::from_le_bytes(b.as_slice().try_into().map_err(|_| Error::corrupt("directory pointer table cut short"))?);
    let in_table = blk >= h.table_blk && blk < h.table_blk + h.table_blks;
    if blk == 0 || in_table || blk >= h.next_blk {
        return Err(Error::corrupt(format!("directory table slot {} points at block {}", idx, blk)));
    }
    Ok(blk)
}

/// The leaf table slot `idx` points at, and its block, checked to cover
/// that slot (so that the walks and splits below stay in range).
fn hashed_leaf(os: &Objset, dir: u64, h: &Header, idx: u64) -> Result<(u64, Leaf)> {
    let blk = table_ptr(os, dir, h, idx)?;
    let leaf = Leaf::decode(&os.read(dir, blk * DIR_BLOCK as u64, DIR_BLOCK)?)?;
    check_covers(h, blk, idx, leaf.depth, leaf.prefix)?;
    Ok((blk, leaf))
}

/// A leaf at `blk` of `depth` and `prefix` must cover table slot `idx`.
fn check_covers(h: &Header, blk: u64, idx: u64, depth: u8, prefix: u64) -> Result<()> {
    let covers = depth <= h.depth && {
        let s = h.depth - depth;
        prefix << s <= idx && idx < (prefix + 1) << s
    };
    if !covers {
        return Err(Error::corrupt(format!("directory leaf of depth {} at block {} under table slot {}", depth, blk, idx)));
    }
    Ok(())
}

/// Finds the entry `name`.
pub(crate) fn lookup(os: &Objset, dir: u64, name: &[u8]) -> Result<Option<Entry>> {
    let hash = name_hash(name);
    match header(os, dir)? {
        None => Ok(Leaf::find_raw(&os.read(dir, 0, DIR_BLOCK)?, name, hash)?.0),
        Some(h) => {
            let idx = hash >> (HASH_BITS - h.depth as u32);
            let blk = table_ptr(os, dir, &h, idx)?;
            let (found, (depth, prefix)) = Leaf::find_raw(&os.read(dir, blk * DIR_BLOCK as u64, DIR_BLOCK)?, name, hash)?;
            check_covers(&h, blk, idx, depth, prefix)?;
            Ok(found)
        }
    }
}

/// Up to `max` entries with keys above `after` (all with None), in key order.
pub(crate) fn list(os: &Objset, dir: u64, after: Option<u64>, max: usize) -> Result<Vec<Entry>> {
    let above = |e: &Entry| after.is_none_or(|a| e.key > a);
    let Some(h) = header(os, dir)? else {
        return Ok(micro_leaf(os, dir)?.entries.into_iter().filter(above).take(max).collect());
    };
    let slots = 1u64 << h.depth;
    let mut idx = after.map_or(0, |a| (a >> CD_BITS) >> (HASH_BITS - h.depth as u32));
    let mut out = Vec::new();
    // Each pass moves to the next leaf in hash order: bounded by the slots.
    while idx < slots && out.len() < max {
        let leaf = hashed_leaf(os, dir, &h, idx)?.1;
        out.extend(leaf.entries.into_iter().filter(above).take(max - out.len()));
        idx = (leaf.prefix + 1) << (h.depth - leaf.depth);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_keys_are_ordered_with_differentiators() {
        let mut l = Leaf::default();
        l.insert(b"a", 5, 10, FileKind::File).unwrap();
        l.insert(b"b", 5, 11, FileKind::Dir).unwrap();
        l.insert(b"c", 3, 12, FileKind::File).unwrap();
        let keys: Vec<u64> = l.entries.iter().map(|e| e.key).collect();
        assert_eq!(keys, vec![3 << CD_BITS, 5 << CD_BITS, 5 << CD_BITS | 1]);
        assert_eq!(l.find(b"b", 5), Some(2));
        let d = Leaf::decode(&l.encode(true)).unwrap();
        assert_eq!(d.entries, l.entries);
        for cut in 1..l.encoded_len() {
            assert!(Leaf::decode(&l.encode(false)[..cut]).is_err(), "cut at {cut}");
        }
    }
}
