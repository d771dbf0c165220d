//! Import opens the newest valid uberblock's txg. When that txg cannot be
//! opened, import refuses and says what a rewind would discard (the txgs and
//! the time they cover) — never rewinding on its own; `rewind` (import -F)
//! opens the newest older txg that does, verified first when it is more than
//! two txgs back (blocks freed since may have been reused), and erases the
//! uberblocks it abandoned so a later import cannot pick them;
//! `check_open_on` (import -Fn) reports the same plan and writes nothing.

use std::sync::Arc;

use tarn_engine::pool::label::read_labels;
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, ErrorKind, OpenOptions, Pool};
use tarn_ondisk::label;
use tarn_ondisk::bp::BlockPtr;
use tarn_ondisk::ObjectType;

fn as_dyn(d: &Arc<FaultDevice>) -> Vec<(String, Arc<dyn BlockDevice>)> {
    vec![("mem0".to_string(), d.clone() as Arc<dyn BlockDevice>)]
}

/// Destroys the uberblock of `txg` in all four rings.
fn smash_uberblock(d: &FaultDevice, txg: u64) {
    let size = label::usable_device_size(d.size_bytes());
    for i in 0..label::LABEL_COUNT {
        d.corrupt(label::ub_slot_offset(i, size, 12, txg), 512, txg * 7 + i as u64);
    }
}

fn build() -> (Arc<FaultDevice>, Vec<(u64, u64)>) {
    let (d, per_txg, _) = build_noting_dnode_blocks();
    (d, per_txg)
}

/// (uberblock txg, the root dataset's first dnode block) after each sync.
type DnodeBlocks = Vec<(u64, BlockPtr)>;

/// Eight txgs of one new object each: the device, (txg, object) of each,
/// and after each sync (the uberblock's txg, the root dataset's first dnode
/// block).
fn build_noting_dnode_blocks() -> (Arc<FaultDevice>, Vec<(u64, u64)>, DnodeBlocks) {
    let d = Arc::new(FaultDevice::new(256 << 20, 3));
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let (mut per_txg, mut dnode_blocks) = (Vec::new(), Vec::new());
    for i in 0..8u64 {
        let tx = os.begin().unwrap();
        let o = os.create(&tx, ObjectType::PlainData).unwrap();
        os.write(&tx, o, 0, &[i as u8 + 1; 5000]).unwrap();
        let txg = tx.txg();
        drop(tx);
        pool.sync().unwrap();
        per_txg.push((txg, o));
        let tree = os.tree(0, 100).unwrap();
        dnode_blocks.push((pool.uberblock().txg, tree.iter().find(|(l, i, _)| (*l, *i) == (0, 0)).unwrap().2));
    }
    pool.export().unwrap();
    (d, per_txg, dnode_blocks)
}

#[test]
fn falls_back_two_txgs_by_itself() {
    let (d, objs) = build();
    let last = read_labels(d.as_ref()).uberblocks.iter().map(|u| u.txg).max().unwrap();
    smash_uberblock(&d, last);
    smash_uberblock(&d, last - 1);
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    assert_eq!(pool.uberblock().txg, last - 2);
    // Objects of txgs up to last - 2 are there.
    for (txg, o) in objs {
        if txg <= last - 2 {
            assert_eq!(pool.root().read(o, 0, 5000).unwrap().len(), 5000, "object of txg {}", txg);
        }
    }
    assert!(pool.verify().unwrap().errors.is_empty());
}

/// Uberblocks that fail their checksum are not "newest": five smashed ones
/// leave the sixth as the newest valid, opened without a rewind.
#[test]
fn smashed_uberblocks_do_not_count_as_newest() {
    let (d, _) = build();
    let last = read_labels(d.as_ref()).uberblocks.iter().map(|u| u.txg).max().unwrap();
    for t in last - 4..=last {
        smash_uberblock(&d, t);
    }
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).unwrap();
    assert_eq!(pool.uberblock().txg, last - 5);
    assert!(pool.verify().unwrap().errors.is_empty());
}

