//! Directories the mount composes itself: a dataset's root (the file
//! system's own entries, then the mount's: `.zfs` when `snapdir=visible`
//! and the child datasets served there), `.zfs` (holding `snapshot`) and
//! `.zfs/snapshot` (one directory per snapshot), and the attributes of
//! these control directories.
//!
//! # Cookies
//!
//! A file system's readdir cookies are below 2^63 (the `FileSystem`
//! contract); the mount's own entries in a dataset root use cookies with
//! the top bit set, so one listing walks the file system's entries first
//! and the mount's after them, and a cookie tells which part to resume in.
//! The mount's entries are ordered by a hash of their name and their
//! cookie is that hash: a cookie stays valid whatever is added or removed
//! meanwhile (the file system's keys work the same way). A name of the
//! file system's that the mount serves something else under (a child
//! dataset, `.zfs`) is left out of the first part: the child shadows it, as
//! a mount covers its mountpoint.
//!
//! # Costs
//!
//! The mount's entries of a directory are computed once per `opendir` (the
//! children and snapshots are asked of the splice then) and kept with the
//! directory handle, at most `DIR_HANDLES_MAX` handles at once; beyond
//! that, each READDIR computes them again. Listing children or snapshots
//! registers their slots but opens none: READDIRPLUS gives an unopened
//! one's root made-up attributes valid for 0 s, so the kernel asks again
//! (and opens it) only when someone looks at it.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_engine::posix::{Attr, Errno, FileKind, PResult, Timespec};

use crate::inode::{self, LOCAL_ROOT, LOCAL_SNAPDIR, LOCAL_ZFS};
use crate::ops::Glue;
use crate::table::{Kind, Slot};

/// Cookies of the mount's own entries in a dataset root have this bit.
pub const SYNTH: u64 = 1 << 63;
/// Entries asked of the file system, or taken from the mount's, per batch.
const BATCH: usize = 128;
/// Directory handles with their entries kept at once.
const DIR_HANDLES_MAX: usize = 1024;

/// The name of the control directory in a dataset's root.
pub const ZFS_DIR: &[u8] = b".zfs";
/// The name of the snapshot directory in `.zfs`.
pub const SNAPSHOT_DIR: &[u8] = b"snapshot";

/// What one of the mount's entries serves.
#[derive(Clone, Debug)]
enum What {
    Zfs,
    Child(String),
    Snapshot(String),
}

#[derive(Clone, Debug)]
struct Extra {
    key: u64,
    name: Vec<u8>,
    what: What,
}

/// The mount's entries of one directory, ordered by key.
#[derive(Default)]
pub struct Extras {
    entries: Vec<Extra>,
    /// Names of the file system's own entries to leave out.
    hidden: HashSet<Vec<u8>>,
}

/// A name's place among the mount's entries: 3 … 2^62 + 2 (1 and 2 are
/// "." and "..").
fn key_of(name: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    (h.finish() >> 2) + 3
}

impl Extras {
    fn new(mut entries: Vec<Extra>, hidden: HashSet<Vec<u8>>) -> Extras {
        entries.sort_by(|a, b| (a.key, &a.name).cmp(&(b.key, &b.name)));
        Extras { entries, hidden }
    }

    /// Up to `BATCH` entries after key `after`, and the key to resume
    /// from if more remain.
    fn after(&self, after: u64) -> (&[Extra], Option<u64>) {
        let start = self.entries.partition_point(|e| e.key <= after);
        let end = (start + BATCH).min(self.entries.len());
        let rest = &self.entries[start..end];
        (rest, if end < self.entries.len() { rest.last().map(|e| e.key) } else { None })
    }
}

/// Directory handles and the mount's entries kept with them.
#[derive(Default)]
pub struct DirHandles {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<Extras>>>,
}

impl DirHandles {
    /// Keeps `e` under a new handle (0: no room, computed per READDIR).
    pub fn insert(&self, e: Extras) -> u64 {
        let mut m = self.map.lock();
        if m.len() >= DIR_HANDLES_MAX {
            return 0;
        }
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        m.insert(fh, Arc::new(e));
        fh
    }

