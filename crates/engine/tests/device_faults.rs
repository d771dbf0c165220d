//! Devices that stop keeping what is written to them (issue 11 item 6).
//!
//! Pins: an image file truncated or deleted under a live pool went
//! unnoticed — writes and fsyncs were acknowledged and the pool stayed
//! ONLINE, though nothing written could be kept (a truncated file grows
//! back with zeros, a deleted one loses its data at close); a device that
//! refused writes suspended the pool without saying which device or why.
//! Now the device is FAULTED or REMOVED with the reason, the pool is
//! SUSPENDED, the sync (fsync) and every later transaction fail, no
//! uberblock is written after the fault, and what was synced before is
//! intact when the pool is opened again (where the device still exists).
//!
//! The cases: writes refused by an in-memory device (EIO, EROFS, ENOSPC);
//! an image file truncated, then found at the next sync and, without any
//! write, by `status`; an image file deleted; an image file on a tiny
//! tmpfs whose space runs out (ENOSPC of the host file system), mounted in
//! a private mount namespace of the test's thread (root only). These
//! pools are `failmode=continue`; the last tests are `failmode=wait`'s: the
//! writer waits for `pool clear` instead — on a plain device, and on a
//! mirror or RAID-Z vdev that lost more children than it can spare.

mod common;

use std::path::{Path, PathBuf};

use std::sync::Arc;

use common::{as_dyn, mem_devs, open, pattern, put, small_tunables, verified};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::{BlockDevice, FaultConfig, FaultDevice};
use tarn_engine::{CreateOptions, ErrorKind, OpenOptions, Pool};

/// A directory of this test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tarn-device-faults-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// After the fault: the pool is suspended, its (only) device is in
/// `state` with a reason containing `why`, a sync fails, and no new
/// transaction is taken.
fn assert_suspended(pool: &Pool, state: &str, why: &str) {
    let e = pool.sync().expect_err("a sync after the fault cannot succeed");
    assert_eq!(e.kind, ErrorKind::Suspended, "{e}");
    let st = pool.status();
    assert_eq!(st.state, "SUSPENDED", "{:?}", st);
    assert_eq!(st.vdevs[0].state, state, "{:?}", st.vdevs[0]);
    let reason = st.vdevs[0].fault.clone().unwrap_or_default();
    assert!(reason.contains(why), "the device's fault says why ('{}'): {}", why, reason);
    assert!(st.error.as_deref().unwrap_or("").contains(why), "the pool's error says why: {:?}", st.error);
    assert!(pool.root().begin().is_err(), "a suspended pool takes no new transaction");
    let s = pool.suspension().expect("suspended");
    assert_eq!(s.synced_txg, pool.uberblock().txg);
    assert!(s.first_lost_txg == s.synced_txg + 1 && s.last_lost_txg >= s.first_lost_txg, "{:?}", s);
    assert!(s.lost_bytes > 0, "the unsynced object counts as lost: {:?}", s);
}

/// One device per errno: it accepts a synced object, then refuses every
/// write and flush. The second object's sync fails; reopened with writes
/// allowed again, the device has the first object and not the second.
#[test]
fn refused_writes_fault_the_device_and_suspend_the_pool() {
    for (i, errno) in [libc::EIO, libc::EROFS, libc::ENOSPC].into_iter().enumerate() {
        let devs = mem_devs(1, 128 << 20, 70 + i as u64);
        let opts = CreateOptions { tunables: small_tunables(), pool_props: common::fail_on_fault(), ..Default::default() };
        let pool = Pool::create_on("tank", common::as_dyn(&devs), vec![], &opts).unwrap();
        let kept = pattern(300_000, 1);
        let a = put(&pool, &kept);
        pool.sync().unwrap();
        let txg = pool.uberblock().txg;
        devs[0].set_config(FaultConfig { refuse_writes: Some(errno), ..Default::default() });
        let b = put(&pool, &pattern(200_000, 2));
        let errtext = std::io::Error::from_raw_os_error(errno).to_string();
        assert_suspended(&pool, "FAULTED", &errtext);
        assert_eq!(pool.uberblock().txg, txg, "no uberblock after the fault");
        let lost = pool.discard().expect("a suspended pool is discarded");
        assert_eq!(lost.synced_txg, txg);
        drop(pool);
        devs[0].set_config(FaultConfig::default());
        let pool = open(&devs).expect("the device still holds the synced pool");
        assert_eq!(pool.uberblock().txg, txg);
        assert_eq!(pool.root().read(a, 0, kept.len()).expect("the synced object"), kept);
        assert!(pool.root().info(b).is_err(), "errno {}: the object whose sync failed is not there", errno);
    }
}

