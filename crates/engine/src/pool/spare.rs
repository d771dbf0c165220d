//! Hot spares (zpool's `spare` vdevs): devices that stand by, and stand in
//! for a failed device of a mirror or RAID-Z vdev until the administrator
//! replaces or detaches one of the two.
//!
//! ## States
//! A spare is listed in the config (`LabelConfig::spares`, every label of
//! the pool) and is, as `pool status` says:
//! - **AVAIL**: not in the tree; its device open and locked by the pool
//!   ([`SpareSet`]), its own label of state SPARE naming the pool, so no
//!   other pool takes it without `-f` (`pool::vet`);
//! - **INUSE**: a leaf of the tree, under a *spare* vdev (`spare-N`,
//!   `vdev::Kind::Spare`) beside the device it stands in for — a mirror of
//!   the two, as a replacing vdev is (writes to both, reads from whichever
//!   holds the block, and under a RAID-Z vdev each column read from the one
//!   that did not miss it), resilvered as any new leaf is (its DTL starts
//!   with every txg). Unlike a replacing vdev it does not complete on its
//!   own when the resilver ends: it stays until the administrator chooses;
//! - **UNAVAIL**: listed, but its device was not found at import or failed.
//!
//! ```text
//!            create … spare S / add POOL spare S
//!   (none) ───────────────────────────────────▶ AVAIL ◀──────────────┐
//!      ▲                                          │                   │ detach S, or OLD replaced
//!      └──────────── remove POOL S ───────────────┤                   │ (its replacement resilvered)
//!                                                 │ OLD faults (auto),│
//!                                                 ▼ or replace OLD S  │
//!                            spare-N ( OLD , S ) INUSE ───────────────┘
//!                                                 │ detach OLD
//!                                                 ▼
//!                            S takes OLD's place for good (leaves the list)
//! ```
//! `replace OLD NEW` of a device a spare stands in for puts a replacing
//! vdev in OLD's place under the spare vdev; when NEW is resilvered OLD
//! leaves and the spare is free again (`complete_replacements`), as
//! zpoolconcepts(7) describes.
//!
//! ## Automatic activation
//! OpenZFS leaves this to zed's retire agent; tarn's engine does it itself.
//! A leaf of a redundant top-level vdev that faults (a failed write or
//! flush, a device that vanished or shrank: `PoolCore::leaf_faulted`) or
//! is UNAVAIL at import (its placeholder faults as the pool opens) is
//! *wanted* ([`SpareWatch::want`]); the pool's spare thread (`tarn-spare-`
//! POOL) wakes, and for each wanted leaf still down — not offline, not
//! already under a spare or replacing vdev — takes the first AVAIL spare
//! large enough for its top-level vdev, makes the spare vdev
//! (`Shared::stand_in`), posts a `vdev_spare` event and starts a resilver.
//! A fault is acted on once: a spare the administrator detaches stays
//! AVAIL, and a fault with no spare free is not remembered for a spare
//! added later (`replace OLD S` does it by hand). On an idle pool a device
//! that vanished is only noticed at the next I/O; so, while the pool has an
//! AVAIL spare, the thread also asks the leaves of its redundant vdevs
//! every [`SPARE_PROBE_INTERVAL`] whether their devices are whole
//! (`Leaf::check`, an fstat), as udev tells zed.
//!
//! ## Invariants
//! 1. A listed spare is in the tree at most once, and then under a spare
//!    vdev, as its last child (`check_spares`, run before every label write).
//! 2. A spare in the [`SpareSet`] is not in the tree, and one in the tree
//!    is not in the set: the device is used by one role at a time.
//! 3. Every spare vdev has two children, the second a listed spare.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tarn_ondisk::label::{self, LabelConfig, PoolState, VdevKind, VdevNode, MAX_SPARES};
use tarn_ondisk::uberblock::FEATURE_SPARES;

use super::core::names_device;
use super::events::{class, Post};
use super::pool::{new_guid, Shared};
use super::vdev_change::{leaf_whole, parent_of, top_node, with_leaf_replaced, without_leaf};
use super::vdevs;
use super::vet::{self, Role, Vetted};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::device::{BlockDevice, Health};
use crate::vdev::{State, Vdev};
use crate::Pool;

/// How often the spare thread asks the leaves of redundant vdevs whether
/// their devices are whole, while the pool has an AVAIL spare.
pub const SPARE_PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Wanted leaves remembered at most (a bound; a pool has far fewer leaves).
const WANTED_MAX: usize = 4096;

/// A spare as `pool status` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SpareStatus {
    pub path: String,
    #[serde(with = "crate::guid_json")]
    pub guid: u64,
    /// AVAIL, INUSE or UNAVAIL.
    pub state: String,
    /// Why it is UNAVAIL.
    #[serde(default)]
    pub fault: Option<String>,
    /// The device an INUSE spare stands in for.
    #[serde(default)]
    pub in_use_for: Option<String>,
    /// Allocatable bytes.
    pub size: u64,
}

/// What wakes the spare thread (see the module docs): leaves that faulted,
/// and a stop.
#[derive(Default)]
pub struct SpareWatch {
    st: Mutex<WatchState>,
    cv: Condvar,
}

