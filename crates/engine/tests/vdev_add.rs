//! `pool add` of data vdevs to a running pool (issue 12,
//! `pool::vdev_add`).
//!
//! Invariants checked:
//! - a mirror added to a mirror pool takes new blocks (the allocator sends
//!   writes there), the pool's size grows by it, and the pool imports with
//!   all four devices and reads everything back;
//! - a pool that loses power right after the add, and later after writing
//!   onto the new vdev, imports as of a committed txg with verify clean
//!   (the new vdev's space replays from the log onto a vdev the checkpoint
//!   never listed);
//! - mismatched redundancy is refused unless forced, a device of the pool
//!   or too small is refused, and a refusal changes nothing.

mod common;

use std::sync::Arc;

use common::{filled as fill, mem_devs, reads_back, small_tunables, verified};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, OpenOptions, Pool};

fn named(name: &str, d: &Arc<FaultDevice>) -> (String, Arc<dyn BlockDevice>) {
    (name.to_string(), d.clone() as Arc<dyn BlockDevice>)
}

fn mirror(a: (&str, &Arc<FaultDevice>), b: (&str, &Arc<FaultDevice>)) -> NewTop {
    NewTop { layout: Layout::Mirror, devices: vec![named(a.0, a.1), named(b.0, b.1)] }
}

fn open(devs: &[(&str, &Arc<FaultDevice>)]) -> tarn_engine::Result<Pool> {
    Pool::open_on(devs.iter().map(|(n, d)| named(n, d)).collect(), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() })
}

#[test]
fn an_added_mirror_takes_new_blocks_and_imports() {
    let d = mem_devs(4, 128 << 20, 31);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_tops("tank", vec![mirror(("a", &d[0]), ("b", &d[1]))], vec![], &opts).expect("create");
    let old = fill(&pool, 4, 400_000, 1);
    let size = pool.status().size;
    pool.add_vdevs_on(vec![mirror(("c", &d[2]), ("e", &d[3]))], false).expect("add");
    let st = pool.status();
    assert_eq!(st.vdevs.iter().map(|v| v.path.as_str()).collect::<Vec<_>>(), ["mirror-0", "mirror-1"]);
    assert!(st.size > size * 3 / 2, "the pool grew by the new mirror: {} -> {}", size, st.size);
    let new = fill(&pool, 8, 400_000, 50);
    let st = pool.status();
    assert!(st.vdevs[1].allocated > 1 << 20, "new blocks went to the new mirror: {:?}", st.vdevs.iter().map(|v| v.allocated).collect::<Vec<_>>());
    verified(&pool, "after the add");
    pool.export().expect("export");
    drop(pool);
    let pool = open(&[("a", &d[0]), ("b", &d[1]), ("c", &d[2]), ("e", &d[3])]).expect("import");
    reads_back(&pool, &old, "written before the add");
    reads_back(&pool, &new, "written after the add");
    let rep = pool.scrub().expect("scrub");
    assert_eq!(rep.bad_copies, 0, "{rep:?}");
    // One child of each mirror is enough.
    pool.export().expect("export");
    drop(pool);
    let pool = open(&[("b", &d[1]), ("e", &d[3])]).expect("import degraded");
    reads_back(&pool, &new, "one child of each mirror");
}

#[test]
fn a_power_cut_after_an_add_loses_nothing_committed() {
    let d = mem_devs(2, 128 << 20, 32);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_on("tank", vec![named("a", &d[0])], vec![], &opts).expect("create");
    let old = fill(&pool, 3, 300_000, 1);
    pool.add_vdevs_on(vec![NewTop { layout: Layout::Plain, devices: vec![named("b", &d[1])] }], false).expect("add");
    let just_added: Vec<Arc<FaultDevice>> = d.iter().map(|x| Arc::new(x.snapshot_durable())).collect();
    let new = fill(&pool, 6, 300_000, 40);
    let after_writes: Vec<Arc<FaultDevice>> = d.iter().map(|x| Arc::new(x.snapshot_durable())).collect();
    drop(pool);
    for (cut, want_new) in [(&just_added, false), (&after_writes, true)] {
        let pool = open(&[("a", &cut[0]), ("b", &cut[1])]).expect("import after the cut");
        assert_eq!(pool.status().vdevs.len(), 2, "the added vdev is in the tree");
        reads_back(&pool, &old, "before the add");
        if want_new {
            reads_back(&pool, &new, "synced onto the new vdev");
        }
        verified(&pool, "after the cut");
    }
}

#[test]
fn bad_adds_are_refused_and_change_nothing() {
    let d = mem_devs(5, 128 << 20, 33);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_tops("tank", vec![mirror(("a", &d[0]), ("b", &d[1]))], vec![], &opts).expect("create");
    fill(&pool, 2, 100_000, 1);
    let size = pool.status().size;
    let refused = |tops: Vec<NewTop>, force: bool, needle: &str| {
        let e = pool.add_vdevs_on(tops, force).expect_err(needle).to_string();
        assert!(e.contains(needle), "{needle}: {e}");
        let st = pool.status();
        assert_eq!((st.vdevs.len(), st.size), (1, size), "{needle}: nothing added");
    };
    refused(vec![NewTop { layout: Layout::Plain, devices: vec![named("c", &d[2])] }], false, "mismatched replication level: a 2-way mirror and a plain device");
    refused(vec![NewTop { layout: Layout::Raidz(1), devices: vec![named("c", &d[2]), named("e", &d[3]), named("f", &d[4])] }], false, "mismatched replication level");
    refused(vec![mirror(("c", &d[2]), ("c again", &d[2]))], false, "given twice");
    refused(vec![mirror(("c", &d[2]), ("a again", &d[0]))], false, "'a again' is part of active pool 'tank' (as 'a')");
    refused(vec![NewTop { layout: Layout::Mirror, devices: vec![named("c", &d[2])] }], false, "a mirror needs at least 2 devices, 1 given");
    let small = Arc::new(FaultDevice::new(1 << 20, 3));
    refused(vec![mirror(("c", &d[2]), ("small", &small))], true, "'small' is too small");
    refused(vec![], false, "no devices given");
    for x in &d[2..] {
        assert!(tarn_engine::pool::label::read_labels(x.as_ref()).config.is_none(), "refused devices are untouched");
    }
    // Forced, a plain device beside the mirror is taken.
    pool.add_vdevs_on(vec![NewTop { layout: Layout::Plain, devices: vec![named("c", &d[2])] }], true).expect("forced");
    assert_eq!(pool.status().vdevs.len(), 2);
    verified(&pool, "after the forced add");
}
