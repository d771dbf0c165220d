//! The dataset directory in memory: records, the name index, open object
//! sets, and the sync tasks that change them (see the module docs).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tarn_ondisk::bp::ObjectType;
use tarn_ondisk::dnode::ObjsetType;
use tarn_ondisk::kv::{self, KvMap};

use super::names::{self, DsName};
use super::owner::Owner;
use super::props::{self, PropValue, Source};
use super::record::Rec;
use super::{deadlist, index, traverse};
use crate::error::{Error, ErrorKind, Result};
use crate::io::WriteGroup;
use crate::object::{Objset, ObjsetProps, Tx};
use crate::pool::core::PoolCore;
use crate::txg::TXG_SIZE;

/// File system or snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DatasetKind {
    Filesystem,
    Snapshot,
}

/// Which kinds `list` returns.
#[derive(Clone, Copy, Debug)]
pub struct Types {
    pub filesystems: bool,
    pub snapshots: bool,
}

impl Types {
    pub const ALL: Types = Types { filesystems: true, snapshots: true };
    pub const FILESYSTEMS: Types = Types { filesystems: true, snapshots: false };
    pub const SNAPSHOTS: Types = Types { filesystems: false, snapshots: true };
}

/// One dataset as `list` returns it, with every property.
#[derive(Clone, Debug)]
pub struct DatasetInfo {
    pub name: String,
    pub kind: DatasetKind,
    pub props: Vec<(String, PropValue)>,
}

impl DatasetInfo {
    pub fn prop(&self, name: &str) -> Option<&PropValue> {
        self.props.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// A change to the dataset directory, run as a sync task.
#[derive(Clone, Debug)]
pub enum Op {
    /// A file system; `parents` creates missing ancestors (`zfs create -p`).
    Create { name: String, props: Vec<(String, String)>, parents: bool },
    /// `fs@snap`.
    Snapshot { name: String },
    /// A new file system whose content starts as the snapshot `origin`.
    Clone { origin: String, name: String, props: Vec<(String, String)> },
    /// A snapshot, or a file system without children and snapshots.
    Destroy { name: String },
    /// The file system goes back to its latest snapshot.
    Rollback { snapshot: String },
    /// Sets a property (None: inherit it).
    Set { name: String, prop: String, value: Option<String> },
    /// Renames a file system (with everything below it and its snapshots)
    /// under any existing parent, or a snapshot within its file system.
    Rename { from: String, to: String },
}

impl Op {
    /// Runs before the txg's object sets sync (they drop the set's unsynced
    /// changes and read its last synced tree, whose blocks have all landed).
    fn early(&self) -> bool {
        match self {
            Op::Destroy { name } => !name.contains('@'),
            Op::Rollback { .. } => true,
            _ => false,
        }
    }
}

/// Operations queued by `Datasets::submit`.
pub struct Submitted {
    core: Arc<PoolCore>,
    txg: u64,
    outs: Vec<Arc<Mutex<Option<Result<()>>>>>,
}

impl Submitted {
    /// The txg the operations run in: they are on disk once it has synced.
    pub fn txg(&self) -> u64 {
        self.txg
    }

    /// Waits for the txg; each operation's result.
    pub fn wait(self) -> Result<Vec<Result<()>>> {
        self.core.txg.wait_synced(self.txg)?;
        Ok(self.outs.iter().map(|o| o.lock().take().unwrap_or_else(|| Err(Error::corrupt("a dataset task did not run")))).collect())
    }
}

struct Task {
    txg: u64,
    op: Op,
    out: Arc<Mutex<Option<Result<()>>>>,
}

pub(crate) struct OpenSet {
    pub os: Arc<Objset>,
    pub owner: Arc<Owner>,
}

pub(crate) struct State {
    pub recs: HashMap<u64, Rec>,
    pub dirty: BTreeSet<u64>,
    pub names: HashMap<String, u64>,
}

/// The datasets of a pool (OpenZFS's DSL). Reached through `Pool::datasets`.
pub struct Datasets {
    pub(crate) core: Arc<PoolCore>,
    pub(crate) mos: Arc<Objset>,
    pub(crate) root_id: u64,
    pub(crate) st: Mutex<State>,
    pub(crate) open: Mutex<HashMap<u64, OpenSet>>,
    tasks: Mutex<Vec<Task>>,
    synced: Mutex<[Vec<Arc<Objset>>; TXG_SIZE]>,
    me: Weak<Datasets>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::corrupt(format!("dataset invariant: {}", what())))
    }
}

