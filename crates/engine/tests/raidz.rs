//! RAID-Z vdevs (issue 12, `vdev/raidz/io.rs`): blocks striped with parity
//! over the children, reads that reconstruct, a pool that survives losing
//! up to `nparity` children of a group.
//!
//! Invariants checked:
//! - with up to `nparity` columns of every data block damaged on the
//!   devices (RAID-Z1, 2 and 3), every file reads back exactly; every
//!   damaged column is counted once as a checksum error against its device
//!   (by the read that met it or by the scrub) and rewritten, so a second
//!   scrub finds nothing and the devices hold the encoded columns again;
//! - with `nparity + 1` damaged columns the read fails as corrupt, never
//!   returns other bytes, and the scrub reports the block;
//! - children missing at import (up to `nparity`) leave the pool DEGRADED,
//!   readable and writable; the blocks they missed heal from parity once
//!   they are back; more missing refuses the import, naming them;
//! - a child whose writes fail faults and the pool goes on; a second one
//!   on RAID-Z1 suspends the pool;
//! - `copies=2` on one RAID-Z vdev: a copy damaged beyond parity is read
//!   from the other, and the scrub rewrites it whole;
//! - a RAID-Z pool filled up refuses writes with no space, and never
//!   suspends (its free space is deflated by parity for writers);
//! - layouts zpool refuses are refused, and change nothing.

mod common;

use std::sync::Arc;

use common::{as_dyn, mem_devs, pattern, put, resilvered, small_tunables, verified, Rng};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::{BlockDevice, FaultConfig, FaultDevice};
use tarn_engine::vdev::raidz::{RaidzColumn, RaidzGeometry, RaidzMap};
use tarn_engine::vdev::Kind;
use tarn_engine::{CreateOptions, ErrorKind, OpenOptions, Pool};
use tarn_ondisk::bp::BlockPtr;
use tarn_ondisk::label::LABELS_FRONT;

const SECTOR: u64 = 4096;

/// A pool "tank" of one RAID-Z group of `width` in-memory devices with
/// `nparity` parity columns, with root properties `props`.
fn raidz_pool(width: usize, nparity: u8, props: &[(&str, &str)]) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(width, 128 << 20, 11);
    let tops = vec![NewTop { layout: Layout::Raidz(nparity), devices: as_dyn(&devs) }];
    let opts = CreateOptions {
        tunables: small_tunables(),
        root_props: props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    let pool = Pool::create_tops("tank", tops, vec![], &opts).expect("create a raidz pool");
    (devs, pool)
}

fn open(devs: &[Arc<FaultDevice>]) -> tarn_engine::Result<Pool> {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() })
}

/// Files of assorted sizes: sub-sector, sub-row, multi-row, several records.
fn write_files(pool: &Pool, seed: u64) -> Vec<(u64, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let sizes = [700usize, 4096, 9_000, 40_000, 131_072, 300_000, 1_000_000];
    let files = sizes
        .iter()
        .map(|&n| {
            let d = pattern(n + rng.below(512) as usize, rng.next_u64());
            (put(pool, &d), d)
        })
        .collect();
    pool.sync().expect("sync");
    files
}

/// One object of `len` pattern bytes, synced; its number, bytes and data
/// block pointers.
fn one_file(pool: &Pool, len: usize, seed: u64) -> (u64, Vec<u8>, Vec<BlockPtr>) {
    let data = pattern(len, seed);
    let obj = put(pool, &data);
    pool.sync().expect("sync");
    let bps = data_blocks(pool, &[obj]);
    (obj, data, bps)
}

/// Exports the pool and lets it go (the devices keep what it wrote).
fn close(pool: Pool) {
    pool.export().expect("export");
    drop(pool);
}

fn read_all(pool: &Pool, files: &[(u64, Vec<u8>)], ctx: &str) {
    for (obj, data) in files {
        let got = pool.root().read(*obj, 0, data.len()).unwrap_or_else(|e| panic!("{ctx}: object {obj}: {e}"));
        assert!(got == *data, "{ctx}: object {obj} reads back exactly: {}", common::first_difference(&got, data));
    }
}

/// The level-0 data block pointers of the objects.
fn data_blocks(pool: &Pool, objs: &[u64]) -> Vec<BlockPtr> {
    objs.iter()
        .flat_map(|o| pool.root().tree(*o, 1 << 20).expect("tree"))
        .map(|(_, _, bp)| bp)
        .filter(|bp| !bp.is_hole() && !bp.is_embedded() && bp.level == 0 && !bp.otype.is_metadata())
        .collect()
}

