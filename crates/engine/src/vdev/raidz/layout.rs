//! Where a block's sectors go on a RAID-Z vdev: the column map and the
//! allocation size. Pure arithmetic, no I/O; the picture and the formulas
//! are in `raidz/mod.rs` and docs/format.md ("RAID-Z layout arithmetic").
//!
//! The whole map follows from one idea. Number the vdev's sectors row-major
//! across its children — *logical sector* `L` lives on child `L % width` at
//! child sector `L / width` — and give a block the contiguous logical range
//! `[offset / sector, + asize / sector)`. The block's `k`-th logical sector
//! belongs to column `k % width`; parity columns come first, then data
//! columns, each data column holding a run of consecutive data sectors
//! (column-major), so a large block reads as one sequential extent per
//! child.

use std::fmt;
use std::ops::Range;

use tarn_ondisk::bp::MAX_BLOCK_BYTES;

/// Most parity columns a RAID-Z vdev can have (RAID-Z3).
pub const NPARITY_MAX: usize = 3;

/// Most children of a RAID-Z vdev. Parity coefficients are powers of 2 and
/// 4 in GF(2⁸), both of order 255: with more than 255 data columns two
/// columns would share a coefficient and double failures among them could
/// not be told apart.
pub const WIDTH_MAX: usize = 255;

/// Smallest and largest sector size, as a shift (512 B … 64 KiB).
pub const ASHIFT_MIN: u32 = 9;
pub const ASHIFT_MAX: u32 = 16;

/// Sector offset of parity swaps for RAID-Z1: see [`RaidzGeometry::map`].
const RAIDZ1_SWAP_BIT: u64 = 1 << 20;

/// What is wrong with a geometry or a block's place on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    Nparity(usize),
    Width { width: usize, nparity: usize },
    Ashift(u32),
    Psize(u64),
    Offset { offset: u64, sector_bytes: u64 },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            LayoutError::Nparity(p) => {
                write!(f, "raidz parity {p} is not 1, 2 or 3")
            }
            LayoutError::Width { width, nparity } => write!(
                f,
                "raidz{nparity} of {width} children: needs {} to {WIDTH_MAX}",
                nparity + 1
            ),
            LayoutError::Ashift(a) => {
                write!(f, "ashift {a} is outside {ASHIFT_MIN}..={ASHIFT_MAX}")
            }
            LayoutError::Psize(p) => {
                write!(f, "block size {p} is outside 1..={MAX_BLOCK_BYTES}")
            }
            LayoutError::Offset { offset, sector_bytes } => write!(
                f,
                "raidz offset {offset} is not a multiple of the sector size \
                 {sector_bytes} or is past the end of the address space"
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

/// The shape of one RAID-Z vdev: how many children, how many of each
/// stripe's columns are parity, and the sector size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzGeometry {
    width: usize,
    nparity: usize,
    ashift: u32,
}

/// One column of a block: a run of whole sectors on one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzColumn {
    /// Index of the child device, `0..width`.
    pub child: usize,
    /// Byte offset on that child.
    pub offset: u64,
    /// Bytes, a whole number of sectors, never zero.
    pub size: u64,
}

/// A skip sector: allocated with the block, never read, written only to
/// let writes of neighbouring blocks merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipSector {
    pub child: usize,
    pub offset: u64,
}

/// Where every sector of one block lives. Columns `0..nparity` are parity
/// (P, Q, R in that order), the rest are data in block order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzMap {
    geometry: RaidzGeometry,
    psize: u64,
    asize: u64,
    columns: Vec<RaidzColumn>,
    skip: Vec<SkipSector>,
}