#[derive(Default)]
struct WatchState {
    wanted: BTreeSet<u64>,
    stop: bool,
}

/// Why the spare thread woke.
enum Wake {
    Wanted(Vec<u64>),
    Probe,
    Stop,
}

impl SpareWatch {
    /// Leaf `guid` went down: it wants a spare.
    pub fn want(&self, guid: u64) {
        let mut st = self.st.lock();
        if st.wanted.len() < WANTED_MAX {
            st.wanted.insert(guid);
        }
        self.cv.notify_all();
    }

    fn stop(&self) {
        self.st.lock().stop = true;
        self.cv.notify_all();
    }

    /// Waits for wanted leaves, a stop, or `probe` to pass.
    fn wait(&self, probe: Duration) -> Wake {
        let mut st = self.st.lock();
        if st.stop {
            return Wake::Stop;
        }
        if st.wanted.is_empty() && self.cv.wait_for(&mut st, probe).timed_out() && st.wanted.is_empty() && !st.stop {
            return Wake::Probe;
        }
        if st.stop {
            return Wake::Stop;
        }
        Wake::Wanted(std::mem::take(&mut st.wanted).into_iter().collect())
    }
}

/// A listed spare's device while it stands by: open, or why not.
enum Standby {
    Ready(Arc<dyn BlockDevice>),
    Unavail(String),
}

/// The devices of the listed spares that are not in the tree, by guid
/// (invariant 2), and the watch that wakes the spare thread.
#[derive(Default)]
pub struct SpareSet {
    devs: Mutex<HashMap<u64, Standby>>,
    pub watch: SpareWatch,
}

impl SpareSet {
    fn put(&self, guid: u64, s: Standby) {
        self.devs.lock().insert(guid, s);
    }

    /// Takes spare `guid`'s device out of the set to put it in the tree;
    /// why not when it is not available.
    fn take(&self, guid: u64, path: &str) -> Result<Arc<dyn BlockDevice>> {
        let mut d = self.devs.lock();
        match d.remove(&guid) {
            Some(Standby::Ready(dev)) => Ok(dev),
            Some(Standby::Unavail(why)) => {
                let e = Error::invalid(format!("hot spare '{}' is UNAVAIL: {}", path, why));
                d.insert(guid, Standby::Unavail(why));
                Err(e)
            }
            None => Err(Error::invalid(format!("hot spare '{}' is in use", path))),
        }
    }

    pub(super) fn forget(&self, guid: u64) -> Option<Arc<dyn BlockDevice>> {
        match self.devs.lock().remove(&guid)? {
            Standby::Ready(d) => Some(d),
            Standby::Unavail(_) => None,
        }
    }

    /// The spare standing by on `dev` (the same device object), if any.
    pub(crate) fn holding(&self, dev: &Arc<dyn BlockDevice>) -> Option<u64> {
        let ptr = |d: &Arc<dyn BlockDevice>| Arc::as_ptr(d) as *const u8;
        self.devs.lock().iter().find_map(|(g, s)| matches!(s, Standby::Ready(d) if ptr(d) == ptr(dev)).then_some(*g))
    }

    fn ready(&self) -> Vec<(u64, Arc<dyn BlockDevice>)> {
        self.devs.lock().iter().filter_map(|(g, s)| match s {
            Standby::Ready(d) => Some((*g, d.clone())),
            Standby::Unavail(_) => None,
        }).collect()
    }

    fn unavail(&self, guid: u64) -> Option<String> {
        match self.devs.lock().get(&guid) {
            Some(Standby::Unavail(why)) => Some(why.clone()),
            _ => None,
        }
    }

    fn has_ready(&self) -> bool {
        self.devs.lock().values().any(|s| matches!(s, Standby::Ready(_)))
    }
}

/// A spare import found (or not) among the devices it was given.
pub(crate) struct FoundSpare {
    pub guid: u64,
    pub dev: std::result::Result<Arc<dyn BlockDevice>, String>,
}

/// The label an available spare carries: the pool's config with state
/// SPARE and the spare's own guid.
fn spare_label(cfg: &LabelConfig, guid: u64) -> LabelConfig {
    LabelConfig { state: PoolState::Spare, device_guid: guid, top_guid: 0, ..cfg.clone() }
}

/// Checks invariants 1 and 3 on a config (see the module docs).
pub(crate) fn check_spares(cfg: &LabelConfig) -> Result<()> {
    let bad = |why: String| Err(Error::corrupt(format!("pool '{}': {}", cfg.pool_name, why)));
    let leaves: Vec<&VdevNode> = cfg.tree.leaves();
    for s in &cfg.spares {
        let n = leaves.iter().filter(|l| l.guid == s.guid).count();
        if n > 1 {
            return bad(format!("hot spare '{}' is in the tree {} times", s.path, n));
        }
        if n == 1 {
            let under = cfg.tree.children.iter().find_map(|t| parent_of(t, s.guid));
            if !under.is_some_and(|p| p.kind == VdevKind::Spare && p.children.last().is_some_and(|c| c.guid == s.guid)) {
                return bad(format!("hot spare '{}' is in the tree, but not as the last child of a spare vdev", s.path));
            }
        }
    }
    let mut stack: Vec<&VdevNode> = cfg.tree.children.iter().collect();
    while let Some(n) = stack.pop() {
        if n.kind == VdevKind::Spare && (n.children.len() != 2 || !cfg.spares.iter().any(|s| n.children[1].guid == s.guid)) {
            return bad(format!("{} does not hold a device and a listed hot spare", vdevs::display_name(n)));
        }
        stack.extend(n.children.iter());
    }
    Ok(())
}

