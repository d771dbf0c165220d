//! Objects and object sets (OpenZFS's DMU).
//!
//! An object set is a numbered collection of objects; each object is a
//! sparse array of bytes stored as a tree of blocks: level-0 blocks of the
//! object's block size (growing up to the record size while the object has
//! one block, fixed after), under 128 KiB indirect blocks of 1024 block
//! pointers each, under one block pointer in the object's dnode. Dnodes live
//! in the object set's dnode array (object 0); the object set's root block
//! holds the dnode of that array.
//!
//! Changes are made in transactions ([`Tx`]): a writer joins the open txg
//! through the write throttle, copies its data into dirty blocks of that txg,
//! and leaves. Nothing is written in place: the txg sync writes new blocks,
//! new indirect blocks above them, new dnode blocks, a new object-set root and
//! finally a new uberblock, freeing the blocks they replace.
//!
//! ```text
//!  uberblock ─▶ meta object set root ─▶ dnode array ─▶ dataset records
//!                                                          │
//!                      dataset object set root ◀───────────┘
//!                        └─▶ dnode array ─▶ dnode ─▶ L2 ─▶ L1 ─▶ L0 data
//! ```
//!
//! Small objects (up to `tarn_inline_max_bytes`, 3 KiB) keep their data in
//! their dnode when their reserved dnode slots allow, so a 1 KiB object costs
//! about 1.1 KiB of dnode block instead of a 4 KiB sector — for each copy of
//! the dnode block: two under `redundant_metadata=all` (the default), which
//! treats dnode blocks as the metadata they are.
//!
//! A range of blocks can be cloned from one object to another of the same
//! pool (`Objset::clone_range`, `clone.rs`): the destination gets the
//! source's block pointers, counted in the pool's block reference table.

mod clone;
mod objset;
mod prewrite;
// Crate-visible only so that `crate::fuzzing` can reach the indirect block
// decoder; nothing outside the crate sees it.
pub(crate) mod state;
pub(crate) mod sync;

pub use clone::{CloneProgress, CLONE_BLOCKS_MAX, COPY_BYTES_MAX};
pub use objset::{CachePolicy, ObjectInfo, Objset, ObjsetOwner, ObjsetProps, ReadCaching, Tx, MAX_OBJECT_BYTES};

use parking_lot::Mutex;

/// One object, shared by the threads using it and the sync thread.
pub struct Object {
    pub id: u64,
    pub(crate) st: Mutex<state::ObjState>,
}
