//! `tarn pool …` in the daemon: the pools it holds open. `list`, `status`
//! and `get` show the live pool (its own error counters and state, not a
//! read-only reopen); `create` and `import` leave the pool imported and its
//! root dataset mounted; `export` and `destroy` unmount first.
//!
//! The daemon mounts a pool's root dataset from the pool's cache-file entry,
//! which follows the root's `mountpoint` property: `-m DIR` at create sets
//! the property; import without `-m` takes it from the property, with `-m`
//! overrides it for this import; default `/NAME`, `none` for no mount.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tarn_engine::arc::l2::CacheDevStatus;
use tarn_engine::dataset::props;
use tarn_engine::error::printable;
use tarn_engine::pool::scan::{ScanFunc, ScanState, ScanStatus};
use tarn_engine::pool::spare::SpareStatus;
use tarn_engine::pool::{discover, vet::open_for_import, DiscoveredPool, PoolStatus, Suspension, VdevStatus};
use tarn_engine::posix::errors::{named_errors, NamedError};
use tarn_engine::sys::{BlockDevice, ThrottledDevice};
use tarn_engine::{tunables::parse_size, CreateOptions, Error, ErrorKind, OpenOptions, Pool, Result, Tunables};

use super::mounts;
use super::state::{Out, State};
use crate::cache::{abs, Cache, CachedPool};
use crate::fmt;
use crate::pool_cmd::{split_assignments, split_vdevs, PoolCmd};

