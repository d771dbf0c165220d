//! The system seam: aligned buffers, the device trait, real file/block
//! devices and the fault-injecting in-memory device used by the crash tests.
//! All engine I/O goes through [`device::BlockDevice`], so the same engine
//! runs on real disks and in a simulation that can cut power at any write.

pub mod buf;
pub mod device;
pub mod fault;
pub mod file;
pub mod memory;
pub mod throttled;

pub use buf::AlignedBuf;
pub use device::BlockDevice;
pub use fault::{FaultConfig, FaultDevice, FaultZone};
pub use file::FileDevice;
pub use throttled::ThrottledDevice;
