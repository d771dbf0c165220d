//! An object set in memory: object allocation, the open-context operations
//! (create, write, read, truncate, free) and the sync of a whole set.
//!
//! Object numbers are dnode slot numbers. New objects take slots from a
//! cursor, reserving enough for a dnode with a block pointer; an object that
//! could be stored inline grows its reservation while the slots after it are
//! still unclaimed (the usual case when files are created and written one
//! after another). Slots of freed objects are not reused yet.
//!
//! Lock order: an object's lock, then the object set's lock, then the dnode
//! array's (object 0) lock. The sync path takes them one at a time.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::{BlockPtr, ObjectType};
use tarn_ondisk::dnode::{Dnode, ObjsetPhys, ObjsetType, DNODE_BLOCK_SIZE, INDIRECT_BLOCK_SIZE, SLOTS_PER_BLOCK, SLOT_SIZE};

use super::state::{slot, ObjState, Source};
use super::sync::{new_dnode, sync_objects, DnodeUpdate, SyncCtx};
use super::Object;
use crate::error::{Error, ErrorKind, Result};
use crate::io::{block, WriteGroup, WriteProps};
use crate::pool::core::PoolCore;
use crate::pool::errlog::Bookmark;
use crate::sys::buf::AlignedBuf;
use crate::txg::{TxHold, TXG_SIZE};

/// Slots reserved for a new object: a dnode header and one block pointer.
const DEFAULT_SLOTS: usize = 3;
/// Largest object offset (2^62): keeps block arithmetic far from overflow.
pub const MAX_OBJECT_BYTES: u64 = 1 << 62;
/// Syncs a writer short of space waits for while frees are on their way:
/// the txg holding a delete, then the two its frees stay deferred for.
pub const ROOM_WAIT_SYNCS: u32 = 3;

/// A transaction: membership of the open txg. Dropping it releases the txg.
pub struct Tx {
    core: Arc<PoolCore>,
    hold: Option<TxHold>,
    txg: u64,
}

impl Tx {
    pub(crate) fn begin(core: &Arc<PoolCore>) -> Result<Tx> {
        core.check_writable()?;
        let hold = core.txg.assign()?;
        let txg = hold.txg;
        Ok(Tx { core: core.clone(), hold: Some(hold), txg })
    }
    pub fn txg(&self) -> u64 {
        self.txg
    }
    pub fn commit(self) {}
}

impl Drop for Tx {
    fn drop(&mut self) {
        if let Some(h) = self.hold.take() {
            self.core.txg.release(h);
        }
    }
}

/// The block size of an object after a write ending at `end`: while it
/// has one block, that block grows to fit, up to the record size (or the
/// fixed size it was created with); after that it stays.
fn grown_blksz(st: &ObjState, end: u64, recordsize: u32) -> u32 {
    if st.maxblkid > 0 || st.size > st.blksz as u64 {
        return st.blksz;
    }
    let cap = if st.dn.maxblksz >= 512 { recordsize.min(st.dn.maxblksz) } else { recordsize };
    let target = if end <= cap as u64 { end.div_ceil(512) * 512 } else { cap as u64 } as u32;
    target.max(st.blksz)
}

/// Whether an error says space is short (the pool's or a quota).
fn is_short(e: &Error) -> bool {
    matches!(e.kind, ErrorKind::NoSpace | ErrorKind::Quota)
}

/// The owner of an object set (its dataset, `crate::dataset`): asked before
/// every open-context change and told of every block the set writes or stops
/// referencing in syncing context. The MOS has no owner: its blocks are
/// simply allocated and freed.
pub trait ObjsetOwner: Send + Sync {
    /// May `bytes` more bytes be dirtied in `txg`? (0: any change at all —
    /// refused for snapshots and read-only datasets.) Counts them against
    /// the owner's limits when they may.
    fn check_write(&self, txg: u64, bytes: u64) -> Result<()>;
    /// Would `bytes` more fit the owner's limits (quota, others'
    /// reservations)? Asked before a transaction joins a txg
    /// (`Objset::begin_for`); counts nothing.
    fn check_room(&self, bytes: u64) -> Result<()> {
        let _ = bytes;
        Ok(())
    }
    /// Bytes writers may still dirty under the owner's limits, net of what
    /// is pending (None: no limit beyond the pool's).
    fn room(&self) -> Result<Option<u64>> {
        Ok(None)
    }
    /// Bytes dirtied in txgs that have not synced yet.
    fn pending(&self) -> u64 {
        0
    }
    /// May the set be read? (Not once its dataset is destroyed: its blocks
    /// may be reused.)
    fn check_read(&self) -> Result<()> {
        Ok(())
    }
    /// The sync wrote `bp` for this set.
    fn block_born(&self, bp: &BlockPtr);
    /// The set no longer references `bp`: free it, or keep it for a
    /// snapshot that still does (syncing context, object locks held).
    fn block_freed(&self, core: &PoolCore, bp: &BlockPtr, txg: u64) -> Result<()>;
}

/// Properties that shape how an object set writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjsetProps {
    pub write: WriteProps,
    pub recordsize: u32,
    /// `primarycache`: what of this set's reads the ARC keeps.
    pub primarycache: CachePolicy,
    /// `secondarycache`: what of it the L2ARC may take from the ARC.
    pub secondarycache: CachePolicy,
}

/// The values of `primarycache` and `secondarycache`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CachePolicy {
    #[default]
    All,
    Metadata,
    None,
}

impl CachePolicy {
    pub fn parse(s: &str) -> Option<CachePolicy> {
        Some(match s {
            "all" => CachePolicy::All,
            "metadata" => CachePolicy::Metadata,
            "none" => CachePolicy::None,
            _ => return None,
        })
    }

    /// Whether a block of this kind may be cached under this policy.
    pub fn allows(self, metadata: bool) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => metadata,
            CachePolicy::None => false,
        }
    }
}

/// Where a read of an object set's blocks may leave them: its
/// `primarycache` (the ARC) and `secondarycache` (the L2ARC). Every read of
/// the set's blocks — data, indirect blocks, dnode blocks, directories —
/// goes through one, so `primarycache=none` keeps all of them out of the
/// ARC and `metadata` keeps only the metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadCaching {
    pub primary: CachePolicy,
    pub secondary: CachePolicy,
}

impl ReadCaching {
    /// Everything may be cached: the pool's own metadata, tools.
    pub const ALL: ReadCaching = ReadCaching { primary: CachePolicy::All, secondary: CachePolicy::All };

    /// (the ARC keeps `bp`'s block, the L2ARC may take it).
    pub fn of(self, bp: &BlockPtr) -> (bool, bool) {
        let meta = bp.otype.is_metadata() || bp.level > 0;
        (self.primary.allows(meta), self.secondary.allows(meta))
    }
}