impl RaidzGeometry {
    /// A geometry of `width` children with `nparity` parity columns and
    /// sectors of `1 << ashift` bytes.
    pub fn new(width: usize, nparity: usize, ashift: u32) -> Result<Self, LayoutError> {
        if !(1..=NPARITY_MAX).contains(&nparity) {
            return Err(LayoutError::Nparity(nparity));
        }
        if width <= nparity || width > WIDTH_MAX {
            return Err(LayoutError::Width { width, nparity });
        }
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
            return Err(LayoutError::Ashift(ashift));
        }
        Ok(RaidzGeometry { width, nparity, ashift })
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn nparity(&self) -> usize {
        self.nparity
    }

    pub fn ashift(&self) -> u32 {
        self.ashift
    }

    pub fn sector_bytes(&self) -> u64 {
        1 << self.ashift
    }

    /// Data columns of a full row.
    fn row_data(&self) -> u64 {
        (self.width - self.nparity) as u64
    }

    /// Bytes a block of `psize` bytes takes on this vdev: its data sectors,
    /// one parity sector per column per row, rounded up to a multiple of
    /// `nparity + 1` sectors so the space left between blocks can always
    /// hold a block (the smallest takes `nparity + 1` sectors).
    pub fn asize(&self, psize: u64) -> u64 {
        self.sectors(psize).allocated << self.ashift
    }

    fn sectors(&self, psize: u64) -> SectorCounts {
        assert!(psize > 0, "raidz: a block has at least one byte");
        let data = psize.div_ceil(self.sector_bytes());
        let rows = data.div_ceil(self.row_data());
        let used = data + self.nparity as u64 * rows;
        let allocated = used.next_multiple_of(self.nparity as u64 + 1);
        assert!(allocated - used <= self.nparity as u64);
        SectorCounts { used, allocated }
    }

    /// The map of a block of `psize` bytes allocated at byte `offset` of the
    /// vdev's address space (what a block pointer's DVA holds).
    ///
    /// RAID-Z1 only: when bit 20 of the offset is set, the parity column and
    /// the first data column trade places. Allocations are multiples of two
    /// sectors there, so on an even width every block would start, and put
    /// its parity, on an even child; the swap sends half the parity to odd
    /// children (OpenZFS does the same, for the same reason).
    pub fn map(&self, offset: u64, psize: u64) -> Result<RaidzMap, LayoutError> {
        if psize == 0 || psize > MAX_BLOCK_BYTES as u64 {
            return Err(LayoutError::Psize(psize));
        }
        let counts = self.sectors(psize);
        let bad_offset = LayoutError::Offset { offset, sector_bytes: self.sector_bytes() };
        if !offset.is_multiple_of(self.sector_bytes()) {
            return Err(bad_offset);
        }
        let first = offset >> self.ashift;
        match first.checked_add(counts.allocated) {
            Some(end) if end <= u64::MAX >> self.ashift => {}
            _ => return Err(bad_offset),
        }
        let mut columns = self.columns(first, counts);
        if self.nparity == 1 && offset & RAIDZ1_SWAP_BIT != 0 {
            swap_places(&mut columns);
        }
        let skip = (counts.used..counts.allocated).map(|k| self.skip_sector(first + k)).collect();
        let map = RaidzMap { geometry: *self, psize, asize: counts.allocated << self.ashift, columns, skip };
        map.check();
        Ok(map)
    }

    /// Columns of a block whose logical sectors start at `first`: column
    /// `c` holds the block's sectors `c, c + width, c + 2·width, …` below
    /// `used`.
    fn columns(&self, first: u64, counts: SectorCounts) -> Vec<RaidzColumn> {
        let width = self.width as u64;
        let ncolumns = counts.used.min(width);
        (0..ncolumns)
            .map(|c| {
                let logical = first + c;
                let size_sectors = (counts.used - c).div_ceil(width);
                RaidzColumn {
                    child: (logical % width) as usize,
                    offset: (logical / width) << self.ashift,
                    size: size_sectors << self.ashift,
                }
            })
            .collect()
    }

    fn skip_sector(&self, logical: u64) -> SkipSector {
        let width = self.width as u64;
        SkipSector { child: (logical % width) as usize, offset: (logical / width) << self.ashift }
    }
}

