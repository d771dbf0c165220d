//! `tarn mount` and `tarn unmount` in the daemon, and the choice of the
//! file system served for a dataset.
//!
//! A dataset is mounted through `tarn_fuse::mount` with the daemon's mount
//! options: `allow_other` (the daemon runs as root; users reach their files
//! with `default_permissions` checks), the dataset's name as the source in
//! /proc/mounts, four worker threads, 1 MiB requests, write-back cache.
//! Mount points are created if missing. A dead FUSE mount left at the
//! mount point by a killed daemon ("transport endpoint is not connected")
//! is detached first.
//!
//! # Which datasets are mounted
//!
//! OpenZFS mounts every file system at import. Tens of thousands of FUSE
//! mounts (one session and its threads each) are not viable, so tarn
//! mounts eagerly only what an administrator placed explicitly:
//! - a pool's root dataset, at its mountpoint (`pool create -m`, default /POOL);
//! - a dataset whose `mountpoint` is set on the dataset itself (source
//!   `local`, not `none`/`legacy`) and `canmount=on` — when it is created,
//!   cloned, the property is set, or the pool is imported;
//! - any other dataset on demand: `tarn mount DATASET [DIR]` mounts it at
//!   its (inherited) mountpoint or DIR.
//!
//! `canmount=off` datasets are never mounted (`noauto`: only by `tarn mount`).
//! A snapshot is mounted read-only, and only by `tarn mount SNAP DIR`.
//! Serving child datasets inside their parent's mount (FsTable::attach,
//! one session for a whole tree) would make every dataset reachable
//! without a mount of its own; it is not done yet.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::posix::FileSystem;
use tarn_engine::{Error, ErrorKind, Objset, Result};
use tarn_fuse::{MountHandle, MountOptions};

use super::{log, Out, State};
use crate::cache::Cache;
use crate::fmt;

#[derive(Debug, Args, Serialize, Deserialize)]
pub struct MountArgs {
    /// Dataset to mount (a pool's root dataset is named like the pool); none: list mounts
    pub dataset: Option<String>,
    /// Directory to mount on (default: the dataset's mountpoint)
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args, Serialize, Deserialize)]
pub struct UnmountArgs {
    /// Unmount even if busy (open files then fail)
    #[arg(short, long)]
    pub force: bool,
    /// Dataset or mount directory
    pub target: String,
    /// `target` made absolute by the client, to match a directory.
    #[arg(skip)]
    pub target_abs: Option<PathBuf>,
}

impl MountArgs {
    pub fn absolutize(&mut self) {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        if let Some(d) = &mut self.dir {
            *d = cwd.join(&*d);
        }
    }
}

impl UnmountArgs {
    pub fn absolutize(&mut self) {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let p = cwd.join(&self.target);
        self.target_abs = Some(std::fs::canonicalize(&p).unwrap_or(p));
    }
}

/// The file system that serves an object set: the one place where the
/// POSIX layer is chosen. Snapshots (`pool/fs@snap`) are served read-only.
pub fn filesystem_for(dataset: &str, objset: Arc<Objset>) -> Result<Arc<dyn FileSystem>> {
    let opts = tarn_engine::posix::PosixOptions { readonly: dataset.contains('@'), ..Default::default() };
    let fs = tarn_engine::posix::PosixFs::open(objset, opts).map_err(|e| e.context(format!("cannot mount '{}'", dataset)))?;
    Ok(fs)
}

use super::datasets::pool_of;

/// Mounts `dataset` (file system or snapshot) of a live pool on `dir`.
pub fn mount(st: &mut State, dataset: &str, dir: &Path) -> Result<()> {
    let pool = pool_of(dataset);
    let live = st.pools.get(pool).ok_or_else(|| Error::not_found(format!("no such pool '{}'", pool)))?;
    if let Some(h) = st.mounts.get(dataset) {
        return Err(Error::new(ErrorKind::Exists, format!("'{}' is already mounted on '{}'", dataset, h.dir().display())));
    }
    if let Some((other, _)) = st.mounts.iter().find(|(_, h)| h.dir() == dir) {
        return Err(Error::new(ErrorKind::Exists, format!("'{}' is already a mount point (of '{}')", dir.display(), other)));
    }
    if !dir.is_absolute() {
        return Err(Error::invalid(format!("mount point '{}' must be an absolute path", dir.display())));
    }
    let objset = if dataset == pool {
        live.pool.root().clone()
    } else {
        live.pool.datasets().objset(dataset).map_err(|e| match e.kind {
            ErrorKind::NotFound => Error::not_found(format!("cannot mount '{}': no such dataset", dataset)),
            _ => e.context(format!("cannot mount '{}'", dataset)),
        })?
    };
    let fs = st.filesystem(dataset, objset)?;
    detach_dead_mount(dir);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating mount point '{}'", dir.display()), e))?;
    let opts = MountOptions { fsname: dataset.to_string(), allow_other: true, read_only: dataset.contains('@'), ..Default::default() };
    let h = tarn_fuse::mount(fs, dir, &opts).map_err(|e| e.context(format!("mounting '{}'", dataset)))?;
    log(&format!("mounted '{}' on '{}'", dataset, dir.display()));
    st.mounts.insert(dataset.to_string(), h);
    Ok(())
}

