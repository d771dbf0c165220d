//! tarn's FUSE glue: decodes kernel requests, calls a [`FileSystem`] (the
//! POSIX layer's contract, `tarn_engine::posix`), replies. It knows nothing
//! of pools or objects; `errno` values exist only here and in that contract.
//!
//! # Threads
//!
//! The session is served by [`MountOptions::threads`] worker threads (fuser's
//! multi-threaded loop), each reading requests from its own clone of the
//! `/dev/fuse` descriptor (`FUSE_DEV_IOC_CLONE`) and running the handler to
//! completion before reading the next. A request that blocks in the file
//! system (a cold read waiting for the disk) holds one worker; the others
//! keep serving. fsyncs, which wait for the intent log's round, are the
//! exception: past the first waiting at once they are answered from a
//! shared wait pool (`defer`), so with more fsyncers than workers they all
//! reach the log and share its rounds. The kernel keeps up to
//! `max_background` read-ahead and write-back requests in flight, so
//! sequential streams keep several workers busy. There is no queue of our
//! own: the kernel's request queue is the bound.
//!
//! # Request sizes
//!
//! `max_write` and `max_readahead` are 1 MiB (`FUSE_MAX_PAGES` = 256
//! pages): a 1 MiB `write(2)` reaches the file system as one 1 MiB WRITE,
//! so a full 1 MiB record is written in one transaction. The mount's
//! read-ahead (`read_ahead_kb` of its backing device) is raised to match,
//! so sequential reads arrive as 1 MiB READs too.
//!
//! # Caching
//!
//! - Attributes and entries are cached by the kernel for `attr_ttl` /
//!   `entry_ttl` (1 s). Every change made through this mount is seen by the
//!   kernel as it happens; only changes behind its back need invalidation:
//!   [`MountHandle::replace`] (a rollback replaced a file system),
//!   [`MountHandle::detach`] (a child dataset or snapshot went),
//!   [`MountHandle::refresh`] (one appeared or was renamed) and
//!   [`MountHandle::invalidate_all`] drop what the kernel caches of the
//!   inodes concerned. The glue counts the kernel's references per inode
//!   (lookups minus forgets) for exactly this purpose.
//! - Write-back cache (`FUSE_WRITEBACK_CACHE`, on by default). Small and
//!   unaligned writes are gathered in the page cache and reach the file
//!   system as large WRITEs (4 KiB writes arrive as 1 MiB WRITEs: 500
//!   requests for 512 MiB instead of 131072); re-reads of just-written data
//!   never leave the kernel. The mount may hold `dirty_max_bytes` (64 MiB)
//!   of written data (the kernel's FUSE default is 1 % of the system's
//!   dirty-page allowance), and the file systems are told so: a file
//!   opened for writing when its file system has less room than that
//!   (near a quota or the pool's end) bypasses the cache
//!   (`FOPEN_DIRECT_IO`), so its writes fail at `write(2)` with `EDQUOT` or
//!   `ENOSPC` rather than at `close`; a write-back refused all the same (a
//!   file opened while there was room) keeps the size the kernel shows, a
//!   hole where the data is missing, and the kernel's pages of it are
//!   dropped (see `dirty`, and `Glue::writeback_refused`). The cache is
//!   safe here because this mount is the only writer of its files (no
//!   other client changes them — the situation FUSE's writeback mode
//!   assumes). What it
//!   requires of the file system: the kernel owns a
//!   cached file's size and mtime/ctime while it has dirty pages, and sends
//!   them with SETATTR when it flushes (close, fsync) — the file system must
//!   accept them as given; the kernel may read a file opened write-only
//!   (to fill partial pages), so `read` must not check the open mode; and
//!   it applies `O_APPEND` itself. FLUSH (every close) is answered ENOSYS
//!   once, so the kernel stops sending it: the dirty pages are written back
//!   before it anyway and POSIX locks stay in the kernel. Durability is
//!   unchanged: `fsync(2)` and `O_SYNC`/`O_DSYNC` writes first write back the file's dirty pages,
//!   then send FSYNC, which calls [`FileSystem::fsync`]; unmount writes back
//!   everything before the file system's `sync_all`, and so do `sync(2)`
//!   and `syncfs(2)` on a `fuseblk` mount (see `blk`: on a plain `fuse`
//!   mount they never reach the file system). Data in the page cache that
//!   no one fsynced or synced is lost on a crash of the host, as on any
//!   local file system. `FOPEN_KEEP_CACHE` keeps a file's pages across opens.
//! - `FUSE_HANDLE_KILLPRIV_V2`: the file system, not the kernel, drops
//!   set-user-ID bits and `security.capability` when a file is written,
//!   truncated, fallocated, copied into or chowned (the `FileSystem`
//!   contract says how). Without
//!   it the kernel sends GETXATTR `security.capability` before every
//!   `write(2)`, to see whether there is a capability to remove: 4 KiB
//!   writes ran at 94–109 MB/s through a tarn mount, against 413–415 with
//!   it (`dd bs=4k`), and buffered 4 KiB random writes at 115–121 MiB/s
//!   against 911–986. Now only an inode's first write asks. A WRITE the
//!   kernel flags `FUSE_WRITE_KILL_SUIDGID` (a write(2) without
//!   `CAP_FSETID` to a set-user-ID file, sent through, not cached) drops
//!   the bits and is followed by an attribute invalidation, since the
//!   kernel would otherwise show the old mode until `attr_ttl` ran out.
//! - `default_permissions`: the kernel checks modes and ownership against
//!   the attributes; `readdirplus` always (`FUSE_DO_READDIRPLUS`), so `ls -l`
//!   costs one request per batch instead of one lookup per name.
//!
//! # What a small file costs in requests
//!
//! Creating and writing a 1 KiB file (`open(O_CREAT)`, `write`, `close`)
//! is seven requests, six of which the writer waits for: LOOKUP (the
//! name is new), GETATTR of the directory (its attributes went stale with
//! the last create, and `default_permissions` needs them), CREATE,
//! GETXATTR `security.capability` (the kernel checks for file
//! capabilities to drop on an inode's first write; with
//! `FUSE_HANDLE_KILLPRIV_V2` it marks the inode and asks no more), then at `close` the
//! write-back's WRITE and SETATTR of the times, and RELEASE (not waited
//! for). Each is a round trip through `/dev/fuse`, so the transport sets
//! the ceiling: `examples/memfs_mount.rs`, this glue over a file system
//! that does no work, creates about 7,000 such files a second with one
//! writer on the 2-core machines here and 21,000 with four (without the
//! write-back cache: 8,800 and 21,000, one request fewer). ext4 does
//! 20,000–38,000 with one writer. The same over FUSE-over-io_uring
//! (`bench/uring-ceiling`, which fuser cannot serve) reaches 13,000 and
//! 17,600: a transport of our own is the lever left.
//!
//! # Several file systems in one mount
//!
//! [`mount_spliced`] serves, besides the mounted dataset, the child
//! datasets inside it and the snapshots under `.zfs/snapshot`, each opened
//! on first access through a [`Splice`] (see `table` for the slots and
//! their locking, `listing` for the composed directories, `handle` for what
//! the daemon does to a running mount).
//!
//! # Unmount
//!
//! [`MountHandle::unmount`] unmounts (`umount2`; the kernel first writes
//! back every dirty page through the workers), waits for the workers to see
//! the connection end, then calls `sync_all` so everything written is
//! durable. It unmounts exactly the mount it made, once: the topmost mount
//! at the directory must still be the one recorded at mount time, and
//! fuser, which is handed the `/dev/fuse` descriptor rather than asked to
//! mount, never unmounts (see `mountpoint`). A busy mount fails with [`ErrorKind::Busy`] and stays mounted.
//! `force` first invalidates every inode the kernel holds, which makes it
//! write back their dirty pages, then aborts the connection (`MNT_FORCE`,
//! then `MNT_DETACH`): open files fail with `ENOTCONN`; only writes racing
//! with the unmount can be lost, as with `umount -f`. Dropping a handle
//! unmounts. Nothing here calls `sync(2)` or `syncfs(2)` on the host: a
//! loop device whose image lives on a tarn mount would make such a call
//! wait on tarn itself.
//!
//! # Mount type
//!
//! Mounts are `fuseblk` where the host allows it (root, loop devices), so
//! that the kernel sends FUSE_SYNCFS for `sync(2)` and `syncfs(2)`, which
//! the glue answers with `sync_all`; see `blk` for the measurements and the
//! loop device each mount gets, and [`MountHandle::sync_reaches_fs`].

