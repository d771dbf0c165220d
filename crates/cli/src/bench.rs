//! `tarn bench`: drive a pool through the object layer — the path the file
//! system uses — and report throughput, latency percentiles and what the
//! engine did underneath (physical I/Os, aggregation, throttle delays).
//!
//! Workloads:
//! - seqwrite: each thread writes its own object sequentially; timed until the
//!   data is durable (a txg sync after the last write).
//! - seqread: lays the objects down first (untimed), reopens the pool so
//!   every cache is cold, then reads them sequentially.
//! - randwrite / randread: random block-aligned I/O of --bs over the objects.
//! - smallobj: creates --objects objects of --object-size bytes each, one
//!   transaction per object; reports objects/s, objects per physical write,
//!   and space used per object.
//!
//! Data is incompressible (random) unless --compressible (then lz4 keeps
//! about 45 % of it, see `Gen`). Objects are freed at
//! the end unless --keep.
//!
//! With --simulate LAYOUT instead of a pool, the workload runs on a
//! throwaway pool of in-memory devices shaped like disks (`simulate`), and
//! the report sets the result against the bandwidth and IOPS of the
//! layout's data devices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;
use tarn_engine::io::{CompressSetting, RedundantMetadata};
use tarn_engine::object::CachePolicy;
use tarn_engine::pool::parse_recordsize;
use tarn_engine::sys::{BlockDevice, ThrottledDevice};
use tarn_engine::tunables::parse_size;
use tarn_engine::{Error, Objset, Pool, Result, Tunables};
use tarn_ondisk::{ChecksumType, ObjectType};

use crate::pool_cmd;
use crate::simulate::{self, Sim};

#[derive(Args, Clone)]
pub struct BenchArgs {
    /// The pool to measure (not with --simulate)
    #[arg(required_unless_present = "simulate", conflicts_with = "simulate")]
    pub pool: Option<String>,
    /// Measure a throwaway pool of in-memory devices of this layout instead, e.g.
    /// '2x raidz2 12', '12x mirror 2', 'raidz2 6 raidz2 6', '6x disk' (zpool's vdev types
    /// with a device count). Each device has --device-bandwidth (default 13M),
    /// --device-iops (2000) and --device-latency (80us): an NVMe drive scaled down 512×
    #[arg(long, value_name = "LAYOUT")]
    pub simulate: Option<String>,
    /// seqwrite, seqread, randwrite, randread or smallobj
    #[arg(long, default_value = "seqwrite")]
    pub workload: String,
    /// Total bytes (seq*/rand*), e.g. 4G [default: 1G, 512M with --simulate]
    #[arg(long)]
    pub size: Option<String>,
    /// Record size of the objects (default: the dataset's)
    #[arg(long)]
    pub recordsize: Option<String>,
    /// Bytes per operation (default: 1M for seq*, 4K for rand*)
    #[arg(long)]
    pub bs: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Operations for rand* workloads (default: size / bs)
    #[arg(long)]
    pub ops: Option<u64>,
    /// smallobj: number of objects
    #[arg(long, default_value_t = 100_000)]
    pub objects: u64,
    /// smallobj: bytes per object
    #[arg(long, default_value = "1K")]
    pub object_size: String,
    /// Override the compression property for the run (off, lz4, zstd, zstd-N)
    #[arg(long)]
    pub compression: Option<String>,
    /// Override the checksum property for the run (fletcher4, blake3)
    #[arg(long)]
    pub checksum: Option<String>,
    /// Override the redundant_metadata property for the run (all, most, some, none)
    #[arg(long)]
    pub redundant_metadata: Option<String>,
    /// Write compressible data instead of random bytes
    #[arg(long)]
    pub compressible: bool,
    /// Slow every device to this bandwidth (bytes/s, e.g. 100M) to overdrive it
    #[arg(long)]
    pub device_bandwidth: Option<String>,
    /// Add this latency to every device operation (e.g. 2ms, 500us): a slow disk
    #[arg(long)]
    pub device_latency: Option<String>,
    /// Each device operation also occupies the device for 1/N s: a device of N IOPS
    #[arg(long, value_name = "N")]
    pub device_iops: Option<u64>,
    /// Override the primarycache property for the run (all, metadata, none):
    /// metadata makes every data read reach the devices
    #[arg(long)]
    pub primarycache: Option<String>,
    /// Use this file or device as an L2ARC cache device (added to the pool if it is not one yet)
    #[arg(long)]
    pub cache_device: Option<std::path::PathBuf>,
    /// --cache-device: use a device that holds a file system, swap, a partition table or
    /// an exported pool, as `pool add -f` (never a mounted or busy one, or an imported pool's);
    /// --simulate: allow groups of different redundancy, as `pool create -f`
    #[arg(short, long)]
    pub force: bool,
    /// rand*/seqread: untimed operations first, to warm the caches
    #[arg(long, default_value_t = 0)]
    pub warmup_ops: u64,
    /// After the warm-up, export and import the pool (cold ARC; the L2ARC index is rebuilt from its device)
    #[arg(long)]
    pub reimport_after_warmup: bool,
    /// Sample the dirty-data level every N ms and report the series
    #[arg(long)]
    pub sample_ms: Option<u64>,
    /// Offer at most this many bytes/s in total (writes), e.g. 50M
    #[arg(long)]
    pub rate: Option<String>,
    /// Keep the bench objects instead of freeing them
    #[arg(long)]
    pub keep: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Default, Clone)]
