//! The request handlers: each decodes one FUSE request, maps its inode
//! numbers (see `inode`), calls the POSIX layer and replies. Nothing here
//! keeps file-system state beyond the inode map and the kernel's lookup
//! counts; every decision about files is the [`FileSystem`]'s.
//!
//! Handlers run on the session's worker threads, several at once (fuser
//! gives each worker its own cloned `/dev/fuse` descriptor), so a slow read
//! never holds up a `stat`. They return errors as values: `Errno` from the
//! POSIX layer is passed to the kernel unchanged. Every call into the file
//! system is guarded: a panic there fails that one request with `EIO`
//! rather than killing the worker and leaving the caller waiting forever.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    CopyFileRangeFlags, Errno as FErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, WriteFlags,
};
use parking_lot::RwLock;
use tarn_engine::posix::{Attr, Caller, Errno, FallocFlags, FileKind, FileSystem, Ino, PResult, RenameFlags, SetAttr, TimeOrNow, Timespec, XattrSet};

use crate::inode::{InodeMap, Known};
use crate::MountOptions;

/// Entries asked of the file system per READDIR (a 4 KiB reply holds about
/// 100 short names) and per READDIRPLUS (about 25 with attributes). Asking
/// for more only wastes the file system's work: what does not fit is asked
/// again from the last cookie that did.
const READDIR_BATCH: usize = 128;
const READDIRPLUS_BATCH: usize = 32;

/// The file systems one mount serves, by index (see `inode`). Index 0 is the
/// mounted dataset; later indices are spliced-in snapshots.
pub struct FsTable {
    pub map: InodeMap,
    fss: RwLock<Vec<Arc<dyn FileSystem>>>,
}

impl FsTable {
    pub fn new(fs: Arc<dyn FileSystem>) -> FsTable {
        FsTable { map: InodeMap::new(fs.root()), fss: RwLock::new(vec![fs]) }
    }

    /// The file system a FUSE inode belongs to, its index and its own inode.
    fn resolve(&self, fuse: u64) -> PResult<(Arc<dyn FileSystem>, usize, Ino)> {
        let (idx, ino) = self.map.from_fuse(fuse);
        let fss = self.fss.read();
        let fs = fss.get(idx).ok_or_else(|| Errno::new(libc::ESTALE, format!("inode {fuse:#x}: no file system {idx} in this mount")))?;
        Ok((fs.clone(), idx, ino))
    }

    pub fn main(&self) -> Arc<dyn FileSystem> {
        self.fss.read()[0].clone()
    }

    /// Adds a file system to the mount's inode space (a snapshot under
    /// `.zfs/snapshot`); returns its index. Its inodes are reachable once a
    /// directory of file system 0 names its root.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn attach(&self, fs: Arc<dyn FileSystem>) -> PResult<usize> {
        let mut fss = self.fss.write();
        if fss.len() >= crate::MAX_FILESYSTEMS {
            return Err(Errno::new(libc::ENOSPC, format!("a mount holds at most {} file systems", crate::MAX_FILESYSTEMS)));
        }
        fss.push(fs);
        Ok(fss.len() - 1)
    }
}

/// The `fuser::Filesystem` of one mount.
pub struct Glue {
    pub table: Arc<FsTable>,
    pub known: Arc<Known>,
    pub opts: MountOptions,
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
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid(), umask: 0 }
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

fn exdev() -> Errno {
    Errno::new(libc::EXDEV, "the two inodes are in different file systems of this mount")
}

impl Glue {
    fn attr_ttl(&self) -> Duration {
        self.opts.attr_ttl
    }

