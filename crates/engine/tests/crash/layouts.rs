//! Crash runs on redundant layouts (issue 12, "What must be shown" 2): the
//! same workloads, cuts and oracle as a stripe's, on mirrors and RAID-Z
//! ([`REDUNDANT`]), with devices lost around the cut.
//!
//! Two things differ from a stripe:
//! - **One power rail.** A stripe's pool stops at its cut device's first
//!   failed write (no redundancy: it suspends), so the other devices may
//!   keep what they took a moment later. A redundant vdev goes on without a
//!   child whose write failed, which is a device lost, not a power cut. So
//!   the devices of a redundant pool hang on one rail ([`Railed`]): when the
//!   cut device loses power at its k-th write, every device does at once,
//!   and [`crash_all`](crate::common::crash_all) then decides what each
//!   one's cache kept.
//! - **A device lost** ([`Loss`]), as many as one vdev's redundancy allows:
//!   after the crash, a child's image is not given to import, or is given
//!   blank or with its labels overwritten (import cannot tell it is the
//!   pool's: it must take it as missing) — the pool imports DEGRADED with
//!   those children UNAVAIL; or a child loses power of its own earlier in
//!   the workload, the pool goes on degraded, and after the cut its stale
//!   image is given back — every read must still return the newest data
//!   (its dirty time log, from its newest uberblock, keeps reads off what
//!   it missed, and checksums would catch a stale copy), and import
//!   resilvers it.
//!
//! After the checks every crash run makes (contents as of a committed txg,
//! datasets, verify): the resilver import starts for a device that missed
//! txgs (a stale one that came back: it missed every txg after its newest
//! uberblock) must end without error, and then a scrub must find nothing
//! — no block lost, no bad copy — and a second scrub nothing either.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tarn_engine::pool::scan::{ScanFunc, ScanState};
use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::sys::device::Health;
use tarn_engine::sys::{BlockDevice, FaultDevice};
use tarn_engine::Pool;
use tarn_ondisk::label::{label_offset, LABELS_BACK, LABELS_FRONT};

use super::Plan;
use crate::common::{pattern, Rng};

/// A pool's shape: `groups` top-level vdevs of `width` devices each, laid
/// out as `layout`; device `g·width + c` is child `c` of vdev `g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub layout: Layout,
    pub groups: usize,
    pub width: usize,
}

/// The redundant layouts the crash test runs, each on its share of the
/// seeds (seed `s` runs `REDUNDANT[s % len]`).
pub const REDUNDANT: &[Shape] = &[
    Shape { layout: Layout::Mirror, groups: 2, width: 2 },
    Shape { layout: Layout::Mirror, groups: 1, width: 3 },
    Shape { layout: Layout::Raidz(1), groups: 2, width: 3 },
    Shape { layout: Layout::Raidz(2), groups: 1, width: 5 },
    Shape { layout: Layout::Raidz(3), groups: 1, width: 6 },
];

impl Shape {
    /// Plain devices, striped (the crash test's first layout).
    pub fn stripe(ndevs: usize) -> Shape {
        Shape { layout: Layout::Plain, groups: ndevs, width: 1 }
    }

    pub fn ndevs(&self) -> usize {
        self.groups * self.width
    }

    /// Children one vdev can lose and still serve every block.
    pub fn redundancy(&self) -> usize {
        match self.layout {
            Layout::Plain => 0,
            Layout::Mirror => self.width - 1,
            Layout::Raidz(p) => p as usize,
        }
    }

    /// The top-level vdevs of a new pool on `devs` (in device order).
    pub fn tops(&self, devs: Vec<(String, Arc<dyn BlockDevice>)>) -> Vec<NewTop> {
        assert_eq!(devs.len(), self.ndevs(), "{self:?}: one device per child");
        devs.chunks(self.width).map(|c| NewTop { layout: self.layout, devices: c.to_vec() }).collect()
    }
}

