//! Dead lists (OpenZFS's dsl_deadlist): per dataset and snapshot, the block
//! pointers that the previous snapshot references but this one (or the
//! head) no longer does. Stored as a MOS object of 128-byte block pointers
//! (the birth txg is in the pointer), appended once per txg.
//!
//! OpenZFS keys its dead lists by birth txg into sub-lists with space
//! summaries, so a range's space is known without reading entries; tarn
//! keeps one flat list and per-record byte counters, and reads the list only
//! when a snapshot is destroyed or its unique space is asked for.

use tarn_ondisk::bp::{BlockPtr, ObjectType, BP_SIZE};

use crate::error::{Error, Result};
use crate::object::Objset;

/// Entries read per call when a dead list is loaded.
const READ_CHUNK: usize = 8192;

pub(crate) fn create(mos: &Objset, txg: u64) -> Result<u64> {
    mos.create_in(txg, ObjectType::DeadList, 3)
}

/// Appends entries (syncing context).
pub(crate) fn append(mos: &Objset, txg: u64, obj: u64, bps: &[BlockPtr]) -> Result<()> {
    if bps.is_empty() {
        return Ok(());
    }
    let size = mos.info(obj)?.size;
    let mut buf = vec![0u8; bps.len() * BP_SIZE];
    for (i, bp) in bps.iter().enumerate() {
        bp.encode(&mut buf[i * BP_SIZE..(i + 1) * BP_SIZE]);
    }
    mos.write_txg(txg, obj, size, &buf)
}

/// Every entry of a dead list (0: the empty list).
pub(crate) fn read(mos: &Objset, obj: u64) -> Result<Vec<BlockPtr>> {
    if obj == 0 {
        return Ok(Vec::new());
    }
    let size = mos.info(obj)?.size;
    if size % BP_SIZE as u64 != 0 {
        return Err(Error::corrupt(format!("dead list {} is {} bytes, not whole block pointers", obj, size)));
    }
    let mut out = Vec::with_capacity((size / BP_SIZE as u64) as usize);
    let mut off = 0;
    while off < size {
        let data = mos.read(obj, off, READ_CHUNK * BP_SIZE)?;
        if data.is_empty() {
            break;
        }
        for c in data.chunks_exact(BP_SIZE) {
            out.push(BlockPtr::decode(c).map_err(|e| Error::from(e).context(format!("dead list {}", obj)))?);
        }
        off += data.len() as u64;
    }
    Ok(out)
}
