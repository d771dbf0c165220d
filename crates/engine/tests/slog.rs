//! Separate intent-log devices (log vdevs, `pool::log_vdev`): log blocks go
//! to the log vdev and nothing else does; the class survives export and
//! import; a log device that fails costs no error and no suspension (the
//! commit falls back to a txg sync, later blocks go to the main pool); an
//! import without a log device is refused unless asked, and then says
//! what it discarded; a log vdev can be removed; hostile input is refused.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::*;
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::posix::{Caller, FileSystem, PosixFs, PosixOptions};
use tarn_engine::sys::fault::{FaultConfig, FaultDevice, FaultZone};
use tarn_engine::sys::BlockDevice;
use tarn_engine::tunables::Tunables;
use tarn_engine::{OpenOptions, Pool};
use tarn_ondisk::uberblock::{FEATURE_HOLE_VDEVS, FEATURE_LOG_VDEVS};

const ROOT: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0o022, fsetid: true };

/// No txg syncs on their own: only the log makes a change durable between
/// the syncs a test asks for.
fn no_timer() -> Tunables {
    Tunables { zfs_txg_timeout: 3600, zfs_dirty_data_max: 64 << 20, ..small_tunables() }
}

fn top(layout: Layout, devs: &[Arc<FaultDevice>], first: usize) -> NewTop {
    NewTop { layout, devices: devs.iter().enumerate().map(|(i, d)| (format!("mem{}", first + i), d.clone() as Arc<dyn BlockDevice>)).collect() }
}

/// "tank" on mem0 with a log vdev on mem1.
fn pool_with_log() -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(2, 256 << 20, 11);
    let opts = tarn_engine::CreateOptions { tunables: no_timer(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs[..1]), vec![], &opts).expect("create");
    pool.add_log_vdevs_on(vec![top(Layout::Plain, &devs[1..], 1)], false).expect("add log");
    (devs, pool)
}

fn import_with(devs: &[Arc<FaultDevice>], missing_log: bool) -> tarn_engine::Result<Pool> {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: no_timer(), missing_log, ..Default::default() })
}

fn mount_logged(pool: &Pool) -> Arc<PosixFs> {
    let zil = pool.datasets().zil("tank").expect("zil");
    PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), ..Default::default() }).expect("mount")
}

/// A file `name` holding `data`, fsynced.
fn fsynced(fs: &PosixFs, name: &str, data: &[u8]) -> u64 {
    let ino = fs.mknod(&ROOT, fs.root(), name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("create").ino;
    fs.write(&ROOT, ino, 0, data).expect("write");
    fs.fsync(ino, false).expect("fsync");
    ino
}

fn read_all(fs: &PosixFs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size;
    fs.read(ino, 0, size as u32).expect("read")
}

fn lookup(fs: &PosixFs, name: &str) -> Option<u64> {
    fs.lookup(fs.root(), name.as_bytes()).ok().map(|a| a.ino)
}

fn fallbacks(pool: &Pool) -> u64 {
    pool.datasets().zil("tank").unwrap().stats.fallbacks.load(Ordering::Relaxed)
}

/// Log blocks land on the log vdev, ordinary blocks never do, the pool's
/// size leaves it out, and the class survives export and import (it once
/// did not: the allocator's checkpoint load dropped it).
#[test]
fn log_blocks_go_to_the_log_vdev_and_nothing_else_does() {
    let (devs, pool) = pool_with_log();
    assert_ne!(pool.config().features_incompat & FEATURE_LOG_VDEVS, 0, "feature log vdevs");
    assert_eq!(pool.config().logs, vec![1]);
    let st = pool.status();
    assert_eq!(st.logs.len(), 1, "the logs section");
    assert_eq!(st.logs[0].class, "log");
    assert!(st.vdevs.iter().all(|v| v.class == "normal"));
    assert!(st.size < 256 << 20, "the log vdev's space is not the pool's: {}", st.size);
    let fs = mount_logged(&pool);
    let written = devs[1].stats().bytes_written;
    let synced = pool.uberblock().txg;
    fsynced(&fs, "warm", b"w");
    let mut files = Vec::new();
    for i in 0..20 {
        files.push((fsynced(&fs, &format!("f{}", i), &pattern(9000, i)), pattern(9000, i)));
    }
    assert!(devs[1].stats().bytes_written > written + 20 * 4096, "the log blocks went to the log device");
    assert!(pool.core().alloc.lock().held_bytes(1) > 0, "log blocks are allocated on the log vdev");
    assert!(pool.uberblock().txg <= synced + 2, "fsyncs did not sync txgs");
    // Lots of ordinary data: none of it on the log vdev (the allocator's
    // invariant 7 holds: only log blocks there).
    let big = fs.mknod(&ROOT, fs.root(), b"big", libc::S_IFREG | 0o644, 0).unwrap().ino;
    for i in 0..40u64 {
        fs.write(&ROOT, big, i << 20, &pattern(1 << 20, i)).unwrap();
    }
    pool.sync().unwrap();
    pool.check_invariants().expect("invariants");
    // A power cut: the fsynced files replay from the log device.
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, false).expect("import");
    assert!(pool.core().alloc.lock().is_log(1), "the log class survived import");
    assert_eq!(pool.log_vdevs(), vec![1]);
    let fs = mount_logged(&pool);
    for (i, (ino, data)) in files.iter().enumerate() {
        assert_eq!(lookup(&fs, &format!("f{}", i)), Some(*ino));
        assert_eq!(&read_all(&fs, *ino), data, "f{}", i);
    }
    drop(fs);
    verified(&pool, "after replay from the log vdev");
    pool.export().unwrap();
    let pool = import_with(&image, false).expect("import after export");
    assert!(pool.core().alloc.lock().is_log(1), "the log class survived export");
    verified(&pool, "after export");
}

