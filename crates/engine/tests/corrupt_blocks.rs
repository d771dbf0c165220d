//! Bad blocks: damaged metadata and data blocks, bits flipped on the way from
//! the disk, and a damaged copy of a block stored twice.
//!
//! Every block pointer carries its block's checksum, so damage anywhere below
//! the uberblock is detected on read. What must follow: a read of damaged
//! data fails with a `Corrupt` error naming the object (never wrong data,
//! never a panic); undamaged data and objects still read; the checker lists
//! the damage; a block the import itself needs makes it refuse, or with -F
//! rewind to an older txg; and with `copies=2` the other copy serves the read.

mod common;

use std::sync::Arc;

use common::{corrupt, durable, first_difference, new_pool, open, open_rewinding, pattern, put, refused};
use tarn_engine::sys::{FaultConfig, FaultDevice, FaultZone};
use tarn_engine::{ErrorKind, Pool};
use tarn_ondisk::bp::{BlockPtr, Dva};
use tarn_ondisk::dnode::SLOTS_PER_BLOCK;

/// The block pointer at (level, index) of object `obj` (0: the dnode array).
fn block(pool: &Pool, obj: u64, level: u8, index: u64) -> BlockPtr {
    let tree = pool.root().tree(obj, 100_000).expect("tree");
    let found = tree.iter().find(|(l, i, _)| (*l, *i) == (level, index));
    found.unwrap_or_else(|| panic!("object {obj} has no block L{level} #{index}: {:?}", tree.iter().map(|(l, i, _)| (l, i)).collect::<Vec<_>>())).2
}

/// Every copy of a block.
fn every_copy(bp: &BlockPtr) -> Vec<Dva> {
    bp.dva.iter().filter(|d| !d.is_empty()).copied().collect()
}

/// Exports, damages the given copies, imports again (so no cache holds them).
fn damage_and_reopen(devs: &[Arc<FaultDevice>], pool: Pool, copies: &[Dva]) -> Pool {
    pool.export().expect("export");
    for dva in copies {
        corrupt(devs, dva);
    }
    open(devs).expect("import: the damage is below the pool's own metadata")
}

fn assert_corrupt(r: tarn_engine::Result<Vec<u8>>, names: &[&str]) {
    let e = r.expect_err("reading damaged data must fail");
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    for n in names {
        assert!(e.msg.contains(n), "the error should mention '{n}': {e}");
    }
}

fn assert_reads(pool: &Pool, obj: u64, off: u64, want: &[u8]) {
    let got = pool.root().read(obj, off, want.len()).unwrap_or_else(|e| panic!("object {obj} at {off}: {e}"));
    assert!(got == want, "object {obj} at {off}: {}", first_difference(&got, want));
}

fn verify_errors(pool: &Pool) -> Vec<String> {
    pool.verify().expect("verify runs on a damaged pool").errors
}

/// An object with records of 4 KiB and data at 0 and at 5 MiB has two level-1
/// indirect blocks under a level-2 one. Damaging the second L1 (both its
/// copies) makes only the data under it unreadable.
#[test]
fn damaged_indirect_block_fails_reads_under_it_naming_the_object() {
    let (devs, pool) = new_pool(1, &[("recordsize", "4K")]);
    let (low, high) = (pattern(64 << 10, 1), pattern(64 << 10, 2));
    let big = put(&pool, &low);
    let tx = pool.root().begin().unwrap();
    pool.root().write(&tx, big, 5 << 20, &high).unwrap();
    drop(tx);
    let other = put(&pool, &pattern(100 << 10, 3));
    pool.sync().unwrap();
    assert_eq!(pool.root().info(big).unwrap().nlevels, 3);
    let l1 = block(&pool, big, 1, 1);
    // Every copy: metadata has two (redundant_metadata=all).
    let pool = damage_and_reopen(&devs, pool, &every_copy(&l1));
    assert_corrupt(pool.root().read(big, 5 << 20, 100), &[&format!("object {big}"), "checksum mismatch"]);
    assert_reads(&pool, big, 0, &low);
    assert_reads(&pool, other, 0, &pattern(100 << 10, 3));
    let errors = verify_errors(&pool);
    assert!(errors.iter().any(|e| e.contains(&format!("object {big} L1 #1"))), "verify names the block: {errors:?}");
}

