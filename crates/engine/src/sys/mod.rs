//! The system seam: aligned buffers, the device trait, real file/block
//! devices, the fault-injecting in-memory device used by the crash tests
//! and the lean one simulated pools run on (`ramdisk`), with the bandwidth,
//! latency and IOPS shaping a benchmark puts in front of a device (`throttled`);
//! and what the host says about a device before tarn takes it (`probe`:
//! the signatures on it; `inuse`: mounts, swap, holders, loop devices;
//! `mountinfo`: the mount table, shared with the FUSE glue).
//! All engine I/O goes through [`device::BlockDevice`], so the same engine
//! runs on real disks and in a simulation that can cut power at any write.

pub mod buf;
pub mod clock;
pub mod device;
pub mod fault;
pub mod file;
pub mod inuse;
pub mod memory;
pub mod mountinfo;
pub mod probe;
pub mod ramdisk;
pub mod throttled;

pub use buf::AlignedBuf;
pub use device::BlockDevice;
pub use fault::{FaultConfig, FaultDevice, FaultZone};
pub use file::FileDevice;
pub use ramdisk::{RamBudget, RamDevice};
pub use throttled::ThrottledDevice;
