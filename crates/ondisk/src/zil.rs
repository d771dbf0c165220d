//! The intent log on disk (format.md §18): the log header a dataset record
//! keeps, the log blocks of a chain, and the records inside them.
//!
//! ```text
//!  dataset record "zil" ─▶ header: chain guid, first LogPtr, claim txg, replay seq
//!                                        │
//!                                        ▼
//!  log block seq s  ── next ─▶ log block seq s+1 ── next ─▶ … ─▶ (allocated, never written)
//!  ┌───────────────────────────────────────────┐
//!  │ magic, guid, dataset, seq, used, nrecords │  128-byte header; the checksum (BLAKE3 of the
//!  │ next LogPtr, checksum                     │  header's first 96 bytes and the records)
//!  ├───────────────────────────────────────────┤
//!  │ record: len, kind, seq, txg, payload … │  records back to back, `used` bytes in all
//!  └───────────────────────────────────────────┘
//! ```
//!
//! A chain has no "last block" pointer: a reader follows `next` until the
//! block there does not verify — wrong magic, another chain's guid, another
//! dataset, a sequence number other than the one expected, or a checksum
//! that does not match. A block the writer never finished (torn by a power
//! cut), never wrote, or a stale block of an earlier chain at the same place
//! all end the chain there; nothing after it is read.
//!
//! Records are the POSIX layer's changes (OpenZFS's `lr_*_t`), each with the
//! sequence number it got when it was made and the txg it was made in;
//! replay applies those of txgs after the header's claim txg in sequence
//! order, skipping those up to its replay seq.

use crate::bp::{BlockPtr, ObjectType, BP_SIZE};
use crate::codec::{DecodeError, Reader, Writer};

const BLOCK_MAGIC: &[u8; 8] = b"TARNZIL1";
/// Bytes of a log block's header.
pub const BLOCK_HEADER: usize = 128;
/// The header bytes the checksum covers (the checksum follows them).
const HEADER_SUMMED: usize = 96;
/// Smallest and largest log block (OpenZFS's `zil_maxblocksize`: 128 KiB).
pub const LOG_BLOCK_MIN: u32 = 4096;
pub const LOG_BLOCK_MAX: u32 = 128 << 10;
/// Bytes of an encoded [`LogPtr`].
pub const LOG_PTR_SIZE: usize = 32;
/// Bytes of an encoded [`ZilHeader`].
pub const ZIL_HEADER_SIZE: usize = 1 + 8 + LOG_PTR_SIZE + 8 + 8;
/// Bytes of a record's envelope (length, kind, flags, seq, txg).
pub const RECORD_HEADER: usize = 24;
/// Longest name and value a record carries (NAME_MAX, a symlink target,
/// XATTR_SIZE_MAX): bounds what a hostile record can ask a reader for.
pub const NAME_MAX: usize = 255;
pub const TARGET_MAX: usize = 4095;
pub const XATTR_NAME_MAX: usize = 255;
pub const XATTR_VALUE_MAX: usize = 64 << 10;
/// Largest data a write record carries: a record fits one log block.
pub const WRITE_DATA_MAX: usize = LOG_BLOCK_MAX as usize - BLOCK_HEADER - RECORD_HEADER - 64;

const _: () = assert!(ZIL_HEADER_SIZE == 57);
const _: () = assert!(HEADER_SUMMED + 32 == BLOCK_HEADER);

/// Where a log block is and which one it must be: its copy's place
/// (top-level vdev, offset, allocated length), its length and its sequence
/// number in the chain. `size == 0`: no block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPtr {
    pub vdev: u32,
    pub size: u32,
    pub offset: u64,
    pub asize: u64,
    pub seq: u64,
}

impl LogPtr {
    pub fn is_none(&self) -> bool {
        self.size == 0
    }

    fn put(&self, w: &mut Writer) {
        w.u32(self.vdev);
        w.u32(self.size);
        w.u64(self.offset);
        w.u64(self.asize);
        w.u64(self.seq);
    }

    fn get(r: &mut Reader) -> Result<LogPtr, DecodeError> {
        let p = LogPtr { vdev: r.u32()?, size: r.u32()?, offset: r.u64()?, asize: r.u64()?, seq: r.u64()? };
        if p.is_none() {
            if p != LogPtr::default() {
                return Err(r.err("a log block pointer of size 0 with other fields set"));
            }
            return Ok(p);
        }
        if !(LOG_BLOCK_MIN..=LOG_BLOCK_MAX).contains(&p.size) || !p.size.is_multiple_of(512) {
            return Err(r.err(format!("log block of {} bytes", p.size)));
        }
        if p.asize < p.size as u64 || p.asize > 16 * LOG_BLOCK_MAX as u64 {
            return Err(r.err(format!("log block of {} bytes allocated {} bytes", p.size, p.asize)));
        }
        if p.offset.checked_add(p.asize).is_none() {
            return Err(r.err("log block past the end of any device"));
        }
        Ok(p)
    }
}