/// A pool on an image file in `dir`, with one synced object: (pool, its
/// object, the object's bytes, the image path).
fn file_pool(dir: &Path) -> (Pool, u64, Vec<u8>, PathBuf) {
    let img = dir.join("a.img");
    let opts = CreateOptions { size: Some(128 << 20), tunables: small_tunables(), pool_props: common::fail_on_fault(), ..Default::default() };
    let pool = Pool::create("tank", std::slice::from_ref(&img), &opts).unwrap();
    let data = pattern(500_000, 3);
    let obj = put(&pool, &data);
    pool.sync().unwrap();
    (pool, obj, data, img)
}

#[test]
fn a_truncated_image_faults_at_the_next_sync() {
    let d = TempDir::new("truncate");
    let (pool, _, _, img) = file_pool(&d.0);
    let txg = pool.uberblock().txg;
    std::fs::OpenOptions::new().write(true).open(&img).unwrap().set_len(8 << 20).unwrap();
    put(&pool, &pattern(100_000, 4));
    assert_suspended(&pool, "FAULTED", "shrank");
    assert_eq!(pool.uberblock().txg, txg, "no uberblock after the fault");
    assert!(pool.discard().is_some());
}

#[test]
fn a_truncated_image_is_found_by_status_without_a_write() {
    let d = TempDir::new("truncate-idle");
    let (pool, _, _, img) = file_pool(&d.0);
    std::fs::OpenOptions::new().write(true).open(&img).unwrap().set_len(8 << 20).unwrap();
    let st = pool.status();
    assert_eq!((st.state.as_str(), st.vdevs[0].state.as_str()), ("SUSPENDED", "FAULTED"), "{:?}", st);
    assert!(pool.root().begin().is_err(), "a suspended pool takes no new transaction");
}

#[test]
fn a_deleted_image_is_removed() {
    let d = TempDir::new("unlink");
    let (pool, _, _, img) = file_pool(&d.0);
    std::fs::remove_file(&img).unwrap();
    put(&pool, &pattern(100_000, 5));
    assert_suspended(&pool, "REMOVED", "deleted");
    assert!(pool.discard().is_some());
}

/// `mount(2)` as root; the error names what failed.
fn mount(src: &str, dir: &Path, fstype: &str, flags: libc::c_ulong, data: &str) -> std::io::Result<()> {
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    let (src, dir, fstype, data) = (c(src), c(dir.to_str().unwrap()), c(fstype), c(data));
    // SAFETY: valid NUL-terminated strings for the duration of the call.
    if unsafe { libc::mount(src.as_ptr(), dir.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// An image file on a 6 MiB tmpfs: the host file system runs out of space
/// under a sparse 128 MiB image. The tmpfs lives in a private mount
/// namespace of this test's thread (and the pool's threads, which it
/// starts), so the host never sees it and it goes with the thread. After
/// the fault the tmpfs is grown again and the pool opened: at the last txg
/// synced before the fault, with the first object intact.
#[test]
fn a_full_host_file_system_faults_the_image() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping a_full_host_file_system_faults_the_image: mounting a tmpfs needs root");
        return;
    }
    let d = TempDir::new("enospc");
    let spot = d.0.join("fs");
    std::fs::create_dir_all(&spot).unwrap();
    let done = std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread (and what it starts).
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNS) }, 0, "unshare: {}", std::io::Error::last_os_error());
        mount("none", Path::new("/"), "", libc::MS_REC | libc::MS_PRIVATE, "").expect("making the namespace's mounts private");
        mount("tarn-test", &spot, "tmpfs", 0, "size=6m").expect("mounting a tmpfs");
        let img = spot.join("a.img");
        let opts = CreateOptions { size: Some(128 << 20), tunables: small_tunables(), pool_props: common::fail_on_fault(), ..Default::default() };
        let pool = Pool::create("tank", std::slice::from_ref(&img), &opts).unwrap();
        let kept = pattern(1 << 20, 6);
        let a = put(&pool, &kept);
        pool.sync().unwrap();
        // More than the tmpfs holds; a txg sync may fail (and suspend the
        // pool) while these are written, after which no transaction opens.
        let os = pool.root();
        for k in 0..16 {
            let Ok(tx) = os.begin() else { break };
            let o = os.create(&tx, tarn_ondisk::ObjectType::PlainData).unwrap();
            os.write(&tx, o, 0, &pattern(1 << 20, 100 + k)).unwrap();
        }
        assert_suspended(&pool, "FAULTED", "No space left on device");
        // Txgs that fitted synced; none after the fault.
        let txg = pool.discard().expect("suspended").synced_txg;
        drop(pool);
        mount("tarn-test", &spot, "tmpfs", libc::MS_REMOUNT, "size=128m").expect("growing the tmpfs");
        let pool = Pool::open(std::slice::from_ref(&img), &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("the image still holds the synced pool");
        assert_eq!(pool.uberblock().txg, txg);
        assert_eq!(pool.root().read(a, 0, kept.len()).expect("the synced object"), kept);
        pool.export().unwrap();
    });
    done.join().expect("the test's thread");
}

