//! Rebuilding known-missing columns of one block from the others.
//!
//! Up to `nparity` columns, data or parity, may be missing. Missing data
//! columns `x_0 … x_{m−1}` are solved from `m` surviving parity rows `k_a`:
//! ```text
//!   S_a = stored parity k_a ⊕ parity k_a of the surviving data columns
//!       = Σ_b coef(k_a, x_b) · D_{x_b}          (the missing columns' share)
//!   D_{x_b} = Σ_a A⁻¹[b][a] · S_a,   A[a][b] = coef(k_a, x_b)
//! ```
//! The syndromes come from the fast generator ([`parity::generate`] with the
//! missing columns empty); `A` is at most 3 × 3 and is inverted once per
//! block; applying `A⁻¹` to the columns takes one 256-entry table per
//! coefficient ([`gf::MulTable`]), all terms of a column in one pass
//! ([`gf::combine`]), and a plain copy where the coefficient is 1 —
//! so one missing data column with P surviving costs a P generation.
//! `A` is always invertible: its columns are distinct powers `x` of the
//! generator raised to 0, 1 or 2 — a Vandermonde matrix or one of its
//! 2 × 2 minors, whose determinants are products of `x_a ⊕ x_b ≠ 0`.
//! Missing parity columns are then generated again from the full data.

use super::gf::{self, MulTable, SOLVE_MAX};
use super::parity::{self, Parity};

/// Overwrites the columns named in `targets` (indices into `columns`,
/// parity first, sorted, distinct, at most `nparity`) with their contents
/// computed from the other columns. `columns` hold one block: parity
/// columns of one length, data columns that long or shorter.
pub fn rebuild(nparity: usize, columns: &mut [Vec<u8>], targets: &[usize]) {
    let missing_parity = rebuild_data(nparity, columns, targets);
    if !missing_parity.is_empty() {
        regenerate_parity(nparity, columns, &missing_parity);
    }
}

/// [`rebuild`] of the data columns among `targets` only, leaving target
/// parity columns as they are; returns the target parity rows. What a
/// reconstruction attempt needs before it checks the block's checksum.
pub fn rebuild_data(nparity: usize, columns: &mut [Vec<u8>], targets: &[usize]) -> Vec<Parity> {
    let rows = Parity::rows(nparity);
    assert!(columns.len() > nparity, "raidz block without data columns");
    assert!(targets.len() <= nparity, "{} targets, raidz{nparity}", targets.len());
    assert!(targets.windows(2).all(|w| w[0] < w[1]), "targets unsorted: {targets:?}");
    assert!(targets.iter().all(|t| *t < columns.len()));
    let missing_data: Vec<usize> = targets.iter().filter(|t| **t >= nparity).map(|t| t - nparity).collect();
    let missing_parity: Vec<Parity> = rows.iter().copied().filter(|r| targets.contains(&r.column())).collect();
    if !missing_data.is_empty() {
        let solvers: Vec<Parity> = rows
            .iter()
            .copied()
            .filter(|r| !missing_parity.contains(r))
            .take(missing_data.len())
            .collect();
        assert_eq!(solvers.len(), missing_data.len(), "too few parity columns survive");
        solve_data(nparity, columns, &missing_data, &solvers);
    }
    missing_parity
}