/// The config with spare `guid` no longer listed (it left the pool, or
/// became a member for good); the feature bit goes with the last one.
fn unlisted(cfg: &LabelConfig, guid: u64) -> Vec<VdevNode> {
    let mut spares: Vec<VdevNode> = cfg.spares.iter().filter(|s| s.guid != guid).cloned().collect();
    for (i, s) in spares.iter_mut().enumerate() {
        s.id = i as u32;
    }
    spares
}

pub(super) fn set_spares(cfg: &mut LabelConfig, spares: Vec<VdevNode>) {
    if spares.is_empty() {
        cfg.features_compat &= !FEATURE_SPARES;
    } else {
        cfg.features_compat |= FEATURE_SPARES;
    }
    cfg.spares = spares;
}

/// The spare of `cfg` named `which` (path, another name of its device, or
/// guid).
fn spare_named<'a>(cfg: &'a LabelConfig, which: &str) -> Option<&'a VdevNode> {
    cfg.spares.iter().find(|s| names_device(which, &s.path, s.guid))
}

/// Whether a device of `asize` allocatable bytes can stand in for a leaf
/// of top-level vdev `top`.
fn fits(top: &VdevNode, asize: u64) -> bool {
    !top.is_hole() && asize >= vdevs::required_span(top)
}

/// What a removal takes out (`pool remove`): `remove` is the verb for every
/// kind of device that can leave a pool; each kind has its own way out.
enum Removal {
    Cache(String),
    Spare(u64),
}

impl Pool {
    /// `pool add POOL spare PATH...`: vets every device as `pool create`
    /// does (`force` as -f), then lists them all as hot spares, or none.
    pub fn add_spares(&self, paths: &[PathBuf], force: bool) -> Result<()> {
        self.core().check_writable()?;
        let roles: Vec<(PathBuf, Role)> = paths.iter().map(|p| (p.clone(), Role::Spare)).collect();
        let vetted = vet::open_devices(&roles, None, force, None)?;
        self.attach_spares(vetted)
    }

    /// Lists vetted devices as hot spares, keeping their locks with the
    /// pool's.
    pub(crate) fn attach_spares(&self, vetted: Vec<Vetted>) -> Result<()> {
        if vetted.is_empty() {
            return Ok(());
        }
        let owner = format!("a hot spare of active pool '{}'", self.name());
        let mut devs = Vec::new();
        for v in vetted {
            assert_eq!(v.role, Role::Spare);
            v.dev.set_lock_owner(owner.clone());
            self.shared().keep_lock(v.dev.clone());
            devs.push((v.path, v.dev as Arc<dyn BlockDevice>));
        }
        self.shared().add_standby(devs)
    }

    /// As `add_spares`, on opened devices (in-memory ones in tests).
    pub fn add_spares_on(&self, devs: Vec<(String, Arc<dyn BlockDevice>)>, force: bool) -> Result<()> {
        self.core().check_writable()?;
        for (name, dev) in &devs {
            vet::check_contents(name, dev.as_ref(), Role::Spare, force, None)?;
        }
        self.shared().add_standby(devs)
    }

    /// The pool's hot spares (`pool status`'s "spares").
    pub fn spares(&self) -> Vec<SpareStatus> {
        let sh = self.shared();
        let cfg = sh.config.lock().clone();
        cfg.spares
            .iter()
            .map(|s| {
                let standing_for = cfg.tree.children.iter().find_map(|t| parent_of(t, s.guid)).filter(|p| p.kind == VdevKind::Spare);
                let (state, fault, in_use_for) = match (standing_for, sh.core.spares.unavail(s.guid)) {
                    (Some(p), _) => ("INUSE", None, p.children.first().map(display)),
                    (None, Some(why)) => ("UNAVAIL", Some(why), None),
                    (None, None) => ("AVAIL", None, None),
                };
                SpareStatus { path: s.path.clone(), guid: s.guid, state: state.into(), fault, in_use_for, size: s.asize }
            })
            .collect()
    }

    /// `pool replace OLD SPARE` with an available hot spare of the pool:
    /// the spare stands in for OLD (see the module docs).
    pub(super) fn replace_with_spare(&self, old: &str, spare: u64) -> Result<()> {
        let (_, leaf) = self.leaf_for(old, "replace")?;
        let sh = self.shared();
        sh.stand_in(leaf.guid, spare, "by the administrator")?;
        sh.after_stand_in()
    }