#[test]
fn unopenable_newest_uberblocks_limit_the_fallback() {
    let (d, _) = build();
    let ubs = read_labels(d.as_ref()).uberblocks;
    let last = ubs.iter().map(|u| u.txg).max().unwrap();
    // Break what the newest three uberblocks point to (their MOS roots,
    // both copies) while the uberblocks themselves still verify.
    for t in last - 2..=last {
        let ub = ubs.iter().find(|u| u.txg == t).unwrap();
        for dva in ub.mos.dva.iter().filter(|x| !x.is_empty()) {
            d.corrupt(dva.offset, 512, t);
        }
    }
    let e = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).err().expect("three txgs back needs -F");
    assert!(e.msg.contains("tarn pool import -F tank"), "{}", e);
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { rewind: true, ..Default::default() }).unwrap();
    let at = pool.uberblock().txg;
    assert!(at < last - 2);
    assert!(pool.verify().unwrap().errors.is_empty());
    drop(pool);
    // The abandoned, newer uberblocks are gone from every ring.
    let left = read_labels(d.as_ref()).uberblocks;
    assert!(left.iter().all(|u| u.txg <= at + 1), "stale uberblocks remain: {:?}", left.iter().map(|u| u.txg).collect::<Vec<_>>());
}

/// Breaks both copies of the MOS root the uberblock of `txg` names;
/// returns the newest txg before it whose MOS root is another block (a txg
/// that changed no MOS object keeps its predecessor's root).
fn smash_mos_root(d: &FaultDevice, txg: u64) -> u64 {
    let ubs = read_labels(d).uberblocks;
    let ub = ubs.iter().find(|u| u.txg == txg).expect("the txg's uberblock");
    for dva in ub.mos.dva.iter().filter(|x| !x.is_empty()) {
        d.corrupt(dva.offset, 512, txg);
    }
    ubs.iter().filter(|u| u.txg < txg && u.mos != ub.mos).map(|u| u.txg).max().expect("an older MOS root")
}

fn uberblock_txgs(d: &FaultDevice) -> Vec<u64> {
    let mut v: Vec<u64> = read_labels(d).uberblocks.iter().map(|u| u.txg).collect();
    v.sort();
    v.dedup();
    v
}

/// Regression (issue 11 item 3): with the newest txg's MOS root damaged,
/// import rewound one txg on its own and said nothing. Now it refuses,
/// naming both txgs, the time span and `import -F`, and writes nothing;
/// the dry run reports the same plan and writes nothing either; -F
/// rewinds and tells what it discarded.
#[test]
fn an_import_that_would_discard_txgs_refuses_without_rewind() {
    let (d, objs) = build();
    let last = *uberblock_txgs(&d).last().unwrap();
    let good = smash_mos_root(&d, last);
    let before = uberblock_txgs(&d);
    let e = Pool::open_on(as_dyn(&d), vec![], &OpenOptions::default()).err().expect("a rewind must be asked for");
    assert_eq!(e.kind, ErrorKind::Corrupt);
    // The export's own txg (its event, `pool::events`) changes the MOS, so
    // the txg discarded may be the newest alone.
    let discarded = if good + 1 == last { format!("(txg {}) must be discarded", last) } else { format!("txgs {} to {}", good + 1, last) };
    for want in [
        format!("newest txg {}", last),
        format!("(txg {})", good),
        discarded,
        "Recovery is possible".to_string(),
        "seconds of data".to_string(),
        "tarn pool import -F tank".to_string(),
    ] {
        assert!(e.msg.contains(&want), "the refusal should say '{want}': {e}");
    }
    let plan = Pool::check_open_on(as_dyn(&d), &OpenOptions::default()).expect("a plan");
    assert!(plan.needed());
    assert_eq!((plan.txg, plan.newest_txg), (good, last));
    assert!(plan.would().contains(&format!("(txg {})", good)), "{}", plan.would());
    assert_eq!(uberblock_txgs(&d), before, "neither the refusal nor the plan wrote anything");
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { rewind: true, ..Default::default() }).unwrap();
    assert_eq!(pool.uberblock().txg, good);
    assert_eq!(pool.rewound(), Some(plan.clone()), "the import says what it discarded");
    assert!(pool.rewound().unwrap().done().contains(&format!("txg {}", last)));
    for (txg, o) in &objs {
        let r = pool.root().read(*o, 0, 5000);
        if *txg <= good {
            assert_eq!(r.unwrap().len(), 5000, "object of txg {}", txg);
        } else {
            assert_eq!(r.expect_err("discarded").kind, ErrorKind::NotFound);
        }
    }
    assert!(pool.verify().unwrap().errors.is_empty());
    drop(pool);
    assert!(uberblock_txgs(&d).iter().all(|&t| t <= good + 1), "the discarded uberblocks are erased");
}