/// A device that refused writes and is whole again: `pool clear` resumes
/// the suspended pool, and the txg whose writes were parked is written
/// after all — the object written before the fault survives an export
/// and import. While suspended, writers and `sync` get the suspension at
/// once.
#[test]
fn clear_resumes_a_pool_suspended_by_refused_writes() {
    let devs = mem_devs(1, 128 << 20, 90);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_on("tank", common::as_dyn(&devs), vec![], &opts).unwrap();
    let kept = pattern(300_000, 1);
    let a = put(&pool, &kept);
    pool.sync().unwrap();
    devs[0].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    let parked = pattern(200_000, 2);
    let b = put(&pool, &parked);
    assert!(pool.sync().is_err(), "the sync cannot finish while the device refuses writes");
    assert_eq!(pool.status().state, "SUSPENDED");
    // Still broken: clear says so, and the pool stays suspended.
    assert!(pool.clear(None).is_err(), "a device still refusing writes cannot be cleared");
    devs[0].set_config(FaultConfig::default());
    pool.clear(None).expect("the device is whole again: clear resumes the pool");
    pool.sync().expect("the parked txg is written");
    assert_eq!(pool.status().state, "ONLINE");
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    assert_eq!(pool.root().read(a, 0, kept.len()).unwrap(), kept);
    assert_eq!(pool.root().read(b, 0, parked.len()).expect("the object of the parked txg"), parked, "written after the resume");
}

/// `failmode=wait` (the default): a writer on a pool a device fault
/// suspended waits, counted in the suspension, while an fsync-like `sync`
/// still fails at once; `pool clear` with the device whole again lets the
/// writer in, and its object is there after an export and import. With
/// `failmode=continue` set on the suspended pool, a held writer gets the
/// suspension's error and later ones fail at once.
#[test]
fn failmode_wait_holds_writers_until_clear() {
    let devs = mem_devs(1, 128 << 20, 91);
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = std::sync::Arc::new(Pool::create_on("tank", common::as_dyn(&devs), vec![], &opts).unwrap());
    devs[0].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    put(&pool, &pattern(100_000, 1));
    assert!(pool.sync().is_err(), "the sync cannot finish while the device refuses writes");
    let held = pattern(200_000, 2);
    let writer = {
        let (pool, held) = (pool.clone(), held.clone());
        std::thread::spawn(move || put(&pool, &held))
    };
    assert!(waiting(&pool, 1), "the writer waits, and the suspension counts it: {:?}", pool.suspension());
    assert!(!writer.is_finished());
    assert!(pool.suspension().unwrap().resumable);
    assert!(pool.sync().is_err(), "a sync waiter fails, it does not wait");
    devs[0].set_config(FaultConfig::default());
    pool.clear(None).expect("the device is whole again: clear resumes the pool");
    let b = writer.join().expect("the writer got in after the clear");
    pool.sync().expect("the held write syncs");
    let pool = std::sync::Arc::into_inner(pool).unwrap();
    pool.export().unwrap();
    drop(pool);
    let pool = std::sync::Arc::new(open(&devs).expect("import"));
    assert_eq!(pool.root().read(b, 0, held.len()).unwrap(), held);

    // continue, set while suspended: the held writer fails.
    devs[0].set_config(FaultConfig { refuse_writes: Some(libc::EIO), ..Default::default() });
    put(&pool, &pattern(100_000, 3));
    assert!(pool.sync().is_err());
    let writer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.root().begin().map(|_| ()))
    };
    assert!(waiting(&pool, 1), "{:?}", pool.suspension());
    let e = pool.set_property("failmode", "continue").unwrap_err();
    assert!(e.msg.contains("not recorded"), "applies now, but a suspended pool cannot record it: {}", e);
    let e = writer.join().unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Suspended, "{:?}", e);
    assert!(pool.root().begin().is_err(), "later writers fail at once");
    assert!(waiting(&pool, 0));
    assert!(pool.discard().is_some());
}

