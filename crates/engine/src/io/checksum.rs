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
/// zero-padded. Four lanes are summed independently and combined at the end,
/// which lets the CPU overlap the additions (the "superscalar" variant).
pub fn fletcher4(data: &[u8]) -> Cksum {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(4);
    for w in &mut chunks {
        let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut w = [0u8; 4];
        w[..rem.len()].copy_from_slice(rem);
        let v = u32::from_le_bytes(w) as u64;
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let mut out = [0u8; 32];
    out[0..8].copy_from_slice(&a.to_le_bytes());
    out[8..16].copy_from_slice(&b.to_le_bytes());
    out[16..24].copy_from_slice(&c.to_le_bytes());
    out[24..32].copy_from_slice(&d.to_le_bytes());
    out
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