pub fn handle(st: &mut State, cmd: PoolCmd, t: &Tunables, out: &mut Out) -> Result<()> {
    match cmd {
        PoolCmd::Create { force, pool_props, root_props, size, mountpoint, name, devices } => {
            create(st, CreateArgs { force, pool_props, root_props, size, mountpoint, name, devices }, t, out)
        }
        PoolCmd::List { scripted, parsable, fields, json, names } => {
            let statuses = statuses(st, names, out)?;
            list(&statuses, scripted, parsable, fields, json, out)
        }
        PoolCmd::Status { verbose, unhealthy, json, names } => {
            let named = names.len();
            let mut all = statuses(st, names, out)?;
            if unhealthy {
                let before: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
                all.retain(|s| !healthy(s));
                if all.is_empty() && !json {
                    out.line(match (named, before.as_slice()) {
                        (1, [one]) => format!("pool '{}' is healthy", one),
                        _ => "all pools are healthy".to_string(),
                    });
                    return Ok(());
                }
            }
            let shown: Vec<Shown> = all.iter().map(|s| shown(st, s, verbose || json)).collect();
            status(&all, &shown, verbose, json, out)
        }
        PoolCmd::Clear { name, device } => {
            let pool = &st.live(&name, out)?.pool;
            let n = pool.clear(device.as_deref())?;
            out.line(format!("pool '{}': error counts reset, {} error log entries cleared", name, n));
            pool.sync().map_err(|e| e.context(format!("pool '{}': writing the cleared error log", name)))
        }
        PoolCmd::Offline { temporary, name, devices } => {
            let pool = &st.live(&name, out)?.pool;
            devices.iter().try_for_each(|d| pool.offline(d, temporary))
        }
        PoolCmd::Attach { opts, name, device, new_device } => {
            let pool = &st.live(&name, out)?.pool;
            let res = pool.attach_device_as(&device, &new_device, opts.force, opts.resilver_kind());
            cache_devices(&name, pool).and(res)
        }
        PoolCmd::Detach { name, device } => {
            let pool = &st.live(&name, out)?.pool;
            let res = pool.detach_device(&device);
            cache_devices(&name, pool).and(res)
        }
        PoolCmd::Replace { opts, name, device, new_device } => {
            let pool = &st.live(&name, out)?.pool;
            let res = pool.replace_device_as(&device, new_device.as_deref(), opts.force, opts.resilver_kind());
            cache_devices(&name, pool).and(res)
        }
        PoolCmd::Online { name, devices } => {
            let pool = &st.live(&name, out)?.pool;
            devices.iter().try_for_each(|d| pool.online(d))
        }
        // Checked here, waited for without the state lock (`Daemon::handle`).
        PoolCmd::Wait { name, .. } => st.live(&name, out).map(|_| ()),
        PoolCmd::Scrub { stop, pause, wait: _, names } => {
            // Every pool named must exist before any scrub starts or stops.
            for n in &names {
                st.live(n, out)?;
            }
            for n in &names {
                let pool = &st.live(n, out)?.pool;
                if stop {
                    pool.scrub_cancel()?;
                } else if pause {
                    pool.scrub_pause()?;
                } else {
                    pool.scrub_start()?;
                }
            }
            Ok(())
        }
        PoolCmd::Export { force, name } => {
            if st.faulted.remove(&name).is_some() {
                out.warnings.push(format!("pool '{}' could not be opened; it is forgotten without writing to its devices", name));
                return forget_cached(&name);
            }
            close(st, &name, force, Closing::Export, out)
        }
        PoolCmd::Import { dirs, json, force, rewind, dry_run, mountpoint, missing_log, pool, device_bandwidth } => {
            import(st, ImportArgs { dirs, json, force, rewind, dry_run, mountpoint, missing_log, pool, device_bandwidth }, t, out)
        }
        PoolCmd::Destroy { force, name } => close(st, &name, force, Closing::Destroy, out),
        PoolCmd::Get { scripted, parsable, fields, props, name } => get(st, scripted, parsable, fields, props, name, out),
        PoolCmd::Set { assignment, name } => {
            let (k, v) = assignment.split_once('=').ok_or_else(|| Error::invalid(format!("expected PROP=VALUE, not '{}'", assignment)))?;
            st.live(&name, out)?.pool.set_property(k, v)
        }
        PoolCmd::Add { force, name, kind, devices } => {
            let spec: Vec<PathBuf> = std::iter::once(PathBuf::from(&kind)).chain(devices).collect();
            let v = split_vdevs(&spec)?;
            if v.is_empty() {
                return Err(Error::invalid(format!("cannot add to pool '{}': no devices given (pool add POOL [mirror|raidzN] DEVICE... [log [mirror] DEVICE...] [cache DEVICE...] [spare DEVICE...])", name)));
            }
            let pool = &st.live(&name, out)?.pool;
            let context = |e: Error| e.context(format!("cannot add to pool '{}'", name));
            if !v.tops.is_empty() {
                let res = pool.add_vdevs(&v.tops, force).map_err(context);
                cache_devices(&name, pool).and(res)?;
            }
            if !v.logs.is_empty() {
                let res = pool.add_log_vdevs(&v.logs, force).map_err(context);
                cache_devices(&name, pool).and(res)?;
            }
            if !v.cache.is_empty() {
                pool.add_caches(&v.cache, force).map_err(context)?;
            }
            if !v.spares.is_empty() {
                pool.add_spares(&v.spares, force).map_err(context)?;
            }
            Ok(())
        }
        PoolCmd::Remove { name, devices } => {
            let pool = &st.live(&name, out)?.pool;
            // A log device that left changes the devices import opens.
            let res = pool.remove_devices(&devices);
            cache_devices(&name, pool).and(res)
        }
        PoolCmd::Sync { names } => {
            let names = if names.is_empty() { st.pools.keys().cloned().collect() } else { names };
            names.iter().try_for_each(|n| st.live(n, out)?.pool.sync().map_err(|e| e.context(format!("cannot sync pool '{}'", n))))
        }
        // Rendered by the client from metrics snapshots; run by the daemon
        // outside the state lock (`Daemon::handle`).
        PoolCmd::Iostat(_) | PoolCmd::Txgs { .. } | PoolCmd::Explain { .. } | PoolCmd::WriteTest(_) | PoolCmd::Events(_) => {
            Err(Error::invalid("this pool command is not served here; use the tarn command"))
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Closing {
    Export,
    Destroy,
}

impl Closing {
    fn verb(self) -> &'static str {
        match self {
            Closing::Export => "export",
            Closing::Destroy => "destroy",
        }
    }
}

/// `export` and `destroy`: unmount, sync, write the labels, forget the
/// pool. A suspended pool cannot sync (see `discard`). A close that fails
/// on the way (the final sync or a label write suspends the pool) leaves
/// the pool in the daemon, closed and suspended, so that `pool status`
/// says what happened and no later command re-imports it from the cache
/// file as if nothing had.
fn close(st: &mut State, name: &str, force: bool, how: Closing, out: &mut Out) -> Result<()> {
    st.live(name, out)?;
    if let Some(s) = st.pools.get(name).and_then(|l| l.pool.suspension()) {
        return discard(st, name, force, how, s, out);
    }
    // Before anything is unmounted: a rehearsal is not ended by an export.
    st.live(name, out)?.pool.refuse_while_injecting(how.verb())?;
    st.unmount_pool(name, force)?;
    let live = st.pools.get(name).expect("made live above");
    let res = match how {
        Closing::Export => live.pool.export(),
        Closing::Destroy => live.pool.destroy(),
    };
    match res {
        Ok(()) => {
            st.forget(name);
            forget_cached(name)
        }
        Err(e) => Err(e.context(format!("cannot {} pool '{}' (it stays imported; see `tarn pool status {}`)", how.verb(), name, name))),
    }
}

/// `export -f` of a suspended pool: its changes since the last synced txg
/// can never be written, so it is closed without syncing and without
/// writing to its devices (they keep that txg, as after a crash), its
/// mounts are dropped with a forced unmount, its devices released and its
/// cache entry removed; the output says what is on disk and what was
/// discarded. Without `-f`, and for `destroy` (which must write the
/// labels), an error that says so.
fn discard(st: &mut State, name: &str, force: bool, how: Closing, s: Suspension, out: &mut Out) -> Result<()> {
    let lost = lost_text(&s);
    if how == Closing::Destroy || !force {
        return Err(Error::new(
            ErrorKind::Suspended,
            format!(
                "cannot {} pool '{}': it is suspended ({}) and cannot write; `tarn pool export -f {}` closes it without syncing, discarding {}",
                how.verb(),
                name,
                s.reason,
                name,
                lost
            ),
        ));
    }
    // Writers failmode=wait holds fail now: the unmount waits for them.
    st.pools.get(name).expect("made live by the caller").pool.give_up_waiting();
    drop_mounts(st, name)?;
    let live = st.pools.remove(name).expect("made live by the caller");
    let s = live.pool.discard().unwrap_or(s);
    // Dropping the pool releases its devices and their locks.
    drop(live);
    st.forget(name);
    forget_cached(name)?;
    super::log(&format!("exported suspended pool '{}' without syncing; discarded {}", name, lost_text(&s)));
    out.line(format!("exported '{}' without syncing: it was suspended ({})", name, s.reason));
    out.line(format!("on disk: txg {} of {}", s.synced_txg, super::utc(s.synced_time)));
    out.line(format!("discarded: {}", lost_text(&s)));
    Ok(())
}

/// What a suspended pool cannot write, in words.
pub(super) fn lost_text(s: &Suspension) -> String {
    if s.last_lost_txg < s.first_lost_txg {
        return format!("nothing (no change since txg {})", s.synced_txg);
    }
    let txgs = if s.first_lost_txg == s.last_lost_txg { format!("txg {}", s.first_lost_txg) } else { format!("txgs {}–{}", s.first_lost_txg, s.last_lost_txg) };
    format!("{} ({} of changes made after txg {})", txgs, fmt::size(s.lost_bytes), s.synced_txg)
}

/// Unmounts, forced, every mount of a suspended pool (deepest first). The
/// final sync of each fails (the pool cannot write); a mount that is gone
/// all the same is done with. One that stays mounted is an error.
fn drop_mounts(st: &mut State, name: &str) -> Result<()> {
    let mut mine: Vec<(String, usize)> = st.mounts.iter().filter(|(d, _)| super::mounts::below(d, name)).map(|(d, h)| (d.clone(), h.dir().components().count())).collect();
    mine.sort_by_key(|(_, depth)| std::cmp::Reverse(*depth));
    for (d, _) in mine {
        if let Err(e) = super::mounts::unmount(st, &d, true) {
            if st.mounts.contains_key(&d) {
                return Err(e);
            }
            super::log(&format!("unmounted '{}' of suspended pool '{}'; its final sync failed: {}", d, name, e));
        }
    }
    Ok(())
}

/// Points the cache file's entry for pool `name` at the devices of its
/// tree now (after `attach`, `detach`, `replace`), so the next start of the
/// daemon opens them; unchanged entries are not rewritten.
fn cache_devices(name: &str, pool: &Pool) -> Result<()> {
    let mut c = Cache::load()?;
    let devices: Vec<String> = pool.config().tree.leaves().iter().map(|l| l.path.clone()).collect();
    match c.pools.iter_mut().find(|p| p.name == name) {
        Some(entry) if entry.devices != devices => entry.devices = devices,
        _ => return Ok(()),
    }
    c.save().map_err(|e| e.context(format!("pool '{}': recording its devices", name)))
}

pub(super) fn forget_cached(name: &str) -> Result<()> {
    let mut c = Cache::load()?;
    c.remove(name);
    c.save()
}

/// `-m` of `pool create` and `pool import`, on its face.
fn check_mountpoint(m: &Option<String>) -> Result<()> {
    match m.as_deref() {
        None | Some("none") => Ok(()),
        Some(p) => match props::mountpoint_problem(p) {
            None => Ok(()),
            Some(why) => Err(Error::invalid(format!("bad mountpoint '{}': {}; an absolute path or 'none'", printable(p), why))),
        },
    }
}

/// Before a pool is created or imported: where its root would be mounted
/// at once (`mountpoint`, the default `/NAME`; not with `canmount` other
/// than on) must pass `mounts::check_dir` — refused, nothing is done.
fn check_root_mount(st: &State, name: &str, mountpoint: Option<&str>, canmount: &str, overlay: bool, verb: &str) -> Result<()> {
    let Some(dir) = super::state::mountpoint_of(name, mountpoint) else { return Ok(()) };
    if canmount != "on" {
        return Ok(());
    }
    mounts::check_dir(st, name, &dir, Some(overlay)).map(|_| ()).map_err(|e| {
        let why = e.msg.strip_prefix(&format!("cannot mount '{}': ", name)).unwrap_or(&e.msg).to_string();
        Error::new(e.kind, format!("cannot {} pool '{}': its root would be mounted now, and {} (-m DIR mounts it elsewhere, -m none nowhere)", verb, name, why))
    })
}

struct CreateArgs {
    force: bool,
    pool_props: Vec<String>,
    root_props: Vec<String>,
    size: Option<String>,
    mountpoint: Option<String>,
    name: String,
    devices: Vec<PathBuf>,
}

fn create(st: &mut State, a: CreateArgs, t: &Tunables, out: &mut Out) -> Result<()> {
    let mut root_props = split_assignments(&a.root_props, "-O")?;
    // `-O mountpoint=…` is accepted as zpool does; it is `-m`.
    let mut mountpoint = a.mountpoint;
    if let Some(i) = root_props.iter().position(|(k, _)| k == "mountpoint") {
        mountpoint = Some(root_props.remove(i).1);
    }
    check_mountpoint(&mountpoint)?;
    let root_prop = |k: &str| root_props.iter().rev().find(|(p, _)| p == k).map(|(_, v)| v.clone());
    let (canmount, overlay) = (root_prop("canmount").unwrap_or_else(|| "on".into()), root_prop("overlay").is_none_or(|v| v == "on"));
    check_root_mount(st, &a.name, mountpoint.as_deref(), &canmount, overlay, "create")?;
    // The root dataset carries it too, so children inherit below it.
    if let Some(m) = &mountpoint {
        root_props.push(("mountpoint".into(), m.clone()));
    }
    let v = split_vdevs(&a.devices)?;
    let data = v.tops;
    let logs = v.logs.clone();
    let mut opts = CreateOptions { force: a.force, cache: v.cache, spares: v.spares, logs: v.logs, tunables: t.clone(), root_props, ..Default::default() };
    for (k, v) in split_assignments(&a.pool_props, "-o")? {
        if k == "ashift" {
            opts.ashift = v.parse().map_err(|_| Error::invalid(format!("bad ashift '{}': a number from 9 to 16", v)))?;
        } else {
            opts.pool_props.push((k, v));
        }
    }
    if let Some(s) = a.size {
        opts.size = Some(parse_size(&s).ok_or_else(|| Error::invalid(format!("bad size '{}': e.g. 512M, 8G", s)))?);
    }
    let mut cache = Cache::load()?;
    if cache.pools.iter().any(|p| p.name == a.name) || st.pools.contains_key(&a.name) {
        return Err(Error::new(ErrorKind::Exists, format!("pool '{}' already exists", a.name)));
    }
    // A device of a live pool of this daemon is refused by Pool::create
    // (its lock records the pool), as is any busy or signed device.
    let pool = Pool::create_layout(&a.name, &data, &opts)?;
    let entry = CachedPool { name: a.name.clone(), guid: pool.guid(), devices: data.iter().chain(&logs).flat_map(|t| t.devices.iter()).map(|d| abs(d)).collect(), mountpoint: mountpoint.clone() };
    cache.add(entry)?;
    if let Err(e) = cache.save() {
        let _ = pool.close();
        return Err(e);
    }
    st.add_live(&a.name, pool, mountpoint.as_deref(), out);
    Ok(())
}

/// Status of the named live pools, or of every pool in the cache: a pool
/// too damaged to open is FAULTED with why (and what `import -F` would
/// discard); one that cannot be imported for another reason (busy) is a
/// warning, or the error when named.
fn statuses(st: &mut State, names: Vec<String>, out: &mut Out) -> Result<Vec<PoolStatus>> {
    let cached = Cache::load()?.pools;
    let mut all = Vec::new();
    let named = !names.is_empty();
    let names = if named {
        names
    } else {
        let mut v: Vec<String> = cached.iter().map(|p| p.name.clone()).collect();
        v.sort();
        v
    };
    for n in &names {
        match st.live(n, out) {
            Ok(l) => {
                // A replacement that completed since the last command
                // changed the devices (`pool::vdev_change`).
                if let Err(e) = cache_devices(n, &l.pool) {
                    out.warnings.push(e.msg);
                }
                all.push(l.pool.status())
            }
            Err(e) => match (st.faulted.get(n), cached.iter().find(|p| &p.name == n)) {
                (Some(why), Some(entry)) => all.push(faulted_status(entry, why)),
                _ if named => return Err(e),
                _ => out.warnings.push(e.msg),
            },
        }
    }
    Ok(all)
}

/// The status of a pool of the cache file that cannot be opened.
fn faulted_status(entry: &CachedPool, why: &str) -> PoolStatus {
    let vdevs = entry
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| VdevStatus { id: i as u32, path: d.clone(), kind: String::new(), guid: 0, state: "-".into(), fault: None, size: 0, allocated: 0, read_errors: 0, write_errors: 0, checksum_errors: 0, direct_io: false, repaired_bytes: 0, missed_txgs: None, children: vec![], class: "normal".into() })
        .collect();
    PoolStatus {
        name: entry.name.clone(),
        guid: entry.guid,
        state: FAULTED.into(),
        txg: 0,
        size: 0,
        allocated: 0,
        free: 0,
        fragmentation_pct: 0,
        vdevs,
        error: Some(why.to_string()),
        data_errors: 0,
        suspension: None,
        scan: None,
        spares: vec![],
        logs: vec![],
        log_discarded: vec![],
    }
}

/// The state of a pool of the cache file that cannot be opened.
const FAULTED: &str = "FAULTED";

/// What `status` shows of a pool besides its `PoolStatus`: its cache
/// devices, and its permanent errors named (when asked for).
struct Shown {
    caches: Vec<CacheDevStatus>,
    errors: Vec<NamedError>,
}

fn shown(st: &State, s: &PoolStatus, name_errors: bool) -> Shown {
    match st.pools.get(&s.name) {
        Some(l) => Shown { caches: l.pool.cache_devices(), errors: if name_errors { named_errors(&l.pool) } else { Vec::new() } },
        None => Shown { caches: Vec::new(), errors: Vec::new() },
    }
}

fn json(v: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| Error::invalid(e.to_string()))
}

