//! The daemon's state: live pools and mounts, behind one lock.
//!
//! Invariants (hold whenever the lock is released):
//! - every live pool is in the cache file, under the same name;
//! - a faulted pool is in the cache file and not live;
//! - every mount belongs to a live pool (a pool is unmounted before it is
//!   exported, destroyed or closed, so no FUSE worker uses a closed pool);
//! - a file system is served by at most one mount: a mount of its own
//!   (`mounts`) or a slot inside its parent's (`served::Served` arbitrates,
//!   as the FUSE workers open slots without this lock).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_engine::pool::scan::ScanFunc;
use tarn_engine::dataset::{Source, Types};
use tarn_engine::{Error, ErrorKind, Objset, OpenOptions, Pool, Result, Tunables};
use tarn_fuse::MountHandle;

use super::proto::{Command, Request, Response};
use super::served::Served;
use super::{datasets, inject, log, mounts, observe, pools};
use crate::pool_cmd::PoolCmd;
use crate::cache::{Cache, CachedPool};

/// An imported pool.
pub struct Live {
    pub pool: Pool,
    /// Where its root dataset is mounted when mounted by default (`None`:
    /// mountpoint=none).
    pub mountpoint: Option<PathBuf>,
}

pub struct State {
    /// Daemon-wide tunables: the defaults, the persisted `tunable set`s
    /// (`tunables_conf`), the daemon's `--tunable` settings, live changes.
    pub tunables: Tunables,
    /// Where they come from: the defaults, the daemon's `--tunable`s, the
    /// kept settings and the refused lines of the tunables file
    /// (`tunable reset` drops a kept setting and recomputes).
    pub tunable_settings: crate::tunables_conf::Settings,
    pub pools: BTreeMap<String, Live>,
    /// Pools of the cache file that cannot be opened (damaged beyond what
    /// an import without -F may discard), with why: shown FAULTED by `pool
    /// status` and `list`, not retried until `pool import` or `export`.
    pub faulted: BTreeMap<String, String>,
    /// Datasets mounted on a mount of their own, by name. (Child datasets
    /// and snapshots served inside one of these are its slots.)
    pub mounts: BTreeMap<String, MountHandle>,
    /// Which datasets are served where, shared with the FUSE workers.
    pub served: Arc<Served>,
    /// Pools this daemon exported or destroyed: `live` never imports one
    /// of them again from the cache file on its own (only `pool import`).
    pub closed: BTreeSet<String>,
}

/// What a command prints, and warnings for the caller's stderr.
#[derive(Default)]
pub struct Out {
    pub text: String,
    pub warnings: Vec<String>,
}

impl Out {
    pub fn line(&mut self, s: impl AsRef<str>) {
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }
}

pub struct Daemon {
    state: Mutex<State>,
    stopping: AtomicBool,
}

/// A root dataset's `mountpoint` property value as a cache-entry setting:
/// `legacy` means no mount by the daemon, as `none` does.
pub fn mountpoint_setting(value: String) -> String {
    if value == "legacy" {
        "none".to_string()
    } else {
        value
    }
}

/// The root dataset's mountpoint from its cache entry.
pub fn mountpoint_of(name: &str, setting: Option<&str>) -> Option<PathBuf> {
    match setting {
        Some("none") => None,
        Some(p) => Some(PathBuf::from(p)),
        None => Some(PathBuf::from("/").join(name)),
    }
}

impl State {
    /// Opens a pool from its cache entry, makes it live and mounts its root
    /// dataset (a failed mount is a warning: the pool stays imported). It
    /// never rewinds: a pool whose newest txg cannot be opened is left
    /// faulted, with the advice of what `import -F` would discard.
    pub fn import_cached(&mut self, entry: &CachedPool, t: &Tunables, out: &mut Out) -> Result<()> {
        self.open_cached(entry, t, out)?;
        self.mount_pools(&[&entry.name], out);
        Ok(())
    }

