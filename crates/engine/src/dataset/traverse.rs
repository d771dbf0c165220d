//! Freeing the part of an object set's tree that no snapshot shares: every
//! block born after `min_txg`. Copy on write makes the pruning sound: a
//! block born at or before `min_txg` was never rewritten since, so nothing
//! below it is newer either, and the whole subtree is shared with the
//! snapshot of that txg. Only indirect blocks, dnode blocks and roots are
//! read; data blocks are freed from their parents' pointers.

use tarn_ondisk::bp::{BlockPtr, ObjectType, BP_SIZE};
use tarn_ondisk::dnode::{Dnode, ObjsetPhys, SLOTS_PER_BLOCK, SLOT_SIZE};

use crate::error::Result;
use crate::io::IoClass;
use crate::pool::core::PoolCore;

/// Bound on the explicit stack: a full path through every level of every
/// object of one dnode block.
const STACK_MAX: usize = 1 << 24;

/// Frees (in `txg`) every block of the tree under `root` born after
/// `min_txg`; returns (blocks, bytes) freed.
pub(crate) fn free_born_after(core: &PoolCore, root: &BlockPtr, min_txg: u64, txg: u64) -> Result<(u64, u64)> {
    let mut stack = vec![*root];
    let (mut blocks, mut bytes) = (0u64, 0u64);
    while let Some(bp) = stack.pop() {
        if bp.is_hole() || bp.birth <= min_txg {
            continue;
        }
        assert!(stack.len() < STACK_MAX, "traversal stack over its bound");
        let what = || format!("block of a destroyed tree (level {}, born {})", bp.level, bp.birth);
        if bp.otype == ObjectType::Objset && bp.level == 0 {
            let data = core.read_block(&bp, IoClass::SyncRead, &what)?;
            let phys = ObjsetPhys::decode(&data)?;
            stack.extend(phys.meta_dnode.blkptr);
        } else if bp.level > 0 {
            let data = core.read_block(&bp, IoClass::SyncRead, &what)?;
            for c in data.chunks_exact(BP_SIZE) {
                stack.push(BlockPtr::decode(c)?);
            }
        } else if bp.otype == ObjectType::DnodeArray {
            let data = core.read_block(&bp, IoClass::SyncRead, &what)?;
            let mut slot = 0;
            while slot < SLOTS_PER_BLOCK && (slot + 1) * SLOT_SIZE <= data.len() {
                match Dnode::decode(&data[slot * SLOT_SIZE..])? {
                    Some(dn) => {
                        slot += dn.slots().max(1);
                        stack.extend(dn.blkptr);
                    }
                    None => slot += 1,
                }
            }
        }
        if !bp.is_embedded() {
            blocks += 1;
            bytes += bp.asize_total();
            core.free_block(&bp, txg)?;
        }
    }
    Ok((blocks, bytes))
}
