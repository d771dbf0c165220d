//! Creating, opening, syncing and closing a pool. See the module docs of
//! `pool` for the sync sequence and import rules.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use tarn_ondisk::bp::{BlockPtr, ChecksumType, ObjectType};
use tarn_ondisk::dnode::ObjsetType;
use tarn_ondisk::kv::{self, KvMap};
use tarn_ondisk::label::{self, LabelConfig, PoolState, VdevKind, VdevNode};
use tarn_ondisk::uberblock::{Uberblock, FEATURE_BLOCK_CLONING, FEATURE_HOLE_VDEVS, FEATURE_INTENT_LOG, FEATURE_LOG_VDEVS, FEATURE_SPARES, FEATURE_VDEV_TREE, FORMAT_VERSION};

use super::alloc::metaslab::Allocator;
use super::core::PoolCore;
use super::events::{class, EventLimits, EventLog, Post};
use super::import::{plan_rewind, Found, Rewind};
use super::label::{clear_labels, read_labels, uberblock_slot, write_config_all};
use super::scan::{PassEnd, ScanFunc, ScanReport, ScanState, ScanStatus, Scanner, Start};
use super::spacemap;
use super::vdevs::{self, Layout, NewTop, TopSpec};
use super::vet::{Role, Vetted};
use crate::arc::{BlockCache, PoolCache};
use crate::dataset::{Datasets, Rec};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{CompressSetting, IoClass, Leaf, QueueLimits, RedundantMetadata, WriteGroup, WriteProps};
use crate::object::{Objset, ObjsetProps};
use crate::sys::clock::now_secs;
use crate::sys::device::{BlockDevice, Health};
use crate::sys::file::FileDevice;
use crate::tunables::Tunables;
use crate::txg::{ThrottleParams, TxgEngine};

/// The pool directory is the first object of the meta object set.
const POOL_DIR_OBJ: u64 = 1;
const KEY_ROOT: &str = "root_dataset";
/// Pool directory key naming the block reference table's MOS object.
const KEY_BRT: &str = "brt";
/// Pool directory key naming the error log's MOS object (`errlog`).
const KEY_ERRLOG: &str = "errlog";
/// Pool directory key naming the scan record's MOS object (`scan`).
const KEY_SCAN: &str = "scan";
/// Pool directory key naming the event ring's MOS object (`events`).
const KEY_EVENTS: &str = "events";
const KEY_BP: &str = "bp";

#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub ashift: u8,
    /// Create the files (sparse) with this size; otherwise they must exist.
    pub size: Option<u64>,
    /// Use devices that carry an exported pool's labels, another pool's
    /// cache header or a file-system signature (never a busy device; see
    /// `pool::vet`).
    pub force: bool,
    /// Cache devices (L2ARC) to add once the pool exists (`pool create …
    /// cache DEV`); vetted with the data devices, before anything is written.
    pub cache: Vec<PathBuf>,
    /// Hot spares to list once the pool exists (`pool create … spare
    /// DEV`); vetted with the data devices, before anything is written.
    pub spares: Vec<PathBuf>,
    /// Log vdevs to add once the pool exists (`pool create … log [mirror]
    /// DEV...`); vetted with the data devices, before anything is written.
    pub logs: Vec<TopSpec>,
    pub tunables: Tunables,
    /// Properties of the root dataset (`-O`).
    pub root_props: Vec<(String, String)>,
    /// Pool properties (`-o`).
    pub pool_props: Vec<(String, String)>,
    /// The ARC to cache in: None for the process's (`arc::shared`), as
    /// every pool of the daemon does; tests measuring one pool's cache give
    /// it one of its own.
    pub arc: Option<Arc<BlockCache>>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions { ashift: 12, size: None, force: false, cache: vec![], spares: vec![], logs: vec![], tunables: Tunables::default(), root_props: vec![], pool_props: vec![], arc: None }
    }
}

#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Open without writing anything (no lock, no sync thread).
    pub readonly: bool,
    pub tunables: Tunables,
    /// Open at an older txg when the newest cannot be opened, discarding
    /// the newer ones (`import -F`; see `pool::import`). Without it such an
    /// import fails, saying what it would discard. A txg more than two back
    /// must first pass the verifier: blocks the discarded txgs freed may
    /// have been reused.
    pub rewind: bool,
    /// Cache devices to use instead of opening the paths the pool recorded
    /// (in-memory devices in tests), matched by their headers.
    pub cache_devices: Vec<(String, Arc<dyn BlockDevice>)>,
    /// The ARC to cache in (see `CreateOptions::arc`).
    pub arc: Option<Arc<BlockCache>>,
    /// Import even when a log vdev is missing (`pool import
    /// --missing-log`, zpool's `-m`): the intent-log records on it are
    /// discarded, loudly (`pool::log_vdev`).
    pub missing_log: bool,
}


/// A vdev as `status` shows it: a device, or a mirror or RAID-Z group
/// with its children.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct VdevStatus {
    pub id: u32,
    pub path: String,
    /// `leaf`, `mirror`, `raidz1` … (`vdev::Vdev::type_name`).
    #[serde(default)]
    pub kind: String,
    #[serde(default, with = "crate::guid_json")]
    pub guid: u64,
    /// ONLINE, DEGRADED, FAULTED, OFFLINE, REMOVED or UNAVAIL (`vdev::State`).
    pub state: String,
    /// Why it is not online.
    #[serde(default)]
    pub fault: Option<String>,
    pub size: u64,
    pub allocated: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub direct_io: bool,
    /// Bytes rewritten onto the device from good copies since import.
    #[serde(default)]
    pub repaired_bytes: u64,
    /// A leaf's dirty time log: the oldest and newest txg it missed, while
    /// it has any (what a resilver copies onto it).
    #[serde(default)]
    pub missed_txgs: Option<(u64, u64)>,
    #[serde(default)]
    pub children: Vec<VdevStatus>,
    /// A top-level vdev's allocation class: `normal`, or `log` for a
    /// separate intent-log device (zpool's `logs` section).
    #[serde(default = "normal_class")]
    pub class: String,
}

fn normal_class() -> String {
    "normal".into()
}

/// The status of vdev `v` (its space from the allocator, given for a
/// top-level vdev and shared by its children). A leaf's device is asked
/// whether it is still whole (`Leaf::check`): a device truncated or
/// deleted while nothing was written is found now, not at the next write.
fn vdev_status(v: &crate::vdev::Vdev, size: u64, allocated: u64) -> VdevStatus {
    let (r, w, c) = v.leaf().map_or((0, 0, 0), |l| {
        let s = l.stats();
        (s.read_errors.load(Ordering::Relaxed), s.write_errors.load(Ordering::Relaxed), s.checksum_errors.load(Ordering::Relaxed))
    });
    let state = v.state();
    VdevStatus {
        id: v.id(),
        path: v.path.clone(),
        kind: v.type_name(),
        guid: v.guid,
        state: state.name().into(),
        fault: v.reason(),
        size,
        allocated,
        read_errors: r,
        write_errors: w,
        checksum_errors: c,
        direct_io: false,
        repaired_bytes: v.repaired_bytes.load(Ordering::Relaxed),
        missed_txgs: v.leaf().and_then(|_| v.dtl.lock().span()),
        children: v.children.iter().map(|ch| vdev_status(ch, size, allocated)).collect(),
        class: normal_class(),
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub name: String,
    #[serde(with = "crate::guid_json")]
    pub guid: u64,
    pub state: String,
    pub txg: u64,
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    pub fragmentation_pct: u32,
    pub vdevs: Vec<VdevStatus>,
    /// Why the pool is suspended.
    pub error: Option<String>,
    /// Permanent errors: blocks no copy of which could be read, in the
    /// error log (`error_log`) or beyond its bound.
    #[serde(default)]
    pub data_errors: u64,
    /// When suspended: the last txg on disk, its time, and what cannot be
    /// written (see `Suspension`).
    #[serde(default)]
    pub suspension: Option<Suspension>,
    /// The running or last scan, as recorded in the pool (`None`: none).
    #[serde(default)]
    pub scan: Option<super::scan::ScanStatus>,
    /// The hot spares (`pool::spare`), AVAIL, INUSE or UNAVAIL.
    #[serde(default)]
    pub spares: Vec<super::spare::SpareStatus>,
    /// The log vdevs (class `log`), as zpool's `logs` section; `vdevs`
    /// holds the others.
    #[serde(default)]
    pub logs: Vec<VdevStatus>,
    /// Intent-log records import discarded with a missing log device
    /// (`pool import --missing-log`), a line each.
    #[serde(default)]
    pub log_discarded: Vec<String>,
}

/// What a suspended pool has on disk and what it cannot write any more:
/// what `export -f` discards.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Suspension {
    /// Why the pool is suspended.
    pub reason: String,
    /// The last txg on disk and when it was written (seconds since 1970).
    pub synced_txg: u64,
    pub synced_time: u64,
    /// Txgs `first_lost_txg ..= last_lost_txg` and the bytes of changes
    /// they held will never be written (no txg when last < first).
    pub first_lost_txg: u64,
    pub last_lost_txg: u64,
    pub lost_bytes: u64,
    /// A device fault suspended it, which `pool clear` can end once the
    /// device is whole again (false: a sync failed; only `export -f`).
    #[serde(default)]
    pub resumable: bool,
    /// Writers waiting for the pool to resume (`failmode=wait`).
    #[serde(default)]
    pub waiting_writers: u64,
}

/// What one txg's sync did (the raw material of `pool txgs`, issue 4).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TxgRecord {
    pub txg: u64,
    /// Dirty bytes accounted to the txg when its sync began.
    pub dirty_bytes: u64,
    /// Milliseconds from the start of the sync until every write was queued,
    /// until every write had landed, and until the uberblock was durable.
    pub issue_ms: f64,
    pub write_ms: f64,
    pub sync_ms: f64,
    /// Physical writes and bytes the sync issued (all devices, after aggregation).
    pub write_ops: u64,
    pub write_bytes: u64,
    /// Time open and quiescing, and the throttle's delays and stalls.
    #[serde(flatten)]
    pub timing: crate::txg::TxgTiming,
}

/// Syncs remembered per pool.
const TXG_HISTORY: usize = 256;

struct SyncState {
    ub: Uberblock,
    cp_chain: Vec<BlockPtr>,
    log_chain: Vec<BlockPtr>,
    logs_since_cp: u64,
    /// A space checkpoint is due in this txg or the first after it that
    /// syncs (0: none asked for): a top-level vdev left the allocator
    /// (`checkpoint_from`).
    cp_due_txg: u64,
}

impl SyncState {
    /// The last synced tree as a walk takes it: the MOS root, its txg, and
    /// the space checkpoint and log blocks (which nothing else references).
    fn synced_tree(&self) -> (BlockPtr, u64, Vec<BlockPtr>) {
        let mut b = self.cp_chain.clone();
        b.extend(self.log_chain.iter().copied());
        (self.ub.mos, self.ub.txg, b)
    }
}

pub(crate) struct Shared {
    pub core: Arc<PoolCore>,
    pub mos: Arc<Objset>,
    pub root: Arc<Objset>,
    pub dsl: Arc<Datasets>,
    /// The pool's scan (scrub) and its record.
    pub(super) scan: Arc<Scanner>,
    sync: Mutex<SyncState>,
    pub(super) config: Mutex<LabelConfig>,
    /// Held while the vdev tree changes (`vdev_change`): one change at a time.
    pub(super) tree_lock: Mutex<()>,
    /// The pool directory (properties, cache devices, the table): written
    /// by the sync thread only, when `dir_dirty` says it changed.
    pool_props: Mutex<KvMap>,
    dir_dirty: std::sync::atomic::AtomicBool,
    history: Mutex<std::collections::VecDeque<TxgRecord>>,
    /// What the import rewound, and what it did without.
    rewound: Mutex<Option<Rewind>>,
    pub(super) open_warnings: Mutex<Vec<String>>,
    /// Devices with the open-file lock, kept alive as long as the pool
    /// (or until they leave it: `release_lock`).
    locks: Mutex<Vec<Arc<FileDevice>>>,
}

/// An open pool.
pub struct Pool {
    sh: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The hot spares' thread (`pool::spare`), when the pool writes.
    pub(super) spare_thread: Mutex<Option<JoinHandle<()>>>,
    closed: Mutex<bool>,
}

/// Validates a pool name the way zpool does.
pub fn validate_pool_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("invalid pool name '{}': {}", name, why)));
    let Some(first) = name.chars().next() else { return bad("name is empty") };
    if name.len() > 255 {
        return bad("name is longer than 255 characters");
    }
    if !first.is_ascii_alphabetic() {
        return bad("name must begin with a letter");
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-.: ".contains(*c)) || *c == ' ') {
        return bad(&format!("invalid character '{}'", c));
    }
    for reserved in ["mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup"] {
        if name.starts_with(reserved) && name[reserved.len()..].chars().all(|c| c.is_ascii_digit()) {
            return bad("name is reserved");
        }
    }
    if name.starts_with('c') && name[1..].chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return bad("name may not look like a device (c0...)");
    }
    Ok(())
}

pub(crate) fn new_guid(salt: &str) -> u64 {
    let mut h = blake3::Hasher::new();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    h.update(&now.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(salt.as_bytes());
    let mut urandom = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut urandom);
    }
    h.update(&urandom);
    let b = h.finalize();
    u64::from_le_bytes(b.as_bytes()[..8].try_into().expect("8 bytes")).max(1)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}