pub struct Report {
    pub workload: String,
    pub threads: usize,
    pub bytes: u64,
    pub ops: u64,
    pub seconds: f64,
    pub mib_per_s: f64,
    pub ops_per_s: f64,
    pub lat_us_p50: u64,
    pub lat_us_p99: u64,
    pub lat_us_p999: u64,
    pub lat_us_max: u64,
    pub device_write_ops: u64,
    pub device_write_bytes: u64,
    pub device_read_ops: u64,
    pub device_read_bytes: u64,
    /// Logical operations carried per physical write (aggregation at work).
    pub ops_per_device_write: f64,
    pub bytes_allocated: i64,
    pub bytes_allocated_per_object: f64,
    pub throttle_delayed: u64,
    pub throttle_over_max: u64,
    pub dirty_max: u64,
    /// (ms since start, dirty bytes) samples when --sample-ms is given.
    pub dirty_samples: Vec<(u64, u64)>,
    /// The txgs synced during the run.
    pub txgs: Vec<tarn_engine::pool::TxgRecord>,
    /// ARC during the timed phase: demand data and metadata miss %, size.
    pub arc_data_miss_pct: f64,
    pub arc_metadata_miss_pct: f64,
    pub arc_size: u64,
    pub arc_metadata_size: u64,
    /// The ARC's blocks as held (compressed where stored so), what they are
    /// decompressed, and the decompressed metadata copies (arcstats'
    /// compressed_size, uncompressed_size, overhead_size).
    pub arc_compressed_size: u64,
    pub arc_uncompressed_size: u64,
    pub arc_overhead_size: u64,
    /// Indirect blocks of the bench objects: as the ARC holds them (as on
    /// disk, compressed), and decompressed.
    pub objects_metadata_bytes: u64,
    pub objects_metadata_logical_bytes: u64,
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub l2_size: u64,
    /// L2ARC feeds and bytes written to cache devices since the pool opened.
    pub l2_feeds: u64,
    pub l2_write_bytes: u64,
    /// With --simulate: the layout, its devices and the ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated: Option<SimReport>,
}

/// A simulated run set against what its data devices can do (`simulate`).
#[derive(Serialize, Clone)]
pub struct SimReport {
    pub layout: String,
    pub devices: usize,
    pub device_bandwidth: u64,
    pub device_iops: u64,
    pub device_latency_us: u64,
    /// Devices carrying distinct data in this workload's direction: a
    /// RAID-Z group's width less parity; a mirror's children for reads,
    /// one for writes; a plain device.
    pub data_devices: usize,
    /// data_devices × device_bandwidth, and the run's throughput as % of it.
    pub data_mib_per_s: f64,
    pub pct_of_data_bandwidth: f64,
    /// data_devices × device_iops, and the run's operations/s as % of it.
    pub data_iops: f64,
    pub pct_of_data_iops: f64,
    /// The bytes the devices moved (data, parity, copies, metadata) per
    /// second as % of all devices' bandwidth: how busy they were. A RAID-Z
    /// read can pass 100 % of its data devices (its data columns rotate
    /// over all children) but never this.
    pub pct_of_device_bandwidth: f64,
    /// Memory the simulated devices held at the end.
    pub memory_bytes: u64,
}

fn sim_report(sim: &Sim, r: &Report) -> SimReport {
    let writing = r.workload.ends_with("write") || r.workload == "smallobj";
    let data_devices = simulate::data_devices(&sim.groups, writing);
    let data_mib_per_s = (data_devices as u64 * sim.shape.bandwidth) as f64 / (1 << 20) as f64;
    let data_iops = (data_devices as u64 * sim.shape.iops) as f64;
    SimReport {
        layout: sim.spec.clone(),
        devices: sim.devices(),
        device_bandwidth: sim.shape.bandwidth,
        device_iops: sim.shape.iops,
        device_latency_us: sim.shape.latency.as_micros() as u64,
        data_devices,
        data_mib_per_s,
        pct_of_data_bandwidth: r.mib_per_s * 100.0 / data_mib_per_s,
        data_iops,
        pct_of_data_iops: r.ops_per_s * 100.0 / data_iops,
        pct_of_device_bandwidth: (r.device_read_bytes + r.device_write_bytes) as f64 / r.seconds * 100.0 / (sim.devices() as u64 * sim.shape.bandwidth) as f64,
        memory_bytes: sim.memory_bytes(),
    }
}

