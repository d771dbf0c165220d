//! The ARC and the host's memory: what the host looks like to the ARC
//! (`/proc/meminfo`, the memory cgroup the process runs in — v2, or v1's
//! memory controller — and pressure stall information), and how the ARC's
//! target `c` follows it (`BlockCache::adapt_to_host`, once a second from
//! the process ARC's one sampler thread).
//!
//! ## Available memory
//! On the host, MemAvailable: free memory plus what the kernel can reclaim.
//! Under a cgroup limit, the room left under it — and, as MemAvailable does,
//! page cache the kernel would reclaim before failing an allocation counts
//! as room: `limit − (usage − reclaimable)`, the reclaimable part being
//! memory.stat's `file` less `shmem`, dirty and writeback pages, plus
//! `slab_reclaimable` (v1: `total_cache` less the same; the usage summed
//! from memory.stat and memory.kmem.usage_in_bytes, as v1's
//! memory.usage_in_bytes is batched per CPU and lags). Counting the
//! cgroup's usage whole (page
//! cache included) made a cgroup that had read anything look full for
//! good: its page cache grows to the limit and stays, so the ARC shrank to
//! its floor and could never grow back. Every ancestor cgroup with a limit
//! is a bound too (v2: each level's memory.max; v1: the hierarchical limit).
//!
//! ## Following it
//! The ARC leaves the host a *reserve* (1/8 of its memory, at least
//! 256 MiB, at most half) and keeps a *band* above it (a quarter of the
//! reserve) where it neither shrinks nor grows, so the target settles
//! instead of oscillating:
//!
//! ```text
//!   available ▲
//!             │  grow: c += min(room above the band, zfs_arc_max / 32)
//!             │        per sample, while the ARC fills its target
//!   reserve   ┼ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─
//!   + band    │  hold: c stays (the ARC settles here)
//!   reserve   ┼ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─ ─
//!             │  shrink: c = size − shortfall, once (not below zfs_arc_min);
//!             │  also one zfs_arc_max / 32 step when PSI shows stalls
//!             ▼  while inside the band
//! ```
//!
//! A shrink first counts the free I/O buffers kept for reuse (`sys::buf`,
//! a cache too), then takes the rest of the shortfall from what the ARC
//! *holds* (lowering a target the ARC has not filled frees nothing), then
//! gives the memory back for real: the kept buffers, then the allocator's
//! free pages (`sys::memory`: mi_collect for the `tarn` binary's mimalloc,
//! malloc_trim under glibc). The evicted blocks' own pages are given back
//! as they are freed (`sys::buf::releasing`): an allocator returns only
//! pages with nothing left on them, and eviction leaves survivors on most. The host's figures lag that: until the
//! allocator has returned the pages and the kernel uncharged them, usage
//! does not drop. So the bytes a shrink freed count as available until the
//! samples show them come back, for at most `SETTLE_SAMPLES` samples;
//! otherwise each sample would see the same shortfall and shrink again —
//! the ARC fell 256M → 186M → 54M → 32M in a cgroup whose limit went from
//! 1G to 600M.
//!
//! Invariant: `zfs_arc_min ≤ c ≤ zfs_arc_max` after every sample (checked
//! with `assert!` at the end of `adapt_to_host`).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::BlockCache;

/// One sample of the host's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostMemory {
    /// Physical memory, or the cgroup's limit when that is smaller.
    pub total: u64,
    /// Memory the host can still give: MemAvailable, or the room left under
    /// the cgroup's limit (its clean page cache counted as room) when that
    /// is smaller.
    pub available: u64,
    /// PSI: % of the last 10 s some task waited for memory (0 if unknown).
    pub psi_some_avg10: f64,
}

impl HostMemory {
    /// Memory the ARC leaves to the host: 1/8 of it, at least 256 MiB.
    pub fn reserve(&self) -> u64 {
        (self.total / 8).max(256 << 20).min(self.total / 2)
    }

    /// Room above the reserve in which the ARC neither shrinks nor grows.
    pub fn band(&self) -> u64 {
        self.reserve() / 4
    }
}

