//! The owner of a dataset's open object set: the object layer's hooks into
//! the dataset layer (`ObjsetOwner`). It refuses writes to snapshots,
//! read-only and destroyed datasets and writes beyond a quota, counts the
//! bytes the set's sync writes and frees, and decides per freed block:
//! born after the latest snapshot → freed; else → the dead list.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;

use parking_lot::Mutex;
use tarn_ondisk::bp::BlockPtr;

use super::Datasets;
use crate::error::{Error, ErrorKind, Result};
use crate::object::ObjsetOwner;
use crate::pool::core::PoolCore;
use crate::txg::TXG_SIZE;

/// What one sync of the set changed, taken by the dataset layer afterwards.
#[derive(Default)]
pub(crate) struct Acct {
    pub born: u64,
    pub freed: u64,
    pub born_lsize: u64,
    pub born_psize: u64,
    pub freed_lsize: u64,
    pub freed_psize: u64,
    /// Blocks a snapshot still references: for the dead list.
    pub dead: Vec<BlockPtr>,
}

/// Room left under the quotas (and other datasets' reservations) as of the
/// last sync, who sets the limit, and what going beyond it is: `Quota`
/// (EDQUOT) for a quota, `NoSpace` for space reserved for others.
#[derive(Clone)]
pub(crate) struct Limit {
    pub bytes: u64,
    pub by: String,
    pub kind: ErrorKind,
}

pub(crate) struct Owner {
    pub id: u64,
    /// For messages (a rename changes it).
    pub name: Mutex<String>,
    pub snapshot: bool,
    pub dsl: Weak<Datasets>,
    /// Txg of the latest snapshot (or the origin): frees of blocks born at
    /// or before it go to the dead list.
    pub prev_snap_txg: AtomicU64,
    pub destroyed: AtomicBool,
    pub readonly: AtomicBool,
    pub acct: Mutex<Acct>,
    /// Bytes dirtied per unsynced txg (txg, bytes), for the quota check.
    pub writes: Mutex<[(u64, u64); TXG_SIZE]>,
    /// None: recompute at the next write (after every sync).
    pub limit: Mutex<Option<Option<Limit>>>,
}

impl Owner {
    pub fn new(id: u64, name: &str, snapshot: bool, prev_snap_txg: u64, readonly: bool, dsl: Weak<Datasets>) -> Owner {
        Owner {
            id,
            name: Mutex::new(name.to_string()),
            snapshot,
            dsl,
            prev_snap_txg: AtomicU64::new(prev_snap_txg),
            destroyed: AtomicBool::new(false),
            readonly: AtomicBool::new(readonly),
            acct: Mutex::new(Acct::default()),
            writes: Mutex::new([(0, 0); TXG_SIZE]),
            limit: Mutex::new(None),
        }
    }

    /// After `txg` synced: its writes are now in the used figures.
    pub fn synced(&self, txg: u64) {
        let mut w = self.writes.lock();
        for e in w.iter_mut().filter(|e| e.0 <= txg) {
            *e = (0, 0);
        }
        drop(w);
        *self.limit.lock() = None;
    }

    /// Refuses changes to destroyed, snapshot and read-only datasets.
    fn check_writable(&self) -> Result<()> {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(Error::not_found(format!("dataset '{}' was destroyed", self.name.lock())));
        }
        if self.snapshot {
            return Err(Error::invalid(format!("snapshot '{}' is read-only", self.name.lock())));
        }
        if self.readonly.load(Ordering::Acquire) {
            return Err(Error::invalid(format!("dataset '{}' is read-only (readonly=on)", self.name.lock())));
        }
        Ok(())
    }

    /// `bytes` more on top of `pending` must fit the room `l` leaves.
    fn refuse_beyond(&self, l: &Limit, pending: u64, bytes: u64) -> Result<()> {
        if pending.saturating_add(bytes) <= l.bytes {
            return Ok(());
        }
        let what = if l.kind == ErrorKind::Quota { "is over its quota" } else { "is out of space" };
        Err(Error::new(
            l.kind,
            format!("dataset '{}' {}: {} ({} bytes left, {} pending, {} asked)", self.name.lock(), what, l.by, l.bytes, pending, bytes),
        ))
    }

    fn limit(&self) -> Result<Option<Limit>> {
        if let Some(l) = self.limit.lock().clone() {
            return Ok(l);
        }
        let Some(dsl) = self.dsl.upgrade() else { return Ok(None) };
        // Computed without holding `limit`: the sync thread takes the
        // dataset lock, then this one.
        let l = dsl.headroom(self.id)?;
        *self.limit.lock() = Some(l.clone());
        Ok(l)
    }
}

impl ObjsetOwner for Owner {
    fn check_read(&self) -> Result<()> {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(Error::not_found(format!("dataset '{}' was destroyed", self.name.lock())));
        }
        Ok(())
    }

    fn check_write(&self, txg: u64, bytes: u64) -> Result<()> {
        self.check_writable()?;
        if bytes == 0 {
            return Ok(());
        }
        let limit = self.limit()?;
        let mut w = self.writes.lock();
        let pending: u64 = w.iter().map(|e| e.1).sum();
        if let Some(l) = limit {
            self.refuse_beyond(&l, pending, bytes)?;
        }
        let s = (txg % TXG_SIZE as u64) as usize;
        if w[s].0 != txg {
            w[s] = (txg, 0);
        }
        w[s].1 += bytes;
        Ok(())
    }

    fn check_room(&self, bytes: u64) -> Result<()> {
        self.check_writable()?;
        match self.limit()? {
            Some(l) => self.refuse_beyond(&l, self.pending(), bytes),
            None => Ok(()),
        }
    }

    fn room(&self) -> Result<Option<u64>> {
        if self.snapshot {
            return Ok(Some(0));
        }
        Ok(self.limit()?.map(|l| l.bytes.saturating_sub(self.pending())))
    }

    fn pending(&self) -> u64 {
        self.writes.lock().iter().map(|e| e.1).sum()
    }

    fn block_born(&self, bp: &BlockPtr) {
        if bp.is_hole() || bp.is_embedded() {
            return;
        }
        let mut a = self.acct.lock();
        a.born += bp.asize_total();
        a.born_lsize += bp.lsize as u64;
        a.born_psize += bp.psize as u64;
    }

    fn block_freed(&self, core: &PoolCore, bp: &BlockPtr, txg: u64) -> Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        debug_assert!(bp.birth < txg, "dataset '{}' frees a block born in the syncing txg {}", self.name.lock(), txg);
        let mut a = self.acct.lock();
        a.freed += bp.asize_total();
        a.freed_lsize += bp.lsize as u64;
        a.freed_psize += bp.psize as u64;
        if bp.birth <= self.prev_snap_txg.load(Ordering::Acquire) {
            a.dead.push(*bp);
            Ok(())
        } else {
            drop(a);
            core.free_block(bp, txg)
        }
    }
}