fn geometry(pool: &Pool, vdev: u32) -> RaidzGeometry {
    match &pool.core().vdevs.get(vdev as usize).expect("a top-level vdev").kind {
        Kind::Raidz(g) => *g,
        _ => panic!("vdev {vdev} is not raidz"),
    }
}

/// The column map of copy `copy` of `bp` (its length in whole sectors).
fn map_of(g: RaidzGeometry, bp: &BlockPtr, copy: usize) -> RaidzMap {
    let len = (bp.psize as u64).div_ceil(SECTOR) * SECTOR;
    g.map(bp.dva[copy].offset, len).expect("map")
}

fn column_bytes(devs: &[Arc<FaultDevice>], c: &RaidzColumn) -> Vec<u8> {
    let mut b = vec![0u8; c.size as usize];
    devs[c.child].read_at(&mut b, LABELS_FRONT + c.offset).expect("read device");
    b
}

/// Inverts the first sector of column `c` on its device.
fn damage(devs: &[Arc<FaultDevice>], c: &RaidzColumn) {
    let mut b = vec![0u8; SECTOR as usize];
    let d = &devs[c.child];
    d.read_at(&mut b, LABELS_FRONT + c.offset).expect("read device");
    b.iter_mut().for_each(|x| *x = !*x);
    d.write_at(&b, LABELS_FRONT + c.offset).expect("damage");
}

/// `k` distinct columns of `map`, chosen by `rng` (all of them when it
/// has no more).
fn pick_columns(map: &RaidzMap, k: usize, rng: &mut Rng) -> Vec<RaidzColumn> {
    let mut cols: Vec<RaidzColumn> = map.columns().to_vec();
    for i in (1..cols.len()).rev() {
        cols.swap(i, rng.below(i as u64 + 1) as usize);
    }
    cols.truncate(k);
    cols
}

fn leaf_checksum_errors(pool: &Pool) -> Vec<u64> {
    pool.status().vdevs.iter().flat_map(|t| t.children.iter()).map(|l| l.checksum_errors).collect()
}

fn leaf_repaired(pool: &Pool) -> u64 {
    pool.status().vdevs.iter().flat_map(|t| t.children.iter()).map(|l| l.repaired_bytes).sum()
}

/// Damages `nparity` columns of every data block, reads every file back
/// while damaged, scrubs, and checks the counts and the devices.
fn damaged_columns_read_back_and_heal(width: usize, nparity: u8) {
    let ctx = format!("raidz{nparity} of {width}");
    let (devs, pool) = raidz_pool(width, nparity, &[]);
    let files = write_files(&pool, width as u64 * 10 + nparity as u64);
    let objs: Vec<u64> = files.iter().map(|f| f.0).collect();
    let bps = data_blocks(&pool, &objs);
    assert!(bps.len() >= 12, "{ctx}: {} data blocks", bps.len());
    let g = geometry(&pool, 0);
    assert_eq!((g.width(), g.nparity()), (width, nparity as usize));
    close(pool);
    let mut rng = Rng::new(0xD00D + width as u64);
    let mut damaged = 0u64;
    let mut truth: Vec<(RaidzColumn, Vec<u8>)> = Vec::new();
    for (i, bp) in bps.iter().enumerate() {
        let map = map_of(g, bp, 0);
        truth.extend(map.columns().iter().map(|c| (*c, column_bytes(&devs, c))));
        // Every fourth block loses its parity only, which reads never
        // touch: the scrub must find those.
        let cols = if i % 4 == 0 { map.parity_columns().to_vec() } else { pick_columns(&map, nparity as usize, &mut rng) };
        for c in cols {
            damage(&devs, &c);
            damaged += 1;
        }
    }
    let pool = open(&devs).expect("open");
    read_all(&pool, &files, &format!("{ctx}, damaged"));
    let by_reads: u64 = leaf_checksum_errors(&pool).iter().sum();
    assert!(by_reads > 0 && by_reads <= damaged, "{ctx}: reads counted {by_reads} of {damaged} damaged columns");
    assert!(leaf_repaired(&pool) >= by_reads * 512, "{ctx}: what the reads found was rewritten");
    let rep = pool.scrub().expect("scrub");
    assert!(rep.errors.is_empty(), "{ctx}: {:?}", rep.errors);
    let counted: u64 = leaf_checksum_errors(&pool).iter().sum();
    assert_eq!(counted, damaged, "{ctx}: every damaged column counted once against its device");
    assert!(rep.repaired_copies > 0 && rep.repaired_copies == rep.bad_copies, "{ctx}: {rep:?}");
    let again = pool.scrub().expect("second scrub");
    assert_eq!((again.bad_copies, again.repaired_copies), (0, 0), "{ctx}: the second scrub finds nothing: {again:?}");
    assert_eq!(leaf_checksum_errors(&pool).iter().sum::<u64>(), damaged, "{ctx}: nothing more counted");
    for (c, bytes) in &truth {
        assert!(column_bytes(&devs, c) == *bytes, "{ctx}: column on child {} at {:#x} holds its encoding again", c.child, c.offset);
    }
    verified(&pool, &ctx);
    read_all(&pool, &files, &format!("{ctx}, healed"));
}

