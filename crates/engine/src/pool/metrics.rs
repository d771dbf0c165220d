//! One snapshot of everything a pool counts, for `pool iostat`, `arcstat`,
//! `pool txgs`, `pool explain` and the Prometheus endpoint (device states
//! and error counts, events by class among them), and one of the
//! ARC (`arc_snapshot`: the process has one ARC for all its pools, so its
//! counters and sizes belong to no pool; a pool's cache devices are its
//! own, and their counters are in the pool's snapshot). Counters are totals
//! since the pool was imported (the ARC's: since the process started);
//! callers subtract two snapshots for rates. Taking a snapshot reads
//! atomics and takes each queue's lock once.

use std::sync::atomic::{AtomicU64, Ordering};

use super::events::EventStats;
use super::{Pool, TxgRecord};
use crate::arc::{ArcSizes, BlockCache};
use crate::io::queue::IoClass;
use crate::io::stats::{class_name, ClassIoSnapshot};

/// Queue depth of one class on one device at the moment of the snapshot.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct QueueDepth {
    pub class: String,
    pub queued: usize,
    pub active: u32,
    /// The class's current ceiling (async write's moves with dirty data).
    pub max_active: u32,
}

/// A device's counters: a leaf of the pool's tree (`PoolMetrics::vdevs`)
/// or a cache device (`PoolMetrics::cache`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct VdevMetrics {
    /// The leaf's position among all the pool's leaves (a cache device's
    /// among the cache devices).
    pub id: u32,
    /// Its top-level vdev (0 for a cache device).
    #[serde(default)]
    pub top: u32,
    /// Its allocation class, as zpool iostat's sections: "normal" (the
    /// pool's data vdevs), "log" (separate intent-log devices) or "cache"
    /// (L2ARC devices).
    #[serde(default = "normal_class")]
    pub class: String,
    pub path: String,
    /// The leaf's state as `status` shows it (`vdev::State`).
    #[serde(default)]
    pub state: String,
    pub size: u64,
    pub allocated: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub flushes: u64,
    pub classes: Vec<ClassIoSnapshot>,
    pub queues: Vec<QueueDepth>,
}

/// arcstats: the ARC's counters and sizes (every pool's).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ArcMetrics {
    pub hits: u64,
    pub misses: u64,
    pub demand_data_hits: u64,
    pub demand_data_misses: u64,
    pub demand_metadata_hits: u64,
    pub demand_metadata_misses: u64,
    pub prefetch_data_hits: u64,
    pub prefetch_data_misses: u64,
    pub prefetch_metadata_hits: u64,
    pub prefetch_metadata_misses: u64,
    pub mru_hits: u64,
    pub mfu_hits: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
    pub evicted_bytes: u64,
    pub memory_throttle_count: u64,
    #[serde(flatten)]
    pub sizes: ArcSizes,
}

