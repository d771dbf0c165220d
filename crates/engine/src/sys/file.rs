//! `FileDevice`: a `BlockDevice` backed by a regular file or a block device.
//!
//! Design and why:
//! * **O_DIRECT when possible.** The pool does its own caching (ARC-style) and
//!   its own write ordering; the page cache would double-buffer data and make
//!   `flush` slower and less predictable. Opening tries `O_DIRECT` first and
//!   then *probes* it with a tiny read, because some file systems reject the
//!   flag at open (`EINVAL`, e.g. old tmpfs) and others only at I/O time. The
//!   probe also finds the required alignment (512 or 4096 B for memory address,
//!   offset and length). If direct I/O is unusable, or the file size is not a
//!   multiple of that alignment, the device silently falls back to buffered I/O;
//!   `is_direct()` reports which mode is in use.
//! * **Correctness before zero-copy.** Direct I/O with a misaligned buffer would
//!   fail with `EINVAL`, so misaligned requests are bounced through an
//!   `AlignedBuf` (counted by `bounce_count()`; callers using `AlignedBuf` never
//!   bounce). When the alignment is 4096 and a 512-byte-aligned write covers a
//!   block only partly, the block is read, patched and written back; an
//!   `RwLock` makes that read-modify-write exclusive against other writes so a
//!   concurrent write to a neighbouring sector of the same block is never undone.
//! * **Full transfers.** `pread`/`pwrite`/`preadv`/`pwritev` may be interrupted
//!   (`EINTR`) or transfer less than asked; every call loops until done, and the
//!   vectored loop resumes at the exact iovec and byte where the kernel stopped.
//!   At most `IOV_MAX` (1024) iovecs go into one system call.
//! * **Exclusive ownership.** `lock_exclusive` takes a POSIX `fcntl` write lock
//!   on the whole file so another process (another tarn daemon) cannot import the
//!   same device. POSIX locks belong to the *process*, so they neither conflict
//!   within one process nor survive the closing of *any* descriptor of the file
//!   by that process. A process-global registry keyed by `(st_dev, st_ino)`
//!   therefore (a) refuses a second lock in the same process and (b) "parks" the
//!   descriptor of any other `FileDevice` of a locked file when it is dropped,
//!   closing it only when the lock holder goes away — otherwise dropping the
//!   loser of a lock race would silently release the winner's lock.
//!   The registry also remembers what holds each lock ("part of active
//!   pool 'tank'", set by the pool once it knows its name), so a second use
//!   of a device in this process is refused with that reason
//!   ([`holder_in_process`]), whatever name the device is given.
//! * **Block devices are opened exclusively** (`O_EXCL`) when opened for
//!   writing, as OpenZFS's vdev_disk does: while a pool uses a disk, the
//!   kernel refuses it to mkfs, mount, swapon and other pools, and a disk
//!   they hold is refused to tarn ("in use": `EBUSY`).
//! * **Private images.** A device file tarn creates is mode 0600: it holds
//!   every file's bytes, which the pool's permissions guard only through
//!   the mount.
//! * **Health.** A truncated image file keeps accepting writes (they grow it
//!   again, with zeros where the data was) and an unlinked one accepts them
//!   until its last descriptor closes: no write fails. `health()` looks at
//!   the open descriptor (`fstat`: link count, size; a block device's size)
//!   and, for a block device, at its path (the node goes when the device is
//!   removed); the pool asks before every uberblock and after every error.
//!   A regular file renamed away keeps its data and stays online.
//! * Errors always name the path and the attempted operation.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::buf::AlignedBuf;
use super::device::{check_io, total_len, BlockDevice, Health, SECTOR_SIZE};
use super::inuse::DeviceId;

/// Most iovecs Linux accepts in one `preadv`/`pwritev` call.
const IOV_MAX: usize = 1024;
/// Largest piece of a request bounced at a time, so a huge misaligned request
/// does not allocate a huge temporary buffer.
const BOUNCE_CHUNK: usize = 1 << 20;
/// Alignment that always satisfies O_DIRECT on Linux (4Kn devices).
const MAX_DIRECT_ALIGN: u64 = 4096;

/// `_IOR(0x12, 114, u64)`: the byte size of a block device. The direction bits
/// of `_IOR` differ on a few architectures, hence the two encodings.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: u32 = 0x4008_1272;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: u32 = 0x8008_1272;

/// Mode of the device files tarn creates: owner only.
const IMAGE_MODE: u32 = 0o600;

/// A file locked by a `FileDevice` of this process.
struct Held {
    /// What holds it, completing "'PATH' is …" (e.g. "part of active pool
    /// 'tank'"); `None` until the holder says.
    owner: Option<String>,
    id: DeviceId,
    /// Descriptors of other devices of the same file whose closing is
    /// deferred until the holder is dropped (closing them would drop the lock).
    parked: Vec<File>,
}

/// Files locked by a `FileDevice` of this process, keyed by `(st_dev, st_ino)`.
static LOCKED_FILES: Mutex<BTreeMap<(u64, u64), Held>> = Mutex::new(BTreeMap::new());

/// What in this process holds the device `id` (see `FileDevice::set_lock_owner`),
/// completing "'PATH' is …"; `None` if no `FileDevice` of it is locked. A
/// block device is found under any of its device nodes.
pub fn holder_in_process(id: DeviceId) -> Option<String> {
    let registry = LOCKED_FILES.lock();
    let held = registry.values().find(|h| h.id == id)?;
    Some(held.owner.clone().unwrap_or_else(|| "already open in this process".to_string()))
}

