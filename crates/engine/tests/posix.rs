//! The POSIX layer's semantics, one test per operation family: what each
//! call does, the errors it returns, what survives an export and reopen,
//! the unlinked set, the space cost of small files and a directory of
//! 200,000 entries.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use common::mount;
use tarn_engine::posix::*;
use tarn_engine::sys::FaultDevice;
use tarn_engine::Pool;

const ROOT: Caller = Caller::new(0, 0, 1, 0);
const USER: Caller = Caller::new(1000, 1000, 2, 0);
const OTHER: Caller = Caller::new(2000, 2000, 3, 0);

fn pool_of(size: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    common::pool_of(size, 7)
}

fn setup() -> (Vec<Arc<FaultDevice>>, Pool, Arc<PosixFs>) {
    let (devs, pool) = pool_of(256 << 20);
    let fs = mount(&pool);
    (devs, pool, fs)
}

fn reopen(devs: &[Arc<FaultDevice>], pool: Pool, fs: Arc<PosixFs>) -> (Pool, Arc<PosixFs>) {
    drop(fs);
    pool.export().expect("export");
    let pool = common::open(devs).expect("reopen");
    let fs = mount(&pool);
    (pool, fs)
}

fn errno<T: std::fmt::Debug>(r: PResult<T>) -> i32 {
    r.expect_err("the call must fail").errno
}

