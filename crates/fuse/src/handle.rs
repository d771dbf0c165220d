//! What the daemon does to a running mount's slots: list what it serves,
//! detach a child dataset or snapshot (destroy, rename, unmount), replace a
//! file system after a rollback, mark one read-only, and tell the kernel
//! that a name changed.
//!
//! # Invalidation and submounts
//!
//! Telling the kernel to forget an entry (`FUSE_NOTIFY_INVAL_ENTRY`) makes
//! it `d_invalidate` the dentry, which also *detaches every mount below it*
//! (Linux since 3.18). A dataset mounted on its own on a directory inside
//! this mount (`tarn mount tank/a/b` inside `tank`'s) would silently go. So
//! the entries that are mount points are never invalidated: they are found
//! in `/proc/self/mountinfo` and mapped to (directory node id, name) by a
//! `stat` of their parent directory, whose `st_ino` in this mount is its
//! node id. Attributes and pages (`FUSE_NOTIFY_INVAL_INODE`) are safe.
//!
//! # Detaching and busy datasets
//!
//! OpenZFS unmounts a snapshot automounted under `.zfs` before destroying
//! it and fails the destroy with `EBUSY` when that unmount fails because the
//! snapshot is in use (`zfs_ioc_destroy_snaps`, then the long-hold check);
//! `zfs destroy` of a mounted file system unmounts it, busy unless `-f`.
//! A slot spliced into a mount has no mount of its own to ask the kernel
//! about, so "in use" is measured: its name stops resolving, the kernel is
//! told to drop every entry of it, and if after `DETACH_WAIT` the kernel
//! still holds one of its inodes (an open file, a working directory, a
//! mount on a directory in it), it is busy and is served again as before.
//! Forced, it is detached anyway: what the kernel still holds fails with
//! `EIO`, as files of a forcibly unmounted OpenZFS file system do.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::INodeNo;
use tarn_engine::posix::FileSystem;
use tarn_engine::{Error, ErrorKind, Result};

use crate::inode::{self, split, LOCAL_ROOT, LOCAL_SNAPDIR};
use crate::table::{Kind, Slot};
use crate::{MountHandle, Served};

/// How long a detach waits for the kernel to forget the slot's inodes.
const DETACH_WAIT: Duration = Duration::from_millis(1000);
/// Mount points looked at per invalidation (a bound on the `stat`s).
const SUBMOUNTS_MAX: usize = 4096;

impl MountHandle {
    /// The file systems this mount serves: slot 0 and every child dataset
    /// and snapshot it has registered and not detached.
    pub fn served(&self) -> Vec<Served> {
        self.table.live().iter().map(|s| Served { name: s.name.clone(), kind: s.kind, path: self.dir.join(&s.path), open: s.is_open() }).collect()
    }

    /// Whether this mount serves `name` (slot 0, or registered in it).
    pub fn serves(&self, name: &str) -> bool {
        self.table.find(name).is_some()
    }

    /// Refuses (or allows again) changes to the file system serving `name`
    /// with `EROFS`; false if this mount does not serve it.
    pub fn set_readonly(&self, name: &str, ro: bool) -> bool {
        self.table.find(name).map(|s| s.set_readonly(ro)).is_some()
    }

    /// Passes new `atime`/`relatime` settings to the file system serving
    /// `name`, if it is open (one opened later reads them itself); false
    /// if this mount does not serve `name`.
    pub fn set_access_times(&self, name: &str, atime: bool, relatime: bool) -> bool {
        let Some(slot) = self.table.find(name) else { return false };
        if let Some(fs) = slot.opened() {
            fs.set_access_times(atime, relatime);
        }
        true
    }

    /// Passes a new `sync` setting to the file system serving `name`, if
    /// it is open; false if this mount does not serve `name`.
    pub fn set_sync_policy(&self, name: &str, policy: tarn_engine::posix::SyncPolicy) -> bool {
        let Some(slot) = self.table.find(name) else { return false };
        if let Some(fs) = slot.opened() {
            fs.set_sync_policy(policy);
        }
        true
    }

    /// The kernel should ask again about `names` (datasets or snapshots
    /// just created, renamed or changed): drops the entry for each in the
    /// directory that holds it, if this mount serves that directory.
    pub fn refresh(&self, names: &[&str]) {
        let mut skip = None;
        for name in names {
            let (container, local, short) = match name.split_once('@') {
                Some((fs, snap)) => (fs, LOCAL_SNAPDIR, snap),
                None => match name.rsplit_once('/') {
                    Some((parent, short)) => (parent, LOCAL_ROOT, short),
                    None => continue,
                },
            };
            let Some(slot) = self.table.find(container).filter(|s| s.kind == Kind::Dataset) else { continue };
            let dir = inode::nodeid(slot.index, local);
            let skip = skip.get_or_insert_with(|| self.submount_entries());
            if !skip.contains(&(dir, short.as_bytes().to_vec())) {
                let _ = self.notifier.inval_entry(INodeNo(dir), OsStr::new(short));
            }
            let _ = self.notifier.inval_inode(INodeNo(dir), 0, 0);
        }
    }

