//! Replaying a dataset's intent log at its first read-write mount after a
//! crash (`crate::zil`, "Claim and replay"). The records of txgs after the
//! log's claim txg, and after its replay seq, are applied in sequence order
//! through the same operations that made them, with the clock, inode
//! numbers, generations and owners the records carry, so the result is the
//! change as it was made. Each record's transaction marks it replayed in
//! the log header of its txg (`PosixFs::tx`), so a crash during replay
//! resumes after the last record applied. A record whose file is gone (a
//! later record removed it, before the crash) is skipped; a create whose
//! name already names its inode was applied already.
//!
//! An indirect write's block is read and verified before any record of
//! its change is applied. One that does not verify — a write the crash
//! tore before the commit's flush, so a change never acknowledged — ends
//! the log there, as a torn log block would (OpenZFS stops replay at a
//! record whose data cannot be read): neither its change nor any later
//! record is applied, and the log is dropped as after a full replay.

use std::sync::atomic::Ordering;

use tarn_ondisk::zil::{LogRecord, Record};

use super::api::*;
use super::fs::{err, PosixFs, INLINE_ROOM};
use super::log::{setattr_of, time_of};

/// The record being replayed, as the operations it goes through see it.
pub(crate) struct Replaying {
    pub now: Timespec,
    /// The seq its transaction marks replayed.
    pub mark_seq: u64,
    pub create: Option<Created>,
}

/// A replayed create: the inode as the record made it.
#[derive(Clone, Copy)]
pub(crate) struct Created {
    pub ino: Ino,
    pub gen: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Who replays: root, keeping set-ID bits unless the record says not.
fn replayer(fsetid: bool) -> Caller {
    Caller { uid: 0, gid: 0, pid: 0, umask: 0, fsetid }
}

impl PosixFs {
    /// Replays the log if import found records in it (no-op otherwise, and
    /// read-only: the records wait for a read-write mount).
    pub(crate) fn replay(&self) -> crate::Result<()> {
        let Some(zil) = self.zil.clone() else { return Ok(()) };
        if self.opts.readonly || !zil.needs_replay() {
            return Ok(());
        }
        let name = self.os.name.read().clone();
        if self.os.core.tunables.read().zil_replay_disable != 0 {
            zil.finish_replay();
            return Ok(());
        }
        let h = zil.replay_start();
        let (blocks, _) = zil.walk(h.guid, h.first)?;
        let mut recs: Vec<Record> = blocks.into_iter().flat_map(|(_, r)| r).filter(|r| r.txg > h.claim_txg && r.seq > h.replay_seq).collect();
        recs.sort_by_key(|r| r.seq);
        let recs = whole_changes(recs);
        let end = recs.iter().filter_map(|r| match r.rec {
            LogRecord::Create { ino, .. } => Some(ino + INLINE_ROOM as u64),
            _ => None,
        });
        if let Some(end) = end.max() {
            self.os.reserve_objects(end);
        }
        self.in_replay.store(true, Ordering::Relaxed);
        let res = self.replay_all(&recs);
        self.in_replay.store(false, Ordering::Relaxed);
        *self.replaying.lock() = None;
        res.map_err(|e| crate::Error::corrupt(format!("cannot replay the intent log of '{}': {}", name, e)))?;
        zil.finish_replay();
        Ok(())
    }

    fn replay_all(&self, recs: &[Record]) -> PResult<()> {
        let mut data: Vec<Option<Vec<u8>>> = Vec::new();
        let mut start = 0;
        for (i, r) in recs.iter().enumerate() {
            if i == 0 || recs[i - 1].seq != r.seq {
                start = i;
                match self.indirect_data(&recs[i..]) {
                    Ok(Some(d)) => data = d,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(err(libc::EIO, format!("record {} ({}, txg {}): {}", r.seq, r.rec.name(), r.txg, e))),
                }
            }
            // A write's records share its seq: only its last marks it done
            // (rewriting the others again is harmless).
            let last_of_seq = recs.get(i + 1).is_none_or(|n| n.seq != r.seq);
            let mark_seq = if last_of_seq { r.seq } else { r.seq - 1 };
            *self.replaying.lock() = Some(Replaying { now: record_time(&r.rec), mark_seq, create: created(&r.rec) });
            let block = data.get_mut(i - start).and_then(Option::take);
            match self.apply(&r.rec, block.as_deref()) {
                Ok(()) => {}
                Err(e) if e.errno == libc::ENOENT && r.rec.object() != 0 => {}
                Err(e) => return Err(err(e.errno, format!("record {} ({}, txg {}): {}", r.seq, r.rec.name(), r.txg, e.msg))),
            }
        }
        Ok(())
    }