    /// Opens a pool from its cache entry and makes it live, unmounted
    /// (what the open did without goes to `out`'s warnings). It never
    /// rewinds: a pool whose newest txg cannot be opened is left faulted,
    /// with the advice of what `import -F` would discard.
    fn open_cached(&mut self, entry: &CachedPool, t: &Tunables, out: &mut Out) -> Result<()> {
        if let Some(why) = self.faulted.get(&entry.name) {
            return Err(Error::corrupt(why.clone()));
        }
        let paths: Vec<PathBuf> = entry.devices.iter().map(PathBuf::from).collect();
        let pool = match Pool::open(&paths, &OpenOptions { readonly: false, tunables: t.clone(), rewind: false, ..Default::default() }) {
            Ok(p) => p,
            Err(e) => {
                // Busy is retried on the next request (a benchmark may hold
                // the pool); damage is not going away by itself.
                if e.kind != ErrorKind::Busy {
                    self.faulted.insert(entry.name.clone(), e.msg.clone());
                }
                return Err(e);
            }
        };
        out.warnings.extend(pool.open_warnings());
        let mp = mountpoint_of(&entry.name, entry.mountpoint.as_deref());
        self.pools.insert(entry.name.clone(), Live { pool, mountpoint: mp });
        Ok(())
    }

    /// Makes an open pool live and mounts its root dataset and the datasets
    /// placed explicitly.
    pub fn add_live(&mut self, name: &str, pool: Pool, mountpoint: Option<&str>, out: &mut Out) {
        self.closed.remove(name);
        let mp = mountpoint_of(name, mountpoint);
        self.pools.insert(name.to_string(), Live { pool, mountpoint: mp });
        self.mount_pools(&[name], out);
    }

    /// Mounts the roots of `pools` and their datasets that have a
    /// mountpoint of their own (see `mounts`, "Which datasets are
    /// mounted"), all together in the order of their mount points' depth,
    /// so that a mount inside another's directory — of another pool too —
    /// goes on top of it, as `zfs mount -a` orders them. Walks the pools'
    /// file systems once, at import only.
    fn mount_pools(&mut self, pools: &[&str], out: &mut Out) {
        let mut explicit: Vec<(usize, String)> = Vec::new();
        for name in pools {
            let Some(live) = self.pools.get(*name) else { continue };
            let ds = live.pool.datasets();
            let root_depth = live.mountpoint.as_ref().map_or(0, |d| d.components().count());
            let fss = match ds.names(name, true, Types::FILESYSTEMS) {
                Ok(v) => v,
                Err(e) => {
                    out.warnings.push(format!("cannot list the datasets of '{}' to mount them: {}", name, e));
                    continue;
                }
            };
            explicit.extend(fss.into_iter().filter_map(|f| {
                let m = ds.get(&f, "mountpoint").ok()?;
                let depth = if f == *name { root_depth } else { std::path::Path::new(&m.value).components().count() };
                (f == *name || m.source == Source::Local).then_some((depth, f))
            }));
        }
        explicit.sort();
        for (_, f) in explicit {
            mounts::auto_mount(self, &f, out);
        }
    }

    /// The live pool `name`, importing it from the cache file if it is
    /// there but not live (its import failed at start, e.g. a benchmark held
    /// it; retrying here picks it up once it is free) — never one this
    /// daemon exported or destroyed (`closed`): a cache entry that outlived
    /// its export must not bring the pool back unasked.
    pub fn live(&mut self, name: &str, out: &mut Out) -> Result<&Live> {
        if !self.pools.contains_key(name) && self.closed.contains(name) {
            return Err(Error::not_found(format!("no such pool '{}': it was exported or destroyed; `tarn pool import {}` imports it again", name, name)));
        }
        if !self.pools.contains_key(name) {
            let cache = Cache::load()?;
            let entry = cache.find(name)?.clone();
            let t = self.tunables.clone();
            self.import_cached(&entry, &t, out).map_err(|e| e.context(format!("pool '{}' is in the cache but cannot be imported", name)))?;
        }
        self.pools.get(name).ok_or_else(|| Error::not_found(format!("no such pool '{}'", name)))
    }

    /// Pool `name` was exported or destroyed: not live, and not to be
    /// imported again from the cache file unasked.
    pub fn forget(&mut self, name: &str) {
        self.pools.remove(name);
        self.closed.insert(name.to_string());
    }

    /// Unmounts every mount of pool `name`; busy mounts fail unless `force`.
    pub fn unmount_pool(&mut self, name: &str, force: bool) -> Result<()> {
        mounts::unmount_below(self, name, force).map(|_| ())
    }
}

