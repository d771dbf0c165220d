//! The contract between the POSIX layer and whatever serves it (the FUSE
//! glue in `crates/fuse`, tests, the fsx exerciser).
//!
//! Inode numbers are the POSIX layer's own (object numbers of one object
//! set); a server that mounts several file systems behind one mount maps them
//! into its own inode space. Names are bytes, as on Linux. Every call returns
//! an [`Errno`]: the value FUSE replies with, plus a sentence for logs.
//!
//! Permission checks on paths are the kernel's (the FUSE mount uses
//! `default_permissions`); the file system applies the rules that need its
//! own state: ownership of new files (set-group-ID directories), sticky
//! directories on unlink/rename, `EROFS` for read-only datasets and
//! snapshots, and dropping privileges when a file changes: a write,
//! truncate, fallocate or copy_file_range by a caller without `CAP_FSETID`
//! ([`Caller::fsetid`]) clears set-user-ID (and set-group-ID when
//! group-executable), a chown
//! clears them whoever asks, and all of them remove `security.capability` (Linux's `file_remove_privs`
//! rules; the mount asks the kernel to leave them to the file system,
//! `FUSE_HANDLE_KILLPRIV_V2`, so that a write need not first ask for that
//! attribute).

use std::fmt;

/// An inode number.
pub type Ino = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }

    /// The kind named by the `S_IFMT` bits of `mode`.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            _ => return None,
        })
    }
}

/// Seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }
}

/// What `stat` shows of an inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileKind,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    /// Space used, in 512-byte units (as `st_blocks`).
    pub blocks: u64,
    pub blksize: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    /// Generation: distinguishes reuses of an inode number.
    pub gen: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeOrNow {
    Now,
    At(Timespec),
}

/// The `sync` property (OpenZFS's `sync=standard|always|disabled`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncPolicy {
    /// `fsync`, `O_SYNC`/`O_DSYNC` writes and `syncfs` are made durable.
    #[default]
    Standard,
    /// Every change is made durable before it returns.
    Always,
    /// `fsync` returns at once; changes are durable with their txg.
    Disabled,
}

impl SyncPolicy {
    pub fn parse(s: &str) -> Option<SyncPolicy> {
        match s {
            "standard" => Some(SyncPolicy::Standard),
            "always" => Some(SyncPolicy::Always),
            "disabled" => Some(SyncPolicy::Disabled),
            _ => None,
        }
    }

    pub fn from_u8(v: u8) -> SyncPolicy {
        match v {
            1 => SyncPolicy::Always,
            2 => SyncPolicy::Disabled,
            _ => SyncPolicy::Standard,
        }
    }
}

/// The fields `setattr` changes; `None` leaves one alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits only (`S_IFMT` bits are ignored).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend.
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<Timespec>,
}

/// Who is asking: owner of what they create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Applied to the mode of what is created (0 when the kernel applied it).
    pub umask: u32,
    /// Linux's `CAP_FSETID`: changing a file's contents keeps its
    /// set-user-ID and set-group-ID bits. Root has it ([`Caller::new`]);
    /// the FUSE glue takes it, for a WRITE, from the kernel's own verdict
    /// on the writer (`FUSE_WRITE_KILL_SUIDGID` absent): a write-back WRITE
    /// comes as uid 0, not as the writer.
    pub fsetid: bool,
}

impl Caller {
    /// A caller with root's `CAP_FSETID` if `uid` is 0.
    pub const fn new(uid: u32, gid: u32, pid: u32, umask: u32) -> Caller {
        Caller { uid, gid, pid, umask, fsetid: uid == 0 }
    }

    pub fn root() -> Caller {
        Caller::new(0, 0, 0, 0)
    }
}

/// One directory entry; `cookie` is where the next `readdir` resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: Ino,
    pub kind: FileKind,
    pub cookie: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// `RENAME_NOREPLACE`: fail with `EEXIST` if the target exists.
    pub noreplace: bool,
    /// `RENAME_EXCHANGE`: swap the two names atomically.
    pub exchange: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FallocFlags {
    /// `FALLOC_FL_KEEP_SIZE`.
    pub keep_size: bool,
    /// `FALLOC_FL_PUNCH_HOLE` (always with `keep_size`).
    pub punch_hole: bool,
    /// `FALLOC_FL_ZERO_RANGE`.
    pub zero_range: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    #[default]
    Any,
    /// `XATTR_CREATE`: fail with `EEXIST` if present.
    Create,
    /// `XATTR_REPLACE`: fail with `ENODATA` if absent.
    Replace,
}

/// What `statfs` reports; counts are in units of `frsize`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub frsize: u32,
    pub namelen: u32,
}

/// An error for the caller: an errno value and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Errno {
    pub errno: i32,
    pub msg: String,
}

impl Errno {
    pub fn new(errno: i32, msg: impl Into<String>) -> Errno {
        Errno { errno, msg: msg.into() }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (errno {})", self.msg, self.errno)
    }
}

impl std::error::Error for Errno {}

impl From<crate::Error> for Errno {
    fn from(e: crate::Error) -> Errno {
        use crate::ErrorKind::*;
        let errno = match e.kind {
            Invalid => libc::EINVAL,
            NotFound => libc::ENOENT,
            Exists => libc::EEXIST,
            NoSpace => libc::ENOSPC,
            Quota => libc::EDQUOT,
            Corrupt | Io | Suspended => libc::EIO,
            Busy => libc::EBUSY,
        };
        Errno { errno, msg: e.msg }
    }
}

