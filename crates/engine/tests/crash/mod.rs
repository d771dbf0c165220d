//! One crash run: a seed picks the pool's shape and the workload, the power
//! is cut at one device's k-th write, every device loses a random subset of
//! its unflushed writes, and the recovered pool is compared with the oracle.
//!
//! The claim it checks: after a power cut at any write, the pool imports at
//! some txg T no older than the last txg whose sync had finished; every object
//! is exactly as the logged operations of txgs <= T made it; objects created
//! after T do not exist; every block verifies and nothing leaks. The pool then
//! stays usable: more writes, a sync, an export and a reopen all work.

pub mod datasets;
pub mod layouts;
pub mod log_removal;
pub mod model;
pub mod spares;
pub mod workload;

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tarn_engine::pool::vdevs::Layout;
use tarn_engine::sys::{FaultConfig, FaultDevice};
use tarn_engine::{CreateOptions, Error, Pool, Tunables};
use tarn_ondisk::ObjectType;

use crate::common::{as_dyn, crash_all, fail_on_fault, mem_devs, open, pattern, small_tunables, Rng};
use datasets::{check_datasets, DsWorker};
use layouts::{after_loss, check_health, check_resilver, check_scrubs, Loss, Shape, REDUNDANT};
use model::{check_contents, check_verified, created, model_at, model_from, Model};
use workload::{Logged, Op, ThreadLog, Worker};

/// What one seed builds and does.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    pub ndevs: usize,
    /// How the devices form top-level vdevs (`layouts.rs`; a stripe of
    /// `ndevs` plain devices unless `Plan::redundant`).
    pub shape: Shape,
    /// Devices lost around the cut (`layouts.rs`; none on a stripe).
    pub loss: Loss,
    pub dev_size: u64,
    pub recordsize: Option<&'static str>,
    /// Copies of every data and indirect block (2 needs two devices to
    /// land on different ones).
    pub copies: u8,
    pub threads: usize,
    pub ops: usize,
    /// The device whose power is cut (the others lose power with it).
    pub cut_dev: usize,
    /// Merge adjacent writes (the default). Without it every block is its
    /// own write, so a crash can keep any subset of a txg's blocks.
    pub aggregate: bool,
    /// One thread, txgs only at explicit syncs, one I/O thread and no
    /// aggregation: the same seed then gives the same writes (see `single`).
    pub deterministic: bool,
    /// An extra thread creates, writes, snapshots, rolls back and destroys
    /// datasets of its own (`datasets.rs`).
    pub datasets: bool,
}

impl Plan {
    pub fn new(seed: u64) -> Plan {
        let mut rng = Rng::new(seed ^ 0x5EED_0FC8_A5A5);
        let ndevs = rng.range(1, 3) as usize;
        Plan {
            seed,
            ndevs,
            shape: Shape::stripe(ndevs),
            loss: Loss::None,
            dev_size: if rng.chance(50) { 128 << 20 } else { 256 << 20 },
            recordsize: match rng.below(3) {
                0 => Some("4K"),
                1 => Some("16K"),
                _ => None,
            },
            threads: rng.range(2, 3) as usize,
            ops: rng.range(25, 50) as usize,
            cut_dev: rng.below(ndevs as u64) as usize,
            aggregate: !rng.chance(30),
            copies: if ndevs > 1 && rng.chance(25) { 2 } else { 1 },
            deterministic: false,
            datasets: rng.chance(60),
        }
    }

    /// A plan on a redundant layout: seed `s` runs `REDUNDANT[s % len]`,
    /// cut at any device, with a device loss drawn for it; the workload
    /// and pool options as `Plan::new` draws them.
    pub fn redundant(seed: u64) -> Plan {
        let shape = REDUNDANT[(seed % REDUNDANT.len() as u64) as usize];
        let mut rng = Rng::new(seed ^ 0x4D1_2202);
        let cut_dev = rng.below(shape.ndevs() as u64) as usize;
        let loss = Loss::draw(&shape, cut_dev, &mut rng);
        Plan { ndevs: shape.ndevs(), shape, cut_dev, loss, ..Plan::new(seed) }
    }

