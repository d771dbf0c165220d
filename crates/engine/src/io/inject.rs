//! Fault injection into a live pool's leaf devices (`tarn inject`, as
//! OpenZFS's zinject device handlers): for tests, and for administrators
//! rehearsing a failure on a pool that is in use.
//!
//! # What a handler does
//! A handler sits on one leaf device ([`LeafInjections`], owned by the
//! leaf's I/O object in `pipeline`) and is consulted for every device
//! operation the leaf issues — the scheduler's reads and writes (merged or
//! not), the direct label and uberblock writes and the cache flushes:
//!
//! | fault | `-e` | what the operation sees |
//! |---|---|---|
//! | I/O error | `io` | fails with EIO; the device is not called |
//! | checksum damage | `checksum` | reads only: the device is read, then one bit of every 512-byte sector of the *returned buffer* is flipped |
//! | vanished device | `nxio` | every operation fails with ENXIO and the device's health is REMOVED |
//! | delay | `-D MS[:LANES]` | completes no earlier than MS after it started |
//!
//! `-T read|write|all` picks the operations (`all` adds cache flushes to
//! reads and writes); `-f PCT` makes each matching operation fire with that
//! probability (in millionths, as zinject: 0.0001 % to 100 %).
//!
//! Injection never touches the device's bytes: errors stop the call before
//! it reaches the device, and damage is done to the buffer the read
//! returns, which goes to the checksum check like any other read — so it
//! is counted as a checksum error by the read path that finds it (the
//! block read, the scrub), and nothing that fails its checksum is ever
//! cached or written anywhere (reads keep only verified data; repairs write
//! only copies that verified). Clearing a handler takes effect for the next
//! operation.
//!
//! Everything downstream is the ordinary machinery, unaware of injection: a
//! failed write or flush faults the leaf as a real one does; a failed read
//! is counted and, the device being healthy, served from another copy; and
//! `nxio` answers the leaf's health check as a removed device does, so the
//! leaf is REMOVED at its next I/O or check and the pool suspends exactly
//! as when an image file is deleted. A leaf's fault stays, as for a real
//! device: clearing the handler afterwards restores the device's I/O, not
//! the faulted leaf, which `pool clear` takes back (resuming its pool when
//! the fault suspended it).
//!
//! # Delays and lanes
//! Without lanes (`-D 10`), every matching operation takes at least 10 ms
//! more. With lanes (`-D 10:2`, zinject's model) the device serves that
//! many operations at a time, each taking at least 10 ms: an operation
//! takes the lane that frees first and completes at
//! `max(now, lane free) + 10 ms`. Delay handlers on one device add up:
//! an operation picks the earliest completion among all their lanes.
//! ```text
//!   -D 10:1, three operations issued together:
//!   lane 0 |--op1 10ms--|--op2 10ms--|--op3 10ms--|
//!          0            10           20           30 ms (op3 waits 30 ms)
//! ```
//! The delay is slept in the leaf's issue thread (or the caller's, for
//! direct writes and flushes) after the device call.
//!
//! # Bounds
//! At most [`HANDLERS_PER_LEAF_MAX`] handlers per leaf, a delay of at most
//! [`DELAY_MAX_MS`], at most [`LANES_MAX`] lanes. A leaf with no handler
//! pays one atomic load per operation.
//!
//! # Invariants
//! 1. Injection changes only what an operation returns or how long it
//!    takes, never the device's contents (`check_damage_span`: the damage
//!    lies where every block's checksum covers it).
//! 2. A handler id names one handler in the process, never reused.
//! 3. `armed` is true exactly when the leaf has a handler.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::{printable, Error, Result};
use crate::sys::device::{Health, SECTOR_SIZE};
use crate::sys::fault::Rng;

/// A frequency of 100 %: frequencies are counted in millionths (zinject's
/// ZI_PERCENTAGE_MAX), so the smallest is 0.0001 %.
pub const FREQ_ALWAYS: u32 = 1_000_000;
/// The longest delay a handler may add to one operation.
pub const DELAY_MAX_MS: u32 = 10_000;
/// The most lanes a delay handler may have.
pub const LANES_MAX: u32 = 1024;
/// The most handlers one leaf device may carry.
pub const HANDLERS_PER_LEAF_MAX: usize = 32;
/// Checksum damage flips a bit among the first this many bytes of each
/// sector: a block read from a device starts on a sector boundary and is
/// longer than a block pointer can embed, so its checksum covers these
/// bytes of its first sector whatever its size (invariant 1).
const DAMAGE_SPAN_BYTES: usize = 64;

