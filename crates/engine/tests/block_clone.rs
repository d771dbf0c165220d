//! Block cloning: `Objset::clone_range` shares whole blocks through the
//! block reference table instead of copying them. The risks it pins: a
//! shared block freed while another pointer still needs it (lost data), a
//! reference never given back (leaked space), dead lists and snapshots
//! misjudging a cloned pointer's birth, a clone racing a free of its source
//! in the same txg, and a table that does not survive export and import.
//! After every step: the checker is clean (it counts every pointer to every
//! block against the table), the dataset invariants hold, and the pool's
//! allocation is the datasets' used plus the MOS and the space log, less
//! what cloning saves.

mod common;

use std::sync::Arc;

use common::{as_dyn, open, pattern, small_tunables};
use tarn_engine::object::CloneProgress;
use tarn_engine::sys::FaultDevice;
use tarn_engine::{ErrorKind, Objset, Pool, Tx};
use tarn_ondisk::brt::{decode_bucket, encode_bucket, BrtHeader, BRT_BLOCK_SIZE};
use tarn_ondisk::uberblock::FEATURE_BLOCK_CLONING;
use tarn_ondisk::ObjectType;

const REC: u64 = 128 << 10;

fn pool_with(props: &[(&str, &str)]) -> (Vec<Arc<FaultDevice>>, Pool) {
    common::pool_with(1, 256 << 20, 7, props)
}

fn new_pool() -> (Vec<Arc<FaultDevice>>, Pool) {
    pool_with(&[("compression", "off")])
}

/// A new pool, its root object set, and the data bytes it holds empty.
fn start() -> (Vec<Arc<FaultDevice>>, Pool, Arc<Objset>, u64) {
    let (devs, pool) = new_pool();
    let os = pool.root().clone();
    let base = check(&pool, "empty");
    (devs, pool, os, base)
}

fn num(pool: &Pool, name: &str, prop: &str) -> u64 {
    let v = pool.datasets().get(name, prop).unwrap_or_else(|e| panic!("get {name} {prop}: {e}")).value;
    v.parse().unwrap_or_else(|_| panic!("{name} {prop} = {v}"))
}

/// An object holding `data`, synced.
fn put(pool: &Pool, os: &Objset, data: &[u8]) -> u64 {
    let tx = os.begin().expect("begin");
    let obj = os.create(&tx, ObjectType::PlainData).expect("create");
    os.write(&tx, obj, 0, data).expect("write");
    drop(tx);
    pool.sync().expect("sync");
    obj
}

fn free(os: &Objset, obj: u64) {
    let tx = os.begin().expect("begin");
    os.free(&tx, obj).expect("free");
}

fn overwrite(os: &Objset, obj: u64, off: u64, data: &[u8]) {
    let tx = os.begin().expect("begin");
    os.write(&tx, obj, off, data).expect("write");
}

/// A new object given a clone of `n` records of `src`, then `then`, all in
/// one transaction (so before the clone's sync).
fn clone_then(os: &Objset, src: u64, n: u64, then: impl FnOnce(&Tx, u64)) -> u64 {
    let dst = empty(os);
    let tx = os.begin().expect("begin");
    os.clone_range(&tx, dst, 0, os, src, 0, n * REC).expect("clone_range");
    then(&tx, dst);
    dst
}

fn empty(os: &Objset) -> u64 {
    let tx = os.begin().expect("begin");
    os.create(&tx, ObjectType::PlainData).expect("create")
}

fn read_all(os: &Objset, obj: u64) -> Vec<u8> {
    let size = os.info(obj).expect("info").size;
    os.read(obj, 0, size as usize).expect("read")
}

/// Clones the whole range, one call per transaction; the total progress.
fn clone(dst_os: &Objset, dst: u64, dst_off: u64, src_os: &Objset, src: u64, src_off: u64, len: u64) -> CloneProgress {
    let mut total = CloneProgress::default();
    while total.done < len {
        let tx = dst_os.begin().expect("begin");
        let p = dst_os.clone_range(&tx, dst, dst_off + total.done, src_os, src, src_off + total.done, len - total.done).expect("clone_range");
        assert!(p.done > 0, "no progress at {}", total.done);
        total.done += p.done;
        total.cloned += p.cloned;
    }
    total
}

