//! RAID-Z I/O: a block's columns written to the children, read back and
//! verified, reconstructed when children are missing or silently wrong, and
//! the wrong columns rewritten. The arithmetic is the rest of `vdev/raidz`
//! (pure); this file is the only part that touches devices. The vdev tree
//! (`vdev/tree.rs`) calls it from its RAID-Z arms.
//!
//! ## Where a column lives
//! A RAID-Z vdev's address space is its children's sectors numbered
//! row-major (`layout.rs`); a DVA's offset is in that space and the block's
//! length is its psize in whole sectors, as `PoolCore::copy_extent` gives
//! it — writer and reader must agree on that length, since the map follows
//! from it. Column `c` of the map is `c.size` bytes at byte
//! `LABELS_FRONT + c.offset` of child `c.child` (each child's sectors start
//! past its front labels).
//!
//! ## Writing (`write`)
//! Every block is a full stripe in newly allocated space: parity is computed
//! from the block alone and each column is queued on its child's scheduler
//! in the txg's write group. Nothing is ever read back, modified and
//! rewritten, so a power cut cannot leave old data under new parity (no
//! write hole). A child that is down (offline, faulted, missing) misses the
//! txg: its DTL records it and its column is rebuilt from parity on reads
//! until resilver. A child whose write fails faults without failing the
//! group while the vdev is still up (`io::pipeline`'s "Faults"); the pool
//! suspends when more children than parity are down
//! (`PoolCore::leaf_faulted`), and the columns past parity — failed on the
//! last children, or for children already down — are kept (parked,
//! `Leaf::hold`) and written when `pool clear` resumes the pool.
//!
//! ## Reading (`read`)
//! ```text
//!   all data columns' children up, none missed the block's txg?
//!     yes → read the data columns (in parallel), assemble, check
//!           └─ passes → done: parity never touched
//!   otherwise, or the check failed:
//!     read every column not yet read (skipping children that are down
//!     or whose DTL holds the block's birth) → recover (combinations of
//!     up to nparity columns until the checksum passes) → rewrite the
//!     columns found wrong or missing on children that are up
//! ```
//! A column that read back different from the recovered truth counts a
//! checksum error on its child; a column that could not be read was
//! counted as a read error by the leaf. When no combination verifies, every
//! child whose column was read counts a checksum error (which one is wrong
//! cannot be known; OpenZFS does the same) and the answer is an error:
//! never bytes that fail the check.
//!
//! ## Scrub (`scrub`)
//! Reads every column, parity included, and recovers: `recover` regenerates
//! all parity from the verified data and reports every column that differs,
//! so wrong parity is found and rewritten too — which a read never does.
//!
//! ## Read-ahead (`read_async`)
//! Queues the data columns' reads; the last to complete assembles the block
//! and hands it to the caller unverified (the caller checks it and falls
//! back to a demand read, which reconstructs). Not offered when a data
//! column's child is down or missed the block's txg.
//!
//! ## Bounds
//! A read or write issues at most `width` device requests (255); recovery
//! makes at most `Σ_{n ≤ nparity} C(width, n)` attempts (`recover.rs`).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;
use tarn_ondisk::label::LABELS_FRONT;

use super::layout::{RaidzColumn, RaidzGeometry, RaidzMap};
use super::parity::{self, Parity};
use super::recover::{recover, RecoverError, Recovered, RepairCause};
use crate::error::{Error, ErrorKind, Result};
use crate::io::pipeline::ReadDone;
use crate::io::{IoClass, Leaf, WriteGroup};
use crate::sys::buf::AlignedBuf;
use crate::vdev::{ReadCheck, Vdev};

/// What became of one column's read.
enum Col {
    /// Not read (yet).
    Unread,
    /// Not asked: the child is down, or its DTL holds the block's txg.
    Skipped,
    /// The read failed (the leaf counted a read error).
    Failed(io::Error),
    Read(AlignedBuf),
}

