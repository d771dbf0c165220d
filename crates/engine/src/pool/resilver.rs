//! Resilver: copy onto a leaf what it missed, and nothing else (OpenZFS's
//! dsl_scan in its resilver role, pruned by dirty time logs).
//!
//! A leaf misses writes while it is down (faulted, missing, offline): its
//! DTL (`vdev::Dtl`) holds those txgs. Once it is back, every block born in
//! one of them that has a copy on the leaf's top-level vdev is copied there:
//!
//! ```text
//!  1. targets     every leaf that is up and has a DTL (taken at the start)
//!  2. gather      the synced tree of txg N (scrub's walker); keep the
//!                 copies on a target's top-level vdev born in its DTL
//!  3. sort        by (vdev, offset): the target is written in order
//!  4. copy        SCAN_WORKERS at a time (one, after zfs_resilver_delay_ms,
//!                 while foreground I/O is recent: `scan::idle`): the
//!                 block read through its vdev
//!                 (`read_checked` tries children whose DTL holds its birth
//!                 last, and returns only bytes that pass its checksum),
//!                 written to the target at the same offset
//!  5. flush       each target, then its DTL loses the txgs ≤ N
//! ```
//!
//! Why copying the tree of N is enough: a target is up while it resilvers,
//! so every block written after N reaches it directly; and blocks born in
//! the DTL but freed before N need no copy. A DTL range newer than N (the
//! leaf went down again meanwhile) stays for the next resilver. The
//! allocator holds frees for the resilver's length, as for a scrub
//! (`pool::scan`): a copy is written only where its block still is.
//!
//! Reads of blocks born in a target's DTL go to the target only when no
//! other child gives bytes that pass the checksum (`Vdev::read_order`), so
//! a half-resilvered leaf serves nothing stale. A resilver is the pool's one scan: it shows in `status` as
//! "resilver in progress"; a scrub asked for meanwhile is refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tarn_ondisk::bp::BlockPtr;

use super::core::{FailedCopy, PoolCore};
use super::scan::{block_name, ScanReport, Scanner, SCAN_WORKERS};
use crate::io::{block, IoClass};
use crate::vdev::{Dtl, Kind, ReadCheck, Vdev};

/// A leaf to resilver: its top-level vdev and the txgs it missed.
#[derive(Clone, Debug)]
pub struct Target {
    pub top: u32,
    pub guid: u64,
    pub dtl: Dtl,
}

/// The leaves of the pool that are up and missed txgs.
pub fn targets(core: &PoolCore) -> Vec<Target> {
    core.leaves()
        .into_iter()
        .filter(|(top, l)| top.leaf().is_none() && l.writable())
        .filter_map(|(top, l)| {
            let dtl = l.dtl.lock().clone();
            (!dtl.is_empty()).then_some(Target { top: top.id(), guid: l.guid, dtl })
        })
        .collect()
}

/// One block copy to write onto a target.
#[derive(Clone, Copy)]
struct Job {
    vdev: u32,
    offset: u64,
    len: u64,
    block: usize,
    target: usize,
}

/// Resilvers `targets` from the tree of synced txg `txg`; returns the
/// report and whether it was canceled. On success each target's DTL loses
/// the txgs up to `txg`.
pub(crate) fn resilver(core: &PoolCore, scanner: &Scanner, mos: &BlockPtr, txg: u64, space_blocks: &[BlockPtr], targets: &[Target]) -> (ScanReport, bool) {
    let start = Instant::now();
    let (gathered, walk_errors) = super::verify::gather(core, mos, txg, space_blocks);
    let blocks: Vec<BlockPtr> = gathered.into_iter().map(|(bp, _)| bp).collect();
    let mut rep = ScanReport { txg, blocks: blocks.len() as u64, walk_error_count: walk_errors.len() as u64, ..Default::default() };
    walk_errors.into_iter().for_each(|e| rep.error(e));
    let jobs = jobs(core, &blocks, targets, &mut rep);
    scanner.set_to_examine(jobs.iter().map(|j| j.len).sum());
    let failed: Vec<AtomicU64> = targets.iter().map(|_| AtomicU64::new(0)).collect();
    let results = scanner.run_copies(core, SCAN_WORKERS, jobs.len(), |i, r| {
        if !copy(core, &blocks[jobs[i].block], &jobs[i], &targets[jobs[i].target], r) {
            failed[jobs[i].target].fetch_add(1, Ordering::Relaxed);
        }
        jobs[i].len
    });
    results.into_iter().for_each(|r| rep.add(r));
    rep.seconds = start.elapsed().as_secs_f64();
    if scanner.canceled() {
        return (rep, true);
    }
    let failed: Vec<u64> = failed.iter().map(|f| f.load(Ordering::Relaxed)).collect();
    finish(core, targets, &failed, txg, &mut rep);
    (rep, false)
}

