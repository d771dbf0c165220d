//! Parity generation: P, Q and R of a block's data columns.
//!
//! With data columns `D_0 … D_{n−1}` (byte `j` of each), the parities are
//! ```text
//!   P = D_0 ⊕ D_1 ⊕ … ⊕ D_{n−1}
//!   Q = 2^{n−1}·D_0 ⊕ 2^{n−2}·D_1 ⊕ … ⊕ D_{n−1}
//!   R = 4^{n−1}·D_0 ⊕ 4^{n−2}·D_1 ⊕ … ⊕ D_{n−1}
//! ```
//! computed by Horner's rule, column by column: `Q ← 2·Q ⊕ D_i`,
//! `R ← 4·R ⊕ D_i`, so generation only ever multiplies by 2, which
//! [`gf::mul2_lanes`] does to eight bytes in a handful of integer
//! instructions (the compiler widens the loops to the vector registers).
//! Row `r` of parity row P/Q/R has coefficient [`Parity::coefficient`] for
//! data column `i`; reconstruction solves with exactly these.
//!
//! A data column shorter than the parity (the short columns of a block's
//! last row) counts as zero past its end, as does an empty slice — which is
//! how reconstruction computes a syndrome: the parity of the surviving
//! columns alone.
//!
//! Work goes in tiles of [`TILE_BYTES`] of every column, so the parity being
//! accumulated stays in the first-level cache however large the block.

use super::gf;

/// Bytes of each column processed together; three parity tiles and a data
/// tile fit the smallest level-1 data caches (32 KiB) with room to spare.
pub const TILE_BYTES: usize = 4096;

/// Bytes of one SWAR lane; every column length is a multiple of it (columns
/// are whole sectors).
const LANE_BYTES: usize = 8;

/// One parity row of a RAID-Z stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Parity {
    P,
    Q,
    R,
}

impl Parity {
    /// The rows of a vdev with `nparity` parity columns, in column order.
    pub fn rows(nparity: usize) -> &'static [Parity] {
        assert!((1..=3).contains(&nparity), "raidz parity {nparity}");
        &[Parity::P, Parity::Q, Parity::R][..nparity]
    }

    /// The column this parity occupies in a map (parity comes first).
    pub fn column(self) -> usize {
        self as usize
    }

    fn generator(self) -> u8 {
        match self {
            Parity::P => 1,
            Parity::Q => 2,
            Parity::R => 4,
        }
    }

    /// Coefficient of data column `i` of `n` in this row: `g^(n−1−i)`.
    pub fn coefficient(self, i: usize, n: usize) -> u8 {
        assert!(i < n);
        gf::pow(self.generator(), n - 1 - i)
    }
}

/// Computes the parity rows `rows` of `data` into `out` (same order, same
/// count). Every `out` buffer has one length, a multiple of 8; every data
/// column is at most that long, a multiple of 8 too, and zero past its end.
pub fn generate(data: &[&[u8]], rows: &[Parity], out: &mut [&mut [u8]]) {
    assert_eq!(rows.len(), out.len());
    assert!(!data.is_empty(), "parity of no data columns");
    let Some(len) = out.first().map(|o| o.len()) else { return };
    assert_eq!(len % LANE_BYTES, 0, "parity length {len}");
    for o in out.iter() {
        assert_eq!(o.len(), len);
    }
    for d in data {
        assert!(d.len() <= len, "data column longer than its parity");
        assert_eq!(d.len() % LANE_BYTES, 0, "data column length {}", d.len());
    }
    for start in (0..len).step_by(TILE_BYTES) {
        let end = (start + TILE_BYTES).min(len);
        for (row, acc) in rows.iter().zip(out.iter_mut()) {
            generate_tile(*row, data, &mut acc[start..end], start);
        }
    }
}

/// One row's tile `[start, start + acc.len())`, Horner over the columns.
fn generate_tile(row: Parity, data: &[&[u8]], acc: &mut [u8], start: usize) {
    let end = start + acc.len();
    for (i, d) in data.iter().enumerate() {
        let d = &d[start.min(d.len())..end.min(d.len())];
        let (head, tail) = acc.split_at_mut(d.len());
        if i == 0 {
            head.copy_from_slice(d);
            tail.fill(0);
            continue;
        }
        match row {
            Parity::P => xor_into(head, d),
            Parity::Q => horner_step::<1>(head, d),
            Parity::R => horner_step::<2>(head, d),
        }
        match row {
            Parity::P => {}
            Parity::Q => horner_scale::<1>(tail),
            Parity::R => horner_scale::<2>(tail),
        }
    }
}