/// What `inspect` and callers learn about an object.
#[derive(Clone, Debug)]
pub struct ObjectInfo {
    pub id: u64,
    pub otype: ObjectType,
    pub size: u64,
    pub blksz: u32,
    pub maxblkid: u64,
    pub nlevels: u8,
    pub used_bytes: u64,
    pub inline: bool,
    pub slots: usize,
    pub dnode: Dnode,
}

struct OsState {
    objects: HashMap<u64, Arc<Object>>,
    dirty: [BTreeSet<u64>; TXG_SIZE],
    next_object: u64,
    object_count: u64,
    used_bytes: u64,
    root_bp: BlockPtr,
    /// Objects synced in each txg, cleaned up when the txg's writes land.
    syncing: [Vec<Arc<Object>>; TXG_SIZE],
}

impl OsState {
    fn empty() -> Self {
        OsState {
            objects: HashMap::new(),
            dirty: Default::default(),
            next_object: 1,
            object_count: 0,
            used_bytes: 0,
            root_bp: BlockPtr::default(),
            syncing: Default::default(),
        }
    }
}

pub struct Objset {
    pub(crate) core: Arc<PoolCore>,
    /// The dataset record number in the meta object set (0 for the MOS itself).
    pub id: u64,
    pub name: RwLock<String>,
    ostype: ObjsetType,
    props: RwLock<ObjsetProps>,
    meta: Arc<Object>,
    st: Mutex<OsState>,
    owner: OnceLock<Arc<dyn ObjsetOwner>>,
}

impl Objset {
    /// Opens an object set from its root block (a hole: a new, empty set).
    pub(crate) fn open(core: Arc<PoolCore>, id: u64, name: &str, root: &BlockPtr, ostype: ObjsetType, props: ObjsetProps) -> Result<Arc<Self>> {
        let phys = if root.is_hole() {
            ObjsetPhys {
                ostype,
                meta_dnode: {
                    let mut d = Dnode::new(ObjectType::DnodeArray, DNODE_BLOCK_SIZE as u32, 0);
                    d.datablksz = DNODE_BLOCK_SIZE as u32;
                    d
                },
                next_object: 1,
                object_count: 0,
                used_bytes: 0,
            }
        } else {
            let at = Bookmark::objset_root(id);
            let what = || format!("root block of object set '{}'", name);
            let data = core.read_block_cached(root, crate::io::IoClass::SyncRead, &what, true, true, Some(&at))?;
            ObjsetPhys::decode(&data)?
        };
        let meta = Arc::new(Object { id: 0, st: Mutex::new(ObjState::new(id, 0, phys.meta_dnode.clone(), 3)) });
        Ok(Arc::new(Objset {
            core,
            id,
            name: RwLock::new(name.to_string()),
            ostype,
            props: RwLock::new(props),
            meta,
            st: Mutex::new(OsState {
                objects: HashMap::new(),
                dirty: Default::default(),
                next_object: phys.next_object.max(1),
                object_count: phys.object_count,
                used_bytes: phys.used_bytes,
                root_bp: *root,
                syncing: Default::default(),
            }),
            owner: OnceLock::new(),
        }))
    }

    /// Gives the set its owner (once, right after opening).
    pub(crate) fn set_owner(&self, owner: Arc<dyn ObjsetOwner>) {
        if self.owner.set(owner).is_err() {
            panic!("object set '{}' already has an owner", self.name.read());
        }
    }

    pub(crate) fn owner(&self) -> Option<&dyn ObjsetOwner> {
        self.owner.get().map(|o| o.as_ref())
    }

    pub(super) fn check_write(&self, txg: u64, bytes: u64) -> Result<()> {
        match self.owner.get() {
            Some(o) => o.check_write(txg, bytes),
            None => Ok(()),
        }
    }

