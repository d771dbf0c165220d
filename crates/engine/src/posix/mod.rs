//! The POSIX layer (OpenZFS's ZPL): files, directories, links and
//! attributes on top of an object set. It returns errors and knows no FUSE;
//! [`api`] is the contract with the layer that serves it, [`PosixFs`] the
//! implementation.
//!
//! ## On disk (docs/format.md §16)
//!
//! ```text
//!  object 1  master: magic, version, root directory, unlinked set
//!  object 4  unlinked set: inode numbers, 8 bytes each
//!  inode     an object; attributes in its dnode bonus (108 bytes: mode,
//!            uid, gid, nlink, rdev, size, gen, parent, flags, large-xattr
//!            object, a/m/c/crtime with nanoseconds) then small xattrs
//!  file      data = the object's bytes (sparse; inline in the dnode when
//!            small: a 1 KiB file costs 18 slots = 1152 bytes, 14 to a
//!            16 KiB dnode block)
//!  symlink   target = the object's bytes
//!  directory compact: one leaf of entries; past 4 KiB an extendible hash
//!            (header, pointer table, 4 KiB leaves split on overflow)
//! ```
//!
//! Inode numbers are object numbers; the generation is the creating txg
//! (dnode slots are never reused, so a number is never reused either).
//!
//! ## In memory
//!
//! An inode table holds each inode's attributes while it is used, its open
//! handle count, and whether it has been freed. Every change to attributes
//! is written to the bonus in the same transaction as the data or names it
//! goes with, so a txg never holds one without the other. Clean inodes
//! nobody holds are dropped past 65,536 (open or nameless ones never).
//!
//! ## Unlinked files
//!
//! Removing the last name of an open inode puts it on the unlinked set (in
//! the same transaction); its last `release` frees it and takes it off. A
//! crash loses the handles, so `PosixFs::open` frees whatever the set holds.
//!
//! ## Durability
//!
//! There is no intent log yet: `fsync` and `sync_all` wait for a txg sync
//! (`PosixOptions::sync`, by default the pool's own). `copy_file_range`
//! clones whole blocks at the same offset in a block of both files (block
//! cloning through the pool's block reference table: no data copied) and
//! copies the rest.
//!
//! ## Locks and their order
//!
//! 1. `ns`, the namespace lock: held for write by every change to a
//!    directory's entries (create, link, unlink, rename …), for read by
//!    lookup and readdir. One writer at a time keeps multi-directory changes
//!    (rename across directories, the subtree check) simple and atomic.
//! 2. an inode's lock: its attributes and open count; data operations
//!    (read, write, truncate, fallocate, xattrs) take only this one, for the
//!    whole operation. At most one inode lock is held at a time.
//! 3. the inode table's and the unlinked set's locks: held briefly, never
//!    while taking 1 or 2.
//! 4. the object layer's locks (below all of these).
//!
//! A transaction may be begun while holding 1 and 2: the txg sync takes
//! none of this layer's locks, so waiting for the throttle cannot deadlock.
//!
//! ## Invariants
//!
//! - a directory's `size` attribute is its entry count, its `nlink` is 2 plus
//!   its subdirectories;
//! - a file's `size` attribute equals its object's size;
//! - every inode with `nlink` 0 that still exists is on the unlinked set;
//! - directory entries are in key order in their leaves, and a leaf holds
//!   only hashes with its prefix (checked when read).
//!
//! `PosixFs::verify` walks the tree and checks the first three (and that
//! entries agree with their inodes' kinds and link counts).
//!
//! ## Full pools and quotas
//!
//! A change that allocates is refused before it changes anything
//! (`PosixFs::tx_for`, through `Objset::begin_for`): `ENOSPC` when the
//! pool lacks the space (less its slop reserve and all dirty data),
//! `EDQUOT` when a quota of the dataset or an ancestor does. Short of space
//! while frees are still on their way (a delete not yet synced, frees the
//! allocator defers two txgs), it first makes the pool sync, up to three
//! times, and asks again, so space a delete freed is the next writer's at
//! once. Directory writes then skip the check, so a directory is never left
//! half-changed, and a create whose data write still fails frees the object
//! it made. Removals may dip into the pool's slop reserve, so a full pool
//! can always be emptied.

pub mod api;
mod dir;
pub mod errors;
mod file;
mod fs;
mod inode;
mod log;
mod namei;
mod ops;
mod replay;
mod verify;

pub use api::*;
pub use file::XATTR_VALUE_MAX;
pub use fs::{PosixFs, PosixOptions, SyncFn};
pub use namei::{NAME_MAX, SYMLINK_MAX};
pub use verify::PosixReport;
