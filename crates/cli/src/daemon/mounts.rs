//! `tarn mount` and `tarn unmount` in the daemon, and where each dataset
//! is served.
//!
//! A mount of its own is made through `tarn_fuse::mount_on` with the
//! daemon's mount options: `allow_other` (the daemon runs as root; users
//! reach their files with `default_permissions` checks), `fuseblk` over a
//! loop device of its own so that `sync(2)` reaches the pool (`fuse.tarn`
//! with the dataset's name as the source where that is impossible; see
//! `tarn_fuse`'s `blk`), four worker threads, 1 MiB requests, write-back cache. Every mount point passes
//! [`check_dir`] first (`mountdir`: the host's system directories, the
//! daemon's files, a file, `overlay=off` over a non-empty directory, a
//! directory already mounted on; paths resolved), is created if missing,
//! and is opened before the mount call, which is made on the open
//! directory. Dead FUSE mounts on the way are detached first, and the
//! daemon's mounts are recorded for the next daemon (`mountdir`).
//!
//! Unmounting removes exactly the mount made, once (`tarn_fuse`'s
//! `mountpoint`: the topmost mount at the directory must still be the one
//! recorded). Several at once go nested first ([`unmount_order`]: the
//! kernel's mount tree, then path depth): export, destroy, rename, a
//! property change, daemon stop.
//!
//! # Changes of `mountpoint` and `canmount`
//!
//! As OpenZFS's changelist: the place the dataset would be mounted at once
//! is checked ([`planned_dir`], [`check_dir`]) before anything changes, and
//! so is the new place of each file system below it with a mount of its
//! own that follows its `mountpoint` ([`moved_dirs`]; a rename moves
//! them too: [`renamed_dirs`]);
//! then what is mounted at and below the dataset is unmounted (busy: the
//! change is refused), the property changed, and what was mounted is
//! mounted again where the new values say — a pool's root too, whose cache
//! entry follows its `mountpoint` — plus whatever now mounts by itself
//! ([`auto_mount`]). A property may name a place the daemon refuses as
//! long as nothing is mounted there (`canmount=noauto`): the refusal is at
//! mount time.
//!
//! # Which datasets are mounted, and how
//!
//! OpenZFS mounts every file system at import, each on its own mount.
//! Tens of thousands of FUSE mounts (a session and its threads each) are
//! not viable, so tarn gives a mount of its own only to what an
//! administrator placed explicitly, and serves every other file system
//! inside its parent's mount, opened on first access:
//! - a pool's root dataset is mounted at its mountpoint (`pool create -m`,
//!   default /POOL) if `canmount=on`;
//! - a dataset whose `mountpoint` is set on the dataset itself (source
//!   `local`, not `none`/`legacy`) and `canmount=on` gets its own mount
//!   when it is created, cloned, the property is set, or the pool is
//!   imported;
//! - a dataset whose mountpoint is inherited (so it lies at its parent's
//!   mountpoint plus its name) and `canmount=on` is served *inside its
//!   parent's mount* at that path, without a mount of its own
//!   (`served::DatasetSplice`, `tarn_fuse`'s slots): it appears there as
//!   soon as it is created, is opened when first looked up, vanishes when
//!   destroyed or renamed, and moves to a mount of its own when its
//!   mountpoint is set locally. `tarn unmount` stops serving it there until
//!   `tarn mount`;
//! - any other dataset on demand: `tarn mount DATASET [DIR]` mounts it on
//!   its own at its mountpoint or DIR (`canmount=noauto`, a parent that is
//!   not mounted, a directory elsewhere).
//!
//! `canmount=off` datasets are never mounted. A snapshot is reachable
//! read-only under its file system's `.zfs/snapshot/NAME` (opened on first
//! access, as OpenZFS automounts it), and mounted on its own, read-only,
//! only by `tarn mount SNAP DIR`.
//!
//! Datasets served inside one mount share its device number (`st_dev`):
//! `du -x` and `find -xdev` descend into them, as into directories, where
//! on OpenZFS they stop at each file system's own mount. Their inode
//! numbers differ (the slot is in the top bits), hard links and renames
//! between them fail with `EXDEV`, and each keeps its own properties:
//! `readonly` (`EROFS`), `recordsize`, `compression`, `atime` and
//! `relatime`, and `statfs` (`df`) reports its own size and free space
//! under its quota. `readonly`, `atime` and `relatime` take effect at once
//! on a served file system, as a remount applies them on OpenZFS; the
//! others are properties of the object set, which reads them as it writes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::error::printable;
use tarn_engine::{Error, ErrorKind, Result};
use tarn_fuse::{Kind, MountHandle, MountOptions, MountPoint, Splice};

