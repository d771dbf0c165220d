//! The commit pipeline: rounds opened by committers, several in flight on
//! the chain at once, device flushes shared between them, acknowledged in
//! log order. See the module docs ("Commits: a pipeline of rounds").

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;
use tarn_ondisk::zil::LogPtr;

use super::chain::Planned;
use super::log::{retire_chain, take_for_commit, Itx, LogSource, LogState, Zil};
use crate::error::{Error, ErrorKind, Result};

/// Most rounds planned on the chain and not yet acknowledged: a bound on
/// the log blocks (and threads) in flight, and on the tunable
/// `tarn_zil_rounds_in_flight`. A committer finding that many waits for
/// the oldest to be acknowledged.
pub(super) const ROUNDS_IN_FLIGHT_MAX: u64 = 16;

/// Rounds' errors kept for late waiters.
const FAILED_KEEP: u64 = 1024;

/// A round planned (its blocks placed on the chain) and not yet
/// acknowledged. `LogState::flights` holds them in round order, which is
/// chain order.
#[derive(Clone, Debug)]
pub(super) struct Flight {
    pub round: u64,
    /// The chain its blocks are on (0: none, the round writes nothing).
    pub guid: u64,
    /// Its first block: the header names it while no earlier block of the
    /// chain is live.
    pub first: Option<LogPtr>,
    /// Its blocks are durable once this txg has synced too (a new chain's
    /// header; 0: nothing to wait for).
    pub durable_txg: u64,
    /// Set when its blocks are written: the number of the flush that makes
    /// them durable (the first to start after the write completed).
    pub flush_needed: Option<u64>,
    /// Why it falls back to a txg sync: a write or flush of its chain failed
    /// (this round's or another's) while it was in flight.
    pub doomed: Option<String>,
}

/// Device flushes of log blocks: numbered, one at a time. A flush covers
/// every block whose write completed before it started (`fdatasync`, a
/// cache flush: both cover every completed write of the device).
#[derive(Default, Debug)]
pub(super) struct Flushes {
    /// Flushes started and finished (numbers).
    pub started: u64,
    pub done: u64,
    pub busy: bool,
    /// Top-level vdevs written since the last flush started.
    pub tops: Vec<u32>,
    /// When the flush under way started, and how long the last one took.
    pub started_at: Option<Instant>,
    pub last_ns: u64,
}

/// Rounds opened whose blocks are not yet written (with when each was
/// opened), and how long the last one took from opening to written: what
/// `catch_next_flush` predicts with.
#[derive(Default, Debug)]
pub(super) struct Writing {
    pub rounds: Vec<(u64, Instant)>,
    pub last_ns: u64,
}

/// How a round ends.
enum Outcome {
    /// Its blocks are durable.
    Logged,
    /// Made durable by a txg sync instead (why).
    FallBack(String),
    /// Failed (a record could not be filled).
    Failed(Error),
}

impl Zil {
    /// `commit`'s body: takes the records, then waits for the round that
    /// holds them, leading a round when records are pending and no round
    /// is being opened.
    pub(super) fn commit_rounds(&self, obj: u64, src: &dyn LogSource) -> Result<()> {
        let (timeout_pct, depth) = {
            let t = self.core.tunables.read();
            (t.zfs_commit_timeout_pct, t.tarn_zil_rounds_in_flight.clamp(1, ROUNDS_IN_FLIGHT_MAX))
        };
        let mut st = self.st.lock();
        take_for_commit(&mut st, obj);
        // The round that will hold what was taken — or, with nothing new,
        // the last one started, which may hold what this caller depends on.
        let mut mine = if st.pending.is_empty() { st.rounds_started } else { st.rounds_started + 1 };
        if mine <= st.rounds_done {
            self.stats.commits_empty.fetch_add(1, Ordering::Relaxed);
        }
        st.committers += 1;
        let res = loop {
            if mine > st.rounds_started && st.pending.is_empty() {
                // A txg sync made the records durable and dropped them
                // (`sync_done`) before a round took them: only the rounds
                // opened so far may hold what they depend on.
                mine = st.rounds_started;
            }
            if st.rounds_done >= mine {
                break match st.failed.get(&mine) {
                    Some(e) => Err(Error::new(ErrorKind::Io, e.clone())),
                    None => Ok(()),
                };
            }
            if may_lead(&st, depth) {
                if let Some(at) = catch_next_flush(&st).filter(|&at| at > Instant::now()) {
                    // Written now, the round would miss the flush it can
                    // catch at the latest then: it waits for company
                    // until then (or until something changes).
                    self.stats.flush_holds.fetch_add(1, Ordering::Relaxed);
                    self.cv.wait_until(&mut st, at);
                    continue;
                }
                let (round, itxs) = self.open_round(&mut st, timeout_pct);
                drop(st);
                self.run_round(round, itxs, src);
                st = self.st.lock();
                continue;
            }
            self.cv.wait(&mut st);
        };
        st.committers -= 1;
        res
    }

