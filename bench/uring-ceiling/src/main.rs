//! The FUSE-over-io_uring transport's ceiling: an in-memory file system
//! that does no work (enough of one for `tarn-fsbench --phases create`),
//! served through fractal-fuse, which speaks FUSE_OVER_IO_URING (Linux
//! 6.14+; `echo Y > /sys/module/fuse/parameters/enable_uring` first).
//! Compare with `crates/fuse/examples/memfs_mount.rs`, the same over
//! `/dev/fuse` through tarn's glue.
//!
//! ```text
//! cargo build --release --manifest-path bench/uring-ceiling/Cargo.toml
//! bench/uring-ceiling/target/release/uring-ceiling DIR [WRITEBACK 0|1] [WORKERS]
//! ```
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fractal_fuse::abi::FUSE_ROOT_ID;
use fractal_fuse::*;
use parking_lot::Mutex;

const TTL: Duration = Duration::from_secs(1);

struct Node {
    attr: FileAttr,
    data: Vec<u8>,
    children: HashMap<Vec<u8>, u64>,
}
struct Mem {
    nodes: Mutex<HashMap<u64, Node>>,
    next: AtomicU64,
}

fn ts() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    Timestamp::new(d.as_secs(), d.subsec_nanos())
}
fn attr(ino: u64, mode: u32) -> FileAttr {
    let t = ts();
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        mode,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
    }
}

impl Mem {
    /// A new node of `mode` named `name` in directory `parent`.
    fn add(&self, parent: u64, name: &OsStr, mode: u32) -> FsResult<FileAttr> {
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        let mut n = self.nodes.lock();
        let a = attr(ino, mode);
        n.get_mut(&parent)
            .ok_or(ENOENT)?
            .children
            .insert(name.as_bytes().to_vec(), ino);
        n.insert(
            ino,
            Node {
                attr: a,
                data: Vec::new(),
                children: HashMap::new(),
            },
        );
        Ok(a)
    }
}

impl Filesystem for Mem {
    async fn lookup(&self, _r: Request, parent: InodeId, name: &OsStr) -> FsResult<ReplyEntry> {
        let n = self.nodes.lock();
        let p = n.get(&parent.0).ok_or(ENOENT)?;
        let ino = *p.children.get(name.as_bytes()).ok_or(ENOENT)?;
        Ok(ReplyEntry {
            ttl: TTL,
            attr: n[&ino].attr,
            generation: 0,
        })
    }
    async fn getattr(
        &self,
        _r: Request,
        inode: InodeId,
        _fh: Option<FileHandleId>,
        _f: u32,
    ) -> FsResult<ReplyAttr> {
        let n = self.nodes.lock();
        Ok(ReplyAttr {
            ttl: TTL,
            attr: n.get(&inode.0).ok_or(ENOENT)?.attr,
        })
    }
    async fn setattr(
        &self,
        _r: Request,
        inode: InodeId,
        _fh: Option<FileHandleId>,
        s: SetAttr,
    ) -> FsResult<ReplyAttr> {
        let mut n = self.nodes.lock();
        let node = n.get_mut(&inode.0).ok_or(ENOENT)?;
        if let Some(m) = s.mode {
            node.attr.mode = (node.attr.mode & libc::S_IFMT) | (m & 0o7777);
        }
        if let Some(sz) = s.size {
            node.data.resize(sz as usize, 0);
            node.attr.size = sz;
        }
        if let Some(SetAttrTime::Specific(t)) = s.mtime {
            node.attr.mtime = t;
        }
        Ok(ReplyAttr {
            ttl: TTL,
            attr: node.attr,
        })
    }
    async fn mkdir(
        &self,
        _r: Request,
        parent: InodeId,
        name: &OsStr,
        mode: u32,
        _u: u32,
    ) -> FsResult<ReplyEntry> {
        let a = self.add(parent.0, name, libc::S_IFDIR | (mode & 0o7777))?;
        Ok(ReplyEntry {
            ttl: TTL,
            attr: a,
            generation: 0,
        })
    }
    async fn create(
        &self,
        _r: Request,
        parent: InodeId,
        name: &OsStr,
        mode: u32,
        _f: u32,
    ) -> FsResult<ReplyCreate> {
        let a = self.add(parent.0, name, libc::S_IFREG | (mode & 0o7777))?;
        Ok(ReplyCreate {
            ttl: TTL,
            attr: a,
            generation: 0,
            fh: FileHandleId(0),
            flags: 0,
        })
    }
    async fn open(&self, _r: Request, _i: InodeId, _f: u32) -> FsResult<ReplyOpen> {
        Ok(ReplyOpen {
            fh: FileHandleId(0),
            flags: 0,
            backing_id: 0,
        })
    }
    async fn opendir(&self, _r: Request, _i: InodeId, _f: u32) -> FsResult<ReplyOpen> {
        Ok(ReplyOpen {
            fh: FileHandleId(0),
            flags: 0,
            backing_id: 0,
        })
    }
    async fn write(
        &self,
        _r: Request,
        inode: InodeId,
        _fh: FileHandleId,
        off: u64,
        data: &[u8],
        _w: u32,
        _f: u32,
    ) -> FsResult<usize> {
        let mut n = self.nodes.lock();
        let node = n.get_mut(&inode.0).ok_or(ENOENT)?;
        let end = off as usize + data.len();
        if node.data.len() < end {
            node.data.resize(end, 0);
        }
        node.data[off as usize..end].copy_from_slice(data);
        node.attr.size = node.data.len() as u64;
        Ok(data.len())
    }
    async fn read(
        &self,
        _r: Request,
        inode: InodeId,
        _fh: FileHandleId,
        off: u64,
        buf: &mut [u8],
    ) -> FsResult<usize> {
        let n = self.nodes.lock();
        let d = &n.get(&inode.0).ok_or(ENOENT)?.data;
        let s = (off as usize).min(d.len());
        let e = (s + buf.len()).min(d.len());
        buf[..e - s].copy_from_slice(&d[s..e]);
        Ok(e - s)
    }
    async fn getxattr(
        &self,
        _r: Request,
        _i: InodeId,
        _name: &OsStr,
        _s: u32,
    ) -> FsResult<ReplyXattr> {
        Err(libc::ENODATA)
    }
    async fn statfs(&self, _r: Request, _i: InodeId) -> FsResult<ReplyStatfs> {
        Ok(ReplyStatfs {
            blocks: 1 << 20,
            bfree: 1 << 20,
            bavail: 1 << 20,
            files: 1 << 30,
            ffree: 1 << 30,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        })
    }
}

fn main() -> std::io::Result<()> {
    let mut a = std::env::args().skip(1);
    let dir: std::path::PathBuf = a.next().expect("DIR").into();
    let wb = a.next().map_or(true, |v| v == "1");
    let workers: usize = a.next().map_or(2, |v| v.parse().unwrap());
    let mut nodes = HashMap::new();
    nodes.insert(
        FUSE_ROOT_ID,
        Node {
            attr: attr(FUSE_ROOT_ID, libc::S_IFDIR | 0o755),
            data: Vec::new(),
            children: HashMap::new(),
        },
    );
    let fs = Mem {
        nodes: Mutex::new(nodes),
        next: AtomicU64::new(2),
    };
    let opts = MountOptions::new()
        .fs_name("uringmem")
        .default_permissions(true)
        .write_back(wb);
    Session::new(dir, opts)?.with_worker_count(workers).run(fs)
}