    /// The spare `new` names, when it names one that is not in use; an
    /// error when it names one in use.
    pub(super) fn spare_for_replace(&self, old: &str, new: &str) -> Result<Option<u64>> {
        let cfg = self.shared().config.lock().clone();
        let Some(s) = spare_named(&cfg, new) else { return Ok(None) };
        if cfg.tree.leaves().iter().any(|l| l.guid == s.guid) {
            return Err(Error::invalid(format!("cannot replace '{}' with '{}': hot spare '{}' is already in use", old, new, s.path)));
        }
        Ok(Some(s.guid))
    }

    /// As `spare_for_replace`, by device: the spare standing by on `dev`.
    pub(super) fn spare_on(&self, dev: &Arc<dyn BlockDevice>) -> Option<u64> {
        self.core().spares.holding(dev)
    }

    /// `pool remove POOL DEVICE...`: removes cache devices and available
    /// hot spares — all of them or, if one cannot be removed (an in-use
    /// spare, a data device, a device the pool does not have, one named
    /// twice), none, with an error naming it.
    pub fn remove_devices(&self, which: &[String]) -> Result<()> {
        self.core().check_writable()?;
        // Log devices go one at a time (`pool::log_vdev`), after the rest
        // is checked.
        let (logs, which): (Vec<String>, Vec<String>) = which.iter().cloned().partition(|w| self.names_log(w));
        let mut chosen: Vec<(String, Removal)> = Vec::new();
        for w in &which {
            let r = self.removal(w)?;
            let same = |a: &Removal, b: &Removal| match (a, b) {
                (Removal::Spare(x), Removal::Spare(y)) => x == y,
                (Removal::Cache(x), Removal::Cache(y)) => self.cache_devices().iter().any(|c| names_device(x, &c.path, c.guid) && names_device(y, &c.path, c.guid)),
                _ => false,
            };
            if let Some((first, _)) = chosen.iter().find(|(_, c)| same(c, &r)) {
                return Err(Error::invalid(format!("'{}' is given twice (as '{}' and '{}'): each device can be removed once", w, first, w)));
            }
            chosen.push((w.clone(), r));
        }
        let caches: Vec<String> = chosen.iter().filter_map(|(_, r)| if let Removal::Cache(n) = r { Some(n.clone()) } else { None }).collect();
        let spares: Vec<u64> = chosen.iter().filter_map(|(_, r)| if let Removal::Spare(g) = r { Some(*g) } else { None }).collect();
        if !spares.is_empty() {
            self.shared().remove_spares(&spares)?;
        }
        if !caches.is_empty() {
            self.remove_caches(&caches)?;
        }
        logs.iter().try_for_each(|l| self.remove_log(l))
    }

    /// What removing `which` means, or why it cannot be removed.
    fn removal(&self, which: &str) -> Result<Removal> {
        let core = self.core();
        if core.l2.devices().iter().any(|d| names_device(which, &d.path, d.guid)) {
            return Ok(Removal::Cache(which.to_string()));
        }
        let cfg = self.shared().config.lock().clone();
        if let Some(s) = spare_named(&cfg, which) {
            let standing_for = cfg.tree.children.iter().find_map(|t| parent_of(t, s.guid)).and_then(|p| p.children.first().map(display));
            return match standing_for {
                Some(o) => Err(Error::new(
                    ErrorKind::Busy,
                    format!("cannot remove '{}': hot spare '{}' is in use, standing in for '{}' (detach it first: 'tarn pool detach {} {}')", which, s.path, o, core.name, s.path),
                )),
                None => Ok(Removal::Spare(s.guid)),
            };
        }
        let why = match core.leaf_named(which) {
            Some((top, _)) => format!("it is a data device (of {}), and only cache devices, hot spares and log devices can be removed", top.path),
            None => "it is not a device of the pool".to_string(),
        };
        Err(Error::not_found(format!("'{}' is not a cache device of pool '{}', nor one of its hot spares or log devices: {}", which, core.name, why)))
    }

    /// `pool detach` of a child of a spare vdev (see the module docs): the
    /// spare leaves and is AVAIL again, the device it stood in for staying
    /// in its place; or the original leaves and the spare takes its place
    /// for good, off the list. Refused when the top-level vdev could not
    /// serve every block without the device ("no valid replicas").
    pub(super) fn detach_from_spare(&self, dev: &str) -> Result<()> {
        let sh = self.shared();
        let (gone, kept) = {
            let _g = sh.tree_lock.lock();
            let (top, leaf) = self.leaf_for(dev, "detach")?;
            let cfg = sh.config.lock().clone();
            let node = top_node(&cfg, top.id())?;
            let Some(parent) = parent_of(node, leaf.guid).filter(|p| p.kind == VdevKind::Spare) else {
                return Err(Error::invalid(format!("cannot detach '{}': it no longer has a hot spare beside it", dev)));
            };
            let spare = parent.children.last().expect("a spare vdev has two children (invariant 3)").clone();
            let original = parent.children.first().map(display).unwrap_or_default();
            let edited = without_leaf(node, leaf.guid);
            let whole = |g: u64| leaf_whole(&top, g);
            if leaf.guid == spare.guid {
                if !vdevs::serves_all(&edited, &whole) {
                    return Err(Error::invalid(format!("cannot detach '{}': no valid replicas ({} could not serve every block without it)", dev, top.path)));
                }
                sh.change_top(edited, vec![])?;
                (leaf, None)
            } else {
                if !whole(spare.guid) {
                    return Err(Error::invalid(format!(
                        "cannot detach '{}': no valid replicas (hot spare '{}' does not hold every block yet: wait for its resilver, or detach the spare)",
                        dev, spare.path
                    )));
                }
                sh.change_tree(edited, vec![], &|c: &mut LabelConfig| {
                    let rest = unlisted(c, spare.guid);
                    set_spares(c, rest)
                })?;
                (leaf, Some((spare, original)))
            }
        };
        match kept {
            None => {
                self.sync()?;
                sh.spare_returned(&gone);
            }
            Some((spare, original)) => {
                sh.core.events.post(
                    Post::new(class::VDEV_SPARE).vdev(&spare.path, spare.guid).line(format!("hot spare '{}' takes the place of '{}' for good", spare.path, original)),
                );
                self.leaf_left(&gone, "detached")?;
            }
        }
        self.update_pool_dir(|_| Ok(()))
    }

