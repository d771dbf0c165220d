//! Mirror vdevs (issue 12, `vdev`): every block on every child, reads that
//! heal, a pool that survives losing a child.
//!
//! Invariants checked:
//! - damage to one child's copy never reaches the reader: the read is
//!   served by the other child, counted as a checksum error against the
//!   damaged one, and the damaged copy is rewritten (the device's bytes
//!   equal its sibling's again);
//! - a scrub of a mirror checks each child's copy, repairs exactly the
//!   damaged ones, and the next scrub finds none;
//! - a child missing at import leaves the pool DEGRADED, readable and
//!   writable; losing every child of one mirror refuses the import with
//!   the missing devices named;
//! - a child whose writes fail faults and the pool goes on (no
//!   suspension), its DTL records the txgs it missed; the data reads back;
//! - layouts zpool refuses are refused, and change nothing.

mod common;

use std::sync::Arc;

use common::{as_dyn, mem_devs, mirror_pool, pattern, put, resilvered, small_tunables, verified};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::{BlockDevice, FaultConfig, FaultDevice};
use tarn_engine::{CreateOptions, OpenOptions, Pool};
use tarn_ondisk::bp::BlockPtr;

fn open(devs: &[Arc<FaultDevice>]) -> tarn_engine::Result<Pool> {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() })
}

/// Every data and metadata block pointer of the objects (and the dnode array).
fn blocks(pool: &Pool, objs: &[u64]) -> Vec<BlockPtr> {
    objs.iter()
        .copied()
        .chain([0])
        .flat_map(|o| pool.root().tree(o, 1 << 20).expect("tree"))
        .map(|(_, _, bp)| bp)
        .filter(|bp| !bp.is_hole() && !bp.is_embedded())
        .collect()
}

/// Overwrites the first sector of every copy of `bps` on child `child` of
/// each mirror (device 2·vdev + child).
fn damage_child(devs: &[Arc<FaultDevice>], bps: &[BlockPtr], child: usize) -> usize {
    let mut n = 0;
    for bp in bps {
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            let d = &devs[2 * dva.vdev as usize + child];
            d.write_at(&[0xA5u8; 512], dva.offset).expect("damage");
            n += 1;
        }
    }
    n
}

fn leaf_counts(pool: &Pool) -> Vec<(String, String, u64, u64)> {
    let st = pool.status();
    st.vdevs.iter().flat_map(|t| t.children.iter()).map(|l| (l.path.clone(), l.state.clone(), l.checksum_errors, l.repaired_bytes)).collect()
}

fn bytes_at(d: &FaultDevice, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    d.read_at(&mut b, off).expect("read device");
    b
}

#[test]
fn a_damaged_child_is_read_around_and_healed() {
    let (devs, pool) = mirror_pool(1, "1");
    let files: Vec<(u64, Vec<u8>)> = (0..4u64).map(|i| {
        let d = pattern(300_000, i);
        (put(&pool, &d), d)
    }).collect();
    pool.sync().expect("sync");
    let objs: Vec<u64> = files.iter().map(|f| f.0).collect();
    let data_bps: Vec<BlockPtr> = blocks(&pool, &objs).into_iter().filter(|bp| bp.level == 0 && !bp.otype.is_metadata()).collect();
    assert!(data_bps.len() >= 4);
    // Reopened, so the reads go to the devices.
    pool.export().expect("export");
    drop(pool);
    let damaged = damage_child(&devs, &data_bps, 0);
    let pool = open(&devs).expect("open");
    for (obj, data) in &files {
        assert!(pool.root().read(*obj, 0, data.len()).expect("read around the damage") == *data, "object {obj} reads back exactly");
    }
    // Reads alternate between the children by region (`read_order`): the
    // ones sent to the damaged child found the damage and healed it; the
    // scrub finds the rest.
    let counts = leaf_counts(&pool);
    let by_reads = counts[0].2;
    assert!(by_reads > 0 && by_reads <= damaged as u64, "damaged copies read were counted against the damaged child: {counts:?}");
    assert_eq!(counts[1].2, 0, "nothing against the good child: {counts:?}");
    assert!(counts[0].3 >= by_reads * 4096 && counts[1].3 == 0, "the damaged child was repaired: {counts:?}");
    let rep = pool.scrub().expect("scrub");
    assert_eq!(rep.bad_copies, damaged as u64 - by_reads, "the scrub finds the damage no read met: {rep:?}");
    assert_eq!(rep.repaired_copies, rep.bad_copies, "{rep:?}");
    for bp in &data_bps {
        let dva = bp.dva[0];
        let len = (bp.psize as usize).div_ceil(4096) * 4096;
        assert!(bytes_at(&devs[0], dva.offset, len) == bytes_at(&devs[1], dva.offset, len), "copy at {:#x} healed", dva.offset);
    }
    let again = pool.scrub().expect("scrub");
    assert_eq!(again.bad_copies, 0, "{again:?}");
    verified(&pool, "after healing reads");
}

