//! What one FUSE mount serves besides its dataset, through the real
//! daemon, the POSIX layer and the kernel: snapshots read in place under
//! `.zfs/snapshot`, child datasets inside their parent's mount with their
//! own properties, and rollback of a mounted dataset with files open.
//!
//! Each test skips with a message where /dev/fuse cannot be opened.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use common::{is_mounted, Env};

fn names(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {}", dir, e)).map(|d| d.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("should fail").raw_os_error().unwrap_or(0)
}

fn statvfs(p: &str) -> libc::statvfs {
    let c = std::ffi::CString::new(p).unwrap();
    // SAFETY: statvfs writes one struct through a valid pointer; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0, "statvfs {}", p);
    st
}

/// The pool verifies: every block's checksum, no leaks.
fn verify(e: &Env) {
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(v.starts_with("verified txg") && !v.contains("ERROR"), "{}", v);
}

#[test]
fn snapshots_are_readable_in_place_under_dot_zfs() {
    let Some(e) = Env::real("snapdir") else { return };
    let mnt = e.create("tank");
    fs::create_dir(format!("{mnt}/d")).unwrap();
    fs::write(format!("{mnt}/a"), b"before").unwrap();
    fs::write(format!("{mnt}/d/b"), vec![7u8; 300_000]).unwrap();
    e.ok(&["snapshot", "tank@today"]);
    fs::write(format!("{mnt}/a"), b"after the snapshot").unwrap();
    fs::remove_file(format!("{mnt}/d/b")).unwrap();
    fs::write(format!("{mnt}/c"), b"new").unwrap();

    // .zfs is hidden from listings but reachable by name.
    assert_eq!(names(&mnt), ["a", "c", "d"]);
    assert_eq!(names(&format!("{mnt}/.zfs")), ["snapshot"]);
    assert_eq!(names(&format!("{mnt}/.zfs/snapshot")), ["today"]);
    let today = format!("{mnt}/.zfs/snapshot/today");
    assert_eq!(names(&today), ["a", "d"]);
    assert_eq!(fs::read(format!("{today}/a")).unwrap(), b"before");
    assert_eq!(fs::read(format!("{today}/d/b")).unwrap(), vec![7u8; 300_000]);
    assert_eq!(fs::read(format!("{mnt}/a")).unwrap(), b"after the snapshot");
    // One device, distinct inode numbers: the snapshot's `a` is not the live `a`.
    let (live, snap) = (fs::metadata(format!("{mnt}/a")).unwrap(), fs::metadata(format!("{today}/a")).unwrap());
    assert_eq!(live.dev(), snap.dev());
    assert_ne!(live.ino(), snap.ino());
    assert_ne!(fs::metadata(&mnt).unwrap().ino(), fs::metadata(&today).unwrap().ino());
    // Everything under a snapshot, and .zfs itself, is read-only.
    assert_eq!(errno_of(fs::write(format!("{today}/new"), b"x")), libc::EROFS);
    assert_eq!(errno_of(OpenOptions::new().write(true).open(format!("{today}/a"))), libc::EROFS);
    assert_eq!(errno_of(fs::remove_file(format!("{today}/a"))), libc::EROFS);
    assert_eq!(errno_of(fs::create_dir(format!("{today}/x"))), libc::EROFS);
    assert_eq!(errno_of(fs::set_permissions(format!("{today}/a"), std::os::unix::fs::PermissionsExt::from_mode(0o600))), libc::EROFS);
    assert_eq!(errno_of(fs::create_dir(format!("{mnt}/.zfs/snapshot/mine"))), libc::EROFS);
    assert_eq!(errno_of(fs::metadata(format!("{mnt}/.zfs/snapshot/nosuch"))), libc::ENOENT);
    assert_eq!(errno_of(fs::metadata(format!("{mnt}/.zfs/other"))), libc::ENOENT);
    assert_eq!(errno_of(fs::rename(format!("{today}/a"), format!("{mnt}/a2"))), libc::EXDEV);

    // Snapshots appear, are renamed and destroyed while mounted; each is
    // opened on first access only.
    e.ok(&["snapshot", "tank@later", "tank@third"]);
    assert_eq!(names(&format!("{mnt}/.zfs/snapshot")), ["later", "third", "today"]);
    assert!(!e.ok(&["mount"]).contains("tank@third"), "listed, not opened: {}", e.ok(&["mount"]));
    assert_eq!(fs::read(format!("{mnt}/.zfs/snapshot/third/c")).unwrap(), b"new");
    assert!(e.ok(&["mount"]).contains("tank@third"), "opened on access: {}", e.ok(&["mount"]));
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "mounted", "tank@third"]), "yes\n");
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "mounted", "tank@later"]), "no\n");
    e.ok(&["rename", "tank@later", "tank@renamed"]);
    assert_eq!(names(&format!("{mnt}/.zfs/snapshot")), ["renamed", "third", "today"]);
    assert_eq!(errno_of(fs::metadata(format!("{mnt}/.zfs/snapshot/later"))), libc::ENOENT);
    // A snapshot in use is busy, as OpenZFS fails the destroy when the
    // automounted snapshot cannot be unmounted; -f takes it away.
    let open = File::open(format!("{today}/a")).unwrap();
    let err = e.fails(&["destroy", "tank@today"]);
    assert!(err.contains("cannot destroy 'tank@today': dataset is busy"), "{}", err);
    assert_eq!(fs::read(format!("{today}/a")).unwrap(), b"before");
    drop(open);
    e.ok(&["destroy", "tank@today"]);
    assert_eq!(names(&format!("{mnt}/.zfs/snapshot")), ["renamed", "third"]);
    let open = File::open(format!("{mnt}/.zfs/snapshot/third/c")).unwrap();
    e.ok(&["destroy", "-f", "tank@third"]);
    assert_eq!(errno_of(open.read_at(&mut [0u8; 3], 0)), libc::EIO);
    assert_eq!(names(&format!("{mnt}/.zfs/snapshot")), ["renamed"]);

    // snapdir=visible lists .zfs, and children inherit it.
    e.ok(&["set", "snapdir=visible", "tank"]);
    assert_eq!(names(&mnt), [".zfs", "a", "c", "d"]);
    e.ok(&["create", "tank/kid"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "snapdir", "tank/kid"]), "visible\tinherited from tank\n");
    assert_eq!(names(&format!("{mnt}/kid")), [".zfs"]);
    assert!(e.fails(&["set", "snapdir=shown", "tank"]).contains("bad value 'shown' for property 'snapdir'"));
    e.ok(&["inherit", "snapdir", "tank"]);
    assert_eq!(names(&mnt), ["a", "c", "d", "kid"]);
    // A snapshot of a file system never opened (so never given its POSIX
    // layout) is an empty directory.
    e.ok(&["create", "tank/fresh"]);
    e.ok(&["snapshot", "tank/fresh@empty"]);
    assert_eq!(names(&format!("{mnt}/fresh/.zfs/snapshot/empty")), Vec::<String>::new());
    assert_eq!(errno_of(fs::write(format!("{mnt}/fresh/.zfs/snapshot/empty/x"), b"x")), libc::EROFS);
    verify(&e);
}