mod blk;
mod defer;
mod dirty;
mod inode;
mod listing;
pub mod memfs;
mod handle;
pub mod mountpoint;
mod ops;
mod splice;
mod table;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, Notifier, SessionACL};
use parking_lot::Mutex;
use tarn_engine::posix::FileSystem;
use tarn_engine::{Error, ErrorKind, Result};

pub use inode::{INO_BITS, INO_MAX, MAX_FILESYSTEMS};
pub use memfs::MemFs;
pub use mountpoint::{MountId, MountPoint};
pub use splice::{Opened, Splice};
pub use table::Kind;

/// How a file system is mounted. `Default` is what the daemon uses.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The file system's name (`tank`, `tank/home`): the source in
    /// /proc/mounts of a plain `fuse` mount, the loop device's backing file
    /// name (`tarn:tank`) of a `fuseblk` one.
    pub fsname: String,
    /// Worker threads serving requests in parallel (1 … 64).
    pub threads: usize,
    /// Largest WRITE (and read-ahead) request, bytes (4 KiB … 16 MiB).
    pub max_write: u32,
    /// Read-ahead and write-back requests the kernel keeps in flight.
    pub max_background: u16,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
    /// FUSE_WRITEBACK_CACHE; see the crate documentation.
    pub writeback_cache: bool,
    /// Bytes of written data this mount's page cache may hold (the kernel's
    /// FUSE default is 1 % of the system's dirty-page allowance; see
    /// `tune_backing_device` and `dirty`). Kernels before 6.2 take a
    /// percentage instead: `dirty_share_pct`.
    pub dirty_max_bytes: u64,
    pub dirty_share_pct: u8,
    pub read_only: bool,
    /// Let users other than the mounting one in (the daemon runs as root).
    pub allow_other: bool,
    /// Mount as `fuseblk` where possible (root, loop devices), so that
    /// `sync(2)` and `syncfs(2)` reach the file system (see `blk`).
    pub fuseblk: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "tarn".into(),
            threads: 4,
            max_write: 1 << 20,
            max_background: 64,
            attr_ttl: Duration::from_secs(1),
            entry_ttl: Duration::from_secs(1),
            writeback_cache: true,
            dirty_max_bytes: 64 << 20,
            dirty_share_pct: 20,
            read_only: false,
            allow_other: false,
            fuseblk: true,
        }
    }
}

