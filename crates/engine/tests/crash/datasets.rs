//! The dataset thread of a crash run: it creates a few file systems of its
//! own, rewrites one object in each (with new data, or by cloning another
//! file system's object: blocks shared across datasets), snapshots them,
//! rolls back, destroys snapshots and file systems — each a sync task or a
//! transaction, logged with its txg before it is waited for. The model: every file system and
//! snapshot as of a txg, and a snapshot's content never changes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tarn_engine::dataset::Op as DsTask;
use tarn_engine::Pool;
use tarn_ondisk::ObjectType;

use super::workload::{run_steps, Fill, Logged, Op, ThreadLog};
use crate::common::{first_difference, Rng};

/// A logged dataset operation (`Op::Ds`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DsOp {
    Create(String),
    /// The file system's object `obj` (created if new) now holds `fill` of `len` bytes.
    Fill { fs: String, obj: u64, len: u64, fill: Fill },
    /// The file system's object `obj` (created if new) now holds a clone of
    /// what file system `from`'s object holds.
    Clone { fs: String, obj: u64, from: String },
    Snapshot(String),
    Rollback(String),
    Destroy(String),
}

/// A file system's or snapshot's object and its content (None: none yet).
pub type Content = Option<(u64, Vec<u8>)>;

/// Name → content.
pub type DsModel = BTreeMap<String, Content>;

const FS_MAX: usize = 3;

struct Fs {
    name: String,
    obj: Content,
    snaps: Vec<(String, Content)>,
}

pub struct DsWorker<'a> {
    pub pool: &'a Pool,
    pub rng: Rng,
    pub ops: usize,
    pub stop: &'a AtomicBool,
    pub tag: u64,
}

impl DsWorker<'_> {
    pub fn run(mut self) -> ThreadLog {
        let mut fss: Vec<Fs> = Vec::new();
        let mut made = 0;
        let (ops, stop) = (self.ops, self.stop);
        run_steps(ops, stop, |log| self.step(&mut fss, log, &mut made))
    }

    /// Queues one task, logs it with its txg, then waits for it.
    fn task(&self, task: DsTask, op: DsOp, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let sub = self.pool.datasets().submit(vec![task])?;
        log.push(Logged { txg: sub.txg(), obj: 0, op: Op::Ds(op.clone()) });
        for r in sub.wait()? {
            r.unwrap_or_else(|e| panic!("dataset task {op:?} failed: {e}"));
        }
        Ok(())
    }

    fn step(&mut self, fss: &mut Vec<Fs>, log: &mut Vec<Logged>, made: &mut u64) -> tarn_engine::Result<()> {
        if fss.is_empty() || (fss.len() < FS_MAX && self.rng.chance(15)) {
            let name = format!("crash/d{}_{}", self.tag, made);
            *made += 1;
            self.task(DsTask::Create { name: name.clone(), props: vec![], parents: false }, DsOp::Create(name.clone()), log)?;
            fss.push(Fs { name, obj: None, snaps: Vec::new() });
            return Ok(());
        }
        let i = self.rng.below(fss.len() as u64) as usize;
        match self.rng.below(100) {
            0..=34 => self.fill(&mut fss[i], log),
            35..=44 => {
                let j = self.rng.below(fss.len() as u64) as usize;
                let Some((from_obj, content)) = fss[j].obj.clone() else { return Ok(()) };
                if i == j {
                    return Ok(());
                }
                let from = fss[j].name.clone();
                self.clone_from(&mut fss[i], &from, from_obj, content, log)
            }
            45..=64 => {
                let f = &mut fss[i];
                let snap = format!("{}@s{}", f.name, *made);
                *made += 1;
                self.task(DsTask::Snapshot { name: snap.clone() }, DsOp::Snapshot(snap.clone()), log)?;
                f.snaps.push((snap, f.obj.clone()));
                Ok(())
            }
            65..=74 => {
                let f = &mut fss[i];
                let Some((snap, content)) = f.snaps.last().cloned() else { return Ok(()) };
                self.task(DsTask::Rollback { snapshot: snap.clone() }, DsOp::Rollback(snap), log)?;
                f.obj = content;
                Ok(())
            }
            75..=86 => {
                let f = &mut fss[i];
                if f.snaps.is_empty() {
                    return Ok(());
                }
                let (snap, _) = f.snaps.remove(self.rng.below(f.snaps.len() as u64) as usize);
                self.task(DsTask::Destroy { name: snap.clone() }, DsOp::Destroy(snap), log)
            }
            87..=90 => {
                let f = fss.swap_remove(i);
                for (snap, _) in f.snaps {
                    self.task(DsTask::Destroy { name: snap.clone() }, DsOp::Destroy(snap), log)?;
                }
                self.task(DsTask::Destroy { name: f.name.clone() }, DsOp::Destroy(f.name), log)
            }
            _ => self.check(&fss[i]),
        }
    }

    fn fill(&mut self, f: &mut Fs, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let os = self.pool.datasets().objset(&f.name)?;
        let len = self.rng.range(1, 400 << 10);
        let fill = if self.rng.chance(70) { Fill::Random(self.rng.next_u64()) } else { Fill::Runs(self.rng.next_u64()) };
        let tx = os.begin()?;
        let obj = match &f.obj {
            Some((o, _)) => *o,
            None => os.create(&tx, ObjectType::PlainData)?,
        };
        os.truncate(&tx, obj, 0)?;
        let data = fill.bytes(len as usize);
        os.write(&tx, obj, 0, &data)?;
        log.push(Logged { txg: tx.txg(), obj: 0, op: Op::Ds(DsOp::Fill { fs: f.name.clone(), obj, len, fill }) });
        drop(tx);
        f.obj = Some((obj, data));
        Ok(())
    }

    /// Replaces the file system's object content by a clone of `from`'s
    /// object (whole blocks shared, the tail copied), in one transaction.
    fn clone_from(&mut self, f: &mut Fs, from: &str, from_obj: u64, content: Vec<u8>, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let ds = self.pool.datasets();
        let (os, src) = (ds.objset(&f.name)?, ds.objset(from)?);
        let tx = os.begin()?;
        let obj = match &f.obj {
            Some((o, _)) => *o,
            None => os.create(&tx, ObjectType::PlainData)?,
        };
        os.truncate(&tx, obj, 0)?;
        let len = content.len() as u64;
        let mut done = 0;
        while done < len {
            let p = os.clone_range(&tx, obj, done, &src, from_obj, done, len - done)?;
            assert!(p.done > 0, "a clone of {from} made no progress at {done}");
            done += p.done;
        }
        log.push(Logged { txg: tx.txg(), obj: 0, op: Op::Ds(DsOp::Clone { fs: f.name.clone(), obj, from: from.to_string() }) });
        drop(tx);
        f.obj = Some((obj, content));
        Ok(())
    }

    /// The file system and its snapshots read back as this thread made them.
    fn check(&self, f: &Fs) -> tarn_engine::Result<()> {
        let ds = self.pool.datasets();
        for (name, want) in std::iter::once((&f.name, &f.obj)).chain(f.snaps.iter().map(|(n, c)| (n, c))) {
            if let Some((obj, content)) = want {
                let got = ds.objset(name)?.read(*obj, 0, content.len() + 1)?;
                assert!(got == *content, "{name} reads back wrong before any crash: {}", first_difference(&got, content));
            }
        }
        Ok(())
    }
}

