//! How many reads a scrub keeps in flight (`pool::scan::issue`; OpenZFS's
//! `zfs_scan_vdev_limit`): bytes issued and not yet checked, per leaf. The
//! regression it pins: a scrub had four workers for the whole pool, each
//! reading a run and then checksumming it before it issued the next, so a
//! mirror's two devices had about two reads each and none queued while a
//! checksum ran, and a wider pool had fewer than one per device
//! (docs/benchmarks.md, "Scrub at the disks' speed").
//!
//! Invariants checked (counts of queued and active scrub reads, sampled
//! while every read is delayed by an injected 20 ms; no timing asserted):
//! - with the default limit (16 MiB), more scan reads are in flight than
//!   there are checking workers — reads are issued ahead of the checks;
//! - with the limit at 0, each leaf has at most one scan read in flight
//!   (two as the queue counts them, see the test);
//! - either way the scrub checks every copy and finds nothing bad;
//! - no scrub read is longer than `tarn_scan_read_max_bytes` (128 KiB by
//!   default: 1 MiB reads took 3× as long on image files), and a larger
//!   setting merges more copies per read.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::{filled, mem_devs, named, small_tunables};
use tarn_engine::io::inject::{Fault, InjectSpec, IoTypes, FREQ_ALWAYS};
use tarn_engine::io::IoClass;
use tarn_engine::pool::scan::SCAN_WORKERS;
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::{CreateOptions, Pool};

/// A 2-way mirror holding 16 objects of 512 KiB (8 MiB a device).
fn mirror() -> Pool {
    let devs = mem_devs(2, 128 << 20, 17);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: vec![named("a", &devs[0]), named("b", &devs[1])] }];
    let pool = Pool::create_tops("tank", tops, vec![], &CreateOptions { tunables: small_tunables(), ..Default::default() }).expect("create");
    filled(&pool, 16, 512 << 10, 5);
    pool
}

/// `mirror()`, every device read delayed by 20 ms.
fn slow_mirror() -> Pool {
    let pool = mirror();
    for d in ["a", "b"] {
        let spec = InjectSpec::new(Fault::Delay { ms: 20, lanes: None }, IoTypes::Read, FREQ_ALWAYS).expect("a valid spec");
        pool.inject(d, spec).expect("inject");
    }
    pool
}

/// Scrubs `pool`, sampling each leaf's scrub reads (queued and active)
/// meanwhile: the most seen at once on one leaf, and on all leaves.
fn scrub_sampled(pool: &Pool) -> (usize, usize, tarn_engine::pool::scan::ScanReport) {
    let leaves: Vec<_> = pool.core().leaves().into_iter().filter_map(|(_, l)| l.leaf_arc()).collect();
    assert_eq!(leaves.len(), 2, "a 2-way mirror");
    let done = AtomicBool::new(false);
    let (mut per_leaf, mut total) = (0, 0);
    let rep = std::thread::scope(|s| {
        let scrub = s.spawn(|| {
            let rep = pool.scrub().expect("scrub");
            done.store(true, Ordering::SeqCst);
            rep
        });
        while !done.load(Ordering::SeqCst) {
            let depths: Vec<usize> = leaves
                .iter()
                .map(|l| {
                    let c = &l.queue_stats().classes[IoClass::Scrub.index()];
                    c.queued + c.active as usize
                })
                .collect();
            per_leaf = per_leaf.max(depths.iter().copied().max().unwrap_or(0));
            total = total.max(depths.iter().sum());
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        scrub.join().expect("the scrub thread")
    });
    (per_leaf, total, rep)
}

#[test]
fn a_scrub_issues_reads_ahead_of_its_checks() {
    let pool = slow_mirror();
    let (_, total, rep) = scrub_sampled(&pool);
    assert!(rep.reads >= 16 && rep.bad_copies == 0 && rep.error_count == 0, "the scrub checks everything: {rep:?}");
    assert!(total > SCAN_WORKERS, "at most {total} scan reads in flight, no more than the {SCAN_WORKERS} checking workers: {rep:?}");
}

#[test]
fn a_limit_of_zero_keeps_one_scan_read_per_leaf() {
    let pool = slow_mirror();
    pool.set_tunables(&[("zfs_scan_vdev_limit", "0")]).expect("tunable");
    let (per_leaf, _, rep) = scrub_sampled(&pool);
    assert!(rep.reads >= 16 && rep.bad_copies == 0 && rep.error_count == 0, "the scrub checks everything: {rep:?}");
    // A read's completion hands its data to the checks before its issue
    // thread counts it complete in the queue, so the next run's read can
    // be queued while the last one is still counted active: two, at a
    // sampled moment, is one run at a time.
    assert!(per_leaf <= 2, "one run at a time on each leaf, yet {per_leaf} scan reads queued or active on one: {rep:?}");
}

#[test]
fn a_scrub_reads_at_most_tarn_scan_read_max_bytes_at_once() {
    let pool = mirror();
    let rep = pool.scrub().expect("scrub");
    assert!(rep.bad_copies == 0 && rep.error_count == 0, "{rep:?}");
    // No record is larger than 128 KiB, so no copy needs a longer read.
    assert!(rep.reads >= rep.bytes.div_ceil(128 << 10), "{} reads for {} bytes: some longer than 128 KiB; {rep:?}", rep.reads, rep.bytes);
    pool.set_tunables(&[("tarn_scan_read_max_bytes", "1M")]).expect("tunable");
    let merged = pool.scrub().expect("scrub");
    assert!(merged.reads < merged.bytes / (128 << 10), "1 MiB reads merge adjacent records: {} reads for {} bytes; {merged:?}", merged.reads, merged.bytes);
}
