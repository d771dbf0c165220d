//! Random namespace operations against an in-memory POSIX tree.
//!
//! Invariants checked: every mkdir, mknod, symlink, link, unlink, rmdir and
//! rename (plain, NOREPLACE, EXCHANGE) succeeds or fails with the errno the
//! model predicts; afterwards each directory lists exactly the model's
//! names with the model's inodes, and every inode has the model's link count
//! and kind — also after export and import, and `PosixFs::verify` passes.
//!
//! Seeded by `TARN_NS_SEED` (printed); `TARN_NS_OPS` sets the count.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::{Mounted, Rng};
use tarn_engine::posix::*;

const ROOT: Caller = Caller::new(0, 0, 1, 0);
const NAMES: u64 = 6;

#[derive(Clone, Debug)]
struct Node {
    kind: FileKind,
    nlink: u32,
    /// Directories: name → inode.
    children: BTreeMap<Vec<u8>, Ino>,
    parent: Ino,
}

struct Model {
    nodes: HashMap<Ino, Node>,
    root: Ino,
}

impl Model {
    fn dirs(&self) -> Vec<Ino> {
        let mut v: Vec<Ino> = self.nodes.iter().filter(|(_, n)| n.kind == FileKind::Dir).map(|(i, _)| *i).collect();
        v.sort();
        v
    }

    fn within(&self, mut d: Ino, ancestor: Ino) -> bool {
        loop {
            if d == ancestor {
                return true;
            }
            if d == self.root {
                return false;
            }
            d = self.nodes[&d].parent;
        }
    }

    fn entry(&self, d: Ino, name: &[u8]) -> Option<Ino> {
        self.nodes[&d].children.get(name).copied()
    }

    fn is_dir(&self, i: Ino) -> bool {
        self.nodes[&i].kind == FileKind::Dir
    }

    fn add(&mut self, d: Ino, name: &[u8], ino: Ino) {
        self.nodes.get_mut(&d).expect("dir").children.insert(name.to_vec(), ino);
        if self.is_dir(ino) {
            self.nodes.get_mut(&d).expect("dir").nlink += 1;
            self.nodes.get_mut(&ino).expect("node").parent = d;
        }
    }

    /// Removes a name; drops the inode when it has no link left.
    fn remove(&mut self, d: Ino, name: &[u8]) {
        let ino = self.nodes.get_mut(&d).expect("dir").children.remove(name).expect("entry");
        if self.is_dir(ino) {
            self.nodes.get_mut(&d).expect("dir").nlink -= 1;
            self.nodes.remove(&ino);
            return;
        }
        let n = self.nodes.get_mut(&ino).expect("node");
        n.nlink -= 1;
        if n.nlink == 0 {
            self.nodes.remove(&ino);
        }
    }

    /// The errno rename must fail with, or None.
    fn rename_error(&self, p: Ino, name: &[u8], np: Ino, newname: &[u8], flags: RenameFlags) -> Option<i32> {
        let Some(src) = self.entry(p, name) else { return Some(libc::ENOENT) };
        if self.is_dir(src) && self.within(np, src) {
            return Some(libc::EINVAL);
        }
        let dst = self.entry(np, newname);
        if flags.exchange {
            let Some(dst) = dst else { return Some(libc::ENOENT) };
            return (self.is_dir(dst) && self.within(p, dst)).then_some(libc::EINVAL);
        }
        let dst = dst?;
        if flags.noreplace {
            return Some(libc::EEXIST);
        }
        if dst == src {
            return None;
        }
        match (self.is_dir(src), self.is_dir(dst)) {
            (true, false) => Some(libc::ENOTDIR),
            (false, true) => Some(libc::EISDIR),
            (true, true) if !self.nodes[&dst].children.is_empty() => Some(libc::ENOTEMPTY),
            _ => None,
        }
    }

    fn rename(&mut self, p: Ino, name: &[u8], np: Ino, newname: &[u8], flags: RenameFlags) {
        let src = self.entry(p, name).expect("checked");
        let dst = self.entry(np, newname);
        if flags.exchange {
            let dst = dst.expect("checked");
            if src == dst {
                return;
            }
            self.remove_link_only(p, name);
            self.remove_link_only(np, newname);
            self.add(p, name, dst);
            self.add(np, newname, src);
            return;
        }
        if dst == Some(src) {
            return;
        }
        if dst.is_some() {
            self.remove(np, newname);
        }
        self.remove_link_only(p, name);
        self.add(np, newname, src);
    }

    /// Takes a name away without touching the inode's own link count.
    fn remove_link_only(&mut self, d: Ino, name: &[u8]) {
        let ino = self.nodes.get_mut(&d).expect("dir").children.remove(name).expect("entry");
        if self.is_dir(ino) {
            self.nodes.get_mut(&d).expect("dir").nlink -= 1;
        }
    }
}

struct Run {
    rng: Rng,
    m: Mounted,
    model: Model,
}

impl Run {
    fn fs(&self) -> Arc<PosixFs> {
        self.m.fs()
    }

    fn name(&mut self) -> Vec<u8> {
        format!("n{}", self.rng.below(NAMES)).into_bytes()
    }

    fn dir(&mut self) -> Ino {
        let dirs = self.model.dirs();
        dirs[self.rng.below(dirs.len() as u64) as usize]
    }