impl Datasets {
    /// The directory of a pool whose root object set is `root`; `root_rec`
    /// is its record (None for a pool being created).
    pub(crate) fn new(core: Arc<PoolCore>, mos: Arc<Objset>, root_id: u64, root: Arc<Objset>, root_rec: Option<Rec>) -> Arc<Datasets> {
        Arc::new_cyclic(|me: &Weak<Datasets>| {
            let mut recs = HashMap::new();
            let (prev, ro) = match &root_rec {
                Some(r) => (r.prev_snap_txg, r.props.get("readonly").is_some_and(|v| v == "on")),
                None => (0, false),
            };
            if let Some(mut r) = root_rec {
                if !r.has_referenced {
                    // A pool from before space accounting: its root set's
                    // own count is the starting point.
                    r.referenced = root.used_bytes() + root.root_bp().asize_total();
                    r.has_referenced = true;
                }
                recs.insert(root_id, r);
            }
            let owner = Arc::new(Owner::new(root_id, &core.name, false, prev, ro, me.clone()));
            root.set_owner(owner.clone());
            let mut open = HashMap::new();
            open.insert(root_id, OpenSet { os: root, owner });
            Datasets {
                core,
                mos,
                root_id,
                st: Mutex::new(State { recs, dirty: BTreeSet::new(), names: HashMap::new() }),
                open: Mutex::new(open),
                tasks: Mutex::new(Vec::new()),
                synced: Mutex::new(Default::default()),
                me: me.clone(),
            }
        })
    }

    fn pool(&self) -> &str {
        &self.core.name
    }

    // ---- records ----------------------------------------------------------

    pub(crate) fn get_rec(&self, st: &mut State, id: u64) -> Result<Rec> {
        if let Some(r) = st.recs.get(&id) {
            return Ok(r.clone());
        }
        let m = crate::pool::read_kv(&self.mos, id).map_err(|e| e.context(format!("dataset record {}", id)))?;
        let r = Rec::decode(id, &m)?;
        st.recs.insert(id, r.clone());
        Ok(r)
    }

    fn put(st: &mut State, r: Rec) {
        st.dirty.insert(r.id);
        st.recs.insert(r.id, r);
    }

    pub(crate) fn lookup(&self, st: &mut State, name: &str) -> Result<Option<u64>> {
        if name == self.pool() {
            return Ok(Some(self.root_id));
        }
        if let Some(&id) = st.names.get(name) {
            return Ok(Some(id));
        }
        let table = self.get_rec(st, self.root_id)?.index;
        let id = index::lookup(&self.mos, table, name)?;
        if let Some(id) = id {
            st.names.insert(name.to_string(), id);
        }
        Ok(id)
    }

    pub(crate) fn resolve(&self, st: &mut State, name: &str) -> Result<Rec> {
        names::parse(name, self.pool())?;
        match self.lookup(st, name)? {
            Some(id) => self.get_rec(st, id),
            None => Err(Error::not_found(format!("dataset '{}' does not exist", name))),
        }
    }

    /// Snapshots of a file system, newest first.
    pub(crate) fn snapshots_of(&self, st: &mut State, head: &Rec) -> Result<Vec<Rec>> {
        let mut out = Vec::new();
        let mut p = head.prev_snap;
        while p != 0 {
            let s = self.get_rec(st, p)?;
            if s.head != head.id {
                break; // the origin of a clone
            }
            p = s.prev_snap;
            out.push(s);
        }
        Ok(out)
    }

    pub(crate) fn children_of(&self, st: &mut State, r: &Rec) -> Result<Vec<Rec>> {
        let mut out = Vec::new();
        let mut c = r.child_first;
        while c != 0 {
            let rc = self.get_rec(st, c)?;
            c = rc.sib_next;
            out.push(rc);
        }
        Ok(out)
    }

    // ---- the public operations ------------------------------------------

