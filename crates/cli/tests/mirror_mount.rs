//! Mirrors through the daemon and the FUSE mount (issue 12, "What must be
//! shown" 3 and 4, the mirror half): bit rot on the devices under a real
//! tree of files, and a device vanishing under load.
//!
//! Every test runs a private daemon in a private mount namespace of its
//! own (`Env::private`): its mounts never reach the host and go with the
//! namespace, passed or failed. Each skips with a printed reason where
//! /dev/fuse, `unshare`/`nsenter` or `tar` is missing. Everything is
//! seeded: `TARN_MIRROR_SEED=N` changes the seed (printed by each test).
//!
//! How the damage is counted: the tests aim the damage at blocks of the
//! files, found by walking each file's block tree in this process on the
//! closed pool (`block_map`), and overwrite part of each chosen copy's
//! checksummed bytes on a device image with bytes that differ from the old
//! ones. So the damaged copies — per device, one per (block copy, device)
//! — are known exactly, and:
//! - a read that meets a damaged copy counts one checksum error on that
//!   device and rewrites the copy from its sibling, logging one "repaired
//!   N bytes at OFFSET on 'DEVICE'" line per repair in the daemon log. Two
//!   reads of one block at once (the kernel sends reads in parallel) may
//!   both meet the damage before either repairs it, so the device's CKSUM
//!   count equals the repair lines, which may exceed the distinct copies
//!   they name — those must all be damaged copies;
//! - the scrub then finds exactly the damaged copies no read repaired,
//!   repairs them, and CKSUM grows by that many, "repaired" (the device's
//!   repaired bytes) by the reads' repairs plus the scrub's;
//! - afterwards every damaged copy equals its sibling's bytes on the image.
//!
//! Regressions they pin (each failed before its fix):
//! - `status` ended a mirror's report of repaired damage with `errors: N
//!   I/O or checksum errors` beside "Applications are unaffected", where
//!   zpool says `errors: No known data errors` (the errors: line is about
//!   lost data) — round 1 of the bit rot test;
//! - a mirror child deleted or truncated under a live pool left the pool
//!   unopenable by `tarn inspect` and by the daemon's import of its cache
//!   file ("cannot open 'b.img'", "smaller than the pool expects") although
//!   its sibling held everything — the device-loss tests (and, in the
//!   engine, `mirror.rs`).
//!
//!
//! A deleted or truncated child is then replaced (`tarn pool replace -w
//! tank <lost> <new>`): the resilver ends without errors, the pool is
//! ONLINE with the new device in the lost one's place, `inspect --verify`
//! is clean, and every file reads back equal to its source from the new
//! device alone (the other child offline, the daemon restarted). The
//! injected vanish continues to its resilver when the device is back.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::mounted::{counts, file_blocks, have_tar, logged_repairs_on, make_tree, open_readonly, overwrite, read_image, seed, under_load, MountedPool, Vanish};
use common::{Env, Rng};

/// The size of each device.
const SIZE: u64 = 256 << 20;

/// One copy of a block of a file: its mirror offset (the same on every
/// child) and the bytes its checksum covers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Copy {
    offset: u64,
    psize: u64,
    level: u8,
    file: String,
}

/// Every block copy of the files in dataset `tank` (not embedded, no hole),
/// read in this process from the closed pool on `devs` (read-only). The
/// pool is one mirror, so each copy is at its offset on every child.
fn block_map(devs: &[PathBuf], files: &[String]) -> Vec<Copy> {
    let pool = open_readonly(devs);
    let mut out = Vec::new();
    for (file, level, bp) in file_blocks(&pool, files) {
        for d in bp.dva.iter().filter(|d| !d.is_empty()) {
            assert_eq!(d.vdev, 0, "one top-level vdev");
            out.push(Copy { offset: d.offset, psize: bp.psize as u64, level, file: file.clone() });
        }
    }
    out.sort();
    out.dedup_by_key(|c| c.offset);
    out
}

/// Overwrites a random part (at least half) of the checksummed bytes
/// of each copy on image `img` with bytes that differ from the old ones;
/// returns the bytes overwritten.
fn damage(img: &Path, copies: &[Copy], r: &mut Rng) -> u64 {
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let mut total = 0;
    for c in copies {
        let len = r.range(c.psize.div_ceil(2), c.psize);
        let at = c.offset + r.range(0, c.psize - len);
        overwrite(&mut f, at, len, r);
        total += len;
    }
    f.sync_all().unwrap();
    total
}

