//! The error log (issue 11: "checksum errors are counted but not logged, and
//! `pool status` names no damaged file"): a read that finds no good copy of
//! a block records where the block sits (object set, object, level, block);
//! the log is kept in the MOS, so it survives export and import; a later
//! successful read of the same block, or `clear_errors`, removes the entry;
//! `posix::errors::named_errors` names each entry as the file it damaged
//! (mountpoint and path), or by number where no path can be walked. A
//! damaged copy that another copy stood in for is no permanent error.

mod common;

use std::sync::Arc;

use common::{corrupt, new_pool, open, pattern, put};
use tarn_engine::pool::errlog::Bookmark;
use tarn_engine::posix::errors::named_errors;
use tarn_engine::posix::*;
use tarn_engine::sys::FaultDevice;
use tarn_engine::{Objset, Pool};
use tarn_ondisk::bp::BlockPtr;

const ROOT: Caller = Caller::new(0, 0, 1, 0);

fn mount(os: &Arc<Objset>) -> Arc<PosixFs> {
    PosixFs::open(os.clone(), PosixOptions::default()).expect("mount")
}

fn file(fs: &PosixFs, parent: Ino, name: &str, data: &[u8]) -> Ino {
    let ino = fs.mknod(&ROOT, parent, name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino;
    fs.write(&ROOT, ino, 0, data).expect("write");
    ino
}

fn block(os: &Objset, obj: u64, level: u8, index: u64) -> BlockPtr {
    let tree = os.tree(obj, 100_000).expect("tree");
    tree.iter().find(|(l, i, _)| (*l, *i) == (level, index)).unwrap_or_else(|| panic!("object {obj} has no block L{level} #{index}")).2
}

fn reimport(devs: &[Arc<FaultDevice>], pool: Pool) -> Pool {
    pool.export().expect("export");
    open(devs).expect("import")
}

fn names(pool: &Pool) -> Vec<String> {
    named_errors(pool).into_iter().map(|e| e.name).collect()
}

/// A file in a nested directory of the root dataset and one in a child
/// dataset lose a data block each: reads of those blocks fail, the log
/// holds their bookmarks under the right object sets, `status` counts two
/// and names both files by mountpoint and path; the log survives an export
/// and import; rewriting one block and reading it clears its entry, and
/// `clear_errors` the other — each change persisted.
#[test]
fn lost_blocks_are_logged_named_persisted_and_cleared() {
    let (devs, pool) = new_pool(1, &[]);
    let root_fs = mount(pool.root());
    let r = root_fs.root();
    let d1 = root_fs.mkdir(&ROOT, r, b"d1", 0o755).unwrap().ino;
    let d2 = root_fs.mkdir(&ROOT, d1, b"d2", 0o755).unwrap().ino;
    let big_data = pattern(300 << 10, 1);
    let big = file(&root_fs, d2, "big", &big_data);
    pool.datasets().create("tank/child", &[], false).unwrap();
    let child_os = pool.datasets().objset("tank/child").unwrap();
    let child_fs = mount(&child_os);
    let small = file(&child_fs, child_fs.root(), "f", &pattern(200 << 10, 2));
    pool.sync().unwrap();
    let (root_id, child_id) = (pool.root().id, child_os.id);
    let (big_l0, small_l0) = (block(pool.root(), big, 0, 1), block(&child_os, small, 0, 0));
    drop((root_fs, child_fs, child_os));
    pool.export().unwrap();
    corrupt(&devs, &big_l0.dva[0]);
    corrupt(&devs, &small_l0.dva[0]);

    let pool = open(&devs).unwrap();
    let root_fs = mount(pool.root());
    let child_fs = mount(&pool.datasets().objset("tank/child").unwrap());
    assert_eq!(root_fs.read(big, 0, 4096).expect("block 0 is intact"), big_data[..4096]);
    assert_eq!(root_fs.read(big, 128 << 10, 4096).expect_err("block 1 is lost").errno, libc::EIO);
    assert_eq!(child_fs.read(small, 0, 4096).expect_err("block 0 is lost").errno, libc::EIO);
    let want = [Bookmark::block(root_id, big, 0, 1), Bookmark::block(child_id, small, 0, 0)];
    assert_eq!(pool.error_log(), want.to_vec());
    assert_eq!(pool.status().data_errors, 2);
    assert_eq!(names(&pool), ["/tank/d1/d2/big", "/tank/child/f"]);
    drop((root_fs, child_fs));

    let pool = reimport(&devs, pool);
    assert_eq!(pool.error_log(), want.to_vec(), "the log survives export and import");
    assert_eq!(names(&pool), ["/tank/d1/d2/big", "/tank/child/f"]);

    let root_fs = mount(pool.root());
    root_fs.write(&ROOT, big, 128 << 10, &big_data[128 << 10..256 << 10]).expect("a whole-block rewrite needs no read");
    pool.sync().unwrap();
    assert_eq!(root_fs.read(big, 0, 300 << 10).expect("rewritten"), big_data);
    assert_eq!(pool.error_log(), want[1..].to_vec(), "a successful read clears the entry");
    drop(root_fs);
    let pool = reimport(&devs, pool);
    assert_eq!(pool.error_log(), want[1..].to_vec(), "the clearing is persisted");
    assert_eq!(pool.status().data_errors, 1);

    assert_eq!(pool.clear_errors(), 1);
    assert_eq!(pool.status().vdevs[0].checksum_errors, 0, "clear resets the device counters too");
    let pool = reimport(&devs, pool);
    assert!(pool.error_log().is_empty(), "clear is persisted");
    assert_eq!(pool.status().data_errors, 0);
}

/// With copies=2, a damaged copy is a checksum error on its device (and a
/// line in the daemon log) but the other copy serves the read: nothing
/// enters the error log.
#[test]
fn a_copy_served_by_the_other_is_no_permanent_error() {
    let (devs, pool) = new_pool(1, &[("copies", "2")]);
    let data = pattern(100 << 10, 3);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    let bp = block(pool.root(), obj, 0, 0);
    assert_eq!(bp.ndvas(), 2);
    pool.export().unwrap();
    corrupt(&devs, &bp.dva[0]);
    let pool = open(&devs).unwrap();
    assert_eq!(pool.root().read(obj, 0, data.len()).expect("the second copy serves"), data);
    assert!(pool.status().vdevs[0].checksum_errors > 0);
    assert!(pool.error_log().is_empty(), "{:?}", pool.error_log());
    assert_eq!(pool.status().data_errors, 0);
}

/// A dnode block of the root dataset is lost: the files whose dnodes it
/// held cannot even be looked up. The log names the dnode block and — so
/// that each file asked for is named — each of those files' dnodes, which
/// status shows by number (their parent pointers were in the lost block).
#[test]
fn a_lost_dnode_block_names_each_file_asked_for() {
    let (devs, pool) = new_pool(1, &[]);
    let fs = mount(pool.root());
    let files: Vec<(String, Ino)> = (0..60).map(|i| (format!("f{i}"), file(&fs, fs.root(), &format!("f{i}"), &pattern(500, i)))).collect();
    pool.sync().unwrap();
    let victim = 2u64;
    let per_block = tarn_ondisk::dnode::SLOTS_PER_BLOCK as u64;
    let lost: Vec<&(String, Ino)> = files.iter().filter(|(_, ino)| *ino / per_block == victim).collect();
    assert!(!lost.is_empty(), "some files live in dnode block {victim}");
    let bp = block(pool.root(), 0, 0, victim);
    drop(fs);
    pool.export().unwrap();
    for dva in bp.dva.iter().filter(|d| !d.is_empty()) {
        corrupt(&devs, dva);
    }
    let pool = open(&devs).unwrap();
    let fs = mount(pool.root());
    for (name, ino) in &files {
        let r = fs.lookup(fs.root(), name.as_bytes());
        if *ino / per_block == victim {
            assert_eq!(r.expect_err("its dnode is lost").errno, libc::EIO, "{name}");
        } else {
            assert_eq!(r.expect("intact").ino, *ino);
        }
    }
    let log = pool.error_log();
    let root_id = pool.root().id;
    assert!(log.contains(&Bookmark::block(root_id, 0, 0, victim)), "{log:?}");
    let named = names(&pool);
    for (name, ino) in lost {
        assert!(log.contains(&Bookmark::dnode(root_id, *ino)), "{name}: {log:?}");
        assert!(named.contains(&format!("tank:<{:#x}>", ino)), "{name}: {named:?}");
    }
    assert!(named.contains(&"tank:<0x0>".to_string()), "the dnode array itself: {named:?}");
}

/// MOS objects are named `<metadata>:<0xN>`, and the object sets of
/// datasets that are gone `<0xS>:<0xN>`, as `zpool status -v` names them.
#[test]
fn errors_outside_any_dataset_are_named_by_number() {
    let (devs, pool) = new_pool(1, &[]);
    pool.datasets().create("tank/gone", &[], false).unwrap();
    let gone = pool.datasets().objset("tank/gone").unwrap();
    let obj = {
        let tx = gone.begin().unwrap();
        let o = gone.create(&tx, tarn_ondisk::ObjectType::PlainData).unwrap();
        gone.write(&tx, o, 0, &pattern(8192, 4)).unwrap();
        o
    };
    pool.sync().unwrap();
    let gone_id = gone.id;
    let bp = block(&gone, obj, 0, 0);
    drop(gone);
    let pool = reimport(&devs, pool);
    corrupt(&devs, &bp.dva[0]);
    let gone = pool.datasets().objset("tank/gone").unwrap();
    assert!(gone.read(obj, 0, 10).is_err());
    drop(gone);
    assert_eq!(names(&pool), [format!("tank/gone:<{:#x}>", obj)], "not a POSIX object: by number");
    pool.datasets().destroy("tank/gone", false).unwrap();
    assert_eq!(names(&pool), [format!("<{:#x}>:<{:#x}>", gone_id, obj)]);
}

/// A log too big to live inline in its dnode is rewritten in a later txg:
/// the sync must not wait on the log's own lock (the reads of its write
/// clear and record entries). Regression: the first flush held the lock
/// while writing, and the second sync deadlocked.
#[test]
fn a_large_log_is_rewritten_without_deadlock() {
    let (devs, pool) = new_pool(1, &[]);
    let log = &pool.core().errlog;
    for i in 0..300 {
        log.record(Bookmark::block(77, i, 0, 0));
    }
    sync_within(&pool, 30);
    log.record(Bookmark::block(77, 1000, 0, 0));
    log.cleared_by_read(&Bookmark::block(77, 0, 0, 0));
    sync_within(&pool, 30);
    let pool = reimport(&devs, pool);
    assert_eq!(pool.error_log().len(), 300);
    assert!(pool.error_log().contains(&Bookmark::block(77, 1000, 0, 0)));
}

/// Syncs, failing (instead of hanging the test) after `secs` seconds.
fn sync_within(pool: &Pool, secs: u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(pool.sync()).unwrap());
        match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
            Ok(r) => r.expect("sync"),
            Err(_) => {
                eprintln!("the sync did not finish within {secs} s: deadlocked");
                std::process::exit(1);
            }
        }
    });
}