#[test]
fn raidz1_reads_through_damaged_columns_and_heals() {
    damaged_columns_read_back_and_heal(4, 1);
}

#[test]
fn raidz2_reads_through_damaged_columns_and_heals() {
    damaged_columns_read_back_and_heal(6, 2);
}

#[test]
fn raidz3_reads_through_damaged_columns_and_heals() {
    damaged_columns_read_back_and_heal(7, 3);
}

/// Regression: space log and checkpoint blocks were written as long as
/// their allocation while reads ask for their payload in whole sectors; on
/// RAID-Z the column map follows from that length, so every space block
/// read back with columns "damaged" (healed by reconstruction, counted as
/// checksum errors on healthy devices).
#[test]
fn an_undamaged_pool_scrubs_clean() {
    let (devs, pool) = raidz_pool(5, 2, &[]);
    let files = write_files(&pool, 1);
    for _ in 0..4 {
        put(&pool, &pattern(50_000, 3));
        pool.sync().expect("sync");
    }
    let rep = pool.scrub().expect("scrub");
    assert_eq!((rep.bad_copies, rep.repaired_copies, rep.repaired_bytes), (0, 0, 0), "{rep:?}");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(leaf_checksum_errors(&pool), vec![0; 5]);
    close(pool);
    let pool = open(&devs).expect("open");
    read_all(&pool, &files, "reopened");
    assert_eq!(leaf_checksum_errors(&pool), vec![0; 5], "nothing reconstructed on import or read");
}

#[test]
fn more_damaged_columns_than_parity_is_an_error_never_wrong_data() {
    let (devs, pool) = raidz_pool(6, 2, &[]);
    let (obj, data, bps) = one_file(&pool, 500_000, 5);
    let g = geometry(&pool, 0);
    let victim = bps.iter().find(|bp| map_of(g, bp, 0).columns().len() == 6).expect("a full-width block");
    close(pool);
    let map = map_of(g, victim, 0);
    for c in &map.columns()[1..4] {
        damage(&devs, c);
    }
    let pool = open(&devs).expect("open");
    let e = pool.root().read(obj, 0, data.len()).expect_err("three damaged columns on raidz2 cannot be read");
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    // The blocks around it still read.
    let rep = pool.scrub().expect("scrub");
    assert_eq!(rep.bad_copies, 1, "the scrub finds the one block: {rep:?}");
    assert_eq!(rep.errors.len(), 1, "and reports it: {:?}", rep.errors);
    assert!(leaf_checksum_errors(&pool).iter().all(|n| *n >= 1), "a block no combination verifies counts against every child read");
}

