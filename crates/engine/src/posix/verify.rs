//! The POSIX layer's invariant checker: walks the whole tree from the root
//! and checks what the module comment of `posix` promises. Call it with no
//! writers active (tests, `inspect`).

use std::collections::HashMap;

use super::api::*;
use super::dir;
use super::fs::{err, PosixFs};

/// What `PosixFs::verify` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PosixReport {
    pub directories: u64,
    pub files: u64,
    pub entries: u64,
}

/// Entries read per directory listing call of the walk.
const WALK_BATCH: usize = 4096;

impl PosixFs {
    /// Checks, for every inode reachable from the root:
    /// - a directory's size is its entry count and its link count is 2 plus
    ///   its subdirectories; each subdirectory names it as parent (so a
    ///   directory has one name: the walk meets it once);
    /// - each entry's kind is its inode's kind;
    /// - a file's size is its object's size;
    /// - a non-directory's link count is the number of entries naming it,
    ///   plus nothing: nameless inodes are only on the unlinked set.
    pub fn verify(&self) -> PResult<PosixReport> {
        let _ns = self.ns.read();
        let mut report = PosixReport::default();
        let mut names: HashMap<Ino, u64> = HashMap::new();
        // Explicit stack, bounded by the number of directories.
        let mut stack = vec![self.root];
        while let Some(d) = stack.pop() {
            report.directories += 1;
            let (entries, subdirs) = self.verify_dir(d, &mut stack, &mut names)?;
            report.entries += entries;
            let a = self.do_getattr(d)?;
            if a.size != entries + 2 || a.nlink as u64 != 2 + subdirs {
                return Err(err(libc::EIO, format!("directory {}: size {} and {} links, but {} entries and {} subdirectories", d, a.size, a.nlink, entries, subdirs)));
            }
            if report.directories > self.os.next_object() {
                return Err(err(libc::EIO, "the directory walk does not end: a directory has two names"));
            }
        }
        for (ino, n) in names {
            report.files += 1;
            let a = self.do_getattr(ino)?;
            if a.nlink as u64 != n {
                return Err(err(libc::EIO, format!("inode {}: {} links but {} names", ino, a.nlink, n)));
            }
            let size = self.os.info(ino)?.size;
            if a.kind == FileKind::File && size != a.size {
                return Err(err(libc::EIO, format!("file {}: size {} but its object has {}", ino, a.size, size)));
            }
        }
        Ok(report)
    }

    /// One directory's entries: subdirectories go on `stack`, other inodes
    /// are counted in `names`. Returns (entries, subdirectories).
    fn verify_dir(&self, d: Ino, stack: &mut Vec<Ino>, names: &mut HashMap<Ino, u64>) -> PResult<(u64, u64)> {
        let (mut entries, mut subdirs) = (0u64, 0u64);
        let mut after = None;
        loop {
            let batch = dir::list(&self.os, d, after, WALK_BATCH)?;
            let Some(last) = batch.last() else { break };
            after = Some(last.key);
            for e in &batch {
                entries += 1;
                let a = self.do_getattr(e.ino)?;
                if a.kind != e.kind {
                    return Err(err(libc::EIO, format!("entry {:?} of directory {} says {:?}, inode {} is {:?}", String::from_utf8_lossy(&e.name), d, e.kind, e.ino, a.kind)));
                }
                if e.kind == FileKind::Dir {
                    subdirs += 1;
                    let (_, p) = self.dir_inode(e.ino)?;
                    if p.parent != d {
                        return Err(err(libc::EIO, format!("directory {} in {} names {} as parent", e.ino, d, p.parent)));
                    }
                    stack.push(e.ino);
                } else {
                    *names.entry(e.ino).or_default() += 1;
                }
            }
        }
        Ok((entries, subdirs))
    }
}