/// A regular file or block device used as a pool disk.
pub struct FileDevice {
    path: PathBuf,
    /// `path` rendered once, for error messages and `name()`.
    name: String,
    /// Descriptor of `file`, cached so the I/O paths never look at the Option.
    fd: RawFd,
    /// The owned descriptor; only `Drop` takes it out (to close or park it).
    file: Option<File>,
    size: u64,
    direct: bool,
    /// Required alignment of memory address, offset and length (512 when buffered).
    align: u64,
    /// `(st_dev, st_ino)`: identity of the file for the lock registry.
    key: (u64, u64),
    /// Identity of the file or (for a block device) of the device.
    id: DeviceId,
    locked: AtomicBool,
    bounces: AtomicU64,
    /// Shared by plain writes, exclusive for read-modify-write of a partial block.
    rmw: RwLock<()>,
}

impl FileDevice {
    /// Creates a new sparse file of `size_bytes` (a multiple of 512), mode
    /// 0600 whatever the umask, and opens it. Fails with `AlreadyExists` if
    /// anything exists at `path`.
    pub fn create(path: impl AsRef<Path>, size_bytes: u64) -> io::Result<FileDevice> {
        let path = path.as_ref();
        if !size_bytes.is_multiple_of(SECTOR_SIZE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: device size {size_bytes} is not a multiple of {SECTOR_SIZE}",
                    path.display()
                ),
            ));
        }
        // Created without O_DIRECT: a file system that rejects O_DIRECT may do
        // so only after creating the file, which would break create_new semantics.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(IMAGE_MODE)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => io::Error::new(
                    e.kind(),
                    format!(
                        "{}: cannot create device file: it already exists (open it instead)",
                        path.display()
                    ),
                ),
                _ => annotate(path, "create device file", e),
            })?;
        let sized = file.set_len(size_bytes);
        drop(file);
        let opened = sized
            .map_err(|e| annotate(path, &format!("set size to {size_bytes}"), e))
            .and_then(|()| FileDevice::open(path));
        if opened.is_err() {
            // Best effort: do not leave a half-made device file behind.
            let _ = std::fs::remove_file(path);
        }
        opened
    }

    /// Opens an existing regular file or block device read-write, using
    /// O_DIRECT when the file system supports it.
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        FileDevice::open_impl(path.as_ref(), true, true)
    }

    /// Like `open`, but never uses O_DIRECT (page-cache I/O).
    pub fn open_buffered(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        FileDevice::open_impl(path.as_ref(), false, true)
    }

    /// Opens for reading only (writes fail): for looking at pools without
    /// touching them, and for probing devices during `import`. Refuses
    /// anything but regular files and block devices before opening, so a
    /// scan of /dev never opens a character device (a watchdog, a tape).
    pub fn open_read_only(path: impl AsRef<Path>) -> io::Result<FileDevice> {
        let path = path.as_ref();
        let ft = std::fs::metadata(path).map_err(|e| annotate(path, "stat", e))?.file_type();
        if !(ft.is_file() || ft.is_block_device()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a regular file or block device", path.display()),
            ));
        }
        FileDevice::open_impl(path, true, false)
    }

    fn open_impl(path: &Path, try_direct: bool, writable: bool) -> io::Result<FileDevice> {
        // Exclusive for writing a block device; checked before opening so a
        // regular file never gets O_EXCL (meaningless without O_CREAT).
        let exclusive = writable && std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
        let (mut file, mut direct) = open_file(path, try_direct, writable, exclusive)?;
        let meta = file.metadata().map_err(|e| annotate(path, "stat", e))?;
        let raw_size = if meta.file_type().is_block_device() {
            block_device_size(file.as_raw_fd()).map_err(|e| annotate(path, "BLKGETSIZE64", e))?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a regular file or block device", path.display()),
            ));
        };
        // A trailing partial sector is unaddressable under the sector contract.
        let size = raw_size - raw_size % SECTOR_SIZE;
        let mut align = SECTOR_SIZE;
        if direct {
            match probe_direct_align(file.as_raw_fd()) {
                Some(a) if size.is_multiple_of(a) => align = a,
                // Direct I/O unusable here (or the tail is unaddressable with
                // it): reopen through the page cache.
                _ => {
                    // The exclusive claim belongs to the descriptor: let it
                    // go before reopening.
                    drop(file);
                    (file, direct) = open_file(path, false, writable, exclusive)?;
                }
            }
        }
        Ok(FileDevice {
            name: path.display().to_string(),
            path: path.to_path_buf(),
            fd: file.as_raw_fd(),
            file: Some(file),
            size,
            direct,
            align,
            key: (meta.dev(), meta.ino()),
            id: DeviceId::of(&meta).expect("a regular file or block device, checked above"),
            locked: AtomicBool::new(false),
            bounces: AtomicU64::new(0),
            rmw: RwLock::new(()),
        })
    }

    /// The path this device was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True if I/O bypasses the page cache (O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Alignment (bytes) of memory, offset and length that avoids bouncing.
    pub fn direct_alignment(&self) -> u64 {
        self.align
    }

    /// Number of requests (or request pieces) copied through a bounce buffer
    /// because they did not meet the O_DIRECT alignment.
    pub fn bounce_count(&self) -> u64 {
        self.bounces.load(Ordering::Relaxed)
    }

    /// True if the address, length and offset can go to the kernel as they are.
    fn is_aligned(&self, addr: usize, len: usize, offset: u64) -> bool {
        let a = self.align;
        !self.direct || (addr as u64 | len as u64 | offset).is_multiple_of(a)
    }

    /// `[lo, hi)`: the smallest aligned range covering `want` bytes at `pos`.
    fn window(&self, pos: u64, want: usize) -> (u64, u64) {
        let a = self.align;
        (pos / a * a, (pos + want as u64).div_ceil(a) * a)
    }

    fn io_error(&self, op: &str, len: usize, offset: u64, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("{}: {op} of {len} bytes at offset {offset}: {e}", self.name),
        )
    }

    fn bounce_buffer(&self, len: usize) -> AlignedBuf {
        let a = self.align as usize;
        AlignedBuf::zeroed(len.min(BOUNCE_CHUNK).div_ceil(a) * a + 2 * a)
    }

    /// Reads a misaligned request through an aligned temporary, chunk by chunk.
    fn bounce_read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.bounces.fetch_add(1, Ordering::Relaxed);
        let mut tmp = self.bounce_buffer(buf.len());
        let mut done = 0;
        while done < buf.len() {
            let pos = offset + done as u64;
            let want = (buf.len() - done).min(BOUNCE_CHUNK);
            let (lo, hi) = self.window(pos, want);
            pread_full(self.fd, &mut tmp[..(hi - lo) as usize], lo)?;
            let skip = (pos - lo) as usize;
            buf[done..done + want].copy_from_slice(&tmp[skip..skip + want]);
            done += want;
        }
        Ok(())
    }

    /// Writes a misaligned request through an aligned temporary, chunk by
    /// chunk, patching partially covered blocks (read-modify-write).
    fn bounce_write(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.bounces.fetch_add(1, Ordering::Relaxed);
        let mut tmp = self.bounce_buffer(buf.len());
        let block = self.align as usize;
        let mut done = 0;
        while done < buf.len() {
            let pos = offset + done as u64;
            let want = (buf.len() - done).min(BOUNCE_CHUNK);
            let chunk = &buf[done..done + want];
            let (lo, hi) = self.window(pos, want);
            let span = (hi - lo) as usize;
            let head_partial = lo != pos;
            let tail_partial = hi != pos + want as u64;
            if head_partial || tail_partial {
                // Exclusive: no other write may land in these blocks between
                // our read and our write-back, or we would undo it.
                let _rmw = self.rmw.write();
                if head_partial {
                    pread_full(self.fd, &mut tmp[..block], lo)?;
                }
                // If the range is one block and the head read covered it, skip.
                if tail_partial && (span > block || !head_partial) {
                    pread_full(self.fd, &mut tmp[span - block..span], hi - block as u64)?;
                }
                let skip = (pos - lo) as usize;
                tmp[skip..skip + want].copy_from_slice(chunk);
                pwrite_full(self.fd, &tmp[..span], lo)?;
            } else {
                let _shared = self.rmw.read();
                tmp[..want].copy_from_slice(chunk);
                pwrite_full(self.fd, &tmp[..want], pos)?;
            }
            done += want;
        }
        Ok(())
    }

    /// Takes an exclusive lock on the whole device so no other process (and
    /// no other `FileDevice` in this process) can use it. Idempotent. The lock
    /// is released when this `FileDevice` is dropped.
    pub fn lock_exclusive(&self) -> Result<(), LockError> {
        // Held across the fcntl so two threads cannot both win (POSIX locks
        // never conflict within one process).
        let mut registry = LOCKED_FILES.lock();
        if self.locked.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(held) = registry.get(&self.key) {
            let desc = match &held.owner {
                Some(owner) => format!("it is {owner}"),
                None => "already open in this process".to_string(),
            };
            return Err(self.lock_error(i32::try_from(std::process::id()).ok(), desc, None));
        }
        match set_whole_file_write_lock(self.fd) {
            Ok(()) => {
                registry.insert(self.key, Held { owner: None, id: self.id, parked: Vec::new() });
                self.locked.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                let (pid, desc) = describe_lock_holder(self.fd);
                Err(self.lock_error(pid, desc, None))
            }
            Err(e) => Err(self.lock_error(None, format!("fcntl(F_SETLK) failed: {e}"), Some(e))),
        }
    }

    /// Records what holds this device's lock ("part of active pool
    /// 'tank'"), for [`holder_in_process`] and lock conflicts in this
    /// process. Does nothing unless this device holds the lock.
    pub fn set_lock_owner(&self, owner: impl Into<String>) {
        if !self.locked.load(Ordering::Acquire) {
            return;
        }
        if let Some(held) = LOCKED_FILES.lock().get_mut(&self.key) {
            held.owner = Some(owner.into());
        }
    }

    /// The identity of the file or block device (for telling two names of
    /// one device apart).
    pub fn id(&self) -> DeviceId {
        self.id
    }

    /// True if this device holds the exclusive lock.
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Acquire)
    }

    fn lock_error(&self, pid: Option<i32>, desc: String, e: Option<io::Error>) -> LockError {
        LockError {
            path: self.path.clone(),
            holder_pid: pid,
            holder_desc: desc,
            io_error: e,
        }
    }

    /// Fallback for vectored reads that are not direct-I/O aligned: one
    /// aligned read, then scatter.
    fn readv_bounced(&self, bufs: &mut [&mut [u8]], offset: u64, len: usize) -> io::Result<()> {
        let mut tmp = AlignedBuf::zeroed(len);
        self.read_at(&mut tmp, offset)?;
        let mut pos = 0;
        for buf in bufs.iter_mut() {
            buf.copy_from_slice(&tmp[pos..pos + buf.len()]);
            pos += buf.len();
        }
        Ok(())
    }

    /// Fallback for vectored writes that are not direct-I/O aligned: gather,
    /// then one aligned write.
    fn writev_bounced(&self, bufs: &[&[u8]], offset: u64, len: usize) -> io::Result<()> {
        let mut tmp = AlignedBuf::zeroed(len);
        let mut pos = 0;
        for buf in bufs {
            tmp[pos..pos + buf.len()].copy_from_slice(buf);
            pos += buf.len();
        }
        self.write_at(&tmp, offset)
    }
}

