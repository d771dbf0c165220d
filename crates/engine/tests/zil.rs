//! The intent log: what `fsync` acknowledged survives a power cut that
//! comes before any txg sync writes it, through claim at import and replay
//! at the first mount; what was not fsynced may be lost but nothing is half
//! applied; the pool verifies clean after replay.

mod common;

use std::sync::Arc;

use common::*;
use tarn_engine::posix::{Caller, FileSystem, PosixFs, PosixOptions, RenameFlags, SetAttr, SyncPolicy, XattrSet};
use tarn_engine::sys::fault::FaultDevice;
use tarn_engine::tunables::Tunables;
use tarn_engine::{OpenOptions, Pool};
use tarn_ondisk::uberblock::FEATURE_INTENT_LOG;

const ROOT: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0o022, fsetid: true };

/// Tunables that never sync a txg on their own: only the log can make a
/// change durable between the syncs a test asks for.
fn no_timer() -> Tunables {
    Tunables { zfs_txg_timeout: 3600, zfs_dirty_data_max: 64 << 20, ..small_tunables() }
}

fn new_pool() -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(1, 256 << 20, 7);
    let opts = tarn_engine::CreateOptions { tunables: no_timer(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts).expect("create");
    (devs, pool)
}

fn import(devs: &[Arc<FaultDevice>]) -> Pool {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: no_timer(), ..Default::default() }).expect("import")
}

/// The root dataset mounted with its intent log.
fn mount_logged(pool: &Pool) -> Arc<PosixFs> {
    let zil = pool.datasets().zil("tank").expect("zil");
    PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), ..Default::default() }).expect("mount")
}

