//! Turning pool metrics snapshots into what people and programs read:
//! `pool iostat` (zpool iostat's columns and its -v -l -q -r -w views),
//! `arcstat` (arcstat's fields), `pool txgs`, `pool explain` and the
//! Prometheus text exposition format.
//!
//! Everything here is a pure function of one or two snapshots
//! ([`PoolMetrics`] per pool and one [`ArcMetrics`] for the process's ARC,
//! taken by the daemon): counters are totals since import (the ARC's since
//! the daemon started), so a report over an interval is the difference of
//! two snapshots divided by its length, and the first report of a series
//! covers everything since import, as zpool iostat's does.

use std::fmt::Write;

use tarn_engine::arc::HostMemory;
use tarn_engine::io::stats::{ClassIoSnapshot, HistSnapshot, BUCKETS};
use tarn_engine::pool::metrics::{ArcMetrics, PoolMetrics, VdevMetrics, ZilMetrics, CLASS_LOG};

use crate::fmt::{size, table};

/// Which views `pool iostat` adds to its default columns.
#[derive(Clone, Copy, Debug, Default)]
pub struct IostatViews {
    pub verbose: bool,
    pub latency: bool,
    pub queues: bool,
    pub request_sizes: bool,
    pub latency_hist: bool,
}

const READ_CLASSES: [&str; 3] = ["sync_read", "async_read", "scrub"];
const WRITE_CLASSES: [&str; 3] = ["sync_write", "async_write", "trim"];

fn class<'a>(v: &'a VdevMetrics, name: &str) -> Option<&'a ClassIoSnapshot> {
    v.classes.iter().find(|c| c.class == name)
}

/// `cur - prev` of one class's counters (prev absent: all of cur).
fn class_delta(cur: &VdevMetrics, prev: Option<&VdevMetrics>, name: &str) -> ClassIoSnapshot {
    let c = class(cur, name).cloned().unwrap_or_default();
    let Some(p) = prev.and_then(|p| class(p, name)) else { return c };
    ClassIoSnapshot {
        class: c.class.clone(),
        ops: c.ops.saturating_sub(p.ops),
        bytes: c.bytes.saturating_sub(p.bytes),
        disk_ns: c.disk_ns.since(&p.disk_ns),
        total_ns: c.total_ns.since(&p.total_ns),
        ind_size: c.ind_size.since(&p.ind_size),
        agg_size: c.agg_size.since(&p.agg_size),
    }
}

fn merge(hs: &[&HistSnapshot]) -> HistSnapshot {
    let mut out = HistSnapshot { buckets: vec![0; BUCKETS], sum: 0, count: 0 };
    for h in hs {
        for (i, b) in h.buckets.iter().enumerate() {
            out.buckets[i] += b;
        }
        out.sum += h.sum;
        out.count += h.count;
    }
    out
}

/// A latency in zpool iostat's style: "-" when nothing happened.
fn lat(ns: Option<f64>) -> String {
    match ns {
        None => "-".into(),
        Some(n) if n < 1e3 => format!("{:.0}ns", n),
        Some(n) if n < 1e6 => format!("{:.0}us", n / 1e3),
        Some(n) if n < 1e9 => format!("{:.0}ms", n / 1e6),
        Some(n) => format!("{:.1}s", n / 1e9),
    }
}

fn rate(v: u64, secs: f64) -> u64 {
    if secs > 0.0 {
        (v as f64 / secs).round() as u64
    } else {
        v
    }
}

struct Row {
    name: String,
    alloc: u64,
    free: u64,
    rops: u64,
    wops: u64,
    rbytes: u64,
    wbytes: u64,
    classes: Vec<ClassIoSnapshot>,
    queues: Vec<(String, usize, u32)>,
}

fn vdev_row(cur: &VdevMetrics, prev: Option<&VdevMetrics>, secs: f64) -> Row {
    let d = |a: u64, b: Option<u64>| rate(a.saturating_sub(b.unwrap_or(0)), secs);
    Row {
        name: cur.path.clone(),
        alloc: cur.allocated,
        free: cur.size.saturating_sub(cur.allocated),
        rops: d(cur.read_ops, prev.map(|p| p.read_ops)),
        wops: d(cur.write_ops, prev.map(|p| p.write_ops)),
        rbytes: d(cur.read_bytes, prev.map(|p| p.read_bytes)),
        wbytes: d(cur.write_bytes, prev.map(|p| p.write_bytes)),
        classes: cur.classes.iter().map(|c| class_delta(cur, prev, &c.class)).collect(),
        queues: cur.queues.iter().map(|q| (q.class.clone(), q.queued, q.active)).collect(),
    }
}

fn pool_row(cur: &PoolMetrics, rows: &[Row]) -> Row {
    let mut classes: Vec<ClassIoSnapshot> = Vec::new();
    for r in rows {
        for c in &r.classes {
            match classes.iter_mut().find(|x| x.class == c.class) {
                Some(x) => {
                    x.ops += c.ops;
                    x.bytes += c.bytes;
                    x.disk_ns = merge(&[&x.disk_ns, &c.disk_ns]);
                    x.total_ns = merge(&[&x.total_ns, &c.total_ns]);
                    x.ind_size = merge(&[&x.ind_size, &c.ind_size]);
                    x.agg_size = merge(&[&x.agg_size, &c.agg_size]);
                }
                None => classes.push(c.clone()),
            }
        }
    }
    let mut queues: Vec<(String, usize, u32)> = Vec::new();
    for r in rows {
        for (c, q, a) in &r.queues {
            match queues.iter_mut().find(|x| &x.0 == c) {
                Some(x) => {
                    x.1 += q;
                    x.2 += a;
                }
                None => queues.push((c.clone(), *q, *a)),
            }
        }
    }
    Row {
        name: cur.pool.clone(),
        alloc: cur.allocated,
        free: cur.free,
        rops: rows.iter().map(|r| r.rops).sum(),
        wops: rows.iter().map(|r| r.wops).sum(),
        rbytes: rows.iter().map(|r| r.rbytes).sum(),
        wbytes: rows.iter().map(|r| r.wbytes).sum(),
        classes,
        queues,
    }
}

fn hist_of<'a>(r: &'a Row, names: &[&str], pick: fn(&ClassIoSnapshot) -> &HistSnapshot) -> HistSnapshot {
    let hs: Vec<&HistSnapshot> = r.classes.iter().filter(|c| names.contains(&c.class.as_str())).map(pick).collect();
    merge(&hs)
}

/// Queue wait (total minus disk) of the given classes, mean ns.
fn queue_wait(r: &Row, names: &[&str]) -> Option<f64> {
    let t = hist_of(r, names, |c| &c.total_ns);
    let d = hist_of(r, names, |c| &c.disk_ns);
    let total = t.mean()?;
    Some((total - d.mean().unwrap_or(0.0)).max(0.0))
}

