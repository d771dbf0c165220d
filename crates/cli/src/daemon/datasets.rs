//! The `zfs`-style dataset commands in the daemon: create, snapshot, clone,
//! rollback, rename, destroy, set, inherit (here) and list, get
//! (`dslist`). Each is one [`DatasetCmd`] variant of
//! `proto::Command::Dataset`, carried out on the live pool's
//! `Datasets` (`engine::dataset`) under the daemon's state lock.
//!
//! Every change is one sync task batch (`Datasets::run`): a request costs
//! one txg sync whatever the number of datasets, and the lookups it makes
//! go through the dataset layer's hashed name index — no request but
//! `list`, `get -r` and recursive operations walks datasets it does not
//! name. Several names in one `create` or `snapshot` go into one txg (as
//! `zfs snapshot a@s b@s` does), which is how scripts create many at once.
//!
//! Errors read as `zfs` prints them: `cannot create 'tank/a/b': parent does
//! not exist` — one line naming the dataset.
//!
//! Mounts follow the dataset (see `mounts`, "Which datasets are mounted"):
//! a dataset created or cloned with a mountpoint of its own is mounted, one
//! with an inherited mountpoint appears inside its parent's mount (the
//! kernel is told to look again: [`mounts::refresh`]), and so does a new
//! snapshot under `.zfs/snapshot`; a destroy unmounts first, also what is
//! served inside other mounts (busy fails with "dataset is busy" unless
//! `-f`); `set`/`inherit` of `mountpoint` and `set` of `canmount`
//! remount or unmount, of `readonly` apply at once; rename moves the mounts.
//! Destroy, rename and rollback hold the dataset (`served::Served::hold`)
//! so that no mount opens it again while they run.
//!
//! Rollback of a mounted file system keeps it mounted, as OpenZFS does
//! with `zfs_suspend_fs`/`zfs_resume_fs`: the mount serving it
//! ([`tarn_fuse::MountHandle::replace`]) writes back and drops the kernel's
//! caches, holds every request back, the dataset layer rolls the object
//! set back, a new POSIX file system is opened on it, files that still
//! exist keep working through open handles, and the rest fail with `EIO`.

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_engine::dataset::{names, props, Datasets, Op, Types};
use tarn_engine::error::printable;
use tarn_engine::{Error, ErrorKind, Result};

use super::state::{Out, State};
use super::{dslist, log, mounts};
use crate::pool_cmd::split_assignments;

#[derive(Debug, Subcommand, Serialize, Deserialize)]
pub enum DatasetCmd {
    /// Create file systems (several names: one transaction group)
    Create {
        /// Create missing parent datasets
        #[arg(short = 'p')]
        parents: bool,
        /// Set a property (repeatable)
        #[arg(short = 'o', value_name = "PROP=VAL")]
        props: Vec<String>,
        #[arg(required = true, value_name = "POOL/PATH")]
        names: Vec<String>,
    },
    /// List datasets and their properties
    List(dslist::ListArgs),
    /// Show dataset properties and where their values come from
    Get(dslist::GetArgs),
    /// Set a dataset property
    Set {
        #[arg(value_name = "PROP=VAL")]
        assignment: String,
        dataset: String,
    },
    /// Let a property inherit its value again (remove the local value)
    Inherit {
        /// Also on every descendant file system
        #[arg(short = 'r')]
        recursive: bool,
        prop: String,
        dataset: String,
    },
    /// Take snapshots DATASET@SNAP (several: one transaction group)
    Snapshot {
        /// Also snapshot every descendant file system, atomically
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(required = true, value_name = "DATASET@SNAP")]
        snapshots: Vec<String>,
    },
    /// Roll a file system back to a snapshot
    Rollback {
        /// Destroy the snapshots taken after it (otherwise it must be the latest)
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(value_name = "DATASET@SNAP")]
        snapshot: String,
    },
    /// Create a writable file system from a snapshot
    Clone {
        #[arg(short = 'o', value_name = "PROP=VAL")]
        props: Vec<String>,
        #[arg(value_name = "DATASET@SNAP")]
        origin: String,
        #[arg(value_name = "POOL/NEW")]
        name: String,
    },
    /// Destroy a file system or snapshot
    Destroy {
        /// Also destroy children and snapshots
        #[arg(short = 'r')]
        recursive: bool,
        /// Unmount even if busy
        #[arg(short = 'f')]
        force: bool,
        target: String,
    },
    /// Rename a file system (with its descendants) or a snapshot
    Rename { from: String, to: String },
}