fn file(fs: &PosixFs, parent: Ino, name: &str) -> Ino {
    fs.mknod(&ROOT, parent, name.as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino
}

fn dir(fs: &PosixFs, parent: Ino, name: &str) -> Ino {
    fs.mkdir(&ROOT, parent, name.as_bytes(), 0o755).expect("mkdir").ino
}

fn names(fs: &PosixFs, d: Ino) -> Vec<String> {
    let mut v: Vec<String> = fs.readdir(d, 0, usize::MAX).unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect();
    v.sort();
    v
}

#[test]
fn create_lookup_and_name_errors() {
    let (_d, _p, fs) = setup();
    let r = fs.root();
    let a = fs.mknod(&USER, r, b"a", libc::S_IFREG | 0o640, 0).unwrap();
    assert_eq!((a.kind, a.perm, a.uid, a.gid, a.nlink, a.size), (FileKind::File, 0o640, 1000, 1000, 1, 0));
    assert_eq!(fs.lookup(r, b"a").unwrap(), fs.getattr(a.ino).unwrap());
    let fifo = fs.mknod(&ROOT, r, b"p", libc::S_IFIFO | 0o600, 0).unwrap();
    assert_eq!(fifo.kind, FileKind::Fifo);
    let dev = fs.mknod(&ROOT, r, b"dev", libc::S_IFCHR | 0o600, 0x0501).unwrap();
    assert_eq!((dev.kind, dev.rdev), (FileKind::CharDev, 0x0501));
    let umask = Caller { umask: 0o022, ..USER };
    assert_eq!(fs.mknod(&umask, r, b"m", libc::S_IFREG | 0o666, 0).unwrap().perm, 0o644);
    assert_eq!(errno(fs.mknod(&ROOT, r, b"a", libc::S_IFREG | 0o644, 0)), libc::EEXIST);
    assert_eq!(errno(fs.mkdir(&ROOT, r, b"a", 0o755)), libc::EEXIST);
    assert_eq!(errno(fs.mkdir(&ROOT, r, b".", 0o755)), libc::EEXIST);
    assert_eq!(errno(fs.lookup(r, b"nope")), libc::ENOENT);
    assert_eq!(errno(fs.lookup(a.ino, b"x")), libc::ENOTDIR);
    assert_eq!(errno(fs.mknod(&ROOT, a.ino, b"x", libc::S_IFREG, 0)), libc::ENOTDIR);
    let long = vec![b'n'; 256];
    assert_eq!(errno(fs.mknod(&ROOT, r, &long, libc::S_IFREG, 0)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.lookup(r, &long)), libc::ENAMETOOLONG);
    let max = vec![b'n'; 255];
    fs.mknod(&ROOT, r, &max, libc::S_IFREG, 0).unwrap();
    assert_eq!(fs.lookup(r, &max).unwrap().kind, FileKind::File);
    assert_eq!(errno(fs.mknod(&ROOT, r, b"a/b", libc::S_IFREG, 0)), libc::EINVAL);
    assert_eq!(errno(fs.mknod(&ROOT, r, b"d", libc::S_IFDIR | 0o755, 0)), libc::EINVAL);
    assert_eq!(errno(fs.getattr(123_456)), libc::ENOENT);
    assert_eq!(fs.lookup(r, b".").unwrap().ino, r);
    assert_eq!(fs.lookup(r, b"..").unwrap().ino, r);
}

#[test]
fn directories_count_links_and_refuse_bad_removals() {
    let (_d, _p, fs) = setup();
    let r = fs.root();
    assert_eq!(fs.getattr(r).unwrap().nlink, 2);
    let d = dir(&fs, r, "d");
    let sub = dir(&fs, d, "sub");
    file(&fs, d, "f");
    assert_eq!(fs.getattr(r).unwrap().nlink, 3);
    assert_eq!(fs.getattr(d).unwrap().nlink, 3);
    assert_eq!(fs.getattr(sub).unwrap().nlink, 2);
    assert_eq!(fs.lookup(sub, b"..").unwrap().ino, d);
    assert_eq!(names(&fs, d), vec![".", "..", "f", "sub"]);
    assert_eq!(errno(fs.rmdir(&ROOT, r, b"d")), libc::ENOTEMPTY);
    assert_eq!(errno(fs.rmdir(&ROOT, d, b"f")), libc::ENOTDIR);
    assert_eq!(errno(fs.unlink(&ROOT, d, b"sub")), libc::EISDIR);
    assert_eq!(errno(fs.rmdir(&ROOT, d, b".")), libc::EINVAL);
    assert_eq!(errno(fs.rmdir(&ROOT, d, b"..")), libc::ENOTEMPTY);
    assert_eq!(errno(fs.unlink(&ROOT, d, b"none")), libc::ENOENT);
    fs.unlink(&ROOT, d, b"f").unwrap();
    fs.rmdir(&ROOT, d, b"sub").unwrap();
    assert_eq!(errno(fs.getattr(sub)), libc::ENOENT);
    assert_eq!(fs.getattr(d).unwrap().nlink, 2);
    fs.rmdir(&ROOT, r, b"d").unwrap();
    assert_eq!(fs.getattr(r).unwrap().nlink, 2);
    assert_eq!(names(&fs, r), vec![".", ".."]);
    fs.verify().expect("the tree verifies");
}

#[test]
fn rename_moves_replaces_and_exchanges() {
    let (_d, _p, fs) = setup();
    let r = fs.root();
    let a = dir(&fs, r, "a");
    let b = dir(&fs, r, "b");
    let f = file(&fs, a, "f");
    fs.rename(&ROOT, a, b"f", b, b"g", RenameFlags::default()).unwrap();
    assert_eq!(fs.lookup(b, b"g").unwrap().ino, f);
    assert_eq!(errno(fs.lookup(a, b"f")), libc::ENOENT);
    // A directory moving between parents carries its ".." link along.
    let c = dir(&fs, a, "c");
    fs.rename(&ROOT, a, b"c", b, b"c", RenameFlags::default()).unwrap();
    assert_eq!((fs.getattr(a).unwrap().nlink, fs.getattr(b).unwrap().nlink), (2, 3));
    assert_eq!(fs.lookup(c, b"..").unwrap().ino, b);
    // Into its own subtree.
    assert_eq!(errno(fs.rename(&ROOT, r, b"b", c, b"x", RenameFlags::default())), libc::EINVAL);
    assert_eq!(errno(fs.rename(&ROOT, r, b"b", b, b"x", RenameFlags::default())), libc::EINVAL);
    // Replacement rules.
    assert_eq!(errno(fs.rename(&ROOT, b, b"g", b, b"c", RenameFlags::default())), libc::EISDIR);
    assert_eq!(errno(fs.rename(&ROOT, b, b"c", b, b"g", RenameFlags::default())), libc::ENOTDIR);
    file(&fs, c, "inner");
    let e = dir(&fs, b, "e");
    assert_eq!(errno(fs.rename(&ROOT, b, b"e", b, b"c", RenameFlags::default())), libc::ENOTEMPTY);
    fs.rename(&ROOT, b, b"c", b, b"e", RenameFlags::default()).unwrap();
    assert_eq!(errno(fs.getattr(e)), libc::ENOENT);
    assert_eq!(fs.getattr(b).unwrap().nlink, 3);
    let h = file(&fs, b, "h");
    fs.rename(&ROOT, b, b"h", b, b"g", RenameFlags::default()).unwrap();
    assert_eq!(errno(fs.getattr(f)), libc::ENOENT);
    assert_eq!(fs.lookup(b, b"g").unwrap().ino, h);
    let noreplace = RenameFlags { noreplace: true, exchange: false };
    file(&fs, b, "k");
    assert_eq!(errno(fs.rename(&ROOT, b, b"k", b, b"g", noreplace)), libc::EEXIST);
    fs.rename(&ROOT, b, b"k", b, b"k2", noreplace).unwrap();
    assert_eq!(errno(fs.rename(&ROOT, b, b"nope", b, b"z", RenameFlags::default())), libc::ENOENT);
    // Exchange a file in b with a directory in a: links follow the directory.
    let x = dir(&fs, a, "x");
    let exchange = RenameFlags { noreplace: false, exchange: true };
    fs.rename(&ROOT, b, b"g", a, b"x", exchange).unwrap();
    assert_eq!(fs.lookup(a, b"x").unwrap().ino, h);
    assert_eq!(fs.lookup(b, b"g").unwrap().ino, x);
    assert_eq!((fs.getattr(a).unwrap().nlink, fs.getattr(b).unwrap().nlink), (2, 4));
    assert_eq!(fs.lookup(x, b"..").unwrap().ino, b);
    assert_eq!(errno(fs.rename(&ROOT, b, b"g", a, b"none", exchange)), libc::ENOENT);
    assert_eq!(errno(fs.rename(&ROOT, b, b"g", a, b"x", RenameFlags { noreplace: true, exchange: true })), libc::EINVAL);
    // Two names of one inode: rename does nothing.
    fs.link(&ROOT, h, a, b"h2").unwrap();
    fs.rename(&ROOT, a, b"x", a, b"h2", RenameFlags::default()).unwrap();
    assert_eq!(fs.getattr(h).unwrap().nlink, 2);
    fs.verify().expect("the tree verifies");
}

#[test]
fn hard_links_and_symlinks() {
    let (_d, _p, fs) = setup();
    let r = fs.root();
    let f = file(&fs, r, "f");
    fs.write(&ROOT, f, 0, b"hello").unwrap();
    let l = fs.link(&ROOT, f, r, b"l").unwrap();
    assert_eq!((l.ino, l.nlink), (f, 2));
    assert_eq!(errno(fs.link(&ROOT, f, r, b"l")), libc::EEXIST);
    assert_eq!(errno(fs.link(&ROOT, r, r, b"rootlink")), libc::EPERM);
    fs.unlink(&ROOT, r, b"f").unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    assert_eq!(fs.read(f, 0, 100).unwrap(), b"hello");
    let s = fs.symlink(&USER, r, b"s", b"some/where/far").unwrap();
    assert_eq!((s.kind, s.perm, s.size), (FileKind::Symlink, 0o777, 14));
    assert_eq!(fs.readlink(s.ino).unwrap(), b"some/where/far");
    assert_eq!(errno(fs.readlink(f)), libc::EINVAL);
    assert_eq!(errno(fs.symlink(&ROOT, r, b"t", &[b'x'; 4096])), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.symlink(&ROOT, r, b"t", b"")), libc::ENOENT);
    let long = vec![b'y'; 4095];
    let t = fs.symlink(&ROOT, r, b"t", &long).unwrap();
    assert_eq!(fs.readlink(t.ino).unwrap(), long);
    fs.verify().expect("the tree verifies");
}

