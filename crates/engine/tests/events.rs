//! The pool's events (issue 12, `pool::events`, `zpool events`): each
//! source posts its event with the payload that says what happened, the
//! ring is bounded and kept in the pool, and a rotten device cannot flood
//! it.
//!
//! Invariants checked:
//! - a damaged copy met by a read is one checksum ereport naming the
//!   device and the block (object set, object, level, block id, offset),
//!   however often it is read; an unreadable one an io ereport; a block
//!   lost a data ereport; a scrub's bad copy a checksum ereport;
//! - pool create/import/export, scrub start/pause/resume/finish/abort,
//!   cache devices added and removed, `clear` and a device fault each post
//!   their event;
//! - in a mirror, the damaged child's copy is the ereport's device (the
//!   read served, the copy healed), and a child's fault, offline, online
//!   and resilver are events;
//! - the ring keeps at most `zfs_zevent_len_max` events, the newest; it
//!   survives export and import and a close without export, and eids go
//!   on across them;
//! - a damaged ring costs its events, not the import (a warning says so);
//! - the rate limit drops ereports, never error-log entries, and never
//!   lets more than `zfs_checksum_events_per_second` a second through.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{as_dyn, corrupt, mem_devs, new_pool, open, pattern, put, small_tunables};
use tarn_engine::pool::errlog::Bookmark;
use tarn_engine::pool::events::{class, Event, FieldValue};
use tarn_engine::sys::{BlockDevice, FaultConfig, FaultDevice, FaultZone};
use tarn_engine::{CreateOptions, OpenOptions, Pool};
use tarn_ondisk::bp::BlockPtr;

fn events(pool: &Pool) -> Vec<Event> {
    pool.events().since(None).0
}

fn classes(pool: &Pool) -> Vec<String> {
    events(pool).into_iter().map(|e| e.class).collect()
}

/// The events of `class` in the ring.
fn of(pool: &Pool, cls: &str) -> Vec<Event> {
    events(pool).into_iter().filter(|e| e.class == cls).collect()
}

fn text(e: &Event, name: &str) -> String {
    match e.field(name) {
        Some(FieldValue::Text(s)) => s.clone(),
        other => panic!("event {} has no text '{}': {:?}", e.class, name, other),
    }
}

/// The data block `index` of object `obj` of the root dataset.
fn data_block(pool: &Pool, obj: u64, index: u64) -> BlockPtr {
    pool.root().tree(obj, 1 << 20).expect("tree").into_iter().find(|(l, i, _)| (*l, *i) == (0, index)).expect("the data block").2
}

/// A pool (root properties `props`) that held one synced object of `len`
/// bytes and was exported.
struct Exported {
    devs: Vec<Arc<FaultDevice>>,
    obj: u64,
    data: Vec<u8>,
    /// The object's data block `index`, and the root dataset's object set.
    bp: BlockPtr,
    root: u64,
}

fn exported_object(props: &[(&str, &str)], len: usize, seed: u64, index: u64) -> Exported {
    let (devs, pool) = new_pool(1, props);
    let data = pattern(len, seed);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    let (bp, root) = (data_block(&pool, obj, index), pool.root().id);
    pool.export().unwrap();
    Exported { devs, obj, data, bp, root }
}

fn reimport(devs: &[Arc<FaultDevice>], pool: Pool) -> Pool {
    pool.export().expect("export");
    open(devs).expect("import")
}

