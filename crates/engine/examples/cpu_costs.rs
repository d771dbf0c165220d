//! Measures the per-byte CPU cost of the write path's stages on this machine:
//! lz4 and zstd on incompressible data, fletcher4, blake3, memcpy.
use std::time::Instant;
use tarn_engine::io::{checksum, compress};

fn main() {
    let mut x = 7u64;
    let data: Vec<u8> = (0..1 << 20).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
    let n = 256;
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(compress::compress(compress::CompressSetting::Lz4, &data, 4096)); }
    println!("lz4 (incompressible): {:.0} MiB/s", n as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(checksum::fletcher4(&data)); }
    println!("fletcher4: {:.0} MiB/s", n as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(fletcher4_one_word_at_a_time(std::hint::black_box(&data))); }
    println!("fletcher4, one word at a time (before the four lanes): {:.0} MiB/s", n as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for _ in 0..n { std::hint::black_box(blake3::hash(&data)); }
    println!("blake3: {:.0} MiB/s", n as f64 / t.elapsed().as_secs_f64());
    let mut dst = vec![0u8; 1 << 20];
    let t = Instant::now();
    for _ in 0..n { dst.copy_from_slice(&data); std::hint::black_box(&dst); }
    println!("memcpy: {:.0} MiB/s", n as f64 / t.elapsed().as_secs_f64());
}

/// The loop `checksum::fletcher4` ran before it summed four lanes, for
/// comparison.
fn fletcher4_one_word_at_a_time(data: &[u8]) -> [u64; 4] {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    for w in data.chunks_exact(4) {
        a = a.wrapping_add(u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    [a, b, c, d]
}