fn file(fs: &PosixFs, parent: u64, name: &str) -> u64 {
    fs.mknod(&ROOT, parent, name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("create").ino
}

fn read_all(fs: &PosixFs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size;
    fs.read(ino, 0, size as u32).expect("read")
}

fn lookup(fs: &PosixFs, parent: u64, name: &str) -> Option<u64> {
    fs.lookup(parent, name.as_bytes()).ok().map(|a| a.ino)
}

/// Every kind of change, fsynced, then a power cut with no txg sync since:
/// after import and mount, all of it is there exactly (data, names, links,
/// attributes, extended attributes), and a file written without fsync may
/// be missing but is never half there.
#[test]
fn fsynced_changes_survive_a_power_cut_through_the_log() {
    let (devs, pool) = new_pool();
    let fs = mount_logged(&pool);
    let root = fs.root();
    // The first commit starts the chain (one txg sync, once).
    let warm = file(&fs, root, "warm");
    fs.fsync(warm, false).expect("fsync");
    let synced = pool.uberblock().txg;

    let a = file(&fs, root, "a");
    let data_a = pattern(300_000, 1);
    for (i, c) in data_a.chunks(64 << 10).enumerate() {
        fs.write(&ROOT, a, (i * (64 << 10)) as u64, c).expect("write");
    }
    fs.setxattr(&ROOT, a, b"user.note", b"kept", XattrSet::Any).expect("setxattr");
    fs.setattr(&ROOT, a, &SetAttr { mode: Some(0o600), ..Default::default() }).expect("chmod");
    let d = fs.mkdir(&ROOT, root, b"d", 0o755).expect("mkdir").ino;
    let b = file(&fs, d, "b");
    fs.write(&ROOT, b, 0, b"bbbb").expect("write");
    fs.link(&ROOT, b, root, b"b-link").expect("link");
    fs.symlink(&ROOT, root, b"sym", b"d/b").expect("symlink");
    fs.rename(&ROOT, root, b"warm", d, b"warm2", RenameFlags::default()).expect("rename");
    let gone = file(&fs, root, "gone");
    fs.unlink(&ROOT, root, b"gone").expect("unlink");
    fs.fsync(a, false).expect("fsync a");
    fs.fsync(b, false).expect("fsync b");
    let a_attr = fs.getattr(a).unwrap();
    // Written, never fsynced.
    let c = file(&fs, root, "c");
    fs.write(&ROOT, c, 0, &pattern(50_000, 3)).expect("write c");
    fs.write(&ROOT, a, 0, b"NOT FSYNCED").expect("write a again");
    assert_eq!(pool.uberblock().txg, synced, "no txg synced since the chain started: only the log holds the changes");
    let zil = pool.datasets().zil("tank").unwrap();
    assert!(zil.stats.rounds.load(std::sync::atomic::Ordering::Relaxed) >= 2, "the fsyncs wrote log blocks");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import(&image);
    assert!(pool.datasets().zil("tank").unwrap().needs_replay(), "import found records to replay");
    let fs = mount_logged(&pool);
    assert_eq!(lookup(&fs, root, "a"), Some(a));
    // The later, unfsynced write may be there or not, but nothing else.
    let mut got_a = read_all(&fs, a);
    if got_a.starts_with(b"NOT FSYNCED") {
        got_a[..11].copy_from_slice(&data_a[..11]);
    }
    assert!(got_a == data_a, "a: {}", first_difference(&got_a, &data_a));
    let got = fs.getattr(a).unwrap();
    assert_eq!((got.perm, got.size, got.mtime, got.ctime, got.gen), (a_attr.perm, a_attr.size, a_attr.mtime, a_attr.ctime, a_attr.gen), "a's attributes as fsync left them");
    assert_eq!(fs.getxattr(a, b"user.note").unwrap(), b"kept");
    assert_eq!(lookup(&fs, root, "d"), Some(d));
    assert_eq!(lookup(&fs, d, "b"), Some(b));
    assert_eq!(lookup(&fs, root, "b-link"), Some(b));
    assert_eq!(fs.getattr(b).unwrap().nlink, 2);
    assert_eq!(read_all(&fs, b), b"bbbb");
    assert_eq!(fs.readlink(lookup(&fs, root, "sym").unwrap()).unwrap(), b"d/b");
    assert_eq!(lookup(&fs, d, "warm2"), Some(warm));
    assert_eq!(lookup(&fs, root, "warm"), None);
    assert_eq!(lookup(&fs, root, "gone"), None);
    assert!(fs.getattr(gone).is_err(), "the removed file is freed");
    // c was made after the last fsync: absent, or there empty or whole —
    // never half.
    if let Some(c) = lookup(&fs, root, "c") {
        let cdata = read_all(&fs, c);
        assert!(cdata.is_empty() || cdata == pattern(50_000, 3), "c holds {} bytes", cdata.len());
    }
    fs.verify().expect("posix verify");
    drop(fs);
    verified(&pool, "after replay");
    // Replayed once: a second crash right now replays nothing again.
    let again = durable(&image);
    drop(pool);
    let pool = import(&again);
    let fs = mount_logged(&pool);
    assert_eq!(read_all(&fs, a).len(), data_a.len());
    assert_eq!(fs.getattr(b).unwrap().nlink, 2);
    drop(fs);
    verified(&pool, "after a second import");
}

/// A clean export leaves a chain with nothing to replay; the next import
/// continues it and the first fsync writes at once (no txg sync).
#[test]
fn after_a_clean_export_the_chain_goes_on_without_a_sync() {
    let (devs, pool) = new_pool();
    assert_eq!(pool.config().features_compat & FEATURE_INTENT_LOG, 0, "no chain yet, no feature");
    let fs = mount_logged(&pool);
    let f = file(&fs, fs.root(), "f");
    fs.fsync(f, false).unwrap();
    assert_ne!(pool.config().features_compat & FEATURE_INTENT_LOG, 0, "the labels say a dataset has a chain");
    drop(fs);
    pool.export().expect("export");
    let pool = import(&devs);
    let zil = pool.datasets().zil("tank").unwrap();
    assert!(!zil.needs_replay());
    let fs = mount_logged(&pool);
    let before = pool.uberblock().txg;
    fs.write(&ROOT, f, 0, b"x").unwrap();
    fs.fsync(f, false).unwrap();
    assert_eq!(pool.uberblock().txg, before, "the fsync synced no txg");
    assert_eq!(zil.stats.chain_waits.load(std::sync::atomic::Ordering::Relaxed), 0);
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import(&image);
    let fs = mount_logged(&pool);
    assert_eq!(read_all(&fs, f), b"x");
    drop(fs);
    verified(&pool, "continued chain");
}

/// `sync=always`: every change is durable when the call returns, without
/// fsync; `sync=disabled`: fsync returns without writing the log.
#[test]
fn sync_always_logs_every_change_and_disabled_none() {
    let (devs, pool) = new_pool();
    let zil = pool.datasets().zil("tank").unwrap();
    let opts = PosixOptions { log: Some(zil.clone()), sync_policy: SyncPolicy::Always, ..Default::default() };
    let fs = PosixFs::open(pool.root().clone(), opts).unwrap();
    let f = file(&fs, fs.root(), "f");
    fs.write(&ROOT, f, 0, b"always").unwrap();
    let image = durable(&devs);
    fs.set_sync_policy(SyncPolicy::Disabled);
    let rounds = zil.stats.rounds.load(std::sync::atomic::Ordering::Relaxed);
    fs.write(&ROOT, f, 0, b"DISABL").unwrap();
    fs.fsync(f, false).unwrap();
    assert_eq!(zil.stats.rounds.load(std::sync::atomic::Ordering::Relaxed), rounds, "sync=disabled wrote no log");
    drop(fs);
    drop(pool);
    let pool = import(&image);
    let fs = mount_logged(&pool);
    let f = lookup(&fs, fs.root(), "f").expect("f");
    assert_eq!(read_all(&fs, f), b"always");
    drop(fs);
    verified(&pool, "sync=always");
}

/// Eight threads fsyncing their own files share rounds: fewer rounds than
/// commits, and every acknowledged write survives a power cut.
#[test]
fn concurrent_fsyncs_share_rounds_and_all_survive() {
    let (devs, pool) = new_pool();
    let fs = mount_logged(&pool);
    let warm = file(&fs, fs.root(), "warm");
    fs.fsync(warm, false).unwrap();
    let inos: Vec<u64> = (0..8).map(|i| file(&fs, fs.root(), &format!("f{}", i))).collect();
    std::thread::scope(|s| {
        for (t, &ino) in inos.iter().enumerate() {
            let fs = fs.clone();
            s.spawn(move || {
                for k in 0..40u64 {
                    fs.write(&ROOT, ino, k * 4096, &pattern(4096, t as u64 * 1000 + k)).unwrap();
                    fs.fsync(ino, false).unwrap();
                }
            });
        }
    });
    let zil = pool.datasets().zil("tank").unwrap();
    let commits = zil.stats.commits.load(std::sync::atomic::Ordering::Relaxed);
    let rounds = zil.stats.rounds.load(std::sync::atomic::Ordering::Relaxed);
    println!("{} commits in {} rounds", commits, rounds);
    assert!(rounds < commits, "{} rounds for {} commits: none shared", rounds, commits);
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import(&image);
    let fs = mount_logged(&pool);
    for (t, &ino) in inos.iter().enumerate() {
        let want: Vec<u8> = (0..40u64).flat_map(|k| pattern(4096, t as u64 * 1000 + k)).collect();
        assert!(read_all(&fs, ino) == want, "file {}: {}", t, first_difference(&read_all(&fs, ino), &want));
    }
    drop(fs);
    verified(&pool, "concurrent fsyncs");
}

/// `tarn_zil_rounds_in_flight=1`: eight fsyncing threads still share
/// rounds, but never more than one is in flight — the next opens only when
/// the one before is durable. Set back, the log goes on.
#[test]
fn a_pipeline_depth_of_one_writes_one_round_at_a_time() {
    let (_devs, pool) = new_pool();
    let fs = mount_logged(&pool);
    pool.core().tunables.write().set("tarn_zil_rounds_in_flight", "1").unwrap();
    let inos: Vec<u64> = (0..8).map(|i| file(&fs, fs.root(), &format!("f{}", i))).collect();
    let run = |seed: u64| {
        std::thread::scope(|s| {
            for (t, &ino) in inos.iter().enumerate() {
                let fs = fs.clone();
                s.spawn(move || {
                    for k in 0..30u64 {
                        fs.write(&ROOT, ino, k * 4096, &pattern(4096, seed + t as u64 * 1000 + k)).unwrap();
                        fs.fsync(ino, false).unwrap();
                    }
                });
            }
        })
    };
    run(0);
    let zil = pool.datasets().zil("tank").unwrap();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let (commits, rounds) = (load(&zil.stats.commits), load(&zil.stats.rounds));
    assert!(rounds < commits, "{} rounds for {} commits: none shared", rounds, commits);
    assert_eq!(load(&zil.stats.in_flight_max), 1, "one round at a time");
    pool.core().tunables.write().set("tarn_zil_rounds_in_flight", "16").unwrap();
    run(7);
    assert!(load(&zil.stats.in_flight_max) <= 16);
    assert!(load(&zil.stats.commits) >= commits + 240);
    zil.check_invariants().unwrap();
}

/// A device that refuses writes under an fsync: the log write fails, the
/// commit falls back to a txg sync, which cannot complete either, so the
/// pool suspends and fsync returns an error — at once, never a hang, and
/// never success.
#[test]
fn fsync_on_a_pool_that_suspends_fails_instead_of_hanging() {
    let (devs, pool) = new_pool();
    let fs = mount_logged(&pool);
    let f = file(&fs, fs.root(), "f");
    fs.fsync(f, false).unwrap();
    fs.write(&ROOT, f, 0, b"lost").unwrap();
    devs[0].set_config(tarn_engine::sys::fault::FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    let (tx, rx) = std::sync::mpsc::channel();
    let fs2 = fs.clone();
    std::thread::spawn(move || {
        let _ = tx.send(fs2.fsync(f, false));
    });
    let res = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("fsync returned within a minute");
    assert!(res.is_err(), "fsync reported success on a device that refuses writes");
    let zil = pool.datasets().zil("tank").unwrap();
    assert!(zil.stats.fallbacks.load(std::sync::atomic::Ordering::Relaxed) >= 1, "the failed log write fell back to a txg sync");
}

/// One child of a mirror refuses writes: the log blocks land on the other,
/// fsync succeeds without a txg sync, and after a power cut the record is
/// replayed from the surviving child.
#[test]
fn a_mirror_child_failing_under_fsync_costs_no_error() {
    let (devs, pool) = mirror_pool(1, "1");
    let zil = pool.datasets().zil("tank").unwrap();
    let fs = PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil.clone()), ..Default::default() }).unwrap();
    let f = file(&fs, fs.root(), "f");
    fs.fsync(f, false).unwrap();
    devs[1].set_config(tarn_engine::sys::fault::FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    let data = pattern(20_000, 9);
    fs.write(&ROOT, f, 0, &data).unwrap();
    fs.fsync(f, false).expect("fsync with one child left");
    assert_eq!(zil.stats.fallbacks.load(std::sync::atomic::Ordering::Relaxed), 0, "the log write succeeded on the other child");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = Pool::open_on(as_dyn(&image), vec![], &OpenOptions { tunables: no_timer(), ..Default::default() }).expect("import degraded");
    let fs = mount_logged(&pool);
    let f = lookup(&fs, fs.root(), "f").expect("f");
    assert!(read_all(&fs, f) == data, "{}", first_difference(&read_all(&fs, f), &data));
}