/// Samples a shrink's freed bytes count as available while the host's
/// figures catch up with them.
pub const SETTLE_SAMPLES: u32 = 5;
/// PSI `some avg10` (percent) above which memory counts as stalled.
const PSI_STALL_PCT: f64 = 10.0;

/// What the sampler remembers between samples.
#[derive(Debug, Default)]
pub(super) struct Sizing {
    /// Bytes the last shrinks freed that the host has not shown back yet.
    pending_bytes: u64,
    /// Samples left to wait for them.
    pending_samples: u32,
    /// `available` at the previous sample.
    last_available: Option<u64>,
}

impl BlockCache {
    /// One sample of the host's memory: shrink to what it lacks, hold in
    /// the band, grow into room (see the module comment). Returns the new
    /// target.
    pub fn adapt_to_host(&self, host: &HostMemory) -> u64 {
        self.adapt_with(host, crate::sys::buf::recycled_bytes() as u64, release_memory)
    }

    /// `adapt_to_host`, where `kept` bytes of free buffers are kept for
    /// reuse and `release` gives them and the allocator's free memory back.
    fn adapt_with(&self, host: &HostMemory, kept: u64, release: impl FnOnce()) -> u64 {
        let mut st = self.sizing.lock();
        let (reserve, band) = (host.reserve(), host.band());
        // Relief since the last sample pays off what earlier shrinks freed.
        if let Some(last) = st.last_available {
            st.pending_bytes = st.pending_bytes.saturating_sub(host.available.saturating_sub(last));
        }
        st.last_available = Some(host.available);
        if st.pending_samples == 0 {
            st.pending_bytes = 0;
        } else {
            st.pending_samples -= 1;
        }
        let available = host.available.saturating_add(st.pending_bytes);
        let max = self.c_max.load(Ordering::Relaxed);
        let stalled = host.psi_some_avg10 > PSI_STALL_PCT && available < reserve + band;
        if available < reserve || stalled {
            // Free buffers kept for reuse are a cache too, and go first.
            let short = reserve.saturating_sub(available).saturating_sub(kept).max(if stalled { max / 32 } else { 0 });
            // The blocks evicted are the memory the host is short of: their
            // pages go back at once, not onto the free lists.
            let freed = if short > 0 { crate::sys::buf::releasing(|| self.shrink(short)) } else { 0 };
            release();
            st.pending_bytes = st.pending_bytes.saturating_add(freed + kept);
            st.pending_samples = SETTLE_SAMPLES;
        } else if available > reserve + band && self.fills_target() {
            self.grow((available - reserve - band).min(max / 32));
        }
        let c = self.c.load(Ordering::Relaxed);
        assert!(c <= max, "ARC target {} above zfs_arc_max {}", c, max);
        assert!(c >= self.c_min.load(Ordering::Relaxed).min(max), "ARC target {} below zfs_arc_min", c);
        c
    }

    /// Takes `bytes` from what the ARC holds (host memory pressure): the
    /// target becomes the size less `bytes`, never more than it was and
    /// never below the minimum; evicts to it. Returns the bytes freed.
    pub fn shrink(&self, bytes: u64) -> u64 {
        let min = self.c_min.load(Ordering::Relaxed);
        let c = self.c.load(Ordering::Relaxed);
        let before = self.size_bytes();
        let target = c.min(before).saturating_sub(bytes).max(min).min(c);
        self.c.store(target, Ordering::Relaxed);
        if target < c {
            self.stats.memory_throttle_count.fetch_add(1, Ordering::Relaxed);
        }
        self.evict_all_shards();
        before.saturating_sub(self.size_bytes())
    }

    /// Raises the target by up to `bytes`, not above the maximum.
    pub fn grow(&self, bytes: u64) {
        let max = self.c_max.load(Ordering::Relaxed);
        let c = self.c.load(Ordering::Relaxed);
        self.c.store(c.saturating_add(bytes).min(max), Ordering::Relaxed);
    }

