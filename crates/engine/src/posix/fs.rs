//! `PosixFs`: opening (and formatting) a POSIX object set, the in-memory
//! inode table, the unlinked set and the helpers every operation shares.
//! The operations themselves are in `namei.rs` (names) and `file.rs` (data,
//! attributes, extended attributes); `ops.rs` binds them to [`FileSystem`].

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::ObjectType;

use super::api::*;
use super::dir::DIR_BLOCK;
use super::inode::{InodePhys, Master, POSIX_VERSION};
use crate::error::ErrorKind;
use crate::object::{Objset, Tx};

/// Makes everything written so far durable.
pub type SyncFn = Arc<dyn Fn() -> crate::Result<()> + Send + Sync>;

/// How a POSIX file system is mounted.
#[derive(Clone)]
pub struct PosixOptions {
    /// Every change fails with `EROFS` (snapshots, `readonly=on`); nothing
    /// is written, not even access times or the unlinked-set drain.
    pub readonly: bool,
    /// Update access times on read (`atime=on`).
    pub atime: bool,
    /// With `atime`: only when the access time is not after the modification
    /// or change time, or is a day old (`relatime=on`, Linux's default).
    pub relatime: bool,
    /// What `sync_all` calls (and `fsync` without a log). None: wait for a
    /// txg sync of the pool.
    pub sync: Option<SyncFn>,
    /// The dataset's intent log (`Datasets::zil`): `fsync` commits it.
    /// None: `fsync` waits for a txg sync.
    pub log: Option<Arc<crate::zil::Zil>>,
    /// The `sync` property: when changes are made durable.
    pub sync_policy: SyncPolicy,
}

impl Default for PosixOptions {
    fn default() -> Self {
        PosixOptions { readonly: false, atime: true, relatime: true, sync: None, log: None, sync_policy: SyncPolicy::Standard }
    }
}

/// Dnode slots of a new inode: header, block pointer and a bonus of up to
/// 192 bytes (the attributes and 80 bytes of small extended attributes).
pub(crate) const INODE_SLOTS: usize = 6;
/// Slots a new file reserves to grow into: a 1 KiB file and its attributes
/// inline (short dnode header 20 + attributes 108 + data 1024 bytes = 18
/// slots; 14 such files fill a dnode block). A file may grow further, up to
/// `tarn_inline_max_bytes`, while the slots after its room are free.
pub(crate) const INLINE_ROOM: usize = 18;
/// The master object's number: the first object of the set.
pub(crate) const MASTER_OBJ: u64 = 1;
/// Inodes kept in memory beyond those in use (open, or being worked on).
const INODE_CACHE_MAX: usize = 1 << 16;

pub(crate) struct InodeState {
    pub phys: InodePhys,
    /// Open handles (memory only: a crash closes them all).
    pub open: u32,
    /// Freed: its number names nothing any more.
    pub gone: bool,
}

pub(crate) struct Inode {
    pub ino: Ino,
    pub st: Mutex<InodeState>,
}

/// A POSIX file system on one object set. See the module comment of
/// `posix` for the design and the lock order.
pub struct PosixFs {
    pub(crate) os: Arc<Objset>,
    pub(crate) opts: PosixOptions,
    /// `atime` and `relatime` as they are now: the properties may change
    /// while the file system is served, so `opts.atime`/`opts.relatime` are
    /// only the values at open and nothing reads them after.
    pub(crate) atime: AtomicBool,
    pub(crate) relatime: AtomicBool,
    pub(crate) root: Ino,
    pub(crate) unlinked_obj: u64,
    /// Directory contents: changed under write, read under read.
    pub(crate) ns: RwLock<()>,
    inodes: Mutex<HashMap<Ino, Arc<Inode>>>,
    /// Inodes with no name left but open handles (mirrors the unlinked-set
    /// object).
    unlinked: Mutex<BTreeSet<Ino>>,
    /// The intent log (`PosixOptions::log`) and the `sync` property now.
    pub(crate) zil: Option<Arc<crate::zil::Zil>>,
    sync_policy: AtomicU8,
    /// Replay in progress (`replay.rs`): the clock and numbers the record
    /// being replayed gives, and its seq for the header (0: not replaying).
    pub(crate) replaying: Mutex<Option<super::replay::Replaying>>,
    pub(crate) in_replay: AtomicBool,
}