use super::datasets::pool_of;
use super::mountdir::{self, Recorded};
use super::served::{attachable, DatasetSplice};
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

/// Whether `name` is `top` or below it (`top/…`, `top@…`).
pub fn below(name: &str, top: &str) -> bool {
    name == top || name.strip_prefix(top).is_some_and(|r| r.starts_with('/') || r.starts_with('@'))
}

/// The mount serving `name`: its own, or the one it is served inside.
pub fn serving<'a>(st: &'a State, name: &str) -> Option<&'a MountHandle> {
    st.mounts.get(name).or_else(|| st.mounts.values().find(|h| h.serves(name)))
}

/// Where datasets can be reached now (see [`Reach::path`]); built once for
/// many questions (`tarn list -o mounted` of every dataset).
pub struct Reach<'a> {
    st: &'a State,
    /// Snapshots and datasets open inside some mount, with their paths.
    open: HashMap<String, PathBuf>,
}

impl<'a> Reach<'a> {
    pub fn new(st: &'a State) -> Reach<'a> {
        let open = st.mounts.values().flat_map(|h| h.served()).filter(|s| s.open).map(|s| (s.name, s.path)).collect();
        Reach { st, open }
    }

    /// Where `name` can be reached: its own mount's directory, its place
    /// inside its parent's mount, or (a snapshot) where a `.zfs` directory
    /// serves it open; `None` if it is not mounted.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        if let Some(h) = self.st.mounts.get(name) {
            return Some(h.dir().to_path_buf());
        }
        if name.contains('@') {
            return self.open.get(name).cloned();
        }
        let (parent, short) = name.rsplit_once('/')?;
        let live = self.st.pools.get(pool_of(name))?;
        if !self.st.served.may_attach(name) || !attachable(live.pool.datasets(), name) {
            return None;
        }
        Some(self.path(parent)?.join(short))
    }
}

/// Where `name` can be reached now ([`Reach::path`]).
pub fn mount_path(st: &State, name: &str) -> Option<PathBuf> {
    Reach::new(st).path(name)
}

/// Every mount is told that `names` may have appeared or changed.
pub fn refresh<S: AsRef<str>>(st: &State, names: &[S]) {
    let names: Vec<&str> = names.iter().map(|n| n.as_ref()).collect();
    for h in st.mounts.values() {
        h.refresh(&names);
    }
}

/// Properties a served file system applies itself, not its object set: a
/// change to one of them goes to `served_props_changed`.
pub const SERVED_PROPS: [&str; 4] = ["readonly", "atime", "relatime", "sync"];

/// After one of `SERVED_PROPS` changed on `dataset`: every file system
/// served at or below it takes their current values from now on (refuses
/// changes or accepts them again, updates access times or not).
pub fn served_props_changed(st: &State, dataset: &str) {
    let Some(live) = st.pools.get(pool_of(dataset)) else { return };
    let on = |name: &str, p: &str| live.pool.datasets().get(name, p).is_ok_and(|v| v.value == "on");
    for h in st.mounts.values() {
        for s in h.served().into_iter().filter(|s| s.kind == Kind::Dataset && below(&s.name, dataset)) {
            h.set_readonly(&s.name, on(&s.name, "readonly"));
            h.set_access_times(&s.name, on(&s.name, "atime"), on(&s.name, "relatime"));
            h.set_sync_policy(&s.name, sync_policy(live.pool.datasets(), &s.name));
        }
    }
}

/// The `sync` property of `name` as the POSIX layer takes it.
pub fn sync_policy(dsl: &tarn_engine::dataset::Datasets, name: &str) -> tarn_engine::posix::SyncPolicy {
    dsl.get(name, "sync").ok().and_then(|v| tarn_engine::posix::SyncPolicy::parse(&v.value)).unwrap_or_default()
}

