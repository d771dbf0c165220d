//! Separate intent-log devices (log vdevs; OpenZFS's SLOG): `pool create
//! … log [mirror] DEV...`, `pool add … log …`, `pool remove` of a log vdev,
//! and what a failed or missing one costs.
//!
//! ## Theory of operation
//! A log vdev is a top-level vdev — a device or a mirror, never RAID-Z (as
//! zpool) — in the allocator's *log* class (`alloc/metaslab.rs`, "The log
//! class"): ordinary blocks never go there and its space is not the
//! pool's; intent-log blocks (`zil/chain.rs`, `alloc_log_block`) go there
//! first, to the main pool when no log vdev takes writes or has room. The
//! labels list log vdevs by id after the spares (feature *log vdevs*,
//! incompatible: a tarn that does not know the list would put any block
//! there). A log vdev is written like any vdev — labels, uberblocks,
//! flushes — but holds nothing a txg needs:
//!
//! ```text
//!   log leaf fails ─▶ its fault hook: FAULTED/UNAVAIL, an event, no suspension
//!        │             (`PoolCore::leaf_faulted` → `log_leaf_faulted`)
//!        ├─ the round being written fails: that commit syncs the txg
//!        │  (`Zil::fall_back`), the chain is retired and restarts
//!        └─ later rounds: `log_targets` leaves it out → blocks on the pool
//!   sync: uberblock and flush failures of a log vdev are not the txg's
//! ```
//!
//! ## Import
//! A log vdev that cannot serve (a missing device, both halves of a mirror)
//! refuses the import, naming it: its blocks may hold records fsync
//! acknowledged. `OpenOptions::missing_log` (`pool import --missing-log`,
//! zpool's `-m`) imports anyway: the vdev stays in the tree UNAVAIL, and a
//! chain that reaches it ends there — its records from that block on are
//! discarded, said on stderr (the import's warnings), in a pool event and
//! in `status` (`LogVdevs::discarded`).
//!
//! ## Removal
//! `pool remove POOL LOGDEV` (`Pool::remove_log`): the vdev leaves the log
//! targets, every log with blocks there retires its chain (new commits
//! start one elsewhere), syncs run until the allocator holds nothing there
//! (the blocks' frees are deferred two txgs), then it leaves the
//! allocator, the vdev set and the labels (its own are erased). A log with
//! records not yet replayed there refuses.
//!
//! A DVA's vdev number must stay valid, so a log vdev that is not the last
//! top-level vdev leaves a *hole* in its place (OpenZFS's hole vdev;
//! feature *hole vdevs*): a config node of kind hole, an empty place in the
//! `VdevSet` (no `Vdev` at all, so status, scrub, verify, resilver, iostat,
//! metrics and import's device search never meet one), nothing in the
//! allocator. The last top-level vdev is cut off instead, with the holes
//! that would then end the tree (as OpenZFS compacts its last child):
//!
//! ```text
//!   data0 logA data2 logB    remove logA ─▶ data0 hole data2 logB
//!   data0 hole data2 logB    remove logB ─▶ data0 hole data2
//!   data0 logA hole logC     remove logC ─▶ data0 logA
//! ```
//!
//! `pool add` appends; it never fills a hole, so an id is given again only
//! after the holes and vdev at the end were cut off. The allocator's state
//! is persisted pool-wide (`spacemap`): a space checkpoint from before the
//! removal would describe the old vdev under the id. So the removal asks
//! for a checkpoint in the next sync (`Shared::checkpoint_from`) and syncs
//! holding the tree lock: by the time another `pool add` can give the id
//! again, no uberblock from then on names the old vdev; import refuses a
//! checkpoint whose vdev extents differ from the config's.
//!
//! A power cut during the removal: before the labels are rewritten, the
//! vdev is still the pool's (empty, or holding retired chains that import
//! claims and frees as usual); after, it is gone, its labels erased or
//! not (a device no config names).
//!
//! ## Invariants
//! 1. A top-level vdev is a log vdev in the allocator iff `LogVdevs` lists
//!    it iff the config's `logs` does, outside `add_tops` and `remove_log`
//!    (`check_log_vdevs`, run by `Pool::check_invariants`).
//! 2. Log vdevs hold transient allocations only (the allocator's
//!    invariant 7, checked with the allocator's before every uberblock).
//! 3. A top-level id is a hole in the labels iff it is one in the
//!    `VdevSet`; the allocator has no vdev there; the feature bit *hole
//!    vdevs* is set iff there is one; the last top-level vdev is no hole
//!    (`check_holes`; the labels' own rules in `label::check_holes`).

