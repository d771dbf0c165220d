//! The ARC holds a dataset's metadata: clean indirect blocks are looked up
//! in the ARC, not kept by their objects, so the ARC's size decides whether
//! random reads pay metadata misses — the ARC-sizing experiment in small.

mod common;

use std::sync::atomic::Ordering;

use common::{as_dyn, pattern};
use tarn_engine::{CreateOptions, OpenOptions, Pool, Tunables};
use tarn_ondisk::ObjectType;

const RS: usize = 4 << 10;
/// 24 MiB of 4 KiB records: 6144 blocks, six 128 KiB L1 indirect blocks
/// (768 KiB of metadata as the ARC holds it).
const OBJ_BYTES: usize = 24 << 20;

fn pool_with_object(seed: u64) -> (Vec<std::sync::Arc<tarn_engine::sys::FaultDevice>>, u64) {
    let d = common::mem_devs(1, 256 << 20, seed);
    let opts = CreateOptions { root_props: vec![("recordsize".into(), "4K".into()), ("compression".into(), "off".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(OBJ_BYTES, 1)).unwrap();
    drop(tx);
    pool.export().unwrap();
    (d, o)
}

fn random_reads(pool: &Pool, o: u64, n: usize, seed: u64) -> (u64, u64) {
    let os = pool.root().clone();
    let a = &pool.core().cache.stats();
    let (h0, m0) = (a.demand_metadata_hits.load(Ordering::Relaxed), a.demand_metadata_misses.load(Ordering::Relaxed));
    let mut rng = common::Rng::new(seed);
    let want = pattern(OBJ_BYTES, 1);
    for _ in 0..n {
        let b = rng.below((OBJ_BYTES / RS) as u64) as usize;
        assert_eq!(os.read(o, (b * RS) as u64, RS).unwrap(), &want[b * RS..(b + 1) * RS]);
    }
    (a.demand_metadata_hits.load(Ordering::Relaxed) - h0, a.demand_metadata_misses.load(Ordering::Relaxed) - m0)
}

fn open(d: &[std::sync::Arc<tarn_engine::sys::FaultDevice>], arc_max: u64) -> Pool {
    let t = Tunables { zfs_arc_max: arc_max, zfs_arc_min: arc_max / 2, zfs_prefetch_disable: 1, ..Default::default() };
    Pool::open_on(as_dyn(d), vec![], &OpenOptions { arc: common::own_arc(&t), tunables: t, ..Default::default() }).unwrap()
}

#[test]
fn an_arc_larger_than_the_metadata_stops_metadata_misses() {
    let (d, o) = pool_with_object(31);
    let pool = open(&d, 64 << 20);
    let (_, cold) = random_reads(&pool, o, 2000, 1);
    assert!(cold >= 6, "{} metadata misses while warming", cold);
    let (hits, warm) = random_reads(&pool, o, 2000, 2);
    assert_eq!(warm, 0, "warm metadata never misses");
    assert!(hits >= 2000, "every read looked its indirect block up in the ARC ({} hits)", hits);
    let z = pool.core().cache.sizes();
    // Indirect blocks are held compressed (as on disk), and the hot ones
    // also as decompressed copies, so lookups do not decompress each time.
    assert!(z.metadata_size > 0 && z.metadata_size < 6 * (128 << 10), "{:?}", z);
    assert!(z.overhead_size >= 6 * (128 << 10), "{:?}", z);
}

#[test]
fn metadata_held_compressed_fits_where_decompressed_it_did_not() {
    // Regression: with blocks held decompressed, a 4 MiB ARC (16 shards of
    // 256 KiB, data streaming through) kept missing these six 128 KiB
    // indirect blocks. Held as on disk they take a fraction of that.
    let (d, o) = pool_with_object(32);
    let pool = open(&d, 4 << 20);
    random_reads(&pool, o, 2000, 1);
    let (hits, warm) = random_reads(&pool, o, 2000, 2);
    assert_eq!(warm, 0, "warm metadata misses ({} hits)", hits);
    let z = pool.core().cache.sizes();
    assert!(z.metadata_size * 2 < 6 * (128 << 10), "indirect blocks held compressed: {:?}", z);
    pool.core().cache.arc().check_invariants().unwrap();
}

fn pool_with_props(seed: u64, props: &[(&str, &str)]) -> (Pool, u64) {
    let d = common::mem_devs(1, 256 << 20, seed);
    let mut root_props: Vec<(String, String)> = vec![("compression".into(), "off".into())];
    root_props.extend(props.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let t = Tunables { zfs_arc_max: 64 << 20, zfs_arc_min: 16 << 20, zfs_prefetch_disable: 1, l2arc_feed_secs: 3600, ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions { root_props, tunables: t.clone(), ..Default::default() }).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(4 << 20, 3)).unwrap();
    drop(tx);
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { arc: common::own_arc(&t), tunables: t, ..Default::default() }).unwrap();
    (pool, o)
}

fn read_twice(pool: &Pool, o: u64) -> (u64, u64) {
    let os = pool.root().clone();
    let a = &pool.core().cache.stats();
    for _ in 0..2 {
        for i in 0..32u64 {
            os.read(o, i * (128 << 10), 128 << 10).unwrap();
        }
    }
    (a.demand_data_hits.load(Ordering::Relaxed), a.demand_data_misses.load(Ordering::Relaxed))
}

#[test]
fn primarycache_decides_what_the_arc_keeps() {
    let (pool, o) = pool_with_props(41, &[]);
    let (hits, misses) = read_twice(&pool, o);
    assert_eq!((hits, misses), (32, 32), "primarycache=all: the second pass hits");
    for policy in ["metadata", "none"] {
        let (pool, o) = pool_with_props(42, &[("primarycache", policy)]);
        let (hits, misses) = read_twice(&pool, o);
        assert_eq!((hits, misses), (0, 64), "primarycache={}: data is never kept", policy);
        assert_eq!(pool.core().cache.sizes().data_size, 0);
    }
}

#[test]
fn secondarycache_decides_what_the_l2arc_takes() {
    for (policy, want_data) in [("all", true), ("none", false), ("metadata", false)] {
        let (pool, o) = pool_with_props(43, &[("secondarycache", policy)]);
        let cache: std::sync::Arc<dyn tarn_engine::sys::BlockDevice> = std::sync::Arc::new(tarn_engine::sys::FaultDevice::new(64 << 20, 9));
        pool.add_cache_on("c", cache).unwrap();
        read_twice(&pool, o);
        let l2 = &pool.core().l2;
        l2.feed(&pool.core().cache);
        let cached = l2.size_bytes();
        if want_data {
            assert!(cached >= 32 * (128 << 10), "secondarycache=all: {} bytes cached", cached);
        } else {
            assert!(cached < 128 << 10, "secondarycache={}: {} bytes of data cached", policy, cached);
        }
    }
}

/// Compressible like text: 64-byte runs, two thirds copies of one of 16
/// "words", one third random (lz4 keeps about 45 %).
fn compressible(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = common::Rng::new(seed);
    let words: Vec<Vec<u8>> = (0..16).map(|_| (0..64).map(|_| rng.next_u64() as u8).collect()).collect();
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        if rng.chance(33) {
            out.extend((0..64).map(|_| rng.next_u64() as u8));
        } else {
            out.extend_from_slice(&words[rng.below(16) as usize]);
        }
    }
    out.truncate(len);
    out
}

