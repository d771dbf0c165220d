//! tarn-fsbench: the small-file workload of `bench/fs-compare.sh`.
//!
//! Creates, stats, reads and deletes many small files (default 100,000 of
//! 1 KiB) under a directory on the file system being measured, one phase at a
//! time, and reports operations per second and per-operation latency for each
//! phase. It is a plain compiled loop of system calls so that the figure is
//! the file system's (and the kernel's), not an interpreter's.
//!
//! Layout: thread `k` of `T` owns the directory `DIR/tK` and the files
//! `fNNNNNNN` in it whose index `i` satisfies `i % T == k`. Threads never share
//! a directory, so the figure is the file system's parallelism, not contention
//! on one directory's lock in the VFS.
//!
//! Phases (`--phases`, any subset, in this order):
//! - `create`: open(O_CREAT|O_EXCL|O_WRONLY), one write of the whole file, close.
//! - `stat`:   stat, checking the length.
//! - `read`:   open, read to end, close, checking length and every byte (a
//!   wrong byte counts as an error and fails the run).
//! - `delete`: unlink, then rmdir of the thread directories.
//!
//! Running phases in separate invocations lets the caller remount between
//! them (cold stat and read) and measure the space the files use.
//!
//! File contents are pseudo-random (incompressible) and seeded by the file's
//! index, so compression cannot shrink them, not even across files.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

const PHASES: [&str; 4] = ["create", "stat", "read", "delete"];
/// Bound on the thread count: the machines have 2 cores; 256 is far past useful.
const THREADS_MAX: usize = 256;

struct Args {
    dir: PathBuf,
    files: usize,
    size: usize,
    threads: usize,
    phases: Vec<String>,
    json: bool,
}

struct PhaseResult {
    name: String,
    secs: f64,
    ops_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    errors: u64,
}

fn usage() -> String {
    "usage: tarn-fsbench --dir DIR [--files 100000] [--size 1024] [--threads 1] \
     [--phases create,stat,read,delete] [--json]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dir: PathBuf::new(),
        files: 100_000,
        size: 1024,
        threads: 1,
        phases: PHASES.iter().map(|s| s.to_string()).collect(),
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{}", usage()))
        };
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{a} {v}: {e}"));
        match a.as_str() {
            "--dir" => args.dir = PathBuf::from(val()?),
            "--files" => args.files = num(val()?)?,
            "--size" => args.size = num(val()?)?,
            "--threads" => args.threads = num(val()?)?,
            "--phases" => args.phases = val()?.split(',').map(str::to_string).collect(),
            "--json" => args.json = true,
            "-h" | "--help" => return Err(usage()),
            _ => return Err(format!("unknown argument {a}\n{}", usage())),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err(usage());
    }
    if args.threads == 0 || args.threads > THREADS_MAX {
        return Err(format!("--threads must be 1..={THREADS_MAX}"));
    }
    if args.size < 8 {
        return Err("--size must be at least 8 (the index is stamped in the first 8 bytes)".into());
    }
    if let Some(p) = args.phases.iter().find(|p| !PHASES.contains(&p.as_str())) {
        return Err(format!(
            "unknown phase {p}; phases are {}",
            PHASES.join(",")
        ));
    }
    Ok(args)
}

fn file_path(dir: &Path, threads: usize, i: usize) -> PathBuf {
    dir.join(format!("t{}", i % threads))
        .join(format!("f{i:07}"))
}

/// Fills `buf` with file `i`'s contents: its index in the first 8 bytes,
/// then xorshift64* output seeded by the index. Every file's bytes differ
/// from every other's, so no file system can store them in less than their
/// size — not even one that compresses several small files' data together
/// (tarn keeps small files inline in dnode blocks, which are compressed:
/// with one payload shared by all files, 100,000 files took 361 bytes each).
fn fill(buf: &mut [u8], i: usize) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    for b in buf.iter_mut() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *b = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
    }
    buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
}