/// One `pool iostat` report: `prev` is the previous snapshot of the same
/// pool (None: since import) and `secs` the time between them.
///
/// With `-v`, as zpool iostat -v: the pool's row, its data devices under
/// it, then a `logs` heading and the log devices, then a `cache` heading
/// and the cache devices (headings carry no numbers). The pool's row sums
/// its data and log devices (zpool's root vdev is the parent of both),
/// not its cache devices; its alloc and free are the pool's, which leave
/// the log devices out.
pub fn iostat(cur: &PoolMetrics, prev: Option<&PoolMetrics>, secs: f64, v: IostatViews) -> String {
    let row = |vd: &VdevMetrics, before: &dyn Fn(&PoolMetrics) -> &[VdevMetrics]| vdev_row(vd, prev.and_then(|p| before(p).iter().find(|x| x.id == vd.id)), secs);
    let rows: Vec<Row> = cur.vdevs.iter().map(|vd| row(vd, &|p| &p.vdevs)).collect();
    let cache: Vec<Row> = cur.cache.iter().map(|vd| row(vd, &|p| &p.cache)).collect();
    let pool = pool_row(cur, &rows);
    let is_log = |i: &usize| cur.vdevs[*i].class == CLASS_LOG;
    let (logs, data): (Vec<usize>, Vec<usize>) = (0..rows.len()).partition(is_log);
    let mut shown: Vec<Shown> = vec![Shown::Row(&pool, 0)];
    if v.verbose {
        shown.extend(data.iter().map(|i| Shown::Row(&rows[*i], 2)));
        if !logs.is_empty() {
            shown.push(Shown::Heading("logs"));
            shown.extend(logs.iter().map(|i| Shown::Row(&rows[*i], 2)));
        }
        if !cache.is_empty() {
            shown.push(Shown::Heading("cache"));
            shown.extend(cache.iter().map(|r| Shown::Row(r, 2)));
        }
    }
    let mut out = String::new();
    if v.request_sizes || v.latency_hist {
        // Cache devices keep no per-class histograms.
        let with_classes = |s: &&Shown| matches!(s, Shown::Row(r, _) if !cache.iter().any(|c| std::ptr::eq(c, *r)));
        for r in shown.iter().filter(with_classes).filter_map(Shown::row) {
            let _ = writeln!(out, "{}", r.name);
            out.push_str(&if v.request_sizes { size_hist(r) } else { latency_hist(r) });
            out.push('\n');
        }
        return out;
    }
    let mut header = vec!["pool", "alloc", "free", "r-ops", "w-ops", "r-bw", "w-bw"];
    if v.latency {
        header.extend(["total_r", "total_w", "disk_r", "disk_w", "syncq_r", "syncq_w", "asyncq_r", "asyncq_w"]);
    }
    if v.queues {
        header.extend(["syncq_r_pend", "syncq_r_act", "syncq_w_pend", "syncq_w_act", "asyncq_r_pend", "asyncq_r_act", "asyncq_w_pend", "asyncq_w_act"]);
    }
    let body: Vec<Vec<String>> = shown
        .iter()
        .map(|s| {
            let (r, indent) = match s {
                Shown::Row(r, indent) => (*r, *indent),
                Shown::Heading(h) => {
                    let mut cells = vec![h.to_string()];
                    cells.resize(header.len(), "-".to_string());
                    return cells;
                }
            };
            let name = format!("{}{}", " ".repeat(indent), r.name);
            let mut cells = vec![name, size(r.alloc), size(r.free), r.rops.to_string(), r.wops.to_string(), size(r.rbytes), size(r.wbytes)];
            if v.latency {
                cells.push(lat(hist_of(r, &READ_CLASSES, |c| &c.total_ns).mean()));
                cells.push(lat(hist_of(r, &WRITE_CLASSES, |c| &c.total_ns).mean()));
                cells.push(lat(hist_of(r, &READ_CLASSES, |c| &c.disk_ns).mean()));
                cells.push(lat(hist_of(r, &WRITE_CLASSES, |c| &c.disk_ns).mean()));
                cells.push(lat(queue_wait(r, &["sync_read"])));
                cells.push(lat(queue_wait(r, &["sync_write"])));
                cells.push(lat(queue_wait(r, &["async_read"])));
                cells.push(lat(queue_wait(r, &["async_write"])));
            }
            if v.queues {
                for c in ["sync_read", "sync_write", "async_read", "async_write"] {
                    let (q, a) = r.queues.iter().find(|x| x.0 == c).map(|x| (x.1, x.2)).unwrap_or((0, 0));
                    cells.push(q.to_string());
                    cells.push(a.to_string());
                }
            }
            cells
        })
        .collect();
    out.push_str(&table(&header, &body, false));
    out
}

/// A line of `pool iostat -v`: a device (or the pool) with its indent, or
/// a section heading (`logs`, `cache`).
enum Shown<'a> {
    Row(&'a Row, usize),
    Heading(&'static str),
}

impl<'a> Shown<'a> {
    fn row(&self) -> Option<&'a Row> {
        match self {
            Shown::Row(r, _) => Some(r),
            Shown::Heading(_) => None,
        }
    }
}

/// `-r`: request sizes, individual (what callers asked) and aggregated
/// (device operations that carried several), per class.
fn size_hist(r: &Row) -> String {
    let names = ["sync_read", "sync_write", "async_read", "async_write", "scrub", "trim"];
    let mut header = vec!["req_size".to_string()];
    for n in names {
        header.push(format!("{}_ind", n));
        header.push(format!("{}_agg", n));
    }
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let mut rows = Vec::new();
    for b in 9..=24 {
        let mut cells = vec![size(1 << b)];
        let mut any = false;
        for n in names {
            let c = r.classes.iter().find(|c| c.class == n);
            for h in [c.map(|c| &c.ind_size), c.map(|c| &c.agg_size)] {
                let v = h.and_then(|h| h.buckets.get(b)).copied().unwrap_or(0);
                any |= v > 0;
                cells.push(v.to_string());
            }
        }
        if any || (12..=20).contains(&b) {
            rows.push(cells);
        }
    }
    table(&hdr, &rows, false)
}

