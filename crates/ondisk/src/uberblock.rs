//! The uberblock: the root of everything a txg wrote.
//!
//! Each synced txg ends by writing one uberblock into slot `txg % slots` of the
//! ring in every label of every device, after everything it points to is
//! durable (written and flushed). Import reads all rings and takes the newest
//! uberblock whose checksum verifies and whose tree can be opened; a torn or
//! lost uberblock write therefore costs at most the txg it described.
//!
//! Layout (512 bytes at the start of a slot, the rest of the slot zero):
//!
//! ```text
//!   0  8 magic 0x7461726e_75626572 (as a little-endian u64: the bytes on disk
//!          read "rebunrat", "tarnuber" backwards)
//!   8  8 format version
//!  16  8 txg
//!  24  8 guid_sum of the vdev tree
//!  32  8 timestamp (unix seconds)
//!  40  8 pool guid
//!  48 128 mos       block pointer to the meta object set's root block
//! 176 128 space_log  newest block of the space log (hole: none since checkpoint)
//! 304 128 space_cp   first block of the space checkpoint chain
//! 432  8 space_cp_txg  txg the checkpoint describes
//! 440  8 features_active
//! 448 32 reserved (zero)
//! 480 32 blake3 of bytes 0..480
//! ```

use crate::bp::{BlockPtr, BP_SIZE};
use crate::codec::{le_u64, put_u64, DecodeError};

pub const UB_MAGIC: u64 = 0x7461_726e_7562_6572;
pub const UB_SIZE: usize = 512;
/// The on-disk format version this code writes and reads.
pub const FORMAT_VERSION: u64 = 1;

/// Feature bit *block cloning* (label config `features_compat`, uberblock
/// `features_active`): the pool has a block reference table (`brt`) and
/// cloned block pointers, which carry a physical birth. Read-only
/// compatible: a reader that does not know it reads every block correctly,
/// but a writer that did not consult the table would free shared blocks.
pub const FEATURE_BLOCK_CLONING: u64 = 1 << 0;
/// Feature bit *hot spares* (label config `features_compat`): the labels
/// list hot spares after the vdev tree, and an available spare's own label
/// has state SPARE. Read-only compatible: a reader that does not know it
/// reads every block correctly (an in-use spare is a leaf of the tree like
/// any other), but a writer would drop the list.
pub const FEATURE_SPARES: u64 = 1 << 1;
/// Feature bit *intent log* (label config `features_compat`): some file
/// system's record names an intent-log chain (dataset record key `zil`).
/// Read-only compatible: a reader that does not know it sees the pool as
/// of its last txg; a writer that did not claim the chains at import could
/// allocate over log blocks before they are replayed.
pub const FEATURE_INTENT_LOG: u64 = 1 << 2;
/// Feature bit *vdev tree* (label config `features_incompat`): the pool has
/// mirror or RAID-Z vdevs (labels carry interior nodes; a DVA's offset is
/// in its top-level vdev's address space). Incompatible: a reader that
/// does not know it would read a mirror's child as the whole vdev.
pub const FEATURE_VDEV_TREE: u64 = 1 << 0;
/// Feature bit *log vdevs* (label config `features_incompat`): some
/// top-level vdevs are separate intent-log devices (the label config's log
/// list after the spares). Incompatible: a reader that does not know it
/// would allocate ordinary blocks on a log device, and would import without
/// a missing log device whose records the file systems need.
pub const FEATURE_LOG_VDEVS: u64 = 1 << 1;
/// Feature bit *hole vdevs* (label config `features_incompat`): the tree
/// holds a hole (kind 9) where a removed log vdev was, keeping the ids of
/// the top-level vdevs after it. Incompatible: a reader that does not know
/// the kind cannot parse the tree, and one that dropped the hole would
/// renumber the vdevs after it (every DVA there would name the wrong one).
pub const FEATURE_HOLE_VDEVS: u64 = 1 << 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uberblock {
    pub version: u64,
    pub txg: u64,
    pub guid_sum: u64,
    pub timestamp: u64,
    pub pool_guid: u64,
    pub mos: BlockPtr,
    pub space_log: BlockPtr,
    pub space_cp: BlockPtr,
    pub space_cp_txg: u64,
    pub features_active: u64,
}

impl Uberblock {
    pub fn encode(&self) -> [u8; UB_SIZE] {
        let mut b = [0u8; UB_SIZE];
        put_u64(&mut b, 0, UB_MAGIC);
        put_u64(&mut b, 8, self.version);
        put_u64(&mut b, 16, self.txg);
        put_u64(&mut b, 24, self.guid_sum);
        put_u64(&mut b, 32, self.timestamp);
        put_u64(&mut b, 40, self.pool_guid);
        self.mos.encode(&mut b[48..48 + BP_SIZE]);
        self.space_log.encode(&mut b[176..176 + BP_SIZE]);
        self.space_cp.encode(&mut b[304..304 + BP_SIZE]);
        put_u64(&mut b, 432, self.space_cp_txg);
        put_u64(&mut b, 440, self.features_active);
        let sum = blake3::hash(&b[..480]);
        b[480..512].copy_from_slice(sum.as_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let what = "uberblock";
        if b.len() < UB_SIZE {
            return Err(DecodeError::new(what, "truncated"));
        }
        if le_u64(b, 0) != UB_MAGIC {
            return Err(DecodeError::new(what, "bad magic"));
        }
        if blake3::hash(&b[..480]).as_bytes() != &b[480..512] {
            return Err(DecodeError::new(what, "checksum mismatch"));
        }
        let version = le_u64(b, 8);
        if version != FORMAT_VERSION {
            return Err(DecodeError::new(what, format!("unsupported format version {}", version)));
        }
        Ok(Uberblock {
            version,
            txg: le_u64(b, 16),
            guid_sum: le_u64(b, 24),
            timestamp: le_u64(b, 32),
            pool_guid: le_u64(b, 40),
            mos: BlockPtr::decode(&b[48..176])?,
            space_log: BlockPtr::decode(&b[176..304])?,
            space_cp: BlockPtr::decode(&b[304..432])?,
            space_cp_txg: le_u64(b, 432),
            features_active: le_u64(b, 440),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bp::ObjectType;

    #[test]
    fn round_trip_and_checksum() {
        let ub = Uberblock {
            version: FORMAT_VERSION,
            txg: 77,
            guid_sum: 5,
            timestamp: 1_700_000_000,
            pool_guid: 9,
            mos: BlockPtr::hole(1024, ObjectType::Objset, 0),
            space_log: BlockPtr::default(),
            space_cp: BlockPtr::default(),
            space_cp_txg: 70,
            features_active: 0,
        };
        let b = ub.encode();
        assert_eq!(Uberblock::decode(&b).unwrap(), ub);
        let mut bad = b;
        bad[20] ^= 0x10;
        assert!(Uberblock::decode(&bad).is_err());
    }
}