    pub fn get(&self, fh: u64) -> Option<Arc<Extras>> {
        self.map.lock().get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) {
        self.map.lock().remove(&fh);
    }
}

/// One entry for a READDIR or READDIRPLUS reply.
pub struct Listed {
    pub nodeid: u64,
    pub name: Vec<u8>,
    pub kind: FileKind,
    pub cookie: u64,
    /// Its attributes (READDIRPLUS); `None`: made up, valid for 0 s.
    pub attr: Option<Attr>,
}

/// Attributes for an entry whose file system is not open: a directory the
/// kernel must ask about again before trusting (they are sent valid for 0 s).
pub fn made_up_dir(nodeid: u64) -> Attr {
    let t = Timespec::now();
    Attr {
        ino: nodeid,
        kind: FileKind::Dir,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        size: 0,
        blocks: 0,
        blksize: 4096,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        gen: 0,
    }
}

/// Whether directory `local` of `slot` has entries of the mount's own.
pub fn composed(glue: &Glue, slot: &Slot, local: u64) -> bool {
    glue.table.splice.is_some() && slot.kind == Kind::Dataset && (local == LOCAL_ROOT || local == LOCAL_SNAPDIR)
}

impl Glue {
    /// The mount's entries of directory `local` of `slot` (a dataset's root
    /// or its `.zfs/snapshot`), asked of the splice now.
    pub fn extras(&self, slot: &Slot, local: u64) -> PResult<Extras> {
        let splice = self.table.splice.as_ref().ok_or_else(|| Errno::new(libc::EIO, "no splice"))?;
        let mut entries = Vec::new();
        let mut hidden = HashSet::new();
        if local == LOCAL_SNAPDIR {
            for s in splice.snapshots(&slot.name)? {
                let full = format!("{}@{}", slot.name, String::from_utf8_lossy(&s));
                entries.push(Extra { key: key_of(&s), name: s, what: What::Snapshot(full) });
            }
            return Ok(Extras::new(entries, hidden));
        }
        hidden.insert(ZFS_DIR.to_vec());
        if splice.snapdir_visible(&slot.name) {
            entries.push(Extra { key: key_of(ZFS_DIR), name: ZFS_DIR.to_vec(), what: What::Zfs });
        }
        for c in splice.children(&slot.name)? {
            let full = format!("{}/{}", slot.name, String::from_utf8_lossy(&c));
            hidden.insert(c.clone());
            entries.push(Extra { key: key_of(&c), name: c, what: What::Child(full) });
        }
        Ok(Extras::new(entries, hidden))
    }

    /// The control directories' attributes: the dataset root's, read-only.
    pub fn ctl_attr(&self, slot: &Slot, local: u64) -> PResult<Attr> {
        let e = self.table.enter(slot)?;
        let mut a = e.fs().getattr(e.root())?;
        a.ino = inode::nodeid(slot.index, local);
        a.perm = 0o555;
        a.nlink = 2;
        a.uid = 0;
        a.gid = 0;
        a.size = 0;
        a.blocks = 0;
        a.gen = 0;
        Ok(a)
    }

    /// The slot serving `full` (a child dataset or snapshot) found as
    /// `name` in directory `parent` of `slot`, registered if new.
    pub fn slot_for(&self, slot: &Slot, parent_local: u64, name: &[u8], full: &str) -> PResult<Arc<Slot>> {
        let shown = String::from_utf8_lossy(name).into_owned();
        let (kind, path) = if parent_local == LOCAL_SNAPDIR {
            (Kind::Snapshot, slot.path.join(".zfs/snapshot").join(&shown))
        } else {
            (Kind::Dataset, slot.path.join(&shown))
        };
        self.table.register(full, kind, (inode::nodeid(slot.index, parent_local), name.to_vec()), path)
    }

