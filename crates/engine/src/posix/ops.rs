//! [`FileSystem`] for [`PosixFs`]: each call checks what the operation
//! alone can check and hands over to `namei.rs` or `file.rs`.

use std::sync::atomic::Ordering;

use super::api::*;
use super::fs::{err, PosixFs};
use super::namei::SYMLINK_MAX;

impl FileSystem for PosixFs {
    fn root(&self) -> Ino {
        self.root
    }

    fn lookup(&self, parent: Ino, name: &[u8]) -> PResult<Attr> {
        self.do_lookup(parent, name)
    }

    fn getattr(&self, ino: Ino) -> PResult<Attr> {
        self.do_getattr(ino)
    }

    fn setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr) -> PResult<Attr> {
        let a = self.do_setattr(caller, ino, set)?;
        self.after_change(ino)?;
        Ok(a)
    }

    fn readlink(&self, ino: Ino) -> PResult<Vec<u8>> {
        self.do_readlink(ino)
    }

    fn mknod(&self, caller: &Caller, parent: Ino, name: &[u8], mode: u32, rdev: u32) -> PResult<Attr> {
        match FileKind::from_mode(mode) {
            Some(FileKind::Dir) | Some(FileKind::Symlink) | None => {
                Err(err(libc::EINVAL, format!("mknod of mode {:o}: use mkdir or symlink", mode)))
            }
            Some(_) => self.created(self.create(caller, parent, name, mode, rdev, &[])),
        }
    }

    fn mkdir(&self, caller: &Caller, parent: Ino, name: &[u8], mode: u32) -> PResult<Attr> {
        self.created(self.create(caller, parent, name, libc::S_IFDIR | (mode & 0o7777), 0, &[]))
    }

    fn symlink(&self, caller: &Caller, parent: Ino, name: &[u8], target: &[u8]) -> PResult<Attr> {
        if target.is_empty() {
            return Err(err(libc::ENOENT, "empty symbolic link target"));
        }
        if target.len() > SYMLINK_MAX {
            return Err(err(libc::ENAMETOOLONG, format!("symbolic link target of {} bytes", target.len())));
        }
        let caller = Caller { umask: 0, ..*caller };
        self.created(self.create(&caller, parent, name, libc::S_IFLNK | 0o777, 0, target))
    }

    fn link(&self, _caller: &Caller, ino: Ino, newparent: Ino, newname: &[u8]) -> PResult<Attr> {
        self.created(self.do_link(ino, newparent, newname))
    }

    fn unlink(&self, caller: &Caller, parent: Ino, name: &[u8]) -> PResult<()> {
        self.do_unlink(caller, parent, name, false)?;
        self.after_change(0)
    }

    fn rmdir(&self, caller: &Caller, parent: Ino, name: &[u8]) -> PResult<()> {
        self.do_unlink(caller, parent, name, true)?;
        self.after_change(0)
    }

    fn rename(&self, caller: &Caller, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: RenameFlags) -> PResult<()> {
        self.do_rename(caller, parent, name, newparent, newname, flags)?;
        self.after_change(0)
    }

    fn open(&self, ino: Ino) -> PResult<()> {
        self.do_open(ino)
    }

    fn release(&self, ino: Ino) -> PResult<()> {
        self.do_release(ino)
    }

    fn read(&self, ino: Ino, offset: u64, size: u32) -> PResult<Vec<u8>> {
        self.do_read(ino, offset, size)
    }

    fn write(&self, caller: &Caller, ino: Ino, offset: u64, data: &[u8]) -> PResult<u32> {
        let n = self.do_write(caller, ino, offset, data)?;
        self.after_change(ino)?;
        Ok(n)
    }

    /// Commits the intent log: this file's changes and the namespace's
    /// (`fdatasync` the same: the log keeps no separate attribute records
    /// to leave out).
    fn fsync(&self, ino: Ino, _datasync: bool) -> PResult<()> {
        self.do_getattr(ino)?;
        self.commit(ino)
    }

    fn fallocate(&self, caller: &Caller, ino: Ino, offset: u64, len: u64, flags: FallocFlags) -> PResult<()> {
        self.do_fallocate(caller, ino, offset, len, flags)?;
        self.after_change(ino)
    }

    /// Shares whole blocks (block cloning) and copies the rest; see
    /// `do_copy_file_range`.
    fn copy_file_range(&self, caller: &Caller, ino_in: Ino, off_in: u64, ino_out: Ino, off_out: u64, len: u64) -> PResult<u64> {
        let n = self.do_copy_file_range(caller, ino_in, off_in, ino_out, off_out, len)?;
        self.after_change(ino_out)?;
        Ok(n)
    }

    fn readdir(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<DirEntry>> {
        self.do_readdir(ino, cookie, max)
    }

    fn readdirplus(&self, ino: Ino, cookie: u64, max: usize) -> PResult<Vec<(DirEntry, Attr)>> {
        self.do_readdirplus(ino, cookie, max)
    }

    fn statfs(&self) -> PResult<StatFs> {
        self.do_statfs()
    }

    fn setxattr(&self, _caller: &Caller, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> PResult<()> {
        self.change_xattr(ino, name, Some(value), how)?;
        self.after_change(ino)
    }

    fn getxattr(&self, ino: Ino, name: &[u8]) -> PResult<Vec<u8>> {
        self.do_getxattr(ino, name)
    }

    fn listxattr(&self, ino: Ino) -> PResult<Vec<Vec<u8>>> {
        self.do_listxattr(ino)
    }

    fn removexattr(&self, _caller: &Caller, ino: Ino, name: &[u8]) -> PResult<()> {
        self.change_xattr(ino, name, None, XattrSet::Any)?;
        self.after_change(ino)
    }

    fn sync_all(&self) -> PResult<()> {
        self.sync_now()
    }

    fn kernel_cache(&self, mount: u64, bytes: u64) {
        self.os.core.set_kernel_cache(mount, bytes);
    }

    fn uncached_writes(&self) -> bool {
        self.do_uncached_writes()
    }

    fn keep_size(&self, ino: Ino, size: u64) -> PResult<()> {
        self.do_keep_size(ino, size)?;
        self.after_change(ino)
    }

    fn set_access_times(&self, atime: bool, relatime: bool) {
        self.atime.store(atime, Ordering::Relaxed);
        self.relatime.store(relatime, Ordering::Relaxed);
    }

    fn set_sync_policy(&self, policy: SyncPolicy) {
        self.store_sync_policy(policy);
    }
}

impl PosixFs {
    /// A create or link made: durable before it returns under `sync=always`.
    fn created(&self, made: PResult<Attr>) -> PResult<Attr> {
        let a = made?;
        self.after_change(a.ino)?;
        Ok(a)
    }
}
