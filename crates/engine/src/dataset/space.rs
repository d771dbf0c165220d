//! Space accounting of datasets and snapshots, from the record counters
//! (exact; see the module docs for why each formula holds):
//!
//! ```text
//!  referenced(X)      bytes reachable from X's root (kept up to date by the owner hooks)
//!  written(X)         referenced(X) − referenced(prev) + dead(X)       (prev: previous snapshot or origin)
//!  usedbydataset(D)   referenced(D) − (referenced(origin) − dead bytes of D's lineage born by the origin)
//!                     (every head block but the origin's: freed with D once its snapshots are gone)
//!  usedbysnapshots(D) Σ over D and its snapshots of dead bytes born after D's origin
//!  usedbychildren(D)  Σ over children C of max(used(C), reservation(C))
//!  used(D)            usedbydataset + usedbysnapshots + usedbychildren
//!  used(S), snapshot  unique: entries of next(S)'s dead list born after prev(S)
//!  available(D)       min(pool free − slop − others' unused reservations,
//!                         quota(A) − used(A) for D and every ancestor A with a quota)
//!                     (pool free: space that holds D's records, and frees
//!                     the allocator still defers; see PoolCore::unreserved_bytes)
//!  compressratio(D)   Σ ref_lsize / Σ ref_psize over D and its descendants
//!  refcompressratio(X) ref_lsize(X) / ref_psize(X)
//! ```

use std::collections::{HashMap, HashSet};

use super::deadlist;
use super::dsl::{Datasets, State};
use super::owner::Limit;
use super::props;
use super::record::Rec;
use crate::error::{ErrorKind, Result};

impl Datasets {
    pub(crate) fn written(&self, st: &mut State, r: &Rec) -> Result<u64> {
        if r.prev_snap == 0 {
            return Ok(r.referenced);
        }
        let p = self.get_rec(st, r.prev_snap)?;
        let w = r.referenced as i128 - p.referenced as i128 + r.dl_bytes as i128;
        debug_assert!(w >= 0, "'{}': written {} is negative", r.name, w);
        Ok(w.max(0) as u64)
    }

    /// Every block of the head except its origin's: the head's blocks born
    /// before the origin are the origin's blocks the clone's lineage has not
    /// killed, i.e. referenced(origin) less the dead-list entries born at or
    /// before the origin (each such killed block is on exactly one dead list
    /// of the lineage).
    pub(crate) fn used_by_dataset(&self, st: &mut State, r: &Rec) -> Result<u64> {
        if r.origin == 0 {
            return Ok(r.referenced);
        }
        let o = self.get_rec(st, r.origin)?;
        let mut killed = r.dl_origin_bytes;
        for s in self.snapshots_of(st, r)? {
            killed += s.dl_origin_bytes;
        }
        let shared = o.referenced.checked_sub(killed);
        debug_assert!(shared.is_some_and(|s| s <= r.referenced), "'{}': origin blocks do not add up", r.name);
        Ok(r.referenced.saturating_sub(shared.unwrap_or(0)))
    }

    pub(crate) fn used_by_snapshots(&self, st: &mut State, r: &Rec) -> Result<u64> {
        let mut sum = r.dl_bytes.saturating_sub(r.dl_origin_bytes);
        for s in self.snapshots_of(st, r)? {
            sum += s.dl_bytes.saturating_sub(s.dl_origin_bytes);
        }
        Ok(sum)
    }

    pub(crate) fn used_by_children(&self, st: &mut State, r: &Rec, memo: &mut HashMap<u64, u64>) -> Result<u64> {
        let mut sum = 0;
        for c in self.children_of(st, r)? {
            let resv = props::size_value(c.props.get("reservation").map_or("none", |s| s.as_str()));
            sum += self.used(st, c.id, memo)?.max(resv);
        }
        Ok(sum)
    }

    /// used of a file system, memoised per call (bottom-up over the subtree).
    pub(crate) fn used(&self, st: &mut State, id: u64, memo: &mut HashMap<u64, u64>) -> Result<u64> {
        if let Some(&u) = memo.get(&id) {
            return Ok(u);
        }
        let r = self.get_rec(st, id)?;
        let u = self.used_by_dataset(st, &r)? + self.used_by_snapshots(st, &r)? + self.used_by_children(st, &r, memo)?;
        memo.insert(id, u);
        Ok(u)
    }

