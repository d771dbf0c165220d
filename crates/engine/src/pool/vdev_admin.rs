//! What the administrator does to a pool's devices (`pool offline`,
//! `online`, `clear`), and the leaves' state that outlives an import: which
//! are offline and which txgs each missed (its DTL).
//!
//! ## The leaves' state on disk
//! The pool directory's `vdev_state` value: for each leaf that is offline
//! (not temporarily) or has a DTL, `guid u64 | flags u8 (bit 0: offline) |
//! n u16 | n × (first txg u64, last txg u64)`, little-endian. It is
//! rewritten in the sync of any txg in which it changed (`encode_state`
//! compared with the stored value). A DTL range added after the directory
//! was written (writes of the MOS itself skipping a down leaf) is written
//! with the next txg; a crash before that loses it, which import makes up
//! for: a leaf of a redundant vdev whose newest uberblock is older than the
//! txg imported missed every txg after it (`derive_dtls`), since a leaf
//! that is down gets no uberblocks.
//!
//! ## Taking a device out and back
//! `offline` refuses when the leaf's vdev would be left unable to serve
//! (zpool's "no valid replicas"). `online` clears the offline mark, reopens
//! the device if it had faulted or was missing (its labels must name this
//! pool and this leaf), adds what its uberblocks say it missed to its DTL,
//! writes the labels to it, and starts a resilver. `clear` forgets error
//! counts and takes faulted leaves whose devices are whole again back the
//! same way. Each change of a leaf's state is a statechange event, a leaf
//! back in service a vdev_online event too (`events`).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_ondisk::kv::KvMap;

use super::core::PoolCore;
use super::events::{class, Post};
use super::label::read_labels;
use crate::error::{Error, Result};
use crate::sys::device::BlockDevice;
use crate::vdev::Vdev;
use crate::Pool;

/// Pool directory key of the leaves' state.
pub(crate) const KEY_VDEV_STATE: &str = "vdev_state";

/// The leaves' state as stored (see the module docs); empty when no leaf
/// is offline or has a DTL.
pub(crate) fn encode_state(core: &PoolCore) -> Vec<u8> {
    let mut out = Vec::new();
    for (_, l) in core.leaves() {
        let offline = l.offline.load(Ordering::Relaxed) && l.offline_persist.load(Ordering::Relaxed);
        let dtl = l.dtl.lock().clone();
        if !offline && dtl.is_empty() {
            continue;
        }
        out.extend_from_slice(&l.guid.to_le_bytes());
        out.push(u8::from(offline));
        let n = dtl.ranges.len().min(u16::MAX as usize);
        out.extend_from_slice(&(n as u16).to_le_bytes());
        for (a, b) in dtl.ranges.iter().take(n) {
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
        }
    }
    out
}

/// Applies a stored state to the leaves it names (others are left as
/// they are); a malformed value is an error naming where it breaks.
pub(crate) fn load_state(core: &PoolCore, bytes: &[u8]) -> Result<()> {
    let bad = |at: usize| Error::corrupt(format!("pool '{}': the leaves' state is malformed at byte {} of {}", core.name, at, bytes.len()));
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let s = bytes.get(*at..*at + n)?;
        *at += n;
        Some(s)
    };
    while at < bytes.len() {
        let head = take(&mut at, 11).ok_or_else(|| bad(at))?;
        let guid = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let offline = head[8] & 1 != 0;
        let n = u16::from_le_bytes([head[9], head[10]]) as usize;
        let mut ranges = Vec::with_capacity(n);
        for _ in 0..n {
            let r = take(&mut at, 16).ok_or_else(|| bad(at))?;
            let (a, b) = (u64::from_le_bytes(r[..8].try_into().expect("8 bytes")), u64::from_le_bytes(r[8..].try_into().expect("8 bytes")));
            if a > b {
                return Err(bad(at));
            }
            ranges.push((a, b));
        }
        if let Some((_, l)) = core.leaves().into_iter().find(|(_, l)| l.guid == guid) {
            l.offline.store(offline, Ordering::Relaxed);
            l.offline_persist.store(offline, Ordering::Relaxed);
            let mut d = l.dtl.lock();
            ranges.into_iter().for_each(|(a, b)| d.add_range(a, b));
        }
    }
    Ok(())
}

/// The newest uberblock txg on a device of pool `pool_guid`, if any.
pub(crate) fn newest_uberblock(dev: &dyn BlockDevice, pool_guid: u64) -> Option<u64> {
    read_labels(dev).uberblocks.iter().filter(|u| u.pool_guid == pool_guid).map(|u| u.txg).max()
}