/// What a scrub of one RAID-Z copy found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColumnScrub {
    /// The block verified (after reconstruction if need be).
    pub ok: bool,
    /// Columns found wrong, or unreadable on a child that is up.
    pub bad_columns: usize,
    /// Bytes rewritten on the children (bad columns, and the columns of
    /// children that missed the block's txg).
    pub repaired_bytes: u64,
    /// Column reads issued.
    pub reads: u64,
}

/// The map of the block of `len` bytes at `offset` of `v`'s address space.
fn block_map(v: &Vdev, g: RaidzGeometry, offset: u64, len: u64) -> Result<RaidzMap> {
    let map = g.map(offset, len).map_err(|e| Error::corrupt(format!("{}: block at {:#x}: {}", v.path, offset, e)))?;
    if offset.checked_add(map.asize()).is_none_or(|end| end > v.dev_size) {
        return Err(Error::corrupt(format!("{}: block at {:#x} of {} bytes lies past the vdev's end", v.path, offset, map.asize())));
    }
    assert_eq!(v.children.len(), g.width(), "{}: children and geometry differ", v.path);
    Ok(map)
}

/// Whether column `c` of a block born in `birth` can be read from its child.
fn column_up(v: &Vdev, c: &RaidzColumn, birth: u64) -> bool {
    let child = &v.children[c.child];
    child.up() && !child.missed_txg(birth)
}

/// Queues the write of a block's columns at `offset` in txg `txg` (see the
/// module docs). `retire` dirty bytes retire with the first column queued.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write(v: &Vdev, g: RaidzGeometry, class: IoClass, offset: u64, buf: Arc<AlignedBuf>, group: &Arc<WriteGroup>, retire: u64, txg: u64) {
    let map = match block_map(v, g, offset, buf.len() as u64) {
        Ok(m) => m,
        Err(e) => {
            group.retire_unwritten(retire);
            return group.fail(e.to_string());
        }
    };
    let mut retire = retire;
    let mut parity = parity_columns(&map, &buf).into_iter();
    for (i, c) in map.columns().iter().enumerate() {
        let child = &v.children[c.child];
        // Parity in buffers of its own; a data column is a run of the
        // block's buffer, written from there.
        let (bytes, range) = match parity.next() {
            Some(p) => (Arc::new(p), 0..c.size as usize),
            None => (buf.clone(), data_range(&map, i)),
        };
        // A member being replaced (a replacing vdev) takes the column on
        // each of its leaves.
        for l in child.leaves() {
            match l.leaf().filter(|_| l.leaf_up()) {
                Some(io) => {
                    io.write_part(class, LABELS_FRONT + c.offset, bytes.clone(), range.clone(), group, retire);
                    retire = 0;
                }
                // Asked after the child was found down: as `lacks_txg`
                // only turns true, the columns skipped (or dropped by a
                // failed write, `io::pipeline`'s "Faults") are at most
                // parity; the rest are kept for `pool clear`.
                None if v.lacks_txg(txg) && !l.offline.load(Ordering::Relaxed) => {
                    l.hold_or_fail(LABELS_FRONT + c.offset, &bytes, range.clone(), group, retire);
                    retire = 0;
                }
                None => l.dtl.lock().add(txg),
            }
        }
    }
    if retire > 0 {
        // No column was queued or kept (children down and up again
        // during the loop: `pool online`); the sync's device check judges
        // the vdev, and the dirty bytes must still retire.
        group.retire_unwritten(retire);
    }
}

/// The bytes of the block data column `column` holds: a run of the block
/// (whole sectors, so no padding).
fn data_range(map: &RaidzMap, column: usize) -> std::ops::Range<usize> {
    let r = map.data_range(column);
    assert!(r.end <= map.psize(), "a block in whole sectors has no padding");
    r.start as usize..r.end as usize
}