pub(crate) fn queue_limits(t: &Tunables) -> QueueLimits {
    let mut q = QueueLimits::default();
    q.min_active[IoClass::SyncRead.index()] = t.zfs_vdev_sync_read_min_active;
    q.max_active[IoClass::SyncRead.index()] = t.zfs_vdev_sync_read_max_active;
    q.min_active[IoClass::SyncWrite.index()] = t.zfs_vdev_sync_write_min_active;
    q.max_active[IoClass::SyncWrite.index()] = t.zfs_vdev_sync_write_max_active;
    q.min_active[IoClass::AsyncRead.index()] = t.zfs_vdev_async_read_min_active;
    q.max_active[IoClass::AsyncRead.index()] = t.zfs_vdev_async_read_max_active;
    q.min_active[IoClass::AsyncWrite.index()] = t.zfs_vdev_async_write_min_active;
    q.max_active[IoClass::AsyncWrite.index()] = t.zfs_vdev_async_write_max_active;
    q.min_active[IoClass::Scrub.index()] = t.zfs_vdev_scrub_min_active;
    q.max_active[IoClass::Scrub.index()] = t.zfs_vdev_scrub_max_active;
    q.max_active_total = t.zfs_vdev_max_active;
    q.aggregation_limit_bytes = t.zfs_vdev_aggregation_limit;
    q.read_gap_limit_bytes = t.zfs_vdev_read_gap_limit;
    q.write_gap_limit_bytes = t.zfs_vdev_write_gap_limit;
    q.async_write_active_min_dirty_percent = t.zfs_vdev_async_write_active_min_dirty_percent;
    q.async_write_active_max_dirty_percent = t.zfs_vdev_async_write_active_max_dirty_percent;
    q
}

/// Root dataset properties from a dataset record.
pub(crate) fn objset_props(rec: &KvMap) -> Result<ObjsetProps> {
    let compress = CompressSetting::parse(kv::get_str(rec, "prop:compression").unwrap_or("lz4"))?;
    let checksum = match kv::get_str(rec, "prop:checksum").unwrap_or("fletcher4") {
        "on" | "fletcher4" => ChecksumType::Fletcher4,
        "blake3" => ChecksumType::Blake3,
        "off" => ChecksumType::Off,
        other => return Err(Error::invalid(format!("bad checksum '{}': expected on, fletcher4, blake3 or off", other))),
    };
    let recordsize = match kv::get_str(rec, "prop:recordsize") {
        Some(s) => parse_recordsize(s)?,
        None => 128 << 10,
    };
    let copies = match kv::get_str(rec, "prop:copies") {
        Some(s) => s.parse::<u8>().ok().filter(|c| (1..=3).contains(c)).ok_or_else(|| Error::invalid(format!("bad copies '{}': expected 1, 2 or 3", s)))?,
        None => 1,
    };
    let policy = |name: &str| -> Result<crate::object::CachePolicy> {
        let v = kv::get_str(rec, &format!("prop:{}", name)).unwrap_or("all");
        crate::object::CachePolicy::parse(v).ok_or_else(|| Error::invalid(format!("bad {} '{}': expected all, metadata or none", name, v)))
    };
    let redundant = kv::get_str(rec, "prop:redundant_metadata").unwrap_or("all");
    let redundant_metadata = RedundantMetadata::parse(redundant)
        .ok_or_else(|| Error::invalid(format!("bad redundant_metadata '{}': expected all, most, some or none", redundant)))?;
    Ok(ObjsetProps { write: WriteProps { compress, checksum, copies, redundant_metadata }, recordsize, primarycache: policy("primarycache")?, secondarycache: policy("secondarycache")? })
}

/// Parses a record size: a power of two from 512 to 16M.
pub fn parse_recordsize(s: &str) -> Result<u32> {
    let v = crate::tunables::parse_size(s).unwrap_or(0);
    if !(512..=16 << 20).contains(&v) || !v.is_power_of_two() {
        return Err(Error::invalid(format!("bad recordsize '{}': a power of two from 512 to 16M", s)));
    }
    Ok(v as u32)
}

/// Validates and stores a dataset property into a record.
pub fn set_dataset_prop(rec: &mut KvMap, name: &str, value: &str) -> Result<()> {
    let value = crate::dataset::props::validate(name, value)?;
    let mut trial = rec.clone();
    kv::put_str(&mut trial, &format!("prop:{}", name), &value);
    objset_props(&trial)?;
    *rec = trial;
    Ok(())
}

impl Pool {
    /// Creates a pool striped over the files or block devices at `paths`
    /// (one plain top-level vdev each), with the cache devices
    /// `opts.cache`.
    pub fn create(name: &str, paths: &[PathBuf], opts: &CreateOptions) -> Result<Pool> {
        let tops: Vec<TopSpec> = paths.iter().map(|p| TopSpec { layout: Layout::Plain, devices: vec![p.clone()] }).collect();
        Self::create_layout(name, &tops, opts)
    }

    /// Creates a pool of the top-level vdevs `tops` (plain devices,
    /// mirrors, RAID-Z groups), with the cache devices `opts.cache`. Every
    /// device is vetted first (`pool::vet`) and the layout checked
    /// (`pool::vdevs`): a refusal leaves every device as it was.
    pub fn create_layout(name: &str, tops: &[TopSpec], opts: &CreateOptions) -> Result<Pool> {
        validate_pool_name(name)?;
        if tops.is_empty() {
            return Err(Error::invalid("a pool needs at least one device"));
        }
        let paths: Vec<&PathBuf> = tops.iter().chain(&opts.logs).flat_map(|t| t.devices.iter()).collect();
        let roles: Vec<(PathBuf, Role)> = paths
            .iter()
            .map(|p| ((*p).clone(), Role::Data))
            .chain(opts.cache.iter().map(|p| (p.clone(), Role::Cache)))
            .chain(opts.spares.iter().map(|p| (p.clone(), Role::Spare)))
            .collect();
        let vetted = super::vet::open_devices(&roles, opts.size, opts.force, None)?;
        // Files this call created are removed again on failure; existing ones are left.
        let created: Vec<String> = vetted.iter().filter(|v| v.created).map(|v| v.path.clone()).collect();
        let (data, rest): (Vec<Vetted>, Vec<Vetted>) = vetted.into_iter().partition(|v| v.role == Role::Data);
        let (cache, spares): (Vec<Vetted>, Vec<Vetted>) = rest.into_iter().partition(|v| v.role == Role::Cache);
        let locks = data.iter().map(|v| v.dev.clone()).collect();
        let mut devs = data.iter().map(|v| (v.path.clone(), v.dev.clone() as Arc<dyn BlockDevice>));
        let new: Vec<NewTop> = tops.iter().map(|t| NewTop { layout: t.layout, devices: devs.by_ref().take(t.devices.len()).collect() }).collect();
        let logs: Vec<NewTop> = opts.logs.iter().map(|t| NewTop { layout: t.layout, devices: devs.by_ref().take(t.devices.len()).collect() }).collect();
        drop(devs);
        drop(data);
        let attach = |pool: &Pool| super::log_vdev::attach_logs(pool, logs, opts.force).and_then(|()| pool.attach_caches(cache)).and_then(|()| pool.attach_spares(spares));
        let res = Self::create_tops(name, new, locks, opts).and_then(|pool| match attach(&pool) {
            Ok(()) => Ok(pool),
            Err(e) => {
                // The pool was made but cannot have what was asked for: undo it.
                let _ = pool.destroy();
                Err(e)
            }
        });
        if res.is_err() {
            for p in created {
                let _ = std::fs::remove_file(p);
            }
        }
        res
    }

    /// Creates a pool striped over already opened devices (tests use fault
    /// devices).
    pub fn create_on(name: &str, devs: Vec<(String, Arc<dyn BlockDevice>)>, locks: Vec<Arc<FileDevice>>, opts: &CreateOptions) -> Result<Pool> {
        let tops = devs.into_iter().map(|d| NewTop { layout: Layout::Plain, devices: vec![d] }).collect();
        Self::create_tops(name, tops, locks, opts)
    }

    /// Creates a pool of the top-level vdevs `tops` on opened devices.
    pub fn create_tops(name: &str, tops: Vec<NewTop>, locks: Vec<Arc<FileDevice>>, opts: &CreateOptions) -> Result<Pool> {
        validate_pool_name(name)?;
        opts.tunables.validate()?;
        if !(9..=16).contains(&opts.ashift) {
            return Err(Error::invalid(format!("ashift {} out of range 9..16", opts.ashift)));
        }
        if tops.is_empty() {
            return Err(Error::invalid("a pool needs at least one device"));
        }
        vdevs::check_layout(&tops, &[], opts.force)?;
        let devs: Vec<(String, Arc<dyn BlockDevice>)> = tops.iter().flat_map(|t| t.devices.iter().cloned()).collect();
        for (path, dev) in &devs {
            super::vet::check_contents(path, dev.as_ref(), Role::Data, opts.force, None)?;
        }
        let pool_guid = new_guid(name);
        let nodes = vdevs::new_nodes(&tops, 0, opts.ashift, &new_guid)?;
        let redundant = nodes.iter().any(|n| !n.kind.is_leaf());
        let tree = VdevNode { kind: VdevKind::Root, id: 0, guid: pool_guid, ashift: opts.ashift, nparity: 0, asize: 0, metaslab_shift: 0, path: String::new(), children: nodes };
        let config = LabelConfig {
            pool_guid,
            pool_name: name.to_string(),
            state: PoolState::Active,
            config_txg: 1,
            format_version: FORMAT_VERSION,
            features_incompat: if redundant { FEATURE_VDEV_TREE } else { 0 },
            features_compat: 0,
            hostname: hostname(),
            device_guid: 0,
            top_guid: 0,
            tree,
            spares: vec![],
            logs: vec![],
        };
        for (_, dev) in &devs {
            clear_labels(dev.as_ref()).map_err(|e| Error::io(format!("clearing labels of {}", dev.name()), e))?;
        }
        let mut rootrec = KvMap::new();
        for (k, v) in &opts.root_props {
            set_dataset_prop(&mut rootrec, k, v)?;
        }
        let mut pool_props = KvMap::new();
        for (k, v) in &opts.pool_props {
            set_pool_prop(&mut pool_props, k, v)?;
        }
        let ub = Uberblock {
            version: FORMAT_VERSION,
            txg: 0,
            guid_sum: config.tree.guid_sum(),
            timestamp: now_secs(),
            pool_guid,
            mos: BlockPtr::default(),
            space_log: BlockPtr::default(),
            space_cp: BlockPtr::default(),
            space_cp_txg: 0,
            features_active: 0,
        };
        let sh = ShellShared::assemble(config.clone(), devs, locks, &opts.tunables, opts.arc.clone(), false, ub)?;
        sh.write_configs(&config)?;
        let (mos, root) = sh.core_objsets_new(rootrec.clone())?;
        let sh = Arc::new(sh.finish(mos, root, None));
        let pool = Pool::start(sh);
        pool.init_directory(rootrec, pool_props)?;
        pool.post_pool_event(class::POOL_CREATE);
        pool.sync()?;
        Ok(pool)
    }

    fn init_directory(&self, mut rootrec: KvMap, pool_props: KvMap) -> Result<()> {
        let tx = self.sh.mos.begin()?;
        let dir = self.sh.mos.create(&tx, ObjectType::KvMap)?;
        debug_assert_eq!(dir, POOL_DIR_OBJ);
        let rec = self.sh.mos.create(&tx, ObjectType::DatasetRecord)?;
        assert_eq!(rec, ROOT_RECORD, "root dataset record lands in its fixed object");
        let mut d = pool_props;
        kv::put_u64(&mut d, KEY_ROOT, rec);
        self.sh.mos.write(&tx, dir, 0, &kv::encode(&d))?;
        kv::put_str(&mut rootrec, "name", &self.sh.core.name);
        let mut r = Rec::decode(rec, &rootrec)?;
        r.creation_txg = tx.txg();
        r.creation_time = now_secs();
        r.guid = self.sh.core.guid;
        r.has_referenced = true;
        self.sh.mos.write(&tx, rec, 0, &kv::encode(&r.encode()))?;
        apply_failmode(&self.sh.core, &d);
        *self.sh.pool_props.lock() = d;
        tx.commit();
        Ok(())
    }

    /// Opens (imports) the pool whose devices are at `paths`. A path that
    /// cannot be opened counts as a missing device (`open_paths`).
    pub fn open(paths: &[PathBuf], opts: &OpenOptions) -> Result<Pool> {
        let (mut devs, mut locks, mut unopened) = open_paths(paths, opts.readonly)?;
        open_recorded_spares(&mut devs, &mut locks, &mut unopened, opts.readonly);
        Self::open_found(Self::find(devs, unopened, opts)?, locks, opts)
    }

    /// Opens a pool on already opened devices, at its newest txg; when that
    /// cannot be opened, only with `opts.rewind` at an older one (see
    /// `pool::import`): without it the error says what a rewind would
    /// discard.
    pub fn open_on(devs: Vec<(String, Arc<dyn BlockDevice>)>, locks: Vec<Arc<FileDevice>>, opts: &OpenOptions) -> Result<Pool> {
        Self::open_found(Self::find(devs, vec![], opts)?, locks, opts)
    }

    /// `open_on` once the devices are matched to the config; devices given
    /// that import could not use and no leaf names are in the pool's
    /// warnings (a leaf's own shows as UNAVAIL, with why).
    fn open_found(f: Found, locks: Vec<Arc<FileDevice>>, opts: &OpenOptions) -> Result<Pool> {
        let pool = Self::open_matched(&f, locks, opts)?;
        let left_out = f.unusable.iter().map(|u| format!("pool '{}': left out at import: {}", f.config.pool_name, u.why.msg));
        pool.sh.open_warnings.lock().extend(left_out);
        Ok(pool)
    }

