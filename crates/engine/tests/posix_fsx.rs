//! An fsx-style exerciser of the POSIX layer's file data paths.
//!
//! Invariants checked: after every operation, the bytes read back from a
//! file and its size equal an in-memory model's, across random writes,
//! reads, truncates, fallocate (plain, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE)
//! and copy_file_range on four files of different size classes (inline,
//! one block, many blocks); the same holds after pool syncs and after the
//! pool is exported and imported again.
//!
//! One `u64` seed drives a run (`TARN_FSX_SEED`, printed at the start so a
//! failure reproduces); `TARN_FSX_OPS=N` sets the operation count (default
//! small enough for CI).

mod common;

use std::sync::Arc;

use common::{Mounted, Rng};
use tarn_engine::posix::*;

const ROOT: Caller = Caller::new(0, 0, 1, 0);
/// Largest size of each file: inline-sized, one record, many records.
const MAX_SIZES: [u64; 4] = [3000, 200_000, 3 << 20, 3 << 20];
const DEFAULT_OPS: u64 = 60_000;

struct Fsx {
    rng: Rng,
    m: Mounted,
    inos: Vec<Ino>,
    model: Vec<Vec<u8>>,
    ops: u64,
}

impl Fsx {
    fn new(seed: u64) -> Fsx {
        let m = Mounted::new(512 << 20, seed);
        let fs = m.fs();
        let inos = (0..MAX_SIZES.len())
            .map(|i| fs.mknod(&ROOT, fs.root(), format!("f{i}").as_bytes(), libc::S_IFREG | 0o644, 0).expect("mknod").ino)
            .collect();
        Fsx { rng: Rng::new(seed), m, inos, model: vec![Vec::new(); MAX_SIZES.len()], ops: 0 }
    }

    fn fs(&self) -> Arc<PosixFs> {
        self.m.fs()
    }

    fn reopen(&mut self) {
        self.m.reopen();
        let fs = self.fs();
        for (i, ino) in self.inos.iter().enumerate() {
            assert_eq!(fs.lookup(fs.root(), format!("f{i}").as_bytes()).expect("lookup").ino, *ino);
        }
    }

    /// An offset and length within (a little past) file `f`'s size class.
    fn range(&mut self, f: usize) -> (u64, u64) {
        let max = MAX_SIZES[f];
        let off = self.rng.below(max);
        let len = match self.rng.below(4) {
            0 => self.rng.range(1, 16),
            1 => self.rng.range(1, 4096),
            _ => self.rng.range(1, max / 4 + 1),
        };
        (off, len.min(max - off).max(1))
    }

    fn check(&self, f: usize, what: &str) {
        let fs = self.fs();
        let m = &self.model[f];
        let a = fs.getattr(self.inos[f]).expect("getattr");
        assert_eq!(a.size, m.len() as u64, "op {}: size of f{f} after {what}", self.ops);
        let got = fs.read(self.inos[f], 0, (m.len() + 10) as u32).expect("read");
        assert!(got == *m, "op {}: f{f} after {what}: {}", self.ops, common::first_difference(&got, m));
    }

    fn step(&mut self) {
        self.ops += 1;
        let f = self.rng.below(MAX_SIZES.len() as u64) as usize;
        let ino = self.inos[f];
        let op = self.rng.below(100);
        let what = match op {
            0..=34 => self.write(f, ino),
            35..=54 => self.read(f, ino),
            55..=64 => self.truncate(f, ino),
            65..=84 => self.fallocate(f, ino),
            85..=94 => self.copy(f),
            95..=98 => {
                self.fs().sync_all().expect("sync");
                "sync"
            }
            _ => {
                if self.rng.chance(20) {
                    self.reopen();
                    "export and import"
                } else {
                    "nothing"
                }
            }
        };
        if self.ops.is_multiple_of(1000) || what == "export and import" {
            for g in 0..MAX_SIZES.len() {
                self.check(g, what);
            }
        } else {
            self.check_window(f, what);
        }
    }

