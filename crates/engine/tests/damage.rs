//! Random damage (issue 11, "What must be shown" item 2): regions of random
//! sizes, 4 KiB to 4 MiB, of a pool's image overwritten with random bytes,
//! one seed per damaged image. The pool holds a known set of files of
//! varied sizes (empty, inline, one block, many blocks behind indirect
//! blocks) in three datasets with different record sizes and copies.
//!
//! Invariants checked, per seed:
//! - import never rewinds silently: it opens the newest valid uberblock's
//!   txg, or fails saying a rewind is needed (`import -F`), and then the
//!   rewinding import opens exactly the txg the refusal named;
//! - every file that reads, reads back exactly what was written (no file is
//!   ever wrong; one not yet written at the txg opened is absent);
//! - every file that cannot be read is accounted for by the error log
//!   (`pool status -v`'s list): an entry for the file, for a directory on
//!   its path, for the dnode block or dnode of either, or — when its dataset
//!   cannot be opened at all — for the dataset's metadata or the MOS;
//! - naming the error log (`posix::errors::named_errors`) works on the
//!   damaged pool; nothing panics.
//!
//! - with `redundant_metadata=all` (the default) no single region, however
//!   placed, makes the pool unimportable or loses a file beyond those it
//!   *held* (a file is held by the damage when every copy of one of its
//!   data blocks lies in a damaged region; every other loss would be
//!   metadata the damage took with it). Seeds with two or three regions may
//!   hit two copies of a block: their losses are only reported.
//!
//! Knobs: `TARN_DAMAGE_REDUNDANT_METADATA=V` builds the pool with another
//! `redundant_metadata`; `TARN_DAMAGE_SEEDS=N` runs N seeds from `TARN_DAMAGE_FIRST_SEED`
//! (default 0); `TARN_DAMAGE_SEED=S` runs seed S alone. A failure prints
//! its seed.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{as_dyn, pattern, Rng};
use tarn_engine::pool::errlog::Bookmark;
use tarn_engine::pool::label::read_labels;
use tarn_engine::posix::errors::named_errors;
use tarn_engine::posix::*;
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, ErrorKind, OpenOptions, Pool, Tunables};
use tarn_ondisk::dnode::{BPS_PER_INDIRECT, SLOTS_PER_BLOCK};

/// Seeds of the default run: about 20 s on two shared cores.
const DEFAULT_SEEDS: u64 = 80;
const DEVICE_BYTES: u64 = 96 << 20;
const REGION_MIN: u64 = 4 << 10;
const REGION_MAX: u64 = 4 << 20;

const ROOT: Caller = Caller::new(0, 0, 1, 0);

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// Prints the seed of a failing run.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("damage run failed at seed {0}; rerun it alone with TARN_DAMAGE_SEED={0}", self.0);
        }
    }
}

/// A dataset of the model: its name, object-set number, root directory.
struct Ds {
    name: String,
    id: u64,
    root: Ino,
}

/// A file of the model.
struct File {
    ds: usize,
    /// The directories from the dataset's root down, with their inodes.
    dirs: Vec<(String, Ino)>,
    name: String,
    ino: Ino,
    len: usize,
    seed: u64,
    /// It exists from some txg in (after, txg]: complete at `txg`.
    after: u64,
    txg: u64,
    /// Each data block's copies as (offset, length).
    data_blocks: Vec<Vec<(u64, u64)>>,
}

impl File {
    fn path(&self) -> String {
        let mut p: Vec<&str> = self.dirs.iter().map(|(n, _)| n.as_str()).collect();
        p.push(&self.name);
        format!("/{}", p.join("/"))
    }

    /// The inodes a read of the file goes through, root directory first.
    fn chain(&self, root: Ino) -> Vec<Ino> {
        let mut v = vec![root];
        v.extend(self.dirs.iter().map(|(_, i)| *i));
        v.push(self.ino);
        v
    }
}