    /// Stops the spare thread (before the pool closes).
    pub(super) fn stop_spare_thread(&self) {
        self.core().spares.watch.stop();
        if let Some(t) = self.spare_thread.lock().take() {
            let _ = t.join();
        }
    }
}

/// How `pool status` names a config node: a leaf by its path, an interior
/// vdev by its name.
fn display(n: &VdevNode) -> String {
    vdevs::display_name(n)
}

impl Shared {
    /// Lists opened devices as hot spares (see `Pool::add_spares`): each
    /// checked to be no device of the pool already and large enough to
    /// stand in for some device; then their labels cleared, the config
    /// written with them and their spare labels. All or none.
    pub(super) fn add_standby(&self, devs: Vec<(String, Arc<dyn BlockDevice>)>) -> Result<()> {
        let core = &self.core;
        core.check_writable()?;
        if devs.is_empty() {
            return Err(Error::invalid(format!("cannot add to pool '{}': no hot spares given", core.name)));
        }
        let _g = self.tree_lock.lock();
        let cfg = self.config.lock().clone();
        if cfg.spares.len() + devs.len() > MAX_SPARES {
            return Err(Error::invalid(format!("cannot add {} hot spares to pool '{}': it has {}, and at most {} can be listed", devs.len(), core.name, cfg.spares.len(), MAX_SPARES)));
        }
        let ptr = |d: &Arc<dyn BlockDevice>| Arc::as_ptr(d) as *const u8;
        let mut nodes = Vec::new();
        for (i, (name, dev)) in devs.iter().enumerate() {
            if let Some((first, _)) = devs[..i].iter().find(|(_, d)| ptr(d) == ptr(dev)) {
                return Err(Error::invalid(format!("'{}' and '{}' are the same device, given twice: each device can be used once", name, first)));
            }
            super::vdev_add::refuse_own_device(core, name, dev)?;
            let node = vdevs::new_leaf_node((cfg.spares.len() + i) as u32, new_guid(name), cfg.tree.ashift, name, dev.as_ref())?;
            if !cfg.tree.children.iter().any(|t| fits(t, node.asize)) {
                let need = cfg.tree.children.iter().filter(|t| !t.is_hole()).map(vdevs::required_span).min().unwrap_or(0);
                return Err(Error::invalid(format!(
                    "'{}' is too small to stand in for any device of pool '{}': {} bytes, the smallest device it could replace needs {}",
                    name,
                    core.name,
                    dev.size_bytes(),
                    label::LABELS_FRONT + need + label::LABELS_BACK
                )));
            }
            nodes.push(node);
        }
        for (name, dev) in &devs {
            super::label::clear_labels(dev.as_ref()).map_err(|e| Error::io(format!("clearing labels of '{}'", name), e))?;
        }
        let mut grown = cfg.clone();
        let mut spares = cfg.spares.clone();
        spares.extend(nodes.iter().cloned());
        set_spares(&mut grown, spares);
        grown.config_txg = cfg.config_txg.max(core.txg.synced_txg()) + 1;
        for (n, (_, dev)) in nodes.iter().zip(&devs) {
            core.spares.put(n.guid, Standby::Ready(dev.clone()));
        }
        if let Err(e) = self.write_configs(&grown) {
            nodes.iter().for_each(|n| drop(core.spares.forget(n.guid)));
            let mut back = cfg.clone();
            back.config_txg = grown.config_txg + 1;
            let _ = self.write_configs(&back);
            return Err(e.context(format!("cannot add hot spares to pool '{}'", core.name)));
        }
        for n in &nodes {
            core.events.post(Post::new(class::VDEV_ADD).vdev(&n.path, n.guid).text("vdev_type", "spare").line(format!("'{}' added to pool '{}' as a hot spare", n.path, core.name)));
        }
        core.events.post(Post::new(class::CONFIG_SYNC));
        Ok(())
    }