#[test]
fn file_data_sizes_and_times() {
    let (_d, _p, fs) = setup();
    let f = file(&fs, fs.root(), "f");
    let before = fs.getattr(f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert_eq!(fs.write(&ROOT, f, 1 << 20, b"tail").unwrap(), 4);
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, (1 << 20) + 4);
    assert!(a.mtime > before.mtime && a.ctime > before.ctime, "nanosecond times move");
    let hole = fs.read(f, 4096, 8192).unwrap();
    assert!(hole.iter().all(|&b| b == 0));
    assert_eq!(fs.read(f, (1 << 20) - 2, 100).unwrap(), b"\0\0tail");
    assert!(fs.read(f, 10 << 20, 10).unwrap().is_empty());
    let set = SetAttr { size: Some(3), ..Default::default() };
    assert_eq!(fs.setattr(&ROOT, f, &set).unwrap().size, 3);
    fs.setattr(&ROOT, f, &SetAttr { size: Some(100), ..Default::default() }).unwrap();
    assert_eq!(fs.read(f, 0, 200).unwrap(), vec![0u8; 100]);
    let d = fs.root();
    assert_eq!(errno(fs.write(&ROOT, d, 0, b"x")), libc::EISDIR);
    assert_eq!(errno(fs.read(d, 0, 1)), libc::EISDIR);
    assert_eq!(errno(fs.setattr(&ROOT, d, &SetAttr { size: Some(0), ..Default::default() })), libc::EISDIR);
    let t = Timespec { sec: 1_000_000_000, nsec: 123_456_789 };
    let a = fs.setattr(&ROOT, f, &SetAttr { atime: Some(TimeOrNow::At(t)), mtime: Some(TimeOrNow::At(t)), ..Default::default() }).unwrap();
    assert_eq!((a.atime, a.mtime), (t, t));
    let a = fs.setattr(&ROOT, f, &SetAttr { mode: Some(0o4711), uid: Some(5), gid: Some(6), ..Default::default() }).unwrap();
    assert_eq!((a.perm, a.uid, a.gid), (0o711, 5, 6), "chown clears set-user-ID");
    assert_eq!(errno(fs.write(&ROOT, f, u64::MAX - 2, b"xyz")), libc::EFBIG);
}

#[test]
fn changing_a_file_drops_its_privileges() {
    // The mount leaves these to the file system (FUSE_HANDLE_KILLPRIV_V2),
    // so they are the POSIX layer's: set-user-ID goes when anyone but root
    // writes, truncates, fallocates or copies into a file, and on any
    // chown; set-group-ID with it when group-executable;
    // `security.capability` on all of them.
    let (_d, _p, fs) = setup();
    let user = Caller::new(1000, 1000, 1, 0);
    let cap = b"security.capability";
    let big = vec![7u8; 1000]; // goes to the large-xattr object
    let f = file(&fs, fs.root(), "f");
    let arm = |mode: u32| {
        fs.setattr(&ROOT, f, &SetAttr { mode: Some(mode), ..Default::default() }).unwrap();
        fs.setxattr(&ROOT, f, cap, b"\x01\0\0\x02", XattrSet::Any).unwrap();
        fs.setxattr(&ROOT, f, b"user.big", &big, XattrSet::Any).unwrap();
    };
    let perm = || fs.getattr(f).unwrap().perm;
    let has_cap = || fs.getxattr(f, cap).is_ok();

    arm(0o6755);
    fs.write(&ROOT, f, 0, b"root").unwrap();
    assert_eq!(perm(), 0o6755, "root keeps set-user-ID on write");
    assert!(!has_cap(), "any write removes security.capability");
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big, "other attributes stay");

    arm(0o6755);
    fs.write(&user, f, 0, b"user").unwrap();
    assert_eq!(perm(), 0o0755, "a user's write drops set-user-ID and set-group-ID");
    assert!(!has_cap());

    arm(0o6745);
    fs.write(&user, f, 0, b"user").unwrap();
    assert_eq!(perm(), 0o2745, "set-group-ID without group execute marks locking and stays");

    arm(0o4755);
    fs.setattr(&user, f, &SetAttr { size: Some(1), ..Default::default() }).unwrap();
    assert_eq!(perm(), 0o0755, "a user's truncate drops set-user-ID");
    assert!(!has_cap(), "truncate removes security.capability");

    arm(0o4755);
    fs.fallocate(&user, f, 0, 1 << 16, FallocFlags::default()).unwrap();
    assert_eq!(perm(), 0o0755, "a user's fallocate that grows the file drops set-user-ID");
    assert!(!has_cap(), "fallocate removes security.capability");

    let src = file(&fs, fs.root(), "src");
    fs.write(&ROOT, src, 0, &[1u8; 4096]).unwrap();
    arm(0o4755);
    assert_eq!(fs.copy_file_range(&user, src, 0, f, 0, 4096).unwrap(), 4096);
    assert_eq!(perm(), 0o0755, "a user's copy_file_range drops set-user-ID");
    assert!(!has_cap(), "copy_file_range removes security.capability");

    arm(0o4755);
    let owner = fs.getattr(f).unwrap().uid;
    fs.setattr(&ROOT, f, &SetAttr { uid: Some(owner), ..Default::default() }).unwrap();
    assert_eq!(perm(), 0o0755, "a chown, even to the same owner, drops set-user-ID");
    assert!(!has_cap(), "chown removes security.capability");

    // Nothing to drop: a write to a plain file keeps its attributes.
    fs.setxattr(&ROOT, f, b"user.small", b"v", XattrSet::Any).unwrap();
    fs.write(&user, f, 0, b"again").unwrap();
    assert_eq!(fs.getxattr(f, b"user.small").unwrap(), b"v");
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
}

#[test]
fn fallocate_modes() {
    let (_d, _p, fs) = setup();
    let f = file(&fs, fs.root(), "f");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 + 1).collect();
    fs.write(&ROOT, f, 0, &data).unwrap();
    let keep = FallocFlags { keep_size: true, ..Default::default() };
    fs.fallocate(&ROOT, f, 0, 1 << 30, keep).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 300_000);
    fs.fallocate(&ROOT, f, 0, 400_000, FallocFlags::default()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 400_000);
    let punch = FallocFlags { keep_size: true, punch_hole: true, zero_range: false };
    fs.fallocate(&ROOT, f, 1000, 200_000, punch).unwrap();
    let mut model = data.clone();
    model.resize(400_000, 0);
    model[1000..201_000].fill(0);
    assert_eq!(fs.read(f, 0, 500_000).unwrap(), model);
    let zero = FallocFlags { zero_range: true, ..Default::default() };
    fs.fallocate(&ROOT, f, 250_000, 200_000, zero).unwrap();
    model[250_000..].fill(0);
    model.resize(450_000, 0);
    assert_eq!(fs.read(f, 0, 500_000).unwrap(), model);
    assert_eq!(errno(fs.fallocate(&ROOT, f, 0, 10, FallocFlags { punch_hole: true, ..Default::default() })), libc::EOPNOTSUPP);
    assert_eq!(errno(fs.fallocate(&ROOT, f, 0, 0, FallocFlags::default())), libc::EINVAL);
    assert_eq!(errno(fs.fallocate(&ROOT, fs.root(), 0, 1, FallocFlags::default())), libc::EISDIR);
}

