//! The FUSE glue through the kernel: `MemFs` mounted in a temporary
//! directory and driven with std::fs and libc, as any program would.
//! Each test skips (with a printed reason) where /dev/fuse is unavailable.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tarn_engine::posix::{Caller, FileSystem};
use tarn_engine::ErrorKind;
use tarn_fuse::{mount, MemFs, MountHandle, MountOptions};

struct Mounted {
    fs: Arc<MemFs>,
    handle: MountHandle,
    dir: PathBuf,
}

impl Mounted {
    /// `MemFs` (after `setup`) mounted in a fresh directory, or `None` to skip.
    fn new(name: &str, setup: impl FnOnce(&MemFs)) -> Option<Mounted> {
        Mounted::with_options(name, setup, MountOptions::default())
    }

    /// As `new`, mounted with `opts` (its `fsname` set here).
    fn with_options(name: &str, setup: impl FnOnce(&MemFs), opts: MountOptions) -> Option<Mounted> {
        let dir = common::mount_dir("tarn-fuse", name)?;
        let fs = Arc::new(MemFs::new());
        setup(&fs);
        let handle = mount(fs.clone(), &dir, &MountOptions { fsname: format!("memfs-{name}"), ..opts }).expect("mount MemFs");
        Some(Mounted { fs, handle, dir })
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.handle.unmount_force();
        let _ = fs::remove_dir(&self.dir);
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in test paths")
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// 0 for a call that succeeded (returned ≥ 0), else its errno.
fn errno_of(ret: i64) -> i32 {
    if ret < 0 {
        errno()
    } else {
        0
    }
}

#[test]
fn files_directories_links() {
    let Some(m) = Mounted::new("basic", |_| {}) else { return };
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/a"), b"hello world").unwrap();
    assert_eq!(fs::read(m.p("d/a")).unwrap(), b"hello world");
    fs::rename(m.p("d/a"), m.p("b")).unwrap();
    assert!(!m.p("d/a").exists());
    fs::hard_link(m.p("b"), m.p("d/c")).unwrap();
    assert_eq!(fs::metadata(m.p("b")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("d/c", m.p("s")).unwrap();
    assert_eq!(fs::read_link(m.p("s")).unwrap(), Path::new("d/c"));
    assert_eq!(fs::read(m.p("s")).unwrap(), b"hello world");
    let md = fs::symlink_metadata(m.p("s")).unwrap();
    assert!(md.file_type().is_symlink());
    assert_eq!(fs::metadata(m.p("d")).unwrap().nlink(), 2);
    fs::remove_file(m.p("b")).unwrap();
    assert_eq!(fs::metadata(m.p("d/c")).unwrap().nlink(), 1);
    assert_eq!(fs::remove_dir(m.p("d")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    fs::remove_file(m.p("d/c")).unwrap();
    fs::remove_dir(m.p("d")).unwrap();
    fs::remove_file(m.p("s")).unwrap();
    assert_eq!(fs::read_dir(&m.dir).unwrap().count(), 0);
    // Modes as created (the kernel applied the umask; set it explicitly).
    fs::set_permissions(m.p(""), std::os::unix::fs::PermissionsExt::from_mode(0o751)).unwrap();
    assert_eq!(fs::metadata(&m.dir).unwrap().mode() & 0o7777, 0o751);
    // statfs reaches the file system.
    // SAFETY: statvfs writes one struct through a valid pointer.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(cstr(&m.dir).as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_namemax, 255);
}

#[test]
fn rename_flags() {
    let Some(m) = Mounted::new("rename2", |_| {}) else { return };
    fs::write(m.p("a"), b"A").unwrap();
    fs::write(m.p("b"), b"B").unwrap();
    let rename2 = |from: &str, to: &str, flags: u32| {
        // SAFETY: both paths are valid NUL-terminated strings for the call.
        errno_of(unsafe { libc::renameat2(libc::AT_FDCWD, cstr(&m.p(from)).as_ptr(), libc::AT_FDCWD, cstr(&m.p(to)).as_ptr(), flags) } as i64)
    };
    assert_eq!(rename2("a", "b", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(rename2("a", "b", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.p("a")).unwrap(), b"B");
    assert_eq!(fs::read(m.p("b")).unwrap(), b"A");
    assert_eq!(rename2("a", "c", libc::RENAME_NOREPLACE), 0);
    assert_eq!(fs::read(m.p("c")).unwrap(), b"B");
    assert_eq!(rename2("c", "b", 0), 0);
    assert_eq!(fs::read(m.p("b")).unwrap(), b"B");
}

#[test]
fn xattrs_follow_the_size_protocol() {
    let Some(m) = Mounted::new("xattr", |_| {}) else { return };
    fs::write(m.p("f"), b"").unwrap();
    let p = cstr(&m.p("f"));
    let name = CString::new("user.tarn").unwrap();
    let value = b"0123456789";
    // SAFETY: valid path, name and value buffers for each call.
    unsafe {
        assert_eq!(libc::setxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0), 0);
        assert_eq!(libc::setxattr(p.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), libc::XATTR_CREATE), -1);
        assert_eq!(errno(), libc::EEXIST);
        assert_eq!(libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0), 10);
        let mut small = [0u8; 4];
        assert_eq!(libc::getxattr(p.as_ptr(), name.as_ptr(), small.as_mut_ptr().cast(), small.len()), -1);
        assert_eq!(errno(), libc::ERANGE);
        let mut buf = [0u8; 64];
        assert_eq!(libc::getxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()), 10);
        assert_eq!(&buf[..10], value);
        let n = libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        assert_eq!(&buf[..n as usize], b"user.tarn\0");
        assert_eq!(libc::removexattr(p.as_ptr(), name.as_ptr()), 0);
        assert_eq!(libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0), -1);
        assert_eq!(errno(), libc::ENODATA);
    }
}

#[test]
fn readdir_many_entries() {
    let Some(m) = Mounted::new("readdir", |_| {}) else { return };
    fs::create_dir(m.p("big")).unwrap();
    for i in 0..3000 {
        File::create(m.p(&format!("big/file-with-a-longish-name-{i:05}"))).unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(m.p("big")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), 3000);
    assert_eq!(names[0], "file-with-a-longish-name-00000");
    assert_eq!(names[2999], "file-with-a-longish-name-02999");
    assert!(m.fs.calls("readdirplus") > 1, "directories are listed with READDIRPLUS in several batches");
}

#[test]
fn truncate_and_fallocate() {
    let Some(m) = Mounted::new("falloc", |_| {}) else { return };
    let mut f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(m.p("f")).unwrap();
    f.write_all(&[7u8; 10000]).unwrap();
    f.set_len(4000).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 4000);
    f.set_len(20000).unwrap();
    let mut back = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 20000);
    assert!(back[..4000].iter().all(|&b| b == 7) && back[4000..].iter().all(|&b| b == 0));
    let fd = f.as_raw_fd();
    // SAFETY: fallocate on an open descriptor.
    unsafe {
        assert_eq!(libc::fallocate(fd, 0, 0, 65536), 0);
        assert_eq!(libc::fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, 1000), 0);
        assert_eq!(libc::fallocate(fd, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
    }
    assert_eq!(f.metadata().unwrap().len(), 65536);
    let mut head = [1u8; 2000];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut head).unwrap();
    assert!(head[..1000].iter().all(|&b| b == 0) && head[1000..].iter().all(|&b| b == 7));
}

#[test]
fn unlinked_open_file_lives_until_closed() {
    let Some(m) = Mounted::new("unlink-open", |_| {}) else { return };
    let before = m.fs.inode_count();
    let mut f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(m.p("f")).unwrap();
    fs::remove_file(m.p("f")).unwrap();
    assert!(!m.p("f").exists());
    f.write_all(b"still here").unwrap();
    f.sync_all().unwrap();
    let mut back = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "still here");
    assert_eq!(m.fs.inode_count(), before + 1);
    drop(f);
    // RELEASE is asynchronous to close(2): give it a moment.
    let t = Instant::now();
    while m.fs.inode_count() != before && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(m.fs.inode_count(), before, "the inode is freed at release");
}

