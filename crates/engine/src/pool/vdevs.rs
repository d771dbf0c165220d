//! The pool's side of the vdev tree (`vdev`): the config tree a new pool
//! gets from its layout, the top-level vdevs an import builds from the
//! config and the devices it found, and the writes that go to every leaf
//! (labels, uberblocks, flushes).
//!
//! ## Layouts and their checks (as `zpool create`)
//! A top-level vdev is a plain device, a mirror of two or more, or a
//! RAID-Z group of `nparity + 1` or more. Refused with an error naming
//! what is wrong: a mirror or RAID-Z group with too few devices, the same
//! device twice; refused unless forced (zpool's "mismatched replication
//! level"): top-level vdevs of different redundancy (a plain device
//! beside a mirror, a 2-way beside a 3-way mirror, RAID-Z1 beside RAID-Z2,
//! mirrors beside RAID-Z), and the devices of one mirror or RAID-Z group
//! differing in size by more than 1/64 (the group uses the smallest).
//!
//! ## Sizes
//! A leaf's allocatable bytes are its usable size less the labels. A
//! mirror's are its smallest child's; a RAID-Z group's are the smallest
//! child's (whole sectors) times its width, as its address space numbers
//! the children's sectors row-major. A leaf must still hold what its
//! top-level vdev needs of it (`required_span`) when imported.
//!
//! ## Import
//! Devices are matched to the config's leaves by guid; a leaf not found
//! gets a [`MissingDevice`] (UNAVAIL). The pool imports when every
//! top-level vdev can still serve its blocks (DEGRADED, named in the
//! import's warnings) and is refused with the missing devices named when
//! one cannot.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::RwLock;

use tarn_ondisk::label::{self, LabelConfig, VdevKind, VdevNode};

use super::alloc::metaslab::AllocConfig;
use super::core::PoolCore;
use super::events::{class, Post};
use crate::error::{Error, Result};
use crate::sys::device::{BlockDevice, Health};
use crate::vdev::raidz::RaidzGeometry;
use crate::vdev::{Kind, MissingDevice, Vdev};

/// The pool's top-level vdevs, changeable while the pool runs (`pool
/// attach`, `detach`, `replace`, `add`, `remove` of a log vdev): readers
/// take a snapshot (an `Arc` of the list, or of one vdev) and keep using
/// it while a change swaps in a new list; a vdev taken out of the tree
/// lives until its last reader lets go. Changes are made one at a time
/// (`vdev_admin`, `Shared::tree_lock`).
///
/// A top-level vdev's place is its id (a DVA's vdev number). A removed log
/// vdev that was not the last leaves a *hole* (`pool::log_vdev`,
/// "Removal"): an empty place, so the ids after it stay valid. A hole is
/// no `Vdev` at all — nothing can read, write, scrub or count it by
/// mistake: `all` lists the vdevs only, `get` of a hole's id is None, and
/// `len` counts the places (the next id).
#[derive(Default)]
pub struct VdevSet {
    tops: RwLock<Tops>,
}

/// One snapshot of the set: the places (None: a hole) and the vdevs.
#[derive(Clone, Default)]
struct Tops {
    places: Arc<Vec<Option<Arc<Vdev>>>>,
    vdevs: Arc<Vec<Arc<Vdev>>>,
}

impl Tops {
    fn of(places: Vec<Option<Arc<Vdev>>>) -> Tops {
        for (i, p) in places.iter().enumerate() {
            if let Some(v) = p {
                assert_eq!(v.id() as usize, i, "top-level vdev {} at place {}", v.id(), i);
            }
        }
        // A hole is never last: removing the last vdev trims the holes
        // before it (the labels' rule, `label::check_holes`).
        assert!(!matches!(places.last(), Some(None)), "a hole as the last top-level vdev");
        let vdevs = places.iter().flatten().cloned().collect();
        Tops { places: Arc::new(places), vdevs: Arc::new(vdevs) }
    }
}

impl VdevSet {
    /// The set with top-level vdev `i` at place `i` (None: a hole).
    pub fn new(places: Vec<Option<Arc<Vdev>>>) -> VdevSet {
        VdevSet { tops: RwLock::new(Tops::of(places)) }
    }

    /// The top-level vdevs now, holes left out (each knows its `id()`).
    pub fn all(&self) -> Arc<Vec<Arc<Vdev>>> {
        self.tops.read().vdevs.clone()
    }

