//! A pool whose device fails under a live mount, through the daemon
//! (issue 11 items 6 and 12).
//!
//! Pins: a device that shrank or whose host file system filled up left
//! fsyncs acknowledged or, once the pool suspended, could not be exported
//! (`export` and `export -f` failed, as its status advised), and the next
//! command silently imported it again from the cache file. Now the fsync
//! that cannot be kept fails and so does every later one, `pool status`
//! says what is on disk and what to do, `export` says to use `-f`,
//! `export -f` closes the pool without syncing and prints what it
//! discarded, the pool stays gone, and — where the image is intact — an
//! import finds everything fsynced before the fault. These pools are
//! `failmode=continue` (writers get the error); with `failmode=wait`, the
//! default, writers wait for `pool clear` (the last test).

mod common;

use std::io::Write;
use std::path::Path;

use common::{noise, Env};

/// `mount(2)`; the error names what failed.
fn mount(src: &str, dir: &Path, fstype: &str, flags: libc::c_ulong, data: &str) -> std::io::Result<()> {
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    let (src, dir, fstype, data) = (c(src), c(dir.to_str().unwrap()), c(fstype), c(data));
    // SAFETY: valid NUL-terminated strings for the duration of the call.
    if unsafe { libc::mount(src.as_ptr(), dir.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Writes `len` bytes of `noise(seed)` to `path` and fsyncs it.
fn write_synced(path: &Path, len: usize, seed: u8) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(&noise(len, u64::from(seed)))?;
    f.sync_all()
}

/// Writes files until an fsync fails; returns the files that were synced.
/// Every write or fsync after the first failure must fail too: nothing is
/// acknowledged once the pool cannot keep it.
fn fill_until_failure(mnt: &Path, len: usize, max: usize) -> Vec<(String, u8)> {
    let mut synced = Vec::new();
    for i in 0..max {
        let name = format!("f{}", i);
        match write_synced(&mnt.join(&name), len, i as u8 + 1) {
            Ok(()) => synced.push((name, i as u8 + 1)),
            Err(_) => {
                for k in 0..3 {
                    let r = write_synced(&mnt.join(format!("after{}", k)), 4096, 0xEE);
                    assert!(r.is_err(), "a write and fsync after the fault was acknowledged");
                }
                return synced;
            }
        }
    }
    panic!("{} files of {} bytes fitted: the device never failed", max, len);
}

/// The status, export and export -f of a suspended pool, and that it stays
/// gone. Returns the txg `export -f` said is on disk.
fn export_suspended(e: &Env, pool: &str, mnt: &Path, why: &str) -> u64 {
    let st = e.ok(&["pool", "status", pool]);
    assert!(st.contains("state: SUSPENDED"), "{}", st);
    assert!(st.contains("FAULTED") && st.contains(why), "the device's fault and why: {}", st);
    assert!(st.contains(&format!("tarn pool export -f {}", pool)), "the action is one that works: {}", st);
    let err = e.fails(&["pool", "export", pool]);
    assert!(err.contains("suspended") && err.contains("export -f"), "{}", err);
    let list = e.ok(&["pool", "list", "-H", "-o", "name,health"]);
    assert!(list.contains(&format!("{}\tSUSPENDED", pool)), "still there, still suspended: {}", list);
    let out = e.ok(&["pool", "export", "-f", pool]);
    assert!(out.contains("without syncing"), "{}", out);
    assert!(out.contains("discarded: txg"), "what was lost: {}", out);
    let txg: u64 = out.split("on disk: txg ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("the txg on disk: {}", out));
    assert!(!common::is_mounted(mnt.to_str().unwrap()) || !mount_here(mnt), "the mount is gone");
    let list = e.ok(&["pool", "list", "-H", "-o", "name"]);
    assert!(!list.lines().any(|l| l == pool), "an exported pool is not imported again unasked: {}", list);
    let err = e.fails(&["pool", "status", pool]);
    assert!(err.contains("no such pool"), "{}", err);
    txg
}

/// Whether `dir` is a mount point in this thread's mount namespace.
fn mount_here(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
    info.lines().any(|l| l.split(' ').nth(4) == dir.to_str())
}

/// Pool `name` on a 128 MiB image, mounted, with one file fsynced; then
/// the image is truncated to 16 MiB and files are written until an fsync
/// fails. Returns the mount point.
fn truncated_and_suspended(e: &Env, name: &str) -> std::path::PathBuf {
    let mnt = e.dir.join("mnt");
    let img = e.path(&format!("{}.img", name));
    e.ok(&["pool", "create", "-o", "failmode=continue", "-m", mnt.to_str().unwrap(), name, &img, "--size", "128M"]);
    write_synced(&mnt.join("kept"), 1 << 20, 7).unwrap();
    std::fs::OpenOptions::new().write(true).open(&img).unwrap().set_len(16 << 20).unwrap();
    fill_until_failure(&mnt, 1 << 20, 8);
    mnt
}

/// The image is truncated under the mounted pool: the next fsync fails,
/// and so does everything after it; `export -f` works.
#[test]
fn a_truncated_image_suspends_and_export_f_closes_the_pool() {
    let Some(e) = Env::real("truncated") else { return };
    let mnt = truncated_and_suspended(&e, "tp");
    export_suspended(&e, "tp", &mnt, "shrank");
}

/// `daemon stop` with a suspended pool closes it without syncing, logs
/// what was lost and takes it out of the cache file: the next daemon does
/// not import it again unasked.
#[test]
fn daemon_stop_does_not_bring_a_suspended_pool_back() {
    let Some(e) = Env::real("stop-suspended") else { return };
    truncated_and_suspended(&e, "sp");
    let _ = e.run(&["daemon", "stop"]);
    let log = e.log();
    assert!(log.contains("pool 'sp' was suspended") && log.contains("discarded"), "the loss is logged: {}", log);
    let list = e.ok(&["pool", "list", "-H", "-o", "name"]);
    assert!(!list.lines().any(|l| l == "sp"), "a suspended pool is not imported again by the next daemon: {}", list);
}

/// The image lives on a 40 MiB tmpfs that fills up (ENOSPC of the host
/// file system). The tmpfs, the daemon and its FUSE mount live in a
/// private mount namespace of the test's thread (the daemon is started
/// from it), so the host sees none of them; they go when the daemon stops.
/// After `export -f` the tmpfs grows and the pool is imported again:
/// every file fsynced before the fault is intact.
#[test]
fn a_full_host_file_system_suspends_and_the_pool_comes_back() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: mounting a tmpfs needs root");
        return;
    }
    let Some(e) = Env::real("full") else { return };
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare affects only this thread and what it starts.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNS) }, 0, "unshare: {}", std::io::Error::last_os_error());
            mount("none", Path::new("/"), "", libc::MS_REC | libc::MS_PRIVATE, "").expect("private mounts");
            let fs = e.dir.join("fs");
            std::fs::create_dir_all(&fs).unwrap();
            mount("tarn-test", &fs, "tmpfs", 0, "size=40m").expect("a tmpfs");
            let mnt = e.dir.join("mnt");
            let img = fs.join("f.img").display().to_string();
            e.ok(&["pool", "create", "-o", "failmode=continue", "-m", mnt.to_str().unwrap(), "fp", &img, "--size", "256M"]);
            assert!(mount_here(&mnt));
            let synced = fill_until_failure(&mnt, 4 << 20, 32);
            assert!(!synced.is_empty(), "some files fitted before the fault");
            let txg = export_suspended(&e, "fp", &mnt, "No space left on device");
            mount("tarn-test", &fs, "tmpfs", libc::MS_REMOUNT, "size=512m").expect("growing the tmpfs");
            e.ok(&["pool", "import", "-d", fs.to_str().unwrap(), "fp"]);
            let got: u64 = e.ok(&["pool", "get", "-H", "-p", "-o", "value", "txg", "fp"]).trim().parse().unwrap();
            assert!(got >= txg, "imported at txg {} or later (the import writes one), on disk was {}", got, txg);
            for (name, seed) in &synced {
                let data = std::fs::read(mnt.join(name)).unwrap_or_else(|err| panic!("fsynced '{}' lost: {}", name, err));
                assert!(data == noise(4 << 20, u64::from(*seed)), "fsynced '{}' differs", name);
            }
            // The daemon (and with it the namespace's mounts) goes now,
            // from inside the namespace.
            e.ok(&["daemon", "stop"]);
        });
    });
}