pub(crate) fn err(errno: i32, msg: impl Into<String>) -> Errno {
    Errno::new(errno, msg)
}

impl PosixFs {
    /// Opens the POSIX file system of `objset`, formatting an empty object
    /// set, and frees the inodes a crash left on the unlinked set.
    pub fn open(objset: Arc<Objset>, mut opts: PosixOptions) -> crate::Result<Arc<PosixFs>> {
        opts.readonly |= objset.core.readonly;
        let master = if objset.next_object() <= MASTER_OBJ {
            if opts.readonly {
                return Err(crate::Error::invalid(format!("'{}' has no file system and is read-only", objset.name.read())));
            }
            format(&objset)?
        } else {
            let b = objset.read(MASTER_OBJ, 0, super::inode::MASTER_BYTES)?;
            Master::decode(&b).map_err(|e| e.context(format!("'{}'", objset.name.read())))?
        };
        let fs = Arc::new(PosixFs {
            os: objset,
            atime: AtomicBool::new(opts.atime),
            relatime: AtomicBool::new(opts.relatime),
            root: master.root,
            unlinked_obj: master.unlinked,
            ns: RwLock::new(()),
            inodes: Mutex::new(HashMap::new()),
            unlinked: Mutex::new(BTreeSet::new()),
            zil: opts.log.clone(),
            sync_policy: AtomicU8::new(opts.sync_policy as u8),
            replaying: Mutex::new(None),
            in_replay: AtomicBool::new(false),
            opts,
        });
        fs.drain_unlinked()?;
        fs.replay()?;
        Ok(fs)
    }

    /// Inodes waiting on the unlinked set (open but nameless).
    pub fn unlinked_count(&self) -> usize {
        self.unlinked.lock().len()
    }

    /// Frees every inode on the persisted unlinked set: they had no name and
    /// their handles died with the last mount.
    fn drain_unlinked(&self) -> crate::Result<()> {
        let b = self.os.read(self.unlinked_obj, 0, usize::MAX >> 1)?;
        if b.len() % 8 != 0 {
            return Err(crate::Error::corrupt(format!("unlinked set of {} bytes", b.len())));
        }
        let inos: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect();
        if self.opts.readonly {
            // Nothing may be written: keep them (hidden: they have no name).
            self.unlinked.lock().extend(inos);
            return Ok(());
        }
        if inos.is_empty() {
            return Ok(());
        }
        let tx = self.os.begin()?;
        for ino in inos {
            match self.os.bonus(ino).and_then(|b| InodePhys::decode(&b)) {
                Ok(p) => self.free_objects(&tx, ino, &p)?,
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(e.context(format!("unlinked inode {}", ino))),
            }
        }
        self.os.truncate(&tx, self.unlinked_obj, 0)?;
        Ok(())
    }

    pub(crate) fn free_objects(&self, tx: &Tx, ino: Ino, p: &InodePhys) -> crate::Result<()> {
        if p.xattr_obj != 0 {
            self.os.free(tx, p.xattr_obj)?;
        }
        self.os.free(tx, ino)
    }

    /// A transaction for a change that allocates nothing new (removals,
    /// attributes): `EROFS` when mounted read-only. Removals may dip into
    /// the pool's slop reserve, so a full pool can always be emptied.
    pub(crate) fn tx(&self) -> PResult<Tx> {
        self.check_rw()?;
        Ok(self.replayed_in(self.os.begin()?))
    }

    /// A transaction for a change that may allocate about `bytes` in
    /// blocks of up to `piece` bytes: refused with `ENOSPC` (pool) or
    /// `EDQUOT` (quota) before anything changes, after waiting for frees
    /// still on their way (`Objset::begin_for`).
    pub(crate) fn tx_for(&self, bytes: u64, piece: u64) -> PResult<Tx> {
        self.check_rw()?;
        Ok(self.replayed_in(self.os.begin_for(bytes, piece)?))
    }

    /// While replaying, the record being replayed is marked done in the
    /// transaction that applies it (each replayed change takes one), so
    /// the header of that txg says it was.
    fn replayed_in(&self, tx: Tx) -> Tx {
        if self.in_replay.load(Ordering::Relaxed) {
            if let (Some(z), Some(r)) = (&self.zil, self.replaying.lock().as_ref()) {
                z.mark_replayed(tx.txg(), r.mark_seq);
            }
        }
        tx
    }