/// The parity columns (P, Q, R) of a block.
fn parity_columns(map: &RaidzMap, data: &[u8]) -> Vec<AlignedBuf> {
    assert_eq!(data.len() as u64, map.psize(), "raidz block length");
    let nparity = map.nparity();
    let data_cols: Vec<&[u8]> = (nparity..map.columns().len()).map(|c| &data[data_range(map, c)]).collect();
    let mut out: Vec<AlignedBuf> = map.parity_columns().iter().map(|c| AlignedBuf::recycled(c.size as usize)).collect();
    let mut parity_out: Vec<&mut [u8]> = out.iter_mut().map(|b| &mut b[..]).collect();
    parity::generate(&data_cols, Parity::rows(nparity), &mut parity_out);
    out
}

/// A block's columns, parity first, each in a buffer of its own (repairs).
fn encode_columns(map: &RaidzMap, data: &[u8]) -> Vec<AlignedBuf> {
    let mut out = parity_columns(map, data);
    for c in map.nparity()..map.columns().len() {
        out.push(AlignedBuf::from_slice(&data[data_range(map, c)]));
    }
    out
}

/// Reads the block of `len` bytes at `offset`, born in txg `birth`, and
/// returns it once `rc.check` accepts it (see the module docs); the
/// columns found wrong are told to `rc.failed` and rewritten when
/// `rc.repair`.
pub(crate) fn read(v: &Vdev, g: RaidzGeometry, class: IoClass, offset: u64, len: u64, birth: u64, rc: &ReadCheck) -> Result<AlignedBuf> {
    let map = block_map(v, g, offset, len)?;
    let nparity = map.nparity();
    let mut cols = initial_columns(v, &map, birth);
    if cols[nparity..].iter().all(|c| matches!(c, Col::Unread)) {
        let data: Vec<usize> = (nparity..cols.len()).collect();
        read_columns(v, class, &map, &data, birth, &mut cols);
        if let Some(block) = assemble(&map, &cols[nparity..]) {
            if (rc.check)(&block) {
                return Ok(block);
            }
        }
    }
    let rest: Vec<usize> = (0..cols.len()).filter(|i| matches!(cols[*i], Col::Unread)).collect();
    read_columns(v, class, &map, &rest, birth, &mut cols);
    let (data, _) = reconstruct(v, &map, offset, birth, &cols, rc)?;
    let mut out = AlignedBuf::recycled(data.len());
    out.copy_from_slice(&data);
    Ok(out)
}

/// Checks one copy as a scrub does: every column read, parity included;
/// what is wrong is told to `rc.failed` and rewritten when `rc.repair`.
pub(crate) fn scrub(v: &Vdev, g: RaidzGeometry, offset: u64, len: u64, birth: u64, rc: &ReadCheck) -> ColumnScrub {
    let Ok(map) = block_map(v, g, offset, len) else { return ColumnScrub::default() };
    let mut cols = initial_columns(v, &map, birth);
    let all: Vec<usize> = (0..cols.len()).filter(|i| matches!(cols[*i], Col::Unread)).collect();
    let reads = read_columns(v, IoClass::Scrub, &map, &all, birth, &mut cols);
    match reconstruct(v, &map, offset, birth, &cols, rc) {
        Ok((_, found)) => ColumnScrub { ok: true, reads, ..found },
        Err(_) => ColumnScrub { reads, ..Default::default() },
    }
}

/// Writes `data` (a block verified elsewhere: another copy) over the copy
/// at `offset`, every column, on the children that are up, and flushes
/// them. Returns the bytes written.
pub(crate) fn rewrite(v: &Vdev, g: RaidzGeometry, offset: u64, data: &[u8]) -> io::Result<u64> {
    write_columns(v, g, offset, data, &|_| true, true)
}

/// Writes the columns of the block `data` (verified: read through the
/// vdev) at `offset` that child `guid` holds — what it missed — without
/// flushing (the resilver flushes the child once, at its end). Returns the
/// bytes written.
pub(crate) fn resilver(v: &Vdev, g: RaidzGeometry, offset: u64, data: &[u8], guid: u64) -> io::Result<u64> {
    write_columns(v, g, offset, data, &|leaf| leaf.guid == guid, false)
}

