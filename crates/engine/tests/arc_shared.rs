//! Issue 11, "one ARC per pool": each pool the process opened made its own
//! ARC, with its own `zfs_arc_max` and its own host sampler, so two pools
//! could take twice the memory meant for the cache. Now the process has one
//! ARC (`arc::shared`) and every pool caches in it: two pools together stay
//! within one `zfs_arc_max`; blocks at the same address in two pools are
//! told apart (keys carry the pool); a pool's blocks and ghosts leave the
//! ARC when it is exported.
//!
//! One test in this file, so that the process ARC is this test's alone.

mod common;

use std::sync::Arc;

use common::{as_dyn, pattern};
use tarn_engine::sys::FaultDevice;
use tarn_engine::{CreateOptions, OpenOptions, Pool, Tunables};
use tarn_ondisk::ObjectType;

const ARC_MAX: u64 = 16 << 20;
/// More than the ARC may hold, in each pool.
const OBJ_BYTES: usize = 24 << 20;
const BS: usize = 128 << 10;

fn tunables() -> Tunables {
    Tunables { zfs_arc_max: ARC_MAX, zfs_arc_min: ARC_MAX / 2, zfs_prefetch_disable: 1, ..Default::default() }
}

/// A pool `name` holding one object of `OBJ_BYTES` (content from `seed`),
/// exported. Both pools are made by the same steps on devices of the same
/// size, so their blocks lie at the same addresses, born in the same txgs.
fn exported_pool(name: &str, seed: u64) -> (Vec<Arc<FaultDevice>>, u64) {
    let d = common::mem_devs(1, 256 << 20, 7);
    let opts = CreateOptions { tunables: tunables(), root_props: vec![("compression".into(), "off".into())], ..Default::default() };
    let pool = Pool::create_on(name, as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(OBJ_BYTES, seed)).unwrap();
    drop(tx);
    pool.export().unwrap();
    (d, o)
}

fn read_all(pool: &Pool, o: u64, seed: u64) {
    let want = pattern(OBJ_BYTES, seed);
    let os = pool.root().clone();
    for off in (0..OBJ_BYTES).step_by(BS) {
        let got = os.read(o, off as u64, BS).unwrap();
        assert!(got == want[off..off + BS], "pool '{}': block at {} is not its own", pool.name(), off);
    }
}

#[test]
fn pools_share_one_arc_within_one_arc_max() {
    let (da, oa) = exported_pool("pa", 1);
    let (db, ob) = exported_pool("pb", 2);
    let open = |d: &[Arc<FaultDevice>]| Pool::open_on(as_dyn(d), vec![], &OpenOptions { tunables: tunables(), ..Default::default() }).unwrap();
    let (a, b) = (open(&da), open(&db));
    let arc = tarn_engine::arc::shared();
    assert!(Arc::ptr_eq(a.core().cache.arc(), &arc) && Arc::ptr_eq(b.core().cache.arc(), &arc), "both pools cache in the process's ARC");
    assert_ne!(a.core().cache.pool(), b.core().cache.pool());

    // The first block of each object sits at the same address in both
    // pools: without the pool in the key, one pool would read the other's.
    let top = |p: &Pool, o: u64| p.root().info(o).unwrap().dnode.blkptr.expect("written");
    let (ta, tb) = (top(&a, oa), top(&b, ob));
    assert_eq!((ta.dva[0].vdev, ta.dva[0].offset, ta.physical_birth()), (tb.dva[0].vdev, tb.dva[0].offset, tb.physical_birth()), "the pools' blocks lie at the same addresses");

    // Interleaved, 48 MiB of distinct data through a 16 MiB ARC: each pool
    // reads its own bytes, and the ARC stays within its one maximum.
    for _ in 0..2 {
        read_all(&a, oa, 1);
        read_all(&b, ob, 2);
        let z = arc.sizes();
        assert_eq!(z.c_max, ARC_MAX);
        assert!(z.size <= ARC_MAX, "two pools hold {} bytes in an ARC of at most {}", z.size, ARC_MAX);
    }
    assert!(arc.holds_pool(a.core().cache.pool()) && arc.holds_pool(b.core().cache.pool()), "both pools have blocks in the ARC");
    arc.check_invariants().unwrap();

    // Export drops the pool's blocks and ghosts; the other pool keeps its own.
    let pa = a.core().cache.pool();
    let before = arc.sizes().size;
    a.export().unwrap();
    assert!(!arc.holds_pool(pa), "the exported pool's blocks left the ARC");
    assert!(arc.holds_pool(b.core().cache.pool()));
    assert!(arc.sizes().size < before, "export gave back the pool's share: {} of {} bytes left", arc.sizes().size, before);
    arc.check_invariants().unwrap();

    // Imported again it is a new pool to the ARC: nothing of its old
    // number is found, and it reads its own bytes from its device.
    let a = open(&da);
    assert_ne!(a.core().cache.pool(), pa);
    read_all(&a, oa, 1);
    let pb = b.core().cache.pool();
    drop(b);
    assert!(!arc.holds_pool(pb), "a pool dropped without export leaves nothing behind either");
    arc.check_invariants().unwrap();
}
