//! Changing a running pool's vdev tree: `pool attach`, `detach` and
//! `replace` (zpool's verbs, with its rules and messages).
//!
//! ## What each verb does to the tree
//! - **attach** EXISTING NEW: a plain top-level device becomes a 2-way
//!   mirror of it and NEW; a leaf of a mirror gets NEW as one more child.
//!   A RAID-Z member cannot have a device attached (as zpool: "can only
//!   attach to mirrors and top-level disks").
//! - **detach** DEVICE: a child of a mirror or of a replacing vdev leaves
//!   it; a mirror or replacing vdev left with one child is replaced by that
//!   child. Refused when no sibling that stays holds every block (up, with
//!   an empty DTL): "no valid replicas". A child of a spare vdev (a hot
//!   spare standing in, `pool::spare`) leaves by `Pool::detach_from_spare`:
//!   the spare goes back to standing by, or the device it stood in for
//!   leaves and the spare stays for good.
//! - **replace** OLD NEW: OLD's place becomes a *replacing* vdev of OLD
//!   and NEW — a mirror of the two, so OLD (when it still works) keeps
//!   serving reads and the pool keeps its redundancy while NEW is
//!   resilvered. When the resilver has copied everything onto NEW (its DTL
//!   empty), OLD is detached and NEW takes its place
//!   ([`complete_replacements`], run at the end of every resilver). Under
//!   a RAID-Z vdev the replacing vdev is a member like any other: each
//!   column it holds is written to both leaves and read from the one that
//!   has it (`Vdev::column_source`). A RAID-Z member already out of service
//!   (faulted, missing, removed or offline) has nothing to offer and is
//!   replaced in place instead: NEW takes its slot at once, rebuilt from
//!   parity. A device a hot spare stands in for is always replaced beside
//!   itself, under the spare vdev; when its replacement completes, the
//!   spare is free again.
//!
//! ## How a change is made (`Shared::change_top`)
//! One change at a time (`Shared::tree_lock`). The config's node of the
//! top-level vdev is edited; the top-level vdev is built again from it
//! around the leaves it keeps (the same `Vdev`s: their schedulers, error
//! counts and DTLs go on), with a new scheduler for each new leaf, and
//! swapped into the pool's [`VdevSet`](super::vdevs::VdevSet): I/O in
//! flight finishes on the old one. A new leaf starts with a DTL of every
//! txg up to the open one, so reads of old blocks never go to it and the
//! resilver copies them; writes of later txgs go to it directly. The
//! labels of every leaf are then written with the new tree under a higher
//! config txg, so import sees the new tree even if the pool stops before
//! the next sync (uberblocks written before the change still import: their
//! guid sum is the old tree's). A leaf that leaves the tree has its labels
//! erased after the next sync, so it is free again for any use.
//!
//! ## Sizes
//! A new device must hold what its top-level vdev needs of each leaf
//! (`vdevs::required_span`): a smaller one is refused with both sizes
//! named, nothing changed. A bigger one lends only that much (the vdev
//! does not grow).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tarn_ondisk::label::{self, LabelConfig, VdevKind, VdevNode};
use tarn_ondisk::uberblock::FEATURE_VDEV_TREE;

use super::core::PoolCore;
use super::events::{class, Post};
use super::pool::{new_guid, new_leaf, Shared};
use super::rebuild::ResilverKind;
use super::vdevs;
use super::vet::{self, Role};
use crate::error::{Error, Result};
use crate::sys::device::{BlockDevice, Health};
use crate::vdev::Vdev;
use crate::Pool;

/// What `replace` does with the old device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replace {
    /// Beside it, in a replacing vdev, until the resilver is done.
    Beside,
    /// In its slot at once (a RAID-Z member out of service, which has
    /// nothing to serve).
    InPlace,
}

