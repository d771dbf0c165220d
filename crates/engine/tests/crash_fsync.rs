//! Power cuts under an fsync workload: what fsync acknowledged survives.
//!
//! One seed: a pool on one or two fault-injecting devices (for a third of
//! the seeds with a log vdev on one more: the cut then falls on the log
//! device for half of them, which dies while the pool goes on), a POSIX file
//! system with its intent log, and a workload of creates, whole-file
//! rewrites (one write each: atomic), renames, removes, fsyncs and the odd
//! `syncfs`. The power is cut at the k-th write of one device (anywhere:
//! inside a log block, a txg's blocks, an uberblock), every device then
//! loses a random subset of its unflushed writes (torn ones included), and
//! the pool is imported and mounted, which claims and replays the log.
//!
//! Checked after recovery:
//! - the names are exactly those after some operation at or after the last
//!   acknowledged fsync (namespace changes are never lost once an fsync
//!   returned, and never applied out of order or in part);
//! - every file holds exactly one version of its data, no older than the
//!   version its last acknowledged fsync covered (empty only if none was);
//! - the pool verifies clean, and a second import replays nothing twice;
//! - for half the cuts that leave a log, a second power cut during replay
//!   changes none of that (the replay resumes, applying nothing twice).
//!
//! Indirect writes: files reach 160 KB, so their first 128 KiB record is
//! a whole block the log writes in place (`logbias=latency`, no log
//! device, a write ≥ 32 KiB). Two seeds in five set `logbias=throughput`
//! with files of up to 600 KB (four whole blocks), half of them under
//! `sync=always` (every change acknowledged when its call returns). The
//! cut and the lost unflushed writes fall anywhere, so also between a
//! block written in place and the log block naming it, or keep the log
//! block and lose the data: replay then ends at that record (its block
//! does not verify), which no caller was told was durable.
//!
//! `TARN_CRASH_FSYNC_SEEDS` (default 24) seeds, `TARN_CRASH_FSYNC_CUTS`
//! (default 3) cuts each; `TARN_CRASH_FSYNC_SEED` (hex, as a failure names
//! it) with `TARN_CRASH_FSYNC_K` and `_C` reruns one cut;
//! `TARN_DEBUG_REPLAY=1` says what each import and mount found.
//!
//! Regressions it pins: replay read the header import had read, without
//! the claim txg import set (records of synced txgs were applied again);
//! a sync dropped the replay marks it wrote, so the next header's replay
//! seq went back; the header dropping a replayed chain was written in a
//! txg before the last replayed change (a power cut then lost them).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::posix::{Caller, FileSystem, PosixFs, PosixOptions, RenameFlags, SyncPolicy};
use tarn_engine::sys::fault::{FaultConfig, FaultDevice};
use tarn_engine::tunables::Tunables;
use tarn_engine::{OpenOptions, Pool};

const ROOT: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0o022, fsetid: true };
/// Most files alive at once.
const SLOTS: usize = 6;

fn tunables(rng: &mut Rng) -> Tunables {
    // Small dirty limits put txg syncs between the fsyncs now and then.
    Tunables { zfs_txg_timeout: 3600, zfs_dirty_data_max: if rng.chance(50) { 2 << 20 } else { 64 << 20 }, ..small_tunables() }
}

/// The data of version `v` of file `f`.
fn version(f: usize, v: u64, len: usize) -> Vec<u8> {
    pattern(len, (f as u64) << 32 | v)
}

#[derive(Clone, Default)]
struct File {
    ino: u64,
    len: usize,
    /// Versions written (the newest is `written - 1`); 0: none yet.
    written: u64,
    /// Versions an fsync covered (the file holds at least the newest).
    acked: u64,
}

/// What the workload did, as far as it got.
#[derive(Default)]
struct History {
    /// name → file (index into `files`) after each operation (index 0:
    /// before any).
    names: Vec<BTreeMap<String, usize>>,
    /// Every file made, in order.
    files: Vec<File>,
    /// Index into `names` of the state the last acknowledged fsync covered.
    acked_names: usize,
}

