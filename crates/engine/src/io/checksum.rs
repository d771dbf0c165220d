//! Block checksums.
//!
//! Every block's checksum is stored in its parent's block pointer, computed
//! over the block's physical (stored, possibly compressed) bytes. Two
//! algorithms: fletcher4 (OpenZFS's default `checksum=on`: four running sums of
//! 32-bit words, fast, not cryptographic) and BLAKE3 (cryptographic, SIMD
//! accelerated). Metadata always uses the pool's metadata checksum (blake3);
//! data follows the dataset's `checksum` property.

use tarn_ondisk::bp::{ChecksumType, Cksum};

/// Fletcher-4 over little-endian 32-bit words; a trailing partial word is
/// zero-padded. Four running sums, each the running sum of the one before:
/// `a = Σ w`, `b = Σ a`, `c = Σ b`, `d = Σ c`, all modulo 2^64.
///
/// Computed in four lanes (OpenZFS's "superscalar4" and AVX2 variants):
/// lane j sums words j, j+4, j+8 … on its own, so no addition waits for
/// the one before it, and the four lanes fit one 256-bit register; the
/// lanes' sums are combined into the serial ones at the end (`combine`).
/// With AVX2 (checked at run time) the lanes are one register per sum;
/// without, the same loop runs on scalar registers. Same result either way, and the
/// same as the one-word-at-a-time definition (`fletcher4_serial`, which
/// the tests hold it to); a scrub spends most of its CPU here.
pub fn fletcher4(data: &[u8]) -> Cksum {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above), the only
            // requirement of calling a function compiled for it.
            return unsafe { fletcher4_avx2(data) };
        }
    }
    fletcher4_lanes(data)
}

/// The four lanes in one 256-bit register per sum: each 16-byte group's
/// four words widened to 64 bits and added lane by lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fletcher4_avx2(data: &[u8]) -> Cksum {
    use std::arch::x86_64::*;
    let mut groups = data.chunks_exact(16);
    let (mut a, mut b, mut c, mut d) = (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
    for g in &mut groups {
        // SAFETY: `g` is 16 readable bytes; the load has no alignment
        // requirement.
        let w = _mm256_cvtepu32_epi64(unsafe { _mm_loadu_si128(g.as_ptr().cast()) });
        a = _mm256_add_epi64(a, w);
        b = _mm256_add_epi64(b, a);
        c = _mm256_add_epi64(c, b);
        d = _mm256_add_epi64(d, c);
    }
    let mut lanes = [[0u64; 4]; 4];
    for (out, v) in lanes.iter_mut().zip([a, b, c, d]) {
        // SAFETY: `out` is 32 writable bytes; the store has no alignment
        // requirement.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
    }
    encode(serial_from(combine(&lanes), groups.remainder()))
}

/// The four-lane loop over whole 16-byte groups, on scalar registers; the
/// words left over (at most three, and a partial one) are added serially
/// after the combine.
fn fletcher4_lanes(data: &[u8]) -> Cksum {
    let mut lanes = [[0u64; 4]; 4];
    let mut groups = data.chunks_exact(16);
    for g in &mut groups {
        let [a, b, c, d] = &mut lanes;
        for j in 0..4 {
            let w = u32::from_le_bytes([g[4 * j], g[4 * j + 1], g[4 * j + 2], g[4 * j + 3]]) as u64;
            a[j] = a[j].wrapping_add(w);
            b[j] = b[j].wrapping_add(a[j]);
            c[j] = c[j].wrapping_add(b[j]);
            d[j] = d[j].wrapping_add(c[j]);
        }
    }
    encode(serial_from(combine(&lanes), groups.remainder()))
}