    /// Top-level vdev `id` (a DVA's vdev number), if there is one: None
    /// past the last, and for a hole.
    pub fn get(&self, id: usize) -> Option<Arc<Vdev>> {
        self.tops.read().places.get(id).cloned().flatten()
    }

    /// Whether place `id` is a hole.
    pub fn is_hole(&self, id: u32) -> bool {
        matches!(self.tops.read().places.get(id as usize), Some(None))
    }

    /// Takes out the top-level vdevs from `len` on (an add that failed
    /// before the allocator took them, the removal of the last log vdev),
    /// and the holes that would then be last.
    pub(crate) fn truncate(&self, len: usize) {
        let mut g = self.tops.write();
        let mut places: Vec<Option<Arc<Vdev>>> = g.places.as_ref().clone();
        places.truncate(len);
        while matches!(places.last(), Some(None)) {
            places.pop();
        }
        *g = Tops::of(places);
    }

    /// Leaves a hole at place `id`, which must hold a vdev that is not the
    /// last (`pool::log_vdev`'s removal).
    pub(crate) fn make_hole(&self, id: u32) {
        let mut g = self.tops.write();
        let mut places: Vec<Option<Arc<Vdev>>> = g.places.as_ref().clone();
        assert!((id as usize) + 1 < places.len(), "hole at {} of {} places: only a vdev before the last leaves one", id, places.len());
        assert!(places[id as usize].is_some(), "place {} is a hole already", id);
        places[id as usize] = None;
        *g = Tops::of(places);
    }

    /// Top-level vdev `id`, which must exist: a number the allocator gave
    /// or a block pointer's that `copy_extent` checked (the allocator
    /// knows no hole).
    pub fn top(&self, id: u32) -> Arc<Vdev> {
        self.get(id as usize).unwrap_or_else(|| panic!("top-level vdev {} of {} (a hole or past the last)", id, self.len()))
    }

    /// Places, holes included: the id the next top-level vdev gets.
    pub fn len(&self) -> usize {
        self.tops.read().places.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts `v` in place of top-level vdev `v.id`, or after the last when
    /// `v.id` is the next number. Never into a hole: `pool add` appends
    /// (see `pool::vdev_add`).
    pub(crate) fn install(&self, v: Arc<Vdev>) {
        let mut g = self.tops.write();
        let mut places: Vec<Option<Arc<Vdev>>> = g.places.as_ref().clone();
        let id = v.id() as usize;
        assert!(id <= places.len(), "top-level vdev {} after {} places", id, places.len());
        if id == places.len() {
            places.push(Some(v));
        } else {
            assert!(places[id].is_some(), "top-level vdev {} installed into a hole", id);
            places[id] = Some(v);
        }
        *g = Tops::of(places);
    }
}

/// What one top-level vdev of a new pool is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Plain,
    Mirror,
    /// RAID-Z with this many parity columns (1 to 3).
    Raidz(u8),
}

impl Layout {
    /// How zpool names the redundancy in its "mismatched replication
    /// level" messages.
    fn describe(self, width: usize) -> String {
        match self {
            Layout::Plain => "a plain device".into(),
            Layout::Mirror => format!("a {}-way mirror", width),
            Layout::Raidz(p) => format!("raidz{}", p),
        }
    }

    fn least_devices(self) -> usize {
        match self {
            Layout::Plain => 1,
            Layout::Mirror => 2,
            Layout::Raidz(p) => p as usize + 1,
        }
    }
}

/// A top-level vdev to create on files or block devices.
#[derive(Clone, Debug)]
pub struct TopSpec {
    pub layout: Layout,
    pub devices: Vec<std::path::PathBuf>,
}

/// A top-level vdev to create on opened devices.
pub struct NewTop {
    pub layout: Layout,
    pub devices: Vec<(String, Arc<dyn BlockDevice>)>,
}

