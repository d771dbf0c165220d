//! What the redundancy tests through the mount share (mirror_mount.rs,
//! raidz_mount.rs): a pool of image files mounted in the test's private
//! namespace, a source tree of files to put on it, the blocks of those
//! files read from the closed pool, bytes of the images, and the ways a
//! device goes away under load.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tarn_engine::posix::{FileSystem, PosixFs, PosixOptions};
use tarn_engine::{OpenOptions, Pool};
use tarn_ondisk::bp::BlockPtr;

use super::{noise, wait_for, Env, Rng};

/// The test's seed: the environment variable `var`, or 12.
pub fn seed(var: &str) -> u64 {
    std::env::var(var).ok().map(|s| s.parse().unwrap_or_else(|_| panic!("{var} is a number"))).unwrap_or(12)
}

/// Text-like bytes (words of a small vocabulary: they compress, so their
/// blocks are shorter than their records) or noise (they do not).
pub fn content(len: usize, seed: u64, text: bool) -> Vec<u8> {
    if !text {
        return noise(len, seed);
    }
    const WORDS: &[&str] = &["vdev", "mirror", "scrub", "txg", "block", "pointer", "checksum", "fn", "let", "mut", "{", "}", "\n", "resilver", "//"];
    let mut r = Rng(seed);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(r.pick(WORDS).as_bytes());
        out.push(b' ');
    }
    out.truncate(len);
    out
}

/// A source tree of `n` files in nested directories, made from `seed`
/// under `dir`: mostly small files (some inline in their dnode), a
/// quarter of tens of KiB, a few of several records with indirect
/// blocks; text and noise. Returns the relative paths.
pub fn make_tree(dir: &Path, n: usize, seed: u64) -> Vec<String> {
    let mut r = Rng(seed);
    let mut files = Vec::with_capacity(n);
    for i in 0..n {
        let rel = format!("d{}/s{}/f{}", r.next() % 20, r.next() % 6, i);
        let len = match r.next() % 100 {
            0..=69 => r.range(0, 6 << 10),
            70..=94 => r.range(6 << 10, 48 << 10),
            _ => r.range(100 << 10, 600 << 10),
        };
        let p = dir.join(&rel);
        std::fs::create_dir_all(p.parent().expect("a file in a directory")).unwrap();
        std::fs::write(&p, content(len as usize, seed ^ i as u64, r.next().is_multiple_of(2))).unwrap();
        files.push(rel);
    }
    files
}

/// True when `tar` runs here (the bit rot tests unpack their tree with it).
pub fn have_tar(test: &str) -> bool {
    let ok = std::process::Command::new("tar").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping {test}: tar is not installed");
    }
    ok
}

/// The closed pool on `devs`, opened read-only in this process.
pub fn open_readonly(devs: &[PathBuf]) -> Pool {
    Pool::open(devs, &OpenOptions { readonly: true, ..Default::default() }).expect("open the closed pool read-only")
}

/// Every block pointer of the files `files` (paths from the root of
/// dataset `tank`) that has a place on the devices (no hole, not
/// embedded): (file, level, pointer), in file order.
pub fn file_blocks(pool: &Pool, files: &[String]) -> Vec<(String, u8, BlockPtr)> {
    let os = pool.datasets().objset("tank").expect("the root dataset");
    let fs = PosixFs::open(os.clone(), PosixOptions { readonly: true, ..Default::default() }).expect("its files");
    let mut out = Vec::new();
    for rel in files {
        let mut ino = fs.root();
        for name in rel.split('/') {
            ino = fs.lookup(ino, name.as_bytes()).unwrap_or_else(|e| panic!("{rel}: {e:?}")).ino;
        }
        for (level, _, bp) in os.tree(ino, 100_000).expect("the file's block tree") {
            if !bp.is_hole() && !bp.is_embedded() {
                out.push((rel.clone(), level, bp));
            }
        }
    }
    out
}

pub fn read_image(img: &Path, offset: u64, len: u64) -> Vec<u8> {
    let mut f = std::fs::File::open(img).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut b = vec![0u8; len as usize];
    f.read_exact(&mut b).unwrap();
    b
}

/// Overwrites `len` bytes at `at` of the open image `f` with bytes that
/// differ from the old ones (each XORed with a non-zero byte).
pub fn overwrite(f: &mut std::fs::File, at: u64, len: u64, r: &mut Rng) {
    let mut old = vec![0u8; len as usize];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut old).unwrap();
    let new: Vec<u8> = old.iter().zip(noise(old.len(), r.next())).map(|(o, x)| o ^ (x | 1)).collect();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&new).unwrap();
}

