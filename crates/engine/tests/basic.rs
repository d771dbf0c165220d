//! The engine end to end on in-memory devices: create, write, sync, reopen,
//! read back; objects of every shape (inline, single block, multi-level).

mod common;

use common::{as_dyn, pattern};
use tarn_engine::sys::FaultDevice;
use tarn_engine::{CreateOptions, OpenOptions, Pool};
use tarn_ondisk::ObjectType;

fn devs(n: usize, size: u64) -> Vec<std::sync::Arc<FaultDevice>> {
    common::mem_devs(n, size, 1)
}

#[test]
fn create_write_reopen_read() {
    let d = devs(2, 256 << 20);
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let sizes = [0usize, 1, 100, 1000, 3000, 5000, 128 << 10, (128 << 10) + 1, 3 << 20];
    let mut objs = Vec::new();
    for (i, &sz) in sizes.iter().enumerate() {
        let tx = os.begin().unwrap();
        let o = os.create(&tx, ObjectType::PlainData).unwrap();
        let data = pattern(sz, i as u64);
        os.write(&tx, o, 0, &data).unwrap();
        tx.commit();
        objs.push((o, data));
    }
    for (o, data) in &objs {
        assert_eq!(&os.read(*o, 0, data.len() + 10).unwrap(), data, "before sync, object {}", o);
    }
    pool.sync().unwrap();
    for (o, data) in &objs {
        assert_eq!(&os.read(*o, 0, data.len() + 10).unwrap(), data, "after sync, object {}", o);
    }
    let small = os.info(objs[3].0).unwrap();
    assert!(small.inline, "a 1000-byte object is stored inline: {:?}", small);
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    let os = pool.root().clone();
    for (o, data) in &objs {
        assert_eq!(&os.read(*o, 0, data.len() + 10).unwrap(), data, "after reopen, object {}", o);
    }
    pool.check_invariants().unwrap();
}

#[test]
fn overwrite_truncate_free_across_txgs() {
    let d = devs(1, 256 << 20);
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    let mut model = pattern(1 << 20, 7);
    os.write(&tx, o, 0, &model).unwrap();
    drop(tx);
    pool.sync().unwrap();
    // Partial overwrite in a later txg.
    let tx = os.begin().unwrap();
    let patch = pattern(5000, 8);
    os.write(&tx, o, 300_000, &patch).unwrap();
    model[300_000..305_000].copy_from_slice(&patch);
    drop(tx);
    assert_eq!(os.read(o, 0, model.len()).unwrap(), model);
    pool.sync().unwrap();
    assert_eq!(os.read(o, 0, model.len()).unwrap(), model);
    // Truncate, then extend sparsely.
    let tx = os.begin().unwrap();
    os.truncate(&tx, o, 200_000).unwrap();
    model.truncate(200_000);
    os.write(&tx, o, 10 << 20, b"tail").unwrap();
    model.resize(10 << 20, 0);
    model.extend_from_slice(b"tail");
    drop(tx);
    pool.sync().unwrap();
    assert_eq!(os.read(o, 0, model.len()).unwrap(), model);
    let used_before = pool.status().allocated;
    let tx = os.begin().unwrap();
    os.free(&tx, o).unwrap();
    drop(tx);
    for _ in 0..4 {
        pool.sync().unwrap();
        // Empty txgs still advance (frees become reusable two txgs later).
        let tx = os.begin().unwrap();
        let x = os.create(&tx, ObjectType::PlainData).unwrap();
        os.write(&tx, x, 0, b"x").unwrap();
    }
    pool.sync().unwrap();
    assert!(os.read(o, 0, 10).is_err());
    assert!(pool.status().allocated < used_before, "freeing returns space");
    pool.check_invariants().unwrap();
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    assert!(pool.root().read(o, 0, 10).is_err());
    pool.check_invariants().unwrap();
}

#[test]
fn verify_finds_no_leak_after_churn() {
    let d = devs(2, 256 << 20);
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let mut objs = Vec::new();
    for round in 0..6u64 {
        let tx = os.begin().unwrap();
        for i in 0..20u64 {
            let o = os.create(&tx, ObjectType::PlainData).unwrap();
            os.write(&tx, o, i * 7000, &pattern((i as usize + 1) * 9000, round * 100 + i)).unwrap();
            objs.push(o);
        }
        for &o in objs.iter().step_by(3) {
            let _ = os.truncate(&tx, o, round * 1000);
        }
        if round % 2 == 1 {
            let o = objs.remove(0);
            os.free(&tx, o).unwrap();
        }
        drop(tx);
        pool.sync().unwrap();
        let rep = pool.verify().unwrap();
        assert!(rep.errors.is_empty(), "round {}: {:#?}", round, rep.errors);
        assert!(rep.blocks > 0);
    }
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "after reopen: {:#?}", rep.errors);
}