#[test]
fn missing_children_leave_the_pool_degraded_and_working() {
    let (devs, pool) = raidz_pool(6, 2, &[]);
    let files = write_files(&pool, 3);
    close(pool);
    // Children 1 and 4 gone.
    let named: Vec<(String, Arc<dyn BlockDevice>)> = as_dyn(&devs).into_iter().enumerate().filter(|(i, _)| *i != 1 && *i != 4).map(|(_, d)| d).collect();
    let pool = Pool::open_on(named, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("raidz2 imports without two children");
    let st = pool.status();
    assert_eq!(st.state, "DEGRADED", "{st:?}");
    assert_eq!((st.vdevs[0].path.as_str(), st.vdevs[0].state.as_str()), ("raidz2-0", "DEGRADED"));
    assert_eq!(st.vdevs[0].children[1].state, "UNAVAIL");
    assert_eq!(st.vdevs[0].children[4].state, "UNAVAIL");
    read_all(&pool, &files, "two children missing");
    let more = pattern(700_000, 77);
    let more_obj = put(&pool, &more);
    pool.sync().expect("a degraded pool still syncs");
    assert!(pool.core().vdevs.get(0).expect("a top-level vdev").children[1].dtl.lock().span().is_some(), "the missing child's DTL records what it missed");
    verified(&pool, "degraded");
    assert_eq!(pool.root().read(more_obj, 0, more.len()).expect("read"), more);
    pool.export().expect("export degraded");
    drop(pool);
    // Back with every child: import resilvers 1 and 4 (their newest
    // uberblock is older than the pool's), writing their columns of what
    // they missed.
    let pool = open(&devs).expect("reopen whole");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty() && rep.repaired_bytes > 0, "{rep:?}");
    assert_eq!(pool.status().state, "ONLINE");
    read_all(&pool, &files, "whole again");
    assert_eq!(pool.root().read(more_obj, 0, more.len()).expect("read what they missed"), more);
    let rep = pool.scrub().expect("scrub");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(rep.bad_copies, 0, "the resilver left nothing for the scrub: {rep:?}");
    assert_eq!(leaf_checksum_errors(&pool), vec![0; 6], "nothing read wrong");
    verified(&pool, "healed after the children came back");
}