/// Whether `n` writers wait on the suspended pool within two seconds.
fn waiting(pool: &Pool, n: u64) -> bool {
    (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        pool.suspension().is_some_and(|s| s.waiting_writers == n)
    })
}

/// A pool of one top-level vdev of `layout` on `n` in-memory devices.
fn redundant_pool(layout: Layout, n: usize, seed: u64) -> (Vec<Arc<FaultDevice>>, Arc<Pool>) {
    let devs = mem_devs(n, 128 << 20, seed);
    let tops = vec![NewTop { layout, devices: as_dyn(&devs) }];
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    (devs, Arc::new(Pool::create_tops("tank", tops, vec![], &opts).expect("create")))
}

fn refuse(d: &FaultDevice, on: bool) {
    d.set_config(FaultConfig { refuse_writes: on.then_some(libc::EIO), ..Default::default() });
}

/// Pins: a mirror whose children all refused writes, or a RAID-Z1 vdev
/// with two of three refusing, failed its sync ("mirror-0 is UNAVAIL:
/// insufficient replicas") for good — nothing resumed it, `pool clear`
/// could not, and what waited was lost with an `export -f`. As for a plain
/// device (OpenZFS's zio_suspend / zio_resume): the pool suspends
/// resumably, a writer waits, an fsync fails; with the devices whole
/// again `pool clear` resumes it, the txg whose writes were kept is
/// written, the writer goes on, the children that missed writes resilver,
/// and everything reads back — verified, and after an export and import.
fn redundant_vdev_resumes_after_clear(layout: Layout, n: usize, refusing: &[usize], seed: u64) {
    let (devs, pool) = redundant_pool(layout, n, seed);
    let before = pattern(300_000, seed);
    let a = put(&pool, &before);
    pool.sync().expect("sync before the fault");
    refusing.iter().for_each(|&i| refuse(&devs[i], true));
    let kept = pattern(400_000, seed + 1);
    let b = put(&pool, &kept);
    let e = pool.sync().expect_err("the sync cannot finish while too many children refuse writes");
    assert_eq!(e.kind, ErrorKind::Suspended, "{e}");
    let sus = pool.suspension().expect("suspended");
    assert!(sus.resumable, "a fault pool clear can end: {sus:?}");
    assert!(sus.reason.contains("FAULTED: write error"), "names the device and why: {sus:?}");
    assert_eq!(pool.status().state, "SUSPENDED");
    let held = pattern(200_000, seed + 2);
    let writer = {
        let (pool, held) = (pool.clone(), held.clone());
        std::thread::spawn(move || put(&pool, &held))
    };
    assert!(waiting(&pool, 1), "the writer waits (failmode=wait): {:?}", pool.suspension());
    assert!(pool.sync().is_err(), "a sync waiter fails, it does not wait");
    assert!(!writer.is_finished());
    // Still refusing: the kept writes fail again, and the pool stays
    // suspended (the writer may have got in meanwhile).
    assert!(pool.clear(None).is_err(), "children still refusing writes cannot be cleared");
    assert!(pool.suspension().expect("still suspended").resumable);
    refusing.iter().for_each(|&i| refuse(&devs[i], false));
    pool.clear(None).expect("the devices are whole again: clear resumes the pool");
    let c = writer.join().expect("the writer got in after the clear");
    pool.sync().expect("the kept txg and the held write sync");
    common::resilvered(&pool);
    let st = pool.status();
    assert_eq!(st.state, "ONLINE", "{st:?}");
    for (obj, data) in [(a, &before), (b, &kept), (c, &held)] {
        assert!(pool.root().read(obj, 0, data.len()).expect("read") == *data, "object {obj} reads back");
    }
    verified(&pool, "after the clear");
    assert_eq!(pool.scrub().expect("scrub").bad_copies, 0, "every child holds what it should");
    let pool = Arc::into_inner(pool).expect("the writer is gone");
    pool.export().expect("export");
    drop(pool);
    let pool = open(&devs).expect("import");
    for (obj, data) in [(a, &before), (b, &kept), (c, &held)] {
        assert!(pool.root().read(obj, 0, data.len()).expect("read after import") == *data, "object {obj} after import");
    }
    verified(&pool, "after import");
}

#[test]
fn a_mirror_with_no_child_left_resumes_after_clear() {
    redundant_vdev_resumes_after_clear(Layout::Mirror, 2, &[0, 1], 92);
}

