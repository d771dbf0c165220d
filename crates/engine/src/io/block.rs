//! Turning logical blocks into physical ones and back.
//!
//! Writing a block: an all-zero block becomes a hole (nothing stored); else it
//! is compressed per the property (kept only if that saves 12.5 % and a
//! sector), and a payload of at most 104 bytes is embedded in the block
//! pointer itself; otherwise the payload is padded to the sector size and
//! checksummed, ready for allocation. Reading reverses it: verify the checksum
//! of the physical bytes against the block pointer, then decompress.
//! Verification happens on both sides of the disk: [`prepare`] re-checks the
//! checksum it computed before the block leaves, [`decode`] checks it after
//! the block comes back.

use std::sync::Arc;

use tarn_ondisk::bp::{BlockPtr, ChecksumType, Compression, ObjectType, EMBEDDED_MAX, MAX_DVAS};

use super::checksum;
use super::compress::{self, CompressSetting};
use crate::error::{Error, Result};
use crate::sys::buf::AlignedBuf;

/// How blocks of one object set are written (its properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteProps {
    pub compress: CompressSetting,
    pub checksum: ChecksumType,
    /// Copies of each data block (1..=3), on different vdevs where
    /// possible, else far apart on one (`PoolCore::alloc_copies`).
    pub copies: u8,
    /// Which metadata blocks get one copy more (see [`Self::copies_for`]).
    pub redundant_metadata: RedundantMetadata,
}

impl WriteProps {
    /// Metadata: always compressed (lz4) and checksummed with blake3.
    pub const METADATA: WriteProps = WriteProps {
        compress: CompressSetting::Lz4,
        checksum: ChecksumType::Blake3,
        copies: 1,
        redundant_metadata: RedundantMetadata::All,
    };

    /// Copies of a block of an object of type `otype` at `level` (0: its
    /// data, above: indirect blocks): `copies` for data; for metadata — any
    /// indirect block, and every block of a metadata object (dnode blocks,
    /// directories, key/value maps, the object-set root) — one more when
    /// `redundant_metadata` covers it, at most three. As OpenZFS's
    /// `dmu_write_policy`.
    pub fn copies_for(&self, otype: ObjectType, level: u8) -> u8 {
        let metadata = level > 0 || otype.is_metadata();
        let extra = metadata
            && match self.redundant_metadata {
                RedundantMetadata::All => true,
                RedundantMetadata::Most => level >= MOST_DITTO_LEVEL || otype.is_metadata(),
                RedundantMetadata::Some => otype.is_critical(),
                RedundantMetadata::None => false,
            };
        (self.copies.max(1) + u8::from(extra)).min(MAX_DVAS as u8)
    }
}

/// Under `redundant_metadata=most`, the indirect blocks of data objects get
/// their extra copy from this level up: level 1 (which names up to 1024 data
/// blocks of one file) keeps one (OpenZFS
/// `zfs_redundant_metadata_most_ditto_level`).
const MOST_DITTO_LEVEL: u8 = 2;

/// The `redundant_metadata` property (OpenZFS's values and meaning): which
/// metadata blocks get one copy more than the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RedundantMetadata {
    /// Every metadata block: a single damaged block loses at most one
    /// record of data.
    #[default]
    All,
    /// All but the level-1 indirect blocks of files: a single damaged block
    /// loses at most 1024 records of one file.
    Most,
    /// Only critical metadata (not dnode blocks or directories, see
    /// `ObjectType::is_critical`): a damaged block can lose many files or
    /// directories, but not the dataset.
    Some,
    /// No extra copies: a damaged block can lose the whole dataset.
    None,
}

impl RedundantMetadata {
    pub fn parse(s: &str) -> Option<RedundantMetadata> {
        Some(match s {
            "all" => RedundantMetadata::All,
            "most" => RedundantMetadata::Most,
            "some" => RedundantMetadata::Some,
            "none" => RedundantMetadata::None,
            _ => return None,
        })
    }
}

/// A block ready to be allocated and written.
pub struct Prepared {
    /// Complete except for its DVAs (holes and embedded blocks need none).
    pub bp: BlockPtr,
    /// The physical bytes, padded to the sector size; None for holes and
    /// embedded blocks.
    pub phys: Option<Arc<AlignedBuf>>,
}

/// Prepares `data` (the block's logical content) for writing. When `data` is
/// already a sector-padded buffer and stays uncompressed, it is shared, not
/// copied.
pub fn prepare(
    data: &Arc<AlignedBuf>,
    lsize: usize,
    otype: ObjectType,
    level: u8,
    birth: u64,
    props: WriteProps,
    sector: usize,
) -> Prepared {
    let logical = &data[..lsize];
    let mut bp = BlockPtr::hole(lsize as u32, otype, level);
    bp.birth = birth;
    if compress::is_zero(logical) {
        return Prepared { bp, phys: None };
    }
    let compressed = compress::compress(props.compress, logical, sector);
    let payload: &[u8] = compressed.as_deref().unwrap_or(logical);
    bp.compress = if compressed.is_some() { props.compress.algorithm() } else { Compression::Off };
    bp.psize = payload.len() as u32;
    bp.fill = 1;
    if payload.len() <= EMBEDDED_MAX {
        let mut e = [0u8; EMBEDDED_MAX];
        e[..payload.len()].copy_from_slice(payload);
        bp.embedded = Some(e);
        return Prepared { bp, phys: None };
    }
    bp.checksum = if otype.is_metadata() { ChecksumType::Blake3 } else { props.checksum };
    bp.cksum = checksum::compute(bp.checksum, payload);
    let padded = payload.len().div_ceil(sector) * sector;
    let phys = if compressed.is_none() && data.len() == padded {
        data.clone()
    } else {
        let mut b = AlignedBuf::zeroed(padded);
        b[..payload.len()].copy_from_slice(payload);
        Arc::new(b)
    };
    // The pair check: what leaves must verify against its own pointer.
    debug_assert!(checksum::verify(bp.checksum, &phys[..bp.psize as usize], &bp.cksum));
    Prepared { bp, phys: Some(phys) }
}