/// The copies to write, by (vdev, offset).
fn jobs(core: &PoolCore, blocks: &[BlockPtr], targets: &[Target], rep: &mut ScanReport) -> Vec<Job> {
    let mut out = Vec::new();
    for (i, bp) in blocks.iter().enumerate() {
        for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
            for (t, target) in targets.iter().enumerate().filter(|(_, t)| t.top == dva.vdev && t.dtl.contains(bp.birth)) {
                match core.copy_extent(bp, dva) {
                    Ok((_, len)) => out.push(Job { vdev: dva.vdev, offset: dva.offset, len, block: i, target: t }),
                    Err(e) => rep.error(format!("{} block (birth {}) for {:016x}: {}", bp.otype.name(), bp.birth, target.guid, e)),
                }
            }
        }
    }
    out.sort_by_key(|j| (j.vdev, j.offset));
    out
}

fn target_leaf(top: &Arc<Vdev>, guid: u64) -> Option<Arc<Vdev>> {
    top.leaf_arcs().into_iter().find(|l| l.guid == guid)
}

/// Reads one block through its vdev (from a child that did not miss it)
/// and writes it onto the target; false when it could not.
fn copy(core: &PoolCore, bp: &BlockPtr, job: &Job, target: &Target, r: &mut ScanReport) -> bool {
    let top = core.vdevs.top(job.vdev);
    let Some(leaf) = target_leaf(&top, target.guid) else { return false };
    let Some(io) = leaf.leaf() else { return false };
    let check = |raw: &[u8]| block::verify(bp, raw).is_ok();
    r.reads += 1;
    // A child whose copy is damaged too is reported (without a bookmark:
    // the resilver's walk keeps none).
    let what = || block_name(bp);
    let failed = |l: &Vdev, offset: u64, e: &crate::error::Error| core.copy_failed(&FailedCopy::on(job.vdev, l, offset, job.len, e), "found by a resilver", None, &what);
    let data = match top.read_checked(IoClass::Scrub, job.offset, job.len, bp.birth, &ReadCheck { check: &check, repair: false, failed: &failed, speculative: false }) {
        Ok(d) => d,
        Err(e) => {
            r.error(format!("{} block (level {}, birth {}): no good copy to resilver {} from: {}", bp.otype.name(), bp.level, bp.birth, leaf.path, e));
            return false;
        }
    };
    // A mirror's child holds the whole block at the same offset; a RAID-Z
    // child, its columns of it (parity computed again from the data).
    let written = match top.kind {
        Kind::Raidz(_) => top.resilver_columns(job.offset, &data, leaf.guid),
        _ => io.write_now(&data, job.offset).map(|()| {
            leaf.repaired_bytes.fetch_add(job.len, Ordering::Relaxed);
            job.len
        }),
    };
    match written {
        Ok(bytes) => {
            r.copies += 1;
            r.bytes += job.len;
            r.repaired_copies += 1;
            r.repaired_bytes += bytes;
            true
        }
        Err(e) => {
            r.error(format!("resilver write of {:#x} on {}: {}", job.offset, leaf.path, e));
            false
        }
    }
}

/// Flushes each target; a target that took every copy loses the txgs up to
/// `txg` from its DTL.
fn finish(core: &PoolCore, targets: &[Target], failed: &[u64], txg: u64, rep: &mut ScanReport) {
    for (t, &failed) in targets.iter().zip(failed) {
        let Some(leaf) = core.vdevs.get(t.top as usize).and_then(|top| target_leaf(&top, t.guid)) else { continue };
        finish_leaf(&leaf, failed, txg, ("resilver", "blocks"), rep);
    }
}

/// Flushes a leaf a resilver or rebuild (`what`: its name, and what it
/// copies) wrote to; one that stayed up and took every copy (`failed` 0)
/// loses the txgs up to `txg` from its DTL.
pub(super) fn finish_leaf(leaf: &Vdev, failed: u64, txg: u64, what: (&str, &str), rep: &mut ScanReport) {
    let ok = leaf.leaf().is_some_and(|io| io.flush().is_ok()) && leaf.writable();
    if !ok {
        rep.error(format!("{} went down during the {}; it resilvers again when back", leaf.path, what.0));
        return;
    }
    if failed > 0 {
        rep.error(format!("{}: {} {} could not be copied by the {}; its DTL stays", leaf.path, failed, what.1, what.0));
        return;
    }
    leaf.dtl.lock().remove_through(txg);
}
