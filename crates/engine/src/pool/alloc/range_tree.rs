//! # Range tree: a set of byte ranges
//!
//! ## Purpose
//! A `RangeTree` holds a set of half-open byte ranges `[start, start+len)`.
//! The allocator uses one per metaslab for its free space, one per vdev for
//! deferred frees, and one per (txg, vdev) to collect space-log records.
//! It is the userspace analogue of OpenZFS's `range_tree_t` with its
//! offset-ordered and size-ordered B-trees.
//!
//! ## Representation
//! * `by_start: BTreeMap<start, len>` — the authoritative set, ordered by offset;
//!   answers "which range contains / follows this offset" in O(log n).
//! * `by_size: BTreeSet<(len, start)>` — the same segments ordered by size;
//!   answers "largest segment" and "smallest segment of at least `len`"
//!   (best fit) in O(log n).
//! * `space` — the sum of all lengths, kept incrementally.
//! * `hist` — number of segments per power-of-two size class
//!   (`floor(log2(len))`), kept incrementally so fragmentation statistics are
//!   O(64) instead of O(n).
//!
//! ## Invariants (checked by [`RangeTree::check`])
//! 1. Every segment has `len > 0` and `start + len` does not overflow `u64`.
//! 2. Segments are disjoint **and non-adjacent**: `add` always coalesces with
//!    neighbours, so a set has exactly one canonical representation.  This is
//!    what lets two trees (or two checkpoints) be compared for equality, and
//!    it keeps the largest-segment answer exact.
//! 3. `by_size` contains exactly `(len, start)` for each entry of `by_start`.
//! 4. `space` and `hist` equal the values recomputed from `by_start`.
//!
//! ## Errors, never panics
//! `add` of a range that overlaps the set, or `remove` of a range that is not
//! entirely contained, returns a [`RangeError`] and leaves the tree
//! unchanged.  For a free-space tree an overlapping `add` means a double free
//! and a failed `remove` means a double allocation — both signal corruption
//! or a caller bug, and the pool must be able to report that rather than
//! crash.
//!
//! ## First fit with a cursor
//! [`RangeTree::first_fit_from`] implements the allocation policy's
//! "continue where the last allocation ended" search: the first range at or
//! after `cursor` that can hold an aligned `len`, wrapping to the beginning
//! once.  To keep every operation O(log n) the scan looks at no more than
//! [`FIRST_FIT_MAX_PROBES`] segments (OpenZFS bounds the same search with
//! `metaslab_df_max_search`); if the budget runs out it falls back to a
//! best-fit lookup in the size index, which always finds a fitting segment if
//! one exists.  So the answer is exact first-fit whenever the tree has fewer
//! than `FIRST_FIT_MAX_PROBES` segments, and "some fitting segment, the
//! smallest available" otherwise — never a false `None`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound::{Excluded, Unbounded};

/// Number of power-of-two size classes in [`RangeTree::histogram`]
/// (bucket `i` counts segments with `2^i <= len < 2^(i+1)`).
pub const HISTOGRAM_BUCKETS: usize = 64;

/// Maximum number of segments [`RangeTree::first_fit_from`] examines by
/// offset before falling back to best fit (bounds the per-call work).
pub const FIRST_FIT_MAX_PROBES: usize = 64;

/// Why a range operation was refused.  The tree is unchanged in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// A zero-length range was passed to `add` or `remove`.
    ZeroLength { start: u64 },
    /// `start + len` does not fit in a `u64`.
    Overflow { start: u64, len: u64 },
    /// `add`: some byte of the range is already in the set.
    Overlap { start: u64, len: u64 },
    /// `remove`: some byte of the range is not in the set.
    NotContained { start: u64, len: u64 },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RangeError::ZeroLength { start } => write!(f, "zero-length range at {start:#x}"),
            RangeError::Overflow { start, len } => {
                write!(f, "range {start:#x}+{len:#x} overflows u64")
            }
            RangeError::Overlap { start, len } => {
                write!(f, "range {start:#x}+{len:#x} overlaps an existing range")
            }
            RangeError::NotContained { start, len } => {
                write!(f, "range {start:#x}+{len:#x} is not entirely contained")
            }
        }
    }
}

