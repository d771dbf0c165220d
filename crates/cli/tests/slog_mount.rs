//! Separate intent-log devices through the daemon (issue 13, `pool::
//! log_vdev`): a pool created with a log mirror shows it in a `logs`
//! section of `pool status` (and `--json` with its class); what a program
//! fsynced is there after the daemon is SIGKILLed with no txg synced; the
//! log device can be removed. Hostile input is one error line and changes
//! nothing: `log` with no device, RAID-Z logs, a device of another pool or
//! holding a file system, removing a data device as a log, an import with
//! a log device missing (refused, naming it and `--missing-log`), and
//! `--missing-log` with nothing missing (imports as usual).

mod common;

use std::io::Write;

use common::{noise as content, Env};

fn status_json(e: &Env) -> serde_json::Value {
    serde_json::from_str(e.ok(&["pool", "status", "--json", "tank"]).trim()).expect("status --json")
}

#[test]
fn log_mirror_in_status_and_fsynced_files_survive_a_sigkill() {
    let Some(e) = Env::real("slogkill") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &e.path("a.img"), "log", "mirror", &e.path("l1.img"), &e.path("l2.img"), "--size", "256M"]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("\n\tlogs") || st.lines().any(|l| l.trim() == "logs"), "a logs section: {st}");
    assert!(st.contains("mirror-1") && st.contains("l1.img") && st.contains("l2.img"), "{st}");
    let j = status_json(&e);
    let j = if j.is_array() { j[0].clone() } else { j };
    assert_eq!(j["logs"][0]["class"], "log", "{j}");
    assert_eq!(j["logs"][0]["kind"], "mirror", "{j}");
    assert!(j["vdevs"].as_array().unwrap().iter().all(|v| v["class"] == "normal"), "{j}");
    std::fs::File::create(format!("{mnt}/warm")).unwrap().sync_all().unwrap();
    for i in 0..20u64 {
        let mut f = std::fs::File::create(format!("{mnt}/f{i}")).unwrap();
        f.write_all(&content(8_000 + i as usize * 1_000, i)).unwrap();
        f.sync_all().unwrap();
    }
    let j = status_json(&e);
    let j = if j.is_array() { j[0].clone() } else { j };
    assert!(j["logs"][0]["allocated"].as_u64() > Some(0) || j["logs"][0]["children"][0]["write_errors"] == 0, "{j}");
    let pid = e.pid().expect("pid");
    // SAFETY: killing our test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    e.wait_killed(pid);
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE") && status.contains("logs"), "{status}");
    common::wait_for("the mount to come back", || std::path::Path::new(&format!("{mnt}/f19")).exists());
    for i in 0..20u64 {
        let got = std::fs::read(format!("{mnt}/f{i}")).unwrap_or_default();
        assert!(got == content(8_000 + i as usize * 1_000, i), "f{i}: {} bytes", got.len());
    }
    // The log mirror can be removed; fsync goes on without it.
    e.ok(&["pool", "remove", "tank", "mirror-1"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(!st.contains("logs") && !st.contains("l1.img"), "{st}");
    std::fs::write(format!("{mnt}/after"), b"after").unwrap();
    std::fs::File::open(format!("{mnt}/after")).unwrap().sync_all().unwrap();
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(!v.contains("ERROR"), "{v}");
}

/// The log device vanishes under an fsync load (`tarn inject -e nxio`):
/// no fsync fails, the pool is not suspended, `status` shows the log
/// device's fault in the logs section, and every file is whole.
#[test]
fn a_vanishing_log_device_costs_no_error() {
    let Some(e) = Env::real("slogfail") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &e.path("a.img"), "log", &e.path("l.img"), "--size", "256M"]);
    let mut written = Vec::new();
    for i in 0..30u64 {
        if i == 10 {
            e.ok(&["inject", "-d", &e.path("l.img"), "-e", "nxio", "tank"]);
        }
        let path = format!("{mnt}/f{i}");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&content(6_000, i)).unwrap();
        f.sync_all().unwrap_or_else(|err| panic!("fsync of f{i} failed: {err}"));
        written.push(path);
    }
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(!st.contains("SUSPENDED"), "{st}");
    let log_rows: Vec<&str> = st.lines().skip_while(|l| l.trim() != "logs").collect();
    assert!(log_rows.iter().any(|l| l.contains("l.img") && (l.contains("REMOVED") || l.contains("FAULTED") || l.contains("UNAVAIL"))), "{st}");
    for (i, p) in written.iter().enumerate() {
        assert!(std::fs::read(p).unwrap() == content(6_000, i as u64), "f{i}");
    }
    e.ok(&["inject", "-c", "all"]);
}