impl Pool {
    /// `pool attach POOL EXISTING NEW`: NEW (a file or block device, vetted
    /// as `pool create` vets) mirrors EXISTING (see the module docs), and
    /// is resilvered.
    pub fn attach_device(&self, existing: &str, new: &Path, force: bool) -> Result<()> {
        self.attach_device_as(existing, new, force, ResilverKind::Healing)
    }

    /// As `attach_device`, NEW brought up to date by a resilver of `kind`
    /// (`pool attach -s`: a sequential rebuild, `pool::rebuild`).
    pub fn attach_device_as(&self, existing: &str, new: &Path, force: bool, kind: ResilverKind) -> Result<()> {
        let (name, dev) = self.vet_new(new, force)?;
        self.attach_opened(existing, &name, dev, kind)
    }

    /// As `attach_device`, on an opened device known as `name`.
    pub fn attach_device_on(&self, existing: &str, name: &str, dev: Arc<dyn BlockDevice>, force: bool) -> Result<()> {
        self.attach_device_on_as(existing, name, dev, force, ResilverKind::Healing)
    }

    /// As `attach_device_as`, on an opened device known as `name`.
    pub fn attach_device_on_as(&self, existing: &str, name: &str, dev: Arc<dyn BlockDevice>, force: bool, kind: ResilverKind) -> Result<()> {
        vet::check_contents(name, dev.as_ref(), Role::Data, force, None)?;
        self.attach_opened(existing, name, dev, kind)
    }

    /// `pool replace POOL OLD [NEW]`: NEW (OLD's path when left out: a new
    /// disk in the old one's place) takes over from OLD (see the module
    /// docs).
    pub fn replace_device(&self, old: &str, new: Option<&Path>, force: bool) -> Result<()> {
        self.replace_device_as(old, new, force, ResilverKind::Healing)
    }

    /// As `replace_device`, NEW brought up to date by a resilver of `kind`
    /// (`pool replace -s`: a sequential rebuild, `pool::rebuild`; a hot
    /// spare named as NEW stands in as always, by a healing resilver).
    pub fn replace_device_as(&self, old: &str, new: Option<&Path>, force: bool, kind: ResilverKind) -> Result<()> {
        let path = match new {
            Some(p) => p.to_path_buf(),
            None => Path::new(&self.leaf_for(old, "replace")?.1.path).to_path_buf(),
        };
        if let Some(spare) = self.spare_for_replace(old, &path.display().to_string())? {
            return self.replace_with_spare(old, spare);
        }
        let (name, dev) = self.vet_new(&path, force)?;
        self.replace_opened(old, &name, dev, kind)
    }

    /// As `replace_device`, on an opened device known as `name`.
    pub fn replace_device_on(&self, old: &str, name: &str, dev: Arc<dyn BlockDevice>, force: bool) -> Result<()> {
        self.replace_device_on_as(old, name, dev, force, ResilverKind::Healing)
    }

    /// As `replace_device_as`, on an opened device known as `name`.
    pub fn replace_device_on_as(&self, old: &str, name: &str, dev: Arc<dyn BlockDevice>, force: bool, kind: ResilverKind) -> Result<()> {
        if let Some(spare) = self.spare_on(&dev) {
            return self.replace_with_spare(old, spare);
        }
        vet::check_contents(name, dev.as_ref(), Role::Data, force, None)?;
        self.replace_opened(old, name, dev, kind)
    }