#[derive(Clone, Copy, Debug)]
struct SectorCounts {
    /// Data and parity sectors (data: `ceil(psize / sector)`, the last
    /// maybe partly padding).
    used: u64,
    /// `used` and the skip sectors.
    allocated: u64,
}

/// RAID-Z1's parity rotation: the parity column and the first data column
/// exchange places (never sizes: both are always full-height).
fn swap_places(columns: &mut [RaidzColumn]) {
    assert!(columns.len() >= 2, "raidz1 block has parity and data");
    assert_eq!(columns[0].size, columns[1].size);
    let (a, b) = (columns[0], columns[1]);
    columns[0] = RaidzColumn { child: b.child, offset: b.offset, size: a.size };
    columns[1] = RaidzColumn { child: a.child, offset: a.offset, size: b.size };
}

impl RaidzMap {
    pub fn geometry(&self) -> RaidzGeometry {
        self.geometry
    }

    pub fn nparity(&self) -> usize {
        self.geometry.nparity
    }

    /// Bytes of the block (the columns hold it padded to whole sectors).
    pub fn psize(&self) -> u64 {
        self.psize
    }

    /// Bytes allocated, skip sectors included.
    pub fn asize(&self) -> u64 {
        self.asize
    }

    /// All columns, parity first.
    pub fn columns(&self) -> &[RaidzColumn] {
        &self.columns
    }

    pub fn parity_columns(&self) -> &[RaidzColumn] {
        &self.columns[..self.nparity()]
    }

    pub fn data_columns(&self) -> &[RaidzColumn] {
        &self.columns[self.nparity()..]
    }

    pub fn skip_sectors(&self) -> &[SkipSector] {
        &self.skip
    }

    /// The bytes of the block that column `column` holds: a data column
    /// holds a run of the block, the last one possibly ending in padding
    /// (past `psize`, zero when written). Parity columns hold none.
    pub fn data_range(&self, column: usize) -> Range<u64> {
        assert!(column >= self.nparity(), "column {column} is parity");
        let start: u64 = self.columns[self.nparity()..column].iter().map(|c| c.size).sum();
        start..start + self.columns[column].size
    }

