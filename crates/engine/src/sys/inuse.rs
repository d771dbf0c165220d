//! Who else uses a device on this host, before tarn writes over it.
//!
//! A device that is mounted, in use as swap, built into a device-mapper or
//! RAID device, or open exclusively by another program is *busy*: writing
//! it destroys live data under a running system, so no `-f` overrides that
//! (as zpool refuses a mounted disk whatever the flags). The kernel knows
//! all of this; tarn asks it in the order that gives the best message:
//!
//! 1. `/proc/self/mountinfo`: a mount whose device number is the device's
//!    (or one of its partitions') — "mounted on /mnt/x";
//! 2. `/proc/swaps`: swap on the device or file;
//! 3. `/sys/dev/block/MAJ:MIN/holders`: dm or md devices built on it;
//! 4. an `O_EXCL` open of the block device: the kernel refuses it while a
//!    file system, swap, md, dm — or another tarn pool, which opens its
//!    block devices exclusively — holds the device, in any mount namespace.
//!
//! A regular file is busy when it is a swap file, or the backing file of a
//! loop device (`/sys/block/loopN/loop/backing_file`): writing the file
//! writes the loop device under whoever uses it, and an attached loop
//! device may be mounted at any moment, so the loop device must be
//! detached first. Files and devices are compared by identity
//! ([`DeviceId`]), never by path, so symlinks and other names for the same
//! thing are caught.
//!
//! Mounts are seen from this process's mount namespace; a mount made in
//! another namespace is still caught by step 4, without its mount point.

use std::fs::Metadata;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::mountinfo::{mount_table, unescape, MountEntry};

/// What a path is, for telling two names of one device apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceId {
    /// A regular file: its file system and inode.
    File { dev: u64, ino: u64 },
    /// A block device: its device number, whatever node names it.
    Block { rdev: u64 },
}

impl DeviceId {
    /// The identity of a regular file or block device; `None` for anything else.
    pub fn of(meta: &Metadata) -> Option<DeviceId> {
        let ft = meta.file_type();
        if ft.is_block_device() {
            Some(DeviceId::Block { rdev: meta.rdev() })
        } else if ft.is_file() {
            Some(DeviceId::File { dev: meta.dev(), ino: meta.ino() })
        } else {
            None
        }
    }

    fn of_path(p: &Path) -> Option<DeviceId> {
        DeviceId::of(&std::fs::metadata(p).ok()?)
    }
}

/// Why `path` (identified as `id`) is busy, completing "'PATH' is …", or
/// `None` if nothing on this host uses it.
pub fn busy(path: &Path, id: DeviceId) -> Option<String> {
    match id {
        DeviceId::Block { rdev } => block_busy(path, rdev),
        DeviceId::File { .. } => file_busy(id),
    }
}

fn block_busy(path: &Path, rdev: u64) -> Option<String> {
    let mounts = mounts();
    if let Some(on) = mounted_on(&mounts, rdev) {
        return Some(format!("mounted on {}", on));
    }
    if is_swap(DeviceId::Block { rdev }) {
        return Some("in use as swap".into());
    }
    let sys = sysfs_dir(rdev);
    for (name, part) in partitions(&sys) {
        if let Some(on) = mounted_on(&mounts, part) {
            return Some(format!("in use: its partition {} is mounted on {}", name, on));
        }
        if is_swap(DeviceId::Block { rdev: part }) {
            return Some(format!("in use: its partition {} is swap", name));
        }
    }
    if let Some(h) = holders(&sys).first() {
        return Some(format!("in use: {} (a device-mapper or RAID device) is built on it", h));
    }
    if exclusive_open_refused(path) {
        return Some("in use: the kernel refuses to open it exclusively (it is mounted, swap, or held by another program)".into());
    }
    None
}

fn file_busy(id: DeviceId) -> Option<String> {
    if is_swap(id) {
        return Some("in use as a swap file".into());
    }
    let (node, rdev) = loop_devices().into_iter().find(|(_, _, backing)| *backing == id).map(|(node, rdev, _)| (node, rdev))?;
    Some(match block_busy(&node, rdev) {
        Some(why) => format!("the backing file of {}, which is {}", node.display(), why),
        None => format!("the backing file of loop device {} (detach it first: losetup -d {})", node.display(), node.display()),
    })
}

fn mounts() -> Vec<MountEntry> {
    mount_table().unwrap_or_default()
}

/// Where the file system on device `rdev` is mounted, if it is.
fn mounted_on(mounts: &[MountEntry], rdev: u64) -> Option<String> {
    let dev = (libc::major(rdev), libc::minor(rdev));
    mounts.iter().find(|m| m.dev == dev).map(|m| m.mount_point.display().to_string())
}

/// `MAJ:MIN` as a device number.
fn parse_dev(s: &str) -> Option<u64> {
    let (maj, min) = s.trim().split_once(':')?;
    Some(libc::makedev(maj.parse().ok()?, min.parse().ok()?))
}

