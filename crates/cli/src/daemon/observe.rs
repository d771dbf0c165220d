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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::arc::{host_memory, HostMemory};
use tarn_engine::pool::metrics::{arc_snapshot, snapshot, ArcMetrics, PoolMetrics};
use tarn_engine::tunables::{parse_size, show_value};
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
    /// Every tunable with its current value, range and meaning
    List,
    /// One tunable's value
    Get { name: String },
    /// Change tunables on every pool the daemon holds and for pools it imports later; remembered across daemon restarts. Several in one command are checked together (to move zfs_arc_min and zfs_arc_max at once)
    Set {
        #[arg(required = true, value_name = "NAME=VALUE")]
        assignments: Vec<String>,
    },
    /// Return tunables to the daemon's starting value (its --tunable setting or the default) and forget their persisted value
    Reset {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
}

/// `tunable list` as a table; RANGE is inclusive.
pub fn tunable_table(t: &Tunables) -> String {
    let range = |n: &str| t.range(n).map(|(lo, hi)| format!("{}-{}", show_value(lo), show_value(hi))).unwrap_or_default();
    let rows: Vec<Vec<String>> = t.list().into_iter().map(|(n, v, d)| vec![n.to_string(), v, range(n), d.to_string()]).collect();
    fmt::table(&["NAME", "VALUE", "RANGE", "DESCRIPTION"], &rows, false)
}

pub fn tunable(st: &mut State, cmd: TunableCmd, out: &mut Out) -> Result<()> {
    match cmd {
        TunableCmd::List => {
            out.text = tunable_table(&st.tunables);
            out.warnings.extend(st.tunable_settings.refused_lines(None));
        }
        TunableCmd::Get { name } => {
            out.line(st.tunables.get(&name)?);
            out.warnings.extend(st.tunable_settings.refused_lines(Some(&name)));
        }
        TunableCmd::Set { assignments } => tunable_set(st, &assignments, out)?,
        TunableCmd::Reset { names } => tunable_reset(st, &names, out)?,
    }
    Ok(())
}

/// Validated against every explicit setting and persisted first: a bad
/// value, or one that cannot be remembered, changes nothing.
fn tunable_set(st: &mut State, assignments: &[String], out: &mut Out) -> Result<()> {
    let sets = crate::tunables_conf::parse_assignments(assignments, "tunable set")?;
    for (k, v) in &sets {
        if v.is_empty() {
            st.tunables.get(k)?;
            return Err(Error::invalid(format!("tunable set {}= has no value; `tarn tunable reset {}` returns it to its starting value", k, k)));
        }
    }
    let (t, notes) = st.tunable_settings.tunables_with(&sets)?;
    let mut kept = crate::tunables_conf::load()?;
    sets.iter().for_each(|(k, v)| crate::tunables_conf::upsert(&mut kept, k, v));
    crate::tunables_conf::save(&kept)?;
    let s = &mut st.tunable_settings;
    for (k, v) in &sets {
        crate::tunables_conf::upsert(&mut s.kept, k, v);
        s.refused.retain(|(n, _)| n != k);
        log(&format!("tunable {}={} (kept in '{}')", k, v, crate::tunables_conf::path().display()));
    }
    apply_live(st, &t, out);
    notes.iter().for_each(|n| out.line(n));
    Ok(())
}

/// Back to what a restart would give without these names' settings.
fn tunable_reset(st: &mut State, names: &[String], out: &mut Out) -> Result<()> {
    let names: Vec<&str> = names.iter().map(|n| n.trim()).collect();
    let mut s = st.tunable_settings.clone();
    for k in &names {
        st.tunables.get(k)?;
        s.kept.retain(|(n, _)| n != k);
        s.refused.retain(|(n, _)| n != k);
    }
    let (t, notes) = s.tunables_with(&[])?;
    let mut kept = crate::tunables_conf::load()?;
    kept.retain(|(n, _)| !names.contains(&n.as_str()));
    crate::tunables_conf::save(&kept)?;
    st.tunable_settings = s;
    for k in &names {
        log(&format!("tunable {} reset to {}", k, t.get(k)?));
    }
    apply_live(st, &t, out);
    notes.iter().for_each(|n| out.line(n));
    Ok(())
}

