//! Datasets, snapshots and clones (OpenZFS's DSL, dataset layer).
//!
//! ## Purpose
//! A pool holds a tree of file systems named `pool/a/b`, each an object set
//! with properties, plus read-only snapshots `pool/a/b@s` and writable
//! clones of snapshots. Snapshots cost O(1) to take: they share every block
//! with their file system; copy on write and block birth txgs tell later
//! who owns what.
//!
//! ## On disk (all in the MOS, format.md §11)
//! ```text
//!  root dataset record (object 4) ── ds_index ─▶ name directory ─▶ sorted pages: name → record
//!        │ child_first                    resv:<id> datasets with reservations
//!        ▼
//!  record "pool/a" ── sib_next ─▶ record "pool/b" ...
//!        │ prev_snap                           one record per file system and snapshot:
//!        ▼                                     bp (object-set root), parent, sibling links,
//!  record "pool/a@s2" ── prev_snap ─▶ "@s1"    prev_snap/next_snap chain, deadlist, space
//!        next_snap points back toward the head counters, origin/clones, prop:* local values
//! ```
//! Lookups by name go through the sorted name index (`index.rs`: a
//! directory and one page, whatever the number of datasets; a batch of
//! names under one parent rewrites a few pages); listing follows child and
//! snapshot links.
//!
//! ## Births and dead lists
//! Every block pointer carries its birth txg. A head (a file system's live
//! object set) remembers `prev_snap_txg`, the txg of its latest snapshot
//! (or of its origin). When its sync frees a block (the `ObjsetOwner`
//! hooks, `owner.rs`):
//! ```text
//!  birth >  prev_snap_txg   only the head had it          → freed
//!  birth <= prev_snap_txg   the latest snapshot holds it  → appended to the head's dead list
//! ```
//! The birth compared is the pointer's logical birth: a block cloned into
//! the head (block cloning) is born at the clone, whatever the age of its
//! data, so the head's snapshots account for it like any block it wrote.
//! "Freed" means one reference dropped (`PoolCore::free_block`): a cloned
//! block other pointers still share stays allocated.
//! Taking snapshot S of head H in txg t (a sync task, after H's object set
//! synced in t): S takes H's root pointer, txg and dead list; H gets an
//! empty dead list and `prev_snap_txg = t`. Nothing else is written.
//!
//! Destroying snapshot S (dsl_destroy_snapshot): each entry of next(S)'s
//! dead list born after prev(S) is referenced by S alone → freed; the others
//! are still referenced by prev(S) → moved onto S's dead list, which becomes
//! next(S)'s. A snapshot with clones is refused.
//! Destroying a file system (without snapshots) frees its tree's blocks born
//! after `prev_snap_txg` (the origin's txg for a clone, else 0), pruning
//! every subtree born earlier; its dead list holds origin blocks, kept.
//! Rollback to the latest snapshot S frees the head's blocks born after S,
//! drops its dead list (S holds those blocks, and the head again) and
//! restarts its object set from S's root (the same `Arc<Objset>`: holders
//! see the rolled-back content; unsynced changes are dropped). A clone is a
//! new head whose root is its origin snapshot's and whose `prev_snap` is
//! that snapshot. Rename rewrites the names of a subtree (O(subtree)).
//! An object set of a destroyed dataset refuses reads and writes.
//!
//! ## Sync tasks
//! Every change to records runs in syncing context (`Datasets::run` queues a
//! task for the open txg and waits for it to sync), so records are written
//! by the sync thread only. Per txg: destroys of file systems and rollbacks
//! (before object sets sync: their last synced trees have landed, and their
//! unsynced changes are dropped); every dirty head's object set; its record
//! (root pointer, referenced bytes, dead entries); the other tasks
//! (creates, snapshots, clones, snapshot destroys, properties); the changed
//! records into the MOS; then the MOS syncs.
//!
//! ## Invariants (`Datasets::check_invariants`, run by `Pool::check_invariants`;
//! `check_links` runs on every changed record before each uberblock in debug builds)
//! - every record is found under its name in the index (`check_indexed`);
//! - children name their parent, are named below it, and the sibling list is
//!   doubly linked (`check_children`);
//! - a head's snapshots chain newest to oldest with decreasing creation
//!   txgs, each naming the next, `prev_snap_txg` equal to the previous
//!   snapshot's creation txg, ending at nothing or at the clone's origin
//!   (`check_chain`);
//! - dead-list entries are born no later than their owner's previous
//!   snapshot and the record's byte counters match them (`check_deadlist`);
//! - a record's links agree with its neighbours' (`check_links`);
//! - a clone names its origin and the origin lists the clone;
//! - an open head's `prev_snap_txg` is its record's.
//!
//! The pool checker (`pool/verify.rs`) adds: every block is counted once
//! however many trees and dead lists share it, every dead-list entry is in
//! some snapshot's tree, and the allocator holds exactly what all trees and
//! dead lists reference.
//!
//! ## Bounds and costs
//! Record cache and name cache grow with the datasets used since import
//! (about 1 KiB each); object sets opened stay open (with their cached
//! dnodes, bounded per set by `tarn_dnode_cache_objects`) until their
//! dataset is destroyed. Measured (tests/datasets.rs): a cold lookup reads
//! 0.8 blocks with 50 datasets and 2.2 with 5,000 datasets and 1,000
//! snapshots; a snapshot of 1 MiB or of 48 MiB writes the same 64 KiB. Snapshot creation: 1–2 new MOS objects and 3 record
//! rewrites. Snapshot destroy reads the next dead list; destroy and rollback
//! read the indirect and dnode blocks born after the snapshot (synchronously
//! in the sync task: OpenZFS frees large trees asynchronously).

mod deadlist;
mod dsl;
mod index;
mod logs;
mod invariants;
pub mod names;
mod owner;
pub mod props;
mod record;
mod space;
mod tasks;
mod traverse;

pub use dsl::{DatasetInfo, DatasetKind, Datasets, Op, Submitted, Types};
pub use props::{PropValue, Source};
pub(crate) use record::Rec;
