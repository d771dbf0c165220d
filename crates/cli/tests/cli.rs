//! The `tarn` command end to end on files: create, list, status, get/set,
//! export, import, destroy, bench, inspect — and every kind of bad input
//! getting one clear line on stderr and exit status 1, never a panic.
//! Pool commands go through a daemon of the test's own (TARN_SOCKET in its
//! directory), started on first use and stopped when the test ends. Every
//! pool is created with `-m` inside the test's directory: the default
//! mountpoint (`/tank`) would mount on the host.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: PathBuf,
}

impl Env {
    fn new(name: &str) -> Env {
        let dir = std::env::temp_dir().join(format!("tarn-cli-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Env { dir }
    }
    fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.env("TARN_CACHE", self.dir.join("tarn.cache")).env("TARN_SOCKET", self.dir.join("tarn.sock")).env_remove("TARN_TEST_MEMFS");
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("tarn runs")
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "tarn {:?} failed: {}", args, String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    /// Runs a command that must fail cleanly; returns its error line.
    fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "tarn {:?} should exit 1; stderr: {}", args, err);
        assert!(err.starts_with("tarn: "), "error is one 'tarn: ' line: {}", err);
        assert!(!err.contains("panicked"), "tarn {:?} panicked: {}", args, err);
        err
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.run(&["daemon", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn exists(p: &str) -> bool {
    Path::new(p).exists()
}

#[test]
fn pool_lifecycle() {
    let e = Env::new("life");
    let (a, b) = (e.path("a.img"), e.path("b.img"));
    e.ok(&["pool", "create", "-m", &e.path("mnt"), "-o", "comment=hello", "-O", "compression=zstd", "tank", &a, &b, "--size", "128M"]);
    let list = e.ok(&["pool", "list", "-H", "-o", "name,health"]);
    assert_eq!(list.trim(), "tank\tONLINE");
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains(&a) && status.contains(&b) && status.contains("No known data errors"), "{}", status);
    let get = e.ok(&["pool", "get", "-H", "-o", "value", "comment", "tank"]);
    assert_eq!(get.trim(), "hello");
    e.ok(&["pool", "set", "comment=world", "tank"]);
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value", "comment", "tank"]).trim(), "world");
    // bench needs the pool to itself: stop the daemon holding it.
    assert!(e.fails(&["bench", "tank", "--size", "8M"]).contains("held by the tarn daemon"));
    e.ok(&["daemon", "stop"]);
    let bench = e.ok(&["bench", "tank", "--workload", "seqwrite", "--size", "8M", "--json"]);
    assert!(bench.contains("\"mib_per_s\""), "{}", bench);
    let small = e.ok(&["bench", "tank", "--workload", "smallobj", "--objects", "2000", "--json"]);
    assert!(small.contains("\"bytes_allocated_per_object\""), "{}", small);
    assert!(e.ok(&["inspect", "tank", "--verify"]).starts_with("verified txg"));
    e.ok(&["pool", "export", "tank"]);
    assert_eq!(e.ok(&["pool", "list", "-H"]).trim(), "");
    let found = e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap()]);
    assert!(found.contains("pool: tank") && found.contains("EXPORTED"), "{}", found);
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "tank"]);
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value", "comment", "tank"]).trim(), "world");
    e.ok(&["pool", "destroy", "tank"]);
    let err = e.fails(&["pool", "import", "-d", e.dir.to_str().unwrap(), "tank"]);
    assert!(err.contains("destroyed"), "{}", err);
    e.ok(&["pool", "import", "-f", "-d", e.dir.to_str().unwrap(), "tank"]);
}