/// Whether /proc/swaps lists a swap area that is `id`.
fn is_swap(id: DeviceId) -> bool {
    let text = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    swap_paths(&text).iter().any(|p| DeviceId::of_path(Path::new(p)) == Some(id))
}

/// The paths of /proc/swaps (after its header line).
pub fn swap_paths(text: &str) -> Vec<String> {
    text.lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(|p| String::from_utf8_lossy(&unescape(p)).into_owned()).collect()
}

fn sysfs_dir(rdev: u64) -> PathBuf {
    PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)))
}

/// The partitions of a whole disk: (name, device number).
fn partitions(sys: &Path) -> Vec<(String, u64)> {
    let Ok(rd) = std::fs::read_dir(sys) else { return Vec::new() };
    rd.flatten()
        .filter(|e| e.path().join("partition").exists())
        .filter_map(|e| {
            let dev = parse_dev(&std::fs::read_to_string(e.path().join("dev")).ok()?)?;
            Some((e.file_name().to_string_lossy().into_owned(), dev))
        })
        .collect()
}

/// The devices built on this one (`holders/`), by kernel name.
fn holders(sys: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(sys.join("holders")) else { return Vec::new() };
    let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// True if the kernel refuses an exclusive open of the block device: some
/// file system, swap area, md/dm device or program holds it exclusively.
fn exclusive_open_refused(path: &Path) -> bool {
    let r = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_EXCL).open(path);
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
}

/// Attached loop devices: (node, device number, identity of the backing file).
fn loop_devices() -> Vec<(PathBuf, u64, DeviceId)> {
    let Ok(rd) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    rd.flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(b"loop"))
        .filter_map(|e| {
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            let backing = backing.trim_end_matches('\n');
            let id = DeviceId::of_path(Path::new(backing.strip_suffix(" (deleted)").unwrap_or(backing)))?;
            let rdev = parse_dev(&std::fs::read_to_string(e.path().join("dev")).ok()?)?;
            Some((Path::new("/dev").join(e.file_name()), rdev, id))
        })
        .collect()
}

/// What `path` is, for an error message when it is neither a regular file
/// nor a block device ("is a directory", "is a character device").
pub fn describe_kind(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "a regular file"
    }
}

/// `stat` of a device path, with an error that names it.
pub fn stat(path: &Path) -> io::Result<Metadata> {
    std::fs::metadata(path).map_err(|e| io::Error::new(e.kind(), format!("cannot use '{}': {}", path.display(), e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_found_by_device_number() {
        let text = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    36 22 7:3 / /mnt/with\\040space rw - ext4 /dev/loop3 rw\n";
        let m = crate::sys::mountinfo::parse_mountinfo(text);
        assert_eq!(mounted_on(&m, libc::makedev(7, 3)).as_deref(), Some("/mnt/with space"));
        assert_eq!(mounted_on(&m, libc::makedev(8, 1)).as_deref(), Some("/"));
        assert_eq!(mounted_on(&m, libc::makedev(7, 4)), None);
        assert_eq!(parse_dev("7:3\n"), Some(libc::makedev(7, 3)));
        assert_eq!(parse_dev("7"), None);
    }

    /// Partitions and holders as sysfs lists them, in a made-up tree (this
    /// test machine's loop devices cannot be partitioned).
    #[test]
    fn partitions_and_holders_from_sysfs() {
        let sys = std::env::temp_dir().join(format!("tarn-inuse-sys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&sys);
        std::fs::create_dir_all(sys.join("sda1")).unwrap();
        std::fs::write(sys.join("sda1/partition"), "1\n").unwrap();
        std::fs::write(sys.join("sda1/dev"), "8:1\n").unwrap();
        std::fs::create_dir_all(sys.join("queue")).unwrap();
        std::fs::create_dir_all(sys.join("holders/dm-0")).unwrap();
        std::fs::create_dir_all(sys.join("holders/md127")).unwrap();
        assert_eq!(partitions(&sys), vec![("sda1".to_string(), libc::makedev(8, 1))]);
        assert_eq!(holders(&sys), vec!["dm-0".to_string(), "md127".to_string()]);
        std::fs::remove_dir_all(&sys).unwrap();
        assert!(partitions(&sys).is_empty() && holders(&sys).is_empty());
    }

    #[test]
    fn swaps_are_unescaped() {
        let text = "Filename\t\t\t\tType\t\tSize\tUsed\tPriority\n/dev/dm-1 partition 1000 0 -2\n/swap\\040file file 10 0 -3\n";
        assert_eq!(swap_paths(text), vec!["/dev/dm-1".to_string(), "/swap file".to_string()]);
    }

    #[test]
    fn an_unused_file_is_free_and_a_directory_is_no_device() {
        // A new temporary file backs no loop device and is no swap file.
        let f = std::env::temp_dir().join(format!("tarn-inuse-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        let id = DeviceId::of(&std::fs::metadata(&f).unwrap()).unwrap();
        assert_eq!(busy(&f, id), None);
        std::fs::remove_file(&f).unwrap();
        assert_eq!(DeviceId::of(&std::fs::metadata("/").unwrap()), None);
    }
}