/// The pool part of a dataset or snapshot name.
pub fn pool_of(name: &str) -> &str {
    let end = name.find(['/', '@']).unwrap_or(name.len());
    &name[..end]
}

/// The datasets of the live pool `name` belongs to (importing it from the
/// cache if needed); a missing pool is "cannot open 'x': no such pool".
pub fn datasets_of<'a>(st: &'a mut State, name: &str, out: &mut Out) -> Result<&'a Datasets> {
    checked("open", name)?;
    let pool = pool_of(name);
    match st.live(pool, out) {
        Ok(l) => Ok(l.pool.datasets()),
        Err(e) if e.kind == ErrorKind::NotFound => Err(Error::not_found(format!("cannot open '{}': no such pool '{}'", name, pool))),
        Err(e) => Err(e),
    }
}

/// `name`'s syntax, before any pool is looked up: `cannot create
/// '/p1/x': leading slash in name`.
fn checked(verb: &str, name: &str) -> Result<()> {
    names::check(name).map(|_| ()).map_err(|e| cannot(verb, name, e))
}

/// As `datasets_of`, shared (for work done without the state lock held
/// by the borrow, such as a rollback inside a mount).
pub fn dsl_of(st: &mut State, name: &str, out: &mut Out) -> Result<Arc<Datasets>> {
    datasets_of(st, name, out)?;
    Ok(st.pools.get(pool_of(name)).expect("live: datasets_of made it so").pool.datasets().clone())
}

/// The name quoted right after `prefix` in `msg` ("dataset 'X' …" → X).
fn quoted_after<'m>(msg: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = msg.strip_prefix(prefix)?;
    rest.find('\'').map(|end| &rest[..end])
}

/// `cannot VERB 'NAME': why` from an engine error, as `zfs` words it.
fn cannot(verb: &str, name: &str, e: Error) -> Error {
    cannot_naming(verb, name, None, e)
}

/// As `cannot`, naming the dataset the engine's error is about: the
/// command's `name` (or the file system of a snapshot `name`), the new
/// name `to` of a rename ("cannot rename to 'T': dataset already exists"),
/// or another one ("cannot open 'tank/a@nope': dataset does not exist" for
/// a clone's missing origin) — never a generic "dataset does not exist"
/// under the wrong name.
fn cannot_naming(verb: &str, name: &str, to: Option<&str>, e: Error) -> Error {
    let about = |n: &str| {
        if n == name || name.strip_prefix(n).is_some_and(|r| r.starts_with('@')) {
            format!("{} '{}'", verb, name)
        } else if Some(n) == to {
            format!("{} to '{}'", verb, n)
        } else {
            format!("open '{}'", n)
        }
    };
    let msg = &e.msg;
    let why = if let Some(n) = quoted_after(msg, "invalid dataset name '") {
        format!("{}: {}", about(n), msg.split_once("': ").map_or(msg.as_str(), |(_, w)| w))
    } else if let Some(child) = msg.strip_prefix("parent '").and_then(|r| r.split_once("' of '")).and_then(|(_, r)| r.split_once('\'')).map(|(n, _)| n) {
        format!("{}: parent does not exist", about(child))
    } else if let Some(n) = quoted_after(msg, "dataset '").filter(|_| e.kind == ErrorKind::NotFound && msg.ends_with("does not exist")) {
        format!("{}: dataset does not exist", about(n))
    } else if let Some(n) = quoted_after(msg, "dataset '").filter(|_| e.kind == ErrorKind::Exists && msg.ends_with("already exists")) {
        format!("{}: dataset already exists", about(n))
    } else if let Some(rest) = msg.strip_prefix(&format!("dataset '{}' has ", name)) {
        // "dataset 'tank/a' has children ('tank/a/b'): …" names the dataset twice.
        format!("{} '{}': filesystem has {}", verb, name, rest.replace("destroy them first or destroy recursively", "use -r to destroy them too"))
    } else if let Some(rest) = msg.strip_prefix(&format!("snapshot '{}' has ", name)) {
        format!("{} '{}': snapshot has {}", verb, name, rest)
    } else {
        format!("{} '{}': {}", verb, name, msg)
    };
    Error::new(e.kind, format!("cannot {}", why))
}