/// Eight bytes as one lane, little-endian. Written with a slice pattern and
/// shifts rather than `try_into`/`from_le_bytes`: the optimiser turns it
/// into one load all the same, and the test profile (opt-level 1, debug
/// assertions) does not pay a function call per lane.
#[inline(always)]
fn lane(bytes: &[u8]) -> u64 {
    let &[b0, b1, b2, b3, b4, b5, b6, b7] = bytes else { panic!("lane of {} bytes", bytes.len()) };
    b0 as u64
        | (b1 as u64) << 8
        | (b2 as u64) << 16
        | (b3 as u64) << 24
        | (b4 as u64) << 32
        | (b5 as u64) << 40
        | (b6 as u64) << 48
        | (b7 as u64) << 56
}

#[inline(always)]
fn set_lane(bytes: &mut [u8], v: u64) {
    let [b0, b1, b2, b3, b4, b5, b6, b7] = bytes else { panic!("lane of {} bytes", bytes.len()) };
    *b0 = v as u8;
    *b1 = (v >> 8) as u8;
    *b2 = (v >> 16) as u8;
    *b3 = (v >> 24) as u8;
    *b4 = (v >> 32) as u8;
    *b5 = (v >> 40) as u8;
    *b6 = (v >> 48) as u8;
    *b7 = (v >> 56) as u8;
}

/// `acc ^= d`.
pub(super) fn xor_into(acc: &mut [u8], d: &[u8]) {
    assert_eq!(acc.len(), d.len());
    for (a, d) in acc.chunks_exact_mut(LANE_BYTES).zip(d.chunks_exact(LANE_BYTES)) {
        set_lane(a, lane(a) ^ lane(d));
    }
}

/// `acc = 2^DOUBLINGS · acc ⊕ d`.
fn horner_step<const DOUBLINGS: u32>(acc: &mut [u8], d: &[u8]) {
    assert_eq!(acc.len(), d.len());
    for (a, d) in acc.chunks_exact_mut(LANE_BYTES).zip(d.chunks_exact(LANE_BYTES)) {
        let mut v = lane(a);
        for _ in 0..DOUBLINGS {
            v = gf::mul2_lanes(v);
        }
        set_lane(a, v ^ lane(d));
    }
}

/// `acc = 2^DOUBLINGS · acc`: a column that has ended.
fn horner_scale<const DOUBLINGS: u32>(acc: &mut [u8]) {
    for a in acc.chunks_exact_mut(LANE_BYTES) {
        let mut v = lane(a);
        for _ in 0..DOUBLINGS {
            v = gf::mul2_lanes(v);
        }
        set_lane(a, v);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_rng::Rng;
    use super::*;

    /// Parity by the definition: byte by byte, coefficient by coefficient.
    fn slow_parity(data: &[&[u8]], row: Parity, len: usize) -> Vec<u8> {
        let n = data.len();
        (0..len)
            .map(|j| {
                data.iter().enumerate().fold(0u8, |acc, (i, d)| {
                    acc ^ gf::mul(row.coefficient(i, n), d.get(j).copied().unwrap_or(0))
                })
            })
            .collect()
    }

    /// Several tiles, short and empty columns: the fast generation equals
    /// the definition for every row and every subset of rows.
    #[test]
    fn generation_matches_definition() {
        let len = 3 * TILE_BYTES + 512;
        for ndata in [1, 2, 5, 9] {
            let cols: Vec<Vec<u8>> = (0..ndata)
                .map(|i| match i {
                    _ if i + 1 == ndata && ndata > 2 => Vec::new(),
                    _ if i >= ndata / 2 && i > 0 => Rng(i as u64).bytes(len - 512),
                    _ => Rng(i as u64).bytes(len),
                })
                .collect();
            let data: Vec<&[u8]> = cols.iter().map(|c| &c[..]).collect();
            for rows in [&[Parity::P][..], &[Parity::Q], &[Parity::R], &[Parity::P, Parity::Q, Parity::R], &[Parity::Q, Parity::R]] {
                let mut bufs = vec![vec![0xaau8; len]; rows.len()];
                let mut out: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                generate(&data, rows, &mut out);
                for (row, got) in rows.iter().zip(&bufs) {
                    assert!(got == &slow_parity(&data, *row, len), "{row:?} of {ndata} columns");
                }
            }
        }
    }

    #[test]
    fn rows_and_coefficients() {
        assert_eq!(Parity::rows(2), &[Parity::P, Parity::Q]);
        assert_eq!(Parity::R.column(), 2);
        assert_eq!(Parity::P.coefficient(0, 5), 1);
        assert_eq!(Parity::Q.coefficient(0, 5), 16);
        assert_eq!(Parity::R.coefficient(3, 5), 4);
        assert_eq!(Parity::Q.coefficient(4, 5), 1);
    }
}