impl BlockDevice for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len();
        check_io(&self.name, "read", self.size, offset, len)?;
        let result = if self.is_aligned(buf.as_ptr() as usize, len, offset) {
            pread_full(self.fd, buf, offset)
        } else {
            self.bounce_read(buf, offset)
        };
        result.map_err(|e| self.io_error("read", len, offset, e))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let len = buf.len();
        check_io(&self.name, "write", self.size, offset, len)?;
        let result = if self.is_aligned(buf.as_ptr() as usize, len, offset) {
            let _shared = self.rmw.read();
            pwrite_full(self.fd, buf, offset)
        } else {
            self.bounce_write(buf, offset)
        };
        result.map_err(|e| self.io_error("write", len, offset, e))
    }

    fn readv_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = total_len(bufs);
        check_io(&self.name, "vectored read", self.size, offset, len)?;
        let aligned = bufs
            .iter()
            .all(|b| self.is_aligned(b.as_ptr() as usize, b.len(), offset));
        if !aligned {
            self.bounces.fetch_add(1, Ordering::Relaxed);
            return self.readv_bounced(bufs, offset, len);
        }
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let fd = self.fd;
        vectored_full(
            &mut iovs,
            offset,
            io::ErrorKind::UnexpectedEof,
            |iov, off| {
                // SAFETY: every iovec points into a distinct `&mut [u8]` of `bufs`
                // (advanced only within its length), all mutably borrowed until we
                // return; the kernel writes at most `iov_len` bytes into each.
                unsafe { libc::preadv(fd, iov.as_ptr(), iov.len() as libc::c_int, off) }
            },
        )
        .map_err(|e| self.io_error("vectored read", len, offset, e))
    }

    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = total_len(bufs);
        check_io(&self.name, "vectored write", self.size, offset, len)?;
        let aligned = bufs
            .iter()
            .all(|b| self.is_aligned(b.as_ptr() as usize, b.len(), offset));
        if !aligned {
            self.bounces.fetch_add(1, Ordering::Relaxed);
            return self.writev_bounced(bufs, offset, len);
        }
        let mut iovs: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| libc::iovec {
                // pwritev only reads through iov_base; the *mut is the C type.
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            })
            .collect();
        let fd = self.fd;
        let _shared = self.rmw.read();
        vectored_full(&mut iovs, offset, io::ErrorKind::WriteZero, |iov, off| {
            // SAFETY: every iovec points into a `&[u8]` of `bufs`, borrowed
            // until we return; pwritev only reads `iov_len` bytes from each.
            unsafe { libc::pwritev(fd, iov.as_ptr(), iov.len() as libc::c_int, off) }
        })
        .map_err(|e| self.io_error("vectored write", len, offset, e))
    }

    fn flush(&self) -> io::Result<()> {
        loop {
            // SAFETY: fdatasync on a descriptor we own.
            if unsafe { libc::fdatasync(self.fd) } == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            // Only EINTR is retried: after a real fsync error the kernel may
            // have dropped the dirty data, so a retry could falsely succeed.
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(annotate(&self.path, "flush (fdatasync)", e));
            }
        }
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn health(&self) -> Health {
        // SAFETY: fstat writes one `stat` into the zeroed struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(self.fd, &mut st) } != 0 {
            return Health::Faulted(format!("cannot fstat the open device: {}", io::Error::last_os_error()));
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => self.file_health(&st),
            libc::S_IFBLK => self.block_health(&st),
            _ => Health::Online,
        }
    }
}

