//! Regression tests for engine bugs found by the crash-consistency and
//! corruption tests. Each test's header names the bug it pins; each reduces
//! the failing seed to the few operations that trigger it.

mod common;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{as_dyn, first_difference, mem_devs, open, pattern, small_tunables};
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{CreateOptions, ErrorKind, Pool};
use tarn_ondisk::ObjectType;

fn pool_with(recordsize: Option<&str>) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(1, 128 << 20, 1);
    let mut opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    if let Some(rs) = recordsize {
        opts.root_props.push(("recordsize".into(), rs.into()));
    }
    let pool = Pool::create_on("reg", as_dyn(&devs), vec![], &opts).expect("create");
    (devs, pool)
}

/// Runs `f` in one transaction, then syncs.
fn txg(pool: &Pool, f: impl FnOnce(&tarn_engine::Objset, &tarn_engine::Tx)) {
    let os = pool.root().clone();
    let tx = os.begin().expect("begin");
    f(&os, &tx);
    drop(tx);
    pool.sync().expect("sync");
}

fn assert_no_leak(pool: &Pool, what: &str) {
    let rep = pool.verify().expect("verify runs");
    assert!(rep.errors.is_empty(), "{what}: {:?}", rep.errors);
    assert_eq!(rep.allocated_bytes, rep.referenced_bytes, "{what}: allocated vs referenced");
}

fn assert_reads(pool: &Pool, obj: u64, want: &[u8], what: &str) {
    let got = pool.root().read(obj, 0, want.len() + 1).expect("read");
    assert!(got == want, "{what}: {}", first_difference(&got, want));
}

/// Bug: freeing an object with indirect blocks freed only its data blocks;
/// the indirect blocks stayed allocated forever (verify: "allocator holds N
/// bytes but blocks reference M").
#[test]
fn freeing_a_multi_level_object_frees_its_indirect_blocks() {
    let (_devs, pool) = pool_with(None);
    let mut obj = 0;
    txg(&pool, |os, tx| {
        obj = os.create(tx, ObjectType::PlainData).unwrap();
        os.write(tx, obj, 0, &pattern(300 << 10, 1)).unwrap();
    });
    assert!(pool.root().info(obj).unwrap().nlevels >= 2, "the object needs an indirect block");
    txg(&pool, |os, tx| os.free(tx, obj).unwrap());
    assert_no_leak(&pool, "after freeing a two-level object");
}

/// Bug: an object whose tree shrank into its dnode (a truncate to a few
/// bytes) freed its data blocks but leaked its indirect blocks, and kept them
/// cached, so a later regrowth could link stale, freed blocks.
#[test]
fn shrinking_a_tree_into_the_dnode_frees_the_tree() {
    let (_devs, pool) = pool_with(Some("4K"));
    let mut obj = 0;
    let data = pattern(40_000, 2);
    txg(&pool, |os, tx| {
        obj = os.create(tx, ObjectType::PlainData).unwrap();
        os.write(tx, obj, 0, &data[..2000]).unwrap();
    });
    txg(&pool, |os, tx| os.write(tx, obj, 2000, &data[2000..]).unwrap());
    txg(&pool, |os, tx| os.truncate(tx, obj, 1500).unwrap());
    assert!(pool.root().info(obj).unwrap().inline, "1500 bytes fit the dnode's reserved slots");
    assert_reads(&pool, obj, &data[..1500], "after shrinking into the dnode");
    assert_no_leak(&pool, "after shrinking into the dnode");
    txg(&pool, |os, tx| os.write(tx, obj, 1500, &data[1500..]).unwrap());
    assert_reads(&pool, obj, &data, "after growing again");
    assert_no_leak(&pool, "after growing again");
}

