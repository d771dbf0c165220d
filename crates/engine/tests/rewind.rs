//! Import falls back to an older uberblock only as far as is safe (two txgs,
//! the free deferral), further only when asked (`import -F`), and erases the
//! uberblocks it abandoned so a later import cannot pick them.

use std::sync::Arc;

use tarn_engine::pool::label::read_labels;
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, OpenOptions, Pool};
use tarn_ondisk::label;
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
    let d = Arc::new(FaultDevice::new(256 << 20, 3));
    let pool = Pool::create_on("tank", as_dyn(&d), vec![], &CreateOptions::default()).unwrap();
    let os = pool.root().clone();
    let mut per_txg = Vec::new();
    for i in 0..8u64 {
        let tx = os.begin().unwrap();
        let o = os.create(&tx, ObjectType::PlainData).unwrap();
        os.write(&tx, o, 0, &[i as u8 + 1; 5000]).unwrap();
        let txg = tx.txg();
        drop(tx);
        pool.sync().unwrap();
        per_txg.push((txg, o));
    }
    pool.export().unwrap();
    (d, per_txg)
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
    assert!(e.msg.contains("import -F"), "{}", e);
    let pool = Pool::open_on(as_dyn(&d), vec![], &OpenOptions { rewind: true, ..Default::default() }).unwrap();
    let at = pool.uberblock().txg;
    assert!(at < last - 2);
    assert!(pool.verify().unwrap().errors.is_empty());
    drop(pool);
    // The abandoned, newer uberblocks are gone from every ring.
    let left = read_labels(d.as_ref()).uberblocks;
    assert!(left.iter().all(|u| u.txg <= at + 1), "stale uberblocks remain: {:?}", left.iter().map(|u| u.txg).collect::<Vec<_>>());
}
