//! Running out of space through a real mount (private daemon, real pools,
//! the kernel's write-back cache): where the writer hears of it (at
//! `write(2)`, with EDQUOT for a quota and ENOSPC for the pool), that the
//! size the kernel shows is the size stored (checked after an unmount and
//! mount, which drops everything the kernel cached), that a delete's space
//! is the next writer's at once, and what `df` says while data is dirty.
//!
//! Each test skips with a message when /dev/fuse cannot be opened.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;

use common::Env;

/// The 1 MiB every write(2) of `write_until_error` writes (incompressible,
/// so sizes on disk are the sizes written).
fn chunk(seed: u8) -> Vec<u8> {
    common::noise(1 << 20, u64::from(seed))
}

/// Writes `total` bytes to `f` in 1 MiB write(2)s until one fails: the
/// bytes written and the errno that stopped it.
fn write_until_error(f: &mut File, total: usize, seed: u8) -> (usize, Option<i32>) {
    let chunk = chunk(seed);
    let mut done = 0;
    while done < total {
        let n = (total - done).min(chunk.len());
        match f.write(&chunk[..n]) {
            Ok(0) => return (done, Some(0)),
            Ok(w) => done += w,
            Err(e) => return (done, e.raw_os_error()),
        }
    }
    (done, None)
}

fn size_of(p: &str) -> u64 {
    fs::metadata(p).unwrap_or_else(|e| panic!("stat {p}: {e}")).len()
}

/// Unmounts and mounts `dataset` again: the kernel forgets every size and
/// page it cached, and what `stat` shows next comes from the pool.
fn remount(e: &Env, dataset: &str) {
    e.ok(&["unmount", dataset]);
    e.ok(&["mount", dataset]);
}

fn statvfs(p: &str) -> libc::statvfs {
    let c = std::ffi::CString::new(p).unwrap();
    // SAFETY: statvfs writes one struct through a valid pointer; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0, "statvfs {}", p);
    st
}

/// (size, available) bytes of the file system at `p`, as `df` shows them.
fn df(p: &str) -> (u64, u64) {
    let s = statvfs(p);
    (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize)
}

/// Pins: writing 5 MiB into a dataset with quota=1M returned 5 MiB, stat
/// showed 5 MiB, after dropping the caches the file was empty, and the
/// error came at close as ENOSPC. The writer now gets EDQUOT at write(2),
/// and the size shown before and after the caches go is what was written.
#[test]
fn a_quota_fails_write_with_edquot_and_the_size_holds() {
    let Some(e) = Env::real("quota-write") else { return };
    let mnt = e.create("tank");
    e.ok(&["create", "-o", "quota=1M", "tank/q"]);
    let path = format!("{mnt}/q/f");
    let mut f = File::create(&path).unwrap();
    let (written, err) = write_until_error(&mut f, 5 << 20, 1);
    assert_eq!(err, Some(libc::EDQUOT), "write(2) past a 1M quota: {written} bytes written, then {err:?}");
    assert!(written <= 1 << 20, "{written} bytes went past a 1M quota");
    f.sync_all().expect("what was written is stored");
    drop(f);
    assert_eq!(size_of(&path), written as u64);
    remount(&e, "tank");
    assert_eq!(size_of(&path), written as u64, "the size after the kernel's caches are gone");
    let mut back = Vec::new();
    File::open(&path).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == chunk(1)[..written], "the data written before the quota is what reads back");
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "quota", "tank/q"]), "1M\n");
}

/// Pins: a full pool refused the data only at write-back, reported at
/// close. Near the pool's end files are written around the kernel's cache:
/// ENOSPC at write(2), and the size holds.
#[test]
fn a_full_pool_fails_write_with_enospc() {
    let Some(e) = Env::real("full-write") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "-O", "compression=off", "p72", &e.path("p72.img"), "--size", "72M"]);
    let path = format!("{mnt}/big");
    let mut f = File::create(&path).unwrap();
    let (written, err) = write_until_error(&mut f, 100 << 20, 2);
    assert_eq!(err, Some(libc::ENOSPC), "write(2) into a full 72 MiB pool: {written} bytes written, then {err:?}");
    assert!(written >= 50 << 20, "only {written} bytes fit a 72 MiB pool");
    f.sync_all().expect("what was written is stored");
    drop(f);
    remount(&e, "p72");
    assert_eq!(size_of(&path), written as u64);
}