/// Why FUSE cannot be used here, or `None` if `/dev/fuse` is usable.
pub fn unavailable() -> Option<String> {
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => None,
        Err(e) => Some(format!("/dev/fuse cannot be opened ({e}); FUSE mounts are unavailable")),
    }
}

/// A mounted file system. Dropping it unmounts (forcing if busy); after a
/// successful `unmount` the handle is inert.
pub struct MountHandle {
    dir: PathBuf,
    /// The mount made (see `mountpoint`): what unmount checks is still
    /// the topmost mount at `dir` before it unmounts. `None` where the
    /// kernel reports no mount ids.
    id: Option<MountId>,
    table: Arc<table::FsTable>,
    known: Arc<inode::Known>,
    notifier: Notifier,
    session: Mutex<Option<JoinHandle<std::io::Result<()>>>>,
    /// The loop device of a `fuseblk` mount (`sync(2)`/`syncfs(2)` reach
    /// `sync_all`); `None` for a plain `fuse` mount.
    blk_device: Option<PathBuf>,
    /// This mount's number for `FileSystem::kernel_cache`.
    cache_id: u64,
}

/// A file system a mount serves (slot 0, or one it spliced in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// Dataset or snapshot name (slot 0: the mount's `fsname`).
    pub name: String,
    pub kind: Kind,
    /// Where its root is.
    pub path: PathBuf,
    /// Opened (accessed since it was registered).
    pub open: bool,
}