/// Runs `ops` in one txg; the first failure, named after its dataset.
fn run_ops(ds: &Datasets, verb: &str, ops: Vec<(String, Op)>) -> Result<()> {
    let (names, ops): (Vec<String>, Vec<Op>) = ops.into_iter().unzip();
    let results = ds.run(ops).map_err(|e| cannot(verb, names.first().map_or("", |s| s.as_str()), e))?;
    for (n, r) in names.iter().zip(results) {
        r.map_err(|e| cannot(verb, n, e))?;
    }
    Ok(())
}

pub fn handle(st: &mut State, cmd: DatasetCmd, out: &mut Out) -> Result<()> {
    match cmd {
        DatasetCmd::Create { parents, props, names } => create(st, parents, props, names, out),
        DatasetCmd::List(a) => dslist::list(st, a, out),
        DatasetCmd::Get(a) => dslist::get(st, a, out),
        DatasetCmd::Set { assignment, dataset } => set(st, &assignment, &dataset, out),
        DatasetCmd::Inherit { recursive, prop, dataset } => inherit(st, recursive, &prop, &dataset, out),
        DatasetCmd::Snapshot { recursive, snapshots } => snapshot(st, recursive, snapshots, out),
        DatasetCmd::Rollback { recursive, snapshot } => rollback(st, recursive, &snapshot, out),
        DatasetCmd::Clone { props, origin, name } => clone(st, props, &origin, &name, out),
        DatasetCmd::Destroy { recursive, force, target } => destroy(st, recursive, force, &target, out),
        DatasetCmd::Rename { from, to } => rename(st, &from, &to, out),
    }
}

fn create(st: &mut State, parents: bool, props: Vec<String>, names: Vec<String>, out: &mut Out) -> Result<()> {
    let props = split_assignments(&props, "-o")?;
    let mut by_pool: Vec<(String, Vec<(String, Op)>)> = Vec::new();
    for n in &names {
        checked("create", n)?;
        if n.contains('@') {
            return Err(Error::invalid(format!("cannot create '{}': snapshot delimiter '@' is not expected here (snapshots are taken with 'tarn snapshot')", n)));
        }
        let op = Op::Create { name: n.clone(), props: props.clone(), parents };
        match by_pool.iter_mut().find(|(p, _)| p == pool_of(n)) {
            Some((_, ops)) => ops.push((n.clone(), op)),
            None => by_pool.push((pool_of(n).to_string(), vec![(n.clone(), op)])),
        }
    }
    for (_, ops) in &by_pool {
        datasets_of(st, &ops[0].0, out)?;
    }
    for n in &names {
        check_new_mount(st, n, &props)?;
    }
    for (_, ops) in by_pool {
        let first = ops[0].0.clone();
        run_ops(datasets_of(st, &first, out)?, "create", ops)?;
    }
    for n in &names {
        mounts::auto_mount(st, n, out);
    }
    mounts::refresh(st, &names);
    Ok(())
}

