//! Mirror pools from the command line (issue 12): create, status as a
//! tree, offline/online with a resilver, clear, and the bad input each
//! refuses with one clear error and nothing changed.
//!
//! Invariants checked:
//! - `pool status` shows the vdev tree (mirror-N with its devices) and
//!   OFFLINE / DEGRADED with zpool's status:/action: lines;
//! - `pool online` resilvers (the scan line says "resilvered … with 0
//!   errors"), `pool wait -t resilver` returns after it;
//! - the refusals: too few devices, mismatched redundancy or sizes, a
//!   device given twice, an unknown device, offlining the last replica;
//! - `attach -s` / `replace -s` rebuild sequentially, then scrub (status
//!   shows both lines), and -s on RAID-Z is refused.

mod common;

use common::Env;

fn env(name: &str) -> Env {
    let mut e = Env::plain(&format!("redundancy-{}", name));
    e.cwd = Some(e.dir.clone());
    e
}

fn sparse(e: &Env, f: &str, bytes: u64) -> String {
    let p = e.path(f);
    std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
    p
}

#[test]
fn a_mirror_goes_offline_and_back_with_a_resilver() {
    let e = env("online");
    let (a, b) = (sparse(&e, "a.img", 256 << 20), sparse(&e, "b.img", 256 << 20));
    e.ok(&["pool", "create", "-m", "none", "tank", "mirror", "a.img", "b.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("mirror-0") && st.contains(&a) && st.contains(&b) && st.contains("state: ONLINE"), "{st}");
    e.ok(&["pool", "offline", "tank", "b.img"]);
    e.ok(&["create", "tank/while-offline"]);
    e.ok(&["snapshot", "tank/while-offline@s"]);
    e.ok(&["pool", "sync", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("state: DEGRADED") && st.contains("OFFLINE") && st.contains("taken offline"), "{st}");
    assert!(st.contains("action: Online the device using 'tarn pool online tank'"), "{st}");
    e.ok(&["pool", "online", "tank", &b]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("state: ONLINE") && st.contains("scan: resilvered") && st.contains("with 0 errors"), "{st}");
    // The offline mark of an export survives it; -t does not.
    e.ok(&["pool", "offline", "-t", "tank", "a.img"]);
    e.ok(&["pool", "export", "tank"]);
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("state: ONLINE"), "a temporary offline ends with the import: {st}");
}

#[test]
fn bad_layouts_and_devices_get_one_clear_error_and_change_nothing() {
    let e = env("bad");
    for f in ["a.img", "b.img", "c.img", "d.img"] {
        sparse(&e, f, 256 << 20);
    }
    sparse(&e, "small.img", 128 << 20);
    let cases: &[(&[&str], &str)] = &[
        (&["mirror", "a.img"], "a mirror needs at least 2 devices, 1 given"),
        (&["mirror"], "a mirror needs at least 2 devices, 0 given"),
        (&["a.img", "mirror", "b.img", "c.img"], "mismatched replication level"),
        (&["mirror", "a.img", "b.img", "mirror", "c.img", "d.img", "small.img"], "2-way mirror and a 3-way mirror"),
        (&["mirror", "a.img", "small.img"], "mismatched device sizes"),
        (&["mirror", "a.img", "a.img"], "given twice"),
        (&["raidz1", "a.img"], "raidz1"),
    ];
    for (devs, want) in cases {
        let mut args = vec!["pool", "create", "-m", "none", "p"];
        args.extend_from_slice(devs);
        let err = e.fails(&args);
        assert!(err.contains(want) && err.lines().count() == 1, "{devs:?}: {err}");
    }
    assert!(e.fails(&["pool", "status", "p"]).contains("p"), "no pool was made");
    e.ok(&["pool", "create", "-m", "none", "tank", "mirror", "a.img", "b.img"]);
    let err = e.fails(&["pool", "offline", "tank", "nosuch.img"]);
    assert!(err.contains("'nosuch.img'") && err.contains("no such device"), "{err}");
    e.ok(&["pool", "offline", "tank", "a.img"]);
    let err = e.fails(&["pool", "offline", "tank", &e.path("b.img")]);
    assert!(err.contains("no valid replicas"), "{err}");
    let err = e.fails(&["pool", "online", "tank", "nosuch.img"]);
    assert!(err.contains("no such device"), "{err}");
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("DEGRADED") && st.matches("ONLINE").count() >= 1, "only a.img is out: {st}");
    // `-f` takes mismatched sizes.
    e.ok(&["pool", "create", "-f", "-m", "none", "p", "mirror", "c.img", "small.img"]);
}

/// `pool attach`, `replace`, `detach` from the command line: a plain
/// device becomes a mirror, a replacement takes the old device's place,
/// detach leaves one device; the status tree follows each step.
#[test]
fn attach_replace_and_detach_change_the_tree() {
    let e = env("attach");
    for f in ["a.img", "b.img", "c.img"] {
        sparse(&e, f, 256 << 20);
    }
    e.ok(&["pool", "create", "-m", "none", "tank", "a.img"]);
    e.ok(&["create", "tank/fs"]);
    e.ok(&["pool", "attach", "-w", "tank", "a.img", "b.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("mirror-0") && st.contains(&e.path("b.img")) && st.contains("scan: resilvered") && st.contains("with 0 errors"), "{st}");
    e.ok(&["pool", "replace", "-w", "tank", "a.img", "c.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("mirror-0") && st.contains(&e.path("c.img")) && !st.contains(&e.path("a.img")) && !st.contains("replacing"), "a.img left once c.img was whole: {st}");
    e.ok(&["pool", "detach", "tank", "b.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(!st.contains("mirror-0") && st.contains(&e.path("c.img")) && st.contains("state: ONLINE"), "{st}");
    let events = e.ok(&["pool", "events", "tank"]);
    assert!(events.contains("sysevent.fs.zfs.vdev_attach") && events.contains("sysevent.fs.zfs.vdev_remove"), "{events}");
    // The devices that left are free again: a new pool takes them.
    e.ok(&["pool", "create", "-m", "none", "other", "mirror", "a.img", "b.img"]);
    e.ok(&["pool", "export", "tank"]);
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "tank"]);
    assert!(e.ok(&["list", "-H", "-o", "name", "-r", "tank"]).contains("tank/fs"), "the pool on c.img alone");
}

/// Each bad attach, replace or detach gets one clear error naming the
/// thing, and the tree is as it was.
#[test]
fn bad_attach_replace_and_detach_get_one_clear_error_and_change_nothing() {
    let e = env("attach-bad");
    for f in ["a.img", "b.img", "r0.img", "r1.img", "r2.img", "x.img", "o.img"] {
        sparse(&e, f, 256 << 20);
    }
    sparse(&e, "small.img", 128 << 20);
    std::fs::create_dir(e.dir.join("dir")).unwrap();
    e.ok(&["pool", "create", "-f", "-m", "none", "tank", "mirror", "a.img", "b.img", "raidz1", "r0.img", "r1.img", "r2.img"]);
    e.ok(&["pool", "create", "-m", "none", "other", "o.img"]);
    let before = e.ok(&["pool", "status", "tank"]);
    let cases: &[(&[&str], &str)] = &[
        (&["attach", "tank", "r0.img", "x.img"], "can only attach to mirrors and top-level disks"),
        (&["attach", "tank", "a.img", "small.img"], "small.img' is too small: 134217728 bytes, mirror-0 needs devices of at least"),
        (&["replace", "tank", "b.img", "small.img"], "is too small"),
        (&["attach", "tank", "nosuch.img", "x.img"], "no such device in pool 'tank'"),
        (&["attach", "tank", "a.img", "o.img"], "part of active pool 'other'"),
        (&["attach", "tank", "a.img", "b.img"], "part of active pool 'tank'"),
        (&["attach", "tank", "a.img", "dir"], "not a regular file or block device"),
        (&["attach", "tank", "a.img", "/"], "not a regular file or block device"),
        (&["attach", "tank", "a.img", "missing.img"], "cannot use"),
        (&["replace", "tank", "a.img"], "part of active pool 'tank'"),
        (&["detach", "tank", "r2.img"], "only applicable to mirror, replacing and spare vdevs"),
        (&["detach", "tank", "nosuch.img"], "no such device in pool 'tank'"),
        (&["attach", "nopool", "a.img", "x.img"], "nopool"),
    ];
    for (args, want) in cases {
        let mut a = vec!["pool"];
        a.extend_from_slice(args);
        let err = e.fails(&a);
        assert!(err.contains(want) && err.lines().count() == 1, "{args:?}: {err}");
    }
    e.ok(&["pool", "offline", "tank", "b.img"]);
    let err = e.fails(&["pool", "detach", "tank", "a.img"]);
    assert!(err.contains("no valid replicas"), "{err}");
    e.ok(&["pool", "online", "tank", "b.img"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    let after = e.ok(&["pool", "status", "tank"]);
    // The table's rows under the pool's: name and state.
    let tree = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("  "))
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() > 1 && ["ONLINE", "DEGRADED", "OFFLINE"].contains(&w[1])).then(|| format!("{} {}", w[0], w[1]))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(tree(&before), tree(&after), "the tree is as it was");
    let x = std::fs::read(e.dir.join("x.img")).unwrap();
    assert!(x.iter().all(|b| *b == 0), "x.img was not written");
}

/// `pool add` of data vdevs from the command line: a second mirror joins
/// the live pool (relative paths are the caller's), the pool grows and
/// imports with it; a plain device beside mirrors needs -f.
#[test]
fn pool_add_grows_a_live_pool_by_a_mirror() {
    let e = env("add");
    for f in ["a.img", "b.img", "c.img", "d.img", "p.img"] {
        sparse(&e, f, 256 << 20);
    }
    e.ok(&["pool", "create", "-m", "none", "tank", "mirror", "a.img", "b.img"]);
    e.ok(&["create", "tank/fs"]);
    let size = |e: &Env| e.ok(&["pool", "get", "-H", "-p", "-o", "value", "size", "tank"]).trim().parse::<u64>().expect("size");
    let before = size(&e);
    e.ok(&["pool", "add", "tank", "mirror", "c.img", "d.img"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("mirror-1") && st.contains(&e.path("d.img")) && st.contains("state: ONLINE"), "{st}");
    assert!(size(&e) > before * 3 / 2, "the pool grew: {} -> {}", before, size(&e));
    let err = e.fails(&["pool", "add", "tank", "p.img"]);
    assert!(err.contains("mismatched replication level") && err.contains("use -f") && err.lines().count() == 1, "{err}");
    assert!(!e.ok(&["pool", "status", "tank"]).contains(&e.path("p.img")), "nothing added");
    let events = e.ok(&["pool", "events", "tank"]);
    assert!(events.contains("sysevent.fs.zfs.vdev_add"), "{events}");
    e.ok(&["pool", "export", "tank"]);
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("mirror-1") && st.contains("state: ONLINE"), "imported with the added mirror: {st}");
    assert!(e.ok(&["list", "-H", "-o", "name", "-r", "tank"]).contains("tank/fs"));
}

/// `pool status -x`: healthy pools are left out (with zpool's words when
/// all are), a degraded one is shown.
#[test]
fn status_x_shows_only_pools_with_problems() {
    let e = env("status-x");
    for f in ["a.img", "b.img", "c.img"] {
        sparse(&e, f, 256 << 20);
    }
    e.ok(&["pool", "create", "-m", "none", "tank", "mirror", "a.img", "b.img"]);
    e.ok(&["pool", "create", "-m", "none", "other", "c.img"]);
    assert_eq!(e.ok(&["pool", "status", "-x"]).trim(), "all pools are healthy");
    assert_eq!(e.ok(&["pool", "status", "-x", "tank"]).trim(), "pool 'tank' is healthy");
    e.ok(&["pool", "offline", "tank", "b.img"]);
    let st = e.ok(&["pool", "status", "-x"]);
    assert!(st.contains("pool: tank") && st.contains("DEGRADED") && !st.contains("pool: other"), "{st}");
    assert!(e.fails(&["pool", "status", "-x", "nosuch"]).contains("nosuch"));
}

/// `attach -s` and `replace -s` (a sequential rebuild): the status shows
/// zpool's "resilvered (mirror-0) … with 0 errors" line beside the scrub
/// the rebuild started; `pool wait -t resilver` returns at the rebuild's
/// end; replace -s of a plain device completes as a healing one does.
#[test]
fn attach_s_and_replace_s_rebuild_then_scrub() {
    let e = env("rebuild");
    for f in ["a.img", "b.img", "c.img", "p.img", "q.img"] {
        sparse(&e, f, 256 << 20);
    }
    e.ok(&["pool", "create", "-m", "none", "tank", "a.img"]);
    e.ok(&["create", "tank/fs"]);
    e.ok(&["snapshot", "tank/fs@s"]);
    e.ok(&["pool", "attach", "-s", "tank", "a.img", "b.img"]);
    e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("mirror-0") && st.contains(&e.path("b.img")) && st.contains("scan: resilvered (mirror-0)") && st.contains("with 0 errors"), "{st}");
    e.ok(&["pool", "wait", "-t", "scrub", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains("scan: scrub repaired 0B") && st.contains("scan: resilvered (mirror-0)"), "the scrub after the rebuild, and the rebuild: {st}");
    let events = e.ok(&["pool", "events", "-v", "tank"]);
    assert!(events.contains("resilver_type") && events.contains("sequential"), "{events}");
    e.ok(&["pool", "replace", "-s", "-w", "tank", "a.img", "c.img"]);
    e.ok(&["pool", "wait", "-t", "scrub", "tank"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(st.contains(&e.path("c.img")) && !st.contains(&e.path("a.img")) && !st.contains("replacing"), "a.img left once c.img was rebuilt: {st}");
    // A plain device replaced by a rebuild (as OpenZFS allows: its parent
    // is the root).
    e.ok(&["pool", "create", "-m", "none", "solo", "p.img"]);
    e.ok(&["pool", "replace", "-s", "-w", "solo", "p.img", "q.img"]);
    e.ok(&["pool", "wait", "-t", "scrub", "solo"]);
    let st = e.ok(&["pool", "status", "solo"]);
    assert!(st.contains(&e.path("q.img")) && !st.contains(&e.path("p.img")) && st.contains("resilvered (replacing-0)") && st.contains("state: ONLINE"), "{st}");
    e.ok(&["pool", "export", "tank"]);
    e.ok(&["pool", "import", "-d", &e.dir.display().to_string(), "tank"]);
    assert!(e.ok(&["list", "-H", "-o", "name", "-r", "tank"]).contains("tank/fs"), "the pool on b.img and c.img");
}

/// `-s` where a rebuild cannot do gets one clear error, and nothing
/// changes: a RAID-Z member (attach or replace), an unknown device or
/// pool (the engine test `rebuild.rs` covers a pool that is resilvering).
#[test]
fn bad_attach_s_and_replace_s_get_one_clear_error() {
    let e = env("rebuild-bad");
    for f in ["a.img", "b.img", "r0.img", "r1.img", "r2.img", "x.img"] {
        sparse(&e, f, 256 << 20);
    }
    e.ok(&["pool", "create", "-f", "-m", "none", "tank", "mirror", "a.img", "b.img", "raidz1", "r0.img", "r1.img", "r2.img"]);
    let before = e.ok(&["pool", "status", "tank"]);
    let cases: &[(&[&str], &str)] = &[
        (&["replace", "-s", "tank", "r0.img", "x.img"], "sequential resilver is not supported for raidz"),
        (&["attach", "-s", "tank", "r0.img", "x.img"], "sequential resilver is not supported for raidz"),
        (&["replace", "-s", "tank", "nosuch.img", "x.img"], "no such device in pool 'tank'"),
        (&["attach", "-s", "tank", "nosuch.img", "x.img"], "no such device in pool 'tank'"),
        (&["attach", "-s", "nopool", "a.img", "x.img"], "nopool"),
    ];
    for (args, want) in cases {
        let mut a = vec!["pool"];
        a.extend_from_slice(args);
        let err = e.fails(&a);
        assert!(err.contains(want) && err.lines().count() == 1, "{args:?}: {err}");
    }
    assert_eq!(e.ok(&["pool", "status", "tank"]), before, "nothing changed");
    // x.img was vetted and let go again: a healing attach takes it.
    e.ok(&["pool", "attach", "-w", "tank", "a.img", "x.img"]);
}
