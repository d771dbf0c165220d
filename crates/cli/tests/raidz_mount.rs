//! RAID-Z2 through the daemon and the FUSE mount (issue 12, "What must be
//! shown" 3 and 4, the RAID-Z2 half; mirror_mount.rs has the mirror half):
//! bit rot on two of the devices under a real tree of files, and two
//! devices vanishing under load, then replaced.
//!
//! Every test runs a private daemon in a private mount namespace of its
//! own (`Env::private`): its mounts never reach the host and go with the
//! namespace, passed or failed. Each skips with a printed reason where
//! /dev/fuse, `unshare`/`nsenter` or `tar` is missing. Everything is
//! seeded: `TARN_RAIDZ_SEED=N` changes the seed (printed by each test).
//!
//! ## How the damage is placed and counted
//! The pool is one RAID-Z2 group of six image files. Each block of the
//! files is found by walking the files' block trees in this process on the
//! closed pool, and its column map computed (`RaidzGeometry::map`, the
//! arithmetic the vdev uses): column `c` of a block is `c.size` bytes at
//! byte `LABELS_FRONT + c.offset` of image `c.child`, parity first. Two of
//! the six images are then damaged in random *regions*: three disjoint
//! regions on each, one of them overlapping a region of the other device's
//! by half, so the blocks under the overlap have two damaged columns —
//! which is what RAID-Z2 tolerates. Within a region every byte of the
//! files' columns that the block's checksum covers (all of a parity
//! column; a data column up to the block's psize) is overwritten with
//! different bytes; the pool's other metadata and free space there are
//! left alone, so the damaged columns — and the blocks they belong to —
//! are known exactly. No block has a damaged column on any other device,
//! so no block has more than two.
//!
//! What the reads and the scrub must then do, and the counts:
//! - a read of a block whose *data* column is damaged fails the checksum,
//!   reads every column, rebuilds the block from parity, and rewrites every
//!   damaged column of it (parity included), each counted as one checksum
//!   error on its device and logged as "repaired N bytes at OFFSET on
//!   'DEVICE' (checksum error) from raidz2-0's parity". A block whose only
//!   damaged columns are parity reads back from its data columns at once:
//!   reads never see it. Two reads of one block at once may both repair it,
//!   so a device's CKSUM equals its repair lines, which may exceed the
//!   distinct columns they name;
//! - so every file reads back exactly while damaged, and the columns the
//!   reads repaired are exactly all the damaged columns of the blocks with
//!   a damaged data column;
//! - the scrub then reads every column of every block, finds exactly the
//!   damaged columns left (the parity-only blocks'), rewrites them, and
//!   counts one bad copy per such block; each device's CKSUM grows by its
//!   columns the scrub found and "repaired" by their bytes;
//! - afterwards every damaged column holds its bytes from before the
//!   damage (the good encoding), a second scrub finds nothing, and
//!   `inspect --verify` is clean.
//!
//! ## Device loss
//! A writer and a reader run through the mount while two of the six
//! devices vanish (deleted and truncated, or both by `tarn inject -e
//! nxio`); then each lost device is replaced (`tarn pool replace -w`) and
//! the replacements are shown to hold their columns by reading every file
//! with two *other* original devices offline.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use common::mounted::{counts, file_blocks, have_tar, logged_repairs_on, make_tree, open_readonly, overwrite, read_image, seed, under_load, MountedPool, Vanish};
use common::{Env, Rng};
use tarn_engine::vdev::Kind;
use tarn_ondisk::label::LABELS_FRONT;

/// Children of the RAID-Z2 group, and the size of each.
const WIDTH: usize = 6;
const SIZE: u64 = 128 << 20;

/// How `apply_repairs` ends a repair line for a column of this pool.
const FROM_PARITY: &str = " from raidz2-0's parity";