/// Checks a new layout (see the module docs); `force` allows mismatched
/// redundancy and sizes. `existing` are the pool's top-level vdevs
/// (`pool add`), to compare redundancy with.
pub fn check_layout(tops: &[NewTop], existing: &[(Layout, usize)], force: bool) -> Result<()> {
    let mut seen = HashSet::new();
    for t in tops {
        if t.devices.len() < t.layout.least_devices() {
            return Err(Error::invalid(format!(
                "{} needs at least {} devices, {} given",
                match t.layout {
                    Layout::Plain => "a vdev".to_string(),
                    Layout::Mirror => "a mirror".to_string(),
                    Layout::Raidz(p) => format!("raidz{}", p),
                },
                t.layout.least_devices(),
                t.devices.len()
            )));
        }
        if t.layout == Layout::Plain && t.devices.len() != 1 {
            return Err(Error::invalid("a plain top-level vdev is one device"));
        }
        if let Layout::Raidz(p) = t.layout {
            RaidzGeometry::new(t.devices.len(), p as usize, 12).map_err(|e| Error::invalid(e.to_string()))?;
        }
        for (p, _) in &t.devices {
            if !seen.insert(p.clone()) {
                return Err(Error::invalid(format!("'{}' is given twice", p)));
            }
        }
    }
    if force {
        return Ok(());
    }
    let mut kinds: Vec<(Layout, usize)> = existing.to_vec();
    kinds.extend(tops.iter().map(|t| (t.layout, t.devices.len())));
    if let Some(((a, wa), (b, wb))) = kinds.first().and_then(|f| kinds.iter().find(|k| !same_redundancy(**k, *f)).map(|k| (*f, *k))) {
        return Err(Error::invalid(format!(
            "mismatched replication level: {} and {} are both present (use -f to override)",
            a.describe(wa),
            b.describe(wb)
        )));
    }
    for t in tops.iter().filter(|t| t.layout != Layout::Plain) {
        let sizes: Vec<u64> = t.devices.iter().map(|(_, d)| d.size_bytes()).collect();
        let (min, max) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
        if max - min > max / 64 {
            let (small, _) = &t.devices[sizes.iter().position(|s| *s == min).expect("min is one of them")];
            return Err(Error::invalid(format!(
                "mismatched device sizes in {}: '{}' has {} bytes, another {} ({} would use the smallest; use -f to override)",
                t.layout.describe(t.devices.len()),
                small,
                min,
                max,
                t.layout.describe(t.devices.len())
            )));
        }
    }
    Ok(())
}

fn same_redundancy(a: (Layout, usize), b: (Layout, usize)) -> bool {
    match (a.0, b.0) {
        (Layout::Mirror, Layout::Mirror) => a.1 == b.1,
        (x, y) => x == y,
    }
}

/// The config nodes of new top-level vdevs, numbered from `first_id`.
pub fn new_nodes(tops: &[NewTop], first_id: u32, ashift: u8, guid: &dyn Fn(&str) -> u64) -> Result<Vec<VdevNode>> {
    let mut out = Vec::new();
    for (i, t) in tops.iter().enumerate() {
        let id = first_id + i as u32;
        let mut leaves = Vec::new();
        for (j, (path, dev)) in t.devices.iter().enumerate() {
            leaves.push(new_leaf_node(j as u32, guid(path), ashift, path, dev.as_ref())?);
        }
        let node = match t.layout {
            Layout::Plain => {
                let mut l = leaves.pop().expect("checked: one device");
                l.id = id;
                l
            }
            Layout::Mirror => {
                let asize = leaves.iter().map(|l| l.asize).min().expect("checked: two or more");
                interior(VdevKind::Mirror, id, guid(&format!("mirror-{}", id)), ashift, 0, asize, leaves)
            }
            Layout::Raidz(p) => {
                let child = leaves.iter().map(|l| l.asize).min().expect("checked: nparity + 1 or more");
                let asize = child * leaves.len() as u64;
                interior(VdevKind::Raidz, id, guid(&format!("raidz-{}", id)), ashift, p, asize, leaves)
            }
        };
        out.push(node);
    }
    Ok(out)
}

/// The config node of a new leaf on `dev`, known as `path`: its
/// allocatable bytes are the device's past the labels, in whole sectors.
pub fn new_leaf_node(id: u32, guid: u64, ashift: u8, path: &str, dev: &dyn BlockDevice) -> Result<VdevNode> {
    let size = label::usable_device_size(dev.size_bytes());
    if size < label::MIN_DEVICE_BYTES {
        return Err(Error::invalid(format!("'{}' is too small: {} bytes, a device needs at least {}", path, size, label::MIN_DEVICE_BYTES)));
    }
    let sector = 1u64 << ashift;
    let asize = (size - label::LABELS_FRONT - label::LABELS_BACK) / sector * sector;
    Ok(leaf_node(id, guid, ashift, asize, path))
}

fn leaf_node(id: u32, guid: u64, ashift: u8, asize: u64, path: &str) -> VdevNode {
    VdevNode {
        kind: VdevKind::File,
        id,
        guid,
        ashift,
        nparity: 0,
        asize,
        metaslab_shift: AllocConfig::for_vdev(asize, ashift).metaslab_shift,
        path: path.to_string(),
        children: vec![],
    }
}

