//! Bad input at the device level: damaged labels and uberblocks, and devices
//! that are not (or no longer) what the pool expects.
//!
//! Every device carries four labels, two at each end, each with a config and
//! a ring of uberblocks. Losing either pair must not matter; losing all four
//! must be a clear error; losing the newest uberblock must rewind to the one
//! before. A truncated device, an empty or random file, or a device of
//! another pool must each be refused with a message naming it — never a
//! panic, never an import of the wrong thing.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{as_dyn, durable, first_difference, new_pool, open, pattern, put, refused, Rng};
use tarn_engine::pool::label::read_labels;
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::{ErrorKind, OpenOptions, Pool};
use tarn_ondisk::label::{self, LABEL_SIZE};

/// A two-device pool holding one 300 KiB object, exported; its devices, the
/// object and its content.
fn exported_pool() -> (Vec<Arc<FaultDevice>>, u64, Vec<u8>) {
    let (devs, pool) = new_pool(2, &[]);
    let data = pattern(300 << 10, 1);
    let obj = put(&pool, &data);
    pool.export().expect("export");
    (devs, obj, data)
}

fn corrupt_labels(devs: &[Arc<FaultDevice>], which: &[usize]) {
    for (d, dev) in devs.iter().enumerate() {
        for &i in which {
            dev.corrupt(label::label_offset(i, dev.size_bytes()), LABEL_SIZE, (d * 4 + i) as u64);
        }
    }
}

fn assert_object(pool: &Pool, obj: u64, data: &[u8], what: &str) {
    let got = pool.root().read(obj, 0, data.len()).unwrap_or_else(|e| panic!("{what}: read: {e}"));
    assert!(got == data, "{what}: {}", first_difference(&got, data));
    let rep = pool.verify().expect("verify runs");
    assert!(rep.errors.is_empty(), "{what}: {:?}", rep.errors);
}

/// Imports after damage to labels `lost`, checks the data, and checks that
/// the pool rewrote its labels: after one more sync and export, every label
/// reads clean again.
fn import_without(lost: &[usize]) {
    let (devs, obj, data) = exported_pool();
    corrupt_labels(&devs, lost);
    for dev in &devs {
        let bad: Vec<usize> = read_labels(dev.as_ref()).bad.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, lost, "the damage is seen before import");
    }
    let pool = open(&devs).unwrap_or_else(|e| panic!("import without labels {lost:?}: {e}"));
    assert_object(&pool, obj, &data, &format!("labels {lost:?} lost"));
    put(&pool, b"more");
    pool.export().expect("export");
    for dev in &devs {
        assert!(read_labels(dev.as_ref()).bad.is_empty(), "labels rewritten on export");
    }
    assert_object(&open(&devs).expect("reimport"), obj, &data, "reimported");
}

#[test]
fn front_labels_lost_import_uses_the_back_pair() {
    import_without(&[0, 1]);
}

#[test]
fn back_labels_lost_import_uses_the_front_pair() {
    import_without(&[2, 3]);
}

#[test]
fn all_labels_lost_is_a_clear_error() {
    let (devs, _, _) = exported_pool();
    corrupt_labels(&devs[1..], &[0, 1, 2, 3]);
    let e = refused(open(&devs), "no label left on mem1");
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(e.msg.contains("'mem1'") && e.msg.contains("no valid tarn label"), "{e}");
}

/// Only the config regions of labels 0 and 3 on one device, and 1 and 2 on
/// the other: every label of the pool is damaged somewhere, yet each device
/// keeps one good config.
#[test]
fn one_good_config_per_device_is_enough() {
    let (devs, obj, data) = exported_pool();
    for (dev, lost) in devs.iter().zip([[0, 3], [1, 2]]) {
        for i in lost {
            dev.corrupt(label::label_offset(i, dev.size_bytes()), label::CONFIG_SIZE as u64, i as u64);
        }
    }
    assert_object(&open(&devs).expect("import"), obj, &data, "scattered config damage");
}