/// One operation of `phase` on file `i`; Err(..) is counted as an error.
fn op(phase: &str, a: &Args, i: usize, buf: &mut [u8], rbuf: &mut Vec<u8>) -> std::io::Result<()> {
    let path = file_path(&a.dir, a.threads, i);
    let bad = |what: &str| std::io::Error::other(format!("{}: {what}", path.display()));
    match phase {
        "create" => {
            fill(buf, i);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)?;
            f.write_all(buf)
        }
        "stat" => {
            let m = fs::metadata(&path)?;
            if m.len() != a.size as u64 {
                return Err(bad("wrong length"));
            }
            Ok(())
        }
        "read" => {
            rbuf.clear();
            File::open(&path)?.read_to_end(rbuf)?;
            fill(buf, i);
            if rbuf.len() != a.size || rbuf[..] != buf[..] {
                return Err(bad("wrong contents"));
            }
            Ok(())
        }
        "delete" => fs::remove_file(&path),
        _ => unreachable!("phases are checked in parse_args"),
    }
}

fn run_phase(a: &Args, phase: &str) -> PhaseResult {
    let start = Instant::now();
    let per_thread: Vec<(Vec<u32>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads)
            .map(|k| {
                s.spawn(move || {
                    let mut buf = vec![0u8; a.size];
                    let mut rbuf = Vec::with_capacity(a.size + 1);
                    let mut lat_ns = Vec::with_capacity(a.files / a.threads + 1);
                    let mut errors = 0u64;
                    for i in (k..a.files).step_by(a.threads) {
                        let t = Instant::now();
                        if let Err(e) = op(phase, a, i, &mut buf, &mut rbuf) {
                            if errors < 5 {
                                eprintln!("tarn-fsbench: {phase} {i}: {e}");
                            }
                            errors += 1;
                        }
                        lat_ns.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                    }
                    (lat_ns, errors)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker thread panicked"))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let errors = per_thread.iter().map(|(_, e)| e).sum();
    let mut lat: Vec<u32> = per_thread.into_iter().flat_map(|(l, _)| l).collect();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |&n| n as f64 / 1000.0)
    };
    PhaseResult {
        name: phase.to_string(),
        secs,
        ops_per_s: a.files as f64 / secs,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        errors,
    }
}

fn thread_dirs(a: &Args) -> impl Iterator<Item = PathBuf> + '_ {
    (0..a.threads.min(a.files.max(1))).map(|k| a.dir.join(format!("t{k}")))
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut results = Vec::new();
    for phase in PHASES.iter().filter(|p| a.phases.iter().any(|q| q == *p)) {
        if *phase == "create" {
            for d in thread_dirs(&a) {
                if let Err(e) = fs::create_dir_all(&d) {
                    eprintln!("tarn-fsbench: mkdir {}: {e}", d.display());
                    return ExitCode::FAILURE;
                }
            }
        }
        results.push(run_phase(&a, phase));
        if *phase == "delete" {
            for d in thread_dirs(&a) {
                let _ = fs::remove_dir(&d); // an error here shows in the next run's create
            }
        }
    }
    let errors: u64 = results.iter().map(|r| r.errors).sum();
    if a.json {
        let phases: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|r| {
                let v = serde_json::json!({"secs": r.secs, "ops_per_s": r.ops_per_s,
                    "p50_us": r.p50_us, "p99_us": r.p99_us, "errors": r.errors});
                (r.name.clone(), v)
            })
            .collect();
        let out = serde_json::json!({"dir": a.dir, "files": a.files, "size": a.size,
            "threads": a.threads, "phases": phases});
        println!("{out}");
    } else {
        for r in &results {
            println!(
                "{:6} {} files of {} B, {} threads: {:.0} ops/s ({:.2} s), p50 {:.1} us, p99 {:.1} us, {} errors",
                r.name, a.files, a.size, a.threads, r.ops_per_s, r.secs, r.p50_us, r.p99_us, r.errors
            );
        }
    }
    if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
