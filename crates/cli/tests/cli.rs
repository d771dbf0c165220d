//! The `tarn` command end to end on files: create, list, status, get/set,
//! export, import, destroy, bench, inspect — and every kind of bad input
//! getting one clear line on stderr and exit status 1, never a panic.

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
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(args)
            .env("TARN_CACHE", self.dir.join("tarn.cache"))
            .output()
            .expect("tarn runs")
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
    e.ok(&["pool", "create", "-o", "comment=hello", "-O", "compression=zstd", "tank", &a, &b, "--size", "128M"]);
    let list = e.ok(&["pool", "list", "-H", "-o", "name,health"]);
    assert_eq!(list.trim(), "tank\tONLINE");
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains(&a) && status.contains(&b) && status.contains("No known data errors"), "{}", status);
    let get = e.ok(&["pool", "get", "-H", "-o", "value", "comment", "tank"]);
    assert_eq!(get.trim(), "hello");
    e.ok(&["pool", "set", "comment=world", "tank"]);
    assert_eq!(e.ok(&["pool", "get", "-H", "-o", "value", "comment", "tank"]).trim(), "world");
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
    e.ok(&["pool", "create", "tank", &a, "--size", "128M"]);
    assert!(e.fails(&["pool", "create", "tank2", &a]).contains("part of active pool 'tank'"));
    assert!(e.fails(&["pool", "create", "tank", &e.path("c.img"), "--size", "128M"]).contains("already exists"));
    assert!(e.fails(&["pool", "status", "nosuch"]).contains("no such pool 'nosuch'"));
    assert!(e.fails(&["pool", "get", "bogus", "tank"]).contains("bogus"));
    assert!(e.fails(&["pool", "set", "size=1", "tank"]).contains("size"));
    assert!(e.fails(&["pool", "set", "comment", "tank"]).contains("PROP=VALUE"));
    assert!(e.fails(&["--tunable", "zfs_dirty_data_max=huge", "pool", "list"]).contains("zfs_dirty_data_max"));
    assert!(e.fails(&["--tunable", "zfs_vdev_write_gap_limit=4K", "pool", "list"]).contains("must be 0"));
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
    e.ok(&["pool", "create", "tank", &a, "--size", "256M"]);
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(["--tunable", "zfs_txg_timeout=1", "bench", "tank", "--workload", "seqwrite", "--size", "64M", "--device-bandwidth", "8M"])
            .env("TARN_CACHE", e.dir.join("tarn.cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut child = spawn();
    // Wait until the bench holds the pool (up to 30 s: a loaded machine
    // starts the child slowly). Our probe takes the lock for a moment too:
    // a bench that started just then fails to open, and is started again.
    let mut msg = String::new();
    for _ in 0..600 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if let Ok(Some(_)) = child.try_wait() {
            child = spawn();
            continue;
        }
        let o = e.run(&["pool", "set", "comment=x", "tank"]);
        if !o.status.success() {
            msg = String::from_utf8_lossy(&o.stderr).into_owned();
            break;
        }
    }
    assert!(msg.contains(&format!("held by process {}", child.id())), "{}", msg);
    // Looking is allowed while it is held.
    assert!(e.ok(&["pool", "list", "-H", "-o", "name"]).contains("tank"));
    let _ = child.kill();
    let _ = child.wait();
}
