//! An fsx-style exerciser of the glue: random writes, reads, truncates,
//! fallocates, fsyncs and reopen cycles on one file through the mount
//! (write-back cache on), checked against a `Vec<u8>` model after every
//! read and, at the end, against what reached the file system behind the
//! kernel.
//!
//! Invariants checked:
//! - every read through the mount returns the model's bytes;
//! - the size the kernel reports is the model's;
//! - after fsync and close, the file system itself (not the page cache)
//!   holds the model's bytes — write-back and SETATTR lost nothing.
//!
//! `TARN_FSX_SEED=S` replays one seed; `TARN_FSX_OPS=N` changes the length.

mod common;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

use tarn_engine::posix::FileSystem;
use common::{open, Rng};
use tarn_fuse::{mount, MemFs, MountOptions};

const FILE_MAX: u64 = 4 << 20;

fn run(seed: u64, ops: usize) {
    let dir = std::env::temp_dir().join(format!("tarn-fsx-{}-{}", seed, std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fs = Arc::new(MemFs::new());
    let h = mount(fs.clone(), &dir, &MountOptions { fsname: "fsx".into(), ..Default::default() }).expect("mount");
    let path = dir.join("f");
    File::create(&path).unwrap();
    let mut f = open(&path);
    let mut model: Vec<u8> = Vec::new();
    let mut rng = Rng(seed | 1);
    for op in 0..ops {
        let ctx = |what: &str| format!("seed {seed} op {op}: {what}");
        match rng.below(100) {
            0..=39 => {
                let off = rng.below(FILE_MAX);
                let big = rng.below(4) == 0;
                let len = rng.below(if big { 1 << 20 } else { 9000 }).min(FILE_MAX - off) as usize;
                let byte = rng.next() as u8;
                f.seek(SeekFrom::Start(off)).unwrap();
                f.write_all(&vec![byte; len]).unwrap();
                // A write of nothing changes nothing, not even the size.
                if len > 0 {
                    if model.len() < off as usize + len {
                        model.resize(off as usize + len, 0);
                    }
                    model[off as usize..off as usize + len].fill(byte);
                }
            }
            40..=64 => {
                let off = rng.below(model.len() as u64 + 1);
                let len = rng.below(70_000) as usize;
                let mut buf = vec![0u8; len];
                f.seek(SeekFrom::Start(off)).unwrap();
                let mut got = 0;
                while got < len {
                    let n = f.read(&mut buf[got..]).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let end = (off as usize + len).min(model.len());
                assert_eq!(got, end - off as usize, "{}", ctx("short read"));
                assert!(buf[..got] == model[off as usize..end], "{}", ctx("read returned other bytes than written"));
            }
            65..=79 => {
                let size = rng.below(FILE_MAX);
                f.set_len(size).unwrap();
                model.resize(size as usize, 0);
            }
            80..=87 => {
                let off = rng.below(FILE_MAX / 2);
                let len = rng.below(FILE_MAX / 2);
                let punch = rng.below(2) == 0;
                let mode = if punch { libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                // SAFETY: fallocate on an open descriptor.
                assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) }, 0, "{}", ctx("fallocate"));
                let end = (off + len) as usize;
                if punch {
                    let zend = end.min(model.len());
                    let zstart = (off as usize).min(zend);
                    model[zstart..zend].fill(0);
                } else if end > model.len() {
                    model.resize(end, 0);
                }
            }
            88..=93 => f.sync_all().unwrap(),
            _ => {
                drop(f);
                f = open(&path);
            }
        }
        assert_eq!(f.metadata().unwrap().len(), model.len() as u64, "{}", ctx("size"));
    }
    f.sync_all().unwrap();
    drop(f);
    h.unmount().expect("unmount");
    let a = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(a.size, model.len() as u64, "seed {seed}: size in the file system after unmount");
    let data = fs.read(a.ino, 0, FILE_MAX as u32 + 1).unwrap();
    assert!(data == model, "seed {seed}: the file system holds other bytes than were written");
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn random_operations_match_the_model() {
    if let Some(why) = tarn_fuse::unavailable() {
        eprintln!("skipping fsx: {why}");
        return;
    }
    let ops: usize = std::env::var("TARN_FSX_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    let seeds: Vec<u64> = match std::env::var("TARN_FSX_SEED").ok().and_then(|v| v.parse().ok()) {
        Some(s) => vec![s],
        None => vec![1, 2, 3],
    };
    for seed in seeds {
        eprintln!("fsx seed {seed}, {ops} operations");
        run(seed, ops);
    }
}