/// Before `create` or `clone` of `name` with `props`: if it would be
/// mounted at once (a mountpoint of its own, `canmount=on`), the place must
/// pass `mounts::check_dir` — refused, nothing is created.
fn check_new_mount(st: &State, name: &str, props: &[(String, String)]) -> Result<()> {
    for (k, v) in props {
        props::validate(k, v).map_err(|e| cannot("create", name, e))?;
    }
    let get = |k: &str| props.iter().rev().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
    let Some(mp) = get("mountpoint") else { return Ok(()) };
    if mp == "none" || mp == "legacy" || get("canmount").unwrap_or("on") != "on" {
        return Ok(());
    }
    let inherited = || {
        let parent = name.rsplit_once('/')?.0;
        st.pools.get(pool_of(name))?.pool.datasets().get(parent, "overlay").ok().map(|v| v.value == "on")
    };
    let overlay = get("overlay").map(|v| v == "on").or_else(inherited).unwrap_or(true);
    mounts::check_dir(st, name, Path::new(mp), Some(overlay)).map(|_| ()).map_err(|e| {
        let why = e.msg.strip_prefix(&format!("cannot mount '{}': ", name)).unwrap_or(&e.msg).to_string();
        Error::new(e.kind, format!("cannot create '{}': it would be mounted now, and {}", name, why))
    })
}

fn set(st: &mut State, assignment: &str, dataset: &str, out: &mut Out) -> Result<()> {
    let (k, v) = assignment.split_once('=').ok_or_else(|| Error::invalid(format!("cannot set property for '{}': expected PROP=VALUE, not '{}'", dataset, printable(assignment))))?;
    checked("set property for", dataset)?;
    let ds = datasets_of(st, dataset, out)?;
    if MOUNT_PROPS.contains(&k) && !dataset.contains('@') {
        let op = Op::Set { name: dataset.to_string(), prop: k.to_string(), value: Some(v.to_string()) };
        return change_mount_prop(st, dataset, k, Some(v), vec![(dataset.to_string(), op)], out);
    }
    ds.set(dataset, k, v).map_err(|e| cannot("set property for", dataset, e))?;
    after_prop_change(st, k, dataset);
    Ok(())
}

fn inherit(st: &mut State, recursive: bool, prop: &str, dataset: &str, out: &mut Out) -> Result<()> {
    checked("inherit property for", dataset)?;
    let ds = datasets_of(st, dataset, out)?;
    let targets = if recursive { ds.names(dataset, true, Types::FILESYSTEMS).map_err(|e| cannot("inherit", dataset, e))? } else { vec![dataset.to_string()] };
    let ops = targets.into_iter().map(|n| (n.clone(), Op::Set { name: n, prop: prop.to_string(), value: None })).collect();
    if MOUNT_PROPS.contains(&prop) && !dataset.contains('@') {
        return change_mount_prop(st, dataset, prop, None, ops, out);
    }
    run_ops(ds, "inherit property for", ops)?;
    after_prop_change(st, prop, dataset);
    Ok(())
}

/// Properties whose change mounts, unmounts or moves a dataset.
const MOUNT_PROPS: [&str; 2] = ["mountpoint", "canmount"];

/// A property served file systems apply at once (see
/// `mounts::SERVED_PROPS`) changed on `dataset`.
fn after_prop_change(st: &mut State, prop: &str, dataset: &str) {
    if mounts::SERVED_PROPS.contains(&prop) {
        mounts::served_props_changed(st, dataset);
    }
}

