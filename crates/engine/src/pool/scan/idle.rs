//! A scan yields to foreground I/O (OpenZFS's scan throttle before sorted
//! scrubs: `zfs_scan_idle`, `zfs_scrub_delay`, `zfs_resilver_delay`).
//!
//! The scheduler holds scrub-class I/O back behind interactive I/O per leaf
//! (`io::queue`), which cannot help when the leaves share one disk — two
//! image files on one SSD, or partitions of one drive: a leaf the foreground
//! does not touch lets the scan read at full depth while the foreground's
//! reads wait behind it on the disk underneath. So the scan also looks at
//! the pool as a whole:
//!
//! ```text
//!   foreground device I/O       note(): the pool's clock, in ms
//!   (dataset reads that miss
//!    the ARC, read-ahead,
//!    intent-log writes)
//!
//!   before each scan I/O:   busy = now - last foreground < zfs_scan_idle_ms
//!     idle  → issue at once, zfs_scan_vdev_limit deep (full speed)
//!     busy  → one scan I/O at a time, each started ≥ delay ms after the
//!             previous one ended (zfs_scrub_delay_ms for a scrub,
//!             zfs_resilver_delay_ms for a resilver or rebuild)
//!
//!   scan I/Os in flight
//!      n +------+                  +--------------  zfs_scan_vdev_limit
//!        |      |                  |                a leaf (resilver:
//!        |      |                  |                SCAN_WORKERS)
//!        |      |                  |
//!      1 +      +-+ +-+ +-+ +-+ +-+    one at a time, spaced by the delay
//!        |      | | | | | | | | | |
//!      0 +------+-+-+-+-+-+-+-+-+-+----------------> time
//!               ^ foreground       ^ zfs_scan_idle_ms after its last I/O
//! ```
//!
//! What counts as foreground is what someone waits for: a dataset's block
//! read from a device (not the MOS's, which the sync thread and the scan's
//! own walk read), a read-ahead of one, and an intent-log write. Txg-sync
//! writes do not count (as in OpenZFS, which leaves out the syncing txg's
//! I/O): the scan's own record is written in every txg, and the write
//! throttle already paces writers. A read the ARC serves does not count:
//! it reaches no device.
//!
//! Units: OpenZFS counted ticks (`zfs_scan_idle` = 50, `zfs_scrub_delay` =
//! 4, `zfs_resilver_delay` = 2, at 1000 Hz milliseconds); tarn counts
//! milliseconds with the same defaults. `zfs_scan_idle_ms` 0 turns the
//! back-off off; a delay of 0 turns it off for its kind of scan (it then
//! runs at full depth whatever the foreground does).
//!
//! The trade: under a steady foreground load a scan reads one extent
//! (≤ 1 MiB) per delay plus the extent's own time — a scrub that takes
//! seconds idle takes minutes beside a busy reader. OpenZFS made the same
//! trade, and it is why it dropped the delays once the scheduler's classes
//! could hold the scan back per device; here the devices may share a disk
//! the scheduler does not see.
//!
//! ## Bounds
//! - one wait per scan I/O of at most the delay (≤ 1 s by its range), in
//!   slices of at most `PACE_SLICE` so pause, cancel and close are seen;
//! - no memory beyond two words.
//!
//! ## Invariants
//! - while busy, at most one scan I/O is in flight (the turn holds the
//!   gate's lock for the I/O's length);
//! - while idle, the back-off adds no wait and no lock to a scan I/O.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

/// When foreground I/O last reached the pool's devices.
#[derive(Debug)]
pub struct ForegroundIo {
    epoch: Instant,
    /// Milliseconds since `epoch` + 1 of the last foreground I/O; 0: none
    /// yet.
    last: AtomicU64,
}

impl Default for ForegroundIo {
    fn default() -> Self {
        ForegroundIo { epoch: Instant::now(), last: AtomicU64::new(0) }
    }
}

impl ForegroundIo {
    /// Notes that foreground I/O is being issued now.
    pub fn note(&self) {
        // The store is skipped when the value is the same: many readers in
        // one millisecond touch the cache line once.
        let now = self.now_ms() + 1;
        if self.last.load(Ordering::Relaxed) != now {
            self.last.store(now, Ordering::Relaxed);
        }
    }

    /// Milliseconds since the pool opened (the back-off's clock).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// When foreground I/O was last issued (None: never since the pool
    /// opened).
    pub fn last_ms(&self) -> Option<u64> {
        self.last.load(Ordering::Relaxed).checked_sub(1)
    }
}

/// Whether a scan backs off at `now_ms`: foreground I/O at `last_fg_ms`
/// lies within `idle_ms`, and neither tunable is 0.
pub(crate) fn busy(now_ms: u64, last_fg_ms: Option<u64>, idle_ms: u64, delay_ms: u64) -> bool {
    idle_ms > 0 && delay_ms > 0 && last_fg_ms.is_some_and(|f| now_ms.saturating_sub(f) < idle_ms)
}

/// How long a backed-off scan I/O waits before it starts, given when the
/// previous one ended (None: none yet).
pub(crate) fn wait_ms(now_ms: u64, last_scan_end_ms: Option<u64>, delay_ms: u64) -> u64 {
    last_scan_end_ms.map_or(0, |end| (end + delay_ms).saturating_sub(now_ms))
}