/// The workload's shape: largest file, and whether every change is
/// acknowledged when its call returns (`sync=always`).
#[derive(Clone, Copy)]
struct Shape {
    max_len: u64,
    always: bool,
}

fn workload(fs: &PosixFs, rng: &mut Rng, ops: usize, shape: Shape, h: &mut History) -> Result<(), String> {
    h.names.push(BTreeMap::new());
    let root = fs.root();
    for op in 0..ops {
        let mut names = h.names.last().expect("one").clone();
        let e = |what: &str, e: tarn_engine::posix::Errno| format!("op {} {}: {}", op, what, e);
        let live: Vec<(String, usize)> = names.iter().map(|(n, &f)| (n.clone(), f)).collect();
        let k = rng.below(10);
        let pick = if live.is_empty() || (k == 9 && live.len() < SLOTS) { None } else { Some(live[rng.below(live.len() as u64) as usize].clone()) };
        match (pick, k) {
            (None, _) => {
                let f = h.files.len();
                let name = format!("f{}", f);
                let len = rng.range(1, shape.max_len) as usize;
                let made = fs.mknod(&ROOT, root, name.as_bytes(), libc::S_IFREG | 0o644, 0);
                // Under sync=always a change whose commit failed may still
                // have reached the log: the state after it is possible.
                let ino = match &made {
                    Ok(a) => Some(a.ino),
                    Err(_) if shape.always => fs.lookup(root, name.as_bytes()).ok().map(|a| a.ino),
                    Err(_) => None,
                };
                if let Some(ino) = ino {
                    h.files.push(File { ino, len, written: 0, acked: 0 });
                    names.insert(name, f);
                }
                maybe_applied(h, &names, shape, made.map(|_| ()).map_err(|x| e("create", x)))?;
            }
            (Some((_, f)), 0..=3) => {
                let file = &mut h.files[f];
                let r = fs.write(&ROOT, file.ino, 0, &version(f, file.written, file.len));
                if r.is_ok() || shape.always {
                    file.written += 1;
                }
                maybe_applied(h, &names, shape, r.map(|_| ()).map_err(|x| e("write", x)))?;
            }
            (Some((old, f)), 4) => {
                let new = format!("f{}-{}", f, op);
                let r = fs.rename(&ROOT, root, old.as_bytes(), root, new.as_bytes(), RenameFlags::default());
                names.remove(&old);
                names.insert(new, f);
                maybe_applied(h, &names, shape, r.map_err(|x| e("rename", x)))?;
            }
            (Some((old, _)), 5) => {
                let r = fs.unlink(&ROOT, root, old.as_bytes());
                names.remove(&old);
                maybe_applied(h, &names, shape, r.map_err(|x| e("unlink", x)))?;
            }
            (Some(_), 6) if rng.chance(15) => {
                fs.sync_all().map_err(|x| e("syncfs", x))?;
                h.acked_names = h.names.len() - 1;
                for f in h.files.iter_mut() {
                    f.acked = f.written;
                }
            }
            (Some((_, f)), _) => {
                let written = h.files[f].written;
                fs.fsync(h.files[f].ino, false).map_err(|x| e("fsync", x))?;
                h.files[f].acked = written;
                h.acked_names = h.names.len() - 1;
            }
        }
        h.names.push(names);
        if shape.always {
            h.acked_names = h.names.len() - 1;
            for f in h.files.iter_mut() {
                f.acked = f.written;
            }
        }
    }
    Ok(())
}

/// The result of a change: an error stops the workload. Under
/// `sync=always` the change may have been made and logged before its
/// commit failed, so the state after it (`names`) joins the history,
/// unacknowledged.
fn maybe_applied(h: &mut History, names: &BTreeMap<String, usize>, shape: Shape, r: Result<(), String>) -> Result<(), String> {
    if r.is_err() && shape.always {
        h.names.push(names.clone());
    }
    r
}

/// A pool on `ndevs` devices, with a log vdev on one more when `log`.
fn new_pool(seed: u64, ndevs: usize, log: bool, t: &Tunables) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(ndevs + log as usize, 128 << 20, seed);
    let opts = tarn_engine::CreateOptions { tunables: t.clone(), pool_props: common::fail_on_fault(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs[..ndevs]), vec![], &opts).expect("create");
    if log {
        let dev = (format!("mem{}", ndevs), devs[ndevs].clone() as Arc<dyn tarn_engine::sys::BlockDevice>);
        pool.add_log_vdevs_on(vec![NewTop { layout: Layout::Plain, devices: vec![dev] }], false).expect("add log");
    }
    (devs, pool)
}