/// The log device starts failing every write under an fsync load: no
/// fsync fails, the pool is not suspended, the failing commit syncs the
/// txg, later commits write their blocks to the main pool; status shows
/// the log vdev FAULTED with its errors. A power cut then: every fsynced
/// file is there, also imported without the dead log device.
#[test]
fn a_failing_log_device_falls_back_without_an_error() {
    let (devs, pool) = pool_with_log();
    let fs = mount_logged(&pool);
    fsynced(&fs, "before", b"on the log device");
    assert_eq!(fallbacks(&pool), 0);
    devs[1].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    let mut files = Vec::new();
    for i in 0..10 {
        files.push((format!("g{}", i), pattern(5000, 100 + i)));
        let (n, d) = files.last().unwrap();
        fsynced(&fs, n, d);
    }
    assert!(pool.suspension().is_none(), "a log device took the pool down");
    let fb = fallbacks(&pool);
    assert!(fb >= 1, "the failed round fell back to a txg sync");
    let log = &pool.status().logs[0];
    assert_eq!(log.state, "FAULTED", "{:?}", log);
    assert!(log.write_errors > 0, "{:?}", log);
    assert_eq!(pool.status().state, "DEGRADED");
    // From now on the log goes to the main pool: no more fallbacks.
    let synced = pool.uberblock().txg;
    for i in 10..20 {
        files.push((format!("g{}", i), pattern(5000, 100 + i)));
        let (n, d) = files.last().unwrap();
        fsynced(&fs, n, d);
    }
    assert_eq!(fallbacks(&pool), fb, "later commits wrote the log on the main pool");
    assert!(pool.uberblock().txg <= synced + 1, "later fsyncs did not sync txgs");
    let image = durable(&devs[..1]);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, true).expect("import without the dead log device");
    let fs = mount_logged(&pool);
    assert!(lookup(&fs, "before").is_some());
    for (n, d) in &files {
        let ino = lookup(&fs, n).unwrap_or_else(|| panic!("{} lost", n));
        assert_eq!(&read_all(&fs, ino), d, "{}", n);
    }
    drop(fs);
    verified(&pool, "after the log device failed");
}

