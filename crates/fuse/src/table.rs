//! The file systems one mount serves: its *slots*.
//!
//! Slot 0 is the mounted file system. With a [`Splice`] (the daemon's
//! mounts), more are added while the mount runs, one per name:
//! - a child dataset served inside its parent (`tank/a` at `/tank/a` inside
//!   `tank`'s mount), registered when its parent's root is listed or the
//!   name is looked up;
//! - a snapshot under `.zfs/snapshot/NAME` of a dataset slot.
//!
//! A registered slot is *unopened* until a request reaches one of its
//! inodes: its root's node id is known without opening it (see `inode`), so
//! listing 20,000 children or snapshots opens none of them. The first
//! request opens it through the splice (lazy, as OpenZFS automounts a
//! snapshot on first access). Slots are never reused: a destroyed and
//! re-created dataset gets a new slot, so node ids the kernel still holds of
//! the old one can never name the new one's files.
//!
//! ```text
//!            register            first request            detach
//!  (none) ─────────────▶ Unopened ─────────────▶ Open ─────────────▶ Detached
//!                                                 │ ▲                (EIO)
//!                                        replace  └─┘ (rollback: new file system)
//! ```
//!
//! # The slot lock
//!
//! Each slot's phase sits behind a read-write lock. Every request holds it
//! for read for the whole file-system call; opening, replacing and detaching
//! take it for write, so they wait for the requests inside and hold new
//! ones back (OpenZFS's `zfs_suspend_fs`/`zfs_resume_fs` teardown lock).
//! A request holds one slot's lock at a time (a lookup of a child's name
//! enters only the child's slot), and never takes it twice — a writer
//! waiting would make the second read wait forever; the write holders take
//! one lock and no other, so there is no cycle. Nothing that
//! holds a slot's write lock may notify the kernel: an invalidation can wait
//! for a request (a read holding a page lock) that waits for the slot.
//!
//! # Replacing a file system (rollback)
//!
//! [`FsTable::replace`] swaps a slot's file system for a new one opened on
//! the rolled-back object set. Of the inodes the kernel holds, those that
//! exist in the new file system as they were — same number and generation,
//! and for a regular file the same size, mtime and ctime — *survive*: the
//! same node id keeps working, and their open handles are opened again on
//! the new file system. The others become *stale*: every request on their
//! node id fails with `EIO`, as OpenZFS fails a znode whose `zfs_rezget`
//! failed after `zfs_resume_fs`.
//!
//! OpenZFS also keeps a file that exists but changed; a FUSE mount cannot.
//! With the write-back cache the kernel owns a cached regular file's size
//! and times and never takes them from the file system again (it would lose
//! its own unflushed extensions otherwise), so the old inode would go on
//! showing the pre-rollback size. Such a file is therefore *renumbered*:
//! its old node id goes stale, and the file (or a new file that happens to
//! get a stale number) is shown under an *alias*, a local number from the
//! mount's own range, so that the kernel makes a new inode for it with the
//! rolled-back attributes. A stale local number is never handed out again;
//! it is forgotten once the kernel forgets it. Aliases, once given, stay.
//!
//! Invariants ([`FsTable::check_invariants`], run after every detach in
//! debug builds and by the tests):
//! - a slot's index is its position in `slots`;
//! - `by_name` maps a name to the slot of that name, which is not detached;
//! - slot 0 is open for the mount's whole life;
//! - a stale local number is never also an alias in use.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tarn_engine::posix::{Errno, FileKind, FileSystem, Ino, PResult, Timespec};
use tarn_engine::{Error, ErrorKind, Result};

use crate::inode::{self, is_ctl, split, Known, KnownInode, LOCAL_ROOT};
use crate::splice::Splice;

/// What a slot serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A file system: has `.zfs`, and child datasets in its root (with a splice).
    Dataset,
    /// A snapshot: read-only, no `.zfs`.
    Snapshot,
}

enum Phase {
    Unopened,
    Open { fs: Arc<dyn FileSystem>, root: Ino },
    Detached,
}

