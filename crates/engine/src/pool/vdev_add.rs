//! `pool add`: growing a running pool by top-level vdevs (plain devices,
//! mirrors, RAID-Z groups), as `zpool add`.
//!
//! The new vdevs are checked as `pool create` checks a layout, against the
//! pool's own vdevs too (zpool's "mismatched replication level", unless
//! forced), and their devices vetted as `create` vets them. They join in
//! three steps, ordered so that no block can ever point at a vdev the
//! labels do not name:
//! 1. each is built (new leaves, their schedulers and fault hooks) and put
//!    in the pool's `VdevSet` — nothing allocates on it yet, as the
//!    allocator does not know it;
//! 2. the labels of every leaf, old and new, are written with the grown
//!    tree (a crash now leaves an empty vdev in the tree: harmless);
//! 3. the allocator takes each as an entirely free vdev, and writes may
//!    land there from the next allocation on.
//!
//! New vdevs take the ids after the last top-level vdev: a hole a removed
//! log vdev left (`pool::log_vdev`, "Removal") is never filled. OpenZFS
//! gives a hole's id to the next vdev added; tarn keeps its allocator's
//! state in one pool-wide checkpoint, and an id given again while an
//! uberblock's checkpoint still describes the removed vdev under it would
//! load the old vdev's extent onto the new one. Holes cost a label node
//! each (at most 256 top-level vdevs).
//!
//! Nothing is copied: blocks already written stay where they are, and the
//! allocator's free-space weighting sends new blocks mostly to the new,
//! emptier vdevs (as in OpenZFS). The space maps need nothing special: a
//! vdev the last checkpoint does not list loads as free at import and the
//! space log's records after the checkpoint replay onto it.

use std::sync::Arc;

use tarn_ondisk::label::LabelConfig;
use tarn_ondisk::uberblock::{FEATURE_LOG_VDEVS, FEATURE_VDEV_TREE};

use super::events::{class, Post};
use super::pool::{new_guid, new_leaf};
use super::vdevs::{self, NewTop, TopSpec};
use super::vet::{self, Role};
use crate::error::{Error, Result};
use crate::sys::device::BlockDevice;
use crate::Pool;

/// Refuses a device given twice (under two names) or already a leaf of
/// the pool: opened devices come without the vetting of paths (`vet`).
fn check_new_devices(core: &super::core::PoolCore, tops: &[NewTop]) -> Result<()> {
    let ptr = |d: &Arc<dyn BlockDevice>| Arc::as_ptr(d) as *const u8;
    let new: Vec<&(String, Arc<dyn BlockDevice>)> = tops.iter().flat_map(|t| t.devices.iter()).collect();
    for (i, (name, dev)) in new.iter().enumerate() {
        if let Some((first, _)) = new[..i].iter().find(|(_, d)| ptr(d) == ptr(dev)) {
            return Err(Error::invalid(format!("'{}' and '{}' are the same device, given twice: each device can be used once", name, first)));
        }
        refuse_own_device(core, name, dev)?;
    }
    Ok(())
}

/// Refuses `dev` (given as `name`) when it is already a leaf or a hot
/// spare standing by of the pool.
pub(super) fn refuse_own_device(core: &super::core::PoolCore, name: &str, dev: &Arc<dyn BlockDevice>) -> Result<()> {
    let ptr = |d: &Arc<dyn BlockDevice>| Arc::as_ptr(d) as *const u8;
    if core.spares.holding(dev).is_some() {
        return Err(Error::new(crate::error::ErrorKind::Busy, format!("'{}' is a hot spare of active pool '{}'", name, core.name)));
    }
    match core.leaves().into_iter().find(|(_, l)| l.leaf().is_some_and(|io| ptr(&io.device()) == ptr(dev))) {
        Some((_, l)) => Err(Error::new(crate::error::ErrorKind::Busy, format!("'{}' is part of active pool '{}' (as '{}')", name, core.name, l.path))),
        None => Ok(()),
    }
}

impl Pool {
    /// `pool add POOL VDEV...` for data vdevs: vets every device (see
    /// `pool::vet`; `force` as `pool create -f`, and for mismatched
    /// redundancy), then adds them all or none.
    pub fn add_vdevs(&self, tops: &[TopSpec], force: bool) -> Result<()> {
        let new = self.vet_tops(tops, force)?;
        self.add_vdevs_on(new, force)
    }

    /// The devices of `tops` vetted (`vet_new_devices`) and opened, in
    /// their layouts.
    pub(super) fn vet_tops(&self, tops: &[TopSpec], force: bool) -> Result<Vec<NewTop>> {
        let paths: Vec<std::path::PathBuf> = tops.iter().flat_map(|t| t.devices.iter().cloned()).collect();
        let mut devs = self.vet_new_devices(&paths, force)?.into_iter();
        Ok(tops.iter().map(|t| NewTop { layout: t.layout, devices: devs.by_ref().take(t.devices.len()).collect() }).collect())
    }

