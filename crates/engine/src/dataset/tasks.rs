//! The syncing side of the dataset layer: what `Datasets::sync` does in a
//! txg, and each sync task (see the module docs for the order and why).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_ondisk::bp::ObjectType;
use tarn_ondisk::kv;

use super::dsl::{now_secs, Datasets, Op, State, Task};
use super::names::{self, DsName};
use super::owner::Owner;
use super::props;
use super::record::Rec;
use super::{deadlist, index, traverse};
use crate::error::{Error, ErrorKind, Result};
use crate::io::WriteGroup;
use crate::object::Objset;
use crate::txg::TXG_SIZE;

impl Datasets {
    /// Whether txg `txg` has dataset work: tasks or dirty object sets.
    pub(crate) fn has_work(&self, txg: u64) -> bool {
        if !self.tasks.lock().is_empty() || self.logs_dirty(txg) {
            return true;
        }
        self.open.lock().values().any(|o| !o.owner.snapshot && o.os.is_dirty(txg))
    }

    /// The dataset part of a txg's sync: early tasks, every dirty object
    /// set (its record takes the new root pointer, its space changes and
    /// its dead blocks), the other tasks, then the changed records.
    pub(crate) fn sync(&self, txg: u64, group: &Arc<WriteGroup>) -> Result<()> {
        let tasks: Vec<Task> = {
            let mut t = self.tasks.lock();
            let (now, later): (Vec<Task>, Vec<Task>) = std::mem::take(&mut *t).into_iter().partition(|k| k.txg <= txg);
            *t = later;
            now
        };
        let (early, late): (Vec<Task>, Vec<Task>) = tasks.into_iter().partition(|t| t.op.early());
        // What an earlier sync that failed half-way left (never written).
        self.st.lock().index.clear();
        if !early.is_empty() {
            let mut st = self.st.lock();
            self.exec_all(&mut st, txg, early);
        }
        let heads: Vec<(Arc<Objset>, Arc<Owner>)> =
            self.open.lock().values().filter(|o| !o.owner.snapshot).map(|o| (o.os.clone(), o.owner.clone())).collect();
        let mut synced = Vec::new();
        for (os, owner) in heads {
            if os.sync(txg, group)?.is_some() {
                synced.push((os, owner));
            }
        }
        let mut st = self.st.lock();
        for (os, owner) in &synced {
            self.apply_sync(&mut st, txg, os, owner)?;
        }
        self.synced.lock()[(txg % TXG_SIZE as u64) as usize] = synced.into_iter().map(|(os, _)| os).collect();
        self.exec_all(&mut st, txg, late);
        self.sync_logs(&mut st, txg)?;
        self.flush(&mut st, txg)
    }

    fn exec_all(&self, st: &mut State, txg: u64, tasks: Vec<Task>) {
        for t in tasks {
            let r = self.exec(st, txg, &t.op);
            *t.out.lock() = Some(r);
        }
    }

    /// A synced object set's record: new root, space, dead blocks.
    fn apply_sync(&self, st: &mut State, txg: u64, os: &Objset, owner: &Owner) -> Result<()> {
        let a = std::mem::take(&mut *owner.acct.lock());
        let mut r = self.get_rec(st, owner.id)?;
        r.bp = os.root_bp();
        assert!(r.referenced + a.born >= a.freed, "dataset '{}': referenced bytes would go negative", r.name);
        r.referenced = r.referenced + a.born - a.freed;
        r.ref_lsize = (r.ref_lsize + a.born_lsize).saturating_sub(a.freed_lsize);
        r.ref_psize = (r.ref_psize + a.born_psize).saturating_sub(a.freed_psize);
        if !a.dead.is_empty() {
            if r.deadlist == 0 {
                r.deadlist = deadlist::create(&self.mos, txg)?;
            }
            deadlist::append(&self.mos, txg, r.deadlist, &a.dead)?;
            for bp in &a.dead {
                debug_assert!(bp.birth <= r.prev_snap_txg);
                r.dl_bytes += bp.asize_total();
                if bp.birth <= r.origin_txg {
                    r.dl_origin_bytes += bp.asize_total();
                }
            }
        }
        Self::put(st, r);
        Ok(())
    }