fn list(statuses: &[PoolStatus], scripted: bool, parsable: bool, fields: Vec<String>, as_json: bool, out: &mut Out) -> Result<()> {
    if as_json {
        out.line(json(&statuses)?);
        return Ok(());
    }
    let fields = if fields.is_empty() { ["name", "size", "alloc", "free", "frag", "cap", "health"].map(String::from).to_vec() } else { fields };
    let mut rows = Vec::new();
    for s in statuses {
        // A faulted pool's figures are unknown, not zero.
        let known = s.state != FAULTED;
        let sz = |v: u64| match (known, parsable) {
            (false, _) => "-".to_string(),
            (true, true) => v.to_string(),
            (true, false) => fmt::size(v),
        };
        let mut r = Vec::new();
        for f in &fields {
            r.push(match f.as_str() {
                "name" => s.name.clone(),
                "size" => sz(s.size),
                "alloc" | "allocated" => sz(s.allocated),
                "free" => sz(s.free),
                "frag" | "fragmentation" if known => format!("{}%", s.fragmentation_pct),
                "cap" | "capacity" if known => format!("{}%", s.allocated.saturating_mul(100).checked_div(s.size).unwrap_or(0)),
                "frag" | "fragmentation" | "cap" | "capacity" => "-".into(),
                "health" => s.state.clone(),
                "guid" => s.guid.to_string(),
                other => return Err(Error::invalid(format!("unknown column '{}': name,size,alloc,free,frag,cap,health,guid", other))),
            });
        }
        rows.push(r);
    }
    out.text.push_str(&fmt::columns(&fields, &rows, scripted));
    Ok(())
}