/// Polls `pool status` (up to 10 s) until it contains `text`.
fn status_shows(e: &Env, pool: &str, text: &str) -> String {
    let t = std::time::Instant::now();
    loop {
        let st = e.ok(&["pool", "status", pool]);
        if st.contains(text) || t.elapsed() > std::time::Duration::from_secs(10) {
            return st;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Starts a writer of `path` (create, write, fsync) on its own thread;
/// its result arrives on the returned channel.
fn writer(path: std::path::PathBuf) -> std::sync::mpsc::Receiver<std::io::Result<()>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(write_synced(&path, 4096, 0x5A)));
    rx
}

/// Injects write errors into `devs` of `pool`: the fsync that meets them
/// fails, and a writer of file `held` after it waits — `status` counts it
/// and says `pool clear` resumes. With the injection cleared, `pool clear`
/// lets the writer in, and it succeeds.
fn writer_waits_for_clear(e: &Env, pool: &str, devs: &[&str], at: &dyn Fn(&str) -> std::path::PathBuf) {
    for d in devs {
        e.ok(&["inject", "-d", d, "-e", "io", "-T", "write", pool]);
    }
    assert!(write_synced(&at("refused"), 4096, 1).is_err(), "the fsync that met the fault fails");
    let held = writer(at("held"));
    let st = status_shows(e, pool, "1 writers wait");
    assert!(st.contains("state: SUSPENDED") && st.contains("1 writers wait") && st.contains(&format!("tarn pool clear {}", pool)), "{}", st);
    let action = if devs.len() > 1 { "action: Make the devices whole again" } else { "action: Make the device whole again" };
    assert!(st.contains(action), "the action names as many devices as are out: {}", st);
    assert!(held.recv_timeout(std::time::Duration::from_millis(500)).is_err(), "the writer waits");
    e.ok(&["inject", "-c", "all"]);
    e.ok(&["pool", "clear", pool]);
    held.recv_timeout(std::time::Duration::from_secs(30)).expect("the writer ends after the clear").expect("and succeeds");
}

/// `failmode=wait`, the default: an injected write fault suspends the
/// pool, the fsync that hit it fails, and a writer after it waits —
/// `status` counts it and says `pool clear` resumes. With the fault
/// cleared, `pool clear` lets it in and its file is kept across an export
/// and import. Suspended again, `pool set failmode=continue` (applied, but
/// not recorded on a suspended pool, which it says) fails the waiting
/// writer with an error, and `export -f` closes the pool.
#[test]
fn failmode_wait_holds_a_writer_until_clear() {
    let Some(e) = Env::private("failmode-wait", false) else { return };
    let mnt = e.dir.join("mnt");
    let img = e.path("fw.img");
    e.ok(&["pool", "create", "-m", mnt.to_str().unwrap(), "fw", &img, "--size", "128M"]);
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value", "failmode", "fw"]).trim(), "wait");
    // No txg sync on the timer: the fault meets the fsync's log write, and
    // the writes of the sync that follows, on one path each run.
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    let at = |f: &str| e.at(mnt.join(f).to_str().unwrap());
    write_synced(&at("kept"), 1 << 20, 7).unwrap();

    writer_waits_for_clear(&e, "fw", &[&img], &at);
    assert!(e.ok(&["pool", "status", "fw"]).contains("state: ONLINE"));
    e.ok(&["pool", "export", "fw"]);
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "fw"]);
    assert_eq!(std::fs::read(at("held")).unwrap(), noise(4096, 0x5A), "the held write was kept");
    assert_eq!(std::fs::read(at("kept")).unwrap(), noise(1 << 20, 7));
    e.ok(&["pool", "sync", "fw"]);

    e.ok(&["inject", "-d", &img, "-e", "io", "-T", "write", "fw"]);
    assert!(write_synced(&at("refused2"), 4096, 1).is_err());
    let held = writer(at("held2"));
    let st = status_shows(&e, "fw", "1 writers wait");
    assert!(st.contains("1 writers wait"), "{}", st);
    let err = e.fails(&["pool", "set", "failmode=continue", "fw"]);
    assert!(err.contains("not recorded"), "{}", err);
    let res = held.recv_timeout(std::time::Duration::from_secs(30)).expect("the writer is let go");
    assert!(res.is_err(), "with failmode=continue the waiting writer gets an error");
    assert!(write_synced(&at("later"), 4096, 2).is_err(), "later writers fail at once");
    e.ok(&["inject", "-c", "all"]);
    assert!(e.ok(&["pool", "export", "-f", "fw"]).contains("without syncing"));
}

