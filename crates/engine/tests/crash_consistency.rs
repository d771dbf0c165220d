//! Crash consistency: a power cut at any write loses nothing committed.
//!
//! Each seed builds a pool on 1–3 in-memory devices (record size 4K, 16K or
//! 128K; some with copies=2, some without write aggregation), runs 2–3
//! threads of random creates, writes, truncates and frees (one transaction
//! each, logged with its txg) and, in most seeds, a thread creating,
//! writing, snapshotting, rolling back and destroying datasets (sync tasks,
//! logged with their txg; snapshots must never change), cuts the power at one device's k-th write and
//! lets every device lose a random subset of its unflushed writes, reordered
//! and torn per sector. The recovered pool must import at a txg T no older
//! than the last finished sync, hold exactly what the logged operations of
//! txgs <= T made, verify clean, and stay usable — including through a
//! second power cut. See `crash/mod.rs` for one run, `crash/workload.rs` for
//! the operations and `crash/model.rs` for the oracle.
//!
//!
//! The same on redundant layouts (issue 12: 2 × 2-way mirrors, a 3-way
//! mirror, 2 × RAID-Z1 of 3, RAID-Z2 of 5, RAID-Z3 of 6; one line each in
//! `crash/layouts.rs`): every device loses
//! power at the cut device's k-th write, and devices are lost around the
//! cut — absent, blank or with garbled labels at import (the pool must
//! import DEGRADED), or lost earlier in the run and back stale (resilvered
//! at import) — and a scrub after import finds nothing. See
//! `crash/layouts.rs`.
//!
//! A hot spare standing in for a failed mirror child is cut the same way
//! at its writes, from its labels with the new tree to the end of its
//! resilver (`crash/spares.rs`).
//!
//! Knobs: `TARN_CRASH_SEED=N` reruns one seed (its threads may interleave
//! differently, so a rerun explores the same cut points of a nearby history);
//! `TARN_CRASH_SEEDS=N` runs N seeds from `TARN_CRASH_FIRST_SEED` (default
//! 0); `TARN_CRASH_SECS=S` stops starting new seeds after S seconds;
//! `TARN_CRASH_TWICE_SEEDS=N` sets the seeds of the double-cut test.
//! The redundant layouts' test has its own: `TARN_CRASH_REDUNDANT_SEED=N`
//! reruns one seed, `TARN_CRASH_REDUNDANT_SEEDS=N` runs N seeds (default
//! 40 seeds × 3 cuts, about 14 s; `TARN_CRASH_REDUNDANT_SEEDS=1000 cargo
//! test -p tarn-engine --test crash_consistency redundant` makes 3000 cuts
//! in about 5½ minutes on two shared cores), and `TARN_CRASH_SECS` bounds
//! it too.

mod common;
mod crash;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::{crash_all, Rng};
use crash::model::{model_at, Model};
use crash::{calibrate, check_recovered, run, run_twice, run_workload, small_objects, Plan, SeedGuard};

/// Seeds of the default run, and cut points per seed: 250 × 4 = 1000 cuts,
/// about 40 s on two shared cores in the test profile.
const DEFAULT_SEEDS: u64 = 250;
const CUTS_PER_SEED: u64 = 4;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// `n` distinct write numbers spread over a seed's workload: its uncut run
/// (same seed) counts the cut device's writes, W, and one cut is drawn from
/// each of n equal slices of [1, W].
fn cut_points(plan: &Plan, n: u64) -> Vec<u64> {
    let writes = calibrate(plan);
    assert!(writes > 0, "{}: the workload wrote nothing", plan.ctx());
    let n = n.min(writes);
    let mut rng = Rng::new(plan.seed ^ 0xC07);
    (0..n)
        .map(|i| {
            let (lo, hi) = (i * writes / n, (i + 1) * writes / n);
            1 + lo + rng.below(hi - lo)
        })
        .collect()
}