/// A log device missing at import: refused, naming it and the flag; with
/// `missing_log` the pool imports, the records on it are discarded and said
/// so (warnings, an event, status), the vdev is UNAVAIL and can be removed.
#[test]
fn import_without_the_log_device_needs_missing_log() {
    let (devs, pool) = pool_with_log();
    let fs = mount_logged(&pool);
    fsynced(&fs, "warm", b"w");
    fsynced(&fs, "lost", b"only in the log");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let e = refused(import_with(&image[..1], false), "a missing log device");
    assert!(e.msg.contains("mem1") && e.msg.contains("--missing-log"), "{}", e);
    let pool = import_with(&image[..1], true).expect("import --missing-log");
    let warned = pool.open_warnings().join("\n");
    assert!(warned.contains("discarded") && warned.contains("mem1"), "{}", warned);
    let st = pool.status();
    assert_eq!(st.logs[0].state, "UNAVAIL", "{:?}", st.logs);
    assert!(!st.log_discarded.is_empty(), "status says what was discarded");
    assert!(pool.events().since(None).0.iter().any(|e| e.class == "ereport.fs.zfs.log_replay"), "an event");
    let fs = mount_logged(&pool);
    // The records were on the missing device: the pool is as of its last txg.
    assert!(lookup(&fs, "warm").is_some(), "synced with the chain's header");
    // Still works: new fsyncs go to the main pool.
    let ino = fsynced(&fs, "after", b"on the main pool");
    drop(fs);
    verified(&pool, "imported without the log");
    pool.remove_devices(&["mem1".to_string()]).expect("remove the missing log vdev");
    assert!(pool.log_vdevs().is_empty());
    assert_eq!(pool.config().features_incompat & FEATURE_LOG_VDEVS, 0, "no log vdev, no feature");
    let image = durable(&image[..1]);
    drop(pool);
    let pool = import_with(&image, false).expect("import: nothing missing now");
    let fs = mount_logged(&pool);
    assert_eq!(read_all(&fs, ino), b"on the main pool");
    drop(fs);
    verified(&pool, "after removing the missing log vdev");
}

/// `missing_log` when nothing is missing: an ordinary import that
/// discards nothing.
#[test]
fn missing_log_with_nothing_missing_discards_nothing() {
    let (devs, pool) = pool_with_log();
    let fs = mount_logged(&pool);
    let ino = fsynced(&fs, "kept", b"kept");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, true).expect("import");
    assert!(pool.status().log_discarded.is_empty());
    let fs = mount_logged(&pool);
    assert_eq!(read_all(&fs, ino), b"kept");
    drop(fs);
    verified(&pool, "missing_log with nothing missing");
}

/// `pool remove` of a log vdev: chains move to the main pool, the vdev
/// leaves the labels (its own erased), fsync goes on; a power cut after
/// finds every fsynced file without it. Refusal: a data device.
#[test]
fn removing_a_log_vdev() {
    let (devs, pool) = pool_with_log();
    let fs = mount_logged(&pool);
    let a = fsynced(&fs, "a", b"before the removal");
    let e = pool.remove_devices(&["mem0".to_string()]).expect_err("a data device removed");
    assert!(e.msg.contains("data device"), "{}", e);
    pool.remove_devices(&["mem1".to_string()]).expect("remove the log vdev");
    assert!(pool.log_vdevs().is_empty());
    assert!(pool.config().logs.is_empty());
    assert!(pool.status().logs.is_empty());
    assert!(tarn_engine::pool::label::read_labels(devs[1].as_ref()).config.is_none(), "its labels are erased");
    let b = fsynced(&fs, "b", b"after the removal");
    let image = durable(&devs[..1]);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, false).expect("import without the removed log device");
    let fs = mount_logged(&pool);
    assert_eq!(read_all(&fs, a), b"before the removal");
    assert_eq!(read_all(&fs, b), b"after the removal");
    drop(fs);
    verified(&pool, "after removing the log vdev");
}