/// Reads a whole file after asking the kernel to drop its cached pages.
pub fn read_uncached(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    // SAFETY: advice on a descriptor we own; it changes no memory of ours.
    unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// A pool "tank" of image files under `devs/` of the test's directory,
/// its root dataset mounted at `mnt` in the test's namespace.
pub struct MountedPool {
    pub devs: Vec<PathBuf>,
    pub mnt: String,
}

impl MountedPool {
    /// Creates the pool: one top-level vdev of kind `kind` ("mirror",
    /// "raidz2", …) over the images `names`, each `size` ("256M").
    pub fn create(e: &Env, kind: &str, names: &[&str], size: &str) -> MountedPool {
        std::fs::create_dir_all(e.dir.join("devs")).unwrap();
        let devs: Vec<PathBuf> = names.iter().map(|n| e.dir.join("devs").join(n)).collect();
        let mnt = e.path("mnt");
        let paths: Vec<String> = devs.iter().map(|d| d.display().to_string()).collect();
        let mut args = vec!["pool", "create", "-m", &mnt, "tank", kind];
        args.extend(paths.iter().map(String::as_str));
        args.extend(["--size", size]);
        e.ok(&args);
        MountedPool { devs, mnt }
    }

    pub fn name(&self, i: usize) -> String {
        self.devs[i].display().to_string()
    }

    /// The file `rel` as this process reaches it through the mount.
    pub fn file(&self, e: &Env, rel: &str) -> PathBuf {
        e.at(&format!("{}/{}", self.mnt, rel))
    }

    /// Stops the daemon (the pool closes: nothing of it stays cached).
    pub fn close(&self, e: &Env) {
        e.ok(&["daemon", "stop"]);
    }

    /// Starts the daemon, which imports the pool from its cache file, and
    /// waits for the mount.
    pub fn reopen(&self, e: &Env) {
        e.ok(&["pool", "list"]);
        wait_for("the pool's root to be mounted", || e.is_mounted(&self.mnt));
    }

    pub fn status_json(&self, e: &Env) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&e.ok(&["pool", "status", "--json", "tank"])).expect("status --json");
        v[0].clone()
    }

    /// Unpacks the tree at `src` into the mount with tar and syncs it.
    pub fn untar(&self, e: &Env, src: &Path) {
        e.sh(&format!("tar -C {} -cf {} . && tar -C {} -xf {}", src.display(), e.path("tree.tar"), self.mnt, e.path("tree.tar")));
        e.ok(&["pool", "sync", "tank"]);
    }

    /// Reads every file through the mount: each equals its source.
    pub fn all_read_back(&self, e: &Env, src: &Path, files: &[String], ctx: &str) {
        for rel in files {
            let got = std::fs::read(self.file(e, rel)).unwrap_or_else(|err| panic!("{ctx}: reading {rel} through the mount: {err}"));
            assert!(got == std::fs::read(src.join(rel)).unwrap(), "{ctx}: {rel} reads back wrong bytes");
        }
    }

    /// `inspect --verify` of the live pool is clean.
    pub fn verified(&self, e: &Env, ctx: &str) {
        let verified = e.ok(&["inspect", "tank", "--verify"]);
        assert!(verified.starts_with("verified txg") && !verified.contains("error"), "{ctx}: {verified}");
    }
}

/// Child `child` of the first top-level vdev in `status --json`: (READ,
/// WRITE, CKSUM, repaired bytes).
pub fn counts(st: &serde_json::Value, child: usize) -> (u64, u64, u64, u64) {
    let c = &st["vdevs"][0]["children"][child];
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} of child {child}: {st}"));
    (n("read_errors"), n("write_errors"), n("checksum_errors"), n("repaired_bytes"))
}

/// The daemon log's repairs of checksum errors on device `dev` whose line
/// ends with `from` (" from another copy", " from raidz2-0's parity"):
/// the image offsets repaired (each once per repair) and the bytes.
pub fn logged_repairs_on(log: &str, dev: &str, from: &str) -> (Vec<u64>, u64) {
    let tag = format!(" on '{dev}' (checksum error){from}");
    let (mut offsets, mut bytes) = (Vec::new(), 0);
    for l in log.lines().filter(|l| l.starts_with("tarn: repaired ") && l.ends_with(&tag)) {
        let w: Vec<&str> = l.split_whitespace().collect();
        bytes += w[2].parse::<u64>().expect("repaired N bytes");
        offsets.push(u64::from_str_radix(w[5].trim_start_matches("0x"), 16).expect("at 0xOFFSET"));
    }
    (offsets, bytes)
}

/// How a device goes away under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vanish {
    /// `rm`: the daemon still holds the file; it is REMOVED.
    Delete,
    /// Cut to half its size (its front labels stay, the back ones and
    /// every block past the cut go): it is FAULTED.
    Truncate,
    /// `tarn inject -e nxio`: every I/O fails with ENXIO, the device says
    /// it is gone: it is REMOVED. Its file is whole; the handler ends with
    /// the daemon.
    Inject,
}

