//! Indirect log writes (`logbias`, OpenZFS's WR_INDIRECT): whole blocks
//! written in place at commit and logged by pointer.
//!
//! Risks pinned here: a block written twice (by the commit and again by
//! its txg's sync), or linked when the file changed after the commit; a
//! prewritten block leaked (no tree and no log owns it) or freed while a
//! tree or an unreplayed log still names it; replay of a block that does
//! not verify; space accounting after replay, after a discarded log, and
//! after truncates, hole punches, snapshots and clones race the sync.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use common::*;
use tarn_engine::posix::{Caller, FallocFlags, FileSystem, PosixFs, PosixOptions, SetAttr, SyncPolicy};
use tarn_engine::sys::fault::FaultDevice;
use tarn_engine::tunables::Tunables;
use tarn_engine::{OpenOptions, Pool};

const ROOT: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0o022, fsetid: true };
const REC: usize = 128 << 10;

fn no_timer() -> Tunables {
    Tunables { zfs_txg_timeout: 3600, zfs_dirty_data_max: 64 << 20, ..small_tunables() }
}

fn new_pool(logbias: &str) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(1, 256 << 20, 11);
    let opts = tarn_engine::CreateOptions { tunables: no_timer(), ..Default::default() };
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts).expect("create");
    pool.datasets().set("tank", "logbias", logbias).expect("logbias");
    (devs, pool)
}

fn import_with(devs: &[Arc<FaultDevice>], t: Tunables) -> Pool {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: t, ..Default::default() }).expect("import")
}

fn mount(pool: &Pool, sync: SyncPolicy) -> Arc<PosixFs> {
    let zil = pool.datasets().zil("tank").expect("zil");
    PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), sync_policy: sync, ..Default::default() }).expect("mount")
}