/// Where `tarn mount DATASET` mounts a dataset: its mountpoint, unless that
/// is none/legacy or canmount=off.
fn default_dir(st: &mut State, dataset: &str, out: &mut Out) -> Result<PathBuf> {
    let pool = pool_of(dataset);
    let live = st.live(pool, out)?;
    if dataset == pool {
        return live.mountpoint.clone().ok_or_else(|| Error::invalid(format!("'{}' has mountpoint=none: give a directory", dataset)));
    }
    if dataset.contains('@') {
        return Err(Error::invalid(format!("cannot mount '{}': a snapshot is mounted only on a directory given (tarn mount SNAP DIR)", dataset)));
    }
    let ds = live.pool.datasets();
    let no_such = |e: Error| match e.kind {
        ErrorKind::NotFound => Error::not_found(format!("cannot mount '{}': no such dataset", dataset)),
        _ => e,
    };
    if ds.get(dataset, "canmount").map_err(no_such)?.value == "off" {
        return Err(Error::invalid(format!("cannot mount '{}': 'canmount' property is set to 'off'", dataset)));
    }
    match ds.get(dataset, "mountpoint").map_err(no_such)?.value.as_str() {
        v @ ("none" | "legacy") => Err(Error::invalid(format!("cannot mount '{}': mountpoint={}: give a directory", dataset, v))),
        v => Ok(PathBuf::from(v)),
    }
}

/// Mounts a newly created, cloned, imported or re-propertied dataset if it
/// is mounted eagerly (see the module comment); a failure is a warning.
pub fn auto_mount(st: &mut State, dataset: &str, out: &mut Out) {
    if st.mounts.contains_key(dataset) || dataset == pool_of(dataset) {
        return;
    }
    let Some(live) = st.pools.get(pool_of(dataset)) else { return };
    let ds = live.pool.datasets();
    let eager = ds.get(dataset, "canmount").is_ok_and(|c| c.value == "on");
    let Ok(mp) = ds.get(dataset, "mountpoint") else { return };
    if !eager || mp.source != tarn_engine::dataset::Source::Local || mp.value == "none" || mp.value == "legacy" {
        return;
    }
    if let Err(e) = mount(st, dataset, Path::new(&mp.value)) {
        out.warnings.push(format!("'{}' is created but not mounted: {}", dataset, e));
    }
}

/// Mounts `dataset` again at its default place after a rename or a
/// property change unmounted it; a failure is a warning.
pub fn remount_default(st: &mut State, dataset: &str, out: &mut Out) {
    let res = default_dir(st, dataset, out).and_then(|dir| mount(st, dataset, &dir));
    if let Err(e) = res {
        out.warnings.push(format!("'{}' is no longer mounted: {}", dataset, e));
    }
}

/// Unmounts `name` and every mounted dataset below it (its snapshots,
/// its descendants); returns their names. If one is busy (and not
/// `force`), the ones already unmounted are mounted again and the error
/// is returned.
pub fn unmount_below(st: &mut State, name: &str, force: bool) -> Result<Vec<String>> {
    let below = |d: &str| d == name || d.starts_with(&format!("{}/", name)) || d.starts_with(&format!("{}@", name));
    let mine: Vec<String> = st.mounts.keys().filter(|d| below(d)).cloned().collect();
    let mut done: Vec<(String, PathBuf)> = Vec::new();
    for d in &mine {
        let dir = st.mounts.get(d).map(|h| h.dir().to_path_buf());
        if let Err(e) = unmount(st, d, force) {
            for (m, dir) in &done {
                if let Err(e) = mount(st, m, dir) {
                    log(&format!("cannot mount '{}' again: {}", m, e));
                }
            }
            return Err(e);
        }
        done.push((d.clone(), dir.unwrap_or_default()));
    }
    Ok(mine)
}