    /// As `add_vdevs`, on opened devices.
    pub fn add_vdevs_on(&self, tops: Vec<NewTop>, force: bool) -> Result<()> {
        self.add_tops(tops, force, false)
    }

    /// Adds top-level vdevs of the normal class or, with `log`, log vdevs
    /// (`pool::log_vdev`; their redundancy is compared with the other log
    /// vdevs', as zpool leaves logs out of its replication check).
    pub(super) fn add_tops(&self, tops: Vec<NewTop>, force: bool, log: bool) -> Result<()> {
        let sh = self.shared();
        let core = &sh.core;
        core.check_writable()?;
        if tops.is_empty() {
            return Err(Error::invalid(format!("cannot add to pool '{}': no devices given", core.name)));
        }
        let _g = sh.tree_lock.lock();
        let cfg: LabelConfig = sh.config.lock().clone();
        let existing: Vec<(vdevs::Layout, usize)> = cfg.tree.children.iter().filter(|t| !t.is_hole() && cfg.logs.contains(&t.id) == log).map(vdevs::layout_of).collect();
        vdevs::check_layout(&tops, &existing, force)?;
        check_new_devices(core, &tops)?;
        for t in &tops {
            for (path, dev) in &t.devices {
                vet::check_contents(path, dev.as_ref(), Role::Data, force, None)?;
            }
        }
        let first = cfg.tree.children.len() as u32;
        let nodes = vdevs::new_nodes(&tops, first, cfg.tree.ashift, &new_guid)?;
        for (_, dev) in tops.iter().flat_map(|t| t.devices.iter()) {
            super::label::clear_labels(dev.as_ref()).map_err(|e| Error::io(format!("clearing labels of {}", dev.name()), e))?;
        }
        let tunables = core.tunables.read().clone();
        let mut devs = tops.into_iter().flat_map(|t| t.devices);
        let mut built = Vec::new();
        for node in &nodes {
            let v = vdevs::build(node, &mut |leaf| {
                let (path, dev) = devs.next().ok_or_else(|| Error::invalid(format!("no device for leaf '{}'", leaf.path)))?;
                let size = tarn_ondisk::label::usable_device_size(dev.size_bytes());
                let io = Arc::new(new_leaf(path, dev, &core.txg, &tunables));
                io.set_park_failed_writes(!log);
                core.hook_faults(node.id, &io);
                Ok(vdevs::leaf_vdev(leaf, io, size))
            })?;
            built.push(v);
        }
        // 1. In the pool, not yet in the allocator; a log vdev known as
        // one before its leaves can fault (their hook asks).
        for v in &built {
            if log {
                core.logs.add(v.id());
            }
            core.vdevs.install(v.clone());
        }
        // 2. In the labels.
        let mut grown = cfg.clone();
        grown.tree.children.extend(nodes.iter().cloned());
        if nodes.iter().any(|n| !n.kind.is_leaf()) {
            grown.features_incompat |= FEATURE_VDEV_TREE;
        }
        if log {
            grown.logs.extend(nodes.iter().map(|n| n.id));
            grown.features_incompat |= FEATURE_LOG_VDEVS;
        }
        grown.config_txg = cfg.config_txg.max(core.txg.synced_txg()) + 1;
        if let Err(e) = sh.write_configs(&grown) {
            core.vdevs.truncate(first as usize);
            nodes.iter().for_each(|n| core.logs.remove(n.id));
            // The old tree back in the labels that took the new one.
            let mut back = cfg.clone();
            back.config_txg = grown.config_txg + 1;
            let _ = sh.write_configs(&back);
            return Err(e.context(format!("cannot add to pool '{}'", core.name)));
        }
        // 3. In the allocator.
        {
            let mut a = core.alloc.lock();
            for (node, v) in nodes.iter().zip(&built) {
                a.add_vdev_with_config(node.id, vdevs::alloc_start(node), node.asize, vdevs::alloc_config(node, v))
                    .map_err(|e| Error::corrupt(format!("pool '{}': vdev {} ('{}'): {}", core.name, node.id, v.path, e)))?;
                if log {
                    a.set_log(node.id, true).map_err(|e| Error::corrupt(format!("pool '{}': log vdev {} ('{}'): {}", core.name, node.id, v.path, e)))?;
                }
            }
        }
        core.refresh_space();
        for v in &built {
            let what = if log { "log vdev " } else { "" };
            core.events.post(Post::new(class::VDEV_ADD).vdev(&v.path, v.guid).line(format!("{}{} added to pool '{}'", what, v.path, core.name)));
        }
        core.events.post(Post::new(class::CONFIG_SYNC));
        drop(_g);
        self.sync()
    }
}