/// `import -F` of a pool that needs no rewind imports it as it is, and says
/// nothing was discarded; the dry run says so too.
#[test]
fn rewind_on_a_healthy_pool_discards_nothing() {
    let (d, _) = build();
    let last = *uberblock_txgs(&d).last().unwrap();
    let plan = Pool::check_open_on(as_dyn(&d), &OpenOptions { rewind: true, ..Default::default() }).unwrap();
    assert!(!plan.needed(), "{:?}", plan);
    assert!(plan.would().contains("would discard nothing"), "{}", plan.would());
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { rewind: true, ..Default::default() }).unwrap();
    assert_eq!(pool.uberblock().txg, last);
    assert_eq!(pool.rewound(), None);
}

/// A read-only open (inspect) rewinds no more silently than an import, and
/// one allowed to rewind writes nothing: the newer uberblocks stay.
#[test]
fn read_only_opens_refuse_a_rewind_too_and_write_nothing() {
    let (d, _) = build();
    let last = *uberblock_txgs(&d).last().unwrap();
    let good = smash_mos_root(&d, last);
    let ro = OpenOptions { readonly: true, ..Default::default() };
    let e = Pool::open_on(as_dyn(&d), vec![], &ro).err().expect("read-only, still no silent rewind");
    assert!(e.msg.contains("import -F"), "{e}");
    let before = uberblock_txgs(&d);
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { rewind: true, ..ro }).unwrap();
    assert_eq!(pool.uberblock().txg, good);
    drop(pool);
    assert_eq!(uberblock_txgs(&d), before, "a read-only rewind erases nothing");
}

/// More than two txgs back, a txg may reference blocks that the discarded
/// txgs freed and reused: it must pass the verifier. Here the newest three
/// txgs' MOS roots are damaged, and so is the dnode block of the newest txg
/// whose MOS root is intact (as a reuse would leave it): that txg opens, but
/// the plan must pass it over. Regression: `rewind` used to open the first
/// older txg whose top-level blocks read, without verifying anything.
#[test]
fn a_deep_rewind_skips_a_txg_whose_metadata_fails_the_verifier() {
    let (d, _, dnode_blocks) = build_noting_dnode_blocks();
    let ubs = read_labels(d.as_ref()).uberblocks;
    let last = *uberblock_txgs(&d).last().unwrap();
    let smashed: Vec<_> = ubs.iter().filter(|u| u.txg + 2 >= last).map(|u| u.mos).collect();
    for t in last - 2..=last {
        let _ = smash_mos_root(&d, t);
    }
    let candidate = ubs.iter().filter(|u| !smashed.contains(&u.mos)).map(|u| u.txg).max().unwrap();
    assert!(candidate + 2 < last, "txg {candidate} is a deep rewind from {last}");
    let (_, victim) = dnode_blocks.iter().rev().find(|(t, _)| *t <= candidate).expect("the candidate's dnode block");
    for dva in victim.dva.iter().filter(|x| !x.is_empty()) {
        d.write_at(&[0xA5; 512], dva.offset).unwrap();
    }
    let opts = OpenOptions { rewind: true, ..Default::default() };
    match Pool::check_open_on(as_dyn(&d), &opts) {
        Ok(plan) => assert!(plan.txg < candidate, "txg {candidate} fails the verifier but was planned: {plan:?}"),
        Err(e) => assert!(e.msg.contains(&format!("txg {candidate}: {} txgs back, the verifier finds", last - candidate)), "{e}"),
    }
    if let Ok(pool) = Pool::open_on(as_dyn(&d), vec![], &opts) {
        assert!(pool.uberblock().txg < candidate);
        let rep = pool.verify().unwrap();
        assert!(rep.errors.is_empty(), "the state rewound to verifies: {:?}", rep.errors);
    }
}