    /// Runs `ops` as sync tasks of one txg, in order (destroys of file
    /// systems and rollbacks first: they run before the txg's object sets
    /// sync); waits for the txg and returns each operation's result.
    pub fn run(&self, ops: Vec<Op>) -> Result<Vec<Result<()>>> {
        self.submit(ops)?.wait()
    }

    /// Queues `ops` for the open txg without waiting (see `run`).
    pub fn submit(&self, ops: Vec<Op>) -> Result<Submitted> {
        for op in &ops {
            self.precheck(op)?;
        }
        let tx = Tx::begin(&self.core)?;
        let txg = tx.txg();
        let outs: Vec<_> = ops.iter().map(|_| Arc::new(Mutex::new(None))).collect();
        {
            let mut t = self.tasks.lock();
            for (op, out) in ops.into_iter().zip(&outs) {
                t.push(Task { txg, op, out: out.clone() });
            }
        }
        drop(tx);
        Ok(Submitted { core: self.core.clone(), txg, outs })
    }

    fn run_one(&self, op: Op) -> Result<()> {
        self.run(vec![op])?.pop().unwrap_or_else(|| Err(Error::corrupt("no result")))
    }

    /// Checks names and values before anything is queued.
    fn precheck(&self, op: &Op) -> Result<()> {
        let check_props = |p: &[(String, String)]| p.iter().try_for_each(|(k, v)| props::validate(k, v).map(|_| ()));
        match op {
            Op::Create { name, props, .. } | Op::Clone { name, props, .. } => {
                let n = names::parse(name, self.pool())?;
                if n.snap.is_some() {
                    return Err(Error::invalid(format!("'{}' is a snapshot name; file systems have none", name)));
                }
                check_props(props)
            }
            Op::Snapshot { name } => match names::parse(name, self.pool())?.snap {
                Some(_) => Ok(()),
                None => Err(Error::invalid(format!("'{}' is not a snapshot name (fs@snap)", name))),
            },
            Op::Destroy { name } => names::parse(name, self.pool()).map(|_| ()),
            Op::Rollback { snapshot } => names::parse(snapshot, self.pool()).map(|_| ()),
            Op::Rename { from, to } => {
                let (f, t) = (names::parse(from, self.pool())?, names::parse(to, self.pool())?);
                match (&f.snap, &t.snap) {
                    (None, None) => Ok(()),
                    (Some(_), Some(_)) if f.fs == t.fs => Ok(()),
                    _ => Err(Error::invalid(format!("cannot rename '{}' to '{}': a snapshot keeps its file system", from, to))),
                }
            }
            Op::Set { name, prop, value } => {
                names::parse(name, self.pool())?;
                match value {
                    Some(v) => props::validate(prop, v).map(|_| ()),
                    None => props::check_inheritable(prop),
                }
            }
        }
    }

    /// Creates a file system (`zfs create [-p] -o k=v name`).
    pub fn create(&self, name: &str, props: &[(&str, &str)], create_parents: bool) -> Result<()> {
        let props = props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.run_one(Op::Create { name: name.into(), props, parents: create_parents })
    }

    /// Takes a snapshot `fs@snap`: O(1), whatever the size of `fs`.
    pub fn snapshot(&self, name: &str) -> Result<()> {
        self.run_one(Op::Snapshot { name: name.into() })
    }

    /// Clones snapshot `origin` into the new file system `name`.
    pub fn clone_snapshot(&self, origin: &str, name: &str, props: &[(&str, &str)]) -> Result<()> {
        let props = props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.run_one(Op::Clone { origin: origin.into(), name: name.into(), props })
    }

    /// Rolls the file system back to `snapshot`, its latest snapshot.
    pub fn rollback(&self, snapshot: &str) -> Result<()> {
        self.run_one(Op::Rollback { snapshot: snapshot.into() })
    }