    /// Writes the records changed in this txg into the MOS (after checking
    /// their links in debug builds: the cheap, local part of the invariants,
    /// before the uberblock that would make them durable).
    fn flush(&self, st: &mut State, txg: u64) -> Result<()> {
        if cfg!(debug_assertions) {
            let ids: Vec<u64> = st.dirty.iter().copied().collect();
            for id in ids {
                if st.recs.contains_key(&id) {
                    let r = self.get_rec(st, id)?;
                    self.check_links(st, &r)?;
                }
            }
        }
        st.index.flush(&self.mos, txg)?;
        for id in std::mem::take(&mut st.dirty) {
            let Some(r) = st.recs.get(&id) else { continue };
            let bytes = kv::encode(&r.encode());
            self.mos.write_txg(txg, id, 0, &bytes)?;
            self.mos.truncate_txg(txg, id, bytes.len() as u64)?;
        }
        Ok(())
    }

    /// After `txg` is on disk.
    pub(crate) fn sync_done(&self, txg: u64) {
        let sets = std::mem::take(&mut self.synced.lock()[(txg % TXG_SIZE as u64) as usize]);
        for os in sets {
            os.sync_done(txg);
        }
        for o in self.open.lock().values() {
            o.owner.synced(txg);
        }
        self.logs_synced(txg);
    }

    fn exec(&self, st: &mut State, txg: u64, op: &Op) -> Result<()> {
        match op {
            Op::Create { name, props, parents } => self.exec_create(st, txg, name, props, *parents),
            Op::Snapshot { name } => self.exec_snapshot(st, txg, name),
            Op::Clone { origin, name, props } => {
                let o = self.resolve(st, origin)?;
                if !o.snapshot {
                    return Err(Error::invalid(format!("'{}' is not a snapshot: only snapshots can be cloned", origin)));
                }
                let n = names::parse(name, self.pool())?;
                self.check_new(st, &n)?;
                let parent = self.parent_of_new(st, &n)?;
                self.new_fs(st, txg, name, parent.id, props, Some(&o)).map(|_| ())
            }
            Op::Destroy { name } => {
                let r = self.resolve(st, name)?;
                if r.snapshot {
                    self.destroy_snapshot(st, txg, r)
                } else {
                    self.destroy_fs(st, txg, r)
                }
            }
            Op::Rollback { snapshot } => self.exec_rollback(st, txg, snapshot),
            Op::Set { name, prop, value } => self.exec_set(st, name, prop, value.as_deref()),
            Op::Rename { from, to } => self.exec_rename(st, txg, from, to),
        }
    }

    /// The parent of new file system `n`; missing, the error names both as
    /// `create` does ("parent 'P' of 'N' does not exist").
    fn parent_of_new(&self, st: &mut State, n: &DsName) -> Result<Rec> {
        let Some(pn) = n.parent() else {
            return Err(Error::invalid(format!("'{}' would be a pool's root dataset", n.full())));
        };
        match self.lookup(st, pn)? {
            Some(id) => self.get_rec(st, id),
            None => Err(Error::not_found(format!("parent '{}' of '{}' does not exist", pn, n.full()))),
        }
    }

    fn check_new(&self, st: &mut State, n: &DsName) -> Result<()> {
        if self.lookup(st, &n.full())?.is_some() {
            return Err(Error::new(ErrorKind::Exists, format!("dataset '{}' already exists", n.full())));
        }
        Ok(())
    }

    fn exec_create(&self, st: &mut State, txg: u64, name: &str, props: &[(String, String)], parents: bool) -> Result<()> {
        let n = names::parse(name, self.pool())?;
        self.check_new(st, &n)?;
        // Ancestors that do not exist yet, nearest first.
        let mut missing = Vec::new();
        let mut p = n.parent();
        let parent_id = loop {
            let Some(pn) = p else { return Err(Error::corrupt("the root dataset is missing")) };
            match self.lookup(st, pn)? {
                Some(id) => break id,
                None if parents => {
                    missing.push(pn.to_string());
                    p = pn.rfind('/').map(|i| &pn[..i]);
                }
                None => return Err(Error::not_found(format!("parent '{}' of '{}' does not exist (create it, or use create_parents)", pn, name))),
            }
        };
        let mut parent_id = parent_id;
        for m in missing.iter().rev() {
            if self.get_rec(st, parent_id)?.snapshot {
                return Err(Error::invalid(format!("'{}' is a snapshot", m)));
            }
            parent_id = self.new_fs(st, txg, m, parent_id, &[], None)?;
        }
        self.new_fs(st, txg, name, parent_id, props, None).map(|_| ())
    }

