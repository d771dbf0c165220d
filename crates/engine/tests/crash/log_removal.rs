//! Power cuts while a log vdev that is not the last top-level vdev is
//! removed (issue 13, `pool::log_vdev` "Removal"): data d0, log A on d1,
//! data d2, log B on d3, all on one power rail ([`Railed`]). Files are
//! fsynced with their records on A's chain; then `pool remove A`, and one
//! more fsync; the power goes at the k-th write of the cut device from
//! the removal on — during the syncs that empty A, while the labels take
//! the tree with the hole, while A's labels are erased, at the checkpoint
//! sync, or after. Every device then keeps a random part of its unflushed
//! writes (`FaultDevice::crash`).
//!
//! The claim: the pool imports (A's image offered too: its labels may be
//! erased or not); every file whose fsync returned reads back exactly;
//! A is either still log vdev 1 (the labels did not take the hole) or a
//! hole, nothing between; verify is clean and the invariants hold; the
//! removal can be finished (or is done), a new log vdev added, another
//! file fsynced onto it, and the pool exported and imported again.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::posix::{Caller, FileSystem, PosixFs, PosixOptions};
use tarn_engine::sys::{BlockDevice, FaultConfig, FaultDevice};
use tarn_engine::{CreateOptions, OpenOptions, Pool, Tunables};

use super::layouts::Railed;
use super::model::check_verified;
use crate::common::{crash_all, mem_devs, pattern, small_tunables};

const NAMES: [&str; 4] = ["d0", "d1", "d2", "d3"];
/// The data device every sync writes (uberblocks, labels).
pub const DATA: usize = 0;
/// Log vdev A, the one removed.
pub const LOG_A: usize = 1;

const ROOT: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0o022, fsetid: true };

/// What one run did before the power went.
pub struct RemovalCut {
    /// The cut device's writes from the removal on (to the cut).
    pub writes: u64,
    pub cut: bool,
    /// Whether the imported pool has a hole where A was.
    pub hole: bool,
}

/// Syncs only when asked (the log carries fsync between them).
fn tunables() -> Tunables {
    Tunables { zfs_txg_timeout: 3600, ..small_tunables() }
}

fn mount_logged(pool: &Pool) -> Arc<PosixFs> {
    let zil = pool.datasets().zil("tank").expect("zil");
    PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), ..Default::default() }).expect("mount")
}

/// Creates `name` holding `data` and fsyncs it: true when every step
/// returned (the file is acknowledged).
fn fsync_file(fs: &PosixFs, name: &str, data: &[u8]) -> bool {
    let Ok(a) = fs.mknod(&ROOT, fs.root(), name.as_bytes(), libc::S_IFREG | 0o644, 0) else { return false };
    fs.write(&ROOT, a.ino, 0, data).is_ok() && fs.fsync(a.ino, false).is_ok()
}

fn read_file(fs: &PosixFs, name: &str) -> Option<Vec<u8>> {
    let ino = fs.lookup(fs.root(), name.as_bytes()).ok()?.ino;
    let size = fs.getattr(ino).ok()?.size;
    fs.read(ino, 0, size as u32).ok()
}

fn content(i: usize, seed: u64) -> Vec<u8> {
    pattern(1000 + (i * 7919) % 60_000, seed ^ i as u64)
}