/// The file system `name` belongs to (itself, or a snapshot's).
fn filesystem_of(name: &str) -> &str {
    name.split_once('@').map_or(name, |(fs, _)| fs)
}

/// Checks `dir` as the place of a mount of `dataset`'s own (see
/// `mountdir`: the host's system directories, the daemon's files, a file,
/// a non-empty directory with `overlay=off`; and not another mount's
/// directory) and returns it resolved. Every mount goes through here
/// first, and so does every command that would mount at once, before it
/// changes anything. `overlay`: the value to judge by (a dataset not yet
/// created); `None`: the dataset's own.
pub fn check_dir(st: &State, dataset: &str, dir: &Path, overlay: Option<bool>) -> Result<PathBuf> {
    let overlay = overlay.unwrap_or_else(|| {
        let live = st.pools.get(pool_of(dataset));
        live.is_none_or(|l| l.pool.datasets().get(filesystem_of(dataset), "overlay").is_ok_and(|v| v.value == "on"))
    });
    let current = st.mounts.get(dataset).map(|h| h.dir());
    let real = mountdir::check(dir, overlay, current).map_err(|e| Error::new(e.kind, format!("cannot mount '{}': {}", dataset, e.msg)))?;
    if let Some((other, _)) = st.mounts.iter().find(|(d, h)| h.dir() == real && d.as_str() != dataset) {
        return Err(Error::new(ErrorKind::Exists, format!("cannot mount '{}': '{}' is already a mount point (of '{}')", dataset, mountdir::shown(&real), other)));
    }
    Ok(real)
}

/// Mounts `dataset` (file system or snapshot) of a live pool on `dir`, on
/// a mount of its own, after [`check_dir`]. A file system served inside
/// another mount is taken out of it first (busy: it stays, and this fails).
pub fn mount(st: &mut State, dataset: &str, dir: &Path) -> Result<()> {
    let pool = pool_of(dataset);
    let dsl = st.pools.get(pool).ok_or_else(|| Error::not_found(format!("no such pool '{}'", pool)))?.pool.datasets().clone();
    if let Some(h) = st.mounts.get(dataset) {
        return Err(Error::new(ErrorKind::Exists, format!("'{}' is already mounted on '{}'", dataset, h.dir().display())));
    }
    if !dsl.exists(dataset) {
        return Err(Error::not_found(format!("cannot mount '{}': no such dataset", dataset)));
    }
    let dir = check_dir(st, dataset, dir, None)?;
    let snapshot = dataset.contains('@');
    if !snapshot {
        for h in st.mounts.values() {
            h.detach(dataset, false).map_err(|e| Error::new(e.kind, format!("cannot mount '{}': it is served inside another mount and {}", dataset, e.msg)))?;
        }
        st.served.claim_own(dataset).map_err(|e| e.context(format!("cannot mount '{}'", dataset)))?;
    }
    let res = (|| {
        let fs = st.served.filesystem(&dsl, dataset)?;
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("cannot mount '{}': creating mount point '{}'", dataset, mountdir::shown(&dir)), e))?;
        let at = MountPoint::open(&dir).map_err(|e| e.context(format!("cannot mount '{}'", dataset)))?;
        if at.path() != dir {
            let now = mountdir::shown(at.path());
            return Err(Error::invalid(format!("cannot mount '{}': mount point '{}' changed while it was being mounted (it is now '{}')", dataset, mountdir::shown(&dir), now)));
        }
        let opts = MountOptions { fsname: dataset.to_string(), allow_other: true, read_only: snapshot, ..Default::default() };
        let splice = (!snapshot).then(|| Arc::new(DatasetSplice { dsl: dsl.clone(), served: st.served.clone() }) as Arc<dyn Splice>);
        let h = tarn_fuse::mount_on(fs, at, &opts, splice).map_err(|e| e.context(format!("mounting '{}'", dataset)))?;
        if !snapshot && dsl.get(dataset, "readonly")?.value == "on" {
            h.set_readonly(dataset, true);
        }
        Ok(h)
    })();
    match res {
        Ok(h) => {
            log(&format!("mounted '{}' on '{}'", dataset, dir.display()));
            st.mounts.insert(dataset.to_string(), h);
            record_mounts(st);
            Ok(())
        }
        Err(e) => {
            if !snapshot {
                st.served.release_own(dataset);
            }
            Err(e)
        }
    }
}

