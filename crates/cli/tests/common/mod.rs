//! What the daemon tests share: a private daemon per test (own directory,
//! socket and cache file; the `TARN_TEST_MEMFS` hook, or with `Env::real`
//! the POSIX layer on the pool; with `Env::private` inside a mount
//! namespace of its own), and mount helpers.
//!
//! `TARN_TEST_BIN=/path/to/tarn` runs the tests against another build of
//! the command (to see a regression test fail on the code before its fix).

#![allow(dead_code)]

pub mod mounted;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Env {
    pub dir: PathBuf,
    /// Datasets served from memory (the `TARN_TEST_MEMFS` hook).
    memfs: bool,
    /// The process holding the test's private mount namespace (`Env::private`).
    ns: Option<std::process::Child>,
    /// Every command runs in this directory (relative device paths), when set.
    pub cwd: Option<PathBuf>,
}

/// The `tarn` command under test.
pub fn tarn_bin() -> PathBuf {
    std::env::var_os("TARN_TEST_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tarn")))
}

impl Env {
    /// A daemon serving datasets from memory (the test hook).
    pub fn new(name: &str) -> Option<Env> {
        if !cfg!(debug_assertions) {
            eprintln!("skipping {}: the TARN_TEST_MEMFS hook exists in debug builds only", name);
            return None;
        }
        Env::with(name, true)
    }
    /// A daemon serving datasets from their pools (the POSIX layer).
    pub fn real(name: &str) -> Option<Env> {
        Env::with(name, false)
    }
    /// A daemon for tests that mount nothing (pools created with `-m none`):
    /// runs without /dev/fuse.
    pub fn plain(name: &str) -> Env {
        Env::in_dir(name, false)
    }
    fn with(name: &str, memfs: bool) -> Option<Env> {
        if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
            eprintln!("skipping {}: /dev/fuse cannot be opened ({})", name, e);
            return None;
        }
        Some(Env::in_dir(name, memfs))
    }
    fn in_dir(name: &str, memfs: bool) -> Env {
        let dir = std::env::temp_dir().join(format!("tarn-daemon-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Env { dir, memfs, ns: None, cwd: None }
    }

    /// As `new` (`memfs`) or `real`, with the daemon in a private mount
    /// namespace of the test's own (`unshare -m --propagation private`):
    /// what it mounts, and what the test mounts there (a tmpfs to mount
    /// over), never reaches the host, and goes with the namespace when the
    /// test ends, passed or failed. Commands enter it with `nsenter`; the
    /// test reaches paths through the namespace's root ([`Env::at`]).
    /// `None` (with the reason printed) where that is unavailable.
    pub fn private(name: &str, memfs: bool) -> Option<Env> {
        if memfs && !cfg!(debug_assertions) {
            eprintln!("skipping {}: the TARN_TEST_MEMFS hook exists in debug builds only", name);
            return None;
        }
        let mut e = Env::with(name, memfs)?;
        let mut holder = Command::new("unshare");
        holder.args(["-m", "--propagation", "private", "sleep", "100000"]).stdin(std::process::Stdio::null());
        // SAFETY: prctl is async-signal-safe. The holder dies with the test
        // thread that made it, even if the test process is killed.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut holder, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = holder.spawn();
        let Ok(child) = child else {
            eprintln!("skipping {}: unshare cannot be run", name);
            return None;
        };
        let pid = child.id();
        e.ns = Some(child);
        let ns_of = |p: &str| std::fs::read_link(format!("/proc/{}/ns/mnt", p)).ok();
        let t = Instant::now();
        while ns_of(&pid.to_string()).is_none() || ns_of(&pid.to_string()) == ns_of("self") {
            if t.elapsed() > Duration::from_secs(10) {
                eprintln!("skipping {}: no private mount namespace (unshare -m)", name);
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !Command::new("nsenter").args(["-t", &pid.to_string(), "-m", "true"]).status().is_ok_and(|s| s.success()) {
            eprintln!("skipping {}: nsenter cannot enter the namespace", name);
            return None;
        }
        Some(e)
    }

    /// `path` as the test process reaches it: through the root of the
    /// test's mount namespace.
    pub fn at(&self, path: &str) -> PathBuf {
        match &self.ns {
            Some(ns) => PathBuf::from(format!("/proc/{}/root{}", ns.id(), path)),
            None => PathBuf::from(path),
        }
    }

    /// Runs `script` with sh in the test's mount namespace; panics if it fails.
    pub fn sh(&self, script: &str) -> String {
        let mut c = match &self.ns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &ns.id().to_string(), "-m", "--", "sh", "-c", script]);
                c
            }
            None => {
                let mut c = Command::new("sh");
                c.args(["-c", script]);
                c
            }
        };
        let o = c.output().expect("sh runs");
        assert!(o.status.success(), "{}: {}", script, String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The mounts the daemon sees (its namespace's), in the kernel's order.
    pub fn mounts(&self) -> Vec<tarn_fuse::mountpoint::MountEntry> {
        let file = match &self.ns {
            Some(ns) => format!("/proc/{}/mountinfo", ns.id()),
            None => "/proc/self/mountinfo".to_string(),
        };
        tarn_fuse::mountpoint::parse_mountinfo(&std::fs::read_to_string(file).unwrap_or_default())
    }

    /// The file system types mounted at `dir`, bottom first ("fuse" for
    /// any FUSE mount).
    pub fn mounted_types(&self, dir: &str) -> Vec<String> {
        let dir = Path::new(dir);
        self.mounts().into_iter().filter(|e| e.mount_point == dir).map(|e| if e.is_fuse() { "fuse".to_string() } else { e.fstype }).collect()
    }

    pub fn is_mounted(&self, dir: &str) -> bool {
        !self.mounted_types(dir).is_empty()
    }
    pub fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
    pub fn cmd(&self) -> Command {
        match &self.cwd {
            Some(dir) => self.cmd_in(dir),
            None => self.cmd_here(),
        }
    }
    fn cmd_here(&self) -> Command {
        let mut c = match &self.ns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &ns.id().to_string(), "-m", "--"]).arg(tarn_bin());
                c
            }
            None => Command::new(tarn_bin()),
        };
        c.env("TARN_CACHE", self.dir.join("tarn.cache")).env("TARN_SOCKET", self.dir.join("tarn.sock"));
        if self.memfs {
            c.env("TARN_TEST_MEMFS", "1");
        }
        c
    }
    /// `cmd` with `dir` as the working directory (entering the namespace
    /// would otherwise start at its root).
    pub fn cmd_in(&self, dir: &Path) -> Command {
        let mut c = self.cmd_here();
        match &self.ns {
            Some(ns) => {
                let mut n = Command::new("nsenter");
                n.args(["-t", &ns.id().to_string(), "-m"]).arg(format!("--wd={}", dir.display())).arg("--").arg(tarn_bin());
                n.envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))));
                n
            }
            None => {
                c.current_dir(dir);
                c
            }
        }
    }
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("tarn runs")
    }
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "tarn {:?} failed: {}\nlog:\n{}", args, String::from_utf8_lossy(&o.stderr), self.log());
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    pub fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "tarn {:?} should exit 1; stderr: {}", args, err);
        assert!(err.starts_with("tarn: ") && err.trim_end().lines().count() == 1, "error is one 'tarn: ' line: {}", err);
        assert!(!err.contains("panicked"), "{}", err);
        err
    }
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tarn.log")).unwrap_or_default()
    }
    pub fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("tarn.pid")).ok()?.trim().parse().ok()
    }
    /// Waits until the SIGKILLed daemon `pid` is gone for its clients: its
    /// main thread a zombie (its locks released) and its socket refusing
    /// connections. The socket closes only when the last thread has exited,
    /// which may be after the main thread became a zombie; a command sent
    /// in between is queued on the dying socket and reset.
    pub fn wait_killed(&self, pid: i32) {
        wait_for("the daemon's main thread to exit", || std::fs::read_to_string(format!("/proc/{}/stat", pid)).map(|s| s.contains(") Z ")).unwrap_or(true));
        let sock = self.dir.join("tarn.sock");
        wait_for("the daemon's socket to close", || std::os::unix::net::UnixStream::connect(&sock).is_err());
    }
    /// A pool on one 128 MiB file, its root dataset mounted at `mnt`.
    pub fn create(&self, name: &str) -> String {
        let mnt = self.path(&format!("{}-mnt", name));
        self.ok(&["pool", "create", "-m", &mnt, name, &self.path(&format!("{}.img", name)), "--size", "128M"]);
        mnt
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.run(&["daemon", "stop"]);
        if let Some(pid) = self.pid() {
            // SAFETY: signalling a process id read from our own test's pid file.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for m in mounts_under(&self.dir) {
            let c = std::ffi::CString::new(m).unwrap();
            // SAFETY: a valid path; detaching whatever a failed test left.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        if let Some(mut ns) = self.ns.take() {
            // The namespace, and every mount in it, goes with its last process.
            let _ = ns.kill();
            let _ = ns.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// splitmix64: one `u64` seed drives a test's choices, so a failure
/// reproduces from the seed it prints.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi] (up to a bias of 2^-64 · span).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "range({lo}, {hi})");
        lo + self.next() % (hi - lo + 1)
    }
    /// One of `v` (not empty).
    pub fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize].clone()
    }
}