#[test]
fn a_scrub_checks_every_child_and_repairs_the_damaged_one() {
    let (devs, pool) = mirror_pool(2, "1");
    let objs: Vec<u64> = (0..6u64).map(|i| put(&pool, &pattern(200_000, i))).collect();
    pool.sync().expect("sync");
    let bps: Vec<BlockPtr> = blocks(&pool, &objs).into_iter().filter(|bp| bp.level == 0).collect();
    let damaged = damage_child(&devs, &bps, 1) as u64;
    let rep = pool.scrub().expect("scrub");
    assert_eq!(rep.bad_copies, damaged, "every damaged child copy found: {rep:?}");
    assert_eq!(rep.repaired_copies, damaged, "and repaired from its sibling: {rep:?}");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert!(rep.copies >= 2 * rep.blocks, "each copy read on both children: {rep:?}");
    let again = pool.scrub().expect("scrub");
    assert_eq!((again.bad_copies, again.repaired_copies), (0, 0), "{again:?}");
}

#[test]
fn a_missing_child_leaves_the_pool_degraded_and_working() {
    let (devs, pool) = mirror_pool(2, "1");
    let files: Vec<(u64, Vec<u8>)> = (0..4u64).map(|i| {
        let d = pattern(250_000, i);
        (put(&pool, &d), d)
    }).collect();
    pool.export().expect("export");
    drop(pool);
    // Mirror 0 without its first child.
    let present: Vec<Arc<FaultDevice>> = devs[1..].to_vec();
    let named: Vec<(String, Arc<dyn BlockDevice>)> = as_dyn(&devs).into_iter().skip(1).collect();
    let pool = Pool::open_on(named, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("a mirror imports without one child");
    let st = pool.status();
    assert_eq!(st.state, "DEGRADED", "{st:?}");
    assert_eq!(st.vdevs[0].state, "DEGRADED");
    assert_eq!(st.vdevs[0].children[0].state, "UNAVAIL");
    assert_eq!(st.vdevs[1].state, "ONLINE");
    for (obj, data) in &files {
        assert!(pool.root().read(*obj, 0, data.len()).expect("read") == *data);
    }
    let more = put(&pool, &pattern(500_000, 99));
    pool.sync().expect("a degraded pool still syncs");
    assert!(pool.core().vdevs.get(0).expect("a top-level vdev").children[0].dtl.lock().span().is_some(), "the missing child's DTL records what it missed");
    verified(&pool, "degraded");
    assert_eq!(pool.root().read(more, 0, 500_000).expect("read"), pattern(500_000, 99));
    pool.export().expect("export degraded");
    drop(present);
}

#[test]
fn losing_every_child_of_a_mirror_refuses_the_import_naming_them() {
    let (devs, pool) = mirror_pool(2, "1");
    put(&pool, &pattern(10_000, 1));
    pool.export().expect("export");
    drop(pool);
    let named: Vec<(String, Arc<dyn BlockDevice>)> = as_dyn(&devs).into_iter().skip(2).collect();
    let e = Pool::open_on(named, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).err().expect("refused");
    assert!(e.msg.contains("mirror-0") && e.msg.contains("mem0") && e.msg.contains("mem1"), "{}", e.msg);
}

#[test]
fn a_child_whose_writes_fail_faults_and_the_pool_goes_on() {
    let (devs, pool) = mirror_pool(1, "1");
    let a = put(&pool, &pattern(400_000, 1));
    pool.sync().expect("sync");
    devs[1].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    let b = put(&pool, &pattern(400_000, 2));
    pool.sync().expect("the pool syncs on its good child");
    assert!(pool.core().txg.failure().is_none(), "not suspended");
    let st = pool.status();
    assert_eq!(st.state, "DEGRADED", "{st:?}");
    assert_eq!(st.vdevs[0].children[1].state, "FAULTED", "{st:?}");
    assert!(!pool.core().vdevs.get(0).expect("a top-level vdev").children[1].dtl.lock().is_empty(), "the faulted child's DTL records the txgs it missed");
    verified(&pool, "one child faulted");
    // The device comes back: reads of what it missed fail their checksum
    // there and are served by its sibling.
    pool.export().expect("export degraded");
    drop(pool);
    devs[1].set_config(FaultConfig::default());
    let pool = open(&devs).expect("reopen");
    assert_eq!(pool.root().read(a, 0, 400_000).expect("read a"), pattern(400_000, 1));
    assert_eq!(pool.root().read(b, 0, 400_000).expect("read b"), pattern(400_000, 2));
}

#[test]
fn layouts_zpool_refuses_are_refused() {
    let devs = mem_devs(4, 128 << 20, 3);
    let small = Arc::new(FaultDevice::new(96 << 20, 9).with_name("small"));
    let named = as_dyn(&devs);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let try_create = |tops: Vec<NewTop>| Pool::create_tops("tank", tops, vec![], &opts).err().expect("refused").msg;
    let m = |d: &[(String, Arc<dyn BlockDevice>)]| NewTop { layout: Layout::Mirror, devices: d.to_vec() };
    let e = try_create(vec![m(&named[..1])]);
    assert!(e.contains("mirror needs at least 2 devices, 1 given"), "{e}");
    let e = try_create(vec![m(&named[..2]), NewTop { layout: Layout::Plain, devices: named[2..3].to_vec() }]);
    assert!(e.contains("mismatched replication level") && e.contains("2-way mirror") && e.contains("plain device"), "{e}");
    let e = try_create(vec![m(&named[..2]), m(&named[1..3])]);
    assert!(e.contains("given twice"), "{e}");
    let e = try_create(vec![m(&[named[0].clone(), ("small".into(), small.clone() as Arc<dyn BlockDevice>)])]);
    assert!(e.contains("mismatched device sizes") && e.contains("'small'"), "{e}");
    let e = try_create(vec![m(&named[..2]), m(&named[2..4].iter().cloned().chain([("small".to_string(), small.clone() as Arc<dyn BlockDevice>)]).collect::<Vec<_>>())]);
    assert!(e.contains("2-way mirror") && e.contains("3-way mirror"), "{e}");
    // Nothing was written: no device carries a label.
    for d in &devs {
        assert!(tarn_engine::pool::label::read_labels(d.as_ref()).config.is_none(), "a refused create writes nothing");
    }
    // Forced, mismatched sizes are taken (the smallest decides).
    let forced = CreateOptions { force: true, ..opts.clone() };
    let pool = Pool::create_tops("tank", vec![m(&[named[0].clone(), ("small".into(), small as Arc<dyn BlockDevice>)])], vec![], &forced).expect("forced");
    assert!(pool.status().size < 96 << 20);
}

#[test]
fn an_offline_child_resilvers_only_what_it_missed() {
    let (devs, pool) = mirror_pool(1, "1");
    let old: Vec<u64> = (0..8u64).map(|i| put(&pool, &pattern(1 << 20, i))).collect();
    pool.sync().expect("sync");
    pool.offline("mem1", false).expect("offline");
    assert_eq!(pool.status().vdevs[0].children[1].state, "OFFLINE");
    let new: Vec<u64> = (0..2u64).map(|i| put(&pool, &pattern(1 << 20, 100 + i))).collect();
    pool.sync().expect("sync while offline");
    // The mark and the DTL outlive an export.
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    assert_eq!(pool.status().vdevs[0].children[1].state, "OFFLINE", "offline is kept across imports");
    assert!(!pool.core().vdevs.get(0).expect("a top-level vdev").children[1].dtl.lock().is_empty(), "so is the DTL");
    pool.online("mem1").expect("online");
    let rep = resilvered(&pool);
    eprintln!("{rep:?}");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    // About the 2 MiB written while it was out (and their metadata), not
    // the 10 MiB the pool holds.
    assert!(rep.repaired_bytes >= 2 << 20 && rep.repaired_bytes < 4 << 20, "resilvered {} bytes for 2 MiB missed: {rep:?}", rep.repaired_bytes);
    assert!(pool.core().vdevs.get(0).expect("a top-level vdev").children[1].dtl.lock().is_empty(), "done: nothing missed any more");
    // The resilvered child alone serves everything.
    pool.export().expect("export");
    drop(pool);
    let pool = Pool::open_on(as_dyn(&devs).into_iter().skip(1).collect(), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("the resilvered child alone");
    for (i, obj) in old.iter().enumerate() {
        assert!(pool.root().read(*obj, 0, 1 << 20).expect("read old") == pattern(1 << 20, i as u64));
    }
    for (i, obj) in new.iter().enumerate() {
        assert!(pool.root().read(*obj, 0, 1 << 20).expect("read new") == pattern(1 << 20, 100 + i as u64));
    }
    verified(&pool, "resilvered child alone");
}

#[test]
fn a_child_missing_at_import_resilvers_when_it_comes_back() {
    let (devs, pool) = mirror_pool(1, "1");
    put(&pool, &pattern(1 << 20, 1));
    pool.export().expect("export");
    drop(pool);
    // Imported and written without mem0.
    let pool = Pool::open_on(as_dyn(&devs).into_iter().skip(1).collect(), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("degraded");
    let b = put(&pool, &pattern(3 << 20, 2));
    pool.export().expect("export");
    drop(pool);
    // Both again: mem0's uberblocks are older; import resilvers it.
    let pool = open(&devs).expect("import both");
    let rep = resilvered(&pool);
    assert!(rep.repaired_bytes >= 3 << 20 && rep.repaired_bytes < 5 << 20, "{rep:?}");
    pool.export().expect("export");
    drop(pool);
    let pool = Pool::open_on(as_dyn(&devs[..1]), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("mem0 alone");
    assert!(pool.root().read(b, 0, 3 << 20).expect("read") == pattern(3 << 20, 2));
}

#[test]
fn offline_refuses_to_leave_a_vdev_without_replicas() {
    let (_devs, pool) = mirror_pool(1, "1");
    pool.offline("mem0", true).expect("one of two");
    let e = pool.offline("mem1", false).expect_err("refused");
    assert!(e.msg.contains("no valid replicas") && e.msg.contains("mem1"), "{}", e.msg);
    let e = pool.offline("nosuch", false).expect_err("refused");
    assert!(e.msg.contains("'nosuch'") && e.msg.contains("no such device"), "{}", e.msg);
    assert_eq!(pool.status().vdevs[0].children[1].state, "ONLINE", "nothing changed");
    pool.export().expect("export");
}

/// Regression (found by the mirror crash test, `crash/layouts.rs`): a
/// mirror child put back blank (a new disk in its place) or with its
/// labels overwritten made import refuse the whole pool ("'mem0' has no
/// valid tarn label") although its sibling held every block. Now such a
/// device counts as not found: the pool imports DEGRADED with that child
/// UNAVAIL and nothing written to the device; when the vdev cannot do
/// without it, the refusal names the missing leaves and why the device
/// given could not be used.
#[test]
fn a_blank_or_garbled_child_counts_as_missing() {
    let (devs, pool) = mirror_pool(2, "1");
    let data = pattern(300_000, 5);
    let obj = put(&pool, &data);
    pool.export().expect("export");
    drop(pool);
    let blank = Arc::new(FaultDevice::new(128 << 20, 11));
    let mut given = devs.clone();
    given[0] = blank.clone();
    let degraded = |given: &[Arc<FaultDevice>], what: &str| {
        let pool = open(given).unwrap_or_else(|e| panic!("{what}: the mirror imports without its first child: {e}"));
        assert!(pool.open_warnings().iter().any(|w| w.contains("'mem0' is UNAVAIL") && w.contains("no valid tarn label")), "{what}: {:?}", pool.open_warnings());
        assert!(pool.root().read(obj, 0, data.len()).expect("read") == data, "{what}: the sibling serves the data");
        let st = pool.status();
        assert_eq!((st.state.as_str(), st.vdevs[0].state.as_str()), ("DEGRADED", "DEGRADED"), "{what}: {st:#?}");
        let child = &st.vdevs[0].children[0];
        assert_eq!(child.state, "UNAVAIL", "{what}: {st:#?}");
        assert_eq!((child.read_errors, child.write_errors), (0, 0), "{what}: no I/O was sent to the missing child: {st:#?}");
        verified(&pool, what);
        pool.export().expect("export");
    };
    degraded(&given, "a blank device in mem0's place");
    assert!(tarn_engine::pool::label::read_labels(blank.as_ref()).config.is_none(), "the blank device was not written");

    // mem0 itself, its four labels overwritten with random bytes.
    let size = devs[0].size_bytes();
    for i in 0..4 {
        let off = tarn_ondisk::label::label_offset(i, size);
        devs[0].write_at(&pattern(tarn_ondisk::label::LABEL_SIZE as usize, i as u64), off).expect("garble a label");
    }
    degraded(&devs, "mem0 with garbled labels");

    // Without mem1 as well, mirror-0 has nothing left: refused, naming both.
    let e = open(&[devs[0].clone(), devs[2].clone(), devs[3].clone()]).err().expect("refused");
    assert!(e.msg.contains("mirror-0") && e.msg.contains("'mem1'") && e.msg.contains("'mem0' has no valid tarn label"), "{}", e.msg);
}

/// A 2-way mirror "tank" on two image files of 96 MiB in a directory of
/// its own, holding `data`, exported; the directory and the paths.
fn mirror_on_files(name: &str, data: &[u8]) -> (std::path::PathBuf, Vec<std::path::PathBuf>, u64) {
    let dir = std::env::temp_dir().join(format!("tarn-mirror-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let paths: Vec<std::path::PathBuf> = ["a.img", "b.img"].iter().map(|f| dir.join(f)).collect();
    let opts = CreateOptions { size: Some(96 << 20), tunables: small_tunables(), ..Default::default() };
    let tops = [tarn_engine::pool::vdevs::TopSpec { layout: Layout::Mirror, devices: paths.clone() }];
    let pool = Pool::create_layout("tank", &tops, &opts).expect("create a mirror on files");
    let obj = put(&pool, data);
    pool.export().expect("export");
    (dir, paths, obj)
}

/// Regression (found by `crates/cli/tests/mirror_mount.rs`): a mirror
/// child whose image file was deleted, or cut short (its front labels
/// kept), made `Pool::open` — the daemon's import of its cache file, and
/// `tarn inspect` — refuse the whole pool ("cannot open 'b.img'", "device 1
/// ('b.img') is smaller than the pool expects") although the other child
/// held every block. Now each is left out: the pool imports DEGRADED, the
/// child UNAVAIL saying why, and the import's warning says so.
#[test]
fn a_deleted_or_short_child_file_is_left_out() {
    let data = pattern(300_000, 8);
    for how in ["deleted", "short"] {
        let (dir, paths, obj) = mirror_on_files(how, &data);
        match how {
            "deleted" => std::fs::remove_file(&paths[1]).expect("delete b.img"),
            _ => std::fs::OpenOptions::new().write(true).open(&paths[1]).and_then(|f| f.set_len(80 << 20)).expect("cut b.img short"),
        }
        let pool = Pool::open(&paths, &OpenOptions { tunables: small_tunables(), ..Default::default() }).unwrap_or_else(|e| panic!("{how}: the mirror imports without b.img: {e}"));
        let st = pool.status();
        assert_eq!((st.state.as_str(), st.vdevs[0].children[1].state.as_str()), ("DEGRADED", "UNAVAIL"), "{how}: {st:#?}");
        let why = st.vdevs[0].children[1].fault.clone().unwrap_or_default();
        let want = if how == "deleted" { "No such file" } else { "smaller than the pool expects" };
        assert!(why.contains(want), "{how}: the child says why it is UNAVAIL: {why}");
        assert!(pool.open_warnings().iter().any(|w| w.contains("b.img") && w.contains(want)), "{how}: a warning says why: {:?}", pool.open_warnings());
        assert!(pool.root().read(obj, 0, data.len()).expect("read") == data, "{how}: a.img serves the data");
        verified(&pool, how);
        pool.export().expect("export");
        drop(pool);
        // Without a.img as well, nothing is left of mirror-0: refused, naming why.
        std::fs::remove_file(&paths[0]).expect("delete a.img");
        let e = Pool::open(&paths, &OpenOptions { tunables: small_tunables(), ..Default::default() }).err().expect("refused");
        assert!(e.msg.contains("a.img") && e.msg.contains("b.img"), "{how}: {}", e.msg);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Regression (found by the mirror crash test once DTLs were derived from
/// each leaf's newest uberblock at import): a power cut during the
/// uberblock writes of txg T can leave a child with all of T's blocks (they
/// were flushed before any uberblock) but not T's uberblock; import gives
/// it a DTL holding T. When its sibling missed T too (it had died before),
/// every child of the mirror had T in its DTL, reads skipped them all, and
/// blocks the first child held intact failed with "no child can be read"
/// (ENXIO), the resilver with them. A DTL says a child may lack a block,
/// not that it does: such a child is now read last, and the checksum
/// decides.
#[test]
fn a_block_every_child_may_have_missed_is_still_read() {
    let (devs, pool) = mirror_pool(2, "1");
    put(&pool, &pattern(100_000, 1));
    pool.sync().expect("sync");
    // mem0 dies here: it keeps what it had at this txg.
    let stale = Arc::new(devs[0].snapshot_durable());
    let files: Vec<(u64, Vec<u8>)> = (0..8u64).map(|i| {
        let d = pattern(256 << 10, 10 + i);
        (put(&pool, &d), d)
    }).collect();
    pool.sync().expect("sync");
    let t = pool.uberblock().txg;
    let mut imgs = common::durable(&devs);
    drop(pool);
    imgs[0] = stale;
    // mem1 holds txg t's blocks but lost its uberblock of t; mem2 and mem3
    // keep theirs, so import opens t.
    let size = tarn_ondisk::label::usable_device_size(imgs[1].size_bytes());
    for i in 0..4 {
        imgs[1].write_at(&[0u8; 4096], tarn_ondisk::label::ub_slot_offset(i, size, 12, t)).expect("erase an uberblock");
    }
    let pool = open(&imgs).expect("import");
    assert_eq!(pool.uberblock().txg, t, "import opens the newest txg");
    for (obj, data) in &files {
        let got = pool.root().read(*obj, 0, data.len()).unwrap_or_else(|e| panic!("object {obj}: {e}"));
        assert!(got == *data, "object {obj} reads back exactly");
    }
    let st = pool.scan_wait();
    assert!(st.report.errors.is_empty(), "the resilver at import finds a good copy of everything: {st:?}");
    let rep = pool.scrub().expect("scrub");
    assert!(rep.errors.is_empty() && rep.bad_copies == 0, "every child holds every block after the resilver: {rep:?}");
}