/// Mounts `fs` on `dir` and starts serving it.
pub fn mount(fs: Arc<dyn FileSystem>, dir: &Path, opts: &MountOptions) -> Result<MountHandle> {
    mount_on(fs, MountPoint::open(dir)?, opts, None)
}

/// Mounts `fs`, the dataset named `opts.fsname`, on `dir` with `splice`
/// serving, inside it, its `.zfs/snapshot` directory and the child
/// datasets mounted in it (see `table`). A read-only mount (a snapshot) has
/// neither.
pub fn mount_spliced(fs: Arc<dyn FileSystem>, dir: &Path, opts: &MountOptions, splice: Arc<dyn Splice>) -> Result<MountHandle> {
    mount_on(fs, MountPoint::open(dir)?, opts, Some(splice))
}

/// Mounts `fs` on the directory `at` (opened, and checked, by the caller),
/// with `splice` serving what is inside it if given.
pub fn mount_on(fs: Arc<dyn FileSystem>, at: MountPoint, opts: &MountOptions, splice: Option<Arc<dyn Splice>>) -> Result<MountHandle> {
    let dir = at.path().to_path_buf();
    if let Some(why) = unavailable() {
        return Err(Error::new(ErrorKind::Invalid, format!("cannot mount on '{}': {}", dir.display(), why)));
    }
    if !(1..=64).contains(&opts.threads) {
        return Err(Error::invalid(format!("FUSE worker threads must be 1 … 64, not {}", opts.threads)));
    }
    if !(1..=100).contains(&opts.dirty_share_pct) {
        return Err(Error::invalid(format!("dirty_share_pct must be 1 … 100, not {}", opts.dirty_share_pct)));
    }
    if opts.dirty_max_bytes < 1 << 20 {
        return Err(Error::invalid(format!("dirty_max_bytes must be at least 1M, not {}", opts.dirty_max_bytes)));
    }
    if !(4096..=16 << 20).contains(&opts.max_write) {
        return Err(Error::invalid(format!("max_write must be 4K … 16M, not {}", opts.max_write)));
    }
    let kind = if opts.read_only { Kind::Snapshot } else { Kind::Dataset };
    let table = Arc::new(table::FsTable::new(fs, &opts.fsname, kind, splice));
    let known = Arc::new(inode::Known::default());
    let notifier_slot = Arc::new(std::sync::OnceLock::new());
    let glue = ops::Glue { table: table.clone(), known: known.clone(), opts: opts.clone(), dirs: Default::default(), notifier: notifier_slot.clone(), inline_fsyncs: std::sync::atomic::AtomicUsize::new(0) };
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName(opts.fsname.clone()), MountOption::Subtype("tarn".into()), MountOption::DefaultPermissions];
    if opts.read_only {
        config.mount_options.push(MountOption::RO);
    }
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(opts.threads);
    config.clone_fd = true;
    let cannot = |e: std::io::Error| Error::io(format!("cannot mount '{}' on '{}'", opts.fsname, dir.display()), e);
    let km = mountpoint::KernelMount { fsname: &opts.fsname, read_only: opts.read_only, allow_other: opts.allow_other, fuseblk: opts.fuseblk };
    let (session, id, blk_device) = match mountpoint::mount_fuse(&at, &km)? {
        Some(made) => {
            let id = mountpoint::top_mount(&dir).ok();
            let acl = config.acl;
            match fuser::Session::from_fd(glue, made.fuse, acl, config) {
                Ok(s) => (s, id, made.blk_device),
                Err(e) => {
                    // The mount is there with no one to serve it.
                    if let Err(u) = mountpoint::unmount(&dir, id, true) {
                        eprintln!("tarn: cannot unmount '{}' after a failed start: {}", dir.display(), u);
                    }
                    return Err(cannot(e));
                }
            }
        }
        // Unprivileged: fuser mounts through fusermount3 (a plain `fuse`
        // mount, which sync(2) does not reach).
        None => {
            let s = fuser::Session::new(glue, &dir, &config).map_err(cannot)?;
            (s, mountpoint::top_mount(&dir).ok(), None)
        }
    };
    drop(at);
    let notifier = session.notifier();
    let _ = notifier_slot.set(notifier.clone());
    let thread = std::thread::Builder::new()
        .name("tarn-fuse".into())
        .spawn(move || session.run())
        .map_err(|e| Error::io(format!("cannot start the FUSE session for '{}'", dir.display()), e))?;
    let cache_id = NEXT_MOUNT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let handle = MountHandle { dir: dir.clone(), id, table, known, notifier, session: Mutex::new(Some(thread)), blk_device, cache_id };
    if let Err(e) = tune_backing_device(&dir, opts) {
        // Best effort (root only): the mount works, with the kernel's defaults.
        eprintln!("tarn: cannot tune the FUSE device of '{}' ({}); using the kernel's read-ahead and dirty limits", dir.display(), e);
    }
    if opts.writeback_cache && !opts.read_only {
        // What the kernel may hold of this mount's writes: the file
        // systems keep that much room for it (`dirty`).
        let bound = dirty::bdi_of(&dir).map_or(u64::MAX, |bdi| dirty::bound(&bdi));
        handle.table.main().kernel_cache(cache_id, bound);
    }
    Ok(handle)
}