fn print_status(s: &PoolStatus, errors: &[NamedError], verbose: bool, out: &mut Out) {
    out.line(format!("  pool: {}", s.name));
    out.line(format!(" state: {}", s.state));
    if let (Some(e), true) = (&s.error, s.state == FAULTED) {
        out.line("status: The pool cannot be opened:");
        e.lines().for_each(|l| out.line(format!("        {}", l.trim_start())));
        let rewind = e.contains("import -F");
        out.line(format!(
            "action: {}'tarn pool export {}' forgets the pool without writing to its devices.",
            if rewind { "Recover as said above, or " } else { "Restore its devices and import it again, or " },
            s.name
        ));
        return;
    }
    if let Some(sus) = &s.suspension {
        out.line(format!("status: The pool is suspended and cannot write: {}.", sus.reason));
        out.line(format!("        On disk is txg {} of {}; not written: {}.", sus.synced_txg, super::utc(sus.synced_time), lost_text(sus)));
        if sus.resumable {
            let devices = if out_leaves(&s.vdevs) > 1 { "the devices" } else { "the device" };
            out.line(format!("action: Make {} whole again, then `tarn pool clear {}` resumes the pool and writes what waits;", devices, s.name));
            out.line(format!("        or `tarn pool export -f {}` closes it without syncing, discarding what was not written.", s.name));
        } else {
            let devices = if out_leaves(&s.vdevs) > 1 { "the devices" } else { "the device" };
            out.line(format!("action: Restore or replace {}, then `tarn pool export -f {}` (closes the pool without syncing,", devices, s.name));
            out.line(format!("        discarding what was not written) and `tarn pool import {}`.", s.name));
        }
        if sus.waiting_writers > 0 {
            out.line(format!("        {} writers wait for it (failmode=wait); `tarn pool set failmode=continue {}` fails them now.", sus.waiting_writers, s.name));
        }
    } else if let Some(e) = &s.error {
        out.line(format!("status: The pool is suspended after an I/O failure: {}", e));
        out.line("action: Check the devices, then export and re-import the pool.");
    }
    if s.suspension.is_none() && s.error.is_none() {
        health_lines(s).into_iter().for_each(|l| out.line(l));
    }
    if let Some(scan) = &s.scan {
        scan_lines(scan).into_iter().for_each(|l| out.line(l));
    }
    out.line(format!("   txg: {}", s.txg));
    out.line("config:\n");
    let mut rows: Vec<Row> = vec![(vec![s.name.clone(), s.state.clone(), fmt::size(s.size), fmt::size(s.allocated), "-".into(), "-".into(), "-".into()], None)];
    let mut faults = Vec::new();
    let resilvering = s.scan.as_ref().is_some_and(|sc| sc.func == ScanFunc::Resilver && sc.state == ScanState::Scanning);
    for v in &s.vdevs {
        vdev_rows(v, 1, resilvering, &mut rows, &mut faults);
    }
    if !s.logs.is_empty() {
        // zpool's "logs" section: each log vdev with its counters.
        rows.push((vec!["logs".into()], None));
        for v in &s.logs {
            vdev_rows(v, 1, resilvering, &mut rows, &mut faults);
        }
    }
    spare_rows(&s.spares, &mut rows);
    out.text.push_str(&noted_table(&["NAME", "STATE", "SIZE", "ALLOC", "READ", "WRITE", "CKSUM"], &rows));
    faults.into_iter().for_each(|f| out.line(f));
    s.log_discarded.iter().for_each(|l| out.line(format!("  logs: {}", l)));
    print_errors(s, errors, verbose, out);
}

