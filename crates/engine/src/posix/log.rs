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
    /// A write's records: its whole blocks written in place and logged by
    /// pointer where the log's policy says so (`Zil::write_policy`,
    /// `Objset::prewrite_range`), the rest of its data as the file holds
    /// it now in records of at most `zil_maxcopied` bytes (replaying them
    /// in order gives the file's present contents over the range, which is
    /// what the commit makes durable); none when the file is gone or the
    /// range is past its end.
    fn fill(&self, itx: &Itx) -> crate::Result<Vec<LogRecord>> {
        let LogRecord::Write { ino, offset, fsetid, time, .. } = itx.rec else {
            return Ok(vec![itx.rec.clone()]);
        };
        let policy = match &self.zil {
            Some(z) => z.write_policy(itx.len),
            None => crate::zil::WritePolicy { indirect: false, max_copied: WRITE_DATA_MAX, min_part: u64::MAX },
        };
        let end = offset + itx.len;
        let placed = if policy.indirect { self.prewrite_for_log(ino, offset, itx.len, policy.min_part)? } else { Vec::new() };
        let mut out = Vec::new();
        let mut at = offset;
        for (poff, plen, bp) in placed {
            if poff > at && !self.copy_for_log(&mut out, ino, at, poff - at, fsetid, time, policy.max_copied)? {
                return Ok(out);
            }
            out.push(LogRecord::WriteIndirect { ino, offset: poff, len: plen, fsetid, time, bp });
            at = poff + u64::from(plen);
        }
        if at < end {
            self.copy_for_log(&mut out, ino, at, end - at, fsetid, time, policy.max_copied)?;
        }
        Ok(out)
    }
}

impl PosixFs {
    /// The blocks of `[offset, offset + len)` written in place now, whole
    /// or in parts of at least `min_part` bytes (`Objset::prewrite_range`);
    /// none when the file is gone.
    fn prewrite_for_log(&self, ino: Ino, offset: u64, len: u64, min_part: u64) -> crate::Result<Vec<(u64, u32, tarn_ondisk::bp::BlockPtr)>> {
        match self.do_prewrite_for_log(ino, offset, len, min_part) {
            Ok(v) => Ok(v),
            Err(e) if e.errno == libc::ENOENT => Ok(Vec::new()),
            Err(e) => Err(crate::Error::new(crate::error::ErrorKind::Io, e.msg)),
        }
    }

    /// Appends copied write records of the file's data over `len` bytes at
    /// `offset`, `max` bytes each; false when the file ended first (or is
    /// gone): nothing after can be logged either.
    #[allow(clippy::too_many_arguments)]
    fn copy_for_log(&self, out: &mut Vec<LogRecord>, ino: Ino, offset: u64, len: u64, fsetid: bool, time: LogTime, max: usize) -> crate::Result<bool> {
        let data = match self.do_read_for_log(ino, offset, len) {
            Ok(d) => d,
            Err(e) if e.errno == libc::ENOENT => return Ok(false),
            Err(e) => return Err(crate::Error::new(crate::error::ErrorKind::Io, e.msg)),
        };
        let whole = data.len() as u64 == len;
        out.extend(data.chunks(max).enumerate().map(|(i, c)| LogRecord::Write { ino, offset: offset + (i * max) as u64, fsetid, time, data: c.to_vec() }));
        Ok(whole)
    }
}
