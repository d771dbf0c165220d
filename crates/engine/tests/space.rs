//! Running out of space, through the POSIX layer: which error a writer
//! gets (a quota: EDQUOT; the pool: ENOSPC), that space freed by a delete
//! is there for the next writer at once (it waits for the frees to sync,
//! as OpenZFS's dmu_tx_wait does, instead of failing), that an idle pool
//! releases its deferred frees by itself, how much of a pool can really be
//! filled, and that statfs tells the same story at every moment.

mod common;

use std::sync::Arc;
use std::time::Instant;

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

/// Pins: after a delete, `df` showed the space used until the pool had
/// synced twice more (the allocator defers frees two txgs, and an idle
/// pool does not sync). The space a delete freed counts as available as
/// soon as its txg synced; the writer that needs it waits for the frees.
#[test]
fn statfs_counts_a_delete_at_once() {
    let (_d, pool) = pool_of(72 << 20);
    let fs = fs_of(&pool, "tank");
    let (_, e) = fill(&fs, "big", 40 << 20, 1);
    assert!(e.is_none(), "{e:?}");
    fs.sync_all().unwrap();
    let avail = |fs: &PosixFs| fs.statfs().map(|s| s.bavail * s.frsize as u64).unwrap();
    let before = avail(&fs);
    fs.unlink(&ROOT, fs.root(), b"big").unwrap();
    fs.sync_all().unwrap();
    let deferred = pool.core().deferred_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(deferred >= 40 << 20, "the delete's frees are still deferred ({deferred})");
    let after = avail(&fs);
    assert!(after >= before + (39 << 20), "available {before} -> {after} after deleting 40 MiB");
    let (n, e) = fill(&fs, "again", after - (2 << 20), 2);
    assert!(e.is_none(), "statfs offered {after}; {n} bytes went in, then {e:?}");
}

/// statfs at every moment: size = used + available, the size stays put
/// while data is dirty (what is dirty counts as used and is gone from
/// available), and available is what a writer can really still write.
#[test]
fn statfs_is_consistent_while_data_is_dirty() {
    let t = Tunables { zfs_dirty_data_max: 256 << 20, zfs_txg_timeout: 600, ..common::small_tunables() };
    let (_d, pool) = pool_with(128 << 20, t);
    let fs = fs_of(&pool, "tank");
    let bytes = |s: &StatFs| (s.blocks * s.frsize as u64, s.bavail * s.frsize as u64);
    let (size0, avail0) = bytes(&fs.statfs().unwrap());
    let (_, e) = fill(&fs, "dirty", 24 << 20, 1);
    assert!(e.is_none(), "{e:?}");
    assert!(pool.core().txg.dirty_total() >= 24 << 20, "the data is still dirty");
    let (size1, avail1) = bytes(&fs.statfs().unwrap());
    assert!(size1.abs_diff(size0) < 1 << 20, "size {size0} -> {size1} with 24 MiB dirty");
    assert!(avail1 + (24 << 20) <= avail0, "available {avail0} -> {avail1} with 24 MiB dirty");
    // What statfs offers can be written (less a little for metadata) …
    let offer = avail1 - (4 << 20);
    let (n, e) = fill(&fs, "offered", offer, 2);
    assert!(e.is_none(), "statfs offered {avail1} bytes; {n} of {offer} went in, then {e:?}");
    // … and not much more.
    let (_, e) = fill(&fs, "beyond", 16 << 20, 3);
    assert_eq!(e.expect("the pool is full").errno, libc::ENOSPC);
    let (size2, avail2) = bytes(&fs.statfs().unwrap());
    assert!(avail2 < 8 << 20 && size2.abs_diff(size0) < 4 << 20, "full: size {size2} (was {size0}), available {avail2}");
}

