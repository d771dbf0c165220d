//! Which datasets are served where, shared by the daemon's requests and the
//! FUSE workers; and [`DatasetSplice`], through which a mount serves the
//! child datasets inside it and the snapshots under `.zfs/snapshot`.
//!
//! A dataset's file system (`PosixFs`) keeps state in memory — its inode
//! table, its namespace lock — so exactly one may serve a file system at a
//! time: either a mount of its own (`own`) or a slot inside its parent's
//! mount (`attached`, claimed when the slot is first opened). The registry
//! below arbitrates, under one mutex that is never held while anything else
//! is waited for; the FUSE workers reach it through the splice and never
//! take the daemon's state lock (the daemon holds that while it unmounts,
//! which waits for the workers). Snapshots are read-only: several file
//! systems may serve one (a `.zfs` slot and `tarn mount SNAP DIR`).
//!
//! A child dataset is served inside its parent's mount when its file
//! system is mounted automatically (`canmount=on`), its mountpoint is
//! inherited (so it lies at the parent's mountpoint plus its name) and not
//! `none`/`legacy`, it has no mount of its own, it was not `tarn unmount`ed
//! and no command holds it (a destroy, rename or rollback in progress).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tarn_engine::dataset::{Datasets, Source, Types};
use tarn_engine::posix::{Errno, FileSystem, PResult};
use tarn_engine::{Error, ErrorKind, Result};
use tarn_fuse::{MemFs, Opened, Splice};

#[derive(Default)]
struct Registry {
    /// File systems served by a mount of their own.
    own: HashSet<String>,
    /// File systems open in a slot of some mount.
    attached: HashSet<String>,
    /// `tarn unmount`ed: not served inside their parent until `tarn mount`.
    unmounted: HashSet<String>,
    /// Held by a command in progress (with what is below them), counted.
    held: HashMap<String, u32>,
}

impl Registry {
    fn held(&self, name: &str) -> bool {
        self.held.keys().any(|h| name == h || name.strip_prefix(h.as_str()).is_some_and(|r| r.starts_with('/') || r.starts_with('@')))
    }
}

/// The registry, and the test hook's file systems.
pub struct Served {
    reg: Mutex<Registry>,
    /// Test hook (debug builds, `TARN_TEST_MEMFS=1`): each dataset is served
    /// from an in-memory `MemFs` kept here by name, so the mount machinery
    /// is testable without the POSIX layer.
    memfs: Option<Mutex<HashMap<String, Arc<MemFs>>>>,
}

/// A dataset held back from being served while a command changes it;
/// released when dropped.
pub struct Hold {
    served: Arc<Served>,
    name: String,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut r = self.served.reg.lock();
        if let Some(n) = r.held.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                r.held.remove(&self.name);
            }
        }
    }
}

fn below(name: &str, top: &str) -> bool {
    name == top || name.strip_prefix(top).is_some_and(|r| r.starts_with('/') || r.starts_with('@'))
}

impl Served {
    pub fn new(test_memfs: bool) -> Served {
        Served { reg: Mutex::new(Registry::default()), memfs: test_memfs.then(|| Mutex::new(HashMap::new())) }
    }

    /// Holds `name` and everything below it back until the guard drops.
    pub fn hold(self: &Arc<Self>, name: &str) -> Hold {
        *self.reg.lock().held.entry(name.to_string()).or_insert(0) += 1;
        Hold { served: self.clone(), name: name.to_string() }
    }

    /// `name` gets a mount of its own; refused while a slot serves it.
    pub fn claim_own(&self, name: &str) -> Result<()> {
        let mut r = self.reg.lock();
        if r.attached.contains(name) {
            return Err(Error::new(ErrorKind::Exists, format!("'{}' is already mounted inside its parent's mount", name)));
        }
        r.own.insert(name.to_string());
        r.unmounted.remove(name);
        Ok(())
    }

    pub fn release_own(&self, name: &str) {
        self.reg.lock().own.remove(name);
    }

