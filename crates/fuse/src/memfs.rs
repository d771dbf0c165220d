//! `MemFs`: an in-memory [`FileSystem`], the FUSE glue's test double.
//!
//! It exists so the glue, the mount machinery and the daemon's mount paths
//! can be exercised through the kernel before (and independently of) the
//! POSIX layer over an object set. It keeps the whole tree in one mutex and
//! implements the contract plainly: names, links, unlinked-but-open files,
//! rename flags, xattrs, fallocate modes, stable readdir cookies. It does
//! not enforce the ownership rules the real layer owns (set-group-ID
//! directories, sticky directories, dropping set-user-ID bits and
//! `security.capability` when a file changes).
//!
//! For the tests it also observes the glue: the size of every WRITE and
//! READ that arrives ([`MemFs::write_sizes`], [`MemFs::read_sizes`]), how many calls were in flight at once
//! ([`MemFs::max_in_flight`]), calls per operation ([`MemFs::calls`]), and
//! it can hold a read of one file until a read of another has completed
//! ([`MemFs::hold_read_until`]) — proof that requests are served in
//! parallel — or make an operation panic ([`MemFs::panic_on`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tarn_engine::posix::*;

const ROOT: Ino = 1;
/// Cookies 1 and 2 are "." and ".."; children get 3, 4, … in creation order.
const FIRST_CHILD_COOKIE: u64 = 3;
const NAME_MAX: usize = 255;
/// How long a held read waits for the read it is held for.
const HOLD_WAIT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Dir {
    parent: Ino,
    by_name: BTreeMap<Vec<u8>, (Ino, u64)>,
    by_cookie: BTreeMap<u64, Vec<u8>>,
    next_cookie: u64,
}

enum Body {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(Vec<u8>),
    Special,
}

struct Node {
    attr: Attr,
    body: Body,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    open: u32,
}

struct State {
    nodes: HashMap<Ino, Node>,
    next_ino: Ino,
}

#[derive(Default)]
struct Hold {
    /// (held inode, inode whose completed read releases it)
    rule: Option<(Ino, Ino)>,
    released: bool,
}

/// An in-memory file system; see the module documentation.
pub struct MemFs {
    state: Mutex<State>,
    write_sizes: Mutex<BTreeMap<usize, u64>>,
    read_sizes: Mutex<BTreeMap<u32, u64>>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    hold: Mutex<Hold>,
    hold_cv: Condvar,
    /// Operation that panics when called (a stand-in for a file-system bug).
    panic_on: Mutex<Option<&'static str>>,
    fsync_hold: Mutex<FsyncHold>,
    fsync_cv: Condvar,
}

/// fsyncs held until enough wait at once (`MemFs::hold_fsyncs`).
#[derive(Default)]
struct FsyncHold {
    /// How many must wait at once before all go on (0: none is held).
    want: usize,
    waiting: usize,
    /// Bumped when the held ones go on.
    released: u64,
}

fn err(errno: i32, msg: impl Into<String>) -> Errno {
    Errno::new(errno, msg)
}

fn enoent(what: impl std::fmt::Display) -> Errno {
    err(libc::ENOENT, format!("{what}: no such file or directory"))
}

/// Counts one call while it runs.
struct InFlight<'a>(&'a MemFs);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs::new()
    }
}

impl MemFs {
    pub fn new() -> MemFs {
        let now = Timespec::now();
        let root = Node {
            attr: new_attr(ROOT, FileKind::Dir, 0o755, &Caller::root(), now),
            body: Body::Dir(Dir { parent: ROOT, next_cookie: FIRST_CHILD_COOKIE, ..Default::default() }),
            xattrs: BTreeMap::new(),
            open: 0,
        };
        let mut root = root;
        root.attr.nlink = 2;
        MemFs {
            state: Mutex::new(State { nodes: HashMap::from([(ROOT, root)]), next_ino: ROOT + 1 }),
            write_sizes: Mutex::new(BTreeMap::new()),
            read_sizes: Mutex::new(BTreeMap::new()),
            calls: Mutex::new(BTreeMap::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            hold: Mutex::new(Hold::default()),
            hold_cv: Condvar::new(),
            panic_on: Mutex::new(None),
            fsync_hold: Mutex::new(FsyncHold::default()),
            fsync_cv: Condvar::new(),
        }
    }

    /// WRITE request sizes seen, with their counts.
    pub fn write_sizes(&self) -> BTreeMap<usize, u64> {
        self.write_sizes.lock().clone()
    }

    /// READ request sizes (bytes asked for) seen, with their counts.
    pub fn read_sizes(&self) -> BTreeMap<u32, u64> {
        self.read_sizes.lock().clone()
    }

    /// Calls per operation name ("read", "readdirplus", …).
    pub fn calls(&self, op: &str) -> u64 {
        self.calls.lock().get(op).copied().unwrap_or(0)
    }

    /// Calls per operation name, every operation seen so far.
    pub fn all_calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().clone()
    }

