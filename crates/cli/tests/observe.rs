//! Issue 4, "observability is honest": through the real daemon, a known
//! workload (the hidden `pool write-test`, which writes N incompressible
//! bytes inside the daemon and syncs) must show up as at least N bytes in
//! `pool iostat --json`, in the dirty bytes of `pool txgs --json`, in the
//! ARC counters of `arcstat --json` on a read-back, and as the very same
//! figure on the Prometheus endpoint (which `promtool check metrics`
//! accepts), the L2ARC's counters included. Tunables set with `tunable
//! set` are live and visible, and kept across daemon restarts; cache
//! devices show in `pool status` and survive a daemon restart; wrong
//! arguments get one clear line and exit 1.
//!
//! Pools are created with `-m none`, so no FUSE mount is needed. Each test
//! has its own directory, socket and cache file.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

struct Env {
    dir: PathBuf,
}

impl Env {
    fn new(name: &str) -> Env {
        let dir = std::env::temp_dir().join(format!("tarn-observe-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Env { dir }
    }
    fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.env("TARN_CACHE", self.dir.join("tarn.cache")).env("TARN_SOCKET", self.dir.join("tarn.sock"));
        c.args(args).output().expect("tarn runs")
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let log = std::fs::read_to_string(self.dir.join("tarn.log")).unwrap_or_default();
        assert!(o.status.success(), "tarn {:?} failed: {}\nlog:\n{}", args, String::from_utf8_lossy(&o.stderr), log);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("tarn {:?}: not JSON ({}): {}", args, e, out))
    }
    fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "tarn {:?} should exit 1; stderr: {}", args, err);
        assert!(err.starts_with("tarn: ") && err.trim_end().lines().count() == 1, "error is one 'tarn: ' line: {}", err);
        assert!(!err.contains("panicked"), "{}", err);
        err
    }
    /// A pool on one 256 MiB file, not mounted.
    fn create(&self, name: &str) {
        self.ok(&["pool", "create", "-m", "none", "-O", "compression=off", name, &self.path(&format!("{}.img", name)), "--size", "256M"]);
    }
    /// `pool iostat --json POOL` since import: the pool's object.
    fn iostat(&self, pool: &str) -> Value {
        self.json(&["pool", "iostat", "--json", pool])["pools"][0].clone()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.run(&["daemon", "stop"]);
        if let Some(pid) = std::fs::read_to_string(self.dir.join("tarn.pid")).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
            // SAFETY: signalling a process id read from our own test's pid file.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET /metrics`: (status line and headers, body).
fn scrape(port: u16) -> (String, String) {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the metrics endpoint answers");
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut resp = String::new();
    c.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("a complete HTTP response");
    (head.to_string(), body.to_string())
}

fn prom_value(body: &str, metric: &str, pool: &str) -> u64 {
    let prefix = format!("{}{{pool=\"{}\"", metric, pool);
    let line = body.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {} in:\n{}", prefix, body));
    line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap() as u64
}

const N: u64 = 24 << 20;

#[test]
fn a_known_workload_shows_in_every_view() {
    let e = Env::new("workload");
    let port = free_port();
    e.ok(&["daemon", "--metrics", &format!("127.0.0.1:{}", port)]);
    e.create("tank");
    let before = e.iostat("tank");
    let txg_before = e.json(&["pool", "txgs", "--json", "tank"]).as_array().unwrap().iter().map(|r| r["txg"].as_u64().unwrap()).max().unwrap_or(0);
    let arc_before = e.json(&["arcstat", "--json", "-f", "read,hits,miss"]);
    e.ok(&["pool", "write-test", "tank", "--bytes", "24M", "--bs", "128K", "--read-back"]);
    let after = e.iostat("tank");

    // iostat: at least N bytes written, in a plausible number of writes
    // (no device write is larger than the 16 MiB aggregation limit).
    let wbytes = after["write_bytes"].as_u64().unwrap() - before["write_bytes"].as_u64().unwrap();
    let wops = after["write_ops"].as_u64().unwrap() - before["write_ops"].as_u64().unwrap();
    assert!(wbytes >= N, "iostat counted {} bytes written for a {} byte workload", wbytes, N);
    assert!(wops >= wbytes / (16 << 20) && wops <= wbytes / 512, "{} write ops for {} bytes", wops, wbytes);

    // txgs: the workload's txgs held at least N dirty bytes between them.
    let txgs = e.json(&["pool", "txgs", "--json", "tank"]);
    let dirty: u64 = txgs.as_array().unwrap().iter().filter(|r| r["txg"].as_u64().unwrap() > txg_before).map(|r| r["dirty_bytes"].as_u64().unwrap()).sum();
    assert!(dirty >= N, "txgs after {} held {} dirty bytes: {}", txg_before, dirty, txgs);

    // arcstat: the read-back moved the ARC's read counter (first report = since import).
    let arc_after = e.json(&["arcstat", "--json", "-f", "read,hits,miss"]);
    let reads = arc_after["read"].as_u64().unwrap() - arc_before["read"].as_u64().unwrap();
    assert!(reads >= N / (128 << 10), "the read-back of {} blocks moved arcstat's read by {}", N / (128 << 10), reads);
    assert_eq!(arc_after["read"], arc_after["hits"].as_u64().unwrap() + arc_after["miss"].as_u64().unwrap());

    // Prometheus: the same figure as iostat, once the pool is quiet (the
    // write-test's frees sync in the next txg).
    let mut matched = false;
    for _ in 0..50 {
        let a = e.iostat("tank")["write_bytes"].as_u64().unwrap();
        let (head, body) = scrape(port);
        let b = e.iostat("tank")["write_bytes"].as_u64().unwrap();
        if a == b {
            assert!(head.starts_with("HTTP/1.1 200"), "{}", head);
            assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{}", head);
            assert_eq!(prom_value(&body, "tarn_vdev_write_bytes_total", "tank"), a, "Prometheus and iostat disagree");
            promtool_check(&body);
            matched = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(matched, "the pool never went quiet long enough to compare");
}

fn promtool_check(text: &str) {
    use std::process::Stdio;
    let child = Command::new("promtool").args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let Ok(mut child) = child else {
        eprintln!("promtool not installed: skipping its check of the endpoint (apt-get install prometheus)");
        return;
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let msg = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && msg.trim().is_empty(), "promtool check metrics: {}", msg);
}

#[test]
fn l2arc_counters_show_in_arcstat_and_prometheus() {
    let e = Env::new("l2");
    let port = free_port();
    let metrics = format!("127.0.0.1:{}", port);
    e.ok(&["daemon", "--metrics", &metrics]);
    e.create("tank");
    let cache = e.path("cache.img");
    std::fs::File::create(&cache).unwrap().set_len(64 << 20).unwrap();
    e.ok(&["pool", "add", "tank", "cache", &cache]);
    // The feed thread wakes every second and takes blocks from the ARC's
    // eviction end; the read-back puts the written blocks there.
    let fed = (0..40).any(|_| {
        e.ok(&["pool", "write-test", "tank", "--bytes", "4M", "--bs", "128K", "--read-back"]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        e.json(&["arcstat", "--json", "-f", "l2feeds"])["l2feeds"].as_u64().unwrap() > 0
    });
    assert!(fed, "the L2ARC was never fed");
    // Both views count the same feeds and bytes once the feed is quiet.
    let mut matched = false;
    for _ in 0..50 {
        let a = e.json(&["arcstat", "--json", "-f", "l2feeds,l2rebuilt"]);
        let (_, body) = scrape(port);
        let b = e.json(&["arcstat", "--json", "-f", "l2feeds,l2rebuilt"]);
        if a == b {
            assert_eq!(prom_value(&body, "tarn_l2arc_feeds_total", "tank"), a["l2feeds"].as_u64().unwrap());
            assert!(prom_value(&body, "tarn_l2arc_writes_total", "tank") >= 1);
            assert!(prom_value(&body, "tarn_l2arc_write_bytes_total", "tank") >= 4096);
            assert_eq!(prom_value(&body, "tarn_l2arc_rebuild_success_total", "tank"), 0, "nothing to rebuild yet");
            promtool_check(&body);
            matched = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(matched, "the feed never went quiet long enough to compare");
    // After a restart the index is rebuilt from the device's log blocks.
    e.ok(&["daemon", "stop"]);
    e.ok(&["daemon", "--metrics", &metrics]);
    e.ok(&["pool", "status", "tank"]);
    let (_, body) = scrape(port);
    assert_eq!(prom_value(&body, "tarn_l2arc_rebuild_success_total", "tank"), 1, "{}", body);
    assert!(prom_value(&body, "tarn_l2arc_rebuild_log_blocks_total", "tank") >= 1);
    let rebuilt = prom_value(&body, "tarn_l2arc_rebuild_blocks_total", "tank");
    let a = e.json(&["arcstat", "--json", "-f", "l2rebuilt,l2size,l2asize"]);
    assert_eq!(a["l2rebuilt"].as_u64(), Some(rebuilt), "{}", a);
    promtool_check(&body);
}

#[test]
fn tunables_set_live_are_seen_everywhere() {
    let e = Env::new("tunables");
    e.create("tank");
    e.ok(&["tunable", "set", "zfs_dirty_data_max=64M"]);
    assert_eq!(e.ok(&["tunable", "get", "zfs_dirty_data_max"]).trim(), (64u64 << 20).to_string());
    assert!(e.ok(&["tunable", "list"]).lines().any(|l| l.starts_with("zfs_dirty_data_max ") && l.contains(&(64u64 << 20).to_string())));
    let x = e.json(&["pool", "explain", "--json", "tank", "0.2"]);
    assert_eq!(x["throttle"]["dirty_max"].as_u64(), Some(64 << 20), "the live pool: {}", x);
    // A pool the daemon creates later gets the daemon's value too.
    e.create("later");
    let x = e.json(&["pool", "explain", "--json", "later", "0.2"]);
    assert_eq!(x["throttle"]["dirty_max"].as_u64(), Some(64 << 20), "a later pool: {}", x);
}

#[test]
fn tunables_set_are_kept_across_daemon_restarts() {
    let e = Env::new("persist");
    e.create("tank");
    let dirty_max = |e: &Env| e.json(&["pool", "explain", "--json", "tank", "0.2"])["throttle"]["dirty_max"].as_u64().unwrap();
    let default = e.ok(&["tunable", "get", "zfs_dirty_data_max"]).trim().to_string();
    e.ok(&["tunable", "set", "zfs_dirty_data_max=64M"]);
    e.ok(&["tunable", "set", "zfs_txg_timeout=7"]);
    e.ok(&["daemon", "stop"]);
    let kept = std::fs::read_to_string(e.path("tarn.tunables")).expect("kept next to the cache file");
    assert!(kept.lines().any(|l| l == "zfs_dirty_data_max=64M") && kept.lines().any(|l| l == "zfs_txg_timeout=7"), "{}", kept);
    // Without a daemon, `get` shows what one would start with.
    assert_eq!(e.ok(&["tunable", "get", "zfs_dirty_data_max"]).trim(), (64u64 << 20).to_string());
    // A new daemon (started by the first command) applies them to the
    // pools it imports.
    assert_eq!(dirty_max(&e), 64 << 20, "the pool runs with the kept value");
    assert_eq!(e.ok(&["tunable", "get", "zfs_dirty_data_max"]).trim(), (64u64 << 20).to_string());
    assert_eq!(e.ok(&["tunable", "get", "zfs_txg_timeout"]).trim(), "7");
    // Reset: the starting value again, live, and forgotten.
    e.ok(&["tunable", "reset", "zfs_dirty_data_max"]);
    assert_eq!(e.ok(&["tunable", "get", "zfs_dirty_data_max"]).trim(), default);
    assert_eq!(dirty_max(&e).to_string(), default, "reset is live");
    e.ok(&["daemon", "stop"]);
    assert_eq!(dirty_max(&e).to_string(), default, "and stays reset after a restart");
    assert_eq!(e.ok(&["tunable", "get", "zfs_txg_timeout"]).trim(), "7", "the other setting is still kept");
    // A daemon's own --tunable wins over a kept value.
    e.ok(&["daemon", "stop"]);
    e.ok(&["--tunable", "zfs_txg_timeout=9", "daemon"]);
    assert_eq!(e.ok(&["tunable", "get", "zfs_txg_timeout"]).trim(), "9");
    // A damaged line is skipped with a note in the log, not fatal.
    e.ok(&["daemon", "stop"]);
    std::fs::write(e.path("tarn.tunables"), "zfs_txg_timeout=7\nzfs_bogus=1\nzfs_arc_max=lots\n").unwrap();
    assert_eq!(e.ok(&["tunable", "get", "zfs_txg_timeout"]).trim(), "7");
    assert_eq!(e.json(&["pool", "explain", "--json", "tank", "0.2"])["throttle"]["dirty_max"].as_u64().map(|v| v.to_string()), Some(default.clone()));
    let log = std::fs::read_to_string(e.path("tarn.log")).unwrap_or_default();
    assert!(log.contains("zfs_bogus=1 not applied") && log.contains("zfs_arc_max=lots not applied"), "{}", log);
    // Wrong uses get one line.
    assert!(e.fails(&["tunable", "set", "zfs_txg_timeout="]).contains("tunable reset zfs_txg_timeout"));
    assert!(e.fails(&["tunable", "reset", "zfs_bogus"]).contains("unknown tunable 'zfs_bogus'"));
}

#[test]
fn cache_devices_show_and_survive_a_restart() {
    let e = Env::new("cache");
    e.create("tank");
    let cache = e.path("cache.img");
    std::fs::File::create(&cache).unwrap().set_len(64 << 20).unwrap();
    e.ok(&["pool", "add", "tank", "cache", &cache]);
    let shows = |s: &str| s.contains("\ncache:") && s.contains(&cache);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(shows(&st), "{}", st);
    e.ok(&["daemon", "stop"]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(shows(&st), "after a restart: {}", st);
    let j = e.json(&["pool", "status", "--json", "tank"]);
    assert_eq!(j[0]["cache"][0]["path"].as_str(), Some(cache.as_str()), "{}", j);
    e.ok(&["pool", "remove", "tank", &cache]);
    let st = e.ok(&["pool", "status", "tank"]);
    assert!(!st.contains("cache:"), "{}", st);
}

#[test]
fn intervals_report_count_times() {
    let e = Env::new("intervals");
    e.create("tank");
    let out = e.ok(&["pool", "iostat", "--json", "tank", "0.2", "3"]);
    let reports: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reports.len(), 3, "{}", out);
    assert_eq!(reports[0]["since_import"], true);
    assert!(reports[1]["seconds"].as_f64().unwrap() >= 0.2, "{}", out);
    let skipped = e.ok(&["pool", "iostat", "-y", "--json", "tank", "0.2", "2"]);
    assert!(skipped.lines().all(|l| l.contains("\"since_import\":false")), "{}", skipped);
    let arc = e.ok(&["arcstat", "0.2", "2"]);
    assert_eq!(arc.lines().count(), 3, "a header and two rows: {}", arc);
    let table = e.ok(&["pool", "iostat", "-v", "-l", "-q", "tank"]);
    assert!(table.contains("asyncq_w_pend") && table.contains("tank.img"), "{}", table);
}

#[test]
fn wrong_arguments_get_one_line() {
    let e = Env::new("errors");
    e.create("tank");
    assert!(e.fails(&["pool", "iostat", "nope"]).contains("'nope'"));
    assert!(e.fails(&["pool", "txgs", "nope"]).contains("'nope'"));
    assert!(e.fails(&["pool", "explain", "nope"]).contains("'nope'"));
    assert!(e.fails(&["pool", "iostat", "tank", "abc"]).contains("bad interval"));
    assert!(e.fails(&["pool", "iostat", "tank", "1", "0"]).contains("bad count"));
    assert!(e.fails(&["arcstat", "0"]).contains("bad interval"));
    assert!(e.fails(&["arcstat", "-f", "read,bogus"]).contains("unknown arcstat field 'bogus'"));
    assert!(e.fails(&["tunable", "get", "zfs_bogus"]).contains("unknown tunable 'zfs_bogus'"));
    assert!(e.fails(&["tunable", "set", "zfs_bogus=1"]).contains("unknown tunable 'zfs_bogus'"));
    assert!(e.fails(&["tunable", "set", "zfs_dirty_data_max=lots"]).contains("bad value 'lots'"));
    assert!(e.fails(&["tunable", "set", "zfs_dirty_data_max"]).contains("NAME=VALUE"));
    assert!(e.fails(&["pool", "add", "tank", "log", &e.path("x")]).contains(&e.path("x")));
    assert!(e.fails(&["pool", "remove", "tank", &e.path("x")]).contains("not a cache device"));
    assert!(e.fails(&["pool", "write-test", "tank", "--bytes", "0"]).contains("bad --bytes"));
}

/// A value as `tunable list` shows it ("64M", "10000"), as a number.
fn shown_value(s: &str) -> u128 {
    let (num, shift) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 10),
        Some('M') => (&s[..s.len() - 1], 20),
        Some('G') => (&s[..s.len() - 1], 30),
        Some('T') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.parse::<u128>().unwrap_or_else(|_| panic!("not a value: '{}'", s)) << shift
}

impl Env {
    /// Like `ok`, but fails the test instead of waiting past `secs` (the
    /// command is killed).
    fn ok_within(&self, args: &[&str], secs: u64) -> String {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.env("TARN_CACHE", self.dir.join("tarn.cache")).env("TARN_SOCKET", self.dir.join("tarn.sock")).args(args);
        let o = common::within(c, secs);
        assert!(o.status.success(), "tarn {:?} failed: {}", args, String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    fn get(&self, tunable: &str) -> String {
        self.ok(&["tunable", "get", tunable]).trim().to_string()
    }
}

/// Issue 11 item 10: `tunable set zfs_vdev_async_write_max_active=0` (and
/// `zfs_vdev_max_active=0`, `zfs_vdev_async_write_min_active=0`,
/// `zfs_vdev_sync_read_max_active=0`) was accepted, kept, and the next
/// write hung for good. Every tunable now refuses 0 where its range (the
/// RANGE column of `tunable list`) excludes it, one past its maximum, a
/// negative number and garbage, with one line naming it and its range —
/// and nothing changes: not the live values, not the kept file.
#[test]
fn tunables_out_of_range_are_refused_and_change_nothing() {
    let e = Env::new("ranges");
    e.create("tank");
    for bad in ["zfs_vdev_async_write_max_active=0", "zfs_vdev_max_active=0", "zfs_vdev_async_write_min_active=0", "zfs_vdev_sync_read_max_active=0"] {
        let err = e.fails(&["tunable", "set", bad]);
        let name = bad.split('=').next().unwrap();
        assert!(err.contains(&format!("'{}'", name)) && err.contains("range 1 to 10000") && err.contains("hang"), "{}", err);
    }
    let list = e.ok(&["tunable", "list"]);
    assert!(list.starts_with("NAME") && list.lines().next().unwrap().contains("RANGE"), "{}", list);
    let mut checked = 0;
    for line in list.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (name, range) = (cols[0], cols[2]);
        let (min, max) = range.split_once('-').unwrap_or_else(|| panic!("no range in '{}'", line));
        let mut bad = vec!["-1".to_string(), "lots".to_string(), "2.5".to_string(), (shown_value(max) + 1).to_string()];
        if shown_value(min) > 0 {
            bad.push("0".to_string());
        }
        for v in bad {
            let err = e.fails(&["tunable", "set", &format!("{}={}", name, v)]);
            assert!(err.contains(&format!("'{}'", name)) && err.contains(&format!("{} to {}", min, max)), "{}={}: {}", name, v, err);
        }
        checked += 1;
    }
    assert!(checked >= 40, "{} tunables listed", checked);
    assert_eq!(e.ok(&["tunable", "list"]), list, "a refused value changes nothing");
    assert!(!std::path::Path::new(&e.path("tarn.tunables")).exists(), "and nothing is kept");
    e.ok_within(&["pool", "write-test", "tank", "--bytes", "8M"], 60);
}

/// Issue 11 item 10: a value that stops I/O, already in the kept tunables
/// file (from before the ranges, or edited by hand), made the daemon hang
/// at the first write after every start. It is refused at start: the
/// default stays, the log and `tunable list` say so, writes complete;
/// `tunable reset` drops the line.
#[test]
fn a_kept_tunable_that_would_hang_the_pool_is_refused_at_start() {
    let e = Env::new("keptbad");
    e.create("tank");
    let default = e.get("zfs_vdev_async_write_max_active");
    e.ok(&["daemon", "stop"]);
    std::fs::write(e.path("tarn.tunables"), "zfs_vdev_async_write_max_active=0\nzfs_txg_timeout=7\n").unwrap();
    e.ok_within(&["pool", "write-test", "tank", "--bytes", "8M"], 60);
    assert_eq!(e.get("zfs_vdev_async_write_max_active"), default);
    assert_eq!(e.get("zfs_txg_timeout"), "7", "the good line applies");
    let o = e.run(&["tunable", "list"]);
    let warn = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success() && warn.contains("zfs_vdev_async_write_max_active=0 not applied") && warn.contains(&format!("stays {}", default)), "{}", warn);
    let log = std::fs::read_to_string(e.path("tarn.log")).unwrap_or_default();
    assert!(log.contains("zfs_vdev_async_write_max_active=0 not applied") && log.contains("hang"), "{}", log);
    e.ok(&["tunable", "reset", "zfs_vdev_async_write_max_active"]);
    let kept = std::fs::read_to_string(e.path("tarn.tunables")).unwrap();
    assert_eq!(kept.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>(), vec!["zfs_txg_timeout=7"]);
    let o = e.run(&["tunable", "list"]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Issue 11: `tunable reset zfs_arc_min` before `zfs_arc_max` failed on
/// the ordering check (the default zfs_arc_min exceeded the zfs_arc_max
/// still set). Reset works in either order — a tunable nobody set follows
/// its set partner, and a restart computes the same — and a pair valid
/// only together is set in one command.
#[test]
fn ordered_tunables_reset_in_either_order_and_set_together() {
    let e = Env::new("pairs");
    e.create("tank");
    let list = e.ok(&["tunable", "list"]);
    assert!(e.get("zfs_arc_min").parse::<u64>().unwrap() > 16 << 20, "the default zfs_arc_min is at least 32M");
    for order in [["zfs_arc_min", "zfs_arc_max"], ["zfs_arc_max", "zfs_arc_min"]] {
        e.ok(&["tunable", "set", "zfs_arc_min=8M"]);
        e.ok(&["tunable", "set", "zfs_arc_max=16M"]);
        e.ok(&["tunable", "reset", order[0]]);
        let between = (e.get("zfs_arc_min"), e.get("zfs_arc_max"));
        assert!(between.0.parse::<u64>().unwrap() <= between.1.parse::<u64>().unwrap(), "{:?}", between);
        e.ok(&["daemon", "stop"]);
        assert_eq!((e.get("zfs_arc_min"), e.get("zfs_arc_max")), between, "a restart computes the same");
        e.ok(&["tunable", "reset", order[1]]);
        assert_eq!(e.ok(&["tunable", "list"]), list, "both reset after {:?}", order);
    }
    e.ok(&["tunable", "set", "zfs_arc_min=8M", "zfs_arc_max=16M"]);
    let err = e.fails(&["tunable", "set", "zfs_arc_min=32M"]);
    assert!(err.contains("zfs_arc_min (32M) must not exceed zfs_arc_max (16M)"), "{}", err);
    e.ok(&["tunable", "set", "zfs_arc_min=32M", "zfs_arc_max=64M"]);
    assert_eq!((e.get("zfs_arc_min"), e.get("zfs_arc_max")), ((32u64 << 20).to_string(), (64u64 << 20).to_string()));
    assert_eq!(e.json(&["arcstat", "--json", "-f", "cmax"])["cmax"].as_str(), Some("64.0M"), "live on the pool");
    let kept = std::fs::read_to_string(e.path("tarn.tunables")).unwrap();
    assert!(kept.lines().any(|l| l == "zfs_arc_min=32M") && kept.lines().any(|l| l == "zfs_arc_max=64M"), "{}", kept);
    e.ok(&["tunable", "reset", "zfs_arc_max", "zfs_arc_min"]);
    assert_eq!(e.ok(&["tunable", "list"]), list);
}

/// Issue 11: the metrics endpoint served one connection at a time, each
/// allowed 5 s to send its request, so three idle connections made a scrape
/// wait 15 s (Prometheus gives up at 10 s). Connections are served at once,
/// each idle one answered `408` and closed after 2 s; past the bound of
/// connections served at once, `503` comes at once — never a wait.
#[test]
fn idle_connections_do_not_delay_a_scrape() {
    let e = Env::new("idle");
    e.create("tank");
    let port = free_port();
    e.ok(&["daemon", "stop"]);
    e.ok(&["daemon", "--metrics", &format!("127.0.0.1:{}", port)]);
    let connect = || std::net::TcpStream::connect(("127.0.0.1", port)).expect("the endpoint accepts");
    let (_, body) = scrape(port);
    assert!(body.contains("pool=\"tank\""), "{}", body);
    let mut idle: Vec<std::net::TcpStream> = (0..3).map(|_| connect()).collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t = std::time::Instant::now();
    let (head, body) = scrape(port);
    let took = t.elapsed();
    assert!(head.starts_with("HTTP/1.1 200") && body.contains("pool=\"tank\""), "{}", head);
    assert!(took < std::time::Duration::from_secs(1), "a scrape behind 3 idle connections took {:?}", took);
    for c in &mut idle {
        let mut answer = String::new();
        c.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "an idle connection is closed: {}", answer);
    }
    idle.clear();
    // Their threads free their slots just after closing: a slot still
    // held would send part of the flood to the refusing threads, which
    // end after 0.5 s, and the scrape to a slot freed meanwhile.
    std::thread::sleep(std::time::Duration::from_millis(200));
    // A flood of idle connections: what is past the bound is refused at
    // once, and once the idle ones time out, scrapes are served again.
    let _flood: Vec<std::net::TcpStream> = (0..12).map(|_| connect()).collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t = std::time::Instant::now();
    let (head, _) = scrape(port);
    assert!(head.starts_with("HTTP/1.1 503") && t.elapsed() < std::time::Duration::from_secs(1), "{} after {:?}", head, t.elapsed());
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (head, _) = scrape(port);
    assert!(head.starts_with("HTTP/1.1 200"), "{}", head);
}

/// A guid as a reader that parses JSON numbers as doubles sees it
/// (JavaScript, jq, Python's json with parse_int=float).
fn guid_as_f64_reader_sees(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a guid: {}", s)),
        Value::Number(n) => n.as_f64().expect("a number") as u64,
        other => panic!("not a guid: {}", other),
    }
}

/// Issue 11: guids were JSON numbers, above 2^53 nearly always, so every
/// JSON reader that parses numbers as doubles read another guid. They are
/// strings in every JSON output, as in OpenZFS 2.3's, and equal to what
/// the text output (`-p`) prints: pool list, status (and its cache
/// devices), import's listing, and the pool cache file.
#[test]
fn guids_in_json_are_exact_for_every_reader() {
    let e = Env::new("guids");
    e.create("tank");
    let cache = e.path("cache.img");
    std::fs::File::create(&cache).unwrap().set_len(64 << 20).unwrap();
    e.ok(&["pool", "add", "tank", "cache", &cache]);
    let guid: u64 = e.ok(&["pool", "get", "-H", "-p", "-o", "value", "guid", "tank"]).trim().parse().unwrap();
    assert_eq!(e.ok(&["pool", "list", "-H", "-p", "-o", "guid", "tank"]).trim(), guid.to_string());
    let list = e.json(&["pool", "list", "--json"]);
    assert!(list[0]["guid"].is_string(), "{}", list);
    assert_eq!(guid_as_f64_reader_sees(&list[0]["guid"]), guid);
    let status = e.json(&["pool", "status", "--json", "tank"]);
    assert_eq!(guid_as_f64_reader_sees(&status[0]["guid"]), guid);
    let text = e.ok(&["pool", "status", "tank"]);
    let cache_guid: u64 = text.lines().find(|l| l.contains(&cache)).and_then(|l| l.split_whitespace().last()).unwrap().parse().unwrap();
    assert!(status[0]["cache"][0]["guid"].is_string(), "{}", status);
    assert_eq!(guid_as_f64_reader_sees(&status[0]["cache"][0]["guid"]), cache_guid);
    let file: Value = serde_json::from_slice(&std::fs::read(e.path("tarn.cache")).unwrap()).unwrap();
    assert_eq!(guid_as_f64_reader_sees(&file["pools"][0]["guid"]), guid, "the cache file: {}", file);
    e.ok(&["pool", "export", "tank"]);
    let found = e.json(&["pool", "import", "--json", "-d", &e.path("tank.img")]);
    assert_eq!(guid_as_f64_reader_sees(&found[0]["guid"]), guid, "{}", found);
    let listed = e.ok(&["pool", "import", "-d", &e.path("tank.img")]);
    assert!(listed.contains(&format!("id: {}", guid)), "{}", listed);
    // Import by guid, and a cache file from before (a number) still reads.
    e.ok(&["pool", "import", "-d", &e.path("tank.img"), &guid.to_string()]);
    e.ok(&["daemon", "stop"]);
    let text = std::fs::read_to_string(e.path("tarn.cache")).unwrap();
    std::fs::write(e.path("tarn.cache"), text.replace(&format!("\"{}\"", guid), &guid.to_string())).unwrap();
    assert_eq!(guid_as_f64_reader_sees(&e.json(&["pool", "list", "--json"])[0]["guid"]), guid);
}