/// A dataset's log header (the dataset record's `zil` key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZilHeader {
    /// The chain's random identity (0: the dataset has no log).
    pub guid: u64,
    /// The first block that may hold records not yet synced, or where the
    /// next block will be written.
    pub first: LogPtr,
    /// Set at import when the chain holds records: the pool's last synced
    /// txg then. Records of later txgs are replayed; 0 when not claimed.
    pub claim_txg: u64,
    /// The highest record sequence number replayed so far.
    pub replay_seq: u64,
}

impl ZilHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(ZIL_HEADER_SIZE);
        w.u8(1);
        w.u64(self.guid);
        self.first.put(&mut w);
        w.u64(self.claim_txg);
        w.u64(self.replay_seq);
        w.into_vec()
    }

    pub fn decode(b: &[u8]) -> Result<ZilHeader, DecodeError> {
        let mut r = Reader::new(b, "log header");
        if b.len() != ZIL_HEADER_SIZE {
            return Err(r.err(format!("{} bytes, not {}", b.len(), ZIL_HEADER_SIZE)));
        }
        let version = r.u8()?;
        if version != 1 {
            return Err(r.err(format!("version {}", version)));
        }
        let h = ZilHeader { guid: r.u64()?, first: LogPtr::get(&mut r)?, claim_txg: r.u64()?, replay_seq: r.u64()? };
        if h.guid == 0 && !h.first.is_none() {
            return Err(r.err("a first block without a chain"));
        }
        Ok(h)
    }
}

/// A time as records carry it (seconds and nanoseconds since the epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogTime {
    pub sec: i64,
    pub nsec: u32,
}

/// `Setattr` fields present (`SetattrRec::mask`).
pub mod set {
    pub const MODE: u32 = 1;
    pub const UID: u32 = 2;
    pub const GID: u32 = 4;
    pub const SIZE: u32 = 8;
    pub const ATIME: u32 = 16;
    pub const MTIME: u32 = 32;
    pub const CTIME: u32 = 64;
    pub const ALL: u32 = 127;
}

/// A `setattr` as it was applied: the fields named by `mask`, times
/// already resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetattrRec {
    pub mask: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: LogTime,
    pub mtime: LogTime,
    pub ctime: LogTime,
}

/// One change of the POSIX layer (OpenZFS's TX_* records). `time` is the
/// clock the change read ("now" for its times), so replay gives the same
/// times; `fsetid` whether the caller kept set-ID bits on a data change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRecord {
    /// create, mkdir, mknod, symlink: the new inode's number, generation
    /// and final mode and owner; `target` a symlink's.
    Create { parent: u64, ino: u64, gen: u64, mode: u32, uid: u32, gid: u32, rdev: u32, time: LogTime, name: Vec<u8>, target: Vec<u8> },
    Link { ino: u64, parent: u64, time: LogTime, name: Vec<u8> },
    Remove { parent: u64, dir: bool, time: LogTime, name: Vec<u8> },
    /// `flags`: 1 RENAME_NOREPLACE, 2 RENAME_EXCHANGE.
    Rename { parent: u64, newparent: u64, flags: u32, time: LogTime, name: Vec<u8>, newname: Vec<u8> },
    Write { ino: u64, offset: u64, fsetid: bool, time: LogTime, data: Vec<u8> },
    Setattr { ino: u64, fsetid: bool, time: LogTime, set: SetattrRec },
    /// `flags`: 1 KEEP_SIZE, 2 PUNCH_HOLE, 4 ZERO_RANGE.
    Fallocate { ino: u64, offset: u64, len: u64, flags: u32, fsetid: bool, time: LogTime },
    /// `value` None: removed. `how`: 0 any, 1 create, 2 replace.
    Xattr { ino: u64, how: u8, time: LogTime, name: Vec<u8>, value: Option<Vec<u8>> },
    /// The file grew to `size` without a write (a hole the kernel shows).
    KeepSize { ino: u64, size: u64 },
    /// A write whose block was written in place at commit (OpenZFS's
    /// WR_INDIRECT): the block `bp` names — a level-0 data block of the
    /// file, checksummed, one copy, never a hole or embedded — holds the
    /// file's block at `offset - offset % bp.lsize`, and the write is its
    /// `len` bytes at `offset` (the whole block, or a part of it: the
    /// part must lie inside the block). Replay reads and verifies the
    /// block and writes that part; until the txg holding the write syncs
    /// (and then owns the block), only the log names it.
    WriteIndirect { ino: u64, offset: u64, len: u32, fsetid: bool, time: LogTime, bp: BlockPtr },
}

