//! Changing a running pool's vdev tree (issue 12, `pool::vdev_change`):
//! `attach`, `detach`, `replace`.
//!
//! Invariants checked:
//! - attach makes a plain device a mirror (or a mirror one child wider);
//!   the new device is resilvered with every block, so the pool imports
//!   and reads back exactly from the new device alone once the old one is
//!   detached;
//! - replace keeps the old device in a replacing vdev until the new one
//!   is resilvered, then drops it and erases its labels; a missing mirror
//!   child or RAID-Z member is replaced and the pool is ONLINE again;
//! - a pool stopped right after an attach imports with the new tree and
//!   finishes the resilver;
//! - a RAID-Z member in service is replaced beside itself (a replacing
//!   vdev under the RAID-Z vdev), and its replacement holds its columns;
//! - every refusal (RAID-Z attach, a device too small, detach of a plain
//!   device or of the last whole copy, a device of this pool or another)
//!   names the thing and changes nothing.

mod common;

use std::sync::Arc;

use common::{as_dyn, filled, mem_devs, named, open_named, reads_back, resilvered, small_tunables, verified};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, Pool};

fn opts() -> CreateOptions {
    CreateOptions { tunables: small_tunables(), ..Default::default() }
}

/// The tree as (depth, path, kind, state) rows, as `status` shows it.
fn tree(pool: &Pool) -> Vec<(usize, String, String, String)> {
    fn walk(v: &tarn_engine::pool::VdevStatus, depth: usize, out: &mut Vec<(usize, String, String, String)>) {
        out.push((depth, v.path.clone(), v.kind.clone(), v.state.clone()));
        v.children.iter().for_each(|c| walk(c, depth + 1, out));
    }
    let mut out = Vec::new();
    pool.status().vdevs.iter().for_each(|v| walk(v, 0, &mut out));
    out
}

fn paths(pool: &Pool) -> Vec<String> {
    tree(pool).into_iter().map(|(d, p, _, _)| format!("{}{}", "  ".repeat(d), p)).collect()
}

/// Objects of known contents, synced.
fn fill(pool: &Pool, n: u64, len: usize) -> Vec<(u64, Vec<u8>)> {
    filled(pool, n, len, 100)
}

const RAIDZ_NAMES: [&str; 4] = ["r0", "r1", "r2", "r3"];

/// A RAID-Z2 pool "tank" of four 96 MiB devices r0..r3, with a fifth
/// device (index 4) left over for a replacement.
fn raidz2_of_four(seed: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(5, 96 << 20, seed);
    let tops = vec![NewTop { layout: Layout::Raidz(2), devices: RAIDZ_NAMES.iter().zip(&devs).map(|(n, d)| named(n, d)).collect() }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    (devs, pool)
}

fn has_pool_label(d: &FaultDevice) -> bool {
    tarn_engine::pool::label::read_labels(d).config.is_some()
}

#[test]
fn attach_makes_a_mirror_and_detach_leaves_the_new_device_alone() {
    let devs = mem_devs(2, 128 << 20, 21);
    let pool = Pool::create_on("tank", vec![named("a", &devs[0])], vec![], &opts()).expect("create");
    let files = fill(&pool, 6, 400_000);
    pool.attach_device_on("a", "b", devs[1].clone(), false).expect("attach");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    let written: u64 = files.iter().map(|f| f.1.len() as u64).sum();
    assert!(rep.bytes >= written, "the resilver copied every block onto b: {} bytes for {} written", rep.bytes, written);
    assert_eq!(paths(&pool), ["mirror-0", "  a", "  b"]);
    assert!(tree(&pool).iter().all(|r| r.3 == "ONLINE"), "{:?}", tree(&pool));
    let scrub = pool.scrub().expect("scrub");
    assert_eq!(scrub.bad_copies, 0, "b holds every block exactly: {scrub:?}");
    // The mirror without a: b alone is the pool.
    pool.detach_device("a").expect("detach");
    assert_eq!(paths(&pool), ["b"]);
    assert!(!has_pool_label(&devs[0]), "a's labels are erased: the device is free");
    let more = fill(&pool, 2, 100_000);
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("b", &devs[1])]).expect("import from b alone");
    reads_back(&pool, &files, "b alone");
    reads_back(&pool, &more, "b alone, written after the detach");
    verified(&pool, "after attach and detach");
}

