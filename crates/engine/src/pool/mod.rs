//! Pools (OpenZFS's SPA): devices, labels, allocation, the txg sync and
//! import/export.
//!
//! A pool is a stripe of top-level vdevs, each a single file or block device.
//! Creating one writes a label set to every device and syncs txg 1 holding an
//! empty meta object set (the pool directory) and an empty root dataset.
//! Opening (import) reads every label, takes the newest valid config and the
//! newest uberblock whose checksum and guid sum verify, opens the pool as of
//! its txg and rebuilds the allocator from the space checkpoint and log. When
//! that txg cannot be opened, import refuses, saying what a rewind to an older
//! txg would discard, and rewinds only when asked (`import`, `import -F`).
//! It refuses, naming the device, a device of another pool given with the
//! pool's own and a device smaller than its config says (truncated).
//!
//! ## The sync of one txg
//! ```text
//!  0. the txg's block clones add their references (before any free; `brt`)
//!     dataset tasks that run first (destroys of file systems, rollbacks)
//!  1. every dirty dataset: dirty objects → data blocks, cloned pointers linked,
//!     indirect blocks, dnode blocks, root block
//!  2. their records in the meta object set take the new root pointers, space and dead
//!     blocks; the other dataset tasks run (creates, snapshots, clones, ...)
//!  3. clones no record linked give their reference back; the block reference table's
//!     changes and a changed pool directory go into the MOS
//!     meta object set: same steps → new MOS root
//!  4. wait for all those writes (dirty data retires as each lands)
//!  5. space log block (or every N txgs a checkpoint); wait
//!  6. flush every device
//!  7. uberblock into ring slot txg % 32 of all four labels of every device; flush
//!  8. the allocator releases frees two txgs old; dirty records are dropped
//! ```
//! An uberblock is written only after everything it points to is durable. If
//! any write or flush fails, the pool is suspended: writers get an error, no
//! later uberblock is written, and what is on disk stays the last good txg.
//!
//! Invariants, checked before every uberblock write ([`Pool::check_invariants`]
//! in debug builds): the allocator's own invariants; the txg engine's; the new
//! uberblock's txg is above the previous one. `Pool::check_invariants` adds
//! the block reference table's (`brt`) and the datasets'.
//!
//! Every free of a block goes through `PoolCore::free_block`, which asks the
//! block reference table first: a cloned block with other pointers loses a
//! reference instead of its space.
//!
//! A read that finds no good copy of a block enters the pool's error log
//! (`errlog`), kept in the MOS; every damaged copy a read meets is an
//! event (`events`: the pool's event ring, kept in the MOS too, and the
//! daemon log), as are faults, scrubs, imports and exports.
//!
//! Faults can be injected into a live pool's leaf devices (`inject`,
//! `tarn inject`); export and destroy are refused while any handler is in
//! place, and a close ends them.

pub mod alloc;
pub mod brt;
pub mod cache_dev;
pub mod core;
pub mod errlog;
pub mod events;
pub mod import;
pub mod inject;
pub mod label;
pub mod log_vdev;
pub mod metrics;
#[allow(clippy::module_inception)]
mod pool;
pub mod rebuild;
pub mod resilver;
pub mod scan;
pub mod spacemap;
pub mod spare;
pub mod vdev_add;
pub mod vdev_admin;
pub mod vdev_change;
pub mod vdevs;
pub mod verify;
pub mod vet;

#[cfg(test)]
pub(crate) use pool::queue_limits;
pub(crate) use pool::{new_guid, objset_props, read_kv, rewrite_kv};
pub use import::Rewind;
pub use pool::{discover, TxgRecord, parse_recordsize, set_dataset_prop, validate_pool_name, CreateOptions, DiscoveredPool, OpenOptions, Pool, PoolStatus, Suspension, VdevStatus};
