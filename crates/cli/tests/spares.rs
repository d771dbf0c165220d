//! Hot spares from the command line (issue 12): `pool create … spare`,
//! `pool add … spare`, `pool remove`, the "spares" section of `pool
//! status` (and `--json`), automatic activation when a mirror device
//! vanishes, `detach` of a spare in use, and spares kept across export,
//! import and a daemon killed and restarted.
//!
//! Invariants checked:
//! - spares are vetted as any new device: a device of an imported pool
//!   (one of its spares too) is refused even with -f; a spare of an
//!   exported pool and a file-system signature are refused without -f,
//!   naming what was found; `spare` and `cache` are keywords that need
//!   devices after them; each refusal is one line, exit 1, nothing changed;
//! - a vanished mirror device gets an AVAIL spare at once: `status` shows
//!   `spare-1` with the device and the spare, the spare "INUSE  currently
//!   in use"; the resilver completes, a scrub reading from the spare alone
//!   finds nothing wrong and every file reads back;
//! - `detach` of the spare makes it AVAIL again; `remove` takes an AVAIL
//!   spare and refuses one in use, or a data device, naming it;
//! - a device missing when the daemon restarts gets a spare, and spares
//!   keep their state across a SIGKILL of the daemon and export/import.

mod common;

use std::path::PathBuf;

use common::mounted::{have_tar, make_tree};
use common::{wait_for, Env};

fn env(name: &str) -> Env {
    let mut e = Env::plain(&format!("spares-{}", name));
    e.cwd = Some(e.dir.clone());
    e
}

fn sparse(e: &Env, f: &str, bytes: u64) -> String {
    let p = e.path(f);
    std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
    p
}

fn status_json(e: &Env) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&e.ok(&["pool", "status", "--json", "tank"])).expect("status --json");
    v[0].clone()
}

/// The spares of `status --json` as "path STATE" (paths relative to the
/// test's directory).
fn spares(e: &Env) -> Vec<String> {
    let st = status_json(e);
    let dir = format!("{}/", e.dir.display());
    st["spares"].as_array().expect("spares in --json").iter().map(|s| format!("{} {}", s["path"].as_str().unwrap().trim_start_matches(&dir), s["state"].as_str().unwrap())).collect()
}