    fn open_matched(f: &Found, locks: Vec<Arc<FileDevice>>, opts: &OpenOptions) -> Result<Pool> {
        let newest = f.newest().clone();
        let why = match Self::try_open(&f.config, f.devs.clone(), locks.clone(), &f.spares, opts, newest.clone()) {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        let plan = plan_rewind(f, opts, why)?;
        assert_eq!(plan.newest_txg, newest.txg, "a plan rewinds from the newest txg");
        assert!(plan.needed(), "a plan past txg {} rewinds: {:?}", newest.txg, plan);
        if !opts.rewind {
            return Err(Error::corrupt(plan.refusal()));
        }
        let ub = f.ubs.iter().find(|u| u.txg == plan.txg).expect("the plan's txg is one of the uberblocks").clone();
        let pool = Self::try_open(&f.config, f.devs.clone(), locks, &f.spares, opts, ub)
            .map_err(|e| e.context(format!("pool '{}': rewinding to txg {}", plan.pool, plan.txg)))?;
        if !opts.readonly {
            pool.sh.forget_uberblocks_after(plan.txg, newest.txg)?;
        }
        *pool.sh.rewound.lock() = Some(plan);
        Ok(pool)
    }

    /// What opening the pool on `devs` would do, writing nothing: the txg
    /// it would open at and what a rewind there discards (`import -Fn`, the
    /// listing of importable pools). An error when no txg opens.
    pub fn check_open_on(devs: Vec<(String, Arc<dyn BlockDevice>)>, opts: &OpenOptions) -> Result<Rewind> {
        Self::check_found(Self::find(devs, vec![], opts)?, opts)
    }

    fn check_found(f: Found, opts: &OpenOptions) -> Result<Rewind> {
        let ro = OpenOptions { readonly: true, cache_devices: vec![], ..opts.clone() };
        match Self::try_open(&f.config, f.devs.clone(), vec![], &[], &ro, f.newest().clone()) {
            Ok(_) => Ok(Rewind::none(&f.config.pool_name, f.newest())),
            Err(why) => plan_rewind(&f, opts, why),
        }
    }

    /// As `check_open_on`, on the devices at `paths`, taking their locks
    /// unless `opts.readonly` (so a pool another process holds is busy).
    pub fn check_open(paths: &[PathBuf], opts: &OpenOptions) -> Result<Rewind> {
        let (devs, _locks, unopened) = open_paths(paths, opts.readonly)?;
        Self::check_found(Self::find(devs, unopened, opts)?, opts)
    }

    /// A pool's devices matched to its config, and its valid uberblocks;
    /// `unopened` are the devices that could not be opened.
    fn find(devs: Vec<(String, Arc<dyn BlockDevice>)>, unopened: Vec<Unusable>, opts: &OpenOptions) -> Result<Found> {
        opts.tunables.validate()?;
        let (config, devs, unusable, spares) = match_devices(devs, unopened, opts.missing_log)?;
        check_features(&config, opts.readonly)?;
        let mut ubs = Vec::new();
        for (_, d) in &devs {
            ubs.extend(read_labels(d.as_ref()).uberblocks);
        }
        // Any of the pool's uberblocks: one written before the tree last
        // changed (`vdev_change`; a crash before the next sync) has the
        // old tree's guid sum.
        ubs.retain(|u| u.pool_guid == config.pool_guid);
        ubs.sort_by_key(|u| std::cmp::Reverse(u.txg));
        ubs.dedup_by(|a, b| a == b);
        if ubs.is_empty() {
            return Err(Error::corrupt(format!("pool '{}': no valid uberblock on any device", config.pool_name)));
        }
        Ok(Found { config, devs, ubs, unusable, spares })
    }

    /// What the import rewound (None: it opened the newest txg).
    pub fn rewound(&self) -> Option<Rewind> {
        self.sh.rewound.lock().clone()
    }

    /// What the import noticed but did without: unavailable cache devices,
    /// an unreadable error log.
    pub fn open_warnings(&self) -> Vec<String> {
        self.sh.open_warnings.lock().clone()
    }

    /// Opens the pool as of `ub` (import's last step, and each try of a
    /// rewind plan, read-only).
    pub(super) fn try_open(config: &LabelConfig, devs: Vec<(String, Arc<dyn BlockDevice>)>, locks: Vec<Arc<FileDevice>>, spares: &[super::spare::FoundSpare], opts: &OpenOptions, ub: Uberblock) -> Result<Pool> {
        let mut cfg = config.clone();
        cfg.state = PoolState::Active;
        let newest: Vec<Option<u64>> = devs.iter().map(|(_, d)| super::vdev_admin::newest_uberblock(d.as_ref(), config.pool_guid)).collect();
        let sh = ShellShared::assemble(cfg.clone(), devs, locks, &opts.tunables, opts.arc.clone(), opts.readonly, ub.clone())?;
        let (cp, logs) = spacemap::load(&sh.core, &ub.space_cp, &ub.space_log, ub.txg)?;
        {
            // A checkpoint written before a log vdev was removed still
            // lists it (empty): not the pool's any more.
            let mut a = sh.core.alloc.lock();
            for id in a.vdev_ids().into_iter().filter(|id| sh.core.vdevs.get(*id as usize).is_none()) {
                a.forget_vdev(id).map_err(|e| Error::corrupt(format!("pool '{}': the space checkpoint lists vdev {}, which the pool does not have: {}", sh.core.name, id, e)))?;
            }
            check_space_extents(&cfg, &a)?;
        }
        {
            let mut s = sh.sync.lock();
            s.cp_chain = cp;
            s.log_chain = logs;
            s.logs_since_cp = s.log_chain.len() as u64;
        }
        sh.core.refresh_space();
        let (mos, root, props, rec) = sh.core_objsets_open(&ub)?;
        let sh = Arc::new(sh.finish(mos, root, Some(rec)));
        sh.load_spares(&cfg, spares);
        if let Some(obj) = kv::get_u64(&props, KEY_BRT) {
            sh.core.brt.load(obj)?;
        }
        // A damaged error log costs its entries, not the import: the next
        // error recorded starts a new one.
        if let Some(obj) = kv::get_u64(&props, KEY_ERRLOG) {
            if let Err(e) = sh.core.errlog.load(&sh.mos, obj) {
                sh.open_warnings.lock().push(format!("pool '{}': {}; starting a new error log", sh.core.name, e));
            }
        }
        // So does a damaged event ring: its events are lost.
        if let Some(obj) = kv::get_u64(&props, KEY_EVENTS) {
            if let Err(e) = sh.core.events.load(&sh.mos, obj) {
                sh.open_warnings.lock().push(format!("pool '{}': {}; its events are lost, a new event ring starts", sh.core.name, e));
            }
        }
        if let Some(state) = super::vdev_admin::stored_state(&props) {
            if let Err(e) = super::vdev_admin::load_state(&sh.core, state) {
                sh.open_warnings.lock().push(format!("{}; every leaf is taken as online with nothing missed, until the next scrub", e));
            }
        }
        super::vdev_admin::derive_dtls(&sh.core, &newest, ub.txg);
        if !opts.readonly {
            // Before anything allocates: log blocks are free on disk.
            let lost = sh.dsl.claim_logs(ub.txg)?;
            sh.open_warnings.lock().extend(lost);
            sh.open_warnings.lock().extend(sh.core.logs.discarded());
        }
        // So is a damaged scan record: the scan's result, or a scan
        // that was running (start it again).
        if let Some(obj) = kv::get_u64(&props, KEY_SCAN) {
            if let Err(e) = sh.scan.restore(&sh.mos, obj) {
                sh.open_warnings.lock().push(format!("pool '{}': {}; the last scan is forgotten", sh.core.name, e));
            }
        }
        apply_failmode(&sh.core, &props);
        *sh.pool_props.lock() = props;
        for (_, l) in sh.core.leaves().into_iter().filter(|(top, l)| top.leaf().is_none() && !l.up()) {
            sh.open_warnings.lock().push(format!("pool '{}': '{}' is {}{}; the pool is DEGRADED", sh.core.name, l.path, l.state().name(), l.reason().map(|r| format!(" ({})", r)).unwrap_or_default()));
        }
        if !opts.readonly {
            cfg.config_txg = ub.txg + 1;
            sh.write_configs(&cfg)?;
            let missing = super::cache_dev::open_recorded(&sh.core, &sh.pool_props.lock(), &opts.cache_devices);
            sh.open_warnings.lock().extend(missing);
            sh.core.events.post(Post::new(class::POOL_IMPORT).dec("txg", ub.txg));
        }
        let pool = Pool::start(sh);
        if opts.readonly {
            // No pass runs here: `pool wait` must not wait for one.
            pool.sh.scan.stop();
        } else {
            pool.continue_scans();
        }
        Ok(pool)
    }

    fn start(sh: Arc<Shared>) -> Pool {
        let thread = if sh.core.readonly {
            None
        } else {
            let s2 = sh.clone();
            Some(
                std::thread::Builder::new()
                    .name(format!("tarn-sync-{}", sh.core.name))
                    .spawn(move || s2.sync_loop())
                    .expect("spawning the sync thread"),
            )
        };
        let spares = if sh.core.readonly { None } else { super::spare::start_thread(&sh) };
        Pool { sh, thread: Mutex::new(thread), spare_thread: Mutex::new(spares), closed: Mutex::new(false) }
    }

    pub fn name(&self) -> &str {
        &self.sh.core.name
    }

    pub fn guid(&self) -> u64 {
        self.sh.core.guid
    }

    /// The root dataset's object set.
    pub fn root(&self) -> &Arc<Objset> {
        &self.sh.root
    }

    /// The datasets, snapshots and clones of the pool.
    pub fn datasets(&self) -> &Arc<Datasets> {
        &self.sh.dsl
    }

    /// The meta object set (for inspection).
    pub fn mos(&self) -> &Arc<Objset> {
        &self.sh.mos
    }

    pub fn core(&self) -> &Arc<PoolCore> {
        &self.sh.core
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.sh
    }

    pub fn uberblock(&self) -> Uberblock {
        self.sh.sync.lock().ub.clone()
    }

    /// The last syncs of this pool (most recent last).
    pub fn txg_history(&self) -> Vec<TxgRecord> {
        self.sh.history.lock().iter().cloned().collect()
    }

    pub fn config(&self) -> LabelConfig {
        self.sh.config.lock().clone()
    }

    /// Waits until everything written so far is on disk.
    pub fn sync(&self) -> Result<()> {
        self.sh.core.check_writable()?;
        self.sh.core.txg.wait_synced(0)
    }

    /// Changes a tunable on the live pool.
    pub fn set_tunable(&self, name: &str, value: &str) -> Result<()> {
        self.set_tunables(&[(name, value)])
    }

    /// Changes several tunables at once, validated together (a pair such
    /// as zfs_arc_min and zfs_arc_max may move past each other); on error
    /// nothing changes.
    pub fn set_tunables(&self, sets: &[(&str, &str)]) -> Result<()> {
        let t = {
            let mut t = self.sh.core.tunables.write();
            t.set_many(sets)?;
            t.clone()
        };
        self.sh.core.txg.set_params(ThrottleParams::from_tunables(&t));
        for (_, v) in self.sh.core.leaves() {
            v.leaf().into_iter().for_each(|l| l.set_limits(queue_limits(&t)));
        }
        self.sh.core.cache.arc().apply_tunables(&t);
        self.sh.core.l2.set_params(super::cache_dev::l2_params(&t));
        self.sh.core.events.set_limits(EventLimits::from_tunables(&t));
        Ok(())
    }

    pub fn status(&self) -> PoolStatus {
        let core = &self.sh.core;
        let space = core.alloc.lock().space();
        let (logs, vdevs): (Vec<VdevStatus>, Vec<VdevStatus>) = core
            .vdevs
            .all()
            .iter()
            .map(|v| {
                let vs = space.vdevs.iter().find(|(id, _)| *id == v.id()).map(|(_, s)| *s).unwrap_or_default();
                let mut st = vdev_status(v, vs.size, vs.allocated);
                if core.logs.contains(v.id()) {
                    st.class = "log".into();
                }
                st
            })
            .partition(|v| v.class == "log");
        let degraded = core.vdevs.all().iter().any(|v| v.state() != crate::vdev::State::Online);
        // After the devices' checks, which may have suspended it.
        let error = core.txg.failure();
        PoolStatus {
            name: core.name.clone(),
            guid: core.guid,
            state: if error.is_some() {
                "SUSPENDED".into()
            } else if degraded {
                "DEGRADED".into()
            } else {
                "ONLINE".into()
            },
            txg: self.uberblock().txg,
            size: space.total.size,
            allocated: space.total.allocated,
            free: space.total.free + space.total.deferred,
            fragmentation_pct: space.total.fragmentation_pct,
            vdevs,
            error,
            data_errors: core.errlog.total(),
            suspension: self.suspension(),
            scan: Some(self.sh.scan.status()).filter(|s| s.state != ScanState::None),
            spares: self.spares(),
            logs,
            log_discarded: core.logs.discarded(),
        }
    }

    /// What the pool has on disk and cannot write, when it is suspended.
    pub fn suspension(&self) -> Option<Suspension> {
        let reason = self.sh.core.txg.failure()?;
        let lost = self.sh.core.txg.lost()?;
        let ub = self.uberblock();
        debug_assert_eq!(ub.txg, lost.synced);
        Some(Suspension {
            reason,
            synced_txg: ub.txg,
            synced_time: ub.timestamp,
            first_lost_txg: lost.first,
            last_lost_txg: lost.last,
            lost_bytes: lost.dirty_bytes,
            resumable: self.sh.core.txg.resumable(),
            waiting_writers: self.sh.core.txg.blocked_by_failmode(),
        })
    }

    /// The error log: where blocks no copy of which could be read sit
    /// (`posix::errors` names them as files).
    pub fn error_log(&self) -> Vec<super::errlog::Bookmark> {
        self.sh.core.errlog.entries()
    }

    /// `pool clear`: forgets the devices' error counts and the error log
    /// (written with the next txg); returns how many log entries went.
    pub fn clear_errors(&self) -> u64 {
        for (_, v) in self.sh.core.leaves() {
            let Some(l) = v.leaf() else { continue };
            let s = l.stats();
            for c in [&s.read_errors, &s.write_errors, &s.checksum_errors] {
                c.store(0, Ordering::Relaxed);
            }
        }
        let n = self.sh.core.errlog.clear();
        self.post_pool_event(class::VDEV_CLEAR);
        n
    }

    /// Pool properties as (name, value, source).
    pub fn properties(&self) -> Vec<(String, String, String)> {
        let st = self.status();
        let ub = self.uberblock();
        let cap = (st.allocated * 100).checked_div(st.size).unwrap_or(0);
        let ashift = self.config().tree.children.iter().find(|c| !c.is_hole()).map_or(12, |c| c.ashift);
        let mut v: Vec<(String, String, String)> = vec![
            ("name".into(), st.name.clone(), "-".into()),
            ("size".into(), st.size.to_string(), "-".into()),
            ("allocated".into(), st.allocated.to_string(), "-".into()),
            ("free".into(), st.free.to_string(), "-".into()),
            ("capacity".into(), format!("{}%", cap), "-".into()),
            ("fragmentation".into(), format!("{}%", st.fragmentation_pct), "-".into()),
            ("health".into(), st.state.clone(), "-".into()),
            ("guid".into(), st.guid.to_string(), "-".into()),
            ("version".into(), format!("{}", FORMAT_VERSION), "-".into()),
            ("ashift".into(), ashift.to_string(), "local".into()),
            ("txg".into(), ub.txg.to_string(), "-".into()),
        ];
        let b = self.brt_stats();
        let r = b.ratio_percent();
        v.push(("bcloneused".into(), b.used_bytes.to_string(), "-".into()));
        v.push(("bclonesaved".into(), b.saved_bytes.to_string(), "-".into()));
        v.push(("bcloneratio".into(), format!("{}.{:02}x", r / 100, r % 100), "-".into()));
        let props = self.sh.pool_props.lock();
        for (name, default) in POOL_PROPS {
            match kv::get_str(&props, &format!("prop:{}", name)) {
                Some(val) => v.push((name.to_string(), val.to_string(), "local".into())),
                None => v.push((name.to_string(), default.to_string(), "default".into())),
            }
        }
        v
    }

    /// Sets a settable pool property (persisted in the pool directory).
    /// `failmode` takes effect at once, even on a suspended pool (whose
    /// directory cannot be written: the error says the change holds only
    /// until the pool closes) — `continue` is how an administrator frees
    /// the writers `wait` holds.
    pub fn set_property(&self, name: &str, value: &str) -> Result<()> {
        if name == "failmode" {
            let mut probe = KvMap::new();
            set_pool_prop(&mut probe, name, value)?;
            apply_failmode(&self.sh.core, &probe);
            if let Some(why) = self.sh.core.txg.failure() {
                return Err(Error::new(
                    ErrorKind::Suspended,
                    format!("failmode={} holds from now until pool '{}' closes, but it is not recorded in the pool: the pool is suspended ({})", value, self.sh.core.name, why),
                ));
            }
        }
        self.update_pool_dir(|props| set_pool_prop(props, name, value))
    }

    /// Changes the pool directory (properties, cache devices) and syncs it.
    /// The sync thread writes the directory (it adds the block reference
    /// table's key there too), so a change made here cannot race with it.
    pub(crate) fn update_pool_dir(&self, f: impl FnOnce(&mut KvMap) -> Result<()>) -> Result<()> {
        self.sh.update_pool_dir(f)
    }

    /// The block reference table's figures (block cloning).
    pub fn brt_stats(&self) -> super::brt::BrtStats {
        self.sh.core.brt.stats()
    }

    /// Syncs, marks every label exported and closes. On an error (the
    /// final sync or a label write failed) the pool is closed and
    /// suspended: `discard` is what remains to do.
    pub fn export(&self) -> Result<()> {
        self.post_pool_event(class::POOL_EXPORT);
        self.close_with(PoolState::Exported)
    }

    /// Marks the pool destroyed in its labels and closes it (on an error,
    /// as `export`).
    pub fn destroy(&self) -> Result<()> {
        self.post_pool_event(class::POOL_DESTROY);
        self.close_with(PoolState::Destroyed)
    }

    /// Closes a suspended pool without syncing and without writing to its
    /// devices (`export -f` of a suspended pool): the devices keep the last
    /// txg that was synced, as after a crash, and their locks are released
    /// when the pool is dropped. Returns what is discarded; `None` (and
    /// nothing done) when the pool is not suspended.
    pub fn discard(&self) -> Option<Suspension> {
        self.sh.core.txg.failure()?;
        self.give_up_waiting();
        // Suspended: close() skips the sync and only stops the threads
        // (the sync thread has finished failing when it returns); its
        // error is the suspension itself, which the report says.
        let _ = self.close();
        self.suspension()
    }

    /// Writers that `failmode=wait` holds on a suspended pool get the
    /// suspension's error now, and later ones at once: call before
    /// unmounting a suspended pool's file systems, whose requests they hold.
    pub fn give_up_waiting(&self) {
        self.sh.core.txg.give_up_waiting();
    }

    /// Writers that `failmode=wait` holds on a suspended pool right now.
    pub fn blocked_writers(&self) -> u64 {
        self.sh.core.txg.blocked_by_failmode()
    }

    fn close_with(&self, state: PoolState) -> Result<()> {
        self.refuse_while_injecting(if state == PoolState::Destroyed { "destroy" } else { "export" })?;
        self.close()?;
        let mut cfg = self.sh.config.lock().clone();
        cfg.state = state;
        cfg.config_txg = self.uberblock().txg + 1;
        if state == PoolState::Destroyed {
            // A destroyed pool's spares stand by for nothing: free again.
            self.sh.release_spares();
        }
        self.sh.write_configs(&cfg)
    }

    /// Syncs what is dirty and stops the pool's threads. Called by drop too.
    pub fn close(&self) -> Result<()> {
        // Injected faults end with the pool: the final sync is not
        // failed (or delayed) by a rehearsal (`pool::inject`).
        self.clear_injections();
        // No spare stands in while the pool closes (one standing in now
        // finishes first: it needs the sync thread).
        self.stop_spare_thread();
        // A scan stops first: it reads (and repairs) through the devices
        // about to be shut. Its record, written by the last sync below,
        // keeps it running for the next import.
        self.sh.scan.stop();
        let mut closed = self.closed.lock();
        if *closed {
            return Ok(());
        }
        *closed = true;
        self.sh.core.l2.shutdown();
        // A closed pool's blocks are no use to anyone (its number in the
        // ARC is never given again): the memory goes to the other pools.
        self.sh.core.cache.detach();
        let res = if self.sh.core.readonly || self.sh.core.txg.failure().is_some() {
            Ok(())
        } else {
            self.sh.core.txg.wait_synced(0)
        };
        self.sh.core.txg.shutdown();
        // A sync waiting for a device that never came back (its writes
        // parked) gives up: the pool closes without them.
        for (_, v) in self.sh.core.leaves() {
            v.leaf().into_iter().for_each(|l| {
                l.fail_parked("the pool closed while the device was out");
            });
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        for (_, v) in self.sh.core.leaves() {
            v.leaf().into_iter().for_each(|l| l.shutdown());
        }
        match self.sh.core.txg.failure() {
            Some(f) if res.is_ok() && !self.sh.core.readonly => Err(Error::new(ErrorKind::Suspended, f)),
            _ => res,
        }
    }

    /// Walks and verifies everything the last synced uberblock references
    /// (see `pool::verify`). Call it with no writers active.
    pub fn verify(&self) -> Result<super::verify::VerifyReport> {
        let (mos, txg, blocks) = self.sh.sync.lock().synced_tree();
        super::verify::verify(&self.sh.core, &mos, txg, &blocks)
    }

    /// Starts a scrub on a thread of its own, or resumes a paused one, or
    /// continues one from the pool's scan record: every copy of every
    /// block of the last synced txg read and checked, damaged copies
    /// rewritten from good ones (see `pool::scan`); `scan_status` follows
    /// it. One at a time; frees made meanwhile become allocatable when it
    /// ends.
    pub fn scrub_start(&self) -> Result<()> {
        self.scan_allowed()?;
        if self.sh.scan.start(ScanFunc::Scrub)? == Start::Resumed {
            return Ok(());
        }
        spawn_scan(&self.sh, ScanFunc::Scrub)
    }

    /// Starts resilvering every leaf that is up and missed txgs (see
    /// `pool::resilver`), cancelling a scrub first (as zpool: a resilver
    /// goes first) or a resilver under way (it starts again with every
    /// leaf). Nothing to resilver: Ok, nothing started.
    pub fn resilver_start(&self) -> Result<()> {
        self.scan_allowed()?;
        self.sh.resilver_start()
    }

    /// Starts a sequential rebuild of top-level vdev `top` (`pool::rebuild`;
    /// `attach -s`, `replace -s`), shown as `vdev`.
    pub(super) fn rebuild_start(&self, top: u32, vdev: String) -> Result<()> {
        self.scan_allowed()?;
        self.sh.rebuild_start(top, vdev)
    }

    /// At import: leaves that missed txgs resilver at once (back after an
    /// absence, or a resilver cut short by an export or a crash); else a
    /// scrub the pool was running continues from its record (a paused one
    /// waits for `scrub_start`). What cannot start is a warning of the
    /// import, not its failure.
    fn continue_scans(&self) {
        let resilvers = !super::resilver::targets(&self.sh.core).is_empty();
        let started = if resilvers {
            self.resilver_start().map_err(|e| format!("cannot start the resilver: {}", e))
        } else {
            // A resilver recorded as under way has nothing left to do.
            self.sh.scan.end_idle_resilver();
            match self.sh.scan.continues_after_import() {
                true => self.scrub_start().map_err(|e| format!("the scrub under way does not continue: {}", e)),
                false => Ok(()),
            }
        };
        if let Err(why) = started {
            self.sh.open_warnings.lock().push(format!("pool '{}': {}", self.sh.core.name, why));
        }
    }


    /// Scrubs in the caller's thread, to the end (see `scrub_start`).
    pub fn scrub(&self) -> Result<ScanReport> {
        self.scrub_pausing(&mut || {})
    }

    /// As `scrub`, running `paused` after the scan gathered its blocks and
    /// before it reads them (for tests that change the pool under a scan).
    #[doc(hidden)]
    pub fn scrub_pausing(&self, paused: &mut dyn FnMut()) -> Result<ScanReport> {
        self.scan_allowed()?;
        // A paused scrub continues on its own thread; wait for it.
        if self.sh.scan.start(ScanFunc::Scrub)? == Start::Run {
            run_scan(&self.sh, ScanFunc::Scrub, paused);
        }
        Ok(self.sh.scan.wait().report)
    }

    /// Pauses the running scan (`scrub_start` resumes it).
    pub fn scrub_pause(&self) -> Result<()> {
        self.sh.core.check_writable()?;
        if self.sh.scan.pause() {
            Ok(())
        } else {
            Err(Error::invalid(format!("cannot pause scrubbing '{}': there is no active scrub", self.sh.core.name)))
        }
    }

    /// Cancels the scan, running or paused, and waits for it to stop.
    pub fn scrub_cancel(&self) -> Result<()> {
        self.sh.core.check_writable()?;
        if self.sh.scan.cancel() {
            Ok(())
        } else {
            Err(Error::invalid(format!("cannot cancel scrubbing '{}': there is no active scrub", self.sh.core.name)))
        }
    }

    /// The running or last scan, as recorded in the pool.
    pub fn scan_status(&self) -> ScanStatus {
        self.sh.scan.status()
    }

    /// The pool's scanner, to wait for a scan without holding the pool.
    pub fn scanner(&self) -> Arc<Scanner> {
        self.sh.scan.clone()
    }

    /// Waits for the running scan (if any) to end; returns its status.
    pub fn scan_wait(&self) -> ScanStatus {
        self.sh.scan.wait()
    }

    /// The pool's event ring (`pool events`).
    pub fn events(&self) -> &Arc<EventLog> {
        &self.sh.core.events
    }

    /// Posts an event about the pool as a whole (its name and guid are
    /// every event's).
    fn post_pool_event(&self, cls: &'static str) {
        self.sh.core.events.post(Post::new(cls));
    }

    fn scan_allowed(&self) -> Result<()> {
        self.sh.core.check_writable()?;
        if *self.closed.lock() {
            return Err(Error::invalid(format!("pool '{}' is closed", self.sh.core.name)));
        }
        if let Some(f) = self.sh.core.txg.failure() {
            return Err(Error::new(ErrorKind::Suspended, format!("cannot scrub '{}': the pool is suspended: {}", self.sh.core.name, f)));
        }
        Ok(())
    }

    /// Runs every invariant check that walks whole structures.
    pub fn check_invariants(&self) -> Result<()> {
        self.sh.core.alloc.lock().check_invariants().map_err(|e| Error::corrupt(format!("allocator: {}", e)))?;
        self.sh.core.txg.check_invariants().map_err(|e| Error::corrupt(format!("txg: {}", e)))?;
        self.sh.core.brt.check_invariants()?;
        let cfg = self.sh.config.lock().clone();
        super::log_vdev::check_log_vdevs(&self.sh.core, &cfg).map_err(Error::corrupt)?;
        super::log_vdev::check_holes(&self.sh.core, &cfg).map_err(Error::corrupt)?;
        self.sh.dsl.check_invariants()
    }
}

/// Runs the scan `Scanner::start` set up on a thread of its own.
fn spawn_scan(sh: &Arc<Shared>, func: ScanFunc) -> Result<()> {
    spawn_pass(sh, move |sh| run_scan(sh, func, &mut || {}))
}

/// Runs `pass` (a scan `Scanner::start` set up) on a thread of its own.
fn spawn_pass(sh: &Arc<Shared>, pass: impl FnOnce(&Shared) + Send + 'static) -> Result<()> {
    let s2 = sh.clone();
    let spawned = std::thread::Builder::new().name(format!("scan {}", sh.core.name)).spawn(move || pass(&s2));
    match spawned {
        Ok(t) => {
            sh.scan.set_thread(t);
            Ok(())
        }
        Err(e) => {
            let err = Error::io(format!("pool '{}': cannot start the scan thread", sh.core.name), e);
            sh.scan.end(PassEnd::Canceled, Some(err.to_string()));
            Err(err)
        }
    }
}

impl Shared {
    /// Starts resilvering every leaf that is up and missed txgs (see
    /// `Pool::resilver_start`, which checks that the pool may scan).
    pub(super) fn resilver_start(self: &Arc<Self>) -> Result<()> {
        self.core.check_writable()?;
        if let Some(f) = self.core.txg.failure() {
            return Err(Error::new(ErrorKind::Suspended, format!("cannot resilver '{}': the pool is suspended: {}", self.core.name, f)));
        }
        if super::resilver::targets(&self.core).is_empty() {
            return Ok(());
        }
        // A scrub gives way to the resilver; a resilver under way starts
        // again, to cover the leaves that joined it (as OpenZFS restarts a
        // resilver when a device is attached).
        let st = self.scan.status();
        if st.state == ScanState::Scanning {
            self.scan.cancel();
        }
        self.scan.start(ScanFunc::Resilver)?;
        spawn_scan(self, ScanFunc::Resilver)
    }

    /// Starts a sequential rebuild of top-level vdev `top` (`pool::rebuild`),
    /// named `vdev` in `status`; a scrub under way gives way to it. The
    /// caller (attach, replace) checked that nothing else needs a resilver.
    pub(super) fn rebuild_start(self: &Arc<Self>, top: u32, vdev: String) -> Result<()> {
        self.core.check_writable()?;
        if let Some(f) = self.core.txg.failure() {
            return Err(Error::new(ErrorKind::Suspended, format!("cannot resilver '{}': the pool is suspended: {}", self.core.name, f)));
        }
        if self.scan.status().state == ScanState::Scanning {
            self.scan.cancel();
        }
        self.scan.start_as(ScanFunc::Resilver, Some(vdev))?;
        spawn_pass(self, move |sh| run_rebuild(sh, top))
    }

    /// See `Pool::update_pool_dir`.
    pub(super) fn update_pool_dir(&self, f: impl FnOnce(&mut KvMap) -> Result<()>) -> Result<()> {
        self.core.check_writable()?;
        {
            let mut d = self.pool_props.lock();
            let mut props = d.clone();
            f(&mut props)?;
            *d = props;
            self.dir_dirty.store(true, Ordering::Release);
        }
        self.core.txg.wait_synced(0)
    }

    /// Syncs the pool directory as it is (the leaves' state, which the
    /// sync compares itself): after a change of the tree.
    pub(super) fn sync_dir(&self) -> Result<()> {
        self.update_pool_dir(|_| Ok(()))
    }
}

/// One pass of the pool's scan (a scrub, or a resilver), with the
/// allocator's hold on frees (see `pool::scan`); its end is recorded in the
/// scanner however it ends.
fn run_scan(sh: &Shared, func: ScanFunc, paused: &mut dyn FnMut()) {
    /// Ends the allocator's hold however the pass ends.
    struct Hold<'a>(&'a PoolCore);
    impl Drop for Hold<'_> {
        fn drop(&mut self) {
            self.0.alloc.lock().release_frees_hold();
        }
    }
    let (mos, txg, blocks) = {
        let s = sh.sync.lock();
        sh.core.alloc.lock().hold_frees_after(s.ub.txg);
        s.synced_tree()
    };
    let hold = Hold(&sh.core);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match func {
        ScanFunc::Scrub => super::scan::pass(&sh.core, &sh.scan, &mos, txg, &blocks, paused),
        ScanFunc::Resilver => {
            let targets = super::resilver::targets(&sh.core);
            let (mut report, canceled) = super::resilver::resilver(&sh.core, &sh.scan, &mos, txg, &blocks, &targets);
            if !canceled {
                for e in super::vdev_change::complete_replacements(sh) {
                    report.error(e);
                }
            }
            sh.scan.set_report(report);
            match canceled {
                true => sh.scan.halted().unwrap_or(PassEnd::Canceled),
                false => PassEnd::Finished,
            }
        }
    }));
    drop(hold);
    match ran {
        Ok(end) => sh.scan.end(end, None),
        Err(_) => sh.scan.end(PassEnd::Canceled, Some(format!("pool '{}': the scan failed (a panic; see the log)", sh.core.name))),
    }
}