    /// Takes AVAIL spares `guids` off the list: the config written without
    /// them, then their labels erased and their locks released.
    fn remove_spares(&self, guids: &[u64]) -> Result<()> {
        let core = &self.core;
        let _g = self.tree_lock.lock();
        let cfg = self.config.lock().clone();
        let mut edited = cfg.clone();
        for g in guids {
            let spares = unlisted(&edited, *g);
            set_spares(&mut edited, spares);
        }
        edited.config_txg = cfg.config_txg.max(core.txg.synced_txg()) + 1;
        let devs: Vec<(u64, Option<Arc<dyn BlockDevice>>)> = guids.iter().map(|g| (*g, core.spares.forget(*g))).collect();
        if let Err(e) = self.write_configs(&edited) {
            for (g, d) in devs {
                core.spares.put(g, d.map_or_else(|| Standby::Unavail("its label could not be rewritten".into()), Standby::Ready));
            }
            return Err(e.context(format!("cannot remove hot spares from pool '{}'", core.name)));
        }
        for (g, d) in devs {
            let path = cfg.spares.iter().find(|s| s.guid == g).map_or_else(String::new, |s| s.path.clone());
            if let Some(d) = d {
                if let Err(e) = super::label::clear_labels(d.as_ref()) {
                    eprintln!("tarn: pool '{}': hot spare '{}' left the pool but its labels could not be erased: {}", core.name, path, e);
                }
                self.release_lock(&d);
            }
            core.events.post(Post::new(class::VDEV_REMOVE).vdev(&path, g).text("vdev_type", "spare").line(format!("hot spare '{}' removed from pool '{}'", path, core.name)));
        }
        core.events.post(Post::new(class::CONFIG_SYNC));
        Ok(())
    }

    /// At destroy: the available hot spares' labels erased and their locks
    /// released (they stood by for a pool that is gone).
    pub(super) fn release_spares(&self) {
        let cfg = self.config.lock().clone();
        for s in &cfg.spares {
            let Some(dev) = self.core.spares.forget(s.guid) else { continue };
            if let Err(e) = super::label::clear_labels(dev.as_ref()) {
                eprintln!("tarn: pool '{}': the labels of hot spare '{}' could not be erased: {}", self.core.name, s.path, e);
            }
            self.release_lock(&dev);
        }
    }

    /// Writes the labels of the available spares with `cfg` (state SPARE);
    /// a spare whose label cannot be written is UNAVAIL from then on.
    pub(super) fn write_spare_labels(&self, cfg: &LabelConfig) {
        for (guid, dev) in self.core.spares.ready() {
            if let Err(e) = super::label::write_config_all(dev.as_ref(), &spare_label(cfg, guid)) {
                let path = cfg.spares.iter().find(|s| s.guid == guid).map_or("?", |s| s.path.as_str());
                eprintln!("tarn: pool '{}': hot spare '{}' is UNAVAIL: writing its label: {}", self.core.name, path, e);
                self.core.spares.put(guid, Standby::Unavail(format!("writing its label: {}", e)));
            }
        }
    }

    /// At import: the spares the config lists that are not in the tree
    /// stand by on the devices found (`found`), or are UNAVAIL.
    pub(super) fn load_spares(&self, cfg: &LabelConfig, found: &[FoundSpare]) {
        let in_tree: Vec<u64> = cfg.tree.leaves().iter().map(|l| l.guid).collect();
        let owner = format!("a hot spare of active pool '{}'", self.core.name);
        for s in cfg.spares.iter().filter(|s| !in_tree.contains(&s.guid)) {
            let standby = match found.iter().find(|f| f.guid == s.guid).map(|f| &f.dev) {
                Some(Ok(dev)) if dev.size_bytes() < label::LABELS_FRONT + s.asize + label::LABELS_BACK => {
                    Standby::Unavail(format!("the device is {} bytes, smaller than the {} it had", dev.size_bytes(), label::LABELS_FRONT + s.asize + label::LABELS_BACK))
                }
                Some(Ok(dev)) => {
                    self.set_lock_owner(dev, &owner);
                    Standby::Ready(dev.clone())
                }
                Some(Err(why)) => Standby::Unavail(why.clone()),
                None => Standby::Unavail("not found at import".into()),
            };
            if let Standby::Unavail(why) = &standby {
                self.open_warnings.lock().push(format!("pool '{}': hot spare '{}' is UNAVAIL ({})", self.core.name, s.path, why));
            }
            self.core.spares.put(s.guid, standby);
        }
    }

