//! What a mount asks of whoever knows the datasets: the [`Splice`] a mount
//! is given (`mount_spliced`) so that it can serve, besides the dataset it
//! mounts, the child datasets inside it and the snapshots under `.zfs`.
//!
//! The FUSE glue knows no pools: it asks which names are children and
//! snapshots, and to open them, by dataset name. The daemon answers from the
//! pool's dataset layer (`cli/src/daemon/served.rs`). Calls come from the
//! FUSE worker threads, several at once; they must not wait on anything a
//! worker could be holding up (the daemon's state lock is the example: the
//! daemon holds it while it unmounts, which waits for the workers).

use std::sync::Arc;

use tarn_engine::posix::{FileSystem, PResult};

/// A file system opened for a slot, and whether it is read-only.
pub struct Opened {
    pub fs: Arc<dyn FileSystem>,
    /// Refuse every change with `EROFS` (snapshots, `readonly=on`).
    pub readonly: bool,
}

/// The datasets around a mount. Names are full dataset names
/// (`tank/a/b`, `tank/a@today`).
pub trait Splice: Send + Sync {
    /// The child of `dataset` served at `name` in its root (a file system
    /// whose mountpoint is inherited and that is mounted automatically):
    /// its full name, or `None`.
    fn child(&self, dataset: &str, name: &[u8]) -> PResult<Option<String>>;
    /// The names in `dataset`'s root of every child served there.
    fn children(&self, dataset: &str) -> PResult<Vec<Vec<u8>>>;
    /// The snapshots of `dataset`, by the name after the `@`.
    fn snapshots(&self, dataset: &str) -> PResult<Vec<Vec<u8>>>;
    /// Whether `dataset@snap` exists (and may be reached).
    fn has_snapshot(&self, dataset: &str, snap: &[u8]) -> PResult<bool>;
    /// Whether `dataset`'s root lists `.zfs` (`snapdir=visible`); it is
    /// reachable by name either way.
    fn snapdir_visible(&self, dataset: &str) -> bool;
    /// Opens a child dataset or a snapshot for serving. A file system is
    /// served by one mount at a time: the implementation refuses a dataset
    /// served elsewhere.
    fn open(&self, name: &str) -> PResult<Opened>;
    /// The mount no longer serves `name` (detached, or unmounted).
    fn closed(&self, name: &str);
}
