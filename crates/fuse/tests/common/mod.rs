//! What the fsx exercisers share: a seedable generator and a read-write
//! open.

use std::fs::{File, OpenOptions};
use std::path::Path;

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