pub(super) fn interior(kind: VdevKind, id: u32, guid: u64, ashift: u8, nparity: u8, asize: u64, children: Vec<VdevNode>) -> VdevNode {
    VdevNode { kind, id, guid, ashift, nparity, asize, metaslab_shift: AllocConfig::for_vdev(asize, ashift).metaslab_shift, path: String::new(), children }
}

/// The name `status` gives an interior vdev (`mirror-0`, `raidz2-1`).
pub fn display_name(n: &VdevNode) -> String {
    match n.kind {
        VdevKind::Mirror => format!("mirror-{}", n.id),
        VdevKind::Replacing => format!("replacing-{}", n.id),
        VdevKind::Spare => format!("spare-{}", n.id),
        VdevKind::Raidz => format!("raidz{}-{}", n.nparity, n.id),
        _ => n.path.clone(),
    }
}

/// The layout and width of a config's top-level vdev (for `pool add`'s
/// redundancy check).
pub fn layout_of(n: &VdevNode) -> (Layout, usize) {
    match n.kind {
        VdevKind::Mirror => (Layout::Mirror, n.children.len()),
        VdevKind::Raidz => (Layout::Raidz(n.nparity), n.children.len()),
        _ => (Layout::Plain, 1),
    }
}

/// Bytes of the device (past the front labels) that a leaf under `top`
/// must hold.
pub fn required_span(top: &VdevNode) -> u64 {
    match top.kind {
        VdevKind::Raidz => top.asize / top.children.len().max(1) as u64,
        _ => top.asize,
    }
}

/// The leaves of a config's tree with the top-level vdev each is under.
pub fn leaves_with_top(tree: &VdevNode) -> Vec<(&VdevNode, &VdevNode)> {
    let mut out = Vec::new();
    for top in &tree.children {
        for l in top.leaves() {
            out.push((top, l));
        }
    }
    out
}

/// Checks that every top-level vdev of `config` can serve its blocks with
/// the devices found (`present`: leaf guids); the error names each
/// missing device of a vdev that cannot. A log vdev that cannot is an
/// error too unless `missing_log` (its records are then discarded:
/// `pool::log_vdev`). Returns the missing leaves.
pub fn check_present(config: &LabelConfig, present: &HashSet<u64>, missing_log: bool) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    // A hole has no devices to find.
    for top in config.tree.children.iter().filter(|t| !t.is_hole()) {
        let gone: Vec<&VdevNode> = top.leaves().into_iter().filter(|l| !present.contains(&l.guid)).collect();
        let redundancy = match top.kind {
            VdevKind::Mirror => top.children.len().saturating_sub(1),
            VdevKind::Raidz => top.nparity as usize,
            _ => 0,
        };
        let names = |v: &[&VdevNode]| v.iter().map(|l| format!("'{}' (guid {:016x})", l.path, l.guid)).collect::<Vec<_>>().join(", ");
        let serves = serves_all(top, &|g| present.contains(&g));
        if !serves && config.logs.contains(&top.id) {
            if !missing_log {
                return Err(super::log_vdev::refuse_missing(config, top, &names(&gone)));
            }
        } else if !serves {
            return Err(Error::not_found(format!(
                "pool '{}': {} cannot be opened: {} missing, {} can be lost",
                config.pool_name,
                if top.kind.is_leaf() { format!("device {}", top.id) } else { display_name(top) },
                names(&gone),
                redundancy
            )));
        }
        missing.extend(gone.iter().map(|l| l.path.clone()));
    }
    Ok(missing)
}

/// Whether the vdev of config node `node` can serve every block with the
/// leaves `whole` says hold theirs: a leaf that does; a mirror, replacing
/// or spare vdev with a child that can; a RAID-Z vdev with no more
/// children that cannot than parity.
pub fn serves_all(node: &VdevNode, whole: &dyn Fn(u64) -> bool) -> bool {
    match node.kind {
        k if k.is_leaf() => whole(node.guid),
        VdevKind::Raidz => node.children.iter().filter(|c| !serves_all(c, whole)).count() <= node.nparity as usize,
        _ => node.children.iter().any(|c| serves_all(c, whole)),
    }
}

/// A placeholder for a leaf import did not find or could not use (`why`).
pub fn missing_device(top: &VdevNode, leaf: &VdevNode, why: &str) -> Arc<dyn BlockDevice> {
    let size = label::LABELS_FRONT + required_span(top) + label::LABELS_BACK;
    Arc::new(MissingDevice { path: leaf.path.clone(), size, why: why.to_string() })
}

