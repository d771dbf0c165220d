//! Where datasets are mounted and how they leave (issue 11, item 11): the
//! host's system directories are refused before any mount call, with
//! nothing changed; `overlay` governs non-empty directories; an unmount
//! removes exactly tarn's mount, once; a pool's root is mounted again after
//! its `mountpoint` changes; a killed daemon's dead mounts are all cleared
//! by the next; unmounts go deepest first.
//!
//! Every daemon here runs in a private mount namespace of its test
//! (`Env::private`): the tmpfs mounts the tests make, and any mount a
//! broken refusal let through, never reach the host. The datasets are the
//! `TARN_TEST_MEMFS` hook's (the mount machinery is real). Each test skips
//! with a message where FUSE or a private namespace is unavailable.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use common::Env;

/// The FUSE mounts in the test's namespace that are the test's (in its
/// directory, or on /mnt), as (source, directory). (The namespace starts
/// as a copy of the host's, with whatever others have mounted there.)
fn fuse_mounts(e: &Env) -> Vec<(String, String)> {
    fuse_mount_ids(e).into_iter().map(|(name, dir, _)| (name, dir)).collect()
}

/// The same with each mount's id: a mount made again has another.
fn fuse_mount_ids(e: &Env) -> Vec<(String, String, u64)> {
    let mine = |p: &Path| p.starts_with(&e.dir) || p == Path::new("/mnt");
    e.mounts().into_iter().filter(|m| m.is_fuse() && mine(&m.mount_point)).map(|m| (m.fs_name(), m.mount_point.display().to_string(), m.id)).collect()
}

/// `value\tsource` of a dataset property.
fn prop(e: &Env, p: &str, ds: &str) -> String {
    e.ok(&["get", "-H", "-o", "value,source", p, ds])
}

/// What a refused command must leave as it was.
#[derive(Debug, PartialEq)]
struct Seen {
    mounts: Vec<(String, String, u64)>,
    datasets: String,
    props: String,
    pools: String,
}

fn seen(e: &Env) -> Seen {
    Seen {
        mounts: fuse_mount_ids(e),
        datasets: e.ok(&["list", "-H", "-o", "name", "-t", "all"]),
        props: e.ok(&["get", "-H", "-o", "name,value,source", "mountpoint,canmount", "tank", "tank/own", "tank/quiet"]),
        pools: e.ok(&["pool", "list", "-H", "-o", "name"]),
    }
}

