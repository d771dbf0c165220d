//! The vdev layer: the tree between the pool and its leaf devices.
//!
//! ## Where it is going (issue 12)
//! OpenZFS keeps a tree of virtual devices under each pool:
//! ```text
//!                         root
//!          ┌───────────────┼────────────────┐        blocks are striped over
//!      top-level 0     top-level 1      top-level 2  the top-level vdevs
//!        mirror          raidz2            leaf      (each block on one)
//!       ┌──┴──┐      ┌──┬──┼──┬──┐
//!     leaf  leaf   leaf …  …  …  leaf                 files or block devices
//! ```
//! Each vdev will carry a guid, a state (online, degraded, faulted, offline,
//! removed, unavailable), read/write/checksum error counters and the txg
//! ranges a child missed (its dirty time log); the tree is written in every
//! label so import can find missing devices. Reads go down with a checksum
//! check and come back with the data and the repairs to make: a mirror
//! reads another child, RAID-Z reconstructs from parity. This floor sits
//! between the pool (allocation, sync) and the I/O pipeline, and knows
//! nothing of datasets or objects.
//!
//! ## What exists now
//! [`Vdev`] (tree.rs) is a node: a leaf with its scheduler (`io::Leaf`), a
//! mirror, a RAID-Z vdev (its arithmetic in [`raidz`], pure functions), a
//! replacing vdev (a device and its replacement, `pool replace`: a mirror
//! of the two, at the top level, under a mirror or as a RAID-Z member), or
//! a spare vdev (a device and the hot spare standing in for it,
//! `pool/spare.rs`: the same mirror of two, which stays until one of them
//! is detached).
//! The pool keeps its top-level vdevs in a `VdevSet` (`PoolCore::vdevs`):
//! readers take a snapshot, and `pool attach/detach/replace/add` swap in a
//! rebuilt node around the same leaves (`pool/vdev_change.rs`,
//! `pool/vdev_add.rs`); a removed log vdev that was not the last leaves a
//! hole there, an empty place that is no `Vdev` (`pool/log_vdev.rs`,
//! "Removal"). A DVA names a top-level vdev and an offset in its
//! address space:
//! - a leaf's address space is the device (labels included, allocation
//!   starts past the front labels);
//! - a mirror's is each child's: a block is written to every child that
//!   is up at the same offset, and read from one, the next tried when the
//!   first fails its checksum; the children found bad are rewritten with
//!   the good bytes (self-healing), counted per leaf;
//! - a RAID-Z vdev's is its children's sectors numbered row-major
//!   (`raidz/layout.rs`): a block is written as a full stripe of data
//!   and parity columns, read from its data columns while it verifies,
//!   and otherwise rebuilt from parity, the wrong columns rewritten
//!   (`raidz/io.rs`).
//!
//! ## Health
//! A leaf is online until its scheduler faults it (`io::pipeline`: a failed
//! write or flush, a device that shrank or vanished) or the administrator
//! takes it offline; a device the config names that import did not find is
//! UNAVAIL ([`MissingDevice`]). An interior vdev is DEGRADED while it can
//! still serve every block (a mirror with one child up, RAID-Z with at most
//! `nparity` children down), else UNAVAIL. A child's failed write faults it
//! and completes its write group without error while the top-level vdev
//! still holds the txg without it ([`Vdev::lacks_txg`], asked after the
//! fault: `io::pipeline`'s "Faults"): the block is on the siblings, and the
//! child's DTL takes it from there. The pool suspends when a top-level
//! vdev can no longer take writes (the leaf's fault hook, and the sync's
//! device check before every uberblock); the writes of the txg that
//! reached too few children — failed on a mirror's last child or on
//! RAID-Z children past parity, or for children already down — are then
//! parked on their leaves (`Leaf::hold` for those never issued), and
//! `pool clear`, once enough children take writes again, queues them
//! again: the txg is written after all and the children that missed some
//! of it resilver (as OpenZFS's zio_suspend / zio_resume).
//!
//! ## Dirty time logs
//! A leaf that is down while its siblings take writes misses those txgs:
//! each write it skips adds the txg to its [`Dtl`], and a fault adds the
//! txg being synced. Reads try a child whose DTL holds the block's birth
//! txg last (its copy may be stale or absent; the checksum decides);
//! resilver (`pool/scan.rs`) visits only
//! blocks born in a leaf's DTL and clears it when done.

pub mod raidz;
mod tree;

pub use tree::{Dtl, Kind, MissingDevice, ReadCheck, State, Vdev};