/// `n` distinct copies drawn from `from`, none in `not`.
fn choose(from: &[Copy], n: usize, not: &BTreeSet<u64>, r: &mut Rng) -> Vec<Copy> {
    let mut out: BTreeMap<u64, Copy> = BTreeMap::new();
    for _ in 0..n * 100 {
        if out.len() == n {
            break;
        }
        let c = r.pick(from);
        if !not.contains(&c.offset) {
            out.insert(c.offset, c);
        }
    }
    assert_eq!(out.len(), n, "enough copies to choose from");
    out.into_values().collect()
}

/// A 2-way mirror pool "tank" on `devs/a.img` and `devs/b.img` (256 MiB
/// each), mounted at `mnt` in the test's namespace.
fn mirror_pool(e: &Env) -> MountedPool {
    MountedPool::create(e, "mirror", &["a.img", "b.img"], "256M")
}

/// Damage on child(ren): the copies damaged on each device.
type Damaged = [Vec<Copy>; 2];

/// Each device's repairs logged by reads (see the module docs) since
/// byte `from` of the daemon log: the number of repairs, the distinct
/// copies repaired — which must all be damaged ones — and the bytes.
fn logged_repairs(e: &Env, p: &MountedPool, damaged: &Damaged, from: usize, ctx: &str) -> [(u64, BTreeSet<u64>, u64); 2] {
    let log = e.log();
    let log = &log[from.min(log.len())..];
    [0, 1].map(|i| {
        let (offsets, bytes) = logged_repairs_on(log, &p.name(i), " from another copy");
        let distinct: BTreeSet<u64> = offsets.iter().copied().collect();
        let want: BTreeSet<u64> = damaged[i].iter().map(|c| c.offset).collect();
        assert!(distinct.is_subset(&want), "{ctx}: reads repaired copies on {} that were not damaged: {:?}", p.name(i), distinct.difference(&want).collect::<Vec<_>>());
        (offsets.len() as u64, distinct, bytes)
    })
}

/// After the files were read with `damaged` on the images: each device's
/// counts, then a scrub, then the counts again, as the module docs say
/// (the scrub's walk may read metadata through the mirror too: its
/// repairs are logged as the reads' are); every damaged copy equals its
/// sibling's again, and a second scrub finds nothing. `log_before` is the
/// length of the daemon log before the reads.
fn check_counts_and_scrub(e: &Env, p: &MountedPool, damaged: &Damaged, log_before: usize, ctx: &str) {
    let st = p.status_json(e);
    let by_reads = logged_repairs(e, p, damaged, log_before, ctx);
    for (i, (n, _, bytes)) in by_reads.iter().enumerate() {
        assert_eq!(counts(&st, i), (0, 0, *n, *bytes), "{ctx}: {}: (READ, WRITE, CKSUM, repaired) are the reads' repairs: {st}", p.name(i));
    }
    eprintln!("{ctx}: the reads repaired {} and {} of the {} and {} damaged copies", by_reads[0].1.len(), by_reads[1].1.len(), damaged[0].len(), damaged[1].len());
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let st = p.status_json(e);
    let rep = &st["scan"]["report"];
    let by_reads = logged_repairs(e, p, damaged, log_before, ctx);
    let found: Vec<u64> = (0..2).map(|i| (damaged[i].len() - by_reads[i].1.len()) as u64).collect();
    assert_eq!(rep["bad_copies"].as_u64(), Some(found[0] + found[1]), "{ctx}: the scrub finds the damaged copies no read repaired: {rep}");
    assert_eq!(rep["repaired_copies"].as_u64(), Some(found[0] + found[1]), "{ctx}: and repairs them all: {rep}");
    assert_eq!(rep["errors"].as_array().map(|a| a.len()), Some(0), "{ctx}: no block lost: {rep}");
    let mut scrub_bytes = 0;
    for i in 0..2 {
        let (r, w, ck, bytes) = counts(&st, i);
        assert_eq!((r, w, ck), (0, 0, by_reads[i].0 + found[i]), "{ctx}: {} counts each failed read and each copy the scrub found: {st}", p.name(i));
        assert!(bytes >= by_reads[i].2 + found[i] * 512, "{ctx}: the scrub's repairs on {} are counted: {st}", p.name(i));
        scrub_bytes += bytes - by_reads[i].2;
    }
    assert_eq!(rep["repaired_bytes"].as_u64(), Some(scrub_bytes), "{ctx}: the devices' repaired bytes add up to the scrub's: {rep}");
    for (i, copies) in damaged.iter().enumerate() {
        for c in copies {
            let (mine, theirs) = (read_image(&p.devs[i], c.offset, c.psize), read_image(&p.devs[1 - i], c.offset, c.psize));
            assert!(mine == theirs, "{ctx}: the damaged copy at {:#x} on {} is whole again", c.offset, p.name(i));
        }
    }
    let hit: Vec<String> = (0..2).filter(|&i| !damaged[i].is_empty()).map(|i| p.name(i)).collect();
    check_scrub_status(e, &hit, found[0] + found[1], ctx);
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let again = p.status_json(e);
    assert_eq!(again["scan"]["report"]["bad_copies"].as_u64(), Some(0), "{ctx}: a second scrub finds nothing: {again}");
}