/// One file system of the mount.
pub struct Slot {
    pub index: u32,
    /// Dataset or snapshot name (slot 0: the mount's `fsname`).
    pub name: String,
    pub kind: Kind,
    /// The directory (node id) and name its root is found under; `None`
    /// for the mount's root.
    pub parent: Option<(u64, Vec<u8>)>,
    /// Where its root is, relative to the mount's root.
    pub path: PathBuf,
    readonly: AtomicBool,
    /// Being detached: its name no longer resolves.
    closing: AtomicBool,
    phase: RwLock<Phase>,
    /// Stale local numbers and aliases (see the module comment).
    renum: Mutex<Renumbered>,
    /// Whether `renum` holds anything (the common case skips its lock).
    any_renum: AtomicBool,
}

/// A slot's stale local numbers and aliases.
#[derive(Default)]
struct Renumbered {
    stale: HashSet<u64>,
    alias_of: HashMap<Ino, u64>,
    ino_of: HashMap<u64, Ino>,
    /// The next alias to hand out (0: `ALIAS_BASE`).
    next: u64,
}

impl Slot {
    fn new(index: u32, name: &str, kind: Kind, parent: Option<(u64, Vec<u8>)>, path: PathBuf, phase: Phase) -> Slot {
        Slot {
            index,
            name: name.to_string(),
            kind,
            parent,
            path,
            readonly: AtomicBool::new(kind == Kind::Snapshot),
            closing: AtomicBool::new(false),
            phase: RwLock::new(phase),
            renum: Mutex::new(Renumbered::default()),
            any_renum: AtomicBool::new(false),
        }
    }

    pub fn readonly(&self) -> bool {
        self.readonly.load(Ordering::Acquire)
    }

    /// Refuses changes with `EROFS` from now on (or allows them again).
    /// Snapshots stay read-only.
    pub fn set_readonly(&self, ro: bool) {
        self.readonly.store(ro || self.kind == Kind::Snapshot, Ordering::Release);
    }

    /// The file system, if it has been opened and not detached.
    pub fn opened(&self) -> Option<Arc<dyn FileSystem>> {
        match &*self.phase.read() {
            Phase::Open { fs, .. } => Some(fs.clone()),
            _ => None,
        }
    }

    /// Whether the file system has been opened and not detached.
    pub fn is_open(&self) -> bool {
        matches!(*self.phase.read(), Phase::Open { .. })
    }

    /// The node id of this slot's root.
    pub fn root_nodeid(&self) -> u64 {
        inode::nodeid(self.index, LOCAL_ROOT)
    }

    /// The kernel forgot `local`: if it was stale, it may name an inode again.
    pub fn forgotten(&self, local: u64) {
        if self.any_renum.load(Ordering::Acquire) {
            self.renum.lock().stale.remove(&local);
        }
    }

    /// The inode of `local` in this slot's file system, whose root is
    /// `root`; `EIO` if a rollback made it stale.
    fn ino_at(&self, root: Ino, local: u64) -> PResult<Ino> {
        if !self.any_renum.load(Ordering::Acquire) {
            return Ok(inode::ino_of(root, local));
        }
        let r = self.renum.lock();
        if r.stale.contains(&local) {
            return Err(Errno::new(libc::EIO, format!("'{}': this file is not what it was before the dataset was rolled back", self.name)));
        }
        if local >= inode::ALIAS_BASE {
            return r.ino_of.get(&local).copied().ok_or_else(|| Errno::new(libc::ESTALE, format!("'{}': no inode has alias {local:#x}", self.name)));
        }
        Ok(inode::ino_of(root, local))
    }

    /// Stale local numbers (for tests and logs).
    pub fn stale_count(&self) -> usize {
        self.renum.lock().stale.len()
    }
}

/// A slot entered by a request: its file system, held for read.
pub struct Entered<'a> {
    g: RwLockReadGuard<'a, Phase>,
    pub slot: &'a Slot,
}

