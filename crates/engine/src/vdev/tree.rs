//! The vdev tree's nodes: what each vdev is, its health, and how a block's
//! bytes are read from it and written to it (see `vdev/mod.rs` for the
//! picture and the rules).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::raidz::{self, RaidzGeometry};
use crate::error::{Error, ErrorKind, Result};
use crate::io::pipeline::ReadDone;
use crate::io::{IoClass, Leaf, WriteGroup};
use crate::sys::buf::AlignedBuf;
use crate::sys::device::{BlockDevice, Health};

/// What a vdev is.
pub enum Kind {
    /// A device: a file or a block device, with its scheduler (shared, so
    /// a leaf keeps its scheduler when the tree is rebuilt around it).
    Leaf(Arc<Leaf>),
    /// Every child holds every block, at the same offset.
    Mirror,
    /// A device being replaced and its replacement (`pool replace`): a
    /// mirror of the two until the replacement's resilver completes, when
    /// the old device leaves the tree. The only interior vdev that may sit
    /// under another (a mirror or a RAID-Z vdev).
    Replacing,
    /// A device and the hot spare standing in for it (`pool/spare.rs`):
    /// a mirror of the two, as a replacing vdev is, but one that stays
    /// until the administrator detaches one of them. Sits where a
    /// replacing vdev may, and may hold one (the original being replaced).
    Spare,
    /// Each block spread over the children with parity (`vdev/raidz`).
    Raidz(RaidzGeometry),
}

/// One node of the tree. A top-level vdev is the root of its own subtree
/// (for a pool of plain devices, a leaf).
pub struct Vdev {
    /// Position among its siblings; a top-level vdev's is its DVA vdev
    /// number (`id()`). A leaf keeps its node when the tree changes
    /// around it, and may move (`set_id`).
    pos: AtomicU32,
    pub guid: u64,
    pub ashift: u8,
    /// A leaf: the path it was opened at. Otherwise its name in `status`
    /// (`mirror-0`, `raidz2-1`).
    pub path: String,
    /// The end of the vdev's address space: no block's extent may pass it.
    /// A leaf's is its usable device size (labels included, as offsets on
    /// a leaf are device offsets).
    pub dev_size: u64,
    /// Allocatable bytes, as the label records them.
    pub asize: u64,
    pub kind: Kind,
    pub children: Vec<Arc<Vdev>>,
    /// Taken offline by the administrator: not read, not written, no fault.
    pub offline: AtomicBool,
    /// The offline mark is kept across imports (`pool offline` without -t).
    pub offline_persist: AtomicBool,
    /// Txgs with writes this vdev missed (its dirty time log), as ranges
    /// `[first, last]`: a leaf that was faulted, missing or offline while
    /// its siblings took writes. Reads try it last for blocks born then.
    pub dtl: Mutex<Dtl>,
    /// Bytes rewritten onto this leaf from a good copy (self-healing).
    pub repaired_bytes: AtomicU64,
}

/// A dirty time log: the txg ranges a leaf missed, merged and ordered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dtl {
    pub ranges: Vec<(u64, u64)>,
}

impl Dtl {
    /// Adds txg `txg` (extending the last range when adjacent).
    pub fn add(&mut self, txg: u64) {
        self.add_range(txg, txg);
    }

    pub fn add_range(&mut self, first: u64, last: u64) {
        assert!(first <= last, "dtl range [{first}, {last}]");
        self.ranges.push((first, last));
        self.ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.ranges.len());
        for &(a, b) in &self.ranges {
            match merged.last_mut() {
                Some(m) if a <= m.1.saturating_add(1) => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.ranges = merged;
    }

    /// Forgets the txgs up to `txg` (they were resilvered).
    pub fn remove_through(&mut self, txg: u64) {
        self.ranges.retain_mut(|r| {
            if r.1 <= txg {
                return false;
            }
            r.0 = r.0.max(txg + 1);
            true
        });
    }

    pub fn contains(&self, txg: u64) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&txg))
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The oldest and newest txg missed, if any.
    pub fn span(&self) -> Option<(u64, u64)> {
        Some((self.ranges.first()?.0, self.ranges.last()?.1))
    }
}

