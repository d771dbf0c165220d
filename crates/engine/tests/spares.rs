//! Hot spares (issue 12, `pool::spare`).
//!
//! Invariants checked:
//! - spares are listed at creation and by `add`, shown AVAIL, and carry a
//!   label of state SPARE naming the pool; bad spares (too small, a device
//!   of the pool, given twice, another pool's spare without -f, none at
//!   all) are refused naming the device, and nothing changes;
//! - a leaf of a mirror whose writes fail, and a RAID-Z member that
//!   vanishes, get an AVAIL spare at once: a `spare-N` vdev of the two in
//!   the leaf's place, the spare resilvered (no checksum error counted on
//!   it on the way), every object reading back exactly, a scrub clean;
//! - detaching an INUSE spare makes it AVAIL again with its spare label,
//!   the failed device staying; detaching the failed device makes the
//!   spare a member for good (off the list); replacing the failed device
//!   frees the spare once the replacement is resilvered;
//! - spares are kept across export and import, INUSE ones in their place;
//!   a device UNAVAIL at import gets a spare; a spare missing at import is
//!   UNAVAIL;
//! - `remove` takes an AVAIL spare (its labels erased) and refuses an
//!   INUSE one, a data device and an unknown name, changing nothing.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{filled, mem_devs, named, open_named, reads_back, small_tunables, verified};
use tarn_engine::io::inject::{Fault, InjectSpec, IoTypes, FREQ_ALWAYS};
use tarn_engine::pool::label::read_labels;
use tarn_engine::pool::scan::{ScanFunc, ScanState};
use tarn_engine::pool::spare::SpareStatus;
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::pool::VdevStatus;
use tarn_engine::sys::{FaultConfig, FaultDevice};
use tarn_engine::{CreateOptions, Pool};
use tarn_ondisk::label::PoolState;

fn opts() -> CreateOptions {
    CreateOptions { tunables: small_tunables(), ..Default::default() }
}

/// The tree as `status` shows it: one "name STATE" row per vdev, indented
/// by depth.
fn tree(pool: &Pool) -> Vec<String> {
    fn walk(v: &VdevStatus, depth: usize, out: &mut Vec<String>) {
        out.push(format!("{}{} {}", "  ".repeat(depth), v.path, v.state));
        v.children.iter().for_each(|c| walk(c, depth + 1, out));
    }
    let mut out = Vec::new();
    pool.status().vdevs.iter().for_each(|v| walk(v, 0, &mut out));
    out
}

/// The spares as "path STATE" rows.
fn spares(pool: &Pool) -> Vec<String> {
    pool.spares().iter().map(|s: &SpareStatus| format!("{} {}", s.path, s.state)).collect()
}

/// The leaf `path` of the pool's status tree.
fn leaf<'a>(v: &'a [VdevStatus], path: &str) -> Option<&'a VdevStatus> {
    v.iter().find_map(|c| if c.path == path && c.children.is_empty() { Some(c) } else { leaf(&c.children, path) })
}