    /// Begins a transaction that will dirty about `bytes` in blocks of up
    /// to `piece` bytes (OpenZFS's `dmu_tx_assign` with its space
    /// estimate): refused with *no space* or *quota* before joining a txg
    /// when they do not fit. When they do not fit only for now — frees
    /// wait in the allocator for their txg + 2, or a delete has not synced
    /// yet — it makes the pool sync and asks again, up to
    /// [`ROOM_WAIT_SYNCS`] times (OpenZFS's `dmu_tx_wait` on `ERESTART`),
    /// so space freed a moment ago is there for the writer.
    pub fn begin_for(&self, bytes: u64, piece: u64) -> Result<Tx> {
        let mut waited = 0;
        loop {
            match self.check_room(bytes, piece) {
                Ok(()) => return self.begin(),
                Err(e) if is_short(&e) && waited < ROOM_WAIT_SYNCS && self.core.frees_pending() => {
                    self.core.check_writable()?;
                    self.core.txg.wait_synced(0)?;
                    waited += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Would `bytes` more fit, under the owner's limits and in the pool?
    fn check_room(&self, bytes: u64, piece: u64) -> Result<()> {
        if let Some(o) = self.owner.get() {
            o.check_room(bytes)?;
        }
        self.core.check_space(bytes, piece)
    }

    /// What writers of this set may still dirty: the pool's room for
    /// records of the set's record size (counting frees on their way) and
    /// the owner's (quota, reservations).
    pub fn room(&self) -> Result<u64> {
        let pool = self.core.room_bytes(self.props().recordsize as u64);
        Ok(match self.owner.get().map(|o| o.room()).transpose()?.flatten() {
            Some(r) => r.min(pool),
            None => pool,
        })
    }

    /// Bytes this set's writers dirtied that have not synced yet.
    pub fn pending_bytes(&self) -> u64 {
        self.owner.get().map_or(0, |o| o.pending())
    }

    /// May the set be read (see `ObjsetOwner::check_read`)?
    pub(super) fn check_read(&self) -> Result<()> {
        match self.owner.get() {
            Some(o) => o.check_read(),
            None => Ok(()),
        }
    }

    /// Frees a block this set no longer references, through its owner.
    fn release_block(&self, bp: &BlockPtr, txg: u64) -> Result<()> {
        match self.owner.get() {
            Some(o) => o.block_freed(&self.core, bp, txg),
            None => self.core.free_block(bp, txg),
        }
    }

    /// Replaces the whole in-memory state by the set `root` names (a
    /// rollback, syncing context): every unsynced change is dropped.
    /// Writers must not be inside an operation on the set.
    pub(crate) fn reset(&self, root: &BlockPtr) -> Result<()> {
        let fresh = Objset::open(self.core.clone(), self.id, &self.name.read(), root, self.ostype, self.props())?;
        let meta = std::mem::replace(&mut *fresh.meta.st.lock(), ObjState::new(self.id, 0, Dnode::new(ObjectType::DnodeArray, 0, 0), 0));
        *self.meta.st.lock() = meta;
        let new = std::mem::replace(&mut *fresh.st.lock(), OsState::empty());
        *self.st.lock() = new;
        Ok(())
    }

    pub fn begin(&self) -> Result<Tx> {
        Tx::begin(&self.core)
    }

    /// Waits until the txg open now has synced: every change made to the
    /// set before the call is on disk (what `Pool::sync` does, for holders
    /// of the set alone, such as the daemon's load generator).
    pub fn wait_synced(&self) -> Result<()> {
        self.core.check_writable()?;
        self.core.txg.wait_synced(0)
    }

    pub fn props(&self) -> ObjsetProps {
        *self.props.read()
    }

    /// The cache policies reads of this set follow, as of now.
    pub fn caching(&self) -> ReadCaching {
        let p = self.props();
        ReadCaching { primary: p.primarycache, secondary: p.secondarycache }
    }

    pub fn set_props(&self, p: ObjsetProps) {
        *self.props.write() = p;
    }

    pub fn root_bp(&self) -> BlockPtr {
        self.st.lock().root_bp
    }

    pub fn object_count(&self) -> u64 {
        self.st.lock().object_count
    }

    pub fn used_bytes(&self) -> u64 {
        self.st.lock().used_bytes
    }

    /// Objects currently held in memory.
    pub fn loaded_objects(&self) -> usize {
        self.st.lock().objects.len()
    }

    pub fn next_object(&self) -> u64 {
        self.st.lock().next_object
    }

    pub(super) fn what(&self, obj: u64) -> String {
        format!("object {} of '{}'", obj, self.name.read())
    }

    /// Puts the object in front of an error from below: a damaged indirect
    /// or dnode block names only itself.
    pub(super) fn about(&self, obj: u64) -> impl Fn(Error) -> Error + '_ {
        move |e| e.context(self.what(obj))
    }

    /// Creates an object; returns its number.
    pub fn create(&self, tx: &Tx, otype: ObjectType) -> Result<u64> {
        self.create_with_slots(tx, otype, DEFAULT_SLOTS)
    }

    pub fn create_with_slots(&self, tx: &Tx, otype: ObjectType, slots: usize) -> Result<u64> {
        self.create_with_room(tx, otype, slots, slots)
    }

    /// Creates an object of `slots` slots that reserves `room` slots (in a
    /// fresh dnode block unless they fit in the current one): room for the
    /// object to grow into an inline copy of its data (a small file), which
    /// no object created later takes. Unused reserved slots stay zero (and
    /// compress away in the dnode block).
    pub fn create_with_room(&self, tx: &Tx, otype: ObjectType, slots: usize, room: usize) -> Result<u64> {
        self.check_write(tx.txg(), 0)?;
        self.create_in_room(tx.txg(), otype, slots, room)
    }

    /// Creates an object in `txg` directly (syncing context, see `write_txg`).
    pub(crate) fn create_in(&self, txg: u64, otype: ObjectType, slots: usize) -> Result<u64> {
        self.create_in_room(txg, otype, slots, slots)
    }

    /// As `create_in`, with blocks fixed at `blksz` (see `create_with_blksz`).
    pub(crate) fn create_in_blksz(&self, txg: u64, otype: ObjectType, slots: usize, blksz: u32) -> Result<u64> {
        if !blksz.is_power_of_two() || !(512..=self.props().recordsize).contains(&blksz) {
            return Err(Error::invalid(format!("block size {} is not a power of two from 512 to the record size", blksz)));
        }
        let id = self.create_in(txg, otype, slots)?;
        self.object(id)?.st.lock().dn.maxblksz = blksz;
        Ok(id)
    }

    fn create_in_room(&self, txg: u64, otype: ObjectType, slots: usize, room: usize) -> Result<u64> {
        let room = room.clamp(slots, tarn_ondisk::dnode::MAX_SLOTS);
        if !(1..=tarn_ondisk::dnode::MAX_SLOTS).contains(&slots) || otype == ObjectType::None {
            return Err(Error::invalid(format!("cannot create an object of type {} with {} slots", otype.name(), slots)));
        }
        let recordsize = self.props().recordsize;
        let mut st = self.st.lock();
        let mut id = st.next_object;
        let in_block = (id % SLOTS_PER_BLOCK as u64) as usize;
        if in_block + room > SLOTS_PER_BLOCK {
            id += (SLOTS_PER_BLOCK - in_block) as u64;
        }
        // The whole room is the object's from the start: objects created
        // after it (by another writer, between this one's create and its
        // first write) go after the room, so it can still grow into it.
        st.next_object = id + room as u64;
        st.object_count += 1;
        let mut os = ObjState::new(self.id, id, new_dnode(otype, recordsize, txg), room);
        os.rec(txg).created = true;
        st.objects.insert(id, Arc::new(Object { id, st: Mutex::new(os) }));
        st.dirty[slot(txg)].insert(id);
        Ok(id)
    }

    /// Intent-log replay: new objects are numbered from `end` on, so that
    /// the numbers the replayed creates had stay free for `create_at`.
    pub fn reserve_objects(&self, end: u64) {
        let mut st = self.st.lock();
        st.next_object = st.next_object.max(end);
    }

    /// Creates object `id` — a number below the cursor that no object has
    /// (the number a replayed create had) — as `create_with_room` would
    /// have (`blksz`: fixed block size, as `create_with_blksz`). The set's
    /// synced cursor may be past numbers its txg never used (the cursor is
    /// shared by all open txgs), so being below it says nothing: the slot
    /// itself must be empty.
    pub fn create_at(&self, tx: &Tx, id: u64, otype: ObjectType, slots: usize, room: usize, blksz: Option<u32>) -> Result<u64> {
        self.check_write(tx.txg(), 0)?;
        let room = room.clamp(slots, tarn_ondisk::dnode::MAX_SLOTS);
        let in_block = (id % SLOTS_PER_BLOCK as u64) as usize;
        let below = id >= 1 && in_block + room <= SLOTS_PER_BLOCK && id.saturating_add(room as u64) <= self.st.lock().next_object;
        if !below {
            return Err(Error::corrupt(format!("{}: cannot be created again: not a number the set handed out", self.what(id))));
        }
        match self.object(id) {
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
            Ok(_) => return Err(Error::corrupt(format!("{}: cannot be created again: it exists", self.what(id)))),
        }
        self.give_back_room(id)?;
        let mut st = self.st.lock();
        if st.objects.contains_key(&id) {
            return Err(Error::corrupt(format!("{}: cannot be created again: it exists", self.what(id))));
        }
        let recordsize = self.props().recordsize;
        st.object_count += 1;
        let mut os = ObjState::new(self.id, id, new_dnode(otype, recordsize, tx.txg()), room);
        os.rec(tx.txg()).created = true;
        let obj = Arc::new(Object { id, st: Mutex::new(os) });
        if let Some(b) = blksz {
            obj.st.lock().dn.maxblksz = b;
        }
        st.objects.insert(id, obj);
        st.dirty[slot(tx.txg())].insert(id);
        Ok(id)
    }

    /// Before `create_at(id)`: an object in memory whose room reaches over
    /// `id` gives back the slots from `id` on. A loaded object counts the
    /// free slots after it as its room (`reserved_room`) — but the slots a
    /// replayed create takes again are free on disk too, and the object's
    /// dnode, padded to its room, would overwrite the new one at every
    /// sync. Fails (nothing changed) when the object's dnode fills them.
    fn give_back_room(&self, id: u64) -> Result<()> {
        let first = id.saturating_sub(tarn_ondisk::dnode::MAX_SLOTS as u64).max(1);
        let near: Vec<Arc<Object>> = {
            let st = self.st.lock();
            (first..id).filter_map(|o| st.objects.get(&o).cloned()).collect()
        };
        for o in near {
            let mut ost = o.st.lock();
            if o.id + ost.slots as u64 <= id {
                continue;
            }
            let keep = (id - o.id) as usize;
            if ost.dn.slots() > keep {
                return Err(Error::corrupt(format!("{}: cannot be created again: {} fills its slot", self.what(id), self.what(o.id))));
            }
            ost.slots = keep;
        }
        Ok(())
    }

    /// The in-memory object `obj`, loading its dnode if needed.
    pub(crate) fn object(&self, obj: u64) -> Result<Arc<Object>> {
        if obj == 0 {
            return Err(Error::invalid(format!("{} is the dnode array", self.what(obj))));
        }
        let mut st = self.st.lock();
        if let Some(o) = st.objects.get(&obj) {
            return Ok(o.clone());
        }
        if obj >= st.next_object {
            return Err(Error::not_found(format!("{} does not exist", self.what(obj))));
        }
        // An object whose dnode block cannot be read is lost as a whole:
        // the error log names it (not only the dnode block), so that the
        // file asked for can be named too.
        let dnode_at = Bookmark::dnode(self.id, obj);
        let (dn, slots) = self.load_dnode(&st, obj).inspect_err(|e| {
            if matches!(e.kind, crate::error::ErrorKind::Corrupt | crate::error::ErrorKind::Io) {
                self.core.record_lost(&dnode_at, &|| format!("the dnode of {}", self.what(obj)));
            }
        })?;
        self.core.errlog.cleared_by_read(&dnode_at);
        let o = Arc::new(Object { id: obj, st: Mutex::new(ObjState::new(self.id, obj, dn, slots)) });
        st.objects.insert(obj, o.clone());
        Ok(o)
    }

    fn load_dnode(&self, os: &OsState, obj: u64) -> Result<(Dnode, usize)> {
        let blkid = obj / SLOTS_PER_BLOCK as u64;
        let off = (obj % SLOTS_PER_BLOCK as u64) as usize * SLOT_SIZE;
        let mut buf = vec![0u8; DNODE_BLOCK_SIZE];
        let rc = self.caching();
        let (src, ahead) = {
            let mut m = self.meta.st.lock();
            let src = m.resolve_in(&self.core, blkid, rc).map_err(self.about(obj))?;
            (src, self.dnode_read_ahead(&mut m, blkid, rc).map_err(self.about(obj))?)
        };
        for bp in &ahead {
            self.core.prefetch(bp);
        }
        ObjState::fetch_in(&self.core, &src, &mut buf, &|| format!("dnode block {} of '{}'", blkid, self.name.read()), rc).map_err(self.about(obj))?;
        let dn = Dnode::decode(&buf[off..]).map_err(|e| Error::from(e).context(self.what(obj)))?;
        let dn = dn.ok_or_else(|| Error::not_found(format!("{} does not exist", self.what(obj))))?;
        let slots = dn.slots().max(DEFAULT_SLOTS.min(SLOTS_PER_BLOCK - off / SLOT_SIZE));
        let room = Self::reserved_room(os, obj, &buf, dn.slots());
        Ok((dn, slots.max(room)))
    }

    /// Read-ahead of dnode blocks, as OpenZFS prefetches dnodes: loading
    /// objects block after block of the dnode array (a walk of files made
    /// together: `ls -l`, `find`, a cold `stat` of each) is a sequential
    /// stream of the array like any other object's, and the blocks ahead are
    /// read while the walk works through this one. Further loads from the
    /// block a stream just read are not accesses of their own (they would
    /// start a stream each).
    fn dnode_read_ahead(&self, meta: &mut ObjState, blkid: u64, rc: ReadCaching) -> Result<Vec<BlockPtr>> {
        let bs = DNODE_BLOCK_SIZE as u64;
        let (offset, end) = (blkid * bs, (blkid + 1) * bs);
        if !rc.primary.allows(true) || meta.streams.iter().any(|s| s.next == end) {
            return Ok(Vec::new());
        }
        self.read_ahead(meta, offset, end, rc)
    }

    /// The slots a loaded object may count as its own: its dnode's, and the
    /// free slots after it up to the next object (on disk or only in
    /// memory), the allocation cursor or the end of the block. The dnode
    /// records only the slots it fills, but the ones reserved at creation
    /// beyond them were never given to anyone else, and slots are not
    /// reused — so an object keeps room for a block pointer next to its
    /// bonus after being dropped from memory and reloaded.
    fn reserved_room(os: &OsState, obj: u64, block: &[u8], own: usize) -> usize {
        let first = (obj % SLOTS_PER_BLOCK as u64) as usize;
        let mut room = own;
        while first + room < SLOTS_PER_BLOCK && room < tarn_ondisk::dnode::MAX_SLOTS {
            let id = obj + room as u64;
            if id >= os.next_object || os.objects.contains_key(&id) || block[(first + room) * SLOT_SIZE] != 0 {
                break;
            }
            room += 1;
        }
        room
    }

    fn mark_dirty(&self, obj: u64, txg: u64) {
        self.st.lock().dirty[slot(txg)].insert(obj);
    }

    /// Writes `data` at `offset` of object `obj`.
    pub fn write(&self, tx: &Tx, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        self.check_write(tx.txg(), data.len() as u64)?;
        if !data.is_empty() {
            let end = offset.saturating_add(data.len() as u64);
            self.core.check_space(data.len() as u64, self.write_piece(obj, end)?)?;
        }
        self.write_txg(tx.txg(), obj, offset, data)
    }

    /// Writes into `txg` directly: for the sync path, which updates records
    /// of the txg it is syncing (no hold, no throttle, no space check — the
    /// slop reserve is there for exactly this).
    pub(crate) fn write_txg(&self, txg: u64, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_OBJECT_BYTES)
            .ok_or_else(|| Error::invalid(format!("write past the largest object size on {}", self.what(obj))))?;
        let o = self.object(obj)?;
        let props = self.props();
        let mut added = 0u64;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        self.grow_blksz(&mut st, obj, end, props.recordsize, txg, &mut added)?;
        let bs = st.blksz as u64;
        for blkid in offset / bs..=(end - 1) / bs {
            let bstart = blkid * bs;
            let a = offset.max(bstart) - bstart;
            let b = end.min(bstart + bs) - bstart;
            let full = a == 0 && b == bs;
            let buf = self.dirty_block(&mut st, obj, txg, blkid, full, &mut added)?;
            let src = (bstart + a - offset) as usize;
            buf[a as usize..b as usize].copy_from_slice(&data[src..src + (b - a) as usize]);
        }
        st.size = st.size.max(end);
        st.maxblkid = st.maxblkid.max((end - 1) / bs);
        self.finish_change(st, obj, txg, added);
        Ok(())
    }

    /// The end of every change in open context: the txg's record takes the
    /// object's new size, a small object claims room to go inline, and the
    /// dirty bytes and the object are accounted to the txg.
    pub(super) fn finish_change(&self, mut st: parking_lot::MutexGuard<'_, ObjState>, obj: u64, txg: u64, added: u64) {
        self.sync_rec_header(&mut st, txg);
        self.reserve_inline(&mut st, obj);
        drop(st);
        self.core.txg.dirty_add(txg, added);
        self.mark_dirty(obj, txg);
    }

    fn sync_rec_header(&self, st: &mut ObjState, txg: u64) {
        let (size, blksz, maxblkid) = (st.size, st.blksz, st.maxblkid);
        let r = st.rec(txg);
        r.size = size;
        r.blksz = blksz;
        r.maxblkid = maxblkid;
    }

    /// While an object has one block, that block grows to fit its data, up to
    /// the record size (so small objects do not occupy whole records).
    pub(super) fn grow_blksz(&self, st: &mut ObjState, obj: u64, end: u64, recordsize: u32, txg: u64, added: &mut u64) -> Result<()> {
        let target = grown_blksz(st, end, recordsize);
        if target <= st.blksz {
            return Ok(());
        }
        let rc = self.caching();
        let src = st.resolve_in(&self.core, 0, rc).map_err(self.about(obj))?;
        let mut buf = AlignedBuf::zeroed(target as usize);
        ObjState::fetch_in(&self.core, &src, &mut buf[..st.blksz as usize], &|| self.what(obj), rc)?;
        let prev = st.rec(txg).put_block(0, Arc::new(buf)).map_or(0, |b| b.len() as u64);
        *added += target as u64 - prev;
        st.blksz = target;
        Ok(())
    }

    /// The largest block a write ending at `end` dirties in object `obj`:
    /// its block size once grown to fit (`grow_blksz`), and an indirect
    /// block once the object has more than one block. What the pool's free
    /// space is counted in for the write (`PoolCore::check_space`).
    pub fn write_piece(&self, obj: u64, end: u64) -> Result<u64> {
        let o = self.object(obj)?;
        let st = o.st.lock();
        let bs = grown_blksz(&st, end, self.props().recordsize) as u64;
        Ok(if end > bs { bs.max(INDIRECT_BLOCK_SIZE as u64) } else { bs })
    }

    /// The txg's dirty copy of block `blkid`, made on first touch.
    fn dirty_block<'a>(&self, st: &'a mut ObjState, obj: u64, txg: u64, blkid: u64, full: bool, added: &mut u64) -> Result<&'a mut AlignedBuf> {
        let bs = st.blksz as usize;
        if !st.rec(txg).blocks.contains_key(&blkid) {
            // Every byte is written below: by the caller (full) or by fetch.
            let mut buf = AlignedBuf::recycled(bs);
            if !full {
                let rc = self.caching();
                let src = st.resolve_in(&self.core, blkid, rc).map_err(self.about(obj))?;
                ObjState::fetch_in(&self.core, &src, &mut buf, &|| self.what(obj), rc)?;
            }
            // Replaces a clone of this txg, whose data was just fetched.
            st.rec(txg).put_block(blkid, Arc::new(buf));
            *added += bs as u64;
        }
        let b = st.rec(txg).blocks.get_mut(&blkid).ok_or_else(|| Error::corrupt("dirty block vanished"))?;
        Ok(Arc::make_mut(b))
    }

