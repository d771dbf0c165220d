//! The error log: where reads found damage, and which blocks are lost
//! (OpenZFS's `spa_errlog.c` and the checksum reports of `zfs_fm.c`).
//!
//! ## What is recorded
//! Every read of a block goes through `PoolCore::read_block_cached`, which
//! tries the block's copies in turn. Each copy that fails (a checksum
//! mismatch, a device error, an address outside the device) is an event
//! (`events`: a checksum or io ereport, in the pool's event ring and the
//! daemon log): pool, device, offset, size and — when the reader said
//! where the block sits — its bookmark, whether or not another copy then
//! served the read. A read that found no good copy is a *permanent
//! error*: its bookmark enters the error log (and a new entry is a data
//! ereport).
//!
//! A bookmark is where a block sits in the pool's trees, as OpenZFS's
//! `zbookmark_phys`: (object set, object, level, block id). The object set
//! is the number the object layer gives its sets — a dataset record's
//! object number in the MOS, 0 for the MOS itself — so this layer knows
//! nothing of datasets; naming a bookmark as a file is the POSIX layer's
//! job (`posix::errors`). Two levels are special: [`Bookmark::ROOT_LEVEL`]
//! (an object set's root block) and [`Bookmark::DNODE_LEVEL`] (the dnode of
//! an object, which the object layer records when the dnode block holding
//! it cannot be read: the file that was asked for is then named too, not
//! only the dnode block).
//!
//! ## Lifetime of an entry
//! ```text
//!   read finds no good copy ──▶ in the log (memory) ──▶ the next sync writes
//!                                    │                   it to the MOS object
//!   a later read of the same ◀───────┤
//!   bookmark succeeds (the block     │
//!   was rewritten), or pool clear ──▶ gone (the next sync writes that too)
//! ```
//! The log is one MOS object, a key/value map named by the pool directory's
//! `errlog` key (docs/format.md §11b), rewritten whole in every txg in
//! which it changed, so it survives export, import and a power cut as of
//! the last synced txg. A read-only pool keeps its log in memory only.
//!
//! ## Bounds
//! - at most [`ERRLOG_MAX_ENTRIES`] entries; further permanent errors are
//!   counted (`dropped`, also persisted) but not kept;
//! - how often a damaged copy is reported is the event ring's to limit
//!   (`events`, "Rate limits").
//!
//! ## Invariants
//! - `count` equals the number of entries (it is read without the lock, on
//!   every successful read, to skip the lock when the log is empty);
//! - no more than `ERRLOG_MAX_ENTRIES` entries;
//! - `dirty` is set by every change and cleared only by a flush, which
//!   writes the entries of that moment (later changes set it again);
//! - the lock is never held while the MOS is read or written: the reads
//!   of a flush record into and clear from the log themselves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tarn_ondisk::kv::{self, KvMap};

use crate::error::{Error, Result};
use crate::object::Objset;

/// Entries the log keeps (a 4 MiB region of 4 KiB records is 1,024).
pub const ERRLOG_MAX_ENTRIES: usize = 10_000;

/// The key of the count of permanent errors not kept (the log was full).
const KEY_DROPPED: &str = "dropped";

/// Where a block sits in the pool's trees (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Bookmark {
    /// The object set: a dataset record's object number, 0 for the MOS.
    pub objset: u64,
    /// The object (0: the object set's dnode array).
    pub object: u64,
    /// 0 for data, 1.. for indirect blocks, or one of the special levels.
    pub level: u8,
    /// The block's index at its level.
    pub blkid: u64,
}

impl Bookmark {
    /// The level of an object set's root block (object 0, block 0).
    pub const ROOT_LEVEL: u8 = 0xff;
    /// The level of an object's dnode (block 0): the object could not be
    /// loaded because the dnode block holding it could not be read.
    pub const DNODE_LEVEL: u8 = 0xfe;

    pub fn block(objset: u64, object: u64, level: u8, blkid: u64) -> Bookmark {
        assert!(level < Self::DNODE_LEVEL, "level {} of object {} is a special level", level, object);
        Bookmark { objset, object, level, blkid }
    }

    pub fn objset_root(objset: u64) -> Bookmark {
        Bookmark { objset, object: 0, level: Self::ROOT_LEVEL, blkid: 0 }
    }

    pub fn dnode(objset: u64, object: u64) -> Bookmark {
        Bookmark { objset, object, level: Self::DNODE_LEVEL, blkid: 0 }
    }

    /// The key it is stored under: `objset:object:level:blkid` in hex.
    fn key(&self) -> String {
        format!("{:x}:{:x}:{:x}:{:x}", self.objset, self.object, self.level, self.blkid)
    }

    fn parse(key: &str) -> Option<Bookmark> {
        let mut it = key.split(':').map(|f| u64::from_str_radix(f, 16).ok());
        let (objset, object, level, blkid) = (it.next()??, it.next()??, it.next()??, it.next()??);
        if it.next().is_some() {
            return None;
        }
        Some(Bookmark { objset, object, level: u8::try_from(level).ok()?, blkid })
    }
}

impl std::fmt::Display for Bookmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.level {
            Self::ROOT_LEVEL => write!(f, "object set {} root block", self.objset),
            Self::DNODE_LEVEL => write!(f, "object set {} object {} dnode", self.objset, self.object),
            l => write!(f, "object set {} object {} L{} block {}", self.objset, self.object, l, self.blkid),
        }
    }
}