/// `n` bytes for messages: exact, and in MiB when that is shorter to read.
fn bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{} bytes ({:.1} MiB)", n, n as f64 / (1 << 20) as f64)
    } else {
        format!("{} bytes", n)
    }
}

impl FileDevice {
    fn file_health(&self, st: &libc::stat) -> Health {
        if st.st_nlink == 0 {
            return Health::Removed("the file was deleted while the pool was open; its data goes when the pool closes".into());
        }
        let now = st.st_size.max(0) as u64;
        if now < self.size {
            return Health::Faulted(format!("the file shrank from {} to {} while the pool was open (truncated)", bytes(self.size), bytes(now)));
        }
        Health::Online
    }

    fn block_health(&self, st: &libc::stat) -> Health {
        match std::fs::metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Health::Removed("the block device was removed (its node is gone)".into()),
            Ok(m) if m.rdev() != st.st_rdev => return Health::Removed(format!("'{}' now names another device", self.name)),
            _ => {}
        }
        match block_device_size(self.fd) {
            Err(e) => Health::Faulted(format!("cannot read the block device's size: {e}")),
            Ok(now) if now < self.size => Health::Faulted(format!("the block device shrank from {} to {}", bytes(self.size), bytes(now))),
            Ok(_) => Health::Online,
        }
    }
}