impl std::error::Error for RangeError {}

/// A coalesced set of disjoint half-open byte ranges (see module docs).
#[derive(Clone, PartialEq, Eq)]
pub struct RangeTree {
    by_start: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    space: u64,
    hist: [u64; HISTOGRAM_BUCKETS],
}

impl Default for RangeTree {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RangeTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.by_start.iter().map(|(s, l)| (*s, *l)))
            .finish()
    }
}

/// Histogram bucket of a (non-zero) length: `floor(log2(len))`.
fn bucket(len: u64) -> usize {
    (63 - len.max(1).leading_zeros()) as usize
}

/// Validated end of a range for `add`/`remove`.
fn end_of(start: u64, len: u64) -> Result<u64, RangeError> {
    if len == 0 {
        return Err(RangeError::ZeroLength { start });
    }
    start
        .checked_add(len)
        .ok_or(RangeError::Overflow { start, len })
}

/// If segment `[seg_start, seg_start+seg_len)` can hold `len` bytes at an
/// `align`-aligned offset no lower than `from`, return that offset.
fn fit_in(seg_start: u64, seg_len: u64, from: u64, len: u64, align: u64) -> Option<u64> {
    let seg_end = seg_start.checked_add(seg_len)?;
    let lo = seg_start.max(from);
    let aligned = lo.checked_add(align - 1)? & !(align - 1);
    let end = aligned.checked_add(len)?;
    (end <= seg_end).then_some(aligned)
}

impl RangeTree {
    /// An empty set.
    pub fn new() -> Self {
        RangeTree {
            by_start: BTreeMap::new(),
            by_size: BTreeSet::new(),
            space: 0,
            hist: [0; HISTOGRAM_BUCKETS],
        }
    }

    /// Total bytes in the set.
    pub fn space(&self) -> u64 {
        self.space
    }

    /// Number of (coalesced) segments.
    pub fn count(&self) -> usize {
        self.by_start.len()
    }

    /// True when the set holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// Remove everything.
    pub fn clear(&mut self) {
        *self = RangeTree::new();
    }

    // The two primitive mutations; every other mutation goes through them so
    // the size index, space and histogram can never drift from `by_start`.
    fn insert_seg(&mut self, start: u64, len: u64) {
        self.by_start.insert(start, len);
        self.by_size.insert((len, start));
        self.space += len;
        self.hist[bucket(len)] += 1;
    }

    fn remove_seg(&mut self, start: u64, len: u64) {
        self.by_start.remove(&start);
        self.by_size.remove(&(len, start));
        self.space -= len;
        self.hist[bucket(len)] -= 1;
    }

    /// Last segment starting at or before `off`.
    fn seg_at_or_before(&self, off: u64) -> Option<(u64, u64)> {
        self.by_start
            .range(..=off)
            .next_back()
            .map(|(s, l)| (*s, *l))
    }

    /// First segment starting strictly after `off`.
    fn seg_after(&self, off: u64) -> Option<(u64, u64)> {
        self.by_start
            .range((Excluded(off), Unbounded))
            .next()
            .map(|(s, l)| (*s, *l))
    }

    /// Add `[start, start+len)`, coalescing with adjacent segments.
    /// Errors (tree unchanged) if any byte is already present.
    pub fn add(&mut self, start: u64, len: u64) -> Result<(), RangeError> {
        let end = end_of(start, len)?;
        let overlap = RangeError::Overlap { start, len };
        let prev = self.seg_at_or_before(start);
        let next = self.seg_after(start);
        if matches!(prev, Some((ps, pl)) if ps + pl > start) {
            return Err(overlap);
        }
        if matches!(next, Some((ns, _)) if ns < end) {
            return Err(overlap);
        }
        let (mut new_start, mut new_end) = (start, end);
        if let Some((ps, pl)) = prev.filter(|(ps, pl)| ps + pl == start) {
            self.remove_seg(ps, pl);
            new_start = ps;
        }
        if let Some((ns, nl)) = next.filter(|(ns, _)| *ns == end) {
            self.remove_seg(ns, nl);
            new_end = ns + nl;
        }
        self.insert_seg(new_start, new_end - new_start);
        Ok(())
    }