/// Adds to each leaf of a redundant vdev the txgs after its newest
/// uberblock up to `txg` (see the module docs). `newest` is in the order
/// of `core.leaves()`.
pub(crate) fn derive_dtls(core: &PoolCore, newest: &[Option<u64>], txg: u64) {
    for ((top, l), n) in core.leaves().into_iter().zip(newest) {
        // A leaf with no uberblock of this pool (attached or replacing,
        // and the pool stopped before its first sync) missed everything.
        let first = n.map_or(1, |n| n + 1);
        if top.leaf().is_none() && first <= txg {
            l.dtl.lock().add_range(first, txg);
        }
    }
}

impl Pool {
    /// The leaf named `dev` (path or guid) and its top-level vdev, or an
    /// error naming it.
    pub(super) fn leaf_for(&self, dev: &str, verb: &str) -> Result<(Arc<Vdev>, Arc<Vdev>)> {
        let core = self.core();
        core.leaf_named(dev).ok_or_else(|| Error::not_found(format!("cannot {} '{}': no such device in pool '{}'", verb, dev, core.name)))
    }

    /// `pool offline [-t]`: stops using a leaf of a redundant vdev; with
    /// `temporary` it comes back online at the next import.
    pub fn offline(&self, dev: &str, temporary: bool) -> Result<()> {
        self.core().check_writable()?;
        let (top, leaf) = self.leaf_for(dev, "offline")?;
        if leaf.offline.load(Ordering::Relaxed) {
            return Ok(());
        }
        let down = top.children.iter().filter(|c| !c.up()).count();
        if top.leaf().is_some() || (leaf.up() && down + 1 > top.redundancy()) {
            return Err(Error::invalid(format!("cannot offline '{}': no valid replicas ({} would be left unable to serve its blocks)", dev, top.path)));
        }
        let was = leaf.state().name();
        leaf.offline_persist.store(!temporary, Ordering::Relaxed);
        leaf.offline.store(true, Ordering::Relaxed);
        let why = if temporary { "taken offline until the next import" } else { "taken offline" };
        self.core().post_statechange(&leaf.path, leaf.guid, was, leaf.state().name(), why);
        self.update_pool_dir(|_| Ok(()))
    }

    /// `pool online`: takes a leaf back into service (see the module docs)
    /// and resilvers what it missed.
    pub fn online(&self, dev: &str) -> Result<()> {
        self.core().check_writable()?;
        let (_, leaf) = self.leaf_for(dev, "online")?;
        let was = leaf.state().name();
        self.bring_back(&leaf, "online")?;
        leaf.offline.store(false, Ordering::Relaxed);
        leaf.offline_persist.store(false, Ordering::Relaxed);
        self.post_online(&leaf, was);
        self.update_pool_dir(|_| Ok(()))?;
        self.resilver_start()
    }

    /// Reopens a leaf that is faulted or missing, from its path: the device
    /// there must carry this leaf's labels. Its uberblocks say what it
    /// missed (added to its DTL); the labels are rewritten.
    fn bring_back(&self, leaf: &Vdev, verb: &str) -> Result<()> {
        let core = self.core();
        let Some(io) = leaf.leaf() else { return Ok(()) };
        if io.health() == crate::sys::device::Health::Online && io.device().health() == crate::sys::device::Health::Online {
            return Ok(());
        }
        let path = Path::new(&leaf.path);
        let dev: Arc<dyn BlockDevice> = match io.device().health() {
            crate::sys::device::Health::Online => io.device(),
            _ => Arc::new(super::vet::open_for_import(path).map_err(|e| e.context(format!("cannot {} '{}'", verb, leaf.path)))?),
        };
        let labels = read_labels(dev.as_ref());
        match labels.config {
            Some(c) if c.pool_guid == core.guid && c.device_guid == leaf.guid => {}
            Some(c) => {
                return Err(Error::invalid(format!(
                    "cannot {} '{}': the device there is leaf {:016x} of pool '{}', not this leaf ({:016x} of '{}'); use 'tarn pool replace'",
                    verb, leaf.path, c.device_guid, c.pool_name, leaf.guid, core.name
                )))
            }
            None => return Err(Error::invalid(format!("cannot {} '{}': the device there has no tarn label; use 'tarn pool replace'", verb, leaf.path))),
        }
        if dev.size_bytes() < leaf.dev_size {
            return Err(Error::invalid(format!("cannot {} '{}': the device is {} bytes, smaller than the {} it had", verb, leaf.path, dev.size_bytes(), leaf.dev_size)));
        }
        let newest = newest_uberblock(dev.as_ref(), core.guid);
        let txg = core.txg.synced_txg();
        io.reopen(dev).map_err(|h| Error::invalid(format!("cannot {} '{}': the device is {}: {}", verb, leaf.path, h.state(), h.reason().unwrap_or(""))))?;
        let first = newest.map_or(1, |n| n + 1);
        if first <= txg {
            leaf.dtl.lock().add_range(first, txg);
        }
        eprintln!("tarn: pool '{}': '{}' is back; it missed txgs {}..={}", core.name, leaf.path, first, txg);
        Ok(())
    }

