//! Datasets, snapshots and clones: names and hierarchy, properties and their
//! sources, snapshot/clone/rollback/destroy semantics, exact space
//! accounting (checked against the allocator after every step), quotas,
//! persistence, and the cost of snapshots and lookups at scale.

mod common;

use std::sync::Arc;

use common::{as_dyn, first_difference, mem_devs, open, pattern, small_tunables, Rng};
use tarn_engine::dataset::{Op, Source, Types};
use tarn_engine::sys::FaultDevice;
use tarn_engine::{CreateOptions, ErrorKind, Objset, Pool};
use tarn_ondisk::ObjectType;

fn pool_of(size: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(1, size, 7);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts).expect("create");
    (devs, pool)
}

/// Writes a new object holding `data`; its id.
fn put(os: &Objset, data: &[u8]) -> u64 {
    let tx = os.begin().expect("begin");
    let obj = os.create(&tx, ObjectType::PlainData).expect("create");
    os.write(&tx, obj, 0, data).expect("write");
    obj
}

fn overwrite(os: &Objset, obj: u64, off: u64, data: &[u8]) {
    let tx = os.begin().expect("begin");
    os.write(&tx, obj, off, data).expect("write");
}

fn read_all(os: &Objset, obj: u64) -> Vec<u8> {
    let size = os.info(obj).expect("info").size;
    os.read(obj, 0, size as usize).expect("read")
}

fn num(pool: &Pool, name: &str, prop: &str) -> u64 {
    let v = pool.datasets().get(name, prop).unwrap_or_else(|e| panic!("get {name} {prop}: {e}")).value;
    v.parse().unwrap_or_else(|_| panic!("{name} {prop} = {v}"))
}

/// Syncs, then: the checker is clean, the dataset invariants hold, and the
/// pool's allocation is exactly the datasets' used plus the MOS and the
/// space log (every block owned by exactly one dataset).
fn check(pool: &Pool, ctx: &str) -> u64 {
    let rep = common::verified(pool, ctx);
    let used = num(pool, "tank", "used");
    assert_eq!(rep.allocated_bytes, used + rep.mos_bytes + rep.space_bytes, "{ctx}: allocated vs used {used} + MOS {} + space {}", rep.mos_bytes, rep.space_bytes);
    used
}

#[test]
fn hierarchy_names_and_parents() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/a", &[], false).unwrap();
    ds.create("tank/a/b", &[], false).unwrap();
    let e = ds.create("tank/x/y", &[], false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(e.msg.contains("tank/x"), "{e}");
    ds.create("tank/x/y/z", &[], true).unwrap();
    assert!(ds.exists("tank/x/y"));
    assert_eq!(ds.create("tank/a", &[], false).unwrap_err().kind, ErrorKind::Exists);
    for bad in ["tank//a", "tank/a b", "other/a", "tank/a@", "tank/a/", &format!("tank/{}", "n".repeat(260))] {
        assert_eq!(ds.create(bad, &[], true).unwrap_err().kind, ErrorKind::Invalid, "{bad}");
    }
    let names = ds.names("tank", true, Types::FILESYSTEMS).unwrap();
    assert_eq!(names, ["tank", "tank/a", "tank/a/b", "tank/x", "tank/x/y", "tank/x/y/z"].map(String::from).to_vec());
    assert_eq!(ds.names("tank/a", false, Types::ALL).unwrap(), vec!["tank/a".to_string()]);
    let list = ds.list("tank/x", true, Types::ALL).unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0].prop("type").unwrap().value, "filesystem");
    let e = ds.destroy("tank/a", false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Busy, "{e}");
    assert!(e.msg.contains("tank/a/b"), "{e}");
    assert_eq!(ds.destroy("tank", true).unwrap_err().kind, ErrorKind::Invalid);
    ds.destroy("tank/x", true).unwrap();
    assert!(!ds.exists("tank/x/y/z") && !ds.exists("tank/x"));
    ds.destroy("tank/a/b", false).unwrap();
    check(&pool, "after destroys");
    assert_eq!(ds.names("tank", true, Types::ALL).unwrap(), vec!["tank".to_string(), "tank/a".to_string()]);
}