    /// The blocks of the indirect records of the change `recs` starts
    /// with (its records share the first's seq), one entry per record;
    /// None when one does not verify: the log ends before the change.
    fn indirect_data(&self, recs: &[Record]) -> crate::Result<Option<Vec<Option<Vec<u8>>>>> {
        let Some(zil) = self.zil.as_ref() else { return Ok(Some(Vec::new())) };
        let mut out = Vec::new();
        for r in recs.iter().take_while(|r| r.seq == recs[0].seq) {
            let LogRecord::WriteIndirect { bp, offset, len, .. } = &r.rec else {
                out.push(None);
                continue;
            };
            match zil.read_indirect(bp)? {
                Some(d) => {
                    // The write's part of the block (the decoder checked
                    // that it lies inside `bp.lsize`; the block read is
                    // that long, or verification failed).
                    let from = (*offset % u64::from(bp.lsize)) as usize;
                    let part = d.get(from..from + *len as usize).ok_or_else(|| {
                        crate::Error::corrupt(format!("record {}: {} bytes at {} lie outside its block of {} bytes", r.seq, len, offset, d.len()))
                    })?;
                    out.push(Some(part.to_vec()))
                }
                None => {
                    eprintln!(
                        "tarn: '{}': the intent log ends at record {} (txg {}): its block {}:{:#x} does not verify (a write the crash cut before it was acknowledged); later records are not replayed",
                        self.os.name.read(),
                        r.seq,
                        r.txg,
                        bp.dva[0].vdev,
                        bp.dva[0].offset
                    );
                    zil.stats.replay_ended_bad_block.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(None);
                }
            }
        }
        Ok(Some(out))
    }

    /// Applies one record; `block`: an indirect write's data, read and
    /// verified.
    fn apply(&self, rec: &LogRecord, block: Option<&[u8]>) -> PResult<()> {
        let root = replayer(true);
        match rec {
            LogRecord::Create { parent, ino, mode, rdev, name, target, .. } => {
                if self.entry(*parent, name)?.is_some_and(|e| e.ino == *ino) {
                    return Ok(());
                }
                self.create(&root, *parent, name, *mode, *rdev, target).map(|_| ())
            }
            LogRecord::Link { ino, parent, name, .. } => {
                if self.entry(*parent, name)?.is_some_and(|e| e.ino == *ino) {
                    return Ok(());
                }
                self.do_link(*ino, *parent, name).map(|_| ())
            }
            LogRecord::Remove { parent, dir, name, .. } => self.do_unlink(&root, *parent, name, *dir),
            LogRecord::Rename { parent, newparent, flags, name, newname, .. } => {
                let f = RenameFlags { noreplace: flags & 1 != 0, exchange: flags & 2 != 0 };
                self.do_rename(&root, *parent, name, *newparent, newname, f)
            }
            LogRecord::Write { ino, offset, fsetid, data, .. } => self.do_write(&replayer(*fsetid), *ino, *offset, data).map(|_| ()),
            LogRecord::Setattr { ino, fsetid, set, .. } => self.do_setattr(&replayer(*fsetid), *ino, &setattr_of(set)).map(|_| ()),
            LogRecord::Fallocate { ino, offset, len, flags, fsetid, .. } => {
                let f = FallocFlags { keep_size: flags & 1 != 0, punch_hole: flags & 2 != 0, zero_range: flags & 4 != 0 };
                self.do_fallocate(&replayer(*fsetid), *ino, *offset, *len, f)
            }
            LogRecord::Xattr { ino, how, name, value, .. } => {
                let how = match how {
                    1 => XattrSet::Create,
                    2 => XattrSet::Replace,
                    _ => XattrSet::Any,
                };
                self.change_xattr(*ino, name, value.as_deref(), how)
            }
            LogRecord::KeepSize { ino, size } => self.do_keep_size(*ino, *size),
            LogRecord::WriteIndirect { ino, offset, fsetid, .. } => {
                let data = block.ok_or_else(|| err(libc::EIO, "an indirect write without its block"))?;
                self.do_write(&replayer(*fsetid), *ino, *offset, data).map(|_| ())
            }
        }
    }
}

/// The records of changes whose every record is there: a change split over
/// several records (a large write) whose last record the chain lost was
/// never acknowledged, and is not applied in part.
fn whole_changes(recs: Vec<Record>) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::with_capacity(recs.len());
    let mut group: Vec<Record> = Vec::new();
    for r in recs {
        if group.last().is_some_and(|g| g.seq != r.seq) {
            if !group.last().is_some_and(|g| g.more) {
                out.append(&mut group);
            }
            group.clear();
        }
        group.push(r);
    }
    if !group.last().is_some_and(|g| g.more) {
        out.append(&mut group);
    }
    out
}

fn record_time(r: &LogRecord) -> Timespec {
    match r {
        LogRecord::Create { time, .. }
        | LogRecord::Link { time, .. }
        | LogRecord::Remove { time, .. }
        | LogRecord::Rename { time, .. }
        | LogRecord::Write { time, .. }
        | LogRecord::WriteIndirect { time, .. }
        | LogRecord::Setattr { time, .. }
        | LogRecord::Fallocate { time, .. }
        | LogRecord::Xattr { time, .. } => time_of(*time),
        LogRecord::KeepSize { .. } => Timespec::now(),
    }
}

fn created(r: &LogRecord) -> Option<Created> {
    match *r {
        LogRecord::Create { ino, gen, mode, uid, gid, .. } => Some(Created { ino, gen, mode, uid, gid }),
        _ => None,
    }
}