/// A histogram column: its name, the I/O classes it sums, which histogram.
type HistColumn = (&'static str, &'static [&'static str], fn(&ClassIoSnapshot) -> &HistSnapshot);

/// `-w`: latency histograms, total (queue + device) and device alone, for
/// reads and writes.
fn latency_hist(r: &Row) -> String {
    let cols: [HistColumn; 4] = [
        ("total_r", &READ_CLASSES, |c| &c.total_ns),
        ("total_w", &WRITE_CLASSES, |c| &c.total_ns),
        ("disk_r", &READ_CLASSES, |c| &c.disk_ns),
        ("disk_w", &WRITE_CLASSES, |c| &c.disk_ns),
    ];
    let hs: Vec<HistSnapshot> = cols.iter().map(|(_, names, pick)| hist_of(r, names, *pick)).collect();
    let mut header = vec!["latency"];
    header.extend(cols.iter().map(|c| c.0));
    let mut rows = Vec::new();
    for b in 10..36 {
        let vals: Vec<u64> = hs.iter().map(|h| h.buckets.get(b).copied().unwrap_or(0)).collect();
        if vals.iter().any(|v| *v > 0) || (14..=30).contains(&b) {
            let mut cells = vec![lat(Some((1u64 << b) as f64))];
            cells.extend(vals.iter().map(|v| v.to_string()));
            rows.push(cells);
        }
    }
    table(&header, &rows, false)
}

/// arcstat's fields.
pub const ARCSTAT_FIELDS: &[(&str, &str)] = &[
    ("time", "time of the sample"),
    ("read", "demand and prefetch accesses per second"),
    ("hits", "hits per second"),
    ("miss", "misses per second"),
    ("hit%", "hit percentage"),
    ("miss%", "miss percentage"),
    ("dhit", "demand hits per second"),
    ("dmis", "demand misses per second"),
    ("dh%", "demand hit percentage"),
    ("dm%", "demand miss percentage"),
    ("phit", "prefetch hits per second"),
    ("pmis", "prefetch misses per second"),
    ("ph%", "prefetch hit percentage"),
    ("pm%", "prefetch miss percentage"),
    ("mhit", "metadata hits per second"),
    ("mmis", "metadata misses per second"),
    ("mh%", "metadata hit percentage"),
    ("mm%", "metadata miss percentage"),
    ("mfu", "MFU hits per second"),
    ("mru", "MRU hits per second"),
    ("mfug", "MFU ghost hits per second"),
    ("mrug", "MRU ghost hits per second"),
    ("size", "ARC size"),
    ("c", "ARC target size"),
    ("cmax", "zfs_arc_max"),
    ("data", "data size"),
    ("meta", "metadata size"),
    ("meta%", "metadata share of the target (adaptive)"),
    ("avail", "memory the host can still give"),
    ("csize", "bytes the ARC holds for its blocks, compressed where stored so (compressed_size)"),
    ("usize", "what those blocks take decompressed (uncompressed_size)"),
    ("ovhd", "decompressed copies of compressed metadata (overhead_size)"),
    ("l2hits", "L2ARC hits per second"),
    ("l2miss", "L2ARC misses per second"),
    ("l2read", "L2ARC accesses per second"),
    ("l2hit%", "L2ARC hit percentage"),
    ("l2miss%", "L2ARC miss percentage"),
    ("l2size", "what the blocks on cache devices take decompressed (l2_size)"),
    ("l2asize", "bytes they occupy on the cache devices (l2_asize)"),
    ("l2bytes", "bytes read from cache devices per second"),
    ("l2wbytes", "bytes written to cache devices per second"),
    ("l2feeds", "L2ARC feeds per second"),
    ("l2rebuilt", "blocks put back in the L2ARC index at import (total)"),
];

/// arcstat's default fields (OpenZFS 2.1's).
pub const ARCSTAT_DEFAULT: &str = "time,read,miss,miss%,dmis,dm%,pmis,pm%,mmis,mm%,size,c,avail";

/// The counters arcstat turns into rates: the ARC's (one for every pool of
/// the daemon, as OpenZFS has one per host) and the cache devices', summed
/// over the pools that own them.
#[derive(Clone, Copy, Default)]
struct ArcCounts {
    hits: u64,
    miss: u64,
    dhit: u64,
    dmis: u64,
    phit: u64,
    pmis: u64,
    mhit: u64,
    mmis: u64,
    mfu: u64,
    mru: u64,
    mfug: u64,
    mrug: u64,
    l2hit: u64,
    l2mis: u64,
    l2rbytes: u64,
    l2wbytes: u64,
    l2feeds: u64,
}

impl ArcCounts {
    fn of(a: &ArcMetrics, ms: &[PoolMetrics]) -> ArcCounts {
        let mut t = ArcCounts {
            hits: a.hits,
            miss: a.misses,
            dhit: a.demand_data_hits + a.demand_metadata_hits,
            dmis: a.demand_data_misses + a.demand_metadata_misses,
            phit: a.prefetch_data_hits + a.prefetch_metadata_hits,
            pmis: a.prefetch_data_misses + a.prefetch_metadata_misses,
            mhit: a.demand_metadata_hits + a.prefetch_metadata_hits,
            mmis: a.demand_metadata_misses + a.prefetch_metadata_misses,
            mfu: a.mfu_hits,
            mru: a.mru_hits,
            mfug: a.mfu_ghost_hits,
            mrug: a.mru_ghost_hits,
            ..Default::default()
        };
        for m in ms {
            t.l2hit += m.l2.l2_hits;
            t.l2mis += m.l2.l2_misses;
            t.l2rbytes += m.l2.l2_read_bytes;
            t.l2wbytes += m.l2.l2_write_bytes;
            t.l2feeds += m.l2.l2_feeds;
        }
        t
    }

    /// `self - prev`, counter by counter.
    fn since(self, p: ArcCounts) -> ArcCounts {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        ArcCounts {
            hits: d(self.hits, p.hits),
            miss: d(self.miss, p.miss),
            dhit: d(self.dhit, p.dhit),
            dmis: d(self.dmis, p.dmis),
            phit: d(self.phit, p.phit),
            pmis: d(self.pmis, p.pmis),
            mhit: d(self.mhit, p.mhit),
            mmis: d(self.mmis, p.mmis),
            mfu: d(self.mfu, p.mfu),
            mru: d(self.mru, p.mru),
            mfug: d(self.mfug, p.mfug),
            mrug: d(self.mrug, p.mrug),
            l2hit: d(self.l2hit, p.l2hit),
            l2mis: d(self.l2mis, p.l2mis),
            l2rbytes: d(self.l2rbytes, p.l2rbytes),
            l2wbytes: d(self.l2wbytes, p.l2wbytes),
            l2feeds: d(self.l2feeds, p.l2feeds),
        }
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.0}", part as f64 * 100.0 / whole as f64)
    }
}

/// Validates `-f` fields.
pub fn arcstat_fields(spec: &str) -> Result<Vec<String>, String> {
    let fields: Vec<String> = spec.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    for f in &fields {
        if !ARCSTAT_FIELDS.iter().any(|(n, _)| n == f) {
            return Err(format!("unknown arcstat field '{}' (fields: {})", f, ARCSTAT_FIELDS.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")));
        }
    }
    if fields.is_empty() {
        return Err("no arcstat fields given".into());
    }
    Ok(fields)
}

/// What arcstat reads: the ARC's snapshot and the pools' (for their cache
/// devices).
pub type ArcstatSample<'a> = (&'a ArcMetrics, &'a [PoolMetrics]);

/// One arcstat row (values per second over `secs`; `prev` None: since import).
pub fn arcstat_row(fields: &[String], cur: ArcstatSample, prev: Option<ArcstatSample>, secs: f64, host: &HostMemory, time: &str) -> Vec<String> {
    let d = ArcCounts::of(cur.0, cur.1).since(prev.map(|(a, ms)| ArcCounts::of(a, ms)).unwrap_or_default());
    let r = |v: u64| rate(v, secs).to_string();
    let rs = |v: u64| size(rate(v, secs));
    let z = &cur.0.sizes;
    let l2 = |f: fn(&PoolMetrics) -> u64| cur.1.iter().map(f).sum::<u64>();
    fields
        .iter()
        .map(|f| match f.as_str() {
            "time" => time.to_string(),
            "read" => r(d.hits + d.miss),
            "hits" => r(d.hits),
            "miss" => r(d.miss),
            "hit%" => pct(d.hits, d.hits + d.miss),
            "miss%" => pct(d.miss, d.hits + d.miss),
            "dhit" => r(d.dhit),
            "dmis" => r(d.dmis),
            "dh%" => pct(d.dhit, d.dhit + d.dmis),
            "dm%" => pct(d.dmis, d.dhit + d.dmis),
            "phit" => r(d.phit),
            "pmis" => r(d.pmis),
            "ph%" => pct(d.phit, d.phit + d.pmis),
            "pm%" => pct(d.pmis, d.phit + d.pmis),
            "mhit" => r(d.mhit),
            "mmis" => r(d.mmis),
            "mh%" => pct(d.mhit, d.mhit + d.mmis),
            "mm%" => pct(d.mmis, d.mhit + d.mmis),
            "mfu" => r(d.mfu),
            "mru" => r(d.mru),
            "mfug" => r(d.mfug),
            "mrug" => r(d.mrug),
            "size" => size(z.size),
            "c" => size(z.c),
            "cmax" => size(z.c_max),
            "data" => size(z.data_size),
            "meta" => size(z.metadata_size),
            "meta%" => format!("{:.0}", z.meta_pct),
            "avail" => size(host.available),
            "csize" => size(z.compressed_size),
            "usize" => size(z.uncompressed_size),
            "ovhd" => size(z.overhead_size),
            "l2hits" => r(d.l2hit),
            "l2miss" => r(d.l2mis),
            "l2read" => r(d.l2hit + d.l2mis),
            "l2hit%" => pct(d.l2hit, d.l2hit + d.l2mis),
            "l2miss%" => pct(d.l2mis, d.l2hit + d.l2mis),
            "l2size" => size(l2(|m| m.l2.l2_size)),
            "l2asize" => size(l2(|m| m.l2.l2_asize)),
            "l2bytes" => rs(d.l2rbytes),
            "l2wbytes" => rs(d.l2wbytes),
            "l2feeds" => r(d.l2feeds),
            "l2rebuilt" => l2(|m| m.l2.l2_rebuild_bufs).to_string(),
            _ => "?".into(),
        })
        .collect()
}

/// `pool txgs`: the recent txgs, oldest first.
pub fn txgs(m: &PoolMetrics) -> String {
    let header = ["txg", "dirty", "open", "quiesce", "issue", "write", "sync", "w-ops", "written", "delayed", "stalled"];
    let ms = |v: f64| format!("{:.0}ms", v);
    let rows: Vec<Vec<String>> = m
        .txgs
        .iter()
        .map(|r| {
            vec![
                r.txg.to_string(),
                size(r.dirty_bytes),
                ms(r.timing.open_ms),
                format!("{:.2}ms", r.timing.quiesce_ms),
                ms(r.issue_ms),
                ms(r.write_ms),
                ms(r.sync_ms),
                r.write_ops.to_string(),
                size(r.write_bytes),
                r.timing.delayed.to_string(),
                r.timing.stalled.to_string(),
            ]
        })
        .collect();
    table(&header, &rows, false)
}

/// `pool explain`: which mechanism limits the workload between two
/// snapshots `secs` apart, with the numbers behind the verdict. `arc` is
/// the ARC's snapshots at the same moments (current, previous): the ARC is
/// the process's, so its misses may be another pool's.
pub fn explain(cur: &PoolMetrics, prev: &PoolMetrics, arc: (&ArcMetrics, &ArcMetrics), secs: f64) -> String {
    let mut findings: Vec<(u32, String)> = Vec::new();
    let t = &cur.throttle;
    let dirty_pct = t.dirty_bytes as f64 * 100.0 / t.dirty_max.max(1) as f64;
    let delay_pct = t.delay_min_bytes as f64 * 100.0 / t.dirty_max.max(1) as f64;
    let delayed = t.delayed.saturating_sub(prev.throttle.delayed);
    let stalled = t.stalled_at_limit.saturating_sub(prev.throttle.stalled_at_limit);
    let slept_ms = t.delay_ns_total.saturating_sub(prev.throttle.delay_ns_total) as f64 / 1e6;
    if stalled > 0 {
        findings.push((100, format!(
            "the write throttle's hard limit: dirty data reached zfs_dirty_data_max ({}) and {} transactions waited for a txg to sync ({:.0}/s); \
             the delay curve is not slowing writers early enough — lower zfs_delay_scale's reach by raising it toward 1e9 / the pool's write IOPS",
            size(t.dirty_max), stalled, stalled as f64 / secs
        )));
    }
    if delayed > 0 {
        findings.push((90, format!(
            "the write throttle: dirty data is at {:.0}% of zfs_dirty_data_max ({} of {}; delays start at {:.0}%), {} transactions delayed ({:.0}/s, {:.1} ms each on average) — writers are faster than the devices can sync",
            dirty_pct, size(t.dirty_bytes), size(t.dirty_max), delay_pct, delayed, delayed as f64 / secs, slept_ms / delayed as f64
        )));
    }
    for v in &cur.vdevs {
        let pv = prev.vdevs.iter().find(|x| x.id == v.id);
        for q in &v.queues {
            if q.queued > 0 && q.active >= q.max_active {
                findings.push((80, format!(
                    "a saturated device queue: {} has {} {} I/Os waiting with {} of {} in flight (zfs_vdev_{}_max_active)",
                    v.path, q.queued, q.class, q.active, q.max_active, q.class
                )));
            }
        }
        let busy_ns: u64 = v.classes.iter().map(|c| {
            let p = pv.and_then(|p| p.classes.iter().find(|x| x.class == c.class));
            c.disk_ns.sum.saturating_sub(p.map(|p| p.disk_ns.sum).unwrap_or(0))
        }).sum();
        let util = busy_ns as f64 / (secs * 1e9);
        if util > 0.9 {
            findings.push((70, format!("a busy device: {} spent {:.1} device-seconds per second in I/O calls (several in flight)", v.path, util)));
        }
    }
    let (arc_cur, arc_prev) = arc;
    let mh = arc_cur.demand_metadata_hits.saturating_sub(arc_prev.demand_metadata_hits);
    let mm = arc_cur.demand_metadata_misses.saturating_sub(arc_prev.demand_metadata_misses);
    if mm > 0 && mm * 10 > mh + mm {
        findings.push((75, format!(
            "metadata cache misses: {} of {} metadata reads missed the ARC ({:.0}%, all pools); metadata is {} of a {} ARC — raise zfs_arc_max if the metadata of the working set exceeds it",
            mm, mh + mm, mm as f64 * 100.0 / (mh + mm) as f64, size(arc_cur.sizes.metadata_size), size(arc_cur.sizes.c)
        )));
    }
    explain_log(&mut findings, &cur.zil, &prev.zil, secs);
    let new_txgs: Vec<_> = cur.txgs.iter().filter(|r| r.txg > prev.txgs.last().map(|r| r.txg).unwrap_or(0)).collect();
    let small = new_txgs.iter().filter(|r| r.dirty_bytes < 1 << 20).count();
    if new_txgs.len() as f64 / secs > 2.0 && small * 2 > new_txgs.len() {
        findings.push((60, format!(
            "synchronous writes: {} txgs synced in {:.1} s, {} of them under 1 MiB — txgs forced by writers: commits that fell back to a txg sync (see `tarn zilstat` fb: a clone, too much data for the log, a failed log write), `syncfs`, or `pool sync`",
            new_txgs.len(), secs, small
        )));
    }
    let mut out = String::new();
    let _ = writeln!(out, "pool '{}' over {:.1} s:", cur.pool, secs);
    if findings.is_empty() {
        let _ = writeln!(out, "  nothing in the pool limits the workload: dirty data at {:.0}% (delays start at {:.0}%), no device queue full, metadata hit rate fine — look above the pool (the application, FUSE, CPU)", dirty_pct, delay_pct);
    } else {
        findings.sort_by_key(|f| std::cmp::Reverse(f.0));
        let _ = writeln!(out, "  limited by {}", findings[0].1);
        for f in &findings[1..] {
            let _ = writeln!(out, "  also: {}", f.1);
        }
    }
    out
}

/// Escapes a Prometheus label value.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A Prometheus family read off the metrics: name, help, the value.
type MetricColumn = (&'static str, &'static str, fn(&PoolMetrics) -> u64);
/// The same, read off the ARC's metrics.
type ArcColumn = (&'static str, &'static str, fn(&ArcMetrics) -> u64);

/// zilstat's fields (OpenZFS's zilstat names where it has them) and what
/// each counts; every one but `time` and `out` per second.
pub const ZILSTAT_FIELDS: [(&str, &str); 15] = [
    ("time", "clock"),
    ("cc", "commits (fsync, O_SYNC, sync=always)"),
    ("cwc", "rounds written (a round carries every commit that joined it)"),
    ("ic", "records logged"),
    ("icc", "write records copied into the log"),
    ("icb", "bytes of write data copied into the log"),
    ("iic", "write records logged by pointer (blocks written in place)"),
    ("iib", "bytes of write data written in place"),
    ("imnc", "log blocks written"),
    ("imnb", "log block bytes written (allocated)"),
    ("fb", "commits that synced the txg instead (tarn)"),
    ("fl", "device flushes of log blocks (tarn; one serves every round written before it)"),
    ("fius", "microseconds a round spent filling its records (tarn)"),
    ("wrus", "microseconds a round spent writing its blocks (tarn)"),
    ("flus", "microseconds a flush took (tarn)"),
];

/// `explain`'s verdict on the intent logs: callers that spend most of the
/// interval in fsync wait for the log's rounds (its device's write and
/// flush latency), or for txg syncs when commits fall back.
fn explain_log(findings: &mut Vec<(u32, String)>, cur: &ZilMetrics, prev: &ZilMetrics, secs: f64) {
    let commits = cur.commit_count.saturating_sub(prev.commit_count);
    let rounds = cur.commit_writer_count.saturating_sub(prev.commit_writer_count);
    let waited = cur.commit_ns.saturating_sub(prev.commit_ns) as f64 / 1e9;
    let fallbacks = cur.fallbacks.saturating_sub(prev.fallbacks);
    if commits == 0 || waited < 0.5 * secs {
        return;
    }
    if fallbacks * 2 > commits {
        findings.push((85, format!(
            "fsync waits for txg syncs: {} of {} commits synced the txg instead of writing the intent log (clones, more than tarn_zil_commit_max_bytes of data, no room, or failed log writes: `tarn zilstat` fb)",
            fallbacks, commits
        )));
        return;
    }
    let round_ms = cur.round_ns.saturating_sub(prev.round_ns) as f64 / 1e6 / rounds.max(1) as f64;
    findings.push((65, format!(
        "the intent log: {:.0} commits/s in {:.0} rounds/s ({:.1} commits a round), {:.2} ms a round (writing and flushing log blocks); callers spent {:.1} s per second in fsync — the log device's write and flush latency limits this workload (a faster log device, or sync=disabled where losing the last seconds is acceptable)",
        commits as f64 / secs, rounds as f64 / secs, commits as f64 / rounds.max(1) as f64, round_ms, waited / secs
    )));
}

/// The counters zilstat turns into rates, summed over `pools`.
fn zil_counters(pools: &[PoolMetrics]) -> [u64; 9] {
    let mut c = [0u64; 9];
    for m in pools {
        let z = &m.zil;
        for (x, v) in c.iter_mut().zip([z.commit_count, z.commit_writer_count, z.itx_count, z.itx_copied_count, z.itx_copied_bytes, z.itx_indirect_count, z.itx_indirect_bytes, z.blocks, z.block_bytes]) {
            *x += v;
        }
    }
    c
}

/// One zilstat row: counts since import when `prev` is None, else per
/// second over `secs`; `fb` always a count over the interval.
pub fn zilstat_row(cur: &[PoolMetrics], prev: Option<&[PoolMetrics]>, secs: f64, time: &str) -> Vec<String> {
    let now = zil_counters(cur);
    let before = prev.map(zil_counters).unwrap_or([0; 9]);
    let fb = |p: &[PoolMetrics]| p.iter().map(|m| m.zil.fallbacks).sum::<u64>();
    let mut row = vec![time.to_string()];
    for (n, b) in now.iter().zip(before) {
        let d = n.saturating_sub(b);
        row.push(if prev.is_some() && secs > 0.0 { format!("{}", (d as f64 / secs).round() as u64) } else { d.to_string() });
    }
    row.push(fb(cur).saturating_sub(prev.map(fb).unwrap_or(0)).to_string());
    // Flushes as the other counts; then time per round and per flush.
    let sum = |p: &[PoolMetrics], f: fn(&ZilMetrics) -> u64| p.iter().map(|m| f(&m.zil)).sum::<u64>();
    let delta = |f: fn(&ZilMetrics) -> u64| sum(cur, f).saturating_sub(prev.map_or(0, |p| sum(p, f)));
    let flushes = delta(|z| z.flushes);
    row.push(if prev.is_some() && secs > 0.0 { format!("{}", (flushes as f64 / secs).round() as u64) } else { flushes.to_string() });
    let rounds = delta(|z| z.commit_writer_count).max(1);
    row.push((delta(|z| z.fill_ns) / 1000 / rounds).to_string());
    row.push((delta(|z| z.write_ns) / 1000 / rounds).to_string());
    row.push((delta(|z| z.flush_ns) / 1000 / flushes.max(1)).to_string());
    row
}

/// Every device of a pool: its tree's leaves (data and log), then its
/// cache devices, as `pool iostat -v` lists them.
fn devices(m: &PoolMetrics) -> impl Iterator<Item = &VdevMetrics> {
    m.vdevs.iter().chain(m.cache.iter())
}

/// The Prometheus text exposition of every pool's metrics and the ARC's
/// (one ARC for all pools: its families carry no pool label).
pub fn prometheus(ms: &[PoolMetrics], arc: &ArcMetrics) -> String {
    let mut out = String::new();
    let family = |out: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {} {}", name, help);
        let _ = writeln!(out, "# TYPE {} {}", name, kind);
        for (labels, v) in samples {
            let _ = writeln!(out, "{}{} {}", name, labels, v);
        }
    };
    let pl = |m: &PoolMetrics| format!("{{pool=\"{}\"}}", esc(&m.pool));
    let each = |f: &dyn Fn(&PoolMetrics) -> f64| ms.iter().map(|m| (pl(m), f(m))).collect::<Vec<_>>();
    family(&mut out, "tarn_pool_size_bytes", "gauge", "Pool size.", each(&|m| m.size as f64));
    family(&mut out, "tarn_pool_allocated_bytes", "gauge", "Allocated bytes.", each(&|m| m.allocated as f64));
    family(&mut out, "tarn_pool_txg", "gauge", "Last synced txg.", each(&|m| m.txg as f64));
    family(&mut out, "tarn_dirty_bytes", "gauge", "Dirty data not yet synced.", each(&|m| m.throttle.dirty_bytes as f64));
    family(&mut out, "tarn_dirty_max_bytes", "gauge", "zfs_dirty_data_max.", each(&|m| m.throttle.dirty_max as f64));
    family(&mut out, "tarn_throttle_delayed_total", "counter", "Transactions delayed by the write throttle.", each(&|m| m.throttle.delayed as f64));
    family(&mut out, "tarn_throttle_stalled_total", "counter", "Transactions that waited at the dirty-data limit.", each(&|m| m.throttle.stalled_at_limit as f64));
    family(&mut out, "tarn_throttle_delay_seconds_total", "counter", "Time slept by delayed transactions.", each(&|m| m.throttle.delay_ns_total as f64 / 1e9));
    let zil_counters: [MetricColumn; 9] = [
        ("tarn_zil_commit_total", "Intent-log commits (zil_commit_count).", |m| m.zil.commit_count),
        ("tarn_zil_commit_writer_total", "Intent-log rounds written (zil_commit_writer_count).", |m| m.zil.commit_writer_count),
        ("tarn_zil_itx_total", "Intent-log records made (zil_itx_count).", |m| m.zil.itx_count),
        ("tarn_zil_itx_copied_bytes_total", "Write data copied into intent logs (zil_itx_copied_bytes).", |m| m.zil.itx_copied_bytes),
        ("tarn_zil_itx_indirect_bytes_total", "Write data written in place and logged by pointer (zil_itx_indirect_bytes).", |m| m.zil.itx_indirect_bytes),
        ("tarn_zil_blocks_total", "Intent-log blocks written.", |m| m.zil.blocks),
        ("tarn_zil_block_bytes_total", "Intent-log block bytes written, as allocated.", |m| m.zil.block_bytes),
        ("tarn_zil_fallbacks_total", "Commits that synced the txg instead of writing the log.", |m| m.zil.fallbacks),
        ("tarn_zil_flushes_total", "Device flushes of intent-log blocks (one serves every round written before it).", |m| m.zil.flushes),
    ];
    for (name, help, f) in zil_counters {
        family(&mut out, name, "counter", help, each(&|m| f(m) as f64));
    }
    family(&mut out, "tarn_prefetch_issued_total", "counter", "Blocks read ahead.", each(&|m| m.prefetch.issued as f64));
    family(&mut out, "tarn_prefetch_stream_hits_total", "counter", "Reads that continued a sequential stream.", each(&|m| m.prefetch.stream_hits as f64));
    family(&mut out, "tarn_prefetch_stream_misses_total", "counter", "Reads no stream expected.", each(&|m| m.prefetch.stream_misses as f64));
    let arc_counters: [ArcColumn; 9] = [
        ("tarn_arc_demand_data_hits_total", "ARC demand data hits.", |a| a.demand_data_hits),
        ("tarn_arc_demand_data_misses_total", "ARC demand data misses.", |a| a.demand_data_misses),
        ("tarn_arc_demand_metadata_hits_total", "ARC demand metadata hits.", |a| a.demand_metadata_hits),
        ("tarn_arc_demand_metadata_misses_total", "ARC demand metadata misses.", |a| a.demand_metadata_misses),
        ("tarn_arc_prefetch_hits_total", "ARC hits on prefetched blocks.", |a| a.prefetch_data_hits + a.prefetch_metadata_hits),
        ("tarn_arc_mru_ghost_hits_total", "ARC MRU ghost hits.", |a| a.mru_ghost_hits),
        ("tarn_arc_mfu_ghost_hits_total", "ARC MFU ghost hits.", |a| a.mfu_ghost_hits),
        ("tarn_arc_evicted_bytes_total", "Bytes evicted from the ARC.", |a| a.evicted_bytes),
        ("tarn_arc_memory_throttle_total", "Times the ARC's target was lowered for the host's memory (memory_throttle_count).", |a| a.memory_throttle_count),
    ];
    let whole = |v: u64| vec![(String::new(), v as f64)];
    for (name, help, f) in arc_counters {
        family(&mut out, name, "counter", help, whole(f(arc)));
    }
    let arc_gauges: [ArcColumn; 9] = [
        ("tarn_arc_size_bytes", "ARC size: blocks as held plus decompressed metadata copies.", |a| a.sizes.size),
        ("tarn_arc_target_bytes", "ARC target size (c).", |a| a.sizes.c),
        ("tarn_arc_min_bytes", "zfs_arc_min.", |a| a.sizes.c_min),
        ("tarn_arc_max_bytes", "zfs_arc_max.", |a| a.sizes.c_max),
        ("tarn_arc_data_bytes", "ARC data size, as held.", |a| a.sizes.data_size),
        ("tarn_arc_metadata_bytes", "ARC metadata size, as held.", |a| a.sizes.metadata_size),
        ("tarn_arc_compressed_bytes", "Bytes the ARC holds for its blocks, compressed where stored so (compressed_size).", |a| a.sizes.compressed_size),
        ("tarn_arc_uncompressed_bytes", "What the ARC's blocks take decompressed (uncompressed_size).", |a| a.sizes.uncompressed_size),
        ("tarn_arc_overhead_bytes", "Decompressed copies of compressed metadata (overhead_size).", |a| a.sizes.overhead_size),
    ];
    for (name, help, f) in arc_gauges {
        family(&mut out, name, "gauge", help, whole(f(arc)));
    }
    let l2_counters: [MetricColumn; 13] = [
        ("tarn_l2arc_hits_total", "Reads served from cache devices.", |m| m.l2.l2_hits),
        ("tarn_l2arc_misses_total", "Reads cache devices could not serve (while the pool has some).", |m| m.l2.l2_misses),
        ("tarn_l2arc_feeds_total", "L2ARC feeds that wrote blocks.", |m| m.l2.l2_feeds),
        ("tarn_l2arc_writes_total", "Writes to cache devices.", |m| m.l2.l2_writes),
        ("tarn_l2arc_write_bytes_total", "Bytes written to cache devices.", |m| m.l2.l2_write_bytes),
        ("tarn_l2arc_read_bytes_total", "Bytes read from cache devices.", |m| m.l2.l2_read_bytes),
        ("tarn_l2arc_write_skipped_total", "Blocks the feed skipped (not as their pointer says).", |m| m.l2.l2_write_skipped),
        ("tarn_l2arc_checksum_errors_total", "Cache device reads that failed their checksum.", |m| m.l2.l2_cksum_bad),
        ("tarn_l2arc_io_errors_total", "Cache device reads that failed.", |m| m.l2.l2_io_errors),
        ("tarn_l2arc_evicted_total", "Index entries dropped as the write hand came around.", |m| m.l2.l2_evicted),
        ("tarn_l2arc_rebuild_success_total", "Cache devices whose index was rebuilt at import.", |m| m.l2.l2_rebuild_success),
        ("tarn_l2arc_rebuild_log_blocks_total", "Log blocks read to rebuild the index at import.", |m| m.l2.l2_rebuild_log_blks),
        ("tarn_l2arc_rebuild_blocks_total", "Blocks put back in the index at import.", |m| m.l2.l2_rebuild_bufs),
    ];
    for (name, help, f) in l2_counters {
        family(&mut out, name, "counter", help, each(&|m| f(m) as f64));
    }
    family(&mut out, "tarn_l2arc_size_bytes", "gauge", "What the blocks on cache devices take decompressed (l2_size).", each(&|m| m.l2.l2_size as f64));
    family(&mut out, "tarn_l2arc_allocated_bytes", "gauge", "Bytes the blocks occupy on cache devices (l2_asize).", each(&|m| m.l2.l2_asize as f64));
    let vl = |m: &PoolMetrics, v: &VdevMetrics| format!("pool=\"{}\",vdev=\"{}\"", esc(&m.pool), esc(&v.path));
    let per_vdev = |f: &dyn Fn(&VdevMetrics) -> u64| {
        ms.iter().flat_map(|m| devices(m).map(move |v| (format!("{{{}}}", vl(m, v)), f(v) as f64))).collect::<Vec<_>>()
    };
    family(&mut out, "tarn_vdev_read_ops_total", "counter", "Device read operations.", per_vdev(&|v| v.read_ops));
    family(&mut out, "tarn_vdev_write_ops_total", "counter", "Device write operations.", per_vdev(&|v| v.write_ops));
    family(&mut out, "tarn_vdev_read_bytes_total", "counter", "Bytes read from the device.", per_vdev(&|v| v.read_bytes));
    family(&mut out, "tarn_vdev_write_bytes_total", "counter", "Bytes written to the device.", per_vdev(&|v| v.write_bytes));
    family(&mut out, "tarn_vdev_checksum_errors_total", "counter", "Blocks from the device that failed their checksum.", per_vdev(&|v| v.checksum_errors));
    family(&mut out, "tarn_vdev_read_errors_total", "counter", "Device reads that failed.", per_vdev(&|v| v.read_errors));
    family(&mut out, "tarn_vdev_write_errors_total", "counter", "Device writes and flushes that failed.", per_vdev(&|v| v.write_errors));
    // One sample per device and state, 1 for the state it is in, as
    // Prometheus exposes an enumeration.
    let states = ms
        .iter()
        .flat_map(|m| devices(m).flat_map(move |v| tarn_engine::vdev::State::ALL.iter().map(move |s| (format!("{{{},state=\"{}\"}}", vl(m, v), s.name()), f64::from(u8::from(v.state == s.name()))))))
        .collect::<Vec<_>>();
    family(&mut out, "tarn_vdev_state", "gauge", "The device's state (1 for the state it is in).", states);
    let events = ms
        .iter()
        .flat_map(|m| m.events.posted.iter().map(move |(c, n)| (format!("{{pool=\"{}\",class=\"{}\"}}", esc(&m.pool), esc(c)), *n as f64)))
        .collect::<Vec<_>>();
    family(&mut out, "tarn_events_total", "counter", "Events posted since the pool was imported, by class (pool events).", events);
    family(&mut out, "tarn_events_dropped_total", "counter", "Checksum and I/O error events held back by zfs_checksum_events_per_second.", each(&|m| m.events.dropped as f64));
    let per_class = |f: &dyn Fn(&ClassIoSnapshot) -> u64| {
        ms.iter()
            .flat_map(|m| devices(m).flat_map(move |v| v.classes.iter().map(move |c| (format!("{{{},class=\"{}\"}}", vl(m, v), c.class), f(c) as f64))))
            .collect::<Vec<_>>()
    };
    family(&mut out, "tarn_vdev_class_ops_total", "counter", "Device operations per I/O class.", per_class(&|c| c.ops));
    family(&mut out, "tarn_vdev_class_bytes_total", "counter", "Device bytes per I/O class.", per_class(&|c| c.bytes));
    let mut queued = Vec::new();
    let mut active = Vec::new();
    for m in ms {
        for v in devices(m) {
            for q in &v.queues {
                let l = format!("{{{},class=\"{}\"}}", vl(m, v), q.class);
                queued.push((l.clone(), q.queued as f64));
                active.push((l, q.active as f64));
            }
        }
    }
    family(&mut out, "tarn_vdev_queue_pending", "gauge", "I/Os waiting in the device queue.", queued);
    family(&mut out, "tarn_vdev_queue_active", "gauge", "I/Os in flight on the device.", active);
    // Latency histograms: cumulative power-of-two buckets in seconds.
    for (name, help, pick) in [
        ("tarn_vdev_disk_latency_seconds", "Device call latency per I/O class.", (|c: &ClassIoSnapshot| &c.disk_ns) as fn(&ClassIoSnapshot) -> &HistSnapshot),
        ("tarn_vdev_total_latency_seconds", "Queue plus device latency per request and I/O class.", |c: &ClassIoSnapshot| &c.total_ns),
    ] {
        let _ = writeln!(out, "# HELP {} {}", name, help);
        let _ = writeln!(out, "# TYPE {} histogram", name);
        for m in ms {
            for v in devices(m) {
                for c in &v.classes {
                    let h = pick(c);
                    let l = format!("{},class=\"{}\"", vl(m, v), c.class);
                    let mut cum = 0;
                    for (i, b) in h.buckets.iter().enumerate() {
                        cum += b;
                        let le = (1u64 << (i + 1)) as f64 / 1e9;
                        let _ = writeln!(out, "{}_bucket{{{},le=\"{}\"}} {}", name, l, le, cum);
                    }
                    let _ = writeln!(out, "{}_bucket{{{},le=\"+Inf\"}} {}", name, l, h.count);
                    let _ = writeln!(out, "{}_sum{{{}}} {}", name, l, h.sum as f64 / 1e9);
                    let _ = writeln!(out, "{}_count{{{}}} {}", name, l, h.count);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tarn_engine::pool::metrics::snapshot;
    use tarn_engine::sys::{BlockDevice, FaultDevice};
    use tarn_engine::{CreateOptions, Pool};
    use tarn_ondisk::ObjectType;

    fn pool_with_writes() -> (Pool, PoolMetrics, PoolMetrics) {
        let dev = Arc::new(FaultDevice::new(256 << 20, 1));
        let devs = vec![("mem0".to_string(), dev as Arc<dyn BlockDevice>)];
        let opts = CreateOptions { root_props: vec![("compression".into(), "off".into())], ..Default::default() };
        let pool = Pool::create_on("tank", devs, vec![], &opts).unwrap();
        let before = snapshot(&pool);
        let os = pool.root().clone();
        let tx = os.begin().unwrap();
        let o = os.create(&tx, ObjectType::PlainData).unwrap();
        os.write(&tx, o, 0, &vec![7u8; 4 << 20]).unwrap();
        drop(tx);
        pool.sync().unwrap();
        let after = snapshot(&pool);
        (pool, before, after)
    }

    /// A workload that does little but fsync: explain names the intent log
    /// (and says nothing of it for a workload without commits).
    #[test]
    fn explain_names_the_log_under_an_fsync_loop() {
        use tarn_engine::posix::{Caller, FileSystem, PosixFs, PosixOptions};
        let dev = Arc::new(FaultDevice::new(256 << 20, 2));
        let pool = Pool::create_on("tank", vec![("mem0".to_string(), dev as Arc<dyn BlockDevice>)], vec![], &CreateOptions::default()).unwrap();
        let quiet = snapshot(&pool);
        let zil = pool.datasets().zil("tank").unwrap();
        let fs = PosixFs::open(pool.root().clone(), PosixOptions { log: Some(zil), ..Default::default() }).unwrap();
        let root = Caller { uid: 0, gid: 0, pid: 1, umask: 0, fsetid: true };
        let f = fs.mknod(&root, fs.root(), b"f", libc::S_IFREG | 0o644, 0).unwrap().ino;
        fs.fsync(f, false).unwrap();
        let before = snapshot(&pool);
        let t0 = std::time::Instant::now();
        let mut i = 0u64;
        while t0.elapsed().as_secs_f64() < 1.0 {
            fs.write(&root, f, i * 4096, &[1u8; 4096]).unwrap();
            fs.fsync(f, false).unwrap();
            i += 1;
        }
        let secs = t0.elapsed().as_secs_f64();
        let after = snapshot(&pool);
        let arc = ArcMetrics::default();
        let text = explain(&after, &before, (&arc, &arc), secs);
        assert!(text.contains("the intent log:") && text.contains("commits/s"), "{i} fsyncs in {secs:.1} s: {text}");
        let idle = explain(&quiet, &quiet, (&arc, &arc), 1.0);
        assert!(!idle.contains("intent log"), "{idle}");
    }

    #[test]
    fn iostat_reports_the_device_counts() {
        let (_pool, before, after) = pool_with_writes();
        let wops = after.vdevs[0].write_ops - before.vdevs[0].write_ops;
        let text = iostat(&after, Some(&before), 1.0, IostatViews { verbose: true, latency: true, queues: true, ..Default::default() });
        let pool_line = text.lines().nth(1).unwrap();
        let cells: Vec<&str> = pool_line.split_whitespace().collect();
        assert_eq!(cells[0], "tank");
        assert_eq!(cells[4], wops.to_string(), "{}", text);
        assert!(text.contains("mem0"), "-v shows the vdev: {}", text);
        let r = iostat(&after, None, 0.0, IostatViews { request_sizes: true, ..Default::default() });
        assert!(r.contains("async_write_ind"), "{}", r);
        let w = iostat(&after, None, 0.0, IostatViews { latency_hist: true, ..Default::default() });
        assert!(w.contains("disk_w"), "{}", w);
    }

    #[test]
    fn txgs_and_arcstat_and_explain_render() {
        let (_pool, before, after) = pool_with_writes();
        let t = txgs(&after);
        let last = after.txgs.last().unwrap();
        assert!(t.lines().any(|l| l.starts_with(&last.txg.to_string())), "{}", t);
        let fields = arcstat_fields(ARCSTAT_DEFAULT).unwrap();
        let host = tarn_engine::arc::host_memory();
        let arc = tarn_engine::pool::metrics::arc_snapshot(&tarn_engine::arc::shared());
        let row = arcstat_row(&fields, (&arc, std::slice::from_ref(&after)), Some((&arc, std::slice::from_ref(&before))), 1.0, &host, "12:00:00");
        assert_eq!(row.len(), fields.len());
        assert_eq!(row[0], "12:00:00");
        assert!(arcstat_fields("read,bogus").is_err());
        let e = explain(&after, &before, (&arc, &arc), 1.0);
        assert!(e.starts_with("pool 'tank'"), "{}", e);
    }

    #[test]
    fn prometheus_text_is_well_formed() {
        let (_pool, _before, after) = pool_with_writes();
        let text = prometheus(std::slice::from_ref(&after), &tarn_engine::pool::metrics::arc_snapshot(&tarn_engine::arc::shared()));
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.insert(rest.split_whitespace().next().unwrap().to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (name_labels, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap_or_else(|_| panic!("bad value in {}", line));
            let name = name_labels.split('{').next().unwrap();
            let family = name.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count");
            assert!(typed.contains(name) || typed.contains(family), "{} has no TYPE line", name);
        }
        let w = after.vdevs[0].write_ops;
        assert!(text.contains(&format!("tarn_vdev_write_ops_total{{pool=\"tank\",vdev=\"mem0\"}} {}", w)), "{}", text);
        for want in [
            "tarn_vdev_state{pool=\"tank\",vdev=\"mem0\",state=\"ONLINE\"} 1\n",
            "tarn_vdev_state{pool=\"tank\",vdev=\"mem0\",state=\"FAULTED\"} 0\n",
            "tarn_vdev_read_errors_total{pool=\"tank\",vdev=\"mem0\"} 0\n",
            "tarn_events_total{pool=\"tank\",class=\"sysevent.fs.zfs.pool_create\"} 1\n",
            "tarn_events_dropped_total{pool=\"tank\"} 0\n",
        ] {
            assert!(text.contains(want), "{} missing:\n{}", want, text);
        }
    }
}

#[cfg(test)]
mod promtool {
    /// `promtool check metrics` (Debian's prometheus package) accepts the
    /// exposition; skipped with a note where promtool is not installed.
    #[test]
    fn promtool_accepts_the_exposition() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let dev = std::sync::Arc::new(tarn_engine::sys::FaultDevice::new(128 << 20, 2));
        let devs = vec![("mem0".to_string(), dev as std::sync::Arc<dyn tarn_engine::sys::BlockDevice>)];
        let pool = tarn_engine::Pool::create_on("tank", devs, vec![], &Default::default()).unwrap();
        // A cache device fed once, so the L2ARC families carry values.
        let cache = std::sync::Arc::new(tarn_engine::sys::FaultDevice::new(32 << 20, 3));
        pool.add_cache_on("cache0", cache).unwrap();
        let os = pool.root().clone();
        let tx = os.begin().unwrap();
        let o = os.create(&tx, tarn_ondisk::ObjectType::PlainData).unwrap();
        os.write(&tx, o, 0, &vec![9u8; 1 << 20]).unwrap();
        drop(tx);
        pool.sync().unwrap();
        os.read(o, 0, 1 << 20).unwrap();
        pool.core().l2.feed(&pool.core().cache);
        let m = tarn_engine::pool::metrics::snapshot(&pool);
        assert!(m.l2.l2_feeds >= 1 && m.l2.l2_asize > 0, "{:?}", m.l2);
        let arc = tarn_engine::pool::metrics::arc_snapshot(pool.core().cache.arc());
        let text = super::prometheus(std::slice::from_ref(&m), &arc);
        for (metric, want) in [("tarn_l2arc_feeds_total", m.l2.l2_feeds), ("tarn_l2arc_write_bytes_total", m.l2.l2_write_bytes), ("tarn_l2arc_allocated_bytes", m.l2.l2_asize)] {
            assert!(text.contains(&format!("{}{{pool=\"tank\"}} {}\n", metric, want)), "{} should be {}:\n{}", metric, want, text);
        }
        // The cache device has rows of its own, as in `pool iostat -v`.
        let c = &m.cache[0];
        assert!(c.write_bytes > 0, "{:?}", c);
        assert!(text.contains(&format!("tarn_vdev_write_bytes_total{{pool=\"tank\",vdev=\"cache0\"}} {}\n", c.write_bytes)), "{}", text);
        assert!(text.contains("tarn_vdev_state{pool=\"tank\",vdev=\"cache0\",state=\"ONLINE\"} 1\n"), "{}", text);
        // The ARC is the process's: its families have no pool label.
        let want = arc.sizes.uncompressed_size;
        assert!(text.contains(&format!("tarn_arc_uncompressed_bytes {}\n", want)), "tarn_arc_uncompressed_bytes should be {}:\n{}", want, text);
        let child = Command::new("promtool").args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        let Ok(mut child) = child else {
            eprintln!("promtool not installed: skipping (apt-get install prometheus)");
            return;
        };
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let msg = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool: {}", msg);
        assert!(msg.trim().is_empty(), "promtool found problems: {}", msg);
    }
}
