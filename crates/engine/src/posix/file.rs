//! Operations on one inode: attributes, data, handles, extended attributes.
//! Each holds the inode's lock for its whole change, so that data and the
//! size and times in the attributes move together in one transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;
use tarn_ondisk::bp::ObjectType;

use super::api::*;
use super::fs::{err, Inode, InodeState, PosixFs};
use super::inode::{decode_xattrs, encode_xattrs_large, InodePhys};
use super::log::{log_time, setattr_rec};
use tarn_ondisk::zil::LogRecord;
use crate::object::MAX_OBJECT_BYTES;

/// Largest extended attribute value (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_MAX: usize = 64 << 10;
/// Values up to this size go to the bonus while it has room.
const XATTR_SMALL_MAX: usize = 64;
/// Largest total of an inode's large extended attributes.
const XATTR_TOTAL_MAX: usize = 4 << 20;
/// The unit `statfs` counts space in.
const STATFS_FRSIZE: u64 = 4096;
/// relatime: an access time older than this is refreshed anyway.
const RELATIME_SEC: i64 = 24 * 3600;

/// Clears set-user-ID, and set-group-ID when group-executable (otherwise it
/// marks mandatory locking), as Linux's `file_remove_privs`.
fn kill_suid(p: &mut InodePhys) {
    p.mode &= !libc::S_ISUID;
    if p.mode & libc::S_IXGRP != 0 {
        p.mode &= !libc::S_ISGID;
    }
}

/// The extended attribute that grants file capabilities; a write,
/// truncate, fallocate, copy or chown removes it, as Linux does.
pub const XATTR_CAPABILITY: &[u8] = b"security.capability";

fn resolve(t: TimeOrNow, now: Timespec) -> Timespec {
    match t {
        TimeOrNow::Now => now,
        TimeOrNow::At(t) => t,
    }
}

