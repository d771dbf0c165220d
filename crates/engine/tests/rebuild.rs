//! Sequential rebuild (issue 12, `pool::rebuild`): `attach -s` and
//! `replace -s` copy a mirror's used space in offset order, then scrub.
//!
//! Invariants checked:
//! - the rebuild copies about the vdev's allocated bytes (no more than
//!   allocated plus deferred, no less than the data written), posts
//!   resilver_start/finish with resilver_type=sequential, and the scrub it
//!   starts finds every copy good;
//! - the new device alone holds the pool: the others detached, it reads
//!   everything back, imports alone and verifies;
//! - writes and frees made while the rebuild runs (slowed by the scan
//!   limit) reach the new device: it alone reads back what was written
//!   during the rebuild too;
//! - replace -s of a plain device completes the replacement (the old
//!   device leaves, labels erased);
//! - -s is refused, naming why and changing nothing, on a RAID-Z member,
//!   while a resilver runs, and for an unknown device; a pool stopped
//!   mid-rebuild imports and finishes with a healing resilver.

mod common;

use std::sync::Arc;

use common::{filled, mem_devs, named, open_named, reads_back, small_tunables, vdev_paths, verified};
use tarn_engine::pool::events::class;
use tarn_engine::pool::rebuild::ResilverKind::Sequential;
use tarn_engine::pool::scan::{ScanFunc, ScanState};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::FaultDevice;
use tarn_engine::{CreateOptions, Pool};

fn opts() -> CreateOptions {
    CreateOptions { tunables: small_tunables(), ..Default::default() }
}

fn mirror(devs: &[Arc<FaultDevice>], names: &[&str]) -> Pool {
    let tops = vec![NewTop { layout: Layout::Mirror, devices: names.iter().zip(devs).map(|(n, d)| named(n, d)).collect() }];
    Pool::create_tops("tank", tops, vec![], &opts()).expect("create")
}

fn events(pool: &Pool, cls: &str) -> Vec<tarn_engine::pool::events::Event> {
    pool.events().since(None).0.into_iter().filter(|e| e.class == cls).collect()
}

fn text(e: &tarn_engine::pool::events::Event, field: &str) -> Option<String> {
    match e.field(field)? {
        tarn_engine::pool::events::FieldValue::Text(s) => Some(s.clone()),
        _ => None,
    }
}

/// Waits for the rebuild and the scrub it starts; the scrub's status.
fn rebuilt_and_scrubbed(pool: &Pool) -> tarn_engine::pool::scan::ScanStatus {
    let st = pool.scan_wait();
    assert_eq!((st.func, st.state), (ScanFunc::Scrub, ScanState::Finished), "the rebuild ends in a finished scrub: {st:?}");
    st
}

#[test]
fn attach_s_copies_the_allocated_space_and_the_new_device_alone_holds_the_pool() {
    let devs = mem_devs(3, 160 << 20, 61);
    let pool = mirror(&devs, &["a", "b"]);
    let files = filled(&pool, 24, 1 << 20, 7);
    let written: u64 = files.iter().map(|f| f.1.len() as u64).sum();
    let allocated = pool.status().allocated;
    pool.attach_device_on_as("a", "c", devs[2].clone(), false, Sequential).expect("attach -s");
    let st = rebuilt_and_scrubbed(&pool);
    assert_eq!(st.report.bad_copies, 0, "the scrub after the rebuild finds every copy good: {st:?}");
    assert_eq!(st.report.error_count, 0, "{:?}", st.report.errors);
    let done = st.rebuild.clone().expect("the rebuild is shown beside its scrub");
    assert_eq!(done.vdev, "mirror-0");
    assert_eq!(done.errors, 0);
    // Allocated space as the attach found it, give or take what the syncs
    // since allocated and deferred (a few metadata blocks each).
    assert!(done.bytes >= written, "the rebuild copied the data: {} bytes for {} written", done.bytes, written);
    assert!(done.bytes <= allocated + (8 << 20), "about the allocated bytes, not the device: {} for {} allocated", done.bytes, allocated);
    let start = events(&pool, class::RESILVER_START);
    let finish = events(&pool, class::RESILVER_FINISH);
    assert!(start.last().and_then(|e| text(e, "resilver_type")).as_deref() == Some("sequential"), "{start:?}");
    assert!(finish.last().and_then(|e| text(e, "resilver_type")).as_deref() == Some("sequential"), "{finish:?}");
    assert_eq!(events(&pool, class::SCRUB_FINISH).len(), 1, "one scrub, started by the rebuild");
    assert_eq!(vdev_paths(&pool), ["mirror-0", "  a", "  b", "  c"]);
    // c alone: a and b leave, the pool reads back and imports from c.
    pool.detach_device("a").expect("detach a");
    pool.detach_device("b").expect("detach b");
    assert_eq!(vdev_paths(&pool), ["c"]);
    reads_back(&pool, &files, "c alone");
    pool.export().expect("export");
    drop(pool);
    let pool = open_named(vec![named("c", &devs[2])]).expect("import from c alone");
    reads_back(&pool, &files, "c alone, imported");
    verified(&pool, "after the rebuild");
}