#[test]
fn bad_input_gets_clear_errors() {
    let e = Env::new("bad");
    let a = e.path("a.img");
    assert!(e.fails(&["pool", "create", "1tank", &a, "--size", "128M"]).contains("must begin with a letter"));
    assert!(!exists(&a), "a failed create leaves no file behind");
    assert!(e.fails(&["pool", "create", "mirror", &a, "--size", "128M"]).contains("reserved"));
    assert!(e.fails(&["pool", "create", "tank", &a, "--size", "10M"]).contains("too small"));
    assert!(e.fails(&["pool", "create", "tank", "/nonexistent/dir/x.img"]).contains("/nonexistent/dir/x.img"));
    assert!(e.fails(&["pool", "create", "tank", &a, "--size", "lots"]).contains("bad size"));
    assert!(e.fails(&["pool", "create", "-O", "compression=gzip", "tank", &a, "--size", "128M"]).contains("compression"));
    assert!(e.fails(&["pool", "create", "-O", "recordsize=3000", "tank", &a, "--size", "128M"]).contains("recordsize"));
    assert!(e.fails(&["pool", "create", "-o", "ashift=20", "tank", &a, "--size", "128M"]).contains("ashift"));
    e.ok(&["pool", "create", "-m", &e.path("mnt"), "tank", &a, "--size", "128M"]);
    assert!(e.fails(&["pool", "create", "tank2", &a]).contains("part of active pool 'tank'"));
    assert!(e.fails(&["pool", "create", "tank", &e.path("c.img"), "--size", "128M"]).contains("already exists"));
    assert!(e.fails(&["pool", "status", "nosuch"]).contains("no such pool 'nosuch'"));
    assert!(e.fails(&["pool", "get", "bogus", "tank"]).contains("bogus"));
    assert!(e.fails(&["pool", "set", "size=1", "tank"]).contains("size"));
    assert!(e.fails(&["pool", "set", "comment", "tank"]).contains("PROP=VALUE"));
    assert!(e.fails(&["--tunable", "zfs_dirty_data_max=huge", "pool", "list"]).contains("zfs_dirty_data_max"));
    assert!(e.fails(&["--tunable", "zfs_vdev_write_gap_limit=4K", "pool", "list"]).contains("must be 0"));
    e.ok(&["daemon", "stop"]);
    assert!(e.fails(&["bench", "tank", "--workload", "nope"]).contains("unknown workload"));
    assert!(e.fails(&["bench", "tank", "--threads", "0"]).contains("--threads"));
    assert!(e.fails(&["inspect", "tank", "999999"]).contains("999999"));
    // A file that is not a pool device.
    std::fs::write(e.path("junk.img"), vec![0xA5u8; 70 << 20]).unwrap();
    let found = e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap()]);
    assert!(!found.contains("junk"), "{}", found);
    // Usage errors are clap's: exit 2.
    assert_eq!(e.run(&["pool", "frobnicate"]).status.code(), Some(2));
}

