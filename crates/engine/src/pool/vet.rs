//! Vetting the devices `pool create` and `pool add` are about to write over.
//!
//! A pool takes a device by writing its first and last 512 KiB (labels, or
//! a cache header) and then whatever the allocator or the L2ARC chooses, so
//! a device that is somebody's data must be refused before the first byte.
//! OpenZFS's zpool does this in userland (zpool_vdev.c: `is_device_in_use`,
//! `check_file`, libblkid); tarn's steps, in order, for every device:
//!
//! 1. **What it is**: a regular file or a block device, existing unless
//!    `--size` creates it — not `/`, a directory or a character device.
//! 2. **Given once**: two arguments naming one file or device (the same
//!    path, a symlink, a relative path, a hard link, another node of the
//!    same disk) are refused, naming both.
//! 3. **Not held in this process**: a data or cache device of a pool this
//!    process has imported (`sys::file::holder_in_process`).
//! 4. **Not busy on the host** (`sys::inuse`): mounted, swap, under dm or
//!    md, the backing file of a loop device, refused an exclusive open.
//! 5. **Opened and locked**: another process's lock is another tarn's pool.
//! 6. **Its contents** ([`check_contents`]): large enough for its role; no
//!    label of a pool that is not destroyed; no other pool's cache header;
//!    no file-system, swap, RAID or partition-table signature (`sys::probe`).
//!
//! Steps 1–5 find a device that cannot be taken: `-f` changes nothing.
//! Step 6 finds one the operator may mean to overwrite: `-f` takes it.
//!
//! | found | without `-f` | with `-f` |
//! |---|---|---|
//! | a device of a pool imported here, or locked by another process | refused | refused |
//! | mounted, swap, dm/md member, loop backing file, busy | refused | refused |
//! | label ACTIVE, no holder (a crashed host, another host) | refused | taken |
//! | label EXPORTED | refused | taken |
//! | label SPARE (a hot spare of a pool not imported here) | refused | taken |
//! | label DESTROYED | taken | taken |
//! | cache header of another pool | refused | taken |
//! | a signature (ext4, xfs, swap, ZFS, GPT, …) | refused | taken |
//!
//! Every device of a command is vetted before any is written, so a command
//! with one bad device changes nothing; the vetted devices stay open and
//! locked until the pool takes them, so nothing can slip in between.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_ondisk::label::{self, PoolState};

use super::label::read_labels;
use crate::arc::l2::{self, read_cache_label};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::device::BlockDevice;
use crate::sys::file::{holder_in_process, FileDevice};
use crate::sys::inuse::{self, DeviceId};
use crate::sys::probe::{probe_device, Signature};

/// What a new device will be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Data,
    Cache,
    /// A hot spare: vetted as a data device, as it may become one.
    Spare,
}

impl Role {
    fn min_bytes(self) -> u64 {
        match self {
            Role::Data | Role::Spare => label::MIN_DEVICE_BYTES,
            Role::Cache => l2::MIN_DEVICE_BYTES,
        }
    }
}

/// A device that passed every step: open, locked, ready to be written.
pub struct Vetted {
    pub path: String,
    pub dev: Arc<FileDevice>,
    pub role: Role,
    /// Created by this command (`--size`): removed again if the command fails.
    pub created: bool,
}