/// Resilver on RAID-Z (`pool/resilver.rs` through `Vdev::resilver_columns`)
/// writes onto the child its columns — not the whole block at the vdev's
/// offset, which would land on other blocks' sectors — and only of what it
/// missed: here 4 MiB written while it was offline, of which a RAID-Z2 of 6
/// puts a quarter of the data's size on each child (with parity, a sixth of
/// 1.5×). After it, the child's columns serve reads that need them.
#[test]
fn an_offline_child_resilvers_its_columns_of_what_it_missed() {
    let (devs, pool) = raidz_pool(6, 2, &[]);
    let old = write_files(&pool, 21);
    pool.offline("mem3", false).expect("offline");
    assert_eq!(pool.status().vdevs[0].children[3].state, "OFFLINE");
    let new: Vec<(u64, Vec<u8>)> = (0..4u64).map(|i| {
        let d = pattern(1 << 20, 50 + i);
        (put(&pool, &d), d)
    }).collect();
    pool.sync().expect("sync while offline");
    read_all(&pool, &new, "one child offline");
    pool.online("mem3").expect("online");
    let rep = resilvered(&pool);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert!(rep.repaired_bytes >= 1 << 20 && rep.repaired_bytes < 2 << 20, "resilvered {} bytes for the 1 MiB of columns it missed: {rep:?}", rep.repaired_bytes);
    assert!(pool.core().vdevs.get(0).expect("a top-level vdev").children[3].dtl.lock().is_empty(), "nothing missed any more");
    assert_eq!(leaf_checksum_errors(&pool), vec![0; 6], "the resilver damaged nothing");
    close(pool);
    // Without two other children every column on mem3 is needed.
    let named: Vec<(String, Arc<dyn BlockDevice>)> = as_dyn(&devs).into_iter().enumerate().filter(|(i, _)| *i != 0 && *i != 5).map(|(_, d)| d).collect();
    let pool = Pool::open_on(named, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("degraded");
    read_all(&pool, &old, "resilvered child, two others gone");
    read_all(&pool, &new, "resilvered child, two others gone");
    verified(&pool, "resilvered raidz2");
}

/// Read-ahead on RAID-Z gathers the data columns of the blocks ahead; a
/// block it hands over damaged fails its checksum in the cache fill and is
/// read again on demand, which reconstructs it.
#[test]
fn sequential_reads_are_read_ahead_and_damage_falls_back_to_demand_reads() {
    let (devs, pool) = raidz_pool(6, 2, &[]);
    let (obj, data, bps) = one_file(&pool, 16 << 20, 12);
    let g = geometry(&pool, 0);
    close(pool);
    // One data column of every eighth block.
    for bp in bps.iter().step_by(8) {
        damage(&devs, &map_of(g, bp, 0).data_columns()[1]);
    }
    let t = tarn_engine::Tunables { zfs_arc_max: 256 << 20, zfs_arc_min: 32 << 20, ..small_tunables() };
    let pool = Pool::open_on(as_dyn(&devs), vec![], &OpenOptions { arc: common::own_arc(&t), tunables: t, ..Default::default() }).expect("open");
    let bs = 128 << 10;
    for off in (0..data.len()).step_by(bs) {
        let got = pool.root().read(obj, off as u64, bs).expect("read");
        assert!(got[..] == data[off..off + bs], "block at {off}");
    }
    let core = pool.core();
    let blocks = (data.len() / bs) as u64;
    let stat = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let found = stat(&core.cache.stats().prefetch_data_hits) + stat(&core.prefetch_stats.hits);
    assert!(found >= blocks * 3 / 4, "demand reads found only {found} of {blocks} blocks read ahead");
    let damaged = bps.iter().step_by(8).count() as u64;
    assert_eq!(leaf_checksum_errors(&pool).iter().sum::<u64>(), damaged, "each damaged block reconstructed once, on demand");
}

/// A child whose reads all fail (a dying disk that still takes writes):
/// every block is rebuilt from the other columns, the failed columns are
/// counted as read errors and rewritten.
#[test]
fn a_child_whose_reads_fail_is_read_around() {
    let (devs, pool) = raidz_pool(5, 1, &[]);
    let files = write_files(&pool, 6);
    close(pool);
    let pool = open(&devs).expect("open");
    devs[3].set_config(FaultConfig { read_error_rate: 1.0, ..Default::default() });
    read_all(&pool, &files, "child 3 unreadable");
    let st = pool.status();
    let child = &st.vdevs[0].children[3];
    assert!(child.read_errors > 0 && child.checksum_errors == 0, "{child:?}");
    assert!(child.repaired_bytes > 0, "its columns were rewritten: {child:?}");
    devs[3].set_config(FaultConfig::default());
    let rep = pool.scrub().expect("scrub");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    verified(&pool, "after read errors");
}

/// A DTL is conservative: a child that faulted in a txg may hold that
/// txg's columns all the same. When more children than parity claim to
/// have missed a block's txg but are up, their columns are read after all
/// and the checksum decides (the block is not declared lost).
#[test]
fn more_children_in_a_dtl_than_parity_are_read_after_all() {
    let (devs, pool) = raidz_pool(4, 1, &[]);
    let (obj, data, bps) = one_file(&pool, 300_000, 4);
    let birth = bps[0].birth;
    close(pool);
    let pool = open(&devs).expect("open");
    for c in &pool.core().vdevs.get(0).expect("a top-level vdev").children[1..3] {
        c.dtl.lock().add(birth);
    }
    assert_eq!(pool.root().read(obj, 0, data.len()).expect("read"), data);
    assert_eq!(leaf_checksum_errors(&pool), vec![0; 4], "nothing was wrong");
}

#[test]
fn more_children_missing_than_parity_refuses_the_import_naming_them() {
    let (devs, pool) = raidz_pool(4, 1, &[]);
    put(&pool, &pattern(10_000, 1));
    close(pool);
    let named: Vec<(String, Arc<dyn BlockDevice>)> = as_dyn(&devs).into_iter().skip(2).collect();
    let e = common::refused(Pool::open_on(named, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }), "two of raidz1 missing");
    assert!(e.msg.contains("raidz1-0") && e.msg.contains("mem0") && e.msg.contains("mem1") && !e.msg.contains("mem2"), "{}", e.msg);
}

#[test]
fn a_child_whose_writes_fail_faults_and_the_pool_goes_on() {
    let (devs, pool) = raidz_pool(4, 1, &[]);
    let a = pattern(400_000, 1);
    let a_obj = put(&pool, &a);
    pool.sync().expect("sync");
    devs[2].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    let b = pattern(400_000, 2);
    let b_obj = put(&pool, &b);
    pool.sync().expect("the pool syncs on the other children");
    assert!(pool.core().txg.failure().is_none(), "not suspended");
    let st = pool.status();
    assert_eq!(st.state, "DEGRADED", "{st:?}");
    assert_eq!(st.vdevs[0].children[2].state, "FAULTED", "{st:?}");
    assert!(!pool.core().vdevs.get(0).expect("a top-level vdev").children[2].dtl.lock().is_empty(), "the faulted child's DTL records the txgs it missed");
    verified(&pool, "one child faulted");
    assert_eq!(pool.root().read(b_obj, 0, b.len()).expect("read b degraded"), b);
    // The device comes back: what it missed is rebuilt from parity.
    pool.export().expect("export degraded");
    drop(pool);
    devs[2].set_config(FaultConfig::default());
    let pool = open(&devs).expect("reopen");
    assert_eq!(pool.root().read(a_obj, 0, a.len()).expect("read a"), a);
    assert_eq!(pool.root().read(b_obj, 0, b.len()).expect("read b"), b);
    verified(&pool, "the child is back");
}