#[test]
fn writes_and_frees_during_the_rebuild_reach_the_new_device() {
    let devs = mem_devs(2, 160 << 20, 62);
    let pool = Pool::create_on("tank", vec![named("a", &devs[0])], vec![], &opts()).expect("create");
    let old = filled(&pool, 16, 1 << 20, 11);
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "4M").expect("slow rebuild");
    pool.attach_device_on_as("a", "b", devs[1].clone(), false, Sequential).expect("attach -s");
    // While it copies: new files, and half the old ones rewritten (their
    // blocks freed) — the freed space must not be reused under the copy.
    let mut new = Vec::new();
    for round in 0..6u64 {
        new.extend(filled(&pool, 2, 300_000, 100 + round));
        let (obj, _) = old[round as usize];
        let data = common::pattern(1 << 20, 500 + round);
        let os = pool.root();
        let tx = os.begin().expect("begin");
        os.write(&tx, obj, 0, &data).expect("rewrite");
        drop(tx);
        pool.sync().expect("sync");
        new.push((obj, data));
    }
    let st = pool.scan_status();
    assert!(st.func == ScanFunc::Resilver && st.state == ScanState::Scanning && st.rebuild_vdev.is_some(), "the writes ran beside the rebuild: {st:?}");
    assert!(st.examined < st.to_examine, "{st:?}");
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "0").expect("full speed");
    let st = rebuilt_and_scrubbed(&pool);
    assert_eq!(st.report.bad_copies, 0, "{st:?}");
    pool.detach_device("a").expect("detach a");
    reads_back(&pool, &old[6..], "b alone, old files");
    reads_back(&pool, &new, "b alone, written during the rebuild");
    verified(&pool, "b alone");
}

#[test]
fn replace_s_of_a_plain_device_completes_the_replacement() {
    let devs = mem_devs(2, 128 << 20, 63);
    let pool = Pool::create_on("tank", vec![named("a", &devs[0])], vec![], &opts()).expect("create");
    let files = filled(&pool, 8, 500_000, 3);
    pool.replace_device_on_as("a", "b", devs[1].clone(), false, Sequential).expect("replace -s");
    let st = rebuilt_and_scrubbed(&pool);
    assert_eq!(st.rebuild.as_ref().map(|r| r.vdev.as_str()), Some("replacing-0"));
    assert_eq!(vdev_paths(&pool), ["b"], "a left once b was rebuilt");
    assert!(tarn_engine::pool::label::read_labels(devs[0].as_ref()).config.is_none(), "a's labels are erased");
    reads_back(&pool, &files, "b");
    verified(&pool, "after replace -s");
}

#[test]
fn s_is_refused_where_a_rebuild_cannot_do() {
    let refused = |r: tarn_engine::Result<()>, what: &str, why: &str| {
        let e = r.expect_err(what).to_string();
        assert!(e.contains(why), "{what}: {e}");
    };
    // RAID-Z.
    let devs = mem_devs(4, 96 << 20, 64);
    let tops = vec![NewTop { layout: Layout::Raidz(1), devices: ["r0", "r1", "r2"].iter().zip(&devs).map(|(n, d)| named(n, d)).collect() }];
    let pool = Pool::create_tops("tank", tops, vec![], &opts()).expect("create");
    refused(pool.replace_device_on_as("r0", "x", devs[3].clone(), false, Sequential), "replace -s on raidz", "sequential resilver is not supported for raidz");
    refused(pool.attach_device_on_as("r0", "x", devs[3].clone(), false, Sequential), "attach -s on raidz", "sequential resilver is not supported for raidz");
    assert_eq!(vdev_paths(&pool), ["raidz1-0", "  r0", "  r1", "  r2"], "nothing changed");
    drop(pool);
    // A resilver under way: it covers every device that missed txgs, a
    // rebuild only its vdev's new ones; -s waits for it.
    let devs = mem_devs(3, 128 << 20, 65);
    let pool = mirror(&devs, &["a", "b"]);
    filled(&pool, 2, 100_000, 1);
    pool.offline("b", true).expect("offline b");
    filled(&pool, 4, 200_000, 2);
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "64K").expect("slow resilver");
    pool.online("b").expect("online b");
    refused(pool.attach_device_on_as("a", "c", devs[2].clone(), false, Sequential), "attach -s while resilvering", "is resilvering");
    assert_eq!(vdev_paths(&pool), ["mirror-0", "  a", "  b"], "nothing changed");
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "0").expect("full speed");
    pool.scan_wait();
    drop(pool);
    let devs = mem_devs(2, 128 << 20, 66);
    let pool = Pool::create_on("tank", vec![named("a", &devs[0])], vec![], &opts()).expect("create");
    filled(&pool, 2, 100_000, 4);
    refused(pool.replace_device_on_as("nosuch", "b", devs[1].clone(), false, Sequential), "unknown device", "nosuch");
}

#[test]
fn a_stop_mid_rebuild_imports_and_finishes_with_a_healing_resilver() {
    let devs = mem_devs(3, 160 << 20, 67);
    let pool = mirror(&devs, &["a", "b"]);
    let files = filled(&pool, 16, 1 << 20, 9);
    pool.set_tunable("tarn_scan_limit_bytes_per_sec", "1M").expect("slow rebuild");
    pool.attach_device_on_as("a", "c", devs[2].clone(), false, Sequential).expect("attach -s");
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Power lost mid-rebuild: c is in the tree with its DTL.
    let cut: Vec<Arc<FaultDevice>> = devs.iter().map(|d| Arc::new(d.snapshot_durable())).collect();
    drop(pool);
    let pool = open_named(vec![named("a", &cut[0]), named("b", &cut[1]), named("c", &cut[2])]).expect("import after the cut");
    let st = pool.scan_wait();
    assert_eq!((st.func, st.rebuild_vdev.as_deref()), (ScanFunc::Resilver, None), "import resilvers c by healing: {st:?}");
    assert_eq!(st.report.error_count, 0, "{:?}", st.report.errors);
    pool.detach_device("a").expect("detach a");
    pool.detach_device("b").expect("detach b");
    reads_back(&pool, &files, "c alone after the healing resilver");
}