/// A vdev's state as `status` shows it (as zpool's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Online,
    Degraded,
    Faulted,
    Offline,
    Removed,
    Unavail,
}

impl State {
    /// Every state, for views that list them all (the Prometheus state
    /// set `tarn_vdev_state`).
    pub const ALL: [State; 6] = [State::Online, State::Degraded, State::Faulted, State::Offline, State::Removed, State::Unavail];

    pub fn name(self) -> &'static str {
        match self {
            State::Online => "ONLINE",
            State::Degraded => "DEGRADED",
            State::Faulted => "FAULTED",
            State::Offline => "OFFLINE",
            State::Removed => "REMOVED",
            State::Unavail => "UNAVAIL",
        }
    }

    /// Whether the vdev can serve reads and take writes.
    pub fn usable(self) -> bool {
        matches!(self, State::Online | State::Degraded)
    }
}

/// How `Vdev::read_checked` judges what it reads, and whom it tells.
pub struct ReadCheck<'a> {
    /// Whether the bytes are the block's (its checksum).
    pub check: &'a dyn Fn(&[u8]) -> bool,
    /// Rewrite the copies found bad on the way with the good bytes.
    pub repair: bool,
    /// Told of each leaf that failed on the way: the leaf, the offset
    /// read there, and why.
    pub failed: &'a dyn Fn(&Vdev, u64, &Error),
    /// Bytes `check` refuses are not counted against the leaves: the read
    /// expects to find nothing there (the block after an intent-log
    /// chain's last, OpenZFS's speculative reads).
    pub speculative: bool,
}

/// A read's buffers per leaf found bad on the way, to be rewritten.
struct Bad<'a> {
    leaf: &'a Vdev,
    why: ErrorKind,
}

impl Vdev {
    /// A node; `sizes` is (`dev_size`, `asize`).
    pub fn new(id: u32, guid: u64, ashift: u8, path: String, sizes: (u64, u64), kind: Kind, children: Vec<Arc<Vdev>>) -> Vdev {
        let (dev_size, asize) = sizes;
        Vdev {
            pos: AtomicU32::new(id),
            guid,
            ashift,
            path,
            dev_size,
            asize,
            kind,
            children,
            offline: AtomicBool::new(false),
            offline_persist: AtomicBool::new(false),
            dtl: Mutex::new(Dtl::default()),
            repaired_bytes: AtomicU64::new(0),
        }
    }

    /// Position among its siblings (a top-level vdev's DVA vdev number).
    pub fn id(&self) -> u32 {
        self.pos.load(Ordering::Relaxed)
    }

    pub(crate) fn set_id(&self, id: u32) {
        self.pos.store(id, Ordering::Relaxed);
    }

    /// The leaf's scheduler, if this is a leaf.
    pub fn leaf(&self) -> Option<&Leaf> {
        match &self.kind {
            Kind::Leaf(l) => Some(l),
            _ => None,
        }
    }

    /// The leaf's scheduler as a shared handle, if this is a leaf.
    pub fn leaf_arc(&self) -> Option<Arc<Leaf>> {
        match &self.kind {
            Kind::Leaf(l) => Some(l.clone()),
            _ => None,
        }
    }

    /// Records that this vdev missed txg `txg`: every leaf under it adds
    /// it to its DTL.
    pub fn missed(&self, txg: u64) {
        match &self.kind {
            Kind::Leaf(_) => self.dtl.lock().add(txg),
            _ => self.children.iter().for_each(|c| c.missed(txg)),
        }
    }

