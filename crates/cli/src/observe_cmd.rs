//! The client side of `pool iostat`, `arcstat`, `pool txgs` and `pool
//! explain`: each report asks the daemon for metrics snapshots (one
//! request, `Command::Metrics`) and renders the difference from the
//! previous one with `observe`. The interval loop runs here, not in the
//! daemon, so a report never holds the daemon's state lock for longer
//! than a snapshot takes.
//!
//! Like zpool iostat, the first report covers everything since the pool
//! was imported (counts, not rates: the daemon does not know how long
//! that was) unless `-y` skips it; later reports are per second over the
//! interval.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tarn_engine::pool::metrics::{ArcMetrics, PoolMetrics, VdevMetrics, CLASS_LOG};
use tarn_engine::{Error, Result};

use crate::client;
use crate::daemon::observe::MetricsReply;
use crate::daemon::proto::Command;
use crate::observe::{self, IostatViews};

#[derive(Debug, Args, Serialize, Deserialize)]
pub struct IostatArgs {
    /// Every device, under its pool
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Latency columns (total, disk, queue wait)
    #[arg(short = 'l')]
    pub latency: bool,
    /// Queue columns: pending and active per class
    #[arg(short = 'q')]
    pub queues: bool,
    /// Request size histograms
    #[arg(short = 'r')]
    pub request_sizes: bool,
    /// Latency histograms
    #[arg(short = 'w')]
    pub latency_hist: bool,
    /// Skip the first report (totals since import)
    #[arg(short = 'y')]
    pub skip_first: bool,
    /// One JSON object per report: counts over the interval, per pool and device
    #[arg(long)]
    pub json: bool,
    /// [POOL] [INTERVAL [COUNT]]
    #[arg(value_name = "POOL|INTERVAL|COUNT", num_args = 0..=3)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ArcstatArgs {
    /// Fields, comma-separated (default: time,read,miss,miss%,dmis,dm%,pmis,pm%,mmis,mm%,size,c,avail)
    #[arg(short = 'f', value_name = "FIELDS")]
    pub fields: Option<String>,
    /// One JSON object per report, field name to value
    #[arg(long)]
    pub json: bool,
    /// [INTERVAL [COUNT]]
    #[arg(value_name = "INTERVAL|COUNT", num_args = 0..=2)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ZilstatArgs {
    /// Only this pool's logs (default: every pool's, summed)
    #[arg(short = 'p', value_name = "POOL")]
    pub pool: Option<String>,
    /// One JSON object per report, field name to value
    #[arg(long)]
    pub json: bool,
    /// [INTERVAL [COUNT]]
    #[arg(value_name = "INTERVAL|COUNT", num_args = 0..=2)]
    pub args: Vec<String>,
}

/// When to report: once, or every `interval` seconds `count` times (None: forever).
struct Schedule {
    interval: Option<f64>,
    count: Option<u64>,
}

fn parse_schedule(args: &[String]) -> Result<Schedule> {
    let interval = args
        .first()
        .map(|s| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0 && *v <= 86_400.0).ok_or_else(|| Error::invalid(format!("bad interval '{}': seconds, more than 0 and at most 86400", s))))
        .transpose()?;
    let count = args
        .get(1)
        .map(|s| s.parse::<u64>().ok().filter(|&c| c > 0).ok_or_else(|| Error::invalid(format!("bad count '{}': a whole number of reports, at least 1", s))))
        .transpose()?;
    if args.len() > 2 {
        return Err(Error::invalid(format!("unexpected argument '{}' after INTERVAL COUNT", args[2])));
    }
    Ok(Schedule { interval, count })
}

/// One metrics request to the daemon.
pub fn fetch(pools: &[String], tunables: &[String]) -> Result<MetricsReply> {
    let text = client::call(Command::Metrics { pools: pools.to_vec() }, tunables)?;
    serde_json::from_str(&text).map_err(|e| Error::invalid(format!("the daemon's metrics cannot be read: {}", e)))
}