#[test]
fn properties_inherit_with_sources_and_apply_live() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/a/b/c", &[], true).unwrap();
    let get = |n: &str, p: &str| ds.get(n, p).unwrap();
    assert_eq!(get("tank/a/b", "compression").value, "lz4");
    assert_eq!(get("tank/a/b", "compression").source, Source::Default);
    ds.set("tank/a", "compression", "off").unwrap();
    assert_eq!(get("tank/a", "compression").source, Source::Local);
    let v = get("tank/a/b/c", "compression");
    assert_eq!((v.value.as_str(), v.source.to_string().as_str()), ("off", "inherited from tank/a"));
    ds.set("tank/a/b", "compression", "zstd-3").unwrap();
    assert_eq!(get("tank/a/b/c", "compression").source, Source::Inherited("tank/a/b".into()));
    ds.inherit("tank/a/b", "compression").unwrap();
    assert_eq!(get("tank/a/b/c", "compression").value, "off");
    // mountpoint: the path below the ancestor is appended.
    assert_eq!(get("tank/a/b/c", "mountpoint").value, "/tank/a/b/c");
    ds.set("tank/a", "mountpoint", "/mnt/x").unwrap();
    assert_eq!(get("tank/a/b/c", "mountpoint").value, "/mnt/x/b/c");
    // quota and canmount are not inherited.
    ds.set("tank/a", "quota", "1G").unwrap();
    assert_eq!(get("tank/a/b", "quota").source, Source::Default);
    assert_eq!(get("tank/a/b", "used").source, Source::None);
    // Clear errors naming the property and the allowed values.
    let e = ds.set("tank/a", "atime", "sometimes").unwrap_err();
    assert!(e.kind == ErrorKind::Invalid && e.msg.contains("atime") && e.msg.contains("on, off"), "{e}");
    let e = ds.set("tank/a", "recordsize", "3000").unwrap_err();
    assert!(e.msg.contains("recordsize") && e.msg.contains("power of two"), "{e}");
    assert!(ds.set("tank/a", "used", "5").unwrap_err().msg.contains("read-only"));
    for (p, v) in [("sync", "always"), ("logbias", "throughput"), ("primarycache", "metadata"), ("secondarycache", "none"), ("canmount", "noauto"), ("copies", "2"), ("relatime", "off"), ("checksum", "blake3")] {
        ds.set("tank/a/b", p, v).unwrap_or_else(|e| panic!("{p}={v}: {e}"));
        assert_eq!(get("tank/a/b", p).value, v);
    }
    // Live: an open object set takes a new record size and read-only flag.
    let os = ds.objset("tank/a/b/c").unwrap();
    ds.set("tank/a", "recordsize", "8K").unwrap();
    assert_eq!(os.props().recordsize, 8192);
    assert_eq!(os.props().write.copies, 2, "copies=2 inherited from tank/a/b");
    let obj = put(&os, &pattern(100_000, 1));
    assert_eq!(os.info(obj).unwrap().blksz, 8192);
    ds.set("tank/a/b", "readonly", "on").unwrap();
    let tx = os.begin().unwrap();
    let e = os.write(&tx, obj, 0, b"x").unwrap_err();
    assert!(e.msg.contains("read-only"), "{e}");
    drop(tx);
    ds.inherit("tank/a/b", "readonly").unwrap();
    overwrite(&os, obj, 0, b"y");
    check(&pool, "properties");
}

#[test]
fn snapshot_clone_rollback_destroy_semantics() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/fs", &[], false).unwrap();
    let os = ds.objset("tank/fs").unwrap();
    let v1 = pattern(300_000, 1);
    let obj = put(&os, &v1);
    ds.snapshot("tank/fs@s1").unwrap();
    let v2 = pattern(300_000, 2);
    overwrite(&os, obj, 0, &v2);
    let extra = put(&os, b"only after s1");
    check(&pool, "after s1 and overwrite");
    // The snapshot reads as of its txg and refuses writes.
    let snap = ds.objset("tank/fs@s1").unwrap();
    assert!(read_all(&snap, obj) == v1, "snapshot content changed");
    assert!(snap.info(extra).is_err(), "an object created after the snapshot is in it");
    let tx = snap.begin().unwrap();
    assert!(snap.write(&tx, obj, 0, b"x").unwrap_err().msg.contains("read-only"));
    drop(tx);
    assert!(ds.create("tank/fs@x", &[], false).is_err());
    // Clone: a writable copy of s1.
    ds.clone_snapshot("tank/fs@s1", "tank/cl", &[]).unwrap();
    let cl = ds.objset("tank/cl").unwrap();
    assert!(read_all(&cl, obj) == v1);
    overwrite(&cl, obj, 0, b"clone was here");
    assert_eq!(ds.get("tank/cl", "origin").unwrap().value, "tank/fs@s1");
    check(&pool, "after clone");
    assert!(read_all(&snap, obj) == v1, "a clone write changed its origin");
    let e = ds.destroy("tank/fs@s1", false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Busy);
    assert!(e.msg.contains("tank/cl"), "{e}");
    // Rollback: the head is s1 again; writes after it work.
    ds.snapshot("tank/fs@s2").unwrap();
    assert_eq!(ds.rollback("tank/fs@s1").unwrap_err().kind, ErrorKind::Busy, "s2 is later");
    ds.snapshot("tank/fs@s3").unwrap();
    ds.rollback_destroying_later("tank/fs@s1").unwrap();
    assert!(!ds.exists("tank/fs@s2") && !ds.exists("tank/fs@s3"));
    assert!(read_all(&os, obj) == v1, "rollback: {}", first_difference(&read_all(&os, obj), &v1));
    assert!(os.info(extra).is_err());
    check(&pool, "after rollback");
    overwrite(&os, obj, 1000, b"after rollback");
    let mut want = v1.clone();
    want[1000..1014].copy_from_slice(b"after rollback");
    check(&pool, "write after rollback");
    assert!(read_all(&os, obj) == want);
    assert!(read_all(&snap, obj) == v1);
    // Destroying the clone frees only its own blocks; then s1 can go.
    ds.destroy("tank/cl", false).unwrap();
    assert!(cl.begin().and_then(|tx| cl.write(&tx, obj, 0, b"z")).is_err(), "a destroyed clone took a write");
    assert_eq!(cl.read(obj, 0, 10).unwrap_err().kind, ErrorKind::NotFound, "a destroyed clone's blocks may be reused");
    check(&pool, "after clone destroy");
    ds.destroy("tank/fs@s1", false).unwrap();
    check(&pool, "after s1 destroy");
    assert!(read_all(&os, obj) == want);
    ds.destroy("tank/fs", true).unwrap();
    check(&pool, "all destroyed");
}