    /// Whether this vdev may lack the blocks born in txg `birth`: a leaf
    /// whose DTL holds it; a mirror (or replacing or spare vdev) none of
    /// whose children that are up holds it — a child that is down cannot
    /// give it, whatever its DTL says (a faulted device's DTL holds only
    /// the txgs since its fault); a RAID-Z vdev with more such children
    /// than parity.
    pub fn missed_txg(&self, birth: u64) -> bool {
        match &self.kind {
            Kind::Leaf(_) => self.dtl.lock().contains(birth),
            Kind::Mirror | Kind::Replacing | Kind::Spare => self.children.iter().all(|c| !c.up() || c.missed_txg(birth)),
            Kind::Raidz(g) => self.children.iter().filter(|c| c.missed_txg(birth)).count() > g.nparity(),
        }
    }

    /// Whether this vdev may lack a block written in txg `txg`, from what
    /// is known without asking the devices: a leaf that is down or whose
    /// DTL holds `txg`; a mirror (or replacing or spare vdev) all of whose
    /// children may; a RAID-Z vdev with more such children than parity.
    /// Within a txg's sync it only turns true: faults stay until `pool
    /// clear`, and a leaf brought back keeps the txg in its DTL.
    pub fn lacks_txg(&self, txg: u64) -> bool {
        match &self.kind {
            Kind::Leaf(_) => !self.leaf_up() || self.dtl.lock().contains(txg),
            Kind::Mirror | Kind::Replacing | Kind::Spare => self.children.iter().all(|c| c.lacks_txg(txg)),
            Kind::Raidz(g) => self.children.iter().filter(|c| c.lacks_txg(txg)).count() > g.nparity(),
        }
    }

    /// Every leaf under this vdev (itself if it is one), in tree order.
    pub fn leaves(&self) -> Vec<&Vdev> {
        let mut out = Vec::new();
        self.collect_leaves(&mut out);
        out
    }

    /// As `leaves`, as shared handles (`self` must be one, for a leaf).
    pub fn leaf_arcs(self: &Arc<Vdev>) -> Vec<Arc<Vdev>> {
        match &self.kind {
            Kind::Leaf(_) => vec![self.clone()],
            _ => self.children.iter().flat_map(|c| c.leaf_arcs()).collect(),
        }
    }