    /// The single-threaded variant. With several threads the engine is not
    /// deterministic: which txg an operation joins depends on when the sync
    /// thread closes the open txg, and the I/O threads merge and order writes
    /// by timing. One thread, syncs only where the workload asks, one I/O
    /// thread per device and no aggregation make every write count repeat.
    pub fn single(seed: u64) -> Plan {
        Plan { threads: 1, deterministic: true, datasets: false, ..Plan::new(seed) }
    }

    pub fn tunables(&self) -> Tunables {
        let mut t = small_tunables();
        if !self.aggregate {
            t.zfs_vdev_aggregation_limit = 0;
        }
        if self.deterministic {
            t.zfs_dirty_data_max = 1 << 30;
            t.zfs_txg_timeout = 3600;
            t.tarn_vdev_threads = 1;
            t.zfs_vdev_aggregation_limit = 0;
        }
        t
    }

    pub fn create(&self) -> (Vec<Arc<FaultDevice>>, Pool) {
        let devs = mem_devs(self.ndevs, self.dev_size, self.seed);
        let mut opts = CreateOptions { tunables: self.tunables(), pool_props: fail_on_fault(), ..Default::default() };
        if let Some(rs) = self.recordsize {
            opts.root_props.push(("recordsize".into(), rs.into()));
        }
        if self.copies > 1 {
            opts.root_props.push(("copies".into(), self.copies.to_string()));
        }
        let pool = if self.shape.layout == Layout::Plain {
            Pool::create_on("crash", as_dyn(&devs), vec![], &opts)
        } else {
            Pool::create_tops("crash", self.shape.tops(layouts::on_rail(self, &devs)), vec![], &opts)
        };
        let pool = pool.unwrap_or_else(|e| panic!("seed {}: create: {e}", self.seed));
        (devs, pool)
    }

    /// The environment variable that reruns this plan's seed.
    pub fn rerun_var(&self) -> &'static str {
        if self.shape.layout == Layout::Plain {
            "TARN_CRASH_SEED"
        } else {
            "TARN_CRASH_REDUNDANT_SEED"
        }
    }

    pub fn ctx(&self) -> String {
        format!("seed {} (rerun with {}={}; {:?})", self.seed, self.rerun_var(), self.seed, self)
    }
}

/// What a run saw, for coverage counts and the determinism test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The write number the power was cut at on `Plan::cut_dev`.
    pub cut_write: u64,
    /// The last txg whose sync had finished before the cut.
    pub synced_before: u64,
    /// The txg the pool imported at after the crash.
    pub imported_txg: u64,
    /// The cut write was an uberblock write (the sync failed there).
    pub in_uberblock: bool,
    pub model: Model,
    /// A stale device (`Loss::Stale`) lost power before the cut.
    pub lost_early: bool,
    /// Copies the resilver at import wrote (redundant layouts: onto a
    /// stale device that came back).
    pub resilvered: u64,
}

/// Runs the workload threads, their generators forked from `seed`; returns
/// their logs and the first error.
pub fn run_workload(plan: &Plan, pool: &Pool, seed: u64) -> (Vec<Vec<Logged>>, Option<Error>) {
    let stop = AtomicBool::new(false);
    let mut rng = Rng::new(seed);
    let workers: Vec<Worker> =
        (0..plan.threads).map(|_| Worker { pool, rng: rng.fork(), ops: plan.ops, stop: &stop, seed: plan.seed }).collect();
    let ds = plan.datasets.then(|| DsWorker { pool, rng: rng.fork(), ops: plan.ops / 2, stop: &stop, tag: seed % 100_000 });
    let results: Vec<ThreadLog> = std::thread::scope(|s| {
        let mut handles: Vec<_> = workers.into_iter().map(|w| s.spawn(move || w.run())).collect();
        if let Some(d) = ds {
            handles.push(s.spawn(move || d.run()));
        }
        handles.into_iter().map(|h| h.join().expect("a workload thread panicked")).collect()
    });
    let mut error = None;
    let mut logs = Vec::new();
    for r in results {
        error = error.or(r.error);
        logs.push(r.log);
    }
    (logs, error)
}

