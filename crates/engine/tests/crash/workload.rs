//! The workload of one crash run: threads that each own a disjoint set of
//! objects and change them at random, one transaction per operation, logging
//! (txg, operation) before the transaction ends. Changes include clones of
//! one object's range into another (block cloning where the range is made
//! of whole blocks, so cuts fall between a clone and its sync, and during
//! frees and rewrites of cloned blocks).
//!
//! Logging before the end of the transaction is what makes the log a safe
//! oracle: once the tx is dropped its txg may sync, and an operation that
//! could be on disk must be in the log. An operation that returned an error
//! is not logged; it can only have failed because the power was cut, which
//! also stops every later sync, so its txg never commits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tarn_engine::{Error, Objset, Pool};
use tarn_ondisk::ObjectType;

use crate::common::{first_difference, pattern, Rng};

/// Largest object the inline path can hold (tarn_inline_max_bytes).
pub const SMALL_MAX: u64 = 3072;
const MEDIUM_MAX: u64 = 1 << 20;
/// With recordsize 4K an 8 MiB object needs three levels (L2 → L1 → L0).
const LARGE_MAX: u64 = 8 << 20;
const WRITE_MAX: u64 = 300 << 10;
const LIVE_MAX: usize = 6;

/// Clone operations run and bytes they shared (for the summary: the cuts
/// must fall among clones for the test to cover them).
pub static CLONES: AtomicU64 = AtomicU64::new(0);
pub static CLONED_BYTES: AtomicU64 = AtomicU64::new(0);

/// How big an object may grow, chosen when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Small,
    Medium,
    Large,
}

impl Class {
    fn cap(self) -> u64 {
        match self {
            Class::Small => SMALL_MAX,
            Class::Medium => MEDIUM_MAX,
            Class::Large => LARGE_MAX,
        }
    }
}

/// What a write stores: random bytes, compressible runs, or zeros (holes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    Random(u64),
    Runs(u64),
    Zero,
}

impl Fill {
    pub fn bytes(self, len: usize) -> Vec<u8> {
        match self {
            Fill::Random(s) => pattern(len, s),
            Fill::Runs(s) => pattern(len.div_ceil(64), s).iter().flat_map(|&b| [b; 64]).take(len).collect(),
            Fill::Zero => vec![0; len],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Write { off: u64, len: u64, fill: Fill },
    Truncate { size: u64 },
    Free,
    /// The object's `[off, off + len)` now holds what object `src` held at
    /// `[src_off, src_off + len)` (`Objset::clone_range`).
    Clone { src: u64, src_off: u64, off: u64, len: u64 },
    /// An operation of the dataset thread (its `obj` is 0).
    Ds(super::datasets::DsOp),
}

/// One committed-or-not operation: its txg, its object and what it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    pub txg: u64,
    pub obj: u64,
    pub op: Op,
}

/// Puts `bytes` at `off` of a content, growing it as a write does.
pub fn put_bytes(c: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let (off, end) = (off as usize, off as usize + bytes.len());
    if c.len() < end {
        c.resize(end, 0);
    }
    c[off..end].copy_from_slice(bytes);
}

/// The bytes a clone takes from its source's content.
pub fn clone_source(src: &[u8], src_off: u64, len: u64) -> Vec<u8> {
    src[src_off as usize..(src_off + len) as usize].to_vec()
}

/// Applies `op` to an object's content (None: the object does not exist).
/// A clone needs its source: see `model_from`.
pub fn apply(content: &mut Option<Vec<u8>>, op: &Op) {
    match op {
        Op::Ds(_) => {}
        Op::Clone { .. } => unreachable!("a clone is applied with its source's content"),
        Op::Create => *content = Some(Vec::new()),
        Op::Free => *content = None,
        Op::Truncate { size } => content.as_mut().expect("truncate of a live object").resize(*size as usize, 0),
        Op::Write { off, len, fill } => {
            let c = content.as_mut().expect("write to a live object");
            put_bytes(c, *off, &fill.bytes(*len as usize));
        }
    }
}

struct Live {
    id: u64,
    class: Class,
    content: Vec<u8>,
}

/// One thread's run: its log and the error that stopped it, if any.
pub struct ThreadLog {
    pub log: Vec<Logged>,
    pub error: Option<Error>,
}

/// Runs `step` up to `ops` times; stops at the first error (and tells the
/// other threads to stop) or when another thread failed.
pub fn run_steps(ops: usize, stop: &AtomicBool, mut step: impl FnMut(&mut Vec<Logged>) -> tarn_engine::Result<()>) -> ThreadLog {
    let mut log = Vec::new();
    for _ in 0..ops {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if let Err(e) = step(&mut log) {
            stop.store(true, Ordering::SeqCst);
            return ThreadLog { log, error: Some(e) };
        }
    }
    ThreadLog { log, error: None }
}

pub struct Worker<'a> {
    pub pool: &'a Pool,
    pub rng: Rng,
    pub ops: usize,
    pub stop: &'a AtomicBool,
    pub seed: u64,
}

