//! The counters are honest: a known workload shows up in the metrics
//! snapshot (what `pool iostat`, `arcstat`, `pool txgs` and the Prometheus
//! endpoint print) with exactly the counts it caused.

mod common;

use common::{as_dyn, pattern};
use tarn_engine::pool::metrics::{arc_snapshot, snapshot, PoolMetrics};
use tarn_engine::{CreateOptions, OpenOptions, Pool, Tunables};
use tarn_ondisk::ObjectType;

const BLOCKS: usize = 64;
const BS: usize = 128 << 10;

fn class<'a>(m: &'a PoolMetrics, name: &str) -> &'a tarn_engine::io::stats::ClassIoSnapshot {
    m.vdevs[0].classes.iter().find(|c| c.class == name).unwrap()
}

#[test]
fn a_known_workload_is_counted_exactly() {
    let d = common::mem_devs(1, 256 << 20, 11);
    let opts = CreateOptions { root_props: vec![("compression".into(), "off".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let before = snapshot(&pool);
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(BLOCKS * BS, 5)).unwrap();
    let txg = tx.txg();
    drop(tx);
    pool.sync().unwrap();
    let after = snapshot(&pool);

    // Writes: 64 data blocks of exactly 128 KiB went through the async-write
    // class (metadata blocks are smaller: dnode blocks, indirect blocks).
    let aw = class(&after, "async_write").ind_size.since(&class(&before, "async_write").ind_size);
    assert_eq!(aw.buckets[17], BLOCKS as u64, "128 KiB writes: {:?}", aw.buckets);
    // The txg record covers the data and matches the device's own counters.
    let rec = after.txgs.iter().find(|r| r.txg == txg).expect("the txg was recorded");
    let dev_bytes: u64 = after.txgs.iter().filter(|r| r.txg > before.txg).map(|r| r.write_bytes).sum();
    assert_eq!(dev_bytes, after.vdevs[0].write_bytes - before.vdevs[0].write_bytes, "txg records and device counters agree");
    assert!(rec.write_bytes >= (BLOCKS * BS) as u64, "txg {} wrote {} bytes", txg, rec.write_bytes);
    assert!(rec.dirty_bytes >= (BLOCKS * BS) as u64);
    assert!(rec.timing.open_ms >= 0.0 && rec.sync_ms > 0.0);
    // Every queued write completed and was counted once per device op.
    let ops: u64 = after.vdevs[0].classes.iter().map(|c| c.ops).sum::<u64>() - before.vdevs[0].classes.iter().map(|c| c.ops).sum::<u64>();
    let disk: u64 = after.vdevs[0].classes.iter().map(|c| c.disk_ns.count).sum::<u64>() - before.vdevs[0].classes.iter().map(|c| c.disk_ns.count).sum::<u64>();
    assert_eq!(ops, disk, "one disk-latency sample per device operation");
    // The queues drain (an issue thread leaves its op active for a moment
    // after telling the waiter it completed).
    let drained = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        snapshot(&pool).vdevs[0].queues.iter().all(|q| q.active == 0 && q.queued == 0)
    });
    assert!(drained, "queues drained: {:?}", snapshot(&pool).vdevs[0].queues);
    pool.export().unwrap();

    // Reads, cold, without read-ahead, one block at a time: 64 demand data
    // misses, 64 sync reads of 128 KiB, then 64 hits on a second pass.
    let t = Tunables { zfs_prefetch_disable: 1, zfs_arc_max: 64 << 20, zfs_arc_min: 16 << 20, ..Default::default() };
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { arc: common::own_arc(&t), tunables: t, ..Default::default() }).unwrap();
    let os = pool.root().clone();
    let arc = || arc_snapshot(pool.core().cache.arc());
    let (before, arc_before) = (snapshot(&pool), arc());
    for i in 0..BLOCKS {
        os.read(o, (i * BS) as u64, BS).unwrap();
    }
    let (mid, arc_mid) = (snapshot(&pool), arc());
    assert_eq!(arc_mid.demand_data_misses - arc_before.demand_data_misses, BLOCKS as u64);
    let sr = class(&mid, "sync_read").ind_size.since(&class(&before, "sync_read").ind_size);
    assert_eq!(sr.buckets[17], BLOCKS as u64, "128 KiB reads: {:?}", sr.buckets);
    assert_eq!(mid.prefetch.issued, 0);
    for i in 0..BLOCKS {
        os.read(o, (i * BS) as u64, BS).unwrap();
    }
    let (end, arc_end) = (snapshot(&pool), arc());
    assert_eq!(arc_end.demand_data_hits - arc_mid.demand_data_hits, BLOCKS as u64);
    assert_eq!(arc_end.demand_data_misses, arc_mid.demand_data_misses);
    assert_eq!(end.vdevs[0].read_ops, mid.vdevs[0].read_ops, "cached reads reach no device");
    assert!(arc_end.sizes.data_size >= (BLOCKS * BS) as u64);
}

#[test]
fn throttle_delays_are_counted_per_txg() {
    let d = common::mem_devs(1, 256 << 20, 12);
    let t = Tunables { zfs_dirty_data_max: 4 << 20, zfs_delay_min_dirty_percent: 10, zfs_delay_scale: 100_000, ..common::small_tunables() };
    let opts = CreateOptions { tunables: t, root_props: vec![("compression".into(), "off".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    drop(tx);
    for i in 0..64u64 {
        let tx = os.begin().unwrap();
        os.write(&tx, o, i * BS as u64, &pattern(BS, i)).unwrap();
    }
    pool.sync().unwrap();
    let m = snapshot(&pool);
    let per_txg: u64 = m.txgs.iter().map(|r| r.timing.delayed).sum();
    assert!(m.throttle.delayed > 0, "writing 2x the dirty limit above 10% must delay");
    assert_eq!(per_txg, m.throttle.delayed, "per-txg delay counts add up to the total");
}