    /// Most calls that were running at the same moment.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// Holds every read of `held` until a read of `until` has completed
    /// (or 10 s pass, after which the held read fails with `EIO`).
    pub fn hold_read_until(&self, held: Ino, until: Ino) {
        *self.hold.lock() = Hold { rule: Some((held, until)), released: false };
    }

    /// Holds every fsync until `n` wait at once, then lets them all go on
    /// (a stand-in for a log round that many commits share); an fsync
    /// held 10 s fails with `EIO`. `n` = 0 holds none.
    pub fn hold_fsyncs(&self, n: usize) {
        self.fsync_hold.lock().want = n;
    }

    /// Lets every held fsync go on now, and holds no more.
    pub fn release_fsyncs(&self) {
        let mut h = self.fsync_hold.lock();
        h.want = 0;
        h.released += 1;
        self.fsync_cv.notify_all();
    }

    /// fsyncs held now.
    pub fn fsyncs_waiting(&self) -> usize {
        self.fsync_hold.lock().waiting
    }

    fn wait_if_fsyncs_held(&self) -> PResult<()> {
        let mut h = self.fsync_hold.lock();
        if h.want == 0 {
            return Ok(());
        }
        h.waiting += 1;
        if h.waiting >= h.want {
            h.released += 1;
            self.fsync_cv.notify_all();
        }
        let mine = h.released;
        let mut res = Ok(());
        while h.released == mine && h.waiting < h.want {
            if self.fsync_cv.wait_for(&mut h, HOLD_WAIT).timed_out() {
                res = Err(err(libc::EIO, format!("fsync held 10 s: {} of {} waited at once", h.waiting, h.want)));
                break;
            }
        }
        h.waiting -= 1;
        res
    }

    /// Number of inodes, including unlinked ones still open.
    pub fn inode_count(&self) -> usize {
        self.state.lock().nodes.len()
    }

    /// Makes every call of `op` panic (`None`: none), to test how a bug in
    /// the file system is contained.
    pub fn panic_on(&self, op: Option<&'static str>) {
        *self.panic_on.lock() = op;
    }

    fn enter(&self, op: &'static str) -> InFlight<'_> {
        *self.calls.lock().entry(op).or_default() += 1;
        if *self.panic_on.lock() == Some(op) {
            panic!("MemFs: {op} set to panic");
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(self)
    }

    fn wait_if_held(&self, ino: Ino) -> PResult<()> {
        let mut h = self.hold.lock();
        if h.rule.map(|(held, _)| held) != Some(ino) {
            return Ok(());
        }
        while !h.released {
            if self.hold_cv.wait_for(&mut h, HOLD_WAIT).timed_out() {
                return Err(err(libc::EIO, format!("read of inode {ino} held 10 s: the read it waits for never completed")));
            }
        }
        Ok(())
    }

    fn read_done(&self, ino: Ino) {
        let mut h = self.hold.lock();
        if h.rule.map(|(_, until)| until) == Some(ino) {
            h.released = true;
            self.hold_cv.notify_all();
        }
    }
}

fn new_attr(ino: Ino, kind: FileKind, perm: u32, c: &Caller, now: Timespec) -> Attr {
    Attr {
        ino,
        kind,
        perm: (perm & 0o7777 & !c.umask) as u16,
        nlink: 1,
        uid: c.uid,
        gid: c.gid,
        rdev: 0,
        size: 0,
        blocks: 0,
        blksize: 4096,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        gen: 1,
    }
}

fn check_name(name: &[u8]) -> PResult<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(err(libc::EINVAL, format!("invalid name {:?}", String::from_utf8_lossy(name))));
    }
    if name.len() > NAME_MAX {
        return Err(err(libc::ENAMETOOLONG, "name longer than 255 bytes"));
    }
    Ok(())
}

