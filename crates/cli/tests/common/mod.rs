//! What the daemon tests share: a private daemon per test (own directory,
//! socket and cache file; the `TARN_TEST_MEMFS` hook, or with `Env::real`
//! the POSIX layer on the pool), and mount helpers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Env {
    pub dir: PathBuf,
    /// Datasets served from memory (the `TARN_TEST_MEMFS` hook).
    memfs: bool,
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
    fn with(name: &str, memfs: bool) -> Option<Env> {
        if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
            eprintln!("skipping {}: /dev/fuse cannot be opened ({})", name, e);
            return None;
        }
        let dir = std::env::temp_dir().join(format!("tarn-daemon-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Some(Env { dir, memfs })
    }
    pub fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tarn"));
        c.env("TARN_CACHE", self.dir.join("tarn.cache")).env("TARN_SOCKET", self.dir.join("tarn.sock"));
        if self.memfs {
            c.env("TARN_TEST_MEMFS", "1");
        }
        c
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
        let _ = std::fs::remove_dir_all(&self.dir);
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

