//! The intent log through the daemon (issue 13): what a program fsynced on
//! a mount is there after the daemon is SIGKILLed, with no txg synced in
//! between (`zfs_txg_timeout` an hour): the restarted daemon imports the
//! pool, which claims the log, and mounts the dataset, which replays it.
//! `tarn zilstat` counts the commits and log blocks; bad input to it is
//! one error line.

mod common;

use std::io::Write;

use common::{noise as content, Env};

fn zilstat(e: &Env) -> serde_json::Value {
    serde_json::from_str(e.ok(&["zilstat", "--json"]).trim()).expect("zilstat --json")
}

#[test]
fn fsynced_files_survive_a_daemon_sigkill() {
    let Some(e) = Env::real("zilkill") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &e.path("a.img"), "--size", "256M"]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    // The first fsync starts the chain (one txg sync).
    std::fs::File::create(format!("{mnt}/warm")).unwrap().sync_all().unwrap();
    let before = zilstat(&e);
    std::fs::create_dir(format!("{mnt}/d")).unwrap();
    for i in 0..20u64 {
        let mut f = std::fs::File::create(format!("{mnt}/d/f{i}")).unwrap();
        f.write_all(&content(10_000 + i as usize * 3_000, i)).unwrap();
        f.sync_all().unwrap();
    }
    std::fs::rename(format!("{mnt}/d/f0"), format!("{mnt}/moved")).unwrap();
    std::fs::File::open(format!("{mnt}/moved")).unwrap().sync_all().unwrap();
    std::fs::write(format!("{mnt}/unsynced"), b"maybe").unwrap();
    let after = zilstat(&e);
    assert!(after["cc"].as_u64() >= Some(21), "21 commits counted: {after}");
    assert!(after["imnc"].as_u64() > before["imnc"].as_u64(), "log blocks written: {before} -> {after}");
    assert_eq!(after["fb"].as_u64(), before["fb"].as_u64(), "no commit fell back to a txg sync: {after}");

    let pid = e.pid().expect("pid");
    // SAFETY: killing our test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    e.wait_killed(pid);
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE"), "{status}");
    common::wait_for("the mount to come back", || std::path::Path::new(&format!("{mnt}/moved")).exists());
    assert!(std::fs::read(format!("{mnt}/moved")).unwrap() == content(10_000, 0), "moved");
    for i in 1..20u64 {
        let got = std::fs::read(format!("{mnt}/d/f{i}")).unwrap_or_default();
        assert!(got == content(10_000 + i as usize * 3_000, i), "d/f{i}: {} bytes", got.len());
    }
    assert!(!std::path::Path::new(&format!("{mnt}/d/f0")).exists(), "the rename was replayed");
    if let Ok(b) = std::fs::read(format!("{mnt}/unsynced")) {
        assert!(b.is_empty() || b == b"maybe", "never half there");
    }
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(!v.contains("ERROR"), "{v}");
}

#[test]
fn zilstat_refuses_bad_input() {
    let Some(e) = Env::new("zilstat") else { return };
    for (args, want) in [
        (vec!["zilstat", "0"], "bad interval '0'"),
        (vec!["zilstat", "1", "0"], "bad count '0'"),
        (vec!["zilstat", "-p", "nosuch"], "no such pool 'nosuch'"),
    ] {
        let o = e.run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }
}
