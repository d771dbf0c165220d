//! Fault injection into a live pool's leaf devices (`io::inject`,
//! `pool::inject`; issue 12, `tarn inject`).
//!
//! Invariants checked:
//! - injected read errors on one device of a `copies=2` pool are served by
//!   the other copy, counted as READ errors of that device (one per failed
//!   operation, as many as the handler says it injected), and the pool
//!   stays ONLINE;
//! - checksum damage is counted as CKSUM errors by the read path and by
//!   scrub, scrub "repairs" it from the good copies, and the device's bytes
//!   are the same before and after — the damage was never written back,
//!   nor cached: every object reads back exactly;
//! - injected write errors fault the device as a real failed write does,
//!   and suspend a pool without redundancy; no write reaches the device;
//! - a vanished device (`nxio`) is REMOVED at the next I/O or check, as a
//!   deleted image file is, and the pool suspends; what was synced before
//!   survives;
//! - clearing a handler restores the device's I/O at the next operation;
//!   a delay slows each operation by at least its milliseconds;
//! - devices are named by path or guid (decimal or hex); an unknown one is
//!   refused naming the pool and its devices; export and destroy are
//!   refused while handlers are in place.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{open, pattern, pool_with, put};
use tarn_engine::io::inject::{Fault, InjectSpec, IoTypes, FREQ_ALWAYS};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{ErrorKind, Pool};

fn spec(fault: Fault, io: IoTypes) -> InjectSpec {
    InjectSpec::new(fault, io, FREQ_ALWAYS).expect("a valid spec")
}

/// An object and what it holds.
type Object = (u64, Vec<u8>);

/// A pool on `n` devices of 128 MiB with root properties `props`, holding
/// `count` objects of 300 000 bytes, synced, exported and imported again
/// (so no block of theirs is cached): (devices, pool, objects with data).
fn cold_pool(n: usize, props: &[(&str, &str)], count: u64) -> (Vec<Arc<FaultDevice>>, Pool, Vec<Object>) {
    let (devs, pool) = pool_with(n, 128 << 20, 7, props);
    let objs: Vec<Object> = (0..count)
        .map(|i| {
            let d = pattern(300_000, 100 + i);
            (put(&pool, &d), d)
        })
        .collect();
    pool.sync().expect("sync");
    pool.export().expect("export");
    let pool = open(&devs).expect("import");
    (devs, pool, objs)
}

/// Every object reads back exactly.
fn reads_back(pool: &Pool, objs: &[Object], ctx: &str) {
    for (obj, data) in objs {
        let got = pool.root().read(*obj, 0, data.len()).unwrap_or_else(|e| panic!("{ctx}: object {obj}: {e}"));
        assert!(got == *data, "{ctx}: object {obj} reads back exactly");
    }
}

/// (offset, allocated bytes) of every copy on vdev `vdev` of every block
/// of the objects and of the dnode array.
fn copies_on(pool: &Pool, objs: &[Object], vdev: u32) -> Vec<(u64, u64)> {
    let ids = objs.iter().map(|o| o.0).chain([0]);
    let bps = ids.flat_map(|obj| pool.root().tree(obj, 1 << 20).expect("tree"));
    let dvas = bps.flat_map(|(_, _, bp)| bp.dva).filter(|d| !d.is_empty() && d.vdev == vdev);
    dvas.map(|d| (d.offset, d.asize)).collect()
}

/// Everything the device holds now.
fn image(dev: &FaultDevice) -> Vec<u8> {
    let mut buf = vec![0u8; dev.size_bytes() as usize];
    dev.read_at(&mut buf, 0).expect("read the device");
    buf
}

#[test]
fn injected_read_errors_on_one_copy_are_served_by_the_other_and_counted() {
    let (_devs, pool, objs) = cold_pool(2, &[("copies", "2")], 8);
    let id = pool.inject("mem0", spec(Fault::Io, IoTypes::Read)).expect("inject");
    reads_back(&pool, &objs[..4], "with mem0's reads failing");
    let st = pool.status();
    assert_eq!(st.state, "ONLINE", "{st:?}");
    assert!(st.vdevs.iter().all(|v| v.state == "ONLINE"), "a bad sector is counted, not a fault: {st:?}");
    let injected = pool.injections()[0].injected;
    assert!(injected > 0, "some blocks had their first copy on mem0");
    assert_eq!(st.vdevs[0].read_errors, injected, "every failed read is counted once: {st:?}");
    assert_eq!((st.vdevs[1].read_errors, st.vdevs[0].checksum_errors), (0, 0), "{st:?}");

    assert!(pool.clear_injection(id), "cleared");
    assert!(pool.injections().is_empty());
    reads_back(&pool, &objs[4..], "after clearing");
    assert_eq!(pool.status().vdevs[0].read_errors, injected, "no read failed after clearing");
}