#[test]
fn a_raidz_past_its_parity_resumes_after_clear() {
    redundant_vdev_resumes_after_clear(Layout::Raidz(1), 3, &[0, 1], 93);
}

/// No regression: one child of two refusing writes faults, the mirror
/// goes on DEGRADED and nothing waits; with `failmode=continue`, losing
/// both suspends the pool (resumably) and a writer fails at once.
#[test]
fn a_mirror_with_a_child_left_goes_on_and_continue_fails_writers() {
    let (devs, pool) = redundant_pool(Layout::Mirror, 2, 94);
    refuse(&devs[1], true);
    let a = put(&pool, &pattern(300_000, 1));
    pool.sync().expect("the mirror writes on its good child");
    assert!(pool.suspension().is_none());
    assert_eq!(pool.status().state, "DEGRADED");
    assert_eq!(pool.root().read(a, 0, 300_000).unwrap(), pattern(300_000, 1));

    pool.set_property("failmode", "continue").expect("failmode=continue");
    refuse(&devs[0], true);
    put(&pool, &pattern(300_000, 2));
    assert!(pool.sync().is_err(), "no child takes writes");
    assert!(pool.suspension().expect("suspended").resumable);
    let e = pool.root().begin().map(|_| ()).expect_err("continue: a writer fails at once");
    assert_eq!(e.kind, ErrorKind::Suspended, "{e:?}");
    assert!(waiting(&pool, 0));
    assert!(pool.discard().is_some());
}

/// A device whose label areas (where the uberblocks go) refuse writes
/// while `refuse` is set; everything else passes to `inner`.
#[derive(Debug)]
struct LabelsRefusing {
    inner: Arc<FaultDevice>,
    refuse: std::sync::atomic::AtomicBool,
}

impl LabelsRefusing {
    fn check(&self, offset: u64, len: usize) -> std::io::Result<()> {
        use tarn_ondisk::label::{LABELS_BACK, LABELS_FRONT};
        let size = self.inner.size_bytes();
        let in_labels = offset < LABELS_FRONT || offset + len as u64 > size - LABELS_BACK;
        match in_labels && self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(std::io::Error::from_raw_os_error(libc::EIO)),
            false => Ok(()),
        }
    }
}

impl BlockDevice for LabelsRefusing {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check(offset, buf.len())?;
        self.inner.write_at(buf, offset)
    }
    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        self.check(offset, bufs.iter().map(|b| b.len()).sum())?;
        self.inner.writev_at(bufs, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

/// The uberblock write failing on a mirror's last child (its data written
/// and flushed): the sync waits for `pool clear` and writes the uberblock
/// again, as OpenZFS's spa_sync after zio_resume_wait — it failed the
/// sync for good before, though everything it names was on disk.
#[test]
fn an_uberblock_a_mirror_could_not_take_is_written_after_clear() {
    let mem = mem_devs(2, 128 << 20, 95);
    let devs: Vec<Arc<LabelsRefusing>> = mem.iter().map(|d| Arc::new(LabelsRefusing { inner: d.clone(), refuse: false.into() })).collect();
    let named: Vec<(String, Arc<dyn BlockDevice>)> = devs.iter().map(|d| (d.name(), d.clone() as Arc<dyn BlockDevice>)).collect();
    let opts = CreateOptions { tunables: small_tunables(), ..Default::default() };
    let pool = Pool::create_tops("tank", vec![NewTop { layout: Layout::Mirror, devices: named.clone() }], vec![], &opts).expect("create");
    pool.sync().expect("sync");
    let txg = pool.uberblock().txg;
    devs.iter().for_each(|d| d.refuse.store(true, std::sync::atomic::Ordering::SeqCst));
    let data = pattern(300_000, 5);
    let a = put(&pool, &data);
    assert!(pool.sync().is_err(), "no child takes the uberblock");
    let sus = pool.suspension().expect("suspended");
    assert!(sus.resumable, "{sus:?}");
    assert_eq!(pool.uberblock().txg, txg);
    devs.iter().for_each(|d| d.refuse.store(false, std::sync::atomic::Ordering::SeqCst));
    pool.clear(None).expect("clear resumes the pool");
    pool.sync().expect("the txg's uberblock is written");
    assert!(pool.uberblock().txg > txg);
    verified(&pool, "after the clear");
    pool.export().expect("export");
    drop(pool);
    let pool = Pool::open_on(named, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() }).expect("import");
    assert!(pool.root().read(a, 0, data.len()).expect("read") == data);
}
