//! Scrub (issue 12, `pool::scan`): every copy of every block read and
//! checked; a damaged copy rewritten from a good one.
//!
//! Invariants checked:
//! - a scrub finds exactly the copies damaged, repairs each from a good
//!   copy, and a second scrub finds nothing (every copy verifies again);
//! - a block with no good copy is reported, not "repaired";
//! - frees and new writes during a scrub never meet a repair: the checker
//!   is clean and every object reads back exactly afterwards;
//! - a scrub in logical order (`zfs_scan_legacy` 1) finds and repairs
//!   exactly what a sorted one does, reading its copies unmerged.

mod common;

use std::sync::Arc;

use common::{blocks, corrupt, new_pool, pattern, put, verified};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::Pool;

/// Damages copy `k` of every block of each object (and of the dnode
/// array); returns how many copies were damaged.
fn damage_copy(devs: &[Arc<FaultDevice>], pool: &Pool, objs: &[u64], k: usize) -> u64 {
    let mut n = 0;
    for obj in objs.iter().copied().chain([0]) {
        for bp in blocks(pool, obj) {
            corrupt(devs, &bp.dva[k]);
            n += 1;
        }
    }
    n
}

#[test]
fn a_scrub_repairs_every_damaged_copy_and_the_next_finds_none() {
    let (devs, pool) = new_pool(1, &[("copies", "2")]);
    let files: Vec<(u64, Vec<u8>)> = (0..6u64).map(|i| {
        let d = pattern(200_000 + 50_000 * i as usize, i);
        (put(&pool, &d), d)
    }).collect();
    pool.sync().expect("sync");
    let objs: Vec<u64> = files.iter().map(|f| f.0).collect();
    let damaged = damage_copy(&devs, &pool, &objs, 0) + damage_copy(&devs, &pool, &objs[..2], 1);
    // Objects 0 and 1 had both copies of their data blocks damaged: lost.
    // (Their indirect blocks and the dnode blocks, metadata, have a third
    // copy.)
    let lost: u64 = objs[..2].iter().map(|&o| blocks(&pool, o).iter().filter(|bp| bp.level == 0).count() as u64).sum();
    assert!(lost >= 4);
    let rep = pool.scrub().expect("scrub");
    eprintln!("{rep:?}");
    assert_eq!(rep.bad_copies, damaged, "every damaged copy is found, no other");
    assert_eq!(rep.repaired_copies, damaged - 2 * lost, "repaired: every damaged copy of a block with a good one");
    assert_eq!(rep.errors.len() as u64, lost, "the blocks with no good copy are reported: {:?}", rep.errors);
    assert!(rep.copies >= 2 * rep.blocks, "every block has at least two copies here, all read: {rep:?}");
    assert!(rep.reads < rep.copies, "adjacent copies are read as one extent: {rep:?}");

    let again = pool.scrub().expect("scrub");
    assert_eq!(again.bad_copies, 2 * lost, "only the lost blocks' copies still fail: {again:?}");
    assert_eq!(again.repaired_copies, 0);
    for (obj, data) in &files[2..] {
        assert!(pool.root().read(*obj, 0, data.len()).expect("read") == *data, "object {obj} reads back exactly");
    }
}

#[test]
fn a_scrub_of_a_healthy_pool_finds_and_writes_nothing() {
    let (_devs, pool) = new_pool(2, &[]);
    for i in 0..4u64 {
        put(&pool, &pattern(100_000, i));
    }
    pool.sync().expect("sync");
    let rep = pool.scrub().expect("scrub");
    assert!(rep.blocks >= 4 + 3 && rep.copies > rep.blocks, "four data blocks and their metadata, which has more copies: {rep:?}");
    assert_eq!((rep.bad_copies, rep.repaired_copies), (0, 0), "{rep:?}");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    verified(&pool, "after a clean scrub");
}