/// Waits (at most 60 s) until `cond` holds; panics naming `what` if not.
fn until(what: &str, pool: &Pool, cond: impl Fn(&Pool) -> bool) {
    let t0 = Instant::now();
    while !cond(pool) {
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}: not within 60 s; tree {:?}, spares {:?}", tree(pool), spares(pool));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `spare` to stand in and be resilvered: INUSE, its DTL empty
/// (the resilver copied what it missed), the resilver finished without
/// error.
fn spare_resilvered(pool: &Pool, spare: &str) {
    until("the spare stands in", pool, |p| spares(p).contains(&format!("{} INUSE", spare)));
    until("the spare is resilvered", pool, |p| leaf(&p.status().vdevs, spare).is_some_and(|l| l.missed_txgs.is_none()));
    let st = pool.scan_wait();
    assert_eq!((st.func, st.state), (ScanFunc::Resilver, ScanState::Finished), "{st:?}");
    assert!(st.report.errors.is_empty(), "{:?}", st.report.errors);
}

fn label_state(d: &FaultDevice) -> Option<(PoolState, u64)> {
    read_labels(d).config.map(|c| (c.state, c.device_guid))
}

/// A pool "tank": a 2-way mirror of a and b, with spares s1 and s2
/// (devices 2 and 3); device 4 is left over.
fn mirror_with_spares(seed: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(5, 128 << 20, seed);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    pool.add_spares_on(vec![named("s1", &devs[2]), named("s2", &devs[3])], false).expect("add spares");
    (devs, pool)
}

/// Makes device `d` refuse every write from now on (its reads work): the
/// next write the pool sends it faults its leaf.
fn refuse_writes(d: &FaultDevice) {
    d.set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
}

#[test]
fn spares_are_listed_shown_and_labelled() {
    let (devs, pool) = mirror_with_spares(41);
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 AVAIL"]);
    let guids: Vec<u64> = pool.spares().iter().map(|s| s.guid).collect();
    assert_eq!(label_state(&devs[2]), Some((PoolState::Spare, guids[0])), "s1's own label says it is a spare of tank");
    assert_eq!(read_labels(devs[2].as_ref()).config.expect("label").pool_name, "tank");
    let cfg = pool.config();
    assert_eq!(cfg.spares.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(), ["s1", "s2"]);
    assert_ne!(cfg.features_compat & tarn_ondisk::uberblock::FEATURE_SPARES, 0, "the labels say the pool lists spares");
    assert_eq!(pool.status().state, "ONLINE", "AVAIL spares leave the pool ONLINE");
    let files = filled(&pool, 3, 200_000, 1);
    pool.export().expect("export");
    drop(pool);
    // Export and import keep them, found among the devices given.
    let all: Vec<_> = ["a", "b", "s1", "s2"].iter().zip(&devs).map(|(n, d)| named(n, d)).collect();
    let pool = open_named(all).expect("import");
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 AVAIL"]);
    reads_back(&pool, &files, "after import");
    pool.export().expect("export");
    drop(pool);
    // A spare not found at import is UNAVAIL, and the pool imports.
    let pool = open_named(vec![named("a", &devs[0]), named("b", &devs[1]), named("s1", &devs[2])]).expect("import without s2");
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 UNAVAIL"]);
    assert!(pool.spares()[1].fault.as_deref() == Some("not found at import"), "{:?}", pool.spares());
    assert!(pool.open_warnings().iter().any(|w| w.contains("hot spare 's2' is UNAVAIL")), "{:?}", pool.open_warnings());
    // A spare alone is no pool to import.
    let e = open_named(vec![named("s1", &devs[2])]).err().expect("a spare alone");
    drop(pool);
    let _ = e;
}

#[test]
fn bad_spares_are_refused_and_change_nothing() {
    let (devs, pool) = mirror_with_spares(42);
    let before = (tree(&pool), spares(&pool), pool.config().config_txg);
    let refused = |r: tarn_engine::Result<()>, what: &str, needle: &str| {
        let e = r.expect_err(what).to_string();
        assert!(e.contains(needle), "{what}: {e}");
        assert_eq!((tree(&pool), spares(&pool), pool.config().config_txg), before, "{what}: nothing changed");
    };
    let small = Arc::new(FaultDevice::new(64 << 20, 9));
    refused(pool.add_spares_on(vec![named("small", &small)], false), "a device smaller than any the pool has", "'small' is too small");
    refused(pool.add_spares_on(vec![named("a again", &devs[0])], true), "a device of the pool", "'a again' is part of active pool 'tank' (as 'a')");
    refused(pool.add_spares_on(vec![named("s1 again", &devs[2])], true), "a spare of the pool", "'s1 again' is a hot spare of active pool 'tank'");
    refused(pool.add_spares_on(vec![named("x", &devs[4]), named("x again", &devs[4])], false), "one device twice", "given twice");
    refused(pool.add_spares_on(vec![], false), "no devices", "no hot spares given");
    refused(pool.attach_device_on("a", "s1", devs[2].clone(), true), "a spare attached as a mirror child", "it is a hot spare of pool 'tank'");
    assert!(label_state(&devs[4]).is_none() && label_state(&small).is_none(), "refused devices are untouched");
    // Another pool's spare (that pool exported): refused without -f.
    let other = Pool::create_tops("other", vec![NewTop { layout: Layout::Mirror, devices: vec![named("o1", &devs[4]), named("o2", &Arc::new(FaultDevice::new(128 << 20, 5)))] }], vec![], &opts()).expect("other pool");
    let spare_of_other = Arc::new(FaultDevice::new(128 << 20, 6));
    other.add_spares_on(vec![named("os", &spare_of_other)], false).expect("other's spare");
    other.export().expect("export other");
    drop(other);
    refused(pool.add_spares_on(vec![named("os", &spare_of_other)], false), "another pool's spare", "'os' is a hot spare of pool 'other' (not imported here); use -f");
    pool.add_spares_on(vec![named("os", &spare_of_other)], true).expect("taken with -f");
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 AVAIL", "os AVAIL"]);
}

/// A mirror leaf whose writes fail gets a spare at once, the spare is
/// resilvered without a checksum error counted against it, and the data
/// verifies. Then the spare is detached and is AVAIL again.
#[test]
fn a_faulted_mirror_leaf_gets_a_spare_and_detaching_it_frees_it() {
    let (devs, pool) = mirror_with_spares(43);
    let files = filled(&pool, 8, 400_000, 10);
    refuse_writes(&devs[1]);
    let more = filled(&pool, 2, 200_000, 20);
    spare_resilvered(&pool, "s1");
    assert_eq!(tree(&pool), ["mirror-0 DEGRADED", "  a ONLINE", "  spare-1 DEGRADED", "    b FAULTED", "    s1 ONLINE"]);
    assert_eq!(spares(&pool), ["s1 INUSE", "s2 AVAIL"]);
    assert_eq!(pool.spares()[0].in_use_for.as_deref(), Some("b"));
    let s1 = leaf(&pool.status().vdevs, "s1").expect("s1 in the tree").clone();
    // Pins the bug where a spare (or replacement) beside a faulted leaf
    // was read before it held the block: checksum errors on a new device.
    assert_eq!((s1.read_errors, s1.checksum_errors), (0, 0), "nothing read from s1 before it was resilvered: {s1:?}");
    assert!(pool.events().since(None).0.iter().any(|e| e.class == "sysevent.fs.zfs.vdev_spare"), "a vdev_spare event");
    reads_back(&pool, &files, "with s1 standing in");
    reads_back(&pool, &more, "written while b failed");
    let scrub = pool.scrub().expect("scrub");
    assert_eq!(scrub.bad_copies, 0, "{scrub:?}");
    verified(&pool, "with s1 standing in");
    // s1 holds everything: it serves alone.
    devs[0].set_config(FaultConfig { read_error_rate: 1.0, ..Default::default() });
    reads_back(&pool, &files, "from s1 alone");
    devs[0].set_config(FaultConfig::default());
    // Detached, s1 stands by again; b stays, faulted.
    pool.detach_device("s1").expect("detach the spare");
    assert_eq!(tree(&pool), ["mirror-0 DEGRADED", "  a ONLINE", "  b FAULTED"]);
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 AVAIL"]);
    let g = pool.spares()[0].guid;
    assert_eq!(label_state(&devs[2]), Some((PoolState::Spare, g)), "s1's label is a spare's again");
    // Not taken again for the same fault: the administrator chose.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 AVAIL"]);
    reads_back(&pool, &files, "after the detach");
}

/// A RAID-Z member that vanishes gets a spare; its columns are rebuilt
/// onto the spare from parity, and the pool reads with another member
/// missing.
#[test]
fn a_vanished_raidz_member_gets_a_spare() {
    let devs = mem_devs(5, 96 << 20, 44);
    let names = ["r0", "r1", "r2", "r3"];
    let tops = vec![NewTop { layout: Layout::Raidz(1), devices: names.iter().zip(&devs).map(|(n, d)| named(n, d)).collect() }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    pool.add_spares_on(vec![named("s", &devs[4])], false).expect("spare");
    let files = filled(&pool, 8, 300_000, 30);
    pool.inject("r2", InjectSpec::new(Fault::Nxio, IoTypes::All, FREQ_ALWAYS).expect("spec")).expect("inject");
    let more = filled(&pool, 2, 200_000, 40);
    spare_resilvered(&pool, "s");
    assert_eq!(tree(&pool), ["raidz1-0 DEGRADED", "  r0 ONLINE", "  r1 ONLINE", "  spare-2 DEGRADED", "    r2 REMOVED", "    s ONLINE", "  r3 ONLINE"]);
    let s = leaf(&pool.status().vdevs, "s").expect("s in the tree").clone();
    assert_eq!((s.read_errors, s.checksum_errors), (0, 0), "{s:?}");
    let scrub = pool.scrub().expect("scrub");
    assert_eq!(scrub.bad_copies, 0, "every column on s is right: {scrub:?}");
    pool.clear_injections();
    pool.export().expect("export");
    drop(pool);
    // r2 and r0 gone: the spare's columns and parity hold everything.
    let pool = open_named(vec![named("r1", &devs[1]), named("r3", &devs[3]), named("s", &devs[4])]).expect("import without r0 and r2");
    reads_back(&pool, &files, "with r0 and r2 missing");
    reads_back(&pool, &more, "written after r2 vanished, with r0 and r2 missing");
    assert_eq!(spares(&pool), ["s INUSE"], "still standing in after the import");
}

/// Detaching the failed device makes the spare a member for good;
/// replacing it frees the spare once the replacement is resilvered.
#[test]
fn detach_or_replace_of_the_failed_device_ends_the_stand_in() {
    let (devs, pool) = mirror_with_spares(45);
    let files = filled(&pool, 6, 300_000, 50);
    refuse_writes(&devs[1]);
    filled(&pool, 1, 100_000, 60);
    spare_resilvered(&pool, "s1");
    // Replace b by a new device: the replacement under the spare vdev,
    // then b and s1 leave and s1 is AVAIL. (b's device takes writes again,
    // so that its labels can be erased when it leaves.)
    devs[1].set_config(FaultConfig::default());
    pool.replace_device_on("b", "n", devs[4].clone(), false).expect("replace b");
    let st = pool.scan_wait();
    assert!(st.report.errors.is_empty(), "{:?}", st.report.errors);
    until("the replacement completes", &pool, |p| tree(p) == ["mirror-0 ONLINE", "  a ONLINE", "  n ONLINE"]);
    until("s1 is free", &pool, |p| spares(p) == ["s1 AVAIL", "s2 AVAIL"]);
    assert!(label_state(&devs[1]).is_none(), "b's labels are erased");
    assert_eq!(label_state(&devs[2]).map(|l| l.0), Some(PoolState::Spare));
    reads_back(&pool, &files, "after the replacement");
    // Now n fails, s1 stands in again; detaching n makes s1 a member.
    refuse_writes(&devs[4]);
    filled(&pool, 1, 100_000, 70);
    spare_resilvered(&pool, "s1");
    pool.detach_device("n").expect("detach the failed device");
    assert_eq!(tree(&pool), ["mirror-0 ONLINE", "  a ONLINE", "  s1 ONLINE"]);
    assert_eq!(spares(&pool), ["s2 AVAIL"], "s1 is off the list");
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("a", &devs[0]), named("s1", &devs[2]), named("s2", &devs[3])]).expect("import");
    assert_eq!(tree(&pool), ["mirror-0 ONLINE", "  a ONLINE", "  s1 ONLINE"]);
    assert_eq!(spares(&pool), ["s2 AVAIL"]);
    reads_back(&pool, &files, "s1 a member");
}