/// `set`/`inherit` of `mountpoint` or `canmount` on `dataset` (`ops`: the
/// changes, one per dataset with `inherit -r`), in OpenZFS's order: check
/// where the dataset would be mounted now and refuse a place it may not be
/// (see `mountdir`); unmount it and what is mounted below it (busy: the
/// error, nothing changed); change the property (failed: mount again what
/// was unmounted, where it was); then mount again what was mounted, and
/// what now mounts by itself, where the new values say — a pool's root
/// included (its cache entry follows its mountpoint). A dataset the change
/// leaves unmountable (`canmount=off`, `mountpoint=none`) stays unmounted
/// without a word; a remount that fails otherwise is a warning.
fn change_mount_prop(st: &mut State, dataset: &str, prop: &str, value: Option<&str>, ops: Vec<(String, Op)>, out: &mut Out) -> Result<()> {
    let verb = if value.is_some() { "set property for" } else { "inherit property for" };
    let ds = datasets_of(st, dataset, out)?;
    if !ds.exists(dataset) {
        return Err(Error::not_found(format!("cannot {} '{}': dataset does not exist", verb, dataset)));
    }
    if let Some(v) = value {
        props::validate(prop, v).map_err(|e| cannot(verb, dataset, e))?;
    }
    if let Some(dir) = mounts::planned_dir(st, dataset, prop, value).map_err(|e| cannot(verb, dataset, e))? {
        mounts::check_dir(st, dataset, &dir, None).map_err(|e| {
            let why = e.msg.strip_prefix(&format!("cannot mount '{}': ", dataset)).unwrap_or(&e.msg).to_string();
            Error::new(e.kind, format!("cannot {} '{}': it would be mounted now, and {}", verb, dataset, why))
        })?;
    }
    if prop == "mountpoint" {
        let all = ops.iter().any(|(n, _)| n != dataset);
        for (d, dir) in mounts::moved_dirs(st, dataset, value, all).map_err(|e| cannot(verb, dataset, e))? {
            mounts::check_dir(st, &d, &dir, None).map_err(|e| {
                let why = e.msg.strip_prefix(&format!("cannot mount '{}': ", d)).unwrap_or(&e.msg).to_string();
                Error::new(e.kind, format!("cannot {} '{}': '{}' would be mounted again, and {}", verb, dataset, d, why))
            })?;
        }
    }
    let was: Vec<(String, PathBuf)> = st.mounts.iter().filter(|(d, _)| mounts::below(d, dataset)).map(|(d, h)| (d.clone(), h.dir().to_path_buf())).collect();
    let moved = mounts::unmount_below(st, dataset, false).map_err(|e| Error::new(e.kind, format!("cannot {} '{}': {}", verb, dataset, e.msg)))?;
    if let Err(e) = run_ops(datasets_of(st, dataset, out)?, verb, ops) {
        for (m, dir) in &was {
            if let Err(e) = mounts::mount(st, m, dir) {
                out.warnings.push(format!("'{}' is no longer mounted: {}", m, e));
            }
        }
        return Err(e);
    }
    if prop == "mountpoint" && dataset == pool_of(dataset) {
        if let Err(e) = mounts::root_mountpoint_changed(st, dataset, out) {
            out.warnings.push(format!("the cache entry of pool '{}' still has its old mountpoint: {}", dataset, e));
        }
    }
    for m in &moved {
        // A snapshot mounted on a directory of its own goes back there;
        // the property changes nothing of it.
        match was.iter().find(|(d, _)| d == m) {
            Some((_, dir)) if m.contains('@') => {
                if let Err(e) = mounts::mount(st, m, dir) {
                    out.warnings.push(format!("'{}' is no longer mounted: {}", m, e));
                }
            }
            _ if mounts::mountable(st, m) => mounts::remount_default(st, m, out),
            _ => {}
        }
    }
    mounts::auto_mount(st, dataset, out);
    mounts::refresh(st, &[dataset]);
    Ok(())
}

/// All or none, as `zfs snapshot`: every name (with `-r`, every
/// descendant's) is checked before any is taken.
fn snapshot(st: &mut State, recursive: bool, snapshots: Vec<String>, out: &mut Out) -> Result<()> {
    for s in &snapshots {
        checked("create snapshot", s)?;
    }
    let pool = pool_of(&snapshots[0]).to_string();
    let ds = datasets_of(st, &snapshots[0], out)?;
    let mut ops: Vec<(String, Op)> = Vec::new();
    for s in &snapshots {
        if pool_of(s) != pool {
            return Err(Error::invalid(format!("cannot create snapshot '{}': all snapshots of one command must be in pool '{}'", s, pool)));
        }
        let Some((fs, snap)) = s.split_once('@') else {
            return Err(Error::invalid(format!("cannot create snapshot '{}': not a snapshot name (DATASET@SNAP)", s)));
        };
        let fss = if recursive { ds.names(fs, true, Types::FILESYSTEMS).map_err(|e| cannot("create snapshot", s, e))? } else { vec![fs.to_string()] };
        for f in fss {
            let name = format!("{}@{}", f, snap);
            if ops.iter().any(|(n, _)| *n == name) {
                return Err(Error::invalid(format!("cannot create snapshot '{}': named twice in this command", name)));
            }
            ds.check_snapshot(&name).map_err(|e| cannot("create snapshot", &name, e))?;
            ops.push((name.clone(), Op::Snapshot { name }));
        }
    }
    let names: Vec<String> = ops.iter().map(|(n, _)| n.clone()).collect();
    run_ops(ds, "create snapshot", ops)?;
    mounts::refresh(st, &names);
    Ok(())
}