/// Builds one top-level vdev from its config node; `open` gives each leaf
/// (import makes them, in tree order; a change of the tree reuses the
/// leaves it keeps).
pub fn build(node: &VdevNode, open: &mut dyn FnMut(&VdevNode) -> Result<Arc<Vdev>>) -> Result<Arc<Vdev>> {
    if node.kind.is_leaf() {
        return open(node);
    }
    let children = node.children.iter().map(|c| build(c, open)).collect::<Result<Vec<_>>>()?;
    let kind = match node.kind {
        VdevKind::Mirror => Kind::Mirror,
        VdevKind::Replacing => Kind::Replacing,
        VdevKind::Spare => Kind::Spare,
        VdevKind::Raidz => {
            let g = RaidzGeometry::new(node.children.len(), node.nparity as usize, node.ashift as u32)
                .map_err(|e| Error::corrupt(format!("{}: {}", display_name(node), e)))?;
            Kind::Raidz(g)
        }
        k => return Err(Error::corrupt(format!("vdev {} of kind {} cannot be a top-level vdev", node.id, k.name()))),
    };
    // A mirror's offsets are its children's (labels included); a RAID-Z
    // group's address space starts at 0 (`vdev/raidz`).
    let end = match kind {
        Kind::Raidz(_) => node.asize,
        _ => label::LABELS_FRONT + node.asize,
    };
    Ok(Arc::new(Vdev::new(node.id, node.guid, node.ashift, display_name(node), (end, node.asize), kind, children)))
}

/// A leaf of the tree built on its scheduler.
pub fn leaf_vdev(node: &VdevNode, leaf: Arc<crate::io::Leaf>, dev_size: u64) -> Arc<Vdev> {
    Arc::new(Vdev::new(node.id, node.guid, node.ashift, node.path.clone(), (dev_size, node.asize), Kind::Leaf(leaf), vec![]))
}

/// Where a top-level vdev's allocatable space starts in its address space.
pub fn alloc_start(node: &VdevNode) -> u64 {
    match node.kind {
        VdevKind::Raidz => 0,
        _ => label::LABELS_FRONT,
    }
}

/// The allocator's config for a top-level vdev: a RAID-Z vdev's carries
/// its geometry, so each block takes its asize (parity included).
pub fn alloc_config(node: &VdevNode, v: &Vdev) -> AllocConfig {
    match &v.kind {
        Kind::Raidz(g) => AllocConfig::for_raidz(node.asize, *g),
        _ => AllocConfig::for_vdev(node.asize, node.ashift),
    }
}

impl PoolCore {
    /// Every leaf of the pool, with its top-level vdev (a snapshot of the
    /// tree: see [`VdevSet`]).
    pub fn leaves(&self) -> Vec<(Arc<Vdev>, Arc<Vdev>)> {
        self.vdevs.all().iter().flat_map(|t| t.leaf_arcs().into_iter().map(move |l| (t.clone(), l))).collect()
    }

    /// The leaf named `name` (see `core::names_device`: its path or
    /// another name of the same device, or its guid in decimal or `0x`
    /// hex).
    pub fn leaf_named(&self, name: &str) -> Option<(Arc<Vdev>, Arc<Vdev>)> {
        self.leaves().into_iter().find(|(_, l)| super::core::names_device(name, &l.path, l.guid))
    }

    /// Makes leaf `io` under top-level vdev `top` report its faults to
    /// the pool (`leaf_faulted`) and its parked writes to the sync, and
    /// tolerate a failed write while `top` still holds the txg without it
    /// (the block is on the siblings: `io::pipeline`'s "Faults").
    pub(crate) fn hook_faults(self: &Arc<Self>, top: u32, io: &crate::io::Leaf) {
        // The txg being synced, as a fault adds it to the DTL.
        let w = Arc::downgrade(self);
        io.set_served_hook(Box::new(move || w.upgrade().is_some_and(|c| c.vdevs.get(top as usize).is_some_and(|t| !t.lacks_txg(c.txg.synced_txg() + 1)))));
        let w = Arc::downgrade(self);
        io.set_fault_hook(Box::new(move |name, h| {
            if let Some(c) = w.upgrade() {
                c.leaf_faulted(top, name, h)
            }
        }));
        let w = Arc::downgrade(self);
        let name = io.name().to_string();
        io.set_park_hook(Box::new(move || {
            if let Some(c) = w.upgrade() {
                c.leaf_parked(top, &name);
            }
        }));
    }

