//! The dataset directory in memory: records, the name index, open object
//! sets, and the sync tasks that change them (see the module docs).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tarn_ondisk::dnode::ObjsetType;
use tarn_ondisk::kv::{self, KvMap};

use super::names;
use super::owner::Owner;
use super::props::{self, PropValue, Source};
use super::record::Rec;
use super::index;
use crate::error::{Error, ErrorKind, Result};
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
#[derive(Clone, Debug, serde::Serialize)]
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
    pub(crate) fn early(&self) -> bool {
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

pub(crate) struct Task {
    pub txg: u64,
    pub op: Op,
    pub out: Arc<Mutex<Option<Result<()>>>>,
}

pub(crate) struct OpenSet {
    pub os: Arc<Objset>,
    pub owner: Arc<Owner>,
}

pub(crate) struct State {
    pub recs: HashMap<u64, Rec>,
    pub dirty: BTreeSet<u64>,
    pub names: HashMap<String, u64>,
    /// The name index's maps a sync is changing (empty outside one).
    pub index: index::Pages,
}

/// The datasets of a pool (OpenZFS's DSL). Reached through `Pool::datasets`.
pub struct Datasets {
    pub(crate) core: Arc<PoolCore>,
    pub(crate) mos: Arc<Objset>,
    pub(crate) root_id: u64,
    pub(crate) st: Mutex<State>,
    pub(crate) open: Mutex<HashMap<u64, OpenSet>>,
    /// Intent logs of file systems (`logs.rs`).
    pub(crate) zils: Mutex<HashMap<u64, Arc<crate::zil::Zil>>>,
    pub(crate) tasks: Mutex<Vec<Task>>,
    pub(crate) synced: Mutex<[Vec<Arc<Objset>>; TXG_SIZE]>,
    pub(crate) me: Weak<Datasets>,
}

pub(crate) use crate::sys::clock::now_secs;

pub(crate) fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<()> {
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
                st: Mutex::new(State { recs, dirty: BTreeSet::new(), names: HashMap::new(), index: Default::default() }),
                open: Mutex::new(open),
                zils: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
                synced: Mutex::new(Default::default()),
                me: me.clone(),
            }
        })
    }

    pub(crate) fn pool(&self) -> &str {
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

    pub(crate) fn put(st: &mut State, r: Rec) {
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
        let id = st.index.lookup(&self.mos, table, name)?;
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
                    _ => Err(Error::invalid(format!("a snapshot keeps its file system: '{}' cannot become '{}'", from, to))),
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

    /// `zfs rollback -r`: destroys the snapshots taken after `snapshot`
    /// (newest first, in one txg; refused if any has clones), then rolls back.
    pub fn rollback_destroying_later(&self, snapshot: &str) -> Result<()> {
        let later = {
            let mut st = self.st.lock();
            let s = self.resolve(&mut st, snapshot)?;
            if !s.snapshot {
                return Err(Error::invalid(format!("'{}' is not a snapshot", snapshot)));
            }
            let head = self.get_rec(&mut st, s.head)?;
            let later: Vec<Rec> = self.snapshots_of(&mut st, &head)?.into_iter().take_while(|x| x.id != s.id).collect();
            for x in &later {
                if let Some(&c) = x.clones.iter().next() {
                    let cname = self.get_rec(&mut st, c)?.name;
                    return Err(Error::new(ErrorKind::Busy, format!("snapshot '{}' has dependent clones: '{}' (destroy it first)", x.name, cname)));
                }
            }
            later
        };
        let ops = later.into_iter().map(|x| Op::Destroy { name: x.name }).collect();
        self.run(ops)?.into_iter().collect::<Result<Vec<()>>>()?;
        self.rollback(snapshot)
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
    /// first, in two txgs), or for `fs@snap` the snapshot `snap` of every
    /// descendant that has it (`zfs destroy -r fs@snap`). A snapshot with
    /// clones is never destroyed.
    pub fn destroy(&self, name: &str, recursive: bool) -> Result<()> {
        if recursive && name.contains('@') {
            return self.destroy_snapshots(&self.snapshots_below(name)?);
        }
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

    /// What `zfs destroy -r fs@snap` destroys: `fs@snap` and `d@snap` for
    /// every descendant `d` of `fs` that has that snapshot, `fs`'s first.
    /// NotFound if `fs` or every one of them is missing.
    pub fn snapshots_below(&self, name: &str) -> Result<Vec<String>> {
        let n = names::parse(name, self.pool())?;
        let Some(snap) = n.snap else {
            return Err(Error::invalid(format!("'{}' is not a snapshot name (fs@snap)", name)));
        };
        let found: Vec<String> = self.names(&n.fs, true, Types::FILESYSTEMS)?.into_iter().map(|f| format!("{}@{}", f, snap)).filter(|s| self.exists(s)).collect();
        if found.is_empty() {
            return Err(Error::not_found(format!("could not find any snapshots to destroy: no '{}' in '{}' or below it", snap, n.fs)));
        }
        Ok(found)
    }

    /// Destroys snapshots in one txg, all or none: each is checked first —
    /// it exists and has no clones — and nothing is destroyed if one fails.
    pub fn destroy_snapshots(&self, names: &[String]) -> Result<()> {
        {
            let mut st = self.st.lock();
            for n in names {
                let r = self.resolve(&mut st, n)?;
                if !r.snapshot {
                    return Err(Error::invalid(format!("'{}' is not a snapshot", n)));
                }
                if let Some(&c) = r.clones.iter().next() {
                    let cname = self.get_rec(&mut st, c)?.name;
                    return Err(Error::new(ErrorKind::Busy, format!("snapshot '{}' has dependent clones: '{}' (destroy it first)", n, cname)));
                }
            }
        }
        let ops = names.iter().map(|n| Op::Destroy { name: n.clone() }).collect();
        self.run(ops)?.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
    }

    /// Whether `name` may be taken as a snapshot now — its file system
    /// exists and it does not — so that a command taking several checks
    /// them all before taking any (`zfs snapshot -r` is all or none).
    pub fn check_snapshot(&self, name: &str) -> Result<()> {
        let n = names::parse(name, self.pool())?;
        if n.snap.is_none() {
            return Err(Error::invalid(format!("'{}' is not a snapshot name (fs@snap)", name)));
        }
        let mut st = self.st.lock();
        self.resolve(&mut st, &n.fs)?;
        if self.lookup(&mut st, name)?.is_some() {
            return Err(Error::new(ErrorKind::Exists, format!("dataset '{}' already exists", name)));
        }
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

    /// The name of the dataset whose object set is number `id` (its record's
    /// object number, as bookmarks give it); NotFound once it is destroyed.
    pub fn name_of(&self, id: u64) -> Result<String> {
        let mut st = self.st.lock();
        let r = self.get_rec(&mut st, id)?;
        // A record that is no longer indexed under its name was destroyed.
        if self.lookup(&mut st, &r.name)? != Some(id) {
            return Err(Error::not_found(format!("dataset record {} is not a dataset's any more", id)));
        }
        Ok(r.name)
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
        self.prop_value(&mut st, &r, prop, &mut Memo::default())
    }

    /// Every property of a dataset.
    pub fn get_all(&self, name: &str) -> Result<Vec<(String, PropValue)>> {
        let mut st = self.st.lock();
        let r = self.resolve(&mut st, name)?;
        self.all_props(&mut st, &r, &mut Memo::default())
    }

    fn all_props(&self, st: &mut State, r: &Rec, memo: &mut Memo) -> Result<Vec<(String, PropValue)>> {
        props::all_names().into_iter().map(|p| Ok((p.to_string(), self.prop_value(st, r, p, memo)?))).collect()
    }

    /// `root` and (with `recursive`) everything below it, file systems in
    /// depth-first order, each followed by its snapshots oldest first.
    pub fn list(&self, root: &str, recursive: bool, types: Types) -> Result<Vec<DatasetInfo>> {
        let mut st = self.st.lock();
        let top = self.resolve(&mut st, root)?;
        let mut memo = Memo::default();
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

    /// The names of `name`'s direct children (file systems), unordered:
    /// O(children), whatever lies deeper.
    pub fn child_names(&self, name: &str) -> Result<Vec<String>> {
        let mut st = self.st.lock();
        let r = self.resolve(&mut st, name)?;
        if r.snapshot {
            return Ok(Vec::new());
        }
        Ok(self.children_of(&mut st, &r)?.into_iter().map(|c| c.name).collect())
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

    fn prop_value(&self, st: &mut State, r: &Rec, prop: &str, memo: &mut Memo) -> Result<PropValue> {
        let ro = |v: String| Ok(PropValue { value: v, source: Source::None });
        let dash = || ro("-".to_string());
        let ratio = |(lsize, psize): (u64, u64)| ro(format!("{:.2}x", if psize == 0 { 1.0 } else { lsize as f64 / psize as f64 }));
        match prop {
            "type" => ro(if r.snapshot { "snapshot" } else { "filesystem" }.into()),
            "creation" => ro(r.creation_time.to_string()),
            "referenced" => ro(r.referenced.to_string()),
            // As OpenZFS: a file system's ratio covers its descendants, a
            // snapshot's is of what it references.
            "compressratio" if !r.snapshot => ratio(self.tree_sizes(st, r, &mut memo.sizes)?),
            "compressratio" | "refcompressratio" => ratio((r.ref_lsize, r.ref_psize)),
            "written" => ro(self.written(st, r)?.to_string()),
            "origin" if r.origin != 0 && !r.snapshot => ro(self.get_rec(st, r.origin)?.name),
            "origin" => dash(),
            "used" if r.snapshot => ro(self.unique(st, r)?.to_string()),
            "used" => ro(self.used(st, r.id, &mut memo.used)?.to_string()),
            "available" | "usedbysnapshots" | "usedbydataset" | "usedbychildren" if r.snapshot => dash(),
            "available" => ro(self.available(st, r.id)?.to_string()),
            "usedbysnapshots" => ro(self.used_by_snapshots(st, r)?.to_string()),
            "usedbydataset" => ro(self.used_by_dataset(st, r)?.to_string()),
            "usedbychildren" => ro(self.used_by_children(st, r, &mut memo.used)?.to_string()),
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
    pub(crate) fn refresh_open(&self, st: &mut State) -> Result<()> {
        let sets: Vec<(u64, Arc<Objset>, Arc<Owner>)> = self.open.lock().iter().map(|(id, o)| (*id, o.os.clone(), o.owner.clone())).collect();
        for (id, os, owner) in sets {
            let r = self.get_rec(st, id)?;
            os.set_props(self.objset_props(st, &r)?);
            let ro = !r.snapshot && self.effective(st, &r, "readonly")?.value == "on";
            owner.readonly.store(ro, Ordering::Release);
            *owner.limit.lock() = None;
        }
        self.refresh_logbias(st)
    }
}

/// What computing properties of many datasets shares: the `used` of each
/// file system and the (logical, physical) bytes of each subtree.
#[derive(Default)]
pub(crate) struct Memo {
    pub used: HashMap<u64, u64>,
    pub sizes: HashMap<u64, (u64, u64)>,
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