#[test]
fn power_cut_at_any_write_loses_nothing_committed() {
    let seeds: Box<dyn Iterator<Item = u64>> = match env_u64("TARN_CRASH_SEED") {
        Some(s) => Box::new(std::iter::once(s)),
        None => {
            let first = env_u64("TARN_CRASH_FIRST_SEED").unwrap_or(0);
            Box::new(first..first + env_u64("TARN_CRASH_SEEDS").unwrap_or(DEFAULT_SEEDS))
        }
    };
    let budget = env_u64("TARN_CRASH_SECS").map(Duration::from_secs);
    let start = Instant::now();
    let (mut seeds_run, mut cuts, mut in_uberblock, mut newer) = (0u64, 0u64, 0u64, 0u64);
    let mut positions = BTreeSet::new();
    for seed in seeds {
        if budget.is_some_and(|b| start.elapsed() >= b) {
            break;
        }
        let _guard = SeedGuard(seed, "TARN_CRASH_SEED");
        let plan = Plan::new(seed);
        for (i, k) in cut_points(&plan, CUTS_PER_SEED).into_iter().enumerate() {
            let out = run(&plan, k, seed.wrapping_mul(CUTS_PER_SEED) + i as u64);
            cuts += 1;
            in_uberblock += out.in_uberblock as u64;
            newer += (out.imported_txg > out.synced_before) as u64;
            positions.insert((plan.ndevs, plan.cut_dev, k));
        }
        seeds_run += 1;
    }
    let (clones, cloned) = (crash::workload::CLONES.load(Relaxed), crash::workload::CLONED_BYTES.load(Relaxed));
    eprintln!(
        "crash_consistency: {seeds_run} seeds, {cuts} cuts at {} distinct (devices, device, write) positions; \
         {in_uberblock} cut an uberblock write, {newer} imported the txg whose sync was cut; \
         {} recovered file systems and snapshots checked; {clones} clone operations shared {cloned} bytes; {:.1?}",
        positions.len(),
        crash::datasets::CHECKED.load(Relaxed),
        start.elapsed()
    );
    assert!(cuts >= seeds_run, "every seed cuts at least once");
    if seeds_run >= 20 {
        assert!(cloned > 0, "the workloads cloned nothing: block cloning went untested");
    }
}

/// Seeds of the redundant layouts' default run, and cut points per seed.
const REDUNDANT_SEEDS: u64 = 40;
const REDUNDANT_CUTS_PER_SEED: u64 = 3;

/// Issue 12, "What must be shown" 2: power cuts on mirrors (and every
/// layout of `crash/layouts.rs`), with devices lost around the cut. Each
/// run checks what `power_cut_at_any_write_loses_nothing_committed` does,
/// plus the pool's health after the loss and a clean scrub.
#[test]
fn power_cut_on_redundant_layouts_loses_nothing_committed() {
    let seeds: Vec<u64> = match env_u64("TARN_CRASH_REDUNDANT_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("TARN_CRASH_REDUNDANT_SEEDS").unwrap_or(REDUNDANT_SEEDS)).collect(),
    };
    let budget = env_u64("TARN_CRASH_SECS").map(Duration::from_secs);
    let start = Instant::now();
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut cuts, mut early, mut resilvered, mut newer) = (0u64, 0u64, 0u64, 0u64);
    for seed in seeds {
        if budget.is_some_and(|b| start.elapsed() >= b) {
            break;
        }
        let plan = Plan::redundant(seed);
        let _guard = SeedGuard(seed, plan.rerun_var());
        for (i, k) in cut_points(&plan, REDUNDANT_CUTS_PER_SEED).into_iter().enumerate() {
            let out = run(&plan, k, seed.wrapping_mul(REDUNDANT_CUTS_PER_SEED) + i as u64);
            let key = format!("{}×{}-way {:?}, {} lost", plan.shape.groups, plan.shape.width, plan.shape.layout, plan.loss.name());
            let t = tally.entry(key).or_default();
            t.0 += 1;
            t.1 += out.in_uberblock as u64;
            cuts += 1;
            early += out.lost_early as u64;
            resilvered += out.resilvered;
            newer += (out.imported_txg > out.synced_before) as u64;
        }
    }
    eprintln!(
        "crash_consistency (redundant): {cuts} cuts; {newer} imported the txg whose sync was cut; {early} stale devices lost power before the cut, \
         {resilvered} copies resilvered onto them at import; {:.1?}",
        start.elapsed()
    );
    for (k, (n, ub)) in &tally {
        eprintln!("  {k}: {n} cuts, {ub} in an uberblock write");
    }
    assert!(cuts > 0, "no cut ran");
    if cuts >= 60 {
        let losses: BTreeSet<&str> = tally.keys().filter_map(|k| k.rsplit(", ").next()).collect();
        assert_eq!(losses.len(), 5, "every kind of loss ran: {losses:?}");
        assert!(early > 0 && resilvered > 0, "a stale device came back and was resilvered");
    }
}