mod kind {
    pub const CREATE: u16 = 1;
    pub const LINK: u16 = 2;
    pub const REMOVE: u16 = 3;
    pub const RENAME: u16 = 4;
    pub const WRITE: u16 = 5;
    pub const SETATTR: u16 = 6;
    pub const FALLOCATE: u16 = 7;
    pub const XATTR: u16 = 8;
    pub const KEEP_SIZE: u16 = 9;
    pub const WRITE_INDIRECT: u16 = 10;
}

impl LogRecord {
    /// The object the record changes the data or attributes of (0 for
    /// namespace records, which change directories).
    pub fn object(&self) -> u64 {
        match self {
            LogRecord::Write { ino, .. }
            | LogRecord::Setattr { ino, .. }
            | LogRecord::Fallocate { ino, .. }
            | LogRecord::Xattr { ino, .. }
            | LogRecord::KeepSize { ino, .. }
            | LogRecord::WriteIndirect { ino, .. } => *ino,
            _ => 0,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            LogRecord::Create { .. } => "create",
            LogRecord::Link { .. } => "link",
            LogRecord::Remove { .. } => "remove",
            LogRecord::Rename { .. } => "rename",
            LogRecord::Write { .. } => "write",
            LogRecord::Setattr { .. } => "setattr",
            LogRecord::Fallocate { .. } => "fallocate",
            LogRecord::Xattr { .. } => "xattr",
            LogRecord::KeepSize { .. } => "keepsize",
            LogRecord::WriteIndirect { .. } => "indirect",
        }
    }

    /// Every record kind's name, in kind order (for statistics).
    pub const NAMES: [&'static str; 10] = ["create", "link", "remove", "rename", "write", "setattr", "fallocate", "xattr", "keepsize", "indirect"];

    /// Index of the kind in [`LogRecord::NAMES`].
    pub fn kind_index(&self) -> usize {
        self.kind() as usize - 1
    }

    fn kind(&self) -> u16 {
        match self {
            LogRecord::Create { .. } => kind::CREATE,
            LogRecord::Link { .. } => kind::LINK,
            LogRecord::Remove { .. } => kind::REMOVE,
            LogRecord::Rename { .. } => kind::RENAME,
            LogRecord::Write { .. } => kind::WRITE,
            LogRecord::Setattr { .. } => kind::SETATTR,
            LogRecord::Fallocate { .. } => kind::FALLOCATE,
            LogRecord::Xattr { .. } => kind::XATTR,
            LogRecord::KeepSize { .. } => kind::KEEP_SIZE,
            LogRecord::WriteIndirect { .. } => kind::WRITE_INDIRECT,
        }
    }
}

/// A record with its place in the log's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Assigned when the change was made, in the order changes were made.
    pub seq: u64,
    /// The txg the change joined: once it syncs the record is moot.
    pub txg: u64,
    /// More records of the same change follow (a write split over several
    /// records): replay applies a change only when its last record is there.
    pub more: bool,
    pub rec: LogRecord,
}

fn put_time(w: &mut Writer, t: LogTime) {
    w.u64(t.sec as u64);
    w.u32(t.nsec);
}

fn get_time(r: &mut Reader) -> Result<LogTime, DecodeError> {
    let t = LogTime { sec: r.u64()? as i64, nsec: r.u32()? };
    if t.nsec >= 1_000_000_000 {
        return Err(r.err(format!("a time with {} nanoseconds", t.nsec)));
    }
    Ok(t)
}

fn put_bytes(w: &mut Writer, b: &[u8]) {
    w.u32(b.len() as u32);
    w.bytes(b);
}

fn get_bytes(r: &mut Reader, max: usize, what: &str) -> Result<Vec<u8>, DecodeError> {
    let n = r.u32()? as usize;
    if n > max {
        return Err(r.err(format!("{} of {} bytes (at most {})", what, n, max)));
    }
    Ok(r.bytes(n)?.to_vec())
}

fn get_name(r: &mut Reader, what: &str) -> Result<Vec<u8>, DecodeError> {
    let n = get_bytes(r, NAME_MAX, what)?;
    if n.is_empty() || n.contains(&b'/') || n.contains(&0) || n == b"." || n == b".." {
        return Err(r.err(format!("{} {:?} is not a name", what, String::from_utf8_lossy(&n))));
    }
    Ok(n)
}