    /// A write to leaf `leaf` under top-level vdev `top` was parked: the
    /// sync waits for `pool clear`, so the pool is suspended — by the
    /// leaf's fault hook as a rule, here when that did not (a write a
    /// clear queued again to a device still out, whose fault hook ran
    /// before; a vdev whose children that are up may lack the txg). Not
    /// when the leaf is back already: a parked write is on its list before
    /// `pool clear` reopens it, so the clear's `resume_parked` queues it.
    fn leaf_parked(&self, top: u32, leaf: &str) {
        let Some(t) = self.vdevs.get(top as usize) else { return };
        if self.suspend_while_faulted(&t, leaf, |h| format!("{}; the txg being synced waits for it", lost_message(&t, leaf, h))) {
            self.txg.note_sync_parked();
        }
    }

    /// Suspends the pool for the fault of leaf `leaf` of `top` (`why` says
    /// so), unless `pool clear` took the leaf back meanwhile
    /// (`Leaf::while_faulted`): a fault or park hook that comes late must
    /// not suspend a pool the clear resumed, its device whole again.
    /// Whether it did.
    fn suspend_while_faulted(&self, top: &Vdev, leaf: &str, why: impl FnOnce(&Health) -> String) -> bool {
        let Some(io) = top.leaves().into_iter().find(|l| l.path == leaf).and_then(|l| l.leaf()) else { return false };
        io.while_faulted(|h| self.txg.suspend(why(h)))
    }

    /// What happens when a leaf faults: the txg being synced is added to
    /// its DTL (its write may be lost); the pool suspends when its
    /// top-level vdev can no longer take writes, else goes on degraded.
    pub fn leaf_faulted(&self, top: u32, leaf: &str, h: &Health) {
        let Some(t) = self.vdevs.get(top as usize) else { return };
        let guid = t.leaves().into_iter().find(|l| l.path == leaf).map_or(0, |l| l.guid);
        self.post_statechange(leaf, guid, "ONLINE", h.state(), h.reason().unwrap_or("faulted"));
        if self.logs.contains(top) {
            // A log vdev: never the pool's end (`pool::log_vdev`).
            self.log_leaf_faulted(&t, leaf, h);
            return;
        }
        if t.leaf().is_some() {
            // Without redundancy a faulted device takes the pool with it:
            // suspended at once, so no writer or fsync is told that a
            // change the pool can no longer keep was taken.
            // Its failed writes park (the park hook tells the sync).
            self.suspend_while_faulted(&t, leaf, |h| fault_message(leaf, h));
            return;
        }
        let txg = self.txg.synced_txg() + 1;
        if let Some(l) = t.leaves().into_iter().find(|l| l.path == leaf) {
            l.dtl.lock().add(txg);
        }
        // A hot spare may stand in (`pool::spare`).
        self.spares.watch.want(guid);
        if t.writable() {
            eprintln!("tarn: pool '{}': {}; {} is {} and the pool goes on", self.name, fault_message(leaf, h), t.path, t.state().name());
        } else {
            // As for a plain device: the writes of the txg that reached too
            // few children park on the last ones (`io::pipeline`), and
            // `pool clear` resumes the pool once enough are back.
            self.suspend_while_faulted(&t, leaf, |h| lost_message(&t, leaf, h));
        }
    }
}

impl PoolCore {
    /// Posts the statechange event of leaf `path` (`guid`) going from
    /// state `from` to `to`, for `reason`.
    pub(crate) fn post_statechange(&self, path: &str, guid: u64, from: &str, to: &str, reason: &str) {
        let p = Post::new(class::STATECHANGE).vdev(path, guid).text("vdev_state", to).text("vdev_laststate", from).text("reason", reason);
        self.events.post(p.line(format!("device '{}' is {} (was {}): {}", path, to, from, reason)));
    }
}

/// Why a pool is suspended when leaf `name` of top-level vdev `top`
/// faulted with `h`: the device, and the mirror or RAID-Z vdev it left
/// without redundancy (the fault hook and the park hook race to say it
/// first; both name both).
fn lost_message(top: &Vdev, name: &str, h: &Health) -> String {
    match top.leaf() {
        Some(_) => fault_message(name, h),
        None => format!("{}; {} has no redundancy left", fault_message(name, h), top.path),
    }
}

/// Why a pool is suspended when device `name` faulted with `h`.
pub(crate) fn fault_message(name: &str, h: &Health) -> String {
    format!("device '{}' is {}: {}", name, h.state(), h.reason().unwrap_or("faulted"))
}