/// Vets `devs` in order (steps 1–6 of the module docs) and returns them
/// open and locked; on any refusal nothing is written and files this call
/// created are removed. `create_size`: create each device as a new sparse
/// file of this size. `own_pool`: the pool a cache device is for (its own
/// stale cache header is no reason to refuse).
pub fn open_devices(devs: &[(PathBuf, Role)], create_size: Option<u64>, force: bool, own_pool: Option<u64>) -> Result<Vec<Vetted>> {
    let mut out: Vec<Vetted> = Vec::new();
    let mut seen: Vec<(DeviceId, String)> = Vec::new();
    let res = devs.iter().try_for_each(|(p, role)| {
        let v = vet_one(p, *role, create_size, &mut seen)?;
        out.push(v);
        let v = out.last().expect("just pushed");
        check_contents(&v.path, v.dev.as_ref(), v.role, force, own_pool)
    });
    if let Err(e) = res {
        for v in out.into_iter().filter(|v| v.created) {
            let path = v.path.clone();
            drop(v);
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    assert_eq!(out.len(), devs.len(), "every device vetted, none twice");
    Ok(out)
}

/// Steps 1–5 for one device; `seen` holds the devices vetted before it.
fn vet_one(p: &Path, role: Role, create_size: Option<u64>, seen: &mut Vec<(DeviceId, String)>) -> Result<Vetted> {
    let path = p.display().to_string();
    let meta = match std::fs::metadata(p) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create_size.is_some() => None,
        Err(e) => return Err(Error::io(format!("cannot use '{}'", path), e)),
    };
    let Some(meta) = meta else {
        let size = create_size.expect("only a --size create gets here");
        let dev = FileDevice::create(p, size).map_err(|e| Error::io(format!("cannot use '{}'", path), e))?;
        seen.push((dev.id(), path.clone()));
        return lock(p, dev, role, true);
    };
    let id = DeviceId::of(&meta).ok_or_else(|| Error::invalid(format!("cannot use '{}': it is {}, not a regular file or block device", path, inuse::describe_kind(&meta))))?;
    if let Some((_, first)) = seen.iter().find(|(i, _)| *i == id) {
        return Err(given_twice(first, &path));
    }
    seen.push((id, path.clone()));
    if create_size.is_some() {
        return Err(Error::new(ErrorKind::Exists, format!("cannot use '{}': it already exists, and --size creates new device files (leave --size out to use it)", path)));
    }
    if let Some(owner) = holder_in_process(id) {
        return Err(Error::new(ErrorKind::Busy, format!("'{}' is {}", path, owner)));
    }
    if let Some(why) = inuse::busy(p, id) {
        return Err(Error::new(ErrorKind::Busy, format!("'{}' is {}", path, why)));
    }
    let dev = FileDevice::open(p).map_err(|e| Error::io(format!("cannot use '{}'", path), e))?;
    lock(p, dev, role, false)
}

/// Opens a device of a pool being imported read-write, and locks it, after
/// steps 3 and 4: a device held by a pool of this process, or used on the
/// host (a loop device over the same image, a mount, swap), would be
/// written under its user — two imports of one image through two names
/// take two different locks.
pub fn open_for_import(p: &Path) -> Result<FileDevice> {
    let path = p.display();
    let meta = std::fs::metadata(p).map_err(|e| Error::io(format!("cannot open '{}'", path), e))?;
    if let Some(id) = DeviceId::of(&meta) {
        if let Some(owner) = holder_in_process(id) {
            return Err(Error::new(ErrorKind::Busy, format!("'{}' is {}", path, owner)));
        }
        if let Some(why) = inuse::busy(p, id) {
            return Err(Error::new(ErrorKind::Busy, format!("'{}' is {}", path, why)));
        }
    }
    let fd = FileDevice::open(p).map_err(|e| Error::io(format!("cannot open '{}'", path), e))?;
    fd.lock_exclusive().map_err(|e| Error::new(ErrorKind::Busy, e.to_string()))?;
    Ok(fd)
}

fn given_twice(first: &str, again: &str) -> Error {
    if first == again {
        Error::invalid(format!("'{}' is given twice: each device can be used once", first))
    } else {
        Error::invalid(format!("'{}' and '{}' are the same device, given twice: each device can be used once", again, first))
    }
}

fn lock(p: &Path, dev: FileDevice, role: Role, created: bool) -> Result<Vetted> {
    let path = p.display().to_string();
    if let Err(e) = dev.lock_exclusive() {
        drop(dev);
        if created {
            let _ = std::fs::remove_file(p);
        }
        return Err(Error::new(ErrorKind::Busy, format!("'{}' is in use: {}", path, e.holder_desc)));
    }
    Ok(Vetted { path, dev: Arc::new(dev), role, created })
}

/// Step 6: refuses a device too small for `role`, or (without `force`)
/// one that holds another pool's label or cache header or a signature.
/// Works on any device (the tests' in-memory ones too).
pub fn check_contents(path: &str, dev: &dyn BlockDevice, role: Role, force: bool, own_pool: Option<u64>) -> Result<()> {
    let size = dev.size_bytes();
    if size < role.min_bytes() {
        let what = match role {
            Role::Data => "a pool device",
            Role::Spare => "a hot spare",
            Role::Cache => "a cache device",
        };
        return Err(Error::invalid(format!("'{}' is too small: {} bytes, {} needs at least {}", path, size, what, role.min_bytes())));
    }
    let config = read_labels(dev).config;
    if let Some(c) = &config {
        let refused = match c.state {
            PoolState::Destroyed => None,
            PoolState::Exported => Some(format!("'{}' is part of exported pool '{}'; use -f to overwrite it", path, c.pool_name)),
            PoolState::Spare => Some(format!("'{}' is a hot spare of pool '{}' (not imported here); use -f to overwrite it", path, c.pool_name)),
            _ => Some(format!(
                "'{}' may be part of active pool '{}' (last used on host '{}', not exported, held by no process here); use -f if no other host uses it",
                path, c.pool_name, c.hostname
            )),
        };
        if let Some(msg) = refused.filter(|_| !force) {
            return Err(Error::new(ErrorKind::Busy, msg));
        }
    }
    if let Some((pool, _)) = read_cache_label(dev) {
        if Some(pool) != own_pool && !force {
            return Err(Error::new(ErrorKind::Busy, format!("'{}' is a cache device of pool {:016x}, which is not imported here; use -f to overwrite it", path, pool)));
        }
    }
    let found = probe_device(dev).map_err(|e| Error::io(format!("cannot read '{}'", path), e))?;
    // The tarn label and cache header were judged above (a destroyed pool's
    // label is no reason to refuse); an undecodable label is a signature.
    let judged = |s: Signature| s == Signature::TarnCache || (s == Signature::TarnLabel && config.is_some());
    if let Some(f) = found.filter(|f| !judged(f.signature) && !force) {
        return Err(Error::new(ErrorKind::Busy, format!("'{}' contains {}; use -f to overwrite it", path, f.signature.describe())));
    }
    Ok(())
}