/// The pool changes under a scan: between the scan's walk and its reads
/// every object is overwritten and five txgs sync, so the blocks the scan
/// gathered are freed; it still reads them (one copy of each damaged) and
/// repairs them, and nothing it writes reaches the new data. (That the
/// freed blocks cannot be reallocated meanwhile is the allocator's hold,
/// pinned by `metaslab::tests::a_scan_hold_keeps_later_frees_deferred_until_released`;
/// here the allocator would not reach them anyway, its cursor moving on.)
#[test]
fn writes_and_frees_during_a_scrub_never_meet_its_repairs() {
    let (devs, pool) = new_pool(1, &[("copies", "2")]);
    let objs: Vec<u64> = (0..8u64).map(|i| put(&pool, &pattern(400_000, i))).collect();
    pool.sync().expect("sync");
    let damaged = damage_copy(&devs, &pool, &objs, 1);
    let os = pool.root();
    let new = |i: usize| pattern(400_000, 1000 + i as u64);
    let rep = pool
        .scrub_pausing(&mut || {
            for (i, obj) in objs.iter().enumerate() {
                let tx = os.begin().expect("begin");
                os.write(&tx, *obj, 0, &new(i)).expect("overwrite");
                drop(tx);
            }
            for _ in 0..5 {
                pool.sync().expect("sync");
                put(&pool, &pattern(400_000, 77));
            }
        })
        .expect("scrub");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!((rep.bad_copies, rep.repaired_copies), (damaged, damaged), "the old blocks were still there to read and repair: {rep:?}");
    for (i, obj) in objs.iter().enumerate() {
        assert!(os.read(*obj, 0, 400_000).expect("read") == new(i), "object {obj} holds its new data");
    }
    verified(&pool, "after writes during a scrub");
    let rep = pool.scrub().expect("scrub");
    assert_eq!(rep.bad_copies, 0, "{rep:?}");
}

/// A one-device pool holding `n` objects of 256 KiB, synced.
fn pool_of_objects(n: u64) -> Pool {
    let (_devs, pool) = new_pool(1, &[]);
    for i in 0..n {
        put(&pool, &pattern(256 << 10, i));
    }
    pool.sync().expect("sync");
    pool
}

/// Starts a scrub on a thread of `s` that stops after gathering its
/// blocks until `go` receives; returns once the scan is running.
fn held_scan<'s>(s: &'s std::thread::Scope<'s, '_>, pool: &'s Pool, go: std::sync::mpsc::Receiver<()>) -> std::thread::ScopedJoinHandle<'s, tarn_engine::pool::scan::ScanReport> {
    let scan = s.spawn(move || pool.scrub_pausing(&mut || go.recv().expect("go")).expect("scrub"));
    while pool.scan_status().state != tarn_engine::pool::scan::ScanState::Scanning {
        std::thread::yield_now();
    }
    scan
}

/// The background scan: one at a time, cancelable, stopped by close; its
/// status says where it is and what it found.
#[test]
fn a_background_scrub_is_one_at_a_time_cancelable_and_stopped_by_export() {
    use tarn_engine::pool::scan::ScanState;
    let pool = pool_of_objects(40);
    assert_eq!(pool.scan_status().state, ScanState::None);
    assert!(pool.status().scan.is_none(), "no scan line before the first scrub");
    // A scan held at its pause: a second one is refused meanwhile.
    let (go, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let first = held_scan(s, &pool, wait);
        let err = pool.scrub_start().expect_err("a second scrub while one runs");
        assert!(err.msg.contains("currently scrubbing"), "{err}");
        go.send(()).expect("go");
        first.join().expect("first scrub");
    });
    pool.scrub_start().expect("start");
    let done = pool.scan_wait();
    assert_eq!(done.state, ScanState::Finished);
    assert!(done.report.bytes >= 40 * (256 << 10) && done.end_time >= done.start_time, "{done:?}");
    assert!(pool.scrub_cancel().is_err(), "no scrub to cancel");
    pool.scrub_start().expect("start again");
    pool.scrub_cancel().expect("cancel");
    assert_eq!(pool.scan_status().state, ScanState::Canceled);
    pool.scrub_start().expect("start again");
    pool.export().expect("export stops the scan first");
    let st = pool.scan_status();
    assert!(matches!(st.state, ScanState::Scanning | ScanState::Finished), "an export stops a scan without ending it: {st:?}");
    assert!(pool.scrub_start().is_err(), "no scan starts on an exported pool");
}

/// `scrub -p` pauses a scan before its next extent (it reads nothing
/// while paused) and `scrub` resumes it; `-p` with no scan is an error.
#[test]
fn a_paused_scrub_reads_nothing_until_resumed() {
    use tarn_engine::pool::scan::ScanState;
    let pool = pool_of_objects(8);
    assert!(pool.scrub_pause().is_err(), "nothing to pause");
    let (go, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let scan = held_scan(s, &pool, wait);
        pool.scrub_pause().expect("pause");
        go.send(()).expect("go");
        std::thread::sleep(std::time::Duration::from_millis(200));
        let st = pool.scan_status();
        assert!(st.state == ScanState::Scanning && st.paused_since != 0 && st.examined == 0, "paused before its first extent: {st:?}");
        pool.scrub_start().expect("resume");
        let rep = scan.join().expect("scan");
        assert!(rep.bytes >= 8 * (256 << 10) && rep.bad_copies == 0, "{rep:?}");
    });
    let st = pool.scan_status();
    assert!(st.state == ScanState::Finished && st.paused_since == 0, "{st:?}");
}

