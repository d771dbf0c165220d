//! Dnodes: the on-disk description of one object, and object-set root blocks.
//!
//! An object set is an array of dnodes stored as the data of its object 0 (the
//! "meta dnode"), in 16 KiB dnode blocks of 256 slots of 64 bytes. Object number
//! n lives at slot n (block n / 256, slot n % 256). A dnode takes as many
//! consecutive slots as it needs (1..=64) within one block, so small objects
//! cost little and a small file's data can live *inline* in its dnode instead
//! of in a sector of its own — a 1 KiB object costs 17 slots (1088 bytes) rather
//! than a 4 KiB sector plus a dnode. There is no static inode table: dnode
//! blocks are ordinary blocks, allocated as objects are created.
//!
//! An inline dnode whose tree fields are all implied (no blocks, nothing
//! allocated, a generation below 2^48) is written in a *short* form with a
//! 20-byte header instead of 64, so that a 1 KiB file with its POSIX
//! attributes (108 bytes of bonus) fits 18 slots: 14 such files per dnode
//! block instead of 13.
//!
//! Dnode layout (little-endian):
//!
//! ```text
//!  0 1 type        ObjectType (0: slot free)
//!  1 1 nlevels     levels of the block tree (1: the block pointer names data)
//!  2 1 nblkptr     block pointers in the body (0 or 1)
//!  3 1 flags       bit 0 INLINE: data stored in the body, no block pointer
//!  4 1 slots       64-byte slots this dnode occupies (1..=64)
//!  5 1 indblkshift log2 of the indirect block size (17 = 128 KiB)
//!  6 2 datablkszsec  data block size in 512 B sectors
//!  8 2 bonuslen    bytes of bonus (attributes for the layer above)
//! 10 1 bonustype
//! 11 1 reserved
//! 12 2 maxblkszsec  record size the object grows its blocks to, in sectors
//! 14 2 reserved
//! 16 8 maxblkid    highest level-0 block id written (0 when empty)
//! 24 8 used_bytes  bytes allocated to this object (all copies, all levels)
//! 32 8 size        logical size in bytes
//! 40 8 gen         txg the object was created in
//! 48 16 reserved
//! 64 … body        [block pointer, 128 B, if nblkptr = 1] [bonus] [inline data, `size` bytes]
//! ```
//!
//! Short inline form (flags INLINE | SHORT; nlevels 0, no block pointer,
//! indblkshift 17, maxblkid 0 and used_bytes 0 implied):
//!
//! ```text
//!  0 1 type        1 1 bonustype    2 1 reserved   3 1 flags   4 1 slots
//!  5 1 reserved    6 2 datablkszsec 8 2 bonuslen  10 2 size   12 2 maxblkszsec
//! 14 6 gen (48 bits)
//! 20 … body        [bonus] [inline data, `size` bytes]
//! ```
//!
//! Object-set root block (1 KiB, type Objset):
//!
//! ```text
//!   0 8 magic "tarnobjs" (0x736a626f6e726174 little-endian)
//!   8 1 objset type (1 = pool meta object set, 2 = dataset)
//!  16 192 meta dnode (a dnode header + one block pointer)
//! 208 8 next_object  allocation cursor (slot number)
//! 216 8 object_count objects allocated
//! 224 8 used_bytes   bytes allocated by the whole object set
//! 232 … reserved (zero) to 1024
//! ```

use crate::bp::{BlockPtr, ObjectType, BP_SIZE, MAX_BLOCK_BYTES};
use crate::codec::{le_u16, le_u64, put_u16, put_u64, DecodeError};