/// Random writes, snapshots, clones and destroys over several datasets:
/// after every step the allocator holds exactly what the datasets use; a
/// snapshot destroy frees exactly its `used` (unique) bytes; written is
/// what was born since the previous snapshot; and once everything is gone
/// the datasets use what an empty pool's root does.
#[test]
fn space_accounting_is_exact() {
    let (_d, pool) = pool_of(256 << 20);
    let ds = pool.datasets();
    let empty = check(&pool, "empty");
    let mut rng = Rng::new(42);
    let fss = ["tank/a", "tank/a/b", "tank/c"];
    for f in fss {
        ds.create(f, &[("recordsize", "16K")], true).unwrap();
    }
    let mut objs: Vec<(String, u64)> = Vec::new();
    let mut snaps: Vec<String> = Vec::new();
    for step in 0..40 {
        let f = fss[rng.below(3) as usize];
        let os = ds.objset(f).unwrap();
        match rng.below(10) {
            0..=4 => {
                let mine: Vec<u64> = objs.iter().filter(|(n, _)| n == f).map(|(_, o)| *o).collect();
                if mine.is_empty() || rng.chance(30) {
                    objs.push((f.to_string(), put(&os, &pattern(rng.range(1, 200_000) as usize, rng.next_u64()))));
                } else {
                    let o = mine[rng.below(mine.len() as u64) as usize];
                    overwrite(&os, o, rng.below(150_000), &pattern(rng.range(1, 60_000) as usize, rng.next_u64()));
                }
            }
            5 => {
                let mine: Vec<usize> = (0..objs.len()).filter(|&i| objs[i].0 == f).collect();
                if let Some(&i) = mine.first() {
                    let tx = os.begin().unwrap();
                    os.free(&tx, objs.remove(i).1).unwrap();
                }
            }
            6..=8 => {
                let s = format!("{f}@s{step}");
                ds.snapshot(&s).unwrap();
                snaps.push(s);
            }
            _ => {
                if !snaps.is_empty() {
                    let s = snaps.remove(rng.below(snaps.len() as u64) as usize);
                    destroy_snapshot_exactly(&pool, &s);
                }
            }
        }
        check(&pool, &format!("step {step}"));
    }
    // written of the newest snapshot of a: referenced minus what it shares.
    while let Some(s) = snaps.pop() {
        destroy_snapshot_exactly(&pool, &s);
        check(&pool, &format!("destroyed {s}"));
    }
    for f in fss {
        assert_eq!(num(&pool, f, "usedbysnapshots"), 0, "{f}");
        assert_eq!(num(&pool, f, "written"), num(&pool, f, "referenced"), "{f}");
    }
    ds.destroy("tank/a", true).unwrap();
    ds.destroy("tank/c", true).unwrap();
    assert_eq!(check(&pool, "everything destroyed"), empty, "the pool's datasets use what they used when empty");
}

/// Destroys snapshot `s` and checks that exactly its unique bytes left the pool.
fn destroy_snapshot_exactly(pool: &Pool, s: &str) {
    pool.sync().unwrap();
    let unique = num(pool, s, "used");
    let before = pool.verify().unwrap();
    pool.datasets().destroy(s, false).unwrap();
    pool.sync().unwrap();
    let after = pool.verify().unwrap();
    let data = |r: &tarn_engine::pool::verify::VerifyReport| r.allocated_bytes - r.mos_bytes - r.space_bytes;
    assert_eq!(data(&before) - data(&after), unique, "destroying {s} freed other than its unique bytes");
}

