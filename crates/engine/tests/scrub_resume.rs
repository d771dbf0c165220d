//! Scrub across export, import and power cuts (issue 12: the scan record
//! of `pool::scan`). A scan keeps its figures and its position — every
//! copy at or before it checked — in the MOS, and continues from there.
//!
//! Invariants checked:
//! - a scrub stopped by export continues at import: damage placed after
//!   its position is found and repaired, damage placed before it is not
//!   (that copy was checked already), and damage there from the start is
//!   counted exactly once by the two passes together;
//! - a paused scrub stays paused across export and import, its figures
//!   unchanged, until `scrub_start` resumes it; its rate is then measured
//!   over the new pass, not over the figures it inherited; a read-only
//!   import shows it and does not wait for it;
//! - a finished or canceled scrub is what the pool shows after import; a
//!   pool that never scrubbed shows none;
//! - after a power cut mid-scrub the pool imports, the scrub continues
//!   from the position last synced and finishes, and every damaged copy
//!   is whole;
//! - on a mirror the position counts each child's copies apart: a copy
//!   on a child the position has passed is not read again, one after it
//!   is repaired from the other child;
//! - a finished resilver is kept as the pool's last scan across export and
//!   import, and a scrub can start after it;
//! - a scrub in logical order (`zfs_scan_legacy`), which keeps no position,
//!   starts over at import: every copy checked again, its figures from
//!   zero; a scrub keeps the order it started with whatever the tunable
//!   says at import.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{blocks, corrupt, durable, mirror_pool, new_pool, open, pattern, put, verified};
use tarn_engine::pool::scan::{ScanFunc, ScanOrder, ScanPosition, ScanState, ScanStatus};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::Pool;
use tarn_ondisk::bp::Dva;

const OBJECTS: u64 = 48;
const OBJECT_BYTES: usize = 512 << 10;
const LIMIT: &str = "tarn_scan_limit_bytes_per_sec";

/// A `copies=2` pool holding `OBJECTS` objects of `OBJECT_BYTES`, synced
/// (48 MiB of copies on its one device); their ids.
fn pool_of_objects() -> (Vec<Arc<FaultDevice>>, Pool, Vec<u64>) {
    let (devs, pool) = new_pool(1, &[("copies", "2"), ("compression", "off")]);
    let objs = (0..OBJECTS).map(|i| put(&pool, &pattern(OBJECT_BYTES, i))).collect();
    pool.sync().expect("sync");
    (devs, pool, objs)
}

/// Whether `a` comes after `pos` in the order of a sorted scrub.
fn passed(a: &ScanPosition, pos: &ScanPosition) -> bool {
    ScanOrder::Sorted.key(a) > ScanOrder::Sorted.key(pos)
}

fn until(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(120), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts a scrub reading at most `rate` a second and waits until it has
/// checked `percent` % of what it reads; its status then.
fn scrub_until(pool: &Pool, rate: &str, percent: u64) -> ScanStatus {
    pool.set_tunable(LIMIT, rate).expect("rate limit");
    pool.scrub_start().expect("start");
    until(&format!("the scrub to check {percent} %"), || {
        let s = pool.scan_status();
        s.state != ScanState::Scanning || s.to_examine > 0 && s.examined * 100 >= s.to_examine * percent
    });
    let s = pool.scan_status();
    assert_eq!(s.state, ScanState::Scanning, "the scrub ended before {percent} %: {s:?}");
    s
}

/// A copy of a block (on a plain device: child 0): the block (object,
/// index) and which copy.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CopyOf {
    block: (u64, usize),
    dva: Dva,
}

impl CopyOf {
    fn key(&self) -> ScanPosition {
        ScanPosition { vdev: self.dva.vdev, child: 0, offset: self.dva.offset }
    }
}

/// The data blocks (level 0) of object `o`. Damage is placed on data
/// only: the walk of a scan reads metadata through the vdevs, and a
/// mirror heals what it reads.
fn data_blocks(pool: &Pool, o: u64) -> Vec<tarn_ondisk::bp::BlockPtr> {
    blocks(pool, o).into_iter().filter(|bp| bp.level == 0).collect()
}