impl Entered<'_> {
    pub fn fs(&self) -> &Arc<dyn FileSystem> {
        match &*self.g {
            Phase::Open { fs, .. } => fs,
            _ => unreachable!("an entered slot is open"),
        }
    }

    pub fn root(&self) -> Ino {
        match &*self.g {
            Phase::Open { root, .. } => *root,
            _ => unreachable!("an entered slot is open"),
        }
    }

    /// The file system's inode of a local number; `EIO` if a rollback
    /// made it stale.
    pub fn ino(&self, local: u64) -> PResult<Ino> {
        self.slot.ino_at(self.root(), local)
    }

    /// The node id of the file system's inode `ino` (its alias if it has
    /// one; a new alias if its number is stale).
    pub fn nodeid(&self, ino: Ino) -> PResult<u64> {
        let local = inode::local_of(self.root(), ino).ok_or_else(|| Errno::new(libc::EOVERFLOW, format!("inode {ino} does not fit this mount's inode space")))?;
        if !self.slot.any_renum.load(Ordering::Acquire) {
            return Ok(inode::nodeid(self.slot.index, local));
        }
        let mut r = self.slot.renum.lock();
        let local = r.alias_of.get(&ino).copied().unwrap_or(local);
        if !r.stale.contains(&local) {
            return Ok(inode::nodeid(self.slot.index, local));
        }
        let alias = inode::ALIAS_BASE + r.next;
        if alias > inode::ALIAS_MAX {
            return Err(Errno::new(libc::EOVERFLOW, format!("'{}': no aliases left for renumbered inodes", self.slot.name)));
        }
        r.next += 1;
        r.ino_of.remove(&local);
        r.alias_of.insert(ino, alias);
        r.ino_of.insert(alias, ino);
        Ok(inode::nodeid(self.slot.index, alias))
    }

    /// `EROFS` unless the slot may be changed.
    pub fn writable(&self) -> PResult<()> {
        if self.slot.readonly() {
            return Err(Errno::new(libc::EROFS, format!("'{}' is read-only", self.slot.name)));
        }
        Ok(())
    }
}

/// The file systems one mount serves, by slot.
pub struct FsTable {
    slots: RwLock<Vec<Arc<Slot>>>,
    by_name: Mutex<HashMap<String, u32>>,
    pub splice: Option<Arc<dyn Splice>>,
    /// Requests answered from the wait pool and not yet answered (`defer`).
    pub deferred: Arc<crate::defer::Outstanding>,
}

fn detached(name: &str) -> Errno {
    Errno::new(libc::EIO, format!("'{}' is no longer served by this mount (unmounted or destroyed)", name))
}

impl FsTable {
    /// A table whose slot 0 serves `fs` under `name`.
    pub fn new(fs: Arc<dyn FileSystem>, name: &str, kind: Kind, splice: Option<Arc<dyn Splice>>) -> FsTable {
        let root = fs.root();
        let slot = Arc::new(Slot::new(0, name, kind, None, PathBuf::new(), Phase::Open { fs, root }));
        FsTable { slots: RwLock::new(vec![slot]), by_name: Mutex::new(HashMap::from([(name.to_string(), 0)])), splice, deferred: Default::default() }
    }

    pub fn slot(&self, index: u32) -> PResult<Arc<Slot>> {
        self.slots.read().get(index as usize).cloned().ok_or_else(|| Errno::new(libc::ESTALE, format!("no file system {index} in this mount")))
    }

    /// The slot of a node id and the local number in it.
    pub fn resolve(&self, nodeid: u64) -> PResult<(Arc<Slot>, u64)> {
        let (index, local) = split(nodeid);
        Ok((self.slot(index)?, local))
    }