    /// Remove `[start, start+len)`, splitting the containing segment.
    /// Errors (tree unchanged) unless the whole range is present.
    pub fn remove(&mut self, start: u64, len: u64) -> Result<(), RangeError> {
        let end = end_of(start, len)?;
        let missing = RangeError::NotContained { start, len };
        let (ps, pl) = self.seg_at_or_before(start).ok_or(missing)?;
        let pe = ps + pl;
        if pe < end {
            return Err(missing);
        }
        self.remove_seg(ps, pl);
        if ps < start {
            self.insert_seg(ps, start - ps);
        }
        if end < pe {
            self.insert_seg(end, pe - end);
        }
        Ok(())
    }

    /// True if every byte of `[start, start+len)` is in the set.
    /// A zero-length or overflowing range is reported as not contained, so
    /// an empty extent can never pass a validation check by accident.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        let Ok(end) = end_of(start, len) else {
            return false;
        };
        matches!(self.seg_at_or_before(start), Some((s, l)) if s + l >= end)
    }

    /// True if any byte of `[start, start+len)` is in the set
    /// (zero-length ranges overlap nothing; an overflowing end is clamped).
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        let end = start.saturating_add(len);
        if matches!(self.seg_at_or_before(start), Some((s, l)) if s + l > start) {
            return true;
        }
        matches!(self.seg_after(start), Some((s, _)) if s < end)
    }

    /// The segment containing byte `off`, if any.
    pub fn segment_containing(&self, off: u64) -> Option<(u64, u64)> {
        self.seg_at_or_before(off).filter(|(s, l)| s + l > off)
    }

    /// A largest segment `(start, len)` (the highest start among equal
    /// sizes, which is what the size index yields in O(log n)).
    pub fn largest(&self) -> Option<(u64, u64)> {
        self.by_size.iter().next_back().map(|(l, s)| (*s, *l))
    }

    /// The smallest segment `(start, len)` with at least `len` bytes
    /// (lowest start among equal sizes).
    pub fn best_fit(&self, len: u64) -> Option<(u64, u64)> {
        self.by_size.range((len, 0)..).next().map(|(l, s)| (*s, *l))
    }

    /// Offset for `len` bytes aligned to `align` (a power of two): the first
    /// fitting position at or after `cursor`, wrapping to the lowest offsets
    /// once; falls back to best fit after [`FIRST_FIT_MAX_PROBES`] segments
    /// (see module docs).  `None` only if no segment can hold the request
    /// (or `len == 0`, or `align` is not a power of two).
    pub fn first_fit_from(&self, cursor: u64, len: u64, align: u64) -> Option<u64> {
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let mut budget = FIRST_FIT_MAX_PROBES;
        // The segment holding the cursor: continuing inside it is what makes
        // consecutive allocations exactly adjacent.
        if let Some((s, l)) = self.segment_containing(cursor) {
            if let Some(off) = fit_in(s, l, cursor, len, align) {
                return Some(off);
            }
            budget -= 1;
        }
        let after = self.by_start.range((Excluded(cursor), Unbounded));
        for (&s, &l) in after.take(budget) {
            budget -= 1;
            if let Some(off) = fit_in(s, l, s, len, align) {
                return Some(off);
            }
        }
        // Wrap once: segments that start before the cursor, from offset 0.
        for (&s, &l) in self.by_start.range(..cursor).take(budget) {
            if let Some(off) = fit_in(s, l, s, len, align) {
                return Some(off);
            }
        }
        self.fit_by_size(len, align)
    }

    /// Offset for `len` bytes aligned to `align`, lying wholly inside the
    /// window `[lo, hi)`: the first fitting position at or after `from`
    /// (clamped into the window), without wrapping. Examines at most
    /// [`FIRST_FIT_MAX_PROBES`] segments, so in a badly fragmented window it
    /// may miss a fit (`None`); the ditto allocator then tries elsewhere.
    pub fn first_fit_between(&self, from: u64, lo: u64, hi: u64, len: u64, align: u64) -> Option<u64> {
        if len == 0 || !align.is_power_of_two() || lo >= hi {
            return None;
        }
        let from = from.clamp(lo, hi);
        let containing = self.segment_containing(from);
        let after = self.by_start.range((Excluded(from), Unbounded)).map(|(s, l)| (*s, *l));
        for (s, l) in containing.into_iter().chain(after).take(FIRST_FIT_MAX_PROBES) {
            if s >= hi {
                break;
            }
            // The segment clipped to the window.
            let end = s.saturating_add(l).min(hi);
            let start = s.max(lo);
            if end <= start {
                continue;
            }
            if let Some(off) = fit_in(start, end - start, from, len, align) {
                return Some(off);
            }
        }
        None
    }

    /// Best-fit fallback: smallest segments of at least `len` first; a final
    /// lookup for `len + align - 1` is guaranteed to fit if anything does.
    fn fit_by_size(&self, len: u64, align: u64) -> Option<u64> {
        let candidates = self.by_size.range((len, 0)..).take(FIRST_FIT_MAX_PROBES);
        for &(l, s) in candidates {
            if let Some(off) = fit_in(s, l, s, len, align) {
                return Some(off);
            }
        }
        let need = len.checked_add(align - 1)?;
        let &(l, s) = self.by_size.range((need, 0)..).next()?;
        fit_in(s, l, s, len, align)
    }

    /// Segments `(start, len)` in increasing offset order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_start.iter().map(|(s, l)| (*s, *l))
    }

    /// For each piece size `2^(min_shift + i)`, `i < N`: the bytes blocks of
    /// up to that size each can surely fill. A segment of `len ≥ piece`
    /// takes blocks until less than the next one is left, so at least
    /// `len − piece + 1` of it; a shorter segment may take none (without
    /// gang blocks a block needs one segment). One pass over the segments,
    /// largest first: Σ(len − piece + 1) = Σlen − (piece − 1) × count.
    pub fn space_by_piece<const N: usize>(&self, min_shift: u32) -> [u64; N] {
        let mut out = [0u64; N];
        let (mut sum, mut count) = (0u128, 0u128);
        let mut segs = self.by_size.iter().rev().peekable();
        for i in (0..N).rev() {
            let piece = 1u64 << (min_shift + i as u32);
            while let Some(&&(len, _)) = segs.peek().filter(|(len, _)| *len >= piece) {
                sum += u128::from(len);
                count += 1;
                segs.next();
            }
            out[i] = (sum - u128::from(piece - 1) * count) as u64;
        }
        out
    }

    /// Segment count per size class: `hist[i]` counts segments with
    /// `2^i <= len < 2^(i+1)`.
    pub fn histogram(&self) -> [u64; HISTOGRAM_BUCKETS] {
        self.hist
    }

    /// Verify the invariants listed in the module docs (O(n log n)).
    pub fn check(&self) -> Result<(), String> {
        if self.by_size.len() != self.by_start.len() {
            return Err("size index and offset index differ in length".into());
        }
        let (mut space, mut hist) = (0u64, [0u64; HISTOGRAM_BUCKETS]);
        let mut prev_end: Option<u64> = None;
        for (&s, &l) in &self.by_start {
            let end = end_of(s, l).map_err(|e| format!("bad segment: {e}"))?;
            if matches!(prev_end, Some(pe) if s <= pe) {
                return Err(format!(
                    "segment {s:#x} overlaps or touches its predecessor"
                ));
            }
            if !self.by_size.contains(&(l, s)) {
                return Err(format!("segment {s:#x}+{l:#x} missing from size index"));
            }
            space += l;
            hist[bucket(l)] += 1;
            prev_end = Some(end);
        }
        if space != self.space {
            return Err(format!("space {} != recomputed {}", self.space, space));
        }
        if hist != self.hist {
            return Err("histogram does not match segments".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(t: &RangeTree) -> Vec<(u64, u64)> {
        t.iter().collect()
    }

    /// Space by piece: a segment counts for pieces up to its length, less
    /// what a last block may leave (piece − 1); shorter segments not at all.
    #[test]
    fn space_by_piece_counts_only_segments_that_hold_the_piece() {
        let mut t = RangeTree::new();
        t.add(0, 1 << 20).unwrap();
        t.add(2 << 20, 100 << 10).unwrap();
        t.add(4 << 20, 4096).unwrap();
        let by: [u64; 13] = t.space_by_piece(9);
        let at = |shift: u32| by[(shift - 9) as usize];
        assert_eq!(at(9), (1 << 20) - 511 + (100 << 10) - 511 + 4096 - 511);
        assert_eq!(at(12), (1 << 20) - 4095 + (100 << 10) - 4095 + 1);
        assert_eq!(at(16), (1 << 20) - 65535 + (100 << 10) - 65535);
        assert_eq!(at(17), (1 << 20) - 131071);
        assert_eq!(at(20), 1);
        assert_eq!(at(21), 0);
        assert!(by.windows(2).all(|w| w[0] >= w[1]));
        assert_eq!(RangeTree::new().space_by_piece::<4>(9), [0; 4]);
    }

    #[test]
    fn add_remove_coalesce() {
        let mut t = RangeTree::new();
        t.add(100, 10).unwrap();
        t.add(120, 10).unwrap();
        assert_eq!(segs(&t), vec![(100, 10), (120, 10)]);
        t.add(110, 10).unwrap(); // bridges both neighbours
        assert_eq!(segs(&t), vec![(100, 30)]);
        assert_eq!(t.space(), 30);
        t.add(90, 10).unwrap();
        t.add(130, 5).unwrap();
        assert_eq!(segs(&t), vec![(90, 45)]);
        t.remove(100, 10).unwrap();
        assert_eq!(segs(&t), vec![(90, 10), (110, 25)]);
        t.remove(90, 10).unwrap();
        t.remove(130, 5).unwrap();
        assert_eq!(segs(&t), vec![(110, 20)]);
        t.remove(110, 20).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.space(), 0);
        t.check().unwrap();
    }

    #[test]
    fn overlap_and_containment_errors() {
        let mut t = RangeTree::new();
        t.add(100, 50).unwrap();
        let before = t.clone();
        assert_eq!(
            t.add(100, 50),
            Err(RangeError::Overlap {
                start: 100,
                len: 50
            })
        );
        assert!(matches!(t.add(90, 11), Err(RangeError::Overlap { .. })));
        assert!(matches!(t.add(149, 10), Err(RangeError::Overlap { .. })));
        assert!(matches!(t.add(120, 1), Err(RangeError::Overlap { .. })));
        assert!(matches!(t.add(50, 200), Err(RangeError::Overlap { .. })));
        assert!(matches!(t.add(5, 0), Err(RangeError::ZeroLength { .. })));
        assert!(matches!(
            t.add(u64::MAX, 2),
            Err(RangeError::Overflow { .. })
        ));
        assert!(matches!(
            t.remove(90, 20),
            Err(RangeError::NotContained { .. })
        ));
        assert!(matches!(
            t.remove(140, 20),
            Err(RangeError::NotContained { .. })
        ));
        assert!(matches!(
            t.remove(10, 5),
            Err(RangeError::NotContained { .. })
        ));
        assert!(matches!(
            t.remove(100, 0),
            Err(RangeError::ZeroLength { .. })
        ));
        assert_eq!(t, before, "failed operations must not modify the tree");
        assert!(t.contains(100, 50) && t.contains(120, 5));
        assert!(!t.contains(99, 2) && !t.contains(120, 0) && !t.contains(149, 2));
        assert!(t.overlaps(99, 2) && t.overlaps(149, 5) && t.overlaps(0, u64::MAX));
        assert!(!t.overlaps(150, 10) && !t.overlaps(90, 10) && !t.overlaps(120, 0));
        t.check().unwrap();
    }

    #[test]
    fn first_fit_with_cursor_and_wrap() {
        let mut t = RangeTree::new();
        t.add(0, 8).unwrap();
        t.add(16, 4).unwrap();
        t.add(32, 16).unwrap();
        // Inside a segment: continue exactly at the cursor.
        assert_eq!(t.first_fit_from(2, 4, 1), Some(2));
        // Cursor segment too short from the cursor on: next fitting segment.
        assert_eq!(t.first_fit_from(6, 4, 1), Some(16));
        assert_eq!(t.first_fit_from(6, 5, 1), Some(32));
        // Past everything that fits: wrap to the beginning once.
        assert_eq!(t.first_fit_from(40, 10, 1), Some(32));
        assert_eq!(t.first_fit_from(44, 6, 1), Some(0));
        assert_eq!(t.first_fit_from(1000, 3, 1), Some(0));
        // Nothing big enough anywhere.
        assert_eq!(t.first_fit_from(0, 17, 1), None);
        // Alignment: the aligned start must still fit inside the segment.
        assert_eq!(t.first_fit_from(33, 8, 8), Some(40));
        // Aligned position past the cursor does not fit; the wrap finds 32.
        assert_eq!(t.first_fit_from(33, 16, 16), Some(32));
        assert_eq!(t.first_fit_from(1, 8, 8), Some(32));
        assert_eq!(t.first_fit_from(0, 0, 1), None);
        assert_eq!(t.first_fit_from(0, 1, 3), None);
    }

    #[test]
    fn first_fit_between_stays_inside_the_window() {
        let mut t = RangeTree::new();
        t.add(0, 8).unwrap();
        t.add(16, 4).unwrap();
        t.add(32, 16).unwrap();
        // The window clips segments: [4, 8) of the first one.
        assert_eq!(t.first_fit_between(0, 4, 100, 4, 1), Some(4));
        assert_eq!(t.first_fit_between(0, 4, 100, 5, 1), Some(32));
        // The end of the window clips too: [32, 40) holds 8, not 9.
        assert_eq!(t.first_fit_between(0, 20, 40, 8, 1), Some(32));
        assert_eq!(t.first_fit_between(0, 20, 40, 9, 1), None);
        // From a position inside the window, no wrap to its start.
        assert_eq!(t.first_fit_between(36, 0, 48, 8, 1), Some(36));
        assert_eq!(t.first_fit_between(44, 0, 48, 8, 1), None);
        // `from` below the window starts at the window.
        assert_eq!(t.first_fit_between(0, 34, 48, 8, 8), Some(40));
        // Empty windows and bad requests.
        assert_eq!(t.first_fit_between(0, 10, 10, 1, 1), None);
        assert_eq!(t.first_fit_between(0, 0, 48, 0, 1), None);
        assert_eq!(t.first_fit_between(0, 0, 48, 1, 3), None);
    }

    #[test]
    fn largest_best_fit_and_histogram() {
        let mut t = RangeTree::new();
        assert_eq!(t.largest(), None);
        t.add(0, 4096).unwrap();
        t.add(8192, 512).unwrap();
        t.add(16384, 1 << 20).unwrap();
        t.add(1 << 30, 600).unwrap();
        assert_eq!(t.largest(), Some((16384, 1 << 20)));
        assert_eq!(t.best_fit(513), Some((1 << 30, 600)));
        assert_eq!(t.best_fit(512), Some((8192, 512)));
        assert_eq!(t.best_fit(5000), Some((16384, 1 << 20)));
        assert_eq!(t.best_fit(2 << 20), None);
        let h = t.histogram();
        assert_eq!((h[9], h[12], h[20]), (2, 1, 1));
        assert_eq!(h.iter().sum::<u64>(), 4);
        assert_eq!(t.count(), 4);
    }

    #[test]
    fn first_fit_falls_back_when_probe_budget_is_exhausted() {
        let mut t = RangeTree::new();
        // Many 1-byte holes after the cursor, one big segment far away.
        for i in 0..(FIRST_FIT_MAX_PROBES as u64 * 3) {
            t.add(i * 2, 1).unwrap();
        }
        t.add(1_000_000, 100).unwrap();
        assert_eq!(t.first_fit_from(0, 50, 1), Some(1_000_000));
        assert_eq!(t.first_fit_from(0, 101, 1), None);
    }

    fn xorshift(s: &mut u64) -> u64 {
        let mut x = *s;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x;
        x
    }

    const U: usize = 256;

    fn model_segs(bits: &[bool; U]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < U {
            if bits[i] {
                let s = i;
                while i < U && bits[i] {
                    i += 1;
                }
                out.push((s as u64, (i - s) as u64));
            } else {
                i += 1;
            }
        }
        out
    }

    /// Independent first-fit with wrap over the model's segment list.
    fn model_first_fit(segs: &[(u64, u64)], cursor: u64, len: u64, align: u64) -> Option<u64> {
        let fit = |s: u64, l: u64, from: u64| {
            let a = s.max(from).div_ceil(align) * align;
            (a + len <= s + l).then_some(a)
        };
        let forward = segs.iter().filter(|(s, l)| s + l > cursor);
        for &(s, l) in forward {
            if let Some(o) = fit(s, l, cursor) {
                return Some(o);
            }
        }
        segs.iter()
            .filter(|(s, _)| *s < cursor)
            .find_map(|&(s, l)| fit(s, l, s))
    }

    #[test]
    fn randomized_against_bitmap_model() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut bits = [false; U];
        let mut t = RangeTree::new();
        for _ in 0..20_000 {
            let start = xorshift(&mut rng) % U as u64;
            let len = 1 + xorshift(&mut rng) % (U as u64 - start).min(24);
            let span = start as usize..(start + len) as usize;
            let expect_overlap = bits[span.clone()].iter().any(|b| *b);
            assert_eq!(t.overlaps(start, len), expect_overlap);
            assert_eq!(
                t.contains(start, len),
                bits[span.clone()].iter().all(|b| *b)
            );
            if xorshift(&mut rng).is_multiple_of(2) {
                assert_eq!(t.add(start, len).is_ok(), !expect_overlap);
                if !expect_overlap {
                    bits[span].iter_mut().for_each(|b| *b = true);
                }
            } else {
                let ok = bits[span.clone()].iter().all(|b| *b);
                assert_eq!(t.remove(start, len).is_ok(), ok);
                if ok {
                    bits[span].iter_mut().for_each(|b| *b = false);
                }
            }
            let model = model_segs(&bits);
            assert_eq!(segs(&t), model);
            assert_eq!(t.space(), bits.iter().filter(|b| **b).count() as u64);
            t.check().unwrap();
            let (cur, want, align) = (
                xorshift(&mut rng) % U as u64,
                1 + xorshift(&mut rng) % 16,
                1u64 << (xorshift(&mut rng) % 4),
            );
            let got = t.first_fit_from(cur, want, align);
            let expect = model_first_fit(&model, cur, want, align);
            if model.len() < FIRST_FIT_MAX_PROBES {
                assert_eq!(
                    got, expect,
                    "cursor {cur} len {want} align {align} in {model:?}"
                );
            } else {
                assert_eq!(got.is_some(), expect.is_some());
            }
            if let Some(o) = got {
                assert!(o % align == 0 && t.contains(o, want));
            }
            let largest = model.iter().map(|x| x.1).max();
            assert_eq!(t.largest().map(|x| x.1), largest);
            assert_eq!(t.count(), model.len());
        }
    }
}