/// Computes missing data columns `missing` (data indices) from the
/// surviving parity rows `solvers`, one per missing column.
fn solve_data(nparity: usize, columns: &mut [Vec<u8>], missing: &[usize], solvers: &[Parity]) {
    let ndata = columns.len() - nparity;
    let len = columns[0].len();
    let syndromes = syndromes(nparity, columns, missing, solvers);
    let mut a = [[0u8; SOLVE_MAX]; SOLVE_MAX];
    for (ai, row) in solvers.iter().enumerate() {
        for (bi, x) in missing.iter().enumerate() {
            a[ai][bi] = row.coefficient(*x, ndata);
        }
    }
    let a_inv = gf::invert(a, missing.len()).expect("raidz coefficient matrices are Vandermonde minors, never singular");
    for (bi, x) in missing.iter().enumerate() {
        let out = &mut columns[nparity + x];
        assert!(out.len() <= len);
        let out_len = out.len();
        let tables: Vec<MulTable> = (0..syndromes.len()).map(|ai| MulTable::new(a_inv[bi][ai])).collect();
        let terms: Vec<(&MulTable, &[u8])> = tables.iter().zip(&syndromes).map(|(t, s)| (t, &s[..out_len])).collect();
        gf::combine(out, &terms);
    }
}

/// `S_a` of each solver row: its stored parity xor the parity of the
/// surviving data columns (missing ones as empty, i.e. zero).
fn syndromes(nparity: usize, columns: &[Vec<u8>], missing: &[usize], solvers: &[Parity]) -> Vec<Vec<u8>> {
    let len = columns[0].len();
    let data: Vec<&[u8]> = columns[nparity..]
        .iter()
        .enumerate()
        .map(|(i, c)| if missing.contains(&i) { &[][..] } else { &c[..] })
        .collect();
    let mut syndromes = vec![vec![0u8; len]; solvers.len()];
    let mut out: Vec<&mut [u8]> = syndromes.iter_mut().map(|s| &mut s[..]).collect();
    parity::generate(&data, solvers, &mut out);
    for (s, row) in syndromes.iter_mut().zip(solvers) {
        parity::xor_into(s, &columns[row.column()]);
    }
    syndromes
}

/// Generates parity rows `rows` into their columns from the data columns.
pub fn regenerate_parity(nparity: usize, columns: &mut [Vec<u8>], rows: &[Parity]) {
    let (parity_cols, data_cols) = columns.split_at_mut(nparity);
    let data: Vec<&[u8]> = data_cols.iter().map(|c| &c[..]).collect();
    let mut out: Vec<&mut [u8]> = Vec::with_capacity(rows.len());
    for (i, col) in parity_cols.iter_mut().enumerate() {
        if rows.iter().any(|r| r.column() == i) {
            out.push(&mut col[..]);
        }
    }
    let ordered: Vec<Parity> = Parity::rows(nparity).iter().copied().filter(|r| rows.contains(r)).collect();
    parity::generate(&data, &ordered, &mut out);
}

#[cfg(test)]
mod tests {
    use super::super::test_rng::Rng;
    use super::*;

    /// A block of `ndata` columns of `len` bytes (the last `short` of them
    /// 8 bytes shorter) with its parity.
    fn block(nparity: usize, ndata: usize, len: usize, short: usize) -> Vec<Vec<u8>> {
        let mut rng = Rng(0x1234_5678);
        let mut columns = vec![vec![0u8; len]; nparity];
        for i in 0..ndata {
            let l = if i + short >= ndata { len - 8 } else { len };
            columns.push(rng.bytes(l));
        }
        regenerate_parity(nparity, &mut columns, Parity::rows(nparity));
        columns
    }

    /// Every set of up to nparity targets, on a small block: the rebuilt
    /// columns equal the originals.
    #[test]
    fn rebuilds_every_target_set() {
        for nparity in 1..=3 {
            let good = block(nparity, 5, 64, 2);
            let n = good.len();
            for mask in 1u32..(1 << n) {
                if mask.count_ones() as usize > nparity {
                    continue;
                }
                let targets: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
                let mut cols = good.clone();
                for t in &targets {
                    cols[*t].fill(0x5a);
                }
                rebuild(nparity, &mut cols, &targets);
                assert!(cols == good, "raidz{nparity} targets {targets:?}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "targets")]
    fn more_targets_than_parity_is_a_caller_bug() {
        let mut cols = block(1, 3, 16, 0);
        rebuild(1, &mut cols, &[1, 2]);
    }
}