fn rollback(st: &mut State, recursive: bool, snapshot: &str, out: &mut Out) -> Result<()> {
    checked("rollback to", snapshot)?;
    let dsl = dsl_of(st, snapshot, out)?;
    let Some((fs, _)) = snapshot.split_once('@') else {
        return Err(Error::invalid(format!("cannot rollback '{}': not a snapshot name (DATASET@SNAP)", snapshot)));
    };
    // `-r` destroys the later snapshots: what serves them goes first.
    let mut holds = Vec::new();
    if recursive && dsl.exists(snapshot) {
        let all = dsl.names(fs, false, Types::SNAPSHOTS).map_err(|e| cannot("rollback to", snapshot, e))?;
        for later in all.iter().skip_while(|n| n.as_str() != snapshot).skip(1) {
            holds.push(st.served.hold(later));
            mounts::unmount_below(st, later, false).map_err(|e| Error::new(e.kind, format!("cannot rollback to '{}': '{}' is busy ({})", snapshot, later, e.msg)))?;
        }
    }
    holds.push(st.served.hold(fs));
    let run = || -> Result<()> {
        let res = if recursive { dsl.rollback_destroying_later(snapshot) } else { dsl.rollback(snapshot) };
        res.map_err(|e| match e.msg.find(" is not the latest snapshot") {
            Some(_) => Error::new(e.kind, format!("cannot rollback to '{}': more recent snapshots exist (use -r to destroy them)", snapshot)),
            None => cannot("rollback to", snapshot, e),
        })
    };
    let Some(h) = mounts::serving(st, fs) else { return run() };
    let served = st.served.clone();
    let reopen = || {
        run()?;
        // The test hook's MemFs has no pool state to reload.
        if served.is_memfs() {
            return Ok(None);
        }
        served.filesystem(&dsl, fs).map(Some)
    };
    let kept = h.replace(fs, reopen)?;
    if let Some((survived, stale)) = kept {
        log(&format!("rolled back '{}' mounted on '{}': {} inodes the kernel holds kept, {} now stale", fs, h.dir().display(), survived, stale));
    }
    Ok(())
}

fn clone(st: &mut State, props: Vec<String>, origin: &str, name: &str, out: &mut Out) -> Result<()> {
    let props = split_assignments(&props, "-o")?;
    checked("open", origin)?;
    checked("create", name)?;
    datasets_of(st, origin, out)?;
    if pool_of(name) != pool_of(origin) {
        return Err(Error::invalid(format!("cannot create '{}': a clone must be in the pool of its origin '{}'", name, origin)));
    }
    check_new_mount(st, name, &props)?;
    let ds = datasets_of(st, origin, out)?;
    run_ops(ds, "create", vec![(name.to_string(), Op::Clone { origin: origin.to_string(), name: name.to_string(), props })])?;
    mounts::auto_mount(st, name, out);
    mounts::refresh(st, &[name]);
    Ok(())
}