/// Invariant 1: the damage lands inside what every non-embedded block's
/// checksum covers (its payload is longer than `EMBEDDED_MAX`) and inside
/// a sector.
const fn check_damage_span() -> bool {
    DAMAGE_SPAN_BYTES <= tarn_ondisk::bp::EMBEDDED_MAX && DAMAGE_SPAN_BYTES <= SECTOR_SIZE as usize
}
const _: () = assert!(check_damage_span());

/// Handler ids, unique in the process (invariant 2), as zinject numbers
/// its handlers from 1.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a handler does to the operations it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail with EIO.
    Io,
    /// Return read data with bits flipped (it fails its checksum).
    Checksum,
    /// Fail with ENXIO; the device reports itself removed.
    Nxio,
    /// Complete no earlier than `ms` after starting; `lanes` operations
    /// at a time (`None`: any number).
    Delay { ms: u32, lanes: Option<u32> },
}

impl Fault {
    /// Its name in `tarn inject`'s table.
    pub fn name(&self) -> String {
        match self {
            Fault::Io => "io".into(),
            Fault::Checksum => "checksum".into(),
            Fault::Nxio => "nxio".into(),
            Fault::Delay { ms, lanes: None } => format!("delay {}ms", ms),
            Fault::Delay { ms, lanes: Some(n) } => format!("delay {}ms:{}", ms, n),
        }
    }
}

/// Which operations a handler matches (`-T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoTypes {
    Read,
    Write,
    /// Reads, writes and cache flushes.
    All,
}

impl IoTypes {
    pub fn parse(s: &str) -> Result<IoTypes> {
        match s {
            "read" => Ok(IoTypes::Read),
            "write" => Ok(IoTypes::Write),
            "all" => Ok(IoTypes::All),
            _ => Err(Error::invalid(format!("invalid I/O type '{}': read, write or all", printable(s)))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IoTypes::Read => "read",
            IoTypes::Write => "write",
            IoTypes::All => "all",
        }
    }

    fn matches(self, op: Op) -> bool {
        match self {
            IoTypes::Read => op == Op::Read,
            IoTypes::Write => op == Op::Write,
            IoTypes::All => true,
        }
    }
}

/// A device operation as handlers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
}

/// A handler's definition, checked whole ([`InjectSpec::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InjectSpec {
    pub fault: Fault,
    pub io: IoTypes,
    /// Millionths of the matching operations that fire (1 to [`FREQ_ALWAYS`]).
    pub freq: u32,
}

impl InjectSpec {
    /// A handler definition, refused when its parts do not go together:
    /// checksum damage is done to reads; a vanished device fails every
    /// operation, always; delays and frequencies within their bounds.
    pub fn new(fault: Fault, io: IoTypes, freq: u32) -> Result<InjectSpec> {
        if freq == 0 || freq > FREQ_ALWAYS {
            return Err(Error::invalid(format!("invalid frequency of {} millionths: from 1 to {}", freq, FREQ_ALWAYS)));
        }
        match fault {
            Fault::Checksum if io == IoTypes::Write => {
                return Err(Error::invalid("checksum damage is done to what reads return; it cannot apply to writes (-T read or all)"));
            }
            Fault::Nxio if io != IoTypes::All || freq != FREQ_ALWAYS => {
                return Err(Error::invalid("a vanished device (-e nxio) fails every operation, always: it takes neither -T nor -f"));
            }
            Fault::Delay { ms, lanes } => check_delay(ms, lanes)?,
            _ => {}
        }
        Ok(InjectSpec { fault, io, freq })
    }
}

fn check_delay(ms: u32, lanes: Option<u32>) -> Result<()> {
    match delay_problem(ms, lanes) {
        Some(why) => Err(Error::invalid(format!("invalid delay: {}", why))),
        None => Ok(()),
    }
}