/// Every source but the read path and faults: create, cache devices,
/// clear, a scrub paused, resumed, finished and one canceled, export and
/// import — each its event, in order; the ring comes back from the pool
/// with the same events and eids, and the next eid goes on.
#[test]
fn each_source_posts_its_event_and_the_ring_survives_export_and_import() {
    let (devs, pool) = new_pool(1, &[]);
    for i in 0..8 {
        put(&pool, &pattern(256 << 10, i));
    }
    pool.sync().unwrap();
    let guid = pool.guid();
    pool.add_cache_on("cache0", Arc::new(FaultDevice::new(32 << 20, 9))).unwrap();
    pool.remove_caches(&["cache0".to_string()]).unwrap();
    pool.clear_errors();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let pool = &pool;
        let scan = s.spawn(move || pool.scrub_pausing(&mut || wait.recv().expect("go")).expect("scrub"));
        while pool.scan_status().state != tarn_engine::pool::scan::ScanState::Scanning {
            std::thread::yield_now();
        }
        pool.scrub_pause().unwrap();
        go.send(()).unwrap();
        pool.scrub_start().expect("resume");
        scan.join().unwrap();
    });
    pool.scrub_start().unwrap();
    pool.scrub_cancel().unwrap();
    let before = events(&pool);
    let want = [
        class::POOL_CREATE,
        class::VDEV_ADD,
        class::CONFIG_SYNC,
        class::VDEV_REMOVE,
        class::CONFIG_SYNC,
        class::VDEV_CLEAR,
        class::SCRUB_START,
        class::SCRUB_PAUSED,
        class::SCRUB_RESUME,
        class::SCRUB_FINISH,
        class::SCRUB_START,
        class::SCRUB_ABORT,
    ];
    assert_eq!(before.iter().map(|e| e.class.as_str()).collect::<Vec<_>>(), want);
    assert!(before.iter().all(|e| e.pool == "tank" && e.pool_guid == guid && e.time_ns > 0));
    assert_eq!(before.iter().map(|e| e.eid).collect::<Vec<_>>(), (1..=want.len() as u64).collect::<Vec<_>>());
    assert_eq!(text(&before[1], "vdev_path"), "cache0");
    let finish = &before[9];
    assert!(finish.number("scan_copies").unwrap() > 8 && finish.number("scan_bad_copies") == Some(0), "{finish:?}");
    assert!(finish.number("scan_bytes").unwrap() >= 8 * (256 << 10), "{finish:?}");

    let pool = reimport(&devs, pool);
    let after = events(&pool);
    assert_eq!(after[..before.len()], before[..], "the ring comes back from the pool");
    let rest: Vec<(&str, u64)> = after[before.len()..].iter().map(|e| (e.class.as_str(), e.eid)).collect();
    assert_eq!(rest, [(class::POOL_EXPORT, 13), (class::POOL_IMPORT, 14)]);
    let txg = after[13].number("txg").expect("import says the txg it opened");
    assert!(txg > 1 && txg <= pool.uberblock().txg, "{txg}");

    // A close without export (the daemon stopping) keeps it too.
    pool.close().unwrap();
    drop(pool);
    let pool = open(&devs).unwrap();
    let last = events(&pool).pop().unwrap();
    assert_eq!((last.class.as_str(), last.eid), (class::POOL_IMPORT, 15));
}

/// copies=2: one copy of a block damaged, read twice — one checksum
/// ereport naming the device, the block and the copy's offset, and the
/// read served; then the scrub reports the same bad copy.
#[test]
fn a_damaged_copy_is_one_checksum_ereport_naming_its_block() {
    let Exported { devs, obj, data, bp, root } = exported_object(&[("copies", "2")], 300 << 10, 1, 1);
    assert_eq!(bp.ndvas(), 2);
    corrupt(&devs, &bp.dva[0]);
    let pool = open(&devs).unwrap();
    let dev_guid = pool.config().tree.children[0].guid;
    for _ in 0..2 {
        assert_eq!(pool.root().read(obj, 0, data.len()).expect("the other copy serves"), data);
        pool.core().cache.remove(&bp);
    }
    let ck = of(&pool, class::CHECKSUM);
    assert_eq!(ck.len(), 1, "one ereport however often the copy is read: {ck:?}");
    assert_eq!(pool.events().stats().duplicates, 1, "the second read met the damaged copy again");
    let e = &ck[0];
    assert_eq!(e.bookmark(), Some(Bookmark::block(root, obj, 0, 1)));
    assert_eq!((e.number("zio_offset"), e.number("zio_size")), (Some(bp.dva[0].offset), Some(bp.dva[0].asize)));
    assert_eq!((text(e, "vdev_path"), e.number("vdev_guid")), ("mem0".to_string(), Some(dev_guid)));
    assert_eq!(text(e, "outcome"), "another copy served the read");
    assert!(of(&pool, class::DATA).is_empty(), "a served read is no permanent error");

    // The scrub finds the same copy (a new import forgets what was reported).
    let pool = reimport(&devs, pool);
    let rep = pool.scrub().unwrap();
    assert_eq!(rep.bad_copies, 1);
    let found: Vec<Event> = of(&pool, class::CHECKSUM).into_iter().filter(|e| e.eid > ck[0].eid).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].bookmark(), text(&found[0], "outcome").as_str()), (Some(Bookmark::block(root, obj, 0, 1)), "found by a scrub and repaired"));
}