    /// True when the ARC holds about its target: only then is a larger
    /// target any use (OpenZFS grows `c` only when the ARC is full).
    fn fills_target(&self) -> bool {
        let c = self.c.load(Ordering::Relaxed);
        self.size_bytes() >= c - c / 16
    }

    /// Starts a thread that samples the host every `period` and adapts the
    /// target; it ends when the cache is dropped.
    pub fn start_host_sampler(self: &Arc<Self>, period: std::time::Duration) {
        let weak = Arc::downgrade(self);
        let _ = std::thread::Builder::new().name("tarn-arc-host".into()).spawn(move || loop {
            std::thread::sleep(period);
            let Some(cache) = weak.upgrade() else { return };
            cache.adapt_to_host(&host_memory());
        });
    }
}

/// Gives freed memory back to the host: buffers kept for reuse (faulted in
/// again when I/O resumes), then the allocator's free pages.
fn release_memory() {
    crate::sys::buf::trim_recycled(0);
    crate::sys::memory::release_free_memory();
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A `name value` line of a cgroup's memory.stat.
fn stat_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// A number in a cgroup file ("max", v1's near-2^63 "unlimited" and
/// anything unreadable: None).
fn cgroup_number(path: &Path) -> Option<u64> {
    read(path)?.trim().parse::<u64>().ok().filter(|&v| v < 1 << 62)
}

/// One cgroup level with a memory limit: the limit and the room under it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bound {
    limit: u64,
    room: u64,
}

impl Bound {
    /// `usage` charged to the cgroup, of which `clean_cache` the kernel
    /// reclaims before failing an allocation.
    fn new(limit: u64, usage: u64, clean_cache: u64) -> Bound {
        Bound { limit, room: limit.saturating_sub(usage.saturating_sub(clean_cache)) }
    }
}

/// A v2 cgroup directory's bound, if it has a limit. Reclaimable: the
/// clean page cache and reclaimable slab (dentries, inodes).
fn bound_v2(dir: &Path) -> Option<Bound> {
    let limit = cgroup_number(&dir.join("memory.max"))?;
    let usage = cgroup_number(&dir.join("memory.current"))?;
    let stat = read(&dir.join("memory.stat")).unwrap_or_default();
    let f = |n: &str| stat_field(&stat, n).unwrap_or(0);
    let clean = f("file").saturating_sub(f("shmem") + f("file_dirty") + f("file_writeback"));
    Some(Bound::new(limit, usage, clean + f("slab_reclaimable")))
}

/// A v1 memory cgroup directory's bound (its hierarchical limit: the
/// tightest of it and its ancestors), if it has a limit. The usage is
/// memory.stat's anon and page cache plus the kernel memory charged:
/// memory.usage_in_bytes is batched per CPU (the kernel's documentation
/// says so), and lagged the ARC's eviction by ~90 MiB for seconds.
fn bound_v1(dir: &Path) -> Option<Bound> {
    let stat = read(&dir.join("memory.stat"))?;
    let limit = stat_field(&stat, "hierarchical_memory_limit").filter(|&v| v < 1 << 62).or_else(|| cgroup_number(&dir.join("memory.limit_in_bytes")))?;
    let f = |n: &str| stat_field(&stat, n).unwrap_or(0);
    let kernel = cgroup_number(&dir.join("memory.kmem.usage_in_bytes")).unwrap_or(0);
    let usage = f("total_rss") + f("total_cache") + kernel;
    let clean = f("total_cache").saturating_sub(f("total_shmem") + f("total_dirty") + f("total_writeback"));
    Some(Bound::new(limit, usage, clean))
}