#[test]
fn checksum_damage_is_counted_and_scrubbed_and_never_reaches_the_device() {
    let (devs, pool, objs) = cold_pool(2, &[("copies", "2")], 8);
    let before = image(&devs[1]);
    let txg = pool.uberblock().txg;
    let copies = copies_on(&pool, &objs, 1);
    assert!(copies.len() >= 2 * objs.len(), "each object's blocks have a copy on mem1");
    let writes = devs[1].stats().writes;
    pool.inject("mem1", spec(Fault::Checksum, IoTypes::All)).expect("inject");
    reads_back(&pool, &objs, "with mem1's reads damaged");
    let cksum = pool.status().vdevs[1].checksum_errors;
    assert!(cksum > 0, "damaged copies are counted as checksum errors");
    assert_eq!(pool.status().vdevs[1].read_errors, 0, "damage is not a read error");
    assert_eq!(devs[1].stats().writes, writes, "reads wrote nothing");
    assert!(image(&devs[1]) == before, "the damaged reads left the device as it was");

    let rep = pool.scrub().expect("scrub");
    assert!(rep.bad_copies > 0 && rep.errors.is_empty(), "every block has a good copy on mem0: {rep:?}");
    assert_eq!(rep.repaired_copies, rep.bad_copies, "{rep:?}");
    assert_eq!(pool.status().vdevs[1].checksum_errors, cksum + rep.bad_copies, "scrub counts each bad copy once");
    assert_eq!(pool.status().vdevs[0].checksum_errors, 0);

    assert_eq!(pool.clear_injections(), 1);
    assert!(devs[1].stats().writes > writes, "scrub rewrote the copies it found bad");
    let now = image(&devs[1]);
    for &(offset, len) in &copies {
        let r = offset as usize..(offset + len) as usize;
        assert!(now[r.clone()] == before[r], "the copy at {offset:#x} on mem1 holds what it held: no damage was written");
    }
    // The whole device too, when no txg synced meanwhile (a scrub that
    // records its progress in txgs writes new metadata elsewhere).
    if pool.uberblock().txg == txg {
        assert!(now == before, "the device holds exactly what it held before");
    }
    let again = pool.scrub().expect("scrub");
    assert_eq!(again.bad_copies, 0, "nothing is damaged on the device: {again:?}");
    reads_back(&pool, &objs, "after clearing (from the cache or the devices)");
}

#[test]
fn injected_write_errors_fault_the_device_and_suspend_the_pool() {
    let (devs, pool) = pool_with(1, 128 << 20, 9, &[]);
    let kept = pattern(200_000, 1);
    let a = put(&pool, &kept);
    pool.sync().expect("sync");
    let txg = pool.uberblock().txg;
    let writes = devs[0].stats().writes;
    let id = pool.inject("mem0", spec(Fault::Io, IoTypes::Write)).expect("inject");
    put(&pool, &pattern(200_000, 2));
    let e = pool.sync().expect_err("the sync cannot write");
    assert_eq!(e.kind, ErrorKind::Suspended, "{e}");
    let st = pool.status();
    assert_eq!((st.state.as_str(), st.vdevs[0].state.as_str()), ("SUSPENDED", "FAULTED"), "{st:?}");
    let why = st.vdevs[0].fault.clone().unwrap_or_default();
    assert!(why.contains("write error") && why.contains(&format!("handler {id}")), "the fault says what: {why}");
    assert!(st.vdevs[0].write_errors > 0);
    assert_eq!(devs[0].stats().writes, writes, "no write reached the device");
    assert_eq!(pool.uberblock().txg, txg);

    // As after a real failure: the fault stays when the handler goes.
    assert!(pool.clear_injection(id));
    assert_eq!(pool.status().vdevs[0].state, "FAULTED");
    assert!(pool.sync().is_err(), "still suspended");
    assert!(pool.discard().is_some());
    drop(pool);
    let pool = open(&devs).expect("import");
    assert_eq!(pool.uberblock().txg, txg);
    assert_eq!(pool.root().read(a, 0, kept.len()).expect("the synced object"), kept);
}

