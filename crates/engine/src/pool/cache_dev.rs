//! Cache devices (L2ARC) of a pool: adding, removing, and reopening them at
//! import. The L2ARC itself is `arc::l2`.
//!
//! A cache device is recorded in the pool directory as `cache:<guid>` =
//! path, and carries a header naming the pool and its own guid. At import
//! each recorded device is opened and its index rebuilt; a device that is
//! missing or carries another header is left out with a note (a cache is
//! never needed for correctness), as OpenZFS leaves an unavailable cache
//! device out of the pool.

use std::path::Path;
use std::sync::Arc;

use tarn_ondisk::kv::{self, KvMap};

use super::core::PoolCore;
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
            .or_else(|| FileDevice::open(&path).ok().map(|f| Arc::new(f) as Arc<dyn BlockDevice>));
        let Some(dev) = dev else {
            missing.push(format!("pool '{}': cache device {} is unavailable; importing without it", core.name, path));
            continue;
        };
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

impl Pool {
    /// `pool add POOL cache PATH`: adds a file or block device as a cache.
    pub fn add_cache(&self, path: &Path) -> Result<()> {
        let f = FileDevice::open(path).map_err(|e| Error::io(format!("cannot open '{}'", path.display()), e))?;
        self.add_cache_on(&path.display().to_string(), Arc::new(f))
    }

    /// Adds an opened device as a cache, recorded under `name`.
    pub fn add_cache_on(&self, name: &str, dev: Arc<dyn BlockDevice>) -> Result<()> {
        let core = self.core();
        core.check_writable()?;
        if let Some((pool, _)) = read_cache_label(dev.as_ref()) {
            if pool == core.guid {
                return Err(Error::new(ErrorKind::Exists, format!("{} is already a cache device of '{}'", name, core.name)));
            }
        }
        let guid = super::pool::new_guid(name);
        core.l2.add_device(guid, name, dev, true)?;
        let res = self.update_pool_dir(|props| {
            kv::put_str(props, &format!("{}{}", KEY_PREFIX, guid), name);
            Ok(())
        });
        if let Err(e) = res {
            core.l2.remove_device(guid);
            return Err(e);
        }
        core.l2.start_feeding(&core.cache);
        Ok(())
    }

    /// `pool remove POOL DEVICE`: removes a cache device (by path or guid).
    pub fn remove_cache(&self, which: &str) -> Result<()> {
        let core = self.core();
        let Some(d) = core.l2.devices().into_iter().find(|d| d.path == which || d.guid.to_string() == which) else {
            return Err(Error::not_found(format!("'{}' is not a cache device of pool '{}'", which, core.name)));
        };
        self.update_pool_dir(|props| {
            props.remove(&format!("{}{}", KEY_PREFIX, d.guid));
            Ok(())
        })?;
        core.l2.remove_device(d.guid);
        Ok(())
    }

    pub fn cache_devices(&self) -> Vec<CacheDevStatus> {
        self.core().l2.devices()
    }
}