    /// Opens the next round and takes the pending records into it. When
    /// other committers are logging, the round first waits a share of the
    /// last round's latency for them to join (`zfs_commit_timeout_pct`);
    /// a lone writer never waits.
    fn open_round(&self, st: &mut MutexGuard<'_, LogState>, timeout_pct: u64) -> (u64, Vec<Itx>) {
        let wait = Duration::from_nanos(st.latency_ns.saturating_mul(timeout_pct) / 100);
        if st.committers > 1 && !wait.is_zero() {
            st.opening = true;
            self.stats.company_waits.fetch_add(1, Ordering::Relaxed);
            let deadline = Instant::now() + wait;
            // Bounded by the deadline: notifications only make it look again.
            while !self.cv.wait_until(st, deadline).timed_out() {}
            st.opening = false;
        }
        st.rounds_started += 1;
        assert!(st.rounds_started - st.rounds_done <= ROUNDS_IN_FLIGHT_MAX);
        let round = st.rounds_started;
        st.writing.rounds.push((round, Instant::now()));
        (round, std::mem::take(&mut st.pending))
    }

    /// Writes round `round` and acknowledges it in log order: fills its
    /// records, places them on the chain after the previous round's,
    /// writes its blocks, waits for a flush that covers them, then for
    /// every earlier round. Returns with `rounds_done == round`.
    fn run_round(&self, round: u64, itxs: Vec<Itx>, src: &dyn LogSource) {
        let t0 = Instant::now();
        let filled = self.fill_round(itxs, src);
        self.stats.fill_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        // Blocks of indirect records were written in place by the fill:
        // the round's flush covers their vdevs too.
        let data_vdevs = match &filled {
            Ok(FillResult::Records(r)) => super::indirect::data_vdevs(r),
            _ => Vec::new(),
        };
        let (planned, mut outcome) = self.plan_in_order(round, filled);
        if !planned.is_empty() {
            let t1 = Instant::now();
            if let Err(why) = self.write_round_blocks(round, &planned, &data_vdevs).and_then(|()| self.make_durable(round)) {
                outcome = Outcome::FallBack(why);
            }
            let mut st = self.st.lock();
            st.latency_ns = t1.elapsed().as_nanos() as u64;
        }
        self.finish_round(round, planned, outcome, t0);
    }