/// What `status` says of a mirror that met checksum errors and repaired
/// them all (zpool's wording, "Applications are unaffected"); each device
/// in `hit` has a line under the table saying how much was rewritten.
fn check_scrub_status(e: &Env, hit: &[String], scrub_found: u64, ctx: &str) {
    let status = e.ok(&["pool", "status", "tank"]);
    for want in [
        "state: ONLINE",
        "status: One or more devices has experienced an unrecoverable error.",
        "Applications are unaffected.",
        "action: Determine if the device needs to be replaced, and clear the errors",
        "errors: No known data errors",
        " with 0 errors on ",
    ] {
        assert!(status.contains(want), "{ctx}: status should say '{want}':\n{status}");
    }
    let nothing = status.contains("scan: scrub repaired 0 in ");
    assert_eq!(nothing, scrub_found == 0, "{ctx}: the scan: line says what the scrub repaired:\n{status}");
    for dev in hit {
        assert!(status.lines().any(|l| l.contains(&format!("{dev}: ")) && l.contains(" rewritten from good copies")), "{ctx}: a line says what was rewritten on {dev}:\n{status}");
    }
}

/// A 2-way mirror holding a few thousand files unpacked with tar. Three
/// rounds of damage on the closed pool's images, each checked through a
/// fresh daemon and mount:
/// 1. random parts of 200 block copies on one device (MiBs): every
///    file reads back exactly while damaged; the counts and the scrub as
///    the module docs say; `status` says what zpool says;
/// 2. disjoint copies damaged on both devices: the same, per device;
/// 3. the same copies of a few data blocks damaged on both devices: their
///    files fail with EIO (never wrong bytes), every other file reads
///    back, `status -v` names exactly those files, the scrub counts them
///    as its errors.
#[test]
fn bit_rot_on_a_mirror_is_read_around_and_scrubbed() {
    let Some(e) = Env::private("mirror-rot", false) else { return };
    if !have_tar("bit_rot_on_a_mirror_is_read_around_and_scrubbed") {
        return;
    }
    let seed = seed("TARN_MIRROR_SEED");
    eprintln!("bit rot on a mirror: seed {seed} (TARN_MIRROR_SEED to change)");
    let src = e.dir.join("src");
    let files = make_tree(&src, 2000, seed);
    let p = mirror_pool(&e);
    p.untar(&e, &src);
    p.close(&e);
    let map = block_map(&p.devs, &files);
    let bytes: u64 = map.iter().map(|c| c.psize).sum();
    eprintln!("bit rot on a mirror: {} files, {} block copies of {} MiB on each device", files.len(), map.len(), bytes >> 20);
    let mut r = Rng(seed ^ 0xB17);

    let one = choose(&map, 200, &BTreeSet::new(), &mut r);
    let n = damage(&p.devs[0], &one, &mut r);
    eprintln!("round 1: {} bytes of {} copies damaged on a.img", n, one.len());
    round(&e, &p, &src, &files, &[one, vec![]], "round 1 (one device)");

    let a = choose(&map, 100, &BTreeSet::new(), &mut r);
    let b = choose(&map, 100, &a.iter().map(|c| c.offset).collect(), &mut r);
    let n = damage(&p.devs[0], &a, &mut r) + damage(&p.devs[1], &b, &mut r);
    eprintln!("round 2: {} bytes of {} + {} copies damaged on a.img and b.img", n, a.len(), b.len());
    round(&e, &p, &src, &files, &[a, b], "round 2 (both devices, disjoint)");

    lost_blocks(&e, &p, &src, &files, &map, &mut r);
}

/// One round of damage already on the closed pool's images: the daemon
/// imports the pool, every file reads back, then the counts and scrubs.
fn round(e: &Env, p: &MountedPool, src: &Path, files: &[String], damaged: &Damaged, ctx: &str) {
    let log_before = e.log().len();
    p.reopen(e);
    p.all_read_back(e, src, files, ctx);
    check_counts_and_scrub(e, p, damaged, log_before, ctx);
    e.ok(&["pool", "clear", "tank"]);
    let st = p.status_json(e);
    assert_eq!((counts(&st, 0).2, counts(&st, 1).2), (0, 0), "{ctx}: clear forgets the counts");
    assert!(!e.ok(&["pool", "status", "tank"]).contains("status: "), "{ctx}: a cleared, healthy pool has no status: line");
    p.close(e);
}