/// Bug: a txg that only grew an inline object (a truncate to a larger size,
/// no write) synced it with all-zero content: the old inline data was
/// dropped before it was copied.
#[test]
fn growing_truncate_of_an_inline_object_keeps_its_data() {
    let (devs, pool) = pool_with(None);
    let mut obj = 0;
    let data = pattern(2000, 3);
    txg(&pool, |os, tx| {
        obj = os.create(tx, ObjectType::PlainData).unwrap();
        os.write(tx, obj, 0, &data).unwrap(); // reserves slots for 2000 bytes
        os.truncate(tx, obj, 1000).unwrap();
    });
    txg(&pool, |os, tx| os.truncate(tx, obj, 2000).unwrap());
    let mut want = data[..1000].to_vec();
    want.resize(2000, 0);
    assert_reads(&pool, obj, &want, "after the growing truncate");
    pool.export().unwrap();
    assert_reads(&open(&devs).unwrap(), obj, &want, "after reopening");
}

/// Bug: shrinking a multi-block object to exactly one block that fits the
/// dnode (no partial block left to dirty) stored it inline as zeros.
#[test]
fn shrinking_to_a_block_boundary_into_the_dnode_keeps_its_data() {
    let (_devs, pool) = pool_with(Some("2K"));
    let mut obj = 0;
    let data = pattern(3000, 4);
    txg(&pool, |os, tx| {
        obj = os.create(tx, ObjectType::PlainData).unwrap();
        os.write(tx, obj, 0, &data[..2048]).unwrap(); // reserves slots for 2048 bytes
    });
    txg(&pool, |os, tx| os.write(tx, obj, 2048, &data[2048..]).unwrap());
    txg(&pool, |os, tx| os.truncate(tx, obj, 2048).unwrap());
    assert!(pool.root().info(obj).unwrap().inline);
    assert_reads(&pool, obj, &data[..2048], "after shrinking to one block");
    assert_no_leak(&pool, "after shrinking to one block");
}

/// Bug: the sync thread panicked ("range end index 2090 out of range for
/// slice of length 512") storing inline an object grown by a truncate past
/// its single small block, and every writer then waited forever.
#[test]
fn inline_object_larger_than_its_block_syncs() {
    let (devs, pool) = pool_with(None);
    let mut obj = 0;
    txg(&pool, |os, tx| {
        obj = os.create(tx, ObjectType::PlainData).unwrap();
        os.write(tx, obj, 0, &pattern(100, 5)).unwrap(); // a 512-byte block
        os.truncate(tx, obj, 2090).unwrap(); // the block stays 512 bytes
        os.write(tx, obj, 0, b"head").unwrap(); // dirties block 0, reserves slots
    });
    let mut want = pattern(100, 5);
    want[..4].copy_from_slice(b"head");
    want.resize(2090, 0);
    assert!(pool.root().info(obj).unwrap().inline);
    assert_reads(&pool, obj, &want, "after the sync");
    pool.export().unwrap();
    assert_reads(&open(&devs).unwrap(), obj, &want, "after reopening");
}

/// Bug: a new pool's root dataset got no root block until something was
/// written to it, so a pool exported (or crashed) before its first write
/// could not be imported: "root dataset record has no block pointer".
#[test]
fn an_empty_pool_exports_and_imports() {
    let (devs, pool) = pool_with(None);
    pool.export().unwrap();
    let pool = open(&devs).expect("an empty pool imports");
    assert_eq!(pool.root().object_count(), 0);
    assert_no_leak(&pool, "empty pool");
}

/// A device whose flush panics once armed: a stand-in for any engine bug
/// that panics on the sync thread (flushes are issued from that thread).
#[derive(Debug)]
struct PanicOnFlush {
    inner: Arc<FaultDevice>,
    armed: AtomicBool,
}

impl BlockDevice for PanicOnFlush {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        assert!(!self.armed.load(Ordering::SeqCst), "injected panic in flush");
        self.inner.flush()
    }
    fn name(&self) -> String {
        "panicky".into()
    }
}