#[test]
fn fsync_and_o_sync_reach_the_file_system() {
    let Some(m) = Mounted::new("fsync", |_| {}) else { return };
    let mut f = File::create(m.p("f")).unwrap();
    f.write_all(b"x").unwrap();
    f.sync_all().unwrap();
    assert!(m.fs.calls("fsync") >= 1);
    let n = m.fs.calls("fsync");
    let mut s = OpenOptions::new().write(true).custom_flags(libc::O_SYNC).open(m.p("f")).unwrap();
    s.write_all(b"y").unwrap();
    assert!(m.fs.calls("fsync") > n, "an O_SYNC write is followed by FSYNC");
    assert_eq!(fs::read(m.p("f")).unwrap(), b"y");
}

#[test]
fn copy_file_range_copies() {
    let Some(m) = Mounted::new("cfr", |_| {}) else { return };
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.p("src"), &data).unwrap();
    let src = File::open(m.p("src")).unwrap();
    let dst = File::create(m.p("dst")).unwrap();
    let mut off_in: i64 = 1000;
    let mut off_out: i64 = 0;
    // SAFETY: valid descriptors and offset pointers.
    let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut off_in, dst.as_raw_fd(), &mut off_out, 200_000, 0) };
    assert_eq!(n, 200_000);
    drop(dst);
    assert!(fs::read(m.p("dst")).unwrap() == data[1000..201_000], "the copy holds the source's bytes");
    assert!(m.fs.calls("copy_file_range") >= 1, "the copy was done by the file system, not read+write");
}

