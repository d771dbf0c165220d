//! Cache devices (L2ARC) of a pool: adding, removing, and reopening them at
//! import. The L2ARC itself is `arc::l2`.
//!
//! A cache device is recorded in the pool directory as `cache:<guid>` =
//! path, and carries a header naming the pool and its own guid. At import
//! each recorded device is opened and its index rebuilt; a device that is
//! missing or carries another header is left out with a note (a cache is
//! never needed for correctness), as OpenZFS leaves an unavailable cache
//! device out of the pool.
//!
//! A cache device file is locked like a data device, and the lock says
//! whose cache it is, so no pool of this process or another can take it
//! (`pool::vet`). Adding and removing are all-or-none: every device named
//! is checked before the first is written or forgotten.

use std::path::PathBuf;
use std::sync::Arc;

use tarn_ondisk::kv::{self, KvMap};

use super::core::{names_device, PoolCore};
use super::events::{class, Post};
use super::vet::{self, Role, Vetted};
use super::Pool;
use crate::arc::l2::{read_cache_label, CacheDevStatus};
use crate::arc::L2Params;
use crate::error::{Error, ErrorKind, Result};
use crate::sys::device::BlockDevice;
use crate::sys::file::FileDevice;
use crate::tunables::Tunables;

const KEY_PREFIX: &str = "cache:";

pub fn l2_params(t: &Tunables) -> L2Params {
    L2Params {
        write_max: t.l2arc_write_max,
        write_boost: t.l2arc_write_boost,
        headroom: t.l2arc_headroom,
        feed_secs: t.l2arc_feed_secs,
        feed_min_ms: t.l2arc_feed_min_ms,
        noprefetch: t.l2arc_noprefetch != 0,
        meta_percent: t.l2arc_meta_percent,
        rebuild: t.l2arc_rebuild_enabled != 0,
    }
}

/// The cache devices recorded in the pool directory: (guid, path).
fn recorded(props: &KvMap) -> Vec<(u64, String)> {
    props
        .keys()
        .filter_map(|k| {
            let guid = k.strip_prefix(KEY_PREFIX)?.parse().ok()?;
            Some((guid, kv::get_str(props, k)?.to_string()))
        })
        .collect()
}

/// Opens the recorded cache devices (or the given in-memory ones, matched
/// by header) and starts feeding them; returns what it did without (the
/// importer shows it).
pub(crate) fn open_recorded(core: &Arc<PoolCore>, props: &KvMap, given: &[(String, Arc<dyn BlockDevice>)]) -> Vec<String> {
    let mut missing = Vec::new();
    for (guid, path) in recorded(props) {
        let dev: Option<Arc<dyn BlockDevice>> = given
            .iter()
            .find(|(_, d)| read_cache_label(d.as_ref()) == Some((core.guid, guid)))
            .map(|(_, d)| d.clone())
            .or_else(|| open_locked(core, &path).map_err(|why| missing.push(why)).ok());
        let Some(dev) = dev else { continue };
        if read_cache_label(dev.as_ref()) != Some((core.guid, guid)) {
            missing.push(format!("pool '{}': {} is no longer this pool's cache device; importing without it", core.name, path));
            continue;
        }
        if let Err(e) = core.l2.add_device(guid, &path, dev, false) {
            missing.push(format!("pool '{}': cache device {}: {}", core.name, path, e));
        }
    }
    if core.l2.has_devices() {
        core.l2.start_feeding(&core.cache);
    }
    missing
}

/// Opens and locks a recorded cache device file, or says why not (a cache
/// is never needed for correctness: the pool imports without it).
fn open_locked(core: &PoolCore, path: &str) -> std::result::Result<Arc<dyn BlockDevice>, String> {
    let f = FileDevice::open(path).map_err(|e| format!("pool '{}': cache device {} is unavailable ({}); importing without it", core.name, path, e))?;
    f.lock_exclusive().map_err(|e| format!("pool '{}': cache device {} is in use ({}); importing without it", core.name, path, e.holder_desc))?;
    f.set_lock_owner(format!("a cache device of active pool '{}'", core.name));
    Ok(Arc::new(f))
}

impl Pool {
    /// `pool add POOL cache PATH...`: vets every device (`pool::vet`; `force`
    /// takes one with a signature or an exported pool's label, never a busy
    /// one), then adds them all or none.
    pub fn add_caches(&self, paths: &[PathBuf], force: bool) -> Result<()> {
        self.core().check_writable()?;
        let roles: Vec<(PathBuf, Role)> = paths.iter().map(|p| (p.clone(), Role::Cache)).collect();
        let vetted = vet::open_devices(&roles, None, force, Some(self.guid()))?;
        self.attach_caches(vetted)
    }