    /// (logical, physical) bytes a file system and its descendants
    /// reference: `compressratio`'s numerator and denominator, memoised
    /// per call (bottom-up over the subtree). Blocks only snapshots hold
    /// are not counted (dead lists keep no logical sizes).
    pub(crate) fn tree_sizes(&self, st: &mut State, r: &Rec, memo: &mut HashMap<u64, (u64, u64)>) -> Result<(u64, u64)> {
        if let Some(&v) = memo.get(&r.id) {
            return Ok(v);
        }
        let (mut lsize, mut psize) = (r.ref_lsize, r.ref_psize);
        for c in self.children_of(st, r)? {
            let (l, p) = self.tree_sizes(st, &c, memo)?;
            lsize += l;
            psize += p;
        }
        memo.insert(r.id, (lsize, psize));
        Ok((lsize, psize))
    }

    /// Bytes only snapshot `s` holds (freed if it alone were destroyed).
    pub(crate) fn unique(&self, st: &mut State, s: &Rec) -> Result<u64> {
        let next = self.get_rec(st, s.next_snap)?;
        Ok(deadlist::read(&self.mos, next.deadlist)?.iter().filter(|b| b.birth > s.prev_snap_txg).map(|b| b.asize_total()).sum())
    }

    pub(crate) fn available(&self, st: &mut State, id: u64) -> Result<u64> {
        let pool = self.pool_room(st, id, &mut HashMap::new())?;
        Ok(match self.quota_room(st, id, &mut HashMap::new())? {
            Some(l) => l.bytes.min(pool),
            None => pool,
        })
    }

    /// Pool free space less the slop and the unused reservations of
    /// datasets other than `id` and its ancestors.
    fn pool_room(&self, st: &mut State, id: u64, memo: &mut HashMap<u64, u64>) -> Result<u64> {
        let r = self.get_rec(st, id)?;
        let recordsize = crate::pool::parse_recordsize(&self.effective(st, &r, "recordsize")?.value).unwrap_or(128 << 10);
        let free = self.core.unreserved_bytes(recordsize as u64);
        let root = self.get_rec(st, self.root_id)?;
        if root.reservations.is_empty() {
            return Ok(free);
        }
        let mut mine = HashSet::new();
        let mut a = id;
        while a != 0 {
            mine.insert(a);
            a = self.get_rec(st, a)?.parent;
        }
        let mut unused = 0;
        for &x in root.reservations.iter().filter(|x| !mine.contains(x)) {
            let r = self.get_rec(st, x)?;
            let resv = props::size_value(r.props.get("reservation").map_or("none", |s| s.as_str()));
            unused += resv.saturating_sub(self.used(st, x, memo)?);
        }
        Ok(free.saturating_sub(unused))
    }

    /// The tightest quota over `id` and its ancestors.
    fn quota_room(&self, st: &mut State, id: u64, memo: &mut HashMap<u64, u64>) -> Result<Option<Limit>> {
        let mut best: Option<Limit> = None;
        let mut a = id;
        while a != 0 {
            let r = self.get_rec(st, a)?;
            let q = props::size_value(r.props.get("quota").map_or("none", |s| s.as_str()));
            if q > 0 {
                let room = q.saturating_sub(self.used(st, a, memo)?);
                if best.as_ref().is_none_or(|b| room < b.bytes) {
                    best = Some(Limit { bytes: room, by: format!("quota {} of '{}'", q, r.name), kind: ErrorKind::Quota });
                }
            }
            a = r.parent;
        }
        Ok(best)
    }

    /// The room a writer of dataset `id` has as of the last sync (None:
    /// no quota and no reservations anywhere limit it beyond the pool).
    pub(crate) fn headroom(&self, id: u64) -> Result<Option<Limit>> {
        let mut st = self.st.lock();
        let mut memo = HashMap::new();
        let mut best = self.quota_room(&mut st, id, &mut memo)?;
        if !self.get_rec(&mut st, self.root_id)?.reservations.is_empty() {
            let room = self.pool_room(&mut st, id, &mut memo)?.saturating_sub(self.core.txg.dirty_total());
            if best.as_ref().is_none_or(|b| room < b.bytes) {
                best = Some(Limit { bytes: room, by: "space reserved for other datasets".into(), kind: ErrorKind::NoSpace });
            }
        }
        Ok(best)
    }
}
