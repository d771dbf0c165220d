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
//!   device given twice, an unknown device, offlining the last replica.

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
