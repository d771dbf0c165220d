//! The device seam: `BlockDevice` is everything the pool needs from a disk.
//!
//! Why a trait: the engine must run unchanged on real files/block devices
//! (`file::FileDevice`) and on an in-memory disk that can lose power, tear
//! writes and rot bits on command (`fault::FaultDevice`). Crash-consistency
//! is only testable if the test controls what "the disk" kept, so all I/O goes
//! through this narrow, synchronous, positional interface.
//!
//! Contract shared by every implementation:
//! * offsets and lengths are multiples of [`SECTOR_SIZE`] (512 B, the unit a
//!   disk writes atomically); anything else is `InvalidInput`;
//! * I/O is all-or-error: a read or write never completes partially, and an
//!   access past `size_bytes()` is an error (`UnexpectedEof`), never a short
//!   transfer;
//! * a completed write is visible to later reads but is durable only after a
//!   successful `flush()` (a disk's volatile write cache may lose or reorder
//!   it on power loss).
//!
//! `check_io` implements the first two rules once so backends agree on them.
//!
//! # Health
//!
//! A device can stop being able to keep what is written to it without any
//! write failing: an image file truncated under a live pool still accepts
//! `pwrite` (it grows again, with zeros where the data was), and an
//! unlinked one accepts writes until its last descriptor closes and the
//! data goes with it. [`BlockDevice::health`] says whether the device is
//! still the one the pool opened, whole: the pool asks before every
//! uberblock write and after every I/O error (`pool::core` faults the vdev
//! and suspends the pool on anything but [`Health::Online`]).

use std::io;
use std::sync::Arc;

/// The atomic write unit every device guarantees, and the alignment of all I/O.
pub const SECTOR_SIZE: u64 = 512;

/// A fixed-size, sector-addressed disk.
pub trait BlockDevice: Send + Sync + std::fmt::Debug {
    /// Usable size in bytes (a multiple of `SECTOR_SIZE`).
    fn size_bytes(&self) -> u64;

    /// Reads exactly `buf.len()` bytes at `offset` (offset and len multiples of
    /// 512). Short reads past end are errors.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Writes all of `buf` at `offset` (offset and len multiples of 512).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Scatter read: consecutive buffers are filled from consecutive offsets.
    fn readv_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let mut pos = offset;
        for buf in bufs.iter_mut() {
            self.read_at(buf, pos)?;
            pos += buf.len() as u64;
        }
        Ok(())
    }

    /// Gather write: consecutive buffers land at consecutive offsets.
    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut pos = offset;
        for buf in bufs {
            self.write_at(buf, pos)?;
            pos += buf.len() as u64;
        }
        Ok(())
    }

    /// Makes every completed write durable (fdatasync / write cache flush).
    fn flush(&self) -> io::Result<()>;

    /// Human-readable name for error messages, e.g. the path.
    fn name(&self) -> String;

    /// Whether the device can still keep what is written to it (see the
    /// module docs). Cheap enough for every txg (a few system calls).
    fn health(&self) -> Health {
        Health::Online
    }
}

/// What [`BlockDevice::health`] found; the reasons name what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Online,
    /// Still there but unusable: it shrank, or refuses writes.
    Faulted(String),
    /// Gone: the file was deleted, the block device removed.
    Removed(String),
    /// Never opened: the config names it, import did not find it.
    Unavail(String),
}

impl Health {
    /// The state name `pool status` shows (as `zpool status`).
    pub fn state(&self) -> &'static str {
        match self {
            Health::Online => "ONLINE",
            Health::Faulted(_) => "FAULTED",
            Health::Removed(_) => "REMOVED",
            Health::Unavail(_) => "UNAVAIL",
        }
    }

    /// Why the device is not online (`None` when it is).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Health::Online => None,
            Health::Faulted(r) | Health::Removed(r) | Health::Unavail(r) => Some(r),
        }
    }
}

/// Lets a test keep an `Arc<FaultDevice>` handle while the pool owns another
/// clone as a `BlockDevice`. Every method is forwarded so the inner type's
/// vectored I/O is used, not the trait's default loop.
impl<T: BlockDevice + ?Sized> BlockDevice for Arc<T> {
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn readv_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        (**self).readv_at(bufs, offset)
    }
    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        (**self).writev_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn name(&self) -> String {
        (**self).name()
    }
    fn health(&self) -> Health {
        (**self).health()
    }
}

/// Validates an I/O request against the shared contract: `offset` and `len`
/// sector-aligned (`InvalidInput`) and `[offset, offset + len)` inside a
/// device of `size` bytes (`UnexpectedEof`). `name` and `op` go into the
/// message so the error says which device and what was attempted.
pub fn check_io(name: &str, op: &str, size: u64, offset: u64, len: usize) -> io::Result<()> {
    let len64 = len as u64;
    if !offset.is_multiple_of(SECTOR_SIZE) || !len64.is_multiple_of(SECTOR_SIZE) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{name}: {op} of {len} bytes at offset {offset} is not aligned to {SECTOR_SIZE}-byte sectors"
            ),
        ));
    }
    match offset.checked_add(len64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{name}: {op} of {len} bytes at offset {offset} runs past the end of the device ({size} bytes)"
            ),
        )),
    }
}

/// Sum of the lengths of a scatter/gather list.
pub fn total_len<B: AsRef<[u8]>>(bufs: &[B]) -> usize {
    bufs.iter().map(|b| b.as_ref().len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_io_rules() {
        assert!(check_io("d", "read", 4096, 0, 4096).is_ok());
        assert!(check_io("d", "read", 4096, 4096, 0).is_ok());
        let e = check_io("d", "read", 4096, 1, 512).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("d: read"));
        let e = check_io("d", "write", 4096, 3584, 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = check_io("d", "write", 4096, u64::MAX - 511, 512).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