fn file(fs: &PosixFs, name: &str) -> u64 {
    fs.mknod(&ROOT, fs.root(), name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("create").ino
}

fn read_all(fs: &PosixFs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size;
    fs.read(ino, 0, size as u32).expect("read")
}

fn stat(pool: &Pool, f: impl Fn(&tarn_engine::zil::ZilStats) -> &std::sync::atomic::AtomicU64) -> u64 {
    f(&pool.datasets().zil("tank").unwrap().stats).load(Relaxed)
}

/// Indirect records written so far.
fn indirect(pool: &Pool) -> u64 {
    stat(pool, |s| &s.records[9])
}

/// Transient bytes the allocator holds beyond the log's own blocks: a
/// prewritten block nobody owns any more shows here.
fn transient(pool: &Pool) -> u64 {
    pool.core().alloc.lock().transient_bytes()
}

/// Bytes the pool's trees reference after a sync (the checker's count).
fn referenced(pool: &Pool, ctx: &str) -> u64 {
    verified(pool, ctx).referenced_bytes
}

/// `logbias=throughput` with `sync=always`: each 128 KiB block is written
/// once — in place at commit — and linked by its txg's sync, which writes
/// no data block again; the space the file takes is its data, no more.
#[test]
fn throughput_writes_each_block_once() {
    let (devs, pool) = new_pool("throughput");
    let fs = mount(&pool, SyncPolicy::Always);
    let f = file(&fs, "f");
    let base = referenced(&pool, "empty");
    let data = pattern(8 * REC, 1);
    let written0 = devs[0].stats().bytes_written;
    for (i, c) in data.chunks(REC).enumerate() {
        fs.write(&ROOT, f, (i * REC) as u64, c).expect("write");
    }
    assert_eq!(indirect(&pool), 8, "every block logged by pointer");
    assert_eq!(stat(&pool, |s| &s.indirect_bytes), 8 * REC as u64);
    assert_eq!(stat(&pool, |s| &s.write_bytes), 0, "no data copied into the log");
    let used = referenced(&pool, "synced");
    let data_bytes = used - base;
    assert!(data_bytes < 9 * REC as u64, "the file takes {} bytes for {} of data", data_bytes, 8 * REC);
    let written = devs[0].stats().bytes_written - written0;
    assert!(written < 11 * REC as u64, "{} bytes written for {} of data: blocks written twice", written, 8 * REC);
    assert_eq!(transient(&pool), log_blocks(&pool), "every prewritten block adopted");
    assert!(read_all(&fs, f) == data);
}

/// The rules: latency without a log device logs writes of at least
/// `zfs_immediate_write_sz` indirectly, smaller ones and partial blocks
/// by copy, in records of at most `zil_maxcopied` bytes.
#[test]
fn latency_rules_follow_zfs_log_write() {
    let (_devs, pool) = new_pool("latency");
    let fs = mount(&pool, SyncPolicy::Always);
    let f = file(&fs, "f");
    fs.write(&ROOT, f, 0, &pattern(REC, 2)).unwrap();
    assert_eq!(indirect(&pool), 1, "a whole block of 128 KiB ≥ 32 KiB: in place");
    let copied = stat(&pool, |s| &s.records[4]);
    fs.write(&ROOT, f, REC as u64, &pattern(20_000, 3)).unwrap();
    assert_eq!(indirect(&pool), 1, "20,000 bytes < 32 KiB: copied");
    assert_eq!(stat(&pool, |s| &s.records[4]) - copied, 3, "20,000 bytes in records of 7,680");
    pool.core().tunables.write().zfs_immediate_write_sz = 1 << 30;
    fs.write(&ROOT, f, 0, &pattern(REC, 4)).unwrap();
    assert_eq!(indirect(&pool), 1, "below the raised threshold: copied");
    pool.datasets().set("tank", "logbias", "throughput").unwrap();
    fs.write(&ROOT, f, 0, &pattern(REC, 5)).unwrap();
    assert_eq!(indirect(&pool), 2, "throughput: in place whatever the size");
    fs.write(&ROOT, f, 10, &pattern(REC, 6)).unwrap();
    assert_eq!(indirect(&pool), 2, "no whole block in the range, no part as long as the threshold: copied");
    pool.core().tunables.write().zfs_immediate_write_sz = 32 << 10;
    let copied = stat(&pool, |s| &s.write_bytes);
    fs.write(&ROOT, f, 10, &pattern(REC, 7)).unwrap();
    assert_eq!(indirect(&pool), 3, "a part of REC - 10 bytes ≥ 32 KiB: in place");
    assert_eq!(stat(&pool, |s| &s.write_bytes) - copied, 10, "the 10 bytes in the next block: copied");
    verified(&pool, "rules");
    assert_eq!(transient(&pool), log_blocks(&pool));
}

/// A power cut after acknowledged indirect writes (no txg sync since):
/// import claims their blocks, replay reads them back, the data is all
/// there, and the space is exact — after replay and after a second import.
#[test]
fn indirect_writes_survive_a_power_cut() {
    let (devs, pool) = new_pool("throughput");
    let fs = mount(&pool, SyncPolicy::Standard);
    let warm = file(&fs, "warm");
    fs.fsync(warm, false).unwrap();
    let synced = pool.uberblock().txg;
    let f = file(&fs, "f");
    let data = pattern(5 * REC + 3000, 7);
    fs.write(&ROOT, f, 0, &data).unwrap();
    fs.fsync(f, false).unwrap();
    assert_eq!(indirect(&pool), 5);
    // Rewritten after the commit, not fsynced: the record's block stays
    // what the log names (the sync would write the new buffer).
    fs.write(&ROOT, f, 0, &pattern(REC, 8)).unwrap();
    assert_eq!(pool.uberblock().txg, synced, "only the log holds the writes");
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, no_timer());
    assert!(pool.datasets().zil("tank").unwrap().needs_replay());
    assert_eq!(transient(&pool), 5 * REC as u64 + log_blocks(&pool), "the five blocks claimed with the chain");
    let fs = mount(&pool, SyncPolicy::Standard);
    let f = fs.lookup(fs.root(), b"f").unwrap().ino;
    let got = read_all(&fs, f);
    assert!(got == data, "{}", first_difference(&got, &data));
    drop(fs);
    verified(&pool, "replayed");
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert_eq!(transient(&pool), log_blocks(&pool), "the claimed blocks freed with the replayed chain");
    verified(&pool, "chain dropped");
    pool.export().unwrap();
    let pool = import_with(&image, no_timer());
    let fs = mount(&pool, SyncPolicy::Standard);
    assert!(read_all(&fs, f) == data);
    drop(fs);
    verified(&pool, "second import");
}