pub const SLOT_SIZE: usize = 64;
pub const DNODE_BLOCK_SIZE: usize = 16 << 10;
pub const SLOTS_PER_BLOCK: usize = DNODE_BLOCK_SIZE / SLOT_SIZE;
pub const MAX_SLOTS: usize = 64;
pub const DNODE_HEADER: usize = 64;
/// Header of the short inline form.
pub const SHORT_HEADER: usize = 20;
pub const INDIRECT_SHIFT: u8 = 17;
pub const INDIRECT_BLOCK_SIZE: usize = 1 << INDIRECT_SHIFT;
/// Block pointers per indirect block.
pub const BPS_PER_INDIRECT: u64 = (INDIRECT_BLOCK_SIZE / BP_SIZE) as u64;
pub const MAX_LEVELS: u8 = 7;
pub const OBJSET_PHYS_SIZE: usize = 1024;
const OBJSET_MAGIC: u64 = 0x736a_626f_6e72_6174;
const FLAG_INLINE: u8 = 1;
/// Flag bit of the short inline form (with INLINE).
pub const FLAG_SHORT: u8 = 2;
/// Generations the short form can hold.
const SHORT_GEN_LIMIT: u64 = 1 << 48;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dnode {
    pub otype: ObjectType,
    pub nlevels: u8,
    pub indblkshift: u8,
    pub datablksz: u32,
    pub maxblksz: u32,
    pub bonustype: u8,
    pub bonus: Vec<u8>,
    pub maxblkid: u64,
    pub used_bytes: u64,
    pub size: u64,
    pub gen: u64,
    /// Top of the block tree when the data is not inline.
    pub blkptr: Option<BlockPtr>,
    /// Data stored inline (then `blkptr` is None and nlevels is 0).
    pub inline: Option<Vec<u8>>,
}

impl Dnode {
    pub fn new(otype: ObjectType, maxblksz: u32, gen: u64) -> Self {
        Dnode {
            otype,
            nlevels: 1,
            indblkshift: INDIRECT_SHIFT,
            datablksz: 512,
            maxblksz,
            bonustype: 0,
            bonus: Vec::new(),
            maxblkid: 0,
            used_bytes: 0,
            size: 0,
            gen,
            blkptr: Some(BlockPtr::hole(512, otype, 0)),
            inline: None,
        }
    }

    /// Bytes this dnode occupies on disk, before rounding to slots.
    pub fn encoded_len(&self) -> usize {
        let bp = if self.blkptr.is_some() { BP_SIZE } else { 0 };
        let il = self.inline.as_ref().map_or(0, |v| v.len());
        self.header_len() + bp + self.bonus.len() + il
    }

    /// Whether this dnode is written in the short inline form: inline, and
    /// every field that form leaves out has the value it implies.
    fn is_short(&self) -> bool {
        self.inline.as_ref().is_some_and(|d| d.len() as u64 == self.size)
            && short_holds(self.gen, self.size)
            && self.blkptr.is_none()
            && self.nlevels == 0
            && self.indblkshift == INDIRECT_SHIFT
            && self.maxblkid == 0
            && self.used_bytes == 0
    }

    fn header_len(&self) -> usize {
        if self.is_short() {
            SHORT_HEADER
        } else {
            DNODE_HEADER
        }
    }

    /// Bytes of a dnode of generation `gen` holding `bonus_len` bytes of
    /// bonus and `size` bytes inline (nothing allocated): what an object
    /// needs to go inline.
    pub fn inline_len(gen: u64, bonus_len: usize, size: u64) -> usize {
        let header = if short_holds(gen, size) { SHORT_HEADER } else { DNODE_HEADER };
        header + bonus_len + size as usize
    }

    pub fn slots(&self) -> usize {
        self.encoded_len().div_ceil(SLOT_SIZE)
    }

    /// Encodes into `out`, which must be exactly `slots() * 64` bytes.
    pub fn encode(&self, out: &mut [u8]) {
        let slots = self.slots();
        assert!(slots <= MAX_SLOTS, "dnode of {} slots", slots);
        assert_eq!(out.len(), slots * SLOT_SIZE);
        out.fill(0);
        if self.is_short() {
            self.encode_short(out, slots);
            return;
        }
        out[0] = self.otype as u8;
        out[1] = self.nlevels;
        out[2] = u8::from(self.blkptr.is_some());
        out[3] = if self.inline.is_some() { FLAG_INLINE } else { 0 };
        out[4] = slots as u8;
        out[5] = self.indblkshift;
        put_u16(out, 6, (self.datablksz >> 9) as u16);
        put_u16(out, 8, self.bonus.len() as u16);
        out[10] = self.bonustype;
        put_u16(out, 12, (self.maxblksz >> 9) as u16);
        put_u64(out, 16, self.maxblkid);
        put_u64(out, 24, self.used_bytes);
        put_u64(out, 32, self.size);
        put_u64(out, 40, self.gen);
        let mut o = DNODE_HEADER;
        if let Some(bp) = &self.blkptr {
            bp.encode(&mut out[o..o + BP_SIZE]);
            o += BP_SIZE;
        }
        self.encode_bonus_and_inline(&mut out[o..]);
    }

