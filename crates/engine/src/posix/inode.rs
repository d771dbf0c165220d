//! On-disk encodings of the POSIX layer's fixed records: the inode
//! attributes kept in each inode's dnode bonus (with the small extended
//! attributes after them) and the master object. Little-endian, fixed
//! offsets; every decode checks lengths and returns `Corrupt`, never panics.

use super::api::{FileKind, Timespec};
use crate::error::{Error, Result};

/// Version of the attribute record and of the master object (2: the
/// record lost its own version and xattr length, which the master and the
/// bonus length give).
pub(crate) const POSIX_VERSION: u32 = 2;
/// Bytes of the fixed attribute record at the start of the bonus.
pub(crate) const ATTR_BYTES: usize = 108;
const MASTER_MAGIC: u64 = u64::from_le_bytes(*b"tarnposx");
pub(crate) const MASTER_BYTES: usize = 64;

/// An inode's attributes as stored in its bonus.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct InodePhys {
    /// `S_IFMT` and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    /// Files and symlinks: bytes; directories: entries (without . and ..).
    pub size: u64,
    pub gen: u64,
    /// The directory that holds it (the last one linked, for non-directories).
    pub parent: u64,
    pub flags: u64,
    /// Object holding the large extended attributes (0: none).
    pub xattr_obj: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    /// Small extended attributes, kept in the bonus after the fixed record.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn put_ts(b: &mut [u8], at: usize, t: Timespec) {
    b[at..at + 8].copy_from_slice(&t.sec.to_le_bytes());
    b[at + 8..at + 12].copy_from_slice(&t.nsec.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn ts_at(b: &[u8], at: usize) -> Result<Timespec> {
    let t = Timespec { sec: u64_at(b, at) as i64, nsec: u32_at(b, at + 8) };
    if t.nsec >= 1_000_000_000 {
        return Err(Error::corrupt(format!("timestamp with {} nanoseconds", t.nsec)));
    }
    Ok(t)
}

impl InodePhys {
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_mode(self.mode)
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == Some(FileKind::Dir)
    }

    /// Bytes of the small-xattr region.
    pub fn xattr_bytes(xattrs: &[(Vec<u8>, Vec<u8>)]) -> usize {
        xattrs.iter().map(|(n, v)| 3 + n.len() + v.len()).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let xlen = Self::xattr_bytes(&self.xattrs);
        let mut b = vec![0u8; ATTR_BYTES + xlen];
        for (at, v) in [(0, self.mode), (4, self.uid), (8, self.gid), (12, self.nlink), (16, self.rdev)] {
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        for (at, v) in [(20, self.size), (28, self.gen), (36, self.parent), (44, self.flags), (52, self.xattr_obj)] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        for (at, t) in [(60, self.atime), (72, self.mtime), (84, self.ctime), (96, self.crtime)] {
            put_ts(&mut b, at, t);
        }
        let mut o = ATTR_BYTES;
        for (n, v) in &self.xattrs {
            b[o] = n.len() as u8;
            b[o + 1..o + 3].copy_from_slice(&(v.len() as u16).to_le_bytes());
            o += 3;
            b[o..o + n.len()].copy_from_slice(n);
            o += n.len();
            b[o..o + v.len()].copy_from_slice(v);
            o += v.len();
        }
        b
    }

    /// Decodes a bonus: the fixed record, then small xattrs to its end.
    pub fn decode(b: &[u8]) -> Result<InodePhys> {
        if b.len() < ATTR_BYTES {
            return Err(Error::corrupt(format!("inode attributes of {} bytes", b.len())));
        }
        let mut p = InodePhys {
            mode: u32_at(b, 0),
            uid: u32_at(b, 4),
            gid: u32_at(b, 8),
            nlink: u32_at(b, 12),
            rdev: u32_at(b, 16),
            size: u64_at(b, 20),
            gen: u64_at(b, 28),
            parent: u64_at(b, 36),
            flags: u64_at(b, 44),
            xattr_obj: u64_at(b, 52),
            atime: ts_at(b, 60)?,
            mtime: ts_at(b, 72)?,
            ctime: ts_at(b, 84)?,
            crtime: ts_at(b, 96)?,
            xattrs: Vec::new(),
        };
        if p.kind().is_none() {
            return Err(Error::corrupt(format!("inode of mode {:o}", p.mode)));
        }
        p.xattrs = decode_xattrs(&b[ATTR_BYTES..], 2)?;
        Ok(p)
    }
}

/// Packed extended attributes: `[name length u8][value length, `vlen_bytes`
/// bytes][name][value]` repeated. The bonus uses 2-byte value lengths, the
/// large-xattr object 4-byte ones.
pub(crate) fn decode_xattrs(mut b: &[u8], vlen_bytes: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 1 + vlen_bytes {
            return Err(Error::corrupt("truncated extended attribute header"));
        }
        let nlen = b[0] as usize;
        let mut lb = [0u8; 4];
        lb[..vlen_bytes].copy_from_slice(&b[1..1 + vlen_bytes]);
        let vlen = u32::from_le_bytes(lb) as usize;
        let start = 1 + vlen_bytes;
        if nlen == 0 || b.len() < start + nlen + vlen {
            return Err(Error::corrupt("extended attribute past its record"));
        }
        out.push((b[start..start + nlen].to_vec(), b[start + nlen..start + nlen + vlen].to_vec()));
        b = &b[start + nlen + vlen..];
    }
    Ok(out)
}