/// Nothing is left: the data bytes are those of the empty pool.
fn all_freed(pool: &Pool, base: u64) {
    assert_eq!(check(pool, "all freed"), base, "every byte came back");
    assert_eq!(pool.brt_stats().entries, 0);
}

/// Syncs and checks everything; returns the data bytes the allocator holds
/// (allocated less MOS and space blocks).
fn check(pool: &Pool, ctx: &str) -> u64 {
    let rep = common::verified(pool, ctx);
    let used = num(pool, "tank", "used");
    let b = pool.brt_stats();
    assert_eq!((b.entries, b.used_bytes, b.saved_bytes), (rep.brt_entries, rep.brt_used_bytes, rep.brt_saved_bytes), "{ctx}: table in memory vs on disk");
    assert_eq!(
        rep.allocated_bytes + rep.brt_saved_bytes,
        used + rep.mos_bytes + rep.space_bytes,
        "{ctx}: allocated {} + saved {} vs used {used} + MOS {} + space {}",
        rep.allocated_bytes,
        rep.brt_saved_bytes,
        rep.mos_bytes,
        rep.space_bytes
    );
    rep.allocated_bytes - rep.mos_bytes - rep.space_bytes
}

#[test]
fn a_clone_shares_blocks_and_every_free_gives_its_space_back() {
    let (_d, pool, os, base) = start();
    let data = pattern(16 * REC as usize, 1);
    let a = put(&pool, &os, &data);
    let written = check(&pool, "written") - base;
    assert!(written >= 16 * REC, "{written}");

    let b = empty(&os);
    let p = clone(&os, b, 0, &os, a, 0, 16 * REC);
    assert_eq!(p.cloned, 16 * REC, "every block shared");
    assert!(read_all(&os, b) == data, "the clone reads as the source before its sync");
    let after = check(&pool, "cloned");
    assert!(after - base - written < REC, "a clone copies no data: {} more bytes", after - base - written);
    let s = pool.brt_stats();
    assert_eq!((s.entries, s.used_bytes, s.saved_bytes), (16, 16 * REC, 16 * REC));
    assert!(read_all(&os, b) == data, "the clone reads as the source after its sync");
    assert_eq!(num(&pool, "tank", "referenced"), num(&pool, "tank", "used"));
    let ratio = pool.properties().into_iter().find(|p| p.0 == "bcloneratio").expect("bcloneratio").1;
    assert_eq!(ratio, "2.00x");

    // A snapshot holds the clone; overwriting half of it puts those
    // pointers on the dead list (born at the clone, before the snapshot).
    pool.datasets().snapshot("tank@s1").expect("snapshot");
    overwrite(&os, b, 0, &pattern(8 * REC as usize, 2));
    check(&pool, "clone overwritten under a snapshot");
    assert_eq!(pool.brt_stats().entries, 16, "the snapshot still holds every cloned pointer");
    // The source too: its blocks are shared with the snapshot.
    overwrite(&os, a, 4 * REC, &pattern(4 * REC as usize, 3));
    check(&pool, "source overwritten under a snapshot");

    pool.datasets().destroy("tank@s1", false).expect("destroy snapshot");
    check(&pool, "snapshot destroyed");
    // a keeps its blocks 0..4 and 8..16, b its blocks 8..16: only 8..16
    // are still shared.
    assert_eq!(pool.brt_stats().entries, 8);

    free(&os, a);
    check(&pool, "source freed");
    assert_eq!(pool.brt_stats().entries, 0, "b alone holds the rest");
    assert!(read_all(&os, b)[8 * REC as usize..] == data[8 * REC as usize..], "the clone outlives its source");
    free(&os, b);
    assert_eq!(check(&pool, "clone freed"), base, "every byte came back");
}