    /// The root attributes of `child` as this mount shows them: node id
    /// `slot << 40 | 1`, generation 0 (a slot's root never changes
    /// identity). `None` if it is not open and `open` is false.
    pub fn root_attr(&self, child: &Slot, open: bool) -> PResult<Option<Attr>> {
        if !open && !child.is_open() {
            return Ok(None);
        }
        let e = self.table.enter(child)?;
        let mut a = e.fs().getattr(e.root())?;
        a.ino = child.root_nodeid();
        a.gen = 0;
        Ok(Some(a))
    }

    fn listed_extra(&self, slot: &Slot, local: u64, x: &Extra, plus: bool, cookie: u64) -> PResult<Option<Listed>> {
        let (nodeid, attr) = match &x.what {
            What::Zfs => {
                let n = inode::nodeid(slot.index, LOCAL_ZFS);
                (n, if plus { Some(self.ctl_attr(slot, LOCAL_ZFS)?) } else { None })
            }
            What::Child(full) | What::Snapshot(full) => {
                // A name being unmounted is left out.
                let Ok(child) = self.slot_for(slot, local, &x.name, full) else { return Ok(None) };
                let attr = if plus { self.root_attr(&child, false).unwrap_or(None) } else { None };
                (child.root_nodeid(), attr)
            }
        };
        Ok(Some(Listed { nodeid, name: x.name.clone(), kind: FileKind::Dir, cookie, attr }))
    }

    /// One batch of directory `nodeid`'s entries after `cookie`, and the
    /// cookie to continue from (`None`: that was the end).
    pub fn list_batch(&self, nodeid: u64, fh: u64, cookie: u64, plus: bool) -> PResult<(Vec<Listed>, Option<u64>)> {
        let (slot, local) = self.table.resolve(nodeid)?;
        if local == LOCAL_ZFS {
            return self.list_zfs(&slot, cookie, plus);
        }
        let extras = if composed(self, &slot, local) {
            Some(match self.dirs.get(fh) {
                Some(x) => x,
                None => Arc::new(self.extras(&slot, local)?),
            })
        } else {
            None
        };
        if local == LOCAL_SNAPDIR {
            let x = extras.ok_or_else(|| Errno::new(libc::ENOENT, format!("'{}' has no snapshot directory", slot.name)))?;
            return self.list_snapdir(&slot, &x, cookie, plus);
        }
        if cookie >= SYNTH {
            let x = extras.ok_or_else(|| Errno::new(libc::EINVAL, format!("readdir cookie {cookie:#x} of a directory that has none such")))?;
            return self.list_extras(&slot, local, &x, cookie & !SYNTH, plus);
        }
        let (mut out, next) = self.list_fs(&slot, local, cookie, plus, extras.as_deref())?;
        match (next, extras) {
            (Some(c), _) => Ok((out, Some(c))),
            (None, Some(x)) => {
                let (more, next) = self.list_extras(&slot, local, &x, 0, plus)?;
                out.extend(more);
                Ok((out, next))
            }
            (None, None) => Ok((out, None)),
        }
    }

    /// The file system's own entries; `None` as the next cookie once
    /// they are exhausted.
    fn list_fs(&self, slot: &Slot, local: u64, cookie: u64, plus: bool, extras: Option<&Extras>) -> PResult<(Vec<Listed>, Option<u64>)> {
        let e = self.table.enter(slot)?;
        let ino = e.ino(local)?;
        let raw: Vec<_> = if plus {
            e.fs().readdirplus(ino, cookie, BATCH)?.into_iter().map(|(d, a)| (d, Some(a))).collect()
        } else {
            e.fs().readdir(ino, cookie, BATCH)?.into_iter().map(|d| (d, None)).collect()
        };
        let Some(last) = raw.last().map(|(d, _)| d.cookie) else { return Ok((Vec::new(), None)) };
        if last >= SYNTH || last <= cookie {
            return Err(Errno::new(libc::EIO, format!("'{}': readdir cookie {last:#x} after {cookie:#x} breaks the FileSystem contract", slot.name)));
        }
        let mut out = Vec::with_capacity(raw.len());
        for (d, a) in raw {
            if extras.is_some_and(|x| x.hidden.contains(&d.name)) {
                continue;
            }
            let mut nodeid = e.nodeid(d.ino)?;
            if d.name == b".." && local == LOCAL_ROOT {
                if let Some((p, _)) = &slot.parent {
                    nodeid = *p;
                }
            }
            let attr = a.map(|mut a| {
                a.ino = nodeid;
                if inode::split(nodeid).1 == LOCAL_ROOT {
                    a.gen = 0;
                }
                a
            });
            out.push(Listed { nodeid, name: d.name, kind: d.kind, cookie: d.cookie, attr });
        }
        Ok((out, Some(last)))
    }

