//! Power cuts around a hot spare standing in (issue 12, `pool::spare`): a
//! 2-way mirror with a spare, on one power rail ([`Railed`]); one child
//! starts refusing writes, the spare stands in and is resilvered, and the
//! power goes at the k-th write from the fault on of the spare or of the
//! mirror's other child — before the labels take the new tree, while they
//! do, while the spare is resilvered, or after.
//! Every device then keeps a random part of its unflushed writes
//! (`FaultDevice::crash`).
//!
//! The claim: the pool imports; every object synced before the fault reads
//! back exactly, and one written after it exactly or not at all; the spare
//! is either AVAIL (the change of the tree did not reach the labels) or
//! INUSE in `spare-1` beside the failed child (it did), nothing between;
//! the resilver import starts ends without error, two scrubs find nothing,
//! the checker is clean; the spare can then be detached and the pool
//! exported and imported again with it AVAIL.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::{BlockDevice, FaultConfig, FaultDevice};
use tarn_engine::{CreateOptions, OpenOptions, Pool};

use super::layouts::{check_resilver, check_scrubs, Railed};
use super::model::check_verified;
use crate::common::{crash_all, filled, mem_devs, reads_back, small_tunables, vdev_paths};

/// Devices: the mirror's two children and the spare; m1 fails, and the
/// power is cut at a write of m0 or of the spare.
const NAMES: [&str; 3] = ["m0", "m1", "s"];
pub const SPARE: usize = 2;
pub const M0: usize = 0;

/// What one run did before the power went.
pub struct SpareCut {
    /// The cut device's writes from the fault to the end (no cut), or to
    /// the cut.
    pub writes: u64,
    /// Whether the power was cut (a cut past the last write is none).
    pub cut: bool,
    /// Whether the spare stood in (INUSE) after import.
    pub in_use: bool,
}

fn spare_state(pool: &Pool) -> String {
    let s = pool.spares();
    assert_eq!(s.len(), 1, "one spare listed: {s:?}");
    s[0].state.clone()
}

/// One run, the power cut at write `k` after the fault of device
/// `cut_dev` (`None`: no cut, to count the writes).
pub fn run(seed: u64, cut_dev: usize, k: Option<u64>, crash_seed: u64) -> SpareCut {
    assert!(cut_dev == M0 || cut_dev == SPARE, "the cut device is m0 or the spare");
    let ctx = format!("spare seed {seed}, cut at write {k:?} of {}, crash seed {crash_seed}", NAMES[cut_dev]);
    let devs = mem_devs(3, 128 << 20, seed);
    let rail = Arc::new(AtomicBool::new(false));
    let railed = |i: usize| (NAMES[i].to_string(), Arc::new(Railed { dev: devs[i].clone(), rail: rail.clone(), trips: i == cut_dev }) as Arc<dyn BlockDevice>);
    let opts = CreateOptions { tunables: small_tunables(), pool_props: crate::common::fail_on_fault(), ..Default::default() };
    let pool = Pool::create_tops("tank", vec![NewTop { layout: Layout::Mirror, devices: vec![railed(0), railed(1)] }], vec![], &opts).unwrap_or_else(|e| panic!("{ctx}: create: {e}"));
    pool.add_spares_on(vec![railed(SPARE)], false).unwrap_or_else(|e| panic!("{ctx}: add the spare: {e}"));
    let before = filled(&pool, 6, 200_000, seed);
    let w0 = devs[cut_dev].stats().writes;
    devs[cut_dev].set_config(FaultConfig { power_cut_after_writes: k, ..Default::default() });
    devs[1].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    // Written after the fault: their writes meet the refusing child.
    let after = try_fill(&pool, seed);
    let stood = wait_stood_or_cut(&pool, &devs[cut_dev], &ctx);
    let writes = devs[cut_dev].stats().writes - w0;
    let cut = devs[cut_dev].is_dead();
    assert!(cut || stood, "{ctx}: the spare neither stood in nor lost power");
    drop(pool); // closing a pool whose devices lost power must not hang
    let images = crash_all(&devs, crash_seed);
    let in_use = check_after(&images, &before, &after, &ctx);
    SpareCut { writes, cut, in_use }
}