#[test]
fn clones_across_datasets_survive_either_destroy() {
    let (_d, pool) = new_pool();
    let base = check(&pool, "empty");
    let ds = pool.datasets();
    ds.create("tank/a", &[], false).unwrap();
    ds.create("tank/b", &[], false).unwrap();
    let (osa, osb) = (ds.objset("tank/a").unwrap(), ds.objset("tank/b").unwrap());
    let data = pattern(8 * REC as usize, 4);
    let a = put(&pool, &osa, &data);
    let b = empty(&osb);
    assert_eq!(clone(&osb, b, 0, &osa, a, 0, 8 * REC).cloned, 8 * REC);
    check(&pool, "cloned across datasets");
    assert_eq!(num(&pool, "tank/a", "referenced"), num(&pool, "tank/b", "referenced"), "each dataset counts the shared blocks");
    // A snapshot of the destination, then a rollback that drops a later
    // clone of the same blocks.
    ds.snapshot("tank/b@s").unwrap();
    let c = empty(&osb);
    clone(&osb, c, 0, &osa, a, 0, 8 * REC);
    check(&pool, "second clone");
    assert_eq!(pool.brt_stats().saved_bytes, 16 * REC);
    ds.rollback("tank/b@s").unwrap();
    check(&pool, "rolled back past the second clone");
    assert_eq!(pool.brt_stats().saved_bytes, 8 * REC);
    ds.destroy("tank/a", false).unwrap();
    check(&pool, "source dataset destroyed");
    assert!(read_all(&osb, b) == data, "the destination keeps the data");
    ds.destroy("tank/b", true).unwrap();
    assert_eq!(check(&pool, "both destroyed"), base);
    assert_eq!(pool.brt_stats().entries, 0);
}

#[test]
fn a_clone_from_a_snapshot_and_a_dataset_clone_of_it() {
    let (_d, pool) = new_pool();
    let base = check(&pool, "empty");
    let ds = pool.datasets();
    let os = pool.root().clone();
    let data = pattern(4 * REC as usize, 5);
    let a = put(&pool, &os, &data);
    ds.snapshot("tank@s").unwrap();
    free(&os, a);
    // Recover the file from the snapshot without copying it (OpenZFS's use case).
    let snap = ds.objset("tank@s").unwrap();
    let b = empty(&os);
    assert_eq!(clone(&os, b, 0, &snap, a, 0, 4 * REC).cloned, 4 * REC);
    check(&pool, "restored from a snapshot");
    ds.clone_snapshot("tank@s", "tank/c", &[]).unwrap();
    let osc = ds.objset("tank/c").unwrap();
    let d = empty(&osc);
    clone(&osc, d, REC, &snap, a, 0, 2 * REC);
    check(&pool, "cloned into a dataset clone");
    ds.destroy("tank/c", false).unwrap();
    ds.destroy("tank@s", false).unwrap();
    check(&pool, "snapshot gone");
    assert!(read_all(&os, b) == data);
    free(&os, b);
    all_freed(&pool, base);
}

#[test]
fn frees_in_the_txg_of_the_clone() {
    let (_d, pool, os, base) = start();
    let data = pattern(4 * REC as usize, 6);
    let a = put(&pool, &os, &data);
    let b = empty(&os);
    // Clone, then overwrite the source in the same txg (no sync between):
    // the source's free must find the reference applied first.
    let tx = os.begin().unwrap();
    os.clone_range(&tx, b, 0, &os, a, 0, 4 * REC).unwrap();
    os.write(&tx, a, 0, &pattern(4 * REC as usize, 7)).unwrap();
    drop(tx);
    check(&pool, "source rewritten with its clone");
    assert!(read_all(&os, b) == data);
    assert_eq!(pool.brt_stats().entries, 0, "the clone holds the old blocks alone");
    // Clone, then truncate the destination in the same txg: withdrawn.
    let c = clone_then(&os, b, 4, |tx, c| os.truncate(tx, c, REC).unwrap());
    check(&pool, "clone truncated before its sync");
    assert_eq!(pool.brt_stats().entries, 1);
    // Clone, then free the destination in the same txg.
    clone_then(&os, b, 4, |tx, e| os.free(tx, e).unwrap());
    check(&pool, "clone freed before its sync");
    assert_eq!(pool.brt_stats().entries, 1);
    // Clone, then a partial write into a cloned block: it becomes data.
    let f = clone_then(&os, b, 2, |tx, f| os.write(tx, f, 100, b"patched").unwrap());
    let mut want = data[..2 * REC as usize].to_vec();
    want[100..107].copy_from_slice(b"patched");
    assert!(read_all(&os, f) == want);
    check(&pool, "cloned block patched before its sync");
    assert_eq!(pool.brt_stats().entries, 2, "b's block 0 (c) and block 1 (f)");
    // A clone of a clone not yet synced shares the same block.
    let g = empty(&os);
    let h = empty(&os);
    let tx = os.begin().unwrap();
    os.clone_range(&tx, g, 0, &os, b, 0, 4 * REC).unwrap();
    os.clone_range(&tx, h, 0, &os, g, 0, 4 * REC).unwrap();
    drop(tx);
    check(&pool, "a clone of a clone in one txg");
    assert!(read_all(&os, h) == data);
    for o in [b, c, f, g, h] {
        free(&os, o);
    }
    free(&os, a);
    all_freed(&pool, base);
}