    /// `pool detach POOL DEVICE` (see the module docs).
    pub fn detach_device(&self, dev: &str) -> Result<()> {
        let sh = self.shared();
        sh.core.check_writable()?;
        let gone = {
            let _g = sh.tree_lock.lock();
            let (top, leaf) = self.leaf_for(dev, "detach")?;
            let cfg = sh.config.lock().clone();
            let node = top_node(&cfg, top.id())?;
            let Some(parent) = parent_of(node, leaf.guid).filter(|p| matches!(p.kind, VdevKind::Mirror | VdevKind::Replacing | VdevKind::Spare)) else {
                return Err(Error::invalid(format!("cannot detach '{}': only applicable to mirror, replacing and spare vdevs", dev)));
            };
            if parent.kind == VdevKind::Spare {
                drop(_g);
                return self.detach_from_spare(dev);
            }
            let stays = |c: &VdevNode| c.guid != leaf.guid && c.leaves().iter().all(|l| leaf_whole(&top, l.guid));
            if !parent.children.iter().any(stays) {
                return Err(Error::invalid(format!("cannot detach '{}': no valid replicas (no other child of {} holds every block)", dev, vdevs::display_name(parent))));
            }
            let edited = without_leaf(node, leaf.guid);
            sh.change_top(edited, vec![])?;
            leaf
        };
        self.leaf_left(&gone, "detached")
    }

    /// Opens and vets a device to add to the tree, and marks it as this
    /// pool's (its lock's holder).
    fn vet_new(&self, path: &Path, force: bool) -> Result<(String, Arc<dyn BlockDevice>)> {
        Ok(self.vet_new_devices(&[path.to_path_buf()], force)?.pop().expect("one device vetted"))
    }

    /// As `vet_new`, for several devices: all of them or none.
    pub(super) fn vet_new_devices(&self, paths: &[std::path::PathBuf], force: bool) -> Result<Vec<(String, Arc<dyn BlockDevice>)>> {
        self.core().check_writable()?;
        let roles: Vec<(std::path::PathBuf, Role)> = paths.iter().map(|p| (p.clone(), Role::Data)).collect();
        let owner = format!("part of active pool '{}'", self.name());
        let vetted = vet::open_devices(&roles, None, force, None)?;
        Ok(vetted
            .into_iter()
            .map(|v| {
                v.dev.set_lock_owner(owner.clone());
                (v.path, v.dev as Arc<dyn BlockDevice>)
            })
            .collect())
    }

    fn attach_opened(&self, existing: &str, name: &str, dev: Arc<dyn BlockDevice>, kind: ResilverKind) -> Result<()> {
        let sh = self.shared();
        sh.core.check_writable()?;
        if self.spare_on(&dev).is_some() {
            return Err(Error::invalid(format!("cannot attach '{}' to '{}': it is a hot spare of pool '{}' (a spare stands in with 'tarn pool replace {} {} {}')", name, existing, sh.core.name, sh.core.name, existing, name)));
        }
        super::vdev_add::refuse_own_device(&sh.core, name, &dev)?;
        let rebuild = {
            let _g = sh.tree_lock.lock();
            let (top, leaf) = self.leaf_for(existing, "attach")?;
            let cfg = sh.config.lock().clone();
            let node = top_node(&cfg, top.id())?;
            if kind == ResilverKind::Sequential {
                self.sequential_allowed(&top, node).map_err(|why| Error::invalid(format!("cannot attach '{}' to '{}': {}", name, existing, why)))?;
            }
            let refuse = |why: &str| Err(Error::invalid(format!("cannot attach '{}' to '{}': {}", name, existing, why)));
            let (edited, guid) = match node.kind {
                k if k.is_leaf() => {
                    let new = new_node(node, name, dev.as_ref(), 1)?;
                    let guid = new.guid;
                    let mut old = node.clone();
                    old.id = 0;
                    (vdevs::interior(VdevKind::Mirror, node.id, new_guid(&format!("mirror-{}", node.id)), node.ashift, 0, node.asize, vec![old, new]), guid)
                }
                VdevKind::Mirror if node.children.iter().any(|c| c.guid == leaf.guid) => {
                    let new = new_node(node, name, dev.as_ref(), node.children.len() as u32)?;
                    let guid = new.guid;
                    let mut m = node.clone();
                    m.children.push(new);
                    (m, guid)
                }
                VdevKind::Mirror => return refuse("it is being replaced or has a hot spare standing in (attach to the mirror's other children, or wait)"),
                _ => return refuse("can only attach to mirrors and top-level disks"),
            };
            let vdev = vdevs::display_name(&edited);
            sh.change_top(edited, vec![(guid, dev)])?;
            sh.core.events.post(Post::new(class::VDEV_ATTACH).vdev(name, guid).line(format!("'{}' attached to '{}'", name, leaf.path)));
            (top.id(), vdev)
        };
        self.update_pool_dir(|_| Ok(()))?;
        self.bring_up_to_date(kind, rebuild)
    }