/// A row of the config table, and a note printed after it (zpool's
/// "(resilvering)", a spare's "currently in use"): apart from the table's
/// columns, so that it widens none of them.
type Row = (Vec<String>, Option<String>);

/// The table of `rows`, each note where the row's cells end: in the first
/// column the row leaves empty (a spare's after its state, as zpool), or
/// after the table's last column.
fn noted_table(header: &[&str], rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(|(c, _)| c.clone()).collect();
    let table = fmt::table(header, &cells, false);
    let head = table.lines().next().unwrap_or_default();
    let width = table.lines().map(|l| l.chars().count()).max().unwrap_or(0) + 2;
    // Where each column starts: its header's place in the header line.
    let mut starts = Vec::new();
    let mut from = 0;
    for h in header {
        let at = head[from..].find(h).map_or(width, |i| from + i);
        starts.push(at);
        from = at + h.len();
    }
    let mut out = String::new();
    // The table's first line is the header; then one line per row.
    let noted = std::iter::once((0, None)).chain(rows.iter().map(|(c, n)| (c.len(), n.as_deref())));
    for (line, (used, note)) in table.lines().zip(noted) {
        out.push_str(line);
        if let Some(n) = note {
            let at = starts.get(used).copied().unwrap_or(width).max(line.chars().count() + 2);
            out.push_str(&" ".repeat(at - line.chars().count()));
            out.push_str(n);
        }
        out.push('\n');
    }
    out
}

/// The rows of vdev `v` and its children in the config table, indented
/// by depth as zpool's, with a line for each one not online; a leaf that
/// missed txgs while a resilver runs is "(resilvering)".
fn vdev_rows(v: &VdevStatus, depth: usize, resilvering: bool, rows: &mut Vec<Row>, faults: &mut Vec<String>) {
    let leaf = v.children.is_empty();
    let count = |n: u64| if leaf { n.to_string() } else { "0".to_string() };
    let name = format!("{}{}", "  ".repeat(depth), v.path);
    if v.repaired_bytes > 0 {
        faults.push(format!("  {}: {} rewritten from good copies since import", v.path, fmt::size(v.repaired_bytes)));
    }
    let note = (resilvering && leaf && v.missed_txgs.is_some() && v.state == "ONLINE").then(|| "(resilvering)".to_string());
    rows.push((vec![name, v.state.clone(), if depth == 1 { fmt::size(v.size) } else { "-".into() }, if depth == 1 { fmt::size(v.allocated) } else { "-".into() }, count(v.read_errors), count(v.write_errors), count(v.checksum_errors)], note));
    if let Some(f) = &v.fault {
        faults.push(format!("  {} is {}: {}", v.path, v.state, f));
    }
    for c in &v.children {
        vdev_rows(c, depth + 1, resilvering, rows, faults);
    }
}

/// The "spares" rows of the config table, as zpool's: each spare AVAIL,
/// INUSE ("currently in use") or UNAVAIL (and why).
fn spare_rows(spares: &[SpareStatus], rows: &mut Vec<Row>) {
    if spares.is_empty() {
        return;
    }
    rows.push((vec!["spares".into()], None));
    for sp in spares {
        let note = match sp.state.as_str() {
            "INUSE" => Some(match &sp.in_use_for {
                Some(o) => format!("currently in use (for {})", o),
                None => "currently in use".into(),
            }),
            _ => sp.fault.clone(),
        };
        rows.push((vec![format!("  {}", sp.path), sp.state.clone()], note));
    }
}

/// Whether `status -x` leaves the pool out: ONLINE, no device errors, no
/// permanent errors, nothing being resilvered (as zpool's).
fn healthy(s: &PoolStatus) -> bool {
    let leaves: Vec<&VdevStatus> = s.vdevs.iter().chain(&s.logs).flat_map(status_leaves).collect();
    let errors = leaves.iter().any(|l| l.read_errors + l.write_errors + l.checksum_errors > 0 || l.state != "ONLINE");
    s.state == "ONLINE" && !errors && s.data_errors == 0 && health_lines(s).is_empty()
}

/// The leaves under `v` (itself if it is one).
fn status_leaves(v: &VdevStatus) -> Vec<&VdevStatus> {
    if v.children.is_empty() {
        return vec![v];
    }
    v.children.iter().flat_map(status_leaves).collect()
}

/// Leaves under `vdevs` that are out (faulted, unavailable, removed):
/// whether a suspended pool's `action:` speaks of one device or several.
fn out_leaves(vdevs: &[VdevStatus]) -> usize {
    vdevs.iter().flat_map(status_leaves).filter(|l| matches!(l.state.as_str(), "FAULTED" | "UNAVAIL" | "REMOVED")).count()
}

