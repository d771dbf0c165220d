//! The L2ARC: blocks evicted from a small ARC are served from a cache
//! device instead of the pool's disks, the index survives export and
//! import, a damaged or overwritten cache never returns wrong data, and
//! cache devices come and go without touching the pool's data.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{as_dyn, pattern};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, OpenOptions, Pool, Tunables};
use tarn_ondisk::ObjectType;

const BS: usize = 128 << 10;
const OBJ_BYTES: usize = 48 << 20;

fn tunables() -> Tunables {
    // An ARC far smaller than the data; feeds driven by the test (the feed
    // thread's first wake-up is a second away and tests finish sooner).
    Tunables { zfs_arc_max: 8 << 20, zfs_arc_min: 4 << 20, zfs_prefetch_disable: 1, l2arc_feed_secs: 3600, ..Default::default() }
}

/// Half compressible, half not: both stored forms reach the cache.
fn content(i: usize) -> Vec<u8> {
    let mut d = pattern(BS, i as u64);
    if i.is_multiple_of(2) {
        for (j, b) in d.iter_mut().enumerate() {
            if j % 4 != 0 {
                *b = 0x41;
            }
        }
    }
    d
}

fn make_pool(main: &[Arc<FaultDevice>]) -> (Pool, u64) {
    let opts = CreateOptions { arc: common::own_arc(&tunables()), tunables: tunables(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(main), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    for i in 0..OBJ_BYTES / BS {
        os.write(&tx, o, (i * BS) as u64, &content(i)).unwrap();
    }
    drop(tx);
    pool.sync().unwrap();
    (pool, o)
}

/// Reads the whole object block by block, feeding the cache as it goes;
/// checks every byte.
fn read_all(pool: &Pool, o: u64, feed: bool) {
    let os = pool.root().clone();
    let core = pool.core();
    for i in 0..OBJ_BYTES / BS {
        let got = os.read(o, (i * BS) as u64, BS).unwrap();
        assert!(got == content(i), "block {} read back wrong", i);
        if feed && i % 16 == 15 {
            core.l2.feed(&core.cache);
        }
    }
}

fn main_reads(d: &[Arc<FaultDevice>], pool: &Pool) -> u64 {
    let _ = d;
    pool.core().vdevs.get(0).expect("a top-level vdev").leaf().expect("a plain vdev").stats().read_ops.load(Ordering::Relaxed)
}

#[test]
fn evicted_blocks_come_from_the_cache_device_and_survive_import() {
    let main = common::mem_devs(1, 512 << 20, 21);
    let cache: Arc<dyn BlockDevice> = Arc::new(FaultDevice::new(256 << 20, 99));
    let (pool, o) = make_pool(&main);
    pool.add_cache_on("cache0", cache.clone()).unwrap();
    assert_eq!(pool.cache_devices().len(), 1);
    read_all(&pool, o, true);
    let l2 = &pool.core().l2;
    assert!(l2.entries() >= OBJ_BYTES / BS * 3 / 4, "only {} blocks reached the cache", l2.entries());
    l2.check_invariants().unwrap();
    // The ARC holds blocks as on disk, so the feed writes them unchanged:
    // nothing to recompress, nothing skipped, and the compressed half of
    // the blocks takes less room on the cache device than its logical size.
    assert_eq!(l2.stats.write_skipped.load(Ordering::Relaxed), 0);
    assert!(l2.size_bytes() < (l2.entries() * BS) as u64 * 7 / 8, "{} bytes for {} blocks", l2.size_bytes(), l2.entries());
    // Second pass: the ARC is far too small, so the blocks come from the
    // cache device; the main device sees only what the cache lacks.
    let reads0 = main_reads(&main, &pool);
    let hits0 = l2.stats.hits.load(Ordering::Relaxed);
    read_all(&pool, o, false);
    let hits = l2.stats.hits.load(Ordering::Relaxed) - hits0;
    let main_now = main_reads(&main, &pool) - reads0;
    assert!(hits as usize >= OBJ_BYTES / BS * 3 / 4, "{} cache hits", hits);
    assert!(main_now < (OBJ_BYTES / BS / 4) as u64 + 8, "{} reads still reached the main device", main_now);
    let entries = l2.entries();
    eprintln!("l2: {} entries, {} hits on the second pass, {} main-device reads, {} bytes written in {} feeds", entries, hits, main_now, l2.stats.write_bytes.load(Ordering::Relaxed), l2.stats.feeds.load(Ordering::Relaxed));
    pool.export().unwrap();

    // Persistent: the index is rebuilt from the device's log blocks.
    let opts = OpenOptions { arc: common::own_arc(&tunables()), tunables: tunables(), cache_devices: vec![("cache0".into(), cache.clone())], ..Default::default() };
    let pool = Pool::open_on(as_dyn(&main), vec![], &opts).unwrap();
    let l2 = &pool.core().l2;
    assert_eq!(l2.entries(), entries, "rebuilt index");
    assert!(l2.stats.rebuilt.load(Ordering::Relaxed) as usize >= entries);
    l2.check_invariants().unwrap();
    let reads0 = main_reads(&main, &pool);
    read_all(&pool, o, false);
    assert!(l2.stats.hits.load(Ordering::Relaxed) as usize >= OBJ_BYTES / BS * 3 / 4);
    assert!(main_reads(&main, &pool) - reads0 < (OBJ_BYTES / BS / 4) as u64 + 16);

    // Removing the cache device forgets it, here and at the next import.
    pool.remove_caches(&["cache0".to_string()]).unwrap();
    assert_eq!(pool.core().l2.entries(), 0);
    assert!(pool.remove_caches(&["cache0".to_string()]).is_err());
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&main), vec![], &opts).unwrap();
    assert!(pool.cache_devices().is_empty());
    read_all(&pool, o, false);
}