/// Counts the writes the cut device takes in an uncut run of `plan`
/// (workload and a final sync), to place the cut inside the workload.
pub fn calibrate(plan: &Plan) -> u64 {
    let (devs, pool) = plan.create();
    let before = devs[plan.cut_dev].stats().writes;
    let (_, error) = run_workload(plan, &pool, plan.seed);
    if let Some(e) = error {
        panic!("{}: uncut workload failed: {e}", plan.ctx());
    }
    pool.sync().unwrap_or_else(|e| panic!("{}: sync: {e}", plan.ctx()));
    devs[plan.cut_dev].stats().writes - before
}

/// Creates and writes one small object per transaction, `count` times,
/// syncing after each when `sync` is set; stops at the first error.
pub fn small_objects(pool: &Pool, count: usize, sync: bool) -> ThreadLog {
    let os = pool.root();
    let mut log = Vec::new();
    for i in 0..count {
        let mut step = || -> tarn_engine::Result<()> {
            let tx = os.begin()?;
            let id = os.create(&tx, ObjectType::PlainData)?;
            log.push(Logged { txg: tx.txg(), obj: id, op: Op::Create });
            let fill = workload::Fill::Random(i as u64);
            os.write(&tx, id, 0, &fill.bytes(5000))?;
            log.push(Logged { txg: tx.txg(), obj: id, op: Op::Write { off: 0, len: 5000, fill } });
            drop(tx);
            if sync {
                pool.sync()?;
            }
            Ok(())
        };
        if let Err(e) = step() {
            return ThreadLog { log, error: Some(e) };
        }
    }
    ThreadLog { log, error: None }
}

/// Writes and syncs until the cut comes: the workload may end before write
/// `k` when its threads interleave differently than in calibration.
fn until_cut(pool: &Pool, limit: usize) -> ThreadLog {
    small_objects(pool, limit, true)
}

/// How a workload ended at a power cut.
pub struct Cut {
    pub logs: Vec<Vec<Logged>>,
    /// The last txg whose sync had finished before the cut.
    pub synced_before: u64,
    /// The cut write was an uberblock write (the sync failed there).
    pub in_uberblock: bool,
    /// The devices after the power loss.
    pub images: Vec<Arc<FaultDevice>>,
    /// A stale device (`Loss::Stale`) lost power before the cut.
    pub lost_early: bool,
}

/// Cuts the power at write `k` of `plan.cut_dev` while the workload (seeded
/// by `workload_seed`) runs on `pool`; the devices then crash, `crash_seed`
/// choosing which unflushed writes survive.
pub fn cut(plan: &Plan, pool: Pool, devs: &[Arc<FaultDevice>], k: u64, workload_seed: u64, crash_seed: u64, ctx: &str) -> Cut {
    let dead = &devs[plan.cut_dev];
    dead.set_config(FaultConfig { power_cut_after_writes: Some(k), ..Default::default() });
    if let Loss::Stale { dev, permille } = plan.loss {
        assert_ne!(dev, plan.cut_dev, "{ctx}: the stale device is not the cut one");
        let early = (k * permille).div_ceil(1000).max(1);
        devs[dev].set_config(FaultConfig { power_cut_after_writes: Some(early), ..Default::default() });
    }
    let (mut logs, mut error) = run_workload(plan, &pool, workload_seed);
    if error.is_none() {
        let tail = until_cut(&pool, 1000);
        logs.push(tail.log);
        error = tail.error;
    }
    let error = error.unwrap_or_else(|| panic!("{ctx}: the cut never came"));
    assert!(dead.is_dead(), "{ctx}: the workload failed with no power cut: {error}");
    // No sync can finish after the cut: every sync writes uberblocks to
    // every device, and the cut device refuses all writes.
    let synced_before = pool.core().txg.synced_txg();
    let in_uberblock = pool.core().txg.failure().is_some_and(|f| f.contains("writing uberblock"));
    drop(pool); // closing a pool with a dead device must not hang or panic
    // Devices on a rail that went down never see another write, so a
    // stale device that is dead now died before the cut.
    let lost_early = matches!(plan.loss, Loss::Stale { dev, .. } if devs[dev].is_dead());
    Cut { logs, synced_before, in_uberblock, images: crash_all(devs, crash_seed), lost_early }
}