impl Worker<'_> {
    /// Runs up to `ops` operations (see `run_steps`).
    pub fn run(mut self) -> ThreadLog {
        let mut live: Vec<Live> = Vec::new();
        let (ops, stop) = (self.ops, self.stop);
        run_steps(ops, stop, |log| self.step(&mut live, log))
    }

    fn step(&mut self, live: &mut Vec<Live>, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let os = self.pool.root().clone();
        if live.is_empty() || (live.len() < LIVE_MAX && self.rng.chance(12)) {
            return self.create(&os, live, log);
        }
        let i = self.rng.below(live.len() as u64) as usize;
        // Explicit syncs are rare so that most txgs close on dirty data (the
        // throttle's 20 % mark) and carry many blocks.
        match self.rng.below(100) {
            0..=56 => {
                let op = self.write_op(&live[i]);
                self.logged(&os, &mut live[i], op, log)
            }
            57..=71 => {
                let op = self.truncate_op(&live[i]);
                self.logged(&os, &mut live[i], op, log)
            }
            72..=77 => {
                let mut gone = live.swap_remove(i);
                self.logged(&os, &mut gone, Op::Free, log)
            }
            78..=85 if live.len() > 1 => self.clone_op(&os, live, i, log),
            86..=88 => self.pool.sync(),
            _ => self.check_read(&os, &live[i]),
        }
    }

    fn create(&mut self, os: &Objset, live: &mut Vec<Live>, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let class = match self.rng.below(10) {
            0..=3 => Class::Small,
            4..=7 => Class::Medium,
            _ => Class::Large,
        };
        let tx = os.begin()?;
        let id = os.create(&tx, ObjectType::PlainData)?;
        log.push(Logged { txg: tx.txg(), obj: id, op: Op::Create });
        drop(tx);
        live.push(Live { id, class, content: Vec::new() });
        Ok(())
    }

    /// Runs `op` on `obj` in its own transaction and logs it before the
    /// transaction ends.
    fn logged(&mut self, os: &Objset, obj: &mut Live, op: Op, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let tx = os.begin()?;
        match &op {
            Op::Write { off, len, fill } => os.write(&tx, obj.id, *off, &fill.bytes(*len as usize))?,
            Op::Truncate { size } => os.truncate(&tx, obj.id, *size)?,
            Op::Free => os.free(&tx, obj.id)?,
            Op::Create | Op::Ds(_) | Op::Clone { .. } => unreachable!("creates and clones have their own steps"),
        }
        log.push(Logged { txg: tx.txg(), obj: obj.id, op: op.clone() });
        drop(tx);
        let mut c = Some(std::mem::take(&mut obj.content));
        apply(&mut c, &op);
        obj.content = c.unwrap_or_default();
        Ok(())
    }

    /// Clones a range of another live object into `live[i]`: mostly whole
    /// blocks at block offsets (shared), else any range (copied), in one
    /// transaction, logged before it ends.
    fn clone_op(&mut self, os: &Objset, live: &mut [Live], i: usize, log: &mut Vec<Logged>) -> tarn_engine::Result<()> {
        let j = (i + 1 + self.rng.below(live.len() as u64 - 1) as usize) % live.len();
        let src_len = live[j].content.len() as u64;
        let cap = live[i].class.cap();
        if src_len == 0 {
            return Ok(());
        }
        let bs = os.info(live[j].id)?.blksz as u64;
        let (src_off, off, len) = if self.rng.chance(75) && src_len >= bs && cap >= bs {
            let (nsrc, ndst) = (src_len / bs, cap / bs);
            let sb = self.rng.below(nsrc);
            let n = self.rng.range(1, (nsrc - sb).min(ndst).min(64));
            (sb * bs, self.rng.below(ndst - n + 1) * bs, n * bs)
        } else {
            let src_off = self.rng.below(src_len);
            let len = self.rng.range(1, (src_len - src_off).min(WRITE_MAX).min(cap));
            (src_off, self.rng.below(cap - len + 1), len)
        };
        let (src, dst) = (live[j].id, live[i].id);
        let tx = os.begin()?;
        let mut done = 0;
        while done < len {
            let p = os.clone_range(&tx, dst, off + done, os, src, src_off + done, len - done)?;
            assert!(p.done > 0, "seed {}: a clone within its source made no progress", self.seed);
            done += p.done;
            CLONED_BYTES.fetch_add(p.cloned, Ordering::Relaxed);
        }
        CLONES.fetch_add(1, Ordering::Relaxed);
        log.push(Logged { txg: tx.txg(), obj: dst, op: Op::Clone { src, src_off, off, len } });
        drop(tx);
        let bytes = clone_source(&live[j].content, src_off, len);
        put_bytes(&mut live[i].content, off, &bytes);
        Ok(())
    }

    fn write_op(&mut self, obj: &Live) -> Op {
        // A small object now and then outgrows its dnode (leaves inline).
        let cap = if obj.class == Class::Small && self.rng.chance(5) { 3 * SMALL_MAX } else { obj.class.cap() };
        let mut off = self.rng.below(cap);
        if self.rng.chance(30) {
            off &= !4095;
        }
        let room = (cap - off).min(WRITE_MAX);
        let len = match self.rng.below(10) {
            0..=2 => self.rng.range(1, room.min(512)),
            3..=5 => self.rng.range(1, room.min(16 << 10)),
            _ => self.rng.range(1, room),
        };
        let fill = match self.rng.below(10) {
            0..=6 => Fill::Random(self.rng.next_u64()),
            7..=8 => Fill::Runs(self.rng.next_u64()),
            _ => Fill::Zero,
        };
        Op::Write { off, len, fill }
    }

    fn truncate_op(&mut self, obj: &Live) -> Op {
        let len = obj.content.len() as u64;
        let size = if self.rng.chance(60) || len >= obj.class.cap() {
            self.rng.below(len + 1)
        } else {
            self.rng.range(len, obj.class.cap())
        };
        Op::Truncate { size }
    }

    /// Reads the whole object back while syncs run: the open-context view
    /// must always be exactly what this thread wrote.
    fn check_read(&mut self, os: &Objset, obj: &Live) -> tarn_engine::Result<()> {
        let got = os.read(obj.id, 0, obj.content.len() + 1)?;
        assert!(
            got == obj.content,
            "seed {}: object {} reads back wrong before any crash: {}",
            self.seed,
            obj.id,
            first_difference(&got, &obj.content)
        );
        Ok(())
    }
}