    fn collect_leaves<'a>(&'a self, out: &mut Vec<&'a Vdev>) {
        match &self.kind {
            Kind::Leaf(_) => out.push(self),
            _ => self.children.iter().for_each(|c| c.collect_leaves(out)),
        }
    }

    /// Leaf schedulers under this vdev.
    pub fn leaf_ios(&self) -> impl Iterator<Item = &Leaf> {
        self.leaves().into_iter().filter_map(|v| v.leaf())
    }

    /// The vdev's kind as `status` and the label name it.
    pub fn type_name(&self) -> String {
        match &self.kind {
            Kind::Leaf(_) => "leaf".into(),
            Kind::Mirror => "mirror".into(),
            Kind::Replacing => "replacing".into(),
            Kind::Spare => "spare".into(),
            Kind::Raidz(g) => format!("raidz{}", g.nparity()),
        }
    }

    /// Bytes of this vdev's address space a block of `len` bytes (whole
    /// sectors) takes: `len`, or on RAID-Z its data and parity sectors
    /// rounded to `nparity + 1` (the allocator's asize).
    pub fn alloc_size(&self, len: u64) -> u64 {
        match &self.kind {
            Kind::Raidz(g) if len > 0 => g.asize(len),
            _ => len,
        }
    }

    /// How many children may be lost without losing data.
    pub fn redundancy(&self) -> usize {
        match &self.kind {
            Kind::Leaf(_) => 0,
            Kind::Mirror | Kind::Replacing | Kind::Spare => self.children.len().saturating_sub(1),
            Kind::Raidz(g) => g.nparity(),
        }
    }

    /// The vdev's state now. A leaf asks its device (so a file deleted or
    /// truncated while idle is found); an interior vdev follows from its
    /// children: degraded while it can still serve every block, else
    /// unavailable (zpool's "insufficient replicas").
    pub fn state(&self) -> State {
        if self.offline.load(Ordering::Relaxed) {
            return State::Offline;
        }
        match &self.kind {
            Kind::Leaf(l) => match l.check() {
                Health::Online => State::Online,
                Health::Faulted(_) => State::Faulted,
                Health::Removed(_) => State::Removed,
                Health::Unavail(_) => State::Unavail,
            },
            _ => {
                let down = self.children.iter().filter(|c| !c.state().usable()).count();
                let degraded = self.children.iter().any(|c| c.state() == State::Degraded);
                if down > self.redundancy() {
                    State::Unavail
                } else if down > 0 || degraded {
                    State::Degraded
                } else {
                    State::Online
                }
            }
        }
    }

    /// Why the vdev is not usable, when it is not.
    pub fn reason(&self) -> Option<String> {
        if self.offline.load(Ordering::Relaxed) {
            return Some("taken offline by the administrator".into());
        }
        match &self.kind {
            Kind::Leaf(l) => l.health().reason().map(String::from),
            _ if !self.state().usable() => Some("insufficient replicas".into()),
            _ => None,
        }
    }

    /// Whether the vdev serves I/O, from what is known without asking the
    /// devices (the hot path's check; `state` asks them).
    pub fn up(&self) -> bool {
        match &self.kind {
            Kind::Leaf(_) => self.leaf_up(),
            _ => !self.offline.load(Ordering::Relaxed) && self.children.iter().filter(|c| !c.up()).count() <= self.redundancy(),
        }
    }

    /// The leaf a RAID-Z column kept on this child is read from, for a
    /// block born in `birth`: the child itself, or, for a replacing or
    /// spare vdev (a RAID-Z member being replaced, or with a hot spare
    /// standing in), its first leaf that is up and did not miss `birth`,
    /// else its first leaf that is up.
    pub(crate) fn column_source(&self, birth: u64) -> Option<&Vdev> {
        match &self.kind {
            Kind::Leaf(_) => Some(self),
            _ => {
                let leaves = self.leaves();
                let up = || leaves.iter().copied().filter(|l| l.leaf_up());
                up().find(|l| !l.dtl.lock().contains(birth)).or_else(|| up().next())
            }
        }
    }

    /// A leaf that reads and writes (not offline, not faulted).
    pub(crate) fn leaf_up(&self) -> bool {
        !self.offline.load(Ordering::Relaxed) && self.leaf().is_some_and(|l| l.health() == Health::Online)
    }

    /// Reads the `len` bytes of a block at `offset` of this vdev's address
    /// space, born in txg `birth`, and returns them once `rc.check` accepts
    /// them (the block's checksum). A mirror tries its children in turn
    /// (those whose DTL holds `birth` last), a RAID-Z vdev reconstructs
    /// from parity. Every leaf found wrong on the way is told to
    /// `rc.failed` (the pool's events), rewritten with the good bytes when
    /// `rc.repair` (not on a read-only pool), and counted: a read error
    /// against the leaf's read errors, bytes `check` refused against its
    /// checksum errors. The error, when no child gives bytes that pass:
    /// corrupt if some were read, else the last I/O error.
    pub fn read_checked(&self, class: IoClass, offset: u64, len: u64, birth: u64, rc: &ReadCheck) -> Result<AlignedBuf> {
        match &self.kind {
            Kind::Leaf(l) => {
                let raw = l.read(class, offset, len).map_err(|e| Error::io(format!("read of {} bytes at {:#x} on {}", len, offset, self.path), e)).inspect_err(|e| (rc.failed)(self, offset, e))?;
                if (rc.check)(&raw) {
                    return Ok(raw);
                }
                if !rc.speculative {
                    l.note_checksum_error();
                }
                let e = Error::corrupt(format!("checksum mismatch at {:#x} on {}", offset, self.path));
                (rc.failed)(self, offset, &e);
                Err(e)
            }
            Kind::Mirror | Kind::Replacing | Kind::Spare => self.mirror_read(class, offset, len, birth, rc),
            Kind::Raidz(g) => raidz::io::read(self, *g, class, offset, len, birth, rc),
        }
    }

    fn mirror_read(&self, class: IoClass, offset: u64, len: u64, birth: u64, rc: &ReadCheck) -> Result<AlignedBuf> {
        let mut bad: Vec<Bad> = Vec::new();
        let mut last: Option<Error> = None;
        for c in self.read_order(offset, birth) {
            match c.read_checked(class, offset, len, birth, rc) {
                Ok(raw) => {
                    if rc.repair {
                        self.repair(&bad, &raw, offset);
                    }
                    return Ok(raw);
                }
                Err(e) => {
                    if c.leaf().is_some() {
                        bad.push(Bad { leaf: c, why: e.kind });
                    }
                    let corrupt = last.as_ref().is_some_and(|l| l.kind == ErrorKind::Corrupt);
                    if !corrupt || e.kind == ErrorKind::Corrupt {
                        last = Some(e);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::io(format!("{}: no child can be read", self.path), io::Error::from_raw_os_error(libc::ENXIO))))
    }

    /// The children to read a block from, best first: those that are up,
    /// the ones that did not miss the block's txg before those whose DTL
    /// holds it, each group turning by offset (OpenZFS's vdev_mirror
    /// balances by queue depth and locality; tarn turns by offset so that
    /// a stream's reads stay on one child per region and the children
    /// share the load). A DTL says a child may lack the block, not that it
    /// does (one derived at import holds a txg whose blocks a crash left
    /// on the child without its uberblock): such a child is read last, as
    /// vdev_mirror does, and the checksum decides.
    fn read_order(&self, offset: u64, birth: u64) -> Vec<&Vdev> {
        let n = self.children.len();
        let start = ((offset >> 20) as usize) % n.max(1);
        let mut order: Vec<&Vdev> = (0..n).map(|i| &*self.children[(start + i) % n]).collect();
        order.retain(|c| c.up());
        order.sort_by_key(|c| c.missed_txg(birth));
        order
    }

    /// Rewrites a good block over the copies found bad on leaves.
    fn repair(&self, bad: &[Bad], raw: &AlignedBuf, offset: u64) {
        for b in bad {
            let Some(l) = b.leaf.leaf() else { continue };
            if !b.leaf.leaf_up() {
                continue;
            }
            if l.write_now(raw, offset).and_then(|_| l.flush()).is_ok() {
                b.leaf.repaired_bytes.fetch_add(raw.len() as u64, Ordering::Relaxed);
                eprintln!(
                    "tarn: repaired {} bytes at {:#x} on '{}' ({}) from another copy",
                    raw.len(),
                    offset,
                    b.leaf.path,
                    if b.why == ErrorKind::Corrupt { "checksum error" } else { "read error" }
                );
            }
        }
    }

    /// Queues the write of a block's bytes at `offset` in txg `txg`: to the
    /// leaf, to every child of a mirror that is up, or as columns with
    /// parity to a RAID-Z vdev's children (`raidz::io::write`). A child that
    /// is not (faulted, missing, offline) misses the txg: its DTL records it
    /// for resilver — unless the top-level vdev may lack the txg without it
    /// (`lacks_txg`, asked after the child was found down), when the block
    /// is kept on the child's leaves (`hold`) to be written when `pool
    /// clear` resumes the pool, or, for a group that cannot wait, fails the
    /// group. `retire` dirty bytes retire with the first write queued or
    /// kept.
    pub fn write(&self, class: IoClass, offset: u64, buf: Arc<AlignedBuf>, group: &Arc<WriteGroup>, retire: u64, txg: u64) {
        self.write_under(self, class, offset, buf, group, retire, txg);
    }

    /// `write` of this vdev under top-level vdev `top`.
    #[allow(clippy::too_many_arguments)]
    fn write_under(&self, top: &Vdev, class: IoClass, offset: u64, buf: Arc<AlignedBuf>, group: &Arc<WriteGroup>, retire: u64, txg: u64) {
        match &self.kind {
            Kind::Leaf(l) => l.write(class, offset, buf, group, retire),
            Kind::Mirror | Kind::Replacing | Kind::Spare => {
                // As a failed write is tolerated (`io::pipeline`'s "Faults"):
                // of the children skipped or dropping the block, the last
                // sees the others down or behind, and keeps it.
                let mut retire = retire;
                for c in &self.children {
                    if c.up() {
                        c.write_under(top, class, offset, buf.clone(), group, std::mem::take(&mut retire), txg);
                    } else if top.lacks_txg(txg) {
                        c.hold_or_fail(offset, &buf, 0..buf.len(), group, std::mem::take(&mut retire));
                    } else {
                        c.missed(txg);
                    }
                }
                if retire > 0 {
                    // No child took it: a vdev under a mirror or RAID-Z
                    // vdev whose children are all down while the top-level
                    // vdev holds the txg elsewhere (or children that came
                    // back during the loop: `pool online`). The dirty bytes
                    // must still retire.
                    group.retire_unwritten(retire);
                }
            }
            Kind::Raidz(g) => raidz::io::write(self, *g, class, offset, buf, group, retire, txg),
        }
    }

    /// Keeps the write of `buf[range]` at `offset` on every leaf under this
    /// vdev that parks (`Leaf::hold`; not one taken offline, which misses
    /// the txg), the dirty bytes retiring with the first; when none does
    /// (the group cannot wait, the pool is closing), the bytes retire and
    /// the group fails: the block may have reached too few devices.
    pub(crate) fn hold_or_fail(&self, offset: u64, buf: &Arc<AlignedBuf>, range: std::ops::Range<usize>, group: &Arc<WriteGroup>, retire: u64) {
        let mut kept = false;
        for l in self.leaves() {
            let Some(io) = l.leaf().filter(|_| !l.offline.load(Ordering::Relaxed)) else { continue };
            kept |= io.hold(offset, buf.clone(), range.clone(), group, if kept { 0 } else { retire });
        }
        if !kept {
            group.retire_unwritten(retire);
            group.fail(format!("{} is {}: no device took the write of {} bytes at {:#x}", self.path, self.state().name(), range.len(), offset));
        }
    }

    /// Starts reading a block ahead without verifying it (the callback
    /// does): from the leaf, a mirror's first child in read order, or a
    /// RAID-Z vdev's data columns. False when this vdev cannot read ahead
    /// (the caller reads on demand).
    pub fn read_async(&self, class: IoClass, offset: u64, len: u64, birth: u64, done: ReadDone) -> bool {
        match &self.kind {
            Kind::Leaf(l) => {
                l.read_async(class, offset, len, done);
                true
            }
            Kind::Mirror | Kind::Replacing | Kind::Spare => match self.read_order(offset, birth).first() {
                Some(c) => c.read_async(class, offset, len, birth, done),
                None => false,
            },
            Kind::Raidz(g) => raidz::io::read_async(self, *g, class, offset, len, birth, done),
        }
    }

    /// The leaves a scan reads this top-level vdev's copies from, by index
    /// (`scan_leaf`): the leaf itself, or each leaf of a mirror (and of a
    /// replacing vdev under it) that is up.
    /// A RAID-Z vdev's copy is scanned once, as a whole (index 0, no leaf
    /// of its own): its columns are checked together (`scrub_columns`).
    pub fn scan_leaves(&self) -> Vec<usize> {
        match &self.kind {
            Kind::Leaf(_) => vec![0],
            Kind::Mirror | Kind::Replacing | Kind::Spare => self.leaves().iter().enumerate().filter(|(_, l)| l.leaf_up()).map(|(i, _)| i).collect(),
            Kind::Raidz(_) => vec![0],
        }
    }

    /// Leaf `i` of `scan_leaves` (none for RAID-Z).
    pub fn scan_leaf(self: &Arc<Vdev>, i: usize) -> Option<Arc<Vdev>> {
        match &self.kind {
            Kind::Leaf(_) => (i == 0).then(|| self.clone()),
            Kind::Mirror | Kind::Replacing | Kind::Spare => self.leaf_arcs().get(i).cloned(),
            Kind::Raidz(_) => None,
        }
    }

    /// Scrubs one copy on a RAID-Z vdev: every column read, parity
    /// included, the block verified by `rc.check` (reconstructed if need
    /// be), the wrong columns told to `rc.failed` and rewritten when
    /// `rc.repair` (`raidz::io::scrub`). None for other kinds, whose copies
    /// a scan checks leaf by leaf.
    pub fn scrub_columns(&self, offset: u64, len: u64, birth: u64, rc: &ReadCheck) -> Option<raidz::ColumnScrub> {
        match &self.kind {
            Kind::Raidz(g) => Some(raidz::io::scrub(self, *g, offset, len, birth, rc)),
            _ => None,
        }
    }

    /// Resilvers one block onto leaf `guid` of a RAID-Z vdev: the columns
    /// of `data` (the block, verified) that the leaf holds, written without
    /// a flush (`raidz::io::resilver`); returns the bytes written. Other
    /// kinds hold the whole block on the leaf, at the same offset.
    pub fn resilver_columns(&self, offset: u64, data: &[u8], guid: u64) -> io::Result<u64> {
        match &self.kind {
            Kind::Raidz(g) => raidz::io::resilver(self, *g, offset, data, guid),
            _ => Err(io::Error::other(format!("{} is not a raidz vdev", self.path))),
        }
    }

    /// Writes a verified block (read from another copy) over the copy at
    /// `offset` of a RAID-Z vdev, every column (`raidz::io::rewrite`);
    /// returns the bytes written. Other kinds' copies are rewritten leaf by
    /// leaf.
    pub fn rewrite_columns(&self, offset: u64, data: &[u8]) -> io::Result<u64> {
        match &self.kind {
            Kind::Raidz(g) => raidz::io::rewrite(self, *g, offset, data),
            _ => Err(io::Error::other(format!("{} is not a raidz vdev", self.path))),
        }
    }

    /// Whether the vdev can still take the pool's writes: a leaf that is
    /// up, a mirror with a child up, a RAID-Z vdev with no more children
    /// down than parity. Asks the devices (`Leaf::check`).
    pub fn writable(&self) -> bool {
        self.state().usable()
    }
}

/// A device the config names that was not found at import: every I/O
/// fails, its health says why (UNAVAIL).
#[derive(Debug)]
pub struct MissingDevice {
    pub path: String,
    pub size: u64,
    /// Why import could not use the device (not found, no valid label,
    /// too small …).
    pub why: String,
}

impl BlockDevice for MissingDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }
    fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENXIO))
    }
    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENXIO))
    }
    fn flush(&self) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENXIO))
    }
    fn name(&self) -> String {
        self.path.clone()
    }
    fn health(&self) -> Health {
        Health::Unavail(format!("cannot open: {}", self.why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new state fails to compile here: add it to `State::ALL` too.
    #[test]
    fn every_state_is_listed_once() {
        let index = |s: State| match s {
            State::Online => 0,
            State::Degraded => 1,
            State::Faulted => 2,
            State::Offline => 3,
            State::Removed => 4,
            State::Unavail => 5,
        };
        assert!(State::ALL.iter().enumerate().all(|(i, s)| index(*s) == i));
    }

    #[test]
    fn dtl_merges_adjacent_and_overlapping_ranges() {
        let mut d = Dtl::default();
        d.add(5);
        d.add(6);
        d.add(9);
        assert_eq!(d.ranges, vec![(5, 6), (9, 9)]);
        d.add_range(7, 8);
        assert_eq!(d.ranges, vec![(5, 9)]);
        assert!(d.contains(7) && !d.contains(4) && !d.contains(10));
        assert_eq!(d.span(), Some((5, 9)));
        d.add(20);
        d.remove_through(7);
        assert_eq!(d.ranges, vec![(8, 9), (20, 20)]);
        d.remove_through(20);
        assert!(d.is_empty());
    }
}