impl State {
    fn node(&self, ino: Ino) -> PResult<&Node> {
        self.nodes.get(&ino).ok_or_else(|| enoent(format!("inode {ino}")))
    }

    fn node_mut(&mut self, ino: Ino) -> PResult<&mut Node> {
        self.nodes.get_mut(&ino).ok_or_else(|| enoent(format!("inode {ino}")))
    }

    fn dir(&self, ino: Ino) -> PResult<&Dir> {
        match &self.node(ino)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(err(libc::ENOTDIR, format!("inode {ino} is not a directory"))),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> PResult<&mut Dir> {
        match &mut self.node_mut(ino)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(err(libc::ENOTDIR, format!("inode {ino} is not a directory"))),
        }
    }

    fn child(&self, parent: Ino, name: &[u8]) -> PResult<Option<Ino>> {
        Ok(self.dir(parent)?.by_name.get(name).map(|(i, _)| *i))
    }

    fn touch(&mut self, ino: Ino) {
        let now = Timespec::now();
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.attr.mtime = now;
            n.attr.ctime = now;
        }
    }

    fn insert(&mut self, parent: Ino, name: &[u8], ino: Ino) -> PResult<()> {
        let d = self.dir_mut(parent)?;
        let cookie = d.next_cookie;
        d.next_cookie += 1;
        d.by_name.insert(name.to_vec(), (ino, cookie));
        d.by_cookie.insert(cookie, name.to_vec());
        self.touch(parent);
        Ok(())
    }

    fn remove_name(&mut self, parent: Ino, name: &[u8]) -> PResult<Ino> {
        let d = self.dir_mut(parent)?;
        let (ino, cookie) = d.by_name.remove(name).ok_or_else(|| enoent(String::from_utf8_lossy(name)))?;
        d.by_cookie.remove(&cookie);
        self.touch(parent);
        Ok(ino)
    }

    /// One link fewer; frees the inode when no link and no open handle remains.
    fn drop_link(&mut self, ino: Ino) {
        let Some(n) = self.nodes.get_mut(&ino) else { return };
        n.attr.nlink = n.attr.nlink.saturating_sub(if matches!(n.body, Body::Dir(_)) { 2 } else { 1 });
        n.attr.ctime = Timespec::now();
        if n.attr.nlink == 0 && n.open == 0 {
            self.nodes.remove(&ino);
        }
    }

    fn create(&mut self, c: &Caller, parent: Ino, name: &[u8], kind: FileKind, perm: u32, body: Body) -> PResult<Attr> {
        check_name(name)?;
        if self.child(parent, name)?.is_some() {
            return Err(err(libc::EEXIST, format!("{} exists", String::from_utf8_lossy(name))));
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut attr = new_attr(ino, kind, perm, c, Timespec::now());
        if let Body::Dir(_) = body {
            attr.nlink = 2;
            self.node_mut(parent)?.attr.nlink += 1;
        }
        if let Body::Symlink(t) = &body {
            attr.size = t.len() as u64;
        }
        self.nodes.insert(ino, Node { attr: attr.clone(), body, xattrs: BTreeMap::new(), open: 0 });
        self.insert(parent, name, ino)?;
        Ok(attr)
    }

    fn file_mut(&mut self, ino: Ino) -> PResult<(&mut Vec<u8>, &mut Attr)> {
        let n = self.node_mut(ino)?;
        match &mut n.body {
            Body::File(d) => Ok((d, &mut n.attr)),
            Body::Dir(_) => Err(err(libc::EISDIR, format!("inode {ino} is a directory"))),
            _ => Err(err(libc::EINVAL, format!("inode {ino} is not a regular file"))),
        }
    }

    fn is_ancestor(&self, a: Ino, mut b: Ino) -> bool {
        for _ in 0..4096 {
            if a == b {
                return true;
            }
            match self.dir(b) {
                Ok(d) if d.parent != b => b = d.parent,
                _ => return false,
            }
        }
        false
    }

    fn rename(&mut self, p: Ino, name: &[u8], np: Ino, nname: &[u8], flags: RenameFlags) -> PResult<()> {
        check_name(nname)?;
        let src = self.child(p, name)?.ok_or_else(|| enoent(String::from_utf8_lossy(name)))?;
        let dst = self.child(np, nname)?;
        if flags.exchange {
            let dst = dst.ok_or_else(|| enoent(String::from_utf8_lossy(nname)))?;
            self.dir_mut(p)?.by_name.get_mut(name).expect("looked up above").0 = dst;
            self.dir_mut(np)?.by_name.get_mut(nname).expect("looked up above").0 = src;
            for (ino, parent) in [(src, np), (dst, p)] {
                if let Body::Dir(d) = &mut self.node_mut(ino)?.body {
                    d.parent = parent;
                }
            }
            return Ok(());
        }
        if dst == Some(src) {
            return Ok(());
        }
        let src_dir = matches!(self.node(src)?.body, Body::Dir(_));
        if src_dir && self.is_ancestor(src, np) {
            return Err(err(libc::EINVAL, "cannot move a directory into itself"));
        }
        if let Some(d) = dst {
            if flags.noreplace {
                return Err(err(libc::EEXIST, format!("{} exists", String::from_utf8_lossy(nname))));
            }
            match (&self.node(d)?.body, src_dir) {
                (Body::Dir(dd), true) if !dd.by_name.is_empty() => return Err(err(libc::ENOTEMPTY, "target directory is not empty")),
                (Body::Dir(_), false) => return Err(err(libc::EISDIR, "target is a directory")),
                (b, true) if !matches!(b, Body::Dir(_)) => return Err(err(libc::ENOTDIR, "target is not a directory")),
                _ => {}
            }
            self.remove_name(np, nname)?;
            if src_dir {
                self.node_mut(np)?.attr.nlink -= 1;
            }
            self.drop_link(d);
        }
        self.remove_name(p, name)?;
        self.insert(np, nname, src)?;
        if src_dir {
            self.node_mut(p)?.attr.nlink -= 1;
            self.node_mut(np)?.attr.nlink += 1;
            if let Body::Dir(d) = &mut self.node_mut(src)?.body {
                d.parent = np;
            }
        }
        self.node_mut(src)?.attr.ctime = Timespec::now();
        Ok(())
    }
}

