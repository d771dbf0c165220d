//! Where the daemon may mount: the checks a directory passes before any
//! mount call, dead FUSE mounts cleared out of the way, and the record of
//! the daemon's own mounts that lets the next daemon clear them after a
//! crash.
//!
//! # What is refused
//!
//! The daemon runs as root on a running host, so a mount point is checked
//! against the host before anything is created or mounted ([`check`]):
//! - on its face (`engine::dataset::props::mountpoint_problem`): not
//!   absolute, a NUL or control character, longer than `PATH_MAX` or a
//!   component longer than `NAME_MAX`;
//! - after resolving it ([`resolve`]): the longest part of it that exists
//!   is canonicalized (symbolic links, `..`, `.`, `//`, a trailing `/`),
//!   the rest is appended with `..` taken lexically — which is where
//!   creating the missing directories leads. So `/tmp/../etc`, `/usr/`
//!   and a symbolic link to `/etc` are all `/etc`. A link that leads
//!   nowhere, or a file where a directory is needed, is an error;
//! - the host's system directories ([`system_directory`]): `/`; the
//!   operating system's own trees, the directory and everything below it
//!   (`/bin`, `/boot`, `/dev`, `/etc`, `/lib`, `/lib32`, `/lib64`,
//!   `/libx32`, `/proc`, `/sbin`, `/sys`, `/usr`); and directories whose
//!   contents the running system needs, the directory itself only
//!   (`/root`, `/run`, `/tmp`, `/var`, `/var/cache`, `/var/lib`,
//!   `/var/log`, `/var/spool`, `/var/tmp`) — a new directory below them
//!   hides nothing. Data directories an administrator places datasets on
//!   (`/home`, `/srv`, `/opt`, `/mnt`, `/media`) are allowed, guarded by
//!   `overlay` like any other;
//! - the daemon's own files: the directory of its socket (and pid file and
//!   log) or of the cache file, or any directory above them — a mount there
//!   would hide them from the next command;
//! - a file, not a directory;
//! - a directory that is not empty when the dataset's `overlay` is off
//!   ("directory is not empty", as OpenZFS on Linux; with `overlay=on`, the
//!   default, the mount hides what is there).
//!
//! A missing directory is created with its parents, as zfs does — only
//! after the checks. A directory inside another tarn mount is allowed, as
//! nested file systems are on OpenZFS (unmounts go deepest first).
//!
//! # Where the refusal happens
//!
//! As OpenZFS: the property is only a path, and `mountpoint=/` is how a
//! root-on-ZFS pool is laid out, so setting it is accepted for a dataset
//! that will not be mounted now (`canmount=noauto` or `off`). What is
//! checked is the mount: every mount call goes through [`check`], and a
//! command that would mount at once — `create -o mountpoint=`, `clone -o
//! mountpoint=`, `set mountpoint=`/`canmount=`, `inherit mountpoint`,
//! `pool create -m`, `pool import -m` — checks first and refuses with
//! nothing changed: no dataset created, no property set, no pool opened.
//!
//! The directory that passed is then opened and its real path compared
//! (`tarn_fuse::MountPoint`), and the mount is made on the open directory:
//! a link swapped in between cannot move it.
//!
//! # Dead mounts
//!
//! A daemon that was killed leaves its FUSE mounts behind, dead: every
//! access to them fails with `ENOTCONN` ("transport endpoint is not
//! connected"), including walking through them to a mount point below. Two
//! things clear them:
//! - the record: the daemon writes its mounts (dataset, directory, the
//!   kernel's mount id and device) to `<socket>.mounts` whenever they
//!   change. The next daemon, holding the same socket's lock (so the one
//!   that wrote it is gone), detaches every recorded mount still in the
//!   mount table with the same id, device, directory and source, before it
//!   imports anything: shallowest first, and a detached mount takes the
//!   mounts below it along. This covers what it will not mount again
//!   (snapshots, `tarn mount DATASET DIR`) and any order of nesting;
//! - before each mount, [`detach_dead_on_the_way`]: a dead FUSE mount at
//!   the directory or at a directory on the way to it (found in the mount
//!   table, tried shallowest first so that a dead parent is not mistaken
//!   for a dead child) is detached, whoever left it: no server will ever
//!   answer it again. This covers a daemon killed between a mount and its
//!   record.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use tarn_engine::dataset::props::mountpoint_problem;
use tarn_engine::error::printable;
use tarn_engine::{Error, ErrorKind, Result};
use tarn_fuse::mountpoint::{mount_table, MountEntry};
use tarn_fuse::MountId;