/// Round 3: the same few data blocks damaged on both children.
fn lost_blocks(e: &Env, p: &MountedPool, src: &Path, files: &[String], map: &[Copy], r: &mut Rng) {
    let ctx = "round 3 (the same blocks on both devices)";
    let data: Vec<Copy> = map.iter().filter(|c| c.level == 0).cloned().collect();
    let lost = choose(&data, 5, &BTreeSet::new(), r);
    damage(&p.devs[0], &lost, r);
    damage(&p.devs[1], &lost, r);
    let victims: BTreeSet<&str> = lost.iter().map(|c| c.file.as_str()).collect();
    p.reopen(e);
    for rel in files {
        match std::fs::read(p.file(e, rel)) {
            Ok(got) => {
                assert!(!victims.contains(rel.as_str()), "{ctx}: {rel} has a block with no good copy, yet it read");
                assert!(got == std::fs::read(src.join(rel)).unwrap(), "{ctx}: {rel} reads back wrong bytes");
            }
            Err(err) => {
                assert!(victims.contains(rel.as_str()), "{ctx}: {rel} should read: {err}");
                assert_eq!(err.raw_os_error(), Some(libc::EIO), "{ctx}: {rel}: a lost block is EIO: {err}");
            }
        }
    }
    let v = e.ok(&["pool", "status", "-v", "tank"]);
    let list = v.split("errors: Permanent errors have been detected in the following files:").nth(1).unwrap_or_else(|| panic!("{ctx}: {v}"));
    let named: BTreeSet<String> = list.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
    let want: BTreeSet<String> = victims.iter().map(|f| format!("{}/{}", p.mnt, f)).collect();
    assert_eq!(named, want, "{ctx}: status -v names exactly the files with a lost block:\n{v}");
    e.ok(&["pool", "scrub", "-w", "tank"]);
    let st = p.status_json(e);
    assert_eq!(st["scan"]["report"]["errors"].as_array().map(|a| a.len()), Some(lost.len()), "{ctx}: the scrub's errors are the lost blocks: {st}");
    for i in 0..2 {
        assert!(counts(&st, i).2 >= lost.len() as u64, "{ctx}: both devices count the lost blocks' checksum errors: {st}");
    }
}

/// Issue 12, "What must be shown" 4 (the part possible before replace): a
/// writer (files of 16–416 KiB, each fsynced) and a reader (re-reading
/// 100 files written before, ~21 MiB, past its small ARC and the page
/// cache) through the mount of a 2-way mirror; after 40
/// files, `b.img` vanishes (`how`); the writer writes 80 more. No
/// application error, nothing lost; the pool is DEGRADED with the child
/// REMOVED or FAULTED and zpool's status:/action: lines; `inspect
/// --verify` is clean; a daemon restarted on the cache file imports the
/// pool (DEGRADED, or resilvering the injected child back) and every file
/// reads back.
fn vanish_under_load(name: &str, how: Vanish) {
    let Some(e) = Env::private(name, false) else { return };
    let seed = seed("TARN_MIRROR_SEED");
    eprintln!("{name}: seed {seed} (TARN_MIRROR_SEED to change)");
    let p = mirror_pool(&e);
    let load = under_load(&e, &p, name, seed, &|i| {
        if i == 40 {
            how.apply(&e, &p.devs[1], SIZE);
        }
    });
    check_degraded(&e, &p, how, name);
    load.check_files(&e, &p, name);
    p.verified(&e, name);
    p.close(&e);
    p.reopen(&e);
    check_after_restart(&e, &p, how, name);
    load.check_files(&e, &p, &format!("{name}, after a restart"));
    if how != Vanish::Inject {
        replace_lost(&e, &p, name);
        load.check_files(&e, &p, &format!("{name}, from the replacement alone"));
    }
}