#[test]
fn a_rollback_in_the_txg_of_a_clone_drops_it() {
    let (_d, pool, os, base) = start();
    let a = put(&pool, &os, &pattern(4 * REC as usize, 8));
    pool.datasets().snapshot("tank@s").unwrap();
    let b = empty(&os);
    let tx = os.begin().unwrap();
    os.clone_range(&tx, b, 0, &os, a, 0, 4 * REC).unwrap();
    // Queued for the open txg, which also holds the clone: the rollback
    // drops the clone's record after its reference was applied.
    let sub = pool.datasets().submit(vec![tarn_engine::dataset::Op::Rollback { snapshot: "tank@s".into() }]).unwrap();
    assert_eq!(sub.txg(), tx.txg(), "one txg for both");
    drop(tx);
    sub.wait().unwrap().into_iter().for_each(|r| r.unwrap());
    check(&pool, "rolled back in the clone's txg");
    assert_eq!(pool.brt_stats().entries, 0);
    assert_eq!(os.info(b).map_err(|e| e.kind).unwrap_err(), ErrorKind::NotFound);
    pool.datasets().destroy("tank@s", false).unwrap();
    free(&os, a);
    all_freed(&pool, base);
}

#[test]
fn what_cannot_be_cloned_is_copied() {
    let (_d, pool) = pool_with(&[("compression", "off"), ("recordsize", "16K")]);
    let os = pool.root().clone();
    let ds = pool.datasets();
    ds.create("tank/big", &[("recordsize", "128K")], false).unwrap();
    let big = ds.objset("tank/big").unwrap();
    let rs = 16 << 10;
    let data = pattern(8 * rs as usize, 9);
    let a = put(&pool, &os, &data);
    let expect = |dst_os: &Objset, dst: u64, dst_off: u64, off: u64, len: u64, cloned: u64, what: &str| {
        let p = clone(dst_os, dst, dst_off, &os, a, off, len);
        assert_eq!((p.done, p.cloned), (len, cloned), "{what}");
        let got = dst_os.read(dst, dst_off, len as usize).unwrap();
        assert!(got == data[off as usize..(off + len) as usize], "{what}: content");
    };
    let b = empty(&os);
    expect(&os, b, 0, 0, 8 * rs, 8 * rs, "aligned");
    let c = empty(&os);
    expect(&os, c, 1, 0, 4 * rs, 0, "destination misaligned");
    let d = empty(&os);
    expect(&os, d, 100, 100, 4 * rs, 3 * rs, "head and tail copied, the middle shared");
    // A destination whose single block is another size than the source's.
    let e = put(&pool, &big, &pattern(5000, 10));
    expect(&big, e, 0, 0, 2 * rs, 0, "other block size");
    // The source dirty in the open txg: copied.
    let tx = os.begin().unwrap();
    os.write(&tx, a, rs, &pattern(rs as usize, 11)).unwrap();
    let f = empty(&os);
    let p = os.clone_range(&tx, f, 0, &os, a, 0, 4 * rs).unwrap();
    assert_eq!((p.done, p.cloned), (rs, rs), "the clean first block is shared, the call stops before the dirty one");
    let p = os.clone_range(&tx, f, rs, &os, a, rs, 3 * rs).unwrap();
    assert_eq!(p.cloned, 0, "the dirty block is copied");
    drop(tx);
    // Holes stay holes.
    let g = put(&pool, &os, &[]);
    let tx = os.begin().unwrap();
    os.truncate(&tx, g, 4 * rs).unwrap();
    os.write(&tx, g, 3 * rs, &pattern(rs as usize, 12)).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let h = empty(&os);
    assert_eq!(clone(&os, h, 0, &os, g, 0, 4 * rs).cloned, 4 * rs);
    pool.sync().unwrap();
    let tree = os.tree(h, 100).unwrap();
    assert_eq!(tree.iter().filter(|(l, _, bp)| *l == 0 && !bp.is_hole()).count(), 1, "three holes and one block");
    assert!(read_all(&os, h) == read_all(&os, g));
    // Errors: overlapping ranges of one object, another pool's object set.
    let tx = os.begin().unwrap();
    assert_eq!(os.clone_range(&tx, a, rs, &os, a, 0, 2 * rs).unwrap_err().kind, ErrorKind::Invalid);
    drop(tx);
    let (_d2, other) = new_pool();
    let tx = other.root().begin().unwrap();
    let o = other.root().create(&tx, ObjectType::PlainData).unwrap();
    assert_eq!(other.root().clone_range(&tx, o, 0, &os, a, 0, rs).unwrap_err().kind, ErrorKind::Invalid);
    drop(tx);
    check(&pool, "after the fallbacks");
}