#[test]
fn set_id_bits_and_sticky_directories() {
    let (_d, _p, fs) = setup();
    let r = fs.root();
    let f = fs.mknod(&USER, r, b"f", libc::S_IFREG | 0o6755, 0).unwrap();
    assert_eq!(f.perm, 0o6755);
    fs.write(&ROOT, f.ino, 0, b"root keeps the bits").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o6755);
    fs.write(&USER, f.ino, 0, b"a user clears them").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o0755);
    // Set-group-ID directory: group and bit inherited.
    let g = fs.mkdir(&ROOT, r, b"g", 0o2777).unwrap();
    fs.setattr(&ROOT, g.ino, &SetAttr { gid: Some(77), mode: Some(0o2777), ..Default::default() }).unwrap();
    let child = fs.mknod(&USER, g.ino, b"c", libc::S_IFREG | 0o644, 0).unwrap();
    assert_eq!((child.uid, child.gid), (1000, 77));
    let sub = fs.mkdir(&USER, g.ino, b"sub", 0o755).unwrap();
    assert_eq!((sub.gid, sub.perm & 0o2000), (77, 0o2000));
    // Sticky directory: only the owner of the entry, of the dir, or root.
    let t = fs.mkdir(&ROOT, r, b"tmp", 0o1777).unwrap().ino;
    fs.mknod(&USER, t, b"mine", libc::S_IFREG | 0o644, 0).unwrap();
    assert_eq!(errno(fs.unlink(&OTHER, t, b"mine")), libc::EPERM);
    assert_eq!(errno(fs.rename(&OTHER, t, b"mine", t, b"theirs", RenameFlags::default())), libc::EPERM);
    fs.rename(&USER, t, b"mine", t, b"still-mine", RenameFlags::default()).unwrap();
    fs.unlink(&USER, t, b"still-mine").unwrap();
    fs.verify().expect("the tree verifies");
}

#[test]
fn access_times_follow_relatime() {
    let (_d, pool, fs) = setup();
    let f = file(&fs, fs.root(), "f");
    fs.write(&ROOT, f, 0, b"data").unwrap();
    let old = Timespec { sec: 1000, nsec: 0 };
    fs.setattr(&ROOT, f, &SetAttr { atime: Some(TimeOrNow::At(old)), ..Default::default() }).unwrap();
    fs.read(f, 0, 4).unwrap();
    let a1 = fs.getattr(f).unwrap().atime;
    assert!(a1 > old, "an access time before the modification is refreshed");
    fs.read(f, 0, 4).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, a1, "relatime: not again");
    drop(fs);
    let opts = PosixOptions { atime: false, ..Default::default() };
    let fs = PosixFs::open(pool.root().clone(), opts).unwrap();
    fs.setattr(&ROOT, f, &SetAttr { atime: Some(TimeOrNow::At(old)), ..Default::default() }).unwrap();
    fs.read(f, 0, 4).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, old, "atime=off");
    let strict = PosixFs::open(pool.root().clone(), PosixOptions { relatime: false, ..Default::default() }).unwrap();
    strict.read(f, 0, 4).unwrap();
    let a2 = strict.getattr(f).unwrap().atime;
    strict.read(f, 0, 4).unwrap();
    assert!(strict.getattr(f).unwrap().atime >= a2);
}

#[test]
fn extended_attributes_small_and_large() {
    let (devs, pool, fs) = setup();
    let f = file(&fs, fs.root(), "f");
    fs.setxattr(&ROOT, f, b"user.small", b"v1", XattrSet::Any).unwrap();
    assert_eq!(fs.getxattr(f, b"user.small").unwrap(), b"v1");
    assert_eq!(errno(fs.setxattr(&ROOT, f, b"user.small", b"v2", XattrSet::Create)), libc::EEXIST);
    assert_eq!(errno(fs.setxattr(&ROOT, f, b"user.none", b"v2", XattrSet::Replace)), libc::ENODATA);
    fs.setxattr(&ROOT, f, b"user.small", b"v2", XattrSet::Replace).unwrap();
    let big: Vec<u8> = (0..XATTR_VALUE_MAX).map(|i| i as u8).collect();
    fs.setxattr(&ROOT, f, b"user.big", &big, XattrSet::Create).unwrap();
    for i in 0..20 {
        fs.setxattr(&ROOT, f, format!("user.n{i}").as_bytes(), &[i as u8; 40], XattrSet::Any).unwrap();
    }
    assert_eq!(errno(fs.setxattr(&ROOT, f, b"user.huge", &vec![0; XATTR_VALUE_MAX + 1], XattrSet::Any)), libc::E2BIG);
    assert_eq!(errno(fs.getxattr(f, b"user.none")), libc::ENODATA);
    assert_eq!(errno(fs.removexattr(&ROOT, f, b"user.none")), libc::ENODATA);
    fs.removexattr(&ROOT, f, b"user.n3").unwrap();
    let (pool, fs) = reopen(&devs, pool, fs);
    assert_eq!(fs.getxattr(f, b"user.small").unwrap(), b"v2");
    assert_eq!(fs.getxattr(f, b"user.big").unwrap(), big);
    assert_eq!(fs.getxattr(f, b"user.n19").unwrap(), vec![19u8; 40]);
    let mut list = fs.listxattr(f).unwrap();
    list.sort();
    assert_eq!(list.len(), 21);
    assert!(!list.contains(&b"user.n3".to_vec()));
    fs.setxattr(&ROOT, fs.root(), b"user.on-dir", b"1", XattrSet::Any).unwrap();
    assert_eq!(fs.getxattr(fs.root(), b"user.on-dir").unwrap(), b"1");
    drop(pool);
}