/// Every copy of every data block of `objs`.
fn copies(pool: &Pool, objs: &[u64]) -> Vec<CopyOf> {
    let mut out = Vec::new();
    for &o in objs {
        for (i, bp) in data_blocks(pool, o).iter().enumerate() {
            out.extend(bp.dva.iter().filter(|d| !d.is_empty()).map(|&dva| CopyOf { block: (o, i), dva }));
        }
    }
    out
}

/// Damages copy 1 of every data block of `objs`; how many copies.
fn damage_second_copies(devs: &[Arc<FaultDevice>], pool: &Pool, objs: &[u64]) -> u64 {
    let all = copies(pool, objs);
    let second: Vec<&CopyOf> = all.iter().filter(|c| data_blocks(pool, c.block.0)[c.block.1].dva[1] == c.dva).collect();
    second.iter().for_each(|c| corrupt(devs, &c.dva));
    second.len() as u64
}

fn read_back(pool: &Pool, objs: &[u64]) {
    for (i, &o) in objs.iter().enumerate() {
        assert!(pool.root().read(o, 0, OBJECT_BYTES).expect("read") == pattern(OBJECT_BYTES, i as u64), "object {o} reads back exactly");
    }
}

#[test]
fn a_scrub_stopped_by_export_continues_from_its_position_after_import() {
    let (devs, pool, objs) = pool_of_objects();
    let damaged = damage_second_copies(&devs, &pool, &objs[..OBJECTS as usize / 2]);
    // The other half's copies are all good until the scan is stopped.
    let spare = copies(&pool, &objs[OBJECTS as usize / 2..]);
    let mid = scrub_until(&pool, "8M", 30);
    pool.export().expect("export");
    let saved = pool.scan_status();
    assert!(saved.state == ScanState::Scanning && saved.paused_since == 0, "an export leaves the scan running: {saved:?}");
    assert!(saved.examined >= mid.examined && saved.examined < saved.to_examine, "stopped part way: {saved:?}");
    let pos = saved.position.expect("a position once copies were checked");
    // Between the passes: one copy the first pass checked is damaged, and
    // one copy of another block that it did not reach.
    let before = *spare.iter().find(|c| !passed(&c.key(), &pos)).expect("a copy of the second half at or before the position");
    let after = *spare.iter().find(|c| passed(&c.key(), &pos) && c.block != before.block).expect("a copy of another block after the position");
    corrupt(&devs, &before.dva);
    corrupt(&devs, &after.dva);
    drop(pool);

    let pool = open(&devs).expect("import");
    let resumed = pool.scan_status();
    assert!(resumed.state == ScanState::Scanning && resumed.start_time == saved.start_time && resumed.report.txg == saved.report.txg, "the same scan continues: {resumed:?}");
    assert!(resumed.examined >= saved.examined, "its figures continue from the saved ones: {resumed:?}");
    let done = pool.scan_wait();
    let r = &done.report;
    assert!(done.state == ScanState::Finished && done.resumes == 1, "{done:?}");
    assert_eq!(r.bad_copies, damaged + 1, "the damage from the start once, and the copy after the position: {r:?}");
    assert_eq!((r.repaired_copies, r.error_count), (r.bad_copies, 0), "{r:?}");
    assert_eq!(done.examined, done.to_examine, "{done:?}");

    let again = pool.scrub().expect("scrub");
    assert_eq!((again.bad_copies, again.repaired_copies), (1, 1), "only the copy damaged before the position was left, not read again: {again:?}");
    read_back(&pool, &objs);
    verified(&pool, "after a resumed scrub");
}