    fn step(&mut self, op: u64) {
        let fs = self.fs();
        let (d, name) = (self.dir(), self.name());
        let exists = self.model.entry(d, &name);
        match self.rng.below(10) {
            0..=1 => {
                let r = if self.rng.chance(50) {
                    fs.mkdir(&ROOT, d, &name, 0o755)
                } else if self.rng.chance(50) {
                    fs.mknod(&ROOT, d, &name, libc::S_IFREG | 0o644, 0)
                } else {
                    fs.symlink(&ROOT, d, &name, b"target")
                };
                match (r, exists) {
                    (Ok(a), None) => {
                        let node = Node { kind: a.kind, nlink: a.nlink, children: BTreeMap::new(), parent: d };
                        self.model.nodes.insert(a.ino, node);
                        self.model.add(d, &name, a.ino);
                    }
                    (Err(e), Some(_)) => assert_eq!(e.errno, libc::EEXIST, "op {op}"),
                    (r, _) => panic!("op {op}: create {:?} in {d}: {:?}", String::from_utf8_lossy(&name), r.map(|a| a.ino)),
                }
            }
            2 => {
                let (d2, name2) = (self.dir(), self.name());
                let Some(src) = self.model.entry(d2, &name2) else { return };
                let r = fs.link(&ROOT, src, d, &name);
                let want = if self.model.is_dir(src) {
                    Some(libc::EPERM)
                } else if exists.is_some() {
                    Some(libc::EEXIST)
                } else {
                    None
                };
                assert_eq!(r.as_ref().err().map(|e| e.errno), want, "op {op}: link");
                if want.is_none() {
                    self.model.nodes.get_mut(&src).expect("node").nlink += 1;
                    self.model.add(d, &name, src);
                }
            }
            3..=4 => {
                let rmdir = self.rng.chance(50);
                let r = if rmdir { fs.rmdir(&ROOT, d, &name) } else { fs.unlink(&ROOT, d, &name) };
                let want = match exists {
                    None => Some(libc::ENOENT),
                    Some(i) if rmdir && !self.model.is_dir(i) => Some(libc::ENOTDIR),
                    Some(i) if !rmdir && self.model.is_dir(i) => Some(libc::EISDIR),
                    Some(i) if rmdir && !self.model.nodes[&i].children.is_empty() => Some(libc::ENOTEMPTY),
                    _ => None,
                };
                assert_eq!(r.as_ref().err().map(|e| e.errno), want, "op {op}: remove");
                if want.is_none() {
                    self.model.remove(d, &name);
                }
            }
            _ => {
                let (np, newname) = (self.dir(), self.name());
                let flags = match self.rng.below(5) {
                    0 => RenameFlags { noreplace: true, exchange: false },
                    1 => RenameFlags { noreplace: false, exchange: true },
                    _ => RenameFlags::default(),
                };
                let want = self.model.rename_error(d, &name, np, &newname, flags);
                let r = fs.rename(&ROOT, d, &name, np, &newname, flags);
                assert_eq!(r.as_ref().err().map(|e| e.errno), want, "op {op}: rename {d}/{:?} -> {np}/{:?} {flags:?}", String::from_utf8_lossy(&name), String::from_utf8_lossy(&newname));
                if want.is_none() {
                    self.model.rename(d, &name, np, &newname, flags);
                }
            }
        }
    }

    fn compare(&self, when: &str) {
        let fs = self.fs();
        for (ino, n) in &self.model.nodes {
            let a = fs.getattr(*ino).unwrap_or_else(|e| panic!("{when}: inode {ino}: {e}"));
            assert_eq!((a.kind, a.nlink), (n.kind, n.nlink), "{when}: inode {ino}");
            if n.kind != FileKind::Dir {
                continue;
            }
            let listed: BTreeMap<Vec<u8>, Ino> = fs.readdir(*ino, 2, usize::MAX).expect("readdir").into_iter().map(|e| (e.name, e.ino)).collect();
            assert_eq!(listed, n.children, "{when}: directory {ino}");
            assert_eq!(fs.lookup(*ino, b"..").expect("..").ino, n.parent, "{when}: parent of {ino}");
        }
        fs.verify().unwrap_or_else(|e| panic!("{when}: {e}"));
    }
}

#[test]
fn namespace_against_a_model() {
    let seed = std::env::var("TARN_NS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x0a11_7e57);
    let ops: u64 = std::env::var("TARN_NS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    eprintln!("namespace: seed {seed} (TARN_NS_SEED), {ops} operations (TARN_NS_OPS)");
    let m = Mounted::new(256 << 20, seed);
    let root = m.fs().root();
    let mut nodes = HashMap::new();
    nodes.insert(root, Node { kind: FileKind::Dir, nlink: 2, children: BTreeMap::new(), parent: root });
    let mut run = Run { rng: Rng::new(seed), m, model: Model { nodes, root } };
    for op in 1..=ops {
        run.step(op);
        if op % 500 == 0 {
            run.compare(&format!("after op {op}"));
        }
        if op % 5000 == 0 {
            run.m.reopen();
            run.compare(&format!("after import at op {op}"));
        }
    }
    run.m.reopen();
    run.compare("at the end");
}