#[test]
fn small_writes_do_not_each_ask_for_file_capabilities() {
    // Without FUSE_HANDLE_KILLPRIV_V2 (Linux 5.11+) the kernel sends
    // GETXATTR security.capability before every write(2) to see whether
    // it must drop it: one round trip per 4 KiB write. With it, only the
    // first write to an inode asks.
    let Some(m) = Mounted::new("killpriv", |_| {}) else { return };
    let mut f = File::create(m.p("small")).unwrap();
    let block = [0x5au8; 4096];
    for _ in 0..256 {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let asked = m.fs.calls("getxattr");
    assert!(asked <= 1, "256 writes asked for security.capability {asked} times");
    assert_eq!(fs::read(m.p("small")).unwrap(), block.repeat(256));
}

#[test]
fn large_writes_arrive_as_1mib_requests() {
    let Some(m) = Mounted::new("bigwrite", |_| {}) else { return };
    const MIB: usize = 1 << 20;
    let total_mib = 256;
    let buf: Vec<u8> = (0..MIB).map(|i| (i % 253) as u8).collect();
    let mut f = File::create(m.p("big")).unwrap();
    let t = Instant::now();
    for _ in 0..total_mib {
        f.write_all(&buf).unwrap();
    }
    f.sync_all().unwrap();
    let secs = t.elapsed().as_secs_f64();
    drop(f);
    let sizes = m.fs.write_sizes();
    let full = sizes.get(&MIB).copied().unwrap_or(0);
    let requests: u64 = sizes.values().sum();
    eprintln!("MemFs through FUSE: {} MiB in {:.2} s = {:.0} MiB/s; WRITE sizes seen {:?}", total_mib, secs, total_mib as f64 / secs, sizes);
    assert!(full * 10 >= requests * 9, "at least 90% of WRITEs are 1 MiB: {sizes:?}");
    assert_eq!(fs::metadata(m.p("big")).unwrap().len(), (total_mib * MIB) as u64);
    // Read it back cold (the page cache dropped): read-ahead asks in large requests.
    m.handle.invalidate_all();
    let mut f = File::open(m.p("big")).unwrap();
    let mut back = vec![0u8; MIB];
    let t = Instant::now();
    for i in 0..total_mib {
        f.read_exact(&mut back).unwrap();
        assert!(i > 0 || back == buf);
    }
    let secs = t.elapsed().as_secs_f64();
    let reads = m.fs.read_sizes();
    eprintln!("MemFs through FUSE: read {} MiB in {:.2} s = {:.0} MiB/s; READ sizes seen {:?}", total_mib, secs, total_mib as f64 / secs, reads);
    // With the read-ahead raised (root), READs are 1 MiB; else the kernel's 128 KiB.
    use std::os::unix::fs::MetadataExt as _;
    let dev = fs::metadata(&m.dir).unwrap().dev();
    let ra = fs::read_to_string(format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev))).unwrap_or_default();
    let want = if ra.trim() == "1024" { 1 << 20 } else { 128 << 10 };
    let big_reads: u64 = reads.iter().filter(|(s, _)| **s >= want).map(|(_, n)| n).sum();
    assert!(big_reads * 10 >= reads.values().sum::<u64>() * 9, "READs are {want} bytes (read_ahead_kb {}): {reads:?}", ra.trim());
}

#[test]
fn requests_are_served_in_parallel() {
    let data = vec![42u8; 64 << 10];
    let mut inos = (0, 0);
    let Some(m) = Mounted::new("parallel", |fs| {
        let c = Caller::root();
        for (name, slot) in [(b"held".as_slice(), &mut inos.0), (b"other".as_slice(), &mut inos.1)] {
            let a = fs.mknod(&c, fs.root(), name, libc::S_IFREG | 0o644, 0).unwrap();
            fs.write(&c, a.ino, 0, &data).unwrap();
            *slot = a.ino;
        }
    }) else {
        return;
    };
    // A read of "held" blocks in the file system until a read of "other"
    // has completed: with one worker this would wait out its 10 s and fail.
    m.fs.hold_read_until(inos.0, inos.1);
    let held = m.p("held");
    let t = Instant::now();
    let reader = std::thread::spawn(move || fs::read(held));
    while m.fs.calls("read") == 0 && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(fs::read(m.p("other")).unwrap() == data);
    assert!(reader.join().unwrap().unwrap() == data, "the held read completed after the other one");
    assert!(t.elapsed().as_secs() < 5, "the held read was released by the other read, not by its timeout");
    assert!(m.fs.max_in_flight() >= 2, "two calls were in the file system at once");
}