/// A large write(2) from an unaligned buffer reaches the file system as
/// two requests, the first ending just short of a block's end (at the
/// end of the file), the second carrying the rest; writes can also start
/// inside a block. Each part of at least `zfs_immediate_write_sz` is
/// logged by pointer to its whole block, and replay after a power cut
/// writes that part only: the file's size and every byte come back as
/// acknowledged — not the block's zeros past the end of the file, not the
/// bytes before a write's start that the block also holds.
#[test]
fn parts_of_blocks_are_logged_by_pointer_and_replayed_exactly() {
    let (devs, pool) = new_pool("latency");
    let fs = mount(&pool, SyncPolicy::Always);
    let warm = file(&fs, "warm");
    fs.fsync(warm, false).unwrap();
    let synced = pool.uberblock().txg;
    let f = file(&fs, "f");
    let data = pattern(8 * REC, 9);
    let split = 8 * REC - 16;
    fs.write(&ROOT, f, 0, &data[..split]).unwrap();
    assert_eq!(indirect(&pool), 8, "seven whole blocks and the last one's part at the end of the file");
    assert_eq!(stat(&pool, |s| &s.write_bytes), 0, "nothing copied");
    // A cut here: the file ends 16 bytes short of its last block.
    let first = durable(&devs);
    fs.write(&ROOT, f, split as u64, &data[split..]).unwrap();
    assert_eq!(stat(&pool, |s| &s.write_bytes), 16, "the 16 bytes copied");
    // A write starting inside block 1 and ending inside block 4: parts of
    // REC - 100 and 100 + REC … of which the 100-byte part is copied.
    let g = file(&fs, "g");
    let base = pattern(5 * REC, 10);
    fs.write(&ROOT, g, 0, &base).unwrap();
    let over = pattern(3 * REC, 11);
    fs.write(&ROOT, g, (REC + 100) as u64, &over).unwrap();
    let mut want_g = base.clone();
    want_g[REC + 100..4 * REC + 100].copy_from_slice(&over);
    assert_eq!(pool.uberblock().txg, synced, "only the log holds the writes");
    let second = durable(&devs);
    drop(fs);
    drop(pool);

    for (image, name, want) in [(&first, "f", &data[..split]), (&second, "f", &data[..]), (&second, "g", &want_g[..])] {
        let pool = import_with(image, no_timer());
        let fs = mount(&pool, SyncPolicy::Standard);
        let ino = fs.lookup(fs.root(), name.as_bytes()).expect("replayed").ino;
        let got = read_all(&fs, ino);
        assert_eq!(got.len(), want.len(), "{}: size", name);
        assert!(got == want, "{}: {}", name, first_difference(&got, want));
        drop(fs);
        verified(&pool, "replayed parts");
        pool.sync().unwrap();
        pool.sync().unwrap();
        assert_eq!(claimed(&pool), 0, "the claimed blocks freed with the chain");
        verified(&pool, "chain dropped");
    }
}

/// Log blocks the dataset's chain holds (transient allocations too).
fn log_blocks(pool: &Pool) -> u64 {
    pool.datasets().zil("tank").unwrap().held_log_bytes()
}

/// Blocks claimed at import for indirect records, not yet freed.
fn claimed(pool: &Pool) -> u64 {
    pool.datasets().zil("tank").unwrap().claimed_data_bytes()
}

/// A block whose write the cut tore: replay stops at its record — that
/// change and everything after it are not applied (never acknowledged),
/// what came before is — and the pool verifies.
#[test]
fn a_block_that_does_not_verify_ends_the_log() {
    let (devs, pool) = new_pool("throughput");
    let fs = mount(&pool, SyncPolicy::Standard);
    let warm = file(&fs, "warm");
    fs.fsync(warm, false).unwrap();
    let a = file(&fs, "a");
    fs.write(&ROOT, a, 0, &pattern(REC, 1)).unwrap();
    fs.fsync(a, false).unwrap();
    let b = file(&fs, "b");
    fs.write(&ROOT, b, 0, &pattern(2 * REC, 2)).unwrap();
    fs.fsync(b, false).unwrap();
    let c = file(&fs, "c");
    fs.fsync(c, false).unwrap();
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    // Damage b's second block where the log says it is.
    let pool = import_with(&image, no_timer());
    let bps = pool.datasets().zil("tank").unwrap().indirect_blocks().unwrap();
    assert_eq!(bps.len(), 3);
    corrupt(&image, &bps[2].dva[0]);
    let fs = mount(&pool, SyncPolicy::Standard);
    assert!(fs.lookup(fs.root(), b"a").is_ok());
    assert!(read_all(&fs, a) == pattern(REC, 1), "a, before the bad block, replayed");
    let b_now = fs.lookup(fs.root(), b"b").map(|x| read_all(&fs, x.ino));
    assert!(b_now.as_ref().is_ok_and(|d| d.is_empty()), "b's write is not applied in part: {:?}", b_now.map(|d| d.len()));
    assert!(fs.lookup(fs.root(), b"c").is_err(), "c came after the bad block");
    assert_eq!(pool.datasets().zil("tank").unwrap().stats.replay_ended_bad_block.load(Relaxed), 1);
    drop(fs);
    verified(&pool, "log ended early");
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert_eq!(claimed(&pool), 0, "the claimed blocks are freed");
}