/// data mem0, log A on mem1, data mem2 (added after A), log B on mem3.
fn pool_with_two_logs() -> (Vec<Arc<FaultDevice>>, Pool) {
    let (mut devs, pool) = pool_with_log();
    let more = mem_devs(2, 256 << 20, 99);
    pool.add_vdevs_on(vec![top(Layout::Plain, &more[..1], 2)], true).expect("add a data vdev");
    pool.add_log_vdevs_on(vec![top(Layout::Plain, &more[1..], 3)], false).expect("log B");
    devs.extend(more);
    assert_eq!(pool.log_vdevs(), vec![1, 3]);
    (devs, pool)
}

/// Whether top-level vdev `id` of the labels is a hole.
fn hole_at(pool: &Pool, id: usize) -> bool {
    pool.config().tree.children.get(id).is_some_and(|t| t.is_hole())
}

/// `pool remove` of a log vdev that is not the last top-level vdev (issue
/// 13): it leaves a hole, so the data vdev and the log vdev after it keep
/// their ids; fsynced records on its chain are moved off first; status
/// shows no trace of it; export and import keep the hole; a power cut
/// after finds every fsynced file; a log vdev added later appends.
#[test]
fn removing_a_log_vdev_before_others_leaves_a_hole() {
    let (devs, pool) = pool_with_two_logs();
    let fs = mount_logged(&pool);
    let before: Vec<u64> = (0..6).map(|i| fsynced(&fs, &format!("f{i}"), format!("before {i}").as_bytes())).collect();
    let ino_big = fsynced(&fs, "big", &pattern(300_000, 5));
    let on_a = pool.datasets().zil("tank").unwrap().header().first.vdev;
    assert_eq!(on_a, 1, "the chain begins on A");
    pool.remove_devices(&["mem1".to_string()]).expect("remove log A");
    assert!(hole_at(&pool, 1), "{:?}", pool.config().tree.children);
    assert_eq!(pool.log_vdevs(), vec![3]);
    assert_eq!(pool.config().logs, vec![3]);
    assert!(pool.config().features_incompat & FEATURE_HOLE_VDEVS != 0);
    assert_ne!(pool.datasets().zil("tank").unwrap().header().first.vdev, 1, "the chain is off A (it began on vdev {on_a})");
    let st = pool.status();
    assert_eq!(st.vdevs.iter().map(|v| v.id).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(st.logs.iter().map(|v| v.id).collect::<Vec<_>>(), vec![3]);
    assert!(!format!("{:?}", st).contains("mem1") && !format!("{:?}", st).contains("hole"), "{:?}", st);
    assert_eq!(tarn_engine::pool::metrics::snapshot(&pool).vdevs.len(), 3, "mem0, mem2, mem3");
    assert!(tarn_engine::pool::label::read_labels(devs[1].as_ref()).config.is_none(), "A's labels are erased");
    let after = fsynced(&fs, "after", b"after the removal");
    // Refusals: the hole's name, the removed device, a data device.
    for gone in ["hole-1", "hole", "mem1", "1"] {
        let e = pool.remove_devices(&[gone.to_string()]).expect_err("no such device");
        assert!(e.msg.contains("not a device of the pool") || e.msg.contains("no such"), "{gone}: {}", e);
    }
    let e = pool.remove_devices(&["mem2".to_string()]).expect_err("a data device");
    assert!(e.msg.contains("data device"), "{}", e);
    let image = durable(&[devs[0].clone(), devs[2].clone(), devs[3].clone()]);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, false).expect("import with the hole");
    assert!(hole_at(&pool, 1));
    assert_eq!(pool.log_vdevs(), vec![3]);
    let fs = mount_logged(&pool);
    for (i, ino) in before.iter().enumerate() {
        assert_eq!(read_all(&fs, *ino), format!("before {i}").as_bytes());
    }
    assert_eq!(read_all(&fs, ino_big), pattern(300_000, 5));
    assert_eq!(read_all(&fs, after), b"after the removal");
    verified(&pool, "after the import with a hole");
    // A new log vdev appends (id 4); the hole stays.
    let new = mem_devs(1, 256 << 20, 123);
    pool.add_log_vdevs_on(vec![top(Layout::Plain, &new, 5)], false).expect("a new log vdev");
    assert_eq!(pool.log_vdevs(), vec![3, 4]);
    assert!(hole_at(&pool, 1));
    let c = fsynced(&fs, "c", b"on the new log");
    // Data written now spreads over both data vdevs, around the hole.
    let files = filled(&pool, 8, 100_000, 3);
    pool.sync().expect("sync");
    drop(fs);
    pool.export().expect("export");
    drop(pool);
    let mut all = image.clone();
    all.extend(new);
    let pool = import_with(&all, false).expect("import after export");
    reads_back(&pool, &files, "around the hole");
    assert_eq!(read_all(&mount_logged(&pool), c), b"on the new log");
    verified(&pool, "after export and import with a hole");
}