fn get_bool(r: &mut Reader) -> Result<bool, DecodeError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(r.err(format!("flag byte {}", b))),
    }
}

impl Record {
    /// Bytes `encode` produces.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER
            + match &self.rec {
                LogRecord::Create { name, target, .. } => 8 * 3 + 4 * 4 + 12 + 8 + name.len() + target.len(),
                LogRecord::Link { name, .. } => 16 + 12 + 4 + name.len(),
                LogRecord::Remove { name, .. } => 8 + 1 + 12 + 4 + name.len(),
                LogRecord::Rename { name, newname, .. } => 16 + 4 + 12 + 8 + name.len() + newname.len(),
                LogRecord::Write { data, .. } => 16 + 1 + 12 + 4 + data.len(),
                LogRecord::Setattr { .. } => 8 + 1 + 12 + 4 * 4 + 8 + 36,
                LogRecord::Fallocate { .. } => 24 + 4 + 1 + 12,
                LogRecord::Xattr { name, value, .. } => 8 + 1 + 12 + 4 + name.len() + 1 + value.as_ref().map_or(0, |v| 4 + v.len()),
                LogRecord::KeepSize { .. } => 16,
                LogRecord::WriteIndirect { .. } => 16 + 4 + 1 + 12 + BP_SIZE,
            }
    }

    pub fn encode(&self, w: &mut Writer) {
        let start = w.len();
        w.u32(self.encoded_len() as u32);
        w.u16(self.rec.kind());
        w.u16(self.more as u16);
        w.u64(self.seq);
        w.u64(self.txg);
        match &self.rec {
            LogRecord::Create { parent, ino, gen, mode, uid, gid, rdev, time, name, target } => {
                w.u64(*parent);
                w.u64(*ino);
                w.u64(*gen);
                w.u32(*mode);
                w.u32(*uid);
                w.u32(*gid);
                w.u32(*rdev);
                put_time(w, *time);
                put_bytes(w, name);
                put_bytes(w, target);
            }
            LogRecord::Link { ino, parent, time, name } => {
                w.u64(*ino);
                w.u64(*parent);
                put_time(w, *time);
                put_bytes(w, name);
            }
            LogRecord::Remove { parent, dir, time, name } => {
                w.u64(*parent);
                w.u8(*dir as u8);
                put_time(w, *time);
                put_bytes(w, name);
            }
            LogRecord::Rename { parent, newparent, flags, time, name, newname } => {
                w.u64(*parent);
                w.u64(*newparent);
                w.u32(*flags);
                put_time(w, *time);
                put_bytes(w, name);
                put_bytes(w, newname);
            }
            LogRecord::Write { ino, offset, fsetid, time, data } => {
                w.u64(*ino);
                w.u64(*offset);
                w.u8(*fsetid as u8);
                put_time(w, *time);
                put_bytes(w, data);
            }
            LogRecord::Setattr { ino, fsetid, time, set } => {
                w.u64(*ino);
                w.u8(*fsetid as u8);
                put_time(w, *time);
                w.u32(set.mask);
                w.u32(set.mode);
                w.u32(set.uid);
                w.u32(set.gid);
                w.u64(set.size);
                put_time(w, set.atime);
                put_time(w, set.mtime);
                put_time(w, set.ctime);
            }
            LogRecord::Fallocate { ino, offset, len, flags, fsetid, time } => {
                w.u64(*ino);
                w.u64(*offset);
                w.u64(*len);
                w.u32(*flags);
                w.u8(*fsetid as u8);
                put_time(w, *time);
            }
            LogRecord::Xattr { ino, how, time, name, value } => {
                w.u64(*ino);
                w.u8(*how);
                put_time(w, *time);
                put_bytes(w, name);
                match value {
                    Some(v) => {
                        w.u8(1);
                        put_bytes(w, v);
                    }
                    None => w.u8(0),
                }
            }
            LogRecord::KeepSize { ino, size } => {
                w.u64(*ino);
                w.u64(*size);
            }
            LogRecord::WriteIndirect { ino, offset, len, fsetid, time, bp } => {
                w.u64(*ino);
                w.u64(*offset);
                w.u32(*len);
                w.u8(*fsetid as u8);
                put_time(w, *time);
                w.bytes(&bp.to_bytes());
            }
        }
        debug_assert_eq!(w.len() - start, self.encoded_len());
    }

    /// Decodes one record from the front of `b`; returns it and its length.
    pub fn decode(b: &[u8]) -> Result<(Record, usize), DecodeError> {
        let mut r = Reader::new(b, "log record");
        let len = r.u32()? as usize;
        if len < RECORD_HEADER || len > b.len() {
            return Err(r.err(format!("record of {} bytes with {} left", len, b.len())));
        }
        let mut r = Reader::new(&b[..len], "log record");
        r.skip(4)?;
        let kind = r.u16()?;
        let flags = r.u16()?;
        if flags & !1 != 0 {
            return Err(r.err(format!("record flags {:#x}", flags)));
        }
        let (seq, txg) = (r.u64()?, r.u64()?);
        let rec = decode_body(&mut r, kind)?;
        if r.remaining() != 0 {
            return Err(r.err(format!("{} bytes after a {} record", r.remaining(), rec.name())));
        }
        Ok((Record { seq, txg, more: flags & 1 != 0, rec }, len))
    }
}