#[test]
fn losing_more_children_than_parity_suspends_the_pool() {
    let (devs, pool) = raidz_pool(4, 1, &[]);
    put(&pool, &pattern(100_000, 1));
    pool.sync().expect("sync");
    for d in &devs[1..3] {
        d.set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    }
    put(&pool, &pattern(100_000, 2));
    let e = pool.sync().expect_err("two of raidz1 lost: the txg cannot commit");
    assert_eq!(e.kind, ErrorKind::Suspended, "{e}");
    assert!(pool.core().txg.failure().is_some_and(|f| f.contains("raidz1-0")), "{:?}", pool.core().txg.failure());
}

#[test]
fn copies_on_one_raidz_vdev_serve_and_repair_each_other() {
    let (devs, pool) = raidz_pool(3, 1, &[("copies", "2")]);
    let (obj, data, bps) = one_file(&pool, 600_000, 9);
    let g = geometry(&pool, 0);
    assert!(bps.iter().all(|bp| !bp.dva[1].is_empty()), "every block has two copies");
    close(pool);
    // Copy 0 of every block loses two columns: beyond raidz1's parity.
    let mut first: Vec<(RaidzColumn, Vec<u8>)> = Vec::new();
    for bp in &bps {
        let map = map_of(g, bp, 0);
        first.extend(map.columns().iter().map(|c| (*c, column_bytes(&devs, c))));
        for c in &map.columns()[..2] {
            damage(&devs, c);
        }
    }
    let pool = open(&devs).expect("open");
    assert_eq!(pool.root().read(obj, 0, data.len()).expect("read from the second copies"), data);
    let rep = pool.scrub().expect("scrub");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert!(rep.bad_copies >= bps.len() as u64 && rep.repaired_copies >= bps.len() as u64, "each first copy rewritten from its second: {rep:?}");
    for (c, bytes) in &first {
        assert!(column_bytes(&devs, c) == *bytes, "column on child {} at {:#x} rewritten", c.child, c.offset);
    }
    let again = pool.scrub().expect("second scrub");
    assert_eq!(again.bad_copies, 0, "{again:?}");
    verified(&pool, "copies=2 on raidz1");
}

#[test]
fn a_full_raidz_pool_refuses_writes_without_suspending() {
    let devs = mem_devs(5, 80 << 20, 21);
    let tops = vec![NewTop { layout: Layout::Raidz(2), devices: as_dyn(&devs) }];
    // Dirty data large beside the pool: admitting it at raw (undeflated)
    // space would overcommit by more than the slop reserve, and the sync
    // would find no room for parity.
    let tunables = tarn_engine::Tunables { zfs_dirty_data_max: 96 << 20, zfs_dirty_data_sync_percent: 100, zfs_txg_timeout: 3600, ..small_tunables() };
    let opts = CreateOptions { tunables, ..Default::default() };
    let pool = Pool::create_tops("tank", tops, vec![], &opts).expect("create");
    let raw = pool.status().size;
    let room = pool.root().room().expect("room");
    // RAID-Z2 of 5: a 128 KiB block takes 54 sectors for 32 of data.
    assert!(room < raw * 32 / 54 && room > raw / 3, "writers see the space parity leaves: {room} of {raw}");
    let mut written = 0u64;
    let mut small = Rng::new(4);
    let err = loop {
        let len = if small.chance(30) { 3_000 } else { 256 << 10 };
        let os = pool.root();
        let r = os.begin().and_then(|tx| {
            let obj = os.create(&tx, tarn_ondisk::ObjectType::PlainData)?;
            os.write(&tx, obj, 0, &pattern(len, written))
        });
        match r {
            Ok(()) => written += len as u64,
            Err(e) => break e,
        }
        assert!(written < raw, "writes go on past the raw size");
    };
    assert_eq!(err.kind, ErrorKind::NoSpace, "{err}");
    pool.sync().expect("a full pool still syncs");
    assert!(pool.core().txg.failure().is_none(), "not suspended");
    assert!(written > raw / 3, "{written} of {raw} raw bytes taken");
    verified(&pool, "full raidz2");
}