fn raidz2_pool(e: &Env) -> MountedPool {
    let names: Vec<String> = (0..WIDTH).map(|i| format!("d{i}.img")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    MountedPool::create(e, "raidz2", &names, &format!("{}M", SIZE >> 20))
}

/// One column of a block of the files, where it lies on its image.
#[derive(Clone, Debug)]
struct Column {
    dev: usize,
    /// Byte offset on the image.
    at: u64,
    size: u64,
    /// The bytes from `at` that the block's checksum (for data) or its
    /// parity (all of a parity column) covers.
    covered: u64,
    parity: bool,
    /// Index of its block in `Blocks::blocks`.
    block: usize,
}

/// A block of the files: its level in its file's tree.
#[derive(Clone, Debug)]
struct Block {
    level: u8,
}

struct Blocks {
    blocks: Vec<Block>,
    columns: Vec<Column>,
}

/// Every block of the files, and its columns, read in this process from
/// the closed pool on `devs`.
fn column_map(devs: &[PathBuf], files: &[String]) -> Blocks {
    let pool = open_readonly(devs);
    let top = pool.core().vdevs.get(0).expect("one top-level vdev");
    let Kind::Raidz(g) = &top.kind else { panic!("vdev 0 of the pool is not RAID-Z") };
    let g = *g;
    assert_eq!((g.width(), g.nparity()), (WIDTH, 2));
    let sector = g.sector_bytes();
    let (mut blocks, mut columns, mut seen) = (Vec::new(), Vec::new(), BTreeSet::new());
    for (_, level, bp) in file_blocks(&pool, files) {
        for d in bp.dva.iter().filter(|d| !d.is_empty()) {
            assert_eq!(d.vdev, 0, "one top-level vdev");
            if !seen.insert(d.offset) {
                continue;
            }
            let psize = bp.psize as u64;
            let map = g.map(d.offset, psize.div_ceil(sector) * sector).expect("the block's column map");
            for (k, c) in map.columns().iter().enumerate() {
                let parity = k < map.nparity();
                let covered = if parity { c.size } else { map.data_range(k).end.min(psize) - map.data_range(k).start };
                columns.push(Column { dev: c.child, at: LABELS_FRONT + c.offset, size: c.size, covered, parity, block: blocks.len() });
            }
            blocks.push(Block { level });
        }
    }
    Blocks { blocks, columns }
}

/// A byte range `[start, end)` of one image.
type Region = (u64, u64);

/// The damaged columns (indexes into `Blocks::columns`) and the bytes
/// overwritten, per damaged device.
struct Damage {
    devs: [usize; 2],
    columns: [Vec<usize>; 2],
    bytes: u64,
}

/// Bytes in a region of damage.
const REGION: u64 = 768 << 10;

/// Three disjoint regions of `REGION` bytes on each of two devices, each
/// starting at one of the files' columns on its device (the allocator
/// spreads them over the device in clusters; a region anywhere would
/// mostly meet free space), the first region of the second device the
/// first of the first shifted by half a region (see the module docs);
/// every covered byte of the files' columns in them overwritten.
fn damage_regions(p: &MountedPool, map: &Blocks, r: &mut Rng) -> Damage {
    let x = r.range(0, WIDTH as u64 - 1) as usize;
    let y = (x + r.range(1, WIDTH as u64 - 1) as usize) % WIDTH;
    let pick = |r: &mut Rng, dev: usize, regions: &mut Vec<Region>| {
        let starts: Vec<u64> = map.columns.iter().filter(|c| c.dev == dev).map(|c| c.at).collect();
        while regions.len() < 3 {
            let s = r.pick(&starts);
            if regions.iter().all(|&(a, b)| s + REGION <= a || b <= s) {
                regions.push((s, s + REGION));
            }
        }
    };
    let mut x_regions: Vec<Region> = Vec::new();
    pick(r, x, &mut x_regions);
    let mut y_regions: Vec<Region> = vec![(x_regions[0].0 + REGION / 2, x_regions[0].1 + REGION / 2)];
    pick(r, y, &mut y_regions);
    let mut bytes = 0;
    let columns = [(x, &x_regions), (y, &y_regions)].map(|(dev, regions)| {
        let mut f = std::fs::OpenOptions::new().read(true).write(true).open(&p.devs[dev]).unwrap();
        let mut hit = Vec::new();
        for (i, c) in map.columns.iter().enumerate().filter(|(_, c)| c.dev == dev) {
            let mut touched = false;
            for &(s, e) in regions.iter() {
                let (from, to) = (c.at.max(s), (c.at + c.covered).min(e));
                if from < to {
                    overwrite(&mut f, from, to - from, r);
                    bytes += to - from;
                    touched = true;
                }
            }
            if touched {
                hit.push(i);
            }
        }
        f.sync_all().unwrap();
        eprintln!("  {}: regions {:x?}", p.name(dev), regions);
        hit
    });
    Damage { devs: [x, y], columns, bytes }
}

/// The blocks of `cols` (indexes of columns).
fn blocks_of(map: &Blocks, cols: impl IntoIterator<Item = usize>) -> BTreeSet<usize> {
    cols.into_iter().map(|i| map.columns[i].block).collect()
}

/// What the daemon log says was repaired on the damaged devices since byte
/// `from`: per device, every repair's image offset (with repeats) and the
/// bytes. Each offset repaired must be one of the device's damaged columns.
fn repairs_since(e: &Env, p: &MountedPool, map: &Blocks, d: &Damage, from: usize, ctx: &str) -> [(Vec<u64>, u64); 2] {
    let log = e.log();
    let log = &log[from.min(log.len())..];
    let other: u64 = (0..WIDTH).filter(|i| !d.devs.contains(i)).map(|i| logged_repairs_on(log, &p.name(i), FROM_PARITY).0.len() as u64).sum();
    assert_eq!(other, 0, "{ctx}: no repair on an undamaged device");
    [0, 1].map(|k| {
        let (offsets, bytes) = logged_repairs_on(log, &p.name(d.devs[k]), FROM_PARITY);
        let damaged: BTreeSet<u64> = d.columns[k].iter().map(|&i| map.columns[i].at).collect();
        let wrong: Vec<&u64> = offsets.iter().filter(|o| !damaged.contains(o)).collect();
        assert!(wrong.is_empty(), "{ctx}: columns repaired on {} that were not damaged: {wrong:x?}", p.name(d.devs[k]));
        (offsets, bytes)
    })
}

/// The damaged columns (indexes) of device `k` of `d` at the offsets in `offsets`.
fn columns_at(map: &Blocks, d: &Damage, k: usize, offsets: &[u64]) -> BTreeSet<usize> {
    let at: BTreeSet<u64> = offsets.iter().copied().collect();
    d.columns[k].iter().copied().filter(|&i| at.contains(&map.columns[i].at)).collect()
}

/// Issue 12, "What must be shown" 3 (RAID-Z2): a RAID-Z2 of six devices
/// holding 2000 files unpacked with tar; random regions of two devices
/// overwritten on the closed pool, overlapping so that some blocks have
/// two damaged columns; then, through a fresh daemon and mount, every
/// check of the module docs.
#[test]
fn bit_rot_on_two_raidz2_devices_is_read_around_and_scrubbed() {
    let name = "bit_rot_on_two_raidz2_devices_is_read_around_and_scrubbed";
    let Some(e) = Env::private("raidz-rot", false) else { return };
    if !have_tar(name) {
        return;
    }
    let seed = seed("TARN_RAIDZ_SEED");
    eprintln!("bit rot on RAID-Z2: seed {seed} (TARN_RAIDZ_SEED to change)");
    let src = e.dir.join("src");
    let files = make_tree(&src, 2000, seed);
    let p = raidz2_pool(&e);
    p.untar(&e, &src);
    p.close(&e);
    let map = column_map(&p.devs, &files);
    let bytes: u64 = map.columns.iter().map(|c| c.size).sum();
    eprintln!("bit rot on RAID-Z2: {} files, {} blocks in {} columns of {} MiB over {WIDTH} devices", files.len(), map.blocks.len(), map.columns.len(), bytes >> 20);
    let parity_on: Vec<usize> = (0..WIDTH).map(|i| map.columns.iter().filter(|c| c.dev == i && c.parity).count()).collect();
    eprintln!("bit rot on RAID-Z2: parity columns per device: {parity_on:?}");
    let truth: BTreeMap<usize, Vec<u8>> = map.columns.iter().enumerate().map(|(i, c)| (i, read_image(&p.devs[c.dev], c.at, c.size))).collect();
    let mut r = Rng(seed ^ 0xB17);
    let d = damage_regions(&p, &map, &mut r);
    let both = blocks_of(&map, d.columns[0].iter().copied()).intersection(&blocks_of(&map, d.columns[1].iter().copied())).count();
    let parity_cols = d.columns.iter().flatten().filter(|&&i| map.columns[i].parity).count();
    let damaged_blocks = blocks_of(&map, d.columns.iter().flatten().copied());
    let indirect = damaged_blocks.iter().filter(|&&b| map.blocks[b].level > 0).count();
    eprintln!(
        "damage placed: {} bytes over {} columns on {} and {} on {} ({} of them parity), in {} blocks ({} indirect); {} blocks with both columns damaged",
        d.bytes,
        d.columns[0].len(),
        p.name(d.devs[0]),
        d.columns[1].len(),
        p.name(d.devs[1]),
        parity_cols,
        damaged_blocks.len(),
        indirect,
        both
    );
    assert!(both >= 10 && parity_cols >= 10 && d.columns.iter().all(|c| c.len() >= 50), "the regions hit enough columns, parity, and blocks twice");

    let log_before = e.log().len();
    p.reopen(&e);
    p.all_read_back(&e, &src, &files, "while damaged");
    let st = p.status_json(&e);
    let by_reads = repairs_since(&e, &p, &map, &d, log_before, "the reads");
    for (&dev, (offsets, bytes)) in d.devs.iter().zip(&by_reads) {
        assert_eq!(counts(&st, dev), (0, 0, offsets.len() as u64, *bytes), "the reads: {}: (READ, WRITE, CKSUM, repaired) are the repairs logged: {st}", p.name(dev));
    }
    for i in (0..WIDTH).filter(|i| !d.devs.contains(i)) {
        assert_eq!(counts(&st, i), (0, 0, 0, 0), "nothing against undamaged {}: {st}", p.name(i));
    }
    let read_cols: Vec<BTreeSet<usize>> = (0..2).map(|k| columns_at(&map, &d, k, &by_reads[k].0)).collect();
    let data_damaged = blocks_of(&map, d.columns.iter().flatten().copied().filter(|&i| !map.columns[i].parity));
    let all_cols = |blocks: &BTreeSet<usize>| -> BTreeSet<usize> { d.columns.iter().flatten().copied().filter(|&i| blocks.contains(&map.columns[i].block)).collect() };
    let read_all: BTreeSet<usize> = read_cols.iter().flatten().copied().collect();
    assert_eq!(read_all, all_cols(&data_damaged), "the reads repaired every damaged column of the blocks with a damaged data column, and no other");
    eprintln!(
        "the reads: repaired {} + {} columns of {} blocks ({} + {} repair lines, {} + {} bytes)",
        read_cols[0].len(),
        read_cols[1].len(),
        data_damaged.len(),
        by_reads[0].0.len(),
        by_reads[1].0.len(),
        by_reads[0].1,
        by_reads[1].1
    );

    let log_scrub = e.log().len();
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let st = p.status_json(&e);
    let rep = &st["scan"]["report"];
    let by_scrub = repairs_since(&e, &p, &map, &d, log_scrub, "the scrub");
    let scrub_cols: Vec<BTreeSet<usize>> = (0..2).map(|k| columns_at(&map, &d, k, &by_scrub[k].0)).collect();
    for k in 0..2 {
        assert_eq!(by_scrub[k].0.len(), scrub_cols[k].len(), "the scrub repairs each column it finds once");
        let found: BTreeSet<usize> = read_cols[k].union(&scrub_cols[k]).copied().collect();
        assert_eq!(found, d.columns[k].iter().copied().collect(), "every damaged column on {} was found, by a read or by the scrub", p.name(d.devs[k]));
        let want = (0, 0, (by_reads[k].0.len() + by_scrub[k].0.len()) as u64, by_reads[k].1 + by_scrub[k].1);
        assert_eq!(counts(&st, d.devs[k]), want, "after the scrub: {}: CKSUM counts each repair by a read and each column the scrub found: {st}", p.name(d.devs[k]));
    }
    let left = blocks_of(&map, scrub_cols.iter().flatten().copied());
    assert_eq!(left, damaged_blocks.difference(&data_damaged).copied().collect(), "the scrub found the blocks whose only damage is parity");
    assert_eq!(rep["bad_copies"].as_u64(), Some(left.len() as u64), "one bad copy per block the scrub found: {rep}");
    assert_eq!(rep["repaired_copies"].as_u64(), Some(left.len() as u64), "all repaired: {rep}");
    assert_eq!(rep["repaired_bytes"].as_u64(), Some(by_scrub[0].1 + by_scrub[1].1), "the scrub's repaired bytes are its columns': {rep}");
    assert_eq!(rep["errors"].as_array().map(|a| a.len()), Some(0), "no block lost: {rep}");
    eprintln!(
        "the scrub: {} bad copies (blocks) repaired, {} + {} columns, {} bytes; CKSUM {} on {} and {} on {}",
        left.len(),
        scrub_cols[0].len(),
        scrub_cols[1].len(),
        by_scrub[0].1 + by_scrub[1].1,
        counts(&st, d.devs[0]).2,
        p.name(d.devs[0]),
        counts(&st, d.devs[1]).2,
        p.name(d.devs[1])
    );
    for &i in d.columns.iter().flatten() {
        let c = &map.columns[i];
        assert!(read_image(&p.devs[c.dev], c.at, c.size) == truth[&i], "the damaged column at {:#x} on {} holds its encoding again", c.at, p.name(c.dev));
    }
    let status = e.ok(&["pool", "status", "tank"]);
    for want in ["state: ONLINE", "Applications are unaffected.", "errors: No known data errors", " with 0 errors on "] {
        assert!(status.contains(want), "status should say '{want}':\n{status}");
    }
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let again = p.status_json(&e);
    assert_eq!((again["scan"]["report"]["bad_copies"].as_u64(), again["scan"]["report"]["repaired_bytes"].as_u64()), (Some(0), Some(0)), "a second scrub finds nothing: {again}");
    for k in 0..2 {
        assert_eq!(counts(&again, d.devs[k]), counts(&st, d.devs[k]), "nothing more counted");
    }
    p.verified(&e, "after the scrub");
    p.all_read_back(&e, &src, &files, "after the scrub");
}

/// Issue 12, "What must be shown" 4 (RAID-Z2): a writer and a reader
/// through the mount of a RAID-Z2 of six (`under_load`); before the
/// writer's file 40 device `lost[0].0` vanishes, before file 70 device
/// `lost[1].0` (each as its `Vanish` says). No application error, nothing
/// lost: the pool is DEGRADED with both children out and the others
/// untouched, every file reads back, `inspect --verify` is clean. Then
/// each lost device is replaced by a new image (`pool replace -w`) —
/// after a daemon restart, where the deleted and truncated ones are
/// UNAVAIL; in the running daemon for injected ones, REMOVED — and
/// `replaced_hold_their_columns` checks the result.
fn two_vanish_under_load(name: &str, lost: [(usize, Vanish); 2], restart: bool) {
    let Some(e) = Env::private(name, false) else { return };
    let seed = seed("TARN_RAIDZ_SEED");
    eprintln!("{name}: seed {seed} (TARN_RAIDZ_SEED to change)");
    let p = raidz2_pool(&e);
    let load = under_load(&e, &p, name, seed, &|i| match i {
        40 => lost[0].1.apply(&e, &p.devs[lost[0].0], SIZE),
        70 => lost[1].1.apply(&e, &p.devs[lost[1].0], SIZE),
        _ => {}
    });
    e.ok(&["pool", "sync", "tank"]);
    let st = p.status_json(&e);
    assert_eq!((st["state"].as_str(), st["vdevs"][0]["state"].as_str()), (Some("DEGRADED"), Some("DEGRADED")), "{name}: {st}");
    for (dev, how) in lost {
        assert_eq!(st["vdevs"][0]["children"][dev]["state"].as_str(), Some(how.state()), "{name}: {}: {st}", p.name(dev));
    }
    let kept: Vec<usize> = (0..WIDTH).filter(|i| lost.iter().all(|l| l.0 != *i)).collect();
    for &i in &kept {
        assert_eq!(st["vdevs"][0]["children"][i]["state"].as_str(), Some("ONLINE"), "{name}: {st}");
        assert_eq!(counts(&st, i), (0, 0, 0, 0), "{name}: nothing against {}: {st}", p.name(i));
    }
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(lost.iter().any(|l| status.contains(l.1.status_line())) && status.contains("action: "), "{name}: {status}");
    load.check_files(&e, &p, name);
    p.verified(&e, name);
    if restart {
        p.close(&e);
        p.reopen(&e);
        let st = p.status_json(&e);
        assert_eq!(st["state"].as_str(), Some("DEGRADED"), "{name}: imported again: {st}");
        for (dev, how) in lost {
            let why = match how {
                Vanish::Delete => "No such file",
                // Cut to 64 MiB: less than a pool's smallest device.
                Vanish::Truncate => "too small to hold a tarn pool",
                Vanish::Inject => unreachable!("an injected device is back after a restart"),
            };
            let child = &st["vdevs"][0]["children"][dev];
            assert_eq!(child["state"].as_str(), Some("UNAVAIL"), "{name}: {st}");
            assert!(child["fault"].as_str().is_some_and(|f| f.contains(why)), "{name}: {} says why it is UNAVAIL: {st}", p.name(dev));
        }
        load.check_files(&e, &p, &format!("{name}, after a restart"));
    }
    let new = replace_lost(&e, &p, &lost.map(|l| l.0), name);
    load.check_files(&e, &p, &format!("{name}, replaced"));
    replaced_hold_their_columns(&e, &p, &new, &kept, name);
    load.check_files(&e, &p, &format!("{name}, with two other devices offline"));
}

/// Replaces each device of `lost` by a new image `nK.img`, waiting for
/// each resilver: it ends without errors, having written the new device's
/// columns; after the last the pool is ONLINE with the new images in the
/// lost ones' places and `inspect --verify` is clean. Returns the paths of
/// the new images.
fn replace_lost(e: &Env, p: &MountedPool, lost: &[usize], ctx: &str) -> Vec<String> {
    let mut new = Vec::new();
    for (k, &dev) in lost.iter().enumerate() {
        let n = e.dir.join(format!("devs/n{k}.img")).display().to_string();
        std::fs::File::create(&n).unwrap().set_len(SIZE).unwrap();
        e.ok(&["pool", "replace", "-w", "tank", &p.name(dev), &n]);
        let st = p.status_json(e);
        let rep = &st["scan"]["report"];
        assert_eq!(st["scan"]["func"].as_str(), Some("Resilver"), "{ctx}: {st}");
        assert!(rep["errors"].as_array().is_some_and(|a| a.is_empty()), "{ctx}: the resilver onto {n} ends without errors: {st}");
        let written = st["vdevs"][0]["children"][dev]["repaired_bytes"].as_u64().unwrap_or(0);
        assert!(written > 4 << 20, "{ctx}: {n} got its columns ({written} bytes): {st}");
        eprintln!("{ctx}: {} replaced by {n}: {written} bytes resilvered onto it", p.name(dev));
        new.push(n);
    }
    let st = p.status_json(e);
    let paths: Vec<String> = st["vdevs"][0]["children"].as_array().expect("raidz2-0's children").iter().map(|c| c["path"].as_str().unwrap_or("").to_string()).collect();
    let mut want: Vec<String> = (0..WIDTH).map(|i| p.name(i)).collect();
    for (k, &dev) in lost.iter().enumerate() {
        want[dev] = new[k].clone();
    }
    assert_eq!(paths, want, "{ctx}: the new images took the lost ones' places: {st}");
    assert_eq!((st["state"].as_str(), st["vdevs"][0]["state"].as_str()), (Some("ONLINE"), Some("ONLINE")), "{ctx}: {st}");
    p.verified(e, ctx);
    new
}

/// Two original devices that were never lost (`kept[0]`, `kept[2]`) are
/// taken offline and the daemon restarted: every column of theirs must
/// come from the others, the new images among them. A scrub then finds
/// every block whole (the four devices up agree).
fn replaced_hold_their_columns(e: &Env, p: &MountedPool, new: &[String], kept: &[usize], ctx: &str) {
    let off = [kept[0], kept[2]];
    for &i in &off {
        e.ok(&["pool", "offline", "tank", &p.name(i)]);
    }
    p.close(e);
    p.reopen(e);
    let st = p.status_json(e);
    for &i in &off {
        assert_eq!(st["vdevs"][0]["children"][i]["state"].as_str(), Some("OFFLINE"), "{ctx}: {st}");
    }
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let st = p.status_json(e);
    let rep = &st["scan"]["report"];
    assert_eq!(rep["bad_copies"].as_u64(), Some(0), "{ctx}: with {} and {} offline, {new:?} and the rest agree: {st}", p.name(off[0]), p.name(off[1]));
    assert!(rep["errors"].as_array().is_some_and(|a| a.is_empty()), "{ctx}: {st}");
}

#[test]
fn two_devices_deleted_and_truncated_under_load_lose_nothing_and_are_replaced() {
    two_vanish_under_load("raidz2-deleted-truncated", [(1, Vanish::Delete), (4, Vanish::Truncate)], true);
}

#[test]
fn two_devices_vanishing_by_inject_under_load_lose_nothing_and_are_replaced() {
    two_vanish_under_load("raidz2-injected", [(2, Vanish::Inject), (5, Vanish::Inject)], false);
}