#[test]
fn attach_widens_a_mirror_and_the_pool_imports_after_a_stop_mid_resilver() {
    let devs = mem_devs(3, 128 << 20, 22);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    let files = fill(&pool, 6, 500_000);
    pool.attach_device_on("b", "c", devs[2].clone(), false).expect("attach");
    // Power lost right after the attach returned (the resilver barely
    // started): what is durable imports with c in the tree, and c is
    // resilvered again from what it missed.
    let cut: Vec<Arc<FaultDevice>> = devs.iter().map(|d| Arc::new(d.snapshot_durable())).collect();
    resilvered(&pool);
    assert_eq!(paths(&pool), ["mirror-0", "  a", "  b", "  c"]);
    drop(pool);
    let pool = open_named(vec![named("a", &cut[0]), named("b", &cut[1]), named("c", &cut[2])]).expect("import after the cut");
    assert_eq!(paths(&pool), ["mirror-0", "  a", "  b", "  c"]);
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    reads_back(&pool, &files, "after the cut");
    let scrub = pool.scrub().expect("scrub");
    assert_eq!(scrub.bad_copies, 0, "{scrub:?}");
    // Any two of the three children hold the pool now.
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("b", &cut[1]), named("c", &cut[2])]).expect("import without a");
    reads_back(&pool, &files, "b and c");
}

#[test]
fn replace_resilvers_then_drops_the_old_device() {
    let devs = mem_devs(3, 128 << 20, 23);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    let files = fill(&pool, 6, 300_000);
    pool.replace_device_on("b", "c", devs[2].clone(), false).expect("replace");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(paths(&pool), ["mirror-0", "  a", "  c"], "the replacing vdev is gone once c is whole");
    assert!(!has_pool_label(&devs[1]), "b's labels are erased");
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("a", &devs[0]), named("c", &devs[2])]).expect("import without b");
    assert_eq!(pool.status().state, "ONLINE");
    reads_back(&pool, &files, "after the replacement");
    verified(&pool, "after the replacement");
}

#[test]
fn a_missing_mirror_child_is_replaced_and_the_pool_is_online_again() {
    let devs = mem_devs(3, 128 << 20, 24);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    let files = fill(&pool, 4, 300_000);
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("a", &devs[0])]).expect("import degraded");
    assert_eq!(pool.status().state, "DEGRADED");
    let more = fill(&pool, 2, 200_000);
    pool.replace_device_on("b", "c", devs[2].clone(), false).expect("replace the missing child");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(paths(&pool), ["mirror-0", "  a", "  c"]);
    assert_eq!(pool.status().state, "ONLINE");
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("c", &devs[2])]).expect("import from the replacement alone");
    reads_back(&pool, &files, "c alone");
    reads_back(&pool, &more, "c alone, written while degraded");
}

#[test]
fn a_missing_raidz_member_is_replaced_in_place() {
    let (devs, pool) = raidz2_of_four(25);
    let names = RAIDZ_NAMES;
    let files = fill(&pool, 6, 300_000);
    pool.export().expect("export");
    drop(pool);
    let present: Vec<(String, Arc<dyn BlockDevice>)> = [0, 2, 3].iter().map(|&i| named(names[i], &devs[i])).collect();
    let pool = open_named(present).expect("import without r1");
    pool.replace_device_on("r1", "new", devs[4].clone(), false).expect("replace the missing member");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(paths(&pool), ["raidz2-0", "  r0", "  new", "  r2", "  r3"]);
    assert_eq!(pool.status().state, "ONLINE");
    let scrub = pool.scrub().expect("scrub");
    assert_eq!(scrub.bad_copies, 0, "every column of the new member is right: {scrub:?}");
    pool.export().expect("export");
    drop(pool);
    // Two members gone, the new one among those left: parity needs it.
    let pool = open_named(vec![named("new", &devs[4]), named("r3", &devs[3])]).expect("import with two members missing");
    reads_back(&pool, &files, "from r3 and the new member by parity");
}