#[test]
fn written_and_unique_follow_births() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/w", &[("compression", "off"), ("recordsize", "64K")], false).unwrap();
    let os = ds.objset("tank/w").unwrap();
    let obj = put(&os, &pattern(1 << 20, 3));
    ds.snapshot("tank/w@a").unwrap();
    assert_eq!(num(&pool, "tank/w@a", "written"), num(&pool, "tank/w@a", "referenced"));
    assert_eq!(num(&pool, "tank/w", "written"), 0, "nothing born since @a");
    overwrite(&os, obj, 0, &pattern(256 << 10, 4)); // 4 records of 64K replaced
    pool.sync().unwrap();
    ds.snapshot("tank/w@b").unwrap();
    let w = num(&pool, "tank/w@b", "written");
    assert!((256 << 10..(256 << 10) + (64 << 10)).contains(&w), "written {w}: four new records plus metadata");
    overwrite(&os, obj, 0, &pattern(64 << 10, 5)); // one record replaced again
    pool.sync().unwrap();
    // The record born between @a and @b is now held by @b alone.
    let u = num(&pool, "tank/w@b", "used");
    assert!((64 << 10..(64 << 10) + (32 << 10)).contains(&u), "unique of @b: {u}");
    // Uncompressed data; only the (lz4) indirect and dnode blocks compress.
    let ratio: f64 = ds.get("tank/w", "compressratio").unwrap().value.trim_end_matches('x').parse().unwrap();
    assert!((1.0..1.3).contains(&ratio), "compressratio {ratio}");
    check(&pool, "births");
}

#[test]
fn snapshot_cost_does_not_depend_on_size() {
    let (devs, pool) = pool_of(256 << 20);
    let ds = pool.datasets();
    let mut costs = Vec::new();
    for (f, mib) in [("tank/small", 1usize), ("tank/big", 48)] {
        ds.create(f, &[("compression", "off")], false).unwrap();
        let os = ds.objset(f).unwrap();
        for i in 0..mib {
            put(&os, &pattern(1 << 20, i as u64));
        }
        pool.sync().unwrap();
        pool.sync().unwrap();
        let w0 = devs[0].stats().bytes_written;
        let loaded = os.loaded_objects();
        ds.snapshot(&format!("{f}@now")).unwrap();
        costs.push(devs[0].stats().bytes_written - w0);
        assert_eq!(os.loaded_objects(), loaded, "the snapshot touched objects of {f}");
    }
    eprintln!("snapshot of 1 MiB wrote {} bytes, of 48 MiB {} bytes", costs[0], costs[1]);
    // One MOS sync either way (records, dnode blocks, MOS root, uberblocks).
    assert!(costs[1] <= costs[0] + (64 << 10), "snapshot of 48 MiB wrote {} bytes, of 1 MiB {}", costs[1], costs[0]);
    assert!(costs[1] < 1 << 20, "snapshot wrote {} bytes", costs[1]);
    check(&pool, "snapshots");
}

#[test]
fn quota_refuses_then_space_comes_back() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/q", &[("quota", "2M"), ("compression", "off")], false).unwrap();
    ds.create("tank/q/in", &[], false).unwrap();
    let avail = num(&pool, "tank/q/in", "available");
    assert!(avail <= 2 << 20, "available {avail} ignores the parent's quota");
    let os = ds.objset("tank/q/in").unwrap();
    let mut objs = Vec::new();
    let err = loop {
        let tx = os.begin().unwrap();
        let obj = os.create(&tx, ObjectType::PlainData).unwrap();
        match os.write(&tx, obj, 0, &pattern(256 << 10, objs.len() as u64)) {
            Ok(()) => objs.push(obj),
            Err(e) => break e,
        }
        drop(tx);
        pool.sync().unwrap();
        assert!(objs.len() < 20, "the quota never bit");
    };
    assert_eq!(err.kind, ErrorKind::Quota, "a quota refuses with EDQUOT, not ENOSPC: {err}");
    assert!(err.msg.contains("tank/q") && err.msg.contains("quota"), "{err}");
    let used = num(&pool, "tank/q", "used");
    assert!(used <= (2 << 20) + (256 << 10), "used {used} beyond the quota");
    let tx = os.begin().unwrap();
    for o in objs.drain(..) {
        os.free(&tx, o).unwrap();
    }
    drop(tx);
    pool.sync().unwrap();
    put(&os, &pattern(256 << 10, 99));
    // A reservation elsewhere lowers everyone else's available space.
    let before = num(&pool, "tank", "available");
    ds.create("tank/r", &[("reservation", "16M")], false).unwrap();
    ds.create("tank/c0", &[], false).unwrap();
    let c0 = num(&pool, "tank/c0", "available");
    assert!(c0 + (16 << 20) <= before + (2 << 20), "available {c0} vs {before}: the reservation is not subtracted");
    assert!(num(&pool, "tank", "used") >= 16 << 20, "the reservation is charged to its parent");
    check_no_used_equation(&pool);
}

/// With a reservation the simple used = allocated equation does not hold
/// (reserved space is charged but not allocated); the checker must still
/// be clean.
fn check_no_used_equation(pool: &Pool) {
    pool.sync().unwrap();
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    pool.check_invariants().unwrap();
}