    /// The body after the header and block pointer: bonus, then inline data.
    fn encode_bonus_and_inline(&self, out: &mut [u8]) {
        let n = self.bonus.len();
        out[..n].copy_from_slice(&self.bonus);
        if let Some(d) = &self.inline {
            out[n..n + d.len()].copy_from_slice(d);
        }
    }

    fn encode_short(&self, out: &mut [u8], slots: usize) {
        out[0] = self.otype as u8;
        out[1] = self.bonustype;
        out[3] = FLAG_INLINE | FLAG_SHORT;
        out[4] = slots as u8;
        put_u16(out, 6, (self.datablksz >> 9) as u16);
        put_u16(out, 8, self.bonus.len() as u16);
        put_u16(out, 10, self.size as u16);
        put_u16(out, 12, (self.maxblksz >> 9) as u16);
        out[14..20].copy_from_slice(&self.gen.to_le_bytes()[..6]);
        self.encode_bonus_and_inline(&mut out[SHORT_HEADER..]);
    }

    fn decode_short(b: &[u8], otype: ObjectType, slots: usize) -> Result<Self, DecodeError> {
        let err = |r: String| DecodeError::new("short dnode", r);
        if b[2] != 0 || b[5] != 0 {
            return Err(err("reserved bytes set".into()));
        }
        let (datablksz, maxblksz) = block_sizes(b).map_err(err)?;
        let (bonuslen, size) = (le_u16(b, 8) as usize, le_u16(b, 10) as usize);
        let end = slots * SLOT_SIZE;
        if SHORT_HEADER + bonuslen + size > end {
            return Err(err(format!("bonus of {} and {} inline bytes past the end of {} slots", bonuslen, size, slots)));
        }
        let mut gen = [0u8; 8];
        gen[..6].copy_from_slice(&b[14..20]);
        let o = SHORT_HEADER + bonuslen;
        Ok(Dnode {
            otype,
            nlevels: 0,
            indblkshift: INDIRECT_SHIFT,
            datablksz,
            maxblksz,
            bonustype: b[1],
            bonus: b[SHORT_HEADER..o].to_vec(),
            maxblkid: 0,
            used_bytes: 0,
            size: size as u64,
            gen: u64::from_le_bytes(gen),
            blkptr: None,
            inline: Some(b[o..o + size].to_vec()),
        })
    }