fn decode_body(r: &mut Reader, k: u16) -> Result<LogRecord, DecodeError> {
    Ok(match k {
        kind::CREATE => LogRecord::Create {
            parent: r.u64()?,
            ino: r.u64()?,
            gen: r.u64()?,
            mode: r.u32()?,
            uid: r.u32()?,
            gid: r.u32()?,
            rdev: r.u32()?,
            time: get_time(r)?,
            name: get_name(r, "name")?,
            target: get_bytes(r, TARGET_MAX, "symlink target")?,
        },
        kind::LINK => LogRecord::Link { ino: r.u64()?, parent: r.u64()?, time: get_time(r)?, name: get_name(r, "name")? },
        kind::REMOVE => LogRecord::Remove { parent: r.u64()?, dir: get_bool(r)?, time: get_time(r)?, name: get_name(r, "name")? },
        kind::RENAME => {
            let (parent, newparent, flags, time) = (r.u64()?, r.u64()?, r.u32()?, get_time(r)?);
            if flags & !3 != 0 || flags == 3 {
                return Err(r.err(format!("rename flags {:#x}", flags)));
            }
            LogRecord::Rename { parent, newparent, flags, time, name: get_name(r, "name")?, newname: get_name(r, "new name")? }
        }
        kind::WRITE => LogRecord::Write {
            ino: r.u64()?,
            offset: r.u64()?,
            fsetid: get_bool(r)?,
            time: get_time(r)?,
            data: get_bytes(r, WRITE_DATA_MAX, "write data")?,
        },
        kind::SETATTR => {
            let (ino, fsetid, time) = (r.u64()?, get_bool(r)?, get_time(r)?);
            let set = SetattrRec {
                mask: r.u32()?,
                mode: r.u32()?,
                uid: r.u32()?,
                gid: r.u32()?,
                size: r.u64()?,
                atime: get_time(r)?,
                mtime: get_time(r)?,
                ctime: get_time(r)?,
            };
            if set.mask & !set::ALL != 0 {
                return Err(r.err(format!("setattr mask {:#x}", set.mask)));
            }
            LogRecord::Setattr { ino, fsetid, time, set }
        }
        kind::FALLOCATE => {
            let (ino, offset, len, flags) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
            if flags & !7 != 0 {
                return Err(r.err(format!("fallocate flags {:#x}", flags)));
            }
            LogRecord::Fallocate { ino, offset, len, flags, fsetid: get_bool(r)?, time: get_time(r)? }
        }
        kind::XATTR => {
            let (ino, how, time) = (r.u64()?, r.u8()?, get_time(r)?);
            if how > 2 {
                return Err(r.err(format!("xattr mode {}", how)));
            }
            let name = get_bytes(r, XATTR_NAME_MAX, "xattr name")?;
            if name.is_empty() {
                return Err(r.err("an empty xattr name"));
            }
            let value = if get_bool(r)? { Some(get_bytes(r, XATTR_VALUE_MAX, "xattr value")?) } else { None };
            LogRecord::Xattr { ino, how, time, name, value }
        }
        kind::KEEP_SIZE => LogRecord::KeepSize { ino: r.u64()?, size: r.u64()? },
        kind::WRITE_INDIRECT => {
            let (ino, offset, len, fsetid, time) = (r.u64()?, r.u64()?, r.u32()?, get_bool(r)?, get_time(r)?);
            LogRecord::WriteIndirect { ino, offset, len, fsetid, time, bp: get_data_bp(r, offset, len)? }
        }
        k => return Err(r.err(format!("record kind {}", k))),
    })
}