/// A block's logical content: an aligned buffer and the length that counts
/// (the buffer is rounded up to whole sectors).
pub struct BlockData {
    buf: AlignedBuf,
    len: usize,
}

impl BlockData {
    pub fn new(buf: AlignedBuf, len: usize) -> Self {
        assert!(len <= buf.len(), "block length {} beyond its buffer of {}", len, buf.len());
        BlockData { buf, len }
    }
    pub fn zeroed(len: usize) -> Self {
        BlockData { buf: AlignedBuf::zeroed(len.div_ceil(512) * 512), len }
    }
}

impl std::fmt::Debug for BlockData {
    /// Only the length: blocks are often megabytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockData").field("len", &self.len).finish()
    }
}

impl std::ops::Deref for BlockData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Verifies `raw` (physical bytes read for `bp`) and returns the logical
/// block. An uncompressed block is returned in the buffer it was read into.
pub fn decode(bp: &BlockPtr, raw: AlignedBuf) -> Result<BlockData> {
    verify(bp, &raw)?;
    let psize = bp.psize as usize;
    if stored_as_is(bp) {
        return Ok(BlockData::new(raw, psize));
    }
    decompress(bp, &raw[..psize])
}

/// Checks that `raw` holds the physical bytes `bp` names (its checksum).
pub fn verify(bp: &BlockPtr, raw: &[u8]) -> Result<()> {
    let psize = bp.psize as usize;
    if raw.len() < psize {
        return Err(Error::corrupt(format!("short block: {} of {} bytes", raw.len(), psize)));
    }
    if !checksum::verify(bp.checksum, &raw[..psize], &bp.cksum) {
        return Err(Error::corrupt(format!(
            "checksum mismatch ({} {} block, birth txg {})",
            bp.checksum.name(),
            bp.otype.name(),
            bp.birth
        )));
    }
    Ok(())
}

/// True when the block's physical bytes are its logical content.
pub fn stored_as_is(bp: &BlockPtr) -> bool {
    bp.compress == Compression::Off && bp.lsize == bp.psize
}

/// The logical content of a block from its (verified) physical payload.
pub fn decompress(bp: &BlockPtr, payload: &[u8]) -> Result<BlockData> {
    let len = bp.lsize as usize;
    let mut out = AlignedBuf::recycled(len.div_ceil(512) * 512);
    compress::decompress(bp.compress, payload, &mut out[..len])?;
    Ok(BlockData::new(out, len))
}

/// The logical content of a hole or embedded block (no I/O needed).
pub fn decode_inline(bp: &BlockPtr) -> Result<Option<BlockData>> {
    if bp.is_hole() {
        return Ok(Some(BlockData::zeroed(bp.lsize as usize)));
    }
    match bp.embedded_payload() {
        Some(p) => decompress(bp, p).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(data: &[u8]) -> Arc<AlignedBuf> {
        Arc::new(AlignedBuf::from_slice(data))
    }

    const DATA: WriteProps =
        WriteProps { compress: CompressSetting::Lz4, checksum: ChecksumType::Fletcher4, copies: 1, redundant_metadata: RedundantMetadata::All };

    #[test]
    fn zero_block_is_a_hole() {
        let p = prepare(&buf(&[0u8; 8192]), 8192, ObjectType::PlainData, 0, 5, DATA, 4096);
        assert!(p.bp.is_hole());
        assert!(p.phys.is_none());
        assert_eq!(&decode_inline(&p.bp).unwrap().unwrap()[..], &[0u8; 8192][..]);
    }

    #[test]
    fn tiny_payload_is_embedded() {
        let mut d = vec![0u8; 4096];
        d[10] = 1;
        let p = prepare(&buf(&d), 4096, ObjectType::PlainData, 0, 5, DATA, 4096);
        assert!(p.bp.is_embedded());
        assert_eq!(&decode_inline(&p.bp).unwrap().unwrap()[..], &d[..]);
    }

    #[test]
    fn incompressible_shares_the_buffer_and_round_trips() {
        let mut x = 99u64;
        let d: Vec<u8> = (0..131072)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let b = buf(&d);
        let p = prepare(&b, d.len(), ObjectType::PlainData, 0, 5, DATA, 4096);
        let phys = p.phys.unwrap();
        assert!(Arc::ptr_eq(&phys, &b));
        assert_eq!(p.bp.compress, Compression::Off);
        assert_eq!(&decode(&p.bp, (*phys).clone()).unwrap()[..], &d[..]);
        let mut bad = (*phys).clone();
        bad[5] ^= 1;
        assert!(decode(&p.bp, bad).is_err());
    }

    #[test]
    fn metadata_uses_blake3() {
        let d: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        let p = prepare(&buf(&d), d.len(), ObjectType::DnodeArray, 0, 5, WriteProps::METADATA, 4096);
        assert_eq!(p.bp.checksum, ChecksumType::Blake3);
        assert_eq!(&decode(&p.bp, (*p.phys.unwrap()).clone()).unwrap()[..], &d[..]);
    }
}