struct Gen {
    data: Vec<u8>,
}

impl Gen {
    fn new(compressible: bool) -> Self {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut data = vec![0u8; 32 << 20];
        if !compressible {
            data.iter_mut().for_each(|b| *b = next() as u8);
            return Gen { data };
        }
        // Compressible like text or logs, not like zeros: 64-byte runs,
        // two thirds of them copies of one of 16 "words" (lz4 finds them as
        // matches), one third random. lz4 keeps about 45 % of it.
        let words: Vec<[u8; 64]> = (0..16).map(|_| std::array::from_fn(|_| next() as u8)).collect();
        for run in data.chunks_mut(64) {
            let r = next();
            if r % 3 == 0 {
                run.iter_mut().for_each(|b| *b = next() as u8);
            } else {
                run.copy_from_slice(&words[(r >> 8) as usize % words.len()][..run.len()]);
            }
        }
        Gen { data }
    }
    /// `len` bytes starting at a position derived from `k` (cheap, varied).
    fn slice(&self, k: u64, len: usize) -> &[u8] {
        let span = self.data.len() - len;
        let start = (k.wrapping_mul(0x9E37_79B9) as usize % span.max(1)) & !7;
        &self.data[start..start + len]
    }
}

fn size_arg(s: &str, what: &str) -> Result<u64> {
    parse_size(s).filter(|&v| v > 0).ok_or_else(|| Error::invalid(format!("bad {} '{}': e.g. 4K, 1M, 8G", what, s)))
}

/// Parses "2ms", "500us", "1s" (a bare number is milliseconds).
fn duration_arg(s: &str, what: &str) -> Result<Duration> {
    let bad = || Error::invalid(format!("bad {} '{}': e.g. 2ms, 500us", what, s));
    let (num, unit) = s.trim().find(|c: char| c.is_ascii_alphabetic()).map_or((s.trim(), "ms"), |i| (&s.trim()[..i], &s.trim()[i..]));
    let v: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        _ => return Err(bad()),
    };
    if !(0.0..=60.0).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What a run measures: a pool by name, or a simulated one.
enum Target {
    Named(String),
    Simulated(Sim),
}

/// The run's tunables and target, which every (re)opening needs.
struct Env<'a> {
    t: &'a Tunables,
    target: Target,
}

impl Env<'_> {
    fn sim(&self) -> Option<&Sim> {
        match &self.target {
            Target::Simulated(s) => Some(s),
            Target::Named(_) => None,
        }
    }
}

/// The devices' shaping options as given: (bandwidth, latency, IOPS).
fn shaping(a: &BenchArgs) -> Result<(Option<u64>, Option<Duration>, Option<u64>)> {
    let bw = a.device_bandwidth.as_deref().map(|b| size_arg(b, "--device-bandwidth")).transpose()?;
    let lat = a.device_latency.as_deref().map(|l| duration_arg(l, "--device-latency")).transpose()?;
    if a.device_iops == Some(0) {
        return Err(Error::invalid("--device-iops 0: a device does at least one operation per second"));
    }
    Ok((bw, lat, a.device_iops))
}

fn total_size(a: &BenchArgs) -> Result<u64> {
    let default = if a.simulate.is_some() { "512M" } else { "1G" };
    size_arg(a.size.as_deref().unwrap_or(default), "--size")
}

/// Bytes a run lays down (what the simulated devices must hold), and the
/// options that asked for them.
fn data_bytes(a: &BenchArgs) -> Result<(u64, String)> {
    if a.workload == "smallobj" {
        // Each object takes at least a 4 KiB sector and its dnode.
        let per = size_arg(&a.object_size, "--object-size")?.next_multiple_of(4096) + 1024;
        return Ok((a.objects.saturating_mul(per), format!("--objects {} of --object-size {}", a.objects, a.object_size)));
    }
    Ok((total_size(a)?, format!("--size {}", a.size.as_deref().unwrap_or("512M"))))
}

