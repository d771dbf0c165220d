//! The object-layer additions the POSIX layer stands on: an object's bonus
//! (kept across syncs, imports and reloads, refused when it cannot fit) and
//! `punch` (whole blocks freed, partial ones zeroed, on inline, single-block
//! and multi-level objects).

mod common;

use common::{new_pool, pattern};
use tarn_engine::ErrorKind;
use tarn_ondisk::ObjectType;

#[test]
fn bonus_survives_sync_import_and_inline_data() {
    let (devs, pool) = new_pool(1, &[]);
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let a = os.create_with_room(&tx, ObjectType::PlainData, 6, 20).unwrap();
    os.set_bonus(&tx, a, &[7u8; 112]).unwrap();
    os.write(&tx, a, 0, &pattern(1024, 1)).unwrap();
    let b = os.create_with_slots(&tx, ObjectType::PlainData, 3).unwrap();
    // The next object takes the slots after b: its reservation cannot grow.
    os.create(&tx, ObjectType::PlainData).unwrap();
    let too_big = os.set_bonus(&tx, b, &[1u8; 200]).unwrap_err();
    assert_eq!(too_big.kind, ErrorKind::Invalid, "3 slots leave no room for a block pointer and 200 bytes");
    drop(tx);
    pool.sync().unwrap();
    assert!(os.info(a).unwrap().inline, "a 1 KiB object with a 112-byte bonus stays inline");
    drop(os);
    pool.export().unwrap();
    let pool = common::open(&devs).unwrap();
    let os = pool.root().clone();
    assert_eq!(os.bonus(a).unwrap(), vec![7u8; 112]);
    assert_eq!(os.read(a, 0, 2000).unwrap(), pattern(1024, 1));
    assert!(os.bonus(b).unwrap().is_empty());
    // Reloaded, the object still has the room it reserved: it can leave the
    // inline form with its bonus beside a block pointer.
    let tx = os.begin().unwrap();
    os.write(&tx, a, 0, &pattern(100_000, 2)).unwrap();
    os.set_bonus(&tx, a, &[9u8; 120]).unwrap();
    drop(tx);
    pool.sync().unwrap();
    assert!(!os.info(a).unwrap().inline);
    assert_eq!(os.bonus(a).unwrap(), vec![9u8; 120]);
    assert_eq!(os.read(a, 0, 200_000).unwrap(), pattern(100_000, 2));
}

#[test]
fn punch_frees_whole_blocks_and_zeroes_partial_ones() {
    let (_devs, pool) = new_pool(1, &[]);
    let os = pool.root().clone();
    for size in [2000usize, 100_000, 300 << 20] {
        let tx = os.begin().unwrap();
        let o = os.create(&tx, ObjectType::PlainData).unwrap();
        let step = 1 << 20;
        let mut model = vec![0u8; size];
        // Sparse for the large object: a few MiB written across 300 MiB.
        for off in (0..size).step_by(if size > step { 37 * step } else { size }) {
            let n = step.min(size - off);
            let d = pattern(n, off as u64);
            os.write(&tx, o, off as u64, &d).unwrap();
            model[off..off + n].copy_from_slice(&d);
        }
        os.truncate(&tx, o, size as u64).unwrap();
        drop(tx);
        pool.sync().unwrap();
        let before = os.info(o).unwrap().used_bytes;
        let tx = os.begin().unwrap();
        let (a, b) = (size / 7 + 3, size - size / 5);
        os.punch(&tx, o, a as u64, (b - a) as u64).unwrap();
        model[a..b].fill(0);
        os.punch(&tx, o, size as u64 + 10, 100).unwrap();
        drop(tx);
        pool.sync().unwrap();
        assert_eq!(os.info(o).unwrap().size, size as u64, "punch keeps the size");
        assert!(os.read(o, 0, size + 1).unwrap() == model, "content after punch, size {size}");
        if size > 100_000 {
            assert!(os.info(o).unwrap().used_bytes < before, "blocks freed");
        }
    }
    pool.verify().unwrap();
}