#[test]
fn read_only_refuses_every_change() {
    let (_d, pool, fs) = setup();
    let r = fs.root();
    let f = file(&fs, r, "f");
    fs.write(&ROOT, f, 0, b"x").unwrap();
    drop(fs);
    let ro = PosixFs::open(pool.root().clone(), PosixOptions { readonly: true, ..Default::default() }).unwrap();
    let rofs = libc::EROFS;
    assert_eq!(errno(ro.mknod(&ROOT, r, b"n", libc::S_IFREG, 0)), rofs);
    assert_eq!(errno(ro.mkdir(&ROOT, r, b"n", 0o755)), rofs);
    assert_eq!(errno(ro.symlink(&ROOT, r, b"n", b"t")), rofs);
    assert_eq!(errno(ro.link(&ROOT, f, r, b"n")), rofs);
    assert_eq!(errno(ro.unlink(&ROOT, r, b"f")), rofs);
    assert_eq!(errno(ro.rename(&ROOT, r, b"f", r, b"g", RenameFlags::default())), rofs);
    assert_eq!(errno(ro.write(&ROOT, f, 0, b"y")), rofs);
    assert_eq!(errno(ro.setattr(&ROOT, f, &SetAttr { mode: Some(0o600), ..Default::default() })), rofs);
    assert_eq!(errno(ro.fallocate(&ROOT, f, 0, 10, FallocFlags::default())), rofs);
    assert_eq!(errno(ro.setxattr(&ROOT, f, b"user.a", b"b", XattrSet::Any)), rofs);
    assert_eq!(ro.read(f, 0, 10).unwrap(), b"x");
    assert_eq!(ro.lookup(r, b"f").unwrap().ino, f);
    ro.fsync(f, false).unwrap();
}

#[test]
fn a_tree_survives_export_and_reopen() {
    let (devs, pool, fs) = setup();
    let r = fs.root();
    let d = dir(&fs, r, "d");
    let f = file(&fs, d, "f");
    let data = common::pattern(200_000, 3);
    fs.write(&ROOT, f, 0, &data).unwrap();
    fs.symlink(&ROOT, d, b"s", b"f").unwrap();
    fs.link(&ROOT, f, r, b"hard").unwrap();
    for i in 0..500 {
        file(&fs, d, &format!("many-{i}"));
    }
    let before: Vec<Attr> = [r, d, f].iter().map(|&i| fs.getattr(i).unwrap()).collect();
    fs.fsync(f, false).unwrap();
    let (_pool, fs) = reopen(&devs, pool, fs);
    assert_eq!(fs.root(), r);
    for (i, a) in [r, d, f].iter().zip(&before) {
        let now = fs.getattr(*i).unwrap();
        assert_eq!((now.nlink, now.size, now.mtime, now.perm), (a.nlink, a.size, a.mtime, a.perm));
    }
    assert_eq!(fs.read(f, 0, 300_000).unwrap(), data);
    assert_eq!(fs.readlink(fs.lookup(d, b"s").unwrap().ino).unwrap(), b"f");
    assert_eq!(fs.lookup(r, b"hard").unwrap().ino, f);
    assert_eq!(names(&fs, d).len(), 2 + 2 + 500);
    assert_eq!(fs.getattr(d).unwrap().size, 2 + 2 + 500);
    fs.verify().expect("the tree verifies");
}

#[test]
fn unlinked_open_files_live_until_release_and_are_drained_after_a_crash() {
    let (devs, pool, fs) = setup();
    let r = fs.root();
    let keep = file(&fs, r, "keep");
    fs.write(&ROOT, keep, 0, b"still here").unwrap();
    fs.open(keep).unwrap();
    fs.unlink(&ROOT, r, b"keep").unwrap();
    assert_eq!(fs.read(keep, 0, 100).unwrap(), b"still here");
    assert_eq!(fs.getattr(keep).unwrap().nlink, 0);
    assert_eq!(fs.unlinked_count(), 1);
    fs.release(keep).unwrap();
    assert_eq!(fs.unlinked_count(), 0);
    assert_eq!(errno(fs.getattr(keep)), libc::ENOENT);
    // Open and nameless when the "crash" comes: the next mount frees it.
    let lost = file(&fs, r, "lost");
    fs.write(&ROOT, lost, 0, &common::pattern(100_000, 1)).unwrap();
    fs.setxattr(&ROOT, lost, b"user.big", &[1; 1000], XattrSet::Any).unwrap();
    fs.open(lost).unwrap();
    fs.unlink(&ROOT, r, b"lost").unwrap();
    fs.sync_all().unwrap();
    let objects = pool.root().object_count();
    let (pool, fs) = reopen(&devs, pool, fs);
    assert_eq!(fs.unlinked_count(), 0);
    assert_eq!(errno(fs.getattr(lost)), libc::ENOENT);
    assert_eq!(pool.root().object_count(), objects - 2, "inode and xattr object freed");
    assert_eq!(names(&fs, r), vec![".", ".."]);
    fs.verify().expect("the tree verifies");
}

/// The cost bound of a 1 KiB file under each `redundant_metadata`: it lives
/// in its dnode, so it costs at most 1.25 KiB with its directory entry
/// where dnode blocks and directories have one copy (`some`, `none`), and
/// twice that where they have two (`all`, the default: OpenZFS's choice,
/// dnode blocks are metadata; measured in docs/benchmarks.md).
const SMALL_FILE_BOUNDS: [(&str, f64); 2] = [("some", 1280.0), ("all", 2560.0)];

/// A fresh file system whose root dataset has `redundant_metadata=value`.
fn setup_redundant(value: &str) -> (Vec<Arc<FaultDevice>>, Pool, Arc<PosixFs>) {
    let (d, pool, fs) = setup();
    pool.datasets().set("tank", "redundant_metadata", value).expect("set redundant_metadata");
    (d, pool, fs)
}

/// A 1 KiB file with its attributes is stored inline in its dnode: with
/// its directory entry, it must cost at most 1.25 KiB on disk (for each
/// copy of the dnode and directory blocks).
#[test]
fn a_one_kib_file_costs_at_most_one_and_a_quarter_kib() {
    for (value, bound) in SMALL_FILE_BOUNDS {
        one_kib_files_cost_at_most(value, bound);
    }
}

