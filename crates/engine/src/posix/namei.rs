//! Operations on names: lookup, create, link, unlink, rename, readdir. Each
//! runs under the namespace lock (write for changes) and takes inode locks
//! one at a time, never two at once.

use std::sync::Arc;

use tarn_ondisk::bp::ObjectType;

use super::api::*;
use super::dir::{self, DirTx, DIR_BLOCK};
use super::fs::{err, Inode, PosixFs, INLINE_ROOM, INODE_SLOTS};
use super::inode::InodePhys;
use super::log::log_time;
use tarn_ondisk::zil::LogRecord;
use crate::object::Tx;

/// Longest name, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest symbolic link target, in bytes.
pub const SYMLINK_MAX: usize = 4095;
/// Space a namespace change is refused without (a few directory blocks and
/// a dnode block), so that it fails before changing anything.
const NAMESPACE_SPACE: u64 = 64 << 10;
/// The largest block a namespace change dirties: a dnode block (directory
/// leaves are 4 KiB, a symlink's target at most 4 KiB).
const NAMESPACE_PIECE: u64 = tarn_ondisk::dnode::DNODE_BLOCK_SIZE as u64;

pub(crate) fn check_name(name: &[u8]) -> PResult<()> {
    if name.len() > NAME_MAX {
        return Err(err(libc::ENAMETOOLONG, format!("name of {} bytes (at most {})", name.len(), NAME_MAX)));
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(err(libc::EINVAL, format!("invalid name {:?}", String::from_utf8_lossy(name))));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl PosixFs {
    /// The directory inode `ino` and its attributes; `ENOTDIR` otherwise.
    pub(crate) fn dir_inode(&self, ino: Ino) -> PResult<(Arc<Inode>, InodePhys)> {
        let node = self.inode(ino)?;
        let phys = {
            let st = node.st.lock();
            if st.gone {
                return Err(err(libc::ENOENT, format!("directory {} was removed", ino)));
            }
            st.phys.clone()
        };
        if !phys.is_dir() {
            return Err(err(libc::ENOTDIR, format!("inode {} is not a directory", ino)));
        }
        Ok((node, phys))
    }

    /// The entry `name` of directory `parent` (under the namespace lock).
    pub(crate) fn entry(&self, parent: Ino, name: &[u8]) -> PResult<Option<dir::Entry>> {
        Ok(dir::lookup(&self.os, parent, name)?)
    }

    pub(crate) fn do_lookup(&self, parent: Ino, name: &[u8]) -> PResult<Attr> {
        check_name(name)?;
        let _ns = self.ns.read();
        let (_, pphys) = self.dir_inode(parent)?;
        let ino = match name {
            b"." => parent,
            b".." => pphys.parent,
            _ => match self.entry(parent, name)? {
                Some(e) => e.ino,
                None => return Err(err(libc::ENOENT, format!("no {:?} in directory {}", String::from_utf8_lossy(name), parent))),
            },
        };
        self.do_getattr(ino)
    }

    /// Changes the directory's attributes in `tx`: entries added (+1) or
    /// removed (-1), subdirectory links, and its times.
    pub(crate) fn touch_dir(&self, tx: &Tx, dir: Ino, entries: i64, links: i64) -> PResult<()> {
        let node = self.inode(dir)?;
        let mut st = node.st.lock();
        let now = self.now();
        let p = &mut st.phys;
        p.size = (p.size as i64 + entries).max(0) as u64;
        p.nlink = (p.nlink as i64 + links).max(0) as u32;
        p.mtime = now;
        p.ctime = now;
        self.save(tx, dir, p)
    }

    /// Creates an inode of `mode` named `name` in `parent`; `data` is the
    /// symlink target.
    pub(crate) fn create(&self, caller: &Caller, parent: Ino, name: &[u8], mode: u32, rdev: u32, data: &[u8]) -> PResult<Attr> {
        check_name(name)?;
        let kind = FileKind::from_mode(mode).ok_or_else(|| err(libc::EINVAL, format!("mode {:o} names no file type", mode)))?;
        let _ns = self.ns.write();
        let (_, pphys) = self.dir_inode(parent)?;
        if pphys.nlink == 0 {
            return Err(err(libc::ENOENT, format!("directory {} was removed", parent)));
        }
        if is_dot(name) || self.entry(parent, name)?.is_some() {
            return Err(err(libc::EEXIST, format!("{:?} exists in directory {}", String::from_utf8_lossy(name), parent)));
        }
        let tx = self.tx_for(NAMESPACE_SPACE + data.len() as u64, NAMESPACE_PIECE)?;
        let replayed = self.replaying.lock().as_ref().and_then(|r| r.create).map(|c| c.ino);
        let ino = match (kind == FileKind::Dir, replayed) {
            (true, None) => self.os.create_with_blksz(&tx, ObjectType::Directory, INODE_SLOTS, DIR_BLOCK as u32)?,
            (false, None) => self.os.create_with_room(&tx, ObjectType::PlainData, INODE_SLOTS, INLINE_ROOM)?,
            (true, Some(ino)) => self.os.create_at(&tx, ino, ObjectType::Directory, INODE_SLOTS, INODE_SLOTS, Some(DIR_BLOCK as u32))?,
            (false, Some(ino)) => self.os.create_at(&tx, ino, ObjectType::PlainData, INODE_SLOTS, INLINE_ROOM, None)?,
        };
        let mut phys = self.new_phys(caller, &pphys, parent, mode, &tx);
        phys.rdev = rdev;
        phys.size = data.len() as u64;
        let made = self.save(&tx, ino, &phys).and_then(|()| {
            self.os.write(&tx, ino, 0, data)?;
            DirTx { os: &self.os, tx: &tx, dir: parent }.insert(name, ino, kind)?;
            Ok(())
        });
        if let Err(e) = made {
            // Undo the object so that a failure (ENOSPC) leaves nothing behind.
            let _ = self.os.free(&tx, ino);
            return Err(e);
        }
        self.touch_dir(&tx, parent, 1, if kind == FileKind::Dir { 1 } else { 0 })?;
        let (name, target) = (name.to_vec(), data.to_vec());
        let rec = LogRecord::Create { parent, ino, gen: phys.gen, mode: phys.mode, uid: phys.uid, gid: phys.gid, rdev, time: log_time(phys.ctime), name, target };
        self.log(&tx, rec, 0);
        let attr = self.attr_of(ino, &phys);
        self.insert_inode(ino, phys);
        Ok(attr)
    }

    pub(crate) fn do_link(&self, ino: Ino, newparent: Ino, newname: &[u8]) -> PResult<Attr> {
        check_name(newname)?;
        let _ns = self.ns.write();
        let (_, pphys) = self.dir_inode(newparent)?;
        let node = self.inode(ino)?;
        let kind = {
            let st = node.st.lock();
            if st.gone || st.phys.nlink == 0 {
                return Err(err(libc::ENOENT, format!("inode {} has no name to link to", ino)));
            }
            if st.phys.is_dir() {
                return Err(err(libc::EPERM, format!("inode {} is a directory: no hard links", ino)));
            }
            if st.phys.nlink == u32::MAX {
                return Err(err(libc::EMLINK, format!("inode {} has the most links it can", ino)));
            }
            st.phys.kind().unwrap_or(FileKind::File)
        };
        if pphys.nlink == 0 {
            return Err(err(libc::ENOENT, format!("directory {} was removed", newparent)));
        }
        if is_dot(newname) || self.entry(newparent, newname)?.is_some() {
            return Err(err(libc::EEXIST, format!("{:?} exists", String::from_utf8_lossy(newname))));
        }
        let tx = self.tx_for(NAMESPACE_SPACE, NAMESPACE_PIECE)?;
        DirTx { os: &self.os, tx: &tx, dir: newparent }.insert(newname, ino, kind)?;
        self.touch_dir(&tx, newparent, 1, 0)?;
        let mut st = node.st.lock();
        st.phys.nlink += 1;
        st.phys.ctime = self.now();
        self.save(&tx, ino, &st.phys)?;
        self.log(&tx, LogRecord::Link { ino, parent: newparent, time: log_time(st.phys.ctime), name: newname.to_vec() }, 0);
        Ok(self.attr_of(ino, &st.phys))
    }

    /// The sticky-directory rule: in a sticky directory only the owner of
    /// the entry or of the directory (or root) may remove or rename it.
    fn check_sticky(&self, caller: &Caller, dir: &InodePhys, ino: Ino) -> PResult<()> {
        if dir.mode & libc::S_ISVTX == 0 || caller.uid == 0 || caller.uid == dir.uid {
            return Ok(());
        }
        let node = self.inode(ino)?;
        if node.st.lock().phys.uid == caller.uid {
            return Ok(());
        }
        Err(err(libc::EPERM, format!("sticky directory: inode {} belongs to someone else", ino)))
    }

    /// Removes the name `name` (which names `e`) from `parent` in `tx` and
    /// drops the link it held; the caller checked the rules.
    fn remove_entry(&self, tx: &Tx, parent: Ino, name: &[u8], e: &dir::Entry) -> PResult<()> {
        DirTx { os: &self.os, tx, dir: parent }.remove(name)?;
        let is_dir = e.kind == FileKind::Dir;
        self.touch_dir(tx, parent, -1, if is_dir { -1 } else { 0 })?;
        self.drop_link(tx, e.ino, is_dir)
    }

    /// One name of `ino` is gone: a directory loses both its links; an
    /// inode without links is freed now, or on last release when open.
    fn drop_link(&self, tx: &Tx, ino: Ino, is_dir: bool) -> PResult<()> {
        let node = self.inode(ino)?;
        let mut st = node.st.lock();
        st.phys.nlink = if is_dir { 0 } else { st.phys.nlink.saturating_sub(1) };
        st.phys.ctime = self.now();
        if st.phys.nlink > 0 {
            return self.save(tx, ino, &st.phys);
        }
        if st.open > 0 {
            self.save(tx, ino, &st.phys)?;
            return self.set_unlinked(tx, ino, true);
        }
        self.free_objects(tx, ino, &st.phys)?;
        st.gone = true;
        drop(st);
        self.forget_inode(ino);
        Ok(())
    }

    pub(crate) fn do_unlink(&self, caller: &Caller, parent: Ino, name: &[u8], want_dir: bool) -> PResult<()> {
        check_name(name)?;
        if is_dot(name) {
            let errno = match (want_dir, name) {
                (true, b".") => libc::EINVAL,
                (true, _) => libc::ENOTEMPTY,
                _ => libc::EISDIR,
            };
            return Err(err(errno, "cannot remove . or .."));
        }
        let _ns = self.ns.write();
        let (_, pphys) = self.dir_inode(parent)?;
        let e = self.entry(parent, name)?.ok_or_else(|| err(libc::ENOENT, format!("no {:?} in directory {}", String::from_utf8_lossy(name), parent)))?;
        let is_dir = e.kind == FileKind::Dir;
        if want_dir && !is_dir {
            return Err(err(libc::ENOTDIR, format!("{:?} is not a directory", String::from_utf8_lossy(name))));
        }
        if !want_dir && is_dir {
            return Err(err(libc::EISDIR, format!("{:?} is a directory", String::from_utf8_lossy(name))));
        }
        if is_dir {
            self.check_empty(e.ino)?;
        }
        self.check_sticky(caller, &pphys, e.ino)?;
        let tx = self.tx()?;
        self.remove_entry(&tx, parent, name, &e)?;
        self.log(&tx, LogRecord::Remove { parent, dir: is_dir, time: log_time(self.now()), name: name.to_vec() }, 0);
        Ok(())
    }

    fn check_empty(&self, dir: Ino) -> PResult<()> {
        let (_, p) = self.dir_inode(dir)?;
        if p.size > 0 {
            return Err(err(libc::ENOTEMPTY, format!("directory {} has {} entries", dir, p.size)));
        }
        Ok(())
    }

    /// True when `dir` is `ancestor` or lies below it (walks `..` up to the
    /// root, bounded by the number of objects).
    fn is_within(&self, dir: Ino, ancestor: Ino) -> PResult<bool> {
        let mut cur = dir;
        for _ in 0..=self.os.next_object() {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == self.root {
                return Ok(false);
            }
            cur = self.dir_inode(cur)?.1.parent;
        }
        Err(err(libc::EIO, format!("the parents of directory {} form a loop", dir)))
    }

    pub(crate) fn do_rename(&self, caller: &Caller, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: RenameFlags) -> PResult<()> {
        check_name(name)?;
        check_name(newname)?;
        if flags.exchange && flags.noreplace {
            return Err(err(libc::EINVAL, "RENAME_EXCHANGE with RENAME_NOREPLACE"));
        }
        if is_dot(name) || is_dot(newname) {
            return Err(err(libc::EINVAL, "cannot rename . or .."));
        }
        let _ns = self.ns.write();
        let (_, pphys) = self.dir_inode(parent)?;
        let (_, npphys) = self.dir_inode(newparent)?;
        let src = self.entry(parent, name)?.ok_or_else(|| err(libc::ENOENT, format!("no {:?} in directory {}", String::from_utf8_lossy(name), parent)))?;
        let dst = self.entry(newparent, newname)?;
        self.check_sticky(caller, &pphys, src.ino)?;
        if src.kind == FileKind::Dir && self.is_within(newparent, src.ino)? {
            return Err(err(libc::EINVAL, "cannot move a directory into itself"));
        }
        if flags.exchange {
            let dst = dst.ok_or_else(|| err(libc::ENOENT, format!("no {:?} to exchange with", String::from_utf8_lossy(newname))))?;
            if dst.kind == FileKind::Dir && self.is_within(parent, dst.ino)? {
                return Err(err(libc::EINVAL, "cannot move a directory into itself"));
            }
            self.check_sticky(caller, &npphys, dst.ino)?;
            return self.exchange(parent, name, &src, newparent, newname, &dst);
        }
        if let Some(d) = &dst {
            if flags.noreplace {
                return Err(err(libc::EEXIST, format!("{:?} exists", String::from_utf8_lossy(newname))));
            }
            if d.ino == src.ino {
                return Ok(());
            }
            match (src.kind == FileKind::Dir, d.kind == FileKind::Dir) {
                (true, false) => return Err(err(libc::ENOTDIR, "cannot replace a non-directory with a directory")),
                (false, true) => return Err(err(libc::EISDIR, "cannot replace a directory with a non-directory")),
                (true, true) => self.check_empty(d.ino)?,
                _ => {}
            }
            self.check_sticky(caller, &npphys, d.ino)?;
        }
        let tx = self.tx_for(NAMESPACE_SPACE, NAMESPACE_PIECE)?;
        if let Some(d) = &dst {
            self.remove_entry(&tx, newparent, newname, d)?;
        }
        DirTx { os: &self.os, tx: &tx, dir: parent }.remove(name)?;
        DirTx { os: &self.os, tx: &tx, dir: newparent }.insert(newname, src.ino, src.kind)?;
        let links = if src.kind == FileKind::Dir && parent != newparent { 1 } else { 0 };
        self.touch_dir(&tx, parent, -1, -links)?;
        self.touch_dir(&tx, newparent, 1, links)?;
        self.moved(&tx, src.ino, newparent)?;
        self.log_rename(&tx, parent, name, newparent, newname, flags.noreplace as u32);
        Ok(())
    }

    fn log_rename(&self, tx: &Tx, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: u32) {
        let rec = LogRecord::Rename { parent, newparent, flags, time: log_time(self.now()), name: name.to_vec(), newname: newname.to_vec() };
        self.log(tx, rec, 0);
    }

    /// An inode got a new parent: its `..` and change time follow.
    fn moved(&self, tx: &Tx, ino: Ino, newparent: Ino) -> PResult<()> {
        let node = self.inode(ino)?;
        let mut st = node.st.lock();
        st.phys.parent = newparent;
        st.phys.ctime = self.now();
        self.save(tx, ino, &st.phys)
    }

    /// RENAME_EXCHANGE: the two names swap inodes, in one transaction.
    fn exchange(&self, parent: Ino, name: &[u8], src: &dir::Entry, newparent: Ino, newname: &[u8], dst: &dir::Entry) -> PResult<()> {
        if src.ino == dst.ino {
            return Ok(());
        }
        let tx = self.tx_for(NAMESPACE_SPACE, NAMESPACE_PIECE)?;
        let a = DirTx { os: &self.os, tx: &tx, dir: parent };
        let b = DirTx { os: &self.os, tx: &tx, dir: newparent };
        a.remove(name)?;
        b.remove(newname)?;
        a.insert(name, dst.ino, dst.kind)?;
        b.insert(newname, src.ino, src.kind)?;
        let (sd, dd) = ((src.kind == FileKind::Dir) as i64, (dst.kind == FileKind::Dir) as i64);
        if parent != newparent {
            self.touch_dir(&tx, parent, 0, dd - sd)?;
            self.touch_dir(&tx, newparent, 0, sd - dd)?;
        } else {
            self.touch_dir(&tx, parent, 0, 0)?;
        }
        self.moved(&tx, src.ino, newparent)?;
        self.moved(&tx, dst.ino, parent)?;
        self.log_rename(&tx, parent, name, newparent, newname, 2);
        Ok(())
    }

    pub(crate) fn do_readdir(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<DirEntry>> {
        let _ns = self.ns.read();
        self.readdir_locked(ino, cookie, max)
    }

    /// Cookies: 1 after ".", 2 after "..", then an entry's key + 3.
    pub(crate) fn readdir_locked(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<DirEntry>> {
        let (_, p) = self.dir_inode(ino)?;
        let mut out = Vec::new();
        if cookie == 0 && out.len() < max {
            out.push(DirEntry { name: b".".to_vec(), ino, kind: FileKind::Dir, cookie: 1 });
        }
        if cookie <= 1 && out.len() < max {
            out.push(DirEntry { name: b"..".to_vec(), ino: p.parent, kind: FileKind::Dir, cookie: 2 });
        }
        let after = if cookie >= 3 { Some(cookie - 3) } else { None };
        let left = max - out.len();
        if left > 0 {
            for e in dir::list(&self.os, ino, after, left)? {
                out.push(DirEntry { cookie: e.key + 3, name: e.name, ino: e.ino, kind: e.kind });
            }
        }
        Ok(out)
    }

    pub(crate) fn do_readdirplus(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<(DirEntry, Attr)>> {
        let _ns = self.ns.read();
        let entries = self.readdir_locked(ino, cookie, max)?;
        entries.into_iter().map(|e| self.do_getattr(e.ino).map(|a| (e, a))).collect()
    }
}
