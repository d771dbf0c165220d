//! Where a session is mounted, and how it leaves: the directory opened
//! before the mount call, the `mount(2)` call itself, the mount's identity,
//! and the unmount that removes exactly that mount, once.
//!
//! # Mounting on the directory that was checked
//!
//! [`MountPoint::open`] opens the directory (`O_PATH | O_DIRECTORY |
//! O_NOFOLLOW`) and reads its real path back from `/proc/self/fd`: what a
//! caller checks (the daemon refuses `/etc`, `/`, …) is the path of the
//! very directory the mount will cover, and the mount is made on that open
//! directory (`/proc/self/fd/N` as the target), so a symbolic link or a
//! renamed directory swapped in after the check cannot redirect it.
//!
//! The glue calls `mount(2)` itself (fstype `fuseblk` over a loop device
//! of its own where the host allows it — see `blk` for why — else
//! `fuse.tarn` with the dataset's name as the source; `fd=`, `rootmode=`, `user_id=`, `group_id=`,
//! `default_permissions`, `allow_other` when asked; `nosuid`, `nodev`, and
//! `ro` for a read-only mount) and hands the `/dev/fuse` descriptor to
//! fuser (`Session::from_fd`). A caller without the privilege to mount gets
//! `EPERM`, and the glue falls back to fuser's own mount through
//! `fusermount3`.
//!
//! # Unmounting exactly once, exactly this mount
//!
//! A session fuser mounts itself unmounts its directory again when it ends
//! (its `Mount` is dropped with the session, and its "still mounted?"
//! check answers yes for a connection the kernel already aborted): after
//! tarn's own `umount2`, that second call took whatever file system lay
//! below — a tmpfs the dataset was mounted over went with it. A session
//! made from a descriptor holds no mount, so fuser never unmounts; only
//! [`unmount`] does, and only after checking that the topmost mount at the
//! directory is still the one recorded when it was made ([`MountId`]: the
//! kernel's mount id and device number, from `statx(STATX_MNT_ID)` of the
//! mount's root, which sends no request to the file system). If someone
//! mounted something over it, or our mount went and another file system
//! is there, the unmount is refused rather than taking the wrong one.
//! `UMOUNT_NOFOLLOW` keeps a symbolic link at the path from redirecting
//! the call. (fuser's unprivileged path still unmounts at session end,
//! through `fusermount3`, which only touches the user's own FUSE mounts.)
//!
//! # The mount table
//!
//! [`mount_table`] reads `/proc/self/mountinfo` (each mount's id, its
//! parent's, its device, mount point, type and source), for callers that
//! order unmounts by nesting or find dead mounts. The parser lives in the
//! engine (`sys::mountinfo`), which also asks it whether a device is
//! mounted before a pool takes it; it is re-exported here.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use tarn_engine::sys::mountinfo::{mount_table, parse_mountinfo, MountEntry, MountId};
use tarn_engine::{Error, ErrorKind, Result};

/// A directory opened to be mounted on.
pub struct MountPoint {
    fd: OwnedFd,
    /// Its real path (symbolic links and `..` resolved by the kernel).
    path: PathBuf,
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::invalid(format!("mount point '{}' contains a NUL byte", p.display())))
}

/// `open(2)` of a directory as a path handle, not following a symbolic
/// link at its last component.
fn open_dir_path(dir: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated path; the flags ask for no I/O.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open(2) and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl MountPoint {
    /// Opens `dir`, which must be a directory (not a symbolic link to one).
    pub fn open(dir: &Path) -> Result<MountPoint> {
        cpath(dir)?;
        let fd = open_dir_path(dir).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) | Some(libc::ELOOP) if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_symlink()) => {
                Error::invalid(format!("mount point '{}' is a symbolic link, not a directory", dir.display()))
            }
            Some(libc::ENOTDIR) | Some(libc::ELOOP) => Error::invalid(format!("mount point '{}' is not a directory", dir.display())),
            _ => Error::io(format!("cannot open mount point '{}'", dir.display()), e),
        })?;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_else(|_| dir.to_path_buf());
        Ok(MountPoint { fd, path })
    }

    /// The real path of the directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What `mount(2)` is given: the open directory itself where /proc is
    /// there to name it.
    fn target(&self) -> Result<CString> {
        let by_fd = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        if by_fd.exists() {
            cpath(&by_fd)
        } else {
            cpath(&self.path)
        }
    }

    fn mode(&self) -> std::io::Result<u32> {
        // SAFETY: fstat on a descriptor we own into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st.st_mode)
    }
}

/// What [`mount_fuse`] mounts: the source shown in the mount table and the
/// options that reach the kernel.
pub(crate) struct KernelMount<'a> {
    pub fsname: &'a str,
    pub read_only: bool,
    pub allow_other: bool,
    /// Mount as `fuseblk` over a loop device of its own where the host
    /// allows it, so that `sync(2)`/`syncfs(2)` reach the file system
    /// (see `blk`); else, or when that fails, as `fuse.tarn`.
    pub fuseblk: bool,
}

/// A mount [`mount_fuse`] made.
pub(crate) struct MadeMount {
    /// The `/dev/fuse` descriptor to serve it with (INIT is queued).
    pub fuse: OwnedFd,
    /// The loop device of a `fuseblk` mount; `None` for `fuse.tarn`.
    pub blk_device: Option<PathBuf>,
}