/// Writes the columns of `data` at `offset` on the leaves that are up and
/// `pick` chooses (flushing each when `flush`): each child, or each leaf of
/// a member being replaced.
fn write_columns(v: &Vdev, g: RaidzGeometry, offset: u64, data: &[u8], pick: &dyn Fn(&Vdev) -> bool, flush: bool) -> io::Result<u64> {
    let map = block_map(v, g, offset, data.len() as u64).map_err(|e| io::Error::other(e.to_string()))?;
    let mut written = 0;
    for (c, bytes) in map.columns().iter().zip(encode_columns(&map, data)) {
        for l in v.children[c.child].leaves() {
            if l.up() && pick(l) {
                write_column(l, c, &bytes, flush)?;
                written += bytes.len() as u64;
            }
        }
    }
    Ok(written)
}

/// Every column unread, but those whose child cannot give it. When that
/// leaves more columns out than parity covers, the children that are up
/// but missed the block's txg are read after all: a DTL is conservative (a
/// fault adds the txg being synced, whose write may have landed), and the
/// checksum decides whether their columns are right.
fn initial_columns(v: &Vdev, map: &RaidzMap, birth: u64) -> Vec<Col> {
    let mut cols: Vec<Col> = map.columns().iter().map(|c| if column_up(v, c, birth) { Col::Unread } else { Col::Skipped }).collect();
    if cols.iter().filter(|c| matches!(c, Col::Skipped)).count() > map.nparity() {
        for (col, c) in cols.iter_mut().zip(map.columns()) {
            if matches!(col, Col::Skipped) && v.children[c.child].up() {
                *col = Col::Unread;
            }
        }
    }
    cols
}

/// Reads columns `which` in parallel: each queued on its child's
/// scheduler, then all waited for. Returns the reads issued.
fn read_columns(v: &Vdev, class: IoClass, map: &RaidzMap, which: &[usize], birth: u64, cols: &mut [Col]) -> u64 {
    let (tx, rx) = mpsc::channel();
    let mut queued = 0;
    for &i in which {
        let c = map.columns()[i];
        let Some(leaf) = v.children[c.child].column_source(birth).and_then(|l| l.leaf()) else {
            cols[i] = Col::Skipped;
            continue;
        };
        let tx = tx.clone();
        leaf.read_async(class, LABELS_FRONT + c.offset, c.size, Box::new(move |r| {
            // The reader is waiting for exactly these replies.
            let _ = tx.send((i, r));
        }));
        queued += 1;
    }
    drop(tx);
    // Every queued read completes exactly once (`io::pipeline`), so this
    // receives `queued` replies; a column left unread counts as missing.
    for (i, r) in rx.iter().take(queued) {
        cols[i] = match r {
            Ok(b) => Col::Read(b),
            Err(e) => Col::Failed(e),
        };
    }
    queued as u64
}

/// The block from its data columns, when all were read.
fn assemble(map: &RaidzMap, data_cols: &[Col]) -> Option<AlignedBuf> {
    let bufs: Option<Vec<&AlignedBuf>> = data_cols.iter().map(|c| if let Col::Read(b) = c { Some(b) } else { None }).collect();
    Some(concat(map, &bufs?))
}

/// The data columns of a block in whole sectors, one after the other.
fn concat(map: &RaidzMap, data_cols: &[&AlignedBuf]) -> AlignedBuf {
    let nparity = map.nparity();
    assert_eq!(data_cols.len() + nparity, map.columns().len());
    let mut out = AlignedBuf::recycled(map.psize() as usize);
    for (i, col) in data_cols.iter().enumerate() {
        let r = map.data_range(nparity + i);
        assert_eq!(col.len() as u64, r.end - r.start, "raidz data column {i}");
        out[r.start as usize..r.end as usize].copy_from_slice(col);
    }
    out
}

