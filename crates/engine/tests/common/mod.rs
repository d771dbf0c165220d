//! Helpers shared by the integration tests: a seeded generator, data
//! patterns, in-memory devices and pool tunables small enough that txgs come
//! often. Each test file uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::sync::Arc;

use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_ondisk::bp::Dva;
use tarn_engine::{OpenOptions, Pool, Result, Tunables};

/// splitmix64: one `u64` seed drives a whole run, so a failure reproduces
/// from the seed it prints.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n); n > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "range({lo}, {hi})");
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An independent generator (for a thread or a sub-task).
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

/// `len` pseudo-random bytes from `seed` (incompressible).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `n` in-memory devices of `size` bytes named mem0, mem1, …
pub fn mem_devs(n: usize, size: u64, seed: u64) -> Vec<Arc<FaultDevice>> {
    (0..n).map(|i| Arc::new(FaultDevice::new(size, seed.wrapping_add(i as u64)).with_name(format!("mem{}", i)))).collect()
}

/// The devices as a pool takes them, keeping our handles usable.
pub fn as_dyn(devs: &[Arc<FaultDevice>]) -> Vec<(String, Arc<dyn BlockDevice>)> {
    devs.iter().enumerate().map(|(i, d)| (format!("mem{}", i), d.clone() as Arc<dyn BlockDevice>)).collect()
}

/// Tunables for tests: 8 MiB of dirty data (a txg every ~1.6 MiB written),
/// few I/O threads, a small block cache so reads really reach the devices.
/// A space checkpoint every third txg (instead of 64) puts checkpoints,
/// deferred frees and log replay in every crash run: a replay bug around
/// them once made pools unimportable and no test ran long enough to see it.
/// Pool property `failmode=continue`, for tests that write to a pool a
/// device fault suspended and expect an error: with `failmode=wait` (the
/// default) such a writer waits for `pool clear`.
pub fn fail_on_fault() -> Vec<(String, String)> {
    vec![("failmode".into(), "continue".into())]
}

pub fn small_tunables() -> Tunables {
    Tunables {
        zfs_dirty_data_max: 8 << 20,
        tarn_vdev_threads: 4,
        zfs_arc_max: 8 << 20,
        zfs_arc_min: 4 << 20,
        tarn_space_checkpoint_interval: 3,
        ..Default::default()
    }
}

/// An ARC of the pool's own (for `OpenOptions::arc`), sized by `t`: for
/// tests that count one pool's hits, misses and sizes, which the process's
/// ARC would mix with those of the other tests running beside them.
pub fn own_arc(t: &Tunables) -> Option<Arc<tarn_engine::arc::BlockCache>> {
    Some(Arc::new(tarn_engine::arc::BlockCache::new(t.zfs_arc_max, t.zfs_arc_min)))
}

pub fn open(devs: &[Arc<FaultDevice>]) -> Result<Pool> {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() })
}

/// As `open`, with `zfs_scan_legacy` at `legacy` (scrubs in logical order
/// when 1).
pub fn open_legacy(devs: &[Arc<FaultDevice>], legacy: u32) -> Pool {
    let tunables = Tunables { zfs_scan_legacy: legacy, ..small_tunables() };
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables, ..Default::default() }).expect("import")
}

/// As `open`, allowed to rewind past txgs that cannot be opened (`import -F`).
pub fn open_rewinding(devs: &[Arc<FaultDevice>]) -> Result<Pool> {
    Pool::open_on(as_dyn(devs), vec![], &OpenOptions { tunables: small_tunables(), rewind: true, ..Default::default() })
}

/// The crash images of every device (power lost on all of them at once).
pub fn crash_all(devs: &[Arc<FaultDevice>], seed: u64) -> Vec<Arc<FaultDevice>> {
    devs.iter().enumerate().map(|(i, d)| Arc::new(d.crash(seed.wrapping_add(i as u64 * 0x1000_0001)))).collect()
}

/// Where two byte strings first differ, for messages that must not dump data.
pub fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("first difference at byte {} (lengths {} and {})", i, a.len(), b.len()),
        None => format!("lengths differ: {} and {}", a.len(), b.len()),
    }
}