/// zpool's "status:" and "action:" lines for a pool that runs degraded or
/// whose devices have seen errors (none for a healthy pool).
fn health_lines(s: &PoolStatus) -> Vec<String> {
    let leaves: Vec<&VdevStatus> = s.vdevs.iter().chain(&s.logs).flat_map(status_leaves).collect();
    let down = |st: &str| leaves.iter().any(|l| l.state == st);
    let errors = leaves.iter().any(|l| l.read_errors + l.write_errors + l.checksum_errors > 0);
    let resilvering = s.scan.as_ref().is_some_and(|sc| sc.func == ScanFunc::Resilver && sc.state == ScanState::Scanning);
    let (status, action) = if resilvering {
        (
            "One or more devices is currently being resilvered.  The pool will
        continue to function, possibly in a degraded state.",
            "Wait for the resilver to complete.".to_string(),
        )
    } else if down("UNAVAIL") || down("REMOVED") {
        (
            "One or more devices could not be used because they are missing or were removed.\n        Sufficient replicas exist for the pool to continue functioning in a\n        degraded state.",
            format!("Attach the missing device and online it using 'tarn pool online {}', or\n        replace it using 'tarn pool replace {}'.", s.name, s.name),
        )
    } else if down("FAULTED") {
        (
            "One or more devices are faulted in response to persistent errors.\n        Sufficient replicas exist for the pool to continue functioning in a\n        degraded state.",
            format!("Replace the faulted device, or use 'tarn pool clear {}' to mark the device\n        repaired.", s.name),
        )
    } else if down("OFFLINE") {
        (
            "One or more devices has been taken offline by the administrator.\n        Sufficient replicas exist for the pool to continue functioning in a\n        degraded state.",
            format!("Online the device using 'tarn pool online {}' or replace the device with\n        'tarn pool replace {}'.", s.name, s.name),
        )
    } else if errors {
        (
            "One or more devices has experienced an unrecoverable error.  An\n        attempt was made to correct the error.  Applications are unaffected.",
            format!("Determine if the device needs to be replaced, and clear the errors\n        using 'tarn pool clear {}' or replace the device with 'tarn pool replace {}'.", s.name, s.name),
        )
    } else {
        return vec![];
    };
    vec![format!("status: {}", status), format!("action: {}", action)]
}

/// The "scan:" lines of `status`, as zpool prints them. The rate and the
/// time left are the engine's, measured over the running pass only (a
/// scrub continued after an import inherits its figures, not its time).
fn scan_lines(scan: &ScanStatus) -> Vec<String> {
    let mut lines = scan_state_lines(scan);
    // A sequential rebuild's line stays beside the scrub it started, as
    // zpool prints both.
    if let Some(d) = &scan.rebuild {
        lines.push(format!("  scan: resilvered ({}) {} in {} with {} errors on {}", d.vdev, bytes(d.bytes), fmt::hms(d.seconds.round() as u64), d.errors, super::utc(d.end_time)));
    }
    lines
}

/// The scan's own lines; a sequential rebuild names its vdev after
/// "resilver", as zpool's "resilver (mirror-0) in progress".
fn scan_state_lines(scan: &ScanStatus) -> Vec<String> {
    let r = &scan.report;
    let f = match &scan.rebuild_vdev {
        Some(v) => format!("resilver ({})", v),
        None => scan.func.name().to_string(),
    };
    let pct = if scan.to_examine == 0 { 0.0 } else { 100.0 * scan.examined as f64 / scan.to_examine as f64 };
    let checked = format!("{} / {}", bytes(scan.examined), if scan.to_examine == 0 { "?".to_string() } else { bytes(scan.to_examine) });
    let done = match scan.func {
        ScanFunc::Scrub => "repaired",
        ScanFunc::Resilver => "resilvered",
    };
    match scan.state {
        ScanState::None => vec![],
        ScanState::Scanning if scan.paused_since != 0 => vec![
            format!("  scan: {} paused since {}", f, super::utc(scan.paused_since)),
            format!("        {} started on {}", f, super::utc(scan.start_time)),
            format!("        {} issued", checked),
            format!("        {} {}, {:.2}% done", bytes(r.repaired_bytes), done, pct),
        ],
        ScanState::Scanning => {
            let (rate, left) = match scan.eta_secs {
                Some(eta) if scan.rate_bytes_per_sec > 0 => (format!(" at {}/s", bytes(scan.rate_bytes_per_sec)), format!("{} to go", fmt::hms(eta))),
                _ => (String::new(), "no estimated completion time".to_string()),
            };
            vec![
                format!("  scan: {} in progress since {}", f, super::utc(scan.start_time)),
                format!("        {} issued{}", checked, rate),
                format!("        {} {}, {:.2}% done, {}", bytes(r.repaired_bytes), done, pct, left),
            ]
        }
        ScanState::Finished => {
            let what = match scan.func {
                ScanFunc::Scrub => format!("scrub repaired {}", bytes(r.repaired_bytes)),
                ScanFunc::Resilver => match &scan.rebuild_vdev {
                    Some(v) => format!("resilvered ({}) {}", v, bytes(r.repaired_bytes)),
                    None => format!("resilvered {}", bytes(r.repaired_bytes)),
                },
            };
            vec![format!("  scan: {} in {} with {} errors on {}", what, fmt::hms(r.seconds.round() as u64), r.error_count, super::utc(scan.end_time))]
        }
        ScanState::Canceled => vec![format!("  scan: {} canceled on {}", f, super::utc(scan.end_time))],
    }
}

/// A byte count as zpool's scan line prints it: `0B`, `512B`, `1.50M`.
fn bytes(v: u64) -> String {
    if v < 1024 {
        format!("{}B", v)
    } else {
        fmt::size(v)
    }
}

/// The "errors:" section: the permanent errors (the error log), by file
/// with -v; else the devices' error counts.
fn print_errors(s: &PoolStatus, errors: &[NamedError], verbose: bool, out: &mut Out) {
    if s.data_errors > 0 && verbose {
        out.line("\nerrors: Permanent errors have been detected in the following files:\n");
        let mut names: Vec<&str> = errors.iter().map(|e| e.name.as_str()).collect();
        names.dedup();
        names.iter().for_each(|n| out.line(format!("        {}", n)));
        let unlisted = s.data_errors.saturating_sub(errors.len() as u64);
        if unlisted > 0 {
            out.line(format!("        ({} more: the error log was full)", unlisted));
        }
        return;
    }
    if s.data_errors > 0 {
        out.line(format!("\nerrors: {} data errors, use '-v' for a list", s.data_errors));
        return;
    }
    // As zpool's, this line is about data: errors another copy corrected
    // are the devices' (their READ, WRITE and CKSUM columns, and the
    // status: line); a block no copy of which could be read is above.
    out.line("\nerrors: No known data errors");
}