/// A log discarded at mount (`zil_replay_disable`): its claimed blocks
/// are freed with it; space is exact.
#[test]
fn a_discarded_log_frees_its_blocks() {
    let (devs, pool) = new_pool("throughput");
    let fs = mount(&pool, SyncPolicy::Standard);
    let warm = file(&fs, "warm");
    fs.fsync(warm, false).unwrap();
    let f = file(&fs, "f");
    fs.write(&ROOT, f, 0, &pattern(3 * REC, 3)).unwrap();
    fs.fsync(f, false).unwrap();
    let image = durable(&devs);
    drop(fs);
    drop(pool);
    let pool = import_with(&image, Tunables { zil_replay_disable: 1, ..no_timer() });
    assert_eq!(claimed(&pool), 3 * REC as u64);
    let fs = mount(&pool, SyncPolicy::Standard);
    assert!(fs.lookup(fs.root(), b"f").is_err());
    drop(fs);
    verified(&pool, "discarded");
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert_eq!(claimed(&pool), 0);
    verified(&pool, "discarded, chain dropped");
}

/// Between the commit and the sync, the block is rewritten, truncated,
/// punched, cloned over, snapshotted, or its file removed: the sync never
/// links a stale block, frees each one nothing links, and the data and
/// space come out exact.
#[test]
fn changes_between_commit_and_sync_drop_the_override() {
    let (_devs, pool) = new_pool("throughput");
    let fs = mount(&pool, SyncPolicy::Standard);
    let files: Vec<u64> = (0..6).map(|i| file(&fs, &format!("f{}", i))).collect();
    for &f in &files {
        fs.write(&ROOT, f, 0, &pattern(3 * REC, f)).unwrap();
        fs.fsync(f, false).unwrap();
    }
    assert_eq!(indirect(&pool), 18);
    let mut want: Vec<Vec<u8>> = files.iter().map(|&f| pattern(3 * REC, f)).collect();
    // 0: a block rewritten in the same txg.
    fs.write(&ROOT, files[0], REC as u64 + 5, b"changed").unwrap();
    want[0][REC + 5..REC + 12].copy_from_slice(b"changed");
    // 1: truncated into its second block.
    fs.setattr(&ROOT, files[1], &SetAttr { size: Some(REC as u64 + 100), ..Default::default() }).unwrap();
    want[1].truncate(REC + 100);
    // 2: its first block punched.
    fs.fallocate(&ROOT, files[2], 0, REC as u64, FallocFlags { keep_size: true, punch_hole: true, zero_range: false }).unwrap();
    want[2][..REC].fill(0);
    // 3: a block cloned over from file 4.
    fs.copy_file_range(&ROOT, files[4], 0, files[3], REC as u64, REC as u64).ok();
    if read_all(&fs, files[3])[REC..2 * REC] == want[4][..REC] {
        let src = want[4][..REC].to_vec();
        want[3][REC..2 * REC].copy_from_slice(&src);
    }
    // 5: removed.
    fs.unlink(&ROOT, fs.root(), b"f5").unwrap();
    pool.datasets().snapshot("tank@s").unwrap();
    pool.sync().unwrap();
    for (i, &f) in files.iter().enumerate().take(5) {
        let got = read_all(&fs, f);
        assert!(got == want[i], "file {}: {}", i, first_difference(&got, &want[i]));
    }
    verified(&pool, "overrides dropped");
    assert_eq!(transient(&pool), log_blocks(&pool), "nothing prewritten is left unowned");
    assert_eq!(claimed(&pool), 0);
}