fn one_kib_files_cost_at_most(value: &str, bound: f64) {
    let (_d, pool, fs) = setup_redundant(value);
    let d = dir(&fs, fs.root(), "d");
    fs.sync_all().unwrap();
    let before = pool.root().used_bytes();
    let n = 2000u64;
    for i in 0..n {
        let f = file(&fs, d, &format!("f{i:05}"));
        fs.write(&ROOT, f, 0, &common::pattern(1024, i)).unwrap();
    }
    fs.sync_all().unwrap();
    let dir_bytes = pool.root().info(d).unwrap().used_bytes;
    let total = pool.root().used_bytes() - before;
    let per_file = total as f64 / n as f64;
    println!("1 KiB files, redundant_metadata={value}: {per_file:.0} bytes each on disk, of which the directory {:.0} bytes per entry", dir_bytes as f64 / n as f64);
    assert!(per_file <= bound, "redundant_metadata={value}: a 1 KiB file costs {per_file} bytes");
    let f = fs.lookup(d, b"f01999").unwrap().ino;
    assert!(pool.root().info(f).unwrap().inline);
    assert_eq!(fs.read(f, 0, 2000).unwrap(), common::pattern(1024, 1999));
}

/// Files created by several writers at once (each created before the
/// others are written, as through a mount with several threads) still get
/// their 1 KiB inline: a new file's room is its own from the start.
#[test]
fn small_files_created_side_by_side_stay_inline() {
    for (value, bound) in SMALL_FILE_BOUNDS {
        side_by_side_files_cost_at_most(value, bound);
    }
}

fn side_by_side_files_cost_at_most(value: &str, bound: f64) {
    let (_d, pool, fs) = setup_redundant(value);
    let dirs: Vec<Ino> = (0..4).map(|t| dir(&fs, fs.root(), &format!("t{t}"))).collect();
    fs.sync_all().unwrap();
    let before = pool.root().used_bytes();
    let n = 1000u64;
    let mut files = Vec::new();
    for i in 0..n {
        // Four creates, then the four writes.
        files.push(file(&fs, dirs[(i % 4) as usize], &format!("f{i:05}")));
        if files.len() == 4 {
            for (k, &f) in files.iter().enumerate() {
                fs.write(&ROOT, f, 0, &common::pattern(1024, i + k as u64)).unwrap();
            }
            files.clear();
        }
    }
    fs.sync_all().unwrap();
    let per_file = (pool.root().used_bytes() - before) as f64 / n as f64;
    assert!(per_file <= bound, "redundant_metadata={value}: a 1 KiB file created beside others costs {per_file} bytes");
    for t in 0..4u64 {
        let f = fs.lookup(dirs[t as usize], format!("f{:05}", 996 + t).as_bytes()).unwrap().ino;
        assert!(pool.root().info(f).unwrap().inline, "file {} of writer {t} is inline", 996 + t);
    }
}

/// statfs reports as OpenZFS's zfs_statvfs: size = used + available, free
/// = available (the slop reserve is nobody's), so an empty pool's file
/// system is the pool less its slop; writing moves bytes from available to
/// used without changing the size (bar metadata); files count objects.
#[test]
fn statfs_tells_the_truth() {
    let (_d, pool, fs) = setup();
    let s0 = fs.statfs().unwrap();
    assert_eq!(s0.namelen, 255);
    assert_eq!(s0.files - s0.ffree, pool.root().object_count());
    assert_eq!(s0.bfree, s0.bavail, "free space is what a writer may use");
    let st = pool.status();
    let unit = s0.frsize as u64;
    let slop = (st.size / 32).max(4 << 20);
    let size0 = s0.blocks * unit;
    assert!(size0 <= st.size - slop && size0 + (1 << 20) >= st.size - slop, "size {size0} of a pool of {} with slop {slop}", st.size);
    let f = file(&fs, fs.root(), "f");
    fs.write(&ROOT, f, 0, &common::pattern(8 << 20, 1)).unwrap();
    fs.sync_all().unwrap();
    let s1 = fs.statfs().unwrap();
    assert!(s1.bavail + 2000 <= s0.bavail, "8 MiB written: {} -> {}", s0.bavail, s1.bavail);
    assert!((s1.blocks * unit).abs_diff(size0) < 1 << 20, "the size moved: {} -> {}", size0, s1.blocks * unit);
    assert!((s1.blocks - s1.bfree) * unit >= 8 << 20, "8 MiB used");
    assert_eq!(s1.files - s1.ffree, pool.root().object_count());
}

#[test]
fn copy_file_range_copies_bytes() {
    let (_d, _p, fs) = setup();
    let a = file(&fs, fs.root(), "a");
    let b = file(&fs, fs.root(), "b");
    let data = common::pattern(3 << 20, 5);
    fs.write(&ROOT, a, 0, &data).unwrap();
    assert_eq!(fs.copy_file_range(&ROOT, a, 1000, b, 7, 5 << 20).unwrap(), (3 << 20) - 1000);
    let got = fs.read(b, 0, 4 << 20).unwrap();
    assert_eq!(&got[7..], &data[1000..]);
    assert_eq!(errno(fs.copy_file_range(&ROOT, a, 0, a, 10, 100)), libc::EINVAL);
    assert_eq!(fs.copy_file_range(&ROOT, a, 10 << 20, b, 0, 100).unwrap(), 0);
}

/// copy_file_range of whole records clones them: the copy costs no data
/// space, reads back equal, survives the source's overwrite, and the pool
/// verifies; an unaligned copy of the same file is a byte copy.
#[test]
fn copy_file_range_clones_whole_records() {
    let (_d, pool, fs) = setup();
    let a = file(&fs, fs.root(), "a");
    let b = file(&fs, fs.root(), "b");
    let c = file(&fs, fs.root(), "c");
    let data = common::pattern((3 << 20) + 5000, 6);
    fs.write(&ROOT, a, 0, &data).unwrap();
    fs.sync_all().unwrap();
    let before = pool.status().allocated;
    assert_eq!(fs.copy_file_range(&ROOT, a, 0, b, 0, 8 << 20).unwrap(), data.len() as u64);
    assert_eq!(fs.getattr(b).unwrap().size, data.len() as u64);
    fs.sync_all().unwrap();
    let grown = pool.status().allocated - before;
    assert!(grown < 256 << 10, "3 MiB cloned took {grown} bytes");
    let st = pool.brt_stats();
    assert_eq!(st.entries, 24, "the 24 whole 128 KiB records are shared, the 5000-byte tail copied");
    assert_eq!(fs.read(b, 0, 4 << 20).unwrap(), data);
    assert_eq!(fs.copy_file_range(&ROOT, a, 1, c, 0, 1 << 20).unwrap(), 1 << 20);
    assert_eq!(pool.brt_stats().entries, 24, "an unaligned copy shares nothing");
    fs.write(&ROOT, a, 0, &common::pattern(1 << 20, 7)).unwrap();
    fs.sync_all().unwrap();
    assert_eq!(fs.read(b, 0, 4 << 20).unwrap(), data, "the clone keeps the old content");
    assert_eq!(fs.read(c, 0, 2 << 20).unwrap(), &data[1..(1 << 20) + 1]);
    let rep = pool.verify().unwrap();
    assert!(rep.errors.is_empty(), "{:#?}", rep.errors);
    assert_eq!(rep.brt_entries, 16);
}