#[test]
fn a_paused_scrub_stays_paused_across_export_and_import() {
    let (devs, pool, objs) = pool_of_objects();
    scrub_until(&pool, "8M", 50);
    pool.scrub_pause().expect("pause");
    // The reads in flight end; then nothing more is read, export included.
    std::thread::sleep(Duration::from_millis(500));
    let quiet = pool.scan_status();
    pool.export().expect("export");
    let saved = pool.scan_status();
    assert!(saved.state == ScanState::Scanning && saved.paused_since != 0, "{saved:?}");
    assert_eq!(saved.examined, quiet.examined, "export reads nothing of a paused scrub");
    drop(pool);

    // Read-only, the scrub is shown and nothing waits for it.
    let ro = tarn_engine::OpenOptions { readonly: true, tunables: common::small_tunables(), ..Default::default() };
    let pool = Pool::open_on(common::as_dyn(&devs), vec![], &ro).expect("read-only import");
    let st = pool.scan_wait();
    assert!(st.state == ScanState::Scanning && st.examined == saved.examined, "{st:?}");
    assert!(pool.scrub_start().is_err() && pool.scrub_cancel().is_err(), "a read-only pool runs no scrub");
    drop(pool);

    let pool = open(&devs).expect("import");
    let st = pool.scan_status();
    assert!(st.state == ScanState::Scanning && st.paused_since == saved.paused_since, "still paused: {st:?}");
    assert!(st.examined == saved.examined && st.position == saved.position && st.to_examine == saved.to_examine, "its figures as saved: {st:?} {saved:?}");
    assert!(pool.status().scan.is_some(), "status shows the paused scrub");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pool.scan_status().examined, saved.examined, "nothing is read while paused");

    pool.set_tunable(LIMIT, "1M").expect("limit");
    pool.scrub_start().expect("resume");
    until("a rate for the new pass", || pool.scan_status().rate_bytes_per_sec > 0);
    let s = pool.scan_status();
    // At 1 MiB/s (and one extent per worker ahead) the pass reads a few
    // MiB in its first seconds; the 24 MiB inherited would make any rate
    // over the pass's time ≥ 12 MiB/s.
    assert!(s.paused_since == 0 && s.rate_bytes_per_sec < 6 << 20 && s.eta_secs.is_some(), "the rate is the new pass's: {s:?}");
    pool.set_tunable(LIMIT, "0").expect("no limit");
    let done = pool.scan_wait();
    assert!(done.state == ScanState::Finished && done.resumes == 1 && done.examined == done.to_examine, "{done:?}");
    assert_eq!((done.report.bad_copies, done.report.error_count), (0, 0), "{done:?}");
    read_back(&pool, &objs);
}

#[test]
fn finished_and_canceled_scrubs_are_kept_across_export_and_import() {
    let (devs, pool, _) = pool_of_objects();
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    assert!(pool.scan_status().state == ScanState::None && pool.status().scan.is_none(), "a pool that never scrubbed has no scan record");

    pool.scrub().expect("scrub");
    let fin = pool.scan_status();
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    let st = pool.status().scan.expect("the finished scrub is shown");
    assert!(st.state == ScanState::Finished && st.end_time == fin.end_time && st.start_time == fin.start_time, "{st:?}");
    let (a, b) = (&st.report, &fin.report);
    assert!(a.copies == b.copies && a.bytes == b.bytes && a.txg == b.txg && a.error_count == 0, "{a:?} {b:?}");
    assert!((a.seconds - b.seconds).abs() < 0.002, "its time, to the millisecond: {a:?} {b:?}");

    scrub_until(&pool, "4M", 5);
    pool.scrub_cancel().expect("cancel");
    let canceled = pool.scan_status();
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    let st = pool.scan_status();
    assert!(st.state == ScanState::Canceled && st.end_time == canceled.end_time && st.examined == canceled.examined, "{st:?}");

    // A scrub restored paused is canceled without a pass to stop.
    scrub_until(&pool, "4M", 5);
    pool.scrub_pause().expect("pause");
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    pool.scrub_cancel().expect("cancel the restored scrub");
    assert!(pool.scrub_cancel().is_err(), "nothing left to cancel");
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    assert_eq!(pool.scan_status().state, ScanState::Canceled);
}

#[test]
fn a_scrub_continues_after_a_power_cut() {
    let (devs, pool, objs) = pool_of_objects();
    let damaged = damage_second_copies(&devs, &pool, &objs);
    scrub_until(&pool, "8M", 30);
    let before = pool.scan_status();
    pool.sync().expect("sync");
    // Power lost on the device now: what is durable is all there is.
    let cut = durable(&devs);
    drop(pool);

    let pool = open(&cut).expect("import after the power cut");
    let st = pool.scan_status();
    assert!(st.state == ScanState::Scanning && st.start_time == before.start_time && st.examined >= before.examined, "continues from the synced figures: {st:?} {before:?}");
    let done = pool.scan_wait();
    let r = &done.report;
    assert!(done.state == ScanState::Finished && done.resumes == 1 && r.error_count == 0, "{done:?}");
    // A repair made after the last sync but before the cut is durable
    // while its run was not recorded: the second pass finds that copy
    // good, so the count may fall short of the damage, never exceed it.
    assert!(r.bad_copies <= damaged && r.repaired_copies == r.bad_copies && r.bad_copies > 0, "{r:?} of {damaged} damaged");
    let again = pool.scrub().expect("scrub");
    assert_eq!(again.bad_copies, 0, "every damaged copy was repaired by one pass or the other: {again:?}");
    read_back(&pool, &objs);
    verified(&pool, "after a scrub across a power cut");
}