/// `len` pseudo-random bytes from `seed` (xorshift: incompressible, so a
/// quota or a pool fills with exactly the bytes written).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = dir.display().to_string();
    info.lines().filter_map(|l| l.split(' ').nth(4)).filter(|m| m.starts_with(&prefix)).map(String::from).collect()
}

pub fn is_mounted(dir: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines().any(|l| l.split(' ').nth(4) == Some(dir))
}

pub fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(30), "timed out waiting for {}", what);
        std::thread::sleep(Duration::from_millis(20));
    }
}


/// Runs `c`, killing it and failing the test if it takes over `secs` (a
/// hang is a failure, not a stuck test run).
pub fn within(mut c: Command, secs: u64) -> Output {
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the command runs");
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("{:?} did not finish within {} s", c, secs);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The copies of the data block `index` of the file at `path` (from the
/// dataset's root) in dataset `ds`, read from the image in this process.
pub fn data_block(img: &str, ds: &str, path: &[&str], index: u64) -> Vec<tarn_ondisk::bp::Dva> {
    use tarn_engine::posix::{FileSystem, PosixFs, PosixOptions};
    let pool = tarn_engine::Pool::open(&[PathBuf::from(img)], &tarn_engine::OpenOptions { readonly: true, ..Default::default() }).unwrap();
    let os = pool.datasets().objset(ds).unwrap();
    let fs = PosixFs::open(os.clone(), PosixOptions { readonly: true, ..Default::default() }).unwrap();
    let mut ino = fs.root();
    for name in path {
        ino = fs.lookup(ino, name.as_bytes()).unwrap().ino;
    }
    let tree = os.tree(ino, 10_000).unwrap();
    let bp = tree.iter().find(|(l, i, _)| (*l, *i) == (0, index)).expect("the data block").2;
    bp.dva.iter().filter(|d| !d.is_empty()).copied().collect()
}