#[derive(Default)]
struct LogState {
    /// Bookmark → unix time (s) it was first recorded.
    entries: BTreeMap<Bookmark, u64>,
    /// Permanent errors not kept because the log was full.
    dropped: u64,
    dirty: bool,
    /// The MOS object holding the log (0: none yet).
    object: u64,
}

/// A pool's error log.
pub struct ErrorLog {
    pool: String,
    st: Mutex<LogState>,
    count: AtomicUsize,
}

impl ErrorLog {
    pub fn new(pool: &str) -> ErrorLog {
        ErrorLog { pool: pool.to_string(), st: Mutex::new(LogState::default()), count: AtomicUsize::new(0) }
    }

    /// A read of `at` found no good copy; true if `at` is a new permanent
    /// error (not in the log yet).
    pub fn record(&self, at: Bookmark) -> bool {
        let mut st = self.st.lock();
        if st.entries.contains_key(&at) {
            return false;
        }
        if st.entries.len() >= ERRLOG_MAX_ENTRIES {
            st.dropped += 1;
        } else {
            st.entries.insert(at, crate::sys::clock::now_secs());
            self.count.store(st.entries.len(), Ordering::Release);
        }
        assert!(st.entries.len() <= ERRLOG_MAX_ENTRIES, "error log of pool '{}' past its bound", self.pool);
        st.dirty = true;
        true
    }

    /// A read of `at` succeeded: the block is readable again (rewritten,
    /// or the failure was transient). Cheap when the log is empty.
    pub fn cleared_by_read(&self, at: &Bookmark) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut st = self.st.lock();
        if st.entries.remove(at).is_some() {
            self.count.store(st.entries.len(), Ordering::Release);
            st.dirty = true;
        }
    }

    /// Empties the log (`pool clear`); returns how many entries it held.
    pub fn clear(&self) -> u64 {
        let mut st = self.st.lock();
        let n = st.entries.len() as u64 + st.dropped;
        if n > 0 {
            st.entries.clear();
            st.dropped = 0;
            st.dirty = true;
            self.count.store(0, Ordering::Release);
        }
        n
    }

    /// The bookmarks in the log, in order.
    pub fn entries(&self) -> Vec<Bookmark> {
        self.st.lock().entries.keys().copied().collect()
    }

    /// Permanent errors: those in the log and those it had no room for.
    pub fn total(&self) -> u64 {
        let st = self.st.lock();
        st.entries.len() as u64 + st.dropped
    }

    pub fn is_dirty(&self) -> bool {
        self.st.lock().dirty
    }

    /// Loads the log from its MOS object (import).
    pub(crate) fn load(&self, mos: &Objset, obj: u64) -> Result<()> {
        let map = super::read_kv(mos, obj).map_err(|e| e.context(format!("error log (MOS object {})", obj)))?;
        let mut entries = BTreeMap::new();
        let mut dropped = 0;
        for (k, v) in &map {
            let when = v.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            match Bookmark::parse(k) {
                Some(b) if entries.len() < ERRLOG_MAX_ENTRIES => {
                    entries.insert(b, when);
                }
                Some(_) => dropped += 1,
                None if k == KEY_DROPPED => dropped += when,
                None => return Err(Error::corrupt(format!("error log (MOS object {}): bad key '{}'", obj, k))),
            }
        }
        let mut st = self.st.lock();
        st.object = obj;
        st.entries = entries;
        st.dropped = dropped;
        self.count.store(st.entries.len(), Ordering::Release);
        Ok(())
    }

    /// Writes the log into `txg` when it changed (syncing context); returns
    /// the object's number when this flush created it (`rewrite_kv`). The
    /// entries are taken under the lock and written without it: writing
    /// reads MOS blocks, and a read records into or clears from this very
    /// log.
    pub(crate) fn flush(&self, mos: &Objset, txg: u64) -> Result<Option<u64>> {
        let (obj, bytes) = {
            let mut st = self.st.lock();
            if !st.dirty {
                return Ok(None);
            }
            // Changes from here on are the next txg's.
            st.dirty = false;
            let mut map = KvMap::new();
            for (b, when) in &st.entries {
                kv::put_u64(&mut map, &b.key(), *when);
            }
            if st.dropped > 0 {
                kv::put_u64(&mut map, KEY_DROPPED, st.dropped);
            }
            (st.object, kv::encode(&map))
        };
        let created = super::rewrite_kv(mos, txg, obj, &bytes)?;
        if let Some(o) = created {
            self.st.lock().object = o;
        }
        Ok(created)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmark_keys_round_trip() {
        for b in [Bookmark::block(5, 0x1a, 2, 77), Bookmark::objset_root(0), Bookmark::dnode(9, u64::MAX)] {
            assert_eq!(Bookmark::parse(&b.key()), Some(b));
        }
        for bad in ["", "1:2:3", "1:2:3:4:5", "1:2:100:4", "x:2:3:4"] {
            assert_eq!(Bookmark::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_log_is_bounded_and_cleared_by_reads() {
        let log = ErrorLog::new("t");
        for i in 0..ERRLOG_MAX_ENTRIES as u64 + 5 {
            log.record(Bookmark::block(1, i, 0, 0));
        }
        assert_eq!(log.entries().len(), ERRLOG_MAX_ENTRIES);
        assert_eq!(log.total(), ERRLOG_MAX_ENTRIES as u64 + 5);
        log.cleared_by_read(&Bookmark::block(1, 3, 0, 0));
        assert_eq!(log.entries().len(), ERRLOG_MAX_ENTRIES - 1);
        assert!(log.is_dirty());
        assert_eq!(log.clear(), ERRLOG_MAX_ENTRIES as u64 + 4);
        assert_eq!(log.total(), 0);
    }
}