    /// A leaf that was `was` is back in service: its statechange, and
    /// vdev_online (as `zpool online` posts).
    fn post_online(&self, leaf: &Vdev, was: &str) {
        let now = leaf.state().name();
        if now != was {
            self.core().post_statechange(&leaf.path, leaf.guid, was, now, "back in service");
        }
        self.core().events.post(Post::new(class::VDEV_ONLINE).vdev(&leaf.path, leaf.guid));
    }

    /// `pool clear [DEVICE]`: forgets error counts and the error log, and
    /// takes faulted leaves (of `dev`, or all) whose devices are whole
    /// again back into service, resilvering what they missed.
    pub fn clear(&self, dev: Option<&str>) -> Result<u64> {
        let leaves: Vec<Arc<Vdev>> = match dev {
            Some(d) => vec![self.leaf_for(d, "clear")?.1],
            None => self.core().leaves().into_iter().map(|(_, l)| l).collect(),
        };
        for l in &leaves {
            if let Some(io) = l.leaf() {
                let s = io.stats();
                for c in [&s.read_errors, &s.write_errors, &s.checksum_errors] {
                    c.store(0, Ordering::Relaxed);
                }
            }
        }
        let n = self.core().errlog.clear();
        let mut cleared = Post::new(class::VDEV_CLEAR);
        if let (Some(_), [l]) = (dev, leaves.as_slice()) {
            cleared = cleared.vdev(&l.path, l.guid);
        }
        self.core().events.post(cleared);
        if self.core().readonly {
            return Ok(n);
        }
        let mut back = false;
        for l in leaves.iter().filter(|l| l.leaf().is_some_and(|io| io.health() != crate::sys::device::Health::Online)) {
            // A leaf still broken stays faulted; clear says so only when asked for it.
            let was = l.state().name();
            match self.bring_back(l, "clear") {
                Ok(()) => {
                    self.post_online(l, was);
                    back = true;
                }
                Err(e) if dev.is_some() => return Err(e),
                Err(_) => {}
            }
        }
        self.resume_if_suspended()?;
        if back {
            self.update_pool_dir(|_| Ok(()))?;
            self.resilver_start()?;
        }
        Ok(n)
    }
}

impl Pool {
    /// A pool suspended by a device fault whose top-level vdevs can all
    /// take writes again (`clear` reopened their devices: a plain device,
    /// a mirror's child, RAID-Z children up to parity): the suspension
    /// ends and the writes the sync parked are queued again, so the txg it
    /// was writing is written after all (see `Leaf::set_park_failed_writes`;
    /// children that missed some of it resilver). Refused, naming why,
    /// while a vdev is still out or when a sync already failed.
    fn resume_if_suspended(&self) -> Result<()> {
        let core = self.core();
        let Some(why) = core.txg.failure() else { return Ok(()) };
        // Log vdevs never hold the pool back (`pool::log_vdev`).
        if let Some(top) = core.vdevs.all().iter().find(|t| !core.logs.contains(t.id()) && !t.writable()) {
            let mut what = format!("'{}' is still {}", top.path, top.state().name());
            if top.leaf().is_none() {
                let down: Vec<String> = top.leaves().iter().filter(|l| !l.state().usable()).map(|l| format!("'{}' {}", l.path, l.state().name())).collect();
                what = format!("{} ({})", what, down.join(", "));
            }
            return Err(Error::invalid(format!("pool '{}' stays suspended: {} ({})", core.name, what, why)));
        }
        core.txg.resume().map_err(|why| Error::invalid(format!("pool '{}' cannot resume: {}; 'tarn pool export -f {}' discards what it could not write", core.name, why, core.name)))?;
        let n: usize = core.leaves().iter().filter_map(|(_, l)| l.leaf().map(|io| io.resume_parked())).sum();
        eprintln!("tarn: pool '{}' resumed; {} parked writes queued again", core.name, n);
        Ok(())
    }
}

/// The stored state under `KEY_VDEV_STATE`, if any.
pub(crate) fn stored_state(props: &KvMap) -> Option<&[u8]> {
    props.get(KEY_VDEV_STATE).map(|v| v.as_slice())
}