/// Bug: a panic on the sync thread killed it silently; `sync()` and every
/// writer then waited forever for a txg that would never sync. Now the pool
/// suspends with the panic's message, and closing it does not hang.
#[test]
fn a_panic_while_syncing_suspends_the_pool_instead_of_hanging() {
    let dev = Arc::new(PanicOnFlush { inner: Arc::new(FaultDevice::new(128 << 20, 1)), armed: AtomicBool::new(false) });
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_on("reg", vec![("panicky".into(), dev.clone() as Arc<dyn BlockDevice>)], vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let obj = os.create(&tx, ObjectType::PlainData).unwrap();
    os.write(&tx, obj, 0, b"data").unwrap();
    drop(tx);
    dev.armed.store(true, Ordering::SeqCst);
    let e = pool.sync().expect_err("the sync panicked");
    assert_eq!(e.kind, ErrorKind::Suspended, "{e}");
    assert!(e.msg.contains("injected panic in flush"), "{e}");
    assert!(os.begin().is_err(), "a suspended pool takes no new transactions");
    drop(pool);
}

/// A device whose writes panic after the pool is created.
#[derive(Debug)]
struct PanickyDevice {
    inner: Arc<FaultDevice>,
    armed: AtomicBool,
}

impl BlockDevice for PanickyDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        assert!(!self.armed.load(Ordering::SeqCst), "simulated bug in a device");
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn name(&self) -> String {
        "panicky".into()
    }
}

/// Bug: a panic inside a device call on an I/O thread lost the completion of
/// every request in that I/O, so the txg sync waited for them forever and
/// every writer hung. Now the I/O fails and the pool suspends.
#[test]
fn a_panicking_device_suspends_the_pool_instead_of_hanging() {
    let dev = Arc::new(PanickyDevice { inner: mem_devs(1, 128 << 20, 9).remove(0), armed: AtomicBool::new(false) });
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_on("panicky", vec![("panicky".into(), dev.clone() as Arc<dyn BlockDevice>)], vec![], &opts).expect("create");
    dev.armed.store(true, Ordering::SeqCst);
    let os = pool.root().clone();
    let tx = os.begin().expect("begin");
    let o = os.create(&tx, ObjectType::PlainData).expect("create object");
    os.write(&tx, o, 0, &pattern(200_000, 3)).expect("write");
    drop(tx);
    let e = pool.sync().expect_err("the sync cannot succeed");
    assert_eq!(e.kind, ErrorKind::Suspended, "{}", e);
}

/// A new object extended by truncate (ftruncate, fallocate) and then
/// written kept its first tiny block size, so every 512 bytes of data took a
/// 4 KiB sector: writing a 4 GiB file laid out by fio filled a 16 GiB pool
/// and suspended it. Extending a one-block object now grows its block to
/// the record size first.
#[test]
fn extending_a_new_object_grows_its_block_size() {
    let d = common::mem_devs(1, 512 << 20, 41);
    let opts = tarn_engine::CreateOptions { root_props: vec![("compression".into(), "off".into())], ..Default::default() };
    let pool = tarn_engine::Pool::create_on("tank", common::as_dyn(&d), vec![], &opts).unwrap();
    let os = pool.root().clone();
    let tx = os.begin().unwrap();
    let o = os.create(&tx, tarn_ondisk::ObjectType::PlainData).unwrap();
    os.truncate(&tx, o, 32 << 20).unwrap();
    drop(tx);
    pool.sync().unwrap();
    let before = pool.status().allocated;
    let data = common::pattern(32 << 20, 5);
    for off in (0..data.len()).step_by(1 << 20) {
        let tx = os.begin().unwrap();
        os.write(&tx, o, off as u64, &data[off..off + (1 << 20)]).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(os.info(o).unwrap().blksz, 128 << 10);
    let used = pool.status().allocated - before;
    assert!(used < (33 << 20), "32 MiB of data took {} bytes", used);
    assert_eq!(os.read(o, 0, data.len()).unwrap(), data);
}