/// A sequential rebuild of top-level vdev `top` (`pool::rebuild`), then —
/// when it finished — the scrub that checks it, on the same thread.
fn run_rebuild(sh: &Shared, top: u32) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (mut report, canceled) = super::rebuild::rebuild(&sh.core, &sh.scan, top);
        if !canceled {
            for e in super::vdev_change::complete_replacements(sh) {
                report.error(e);
            }
        }
        sh.scan.set_report(report);
        canceled
    }));
    match ran {
        Ok(false) => {
            if sh.scan.end_rebuild_then_scrub() {
                run_scan(sh, ScanFunc::Scrub, &mut || {});
            }
        }
        Ok(true) => sh.scan.end(sh.scan.halted().unwrap_or(PassEnd::Canceled), None),
        Err(_) => sh.scan.end(PassEnd::Canceled, Some(format!("pool '{}': the rebuild failed (a panic; see the log)", sh.core.name))),
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Settable pool properties and their defaults.
const POOL_PROPS: &[(&str, &str)] = &[("comment", ""), ("failmode", "wait")];

fn set_pool_prop(props: &mut KvMap, name: &str, value: &str) -> Result<()> {
    match name {
        "comment" => {
            if value.len() > 32 || value.chars().any(|c| c.is_control()) {
                return Err(Error::invalid("comment must be at most 32 printable characters"));
            }
        }
        "failmode" => match value {
            "wait" | "continue" => {}
            "panic" => return Err(Error::invalid("failmode=panic is not supported: tarn never takes the host down; use 'wait' (writers wait for `tarn pool clear`) or 'continue' (writers get an error)")),
            _ => return Err(Error::invalid(format!("bad failmode '{}': use 'wait' or 'continue'", value))),
        },
        "ashift" => return Err(Error::invalid("ashift is set at creation: use 'tarn pool create -o ashift=N'")),
        _ => return Err(Error::invalid(format!("unknown or read-only pool property '{}'", name))),
    }
    kv::put_str(props, &format!("prop:{}", name), value);
    Ok(())
}

/// Tells the txg engine the pool's `failmode` (`wait` unless set to
/// `continue`): whether writers on a pool a device fault suspended wait
/// for `pool clear` or fail.
fn apply_failmode(core: &PoolCore, props: &KvMap) {
    let mode = kv::get_str(props, "prop:failmode").unwrap_or("wait");
    core.txg.set_failmode_wait(mode != "continue");
}

/// Feature bits this version understands.
const KNOWN_FEATURES_INCOMPAT: u64 = FEATURE_VDEV_TREE | FEATURE_LOG_VDEVS | FEATURE_HOLE_VDEVS;
const KNOWN_FEATURES_COMPAT: u64 = FEATURE_BLOCK_CLONING | FEATURE_SPARES | FEATURE_INTENT_LOG;

/// Refuses pools written by a newer format: incompatible features always,
/// compatible ones unless opening read-only.
fn check_features(c: &LabelConfig, readonly: bool) -> Result<()> {
    if c.format_version != FORMAT_VERSION {
        return Err(Error::invalid(format!("pool '{}' has on-disk format version {}; this tarn reads version {}", c.pool_name, c.format_version, FORMAT_VERSION)));
    }
    let unknown = c.features_incompat & !KNOWN_FEATURES_INCOMPAT;
    if unknown != 0 {
        return Err(Error::invalid(format!("pool '{}' uses features this tarn does not support (incompatible bits {:#x})", c.pool_name, unknown)));
    }
    let unknown = c.features_compat & !KNOWN_FEATURES_COMPAT;
    if unknown != 0 && !readonly {
        return Err(Error::invalid(format!("pool '{}' uses features this tarn does not support (bits {:#x}); it can only be opened read-only", c.pool_name, unknown)));
    }
    Ok(())
}

/// Every top-level vdev's space in the loaded allocator is the config's.
/// A checkpoint that describes a vdev id otherwise describes another vdev
/// that had the id (a log vdev removed and its id given again): the ids
/// are only given again once a checkpoint without the old vdev is written
/// (`Shared::checkpoint_from`), so this uberblock is older than that —
/// refused rather than loaded onto the wrong device.
fn check_space_extents(cfg: &LabelConfig, a: &Allocator) -> Result<()> {
    for top in cfg.tree.children.iter().filter(|t| !t.is_hole()) {
        let want = (vdevs::alloc_start(top), top.asize);
        match a.vdev(top.id).map(|v| v.extent()) {
            Some(got) if got != want => {
                return Err(Error::corrupt(format!(
                    "pool '{}': the space checkpoint describes vdev {} as {} bytes from {:#x}, the config as {} bytes from {:#x} (a checkpoint from before its id was given again)",
                    cfg.pool_name, top.id, got.1, got.0, want.1, want.0
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// What `write_space` wrote: the space log's pointer, the checkpoint's
/// blocks and its index (each None when not written this txg).
type SpaceWritten = (Option<BlockPtr>, Option<Vec<BlockPtr>>, Option<BlockPtr>);

/// Devices with the paths they were opened from.
type NamedDevices = Vec<(String, Arc<dyn BlockDevice>)>;

/// Opens the devices at `paths`, locked unless `readonly`. A path that
/// cannot be opened (the file deleted, the disk gone) is returned apart,
/// with why, for `match_devices` to weigh: a mirror can do without it. A
/// device another holder has is an error at once (busy, not missing).
fn open_paths(paths: &[PathBuf], readonly: bool) -> Result<(NamedDevices, Vec<Arc<FileDevice>>, Vec<Unusable>)> {
    let mut devs: NamedDevices = Vec::new();
    let mut locks = Vec::new();
    let mut unopened = Vec::new();
    for p in paths {
        let opened = if readonly {
            FileDevice::open_read_only(p).map_err(|e| Error::io(format!("cannot open '{}'", p.display()), e))
        } else {
            super::vet::open_for_import(p)
        };
        let fd = match opened {
            Ok(fd) => Arc::new(fd),
            Err(e) if e.kind == ErrorKind::Busy => return Err(e),
            Err(why) => {
                unopened.push(Unusable { path: p.display().to_string(), guid: None, why });
                continue;
            }
        };
        locks.push(fd.clone());
        devs.push((p.display().to_string(), fd));
    }
    Ok((devs, locks, unopened))
}

/// A device import was given but cannot use: its path, the leaf it names
/// when known (by its label), and why. One a leaf of the config names (by
/// guid, or by path when it has no label) becomes that leaf's UNAVAIL
/// reason (`match_devices`).
pub(crate) struct Unusable {
    pub path: String,
    pub guid: Option<u64>,
    pub why: Error,
}

/// The devices matched to a config's leaves (see `match_devices`), and
/// its hot spares standing by.
type Matched = (LabelConfig, NamedDevices, Vec<Unusable>, Vec<super::spare::FoundSpare>);

/// Opens the hot spares the newest config among `devs` lists that are not
/// among them, at their recorded paths (the daemon's cache file names the
/// tree's devices; `import -d` finds spares in the directory): locked
/// unless `readonly`. One that cannot be opened is `unopened`, with why,
/// and UNAVAIL once imported.
fn open_recorded_spares(devs: &mut NamedDevices, locks: &mut Vec<Arc<FileDevice>>, unopened: &mut Vec<Unusable>, readonly: bool) {
    let configs: Vec<LabelConfig> = devs.iter().filter_map(|(_, d)| read_labels(d.as_ref()).config).collect();
    let Some(best) = configs.iter().filter(|c| c.state != PoolState::Spare).max_by_key(|c| c.config_txg) else { return };
    for s in &best.spares {
        let given = configs.iter().any(|c| c.pool_guid == best.pool_guid && c.device_guid == s.guid);
        if given || devs.iter().any(|(p, _)| p == &s.path) || unopened.iter().any(|u| u.path == s.path) {
            continue;
        }
        let p = Path::new(&s.path);
        let opened = if readonly {
            FileDevice::open_read_only(p).map_err(|e| Error::io(format!("cannot open '{}'", s.path), e))
        } else {
            super::vet::open_for_import(p)
        };
        match opened {
            Ok(fd) => {
                let fd = Arc::new(fd);
                locks.push(fd.clone());
                devs.push((s.path.clone(), fd));
            }
            Err(why) => unopened.push(Unusable { path: s.path.clone(), guid: Some(s.guid), why }),
        }
    }
}

/// Orders `devs` as the leaves of the newest config among them, with a
/// placeholder for each leaf not found (`vdevs::missing_device`); refused
/// when a top-level vdev has more leaves missing than its redundancy.
///
/// A device import cannot use counts as not found — zpool's UNAVAIL, the
/// pool DEGRADED while redundancy lasts — and is named in the refusal when
/// the pool cannot be opened without it: one that could not be opened
/// (`unopened`); one with no valid label, which cannot say which pool or
/// leaf it is (a blank disk in a mirror child's place, labels overwritten);
/// one smaller than its leaf needs (a partial copy, a shrunk partition, a
/// truncated image keep their front labels, but blocks near the old end
/// are gone). Alone, such a device's error is the error.
fn match_devices(devs: NamedDevices, mut unusable: Vec<Unusable>, missing_log: bool) -> Result<Matched> {
    let mut labelled = Vec::new();
    for (p, d) in devs {
        let labels = read_labels(d.as_ref());
        match labels.config {
            Some(c) => labelled.push((p, d, c)),
            None => {
                let why: Vec<String> = labels.bad.iter().map(|(i, e)| format!("label {}: {}", i, e)).collect();
                let why = Error::not_found(format!("'{}' has no valid tarn label ({})", p, why.join("; ")));
                unusable.push(Unusable { path: p, guid: None, why });
            }
        }
    }
    let Some(best) = labelled.iter().map(|(_, _, c)| c).filter(|c| c.state != PoolState::Spare).max_by_key(|c| c.config_txg).cloned() else {
        if let Some((p, _, c)) = labelled.first() {
            return Err(Error::invalid(format!("'{}' is a hot spare of pool '{}', not one of its devices: import the pool from its devices", p, c.pool_name)));
        }
        let Some(first) = unusable.first() else { return Err(Error::invalid("no devices given")) };
        let why: Vec<&str> = unusable.iter().map(|u| u.why.msg.as_str()).collect();
        return Err(Error::new(first.why.kind, why.join("; ")));
    };
    // A device of another pool is an operator mistake to report, not a
    // spare to ignore: importing without it could hide which pool was meant.
    if let Some((p, _, c)) = labelled.iter().find(|(_, _, c)| c.pool_guid != best.pool_guid) {
        return Err(Error::invalid(format!(
            "'{}' belongs to another pool '{}' (guid {:016x}), not '{}' (guid {:016x})",
            p, c.pool_name, c.pool_guid, best.pool_name, best.pool_guid
        )));
    }
    let spares = standing_by(&best, &mut labelled, &mut unusable);
    labelled.retain(|(p, d, c)| match too_small(&best, c.device_guid, p, d.as_ref()) {
        Some(why) => {
            unusable.push(Unusable { path: p.clone(), guid: Some(c.device_guid), why });
            false
        }
        None => true,
    });
    let present: std::collections::HashSet<u64> = labelled.iter().map(|(_, _, c)| c.device_guid).collect();
    vdevs::check_present(&best, &present, missing_log).map_err(|e| {
        if unusable.is_empty() {
            return e;
        }
        let why: Vec<&str> = unusable.iter().map(|u| u.why.msg.as_str()).collect();
        Error::new(e.kind, format!("{}; {}", e.msg, why.join("; ")))
    })?;
    let mut ordered = Vec::new();
    for (top, leaf) in vdevs::leaves_with_top(&best.tree) {
        match labelled.iter().find(|(_, _, c)| c.device_guid == leaf.guid) {
            Some((p, d, _)) => ordered.push((p.clone(), d.clone())),
            None => {
                // The leaf's placeholder says why (its UNAVAIL reason);
                // what is left in `unusable` is named by no leaf.
                let named = unusable.iter().position(|u| u.guid == Some(leaf.guid) || (u.guid.is_none() && u.path == leaf.path));
                let why = named.map_or_else(|| "not found at import".to_string(), |i| unusable.remove(i).why.msg);
                ordered.push((leaf.path.clone(), vdevs::missing_device(top, leaf, &why)));
            }
        }
    }
    Ok((best, ordered, unusable, spares))
}

/// Takes out of `labelled` the devices of `config`'s hot spares that are
/// not in its tree (by guid, whatever their label's state: a spare
/// detached just before a crash still has its member label), and the
/// spare labels of spares it no longer lists (`unusable`); returns the
/// spares found, and for each spare not found, why (its `unusable` entry).
fn standing_by(config: &LabelConfig, labelled: &mut Vec<(String, Arc<dyn BlockDevice>, LabelConfig)>, unusable: &mut Vec<Unusable>) -> Vec<super::spare::FoundSpare> {
    let in_tree: std::collections::HashSet<u64> = config.tree.leaves().iter().map(|l| l.guid).collect();
    let standby: Vec<u64> = config.spares.iter().map(|s| s.guid).filter(|g| !in_tree.contains(g)).collect();
    let mut found: Vec<super::spare::FoundSpare> = Vec::new();
    labelled.retain(|(p, d, c)| {
        if standby.contains(&c.device_guid) {
            if !found.iter().any(|f| f.guid == c.device_guid) {
                found.push(super::spare::FoundSpare { guid: c.device_guid, dev: Ok(d.clone()) });
            }
            return false;
        }
        if c.state == PoolState::Spare && !in_tree.contains(&c.device_guid) {
            let why = Error::invalid(format!("'{}' was a hot spare of pool '{}', which no longer lists it", p, c.pool_name));
            unusable.push(Unusable { path: p.clone(), guid: Some(c.device_guid), why });
            return false;
        }
        true
    });
    for g in standby {
        if found.iter().any(|f| f.guid == g) {
            continue;
        }
        let why = match unusable.iter().position(|u| u.guid == Some(g)) {
            Some(i) => unusable.remove(i).why.msg,
            None => "not found at import".to_string(),
        };
        found.push(super::spare::FoundSpare { guid: g, dev: Err(why) });
    }
    found
}

/// Why device `dev` (at `path`, leaf `guid` of `config`) cannot hold what
/// its leaf needs, if it cannot.
fn too_small(config: &LabelConfig, guid: u64, path: &str, dev: &dyn BlockDevice) -> Option<Error> {
    let (top, leaf) = vdevs::leaves_with_top(&config.tree).into_iter().find(|(_, l)| l.guid == guid)?;
    let need = label::LABELS_FRONT + vdevs::required_span(top) + label::LABELS_BACK;
    let size = label::usable_device_size(dev.size_bytes());
    (size < need).then(|| {
        Error::invalid(format!(
            "pool '{}': device {} ('{}') is smaller than the pool expects: {} bytes, needs {} (was it truncated?)",
            config.pool_name, leaf.id, path, size, need
        ))
    })
}

/// A leaf's scheduler on device `dev` (known as `path`), with the pool's
/// queue limits and its dirty-data gauge (for the write queue's depth).
pub(super) fn new_leaf(path: String, dev: Arc<dyn BlockDevice>, txg: &Arc<TxgEngine>, tunables: &Tunables) -> Leaf {
    let t2 = txg.clone();
    let gauge: crate::io::DirtyGauge = Arc::new(move || (t2.dirty_total(), t2.params().dirty_max));
    Leaf::new(path, dev, queue_limits(tunables), tunables.tarn_vdev_threads, gauge)
}

impl ShellShared {
    #[allow(clippy::too_many_arguments)]
    fn assemble(config: LabelConfig, devs: Vec<(String, Arc<dyn BlockDevice>)>, locks: Vec<Arc<FileDevice>>, tunables: &Tunables, arc: Option<Arc<BlockCache>>, readonly: bool, ub: Uberblock) -> Result<ShellShared> {
        let txg = Arc::new(TxgEngine::new(&config.pool_name, ub.txg, ThrottleParams::from_tunables(tunables)));
        // Dirty data bounds the buffers a write stream has in flight; keeping
        // that many free ones lets the stream reuse them.
        crate::sys::buf::set_recycle_limit(((tunables.zfs_dirty_data_max / 4 * 5) as usize).max(64 << 20));
        let events = Arc::new(EventLog::new(&config.pool_name, config.pool_guid, EventLimits::from_tunables(tunables)));
        let mut alloc = Allocator::new();
        let mut vdevs = Vec::new();
        let mut sector = 512usize;
        let mut devs = devs.into_iter();
        for top in &config.tree.children {
            if top.is_hole() {
                // No devices, no space: an empty place (`VdevSet`).
                vdevs.push(None);
                continue;
            }
            // A log vdev's failed writes fail their log round at once (it
            // falls back to a txg sync): they never wait for the device.
            let log = config.logs.contains(&top.id);
            let mut open = |leaf: &VdevNode| -> Result<Arc<crate::vdev::Vdev>> {
                let (path, dev) = devs.next().ok_or_else(|| Error::invalid(format!("pool '{}': no device for leaf '{}'", config.pool_name, leaf.path)))?;
                let size = label::usable_device_size(dev.size_bytes());
                let l = new_leaf(path, dev, &txg, tunables);
                // A failed write that the vdev cannot do without waits for
                // the device (`pool clear` resumes the sync) instead of
                // failing the txg.
                l.set_park_failed_writes(!log);
                Ok(vdevs::leaf_vdev(leaf, Arc::new(l), size))
            };
            let v = vdevs::build(top, &mut open)?;
            alloc
                .add_vdev_with_config(top.id, vdevs::alloc_start(top), top.asize, vdevs::alloc_config(top, &v))
                .map_err(|e| Error::invalid(format!("vdev {} ('{}'): {}", top.id, v.path, e)))?;
            if log {
                alloc.set_log(top.id, true).map_err(|e| Error::invalid(format!("log vdev {} ('{}'): {}", top.id, v.path, e)))?;
            }
            sector = sector.max(1 << top.ashift);
            vdevs.push(Some(v));
        }
        let core = Arc::new(PoolCore {
            name: config.pool_name.clone(),
            guid: config.pool_guid,
            vdevs: vdevs::VdevSet::new(vdevs),
            alloc: Mutex::new(alloc),
            txg,
            tunables: RwLock::new(tunables.clone()),
            cache: {
                // The process's ARC unless the opener gave the pool its own;
                // the pool's tunables are the process's in the daemon.
                let arc = arc.unwrap_or_else(crate::arc::shared);
                arc.apply_tunables(tunables);
                Arc::new(PoolCache::attach(arc)?)
            },
            l2: Arc::new(crate::arc::L2Arc::new(config.pool_guid, super::cache_dev::l2_params(tunables))),
            sector,
            readonly,
            size_bytes: Default::default(),
            free_bytes: Default::default(),
            deferred_bytes: Default::default(),
            usable_bytes: Default::default(),
            deferred_usable_bytes: Default::default(),
            kernel_caches: Default::default(),
            inflight: Default::default(),
            prefetch_stats: Default::default(),
            brt: Default::default(),
            errlog: super::errlog::ErrorLog::new(&config.pool_name),
            events,
            near_copies: Default::default(),
            prewritten_frees: Default::default(),
            spares: Default::default(),
            logs: super::log_vdev::LogVdevs::new(&config.logs),
            foreground: Default::default(),
        });
        core.refresh_space();
        // A faulted leaf degrades its vdev or, when that was its last
        // redundancy, suspends the pool (`PoolCore::leaf_faulted`).
        for (top, leaf) in core.leaves() {
            if let Some(l) = leaf.leaf() {
                core.hook_faults(top.id(), l);
            }
        }
        // Each device says now whether it is whole: a leaf import could not
        // open or use (its `MissingDevice` placeholder) is UNAVAIL before
        // the first read, so none is sent to it or counted against it.
        for (_, leaf) in core.leaves() {
            let Some(l) = leaf.leaf() else { continue };
            let _faulted_unless_online = l.check();
        }
        // From now on a second use of these devices in this process is
        // refused with the pool's name (`pool::vet`).
        for l in &locks {
            l.set_lock_owner(format!("part of active pool '{}'", config.pool_name));
        }
        Ok(ShellShared {
            core,
            sync: Mutex::new(SyncState { ub, cp_chain: vec![], log_chain: vec![], logs_since_cp: 0, cp_due_txg: 0 }),
            config: Mutex::new(config),
            pool_props: Mutex::new(KvMap::new()),
            locks,
        })
    }
}

/// A pool under construction: everything but its object sets.
struct ShellShared {
    core: Arc<PoolCore>,
    sync: Mutex<SyncState>,
    config: Mutex<LabelConfig>,
    pool_props: Mutex<KvMap>,
    locks: Vec<Arc<FileDevice>>,
}

impl ShellShared {
    fn write_configs(&self, cfg: &LabelConfig) -> Result<()> {
        write_configs(&self.core, cfg)?;
        *self.config.lock() = cfg.clone();
        Ok(())
    }

    fn core_objsets_new(&self, rootrec: KvMap) -> Result<(Arc<Objset>, Arc<Objset>)> {
        let mos = Objset::open(self.core.clone(), 0, &format!("{}/$MOS", self.core.name), &BlockPtr::default(), ObjsetType::Meta, MOS_PROPS)?;
        let root = Objset::open(self.core.clone(), ROOT_RECORD, &self.core.name, &BlockPtr::default(), ObjsetType::Dataset, objset_props(&rootrec)?)?;
        Ok((mos, root))
    }

    fn core_objsets_open(&self, ub: &Uberblock) -> Result<(Arc<Objset>, Arc<Objset>, KvMap, Rec)> {
        let name = self.core.name.clone();
        let mos = Objset::open(self.core.clone(), 0, &format!("{}/$MOS", name), &ub.mos, ObjsetType::Meta, MOS_PROPS)?;
        let dir = read_kv(&mos, POOL_DIR_OBJ).map_err(|e| e.context("pool directory"))?;
        let rec_obj = kv::get_u64(&dir, KEY_ROOT).ok_or_else(|| Error::corrupt("pool directory names no root dataset"))?;
        let rec = read_kv(&mos, rec_obj).map_err(|e| e.context("root dataset record"))?;
        let bp = rec.get(KEY_BP).ok_or_else(|| Error::corrupt("root dataset record has no block pointer"))?;
        let bp = BlockPtr::decode(bp)?;
        let root = Objset::open(self.core.clone(), rec_obj, &name, &bp, ObjsetType::Dataset, objset_props(&rec)?)?;
        let rec = Rec::decode(rec_obj, &rec).map_err(|e| e.context("root dataset record"))?;
        Ok((mos, root, dir, rec))
    }

    fn finish(self, mos: Arc<Objset>, root: Arc<Objset>, root_rec: Option<Rec>) -> Shared {
        self.core.brt.attach(&mos);
        let dsl = Datasets::new(self.core.clone(), mos.clone(), root_rec.as_ref().map_or(ROOT_RECORD, |r| r.id), root.clone(), root_rec);
        Shared {
            scan: Arc::new(Scanner::new(&self.core.name, self.core.events.clone())),
            core: self.core,
            mos,
            root,
            dsl,
            sync: self.sync,
            config: self.config,
            pool_props: self.pool_props,
            dir_dirty: Default::default(),
            tree_lock: Mutex::new(()),
            history: Mutex::new(std::collections::VecDeque::with_capacity(TXG_HISTORY)),
            rewound: Mutex::new(None),
            open_warnings: Mutex::new(Vec::new()),
            locks: Mutex::new(self.locks),
        }
    }
}

/// The meta object set keeps three copies of every block, as OpenZFS does:
/// losing it loses the pool, and it is small.
const MOS_PROPS: ObjsetProps = ObjsetProps {
    write: WriteProps { copies: super::core::POOL_METADATA_COPIES, ..WriteProps::METADATA },
    recordsize: 128 << 10,
    primarycache: crate::object::CachePolicy::All,
    secondarycache: crate::object::CachePolicy::All,
};

/// The root dataset's record is the second object created in the MOS
/// (after the pool directory's three dnode slots).
const ROOT_RECORD: u64 = 4;

/// Largest key/value object tarn reads (pool directory, dataset records):
/// far above any real one, and a bound on what a damaged size field can make
/// import allocate.
const KV_MAX_BYTES: u64 = 64 << 20;

pub(crate) fn read_kv(os: &Objset, obj: u64) -> Result<KvMap> {
    let info = os.info(obj)?;
    if info.size > KV_MAX_BYTES {
        return Err(Error::corrupt(format!("key/value object {} claims {} bytes", obj, info.size)));
    }
    let data = os.read(obj, 0, info.size as usize)?;
    Ok(kv::decode(&data)?)
}

/// Rewrites the MOS key/value object `obj` whole with `bytes` in `txg`
/// (syncing context: the error log, the event ring), creating it first
/// when `obj` is 0; returns the object's number when it created one (the
/// pool directory must then name it). The object is emptied before it is
/// written, so its old content is never read (it may be what is damaged).
pub(crate) fn rewrite_kv(mos: &Objset, txg: u64, obj: u64, bytes: &[u8]) -> Result<Option<u64>> {
    let (obj, created) = match obj {
        0 => {
            let o = mos.create_in(txg, ObjectType::KvMap, 3)?;
            (o, Some(o))
        }
        o => (o, None),
    };
    mos.truncate_txg(txg, obj, 0)?;
    mos.write_txg(txg, obj, 0, bytes)?;
    Ok(created)
}

/// Writes the config to every leaf that is up; a leaf of a redundant vdev
/// that fails is faulted and left (its vdev goes on degraded).
fn write_configs(core: &PoolCore, cfg: &LabelConfig) -> Result<()> {
    for (top, v) in core.leaves() {
        let (Some(l), true) = (v.leaf(), v.state().usable()) else { continue };
        let mut c = cfg.clone();
        c.device_guid = v.guid;
        c.top_guid = top.guid;
        if let Err(e) = write_config_all(l, &c) {
            l.fault(Health::Faulted(format!("writing labels: {}", e)));
            if !core.logs.contains(top.id()) && (top.leaf().is_some() || !top.writable()) {
                return Err(Error::io(format!("writing labels of {}", v.path), e));
            }
        }
    }
    Ok(())
}

impl Shared {
    /// Lets go of the lock the pool took on `dev` when it was opened, once
    /// the device has left the tree: another pool (or this one, by
    /// `attach`) may take it now.
    pub(super) fn release_lock(&self, dev: &Arc<dyn BlockDevice>) {
        let target = Arc::as_ptr(dev) as *const u8;
        self.locks.lock().retain(|l| Arc::as_ptr(l) as *const u8 != target);
    }

    /// Asks for a space checkpoint in txg `txg` (or the first after it to
    /// sync): from then on no uberblock's checkpoint or space log names a
    /// top-level vdev the allocator dropped before `txg` opened, so its id
    /// may be given again (`pool::log_vdev`, "Removal").
    pub(super) fn checkpoint_from(&self, txg: u64) {
        let mut s = self.sync.lock();
        s.cp_due_txg = s.cp_due_txg.max(txg);
    }

    /// Writes `cfg` to every leaf that is up (see `write_configs`) and, as
    /// a spare label, to every available hot spare; it is the pool's config
    /// from then on.
    pub(super) fn write_configs(&self, cfg: &LabelConfig) -> Result<()> {
        super::spare::check_spares(cfg)?;
        write_configs(&self.core, cfg)?;
        self.write_spare_labels(cfg);
        *self.config.lock() = cfg.clone();
        Ok(())
    }

    /// Keeps a device's open-file lock with the pool's (a hot spare added).
    pub(super) fn keep_lock(&self, dev: Arc<FileDevice>) {
        self.locks.lock().push(dev);
    }

    /// Says who holds `dev`'s lock, when it is one of the pool's files:
    /// what another command that wants the device is told (`pool::vet`).
    pub(super) fn set_lock_owner(&self, dev: &Arc<dyn BlockDevice>, owner: &str) {
        let target = Arc::as_ptr(dev) as *const u8;
        if let Some(l) = self.locks.lock().iter().find(|l| Arc::as_ptr(l) as *const u8 == target) {
            l.set_lock_owner(owner.to_string());
        }
    }

    /// After a rewind to `txg`, the abandoned newer uberblocks are erased so
    /// a later import cannot pick one whose blocks the new txgs reuse.
    fn forget_uberblocks_after(&self, txg: u64, newest: u64) -> Result<()> {
        for (_, v) in self.core.leaves() {
            let Some(leaf) = v.leaf() else { continue };
            let zero = crate::sys::buf::AlignedBuf::zeroed(label::ub_slot_size(v.ashift) as usize);
            for t in txg + 1..=newest.min(txg + label::ub_slot_count(v.ashift) - 1) {
                for i in 0..label::LABEL_COUNT {
                    let off = label::ub_slot_offset(i, v.dev_size, v.ashift, t);
                    leaf.write_now(&zero, off).map_err(|e| Error::io(format!("erasing uberblock on {}", v.path), e))?;
                }
            }
            leaf.flush().map_err(|e| Error::io(format!("flushing {}", v.path), e))?;
        }
        Ok(())
    }

    /// Whether `txg` has changes to sync when its time comes. Frees the
    /// allocator defers are no reason: an idle pool would write txgs that
    /// share the newest space log with the last one, leaving import no
    /// older txg to rewind to. Writers that need the deferred space make
    /// the pool sync (`Objset::begin_for`), and `statfs` counts it free.
    fn has_work(&self, txg: u64) -> bool {
        self.dsl.has_work(txg) || self.mos.is_dirty(txg) || self.dir_dirty.load(Ordering::Acquire) || self.core.errlog.is_dirty() || self.scan.is_dirty() || self.core.events.is_dirty()
    }

    /// Writes the pool directory into `txg` when it changed: by a property
    /// change, or by the first flush of the block reference table, the
    /// error log or the event ring (`created`: the keys naming their new
    /// MOS objects).
    fn sync_pool_dir(&self, txg: u64, created: impl Iterator<Item = (&'static str, u64)>) -> Result<()> {
        let mut d = self.pool_props.lock();
        let mut changed = self.dir_dirty.swap(false, Ordering::AcqRel);
        let state = super::vdev_admin::encode_state(&self.core);
        if super::vdev_admin::stored_state(&d).unwrap_or_default() != state.as_slice() {
            if state.is_empty() {
                d.remove(super::vdev_admin::KEY_VDEV_STATE);
            } else {
                d.insert(super::vdev_admin::KEY_VDEV_STATE.to_string(), state);
            }
            changed = true;
        }
        for (key, obj) in created {
            kv::put_u64(&mut d, key, obj);
            changed = true;
        }
        if !changed {
            return Ok(());
        }
        let bytes = kv::encode(&d);
        self.mos.write_txg(txg, POOL_DIR_OBJ, 0, &bytes)?;
        self.mos.truncate_txg(txg, POOL_DIR_OBJ, bytes.len() as u64)
    }

    /// The first time the pool holds a block reference table (or an
    /// intent-log chain), its labels say so before the uberblock that names
    /// it, so that a tarn without the feature refuses to write to it.
    fn activate_compat(&self, feature: u64) -> Result<()> {
        let mut cfg = self.config.lock().clone();
        if cfg.features_compat & feature != 0 {
            return Ok(());
        }
        cfg.features_compat |= feature;
        cfg.config_txg += 1;
        self.write_configs(&cfg)
    }

    fn sync_loop(&self) {
        let core = &self.core;
        while let Some(txg) = core.txg.next_sync(&|t| self.has_work(t)) {
            // A panic while syncing is an engine bug. Caught, it suspends the
            // pool like an I/O failure, so writers and `sync` callers get an
            // error instead of waiting forever for a thread that is gone.
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sync_txg(txg)))
                .unwrap_or_else(|p| Err(Error::corrupt(format!("the sync thread panicked: {}", panic_message(p.as_ref())))));
            match res {
                Ok(()) => core.txg.sync_done(txg),
                Err(e) => {
                    core.txg.sync_failed(txg, e.to_string());
                    return;
                }
            }
        }
    }

    fn sync_txg(&self, txg: u64) -> Result<()> {
        let core = self.core.clone();
        let t2 = core.txg.clone();
        let t0 = std::time::Instant::now();
        let dirty0 = core.txg.dirty_of(txg);
        let io0 = self.device_writes();
        let group = WriteGroup::new(Some(Box::new(move |bytes| t2.dirty_retire(txg, bytes))));
        // The leaves the txg's uberblock may go to: those in the tree now.
        // A leaf that joins during the sync (`vdev_change`, a hot spare)
        // is recorded with its DTL only by the next txg's pool directory;
        // an uberblock of this txg on it would tell import it missed
        // nothing up to here (`vdev_admin::derive_dtls`).
        let members: std::collections::HashSet<u64> = core.leaves().iter().map(|(_, l)| l.guid).collect();
        // A device truncated or deleted since the last txg is not written
        // to at all (writes past the end of a truncated file would grow it
        // back with zeros). Nothing of the txg is written yet: a fault that
        // `pool clear` can end parks the sync until then.
        self.devices_or_park()?;
        // Clones of this txg take their references before anything is freed.
        core.brt.apply(&core, txg)?;
        self.dsl.sync(txg, &group)?;
        core.brt.release_unlinked(&core, txg)?;
        let brt_created = core.brt.flush(&self.mos, txg)?;
        let errlog_created = core.errlog.flush(&self.mos, txg)?;
        let scan_created = self.scan.flush(&self.mos, txg)?;
        let events_created = core.events.flush(&self.mos, txg)?;
        let created = [(KEY_BRT, brt_created), (KEY_ERRLOG, errlog_created), (KEY_SCAN, scan_created), (KEY_EVENTS, events_created)].into_iter().filter_map(|(k, o)| Some((k, o?)));
        self.sync_pool_dir(txg, created)?;
        let mos_bp = self.mos.sync(txg, &group)?;
        let t_issue = t0.elapsed();
        group.wait().map_err(|e| Error::new(ErrorKind::Io, e))?;
        let t_wait = t0.elapsed();
        let (cp, cp_chain, log) = self.write_space(txg)?;
        self.flush_leaves()?;
        let ub = {
            let s = self.sync.lock();
            let mut ub = s.ub.clone();
            assert!(txg > ub.txg, "uberblock txg {} not above {}", txg, ub.txg);
            ub.txg = txg;
            ub.timestamp = now_secs();
            if let Some(bp) = mos_bp {
                ub.mos = bp;
            }
            if let Some(cp) = cp {
                ub.space_cp = cp;
                ub.space_cp_txg = txg;
                ub.space_log = BlockPtr::default();
            }
            if let Some(l) = log {
                ub.space_log = l;
            }
            if core.brt.object() != 0 {
                ub.features_active |= FEATURE_BLOCK_CLONING;
            }
            // The tree the txg was written to (`pool attach`, `detach`,
            // `replace` change it).
            ub.guid_sum = self.config.lock().tree.guid_sum();
            ub
        };
        if brt_created.is_some() {
            self.activate_compat(FEATURE_BLOCK_CLONING)?;
        }
        if self.dsl.has_log_chains() {
            self.activate_compat(FEATURE_INTENT_LOG)?;
        }
        if cfg!(debug_assertions) {
            core.alloc.lock().check_invariants().map_err(|e| Error::corrupt(format!("allocator: {}", e)))?;
        }
        self.or_park(Some(txg), || self.check_devices().and_then(|()| self.write_uberblock(&ub, &members)))?;
        {
            let mut s = self.sync.lock();
            s.ub = ub;
            if let Some(c) = cp_chain {
                s.cp_chain = c;
                s.log_chain.clear();
                s.logs_since_cp = 0;
                if txg >= s.cp_due_txg {
                    s.cp_due_txg = 0;
                }
            }
            if let Some(l) = log {
                s.log_chain.push(l);
                s.logs_since_cp += 1;
            }
        }
        let io1 = self.device_writes();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        self.record(TxgRecord {
            txg,
            dirty_bytes: dirty0,
            issue_ms: ms(t_issue),
            write_ms: ms(t_wait),
            sync_ms: ms(t0.elapsed()),
            // A leaf that left the tree meanwhile (`vdev_change`) takes its
            // counts with it: the record then undercounts, never wraps.
            write_ops: io1.0.saturating_sub(io0.0),
            write_bytes: io1.1.saturating_sub(io0.1),
            timing: core.txg.timing(txg),
        });
        core.alloc.lock().txg_synced(txg);
        self.dsl.sync_done(txg);
        self.mos.sync_done(txg);
        core.refresh_space();
        // Keep free buffers for what is dirty now (the stream continues),
        // give the rest back when writing has gone quiet.
        crate::sys::buf::trim_recycled((2 * core.txg.dirty_total() as usize).max(256 << 20));
        Ok(())
    }

    /// (write ops, write bytes) of all devices so far.
    fn device_writes(&self) -> (u64, u64) {
        self.core.leaves().iter().filter_map(|(_, v)| v.leaf()).fold((0, 0), |(o, b), l| {
            let s = l.stats();
            (o + s.write_ops.load(Ordering::Relaxed), b + s.write_bytes.load(Ordering::Relaxed))
        })
    }

    fn record(&self, r: TxgRecord) {
        if std::env::var_os("TARN_DEBUG_SYNC").is_some() {
            eprintln!("{:?}", r);
        }
        let mut h = self.history.lock();
        if h.len() == TXG_HISTORY {
            h.pop_front();
        }
        h.push_back(r);
    }

    /// Writes the space log (or a checkpoint) of `txg` and waits for it.
    fn write_space(&self, txg: u64) -> Result<SpaceWritten> {
        let group = WriteGroup::new(None);
        let interval = self.core.tunables.read().tarn_space_checkpoint_interval;
        // A txg whose records would not fit one log block (1 MiB) writes a
        // checkpoint instead, which is split into chunks.
        let big = self.core.alloc.lock().records_upper_bound(txg, 2) > spacemap::CHUNK_BYTES / 2;
        let (due, old, prev) = {
            let s = self.sync.lock();
            let asked = s.cp_due_txg != 0 && txg >= s.cp_due_txg;
            let due = big || asked || s.ub.space_cp.is_hole() || s.logs_since_cp >= interval;
            let mut old = s.cp_chain.clone();
            old.extend(s.log_chain.iter().copied());
            (due, old, s.log_chain.last().copied().unwrap_or_default())
        };
        let out = if due {
            let (first, chain) = spacemap::write_checkpoint(&self.core, txg, &old, &group)?;
            (Some(first), Some(chain), None)
        } else {
            (None, None, spacemap::write_log(&self.core, txg, &prev, &group)?)
        };
        group.wait().map_err(|e| Error::new(ErrorKind::Io, e))?;
        Ok(out)
    }

    /// Before an uberblock makes a txg count: every device must still be
    /// the whole device the pool opened (`BlockDevice::health`: not
    /// truncated, not deleted or removed) and the pool not suspended by a
    /// fault found elsewhere meanwhile. A device that fails faults (and
    /// suspends the pool through its hook); the txg is not written.
    fn check_devices(&self) -> Result<()> {
        for v in self.core.vdevs.all().iter() {
            if self.core.logs.contains(v.id()) {
                // Nothing a txg needs is on a log vdev (`log_vdev`): its
                // leaves are checked, and a failed one faults, no more.
                v.leaf_arcs().iter().filter_map(|l| l.leaf().map(|io| io.check())).for_each(drop);
                continue;
            }
            if let Some(l) = v.leaf() {
                let h = l.check();
                if h != Health::Online {
                    return Err(Error::new(ErrorKind::Io, vdevs::fault_message(&v.path, &h)));
                }
            } else if !v.writable() {
                return Err(Error::new(ErrorKind::Io, format!("{} is {}: insufficient replicas", v.path, v.state().name())));
            }
        }
        match self.core.txg.failure() {
            Some(f) => Err(Error::new(ErrorKind::Suspended, f)),
            None => Ok(()),
        }
    }

    /// `check_devices` at the start of a sync, before anything of the txg
    /// is written: while a device fault that `pool clear` can end suspends
    /// the pool, the sync waits for the clear (as when its writes are
    /// parked), then checks again — the txg is written after all.
    fn devices_or_park(&self) -> Result<()> {
        self.or_park(None, || self.check_devices())
    }

    /// Runs a step of the sync that can be run again — the device check at
    /// its start, and the check and uberblock at its end, when everything
    /// the uberblock names is written and flushed — until it succeeds:
    /// while it fails on a device fault that `pool clear` can end, the sync
    /// waits for the clear and runs it again (as OpenZFS's spa_sync writes
    /// the uberblocks again after zio_resume_wait). Fails when the
    /// suspension cannot be resumed or the pool closes. (The writes and
    /// the flush before the uberblock are no such step: a write that fails
    /// is parked by its leaf, and a failed flush may have lost what it was
    /// to keep; the flush after the uberblock covers only the uberblock,
    /// written again.) With `txg`, the suspension's reason becomes the
    /// step's error (`TxgEngine::note_sync_waits`) unless that is the
    /// suspension itself.
    fn or_park(&self, txg: Option<u64>, step: impl Fn() -> Result<()>) -> Result<()> {
        loop {
            match step() {
                Err(e) if self.core.txg.resumable() => {
                    if let (Some(t), false) = (txg, e.kind == ErrorKind::Suspended) {
                        self.core.txg.note_sync_waits(t, &e.to_string());
                    }
                    if !self.core.txg.wait_resumed() {
                        return Err(e);
                    }
                }
                res => return res,
            }
        }
    }

    /// Writes the uberblock to every ring of every leaf that is up and was
    /// in the tree when the txg's sync began (`members`), then flushes
    /// them. A leaf of a redundant vdev that fails faults and is left; the
    /// txg fails when a top-level vdev is left with no leaf (the sync
    /// writes it again after `pool clear`: `or_park`).
    fn write_uberblock(&self, ub: &Uberblock, members: &std::collections::HashSet<u64>) -> Result<()> {
        for (top, v) in self.core.leaves() {
            let (Some(leaf), true) = (v.leaf(), v.state().usable()) else { continue };
            if !members.contains(&v.guid) {
                continue;
            }
            let buf = uberblock_slot(ub, v.ashift);
            for i in 0..label::LABEL_COUNT {
                let off = label::ub_slot_offset(i, v.dev_size, v.ashift, ub.txg);
                if let Err(e) = leaf.write_now(&buf, off) {
                    if !self.core.logs.contains(top.id()) && (top.leaf().is_some() || !top.writable()) {
                        return Err(Error::io(format!("writing uberblock to {}", v.path), e));
                    }
                    break;
                }
            }
        }
        self.flush_leaves()?;
        self.check_devices()
    }

    /// Flushes every leaf that is up; see `write_uberblock` for failures.
    fn flush_leaves(&self) -> Result<()> {
        for (top, v) in self.core.leaves() {
            let (Some(leaf), true) = (v.leaf(), v.state().usable()) else { continue };
            if let Err(e) = leaf.flush() {
                if !self.core.logs.contains(top.id()) && (top.leaf().is_some() || !top.writable()) {
                    return Err(Error::io(format!("flushing {}", v.path), e));
                }
            }
        }
        Ok(())
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>().copied().or_else(|| p.downcast_ref::<String>().map(|s| s.as_str())).unwrap_or("(no message)")
}

/// A pool found by scanning devices.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DiscoveredPool {
    pub name: String,
    #[serde(with = "crate::guid_json")]
    pub guid: u64,
    pub state: String,
    pub txg: u64,
    pub devices: Vec<String>,
    /// Devices the config names that were not found (log devices apart).
    pub missing: Vec<String>,
    /// Devices of log vdevs that were not found: importing without them
    /// discards their intent-log records (`pool import --missing-log`).
    #[serde(default)]
    pub missing_logs: Vec<String>,
}

/// Finds pools on the given files/devices (a directory is scanned one level).
pub fn discover(paths: &[PathBuf]) -> Vec<DiscoveredPool> {
    let mut candidates = Vec::new();
    for p in paths {
        if p.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| !p.is_dir()).collect();
                v.sort();
                candidates.extend(v);
            }
        } else {
            candidates.push(p.clone());
        }
    }
    let mut pools: Vec<(DiscoveredPool, LabelConfig)> = Vec::new();
    // One device under two names (a symlink, `-d` given twice) is one device:
    // listing it twice would make the import open it twice.
    let mut seen = Vec::new();
    let mut spare_paths: Vec<(u64, PathBuf)> = Vec::new();
    for path in candidates {
        let id = std::fs::metadata(&path).ok().and_then(|m| crate::sys::inuse::DeviceId::of(&m));
        if id.is_some_and(|id| seen.contains(&id)) {
            continue;
        }
        seen.extend(id);
        let Some(cfg) = probe(&path) else { continue };
        if cfg.state == PoolState::Spare {
            // A spare is no pool: it joins the devices of the pool it is
            // listed by, if that pool is found (below).
            spare_paths.push((cfg.pool_guid, path));
            continue;
        }
        let entry = match pools.iter_mut().find(|(d, _)| d.guid == cfg.pool_guid) {
            Some(e) => e,
            None => {
                pools.push((
                    DiscoveredPool { name: cfg.pool_name.clone(), guid: cfg.pool_guid, state: cfg.state.name().into(), txg: cfg.config_txg, devices: vec![], missing: vec![], missing_logs: vec![] },
                    cfg.clone(),
                ));
                pools.last_mut().expect("just pushed")
            }
        };
        if cfg.config_txg > entry.1.config_txg {
            entry.0.state = cfg.state.name().into();
            entry.0.txg = cfg.config_txg;
            entry.1 = cfg.clone();
        }
        entry.0.devices.push(path.display().to_string());
    }
    for (pool, path) in spare_paths {
        if let Some((d, _)) = pools.iter_mut().find(|(d, _)| d.guid == pool) {
            d.devices.push(path.display().to_string());
        }
    }
    for (d, cfg) in pools.iter_mut() {
        let found: Vec<u64> = d.devices.iter().filter_map(|p| probe(Path::new(p)).map(|c| c.device_guid)).collect();
        let leaves = cfg.tree.leaves();
        let logs: Vec<u64> = cfg.tree.children.iter().filter(|t| cfg.logs.contains(&t.id)).flat_map(|t| t.leaves().into_iter().map(|l| l.guid)).collect();
        let gone = leaves.iter().filter(|l| !found.contains(&l.guid));
        let (gone_logs, gone_data): (Vec<&&VdevNode>, Vec<&&VdevNode>) = gone.partition(|l| logs.contains(&l.guid));
        d.missing = gone_data.iter().map(|l| l.path.clone()).collect();
        d.missing_logs = gone_logs.iter().map(|l| l.path.clone()).collect();
        // Order devices as the config does.
        let order = |p: &String| probe(Path::new(p)).and_then(|c| leaves.iter().position(|l| l.guid == c.device_guid)).unwrap_or(usize::MAX);
        d.devices.sort_by_key(order);
    }
    pools.into_iter().map(|(d, _)| d).collect()
}

fn probe(path: &Path) -> Option<LabelConfig> {
    let dev = FileDevice::open_read_only(path).ok()?;
    read_labels(&dev).config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(id: u32, asize: u64) -> VdevNode {
        VdevNode { kind: VdevKind::File, id, guid: 100 + u64::from(id), ashift: 12, nparity: 0, asize, metaslab_shift: 24, path: format!("/x/{id}.img"), children: vec![] }
    }

    fn config(children: Vec<VdevNode>) -> LabelConfig {
        LabelConfig {
            pool_guid: 7,
            pool_name: "tank".into(),
            state: PoolState::Active,
            config_txg: 9,
            format_version: FORMAT_VERSION,
            features_incompat: FEATURE_LOG_VDEVS | FEATURE_HOLE_VDEVS,
            features_compat: 0,
            hostname: String::new(),
            device_guid: 100,
            top_guid: 100,
            tree: VdevNode { kind: VdevKind::Root, id: 0, guid: 7, ashift: 12, nparity: 0, asize: 0, metaslab_shift: 0, path: String::new(), children },
            spares: vec![],
            logs: vec![],
        }
    }

    /// A log vdev 1 was removed and id 1 given to a new, smaller vdev: a
    /// space checkpoint from before (describing the old vdev 1) must be
    /// refused at import, naming the vdev, not loaded onto the new device.
    /// The config's holes, and vdevs the checkpoint does not know yet (added
    /// after it), pass.
    #[test]
    fn a_checkpoint_of_an_id_given_again_is_refused() {
        let cfg = config(vec![file(0, 1 << 30), file(1, 256 << 20), VdevNode::hole(2, 12), file(3, 64 << 20)]);
        let front = label::LABELS_FRONT;
        let mut a = Allocator::new();
        a.add_vdev(0, front, 1 << 30, 12).unwrap();
        a.add_vdev(1, front, 256 << 20, 12).unwrap();
        check_space_extents(&cfg, &a).expect("the checkpoint matches; vdev 3 came after it, vdev 2 is a hole");
        let mut stale = Allocator::new();
        stale.add_vdev(0, front, 1 << 30, 12).unwrap();
        stale.add_vdev(1, front, 512 << 20, 12).unwrap();
        let e = check_space_extents(&cfg, &stale).expect_err("vdev 1 as the old occupant");
        assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
        assert!(e.to_string().contains("vdev 1") && e.to_string().contains("given again") && e.to_string().contains("'tank'"), "{e}");
    }
}
