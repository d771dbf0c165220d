//! Every fuzz target body (`tarn_engine::fuzzing`) on stable, as part of
//! `cargo test`: a short, deterministic stand-in for `cargo fuzz run`.
//!
//! Invariants checked, per target:
//! - every seed (a valid encoding) is accepted;
//! - no input panics — seeds, every truncation of each seed, every single-bit
//!   flip of each seed, and `TARN_FUZZ_ITERS` (default 20 000) random or
//!   mutated inputs from a seeded splitmix64 generator (`TARN_FUZZ_SEED`
//!   picks the seed; the one used is printed);
//! - the round-trip assertions inside the bodies hold for whatever decodes;
//! - no single heap allocation exceeds the target's bound for the input's
//!   length (a counting global allocator watches this thread);
//! - no input takes more than [`SLOW_INPUT`] (a hang detector, not a benchmark).
//!
//! A failing input is written to `$CARGO_TARGET_TMPDIR/fuzz-smoke/<target>-*`
//! so that `cargo fuzz run <target> <file>` replays it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use tarn_engine::fuzzing::{self, Outcome, Target};

/// Random or mutated inputs per target unless `TARN_FUZZ_ITERS` says otherwise.
const DEFAULT_ITERS: u64 = 20_000;
/// Bit flips per seed beyond which positions are sampled rather than all tried.
const MAX_FLIPS_PER_SEED: usize = 16 << 10;
/// One input taking this long means a runaway loop.
const SLOW_INPUT: Duration = Duration::from_secs(5);
/// Nothing a body does legitimately comes near this; refusing it turns a wild
/// allocation into a clear failure instead of an OOM kill.
const ALLOC_REFUSE_BYTES: usize = 256 << 20;

thread_local! {
    static LARGEST_ALLOC: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, remembering the largest request made on each thread.
struct Tracking;

fn note(size: usize) {
    let _ = LARGEST_ALLOC.try_with(|c| c.set(c.get().max(size)));
}

// SAFETY: every call forwards to `System` with the caller's arguments; the
// only addition is bookkeeping in a thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > ALLOC_REFUSE_BYTES {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > ALLOC_REFUSE_BYTES {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        if new_size > ALLOC_REFUSE_BYTES {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// splitmix64: tiny, seedable, good enough to drive mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={v:?} is not a number"),
    }
}

/// Runs one input through `t`, failing loudly (with a replayable file) on a
/// panic, an oversized allocation or a runaway.
struct Runner<'t> {
    t: &'t Target,
    runs: u64,
    accepted: u64,
    slowest: Duration,
}

impl<'t> Runner<'t> {
    fn new(t: &'t Target) -> Self {
        Runner { t, runs: 0, accepted: 0, slowest: Duration::ZERO }
    }

    fn run(&mut self, input: &[u8], case: &dyn Fn() -> String) -> Outcome {
        LARGEST_ALLOC.with(|c| c.set(0));
        let start = Instant::now();
        let result = panic::catch_unwind(AssertUnwindSafe(|| (self.t.run)(input)));
        let took = start.elapsed();
        let largest = LARGEST_ALLOC.with(|c| c.get());
        let limit = (self.t.alloc_limit_bytes)(input.len());
        let problem = match &result {
            Err(_) => Some("panicked".to_string()),
            Ok(_) if largest > limit => Some(format!("allocated {largest} bytes at once (limit {limit})")),
            Ok(_) if took > SLOW_INPUT => Some(format!("took {took:?}")),
            Ok(_) => None,
        };
        if let Some(p) = problem {
            let file = self.save(input);
            panic!("target {}: {} on {} ({} bytes, saved to {})", self.t.name, p, case(), input.len(), file);
        }
        self.runs += 1;
        self.slowest = self.slowest.max(took);
        let outcome = result.expect("panics handled above");
        if outcome == Outcome::Accepted {
            self.accepted += 1;
        }
        outcome
    }

    fn save(&self, input: &[u8]) -> String {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-smoke");
        let file = dir.join(format!("{}-{:016x}", self.t.name, fnv1a(input)));
        let saved = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&file, input));
        match saved {
            Ok(()) => file.display().to_string(),
            Err(e) => format!("nowhere ({e})"),
        }
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

/// Values that sit on the edges decoders compare against.
const INTERESTING: [u64; 12] =
    [0, 1, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0xffff, 0x1_0000, u32::MAX as u64, u64::MAX - 1, u64::MAX];

/// Applies 1-8 random edits to `v`; `other` is a second seed to splice from.
fn mutate(rng: &mut Rng, v: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..1 + rng.below(8) {
        let pos = rng.below(v.len() + 1);
        match rng.below(9) {
            0 if pos < v.len() => v[pos] ^= 1 << rng.below(8),
            1 if pos < v.len() => v[pos] = rng.next() as u8,
            2 => {
                let width = [1, 2, 4, 8][rng.below(4)];
                let val = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                let end = (pos + width).min(v.len());
                v[pos..end].copy_from_slice(&val[..end - pos]);
            }
            3 => v.truncate(pos),
            4 => {
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(pos..pos, bytes);
            }
            5 => {
                let end = (pos + 1 + rng.below(32)).min(v.len());
                v.drain(pos..end);
            }
            6 => {
                let len = rng.below(v.len() - pos + 1).min(256);
                let chunk = v[pos..pos + len].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, chunk);
            }
            7 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = (1 + rng.below(64)).min(other.len() - from);
                let end = (pos + len).min(v.len());
                v.splice(pos..end, other[from..from + len].iter().copied());
            }
            _ => v.extend(std::iter::repeat_n(0xff, 1 + rng.below(10))),
        }
    }
}