    /// Makes AVAIL spare `spare` stand in for leaf `leaf` (see the module
    /// docs): a spare vdev of the two in the leaf's place, the spare a new
    /// leaf of the tree (resilvered from its DTL of every txg). `why` says
    /// who asked, for the event.
    pub(super) fn stand_in(&self, leaf: u64, spare: u64, why: &str) -> Result<()> {
        let core = &self.core;
        core.check_writable()?;
        let _g = self.tree_lock.lock();
        let (top, old) = core.leaves().into_iter().find(|(_, l)| l.guid == leaf).ok_or_else(|| Error::not_found(format!("pool '{}': no device {:016x}", core.name, leaf)))?;
        let cfg = self.config.lock().clone();
        let s = cfg.spares.iter().find(|s| s.guid == spare).cloned().ok_or_else(|| Error::not_found(format!("pool '{}': no hot spare {:016x}", core.name, spare)))?;
        let refuse = |what: String| Err(Error::invalid(format!("cannot replace '{}' with hot spare '{}': {}", old.path, s.path, what)));
        if cfg.spares.iter().any(|x| x.guid == leaf) {
            return refuse(format!("'{}' is itself a hot spare in use (detach it, or replace the device it stands in for)", old.path));
        }
        let node = top_node(&cfg, top.id())?;
        match parent_of(node, leaf).map(|p| p.kind) {
            Some(VdevKind::Spare) => return refuse(format!("a hot spare already stands in for '{}'", old.path)),
            Some(VdevKind::Replacing) => return refuse(format!("'{}' is being replaced", old.path)),
            _ => {}
        }
        if !fits(node, s.asize) {
            return refuse(format!("it is too small: {} allocatable bytes, {} needs {}", s.asize, vdevs::display_name(node), vdevs::required_span(node)));
        }
        let dev = core.spares.take(spare, &s.path)?;
        let slot = node.leaves().into_iter().find(|l| l.guid == leaf).expect("the leaf is under its top-level vdev").clone();
        let mut was = slot.clone();
        was.id = 0;
        let stand = VdevNode { kind: VdevKind::File, id: 1, guid: s.guid, ashift: slot.ashift, nparity: 0, asize: s.asize, metaslab_shift: s.metaslab_shift, path: s.path.clone(), children: vec![] };
        let sp = vdevs::interior(VdevKind::Spare, slot.id, new_guid(&format!("spare-{}", slot.id)), slot.ashift, 0, slot.asize, vec![was, stand]);
        if let Err(e) = self.change_top(with_leaf_replaced(node, leaf, &sp), vec![(spare, dev.clone())]) {
            core.spares.put(spare, Standby::Ready(dev));
            return Err(e);
        }
        self.set_lock_owner(&dev, &format!("part of active pool '{}'", core.name));
        core.events.post(
            Post::new(class::VDEV_SPARE)
                .vdev(&s.path, s.guid)
                .text("spare_for", &old.path)
                .line(format!("hot spare '{}' stands in for '{}' ({}, {})", s.path, old.path, old.state().name(), why)),
        );
        eprintln!("tarn: pool '{}': hot spare '{}' stands in for '{}' ({})", core.name, s.path, old.path, why);
        Ok(())
    }

    /// After a spare stood in: the leaves' state (the spare's DTL) written,
    /// and the resilver started.
    pub(super) fn after_stand_in(self: &Arc<Self>) -> Result<()> {
        self.sync_dir()?;
        self.resilver_start()
    }

    /// A spare that left the tree (detached, or the device it stood in for
    /// replaced) stands by again, once a sync has passed (nothing writes
    /// to it any more): its spare label written, its lock the pool's as a
    /// spare's.
    pub(super) fn spare_returned(&self, leaf: &Vdev) {
        let Some(io) = leaf.leaf() else { return };
        let dev = io.device();
        let cfg = self.config.lock().clone();
        if !cfg.spares.iter().any(|s| s.guid == leaf.guid) {
            return;
        }
        let standby = match dev.health() {
            Health::Online => match super::label::write_config_all(dev.as_ref(), &spare_label(&cfg, leaf.guid)) {
                Ok(()) => Standby::Ready(dev.clone()),
                Err(e) => Standby::Unavail(format!("writing its label: {}", e)),
            },
            h => Standby::Unavail(h.reason().unwrap_or("faulted").to_string()),
        };
        self.set_lock_owner(&dev, &format!("a hot spare of active pool '{}'", self.core.name));
        self.core.spares.put(leaf.guid, standby);
        self.core.events.post(Post::new(class::VDEV_SPARE).vdev(&leaf.path, leaf.guid).line(format!("hot spare '{}' is available again", leaf.path)));
    }

    /// The spare thread's pass over wanted leaves: each that is still down
    /// (not offline) in a redundant top-level vdev and has no spare or
    /// replacement gets the first AVAIL spare that fits.
    fn activate_wanted(self: &Arc<Self>, wanted: &[u64]) {
        let mut stood = false;
        for &guid in wanted {
            match self.spare_for(guid) {
                Ok(Some(spare)) => match self.stand_in(guid, spare, "activated automatically") {
                    Ok(()) => stood = true,
                    Err(e) => eprintln!("tarn: pool '{}': no hot spare activated: {}", self.core.name, e),
                },
                Ok(None) => {}
                Err(e) => eprintln!("tarn: pool '{}': no hot spare activated: {}", self.core.name, e),
            }
        }
        if stood {
            if let Err(e) = self.after_stand_in() {
                eprintln!("tarn: pool '{}': a hot spare stands in, but its resilver did not start: {}", self.core.name, e);
            }
        }
    }