/// Makes `t` the daemon's tunables and sets what changed on every live pool.
fn apply_live(st: &mut State, t: &Tunables, out: &mut Out) {
    let changed: Vec<(&str, String)> = t.list().into_iter().filter(|(n, v, _)| st.tunables.get(n).ok().as_ref() != Some(v)).map(|(n, v, _)| (n, v)).collect();
    let sets: Vec<(&str, &str)> = changed.iter().map(|(n, v)| (*n, v.as_str())).collect();
    for (name, live) in &st.pools {
        if let Err(e) = live.pool.set_tunables(&sets) {
            out.warnings.push(format!("pool '{}': tunables not changed: {}", name, e.msg));
        }
    }
    st.tunables = t.clone();
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

/// Connections served at once; more are answered `503`. A scraper needs
/// one; the bound keeps idle or slow clients from taking threads without
/// limit.
const HTTP_CONNS_MAX: usize = 8;

/// Connections past `HTTP_CONNS_MAX` being answered `503` at once (each
/// reads the request first, so that closing does not reset the connection
/// before the client reads the answer); past both bounds a connection is
/// closed at once.
const HTTP_REFUSING_MAX: usize = 8;

/// How long a client has to send its whole request head (a scraper sends
/// it at once): an idle connection holds its slot no longer than this.
const HTTP_HEAD_WAIT: Duration = Duration::from_secs(2);

/// The same for a connection about to be refused.
const HTTP_REFUSE_WAIT: Duration = Duration::from_millis(500);

/// How long writing the answer may take.
const HTTP_WRITE_WAIT: Duration = Duration::from_secs(5);

/// Binds the Prometheus endpoint and serves it: an accept thread hands
/// each connection to a thread of its own, at most `HTTP_CONNS_MAX` at once
/// (one slow or idle client never delays a scrape, as one-at-a-time
/// serving did: three idle connections made a scrape wait 15 s), each with
/// `HTTP_HEAD_WAIT` to send its request; past that bound, `503`. No HTTP
/// crate: tiny_http, the small maintained one, spawns a thread per
/// connection without bound and sets no read timeout — the two things this
/// endpoint must control — and `GET /metrics` needs only the request line.
pub fn serve_metrics(d: Arc<Daemon>, addr: &str) -> Result<()> {
    let l = TcpListener::bind(addr).map_err(|e| Error::io(format!("binding the metrics endpoint '{}'", addr), e))?;
    log(&format!("metrics endpoint http://{}/metrics", l.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| addr.into())));
    std::thread::Builder::new()
        .name("tarn-metrics".into())
        .spawn(move || {
            let serving = Arc::new(AtomicUsize::new(0));
            let refusing = Arc::new(AtomicUsize::new(0));
            for conn in l.incoming().flatten() {
                let d = d.clone();
                let Err(conn) = on_bounded_thread(&serving, HTTP_CONNS_MAX, conn, move |c| answer_http(&d, c)) else { continue };
                // Past both bounds the connection is dropped: closed at once.
                let _ = on_bounded_thread(&refusing, HTTP_REFUSING_MAX, conn, refuse_http);
            }
        })
        .map_err(|e| Error::io("starting the metrics thread", e))?;
    Ok(())
}

/// Runs `f(conn)` on a thread of its own if fewer than `max` such threads
/// run (`slots` counts them); else hands `conn` back.
fn on_bounded_thread(slots: &Arc<AtomicUsize>, max: usize, conn: TcpStream, f: impl FnOnce(TcpStream) -> std::io::Result<()> + Send + 'static) -> std::result::Result<(), TcpStream> {
    if slots.fetch_add(1, Ordering::SeqCst) >= max {
        slots.fetch_sub(1, Ordering::SeqCst);
        return Err(conn);
    }
    let n = slots.clone();
    let spawned = std::thread::Builder::new().name("tarn-metrics-conn".into()).spawn(move || {
        if let Err(e) = f(conn) {
            log(&format!("metrics endpoint: {}", e));
        }
        n.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = spawned {
        slots.fetch_sub(1, Ordering::SeqCst);
        log(&format!("metrics endpoint: cannot start a thread: {}", e));
    }
    Ok(())
}

/// `503` to a connection past the bound, after reading its request (or
/// `HTTP_REFUSE_WAIT`).
fn refuse_http(mut c: TcpStream) -> std::io::Result<()> {
    c.set_write_timeout(Some(HTTP_WRITE_WAIT))?;
    read_head(&mut c, HTTP_REFUSE_WAIT)?;
    respond(c, "503 Service Unavailable", "too many connections to the tarn metrics endpoint\n")
}

/// The request head, read within `wait` in all; `None` if the client sent
/// none in time.
fn read_head(c: &mut TcpStream, wait: Duration) -> std::io::Result<Option<Vec<u8>>> {
    let deadline = std::time::Instant::now() + wait;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HTTP_HEAD_MAX_BYTES {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        c.set_read_timeout(Some(left))?;
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(head))
}

fn answer_http(d: &Daemon, mut c: TcpStream) -> std::io::Result<()> {
    c.set_write_timeout(Some(HTTP_WRITE_WAIT))?;
    let Some(head) = read_head(&mut c, HTTP_HEAD_WAIT)? else {
        return respond(c, "408 Request Timeout", "no request within 2 s\n");
    };
    let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => respond(c, "200 OK", &crate::observe::prometheus(&d.snapshots(), &arc_snapshot(&tarn_engine::arc::shared()))),
        ("GET", _) => respond(c, "404 Not Found", "tarn serves /metrics only\n"),
        _ => respond(c, "405 Method Not Allowed", "GET /metrics\n"),
    }
}

fn respond(mut c: TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let resp = format!(
        "HTTP/1.1 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        status,
        body.len(),
        body
    );
    c.write_all(resp.as_bytes())
}
