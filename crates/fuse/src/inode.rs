//! The mount's inode space, and what the kernel has cached of it.
//!
//! One FUSE mount serves several file systems (see `table`): the mounted
//! dataset (slot 0), child datasets served inside it, and snapshots under
//! `.zfs/snapshot/NAME`. A FUSE inode number (a *node id*) carries the
//! file system's slot in its top 24 bits and a *local* number in the low 40:
//!
//! ```text
//!  63             40 39                                     0
//! +-----------------+----------------------------------------+
//! | slot            | local number inside that file system   |
//! +-----------------+----------------------------------------+
//! ```
//!
//! A local number is the file system's own inode number, except that every
//! file system's root is swapped with its inode 1 (root ↔ 1, 1 ↔ root: a
//! bijection, so a file system whose inode 1 is an ordinary file still
//! works). So slot 0's root is node id 1, as the kernel insists
//! (`FUSE_ROOT_ID`), and any slot's root is `slot << 40 | 1` — known before
//! the file system is opened, which is what lets a directory list child
//! datasets and snapshots without opening them. The two highest local
//! numbers are the mount's own directories in each dataset: `.zfs` and
//! `.zfs/snapshot`; the upper half below them is for aliases (inodes
//! renumbered by a rollback, see `table`), so a file system's own inode
//! numbers go up to 2^39 − 1. Slots are never reused within a mount, so a node id
//! names one file-system inode for the mount's whole life, and the live
//! dataset's inodes never collide with its snapshots' (same object numbers,
//! different slots).
//!
//! Invariants (checked by the unit tests below):
//! - `local_of` and `ino_of` are inverse for one root on every inode in
//!   `1..=INO_MAX`, and never produce an alias or control number;
//!   `nodeid` never returns 0;
//! - an operation naming inodes of two slots (rename, link,
//!   copy_file_range) fails with `EXDEV`, as across mounts.
//!
//! [`Known`] remembers, per node id the kernel holds (lookup count > 0), its
//! lookup count, the names the kernel was given it under (every hard link
//! looked up, and the new name of a rename made through the mount), its
//! generation and its open handles: invalidation after a change the kernel
//! did not see (a rollback, a detached dataset) needs every name the kernel
//! may have cached, or a name gone in the rollback would still resolve
//! until its entry timed out; telling which inodes
//! survived a rollback needs the generations; carrying open files over to
//! the reopened file system needs the handle counts.

use std::collections::HashMap;

use parking_lot::Mutex;
use tarn_engine::posix::Ino;

/// Bits of a node id that carry the local number.
pub const INO_BITS: u32 = 40;
const LOCAL_MASK: u64 = (1 << INO_BITS) - 1;
/// Most file systems (slots) one mount can splice together over its life.
pub const MAX_FILESYSTEMS: usize = 1 << (64 - INO_BITS);
/// Local number of a dataset's `.zfs` directory (in every dataset slot).
pub const LOCAL_ZFS: u64 = LOCAL_MASK;
/// Local number of a dataset's `.zfs/snapshot` directory.
pub const LOCAL_SNAPDIR: u64 = LOCAL_MASK - 1;
/// The largest inode number a served file system may use.
pub const INO_MAX: u64 = (1 << (INO_BITS - 1)) - 1;
/// Local numbers from here to `ALIAS_MAX` are handed out by the mount to
/// inodes that need a new node id after a rollback (see `table`).
pub const ALIAS_BASE: u64 = INO_MAX + 1;
pub const ALIAS_MAX: u64 = LOCAL_SNAPDIR - 1;
/// Local number of every file system's root.
pub const LOCAL_ROOT: u64 = 1;

/// The node id of `local` in `slot`.
pub fn nodeid(slot: u32, local: u64) -> u64 {
    assert!((slot as usize) < MAX_FILESYSTEMS, "slot {slot} out of range");
    assert!(local != 0 && local <= LOCAL_MASK, "local number {local} out of range");
    ((slot as u64) << INO_BITS) | local
}

/// The slot and local number of a node id.
pub fn split(nodeid: u64) -> (u32, u64) {
    ((nodeid >> INO_BITS) as u32, nodeid & LOCAL_MASK)
}

/// Whether a local number is one of the mount's own directories.
pub fn is_ctl(local: u64) -> bool {
    local == LOCAL_ZFS || local == LOCAL_SNAPDIR
}

/// The local number of inode `ino` of a file system whose root is `root`;
/// `None` if it does not fit (the caller replies `EOVERFLOW`).
pub fn local_of(root: Ino, ino: Ino) -> Option<u64> {
    if ino == 0 || ino > INO_MAX {
        return None;
    }
    Some(swap(root, ino))
}

/// The file system's inode of a local number (`local` not a control one).
pub fn ino_of(root: Ino, local: u64) -> Ino {
    swap(root, local)
}

fn swap(root: Ino, x: u64) -> u64 {
    if x == root {
        LOCAL_ROOT
    } else if x == LOCAL_ROOT {
        root
    } else {
        x
    }
}

/// One node id the kernel holds references to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownInode {
    pub nodeid: u64,
    pub nlookup: u64,
    /// (directory node id, name) the kernel was given it under, oldest
    /// first, at most `NAMES_MAX`; a name since unlinked or renamed away
    /// may linger (invalidating it is harmless).
    pub names: Vec<(u64, Vec<u8>)>,
    /// The generation the kernel was given for it.
    pub gen: u64,
    /// Open file handles (OPEN and CREATE minus RELEASE).
    pub opens: u32,
}