#[test]
fn bad_mount_points_are_refused_before_anything_changes() {
    // Pins: `mountpoint=/` and `-o mountpoint=/etc` were accepted and
    // mounted over the host's root or /etc; every command that takes a
    // mount point answers bad ones with one line naming the path and the
    // reason, exit 1, and nothing mounted, created or set.
    let Some(e) = Env::private("mp-bad", true) else { return };
    let mnt = e.create("tank");
    let own = e.path("own");
    e.ok(&["create", "-o", &format!("mountpoint={}", own), "tank/own"]);
    e.ok(&["create", "-o", "canmount=noauto", "tank/quiet"]);
    e.ok(&["snapshot", "tank/own@s"]);
    // An exported pool to import.
    let imp = e.path("imp.img");
    e.ok(&["pool", "create", "-m", "none", "imp", &imp, "--size", "128M"]);
    e.ok(&["pool", "export", "imp"]);
    // Bad places.
    std::fs::write(e.path("file"), b"not a directory").unwrap();
    std::os::unix::fs::symlink("/etc", e.path("etc-link")).unwrap();
    std::fs::create_dir_all(e.path("full")).unwrap();
    std::fs::write(e.path("full/something"), b"x").unwrap();
    let long = format!("{}/{}", e.dir.display(), "deep/".repeat(900));
    let newline = format!("{}/new\nline", e.dir.display());
    let dotdot = format!("{}/../../etc", e.dir.display());
    assert!(dotdot.starts_with("/tmp/"), "the temp dir is two levels below /: {}", dotdot);
    let sock_dir = e.dir.display().to_string();
    // (place, what the error says about it)
    let cases: Vec<(String, &str)> = vec![
        ("/".into(), "the root of the host's file system"),
        ("/etc".into(), "'/etc', a system directory of the host"),
        ("/usr/".into(), "'/usr', a system directory of the host"),
        ("/var".into(), "a system directory of the host"),
        (dotdot.clone(), "(that is '/etc')"),
        (e.path("etc-link"), "(that is '/etc')"),
        (e.path("file"), "is not a directory"),
        (long.clone(), "bytes long"),
        (newline.clone(), "control character"),
        (sock_dir.clone(), "tarn daemon's socket"),
        ("relative/dir".into(), "not an absolute path"),
    ];
    let before = seen(&e);
    let dir_of = |p: &str| p.to_string();
    for (place, why) in &cases {
        let shown = place.replace('\n', "\\n");
        let shown = if shown.len() > 100 { shown[..100].to_string() } else { shown };
        let check = |err: String, cmd: &str| {
            assert!(err.contains(why), "{} {:?}: says why ({}): {}", cmd, place, why, err);
            assert!(err.contains(&shown), "{} {:?}: names the path: {}", cmd, place, err);
            assert_eq!(seen(&e), before, "{} {:?} changed something", cmd, place);
        };
        let mp = format!("mountpoint={}", dir_of(place));
        check(e.fails(&["create", "-o", &mp, "tank/new"]), "create -o");
        check(e.fails(&["set", &mp, "tank/own"]), "set");
        check(e.fails(&["clone", "-o", &mp, "tank/own@s", "tank/cl"]), "clone -o");
        check(e.fails(&["pool", "create", "-m", place, "p2", &e.path("p2.img"), "--size", "128M"]), "pool create -m");
        assert!(!Path::new(&e.path("p2.img")).exists(), "pool create -m {:?} left its image", place);
        check(e.fails(&["pool", "import", "-d", e.dir.to_str().unwrap(), "-m", place, "imp"]), "pool import -m");
        if place.starts_with('/') {
            // (A relative DIR is the caller's: `tarn mount` and `unmount`
            // take it from the working directory, as mount(8) does.)
            check(e.fails(&["mount", "tank/quiet", place]), "mount");
            let err = e.fails(&["unmount", place]);
            assert!(err.contains("not a mounted dataset or tarn mount point"), "unmount {:?}: {}", place, err);
            assert_eq!(seen(&e), before);
        }
    }
    // A pool named like a system directory would be mounted there by default.
    let err = e.fails(&["pool", "create", "etc", &e.path("etc.img"), "--size", "128M"]);
    assert!(err.contains("'/etc', a system directory") && err.contains("-m DIR"), "{}", err);
    assert!(!Path::new(&e.path("etc.img")).exists());
    assert_eq!(seen(&e), before);
    // `mountpoint=/` is kept for a dataset that is not mounted now
    // (root-on-ZFS layouts); mounting it is what is refused.
    e.ok(&["set", "mountpoint=/", "tank/quiet"]);
    assert_eq!(prop(&e, "mountpoint", "tank/quiet"), "/\tlocal\n");
    let err = e.fails(&["mount", "tank/quiet"]);
    assert!(err.contains("cannot mount 'tank/quiet'") && err.contains("root of the host's file system"), "{}", err);
    let err = e.fails(&["set", "canmount=on", "tank/quiet"]);
    assert!(err.contains("it would be mounted now") && err.contains("'/'"), "{}", err);
    assert_eq!(prop(&e, "canmount", "tank/quiet"), "noauto\tlocal\n");
    // A child inheriting /etc from it is refused the same way.
    e.ok(&["create", "-o", "canmount=noauto", "tank/quiet/etc"]);
    assert!(e.fails(&["mount", "tank/quiet/etc"]).contains("'/etc', a system directory"));
    e.ok(&["inherit", "mountpoint", "tank/quiet"]);
    // overlay=off refuses a directory that is not empty; on (the default)
    // mounts over it.
    e.ok(&["set", "overlay=off", "tank"]);
    let full = e.path("full");
    let before = seen(&e);
    for (args, what) in [
        (vec!["create", "-o", "mountpoint=FULL", "tank/new"], "create -o"),
        (vec!["set", "mountpoint=FULL", "tank/own"], "set"),
        (vec!["clone", "-o", "mountpoint=FULL", "tank/own@s", "tank/cl"], "clone -o"),
        (vec!["mount", "tank/quiet", "FULL"], "mount"),
        (vec!["pool", "create", "-O", "overlay=off", "-m", "FULL", "p2", "P2IMG", "--size", "128M"], "pool create -m"),
    ] {
        let p2 = e.path("p2.img");
        let args: Vec<String> = args.iter().map(|a| a.replace("FULL", &full).replace("P2IMG", &p2)).collect();
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let err = e.fails(&args);
        assert!(err.contains("directory is not empty") && err.contains("overlay=off") && err.contains(&full), "{}: {}", what, err);
        assert_eq!(seen(&e), before, "{} changed something", what);
    }
    // Remounting where it is mounted judges what it covers, not its own files.
    std::fs::write(e.at(&format!("{}/f", own)), b"own").unwrap();
    e.ok(&["set", "canmount=on", "tank/own"]);
    assert!(e.is_mounted(&own));
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "imp"]);
    e.ok(&["set", "overlay=off", "imp"]);
    e.ok(&["pool", "export", "imp"]);
    // (`set canmount` above made tank/own's mount again.)
    let before = seen(&e);
    let err = e.fails(&["pool", "import", "-d", e.dir.to_str().unwrap(), "-m", &full, "imp"]);
    assert!(err.contains("directory is not empty") && err.contains(&full), "import -m judges by the pool's own overlay: {}", err);
    assert_eq!(seen(&e), before);
    e.ok(&["set", "overlay=on", "tank/quiet"]);
    e.ok(&["mount", "tank/quiet", &full]);
    assert!(e.is_mounted(&full), "overlay=on mounts over a directory that is not empty");
    e.ok(&["unmount", &full]);
    assert_eq!(std::fs::read(e.path("full/something")).unwrap(), b"x", "and hid it only while mounted");
    // A nonexistent parent is created, as zfs creates mount points; a
    // directory inside another tarn mount is a nested mount, as on OpenZFS.
    let deep = e.path("a/b/c");
    e.ok(&["create", "-o", &format!("mountpoint={}", deep), "tank/deep"]);
    assert!(e.is_mounted(&deep));
    let inner = format!("{}/inner", mnt);
    e.ok(&["create", "-o", &format!("mountpoint={}", inner), "tank/inner"]);
    assert!(e.is_mounted(&inner));
    // A relative DIR for `tarn mount` is the caller's working directory's.
    let o = e.cmd_in(&e.dir).args(["mount", "tank/quiet", "rel"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(e.is_mounted(&e.path("rel")));
}

#[test]
fn a_nul_byte_in_a_mount_point_is_refused() {
    // The command line cannot carry a NUL; the socket can.
    let Some(e) = Env::private("mp-nul", true) else { return };
    e.create("tank");
    e.ok(&["create", "-o", "canmount=noauto", "tank/quiet"]);
    let before = fuse_mounts(&e);
    let mut s = UnixStream::connect(e.dir.join("tarn.sock")).unwrap();
    let dir = format!("{}/a\u{0}b", e.dir.display());
    let req = serde_json::json!({"tunables": [], "cmd": {"Mount": {"dataset": "tank/quiet", "dir": dir}}});
    writeln!(s, "{}", req).unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    let resp: serde_json::Value = serde_json::from_str(&line).unwrap();
    let err = resp["error"].as_str().unwrap_or_default();
    assert!(err.contains("NUL") && err.contains("tank/quiet"), "{}", line);
    assert_eq!(fuse_mounts(&e), before);
}

#[test]
fn unmount_of_a_dataset_over_a_tmpfs_leaves_the_tmpfs() {
    // Pins: `tarn unmount` of a dataset mounted over another file system
    // unmounted that file system too (umount2 called twice).
    let Some(e) = Env::private("mp-tmpfs", true) else { return };
    let dir = e.path("over");
    std::fs::create_dir_all(&dir).unwrap();
    e.sh(&format!("mount -t tmpfs tmpfs {0} && echo underneath > {0}/f", dir));
    e.ok(&["pool", "create", "-m", &dir, "tank", &e.path("tank.img"), "--size", "128M"]);
    assert_eq!(e.mounted_types(&dir), ["tmpfs", "fuse"]);
    e.ok(&["unmount", "tank"]);
    // The session ends a moment after the unmount.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(e.mounted_types(&dir), ["tmpfs"], "the tmpfs below is still mounted");
    assert_eq!(std::fs::read(e.at(&format!("{}/f", dir))).unwrap(), b"underneath\n");
    // And a file system someone mounted over tarn's is not tarn's to unmount.
    e.ok(&["mount", "tank"]);
    e.sh(&format!("mount -t tmpfs tmpfs {}", dir));
    assert_eq!(e.mounted_types(&dir), ["tmpfs", "fuse", "tmpfs"]);
    let err = e.fails(&["unmount", "tank"]);
    assert!(err.contains("not tarn's") && err.contains(&dir), "{}", err);
    assert_eq!(e.mounted_types(&dir), ["tmpfs", "fuse", "tmpfs"], "nothing was unmounted");
    e.sh(&format!("umount {}", dir));
    e.ok(&["pool", "export", "tank"]);
    assert_eq!(e.mounted_types(&dir), ["tmpfs"]);
}

#[test]
fn mountpoint_and_canmount_changes_mount_the_root_again() {
    // Pins: `set mountpoint` or `inherit mountpoint` on a pool's root
    // dataset unmounted it and never mounted it again (exit 0). The pool
    // is named "mnt" so that its default mountpoint, /mnt, exists on the
    // host; a tmpfs over it in the test's namespace takes the mount.
    let Some(e) = Env::private("mp-root", true) else { return };
    e.sh("mount -t tmpfs tmpfs /mnt");
    let first = e.path("first");
    e.ok(&["pool", "create", "-m", &first, "mnt", &e.path("mnt.img"), "--size", "128M"]);
    assert!(e.is_mounted(&first));
    std::fs::write(e.at(&format!("{}/f", first)), b"root data").unwrap();
    let second = e.path("second");
    e.ok(&["set", &format!("mountpoint={}", second), "mnt"]);
    assert!(!e.is_mounted(&first) && e.is_mounted(&second), "{:?}", fuse_mounts(&e));
    assert_eq!(std::fs::read(e.at(&format!("{}/f", second))).unwrap(), b"root data");
    e.ok(&["inherit", "mountpoint", "mnt"]);
    assert_eq!(e.mounted_types("/mnt"), ["tmpfs", "fuse"], "inherited: the default /POOL");
    assert!(!e.is_mounted(&second));
    e.ok(&["set", "canmount=off", "mnt"]);
    assert!(!e.is_mounted("/mnt") || e.mounted_types("/mnt") == ["tmpfs"]);
    assert_eq!(e.mounted_types("/mnt"), ["tmpfs"]);
    e.ok(&["set", "canmount=on", "mnt"]);
    assert_eq!(e.mounted_types("/mnt"), ["tmpfs", "fuse"]);
    e.ok(&["set", &format!("mountpoint={}", first), "mnt"]);
    assert!(e.is_mounted(&first));
    // The cache entry followed: the next daemon mounts it there too.
    e.ok(&["daemon", "stop"]);
    assert!(!e.is_mounted(&first));
    e.ok(&["pool", "list"]);
    assert!(e.is_mounted(&first));
    std::fs::write(e.at(&format!("{}/f", first)), b"root data").unwrap();
    // A dataset mounted on demand (canmount=noauto) moves with its
    // mountpoint, as zfs remounts what was mounted.
    let a = e.path("noauto-a");
    let b = e.path("noauto-b");
    e.ok(&["create", "-o", "canmount=noauto", "-o", &format!("mountpoint={}", a), "mnt/n"]);
    assert!(!e.is_mounted(&a));
    e.ok(&["mount", "mnt/n"]);
    assert!(e.is_mounted(&a));
    e.ok(&["set", &format!("mountpoint={}", b), "mnt/n"]);
    assert!(!e.is_mounted(&a) && e.is_mounted(&b), "{:?}", fuse_mounts(&e));
    // A snapshot mounted on a directory of its own stays there.
    e.ok(&["snapshot", "mnt/n@s"]);
    let snapdir = e.path("snapdir");
    e.ok(&["mount", "mnt/n@s", &snapdir]);
    e.ok(&["inherit", "mountpoint", "mnt/n"]);
    assert!(e.is_mounted(&snapdir) && !e.is_mounted(&b));
    // Busy: nothing changes.
    let busy = std::fs::File::open(e.at(&format!("{}/f", first))).unwrap();
    let err = e.fails(&["set", &format!("mountpoint={}", second), "mnt"]);
    assert!(err.contains("busy"), "{}", err);
    assert_eq!(prop(&e, "mountpoint", "mnt"), format!("{}\tlocal\n", first));
    assert!(e.is_mounted(&first));
    drop(busy);
}

#[test]
fn a_killed_daemons_mounts_are_all_cleared() {
    // Pins: after SIGKILL of the daemon and a restart, a pool whose root is
    // mounted inside another pool's mount (listed first in the cache) came
    // back imported but not mounted ("transport endpoint is not
    // connected"), and dead mounts the next daemon does not mount again (a
    // snapshot, a dataset mounted on a directory given) stayed dead.
    let Some(e) = Env::private("mp-kill", true) else { return };
    let outer = e.path("outer");
    let inner = format!("{}/inner", outer);
    // `in` first in the cache, its root mounted inside `out`'s.
    e.ok(&["pool", "create", "-m", "none", "in", &e.path("in.img"), "--size", "128M"]);
    e.ok(&["pool", "create", "-m", &outer, "out", &e.path("out.img"), "--size", "128M"]);
    e.ok(&["set", &format!("mountpoint={}", inner), "in"]);
    assert_eq!(e.mounted_types(&inner), ["fuse"]);
    e.ok(&["create", "-o", "canmount=noauto", "out/x"]);
    let given = e.path("given");
    e.ok(&["mount", "out/x", &given]);
    e.ok(&["snapshot", "out/x@s"]);
    let snapdir = e.path("snap");
    e.ok(&["mount", "out/x@s", &snapdir]);
    let pid = e.pid().expect("pid");
    // SAFETY: killing our test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    e.wait_killed(pid);
    assert_eq!(e.ok(&["pool", "list", "-H", "-o", "name"]), "in\nout\n");
    assert_eq!(e.mounted_types(&outer), ["fuse"], "one live mount, no dead one below it");
    assert_eq!(e.mounted_types(&inner), ["fuse"], "the pool mounted inside the other is mounted again");
    assert!(std::fs::metadata(e.at(&inner)).is_ok());
    assert!(!e.is_mounted(&given) && !e.is_mounted(&snapdir), "the dead mounts not made again are gone: {:?}", fuse_mounts(&e));
    assert!(std::fs::metadata(e.at(&snapdir)).is_ok(), "a plain directory again");
    assert!(e.log().contains("left by the previous daemon"), "{}", e.log());
    // Nothing dead left anywhere in the namespace.
    for (src, dir) in fuse_mounts(&e) {
        let r = std::fs::metadata(e.at(&dir));
        assert!(r.is_ok(), "'{}' on '{}': {:?}", src, dir, r);
    }
}

#[test]
fn unmounts_go_deepest_first() {
    // Pins: unmounting ordered by name length, not nesting: a dataset
    // mounted inside a sibling with a longer name made export, destroy -r
    // and daemon stop fail with "busy" (or force their way through).
    let Some(e) = Env::private("mp-order", true) else { return };
    e.create("tank");
    let outer = e.path("outer");
    let inner = format!("{}/in", outer);
    e.ok(&["create", "-o", &format!("mountpoint={}", outer), "tank/a-long-name"]);
    e.ok(&["create", "-o", &format!("mountpoint={}", inner), "tank/b"]);
    assert!(e.is_mounted(&inner));
    e.ok(&["pool", "export", "tank"]);
    assert!(fuse_mounts(&e).is_empty(), "{:?}", fuse_mounts(&e));
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "tank"]);
    assert!(e.is_mounted(&outer) && e.is_mounted(&inner), "import mounts outer before inner: {:?}", fuse_mounts(&e));
    // destroy -r of a parent whose children nest the same way.
    e.ok(&["create", "-o", "canmount=noauto", "tank/p"]);
    let d1 = e.path("d1");
    e.ok(&["create", "-o", &format!("mountpoint={}", d1), "tank/p/long-child"]);
    e.ok(&["create", "-o", &format!("mountpoint={}/in", d1), "tank/p/s"]);
    e.ok(&["destroy", "-r", "tank/p"]);
    assert!(!e.is_mounted(&d1));
    // daemon stop unmounts cleanly, nothing forced.
    e.ok(&["daemon", "stop"]);
    assert!(fuse_mounts(&e).is_empty(), "{:?}", fuse_mounts(&e));
    let log = e.log();
    assert!(!log.contains("forcing") && !log.contains("busy"), "{}", log);
}