#[test]
fn child_datasets_are_served_inside_their_parent() {
    let Some(e) = Env::real("children") else { return };
    let mnt = e.create("tank");
    e.ok(&["create", "-o", "recordsize=16K", "tank/a"]);
    e.ok(&["create", "-p", "tank/a/b/c"]);
    e.ok(&["create", "-o", "canmount=off", "tank/off"]);
    let (a, c) = (format!("{mnt}/a"), format!("{mnt}/a/b/c"));
    // Listed without being opened; opened on first access.
    assert_eq!(names(&mnt), ["a"]);
    assert!(!e.ok(&["mount"]).contains("tank/a"), "{}", e.ok(&["mount"]));
    fs::write(format!("{c}/deep"), b"three levels down").unwrap();
    fs::write(format!("{a}/top"), vec![1u8; 100_000]).unwrap();
    let listed = e.ok(&["mount"]);
    assert!(listed.lines().any(|l| l.starts_with("tank/a/b/c ") && l.trim_end().ends_with(&c)), "{}", listed);
    assert!(!is_mounted(&a) && !is_mounted(&c), "no mount of their own");
    assert_eq!(e.ok(&["list", "-H", "-o", "name,mounted", "-r", "tank"]), "tank\tyes\ntank/a\tyes\ntank/a/b\tyes\ntank/a/b/c\tyes\ntank/off\tno\n");
    // One device; each dataset its own inodes, properties and space.
    let (ma, mc) = (fs::metadata(format!("{a}/top")).unwrap(), fs::metadata(format!("{c}/deep")).unwrap());
    assert_eq!(ma.dev(), fs::metadata(&mnt).unwrap().dev());
    assert_ne!(fs::metadata(&a).unwrap().ino(), fs::metadata(&mnt).unwrap().ino());
    assert_eq!(ma.blksize(), 16 << 10, "tank/a's recordsize");
    assert_eq!(mc.blksize(), 16 << 10, "inherited by tank/a/b/c");
    assert_eq!(fs::metadata(&mnt).unwrap().blksize(), 4096, "a directory's block");
    e.ok(&["set", "quota=10M", "tank/a"]);
    let s = statvfs(&a);
    let size = s.f_blocks * s.f_frsize;
    assert!(size <= 10 << 20 && size > 9 << 20, "df of tank/a shows its 10M quota: {}", size);
    assert!(statvfs(&mnt).f_blocks * statvfs(&mnt).f_frsize > 64 << 20, "tank's own size");
    let mut big = File::create(format!("{a}/big")).unwrap();
    // Incompressible: a quota counts the bytes stored, after compression.
    let w = big.write_all(&common::noise(12 << 20, 3));
    assert_eq!(errno_of(w), libc::EDQUOT, "the quota holds inside the parent's mount, at write(2)");
    drop(big);
    fs::remove_file(format!("{a}/big")).unwrap();
    e.ok(&["set", "readonly=on", "tank/a/b"]);
    assert_eq!(errno_of(fs::write(format!("{c}/ro"), b"x")), libc::EROFS);
    assert_eq!(errno_of(fs::create_dir(format!("{mnt}/a/b/d"))), libc::EROFS);
    fs::write(format!("{a}/rw"), b"tank/a stays writable").unwrap();
    e.ok(&["inherit", "readonly", "tank/a/b"]);
    fs::write(format!("{c}/rw"), b"writable again").unwrap();
    assert_eq!(errno_of(fs::hard_link(format!("{c}/deep"), format!("{a}/deep"))), libc::EXDEV);
    assert_eq!(errno_of(fs::rename(format!("{a}/top"), format!("{mnt}/top"))), libc::EXDEV);
    // Created while mounted: appears; canmount=off does not.
    assert_eq!(errno_of(fs::metadata(format!("{mnt}/off"))), libc::ENOENT);
    e.ok(&["create", "tank/late"]);
    fs::write(format!("{mnt}/late/f"), b"late").unwrap();
    // Destroy of a dataset in use fails; a working directory counts.
    let mut cwd = Command::new("sleep").arg("60").current_dir(&c).spawn().unwrap();
    let err = e.fails(&["destroy", "tank/a/b/c"]);
    assert!(err.contains("cannot destroy 'tank/a/b/c': dataset is busy"), "{}", err);
    assert_eq!(fs::read(format!("{c}/deep")).unwrap(), b"three levels down");
    cwd.kill().unwrap();
    cwd.wait().unwrap();
    e.ok(&["destroy", "tank/a/b/c"]);
    assert_eq!(names(&format!("{mnt}/a/b")), Vec::<String>::new());
    e.ok(&["destroy", "tank/late"]);
    assert_eq!(errno_of(fs::metadata(format!("{mnt}/late"))), libc::ENOENT);
    // What was written survives a restart of the daemon.
    e.ok(&["daemon", "stop"]);
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "tank/a"]), "tank/a\n");
    common::wait_for("the root mount", || Path::new(&format!("{a}/top")).exists());
    assert_eq!(fs::read(format!("{a}/top")).unwrap(), vec![1u8; 100_000]);
    assert_eq!(fs::read(format!("{a}/rw")).unwrap(), b"tank/a stays writable");
    verify(&e);
}

