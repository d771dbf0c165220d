//! Read-ahead and the ARC's prefetch accounting: sequential streams are
//! detected per object (several at once), random reads start none, and the
//! demand reads that follow a stream find their blocks read ahead.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{as_dyn, pattern};
use tarn_engine::{CreateOptions, OpenOptions, Pool, Tunables};
use tarn_ondisk::ObjectType;

const BS: usize = 128 << 10;
const OBJ_BYTES: usize = 16 << 20;

/// A pool holding one 16 MiB object of 128 KiB blocks, reopened so the
/// cache is cold. Returns the pool and the object's number.
fn cold_pool(devs: &[Arc<tarn_engine::sys::FaultDevice>]) -> (Pool, u64) {
    let pool = Pool::create_on("tank", as_dyn(devs), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(OBJ_BYTES, 3)).unwrap();
    drop(tx);
    pool.export().unwrap();
    let t = Tunables { zfs_arc_max: 256 << 20, zfs_arc_min: 32 << 20, ..Default::default() };
    let pool = Pool::open_on(as_dyn(devs), vec![], &OpenOptions { arc: common::own_arc(&t), tunables: t, ..Default::default() }).unwrap();
    (pool, o)
}

fn stat(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

#[test]
fn sequential_read_is_read_ahead_and_hits() {
    let d = common::mem_devs(1, 256 << 20, 1);
    let (pool, o) = cold_pool(&d);
    let os = pool.root().clone();
    let core = pool.core();
    let want = pattern(OBJ_BYTES, 3);
    for off in (0..OBJ_BYTES).step_by(BS) {
        assert_eq!(os.read(o, off as u64, BS).unwrap(), &want[off..off + BS]);
    }
    let blocks = (OBJ_BYTES / BS) as u64;
    let issued = stat(&core.prefetch_stats.issued);
    assert!(issued >= blocks - 2, "only {} of {} blocks were read ahead", issued, blocks);
    // Every demand read after the first found its block prefetched, cached
    // or still in flight.
    let arc = &core.cache.stats();
    let found = stat(&arc.prefetch_data_hits) + stat(&core.prefetch_stats.hits);
    assert!(found >= blocks - 2, "demand reads found {} of {} blocks read ahead", found, blocks);
    assert!(stat(&core.prefetch_stats.stream_hits) >= blocks - 1);
}

#[test]
fn two_interleaved_streams_in_one_object() {
    let d = common::mem_devs(1, 256 << 20, 2);
    let (pool, o) = cold_pool(&d);
    let os = pool.root().clone();
    let core = pool.core();
    let half = OBJ_BYTES / 2;
    let want = pattern(OBJ_BYTES, 3);
    // Opening the pool read objects of the meta object set, and loading the
    // object reads its dnode block (a stream of the dnode array): count
    // from here.
    os.info(o).unwrap();
    let (hits0, misses0) = (stat(&core.prefetch_stats.stream_hits), stat(&core.prefetch_stats.stream_misses));
    // Two readers of one file, one from the start and one from the middle,
    // alternating: each must keep its own stream.
    for i in (0..half).step_by(BS) {
        for base in [0, half] {
            let off = base + i;
            assert_eq!(os.read(o, off as u64, BS).unwrap(), &want[off..off + BS]);
        }
    }
    let hits = stat(&core.prefetch_stats.stream_hits) - hits0;
    let misses = stat(&core.prefetch_stats.stream_misses) - misses0;
    assert!(misses <= 2, "{} stream misses: the streams were not kept apart", misses);
    assert!(hits >= (OBJ_BYTES / BS) as u64 - 2, "{} stream hits", hits);
    assert!(stat(&core.prefetch_stats.issued) >= (OBJ_BYTES / BS) as u64 - 4);
}

#[test]
fn random_reads_read_little_ahead() {
    let d = common::mem_devs(1, 256 << 20, 3);
    let (pool, o) = cold_pool(&d);
    let os = pool.root().clone();
    let core = pool.core();
    let mut rng = common::Rng::new(9);
    let blocks = (OBJ_BYTES / BS) as u64;
    for _ in 0..200 {
        let b = rng.range(1, blocks - 1);
        os.read(o, b * BS as u64 + 4096, 4096).unwrap();
    }
    let issued = stat(&core.prefetch_stats.issued);
    assert!(issued <= 10, "{} blocks read ahead for random reads", issued);
    assert!(stat(&core.cache.stats().demand_data_misses) > 0);
    core.cache.arc().check_invariants().unwrap();
}

#[test]
fn prefetch_disable_turns_it_off() {
    let d = common::mem_devs(1, 256 << 20, 4);
    let (pool, o) = cold_pool(&d);
    pool.set_tunable("zfs_prefetch_disable", "1").unwrap();
    let os = pool.root().clone();
    for off in (0..OBJ_BYTES).step_by(BS) {
        os.read(o, off as u64, 4096).unwrap();
    }
    assert_eq!(stat(&pool.core().prefetch_stats.issued), 0);
}

#[test]
fn arc_max_is_live() {
    let d = common::mem_devs(1, 256 << 20, 5);
    let (pool, o) = cold_pool(&d);
    let os = pool.root().clone();
    os.read(o, 0, OBJ_BYTES).unwrap();
    assert!(pool.core().cache.arc().size_bytes() >= 8 << 20);
    pool.set_tunable("zfs_arc_min", "4M").unwrap();
    pool.set_tunable("zfs_arc_max", "4M").unwrap();
    assert!(pool.core().cache.arc().size_bytes() <= 4 << 20, "ARC holds {} after zfs_arc_max=4M", pool.core().cache.arc().size_bytes());
    assert_eq!(pool.core().cache.sizes().c_max, 4 << 20);
    assert!(pool.set_tunable("zfs_arc_min", "8M").is_err(), "min above max is refused");
}

/// Loading objects in the order they were made (a cold `stat` of each file
/// of a directory) reads the dnode array ahead: the dnode blocks after the
/// first few arrive as read-ahead, and loads from the block just read start
/// no streams of their own.
#[test]
fn walking_objects_in_order_reads_dnode_blocks_ahead() {
    let d = common::mem_devs(1, 256 << 20, 4);
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    // 16 slots each: 16 objects per 16 KiB dnode block, 250 blocks, each
    // holding 900 incompressible bytes inline (empty dnodes would compress
    // into their block pointers: nothing to read).
    let objs: Vec<u64> = (0..4000).map(|_| os.create_with_slots(&tx, ObjectType::PlainData, 16).unwrap()).collect();
    for (i, &o) in objs.iter().enumerate() {
        os.write(&tx, o, 0, &pattern(900, i as u64)).unwrap();
    }
    drop(tx);
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    let os = pool.root().clone();
    let core = pool.core();
    let (issued0, misses0) = (stat(&core.prefetch_stats.issued), stat(&core.prefetch_stats.stream_misses));
    for &o in &objs {
        assert!(os.info(o).unwrap().inline);
    }
    let blocks = objs.len() as u64 / 16;
    let issued = stat(&core.prefetch_stats.issued) - issued0;
    let misses = stat(&core.prefetch_stats.stream_misses) - misses0;
    assert!(issued >= blocks - 4, "only {issued} of {blocks} dnode blocks were read ahead");
    assert!(misses <= 2, "{misses} stream misses: loads within a block started streams");
    assert_eq!(objs.len() as u64, pool.root().object_count());
}