/// What is wrong with a delay of `ms` over `lanes`, if anything.
fn delay_problem(ms: u32, lanes: Option<u32>) -> Option<String> {
    if ms == 0 {
        return Some(format!("0 ms adds nothing; from 1 to {} ms", DELAY_MAX_MS));
    }
    if ms > DELAY_MAX_MS {
        return Some(format!("{} ms is above the cap of {} ms ({} s)", ms, DELAY_MAX_MS, DELAY_MAX_MS / 1000));
    }
    match lanes {
        Some(n) if n == 0 || n > LANES_MAX => Some(format!("{} lanes: from 1 to {}", n, LANES_MAX)),
        _ => None,
    }
}

/// `-f PCT`: a percentage above 0 and at most 100 (a trailing `%` is
/// allowed), in millionths; the smallest is 0.0001 %.
pub fn parse_frequency(s: &str) -> Result<u32> {
    let bad = |why: &str| Error::invalid(format!("invalid frequency '{}': {}; a percentage above 0 and at most 100, e.g. 50 or 0.5", printable(s), why));
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t);
    let pct: f64 = t.parse().map_err(|_| bad("not a number"))?;
    if !pct.is_finite() || pct <= 0.0 || pct > 100.0 {
        return Err(bad("out of range"));
    }
    let freq = (pct * (FREQ_ALWAYS / 100) as f64).round() as u32;
    if freq == 0 {
        return Err(bad("below the smallest frequency, 0.0001"));
    }
    debug_assert!(freq <= FREQ_ALWAYS);
    Ok(freq)
}

/// A frequency as `tarn inject` prints it: `100%`, `0.5%`.
pub fn frequency_text(freq: u32) -> String {
    let per = FREQ_ALWAYS / 100;
    if freq.is_multiple_of(per) {
        return format!("{}%", freq / per);
    }
    let s = format!("{:.4}", freq as f64 / per as f64);
    format!("{}%", s.trim_end_matches('0'))
}

/// `-D MS[:LANES]`: milliseconds (1 to [`DELAY_MAX_MS`]) and optionally
/// lanes (1 to [`LANES_MAX`]).
pub fn parse_delay(s: &str) -> Result<Fault> {
    let bad = |why: String| Error::invalid(format!("invalid delay '{}': {}", printable(s), why));
    let (ms, lanes) = match s.split_once(':') {
        Some((m, l)) => (m, Some(l)),
        None => (s, None),
    };
    let whole = |v: &str, what: &str| v.parse::<u32>().map_err(|_| bad(format!("{} must be a whole number (MS or MS:LANES, e.g. 10 or 10:2)", what)));
    let ms = whole(ms, "the milliseconds")?;
    let lanes = lanes.map(|l| whole(l, "the lanes")).transpose()?;
    match delay_problem(ms, lanes) {
        Some(why) => Err(bad(why)),
        None => Ok(Fault::Delay { ms, lanes }),
    }
}

/// One handler on one leaf.
#[derive(Debug)]
pub struct Handler {
    pub id: u64,
    pub spec: InjectSpec,
    /// Operations it failed, damaged or delayed.
    injected: AtomicU64,
    /// When each delay lane is next free (empty: no lanes).
    lanes: Mutex<Vec<Instant>>,
}

impl Handler {
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// The error an operation it fires on fails with.
    fn error(&self) -> Option<io::Error> {
        let errno = match self.spec.fault {
            Fault::Io => libc::EIO,
            Fault::Nxio => libc::ENXIO,
            Fault::Checksum | Fault::Delay { .. } => return None,
        };
        let e = io::Error::from_raw_os_error(errno);
        Some(io::Error::new(e.kind(), format!("{} (injected by `tarn inject`, handler {})", e, self.id)))
    }
}

/// What the handlers do to one device operation ([`LeafInjections::judge`]).
#[derive(Debug, Default)]
pub struct Verdict {
    /// Fail with this instead of calling the device.
    pub fail: Option<io::Error>,
    /// Damage the data read (see [`LeafInjections::damage`]).
    pub damage: bool,
    /// Complete no earlier than this.
    pub until: Option<Instant>,
}

impl Verdict {
    /// Sleeps until the operation may complete.
    pub fn wait(&self) {
        if let Some(t) = self.until {
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
        }
    }
}

