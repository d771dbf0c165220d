//! Mounting as `fuseblk`, the one FUSE mount type for which Linux tells the
//! file system about `sync(2)` and `syncfs(2)`.
//!
//! # What the kernel sends for sync
//!
//! `syncfs(2)` (`sync -f FILE`) and `sync(2)` write back the dirty pages of
//! a mount, then call its super block's `sync_fs`. FUSE's `fuse_sync_fs`
//! sends `FUSE_SYNCFS` only when the connection has `sync_fs` set, which
//! Linux sets for virtiofs and, in the 6.18 kernel measured here, for
//! `fuseblk` mounts (`fuse_fill_super_common`), never for a plain `fuse`
//! mount. Measured on 6.18 with a raw server logging every opcode, one file
//! with 3 MiB of dirty pages held open by a writer:
//!
//! | mount     | `sync -f FILE` / `sync`, dirty pages | the same, clean |
//! |-----------|--------------------------------------|-----------------|
//! | `fuse`    | WRITE…, SETATTR, nothing else        | nothing at all  |
//! | `fuseblk` | WRITE…, SETATTR, then SYNCFS         | SYNCFS          |
//!
//! So on a `fuse` mount the file system cannot know that `sync` ran: a file
//! written and closed (`cp`: its pages went back at close) and then
//! `sync`ed generates no request at all, and a crash of the daemon before
//! the next txg lost it. On a `fuseblk` mount, SYNCFS arrives after every
//! write-back of that call has been answered (the kernel waits for them),
//! and the glue answers it with `FileSystem::sync_all`, a txg sync: `sync`
//! returns once the data is on disk, as on OpenZFS (`zfs_sync`).
//!
//! # The block device
//!
//! `fuseblk` needs a block device as its source; the kernel opens it
//! exclusively for the super block but never reads or writes it (that is
//! the server's business). tarn's devices cannot be it (the pool holds
//! them, files are not block devices), so each mount gets a loop device of
//! its own over a 4 KiB memfd named `tarn:DATASET` (what `losetup -l`
//! shows), set up with `LO_FLAGS_AUTOCLEAR`: the kernel detaches it when
//! the mount goes (unmount, or the kill of a dead mount), so nothing leaks
//! even if the daemon is killed. /proc/mounts shows the loop device as the
//! source and `fuseblk` as the type; `df` shows the loop device where a
//! `fuse` mount showed the dataset's name.
//!
//! Only root may mount a block device. Without root, without
//! `/dev/loop-control`, or on a kernel that refuses, the mount falls back
//! to a plain `fuse` mount (`MountHandle::sync_reaches_fs` says which):
//! there `sync` and `syncfs` make nothing durable in tarn; `fsync(2)` does,
//! and `tarn pool sync`.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// `LOOP_CTL_GET_FREE`: the number of a free loop device (made if needed).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `LOOP_CONFIGURE` (Linux 5.8): backing file, flags and name in one call.
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// Detach the loop device when its last opener (the mount) closes it.
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// Size of the memfd behind each loop device.
const BACKING_BYTES: libc::off_t = 4096;
/// Block size the mount reports (`blksize=`); the file system's own
/// `st_blksize` answers are unaffected.
pub(crate) const BLKSIZE: u32 = 4096;
/// Tries when another process takes the free loop device first.
const LOOP_TRIES: usize = 8;

/// `struct loop_info64` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config` (linux/loop.h).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

/// A loop device of its own for a `fuseblk` mount of `fsname`: its open
/// descriptor (the only one; closing it before the mount holds the device
/// detaches it) and its path. Root only.
pub(crate) fn loop_source(fsname: &str) -> io::Result<(File, PathBuf)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "mounting a block device needs root"));
    }
    let backing = memfd(fsname)?;
    attach_loop(&backing, fsname)
}

/// A 4 KiB memfd named after the file system (what `losetup -l` shows).
fn memfd(fsname: &str) -> io::Result<File> {
    let name = CString::new(format!("tarn:{}", fsname)).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the file system name"))?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned to us and is owned by nothing else.
    let f = unsafe { File::from_raw_fd(fd) };
    // SAFETY: ftruncate on a descriptor we own.
    if unsafe { libc::ftruncate(f.as_raw_fd(), BACKING_BYTES) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// A free loop device bound to `backing` with autoclear: its open
/// descriptor (the only one) and its path.
fn attach_loop(backing: &File, fsname: &str) -> io::Result<(File, PathBuf)> {
    let ctl = OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open("/dev/loop-control")?;
    let mut last = io::Error::other("no free loop device");
    for _ in 0..LOOP_TRIES {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{}", n));
        let dev = OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(&path)?;
        let mut cfg = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            // SAFETY: all-zero bytes are a valid loop_info64 (plain integers).
            info: unsafe { std::mem::zeroed() },
            reserved: [0; 8],
        };
        cfg.info.flags = LO_FLAGS_AUTOCLEAR;
        let name = format!("tarn:{}", fsname);
        let len = name.len().min(cfg.info.file_name.len() - 1);
        cfg.info.file_name[..len].copy_from_slice(&name.as_bytes()[..len]);
        // SAFETY: LOOP_CONFIGURE reads one loop_config through the pointer.
        if unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &cfg as *const LoopConfig) } == 0 {
            return Ok((dev, path));
        }
        last = io::Error::last_os_error();
        // EBUSY: another process configured it between our two calls.
        if last.raw_os_error() != Some(libc::EBUSY) {
            return Err(last);
        }
    }
    Err(last)
}

/// The sysfs directory of a mount's backing device info (bdi): a
/// `fuseblk` super block registers `MAJ:MIN-fuseblk`, a `fuse` one
/// `MAJ:MIN`.
pub(crate) fn bdi_dir(dev: u64) -> PathBuf {
    let base = format!("/sys/class/bdi/{}:{}", libc::major(dev), libc::minor(dev));
    let blk = PathBuf::from(format!("{}-fuseblk", base));
    if blk.exists() {
        blk
    } else {
        PathBuf::from(base)
    }
}
