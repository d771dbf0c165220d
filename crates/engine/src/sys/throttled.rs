//! A device wrapper that limits bandwidth and adds latency, so a benchmark
//! can overdrive a "disk" of known speed (the write-throttle experiment)
//! whatever the real disk under it can do.
//!
//! Model: a single server. An operation of n bytes starts when the device is
//! free (`busy_until`), takes n / bandwidth, and completes `latency` after
//! that; the caller sleeps until then. Concurrent callers therefore share the
//! bandwidth rather than each getting all of it.

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
    busy_until: Mutex<Instant>,
}

impl ThrottledDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, bytes_per_sec: u64, latency: Duration) -> Self {
        ThrottledDevice { inner, bytes_per_sec: bytes_per_sec.max(1), latency, busy_until: Mutex::new(Instant::now()) }
    }

    fn wait(&self, bytes: usize) {
        let service = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec as f64);
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
}