#[test]
fn mount_points_given_other_ways() {
    // Every command that takes a mount point or a mount directory, with the
    // inputs the first test does not give: another dataset's mount point,
    // an empty string, the same directory through a trailing `/`, `..` or
    // a symlink, a property change that would move a mounted child onto
    // /etc, an import whose recorded mount point now leads to /etc. Pins:
    // `set mountpoint=/ tank/q` with its child tank/q/etc mounted on demand
    // succeeded, unmounted the child and warned that /etc was refused (only
    // the dataset's own new place was checked, not its children's).
    let Some(e) = Env::private("mp-ways", true) else { return };
    let mnt = e.create("tank");
    e.ok(&["create", "-o", &format!("mountpoint={}", e.path("own")), "tank/own"]);
    e.ok(&["create", "-o", "canmount=noauto", "tank/quiet"]);
    let before = seen(&e);
    let err = e.fails(&["mount", "tank/quiet", &mnt]);
    assert!(err.contains(&format!("'{}' is already a mount point (of 'tank')", mnt)), "{}", err);
    let err = e.fails(&["mount", "tank/quiet", &format!("{}/", e.path("own"))]);
    assert!(err.contains("already a mount point (of 'tank/own')"), "{}", err);
    assert_eq!(seen(&e), before, "a refused mount changed something");
    // So does every command that would mount there at once.
    e.ok(&["pool", "create", "-m", "none", "exp", &e.path("exp.img"), "--size", "128M"]);
    e.ok(&["pool", "export", "exp"]);
    let before = seen(&e);
    let own_mp = format!("mountpoint={}", e.path("own"));
    let tank_mp = format!("mountpoint={}", mnt);
    for args in [
        vec!["create", "-o", &own_mp, "tank/new"],
        vec!["set", &tank_mp, "tank/own"],
        vec!["pool", "create", "-m", &mnt, "p2", &e.path("p2.img"), "--size", "128M"],
        vec!["pool", "import", "-d", e.dir.to_str().unwrap(), "-m", &mnt, "exp"],
    ] {
        let err = e.fails(&args);
        assert!(err.contains(&format!("'{}' is already a mount point", e.path("own"))) || err.contains(&format!("'{}' is already a mount point", mnt)), "{:?}: {}", args, err);
        assert_eq!(seen(&e), before, "{:?} changed something", args);
    }
    assert!(!Path::new(&e.path("p2.img")).exists());
    let err = e.fails(&["pool", "import", "-d", e.dir.to_str().unwrap(), "-m", "", "exp"]);
    assert!(err.contains("bad mountpoint ''"), "{}", err);
    assert_eq!(seen(&e), before);
    // An empty string: a usage error for `mount` (clap, exit 2), and no
    // mount or dataset for `unmount`, `-m`, `mountpoint=`.
    let o = e.run(&["mount", "tank/quiet", ""]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let err = e.fails(&["unmount", ""]);
    assert!(err.contains("'' is not a mounted dataset or tarn mount point"), "{}", err);
    let err = e.fails(&["pool", "create", "-m", "", "p2", &e.path("p2.img"), "--size", "128M"]);
    assert!(err.contains("bad mountpoint ''") && err.contains("not an absolute path"), "{}", err);
    assert!(!Path::new(&e.path("p2.img")).exists());
    for args in [vec!["create", "-o", "mountpoint=", "tank/new"], vec!["set", "mountpoint=", "tank/own"]] {
        let err = e.fails(&args);
        assert!(err.contains("bad value '' for property 'mountpoint'") && err.contains("not an absolute path"), "{:?}: {}", args, err);
    }
    assert_eq!(seen(&e), before, "a refused command changed something");
    // The same directory, named other ways, is the same mount.
    std::os::unix::fs::symlink(&mnt, e.path("link")).unwrap();
    for name in [format!("{}/", mnt), format!("{}/../{}", mnt, Path::new(&mnt).file_name().unwrap().to_str().unwrap()), e.path("link")] {
        e.ok(&["unmount", &name]);
        assert!(!e.is_mounted(&mnt), "unmount {} left it mounted", name);
        e.ok(&["mount", "tank"]);
        assert!(e.is_mounted(&mnt));
    }
    // A directory with somebody else's mount on it is not tarn's to unmount.
    let other = e.path("other");
    std::fs::create_dir(&other).unwrap();
    e.sh(&format!("mount -t tmpfs tmpfs {}", other));
    let err = e.fails(&["unmount", &other]);
    assert!(err.contains(&format!("'{}' is not a mounted dataset or tarn mount point", other)), "{}", err);
    assert_eq!(e.mounted_types(&other), ["tmpfs"], "tarn unmounted a tmpfs");
    // Mounting through a symlink mounts where it leads.
    let real = e.path("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, e.path("to-real")).unwrap();
    e.ok(&["mount", "tank/quiet", &e.path("to-real")]);
    assert!(e.is_mounted(&real) && !e.is_mounted(&e.path("to-real")));
    e.ok(&["unmount", &e.path("to-real")]);
    assert!(!e.is_mounted(&real));

    // A child mounted on demand would follow its parent's mountpoint onto
    // /etc: the change is refused, nothing unmounted or set.
    e.ok(&["create", "-o", "canmount=noauto", "-o", &format!("mountpoint={}", e.path("q")), "tank/q"]);
    e.ok(&["create", "-o", "canmount=noauto", "tank/q/etc"]);
    e.ok(&["mount", "tank/q/etc"]);
    assert!(e.is_mounted(&e.path("q/etc")));
    let moved = |e: &Env| (fuse_mount_ids(e), prop(e, "mountpoint", "tank/q"), prop(e, "mountpoint", "tank/q/etc"));
    let before = moved(&e);
    let err = e.fails(&["set", "mountpoint=/", "tank/q"]);
    assert!(err.contains("cannot set property for 'tank/q': 'tank/q/etc' would be mounted again") && err.contains("'/etc', a system directory"), "{}", err);
    assert_eq!(moved(&e), before, "the refused set changed something");
    // The same through inherit: tank/r has mountpoint=/ (not mounted);
    // tank/r/etc, mounted at a place of its own, inheriting it would be /etc.
    e.ok(&["create", "-o", "canmount=noauto", "-o", "mountpoint=/", "tank/r"]);
    let etc_own = e.path("etc-own");
    e.ok(&["create", "-o", &format!("mountpoint={}", etc_own), "tank/r/etc"]);
    assert!(e.is_mounted(&etc_own));
    let before = (fuse_mount_ids(&e), prop(&e, "mountpoint", "tank/r/etc"));
    let err = e.fails(&["inherit", "mountpoint", "tank/r/etc"]);
    assert!(err.contains("cannot inherit property for 'tank/r/etc': it would be mounted now") && err.contains("'/etc', a system directory"), "{}", err);
    assert_eq!((fuse_mount_ids(&e), prop(&e, "mountpoint", "tank/r/etc")), before, "a refused inherit changed something");
    // With -r, a child's own value goes too: tank/r/usr (not mounted)
    // would inherit /usr, and its mounted child tank/r/usr/lib /usr/lib.
    e.ok(&["create", "-o", "canmount=noauto", "-o", &format!("mountpoint={}", e.path("u")), "tank/r/usr"]);
    let lib_own = e.path("lib-own");
    e.ok(&["create", "-o", &format!("mountpoint={}", lib_own), "tank/r/usr/lib"]);
    let before = (fuse_mount_ids(&e), prop(&e, "mountpoint", "tank/r/usr"), prop(&e, "mountpoint", "tank/r/usr/lib"));
    let err = e.fails(&["inherit", "-r", "mountpoint", "tank/r/usr"]);
    assert!(err.contains("cannot inherit property for 'tank/r/usr': 'tank/r/usr/lib' would be mounted again") && err.contains("'/usr', a system directory"), "{}", err);
    assert_eq!((fuse_mount_ids(&e), prop(&e, "mountpoint", "tank/r/usr"), prop(&e, "mountpoint", "tank/r/usr/lib")), before, "a refused inherit -r changed something");
    // Without -r the child keeps its own mountpoint and stays where it is.
    e.ok(&["inherit", "mountpoint", "tank/r/usr"]);
    assert_eq!(prop(&e, "mountpoint", "tank/r/usr"), "/usr\tinherited from tank/r\n");
    assert!(e.is_mounted(&lib_own) && e.is_mounted(&etc_own));
    // A rename moves a dataset mounted on demand (and what follows it)
    // below its new parent's mountpoint: under tank/r (mountpoint=/), /etc.
    e.ok(&["create", "-o", "canmount=noauto", "tank/d"]);
    e.ok(&["create", "-o", "canmount=noauto", "tank/d/lib"]);
    e.ok(&["mount", "tank/d/lib"]);
    let names = |e: &Env| (fuse_mount_ids(e), e.ok(&["list", "-H", "-o", "name", "-r", "tank"]));
    let before = names(&e);
    let err = e.fails(&["rename", "tank/d", "tank/r/usr/d"]);
    assert!(err.contains("cannot rename 'tank/d': 'tank/r/usr/d/lib' would be mounted again") && err.contains("'/usr', a system directory"), "{}", err);
    assert_eq!(names(&e), before, "a refused rename changed something");
    e.ok(&["mount", "tank/d"]);
    let before = names(&e);
    let err = e.fails(&["rename", "tank/d", "tank/r/usr/d"]);
    assert!(err.contains("cannot rename 'tank/d': 'tank/r/usr/d' would be mounted again") && err.contains("'/usr', a system directory"), "{}", err);
    assert_eq!(names(&e), before, "a refused rename changed something");
    // Elsewhere it moves, mounted again at the new place. (tank/d, mounted
    // after tank/d/lib, covers its mount: unmounted first.)
    e.ok(&["unmount", "tank/d"]);
    e.ok(&["rename", "tank/d", "tank/own/d"]);
    assert!(e.is_mounted(&e.path("own/d/lib")), "{:?}", fuse_mounts(&e));
    e.ok(&["set", &format!("mountpoint={}", e.path("r2")), "tank/r"]);
    assert!(e.is_mounted(&lib_own) && e.is_mounted(&etc_own));

    // Import without -m: the root's recorded mount point is now a symlink
    // to /etc. Imported, not mounted, a warning naming both; /etc untouched.
    let imp = e.path("imp-mnt");
    e.ok(&["pool", "create", "-m", &imp, "imp", &e.path("imp.img"), "--size", "128M"]);
    e.ok(&["pool", "export", "imp"]);
    std::fs::remove_dir(&imp).unwrap();
    std::os::unix::fs::symlink("/etc", &imp).unwrap();
    let o = e.run(&["pool", "import", "-d", e.dir.to_str().unwrap(), "imp"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}", err);
    assert!(err.contains("pool 'imp' is imported but not mounted") && err.contains(&format!("'{}' (that is '/etc')", imp)), "{}", err);
    assert!(!e.is_mounted("/etc") || !e.mounted_types("/etc").contains(&"fuse".to_string()), "mounted on /etc");
    assert!(!fuse_mounts(&e).iter().any(|(src, _)| src == "imp"), "{:?}", fuse_mounts(&e));
}