/// One run with the power cut at write `k` of `plan.cut_dev`.
pub fn run(plan: &Plan, k: u64, crash_seed: u64) -> Outcome {
    let ctx = format!("{}, cut at write {k}", plan.ctx());
    let (devs, pool) = plan.create();
    let c = cut(plan, pool, &devs, k, plan.seed, crash_seed, &ctx);
    let (t, model, resilvered) = if plan.shape.layout == Layout::Plain {
        let (t, model) = check_recovered(&c.images, &c.logs, c.synced_before, &ctx);
        (t, model, 0)
    } else {
        recovered_after_loss(plan, &c, crash_seed, &ctx)
    };
    Outcome { cut_write: k, synced_before: c.synced_before, imported_txg: t, in_uberblock: c.in_uberblock, model, lost_early: c.lost_early, resilvered }
}

/// `check_recovered` for a redundant layout, on the devices left after
/// `plan.loss`: it imports DEGRADED with the missing children UNAVAIL (or
/// ONLINE when none is missing), the resilver import starts for a device
/// that came back stale ends without error, and scrubs find nothing
/// (`layouts.rs`). Returns the txg, the model and the copies resilvered.
fn recovered_after_loss(plan: &Plan, c: &Cut, crash_seed: u64, ctx: &str) -> (u64, Model, u64) {
    let given = after_loss(&c.images, &plan.loss, crash_seed);
    let ctx = format!("{ctx}, {} lost{}", plan.loss.name(), if c.lost_early { " before the cut" } else { "" });
    let (pool, t, model) = import_checked(&given, &Model::new(), &c.logs, c.synced_before, &ctx);
    let ctx = format!("{ctx}, imported txg {t}");
    check_health(&pool, &plan.shape, plan.loss.missing(), &ctx);
    let resilvered = check_resilver(&pool, &ctx);
    check_scrubs(&pool, &ctx);
    keep_using(pool, &given, model.clone(), t, &ctx);
    (t, model, resilvered)
}

/// Two power cuts: the pool recovered from the first runs a new workload
/// (new objects) and loses power again at write `k2`. The second recovery
/// must hold the first's objects plus the new ones as of its txg.
pub fn run_twice(plan: &Plan, k1: u64, k2: u64, crash_seed: u64) {
    let ctx = format!("{}, cut at write {k1}", plan.ctx());
    let (devs, pool) = plan.create();
    let first = cut(plan, pool, &devs, k1, plan.seed, crash_seed, &ctx);
    let (pool, t1, base) = import_checked(&first.images, &Model::new(), &first.logs, first.synced_before, &ctx);
    let ctx = format!("{ctx}, imported txg {t1}, then cut at write {k2}");
    let second = cut(plan, pool, &first.images, k2, !plan.seed, crash_seed + 1, &ctx);
    let (pool, t2, model) = import_checked(&second.images, &base, &second.logs, second.synced_before, &ctx);
    keep_using(pool, &second.images, model, t2, &ctx);
}

/// Imports crash images and checks them: the imported txg T is the last
/// synced one or the one whose sync was cut, the objects are exactly `base`
/// changed by the logged operations of txgs <= T, and everything verifies.
pub fn import_checked(images: &[Arc<FaultDevice>], base: &Model, logs: &[Vec<Logged>], synced_before: u64, ctx: &str) -> (Pool, u64, Model) {
    let pool = open(images).unwrap_or_else(|e| panic!("{ctx}: import after the crash failed: {e}"));
    let t = pool.uberblock().txg;
    assert!(t >= synced_before, "{ctx}: imported txg {t} is older than the last synced txg {synced_before}");
    assert!(t <= synced_before + 1, "{ctx}: imported txg {t} is newer than the txg whose sync failed ({})", synced_before + 1);
    let ctx = format!("{ctx}, imported txg {t} (synced before the cut: {synced_before})");
    let model = model_from(base, logs, t);
    check_contents(&pool, &model, &created(logs), &ctx);
    check_datasets(&pool, logs, t, &ctx);
    check_verified(&pool, &ctx);
    (pool, t, model)
}