    /// Enters `slot` for one request, opening it first if it is not open.
    pub fn enter<'a>(&self, slot: &'a Slot) -> PResult<Entered<'a>> {
        let g = slot.phase.read();
        match &*g {
            Phase::Open { .. } => return Ok(Entered { g, slot }),
            Phase::Detached => return Err(detached(&slot.name)),
            Phase::Unopened => drop(g),
        }
        let mut w = slot.phase.write();
        if let Phase::Unopened = &*w {
            let splice = self.splice.as_ref().ok_or_else(|| Errno::new(libc::EIO, format!("'{}': nothing to open it with", slot.name)))?;
            let opened = splice.open(&slot.name)?;
            slot.set_readonly(opened.readonly);
            let root = opened.fs.root();
            *w = Phase::Open { fs: opened.fs, root };
        }
        let g = RwLockWriteGuard::downgrade(w);
        match &*g {
            Phase::Open { .. } => Ok(Entered { g, slot }),
            _ => Err(detached(&slot.name)),
        }
    }

    /// The slot serving `name`, registering an unopened one if there is
    /// none. `ENOENT` while a slot of that name is being detached.
    pub fn register(&self, name: &str, kind: Kind, parent: (u64, Vec<u8>), path: PathBuf) -> PResult<Arc<Slot>> {
        let mut by_name = self.by_name.lock();
        if let Some(&i) = by_name.get(name) {
            let s = self.slot(i)?;
            if s.closing.load(Ordering::Acquire) {
                return Err(Errno::new(libc::ENOENT, format!("'{}' is being unmounted", name)));
            }
            return Ok(s);
        }
        let mut slots = self.slots.write();
        if slots.len() >= inode::MAX_FILESYSTEMS {
            return Err(Errno::new(libc::ENOSPC, format!("this mount has served {} file systems, its most", inode::MAX_FILESYSTEMS)));
        }
        let index = slots.len() as u32;
        let s = Arc::new(Slot::new(index, name, kind, Some(parent), path, Phase::Unopened));
        slots.push(s.clone());
        by_name.insert(name.to_string(), index);
        Ok(s)
    }

    /// The live (not detached) slot serving `name`.
    pub fn find(&self, name: &str) -> Option<Arc<Slot>> {
        let i = *self.by_name.lock().get(name)?;
        self.slot(i).ok()
    }

    /// Live slots whose name is `name` or below it (`name/…`, `name@…`).
    pub fn below(&self, name: &str) -> Vec<Arc<Slot>> {
        let under = |n: &str| n == name || n.strip_prefix(name).is_some_and(|r| r.starts_with('/') || r.starts_with('@'));
        let idx: Vec<u32> = self.by_name.lock().iter().filter(|(n, _)| under(n)).map(|(_, i)| *i).collect();
        idx.into_iter().filter_map(|i| self.slot(i).ok()).collect()
    }

    /// Every live slot, by index.
    pub fn live(&self) -> Vec<Arc<Slot>> {
        let mut idx: Vec<u32> = self.by_name.lock().values().copied().collect();
        idx.sort_unstable();
        idx.into_iter().filter_map(|i| self.slot(i).ok()).collect()
    }

    /// Slot 0's file system.
    pub fn main(&self) -> Arc<dyn FileSystem> {
        let s = self.slot(0).expect("slot 0 exists");
        let e = self.enter(&s).expect("slot 0 stays open");
        e.fs().clone()
    }

    /// Makes every open dataset slot durable (unmount).
    pub fn sync_all(&self) -> PResult<()> {
        let mut first = Ok(());
        for s in self.live().into_iter().filter(|s| s.kind == Kind::Dataset && s.is_open()) {
            if let Ok(e) = self.enter(&s) {
                let r = e.fs().sync_all().map_err(|e| Errno::new(e.errno, format!("'{}': {}", s.name, e.msg)));
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }

    /// Marks `slots` as being detached (their names stop resolving), or
    /// not any more.
    pub fn set_closing(&self, slots: &[Arc<Slot>], on: bool) {
        for s in slots {
            s.closing.store(on, Ordering::Release);
        }
    }

    /// Detaches `slot`: waits for the requests inside it, then it serves
    /// nothing (requests on its node ids fail with `EIO`). Returns the file
    /// system it served, if it was open, for the caller to sync.
    pub fn detach(&self, slot: &Slot) -> Option<Arc<dyn FileSystem>> {
        assert!(slot.index != 0, "slot 0 is unmounted, not detached");
        let mut w = slot.phase.write();
        let old = std::mem::replace(&mut *w, Phase::Detached);
        drop(w);
        let mut by_name = self.by_name.lock();
        if by_name.get(&slot.name) == Some(&slot.index) {
            by_name.remove(&slot.name);
        }
        drop(by_name);
        debug_assert_eq!(self.check_invariants(), Ok(()));
        match old {
            Phase::Open { fs, .. } => Some(fs),
            _ => None,
        }
    }

    /// Checks the invariants of the module comment; walks every slot.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let slots = self.slots.read().clone();
        for (i, s) in slots.iter().enumerate() {
            if s.index as usize != i {
                return Err(format!("slot {} sits at position {}", s.index, i));
            }
            let r = s.renum.lock();
            if let Some(a) = r.ino_of.keys().find(|a| r.stale.contains(a)) {
                return Err(format!("slot '{}': alias {a:#x} is stale and in use", s.name));
            }
        }
        for (name, &i) in self.by_name.lock().iter() {
            let s = slots.get(i as usize).ok_or_else(|| format!("'{name}' maps to missing slot {i}"))?;
            if s.name != *name || matches!(*s.phase.read(), Phase::Detached) {
                return Err(format!("'{name}' maps to slot {i} ('{}', detached or renamed)", s.name));
            }
        }
        if !slots.first().is_some_and(|s| s.is_open()) {
            return Err("slot 0 is not open".into());
        }
        Ok(())
    }

    /// Replaces `slot`'s file system with the one `reopen` returns, no
    /// request being inside the slot meanwhile (see the module comment).
    /// `reopen` runs with the slot held; returning `None` keeps the file
    /// system. An error leaves everything as it was. Returns how many held
    /// inodes survived and how many became stale.
    pub fn replace(&self, slot: &Slot, known: &Known, reopen: impl FnOnce() -> Result<Option<Arc<dyn FileSystem>>>) -> Result<(usize, usize)> {
        let mut w = slot.phase.write();
        let held = match &*w {
            Phase::Open { fs, root } => held_inodes(slot, fs, *root, known),
            _ => Vec::new(),
        };
        let new = reopen()?;
        let (Phase::Open { .. }, Some(new)) = (&*w, new) else {
            return Ok((0, 0));
        };
        let mut survived = 0;
        let mut r = slot.renum.lock();
        for h in &held {
            let local = split(h.known.nodeid).1;
            let same = new.getattr(h.ino).is_ok_and(|a| a.gen == h.known.gen && (a.kind != FileKind::File || Some((a.size, a.mtime, a.ctime)) == h.before));
            if !same {
                r.stale.insert(local);
                // An alias that goes stale names nothing any more.
                if r.ino_of.remove(&local).is_some() {
                    r.alias_of.remove(&h.ino);
                }
                continue;
            }
            for _ in 0..h.known.opens {
                new.open(h.ino).map_err(|e| Error::new(ErrorKind::Io, format!("'{}': reopening inode {} after the rollback: {}", slot.name, h.ino, e)))?;
            }
            survived += 1;
        }
        slot.any_renum.store(!r.stale.is_empty() || !r.alias_of.is_empty(), Ordering::Release);
        drop(r);
        let root = new.root();
        *w = Phase::Open { fs: new, root };
        Ok((survived, held.len() - survived))
    }
}