/// The "cache" section of `pool status`: the L2ARC devices.
fn print_caches(caches: &[CacheDevStatus], out: &mut Out) {
    if caches.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = caches.iter().map(|c| vec![format!("  {}", c.path), "ONLINE".into(), fmt::size(c.size), c.guid.to_string()]).collect();
    out.line("\ncache:");
    out.text.push_str(&fmt::table(&["NAME", "STATE", "SIZE", "GUID"], &rows, false));
}

/// `pool status --json`: a pool's status with its cache devices and its
/// permanent errors, named.
#[derive(serde::Serialize)]
struct StatusJson<'a> {
    #[serde(flatten)]
    status: &'a PoolStatus,
    cache: &'a [CacheDevStatus],
    errors: &'a [NamedError],
}

fn status(all: &[PoolStatus], shown: &[Shown], verbose: bool, as_json: bool, out: &mut Out) -> Result<()> {
    if as_json {
        let v: Vec<StatusJson> = all.iter().zip(shown).map(|(status, s)| StatusJson { status, cache: &s.caches, errors: &s.errors }).collect();
        out.line(json(&v)?);
        return Ok(());
    }
    if all.is_empty() {
        out.line("no pools available");
    }
    for (i, s) in all.iter().enumerate() {
        if i > 0 {
            out.line("");
        }
        print_status(s, &shown[i].errors, verbose, out);
        print_caches(&shown[i].caches, out);
    }
    Ok(())
}

struct ImportArgs {
    dirs: Vec<PathBuf>,
    json: bool,
    force: bool,
    rewind: bool,
    dry_run: bool,
    mountpoint: Option<String>,
    missing_log: bool,
    pool: Option<String>,
    device_bandwidth: Option<String>,
}

