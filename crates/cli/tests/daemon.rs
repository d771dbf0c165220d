//! `tarn daemon` end to end: started on first use, pools created and
//! imported are mounted, list/status answer from the live pool, unmount and
//! mount (busy and forced), export/import, SIGTERM unmounts cleanly and the
//! pools import again at the next start, a SIGKILLed daemon's dead mount is
//! replaced, and wrong arguments get one clear line and exit 1.
//!
//! The POSIX layer is not on this branch, so these daemons run with the
//! test hook `TARN_TEST_MEMFS=1` (debug builds): each dataset is served from
//! an in-memory MemFs — the mount machinery is real, the files are not in
//! the pool. Each test has its own directory, socket and cache file, so
//! tests run in parallel; each skips with a message if /dev/fuse is
//! unavailable.

mod common;

use std::path::Path;

use common::{is_mounted, wait_for, Env};

#[test]
fn starts_on_first_use_and_mounts_what_it_creates() {
    let Some(e) = Env::new("first") else { return };
    assert!(!e.dir.join("tarn.sock").exists());
    assert_eq!(e.ok(&["pool", "list", "-H"]), "", "no pools yet; the daemon started to answer");
    assert!(e.dir.join("tarn.sock").exists() && e.pid().is_some());
    let mnt = e.create("tank");
    assert!(is_mounted(&mnt));
    assert!(e.ok(&["mount"]).contains(&format!("tank     {}", mnt)));
    std::fs::write(format!("{}/hello", mnt), b"through the daemon's mount").unwrap();
    assert_eq!(std::fs::read(format!("{}/hello", mnt)).unwrap(), b"through the daemon's mount");
    assert_eq!(e.ok(&["pool", "list", "-H", "-o", "name,health"]).trim(), "tank\tONLINE");
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE") && status.contains(&e.path("tank.img")), "{}", status);
    // A second daemon on the same socket is refused.
    assert!(e.fails(&["daemon"]).contains("already running"));
    let err = e.fails(&["bench", "tank", "--size", "8M"]);
    assert!(err.contains("held by the tarn daemon") && err.contains("tarn daemon stop"), "{}", err);
}

#[test]
fn commands_starting_the_daemon_at_once_all_succeed() {
    let Some(e) = Env::new("race") else { return };
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let mut c = e.cmd();
            std::thread::spawn(move || c.args(["pool", "status"]).output().expect("tarn runs"))
        })
        .collect();
    for h in handles {
        let o = h.join().unwrap();
        assert!(o.status.success(), "{}\nlog:\n{}", String::from_utf8_lossy(&o.stderr), e.log());
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "no pools available");
    }
}

#[test]
fn unmount_busy_forced_and_mount_again() {
    let Some(e) = Env::new("unmount") else { return };
    let mnt = e.create("tank");
    let f = std::fs::File::create(format!("{}/open", mnt)).unwrap();
    let err = e.fails(&["unmount", "tank"]);
    assert!(err.contains("busy") && err.contains("-f"), "{}", err);
    assert!(is_mounted(&mnt));
    drop(f);
    // The kernel sends the file's RELEASE after close(2) returns, on its
    // own time: under load the first unmount may still see it open.
    wait_for("the closed file's release to reach the daemon", || e.run(&["unmount", &mnt]).status.success());
    assert!(!is_mounted(&mnt));
    assert_eq!(e.ok(&["mount"]).lines().count(), 1, "only the header is left");
    e.ok(&["mount", "tank"]);
    assert!(is_mounted(&mnt));
    assert!(Path::new(&format!("{}/open", mnt)).exists(), "the same file system is mounted again");
    let other = e.path("elsewhere");
    assert!(e.fails(&["mount", "tank", &other]).contains("already mounted"));
    let _f = std::fs::File::open(format!("{}/open", mnt)).unwrap();
    e.ok(&["unmount", "-f", "tank"]);
    assert!(!is_mounted(&mnt));
    e.ok(&["mount", "tank", &other]);
    assert!(is_mounted(&other));
    // Unmounted behind the daemon's back: it notices and forgets the mount.
    let c = std::ffi::CString::new(other.clone()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::umount2(c.as_ptr(), 0) }, 0);
    // (The session ends a moment after the kernel drops the connection.)
    wait_for("the daemon to forget the mount", || e.ok(&["mount"]).lines().count() == 1);
    e.ok(&["mount", "tank"]);
}