#[test]
fn the_table_grows_and_persists_and_marks_the_pool() {
    let (devs, pool) = pool_with(&[("compression", "off"), ("recordsize", "4K")]);
    let os = pool.root().clone();
    let data = pattern(3000 * 4096, 13);
    let a = put(&pool, &os, &data);
    assert_eq!(pool.config().features_compat & FEATURE_BLOCK_CLONING, 0, "no table, no feature");
    let b = empty(&os);
    assert_eq!(clone(&os, b, 0, &os, a, 0, data.len() as u64).cloned, data.len() as u64);
    check(&pool, "3000 entries");
    let obj = pool.core().brt.object();
    let header = BrtHeader::decode(&pool.mos().read(obj, 0, BRT_BLOCK_SIZE).unwrap()).unwrap();
    assert_eq!(header.entries, 3000);
    assert!(header.nbuckets >= 32, "the table doubled: {} buckets", header.nbuckets);
    assert_ne!(pool.config().features_compat & FEATURE_BLOCK_CLONING, 0, "the labels say the pool clones");
    assert_ne!(pool.uberblock().features_active & FEATURE_BLOCK_CLONING, 0);
    pool.export().unwrap();
    let pool = open(&devs).expect("import");
    assert_eq!(pool.brt_stats().entries, 3000, "the table survives an import");
    check(&pool, "imported");
    let os = pool.root().clone();
    assert!(read_all(&os, b) == data);
    free(&os, a);
    check(&pool, "source freed after import");
    assert_eq!(pool.brt_stats().entries, 0);
}

/// A tarn that does not know a feature bit refuses to write the pool: the
/// mechanism that keeps a tarn without block cloning off a pool with a table.
#[test]
fn an_unknown_feature_bit_refuses_a_writer_but_not_a_reader() {
    let (devs, pool) = new_pool();
    let mut cfg = pool.config();
    pool.export().unwrap();
    cfg.features_compat |= 1 << 40;
    cfg.config_txg += 1;
    for d in &devs {
        let mut c = cfg.clone();
        c.device_guid = c.tree.children[0].guid;
        c.top_guid = c.device_guid;
        tarn_engine::pool::label::write_config_all(d.as_ref(), &c).unwrap();
    }
    let e = common::refused(open(&devs), "unknown feature");
    assert!(e.msg.contains("features this tarn does not support"), "{e}");
    let ro = tarn_engine::OpenOptions { readonly: true, tunables: small_tunables(), ..Default::default() };
    Pool::open_on(as_dyn(&devs), vec![], &ro).expect("a reader may open it");
}