/// Largest file MemFs holds: its data lives in memory.
const FILE_MAX_BYTES: u64 = 16 << 30;

fn set_size(data: &mut Vec<u8>, attr: &mut Attr, size: u64) -> PResult<()> {
    if size > FILE_MAX_BYTES {
        return Err(err(libc::EFBIG, format!("MemFs files are at most {FILE_MAX_BYTES} bytes")));
    }
    data.resize(size as usize, 0);
    attr.size = size;
    attr.blocks = size.div_ceil(512);
    Ok(())
}

impl FileSystem for MemFs {
    fn root(&self) -> Ino {
        ROOT
    }

    fn lookup(&self, parent: Ino, name: &[u8]) -> PResult<Attr> {
        let _f = self.enter("lookup");
        let s = self.state.lock();
        let ino = match name {
            b"." => parent,
            b".." => s.dir(parent)?.parent,
            _ => s.child(parent, name)?.ok_or_else(|| enoent(String::from_utf8_lossy(name)))?,
        };
        Ok(s.node(ino)?.attr.clone())
    }

    fn getattr(&self, ino: Ino) -> PResult<Attr> {
        let _f = self.enter("getattr");
        Ok(self.state.lock().node(ino)?.attr.clone())
    }

    fn setattr(&self, _c: &Caller, ino: Ino, set: &SetAttr) -> PResult<Attr> {
        let _f = self.enter("setattr");
        let mut s = self.state.lock();
        let now = Timespec::now();
        if let Some(size) = set.size {
            let (d, a) = s.file_mut(ino)?;
            set_size(d, a, size)?;
            a.mtime = now;
        }
        let n = s.node_mut(ino)?;
        if let Some(m) = set.mode {
            n.attr.perm = (m & 0o7777) as u16;
        }
        n.attr.uid = set.uid.unwrap_or(n.attr.uid);
        n.attr.gid = set.gid.unwrap_or(n.attr.gid);
        let pick = |t: TimeOrNow| match t {
            TimeOrNow::Now => now,
            TimeOrNow::At(t) => t,
        };
        if let Some(t) = set.atime {
            n.attr.atime = pick(t);
        }
        if let Some(t) = set.mtime {
            n.attr.mtime = pick(t);
        }
        n.attr.ctime = set.ctime.unwrap_or(now);
        Ok(n.attr.clone())
    }