    fn fattr(&self, fuse_ino: u64, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(fuse_ino),
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

    fn fuse_ino(&self, idx: usize, ino: Ino) -> PResult<u64> {
        self.table.map.to_fuse(idx, ino).ok_or_else(|| Errno::new(libc::EOVERFLOW, format!("inode {ino} does not fit this mount's inode space")))
    }

    /// Replies with a new entry: the kernel now holds one more reference.
    fn entry(&self, idx: usize, parent: u64, name: &[u8], a: PResult<Attr>, reply: ReplyEntry) {
        match a.and_then(|a| Ok((self.fuse_ino(idx, a.ino)?, a))) {
            Ok((fino, a)) => {
                self.known.looked_up(fino, parent, name);
                reply.entry_with_ttls(&self.attr_ttl(), &self.opts.entry_ttl, &self.fattr(fino, &a), Generation(a.gen));
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open_flags(&self) -> FopenFlags {
        // The page cache of a file stays valid across opens: only this mount
        // changes the file, and changes behind its back (a rollback) are
        // invalidated explicitly.
        if self.opts.writeback_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    fn readdir_plus(&self, ino: u64, offset: u64, reply: &mut ReplyDirectoryPlus) -> PResult<()> {
        let (fs, idx, local) = self.table.resolve(ino)?;
        for (e, a) in fs.readdirplus(local, offset, READDIRPLUS_BATCH)? {
            let fino = self.fuse_ino(idx, e.ino)?;
            let dots = e.name == b"." || e.name == b"..";
            if reply.add(INodeNo(fino), e.cookie, OsStr::from_bytes(&e.name), &self.attr_ttl(), &self.fattr(fino, &a), Generation(a.gen)) {
                break;
            }
            // The kernel takes a reference for every entry but "." and "..".
            if !dots {
                self.known.looked_up(fino, ino, &e.name);
            }
        }
        Ok(())
    }
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

/// Evaluates a file-system call (guarded), or replies with its error and
/// returns from the handler.
macro_rules! try_reply {
    ($reply:expr, $e:expr) => {
        match guarded(|| $e) {
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
        let mut wanted = InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_PARALLEL_DIROPS | InitFlags::FUSE_ASYNC_DIO | InitFlags::FUSE_CACHE_SYMLINKS;
        if self.opts.writeback_cache {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // Ask for what this kernel offers; an older kernel simply goes without.
        let _ = config.add_capabilities(wanted & caps);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (fs, idx, p) = try_reply!(reply, self.table.resolve(parent.0));
        self.entry(idx, parent.0, name.as_bytes(), guarded(|| fs.lookup(p, name.as_bytes())), reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.known.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let a = try_reply!(reply, fs.getattr(local));
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
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        // With the write-back cache the kernel owns mtime and ctime and
        // sends them here when it flushes a file.
        let set = SetAttr { mode, uid, gid, size, atime: atime.map(time_or_now), mtime: mtime.map(time_or_now), ctime: ctime.map(timespec) };
        let a = try_reply!(reply, fs.setattr(&caller(req), local, &set));
        reply.attr(&self.attr_ttl(), &self.fattr(ino.0, &a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let t = try_reply!(reply, fs.readlink(local));
        reply.data(&t);
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, rdev: u32, reply: ReplyEntry) {
        let (fs, idx, p) = try_reply!(reply, self.table.resolve(parent.0));
        self.entry(idx, parent.0, name.as_bytes(), guarded(|| fs.mknod(&caller(req), p, name.as_bytes(), mode, rdev)), reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let (fs, idx, p) = try_reply!(reply, self.table.resolve(parent.0));
        self.entry(idx, parent.0, name.as_bytes(), guarded(|| fs.mkdir(&caller(req), p, name.as_bytes(), mode)), reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (fs, _, p) = try_reply!(reply, self.table.resolve(parent.0));
        try_reply!(reply, fs.unlink(&caller(req), p, name.as_bytes()));
        reply.ok();
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (fs, _, p) = try_reply!(reply, self.table.resolve(parent.0));
        try_reply!(reply, fs.rmdir(&caller(req), p, name.as_bytes()));
        reply.ok();
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let (fs, idx, p) = try_reply!(reply, self.table.resolve(parent.0));
        let a = guarded(|| fs.symlink(&caller(req), p, link_name.as_bytes(), target.as_os_str().as_bytes()));
        self.entry(idx, parent.0, link_name.as_bytes(), a, reply);
    }

    fn rename(&self, req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: fuser::RenameFlags, reply: ReplyEmpty) {
        let (fs, idx, p) = try_reply!(reply, self.table.resolve(parent.0));
        let (_, nidx, np) = try_reply!(reply, self.table.resolve(newparent.0));
        if idx != nidx {
            return reply.error(errno(exdev()));
        }
        let bits = flags.bits();
        if bits & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
            return reply.error(FErrno::from_i32(libc::EINVAL));
        }
        let f = RenameFlags { noreplace: bits & libc::RENAME_NOREPLACE != 0, exchange: bits & libc::RENAME_EXCHANGE != 0 };
        try_reply!(reply, fs.rename(&caller(req), p, name.as_bytes(), np, newname.as_bytes(), f));
        reply.ok();
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let (fs, idx, local) = try_reply!(reply, self.table.resolve(ino.0));
        let (_, nidx, np) = try_reply!(reply, self.table.resolve(newparent.0));
        if idx != nidx {
            return reply.error(errno(exdev()));
        }
        self.entry(idx, newparent.0, newname.as_bytes(), guarded(|| fs.link(&caller(req), local, np, newname.as_bytes())), reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        try_reply!(reply, fs.open(local));
        reply.opened(FileHandle(0), self.open_flags());
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, _flags: i32, reply: ReplyCreate) {
        let (fs, idx, p) = try_reply!(reply, self.table.resolve(parent.0));
        let mode = (mode & !libc::S_IFMT) | libc::S_IFREG;
        let a = try_reply!(reply, fs.mknod(&caller(req), p, name.as_bytes(), mode, 0));
        let fino = try_reply!(reply, self.fuse_ino(idx, a.ino));
        try_reply!(reply, fs.open(a.ino));
        self.known.looked_up(fino, parent.0, name.as_bytes());
        reply.created(&self.attr_ttl(), &self.fattr(fino, &a), Generation(a.gen), FileHandle(0), self.open_flags());
    }

    fn read(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lo: Option<LockOwner>, reply: ReplyData) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let d = try_reply!(reply, fs.read(local, offset, size));
        reply.data(&d);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let n = try_reply!(reply, fs.write(&caller(req), local, offset, data));
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
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        try_reply!(reply, fs.release(local));
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        try_reply!(reply, fs.fsync(local, datasync));
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        try_reply!(reply, fs.fsync(local, datasync));
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let (fs, idx, local) = try_reply!(reply, self.table.resolve(ino.0));
        for e in try_reply!(reply, fs.readdir(local, offset, READDIR_BATCH)) {
            let fino = try_reply!(reply, self.fuse_ino(idx, e.ino));
            if reply.add(INodeNo(fino), e.cookie, file_type(e.kind), OsStr::from_bytes(&e.name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        match guarded(|| self.readdir_plus(ino.0, offset, &mut reply)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let (fs, _, _) = try_reply!(reply, self.table.resolve(ino.0));
        let s = try_reply!(reply, fs.statfs());
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize);
    }

    fn setxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let how = match flags {
            0 => XattrSet::Any,
            libc::XATTR_CREATE => XattrSet::Create,
            libc::XATTR_REPLACE => XattrSet::Replace,
            _ => return reply.error(FErrno::from_i32(libc::EINVAL)),
        };
        try_reply!(reply, fs.setxattr(&caller(req), local, name.as_bytes(), value, how));
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let v = try_reply!(reply, fs.getxattr(local, name.as_bytes()));
        xattr_reply(&v, size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let mut list = Vec::new();
        for n in try_reply!(reply, fs.listxattr(local)) {
            list.extend_from_slice(&n);
            list.push(0);
        }
        xattr_reply(&list, size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        try_reply!(reply, fs.removexattr(&caller(req), local, name.as_bytes()));
        reply.ok();
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        let (fs, _, local) = try_reply!(reply, self.table.resolve(ino.0));
        let flags = try_reply!(reply, fallocate_flags(mode));
        try_reply!(reply, fs.fallocate(local, offset, length, flags));
        reply.ok();
    }

    fn copy_file_range(
        &self,
        _req: &Request,
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
        let (fs, idx, a) = try_reply!(reply, self.table.resolve(ino_in.0));
        let (_, oidx, b) = try_reply!(reply, self.table.resolve(ino_out.0));
        if idx != oidx {
            return reply.error(errno(exdev()));
        }
        // The reply carries a 32-bit count: copy at most 1 GiB per request
        // (copy_file_range(2) may return short; callers loop). The file
        // system shares whole records (block cloning) and copies the rest;
        // the kernel has written back both ranges' dirty pages before this
        // request and drops the destination's cached pages after it.
        let len = len.min(1 << 30);
        let n = try_reply!(reply, fs.copy_file_range(a, offset_in, b, offset_out, len));
        reply.written(n as u32);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemFs;

    #[test]
    fn inodes_resolve_to_their_file_system() {
        let (a, b): (Arc<dyn FileSystem>, Arc<dyn FileSystem>) = (Arc::new(MemFs::new()), Arc::new(MemFs::new()));
        let t = FsTable::new(a.clone());
        assert_eq!(t.attach(b.clone()).expect("room"), 1);
        let (fs, idx, ino) = t.resolve(1).expect("the root");
        assert!(Arc::ptr_eq(&fs, &a) && idx == 0 && ino == a.root());
        let snap_root = t.map.to_fuse(1, b.root()).expect("fits");
        let (fs, idx, ino) = t.resolve(snap_root).expect("attached");
        assert!(Arc::ptr_eq(&fs, &b) && idx == 1 && ino == b.root());
        assert!(matches!(t.resolve(t.map.to_fuse(2, 5).expect("fits")), Err(e) if e.errno == libc::ESTALE));
    }

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