    /// Claims the dnode slots an inline copy of the object would need, if
    /// they directly follow its own and nobody has them yet.
    fn reserve_inline(&self, st: &mut ObjState, obj: u64) {
        let max = self.core.tunables.read().tarn_inline_max_bytes;
        if st.maxblkid > 0 || st.size > max {
            return;
        }
        let need = tarn_ondisk::dnode::Dnode::inline_len(st.dn.gen, st.bonus.len(), st.size).div_ceil(SLOT_SIZE);
        self.claim_slots(st, obj, need);
    }

    /// Grows the object's reservation to `need` slots if the slots after its
    /// own are still unclaimed; true when it has at least `need` slots.
    fn claim_slots(&self, st: &mut ObjState, obj: u64, need: usize) -> bool {
        if need <= st.slots {
            return true;
        }
        let mut os = self.st.lock();
        let in_block = (obj % SLOTS_PER_BLOCK as u64) as usize;
        if os.next_object == obj + st.slots as u64 && in_block + need <= SLOTS_PER_BLOCK {
            os.next_object = obj + need as u64;
            st.slots = need;
            return true;
        }
        false
    }

    /// Creates an object whose blocks never grow past `blksz` (a power of
    /// two from 512 to the record size): for structures that want small
    /// fixed blocks, such as the hashed directories of the POSIX layer.
    pub fn create_with_blksz(&self, tx: &Tx, otype: ObjectType, slots: usize, blksz: u32) -> Result<u64> {
        if !blksz.is_power_of_two() || !(512..=self.props().recordsize).contains(&blksz) {
            return Err(Error::invalid(format!("block size {} is not a power of two from 512 to the record size", blksz)));
        }
        let id = self.create_with_slots(tx, otype, slots)?;
        let o = self.object(id)?;
        o.st.lock().dn.maxblksz = blksz;
        Ok(id)
    }