/// Objects written and synced after the fault, as far as the power lets:
/// (object, contents) of those the pool took.
fn try_fill(pool: &Pool, seed: u64) -> Vec<(u64, Vec<u8>)> {
    let os = pool.root();
    let mut out = Vec::new();
    for i in 0..3u64 {
        let data = crate::common::pattern(150_000, seed ^ (0xA5 + i));
        let Ok(tx) = os.begin() else { break };
        let Ok(obj) = os.create(&tx, tarn_ondisk::ObjectType::PlainData) else { break };
        if os.write(&tx, obj, 0, &data).is_err() {
            break;
        }
        drop(tx);
        out.push((obj, data));
        if pool.sync().is_err() {
            break;
        }
    }
    out
}

/// Waits (at most 60 s) until the spare stands in and is resilvered, or
/// the power is cut; whether it stood in.
fn wait_stood_or_cut(pool: &Pool, cut: &FaultDevice, ctx: &str) -> bool {
    let t0 = Instant::now();
    loop {
        if cut.is_dead() {
            return false;
        }
        let st = pool.status();
        let resilvered = |v: &tarn_engine::pool::VdevStatus| v.children.iter().flat_map(|c| c.children.iter()).any(|l| l.path == "s" && l.missed_txgs.is_none());
        if st.spares.first().is_some_and(|s| s.state == "INUSE") && st.vdevs.iter().any(resilvered) && pool.scan_status().state != tarn_engine::pool::scan::ScanState::Scanning {
            return true;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{ctx}: the spare neither stood in nor lost power in 60 s: {:?}", vdev_paths(pool));
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Imports the crash images and checks the claim of the module docs;
/// whether the spare was INUSE.
fn check_after(images: &[Arc<FaultDevice>], before: &[(u64, Vec<u8>)], after: &[(u64, Vec<u8>)], ctx: &str) -> bool {
    let named = |imgs: &[Arc<FaultDevice>]| imgs.iter().zip(NAMES).map(|(d, n)| (n.to_string(), d.clone() as Arc<dyn BlockDevice>)).collect::<Vec<_>>();
    let open = |imgs: &[Arc<FaultDevice>]| Pool::open_on(named(imgs), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() });
    let pool = open(images).unwrap_or_else(|e| panic!("{ctx}: import after the cut: {e}"));
    let state = spare_state(&pool);
    let in_use = match state.as_str() {
        "INUSE" => {
            assert_eq!(vdev_paths(&pool), ["mirror-0", "  m0", "  spare-1", "    m1", "    s"], "{ctx}: the spare in use beside m1");
            true
        }
        "AVAIL" => {
            assert_eq!(vdev_paths(&pool), ["mirror-0", "  m0", "  m1"], "{ctx}: the spare not in the tree");
            false
        }
        other => panic!("{ctx}: the spare is {other} after import"),
    };
    if std::env::var_os("TARN_DEBUG_SPARE").is_some() {
        eprintln!("{ctx}: imported txg {} state {state}: {:#?}", pool.uberblock().txg, pool.status().vdevs);
    }
    reads_back(&pool, before, &format!("{ctx}: synced before the fault"));
    let os = pool.root();
    for (obj, data) in after {
        if os.info(*obj).is_ok() {
            let got = os.read(*obj, 0, data.len() + 1).unwrap_or_else(|e| panic!("{ctx}: object {obj} written after the fault: {e}"));
            assert!(got == *data, "{ctx}: object {obj} written after the fault is not as written");
        }
    }
    check_resilver(&pool, ctx);
    check_scrubs(&pool, ctx);
    check_verified(&pool, ctx);
    if in_use {
        pool.detach_device("s").unwrap_or_else(|e| panic!("{ctx}: detach the spare: {e}"));
    }
    assert_eq!(spare_state(&pool), "AVAIL", "{ctx}");
    pool.export().unwrap_or_else(|e| panic!("{ctx}: export: {e}"));
    drop(pool);
    let pool = open(images).unwrap_or_else(|e| panic!("{ctx}: import after the export: {e}"));
    assert_eq!((vdev_paths(&pool), spare_state(&pool)), (vec!["mirror-0".to_string(), "  m0".into(), "  m1".into()], "AVAIL".to_string()), "{ctx}: after export and import");
    reads_back(&pool, before, &format!("{ctx}: reopened"));
    in_use
}