/// Calls `report(cur, prev, secs)` for each report of the schedule.
fn each_report(pools: &[String], s: &Schedule, skip_first: bool, tunables: &[String], mut report: impl FnMut(&MetricsReply, Option<&MetricsReply>, f64) -> Result<()>) -> Result<()> {
    let step = Duration::from_secs_f64(s.interval.unwrap_or(1.0));
    let mut prev: Option<(MetricsReply, Instant)> = None;
    if skip_first {
        prev = Some((fetch(pools, tunables)?, Instant::now()));
        std::thread::sleep(step);
    }
    let mut done = 0u64;
    loop {
        let cur = fetch(pools, tunables)?;
        let now = Instant::now();
        let secs = prev.as_ref().map(|(_, t)| now.duration_since(*t).as_secs_f64()).unwrap_or(0.0);
        report(&cur, prev.as_ref().map(|(p, _)| p), secs)?;
        let _ = std::io::stdout().flush();
        done += 1;
        if s.interval.is_none() || s.count.is_some_and(|c| done >= c) {
            return Ok(());
        }
        prev = Some((cur, now));
        std::thread::sleep(step);
    }
}

pub fn iostat(a: IostatArgs, tunables: &[String]) -> Result<()> {
    let (pools, rest) = match a.args.first() {
        Some(p) if p.parse::<f64>().is_err() => (vec![p.clone()], &a.args[1..]),
        _ => (vec![], &a.args[..]),
    };
    let s = parse_schedule(rest)?;
    let views = IostatViews { verbose: a.verbose, latency: a.latency, queues: a.queues, request_sizes: a.request_sizes, latency_hist: a.latency_hist };
    each_report(&pools, &s, a.skip_first, tunables, |cur, prev, secs| {
        if cur.pools.is_empty() {
            println!("no pools available");
        }
        let before = |m: &PoolMetrics| prev.and_then(|p| p.pools.iter().find(|x| x.pool == m.pool));
        if a.json {
            let v: Vec<_> = cur.pools.iter().map(|m| iostat_json(m, before(m))).collect();
            println!("{}", json!({ "seconds": secs, "since_import": prev.is_none(), "pools": v }));
        } else {
            cur.pools.iter().for_each(|m| print!("{}", observe::iostat(m, before(m), secs, views)));
        }
        Ok(())
    })
}

fn vdev_json(v: &VdevMetrics, p: Option<&VdevMetrics>) -> serde_json::Value {
    let d = |f: fn(&VdevMetrics) -> u64| f(v).saturating_sub(p.map(f).unwrap_or(0));
    json!({
        "path": v.path, "class": v.class, "alloc": v.allocated, "free": v.size.saturating_sub(v.allocated),
        "read_ops": d(|x| x.read_ops), "write_ops": d(|x| x.write_ops),
        "read_bytes": d(|x| x.read_bytes), "write_bytes": d(|x| x.write_bytes),
        "queues": v.queues,
    })
}

/// A pool's counts over the interval (`prev` None: since import), in bytes
/// and operations: `vdevs` lists the data devices, then the log devices,
/// then the cache devices, each with its `class` (normal, log, cache); the
/// pool's counts sum the data and log devices (as the text's pool row).
fn iostat_json(m: &PoolMetrics, prev: Option<&PoolMetrics>) -> serde_json::Value {
    let one = |v: &VdevMetrics, before: fn(&PoolMetrics) -> &[VdevMetrics]| vdev_json(v, prev.and_then(|p| before(p).iter().find(|x| x.id == v.id)));
    let (logs, data): (Vec<&VdevMetrics>, Vec<&VdevMetrics>) = m.vdevs.iter().partition(|v| v.class == CLASS_LOG);
    let pool: Vec<_> = data.into_iter().chain(logs).map(|v| one(v, |p| &p.vdevs)).collect();
    let sum = |k: &str| pool.iter().map(|v| v[k].as_u64().unwrap_or(0)).sum::<u64>();
    let (read_ops, write_ops, read_bytes, write_bytes) = (sum("read_ops"), sum("write_ops"), sum("read_bytes"), sum("write_bytes"));
    let vdevs: Vec<_> = pool.into_iter().chain(m.cache.iter().map(|v| one(v, |p| &p.cache))).collect();
    json!({
        "pool": m.pool, "alloc": m.allocated, "free": m.free,
        "read_ops": read_ops, "write_ops": write_ops,
        "read_bytes": read_bytes, "write_bytes": write_bytes,
        "vdevs": vdevs,
    })
}

/// `HH:MM:SS` (UTC) for arcstat's time column.
fn clock() -> String {
    crate::fmt::hms(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) % 86_400)
}

