//! A device wrapper that limits bandwidth and adds latency, so a benchmark
//! can overdrive a "disk" of known speed (the write-throttle experiment)
//! whatever the real disk under it can do.
//!
//! Model: a single server. An operation of n bytes starts when the device is
//! free (`busy_until`), occupies it for `op_time + n / bandwidth`, and
//! completes `latency` after that; the caller sleeps until then. Concurrent
//! callers therefore share the bandwidth rather than each getting all of it.
//!
//! `op_time` (1 / the device's IOPS, `with_iops`) is what each command costs
//! the device whatever its size — why small random reads reach a drive's
//! IOPS limit long before its bandwidth. `latency` does not occupy the
//! server: an NVMe drive has many commands in flight, so a command's
//! latency overlaps the others' transfers (the fault device's model, where
//! the latency is part of the service time, is a drive with one command in
//! flight).

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::device::BlockDevice;

#[derive(Debug)]
pub struct ThrottledDevice {
    inner: Arc<dyn BlockDevice>,
    bytes_per_sec: u64,
    latency: Duration,
    op_time: Duration,
    busy_until: Mutex<Instant>,
}

impl ThrottledDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, bytes_per_sec: u64, latency: Duration) -> Self {
        ThrottledDevice { inner, bytes_per_sec: bytes_per_sec.max(1), latency, op_time: Duration::ZERO, busy_until: Mutex::new(Instant::now()) }
    }

    /// Each operation also occupies the device for 1 / `iops` seconds.
    pub fn with_iops(mut self, iops: u64) -> Self {
        self.op_time = Duration::from_secs_f64(1.0 / iops.max(1) as f64);
        self
    }

    fn wait(&self, bytes: usize) {
        let service = self.op_time + Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
        let done = {
            let mut b = self.busy_until.lock();
            let start = (*b).max(Instant::now());
            *b = start + service;
            start + service + self.latency
        };
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
    }
}

impl BlockDevice for ThrottledDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.wait(buf.len());
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.wait(buf.len());
        self.inner.write_at(buf, offset)
    }
    fn readv_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.wait(bufs.iter().map(|b| b.len()).sum());
        self.inner.readv_at(bufs, offset)
    }
    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.wait(bufs.iter().map(|b| b.len()).sum());
        self.inner.writev_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn health(&self) -> super::device::Health {
        self.inner.health()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::FaultDevice;

    #[test]
    fn shares_bandwidth_between_threads() {
        let d = Arc::new(ThrottledDevice::new(Arc::new(FaultDevice::new(1 << 24, 1)), 40 << 20, Duration::ZERO));
        let start = Instant::now();
        let hs: Vec<_> = (0..2)
            .map(|t| {
                let d = d.clone();
                std::thread::spawn(move || {
                    let buf = vec![1u8; 1 << 20];
                    for i in 0..2u64 {
                        d.write_at(&buf, (t * 2 + i) << 20).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // 4 MiB at 40 MiB/s is 100 ms however many threads share it.
        assert!(start.elapsed() >= Duration::from_millis(95), "{:?}", start.elapsed());
    }

    #[test]
    fn each_operation_costs_its_op_time() {
        // 200 IOPS: 40 ops of 512 bytes take at least 200 ms at a bandwidth
        // that would move them in under a millisecond.
        let d = ThrottledDevice::new(Arc::new(FaultDevice::new(1 << 20, 1)), 1 << 30, Duration::ZERO).with_iops(200);
        let start = Instant::now();
        for i in 0..40u64 {
            d.read_at(&mut [0u8; 512], i * 512).unwrap();
        }
        assert!(start.elapsed() >= Duration::from_millis(195), "{:?}", start.elapsed());
    }
}