    /// After attach or replace: the resilver of `kind` starts (a
    /// sequential one rebuilds top-level vdev `top`, named `vdev`).
    fn bring_up_to_date(&self, kind: ResilverKind, (top, vdev): (u32, String)) -> Result<()> {
        match kind {
            ResilverKind::Healing => self.resilver_start(),
            ResilverKind::Sequential => self.rebuild_start(top, vdev),
        }
    }

    /// Why a sequential rebuild cannot bring a new device of top-level
    /// vdev `top` (config `node`) up to date, if it cannot: not a mirror
    /// (zpool: only mirrors rebuild sequentially), a resilver under way or
    /// due (it covers every device that missed txgs, a rebuild only its
    /// vdev's new ones), or no device of the vdev that holds every block.
    fn sequential_allowed(&self, top: &Arc<Vdev>, node: &VdevNode) -> std::result::Result<(), String> {
        if node.kind == VdevKind::Raidz {
            return Err("sequential resilver is not supported for raidz (only mirrors and plain devices rebuild sequentially; leave out -s)".into());
        }
        let sh = self.shared();
        let st = sh.scan.status();
        if st.state == super::scan::ScanState::Scanning && st.func == super::scan::ScanFunc::Resilver {
            return Err(format!("pool '{}' is resilvering; wait for it ('tarn pool wait -t resilver {}') or leave out -s", sh.core.name, sh.core.name));
        }
        if let Some(t) = super::resilver::targets(&sh.core).first() {
            return Err(format!("device {:016x} of pool '{}' missed txgs and needs a healing resilver first (leave out -s)", t.guid, sh.core.name));
        }
        if !top.leaf_arcs().iter().any(|l| l.up() && l.dtl.lock().is_empty()) {
            return Err(format!("no device of {} holds every block to rebuild from", vdevs::display_name(node)));
        }
        Ok(())
    }

    fn replace_opened(&self, old: &str, name: &str, dev: Arc<dyn BlockDevice>, kind: ResilverKind) -> Result<()> {
        let sh = self.shared();
        sh.core.check_writable()?;
        super::vdev_add::refuse_own_device(&sh.core, name, &dev)?;
        let (how, gone, rebuild) = {
            let _g = sh.tree_lock.lock();
            let (top, leaf) = self.leaf_for(old, "replace")?;
            let cfg = sh.config.lock().clone();
            let node = top_node(&cfg, top.id())?;
            if kind == ResilverKind::Sequential {
                self.sequential_allowed(&top, node).map_err(|why| Error::invalid(format!("cannot replace '{}' with '{}': {}", old, name, why)))?;
            }
            let refuse = |why: String| Err(Error::invalid(format!("cannot replace '{}' with '{}': {}", old, name, why)));
            let parent = parent_of(node, leaf.guid);
            if parent.is_some_and(|p| p.kind == VdevKind::Replacing) {
                return refuse(format!("'{}' is already being replaced", leaf.path));
            }
            if cfg.spares.iter().any(|s| s.guid == leaf.guid) {
                return refuse(format!("'{}' is a hot spare in use: detach it, or replace the device it stands in for", leaf.path));
            }
            // Under a spare vdev the device is replaced beside itself
            // whatever its state: the spare goes when the replacement is
            // done (`complete_replacements`).
            let how = match node.kind {
                VdevKind::Raidz if !leaf.state().usable() && !parent.is_some_and(|p| p.kind == VdevKind::Spare) => Replace::InPlace,
                _ => Replace::Beside,
            };
            let slot = node.leaves().into_iter().find(|l| l.guid == leaf.guid).expect("the leaf is under its top-level vdev").clone();
            let mut new = new_node(node, name, dev.as_ref(), slot.id)?;
            let guid = new.guid;
            let replacement = match how {
                Replace::InPlace => new,
                Replace::Beside => {
                    new.id = 1;
                    let mut was = slot.clone();
                    was.id = 0;
                    vdevs::interior(VdevKind::Replacing, slot.id, new_guid(&format!("replacing-{}", slot.id)), slot.ashift, 0, slot.asize, vec![was, new])
                }
            };
            let edited = with_leaf_replaced(node, leaf.guid, &replacement);
            let vdev = vdevs::display_name(&edited);
            sh.change_top(edited, vec![(guid, dev)])?;
            sh.core.events.post(Post::new(class::VDEV_ATTACH).vdev(name, guid).line(format!("'{}' is replacing '{}'", name, leaf.path)));
            (how, leaf, (top.id(), vdev))
        };
        if how == Replace::InPlace {
            self.leaf_left(&gone, "replaced")?;
        }
        self.update_pool_dir(|_| Ok(()))?;
        self.bring_up_to_date(kind, rebuild)
    }

