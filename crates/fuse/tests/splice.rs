//! A mount that serves more than its file system, through the kernel:
//! `MemFs` datasets spliced together by a test `Splice` — child datasets in
//! a root (listed without being opened, opened on first access, shadowing
//! a directory of the same name), `.zfs/snapshot`, detaching busy and idle
//! slots, and replacing a file system under open files.
//! Each test skips (with a printed reason) where /dev/fuse is unavailable.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_engine::posix::{Caller, Errno, FileSystem, PResult};
use tarn_engine::ErrorKind;
use tarn_fuse::{mount_spliced, MemFs, MountHandle, MountOptions, Opened, Splice};

/// Datasets by name, each a MemFs; children and snapshots are the names
/// below it.
#[derive(Default)]
struct TestSplice {
    fss: Mutex<BTreeMap<String, Arc<MemFs>>>,
    opens: Mutex<HashMap<String, usize>>,
    visible: Mutex<bool>,
}

impl TestSplice {
    fn add(&self, name: &str) -> Arc<MemFs> {
        let fs = Arc::new(MemFs::new());
        self.fss.lock().insert(name.to_string(), fs.clone());
        fs
    }
    fn opens(&self, name: &str) -> usize {
        self.opens.lock().get(name).copied().unwrap_or(0)
    }
    fn below(&self, dataset: &str, sep: char) -> Vec<Vec<u8>> {
        let p = format!("{dataset}{sep}");
        self.fss.lock().keys().filter_map(|n| n.strip_prefix(&p)).filter(|r| !r.contains(['/', '@'])).map(|r| r.as_bytes().to_vec()).collect()
    }
}

impl Splice for TestSplice {
    fn child(&self, dataset: &str, name: &[u8]) -> PResult<Option<String>> {
        let full = format!("{dataset}/{}", String::from_utf8_lossy(name));
        Ok(self.fss.lock().contains_key(&full).then_some(full))
    }
    fn children(&self, dataset: &str) -> PResult<Vec<Vec<u8>>> {
        Ok(self.below(dataset, '/'))
    }
    fn snapshots(&self, dataset: &str) -> PResult<Vec<Vec<u8>>> {
        Ok(self.below(dataset, '@'))
    }
    fn has_snapshot(&self, dataset: &str, snap: &[u8]) -> PResult<bool> {
        Ok(self.fss.lock().contains_key(&format!("{dataset}@{}", String::from_utf8_lossy(snap))))
    }
    fn snapdir_visible(&self, _dataset: &str) -> bool {
        *self.visible.lock()
    }
    fn open(&self, name: &str) -> PResult<Opened> {
        let fs = self.fss.lock().get(name).cloned().ok_or_else(|| Errno::new(libc::ENOENT, format!("no {name}")))?;
        *self.opens.lock().entry(name.to_string()).or_insert(0) += 1;
        Ok(Opened { fs, readonly: name.contains('@') })
    }
    fn closed(&self, _name: &str) {}
}

struct Mounted {
    splice: Arc<TestSplice>,
    root: Arc<MemFs>,
    handle: MountHandle,
    dir: PathBuf,
}

impl Mounted {
    fn new(name: &str) -> Option<Mounted> {
        let dir = common::mount_dir("tarn-splice", name)?;
        let splice = Arc::new(TestSplice::default());
        let root = splice.add("t");
        let handle = mount_spliced(root.clone(), &dir, &MountOptions { fsname: "t".into(), ..Default::default() }, splice.clone()).expect("mount");
        Some(Mounted { splice, root, handle, dir })
    }
    fn p(&self, rel: &str) -> String {
        self.dir.join(rel).display().to_string()
    }
    fn names(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.p(rel)).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.handle.unmount_force();
        let _ = fs::remove_dir(&self.dir);
    }
}

fn put(fs: &MemFs, name: &str, data: &[u8]) {
    let a = fs.mknod(&Caller::root(), fs.root(), name.as_bytes(), libc::S_IFREG | 0o644, 0).unwrap();
    fs.write(&Caller::root(), a.ino, 0, data).unwrap();
}