use std::collections::BTreeSet;

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::label::{LabelConfig, VdevKind, VdevNode};
use tarn_ondisk::uberblock::{FEATURE_HOLE_VDEVS, FEATURE_LOG_VDEVS, FEATURE_VDEV_TREE};

use super::core::{names_device, PoolCore};
use super::events::{class, Post};
use super::vdevs::{self, Layout, NewTop, TopSpec};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::device::Health;
use crate::vdev::Vdev;
use crate::Pool;

/// Syncs `remove_log` runs, at most, waiting for the vdev to empty: the
/// frees of its blocks are deferred two txgs, and a round in flight may
/// have placed one more.
const REMOVE_SYNCS_MAX: usize = 8;

/// The pool's log vdevs, by top-level vdev id, and what import discarded.
#[derive(Default)]
pub struct LogVdevs {
    ids: RwLock<BTreeSet<u32>>,
    /// Being removed: no new log block goes there.
    leaving: RwLock<BTreeSet<u32>>,
    /// Records import discarded with a missing log vdev (`status` shows them).
    discarded: Mutex<Vec<String>>,
}

impl LogVdevs {
    pub fn new(ids: &[u32]) -> LogVdevs {
        LogVdevs { ids: RwLock::new(ids.iter().copied().collect()), ..Default::default() }
    }

    /// Whether top-level vdev `id` is a log vdev.
    pub fn contains(&self, id: u32) -> bool {
        self.ids.read().contains(&id)
    }

    pub fn ids(&self) -> Vec<u32> {
        self.ids.read().iter().copied().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.read().is_empty()
    }

    pub(super) fn add(&self, id: u32) {
        self.ids.write().insert(id);
    }

    pub(super) fn remove(&self, id: u32) {
        self.ids.write().remove(&id);
        self.leaving.write().remove(&id);
    }

    /// What import discarded (a line each).
    pub fn discarded(&self) -> Vec<String> {
        self.discarded.lock().clone()
    }
}

impl PoolCore {
    /// The log vdevs a log block may go to now: those that take writes and
    /// are not being removed.
    pub(crate) fn log_targets(&self) -> Vec<u32> {
        let leaving = self.logs.leaving.read().clone();
        self.logs.ids().into_iter().filter(|id| !leaving.contains(id) && self.vdevs.get(*id as usize).is_some_and(|v| v.writable())).collect()
    }

    /// A leaf of log vdev `top` faulted: the pool goes on (nothing a txg
    /// needs is there); log blocks go elsewhere from now on.
    pub(crate) fn log_leaf_faulted(&self, t: &Vdev, leaf: &str, h: &Health) {
        if let Some(l) = t.leaves().into_iter().find(|l| l.path == leaf) {
            l.dtl.lock().add(self.txg.synced_txg() + 1);
        }
        let rest = if t.writable() { format!("{} is {}", t.path, t.state().name()) } else { "intent-log blocks go to the main pool".to_string() };
        eprintln!("tarn: pool '{}': log {}; {} and the pool goes on", self.name, super::vdevs::fault_message(leaf, h), rest);
    }

    /// Import found a chain of `what` ending at a block on log vdev `vdev`
    /// that cannot be read (`--missing-log`): said loudly.
    pub(crate) fn log_records_discarded(&self, what: &str, vdev: u32, seq: u64) {
        let path = self.vdevs.get(vdev as usize).map_or_else(|| format!("vdev {}", vdev), |v| v.path.clone());
        let line = format!("pool '{}': {} continues on missing log device {} (vdev {}): its records from log block {} on are discarded", self.name, what, path, vdev, seq);
        eprintln!("tarn: warning: {}", line);
        self.events.post(Post::new(class::LOG_DISCARDED).text("vdev_path", &path).dec("vdev", vdev as u64).line(line.clone()));
        self.logs.discarded.lock().push(line);
    }
}

/// Checks log vdevs asked for: a device or a mirror each (zpool refuses
/// RAID-Z logs).
fn check_log_layouts(tops: &[NewTop]) -> Result<()> {
    if let Some(t) = tops.iter().find(|t| matches!(t.layout, Layout::Raidz(_))) {
        let Layout::Raidz(p) = t.layout else { unreachable!("found as raidz") };
        return Err(Error::invalid(format!("raidz{} is not supported for log devices: a log vdev is a device or a mirror", p)));
    }
    Ok(())
}

/// Invariant 1 of the module docs.
pub(crate) fn check_log_vdevs(core: &PoolCore, cfg: &LabelConfig) -> std::result::Result<(), String> {
    let listed = core.logs.ids();
    if listed != cfg.logs {
        return Err(format!("log vdevs {:?} in memory, {:?} in the labels", listed, cfg.logs));
    }
    let a = core.alloc.lock();
    if a.log_vdevs() != listed {
        return Err(format!("log vdevs {:?} in memory, {:?} in the allocator", listed, a.log_vdevs()));
    }
    Ok(())
}

