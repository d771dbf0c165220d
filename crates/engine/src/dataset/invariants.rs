//! The dataset layer's invariants (listed in the module docs), checked over
//! all records (`check_invariants`) or one changed record (`check_links`).

use std::sync::atomic::Ordering;

use super::deadlist;
use super::dsl::{ensure, Datasets, State};
use super::index;
use super::record::Rec;
use crate::error::Result;

impl Datasets {
    /// Checks every invariant of the module docs over all records (walks
    /// everything: for tests and `Pool::check_invariants`).
    pub fn check_invariants(&self) -> Result<()> {
        let mut st = self.st.lock();
        let mut stack = vec![self.root_id];
        let mut bound = 0usize;
        let mut indexed = 0usize;
        while let Some(id) = stack.pop() {
            bound += 1;
            assert!(bound < 100_000_000, "dataset walk over its bound");
            let r = self.get_rec(&mut st, id)?;
            self.check_indexed(&mut st, &r)?;
            indexed += usize::from(r.id != self.root_id);
            self.check_links(&mut st, &r)?;
            for c in self.check_children(&mut st, &r)? {
                stack.push(c);
            }
            self.check_chain(&mut st, &r)?;
            self.check_deadlist(&r)?;
            for s in self.snapshots_of(&mut st, &r)? {
                self.check_indexed(&mut st, &s)?;
                indexed += 1;
                self.check_deadlist(&s)?;
                for c in &s.clones {
                    let cr = self.get_rec(&mut st, *c)?;
                    ensure(cr.origin == s.id && cr.origin_txg == s.creation_txg, || format!("clone '{}' does not name its origin '{}'", cr.name, s.name))?;
                }
            }
            if r.origin != 0 {
                let o = self.get_rec(&mut st, r.origin)?;
                ensure(o.snapshot && o.clones.contains(&r.id), || format!("origin '{}' does not list its clone '{}'", o.name, r.name))?;
            }
        }
        // Nothing else is indexed: as many names as records below the root,
        // in order, each under its record's name (checked above).
        let entries = index::entries(&self.mos, self.get_rec(&mut st, self.root_id)?.index)?;
        ensure(entries.len() == indexed, || format!("the name index holds {} names for {} datasets", entries.len(), indexed))?;
        ensure(entries.windows(2).all(|w| w[0].0 < w[1].0), || "the name index is out of order".to_string())?;
        for (id, o) in self.open.lock().iter() {
            let r = self.get_rec(&mut st, *id)?;
            ensure(o.owner.snapshot || o.owner.prev_snap_txg.load(Ordering::Acquire) == r.prev_snap_txg, || format!("open '{}' has a stale latest-snapshot txg", r.name))?;
        }
        Ok(())
    }

    /// One record's links agree with its neighbours': the previous snapshot
    /// names it as next (same file system) and its txg is the creation txg;
    /// siblings point back; its first child is first; a clone's origin
    /// lists it.
    pub(crate) fn check_links(&self, st: &mut State, r: &Rec) -> Result<()> {
        let fs = if r.snapshot { r.head } else { r.id };
        if r.prev_snap != 0 {
            let p = self.get_rec(st, r.prev_snap)?;
            ensure(p.creation_txg == r.prev_snap_txg, || format!("'{}': prev_snap_txg {} but '{}' was made in {}", r.name, r.prev_snap_txg, p.name, p.creation_txg))?;
            ensure(p.head != fs || p.next_snap == r.id, || format!("'{}' does not name '{}' as its next", p.name, r.name))?;
        }
        if r.sib_next != 0 {
            ensure(self.get_rec(st, r.sib_next)?.sib_prev == r.id, || format!("next sibling of '{}' does not point back", r.name))?;
        }
        if r.child_first != 0 {
            let c = self.get_rec(st, r.child_first)?;
            ensure(c.sib_prev == 0 && c.parent == r.id, || format!("first child '{}' of '{}' is linked wrongly", c.name, r.name))?;
        }
        if r.origin != 0 && !r.snapshot {
            ensure(self.get_rec(st, r.origin)?.clones.contains(&r.id), || format!("origin of '{}' does not list it", r.name))?;
        }
        Ok(())
    }

    /// Every record is found under its name (the index and the records agree).
    fn check_indexed(&self, st: &mut State, r: &Rec) -> Result<()> {
        let found = if r.id == self.root_id { Some(r.id) } else { {
            let table = self.get_rec(st, self.root_id)?.index;
            st.index.lookup(&self.mos, table, &r.name)?
        } };
        ensure(found == Some(r.id), || format!("'{}' (record {}) is indexed as {:?}", r.name, r.id, found))
    }

    /// Children name their parent and the sibling list is doubly linked.
    fn check_children(&self, st: &mut State, r: &Rec) -> Result<Vec<u64>> {
        let mut prev = 0;
        let mut out = Vec::new();
        for c in self.children_of(st, r)? {
            ensure(c.parent == r.id && c.sib_prev == prev && !c.snapshot, || format!("child '{}' of '{}' is linked wrongly", c.name, r.name))?;
            ensure(c.name.starts_with(&format!("{}/", r.name)), || format!("child '{}' is not named below '{}'", c.name, r.name))?;
            prev = c.id;
            out.push(c.id);
        }
        Ok(out)
    }

    /// Snapshots chain newest to oldest with decreasing txgs; each names the
    /// next one; `prev_snap_txg` is the previous snapshot's creation txg.
    fn check_chain(&self, st: &mut State, h: &Rec) -> Result<()> {
        let mut cur = h.clone();
        loop {
            if cur.prev_snap == 0 {
                return ensure(cur.prev_snap_txg == 0, || format!("'{}' has no previous snapshot but a txg for it", cur.name));
            }
            let p = self.get_rec(st, cur.prev_snap)?;
            ensure(p.snapshot && cur.prev_snap_txg == p.creation_txg, || format!("'{}': previous snapshot txg mismatch", cur.name))?;
            if p.head != h.id {
                return ensure(h.origin != 0 && p.id == h.origin, || format!("'{}' reaches a foreign snapshot '{}'", cur.name, p.name));
            }
            ensure(p.next_snap == cur.id, || format!("'{}' does not name '{}' as its next", p.name, cur.name))?;
            ensure(p.creation_txg < cur.creation_txg || !cur.snapshot, || format!("'{}' is not older than '{}'", p.name, cur.name))?;
            cur = p;
        }
    }

    /// Dead-list entries were born no later than the previous snapshot and
    /// the byte counters match them.
    fn check_deadlist(&self, r: &Rec) -> Result<()> {
        let dl = deadlist::read(&self.mos, r.deadlist)?;
        let total: u64 = dl.iter().map(|b| b.asize_total()).sum();
        let old: u64 = dl.iter().filter(|b| b.birth <= r.origin_txg).map(|b| b.asize_total()).sum();
        ensure(dl.iter().all(|b| b.birth <= r.prev_snap_txg), || format!("'{}' has a dead block born after its previous snapshot", r.name))?;
        ensure(total == r.dl_bytes && old == r.dl_origin_bytes, || format!("'{}': dead list holds {}/{} bytes, record says {}/{}", r.name, total, old, r.dl_bytes, r.dl_origin_bytes))
    }
}
