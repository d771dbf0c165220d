//! A block on RAID-Z: into columns with parity ([`encode`]), back together
//! from its data columns ([`assemble`]), and recovered when columns are
//! missing or silently wrong ([`recover`]).
//!
//! ## Reading
//! 1. Healthy: read the data columns only, [`assemble`], verify the
//!    block's checksum. Parity is not touched.
//! 2. Otherwise (a column failed to read, or the checksum failed): read
//!    every column that can be read and call [`recover`]. A scrub calls it
//!    directly, to verify parity too.
//!
//! ## Combinatorial reconstruction
//! [`recover`] knows which columns are missing (`None`), not which of the
//! others are silently wrong. It tries, in order of size, every set `S` of
//! present columns with `|S| + missing ≤ nparity`: rebuild the missing
//! columns and `S` from the rest, assemble, verify the checksum. The first
//! block that verifies is the answer; sets of parity columns alone are
//! skipped (they cannot change the data). Then all parity is generated
//! again from the good data, and every column whose read contents differ
//! from the truth is reported, with its correct bytes, for the caller to
//! write back — the damaged ones found and also unused parity that was wrong.
//!
//! With `nparity + 1` or more damaged columns, every attempt leaves at
//! least one wrong column in play (a damaged data column outside `S`, or a
//! damaged parity row used to solve `S`), so no attempt verifies and the
//! answer is an error, never data that fails its checksum.
//!
//! ## Bounds
//! At most `Σ_{n ≤ nparity} C(width, n)` attempts — 299 for RAID-Z3 of 12
//! columns, 292 once the sets of parity alone are skipped — each one
//! block's reconstruction. The padding at the end of the
//! last data column (a block that is not whole sectors) is zero by
//! definition: it is zeroed before reconstruction, so damage there is
//! repaired but never stands in the way.

use std::fmt;

use super::layout::RaidzMap;
use super::parity::Parity;
use super::reconstruct::{rebuild_data, regenerate_parity};

/// Why a column is rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairCause {
    /// It could not be read.
    Missing,
    /// It was read, and its contents were wrong.
    Damaged,
}

/// A column to write back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub column: usize,
    pub cause: RepairCause,
    /// The column's correct contents.
    pub bytes: Vec<u8>,
}

/// A block recovered by [`recover`].
#[derive(Debug)]
pub struct Recovered {
    /// The block's `psize` bytes; they passed the checksum.
    pub data: Vec<u8>,
    /// Columns to write back, in column order.
    pub repairs: Vec<Repair>,
    /// Reconstructions tried, the one that verified included.
    pub attempts: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoverError {
    /// The caller passed a different number of columns than the map has.
    ColumnCount { expected: usize, found: usize },
    /// A column read back with the wrong length.
    ColumnSize { column: usize, expected: u64, found: u64 },
    /// More columns missing than there is parity.
    TooManyMissing { missing: usize, nparity: usize },
    /// No combination of up to `nparity` columns gives a block that passes
    /// its checksum: more columns are damaged than parity can cover.
    Unrecoverable { attempts: usize, missing: usize, nparity: usize },
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            RecoverError::ColumnCount { expected, found } => {
                write!(f, "raidz block has {expected} columns, {found} given")
            }
            RecoverError::ColumnSize { column, expected, found } => {
                write!(f, "raidz column {column} is {found} bytes, expected {expected}")
            }
            RecoverError::TooManyMissing { missing, nparity } => {
                write!(f, "{missing} raidz columns unreadable, parity covers {nparity}")
            }
            RecoverError::Unrecoverable { attempts, missing, nparity } => write!(
                f,
                "raidz{nparity} block fails its checksum after {attempts} reconstructions \
                 ({missing} columns unreadable): more columns damaged than parity covers"
            ),
        }
    }
}

impl std::error::Error for RecoverError {}

/// The block's columns, parity first, ready to write: data cut into the
/// data columns (the last padded with zeros) and parity computed.
pub fn encode(map: &RaidzMap, data: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(data.len() as u64, map.psize(), "raidz block length");
    let nparity = map.nparity();
    let mut columns: Vec<Vec<u8>> = map.columns().iter().map(|c| vec![0u8; c.size as usize]).collect();
    for (c, column) in columns.iter_mut().enumerate().skip(nparity) {
        let range = map.data_range(c);
        let end = range.end.min(map.psize());
        column[..(end - range.start) as usize].copy_from_slice(&data[range.start as usize..end as usize]);
    }
    regenerate_parity(nparity, &mut columns, Parity::rows(nparity));
    columns
}