/// Removing log vdevs until the holes end the tree: the last one goes with
/// the holes before it (as OpenZFS compacts its last child), and the
/// feature bits follow; the ids are given again after that.
#[test]
fn removing_the_last_log_vdev_trims_the_holes_before_it() {
    let (devs, pool) = pool_with_log();
    let more = mem_devs(2, 256 << 20, 99);
    pool.add_log_vdevs_on(vec![top(Layout::Plain, &more[..1], 2), top(Layout::Plain, &more[1..], 3)], false).expect("two more logs");
    assert_eq!(pool.log_vdevs(), vec![1, 2, 3]);
    pool.remove_devices(&["mem1".to_string()]).expect("A");
    pool.remove_devices(&["mem2".to_string()]).expect("B");
    assert!(hole_at(&pool, 1) && hole_at(&pool, 2));
    verified(&pool, "two holes");
    pool.remove_devices(&["mem3".to_string()]).expect("C, the last");
    let cfg = pool.config();
    assert_eq!(cfg.tree.children.len(), 1, "{:?}", cfg.tree.children);
    assert_eq!(cfg.features_incompat & (FEATURE_HOLE_VDEVS | FEATURE_LOG_VDEVS), 0);
    verified(&pool, "holes trimmed");
    // Id 1 is given again, to a data vdev this time.
    let data = mem_devs(1, 256 << 20, 7);
    pool.add_vdevs_on(vec![top(Layout::Plain, &data, 4)], true).expect("a data vdev");
    assert_eq!(pool.status().vdevs.iter().map(|v| v.id).collect::<Vec<_>>(), vec![0, 1]);
    let files = filled(&pool, 8, 100_000, 4);
    pool.sync().expect("sync");
    reimported(pool, &[devs[0].clone(), data[0].clone()], &files, "id given again");
}

/// `pool` cut off after a sync, imported from `devs`' durable images: the
/// `files` read back, verify is clean.
fn reimported(pool: Pool, devs: &[Arc<FaultDevice>], files: &[(u64, Vec<u8>)], ctx: &str) -> Pool {
    let image = durable(devs);
    drop(pool);
    let pool = import_with(&image, false).unwrap_or_else(|e| panic!("{ctx}: import: {e}"));
    reads_back(&pool, files, ctx);
    verified(&pool, ctx);
    pool
}

/// zpool refuses RAID-Z log vdevs; so does tarn. A log mirror is fine.
#[test]
fn raidz_logs_are_refused_and_mirrors_taken() {
    let (_, pool) = pool_of(256 << 20, 5);
    let three = mem_devs(3, 256 << 20, 50);
    let e = pool.add_log_vdevs_on(vec![top(Layout::Raidz(1), &three, 1)], false).expect_err("raidz log");
    assert!(e.msg.contains("raidz1") && e.msg.contains("log"), "{}", e);
    assert!(pool.log_vdevs().is_empty());
    pool.add_log_vdevs_on(vec![top(Layout::Mirror, &three[..2], 1)], false).expect("log mirror");
    assert_eq!(pool.status().logs[0].kind, "mirror");
    verified(&pool, "log mirror");
}