    /// Adds vetted devices as cache devices: each gets a fresh header, then
    /// one pool-directory update records them all. On failure every device
    /// added so far is taken out again.
    pub(crate) fn attach_caches(&self, vetted: Vec<Vetted>) -> Result<()> {
        if vetted.is_empty() {
            return Ok(());
        }
        let owner = format!("a cache device of active pool '{}'", self.name());
        let devs: Vec<(String, Arc<dyn BlockDevice>)> = vetted
            .into_iter()
            .map(|v| {
                assert_eq!(v.role, Role::Cache);
                v.dev.set_lock_owner(owner.clone());
                (v.path, v.dev as Arc<dyn BlockDevice>)
            })
            .collect();
        self.attach(devs)
    }

    /// Adds an opened device as a cache, recorded under `name` (in-memory
    /// devices in tests; files go through `add_caches`).
    pub fn add_cache_on(&self, name: &str, dev: Arc<dyn BlockDevice>) -> Result<()> {
        self.core().check_writable()?;
        vet::check_contents(name, dev.as_ref(), Role::Cache, false, Some(self.guid()))?;
        self.attach(vec![(name.to_string(), dev)])
    }

    fn attach(&self, devs: Vec<(String, Arc<dyn BlockDevice>)>) -> Result<()> {
        let core = self.core();
        let mut added: Vec<(u64, String)> = Vec::new();
        let undo = |added: &[(u64, String)]| added.iter().for_each(|(g, _)| {
            core.l2.remove_device(*g);
        });
        for (name, dev) in devs {
            if let Some((pool, guid)) = read_cache_label(dev.as_ref()) {
                if pool == core.guid && core.l2.devices().iter().any(|d| d.guid == guid) {
                    undo(&added);
                    return Err(Error::new(ErrorKind::Exists, format!("'{}' is already a cache device of pool '{}'", name, core.name)));
                }
            }
            let guid = super::pool::new_guid(&name);
            if let Err(e) = core.l2.add_device(guid, &name, dev, true) {
                undo(&added);
                return Err(e);
            }
            added.push((guid, name));
        }
        let res = self.update_pool_dir(|props| {
            added.iter().for_each(|(guid, name)| kv::put_str(props, &format!("{}{}", KEY_PREFIX, guid), name));
            Ok(())
        });
        if let Err(e) = res {
            undo(&added);
            return Err(e);
        }
        core.l2.start_feeding(&core.cache);
        added.iter().for_each(|(guid, name)| post_cache_event(core, class::VDEV_ADD, name, *guid));
        core.events.post(Post::new(class::CONFIG_SYNC));
        Ok(())
    }

    /// `pool remove POOL DEVICE...`: removes cache devices (by path, any
    /// name of the same file, or guid) — all of them or, if one is not a
    /// cache device of the pool or is named twice, none.
    pub fn remove_caches(&self, which: &[String]) -> Result<()> {
        let core = self.core();
        let devices = core.l2.devices();
        let mut chosen: Vec<u64> = Vec::new();
        for w in which {
            let Some(d) = devices.iter().find(|d| names_device(w, &d.path, d.guid)) else {
                return Err(self.not_a_cache_device(w));
            };
            if chosen.contains(&d.guid) {
                return Err(Error::invalid(format!("'{}' is given twice: cache device {} of pool '{}'", w, d.path, core.name)));
            }
            chosen.push(d.guid);
        }
        self.update_pool_dir(|props| {
            chosen.iter().for_each(|g| drop(props.remove(&format!("{}{}", KEY_PREFIX, g))));
            Ok(())
        })?;
        for g in &chosen {
            core.l2.remove_device(*g);
            let path = devices.iter().find(|d| d.guid == *g).map_or("?", |d| d.path.as_str());
            post_cache_event(core, class::VDEV_REMOVE, path, *g);
        }
        core.events.post(Post::new(class::CONFIG_SYNC));
        Ok(())
    }

    fn not_a_cache_device(&self, which: &str) -> Error {
        let data = self.core().leaf_named(which).is_some();
        let why = if data { "a data device, and only cache devices can be removed" } else { "not a cache device of the pool" };
        Error::not_found(format!("'{}' is not a cache device of pool '{}': it is {}", which, self.name(), why))
    }

    pub fn cache_devices(&self) -> Vec<CacheDevStatus> {
        self.core().l2.devices()
    }
}

/// A cache device added or removed, as an event.
fn post_cache_event(core: &PoolCore, cls: &'static str, path: &str, guid: u64) {
    core.events.post(Post::new(cls).vdev(path, guid).text("vdev_type", "cache"));
}