/// The scan's side: one gate for all its workers, and how many I/Os went
/// through it.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    /// When the last backed-off scan I/O ended (the pool's clock).
    gate: Mutex<Option<u64>>,
    /// Scan I/Os issued backed off, since the pool opened.
    yielded: AtomicU64,
}

/// One backed-off scan I/O's turn: the gate is held until it drops, after
/// the I/O, which notes when it ended.
pub(crate) struct Turn<'a> {
    gate: MutexGuard<'a, Option<u64>>,
    clock: &'a ForegroundIo,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.gate = Some(self.clock.now_ms());
    }
}

impl Backoff {
    /// The gate, once it is free (other workers' backed-off I/Os done).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<u64>> {
        self.gate.lock()
    }

    /// Makes a turn of the held gate, counting it.
    pub(crate) fn turn<'a>(&'a self, gate: MutexGuard<'a, Option<u64>>, clock: &'a ForegroundIo) -> Turn<'a> {
        self.yielded.fetch_add(1, Ordering::Relaxed);
        Turn { gate, clock }
    }

    pub(crate) fn yielded(&self) -> u64 {
        self.yielded.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_only_within_the_idle_window_and_never_with_a_zero_tunable() {
        assert!(!busy(100, None, 50, 4), "no foreground I/O yet");
        assert!(busy(100, Some(100), 50, 4));
        assert!(busy(149, Some(100), 50, 4));
        assert!(!busy(150, Some(100), 50, 4), "the window is 50 ms");
        assert!(!busy(100, Some(100), 0, 4), "zfs_scan_idle_ms 0: off");
        assert!(!busy(100, Some(100), 50, 0), "a delay of 0: off");
        assert!(busy(90, Some(100), 50, 4), "a note ahead of the clock read counts as now");
    }

    #[test]
    fn a_backed_off_io_waits_the_delay_after_the_previous_one() {
        assert_eq!(wait_ms(10, None, 4), 0, "the first goes at once");
        assert_eq!(wait_ms(10, Some(8), 4), 2);
        assert_eq!(wait_ms(10, Some(2), 4), 0);
    }

    /// Simulates a scan of `workers` workers, each I/O taking `io_ms`,
    /// for `span_ms` of a fake clock, with foreground I/O every
    /// `fg_every_ms` (None: none); returns (scan I/Os issued, most in
    /// flight at once).
    fn simulate(workers: usize, io_ms: u64, span_ms: u64, fg_every_ms: Option<u64>, idle_ms: u64, delay_ms: u64) -> (u64, usize) {
        // Each worker: when its current I/O ends (None: idle, ready).
        let mut busy_until: Vec<Option<u64>> = vec![None; workers];
        let mut gate_end: Option<u64> = None;
        let mut gate_held_until: Option<u64> = None;
        let (mut issued, mut most) = (0u64, 0usize);
        let mut last_fg = None;
        for now in 0..span_ms {
            if let Some(every) = fg_every_ms {
                if now % every == 0 {
                    last_fg = Some(now);
                }
            }
            for w in busy_until.iter_mut() {
                if w.is_some_and(|end| end <= now) {
                    *w = None;
                }
            }
            if gate_held_until.is_some_and(|end| end <= now) {
                gate_end = gate_held_until.take();
            }
            for w in busy_until.iter_mut() {
                if w.is_some() {
                    continue;
                }
                if busy(now, last_fg, idle_ms, delay_ms) {
                    if gate_held_until.is_some() || wait_ms(now, gate_end, delay_ms) > 0 {
                        continue;
                    }
                    gate_held_until = Some(now + io_ms);
                }
                *w = Some(now + io_ms);
                issued += 1;
            }
            most = most.max(busy_until.iter().filter(|w| w.is_some()).count());
        }
        (issued, most)
    }

    #[test]
    fn with_foreground_io_recent_the_scan_issues_one_io_per_delay_at_most() {
        // 1 ms I/Os, 4 ms delay: one I/O every 5 ms at most.
        let (issued, most) = simulate(4, 1, 1000, Some(10), 50, 4);
        assert!(issued <= 1000 / 5 + 1, "{issued} scan I/Os in 1 s");
        assert!(issued >= 1000 / 5 - 1, "the scan still progresses: {issued}");
        assert_eq!(most, 1, "one at a time");
    }

    #[test]
    fn without_foreground_io_the_scan_runs_at_full_depth() {
        let (issued, most) = simulate(4, 1, 1000, None, 50, 4);
        assert_eq!(issued, 4000, "four workers, one 1 ms I/O each per ms");
        assert_eq!(most, 4);
        // Foreground I/O once, at 0: backed off for the window, then full.
        let (issued, _) = simulate(4, 1, 1000, Some(10_000), 50, 4);
        assert!((3800..4000).contains(&issued), "{issued}");
        // Off: the tunables at 0.
        assert_eq!(simulate(4, 1, 1000, Some(10), 0, 4).0, 4000);
        assert_eq!(simulate(4, 1, 1000, Some(10), 50, 0).0, 4000);
    }
}