/// A RAID-Z member in service is replaced beside itself: a replacing vdev
/// under the RAID-Z vdev until the new device holds its columns, which
/// then serve with the old device gone and two other members missing.
#[test]
fn a_raidz_member_in_service_is_replaced_beside_itself() {
    let (devs, pool) = raidz2_of_four(28);
    let files = fill(&pool, 6, 300_000);
    // Held mid-replacement (the resilver is slow), the tree has the
    // replacing member and writes reach both of its leaves.
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "64K").expect("slow resilver");
    pool.replace_device_on("r1", "new", devs[4].clone(), false).expect("replace a member in service");
    assert_eq!(paths(&pool), ["raidz2-0", "  r0", "  replacing-1", "    r1", "    new", "  r2", "  r3"]);
    let during = fill(&pool, 2, 200_000);
    reads_back(&pool, &files, "while replacing");
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "0").expect("full speed");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(paths(&pool), ["raidz2-0", "  r0", "  new", "  r2", "  r3"]);
    assert!(!has_pool_label(&devs[1]), "r1's labels are erased");
    let scrub = pool.scrub().expect("scrub");
    assert_eq!(scrub.bad_copies, 0, "{scrub:?}");
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("new", &devs[4]), named("r3", &devs[3])]).expect("import with two members missing");
    reads_back(&pool, &files, "from the new member and r3");
    reads_back(&pool, &during, "written while replacing, from the new member and r3");
}

#[test]
fn bad_changes_are_refused_and_change_nothing() {
    let devs = mem_devs(7, 128 << 20, 26);
    let tops = vec![
        NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] },
        NewTop { layout: Layout::Raidz(1), devices: vec![named("r0", &devs[2]), named("r1", &devs[3]), named("r2", &devs[4])] },
    ];
    let pool = Pool::create_tops("tank", tops, vec![], &CreateOptions { force: true, ..opts() }).expect("create");
    fill(&pool, 2, 100_000);
    let before = paths(&pool);
    let txg = pool.uberblock().txg;
    let refused = |r: tarn_engine::Result<()>, what: &str, needle: &str| {
        let e = r.expect_err(what).to_string();
        assert!(e.contains(needle), "{what}: {e}");
        assert_eq!(paths(&pool), before, "{what}: the tree is unchanged");
    };
    refused(pool.attach_device_on("r0", "x", devs[5].clone(), false), "attach to a RAID-Z member", "can only attach to mirrors and top-level disks");
    let small = Arc::new(FaultDevice::new(64 << 20, 9));
    refused(pool.attach_device_on("a", "small", small.clone(), false), "a device too small", "'small' is too small");
    refused(pool.replace_device_on("a", "small", small.clone(), false), "a replacement too small", "'small' is too small");
    refused(pool.attach_device_on("nosuch", "x", devs[5].clone(), false), "no such device", "no such device in pool 'tank'");
    refused(pool.attach_device_on("a", "r0 again", devs[2].clone(), true), "a leaf of this pool, forced", "'r0 again' is part of active pool 'tank' (as 'r0')");
    refused(pool.replace_device_on("b", "a again", devs[0].clone(), true), "a leaf of this pool as its own replacement", "'a again' is part of active pool 'tank' (as 'a')");
    refused(pool.detach_device("r1"), "detach a RAID-Z member", "only applicable to mirror, replacing and spare vdevs");
    refused(pool.attach_device_on("a", "b again", devs[1].clone(), false), "a device of this pool", "part of active pool 'tank'");
    pool.offline("b", true).expect("offline b");
    refused(pool.detach_device("a"), "detach the last whole child", "no valid replicas");
    pool.online("b").expect("online b");
    resilvered(&pool);
    // A device holding another pool.
    let other = Pool::create_on("other", vec![named("o", &devs[6])], vec![], &opts()).expect("other pool");
    other.export().expect("export other");
    drop(other);
    refused(pool.attach_device_on("a", "o", devs[6].clone(), false), "another pool's device", "part of exported pool 'other'");
    assert!(!has_pool_label(&devs[5]) && !has_pool_label(&small), "refused devices are untouched");
    assert!(pool.uberblock().txg >= txg);
    verified(&pool, "after the refusals");
}

#[test]
fn detach_of_a_plain_device_is_refused() {
    let devs = mem_devs(1, 128 << 20, 27);
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts()).expect("create");
    let e = pool.detach_device("mem0").expect_err("a plain device").to_string();
    assert!(e.contains("cannot detach 'mem0': only applicable to mirror, replacing and spare vdevs"), "{e}");
}