impl Drop for FileDevice {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else { return };
        let mut registry = LOCKED_FILES.lock();
        if self.locked.load(Ordering::Acquire) {
            // Our lock goes away with our descriptor, so the parked
            // descriptors of the same file can now be closed too.
            drop(registry.remove(&self.key));
            drop(file);
        } else if let Some(held) = registry.get_mut(&self.key) {
            // Closing this descriptor would release the holder's POSIX lock.
            held.parked.push(file);
        }
    }
}

impl fmt::Debug for FileDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileDevice")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("direct", &self.direct)
            .field("align", &self.align)
            .field("locked", &self.is_locked())
            .finish()
    }
}

/// Why `lock_exclusive` failed, and who holds the lock if known.
#[derive(Debug)]
pub struct LockError {
    /// The device that could not be locked.
    pub path: PathBuf,
    /// Process holding the lock, when the kernel reported one.
    pub holder_pid: Option<i32>,
    /// E.g. "held by process 1234 (tarn daemon)" or "already open in this process".
    pub holder_desc: String,
    /// The underlying error when locking failed for another reason than contention.
    pub io_error: Option<io::Error>,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: cannot take exclusive lock: {}",
            self.path.display(),
            self.holder_desc
        )
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io_error
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<LockError> for io::Error {
    fn from(e: LockError) -> io::Error {
        io::Error::new(io::ErrorKind::ResourceBusy, e)
    }
}

fn annotate(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

/// Opens read-write, with O_DIRECT if asked and accepted, and O_EXCL if
/// `exclusive` (block devices). Returns whether O_DIRECT is set.
fn open_file(path: &Path, direct: bool, writable: bool, exclusive: bool) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.read(true).write(writable);
    let excl = if exclusive { libc::O_EXCL } else { 0 };
    if direct {
        match options.clone().custom_flags(libc::O_DIRECT | excl).open(path) {
            Ok(file) => return Ok((file, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(open_error(path, e)),
        }
    }
    let file = options.custom_flags(excl).open(path).map_err(|e| open_error(path, e))?;
    Ok((file, false))
}

fn open_error(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::EBUSY) {
        // Only an exclusive open of a block device fails this way.
        let why = "in use: the kernel refuses to open it exclusively (it is mounted, swap, or held by another program or pool)";
        return io::Error::new(io::ErrorKind::ResourceBusy, format!("{}: {why}", path.display()));
    }
    annotate(path, "open", e)
}

/// Finds the alignment O_DIRECT needs on `fd` by trying a 512-byte read into a
/// 512-aligned (not 4096-aligned) address, then a 4096-byte read. `None` if
/// neither works. Short reads are fine: only `EINVAL` means misaligned.
fn probe_direct_align(fd: RawFd) -> Option<u64> {
    let mut buf = AlignedBuf::zeroed(2 * MAX_DIRECT_ALIGN as usize);
    if pread_once(fd, &mut buf[512..1024], 0).is_ok() {
        return Some(SECTOR_SIZE);
    }
    pread_once(fd, &mut buf[..MAX_DIRECT_ALIGN as usize], 0)
        .ok()
        .map(|_| MAX_DIRECT_ALIGN)
}

fn block_device_size(fd: RawFd) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 stores one u64 through the pointer, which is valid.
    let r = unsafe { libc::ioctl(fd, BLKGETSIZE64 as _, &mut size as *mut u64) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

fn to_off(offset: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(offset).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("offset {offset} too large"),
        )
    })
}

/// One `pread`, retrying only on EINTR.
fn pread_once(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let off = to_off(offset)?;
    loop {
        // SAFETY: `buf` is valid writable memory of `buf.len()` bytes.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn pread_full(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match pread_once(fd, &mut buf[done..], offset + done as u64)? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "unexpected end of file",
                ))
            }
            n => done += n,
        }
    }
    Ok(())
}

fn pwrite_full(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        let off = to_off(offset + done as u64)?;
        // SAFETY: `rest` is valid readable memory of `rest.len()` bytes.
        let n = unsafe { libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), off) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
        }
        done += n as usize;
    }
    Ok(())
}

/// Drives `syscall` (a `preadv` or `pwritev`) until every byte of `iovs` is
/// transferred: at most `IOV_MAX` iovecs per call, retrying on EINTR, and
/// after a short transfer resuming at the exact iovec and byte. `zero_kind`
/// is the error when the kernel transfers nothing (EOF / no space).
fn vectored_full(
    iovs: &mut [libc::iovec],
    offset: u64,
    zero_kind: io::ErrorKind,
    mut syscall: impl FnMut(&[libc::iovec], libc::off_t) -> isize,
) -> io::Result<()> {
    let mut start = advance_iovecs(iovs, 0, 0);
    let mut pos = offset;
    while start < iovs.len() {
        let end = (start + IOV_MAX).min(iovs.len());
        let n = syscall(&iovs[start..end], to_off(pos)?);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                zero_kind,
                "vectored I/O transferred 0 bytes",
            ));
        }
        pos += n as u64;
        start = advance_iovecs(iovs, start, n as usize);
    }
    Ok(())
}