/// An inode the kernel holds, as it was before a rollback.
struct Held {
    known: KnownInode,
    ino: Ino,
    /// A regular file's size, mtime and ctime.
    before: Option<(u64, Timespec, Timespec)>,
}

/// The inodes the kernel holds in an open slot (not its root or control
/// directories, nor stale ones) and what they are now.
fn held_inodes(slot: &Slot, fs: &Arc<dyn FileSystem>, root: Ino, known: &Known) -> Vec<Held> {
    let mut out = Vec::new();
    for k in known.filtered(|n| split(n).0 == slot.index) {
        let local = split(k.nodeid).1;
        if is_ctl(local) || local == LOCAL_ROOT {
            continue;
        }
        let Ok(ino) = slot.ino_at(root, local) else { continue };
        let before = fs.getattr(ino).ok().filter(|a| a.kind == FileKind::File).map(|a| (a.size, a.mtime, a.ctime));
        out.push(Held { known: k, ino, before });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemFs;
    use tarn_engine::posix::Caller;

    #[test]
    fn slots_resolve_register_and_detach() {
        let a: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let t = FsTable::new(a.clone(), "tank", Kind::Dataset, None);
        let (s, local) = t.resolve(1).expect("the root");
        assert!(s.index == 0 && local == LOCAL_ROOT);
        assert!(Arc::ptr_eq(t.enter(&s).unwrap().fs(), &a));
        let c = t.register("tank/c", Kind::Dataset, (1, b"c".to_vec()), "c".into()).expect("room");
        assert_eq!(c.index, 1);
        assert!(Arc::ptr_eq(&t.register("tank/c", Kind::Dataset, (1, b"c".to_vec()), "c".into()).unwrap(), &c), "one slot per name");
        assert!(!c.is_open());
        assert!(matches!(t.enter(&c), Err(e) if e.errno == libc::EIO), "nothing to open it with");
        assert_eq!(t.below("tank").len(), 2);
        assert_eq!(t.below("tank/c").len(), 1);
        assert!(t.below("tank/cc").is_empty());
        t.set_closing(std::slice::from_ref(&c), true);
        assert!(matches!(t.register("tank/c", Kind::Dataset, (1, b"c".to_vec()), "c".into()), Err(e) if e.errno == libc::ENOENT));
        assert!(t.detach(&c).is_none());
        assert!(t.find("tank/c").is_none());
        let again = t.register("tank/c", Kind::Dataset, (1, b"c".to_vec()), "c".into()).unwrap();
        assert_eq!(again.index, 2, "a slot is never reused");
        assert_eq!(t.check_invariants(), Ok(()));
        assert!(matches!(t.resolve(inode::nodeid(9, 5)), Err(e) if e.errno == libc::ESTALE));
    }

    #[test]
    fn replace_keeps_survivors_and_renumbers_the_rest() {
        let root = Caller::root();
        let old = Arc::new(MemFs::new());
        let make = |fs: &MemFs, name: &[u8], data: &[u8]| {
            let a = fs.mknod(&root, fs.root(), name, libc::S_IFREG | 0o644, 0).unwrap();
            fs.write(&root, a.ino, 0, data).unwrap();
            fs.getattr(a.ino).unwrap()
        };
        let keep = make(&old, b"keep", b"same");
        let changed = make(&old, b"changed", b"before");
        let t = FsTable::new(old.clone(), "tank", Kind::Dataset, None);
        let known = Known::default();
        for (a, name) in [(&keep, &b"keep"[..]), (&changed, b"changed")] {
            known.looked_up(inode::nodeid(0, a.ino), 1, name, a.gen);
        }
        known.opened(inode::nodeid(0, keep.ino));
        known.looked_up(inode::nodeid(0, 99), 1, b"gone", 1);
        let s = t.slot(0).unwrap();
        // The replacement (the rolled-back state): `keep` as it was, `changed`
        // with other contents, no inode 99.
        let new = Arc::new(MemFs::new());
        let keep2 = new.mknod(&root, new.root(), b"keep", libc::S_IFREG | 0o644, 0).unwrap();
        assert_eq!(keep2.ino, keep.ino);
        new.write(&root, keep2.ino, 0, b"same").unwrap();
        let same = tarn_engine::posix::SetAttr { mtime: Some(tarn_engine::posix::TimeOrNow::At(keep.mtime)), ctime: Some(keep.ctime), ..Default::default() };
        new.setattr(&root, keep2.ino, &same).unwrap();
        let changed2 = new.mknod(&root, new.root(), b"changed", libc::S_IFREG | 0o644, 0).unwrap();
        new.write(&root, changed2.ino, 0, b"after, longer").unwrap();
        let (survived, stale) = t.replace(&s, &known, || Ok(Some(new.clone()))).unwrap();
        assert_eq!((survived, stale), (1, 2), "'keep' survives; 'changed' and 99 do not");
        new.release(keep.ino).expect("the open handle was carried over");
        let e = t.enter(&s).unwrap();
        assert!(matches!(e.ino(changed.ino), Err(x) if x.errno == libc::EIO), "the old node id of a changed file fails");
        assert!(matches!(e.ino(99), Err(x) if x.errno == libc::EIO));
        let alias = e.nodeid(changed.ino).unwrap();
        assert!(split(alias).1 >= inode::ALIAS_BASE, "a changed file gets a new node id");
        assert_eq!(e.nodeid(changed.ino).unwrap(), alias, "and keeps it");
        assert_eq!(e.ino(split(alias).1).unwrap(), changed.ino);
        drop(e);
        assert_eq!(t.check_invariants(), Ok(()));
        s.forgotten(99);
        assert!(t.enter(&s).unwrap().ino(99).is_ok(), "a forgotten stale number is free again");
        // An error inside leaves the file system as it was.
        assert!(t.replace(&s, &known, || Err(Error::invalid("no"))).is_err());
        assert!(Arc::ptr_eq(t.enter(&s).unwrap().fs(), &(new as Arc<dyn FileSystem>)));
    }
}