/// Opens `/dev/fuse` and mounts a FUSE file system served through it on
/// `at`. `Ok(None)`: the caller may not mount (`EPERM`); fusermount3 can.
pub(crate) fn mount_fuse(at: &MountPoint, m: &KernelMount) -> Result<Option<MadeMount>> {
    use std::os::unix::fs::OpenOptionsExt;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map_err(|e| Error::io("cannot open /dev/fuse", e))?;
    let mode = at.mode().map_err(|e| Error::io(format!("cannot stat mount point '{}'", at.path.display()), e))?;
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!("fd={},rootmode={:o},user_id={},group_id={},default_permissions", dev.as_raw_fd(), mode, uid, gid);
    if m.allow_other {
        data.push_str(",allow_other");
    }
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if m.read_only {
        flags |= libc::MS_RDONLY;
    }
    let target = at.target()?;
    if m.fuseblk {
        match mount_blk(&target, m.fsname, flags, &data) {
            Ok(device) => return Ok(Some(MadeMount { fuse: dev.into(), blk_device: Some(device) })),
            Err(e) => eprintln!(
                "tarn: '{}' is mounted as fuse, not fuseblk ({}): sync(2) and syncfs(2) will not make its data durable; fsync(2) and `tarn pool sync` do",
                at.path.display(),
                e
            ),
        }
    }
    let source = CString::new(m.fsname).map_err(|_| Error::invalid(format!("file system name '{}' contains a NUL byte", m.fsname.escape_debug())))?;
    let data = CString::new(data).expect("made of numbers and option names");
    // SAFETY: every pointer is a valid NUL-terminated string for the call.
    let r = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), c"fuse.tarn".as_ptr(), flags, data.as_ptr().cast()) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EPERM) {
            return Ok(None);
        }
        return Err(Error::io(format!("cannot mount '{}' on '{}'", m.fsname, at.path.display()), e));
    }
    Ok(Some(MadeMount { fuse: dev.into(), blk_device: None }))
}

/// Mounts `fuseblk` on `target` from a loop device of its own (`blk`);
/// returns the loop device. Nothing is left behind on failure: the loop
/// device detaches itself when its only descriptor, ours, closes.
fn mount_blk(target: &CString, fsname: &str, flags: libc::c_ulong, data: &str) -> std::io::Result<PathBuf> {
    let (loop_dev, device) = crate::blk::loop_source(fsname)?;
    let src = CString::new(device.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let data = CString::new(format!("{},blksize={}", data, crate::blk::BLKSIZE)).expect("made of numbers and option names");
    // SAFETY: every pointer is a valid NUL-terminated string for the call.
    let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), c"fuseblk".as_ptr(), flags, data.as_ptr().cast()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The super block holds the loop device open now, and the loop device
    // its backing file: our descriptor can go.
    drop(loop_dev);
    Ok(device)
}

/// The topmost mount at `dir` (`statx` of the directory reached through
/// it: no request goes to a FUSE server).
pub fn top_mount(dir: &Path) -> std::io::Result<MountId> {
    let fd = open_dir_path(dir)?;
    // SAFETY: a zeroed statx is a valid output buffer.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx of our own descriptor (empty path) into `stx`.
    let r = unsafe { libc::statx(fd.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW, libc::STATX_MNT_ID, &mut stx) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "the kernel does not report mount ids (statx STATX_MNT_ID)"));
    }
    Ok(MountId { id: stx.stx_mnt_id, dev: (stx.stx_dev_major, stx.stx_dev_minor) })
}

/// Unmounts the mount `id` at `dir`, after checking that it is the topmost
/// mount there (`None`: no identity was recorded; the kernel has no mount
/// ids). `force`: abort the connection and detach even if busy.
pub fn unmount(dir: &Path, id: Option<MountId>, force: bool) -> Result<()> {
    if let Some(want) = id {
        let top = top_mount(dir).map_err(|e| {
            Error::new(
                ErrorKind::Busy,
                format!("cannot unmount '{}': the path does not lead to tarn's mount ({}): another file system is mounted over a directory above it, unmount that first", dir.display(), e),
            )
        })?;
        if top != want {
            return Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "cannot unmount '{}': the mount there is not tarn's (mount id {}, device {}:{}; tarn's is {}, {}:{}): another file system is mounted over it, unmount that first",
                    dir.display(),
                    top.id,
                    top.dev.0,
                    top.dev.1,
                    want.id,
                    want.dev.0,
                    want.dev.1
                ),
            ));
        }
    }
    umount2(dir, force)
}

/// `umount2(UMOUNT_NOFOLLOW)` as root; `fusermount3 -u` for a mount made
/// by an unprivileged user.
fn umount2(dir: &Path, force: bool) -> Result<()> {
    let c = cpath(dir)?;
    let mut flags = libc::UMOUNT_NOFOLLOW;
    if force {
        flags |= libc::MNT_FORCE | libc::MNT_DETACH;
    }
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EBUSY) => Err(Error::new(
            ErrorKind::Busy,
            format!("'{}' is busy: files are open or a process has its working directory there", dir.display()),
        )),
        Some(libc::EPERM) => {
            let mut cmd = std::process::Command::new("fusermount3");
            cmd.arg(if force { "-uz" } else { "-u" }).arg(dir);
            let out = cmd.output().map_err(|e| Error::io(format!("running fusermount3 -u '{}'", dir.display()), e))?;
            if out.status.success() {
                Ok(())
            } else {
                let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
                let kind = if msg.contains("busy") { ErrorKind::Busy } else { ErrorKind::Io };
                Err(Error::new(kind, format!("unmounting '{}': {}", dir.display(), msg)))
            }
        }
        _ => Err(Error::io(format!("unmounting '{}'", dir.display()), e)),
    }
}