/// Dnode blocks hold 256 slots; objects of 3000 bytes live inline in 48 of
/// them, five to a block. Damaging the first dnode block (both its copies)
/// makes exactly its objects unreadable.
#[test]
fn damaged_dnode_block_fails_its_objects_only() {
    let (devs, pool) = new_pool(1, &[]);
    let objs: Vec<u64> = (0..12).map(|i| put(&pool, &pattern(3000, 10 + i))).collect();
    pool.sync().unwrap();
    let dnode_block = block(&pool, 0, 0, 0);
    let pool = damage_and_reopen(&devs, pool, &every_copy(&dnode_block));
    let in_first = |o: u64| o < SLOTS_PER_BLOCK as u64;
    assert!(objs.iter().any(|&o| in_first(o)) && objs.iter().any(|&o| !in_first(o)));
    for (i, &o) in objs.iter().enumerate() {
        if in_first(o) {
            assert_corrupt(pool.root().read(o, 0, 10), &[&format!("object {o}")]);
        } else {
            assert_reads(&pool, o, 0, &pattern(3000, 10 + i as u64));
        }
    }
    assert!(verify_errors(&pool).iter().any(|e| e.contains("dnode array")));
}

/// The meta object set's root is needed to import at all: with the newest
/// one damaged, import refuses, saying what a rewind to the previous txg
/// would discard; with `rewind` (import -F) it opens there, which is intact.
/// Regression (issue 11 item 3): import used to rewind silently, exit 0
/// and say nothing.
#[test]
fn damaged_mos_root_import_refuses_then_rewinds_to_the_previous_txg() {
    let (devs, pool) = new_pool(2, &[]);
    let kept = put(&pool, &pattern(50_000, 20));
    pool.sync().unwrap();
    let prev_txg = pool.uberblock().txg;
    let lost = put(&pool, &pattern(50_000, 21));
    pool.sync().unwrap();
    let last_txg = pool.uberblock().txg;
    let mos = pool.uberblock().mos;
    let images = durable(&devs);
    drop(pool);
    for dva in mos.dva.iter().filter(|d| !d.is_empty()) {
        corrupt(&images, dva);
    }
    let e = refused(open(&images), "the newest MOS root is damaged");
    assert_eq!(e.kind, ErrorKind::Corrupt);
    for want in ["Recovery is possible", &format!("txg {}", prev_txg), &format!("txg {}", last_txg), "tarn pool import -F tank"] {
        assert!(e.msg.contains(want), "the refusal should say '{want}': {e}");
    }
    let pool = open_rewinding(&images).expect("import -F falls back past the damaged root");
    assert_eq!(pool.uberblock().txg, prev_txg);
    let r = pool.rewound().expect("the pool says it rewound");
    assert_eq!((r.txg, r.newest_txg), (prev_txg, last_txg));
    assert_reads(&pool, kept, 0, &pattern(50_000, 20));
    assert_eq!(pool.root().read(lost, 0, 1).expect_err("from the lost txg").kind, ErrorKind::NotFound);
    assert!(verify_errors(&pool).is_empty());
}