/// The bounds on this process's memory: under cgroup v2, the cgroup and
/// each ancestor below the mount `root` that has a limit; under v1's memory
/// controller, the cgroup's hierarchical limit. With the pressure file of
/// v2's cgroup.
fn cgroup_bounds(proc_cgroup: &str, root: &Path) -> (Vec<Bound>, Option<PathBuf>) {
    if let Some(path) = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")) {
        let dir = root.join(path.trim_matches('/'));
        if dir.join("memory.max").exists() {
            let mut bounds = Vec::new();
            let mut d = dir.as_path();
            // Bounded by the path's depth: each step removes a component.
            while d.starts_with(root) && d != root {
                bounds.extend(bound_v2(d));
                d = match d.parent() {
                    Some(p) => p,
                    None => break,
                };
            }
            return (bounds, Some(dir.join("memory.pressure")));
        }
    }
    let v1 = proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',').any(|c| c == "memory").then(|| path.trim_matches('/').to_string())
    });
    match v1 {
        Some(path) => (bound_v1(&root.join("memory").join(path)).into_iter().collect(), None),
        None => (Vec::new(), None),
    }
}

/// Parses `some avg10=1.23 ...` from a PSI file.
pub fn parse_psi_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let field = line.split_whitespace().find_map(|f| f.strip_prefix("avg10="))?;
    field.parse().ok()
}