use super::log;

/// The operating system's trees: refused with everything below them.
const SYSTEM_TREES: [&str; 12] = ["/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys", "/usr"];

/// Directories whose contents the running system needs: refused
/// themselves; a new directory below them is allowed.
const SYSTEM_DIRS: [&str; 10] = ["/", "/root", "/run", "/tmp", "/var", "/var/cache", "/var/lib", "/var/log", "/var/spool", "/var/tmp"];

/// Most dead mounts detached on the way to one directory (a bound on the
/// loop; each pass detaches one, with everything below it).
const DEAD_MOUNTS_MAX: usize = 64;

/// A path as messages show it (escaped, shortened).
pub fn shown(p: &Path) -> String {
    printable(&p.to_string_lossy())
}

/// Why `dir` (resolved) is one of the host's system directories, if it is.
pub fn system_directory(dir: &Path) -> Option<String> {
    if dir == Path::new("/") {
        return Some("it is the root of the host's file system".into());
    }
    if let Some(top) = SYSTEM_TREES.iter().find(|t| dir.starts_with(t)) {
        return Some(format!("it is in '{}', a system directory of the host", top));
    }
    SYSTEM_DIRS.contains(&dir.to_string_lossy().as_ref()).then(|| "it is a system directory of the host".to_string())
}