/// Records the daemon's mounts for the next daemon (see `mountdir`).
fn record_mounts(st: &State) {
    let rec: Vec<Recorded> = st
        .mounts
        .iter()
        .filter_map(|(d, h)| h.id().map(|id| Recorded { dataset: d.clone(), dir: h.dir().to_path_buf(), id: id.id, dev: id.dev }))
        .collect();
    mountdir::record(&rec);
}

/// Where `tarn mount DATASET` mounts a dataset: its mountpoint (a pool's
/// root: where its cache entry says), unless that is none/legacy or
/// canmount=off.
fn default_dir(st: &mut State, dataset: &str, out: &mut Out) -> Result<PathBuf> {
    let pool = pool_of(dataset);
    let live = st.live(pool, out)?;
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
    if dataset == pool {
        return live.mountpoint.clone().ok_or_else(|| Error::invalid(format!("cannot mount '{}': mountpoint=none: give a directory", dataset)));
    }
    match ds.get(dataset, "mountpoint").map_err(no_such)?.value.as_str() {
        v @ ("none" | "legacy") => Err(Error::invalid(format!("cannot mount '{}': mountpoint={}: give a directory", dataset, v))),
        v => Ok(PathBuf::from(v)),
    }
}

/// Where `dataset` gets a mount of its own by itself, if it does: a
/// pool's root at its cache entry's mountpoint, any other file system at a
/// mountpoint set on itself; both with `canmount=on` (see the module
/// comment).
fn auto_dir(st: &State, dataset: &str) -> Option<PathBuf> {
    let live = st.pools.get(pool_of(dataset))?;
    let ds = live.pool.datasets();
    if dataset.contains('@') || !ds.get(dataset, "canmount").is_ok_and(|c| c.value == "on") {
        return None;
    }
    if dataset == pool_of(dataset) {
        return live.mountpoint.clone();
    }
    let mp = ds.get(dataset, "mountpoint").ok()?;
    (mp.source == tarn_engine::dataset::Source::Local && mp.value != "none" && mp.value != "legacy").then(|| PathBuf::from(mp.value))
}

/// Mounts a newly created, cloned, imported or re-propertied dataset if it
/// gets a mount of its own (see the module comment); a failure is a warning.
pub fn auto_mount(st: &mut State, dataset: &str, out: &mut Out) {
    if st.mounts.contains_key(dataset) {
        return;
    }
    let Some(dir) = auto_dir(st, dataset) else { return };
    if let Err(e) = mount(st, dataset, &dir) {
        let what = if dataset == pool_of(dataset) { format!("pool '{}' is imported", dataset) } else { format!("'{}' is created", dataset) };
        out.warnings.push(format!("{} but not mounted: {}", what, e));
    }
}

/// Whether `dataset`'s properties let it be mounted at its default place
/// at all (not `canmount=off`, not `mountpoint=none`/`legacy`; a root
/// with a place in its cache entry).
pub fn mountable(st: &State, dataset: &str) -> bool {
    let Some(live) = st.pools.get(pool_of(dataset)) else { return false };
    let ds = live.pool.datasets();
    if !ds.get(dataset, "canmount").is_ok_and(|c| c.value != "off") {
        return false;
    }
    if dataset == pool_of(dataset) {
        return live.mountpoint.is_some();
    }
    ds.get(dataset, "mountpoint").is_ok_and(|m| m.value != "none" && m.value != "legacy")
}

/// Where `dataset` would get a mount of its own if `prop` (`mountpoint` or
/// `canmount`) were changed to `value` (`None`: inherited): what `set` and
/// `inherit` check before they change anything. A dataset that has a
/// mount of its own now is mounted again unless `canmount=off`; one that
/// has none, where [`auto_dir`] would put it.
pub fn planned_dir(st: &State, dataset: &str, prop: &str, value: Option<&str>) -> Result<Option<PathBuf>> {
    let Some(live) = st.pools.get(pool_of(dataset)) else { return Ok(None) };
    let ds = live.pool.datasets();
    let canmount = match (prop, value) {
        ("canmount", v) => v.unwrap_or("on").to_string(),
        _ => ds.get(dataset, "canmount")?.value,
    };
    let (mp, local) = mountpoint_after(live, dataset, prop, value)?;
    let mounted = st.mounts.contains_key(dataset);
    let root = dataset == pool_of(dataset);
    let wanted = canmount != "off" && mp != "none" && mp != "legacy" && (mounted || (canmount == "on" && (root || local)));
    Ok(wanted.then(|| PathBuf::from(mp)))
}