/// Recovers the block from the columns read, counts and rewrites what was
/// wrong (see the module docs); returns the block and what was found.
fn reconstruct(v: &Vdev, map: &RaidzMap, offset: u64, birth: u64, cols: &[Col], rc: &ReadCheck) -> Result<(Vec<u8>, ColumnScrub)> {
    let input: Vec<Option<Vec<u8>>> = cols.iter().map(|c| if let Col::Read(b) = c { Some(b.to_vec()) } else { None }).collect();
    match recover(map, input, |b| (rc.check)(b)) {
        Ok(rec) => {
            let found = apply_repairs(v, map, offset, birth, cols, &rec, rc);
            Ok((rec.data, found))
        }
        Err(e) => Err(unrecoverable(v, map, offset, birth, cols, e, rc)),
    }
}

/// Counts the columns `recover` found wrong against their children, tells
/// `rc.failed` of them, and rewrites them (on children that are up, when
/// `rc.repair`).
fn apply_repairs(v: &Vdev, map: &RaidzMap, offset: u64, birth: u64, cols: &[Col], rec: &Recovered, rc: &ReadCheck) -> ColumnScrub {
    let mut found = ColumnScrub { ok: true, ..Default::default() };
    for r in &rec.repairs {
        let c = &map.columns()[r.column];
        // The leaf the column was read from (of a member being replaced:
        // one of its two), which is blamed; the member's leaves that are
        // up are rewritten.
        let member = &v.children[c.child];
        let child = member.column_source(birth).unwrap_or(member);
        let why = match (r.cause, &cols[r.column]) {
            (RepairCause::Damaged, _) => {
                if let Some(l) = child.leaf().filter(|_| !rc.speculative) {
                    l.note_checksum_error();
                }
                let e = Error::corrupt(format!("{}: column {} of the block at {:#x} fails its parity and checksum", child.path, r.column, offset));
                (rc.failed)(child, LABELS_FRONT + c.offset, &e);
                found.bad_columns += 1;
                "checksum error"
            }
            (RepairCause::Missing, Col::Failed(e)) => {
                let e = Error::io(format!("{}: column {} of the block at {:#x}", child.path, r.column, offset), io::Error::new(e.kind(), e.to_string()));
                (rc.failed)(child, LABELS_FRONT + c.offset, &e);
                found.bad_columns += 1;
                "read error"
            }
            (RepairCause::Missing, _) => "missed the block's txg",
        };
        if !rc.repair {
            continue;
        }
        let bytes = AlignedBuf::from_slice(&r.bytes);
        for l in member.leaves().into_iter().filter(|l| l.up()) {
            if write_column(l, c, &bytes, true).is_ok() {
                found.repaired_bytes += bytes.len() as u64;
                eprintln!(
                    "tarn: repaired {} bytes at {:#x} on '{}' ({}) from {}'s parity",
                    bytes.len(),
                    LABELS_FRONT + c.offset,
                    l.path,
                    why,
                    v.path
                );
            }
        }
    }
    found
}

/// Writes one column's bytes now (a repair), flushed if `flush`; counted
/// in the child's repaired bytes.
fn write_column(child: &Vdev, c: &RaidzColumn, bytes: &AlignedBuf, flush: bool) -> io::Result<()> {
    let Some(l) = child.leaf() else { return Err(io::Error::other(format!("{} is not a device", child.path))) };
    l.write_now(bytes, LABELS_FRONT + c.offset)?;
    if flush {
        l.flush()?;
    }
    child.repaired_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// The error of a block no combination of columns recovers. A checksum
/// failure counts against every child whose column was read, and each of
/// them is told to `rc.failed` (which one is wrong cannot be known); with
/// too many columns unreadable, the children whose reads failed are.
fn unrecoverable(v: &Vdev, map: &RaidzMap, offset: u64, birth: u64, cols: &[Col], e: RecoverError, rc: &ReadCheck) -> Error {
    let what = format!("{}: block at {:#x} ({} bytes)", v.path, offset, map.psize());
    let err = match e {
        RecoverError::Unrecoverable { .. } => Error::corrupt(format!("{}: {}", what, e)),
        _ => {
            let io_err = cols.iter().rev().find_map(|c| if let Col::Failed(e) = c { Some(io::Error::new(e.kind(), e.to_string())) } else { None });
            Error::io(format!("{}: {}", what, e), io_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENXIO)))
        }
    };
    for (c, col) in map.columns().iter().zip(cols) {
        let member = &v.children[c.child];
        let child = member.column_source(birth).unwrap_or(member);
        match (col, err.kind == ErrorKind::Corrupt) {
            (Col::Read(_), true) => {
                if let Some(l) = child.leaf().filter(|_| !rc.speculative) {
                    l.note_checksum_error();
                }
                (rc.failed)(child, LABELS_FRONT + c.offset, &err);
            }
            (Col::Failed(_), false) => (rc.failed)(child, LABELS_FRONT + c.offset, &err),
            _ => {}
        }
    }
    err
}