/// Every truncation and every single-bit flip of `seed` (flips sampled when
/// the seed is large).
fn truncations_and_flips(r: &mut Runner, rng: &mut Rng, i: usize, seed: &[u8]) {
    for len in 0..seed.len() {
        r.run(&seed[..len], &|| format!("seed {i} truncated to {len} bytes"));
    }
    let bits = seed.len() * 8;
    let flips: Vec<usize> = if bits <= MAX_FLIPS_PER_SEED {
        (0..bits).collect()
    } else {
        (0..MAX_FLIPS_PER_SEED).map(|_| rng.below(bits)).collect()
    };
    let mut v = seed.to_vec();
    for bit in flips {
        v[bit / 8] ^= 1 << (bit % 8);
        r.run(&v, &|| format!("seed {i} with bit {bit} flipped"));
        v[bit / 8] ^= 1 << (bit % 8);
    }
}

/// glibc serves allocations of 128 KiB and more with fresh `mmap`s, so a
/// body that builds a 128 KiB indirect block would spend most of its time in
/// page faults. Keeping such buffers on the heap makes the smoke test several
/// times faster; it changes nothing the targets check.
fn keep_large_buffers_on_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: mallopt only tunes glibc's allocator; it is called once,
        // before this thread allocates the buffers in question.
        ONCE.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        });
    }
}

fn smoke(name: &str) {
    keep_large_buffers_on_the_heap();
    let t = fuzzing::target(name).expect("target exists");
    let seed = env_u64("TARN_FUZZ_SEED").unwrap_or(0x7a72_6e5f_6675_7a7a ^ fnv1a(name.as_bytes()));
    let iters = env_u64("TARN_FUZZ_ITERS").unwrap_or(DEFAULT_ITERS);
    eprintln!("fuzz_smoke {name}: TARN_FUZZ_SEED={seed} TARN_FUZZ_ITERS={iters}");
    let mut rng = Rng(seed);
    let mut r = Runner::new(t);
    let start = Instant::now();
    let seeds = (t.seeds)();
    assert!(!seeds.is_empty());
    for (i, s) in seeds.iter().enumerate() {
        let outcome = r.run(s, &|| format!("seed {i}"));
        assert_eq!(outcome, Outcome::Accepted, "target {name}: valid seed {i} was rejected");
        truncations_and_flips(&mut r, &mut rng, i, s);
    }
    let max_len = seeds.iter().map(Vec::len).max().unwrap_or(0).max(64);
    for n in 0..iters {
        let input = if rng.below(4) == 0 {
            let len = rng.below(2 * max_len + 1);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut v = seeds[rng.below(seeds.len())].clone();
            let other = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, &mut v, other);
            v
        };
        r.run(&input, &|| format!("random input {n} (TARN_FUZZ_SEED={seed})"));
    }
    eprintln!(
        "fuzz_smoke {name}: {} inputs, {} accepted, slowest {:?}, {:?} in all",
        r.runs,
        r.accepted,
        r.slowest,
        start.elapsed()
    );
}

#[test]
fn blockptr() {
    smoke("blockptr");
}

#[test]
fn label() {
    smoke("label");
}

#[test]
fn uberblock() {
    smoke("uberblock");
}

#[test]
fn dnode() {
    smoke("dnode");
}

#[test]
fn kv() {
    smoke("kv");
}

#[test]
fn spacelog() {
    smoke("spacelog");
}

#[test]
fn block_decode() {
    smoke("block_decode");
}

#[test]
fn indirect() {
    smoke("indirect");
}

#[test]
fn brt() {
    smoke("brt");
}

#[test]
fn l2arc() {
    smoke("l2arc");
}

#[test]
fn probe() {
    smoke("probe");
}

#[test]
fn event() {
    smoke("event");
}

#[test]
fn zil() {
    smoke("zil");
}

/// Every target has a test above (a new target without one fails here).
#[test]
fn every_target_is_smoked() {
    let tested =
        ["blockptr", "label", "uberblock", "dnode", "kv", "spacelog", "block_decode", "indirect", "l2arc", "brt", "probe", "event", "zil"];
    let names: Vec<&str> = fuzzing::TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, tested);
}

/// Writes each target's seeds to `$TARN_FUZZ_SEED_DIR/<target>/seed-<n>`
/// (the cargo-fuzz seed corpus; `fuzz/gen-seeds.sh` runs this). Does nothing
/// without the variable.
#[test]
fn write_seed_corpus() {
    let Some(dir) = std::env::var_os("TARN_FUZZ_SEED_DIR") else { return };
    for t in fuzzing::TARGETS {
        let d = std::path::Path::new(&dir).join(t.name);
        std::fs::create_dir_all(&d).expect("create seed dir");
        for (i, s) in (t.seeds)().iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i}")), s).expect("write seed");
        }
    }
}