/// `dataset`'s mountpoint (a pool's root: its cache entry's) if `prop`
/// were changed to `value` (`None`: inherited), and whether it would be
/// set on the dataset itself.
fn mountpoint_after(live: &super::state::Live, dataset: &str, prop: &str, value: Option<&str>) -> Result<(String, bool)> {
    let ds = live.pool.datasets();
    let root = dataset == pool_of(dataset);
    Ok(match (prop, value) {
        ("mountpoint", Some(v)) => (v.to_string(), true),
        ("mountpoint", None) if root => (format!("/{}", dataset), false),
        ("mountpoint", None) => {
            let (parent, short) = dataset.rsplit_once('/').expect("not a root");
            let pmp = ds.get(parent, "mountpoint")?.value;
            let mp = if pmp == "none" || pmp == "legacy" { pmp } else { format!("{}/{}", pmp.trim_end_matches('/'), short) };
            (mp, false)
        }
        _ => {
            let p = ds.get(dataset, "mountpoint")?;
            let dir = if root { live.mountpoint.as_ref().map_or("none".to_string(), |d| d.display().to_string()) } else { p.value };
            (dir, p.source == tarn_engine::dataset::Source::Local)
        }
    })
}

/// Where the file systems below `dataset` that have a mount of their own
/// would be mounted again if its `mountpoint` were changed to `value`
/// (`None`: inherited; `all`: on every descendant too, `inherit -r`): each
/// whose mountpoint follows `dataset`'s (not set on itself or on a dataset
/// between them), at the new one plus its path below `dataset`. What `set`
/// and `inherit` check, with [`planned_dir`], before they change anything:
/// a child mounted on demand must not be moved onto `/etc` by its parent.
pub fn moved_dirs(st: &State, dataset: &str, value: Option<&str>, all: bool) -> Result<Vec<(String, PathBuf)>> {
    let Some(live) = st.pools.get(pool_of(dataset)) else { return Ok(Vec::new()) };
    let (mp, _) = mountpoint_after(live, dataset, "mountpoint", value)?;
    followers(st, live, dataset, &mp, all)
}

/// Where the file systems at and below `from` that have a mount of their
/// own would be mounted again after `from` is renamed `to` (by their old
/// names): if `from`'s mountpoint is inherited, it and every one that
/// follows it move below `to`'s parent's mountpoint. What `rename` checks
/// before it changes anything, as [`moved_dirs`] for `set`.
pub fn renamed_dirs(st: &State, from: &str, to: &str) -> Result<Vec<(String, PathBuf)>> {
    let Some(live) = st.pools.get(pool_of(from)) else { return Ok(Vec::new()) };
    let ds = live.pool.datasets();
    let Some((parent, short)) = to.rsplit_once('/') else { return Ok(Vec::new()) };
    // A snapshot, a mountpoint of its own, or a rename that fails anyway
    // (the rename says why): nothing moves.
    if from.contains('@') || ds.exists(to) || ds.get(from, "mountpoint")?.source == tarn_engine::dataset::Source::Local {
        return Ok(Vec::new());
    }
    let Ok(pmp) = ds.get(parent, "mountpoint") else { return Ok(Vec::new()) };
    if matches!(pmp.value.as_str(), "none" | "legacy") {
        return Ok(Vec::new());
    }
    let mp = format!("{}/{}", pmp.value.trim_end_matches('/'), short);
    let mut moved = Vec::new();
    if st.mounts.contains_key(from) {
        moved.push((from.to_string(), PathBuf::from(&mp)));
    }
    moved.extend(followers(st, live, from, &mp, false)?);
    Ok(moved)
}