pub type PResult<T> = std::result::Result<T, Errno>;

/// A mounted-file-system's worth of operations. Implementations are shared
/// by the FUSE worker threads and must allow calls in parallel.
pub trait FileSystem: Send + Sync {
    /// The root directory's inode.
    fn root(&self) -> Ino;
    fn lookup(&self, parent: Ino, name: &[u8]) -> PResult<Attr>;
    fn getattr(&self, ino: Ino) -> PResult<Attr>;
    fn setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr) -> PResult<Attr>;
    fn readlink(&self, ino: Ino) -> PResult<Vec<u8>>;
    /// Creates a regular file, device, FIFO or socket; `mode` carries the
    /// `S_IFMT` bits.
    fn mknod(&self, caller: &Caller, parent: Ino, name: &[u8], mode: u32, rdev: u32) -> PResult<Attr>;
    fn mkdir(&self, caller: &Caller, parent: Ino, name: &[u8], mode: u32) -> PResult<Attr>;
    fn symlink(&self, caller: &Caller, parent: Ino, name: &[u8], target: &[u8]) -> PResult<Attr>;
    fn link(&self, caller: &Caller, ino: Ino, newparent: Ino, newname: &[u8]) -> PResult<Attr>;
    fn unlink(&self, caller: &Caller, parent: Ino, name: &[u8]) -> PResult<()>;
    fn rmdir(&self, caller: &Caller, parent: Ino, name: &[u8]) -> PResult<()>;
    fn rename(&self, caller: &Caller, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: RenameFlags) -> PResult<()>;
    /// An open file handle on `ino`: an unlinked inode lives until its last
    /// handle is released.
    fn open(&self, ino: Ino) -> PResult<()>;
    fn release(&self, ino: Ino) -> PResult<()>;
    /// Reads up to `size` bytes; short only at end of file.
    fn read(&self, ino: Ino, offset: u64, size: u32) -> PResult<Vec<u8>>;
    /// Writes all of `data`; returns its length.
    fn write(&self, caller: &Caller, ino: Ino, offset: u64, data: &[u8]) -> PResult<u32>;
    /// Makes everything written to `ino`, and every change to names, durable
    /// (the intent log's commit, or a txg sync).
    fn fsync(&self, ino: Ino, datasync: bool) -> PResult<()>;
    fn fallocate(&self, caller: &Caller, ino: Ino, offset: u64, len: u64, flags: FallocFlags) -> PResult<()>;
    /// Copies `len` bytes between files, sharing blocks where the ranges are
    /// block-aligned; returns the bytes copied.
    fn copy_file_range(&self, caller: &Caller, ino_in: Ino, off_in: u64, ino_out: Ino, off_out: u64, len: u64) -> PResult<u64>;
    /// Entries after `cookie` (0: from the start, including "." and ".."),
    /// at most `max` of them, in increasing cookie order. Cookies are below
    /// 2^63: a server may list entries of its own after the file system's
    /// with cookies above (the FUSE mount does, in a dataset's root).
    fn readdir(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<DirEntry>>;
    /// As `readdir`, with each entry's attributes (for READDIRPLUS).
    fn readdirplus(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<(DirEntry, Attr)>>;
    fn statfs(&self) -> PResult<StatFs>;
    fn setxattr(&self, caller: &Caller, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> PResult<()>;
    fn getxattr(&self, ino: Ino, name: &[u8]) -> PResult<Vec<u8>>;
    fn listxattr(&self, ino: Ino) -> PResult<Vec<Vec<u8>>>;
    fn removexattr(&self, caller: &Caller, ino: Ino, name: &[u8]) -> PResult<()>;
    /// Makes everything durable (unmount, `syncfs`).
    fn sync_all(&self) -> PResult<()>;
    /// The kernel may hold up to `bytes` of written data for the mount
    /// numbered `mount` before this file system sees it (the write-back
    /// cache; 0: that mount is gone). A file system with limited room
    /// keeps that much of it for the kernel (see `uncached_writes`).
    fn kernel_cache(&self, mount: u64, bytes: u64) {
        let _ = (mount, bytes);
    }
    /// Whether files opened for writing now should bypass the kernel's
    /// write-back cache (`FOPEN_DIRECT_IO`): the room writers have left
    /// (a quota, the pool's free space) is less than the kernel's caches
    /// may hold, so data the cache accepted might not be storable.
    /// Uncached, a write that does not fit fails at `write(2)`.
    fn uncached_writes(&self) -> bool {
        false
    }
    /// The kernel shows `size` for `ino` although write-back the file
    /// system refused (no space) did not store the data up to it: make the
    /// file at least that long, so that the size shown never exceeds the
    /// size stored. The bytes that were not stored read as zeros.
    fn keep_size(&self, ino: Ino, size: u64) -> PResult<()> {
        let _ = (ino, size);
        Ok(())
    }
    /// The dataset's `atime` and `relatime` properties changed: reads
    /// follow the new values from now on (as a remount does on OpenZFS).
    fn set_access_times(&self, atime: bool, relatime: bool) {
        let _ = (atime, relatime);
    }
    /// The dataset's `sync` property changed: changes follow it from now on.
    fn set_sync_policy(&self, policy: SyncPolicy) {
        let _ = policy;
    }
}