    /// `tarn unmount` of a dataset served inside its parent (`on`), or
    /// `tarn mount` of it again; whether it was marked before.
    pub fn set_unmounted(&self, name: &str, on: bool) -> bool {
        let mut r = self.reg.lock();
        if on {
            !r.unmounted.insert(name.to_string())
        } else {
            r.unmounted.remove(name)
        }
    }

    /// Whether the registry lets `name` be served inside its parent.
    pub fn may_attach(&self, name: &str) -> bool {
        let r = self.reg.lock();
        !r.own.contains(name) && !r.unmounted.contains(name) && !r.held(name)
    }

    /// A slot opens `name`. A hold does not stop it: holds keep names
    /// from resolving, and whoever holds detaches the slots it cares about.
    fn claim_attached(&self, name: &str) -> PResult<()> {
        let mut r = self.reg.lock();
        if r.own.contains(name) || r.unmounted.contains(name) || r.attached.contains(name) {
            return Err(Errno::new(libc::ENOENT, format!("'{}' is not served here", name)));
        }
        r.attached.insert(name.to_string());
        Ok(())
    }

    fn held(&self, name: &str) -> bool {
        self.reg.lock().held(name)
    }

    /// The test hook's file systems of `name` and below are gone with their
    /// datasets (a dataset created again under the name starts empty).
    pub fn forget_filesystems(&self, name: &str) {
        if let Some(m) = &self.memfs {
            m.lock().retain(|d, _| !below(d, name));
        }
    }

    /// The test hook's file systems below `from` now serve `to` (a rename).
    pub fn rename_filesystems(&self, from: &str, to: &str) {
        if let Some(m) = &self.memfs {
            let mut m = m.lock();
            let moved: Vec<String> = m.keys().filter(|d| below(d, from)).cloned().collect();
            for d in moved {
                if let Some(fs) = m.remove(&d) {
                    m.insert(format!("{}{}", to, &d[from.len()..]), fs);
                }
            }
        }
    }

    /// Whether the test hook serves datasets from memory.
    pub fn is_memfs(&self) -> bool {
        self.memfs.is_some()
    }

    /// The file system that serves `dataset` (file system or snapshot) of
    /// `dsl`: the one place where the POSIX layer is chosen. Snapshots are
    /// served read-only; a file system's access-time properties are read
    /// now, and changes reach it while it is served
    /// (`mounts::served_props_changed`).
    pub fn filesystem(&self, dsl: &Datasets, dataset: &str) -> Result<Arc<dyn FileSystem>> {
        if let Some(m) = &self.memfs {
            return Ok(m.lock().entry(dataset.to_string()).or_insert_with(|| Arc::new(MemFs::new())).clone());
        }
        let objset = dsl.objset(dataset).map_err(|e| match e.kind {
            ErrorKind::NotFound => Error::not_found(format!("cannot mount '{}': no such dataset", dataset)),
            _ => e.context(format!("cannot mount '{}'", dataset)),
        })?;
        // A file system gets its POSIX layout when first opened; a snapshot
        // taken before that has none and cannot be given one (read-only):
        // it is served as the empty directory it is.
        if dataset.contains('@') && objset.next_object() <= 1 {
            return Ok(Arc::new(MemFs::new()));
        }
        let on = |p: &str| dsl.get(dataset, p).map(|v| v.value == "on");
        let snapshot = dataset.contains('@');
        let sync_policy = super::mounts::sync_policy(dsl, dataset);
        let log = if snapshot { None } else { Some(dsl.zil(dataset)?) };
        let opts = tarn_engine::posix::PosixOptions { readonly: snapshot, atime: on("atime")?, relatime: on("relatime")?, log, sync_policy, ..Default::default() };
        let fs = tarn_engine::posix::PosixFs::open(objset, opts).map_err(|e| e.context(format!("cannot mount '{}'", dataset)))?;
        Ok(fs)
    }
}

/// Whether `name`'s own properties let it be served inside its parent's
/// mount (see the module comment; the registry has its say separately).
pub fn attachable(dsl: &Datasets, name: &str) -> bool {
    if !name.contains('/') || name.contains('@') {
        return false;
    }
    let Ok(can) = dsl.get(name, "canmount") else { return false };
    let Ok(mp) = dsl.get(name, "mountpoint") else { return false };
    can.value == "on" && mp.source != Source::Local && mp.value != "none" && mp.value != "legacy"
}

