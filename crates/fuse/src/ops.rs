//! The request handlers: each decodes one FUSE request, finds the slot
//! (file system) and inode its node ids name (see `inode`, `table`), calls
//! the file system and replies. Nothing here keeps file-system state beyond
//! the slots and the kernel's lookup counts; every decision about files is
//! the [`FileSystem`]'s, except what the mount composes itself (`listing`):
//! `.zfs`, its `snapshot` directory, and child datasets in a dataset's root.
//!
//! Handlers run on the session's worker threads, several at once (fuser
//! gives each worker its own cloned `/dev/fuse` descriptor), so a slow read
//! never holds up a `stat`. They return errors as values: `Errno` from the
//! POSIX layer is passed to the kernel unchanged. Every call into the file
//! system is guarded: a panic there fails that one request with `EIO`
//! rather than killing the worker and leaving the caller waiting forever.
//!
//! The mount's rules on top of the file systems': a change in a read-only
//! slot (a snapshot, `readonly=on`) or a control directory fails with
//! `EROFS` before reaching the file system; an operation naming two slots
//! fails with `EXDEV`; removing or renaming a name in a dataset's root that
//! the mount serves something else under (a child dataset, `.zfs`) fails
//! with `EBUSY`, as for a mountpoint.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    CopyFileRangeFlags, Errno as FErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, WriteFlags,
};
use tarn_engine::posix::{Attr, Caller, Errno, FallocFlags, FileKind, Ino, PResult, RenameFlags, SetAttr, TimeOrNow, Timespec, XattrSet};

use crate::inode::{self, is_ctl, Known, LOCAL_ROOT, LOCAL_SNAPDIR, LOCAL_ZFS};
use crate::listing::{composed, DirHandles, Listed, SNAPSHOT_DIR, ZFS_DIR};
use crate::table::{Entered, FsTable, Slot};
use crate::MountOptions;

/// Page drops after refused write-backs in flight at once (a burst of
/// refusals is at most the kernel's dirty share in 1 MiB WRITEs).
const DROP_PAGES_MAX: usize = 16;
static DROPPING: AtomicUsize = AtomicUsize::new(0);

/// fsyncs of a mount a worker waits in itself at once (`defer`); past
/// them, the wait pool answers.
const INLINE_FSYNCS: usize = 1;

/// The `fuser::Filesystem` of one mount.
pub struct Glue {
    pub table: Arc<FsTable>,
    pub known: Arc<Known>,
    pub opts: MountOptions,
    pub dirs: DirHandles,
    /// The session's notifier, set once the session exists.
    pub notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// Workers waiting in an fsync now (`defer`).
    pub inline_fsyncs: AtomicUsize,
}

fn errno(e: Errno) -> FErrno {
    FErrno::from_i32(e.errno)
}

fn system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}

fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                Timespec { sec: -(d.as_secs() as i64), nsec: 0 }
            } else {
                Timespec { sec: -(d.as_secs() as i64) - 1, nsec: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

fn caller(req: &Request) -> Caller {
    // The kernel applied the umask already (no FUSE_DONT_MASK).
    Caller::new(req.uid(), req.gid(), req.pid(), 0)
}

fn time_or_now(t: fuser::TimeOrNow) -> TimeOrNow {
    match t {
        fuser::TimeOrNow::Now => TimeOrNow::Now,
        fuser::TimeOrNow::SpecificTime(s) => TimeOrNow::At(timespec(s)),
    }
}

fn fallocate_flags(mode: i32) -> PResult<FallocFlags> {
    let known = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
    if mode & !known != 0 {
        return Err(Errno::new(libc::EOPNOTSUPP, format!("fallocate mode {mode:#x} is not supported")));
    }
    Ok(FallocFlags {
        keep_size: mode & libc::FALLOC_FL_KEEP_SIZE != 0,
        punch_hole: mode & libc::FALLOC_FL_PUNCH_HOLE != 0,
        zero_range: mode & libc::FALLOC_FL_ZERO_RANGE != 0,
    })
}


/// Runs one call into the file system. A panic there (a bug) becomes `EIO`
/// for this request: the caller gets an error instead of waiting forever
/// for a reply, and the worker thread lives on to serve the next request.
fn guarded<T>(f: impl FnOnce() -> PResult<T>) -> PResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
        Err(Errno::new(libc::EIO, format!("the file system panicked: {why}")))
    })
}

