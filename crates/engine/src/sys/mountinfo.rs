//! The mount table: `/proc/self/mountinfo` parsed, for the FUSE glue (which
//! mount is ours, in what order to unmount, which are dead) and for
//! `sys::inuse` (is a device mounted, and where). One parser for both.
//! The kernel escapes space, tab, newline and backslash in paths as octal
//! (`\040`); [`unescape`] undoes that (also for `/proc/swaps`).

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Which mount a path leads to: the kernel's mount id (unique among the
/// mounts that exist) and the device number of the file system mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountId {
    pub id: u64,
    pub dev: (u32, u32),
}

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub id: u64,
    pub parent: u64,
    pub dev: (u32, u32),
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
}

impl MountEntry {
    /// A FUSE mount (`fuse`, `fuse.tarn`, `fuseblk`, …).
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype == "fuseblk" || self.fstype.starts_with("fuse.")
    }

    pub fn mount_id(&self) -> MountId {
        MountId { id: self.id, dev: self.dev }
    }

    /// The file system's name: the source, except for a `fuseblk` mount
    /// from a loop device, whose source is the device; there the name is
    /// the one the mount gave the device's backing file (`tarn:NAME`, see
    /// the FUSE glue's `blk`), or the device if it has none.
    pub fn fs_name(&self) -> String {
        if self.fstype != "fuseblk" {
            return self.source.clone();
        }
        let Some(dev) = self.source.strip_prefix("/dev/") else { return self.source.clone() };
        let backing = std::fs::read_to_string(format!("/sys/block/{}/loop/backing_file", dev)).unwrap_or_default();
        loop_fs_name(backing.trim_end()).unwrap_or_else(|| self.source.clone())
    }
}

/// `NAME` from a loop device's backing file as sysfs shows a memfd named
/// `tarn:NAME`: `/memfd:tarn:NAME (deleted)`.
fn loop_fs_name(backing: &str) -> Option<String> {
    let b = backing.strip_suffix(" (deleted)").unwrap_or(backing);
    let b = b.strip_prefix("/memfd:").unwrap_or(b);
    b.strip_prefix("tarn:").map(String::from)
}

/// Every mount this process sees, in the kernel's order (a mount stacked
/// over another at the same place comes after it).
pub fn mount_table() -> std::io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The mounts listed in a mountinfo file's text (unreadable lines skipped).
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`: id,
/// parent id, major:minor, root, mount point, options, optional fields up
/// to `-`, type, source, super options.
fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let mut f = line.split(' ');
    let id = f.next()?.parse().ok()?;
    let parent = f.next()?.parse().ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let dev = (major.parse().ok()?, minor.parse().ok()?);
    let _root = f.next()?;
    let mount_point = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(f.next()?)));
    let mut rest = f.skip_while(|x| *x != "-").skip(1);
    let fstype = String::from_utf8_lossy(&unescape(rest.next()?)).into_owned();
    let source = String::from_utf8_lossy(&unescape(rest.next()?)).into_owned();
    Some(MountEntry { id, parent, dev, mount_point, fstype, source })
}

/// A mountinfo field with its octal escapes (`\040` for a space, `\012`
/// for a newline) decoded.
pub fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn mountinfo_lines() {
        let e = parse_mountinfo_line("92 91 0:43 / /tmp/a\\040b\\012c rw,nosuid,nodev,relatime shared:5 - fuse.tarn tank/x rw,user_id=0").unwrap();
        assert_eq!((e.id, e.parent, e.dev), (92, 91, (0, 43)));
        assert_eq!(e.mount_point, Path::new("/tmp/a b\nc"));
        assert_eq!((e.fstype.as_str(), e.source.as_str()), ("fuse.tarn", "tank/x"));
        assert_eq!(e.fs_name(), "tank/x");
        assert_eq!(loop_fs_name("/memfd:tarn:tank/a b (deleted)").as_deref(), Some("tank/a b"));
        assert_eq!(loop_fs_name("/var/img/disk.img"), None);
        assert!(e.is_fuse());
        let t = parse_mountinfo_line("91 69 0:42 / /tmp/mt1/over rw,relatime - tmpfs tmpfs rw").unwrap();
        assert!(!t.is_fuse() && t.mount_point == Path::new("/tmp/mt1/over"));
        assert!(parse_mountinfo_line("garbage").is_none());
        assert_eq!(unescape("/a\\040b/c"), b"/a b/c");
        assert_eq!(unescape("/end\\04"), b"/end\\04");
    }

    #[test]
    fn the_table_has_the_root() {
        let t = mount_table().expect("/proc/self/mountinfo");
        assert!(t.iter().any(|e| e.mount_point == Path::new("/")), "{:?}", t);
    }
}