    /// Invariants of every map, checked as it is made:
    /// 1. parity columns are the tallest: every column is as tall as
    ///    column 0 or one sector shorter, and the tall ones come first —
    ///    parity rows cover every data row;
    /// 2. the data columns hold exactly the block's data sectors;
    /// 3. columns and skip sectors fill `asize`, no sector counted twice;
    /// 4. `asize` is a multiple of `nparity + 1` sectors.
    fn check(&self) {
        let sector = self.geometry.sector_bytes();
        let tall = self.columns[0].size;
        assert!(self.columns.len() > self.nparity(), "raidz map without data");
        for (c, pair) in self.columns.windows(2).enumerate() {
            assert!(pair[1].size <= pair[0].size, "column {} taller than {c}", c + 1);
            assert!(pair[1].size + sector >= tall, "column {} too short", c + 1);
        }
        assert!(self.parity_columns().iter().all(|c| c.size == tall));
        let data: u64 = self.data_columns().iter().map(|c| c.size).sum();
        assert_eq!(data, self.psize.div_ceil(sector) * sector);
        let used: u64 = self.columns.iter().map(|c| c.size).sum();
        assert_eq!(used + self.skip.len() as u64 * sector, self.asize);
        assert_eq!((self.asize / sector) % (self.nparity() as u64 + 1), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    fn col(child: usize, offset_sectors: u64, size_sectors: u64, ashift: u32) -> RaidzColumn {
        RaidzColumn { child, offset: offset_sectors << ashift, size: size_sectors << ashift }
    }

    /// The worked example of `raidz/mod.rs` and docs/format.md, computed by
    /// hand: 5-wide RAID-Z2, 4 KiB sectors, 28 KiB at vdev byte 28 KiB.
    #[test]
    fn worked_example_raidz2_width5() {
        let g = RaidzGeometry::new(5, 2, 12).unwrap();
        let m = g.map(28 * K, 28 * K).unwrap();
        let expect = [
            col(2, 1, 3, 12), // P
            col(3, 1, 3, 12), // Q
            col(4, 1, 3, 12), // D0: data sectors 0..3
            col(0, 2, 2, 12), // D1: data sectors 3..5
            col(1, 2, 2, 12), // D2: data sectors 5..7
        ];
        assert_eq!(m.columns(), &expect[..]);
        assert_eq!(m.asize(), 60 * K);
        assert_eq!(
            m.skip_sectors(),
            &[SkipSector { child: 0, offset: 4 << 12 }, SkipSector { child: 1, offset: 4 << 12 }]
        );
        assert_eq!(m.data_range(2), 0..12 * K);
        assert_eq!(m.data_range(3), 12 * K..20 * K);
        assert_eq!(m.data_range(4), 20 * K..28 * K);
    }

    /// The figures of openzfs-machinery.md: 6-wide RAID-Z2 with 4 KiB
    /// sectors puts 128 KiB in 192 KiB and 4 KiB in 12 KiB.
    #[test]
    fn asize_matches_openzfs_figures() {
        let g = RaidzGeometry::new(6, 2, 12).unwrap();
        assert_eq!(g.asize(128 * K), 192 * K);
        assert_eq!(g.asize(4 * K), 12 * K);
        // 32 data sectors in rows of 4: 8 rows, 16 parity, 48 → 48.
        // 1 data sector: 1 + 2 = 3 → 3.
    }

    /// A block shorter than one row: 2 data sectors on 8-wide RAID-Z3 take
    /// 3 parity + 2 data = 5 columns of one sector, and 3 skip sectors make
    /// 8 (the next multiple of 4).
    #[test]
    fn block_shorter_than_a_row() {
        let g = RaidzGeometry::new(8, 3, 9).unwrap();
        let m = g.map(6 * 512, 1024).unwrap();
        let children: Vec<usize> = m.columns().iter().map(|c| c.child).collect();
        assert_eq!(children, vec![6, 7, 0, 1, 2]);
        let offsets: Vec<u64> = m.columns().iter().map(|c| c.offset).collect();
        assert_eq!(offsets, vec![0, 0, 512, 512, 512]);
        assert!(m.columns().iter().all(|c| c.size == 512));
        assert_eq!(m.asize(), 8 * 512);
        let skip: Vec<(usize, u64)> = m.skip_sectors().iter().map(|s| (s.child, s.offset)).collect();
        assert_eq!(skip, vec![(3, 512), (4, 512), (5, 512)]);
    }

    /// A block smaller than one sector still takes a whole data sector, and
    /// the minimum allocation of `nparity + 1` sectors.
    #[test]
    fn sub_sector_block() {
        let g = RaidzGeometry::new(4, 1, 12).unwrap();
        let m = g.map(0, 512).unwrap();
        assert_eq!(m.columns().len(), 2);
        assert_eq!(m.asize(), 8 * K);
        assert!(m.skip_sectors().is_empty());
        assert_eq!(m.data_range(1), 0..4 * K);
    }

    /// Exact rows: 3-wide RAID-Z1, 4 data sectors → 2 rows, 6 sectors, no
    /// skip; 5 data sectors → 3 rows, 8 sectors, no skip (8 is even);
    /// 3 data sectors → 2 rows (2 + 1), 5 sectors, one skip.
    #[test]
    fn raidz1_rounding() {
        let g = RaidzGeometry::new(3, 1, 9).unwrap();
        assert_eq!(g.asize(4 * 512), 6 * 512);
        assert_eq!(g.asize(5 * 512), 8 * 512);
        assert_eq!(g.asize(3 * 512), 6 * 512);
        let m = g.map(0, 3 * 512).unwrap();
        let sizes: Vec<u64> = m.columns().iter().map(|c| c.size / 512).collect();
        assert_eq!(sizes, vec![2, 2, 1]);
        assert_eq!(m.skip_sectors(), &[SkipSector { child: 2, offset: 512 }]);
    }

    /// RAID-Z1's parity swap at bit 20 of the offset: same places, parity
    /// and first data column exchanged.
    #[test]
    fn raidz1_swaps_parity_above_one_mib_bit() {
        let g = RaidzGeometry::new(4, 1, 9).unwrap();
        let plain = g.map(0, 3 * 512).unwrap();
        let swapped = g.map(1 << 20, 3 * 512).unwrap();
        let row = (1u64 << 20) / 512 / 4 * 512;
        assert_eq!(plain.columns()[0].child, 0);
        assert_eq!(swapped.columns()[0], col(1, row / 512, 1, 9));
        assert_eq!(swapped.columns()[1], col(0, row / 512, 1, 9));
        assert_eq!(swapped.columns()[2], col(2, row / 512, 1, 9));
        // RAID-Z2 never swaps.
        let g2 = RaidzGeometry::new(4, 2, 9).unwrap();
        assert_eq!(g2.map(1 << 20, 512).unwrap().columns()[0].child, 0);
    }

    /// Back-to-back blocks never share a sector: each map's columns and
    /// skip sectors are exactly the logical range of its asize.
    #[test]
    fn consecutive_blocks_tile_the_vdev() {
        for (width, nparity) in [(5, 1), (6, 2), (7, 3), (12, 3)] {
            let g = RaidzGeometry::new(width, nparity, 9).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            let mut offset = 0;
            for sectors in [1u64, 2, 3, 7, 11, 40, 1, 5, 64, 3] {
                let m = g.map(offset, sectors * 512).unwrap();
                let mut mine = Vec::new();
                for c in m.columns() {
                    for s in 0..c.size / 512 {
                        mine.push((c.offset / 512 + s) * width as u64 + c.child as u64);
                    }
                }
                mine.extend(m.skip_sectors().iter().map(|s| s.offset / 512 * width as u64 + s.child as u64));
                mine.sort_unstable();
                let first = offset / 512;
                let expect: Vec<u64> = (first..first + m.asize() / 512).collect();
                assert_eq!(mine, expect, "raidz{nparity} width {width} at {offset}");
                assert!(mine.iter().all(|l| seen.insert(*l)));
                offset += m.asize();
            }
        }
    }

    #[test]
    fn bad_geometry_and_places_are_refused() {
        assert_eq!(RaidzGeometry::new(4, 0, 9), Err(LayoutError::Nparity(0)));
        assert_eq!(RaidzGeometry::new(4, 4, 9), Err(LayoutError::Nparity(4)));
        assert_eq!(RaidzGeometry::new(3, 3, 9), Err(LayoutError::Width { width: 3, nparity: 3 }));
        assert_eq!(RaidzGeometry::new(256, 1, 9), Err(LayoutError::Width { width: 256, nparity: 1 }));
        assert_eq!(RaidzGeometry::new(4, 1, 8), Err(LayoutError::Ashift(8)));
        let g = RaidzGeometry::new(4, 1, 12).unwrap();
        assert_eq!(g.map(0, 0), Err(LayoutError::Psize(0)));
        assert!(matches!(g.map(0, (16 << 20) + 1), Err(LayoutError::Psize(_))));
        assert!(matches!(g.map(512, 4096), Err(LayoutError::Offset { .. })));
        assert!(matches!(g.map(u64::MAX - 4095, 4096), Err(LayoutError::Offset { .. })));
        let msg = RaidzGeometry::new(2, 2, 12).unwrap_err().to_string();
        assert_eq!(msg, "raidz2 of 2 children: needs 3 to 255");
    }
}