/// copies=1: the only copy damaged — a checksum ereport and a data
/// ereport, once however often the block is read.
#[test]
fn a_lost_block_is_a_checksum_and_a_data_ereport() {
    let Exported { devs, obj, bp, root, .. } = exported_object(&[], 200 << 10, 2, 0);
    corrupt(&devs, &bp.dva[0]);
    let pool = open(&devs).unwrap();
    for _ in 0..3 {
        assert!(pool.root().read(obj, 0, 4096).is_err());
    }
    let (ck, data) = (of(&pool, class::CHECKSUM), of(&pool, class::DATA));
    assert_eq!((ck.len(), data.len()), (1, 1), "{:?}", events(&pool));
    assert_eq!(text(&ck[0], "outcome"), "no copy could be read: permanent error");
    assert_eq!(data[0].bookmark(), Some(Bookmark::block(root, obj, 0, 0)));
    assert!(data[0].eid > ck[0].eid);
}

/// A copy the device cannot read is an io ereport.
#[test]
fn an_unreadable_copy_is_an_io_ereport() {
    let Exported { devs, obj, data, bp, .. } = exported_object(&[("copies", "2")], 100 << 10, 3, 0);
    let d = bp.dva[0];
    devs[0].set_config(FaultConfig { zones: vec![FaultZone { start: d.offset, end: d.offset + d.asize, read_error_rate: 1.0, ..Default::default() }], ..Default::default() });
    let pool = open(&devs).unwrap();
    assert_eq!(pool.root().read(obj, 0, data.len()).unwrap(), data);
    let io = of(&pool, class::IO);
    assert_eq!(io.len(), 1, "{:?}", events(&pool));
    assert_eq!(io[0].number("zio_offset"), Some(d.offset));
    assert!(of(&pool, class::CHECKSUM).is_empty());
    assert!(pool.status().vdevs[0].read_errors >= 1);
}

/// A device that refuses writes faults: a statechange from ONLINE to
/// FAULTED naming it and why.
#[test]
fn a_faulted_device_is_a_statechange() {
    let devs = mem_devs(1, 128 << 20, 40);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts).unwrap();
    devs[0].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    put(&pool, &pattern(100_000, 4));
    assert!(pool.sync().is_err());
    let sc = of(&pool, class::STATECHANGE);
    assert_eq!(sc.len(), 1, "{:?}", events(&pool));
    assert_eq!((text(&sc[0], "vdev_path"), text(&sc[0], "vdev_state"), text(&sc[0], "vdev_laststate")), ("mem0".into(), "FAULTED".into(), "ONLINE".into()));
    assert!(text(&sc[0], "reason").contains("Input/output error"), "{:?}", sc[0]);
    assert_eq!(sc[0].number("vdev_guid"), Some(pool.config().tree.children[0].guid));
    assert!(pool.discard().is_some());
}