/// Invariant 3 of the module docs.
pub(crate) fn check_holes(core: &PoolCore, cfg: &LabelConfig) -> std::result::Result<(), String> {
    let holes: Vec<u32> = cfg.tree.children.iter().filter(|t| t.is_hole()).map(|t| t.id).collect();
    if core.vdevs.len() != cfg.tree.children.len() {
        return Err(format!("{} top-level vdev places in memory, {} in the labels", core.vdevs.len(), cfg.tree.children.len()));
    }
    if let Some(id) = holes.iter().find(|id| !core.vdevs.is_hole(**id)) {
        return Err(format!("top-level vdev {} is a hole in the labels, not in memory", id));
    }
    if let Some(id) = (0..core.vdevs.len() as u32).find(|id| core.vdevs.is_hole(*id) && !holes.contains(id)) {
        return Err(format!("top-level vdev {} is a hole in memory, not in the labels", id));
    }
    let a = core.alloc.lock();
    if let Some(id) = holes.iter().find(|id| a.vdev(**id).is_some()) {
        return Err(format!("hole vdev {} is in the allocator", id));
    }
    if holes.is_empty() == (cfg.features_incompat & FEATURE_HOLE_VDEVS != 0) {
        return Err(format!("holes {:?} with feature bits {:#x}", holes, cfg.features_incompat));
    }
    Ok(())
}

impl Pool {
    /// `pool add POOL log [mirror] DEV...`: vets every device as `pool
    /// create` does, then adds them all as log vdevs or none.
    pub fn add_log_vdevs(&self, tops: &[TopSpec], force: bool) -> Result<()> {
        let new = self.vet_tops(tops, force)?;
        self.add_log_vdevs_on(new, force)
    }

    /// As `add_log_vdevs`, on opened devices.
    pub fn add_log_vdevs_on(&self, tops: Vec<NewTop>, force: bool) -> Result<()> {
        check_log_layouts(&tops).map_err(|e| e.context(format!("cannot add to pool '{}'", self.name())))?;
        self.add_tops(tops, force, true)
    }

    /// The log vdevs of the pool as `status` shows them.
    pub fn log_vdevs(&self) -> Vec<u32> {
        self.core().logs.ids()
    }

    /// `pool remove POOL LOGDEV`: see the module docs. `which` names the
    /// log vdev (`mirror-2`) or one of its devices.
    pub fn remove_log(&self, which: &str) -> Result<()> {
        let sh = self.shared();
        let core = &sh.core;
        core.check_writable()?;
        let id = self.log_named(which)?;
        let cannot = |why: String| Error::invalid(format!("cannot remove '{}' from pool '{}': {}", which, core.name, why));
        for zil in sh.dsl.logs() {
            if zil.needs_replay() && zil.holds_blocks_on(id) {
                return Err(cannot(format!("the {} holds records on it not yet replayed: mount that file system first", zil.what())));
            }
        }
        core.logs.leaving.write().insert(id);
        let res = self.empty_log_vdev(id);
        if let Err(e) = res {
            core.logs.leaving.write().remove(&id);
            return Err(e.context(format!("cannot remove '{}' from pool '{}'", which, core.name)));
        }
        self.drop_log_vdev(id)
    }

    /// Whether `which` names a log vdev of the pool.
    pub(crate) fn names_log(&self, which: &str) -> bool {
        self.log_named(which).is_ok()
    }

    /// The log vdev `which` names (the vdev's name or one of its leaves).
    fn log_named(&self, which: &str) -> Result<u32> {
        let core = self.core();
        for id in core.logs.ids() {
            let Some(top) = core.vdevs.get(id as usize) else { continue };
            if top.path == which || top.leaves().iter().any(|l| names_device(which, &l.path, l.guid)) {
                return Ok(id);
            }
        }
        let why = match core.leaf_named(which) {
            Some((top, _)) => format!("it is a data device (of {}), and only cache devices, hot spares and log devices can be removed", top.path),
            None => "it is not a device of the pool".to_string(),
        };
        Err(Error::not_found(format!("'{}' is not a log device of pool '{}': {}", which, core.name, why)))
    }

