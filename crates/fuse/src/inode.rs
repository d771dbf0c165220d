//! The mount's inode space, and what the kernel has cached of it.
//!
//! One FUSE mount serves several file systems: the dataset itself (index 0)
//! and, later, each snapshot spliced in under `.zfs/snapshot/NAME`. A FUSE
//! inode number carries the file system's index in its top 16 bits and the
//! file system's own inode number (an object number) in the low 48:
//!
//! ```text
//!  63        48 47                                        0
//! +------------+-------------------------------------------+
//! | fs index   | inode number inside that file system      |
//! +------------+-------------------------------------------+
//! ```
//!
//! The kernel insists that the root is inode 1 (`FUSE_ROOT_ID`). File system
//! 0's root is therefore swapped with its inode 1: root ↔ 1, 1 ↔ root (a
//! bijection, so a file system whose inode 1 is an ordinary file still works).
//! Other file systems keep their numbers; their roots are reached by lookup.
//!
//! Invariants:
//! - `to_fuse` and `from_fuse` are inverse on every (index < 2^16, ino <
//!   2^48, ino != 0) pair; `to_fuse` never returns 0.
//! - An operation naming inodes of two file systems (rename, link,
//!   copy_file_range) fails with `EXDEV`, as across mounts.
//!
//! [`Known`] remembers, per inode the kernel holds (lookup count > 0), its
//! lookup count and the last name it was found under, so that
//! `MountHandle::invalidate_all` can drop every cached entry and attribute
//! after a change the kernel did not see (a rollback).

use std::collections::HashMap;

use parking_lot::Mutex;
use tarn_engine::posix::Ino;

/// Bits of a FUSE inode number that carry the file-system inode.
pub const INO_BITS: u32 = 48;
const INO_MASK: u64 = (1 << INO_BITS) - 1;
/// Most file systems one mount can splice together.
pub const MAX_FILESYSTEMS: usize = 1 << (64 - INO_BITS);

/// The mapping between (file-system index, inode) and FUSE inode numbers.
#[derive(Clone, Copy, Debug)]
pub struct InodeMap {
    /// File system 0's root inode, which appears as FUSE inode 1.
    root0: Ino,
}

impl InodeMap {
    pub fn new(root0: Ino) -> InodeMap {
        assert!(root0 != 0, "inode 0 is not a valid root");
        assert!(root0 <= INO_MASK, "root inode {root0} does not fit in {INO_BITS} bits");
        InodeMap { root0 }
    }

    /// The FUSE inode of `ino` in file system `fs`; `None` if `ino` does not
    /// fit in 48 bits (the caller replies `EOVERFLOW`).
    pub fn to_fuse(&self, fs: usize, ino: Ino) -> Option<u64> {
        assert!(fs < MAX_FILESYSTEMS);
        if ino > INO_MASK || ino == 0 {
            return None;
        }
        let local = if fs == 0 { self.swap(ino) } else { ino };
        Some(((fs as u64) << INO_BITS) | local)
    }

    /// The file-system index and inode of a FUSE inode.
    pub fn from_fuse(&self, fuse: u64) -> (usize, Ino) {
        let fs = (fuse >> INO_BITS) as usize;
        let local = fuse & INO_MASK;
        (fs, if fs == 0 { self.swap(local) } else { local })
    }

    fn swap(&self, ino: Ino) -> Ino {
        if ino == self.root0 {
            1
        } else if ino == 1 {
            self.root0
        } else {
            ino
        }
    }
}

/// One inode the kernel holds references to.
#[derive(Clone, Debug)]
struct KnownInode {
    nlookup: u64,
    /// FUSE inode of the directory and the name it was last looked up under.
    parent: u64,
    name: Vec<u8>,
}

const SHARDS: usize = 16;

/// Inodes the kernel has looked up and not yet forgotten. Sharded so that
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
    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, KnownInode>> {
        &self.shards[(ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS]
    }

    /// The kernel took one more reference to `ino`, found as `parent/name`.
    pub fn looked_up(&self, ino: u64, parent: u64, name: &[u8]) {
        let mut s = self.shard(ino).lock();
        let e = s.entry(ino).or_insert_with(|| KnownInode { nlookup: 0, parent, name: Vec::new() });
        e.nlookup += 1;
        if e.name != name || e.parent != parent {
            e.parent = parent;
            e.name = name.to_vec();
        }
    }

    /// The kernel dropped `n` references (FORGET).
    pub fn forget(&self, ino: u64, n: u64) {
        let mut s = self.shard(ino).lock();
        if let Some(e) = s.get_mut(&ino) {
            e.nlookup = e.nlookup.saturating_sub(n);
            if e.nlookup == 0 {
                s.remove(&ino);
            }
        }
    }

    /// Every held inode with the name it was last found under.
    pub fn snapshot(&self) -> Vec<(u64, u64, Vec<u8>)> {
        let mut out = Vec::new();
        for s in &self.shards {
            out.extend(s.lock().iter().map(|(ino, k)| (*ino, k.parent, k.name.clone())));
        }
        out
    }

    /// Inodes currently held by the kernel.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_is_a_bijection_with_root_at_one() {
        let m = InodeMap::new(34);
        assert_eq!(m.to_fuse(0, 34), Some(1));
        assert_eq!(m.to_fuse(0, 1), Some(34));
        assert_eq!(m.from_fuse(1), (0, 34));
        assert_eq!(m.from_fuse(34), (0, 1));
        for (fs, ino) in [(0, 2), (0, 35), (1, 34), (1, 1), (7, INO_MASK), (MAX_FILESYSTEMS - 1, 5)] {
            let f = m.to_fuse(fs, ino).expect("fits");
            assert_ne!(f, 0);
            assert_eq!(m.from_fuse(f), (fs, ino));
        }
        assert_eq!(m.to_fuse(0, INO_MASK + 1), None);
        assert_eq!(m.to_fuse(3, 0), None);
    }

    #[test]
    fn known_counts_lookups() {
        let k = Known::default();
        k.looked_up(5, 1, b"a");
        k.looked_up(5, 1, b"b");
        assert_eq!(k.snapshot(), vec![(5, 1, b"b".to_vec())]);
        k.forget(5, 1);
        assert_eq!(k.len(), 1);
        k.forget(5, 1);
        assert_eq!(k.len(), 0);
    }
}