#[test]
fn a_compressed_arc_holds_more_than_its_size_of_data() {
    // 24 MiB of lz4-compressible data in 16 KiB records against a 16 MiB
    // ARC: decompressed it cannot fit, compressed (about 11 MiB) it does.
    const DATA: usize = 24 << 20;
    const REC: usize = 16 << 10;
    let d = common::mem_devs(1, 256 << 20, 51);
    let opts = CreateOptions { root_props: vec![("recordsize".into(), "16K".into()), ("compression".into(), "lz4".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    let want = compressible(DATA, 5);
    os.write(&tx, o, 0, &want).unwrap();
    drop(tx);
    pool.export().unwrap();
    let arc_max = 16u64 << 20;
    let pool = open(&d, arc_max);
    let os = pool.root().clone();
    let a = &pool.core().cache.stats();
    // Warm: every block once, in order.
    for b in 0..DATA / REC {
        assert_eq!(os.read(o, (b * REC) as u64, REC).unwrap(), &want[b * REC..(b + 1) * REC]);
    }
    let (h0, m0) = (a.demand_data_hits.load(Ordering::Relaxed), a.demand_data_misses.load(Ordering::Relaxed));
    let mut rng = common::Rng::new(6);
    for _ in 0..4000 {
        let b = rng.below((DATA / REC) as u64) as usize;
        assert_eq!(os.read(o, (b * REC) as u64, REC).unwrap(), &want[b * REC..(b + 1) * REC]);
    }
    let (hits, misses) = (a.demand_data_hits.load(Ordering::Relaxed) - h0, a.demand_data_misses.load(Ordering::Relaxed) - m0);
    assert_eq!(misses, 0, "warm, every data block is in the ARC ({} hits)", hits);
    assert_eq!(hits, 4000);
    let z = pool.core().cache.sizes();
    assert!(z.size <= arc_max, "{:?}", z);
    assert!(z.uncompressed_size > arc_max, "it holds more logical data than its maximum: {:?}", z);
    assert!(z.compressed_size * 2 < z.uncompressed_size, "{:?}", z);
    pool.core().cache.arc().check_invariants().unwrap();
}

/// Second-pass demand metadata misses of `read_twice`, and the ARC's
/// metadata growth over both passes.
fn metadata_of_read_twice(pool: &Pool, o: u64) -> (u64, i64) {
    let a = &pool.core().cache.stats();
    let size0 = pool.core().cache.sizes().metadata_size as i64;
    let os = pool.root().clone();
    for i in 0..32u64 {
        os.read(o, i * (128 << 10), 128 << 10).unwrap();
    }
    let m1 = a.demand_metadata_misses.load(Ordering::Relaxed);
    for i in 0..32u64 {
        os.read(o, i * (128 << 10), 128 << 10).unwrap();
    }
    let misses = a.demand_metadata_misses.load(Ordering::Relaxed) - m1;
    (misses, pool.core().cache.sizes().metadata_size as i64 - size0)
}

/// Regression: `primarycache=none` kept data out of the ARC but not the
/// dataset's metadata — indirect blocks and dnode blocks were read through
/// the ARC regardless, and indirect blocks entered it as they were written.
#[test]
fn primarycache_decides_what_the_arc_keeps_of_metadata() {
    for (policy, keeps_metadata) in [("all", true), ("metadata", true), ("none", false)] {
        let (pool, o) = pool_with_props(44, &[("primarycache", policy)]);
        let (misses, grown) = metadata_of_read_twice(&pool, o);
        if keeps_metadata {
            assert_eq!(misses, 0, "primarycache={}: warm metadata hits", policy);
            assert!(grown > 0, "primarycache={}: the object's metadata entered the ARC", policy);
        } else {
            assert!(misses >= 32, "primarycache=none: every lookup misses ({} misses)", misses);
            assert_eq!(grown, 0, "primarycache=none: no metadata of the dataset enters the ARC");
        }
        // Writing: the indirect block written at sync enters the ARC only
        // where metadata may.
        let os = pool.root().clone();
        let tx = os.begin().unwrap();
        let o2 = os.create(&tx, ObjectType::PlainData).unwrap();
        os.write(&tx, o2, 0, &pattern(4 << 20, 8)).unwrap();
        drop(tx);
        pool.sync().unwrap();
        let info = os.info(o2).unwrap();
        assert_eq!(info.nlevels, 2);
        let top = info.dnode.blkptr.expect("written");
        assert_eq!(pool.core().cache.contains(&top), keeps_metadata, "primarycache={}: the written indirect block", policy);
        // An object of a metadata type (a directory, a key/value map) is
        // metadata through and through: `metadata` keeps its blocks too.
        let tx = os.begin().unwrap();
        let kv = os.create(&tx, ObjectType::KvMap).unwrap();
        os.write(&tx, kv, 0, &pattern(256 << 10, 9)).unwrap();
        drop(tx);
        pool.sync().unwrap();
        let a = &pool.core().cache.stats();
        os.read(kv, 0, 256 << 10).unwrap();
        let m0 = a.demand_metadata_misses.load(Ordering::Relaxed);
        os.read(kv, 0, 256 << 10).unwrap();
        let again = a.demand_metadata_misses.load(Ordering::Relaxed) - m0;
        assert_eq!(again == 0, keeps_metadata, "primarycache={}: {} misses re-reading a key/value map", policy, again);
        pool.core().cache.arc().check_invariants().unwrap();
    }
}

/// Regression (issue 11, "batched dataset commands grow with the pool"):
/// blocks of metadata objects written at sync did not enter the ARC, so
/// each txg that changed a dnode read its block back from the device to
/// patch it in, and each change of a key/value map read the map — a batch
/// of 500 dataset creates in a pool of 44,000 datasets made ~450 device
/// reads, one for each touched bucket of the name index (and before that,
/// 650: one for each MOS dnode block holding one).
#[test]
fn metadata_written_is_read_back_from_the_arc_not_the_device() {
    let d = common::mem_devs(1, 256 << 20, 61);
    let t = Tunables { zfs_arc_max: 64 << 20, zfs_arc_min: 16 << 20, zfs_prefetch_disable: 1, ..Default::default() };
    let opts = CreateOptions { arc: common::own_arc(&t), tunables: t, ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let objs: Vec<u64> = (0..8).map(|_| os.create(&tx, ObjectType::PlainData).unwrap()).collect();
    drop(tx);
    pool.sync().unwrap();
    let reads = || pool.core().vdevs.get(0).expect("a top-level vdev").leaf().expect("a plain vdev").stats().read_ops.load(Ordering::Relaxed);
    // Each txg changes one more object of the same dnode block.
    for (i, &o) in objs.iter().enumerate() {
        let before = reads();
        let tx = os.begin().unwrap();
        os.write(&tx, o, 0, &pattern(100, i as u64)).unwrap();
        drop(tx);
        pool.sync().unwrap();
        assert_eq!(reads() - before, 0, "txg {}: the sync read from the device", i);
    }
    // A key/value map larger than fits inline, changed txg after txg.
    let tx = os.begin().unwrap();
    let kv = os.create(&tx, ObjectType::KvMap).unwrap();
    os.write(&tx, kv, 0, &pattern(16 << 10, 1)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    for i in 0..4u64 {
        let before = reads();
        assert_eq!(os.read(kv, 0, 16 << 10).unwrap().len(), 16 << 10);
        let tx = os.begin().unwrap();
        os.write(&tx, kv, 0, &pattern(16 << 10, i + 2)).unwrap();
        drop(tx);
        pool.sync().unwrap();
        assert_eq!(reads() - before, 0, "txg {}: the map was read from the device", i);
    }
}