    /// After `leaf` left the tree: once a sync has passed (so nothing
    /// writes to it any more), its labels are erased when they are still
    /// this pool's, so the device is free for any use.
    pub(super) fn leaf_left(&self, leaf: &Vdev, how: &str) -> Result<()> {
        self.sync()?;
        let line = format!("'{}' {} from pool '{}'", leaf.path, how, self.name());
        forget_leaf(self.shared(), leaf, line);
        self.update_pool_dir(|_| Ok(()))
    }
}

/// After a resilver: each replacing vdev whose new device holds every
/// block (up, DTL empty) loses its old device, and the new one takes its
/// place (see the module docs). Errors are the resilver's report lines.
pub(super) fn complete_replacements(sh: &Shared) -> Vec<String> {
    let mut errors = Vec::new();
    loop {
        let done = {
            let _g = sh.tree_lock.lock();
            let cfg = sh.config.lock().clone();
            let found = cfg.tree.children.iter().find_map(|top| {
                let rt = sh.core.vdevs.get(top.id as usize)?;
                let r = replacings(top).into_iter().find(|r| r.children.last().is_some_and(|n| n.kind.is_leaf() && leaf_whole(&rt, n.guid)))?;
                Some((top.clone(), r.clone(), rt))
            });
            let Some((top, r, rt)) = found else { break };
            let new = r.children.last().expect("found with a last child");
            let mut edited = top.clone();
            for old in r.children.iter().filter(|c| c.guid != new.guid) {
                edited = without_leaf(&edited, old.guid);
            }
            // The original of a spare vdev replaced: the spare is free again
            // (`pool::spare`).
            let spared = parent_of(&top, r.guid).filter(|p| p.kind == VdevKind::Spare && p.children.first().is_some_and(|c| c.guid == r.guid));
            let freed: Vec<u64> = spared.and_then(|p| p.children.last()).map(|s| s.guid).into_iter().collect();
            for g in &freed {
                edited = without_leaf(&edited, *g);
            }
            let gone: Vec<Arc<Vdev>> = rt.leaf_arcs().into_iter().filter(|l| r.children.iter().any(|c| c.guid == l.guid && c.guid != new.guid)).collect();
            let returned: Vec<Arc<Vdev>> = rt.leaf_arcs().into_iter().filter(|l| freed.contains(&l.guid)).collect();
            if let Err(e) = sh.change_top(edited, vec![]) {
                errors.push(format!("cannot complete the replacement by '{}': {}", new.path, e));
                break;
            }
            (gone, returned, new.path.clone())
        };
        let (gone, returned, by) = done;
        if let Err(e) = sh.core.txg.wait_synced(0) {
            errors.push(format!("the replacement by '{}' is done, but the old device's labels stay: {}", by, e));
            break;
        }
        for l in &gone {
            forget_leaf(sh, l, format!("'{}' replaced by '{}' in pool '{}'", l.path, by, sh.core.name));
        }
        for l in &returned {
            sh.spare_returned(l);
        }
    }
    errors
}