/// The serial sums of 4m words from the sums of their four lanes, lane j
/// holding words j, j+4 … (derivation: word k = 4i + j is counted n − k =
/// 4t − j times in `b`, t = m − i the times its lane counted it; expand
/// the binomial weights of `c` and `d` in t the same way). Modulo 2^64,
/// as the sums are.
fn combine(l: &[[u64; 4]; 4]) -> [u64; 4] {
    let [a, b, c, d] = l;
    let w = |v: &[u64; 4], k: [u64; 4]| (0..4).fold(0u64, |s, j| s.wrapping_add(v[j].wrapping_mul(k[j])));
    let sa = w(a, [1, 1, 1, 1]);
    let sb = w(b, [4, 4, 4, 4]).wrapping_sub(w(a, [0, 1, 2, 3]));
    let sc = w(c, [16, 16, 16, 16]).wrapping_sub(w(b, [6, 10, 14, 18])).wrapping_add(w(a, [0, 0, 1, 3]));
    let sd = w(d, [64, 64, 64, 64]).wrapping_sub(w(c, [48, 64, 80, 96])).wrapping_add(w(b, [4, 10, 20, 34])).wrapping_sub(w(a, [0, 0, 0, 1]));
    [sa, sb, sc, sd]
}

/// Continues the serial sums over `rest` (a trailing partial word
/// zero-padded).
fn serial_from(mut s: [u64; 4], rest: &[u8]) -> [u64; 4] {
    for w in rest.chunks(4) {
        let mut word = [0u8; 4];
        word[..w.len()].copy_from_slice(w);
        s[0] = s[0].wrapping_add(u32::from_le_bytes(word) as u64);
        s[1] = s[1].wrapping_add(s[0]);
        s[2] = s[2].wrapping_add(s[1]);
        s[3] = s[3].wrapping_add(s[2]);
    }
    s
}

fn encode(s: [u64; 4]) -> Cksum {
    let mut out = [0u8; 32];
    for (i, v) in s.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// The definition, one word at a time: what `fletcher4` must equal.
#[cfg(test)]
fn fletcher4_serial(data: &[u8]) -> Cksum {
    encode(serial_from([0; 4], data))
}

pub fn compute(kind: ChecksumType, data: &[u8]) -> Cksum {
    match kind {
        ChecksumType::Off => [0; 32],
        ChecksumType::Fletcher4 => fletcher4(data),
        ChecksumType::Blake3 => *blake3::hash(data).as_bytes(),
    }
}

/// True when `data` matches `expected` (always true for `Off`).
pub fn verify(kind: ChecksumType, data: &[u8], expected: &Cksum) -> bool {
    kind == ChecksumType::Off || compute(kind, data) == *expected
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fletcher4_known_values() {
        // words 1,2: a=3, b=1+3=4, c=1+4=5, d=1+5=6
        let mut data = Vec::new();
        data.extend_from_slice(&1u32.to_le_bytes());
        data.extend_from_slice(&2u32.to_le_bytes());
        let c = fletcher4(&data);
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(c[8..16].try_into().unwrap()), 4);
        assert_eq!(u64::from_le_bytes(c[16..24].try_into().unwrap()), 5);
        assert_eq!(u64::from_le_bytes(c[24..32].try_into().unwrap()), 6);
    }

    /// The four-lane sum equals the serial definition at every length
    /// around the 16-byte groups (partial words and leftover words
    /// included), on data whose sums wrap, and on the vectorised path and
    /// the scalar one alike.
    #[test]
    fn lanes_match_the_serial_definition() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..(1 << 17) + 37).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
        let lens = (0..=80).chain([4095, 4096, 4097, 131_072, 1 << 16, (1 << 16) + 37]);
        for len in lens {
            let d = &data[..len];
            assert_eq!(fletcher4(d), fletcher4_serial(d), "length {len}");
            assert_eq!(fletcher4_lanes(d), fletcher4_serial(d), "length {len}, scalar lanes");
        }
        // Sums that wrap modulo 2^64: every word 0xffff_ffff over 1 MiB.
        let ones = vec![0xffu8; 1 << 20];
        assert_eq!(fletcher4(&ones), fletcher4_serial(&ones));
    }

    #[test]
    fn detects_flips() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        for kind in [ChecksumType::Fletcher4, ChecksumType::Blake3] {
            let c = compute(kind, &data);
            assert!(verify(kind, &data, &c));
            let mut bad = data.clone();
            bad[1000] ^= 4;
            assert!(!verify(kind, &bad, &c));
        }
    }
}