/// `zil_replay_disable=1`: the mount discards the log instead of replaying
/// it — the fsynced change is gone, the pool verifies, and the log is not
/// found again at the next import.
#[test]
fn replay_disable_discards_the_log() {
    let (devs, pool) = new_pool();
    let fs = mount_logged(&pool);
    let f = file(&fs, fs.root(), "f");
    fs.fsync(f, false).unwrap();
    let g = file(&fs, fs.root(), "g");
    fs.fsync(g, false).unwrap();
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let t = Tunables { zil_replay_disable: 1, ..no_timer() };
    let pool = Pool::open_on(as_dyn(&image), vec![], &OpenOptions { tunables: t, ..Default::default() }).expect("import");
    assert!(pool.datasets().zil("tank").unwrap().needs_replay());
    let fs = mount_logged(&pool);
    assert_eq!(lookup(&fs, fs.root(), "g"), None, "g's create was only in the discarded log");
    drop(fs);
    verified(&pool, "log discarded");
    pool.export().unwrap();
    let pool = import(&image);
    assert!(!pool.datasets().zil("tank").unwrap().needs_replay(), "the log is gone for good");
}

/// A file on disk before the crash whose dnode replay loads (a rename)
/// before replaying the creates of files numbered right after it: on disk
/// their slots are free, so the loaded file counted them as its room, and
/// its dnode — padded to that room — overwrote theirs at every sync. After
/// replay, a sync and another import, the created files must still be
/// there with their names (found by the crash test: names whose objects
/// did not exist).
#[test]
fn replayed_creates_keep_their_slots_from_a_loaded_neighbour() {
    let (devs, pool) = new_pool();
    let fs = mount_logged(&pool);
    let root = fs.root();
    let warm = file(&fs, root, "warm");
    fs.fsync(warm, false).expect("fsync");
    // The last object on disk: the slots after it are free there.
    let old = file(&fs, root, "old");
    fs.write(&ROOT, old, 0, &pattern(1000, 1)).expect("write");
    pool.sync().expect("sync");
    pool.sync().expect("sync");
    let synced = pool.uberblock().txg;
    fs.rename(&ROOT, root, b"old", root, b"old2", RenameFlags::default()).expect("rename");
    fs.write(&ROOT, old, 0, &pattern(1000, 3)).expect("write old");
    fs.fsync(old, false).expect("fsync");
    let news: Vec<u64> = (0..3).map(|i| file(&fs, root, &format!("new{}", i))).collect();
    fs.write(&ROOT, old, 1000, &pattern(300_000, 2)).expect("write old");
    fs.write(&ROOT, news[1], 0, b"one").expect("write new1");
    fs.fsync(old, false).expect("fsync");
    fs.fsync(news[1], false).expect("fsync");
    assert_eq!(pool.uberblock().txg, synced, "only the log holds the changes");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    // The cut: replay, then syncs write the replayed changes.
    let pool = import(&image);
    assert!(pool.datasets().zil("tank").unwrap().needs_replay());
    let fs = mount_logged(&pool);
    pool.sync().expect("sync");
    // A later change to the loaded file alone: its dnode is written
    // without the new ones beside it.
    fs.write(&ROOT, old, 0, &pattern(10, 4)).expect("write old");
    drop(fs);
    pool.sync().expect("sync");
    pool.sync().expect("sync");
    pool.export().expect("export");
    let pool = import(&image);
    let fs = mount_logged(&pool);
    for (i, &ino) in news.iter().enumerate() {
        let name = format!("new{}", i);
        assert_eq!(lookup(&fs, root, &name), Some(ino), "{} keeps its inode", name);
        let a = fs.getattr(ino).unwrap_or_else(|e| panic!("{} (inode {}): {}", name, ino, e));
        assert_eq!(a.size, if i == 1 { 3 } else { 0 }, "{}", name);
    }
    assert_eq!(read_all(&fs, news[1]), b"one");
    let mut want = pattern(1000, 3);
    want.extend(pattern(300_000, 2));
    want[..10].copy_from_slice(&pattern(10, 4));
    assert!(read_all(&fs, old) == want, "old2's data");
    assert_eq!(lookup(&fs, root, "old2"), Some(old));
    drop(fs);
    verified(&pool, "after replay and a second import");
}