#[test]
fn everything_persists_across_export_and_import() {
    let (devs, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/p/q", &[("atime", "off")], true).unwrap();
    let os = ds.objset("tank/p/q").unwrap();
    let obj = put(&os, &pattern(200_000, 8));
    ds.snapshot("tank/p/q@one").unwrap();
    overwrite(&os, obj, 0, &pattern(5000, 9));
    ds.clone_snapshot("tank/p/q@one", "tank/p/cl", &[]).unwrap();
    ds.set("tank/p", "compression", "zstd").unwrap();
    let before = ds.list("tank", true, Types::ALL).unwrap();
    let cur = read_all(&os, obj);
    drop(os);
    pool.export().unwrap();
    let pool = open(&devs).unwrap();
    let ds = pool.datasets();
    let after = ds.list("tank", true, Types::ALL).unwrap();
    // Everything but the pool's free space (the import rewrote labels, not data).
    let flat = |l: &[tarn_engine::dataset::DatasetInfo]| {
        l.iter().map(|i| (i.name.clone(), format!("{:?}", i.props.iter().filter(|(n, _)| n != "available").collect::<Vec<_>>()))).collect::<Vec<_>>()
    };
    assert_eq!(flat(&before), flat(&after));
    assert_eq!(ds.get("tank/p/q", "compression").unwrap().source, Source::Inherited("tank/p".into()));
    assert!(read_all(&ds.objset("tank/p/q@one").unwrap(), obj) == pattern(200_000, 8));
    assert!(read_all(&ds.objset("tank/p/cl").unwrap(), obj) == pattern(200_000, 8));
    assert!(read_all(&ds.objset("tank/p/q").unwrap(), obj) == cur);
    check(&pool, "reopened");
    ds.snapshot("tank/p/q@two").unwrap();
    ds.destroy("tank/p/cl", false).unwrap();
    ds.destroy("tank/p/q@one", false).unwrap();
    check(&pool, "changed after reopen");
}

/// Thousands of datasets and snapshots: a lookup by name reads a constant
/// number of blocks, measured on a freshly imported pool (nothing cached)
/// with 50 datasets and with 5,000 + 1,000 snapshots.
#[test]
fn lookups_do_not_degrade_with_many_datasets() {
    fn batch(pool: &Pool, lo: usize, hi: usize) {
        let ops = (lo..hi).map(|i| Op::Create { name: format!("tank/g{}/d{}", i % 50, i), props: vec![], parents: true }).collect();
        for r in pool.datasets().run(ops).unwrap() {
            r.unwrap();
        }
    }
    let (devs, pool) = pool_of(256 << 20);
    batch(&pool, 0, 50);
    let (devs, pool) = lookup_reads(devs, pool, 50, 0);
    for lo in (50..5000).step_by(1000) {
        batch(&pool, lo, (lo + 1000).min(5000));
    }
    let snaps = (0..1000).map(|i| Op::Snapshot { name: format!("tank/g{}/d{}@s", i % 50, i) }).collect();
    for r in pool.datasets().run(snaps).unwrap() {
        r.unwrap();
    }
    assert_eq!(pool.datasets().names("tank", true, Types::ALL).unwrap().len(), 1 + 50 + 5000 + 1000);
    lookup_reads(devs, pool, 5000, 1000);
}

/// Reopens the pool and counts device reads per lookup of random names.
fn lookup_reads(devs: Vec<Arc<FaultDevice>>, pool: Pool, n: usize, snaps: usize) -> (Vec<Arc<FaultDevice>>, Pool) {
    pool.check_invariants().unwrap();
    pool.export().unwrap();
    let mut t = small_tunables();
    t.zfs_arc_max = 4 << 20;
    t.zfs_arc_min = 4 << 20;
    let pool = Pool::open_on(as_dyn(&devs), vec![], &tarn_engine::OpenOptions { tunables: t, ..Default::default() }).unwrap();
    let mut rng = Rng::new(n as u64);
    let lookups = 40;
    let r0 = devs[0].stats().reads;
    for _ in 0..lookups {
        let i = rng.below(n as u64);
        let name = if snaps > 0 && rng.chance(50) { format!("tank/g{}/d{}@s", i % 50, i % snaps as u64) } else { format!("tank/g{}/d{}", i % 50, i) };
        assert_eq!(pool.datasets().get(&name, "type").unwrap().source, Source::None, "{name}");
    }
    let per = (devs[0].stats().reads - r0) as f64 / lookups as f64;
    eprintln!("{n} datasets, {snaps} snapshots: {per:.2} device reads per lookup");
    assert!(per <= 4.0, "{per} reads per lookup with {n} datasets");
    (devs, pool)
}

/// The root dataset can be snapshotted and rolled back too; `Pool::root()`
/// stays the same object set and shows the rolled-back content.
#[test]
fn root_dataset_rollback_keeps_its_handle() {
    let (_d, pool) = pool_of(128 << 20);
    let root = pool.root().clone();
    let obj = put(&root, &pattern(50_000, 1));
    pool.datasets().snapshot("tank@base").unwrap();
    overwrite(&root, obj, 0, &pattern(50_000, 2));
    let later = put(&root, b"later");
    check(&pool, "before rollback");
    pool.datasets().rollback("tank@base").unwrap();
    assert!(read_all(pool.root(), obj) == pattern(50_000, 1));
    assert!(pool.root().info(later).is_err());
    overwrite(pool.root(), obj, 10, b"again");
    check(&pool, "after rollback");
    pool.datasets().destroy("tank@base", false).unwrap();
    check(&pool, "after destroying the snapshot");
}

/// Random histories with clones of clones: writes, snapshots, clones,
/// rollbacks and destroys in any valid order. After every step the checker
/// is clean and allocation equals the datasets' used (clones own only what
/// they wrote); every snapshot keeps its content; at the end everything is
/// destroyed and the datasets use what they used when empty.
#[test]
fn random_clone_histories_never_leak() {
    let (mut clones, mut rollbacks, mut destroys) = (0, 0, 0);
    for seed in 0..4u64 {
        let (_d, pool) = pool_of(256 << 20);
        let ds = pool.datasets();
        let empty = check(&pool, "empty");
        let mut rng = Rng::new(seed);
        // name → (object, content) of every live file system and snapshot.
        let mut live: Vec<(String, u64, Vec<u8>)> = Vec::new();
        ds.create("tank/f0", &[("recordsize", "8K")], false).unwrap();
        let os = ds.objset("tank/f0").unwrap();
        let first = pattern(100_000, seed);
        live.push(("tank/f0".into(), put(&os, &first), first));
        for step in 0..40 {
            let ctx = format!("seed {seed} step {step}");
            let fss: Vec<usize> = (0..live.len()).filter(|&i| !live[i].0.contains('@')).collect();
            let snaps: Vec<usize> = (0..live.len()).filter(|&i| live[i].0.contains('@')).collect();
            match rng.below(10) {
                0..=3 if !fss.is_empty() => {
                    let i = fss[rng.below(fss.len() as u64) as usize];
                    let os = ds.objset(&live[i].0).unwrap();
                    let (off, data) = (rng.below(90_000), pattern(rng.range(1, 40_000) as usize, rng.next_u64()));
                    overwrite(&os, live[i].1, off, &data);
                    let c = &mut live[i].2;
                    c.resize(c.len().max(off as usize + data.len()), 0);
                    c[off as usize..off as usize + data.len()].copy_from_slice(&data);
                }
                4..=5 if !fss.is_empty() => {
                    let i = fss[rng.below(fss.len() as u64) as usize];
                    let s = format!("{}@s{step}", live[i].0);
                    ds.snapshot(&s).unwrap();
                    let (o, c) = (live[i].1, live[i].2.clone());
                    live.push((s, o, c));
                }
                6 if !snaps.is_empty() => {
                    let i = snaps[rng.below(snaps.len() as u64) as usize];
                    let name = format!("tank/c{step}");
                    ds.clone_snapshot(&live[i].0, &name, &[]).unwrap();
                    clones += 1;
                    let (o, c) = (live[i].1, live[i].2.clone());
                    live.push((name, o, c));
                }
                7 if !snaps.is_empty() => {
                    let i = snaps[rng.below(snaps.len() as u64) as usize];
                    let s = live[i].0.clone();
                    match ds.rollback(&s) {
                        Ok(()) => {
                            rollbacks += 1;
                            let fs = s.split('@').next().unwrap().to_string();
                            let c = live[i].2.clone();
                            live.iter_mut().filter(|e| e.0 == fs).for_each(|e| e.2 = c.clone());
                        }
                        Err(e) => assert_eq!(e.kind, ErrorKind::Busy, "{ctx}: {e}"),
                    }
                }
                _ if live.len() > 1 => {
                    let i = rng.below(live.len() as u64) as usize;
                    let name = live[i].0.clone();
                    match ds.destroy(&name, false) {
                        Ok(()) => {
                            destroys += 1;
                            live.remove(i);
                        }
                        Err(e) => assert_eq!(e.kind, ErrorKind::Busy, "{ctx}: destroy {name}: {e}"),
                    }
                }
                _ => {}
            }
            check(&pool, &ctx);
            for (name, obj, want) in &live {
                let got = read_all(&ds.objset(name).unwrap(), *obj);
                assert!(got == *want, "{ctx}: {name}: {}", first_difference(&got, want));
            }
        }
        // Tear down: clones and snapshots in any order that is allowed.
        let mut guard = 0;
        while !live.is_empty() {
            guard += 1;
            assert!(guard < 10_000, "seed {seed}: nothing could be destroyed: {:?}", live.iter().map(|e| &e.0).collect::<Vec<_>>());
            let i = rng.below(live.len() as u64) as usize;
            if ds.destroy(&live[i].0, false).is_ok() {
                let n = live.remove(i).0;
                check(&pool, &format!("seed {seed}: teardown after {n}"));
            }
        }
        assert_eq!(check(&pool, "all gone"), empty, "seed {seed}");
    }
    eprintln!("{clones} clones, {rollbacks} rollbacks, {destroys} destroys before teardown");
    assert!(clones > 0 && rollbacks > 0 && destroys > 0, "the histories exercised too little");
}

/// A reservation keeps its space: other datasets run out first, and a
/// reservation larger than what is available is refused.
#[test]
fn reservation_holds_space_for_its_dataset() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    assert_eq!(ds.create("tank/huge", &[("reservation", "1T")], false).unwrap_err().kind, ErrorKind::NoSpace);
    ds.create("tank/huge", &[], false).unwrap();
    let e = ds.set("tank/huge", "reservation", "1T").unwrap_err();
    assert!(e.kind == ErrorKind::NoSpace && e.msg.contains("tank/huge"), "{e}");
    ds.destroy("tank/huge", false).unwrap();
    let avail = num(&pool, "tank", "available");
    ds.create("tank/r", &[("reservation", &(avail - (24 << 20)).to_string())], false).unwrap();
    ds.create("tank/o", &[("compression", "off")], false).unwrap();
    let os = ds.objset("tank/o").unwrap();
    let mut written = 0u64;
    let err = loop {
        let tx = os.begin().unwrap();
        let obj = os.create(&tx, ObjectType::PlainData).unwrap();
        match os.write(&tx, obj, 0, &pattern(1 << 20, written)) {
            Ok(()) => written += 1 << 20,
            Err(e) => break e,
        }
        drop(tx);
        pool.sync().unwrap();
        assert!(written < 64 << 20, "the reservation never held");
    };
    assert_eq!(err.kind, ErrorKind::NoSpace, "{err}");
    assert!(err.msg.contains("reserved"), "{err}");
    assert!(written <= 24 << 20, "wrote {written} bytes past the reservation");
    // The reserving dataset can still write.
    put(&ds.objset("tank/r").unwrap(), &pattern(4 << 20, 1));
    ds.set("tank/r", "reservation", "none").unwrap();
    put(&os, &pattern(1 << 20, 2));
    check(&pool, "reservation released");
}