/// `zfs_zevent_len_max` bounds the ring, live and at import; the newest
/// events stay.
#[test]
fn the_ring_keeps_the_newest_events_up_to_its_bound() {
    let (devs, pool) = new_pool(1, &[]);
    pool.set_tunable("zfs_zevent_len_max", "8").unwrap();
    for _ in 0..20 {
        pool.clear_errors();
    }
    let evs = events(&pool);
    assert_eq!(evs.iter().map(|e| e.eid).collect::<Vec<_>>(), (14..=21).collect::<Vec<_>>(), "pool_create and 20 clears; the last 8 kept");
    assert!(pool.set_tunable("zfs_zevent_len_max", "0").is_err(), "a ring of no events is refused");
    pool.export().unwrap();
    let opts = OpenOptions { tunables: tarn_engine::Tunables { zfs_zevent_len_max: 3, ..small_tunables() }, ..Default::default() };
    let pool = Pool::open_on(as_dyn(&devs), vec![], &opts).unwrap();
    let evs = events(&pool);
    assert_eq!(evs.iter().map(|e| (e.class.as_str(), e.eid)).collect::<Vec<_>>(), [(class::VDEV_CLEAR, 21), (class::POOL_EXPORT, 22), (class::POOL_IMPORT, 23)]);
    assert_eq!(pool.events().stats().len, 3);
}

/// All three copies of the ring's blocks damaged: the import succeeds
/// with a warning naming the ring, and a new ring starts (and is kept),
/// holding the ereports of the damage that cost the old one.
#[test]
fn a_damaged_ring_costs_its_events_not_the_import() {
    let (devs, pool) = new_pool(1, &[]);
    for _ in 0..150 {
        pool.clear_errors();
    }
    pool.export().unwrap();
    // The ring as the export left it, seen by a read-only open (which
    // posts nothing).
    let ro = Pool::open_on(as_dyn(&devs), vec![], &OpenOptions { readonly: true, tunables: small_tunables(), ..Default::default() }).unwrap();
    let obj = ro.events().object();
    assert!(obj != 0 && ro.events().stats().len == 152, "create, 150 clears, export");
    let blocks: Vec<BlockPtr> = ro.mos().tree(obj, 1 << 10).unwrap().into_iter().map(|(_, _, bp)| bp).filter(|bp| !bp.is_hole() && !bp.is_embedded()).collect();
    assert!(!blocks.is_empty(), "152 events take blocks of their own");
    drop(ro);
    for bp in &blocks {
        for d in bp.dva.iter().filter(|d| !d.is_empty()) {
            corrupt(&devs, d);
        }
    }
    let pool = open(&devs).expect("a damaged ring does not stop the import");
    let w = pool.open_warnings();
    assert!(w.iter().any(|w| w.contains(&format!("events (MOS object {})", obj)) && w.contains("its events are lost")), "{w:?}");
    // What the new ring starts with: the damage that cost the old one (a
    // checksum ereport per copy of its block, the block lost), then the
    // import.
    let lost = [class::CHECKSUM, class::CHECKSUM, class::CHECKSUM, class::DATA, class::POOL_IMPORT];
    assert_eq!(classes(&pool), lost);
    assert!(events(&pool)[..4].iter().all(|e| e.number("zio_objset") == Some(0) && e.number("zio_object") == Some(obj)), "{:?}", events(&pool));
    let pool = reimport(&devs, pool);
    assert!(pool.open_warnings().is_empty(), "{:?}", pool.open_warnings());
    assert_eq!(classes(&pool), [&lost[..], &[class::POOL_EXPORT, class::POOL_IMPORT]].concat());
    assert_ne!(pool.events().object(), obj, "the new ring has an object of its own");
}

/// 200 blocks lost on one device, each read once: at most
/// `zfs_checksum_events_per_second` checksum ereports a second reach the
/// ring; the rest are counted as dropped; every block is in the error log.
#[test]
fn a_rotten_device_cannot_flood_the_ring() {
    let (devs, pool) = new_pool(1, &[("compression", "off")]);
    let objs: Vec<u64> = (0..200).map(|i| put(&pool, &pattern(8192, 100 + i))).collect();
    pool.sync().unwrap();
    let copies: Vec<BlockPtr> = objs.iter().map(|&o| data_block(&pool, o, 0)).collect();
    pool.export().unwrap();
    for bp in &copies {
        corrupt(&devs, &bp.dva[0]);
    }
    let pool = open(&devs).unwrap();
    let t0 = Instant::now();
    for &o in &objs {
        assert!(pool.root().read(o, 0, 8192).is_err());
    }
    let secs = t0.elapsed().as_secs() + 1;
    let s = pool.events().stats();
    let posted = |c: &str| s.posted.get(c).copied().unwrap_or(0);
    assert!(posted(class::CHECKSUM) <= 20 * secs && posted(class::DATA) <= 20 * secs, "{s:?} in {secs} s");
    assert_eq!(posted(class::CHECKSUM) + posted(class::DATA) + s.dropped, 400, "each copy and each lost block posted or dropped: {s:?}");
    assert!(s.dropped > 0);
    assert_eq!(pool.status().data_errors, 200, "the limit drops events, never error-log entries");
    assert_eq!(pool.status().vdevs[0].checksum_errors, 200, "nor device error counts");
}