/// A pool recovered from a power cut loses power again while a new
/// workload runs on it: recovery must not leave anything (deferred frees,
/// the space log it resumed, ring slots of the lost txgs) that a second cut
/// exposes.
/// Cut points of the spare test by default per cut device (`crash/spares.rs`),
/// each with two crash seeds.
const SPARE_CUTS: u64 = 24;

/// Power cuts around a hot spare standing in (`crash/spares.rs`): at the
/// writes, from the fault to the end of the spare's resilver, of the spare
/// and of the mirror's other child — the first dozen of each always
/// (labels with the new tree, the first uberblocks), then `SPARE_CUTS`
/// spread over the rest — the pool imports with the spare AVAIL or INUSE,
/// nothing committed lost. `TARN_CRASH_SPARE_SEED` picks the run's seed,
/// `TARN_CRASH_SPARE_CUTS` the number of cuts per device.
#[test]
fn power_cut_around_a_spare_standing_in() {
    use crash::spares::{run as spare_run, M0, SPARE};
    let seed = env_u64("TARN_CRASH_SPARE_SEED").unwrap_or(3);
    let _guard = SeedGuard(seed, "TARN_CRASH_SPARE_SEED");
    let start = Instant::now();
    let s = sweep(
        &[SPARE, M0],
        |dev| {
            let calib = spare_run(seed, dev, None, seed);
            assert!(!calib.cut && calib.in_use, "the uncut run: the spare stands in");
            assert!(calib.writes > 8, "device {dev} took {} writes from the fault on", calib.writes);
            calib.writes
        },
        |w| {
            let n = env_u64("TARN_CRASH_SPARE_CUTS").unwrap_or(SPARE_CUTS).max(12);
            // The first dozen writes, then the rest spread (one past the end too).
            let mut ks: BTreeSet<u64> = (1..=12.min(w)).collect();
            let rest = n.saturating_sub(ks.len() as u64).max(1);
            ks.extend((0..rest).map(|i| 13 + i * w.saturating_sub(12) / rest).filter(|k| *k <= w + 1));
            ks.into_iter().collect()
        },
        |dev, k, crash_seed| {
            let out = spare_run(seed, dev, Some(k), crash_seed);
            (out.cut, out.in_use)
        },
        seed,
    );
    let (points, cuts, in_use, avail) = (s.points, s.cuts, s.changed, s.unchanged);
    eprintln!("crash_consistency: spare standing in: {points} cut points, {cuts} runs cut, {in_use} imported with the spare INUSE, {avail} AVAIL; {:.1?}", start.elapsed());
    assert!(in_use > 0 && avail > 0, "cuts both before and after the labels took the new tree");
}

/// What a sweep of power cuts over a change of the tree saw: cut points,
/// runs the power was cut in, runs that imported with the change and
/// runs that imported without it.
struct Sweep {
    points: usize,
    cuts: u64,
    changed: u64,
    unchanged: u64,
}

/// Cuts the power at each point `ks(writes)` of each device in `devs`
/// (`calibrate(dev)`: the writes of an uncut run), two crash seeds per
/// point derived from `seed`: `run(dev, k, crash_seed)` returns whether the
/// power was cut and whether the change reached the imported pool.
fn sweep(devs: &[usize], calibrate: impl Fn(usize) -> u64, ks: impl Fn(u64) -> Vec<u64>, run: impl Fn(usize, u64, u64) -> (bool, bool), seed: u64) -> Sweep {
    let mut s = Sweep { points: 0, cuts: 0, changed: 0, unchanged: 0 };
    for &dev in devs {
        let points = ks(calibrate(dev));
        s.points += points.len();
        for &k in &points {
            for c in 0..2u64 {
                let (cut, changed) = run(dev, k, seed.wrapping_mul(1_000_003) ^ (k << 2 | (dev as u64) << 1 | c));
                s.cuts += cut as u64;
                if changed {
                    s.changed += 1;
                } else {
                    s.unchanged += 1;
                }
            }
        }
    }
    s
}