const SHARDS: usize = 16;
/// Names remembered per node id; beyond it the oldest goes (that name is
/// then left to its entry timeout after a rollback).
const NAMES_MAX: usize = 8;

impl KnownInode {
    fn add_name(&mut self, parent: u64, name: &[u8]) {
        if self.names.iter().any(|(p, n)| *p == parent && n == name) {
            return;
        }
        if self.names.len() == NAMES_MAX {
            self.names.remove(0);
        }
        self.names.push((parent, name.to_vec()));
    }
}

/// Node ids the kernel has looked up and not yet forgotten. Sharded so that
/// worker threads replying to lookups in parallel rarely share a lock.
pub struct Known {
    shards: Vec<Mutex<HashMap<u64, KnownInode>>>,
}

impl Default for Known {
    fn default() -> Self {
        Known { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

impl Known {
    fn shard(&self, nodeid: u64) -> &Mutex<HashMap<u64, KnownInode>> {
        &self.shards[(nodeid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS]
    }

    /// The kernel took one more reference to `nodeid`, found as `parent/name`.
    pub fn looked_up(&self, nodeid: u64, parent: u64, name: &[u8], gen: u64) {
        let mut s = self.shard(nodeid).lock();
        let e = s.entry(nodeid).or_insert_with(|| KnownInode { nodeid, nlookup: 0, names: Vec::new(), gen, opens: 0 });
        e.nlookup += 1;
        e.gen = gen;
        e.add_name(parent, name);
    }

    /// `nodeid`, if the kernel holds it, is now also known as `parent/name`
    /// (a rename through the mount moved the kernel's entry there).
    pub fn also_named(&self, nodeid: u64, parent: u64, name: &[u8]) {
        if let Some(e) = self.shard(nodeid).lock().get_mut(&nodeid) {
            e.add_name(parent, name);
        }
    }

    /// The kernel dropped `n` references (FORGET); true if it holds none now.
    pub fn forget(&self, nodeid: u64, n: u64) -> bool {
        let mut s = self.shard(nodeid).lock();
        let Some(e) = s.get_mut(&nodeid) else { return true };
        e.nlookup = e.nlookup.saturating_sub(n);
        if e.nlookup == 0 {
            s.remove(&nodeid);
            return true;
        }
        false
    }

    /// A file handle was opened on `nodeid`.
    pub fn opened(&self, nodeid: u64) {
        if let Some(e) = self.shard(nodeid).lock().get_mut(&nodeid) {
            e.opens += 1;
        }
    }

    /// A file handle on `nodeid` was released.
    pub fn released(&self, nodeid: u64) {
        if let Some(e) = self.shard(nodeid).lock().get_mut(&nodeid) {
            e.opens = e.opens.saturating_sub(1);
        }
    }

    /// Every held node id for which `keep` holds.
    pub fn filtered(&self, keep: impl Fn(u64) -> bool) -> Vec<KnownInode> {
        let mut out = Vec::new();
        for s in &self.shards {
            out.extend(s.lock().values().filter(|k| keep(k.nodeid)).cloned());
        }
        out
    }

    /// Held node ids for which `keep` holds, counted without copying.
    pub fn count(&self, keep: impl Fn(u64) -> bool) -> usize {
        self.shards.iter().map(|s| s.lock().keys().filter(|n| keep(**n)).count()).sum()
    }

    /// Node ids currently held by the kernel.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_numbers_are_a_bijection_with_root_at_one() {
        for root in [34, 1, 2, INO_MAX] {
            assert_eq!(local_of(root, root), Some(LOCAL_ROOT));
            for ino in [1, 2, 3, 34, 35, INO_MAX - 1, INO_MAX] {
                let l = local_of(root, ino).expect("fits");
                assert!(!is_ctl(l) && l < ALIAS_BASE, "inode {ino} maps onto a control or alias number");
                assert_eq!(ino_of(root, l), ino);
            }
            assert_eq!(local_of(root, 0), None);
            assert_eq!(local_of(root, INO_MAX + 1), None);
        }
        for (slot, local) in [(0, 1), (0, 35), (1, 1), (7, LOCAL_ZFS), ((MAX_FILESYSTEMS - 1) as u32, LOCAL_SNAPDIR)] {
            let n = nodeid(slot, local);
            assert_ne!(n, 0);
            assert_eq!(split(n), (slot, local));
        }
        assert_eq!(nodeid(0, LOCAL_ROOT), 1, "the mount's root is FUSE_ROOT_ID");
    }

    #[test]
    fn known_counts_lookups_and_handles() {
        let k = Known::default();
        k.looked_up(5, 1, b"a", 7);
        k.looked_up(5, 1, b"b", 7);
        k.looked_up(5, 1, b"a", 7);
        k.also_named(5, 2, b"c");
        k.also_named(6, 1, b"not held");
        k.opened(5);
        let got = k.filtered(|_| true);
        let names = vec![(1, b"a".to_vec()), (1, b"b".to_vec()), (2, b"c".to_vec())];
        assert_eq!(got, vec![KnownInode { nodeid: 5, nlookup: 3, names, gen: 7, opens: 1 }]);
        for i in 0..20u8 {
            k.also_named(5, 3, &[i]);
        }
        let names = &k.filtered(|_| true)[0].names;
        assert_eq!(names.len(), NAMES_MAX);
        assert_eq!(names.last(), Some(&(3, vec![19])), "the newest names are kept");
        k.released(5);
        assert!(!k.forget(5, 2));
        assert_eq!(k.count(|n| n == 5), 1);
        assert!(k.forget(5, 1));
        assert_eq!(k.len(), 0);
    }
}