/// Fills a pool with files of random sizes up to `max_file` until ENOSPC,
/// deletes every other file, and again, `rounds` times; each round checks
/// that the error is ENOSPC, that the pool syncs (not suspended), and
/// returns the free share of the pool at each ENOSPC.
fn churn(size: u64, max_file: u64, rounds: usize) -> Vec<f64> {
    let (_d, pool) = pool_of(size);
    let fs = fs_of(&pool, "tank");
    let mut rng = common::Rng::new(5);
    let mut live: Vec<String> = Vec::new();
    let mut levels = Vec::new();
    for round in 0..rounds {
        let e = (0..).find_map(|i| {
            let name = format!("r{round}-{i}");
            let (_, e) = fill(&fs, &name, rng.range(1, max_file), i);
            if fs.lookup(fs.root(), name.as_bytes()).is_ok() {
                live.push(name);
            }
            e
        });
        let e = e.expect("the pool fills");
        assert_eq!(e.errno, libc::ENOSPC, "round {round}: {e}");
        fs.sync_all().unwrap_or_else(|e| panic!("round {round}: the pool must still sync: {e}"));
        let st = pool.status();
        levels.push(st.free as f64 / st.size as f64);
        eprintln!("{} MiB, files up to {max_file}: round {round} full at {:.1}% free ({} files): {}", size >> 20, levels[round] * 100.0, live.len(), e.msg);
        let all = std::mem::take(&mut live);
        for (j, n) in all.into_iter().enumerate() {
            if j % 2 == 0 {
                fs.unlink(&ROOT, fs.root(), n.as_bytes()).unwrap();
            } else {
                live.push(n);
            }
        }
    }
    let rep = pool.verify().expect("verify");
    assert!(rep.errors.is_empty(), "{:#?}", rep.errors);
    levels
}

/// Pins: small files written into the holes deleted small files left
/// (a 72 MiB pool, files up to 64 KiB, every other one deleted) suspended
/// the pool: the writers were admitted on the free-space total, but the
/// free space lay in pieces smaller than the blocks, and there are no gang
/// blocks to split a block over them, so the sync could not allocate
/// ("cannot allocate 65536 bytes: no space"). Free space now counts only
/// in pieces that hold the blocks: such a pool answers ENOSPC, and may do
/// so with much of it free (the message says how much lies in pieces).
#[test]
fn a_fragmented_pool_says_enospc_instead_of_suspending() {
    churn(72 << 20, 64 << 10, 3);
}

/// Where fragmentation is no issue (files of up to 8 MiB), a pool fills up
/// to its slop reserve (1/32, at least 4 MiB) and a few blocks' worth.
#[test]
fn a_pool_fills_to_its_slop() {
    let size = 72u64 << 20;
    let slop = 4u64 << 20;
    for (round, free) in churn(size, 8 << 20, 2).into_iter().enumerate() {
        assert!(free <= (slop as f64 / size as f64) + 0.03, "round {round}: ENOSPC with {:.1}% free", free * 100.0);
    }
}

/// What the FUSE glue asks before caching a file's writes: a file system
/// with less room than the kernel may hold for the pool's mounts wants its
/// files written around the cache (so write(2) fails, not the write-back).
#[test]
fn uncached_writes_follow_the_room_the_kernel_may_fill() {
    let (_d, pool) = pool_of(128 << 20);
    pool.datasets().create("tank/q", &[("quota", "10M")], false).unwrap();
    let (root, q) = (fs_of(&pool, "tank"), fs_of(&pool, "tank/q"));
    assert!(!root.uncached_writes() && !q.uncached_writes(), "no mount caches anything");
    root.kernel_cache(1, 32 << 20);
    assert!(!root.uncached_writes(), "a 128 MiB pool has room for 32 MiB of cached writes");
    assert!(q.uncached_writes(), "a 10M quota has not");
    q.kernel_cache(2, 100 << 20);
    assert!(root.uncached_writes(), "two mounts may cache 132 MiB together");
    root.kernel_cache(2, 0);
    root.kernel_cache(1, 0);
    assert!(!q.uncached_writes(), "no mount left");
}

/// `keep_size`: after a refused write-back the file takes the size the
/// kernel shows, as a hole; never shrinks.
#[test]
fn keep_size_grows_a_file_by_a_hole() {
    let (_d, pool) = pool_of(128 << 20);
    let fs = fs_of(&pool, "tank");
    let (_, e) = fill(&fs, "f", 1 << 20, 1);
    assert!(e.is_none());
    let f = fs.lookup(fs.root(), b"f").unwrap().ino;
    fs.keep_size(f, 3 << 20).unwrap();
    fs.keep_size(f, 2 << 20).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 3 << 20);
    let tail = fs.read(f, 1 << 20, 2 << 20).unwrap();
    assert!(tail.len() == 2 << 20 && tail.iter().all(|&b| b == 0), "the part never stored reads as zeros");
    assert_eq!(fs.read(f, 0, 1 << 20).unwrap(), common::pattern(1 << 20, 1));
}