    /// The spare wanted leaf `guid` should get, if it wants one now.
    fn spare_for(&self, guid: u64) -> Result<Option<u64>> {
        let core = &self.core;
        if core.readonly || core.txg.failure().is_some() {
            return Ok(None);
        }
        let Some((top, leaf)) = core.leaves().into_iter().find(|(_, l)| l.guid == guid) else { return Ok(None) };
        if top.leaf().is_some() || !matches!(leaf.state(), State::Faulted | State::Removed | State::Unavail) {
            return Ok(None);
        }
        let cfg = self.config.lock().clone();
        let node = top_node(&cfg, top.id())?;
        if cfg.spares.iter().any(|s| s.guid == guid) || parent_of(node, guid).is_some_and(|p| matches!(p.kind, VdevKind::Spare | VdevKind::Replacing)) {
            return Ok(None);
        }
        let ready: Vec<u64> = core.spares.ready().into_iter().map(|(g, _)| g).collect();
        let pick = cfg.spares.iter().find(|s| ready.contains(&s.guid) && fits(node, s.asize));
        if pick.is_none() && !cfg.spares.is_empty() {
            eprintln!("tarn: pool '{}': '{}' is {}, and no hot spare is available for it", core.name, leaf.path, leaf.state().name());
        }
        Ok(pick.map(|s| s.guid))
    }

    /// Asks the leaves of redundant top-level vdevs whether their devices
    /// are whole (a fault wakes the thread through the fault hook).
    fn probe_leaves(&self) {
        if !self.core.spares.has_ready() {
            return;
        }
        for (top, l) in self.core.leaves() {
            if let (None, Some(io)) = (top.leaf(), l.leaf()) {
                if !l.offline.load(Ordering::Relaxed) {
                    let _ = io.check();
                }
            }
        }
    }
}

/// Starts the pool's spare thread (see the module docs); it ends when
/// `Pool::stop_spare_thread` stops its watch.
pub(super) fn start_thread(sh: &Arc<Shared>) -> Option<std::thread::JoinHandle<()>> {
    let sh = sh.clone();
    let name = format!("tarn-spare-{}", sh.core.name);
    let spawned = std::thread::Builder::new().name(name).spawn(move || loop {
        match sh.core.spares.watch.wait(SPARE_PROBE_INTERVAL) {
            Wake::Stop => return,
            Wake::Probe => sh.probe_leaves(),
            Wake::Wanted(w) => sh.activate_wanted(&w),
        }
    });
    match spawned {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("tarn: cannot start the hot spare thread; spares are activated only by hand: {}", e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(id: u32, guid: u64) -> VdevNode {
        VdevNode { kind: VdevKind::File, id, guid, ashift: 12, nparity: 0, asize: 1 << 30, metaslab_shift: 24, path: format!("/d{}", guid), children: vec![] }
    }

    fn cfg(children: Vec<VdevNode>, spares: Vec<VdevNode>) -> LabelConfig {
        let root = vdevs::interior(VdevKind::Root, 0, 1, 12, 0, 0, children);
        LabelConfig {
            pool_guid: 1,
            pool_name: "tank".into(),
            state: PoolState::Active,
            config_txg: 1,
            format_version: 1,
            features_incompat: 0,
            features_compat: 0,
            hostname: String::new(),
            device_guid: 0,
            top_guid: 0,
            tree: root,
            spares,
            logs: vec![],
        }
    }

    #[test]
    fn spare_invariants_hold_for_what_stand_in_makes() {
        let sp = vdevs::interior(VdevKind::Spare, 1, 9, 12, 0, 1 << 30, vec![leaf(0, 11), leaf(1, 30)]);
        let m = vdevs::interior(VdevKind::Mirror, 0, 8, 12, 0, 1 << 30, vec![leaf(0, 10), sp]);
        assert!(check_spares(&cfg(vec![m.clone()], vec![leaf(0, 30), leaf(1, 31)])).is_ok());
        // The spare vdev's second child is no listed spare.
        assert!(check_spares(&cfg(vec![m.clone()], vec![leaf(0, 31)])).is_err());
        // A listed spare in the tree outside a spare vdev.
        let plain = vdevs::interior(VdevKind::Mirror, 0, 8, 12, 0, 1 << 30, vec![leaf(0, 10), leaf(1, 30)]);
        assert!(check_spares(&cfg(vec![plain], vec![leaf(0, 30)])).is_err());
        // Unlisting renumbers and clears the feature bit with the last one.
        let mut c = cfg(vec![m], vec![leaf(0, 30), leaf(1, 31)]);
        set_spares(&mut c, unlisted(&cfg(vec![], vec![leaf(0, 30), leaf(1, 31)]), 30));
        assert_eq!(c.spares.iter().map(|s| (s.id, s.guid)).collect::<Vec<_>>(), vec![(0, 31)]);
        assert_ne!(c.features_compat & FEATURE_SPARES, 0);
        set_spares(&mut c, vec![]);
        assert_eq!(c.features_compat & FEATURE_SPARES, 0);
    }

    #[test]
    fn the_watch_hands_over_wanted_leaves_once() {
        let w = SpareWatch::default();
        w.want(5);
        w.want(5);
        w.want(3);
        assert!(matches!(w.wait(Duration::from_millis(1)), Wake::Wanted(v) if v == vec![3, 5]));
        assert!(matches!(w.wait(Duration::from_millis(1)), Wake::Probe));
        w.stop();
        assert!(matches!(w.wait(Duration::from_secs(60)), Wake::Stop));
    }
}
