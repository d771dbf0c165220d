//! Per-device, per-class I/O statistics: what `zpool iostat -l -q -r -w`
//! shows, kept as lock-free counters and power-of-two histograms.
//!
//! For every class (sync read … trim) of every leaf: operations and bytes
//! issued to the device, and four histograms — *disk* latency (the device
//! call alone), *total* latency (from enqueue to completion, per caller
//! request, so queueing shows), *individual* request sizes (what callers
//! asked for) and *aggregated* operation sizes (device operations that
//! carried more than one request). Bucket `i` of a latency histogram holds
//! values in [2^i, 2^(i+1)) nanoseconds; of a size histogram, bytes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::queue::{IoClass, IO_CLASSES};

/// Buckets: 2^0 … 2^39 (latency up to ~18 minutes, sizes up to 1 TiB).
pub const BUCKETS: usize = 40;

#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum: AtomicU64::new(0), count: AtomicU64::new(0) }
    }
}

/// The bucket of `v`: floor(log2(v)), 0 for 0 and 1.
pub fn bucket_of(v: u64) -> usize {
    (63 - v.max(1).leading_zeros() as usize).min(BUCKETS - 1)
}

impl Histogram {
    pub fn record(&self, v: u64) {
        self.buckets[bucket_of(v)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistSnapshot {
        HistSnapshot {
            buckets: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum: self.sum.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's values at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistSnapshot {
    /// `buckets[i]`: values in [2^i, 2^(i+1)).
    pub buckets: Vec<u64>,
    pub sum: u64,
    pub count: u64,
}

impl HistSnapshot {
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &HistSnapshot) -> HistSnapshot {
        HistSnapshot {
            buckets: self.buckets.iter().enumerate().map(|(i, b)| b - earlier.buckets.get(i).copied().unwrap_or(0).min(*b)).collect(),
            sum: self.sum.saturating_sub(earlier.sum),
            count: self.count.saturating_sub(earlier.count),
        }
    }
}

/// Counters of one class on one leaf.
#[derive(Debug, Default)]
pub struct ClassIo {
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
    pub disk_ns: Histogram,
    pub total_ns: Histogram,
    pub ind_size: Histogram,
    pub agg_size: Histogram,
}

/// All classes of one leaf.
#[derive(Debug, Default)]
pub struct LeafIo {
    pub classes: [ClassIo; IO_CLASSES],
}

impl LeafIo {
    pub fn class(&self, c: IoClass) -> &ClassIo {
        &self.classes[c.index()]
    }

    pub fn snapshot(&self) -> Vec<ClassIoSnapshot> {
        IoClass::ALL
            .iter()
            .map(|&c| {
                let s = self.class(c);
                ClassIoSnapshot {
                    class: class_name(c).to_string(),
                    ops: s.ops.load(Ordering::Relaxed),
                    bytes: s.bytes.load(Ordering::Relaxed),
                    disk_ns: s.disk_ns.snapshot(),
                    total_ns: s.total_ns.snapshot(),
                    ind_size: s.ind_size.snapshot(),
                    agg_size: s.agg_size.snapshot(),
                }
            })
            .collect()
    }
}

/// The name `zpool iostat` gives a class.
pub fn class_name(c: IoClass) -> &'static str {
    match c {
        IoClass::SyncRead => "sync_read",
        IoClass::SyncWrite => "sync_write",
        IoClass::AsyncRead => "async_read",
        IoClass::AsyncWrite => "async_write",
        IoClass::Scrub => "scrub",
        IoClass::Trim => "trim",
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClassIoSnapshot {
    pub class: String,
    pub ops: u64,
    pub bytes: u64,
    pub disk_ns: HistSnapshot,
    pub total_ns: HistSnapshot,
    pub ind_size: HistSnapshot,
    pub agg_size: HistSnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(4095), 11);
        assert_eq!(bucket_of(4096), 12);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        let h = Histogram::default();
        h.record(4096);
        h.record(4096);
        h.record(1 << 20);
        let s = h.snapshot();
        assert_eq!(s.buckets[12], 2);
        assert_eq!(s.buckets[20], 1);
        assert_eq!(s.count, 3);
        assert_eq!(s.mean(), Some((8192 + (1 << 20)) as f64 / 3.0));
        let later = {
            h.record(8);
            h.snapshot()
        };
        let d = later.since(&s);
        assert_eq!(d.count, 1);
        assert_eq!(d.buckets[3], 1);
    }
}