/// What happens to devices around the power cut (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    None,
    /// Not given to import.
    Absent(Vec<usize>),
    /// Given to import as a blank device of the same size.
    Blank(Vec<usize>),
    /// Given to import with random bytes over their labels (front and back;
    /// the data between is intact).
    Garbage(Vec<usize>),
    /// Loses power of its own at write `⌈k·permille/1000⌉` of the run cut
    /// at write k (the pool goes on without it), and comes back at import
    /// with what it held then.
    Stale { dev: usize, permille: u64 },
}

impl Loss {
    /// A loss for `shape` drawn from `rng`: a quarter of the runs lose
    /// nothing, a quarter lose absent devices, an eighth each blank and
    /// garbled ones, a quarter a stale one. Devices lost together are
    /// children of one vdev, from one to as many as its redundancy allows;
    /// a stale device is never `keep` (the cut device: its own power cut
    /// would be the rail's).
    pub fn draw(shape: &Shape, keep: usize, rng: &mut Rng) -> Loss {
        let r = shape.redundancy();
        if r == 0 {
            return Loss::None;
        }
        let group = rng.below(shape.groups as u64) as usize;
        let n = rng.range(1, r as u64) as usize;
        let first = rng.below(shape.width as u64) as usize;
        let devs: Vec<usize> = (0..n).map(|i| group * shape.width + (first + i) % shape.width).collect();
        match rng.below(8) {
            0 | 1 => Loss::None,
            2 | 3 => Loss::Absent(devs),
            4 => Loss::Blank(devs),
            5 => Loss::Garbage(devs),
            _ => {
                let others: Vec<usize> = (0..shape.ndevs()).filter(|&d| d != keep).collect();
                Loss::Stale { dev: others[rng.below(others.len() as u64) as usize], permille: rng.range(100, 900) }
            }
        }
    }

    /// The devices import will not find (their children UNAVAIL).
    pub fn missing(&self) -> &[usize] {
        match self {
            Loss::Absent(d) | Loss::Blank(d) | Loss::Garbage(d) => d,
            Loss::None | Loss::Stale { .. } => &[],
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Loss::None => "none",
            Loss::Absent(_) => "absent",
            Loss::Blank(_) => "blank",
            Loss::Garbage(_) => "garbage",
            Loss::Stale { .. } => "stale",
        }
    }
}

/// The devices import is given after a crash that lost `loss`: the crash
/// images, less the absent ones, with blank or garbled ones in place.
pub fn after_loss(images: &[Arc<FaultDevice>], loss: &Loss, seed: u64) -> Vec<Arc<FaultDevice>> {
    let mut out = Vec::new();
    for (i, img) in images.iter().enumerate() {
        let lost = loss.missing().contains(&i);
        match loss {
            Loss::Absent(_) if lost => {}
            Loss::Blank(_) if lost => out.push(Arc::new(FaultDevice::new(img.size_bytes(), seed).with_name(format!("blank{i}")))),
            Loss::Garbage(_) if lost => {
                let size = img.size_bytes();
                img.write_at(&pattern(LABELS_FRONT as usize, seed), 0).expect("garble the front labels");
                img.write_at(&pattern(LABELS_BACK as usize, !seed), label_offset(2, size)).expect("garble the back labels");
                img.flush().expect("flush");
                out.push(img.clone());
            }
            _ => out.push(img.clone()),
        }
    }
    out
}

/// A device on the pool's power rail: when the cut device (`trips`) loses
/// power, the rail goes down and every device on it fails every operation
/// from then on, as all disks of a machine do when its power goes. What
/// each had in its volatile cache is left to `FaultDevice::crash`.
#[derive(Debug)]
pub struct Railed {
    pub dev: Arc<FaultDevice>,
    pub rail: Arc<AtomicBool>,
    pub trips: bool,
}

impl Railed {
    fn powered(&self) -> io::Result<()> {
        if self.rail.load(Ordering::SeqCst) {
            return Err(io::Error::other(format!("{}: power cut (the rail is down)", self.dev.name())));
        }
        Ok(())
    }

