//! Observability in the daemon: metrics snapshots for `pool iostat`,
//! `arcstat`, `pool txgs` and `pool explain` (the client renders them with
//! `crate::observe`), live tunables (`tunable list|get|set|reset`, kept
//! across restarts by `crate::tunables_conf`), the optional
//! Prometheus endpoint (`daemon --metrics ADDR`) and `pool write-test`, the
//! hidden load generator the tests and `bench/tuning-loop.sh` drive.
//!
//! Snapshots are cheap (atomics and one lock per queue), so they are taken
//! under the state lock. `write-test` is not: it runs for as long as its
//! writes take, so it takes the root object set under the lock and writes
//! without it — otherwise every `pool iostat` would wait for the load it is
//! meant to watch.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::arc::{host_memory, HostMemory};
use tarn_engine::pool::metrics::{arc_snapshot, snapshot, ArcMetrics, PoolMetrics};
use tarn_engine::tunables::parse_size;
use tarn_engine::{Error, Objset, Result, Tunables};
use tarn_ondisk::ObjectType;

use super::state::{Daemon, Out, State};
use super::log;
use crate::fmt;

/// The answer to [`super::proto::Command::Metrics`], as JSON in the output.
#[derive(Debug, Serialize, Deserialize)]
pub struct MetricsReply {
    pub pools: Vec<PoolMetrics>,
    pub host: HostMemory,
    /// The daemon's ARC, which every pool caches in.
    pub arc: ArcMetrics,
}

/// Snapshots of the named live pools (none named: every live pool), of the
/// ARC and of the host's memory.
pub fn metrics(st: &mut State, names: &[String], out: &mut Out) -> Result<()> {
    let pools = snapshots(st, names, out)?;
    let reply = MetricsReply { pools, host: host_memory(), arc: arc_snapshot(&tarn_engine::arc::shared()) };
    out.text = serde_json::to_string(&reply).map_err(|e| Error::invalid(e.to_string()))?;
    Ok(())
}

fn snapshots(st: &mut State, names: &[String], out: &mut Out) -> Result<Vec<PoolMetrics>> {
    if names.is_empty() {
        return Ok(st.pools.values().map(|l| snapshot(&l.pool)).collect());
    }
    names.iter().map(|n| Ok(snapshot(&st.live(n, out)?.pool))).collect()
}

/// `tunable list|get|set|reset` against the daemon's live values.
#[derive(Debug, clap::Subcommand, Serialize, Deserialize)]
pub enum TunableCmd {
    /// Every tunable with its current value and meaning
    List,
    /// One tunable's value
    Get { name: String },
    /// Change a tunable on every pool the daemon holds and for pools it imports later; remembered across daemon restarts
    Set {
        #[arg(value_name = "NAME=VALUE")]
        assignment: String,
    },
    /// Return a tunable to the daemon's starting value (its --tunable setting or the default) and forget its persisted value
    Reset { name: String },
}

/// `tunable list` as a table.
pub fn tunable_table(t: &Tunables) -> String {
    let rows: Vec<Vec<String>> = t.list().into_iter().map(|(n, v, d)| vec![n.to_string(), v, d.to_string()]).collect();
    fmt::table(&["NAME", "VALUE", "DESCRIPTION"], &rows, false)
}

pub fn tunable(st: &mut State, cmd: TunableCmd, out: &mut Out) -> Result<()> {
    match cmd {
        TunableCmd::List => out.text = tunable_table(&st.tunables),
        TunableCmd::Get { name } => out.line(st.tunables.get(&name)?),
        TunableCmd::Set { assignment } => {
            let (k, v) = assignment.split_once('=').ok_or_else(|| Error::invalid(format!("tunable set takes NAME=VALUE, not '{}'", assignment)))?;
            let (k, v) = (k.trim(), v.trim());
            if v.is_empty() {
                st.tunables.get(k)?;
                return Err(Error::invalid(format!("tunable set {}= has no value; `tarn tunable reset {}` returns it to its starting value", k, k)));
            }
            // Validated against the daemon's values and persisted first: a
            // bad value, or one that cannot be remembered, changes nothing.
            let mut t = st.tunables.clone();
            t.set(k, v)?;
            let mut kept = crate::tunables_conf::load()?;
            crate::tunables_conf::upsert(&mut kept, k, v);
            crate::tunables_conf::save(&kept)?;
            apply_live(st, k, v, &t, out);
            log(&format!("tunable {}={} (kept in '{}')", k, v, crate::tunables_conf::path().display()));
            st.tunables = t;
        }
        TunableCmd::Reset { name } => {
            let k = name.trim();
            let v = st.base_tunables.get(k)?;
            let mut t = st.tunables.clone();
            t.set(k, &v).map_err(|e| e.context(format!("cannot reset {} to {}", k, v)))?;
            let mut kept = crate::tunables_conf::load()?;
            kept.retain(|(n, _)| n != k);
            crate::tunables_conf::save(&kept)?;
            apply_live(st, k, &v, &t, out);
            log(&format!("tunable {} reset to {}", k, v));
            st.tunables = t;
        }
    }
    Ok(())
}

/// Sets a (validated) tunable on every live pool, and `t` (the daemon's
/// tunables with it) on the ARC, which is the daemon's whether or not a
/// pool is imported.
fn apply_live(st: &State, k: &str, v: &str, t: &Tunables, out: &mut Out) {
    for (name, live) in &st.pools {
        if let Err(e) = live.pool.set_tunable(k, v) {
            out.warnings.push(format!("pool '{}': {} not changed: {}", name, k, e.msg));
        }
    }
    tarn_engine::arc::shared().apply_tunables(t);
}