#[test]
fn export_unmounts_and_import_mounts() {
    let Some(e) = Env::new("export") else { return };
    let mnt = e.create("tank");
    e.ok(&["pool", "export", "tank"]);
    assert!(!is_mounted(&mnt));
    assert_eq!(e.ok(&["pool", "list", "-H"]), "");
    assert!(e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap()]).contains("EXPORTED"));
    // Without -m the root mounts at its own mountpoint property (set by
    // `pool create -m`), as zpool import does.
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "tank"]);
    assert!(is_mounted(&mnt));
    assert!(e.fails(&["pool", "import", "-d", e.dir.to_str().unwrap(), "tank"]).contains("already imported"));
    e.ok(&["pool", "export", "tank"]);
    let other = e.path("other");
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "-m", &other, "tank"]);
    assert!(is_mounted(&other) && !is_mounted(&mnt), "-m overrides the property");
    e.ok(&["pool", "destroy", "tank"]);
    assert!(!is_mounted(&mnt));
}

#[test]
fn sigterm_unmounts_and_the_next_start_imports_again() {
    let Some(e) = Env::new("sigterm") else { return };
    let mnt = e.create("tank");
    let none = e.path("never");
    e.ok(&["pool", "create", "-m", "none", "quiet", &e.path("quiet.img"), "--size", "128M"]);
    assert!(!Path::new(&none).exists());
    let pid = e.pid().expect("the daemon wrote its pid");
    // SAFETY: signalling our test's own daemon.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    wait_for("the daemon to exit", || !Path::new(&format!("/proc/{}", pid)).exists() || !e.dir.join("tarn.sock").exists());
    wait_for("the daemon process to go", || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid)).map(|s| s.contains(") Z ")).unwrap_or(true)
    });
    assert!(!is_mounted(&mnt), "SIGTERM unmounted");
    assert!(!e.dir.join("tarn.sock").exists(), "and removed the socket");
    let log = e.log();
    assert!(log.contains("closed pool 'tank'") && log.contains("closed pool 'quiet'") && log.contains("stopped"), "{}", log);
    // The next command starts a daemon that imports both from the cache.
    assert_eq!(e.ok(&["pool", "list", "-H", "-o", "name"]), "quiet\ntank\n");
    assert!(is_mounted(&mnt));
    assert!(e.ok(&["inspect", "tank", "--verify"]).starts_with("verified txg"));
}

#[test]
fn a_killed_daemons_dead_mount_is_replaced() {
    let Some(e) = Env::new("sigkill") else { return };
    let mnt = e.create("tank");
    let pid = e.pid().expect("pid");
    // SAFETY: killing our test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_for("the mount to die", || std::fs::metadata(&mnt).err().and_then(|er| er.raw_os_error()) == Some(libc::ENOTCONN));
    e.wait_killed(pid);
    assert_eq!(e.ok(&["pool", "list", "-H", "-o", "name"]).trim(), "tank");
    assert!(std::fs::metadata(&mnt).is_ok(), "a live mount again");
    assert!(e.ok(&["mount"]).contains(&mnt));
}

#[test]
fn wrong_arguments_get_one_clear_line() {
    let Some(e) = Env::new("wrong") else { return };
    assert!(e.fails(&["mount", "nosuch"]).contains("no such pool 'nosuch'"));
    assert!(e.fails(&["unmount", "/nowhere"]).contains("not a mounted dataset"));
    assert!(e.fails(&["pool", "create", "-m", "relative/dir", "tank", &e.path("a.img"), "--size", "128M"]).contains("absolute path"));
    let mnt = e.create("tank");
    assert!(e.fails(&["mount", "tank"]).contains("already mounted"));
    assert!(e.fails(&["mount", "tank/child"]).contains("no such dataset"));
    assert!(e.fails(&["unmount", "tank/child"]).contains("not a mounted dataset"));
    assert!(is_mounted(&mnt));
    // A daemon that cannot start says why.
    let o = e.cmd().env("TARN_SOCKET", "/proc/no-such-dir/tarn.sock").args(["pool", "list"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.starts_with("tarn: cannot start the tarn daemon") && err.trim_end().lines().count() == 1, "{}", err);
    assert_eq!(e.run(&["unmount"]).status.code(), Some(2), "usage errors are the parser's");
}