fn mount(pool: &Pool, ctx: &str) -> Arc<PosixFs> {
    let zil = pool.datasets().zil("tank").expect("zil");
    PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), ..Default::default() }).unwrap_or_else(|e| panic!("{}: mount (replay): {}", ctx, e))
}

/// One seed, its power cut at write `k` of device `cut` (None: uncut, to
/// count the writes). Returns the cut device's writes uncut, else whether
/// import found a log to replay.
fn run(seed: u64, k: Option<u64>, crash_seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    let t = tunables(&mut rng);
    let ndevs = rng.range(1, 2) as usize;
    let mut cut = rng.below(ndevs as u64) as usize;
    let ops = rng.range(30, 80) as usize;
    // Drawn apart, so the seeds without a log vdev run as they always did.
    let mut lrng = Rng::new(seed ^ 0x5106);
    let log = lrng.chance(33);
    if log && lrng.chance(50) {
        cut = ndevs;
    }
    let (devs, pool) = new_pool(seed, ndevs, log, &t);
    // Drawn apart too: logbias=throughput with large files, half of them
    // under sync=always.
    let mut brng = Rng::new(seed ^ 0x10B1A5);
    let throughput = brng.chance(40);
    let shape = Shape { max_len: if throughput { 600_000 } else { 160_000 }, always: throughput && brng.chance(50) };
    if throughput {
        pool.datasets().set("tank", "logbias", "throughput").expect("logbias");
    }
    if k.is_some() && log {
        LOG_CUTS[(cut == ndevs) as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let zil = pool.datasets().zil("tank").expect("zil");
    let sync_policy = if shape.always { SyncPolicy::Always } else { SyncPolicy::Standard };
    let fs = PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), sync_policy, ..Default::default() }).expect("mount");
    // The chain starts with the first commit (one txg sync): do it before
    // the cut can come, so cuts fall in the steady state too.
    let warm = fs.mknod(&ROOT, fs.root(), b"warm", libc::S_IFREG | 0o644, 0).expect("warm").ino;
    fs.fsync(warm, false).expect("warm fsync");
    let before = devs[cut].stats().writes;
    if let Some(k) = k {
        devs[cut].set_config(FaultConfig { power_cut_after_writes: Some(k), ..Default::default() });
    }
    let mut h = History::default();
    let res = workload(&fs, &mut rng.fork(), ops, shape, &mut h);
    let bias = match (throughput, shape.always) {
        (false, _) => "",
        (true, false) => ", logbias=throughput",
        (true, true) => ", logbias=throughput sync=always",
    };
    let ctx = format!("seed {:#x}, cut at write {:?} of device {}{}{} (crash seed {:#x})", seed, k, cut, if cut == ndevs { " (the log device)" } else { "" }, bias, crash_seed);
    let Some(_) = k else {
        res.unwrap_or_else(|e| panic!("{}: uncut workload failed: {}", ctx, e));
        return devs[cut].stats().writes - before;
    };
    drop(fs);
    drop(pool);
    let mut images = crash_all(&devs, crash_seed);
    let open = |images: &[Arc<FaultDevice>], ctx: &str| Pool::open_on(as_dyn(images), vec![], &OpenOptions { tunables: t.clone(), ..Default::default() }).unwrap_or_else(|e| panic!("{}: import: {}", ctx, e));
    let mut pool = open(&images, &ctx);
    let replayed = pool.datasets().zil("tank").expect("zil").needs_replay();
    let debug = std::env::var("TARN_DEBUG_REPLAY").is_ok();
    if debug {
        eprintln!("DEBUG {}: imported at txg {}, replay {}", ctx, pool.uberblock().txg, replayed);
    }
    let mut ctx = ctx;
    if replayed && crash_seed % 2 == 1 {
        // A second power cut while the log is replayed (its transactions
        // and the txg syncs they fill): the next mount resumes after the
        // last record the header says was replayed, applying none twice.
        let k2 = Rng::new(crash_seed).range(1, 40);
        images[cut].set_config(FaultConfig { power_cut_after_writes: Some(k2), ..Default::default() });
        let zil = pool.datasets().zil("tank").expect("zil");
        let opened = PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), ..Default::default() });
        if debug {
            eprintln!("DEBUG second cut {}: mount {:?}, synced txg {}", k2, opened.as_ref().err(), pool.core().txg.synced_txg());
        }
        if let Ok(fs) = opened {
            let r = fs.sync_all();
            if debug {
                eprintln!("DEBUG sync_all {:?}, synced txg {}, dead {}", r.err(), pool.core().txg.synced_txg(), images[cut].is_dead());
            }
        }
        drop(pool);
        if images[cut].is_dead() {
            RECUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        images = crash_all(&images, crash_seed ^ 0xABCD);
        ctx = format!("{}, cut again at write {} during replay", ctx, k2);
        pool = open(&images, &ctx);
        if debug {
            eprintln!("DEBUG third import at txg {}, replay {}", pool.uberblock().txg, pool.datasets().zil("tank").expect("zil").needs_replay());
        }
    }
    let zil = pool.datasets().zil("tank").expect("zil");
    if zil.needs_replay() {
        let n = zil.indirect_blocks().unwrap_or_else(|e| panic!("{}: reading the log: {}", ctx, e)).len();
        INDIRECT.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let fs = mount(&pool, &ctx);
    let s = &zil.stats;
    ENDED_AT_BAD_BLOCK.fetch_add(s.replay_ended_bad_block.load(std::sync::atomic::Ordering::Relaxed), std::sync::atomic::Ordering::Relaxed);
    if throughput {
        THROUGHPUT_CUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    check(&fs, &h, &ctx);
    fs.verify().unwrap_or_else(|e| panic!("{}: posix verify: {}", ctx, e));
    drop(fs);
    verified(&pool, &ctx);
    // Usable, and replayed once: export, import, the same.
    pool.export().unwrap_or_else(|e| panic!("{}: export: {}", ctx, e));
    let pool = open(&images, &ctx);
    let ctx = format!("{} (reimported)", ctx);
    let fs = mount(&pool, &ctx);
    check(&fs, &h, &ctx);
    replayed as u64
}

/// Cuts of pools with a log vdev: [on a data device, on the log device].
static LOG_CUTS: [std::sync::atomic::AtomicU64; 2] = [std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0)];