/// `dir` made canonical as far as it exists, the rest appended lexically
/// (see the module comment).
pub fn resolve(dir: &Path) -> Result<PathBuf> {
    let comps: Vec<Component> = dir.components().collect();
    assert!(matches!(comps.first(), Some(Component::RootDir)), "checked absolute before resolving");
    for k in (1..=comps.len()).rev() {
        let prefix: PathBuf = comps[..k].iter().collect();
        match std::fs::canonicalize(&prefix) {
            Ok(mut base) => {
                for c in &comps[k..] {
                    match c {
                        Component::Normal(n) => base.push(n),
                        Component::ParentDir => {
                            base.pop();
                        }
                        _ => {}
                    }
                }
                return Ok(base);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                if std::fs::symlink_metadata(&prefix).is_ok() {
                    return Err(Error::invalid(format!("'{}' is a symbolic link that leads nowhere", shown(&prefix))));
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(Error::invalid(format!("'{}' is not a directory (or a component of it is not)", shown(&prefix))));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                return Err(Error::new(ErrorKind::Io, format!("'{}' is on a dead FUSE mount (transport endpoint is not connected)", shown(&prefix))));
            }
            Err(e) => return Err(Error::io(format!("cannot resolve '{}'", shown(&prefix)), e)),
        }
    }
    unreachable!("'/' always canonicalizes")
}

/// Whether mounting on `dir` would hide one of the daemon's own files
/// (its socket, pid file and log, or the cache file).
fn hides_daemon_file(dir: &Path) -> Option<String> {
    let files = [(super::proto::socket_path(), "socket"), (crate::cache::path(), "cache file")];
    for (f, what) in files {
        let parent = f.parent().map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
        if parent.is_some_and(|p| p.starts_with(dir)) {
            return Some(format!("it holds the tarn daemon's {} '{}', which a mount would hide", what, shown(&f)));
        }
    }
    None
}

/// Checks `dir` as a mount point (see the module comment) and returns it
/// resolved: where the mount would go. Nothing is created or mounted; dead
/// FUSE mounts on the way are detached. `overlay`: the dataset's property;
/// `current`: where the dataset is mounted now (a remount there looks at
/// its own files, not what it covers, so `overlay` is not asked).
pub fn check(dir: &Path, overlay: bool, current: Option<&Path>) -> Result<PathBuf> {
    let given = dir.to_string_lossy();
    if let Some(why) = mountpoint_problem(&given) {
        return Err(Error::invalid(format!("mount point '{}': {}", printable(&given), why)));
    }
    detach_dead_on_the_way(dir);
    let real = resolve(dir).map_err(|e| e.context(format!("mount point '{}'", printable(&given))))?;
    let named = if real.as_path() == dir { format!("'{}'", printable(&given)) } else { format!("'{}' (that is '{}')", printable(&given), shown(&real)) };
    if let Some(why) = system_directory(&real).or_else(|| hides_daemon_file(&real)) {
        return Err(Error::invalid(format!("refusing to mount on {}: {}", named, why)));
    }
    match std::fs::symlink_metadata(&real) {
        Ok(m) if !m.is_dir() => return Err(Error::invalid(format!("mount point {} is not a directory", named))),
        Ok(_) if !overlay && current != Some(real.as_path()) && !is_empty_dir(&real)? => {
            return Err(Error::invalid(format!("mount point {}: directory is not empty (overlay=off; set overlay=on to mount over it)", named)));
        }
        _ => {}
    }
    Ok(real)
}

fn is_empty_dir(dir: &Path) -> Result<bool> {
    let mut it = std::fs::read_dir(dir).map_err(|e| Error::io(format!("cannot read mount point '{}'", shown(dir)), e))?;
    Ok(it.next().is_none())
}

fn is_dead(dir: &Path) -> bool {
    std::fs::metadata(dir).err().and_then(|e| e.raw_os_error()) == Some(libc::ENOTCONN)
}

/// The topmost FUSE mount at each directory on the way to `dir` (and at
/// `dir`), shallowest first.
fn fuse_mounts_on_the_way(table: &[MountEntry], dir: &Path) -> Vec<MountEntry> {
    let mut on_way: Vec<MountEntry> = Vec::new();
    for e in table.iter().filter(|e| dir.starts_with(&e.mount_point)) {
        // Later entries are mounted over earlier ones at the same place.
        on_way.retain(|o| o.mount_point != e.mount_point);
        if e.is_fuse() {
            on_way.push(e.clone());
        }
    }
    on_way.sort_by_key(|e| e.mount_point.components().count());
    on_way
}

/// Detaches dead FUSE mounts at `dir` or on the way to it (see the module
/// comment); what cannot be detached is left for the mount to fail on.
pub fn detach_dead_on_the_way(dir: &Path) {
    let dir: PathBuf = lexical(dir);
    for _ in 0..DEAD_MOUNTS_MAX {
        let Ok(table) = mount_table() else { return };
        let Some(dead) = fuse_mounts_on_the_way(&table, &dir).into_iter().find(|e| is_dead(&e.mount_point)) else { return };
        let res = tarn_fuse::mountpoint::unmount(&dead.mount_point, Some(dead.mount_id()), true);
        log(&format!("detached a dead FUSE mount ('{}') on '{}': {}", dead.fs_name(), shown(&dead.mount_point), res.as_ref().map_or_else(|e| e.msg.clone(), |_| "ok".into())));
        if res.is_err() {
            return;
        }
    }
}

/// `dir` with `.` and `..` taken lexically (no file system access: the
/// path may lead through a dead mount).
fn lexical(dir: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in dir.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// One of the daemon's own mounts, as recorded for the next daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub dataset: String,
    pub dir: PathBuf,
    pub id: u64,
    pub dev: (u32, u32),
}

/// Where the daemon records its mounts: beside its socket.
pub fn record_path() -> PathBuf {
    super::proto::socket_path().with_extension("mounts")
}

/// Writes the daemon's mounts to the record (whole, by rename); a failure
/// is logged: the record only helps the next start.
pub fn record(mounts: &[Recorded]) {
    let path = record_path();
    let tmp = path.with_extension("mounts.tmp");
    let res = serde_json::to_vec(mounts).map_err(std::io::Error::other).and_then(|b| std::fs::write(&tmp, b)).and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = res {
        log(&format!("cannot record the mounts in '{}': {}", path.display(), e));
    }
}

/// At start: detaches the mounts a previous daemon on this socket recorded
/// and left (see the module comment). Returns how many were detached.
pub fn detach_recorded() -> usize {
    let Ok(bytes) = std::fs::read(record_path()) else { return 0 };
    let Ok(mut left) = serde_json::from_slice::<Vec<Recorded>>(&bytes) else {
        log(&format!("ignoring '{}': not a mount record", record_path().display()));
        return 0;
    };
    left.sort_by_key(|r| r.dir.components().count());
    let mut detached = 0;
    for r in &left {
        let Ok(table) = mount_table() else { break };
        let want = MountId { id: r.id, dev: r.dev };
        let Some(e) = table.iter().find(|e| e.mount_id() == want && e.mount_point == r.dir && e.is_fuse() && e.fs_name() == r.dataset) else { continue };
        match tarn_fuse::mountpoint::unmount(&e.mount_point, Some(want), true) {
            Ok(()) => {
                detached += 1;
                log(&format!("detached the mount of '{}' on '{}' left by the previous daemon", r.dataset, shown(&r.dir)));
            }
            Err(err) => log(&format!("cannot detach the mount of '{}' on '{}' left by the previous daemon: {}", r.dataset, shown(&r.dir), err)),
        }
    }
    record(&[]);
    detached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_directories() {
        for d in ["/", "/etc", "/etc/ssh", "/usr", "/usr/local/bin", "/proc/1", "/var", "/tmp", "/run", "/lib64", "/boot/efi"] {
            assert!(system_directory(Path::new(d)).is_some(), "{}", d);
        }
        for d in ["/tmp/x", "/var/tank", "/mnt", "/home", "/srv/data", "/run/tank", "/etcetera", "/usrdata"] {
            assert!(system_directory(Path::new(d)).is_none(), "{}", d);
        }
    }

    #[test]
    fn resolving_paths() {
        let dir = std::env::temp_dir().join(format!("tarn-mountdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a")).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(resolve(Path::new("/tmp/../etc")).unwrap(), Path::new("/etc"));
        assert_eq!(resolve(Path::new("/usr/")).unwrap(), Path::new("/usr"));
        assert_eq!(resolve(&dir.join("a/../new/x/../y")).unwrap(), dir.join("new/y"), "'..' after a missing directory is lexical");
        std::os::unix::fs::symlink("/etc", dir.join("etc-link")).unwrap();
        assert_eq!(resolve(&dir.join("etc-link")).unwrap(), Path::new("/etc"));
        assert_eq!(resolve(&dir.join("etc-link/new")).unwrap(), Path::new("/etc/new"));
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        assert!(resolve(&dir.join("dangling/x")).unwrap_err().msg.contains("leads nowhere"));
        std::fs::write(dir.join("file"), b"").unwrap();
        assert!(resolve(&dir.join("file/x")).unwrap_err().msg.contains("is not a directory"));
        assert_eq!(lexical(Path::new("/a/./b/../c")), Path::new("/a/c"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_mounts_on_the_way() {
        let e = |id: u64, p: &str, t: &str| MountEntry { id, parent: 1, dev: (0, id as u32), mount_point: p.into(), fstype: t.into(), source: "s".into() };
        let table = [e(1, "/", "ext4"), e(2, "/m", "fuse.tarn"), e(3, "/m/a", "fuse.tarn"), e(4, "/m/a", "tmpfs"), e(5, "/m/ab", "fuse.tarn"), e(6, "/m/a/b/c", "fuse")];
        let ids: Vec<u64> = fuse_mounts_on_the_way(&table, Path::new("/m/a/b/c")).iter().map(|m| m.id).collect();
        assert_eq!(ids, [2, 6], "shallowest first; /m/a is covered by a tmpfs; /m/ab is not on the way");
    }
}