fn target(a: &BenchArgs, t: &Tunables) -> Result<Target> {
    let Some(spec) = &a.simulate else {
        let name = a.pool.clone().ok_or_else(|| Error::invalid("give a pool to measure, or --simulate LAYOUT"))?;
        return Ok(Target::Named(name));
    };
    if a.cache_device.is_some() {
        return Err(Error::invalid("--cache-device: a simulated pool has no cache devices (drop --simulate or --cache-device)"));
    }
    let (bw, lat, iops) = shaping(a)?;
    let shape = simulate::Shape {
        bandwidth: bw.unwrap_or(simulate::DEFAULT_BANDWIDTH),
        latency: lat.unwrap_or(Duration::from_micros(simulate::DEFAULT_LATENCY_US)),
        iops: iops.unwrap_or(simulate::DEFAULT_IOPS),
    };
    let available = tarn_engine::arc::host_memory().available;
    let (bytes, asked) = data_bytes(a)?;
    Ok(Target::Simulated(Sim::build(spec, shape, (bytes, &asked), available, a.force, t)?))
}

fn open(a: &BenchArgs, env: &Env) -> Result<Pool> {
    let t = env.t;
    let name = match &env.target {
        Target::Simulated(sim) => return sim.open(t),
        Target::Named(name) => name,
    };
    let (bw, lat, iops) = shaping(a)?;
    let pool = if bw.is_some() || lat.is_some() || iops.is_some() {
        let (bw, lat) = (bw.unwrap_or(u64::MAX / 4), lat.unwrap_or(Duration::ZERO));
        let wrap = |d| {
            let dev = ThrottledDevice::new(d, bw, lat);
            Arc::new(match iops {
                Some(n) => dev.with_iops(n),
                None => dev,
            }) as Arc<dyn BlockDevice>
        };
        pool_cmd::open_wrapped(name, t, &wrap)?
    } else {
        pool_cmd::open(name, false, t)?
    };
    if let Some(c) = &a.cache_device {
        let name = c.display().to_string();
        if !pool.cache_devices().iter().any(|d| d.path == name) {
            pool.add_caches(std::slice::from_ref(c), a.force)?;
        }
    }
    Ok(pool)
}

fn apply_overrides(os: &Objset, a: &BenchArgs) -> Result<()> {
    let mut p = os.props();
    if let Some(c) = &a.compression {
        p.write.compress = CompressSetting::parse(c)?;
    }
    if let Some(c) = &a.checksum {
        p.write.checksum = match c.as_str() {
            "on" | "fletcher4" => ChecksumType::Fletcher4,
            "blake3" => ChecksumType::Blake3,
            _ => return Err(Error::invalid(format!("bad checksum '{}': fletcher4 or blake3", c))),
        };
    }
    if let Some(r) = &a.recordsize {
        p.recordsize = parse_recordsize(r)?;
    }
    if let Some(r) = &a.redundant_metadata {
        p.write.redundant_metadata = RedundantMetadata::parse(r)
            .ok_or_else(|| Error::invalid(format!("bad --redundant-metadata '{}': all, most, some or none", r)))?;
    }
    if let Some(c) = &a.primarycache {
        p.primarycache = CachePolicy::parse(c).ok_or_else(|| Error::invalid(format!("bad --primarycache '{}': all, metadata or none", c)))?;
    }
    os.set_props(p);
    Ok(())
}

pub fn run(a: BenchArgs, t: &Tunables) -> Result<()> {
    if a.threads == 0 || a.threads > 1024 {
        return Err(Error::invalid("--threads must be 1..=1024"));
    }
    if !["seqwrite", "randwrite", "randread", "seqread", "smallobj"].contains(&a.workload.as_str()) {
        return Err(Error::invalid(format!("unknown workload '{}': seqwrite, seqread, randwrite, randread, smallobj", a.workload)));
    }
    let env = Env { t, target: target(&a, t)? };
    let mut rep = match a.workload.as_str() {
        "smallobj" => run_smallobj(&a, &env)?,
        _ => run_stream(&a, &env)?,
    };
    rep.simulated = env.sim().map(|s| sim_report(s, &rep));
    print_report(&rep, a.json)
}

struct Counters {
    /// ARC demand data hits/misses, metadata hits/misses; L2ARC hits/misses.
    arc: [u64; 6],
    synced_txg: u64,
    w_ops: u64,
    w_bytes: u64,
    r_ops: u64,
    r_bytes: u64,
    allocated: u64,
}

fn counters(pool: &Pool) -> Counters {
    let a = &pool.core().cache.stats();
    let l2 = &pool.core().l2.stats;
    let arc = [&a.demand_data_hits, &a.demand_data_misses, &a.demand_metadata_hits, &a.demand_metadata_misses, &l2.hits, &l2.misses].map(|c| c.load(Ordering::Relaxed));
    let mut c = Counters { arc, synced_txg: pool.core().txg.synced_txg(), w_ops: 0, w_bytes: 0, r_ops: 0, r_bytes: 0, allocated: pool.status().allocated };
    for l in pool.core().leaves().iter().filter_map(|(_, v)| v.leaf()) {
        let s = l.stats();
        c.w_ops += s.write_ops.load(Ordering::Relaxed);
        c.w_bytes += s.write_bytes.load(Ordering::Relaxed);
        c.r_ops += s.read_ops.load(Ordering::Relaxed);
        c.r_bytes += s.read_bytes.load(Ordering::Relaxed);
    }
    c
}