/// `import_checked` from scratch, then the pool must stay usable.
pub fn check_recovered(images: &[Arc<FaultDevice>], logs: &[Vec<Logged>], synced_before: u64, ctx: &str) -> (u64, Model) {
    let (pool, t, model) = import_checked(images, &Model::new(), logs, synced_before, ctx);
    keep_using(pool, images, model.clone(), t, &format!("{ctx}, imported txg {t}"));
    (t, model)
}

/// The recovered pool is usable: change it, sync, export, reopen, compare.
pub fn keep_using(pool: Pool, devs: &[Arc<FaultDevice>], mut model: Model, seed: u64, ctx: &str) {
    let ctx = format!("{ctx}, after recovery");
    let os = pool.root().clone();
    let mut rng = Rng::new(seed ^ 0xAF7E5);
    let tx = os.begin().unwrap_or_else(|e| panic!("{ctx}: begin: {e}"));
    let ids: Vec<u64> = model.keys().copied().collect();
    for &id in ids.iter().take(3) {
        let off = rng.below(64 << 10);
        let data = pattern(rng.range(1, 20_000) as usize, rng.next_u64());
        os.write(&tx, id, off, &data).unwrap_or_else(|e| panic!("{ctx}: write to object {id}: {e}"));
        let c = model.get_mut(&id).expect("listed above");
        c.resize(c.len().max(off as usize + data.len()), 0);
        c[off as usize..off as usize + data.len()].copy_from_slice(&data);
    }
    if let Some(&id) = ids.last().filter(|_| ids.len() > 3) {
        os.free(&tx, id).unwrap_or_else(|e| panic!("{ctx}: free object {id}: {e}"));
        model.remove(&id);
    }
    let id = os.create(&tx, ObjectType::PlainData).unwrap_or_else(|e| panic!("{ctx}: create: {e}"));
    let data = pattern(200_000, seed);
    os.write(&tx, id, 0, &data).unwrap_or_else(|e| panic!("{ctx}: write to new object {id}: {e}"));
    model.insert(id, data);
    drop(tx);
    pool.sync().unwrap_or_else(|e| panic!("{ctx}: sync: {e}"));
    check_verified(&pool, &ctx);
    pool.export().unwrap_or_else(|e| panic!("{ctx}: export: {e}"));
    let pool = open(devs).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    check_contents(&pool, &model, &BTreeSet::new(), &format!("{ctx}, reopened"));
    check_verified(&pool, &format!("{ctx}, reopened"));
}

/// Prints the seed if the run panics, whatever panicked, with the
/// variable that reruns it (`Plan::rerun_var`).
pub struct SeedGuard(pub u64, pub &'static str);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash run failed at seed {0}; rerun it alone with {1}={0}", self.0, self.1);
        }
    }
}

/// The baseline of `run`: the same workload, no cut, a clean export.
pub fn clean_run(plan: &Plan) {
    let ctx = format!("{}, no cut", plan.ctx());
    let (devs, pool) = plan.create();
    let (logs, error) = run_workload(plan, &pool, plan.seed);
    if let Some(e) = error {
        panic!("{ctx}: workload failed: {e}");
    }
    pool.sync().unwrap_or_else(|e| panic!("{ctx}: sync: {e}"));
    let model = model_at(&logs, u64::MAX);
    check_contents(&pool, &model, &created(&logs), &ctx);
    check_datasets(&pool, &logs, u64::MAX, &ctx);
    check_verified(&pool, &ctx);
    pool.export().unwrap_or_else(|e| panic!("{ctx}: export: {e}"));
    let pool = open(&devs).unwrap_or_else(|e| panic!("{ctx}: import: {e}"));
    check_contents(&pool, &model, &created(&logs), &format!("{ctx}, imported"));
    check_datasets(&pool, &logs, u64::MAX, &format!("{ctx}, imported"));
    check_verified(&pool, &format!("{ctx}, imported"));
    keep_using(pool, &devs, model, plan.seed, &ctx);
}