/// Power cuts while a log vdev before others is removed and a hole takes
/// its place (`crash/log_removal.rs`): at every write of the data device
/// from the removal on (every sync of the removal: those that empty it,
/// the labels with the hole, the checkpoint) and of the removed device
/// (its labels erased), each with two crash seeds; `TARN_CRASH_LOGRM_SEED`
/// picks the run's seed. The pool imports with the log vdev or a hole in
/// its place, every acknowledged fsync there.
#[test]
fn power_cut_while_a_log_vdev_leaves_a_hole() {
    use crash::log_removal::{run as removal_run, DATA, LOG_A};
    let seed = env_u64("TARN_CRASH_LOGRM_SEED").unwrap_or(5);
    let _guard = SeedGuard(seed, "TARN_CRASH_LOGRM_SEED");
    let start = Instant::now();
    let s = sweep(
        &[DATA, LOG_A],
        |dev| {
            let calib = removal_run(seed, dev, None, seed);
            assert!(!calib.cut && calib.hole, "the uncut run: a hole");
            assert!(calib.writes > 0, "device {dev} took no write from the removal on");
            calib.writes
        },
        // Every write, one past the end too (bounded: a removal is a few syncs).
        |w| (1..=(w + 1).min(200)).collect(),
        |dev, k, crash_seed| {
            let out = removal_run(seed, dev, Some(k), crash_seed);
            (out.cut, out.hole)
        },
        seed,
    );
    let (points, cuts, holes, kept) = (s.points, s.cuts, s.changed, s.unchanged);
    eprintln!("crash_consistency: log vdev removal: {points} cut points, {cuts} runs cut, {holes} imported with the hole, {kept} with the log vdev; {:.1?}", start.elapsed());
    assert!(holes > 0 && kept > 0, "cuts both before and after the labels took the hole");
}

#[test]
fn power_cut_after_recovery_loses_nothing_committed() {
    for seed in 0..env_u64("TARN_CRASH_TWICE_SEEDS").unwrap_or(40) {
        let _guard = SeedGuard(seed, "TARN_CRASH_SEED");
        let plan = Plan::new(seed);
        let mut rng = Rng::new(seed ^ 0x2C07);
        let writes = calibrate(&plan);
        run_twice(&plan, 1 + rng.below(writes), 1 + rng.below(writes), seed);
    }
}

/// The harness is a function of its seed. With several threads the engine
/// is not: which txg an operation joins depends on when the sync thread
/// closes the open txg, and the I/O threads merge and order writes by timing.
/// So this runs the single-threaded variant of a seed (one workload thread,
/// txgs only where the workload syncs, one I/O thread, no aggregation) twice,
/// and both runs must count the same writes, cut in the same txg, import the
/// same txg and hold the same objects. The seeds cut a data write (0), an
/// uberblock write (2) and a later txg's data (5).
#[test]
fn one_seed_runs_the_same_twice() {
    for seed in [0u64, 2, 5] {
        let _guard = SeedGuard(seed, "TARN_CRASH_SEED");
        let plan = Plan::single(seed);
        let k = cut_points(&plan, 1)[0];
        assert_eq!(k, cut_points(&plan, 1)[0], "{}: the uncut run's write count changed", plan.ctx());
        let (a, b) = (run(&plan, k, seed), run(&plan, k, seed));
        assert_eq!((a.synced_before, a.imported_txg), (b.synced_before, b.imported_txg), "{}: cut txg", plan.ctx());
        assert!(a.model == b.model, "{}: the recovered objects differ between two runs", plan.ctx());
        assert!(!a.model.is_empty(), "{}: these seeds recover objects, so the comparison means something", plan.ctx());
    }
}

