//! The I/O layer (OpenZFS's zio and vdev_queue): checksums, compression, the
//! per-device scheduler and the threads that issue to devices, and the
//! fault injection handlers each device's I/O passes (`inject`, zinject's).

pub mod block;
pub mod checksum;
pub mod compress;
pub mod inject;
pub mod pipeline;
pub mod queue;
pub mod stats;

pub use block::{Prepared, RedundantMetadata, WriteProps};
pub use compress::CompressSetting;
pub use pipeline::{DirtyGauge, Leaf, LeafStats, WriteGroup};
pub use queue::{IoClass, IoKind, QueueLimits};
