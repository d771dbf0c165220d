//! Parity speed (issue 12): GB/s per core of P, PQ and PQR generation and
//! of reconstructing 1, 2 and 3 data columns, on 10-wide RAID-Z with
//! 128 KiB blocks of 4 KiB sectors. Ignored by default; run on the release
//! profile, one thread:
//! ```text
//! cargo test --release -p tarn-engine --lib vdev::raidz::speed -- --ignored --nocapture --test-threads 1
//! ```
//! Figures are bytes of block data (psize, parity not counted) per second;
//! each is the median of 5 runs of at least 0.3 s. Results and the machine's load go in docs/benchmarks.md.

use std::time::{Duration, Instant};

use super::layout::RaidzGeometry;
use super::parity::Parity;
use super::reconstruct::{rebuild, regenerate_parity};
use super::recover::encode;
use super::test_rng::Rng;

const WIDTH: usize = 10;
const BLOCK_BYTES: u64 = 128 << 10;
const RUNS: usize = 5;
const RUN_MIN: Duration = Duration::from_millis(300);

/// Median GB/s (10⁹ bytes of block data per second) of `op`.
fn measure(mut op: impl FnMut()) -> f64 {
    let mut rates: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < RUN_MIN {
                op();
                calls += 1;
            }
            (calls * BLOCK_BYTES) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    rates[RUNS / 2]
}

fn block(nparity: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let map = RaidzGeometry::new(WIDTH, nparity, 12).unwrap().map(0, BLOCK_BYTES).unwrap();
    let data = Rng(0x2545_f491_4f6c_dd1d).bytes(BLOCK_BYTES as usize);
    (encode(&map, &data), data)
}

#[test]
#[ignore = "measurement: run on the release profile with --ignored"]
fn parity_speed() {
    println!("raidz parity, {WIDTH} children, {} KiB blocks, 4 KiB sectors, GB/s of data per core", BLOCK_BYTES >> 10);
    for (name, nparity) in [("P", 1), ("PQ", 2), ("PQR", 3)] {
        let (mut cols, _) = block(nparity);
        let gbps = measure(|| regenerate_parity(nparity, &mut cols, Parity::rows(nparity)));
        println!("generate {name:<4} (raidz{nparity}): {gbps:6.2}");
    }
    let cases: [(&str, usize, &[usize]); 4] = [
        ("1 data column from P", 1, &[1]),
        ("1 data column from Q", 2, &[0, 2]),
        ("2 data columns from PQ", 2, &[2, 3]),
        ("3 data columns from PQR", 3, &[3, 4, 5]),
    ];
    for (name, nparity, targets) in cases {
        let (good, _) = block(nparity);
        let mut cols = good.clone();
        let gbps = measure(|| rebuild(nparity, &mut cols, targets));
        assert!(cols == good, "{name}: rebuilt wrong");
        println!("rebuild  {name:<24} (raidz{nparity}): {gbps:6.2}");
    }
}