pub fn arcstat(a: ArcstatArgs, tunables: &[String]) -> Result<()> {
    let fields = observe::arcstat_fields(a.fields.as_deref().unwrap_or(observe::ARCSTAT_DEFAULT)).map_err(Error::invalid)?;
    let s = parse_schedule(&a.args)?;
    let width = |f: &String| if f == "time" { 8 } else { f.len().max(5) };
    if !a.json {
        println!("{}", fields.iter().map(|f| format!("{:>w$}", f, w = width(f))).collect::<Vec<_>>().join(" "));
    }
    each_report(&[], &s, false, tunables, |cur, prev, secs| {
        let row = observe::arcstat_row(&fields, (&cur.arc, &cur.pools), prev.map(|p| (&p.arc, &p.pools[..])), secs, &cur.host, &clock());
        if a.json {
            let obj: serde_json::Map<String, serde_json::Value> = fields
                .iter()
                .zip(row)
                .map(|(f, v)| (f.clone(), v.parse::<u64>().map(serde_json::Value::from).unwrap_or(serde_json::Value::from(v))))
                .collect();
            println!("{}", serde_json::Value::Object(obj));
        } else {
            println!("{}", fields.iter().zip(row).map(|(f, v)| format!("{:>w$}", v, w = width(f))).collect::<Vec<_>>().join(" "));
        }
        Ok(())
    })
}

pub fn zilstat(a: ZilstatArgs, tunables: &[String]) -> Result<()> {
    let s = parse_schedule(&a.args)?;
    let pools: Vec<String> = a.pool.iter().cloned().collect();
    let fields = observe::ZILSTAT_FIELDS;
    let width = |f: &str| if f == "time" { 8 } else { f.len().max(7) };
    if !a.json {
        println!("{}", fields.iter().map(|(f, _)| format!("{:>w$}", f, w = width(f))).collect::<Vec<_>>().join(" "));
    }
    each_report(&pools, &s, false, tunables, |cur, prev, secs| {
        if let (Some(p), true) = (&a.pool, cur.pools.is_empty()) {
            return Err(Error::not_found(format!("no such pool '{}'", p)));
        }
        let row = observe::zilstat_row(&cur.pools, prev.map(|p| &p.pools[..]), secs, &clock());
        if a.json {
            let obj: serde_json::Map<String, serde_json::Value> =
                fields.iter().zip(row).map(|((f, _), v)| (f.to_string(), v.parse::<u64>().map(serde_json::Value::from).unwrap_or(serde_json::Value::from(v)))).collect();
            println!("{}", serde_json::Value::Object(obj));
        } else {
            println!("{}", fields.iter().zip(row).map(|((f, _), v)| format!("{:>w$}", v, w = width(f))).collect::<Vec<_>>().join(" "));
        }
        Ok(())
    })
}

/// The metrics of pool `name` and of the ARC.
fn one_pool(name: &str, tunables: &[String]) -> Result<(PoolMetrics, ArcMetrics)> {
    let mut r = fetch(&[name.to_string()], tunables)?;
    let m = r.pools.pop().ok_or_else(|| Error::not_found(format!("no such pool '{}'", name)))?;
    Ok((m, r.arc))
}

pub fn txgs(name: &str, as_json: bool, tunables: &[String]) -> Result<()> {
    let (m, _) = one_pool(name, tunables)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&m.txgs).map_err(|e| Error::invalid(e.to_string()))?);
    } else {
        print!("{}", observe::txgs(&m));
    }
    Ok(())
}

pub fn explain(name: &str, seconds: f64, as_json: bool, tunables: &[String]) -> Result<()> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(Error::invalid(format!("bad SECONDS '{}': more than 0 and at most 3600", seconds)));
    }
    let (prev, arc_prev) = one_pool(name, tunables)?;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (cur, arc_cur) = one_pool(name, tunables)?;
    let text = observe::explain(&cur, &prev, (&arc_cur, &arc_prev), t.elapsed().as_secs_f64());
    if as_json {
        let lines: Vec<&str> = text.lines().skip(1).map(|l| l.trim()).collect();
        let v = json!({ "pool": cur.pool, "seconds": t.elapsed().as_secs_f64(), "findings": lines, "throttle": cur.throttle });
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| Error::invalid(e.to_string()))?);
    } else {
        print!("{}", text);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_schedule;

    #[test]
    fn schedules_parse_and_refuse() {
        let s = parse_schedule(&["2".into(), "3".into()]).unwrap();
        assert_eq!((s.interval, s.count), (Some(2.0), Some(3)));
        assert!(parse_schedule(&[]).unwrap().interval.is_none());
        assert!(parse_schedule(&["0".into()]).is_err());
        assert!(parse_schedule(&["-1".into()]).is_err());
        assert!(parse_schedule(&["1".into(), "x".into()]).is_err());
    }
}