impl Daemon {
    /// A daemon with no pool yet (`import_cached` brings them in).
    pub fn new(tunable_settings: crate::tunables_conf::Settings, tunables: Tunables) -> Daemon {
        #[cfg(debug_assertions)]
        let test_memfs = std::env::var_os("TARN_TEST_MEMFS").is_some();
        #[cfg(not(debug_assertions))]
        let test_memfs = false;
        if test_memfs {
            log("test hook TARN_TEST_MEMFS: datasets are served from memory, not from their pools");
        }
        // The ARC is the daemon's, one for all its pools (each pool applies
        // the same tunables again when it opens).
        tarn_engine::arc::shared().apply_tunables(&tunables);
        let served = Arc::new(Served::new(test_memfs));
        let st = State { tunables, tunable_settings, pools: BTreeMap::new(), faulted: BTreeMap::new(), mounts: BTreeMap::new(), served, closed: BTreeSet::new() };
        Daemon { state: Mutex::new(st), stopping: AtomicBool::new(false) }
    }

    /// The state lock, taken before the daemon accepts requests and held
    /// until `import_cached` has run: requests wait for the imports.
    pub fn lock_for_start(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Imports every pool of the cache file and mounts their roots; pools
    /// that fail are logged and retried when a request names them.
    pub fn import_cached(&self, mut st: parking_lot::MutexGuard<'_, State>) {
        // Before any mount: what a killed predecessor left mounted, dead.
        super::mountdir::detach_recorded();
        let tunables = st.tunables.clone();
        match Cache::load() {
            Ok(cache) => {
                // Every pool first, then every mount in depth order: one
                // pool's root may lie inside another's.
                let mut opened = Vec::new();
                let mut out = Out::default();
                for entry in &cache.pools {
                    match st.open_cached(entry, &tunables, &mut out) {
                        Ok(()) => {
                            log(&format!("imported pool '{}'", entry.name));
                            opened.push(entry.name.as_str());
                        }
                        Err(e) => log(&format!("cannot import pool '{}' from the cache: {}", entry.name, e)),
                    }
                }
                st.mount_pools(&opened, &mut out);
                out.warnings.iter().for_each(|w| log(w));
            }
            Err(e) => log(&format!("cannot read the pool cache: {}", e)),
        }
    }

    pub fn handle(&self, req: Request) -> Response {
        // A request never waits out a suspended pool (failmode=wait): it
        // would hold the state lock that `pool clear` needs.
        let _fail_fast = tarn_engine::txg::FailFast::new();
        let mut out = Out::default();
        // These take the state lock only for moments: a write test runs,
        // and an events follower waits, without it.
        let res = match req.cmd {
            Command::Pool(PoolCmd::WriteTest(a)) => observe::write_test(self, a, &mut out),
            Command::Events(q) => super::events::handle(self, q, &mut out),
            cmd => return self.handle_locked(Request { cmd, ..req }, out),
        };
        Response { output: out.text, warnings: out.warnings, error: res.err().map(|e| e.msg), working: false }
    }

    /// A request carried out under the state lock.
    fn handle_locked(&self, req: Request, mut out: Out) -> Response {
        // `pool scrub -w`: started under the lock, waited for without it.
        // A resilver is waited for alone: the scrub a sequential one
        // starts is not (zpool wait -t resilver, attach -w).
        let (wait_scrub, only) = match &req.cmd {
            Command::Pool(PoolCmd::Scrub { stop: false, pause: false, wait: true, names }) => (names.clone(), None),
            Command::Pool(PoolCmd::Wait { name, activity }) if activity == "resilver" => (vec![name.clone()], Some(ScanFunc::Resilver)),
            Command::Pool(PoolCmd::Wait { name, .. }) => (vec![name.clone()], None),
            Command::Pool(PoolCmd::Attach { opts, name, .. } | PoolCmd::Replace { opts, name, .. }) if opts.wait => (vec![name.clone()], Some(ScanFunc::Resilver)),
            _ => (Vec::new(), None),
        };
        let res = (|| -> Result<()> {
            let mut st = self.state.lock();
            let t = crate::apply_tunables(st.tunables.clone(), &req.tunables)?;
            match req.cmd {
                Command::Ping => {
                    out.text = std::process::id().to_string();
                    Ok(())
                }
                Command::Stop => Ok(()),
                Command::Pool(c) => pools::handle(&mut st, c, &t, &mut out),
                Command::Mount(a) => mounts::handle_mount(&mut st, a, &mut out),
                Command::Unmount(a) => mounts::handle_unmount(&mut st, a, &mut out),
                Command::Metrics { pools } => observe::metrics(&mut st, &pools, &mut out),
                Command::Tunable(c) => observe::tunable(&mut st, c, &mut out),
                Command::Dataset(c) => datasets::handle(&mut st, c, &mut out),
                Command::Inject(a) => inject::handle(&mut st, a, &mut out),
                Command::Events(_) => Err(Error::invalid("events requests are not served under the state lock")),
            }
        })();
        let res = res.and_then(|()| self.wait_scrubs(&wait_scrub, only, &mut out));
        Response { output: out.text, warnings: out.warnings, error: res.err().map(|e| e.msg), working: false }
    }

    /// Waits for the scans of these pools to end — only a scan of `only`,
    /// when given (each pool's scanner is taken under the state lock,
    /// waited for without it).
    fn wait_scrubs(&self, names: &[String], only: Option<ScanFunc>, out: &mut Out) -> Result<()> {
        for n in names {
            let scanner = self.state.lock().live(n, out)?.pool.scanner();
            match only {
                Some(f) => {
                    scanner.wait_for(f);
                }
                None => {
                    scanner.wait();
                }
            }
        }
        Ok(())
    }

    /// The state lock (for requests that take it only for moments).
    pub(super) fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The root object set of live pool `name` (its holder may write
    /// without the state lock).
    pub fn root_of(&self, name: &str, out: &mut Out) -> Result<Arc<Objset>> {
        Ok(self.state.lock().live(name, out)?.pool.root().clone())
    }

    /// Metrics snapshots of every live pool (the Prometheus endpoint).
    pub fn snapshots(&self) -> Vec<tarn_engine::pool::metrics::PoolMetrics> {
        self.state.lock().pools.values().map(|l| tarn_engine::pool::metrics::snapshot(&l.pool)).collect()
    }

    /// Unmounts everything (forcing what stays busy), closes every pool,
    /// removes the socket and pid file and exits 0. Runs once.
    pub fn shutdown(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        log("stopping");
        // Held until exit: no request runs after this point.
        let mut st = self.state.lock();
        // Writers failmode=wait holds on a suspended pool fail now: the
        // unmounts below wait for their requests.
        st.pools.values().filter(|l| l.pool.suspension().is_some()).for_each(|l| l.pool.give_up_waiting());
        let datasets = mounts::unmount_order(&st, st.mounts.keys().cloned().collect());
        for ds in datasets {
            if let Err(e) = mounts::unmount(&mut st, &ds, false) {
                log(&format!("{}; forcing", e));
                if let Err(e) = mounts::unmount(&mut st, &ds, true) {
                    log(&format!("forced unmount failed: {}", e));
                }
            }
        }
        let mut code = 0;
        for (name, live) in std::mem::take(&mut st.pools) {
            if let Some(lost) = live.pool.discard() {
                // Its changes since the last synced txg can never be
                // written. It leaves the cache file, so the next start
                // does not bring it back as if nothing was lost; `pool
                // import` does, at the txg on disk.
                log(&format!("pool '{}' was suspended ({}): closed without syncing; on disk is txg {}; discarded {}", name, lost.reason, lost.synced_txg, pools::lost_text(&lost)));
                if let Err(e) = pools::forget_cached(&name) {
                    log(&format!("cannot remove suspended pool '{}' from the cache: {}", name, e));
                }
                code = 1;
                continue;
            }
            match live.pool.close() {
                Ok(()) => log(&format!("closed pool '{}'", name)),
                Err(e) => {
                    log(&format!("closing pool '{}': {}", name, e));
                    code = 1;
                }
            }
        }
        let _ = std::fs::remove_file(super::proto::socket_path());
        let _ = std::fs::remove_file(super::proto::pid_path());
        log("stopped");
        std::process::exit(code);
    }
}