impl Shared {
    /// Puts `node` in the config in place of top-level vdev `node.id`, and
    /// the vdev built from it in the pool, with a new leaf for each of
    /// `added` (a leaf guid of `node` and its device); then writes the
    /// labels. See the module docs. On an error the pool keeps its old
    /// tree.
    pub(super) fn change_top(&self, node: VdevNode, added: Vec<(u64, Arc<dyn BlockDevice>)>) -> Result<()> {
        self.change_tree(node, added, &|_| {})
    }

    /// As `change_top`, with `edit` making a change of its own to the
    /// config written with the new tree (a spare taken off the list).
    pub(super) fn change_tree(&self, node: VdevNode, added: Vec<(u64, Arc<dyn BlockDevice>)>, edit: &dyn Fn(&mut LabelConfig)) -> Result<()> {
        let core = &self.core;
        let old = core.vdevs.top(node.id);
        let mut leaves: HashMap<u64, Arc<Vdev>> = old.leaf_arcs().into_iter().map(|l| (l.guid, l)).collect();
        let tunables = core.tunables.read().clone();
        for (guid, dev) in added {
            let n = node.leaves().into_iter().find(|l| l.guid == guid).expect("an added leaf is in the node");
            let size = label::usable_device_size(dev.size_bytes());
            let io = Arc::new(new_leaf(n.path.clone(), dev, &core.txg, &tunables));
            let v = vdevs::leaf_vdev(n, io.clone(), size);
            // Every txg so far: reads of older blocks never go to it, the
            // resilver copies them.
            v.dtl.lock().add_range(1, core.txg.open_txg());
            io.set_park_failed_writes(!core.logs.contains(node.id));
            core.hook_faults(node.id, &io);
            leaves.insert(guid, v);
        }
        let top = vdevs::build(&node, &mut |n| {
            let l = leaves.get(&n.guid).cloned().ok_or_else(|| Error::corrupt(format!("leaf {:016x} ('{}') of the new tree has no device", n.guid, n.path)))?;
            l.set_id(n.id);
            Ok(l)
        })?;
        // Whether a leaf's failed write is tolerated follows from the tree
        // it is in at the time (`PoolCore::hook_faults`).
        let redundant = !node.kind.is_leaf();
        let mut cfg: LabelConfig = self.config.lock().clone();
        cfg.tree.children[node.id as usize] = node.clone();
        edit(&mut cfg);
        if redundant {
            cfg.features_incompat |= FEATURE_VDEV_TREE;
        }
        cfg.config_txg = cfg.config_txg.max(core.txg.synced_txg()) + 1;
        core.vdevs.install(top);
        if let Err(e) = self.write_configs(&cfg) {
            core.vdevs.install(old);
            return Err(e.context(format!("pool '{}': the change of {} is undone", core.name, vdevs::display_name(&node))));
        }
        core.events.post(Post::new(class::CONFIG_SYNC));
        Ok(())
    }
}

/// The config node of top-level vdev `id`.
pub(super) fn top_node(cfg: &LabelConfig, id: u32) -> Result<&VdevNode> {
    cfg.tree.children.get(id as usize).ok_or_else(|| Error::corrupt(format!("pool '{}': no top-level vdev {} in the config", cfg.pool_name, id)))
}

