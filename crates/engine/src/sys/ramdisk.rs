//! `RamDevice`: a lean, sparse in-memory disk for simulated pools
//! (`tarn bench --simulate`), where the device must cost the CPU about as
//! little as a real disk's DMA does.
//!
//! Why not `FaultDevice`: it models a volatile write cache for crash tests,
//! so each write is copied twice (the pending list and the newest pages,
//! 4 KiB copy-on-write pages in a hash map) under one lock per device.
//! That is the right price for a crash test and the wrong one for a
//! benchmark whose subject is the engine: on 2 cores the device's own
//! copying would be measured as the pool's.
//!
//! Model: the device's bytes are fixed chunks of [`CHUNK`] bytes, each
//! allocated (zeroed) the first time a write touches it; absent chunks read
//! as zeros. A write is visible and durable at once (`flush` does nothing):
//! there is no power to lose. Each chunk has its own lock, so concurrent
//! I/O to different places of one device does not serialise.
//!
//! Memory is bounded: every device of a simulated pool draws its chunks
//! from one shared [`RamBudget`]; a write that needs a chunk past the
//! budget fails (ENOSPC, naming the device and the budget) instead of
//! taking the host's memory — the pool then faults the device as it would
//! a full disk.
//!
//! `populate` allocates and touches every chunk up front. A benchmark
//! wants that: the first touch of fresh memory costs the kernel a page
//! fault and a zeroing (in a VM, the hypervisor's allocation too), a cost
//! a real disk does not have; measured on this project's 2-core VM it was
//! a third of the CPU of a simulated sequential write.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::device::{check_io, BlockDevice};

/// Allocation unit of a `RamDevice` (a multiple of the 512-byte sector).
pub const CHUNK: usize = 256 << 10;

/// Bytes of memory the devices sharing it may hold between them.
#[derive(Debug)]
pub struct RamBudget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
}

impl RamBudget {
    pub fn new(limit_bytes: u64) -> Arc<RamBudget> {
        Arc::new(RamBudget { limit_bytes, used_bytes: AtomicU64::new(0) })
    }

    /// Bytes the devices hold now.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Takes `n` bytes of the budget, or refuses without taking any.
    fn take(&self, n: u64) -> bool {
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(n).filter(|&t| t <= self.limit_bytes))
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        let before = self.used_bytes.fetch_sub(n, Ordering::AcqRel);
        assert!(before >= n, "a RAM budget gave back {} bytes of {} taken", n, before);
    }
}

/// One chunk of a device: absent until first written.
type Chunk = RwLock<Option<Box<[u8]>>>;

/// A sparse in-memory `BlockDevice` (see the module docs).
pub struct RamDevice {
    name: String,
    size_bytes: u64,
    chunks: Box<[Chunk]>,
    budget: Arc<RamBudget>,
}

impl RamDevice {
    /// A zero-filled device of `size_bytes` (a multiple of 512, at most 1 TiB
    /// so the chunk table stays small) drawing memory from `budget`.
    pub fn new(name: impl Into<String>, size_bytes: u64, budget: Arc<RamBudget>) -> RamDevice {
        assert!(size_bytes.is_multiple_of(512), "RamDevice size {} is not a multiple of 512", size_bytes);
        assert!(size_bytes <= 1 << 40, "RamDevice size {} is past 1 TiB", size_bytes);
        let n = size_bytes.div_ceil(CHUNK as u64) as usize;
        RamDevice { name: name.into(), size_bytes, chunks: (0..n).map(|_| RwLock::new(None)).collect(), budget }
    }

    /// Allocates every chunk and touches each of its pages (module docs).
    pub fn populate(&self) -> io::Result<()> {
        for i in 0..self.chunks.len() {
            let mut slot = self.chunks[i].write();
            if slot.is_some() {
                continue;
            }
            if !self.budget.take(CHUNK as u64) {
                return Err(self.out_of_budget());
            }
            let mut c = vec![0u8; CHUNK].into_boxed_slice();
            for page in c.chunks_mut(4096) {
                // SAFETY: a write of a byte the slice owns. Volatile, so the
                // store that faults the page in is not dropped as redundant
                // on memory the allocator returned zeroed.
                unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
            }
            *slot = Some(c);
        }
        Ok(())
    }

    /// Bytes of memory this device holds.
    pub fn resident_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| c.read().is_some()).count() as u64 * CHUNK as u64
    }

    /// Calls `f(chunk index, offset in chunk, range of the caller's buffer)`
    /// for each chunk `[offset, offset + len)` covers, in order.
    fn each_chunk(offset: u64, len: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>) -> io::Result<()>) -> io::Result<()> {
        let mut done = 0;
        while done < len {
            let pos = offset + done as u64;
            let (index, at) = ((pos / CHUNK as u64) as usize, (pos % CHUNK as u64) as usize);
            let n = (CHUNK - at).min(len - done);
            f(index, at, done..done + n)?;
            done += n;
        }
        Ok(())
    }

    fn out_of_budget(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{}: the simulated devices' memory budget of {} bytes is used up ({} held)",
                self.name,
                self.budget.limit_bytes(),
                self.budget.used_bytes()
            ),
        )
    }
}