/// Regression (claim at import): a chain whose first block cannot be read
/// fails its claim; the log is discarded with a warning. The claim had set
/// no place aside, yet discarding freed the header's first place as the
/// chain's next one — a free of space never claimed (or, when that block
/// had been claimed, a second free of it), which failed the next sync.
#[test]
fn a_claim_that_fails_frees_nothing_it_did_not_claim() {
    let devs = mem_devs(1, 256 << 20, 21);
    let opts = tarn_engine::CreateOptions { tunables: no_timer(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts).expect("create");
    let fs = mount_logged(&pool);
    fsynced(&fs, "warm", b"w");
    fsynced(&fs, "f", b"in the log");
    let first = pool.datasets().zil("tank").unwrap().header().first;
    assert!(!first.is_none(), "a chain");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let zone = FaultZone { start: first.offset, end: first.offset + first.asize, read_error_rate: 1.0, ..Default::default() };
    image[0].set_config(FaultConfig { zones: vec![zone], ..Default::default() });
    let pool = import_with(&image, false).expect("import");
    let warned = pool.open_warnings().join("\n");
    assert!(warned.contains("cannot be claimed"), "{}", warned);
    image[0].set_config(FaultConfig::default());
    verified(&pool, "after a failed claim");
    let fs = mount_logged(&pool);
    fsynced(&fs, "g", b"a new chain");
    drop(fs);
    verified(&pool, "a new chain after a failed claim");
}

/// A data vdev added after a log vdev: the status keeps the classes
/// apart, the metrics (iostat, Prometheus) pair every vdev with its own
/// status by id (they were paired by position, which the `logs` section
/// shifted), and the log vdev, no longer the last, leaves a hole when
/// removed: the data vdev after it keeps its id and its blocks.
#[test]
fn a_data_vdev_after_a_log_vdev() {
    let (devs, pool) = pool_with_log();
    let more = mem_devs(1, 512 << 20, 77);
    pool.add_vdevs_on(vec![top(Layout::Plain, &more, 2)], true).expect("add a data vdev");
    let st = pool.status();
    assert_eq!(st.vdevs.iter().map(|v| v.id).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(st.logs.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1]);
    let m = tarn_engine::pool::metrics::snapshot(&pool);
    for v in &m.vdevs {
        let s = st.vdevs.iter().chain(&st.logs).find(|s| s.id == v.top).expect("a status");
        assert_eq!((v.path.as_str(), v.size), (s.path.as_str(), s.size), "{:?}", v.path);
    }
    assert_eq!(m.vdevs.len(), 3, "every leaf, the log device's too");
    let files = filled(&pool, 8, 100_000, 9);
    pool.remove_devices(&["mem1".to_string()]).expect("a hole in its place");
    assert!(hole_at(&pool, 1));
    assert_eq!(pool.status().vdevs.iter().map(|v| v.id).collect::<Vec<_>>(), vec![0, 2]);
    reads_back(&pool, &files, "after the log vdev left a hole");
    reimported(pool, &[devs[0].clone(), more[0].clone()], &files, "a data vdev after a hole");
}

/// A log vdev holding records not yet replayed (a power cut after the
/// fsyncs, the file system not mounted since) cannot be removed, hole or
/// not: the message says to mount it first; once mounted (replayed), the
/// removal leaves its hole and the records' changes stay.
#[test]
fn a_log_vdev_with_records_to_replay_is_refused() {
    let (devs, pool) = pool_with_two_logs();
    let fs = mount_logged(&pool);
    let ino = fsynced(&fs, "kept", b"only in the log");
    assert_eq!(pool.datasets().zil("tank").unwrap().header().first.vdev, 1, "the chain begins on A");
    let image = durable(&[devs[0].clone(), devs[1].clone(), devs[2].clone(), devs[3].clone()]);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, false).expect("import");
    let e = pool.remove_devices(&["mem1".to_string()]).expect_err("records to replay there");
    assert!(e.msg.contains("not yet replayed") && e.msg.contains("mount"), "{}", e);
    assert_eq!(pool.log_vdevs(), vec![1, 3], "nothing changed");
    let fs = mount_logged(&pool);
    assert_eq!(read_all(&fs, ino), b"only in the log");
    pool.remove_devices(&["mem1".to_string()]).expect("replayed: it can go");
    assert!(hole_at(&pool, 1));
    assert_eq!(read_all(&fs, ino), b"only in the log");
    drop(fs);
    verified(&pool, "removed after replay");
}