    fn list_extras(&self, slot: &Slot, local: u64, x: &Extras, after: u64, plus: bool) -> PResult<(Vec<Listed>, Option<u64>)> {
        let (batch, next) = x.after(after);
        let mut out = Vec::with_capacity(batch.len());
        for e in batch {
            out.extend(self.listed_extra(slot, local, e, plus, SYNTH | e.key)?);
        }
        Ok((out, next.map(|k| SYNTH | k)))
    }

    fn dots(&self, here: u64, up: u64, cookie: u64, attrs: impl Fn(u64) -> PResult<Option<Attr>>) -> PResult<Vec<Listed>> {
        let mut out = Vec::new();
        for (c, name, n) in [(1, &b"."[..], here), (2, &b".."[..], up)] {
            if cookie < c {
                out.push(Listed { nodeid: n, name: name.to_vec(), kind: FileKind::Dir, cookie: c, attr: attrs(n)? });
            }
        }
        Ok(out)
    }

    fn list_zfs(&self, slot: &Slot, cookie: u64, plus: bool) -> PResult<(Vec<Listed>, Option<u64>)> {
        let (zfs, snapdir) = (inode::nodeid(slot.index, LOCAL_ZFS), inode::nodeid(slot.index, LOCAL_SNAPDIR));
        let attrs = |n: u64| -> PResult<Option<Attr>> {
            if !plus {
                return Ok(None);
            }
            match inode::split(n).1 {
                LOCAL_ROOT => self.root_attr(slot, true),
                l => self.ctl_attr(slot, l).map(Some),
            }
        };
        let mut out = self.dots(zfs, slot.root_nodeid(), cookie, attrs)?;
        if cookie < 3 {
            out.push(Listed { nodeid: snapdir, name: SNAPSHOT_DIR.to_vec(), kind: FileKind::Dir, cookie: 3, attr: attrs(snapdir)? });
        }
        Ok((out, None))
    }

    fn list_snapdir(&self, slot: &Slot, x: &Extras, cookie: u64, plus: bool) -> PResult<(Vec<Listed>, Option<u64>)> {
        let (zfs, snapdir) = (inode::nodeid(slot.index, LOCAL_ZFS), inode::nodeid(slot.index, LOCAL_SNAPDIR));
        let attrs = |n: u64| -> PResult<Option<Attr>> { if plus { self.ctl_attr(slot, inode::split(n).1).map(Some) } else { Ok(None) } };
        let mut out = self.dots(snapdir, zfs, cookie, attrs)?;
        let (batch, next) = x.after(cookie.max(2));
        for e in batch {
            out.extend(self.listed_extra(slot, LOCAL_SNAPDIR, e, plus, e.key)?);
        }
        Ok((out, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_resume_after_any_key() {
        let names: Vec<Vec<u8>> = (0..300).map(|i| format!("child{i}").into_bytes()).collect();
        let x = Extras::new(names.iter().map(|n| Extra { key: key_of(n), name: n.clone(), what: What::Zfs }).collect(), HashSet::new());
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let (batch, next) = x.after(after);
            assert!(batch.len() <= BATCH);
            seen.extend(batch.iter().map(|e| e.name.clone()));
            match next {
                Some(k) => after = k,
                None => break,
            }
        }
        seen.sort();
        let mut want = names.clone();
        want.sort();
        assert_eq!(seen, want, "every entry once");
        assert!(x.entries.iter().all(|e| e.key >= 3 && e.key < SYNTH));
    }
}
