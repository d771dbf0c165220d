//! The daemon's state: live pools and mounts, behind one lock.
//!
//! Invariants (hold whenever the lock is released):
//! - every live pool is in the cache file, under the same name;
//! - every mount belongs to a live pool (a pool is unmounted before it is
//!   exported, destroyed or closed, so no FUSE worker uses a closed pool);
//! - a file system is served by at most one mount: a mount of its own
//!   (`mounts`) or a slot inside its parent's (`served::Served` arbitrates,
//!   as the FUSE workers open slots without this lock).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_engine::dataset::{Source, Types};
use tarn_engine::{Error, Objset, OpenOptions, Pool, Result, Tunables};
use tarn_fuse::MountHandle;

use super::proto::{Command, Request, Response};
use super::served::Served;
use super::{datasets, log, mounts, observe, pools};
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
    /// What they are without the persisted and live changes (what
    /// `tunable reset` returns to).
    pub base_tunables: Tunables,
    pub pools: BTreeMap<String, Live>,
    /// Datasets mounted on a mount of their own, by name. (Child datasets
    /// and snapshots served inside one of these are its slots.)
    pub mounts: BTreeMap<String, MountHandle>,
    /// Which datasets are served where, shared with the FUSE workers.
    pub served: Arc<Served>,
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
    /// dataset (a failed mount is a warning: the pool stays imported).
    pub fn import_cached(&mut self, entry: &CachedPool, t: &Tunables, out: &mut Out) -> Result<()> {
        let paths: Vec<PathBuf> = entry.devices.iter().map(PathBuf::from).collect();
        let pool = Pool::open(&paths, &OpenOptions { readonly: false, tunables: t.clone(), rewind: false, ..Default::default() })?;
        self.add_live(&entry.name, pool, entry.mountpoint.as_deref(), out);
        Ok(())
    }

    /// Makes an open pool live and mounts its root dataset.
    pub fn add_live(&mut self, name: &str, pool: Pool, mountpoint: Option<&str>, out: &mut Out) {
        let mp = mountpoint_of(name, mountpoint);
        self.pools.insert(name.to_string(), Live { pool, mountpoint: mp.clone() });
        if let Some(dir) = mp {
            if let Err(e) = mounts::mount(self, name, &dir) {
                out.warnings.push(format!("pool '{}' is imported but not mounted: {}", name, e));
            }
        }
        self.mount_explicit(name, out);
    }

    /// Mounts the datasets of pool `name` that have a mountpoint of their own
    /// (see `mounts`, "Which datasets are mounted"). Walks the pool's file
    /// systems once, at import only.
    fn mount_explicit(&mut self, name: &str, out: &mut Out) {
        let Some(live) = self.pools.get(name) else { return };
        let ds = live.pool.datasets();
        let fss = match ds.names(name, true, Types::FILESYSTEMS) {
            Ok(v) => v,
            Err(e) => return out.warnings.push(format!("cannot list the datasets of '{}' to mount them: {}", name, e)),
        };
        let explicit: Vec<String> = fss.into_iter().filter(|f| f != name && ds.get(f, "mountpoint").is_ok_and(|m| m.source == Source::Local)).collect();
        for f in explicit {
            mounts::auto_mount(self, &f, out);
        }
    }

    /// The live pool `name`, importing it from the cache file if it is
    /// there but not live (its import failed at start, e.g. a benchmark held
    /// it; retrying here picks it up once it is free).
    pub fn live(&mut self, name: &str, out: &mut Out) -> Result<&Live> {
        if !self.pools.contains_key(name) {
            let cache = Cache::load()?;
            let entry = cache.find(name)?.clone();
            let t = self.tunables.clone();
            self.import_cached(&entry, &t, out).map_err(|e| e.context(format!("pool '{}' is in the cache but cannot be imported", name)))?;
        }
        self.pools.get(name).ok_or_else(|| Error::not_found(format!("no such pool '{}'", name)))
    }

    /// Unmounts every mount of pool `name`; busy mounts fail unless `force`.
    pub fn unmount_pool(&mut self, name: &str, force: bool) -> Result<()> {
        mounts::unmount_below(self, name, force).map(|_| ())
    }
}

impl Daemon {
    /// Imports every pool of the cache file and mounts their roots; pools
    /// that fail are logged and retried when a request names them.
    pub fn start(base_tunables: Tunables, tunables: Tunables) -> Daemon {
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
        let mut st = State { tunables: tunables.clone(), base_tunables, pools: BTreeMap::new(), mounts: BTreeMap::new(), served };
        match Cache::load() {
            Ok(cache) => {
                for entry in &cache.pools {
                    let mut out = Out::default();
                    match st.import_cached(entry, &tunables, &mut out) {
                        Ok(()) => log(&format!("imported pool '{}'", entry.name)),
                        Err(e) => log(&format!("cannot import pool '{}' from the cache: {}", entry.name, e)),
                    }
                    out.warnings.iter().for_each(|w| log(w));
                }
            }
            Err(e) => log(&format!("cannot read the pool cache: {}", e)),
        }
        Daemon { state: Mutex::new(st), stopping: AtomicBool::new(false) }
    }

    pub fn handle(&self, req: Request) -> Response {
        let mut out = Out::default();
        if let Command::Pool(PoolCmd::WriteTest(a)) = req.cmd {
            let res = observe::write_test(self, a, &mut out);
            return Response { output: out.text, warnings: out.warnings, error: res.err().map(|e| e.msg) };
        }
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
            }
        })();
        Response { output: out.text, warnings: out.warnings, error: res.err().map(|e| e.msg) }
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
        let datasets: Vec<String> = st.mounts.keys().cloned().collect();
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
