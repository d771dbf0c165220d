//! Import's answer to a newest txg that cannot be opened: a rewind to an
//! older one, never silently (OpenZFS's `spa_load_best` with a rewind
//! policy, and `zpool import -F`/`-Fn`).
//!
//! ## Theory of operation
//! Import takes the newest valid uberblock (docs/format.md §4) and opens
//! the pool as of its txg. When that fails (its MOS root, space log or root
//! dataset is damaged), the txgs from there back to the newest one that
//! opens are *committed* changes that a rewind would discard. So:
//! ```text
//!   newest txg opens ─────────────────────────────▶ import, nothing discarded
//!        │ fails
//!        ▼
//!   plan: try older uberblocks newest first, each opened read-only;
//!   more than SAFE_REWIND_TXGS back, the verifier must find no damaged
//!   metadata (blocks freed by the discarded txgs may have been reused)
//!        │
//!        ├─ none opens ──▶ error: the pool cannot be opened (and why)
//!        │
//!        ├─ without -F ──▶ error: what a rewind would discard (txgs, time)
//!        │                 and the advice to run `tarn pool import -F`
//!        ├─ -F -n ───────▶ the plan, nothing opened for writing
//!        └─ -F ──────────▶ open at the planned txg, erase the newer
//!                          uberblocks, report what was discarded
//! ```
//! A plan is made read-only (nothing written while deciding), so the same
//! code answers `import -Fn`, a refused import and the listing of
//! importable pools.
//!
//! Frees are deferred two txgs (`SAFE_REWIND_TXGS`): the blocks of the two
//! uberblocks before the newest are certainly intact. Further back, a block
//! the older tree references may have been freed and written over by a
//! newer txg; its checksum then fails, which the verifier finds. As OpenZFS
//! (`spa_load_verify`), damaged metadata rejects the txg, damaged data
//! blocks are counted and reported (the files they belong to are lost
//! either way).

use std::sync::Arc;

use tarn_ondisk::label::LabelConfig;
use tarn_ondisk::uberblock::Uberblock;

use crate::error::{Error, Result};
use crate::sys::clock::utc;
use crate::sys::device::BlockDevice;

use super::{OpenOptions, Pool};

/// Txgs a rewind may go back without the verifier: frees are deferred this
/// long, so the blocks of these uberblocks are certainly intact.
pub(crate) const SAFE_REWIND_TXGS: u64 = 2;

/// What an import did, or would do, about txgs it cannot open.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rewind {
    pub pool: String,
    /// The newest txg with a valid uberblock, and when it was written
    /// (seconds since the epoch).
    pub newest_txg: u64,
    pub newest_time: u64,
    /// The txg the pool opens at, and when it was written.
    pub txg: u64,
    pub time: u64,
    /// Why the newer txgs cannot be opened (empty when none is discarded).
    pub reason: String,
    /// Damaged data blocks the verifier found in the state rewound to
    /// (only rewinds deeper than two txgs are verified).
    pub data_errors: u64,
}

impl Rewind {
    /// An import that discards nothing.
    pub(crate) fn none(pool: &str, ub: &Uberblock) -> Rewind {
        Rewind { pool: pool.to_string(), newest_txg: ub.txg, newest_time: ub.timestamp, txg: ub.txg, time: ub.timestamp, reason: String::new(), data_errors: 0 }
    }

    /// Whether committed txgs are discarded.
    pub fn needed(&self) -> bool {
        self.txg < self.newest_txg
    }

    /// Seconds of committed changes discarded (by the uberblocks' clocks).
    pub fn discarded_secs(&self) -> u64 {
        self.newest_time.saturating_sub(self.time)
    }

    fn discarded(&self) -> String {
        let (a, b) = (self.txg + 1, self.newest_txg);
        let txgs = if a == b { format!("txg {}", a) } else { format!("txgs {} to {}", a, b) };
        format!("approximately {} seconds of data ({})", self.discarded_secs(), txgs)
    }

    fn data_errors_line(&self) -> String {
        match self.data_errors {
            0 => String::new(),
            n => format!("\n\tThe state returned to has {} damaged data blocks: reading their files fails, and 'tarn pool status -v {}' lists each once it was read.", n, self.pool),
        }
    }

    /// The error of an import without -F that would need this rewind.
    pub fn refusal(&self) -> String {
        format!(
            "pool '{}' cannot be opened at its newest txg {} ({}): {}\n\
             \tRecovery is possible, but will result in some data loss.\n\
             \tReturning the pool to its state as of {} (txg {}) should correct the problem.\n\
             \t{} must be discarded, irreversibly.{}\n\
             \tRecovery can be attempted by executing 'tarn pool import -F {}'.",
            self.pool,
            self.newest_txg,
            utc(self.newest_time),
            self.reason,
            utc(self.time),
            self.txg,
            capitalized(&self.discarded()),
            self.data_errors_line(),
            self.pool
        )
    }