impl BlockDevice for RamDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_io(&self.name, "read", self.size_bytes, offset, buf.len())?;
        Self::each_chunk(offset, buf.len(), |i, at, r| {
            let n = r.len();
            match &*self.chunks[i].read() {
                Some(c) => buf[r].copy_from_slice(&c[at..at + n]),
                None => buf[r].fill(0),
            }
            Ok(())
        })
    }

    /// All or nothing: every chunk the write touches is allocated before
    /// any byte is copied, so a write refused for want of memory leaves the
    /// device as it was (a fresh chunk reads as the zeros it replaced).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_io(&self.name, "write", self.size_bytes, offset, buf.len())?;
        Self::each_chunk(offset, buf.len(), |i, _, _| {
            let mut slot = self.chunks[i].write();
            if slot.is_none() {
                if !self.budget.take(CHUNK as u64) {
                    return Err(self.out_of_budget());
                }
                *slot = Some(vec![0u8; CHUNK].into_boxed_slice());
            }
            Ok(())
        })?;
        Self::each_chunk(offset, buf.len(), |i, at, r| {
            let n = r.len();
            let mut slot = self.chunks[i].write();
            let c = slot.as_mut().expect("every chunk of the write was allocated first, and chunks are never freed");
            c[at..at + n].copy_from_slice(&buf[r]);
            Ok(())
        })
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

impl Drop for RamDevice {
    fn drop(&mut self) {
        let held = self.chunks.iter_mut().filter_map(|c| c.get_mut().as_ref()).count() as u64;
        self.budget.give_back(held * CHUNK as u64);
    }
}

impl std::fmt::Debug for RamDevice {
    /// Never prints data.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RamDevice").field("name", &self.name).field("size_bytes", &self.size_bytes).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_writes_across_chunks_and_zeros_elsewhere() {
        let budget = RamBudget::new(1 << 20);
        let d = RamDevice::new("ram0", 4 << 20, budget.clone());
        let data: Vec<u8> = (0..CHUNK + 4096).map(|i| (i % 251) as u8).collect();
        let at = CHUNK as u64 - 2048;
        d.write_at(&data, at).unwrap();
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, at).unwrap();
        assert_eq!(back, data);
        let mut zeros = vec![1u8; 4096];
        d.read_at(&mut zeros, 3 << 20).unwrap();
        assert!(zeros.iter().all(|&b| b == 0));
        // The write straddles three chunks.
        assert_eq!((d.resident_bytes(), budget.used_bytes()), (3 * CHUNK as u64, 3 * CHUNK as u64));
        drop(d);
        assert_eq!(budget.used_bytes(), 0, "a dropped device gives its memory back");
    }

    #[test]
    fn populate_takes_the_whole_device_once_and_keeps_the_data() {
        let budget = RamBudget::new(8 * CHUNK as u64);
        let d = RamDevice::new("ram3", 4 * CHUNK as u64 - 512, budget.clone());
        d.write_at(&[5u8; 512], 512).unwrap();
        d.populate().unwrap();
        assert_eq!(budget.used_bytes(), 4 * CHUNK as u64);
        let mut b = [0u8; 1024];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!((&b[..512], &b[512..]), (&[0u8; 512][..], &[5u8; 512][..]));
        let small = RamDevice::new("ram4", 16 * CHUNK as u64, budget);
        assert_eq!(small.populate().unwrap_err().kind(), io::ErrorKind::StorageFull);
    }

    #[test]
    fn a_write_past_the_budget_fails_and_changes_nothing() {
        let budget = RamBudget::new(CHUNK as u64);
        let d = RamDevice::new("ram1", 4 << 20, budget.clone());
        d.write_at(&[7u8; 512], 0).unwrap();
        let e = d.write_at(&[9u8; 512], CHUNK as u64).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(e.to_string().contains("ram1") && e.to_string().contains("memory budget"), "{}", e);
        assert_eq!(budget.used_bytes(), CHUNK as u64);
        let mut b = [1u8; 512];
        d.read_at(&mut b, CHUNK as u64).unwrap();
        assert_eq!(b, [0u8; 512]);
    }

    #[test]
    fn the_device_contract_holds() {
        let d = RamDevice::new("ram2", 8192, RamBudget::new(1 << 20));
        assert_eq!(d.write_at(&[0u8; 512], 8192).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(d.read_at(&mut [0u8; 100], 0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