    /// Sets the object's bonus: bytes the layer above keeps in the dnode (the
    /// POSIX layer's inode attributes). The bonus must fit the object's dnode
    /// slots together with a block pointer, so that the object can always
    /// leave the inline form; the reservation grows when the slots after it
    /// are free, else the call fails with `Invalid` and nothing changes.
    pub fn set_bonus(&self, tx: &Tx, obj: u64, bonus: &[u8]) -> Result<()> {
        let o = self.object(obj)?;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        let need = (tarn_ondisk::dnode::DNODE_HEADER + tarn_ondisk::bp::BP_SIZE + bonus.len()).div_ceil(SLOT_SIZE);
        if need > tarn_ondisk::dnode::MAX_SLOTS || !self.claim_slots(&mut st, obj, need) {
            return Err(Error::invalid(format!("a bonus of {} bytes does not fit the {} dnode slots of {}", bonus.len(), st.slots, self.what(obj))));
        }
        st.bonus = bonus.to_vec();
        st.rec(tx.txg()).bonus = Some(bonus.to_vec());
        self.finish_change(st, obj, tx.txg(), 0);
        Ok(())
    }

    /// The object's current bonus (see `set_bonus`).
    pub fn bonus(&self, obj: u64) -> Result<Vec<u8>> {
        let o = self.object(obj)?;
        let st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        Ok(st.bonus.clone())
    }