/// Calls `f` with the entered slot and the inode `nodeid` names (see
/// `Glue::on`).
fn on_table<T>(table: &FsTable, nodeid: u64, write: bool, f: impl FnOnce(&Entered, Ino) -> PResult<T>) -> PResult<T> {
    guarded(|| {
        let (slot, local) = table.resolve(nodeid)?;
        if is_ctl(local) {
            return Err(if write { erofs(&slot) } else { Errno::new(libc::EISDIR, format!("'{}': a .zfs directory", slot.name)) });
        }
        let e = table.enter(&slot)?;
        if write {
            e.writable()?;
        }
        let ino = e.ino(local)?;
        f(&e, ino)
    })
}

/// The xattr size protocol: size 0 asks for the length; a buffer that is
/// too small gets `ERANGE`.
fn xattr_reply(v: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(v.len() as u32);
    } else if v.len() > size as usize {
        reply.error(FErrno::from_i32(libc::ERANGE));
    } else {
        reply.data(v);
    }
}

fn exdev() -> Errno {
    Errno::new(libc::EXDEV, "the two inodes are in different file systems of this mount")
}

fn erofs(slot: &Slot) -> Errno {
    Errno::new(libc::EROFS, format!("'{}': the .zfs directories are read-only", slot.name))
}

/// Whether an open with `flags` may change the file.
fn opens_for_writing(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Glue {
    fn attr_ttl(&self) -> Duration {
        self.opts.attr_ttl
    }

    /// The flags of an open; `uncached`: the file system wants this open's
    /// writes to bypass the write-back cache (`FileSystem::uncached_writes`).
    fn open_flags(&self, uncached: bool) -> FopenFlags {
        if !self.opts.writeback_cache {
            return FopenFlags::empty();
        }
        // The page cache of a file stays valid across opens: only this mount
        // changes the file, and changes behind its back (a rollback) are
        // invalidated explicitly.
        let keep = FopenFlags::FOPEN_KEEP_CACHE;
        // Near a quota or the pool's end: each write(2) goes to the file
        // system and fails there if it does not fit (see `dirty`).
        if uncached {
            keep | FopenFlags::FOPEN_DIRECT_IO
        } else {
            keep
        }
    }

    /// A write-back WRITE the file system refused for lack of space: the
    /// writer was told `write(2)` succeeded and the kernel shows the file's
    /// size as if it had. The file system keeps that size (a hole where the
    /// data is missing), so the size never exceeds what is stored, and the
    /// kernel drops its pages of the range, which hold data that is not
    /// stored. The error reaches the writer at `fsync` or `close`.
    fn writeback_refused(&self, ino: INodeNo, offset: u64, len: usize) {
        let end = offset.saturating_add(len as u64);
        if let Err(e) = self.on(ino.0, true, |e, i| e.fs().keep_size(i, end)) {
            eprintln!("tarn: node {}: cannot keep the size {} the kernel shows after a refused write-back: {}", ino.0, end, e);
        }
    }

    /// Drops the kernel's pages of a refused write-back's range — from a
    /// thread of its own, after the reply: the kernel may wait for those
    /// pages' write-back to end, which the reply ends. At most
    /// `DROP_PAGES_MAX` at once; beyond, the pages stay until evicted.
    fn drop_pages_later(&self, ino: INodeNo, offset: u64, len: usize) {
        let Some(n) = self.notifier.get().cloned() else { return };
        if DROPPING.fetch_add(1, Ordering::AcqRel) >= DROP_PAGES_MAX {
            DROPPING.fetch_sub(1, Ordering::AcqRel);
            eprintln!("tarn: node {}: cached pages of a refused write-back at {} are left to eviction", ino.0, offset);
            return;
        }
        let spawned = std::thread::Builder::new().name("tarn-fuse-inval".into()).spawn(move || {
            let _ = n.inval_inode(ino, offset as i64, len as i64);
            DROPPING.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            DROPPING.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn fattr(&self, nodeid: u64, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(nodeid),
            size: a.size,
            blocks: a.blocks,
            atime: system_time(a.atime),
            mtime: system_time(a.mtime),
            ctime: system_time(a.ctime),
            crtime: system_time(a.crtime),
            kind: file_type(a.kind),
            perm: a.perm,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: a.blksize,
            flags: 0,
        }
    }

    /// Runs `f` on the file system and inode of `nodeid` (guarded). `write`:
    /// the call changes something, refused with `EROFS` in a read-only slot
    /// and in the control directories (where nothing else applies either).
    fn on<T>(&self, nodeid: u64, write: bool, f: impl FnOnce(&Entered, Ino) -> PResult<T>) -> PResult<T> {
        on_table(&self.table, nodeid, write, f)
    }

    /// An fsync of `nodeid` (a file or directory): answered on this worker
    /// while no other of the mount's workers waits in one, else from the
    /// wait pool (`defer`), the worker going back to reading requests while
    /// the commit waits for its log write and flush.
    fn fsync_deferred(&self, nodeid: u64, datasync: bool, reply: ReplyEmpty) {
        let table = self.table.clone();
        let answer = move || match on_table(&table, nodeid, false, |e, i| e.fs().fsync(i, datasync)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        };
        // One worker of the mount may wait in an fsync itself (with
        // another left to read requests): a lone fsyncer pays no hand-over
        // to the pool, and concurrent fsyncers leave the other workers to
        // the WRITEs and SETATTRs their fsyncs wait for.
        match crate::defer::Inline::enter(&self.inline_fsyncs, INLINE_FSYNCS.min(self.opts.threads - 1)) {
            Some(_inline) => answer(),
            None => crate::defer::run(&self.table.deferred, answer),
        }
    }

    /// As `on`, for a call naming two inodes: both must be in one slot.
    fn on2<T>(&self, a: u64, b: u64, write: bool, f: impl FnOnce(&Entered, Ino, Ino) -> PResult<T>) -> PResult<T> {
        guarded(|| {
            let (slot, la) = self.table.resolve(a)?;
            let (other, lb) = self.table.resolve(b)?;
            if slot.index != other.index {
                return Err(exdev());
            }
            if is_ctl(la) || is_ctl(lb) {
                return Err(erofs(&slot));
            }
            let e = self.table.enter(&slot)?;
            if write {
                e.writable()?;
            }
            let (ia, ib) = (e.ino(la)?, e.ino(lb)?);
            f(&e, ia, ib)
        })
    }

    /// `EBUSY` for removing or renaming `name` in directory `local` of
    /// `slot` if the mount serves something else there.
    fn not_served(&self, slot: &Slot, local: u64, name: &[u8]) -> PResult<()> {
        if local != LOCAL_ROOT || !composed(self, slot, local) {
            return Ok(());
        }
        let splice = self.table.splice.as_ref().expect("composed implies a splice");
        let full = format!("{}/{}", slot.name, String::from_utf8_lossy(name));
        if name == ZFS_DIR || self.table.find(&full).is_some() || splice.child(&slot.name, name)?.is_some() {
            return Err(Errno::new(libc::EBUSY, format!("'{}' is a mountpoint in '{}'", String::from_utf8_lossy(name), slot.name)));
        }
        Ok(())
    }

    /// After a call that may have dropped set-user-ID bits (the file
    /// system's job under FUSE_HANDLE_KILLPRIV_V2): the kernel invalidates
    /// only times and size after writes, fallocate and copies, so it would
    /// show the old mode until `attr_ttl` ran out; make it ask again.
    /// Attributes only (offset -1): no page lock is taken under the caller.
    fn mode_may_have_changed(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(ino, -1, 0);
        }
    }

    /// The node id and attributes (as shown) of inode `a` of an entered slot.
    fn shown(&self, e: &Entered, mut a: Attr) -> PResult<(u64, Attr)> {
        let nodeid = e.nodeid(a.ino)?;
        if inode::split(nodeid).1 == LOCAL_ROOT {
            a.gen = 0;
        }
        a.ino = nodeid;
        Ok((nodeid, a))
    }

    /// Replies with a new entry: the kernel now holds one more reference.
    fn reply_entry(&self, parent: u64, name: &[u8], got: PResult<(u64, Attr)>, reply: ReplyEntry) {
        match got {
            Ok((nodeid, a)) => {
                self.known.looked_up(nodeid, parent, name, a.gen);
                reply.entry_with_ttls(&self.attr_ttl(), &self.opts.entry_ttl, &self.fattr(nodeid, &a), Generation(a.gen));
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    /// A creating call in directory `parent` (write access), its result shown.
    fn creating(&self, parent: u64, f: impl FnOnce(&Entered, Ino) -> PResult<Attr>) -> PResult<(u64, Attr)> {
        self.on(parent, true, |e, p| {
            let a = f(e, p)?;
            self.shown(e, a)
        })
    }

    /// LOOKUP: the mount's own names first (they shadow the file system's).
    fn find(&self, parent: u64, name: &[u8]) -> PResult<(u64, Attr)> {
        let (slot, local) = self.table.resolve(parent)?;
        let splice = self.table.splice.as_ref();
        match local {
            LOCAL_ZFS if name == SNAPSHOT_DIR => return Ok((inode::nodeid(slot.index, LOCAL_SNAPDIR), self.ctl_attr(&slot, LOCAL_SNAPDIR)?)),
            LOCAL_ZFS => return Err(Errno::new(libc::ENOENT, format!("'{}/.zfs' holds only 'snapshot'", slot.name))),
            LOCAL_SNAPDIR => {
                let splice = splice.ok_or_else(|| Errno::new(libc::ENOENT, "no snapshots here"))?;
                let full = format!("{}@{}", slot.name, String::from_utf8_lossy(name));
                if self.table.find(&full).is_none() && !splice.has_snapshot(&slot.name, name)? {
                    return Err(Errno::new(libc::ENOENT, format!("no snapshot '{}'", full)));
                }
                return self.slot_root(&slot, local, name, &full);
            }
            LOCAL_ROOT if composed(self, &slot, local) => {
                if name == ZFS_DIR {
                    return Ok((inode::nodeid(slot.index, LOCAL_ZFS), self.ctl_attr(&slot, LOCAL_ZFS)?));
                }
                // A child served here already keeps being served (a
                // rollback holding it back from new mounts waits in its
                // slot instead); else the splice says whether one is.
                let known = format!("{}/{}", slot.name, String::from_utf8_lossy(name));
                let full = match self.table.find(&known) {
                    Some(_) => Some(known),
                    None => splice.expect("composed implies a splice").child(&slot.name, name)?,
                };
                if let Some(full) = full {
                    return self.slot_root(&slot, local, name, &full);
                }
            }
            _ => {}
        }
        let e = self.table.enter(&slot)?;
        let a = e.fs().lookup(e.ino(local)?, name)?;
        self.shown(&e, a)
    }

    /// The root of the slot serving `full` (opening it).
    fn slot_root(&self, slot: &Slot, local: u64, name: &[u8], full: &str) -> PResult<(u64, Attr)> {
        let child = self.slot_for(slot, local, name, full)?;
        let a = self.root_attr(&child, true)?.expect("opened");
        Ok((child.root_nodeid(), a))
    }

    fn getattr_of(&self, nodeid: u64) -> PResult<Attr> {
        let (slot, local) = self.table.resolve(nodeid)?;
        if is_ctl(local) {
            return self.ctl_attr(&slot, local);
        }
        let e = self.table.enter(&slot)?;
        let a = e.fs().getattr(e.ino(local)?)?;
        Ok(self.shown(&e, a)?.1)
    }

    fn open_dir(&self, nodeid: u64) -> PResult<u64> {
        let (slot, local) = self.table.resolve(nodeid)?;
        if !composed(self, &slot, local) {
            return Ok(0);
        }
        let x = self.extras(&slot, local)?;
        Ok(self.dirs.insert(x))
    }

    /// Fills a READDIR or READDIRPLUS reply from as many batches as fit.
    fn fill(&self, nodeid: u64, fh: u64, offset: u64, plus: bool, mut add: impl FnMut(Listed) -> bool) -> PResult<()> {
        let mut cookie = offset;
        loop {
            let (batch, next) = self.list_batch(nodeid, fh, cookie, plus)?;
            for l in batch {
                if add(l) {
                    return Ok(());
                }
            }
            match next {
                Some(c) if c != cookie => cookie = c,
                _ => return Ok(()),
            }
        }
    }

    /// The file system's own figures: a dataset's reflect its quota.
    fn statfs_of(&self, nodeid: u64) -> PResult<tarn_engine::posix::StatFs> {
        let (slot, _) = self.table.resolve(nodeid)?;
        let e = self.table.enter(&slot)?;
        e.fs().statfs()
    }
}

/// Evaluates a call, or replies with its error and returns from the handler.
macro_rules! try_reply {
    ($reply:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return $reply.error(errno(e)),
        }
    };
}

impl Filesystem for Glue {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = self.opts.max_write;
        if let Err(nearest) = config.set_max_write(want) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(want) {
            let _ = config.set_max_readahead(nearest);
        }
        // Background requests (read-ahead, write-back) in flight at once.
        let _ = config.set_max_background(self.opts.max_background);
        let _ = config.set_congestion_threshold(self.opts.max_background * 3 / 4);
        let caps = config.capabilities();
        // HANDLE_KILLPRIV_V2: the file system drops set-user-ID and
        // `security.capability` on write, truncate, fallocate, copy and chown (the
        // `FileSystem` contract), so the kernel need not ask for
        // `security.capability` before every write(2) — a round trip that
        // cut 4 KiB writes to a fifth of their speed.
        let mut wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if self.opts.writeback_cache {
            // DIRECT_IO_ALLOW_MMAP: a file opened uncached near a quota
            // (`open_flags`) can still be mapped shared.
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        }
        // Ask for what this kernel offers; an older kernel simply goes without.
        let _ = config.add_capabilities(wanted & caps);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.reply_entry(parent.0, name.as_bytes(), guarded(|| self.find(parent.0, name.as_bytes())), reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if self.known.forget(ino.0, nlookup) {
            if let Ok((slot, local)) = self.table.resolve(ino.0) {
                slot.forgotten(local);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let a = try_reply!(reply, guarded(|| self.getattr_of(ino.0)));
        reply.attr(&self.attr_ttl(), &self.fattr(ino.0, &a));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // With the write-back cache the kernel owns mtime and ctime and
        // sends them here when it flushes a file.
        let set = SetAttr { mode, uid, gid, size, atime: atime.map(time_or_now), mtime: mtime.map(time_or_now), ctime: ctime.map(timespec) };
        let (_, a) = try_reply!(reply, self.on(ino.0, true, |e, i| self.shown(e, e.fs().setattr(&caller(req), i, &set)?)));
        reply.attr(&self.attr_ttl(), &self.fattr(ino.0, &a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let t = try_reply!(reply, self.on(ino.0, false, |e, i| e.fs().readlink(i)));
        reply.data(&t);
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, rdev: u32, reply: ReplyEntry) {
        let got = self.creating(parent.0, |e, p| e.fs().mknod(&caller(req), p, name.as_bytes(), mode, rdev));
        self.reply_entry(parent.0, name.as_bytes(), got, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let got = self.creating(parent.0, |e, p| e.fs().mkdir(&caller(req), p, name.as_bytes(), mode));
        self.reply_entry(parent.0, name.as_bytes(), got, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        try_reply!(
            reply,
            self.on(parent.0, true, |e, p| {
                self.not_served(e.slot, inode::split(parent.0).1, name.as_bytes())?;
                e.fs().unlink(&caller(req), p, name.as_bytes())
            })
        );
        reply.ok();
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        try_reply!(
            reply,
            self.on(parent.0, true, |e, p| {
                self.not_served(e.slot, inode::split(parent.0).1, name.as_bytes())?;
                e.fs().rmdir(&caller(req), p, name.as_bytes())
            })
        );
        reply.ok();
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let got = self.creating(parent.0, |e, p| e.fs().symlink(&caller(req), p, link_name.as_bytes(), target.as_os_str().as_bytes()));
        self.reply_entry(parent.0, link_name.as_bytes(), got, reply);
    }

    fn rename(&self, req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: fuser::RenameFlags, reply: ReplyEmpty) {
        let bits = flags.bits();
        if bits & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
            return reply.error(FErrno::from_i32(libc::EINVAL));
        }
        let f = RenameFlags { noreplace: bits & libc::RENAME_NOREPLACE != 0, exchange: bits & libc::RENAME_EXCHANGE != 0 };
        try_reply!(
            reply,
            self.on2(parent.0, newparent.0, true, |e, p, np| {
                self.not_served(e.slot, inode::split(parent.0).1, name.as_bytes())?;
                self.not_served(e.slot, inode::split(newparent.0).1, newname.as_bytes())?;
                // The kernel moves its entries to the new names; remember
                // them, so a rollback can drop them (see `Known`).
                let node = |dir, n: &OsStr| e.fs().lookup(dir, n.as_bytes()).ok().and_then(|a| e.nodeid(a.ino).ok());
                let moved = node(p, name);
                let swapped = if f.exchange { node(np, newname) } else { None };
                e.fs().rename(&caller(req), p, name.as_bytes(), np, newname.as_bytes(), f)?;
                if let Some(n) = moved {
                    self.known.also_named(n, newparent.0, newname.as_bytes());
                }
                if let Some(n) = swapped {
                    self.known.also_named(n, parent.0, name.as_bytes());
                }
                Ok(())
            })
        );
        reply.ok();
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let got = self.on2(ino.0, newparent.0, true, |e, i, np| self.shown(e, e.fs().link(&caller(req), i, np, newname.as_bytes())?));
        self.reply_entry(newparent.0, newname.as_bytes(), got, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writing = opens_for_writing(flags.0);
        let uncached = try_reply!(
            reply,
            self.on(ino.0, writing, |e, i| {
                e.fs().open(i)?;
                self.known.opened(ino.0);
                Ok(writing && e.fs().uncached_writes())
            })
        );
        reply.opened(FileHandle(0), self.open_flags(uncached));
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, _flags: i32, reply: ReplyCreate) {
        let mode = (mode & !libc::S_IFMT) | libc::S_IFREG;
        let mut uncached = false;
        let (nodeid, a) = try_reply!(
            reply,
            self.creating(parent.0, |e, p| {
                let a = e.fs().mknod(&caller(req), p, name.as_bytes(), mode, 0)?;
                e.fs().open(a.ino)?;
                uncached = e.fs().uncached_writes();
                Ok(a)
            })
        );
        self.known.looked_up(nodeid, parent.0, name.as_bytes(), a.gen);
        self.known.opened(nodeid);
        reply.created(&self.attr_ttl(), &self.fattr(nodeid, &a), Generation(a.gen), FileHandle(0), self.open_flags(uncached));
    }

    fn read(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lo: Option<LockOwner>, reply: ReplyData) {
        let d = try_reply!(reply, self.on(ino.0, false, |e, i| e.fs().read(i, offset, size)));
        reply.data(&d);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Under FUSE_HANDLE_KILLPRIV_V2 the kernel flags the writes that
        // must drop set-user-ID: its own CAP_FSETID verdict on the writer
        // (a write(2) to such a file by a caller without it goes through,
        // not to the page cache). Write-back WRITEs come as uid 0 and are
        // never flagged: their data was written before any chmod u+s.
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let who = Caller { fsetid: !kill, ..caller(req) };
        let n = match self.on(ino.0, true, |e, i| e.fs().write(&who, i, offset, data)) {
            Ok(n) => n,
            Err(e) => {
                let refused = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) && [libc::EDQUOT, libc::ENOSPC].contains(&e.errno);
                if refused {
                    self.writeback_refused(ino, offset, data.len());
                }
                reply.error(errno(e));
                if refused {
                    self.drop_pages_later(ino, offset, data.len());
                }
                return;
            }
        };
        if kill {
            self.mode_may_have_changed(ino);
        }
        reply.written(n);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lo: LockOwner, reply: ReplyEmpty) {
        // close(2): the kernel has already written back this file's dirty
        // pages; durability is fsync's business, as on a local file system,
        // and POSIX locks are the kernel's (no FUSE_POSIX_LOCKS). ENOSYS
        // tells the kernel so once: it then never sends FLUSH again, which
        // saves one round trip per close (one in eight of a small-file create).
        reply.error(FErrno::from_i32(libc::ENOSYS));
    }

    fn release(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, _lo: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.known.released(ino.0);
        try_reply!(reply, self.on(ino.0, false, |e, i| e.fs().release(i)));
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.fsync_deferred(ino.0, datasync, reply);
    }

    fn syncfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyEmpty) {
        // sync(2) / syncfs(2) on a fuseblk mount (`blk`): the kernel has
        // written back the mount's dirty pages and waited for the replies;
        // everything they and earlier requests changed becomes durable
        // now, in every file system this mount serves. An error (a
        // suspended pool) goes to the syncfs(2) caller; sync(2) drops it.
        try_reply!(reply, self.table.sync_all());
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = try_reply!(reply, guarded(|| self.open_dir(ino.0)));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.remove(fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        if is_ctl(inode::split(ino.0).1) {
            return reply.ok();
        }
        self.fsync_deferred(ino.0, datasync, reply);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        try_reply!(reply, guarded(|| self.fill(ino.0, fh.0, offset, false, |l| reply.add(INodeNo(l.nodeid), l.cookie, file_type(l.kind), OsStr::from_bytes(&l.name)))));
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let res = guarded(|| {
            self.fill(ino.0, fh.0, offset, true, |l| {
                // An unopened child's root: made-up attributes, valid for 0 s.
                let (a, ttl) = match l.attr {
                    Some(a) => (a, self.attr_ttl()),
                    None => (crate::listing::made_up_dir(l.nodeid), Duration::ZERO),
                };
                if reply.add(INodeNo(l.nodeid), l.cookie, OsStr::from_bytes(&l.name), &ttl, &self.fattr(l.nodeid, &a), Generation(a.gen)) {
                    return true;
                }
                // The kernel takes a reference for every entry but "." and "..".
                if l.name != b"." && l.name != b".." {
                    self.known.looked_up(l.nodeid, ino.0, &l.name, a.gen);
                }
                false
            })
        });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let s = try_reply!(reply, guarded(|| self.statfs_of(ino.0)));
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize);
    }

    fn setxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let how = match flags {
            0 => XattrSet::Any,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            _ => return reply.error(FErrno::from_i32(libc::EINVAL)),
        };
        try_reply!(reply, self.on(ino.0, true, |e, i| e.fs().setxattr(&caller(req), i, name.as_bytes(), value, how)));
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if is_ctl(inode::split(ino.0).1) {
            return reply.error(FErrno::from_i32(libc::ENODATA));
        }
        let v = try_reply!(reply, self.on(ino.0, false, |e, i| e.fs().getxattr(i, name.as_bytes())));
        xattr_reply(&v, size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if is_ctl(inode::split(ino.0).1) {
            return xattr_reply(&[], size, reply);
        }
        let names = try_reply!(reply, self.on(ino.0, false, |e, i| e.fs().listxattr(i)));
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(&n);
            list.push(0);
        }
        xattr_reply(&list, size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        try_reply!(reply, self.on(ino.0, true, |e, i| e.fs().removexattr(&caller(req), i, name.as_bytes())));
        reply.ok();
    }

    fn fallocate(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        let flags = try_reply!(reply, fallocate_flags(mode));
        let who = caller(req);
        try_reply!(reply, self.on(ino.0, true, |e, i| e.fs().fallocate(&who, i, offset, length, flags)));
        if !who.fsetid {
            self.mode_may_have_changed(ino);
        }
        reply.ok();
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if flags.bits() != 0 {
            return reply.error(FErrno::from_i32(libc::EINVAL));
        }
        // The reply carries a 32-bit count: copy at most 1 GiB per request
        // (copy_file_range(2) may return short; callers loop). The file
        // system shares whole records (block cloning) and copies the rest;
        // the kernel has written back both ranges' dirty pages before this
        // request and drops the destination's cached pages after it.
        let len = len.min(1 << 30);
        let who = caller(req);
        let n = try_reply!(reply, self.on2(ino_in.0, ino_out.0, true, |e, a, b| e.fs().copy_file_range(&who, a, offset_in, b, offset_out, len)));
        if !who.fsetid {
            self.mode_may_have_changed(ino_out);
        }
        reply.written(n as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        for t in [Timespec { sec: 0, nsec: 0 }, Timespec { sec: 1_700_000_000, nsec: 123 }, Timespec { sec: -5, nsec: 250_000_000 }] {
            assert_eq!(timespec(system_time(t)), t);
        }
    }

    #[test]
    fn fallocate_modes() {
        assert!(matches!(fallocate_flags(0), Ok(f) if f == FallocFlags::default()));
        let f = fallocate_flags(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE).expect("known mode");
        assert!(f.punch_hole && f.keep_size && !f.zero_range);
        assert!(matches!(fallocate_flags(libc::FALLOC_FL_COLLAPSE_RANGE), Err(e) if e.errno == libc::EOPNOTSUPP));
    }
}