/// One run, the power cut at write `k` of device `cut_dev` from the
/// removal on (`None`: no cut, to count the writes).
pub fn run(seed: u64, cut_dev: usize, k: Option<u64>, crash_seed: u64) -> RemovalCut {
    let ctx = format!("log removal seed {seed}, cut at write {k:?} of {}, crash seed {crash_seed}", NAMES[cut_dev]);
    let devs = mem_devs(4, 128 << 20, seed);
    let rail = Arc::new(AtomicBool::new(false));
    let railed = |i: usize| (NAMES[i].to_string(), Arc::new(Railed { dev: devs[i].clone(), rail: rail.clone(), trips: i == cut_dev }) as Arc<dyn BlockDevice>);
    let opts = CreateOptions { tunables: tunables(), ..Default::default() };
    let plain = |i: usize| NewTop { layout: Layout::Plain, devices: vec![railed(i)] };
    let pool = Pool::create_tops("tank", vec![plain(0)], vec![], &opts).unwrap_or_else(|e| panic!("{ctx}: create: {e}"));
    pool.add_log_vdevs_on(vec![plain(1)], false).unwrap_or_else(|e| panic!("{ctx}: log A: {e}"));
    pool.add_vdevs_on(vec![plain(2)], true).unwrap_or_else(|e| panic!("{ctx}: data d2: {e}"));
    pool.add_log_vdevs_on(vec![plain(3)], false).unwrap_or_else(|e| panic!("{ctx}: log B: {e}"));
    let fs = mount_logged(&pool);
    let mut acked: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..5 {
        let (name, data) = (format!("before{i}"), content(i, seed));
        assert!(fsync_file(&fs, &name, &data), "{ctx}: fsync before the removal");
        acked.push((name, data));
    }
    assert_eq!(pool.datasets().zil("tank").expect("zil").header().first.vdev, 1, "{ctx}: the chain begins on A");
    let w0 = devs[cut_dev].stats().writes;
    devs[cut_dev].set_config(FaultConfig { power_cut_after_writes: k, ..Default::default() });
    let removed = pool.remove_devices(&["d1".to_string()]);
    if removed.is_ok() {
        let (name, data) = ("after".to_string(), content(99, seed));
        if fsync_file(&fs, &name, &data) {
            acked.push((name, data));
        }
    }
    let writes = devs[cut_dev].stats().writes - w0;
    let cut = devs[cut_dev].is_dead();
    assert!(cut || removed.is_ok(), "{ctx}: the removal failed without a power cut: {:?}", removed.err());
    drop(fs);
    drop(pool); // closing a pool whose devices lost power must not hang
    let images = crash_all(&devs, crash_seed);
    let hole = check_after(&images, &acked, seed, &ctx);
    RemovalCut { writes, cut, hole }
}

/// Imports the crash images and checks the claim (module docs); returns
/// whether A had become a hole.
fn check_after(images: &[Arc<FaultDevice>], acked: &[(String, Vec<u8>)], seed: u64, ctx: &str) -> bool {
    let named = |imgs: &[Arc<FaultDevice>]| imgs.iter().enumerate().map(|(i, d)| (NAMES.get(i).map_or(format!("n{i}"), |n| n.to_string()), d.clone() as Arc<dyn BlockDevice>)).collect::<Vec<_>>();
    let open = |imgs: &[Arc<FaultDevice>]| Pool::open_on(named(imgs), vec![], &OpenOptions { tunables: tunables(), ..Default::default() });
    let pool = open(images).unwrap_or_else(|e| panic!("{ctx}: import: {e}"));
    let cfg = pool.config();
    let hole = cfg.tree.children.get(1).is_some_and(|t| t.is_hole());
    if hole {
        assert_eq!(pool.log_vdevs(), vec![3], "{ctx}: B alone is a log vdev");
    } else {
        assert_eq!(pool.log_vdevs(), vec![1, 3], "{ctx}: A and B are log vdevs");
    }
    let fs = mount_logged(&pool);
    for (name, data) in acked {
        let got = read_file(&fs, name).unwrap_or_else(|| panic!("{ctx}: acknowledged file {name} is missing"));
        assert!(got == *data, "{ctx}: {name}: {}", crate::common::first_difference(&got, data));
    }
    check_verified(&pool, ctx);
    if !hole {
        pool.remove_devices(&["d1".to_string()]).unwrap_or_else(|e| panic!("{ctx}: finishing the removal: {e}"));
        assert!(pool.config().tree.children[1].is_hole(), "{ctx}: a hole after the removal");
    }
    let new = mem_devs(1, 128 << 20, seed ^ 0x5eed);
    pool.add_log_vdevs_on(vec![NewTop { layout: Layout::Plain, devices: vec![("n4".to_string(), new[0].clone() as Arc<dyn BlockDevice>)] }], false)
        .unwrap_or_else(|e| panic!("{ctx}: a new log vdev: {e}"));
    assert_eq!(pool.log_vdevs(), vec![3, 4], "{ctx}: the new log vdev appends");
    let last = content(123, seed);
    assert!(fsync_file(&fs, "on-the-new-log", &last), "{ctx}: fsync onto the new log vdev");
    drop(fs);
    check_verified(&pool, ctx);
    pool.export().unwrap_or_else(|e| panic!("{ctx}: export: {e}"));
    drop(pool);
    let mut all: Vec<Arc<FaultDevice>> = images.to_vec();
    all.extend(new);
    let pool = open(&all).unwrap_or_else(|e| panic!("{ctx}: import after export: {e}"));
    let fs = mount_logged(&pool);
    assert_eq!(read_file(&fs, "on-the-new-log").as_deref(), Some(&last[..]), "{ctx}: the file on the new log");
    drop(fs);
    check_verified(&pool, ctx);
    hole
}