    fn ensure_index(&self, st: &mut State, txg: u64) -> Result<u64> {
        let mut root = self.get_rec(st, self.root_id)?;
        if root.index == 0 {
            root.index = index::create(&self.mos, txg)?;
            Self::put(st, root.clone());
        }
        Ok(root.index)
    }

    /// A new record in the MOS, indexed under its name.
    fn new_record(&self, st: &mut State, txg: u64, name: &str) -> Result<u64> {
        let table = self.ensure_index(st, txg)?;
        let id = self.mos.create_in(txg, ObjectType::DatasetRecord, 3)?;
        st.index.insert(&self.mos, txg, table, name, id)?;
        st.names.insert(name.to_string(), id);
        Ok(id)
    }

    fn new_fs(&self, st: &mut State, txg: u64, name: &str, parent_id: u64, props: &[(String, String)], origin: Option<&Rec>) -> Result<u64> {
        for (k, v) in props {
            props::validate(k, v)?;
            if k == "reservation" {
                let room = self.available(st, parent_id)?;
                if props::size_value(v) > room {
                    return Err(Error::no_space(format!("cannot reserve {} for '{}': only {} bytes are available", v, name, room)));
                }
            }
        }
        let id = self.new_record(st, txg, name)?;
        let mut parent = self.get_rec(st, parent_id)?;
        let mut r = Rec {
            id,
            name: name.to_string(),
            creation_txg: txg,
            creation_time: now_secs(),
            guid: crate::pool::new_guid(name),
            parent: parent_id,
            sib_next: parent.child_first,
            props: props.iter().cloned().collect(),
            has_referenced: true,
            ..Default::default()
        };
        if parent.child_first != 0 {
            let mut s = self.get_rec(st, parent.child_first)?;
            s.sib_prev = id;
            Self::put(st, s);
        }
        parent.child_first = id;
        Self::put(st, parent);
        if let Some(o) = origin {
            r.bp = o.bp;
            r.origin = o.id;
            r.origin_txg = o.creation_txg;
            r.prev_snap = o.id;
            r.prev_snap_txg = o.creation_txg;
            r.referenced = o.referenced;
            r.ref_lsize = o.ref_lsize;
            r.ref_psize = o.ref_psize;
            let mut o = self.get_rec(st, o.id)?;
            o.clones.insert(id);
            Self::put(st, o);
        }
        if props::size_value(r.props.get("reservation").map_or("none", |s| s.as_str())) > 0 {
            let mut root = self.get_rec(st, self.root_id)?;
            root.reservations.insert(id);
            Self::put(st, root);
        }
        Self::put(st, r);
        Ok(id)
    }

    fn exec_snapshot(&self, st: &mut State, txg: u64, name: &str) -> Result<()> {
        let n = names::parse(name, self.pool())?;
        let mut h = self.resolve(st, &n.fs)?;
        self.check_new(st, &n)?;
        let id = self.new_record(st, txg, name)?;
        h = self.get_rec(st, h.id)?;
        let s = Rec {
            id,
            name: name.to_string(),
            snapshot: true,
            bp: h.bp,
            creation_txg: txg,
            creation_time: now_secs(),
            guid: crate::pool::new_guid(name),
            head: h.id,
            prev_snap: h.prev_snap,
            prev_snap_txg: h.prev_snap_txg,
            next_snap: h.id,
            deadlist: h.deadlist,
            dl_bytes: h.dl_bytes,
            dl_origin_bytes: h.dl_origin_bytes,
            referenced: h.referenced,
            ref_lsize: h.ref_lsize,
            ref_psize: h.ref_psize,
            origin_txg: h.origin_txg,
            has_referenced: true,
            ..Default::default()
        };
        if h.prev_snap != 0 {
            let mut p = self.get_rec(st, h.prev_snap)?;
            if p.head == h.id {
                p.next_snap = id;
                Self::put(st, p);
            }
        }
        h.prev_snap = id;
        h.prev_snap_txg = txg;
        h.deadlist = 0;
        h.dl_bytes = 0;
        h.dl_origin_bytes = 0;
        if let Some(o) = self.open.lock().get(&h.id) {
            o.owner.prev_snap_txg.store(txg, Ordering::Release);
        }
        Self::put(st, h);
        Self::put(st, s);
        Ok(())
    }

