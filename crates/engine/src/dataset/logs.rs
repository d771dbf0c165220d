//! The datasets' intent logs (`crate::zil`): one per file system, made on
//! first use or at import when its record names a chain. The dataset layer
//! keeps each log's header in the file system's record and the set of file
//! systems with a chain in the root's (`log:<id>`), which import claims
//! before anything allocates; each sync frees what the logs no longer
//! need and writes the headers that changed.

use std::sync::Arc;

use super::dsl::{Datasets, State};
use crate::error::{Error, Result};
use crate::zil::Zil;

impl Datasets {
    /// The intent log of file system `name`.
    pub fn zil(&self, name: &str) -> Result<Arc<Zil>> {
        let mut st = self.st.lock();
        let r = self.resolve(&mut st, name)?;
        if r.snapshot {
            return Err(Error::invalid(format!("'{}' is a snapshot: it has no intent log", name)));
        }
        let throughput = self.logbias_throughput(&mut st, &r)?;
        let mut zils = self.zils.lock();
        let z = zils.entry(r.id).or_insert_with(|| Zil::new(self.core.clone(), r.id, &r.name, r.zil)).clone();
        z.set_logbias_throughput(throughput);
        Ok(z)
    }

    /// Whether `logbias` of `r` is `throughput`.
    fn logbias_throughput(&self, st: &mut State, r: &super::record::Rec) -> Result<bool> {
        Ok(self.effective(st, r, "logbias")?.value == "throughput")
    }

    /// After a property change: every log takes its dataset's `logbias`.
    pub(crate) fn refresh_logbias(&self, st: &mut State) -> Result<()> {
        let zils: Vec<(u64, Arc<Zil>)> = self.zils.lock().iter().map(|(id, z)| (*id, z.clone())).collect();
        for (id, z) in zils {
            let Ok(r) = self.get_rec(st, id) else { continue };
            z.set_logbias_throughput(self.logbias_throughput(st, &r)?);
        }
        Ok(())
    }

    /// The logs made so far (for their counters).
    pub fn logs(&self) -> Vec<Arc<Zil>> {
        self.zils.lock().values().cloned().collect()
    }

    /// Import: claims every log chain the root record lists, so that
    /// nothing allocates over a block before it is replayed. A chain that
    /// cannot be read is a warning naming its dataset (its records are
    /// lost), not a failed import.
    pub(crate) fn claim_logs(&self, imported_txg: u64) -> Result<Vec<String>> {
        let mut st = self.st.lock();
        let root = self.get_rec(&mut st, self.root_id)?;
        let mut warnings = Vec::new();
        for id in &root.logs {
            let r = match self.get_rec(&mut st, *id) {
                Ok(r) => r,
                Err(e) => {
                    warnings.push(format!("pool '{}': the intent log of dataset {} cannot be found: {}", self.core.name, id, e));
                    continue;
                }
            };
            let zil = Zil::new(self.core.clone(), r.id, &r.name, r.zil);
            zil.set_logbias_throughput(self.logbias_throughput(&mut st, &r)?);
            if let Err(e) = zil.claim(imported_txg) {
                warnings.push(format!("pool '{}': the intent log of '{}' cannot be claimed, its records are lost: {}", self.core.name, r.name, e));
                zil.discard();
            }
            self.zils.lock().insert(r.id, zil);
        }
        Ok(warnings)
    }

    /// Syncing context: each log frees what `txg` makes moot and its header
    /// goes to its record when it changed; the root's list follows.
    pub(crate) fn sync_logs(&self, st: &mut State, txg: u64) -> Result<()> {
        self.core.free_dropped_prewritten(txg)?;
        let zils: Vec<(u64, Arc<Zil>)> = self.zils.lock().iter().map(|(id, z)| (*id, z.clone())).collect();
        for (id, zil) in zils {
            let Some(h) = zil.sync(txg)? else { continue };
            let Ok(mut r) = self.get_rec(st, id) else { continue };
            r.zil = h;
            Self::put(st, r);
            let mut root = self.get_rec(st, self.root_id)?;
            let listed = root.logs.contains(&id);
            if h.guid != 0 && !listed {
                root.logs.insert(id);
                Self::put(st, root);
            } else if h.guid == 0 && listed {
                root.logs.remove(&id);
                Self::put(st, root);
            }
        }
        Ok(())
    }

    /// Whether some file system's record names a chain (the pool's labels
    /// then carry the feature *intent log*).
    pub(crate) fn has_log_chains(&self) -> bool {
        let mut st = self.st.lock();
        self.get_rec(&mut st, self.root_id).is_ok_and(|r| !r.logs.is_empty())
    }

    /// Whether a log's header must be written in `txg`.
    pub(crate) fn logs_dirty(&self, txg: u64) -> bool {
        self.zils.lock().values().any(|z| z.header_dirty(txg))
    }

    /// `txg` is on disk: the logs drop its records.
    pub(crate) fn logs_synced(&self, txg: u64) {
        for z in self.zils.lock().values() {
            z.sync_done(txg);
        }
    }

    /// Syncing context: file system `id` was rolled back or destroyed; its
    /// log describes a state that is gone. A destroyed one's log is freed
    /// now and forgotten.
    pub(crate) fn discard_log(&self, st: &mut State, txg: u64, id: u64, destroyed: bool) -> Result<()> {
        let zil = if destroyed { self.zils.lock().remove(&id) } else { self.zils.lock().get(&id).cloned() };
        let Some(zil) = zil else { return Ok(()) };
        zil.discard();
        if destroyed {
            zil.sync(txg)?;
            let mut root = self.get_rec(st, self.root_id)?;
            if root.logs.remove(&id) {
                Self::put(st, root);
            }
        }
        Ok(())
    }
}