/// A file system (`-r`: with everything below it), or a snapshot (`-r`:
/// that snapshot of the file system and of every descendant that has it,
/// as `zfs destroy -r fs@snap`).
fn destroy(st: &mut State, recursive: bool, force: bool, target: &str, out: &mut Out) -> Result<()> {
    checked("destroy", target)?;
    let ds = datasets_of(st, target, out)?;
    let targets = if recursive && target.contains('@') {
        ds.snapshots_below(target).map_err(|e| cannot("destroy", target, e))?
    } else if ds.exists(target) {
        vec![target.to_string()]
    } else {
        return Err(Error::not_found(format!("cannot destroy '{}': dataset does not exist", target)));
    };
    if target == pool_of(target) {
        return Err(Error::invalid(format!("cannot destroy '{}': the pool's root dataset goes with the pool ('tarn pool destroy')", target)));
    }
    let _holds: Vec<_> = targets.iter().map(|t| st.served.hold(t)).collect();
    let mut unmounted = Vec::new();
    for t in &targets {
        match mounts::unmount_below(st, t, force) {
            Ok(u) => unmounted.extend(u),
            Err(e) => {
                unmounted.iter().for_each(|m| mounts::remount_default(st, m, out));
                return Err(match e.kind {
                    ErrorKind::Busy => Error::new(ErrorKind::Busy, format!("cannot destroy '{}': dataset is busy ({}; -f forces)", t, e.msg)),
                    _ => cannot("destroy", t, e),
                });
            }
        }
    }
    let ds = datasets_of(st, target, out)?;
    if let Err(e) = ds.destroy(target, recursive) {
        // Nothing was destroyed (or only part, with -r): mount again what survives.
        for m in &unmounted {
            mounts::remount_default(st, m, out);
        }
        return Err(cannot("destroy", target, e));
    }
    targets.iter().for_each(|t| st.served.forget_filesystems(t));
    Ok(())
}

fn rename(st: &mut State, from: &str, to: &str, out: &mut Out) -> Result<()> {
    checked("rename", from)?;
    names::check(to).map_err(|e| cannot_naming("rename", from, Some(to), e))?;
    let ds = datasets_of(st, from, out)?;
    if pool_of(to) != pool_of(from) {
        return Err(Error::invalid(format!("cannot rename to '{}': datasets stay in their pool '{}'", to, pool_of(from))));
    }
    if !ds.exists(from) {
        return Err(Error::not_found(format!("cannot rename '{}': dataset does not exist", from)));
    }
    for (d, dir) in mounts::renamed_dirs(st, from, to).map_err(|e| cannot_naming("rename", from, Some(to), e))? {
        mounts::check_dir(st, &d, &dir, None).map_err(|e| {
            let why = e.msg.strip_prefix(&format!("cannot mount '{}': ", d)).unwrap_or(&e.msg).to_string();
            Error::new(e.kind, format!("cannot rename '{}': '{}{}' would be mounted again, and {}", from, to, &d[from.len()..], why))
        })?;
    }
    let hold = st.served.hold(from);
    let unmounted = mounts::unmount_below(st, from, false).map_err(|e| Error::new(e.kind, format!("cannot rename '{}': dataset is busy ({})", from, e.msg)))?;
    let ds = datasets_of(st, from, out)?;
    let res = ds.rename(from, to).map_err(|e| cannot_naming("rename", from, Some(to), e));
    if res.is_ok() {
        st.served.rename_filesystems(from, to);
    }
    drop(hold);
    let new_name = |m: &str| if res.is_ok() { format!("{}{}", to, &m[from.len()..]) } else { m.to_string() };
    for m in &unmounted {
        mounts::remount_default(st, &new_name(m), out);
    }
    mounts::refresh(st, &[new_name(from)]);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_part_of_names() {
        assert_eq!(pool_of("tank"), "tank");
        assert_eq!(pool_of("tank/a/b"), "tank");
        assert_eq!(pool_of("tank@s"), "tank");
        assert_eq!(pool_of("/x"), "");
    }

    #[test]
    fn errors_read_like_zfs() {
        let e = cannot("create", "tank/a/b", Error::not_found("parent 'tank/a' of 'tank/a/b' does not exist (create it, or use create_parents)"));
        assert_eq!(e.msg, "cannot create 'tank/a/b': parent does not exist");
        let e = cannot("destroy", "tank/x", Error::not_found("dataset 'tank/x' does not exist"));
        assert_eq!(e.msg, "cannot destroy 'tank/x': dataset does not exist");
        let e = cannot("create", "tank/a", Error::new(ErrorKind::Exists, "dataset 'tank/a' already exists"));
        assert_eq!(e.msg, "cannot create 'tank/a': dataset already exists");
        let e = cannot("destroy", "tank/a", Error::new(ErrorKind::Busy, "dataset 'tank/a' has children ('tank/a/b'): destroy them first or destroy recursively"));
        assert_eq!(e.msg, "cannot destroy 'tank/a': filesystem has children ('tank/a/b'): use -r to destroy them too");
    }
}