/// The pool before damage: its image, model and block addresses.
struct Built {
    image: FaultDevice,
    datasets: Vec<Ds>,
    files: Vec<File>,
    /// Addresses of blocks worth aiming at (MOS roots, file blocks).
    targets: Vec<u64>,
    exported_txg: u64,
}

fn tunables() -> Tunables {
    Tunables { zfs_arc_max: 16 << 20, zfs_arc_min: 8 << 20, tarn_vdev_threads: 2, ..Default::default() }
}

const SIZES: &[usize] = &[0, 1, 100, 900, 3000, 5000, 17_000, 64 << 10, 130_000, 400_000, 1 << 20, (3 << 20) + 1234];

/// Builds the pool: three datasets, two directory levels, a file of each
/// size per dataset; a sync after each file, so each is written in as few
/// txgs as possible and its txgs are known.
fn build() -> Built {
    let dev = Arc::new(FaultDevice::new(DEVICE_BYTES, 11));
    let root_props = vec![("redundant_metadata".to_string(), redundant_metadata())];
    let opts = CreateOptions { tunables: tunables(), root_props, ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(std::slice::from_ref(&dev)), vec![], &opts).expect("create");
    let dsl = pool.datasets();
    dsl.create("tank/r4k", &[("recordsize", "4K")], false).expect("create tank/r4k");
    dsl.create("tank/r4k/c2", &[("copies", "2")], false).expect("create tank/r4k/c2");
    let mut datasets = Vec::new();
    let mut mounts = Vec::new();
    for name in ["tank", "tank/r4k", "tank/r4k/c2"] {
        let os = dsl.objset(name).expect("objset");
        let fs = PosixFs::open(os.clone(), PosixOptions { atime: false, ..Default::default() }).expect("mount");
        let d1 = fs.mkdir(&ROOT, fs.root(), b"d1", 0o755).expect("mkdir").ino;
        let d2 = fs.mkdir(&ROOT, d1, b"d2", 0o755).expect("mkdir").ino;
        datasets.push(Ds { name: name.into(), id: os.id, root: fs.root() });
        mounts.push((os, fs, d1, d2));
    }
    pool.sync().expect("sync");
    let mut files = Vec::new();
    let mut after = pool.uberblock().txg;
    for (i, &len) in SIZES.iter().enumerate() {
        for (ds, (_, fs, d1, d2)) in mounts.iter().enumerate() {
            let dirs = match i % 3 {
                0 => vec![],
                1 => vec![("d1".to_string(), *d1)],
                _ => vec![("d1".to_string(), *d1), ("d2".to_string(), *d2)],
            };
            let parent = dirs.last().map_or(fs.root(), |(_, ino)| *ino);
            let name = format!("f{i}-{len}");
            let seed = (ds * 100 + i) as u64;
            let ino = fs.mknod(&ROOT, parent, name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino;
            if len > 0 {
                fs.write(&ROOT, ino, 0, &pattern(len, seed)).expect("write");
            }
            pool.sync().expect("sync");
            let txg = pool.uberblock().txg;
            files.push(File { ds, dirs, name, ino, len, seed, after, txg, data_blocks: vec![] });
            after = txg;
        }
    }
    let mut targets = Vec::new();
    for f in &mut files {
        let os = &mounts[f.ds].0;
        for (level, _, bp) in os.tree(f.ino, 1 << 20).expect("tree") {
            let copies: Vec<(u64, u64)> = bp.dva.iter().filter(|d| !d.is_empty()).map(|d| (d.offset, d.asize)).collect();
            targets.extend(copies.iter().map(|c| c.0));
            if level == 0 {
                f.data_blocks.push(copies);
            }
        }
    }
    targets.extend(pool.uberblock().mos.dva.iter().filter(|d| !d.is_empty()).map(|d| d.offset));
    for (os, _, _, _) in &mounts {
        targets.extend(os.root_bp().dva.iter().filter(|d| !d.is_empty()).map(|d| d.offset));
    }
    drop(mounts);
    let exported_txg = pool.uberblock().txg;
    pool.export().expect("export");
    Built { image: dev.snapshot_durable(), datasets, files, targets, exported_txg }
}

/// What one seed found.
#[derive(Default)]
struct Run {
    regions: Vec<(u64, u64)>,
    /// Opened without -F; refused and opened with -F; not opened at all.
    imported: bool,
    rewound: bool,
    unimportable: Option<String>,
    /// The newest uberblock was destroyed in every label (nothing can tell
    /// that its txg existed).
    newest_uberblock_lost: bool,
    correct: usize,
    discarded: usize,
    lost: usize,
    /// Lost files whose data the damage did not hold.
    beyond_held: usize,
    /// Files written across the txg opened (partly there): not checked.
    indeterminate: usize,
    export_error: Option<String>,
}

fn damage(b: &Built, seed: u64) -> (Arc<FaultDevice>, Vec<(u64, u64)>) {
    let d = Arc::new(b.image.snapshot_durable());
    let mut rng = Rng::new(seed);
    let n = if rng.chance(25) { rng.range(2, 3) } else { 1 };
    let mut regions = Vec::new();
    for _ in 0..n {
        // Log-uniform length in [4 KiB, 4 MiB]; half the regions aimed at a
        // known block, the rest anywhere on the device.
        let len = ((REGION_MIN as f64) * ((REGION_MAX / REGION_MIN) as f64).powf(rng.below(1 << 20) as f64 / (1 << 20) as f64)) as u64;
        let len = len.clamp(REGION_MIN, REGION_MAX);
        let offset = if rng.chance(50) {
            let t = b.targets[rng.below(b.targets.len() as u64) as usize];
            t.saturating_sub(rng.below(len)).min(DEVICE_BYTES - len)
        } else {
            rng.below(DEVICE_BYTES - len + 1)
        };
        overwrite(&d, offset, &pattern(len as usize, rng.next_u64()));
        regions.push((offset, len));
    }
    d.flush().expect("flush");
    (d, regions)
}

/// Writes `bytes` at any byte offset (the device takes whole sectors).
fn overwrite(d: &FaultDevice, offset: u64, bytes: &[u8]) {
    let start = offset / 512 * 512;
    let end = (offset + bytes.len() as u64).div_ceil(512) * 512;
    let mut buf = vec![0u8; (end - start) as usize];
    d.read_at(&mut buf, start).expect("read");
    let at = (offset - start) as usize;
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    d.write_at(&buf, start).expect("damage");
}

fn overlaps(regions: &[(u64, u64)], (off, len): (u64, u64)) -> bool {
    regions.iter().any(|&(ro, rl)| off < ro + rl && ro < off + len)
}

/// Imports the damaged image as an administrator would: without -F first;
/// with -F only when the refusal asked for it.
fn import(d: &Arc<FaultDevice>, run: &mut Run, b: &Built) -> Option<Pool> {
    let devs = as_dyn(std::slice::from_ref(d));
    let newest_valid = read_labels(d.as_ref()).uberblocks.iter().map(|u| u.txg).max();
    run.newest_uberblock_lost = newest_valid.is_some_and(|t| t < b.exported_txg);
    let opts = OpenOptions { tunables: tunables(), ..Default::default() };
    let e = match Pool::open_on(devs.clone(), vec![], &opts) {
        Ok(p) => {
            assert_eq!(p.rewound(), None, "an import without -F rewound");
            assert_eq!(Some(p.uberblock().txg), newest_valid, "an import without -F opened another txg than the newest valid one");
            run.imported = true;
            return Some(p);
        }
        Err(e) => e,
    };
    assert!(!e.msg.contains("panicked"), "{e}");
    if !e.msg.contains("tarn pool import -F") {
        run.unimportable = Some(e.msg);
        return None;
    }
    assert!(e.msg.contains("Recovery is possible") && e.msg.contains("must be discarded"), "a refusal says what would be lost: {e}");
    let plan = Pool::check_open_on(devs.clone(), &opts).expect("the refusal found a txg, so the dry run does");
    let p = Pool::open_on(devs, vec![], &OpenOptions { rewind: true, ..opts }).unwrap_or_else(|e| panic!("the refusal promised txg {}; -F failed: {e}", plan.txg));
    assert_eq!(p.rewound().as_ref(), Some(&plan), "-F opens the txg the dry run named");
    assert_eq!(p.uberblock().txg, plan.txg);
    run.rewound = true;
    Some(p)
}

/// Reads every file and checks it against the model and the error log.
fn check_files(pool: &Pool, b: &Built, run: &mut Run) {
    let txg = pool.uberblock().txg;
    let opts = PosixOptions { atime: false, ..Default::default() };
    let mounts: Vec<Option<Arc<PosixFs>>> = b
        .datasets
        .iter()
        .map(|ds| pool.datasets().objset(&ds.name).ok().and_then(|os| PosixFs::open(os, opts.clone()).ok()))
        .collect();
    let mut lost = Vec::new();
    for f in &b.files {
        if txg <= f.after {
            // Not created yet at the txg opened: absent (or under a
            // damaged directory), never there.
            if let Some(fs) = &mounts[f.ds] {
                assert!(read_file(fs, f).is_err(), "{} of '{}' exists at txg {} before it was created", f.path(), b.datasets[f.ds].name, txg);
            }
            run.discarded += 1;
            continue;
        }
        if txg < f.txg {
            run.indeterminate += 1;
            continue;
        }
        let Some(fs) = &mounts[f.ds] else {
            lost.push(f);
            continue;
        };
        match read_file(fs, f) {
            Ok(data) => {
                assert!(data.len() == f.len && data == pattern(f.len, f.seed), "{} of '{}' reads back wrong data ({} bytes)", f.path(), b.datasets[f.ds].name, data.len());
                run.correct += 1;
            }
            Err(e) => {
                assert_eq!(e.errno, libc::EIO, "{} of '{}' is missing without an I/O error (lost silently?): {}", f.path(), b.datasets[f.ds].name, e.msg);
                lost.push(f);
            }
        }
    }
    let log = pool.error_log();
    let named = named_errors(pool);
    assert_eq!(named.len(), log.len(), "every entry is named");
    for f in &lost {
        let ds = &b.datasets[f.ds];
        let unusable = mounts[f.ds].is_none();
        let by = log.iter().find(|e| covers(e, ds, &f.chain(ds.root), unusable));
        assert!(by.is_some(), "{} of '{}' cannot be read but the error log does not account for it: {:#?}", f.path(), ds.name, named);
    }
    run.lost = lost.len();
    run.beyond_held = lost.iter().filter(|f| !f.data_blocks.iter().any(|copies| copies.iter().all(|&c| overlaps(&run.regions, c)))).count();
}

fn read_file(fs: &PosixFs, f: &File) -> PResult<Vec<u8>> {
    let mut ino = fs.root();
    for (name, _) in &f.dirs {
        ino = fs.lookup(ino, name.as_bytes())?.ino;
    }
    let attr = fs.lookup(ino, f.name.as_bytes())?;
    assert_eq!(attr.ino, f.ino, "{} is another inode", f.path());
    let mut out = Vec::with_capacity(f.len);
    while (out.len() as u64) < attr.size {
        let chunk = fs.read(attr.ino, out.len() as u64, 1 << 20)?;
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Whether error-log entry `e` accounts for a file of dataset `ds` read
/// through the inodes `chain` (see the module docs).
fn covers(e: &Bookmark, ds: &Ds, chain: &[Ino], unusable: bool) -> bool {
    if unusable {
        return e.objset == 0 || e.objset == ds.id;
    }
    if e.objset != ds.id {
        return false;
    }
    if e.object != 0 {
        return chain.contains(&e.object);
    }
    match e.level {
        Bookmark::ROOT_LEVEL => true,
        Bookmark::DNODE_LEVEL => false,
        // A block of the dnode array at level l covers 1024^l dnode blocks.
        l => chain.iter().any(|ino| (ino / SLOTS_PER_BLOCK as u64) / BPS_PER_INDIRECT.pow(l as u32) == e.blkid),
    }
}

fn run_seed(b: &Built, seed: u64) -> Run {
    let _guard = SeedGuard(seed);
    let (d, regions) = damage(b, seed);
    let mut run = Run { regions, ..Default::default() };
    let Some(pool) = import(&d, &mut run, b) else { return run };
    check_files(&pool, b, &mut run);
    if let Err(e) = pool.export() {
        assert!(matches!(e.kind, ErrorKind::Corrupt | ErrorKind::Io | ErrorKind::Suspended), "export: {e}");
        run.export_error = Some(e.msg);
    }
    run
}

/// The pool's `redundant_metadata`: `all` (the default) unless
/// `TARN_DAMAGE_REDUNDANT_METADATA` names another value, to see what the
/// copies save (the single-region assertions then fail).
fn redundant_metadata() -> String {
    std::env::var("TARN_DAMAGE_REDUNDANT_METADATA").unwrap_or_else(|_| "all".into())
}

fn seeds() -> Vec<u64> {
    if let Some(s) = env_u64("TARN_DAMAGE_SEED") {
        return vec![s];
    }
    let first = env_u64("TARN_DAMAGE_FIRST_SEED").unwrap_or(0);
    (first..first + env_u64("TARN_DAMAGE_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect()
}

#[test]
fn random_damage_is_read_correctly_or_reported() {
    let t0 = std::time::Instant::now();
    let b = build();
    let built = t0.elapsed();
    let runs: Vec<(u64, Run)> = seeds().into_iter().map(|s| (s, run_seed(&b, s))).collect();
    let count = |f: &dyn Fn(&Run) -> bool| runs.iter().filter(|(_, r)| f(r)).count();
    let sum = |f: &dyn Fn(&Run) -> usize| runs.iter().map(|(_, r)| f(r)).sum::<usize>();
    eprintln!(
        "damage: {} seeds ({} files each, built in {:.1} s, {:.1} s in all): imported {}, refused and rewound with -F {}, unimportable {}, newest uberblock lost everywhere {}",
        runs.len(),
        b.files.len(),
        built.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        count(&|r| r.imported),
        count(&|r| r.rewound),
        count(&|r| r.unimportable.is_some()),
        count(&|r| r.newest_uberblock_lost),
    );
    eprintln!(
        "damage: files correct {}, discarded by a rewind {}, lost {} (beyond those whose data the damage held: {}), not checked (written across the txg opened) {}, exports that failed {}",
        sum(&|r| r.correct),
        sum(&|r| r.discarded),
        sum(&|r| r.lost),
        sum(&|r| r.beyond_held),
        sum(&|r| r.indeterminate),
        count(&|r| r.export_error.is_some()),
    );
    let single: Vec<_> = runs.iter().filter(|(_, r)| r.regions.len() == 1 && r.beyond_held > 0).map(|(s, r)| (s, r.regions[0].1, r.beyond_held)).collect();
    eprintln!("damage: single-region seeds losing files beyond the data they held (seed, region bytes, files): {:?}", single);
    for (s, r) in &runs {
        if let Some(why) = &r.unimportable {
            eprintln!("damage: seed {s} ({:?}) cannot be imported even with -F: {}", r.regions, why.lines().next().unwrap_or(""));
        }
    }
    let checked: BTreeSet<u64> = runs.iter().map(|(s, _)| *s).collect();
    assert_eq!(checked.len(), runs.len());
    for (s, r) in runs.iter().filter(|(_, r)| r.regions.len() == 1) {
        assert!(r.unimportable.is_none(), "seed {s}: one region of {} bytes made the pool unimportable", r.regions[0].1);
    }
    assert!(single.is_empty(), "single regions lost files beyond the data they held (seed, region bytes, files): {single:?}");
    if runs.len() as u64 >= DEFAULT_SEEDS {
        // The damage must reach files at all, or the checks above prove nothing.
        assert!(sum(&|r| r.lost) > 0, "{} seeds and no file lost: the damage misses the files", runs.len());
    }
}