/// The file systems strictly below `top` with a mount of their own whose
/// mountpoint follows `top`'s (`all`: every one), each with its place if
/// `top`'s mountpoint were `mp`: `mp` plus its path below `top`.
fn followers(st: &State, live: &super::state::Live, top: &str, mp: &str, all: bool) -> Result<Vec<(String, PathBuf)>> {
    use tarn_engine::dataset::Source;
    if mp == "none" || mp == "legacy" {
        return Ok(Vec::new());
    }
    let mut moved = Vec::new();
    for d in st.mounts.keys().filter(|d| d.as_str() != top && !d.contains('@') && below(d, top)) {
        let follows = match live.pool.datasets().get(d, "mountpoint")?.source {
            Source::Local => all,
            Source::Inherited(from) => all || from == top || !below(&from, top),
            Source::Default | Source::None => true,
        };
        if follows {
            let below_it = &d[top.len()..];
            assert!(below_it.starts_with('/'), "'{}' is a file system below '{}'", d, top);
            moved.push((d.clone(), PathBuf::from(format!("{}{}", mp.trim_end_matches('/'), below_it))));
        }
    }
    Ok(moved)
}

/// Mounts `dataset` again at its default place after a rename or a
/// property change unmounted it — unless it is now served inside its
/// parent's mount; a failure is a warning.
pub fn remount_default(st: &mut State, dataset: &str, out: &mut Out) {
    if !dataset.contains('@') && mount_path(st, dataset).is_some() {
        return;
    }
    let res = default_dir(st, dataset, out).and_then(|dir| mount(st, dataset, &dir));
    if let Err(e) = res {
        out.warnings.push(format!("'{}' is no longer mounted: {}", dataset, e));
    }
}

/// Unmounts `name` and everything mounted below it (its snapshots, its
/// descendants): the mounts of their own (deepest first; returns their
/// names), then what every mount serves of them inside it. If one is busy
/// (and not `force`), the mounts already unmounted are mounted again and
/// the error is returned. The caller holds `name` (`Served::hold`) if it
/// must not be served again meanwhile.
pub fn unmount_below(st: &mut State, name: &str, force: bool) -> Result<Vec<String>> {
    let mine = unmount_order(st, st.mounts.keys().filter(|d| below(d, name)).cloned().collect());
    let mut done: Vec<(String, PathBuf)> = Vec::new();
    let mut failed = None;
    for d in &mine {
        let dir = st.mounts.get(d).map(|h| h.dir().to_path_buf());
        if let Err(e) = unmount(st, d, force) {
            failed = Some(e);
            break;
        }
        done.push((d.clone(), dir.unwrap_or_default()));
    }
    if failed.is_none() {
        failed = st.mounts.values().find_map(|h| h.detach(name, force).err());
    }
    if let Some(e) = failed {
        for (m, dir) in done.iter().rev() {
            if let Err(e) = mount(st, m, dir) {
                log(&format!("cannot mount '{}' again: {}", m, e));
            }
        }
        return Err(e);
    }
    Ok(mine)
}