/// The L2ARC's counters (arcstats' l2_* names).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct L2Metrics {
    /// Reads served from cache devices, and reads they missed (counted only
    /// while the pool has cache devices).
    pub l2_hits: u64,
    pub l2_misses: u64,
    /// The indexed blocks: decompressed size, and bytes they occupy on the
    /// cache devices (stored compressed, in whole 4 KiB units).
    pub l2_size: u64,
    pub l2_asize: u64,
    /// Feeds that wrote something, device writes (one per feed), bytes
    /// written (blocks and log blocks) and bytes read back on hits.
    pub l2_feeds: u64,
    pub l2_writes: u64,
    pub l2_write_bytes: u64,
    pub l2_read_bytes: u64,
    /// Blocks the feed skipped because they were not as their pointer says.
    pub l2_write_skipped: u64,
    /// Reads that failed their checksum or the device (a miss each).
    pub l2_cksum_bad: u64,
    pub l2_io_errors: u64,
    /// Entries dropped because the write hand came around to them.
    pub l2_evicted: u64,
    /// At import: devices whose index was rebuilt, log blocks read, and
    /// blocks put back in the index.
    pub l2_rebuild_success: u64,
    pub l2_rebuild_log_blks: u64,
    pub l2_rebuild_bufs: u64,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ThrottleMetrics {
    pub dirty_bytes: u64,
    pub dirty_max: u64,
    /// Where the delay curve starts, in bytes.
    pub delay_min_bytes: u64,
    pub delayed: u64,
    pub stalled_at_limit: u64,
    pub delay_ns_total: u64,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PrefetchMetrics {
    /// Blocks read ahead.
    pub issued: u64,
    /// Demand reads that waited for a read-ahead still in flight.
    pub inflight_hits: u64,
    /// Reads that continued a stream, and reads no stream expected.
    pub stream_hits: u64,
    pub stream_misses: u64,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PoolMetrics {
    pub pool: String,
    pub state: String,
    pub txg: u64,
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    /// The leaves of the pool's tree in tree order, each with its class
    /// (a log vdev's may come before a data vdev's: views group them).
    pub vdevs: Vec<VdevMetrics>,
    /// The cache devices, one entry each (class "cache"): their own
    /// operations (hits read, feeds and headers written); no queues, no
    /// error counts (a failed cache read is a miss, `l2`).
    #[serde(default)]
    pub cache: Vec<VdevMetrics>,
    /// The pool's cache devices (L2ARC), as arcstats names their counters.
    pub l2: L2Metrics,
    pub throttle: ThrottleMetrics,
    pub prefetch: PrefetchMetrics,
    /// The most recent synced txgs, oldest first.
    pub txgs: Vec<TxgRecord>,
    /// Events posted since import, by class, and those held back.
    #[serde(default)]
    pub events: EventStats,
    /// The intent logs of the pool's file systems, summed.
    #[serde(default)]
    pub zil: ZilMetrics,
}

/// The intent logs' counters (OpenZFS's zil kstats, summed over the
/// pool's file systems), since import.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ZilMetrics {
    /// `zil_commit_count`: commits (fsync, O_SYNC, sync=always).
    pub commit_count: u64,
    /// `zil_commit_writer_count`: rounds written (a round serves every
    /// commit that joined it).
    pub commit_writer_count: u64,
    /// Records logged (`zil_itx_count`), and by kind.
    pub itx_count: u64,
    pub records_by_kind: Vec<(String, u64)>,
    /// Write records whose data was copied into the log, and its bytes
    /// (`zil_itx_copied_count`, `zil_itx_copied_bytes`).
    pub itx_copied_count: u64,
    pub itx_copied_bytes: u64,
    /// Write records whose blocks were written in place and logged by
    /// pointer, and their bytes (`zil_itx_indirect_count`, `..._bytes`).
    #[serde(default)]
    pub itx_indirect_count: u64,
    #[serde(default)]
    pub itx_indirect_bytes: u64,
    /// Log blocks written and their allocated bytes
    /// (`zil_itx_metaslab_normal_count`, `..._bytes`).
    pub blocks: u64,
    pub block_bytes: u64,
    /// Commits that synced the txg instead of writing the log (a failed
    /// log write, no room, a clone, too much data).
    pub fallbacks: u64,
    /// Rounds that waited for the txg naming a new chain.
    pub chain_waits: u64,
    /// Records logged and not yet on disk.
    pub outstanding: u64,
    /// Time spent writing rounds, and time callers spent committing, ns.
    #[serde(default)]
    pub round_ns: u64,
    #[serde(default)]
    pub commit_ns: u64,
    /// Device flushes of log blocks (one serves every round written before
    /// it), and where rounds' time went: filling records, writing blocks,
    /// flushing, ns.
    #[serde(default)]
    pub flushes: u64,
    #[serde(default)]
    pub fill_ns: u64,
    #[serde(default)]
    pub write_ns: u64,
    #[serde(default)]
    pub flush_ns: u64,
}

fn normal_class() -> String {
    CLASS_NORMAL.to_string()
}

/// `VdevMetrics::class` values.
pub const CLASS_NORMAL: &str = "normal";
pub const CLASS_LOG: &str = "log";
pub const CLASS_CACHE: &str = "cache";

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn l2_metrics(l2: &crate::arc::L2Arc) -> L2Metrics {
    let s = &l2.stats;
    L2Metrics {
        l2_hits: load(&s.hits),
        l2_misses: load(&s.misses),
        l2_size: l2.logical_bytes(),
        l2_asize: l2.allocated_bytes(),
        l2_feeds: load(&s.feeds),
        l2_writes: load(&s.writes),
        l2_write_bytes: load(&s.write_bytes),
        l2_read_bytes: load(&s.read_bytes),
        l2_write_skipped: load(&s.write_skipped),
        l2_cksum_bad: load(&s.cksum_bad),
        l2_io_errors: load(&s.io_errors),
        l2_evicted: load(&s.evicted),
        l2_rebuild_success: load(&s.rebuild_success),
        l2_rebuild_log_blks: load(&s.log_blocks),
        l2_rebuild_bufs: load(&s.rebuilt),
    }
}

/// Takes a snapshot of `pool`'s counters.
pub fn snapshot(pool: &Pool) -> PoolMetrics {
    let core = pool.core();
    let status = pool.status();
    // One entry per leaf (for a pool of plain devices, per top-level
    // vdev, as before): a leaf's space is its top-level vdev's share.
    let mut vdevs = Vec::new();
    // Log vdevs are apart in the status (its `logs`): matched by id.
    let tops: Vec<&super::VdevStatus> = status.vdevs.iter().chain(&status.logs).collect();
    for v in core.vdevs.all().iter() {
        let Some(vs) = tops.iter().find(|t| t.id == v.id()) else { continue };
        let leaves = v.leaves();
        let share = match v.kind {
            crate::vdev::Kind::Raidz(_) => leaves.len() as u64,
            _ => 1,
        };
        for leaf in leaves {
            let Some(l) = leaf.leaf() else { continue };
            let s = l.stats();
            let q = l.queue_stats();
            let queues = IoClass::ALL
                .iter()
                .map(|&c| {
                    let cs = &q.classes[c.index()];
                    QueueDepth { class: class_name(c).to_string(), queued: cs.queued, active: cs.active, max_active: q.max_active[c.index()] }
                })
                .collect();
            vdevs.push(VdevMetrics {
                id: vdevs.len() as u32,
                top: v.id(),
                class: if core.logs.contains(v.id()) { CLASS_LOG } else { CLASS_NORMAL }.to_string(),
                path: leaf.path.clone(),
                state: leaf.state().name().to_string(),
                size: vs.size / share,
                allocated: vs.allocated / share,
                read_ops: load(&s.read_ops),
                write_ops: load(&s.write_ops),
                read_bytes: load(&s.read_bytes),
                write_bytes: load(&s.write_bytes),
                read_errors: load(&s.read_errors),
                write_errors: load(&s.write_errors),
                checksum_errors: load(&s.checksum_errors),
                flushes: load(&s.flushes),
                classes: l.io_stats().snapshot(),
                queues,
            });
        }
    }
    let p = core.txg.params();
    let t = &core.txg.stats;
    let throttle = ThrottleMetrics {
        dirty_bytes: core.txg.dirty_total(),
        dirty_max: p.dirty_max,
        delay_min_bytes: p.dirty_max / 100 * p.delay_min_percent as u64,
        delayed: load(&t.delayed),
        stalled_at_limit: load(&t.over_max),
        delay_ns_total: load(&t.delay_ns_total),
    };
    let ps = &core.prefetch_stats;
    let prefetch = PrefetchMetrics {
        issued: load(&ps.issued),
        inflight_hits: load(&ps.hits),
        stream_hits: load(&ps.stream_hits),
        stream_misses: load(&ps.stream_misses),
    };
    PoolMetrics {
        pool: status.name.clone(),
        state: status.state.clone(),
        txg: status.txg,
        size: status.size,
        allocated: status.allocated,
        free: status.free,
        vdevs,
        cache: cache_metrics(&core.l2),
        l2: l2_metrics(&core.l2),
        throttle,
        prefetch,
        txgs: pool.txg_history(),
        events: core.events.stats(),
        zil: zil_metrics(pool),
    }
}

/// One entry per cache device, in the order they were added.
fn cache_metrics(l2: &crate::arc::L2Arc) -> Vec<VdevMetrics> {
    l2.device_io()
        .into_iter()
        .enumerate()
        .map(|(i, d)| VdevMetrics {
            id: i as u32,
            top: 0,
            class: CLASS_CACHE.to_string(),
            path: d.path,
            state: if d.online { crate::vdev::State::Online } else { crate::vdev::State::Faulted }.name().to_string(),
            size: d.size,
            allocated: d.used,
            read_ops: d.read_ops,
            write_ops: d.write_ops,
            read_bytes: d.read_bytes,
            write_bytes: d.write_bytes,
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            flushes: 0,
            classes: Vec::new(),
            queues: Vec::new(),
        })
        .collect()
}

/// The pool's intent-log counters, summed over its file systems' logs.
fn zil_metrics(pool: &Pool) -> ZilMetrics {
    let mut z = ZilMetrics { records_by_kind: tarn_ondisk::zil::LogRecord::NAMES.iter().map(|n| (n.to_string(), 0)).collect(), ..Default::default() };
    let write = tarn_ondisk::zil::LogRecord::NAMES.iter().position(|n| *n == "write").expect("a write kind");
    let indirect = tarn_ondisk::zil::LogRecord::NAMES.iter().position(|n| *n == "indirect").expect("an indirect kind");
    for log in pool.datasets().logs() {
        let s = &log.stats;
        z.commit_count += load(&s.commits);
        z.commit_writer_count += load(&s.rounds);
        z.itx_count += load(&s.itxs);
        z.itx_copied_count += load(&s.records[write]);
        z.itx_copied_bytes += load(&s.write_bytes);
        z.itx_indirect_count += load(&s.records[indirect]);
        z.itx_indirect_bytes += load(&s.indirect_bytes);
        z.blocks += load(&s.blocks);
        z.block_bytes += load(&s.bytes_alloc);
        z.fallbacks += load(&s.fallbacks);
        z.chain_waits += load(&s.chain_waits);
        z.round_ns += load(&s.round_ns);
        z.commit_ns += load(&s.commit_ns);
        z.flushes += load(&s.flushes);
        z.fill_ns += load(&s.fill_ns);
        z.write_ns += load(&s.write_ns);
        z.flush_ns += load(&s.flush_ns);
        z.outstanding += log.outstanding() as u64;
        for (k, c) in z.records_by_kind.iter_mut().zip(&s.records) {
            k.1 += load(c);
        }
    }
    z
}

/// Takes a snapshot of the ARC's counters and sizes.
pub fn arc_snapshot(arc: &BlockCache) -> ArcMetrics {
    let a = &arc.stats;
    ArcMetrics {
        hits: load(&a.hits),
        misses: load(&a.misses),
        demand_data_hits: load(&a.demand_data_hits),
        demand_data_misses: load(&a.demand_data_misses),
        demand_metadata_hits: load(&a.demand_metadata_hits),
        demand_metadata_misses: load(&a.demand_metadata_misses),
        prefetch_data_hits: load(&a.prefetch_data_hits),
        prefetch_data_misses: load(&a.prefetch_data_misses),
        prefetch_metadata_hits: load(&a.prefetch_metadata_hits),
        prefetch_metadata_misses: load(&a.prefetch_metadata_misses),
        mru_hits: load(&a.mru_hits),
        mfu_hits: load(&a.mfu_hits),
        mru_ghost_hits: load(&a.mru_ghost_hits),
        mfu_ghost_hits: load(&a.mfu_ghost_hits),
        evicted_bytes: load(&a.evicted_bytes),
        memory_throttle_count: load(&a.memory_throttle_count),
        sizes: arc.sizes(),
    }
}