/// Samples the dirty level until `stop` is set.
fn sampler(pool: &Pool, every: Option<u64>, stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<Vec<(u64, u64)>>> {
    let ms = every?;
    let txg = pool.core().txg.clone();
    Some(std::thread::spawn(move || {
        let start = Instant::now();
        let mut v = Vec::new();
        while !stop.load(Ordering::Relaxed) && v.len() < 1_000_000 {
            v.push((start.elapsed().as_millis() as u64, txg.dirty_total()));
            std::thread::sleep(Duration::from_millis(ms.max(1)));
        }
        v
    }))
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

/// Creates one object per thread (in one transaction).
fn make_objects(os: &Objset, n: usize) -> Result<Vec<u64>> {
    let tx = os.begin()?;
    let v = (0..n).map(|_| os.create(&tx, ObjectType::PlainData)).collect::<Result<Vec<_>>>()?;
    tx.commit();
    Ok(v)
}

fn fill(os: &Objset, objs: &[u64], per_obj: u64, bs: usize, gen: &Gen) -> Result<()> {
    std::thread::scope(|s| {
        let hs: Vec<_> = objs
            .iter()
            .map(|&o| {
                s.spawn(move || -> Result<()> {
                    let mut off = 0;
                    while off < per_obj {
                        let tx = os.begin()?;
                        let n = (per_obj - off).min(bs as u64) as usize;
                        os.write(&tx, o, off, gen.slice(off / bs as u64 + o, n))?;
                        off += n as u64;
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| h.join().map_err(|_| Error::invalid("bench thread panicked"))?)
    })
}

fn run_stream(a: &BenchArgs, env: &Env) -> Result<Report> {
    let total = total_size(a)?;
    let seq = a.workload.starts_with("seq");
    let bs = size_arg(a.bs.as_deref().unwrap_or(if seq { "1M" } else { "4K" }), "--bs")? as usize;
    let per_obj = (total / a.threads as u64).max(bs as u64);
    let gen = Gen::new(a.compressible);
    let pool = open(a, env)?;
    let os = pool.root().clone();
    apply_overrides(&os, a)?;
    let objs = make_objects(&os, a.threads)?;
    drop(os);
    let res = stream_phases(a, env, pool, &objs, per_obj, bs, &gen);
    if let Err(e) = res {
        // Leave no bench objects behind when the run fails part way.
        if let Ok(pool) = open(a, env) {
            let _ = cleanup(&pool, pool.root(), &objs, a.keep);
        }
        return Err(e);
    }
    res
}

fn stream_phases(a: &BenchArgs, env: &Env, mut pool: Pool, objs: &[u64], per_obj: u64, bs: usize, gen: &Gen) -> Result<Report> {
    let seq = a.workload.starts_with("seq");
    let reading = a.workload.ends_with("read");
    if reading || a.workload == "randwrite" {
        fill(pool.root(), objs, per_obj, (1 << 20).max(bs), gen)?;
        pool.sync()?;
    }
    if reading {
        // Cold caches: close and reopen the pool (O_DIRECT keeps the host's
        // page cache out of the way; drop it too in case a device is buffered).
        pool.close()?;
        drop(pool);
        if let Target::Named(name) = &env.target {
            drop_host_cache(name);
        }
        pool = open(a, env)?;
    }
    let mut os = pool.root().clone();
    apply_overrides(&os, a)?;
    let nops = if seq { per_obj / bs as u64 } else { a.ops.unwrap_or(per_obj / bs as u64) };
    if a.warmup_ops > 0 && reading {
        let wl = a.workload.as_str();
        let scratch = Mutex::new(new_hist());
        std::thread::scope(|s| -> Result<()> {
            let hs: Vec<_> = objs
                .iter()
                .enumerate()
                .map(|(i, &o)| {
                    let (os, scratch) = (&os, &scratch);
                    s.spawn(move || stream_thread(os, o, 1000 + i as u64, wl, a.warmup_ops, per_obj, bs, gen, scratch, None))
                })
                .collect();
            hs.into_iter().try_for_each(|h| h.join().map_err(|_| Error::invalid("bench thread panicked"))?)
        })?;
        if a.reimport_after_warmup {
            drop(os);
            pool.close()?;
            drop(pool);
            pool = open(a, env)?;
            os = pool.root().clone();
            apply_overrides(&os, a)?;
        }
    }
    let before = counters(&pool);
    let stop = Arc::new(AtomicBool::new(false));
    let samp = sampler(&pool, a.sample_ms, stop.clone());
    let hist = Mutex::new(new_hist());
    let start = Instant::now();
    let wl = a.workload.as_str();
    let rate = match &a.rate {
        Some(r) => Some(size_arg(r, "--rate")? / objs.len() as u64),
        None => None,
    };
    std::thread::scope(|s| -> Result<()> {
        let hs: Vec<_> = objs
            .iter()
            .enumerate()
            .map(|(i, &o)| {
                let (os, hist) = (&os, &hist);
                s.spawn(move || stream_thread(os, o, i as u64, wl, nops, per_obj, bs, gen, hist, rate))
            })
            .collect();
        hs.into_iter().try_for_each(|h| h.join().map_err(|_| Error::invalid("bench thread panicked"))?)
    })?;
    if !reading {
        pool.sync()?;
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let samples = samp.and_then(|h| h.join().ok()).unwrap_or_default();
    let after = counters(&pool);
    let ops = nops * objs.len() as u64;
    let mut rep = report(a, &pool, ops, ops * bs as u64, secs, &hist.lock(), &before, &after, samples, 0);
    (rep.objects_metadata_bytes, rep.objects_metadata_logical_bytes) = metadata_bytes(&os, objs);
    cleanup(&pool, &os, objs, a.keep)?;
    Ok(rep)
}

#[allow(clippy::too_many_arguments)]
fn stream_thread(os: &Objset, o: u64, i: u64, wl: &str, nops: u64, per_obj: u64, bs: usize, gen: &Gen, hist: &Mutex<Histogram<u64>>, rate: Option<u64>) -> Result<()> {
    let mut h = new_hist();
    let start = Instant::now();
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (i + 1);
    let blocks = (per_obj / bs as u64).max(1);
    for k in 0..nops {
        let blk = if wl.starts_with("seq") {
            k
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % blocks
        };
        let off = blk * bs as u64;
        if let Some(r) = rate {
            // Pace the offered load: op k is due at k × bs / rate.
            let due = start + Duration::from_secs_f64(k as f64 * bs as f64 / r.max(1) as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let t0 = Instant::now();
        if wl.ends_with("write") {
            let tx = os.begin()?;
            os.write(&tx, o, off, gen.slice(k + i * 7919, bs))?;
        } else {
            let d = os.read(o, off, bs)?;
            if d.len() != bs {
                return Err(Error::corrupt(format!("short read of {} bytes at {} of object {}", d.len(), off, o)));
            }
        }
        let _ = h.record(t0.elapsed().as_micros().max(1) as u64);
    }
    hist.lock().add(&h).map_err(|e| Error::invalid(format!("histogram: {}", e)))
}

fn run_smallobj(a: &BenchArgs, env: &Env) -> Result<Report> {
    let osz = size_arg(&a.object_size, "--object-size")? as usize;
    let gen = Gen::new(a.compressible);
    let pool = open(a, env)?;
    let os = pool.root().clone();
    apply_overrides(&os, a)?;
    pool.sync()?;
    let before = counters(&pool);
    let hist = Mutex::new(new_hist());
    let created = Mutex::new(Vec::with_capacity(a.objects as usize));
    let per = a.objects / a.threads as u64;
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let hs: Vec<_> = (0..a.threads as u64)
            .map(|ti| {
                let (os, gen, hist, created) = (&os, &gen, &hist, &created);
                s.spawn(move || -> Result<()> {
                    let mut h = new_hist();
                    let mut mine = Vec::with_capacity(per as usize);
                    for k in 0..per {
                        let t0 = Instant::now();
                        let tx = os.begin()?;
                        let o = os.create(&tx, ObjectType::PlainData)?;
                        os.write(&tx, o, 0, gen.slice(ti * per + k, osz))?;
                        drop(tx);
                        mine.push(o);
                        let _ = h.record(t0.elapsed().as_micros().max(1) as u64);
                    }
                    created.lock().extend(mine);
                    hist.lock().add(&h).map_err(|e| Error::invalid(format!("histogram: {}", e)))
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| h.join().map_err(|_| Error::invalid("bench thread panicked"))?)
    })?;
    pool.sync()?;
    let secs = start.elapsed().as_secs_f64();
    let after = counters(&pool);
    let n = per * a.threads as u64;
    let rep = report(a, &pool, n, n * osz as u64, secs, &hist.lock(), &before, &after, vec![], n);
    let objs = created.into_inner();
    cleanup(&pool, &os, &objs, a.keep)?;
    Ok(rep)
}

#[allow(clippy::too_many_arguments)]
fn report(a: &BenchArgs, pool: &Pool, ops: u64, bytes: u64, secs: f64, h: &Histogram<u64>, b: &Counters, e: &Counters, samples: Vec<(u64, u64)>, objects: u64) -> Report {
    let wops = e.w_ops - b.w_ops;
    let txgs: Vec<_> = pool.txg_history().into_iter().filter(|t| t.txg > b.synced_txg).collect();
    let stats = &pool.core().txg.stats;
    let allocated = e.allocated as i64 - b.allocated as i64;
    let z = pool.core().cache.sizes();
    Report {
        workload: a.workload.clone(),
        threads: a.threads,
        bytes,
        ops,
        seconds: secs,
        mib_per_s: bytes as f64 / (1 << 20) as f64 / secs,
        ops_per_s: ops as f64 / secs,
        lat_us_p50: h.value_at_quantile(0.5),
        lat_us_p99: h.value_at_quantile(0.99),
        lat_us_p999: h.value_at_quantile(0.999),
        lat_us_max: h.max(),
        device_write_ops: wops,
        device_write_bytes: e.w_bytes - b.w_bytes,
        device_read_ops: e.r_ops - b.r_ops,
        device_read_bytes: e.r_bytes - b.r_bytes,
        ops_per_device_write: if wops > 0 { ops as f64 / wops as f64 } else { 0.0 },
        bytes_allocated: allocated,
        bytes_allocated_per_object: if objects > 0 { allocated as f64 / objects as f64 } else { 0.0 },
        throttle_delayed: stats.delayed.load(Ordering::Relaxed),
        throttle_over_max: stats.over_max.load(Ordering::Relaxed),
        dirty_max: pool.core().txg.params().dirty_max,
        dirty_samples: samples,
        txgs,
        arc_data_miss_pct: miss_pct(e.arc[0] - b.arc[0], e.arc[1] - b.arc[1]),
        arc_metadata_miss_pct: miss_pct(e.arc[2] - b.arc[2], e.arc[3] - b.arc[3]),
        arc_size: z.size,
        arc_metadata_size: z.metadata_size,
        arc_compressed_size: z.compressed_size,
        arc_uncompressed_size: z.uncompressed_size,
        arc_overhead_size: z.overhead_size,
        objects_metadata_bytes: 0,
        objects_metadata_logical_bytes: 0,
        l2_hits: e.arc[4] - b.arc[4],
        l2_misses: e.arc[5] - b.arc[5],
        l2_size: pool.core().l2.size_bytes(),
        l2_feeds: pool.core().l2.stats.feeds.load(Ordering::Relaxed),
        l2_write_bytes: pool.core().l2.stats.write_bytes.load(Ordering::Relaxed),
        simulated: None,
    }
}

fn miss_pct(hits: u64, misses: u64) -> f64 {
    if hits + misses == 0 {
        0.0
    } else {
        misses as f64 * 100.0 / (hits + misses) as f64
    }
}

/// Indirect blocks of `objs`: (bytes as stored and held, logical bytes).
/// Walks the objects' trees (after the timed phase).
fn metadata_bytes(os: &Objset, objs: &[u64]) -> (u64, u64) {
    objs.iter()
        .filter_map(|&o| os.tree(o, usize::MAX).ok())
        .flatten()
        .filter(|(level, _, _)| *level > 0)
        .fold((0, 0), |(p, l), (_, _, bp)| (p + bp.psize as u64, l + bp.lsize as u64))
}

fn cleanup(pool: &Pool, os: &Objset, objs: &[u64], keep: bool) -> Result<()> {
    if !keep {
        for chunk in objs.chunks(10_000) {
            let tx = os.begin()?;
            for &o in chunk {
                os.free(&tx, o)?;
            }
        }
    }
    pool.close()
}

/// Asks the kernel to drop cached pages of the pool's device files.
fn drop_host_cache(pool: &str) {
    let Ok(cache) = crate::cache::Cache::load() else { return };
    let Ok(entry) = cache.find(pool) else { return };
    for d in &entry.devices {
        if let Ok(f) = std::fs::File::open(d) {
            use std::os::fd::AsRawFd;
            // SAFETY: fadvise on an open descriptor has no memory-safety preconditions.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}

/// The dirty level over time as one line of block characters (0 … max).
fn sparkline(samples: &[(u64, u64)], max: u64, width: usize) -> String {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = samples.len().div_ceil(width.max(1)).max(1);
    samples
        .chunks(per)
        .map(|c| {
            let mean = c.iter().map(|s| s.1 as f64).sum::<f64>() / c.len() as f64;
            let level = (mean / max.max(1) as f64 * 8.0).round().clamp(0.0, 8.0) as usize;
            BARS[level]
        })
        .collect()
}

fn print_report(r: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r).map_err(|e| Error::invalid(e.to_string()))?);
        return Ok(());
    }
    println!("workload      {} ({} thread{})", r.workload, r.threads, if r.threads == 1 { "" } else { "s" });
    if let Some(s) = &r.simulated {
        println!(
            "simulated     '{}': {} devices of {}/s, {} IOPS, {} us; {} memory held",
            s.layout,
            s.devices,
            crate::fmt::size(s.device_bandwidth),
            s.device_iops,
            s.device_latency_us,
            crate::fmt::size(s.memory_bytes)
        );
        println!(
            "data devices  {} ({} for {}): {:.0} MiB/s, {:.0} IOPS; this run {:.1} % of the bandwidth, {:.1} % of the IOPS; devices {:.1} % busy",
            s.data_devices,
            if r.workload.ends_with("read") { "reading" } else { "writing" },
            r.workload,
            s.data_mib_per_s,
            s.data_iops,
            s.pct_of_data_bandwidth,
            s.pct_of_data_iops,
            s.pct_of_device_bandwidth
        );
    }
    println!("throughput    {:.1} MiB/s, {:.0} ops/s ({} ops, {} bytes in {:.2} s)", r.mib_per_s, r.ops_per_s, r.ops, r.bytes, r.seconds);
    println!("latency (us)  p50 {}  p99 {}  p99.9 {}  max {}", r.lat_us_p50, r.lat_us_p99, r.lat_us_p999, r.lat_us_max);
    println!("device        {} writes ({} bytes), {} reads ({} bytes)", r.device_write_ops, r.device_write_bytes, r.device_read_ops, r.device_read_bytes);
    if r.device_write_ops > 0 {
        println!("aggregation   {:.1} operations per physical write", r.ops_per_device_write);
    }
    if r.bytes_allocated_per_object > 0.0 {
        println!("space         {:.0} bytes allocated per object", r.bytes_allocated_per_object);
    }
    println!("throttle      {} delayed, {} at the dirty limit ({} bytes)", r.throttle_delayed, r.throttle_over_max, r.dirty_max);
    if r.workload.ends_with("read") {
        println!(
            "arc           dm% {:.1}  mm% {:.1}  size {} (metadata {}; {} logical); the objects' metadata is {} ({} logical)",
            r.arc_data_miss_pct,
            r.arc_metadata_miss_pct,
            crate::fmt::size(r.arc_size),
            crate::fmt::size(r.arc_metadata_size),
            crate::fmt::size(r.arc_uncompressed_size),
            crate::fmt::size(r.objects_metadata_bytes),
            crate::fmt::size(r.objects_metadata_logical_bytes)
        );
        if r.l2_hits + r.l2_misses > 0 || r.l2_size > 0 {
            println!("l2arc         {} hits, {} misses, {} cached", r.l2_hits, r.l2_misses, crate::fmt::size(r.l2_size));
        }
    }
    if !r.txgs.is_empty() {
        let n = r.txgs.len() as f64;
        let mib = r.txgs.iter().map(|t| t.dirty_bytes as f64).sum::<f64>() / n / (1 << 20) as f64;
        let ms = r.txgs.iter().map(|t| t.sync_ms).sum::<f64>() / n;
        println!("txgs          {} synced, mean {:.0} MiB dirty, mean sync {:.0} ms (--json lists each)", r.txgs.len(), mib, ms);
    }
    if !r.dirty_samples.is_empty() {
        let n = r.dirty_samples.len();
        let tail = &r.dirty_samples[n / 2..];
        let mean = tail.iter().map(|s| s.1 as f64).sum::<f64>() / tail.len().max(1) as f64;
        println!("dirty data    {} samples; second half mean {:.0}% of max", n, mean * 100.0 / r.dirty_max.max(1) as f64);
        println!("dirty/max     {}", sparkline(&r.dirty_samples, r.dirty_max, 60));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_engine::io::compress::compress;

    #[test]
    fn compressible_data_compresses_like_text_not_like_zeros() {
        let g = Gen::new(true);
        let (mut logical, mut phys) = (0usize, 0usize);
        for k in 0..64 {
            let b = g.slice(k, 16 << 10);
            logical += b.len();
            phys += compress(CompressSetting::Lz4, b, 512).map_or(b.len(), |c| c.len());
        }
        let pct = phys * 100 / logical;
        assert!((30..=55).contains(&pct), "lz4 keeps {}% of --compressible data", pct);
        let r = Gen::new(false);
        assert!(compress(CompressSetting::Lz4, r.slice(3, 16 << 10), 512).is_none(), "random data does not compress");
    }
}