    /// Forgets a record: index, name cache, MOS object.
    fn drop_record(&self, st: &mut State, txg: u64, r: &Rec) -> Result<()> {
        let table = self.get_rec(st, self.root_id)?.index;
        st.index.remove(&self.mos, txg, table, &r.name)?;
        st.names.remove(&r.name);
        self.mos.free_in(txg, r.id)?;
        st.recs.remove(&r.id);
        st.dirty.remove(&r.id);
        if let Some(o) = self.open.lock().remove(&r.id) {
            o.owner.destroyed.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// OpenZFS's dsl_destroy_snapshot: the blocks only this snapshot holds
    /// are the entries of its successor's dead list born after the previous
    /// snapshot; those are freed, the rest join this snapshot's dead list,
    /// which becomes the successor's.
    fn destroy_snapshot(&self, st: &mut State, txg: u64, s: Rec) -> Result<()> {
        if let Some(&c) = s.clones.iter().next() {
            let cname = self.get_rec(st, c)?.name;
            return Err(Error::new(ErrorKind::Busy, format!("snapshot '{}' has dependent clones: '{}' (destroy it first)", s.name, cname)));
        }
        let mut next = self.get_rec(st, s.next_snap)?;
        let mut kept = Vec::new();
        for bp in deadlist::read(&self.mos, next.deadlist)? {
            if bp.birth > s.prev_snap_txg {
                self.core.free_block(&bp, txg)?;
            } else {
                kept.push(bp);
            }
        }
        let mut dl = s.deadlist;
        if !kept.is_empty() {
            if dl == 0 {
                dl = deadlist::create(&self.mos, txg)?;
            }
            deadlist::append(&self.mos, txg, dl, &kept)?;
        }
        if next.deadlist != 0 {
            self.mos.free_in(txg, next.deadlist)?;
        }
        next.deadlist = dl;
        next.dl_bytes = s.dl_bytes + kept.iter().map(|b| b.asize_total()).sum::<u64>();
        next.dl_origin_bytes = s.dl_origin_bytes + kept.iter().filter(|b| b.birth <= next.origin_txg).map(|b| b.asize_total()).sum::<u64>();
        next.prev_snap = s.prev_snap;
        next.prev_snap_txg = s.prev_snap_txg;
        if !next.snapshot {
            if let Some(o) = self.open.lock().get(&next.id) {
                o.owner.prev_snap_txg.store(s.prev_snap_txg, Ordering::Release);
            }
        }
        Self::put(st, next.clone());
        if s.prev_snap != 0 {
            let mut p = self.get_rec(st, s.prev_snap)?;
            if p.head == s.head {
                p.next_snap = next.id;
                Self::put(st, p);
            }
        }
        self.drop_record(st, txg, &s)
    }

    /// Frees exactly the blocks no one else references: those born after the
    /// latest snapshot txg (its origin's for a clone, as it has no
    /// snapshots of its own left). Its dead list holds only the origin's
    /// blocks, which stay.
    fn destroy_fs(&self, st: &mut State, txg: u64, r: Rec) -> Result<()> {
        if r.id == self.root_id {
            return Err(Error::invalid(format!("'{}' is the pool's root dataset: destroy the pool instead", r.name)));
        }
        if let Some(c) = self.children_of(st, &r)?.first() {
            return Err(Error::new(ErrorKind::Busy, format!("dataset '{}' has children ('{}'): destroy them first or destroy recursively", r.name, c.name)));
        }
        if let Some(s) = self.snapshots_of(st, &r)?.first() {
            return Err(Error::new(ErrorKind::Busy, format!("dataset '{}' has snapshots ('{}'): destroy them first or destroy recursively", r.name, s.name)));
        }
        if let Some(o) = self.open.lock().remove(&r.id) {
            o.owner.destroyed.store(true, Ordering::Release);
        }
        self.discard_log(st, txg, r.id, true)?;
        traverse::free_born_after(&self.core, &r.bp, r.prev_snap_txg, txg)?;
        if r.deadlist != 0 {
            self.mos.free_in(txg, r.deadlist)?;
        }
        if r.origin != 0 {
            let mut o = self.get_rec(st, r.origin)?;
            o.clones.remove(&r.id);
            Self::put(st, o);
        }
        self.unlink(st, &r)?;
        let mut root = self.get_rec(st, self.root_id)?;
        if root.reservations.remove(&r.id) {
            Self::put(st, root);
        }
        self.drop_record(st, txg, &r)
    }

    /// The head becomes its latest snapshot: blocks born after it are freed,
    /// its dead list (blocks of the snapshot, which the head references
    /// again) is dropped, and the open object set restarts from the
    /// snapshot's root, unsynced changes discarded.
    fn exec_rollback(&self, st: &mut State, txg: u64, snapshot: &str) -> Result<()> {
        let s = self.resolve(st, snapshot)?;
        if !s.snapshot {
            return Err(Error::invalid(format!("'{}' is not a snapshot", snapshot)));
        }
        let mut h = self.get_rec(st, s.head)?;
        if h.prev_snap != s.id {
            let latest = self.get_rec(st, h.prev_snap)?.name;
            return Err(Error::new(ErrorKind::Busy, format!("'{}' is not the latest snapshot of '{}' ('{}' is): destroy the later ones first", s.name, h.name, latest)));
        }
        traverse::free_born_after(&self.core, &h.bp, s.creation_txg, txg)?;
        if h.deadlist != 0 {
            self.mos.free_in(txg, h.deadlist)?;
        }
        h.deadlist = 0;
        h.dl_bytes = 0;
        h.dl_origin_bytes = 0;
        h.bp = s.bp;
        h.referenced = s.referenced;
        h.ref_lsize = s.ref_lsize;
        h.ref_psize = s.ref_psize;
        if let Some(o) = self.open.lock().get(&h.id) {
            o.os.reset(&s.bp)?;
            *o.owner.acct.lock() = Default::default();
        }
        self.discard_log(st, txg, h.id, false)?;
        Self::put(st, h);
        Ok(())
    }

    /// Every record whose name starts with the file system's: it, its
    /// descendants and all their snapshots get the new prefix; a file system
    /// with a new parent moves between the sibling lists. O(subtree).
    fn exec_rename(&self, st: &mut State, txg: u64, from: &str, to: &str) -> Result<()> {
        let r = self.resolve(st, from)?;
        if r.id == self.root_id {
            return Err(Error::invalid(format!("'{}' is the pool's root dataset and cannot be renamed", from)));
        }
        let t = names::parse(to, self.pool())?;
        self.check_new(st, &t)?;
        let mut moved = vec![r.clone()];
        if !r.snapshot {
            let parent = self.parent_of_new(st, &t)?;
            if parent.snapshot || parent.name == r.name || parent.name.starts_with(&format!("{}/", r.name)) {
                return Err(Error::invalid(format!("cannot rename '{}' below itself or a snapshot ('{}')", from, parent.name)));
            }
            let mut stack = vec![r.clone()];
            while let Some(x) = stack.pop() {
                let kids = self.children_of(st, &x)?;
                moved.extend(self.snapshots_of(st, &x)?);
                moved.extend(kids.iter().cloned());
                stack.extend(kids);
            }
            if parent.id != r.parent {
                self.unlink(st, &r)?;
                let mut p = self.get_rec(st, parent.id)?;
                let mut me = self.get_rec(st, r.id)?;
                me.parent = p.id;
                me.sib_prev = 0;
                me.sib_next = p.child_first;
                if p.child_first != 0 {
                    let mut s = self.get_rec(st, p.child_first)?;
                    s.sib_prev = me.id;
                    Self::put(st, s);
                }
                p.child_first = me.id;
                Self::put(st, p);
                Self::put(st, me);
            }
        }
        let table = self.get_rec(st, self.root_id)?.index;
        for m in moved {
            let new_name = format!("{}{}", to, &m.name[from.len()..]);
            st.index.remove(&self.mos, txg, table, &m.name)?;
            st.index.insert(&self.mos, txg, table, &new_name, m.id)?;
            st.names.remove(&m.name);
            st.names.insert(new_name.clone(), m.id);
            if let Some(o) = self.open.lock().get(&m.id) {
                *o.os.name.write() = new_name.clone();
                *o.owner.name.lock() = new_name.clone();
            }
            if let Some(z) = self.zils.lock().get(&m.id) {
                z.renamed(&new_name);
            }
            let mut x = self.get_rec(st, m.id)?;
            x.name = new_name;
            Self::put(st, x);
        }
        Ok(())
    }

    /// Takes a file system out of its parent's child list.
    fn unlink(&self, st: &mut State, r: &Rec) -> Result<()> {
        if r.sib_prev != 0 {
            let mut p = self.get_rec(st, r.sib_prev)?;
            p.sib_next = r.sib_next;
            Self::put(st, p);
        } else {
            let mut p = self.get_rec(st, r.parent)?;
            p.child_first = r.sib_next;
            Self::put(st, p);
        }
        if r.sib_next != 0 {
            let mut n = self.get_rec(st, r.sib_next)?;
            n.sib_prev = r.sib_prev;
            Self::put(st, n);
        }
        Ok(())
    }

    /// A quota below what the file system and its descendants use (with
    /// what their writers dirtied since the last sync) or below its own
    /// reservation is refused, as `zfs set quota` refuses it.
    fn check_quota(&self, st: &mut State, r: &Rec) -> Result<()> {
        let size = |v: Option<&String>| props::size_value(v.map_or("none", |s| s.as_str()));
        let quota = size(r.props.get("quota"));
        if quota == 0 {
            return Ok(());
        }
        let mut used = self.used(st, r.id, &mut HashMap::new())?;
        let open: Vec<(u64, u64)> = self.open.lock().iter().map(|(&id, o)| (id, crate::object::ObjsetOwner::pending(o.owner.as_ref()))).collect();
        for (id, pending) in open.into_iter().filter(|&(_, p)| p > 0) {
            if self.is_within(st, id, r.id)? {
                used += pending;
            }
        }
        let reserved = size(r.props.get("reservation"));
        if quota < used.max(reserved) {
            return Err(Error::no_space(format!(
                "cannot set quota {} for '{}': size is less than current used or reserved space ({} used, {} reserved)",
                quota, r.name, used, reserved
            )));
        }
        Ok(())
    }

    /// Whether dataset `id` is `top` or a descendant of it.
    fn is_within(&self, st: &mut State, id: u64, top: u64) -> Result<bool> {
        let mut a = id;
        while a != 0 {
            if a == top {
                return Ok(true);
            }
            a = self.get_rec(st, a)?.parent;
        }
        Ok(false)
    }

    fn exec_set(&self, st: &mut State, name: &str, prop: &str, value: Option<&str>) -> Result<()> {
        let mut r = self.resolve(st, name)?;
        if r.snapshot {
            return Err(Error::invalid(format!("'{}' is a snapshot: its properties cannot be set", name)));
        }
        match value {
            Some(v) => {
                let v = props::validate(prop, v)?;
                r.props.insert(prop.to_string(), v);
            }
            None => {
                props::check_inheritable(prop)?;
                r.props.remove(prop);
            }
        }
        if prop == "quota" {
            self.check_quota(st, &r)?;
        }
        if prop == "reservation" {
            let want = props::size_value(r.props.get(prop).map_or("none", |s| s.as_str()));
            let mut memo = HashMap::new();
            let used = self.used(st, r.id, &mut memo)?;
            let room = used + self.available(st, r.id)?;
            if want > room {
                return Err(Error::no_space(format!("cannot reserve {} bytes for '{}': only {} are available to it", want, name, room)));
            }
            let mut root = if r.id == self.root_id { r.clone() } else { self.get_rec(st, self.root_id)? };
            if props::size_value(r.props.get(prop).map_or("none", |s| s.as_str())) > 0 {
                root.reservations.insert(r.id);
            } else {
                root.reservations.remove(&r.id);
            }
            if r.id == self.root_id {
                r.reservations = root.reservations;
            } else {
                Self::put(st, root);
            }
        }
        Self::put(st, r);
        self.refresh_open(st)
    }

}