/// Rename moves a file system with its descendants and snapshots (data,
/// inherited properties and lookups follow), and renames a snapshot in place.
#[test]
fn rename_moves_subtrees_and_snapshots() {
    let (devs, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/a/b/c", &[], true).unwrap();
    ds.create("tank/z", &[("compression", "zstd")], false).unwrap();
    let os = ds.objset("tank/a/b/c").unwrap();
    let obj = put(&os, &pattern(70_000, 5));
    ds.snapshot("tank/a/b/c@s").unwrap();
    ds.snapshot("tank/a/b@t").unwrap();
    assert_eq!(ds.rename("tank/a", "tank/a/b/x").unwrap_err().kind, ErrorKind::Invalid, "below itself");
    assert_eq!(ds.rename("tank/a/b", "tank/z").unwrap_err().kind, ErrorKind::Exists);
    assert_eq!(ds.rename("tank/a/b@t", "tank/z@t").unwrap_err().kind, ErrorKind::Invalid);
    ds.rename("tank/a/b", "tank/z/m").unwrap();
    for gone in ["tank/a/b", "tank/a/b/c", "tank/a/b/c@s", "tank/a/b@t"] {
        assert!(!ds.exists(gone), "{gone}");
    }
    assert_eq!(ds.get("tank/z/m/c", "compression").unwrap().source, Source::Inherited("tank/z".into()));
    assert_eq!(ds.get("tank/z/m/c", "mountpoint").unwrap().value, "/tank/z/m/c");
    assert!(read_all(&ds.objset("tank/z/m/c@s").unwrap(), obj) == pattern(70_000, 5));
    ds.rename("tank/z/m@t", "tank/z/m@u").unwrap();
    overwrite(&os, obj, 0, b"still the same object set");
    check(&pool, "after renames");
    pool.export().unwrap();
    let pool = open(&devs).unwrap();
    let ds = pool.datasets();
    assert_eq!(
        ds.names("tank", true, Types::ALL).unwrap(),
        ["tank", "tank/a", "tank/z", "tank/z/m", "tank/z/m@u", "tank/z/m/c", "tank/z/m/c@s"].map(String::from).to_vec()
    );
    assert!(read_all(&ds.objset("tank/z/m/c").unwrap(), obj)[..25] == *b"still the same object set");
    check(&pool, "reopened");
}

/// Issue 11 item 13: `destroy(fs@snap, recursive)` destroyed only
/// `fs@snap`. It destroys the snapshot in every descendant that has it (in
/// one txg), is NotFound only when none has it, and destroys nothing when
/// one of them has a clone; space stays exact throughout.
#[test]
fn recursive_destroy_of_a_snapshot_reaches_every_descendant() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/a/b", &[], true).unwrap();
    ds.create("tank/a/c", &[], false).unwrap();
    put(&ds.objset("tank/a/b").unwrap(), &pattern(1, 256 << 10));
    for s in ["tank/a/b@x", "tank/a/c@x", "tank/a@y", "tank/a/c@y"] {
        ds.snapshot(s).unwrap();
    }
    let mut below = ds.snapshots_below("tank/a@x").unwrap();
    below.sort();
    assert_eq!(below, ["tank/a/b@x", "tank/a/c@x"]);
    ds.destroy("tank/a@x", true).unwrap();
    assert!(!ds.exists("tank/a/b@x") && !ds.exists("tank/a/c@x"));
    check(&pool, "after destroy -r of @x");
    ds.clone_snapshot("tank/a/c@y", "tank/cl", &[]).unwrap();
    let e = ds.destroy("tank/a@y", true).unwrap_err();
    assert!(e.kind == ErrorKind::Busy && e.msg.contains("'tank/a/c@y' has dependent clones: 'tank/cl'"), "{}", e.msg);
    assert!(ds.exists("tank/a@y") && ds.exists("tank/a/c@y"), "nothing destroyed");
    let e = ds.destroy("tank/a@nope", true).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.msg);
    ds.destroy("tank/cl", false).unwrap();
    ds.destroy("tank/a@y", true).unwrap();
    assert!(ds.names("tank", true, Types::SNAPSHOTS).unwrap().is_empty());
    check(&pool, "after destroy -r of @y");
}

