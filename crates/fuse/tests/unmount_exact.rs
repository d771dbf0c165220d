//! Unmount removes exactly the mount it made, once (issue 11, "tarn
//! unmount of a dataset mounted over another file system unmounts that file
//! system too"): fuser unmounted the directory again when the session
//! ended, so a tmpfs the mount covered went with it. And an unmount must not
//! take a file system someone mounted over tarn's.
//!
//! Each test runs itself again inside a private mount namespace (`unshare
//! -m --propagation private`): the tmpfs mounts it makes never reach the
//! host, and vanish with the namespace even if the test fails. Skips (with
//! the reason) where FUSE or `unshare` is unavailable.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tarn_engine::ErrorKind;
use tarn_fuse::mountpoint::{mount_table, MountEntry};
use tarn_fuse::{mount, MemFs, MountOptions, MountPoint};

const CHILD: &str = "TARN_TEST_PRIVATE_NS";

/// In the parent: runs `test` again in a private mount namespace and
/// asserts it passed; returns false. In that child: returns true.
fn in_private_namespace(test: &str) -> bool {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return true;
    }
    if common::mount_dir("tarn-exact", test).is_none() {
        return false;
    }
    if !Command::new("unshare").args(["-m", "--propagation", "private", "true"]).status().is_ok_and(|s| s.success()) {
        eprintln!("skipping {test}: cannot make a private mount namespace (unshare -m)");
        return false;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD, test)
        .output()
        .expect("unshare runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "{test} in a private mount namespace:\n{text}");
    false
}

fn mount_tmpfs(dir: &Path) {
    let d = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid strings; inside the test's private mount namespace.
    let r = unsafe { libc::mount(c"tmpfs".as_ptr(), d.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
    assert_eq!(r, 0, "mount tmpfs on {}: {}", dir.display(), std::io::Error::last_os_error());
}

fn umount(dir: &Path) {
    let d = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path, inside the test's private mount namespace.
    assert_eq!(unsafe { libc::umount2(d.as_ptr(), 0) }, 0, "umount {}: {}", dir.display(), std::io::Error::last_os_error());
}

/// The mounts at `dir`, bottom first.
fn stack(dir: &Path) -> Vec<MountEntry> {
    mount_table().unwrap().into_iter().filter(|e| e.mount_point == dir).collect()
}

/// The types of the mounts at `dir`, bottom first (any FUSE mount: "fuse").
fn types(dir: &Path) -> Vec<String> {
    stack(dir).into_iter().map(|e| if e.is_fuse() { "fuse".to_string() } else { e.fstype }).collect()
}

#[test]
fn unmount_leaves_the_file_system_below_mounted() {
    if !in_private_namespace("unmount_leaves_the_file_system_below_mounted") {
        return;
    }
    let dir = common::mount_dir("tarn-exact", "below").unwrap();
    mount_tmpfs(&dir);
    std::fs::write(dir.join("underneath"), b"tmpfs file").unwrap();
    let h = mount(Arc::new(MemFs::new()), &dir, &MountOptions { fsname: "exact".into(), ..Default::default() }).expect("mount");
    assert_eq!(types(&dir), ["tmpfs", "fuse"]);
    let top = stack(&dir).pop().unwrap();
    assert!(!dir.join("underneath").exists());
    let h_id = h.id();
    let blk = h.block_device().map(|p| p.display().to_string());
    h.unmount().expect("unmount");
    drop(h);
    // The session thread has ended: any second unmount has happened.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(types(&dir), ["tmpfs"], "the tmpfs below is still mounted");
    assert_eq!(std::fs::read(dir.join("underneath")).unwrap(), b"tmpfs file");
    umount(&dir);
    assert_eq!(h_id, Some(top.mount_id()), "the recorded identity is the mount made");
    match blk {
        Some(dev) => assert_eq!((top.fstype.as_str(), top.source.as_str()), ("fuseblk", dev.as_str()), "typed fuseblk, its loop device as the source"),
        None => assert_eq!((top.fstype.as_str(), top.source.as_str()), ("fuse.tarn", "exact"), "typed fuse.tarn, the name as its source"),
    }
}

#[test]
fn unmount_refuses_a_file_system_mounted_over_tarns() {
    if !in_private_namespace("unmount_refuses_a_file_system_mounted_over_tarns") {
        return;
    }
    let dir = common::mount_dir("tarn-exact", "over").unwrap();
    let h = mount(Arc::new(MemFs::new()), &dir, &MountOptions { fsname: "exact".into(), ..Default::default() }).expect("mount");
    mount_tmpfs(&dir);
    std::fs::write(dir.join("on-top"), b"x").unwrap();
    let e = h.unmount().expect_err("the tmpfs on top is not tarn's to unmount");
    assert_eq!(e.kind, ErrorKind::Busy);
    assert!(e.msg.contains("not tarn's") && e.msg.contains(&dir.display().to_string()), "{}", e.msg);
    assert_eq!(types(&dir), ["fuse", "tmpfs"], "nothing was unmounted");
    assert!(h.is_mounted());
    umount(&dir);
    h.unmount().expect("unmount once the tmpfs is gone");
    assert!(types(&dir).is_empty());
}

#[test]
fn a_mount_point_is_the_directory_itself() {
    let Some(dir) = common::mount_dir("tarn-exact", "mp") else { return };
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let dotted = dir.join("sub/../sub/.");
    assert_eq!(MountPoint::open(&dotted).unwrap().path(), sub, "the real path, '..' and '.' resolved");
    let link = dir.join("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&sub, &link).unwrap();
    let e = MountPoint::open(&link).err().expect("a symbolic link is refused");
    assert!(e.msg.contains("is a symbolic link, not a directory") && e.msg.contains("link"), "{}", e.msg);
    std::fs::write(dir.join("file"), b"").unwrap();
    let e = MountPoint::open(&dir.join("file")).err().expect("a file is refused");
    assert!(e.msg.contains("is not a directory"), "{}", e.msg);
    let through = link.join(".");
    assert_eq!(MountPoint::open(&through).unwrap().path(), sub, "a link on the way is resolved, and the real path says where");
    let _ = std::fs::remove_dir_all(&dir);
}
