//! Block pointers: how one block refers to another.
//!
//! A block pointer is 128 bytes and says everything needed to read and verify
//! the block it names: where it lives (up to three copies, "DVAs"), how large it
//! is before and after compression, which compression and checksum were used,
//! what kind of object it belongs to, its level in that object's block tree,
//! the txg it was born in, and the checksum of its physical bytes. Because the
//! checksum of every block lives in its parent, a tree of block pointers is a
//! Merkle tree rooted at the uberblock.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//!  off size field
//!    0   16 dva[0]   vdev u32 | asize in 512 B units u32 | offset in bytes u64
//!   16   16 dva[1]
//!   32   16 dva[2]
//!   48    4 lsize    logical (uncompressed) size in bytes
//!   52    4 psize    physical (stored) size in bytes, before sector padding
//!   56    1 compress Compression
//!   57    1 checksum ChecksumType
//!   58    1 type     ObjectType
//!   59    1 level    0 = data, n = indirect block n levels above data
//!   60    1 flags    bit 0 EMBEDDED
//!   61    3 reserved (zero)
//!   64    8 birth    logical birth: txg in which this pointer was written
//!   72    8 fill     level 0: 1; indirect: non-hole level-0 blocks beneath;
//!                    dnode blocks: allocated dnodes
//!   80   32 cksum    checksum of the psize physical bytes
//!  112    8 phys_birth  txg in which the data was written, when older than
//!                    `birth` (a cloned block); 0: the same as `birth`
//!  120    8 reserved (zero)
//! ```
//!
//! Two births, as OpenZFS has: a block cloned into another file (block
//! cloning, `engine::pool::brt`) gets a new pointer whose logical birth is
//! the txg of the clone — dead lists and snapshots reason about the pointer,
//! which is new in its file — while its physical birth stays that of the
//! data it shares.
//!
//! A *hole* is a block pointer with no DVA (dva[0].asize == 0) and not embedded:
//! its data reads as lsize zero bytes. An *embedded* block pointer carries its
//! (possibly compressed) payload of at most [`EMBEDDED_MAX`] bytes inside itself,
//! in bytes 0..48 and 72..128, so tiny blocks need no allocation at all.
//!
//! Invariants (checked by [`BlockPtr::validate`]):
//! - psize <= lsize for compressed blocks, psize == lsize for uncompressed ones;
//! - an embedded pointer has psize <= EMBEDDED_MAX;
//! - a non-hole, non-embedded pointer's dva[0] is allocated with asize >= psize;
//! - a physical birth, when set, is not after the logical birth;
//! - enums hold known values.

use crate::codec::{le_u32, le_u64, put_u32, put_u64, DecodeError};

pub const BP_SIZE: usize = 128;
/// Largest payload an embedded block pointer can carry.
pub const EMBEDDED_MAX: usize = 104;
/// Most copies of a block a pointer can name (the `copies` property).
pub const MAX_DVAS: usize = 3;

const FLAG_EMBEDDED: u8 = 1;

/// Compression applied to a block's physical bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    Off = 0,
    Lz4 = 1,
    /// zstd; the level used to compress is not needed to decompress.
    Zstd = 2,
}

impl Compression {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Compression::Off),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Compression::Off => "off",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Checksum algorithm of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumType {
    /// No checksum: only allowed for user data when the property says so.
    Off = 0,
    Fletcher4 = 1,
    Blake3 = 2,
}

impl ChecksumType {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(ChecksumType::Off),
            1 => Some(ChecksumType::Fletcher4),
            2 => Some(ChecksumType::Blake3),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ChecksumType::Off => "off",
            ChecksumType::Fletcher4 => "fletcher4",
            ChecksumType::Blake3 => "blake3",
        }
    }
}