    /// Detaches `name` and every file system below it (`name/…`, `name@…`)
    /// spliced into this mount; returns their names (none: not served
    /// here). Busy (see the module comment) fails with
    /// [`ErrorKind::Busy`] unless `force`. Slot 0 is not detached: its
    /// mount is unmounted instead.
    pub fn detach(&self, name: &str, force: bool) -> Result<Vec<String>> {
        let slots: Vec<Arc<Slot>> = self.table.below(name).into_iter().filter(|s| s.index != 0).collect();
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        // Mount points are found first: a path through a closing slot no
        // longer resolves.
        let skip = self.submount_entries();
        self.table.set_closing(&slots, true);
        let idx: HashSet<u32> = slots.iter().map(|s| s.index).collect();
        let inside = |n: u64| idx.contains(&split(n).0);
        self.invalidate_with(inside, &skip);
        for s in &slots {
            if let Some((dir, short)) = &s.parent {
                if !skip.contains(&(*dir, short.clone())) {
                    let _ = self.notifier.inval_entry(INodeNo(*dir), OsStr::from_bytes(short));
                }
            }
        }
        if !force {
            let deadline = Instant::now() + DETACH_WAIT;
            while self.known.count(inside) > 0 {
                if Instant::now() > deadline {
                    self.table.set_closing(&slots, false);
                    return Err(Error::new(
                        ErrorKind::Busy,
                        format!("'{}' is busy: files are open or a process has its working directory there ({})", name, self.dir.join(&slots[0].path).display()),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let mut synced = Ok(());
        for s in &slots {
            if let Some(fs) = self.table.detach(s) {
                if s.kind == Kind::Dataset {
                    if let Err(e) = fs.sync_all() {
                        synced = Err(Error::new(ErrorKind::Io, format!("syncing '{}' as it was unmounted: {}", s.name, e)));
                    }
                }
            }
            if let Some(sp) = &self.table.splice {
                sp.closed(&s.name);
            }
        }
        synced.map(|()| slots.iter().map(|s| s.name.clone()).collect())
    }

    /// Replaces the file system serving `name` in this mount by the one
    /// `reopen` returns (after it rolled the dataset back), as OpenZFS's
    /// `zfs_suspend_fs` … `zfs_resume_fs`: what the kernel caches of it is
    /// written back and dropped, the slot is held with no request inside
    /// while `reopen` runs, inodes that survive keep working and the others
    /// fail with `EIO` (see `table`), then the kernel's caches are dropped
    /// again. `None` if this mount does not serve `name`; else how many held
    /// inodes survived and how many became stale. An error from `reopen`
    /// leaves the file system as it was.
    pub fn replace(&self, name: &str, reopen: impl FnOnce() -> Result<Option<Arc<dyn FileSystem>>>) -> Result<Option<(usize, usize)>> {
        let Some(slot) = self.table.find(name) else { return Ok(None) };
        // The root keeps its name and node id: only its attributes change.
        let in_slot = |n: u64| split(n).0 == slot.index && split(n).1 != LOCAL_ROOT;
        // Dirty pages reach the file system before it is replaced.
        self.invalidate_where(in_slot);
        let got = self.table.replace(&slot, &self.known, reopen);
        // Pages and names cached meanwhile, and the root's attributes.
        self.invalidate_where(in_slot);
        let _ = self.notifier.inval_inode(INodeNo(slot.root_nodeid()), 0, 0);
        got.map(Some)
    }

    /// Stale inodes of the file system serving `name` (after a rollback).
    pub fn stale_inodes(&self, name: &str) -> usize {
        self.table.find(name).map_or(0, |s| s.stale_count())
    }

    /// Drops the kernel's cached pages, attributes and names of every held
    /// node id for which `which` holds (mount points excepted); how many.
    pub(crate) fn invalidate_where(&self, which: impl Fn(u64) -> bool) -> usize {
        let skip = if self.known.count(&which) == 0 { HashSet::new() } else { self.submount_entries() };
        self.invalidate_with(which, &skip)
    }

    /// As `invalidate_where`, the mount points to leave alone given.
    fn invalidate_with(&self, which: impl Fn(u64) -> bool, skip: &HashSet<(u64, Vec<u8>)>) -> usize {
        let held = self.known.filtered(which);
        for k in &held {
            let _ = self.notifier.inval_inode(INodeNo(k.nodeid), 0, 0);
            // ENOENT means the kernel already dropped the entry: fine.
            for (parent, name) in &k.names {
                if !skip.contains(&(*parent, name.clone())) {
                    let _ = self.notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name));
                }
            }
        }
        let _ = self.notifier.inval_inode(INodeNo::ROOT, 0, 0);
        held.len()
    }

    /// (directory node id, name) of every entry on the way from this
    /// mount's root to each mount point inside it: invalidating any of them
    /// would detach that mount.
    fn submount_entries(&self) -> HashSet<(u64, Vec<u8>)> {
        let Ok(table) = crate::mountpoint::mount_table() else { return HashSet::new() };
        let Ok(dev) = std::fs::metadata(&self.dir).map(|m| m.dev()) else { return HashSet::new() };
        let mut out = HashSet::new();
        let points = table.into_iter().map(|e| e.mount_point);
        for point in points.filter(|p| p.starts_with(&self.dir) && *p != self.dir).take(SUBMOUNTS_MAX) {
            let Ok(rel) = point.strip_prefix(&self.dir) else { continue };
            let mut dir = self.dir.clone();
            let mut dir_ino = inode::nodeid(0, LOCAL_ROOT);
            let parts: Vec<_> = rel.iter().collect();
            for (i, name) in parts.iter().enumerate() {
                out.insert((dir_ino, name.as_bytes().to_vec()));
                if i + 1 == parts.len() {
                    break;
                }
                dir.push(name);
                // A directory of another file system on the way: what lies
                // below it is not this mount's.
                match std::fs::symlink_metadata(&dir) {
                    Ok(m) if m.dev() == dev => dir_ino = m.ino(),
                    _ => break,
                }
            }
        }
        out
    }
}