/// The root dataset's mountpoint property changed: the cache entry (which
/// the daemon mounts the root from) follows it.
pub fn root_mountpoint_changed(st: &mut State, pool: &str, out: &mut Out) -> Result<()> {
    let live = st.live(pool, out)?;
    let mp = live.pool.datasets().get(pool, "mountpoint")?.value;
    let setting = if mp == "legacy" { "none".to_string() } else { mp };
    let mut cache = Cache::load()?;
    if let Some(e) = cache.pools.iter_mut().find(|p| p.name == pool) {
        e.mountpoint = Some(setting.clone());
    }
    cache.save()?;
    if let Some(l) = st.pools.get_mut(pool) {
        l.mountpoint = super::state::mountpoint_of(pool, Some(&setting));
    }
    Ok(())
}

/// The rollback hook: `dataset` was rolled back while mounted on `h`. The
/// dataset layer restarted the same `Arc<Objset>` from the snapshot, but
/// the kernel still caches names, attributes and pages of the old content,
/// so every inode it holds is invalidated.
///
/// For the POSIX layer (being finished on another branch): a `PosixFs`
/// (`h.filesystem()`) that caches anything of the object set in memory —
/// file sizes of open handles, directory entries, the next object number —
/// must drop it and re-read the object set here, *before* the kernel is
/// told to look again. MemFs (the `TARN_TEST_MEMFS` hook) has no pool
/// state to reload.
pub fn after_rollback(dataset: &str, h: &MountHandle) {
    let n = h.invalidate_all();
    log(&format!("rolled back '{}': invalidated {} cached inodes of '{}'", dataset, n, h.dir().display()));
}

/// Detaches a FUSE mount whose server died (stat fails with ENOTCONN).
fn detach_dead_mount(dir: &Path) {
    if let Err(e) = std::fs::metadata(dir) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            if let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) {
                // SAFETY: `c` is a valid NUL-terminated path for the call.
                let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
                log(&format!("detached a dead mount on '{}' ({})", dir.display(), if r == 0 { "ok" } else { "failed" }));
            }
        }
    }
}

/// Unmounts a mounted dataset: writes back, syncs; busy fails unless `force`.
pub fn unmount(st: &mut State, dataset: &str, force: bool) -> Result<()> {
    let h = st.mounts.get(dataset).ok_or_else(|| Error::not_found(format!("'{}' is not mounted", dataset)))?;
    let res = if force { h.unmount_force() } else { h.unmount() };
    if !h.is_mounted() {
        log(&format!("unmounted '{}' from '{}'", dataset, h.dir().display()));
        st.mounts.remove(dataset);
    }
    res.map_err(|e| match e.kind {
        ErrorKind::Busy => Error::new(ErrorKind::Busy, format!("cannot unmount '{}': {} (`tarn unmount -f` forces)", dataset, e.msg)),
        _ => e.context(format!("unmounting '{}'", dataset)),
    })
}

pub fn handle_mount(st: &mut State, a: MountArgs, out: &mut Out) -> Result<()> {
    let Some(dataset) = a.dataset else {
        prune_ended(st);
        let rows: Vec<Vec<String>> = st.mounts.iter().map(|(d, h)| vec![d.clone(), h.dir().display().to_string()]).collect();
        out.text = fmt::table(&["DATASET", "MOUNTPOINT"], &rows, false);
        return Ok(());
    };
    st.live(pool_of(&dataset), out)?;
    let dir = match a.dir {
        Some(d) => d,
        None => default_dir(st, &dataset, out)?,
    };
    mount(st, &dataset, &dir)
}

/// Forgets mounts whose session ended because someone else unmounted them
/// (`umount DIR`), syncing their file systems.
fn prune_ended(st: &mut State) {
    let ended: Vec<String> = st.mounts.iter().filter(|(_, h)| !h.is_mounted()).map(|(d, _)| d.clone()).collect();
    for ds in ended {
        log(&format!("'{}' was unmounted outside tarn", ds));
        if let Err(e) = unmount(st, &ds, false) {
            log(&e.msg);
        }
    }
}

pub fn handle_unmount(st: &mut State, a: UnmountArgs, _out: &mut Out) -> Result<()> {
    let dataset = if st.mounts.contains_key(&a.target) {
        a.target.clone()
    } else {
        let by_dir = a.target_abs.as_ref().and_then(|p| st.mounts.iter().find(|(_, h)| h.dir() == p.as_path()).map(|(d, _)| d.clone()));
        by_dir.ok_or_else(|| Error::not_found(format!("'{}' is not a mounted dataset or tarn mount point", a.target)))?
    };
    unmount(st, &dataset, a.force)
}