/// Pins three wrong answers about quotas: `inherit quota` silently cleared
/// the quota (zfs refuses: it is not an inherited property), a quota below
/// the space already used was accepted (zfs: "size is less than current
/// used or reserved space"), and `quota=0` showed 0 while acting as none
/// (zfs stores and shows none).
#[test]
fn quota_settings_zfs_refuses() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/q", &[("quota", "8M"), ("compression", "off")], false).unwrap();
    ds.create("tank/q/in", &[("reservation", "1M")], false).unwrap();
    let e = ds.inherit("tank/q", "quota").unwrap_err();
    assert!(e.kind == ErrorKind::Invalid && e.msg.contains("cannot be inherited"), "{e}");
    assert_eq!(ds.get("tank/q", "quota").unwrap().value, "8M", "the refused inherit left the quota");
    assert!(ds.inherit("tank/q/in", "reservation").unwrap_err().msg.contains("cannot be inherited"));
    let e = ds.inherit("tank/q", "canmount").unwrap_err();
    assert!(e.msg.contains("'canmount' property cannot be inherited"), "{e}");
    // 3 MiB used below tank/q (with the child's reservation counted).
    put(&ds.objset("tank/q").unwrap(), &pattern(3 << 20, 1));
    pool.sync().unwrap();
    let used = num(&pool, "tank/q", "used");
    assert!(used >= 3 << 20, "{used}");
    let e = ds.set("tank/q", "quota", "2M").unwrap_err();
    assert!(e.kind == ErrorKind::NoSpace && e.msg.contains("size is less than current used or reserved space"), "{e}");
    assert_eq!(ds.get("tank/q", "quota").unwrap().value, "8M");
    // Data dirty but not synced counts as used too.
    put(&ds.objset("tank/q").unwrap(), &pattern(2 << 20, 2));
    assert!(ds.set("tank/q", "quota", "4M").unwrap_err().msg.contains("size is less than"));
    pool.sync().unwrap();
    ds.set("tank/q", "quota", "7M").unwrap();
    let e = ds.set("tank/q/in", "quota", "512K").unwrap_err();
    assert!(e.msg.contains("size is less than current used or reserved space"), "below its reservation: {e}");
    // 0 is none: shown as none, and no limit.
    ds.set("tank/q", "quota", "0").unwrap();
    assert_eq!(ds.get("tank/q", "quota").unwrap().value, "none");
    put(&ds.objset("tank/q").unwrap(), &pattern(8 << 20, 3));
    pool.sync().unwrap();
    assert!(num(&pool, "tank/q", "used") > 8 << 20);
    ds.set("tank/q/in", "reservation", "0").unwrap();
    assert_eq!(ds.get("tank/q/in", "reservation").unwrap().value, "none");
}

