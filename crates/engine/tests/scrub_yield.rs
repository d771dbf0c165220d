//! A scan yields to foreground I/O (`pool::scan::idle`; OpenZFS's
//! `zfs_scan_idle` with `zfs_scrub_delay` / `zfs_resilver_delay`): while a
//! dataset's reads reached the devices within `zfs_scan_idle_ms`, a scrub,
//! a resilver and a sequential rebuild issue one I/O at a time, each the
//! delay after the previous one; an idle pool scans at full depth. The
//! brief's random-read p99 (6.2× idle during a scrub, two image files on
//! one disk) is what this pins: the scheduler's per-leaf hold-back could
//! not see that both leaves share a disk.
//!
//! Invariants checked (counts, not timings — the one time bound is a
//! lower bound the delays impose, which no slow machine can break):
//! - foreground reads of a dataset's blocks note the pool's foreground
//!   clock; the scan's own reads do not;
//! - with foreground I/O recent, every scan I/O goes through the back-off
//!   gate (so at most one is in flight), and the scan takes at least the
//!   delays it owes; it still finishes and checks everything;
//! - with the foreground quiet, or the tunables at 0, no scan I/O backs
//!   off;
//! - the tunables refuse values out of range, naming the tunable.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{filled, mem_devs, named, reads_back, small_tunables};
use tarn_engine::pool::rebuild::ResilverKind::Sequential;
use tarn_engine::pool::scan::{ScanFunc, ScanState};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::FaultDevice;
use tarn_engine::{CreateOptions, Pool};

/// A 2-way mirror "tank" (devices "a", "b") holding 16 objects of 512 KiB:
/// twice the tests' 8 MiB ARC, so reading them all reaches the devices.
type Files = Vec<(u64, Vec<u8>)>;

fn pool() -> (Vec<Arc<FaultDevice>>, Pool, Files) {
    let devs = mem_devs(3, 128 << 20, 91);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &CreateOptions { tunables: small_tunables(), ..Default::default() }).expect("create");
    let files = filled(&pool, 16, 512 << 10, 3);
    (devs, pool, files)
}

/// Reads every object back (foreground reads, some from the devices) and
/// returns when the pool's foreground clock says it saw them.
fn read_in_foreground(pool: &Pool, files: &[(u64, Vec<u8>)]) -> u64 {
    reads_back(pool, files, "foreground");
    pool.core().foreground.last_ms().expect("a dataset's reads that reach the devices are foreground I/O")
}

#[test]
fn a_scrub_backs_off_while_foreground_reads_are_recent() {
    let (_devs, pool, files) = pool();
    // A window longer than the test: the foreground stays "recent".
    pool.set_tunables(&[("zfs_scan_idle_ms", "60000"), ("zfs_scrub_delay_ms", "5")]).expect("tunables");
    read_in_foreground(&pool, &files);
    let before = pool.scanner().yielded_ios();
    let t0 = Instant::now();
    let rep = pool.scrub().expect("scrub");
    let took = t0.elapsed();
    let yielded = pool.scanner().yielded_ios() - before;
    assert!(rep.reads > 10 && rep.bad_copies == 0 && rep.errors.is_empty(), "the scrub checks everything: {rep:?}");
    // Each worker takes a turn before it takes a run: the last turn of
    // each finds none left.
    let workers = tarn_engine::pool::scan::SCAN_WORKERS as u64;
    assert!((rep.reads..=rep.reads + workers).contains(&yielded), "every scan read went through the back-off gate, one at a time: {yielded} turns; {rep:?}");
    assert!(took >= Duration::from_millis(5 * (rep.reads - 1)), "{} reads, each 5 ms after the previous: {:?}", rep.reads, took);
}

#[test]
fn an_idle_pool_scrubs_at_full_depth_and_its_scrub_is_not_foreground() {
    let (_devs, pool, files) = pool();
    let last = read_in_foreground(&pool, &files);
    // Past the default window (50 ms) of the last foreground read.
    std::thread::sleep(Duration::from_millis(200));
    let before = pool.scanner().yielded_ios();
    let rep = pool.scrub().expect("scrub");
    assert!(rep.reads > 10, "{rep:?}");
    assert_eq!(pool.core().foreground.last_ms(), Some(last), "the scrub's own reads are not foreground I/O");
    assert_eq!(pool.scanner().yielded_ios(), before, "an idle pool scrubs at full depth");
}

#[test]
fn zero_turns_the_back_off_off() {
    let (_devs, pool, files) = pool();
    for off in [[("zfs_scan_idle_ms", "0"), ("zfs_scrub_delay_ms", "4")], [("zfs_scan_idle_ms", "60000"), ("zfs_scrub_delay_ms", "0")]] {
        pool.set_tunables(&off).expect("tunables");
        read_in_foreground(&pool, &files);
        let before = pool.scanner().yielded_ios();
        let rep = pool.scrub().expect("scrub");
        assert!(rep.reads > 10, "{rep:?}");
        assert_eq!(pool.scanner().yielded_ios(), before, "{off:?}: no scan I/O backs off");
    }
}

#[test]
fn a_rebuild_and_its_scrub_back_off_while_foreground_reads_are_recent() {
    let (devs, pool, files) = pool();
    pool.set_tunables(&[("zfs_scan_idle_ms", "60000"), ("zfs_resilver_delay_ms", "1"), ("zfs_scrub_delay_ms", "1")]).expect("tunables");
    read_in_foreground(&pool, &files);
    let before = pool.scanner().yielded_ios();
    pool.attach_device_on_as("a", "c", devs[2].clone(), false, Sequential).expect("attach -s");
    let st = pool.scan_wait();
    assert_eq!((st.func, st.state), (ScanFunc::Scrub, ScanState::Finished), "{st:?}");
    let rebuilt = st.rebuild.clone().expect("the rebuild beside its scrub");
    assert_eq!(rebuilt.errors, 0, "{st:?}");
    assert_eq!(st.report.bad_copies, 0, "the new child holds good copies: {st:?}");
    // The rebuild's copies (≥ one per MiB of 8 MiB) and the scrub's reads.
    let yielded = pool.scanner().yielded_ios() - before;
    assert!(yielded >= 8 + st.report.reads, "rebuild and scrub backed off: {yielded} I/Os; {st:?}");
    reads_back(&pool, &files, "after the rebuild");
}

#[test]
fn the_back_off_tunables_refuse_values_out_of_range() {
    let (_devs, pool, _files) = pool();
    for (name, bad) in [("zfs_scan_idle_ms", "60001"), ("zfs_scrub_delay_ms", "1001"), ("zfs_resilver_delay_ms", "2s")] {
        let err = pool.set_tunable(name, bad).expect_err(bad);
        assert!(err.to_string().contains(&format!("'{}'", name)), "{name}={bad}: {err}");
    }
    let t = tarn_engine::Tunables::default();
    assert_eq!((t.zfs_scan_idle_ms, t.zfs_scrub_delay_ms, t.zfs_resilver_delay_ms), (50, 4, 2), "OpenZFS's defaults, in ms");
}