#[test]
fn layouts_zpool_refuses_are_refused() {
    let devs = mem_devs(7, 128 << 20, 3);
    let small = Arc::new(FaultDevice::new(96 << 20, 9).with_name("small"));
    let named = as_dyn(&devs);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let try_create = |tops: Vec<NewTop>| Pool::create_tops("tank", tops, vec![], &opts).err().expect("refused").msg;
    let z = |p: u8, d: &[(String, Arc<dyn BlockDevice>)]| NewTop { layout: Layout::Raidz(p), devices: d.to_vec() };
    let e = try_create(vec![z(2, &named[..2])]);
    assert!(e.contains("raidz2 needs at least 3 devices, 2 given"), "{e}");
    let e = try_create(vec![z(3, &named[..3])]);
    assert!(e.contains("raidz3 needs at least 4 devices, 3 given"), "{e}");
    let e = try_create(vec![z(1, &named[..3]), z(2, &named[3..7])]);
    assert!(e.contains("mismatched replication level") && e.contains("raidz1") && e.contains("raidz2"), "{e}");
    let e = try_create(vec![z(1, &named[..3]), NewTop { layout: Layout::Mirror, devices: named[3..5].to_vec() }]);
    assert!(e.contains("mismatched replication level"), "{e}");
    let with_small: Vec<(String, Arc<dyn BlockDevice>)> = named[..3].iter().cloned().chain([("small".to_string(), small.clone() as Arc<dyn BlockDevice>)]).collect();
    let e = try_create(vec![z(1, &with_small)]);
    assert!(e.contains("mismatched device sizes") && e.contains("'small'"), "{e}");
    for d in &devs {
        assert!(tarn_engine::pool::label::read_labels(d.as_ref()).config.is_none(), "a refused create writes nothing");
    }
    // Forced: raidz1 beside raidz2 is taken.
    let forced = CreateOptions { force: true, ..opts.clone() };
    let pool = Pool::create_tops("tank", vec![z(1, &named[..3]), z(2, &named[3..7])], vec![], &forced).expect("forced");
    let st = pool.status();
    let names: Vec<&str> = st.vdevs.iter().map(|v| v.path.as_str()).collect();
    assert_eq!(names, vec!["raidz1-0", "raidz2-1"]);
    assert!(st.vdevs.iter().all(|v| v.state == "ONLINE"));
    let files = write_files(&pool, 8);
    verified(&pool, "raidz1 beside raidz2");
    read_all(&pool, &files, "raidz1 beside raidz2");
}

/// Regression: damage only past a block's psize in its last data sector
/// (bytes its checksum does not cover, parity does). The scrub found the
/// data verifying and parity disagreeing, so it counted checksum errors on
/// the P and Q children, rewrote their parity to match the damage, and
/// left the damaged column as it was. Now the damaged column's child is
/// the one counted, and the column is rewritten.
#[test]
fn damage_past_the_checksummed_end_is_counted_against_its_column() {
    let (devs, pool) = raidz_pool(6, 2, &[]);
    let (obj, data, bps) = one_file(&pool, 5000, 9);
    let g = geometry(&pool, 0);
    let bp = bps.iter().find(|bp| !(bp.psize as u64).is_multiple_of(SECTOR)).expect("a block that is not whole sectors");
    close(pool);
    let map = map_of(g, bp, 0);
    let last = map.columns().len() - 1;
    let c = map.columns()[last];
    let before: Vec<Vec<u8>> = map.columns().iter().map(|c| column_bytes(&devs, c)).collect();
    let mut b = before[last].clone();
    let end = (bp.psize as u64 - map.data_range(last).start) as usize;
    b[end..].iter_mut().for_each(|x| *x = !*x);
    devs[c.child].write_at(&b, LABELS_FRONT + c.offset).expect("damage");
    let pool = open(&devs).expect("open");
    read_all(&pool, &[(obj, data)], "damaged past the checksummed end");
    let rep = pool.scrub().expect("scrub");
    assert_eq!((rep.bad_copies, rep.repaired_copies, rep.repaired_bytes), (1, 1, c.size), "{rep:?}");
    let mut want = vec![0u64; 6];
    want[c.child] = 1;
    assert_eq!(leaf_checksum_errors(&pool), want, "the damaged column's child is counted, nothing else");
    for (i, c) in map.columns().iter().enumerate() {
        assert!(column_bytes(&devs, c) == before[i], "column {i} holds its encoding");
    }
}