#[test]
fn children_are_listed_unopened_and_opened_on_access() {
    let Some(m) = Mounted::new("children") else { return };
    // More children than one READDIR batch and one reply hold, and real
    // entries besides; "c7" also exists as a directory of the parent.
    for i in 0..300 {
        put(&m.splice.add(&format!("t/c{i}")), "inside", format!("child {i}").as_bytes());
    }
    put(&m.root, "plain", b"parent's own");
    m.root.mkdir(&Caller::root(), m.root.root(), b"c7", 0o755).unwrap();
    let names = m.names("");
    assert_eq!(names.len(), 301, "every child once, the shadowed directory not twice: {names:?}");
    assert!(names.contains(&"plain".to_string()) && names.contains(&"c299".to_string()));
    assert_eq!((0..300).map(|i| m.splice.opens(&format!("t/c{i}"))).sum::<usize>(), 0, "listing opens nothing");
    assert_eq!(fs::read(m.p("c7/inside")).unwrap(), b"child 7", "the child shadows the parent's directory");
    assert_eq!(m.splice.opens("t/c7"), 1);
    assert_eq!(fs::read(m.p("c8/inside")).unwrap(), b"child 8");
    assert_eq!(m.splice.opens("t/c8"), 1, "opened once");
    let (a, b) = (fs::metadata(m.p("c7/inside")).unwrap(), fs::metadata(m.p("c8/inside")).unwrap());
    assert_eq!(a.dev(), b.dev());
    assert_ne!(a.ino(), b.ino(), "same object number, different file systems");
    assert_eq!(fs::rename(m.p("c7/inside"), m.p("c8/x")).unwrap_err().raw_os_error(), Some(libc::EXDEV));
    assert_eq!(fs::remove_dir(m.p("c7")).unwrap_err().raw_os_error(), Some(libc::EBUSY));
    // .zfs: hidden, then listed when visible; snapshots read-only.
    put(&m.splice.add("t@s"), "snapped", b"old");
    assert!(!m.names("").contains(&".zfs".to_string()));
    *m.splice.visible.lock() = true;
    assert!(m.names("").contains(&".zfs".to_string()));
    assert_eq!(m.names(".zfs/snapshot"), ["s"]);
    assert_eq!(m.splice.opens("t@s"), 0);
    assert_eq!(fs::read(m.p(".zfs/snapshot/s/snapped")).unwrap(), b"old");
    assert_eq!(fs::write(m.p(".zfs/snapshot/s/new"), b"x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    assert!(m.handle.served().iter().any(|s| s.name == "t@s" && s.open));
}

#[test]
fn detach_waits_for_idle_and_refuses_busy() {
    let Some(m) = Mounted::new("detach") else { return };
    put(&m.splice.add("t/a"), "f", b"data");
    let f = File::open(m.p("a/f")).unwrap();
    let e = m.handle.detach("t/a", false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Busy, "{e}");
    assert_eq!(fs::read(m.p("a/f")).unwrap(), b"data", "served as before");
    drop(f);
    assert_eq!(m.handle.detach("t/a", false).unwrap(), ["t/a"]);
    assert!(!m.handle.serves("t/a"));
    // Still a child per the splice: served again, in a new slot.
    assert_eq!(fs::read(m.p("a/f")).unwrap(), b"data");
    let f = File::open(m.p("a/f")).unwrap();
    m.splice.fss.lock().remove("t/a");
    assert_eq!(m.handle.detach("t/a", true).unwrap(), ["t/a"]);
    assert_eq!(f.read_at(&mut [0u8; 4], 0).unwrap_err().raw_os_error(), Some(libc::EIO));
    assert!(!m.dir.join("a").exists());
    assert!(m.handle.detach("t/nothing", false).unwrap().is_empty());
}

#[test]
fn replace_keeps_unchanged_files_and_fails_the_rest() {
    let Some(m) = Mounted::new("replace") else { return };
    put(&m.root, "same", b"unchanged");
    put(&m.root, "changed", b"before");
    let same = File::open(m.p("same")).unwrap();
    let changed = File::open(m.p("changed")).unwrap();
    // The "rolled back" file system: `same` is the very same inode (one
    // MemFs shared), `changed` was changed by the rollback.
    let ino = m.root.lookup(m.root.root(), b"changed").unwrap().ino;
    let (survived, stale) = m
        .handle
        .replace("t", || {
            m.root.write(&Caller::root(), ino, 0, b"after, longer").unwrap();
            Ok(Some(m.root.clone() as Arc<dyn FileSystem>))
        })
        .unwrap()
        .expect("served here");
    assert_eq!((survived, stale), (1, 1));
    assert_eq!(same.read_at(&mut [0u8; 9], 0).unwrap(), 9);
    assert_eq!(changed.read_at(&mut [0u8; 6], 0).unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(fs::read(m.p("changed")).unwrap(), b"after, longer", "a fresh open sees the new size");
    assert_eq!(m.handle.stale_inodes("t"), 1);
    assert!(m.handle.replace("t/none", || Ok(None)).unwrap().is_none());
}

#[test]
fn replace_drops_every_name_the_kernel_cached() {
    // A rollback under the mount must not leave a name resolving that the
    // rolled-back file system no longer has, for as long as the kernel's
    // entry cache would keep it: not a hard link's other name, nor the new
    // name of a rename made through the mount.
    let Some(m) = Mounted::new("names") else { return };
    let root = m.root.root();
    let c = Caller::root();
    put(&m.root, "a", b"linked");
    let a = m.root.lookup(root, b"a").unwrap().ino;
    m.root.link(&c, a, root, b"b").unwrap();
    put(&m.root, "c", b"renamed");
    // The kernel caches both names of the linked file (b first, a last) …
    assert_eq!(fs::metadata(m.p("b")).unwrap().ino(), fs::metadata(m.p("a")).unwrap().ino());
    // … and the new name of a file renamed through the mount.
    fs::metadata(m.p("c")).unwrap();
    fs::rename(m.p("c"), m.p("d")).unwrap();
    fs::metadata(m.p("d")).unwrap();
    // The "rollback": back to before the link and the rename.
    m.handle
        .replace("t", || {
            m.root.unlink(&c, root, b"b").unwrap();
            m.root.rename(&c, root, b"d", root, b"c", Default::default()).unwrap();
            Ok(Some(m.root.clone() as Arc<dyn FileSystem>))
        })
        .unwrap()
        .expect("served here");
    let gone = |n: &str| fs::metadata(m.p(n)).map(|_| ()).unwrap_err().raw_os_error();
    assert_eq!(gone("b"), Some(libc::ENOENT), "the link made after the snapshot is gone at once");
    assert_eq!(gone("d"), Some(libc::ENOENT), "the rename's new name is gone at once");
    assert_eq!(fs::read(m.p("a")).unwrap(), b"linked");
    assert_eq!(fs::read(m.p("c")).unwrap(), b"renamed");
}
