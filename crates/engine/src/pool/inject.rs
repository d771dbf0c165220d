//! A live pool's fault injection handlers (`tarn inject`, as zinject):
//! adding one to a leaf device named by path or guid, listing them,
//! clearing them. What a handler does to the I/O is `io::inject`; each
//! sits in its leaf's I/O object, so the pool's table is the union of its
//! leaves' handlers, and a leaf is found by `PoolCore::leaf_named` alone.
//!
//! The pool's rules: handlers go with the pool's close (a daemon that
//! stops does not carry them into the final sync), and an export or
//! destroy is refused while any is in place — OpenZFS refuses to export a
//! pool with injection handlers (EBUSY) — so a rehearsal is never ended by
//! an export that writes its labels through a fault. A suspended pool is
//! still closed by `discard` (`export -f`), which writes nothing.

use super::core::names_device;
use super::Pool;
use crate::error::{printable, Error, ErrorKind, Result};
use crate::io::inject::InjectSpec;

/// One handler as `tarn inject` lists it.
#[derive(Clone, Debug)]
pub struct Injection {
    pub id: u64,
    /// The device's path, as `pool status` shows it, and its guid.
    pub device: String,
    pub guid: u64,
    pub spec: InjectSpec,
    /// Operations it failed, damaged or delayed so far.
    pub injected: u64,
}

impl Pool {
    /// Adds a handler on the data device `device` (a path or guid, see
    /// `names_device`); its id.
    pub fn inject(&self, device: &str, spec: InjectSpec) -> Result<u64> {
        let core = self.core();
        let Some(l) = core.leaf_refs().find(|l| names_device(device, &l.path, l.guid)) else { return Err(self.not_a_leaf(device)) };
        l.leaf.injections().add(spec, &l.path).map_err(|e| e.context(format!("pool '{}'", core.name)))
    }

    fn not_a_leaf(&self, which: &str) -> Error {
        let core = self.core();
        if core.l2.devices().iter().any(|d| names_device(which, &d.path, d.guid)) {
            return Error::invalid(format!(
                "'{}' is a cache device of pool '{}': tarn inject injects faults into data devices only (a cache device that fails costs cache hits, nothing more)",
                printable(which),
                core.name
            ));
        }
        let paths: Vec<String> = core.leaf_refs().map(|l| l.path).collect();
        Error::not_found(format!("no device '{}' in pool '{}' (its devices: {})", printable(which), core.name, paths.join(", ")))
    }

    /// The pool's handlers, by id.
    pub fn injections(&self) -> Vec<Injection> {
        let mut v: Vec<Injection> = self
            .core()
            .leaf_refs()
            .flat_map(|l| {
                l.leaf.injections().handlers().into_iter().map(move |h| Injection { id: h.id, device: l.path.clone(), guid: l.guid, spec: h.spec, injected: h.injected() })
            })
            .collect();
        v.sort_by_key(|i| i.id);
        v
    }

    /// Removes handler `id`; whether the pool had it. Its leaf's next
    /// operation runs without it.
    pub fn clear_injection(&self, id: u64) -> bool {
        self.core().leaf_refs().any(|l| l.leaf.injections().remove(id))
    }

    /// Removes every handler; how many there were.
    pub fn clear_injections(&self) -> usize {
        self.core().leaf_refs().map(|l| l.leaf.injections().clear()).sum()
    }

    /// Refuses `verb` (export, destroy) while handlers are in place.
    pub fn refuse_while_injecting(&self, verb: &str) -> Result<()> {
        let ids: Vec<String> = self.injections().iter().map(|i| i.id.to_string()).collect();
        if ids.is_empty() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Busy,
            format!("cannot {} pool '{}': it has fault injection handlers ({}); clear them first (`tarn inject -c ID|all`)", verb, self.core().name, ids.join(", ")),
        ))
    }
}