/// Objects with the data each holds.
type Files = Vec<(u64, Vec<u8>)>;

/// A pool with damaged copies, exported: on a mirror, child 1's copies
/// of the first three objects' data and child 0's of the others'; on one
/// device with `copies=2`, copy 0 of every block of the first three
/// objects (and of the dnode array) and copy 1 of the others'. Its
/// devices, the objects with their data, and how many copies were damaged.
fn damaged_pool(mirror: bool) -> (Vec<Arc<FaultDevice>>, Files, u64) {
    let (devs, pool) = if mirror { common::mirror_pool(1, "1") } else { new_pool(1, &[("copies", "2")]) };
    let files: Files = (0..6u64).map(|i| {
        let d = pattern(300_000 + 40_000 * i as usize, i);
        (put(&pool, &d), d)
    }).collect();
    pool.sync().expect("sync");
    let objs: Vec<u64> = files.iter().map(|f| f.0).collect();
    let damaged = if mirror {
        // Data copies only: the walk reads metadata through the mirror,
        // which heals what it reads.
        let mut n = 0;
        for (k, &o) in objs.iter().enumerate() {
            for bp in blocks(&pool, o).into_iter().filter(|bp| bp.level == 0) {
                let d = &devs[usize::from(k < 3)];
                d.write_at(&[0x5Au8; 512], bp.dva[0].offset).expect("damage");
                d.flush().expect("flush");
                n += 1;
            }
        }
        n
    } else {
        damage_copy(&devs, &pool, &objs[..3], 0) + damage_copy(&devs, &pool, &objs[3..], 1)
    };
    pool.export().expect("export");
    (devs, files, damaged)
}

/// The report of one scrub in the order `legacy` says of a pool on `devs`;
/// a second scrub finds nothing and every object reads back.
fn scrubbed_in_order(devs: &[Arc<FaultDevice>], files: &[(u64, Vec<u8>)], legacy: u32) -> tarn_engine::pool::scan::ScanReport {
    use tarn_engine::pool::scan::ScanOrder;
    let pool = common::open_legacy(devs, legacy);
    let rep = pool.scrub().expect("scrub");
    let want = if legacy == 1 { ScanOrder::Logical } else { ScanOrder::Sorted };
    assert_eq!(pool.scan_status().order, want, "the scrub's recorded order");
    let again = pool.scrub().expect("scrub");
    assert_eq!((again.bad_copies, again.error_count), (0, 0), "legacy {legacy}: the first scrub left nothing: {again:?}");
    for (obj, data) in files {
        assert!(pool.root().read(*obj, 0, data.len()).expect("read") == *data, "object {obj} reads back exactly");
    }
    verified(&pool, "after scrubs in either order");
    rep
}

/// `zfs_scan_legacy` 1: the scrub reads copies as the walk found their
/// blocks, so copies that the sorted scrub merges into one read (adjacent
/// blocks of a file) are read one by one — on a mirror exactly one read
/// per copy, its children alternating — and it finds and repairs the same
/// damage: every damaged copy, each from a good one, same figures. (Both
/// scrubs run on copies of the same damaged devices.)
#[test]
fn both_scan_orders_find_and_repair_the_same_damage() {
    for mirror in [false, true] {
        let (devs, files, damaged) = damaged_pool(mirror);
        let sorted = scrubbed_in_order(&common::durable(&devs), &files, 0);
        let logical = scrubbed_in_order(&common::durable(&devs), &files, 1);
        for (what, r) in [("sorted", &sorted), ("logical", &logical)] {
            assert_eq!((r.bad_copies, r.repaired_copies, r.error_count), (damaged, damaged, 0), "mirror {mirror}, {what}: every damaged copy found and repaired: {r:?}");
        }
        let figures = |r: &tarn_engine::pool::scan::ScanReport| (r.blocks, r.copies, r.bytes, r.repaired_bytes);
        assert_eq!(figures(&sorted), figures(&logical), "mirror {mirror}: the same copies checked and bytes repaired: {sorted:?} {logical:?}");
        assert!(sorted.reads < sorted.copies && logical.reads > sorted.reads, "mirror {mirror}: sorted reads merge, logical ones do not: {sorted:?} {logical:?}");
        if mirror {
            assert_eq!(logical.reads, logical.copies, "in logical order a mirror's children alternate: {logical:?}");
        }
    }
}
