//! `sync=always` through the daemon: every write(2) that returned is
//! durable, with no fsync. Files opened while the dataset has sync=always
//! bypass the kernel's write-back cache (`FOPEN_DIRECT_IO`): a write the
//! cache took would be acknowledged before the daemon (and its log) saw it,
//! and a SIGKILL of the daemon lost it. Here the daemon is SIGKILLed with
//! no txg synced since the writes (`zfs_txg_timeout` an hour) and every
//! byte written is there after the restart.

mod common;

use std::io::{Seek, SeekFrom, Write};

use common::{noise, Env};

#[test]
fn sync_always_writes_survive_a_daemon_sigkill_without_fsync() {
    let Some(e) = Env::real("syncalways") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &e.path("a.img"), "--size", "256M"]);
    e.ok(&["set", "sync=always", "tank"]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    std::fs::create_dir(format!("{mnt}/d")).unwrap();
    e.ok(&["pool", "sync", "tank"]);

    // Small and large files, written in pieces of several sizes, one
    // rewritten in the middle, one appended to after a reopen; no fsync.
    // The files stay open until the kill: a close would flush the kernel's
    // cache to the daemon (FUSE FLUSH) and hide a cached write.
    let mut want = Vec::new();
    let mut open = Vec::new();
    for i in 0..12u64 {
        let len = [1usize, 100, 4096, 5000, 65_536, 131_072, 300_001, 1 << 20][i as usize % 8] + i as usize;
        let data = noise(len, i);
        let path = format!("{mnt}/d/f{i}");
        let mut f = std::fs::File::create(&path).unwrap();
        for piece in data.chunks(1 + (i as usize * 7_919) % 70_000) {
            f.write_all(piece).unwrap();
        }
        want.push((path, data));
        open.push(f);
    }
    {
        let (path, data) = &mut want[5];
        let mut f = std::fs::OpenOptions::new().write(true).open(&*path).unwrap();
        f.seek(SeekFrom::Start(1000)).unwrap();
        let patch = noise(3000, 99);
        f.write_all(&patch).unwrap();
        data[1000..4000].copy_from_slice(&patch);
        open.push(f);
    }
    {
        let (path, data) = &mut want[2];
        let mut f = std::fs::OpenOptions::new().append(true).open(&*path).unwrap();
        let more = noise(10_000, 98);
        f.write_all(&more).unwrap();
        data.extend_from_slice(&more);
        open.push(f);
    }
    std::fs::rename(format!("{mnt}/d/f0"), format!("{mnt}/moved")).unwrap();
    want[0].0 = format!("{mnt}/moved");

    let pid = e.pid().expect("pid");
    // SAFETY: killing our test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    e.wait_killed(pid);
    drop(open);
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE"), "{status}");
    common::wait_for("the mount to come back", || std::path::Path::new(&format!("{mnt}/moved")).exists());
    for (path, data) in &want {
        let got = std::fs::read(path).unwrap_or_default();
        assert!(got == *data, "{path}: {} bytes of {}{}", got.len(), data.len(), if got.len() == data.len() { " (contents differ)" } else { "" });
    }
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(!v.contains("ERROR"), "{v}");
}