/// Cuts of logbias=throughput seeds; replays that ended at an indirect
/// record whose block did not verify; indirect records the logs to
/// replay held.
static THROUGHPUT_CUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ENDED_AT_BAD_BLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static INDIRECT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Second cuts that came during replay (the device died before its end).
static RECUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn check(fs: &PosixFs, h: &History, ctx: &str) {
    let listed: BTreeMap<String, u64> = fs
        .readdir(fs.root(), 0, 10_000)
        .unwrap_or_else(|e| panic!("{}: readdir: {}", ctx, e))
        .into_iter()
        .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.ino))
        .filter(|(n, _)| n != "." && n != ".." && n != "warm")
        .collect();
    let found = (h.acked_names..h.names.len()).rev().find(|&i| {
        let want = &h.names[i];
        want.len() == listed.len() && want.iter().all(|(n, &s)| listed.get(n) == Some(&h.files[s].ino))
    });
    let Some(i) = found else {
        panic!(
            "{}: the names {:?} are no state at or after the last acknowledged fsync (op {}): that state was {:?}",
            ctx,
            listed.keys().collect::<Vec<_>>(),
            h.acked_names,
            h.names[h.acked_names].keys().collect::<Vec<_>>()
        )
    };
    for (name, &slot) in &h.names[i] {
        let f = &h.files[slot];
        let data = fs.read(f.ino, 0, f.len as u32 + 1).unwrap_or_else(|e| panic!("{}: read {}: {}", ctx, name, e));
        if data.is_empty() {
            assert_eq!(f.acked, 0, "{}: {} is empty but an fsync covered version {}", ctx, name, f.acked - 1);
            continue;
        }
        let v = (0..f.written).rev().find(|&v| data == version(slot, v, f.len));
        match v {
            Some(v) => assert!(v + 1 >= f.acked, "{}: {} holds version {} but an fsync covered version {}", ctx, name, v, f.acked - 1),
            None => panic!("{}: {} holds {} bytes that are no version it was written with", ctx, name, data.len()),
        }
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn power_cuts_never_lose_what_fsync_acknowledged() {
    let seeds = env("TARN_CRASH_FSYNC_SEEDS", 24);
    let cuts = env("TARN_CRASH_FSYNC_CUTS", 3);
    let (mut runs, mut replays) = (0, 0);
    // TARN_CRASH_FSYNC_SEED=<n>: that seed alone (as a failure names it).
    let only = std::env::var("TARN_CRASH_FSYNC_SEED").ok().and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    for s in 0..seeds {
        let seed = 0xF5_0000 + s;
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        // TARN_CRASH_FSYNC_K=<k>: with the seed, that cut alone.
        if let (Some(_), Some(k)) = (only, std::env::var("TARN_CRASH_FSYNC_K").ok().and_then(|v| v.parse().ok())) {
            let c = std::env::var("TARN_CRASH_FSYNC_C").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
            replays += run(seed, Some(k), seed.wrapping_mul(31).wrapping_add(c));
            runs += 1;
            continue;
        }
        let writes = run(seed, None, 0);
        let mut rng = Rng::new(seed ^ 0xC07);
        for c in 0..cuts {
            let k = rng.range(1, writes.max(1));
            replays += run(seed, Some(k), seed.wrapping_mul(31).wrapping_add(c));
            runs += 1;
        }
    }
    let recuts = RECUTS.load(std::sync::atomic::Ordering::Relaxed);
    let logs = [0, 1].map(|i| LOG_CUTS[i].load(std::sync::atomic::Ordering::Relaxed));
    let tp = THROUGHPUT_CUTS.load(std::sync::atomic::Ordering::Relaxed);
    let bad = ENDED_AT_BAD_BLOCK.load(std::sync::atomic::Ordering::Relaxed);
    println!("{} power cuts under fsync load, {} of them with a log to replay, {} cut again during replay, {} on pools with a log vdev ({} of them cutting the log device), {} with logbias=throughput, {} indirect records to replay, {} replays ended at a block written in place that did not verify, all recovered", runs, replays, recuts, logs[0] + logs[1], logs[1], tp, INDIRECT.load(std::sync::atomic::Ordering::Relaxed), bad);
    assert!(only.is_some() || replays * 4 >= runs, "too few cuts left a log to replay ({} of {}): the test no longer tests replay", replays, runs);
}

/// Writers on their own files, each fsyncing after every whole-file
/// rewrite: their commits overlap, so several rounds (log blocks) are in
/// flight on the chain when the power is cut (the device is slowed so
/// that they pile up). The cut, and the crash's random loss of unflushed
/// writes, can tear or drop a middle round's block while a later one
/// survives: the chain then ends at the tear, and the check below holds
/// only if no round after it was acknowledged (a round is acknowledged
/// only once every earlier one is durable).
mod in_flight {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const WRITERS: usize = 4;

    /// Per writer: versions attempted and versions an fsync acknowledged.
    struct Progress {
        written: [AtomicU64; WRITERS],
        acked: [AtomicU64; WRITERS],
    }

    fn len_of(seed: u64, f: usize) -> usize {
        Rng::new(seed ^ (f as u64) << 8).range(1, 9_000) as usize
    }

    /// Returns the device's writes (uncut) and the most rounds seen in flight.
    fn run(seed: u64, k: Option<u64>, crash_seed: u64) -> (u64, u64) {
        let t = Tunables { zfs_txg_timeout: 3600, zfs_dirty_data_max: 64 << 20, ..small_tunables() };
        let (devs, pool) = new_pool(seed, 1, false, &t);
        let fs = mount(&pool, "new pool");
        let inos: Vec<u64> = (0..WRITERS).map(|f| fs.mknod(&ROOT, fs.root(), format!("w{}", f).as_bytes(), libc::S_IFREG | 0o644, 0).expect("create").ino).collect();
        fs.fsync(inos[0], false).expect("first fsync (a new chain)");
        // Slow writes let commits pile up behind one another.
        let slow = FaultConfig { latency_us: 300, ..Default::default() };
        devs[0].set_config(FaultConfig { power_cut_after_writes: k, ..slow.clone() });
        let before = devs[0].stats().writes;
        let p = Progress { written: Default::default(), acked: Default::default() };
        let rounds = Rng::new(seed).range(15, 40);
        std::thread::scope(|s| {
            for (f, &ino) in inos.iter().enumerate() {
                let (fs, p) = (&fs, &p);
                s.spawn(move || {
                    for v in 0..rounds {
                        p.written[f].store(v + 1, Ordering::SeqCst);
                        if fs.write(&ROOT, ino, 0, &version(f, v, len_of(seed, f))).is_err() || fs.fsync(ino, false).is_err() {
                            return;
                        }
                        p.acked[f].store(v + 1, Ordering::SeqCst);
                    }
                });
            }
        });
        let zil = pool.datasets().zil("tank").expect("zil");
        let peak = zil.stats.in_flight_max.load(Ordering::Relaxed);
        let ctx = format!("writers: seed {:#x}, cut at write {:?} (crash seed {:#x})", seed, k, crash_seed);
        let Some(_) = k else {
            for f in 0..WRITERS {
                assert_eq!(p.acked[f].load(Ordering::SeqCst), rounds, "{}: uncut writer {} failed", ctx, f);
            }
            return (devs[0].stats().writes - before, peak);
        };
        drop(fs);
        drop(pool);
        let images = crash_all(&devs, crash_seed);
        let pool = Pool::open_on(as_dyn(&images), vec![], &OpenOptions { tunables: t.clone(), ..Default::default() }).unwrap_or_else(|e| panic!("{}: import: {}", ctx, e));
        let fs = mount(&pool, &ctx);
        for (f, &ino) in inos.iter().enumerate() {
            let (written, acked) = (p.written[f].load(Ordering::SeqCst), p.acked[f].load(Ordering::SeqCst));
            let len = len_of(seed, f);
            let data = fs.read(ino, 0, len as u32 + 1).unwrap_or_else(|e| panic!("{}: read w{}: {}", ctx, f, e));
            if data.is_empty() {
                assert_eq!(acked, 0, "{}: w{} is empty but an fsync covered version {}", ctx, f, acked.max(1) - 1);
                continue;
            }
            match (0..written).rev().find(|&v| data == version(f, v, len)) {
                Some(v) => assert!(v + 1 >= acked, "{}: w{} holds version {} but an fsync covered version {}", ctx, f, v, acked - 1),
                None => panic!("{}: w{} holds {} bytes that are no version it was written with", ctx, f, data.len()),
            }
        }
        fs.verify().unwrap_or_else(|e| panic!("{}: posix verify: {}", ctx, e));
        drop(fs);
        verified(&pool, &ctx);
        (0, peak)
    }

    #[test]
    fn power_cuts_with_rounds_in_flight_never_lose_what_fsync_acknowledged() {
        let seeds = env("TARN_CRASH_FSYNC_SEEDS", 24) / 3;
        let cuts = env("TARN_CRASH_FSYNC_CUTS", 3);
        let mut peak = 0;
        let mut runs = 0;
        for s in 0..seeds.max(1) {
            let seed = 0xF7_0000 + s;
            let (writes, p) = run(seed, None, 0);
            peak = peak.max(p);
            let mut rng = Rng::new(seed ^ 0xC07);
            for c in 0..cuts {
                let k = rng.range(1, writes.max(1));
                let (_, p) = run(seed, Some(k), seed.wrapping_mul(31).wrapping_add(c));
                peak = peak.max(p);
                runs += 1;
            }
        }
        println!("{} power cuts under {} concurrent fsyncers, at most {} rounds in flight, all recovered", runs, WRITERS, peak);
        assert!(peak >= 2, "never more than one round in flight ({}): the test no longer tests the pipeline", peak);
    }
}