/// The checker compares every block's pointers with the table: an entry
/// that counts one reference too many (a leak) or too few (a free would
/// lose data) is reported.
#[test]
fn the_checker_catches_a_table_that_disagrees_with_the_trees() {
    for delta in [1i64, -1] {
        let (_d, pool) = new_pool();
        let os = pool.root().clone();
        let a = put(&pool, &os, &pattern(2 * REC as usize, 14));
        let b = empty(&os);
        clone(&os, b, 0, &os, a, 0, 2 * REC);
        check(&pool, "cloned");
        let obj = pool.core().brt.object();
        let mos = pool.mos();
        let header = BrtHeader::decode(&mos.read(obj, 0, BRT_BLOCK_SIZE).unwrap()).unwrap();
        // Find a bucket with an entry and change its refcount.
        let (off, mut entries) = (0..header.nbuckets)
            .map(|i| ((1 + i) * BRT_BLOCK_SIZE as u64, decode_bucket(&mos.read(obj, (1 + i) * BRT_BLOCK_SIZE as u64, BRT_BLOCK_SIZE).unwrap()).unwrap()))
            .find(|(_, es)| !es.is_empty())
            .expect("an entry");
        let mut h = header;
        if delta > 0 {
            entries[0].refcount += 1;
            h.saved_bytes += entries[0].asize;
        } else {
            h.saved_bytes -= entries[0].asize;
            h.used_bytes -= entries[0].asize;
            h.entries -= 1;
            entries.remove(0);
        }
        let tx = mos.begin().unwrap();
        mos.write(&tx, obj, off, &encode_bucket(&entries)).unwrap();
        mos.write(&tx, obj, 0, &h.encode()).unwrap();
        drop(tx);
        pool.sync().unwrap();
        let rep = pool.verify().unwrap();
        let want = if delta > 0 { "its space would leak" } else { "a free would lose data" };
        assert!(rep.errors.iter().any(|e| e.contains(want)), "delta {delta}: {:#?}", rep.errors);
    }
}

/// A clone whose source the previous txg's sync frees: the clone (txg
/// T+1) reads the source's pointer while a rollback of the source's
/// dataset waits in txg T, which then frees that block. At the sync of T+1
/// the block is no longer allocated, so the table refuses the clone and the
/// destination gets a copy of the data (still on disk: frees are deferred).
#[test]
fn a_clone_racing_the_free_of_its_source_gets_a_copy() {
    let (_d, pool, _os, base) = start();
    let ds = pool.datasets();
    ds.create("tank/a", &[], false).unwrap();
    ds.create("tank/b", &[], false).unwrap();
    let (osa, osb) = (ds.objset("tank/a").unwrap(), ds.objset("tank/b").unwrap());
    let a = put(&pool, &osa, &pattern(4 * REC as usize, 20));
    ds.snapshot("tank/a@s").unwrap();
    let data = pattern(4 * REC as usize, 21);
    overwrite(&osa, a, 0, &data);
    pool.sync().unwrap();
    let b = empty(&osb);
    pool.sync().unwrap();
    std::thread::scope(|sc| {
        // Hold txg T open, queue the rollback in it, and make the sync
        // thread start on T (it waits for this hold) so that T+1 opens.
        let hold = osa.begin().unwrap();
        let t = hold.txg();
        let rollback = ds.submit(vec![tarn_engine::dataset::Op::Rollback { snapshot: "tank/a@s".into() }]).unwrap();
        assert_eq!(rollback.txg(), t);
        let syncer = sc.spawn(|| pool.sync());
        let tx = loop {
            let tx = osb.begin().unwrap();
            if tx.txg() > t {
                break tx;
            }
            drop(tx);
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(tx.txg(), t + 1);
        let p = osb.clone_range(&tx, b, 0, &osa, a, 0, 4 * REC).unwrap();
        assert_eq!(p.cloned, 4 * REC, "the pointers were read before the rollback ran");
        drop(hold);
        rollback.wait().unwrap().into_iter().for_each(|r| r.unwrap());
        drop(tx);
        syncer.join().unwrap().unwrap();
    });
    check(&pool, "a clone of freed blocks");
    let s = pool.brt_stats();
    assert_eq!((s.refused_blocks, s.entries), (4, 0), "refused, copied");
    assert!(read_all(&osb, b) == data, "the copy holds what the clone read");
    ds.destroy("tank/a", true).unwrap();
    ds.destroy("tank/b", false).unwrap();
    all_freed(&pool, base);
}