/// A pool named "tank" on `n` in-memory devices of 128 MiB, with root
/// dataset properties `props`.
pub fn new_pool(n: usize, props: &[(&str, &str)]) -> (Vec<Arc<FaultDevice>>, Pool) {
    pool_with(n, 128 << 20, 1, props)
}

/// A pool named "tank" on `n` in-memory devices of `size` bytes (devices
/// seeded from `seed`), with root dataset properties `props`.
pub fn pool_with(n: usize, size: u64, seed: u64, props: &[(&str, &str)]) -> (Vec<Arc<FaultDevice>>, Pool) {
    let devs = mem_devs(n, size, seed);
    let opts = tarn_engine::CreateOptions {
        tunables: small_tunables(),
        root_props: props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    let pool = Pool::create_on("tank", as_dyn(&devs), vec![], &opts).expect("create");
    (devs, pool)
}

/// A pool "tank" of `groups` 2-way mirrors on in-memory devices (device
/// 2i and 2i+1 form mirror i), with `copies` copies of data.
pub fn mirror_pool(groups: usize, copies: &str) -> (Vec<Arc<FaultDevice>>, Pool) {
    use tarn_engine::pool::vdevs::{Layout, NewTop};
    let devs = mem_devs(2 * groups, 128 << 20, 7);
    let named = as_dyn(&devs);
    let tops = named.chunks(2).map(|c| NewTop { layout: Layout::Mirror, devices: c.to_vec() }).collect();
    let opts = tarn_engine::CreateOptions { tunables: small_tunables(), root_props: vec![("copies".into(), copies.into())], ..Default::default() };
    let pool = Pool::create_tops("tank", tops, vec![], &opts).expect("create a mirror pool");
    (devs, pool)
}

/// Creates an object holding `data` (one transaction, no sync); its id.
pub fn put(pool: &Pool, data: &[u8]) -> u64 {
    let os = pool.root();
    let tx = os.begin().expect("begin");
    let obj = os.create(&tx, tarn_ondisk::ObjectType::PlainData).expect("create");
    os.write(&tx, obj, 0, data).expect("write");
    obj
}

/// `n` objects of `len` bytes of known contents (seeded from `seed`),
/// synced: (object, contents).
pub fn filled(pool: &Pool, n: u64, len: usize, seed: u64) -> Vec<(u64, Vec<u8>)> {
    let files: Vec<(u64, Vec<u8>)> = (0..n).map(|i| {
        let d = pattern(len, seed + i);
        (put(pool, &d), d)
    }).collect();
    pool.sync().expect("sync");
    files
}

/// Each object of `files` reads back exactly its contents.
pub fn reads_back(pool: &Pool, files: &[(u64, Vec<u8>)], ctx: &str) {
    for (obj, data) in files {
        assert!(pool.root().read(*obj, 0, data.len()).expect("read") == *data, "{ctx}: object {obj} reads back exactly");
    }
}

/// Every block pointer of object `obj` of the root data set (0: its dnode
/// array), holes and embedded blocks left out.
pub fn blocks(pool: &Pool, obj: u64) -> Vec<tarn_ondisk::bp::BlockPtr> {
    pool.root().tree(obj, 1 << 20).expect("tree").into_iter().map(|(_, _, bp)| bp).filter(|bp| !bp.is_hole() && !bp.is_embedded()).collect()
}

/// Damages a copy for certain: overwrites its first sector with a pattern
/// (a single flipped bit could land in the sector padding after a short
/// block's payload, which no checksum covers).
pub fn corrupt(devs: &[Arc<FaultDevice>], dva: &Dva) {
    assert!(!dva.is_empty(), "a copy to damage");
    let d = &devs[dva.vdev as usize];
    d.write_at(&[0x5Au8; 512], dva.offset).expect("write");
    d.flush().expect("flush");
    d.corrupt(dva.offset, dva.asize, dva.offset);
}

/// What the devices hold durably right now, as new devices (a power cut
/// with nothing pending: after a sync, everything written so far).
pub fn durable(devs: &[Arc<FaultDevice>]) -> Vec<Arc<FaultDevice>> {
    devs.iter().map(|d| Arc::new(d.snapshot_durable())).collect()
}

/// Syncs, then: the checker is clean and the engine's invariants hold.
pub fn verified(pool: &Pool, ctx: &str) -> tarn_engine::pool::verify::VerifyReport {
    pool.sync().expect("sync");
    let rep = pool.verify().expect("verify");
    assert!(rep.errors.is_empty(), "{ctx}: verify: {:#?}", rep.errors);
    pool.check_invariants().unwrap_or_else(|e| panic!("{ctx}: invariants: {e}"));
    rep
}

/// Waits for the scan that import or `online` started, which must be a
/// resilver, and returns its report (the bytes it copied onto leaves).
pub fn resilvered(pool: &Pool) -> tarn_engine::pool::scan::ScanReport {
    let st = pool.scan_wait();
    assert_eq!(st.func, tarn_engine::pool::scan::ScanFunc::Resilver, "{st:?}");
    st.report
}

/// The error of an import that must fail (`Pool` has no `Debug`, so
/// `expect_err` is not available).
pub fn refused(r: Result<Pool>, what: &str) -> tarn_engine::Error {
    match r {
        Ok(p) => panic!("{what}: the pool imported at txg {}", p.uberblock().txg),
        Err(e) => e,
    }
}

/// A POSIX file system on a one-device in-memory pool that can be exported
/// and imported again.
pub struct Mounted {
    pub devs: Vec<Arc<FaultDevice>>,
    pub pool: Option<Pool>,
    pub fs: Option<Arc<tarn_engine::posix::PosixFs>>,
}

/// Mounts the root dataset of `pool` with default options.
pub fn mount(pool: &Pool) -> Arc<tarn_engine::posix::PosixFs> {
    tarn_engine::posix::PosixFs::open(pool.root().clone(), Default::default()).expect("mount")
}

/// A pool named "tank" on one in-memory device of `size` bytes.
pub fn pool_of(size: u64, seed: u64) -> (Vec<Arc<FaultDevice>>, Pool) {
    pool_with(1, size, seed, &[])
}

impl Mounted {
    pub fn new(size: u64, seed: u64) -> Mounted {
        let (devs, pool) = pool_of(size, seed);
        let fs = mount(&pool);
        Mounted { devs, pool: Some(pool), fs: Some(fs) }
    }

    pub fn fs(&self) -> Arc<tarn_engine::posix::PosixFs> {
        self.fs.clone().expect("mounted")
    }

    /// Unmounts, exports the pool, imports it and mounts again.
    pub fn reopen(&mut self) {
        self.fs = None;
        self.pool.take().expect("pool").export().expect("export");
        let pool = open(&self.devs).expect("import");
        self.fs = Some(mount(&pool));
        self.pool = Some(pool);
    }

    /// Unmounts and returns the pool.
    pub fn unmount(mut self) -> Pool {
        self.fs = None;
        self.pool.take().expect("pool")
    }
}

/// A device under the name the pool knows it by.
pub fn named(name: &str, d: &Arc<FaultDevice>) -> (String, Arc<dyn BlockDevice>) {
    (name.to_string(), d.clone() as Arc<dyn BlockDevice>)
}

/// Imports the pool on these named devices, with the small tunables.
pub fn open_named(devs: Vec<(String, Arc<dyn BlockDevice>)>) -> Result<Pool> {
    Pool::open_on(devs, vec![], &OpenOptions { tunables: small_tunables(), ..Default::default() })
}

/// The pool's vdev tree as its paths, one row a vdev, indented two spaces
/// a level (`pool status`'s order).
pub fn vdev_paths(pool: &Pool) -> Vec<String> {
    fn walk(v: &tarn_engine::pool::VdevStatus, depth: usize, out: &mut Vec<String>) {
        out.push(format!("{}{}", "  ".repeat(depth), v.path));
        v.children.iter().for_each(|c| walk(c, depth + 1, out));
    }
    let mut out = Vec::new();
    pool.status().vdevs.iter().for_each(|v| walk(v, 0, &mut out));
    out
}