/// A 2-way mirror: a block damaged on one child is a checksum ereport
/// naming that child (the read served by the other); the child faulting,
/// taken offline, back online and resilvered are events; `clear` of one
/// device names it.
#[test]
fn a_mirror_child_is_named_and_its_states_are_events() {
    use tarn_engine::pool::vdevs::{Layout, NewTop};
    let devs = mem_devs(2, 128 << 20, 50);
    let tops = vec![NewTop { layout: Layout::Mirror, devices: as_dyn(&devs) }];
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_tops("tank", tops, vec![], &opts).unwrap();
    let data = pattern(200 << 10, 5);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    let bp = data_block(&pool, obj, 0);
    pool.export().unwrap();
    // The child a read of this offset asks first (a mirror turns its
    // reads by offset, a MiB at a time) holds the damage.
    let k = ((bp.dva[0].offset >> 20) % 2) as usize;
    devs[k].write_at(&[0x5a; 512], bp.dva[0].offset).unwrap();
    let pool = open(&devs).unwrap();
    let guids: Vec<u64> = pool.status().vdevs[0].children.iter().map(|c| c.guid).collect();
    assert_eq!(pool.root().read(obj, 0, data.len()).unwrap(), data);
    let ck = of(&pool, class::CHECKSUM);
    assert_eq!(ck.len(), 1, "{:?}", events(&pool));
    assert_eq!((text(&ck[0], "vdev_path"), ck[0].number("vdev_guid")), (format!("mem{k}"), Some(guids[k])), "the child, not the mirror");
    assert_eq!((ck[0].number("zio_offset"), text(&ck[0], "outcome")), (Some(bp.dva[0].offset), "another copy served the read".to_string()));
    assert!(of(&pool, class::DATA).is_empty());

    pool.offline("mem1", true).unwrap();
    put(&pool, &pattern(100 << 10, 6));
    pool.sync().unwrap();
    pool.online("mem1").unwrap();
    assert_eq!(pool.scan_wait().func, tarn_engine::pool::scan::ScanFunc::Resilver);
    devs[0].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    put(&pool, &pattern(100 << 10, 7));
    pool.sync().expect("the mirror goes on with one child");
    let states: Vec<(String, String, String)> = of(&pool, class::STATECHANGE).iter().map(|e| (text(e, "vdev_path"), text(e, "vdev_laststate"), text(e, "vdev_state"))).collect();
    let want = [("mem1", "ONLINE", "OFFLINE"), ("mem1", "OFFLINE", "ONLINE"), ("mem0", "ONLINE", "FAULTED")];
    assert_eq!(states, want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())));
    let tail: Vec<String> = classes(&pool).into_iter().skip_while(|c| c != class::VDEV_ONLINE).filter(|c| c != class::STATECHANGE).take(3).collect();
    assert_eq!(tail, [class::VDEV_ONLINE, class::RESILVER_START, class::RESILVER_FINISH]);
    let fin = of(&pool, class::RESILVER_FINISH);
    assert!(fin[0].number("scan_repaired_bytes").unwrap() >= 100 << 10 && fin[0].number("scan_canceled") == Some(0), "{:?}", fin[0]);

    devs[0].set_config(FaultConfig::default());
    pool.clear(Some("mem0")).unwrap();
    let cleared = of(&pool, class::VDEV_CLEAR);
    assert_eq!(cleared.iter().map(|e| text(e, "vdev_path")).collect::<Vec<_>>(), ["mem0"]);
}