/// `replace OLD SPARE` by hand; export and import keep the spare INUSE;
/// a device missing at import gets a spare there.
#[test]
fn spares_survive_import_and_stand_in_for_a_device_missing_at_import() {
    let (devs, pool) = mirror_with_spares(46);
    let files = filled(&pool, 6, 300_000, 80);
    pool.replace_device_on("b", "s2", devs[3].clone(), false).expect("replace b by spare s2 by hand");
    spare_resilvered(&pool, "s2");
    assert_eq!(tree(&pool), ["mirror-0 ONLINE", "  a ONLINE", "  spare-1 ONLINE", "    b ONLINE", "    s2 ONLINE"]);
    pool.export().expect("export");
    drop(pool);
    let all = || ["a", "b", "s1", "s2"].iter().zip(&devs).map(|(n, d)| named(n, d)).collect::<Vec<_>>();
    let pool = open_named(all()).expect("import");
    assert_eq!(tree(&pool), ["mirror-0 ONLINE", "  a ONLINE", "  spare-1 ONLINE", "    b ONLINE", "    s2 ONLINE"]);
    assert_eq!(spares(&pool), ["s1 AVAIL", "s2 INUSE"]);
    pool.detach_device("s2").expect("detach s2");
    pool.export().expect("export");
    drop(pool);
    // a is missing at import: s1 stands in for it.
    let pool = open_named(vec![named("b", &devs[1]), named("s1", &devs[2]), named("s2", &devs[3])]).expect("import without a");
    spare_resilvered(&pool, "s1");
    assert_eq!(tree(&pool), ["mirror-0 DEGRADED", "  spare-0 DEGRADED", "    a UNAVAIL", "    s1 ONLINE", "  b ONLINE"]);
    assert_eq!(spares(&pool), ["s1 INUSE", "s2 AVAIL"]);
    reads_back(&pool, &files, "with s1 for a");
    verified(&pool, "with s1 for a");
}