/// Pins: `compressratio` of a file system counted only its own blocks;
/// OpenZFS's covers its descendants (`refcompressratio` is the dataset
/// alone, and a snapshot's ratio is of what it references).
#[test]
fn compressratio_covers_descendants() {
    let (_d, pool) = pool_of(128 << 20);
    let ds = pool.datasets();
    ds.create("tank/p", &[("compression", "off")], false).unwrap();
    ds.create("tank/p/z", &[("compression", "lz4")], false).unwrap();
    put(&ds.objset("tank/p").unwrap(), &pattern(8 << 20, 1));
    put(&ds.objset("tank/p/z").unwrap(), &vec![7u8; 8 << 20]);
    pool.sync().unwrap();
    ds.snapshot("tank/p/z@s").unwrap();
    let ratio = |name: &str, prop: &str| -> f64 { ds.get(name, prop).unwrap().value.trim_end_matches('x').parse().unwrap() };
    let alone = ratio("tank/p", "refcompressratio");
    assert!(alone < 1.1, "tank/p alone is incompressible: {alone}");
    assert!(ratio("tank/p/z", "compressratio") > 10.0, "tank/p/z compresses");
    let both = ratio("tank/p", "compressratio");
    assert!((1.7..2.3).contains(&both), "tank/p with its child (half its bytes compress away): {both}");
    assert_eq!(ratio("tank/p/z@s", "compressratio"), ratio("tank/p/z@s", "refcompressratio"));
    assert_eq!(ds.get("tank/p", "refcompressratio").unwrap().source, Source::None);
}