fn import(st: &mut State, a: ImportArgs, t: &Tunables, out: &mut Out) -> Result<()> {
    check_mountpoint(&a.mountpoint)?;
    if a.dry_run && !a.rewind {
        return Err(Error::invalid("-n is only meaningful with -F (import -Fn: say what a recovery would discard)"));
    }
    for d in &a.dirs {
        std::fs::metadata(d).map_err(|e| Error::io(format!("cannot search '{}' for pools", d.display()), e))?;
    }
    let dirs = search_paths(st, &a)?;
    let found = discover(&dirs);
    let Some(want) = a.pool.clone() else {
        return list_importable(st, &found, t, a.json, out);
    };
    let matches: Vec<_> = found.iter().filter(|p| p.name == want || p.guid.to_string() == want).collect();
    let p = match matches.as_slice() {
        [] => return Err(Error::not_found(format!("no pool '{}' found in {}", want, dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")))),
        [p] => *p,
        _ => return Err(Error::invalid(format!("several pools are named '{}': import by guid", want))),
    };
    if st.pools.contains_key(&p.name) {
        return Err(Error::new(ErrorKind::Exists, format!("pool '{}' is already imported", p.name)));
    }
    if !p.missing.is_empty() {
        return Err(Error::not_found(format!("pool '{}' cannot be imported: missing devices {}", p.name, p.missing.join(", "))));
    }
    if !p.missing_logs.is_empty() && !a.missing_log {
        return Err(Error::not_found(format!(
            "pool '{}' cannot be imported: log devices {} are missing, and the intent-log records on them would be lost; `tarn pool import --missing-log {}` imports without them, discarding those records (zpool's -m; tarn's -m is the mountpoint)",
            p.name,
            p.missing_logs.join(", "),
            p.name
        )));
    }
    if p.state == "DESTROYED" && !a.force {
        return Err(Error::invalid(format!("pool '{}' was destroyed; use -f to import it anyway", p.name)));
    }
    let paths: Vec<PathBuf> = p.devices.iter().map(PathBuf::from).collect();
    let opts = OpenOptions { readonly: false, tunables: t.clone(), rewind: a.rewind, missing_log: a.missing_log, ..Default::default() };
    if a.dry_run {
        out.line(Pool::check_open(&paths, &opts)?.would());
        return Ok(());
    }
    // `-m` asks for a mount there: checked before the pool is opened for
    // writing. A directory with something in it is judged by the root's
    // own `overlay`, read from a read-only open. (Without -m, the root's
    // mountpoint is checked when it is mounted: refused, a warning.)
    if let Some(m) = a.mountpoint.as_deref() {
        let occupied = std::fs::read_dir(m).is_ok_and(|mut d| d.next().is_some());
        let overlay = !occupied || root_overlay(&paths, &p.name, &opts);
        check_root_mount(st, &p.name, Some(m), "on", overlay, "import")?;
    }
    let mut cache = Cache::load()?;
    let pool = match a.device_bandwidth.as_deref() {
        None => Pool::open(&paths, &opts)?,
        Some(bw) => open_throttled(&paths, bw, &opts)?,
    };
    if let Some(r) = pool.rewound() {
        out.line(r.done());
    }
    out.warnings.extend(pool.open_warnings());
    // Without -m the root mounts where its own mountpoint property says, as
    // `zpool import` does (set with `pool create -m` or `tarn set`).
    let mountpoint = a.mountpoint.clone().or_else(|| root_mountpoint_setting(&pool, &p.name));
    let entry = CachedPool { name: p.name.clone(), guid: p.guid, devices: p.devices.iter().map(|d| abs(Path::new(d))).collect(), mountpoint: mountpoint.clone() };
    if let Err(e) = cache.add(entry).and_then(|_| cache.save()) {
        let _ = pool.close();
        return Err(e);
    }
    st.faulted.remove(&p.name);
    st.add_live(&p.name, pool, mountpoint.as_deref(), out);
    Ok(())
}

/// Whether the root dataset of the pool on `paths` has `overlay=on`,
/// read without writing anything (on if it cannot be read: the import
/// proper then says why).
fn root_overlay(paths: &[PathBuf], name: &str, opts: &OpenOptions) -> bool {
    let opts = OpenOptions { readonly: true, ..opts.clone() };
    let Ok(pool) = Pool::open(paths, &opts) else { return true };
    let on = pool.datasets().get(name, "overlay").map_or(true, |v| v.value == "on");
    let _ = pool.close();
    on
}

/// Where import looks: the `-d` directories; without them, the devices the
/// cache file records for the named pool when it is there but not imported
/// (a faulted pool: `import -F NAME` recovers it in place), else /dev.
fn search_paths(st: &State, a: &ImportArgs) -> Result<Vec<PathBuf>> {
    if !a.dirs.is_empty() {
        return Ok(a.dirs.clone());
    }
    let cache = Cache::load()?;
    let cached = a.pool.as_ref().and_then(|n| cache.pools.iter().find(|p| (&p.name == n || &p.guid.to_string() == n) && !st.pools.contains_key(&p.name)));
    Ok(match cached {
        Some(p) => p.devices.iter().map(PathBuf::from).collect(),
        None => vec![PathBuf::from("/dev")],
    })
}

/// `import` without a name: the pools found, each with whether it would
/// import as it is, only with a rewind (and what that discards), or not at
/// all — found by opening it read-only, as `zpool import` does.
fn list_importable(st: &State, found: &[DiscoveredPool], t: &Tunables, as_json: bool, out: &mut Out) -> Result<()> {
    let checks: Vec<ImportCheck> = found.iter().map(|p| import_check(st, p, t)).collect();
    if as_json {
        let v: Vec<ImportableJson> = found.iter().zip(&checks).map(|(pool, c)| ImportableJson { pool, rewind: c.rewind.as_ref(), error: c.error.as_deref() }).collect();
        out.line(json(&v)?);
        return Ok(());
    }
    if found.is_empty() {
        out.line("no pools available to import");
    }
    for (p, c) in found.iter().zip(&checks) {
        out.line(format!("   pool: {}\n     id: {}\n  state: {}", p.name, p.guid, p.state));
        if let Some(r) = c.rewind.as_ref().filter(|r| r.needed()) {
            out.line("status: The newest txg cannot be opened; recovery is possible with -F:");
            r.would().lines().for_each(|l| out.line(format!("        {}", l)));
        } else if let Some(e) = &c.error {
            out.line("status: The pool cannot be opened:");
            e.lines().for_each(|l| out.line(format!("        {}", l.trim_start())));
        }
        out.line(" devices:");
        p.devices.iter().for_each(|d| out.line(format!("         {}", d)));
        p.missing.iter().for_each(|m| out.line(format!("         {}  MISSING", m)));
        out.line("");
    }
    Ok(())
}

/// Whether a found pool opens (None for both: imported here, or devices
/// missing, which the listing shows already).
struct ImportCheck {
    rewind: Option<tarn_engine::pool::Rewind>,
    error: Option<String>,
}

fn import_check(st: &State, p: &DiscoveredPool, t: &Tunables) -> ImportCheck {
    if st.pools.contains_key(&p.name) || !p.missing.is_empty() {
        return ImportCheck { rewind: None, error: None };
    }
    let paths: Vec<PathBuf> = p.devices.iter().map(PathBuf::from).collect();
    let opts = OpenOptions { readonly: true, tunables: t.clone(), ..Default::default() };
    match Pool::check_open(&paths, &opts) {
        Ok(r) => ImportCheck { rewind: Some(r), error: None },
        Err(e) => ImportCheck { rewind: None, error: Some(e.msg) },
    }
}

/// `import --json` without a name: a found pool and what opening it found.
#[derive(serde::Serialize)]
struct ImportableJson<'a> {
    #[serde(flatten)]
    pool: &'a DiscoveredPool,
    #[serde(skip_serializing_if = "Option::is_none")]
    rewind: Option<&'a tarn_engine::pool::Rewind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// The root dataset's mountpoint as a cache-entry setting, when it was set
/// locally (None: the default, `/POOL`).
fn root_mountpoint_setting(pool: &Pool, name: &str) -> Option<String> {
    let mp = pool.datasets().get(name, "mountpoint").ok()?;
    (mp.source == tarn_engine::dataset::Source::Local).then(|| super::state::mountpoint_setting(mp.value))
}

/// Opens a pool with every device slowed to `bw` bytes per second (the
/// hidden `import --device-bandwidth`, for benchmarks through the daemon).
fn open_throttled(paths: &[PathBuf], bw: &str, opts: &OpenOptions) -> Result<Pool> {
    let bw = parse_size(bw).filter(|&b| b > 0).ok_or_else(|| Error::invalid(format!("bad --device-bandwidth '{}': bytes per second, e.g. 50M", bw)))?;
    let mut devs = Vec::new();
    let mut locks = Vec::new();
    for p in paths {
        let fd = open_for_import(p)?;
        let fd = Arc::new(fd);
        locks.push(fd.clone());
        devs.push((p.display().to_string(), Arc::new(ThrottledDevice::new(fd, bw, Duration::ZERO)) as Arc<dyn BlockDevice>));
    }
    Pool::open_on(devs, locks, opts)
}

fn get(st: &mut State, scripted: bool, parsable: bool, fields: Vec<String>, props: String, name: String, out: &mut Out) -> Result<()> {
    let all = st.live(&name, out)?.pool.properties();
    let mut rows = Vec::new();
    for w in props.split(',') {
        let matched: Vec<_> = all.iter().filter(|(n, _, _)| w == "all" || n == w).collect();
        if matched.is_empty() {
            return Err(Error::invalid(format!("bad property list: invalid property '{}'", w)));
        }
        for (n, v, s) in matched {
            let v = if parsable || !["size", "allocated", "free", "bcloneused", "bclonesaved"].contains(&n.as_str()) {
                v.clone()
            } else {
                v.parse::<u64>().map(fmt::size).unwrap_or_else(|_| v.clone())
            };
            rows.push((n.clone(), v, s.clone()));
        }
    }
    let fields = if fields.is_empty() { ["name", "property", "value", "source"].map(String::from).to_vec() } else { fields };
    let mut table = Vec::new();
    for (n, v, s) in rows {
        let mut r = Vec::new();
        for f in &fields {
            r.push(match f.as_str() {
                "name" => name.clone(),
                "property" => n.clone(),
                "value" => v.clone(),
                "source" => s.clone(),
                other => return Err(Error::invalid(format!("unknown column '{}': name,property,value,source", other))),
            });
        }
        table.push(r);
    }
    out.text.push_str(&fmt::columns(&fields, &table, scripted));
    Ok(())
}