#[test]
fn rollback_of_a_busy_mounted_dataset() {
    let Some(e) = Env::real("rollback") else { return };
    let mnt = e.create("tank");
    fs::write(format!("{mnt}/keep"), b"as in the snapshot").unwrap();
    fs::write(format!("{mnt}/same"), b"never changed").unwrap();
    fs::create_dir(format!("{mnt}/dir")).unwrap();
    e.ok(&["snapshot", "tank@s"]);
    fs::write(format!("{mnt}/keep"), b"changed after the snapshot, longer").unwrap();
    fs::write(format!("{mnt}/dir/gone"), b"only after").unwrap();
    let mut new = OpenOptions::new().create(true).read(true).write(true).open(format!("{mnt}/new")).unwrap();
    new.write_all(b"created after").unwrap();
    let keep = File::open(format!("{mnt}/keep")).unwrap();
    let same = File::open(format!("{mnt}/same")).unwrap();
    let mut cwd = Command::new("sleep").arg("60").current_dir(format!("{mnt}/dir")).spawn().unwrap();
    // Busy: files open, a working directory inside. Rollback works anyway,
    // and a fresh look shows the snapshot.
    e.ok(&["rollback", "tank@s"]);
    assert!(is_mounted(&mnt));
    assert_eq!(names(&mnt), ["dir", "keep", "same"]);
    assert_eq!(fs::read(format!("{mnt}/keep")).unwrap(), b"as in the snapshot");
    assert_eq!(fs::metadata(format!("{mnt}/keep")).unwrap().len(), 18);
    assert_eq!(names(&format!("{mnt}/dir")), Vec::<String>::new());
    // A file the rollback left as it was keeps working through its open
    // handle; one it removed or changed fails with EIO, as OpenZFS fails a
    // znode it cannot find again after a rollback (a changed one too: the
    // kernel's write-back cache would go on showing its old size).
    let mut buf = vec![0u8; 64];
    let n = same.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"never changed");
    assert_eq!(errno_of(keep.read_at(&mut buf, 0)), libc::EIO);
    assert_eq!(errno_of(new.read_at(&mut buf, 0)), libc::EIO);
    assert_eq!(errno_of(new.write_all_at(b"x", 0).and_then(|_| new.sync_all())), libc::EIO);
    // New files after the rollback (their numbers may be the old ones').
    for i in 0..3 {
        fs::write(format!("{mnt}/after{i}"), format!("after {i}")).unwrap();
    }
    for i in 0..3 {
        assert_eq!(fs::read_to_string(format!("{mnt}/after{i}")).unwrap(), format!("after {i}"));
    }
    assert_eq!(errno_of(new.read_at(&mut buf, 0)), libc::EIO, "still stale");
    assert!(e.log().contains("rolled back 'tank'"), "{}", e.log());
    drop((keep, new, same));
    cwd.kill().unwrap();
    cwd.wait().unwrap();
    // A child dataset served inside the mount rolls back the same way.
    e.ok(&["create", "tank/kid"]);
    fs::write(format!("{mnt}/kid/f"), b"one").unwrap();
    e.ok(&["snapshot", "tank/kid@one"]);
    fs::write(format!("{mnt}/kid/f"), b"two").unwrap();
    fs::write(format!("{mnt}/kid/g"), b"two").unwrap();
    let f = File::open(format!("{mnt}/kid/f")).unwrap();
    e.ok(&["rollback", "tank/kid@one"]);
    assert_eq!(names(&format!("{mnt}/kid")), ["f"]);
    assert_eq!(fs::read(format!("{mnt}/kid/f")).unwrap(), b"one");
    assert_eq!(errno_of(f.read_at(&mut buf, 0)), libc::EIO, "changed since the snapshot");
    drop(f);
    // rollback -r destroys later snapshots; one in use under .zfs is busy.
    e.ok(&["snapshot", "tank/kid@two"]);
    let open = File::open(format!("{mnt}/kid/.zfs/snapshot/two/f")).unwrap();
    let err = e.fails(&["rollback", "-r", "tank/kid@one"]);
    assert!(err.contains("busy"), "{}", err);
    drop(open);
    e.ok(&["rollback", "-r", "tank/kid@one"]);
    assert_eq!(names(&format!("{mnt}/kid/.zfs/snapshot")), ["one"]);
    verify(&e);
}