    /// Places the round's records on the chain once every earlier round
    /// has placed its own (chain order is round order), and registers it
    /// in flight.
    fn plan_in_order(&self, round: u64, filled: Result<FillResult>) -> (Vec<Planned>, Outcome) {
        let mut st = self.st.lock();
        while st.rounds_planned + 1 < round {
            self.cv.wait(&mut st);
        }
        assert_eq!(st.rounds_planned + 1, round, "rounds are planned in order");
        let (planned, outcome) = match filled {
            Err(e) => (Vec::new(), Outcome::Failed(e)),
            Ok(FillResult::FallBack(why)) => (Vec::new(), Outcome::FallBack(why)),
            Ok(FillResult::Records(recs)) if recs.is_empty() => (Vec::new(), Outcome::Logged),
            Ok(FillResult::Records(recs)) => match self.plan(&mut st, recs) {
                Ok(p) => (p, Outcome::Logged),
                Err(e) => (Vec::new(), Outcome::FallBack(e.to_string())),
            },
        };
        let chain = st.chain.filter(|_| !planned.is_empty());
        st.flights.push_back(Flight {
            round,
            guid: chain.map_or(0, |c| c.guid),
            first: planned.first().map(|p| p.ptr),
            durable_txg: chain.map_or(0, |c| c.durable_txg),
            flush_needed: None,
            doomed: None,
        });
        st.rounds_planned = round;
        self.stats.in_flight_max.fetch_max(st.flights.len() as u64, Ordering::Relaxed);
        self.cv.notify_all();
        (planned, outcome)
    }

    /// Writes the round's blocks (unless its chain already failed) and
    /// marks them written; a failed write dooms the chain.
    fn write_round_blocks(&self, round: u64, planned: &[Planned], data_vdevs: &[u32]) -> std::result::Result<(), String> {
        let (guid, doomed) = {
            let st = self.st.lock();
            let f = flight(&st, round);
            (f.guid, f.doomed.clone())
        };
        if let Some(why) = doomed {
            return Err(why);
        }
        let t0 = Instant::now();
        let res = self.write_blocks(guid, planned, data_vdevs);
        self.stats.write_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let mut st = self.st.lock();
        if let Some(&(_, opened)) = st.writing.rounds.iter().find(|(r, _)| *r == round) {
            st.writing.last_ns = opened.elapsed().as_nanos() as u64;
        }
        written(&mut st, round);
        match res {
            Ok(tops) => {
                let need = st.flushes.started + 1;
                for t in tops {
                    if !st.flushes.tops.contains(&t) {
                        st.flushes.tops.push(t);
                    }
                }
                flight_mut(&mut st, round).flush_needed = Some(need);
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                self.doom_chain(&mut st, guid, &why);
                Err(why)
            }
        }
    }

    /// Waits until a flush covers the round's blocks, flushing when no
    /// flush is under way (one flush serves every round written before it
    /// started), then for the new chain's header if the round needs it.
    fn make_durable(&self, round: u64) -> std::result::Result<(), String> {
        let mut st = self.st.lock();
        loop {
            let f = flight(&st, round);
            if let Some(why) = &f.doomed {
                return Err(why.clone());
            }
            let need = f.flush_needed.expect("written before made durable");
            if st.flushes.done >= need {
                break;
            }
            if st.flushes.busy {
                self.cv.wait(&mut st);
                continue;
            }
            st.flushes.busy = true;
            st.flushes.started_at = Some(Instant::now());
            st.flushes.started += 1;
            let n = st.flushes.started;
            let tops = std::mem::take(&mut st.flushes.tops);
            drop(st);
            let t0 = Instant::now();
            let res = self.flush_tops(&tops);
            self.stats.flush_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.stats.flushes.fetch_add(1, Ordering::Relaxed);
            st = self.st.lock();
            st.flushes.busy = false;
            st.flushes.started_at = None;
            st.flushes.last_ns = t0.elapsed().as_nanos() as u64;
            st.flushes.done = n;
            if let Err(e) = res {
                // Every round this flush was to cover may be lost.
                let why = e.to_string();
                let guids: Vec<u64> = st.flights.iter().filter(|f| f.flush_needed.is_some_and(|k| k <= n)).map(|f| f.guid).collect();
                for g in guids {
                    self.doom_chain(&mut st, g, &why);
                }
            }
            self.cv.notify_all();
        }
        let durable_txg = flight(&st, round).durable_txg;
        drop(st);
        if durable_txg > self.core.txg.synced_txg() {
            self.stats.chain_waits.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.core.txg.wait_synced(durable_txg) {
                let why = e.context(self.what()).to_string();
                let mut st = self.st.lock();
                let guid = flight(&st, round).guid;
                self.doom_chain(&mut st, guid, &why);
                return Err(why);
            }
        }
        Ok(())
    }