    /// The size and a random window of file `f` against the model (a whole
    /// file every op would make the run quadratic).
    fn check_window(&mut self, f: usize, what: &str) {
        let a = self.fs().getattr(self.inos[f]).expect("getattr");
        assert_eq!(a.size, self.model[f].len() as u64, "op {}: size of f{f} after {what}", self.ops);
        let (off, len) = self.range(f);
        let got = self.fs().read(self.inos[f], off, len as u32).expect("read");
        let m = &self.model[f];
        let want = &m[(off as usize).min(m.len())..((off + len) as usize).min(m.len())];
        assert!(got == want, "op {}: f{f} at {off}+{len} after {what}: {}", self.ops, common::first_difference(&got, want));
    }

    fn write(&mut self, f: usize, ino: Ino) -> &'static str {
        let (off, len) = self.range(f);
        let data = common::pattern(len as usize, self.rng.next_u64());
        assert_eq!(self.fs().write(&ROOT, ino, off, &data).expect("write"), len as u32);
        let m = &mut self.model[f];
        let end = (off + len) as usize;
        if m.len() < end {
            m.resize(end, 0);
        }
        m[off as usize..end].copy_from_slice(&data);
        "write"
    }

    fn read(&mut self, f: usize, _ino: Ino) -> &'static str {
        self.check_window(f, "read");
        "read"
    }

    fn truncate(&mut self, f: usize, ino: Ino) -> &'static str {
        let size = if self.rng.chance(20) { 0 } else { self.rng.below(MAX_SIZES[f]) };
        self.fs().setattr(&ROOT, ino, &SetAttr { size: Some(size), ..Default::default() }).expect("truncate");
        self.model[f].resize(size as usize, 0);
        "truncate"
    }

    fn fallocate(&mut self, f: usize, ino: Ino) -> &'static str {
        let (off, len) = self.range(f);
        let keep_size = self.rng.chance(50);
        let (flags, what) = match self.rng.below(3) {
            0 => (FallocFlags { keep_size, ..Default::default() }, "fallocate"),
            1 => (FallocFlags { keep_size: true, punch_hole: true, zero_range: false }, "punch hole"),
            _ => (FallocFlags { keep_size, punch_hole: false, zero_range: true }, "zero range"),
        };
        self.fs().fallocate(&ROOT, ino, off, len, flags).expect(what);
        let m = &mut self.model[f];
        let end = (off + len) as usize;
        if flags.punch_hole || flags.zero_range {
            let (a, b) = ((off as usize).min(m.len()), end.min(m.len()));
            m[a..b].fill(0);
        }
        if !flags.keep_size && m.len() < end {
            m.resize(end, 0);
        }
        what
    }

    fn copy(&mut self, f: usize) -> &'static str {
        let src = self.rng.below(MAX_SIZES.len() as u64) as usize;
        let (off_in, len) = self.range(src);
        let (off_out, _) = self.range(f);
        let overlap = src == f && off_in < off_out + len && off_out < off_in + len;
        let r = self.fs().copy_file_range(&ROOT, self.inos[src], off_in, self.inos[f], off_out, len);
        if overlap {
            assert_eq!(r.expect_err("overlapping copy").errno, libc::EINVAL);
            return "overlapping copy";
        }
        let s = &self.model[src];
        let n = (len as usize).min(s.len().saturating_sub(off_in as usize));
        assert_eq!(r.expect("copy_file_range"), n as u64, "op {}: bytes copied", self.ops);
        if n > 0 {
            let data = s[off_in as usize..off_in as usize + n].to_vec();
            let m = &mut self.model[f];
            let end = off_out as usize + n;
            if m.len() < end {
                m.resize(end, 0);
            }
            m[off_out as usize..end].copy_from_slice(&data);
        }
        "copy_file_range"
    }
}

#[test]
fn fsx() {
    let seed = std::env::var("TARN_FSX_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_f5c5);
    let ops: u64 = std::env::var("TARN_FSX_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_OPS);
    eprintln!("fsx: seed {seed} (TARN_FSX_SEED), {ops} operations (TARN_FSX_OPS)");
    let start = std::time::Instant::now();
    let mut fsx = Fsx::new(seed);
    for _ in 0..ops {
        fsx.step();
    }
    fsx.reopen();
    for f in 0..MAX_SIZES.len() {
        fsx.check(f, "the final import");
    }
    fsx.fs().verify().expect("the tree verifies");
    let pool = fsx.m.unmount();
    pool.verify().expect("the pool verifies");
    eprintln!("fsx: seed {seed}: {ops} operations in {:.1} s", start.elapsed().as_secs_f64());
}