    /// The time a change reads: the clock, or while replaying the time the
    /// record carries.
    pub(crate) fn now(&self) -> Timespec {
        if self.in_replay.load(Ordering::Relaxed) {
            if let Some(r) = self.replaying.lock().as_ref() {
                return r.now;
            }
        }
        Timespec::now()
    }

    /// The `sync` property now.
    pub(crate) fn sync_policy(&self) -> SyncPolicy {
        SyncPolicy::from_u8(self.sync_policy.load(Ordering::Relaxed))
    }

    pub(crate) fn store_sync_policy(&self, p: SyncPolicy) {
        self.sync_policy.store(p as u8, Ordering::Relaxed);
    }

    /// The largest block the file system writes for a file's data.
    pub(crate) fn record_piece(&self) -> u64 {
        self.os.props().recordsize as u64
    }

    fn check_rw(&self) -> PResult<()> {
        if self.opts.readonly || self.os.core.readonly {
            return Err(err(libc::EROFS, format!("'{}' is read-only", self.os.name.read())));
        }
        Ok(())
    }

    /// Refuses a change that would allocate (in blocks of up to `piece`
    /// bytes) when the pool is nearly full, inside a transaction already
    /// begun (so it fails whole).
    pub(crate) fn check_space(&self, bytes: u64, piece: u64) -> PResult<()> {
        Ok(self.os.core.check_space(bytes, piece)?)
    }

    /// The inode `ino`, loaded from its bonus if not in memory.
    pub(crate) fn inode(&self, ino: Ino) -> PResult<Arc<Inode>> {
        if let Some(i) = self.inodes.lock().get(&ino) {
            return Ok(i.clone());
        }
        if ino == MASTER_OBJ || ino == self.unlinked_obj || ino == 0 {
            return Err(err(libc::ENOENT, format!("inode {} is not a file", ino)));
        }
        let b = self.os.bonus(ino).map_err(|e| {
            let e = Errno::from(e);
            Errno::new(if e.errno == libc::EINVAL { libc::ENOENT } else { e.errno }, e.msg)
        })?;
        if b.is_empty() {
            return Err(err(libc::ENOENT, format!("object {} is not an inode", ino)));
        }
        let phys = InodePhys::decode(&b).map_err(|e| Errno::from(e.context(format!("inode {}", ino))))?;
        let node = Arc::new(Inode { ino, st: Mutex::new(InodeState { phys, open: 0, gone: false }) });
        let mut map = self.inodes.lock();
        let node = map.entry(ino).or_insert(node).clone();
        if map.len() > INODE_CACHE_MAX {
            evict(&mut map);
        }
        Ok(node)
    }

    /// A new inode in memory, after its object was created. (A caller that
    /// guessed the number may have loaded it from its bonus already: that
    /// copy is the same and stays the only one.)
    pub(crate) fn insert_inode(&self, ino: Ino, phys: InodePhys) -> Arc<Inode> {
        let node = Arc::new(Inode { ino, st: Mutex::new(InodeState { phys, open: 0, gone: false }) });
        self.inodes.lock().entry(ino).or_insert(node).clone()
    }

    pub(crate) fn forget_inode(&self, ino: Ino) {
        self.inodes.lock().remove(&ino);
    }

    /// Writes the inode's attributes to its bonus.
    pub(crate) fn save(&self, tx: &Tx, ino: Ino, phys: &InodePhys) -> PResult<()> {
        Ok(self.os.set_bonus(tx, ino, &phys.encode())?)
    }

    pub(crate) fn attr_of(&self, ino: Ino, p: &InodePhys) -> Attr {
        let used = self.os.info(ino).map_or(0, |i| i.used_bytes);
        Attr {
            ino,
            kind: p.kind().unwrap_or(FileKind::File),
            perm: (p.mode & 0o7777) as u16,
            nlink: p.nlink,
            uid: p.uid,
            gid: p.gid,
            rdev: p.rdev,
            size: if p.is_dir() { p.size + 2 } else { p.size },
            blocks: used.div_ceil(512),
            blksize: if p.is_dir() { DIR_BLOCK as u32 } else { self.os.props().recordsize },
            atime: p.atime,
            mtime: p.mtime,
            ctime: p.ctime,
            crtime: p.crtime,
            gen: p.gen,
        }
    }