thread_local! {
    static SAMPLES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread sampled the host (each sample reads
/// /proc/meminfo, PSI and the cgroup's files): for tests that bound it.
pub fn host_samples() -> u64 {
    SAMPLES.with(|c| c.get())
}

/// Samples the host now.
pub fn host_memory() -> HostMemory {
    SAMPLES.with(|c| c.set(c.get() + 1));
    let info = read(Path::new("/proc/meminfo")).unwrap_or_default();
    let total = meminfo_field(&info, "MemTotal:").unwrap_or_else(crate::tunables::sysconf_memory_bytes);
    let available = meminfo_field(&info, "MemAvailable:").unwrap_or(total / 2);
    let psi = read(Path::new("/proc/pressure/memory")).and_then(|t| parse_psi_some_avg10(&t)).unwrap_or(0.0);
    let host = HostMemory { total, available, psi_some_avg10: psi };
    let (bounds, pressure) = cgroup_bounds(&read(Path::new("/proc/self/cgroup")).unwrap_or_default(), Path::new("/sys/fs/cgroup"));
    let cgroup_psi = pressure.and_then(|f| read(&f)).and_then(|t| parse_psi_some_avg10(&t));
    within(host, &bounds, cgroup_psi)
}

/// The host's sample within the cgroup's bounds: the smallest limit and the
/// least room, and the worse of the two PSI figures.
fn within(mut host: HostMemory, bounds: &[Bound], cgroup_psi: Option<f64>) -> HostMemory {
    for b in bounds {
        host.total = host.total.min(b.limit);
        host.available = host.available.min(b.room);
    }
    host.available = host.available.min(host.total);
    if let Some(p) = cgroup_psi {
        host.psi_some_avg10 = host.psi_some_avg10.max(p);
    }
    host
}

/// The default `zfs_arc_max` for `memory` bytes (the host's, or the
/// cgroup's limit): a quarter, so applications keep the rest. OpenZFS takes
/// 5/8 in the kernel, where it can be reclaimed directly; a daemon cannot.
pub fn default_arc_max(memory: u64) -> u64 {
    (memory / 4).max(64 << 20)
}

/// The default `zfs_arc_min`: 1/32 of memory, at least 32 MiB (OpenZFS's
/// rule), and at most half the maximum.
pub fn default_arc_min(memory: u64) -> u64 {
    (memory / 32).max(32 << 20).min(default_arc_max(memory) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::block::BlockData;

    const M: u64 = 1 << 20;

    #[test]
    fn psi_parses() {
        let t = "some avg10=12.50 avg60=3.00 avg300=0.10 total=123\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=5\n";
        assert_eq!(parse_psi_some_avg10(t), Some(12.5));
        assert_eq!(parse_psi_some_avg10("garbage"), None);
    }

    #[test]
    fn sample_is_plausible() {
        let h = host_memory();
        assert!(h.total > 0);
        assert!(h.available <= h.total);
        assert!(h.reserve() >= 256 << 20 || h.reserve() == h.total / 2);
        assert!(default_arc_min(h.total) <= default_arc_max(h.total));
    }

    fn write(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (f, text) in files {
            std::fs::write(dir.join(f), text).unwrap();
        }
    }

    /// Regression (issue 11): a cgroup's page cache counted as used, so a
    /// cgroup that had read its limit's worth of files looked full and the
    /// ARC shrank to its floor. Clean page cache is room; shmem, dirty and
    /// writeback pages are not; ancestors' limits bound too.
    #[test]
    fn cgroup_v2_room_counts_clean_page_cache() {
        let root = std::env::temp_dir().join(format!("tarn-cgv2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let parent = root.join("svc.slice");
        let own = parent.join("tarn.service");
        write(&root, &[("cgroup.controllers", "memory")]);
        write(&parent, &[("memory.max", "2147483648\n"), ("memory.current", "1000000000\n"), ("memory.stat", "anon 500000000\nfile 500000000\n")]);
        let stat = format!("anon {}\nfile {}\nshmem {}\nfile_dirty {}\nfile_writeback {}\nslab_reclaimable {}\n", 300 * M, 270 * M, 10 * M, 20 * M, 0, 10 * M);
        write(&own, &[("memory.max", &format!("{}\n", 600 * M)), ("memory.current", &format!("{}\n", 590 * M)), ("memory.stat", &stat), ("memory.pressure", "some avg10=3.50 avg60=0 avg300=0 total=1\n")]);
        let (bounds, pressure) = cgroup_bounds("0::/svc.slice/tarn.service\n", &root);
        // Own: 590M used, of which 270 − 10 − 20 = 240M clean page cache
        // and 10M reclaimable slab.
        assert_eq!(bounds[0], Bound { limit: 600 * M, room: 600 * M - (590 * M - 250 * M) });
        assert_eq!(bounds[1], Bound { limit: 2 << 30, room: (2 << 30) - (1_000_000_000 - 500_000_000) });
        assert_eq!(bounds.len(), 2, "the mount's root has no limit");
        let psi = pressure.and_then(|f| read(&f)).and_then(|t| parse_psi_some_avg10(&t));
        let host = HostMemory { total: 24 << 30, available: 20 << 30, psi_some_avg10: 1.0 };
        let h = within(host, &bounds, psi);
        assert_eq!((h.total, h.available, h.psi_some_avg10), (600 * M, 260 * M, 3.5));
        // Unlimited: "max" is no bound.
        write(&own, &[("memory.max", "max\n")]);
        let (bounds, _) = cgroup_bounds("0::/svc.slice/tarn.service\n", &root);
        assert_eq!(bounds.len(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn cgroup_v1_room_counts_clean_page_cache() {
        let root = std::env::temp_dir().join(format!("tarn-cgv1-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("memory/jobs/tarn");
        let stat = format!("cache 1\nrss 1\nhierarchical_memory_limit {}\ntotal_cache {}\ntotal_rss {}\ntotal_shmem 0\ntotal_dirty {}\ntotal_writeback 0\n", 600 * M, 300 * M, 270 * M, 4 * M);
        // usage_in_bytes lags (per-CPU batches): memory.stat and kmem count.
        write(&dir, &[("memory.limit_in_bytes", "9223372036854771712\n"), ("memory.usage_in_bytes", &format!("{}\n", 599 * M)), ("memory.kmem.usage_in_bytes", &format!("{}\n", 10 * M)), ("memory.stat", &stat)]);
        let (bounds, pressure) = cgroup_bounds("12:memory:/jobs/tarn\n0::/\n", &root);
        assert_eq!(bounds, vec![Bound { limit: 600 * M, room: 600 * M - (580 * M - 296 * M) }], "the hierarchical limit, clean cache as room");
        assert!(pressure.is_none());
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A cache of `max` bytes filled with 64 KiB blocks.
    fn full_cache(max: u64, min: u64) -> BlockCache {
        let c = BlockCache::new(max, min);
        fill(&c);
        c
    }

    /// Inserts new blocks until the cache holds its target (a workload
    /// reading new data all the time).
    fn fill(c: &BlockCache) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let target = c.sizes().c;
        let mut n = 0;
        while c.size_bytes() + (128 << 10) * super::super::SHARDS as u64 <= target && n < 100_000 {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            c.insert(super::super::BlockKey { pool: 1, vdev: 0, offset: i << 16, birth: 1 }, Arc::new(BlockData::zeroed(64 << 10)), false);
            n += 1;
        }
    }

    /// A cgroup of `limit` bytes holding the ARC's bytes as they were `lag`
    /// samples ago (resident memory follows eviction late) and `other`
    /// bytes of the process's other memory.
    struct Cgroup {
        limit: u64,
        other: u64,
        seen: std::collections::VecDeque<u64>,
    }

    impl Cgroup {
        fn new(limit: u64, other: u64, lag: usize, c: &BlockCache) -> Cgroup {
            Cgroup { limit, other, seen: std::iter::repeat_n(c.size_bytes(), lag).collect() }
        }
        /// One sample, then the ARC refilled to its new target.
        fn step(&mut self, c: &BlockCache) -> u64 {
            self.seen.push_back(c.size_bytes());
            let arc = self.seen.pop_front().expect("the sample just pushed");
            let host = HostMemory { total: self.limit, available: self.limit.saturating_sub(self.other + arc), psi_some_avg10: 0.0 };
            let target = c.adapt_with(&host, 0, || {});
            fill(c);
            target
        }
    }

    /// Regression (issue 11): the limit of the ARC's cgroup drops while
    /// resident memory lags eviction by two samples. The old sampler shrank
    /// by the same shortfall every second until the lag caught up, and
    /// overshot; now the target falls once to what the limit needs and
    /// settles there, and grows back when the limit is raised.
    #[test]
    fn a_lowered_limit_shrinks_once_settles_and_grows_back() {
        let c = full_cache(256 * M, 32 * M);
        // 1G, 300M besides the ARC: 1024 − 256 reserve − 300 = 468M of room,
        // more than zfs_arc_max.
        let mut cg = Cgroup::new(1024 * M, 300 * M, 2, &c);
        for _ in 0..5 {
            assert_eq!(cg.step(&c), 256 * M);
        }
        // 600M: the ARC may hold 600 − 256 − 300 = 44M.
        cg.limit = 600 * M;
        let want = 44 * M;
        let targets: Vec<u64> = (0..20).map(|_| cg.step(&c)).collect();
        let low = *targets.iter().min().unwrap();
        assert!(low + 4 * M >= want, "the target overshot to {} MiB (needs {} MiB): {:?}", low / M, want / M, targets.iter().map(|t| t / M).collect::<Vec<_>>());
        assert!(targets[0] <= want + 2 * M, "the first sample shrinks to what the limit needs: {} MiB", targets[0] / M);
        assert!(targets[10..].iter().all(|&t| t == targets[19]), "settled: {:?}", targets.iter().map(|t| t / M).collect::<Vec<_>>());
        assert_eq!(c.stats.memory_throttle_count.load(Ordering::Relaxed), 1, "one shrink");
        // Back to 1G: grows back, by at most zfs_arc_max/32 a sample, to the
        // maximum (468M of room).
        cg.limit = 1024 * M;
        let mut last = targets[19];
        for _ in 0..40 {
            let t = cg.step(&c);
            assert!(t >= last && t <= last + 8 * M, "{} → {}", last / M, t / M);
            last = t;
        }
        assert_eq!(last, 256 * M);
        c.check_invariants().unwrap();
    }

    /// In the band above the reserve nothing moves; room grows the target
    /// by no more than the room, so the grown ARC does not fall back below
    /// the reserve (no oscillation).
    #[test]
    fn the_target_settles_between_reserve_and_band() {
        let c = full_cache(256 * M, 32 * M);
        // 700M, 250M besides: the ARC may hold 700 − 256 − 250 = 194M
        // before it must shrink, and grows only below 194 − 64 = 130M.
        let mut cg = Cgroup::new(700 * M, 250 * M, 0, &c);
        let targets: Vec<u64> = (0..30).map(|_| cg.step(&c)).collect();
        let t = targets[29];
        assert!(t <= 194 * M && t + 10 * M >= 130 * M, "settled at {} MiB: {:?}", t / M, targets.iter().map(|t| t / M).collect::<Vec<_>>());
        assert!(targets[5..].iter().all(|&x| x == t), "{:?}", targets.iter().map(|t| t / M).collect::<Vec<_>>());
        // The other memory shrinks by 100M: the ARC grows into it, and
        // stays out of the shrink zone.
        cg.other = 150 * M;
        let grown: Vec<u64> = (0..30).map(|_| cg.step(&c)).collect();
        assert!(grown[29] > t && grown[29] <= 294 * M, "{:?}", grown.iter().map(|t| t / M).collect::<Vec<_>>());
        assert!(grown[20..].iter().all(|&x| x == grown[29]), "{:?}", grown.iter().map(|t| t / M).collect::<Vec<_>>());
        assert_eq!(c.stats.memory_throttle_count.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn stalls_near_the_limit_shrink_a_step_and_an_unfilled_target_does_not_grow() {
        let c = full_cache(64 * M, 4 * M);
        // Within the band and stalling: one step of zfs_arc_max/32, taken
        // from what the ARC holds.
        let host = HostMemory { total: 2 << 30, available: 300 * M, psi_some_avg10: 40.0 };
        let held = c.size_bytes();
        assert_eq!(c.adapt_with(&host, 0, || {}), held - 2 * M);
        // Stalls far from the limit are another cgroup's; the ARC is full,
        // so room grows it.
        let roomy = HostMemory { total: 8 << 30, available: 6 << 30, psi_some_avg10: 40.0 };
        let before = c.sizes().c;
        assert_eq!(c.adapt_with(&roomy, 0, || {}), before + 2 * M);
        // Emptied, the target stays where it is.
        c.drop_pool(1);
        let t = c.sizes().c;
        assert_eq!(c.adapt_with(&roomy, 0, || {}), t, "a target the ARC does not fill does not grow");
        c.check_invariants().unwrap();
    }

    #[test]
    fn kept_buffers_go_before_the_arc_shrinks() {
        let c = full_cache(256 * M, 32 * M);
        let held = c.size_bytes();
        // 60M short of the 256M reserve, 50M of free buffers kept for
        // reuse: they go, and the ARC gives the other 10M.
        let host = HostMemory { total: 1024 * M, available: 196 * M, psi_some_avg10: 0.0 };
        let mut released = false;
        assert_eq!(c.adapt_with(&host, 50 * M, || released = true), held - 10 * M);
        assert!(released);
        // Enough kept: the ARC keeps its target, and no throttle is counted.
        let c = full_cache(256 * M, 32 * M);
        assert_eq!(c.adapt_with(&host, 80 * M, || {}), 256 * M);
        assert_eq!(c.stats.memory_throttle_count.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn shrink_and_limits() {
        let c = BlockCache::new(1 << 30, 1 << 20);
        for i in 0..2000u64 {
            c.insert(super::super::BlockKey { pool: 1, vdev: 0, offset: i << 12, birth: 1 }, Arc::new(BlockData::zeroed(4096)), false);
        }
        assert_eq!(c.size_bytes(), 2000 * 4096);
        c.set_limits(4 << 20, 1 << 20);
        assert!(c.size_bytes() <= 4 << 20);
        let held = c.size_bytes();
        assert_eq!(c.shrink(held / 2), held - c.size_bytes(), "returns what it freed");
        assert!(c.sizes().c <= held - held / 2, "shrinks from what it holds");
        c.shrink(1 << 30);
        assert_eq!(c.sizes().c, 1 << 20, "never below the minimum");
        assert!(c.size_bytes() <= 1 << 20);
        c.grow(1 << 30);
        assert_eq!(c.sizes().c, 4 << 20, "never above the maximum");
        c.check_invariants().unwrap();
    }
}
