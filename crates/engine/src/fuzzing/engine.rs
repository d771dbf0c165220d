//! Bodies for the decoders inside the engine: the space log and checkpoint,
//! block decompression and verification, indirect blocks.

use std::sync::Arc;

use tarn_ondisk::bp::{BlockPtr, ChecksumType, Compression, Dva, ObjectType, BP_SIZE, EMBEDDED_MAX};
use tarn_ondisk::dnode::{BPS_PER_INDIRECT, INDIRECT_BLOCK_SIZE};

use super::ondisk::{check_bp, clear_bp_reserved};
use super::Outcome;
use crate::io::block::{self, WriteProps};
use crate::io::checksum;
use crate::io::compress::{self, CompressSetting};
use crate::object::state::IndBlock;
use crate::pool::alloc::spacelog::{self, FORMAT_VERSION};
use crate::sys::AlignedBuf;

/// Largest logical block size the block body decodes (real blocks go to
/// 16 MiB; 1 MiB keeps runs fast while still spanning several lz4 and zstd
/// block sizes).
pub const FUZZ_LSIZE_MAX: usize = 1 << 20;

/// Bytes of the block body's header: mode byte and logical size.
const BLOCK_HEADER: usize = 5;

/// `magic | version` in front of `data`, so random input reaches the body.
fn behind_header(magic: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_vec();
    v.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// L2ARC device header and log block decoders: the header as is and sealed
/// (valid magic and checksum around the input); the log block as is and
/// behind its magic. An accepted log block re-encodes to one that decodes
/// to the same entries.
pub fn l2arc(data: &[u8]) -> Outcome {
    use crate::arc::l2;
    let mut accepted = vec![l2::fuzz_header(data), l2::fuzz_header(&l2::seal_header(data))];
    let mut logged = b"TARNL2LG".to_vec();
    logged.extend_from_slice(data);
    for input in [data, &logged[..]] {
        if let Some((lap, prev, entries)) = l2::decode_log(input) {
            assert!(entries.len() <= input.len() / 136);
            let len = 72 + entries.len() * 136;
            let again = l2::encode_log(lap, prev, &entries, len);
            let (lap2, prev2, entries2) = l2::decode_log(&again).expect("a re-encoded log block decodes");
            assert_eq!((lap2, prev2), (lap, prev));
            assert_eq!(entries2.len(), entries.len());
            for ((a, ao), (b, bo)) in entries.iter().zip(entries2.iter()) {
                assert_eq!(ao, bo);
                assert_eq!(a.to_bytes(), b.to_bytes());
            }
            accepted.push(true);
        } else {
            accepted.push(false);
        }
    }
    Outcome::from_any(&accepted)
}

/// Space log record set and checkpoint decoders, on the input and on the
/// input behind each header.
pub fn spacelog(data: &[u8]) -> Outcome {
    let records = behind_header(&spacelog::RECORDS_MAGIC, data);
    let checkpoint = behind_header(&spacelog::CHECKPOINT_MAGIC, data);
    let mut accepted = Vec::with_capacity(6);
    for input in [data, &records[..], &checkpoint[..]] {
        accepted.push(spacelog::decode_records(input).map(|r| check_records(&r, input.len())).is_ok());
        accepted.push(spacelog::decode_checkpoint(input).map(|c| check_checkpoint(&c, input.len())).is_ok());
    }
    Outcome::from_any(&accepted)
}

fn check_records(r: &spacelog::TxgRecords, input_len: usize) {
    // Every entry takes at least two bytes, which bounds what decoding holds.
    assert!(r.allocs.len() + r.frees.len() <= input_len / 2);
    let enc = spacelog::encode_records(r);
    assert_eq!(spacelog::decode_records(&enc).as_ref(), Ok(r));
    assert!(enc.len() <= spacelog::encoded_records_upper_bound(r.allocs.len(), r.frees.len()));
    assert_eq!(enc.len(), spacelog::encoded_records_upper_bound_for(r, 0, &|_| 63));
}

fn check_checkpoint(c: &spacelog::Checkpoint, input_len: usize) {
    let entries: usize = c.vdevs.iter().map(|v| v.free.len() + v.deferred.len()).sum();
    assert!(entries <= input_len / 2);
    let enc = spacelog::encode_checkpoint(c);
    assert_eq!(spacelog::decode_checkpoint(&enc).as_ref(), Ok(c));
    assert_eq!(enc.len(), spacelog::encoded_checkpoint_upper_bound(c, 0));
}

/// How the block body interprets its first byte.
struct Mode {
    compress: Compression,
    checksum: ChecksumType,
    sector: usize,
    zstd_level: i32,
}

impl Mode {
    fn from_byte(b: u8) -> Self {
        Mode {
            compress: Compression::from_u8(b & 3).unwrap_or(Compression::Lz4),
            checksum: ChecksumType::from_u8((b >> 2) & 3).unwrap_or(ChecksumType::Blake3),
            sector: if b & 0x10 != 0 { 4096 } else { 512 },
            zstd_level: [1, 3, 6, 9][usize::from(b >> 5) & 3],
        }
    }

    fn setting(&self) -> CompressSetting {
        match self.compress {
            Compression::Off => CompressSetting::Off,
            Compression::Lz4 => CompressSetting::Lz4,
            Compression::Zstd => CompressSetting::Zstd(self.zstd_level),
        }
    }
}

/// Decompression and block decoding. Input: a mode byte (bits 0-1
/// compression, 2-3 checksum, 4 sector size, 5-6 zstd level), the logical
/// size as u32le, then the physical payload.
pub fn block_decode(data: &[u8]) -> Outcome {
    if data.len() < BLOCK_HEADER {
        return Outcome::Rejected;
    }
    let mode = Mode::from_byte(data[0]);
    let lsize = u32::from_le_bytes([data[1], data[2], data[3], data[4]]);
    let payload = &data[BLOCK_HEADER..];
    let mut accepted = Vec::with_capacity(3);
    if lsize as usize <= FUZZ_LSIZE_MAX {
        accepted.push(decompress(&mode, payload, lsize as usize));
        accepted.push(decode_physical(&mode, payload, lsize));
        accepted.push(decode_embedded(&mode, payload, lsize));
    }
    write_then_read(&mode, payload);
    Outcome::from_any(&accepted)
}

/// `compress::decompress` straight on the payload.
fn decompress(mode: &Mode, payload: &[u8], lsize: usize) -> bool {
    let mut out = vec![0u8; lsize];
    let ok = compress::decompress(mode.compress, payload, &mut out).is_ok();
    if ok && mode.compress == Compression::Off {
        assert_eq!(&out[..], payload);
    }
    ok
}

/// `block::decode` of the payload as one stored copy, under a pointer whose
/// checksum matches it (so decompression is reached).
fn decode_physical(mode: &Mode, payload: &[u8], lsize: u32) -> bool {
    let Ok(psize) = u32::try_from(payload.len()) else { return false };
    let mut bp = BlockPtr::hole(lsize, ObjectType::PlainData, 0);
    bp.psize = psize;
    bp.compress = mode.compress;
    bp.checksum = mode.checksum;
    bp.birth = 1;
    bp.fill = 1;
    bp.dva[0] = Dva { vdev: 0, asize: u64::from(psize).div_ceil(512) * 512, offset: 0 };
    bp.cksum = checksum::compute(mode.checksum, payload);
    if bp.is_hole() || bp.validate().is_err() {
        return false;
    }
    let Ok(logical) = block::decode(&bp, AlignedBuf::from_slice(payload)) else { return false };
    assert_eq!(logical.len(), lsize as usize);
    if mode.compress == Compression::Off {
        assert_eq!(&logical[..], payload);
    }
    // One byte short is always refused.
    // (decode takes whole sectors, so a short read is one sector short.)
    if payload.len() > 512 {
        let short = AlignedBuf::from_slice(&payload[..(payload.len() - 1) / 512 * 512]);
        assert!(block::decode(&bp, short).is_err());
    }
    true
}

/// `block::decode_inline` of the payload embedded in a pointer, or of a hole.
fn decode_embedded(mode: &Mode, payload: &[u8], lsize: u32) -> bool {
    let hole = BlockPtr::hole(lsize, ObjectType::PlainData, 0);
    let zeros = block::decode_inline(&hole).expect("a hole always decodes").expect("holes need no I/O");
    assert!(zeros.len() == lsize as usize && compress::is_zero(&zeros));
    if payload.len() > EMBEDDED_MAX {
        return false;
    }
    let mut bp = hole;
    let mut e = [0u8; EMBEDDED_MAX];
    e[..payload.len()].copy_from_slice(payload);
    bp.embedded = Some(e);
    bp.psize = payload.len() as u32;
    bp.compress = mode.compress;
    bp.fill = 1;
    if bp.validate().is_err() {
        return false;
    }
    check_bp(&bp, &bp.to_bytes());
    match block::decode_inline(&bp) {
        Ok(Some(logical)) => {
            assert_eq!(logical.len(), lsize as usize);
            true
        }
        Ok(None) => panic!("an embedded pointer needed I/O"),
        Err(_) => false,
    }
}

/// The write path and the read path are inverses: `prepare` the payload as a
/// block, then decode what it produced and get the payload back.
fn write_then_read(mode: &Mode, payload: &[u8]) {
    let data = Arc::new(AlignedBuf::from_slice(payload));
    let lsize = data.len();
    if lsize > FUZZ_LSIZE_MAX {
        return;
    }
    let props = WriteProps { compress: mode.setting(), checksum: mode.checksum, copies: 1, redundant_metadata: Default::default() };
    let mut p = block::prepare(&data, lsize, ObjectType::PlainData, 0, 7, props, mode.sector);
    let logical = match &p.phys {
        None => block::decode_inline(&p.bp).expect("prepared block decodes").expect("no I/O needed"),
        Some(phys) => {
            assert_eq!(phys.len() % mode.sector, 0);
            p.bp.dva[0] = Dva { vdev: 0, asize: phys.len() as u64, offset: 1 << 20 };
            block::decode(&p.bp, (**phys).clone()).expect("prepared block decodes")
        }
    };
    assert_eq!(&logical[..], &data[..], "prepare → decode lost data");
    check_bp(&p.bp, &p.bp.to_bytes());
}

/// Indirect block decoder: the raw input, then the input as the start of a
/// 128 KiB block of holes.
pub fn indirect(data: &[u8]) -> Outcome {
    let raw = IndBlock::decode(data).map(|b| check_indirect(&b, data)).is_ok();
    let mut block = vec![0u8; INDIRECT_BLOCK_SIZE];
    let n = data.len().min(INDIRECT_BLOCK_SIZE);
    block[..n].copy_from_slice(&data[..n]);
    let padded = IndBlock::decode(&block).map(|b| check_indirect(&b, &block)).is_ok();
    Outcome::from_any(&[raw, padded])
}

/// Pointers of an indirect block whose round trip is checked one by one.
const CHECKED_BPS: usize = 64;

/// 1024 pointers, re-encoding to the same bytes except reserved ones.
fn check_indirect(b: &IndBlock, raw: &[u8]) {
    assert_eq!(b.bps.len() as u64, BPS_PER_INDIRECT);
    let enc = b.encode();
    for (i, (e, r)) in enc.chunks_exact(BP_SIZE).zip(raw.chunks_exact(BP_SIZE)).enumerate() {
        let mut expect = [0u8; BP_SIZE];
        expect.copy_from_slice(r);
        clear_bp_reserved(&mut expect);
        assert!(e == expect, "pointer {i} re-encoded to more than its reserved bytes changed");
    }
    // Decoding the re-encoding gives the same pointers: the bytes differ only
    // where every pointer's decoder looks at nothing, so checking the first
    // pointers (those the fuzzer controls in a padded block) is enough to
    // catch a decoder that reads reserved bytes, at a fraction of the cost.
    for (bp, chunk) in b.bps.iter().zip(enc.chunks_exact(BP_SIZE)).take(CHECKED_BPS) {
        assert_eq!(BlockPtr::decode(chunk).as_ref(), Ok(bp));
    }
}

/// The device signature prober (`sys::probe::identify`). The first byte
/// picks the window: even, the rest is the head; odd, the tail. Whatever
/// it reports must lie inside its window, and zeroing the reported magic
/// must make that report go away (a report names its real cause).
pub fn probe(data: &[u8]) -> Outcome {
    use crate::sys::probe::{identify, Window};
    let Some((&pick, rest)) = data.split_first() else { return Outcome::Rejected };
    let (h, t): (&[u8], &[u8]) = if pick & 1 == 0 { (rest, &[]) } else { (&[], rest) };
    let Some(found) = identify(h, t) else { return Outcome::Rejected };
    let window = match found.window {
        Window::Head => h,
        Window::Tail => t,
    };
    assert!(found.len > 0 && found.offset + found.len <= window.len(), "{found:?} outside its window of {} bytes", window.len());
    let mut zeroed = window.to_vec();
    zeroed[found.offset..found.offset + found.len].fill(0);
    let again = match found.window {
        Window::Head => identify(&zeroed, t),
        Window::Tail => identify(h, &zeroed),
    };
    assert_ne!(again, Some(found), "zeroing the magic left the same report");
    Outcome::Accepted
}
