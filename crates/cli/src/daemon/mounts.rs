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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::posix::FileSystem;
use tarn_engine::{Error, ErrorKind, Objset, Result};
use tarn_fuse::MountOptions;

use super::{log, Out, State};
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
/// POSIX layer is chosen. `PosixFs` (the POSIX layer over an object set)
/// is built on another branch; until it is merged here, mounting a real
/// pool fails with this error rather than serve anything else.
pub fn filesystem_for(dataset: &str, _objset: Arc<Objset>) -> Result<Arc<dyn FileSystem>> {
    Err(Error::new(ErrorKind::Invalid, format!("cannot mount '{}': the POSIX layer is not built yet", dataset)))
}

fn pool_of(dataset: &str) -> &str {
    dataset.split('/').next().unwrap_or(dataset)
}

/// Mounts `dataset` of a live pool on `dir`.
pub fn mount(st: &mut State, dataset: &str, dir: &Path) -> Result<()> {
    let pool = pool_of(dataset);
    let live = st.pools.get(pool).ok_or_else(|| Error::not_found(format!("no such pool '{}'", pool)))?;
    if dataset != pool {
        return Err(Error::not_found(format!("no such dataset '{}' (pools have only their root dataset so far)", dataset)));
    }
    if let Some(h) = st.mounts.get(dataset) {
        return Err(Error::new(ErrorKind::Exists, format!("'{}' is already mounted on '{}'", dataset, h.dir().display())));
    }
    if let Some((other, _)) = st.mounts.iter().find(|(_, h)| h.dir() == dir) {
        return Err(Error::new(ErrorKind::Exists, format!("'{}' is already a mount point (of '{}')", dir.display(), other)));
    }
    if !dir.is_absolute() {
        return Err(Error::invalid(format!("mount point '{}' must be an absolute path", dir.display())));
    }
    let objset = live.pool.root().clone();
    let fs = st.filesystem(dataset, objset)?;
    detach_dead_mount(dir);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating mount point '{}'", dir.display()), e))?;
    let opts = MountOptions { fsname: dataset.to_string(), allow_other: true, ..Default::default() };
    let h = tarn_fuse::mount(fs, dir, &opts).map_err(|e| e.context(format!("mounting '{}'", dataset)))?;
    log(&format!("mounted '{}' on '{}'", dataset, dir.display()));
    st.mounts.insert(dataset.to_string(), h);
    Ok(())
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
    let live = st.live(pool_of(&dataset), out)?;
    let dir = match a.dir.or_else(|| live.mountpoint.clone()) {
        Some(d) => d,
        None => return Err(Error::invalid(format!("'{}' has mountpoint=none: give a directory", dataset))),
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