/// A name a dataset component may have (what `engine::dataset::names`
/// accepts, checked cheaply before asking the dataset layer).
fn component(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    let ok = !s.is_empty() && s != "." && s != ".." && s.len() <= 255 && s.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.:".contains(&c));
    ok.then_some(s)
}

fn eio(e: Error) -> Errno {
    Errno::new(libc::EIO, e.msg)
}

/// The datasets of one pool, as the mounts of its datasets see them.
pub struct DatasetSplice {
    pub dsl: Arc<Datasets>,
    pub served: Arc<Served>,
}

impl DatasetSplice {
    fn served_child(&self, full: &str) -> bool {
        self.served.may_attach(full) && attachable(&self.dsl, full)
    }
}

impl Splice for DatasetSplice {
    fn child(&self, dataset: &str, name: &[u8]) -> PResult<Option<String>> {
        let Some(c) = component(name) else { return Ok(None) };
        let full = format!("{}/{}", dataset, c);
        Ok(self.served_child(&full).then_some(full))
    }

    fn children(&self, dataset: &str) -> PResult<Vec<Vec<u8>>> {
        let kids = self.dsl.child_names(dataset).map_err(eio)?;
        Ok(kids.into_iter().filter(|k| self.served_child(k)).filter_map(|k| k.rsplit('/').next().map(|s| s.as_bytes().to_vec())).collect())
    }

    fn snapshots(&self, dataset: &str) -> PResult<Vec<Vec<u8>>> {
        let names = self.dsl.names(dataset, false, Types::SNAPSHOTS).map_err(eio)?;
        Ok(names.into_iter().filter(|n| !self.served.held(n)).filter_map(|n| n.split_once('@').map(|(_, s)| s.as_bytes().to_vec())).collect())
    }

    fn has_snapshot(&self, dataset: &str, snap: &[u8]) -> PResult<bool> {
        let Some(s) = component(snap) else { return Ok(false) };
        let full = format!("{}@{}", dataset, s);
        Ok(!self.served.held(&full) && self.dsl.exists(&full))
    }

    fn snapdir_visible(&self, dataset: &str) -> bool {
        self.dsl.get(dataset, "snapdir").is_ok_and(|v| v.value == "visible")
    }

    fn open(&self, name: &str) -> PResult<Opened> {
        if name.contains('@') {
            let fs = self.served.filesystem(&self.dsl, name).map_err(Errno::from)?;
            return Ok(Opened { fs, readonly: true });
        }
        self.served.claim_attached(name)?;
        let opened = self.served.filesystem(&self.dsl, name).map(|fs| Opened { fs, readonly: self.dsl.get(name, "readonly").is_ok_and(|v| v.value == "on") });
        if opened.is_err() {
            self.closed(name);
        }
        opened.map_err(Errno::from)
    }

    fn closed(&self, name: &str) {
        self.served.reg.lock().attached.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_cover_what_is_below_and_release_when_dropped() {
        let s = Arc::new(Served::new(true));
        {
            let _h = s.hold("tank/a");
            assert!(!s.may_attach("tank/a") && !s.may_attach("tank/a/b") && s.held("tank/a@s"));
            assert!(s.may_attach("tank/ab"), "a sibling with a longer name is not below");
            let _again = s.hold("tank/a");
        }
        assert!(s.may_attach("tank/a"));
        s.claim_attached("tank/x").unwrap();
        assert!(s.claim_own("tank/x").is_err(), "one server per file system");
        assert!(s.claim_attached("tank/x").is_err());
        s.reg.lock().attached.remove("tank/x");
        s.claim_own("tank/x").unwrap();
        assert!(!s.may_attach("tank/x"));
        s.release_own("tank/x");
        s.set_unmounted("tank/x", true);
        assert!(!s.may_attach("tank/x"));
        assert_eq!(component(b"ok-name_1.2:x"), Some("ok-name_1.2:x"));
        assert_eq!(component(b"bad name"), None);
        assert_eq!(component(b".zfs"), Some(".zfs"));
    }
}
