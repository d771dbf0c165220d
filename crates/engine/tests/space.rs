//! Running out of space, through the POSIX layer: which error a writer
//! gets (a quota: EDQUOT; the pool: ENOSPC), that space freed by a delete
//! is there for the next writer at once (it waits for the frees to sync,
//! as OpenZFS's dmu_tx_wait does, instead of failing), that an idle pool
//! releases its deferred frees by itself, how much of a pool can really be
//! filled, and that statfs tells the same story at every moment.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_engine::posix::*;
use tarn_engine::sys::FaultDevice;
use tarn_engine::{CreateOptions, Pool, Tunables};

const ROOT: Caller = Caller::new(0, 0, 1, 0);

/// A pool "tank" of `size` bytes on one in-memory device, compression off
/// (the test data is incompressible anyway; off keeps the sizes exact).
fn pool_with(size: u64, tunables: Tunables) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = common::mem_devs(1, size, 11);
    let opts = CreateOptions { tunables, root_props: vec![("compression".into(), "off".into())], ..Default::default() };
    let pool = Pool::create_on("tank", common::as_dyn(&devs), vec![], &opts).expect("create");
    (devs, pool)
}

fn pool_of(size: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    pool_with(size, common::small_tunables())
}

/// The POSIX file system of dataset `name`.
fn fs_of(pool: &Pool, name: &str) -> Arc<PosixFs> {
    PosixFs::open(pool.datasets().objset(name).expect("objset"), Default::default()).expect("mount")
}

fn file(fs: &PosixFs, name: &str) -> Ino {
    fs.mknod(&ROOT, fs.root(), name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino
}

/// Writes `total` bytes to a new file `name` in 1 MiB writes; the bytes
/// written and the error that stopped it, if any.
fn fill(fs: &PosixFs, name: &str, total: u64, seed: u64) -> (u64, Option<Errno>) {
    let f = match fs.mknod(&ROOT, fs.root(), name.as_bytes(), libc::S_IFREG | 0o644, 0) {
        Ok(a) => a.ino,
        Err(e) => return (0, Some(e)),
    };
    let chunk = common::pattern(1 << 20, seed);
    let mut off = 0;
    while off < total {
        let n = (total - off).min(1 << 20) as usize;
        if let Err(e) = fs.write(&ROOT, f, off, &chunk[..n]) {
            return (off, Some(e));
        }
        off += n as u64;
    }
    (off, None)
}

/// Pins: a quota refused writes with ENOSPC ("No space left on device")
/// like a full pool; it must be EDQUOT ("Disk quota exceeded"), and the
/// pool's own limit ENOSPC. Creating a file past the quota fails too.
#[test]
fn a_quota_says_edquot_and_a_full_pool_enospc() {
    let (_d, pool) = pool_of(128 << 20);
    pool.datasets().create("tank/q", &[("quota", "1M")], false).unwrap();
    let q = fs_of(&pool, "tank/q");
    let (written, e) = fill(&q, "f", 5 << 20, 1);
    let e = e.expect("5 MiB do not fit a 1M quota");
    assert_eq!(e.errno, libc::EDQUOT, "{e}");
    assert!(e.msg.contains("tank/q") && e.msg.contains("quota"), "{e}");
    assert!(written <= 1 << 20, "{written} bytes went past a 1M quota");
    q.sync_all().unwrap();
    assert_eq!(q.getattr(q.lookup(q.root(), b"f").unwrap().ino).unwrap().size, written, "the size is what was stored");
    // Fill the rest of the quota with small files: creates then fail too.
    let mut last = None;
    for i in 0..64 {
        if let (_, Some(e)) = fill(&q, &format!("s{i}"), 64 << 10, i) {
            last = Some(e);
            break;
        }
    }
    assert_eq!(last.expect("the quota fills").errno, libc::EDQUOT);
    let r = fs_of(&pool, "tank");
    let (_, e) = fill(&r, "big", 256 << 20, 2);
    let e = e.expect("256 MiB do not fit a 128 MiB pool");
    assert_eq!(e.errno, libc::ENOSPC, "{e}");
    assert!(e.msg.contains("pool 'tank'"), "{e}");
}

/// Pins: after filling a 72 MiB pool and deleting a 40 MB file, writing
/// failed with ENOSPC until the pool had synced twice more (the frees are
/// deferred two txgs, and nothing made those txgs happen). A writer short
/// of space while frees are on their way now waits for them.
#[test]
fn a_delete_gives_its_space_to_the_next_write_at_once() {
    let (_d, pool) = pool_of(72 << 20);
    let fs = fs_of(&pool, "tank");
    let (big, e) = fill(&fs, "big", 40 << 20, 1);
    assert!(e.is_none() && big == 40 << 20, "{e:?}");
    let (_, e) = fill(&fs, "rest", 64 << 20, 2);
    assert_eq!(e.expect("the pool fills").errno, libc::ENOSPC);
    fs.sync_all().unwrap();
    fs.unlink(&ROOT, fs.root(), b"big").unwrap();
    let t = Instant::now();
    let (n, e) = fill(&fs, "again", 20 << 20, 3);
    assert!(e.is_none(), "20 MiB right after deleting 40 MiB: {n} bytes, then {e:?}");
    fs.mknod(&ROOT, fs.root(), b"touched", libc::S_IFREG | 0o644, 0).expect("touch after the delete");
    eprintln!("20 MiB written {:?} after the delete", t.elapsed());
    pool.verify().expect("the pool verifies");
}

/// The same under a quota: the dataset's used space counts the delete
/// only once it syncs; the writer waits for that rather than failing.
#[test]
fn a_delete_under_a_quota_gives_its_space_back_at_once() {
    let (_d, pool) = pool_of(128 << 20);
    pool.datasets().create("tank/q", &[("quota", "8M")], false).unwrap();
    let q = fs_of(&pool, "tank/q");
    let (_, e) = fill(&q, "a", 6 << 20, 1);
    assert!(e.is_none(), "{e:?}");
    let (_, e) = fill(&q, "b", 8 << 20, 2);
    assert_eq!(e.expect("the quota fills").errno, libc::EDQUOT);
    q.unlink(&ROOT, q.root(), b"a").unwrap();
    let (n, e) = fill(&q, "c", 4 << 20, 3);
    assert!(e.is_none(), "4 MiB right after deleting 6 MiB under an 8M quota: {n} bytes, then {e:?}");
}

/// Pins: an idle pool never synced the txgs that release deferred frees,
/// so space freed by the last delete stayed unusable (and `df` showed it
/// used) until something else was written.
#[test]
fn an_idle_pool_releases_its_deferred_frees() {
    let t = Tunables { zfs_txg_timeout: 1, ..common::small_tunables() };
    let (_d, pool) = pool_with(72 << 20, t);
    let fs = fs_of(&pool, "tank");
    let (_, e) = fill(&fs, "big", 30 << 20, 1);
    assert!(e.is_none(), "{e:?}");
    fs.sync_all().unwrap();
    fs.unlink(&ROOT, fs.root(), b"big").unwrap();
    fs.sync_all().unwrap();
    let core = pool.core().clone();
    assert!(core.deferred_bytes.load(std::sync::atomic::Ordering::Relaxed) >= 30 << 20, "the delete's frees are deferred");
    let t0 = Instant::now();
    while core.deferred_bytes.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "deferred frees still held after {:?} of idling", t0.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let free = core.free_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(free >= 60 << 20, "{free} bytes free once the frees landed");
}