#[test]
fn parallel_callers_keep_the_tree_consistent() {
    let (_d, _p, fs) = setup();
    let shared = dir(&fs, fs.root(), "shared");
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let fs = fs.clone();
            s.spawn(move || {
                for i in 0..300u64 {
                    let name = format!("t{t}-{i}");
                    let f = file(&fs, shared, &name);
                    fs.write(&ROOT, f, i, &common::pattern(3000, t * 1000 + i)).unwrap();
                    if i % 3 == 0 {
                        fs.unlink(&ROOT, shared, name.as_bytes()).unwrap();
                    }
                    if i % 7 == 0 {
                        fs.readdir(shared, 0, 64).unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(names(&fs, shared).len(), 2 + 4 * 200);
    assert_eq!(fs.getattr(shared).unwrap().size, 2 + 4 * 200);
    let f = fs.lookup(shared, b"t2-299").unwrap().ino;
    assert_eq!(fs.read(f, 299, 3000).unwrap(), common::pattern(3000, 2299));
    fs.verify().expect("the tree verifies");
}

#[test]
fn a_full_pool_fails_cleanly_and_still_deletes() {
    let (_d, pool) = pool_of(96 << 20);
    let fs = mount(&pool);
    let r = fs.root();
    let mut made = Vec::new();
    let mut failed = None;
    for i in 0..200 {
        let name = format!("f{i}");
        let f = match fs.mknod(&ROOT, r, name.as_bytes(), libc::S_IFREG | 0o644, 0) {
            Ok(a) => a.ino,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        made.push(name);
        if let Err(e) = fs.write(&ROOT, f, 0, &common::pattern(1 << 20, i)) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("a 96 MiB pool fills up");
    assert_eq!(e.errno, libc::ENOSPC, "{e}");
    fs.sync_all().unwrap();
    for name in &made {
        fs.unlink(&ROOT, r, name.as_bytes()).unwrap();
    }
    // Frees become allocatable two txgs after the one that freed them.
    for _ in 0..4 {
        fs.sync_all().unwrap();
    }
    assert_eq!(names(&fs, r), vec![".", ".."]);
    let f = file(&fs, r, "after");
    fs.write(&ROOT, f, 0, &common::pattern(1 << 20, 9)).unwrap();
    fs.verify().expect("the tree verifies");
    pool.verify().expect("the pool verifies");
}

/// 200,000 entries in one directory: created, each looked up, then listed
/// in batches while every other entry is removed between batches — each
/// surviving name exactly once, cookies staying valid throughout.
#[test]
fn a_directory_of_200000_entries() {
    let n: usize = std::env::var("TARN_BIGDIR_ENTRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let (devs, pool) = pool_of(1 << 30);
    let fs = mount(&pool);
    let d = dir(&fs, fs.root(), "big");
    let t = Instant::now();
    let mut inos = Vec::with_capacity(n);
    for i in 0..n {
        inos.push(file(&fs, d, &format!("entry-{i:07}")));
    }
    let create_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for (i, ino) in inos.iter().enumerate() {
        assert_eq!(fs.lookup(d, format!("entry-{i:07}").as_bytes()).unwrap().ino, *ino);
    }
    let lookup_s = t.elapsed().as_secs_f64();
    let (pool, fs) = reopen(&devs, pool, fs);
    let t = Instant::now();
    let mut seen = HashSet::new();
    let mut cookie = 0;
    let mut removed = 0usize;
    loop {
        let batch = fs.readdir(d, cookie, 500).unwrap();
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        for e in &batch {
            let name = String::from_utf8(e.name.clone()).unwrap();
            assert!(seen.insert(name.clone()), "{name} listed twice");
        }
        // Remove a slice of the odd entries, listed or not.
        let end = (removed + 1000).min(n / 2);
        for k in removed..end {
            fs.unlink(&ROOT, d, format!("entry-{:07}", 2 * k + 1).as_bytes()).unwrap();
        }
        removed = end;
    }
    let list_s = t.elapsed().as_secs_f64();
    for i in (0..n).step_by(2) {
        assert!(seen.contains(&format!("entry-{i:07}")), "entry-{i:07} missed");
    }
    assert_eq!(fs.getattr(d).unwrap().size as usize, 2 + n - n / 2);
    assert_eq!(fs.readdir(d, 0, usize::MAX).unwrap().len(), 2 + n - n / 2);
    let report = fs.verify().expect("the tree verifies");
    assert_eq!(report.entries as usize, 1 + n - n / 2);
    println!("{n} entries: create {create_s:.1} s, lookup all {lookup_s:.1} s, list while removing half {list_s:.1} s");
    drop(pool);
}

/// Damaged POSIX structures (written below the POSIX layer) give EIO, never
/// a panic.
#[test]
fn corrupt_structures_give_eio() {
    let (_d, pool, fs) = setup();
    let r = fs.root();
    let small = dir(&fs, r, "small");
    file(&fs, small, "x");
    let big = dir(&fs, r, "big");
    for i in 0..400 {
        file(&fs, big, &format!("name-{i}"));
    }
    let f = file(&fs, r, "f");
    drop(fs);
    let os = pool.root();
    let tx = os.begin().unwrap();
    os.write(&tx, small, 0, b"garbage that is no leaf").unwrap();
    os.write(&tx, big, 8, &u64::MAX.to_le_bytes()).unwrap();
    os.set_bonus(&tx, f, &[0xff; 112]).unwrap();
    drop(tx);
    let fs = mount(&pool);
    assert_eq!(errno(fs.lookup(small, b"x")), libc::EIO);
    assert_eq!(errno(fs.readdir(small, 0, 10)), libc::EIO);
    assert_eq!(errno(fs.lookup(big, b"name-1")), libc::EIO);
    assert_eq!(errno(fs.mknod(&ROOT, big, b"new", libc::S_IFREG, 0)), libc::EIO);
    assert_eq!(errno(fs.getattr(f)), libc::EIO);
    assert_eq!(errno(fs.lookup(r, b"f")), libc::EIO);
}

#[test]
fn readdirplus_sync_hook_and_bad_times() {
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (_d, pool) = pool_of(256 << 20);
    let c = calls.clone();
    let hook: SyncFn = Arc::new(move || {
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    });
    let fs = PosixFs::open(pool.root().clone(), PosixOptions { sync: Some(hook), ..Default::default() }).unwrap();
    let f = file(&fs, fs.root(), "f");
    fs.fsync(f, true).unwrap();
    fs.sync_all().unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    let plus = fs.readdirplus(fs.root(), 0, 10).unwrap();
    assert_eq!(plus.len(), 3);
    assert_eq!(plus[2].1, fs.getattr(f).unwrap());
    // Resuming from each cookie gives the rest.
    assert_eq!(fs.readdir(fs.root(), plus[1].0.cookie, 10).unwrap()[0].name, b"f");
    assert!(fs.readdir(fs.root(), plus[2].0.cookie, 10).unwrap().is_empty());
    let bad = SetAttr { mtime: Some(TimeOrNow::At(Timespec { sec: 1, nsec: 1_000_000_000 })), ..Default::default() };
    assert_eq!(errno(fs.setattr(&ROOT, f, &bad)), libc::EINVAL);
    let min = SetAttr { atime: Some(TimeOrNow::At(Timespec { sec: i64::MIN, nsec: 0 })), ..Default::default() };
    fs.setattr(&ROOT, f, &min).unwrap();
    fs.read(f, 0, 1).unwrap();
}

/// Cookies stay valid while entries come and go: a listing in small batches
/// with inserts and removes between them returns every name that lived
/// throughout exactly once, and no name twice — in the compact form, across
/// its conversion, and in the hashed form.
#[test]
fn readdir_cookies_survive_inserts_and_removes() {
    let (_d, _p, fs) = setup();
    for start in [0usize, 60, 3000] {
        let d = dir(&fs, fs.root(), &format!("d{start}"));
        for i in 0..start {
            file(&fs, d, &format!("old-{i}"));
        }
        let mut seen = HashSet::new();
        let mut cookie = 0;
        let mut round = 0;
        loop {
            let batch = fs.readdir(d, cookie, 7).unwrap();
            let Some(last) = batch.last() else { break };
            cookie = last.cookie;
            for e in batch {
                assert!(seen.insert(e.name.clone()), "{:?} listed twice", String::from_utf8_lossy(&e.name));
            }
            for k in 0..5 {
                file(&fs, d, &format!("new-{round}-{k}"));
            }
            if round < start / 3 {
                fs.unlink(&ROOT, d, format!("old-{}", 3 * round + 1).as_bytes()).unwrap();
            }
            round += 1;
            assert!(round < 100_000, "the listing does not end");
        }
        for i in (0..start).filter(|i| i % 3 != 1) {
            assert!(seen.contains(format!("old-{i}").as_bytes()), "old-{i} missed");
        }
        fs.verify().expect("the tree verifies");
    }
}

/// Renames across directories, links, unlinks and listings from several
/// threads at once: afterwards the tree verifies (link counts, entry counts,
/// parents) and no directory was moved into its own subtree.
#[test]
fn parallel_renames_keep_the_tree_consistent() {
    let (_d, _p, fs) = setup();
    let r = fs.root();
    let dirs: Vec<Ino> = (0..4).map(|i| dir(&fs, r, &format!("d{i}"))).collect();
    for (i, &d) in dirs.iter().enumerate() {
        for k in 0..20 {
            file(&fs, d, &format!("f{i}-{k}"));
            dir(&fs, d, &format!("s{i}-{k}"));
        }
    }
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (fs, dirs) = (fs.clone(), dirs.clone());
            s.spawn(move || {
                let mut rng = common::Rng::new(t);
                for _ in 0..400 {
                    let (a, b) = (dirs[rng.below(4) as usize], dirs[rng.below(4) as usize]);
                    let list = fs.readdir(a, 2, 1000).unwrap();
                    if list.is_empty() {
                        continue;
                    }
                    let e = &list[rng.below(list.len() as u64) as usize];
                    let newname = format!("m{t}-{}", rng.below(50));
                    let flags = RenameFlags { exchange: rng.chance(20), noreplace: false };
                    match fs.rename(&ROOT, a, &e.name, b, newname.as_bytes(), flags) {
                        Ok(()) => {}
                        Err(x) => assert!([libc::ENOENT, libc::EISDIR, libc::ENOTDIR, libc::ENOTEMPTY, libc::EINVAL].contains(&x.errno), "{x}"),
                    }
                    if rng.chance(10) && e.kind == FileKind::File {
                        let _ = fs.link(&ROOT, e.ino, b, format!("l{t}-{}", rng.below(50)).as_bytes());
                    }
                    if rng.chance(5) && e.kind == FileKind::File {
                        let _ = fs.unlink(&ROOT, a, &e.name);
                    }
                }
            });
        }
    });
    fs.verify().expect("the tree verifies");
}

/// Random bytes written over a hashed directory's blocks: every call
/// returns (an error or a result) — no panic, no endless loop.
#[test]
fn damaged_directories_never_panic() {
    let (_d, pool, fs) = setup();
    let d = dir(&fs, fs.root(), "d");
    for i in 0..600 {
        file(&fs, d, &format!("name-{i}"));
    }
    let os = pool.root().clone();
    let size = os.info(d).unwrap().size;
    let mut rng = common::Rng::new(99);
    for round in 0..300 {
        let tx = os.begin().unwrap();
        let at = rng.below(size);
        os.write(&tx, d, at, &[rng.below(256) as u8; 3]).unwrap();
        drop(tx);
        let name = format!("name-{}", rng.below(700));
        let _ = fs.lookup(d, name.as_bytes());
        let _ = fs.readdir(d, rng.next_u64() >> 2, 100);
        let _ = fs.readdir(d, 0, usize::MAX);
        let _ = fs.mknod(&ROOT, d, format!("new-{round}").as_bytes(), libc::S_IFREG | 0o644, 0);
        let _ = fs.unlink(&ROOT, d, name.as_bytes());
    }
    let _ = fs.verify();
}