    /// A write or flush of chain `guid` failed: its blocks may be torn, so
    /// the chain ends there. Every round of it in flight falls back to a
    /// txg sync (the ones after cannot be found past the tear; the ones
    /// before are made durable by their txg too, so that no acknowledgement
    /// leans on a chain being dropped), and the chain is retired: kept
    /// named while its earlier, acknowledged records' txgs sync.
    fn doom_chain(&self, st: &mut LogState, guid: u64, why: &str) {
        if guid == 0 {
            return;
        }
        for f in st.flights.iter_mut().filter(|f| f.guid == guid && f.doomed.is_none()) {
            f.doomed = Some(why.to_string());
        }
        if st.chain.is_some_and(|c| c.guid == guid) {
            retire_chain(st, self.core.txg.open_txg());
        }
        self.cv.notify_all();
    }

    /// Falls back if the round is doomed or must, waits for every earlier
    /// round, then acknowledges this one: its blocks join the live list,
    /// `rounds_done` moves on and its waiters wake.
    fn finish_round(&self, round: u64, planned: Vec<Planned>, mut outcome: Outcome, t0: Instant) {
        let mut st = self.st.lock();
        let mut fell_back = false;
        loop {
            if let (false, Outcome::Logged, Some(why)) = (fell_back, &outcome, &flight(&st, round).doomed) {
                outcome = Outcome::FallBack(why.clone());
            }
            if let Outcome::FallBack(why) = &outcome {
                drop(st);
                outcome = match self.fall_back(why) {
                    Ok(()) => Outcome::Logged,
                    Err(e) => Outcome::Failed(e),
                };
                fell_back = true;
                st = self.st.lock();
            }
            if st.rounds_done + 1 == round {
                break;
            }
            self.cv.wait(&mut st);
        }
        written(&mut st, round);
        let f = st.flights.pop_front().expect("the round is in flight");
        assert_eq!(f.round, round, "rounds are acknowledged in order");
        // A round that fell back wrote its blocks on a doomed chain: they
        // go with it, holding nothing.
        self.round_written(&mut st, &f, planned, !fell_back);
        st.rounds_done = round;
        if let Outcome::Failed(e) = outcome {
            st.failed.insert(round, e.to_string());
        }
        st.failed.retain(|&r, _| r + FAILED_KEEP > round);
        self.stats.round_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.cv.notify_all();
    }

    /// Syncs the open txg instead of logging (the records are in it).
    pub(super) fn fall_back(&self, why: &str) -> Result<()> {
        self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        let _ = why;
        self.core.txg.wait_synced(0).map_err(|e| e.context(self.what()))
    }
}

/// What filling a round gave: its records, or why it syncs the txg instead.
pub(super) enum FillResult {
    Records(Vec<tarn_ondisk::zil::Record>),
    FallBack(String),
}

/// Whether a committer waiting for its round may open the next one:
/// records are pending, no round is being opened, and fewer than `depth`
/// rounds are in flight (`tarn_zil_rounds_in_flight`).
fn may_lead(st: &LogState, depth: u64) -> bool {
    !st.pending.is_empty() && !st.opening && st.rounds_started - st.rounds_done < depth
}

/// Round `round` has written its blocks, or ends without (`Writing`).
fn written(st: &mut LogState, round: u64) {
    st.writing.rounds.retain(|(r, _)| *r != round);
}