    /// Passes `r` on, taking the rail down when it is the cut device's
    /// power cut.
    fn after<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if r.is_err() && self.trips && self.dev.is_dead() {
            self.rail.store(true, Ordering::SeqCst);
        }
        r
    }
}

impl BlockDevice for Railed {
    fn size_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.powered()?;
        self.dev.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.powered()?;
        let r = self.dev.write_at(buf, offset);
        self.after(r)
    }
    fn readv_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.powered()?;
        self.dev.readv_at(bufs, offset)
    }
    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.powered()?;
        let r = self.dev.writev_at(bufs, offset);
        self.after(r)
    }
    fn flush(&self) -> io::Result<()> {
        self.powered()?;
        let r = self.dev.flush();
        self.after(r)
    }
    fn name(&self) -> String {
        self.dev.name()
    }
    fn health(&self) -> Health {
        self.dev.health()
    }
}

/// The devices of a redundant plan's pool, on one rail tripped by the cut
/// device.
pub fn on_rail(plan: &Plan, devs: &[Arc<FaultDevice>]) -> Vec<(String, Arc<dyn BlockDevice>)> {
    let rail = Arc::new(AtomicBool::new(false));
    devs.iter()
        .enumerate()
        .map(|(i, d)| (format!("mem{i}"), Arc::new(Railed { dev: d.clone(), rail: rail.clone(), trips: i == plan.cut_dev }) as Arc<dyn BlockDevice>))
        .collect()
}

/// After import: the pool is DEGRADED with exactly the `missing` devices'
/// children UNAVAIL (each in its vdev, which is DEGRADED), or ONLINE when
/// none is missing.
pub fn check_health(pool: &Pool, shape: &Shape, missing: &[usize], ctx: &str) {
    let st = pool.status();
    assert_eq!(st.state, if missing.is_empty() { "ONLINE" } else { "DEGRADED" }, "{ctx}: pool state: {st:#?}");
    assert_eq!(st.vdevs.len(), shape.groups, "{ctx}: top-level vdevs");
    for (g, top) in st.vdevs.iter().enumerate() {
        let lost: Vec<usize> = (0..shape.width).filter(|c| missing.contains(&(g * shape.width + c))).collect();
        assert_eq!(top.state, if lost.is_empty() { "ONLINE" } else { "DEGRADED" }, "{ctx}: {} state: {top:#?}", top.path);
        for (c, child) in top.children.iter().enumerate() {
            let want = if lost.contains(&c) { "UNAVAIL" } else { "ONLINE" };
            assert_eq!(child.state, want, "{ctx}: {} child {c} ({}) state", top.path, child.path);
        }
    }
}

/// Waits for the scan import may have started (a resilver of the leaves
/// that missed txgs); it must end without error. Returns the copies it
/// wrote.
pub fn check_resilver(pool: &Pool, ctx: &str) -> u64 {
    let st = pool.scan_wait();
    if st.func != ScanFunc::Resilver || st.state == ScanState::None {
        return 0;
    }
    assert_eq!(st.state, ScanState::Finished, "{ctx}: the resilver at import ends: {st:?}");
    assert!(st.report.errors.is_empty(), "{ctx}: the resilver at import found blocks lost: {:#?}", st.report.errors);
    st.report.repaired_copies
}

/// A scrub finds no block lost and no bad copy (every device holds every
/// committed block it should, a stale one since the resilver), and neither
/// does a second one.
pub fn check_scrubs(pool: &Pool, ctx: &str) {
    for which in ["first", "second"] {
        let rep = pool.scrub().unwrap_or_else(|e| panic!("{ctx}: {which} scrub: {e}"));
        assert!(rep.errors.is_empty(), "{ctx}: the {which} scrub found blocks lost: {:#?}", rep.errors);
        assert_eq!(rep.bad_copies, 0, "{ctx}: the {which} scrub found bad copies: {rep:?}");
        assert!(rep.copies >= rep.blocks, "{ctx}: the {which} scrub read every block: {rep:?}");
    }
}