    /// Moves every log off vdev `id` and syncs until nothing is left there.
    fn empty_log_vdev(&self, id: u32) -> Result<()> {
        let sh = self.shared();
        for _ in 0..REMOVE_SYNCS_MAX {
            for zil in sh.dsl.logs() {
                zil.leave_vdev(id);
            }
            self.sync()?;
            if sh.core.alloc.lock().held_bytes(id) == 0 {
                return Ok(());
            }
        }
        let held = sh.core.alloc.lock().held_bytes(id);
        Err(Error::new(ErrorKind::Busy, format!("log vdev {} still holds {} bytes of log blocks after {} syncs; try again", id, held, REMOVE_SYNCS_MAX)))
    }

    /// Takes empty log vdev `id` out of the allocator, the vdev set and the
    /// labels — a hole in its place unless it was the last — and its
    /// leaves' labels are erased; then syncs, writing a space checkpoint,
    /// before another tree change may give its id again.
    fn drop_log_vdev(&self, id: u32) -> Result<()> {
        let sh = self.shared();
        let core = &sh.core;
        let _g = sh.tree_lock.lock();
        let cfg = sh.config.lock().clone();
        let top = core.vdevs.top(id);
        let shrunk = without_log(&cfg, id, core.txg.synced_txg());
        // The allocator first: from now on nothing can be placed there.
        core.alloc.lock().remove_vdev(id).map_err(|e| Error::corrupt(format!("pool '{}': log vdev {}: {}", core.name, id, e)))?;
        core.logs.remove(id);
        if shrunk.tree.children.len() > id as usize {
            core.vdevs.make_hole(id);
        } else {
            core.vdevs.truncate(shrunk.tree.children.len());
        }
        assert_eq!(core.vdevs.len(), shrunk.tree.children.len(), "the vdev set and the config have the same places");
        // No uberblock from the next sync on names the vdev in its space
        // checkpoint or log: its id may be given again after that.
        sh.checkpoint_from(core.txg.open_txg());
        if let Err(e) = sh.write_configs(&shrunk) {
            return Err(e.context(format!("pool '{}': log vdev {} left the pool but the labels could not all be rewritten", core.name, top.path)));
        }
        for leaf in top.leaf_arcs() {
            super::vdev_change::forget_leaf(sh, &leaf, format!("log device {} removed from pool '{}'", leaf.path, core.name));
        }
        core.refresh_space();
        core.events.post(Post::new(class::CONFIG_SYNC));
        // Under the tree lock: a `pool add` that would take the id again
        // waits for the checkpoint.
        self.sync()
    }
}

/// `cfg` without log vdev `id`: a hole in its place, or, when it is the
/// last top-level vdev, cut off with the holes before it (as OpenZFS
/// compacts its last child); the feature bits follow what is left.
fn without_log(cfg: &LabelConfig, id: u32, synced_txg: u64) -> LabelConfig {
    let mut c = cfg.clone();
    let i = id as usize;
    assert!(i < c.tree.children.len() && !c.tree.children[i].is_hole(), "log vdev {} is in the config", id);
    if i + 1 == c.tree.children.len() {
        c.tree.children.truncate(i);
        while c.tree.children.last().is_some_and(|t| t.is_hole()) {
            c.tree.children.pop();
        }
    } else {
        c.tree.children[i] = VdevNode::hole(id, cfg.tree.ashift);
    }
    c.logs.retain(|l| *l != id);
    let mut set = |bit: u64, on: bool| {
        if on {
            c.features_incompat |= bit;
        } else {
            c.features_incompat &= !bit;
        }
    };
    set(FEATURE_LOG_VDEVS, !c.logs.is_empty());
    set(FEATURE_HOLE_VDEVS, c.tree.children.iter().any(|t| t.is_hole()));
    set(FEATURE_VDEV_TREE, c.tree.children.iter().any(|t| !matches!(t.kind, VdevKind::File | VdevKind::Disk | VdevKind::Hole)));
    c.config_txg = cfg.config_txg.max(synced_txg) + 1;
    c
}

/// Log vdevs of a new pool (`pool create … log …`), added once it exists.
pub(crate) fn attach_logs(pool: &Pool, tops: Vec<NewTop>, force: bool) -> Result<()> {
    if tops.is_empty() {
        return Ok(());
    }
    pool.add_log_vdevs_on(tops, force)
}

/// Config check at import (`vdevs::check_present` for log vdevs): a log
/// vdev that cannot serve refuses unless `missing_log`; the message names
/// the devices and the flag.
pub(crate) fn refuse_missing(config: &LabelConfig, top: &tarn_ondisk::label::VdevNode, gone: &str) -> Error {
    Error::not_found(format!(
        "pool '{}': log device {} is missing: the intent-log records on it would be lost; import with --missing-log (zpool's -m) to discard them",
        config.pool_name,
        if gone.is_empty() { vdevs::display_name(top) } else { gone.to_string() }
    ))
}