#[test]
fn a_vanished_device_is_removed_and_suspends_the_pool() {
    let (devs, pool, objs) = cold_pool(2, &[], 4);
    // A writer gets the suspension at once (with `wait` it would wait).
    pool.set_property("failmode", "continue").unwrap();
    let txg = pool.uberblock().txg;
    let writes = devs[1].stats().writes;
    pool.inject("mem1", spec(Fault::Nxio, IoTypes::All)).expect("inject");
    // Found by the check `status` makes, with no I/O, as a deleted file is.
    let st = pool.status();
    assert_eq!(st.state, "SUSPENDED", "{st:?}");
    assert_eq!((st.vdevs[0].state.as_str(), st.vdevs[1].state.as_str()), ("ONLINE", "REMOVED"), "{st:?}");
    assert!(st.vdevs[1].fault.as_deref().unwrap_or("").contains("vanished"), "{st:?}");
    assert!(st.error.as_deref().unwrap_or("").contains("mem1"), "the pool says which device: {:?}", st.error);
    assert!(pool.root().begin().is_err(), "a suspended pool takes no new transaction");
    assert_eq!(pool.sync().expect_err("suspended").kind, ErrorKind::Suspended);
    assert_eq!(devs[1].stats().writes, writes, "nothing was written to the vanished device");
    assert!(pool.export().is_err(), "a suspended pool is not exported (handlers or not)");
    assert_eq!(pool.clear_injections(), 1);
    assert_eq!(pool.status().vdevs[1].state, "REMOVED", "the leaf stays removed, as a real one");
    assert!(pool.discard().is_some());
    drop(pool);
    let pool = open(&devs).expect("import");
    assert_eq!(pool.uberblock().txg, txg);
    reads_back(&pool, &objs, "after the vanished device came back");
}

#[test]
fn a_read_fails_while_injected_and_succeeds_once_cleared() {
    let (_devs, pool, objs) = cold_pool(1, &[], 1);
    let id = pool.inject("mem0", spec(Fault::Io, IoTypes::All)).expect("inject");
    let (obj, data) = &objs[0];
    let e = pool.root().read(*obj, 0, data.len()).expect_err("no copy can be read");
    assert!(e.msg.contains(&format!("handler {id}")), "{e}");
    pool.clear_injection(id);
    assert!(pool.root().read(*obj, 0, data.len()).expect("read") == *data, "the next read goes to the device");
    assert_eq!(pool.status().state, "ONLINE", "read errors on a healthy device do not fault it");
}

#[test]
fn a_delay_slows_every_read_by_at_least_its_milliseconds() {
    let (_devs, pool, objs) = cold_pool(1, &[], 2);
    pool.inject("mem0", spec(Fault::Delay { ms: 60, lanes: None }, IoTypes::Read)).expect("inject");
    let (obj, data) = &objs[0];
    let t = Instant::now();
    assert!(pool.root().read(*obj, 0, data.len()).expect("read") == *data);
    assert!(t.elapsed() >= Duration::from_millis(60), "{:?}", t.elapsed());
    assert!(pool.injections()[0].injected > 0);
    pool.clear_injections();
    reads_back(&pool, &objs, "after clearing");
}

#[test]
fn devices_are_named_by_path_or_guid_and_unknown_ones_refused() {
    let (_devs, pool) = pool_with(2, 128 << 20, 11, &[]);
    let guid = pool.config().tree.children[1].guid;
    let s = spec(Fault::Io, IoTypes::Read);
    for name in [guid.to_string(), format!("0x{guid:x}"), "mem1".to_string()] {
        let id = pool.inject(&name, s).expect(&name);
        let list = pool.injections();
        assert_eq!((list.len(), list[0].id, list[0].device.as_str(), list[0].guid), (1, id, "mem1", guid));
        assert!(pool.clear_injection(id));
    }
    let e = pool.inject("nosuch", s).expect_err("unknown device");
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(e.msg.contains("'nosuch'") && e.msg.contains("pool 'tank'") && e.msg.contains("mem0, mem1"), "{e}");
    assert!(!pool.clear_injection(12345678), "no such handler");
    assert!(pool.injections().is_empty(), "nothing was added");
}

#[test]
fn export_and_destroy_are_refused_while_handlers_are_in_place() {
    let (devs, pool) = pool_with(1, 128 << 20, 13, &[]);
    let id = pool.inject("mem0", spec(Fault::Delay { ms: 1, lanes: Some(4) }, IoTypes::All)).expect("inject");
    for e in [pool.export().expect_err("export"), pool.destroy().expect_err("destroy")] {
        assert_eq!(e.kind, ErrorKind::Busy);
        assert!(e.msg.contains(&format!("handlers ({id})")) && e.msg.contains("tarn inject -c"), "{e}");
    }
    assert_eq!(pool.status().state, "ONLINE", "nothing changed");
    pool.clear_injection(id);
    pool.export().expect("export once cleared");
    drop(pool);
    // A close (a daemon stopping) ends the handlers instead of refusing.
    let pool = open(&devs).expect("import");
    pool.inject("mem0", spec(Fault::Io, IoTypes::Write)).expect("inject");
    pool.close().expect("close clears the handlers before its final sync");
    assert!(pool.injections().is_empty());
}