/// When a round opened now would still have its blocks written before
/// the next flush starts, at the latest — `None` when nothing is being
/// written or flushed (open now). A flush covers only the writes that
/// completed before it started, so a round written while a flush runs
/// waits for the one after it anyway; opened later, until its write ends
/// just as that flush can start, it carries every commit that came
/// meanwhile for no more latency. Predicted from the last round's time
/// from opening to written and the last flush's time: never more than
/// one flush's time ahead.
fn catch_next_flush(st: &LogState) -> Option<Instant> {
    if st.writing.last_ns == 0 || st.flushes.last_ns == 0 {
        return None;
    }
    let w = Duration::from_nanos(st.writing.last_ns);
    let f = Duration::from_nanos(st.flushes.last_ns);
    let next_flush_end = match (st.flushes.started_at, st.writing.rounds.first()) {
        (Some(started), _) => started + f,
        (None, Some(&(_, opened))) => opened + w + f,
        (None, None) => return None,
    };
    next_flush_end.checked_sub(w)
}

fn flight(st: &LogState, round: u64) -> &Flight {
    st.flights.iter().find(|f| f.round == round).expect("the round is in flight")
}

fn flight_mut(st: &mut LogState, round: u64) -> &mut Flight {
    st.flights.iter_mut().find(|f| f.round == round).expect("the round is in flight")
}

/// Invariant 4: the placed rounds in flight are the ones after the last
/// acknowledged, consecutive, and no more than the bound.
pub(super) fn check_flights(st: &LogState) -> std::result::Result<(), String> {
    if st.rounds_started - st.rounds_done > ROUNDS_IN_FLIGHT_MAX {
        return Err(format!("{} rounds in flight, more than {}", st.rounds_started - st.rounds_done, ROUNDS_IN_FLIGHT_MAX));
    }
    if st.rounds_done > st.rounds_planned || st.rounds_planned > st.rounds_started {
        return Err(format!("rounds done {}, planned {}, started {}", st.rounds_done, st.rounds_planned, st.rounds_started));
    }
    match st.flights.iter().zip(st.rounds_done + 1..).find(|(f, r)| f.round != *r) {
        Some((f, r)) => Err(format!("round {} in flight where round {} should be", f.round, r)),
        None if st.flights.len() as u64 != st.rounds_planned - st.rounds_done => {
            Err(format!("{} rounds in flight, {} placed and not acknowledged", st.flights.len(), st.rounds_planned - st.rounds_done))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_ondisk::zil::ZilHeader;

    fn state() -> LogState {
        let mut st = LogState::new(ZilHeader::default());
        st.writing.last_ns = 300_000;
        st.flushes.last_ns = 1_000_000;
        st
    }

    #[test]
    fn a_round_waits_for_the_flush_it_would_miss_and_no_longer() {
        // Nothing written or flushed, or no history: open now.
        assert_eq!(catch_next_flush(&state()), None);
        let mut fresh = LogState::new(ZilHeader::default());
        fresh.flushes.started_at = Some(Instant::now());
        assert_eq!(catch_next_flush(&fresh), None, "no history: no prediction");
        // A flush under way since now, 1 ms a flush, 0.3 ms a write: a
        // round opened before 0.7 ms from now would wait for the flush
        // after this one anyway.
        let mut st = state();
        let t0 = Instant::now();
        st.flushes.started_at = Some(t0);
        let at = catch_next_flush(&st).expect("a flush is under way");
        assert_eq!(at, t0 + Duration::from_micros(700));
        // A round being written (opened at t0), no flush yet: its flush ends
        // at t0 + 0.3 + 1 ms; the next round opens 0.3 ms before that.
        let mut st = state();
        st.writing.rounds.push((7, t0));
        assert_eq!(catch_next_flush(&st), Some(t0 + Duration::from_micros(1000)));
        // A flush that ran long: its predicted end is past, open now.
        let mut st = state();
        st.flushes.started_at = Some(t0 - Duration::from_millis(5));
        assert!(catch_next_flush(&st).is_some_and(|at| at <= Instant::now()));
    }

    #[test]
    fn written_forgets_the_round() {
        let mut st = state();
        let t = Instant::now();
        st.writing.rounds.extend([(3, t), (4, t)]);
        written(&mut st, 3);
        assert_eq!(st.writing.rounds, vec![(4, t)]);
        written(&mut st, 9);
        assert_eq!(st.writing.rounds.len(), 1);
    }
}