/// Regression: freeing a multi-level object leaked its indirect blocks (the
/// sync of a freed object returned before rewriting them).
#[test]
fn freeing_a_deep_object_frees_its_indirect_blocks() {
    let d = devs(1, 256 << 20);
    let opts = CreateOptions { root_props: vec![("recordsize".into(), "4K".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    // 8 MiB of 4 KiB blocks: 2048 level-0 blocks under two L1s and an L2.
    os.write(&tx, o, 0, &pattern(8 << 20, 3)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert!(os.info(o).unwrap().nlevels >= 3);
    let tx = os.begin().unwrap();
    os.free(&tx, o).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "{:#?}", rep.errors);
}

/// Objects dropped from memory past `tarn_dnode_cache_objects` come back
/// from their dnodes intact, and can be changed again.
#[test]
fn evicted_objects_reload_from_their_dnodes() {
    let d = devs(1, 256 << 20);
    let mut opts = CreateOptions::default();
    opts.tunables.set("tarn_dnode_cache_objects", "10").unwrap();
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let mut objs = Vec::new();
    for i in 0..100u64 {
        let tx = os.begin().unwrap();
        let o = os.create(&tx, ObjectType::PlainData).unwrap();
        let data = pattern(500 + i as usize * 300, i);
        os.write(&tx, o, 0, &data).unwrap();
        objs.push((o, data));
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert!(os.loaded_objects() <= 10, "{} objects still in memory", os.loaded_objects());
    for (o, data) in objs.iter_mut() {
        assert_eq!(&os.read(*o, 0, data.len()).unwrap(), data);
        let tx = os.begin().unwrap();
        os.write(&tx, *o, 100, b"changed").unwrap();
        data[100..107].copy_from_slice(b"changed");
    }
    pool.sync().unwrap();
    for (o, data) in &objs {
        assert_eq!(&os.read(*o, 0, data.len()).unwrap(), data);
    }
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "{:#?}", rep.errors);
}

/// Regression: an object that became small enough to be stored inline by a
/// truncate that did not dirty its block 0 lost its data (the inline copy was
/// taken from dirty data only).
#[test]
fn truncate_into_inline_keeps_data() {
    let d = devs(1, 256 << 20);
    let opts = CreateOptions { root_props: vec![("recordsize".into(), "1K".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    let data = pattern(2000, 9);
    os.write(&tx, o, 0, &data).unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert!(!os.info(o).unwrap().inline);
    let tx = os.begin().unwrap();
    os.truncate(&tx, o, 1024).unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert!(os.info(o).unwrap().inline, "one 1 KiB block now fits inline");
    assert_eq!(os.read(o, 0, 4096).unwrap(), &data[..1024]);
    pool.export().unwrap();
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    assert_eq!(pool.root().read(o, 0, 4096).unwrap(), &data[..1024]);
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "{:#?}", rep.errors);
}

/// Regression: `copies=2` on a single device suspended the pool (the second
/// copy was required to be on another device).
#[test]
fn copies_two_on_one_device() {
    let d = devs(1, 256 << 20);
    let opts = CreateOptions { root_props: vec![("copies".into(), "2".into())], ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(300_000, 1)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let tree = os.tree(o, 100).unwrap();
    // Its indirect block is metadata: one copy more (redundant_metadata=all).
    let want = |level: u8| if level == 0 { 2 } else { 3 };
    assert!(tree.iter().all(|(l, _, bp)| bp.is_embedded() || bp.ndvas() == want(*l)), "data blocks have two copies, the indirect block three");
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "{:#?}", rep.errors);
}

/// Each sync leaves a record of what it wrote (the txg history `tarn bench`
/// reports and `pool txgs` will show).
#[test]
fn syncs_are_recorded() {
    let d = devs(1, 256 << 20);
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(1 << 20, 4)).unwrap();
    let txg = tx.txg();
    drop(tx);
    pool.sync().unwrap();
    let h = pool.txg_history();
    let rec = h.iter().find(|r| r.txg == txg).expect("the txg is recorded");
    assert!(rec.dirty_bytes >= 1 << 20, "{:?}", rec);
    assert!(rec.write_bytes >= 1 << 20, "{:?}", rec);
    assert!(rec.write_ops >= 1 && rec.sync_ms >= rec.write_ms && rec.write_ms >= rec.issue_ms, "{:?}", rec);
}

/// Regression: an indirect block pointer's fill must count the data blocks
/// beneath it; it was always 1 (the pointer was tested for being a hole
/// before it had an address, so the count was never stored).
#[test]
fn indirect_fill_counts_data_blocks() {
    let d = devs(1, 256 << 20);
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, o, 0, &pattern(160 * 131072, 5)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let tree = os.tree(o, 10).unwrap();
    let (level, _, top) = tree[0];
    assert_eq!(level, 1);
    assert_eq!(top.fill, 160, "{:?}", top);
}