    /// Deallocates [offset, offset + len) within the object's size: whole
    /// blocks inside the range are freed (they read as zeros, a hole), the
    /// partial blocks at its ends are zeroed. The size does not change.
    pub fn punch(&self, tx: &Tx, obj: u64, offset: u64, len: u64) -> Result<()> {
        let o = self.object(obj)?;
        let txg = tx.txg();
        let mut added = 0;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        let end = offset.saturating_add(len).min(st.size);
        if offset >= end {
            return Ok(());
        }
        let bs = st.blksz as u64;
        let (first_full, end_full) = (offset.div_ceil(bs), end / bs);
        let (head, tail) = (offset / bs, (end - 1) / bs);
        for blkid in if head == tail { vec![head] } else { vec![head, tail] } {
            let (bstart, bend) = (blkid * bs, (blkid + 1) * bs);
            if offset <= bstart && bend <= end {
                continue;
            }
            let buf = self.dirty_block(&mut st, obj, txg, blkid, false, &mut added)?;
            let a = (offset.max(bstart) - bstart) as usize;
            let b = (end.min(bend) - bstart) as usize;
            buf[a..b].fill(0);
        }
        if first_full < end_full {
            let r = st.rec(txg);
            r.forget_range(first_full, end_full);
            r.frees.push((first_full, end_full));
        }
        self.finish_change(st, obj, txg, added);
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` (short at the end of the object).
    pub fn read(&self, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.check_read()?;
        let o = self.object(obj)?;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        let end = offset.saturating_add(len as u64).min(st.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        let bs = st.blksz as u64;
        // primarycache/secondarycache: blocks of this set enter the ARC
        // (and may go on to the L2ARC) only where the policy allows —
        // indirect blocks as metadata, the object's blocks as what its type
        // says; an object whose blocks the ARC does not keep is not read
        // ahead either (read-ahead lands in the ARC).
        let rc = self.caching();
        let mut srcs = Vec::new();
        for blkid in offset / bs..=(end - 1) / bs {
            srcs.push((blkid, st.resolve_in(&self.core, blkid, rc).map_err(self.about(obj))?));
        }
        let keep = rc.primary.allows(st.dn.otype.is_metadata());
        let ahead = if keep { self.read_ahead(&mut st, offset, end, rc)? } else { Vec::new() };
        drop(st);
        // Blocks after the first are read in parallel with it; read-ahead
        // goes to the async-read class.
        for (_, src) in srcs.iter().skip(1) {
            if let (Source::Bp(bp, _), true) = (src, keep) {
                self.core.prefetch(bp);
            }
        }
        for bp in &ahead {
            self.core.prefetch(bp);
        }
        let mut out = vec![0u8; (end - offset) as usize];
        for (blkid, src) in srcs {
            let bstart = blkid * bs;
            let a = offset.max(bstart) - bstart;
            let b = end.min(bstart + bs) - bstart;
            let dst = (bstart + a - offset) as usize;
            if let Source::Zero = src {
                continue;
            }
            let what = || format!("block {} of {}", blkid, self.what(obj));
            ObjState::copy_range_cached(&self.core, &src, a as usize, &mut out[dst..dst + (b - a) as usize], &what, rc)?;
        }
        Ok(out)
    }

    /// Sequential-stream detection, as OpenZFS's dmu_zfetch: up to
    /// `MAX_STREAMS` streams per object. A read that starts where a stream's
    /// last read ended continues it and doubles its read-ahead distance (from
    /// the access size) up to 4 MiB, then grows it by an eighth up to
    /// `zfetch_max_distance`. A read no stream expects starts a new stream
    /// (replacing the least recently used one) that reads ahead from its
    /// next access on. Returns the blocks to read ahead.
    fn read_ahead(&self, st: &mut ObjState, offset: u64, end: u64, rc: ReadCaching) -> Result<Vec<BlockPtr>> {
        let (max, off) = {
            let t = self.core.tunables.read();
            (t.zfetch_max_distance, t.zfs_prefetch_disable != 0)
        };
        if off {
            st.streams.clear();
            return Ok(Vec::new());
        }
        let stats = &self.core.prefetch_stats;
        let Some(i) = st.streams.iter().position(|s| s.next == offset) else {
            stats.stream_misses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if st.streams.len() == super::state::MAX_STREAMS {
                st.streams.remove(0);
            }
            // A read at offset 0 is the start of a stream already.
            let dist = if offset == 0 { 0 } else { u64::MAX };
            st.streams.push(super::state::Stream { next: end, dist, until: 0 });
            if offset != 0 {
                return Ok(Vec::new());
            }
            let i = st.streams.len() - 1;
            st.streams[i].dist = 0;
            return self.advance_stream(st, i, offset, end, max, rc);
        };
        stats.stream_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Most recently used last.
        let s = st.streams.remove(i);
        st.streams.push(s);
        let i = st.streams.len() - 1;
        if st.streams[i].dist == u64::MAX {
            st.streams[i].dist = 0;
        }
        self.advance_stream(st, i, offset, end, max, rc)
    }

    fn advance_stream(&self, st: &mut ObjState, i: usize, offset: u64, end: u64, max: u64, rc: ReadCaching) -> Result<Vec<BlockPtr>> {
        let bs = st.blksz as u64;
        let len = end - offset;
        let s = &mut st.streams[i];
        s.next = end;
        s.dist = match s.dist {
            0 => len.max(bs),
            d if d < 4 << 20 => d * 2,
            d => d + d / 8,
        }
        .min(max);
        let next = end.div_ceil(bs);
        let target = (end + s.dist).div_ceil(bs).min(st.maxblkid + 1);
        let from = s.until.max(next);
        s.until = s.until.max(target);
        let mut out = Vec::new();
        // Bounded: at most zfetch_max_distance / block size blocks.
        for blkid in from..target {
            if let Source::Bp(bp, _) = st.resolve_in(&self.core, blkid, rc)? {
                out.push(bp);
            }
        }
        Ok(out)
    }

    /// Sets the object's size, freeing blocks past it.
    pub fn truncate(&self, tx: &Tx, obj: u64, size: u64) -> Result<()> {
        self.check_write(tx.txg(), 0)?;
        self.truncate_txg(tx.txg(), obj, size)
    }

    pub(crate) fn truncate_txg(&self, txg: u64, obj: u64, size: u64) -> Result<()> {
        if size > MAX_OBJECT_BYTES {
            return Err(Error::invalid(format!("size {} too large for {}", size, self.what(obj))));
        }
        let o = self.object(obj)?;
        let mut added = 0;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        if size < st.size {
            let bs = st.blksz as u64;
            if !size.is_multiple_of(bs) {
                let buf = self.dirty_block(&mut st, obj, txg, size / bs, false, &mut added)?;
                buf[(size % bs) as usize..].fill(0);
            }
            let first_free = size.div_ceil(bs);
            if first_free <= st.maxblkid || size == 0 {
                let r = st.rec(txg);
                r.forget_range(first_free, u64::MAX);
                r.frees.push((first_free, u64::MAX));
            }
            st.maxblkid = first_free.saturating_sub(1);
        } else if size > st.size {
            // Extending a one-block object (ftruncate or fallocate on a new
            // file) first grows its block to the record size, as OpenZFS's
            // zfs_extend does: otherwise the small block size would be
            // frozen and every later write would allocate a sector per
            // 512-byte block.
            let recordsize = self.props().recordsize;
            self.grow_blksz(&mut st, obj, size, recordsize, txg, &mut added)?;
        }
        st.size = size;
        self.finish_change(st, obj, txg, added);
        Ok(())
    }

    /// Frees the object and all its blocks.
    pub fn free(&self, tx: &Tx, obj: u64) -> Result<()> {
        self.check_write(tx.txg(), 0)?;
        self.free_in(tx.txg(), obj)
    }

    /// Frees an object in `txg` directly (syncing context).
    pub(crate) fn free_in(&self, txg: u64, obj: u64) -> Result<()> {
        let o = self.object(obj)?;
        let mut st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was already freed", self.what(obj))));
        }
        st.freed = true;
        let r = st.rec(txg);
        r.freed = true;
        // Clones of this txg are withdrawn (the tree they would join goes).
        r.clones.clear();
        drop(st);
        let mut os = self.st.lock();
        os.object_count = os.object_count.saturating_sub(1);
        os.dirty[slot(txg)].insert(obj);
        Ok(())
    }

    pub fn info(&self, obj: u64) -> Result<ObjectInfo> {
        let o = self.object(obj)?;
        let st = o.st.lock();
        if st.freed {
            return Err(Error::not_found(format!("{} was freed", self.what(obj))));
        }
        Ok(ObjectInfo {
            id: obj,
            otype: st.dn.otype,
            size: st.size,
            blksz: st.blksz,
            maxblkid: st.maxblkid,
            nlevels: st.dn.nlevels,
            used_bytes: st.dn.used_bytes,
            inline: st.dn.inline.is_some(),
            slots: st.slots,
            dnode: st.dn.clone(),
        })
    }

    /// Block pointers of the synced tree, level by level, for `inspect`:
    /// (level, block index, pointer) for every non-hole pointer.
    pub fn tree(&self, obj: u64, limit: usize) -> Result<Vec<(u8, u64, BlockPtr)>> {
        let o = if obj == 0 { self.meta.clone() } else { self.object(obj)? };
        let mut st = o.st.lock();
        let mut out = Vec::new();
        let Some(top) = st.dn.blkptr else { return Ok(out) };
        let nl = st.dn.nlevels;
        out.push((nl - 1, 0, top));
        let mut stack = vec![(nl - 1, 0u64)];
        while let Some((l, idx)) = stack.pop() {
            if l == 0 || out.len() >= limit {
                continue;
            }
            st.ensure_path(&self.core, idx << (10 * l as u32)).map_err(self.about(obj))?;
            let bps = st.ind.get(&(l, idx)).map(|b| b.bps.clone()).unwrap_or_default();
            for (c, bp) in bps.iter().enumerate().rev() {
                if !bp.is_hole() {
                    stack.push((l - 1, (idx << 10) + c as u64));
                }
            }
            for (c, bp) in bps.iter().enumerate() {
                if !bp.is_hole() && out.len() < limit {
                    out.push((l - 1, (idx << 10) + c as u64, *bp));
                }
            }
        }
        out.sort_by_key(|(l, i, _)| (std::cmp::Reverse(*l), *i));
        Ok(out)
    }

    /// Objects as of the last sync, in number order, at most `limit`
    /// (scans the dnode array).
    pub fn list(&self, limit: usize) -> Result<Vec<(u64, Dnode)>> {
        let maxblkid = self.meta.st.lock().dn.maxblkid;
        let has_blocks = self.meta.st.lock().dn.blkptr.is_some_and(|b| !b.is_hole());
        let mut out = Vec::new();
        if !has_blocks {
            return Ok(out);
        }
        let mut buf = vec![0u8; DNODE_BLOCK_SIZE];
        for blkid in 0..=maxblkid {
            let src = self.meta.st.lock().resolve(&self.core, blkid)?;
            ObjState::fetch(&self.core, &src, &mut buf, &|| format!("dnode block {} of '{}'", blkid, self.name.read()))?;
            let mut slot = 0;
            while slot < SLOTS_PER_BLOCK && out.len() < limit {
                let obj = blkid * SLOTS_PER_BLOCK as u64 + slot as u64;
                match Dnode::decode(&buf[slot * SLOT_SIZE..]) {
                    Ok(Some(dn)) => {
                        slot += dn.slots().max(1);
                        out.push((obj, dn));
                    }
                    Ok(None) => slot += 1,
                    Err(e) => return Err(Error::from(e).context(self.what(obj))),
                }
            }
        }
        Ok(out)
    }

    /// The dnode array's dnode as of the last sync.
    pub fn meta_dnode(&self) -> Dnode {
        self.meta.st.lock().dn.clone()
    }

    /// True when the txg has changes for this object set.
    pub fn is_dirty(&self, txg: u64) -> bool {
        let st = self.st.lock();
        !st.dirty[slot(txg)].is_empty() || st.root_bp.is_hole()
    }

    /// Writes this object set's changes of `txg`; returns its new root block
    /// pointer, or None when nothing changed. A set that has never been
    /// written gets its (empty) root block even with no changes, so that
    /// import finds a root block for every dataset, empty ones included.
    pub(crate) fn sync(&self, txg: u64, group: &Arc<WriteGroup>) -> Result<Option<BlockPtr>> {
        let (objs, never_written): (Vec<Arc<Object>>, bool) = {
            let mut st = self.st.lock();
            let ids = std::mem::take(&mut st.dirty[slot(txg)]);
            (ids.iter().filter_map(|id| st.objects.get(id).cloned()).collect(), st.root_bp.is_hole())
        };
        if objs.is_empty() && !never_written {
            return Ok(None);
        }
        let inline_max = self.core.tunables.read().tarn_inline_max_bytes;
        let caching = self.caching();
        let ctx = SyncCtx { core: &self.core, txg, group, props: self.props().write, caching, inline_max, owner: self.owner() };
        let updates = sync_objects(&ctx, &objs)?;
        let mut used: i64 = updates.iter().map(|u| u.used_delta).sum();
        used += self.patch_dnodes(txg, &updates)?;
        let w = self.props().write;
        let meta_props = WriteProps { copies: w.copies, redundant_metadata: w.redundant_metadata, ..WriteProps::METADATA };
        let meta_ctx = SyncCtx { core: &self.core, txg, group, props: meta_props, caching, inline_max: 0, owner: self.owner() };
        let meta_updates = sync_objects(&meta_ctx, std::slice::from_ref(&self.meta))?;
        used += meta_updates.iter().map(|u| u.used_delta).sum::<i64>();
        let bp = self.write_root(txg, group, used)?;
        let mut st = self.st.lock();
        let mut all = objs;
        all.push(self.meta.clone());
        st.syncing[slot(txg)] = all;
        Ok(Some(bp))
    }

    /// Copies synced dnodes into the dnode array (syncing context).
    fn patch_dnodes(&self, txg: u64, updates: &[DnodeUpdate]) -> Result<i64> {
        let rc = self.caching();
        let mut meta = self.meta.st.lock();
        for u in updates {
            let blkid = u.id / SLOTS_PER_BLOCK as u64;
            let off = (u.id % SLOTS_PER_BLOCK as u64) as usize * SLOT_SIZE;
            if !meta.rec(txg).blocks.contains_key(&blkid) {
                let src = meta.resolve_in(&self.core, blkid, rc)?;
                let mut buf = AlignedBuf::zeroed(DNODE_BLOCK_SIZE);
                ObjState::fetch_in(&self.core, &src, &mut buf, &|| format!("dnode block {}", blkid), rc)?;
                meta.rec(txg).blocks.insert(blkid, Arc::new(buf));
            }
            let r = meta.rec(txg);
            let buf = Arc::make_mut(r.blocks.get_mut(&blkid).ok_or_else(|| Error::corrupt("dnode block vanished"))?);
            let n = u.slots * SLOT_SIZE;
            match &u.encoded {
                Some(e) => buf[off..off + n].copy_from_slice(e),
                None => buf[off..off + n].fill(0),
            }
            meta.maxblkid = meta.maxblkid.max(blkid);
        }
        meta.size = (meta.maxblkid + 1) * DNODE_BLOCK_SIZE as u64;
        meta.blksz = DNODE_BLOCK_SIZE as u32;
        let (size, maxblkid) = (meta.size, meta.maxblkid);
        let r = meta.rec(txg);
        r.size = size;
        r.blksz = DNODE_BLOCK_SIZE as u32;
        r.maxblkid = maxblkid;
        Ok(0)
    }

    fn write_root(&self, txg: u64, group: &Arc<WriteGroup>, used_delta: i64) -> Result<BlockPtr> {
        let meta_dnode = self.meta.st.lock().dn.clone();
        let (phys, old) = {
            let mut st = self.st.lock();
            st.used_bytes = (st.used_bytes as i64 + used_delta).max(0) as u64;
            let phys = ObjsetPhys {
                ostype: self.ostype,
                meta_dnode,
                next_object: st.next_object,
                object_count: st.object_count,
                used_bytes: st.used_bytes,
            };
            (phys, st.root_bp)
        };
        let buf = Arc::new(AlignedBuf::from_slice(&phys.encode()));
        let prep = block::prepare(&buf, buf.len(), ObjectType::Objset, 0, txg, WriteProps::METADATA, self.core.sector);
        // Without the root nothing below can be found: it is critical
        // metadata, kept twice (three times in the MOS) unless
        // `redundant_metadata=none`.
        let copies = self.props().write.copies_for(ObjectType::Objset, 0);
        let bp = self.core.write_block(prep, txg, copies, group, 0, None)?;
        if let Some(o) = self.owner() {
            o.block_born(&bp);
        }
        self.release_block(&old, txg)?;
        self.st.lock().root_bp = bp;
        Ok(bp)
    }

    /// After `txg`'s writes have landed: drop its dirty records and forget
    /// freed objects.
    pub(crate) fn sync_done(&self, txg: u64) {
        let objs = std::mem::take(&mut self.st.lock().syncing[slot(txg)]);
        let mut gone = Vec::new();
        let mut clean = Vec::new();
        // Indirect blocks written in this txg have landed: from now on
        // readers find them in the ARC (bounded by zfs_arc_max), not here.
        self.meta.st.lock().ind.retain(|_, b| b.dirty);
        for o in &objs {
            let mut st = o.st.lock();
            if st.dirty[slot(txg)].as_ref().is_some_and(|r| r.txg == txg) {
                st.dirty[slot(txg)] = None;
            }
            st.ind.retain(|_, b| b.dirty);
            if st.freed && !st.has_dirty() {
                gone.push(o.id);
            } else if !st.has_dirty() && o.id != 0 {
                clean.push(o);
            }
        }
        let limit = self.core.tunables.read().tarn_dnode_cache_objects as usize;
        let mut st = self.st.lock();
        for id in gone {
            st.objects.remove(&id);
        }
        // Clean objects past the limit are dropped from memory and reloaded
        // from their dnode when next used. Only objects nobody else holds
        // (the map and `objs` are the two references) may go: a holder could
        // be about to dirty it, and two in-memory copies must never exist.
        // Checked under the object-set lock, which `object()` takes to hand
        // out a reference, so no new holder can appear meanwhile.
        for o in clean {
            if st.objects.len() <= limit {
                break;
            }
            if Arc::strong_count(o) == 2 {
                st.objects.remove(&o.id);
            }
        }
    }
}