/// The block from its data columns (`map.data_columns()` order), as a
/// healthy read returns them.
pub fn assemble(map: &RaidzMap, data_columns: &[&[u8]]) -> Vec<u8> {
    let mut block = vec![0u8; map.psize() as usize];
    assemble_into(map, data_columns, &mut block);
    block
}

fn assemble_into<C: AsRef<[u8]>>(map: &RaidzMap, data_columns: &[C], block: &mut [u8]) {
    let nparity = map.nparity();
    assert_eq!(data_columns.len(), map.data_columns().len());
    assert_eq!(block.len() as u64, map.psize());
    for (i, column) in data_columns.iter().enumerate() {
        let column = column.as_ref();
        let range = map.data_range(nparity + i);
        assert_eq!(column.len() as u64, range.end - range.start, "raidz data column {i} length");
        let end = range.end.min(map.psize());
        block[range.start as usize..end as usize].copy_from_slice(&column[..(end - range.start) as usize]);
    }
}

/// The block from every column that could be read (`None`: unreadable),
/// verified by `checksum`, with the columns to write back. See the module
/// comment for the search and its bound.
pub fn recover(
    map: &RaidzMap,
    columns: Vec<Option<Vec<u8>>>,
    checksum: impl Fn(&[u8]) -> bool,
) -> Result<Recovered, RecoverError> {
    check_columns(map, &columns)?;
    let nparity = map.nparity();
    let missing: Vec<usize> = (0..columns.len()).filter(|c| columns[*c].is_none()).collect();
    if missing.len() > nparity {
        return Err(RecoverError::TooManyMissing { missing: missing.len(), nparity });
    }
    let mut work: Vec<Vec<u8>> =
        columns.iter().zip(map.columns()).map(|(c, m)| c.clone().unwrap_or_else(|| vec![0u8; m.size as usize])).collect();
    zero_padding(map, &mut work);
    let present: Vec<usize> = (0..columns.len()).filter(|c| columns[*c].is_some()).collect();
    let mut block = vec![0u8; map.psize() as usize];
    let mut attempts = 0;
    for assumed_bad in 0..=nparity - missing.len() {
        let mut combo = Combinations::new(present.len(), assumed_bad);
        while let Some(picked) = combo.next() {
            let suspects: Vec<usize> = picked.iter().map(|i| present[*i]).collect();
            if assumed_bad > 0 && suspects.iter().all(|c| *c < nparity) {
                continue;
            }
            attempts += 1;
            let mut targets: Vec<usize> = missing.iter().chain(&suspects).copied().collect();
            targets.sort_unstable();
            rebuild_data(nparity, &mut work, &targets);
            assemble_into(map, &work[nparity..], &mut block);
            if checksum(&block) {
                let found = repairs(map, &columns, work);
                if found.iter().any(|r| r.column < nparity && r.cause == RepairCause::Damaged) {
                    if let Some((data, repairs)) = blame_padding(map, &columns, &targets, &checksum, found.len()) {
                        return Ok(Recovered { data, repairs, attempts: attempts + 1 });
                    }
                }
                return Ok(Recovered { data: block, repairs: found, attempts });
            }
            for s in &suspects {
                work[*s].clone_from(columns[*s].as_ref().expect("suspects are present columns"));
            }
            zero_padding(map, &mut work);
        }
    }
    Err(RecoverError::Unrecoverable { attempts, missing: missing.len(), nparity })
}

/// Data that verifies yet disagrees with parity: the parity may be wrong,
/// or the last data column's bytes past the block's checksummed end (the
/// padding of its last sector, when the block's checksum covers less than
/// whole sectors — the I/O gives `map` whole sectors) may be, which only
/// parity covers. Rebuilds that column from parity too (with the columns
/// `targets` rebuilt already); when the block still verifies and fewer
/// columns are wrong that way, that is the answer: blaming parity would
/// count checksum errors on healthy children and rewrite their parity to
/// match the damage. With as many wrong columns either way (RAID-Z1: one
/// parity column cannot tell them apart) parity keeps the blame.
fn blame_padding(
    map: &RaidzMap,
    columns: &[Option<Vec<u8>>],
    targets: &[usize],
    checksum: &impl Fn(&[u8]) -> bool,
    blamed: usize,
) -> Option<(Vec<u8>, Vec<Repair>)> {
    let (nparity, last) = (map.nparity(), columns.len() - 1);
    if last < nparity || columns[last].is_none() || targets.contains(&last) || targets.len() + 1 > nparity {
        return None;
    }
    let mut work: Vec<Vec<u8>> =
        columns.iter().zip(map.columns()).map(|(c, m)| c.clone().unwrap_or_else(|| vec![0u8; m.size as usize])).collect();
    zero_padding(map, &mut work);
    let mut with_last: Vec<usize> = targets.iter().copied().chain([last]).collect();
    with_last.sort_unstable();
    rebuild_data(nparity, &mut work, &with_last);
    let mut block = vec![0u8; map.psize() as usize];
    assemble_into(map, &work[nparity..], &mut block);
    if !checksum(&block) {
        return None;
    }
    let found = repairs(map, columns, work);
    (found.len() < blamed).then_some((block, found))
}