/// The space log rebuilds the allocator at import, so it is needed too. It
/// is kept in three copies: one damaged copy costs nothing; with every copy
/// of the newest log block damaged, import refuses without -F and with it
/// rewinds to the previous txg, whose log chain ends one block earlier.
#[test]
fn damaged_space_log_import_refuses_then_rewinds_to_the_previous_txg() {
    let (devs, pool) = new_pool(1, &[]);
    let kept = put(&pool, &pattern(50_000, 22));
    pool.sync().unwrap();
    let prev_txg = pool.uberblock().txg;
    put(&pool, &pattern(50_000, 23));
    pool.sync().unwrap();
    let log = pool.uberblock().space_log;
    assert!(!log.is_hole(), "the last txg allocated, so it wrote a log block");
    let last_txg = pool.uberblock().txg;
    let images = durable(&devs);
    drop(pool);
    assert_eq!(log.ndvas(), 3, "space log blocks have three copies");
    corrupt(&images, &log.dva[0]);
    let healed = open(&images).expect("the second copy of the log block serves");
    assert_eq!(healed.uberblock().txg, last_txg);
    drop(healed);
    let images = durable(&devs);
    for dva in log.dva.iter().filter(|d| !d.is_empty()) {
        corrupt(&images, dva);
    }
    let e = refused(open(&images), "the newest space log block is damaged");
    assert!(e.msg.contains("import -F"), "{e}");
    let pool = open_rewinding(&images).expect("import -F falls back past the damaged log");
    assert_eq!(pool.uberblock().txg, prev_txg);
    assert_reads(&pool, kept, 0, &pattern(50_000, 22));
    assert!(verify_errors(&pool).is_empty());
}

/// A damaged data block: its range fails with a checksum error counted on
/// its device, the rest of the object reads, and rewriting the whole block
/// repairs the object.
#[test]
fn damaged_data_block_fails_its_range_only() {
    let (devs, pool) = new_pool(1, &[]);
    let data = pattern(512 << 10, 30);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    let bp = block(&pool, obj, 0, 2);
    let pool = damage_and_reopen(&devs, pool, &[bp.dva[0]]);
    let rec = 128 << 10;
    assert_corrupt(pool.root().read(obj, 2 * rec + 5, 10), &[&format!("block 2 of object {obj}"), "checksum mismatch"]);
    assert_reads(&pool, obj, 0, &data[..2 * rec as usize]);
    assert_reads(&pool, obj, 3 * rec, &data[3 * rec as usize..]);
    assert!(pool.status().vdevs[0].checksum_errors > 0, "the checksum error is counted");
    assert!(verify_errors(&pool).iter().any(|e| e.contains(&format!("object {obj} L0 #2"))));
    let tx = pool.root().begin().unwrap();
    let partial = pool.root().write(&tx, obj, 2 * rec + 7, b"x");
    assert_eq!(partial.expect_err("a partial write must read the damaged block").kind, ErrorKind::Corrupt);
    pool.root().write(&tx, obj, 2 * rec, &data[2 * rec as usize..3 * rec as usize]).expect("a whole-block write needs no read");
    drop(tx);
    pool.sync().unwrap();
    assert_reads(&pool, obj, 0, &data);
    assert!(verify_errors(&pool).is_empty(), "rewriting the block repaired the object");
}

/// Bits flipped between the disk and memory (the stored data is intact):
/// the read fails its checksum instead of returning the flipped data, and
/// once the path is clean again the same block reads correctly.
#[test]
fn bit_flipped_on_read_is_a_checksum_error_not_wrong_data() {
    let (devs, pool) = new_pool(1, &[]);
    let data = pattern(256 << 10, 40);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    let dva = block(&pool, obj, 0, 1).dva[0];
    let pool = damage_and_reopen(&devs, pool, &[]);
    let zone = FaultZone { start: dva.offset, end: dva.offset + dva.asize, read_bitflip_rate: 1.0, ..Default::default() };
    devs[0].set_config(FaultConfig { zones: vec![zone], ..Default::default() });
    assert_corrupt(pool.root().read(obj, 128 << 10, 100), &[&format!("object {obj}"), "checksum mismatch"]);
    assert_reads(&pool, obj, 0, &data[..128 << 10]);
    assert!(devs[0].stats().injected_read_bitflips > 0);
    devs[0].set_config(FaultConfig::default());
    assert_reads(&pool, obj, 0, &data);
}