#[test]
fn a_mirror_scrub_continues_child_by_child() {
    let (devs, pool) = mirror_pool(1, "1");
    let objs: Vec<u64> = (0..OBJECTS).map(|i| put(&pool, &pattern(OBJECT_BYTES, i))).collect();
    pool.sync().expect("sync");
    // Every data copy on each child: (its key, the block it is of).
    let mut copies = Vec::new();
    for &o in &objs {
        for (i, bp) in data_blocks(&pool, o).iter().enumerate() {
            for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
                copies.extend((0..2u32).map(|child| (ScanPosition { vdev: dva.vdev, child, offset: dva.offset }, (o, i))));
            }
        }
    }
    scrub_until(&pool, "8M", 30);
    pool.export().expect("export");
    let saved = pool.scan_status();
    let pos = saved.position.expect("a position");
    assert!(saved.state == ScanState::Scanning && saved.examined < saved.to_examine, "{saved:?}");
    let before = *copies.iter().find(|c| !passed(&c.0, &pos)).expect("a copy at or before the position");
    let after = *copies.iter().find(|c| passed(&c.0, &pos) && c.1 != before.1).expect("a copy of another block after it");
    for (key, _) in [before, after] {
        let d = &devs[2 * key.vdev as usize + key.child as usize];
        d.write_at(&[0x5Au8; 512], key.offset).expect("damage");
        d.flush().expect("flush");
    }
    drop(pool);

    let pool = open(&devs).expect("import");
    let done = pool.scan_wait();
    assert!(done.state == ScanState::Finished && done.resumes == 1, "{done:?}");
    assert_eq!((done.report.bad_copies, done.report.repaired_copies, done.report.error_count), (1, 1, 0), "the copy after the position, from the other child: {done:?}");
    let again = pool.scrub().expect("scrub");
    assert_eq!((again.bad_copies, again.repaired_copies), (1, 1), "the copy before the position was not read again: {again:?}");
    read_back(&pool, &objs);
    verified(&pool, "after a resumed mirror scrub");
}

#[test]
fn a_finished_resilver_is_the_last_scan_after_import() {
    let (devs, pool) = mirror_pool(1, "1");
    (0..4u64).for_each(|i| {
        put(&pool, &pattern(1 << 20, i));
    });
    pool.sync().expect("sync");
    pool.offline("mem1", false).expect("offline");
    put(&pool, &pattern(1 << 20, 9));
    pool.sync().expect("sync while offline");
    pool.online("mem1").expect("online");
    let done = pool.scan_wait();
    assert!(done.func == ScanFunc::Resilver && done.state == ScanState::Finished && done.report.repaired_bytes >= 1 << 20, "{done:?}");
    pool.export().expect("export");
    drop(pool);

    let pool = open(&devs).expect("import");
    let st = pool.status().scan.expect("the resilver is shown");
    assert!(st.func == ScanFunc::Resilver && st.state == ScanState::Finished && st.end_time == done.end_time, "{st:?}");
    assert_eq!(st.report.repaired_bytes, done.report.repaired_bytes);
    let rep = pool.scrub().expect("a scrub after it");
    assert_eq!((rep.bad_copies, rep.error_count), (0, 0), "{rep:?}");
}