/// Starts reading a block ahead (see the module docs); false when this
/// vdev cannot (the caller reads on demand).
pub(crate) fn read_async(v: &Vdev, g: RaidzGeometry, class: IoClass, offset: u64, len: u64, birth: u64, done: ReadDone) -> bool {
    let Ok(map) = block_map(v, g, offset, len) else { return false };
    let data: Vec<RaidzColumn> = map.data_columns().to_vec();
    let leaves: Option<Vec<&Leaf>> = data.iter().map(|c| v.children[c.child].column_source(birth).and_then(|l| l.leaf()).filter(|_| column_up(v, c, birth))).collect();
    let Some(leaves) = leaves else { return false };
    let gather = Arc::new(Gather { st: Mutex::new(GatherState { cols: (0..data.len()).map(|_| None).collect(), arrived: 0, err: None, done: Some(done) }), map });
    for (i, (c, leaf)) in data.iter().zip(leaves).enumerate() {
        let g = gather.clone();
        leaf.read_async(class, LABELS_FRONT + c.offset, c.size, Box::new(move |r| g.arrive(i, r)));
    }
    true
}

/// A read-ahead's data columns as they arrive.
struct Gather {
    st: Mutex<GatherState>,
    map: RaidzMap,
}

struct GatherState {
    cols: Vec<Option<AlignedBuf>>,
    arrived: usize,
    err: Option<io::Error>,
    /// Taken by the last column to arrive.
    done: Option<ReadDone>,
}

impl Gather {
    fn arrive(&self, i: usize, r: io::Result<AlignedBuf>) {
        let mut st = self.st.lock();
        match r {
            Ok(b) => st.cols[i] = Some(b),
            Err(e) => {
                st.err.get_or_insert(e);
            }
        }
        st.arrived += 1;
        if st.arrived < st.cols.len() {
            return;
        }
        let done = st.done.take().expect("the last column completes the read once");
        let result = match st.err.take() {
            Some(e) => Err(e),
            None => {
                let bufs: Vec<&AlignedBuf> = st.cols.iter().map(|c| c.as_ref().expect("every column arrived")).collect();
                Ok(concat(&self.map, &bufs))
            }
        };
        drop(st);
        done(result);
    }
}

#[cfg(test)]
mod tests {
    use super::super::recover::encode;
    use super::*;

    /// The columns written are `recover::encode`'s (the pure encoder the
    /// exhaustive tests check), for full, partial and sub-row blocks.
    #[test]
    fn written_columns_are_the_pure_encoding() {
        for (width, nparity) in [(3, 1), (6, 2), (7, 3), (12, 3)] {
            let g = RaidzGeometry::new(width, nparity, 9).unwrap();
            for sectors in [1u64, 2, 5, 17, 64] {
                let data: Vec<u8> = (0..sectors * 512).map(|i| (i * 7 + i / 511) as u8).collect();
                let map = g.map(512 * 3, data.len() as u64).unwrap();
                let ours: Vec<Vec<u8>> = encode_columns(&map, &data).iter().map(|b| b.to_vec()).collect();
                assert!(ours == encode(&map, &data), "raidz{nparity} width {width}, {sectors} sectors");
                let bufs: Vec<AlignedBuf> = ours[nparity..].iter().map(|c| AlignedBuf::from_slice(c)).collect();
                let refs: Vec<&AlignedBuf> = bufs.iter().collect();
                assert!(concat(&map, &refs)[..] == data[..]);
            }
        }
    }
}