/// The datasets as of txg `t` (only those the logs name).
pub fn ds_model_at(logs: &[Vec<Logged>], t: u64) -> (DsModel, Vec<String>) {
    let mut m = DsModel::new();
    let mut named = Vec::new();
    for e in logs.iter().flatten() {
        let Op::Ds(op) = &e.op else { continue };
        let name = match op {
            DsOp::Create(n) | DsOp::Snapshot(n) | DsOp::Destroy(n) => n.clone(),
            DsOp::Rollback(s) => s.clone(),
            DsOp::Fill { fs, .. } | DsOp::Clone { fs, .. } => fs.clone(),
        };
        named.push(name);
        if e.txg > t {
            continue;
        }
        match op {
            DsOp::Create(n) => {
                m.insert(n.clone(), None);
            }
            DsOp::Fill { fs, obj, len, fill } => {
                m.insert(fs.clone(), Some((*obj, fill.bytes(*len as usize))));
            }
            DsOp::Clone { fs, obj, from } => {
                let (_, c) = m.get(from).cloned().flatten().expect("a clone from a modelled object");
                m.insert(fs.clone(), Some((*obj, c)));
            }
            DsOp::Snapshot(s) => {
                let fs = s.split('@').next().expect("fs@snap");
                let c = m.get(fs).cloned().expect("snapshot of a modelled file system");
                m.insert(s.clone(), c);
            }
            DsOp::Rollback(s) => {
                let fs = s.split('@').next().expect("fs@snap");
                let c = m.get(s).cloned().expect("rollback to a modelled snapshot");
                m.insert(fs.to_string(), c);
            }
            DsOp::Destroy(n) => {
                m.remove(n);
            }
        }
    }
    (m, named)
}

/// File systems and snapshots checked after recoveries (for the summary).
pub static CHECKED: AtomicU64 = AtomicU64::new(0);

/// The imported pool holds exactly the modelled datasets of txg `t`, with
/// their content, and none of the others the logs name.
pub fn check_datasets(pool: &Pool, logs: &[Vec<Logged>], t: u64, ctx: &str) {
    let (model, named) = ds_model_at(logs, t);
    CHECKED.fetch_add(model.len() as u64, Ordering::Relaxed);
    let ds = pool.datasets();
    for (name, want) in &model {
        let os = ds.objset(name).unwrap_or_else(|e| panic!("{ctx}: dataset {name} should exist: {e}"));
        if let Some((obj, content)) = want {
            let got = os.read(*obj, 0, content.len() + 1).unwrap_or_else(|e| panic!("{ctx}: {name} object {obj}: {e}"));
            assert!(got == *content, "{ctx}: {name} differs from the model: {}", first_difference(&got, content));
        }
    }
    for name in named.iter().filter(|n| !model.contains_key(*n)) {
        assert!(!ds.exists(name), "{ctx}: dataset {name} should not exist at txg {t}");
    }
}