#[test]
fn a_damaged_cache_never_returns_wrong_data() {
    let main = common::mem_devs(1, 512 << 20, 22);
    let cache = Arc::new(FaultDevice::new(256 << 20, 98));
    let (pool, o) = make_pool(&main);
    pool.add_cache_on("cache0", cache.clone()).unwrap();
    read_all(&pool, o, true);
    assert!(pool.core().l2.entries() > 0);
    // Scribble over the whole ring (not the header).
    let junk = vec![0x5Au8; 1 << 20];
    for off in (1..200u64).map(|i| i << 20) {
        cache.write_at(&junk, off).unwrap();
    }
    read_all(&pool, o, false);
    let l2 = &pool.core().l2;
    assert!(l2.stats.cksum_bad.load(Ordering::Relaxed) > 0, "damage was noticed");
    assert_eq!(pool.status().vdevs[0].checksum_errors, 0, "the pool's own devices are not blamed");
    l2.check_invariants().unwrap();
    pool.export().unwrap();
    // A header that does not verify: the pool imports without the cache.
    cache.write_at(&vec![0u8; 4096], 0).unwrap();
    let opts = OpenOptions { arc: common::own_arc(&tunables()), tunables: tunables(), cache_devices: vec![("cache0".into(), cache as Arc<dyn BlockDevice>)], ..Default::default() };
    let pool = Pool::open_on(as_dyn(&main), vec![], &opts).unwrap();
    assert!(pool.cache_devices().is_empty());
    read_all(&pool, o, false);
}

#[test]
fn a_small_cache_wraps_and_stays_consistent() {
    let main = common::mem_devs(1, 512 << 20, 23);
    // 6 MiB of ring for 48 MiB of data: many laps.
    let cache: Arc<dyn BlockDevice> = Arc::new(FaultDevice::new((6 << 20) + 4096, 97));
    let (pool, o) = make_pool(&main);
    pool.add_cache_on("cache0", cache.clone()).unwrap();
    for _ in 0..3 {
        read_all(&pool, o, true);
        pool.core().l2.check_invariants().unwrap();
    }
    let st = &pool.core().l2.stats;
    assert!(st.evicted.load(Ordering::Relaxed) > 0, "the ring wrapped");
    assert!(pool.cache_devices()[0].lap > 0);
    assert!(pool.core().l2.size_bytes() <= 6 << 20);
    let entries = pool.core().l2.entries();
    pool.export().unwrap();
    let opts = OpenOptions { arc: common::own_arc(&tunables()), tunables: tunables(), cache_devices: vec![("cache0".into(), cache)], ..Default::default() };
    let pool = Pool::open_on(as_dyn(&main), vec![], &opts).unwrap();
    let rebuilt = pool.core().l2.entries();
    assert!(rebuilt > 0 && rebuilt <= entries, "rebuilt {} of {} after wrapping", rebuilt, entries);
    pool.core().l2.check_invariants().unwrap();
    read_all(&pool, o, false);
}

#[test]
fn bad_cache_arguments_are_refused() {
    let main = common::mem_devs(1, 256 << 20, 24);
    let pool = Pool::create_on("tank", as_dyn(&main), vec![], &CreateOptions::default()).unwrap();
    let tiny: Arc<dyn BlockDevice> = Arc::new(FaultDevice::new(32 << 10, 1));
    assert!(pool.add_cache_on("tiny", tiny).unwrap_err().to_string().contains("too small"));
    let c: Arc<dyn BlockDevice> = Arc::new(FaultDevice::new(64 << 20, 2));
    pool.add_cache_on("c", c.clone()).unwrap();
    assert!(pool.add_cache_on("c2", c).unwrap_err().to_string().contains("already"));
    assert!(pool.add_caches(&["/nonexistent/cache.img".into()], false).is_err());
    assert!(pool.remove_caches(&["nosuch".to_string()]).unwrap_err().to_string().contains("not a cache device"));
}