impl Vanish {
    /// The device's state in `status` after it went this way.
    pub fn state(self) -> &'static str {
        match self {
            Vanish::Delete | Vanish::Inject => "REMOVED",
            Vanish::Truncate => "FAULTED",
        }
    }

    /// `status`'s status: line for a pool with a device gone this way.
    pub fn status_line(self) -> &'static str {
        match self {
            Vanish::Delete | Vanish::Inject => "status: One or more devices could not be used because they are missing or were removed.",
            Vanish::Truncate => "status: One or more devices are faulted in response to persistent errors.",
        }
    }

    /// Makes image `img` (of `size` bytes) of the pool "tank" go away.
    pub fn apply(self, e: &Env, img: &Path, size: u64) {
        match self {
            Vanish::Delete => std::fs::remove_file(img).unwrap(),
            Vanish::Truncate => std::fs::OpenOptions::new().write(true).open(img).unwrap().set_len(size / 2).unwrap(),
            Vanish::Inject => {
                e.ok(&["inject", "-d", &img.display().to_string(), "-e", "nxio", "tank"]);
            }
        }
    }
}

/// The source of a file written under load.
pub fn load_content(i: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed ^ ((i as u64) << 20));
    let len = r.range(16 << 10, 416 << 10) as usize;
    content(len, r.next(), i.is_multiple_of(3))
}

/// The files of a load run (`under_load`): `r0…r99` written before it,
/// `w0…w119` by its writer.
pub struct Load {
    pub seed: u64,
    pub before: Vec<Vec<u8>>,
}

/// Files the writer writes under load.
pub const LOAD_WRITES: usize = 120;

/// A writer (files `w0…w119` of 16–416 KiB, each fsynced) and a reader
/// (re-reading the 100 files `r0…r99` written before, ~21 MiB, past a
/// 16 MiB ARC and the page cache) through the mount; `event(i)` runs in
/// the writer before it writes `w{i}` (where a test makes devices go
/// away). Every write, fsync and read must succeed, and every read return
/// its file's bytes.
pub fn under_load(e: &Env, p: &MountedPool, name: &str, seed: u64, event: &dyn Fn(usize)) -> Load {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    // A small ARC, and the kernel's page cache dropped before each read
    // (`read_uncached`): the reader's files come from the devices.
    e.ok(&["tunable", "set", "zfs_arc_max=16M"]);
    let before: Vec<Vec<u8>> = (0..100).map(|i| load_content(1000 + i, seed)).collect();
    for (i, c) in before.iter().enumerate() {
        std::fs::write(p.file(e, &format!("r{i}")), c).unwrap();
    }
    e.ok(&["pool", "sync", "tank"]);
    let stop = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let i = (n as usize * 7) % before.len();
                let got = read_uncached(&p.file(e, &format!("r{i}"))).unwrap_or_else(|err| panic!("{name}: reading r{i}: {err}"));
                assert!(got == before[i], "{name}: r{i} reads back wrong bytes");
                n += 1;
            }
            n
        });
        let t = Instant::now();
        for i in 0..LOAD_WRITES {
            event(i);
            let mut f = std::fs::File::create(p.file(e, &format!("w{i}"))).unwrap_or_else(|err| panic!("{name}: creating w{i}: {err}"));
            f.write_all(&load_content(i, seed)).unwrap_or_else(|err| panic!("{name}: writing w{i}: {err}"));
            f.sync_all().unwrap_or_else(|err| panic!("{name}: fsync of w{i}: {err}"));
            assert!(t.elapsed() < Duration::from_secs(120), "{name}: the writer is stuck at w{i}");
        }
        stop.store(true, Ordering::SeqCst);
        reader.join().expect("the reader")
    });
    eprintln!("{name}: {LOAD_WRITES} files written, {reads} files read meanwhile");
    Load { seed, before }
}

impl Load {
    /// Every file of the run reads back through the mount as written.
    pub fn check_files(&self, e: &Env, p: &MountedPool, ctx: &str) {
        for i in 0..LOAD_WRITES {
            let got = std::fs::read(p.file(e, &format!("w{i}"))).unwrap_or_else(|err| panic!("{ctx}: reading w{i}: {err}"));
            assert!(got == load_content(i, self.seed), "{ctx}: w{i}");
        }
        for (i, c) in self.before.iter().enumerate() {
            let got = std::fs::read(p.file(e, &format!("r{i}"))).unwrap_or_else(|err| panic!("{ctx}: reading r{i}: {err}"));
            assert!(got == *c, "{ctx}: r{i}");
        }
    }
}