    /// Adds or removes `ino` on the unlinked set, in `tx`.
    pub(crate) fn set_unlinked(&self, tx: &Tx, ino: Ino, on: bool) -> PResult<()> {
        let mut set = self.unlinked.lock();
        let changed = if on { set.insert(ino) } else { set.remove(&ino) };
        if !changed {
            return Ok(());
        }
        let bytes: Vec<u8> = set.iter().flat_map(|i| i.to_le_bytes()).collect();
        // Removal-side bookkeeping: may use the slop reserve.
        self.os.write_txg(tx.txg(), self.unlinked_obj, 0, &bytes)?;
        self.os.truncate(tx, self.unlinked_obj, bytes.len() as u64)?;
        Ok(())
    }

    /// Makes everything durable: the configured hook, or a txg sync.
    pub(crate) fn sync_now(&self) -> PResult<()> {
        if self.opts.readonly {
            return Ok(());
        }
        match &self.opts.sync {
            Some(f) => Ok(f()?),
            None => Ok(self.os.core.txg.wait_synced(0)?),
        }
    }

    /// A fresh inode record for a new object.
    pub(crate) fn new_phys(&self, caller: &Caller, parent: &InodePhys, parent_ino: Ino, mode: u32, tx: &Tx) -> InodePhys {
        let now = self.now();
        let mut mode = mode & (libc::S_IFMT | (0o7777 & !caller.umask));
        let kind = FileKind::from_mode(mode);
        // A set-group-ID directory hands its group down, and its bit to
        // subdirectories (as on BSD, and Linux for such directories).
        let mut gid = if parent.mode & libc::S_ISGID != 0 {
            if kind == Some(FileKind::Dir) {
                mode |= libc::S_ISGID;
            }
            parent.gid
        } else {
            caller.gid
        };
        let (mut uid, mut gen) = (caller.uid, tx.txg());
        if let Some(c) = self.replaying.lock().as_ref().and_then(|r| r.create) {
            // Replay: the inode as it was made, whatever the parent is now.
            (mode, uid, gid, gen) = (c.mode, c.uid, c.gid, c.gen);
        }
        InodePhys {
            mode,
            uid,
            gid,
            nlink: if kind == Some(FileKind::Dir) { 2 } else { 1 },
            gen,
            parent: parent_ino,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            ..Default::default()
        }
    }
}

/// Drops clean inodes nobody uses from the table, down to half its limit.
/// An inode is only dropped when the table holds its one reference (checked
/// under the table lock, through which every other reference is obtained),
/// so two copies of one inode never exist; open or nameless ones stay, their
/// state is in memory only.
fn evict(map: &mut HashMap<Ino, Arc<Inode>>) {
    let mut excess = map.len() - INODE_CACHE_MAX / 2;
    map.retain(|_, n| {
        if excess == 0 || Arc::strong_count(n) > 1 {
            return true;
        }
        let Some(st) = n.st.try_lock() else { return true };
        if st.open > 0 || st.phys.nlink == 0 {
            return true;
        }
        excess -= 1;
        false
    });
}

/// Lays out an empty object set: master object, unlinked set, root directory.
fn format(os: &Arc<Objset>) -> crate::Result<Master> {
    let tx = os.begin()?;
    let master_obj = os.create(&tx, ObjectType::KvMap)?;
    if master_obj != MASTER_OBJ {
        return Err(crate::Error::corrupt(format!("the master object of '{}' came out as object {}", os.name.read(), master_obj)));
    }
    let unlinked = os.create(&tx, ObjectType::KvMap)?;
    let root = os.create_with_blksz(&tx, ObjectType::Directory, INODE_SLOTS, DIR_BLOCK as u32)?;
    let now = Timespec::now();
    let phys = InodePhys {
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        gen: tx.txg(),
        parent: root,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        ..Default::default()
    };
    os.set_bonus(&tx, root, &phys.encode())?;
    let m = Master { version: POSIX_VERSION, root, unlinked };
    os.write(&tx, master_obj, 0, &m.encode())?;
    Ok(m)
}