/// The handlers of one leaf (see the module docs).
#[derive(Debug)]
pub struct LeafInjections {
    /// Invariant 3: whether `handlers` is non-empty, read without the lock.
    armed: AtomicBool,
    handlers: Mutex<Vec<Arc<Handler>>>,
    rng: Mutex<Rng>,
}

impl Default for LeafInjections {
    fn default() -> Self {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        LeafInjections { armed: AtomicBool::new(false), handlers: Mutex::new(Vec::new()), rng: Mutex::new(Rng(seed)) }
    }
}

impl LeafInjections {
    /// Adds a handler; its id. `leaf` names the device for the error when
    /// it has as many handlers as it may.
    pub fn add(&self, spec: InjectSpec, leaf: &str) -> Result<u64> {
        // Its fields are public: one built without `new` is checked here.
        let spec = InjectSpec::new(spec.fault, spec.io, spec.freq)?;
        let mut hs = self.handlers.lock();
        if hs.len() >= HANDLERS_PER_LEAF_MAX {
            return Err(Error::invalid(format!("device '{}' already has {} injection handlers, the most it may", leaf, HANDLERS_PER_LEAF_MAX)));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let lanes = match spec.fault {
            Fault::Delay { lanes: Some(n), .. } => vec![Instant::now(); n as usize],
            _ => Vec::new(),
        };
        hs.push(Arc::new(Handler { id, spec, injected: AtomicU64::new(0), lanes: Mutex::new(lanes) }));
        self.armed.store(true, Ordering::Release);
        assert!(hs.len() <= HANDLERS_PER_LEAF_MAX, "device '{}': {} handlers", leaf, hs.len());
        Ok(id)
    }

    /// Removes handler `id`; whether it was here.
    pub fn remove(&self, id: u64) -> bool {
        let mut hs = self.handlers.lock();
        let before = hs.len();
        hs.retain(|h| h.id != id);
        self.armed.store(!hs.is_empty(), Ordering::Release);
        hs.len() < before
    }

    /// Removes every handler; how many there were.
    pub fn clear(&self) -> usize {
        let mut hs = self.handlers.lock();
        let n = hs.len();
        hs.clear();
        self.armed.store(false, Ordering::Release);
        n
    }

    /// The handlers, oldest first.
    pub fn handlers(&self) -> Vec<Arc<Handler>> {
        self.handlers.lock().clone()
    }

    /// A removed device's health while an `nxio` handler is on the leaf.
    pub fn health(&self) -> Option<Health> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let hs = self.handlers.lock();
        let h = hs.iter().find(|h| h.spec.fault == Fault::Nxio)?;
        Some(Health::Removed(format!("the device vanished: a fault injected by `tarn inject` (handler {})", h.id)))
    }

    /// What the handlers do to one operation `op`: the first error handler
    /// that fires fails it; checksum handlers that fire damage a read; of
    /// the delay handlers that fire, the lane that completes first takes it.
    pub fn judge(&self, op: Op) -> Verdict {
        let mut v = Verdict::default();
        if !self.armed.load(Ordering::Acquire) {
            return v;
        }
        let hs = self.handlers.lock().clone();
        let now = Instant::now();
        let mut delay: Option<(&Arc<Handler>, Duration, Instant)> = None;
        for h in hs.iter().filter(|h| h.spec.io.matches(op)) {
            if !self.fires(h.spec.freq) {
                continue;
            }
            match h.spec.fault {
                Fault::Io | Fault::Nxio if v.fail.is_none() => {
                    v.fail = h.error();
                    h.injected.fetch_add(1, Ordering::Relaxed);
                }
                Fault::Checksum if op == Op::Read => {
                    v.damage = true;
                    h.injected.fetch_add(1, Ordering::Relaxed);
                }
                Fault::Delay { ms, .. } => {
                    let ms = Duration::from_millis(ms.into());
                    let done = earliest_lane(&h.lanes.lock(), now).1 + ms;
                    if delay.is_none_or(|(_, _, d)| done < d) {
                        delay = Some((h, ms, done));
                    }
                }
                _ => {}
            }
        }
        if let Some((h, ms, done)) = delay {
            let mut lanes = h.lanes.lock();
            v.until = Some(if lanes.is_empty() {
                done
            } else {
                // Taken again under the lock: another operation may have
                // taken this lane meanwhile, and then this one queues behind it.
                let (i, free) = earliest_lane(&lanes, now);
                lanes[i] = free + ms;
                lanes[i]
            });
            h.injected.fetch_add(1, Ordering::Relaxed);
        }
        v
    }