/// With copies=2 on two devices, each block has a copy on each. One damaged
/// copy: the read is served by the other and the error is counted against
/// the damaged device. Both damaged: the read fails.
#[test]
fn second_copy_serves_reads_when_one_is_damaged() {
    let (devs, pool) = new_pool(2, &[("copies", "2")]);
    let data = pattern(300 << 10, 50);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    let bp = block(&pool, obj, 0, 1);
    let (first, second) = (bp.dva[0], bp.dva[1]);
    assert!(!second.is_empty() && first.vdev != second.vdev, "two copies on two devices: {:?}", bp.dva);
    let pool = damage_and_reopen(&devs, pool, &[first]);
    assert_reads(&pool, obj, 0, &data);
    let st = pool.status();
    assert!(st.vdevs[first.vdev as usize].checksum_errors > 0, "counted on the damaged device: {:?}", st.vdevs);
    assert_eq!(st.vdevs[second.vdev as usize].checksum_errors, 0);
    let pool = damage_and_reopen(&devs, pool, &[second]);
    assert_corrupt(pool.root().read(obj, 128 << 10, 10), &[&format!("object {obj}")]);
}

/// Every block a pool references, as (what, pointer): the uberblock's
/// roots, both object sets' dnode arrays and every object's tree.
fn all_blocks(pool: &Pool, objs: &[u64]) -> Vec<(String, BlockPtr)> {
    let ub = pool.uberblock();
    let mut out = vec![("MOS root".to_string(), ub.mos), ("space log".into(), ub.space_log), ("space checkpoint".into(), ub.space_cp)];
    out.push(("dataset root".into(), pool.root().root_bp()));
    for (set, os) in [("MOS", pool.mos()), ("dataset", pool.root())] {
        let ids: Vec<u64> = if set == "MOS" { vec![0, 1, 4] } else { std::iter::once(0).chain(objs.iter().copied()).collect() };
        for id in ids {
            for (l, i, bp) in os.tree(id, 100_000).expect("tree") {
                out.push((format!("{set} object {id} L{l} #{i}"), bp));
            }
        }
    }
    out.retain(|(_, bp)| !bp.is_hole() && !bp.is_embedded());
    out
}

/// Damage one random block anywhere and read everything: each read returns
/// the right data or an error — never other data — and nothing panics.
#[test]
fn random_damage_never_returns_wrong_data() {
    for seed in 0..40u64 {
        let mut rng = common::Rng::new(seed);
        let (devs, pool) = new_pool(1, &[("recordsize", if seed % 2 == 0 { "4K" } else { "128K" })]);
        let datas: Vec<Vec<u8>> = (0..6).map(|i| pattern(rng.range(1, 600_000) as usize, seed * 10 + i)).collect();
        let objs: Vec<u64> = datas.iter().map(|d| put(&pool, d)).collect();
        pool.sync().unwrap();
        let blocks = all_blocks(&pool, &objs);
        let (what, bp) = blocks[rng.below(blocks.len() as u64) as usize].clone();
        pool.export().unwrap();
        corrupt(&devs, &bp.dva[0]);
        let pool = match open(&devs) {
            Ok(p) => p,
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Corrupt, "seed {seed}, damaged {what}: {e}");
                continue;
            }
        };
        for (&o, want) in objs.iter().zip(&datas) {
            match pool.root().read(o, 0, want.len()) {
                Ok(got) => assert!(got == *want, "seed {seed}, damaged {what}: object {o} returned wrong data"),
                Err(e) => assert!(matches!(e.kind, ErrorKind::Corrupt | ErrorKind::NotFound), "seed {seed}, damaged {what}: {e}"),
            }
        }
        let _ = verify_errors(&pool);
    }
}
