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
//! Only the RAID-Z arithmetic, as pure functions with no I/O ([`raidz`]):
//! the column map and allocation size of a block, P/Q/R parity over
//! GF(2⁸), reconstruction of missing columns, and the combinatorial search
//! that finds silently damaged columns by the block's checksum. Pools are
//! still stripes of single devices (`pool/core.rs`'s `TopVdev`); nothing
//! on disk uses RAID-Z yet (docs/format.md, "RAID-Z layout arithmetic").
//!
//! ## What comes next
//! Leaf and mirror vdevs, the raidz vdev issuing the reads and writes a
//! [`raidz::RaidzMap`] describes, vdev health and the tree in the labels,
//! then scrub and resilver on top.

pub mod raidz;