    fn readlink(&self, ino: Ino) -> PResult<Vec<u8>> {
        let _f = self.enter("readlink");
        match &self.state.lock().node(ino)?.body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(err(libc::EINVAL, format!("inode {ino} is not a symbolic link"))),
        }
    }

    fn mknod(&self, c: &Caller, parent: Ino, name: &[u8], mode: u32, rdev: u32) -> PResult<Attr> {
        let _f = self.enter("mknod");
        let kind = FileKind::from_mode(mode).ok_or_else(|| err(libc::EINVAL, format!("mode {mode:#o} names no file type")))?;
        let body = match kind {
            FileKind::File => Body::File(Vec::new()),
            FileKind::Dir | FileKind::Symlink => return Err(err(libc::EINVAL, "mknod makes files, devices, FIFOs and sockets")),
            _ => Body::Special,
        };
        let mut s = self.state.lock();
        let a = s.create(c, parent, name, kind, mode, body)?;
        let n = s.node_mut(a.ino)?;
        n.attr.rdev = rdev;
        Ok(n.attr.clone())
    }

    fn mkdir(&self, c: &Caller, parent: Ino, name: &[u8], mode: u32) -> PResult<Attr> {
        let _f = self.enter("mkdir");
        let body = Body::Dir(Dir { parent, next_cookie: FIRST_CHILD_COOKIE, ..Default::default() });
        self.state.lock().create(c, parent, name, FileKind::Dir, mode, body)
    }

    fn symlink(&self, c: &Caller, parent: Ino, name: &[u8], target: &[u8]) -> PResult<Attr> {
        let _f = self.enter("symlink");
        self.state.lock().create(c, parent, name, FileKind::Symlink, 0o777, Body::Symlink(target.to_vec()))
    }

    fn link(&self, _c: &Caller, ino: Ino, newparent: Ino, newname: &[u8]) -> PResult<Attr> {
        let _f = self.enter("link");
        check_name(newname)?;
        let mut s = self.state.lock();
        if matches!(s.node(ino)?.body, Body::Dir(_)) {
            return Err(err(libc::EPERM, "hard links to directories are not allowed"));
        }
        if s.child(newparent, newname)?.is_some() {
            return Err(err(libc::EEXIST, format!("{} exists", String::from_utf8_lossy(newname))));
        }
        s.insert(newparent, newname, ino)?;
        let n = s.node_mut(ino)?;
        n.attr.nlink += 1;
        n.attr.ctime = Timespec::now();
        Ok(n.attr.clone())
    }

    fn unlink(&self, _c: &Caller, parent: Ino, name: &[u8]) -> PResult<()> {
        let _f = self.enter("unlink");
        let mut s = self.state.lock();
        let ino = s.child(parent, name)?.ok_or_else(|| enoent(String::from_utf8_lossy(name)))?;
        if matches!(s.node(ino)?.body, Body::Dir(_)) {
            return Err(err(libc::EISDIR, format!("{} is a directory", String::from_utf8_lossy(name))));
        }
        s.remove_name(parent, name)?;
        s.drop_link(ino);
        Ok(())
    }

    fn rmdir(&self, _c: &Caller, parent: Ino, name: &[u8]) -> PResult<()> {
        let _f = self.enter("rmdir");
        let mut s = self.state.lock();
        let ino = s.child(parent, name)?.ok_or_else(|| enoent(String::from_utf8_lossy(name)))?;
        if !s.dir(ino)?.by_name.is_empty() {
            return Err(err(libc::ENOTEMPTY, format!("{} is not empty", String::from_utf8_lossy(name))));
        }
        s.remove_name(parent, name)?;
        s.node_mut(parent)?.attr.nlink -= 1;
        s.drop_link(ino);
        Ok(())
    }

    fn rename(&self, _c: &Caller, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: RenameFlags) -> PResult<()> {
        let _f = self.enter("rename");
        if flags.exchange && flags.noreplace {
            return Err(err(libc::EINVAL, "RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        self.state.lock().rename(parent, name, newparent, newname, flags)
    }

    fn open(&self, ino: Ino) -> PResult<()> {
        let _f = self.enter("open");
        self.state.lock().node_mut(ino)?.open += 1;
        Ok(())
    }

    fn release(&self, ino: Ino) -> PResult<()> {
        let _f = self.enter("release");
        let mut s = self.state.lock();
        let n = s.node_mut(ino)?;
        n.open = n.open.saturating_sub(1);
        if n.open == 0 && n.attr.nlink == 0 {
            s.nodes.remove(&ino);
        }
        Ok(())
    }

    fn read(&self, ino: Ino, offset: u64, size: u32) -> PResult<Vec<u8>> {
        let _f = self.enter("read");
        *self.read_sizes.lock().entry(size).or_default() += 1;
        self.wait_if_held(ino)?;
        let data = {
            let mut s = self.state.lock();
            let (d, _) = s.file_mut(ino)?;
            let start = (offset as usize).min(d.len());
            let end = (start + size as usize).min(d.len());
            d[start..end].to_vec()
        };
        self.read_done(ino);
        Ok(data)
    }

    fn write(&self, _c: &Caller, ino: Ino, offset: u64, data: &[u8]) -> PResult<u32> {
        let _f = self.enter("write");
        *self.write_sizes.lock().entry(data.len()).or_default() += 1;
        let mut s = self.state.lock();
        let (d, a) = s.file_mut(ino)?;
        let end = offset.saturating_add(data.len() as u64);
        if end > d.len() as u64 {
            set_size(d, a, end)?;
        }
        let end = end as usize;
        d[offset as usize..end].copy_from_slice(data);
        let now = Timespec::now();
        a.mtime = now;
        a.ctime = now;
        Ok(data.len() as u32)
    }

    fn fsync(&self, ino: Ino, _datasync: bool) -> PResult<()> {
        let _f = self.enter("fsync");
        self.wait_if_fsyncs_held()?;
        self.state.lock().node(ino).map(|_| ())
    }

    fn fallocate(&self, _c: &Caller, ino: Ino, offset: u64, len: u64, flags: FallocFlags) -> PResult<()> {
        let _f = self.enter("fallocate");
        let mut s = self.state.lock();
        let (d, a) = s.file_mut(ino)?;
        let end = offset.checked_add(len).ok_or_else(|| err(libc::EFBIG, "offset + length overflows"))?;
        if flags.punch_hole && !flags.keep_size {
            return Err(err(libc::EOPNOTSUPP, "PUNCH_HOLE needs KEEP_SIZE"));
        }
        if end > d.len() as u64 && !flags.keep_size {
            set_size(d, a, end)?;
        }
        if flags.punch_hole || flags.zero_range {
            let zend = (end as usize).min(d.len());
            let zstart = (offset as usize).min(zend);
            d[zstart..zend].fill(0);
        }
        Ok(())
    }

    fn copy_file_range(&self, _c: &Caller, ino_in: Ino, off_in: u64, ino_out: Ino, off_out: u64, len: u64) -> PResult<u64> {
        let _f = self.enter("copy_file_range");
        let mut s = self.state.lock();
        let src = {
            let (d, _) = s.file_mut(ino_in)?;
            let start = (off_in as usize).min(d.len());
            let end = (start as u64 + len).min(d.len() as u64) as usize;
            d[start..end].to_vec()
        };
        let (d, a) = s.file_mut(ino_out)?;
        let end = off_out.saturating_add(src.len() as u64);
        if end > d.len() as u64 {
            set_size(d, a, end)?;
        }
        let end = end as usize;
        d[off_out as usize..end].copy_from_slice(&src);
        a.mtime = Timespec::now();
        Ok(src.len() as u64)
    }

    fn readdir(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<DirEntry>> {
        let _f = self.enter("readdir");
        let s = self.state.lock();
        let d = s.dir(ino)?;
        let mut out = Vec::new();
        if cookie < 1 {
            out.push(DirEntry { name: b".".to_vec(), ino, kind: FileKind::Dir, cookie: 1 });
        }
        if cookie < 2 {
            out.push(DirEntry { name: b"..".to_vec(), ino: d.parent, kind: FileKind::Dir, cookie: 2 });
        }
        for (c, name) in d.by_cookie.range(cookie.max(2) + 1..) {
            if out.len() >= max {
                break;
            }
            let (child, _) = d.by_name[name];
            out.push(DirEntry { name: name.clone(), ino: child, kind: s.node(child)?.attr.kind, cookie: *c });
        }
        out.truncate(max);
        Ok(out)
    }

    fn readdirplus(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<(DirEntry, Attr)>> {
        let entries = self.readdir(ino, cookie, max)?;
        let _f = self.enter("readdirplus");
        let s = self.state.lock();
        entries.into_iter().map(|e| Ok((e.clone(), s.node(e.ino)?.attr.clone()))).collect()
    }

    fn statfs(&self) -> PResult<StatFs> {
        let _f = self.enter("statfs");
        let s = self.state.lock();
        let used: u64 = s.nodes.values().map(|n| n.attr.size.div_ceil(4096)).sum();
        let blocks = 1 << 20;
        Ok(StatFs {
            blocks,
            bfree: blocks - used.min(blocks),
            bavail: blocks - used.min(blocks),
            files: 1 << 20,
            ffree: (1 << 20) - s.nodes.len() as u64,
            bsize: 4096,
            frsize: 4096,
            namelen: NAME_MAX as u32,
        })
    }

    fn setxattr(&self, _c: &Caller, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> PResult<()> {
        let _f = self.enter("setxattr");
        let mut s = self.state.lock();
        let n = s.node_mut(ino)?;
        match (how, n.xattrs.contains_key(name)) {
            (XattrSet::Create, true) => return Err(err(libc::EEXIST, "attribute exists")),
            (XattrSet::Replace, false) => return Err(err(libc::ENODATA, "no such attribute")),
            _ => {}
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.attr.ctime = Timespec::now();
        Ok(())
    }

    fn getxattr(&self, ino: Ino, name: &[u8]) -> PResult<Vec<u8>> {
        let _f = self.enter("getxattr");
        self.state.lock().node(ino)?.xattrs.get(name).cloned().ok_or_else(|| err(libc::ENODATA, "no such attribute"))
    }

    fn listxattr(&self, ino: Ino) -> PResult<Vec<Vec<u8>>> {
        let _f = self.enter("listxattr");
        Ok(self.state.lock().node(ino)?.xattrs.keys().cloned().collect())
    }

    fn removexattr(&self, _c: &Caller, ino: Ino, name: &[u8]) -> PResult<()> {
        let _f = self.enter("removexattr");
        let mut s = self.state.lock();
        s.node_mut(ino)?.xattrs.remove(name).map(|_| ()).ok_or_else(|| err(libc::ENODATA, "no such attribute"))
    }

    fn sync_all(&self) -> PResult<()> {
        let _f = self.enter("sync_all");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readdir_cookies_survive_removals() {
        let fs = MemFs::new();
        let c = Caller::root();
        for i in 0..10 {
            fs.mknod(&c, ROOT, format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).expect("create");
        }
        let first = fs.readdir(ROOT, 0, 5).expect("readdir");
        assert_eq!(first.len(), 5);
        fs.unlink(&c, ROOT, b"f0").expect("unlink");
        let rest = fs.readdir(ROOT, first[4].cookie, 100).expect("readdir");
        let names: Vec<_> = rest.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
        assert_eq!(names, ["f3", "f4", "f5", "f6", "f7", "f8", "f9"]);
    }

    #[test]
    fn unlinked_open_file_lives_until_release() {
        let fs = MemFs::new();
        let c = Caller::root();
        let a = fs.mknod(&c, ROOT, b"x", libc::S_IFREG | 0o644, 0).expect("create");
        fs.open(a.ino).expect("open");
        fs.unlink(&c, ROOT, b"x").expect("unlink");
        assert_eq!(fs.write(&c, a.ino, 0, b"hi").expect("write"), 2);
        assert_eq!(fs.read(a.ino, 0, 10).expect("read"), b"hi");
        fs.release(a.ino).expect("release");
        assert!(matches!(fs.getattr(a.ino), Err(e) if e.errno == libc::ENOENT));
    }
}
