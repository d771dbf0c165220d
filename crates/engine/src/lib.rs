//! tarn's storage engine: a copy-on-write, checksummed pool in the design of
//! OpenZFS, in one crate with one module per layer (see docs/architecture.md
//! and docs/glossary.md for the OpenZFS counterpart of each):
//!
//! - [`sys`]     devices: real files and block devices, the fault-injecting device
//! - [`io`]      checksums, compression, the per-device I/O scheduler, issue threads
//! - [`arc`]     the block cache
//! - [`txg`]     transaction groups, dirty-data accounting, the write throttle
//! - [`object`]  objects, object sets, transactions and their sync
//! - [`dataset`] datasets, snapshots, clones, properties
//! - [`pool`]    labels, allocation, import/export, the txg sync sequence
//! - [`vdev`]    the vdev tree under the pool; for now RAID-Z's layout and parity
//! - [`posix`]   files, directories, links, attributes (the FUSE layer's contract)
//! - [`tunables`] every tunable, with its OpenZFS name
//! - [`guid_json`] guids in JSON output: strings, exact for every reader

pub mod arc;
pub mod dataset;
pub mod error;
pub mod guid_json;
#[doc(hidden)]
pub mod fuzzing;
pub mod io;
pub mod object;
pub mod pool;
pub mod posix;
pub mod sys;
pub mod tunables;
pub mod txg;
pub mod vdev;
pub mod zil;

pub use error::{Error, ErrorKind, Result};
pub use object::{ObjectInfo, Objset, ObjsetProps, Tx};
pub use pool::{CreateOptions, OpenOptions, Pool};
pub use tunables::Tunables;