/// What a block holds. Anything but `PlainData` at level 0 counts as metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObjectType {
    None = 0,
    /// Blocks of an object set's dnode array (object 0).
    DnodeArray = 1,
    /// The root block of an object set.
    Objset = 2,
    /// Plain user data (bench objects, file contents).
    PlainData = 3,
    /// A key/value map (pool directory, dataset records, properties).
    KvMap = 4,
    /// A block of the space allocation log.
    SpaceLog = 5,
    /// A block of a space allocation checkpoint.
    SpaceCheckpoint = 6,
    /// A dataset record in the pool's meta object set.
    DatasetRecord = 7,
    /// A directory of the POSIX layer.
    Directory = 8,
    // 9..=15 are left to the POSIX layer (being written in parallel).
    /// The hashed dataset name index of pools made before `DatasetNames`:
    /// its bucket table and its buckets (key/value maps of full names to
    /// dataset record numbers). Read and kept, never created.
    DatasetIndex = 16,
    /// A dataset's dead list: block pointers a snapshot still references
    /// but its successor (a later snapshot or the head) no longer does.
    DeadList = 17,
    /// The block reference table of the meta object set: extra references
    /// of cloned blocks (`brt`).
    BlockRefTable = 18,
    /// The dataset name index of the meta object set, sorted: its directory
    /// and its pages (key/value maps of full names to record numbers).
    DatasetNames = 19,
}

impl ObjectType {
    pub fn from_u8(v: u8) -> Option<Self> {
        use ObjectType::*;
        Some(match v {
            0 => None,
            1 => DnodeArray,
            2 => Objset,
            3 => PlainData,
            4 => KvMap,
            5 => SpaceLog,
            6 => SpaceCheckpoint,
            7 => DatasetRecord,
            8 => Directory,
            16 => DatasetIndex,
            17 => DeadList,
            18 => BlockRefTable,
            19 => DatasetNames,
            _ => return Option::None,
        })
    }
    pub fn name(self) -> &'static str {
        use ObjectType::*;
        match self {
            None => "none",
            DnodeArray => "dnode array",
            Objset => "object set",
            PlainData => "plain data",
            KvMap => "key/value map",
            SpaceLog => "space log",
            SpaceCheckpoint => "space checkpoint",
            DatasetRecord => "dataset record",
            Directory => "directory",
            DatasetIndex => "dataset index",
            DeadList => "dead list",
            BlockRefTable => "block reference table",
            DatasetNames => "dataset names",
        }
    }
    /// Metadata is anything that is not user data: it is cached with priority.
    pub fn is_metadata(self) -> bool {
        !matches!(self, ObjectType::PlainData)
    }

    /// Critical metadata (OpenZFS's `DMU_OT_IS_CRITICAL`): metadata other
    /// than dnode blocks and directories. Losing a block of it can lose a
    /// whole dataset or pool (an object-set root, the MOS's maps, the space
    /// maps); losing a dnode block or a directory block loses the files it
    /// holds or names. `redundant_metadata=some` keeps extra copies of
    /// critical metadata only.
    pub fn is_critical(self) -> bool {
        self.is_metadata() && !matches!(self, ObjectType::DnodeArray | ObjectType::Directory)
    }
}

/// A data virtual address: one copy of a block on one top-level vdev.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dva {
    pub vdev: u32,
    /// Allocated size in bytes (a multiple of 512; 0 means "no DVA").
    pub asize: u64,
    /// Byte offset within the vdev's address space.
    pub offset: u64,
}

impl Dva {
    pub fn is_empty(&self) -> bool {
        self.asize == 0
    }
}

/// A 256-bit checksum value.
pub type Cksum = [u8; 32];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPtr {
    pub dva: [Dva; MAX_DVAS],
    pub lsize: u32,
    pub psize: u32,
    pub compress: Compression,
    pub checksum: ChecksumType,
    pub otype: ObjectType,
    pub level: u8,
    /// Logical birth: the txg this pointer was written in.
    pub birth: u64,
    /// Physical birth when it differs from `birth` (a cloned block), else 0.
    /// Never set on holes or embedded pointers.
    pub phys_birth: u64,
    pub fill: u64,
    pub cksum: Cksum,
    /// Payload of an embedded pointer (psize bytes are meaningful).
    pub embedded: Option<[u8; EMBEDDED_MAX]>,
}

impl Default for BlockPtr {
    fn default() -> Self {
        BlockPtr::hole(0, ObjectType::None, 0)
    }
}

impl BlockPtr {
    /// A hole of `lsize` logical bytes: reads as zeros, occupies nothing.
    pub fn hole(lsize: u32, otype: ObjectType, level: u8) -> Self {
        BlockPtr {
            dva: [Dva::default(); MAX_DVAS],
            lsize,
            psize: 0,
            compress: Compression::Off,
            checksum: ChecksumType::Off,
            otype,
            level,
            birth: 0,
            phys_birth: 0,
            fill: 0,
            cksum: [0; 32],
            embedded: None,
        }
    }

