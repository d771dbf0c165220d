//! Exhaustive reconstruction (issue 12, "What must be shown" 1).
//!
//! Invariants checked, for RAID-Z1, 2 and 3 at every width from
//! `nparity + 1` to 12 and sectors of 512 B and 4 KiB:
//! 1. a healthy read (data columns only) gives the block back;
//! 2. every set of up to `nparity` *missing* columns reads back exactly, in
//!    one attempt, and the repairs are exactly those columns' contents;
//! 3. every set of up to `nparity` *silently corrupted* columns reads back
//!    exactly, and the repairs name exactly the corrupted columns with
//!    their original contents; so does a mix of missing and corrupted;
//! 4. `nparity + 1` damaged columns (missing or corrupted, any mix) give an
//!    error, never data.
//!
//! Block sizes: per geometry, 512 B, a block shorter than one row (and
//! shorter than one sector with 4 KiB sectors), exactly one row, two rows
//! and a part; every combination of columns for each. Larger blocks, up
//! to 16 MiB, are sampled: random sizes per geometry with every missing
//! set and a sample of corrupted sets, and 16 MiB blocks on narrow
//! geometries (where the search is short). `TARN_RAIDZ_FULL=1` tries every
//! corrupted set at every size (35 s in release on the project machine). Damage always includes
//! a column's first byte (a data byte, or parity over data) plus random
//! others, so each damaged column really is wrong. `TARN_RAIDZ_SEED`
//! replays a run; the seed is printed on failure.

use super::layout::RaidzGeometry;
use super::recover::{assemble, encode, recover, RepairCause};
use super::test_rng::Rng;

/// How thoroughly one block is checked.
#[derive(Clone, Copy, PartialEq)]
enum Corruption {
    /// Every set of up to nparity corrupted columns.
    Every,
    /// One in `n` of them, chosen at random.
    OneIn(u64),
}

/// One block on one geometry, through invariants 1–4.
struct Case {
    geometry: RaidzGeometry,
    offset: u64,
    psize: u64,
}

impl Case {
    fn run(&self, rng: &mut Rng, corruption: Corruption, over_budget_sets: usize) {
        let map = self.geometry.map(self.offset, self.psize).unwrap();
        let data = rng.bytes(self.psize as usize);
        let good = encode(&map, &data);
        let nparity = map.nparity();
        let data_cols: Vec<&[u8]> = good[nparity..].iter().map(|c| &c[..]).collect();
        assert!(assemble(&map, &data_cols) == data, "{self}: healthy read");
        let n = good.len();
        assert!(n > nparity);
        for mask in 1u32..(1 << n) {
            let set: Vec<usize> = (0..n).filter(|c| mask & (1 << c) != 0).collect();
            if set.len() > nparity {
                continue;
            }
            self.expect_recovered(&map, &data, &good, &set, &[], rng);
            if corruption == Corruption::Every || rng.below(corruption_one_in(corruption)) == 0 {
                self.expect_recovered(&map, &data, &good, &[], &set, rng);
                let split = rng.below(set.len() as u64 + 1) as usize;
                let (missing, corrupt) = set.split_at(split);
                self.expect_recovered(&map, &data, &good, missing, corrupt, rng);
            }
        }
        for _ in 0..over_budget_sets {
            let set = random_set(rng, n, nparity + 1);
            let split = rng.below(set.len() as u64 + 1) as usize;
            let (missing, corrupt) = set.split_at(split);
            let columns = damage(rng, &good, missing, corrupt);
            let got = recover(&map, columns, |b| b == &data[..]);
            assert!(got.is_err(), "{self}: missing {missing:?} corrupt {corrupt:?} recovered");
        }
    }

    fn expect_recovered(
        &self,
        map: &super::RaidzMap,
        data: &[u8],
        good: &[Vec<u8>],
        missing: &[usize],
        corrupt: &[usize],
        rng: &mut Rng,
    ) {
        let columns = damage(rng, good, missing, corrupt);
        let got = recover(map, columns, |b| b == data)
            .unwrap_or_else(|e| panic!("{self}: missing {missing:?} corrupt {corrupt:?}: {e}"));
        assert!(got.data == data, "{self}: wrong data");
        if corrupt.is_empty() {
            assert_eq!(got.attempts, 1, "{self}: erasures alone need no search");
        }
        let mut expect: Vec<(usize, RepairCause)> = missing
            .iter()
            .map(|c| (*c, RepairCause::Missing))
            .chain(corrupt.iter().map(|c| (*c, RepairCause::Damaged)))
            .collect();
        expect.sort_unstable_by_key(|e| e.0);
        let repaired: Vec<(usize, RepairCause)> = got.repairs.iter().map(|r| (r.column, r.cause)).collect();
        assert_eq!(repaired, expect, "{self}: repairs");
        for r in &got.repairs {
            assert!(r.bytes == good[r.column], "{self}: repair of column {}", r.column);
        }
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let g = self.geometry;
        write!(
            f,
            "raidz{} width {} ashift {} psize {} offset {}",
            g.nparity(),
            g.width(),
            g.ashift(),
            self.psize,
            self.offset
        )
    }
}