fn check_columns(map: &RaidzMap, columns: &[Option<Vec<u8>>]) -> Result<(), RecoverError> {
    if columns.len() != map.columns().len() {
        return Err(RecoverError::ColumnCount { expected: map.columns().len(), found: columns.len() });
    }
    for (c, (col, m)) in columns.iter().zip(map.columns()).enumerate() {
        if let Some(col) = col {
            if col.len() as u64 != m.size {
                return Err(RecoverError::ColumnSize { column: c, expected: m.size, found: col.len() as u64 });
            }
        }
    }
    Ok(())
}

/// Zeroes the padding past `psize` at the end of the last data column.
fn zero_padding(map: &RaidzMap, work: &mut [Vec<u8>]) {
    let last = work.len() - 1;
    let range = map.data_range(last);
    if range.end > map.psize() {
        work[last][(map.psize() - range.start) as usize..].fill(0);
    }
}

/// The columns to write back, given `work` whose data columns are now the
/// truth: all parity is generated again and compared with what was read.
fn repairs(map: &RaidzMap, read: &[Option<Vec<u8>>], mut work: Vec<Vec<u8>>) -> Vec<Repair> {
    let nparity = map.nparity();
    regenerate_parity(nparity, &mut work, Parity::rows(nparity));
    let mut repairs = Vec::new();
    for (column, (truth, read)) in work.into_iter().zip(read).enumerate() {
        let cause = match read {
            None => RepairCause::Missing,
            Some(r) if *r != truth => RepairCause::Damaged,
            Some(_) => continue,
        };
        repairs.push(Repair { column, cause, bytes: truth });
    }
    repairs
}

/// The `k`-subsets of `0..n`, in lexicographic order (the empty set once
/// when `k == 0`).
struct Combinations {
    n: usize,
    picked: Vec<usize>,
    started: bool,
}

impl Combinations {
    fn new(n: usize, k: usize) -> Self {
        Combinations { n, picked: (0..k).collect(), started: false }
    }