/// The large-xattr object's encoding (4-byte value lengths).
pub(crate) fn encode_xattrs_large(xattrs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in xattrs {
        b.push(n.len() as u8);
        b.extend_from_slice(&(v.len() as u32).to_le_bytes());
        b.extend_from_slice(n);
        b.extend_from_slice(v);
    }
    b
}

/// The master object: the first object of a POSIX object set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Master {
    pub version: u32,
    pub root: u64,
    pub unlinked: u64,
}

impl Master {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; MASTER_BYTES];
        b[0..8].copy_from_slice(&MASTER_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[16..24].copy_from_slice(&self.root.to_le_bytes());
        b[24..32].copy_from_slice(&self.unlinked.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Master> {
        if b.len() < MASTER_BYTES || u64_at(b, 0) != MASTER_MAGIC {
            return Err(Error::corrupt("object 1 is not a POSIX master object"));
        }
        let m = Master { version: u32_at(b, 8), root: u64_at(b, 16), unlinked: u64_at(b, 24) };
        if m.version != POSIX_VERSION {
            return Err(Error::corrupt(format!("POSIX layout version {} (this build knows {})", m.version, POSIX_VERSION)));
        }
        Ok(m)
    }
}

/// The kind byte of a directory entry.
pub(crate) fn kind_to_u8(k: FileKind) -> u8 {
    match k {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::Socket => 5,
        FileKind::CharDev => 6,
        FileKind::BlockDev => 7,
    }
}

pub(crate) fn kind_from_u8(v: u8) -> Result<FileKind> {
    Ok(match v {
        1 => FileKind::File,
        2 => FileKind::Dir,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::CharDev,
        7 => FileKind::BlockDev,
        _ => return Err(Error::corrupt(format!("directory entry of kind {}", v))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_xattrs() {
        let p = InodePhys {
            mode: libc::S_IFREG | 0o4755,
            uid: 7,
            gid: 8,
            nlink: 2,
            size: 1 << 40,
            atime: Timespec { sec: -5, nsec: 999_999_999 },
            xattrs: vec![(b"user.a".to_vec(), b"xyz".to_vec())],
            ..Default::default()
        };
        let b = p.encode();
        assert_eq!(b.len(), ATTR_BYTES + 3 + 6 + 3);
        assert_eq!(InodePhys::decode(&b).unwrap(), p);
    }

    #[test]
    fn corrupt_attributes_are_errors() {
        let p = InodePhys { mode: libc::S_IFDIR | 0o755, ..Default::default() };
        let b = p.encode();
        for cut in 0..b.len() {
            assert!(InodePhys::decode(&b[..cut]).is_err());
        }
        let mut bad = b.clone();
        bad[..4].fill(0);
        assert!(InodePhys::decode(&bad).is_err(), "a mode of no file kind");
        let mut bad = b.clone();
        bad.push(1);
        assert!(InodePhys::decode(&bad).is_err(), "a truncated xattr after the record");
        assert!(Master::decode(&[0u8; 64]).is_err());
    }
}