/// Pins: after filling a 72 MiB pool and deleting a 40 MB file, `touch`
/// and writes failed with ENOSPC until the pool had synced twice more. The
/// delete's space is the next writer's at once (it waits for the frees).
#[test]
fn a_delete_gives_its_space_to_the_next_writer_at_once() {
    let Some(e) = Env::real("delete-write") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "-O", "compression=off", "p72", &e.path("p72.img"), "--size", "72M"]);
    let mut big = File::create(format!("{mnt}/big")).unwrap();
    assert_eq!(write_until_error(&mut big, 40 << 20, 3), (40 << 20, None));
    big.sync_all().unwrap();
    drop(big);
    let mut rest = File::create(format!("{mnt}/rest")).unwrap();
    let (_, err) = write_until_error(&mut rest, 64 << 20, 4);
    assert_eq!(err, Some(libc::ENOSPC), "the pool fills");
    drop(rest);
    fs::remove_file(format!("{mnt}/big")).unwrap();
    File::create(format!("{mnt}/touched")).expect("touch right after the delete");
    let mut again = File::create(format!("{mnt}/again")).unwrap();
    assert_eq!(write_until_error(&mut again, 20 << 20, 5), (20 << 20, None), "20 MB right after deleting 40 MB");
    again.sync_all().expect("stored");
}

/// Pins: `df` showed a size near 0 while data was dirty (the available
/// space lost the dirty bytes, the used space did not gain them). Size is
/// used + available at every moment, and stays put while data streams in.
#[test]
fn df_keeps_its_size_while_data_is_dirty() {
    let Some(e) = Env::real("df-dirty") else { return };
    let mnt = e.create("tank");
    let (size0, avail0) = df(&mnt);
    assert!(size0 > 100 << 20, "a 128 MiB pool shows {size0}");
    let mut f = File::create(format!("{mnt}/f")).unwrap();
    assert_eq!(write_until_error(&mut f, 48 << 20, 6), (48 << 20, None));
    // Hand the pages to the daemon without a txg sync: dirty data there.
    // SAFETY: a valid descriptor; flags from libc.
    let r = unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER) };
    assert_eq!(r, 0);
    let (size1, avail1) = df(&mnt);
    assert!(size1 + (4 << 20) >= size0, "df size {size0} -> {size1} with 48 MiB dirty");
    assert!(avail1 + (40 << 20) <= avail0, "df available {avail0} -> {avail1} with 48 MiB written");
    f.sync_all().unwrap();
    let (size2, avail2) = df(&mnt);
    assert!(size2 + (4 << 20) >= size0 && avail2 + (40 << 20) <= avail0, "after the sync: size {size2}, available {avail2} (before: {size0}, {avail0}; dirty: {size1}, {avail1})");
}

/// Pins: data the kernel's cache accepted for a file opened while there was
/// room, then refused at write-back (a quota set meanwhile), left the
/// kernel showing a size the pool did not hold: after the caches went the
/// file was shorter. Now the size the kernel showed is kept (the part not
/// stored reads as zeros) and the writer hears of it at fsync. (Where the
/// kernel's cache bound exceeds the pool's room the file is written around
/// the cache and write(2) fails instead; the size holds either way.)
#[test]
fn a_refused_writeback_keeps_the_size_the_kernel_showed() {
    let Some(e) = Env::real("refused-writeback") else { return };
    let mnt = e.path("mnt");
    e.ok(&["pool", "create", "-m", &mnt, "-O", "compression=off", "tank", &e.path("tank.img"), "--size", "1G"]);
    e.ok(&["create", "tank/s"]);
    let path = format!("{mnt}/s/f");
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&path).unwrap();
    e.ok(&["set", "quota=2M", "tank/s"]);
    let (written, err) = write_until_error(&mut f, 8 << 20, 7);
    let synced = f.sync_all();
    let shown = size_of(&path);
    eprintln!("8 MiB under a 2M quota set after the open: {written} bytes written, write error {err:?}, fsync {synced:?}, size shown {shown}");
    let mut seen = Vec::new();
    match err {
        None => {
            let se = synced.expect_err("8 MiB cached for a 2M quota cannot all be stored");
            assert!([Some(libc::EDQUOT), Some(libc::EIO)].contains(&se.raw_os_error()), "fsync: {se}");
            assert_eq!(shown, 8 << 20);
            // The kernel drops its pages of what was not stored: reads
            // show zeros there (at least 5 of the 8 MiB), not the data.
            let t = std::time::Instant::now();
            loop {
                seen = fs::read(&path).unwrap();
                if seen.iter().filter(|&&b| b == 0).count() >= 5 << 20 || t.elapsed() > std::time::Duration::from_secs(10) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        Some(errno) => {
            assert_eq!(errno, libc::EDQUOT, "{written} bytes, then errno {errno}");
            assert_eq!(shown, written as u64);
        }
    }
    drop(f);
    remount(&e, "tank");
    assert_eq!(size_of(&path), shown, "the size the kernel showed is the size stored");
    if !seen.is_empty() {
        assert!(fs::read(&path).unwrap() == seen, "what the mount showed before the remount is what the pool holds");
    }
}