/// A scrub in logical order knows which copies it checked only by their
/// place in a walk of a tree that changes, so it keeps no position: one
/// stopped by an export starts over at import (imported with the sorted
/// default: the record keeps its order). Its figures start from zero and
/// it checks every copy again — each copy damaged before the export is
/// damaged again, including those the first pass had repaired, and the
/// second pass finds and repairs them all.
#[test]
fn a_scrub_in_logical_order_starts_over_after_import() {
    let (devs, pool, objs) = pool_of_objects();
    let damaged = damage_second_copies(&devs, &pool, &objs);
    pool.set_tunable("zfs_scan_legacy", "1").expect("legacy");
    let mid = scrub_until(&pool, "8M", 30);
    assert!(mid.order == ScanOrder::Logical && mid.position.is_none(), "{mid:?}");
    pool.export().expect("export");
    let saved = pool.scan_status();
    assert!(saved.state == ScanState::Scanning && saved.examined >= mid.examined && saved.examined < saved.to_examine, "stopped part way: {saved:?}");
    let first = saved.report.repaired_copies;
    assert!(first > 0 && first < damaged, "the first pass repaired some of the damage, not all: {saved:?}");
    assert!(saved.position.is_none(), "no position in logical order: {saved:?}");
    assert_eq!(damage_second_copies(&devs, &pool, &objs), damaged, "the same copies damaged again");
    drop(pool);

    let pool = open(&devs).expect("import");
    let done = pool.scan_wait();
    let r = &done.report;
    assert!(done.state == ScanState::Finished && done.order == ScanOrder::Logical && done.resumes == 1 && done.start_time == saved.start_time, "{done:?}");
    assert!(r.txg >= saved.report.txg && done.position.is_none(), "{done:?}");
    let restarts = pool.events().since(None).0.into_iter().filter(|e| e.class == tarn_engine::pool::events::class::SCRUB_START && e.number("scan_txg") == Some(r.txg)).count();
    assert_eq!(restarts, 1, "the new pass says it starts over, on the tree of txg {}", r.txg);
    assert_eq!((r.bad_copies, r.repaired_copies, r.error_count), (damaged, damaged, 0), "every damaged copy found by the new pass, once: {r:?}");
    assert!(done.examined == done.to_examine && r.copies >= 2 * OBJECTS, "figures of one whole pass: {done:?}");
    let again = pool.scrub().expect("scrub");
    assert_eq!(again.bad_copies, 0, "{again:?}");
    read_back(&pool, &objs);
    verified(&pool, "after a scrub in logical order started over");
}

/// The order is the scan's, fixed when it starts: a sorted scrub stopped
/// by an export continues sorted from its position after an import with
/// `zfs_scan_legacy` 1 (a logical pass would have no use for the position).
#[test]
fn a_scrub_keeps_its_order_across_import() {
    let (devs, pool, objs) = pool_of_objects();
    scrub_until(&pool, "8M", 30);
    pool.export().expect("export");
    let saved = pool.scan_status();
    let pos = saved.position.expect("a sorted scrub has a position");
    drop(pool);

    let pool = common::open_legacy(&devs, 1);
    let done = pool.scan_wait();
    assert!(done.state == ScanState::Finished && done.order == ScanOrder::Sorted && done.resumes == 1, "{done:?}");
    assert!(done.position.is_some_and(|p| passed(&p, &pos)) && done.report.txg == saved.report.txg, "continued from its position: {done:?} {saved:?}");
    assert_eq!(done.examined, done.to_examine, "{done:?}");
    assert_eq!(pool.scrub().expect("scrub").bad_copies, 0);
    assert_eq!(pool.scan_status().order, ScanOrder::Logical, "a new scrub takes the tunable");
    read_back(&pool, &objs);
}

/// A sorted scrub reads every leaf at once, each in ascending offsets
/// (1 MiB windows of offsets, each on every leaf in turn): when a mirror's
/// scrub has checked 30 %, both children have given about as many bytes.
/// (Leaf after leaf, child 1 would have given none yet: a scrub of a
/// mirror of two disks kept one of them idle.)
#[test]
fn a_sorted_scrub_reads_the_children_of_a_mirror_at_once() {
    let (devs, pool) = mirror_pool(1, "1");
    (0..OBJECTS).for_each(|i| {
        put(&pool, &pattern(OBJECT_BYTES, i));
    });
    pool.sync().expect("sync");
    let read = || devs.iter().map(|d| d.stats().bytes_read).collect::<Vec<u64>>();
    let before = read();
    let mid = scrub_until(&pool, "8M", 30);
    let after = read();
    let (a, b) = (after[0] - before[0], after[1] - before[1]);
    assert!(a.min(b) * 3 >= a.max(b) && a + b >= mid.examined, "both children read alike: {a} and {b} bytes, {mid:?}");
    pool.set_tunable(LIMIT, "0").expect("no limit");
    let done = pool.scan_wait();
    assert!(done.state == ScanState::Finished && done.order == ScanOrder::Sorted && done.report.bad_copies == 0, "{done:?}");
}