/// The block pointer of an indirect write of `len` bytes at `offset`:
/// canonical (it re-encodes to its bytes), a level-0 data block with one
/// checksummed copy whose logical bytes hold the write (`offset %
/// lsize + len <= lsize`) — what `WriteIndirect` promises replay.
fn get_data_bp(r: &mut Reader, offset: u64, len: u32) -> Result<BlockPtr, DecodeError> {
    let b = r.bytes(BP_SIZE)?;
    let bp = BlockPtr::decode(b).map_err(|e| r.err(format!("indirect write: {}", e)))?;
    if bp.to_bytes()[..] != b[..] {
        return Err(r.err("indirect write: a block pointer not in its canonical form"));
    }
    if bp.is_hole() || bp.is_embedded() || bp.ndvas() != 1 || bp.level != 0 || bp.otype != ObjectType::PlainData {
        return Err(r.err("indirect write: not a level-0 data block with one copy"));
    }
    let inside = bp.lsize > 0 && len > 0 && offset % u64::from(bp.lsize) + u64::from(len) <= u64::from(bp.lsize);
    if bp.checksum == crate::bp::ChecksumType::Off || !inside {
        return Err(r.err(format!("indirect write of {} bytes at {}: block of {} bytes, checksum {}", len, offset, bp.lsize, bp.checksum.name())));
    }
    Ok(bp)
}

/// A log block's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    pub guid: u64,
    pub dataset: u64,
    pub seq: u64,
    /// Bytes of header and records.
    pub used: u32,
    pub nrecords: u32,
    pub next: LogPtr,
}

/// Encodes a log block of `size` bytes: the header, then `records`, zero
/// padding to the end. The records must fit (`block_room`).
pub fn encode_block(h: &BlockHeader, records: &[Record], size: usize) -> Vec<u8> {
    let mut w = Writer::with_capacity(size);
    for r in records {
        r.encode(&mut w);
    }
    seal_block(h, records.len() as u32, &w.into_vec(), size)
}

/// A log block of `size` bytes whose records are the bytes `body` (`n` of
/// them): the header (`used` from the body) with its checksum, the body,
/// zero padding. `encode_block` and the fuzz target's sealed inputs.
pub fn seal_block(h: &BlockHeader, n: u32, body: &[u8], size: usize) -> Vec<u8> {
    let used = BLOCK_HEADER + body.len();
    assert!(used <= size, "log block of {} bytes holds {} bytes of records", size, used);
    let mut w = Writer::with_capacity(size);
    w.bytes(BLOCK_MAGIC);
    w.u64(h.guid);
    w.u64(h.dataset);
    w.u64(h.seq);
    w.u32(used as u32);
    w.u32(n);
    h.next.put(&mut w);
    w.zeros(HEADER_SUMMED - w.len());
    w.zeros(32);
    w.bytes(body);
    let mut b = w.into_vec();
    let sum = block_checksum(&b);
    b[HEADER_SUMMED..BLOCK_HEADER].copy_from_slice(&sum);
    b.resize(size, 0);
    b
}

/// BLAKE3 of a block's header fields and records (`b[..used]` less the
/// checksum's own bytes).
fn block_checksum(b: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&b[..HEADER_SUMMED]);
    h.update(&b[BLOCK_HEADER..]);
    *h.finalize().as_bytes()
}

/// Bytes of records a block of `size` bytes holds.
pub fn block_room(size: u32) -> usize {
    size as usize - BLOCK_HEADER
}

/// What reading a block found.
#[derive(Debug, PartialEq, Eq)]
pub enum BlockRead {
    /// The block expected: its header and records.
    Valid(BlockHeader, Vec<Record>),
    /// Not the block expected (never written, torn, stale, another chain):
    /// the chain ends before it. Why, for the curious.
    End(String),
}