#[test]
fn remove_takes_avail_spares_only() {
    let (devs, pool) = mirror_with_spares(47);
    filled(&pool, 2, 100_000, 90);
    pool.replace_device_on("b", "s1", devs[2].clone(), false).expect("s1 stands in by hand");
    spare_resilvered(&pool, "s1");
    let before = (tree(&pool), spares(&pool));
    let refused = |which: &[&str], needle: &str| {
        let w: Vec<String> = which.iter().map(|s| s.to_string()).collect();
        let e = pool.remove_devices(&w).expect_err(needle).to_string();
        assert!(e.contains(needle), "{which:?}: {e}");
        assert_eq!((tree(&pool), spares(&pool)), before, "{which:?}: nothing changed");
    };
    refused(&["s1"], "cannot remove 's1': hot spare 's1' is in use, standing in for 'b' (detach it first: 'tarn pool detach tank s1')");
    refused(&["s2", "s1"], "hot spare 's1' is in use");
    refused(&["a"], "'a' is not a cache device of pool 'tank', nor one of its hot spares or log devices: it is a data device (of mirror-0)");
    refused(&["nosuch"], "it is not a device of the pool");
    refused(&["s2", "s2"], "given twice");
    pool.remove_devices(&["s2".to_string()]).expect("remove the AVAIL spare");
    assert_eq!(spares(&pool), ["s1 INUSE"]);
    assert!(label_state(&devs[3]).is_none(), "s2's labels are erased: the device is free");
    pool.detach_device("s1").expect("detach s1");
    pool.remove_devices(&["s1".to_string()]).expect("remove s1, AVAIL now");
    assert!(spares(&pool).is_empty());
    assert_eq!(pool.config().features_compat & tarn_ondisk::uberblock::FEATURE_SPARES, 0, "no spares, no feature bit");
    // The freed device is a new device to any pool.
    pool.add_spares_on(vec![named("s2", &devs[3])], false).expect("s2 again, without -f");
}

/// A replacement beside a faulted mirror child is not read before it holds
/// the block: the old child is down, so the replacing vdev as a whole
/// missed every txg before the replacement (regression test: with the
/// DTLs of both children asked, the faulted one's — only the txgs since
/// its fault — made it look whole, and reads and the resilver tried the
/// new device first, counting checksum errors against it).
#[test]
fn a_replacement_beside_a_faulted_child_counts_no_errors() {
    let devs = mem_devs(3, 128 << 20, 48);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    let files = filled(&pool, 8, 400_000, 100);
    refuse_writes(&devs[1]);
    filled(&pool, 1, 100_000, 110);
    until("b faults", &pool, |p| tree(p).contains(&"  b FAULTED".to_string()));
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "64K").expect("slow resilver");
    pool.replace_device_on("b", "c", devs[2].clone(), false).expect("replace b");
    // Reads while c is empty: a serves them.
    reads_back(&pool, &files, "while c is resilvered");
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "0").expect("full speed");
    let st = pool.scan_wait();
    assert!(st.report.errors.is_empty(), "{:?}", st.report.errors);
    let c = leaf(&pool.status().vdevs, "c").expect("c").clone();
    assert_eq!((c.read_errors, c.checksum_errors), (0, 0), "{c:?}");
}