    /// Renames `from` to `to` (`zfs rename`): a file system moves with its
    /// descendants and snapshots; a snapshot is renamed within its file system.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.run_one(Op::Rename { from: from.into(), to: to.into() })
    }

    pub fn set(&self, name: &str, prop: &str, value: &str) -> Result<()> {
        self.run_one(Op::Set { name: name.into(), prop: prop.into(), value: Some(value.into()) })
    }

    /// Removes the local value: the property is inherited (or its default) again.
    pub fn inherit(&self, name: &str, prop: &str) -> Result<()> {
        self.run_one(Op::Set { name: name.into(), prop: prop.into(), value: None })
    }

    /// Destroys a snapshot or a file system; `recursive` also destroys its
    /// children and snapshots (snapshots first, then file systems, deepest
    /// first, in two txgs). A snapshot with clones is never destroyed.
    pub fn destroy(&self, name: &str, recursive: bool) -> Result<()> {
        if !recursive || name.contains('@') {
            return self.run_one(Op::Destroy { name: name.into() });
        }
        let (snaps, fss) = {
            let mut st = self.st.lock();
            let top = self.resolve(&mut st, name)?;
            if top.id == self.root_id {
                return Err(Error::invalid(format!("'{}' is the pool's root dataset: destroy the pool instead", name)));
            }
            let mut fss = Vec::new();
            let mut snaps = Vec::new();
            let mut stack = vec![top];
            while let Some(r) = stack.pop() {
                for s in self.snapshots_of(&mut st, &r)? {
                    if let Some(&c) = s.clones.iter().next() {
                        let cname = self.get_rec(&mut st, c)?.name;
                        return Err(Error::new(ErrorKind::Busy, format!("snapshot '{}' has dependent clones: '{}' (destroy it first)", s.name, cname)));
                    }
                    snaps.push(s.name);
                }
                stack.extend(self.children_of(&mut st, &r)?);
                fss.push(r.name);
            }
            (snaps, fss)
        };
        let ops = snaps.into_iter().map(|name| Op::Destroy { name }).collect();
        self.run(ops)?.into_iter().collect::<Result<Vec<()>>>()?;
        let ops = fss.into_iter().rev().map(|name| Op::Destroy { name }).collect();
        self.run(ops)?.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(())
    }

    pub fn exists(&self, name: &str) -> bool {
        let mut st = self.st.lock();
        self.resolve(&mut st, name).is_ok()
    }

    /// The object set of a file system or snapshot, opened on first use.
    /// A snapshot's is read-only.
    pub fn objset(&self, name: &str) -> Result<Arc<Objset>> {
        let mut st = self.st.lock();
        let r = self.resolve(&mut st, name)?;
        if let Some(o) = self.open.lock().get(&r.id) {
            return Ok(o.os.clone());
        }
        let props = self.objset_props(&mut st, &r)?;
        let ro = !r.snapshot && self.effective(&mut st, &r, "readonly")?.value == "on";
        let os = Objset::open(self.core.clone(), r.id, &r.name, &r.bp, ObjsetType::Dataset, props)?;
        let owner = Arc::new(Owner::new(r.id, &r.name, r.snapshot, r.prev_snap_txg, ro, self.me.clone()));
        os.set_owner(owner.clone());
        self.open.lock().insert(r.id, OpenSet { os: os.clone(), owner });
        Ok(os)
    }

    /// Object sets open now (file systems and snapshots).
    pub fn open_count(&self) -> usize {
        self.open.lock().len()
    }

    /// One property (settable or computed) with its source.
    pub fn get(&self, name: &str, prop: &str) -> Result<PropValue> {
        let mut st = self.st.lock();
        let r = self.resolve(&mut st, name)?;
        if !props::is_settable(prop) && !props::READONLY.contains(&prop) {
            return Err(Error::invalid(format!("unknown property '{}'", prop)));
        }
        self.prop_value(&mut st, &r, prop, &mut HashMap::new())
    }

    /// Every property of a dataset.
    pub fn get_all(&self, name: &str) -> Result<Vec<(String, PropValue)>> {
        let mut st = self.st.lock();
        let r = self.resolve(&mut st, name)?;
        self.all_props(&mut st, &r, &mut HashMap::new())
    }

    fn all_props(&self, st: &mut State, r: &Rec, memo: &mut HashMap<u64, u64>) -> Result<Vec<(String, PropValue)>> {
        props::all_names().into_iter().map(|p| Ok((p.to_string(), self.prop_value(st, r, p, memo)?))).collect()
    }

    /// `root` and (with `recursive`) everything below it, file systems in
    /// depth-first order, each followed by its snapshots oldest first.
    pub fn list(&self, root: &str, recursive: bool, types: Types) -> Result<Vec<DatasetInfo>> {
        let mut st = self.st.lock();
        let top = self.resolve(&mut st, root)?;
        let mut memo = HashMap::new();
        let mut out = Vec::new();
        if top.snapshot {
            out.push(DatasetInfo { name: top.name.clone(), kind: DatasetKind::Snapshot, props: self.all_props(&mut st, &top, &mut memo)? });
            return Ok(out);
        }
        let mut stack = vec![top];
        while let Some(r) = stack.pop() {
            if types.filesystems {
                out.push(DatasetInfo { name: r.name.clone(), kind: DatasetKind::Filesystem, props: self.all_props(&mut st, &r, &mut memo)? });
            }
            if types.snapshots {
                for s in self.snapshots_of(&mut st, &r)?.into_iter().rev() {
                    out.push(DatasetInfo { name: s.name.clone(), kind: DatasetKind::Snapshot, props: self.all_props(&mut st, &s, &mut memo)? });
                }
            }
            if recursive {
                let mut kids = self.children_of(&mut st, &r)?;
                kids.sort_by(|a, b| b.name.cmp(&a.name));
                stack.extend(kids);
            }
        }
        Ok(out)
    }

    /// Names only (no properties): cheap listing of `root`'s subtree.
    pub fn names(&self, root: &str, recursive: bool, types: Types) -> Result<Vec<String>> {
        let mut st = self.st.lock();
        let top = self.resolve(&mut st, root)?;
        if top.snapshot {
            return Ok(vec![top.name]);
        }
        let mut out = Vec::new();
        let mut stack = vec![top];
        while let Some(r) = stack.pop() {
            if types.filesystems {
                out.push(r.name.clone());
            }
            if types.snapshots {
                out.extend(self.snapshots_of(&mut st, &r)?.into_iter().rev().map(|s| s.name));
            }
            if recursive {
                stack.extend(self.children_of(&mut st, &r)?);
            }
        }
        Ok(out)
    }

    // ---- properties -------------------------------------------------------

    /// The value of a settable property, with its source.
    pub(crate) fn effective(&self, st: &mut State, r: &Rec, prop: &str) -> Result<PropValue> {
        if !r.snapshot {
            if let Some(v) = r.props.get(prop) {
                return Ok(PropValue { value: v.clone(), source: Source::Local });
            }
        }
        let fs_name = if r.snapshot { r.name.split('@').next().unwrap_or(&r.name).to_string() } else { r.name.clone() };
        if props::inherits(prop) {
            let mut a = if r.snapshot { r.head } else { r.parent };
            while a != 0 {
                let ar = self.get_rec(st, a)?;
                if let Some(v) = ar.props.get(prop) {
                    let value = if prop == "mountpoint" { mount_below(v, &fs_name, &ar.name) } else { v.clone() };
                    return Ok(PropValue { value, source: Source::Inherited(ar.name.clone()) });
                }
                a = ar.parent;
            }
        }
        let value = if prop == "mountpoint" { format!("/{}", fs_name) } else { props::default_of(prop).to_string() };
        Ok(PropValue { value, source: Source::Default })
    }

    fn prop_value(&self, st: &mut State, r: &Rec, prop: &str, memo: &mut HashMap<u64, u64>) -> Result<PropValue> {
        let ro = |v: String| Ok(PropValue { value: v, source: Source::None });
        let dash = || ro("-".to_string());
        match prop {
            "type" => ro(if r.snapshot { "snapshot" } else { "filesystem" }.into()),
            "creation" => ro(r.creation_time.to_string()),
            "referenced" => ro(r.referenced.to_string()),
            "compressratio" => {
                let ratio = if r.ref_psize == 0 { 1.0 } else { r.ref_lsize as f64 / r.ref_psize as f64 };
                ro(format!("{:.2}x", ratio))
            }
            "written" => ro(self.written(st, r)?.to_string()),
            "origin" if r.origin != 0 && !r.snapshot => ro(self.get_rec(st, r.origin)?.name),
            "origin" => dash(),
            "used" if r.snapshot => ro(self.unique(st, r)?.to_string()),
            "used" => ro(self.used(st, r.id, memo)?.to_string()),
            "available" | "usedbysnapshots" | "usedbydataset" | "usedbychildren" if r.snapshot => dash(),
            "available" => ro(self.available(st, r.id)?.to_string()),
            "usedbysnapshots" => ro(self.used_by_snapshots(st, r)?.to_string()),
            "usedbydataset" => ro(self.used_by_dataset(st, r)?.to_string()),
            "usedbychildren" => ro(self.used_by_children(st, r, memo)?.to_string()),
            "mountpoint" | "quota" | "reservation" | "canmount" if r.snapshot => dash(),
            p if props::is_settable(p) => self.effective(st, r, p),
            p => Err(Error::invalid(format!("unknown property '{}'", p))),
        }
    }

    pub(crate) fn objset_props(&self, st: &mut State, r: &Rec) -> Result<ObjsetProps> {
        let mut m = KvMap::new();
        for p in props::WRITE_PROPS {
            kv::put_str(&mut m, &format!("prop:{}", p), &self.effective(st, r, p)?.value);
        }
        crate::pool::objset_props(&m)
    }

    /// After a property change: every open object set takes its new
    /// write properties and read-only flag.
    fn refresh_open(&self, st: &mut State) -> Result<()> {
        let sets: Vec<(u64, Arc<Objset>, Arc<Owner>)> = self.open.lock().iter().map(|(id, o)| (*id, o.os.clone(), o.owner.clone())).collect();
        for (id, os, owner) in sets {
            let r = self.get_rec(st, id)?;
            os.set_props(self.objset_props(st, &r)?);
            let ro = !r.snapshot && self.effective(st, &r, "readonly")?.value == "on";
            owner.readonly.store(ro, Ordering::Release);
            *owner.limit.lock() = None;
        }
        Ok(())
    }

    // ---- syncing context ---------------------------------------------------

    /// Whether txg `txg` has dataset work: tasks or dirty object sets.
    pub(crate) fn has_work(&self, txg: u64) -> bool {
        if !self.tasks.lock().is_empty() {
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
                let parent = self.resolve(st, n.parent().unwrap_or(""))?;
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
        index::insert(&self.mos, txg, table, name, id)?;
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
        index::remove(&self.mos, txg, table, &r.name)?;
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
            let parent = self.resolve(st, t.parent().unwrap_or(""))?;
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
            index::remove(&self.mos, txg, table, &m.name)?;
            index::insert(&self.mos, txg, table, &new_name, m.id)?;
            st.names.remove(&m.name);
            st.names.insert(new_name.clone(), m.id);
            if let Some(o) = self.open.lock().get(&m.id) {
                *o.os.name.write() = new_name.clone();
                *o.owner.name.lock() = new_name.clone();
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

    // ---- invariants ---------------------------------------------------------

    /// Checks every invariant of the module docs over all records (walks
    /// everything: for tests and `Pool::check_invariants`).
    pub fn check_invariants(&self) -> Result<()> {
        let mut st = self.st.lock();
        let mut stack = vec![self.root_id];
        let mut bound = 0usize;
        while let Some(id) = stack.pop() {
            bound += 1;
            assert!(bound < 100_000_000, "dataset walk over its bound");
            let r = self.get_rec(&mut st, id)?;
            self.check_indexed(&mut st, &r)?;
            self.check_links(&mut st, &r)?;
            for c in self.check_children(&mut st, &r)? {
                stack.push(c);
            }
            self.check_chain(&mut st, &r)?;
            self.check_deadlist(&r)?;
            for s in self.snapshots_of(&mut st, &r)? {
                self.check_indexed(&mut st, &s)?;
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
    fn check_links(&self, st: &mut State, r: &Rec) -> Result<()> {
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
        let found = if r.id == self.root_id { Some(r.id) } else { index::lookup(&self.mos, self.get_rec(st, self.root_id)?.index, &r.name)? };
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

/// The mountpoint `fs` inherits from `ancestor`'s value `v`.
fn mount_below(v: &str, fs: &str, ancestor: &str) -> String {
    if v == "none" || v == "legacy" {
        return v.to_string();
    }
    let rel = fs.strip_prefix(ancestor).unwrap_or("").trim_start_matches('/');
    if rel.is_empty() {
        v.to_string()
    } else if v.ends_with('/') {
        format!("{}{}", v, rel)
    } else {
        format!("{}/{}", v, rel)
    }
}