    pub fn is_hole(&self) -> bool {
        self.embedded.is_none() && self.dva[0].is_empty()
    }

    pub fn is_embedded(&self) -> bool {
        self.embedded.is_some()
    }

    /// Number of DVAs in use.
    pub fn ndvas(&self) -> usize {
        self.dva.iter().filter(|d| !d.is_empty()).count()
    }

    /// The txg the block's data was written in (OpenZFS's
    /// `BP_GET_PHYSICAL_BIRTH`): older than `birth` for a cloned block.
    pub fn physical_birth(&self) -> u64 {
        if self.phys_birth != 0 {
            self.phys_birth
        } else {
            self.birth
        }
    }

    /// Total allocated bytes over all copies.
    pub fn asize_total(&self) -> u64 {
        self.dva.iter().map(|d| d.asize).sum()
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), BP_SIZE);
        out.fill(0);
        if let Some(payload) = &self.embedded {
            out[0..48].copy_from_slice(&payload[0..48]);
            out[72..128].copy_from_slice(&payload[48..EMBEDDED_MAX]);
        } else {
            for (i, d) in self.dva.iter().enumerate() {
                let o = i * 16;
                put_u32(out, o, d.vdev);
                put_u32(out, o + 4, (d.asize >> 9) as u32);
                put_u64(out, o + 8, d.offset);
            }
            put_u64(out, 72, self.fill);
            out[80..112].copy_from_slice(&self.cksum);
            put_u64(out, 112, self.phys_birth);
        }
        put_u32(out, 48, self.lsize);
        put_u32(out, 52, self.psize);
        out[56] = self.compress as u8;
        out[57] = self.checksum as u8;
        out[58] = self.otype as u8;
        out[59] = self.level;
        out[60] = if self.embedded.is_some() { FLAG_EMBEDDED } else { 0 };
        put_u64(out, 64, self.birth);
    }

    pub fn to_bytes(&self) -> [u8; BP_SIZE] {
        let mut b = [0u8; BP_SIZE];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < BP_SIZE {
            return Err(DecodeError::new("block pointer", "truncated"));
        }
        let err = |r: &str| DecodeError::new("block pointer", r.to_string());
        let compress = Compression::from_u8(b[56]).ok_or_else(|| err("unknown compression"))?;
        let checksum = ChecksumType::from_u8(b[57]).ok_or_else(|| err("unknown checksum"))?;
        let otype = ObjectType::from_u8(b[58]).ok_or_else(|| err("unknown object type"))?;
        let flags = b[60];
        if flags & !FLAG_EMBEDDED != 0 {
            return Err(err("unknown flags"));
        }
        let mut bp = BlockPtr::hole(le_u32(b, 48), otype, b[59]);
        bp.psize = le_u32(b, 52);
        bp.compress = compress;
        bp.checksum = checksum;
        bp.birth = le_u64(b, 64);
        if flags & FLAG_EMBEDDED != 0 {
            let mut p = [0u8; EMBEDDED_MAX];
            p[0..48].copy_from_slice(&b[0..48]);
            p[48..EMBEDDED_MAX].copy_from_slice(&b[72..128]);
            bp.embedded = Some(p);
            bp.fill = 1;
        } else {
            for i in 0..MAX_DVAS {
                let o = i * 16;
                bp.dva[i] = Dva {
                    vdev: le_u32(b, o),
                    asize: (le_u32(b, o + 4) as u64) << 9,
                    offset: le_u64(b, o + 8),
                };
            }
            bp.fill = le_u64(b, 72);
            bp.cksum.copy_from_slice(&b[80..112]);
            bp.phys_birth = le_u64(b, 112);
        }
        bp.validate()?;
        Ok(bp)
    }

    /// Structural checks that hold for every pointer tarn writes.
    pub fn validate(&self) -> Result<(), DecodeError> {
        let err = |r: String| Err(DecodeError::new("block pointer", r));
        if self.level > 8 {
            return err(format!("level {} too deep", self.level));
        }
        if self.lsize > MAX_BLOCK_BYTES {
            return err(format!("lsize {} exceeds {}", self.lsize, MAX_BLOCK_BYTES));
        }
        if self.psize > self.lsize {
            return err(format!("psize {} > lsize {}", self.psize, self.lsize));
        }
        if self.compress == Compression::Off && !self.is_hole() && self.psize != self.lsize {
            return err(format!("uncompressed with psize {} != lsize {}", self.psize, self.lsize));
        }
        if self.phys_birth > self.birth {
            return err(format!("physical birth {} after logical birth {}", self.phys_birth, self.birth));
        }
        if self.phys_birth != 0 && (self.is_hole() || self.is_embedded()) {
            return err("a hole or embedded pointer with a physical birth".into());
        }
        if self.is_embedded() {
            if self.psize as usize > EMBEDDED_MAX {
                return err(format!("embedded psize {} too large", self.psize));
            }
            return Ok(());
        }
        if self.is_hole() {
            return Ok(());
        }
        for d in self.dva.iter().filter(|d| !d.is_empty()) {
            if d.asize < self.psize as u64 {
                return err(format!("dva asize {} < psize {}", d.asize, self.psize));
            }
        }
        if self.dva[1].is_empty() && !self.dva[2].is_empty() {
            return err("dva[2] set without dva[1]".into());
        }
        Ok(())
    }

    /// The embedded payload's meaningful bytes.
    pub fn embedded_payload(&self) -> Option<&[u8]> {
        self.embedded.as_ref().map(|p| &p[..self.psize as usize])
    }
}

