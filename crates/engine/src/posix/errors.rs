//! Naming the pool's permanent errors (`tarn pool status -v`): each bookmark
//! of the error log (`pool::errlog`) as the file — or, failing that, the
//! object — whose block no copy of could be read, as `zpool status -v` does.
//!
//! A bookmark gives an object-set number and an object. The set's dataset is
//! found by its record number (`Datasets::name_of`); a POSIX object is named
//! by walking parent pointers (each inode's `parent` attribute) up to the
//! root directory, finding in each parent the entry that names the child.
//! The name is the dataset's mountpoint joined with that path (a snapshot's
//! under `.zfs/snapshot/SNAP` of its file system's mountpoint), or
//! `DATASET:/path` when the dataset has no mountpoint. What cannot be
//! resolved is shown as OpenZFS shows it:
//!
//! ```text
//!   bookmark                                   shown as
//!   MOS object N (object set 0)                <metadata>:<0xN>
//!   object set S of no (more) dataset          <0xS>:<0xN>
//!   dnode array or root block of dataset D     D:<0x0>
//!   object N of D with no path (its dnode is   D:<0xN>
//!   lost, a hard link's parent moved, not a
//!   POSIX object)
//! ```
//! A file lost with its dnode block is named by number: its dnode, which
//! holds the parent pointer, is what cannot be read.
//!
//! Bounds: a path has at most `PATH_DEPTH_MAX` components, and at most
//! `DIR_SCAN_MAX` entries of each parent directory are read looking for the
//! child; past either the object is named by number.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::dir;
use super::fs::MASTER_OBJ;
use super::inode::{InodePhys, Master, MASTER_BYTES};
use crate::dataset::Datasets;
use crate::object::Objset;
use crate::pool::errlog::Bookmark;
use crate::pool::Pool;

/// Components of a path walked up from an object.
const PATH_DEPTH_MAX: usize = 256;
/// Entries of one directory read while looking for a child's name.
const DIR_SCAN_MAX: usize = 1 << 20;
/// Entries listed per directory read.
const DIR_PAGE: usize = 512;

/// One permanent error, named.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NamedError {
    #[serde(flatten)]
    pub at: Bookmark,
    /// The dataset the object set belongs to (None: the MOS, or a dataset
    /// that is gone).
    pub dataset: Option<String>,
    /// The object's path inside the dataset, when it could be walked.
    pub path: Option<String>,
    /// As `status -v` shows it.
    pub name: String,
}

/// The pool's error log, named (in bookmark order).
pub fn named_errors(pool: &Pool) -> Vec<NamedError> {
    name_bookmarks(pool.datasets(), &pool.error_log())
}

/// Bookmarks named as `named_errors` names them (the blocks `pool events`
/// reports), in the order given.
pub fn name_bookmarks(ds: &Datasets, marks: &[Bookmark]) -> Vec<NamedError> {
    let mut sets: HashMap<u64, Option<DatasetSet>> = HashMap::new();
    marks
        .iter()
        .map(|&at| {
            let set = sets.entry(at.objset).or_insert_with(|| dataset_of(ds, at.objset));
            name(ds, at, set.as_ref())
        })
        .collect()
}

/// A dataset's name, and its object set when it opens.
type DatasetSet = (String, Option<Arc<Objset>>);

/// The dataset of object set `id`, and the set when it opens.
fn dataset_of(ds: &Datasets, id: u64) -> Option<DatasetSet> {
    if id == 0 {
        return None;
    }
    let name = ds.name_of(id).ok()?;
    let os = ds.objset(&name).ok();
    Some((name, os))
}

fn name(ds: &Datasets, at: Bookmark, set: Option<&DatasetSet>) -> NamedError {
    let Some((dataset, os)) = set else {
        let name = match at.objset {
            0 => format!("<metadata>:<{:#x}>", at.object),
            s => format!("<{:#x}>:<{:#x}>", s, at.object),
        };
        return NamedError { at, dataset: None, path: None, name };
    };
    let path = match (at.object, os) {
        (0, _) | (_, None) => None,
        (obj, Some(os)) => path_of(os, obj),
    };
    let name = match &path {
        Some(p) => full_name(ds, dataset, p),
        None => format!("{}:<{:#x}>", dataset, at.object),
    };
    NamedError { at, dataset: Some(dataset.clone()), path, name }
}

/// `p` (a path from the dataset's root) under the dataset's mountpoint.
fn full_name(ds: &Datasets, dataset: &str, p: &str) -> String {
    let (fs, snap) = match dataset.split_once('@') {
        Some((f, s)) => (f, Some(s)),
        None => (dataset, None),
    };
    match ds.get(fs, "mountpoint").map(|v| v.value) {
        Ok(mp) if mp.starts_with('/') => {
            let base = match snap {
                Some(s) => Path::new(&mp).join(".zfs/snapshot").join(s),
                None => Path::new(&mp).to_path_buf(),
            };
            base.join(p.trim_start_matches('/')).display().to_string()
        }
        _ => format!("{}:{}", dataset, p),
    }
}

/// The path of inode `ino` from the root directory of the POSIX file
/// system in `os` (None: not a POSIX object, or a link of the walk cannot
/// be read or found).
pub fn path_of(os: &Objset, ino: u64) -> Option<String> {
    let master = Master::decode(&os.read(MASTER_OBJ, 0, MASTER_BYTES).ok()?).ok()?;
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut cur = ino;
    for _ in 0..PATH_DEPTH_MAX {
        if cur == master.root {
            let parts: Vec<String> = names.iter().rev().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
            return Some(format!("/{}", parts.join("/")));
        }
        let parent = InodePhys::decode(&os.bonus(cur).ok()?).ok()?.parent;
        if parent == cur {
            return None;
        }
        names.push(name_in(os, parent, cur)?);
        cur = parent;
    }
    None
}

/// The name under which directory `dir` holds `ino`.
fn name_in(os: &Objset, dir: u64, ino: u64) -> Option<Vec<u8>> {
    let mut after = None;
    let mut seen = 0;
    while seen < DIR_SCAN_MAX {
        let page = dir::list(os, dir, after, DIR_PAGE).ok()?;
        if let Some(e) = page.iter().find(|e| e.ino == ino) {
            return Some(e.name.clone());
        }
        let last = page.last()?;
        after = Some(last.key);
        seen += page.len();
    }
    None
}