/// The lost `b.img` replaced by a new `c.img`: resilvered without errors,
/// the pool ONLINE with c.img in b.img's place, `inspect --verify` clean;
/// then `a.img` is taken offline and the daemon restarted, so what is read
/// next comes from c.img alone.
fn replace_lost(e: &Env, p: &MountedPool, ctx: &str) {
    let c = e.dir.join("devs/c.img").display().to_string();
    std::fs::File::create(&c).unwrap().set_len(SIZE).unwrap();
    e.ok(&["pool", "replace", "-w", "tank", &p.name(1), &c]);
    let st = p.status_json(e);
    let paths: Vec<&str> = st["vdevs"][0]["children"].as_array().expect("mirror-0's children").iter().map(|c| c["path"].as_str().unwrap_or("")).collect();
    assert_eq!(paths, [p.name(0).as_str(), c.as_str()], "{ctx}: c.img took b.img's place: {st}");
    assert_eq!((st["state"].as_str(), st["scan"]["func"].as_str()), (Some("ONLINE"), Some("Resilver")), "{ctx}: {st}");
    let rep = &st["scan"]["report"];
    assert!(rep["errors"].as_array().is_some_and(|a| a.is_empty()) && rep["repaired_bytes"].as_u64() > Some(20 << 20), "{ctx}: c.img got every block: {st}");
    p.verified(e, ctx);
    e.ok(&["pool", "offline", "tank", &p.name(0)]);
    p.close(e);
    p.reopen(e);
    let st = p.status_json(e);
    assert_eq!(st["vdevs"][0]["children"][0]["state"].as_str(), Some("OFFLINE"), "{ctx}: reads go to c.img alone: {st}");
}

/// The pool imported again by a restarted daemon: a deleted or truncated
/// child is UNAVAIL saying why; an injected one (its file whole, the
/// handler gone with the daemon) is back and resilvers what it missed.
fn check_after_restart(e: &Env, p: &MountedPool, how: Vanish, ctx: &str) {
    let why = match how {
        Vanish::Delete => "No such file",
        Vanish::Truncate => "smaller than the pool expects",
        Vanish::Inject => {
            e.ok(&["pool", "wait", "-t", "resilver", "tank"]);
            let st = p.status_json(e);
            assert_eq!((st["state"].as_str(), st["vdevs"][0]["children"][1]["state"].as_str()), (Some("ONLINE"), Some("ONLINE")), "{ctx}: back: {st}");
            let rep = &st["scan"]["report"];
            assert!(rep["errors"].as_array().is_some_and(|a| a.is_empty()) && rep["repaired_bytes"].as_u64() > Some(0), "{ctx}: the resilver copied what b.img missed: {st}");
            e.ok(&["pool", "scrub", "-w", "tank"]);
            let st = p.status_json(e);
            assert_eq!(st["scan"]["report"]["bad_copies"].as_u64(), Some(0), "{ctx}: after the resilver, b.img holds every block: {st}");
            return;
        }
    };
    let st = p.status_json(e);
    let child = &st["vdevs"][0]["children"][1];
    assert_eq!((st["state"].as_str(), child["state"].as_str()), (Some("DEGRADED"), Some("UNAVAIL")), "{ctx}: imported again: {st}");
    assert!(child["fault"].as_str().is_some_and(|f| f.contains(why)), "{ctx}: the child says why it is UNAVAIL: {st}");
}

/// The pool after the loss: DEGRADED, mirror-0 DEGRADED, b.img REMOVED or
/// FAULTED, a.img ONLINE with no errors, and zpool's lines.
fn check_degraded(e: &Env, p: &MountedPool, how: Vanish, ctx: &str) {
    e.ok(&["pool", "sync", "tank"]);
    let st = p.status_json(e);
    assert_eq!(st["state"].as_str(), Some("DEGRADED"), "{ctx}: {st}");
    assert_eq!(st["vdevs"][0]["state"].as_str(), Some("DEGRADED"), "{ctx}: {st}");
    assert_eq!(st["vdevs"][0]["children"][1]["state"].as_str(), Some(how.state()), "{ctx}: {st}");
    assert_eq!(st["vdevs"][0]["children"][0]["state"].as_str(), Some("ONLINE"), "{ctx}: {st}");
    assert_eq!(counts(&st, 0), (0, 0, 0, 0), "{ctx}: nothing against the good device: {st}");
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains(how.status_line()) && status.contains("Sufficient replicas exist") && status.contains("action: "), "{ctx}: {status}");
}

#[test]
fn a_deleted_child_under_load_loses_nothing() {
    vanish_under_load("mirror-deleted", Vanish::Delete);
}

#[test]
fn a_truncated_child_under_load_loses_nothing() {
    vanish_under_load("mirror-truncated", Vanish::Truncate);
}

#[test]
fn a_child_vanishing_by_inject_under_load_loses_nothing_and_resilvers() {
    vanish_under_load("mirror-injected", Vanish::Inject);
}