/// Largest block (record) size: 16 MiB, as OpenZFS 2.2+.
pub const MAX_BLOCK_BYTES: u32 = 16 << 20;
/// Smallest block size.
pub const MIN_BLOCK_BYTES: u32 = 512;

const _: () = assert!(BP_SIZE == 3 * 16 + 4 + 4 + 8 + 8 + 8 + 32 + 16);

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BlockPtr {
        let mut bp = BlockPtr::hole(131072, ObjectType::PlainData, 0);
        bp.dva[0] = Dva { vdev: 1, asize: 65536, offset: 1 << 30 };
        bp.psize = 60000;
        bp.compress = Compression::Lz4;
        bp.checksum = ChecksumType::Blake3;
        bp.birth = 42;
        bp.fill = 1;
        bp.cksum = [7u8; 32];
        bp
    }

    #[test]
    fn round_trip() {
        let bp = sample();
        let b = bp.to_bytes();
        assert_eq!(BlockPtr::decode(&b).unwrap(), bp);
    }

    #[test]
    fn physical_birth_round_trips_and_defaults_to_birth() {
        let mut bp = sample();
        assert_eq!(bp.physical_birth(), 42);
        bp.phys_birth = 7;
        let d = BlockPtr::decode(&bp.to_bytes()).unwrap();
        assert_eq!(d, bp);
        assert_eq!(d.physical_birth(), 7);
        bp.phys_birth = 43;
        assert!(BlockPtr::decode(&bp.to_bytes()).is_err(), "physical birth after logical birth");
    }

    #[test]
    fn embedded_round_trip() {
        let mut bp = BlockPtr::hole(1000, ObjectType::PlainData, 0);
        let mut p = [0u8; EMBEDDED_MAX];
        for (i, x) in p.iter_mut().enumerate() {
            *x = i as u8;
        }
        bp.embedded = Some(p);
        bp.psize = EMBEDDED_MAX as u32;
        bp.compress = Compression::Lz4;
        bp.birth = 9;
        bp.fill = 1;
        let d = BlockPtr::decode(&bp.to_bytes()).unwrap();
        assert_eq!(d, bp);
        assert_eq!(d.embedded_payload().unwrap().len(), EMBEDDED_MAX);
    }

    #[test]
    fn hole_is_hole() {
        let h = BlockPtr::hole(4096, ObjectType::PlainData, 0);
        assert!(h.is_hole());
        let d = BlockPtr::decode(&h.to_bytes()).unwrap();
        assert!(d.is_hole());
        assert_eq!(d.lsize, 4096);
    }

    #[test]
    fn rejects_bad_fields() {
        let mut b = sample().to_bytes();
        b[56] = 99;
        assert!(BlockPtr::decode(&b).is_err());
        let mut b = sample().to_bytes();
        put_u32(&mut b, 52, 200000); // psize > lsize
        assert!(BlockPtr::decode(&b).is_err());
        let mut b = sample().to_bytes();
        put_u32(&mut b, 4, 1); // asize 512 < psize
        assert!(BlockPtr::decode(&b).is_err());
    }
}