#[test]
fn invalidate_all_shows_changes_made_behind_the_kernel() {
    let Some(m) = Mounted::new("inval", |_| {}) else { return };
    fs::write(m.p("f"), b"old contents").unwrap();
    assert_eq!(fs::read(m.p("f")).unwrap(), b"old contents");
    // Change the file system directly, as a rollback would.
    let attr = m.fs.lookup(m.fs.root(), b"f").unwrap();
    m.fs.setattr(&Caller::root(), attr.ino, &tarn_engine::posix::SetAttr { size: Some(0), ..Default::default() }).unwrap();
    m.fs.write(&Caller::root(), attr.ino, 0, b"new").unwrap();
    m.fs.mknod(&Caller::root(), m.fs.root(), b"g", libc::S_IFREG | 0o644, 0).unwrap();
    assert!(m.handle.kernel_inodes() >= 1);
    m.handle.invalidate_all();
    assert_eq!(fs::read(m.p("f")).unwrap(), b"new");
    assert!(m.p("g").exists());
}

#[test]
fn busy_unmount_fails_then_succeeds() {
    let Some(m) = Mounted::new("busy", |_| {}) else { return };
    let mut f = File::create(m.p("f")).unwrap();
    f.write_all(b"data written before unmount").unwrap();
    let e = m.handle.unmount().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Busy, "{e}");
    assert!(e.to_string().contains("busy"), "{e}");
    assert!(m.handle.is_mounted());
    drop(f);
    m.handle.unmount().unwrap();
    assert!(!m.handle.is_mounted());
    assert!(m.fs.calls("sync_all") >= 1, "unmount syncs the file system");
    let ino = m.fs.lookup(m.fs.root(), b"f").unwrap().ino;
    assert_eq!(m.fs.read(ino, 0, 100).unwrap(), b"data written before unmount", "write-back data reached the file system");
}

#[test]
fn forced_unmount_writes_back_dirty_pages_first() {
    let Some(m) = Mounted::new("force", |_| {}) else { return };
    let mut f = File::create(m.p("f")).unwrap();
    let data = vec![9u8; 3 << 20];
    f.write_all(&data).unwrap();
    // Not fsynced, still open: the pages are dirty in the kernel.
    m.handle.unmount_force().unwrap();
    assert!(!m.handle.is_mounted());
    let ino = m.fs.lookup(m.fs.root(), b"f").unwrap().ino;
    let got = m.fs.read(ino, 0, 4 << 20).unwrap();
    assert!(got == data, "the dirty pages were written back before the abort ({} of {} bytes arrived)", got.len(), data.len());
    let mut buf = [0u8; 1];
    assert!(f.read(&mut buf).is_err(), "the open file fails after a forced unmount");
}

#[test]
fn a_panicking_file_system_call_fails_that_request_only() {
    let Some(m) = Mounted::new("panic", |_| {}) else { return };
    fs::write(m.p("f"), b"x").unwrap();
    let p = cstr(&m.p("f"));
    let name = CString::new("user.a").unwrap();
    let getxattr = || {
        // SAFETY: valid path and name; size 0 asks for the length only.
        errno_of(unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) } as i64)
    };
    m.fs.panic_on(Some("getxattr"));
    // More panics than there are workers: none of them may die.
    for _ in 0..(MountOptions::default().threads * 2) {
        assert_eq!(getxattr(), libc::EIO);
    }
    m.fs.panic_on(None);
    assert_eq!(getxattr(), libc::ENODATA, "the workers still serve");
    assert_eq!(fs::read(m.p("f")).unwrap(), b"x");
}