#[test]
fn log_devices_refuse_bad_input() {
    let mut e = Env::plain("slogbad");
    // Relative device names are the test directory's.
    e.cwd = Some(e.dir.clone());
    for (args, want) in [
        (&["a.img", "log"][..], "'log' is given no devices"),
        (&["a.img", "log", "cache", "c.img"][..], "'log' is given no devices"),
        (&["a.img", "log", "raidz", "x.img", "y.img", "z.img"][..], "a log vdev is a device or a mirror"),
        (&["a.img", "log", "raidz2", "x.img", "y.img", "z.img"][..], "a log vdev is a device or a mirror"),
        (&["a.img", "log", "a.img"][..], "given twice"),
        (&["a.img", "log", "mirror", "x.img"][..], "a mirror needs at least 2 devices"),
    ] {
        let mut cmd = vec!["pool", "create", "-m", "none", "--size", "128M", "p"];
        cmd.extend_from_slice(args);
        let err = e.fails(&cmd);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(e.fails(&["pool", "status", "p"]).contains("'p'"), "no pool was made");
    e.ok(&["pool", "create", "-m", "none", "--size", "128M", "tank", "a.img", "log", "l1.img"]);
    e.ok(&["pool", "create", "-m", "none", "--size", "128M", "other", "o.img"]);
    // Adding: vetted like any new device.
    for (args, want) in [
        (&["log"][..], "'log' is given no devices"),
        (&["log", "o.img"][..], "part of active pool 'other'"),
        (&["log", "a.img"][..], "part of active pool 'tank'"),
        (&["log", "l1.img"][..], "part of active pool 'tank'"),
        (&["log", "raidz1", "x.img", "y.img"][..], "a log vdev is a device or a mirror"),
    ] {
        let mut cmd = vec!["pool", "add", "tank"];
        cmd.extend_from_slice(args);
        let err = e.fails(&cmd);
        assert!(err.contains(want), "add {args:?}: {err}");
    }
    // Another pool may not take tank's log device.
    std::fs::File::create(e.path("t.img")).unwrap().set_len(128 << 20).unwrap();
    let err = e.fails(&["pool", "create", "-f", "-m", "none", "third", "t.img", "log", "l1.img"]);
    assert!(err.contains("l1.img") && err.contains("part of active pool 'tank'"), "{err}");
    if std::process::Command::new("mkfs.ext4").arg("-V").output().is_ok_and(|o| o.status.success()) {
        std::fs::File::create(e.path("fs.img")).unwrap().set_len(128 << 20).unwrap();
        let o = std::process::Command::new("mkfs.ext4").args(["-q", "-F", &e.path("fs.img")]).output().unwrap();
        assert!(o.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&o.stderr));
        let err = e.fails(&["pool", "add", "tank", "log", "fs.img"]);
        assert!(err.contains("fs.img") && err.contains("an ext4 file system") && err.contains("-f"), "{err}");
    } else {
        eprintln!("{}: skipping the ext4 case: mkfs.ext4 is not installed", module_path!());
    }
    // Removing a data device through `remove`: refused, saying what it is.
    let err = e.fails(&["pool", "remove", "tank", "a.img"]);
    assert!(err.contains("a.img") && err.contains("data device"), "{err}");
    // An import with the log device missing: refused, naming it and the flag.
    e.ok(&["pool", "export", "tank"]);
    // Out of the directory import searches (a file found under another
    // name there is the device: import would find it).
    std::fs::create_dir(e.path("away")).unwrap();
    std::fs::rename(e.path("l1.img"), e.path("away/l1.img")).unwrap();
    let dir = e.dir.display().to_string();
    let err = e.fails(&["pool", "import", "-d", &dir, "tank"]);
    assert!(err.contains("l1.img") && err.contains("--missing-log"), "{err}");
    std::fs::rename(e.path("away/l1.img"), e.path("l1.img")).unwrap();
    // --missing-log with nothing missing: an ordinary import.
    e.ok(&["pool", "import", "-d", &dir, "--missing-log", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("logs") && st.contains("l1.img") && !st.contains("discarded"), "{st}");
    // And with it missing: imports, UNAVAIL, said.
    e.ok(&["pool", "export", "tank"]);
    std::fs::remove_file(e.path("l1.img")).unwrap();
    let o = e.run(&["pool", "import", "-d", &dir, "--missing-log", "tank"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("UNAVAIL") && st.contains("l1.img"), "{st}");
    e.ok(&["pool", "remove", "tank", &e.path("l1.img")]);
    assert!(!e.ok(&["pool", "status", "tank"]).contains("logs"));
}

/// A log vdev before a data vdev and another log vdev can be removed
/// (issue 13): a hole keeps the ids after it, and no output shows it —
/// not `status` (text or JSON), `list`, `iostat -v` — nor does import look
/// for devices there. Removing the hole's name or the removed device
/// again is an error saying it is no device of the pool; a log device
/// added after goes on.
#[test]
fn removing_a_log_vdev_before_others_leaves_no_trace() {
    let mut e = Env::plain("slogcut");
    e.cwd = Some(e.dir.clone());
    e.ok(&["pool", "create", "-m", "none", "--size", "128M", "tank", "a.img", "log", "l1.img"]);
    for f in ["b.img", "l2.img", "l3.img"] {
        std::fs::File::create(e.path(f)).unwrap().set_len(128 << 20).unwrap();
    }
    e.ok(&["pool", "add", "-f", "tank", "b.img"]);
    e.ok(&["pool", "add", "tank", "log", "l2.img"]);
    e.ok(&["pool", "remove", "tank", "l1.img"]);
    let shows_no_hole = |e: &Env, what: &str| {
        for args in [&["pool", "status", "tank"][..], &["pool", "status", "--json", "tank"], &["pool", "iostat", "-v", "tank"], &["pool", "iostat", "-v", "--json", "tank"], &["pool", "list", "tank"]] {
            let out = e.ok(args);
            assert!(!out.contains("l1.img") && !out.contains("hole"), "{what}: {args:?}: {out}");
            if args[1] != "list" {
                assert!(out.contains("b.img") && out.contains("l2.img"), "{what}: {args:?}: {out}");
            }
        }
    };
    shows_no_hole(&e, "after the removal");
    for gone in ["l1.img", "hole-1", "hole"] {
        let err = e.fails(&["pool", "remove", "tank", gone]);
        assert!(err.contains(gone) && err.contains("not a device of the pool"), "{gone}: {err}");
    }
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(!v.contains("ERROR"), "{v}");
    e.ok(&["pool", "export", "tank"]);
    // l1.img has no label now: import passes it by.
    let dir = e.dir.display().to_string();
    e.ok(&["pool", "import", "-d", &dir, "tank"]);
    shows_no_hole(&e, "after export and import");
    e.ok(&["pool", "add", "tank", "log", "l3.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("l3.img") && st.contains("l2.img") && !st.contains("l1.img"), "{st}");
    let v = e.ok(&["inspect", "tank", "--verify"]);
    assert!(!v.contains("ERROR"), "{v}");
}

/// `pool iostat -v` as zpool's (issue 13): the data devices under the
/// pool — a data vdev added after the log vdev among them — then a `logs`
/// heading and the log device, then a `cache` heading and the cache
/// device; the log device's row counts the writes fsync made; `--json`
/// gives each device its `class` in the same order, and the pool's counts
/// sum its data and log devices, not its cache device.
#[test]
fn iostat_lists_log_and_cache_devices_under_their_headings() {
    let Some(e) = Env::private("slogiostat", false) else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &e.path("a.img"), "log", &e.path("l.img"), "cache", &e.path("c.img"), "--size", "256M"]);
    std::fs::File::create(e.path("b.img")).unwrap().set_len(256 << 20).unwrap();
    e.ok(&["pool", "add", "-f", "tank", &e.path("b.img")]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=3600"]);
    for i in 0..10u64 {
        let mut f = std::fs::File::create(e.at(&format!("{mnt}/f{i}"))).unwrap();
        f.write_all(&content(4_000, i)).unwrap();
        f.sync_all().unwrap();
    }
    let table = e.ok(&["pool", "iostat", "-v", "tank"]);
    let lines: Vec<&str> = table.lines().collect();
    let at = |what: &str| lines.iter().position(|l| l.split_whitespace().next().is_some_and(|n| n == what || n.ends_with(&format!("/{what}")))).unwrap_or_else(|| panic!("no {what} row: {table}"));
    let (pool, a, b, logs, l, cache, c) = (at("tank"), at("a.img"), at("b.img"), at("logs"), at("l.img"), at("cache"), at("c.img"));
    assert!(pool < a && a < b && b < logs && logs < l && l < cache && cache < c, "rows out of their sections: {table}");
    for heading in [logs, cache] {
        assert!(lines[heading].split_whitespace().skip(1).all(|x| x == "-"), "a heading carries no numbers: {table}");
    }
    let wops = |row: usize| lines[row].split_whitespace().nth(4).and_then(|x| x.parse::<u64>().ok()).unwrap_or_else(|| panic!("w-ops of {}: {table}", lines[row]));
    assert!(wops(l) >= 10, "the log device took the fsyncs' writes: {table}");
    assert!(wops(c) >= 1, "the cache device's header was written: {table}");
    let j: serde_json::Value = serde_json::from_str(e.ok(&["pool", "iostat", "--json", "tank"]).trim()).expect("iostat --json");
    let p = &j["pools"][0];
    let vdevs = p["vdevs"].as_array().expect("vdevs");
    let classes: Vec<(&str, &str)> = vdevs.iter().map(|v| (v["path"].as_str().unwrap(), v["class"].as_str().unwrap())).collect();
    let names: Vec<(String, &str)> = classes.iter().map(|(p, c)| (p.rsplit('/').next().unwrap().to_string(), *c)).collect();
    assert_eq!(names, vec![("a.img".into(), "normal"), ("b.img".into(), "normal"), ("l.img".into(), "log"), ("c.img".into(), "cache")], "{j}");
    let w = |v: &serde_json::Value| v["write_ops"].as_u64().unwrap();
    assert!(w(&vdevs[2]) >= 10, "{j}");
    assert_eq!(w(p), w(&vdevs[0]) + w(&vdevs[1]) + w(&vdevs[2]), "the pool sums data and log devices: {j}");
}