    fn next(&mut self) -> Option<&[usize]> {
        let k = self.picked.len();
        if !self.started {
            self.started = true;
            return (k <= self.n).then_some(&self.picked[..]);
        }
        // The rightmost index that can still move right, then the rest
        // packed after it.
        let i = (0..k).rev().find(|&i| self.picked[i] < self.n - k + i)?;
        self.picked[i] += 1;
        for j in i + 1..k {
            self.picked[j] = self.picked[j - 1] + 1;
        }
        Some(&self.picked[..])
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::RaidzGeometry;
    use super::super::test_rng::Rng;
    use super::*;

    #[test]
    fn combinations_are_all_subsets_once() {
        for n in 0..7 {
            for k in 0..=n + 1 {
                let mut c = Combinations::new(n, k);
                let mut seen = Vec::new();
                while let Some(p) = c.next() {
                    assert!(p.windows(2).all(|w| w[0] < w[1]));
                    seen.push(p.to_vec());
                }
                let expect = (0..1u32 << n).filter(|m| m.count_ones() as usize == k).count();
                assert_eq!(seen.len(), expect, "C({n},{k})");
                seen.dedup();
                assert_eq!(seen.len(), expect);
            }
        }
    }

    fn sample(len: usize) -> Vec<u8> {
        Rng(len as u64).bytes(len)
    }

    /// A block of 1.5 sectors: the padding is zero in the columns, the
    /// healthy read gives the block back.
    #[test]
    fn encode_pads_and_assemble_returns_the_block() {
        let map = RaidzGeometry::new(5, 2, 9).unwrap().map(0, 768).unwrap();
        let data = sample(768);
        let cols = encode(&map, &data);
        assert_eq!(cols.len(), 4);
        assert!(cols[3][256..].iter().all(|b| *b == 0));
        let data_cols: Vec<&[u8]> = cols[2..].iter().map(|c| &c[..]).collect();
        assert_eq!(assemble(&map, &data_cols), data);
    }

    /// Damage only in the padding: the block verifies at once and the
    /// column is still reported (its repair writes the zeros back).
    #[test]
    fn damaged_padding_is_repaired_not_trusted() {
        let map = RaidzGeometry::new(4, 1, 9).unwrap().map(0, 700).unwrap();
        let data = sample(700);
        let mut cols: Vec<Option<Vec<u8>>> = encode(&map, &data).into_iter().map(Some).collect();
        cols[2].as_mut().unwrap()[1000 - 512] ^= 0xff;
        let got = recover(&map, cols, |b| b == &data[..]).unwrap();
        assert_eq!(got.data, data);
        assert_eq!(got.attempts, 1);
        assert_eq!(got.repairs.len(), 1);
        assert_eq!((got.repairs[0].column, got.repairs[0].cause), (2, RepairCause::Damaged));
    }

    /// Regression: a block whose checksum covers less than its whole
    /// sectors (the I/O maps whole sectors), damaged only past that end in
    /// its last data column: the data verifies, and the parity regenerated
    /// from it disagreed with P and Q — both were reported damaged (and a
    /// scrub rewrote them to match the damage) while the damaged column was
    /// left. Now the damaged column is the one reported, with its bytes.
    #[test]
    fn damage_past_the_checksummed_end_is_blamed_on_its_column() {
        let map = RaidzGeometry::new(6, 2, 9).unwrap().map(0, 5 * 512).unwrap();
        let mut data = sample(5 * 512);
        data[4 * 512 + 100..].fill(0);
        let good = encode(&map, &data);
        let last = good.len() - 1;
        let mut cols: Vec<Option<Vec<u8>>> = good.iter().cloned().map(Some).collect();
        cols[last].as_mut().unwrap()[300] ^= 0x5a;
        let covered = |b: &[u8]| b[..4 * 512 + 100] == data[..4 * 512 + 100];
        let got = recover(&map, cols, covered).unwrap();
        assert!(got.data[..4 * 512 + 100] == data[..4 * 512 + 100]);
        let blamed: Vec<(usize, RepairCause)> = got.repairs.iter().map(|r| (r.column, r.cause)).collect();
        assert_eq!(blamed, vec![(last, RepairCause::Damaged)]);
        assert!(got.repairs[0].bytes == good[last]);
        // Damaged parity with data that verifies is still parity's fault.
        let mut cols: Vec<Option<Vec<u8>>> = good.iter().cloned().map(Some).collect();
        cols[1].as_mut().unwrap()[7] ^= 1;
        let got = recover(&map, cols, covered).unwrap();
        assert_eq!(got.repairs.iter().map(|r| r.column).collect::<Vec<_>>(), vec![1]);
    }

    /// Four damaged columns on 12-wide RAID-Z3: every set of up to three
    /// columns with a data column in it is tried once (1 + 9 + 63 + 219),
    /// then an error; with P missing, sets of up to two of the 11 present,
    /// of which Q and R are parity (1 + 9 + 54).
    #[test]
    fn unrecoverable_after_every_set_once() {
        let map = RaidzGeometry::new(12, 3, 9).unwrap().map(0, 9 * 512).unwrap();
        let data = sample(9 * 512);
        let good: Vec<Option<Vec<u8>>> = encode(&map, &data).into_iter().map(Some).collect();
        let mut cols = good.clone();
        for c in [0, 4, 7, 11] {
            cols[c].as_mut().unwrap()[0] ^= 1;
        }
        let err = recover(&map, cols.clone(), |b| b == &data[..]).unwrap_err();
        assert_eq!(err, RecoverError::Unrecoverable { attempts: 292, missing: 0, nparity: 3 });
        cols[0] = None;
        let err = recover(&map, cols, |b| b == &data[..]).unwrap_err();
        assert_eq!(err, RecoverError::Unrecoverable { attempts: 64, missing: 1, nparity: 3 });
        assert!(err.to_string().starts_with("raidz3 block fails its checksum after 64 reconstructions"));
    }

    #[test]
    fn wrong_shapes_are_errors_naming_the_column() {
        let map = RaidzGeometry::new(4, 1, 9).unwrap().map(0, 2048).unwrap();
        let mut cols: Vec<Option<Vec<u8>>> = encode(&map, &sample(2048)).into_iter().map(Some).collect();
        let err = recover(&map, cols[..3].to_vec(), |_| true).unwrap_err();
        assert_eq!(err, RecoverError::ColumnCount { expected: 4, found: 3 });
        cols[1].as_mut().unwrap().pop();
        let err = recover(&map, cols.clone(), |_| true).unwrap_err();
        assert_eq!(err.to_string(), "raidz column 1 is 1023 bytes, expected 1024");
        cols[1] = None;
        cols[2] = None;
        let err = recover(&map, cols, |_| true).unwrap_err();
        assert_eq!(err, RecoverError::TooManyMissing { missing: 2, nparity: 1 });
    }
}