    fn fires(&self, freq: u32) -> bool {
        freq >= FREQ_ALWAYS || self.rng.lock().below(FREQ_ALWAYS.into()) < u64::from(freq)
    }

    /// Checksum damage to a read's returned buffer: one bit flipped among
    /// the first `DAMAGE_SPAN_BYTES` of every sector, so every block the
    /// read carries fails its checksum (invariant 1).
    pub fn damage(&self, buf: &mut [u8]) {
        let mut rng = self.rng.lock();
        for sector in buf.chunks_mut(SECTOR_SIZE as usize) {
            let span = sector.len().min(DAMAGE_SPAN_BYTES) as u64;
            let at = rng.below(span) as usize;
            sector[at] ^= 1 << rng.below(8);
        }
    }
}

/// The lane free first (its index) and when: `now` if it is already free.
/// A handler without lanes is always free.
fn earliest_lane(lanes: &[Instant], now: Instant) -> (usize, Instant) {
    lanes.iter().copied().enumerate().min_by_key(|(_, t)| *t).map_or((0, now), |(i, t)| (i, t.max(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fault: Fault, io: IoTypes, freq: u32) -> InjectSpec {
        InjectSpec::new(fault, io, freq).expect("a valid spec")
    }

    #[test]
    fn frequencies_parse_in_millionths_and_refuse_what_is_not_a_percentage() {
        assert_eq!(parse_frequency("100").unwrap(), FREQ_ALWAYS);
        assert_eq!(parse_frequency("50%").unwrap(), FREQ_ALWAYS / 2);
        assert_eq!(parse_frequency("0.0001").unwrap(), 1);
        for bad in ["0", "-5", "100.5", "abc", "", "nan", "inf", "0.00001", "1e400"] {
            let e = parse_frequency(bad).expect_err(bad);
            assert!(e.msg.contains("invalid frequency") && e.msg.contains("at most 100"), "{bad}: {e}");
        }
        assert_eq!(frequency_text(FREQ_ALWAYS), "100%");
        assert_eq!(frequency_text(FREQ_ALWAYS / 200), "0.5%");
        assert_eq!(frequency_text(1), "0.0001%");
    }

    #[test]
    fn delays_parse_with_or_without_lanes_and_are_capped() {
        assert_eq!(parse_delay("10").unwrap(), Fault::Delay { ms: 10, lanes: None });
        assert_eq!(parse_delay("25:2").unwrap(), Fault::Delay { ms: 25, lanes: Some(2) });
        assert_eq!(parse_delay("10000").unwrap(), Fault::Delay { ms: DELAY_MAX_MS, lanes: None });
        let e = parse_delay("10001").unwrap_err();
        assert!(e.msg.contains("above the cap of 10000 ms (10 s)"), "{e}");
        for bad in ["0", "-5", "x", "10:0", "10:x", "1.5", "10:99999"] {
            let e = parse_delay(bad).expect_err(bad);
            assert!(e.msg.starts_with(&format!("invalid delay '{}'", bad)), "{e}");
        }
    }

    #[test]
    fn specs_that_do_not_go_together_are_refused() {
        assert!(InjectSpec::new(Fault::Checksum, IoTypes::Write, FREQ_ALWAYS).is_err());
        assert!(InjectSpec::new(Fault::Nxio, IoTypes::Read, FREQ_ALWAYS).is_err());
        assert!(InjectSpec::new(Fault::Nxio, IoTypes::All, 5).is_err());
        assert!(InjectSpec::new(Fault::Io, IoTypes::All, 0).is_err());
        assert!(InjectSpec::new(Fault::Delay { ms: 0, lanes: None }, IoTypes::All, FREQ_ALWAYS).is_err());
        let built = InjectSpec { fault: Fault::Delay { ms: DELAY_MAX_MS + 1, lanes: None }, io: IoTypes::All, freq: FREQ_ALWAYS };
        assert!(LeafInjections::default().add(built, "d").is_err(), "a spec built field by field is checked too");
    }

    #[test]
    fn handlers_fail_damage_and_delay_only_the_operations_they_match() {
        let inj = LeafInjections::default();
        assert!(inj.judge(Op::Read).fail.is_none(), "no handler, no fault");
        let id = inj.add(spec(Fault::Io, IoTypes::Write, FREQ_ALWAYS), "d").unwrap();
        assert!(inj.judge(Op::Read).fail.is_none());
        assert!(inj.judge(Op::Flush).fail.is_none(), "flushes are `all`, not `write`");
        let e = inj.judge(Op::Write).fail.expect("a write fails");
        assert!(e.to_string().contains(&format!("handler {}", id)), "{e}");
        let ck = inj.add(spec(Fault::Checksum, IoTypes::All, FREQ_ALWAYS), "d").unwrap();
        assert!(inj.judge(Op::Read).damage && !inj.judge(Op::Write).damage, "damage is to reads only");
        assert!(inj.health().is_none(), "no nxio, no removed device");
        let nx = inj.add(spec(Fault::Nxio, IoTypes::All, FREQ_ALWAYS), "d").unwrap();
        assert_eq!(inj.health().map(|h| h.state()), Some("REMOVED"));
        assert!(inj.judge(Op::Flush).fail.is_some());
        assert!(inj.remove(nx) && inj.remove(id) && !inj.remove(id));
        assert!(inj.health().is_none());
        assert_eq!(inj.handlers().len(), 1);
        assert_eq!(inj.clear(), 1);
        assert!(!inj.remove(ck));
        let v = inj.judge(Op::Read);
        assert!(v.fail.is_none() && !v.damage && v.until.is_none(), "cleared: nothing happens");
    }

    #[test]
    fn a_frequency_fires_about_that_often() {
        let inj = LeafInjections::default();
        inj.add(spec(Fault::Io, IoTypes::Read, FREQ_ALWAYS / 4), "d").unwrap();
        let fired = (0..4000).filter(|_| inj.judge(Op::Read).fail.is_some()).count();
        // 25 % of 4000 is 1000, sd ≈ 27: six sd either side.
        assert!((840..=1160).contains(&fired), "{fired} of 4000 at 25 %");
    }

    #[test]
    fn lanes_queue_operations_and_unlaned_delays_do_not() {
        let inj = LeafInjections::default();
        inj.add(spec(Fault::Delay { ms: 10, lanes: Some(1) }, IoTypes::All, FREQ_ALWAYS), "d").unwrap();
        let t0 = Instant::now();
        let ends: Vec<Instant> = (0..3).map(|_| inj.judge(Op::Read).until.expect("delayed")).collect();
        assert!(ends[0] >= t0 + Duration::from_millis(10));
        assert!(ends[1] >= ends[0] + Duration::from_millis(10) && ends[2] >= ends[1] + Duration::from_millis(10), "one lane serves one at a time");
        inj.clear();
        inj.add(spec(Fault::Delay { ms: 10, lanes: None }, IoTypes::All, FREQ_ALWAYS), "d").unwrap();
        let a = inj.judge(Op::Read).until.expect("delayed");
        let b = inj.judge(Op::Read).until.expect("delayed");
        assert!(b.saturating_duration_since(a) < Duration::from_millis(10), "no lanes: no queueing");
    }

    #[test]
    fn damage_flips_one_bit_early_in_every_sector() {
        let inj = LeafInjections::default();
        let mut buf = vec![0u8; 4096 + 512];
        inj.damage(&mut buf);
        for (i, s) in buf.chunks(512).enumerate() {
            let ones: u32 = s.iter().map(|b| b.count_ones()).sum();
            assert_eq!(ones, 1, "sector {i}");
            assert!(s[..DAMAGE_SPAN_BYTES].iter().any(|b| *b != 0), "sector {i}: within the first {DAMAGE_SPAN_BYTES} bytes");
        }
    }

    #[test]
    fn a_leaf_takes_a_bounded_number_of_handlers() {
        let inj = LeafInjections::default();
        for _ in 0..HANDLERS_PER_LEAF_MAX {
            inj.add(spec(Fault::Io, IoTypes::Read, FREQ_ALWAYS), "d").unwrap();
        }
        let e = inj.add(spec(Fault::Io, IoTypes::Read, FREQ_ALWAYS), "d").unwrap_err();
        assert!(e.msg.contains("device 'd'"), "{e}");
    }
}