    /// What `import -Fn` prints.
    pub fn would(&self) -> String {
        if !self.needed() {
            return format!("Pool '{}' opens at its newest txg {} ({}): an import would discard nothing.", self.pool, self.txg, utc(self.time));
        }
        self.summary(&format!("Would be able to return pool '{}'", self.pool), "Would discard", "cannot")
    }

    /// What `import -F` prints after a rewind.
    pub fn done(&self) -> String {
        self.summary(&format!("Pool '{}' returned", self.pool), "Discarded", "could not")
    }

    /// "`first` to its state as of …\n`discard` approximately …".
    fn summary(&self, first: &str, discard: &str, cannot: &str) -> String {
        format!(
            "{} to its state as of {} (txg {}).\n{} {}: the newest txg {} {} be opened: {}{}",
            first,
            utc(self.time),
            self.txg,
            discard,
            self.discarded(),
            self.newest_txg,
            cannot,
            self.reason,
            self.data_errors_line()
        )
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// A pool's devices matched to its config, and its valid uberblocks,
/// newest first (never empty).
pub(crate) struct Found {
    pub config: LabelConfig,
    pub devs: Vec<(String, Arc<dyn BlockDevice>)>,
    pub ubs: Vec<Uberblock>,
    /// Devices given that import could not use and no leaf names.
    pub unusable: Vec<super::pool::Unusable>,
    /// The config's hot spares that are not in its tree, each on the
    /// device found for it or why none was.
    pub spares: Vec<super::spare::FoundSpare>,
}

impl Found {
    pub fn newest(&self) -> &Uberblock {
        &self.ubs[0]
    }
}

/// Finds the newest older txg that opens, read-only (see the module docs);
/// `why` is why the newest one does not. An error when none does.
pub(crate) fn plan_rewind(f: &Found, opts: &OpenOptions, why: Error) -> Result<Rewind> {
    let newest = f.newest();
    let ro = OpenOptions { readonly: true, cache_devices: vec![], ..opts.clone() };
    let mut tried = Tried::default();
    for ub in &f.ubs[1..] {
        assert!(ub.txg < newest.txg, "uberblocks are sorted newest first");
        match Pool::try_open(&f.config, f.devs.clone(), vec![], &[], &ro, ub.clone()) {
            Err(e) => tried.push(ub.txg, e.msg),
            Ok(pool) => match check_deep_rewind(&pool, newest.txg) {
                Err(e) => tried.push(ub.txg, e.msg),
                Ok(data_errors) => {
                    return Ok(Rewind {
                        pool: f.config.pool_name.clone(),
                        newest_txg: newest.txg,
                        newest_time: newest.timestamp,
                        txg: ub.txg,
                        time: ub.timestamp,
                        reason: why.msg,
                        data_errors,
                    })
                }
            },
        }
    }
    let older = if tried.0.is_empty() { "no older txg is recorded".to_string() } else { format!("no older txg opens either ({})", tried) };
    Err(Error::corrupt(format!("pool '{}' cannot be opened: txg {}: {}; {}", f.config.pool_name, newest.txg, why, older)))
}

/// Why older txgs did not open, newest first; a run of txgs that failed
/// for the same reason (a block they all share) is one entry.
#[derive(Default)]
struct Tried(Vec<(u64, u64, String)>);

impl Tried {
    fn push(&mut self, txg: u64, why: String) {
        match self.0.last_mut() {
            Some((oldest, _, w)) if *w == why => *oldest = txg,
            _ => self.0.push((txg, txg, why)),
        }
    }
}

impl std::fmt::Display for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (oldest, newest, why)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            match oldest == newest {
                true => write!(f, "{}txg {}: {}", sep, newest, why)?,
                false => write!(f, "{}txgs {} to {}: {}", sep, oldest, newest, why)?,
            }
        }
        Ok(())
    }
}

/// A txg more than `SAFE_REWIND_TXGS` before the newest must verify
/// without damaged metadata; returns the damaged data blocks found.
fn check_deep_rewind(pool: &Pool, newest: u64) -> Result<u64> {
    let txg = pool.uberblock().txg;
    if txg + SAFE_REWIND_TXGS >= newest {
        return Ok(0);
    }
    let rep = pool.verify()?;
    assert!(rep.data_errors <= rep.errors.len() as u64, "the verifier counts {} data errors among {} errors", rep.data_errors, rep.errors.len());
    let metadata = rep.errors.len() as u64 - rep.data_errors;
    if metadata > 0 {
        let first = rep.errors.first().cloned().unwrap_or_default();
        return Err(Error::corrupt(format!(
            "{} txgs back, the verifier finds {} damaged or reused metadata blocks (first: {})",
            newest - txg,
            metadata,
            first
        )));
    }
    Ok(rep.data_errors)
}