/// Reads `path` with O_DIRECT, so the read reaches the file system (not
/// the page cache), which is where access times are kept.
fn read_direct(path: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).unwrap();
    let mut buf = vec![0u8; 8192];
    let at = buf.as_ptr().align_offset(4096);
    let n = f.read_at(&mut buf[at..at + 4096], 0).unwrap();
    assert_eq!(n, 4096, "{path}");
}

/// `atime` and `relatime` apply at once to a served, open file system, as
/// a remount applies them on OpenZFS. (With relatime on, a read right after
/// a write rightly leaves the access time: the kernel's coarse clock stamps
/// the write's mtime before the create's atime.)
#[test]
fn atime_changes_apply_to_a_served_file_system_at_once() {
    let Some(e) = Env::real("atime") else { return };
    let mnt = e.create("tank");
    e.ok(&["create", "tank/a"]);
    let f = format!("{mnt}/a/f");
    fs::write(&f, vec![5u8; 4096]).unwrap();
    File::open(&f).unwrap().sync_all().unwrap();
    let atime = |p: &str| {
        // Past the kernel's 1 s attribute cache: the file system's own value.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let m = fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec())
    };
    let t0 = atime(&f);
    e.ok(&["set", "atime=off", "tank/a"]);
    e.ok(&["set", "relatime=off", "tank/a"]);
    read_direct(&f);
    assert_eq!(atime(&f), t0, "atime=off: a read leaves the access time");
    e.ok(&["set", "atime=on", "tank/a"]);
    read_direct(&f);
    let t1 = atime(&f);
    assert!(t1 > t0, "atime=on, relatime=off: a read sets the access time: {t0:?} -> {t1:?}");
    e.ok(&["inherit", "atime", "tank/a"]);
    e.ok(&["set", "atime=off", "tank"]);
    fs::write(&f, vec![6u8; 4096]).unwrap();
    File::open(&f).unwrap().sync_all().unwrap();
    let t2 = atime(&f);
    read_direct(&f);
    assert_eq!(atime(&f), t2, "atime=off inherited from the parent applies too");
}