fn corruption_one_in(c: Corruption) -> u64 {
    match c {
        Corruption::Every => 1,
        Corruption::OneIn(n) => n,
    }
}

fn random_set(rng: &mut Rng, n: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    for i in 0..k {
        let j = i + rng.below((n - i) as u64) as usize;
        all.swap(i, j);
    }
    let mut set = all[..k].to_vec();
    set.sort_unstable();
    set
}

/// The columns as a damaged read returns them: `missing` unreadable,
/// `corrupt` wrong in their first byte and in random others (sometimes
/// wholly overwritten).
fn damage(rng: &mut Rng, good: &[Vec<u8>], missing: &[usize], corrupt: &[usize]) -> Vec<Option<Vec<u8>>> {
    let mut columns: Vec<Option<Vec<u8>>> = good.iter().cloned().map(Some).collect();
    for c in missing {
        columns[*c] = None;
    }
    for c in corrupt {
        let col = columns[*c].as_mut().expect("corrupt and missing are disjoint");
        if rng.below(8) == 0 {
            let noise = rng.bytes(col.len());
            col.iter_mut().zip(noise).for_each(|(b, n)| *b ^= n);
        }
        col[0] ^= rng.nonzero();
        for _ in 0..rng.below(4) {
            let at = rng.below(col.len() as u64) as usize;
            col[at] ^= rng.nonzero();
        }
    }
    columns
}

fn seed() -> u64 {
    match std::env::var("TARN_RAIDZ_SEED") {
        Ok(s) => s.parse().expect("TARN_RAIDZ_SEED is a number"),
        Err(_) => 0x7a11_d5ee_d000_0012,
    }
}

fn full() -> bool {
    std::env::var("TARN_RAIDZ_FULL").is_ok_and(|v| v == "1")
}

/// The sizes every geometry is checked at with every combination of
/// columns: 512 B, shorter than a row, one row, two rows and a part.
fn small_sizes(g: RaidzGeometry, rng: &mut Rng) -> Vec<u64> {
    let sector = g.sector_bytes();
    let row = (g.width() - g.nparity()) as u64;
    let mut sizes = vec![512];
    if row > 1 {
        sizes.push((1 + rng.below(row - 1)) * sector - rng.below(sector / 512) * 512);
    }
    sizes.push(row * sector);
    sizes.push((2 * row + 1 + rng.below(row)) * sector - 512);
    sizes
}

fn geometries() -> Vec<RaidzGeometry> {
    let mut all = Vec::new();
    for nparity in 1..=3 {
        for width in nparity + 1..=12 {
            for ashift in [9, 12] {
                all.push(RaidzGeometry::new(width, nparity, ashift).unwrap());
            }
        }
    }
    all
}

fn random_offset(rng: &mut Rng, g: RaidzGeometry) -> u64 {
    rng.below(1 << 22) << g.ashift()
}

#[test]
fn every_geometry_every_combination_small_blocks() {
    let seed = seed();
    println!("TARN_RAIDZ_SEED={seed}");
    let mut rng = Rng(seed);
    for g in geometries() {
        for psize in small_sizes(g, &mut rng) {
            let case = Case { geometry: g, offset: random_offset(&mut rng, g), psize };
            case.run(&mut rng, Corruption::Every, 4);
        }
    }
}

#[test]
fn every_geometry_sampled_large_blocks() {
    let seed = seed() ^ 1;
    println!("TARN_RAIDZ_SEED={seed} (xor 1)");
    let mut rng = Rng(seed);
    let corruption = if full() { Corruption::Every } else { Corruption::OneIn(40) };
    for g in geometries() {
        let max_sectors = (1 << 20) >> g.ashift();
        let sectors = 3 + rng.below(max_sectors);
        let psize = sectors * g.sector_bytes() - rng.below(2) * 512;
        let case = Case { geometry: g, offset: random_offset(&mut rng, g), psize };
        case.run(&mut rng, corruption, 1);
    }
}

#[test]
fn sixteen_mib_blocks_on_narrow_geometries() {
    let seed = seed() ^ 2;
    println!("TARN_RAIDZ_SEED={seed} (xor 2)");
    let mut rng = Rng(seed);
    for nparity in 1..=3 {
        let g = RaidzGeometry::new(nparity + 2, nparity, [9, 12][nparity % 2]).unwrap();
        let case = Case { geometry: g, offset: random_offset(&mut rng, g), psize: 16 << 20 };
        case.run(&mut rng, Corruption::OneIn(if full() { 1 } else { 4 }), 1);
    }
}