/// The newest uberblock is damaged in all four rings of every device: the
/// pool imports at the txg before it, where the last txg's object does not
/// exist yet and the older object is intact.
#[test]
fn newest_uberblock_lost_everywhere_import_rewinds_one_txg() {
    let (devs, pool) = new_pool(2, &[]);
    let old = pattern(200 << 10, 2);
    let old_obj = put(&pool, &old);
    pool.sync().unwrap();
    let prev_txg = pool.uberblock().txg;
    let new_obj = put(&pool, &pattern(1000, 3));
    let tx = pool.root().begin().unwrap();
    pool.root().write(&tx, old_obj, 0, b"overwritten in the last txg").unwrap();
    drop(tx);
    pool.sync().unwrap();
    let last_txg = pool.uberblock().txg;
    assert_eq!(last_txg, prev_txg + 1);
    let images = durable(&devs);
    drop(pool);
    for (d, dev) in images.iter().enumerate() {
        let size = label::usable_device_size(dev.size_bytes());
        for i in 0..label::LABEL_COUNT {
            dev.corrupt(label::ub_slot_offset(i, size, 12, last_txg), 512, (d * 4 + i) as u64);
        }
    }
    let pool = open(&images).expect("import falls back to the previous uberblock");
    assert_eq!(pool.uberblock().txg, prev_txg, "imported txg");
    assert_object(&pool, old_obj, &old, "the previous txg's state");
    let e = pool.root().read(new_obj, 0, 10).expect_err("the last txg's object is gone");
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
}

/// A pool's files in a fresh temporary directory (removed on drop).
struct TempPool {
    dir: PathBuf,
    paths: Vec<PathBuf>,
}

impl TempPool {
    fn create(name: &str, n: usize) -> TempPool {
        let dir = std::env::temp_dir().join(format!("tarn-corrupt-labels-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("{name}{i}.img"))).collect();
        let opts = tarn_engine::CreateOptions { size: Some(96 << 20), tunables: common::small_tunables(), ..Default::default() };
        let pool = Pool::create(name, &paths, &opts).expect("create on files");
        put(&pool, &pattern(100 << 10, 4));
        pool.export().expect("export");
        TempPool { dir, paths }
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn open_files(paths: &[PathBuf]) -> tarn_engine::Result<Pool> {
    Pool::open(paths, &OpenOptions { tunables: common::small_tunables(), ..Default::default() })
}

/// A device cut short (a copy that stopped early, a shrunk partition) keeps
/// its front labels, but the pool's space no longer fits on it.
/// Bug: import went on and failed deep inside ("space checkpoint: block at
/// 0:0x5002000 lies outside its device"), naming neither device nor cause.
#[test]
fn truncated_device_is_refused() {
    let t = TempPool::create("trunc", 1);
    let f = std::fs::OpenOptions::new().write(true).open(&t.paths[0]).unwrap();
    f.set_len(80 << 20).unwrap();
    drop(f);
    let e = refused(open_files(&t.paths), "a truncated device");
    assert!(e.msg.contains("trunc0.img"), "the message names the device: {e}");
    assert!(e.msg.contains("smaller"), "the message says what is wrong: {e}");
}

/// An empty file: the message says why it is no device.
#[test]
fn empty_file_is_refused() {
    let t = TempPool::create("empty", 1);
    std::fs::write(&t.paths[0], b"").unwrap();
    let e = refused(open_files(&t.paths), "an empty file");
    assert!(e.msg.contains("empty0.img") && e.msg.contains("no valid tarn label"), "{e}");
    assert!(e.msg.contains("too small"), "{e}");
}

/// Random bytes everywhere (a wiped or foreign disk): no label verifies.
#[test]
fn random_bytes_are_refused() {
    let dev = Arc::new(FaultDevice::new(label::MIN_DEVICE_BYTES, 9));
    let mut rng = Rng::new(9);
    let chunk = 1 << 20;
    for off in (0..label::MIN_DEVICE_BYTES).step_by(chunk) {
        let n = (label::MIN_DEVICE_BYTES - off).min(chunk as u64) as usize;
        let data: Vec<u8> = (0..n / 8).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
        dev.write_at(&data, off).unwrap();
    }
    let e = refused(open(&[dev]), "random bytes");
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(e.msg.contains("'mem0'") && e.msg.contains("no valid tarn label"), "{e}");
}

/// A device of another pool given with this pool's devices: whichever pool
/// the newest config belongs to, the stray device is named, not ignored.
/// Bug: when the stray device's config was the newest, import silently
/// opened *its* pool and ignored the devices of the pool that was meant.
#[test]
fn device_of_another_pool_is_refused() {
    let (a, _, _) = exported_pool();
    let (b, pool_b) = new_pool(1, &[]);
    pool_b.export().unwrap();
    for devs in [vec![a[0].clone(), b[0].clone()], vec![b[0].clone(), a[0].clone(), a[1].clone()]] {
        let e = refused(Pool::open_on(as_dyn(&devs), vec![], &OpenOptions::default()), "mixed pools");
        assert!(e.msg.contains("another pool"), "{e}");
    }
}
