//! What the FUSE tests share: a seedable generator, a read-write open, and
//! a fresh mount directory (or the reason to skip).

#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// xorshift64*: small, seedable, good enough to pick operations.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Opens `path` for reading and writing (panics if it cannot).
pub fn open(path: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(path).expect("open")
}

/// A fresh directory to mount test `name` on, or `None` (with the reason
/// printed) where FUSE is unavailable.
pub fn mount_dir(prefix: &str, name: &str) -> Option<PathBuf> {
    if let Some(why) = tarn_fuse::unavailable() {
        eprintln!("skipping {name}: {why}");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("{}-{}-{}", prefix, name, std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    Some(dir)
}