impl PosixFs {
    /// The inode locked, `ENOENT` once freed.
    fn locked<'a>(&self, node: &'a Arc<Inode>) -> PResult<MutexGuard<'a, InodeState>> {
        let st = node.st.lock();
        if st.gone {
            return Err(err(libc::ENOENT, format!("inode {} was freed", node.ino)));
        }
        Ok(st)
    }

    /// A regular file, locked; `EISDIR` / `EINVAL` for other kinds.
    fn file<'a>(&self, node: &'a Arc<Inode>) -> PResult<MutexGuard<'a, InodeState>> {
        let st = self.locked(node)?;
        match st.phys.kind() {
            Some(FileKind::File) => Ok(st),
            Some(FileKind::Dir) => Err(err(libc::EISDIR, format!("inode {} is a directory", node.ino))),
            _ => Err(err(libc::EINVAL, format!("inode {} is not a regular file", node.ino))),
        }
    }

    pub(crate) fn do_getattr(&self, ino: Ino) -> PResult<Attr> {
        let node = self.inode(ino)?;
        let st = self.locked(&node)?;
        Ok(self.attr_of(ino, &st.phys))
    }

    pub(crate) fn do_setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr) -> PResult<Attr> {
        let times = [set.atime, set.mtime].into_iter().flatten().filter_map(|t| match t {
            TimeOrNow::At(t) => Some(t),
            TimeOrNow::Now => None,
        });
        if times.chain(set.ctime).any(|t| t.nsec >= 1_000_000_000) {
            return Err(err(libc::EINVAL, "a time with a billion nanoseconds or more"));
        }
        let node = self.inode(ino)?;
        // Growing a file allocates nothing now but must not take the last
        // of a full pool; shrinking frees, and is never refused for space.
        let grows = set.size.is_some_and(|s| s > node.st.lock().phys.size);
        let tx = if grows { self.tx_for(0, self.record_piece())? } else { self.tx()? };
        let mut st = self.locked(&node)?;
        let now = self.now();
        let mut p = st.phys.clone();
        if let Some(size) = set.size {
            match p.kind() {
                Some(FileKind::File) => {}
                Some(FileKind::Dir) => return Err(err(libc::EISDIR, format!("inode {} is a directory", ino))),
                _ => return Err(err(libc::EINVAL, format!("inode {} is not a regular file", ino))),
            }
            if size > MAX_OBJECT_BYTES {
                return Err(err(libc::EFBIG, format!("size {} is too large", size)));
            }
            if size > p.size {
                self.check_space(0, self.record_piece())?;
            }
            self.os.truncate(&tx, ino, size)?;
            p.size = size;
            p.mtime = now;
            self.modified_by(&tx, caller, &mut p)?;
        }
        if let Some(mode) = set.mode {
            p.mode = (p.mode & libc::S_IFMT) | (mode & 0o7777);
        }
        // Linux clears the privileges on any chown naming an owner or group,
        // even the present ones.
        let chown = set.uid.is_some() || set.gid.is_some();
        p.uid = set.uid.unwrap_or(p.uid);
        p.gid = set.gid.unwrap_or(p.gid);
        if chown && !p.is_dir() {
            kill_suid(&mut p);
            self.kill_capability(&tx, &mut p)?;
        }
        if let Some(t) = set.atime {
            p.atime = resolve(t, now);
        }
        if let Some(t) = set.mtime {
            p.mtime = resolve(t, now);
        }
        p.ctime = set.ctime.unwrap_or(now);
        self.save(&tx, ino, &p)?;
        self.log(&tx, LogRecord::Setattr { ino, fsetid: caller.fsetid, time: log_time(now), set: setattr_rec(set, now, p.ctime) }, 0);
        st.phys = p;
        Ok(self.attr_of(ino, &st.phys))
    }

    pub(crate) fn do_readlink(&self, ino: Ino) -> PResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let st = self.locked(&node)?;
        if st.phys.kind() != Some(FileKind::Symlink) {
            return Err(err(libc::EINVAL, format!("inode {} is not a symbolic link", ino)));
        }
        Ok(self.os.read(ino, 0, st.phys.size as usize)?)
    }

    pub(crate) fn do_open(&self, ino: Ino) -> PResult<()> {
        let node = self.inode(ino)?;
        let mut st = self.locked(&node)?;
        st.open = st.open.checked_add(1).ok_or_else(|| err(libc::ENFILE, "too many handles"))?;
        Ok(())
    }

    /// The last handle of a nameless inode frees it.
    pub(crate) fn do_release(&self, ino: Ino) -> PResult<()> {
        let node = self.inode(ino)?;
        let mut st = self.locked(&node)?;
        if st.open == 0 {
            return Err(err(libc::EBADF, format!("inode {} has no open handle", ino)));
        }
        st.open -= 1;
        if st.open > 0 || st.phys.nlink > 0 || self.opts.readonly {
            return Ok(());
        }
        let tx = self.tx()?;
        self.free_objects(&tx, ino, &st.phys)?;
        self.set_unlinked(&tx, ino, false)?;
        st.gone = true;
        drop(st);
        self.forget_inode(ino);
        Ok(())
    }

    pub(crate) fn do_read(&self, ino: Ino, offset: u64, size: u32) -> PResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let mut st = self.file(&node)?;
        let data = self.os.read(ino, offset, size as usize)?;
        if self.wants_atime(&st.phys) {
            // Access times are best effort: a full or read-only pool must
            // not fail a read.
            if let Ok(tx) = self.tx() {
                let mut p = st.phys.clone();
                p.atime = self.now();
                if self.save(&tx, ino, &p).is_ok() {
                    st.phys = p;
                }
            }
        }
        Ok(data)
    }

    fn wants_atime(&self, p: &InodePhys) -> bool {
        if !self.atime.load(Ordering::Relaxed) || self.opts.readonly {
            return false;
        }
        if !self.relatime.load(Ordering::Relaxed) {
            return true;
        }
        p.atime <= p.mtime || p.atime <= p.ctime || self.now().sec.saturating_sub(p.atime.sec) >= RELATIME_SEC
    }

    pub(crate) fn do_write(&self, caller: &Caller, ino: Ino, offset: u64, data: &[u8]) -> PResult<u32> {
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= MAX_OBJECT_BYTES);
        let end = end.ok_or_else(|| err(libc::EFBIG, format!("write past the largest file at {}", offset)))?;
        let len = u32::try_from(data.len()).map_err(|_| err(libc::EINVAL, "write of more than 4 GiB"))?;
        let node = self.inode(ino)?;
        let piece = self.os.write_piece(ino, end)?;
        let tx = self.tx_for(data.len() as u64, piece)?;
        let mut st = self.file(&node)?;
        self.os.write(&tx, ino, offset, data)?;
        let now = self.now();
        let mut p = st.phys.clone();
        p.size = p.size.max(end);
        p.mtime = now;
        p.ctime = now;
        self.modified_by(&tx, caller, &mut p)?;
        self.save(&tx, ino, &p)?;
        self.log(&tx, LogRecord::Write { ino, offset, fsetid: caller.fsetid, time: log_time(now), data: Vec::new() }, data.len() as u64);
        st.phys = p;
        Ok(len)
    }

    pub(crate) fn do_fallocate(&self, caller: &Caller, ino: Ino, offset: u64, len: u64, flags: FallocFlags) -> PResult<()> {
        if len == 0 || (flags.punch_hole && flags.zero_range) {
            return Err(err(libc::EINVAL, "fallocate: empty range or conflicting modes"));
        }
        if flags.punch_hole && !flags.keep_size {
            return Err(err(libc::EOPNOTSUPP, "fallocate: PUNCH_HOLE without KEEP_SIZE"));
        }
        let end = offset.checked_add(len).filter(|&e| e <= MAX_OBJECT_BYTES);
        let end = end.ok_or_else(|| err(libc::EFBIG, format!("fallocate past the largest file at {}", offset)))?;
        let node = self.inode(ino)?;
        let tx = self.tx()?;
        let mut st = self.file(&node)?;
        let mut p = st.phys.clone();
        // Copy-on-write cannot reserve blocks for later writes (OpenZFS does
        // not either): plain allocation only extends the size.
        if flags.punch_hole || flags.zero_range {
            self.os.punch(&tx, ino, offset, len)?;
        }
        if !flags.keep_size && end > p.size {
            self.os.truncate(&tx, ino, end)?;
            p.size = end;
        }
        let now = self.now();
        if flags.punch_hole || flags.zero_range || p.size != st.phys.size {
            p.mtime = now;
            p.ctime = now;
            self.modified_by(&tx, caller, &mut p)?;
        }
        self.save(&tx, ino, &p)?;
        let bits = flags.keep_size as u32 | (flags.punch_hole as u32) << 1 | (flags.zero_range as u32) << 2;
        self.log(&tx, LogRecord::Fallocate { ino, offset, len, flags: bits, fsetid: caller.fsetid, time: log_time(now) }, 0);
        st.phys = p;
        Ok(())
    }

    /// `copy_file_range`: whole blocks at the same place in a block of both
    /// files are cloned (shared through the pool's block reference table,
    /// no data read or written), everything else is copied. One transaction
    /// per step of the engine (`Objset::clone_range`: up to 1024 blocks
    /// shared or 1 MiB copied), each with the destination's new size and times.
    pub(crate) fn do_copy_file_range(&self, caller: &Caller, ino_in: Ino, off_in: u64, ino_out: Ino, off_out: u64, len: u64) -> PResult<u64> {
        if ino_in == ino_out && off_in < off_out.saturating_add(len) && off_out < off_in.saturating_add(len) {
            return Err(err(libc::EINVAL, "copy_file_range: overlapping ranges of one file"));
        }
        let size_in = {
            let node = self.inode(ino_in)?;
            let st = self.file(&node)?;
            st.phys.size
        };
        drop(self.file(&self.inode(ino_out)?)?);
        let len = len.min(size_in.saturating_sub(off_in));
        if off_out.checked_add(len).is_none_or(|e| e > MAX_OBJECT_BYTES) {
            return Err(err(libc::EFBIG, format!("copy_file_range past the largest file at {}", off_out)));
        }
        let mut done = 0;
        while done < len {
            let n = self.copy_step(caller, ino_in, off_in + done, ino_out, off_out + done, len - done)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    /// One transaction of `copy_file_range`; the bytes it handled (0: the
    /// source ends before `off_in`).
    fn copy_step(&self, caller: &Caller, ino_in: Ino, off_in: u64, ino_out: Ino, off_out: u64, len: u64) -> PResult<u64> {
        let node = self.inode(ino_out)?;
        let tx = self.tx_for(0, tarn_ondisk::dnode::INDIRECT_BLOCK_SIZE as u64)?;
        let mut st = self.file(&node)?;
        let step = self.os.clone_range(&tx, ino_out, off_out, &self.os, ino_in, off_in, len)?;
        if step.done == 0 {
            return Ok(0);
        }
        let now = self.now();
        let mut p = st.phys.clone();
        p.size = p.size.max(off_out + step.done);
        p.mtime = now;
        p.ctime = now;
        self.modified_by(&tx, caller, &mut p)?;
        self.save(&tx, ino_out, &p)?;
        // A write of the range, made durable by its txg (`log_clone`).
        self.log_clone(&tx, LogRecord::Write { ino: ino_out, offset: off_out, fsetid: caller.fsetid, time: log_time(now), data: Vec::new() }, step.done);
        st.phys = p;
        Ok(step.done)
    }

    /// Files opened for writing bypass the kernel's write-back cache while
    /// the room left for this file system's writers (its quotas', the
    /// pool's) is less than what the kernel may hold for the pool's mounts
    /// (`FileSystem::uncached_writes`), and always while the dataset has
    /// `sync=always`: a write the kernel's cache acknowledged would reach
    /// neither the file system nor its log before a crash (each write must
    /// come here to be logged before `write(2)` returns); not on a
    /// read-only file system.
    pub(crate) fn do_uncached_writes(&self) -> bool {
        if self.opts.readonly {
            return false;
        }
        if self.sync_policy() == SyncPolicy::Always {
            return true;
        }
        let cached = self.os.core.kernel_cache_bytes();
        cached > 0 && self.os.room().map_or(true, |room| room < cached)
    }

    /// `FileSystem::keep_size`: grows the file to `size` (a hole) without a
    /// space check — it allocates no data, and the kernel already shows it.
    pub(crate) fn do_keep_size(&self, ino: Ino, size: u64) -> PResult<()> {
        if size > MAX_OBJECT_BYTES {
            return Err(err(libc::EFBIG, format!("size {} is too large", size)));
        }
        let node = self.inode(ino)?;
        let tx = self.tx()?;
        let mut st = self.file(&node)?;
        if st.phys.size >= size {
            return Ok(());
        }
        self.os.truncate(&tx, ino, size)?;
        let mut p = st.phys.clone();
        p.size = size;
        self.save(&tx, ino, &p)?;
        self.log(&tx, LogRecord::KeepSize { ino, size }, 0);
        st.phys = p;
        Ok(())
    }

    /// As OpenZFS's `zfs_statvfs`: the file system's size is what it uses
    /// plus what it may still write, and only what it may still write is
    /// free (`bfree` = `bavail`: the slop reserve is nobody's). Both sides
    /// count dirty data: what its writers dirtied and has not synced yet is
    /// used already, and the room left (the pool's free and deferred space
    /// less the slop and all dirty data, and under the dataset's and its
    /// ancestors' quotas) is what a writer could still write. So the size
    /// stays put while data streams in and is never the 0 that subtracting
    /// dirty data from the synced figures alone gave.
    pub(crate) fn do_statfs(&self) -> PResult<StatFs> {
        let frsize = STATFS_FRSIZE;
        let avail = self.os.room()?;
        let used = self.os.used_bytes().saturating_add(self.os.pending_bytes());
        let size = used.saturating_add(avail);
        let inode_bytes = (super::fs::INODE_SLOTS * tarn_ondisk::dnode::SLOT_SIZE) as u64;
        let files = self.os.object_count();
        Ok(StatFs {
            blocks: size / frsize,
            bfree: avail / frsize,
            bavail: avail / frsize,
            files: files + avail / inode_bytes,
            ffree: avail / inode_bytes,
            bsize: self.os.props().recordsize,
            frsize: frsize as u32,
            namelen: super::namei::NAME_MAX as u32,
        })
    }

    /// What changing a file's contents (write, truncate, fallocate,
    /// copy_file_range) drops, as Linux's `file_remove_privs`:
    /// set-user-ID (and set-group-ID when group-executable) unless the
    /// caller has `CAP_FSETID` (root), and `security.capability`.
    fn modified_by(&self, tx: &crate::object::Tx, caller: &Caller, p: &mut InodePhys) -> PResult<()> {
        if !caller.fsetid {
            kill_suid(p);
        }
        self.kill_capability(tx, p)
    }

    /// Removes `security.capability` from `p` (small or large), if there.
    fn kill_capability(&self, tx: &crate::object::Tx, p: &mut InodePhys) -> PResult<()> {
        p.xattrs.retain(|(n, _)| n != XATTR_CAPABILITY);
        if p.xattr_obj != 0 {
            let mut large = self.large_xattrs(p)?;
            let had = large.len();
            large.retain(|(n, _)| n != XATTR_CAPABILITY);
            if large.len() != had {
                self.store_large(tx, p, &large)?;
            }
        }
        Ok(())
    }

    fn large_xattrs(&self, p: &InodePhys) -> PResult<Vec<(Vec<u8>, Vec<u8>)>> {
        if p.xattr_obj == 0 {
            return Ok(Vec::new());
        }
        let b = self.os.read(p.xattr_obj, 0, XATTR_TOTAL_MAX)?;
        Ok(decode_xattrs(&b, 4)?)
    }

    pub(crate) fn do_getxattr(&self, ino: Ino, name: &[u8]) -> PResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let st = self.locked(&node)?;
        if let Some((_, v)) = st.phys.xattrs.iter().find(|(n, _)| n == name) {
            return Ok(v.clone());
        }
        let large = self.large_xattrs(&st.phys)?;
        large.into_iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or_else(|| err(libc::ENODATA, "no such extended attribute"))
    }

    pub(crate) fn do_listxattr(&self, ino: Ino) -> PResult<Vec<Vec<u8>>> {
        let node = self.inode(ino)?;
        let st = self.locked(&node)?;
        let mut names: Vec<Vec<u8>> = st.phys.xattrs.iter().map(|(n, _)| n.clone()).collect();
        names.extend(self.large_xattrs(&st.phys)?.into_iter().map(|(n, _)| n));
        Ok(names)
    }

    /// Sets (`Some`) or removes (`None`) an extended attribute: a small
    /// value goes to the bonus while it has room, the rest to the inode's
    /// large-xattr object.
    pub(crate) fn change_xattr(&self, ino: Ino, name: &[u8], value: Option<&[u8]>, how: XattrSet) -> PResult<()> {
        if name.is_empty() || name.len() > 255 {
            return Err(err(libc::ERANGE, format!("extended attribute name of {} bytes", name.len())));
        }
        if value.is_some_and(|v| v.len() > XATTR_VALUE_MAX) {
            return Err(err(libc::E2BIG, "extended attribute value over 64 KiB"));
        }
        let node = self.inode(ino)?;
        let tx = match value {
            Some(v) => self.tx_for(v.len() as u64, self.record_piece())?,
            None => self.tx()?,
        };
        let mut st = self.locked(&node)?;
        let mut p = st.phys.clone();
        let mut large = self.large_xattrs(&p)?;
        let had_small = p.xattrs.len();
        let had_large = large.len();
        p.xattrs.retain(|(n, _)| n != name);
        large.retain(|(n, _)| n != name);
        let existed = p.xattrs.len() < had_small || large.len() < had_large;
        match (how, existed) {
            (XattrSet::Create, true) => return Err(err(libc::EEXIST, "extended attribute exists")),
            (XattrSet::Replace, false) => return Err(err(libc::ENODATA, "no such extended attribute")),
            _ if value.is_none() && !existed => return Err(err(libc::ENODATA, "no such extended attribute")),
            _ => {}
        }
        p.ctime = self.now();
        let mut placed = false;
        if let Some(v) = value {
            self.check_space(v.len() as u64, self.record_piece())?;
            if v.len() <= XATTR_SMALL_MAX {
                p.xattrs.push((name.to_vec(), v.to_vec()));
                placed = self.save(&tx, ino, &p).is_ok();
                if !placed {
                    p.xattrs.pop();
                }
            }
            if !placed {
                large.push((name.to_vec(), v.to_vec()));
            }
        }
        if large.len() != had_large || !placed && value.is_some() {
            self.store_large(&tx, &mut p, &large)?;
        }
        self.save(&tx, ino, &p)?;
        let how = match how {
            XattrSet::Any => 0,
            XattrSet::Create => 1,
            XattrSet::Replace => 2,
        };
        self.log(&tx, LogRecord::Xattr { ino, how, time: log_time(p.ctime), name: name.to_vec(), value: value.map(|v| v.to_vec()) }, 0);
        st.phys = p;
        Ok(())
    }

    fn store_large(&self, tx: &crate::object::Tx, p: &mut InodePhys, large: &[(Vec<u8>, Vec<u8>)]) -> PResult<()> {
        let b = encode_xattrs_large(large);
        if b.len() > XATTR_TOTAL_MAX {
            return Err(err(libc::ENOSPC, "extended attributes over 4 MiB"));
        }
        if b.is_empty() {
            if p.xattr_obj != 0 {
                self.os.free(tx, p.xattr_obj)?;
                p.xattr_obj = 0;
            }
            return Ok(());
        }
        if p.xattr_obj == 0 {
            p.xattr_obj = self.os.create(tx, ObjectType::KvMap)?;
        }
        self.os.write(tx, p.xattr_obj, 0, &b)?;
        self.os.truncate(tx, p.xattr_obj, b.len() as u64)?;
        Ok(())
    }
}

impl PosixFs {
    /// A file's bytes for its log (no access time): `len` bytes at
    /// `offset`, short at the end of the file; `ENOENT` once it is freed.
    pub(crate) fn do_read_for_log(&self, ino: Ino, offset: u64, len: u64) -> PResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let _st = self.locked(&node)?;
        Ok(self.os.read(ino, offset, len as usize)?)
    }

    /// For the intent log: the blocks of the range written in place
    /// (`Objset::prewrite_range`), under the file's lock as the data copied
    /// is read.
    pub(crate) fn do_prewrite_for_log(&self, ino: Ino, offset: u64, len: u64, min_part: u64) -> PResult<Vec<(u64, u32, tarn_ondisk::bp::BlockPtr)>> {
        let node = self.inode(ino)?;
        let _st = self.locked(&node)?;
        Ok(self.os.prewrite_range(ino, offset, len, min_part)?)
    }
}