/// `pool write-test`: a known write load generated inside the daemon.
#[derive(Debug, Args, Serialize, Deserialize)]
pub struct WriteTestArgs {
    pub name: String,
    /// Bytes to write in all
    #[arg(long)]
    pub bytes: String,
    /// Bytes per write
    #[arg(long, default_value = "1M")]
    pub bs: String,
    /// Writers, each on its own scratch object
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Read everything back after the sync (moves the ARC counters)
    #[arg(long)]
    pub read_back: bool,
}

/// Most writers of one write-test.
const WRITE_TEST_JOBS_MAX: usize = 64;

/// Writes `--bytes` in `--bs` writes (random, incompressible data) from
/// `--jobs` threads, waits for the txg to sync, optionally reads it back,
/// and frees the scratch objects.
pub fn write_test(d: &Daemon, a: WriteTestArgs, out: &mut Out) -> Result<()> {
    let size = |s: &str, what: &str| parse_size(s).filter(|&v| v > 0).ok_or_else(|| Error::invalid(format!("bad {} '{}': a size such as 64M", what, s)));
    let total = size(&a.bytes, "--bytes")?;
    let bs = size(&a.bs, "--bs")?.min(16 << 20) as usize;
    if a.jobs == 0 || a.jobs > WRITE_TEST_JOBS_MAX {
        return Err(Error::invalid(format!("bad --jobs {}: 1 to {}", a.jobs, WRITE_TEST_JOBS_MAX)));
    }
    let os = d.root_of(&a.name, out)?;
    let tx = os.begin()?;
    let objs = (0..a.jobs).map(|_| os.create(&tx, ObjectType::PlainData)).collect::<Result<Vec<u64>>>()?;
    tx.commit();
    let per_job = total.div_ceil(a.jobs as u64);
    let t0 = std::time::Instant::now();
    let res = run_jobs(&objs, |o| write_object(&os, o, per_job, bs)).and_then(|_| os.wait_synced());
    let write_secs = t0.elapsed().as_secs_f64();
    let res = res.and_then(|_| if a.read_back { run_jobs(&objs, |o| read_object(&os, o, per_job, bs)) } else { Ok(()) });
    // The load's own error first: a failed free usually follows from it.
    let freed = free_objects(&os, &objs);
    res.and(freed).map_err(|e| e.context(format!("pool '{}': write-test", a.name)))?;
    let writes = per_job.div_ceil(bs as u64) * a.jobs as u64;
    out.line(format!("wrote {} in {} writes of {} from {} writers, synced in {:.2} s ({}/s){}", fmt::size(per_job * a.jobs as u64), writes, fmt::size(bs as u64), a.jobs, write_secs, fmt::size((per_job as f64 * a.jobs as f64 / write_secs.max(1e-9)) as u64), if a.read_back { "; read back" } else { "" }));
    Ok(())
}

fn free_objects(os: &Objset, objs: &[u64]) -> Result<()> {
    let tx = os.begin()?;
    for &o in objs {
        os.free(&tx, o)?;
    }
    tx.commit();
    Ok(())
}

fn run_jobs(objs: &[u64], f: impl Fn(u64) -> Result<()> + Sync) -> Result<()> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = objs.iter().map(|&o| s.spawn(move || f(o))).collect();
        hs.into_iter().try_for_each(|h| h.join().map_err(|_| Error::invalid("write-test thread panicked"))?)
    })
}

fn write_object(os: &Objset, obj: u64, len: u64, bs: usize) -> Result<()> {
    // xorshift: incompressible, so device bytes are at least the bytes written.
    let mut x = obj.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut buf = vec![0u8; bs];
    let mut off = 0;
    while off < len {
        for c in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
        }
        let n = (len - off).min(bs as u64) as usize;
        let tx = os.begin()?;
        os.write(&tx, obj, off, &buf[..n])?;
        tx.commit();
        off += n as u64;
    }
    Ok(())
}

fn read_object(os: &Objset, obj: u64, len: u64, bs: usize) -> Result<()> {
    let mut off = 0;
    while off < len {
        let n = (len - off).min(bs as u64) as usize;
        os.read(obj, off, n)?;
        off += n as u64;
    }
    Ok(())
}

/// Largest HTTP request head read from a scraper.
const HTTP_HEAD_MAX_BYTES: usize = 8 << 10;

/// Binds the Prometheus endpoint and serves it on its own thread, one
/// connection at a time (a scraper asks every few seconds).
pub fn serve_metrics(d: Arc<Daemon>, addr: &str) -> Result<()> {
    let l = TcpListener::bind(addr).map_err(|e| Error::io(format!("binding the metrics endpoint '{}'", addr), e))?;
    log(&format!("metrics endpoint http://{}/metrics", l.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| addr.into())));
    std::thread::Builder::new()
        .name("tarn-metrics".into())
        .spawn(move || {
            for conn in l.incoming().flatten() {
                if let Err(e) = answer_http(&d, conn) {
                    log(&format!("metrics endpoint: {}", e));
                }
            }
        })
        .map_err(|e| Error::io("starting the metrics thread", e))?;
    Ok(())
}

fn answer_http(d: &Daemon, mut c: TcpStream) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HTTP_HEAD_MAX_BYTES {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => ("200 OK", crate::observe::prometheus(&d.snapshots(), &arc_snapshot(&tarn_engine::arc::shared()))),
        ("GET", _) => ("404 Not Found", "tarn serves /metrics only\n".to_string()),
        _ => ("405 Method Not Allowed", "GET /metrics\n".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        status,
        body.len(),
        body
    );
    c.write_all(resp.as_bytes())
}