/// The config node of a new leaf under top-level vdev `top` at position
/// `id`; refused when the device cannot hold what `top` needs of a leaf.
fn new_node(top: &VdevNode, name: &str, dev: &dyn BlockDevice, id: u32) -> Result<VdevNode> {
    let n = vdevs::new_leaf_node(id, new_guid(name), top.ashift, name, dev)?;
    let need = vdevs::required_span(top);
    if n.asize < need {
        return Err(Error::invalid(format!(
            "'{}' is too small: {} bytes, {} needs devices of at least {} bytes",
            name,
            dev.size_bytes(),
            vdevs::display_name(top),
            label::LABELS_FRONT + need + label::LABELS_BACK
        )));
    }
    Ok(n)
}

/// The interior node whose child leaf `guid` is (None when it is `node`
/// itself, a plain top-level vdev).
pub(super) fn parent_of(node: &VdevNode, guid: u64) -> Option<&VdevNode> {
    if node.children.iter().any(|c| c.guid == guid) {
        return Some(node);
    }
    node.children.iter().find_map(|c| parent_of(c, guid))
}

/// The replacing vdevs under `node`.
fn replacings(node: &VdevNode) -> Vec<&VdevNode> {
    let mut out: Vec<&VdevNode> = node.children.iter().flat_map(replacings).collect();
    if node.kind == VdevKind::Replacing {
        out.push(node);
    }
    out
}

/// `node` without leaf `guid`; an interior vdev left with one child is
/// that child (in its place, with its position).
pub(super) fn without_leaf(node: &VdevNode, guid: u64) -> VdevNode {
    let mut n = node.clone();
    n.children = node.children.iter().filter(|c| c.guid != guid).map(|c| without_leaf(c, guid)).collect();
    for (i, c) in n.children.iter_mut().enumerate() {
        c.id = i as u32;
    }
    if n.kind != VdevKind::Raidz && !n.kind.is_leaf() && n.children.len() == 1 {
        let mut only = n.children.pop().expect("one child");
        only.id = n.id;
        return only;
    }
    n
}

/// `node` with leaf `guid` replaced by `with`.
pub(super) fn with_leaf_replaced(node: &VdevNode, guid: u64, with: &VdevNode) -> VdevNode {
    if node.guid == guid {
        return with.clone();
    }
    let mut n = node.clone();
    n.children = node.children.iter().map(|c| with_leaf_replaced(c, guid, with)).collect();
    n
}

/// Whether leaf `guid` under `top` holds every block: up, nothing missed.
pub(super) fn leaf_whole(top: &Arc<Vdev>, guid: u64) -> bool {
    top.leaf_arcs().iter().any(|l| l.guid == guid && l.up() && l.dtl.lock().is_empty())
}

/// A leaf that left the tree, a sync ago (nothing writes to it any more):
/// its labels erased, its lock released, and a vdev_remove event saying
/// `line`.
pub(super) fn forget_leaf(sh: &Shared, leaf: &Vdev, line: String) {
    erase_labels(&sh.core, leaf);
    if let Some(io) = leaf.leaf() {
        sh.release_lock(&io.device());
    }
    sh.core.events.post(Post::new(class::VDEV_REMOVE).vdev(&leaf.path, leaf.guid).line(line));
}

/// Erases the labels of a leaf that left the pool, when its device still
/// works and carries this pool's label for this leaf.
fn erase_labels(core: &PoolCore, leaf: &Vdev) {
    let Some(io) = leaf.leaf() else { return };
    let dev = io.device();
    if dev.health() != Health::Online {
        return;
    }
    match super::label::read_labels(dev.as_ref()).config {
        Some(c) if c.pool_guid == core.guid && c.device_guid == leaf.guid => {}
        _ => return,
    }
    if let Err(e) = super::label::clear_labels(dev.as_ref()) {
        eprintln!("tarn: pool '{}': '{}' left the pool but its labels could not be erased: {}", core.name, leaf.path, e);
    }
}