/// Numbers mounts for `FileSystem::kernel_cache`.
static NEXT_MOUNT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The kernel gives a FUSE mount's backing device (bdi) two limits that no
/// mount option reaches, only sysfs (root only):
/// - read-ahead starts at the default 128 KiB, whatever `max_readahead`
///   says: `read_ahead_kb` = `max_write` lets sequential reads arrive as
///   1 MiB READs (measured with MemFs: 128 KiB READs ~660 MiB/s, 1 MiB
///   READs ~1.8 GiB/s);
/// - write-back may keep only 1 % of the system's dirty-page allowance
///   (`max_ratio`, with `strict_limit`), a guard against untrusted FUSE
///   servers pinning dirty memory. The daemon is root and tarn bounds its
///   own dirty data, so the mount gets [`MountOptions::dirty_max_bytes`]
///   (64 MiB; kernels before 6.2: `dirty_share_pct`, 20 %). Measured
///   through tarn on a 24 GiB host, 1 MiB and 4 KiB writes ran as fast with
///   16–64 MiB as with 20 % (950 MiB); the bytes bound what the file
///   systems must keep room for (`dirty`).
fn tune_backing_device(dir: &Path, opts: &MountOptions) -> std::io::Result<()> {
    let bdi = dirty::bdi_of(dir)?;
    std::fs::write(format!("{}/read_ahead_kb", bdi), (opts.max_write / 1024).to_string())?;
    if opts.writeback_cache {
        dirty::set_share(&bdi, opts.dirty_max_bytes, opts.dirty_share_pct)?;
    }
    Ok(())
}

/// How long unmount waits for the workers to see the connection end.
const SESSION_END_WAIT: Duration = Duration::from_secs(30);

impl MountHandle {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The mount's identity, recorded when it was made (see `mountpoint`).
    pub fn id(&self) -> Option<MountId> {
        self.id
    }

    /// The mounted file system.
    pub fn filesystem(&self) -> Arc<dyn FileSystem> {
        self.table.main()
    }