#[test]
fn a_held_pool_names_its_holder() {
    let e = Env::new("held");
    let a = e.path("a.img");
    e.ok(&["pool", "create", "-m", &e.path("mnt"), "tank", &a, "--size", "256M"]);
    e.ok(&["daemon", "stop"]);
    let mut child = e
        .cmd()
        .args(["--tunable", "zfs_txg_timeout=1", "bench", "tank", "--workload", "seqwrite", "--size", "64M", "--device-bandwidth", "8M"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the bench holds the pool (its lock shows in /proc/locks).
    let holds = |pid: u32| std::fs::read_to_string("/proc/locks").unwrap_or_default().lines().any(|l| l.contains("POSIX") && l.split_whitespace().nth(4) == Some(&pid.to_string()));
    for _ in 0..200 {
        if holds(child.id()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let mut msg = String::new();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let o = e.run(&["pool", "set", "comment=x", "tank"]);
        if !o.status.success() {
            msg = String::from_utf8_lossy(&o.stderr).into_owned();
            break;
        }
    }
    assert!(msg.contains(&format!("held by process {}", child.id())), "{}", msg);
    assert!(msg.contains("cannot be imported"), "the restarted daemon could not import it: {}", msg);
    // Looking is allowed while it is held.
    assert!(e.ok(&["inspect", "tank"]).contains("txg"));
    let _ = child.kill();
    let _ = child.wait();
}

/// `bench --simulate`: a small simulated run reads back through the
/// pool's checksums what it wrote (a wrong block fails the run), every
/// byte read reached the simulated devices, and the ratios are the
/// measured figures set against the layout's data devices.
#[test]
fn a_simulated_pool_is_benched_in_memory() {
    let e = Env::new("sim");
    let json = e.ok(&[
        "bench", "--simulate", "2x raidz2 4", "--workload", "seqread", "--size", "16M", "--recordsize", "128K", "--threads", "2", "--device-bandwidth", "400M", "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&json).unwrap();
    let s = &r["simulated"];
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {} in {}", v, json));
    assert_eq!(r["bytes"], 16 << 20, "{}", json);
    assert!(num(&r["device_read_bytes"]) >= (16 << 20) as f64, "every block read reached the devices: {}", json);
    assert_eq!(num(&r["arc_data_miss_pct"]), 100.0, "{}", json);
    assert_eq!((s["layout"].as_str(), s["devices"].as_u64(), s["data_devices"].as_u64()), (Some("2x raidz2 4"), Some(8), Some(4)), "{}", json);
    let data_mib = 4.0 * 400.0;
    assert_eq!(num(&s["data_mib_per_s"]), data_mib);
    let pct = num(&r["mib_per_s"]) * 100.0 / data_mib;
    assert!((num(&s["pct_of_data_bandwidth"]) - pct).abs() < 1e-6 * pct.max(1.0), "{}", json);
    assert!(num(&s["memory_bytes"]) >= (16 << 20) as f64, "{}", json);
    // Writing: a mirror's data device is one of its children.
    let json = e.ok(&["bench", "--simulate", "2x mirror 2", "--workload", "seqwrite", "--size", "8M", "--device-bandwidth", "400M", "--json"]);
    let r: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(r["simulated"]["data_devices"], 2, "{}", json);
    assert!(num(&r["device_write_bytes"]) >= (16 << 20) as f64, "both children wrote every byte: {}", json);
    assert!(!Path::new(&e.path("tarn.cache")).exists(), "a simulated pool is not recorded in the pool cache");
}

#[test]
fn simulated_bench_bad_input_gets_clear_errors() {
    let e = Env::new("simbad");
    let sim = |layout: &str, extra: &[&str]| {
        let mut args = vec!["bench", "--simulate", layout];
        args.extend_from_slice(extra);
        e.fails(&args)
    };
    for (layout, says) in [
        ("raid5 6", "unknown vdev type 'raid5'"),
        ("raidz2 2", "raidz2 needs at least 3 devices, 2 given"),
        ("raidz2", "'raidz2' needs a device count"),
        ("0x mirror 2", "a group repeats 1 to 256 times"),
        ("100x mirror 3", "300 devices; at most 256"),
        ("", "no vdevs"),
    ] {
        let err = sim(layout, &[]);
        assert!(err.contains("--simulate") && err.contains(says), "{}: {}", layout, err);
    }
    assert!(sim("2x raidz2 12", &["--device-bandwidth", "0"]).contains("--device-bandwidth"));
    assert!(sim("2x raidz2 12", &["--device-bandwidth", "1K"]).contains("--device-bandwidth"));
    assert!(sim("2x raidz2 12", &["--device-bandwidth", "9000T"]).contains("--device-bandwidth"));
    assert!(sim("2x raidz2 12", &["--device-iops", "0"]).contains("--device-iops"));
    assert!(sim("2x raidz2 12", &["--device-latency", "5 parsecs"]).contains("--device-latency"));
    assert!(sim("2x raidz2 12", &["--size", "100T"]).contains("--size 100T"));
    assert!(sim("2x raidz2 12", &["--cache-device", &e.path("c.img")]).contains("--cache-device"));
    assert!(sim("mirror 2 raidz2 4", &[]).contains("mismatched replication level"));
    // A pool and a simulation at once, or neither: clap's usage errors.
    assert_eq!(e.run(&["bench", "tank", "--simulate", "mirror 2"]).status.code(), Some(2));
    assert_eq!(e.run(&["bench"]).status.code(), Some(2));
}
