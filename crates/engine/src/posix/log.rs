//! What the POSIX layer tells its intent log (`crate::zil`): a record for
//! every change, made inside the change's transaction and under the locks
//! that order it; `fsync` commits the file's records and the namespace's;
//! `sync=always` commits after every change. The records are replayed by
//! `replay.rs`.

use tarn_ondisk::zil::{set, LogRecord, LogTime, SetattrRec, WRITE_DATA_MAX};

use super::api::*;
use super::fs::PosixFs;
use crate::object::Tx;
use crate::zil::{Itx, LogSource};

pub(crate) fn log_time(t: Timespec) -> LogTime {
    LogTime { sec: t.sec, nsec: t.nsec }
}

pub(crate) fn time_of(t: LogTime) -> Timespec {
    Timespec { sec: t.sec, nsec: t.nsec }
}

/// `setattr`'s fields as a record: times resolved to what was applied.
pub(crate) fn setattr_rec(set: &SetAttr, now: Timespec, ctime: Timespec) -> SetattrRec {
    let at = |t: Option<TimeOrNow>| match t {
        Some(TimeOrNow::At(t)) => log_time(t),
        _ => log_time(now),
    };
    let mut r = SetattrRec { mask: set::CTIME, ctime: log_time(ctime), ..Default::default() };
    if let Some(m) = set.mode {
        r.mask |= set::MODE;
        r.mode = m;
    }
    if let Some(u) = set.uid {
        r.mask |= set::UID;
        r.uid = u;
    }
    if let Some(g) = set.gid {
        r.mask |= set::GID;
        r.gid = g;
    }
    if let Some(s) = set.size {
        r.mask |= set::SIZE;
        r.size = s;
    }
    if set.atime.is_some() {
        r.mask |= set::ATIME;
        r.atime = at(set.atime);
    }
    if set.mtime.is_some() {
        r.mask |= set::MTIME;
        r.mtime = at(set.mtime);
    }
    r
}

/// A record's `setattr` back: every time explicit.
pub(crate) fn setattr_of(r: &SetattrRec) -> SetAttr {
    let has = |b: u32| r.mask & b != 0;
    SetAttr {
        mode: has(set::MODE).then_some(r.mode),
        uid: has(set::UID).then_some(r.uid),
        gid: has(set::GID).then_some(r.gid),
        size: has(set::SIZE).then_some(r.size),
        atime: has(set::ATIME).then_some(TimeOrNow::At(time_of(r.atime))),
        mtime: has(set::MTIME).then_some(TimeOrNow::At(time_of(r.mtime))),
        ctime: has(set::CTIME).then_some(time_of(r.ctime)),
    }
}

impl PosixFs {
    /// Logs a change made in `tx` (`len`: a write's length; its data is
    /// read when committed). Nothing while replaying: the records replayed
    /// are already in the log.
    pub(crate) fn log(&self, tx: &Tx, rec: LogRecord, len: u64) {
        if let Some(z) = self.logging() {
            z.log(tx.txg(), rec, len);
        }
    }

    /// As `log`, for a block clone (`copy_file_range`): a commit that
    /// takes it syncs the txg rather than copy the shared blocks' data
    /// into the log (OpenZFS logs the block pointers instead).
    pub(crate) fn log_clone(&self, tx: &Tx, rec: LogRecord, len: u64) {
        if let Some(z) = self.logging() {
            z.log_by_txg(tx.txg(), rec, len);
        }
    }

    fn logging(&self) -> Option<&crate::zil::Zil> {
        self.zil.as_deref().filter(|_| !self.in_replay.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Makes every change to `ino` (0: to every file) and every namespace
    /// change durable: the log's commit, or a txg sync without a log.
    pub(crate) fn commit(&self, ino: Ino) -> PResult<()> {
        if self.opts.readonly || self.sync_policy() == SyncPolicy::Disabled {
            return Ok(());
        }
        match &self.zil {
            Some(z) => Ok(z.commit(ino, self)?),
            None => self.sync_now(),
        }
    }

    /// After a change to `ino` (0: the namespace): with `sync=always`, the
    /// change is durable before the call returns.
    pub(crate) fn after_change(&self, ino: Ino) -> PResult<()> {
        if self.sync_policy() == SyncPolicy::Always {
            return self.commit(ino);
        }
        Ok(())
    }
}

impl LogSource for PosixFs {
    /// A write's data as the file holds it now, in records of at most
    /// `WRITE_DATA_MAX` bytes (replaying them in order gives the file's
    /// present contents over the range, which is what the commit makes
    /// durable); none when the file is gone or the range is past its end.
    fn fill(&self, itx: &Itx) -> crate::Result<Vec<LogRecord>> {
        let LogRecord::Write { ino, offset, fsetid, time, .. } = itx.rec else {
            return Ok(vec![itx.rec.clone()]);
        };
        let data = match self.do_read_for_log(ino, offset, itx.len) {
            Ok(d) => d,
            Err(e) if e.errno == libc::ENOENT => return Ok(Vec::new()),
            Err(e) => return Err(crate::Error::new(crate::error::ErrorKind::Io, e.msg)),
        };
        Ok(data
            .chunks(WRITE_DATA_MAX)
            .enumerate()
            .map(|(i, c)| LogRecord::Write { ino, offset: offset + (i * WRITE_DATA_MAX) as u64, fsetid, time, data: c.to_vec() })
            .collect())
    }
}