/// The root dataset's mountpoint property changed: the cache entry (which
/// the daemon mounts the root from) follows it.
pub fn root_mountpoint_changed(st: &mut State, pool: &str, out: &mut Out) -> Result<()> {
    let live = st.live(pool, out)?;
    let setting = super::state::mountpoint_setting(live.pool.datasets().get(pool, "mountpoint")?.value);
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

/// `names` (datasets with a mount of their own) in the order to unmount
/// them: a mount nested in another before it. Nesting is the kernel's
/// mount tree (`/proc/self/mountinfo`: a mount's depth counts its
/// ancestors, so one mounted inside another, or over it at the same
/// directory, is deeper); where the kernel reports no mount ids, the depth
/// of the mount's path.
pub fn unmount_order(st: &State, mut names: Vec<String>) -> Vec<String> {
    let table = tarn_fuse::mountpoint::mount_table().unwrap_or_default();
    let parent: HashMap<u64, u64> = table.iter().map(|e| (e.id, e.parent)).collect();
    let depth = |id: u64| {
        let (mut d, mut cur) = (0usize, id);
        // Bounded by the table: a cycle cannot make it loop.
        while let Some(&p) = parent.get(&cur).filter(|&&p| p != cur && d <= table.len()) {
            d += 1;
            cur = p;
        }
        d
    };
    let key = |n: &String| st.mounts.get(n).map_or((0, 0), |h| (h.id().map_or(0, |i| depth(i.id)), h.dir().components().count()));
    names.sort_by_cached_key(|n| std::cmp::Reverse(key(n)));
    names
}

/// Unmounts a dataset's own mount (with everything served inside it):
/// writes back, syncs; busy fails unless `force`.
pub fn unmount(st: &mut State, dataset: &str, force: bool) -> Result<()> {
    let h = st.mounts.get(dataset).ok_or_else(|| Error::not_found(format!("'{}' is not mounted", dataset)))?;
    let res = if force { h.unmount_force() } else { h.unmount() };
    if !h.is_mounted() {
        log(&format!("unmounted '{}' from '{}'", dataset, h.dir().display()));
        st.mounts.remove(dataset);
        st.served.release_own(dataset);
        record_mounts(st);
    }
    res.map_err(|e| match e.kind {
        ErrorKind::Busy => Error::new(ErrorKind::Busy, format!("cannot unmount '{}': {} (`tarn unmount -f` forces)", dataset, e.msg)),
        _ => e.context(format!("unmounting '{}'", dataset)),
    })
}

pub fn handle_mount(st: &mut State, a: MountArgs, out: &mut Out) -> Result<()> {
    let Some(dataset) = a.dataset else {
        prune_ended(st);
        out.text = fmt::table(&["DATASET", "MOUNTPOINT"], &mount_rows(st), false);
        return Ok(());
    };
    st.live(pool_of(&dataset), out)?;
    if a.dir.is_none() && dataset.contains('/') && !dataset.contains('@') && !st.mounts.contains_key(&dataset) {
        // Served inside its parent's mount (again, after `tarn unmount`)?
        let was_unmounted = st.served.set_unmounted(&dataset, false);
        if let Some(p) = mount_path(st, &dataset) {
            if !was_unmounted {
                return Err(Error::new(ErrorKind::Exists, format!("cannot mount '{}': filesystem already mounted (at '{}')", dataset, p.display())));
            }
            refresh(st, &[&dataset]);
            log(&format!("serving '{}' at '{}' inside its parent's mount", dataset, p.display()));
            return Ok(());
        }
    }
    let dir = match a.dir {
        Some(d) => d,
        None => default_dir(st, &dataset, out)?,
    };
    mount(st, &dataset, &dir)
}

/// `tarn mount`'s list: mounts of their own, and what is open inside them.
fn mount_rows(st: &State) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = st.mounts.iter().map(|(d, h)| vec![d.clone(), h.dir().display().to_string()]).collect();
    for h in st.mounts.values() {
        rows.extend(h.served().into_iter().skip(1).filter(|s| s.open).map(|s| vec![s.name, s.path.display().to_string()]));
    }
    rows.sort();
    rows
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
    let by_dir = |st: &State| a.target_abs.as_ref().and_then(|p| st.mounts.iter().find(|(_, h)| h.dir() == p.as_path()).map(|(d, _)| d.clone()));
    if let Some(dataset) = if st.mounts.contains_key(&a.target) { Some(a.target.clone()) } else { by_dir(st) } {
        return unmount(st, &dataset, a.force);
    }
    // Served inside another mount: by name, or by the directory it is at.
    let inside = st.mounts.values().flat_map(|h| h.served()).find(|s| s.name == a.target || a.target_abs.as_deref() == Some(s.path.as_path()));
    let name = match inside {
        Some(s) => s.name,
        None if mount_path(st, &a.target).is_some() => a.target.clone(),
        None => return Err(Error::not_found(format!("'{}' is not a mounted dataset or tarn mount point", printable(&a.target)))),
    };
    let head = !name.contains('@');
    if head {
        st.served.set_unmounted(&name, true);
    }
    if let Some(e) = st.mounts.values().find_map(|h| h.detach(&name, a.force).err()) {
        st.served.set_unmounted(&name, false);
        return Err(match e.kind {
            ErrorKind::Busy => Error::new(ErrorKind::Busy, format!("cannot unmount '{}': {} (`tarn unmount -f` forces)", name, e.msg)),
            _ => e.context(format!("unmounting '{}'", name)),
        });
    }
    refresh(st, &[&name]);
    log(&format!("stopped serving '{}' inside its parent's mount", name));
    Ok(())
}