/// The config tree of `status` (the table's NAME and STATE columns, paths
/// relative to the test's directory).
fn tree(e: &Env) -> Vec<String> {
    let st = e.ok(&["pool", "status", "tank"]);
    let dir = format!("{}/", e.dir.display());
    st.lines()
        .skip_while(|l| !l.starts_with("NAME"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("errors"))
        .filter(|l| !l.contains(':'))
        .map(|l| {
            let name_end = l.find(|c: char| c != ' ').unwrap_or(0);
            let mut w = l[name_end..].split_whitespace();
            let name = w.next().unwrap_or("").trim_start_matches(&dir).to_string();
            format!("{}{} {}", " ".repeat(name_end), name, w.next().unwrap_or("")).trim_end().to_string()
        })
        .collect()
}

#[test]
fn spares_are_vetted_listed_and_removed() {
    let e = env("vet");
    for f in ["a.img", "b.img", "s1.img", "s2.img", "c.img", "o1.img", "o2.img", "os.img"] {
        sparse(&e, f, 256 << 20);
    }
    sparse(&e, "small.img", 64 << 20);
    // Keywords with no devices after them.
    for (args, want) in [
        (&["a.img", "spare"][..], "'spare' is given no devices"),
        (&["a.img", "cache"][..], "'cache' is given no devices"),
        (&["a.img", "spare", "cache", "c.img"][..], "'spare' is given no devices"),
        (&["mirror", "a.img", "b.img", "spare", "s1.img", "s1.img"][..], "given twice"),
        (&["mirror", "a.img", "b.img", "spare", "a.img"][..], "given twice"),
        (&["spare", "s1.img"][..], "a pool needs at least one device"),
    ] {
        let mut cmd = vec!["pool", "create", "-m", "none", "p"];
        cmd.extend_from_slice(args);
        let err = e.fails(&cmd);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(e.fails(&["pool", "status", "p"]).contains("'p'"), "no pool was made");
    e.ok(&["pool", "create", "-m", "none", "tank", "mirror", "a.img", "b.img", "spare", "s1.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("spares\n") && st.contains(&e.path("s1.img")), "{st}");
    assert_eq!(spares(&e), ["s1.img AVAIL"]);
    // Adding: vetted like any new device, nothing changed by a refusal.
    let before = (tree(&e), spares(&e));
    for (args, want) in [
        (&["spare"][..], "'spare' is given no devices"),
        (&["spare", "a.img"][..], "part of active pool 'tank'"),
        (&["spare", "s1.img"][..], "a hot spare of active pool 'tank'"),
        (&["-f", "spare", "s1.img"][..], "a hot spare of active pool 'tank'"),
        (&["spare", "small.img"][..], "small.img' is too small"),
        (&["spare", "s2.img", "s2.img"][..], "given twice"),
    ] {
        let mut cmd = vec!["pool", "add", "tank"];
        cmd.extend_from_slice(args);
        let err = e.fails(&cmd);
        assert!(err.contains(want), "add {args:?}: {err}");
        assert_eq!((tree(&e), spares(&e)), before, "add {args:?} changed nothing");
    }
    // Another pool may not take tank's spare, even with -f.
    let err = e.fails(&["pool", "create", "-f", "-m", "none", "other", "mirror", "o1.img", "o2.img", "spare", "s1.img"]);
    assert!(err.contains("s1.img") && err.contains("a hot spare of active pool 'tank'"), "{err}");
    // A file system signature is named, and -f takes it.
    if std::process::Command::new("mkfs.ext4").arg("-V").output().is_ok_and(|o| o.status.success()) {
        let o = std::process::Command::new("mkfs.ext4").args(["-q", "-F", &e.path("s2.img")]).output().unwrap();
        assert!(o.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&o.stderr));
        let err = e.fails(&["pool", "add", "tank", "spare", "s2.img"]);
        assert!(err.contains("s2.img") && err.contains("an ext4 file system") && err.contains("-f"), "{err}");
        assert_eq!(spares(&e), ["s1.img AVAIL"]);
        e.ok(&["pool", "add", "-f", "tank", "spare", "s2.img"]);
    } else {
        eprintln!("{}: skipping the ext4 case: mkfs.ext4 is not installed", module_path!());
        e.ok(&["pool", "add", "tank", "spare", "s2.img"]);
    }
    assert_eq!(spares(&e), ["s1.img AVAIL", "s2.img AVAIL"]);
    // Remove: AVAIL spares only.
    let err = e.fails(&["pool", "remove", "tank", "a.img"]);
    assert!(err.contains("a.img") && err.contains("a data device (of mirror-0)"), "{err}");
    let err = e.fails(&["pool", "remove", "tank", "nosuch.img"]);
    assert!(err.contains("nosuch.img") && err.contains("not a device of the pool"), "{err}");
    e.ok(&["pool", "remove", "tank", "s2.img"]);
    assert_eq!(spares(&e), ["s1.img AVAIL"]);
    // Free again: a new pool takes s2.img without -f.
    e.ok(&["pool", "create", "-m", "none", "other", "mirror", "o1.img", "o2.img", "spare", "s2.img", "os.img"]);
    e.ok(&["pool", "destroy", "other"]);
    // A destroyed pool's spares are free as well.
    e.ok(&["pool", "create", "-m", "none", "other", "s2.img", "spare", "os.img"]);
    e.ok(&["pool", "export", "other"]);
    // An exported pool's spare: refused without -f, naming the pool.
    let err = e.fails(&["pool", "add", "tank", "spare", "os.img"]);
    assert!(err.contains("os.img") && err.contains("a hot spare of pool 'other' (not imported here); use -f"), "{err}");
    // Export and import keep the spares; import finds them in the directory.
    e.ok(&["pool", "export", "tank"]);
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "tank"]);
    assert_eq!(spares(&e), ["s1.img AVAIL"]);
}

/// A mirror device that vanishes (`tarn inject … -e nxio`) gets the spare;
/// the spare is resilvered and holds every file; detached, it is AVAIL.
#[test]
fn a_vanished_mirror_device_gets_a_spare() {
    let Some(mut e) = Env::private("spares-auto", false) else { return };
    e.cwd = Some(e.dir.clone());
    if !have_tar("a_vanished_mirror_device_gets_a_spare") {
        return;
    }
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "tank", "mirror", "a.img", "b.img", "spare", "s1.img", "--size", "256M"]);
    wait_for("the pool's root to be mounted", || e.is_mounted(&mnt));
    let src = e.dir.join("src");
    let files = make_tree(&src, 300, 5);
    e.sh(&format!("tar -C {} -cf {} . && tar -C {} -xf {}", src.display(), e.path("tree.tar"), mnt, e.path("tree.tar")));
    e.ok(&["pool", "sync", "tank"]);
    e.ok(&["inject", "-d", "b.img", "-e", "nxio", "tank"]);
    // The next write meets the vanished device.
    std::fs::write(e.at(&format!("{}/after", mnt)), b"written after b vanished").unwrap();
    e.ok(&["pool", "sync", "tank"]);
    wait_for("the spare to stand in", || spares(&e) == ["s1.img INUSE"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    wait_for("the spare to be resilvered", || status_json(&e)["vdevs"][0]["children"][1]["children"][1]["missed_txgs"].is_null());
    assert_eq!(tree(&e), ["tank DEGRADED", "  mirror-0 DEGRADED", "    a.img ONLINE", "    spare-1 DEGRADED", "      b.img REMOVED", "      s1.img ONLINE", "spares", "  s1.img INUSE"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.lines().any(|l| l.contains("s1.img") && l.contains(" INUSE ") && l.contains("currently in use (for ")), "{st}");
    assert!(st.contains("scan: resilvered") && st.contains("with 0 errors"), "{st}");
    let events = e.ok(&["pool", "events", "tank"]);
    assert!(events.contains("sysevent.fs.zfs.vdev_spare"), "{events}");
    // The spare alone serves every block: a scrub with a offline.
    e.ok(&["pool", "offline", "-t", "tank", "a.img"]);
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("scan: scrub repaired 0B") && st.contains("with 0 errors"), "{st}");
    for rel in &files {
        let got = std::fs::read(e.at(&format!("{}/{}", mnt, rel))).unwrap();
        assert!(got == std::fs::read(src.join(rel)).unwrap(), "{rel} reads back wrong bytes");
    }
    e.ok(&["pool", "online", "tank", "a.img"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    // Remove refuses the spare in use.
    let err = e.fails(&["pool", "remove", "tank", "s1.img"]);
    assert!(err.contains("hot spare") && err.contains("is in use, standing in for") && err.contains("detach it first"), "{err}");
    // Export and import keep it in use; b, whole again, is resilvered.
    e.ok(&["inject", "-c", "all"]);
    e.ok(&["pool", "export", "tank"]);
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "tank"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    assert_eq!(spares(&e), ["s1.img INUSE"]);
    wait_for("b to be resilvered", || tree(&e).contains(&"      b.img ONLINE".to_string()));
    // Detached, the spare is AVAIL again.
    e.ok(&["pool", "detach", "tank", "s1.img"]);
    assert_eq!(spares(&e), ["s1.img AVAIL"]);
    assert_eq!(tree(&e), ["tank ONLINE", "  mirror-0 ONLINE", "    a.img ONLINE", "    b.img ONLINE", "spares", "  s1.img AVAIL"]);
}

/// A device missing when the daemon starts gets a spare there; a SIGKILL
/// of the daemon and an export/import keep the spares as they are.
#[test]
fn spares_survive_restarts_and_stand_in_for_a_missing_device() {
    let e = env("restart");
    for f in ["a.img", "b.img", "s1.img", "s2.img"] {
        sparse(&e, f, 256 << 20);
    }
    e.ok(&["pool", "create", "-m", "none", "tank", "mirror", "a.img", "b.img", "spare", "s1.img", "s2.img"]);
    for i in 0..5 {
        e.ok(&["create", &format!("tank/fs{i}")]);
        e.ok(&["snapshot", &format!("tank/fs{i}@s")]);
    }
    e.ok(&["daemon", "stop"]);
    std::fs::remove_file(e.path("b.img")).unwrap();
    // The next command starts the daemon, which imports the pool without b.
    wait_for("a spare to stand in for the missing device", || spares(&e) == ["s1.img INUSE", "s2.img AVAIL"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    let want = ["tank DEGRADED", "  mirror-0 DEGRADED", "    a.img ONLINE", "    spare-1 DEGRADED", "      b.img UNAVAIL", "      s1.img ONLINE", "spares", "  s1.img INUSE", "  s2.img AVAIL"];
    wait_for("the resilver to end", || tree(&e) == want);
    // Killed and restarted: the same.
    let pid = e.pid().expect("daemon pid");
    // SAFETY: kill(2) on the test's own daemon, by its pid.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    e.wait_killed(pid);
    assert_eq!(tree(&e), want, "after a SIGKILL and restart");
    let list = e.ok(&["list", "-H", "-o", "name", "-r", "tank"]);
    assert!((0..5).all(|i| list.contains(&format!("tank/fs{i}"))), "{list}");
    // The spare holds everything: a scrub with a offline finds nothing.
    e.ok(&["pool", "offline", "-t", "tank", "a.img"]);
    e.ok(&["pool", "scrub", "-w", "tank"]);
    assert!(e.ok(&["pool", "status", "tank"]).contains("with 0 errors"));
    e.ok(&["pool", "online", "tank", "a.img"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    // Detach the missing device: s1 takes its place for good.
    e.ok(&["pool", "detach", "tank", &e.path("b.img")]);
    let want = ["tank ONLINE", "  mirror-0 ONLINE", "    a.img ONLINE", "    s1.img ONLINE", "spares", "  s2.img AVAIL"];
    assert_eq!(tree(&e), want);
    // Export and import from the directory: the same.
    e.ok(&["pool", "export", "tank"]);
    let dir: PathBuf = e.dir.clone();
    e.ok(&["pool", "import", "-d", &dir.display().to_string(), "tank"]);
    assert_eq!(tree(&e), want);
}