    /// Decodes the dnode starting at `b[0]`; `b` may extend past it. Returns
    /// Ok(None) for a free slot.
    pub fn decode(b: &[u8]) -> Result<Option<Self>, DecodeError> {
        let what = "dnode";
        let err = |r: String| DecodeError::new(what, r);
        if b.len() < DNODE_HEADER {
            return Err(err("truncated".into()));
        }
        if b[0] == 0 {
            return Ok(None);
        }
        let otype = ObjectType::from_u8(b[0]).ok_or_else(|| err(format!("unknown type {}", b[0])))?;
        let slots = b[4] as usize;
        if slots == 0 || slots > MAX_SLOTS || slots * SLOT_SIZE > b.len() {
            return Err(err(format!("bad slot count {}", slots)));
        }
        let (nblkptr, flags) = (b[2], b[3]);
        if flags == FLAG_INLINE | FLAG_SHORT {
            return Self::decode_short(b, otype, slots).map(Some);
        }
        if nblkptr > 1 || flags & !FLAG_INLINE != 0 || (nblkptr == 1 && flags & FLAG_INLINE != 0) {
            return Err(err("bad block pointer count or flags".into()));
        }
        let (datablksz, maxblksz) = block_sizes(b).map_err(err)?;
        let bonuslen = le_u16(b, 8) as usize;
        let size = le_u64(b, 32);
        let nlevels = b[1];
        if nlevels > MAX_LEVELS || b[5] != INDIRECT_SHIFT {
            return Err(err(format!("bad levels {} or indirect shift {}", nlevels, b[5])));
        }
        let end = slots * SLOT_SIZE;
        let mut o = DNODE_HEADER;
        let blkptr = if nblkptr == 1 {
            if o + BP_SIZE > end {
                return Err(err("block pointer past dnode end".into()));
            }
            let bp = BlockPtr::decode(&b[o..o + BP_SIZE])?;
            o += BP_SIZE;
            Some(bp)
        } else {
            None
        };
        if o + bonuslen > end {
            return Err(err("bonus past dnode end".into()));
        }
        let bonus = b[o..o + bonuslen].to_vec();
        o += bonuslen;
        let inline = if flags & FLAG_INLINE != 0 {
            if size as usize > end - o {
                return Err(err(format!("inline size {} past dnode end", size)));
            }
            Some(b[o..o + size as usize].to_vec())
        } else {
            None
        };
        Ok(Some(Dnode {
            otype,
            nlevels,
            indblkshift: b[5],
            datablksz,
            maxblksz,
            bonustype: b[10],
            bonus,
            maxblkid: le_u64(b, 16),
            used_bytes: le_u64(b, 24),
            size,
            gen: le_u64(b, 40),
            blkptr,
            inline,
        }))
    }
}

/// Whether the short inline form can hold a dnode of generation `gen` with
/// `size` inline bytes (its fields for them are 48 and 16 bits).
fn short_holds(gen: u64, size: u64) -> bool {
    gen < SHORT_GEN_LIMIT && size <= u16::MAX as u64
}

/// The data and record block sizes, at the same offsets in both forms.
fn block_sizes(b: &[u8]) -> Result<(u32, u32), String> {
    let datablksz = (le_u16(b, 6) as u32) << 9;
    let maxblksz = (le_u16(b, 12) as u32) << 9;
    if datablksz == 0 || datablksz > MAX_BLOCK_BYTES || maxblksz > MAX_BLOCK_BYTES {
        return Err(format!("bad block size {}", datablksz));
    }
    Ok((datablksz, maxblksz))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ObjsetType {
    Meta = 1,
    Dataset = 2,
}

/// The root block of an object set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjsetPhys {
    pub ostype: ObjsetType,
    pub meta_dnode: Dnode,
    pub next_object: u64,
    pub object_count: u64,
    pub used_bytes: u64,
}