/// Consumes `n` transferred bytes from `iovs[start..]`: fully transferred (and
/// empty) iovecs are skipped, a partly transferred one is trimmed in place.
/// Returns the index of the first iovec with bytes left.
fn advance_iovecs(iovs: &mut [libc::iovec], start: usize, mut n: usize) -> usize {
    let mut i = start;
    while i < iovs.len() {
        let len = iovs[i].iov_len;
        if n < len {
            // wrapping_add keeps this safe; n < len so it stays in the buffer.
            iovs[i].iov_base = iovs[i].iov_base.cast::<u8>().wrapping_add(n).cast();
            iovs[i].iov_len = len - n;
            break;
        }
        n -= len;
        i += 1;
    }
    i
}

fn whole_file_lock(kind: libc::c_int) -> libc::flock {
    // SAFETY: `flock` is plain integers (plus padding on some targets); all
    // zeroes is a valid value, which we then fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // 0 = to end of file, however large it grows
    fl
}

fn set_whole_file_write_lock(fd: RawFd) -> io::Result<()> {
    let fl = whole_file_lock(libc::F_WRLCK);
    loop {
        // SAFETY: F_SETLK reads one `flock` through the valid pointer.
        if unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Asks the kernel (F_GETLK) who holds a conflicting lock and describes it as
/// "held by process PID (command line)".
fn describe_lock_holder(fd: RawFd) -> (Option<i32>, String) {
    let mut fl = whole_file_lock(libc::F_WRLCK);
    // SAFETY: F_GETLK reads and rewrites one `flock` through the valid pointer.
    if unsafe { libc::fcntl(fd, libc::F_GETLK, &mut fl) } < 0 {
        let e = io::Error::last_os_error();
        return (
            None,
            format!("held by another process (F_GETLK failed: {e})"),
        );
    }
    if fl.l_type == libc::F_UNLCK as libc::c_short {
        return (
            None,
            "held by another process, released while checking; retry".to_string(),
        );
    }
    if fl.l_pid <= 0 {
        // The holder is in another PID namespace (e.g. another container).
        return (
            None,
            "held by a process outside this PID namespace".to_string(),
        );
    }
    let pid = fl.l_pid;
    (
        Some(pid),
        format!("held by process {pid} ({})", process_command(pid)),
    )
}

/// The command line of `pid` from /proc, or its short name, or "unknown".
fn process_command(pid: i32) -> String {
    if let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) {
        let args: Vec<String> = raw
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.is_empty() {
            return args.join(" ");
        }
    }
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) if !comm.trim().is_empty() => comm.trim().to_string(),
        _ => "unknown command".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    /// A unique path under `dir` that is removed when the guard drops.
    struct TempPath(PathBuf);

    impl TempPath {
        fn new_in(dir: &Path, tag: &str) -> TempPath {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("tarn-filedev-{}-{tag}-{n}", std::process::id());
            TempPath(dir.join(name))
        }
        fn new(tag: &str) -> TempPath {
            TempPath::new_in(&std::env::temp_dir(), tag)
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn create_open_roundtrip() {
        let tmp = TempPath::new("rt");
        let dev = FileDevice::create(&tmp.0, 1 << 20).unwrap();
        assert_eq!(dev.size_bytes(), 1 << 20);
        let data = AlignedBuf::from_slice(&pattern(8192, 1));
        dev.write_at(&data, 4096).unwrap();
        dev.flush().unwrap();
        let mut back = AlignedBuf::zeroed(8192);
        dev.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, data);
        drop(dev);

        let dev = FileDevice::open(&tmp.0).unwrap();
        assert_eq!(dev.size_bytes(), 1 << 20);
        let mut back = AlignedBuf::zeroed(8192);
        dev.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, data);
        // Sparse holes read as zeros.
        dev.read_at(&mut back, 0).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 0));
        assert!(dev.name().contains("tarn-filedev"));
        assert_eq!(dev.bounce_count(), 0);
    }

    #[test]
    fn create_refuses_existing_and_bad_size() {
        let tmp = TempPath::new("exists");
        let _dev = FileDevice::create(&tmp.0, 4096).unwrap();
        let e = FileDevice::create(&tmp.0, 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("already exists"), "{e}");
        assert!(e.to_string().contains(&tmp.0.display().to_string()));
        let tmp2 = TempPath::new("badsize");
        let e = FileDevice::create(&tmp2.0, 1000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(!tmp2.0.exists());
        let e = FileDevice::open(&TempPath::new("missing").0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("tarn-filedev"), "{e}");
    }

    #[test]
    fn range_errors_name_the_device() {
        let tmp = TempPath::new("range");
        let dev = FileDevice::create(&tmp.0, 8192).unwrap();
        let mut buf = AlignedBuf::zeroed(4096);
        let e = dev.read_at(&mut buf, 8192).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("tarn-filedev"), "{e}");
        let e = dev.write_at(&buf[..100], 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn vectored_io_with_many_iovecs() {
        let tmp = TempPath::new("vec");
        let dev = FileDevice::create(&tmp.0, 4 << 20).unwrap();
        // 2500 sector-sized iovecs: more than IOV_MAX, so several syscalls.
        let n = 2500;
        let src = AlignedBuf::from_slice(&pattern(n * 512, 7));
        let pieces: Vec<&[u8]> = src.chunks(512).collect();
        dev.writev_at(&pieces, 8192).unwrap();
        let mut dst = AlignedBuf::zeroed(n * 512);
        {
            let mut parts: Vec<&mut [u8]> = dst.chunks_mut(512).collect();
            dev.readv_at(&mut parts, 8192).unwrap();
        }
        assert_eq!(dst, src);
        let mut flat = AlignedBuf::zeroed(n * 512);
        dev.read_at(&mut flat, 8192).unwrap();
        assert_eq!(flat, src);
        if dev.is_direct() && dev.direct_alignment() == 512 {
            assert_eq!(dev.bounce_count(), 0);
        }
    }

    #[test]
    fn unaligned_buffers_bounce() {
        let tmp = TempPath::new("bounce");
        let dev = FileDevice::create(&tmp.0, 1 << 20).unwrap();
        // A Vec slice starting at an odd address is never 512-aligned.
        let mut backing = vec![0u8; 3 * 4096 + 1];
        let data = pattern(3 * 4096, 3);
        backing[1..].copy_from_slice(&data);
        dev.write_at(&backing[1..], 4096).unwrap();
        let mut out = vec![0u8; 3 * 4096 + 1];
        dev.read_at(&mut out[1..], 4096).unwrap();
        assert_eq!(&out[1..], &data[..]);
        // Unaligned iovec lengths are allowed as long as the total is sectors.
        let a = pattern(100, 9);
        let b = pattern(412, 11);
        dev.writev_at(&[&a, &b], 0).unwrap();
        let mut ra = vec![0u8; 300];
        let mut rb = vec![0u8; 212];
        dev.readv_at(&mut [&mut ra[..], &mut rb[..]], 0).unwrap();
        assert_eq!(&ra[..100], &a[..]);
        assert_eq!(&ra[100..], &b[..200]);
        assert_eq!(&rb[..], &b[200..]);
        if dev.is_direct() {
            assert!(dev.bounce_count() >= 4, "bounces {}", dev.bounce_count());
        }
    }

    #[test]
    fn partial_block_read_modify_write() {
        let tmp = TempPath::new("rmw");
        let mut dev = FileDevice::create(&tmp.0, 64 << 10).unwrap();
        if !dev.is_direct() {
            return; // no alignment constraints to exercise
        }
        // Stricter than needed is still valid for O_DIRECT; forces the 4Kn path.
        dev.align = 4096;
        let base = AlignedBuf::from_slice(&pattern(16384, 1));
        dev.write_at(&base, 0).unwrap();
        let patch = AlignedBuf::from_slice(&pattern(1024 + 4096, 2));
        dev.write_at(&patch, 3072).unwrap(); // head and tail partial
        dev.write_at(&patch[..512], 512).unwrap(); // inside one block
        let mut expect = base.to_vec();
        expect[3072..3072 + patch.len()].copy_from_slice(&patch);
        expect[512..1024].copy_from_slice(&patch[..512]);
        let mut back = AlignedBuf::zeroed(16384);
        dev.read_at(&mut back, 0).unwrap();
        assert_eq!(&back[..], &expect[..]);
        let mut mid = AlignedBuf::zeroed(1536);
        dev.read_at(&mut mid, 2560).unwrap();
        assert_eq!(&mid[..], &expect[2560..4096]);
        assert!(dev.bounce_count() >= 3);
    }

    #[test]
    fn tmpfs_and_buffered_fallback() {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let tmp = TempPath::new_in(&dir, "shm");
        // tmpfs rejects O_DIRECT on kernels before 6.6; either way I/O must work.
        let dev = FileDevice::create(&tmp.0, 1 << 20).unwrap();
        let data = AlignedBuf::from_slice(&pattern(4096, 5));
        dev.write_at(&data, 8192).unwrap();
        dev.flush().unwrap();
        drop(dev);
        let dev = FileDevice::open_buffered(&tmp.0).unwrap();
        assert!(!dev.is_direct());
        assert_eq!(dev.direct_alignment(), 512);
        let mut back = vec![0u8; 4097];
        dev.read_at(&mut back[1..], 8192).unwrap();
        assert_eq!(&back[1..], &data[..]);
        assert_eq!(dev.bounce_count(), 0, "buffered I/O never bounces");
    }

    #[test]
    fn same_process_lock_conflict_and_release() {
        let tmp = TempPath::new("lock");
        let first = FileDevice::create(&tmp.0, 4096).unwrap();
        first.lock_exclusive().unwrap();
        first.lock_exclusive().unwrap(); // idempotent
        let second = FileDevice::open(&tmp.0).unwrap();
        let err = second.lock_exclusive().unwrap_err();
        assert_eq!(err.holder_pid, Some(std::process::id() as i32));
        assert!(
            err.to_string().contains("already open in this process"),
            "{err}"
        );
        assert!(
            err.to_string().contains(&tmp.0.display().to_string()),
            "{err}"
        );
        let as_io: io::Error = err.into();
        assert_eq!(as_io.kind(), io::ErrorKind::ResourceBusy);
        // Dropping the loser must not release the holder's POSIX lock.
        drop(second);
        assert!(posix_lock_visible(&first), "holder's lock vanished");
        drop(first);
        let third = FileDevice::open(&tmp.0).unwrap();
        third.lock_exclusive().unwrap();
        assert!(third.is_locked());
    }

    /// Issue 11 item 7: images were created 0644 (or wider, by the umask),
    /// readable by every local user. And a lock conflict in this process
    /// names what holds the device.
    #[test]
    fn created_images_are_private_and_holders_named() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TempPath::new("mode");
        let dev = FileDevice::create(&tmp.0, 4096).unwrap();
        let mode = std::fs::metadata(&tmp.0).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, IMAGE_MODE);
        assert_eq!(holder_in_process(dev.id()), None);
        dev.lock_exclusive().unwrap();
        assert_eq!(holder_in_process(dev.id()).as_deref(), Some("already open in this process"));
        dev.set_lock_owner("part of active pool 'p'");
        assert_eq!(holder_in_process(dev.id()).as_deref(), Some("part of active pool 'p'"));
        let second = FileDevice::open(&tmp.0).unwrap();
        let err = second.lock_exclusive().unwrap_err();
        assert!(err.to_string().contains("it is part of active pool 'p'"), "{err}");
        drop(second);
        drop(dev);
        assert_eq!(holder_in_process(DeviceId::of(&std::fs::metadata(&tmp.0).unwrap()).unwrap()), None);
    }

    /// Whether /proc/locks lists a POSIX lock of this process on `dev`'s inode.
    fn posix_lock_visible(dev: &FileDevice) -> bool {
        let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
            return true; // cannot check here
        };
        let pid = std::process::id().to_string();
        let inode = format!(":{} ", dev.key.1);
        locks.lines().any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            l.contains("POSIX") && fields.contains(&pid.as_str()) && l.contains(&inode)
        })
    }

    #[test]
    fn vectored_loop_resumes_after_short_transfers() {
        // Fake syscall that copies at most 700 bytes per call (crossing iovec
        // boundaries mid-buffer), into a flat "disk".
        let src: Vec<Vec<u8>> = (0..5).map(|i| pattern(300 + i * 250, i as u8)).collect();
        let mut iovs: Vec<libc::iovec> = src
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr().cast_mut().cast(),
                iov_len: b.len(),
            })
            .collect();
        // An empty iovec in the middle must be skipped, not stall the loop.
        let empty = std::ptr::NonNull::<u8>::dangling().as_ptr().cast();
        iovs.insert(
            2,
            libc::iovec {
                iov_base: empty,
                iov_len: 0,
            },
        );
        let mut disk = vec![0u8; 8192];
        let mut calls = 0;
        vectored_full(&mut iovs, 1000, io::ErrorKind::WriteZero, |iov, off| {
            calls += 1;
            let mut pos = off as usize;
            let mut budget = 700;
            for v in iov {
                let take = v.iov_len.min(budget);
                // SAFETY: the iovec points into a live `src` buffer.
                let bytes = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), take) };
                disk[pos..pos + take].copy_from_slice(bytes);
                pos += take;
                budget -= take;
            }
            (700 - budget) as isize
        })
        .unwrap();
        let flat: Vec<u8> = src.concat();
        assert_eq!(&disk[1000..1000 + flat.len()], &flat[..]);
        assert_eq!(calls, flat.len().div_ceil(700));
    }

    const CHILD_ENV: &str = "TARN_FILEDEV_LOCK_CHILD";

    /// Not a test on its own: the child half of `cross_process_lock_names_holder`.
    #[test]
    #[ignore]
    fn lock_holder_child() {
        let Ok(path) = std::env::var(CHILD_ENV) else {
            return;
        };
        let dev = FileDevice::open(&path).unwrap();
        dev.lock_exclusive().unwrap();
        println!("LOCKED");
        // Hold the lock until the parent closes our stdin.
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }

    /// The libtest name of `lock_holder_child`, wherever this module lives
    /// (module_path! starts with the crate name, which libtest omits).
    fn child_test_name() -> String {
        let module = module_path!();
        let within_crate = module.split_once("::").map_or(module, |(_, rest)| rest);
        format!("{within_crate}::lock_holder_child")
    }

    #[test]
    fn cross_process_lock_names_holder() {
        let tmp = TempPath::new("xproc");
        drop(FileDevice::create(&tmp.0, 4096).unwrap());
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["--exact", &child_test_name(), "--ignored", "--nocapture"])
            .env(CHILD_ENV, &tmp.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut locked = false;
        let mut line = String::new();
        while !locked && reader.read_line(&mut line).unwrap() > 0 {
            locked = line.trim() == "LOCKED";
            line.clear();
        }
        let dev = FileDevice::open(&tmp.0).unwrap();
        let result = dev.lock_exclusive();
        drop(child.stdin.take()); // lets the child exit
                                  // Keep reading so the child never writes into a closed pipe.
        let _ = std::io::Read::read_to_string(&mut reader, &mut line);
        let status = child.wait().unwrap();
        assert!(locked && status.success(), "child failed to take the lock");
        let err = result.unwrap_err();
        assert_eq!(err.holder_pid, Some(child.id() as i32));
        assert!(
            err.holder_desc
                .starts_with(&format!("held by process {} (", child.id())),
            "{err}"
        );
        assert!(err.holder_desc.contains("lock_holder_child"), "{err}");
        // The child is gone, so the lock is free now.
        dev.lock_exclusive().unwrap();
    }
}