/// Pins: a mirror whose devices both refused writes failed its sync for
/// good ("mirror-0 is UNAVAIL: insufficient replicas"): `pool clear`
/// could not resume it and what waited was lost with `export -f`. Now,
/// as for a plain device, the fsync fails, a writer waits, `status` says
/// `pool clear` resumes; with the fault cleared the clear lets the writer
/// in, the devices resilver what they missed, a scrub finds nothing, and
/// everything is there after an export and import.
#[test]
fn failmode_wait_holds_a_writer_until_clear_on_a_mirror() {
    let Some(e) = Env::private("failmode-mirror", false) else { return };
    let mnt = e.dir.join("mnt");
    let (a, b) = (e.path("fma.img"), e.path("fmb.img"));
    e.ok(&["pool", "create", "-m", mnt.to_str().unwrap(), "fm", "mirror", &a, &b, "--size", "128M"]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    let at = |f: &str| e.at(mnt.join(f).to_str().unwrap());
    write_synced(&at("kept"), 1 << 20, 7).unwrap();

    writer_waits_for_clear(&e, "fm", &[&a, &b], &at);
    e.ok(&["pool", "wait", "-t", "resilver", "fm"]);
    let st = status_shows(&e, "fm", "state: ONLINE");
    assert!(st.contains("state: ONLINE"), "{}", st);
    e.ok(&["pool", "scrub", "-w", "fm"]);
    let st = e.ok(&["pool", "status", "fm"]);
    assert!(st.contains("scrub repaired 0") && st.contains("with 0 errors"), "a scrub finds every copy whole: {}", st);
    e.ok(&["pool", "export", "fm"]);
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "fm"]);
    assert_eq!(std::fs::read(at("held")).unwrap(), noise(4096, 0x5A), "the held write was kept");
    assert_eq!(std::fs::read(at("kept")).unwrap(), noise(1 << 20, 7));
    e.ok(&["pool", "export", "fm"]);
}

/// `failmode` takes `wait` and `continue`; `panic` and anything else are
/// refused with a reason, at create and by `pool set`, nothing changed.
#[test]
fn failmode_bad_values_are_refused() {
    let e = Env::plain("failmode-bad");
    let img = e.path("fb.img");
    let err = e.fails(&["pool", "create", "-o", "failmode=panic", "-m", "none", "fb", &img, "--size", "128M"]);
    assert!(err.contains("never takes the host down"), "{}", err);
    assert!(!Path::new(&img).exists(), "nothing was created");
    e.ok(&["pool", "create", "-o", "failmode=continue", "-m", "none", "fb", &img, "--size", "128M"]);
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value,source", "failmode", "fb"]).trim(), "continue\tlocal");
    for bad in ["panic", "", "WAIT", "sometimes"] {
        let err = e.fails(&["pool", "set", &format!("failmode={}", bad), "fb"]);
        assert!(err.contains("failmode"), "{}", err);
    }
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value", "failmode", "fb"]).trim(), "continue");
    e.ok(&["pool", "set", "failmode=wait", "fb"]);
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value", "failmode", "fb"]).trim(), "wait");
}