/// The baseline: no cut at all. Whatever the workload did is on disk after a
/// sync, and survives a clean export and import.
#[test]
fn clean_export_import_keeps_everything() {
    for seed in 0..6 {
        let _guard = SeedGuard(seed, "TARN_CRASH_SEED");
        crash::clean_run(&Plan::new(seed));
    }
}

/// Cuts the power at each of the uberblock writes of one sync, on each of
/// two devices. The sync writes its data, flushes, then writes the uberblock
/// to the four labels of device 0, then of device 1, then flushes; the cut
/// write number comes from counting the writes of the same sync in an uncut
/// run. Before the first uberblock write nothing of the txg can be found, so
/// import must rewind one txg; after it, the txg may or may not survive — and
/// both outcomes must be a consistent pool.
#[test]
fn power_cut_during_an_uberblock_write() {
    let plan = Plan { ndevs: 2, ops: 20, ..Plan::single(5) };
    let _guard = SeedGuard(plan.seed, "TARN_CRASH_SEED");
    for dev in 0..2 {
        let sync_writes = writes_of_last_sync(&plan, dev);
        for j in 0..4u64 {
            uberblock_cut(&Plan { cut_dev: dev, ..plan.clone() }, sync_writes - 3 + j, j);
        }
    }
}

/// Runs the workload and syncs it, dirties a batch of new objects, then
/// counts the writes device `dev` takes while that batch syncs.
fn writes_of_last_sync(plan: &Plan, dev: usize) -> u64 {
    let (devs, pool) = plan.create();
    assert!(run_workload(plan, &pool, plan.seed).1.is_none(), "{}: uncut workload failed", plan.ctx());
    pool.sync().unwrap_or_else(|e| panic!("{}: sync: {e}", plan.ctx()));
    assert!(small_objects(&pool, 3, false).error.is_none());
    let before = devs[dev].stats().writes;
    pool.sync().unwrap_or_else(|e| panic!("{}: sync: {e}", plan.ctx()));
    devs[dev].stats().writes - before
}

/// Cuts the sync of the last batch at write `k` of `plan.cut_dev`, which must
/// be its (j+1)-th uberblock write, and checks eight crash outcomes.
fn uberblock_cut(plan: &Plan, k: u64, j: u64) {
    let ctx = format!("{}, cut at uberblock write {} of device {}", plan.ctx(), j + 1, plan.cut_dev);
    let (devs, pool) = plan.create();
    let (mut logs, error) = run_workload(plan, &pool, plan.seed);
    assert!(error.is_none(), "{ctx}: workload failed before the cut");
    pool.sync().unwrap_or_else(|e| panic!("{ctx}: sync: {e}"));
    logs.push(small_objects(&pool, 3, false).log);
    devs[plan.cut_dev].set_config(tarn_engine::sys::FaultConfig { power_cut_after_writes: Some(k), ..Default::default() });
    let e = pool.sync().expect_err("the sync must fail at the cut");
    assert!(e.msg.contains("writing uberblock"), "{ctx}: the cut hit another write: {e}");
    // The flush before the uberblocks emptied every cache: what is pending
    // now is exactly the uberblock writes that went before the cut.
    assert_eq!(devs[plan.cut_dev].stats().pending_writes, j, "{ctx}: pending writes at the cut");
    let synced_before = pool.core().txg.synced_txg();
    drop(pool);
    let (before, after) = (model_at(&logs, synced_before), model_at(&logs, synced_before + 1));
    assert!(!before.is_empty() && before != after, "{ctx}: the two possible outcomes must differ");
    let mut imported = BTreeSet::new();
    for crash_seed in 0..8 {
        let images = crash_all(&devs, crash_seed);
        let (t, _): (u64, Model) = check_recovered(&images, &logs, synced_before, &format!("{ctx}, crash seed {crash_seed}"));
        imported.insert(t);
    }
    let first_ub_write = plan.cut_dev == 0 && j == 0;
    let expect: BTreeSet<u64> = if first_ub_write { [synced_before].into() } else { [synced_before, synced_before + 1].into() };
    assert_eq!(imported, expect, "{ctx}: txgs imported over the crash seeds");
}