/// fsyncs wait in the file system for a log round (tarn's intent log
/// shares one among every commit waiting when it starts): they must not
/// hold the mount's workers, or with more fsyncers than workers no round
/// could ever hold more commits than there are workers, and nothing else
/// would be served meanwhile. Here every fsync waits until twice as many
/// as there are workers wait at once.
#[test]
fn fsyncs_waiting_in_the_file_system_hold_no_worker() {
    let Some(m) = Mounted::new("fsyncs", |_| {}) else { return };
    let n = MountOptions::default().threads * 2;
    let files: Vec<File> = (0..n).map(|i| File::create(m.p(&format!("f{i}"))).unwrap()).collect();
    m.fs.hold_fsyncs(n);
    let t = Instant::now();
    let syncers: Vec<_> = files.into_iter().map(|f| std::thread::spawn(move || f.sync_all())).collect();
    while m.fs.calls("fsync") < (n / 2) as u64 && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // As many fsyncs wait as there are workers: a stat is still served.
    fs::write(m.p("other"), b"served").unwrap();
    assert_eq!(fs::read(m.p("other")).unwrap(), b"served");
    for s in syncers {
        s.join().unwrap().expect("every fsync completes once all wait at once");
    }
    assert!(t.elapsed().as_secs() < 5, "the fsyncs were released by all waiting at once, not by their timeout ({:?})", t.elapsed());
    assert!(m.fs.max_in_flight() >= n, "{} calls were in the file system at once", m.fs.max_in_flight());
}

/// fsyncs still waiting in the file system when the connection is
/// aborted: unmount waits for them before it syncs and closes the file
/// system. With one worker, which never waits itself, every fsync is in
/// the wait pool, and the session ends at once.
#[test]
fn unmount_waits_for_fsyncs_still_in_the_file_system() {
    let Some(m) = Mounted::with_options("fsyncunmount", |_| {}, MountOptions { threads: 1, ..Default::default() }) else { return };
    let n = 3;
    let files: Vec<File> = (0..n).map(|i| File::create(m.p(&format!("f{i}"))).unwrap()).collect();
    m.fs.hold_fsyncs(n + 1);
    let syncers: Vec<_> = files.into_iter().map(|f| std::thread::spawn(move || f.sync_all())).collect();
    let t = Instant::now();
    while m.fs.fsyncs_waiting() < n && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(m.fs.fsyncs_waiting(), n);
    let syncs = m.fs.calls("sync_all");
    std::thread::scope(|sc| {
        let unmount = sc.spawn(|| m.handle.unmount_force());
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(!unmount.is_finished(), "unmount returned with fsyncs still running");
        assert_eq!(m.fs.calls("sync_all"), syncs, "the file system was synced under running fsyncs");
        m.fs.release_fsyncs();
        unmount.join().unwrap().expect("unmount completes once the fsyncs are done");
    });
    assert_eq!(m.fs.fsyncs_waiting(), 0);
    assert!(m.fs.calls("sync_all") > syncs, "unmount synced the file system after the fsyncs");
    // The connection is gone: each caller hears of it (ENOTCONN), or of
    // its fsync's success if the reply made it first.
    for s in syncers {
        let _ = s.join().unwrap();
    }
}

/// Runs a command; `None` if the program is not installed.
fn sh(dir: &Path, prog: &str, args: &[&str]) -> Option<std::process::Output> {
    match std::process::Command::new(prog).args(args).current_dir(dir).output() {
        Ok(o) => {
            assert!(o.status.success(), "{prog} {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
            Some(o)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("{prog}: {e}"),
    }
}

#[test]
fn real_tools_cp_tar_git() {
    let Some(m) = Mounted::new("tools", |_| {}) else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let src = src.to_str().unwrap();
    let tree = m.p("tree");
    let tree = tree.to_str().unwrap();
    if sh(&m.dir, "cp", &["-a", src, tree]).is_none() {
        eprintln!("skipping real_tools_cp_tar_git: cp is not installed");
        return;
    }
    sh(&m.dir, "diff", &["-r", src, tree]).expect("diff is installed with cp");
    if sh(&m.dir, "tar", &["cf", "tree.tar", "tree"]).is_some() {
        sh(&m.dir, "mkdir", &["x"]);
        sh(&m.dir.join("x"), "tar", &["xf", "../tree.tar"]);
        sh(&m.dir, "diff", &["-r", src, "x/tree"]);
    }
    let git = |args: &[&str]| sh(Path::new(tree), "git", &[&["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"], args].concat());
    if git(&["init", "-q"]).is_none() {
        eprintln!("git is not installed: its part skipped");
        return;
    }
    git(&["add", "."]);
    git(&["commit", "-qm", "first"]);
    fs::write(m.p("tree/lib.rs"), b"changed\n").unwrap();
    git(&["commit", "-qam", "second"]);
    git(&["gc", "-q"]);
    git(&["fsck", "--strict"]);
    let log = git(&["log", "--oneline"]).unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 2);
}