    /// Whether the mount is still served: not unmounted by this handle, and
    /// its session has not ended (as it does if someone else unmounted it).
    pub fn is_mounted(&self) -> bool {
        self.session.lock().as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Whether `sync(2)` and `syncfs(2)` on this mount reach the file
    /// system's `sync_all` (a `fuseblk` mount; see `blk`).
    pub fn sync_reaches_fs(&self) -> bool {
        self.blk_device.is_some()
    }

    /// The loop device a `fuseblk` mount is mounted from (its source in
    /// /proc/mounts).
    pub fn block_device(&self) -> Option<&Path> {
        self.blk_device.as_deref()
    }

    /// Inodes the kernel currently holds references to.
    pub fn kernel_inodes(&self) -> usize {
        self.known.len()
    }

    /// Drops every name, attribute and cached page the kernel holds for
    /// this mount: for a change the kernel did not see. Dirty pages are
    /// written back to the file system first (the kernel launders them).
    /// Returns how many inodes were invalidated.
    pub fn invalidate_all(&self) -> usize {
        self.invalidate_where(|_| true) + 1
    }

    /// Unmounts cleanly: the kernel writes back its dirty pages, the session
    /// ends, and `sync_all` makes everything durable. A busy mount is an
    /// [`ErrorKind::Busy`] error and stays mounted.
    pub fn unmount(&self) -> Result<()> {
        self.unmount_inner(false)
    }

    /// Unmounts even if busy: writes back the kernel's dirty pages, then
    /// aborts the connection and detaches the mount (open files then fail).
    pub fn unmount_force(&self) -> Result<()> {
        self.unmount_inner(true)
    }

    fn unmount_inner(&self, force: bool) -> Result<()> {
        let Some(thread) = self.session.lock().take() else {
            return Ok(());
        };
        // A session that already ended was unmounted by someone else
        // (`umount DIR`): only the sync remains to do.
        if !thread.is_finished() {
            if force {
                // Aborting the connection drops the kernel's dirty pages:
                // invalidating every inode first makes the kernel write
                // them back (it launders dirty pages it invalidates),
                // without syncfs(2).
                self.invalidate_all();
            }
            if let Err(e) = mountpoint::unmount(&self.dir, self.id, force) {
                *self.session.lock() = Some(thread);
                return Err(e);
            }
        }
        let deadline = Instant::now() + SESSION_END_WAIT;
        while !thread.is_finished() {
            if Instant::now() > deadline {
                return Err(Error::new(ErrorKind::Busy, format!("'{}': the FUSE session did not end after unmount", self.dir.display())));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Ok(Err(e)) = thread.join() {
            eprintln!("tarn: FUSE session on '{}' ended with an error: {}", self.dir.display(), e);
        }
        // Requests answered from the wait pool may still be running: the
        // file systems stay open until they are done.
        if !self.table.deferred.wait_none(SESSION_END_WAIT) {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("'{}': {} fsync request(s) still running after unmount", self.dir.display(), self.table.deferred.count()),
            ));
        }
        // The session is over: the kernel holds nothing more for it.
        self.table.main().kernel_cache(self.cache_id, 0);
        let synced = self.table.sync_all().map_err(|e| Error::new(ErrorKind::Io, format!("syncing '{}' after unmount: {}", self.dir.display(), e)));
        if let Some(sp) = &self.table.splice {
            self.table.live().iter().filter(|s| s.index != 0).for_each(|s| sp.closed(&s.name));
        }
        synced
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.session.lock().is_none() {
            return;
        }
        if let Err(e) = self.unmount_inner(false) {
            if e.kind == ErrorKind::Busy {
                if let Err(e) = self.unmount_inner(true) {
                    eprintln!("tarn: forced unmount of '{}' failed: {}", self.dir.display(), e);
                }
            } else {
                eprintln!("tarn: unmounting '{}': {}", self.dir.display(), e);
            }
        }
    }
}