impl ObjsetPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; OBJSET_PHYS_SIZE];
        put_u64(&mut b, 0, OBJSET_MAGIC);
        b[8] = self.ostype as u8;
        let n = self.meta_dnode.slots() * SLOT_SIZE;
        assert!(n <= 192, "meta dnode must be header + one block pointer");
        self.meta_dnode.encode(&mut b[16..16 + n]);
        put_u64(&mut b, 208, self.next_object);
        put_u64(&mut b, 216, self.object_count);
        put_u64(&mut b, 224, self.used_bytes);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "object set root";
        if b.len() < OBJSET_PHYS_SIZE {
            return Err(DecodeError::new(what, "truncated"));
        }
        if le_u64(b, 0) != OBJSET_MAGIC {
            return Err(DecodeError::new(what, "bad magic"));
        }
        let ostype = match b[8] {
            1 => ObjsetType::Meta,
            2 => ObjsetType::Dataset,
            t => return Err(DecodeError::new(what, format!("unknown object set type {}", t))),
        };
        let meta_dnode = Dnode::decode(&b[16..208])?
            .ok_or_else(|| DecodeError::new(what, "meta dnode missing"))?;
        if meta_dnode.otype != ObjectType::DnodeArray || meta_dnode.blkptr.is_none() {
            return Err(DecodeError::new(what, "meta dnode is not a dnode array"));
        }
        Ok(ObjsetPhys {
            ostype,
            meta_dnode,
            next_object: le_u64(b, 208),
            object_count: le_u64(b, 216),
            used_bytes: le_u64(b, 224),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inline object of generation `gen` holding `data`.
    fn inline_dnode(gen: u64, data: Vec<u8>) -> Dnode {
        let mut d = Dnode::new(ObjectType::PlainData, 131072, gen);
        d.blkptr = None;
        d.nlevels = 0;
        d.size = data.len() as u64;
        d.inline = Some(data);
        d
    }

    /// `d` encoded into its slots; it must decode back to itself.
    fn round_trip(d: &Dnode) -> Vec<u8> {
        let mut buf = vec![0u8; d.slots() * SLOT_SIZE];
        d.encode(&mut buf);
        assert_eq!(Dnode::decode(&buf).unwrap().as_ref(), Some(d));
        buf
    }

    #[test]
    fn inline_dnode_round_trip_and_size() {
        let mut d = inline_dnode(5, vec![0xab; 1024]);
        // Short form: 20 + 1024 bytes.
        assert_eq!(d.slots(), 17);
        assert_eq!(round_trip(&d)[3], FLAG_INLINE | FLAG_SHORT);
        // A 1 KiB file with 108 bytes of attributes fits 18 slots.
        d.bonus = vec![7; 108];
        assert_eq!(Dnode::inline_len(d.gen, 108, 1024), 1152);
        assert_eq!(d.slots(), 18);
        round_trip(&d);
    }

    #[test]
    fn inline_dnodes_the_short_form_cannot_hold_use_the_long_one() {
        let mut d = inline_dnode(1 << 48, vec![1; 100]);
        assert_eq!(d.slots(), (64 + 100usize).div_ceil(64));
        assert_eq!(Dnode::inline_len(d.gen, 0, 100), 164);
        assert_eq!(round_trip(&d)[3], FLAG_INLINE);
        d.gen = 5;
        d.used_bytes = 4096;
        assert_eq!(round_trip(&d)[3], FLAG_INLINE);
    }

    #[test]
    fn bad_short_dnodes_rejected() {
        let buf = round_trip(&inline_dnode(5, vec![1; 100]));
        let mut b = buf.clone();
        b[2] = 1;
        assert!(Dnode::decode(&b).is_err(), "reserved byte");
        let mut b = buf.clone();
        put_u16(&mut b, 10, 200);
        assert!(Dnode::decode(&b).is_err(), "size past the slots");
        let mut b = buf.clone();
        put_u16(&mut b, 6, 0);
        assert!(Dnode::decode(&b).is_err(), "zero block size");
    }

    #[test]
    fn block_dnode_round_trip() {
        let mut d = Dnode::new(ObjectType::PlainData, 1 << 20, 5);
        d.bonus = vec![1, 2, 3];
        d.maxblkid = 99;
        d.size = 100 << 20;
        round_trip(&d);
        assert!(Dnode::decode(&[0u8; 64]).unwrap().is_none());
    }

    #[test]
    fn bad_dnodes_rejected() {
        let buf = round_trip(&Dnode::new(ObjectType::PlainData, 131072, 5));
        let mut b = buf.clone();
        b[4] = 200;
        assert!(Dnode::decode(&b).is_err());
        let mut b = buf.clone();
        b[3] = 1; // inline together with a block pointer
        assert!(Dnode::decode(&b).is_err());
        let mut b = buf;
        b[0] = 250;
        assert!(Dnode::decode(&b).is_err());
    }

    #[test]
    fn objset_round_trip() {
        let os = ObjsetPhys {
            ostype: ObjsetType::Dataset,
            meta_dnode: Dnode::new(ObjectType::DnodeArray, DNODE_BLOCK_SIZE as u32, 1),
            next_object: 300,
            object_count: 12,
            used_bytes: 1 << 20,
        };
        let b = os.encode();
        assert_eq!(ObjsetPhys::decode(&b).unwrap(), os);
    }
}