/// Reads the log block expected at `ptr` of chain `guid` of `dataset`
/// from its bytes. A block that does not verify ends the chain
/// ([`BlockRead::End`]); one that verifies but holds records that do not
/// decode is an error (a writer's bug or damage past the checksum).
pub fn decode_block(b: &[u8], guid: u64, dataset: u64, ptr: &LogPtr) -> Result<BlockRead, DecodeError> {
    let mut r = Reader::new(b, "log block");
    if b.len() < BLOCK_HEADER || b.len() < ptr.size as usize {
        return Ok(BlockRead::End(format!("{} bytes read", b.len())));
    }
    if r.bytes(8)? != BLOCK_MAGIC {
        return Ok(BlockRead::End("no log block magic".into()));
    }
    let (g, ds, seq, used, nrecords) = (r.u64()?, r.u64()?, r.u64()?, r.u32()? as usize, r.u32()?);
    if g != guid || ds != dataset || seq != ptr.seq {
        return Ok(BlockRead::End(format!("block of chain {:#x} dataset {} seq {}, expected {:#x}/{}/{}", g, ds, seq, guid, dataset, ptr.seq)));
    }
    if !(BLOCK_HEADER..=ptr.size as usize).contains(&used) {
        return Ok(BlockRead::End(format!("{} bytes used of {}", used, ptr.size)));
    }
    let sum: [u8; 32] = b[HEADER_SUMMED..BLOCK_HEADER].try_into().expect("32 bytes");
    if block_checksum(&b[..used]) != sum {
        return Ok(BlockRead::End("checksum mismatch (torn or damaged)".into()));
    }
    let next = LogPtr::get(&mut r)?;
    if !next.is_none() && next.seq != seq + 1 {
        return Err(r.err(format!("block {} names block {} as next", seq, next.seq)));
    }
    let mut records = Vec::new();
    let mut at = BLOCK_HEADER;
    while at < used {
        let (rec, n) = Record::decode(&b[at..used])?;
        records.push(rec);
        at += n;
    }
    if records.len() != nrecords as usize {
        return Err(r.err(format!("{} records where the header says {}", records.len(), nrecords)));
    }
    Ok(BlockRead::Valid(BlockHeader { guid, dataset, seq, used: used as u32, nrecords, next }, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64) -> LogTime {
        LogTime { sec, nsec: 7 }
    }

    pub(crate) fn samples() -> Vec<Record> {
        let recs = vec![
            LogRecord::Create { parent: 2, ino: 64, gen: 9, mode: 0o100644, uid: 1, gid: 2, rdev: 0, time: t(1), name: b"a".to_vec(), target: vec![] },
            LogRecord::Create { parent: 2, ino: 82, gen: 9, mode: 0o120777, uid: 0, gid: 0, rdev: 0, time: t(2), name: b"l".to_vec(), target: b"/x/y".to_vec() },
            LogRecord::Link { ino: 64, parent: 2, time: t(3), name: b"b".to_vec() },
            LogRecord::Remove { parent: 2, dir: false, time: t(4), name: b"b".to_vec() },
            LogRecord::Rename { parent: 2, newparent: 5, flags: 2, time: t(5), name: b"a".to_vec(), newname: b"c".to_vec() },
            LogRecord::Write { ino: 64, offset: 4096, fsetid: true, time: t(6), data: vec![0xab; 1000] },
            LogRecord::Setattr { ino: 64, fsetid: false, time: t(7), set: SetattrRec { mask: set::MODE | set::SIZE | set::MTIME, mode: 0o600, size: 99, mtime: t(1), ..Default::default() } },
            LogRecord::Fallocate { ino: 64, offset: 0, len: 8192, flags: 3, fsetid: false, time: t(8) },
            LogRecord::Xattr { ino: 64, how: 1, time: t(9), name: b"user.x".to_vec(), value: Some(b"v".to_vec()) },
            LogRecord::Xattr { ino: 64, how: 0, time: t(9), name: b"user.x".to_vec(), value: None },
            LogRecord::KeepSize { ino: 64, size: 1 << 20 },
            LogRecord::WriteIndirect { ino: 64, offset: 1 << 17, len: 1 << 17, fsetid: false, time: t(10), bp: data_bp() },
        ];
        recs.into_iter().enumerate().map(|(i, rec)| Record { seq: i as u64 + 1, txg: 40 + i as u64, more: i == 5, rec }).collect()
    }

    /// A 128 KiB data block compressed to 40 KiB, as an indirect write names.
    pub(crate) fn data_bp() -> BlockPtr {
        let mut bp = BlockPtr::hole(1 << 17, ObjectType::PlainData, 0);
        bp.dva[0] = crate::bp::Dva { vdev: 1, asize: 40 << 10, offset: 9 << 20 };
        bp.psize = 40 << 10;
        bp.compress = crate::bp::Compression::Lz4;
        bp.checksum = crate::bp::ChecksumType::Blake3;
        bp.birth = 12;
        bp.fill = 1;
        bp.cksum = [5; 32];
        bp
    }

    /// An indirect write's pointer must be what replay can trust: one
    /// checksummed copy of a level-0 data block that holds the record's
    /// range, in canonical form.
    #[test]
    fn an_indirect_write_refuses_pointers_replay_cannot_use() {
        let at = |bp: BlockPtr, offset: u64, len: u32| {
            let r = Record { seq: 1, txg: 2, more: false, rec: LogRecord::WriteIndirect { ino: 64, offset, len, fsetid: false, time: t(1), bp } };
            let mut w = Writer::new();
            r.encode(&mut w);
            w.into_vec()
        };
        let rec = |bp: BlockPtr, len: u32| at(bp, 0, len);
        assert!(Record::decode(&rec(data_bp(), 1 << 17)).is_ok());
        // A part of the block: its head, its tail, a piece inside.
        for (offset, len) in [(0, 4096), ((1 << 17) + 16, (1 << 17) - 16), ((3 << 17) + 4096, 8192)] {
            assert!(Record::decode(&at(data_bp(), offset, len)).is_ok(), "{} bytes at {}", len, offset);
        }
        // Running past the block's end, or empty.
        for (offset, len) in [(16, 1 << 17), ((1 << 17) + 4096, (1 << 17) - 4095), (1 << 17, 0)] {
            assert!(Record::decode(&at(data_bp(), offset, len)).is_err(), "{} bytes at {}", len, offset);
        }
        let mut two = data_bp();
        two.dva[1] = crate::bp::Dva { vdev: 0, asize: 40 << 10, offset: 1 << 20 };
        let unsummed = BlockPtr { checksum: crate::bp::ChecksumType::Off, ..data_bp() };
        let meta = BlockPtr { otype: ObjectType::Directory, ..data_bp() };
        let l1 = BlockPtr { level: 1, ..data_bp() };
        for (bp, len, why) in [
            (data_bp(), (1 << 17) + 1, "longer than its block"),
            (BlockPtr::hole(1 << 17, ObjectType::PlainData, 0), 1 << 17, "a hole"),
            (two, 1 << 17, "two copies"),
            (unsummed, 1 << 17, "no checksum"),
            (meta, 1 << 17, "metadata"),
            (l1, 1 << 17, "an indirect block"),
        ] {
            assert!(Record::decode(&rec(bp, len)).is_err(), "{}", why);
        }
        // A reserved byte of the pointer set: not canonical.
        let mut b = rec(data_bp(), 1 << 17);
        let at = RECORD_HEADER + 16 + 4 + 1 + 12 + 121;
        b[at] = 1;
        assert!(Record::decode(&b).is_err());
    }

    #[test]
    fn records_round_trip() {
        for r in samples() {
            let mut w = Writer::new();
            r.encode(&mut w);
            let b = w.into_vec();
            assert_eq!(b.len(), r.encoded_len());
            let (d, n) = Record::decode(&b).unwrap();
            assert_eq!((d, n), (r, b.len()));
        }
    }

    #[test]
    fn header_round_trips_and_refuses_junk() {
        let h = ZilHeader { guid: 5, first: LogPtr { vdev: 1, size: 8192, offset: 1 << 20, asize: 12288, seq: 3 }, claim_txg: 7, replay_seq: 2 };
        assert_eq!(ZilHeader::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[0] = 2;
        assert!(ZilHeader::decode(&b).is_err());
        let bad = ZilHeader { guid: 0, ..h };
        assert!(ZilHeader::decode(&bad.encode()).is_err());
        assert!(ZilHeader::decode(&h.encode()[..20]).is_err());
    }

    #[test]
    fn a_block_verifies_and_anything_else_ends_the_chain() {
        let recs = samples();
        let ptr = LogPtr { vdev: 0, size: 8192, offset: 0, asize: 8192, seq: 11 };
        let next = LogPtr { seq: 12, offset: 8192, ..ptr };
        let h = BlockHeader { guid: 77, dataset: 3, seq: 11, used: 0, nrecords: recs.len() as u32, next };
        let b = encode_block(&h, &recs, 8192);
        match decode_block(&b, 77, 3, &ptr).unwrap() {
            BlockRead::Valid(got, r) => {
                assert_eq!(r, recs);
                assert_eq!(got.next, next);
            }
            e => panic!("{:?}", e),
        }
        // Another chain, another dataset, another seq: the chain ends.
        assert!(matches!(decode_block(&b, 78, 3, &ptr).unwrap(), BlockRead::End(_)));
        assert!(matches!(decode_block(&b, 77, 4, &ptr).unwrap(), BlockRead::End(_)));
        assert!(matches!(decode_block(&b, 77, 3, &LogPtr { seq: 12, ..ptr }).unwrap(), BlockRead::End(_)));
        // A torn block: any byte of header or records changed.
        for at in [9, 40, BLOCK_HEADER + 3, 700] {
            let mut t = b.clone();
            t[at] ^= 1;
            assert!(matches!(decode_block(&t, 77, 3, &ptr).unwrap(), BlockRead::End(_)), "byte {}", at);
        }
        // Padding past `used` is not covered: it may be anything.
        let mut t = b.clone();
        t[8000] = 1;
        assert!(matches!(decode_block(&t, 77, 3, &ptr).unwrap(), BlockRead::Valid(..)));
        assert!(matches!(decode_block(&vec![0u8; 8192], 77, 3, &ptr).unwrap(), BlockRead::End(_)));
    }
}
