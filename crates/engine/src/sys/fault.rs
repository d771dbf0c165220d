//! `FaultDevice`: an in-memory disk with a volatile write cache that can lose
//! power, tear and reorder writes, rot bits and throttle itself on command.
//!
//! Why: tarn claims that a pool survives power loss at any instant and detects
//! (and, with redundancy, repairs) silent corruption. Those claims can only be
//! tested if the test decides what the disk kept. With every fault rate at zero
//! this is simply the in-memory device: no sleeps, no RNG calls.
//!
//! # Disk model
//! * Storage is sparse: 4 KiB pages in a `HashMap`, absent pages read as
//!   zeros, so an 8 GiB device costs only what is written. Pages are
//!   reference-counted and copied on write, so `crash()` and
//!   `snapshot_durable()` copy pointers, not data.
//! * A completed write lands in the *volatile cache*: it is kept in issue order
//!   in a pending list and reads see it (pending overlaid on durable).
//!   `flush()` makes every pending write durable, like a cache flush / FUA.
//! * All I/O is sector-aligned (512 B), as the `BlockDevice` contract demands.
//!
//! # Faults
//! | fault | configured by | what happens | why it is modelled |
//! |---|---|---|---|
//! | power cut | `power_cut_after_writes: Some(n)` | the n-th write call (`write_at`/`writev_at`, counted from the last `set_config`) fails with "power cut" and is not applied; from then on every read, write and flush fails | the pool must cope with I/O stopping at any instant; follow with `crash()` to see what survived |
//! | lost / reordered writes | `crash(seed)` | the new image = durable data + a random subset of the pending writes, applied in random order | a drive's volatile cache gives no ordering or persistence guarantee before a flush |
//! | torn write | `crash(seed)` | a chosen pending write may be applied only for a random subset of its 512 B sectors; each sector is wholly old or wholly new | 512 B sectors are the only unit a disk writes atomically |
//! | read error | `read_error_rate` | the read fails (EIO), nothing is returned | latent sector errors / unreadable media |
//! | read bit flip | `read_bitflip_rate` | one random bit of the *returned* data is flipped, stored data is intact (a retry may succeed) | bus / DMA / controller corruption |
//! | write bit flip | `write_bitflip_rate` | one random bit of the *stored* data is flipped; the write reports success | bit rot / firmware bugs: silent corruption checksums must catch |
//! | misdirected write | `misdirect_rate` | the whole write lands at another random sector-aligned offset; the intended range keeps its old data; success is reported | firmware/addressing bugs ("phantom" and misdirected writes) that only block-pointer checksums detect |
//! | refused writes | `refuse_writes: Some(errno)` | every write and flush fails with that errno (EIO, EROFS, ENOSPC …) and changes nothing; reads still work | a disk that went read-only, a full file system under an image file: the pool must fault the device and suspend, never acknowledge a write it could not keep |
//! | slow device | `bandwidth_bytes_per_sec`, `latency_us` | each op is served by a single-server queue: it starts at max(now, busy_until) and ends `bytes/bandwidth + latency` later; the caller sleeps until then | concurrent callers must *share* bandwidth, as on a real disk, so throughput tests and throttling are meaningful |
//!
//! Zones: `FaultConfig::zones` restrict the rate-based faults to offset ranges
//! (labels, uberblock ring, metadata, data …, computed by the tests). An op that
//! overlaps a zone uses the rates of the *first* such zone, and a bit flip lands
//! inside the overlap; an op that overlaps no zone uses the global rates. So "only
//! metadata rots" is: global rates 0, one zone over the metadata range.
//!
//! Every random decision comes from a seeded splitmix64 generator, so a failing
//! test reproduces exactly from its seed (given the same sequence of calls).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::device::{check_io, total_len, BlockDevice, SECTOR_SIZE};

/// Granularity of the sparse in-memory image.
const PAGE: usize = 4096;
const SECTOR: usize = SECTOR_SIZE as usize;

/// Fault knobs; everything is off by default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// The n-th write after this config is set (1-based; 0 acts like 1) and
    /// every later op fail: the device has lost power.
    pub power_cut_after_writes: Option<u64>,
    /// Probability that a read fails with EIO.
    pub read_error_rate: f64,
    /// Probability that a read returns data with one bit flipped.
    pub read_bitflip_rate: f64,
    /// Probability that a write stores data with one bit flipped.
    pub write_bitflip_rate: f64,
    /// Probability that a write lands at a different sector-aligned offset.
    pub misdirect_rate: f64,
    /// Throughput limit shared by all callers; `None` or `Some(0)` = unlimited.
    pub bandwidth_bytes_per_sec: Option<u64>,
    /// Fixed service time added to every op, in microseconds.
    pub latency_us: u64,
    /// Every write and flush fails with this errno (reads still work).
    pub refuse_writes: Option<i32>,
    /// Offset ranges with their own rates (see the module docs).
    pub zones: Vec<FaultZone>,
}

/// Fault rates that apply to ops overlapping `[start, end)` instead of the
/// global rates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultZone {
    pub start: u64,
    pub end: u64,
    pub read_error_rate: f64,
    pub read_bitflip_rate: f64,
    pub write_bitflip_rate: f64,
    pub misdirect_rate: f64,
}

/// Operation and fault counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Successful read calls (vectored calls count once) and their bytes.
    pub reads: u64,
    pub bytes_read: u64,
    /// Accepted write calls (vectored calls count once) and their bytes.
    pub writes: u64,
    pub bytes_written: u64,
    pub flushes: u64,
    /// Writes in the volatile cache right now.
    pub pending_writes: u64,
    pub injected_read_errors: u64,
    pub injected_read_bitflips: u64,
    pub injected_write_bitflips: u64,
    pub injected_misdirects: u64,
    /// Ops refused because the device lost power or crashed (including the
    /// write that triggered the power cut).
    pub dead_op_failures: u64,
    /// Writes and flushes refused (`refuse_writes`).
    pub refused_writes: u64,
}

/// splitmix64: tiny, fast, and good enough for fault decisions (here and
/// in `io::inject`, the live pool's injection handlers).
#[derive(Clone, Debug)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n); n > 0. The multiply-shift bias is below 2^-64 * n.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `p`; draws nothing when `p` is 0 or 1, so a
    /// fault-free device never touches the generator.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.next_f64() < p)
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// A sparse byte image in copy-on-write pages; absent pages are zeros.
#[derive(Clone, Default)]
struct Image {
    pages: HashMap<u64, Arc<[u8; PAGE]>>,
}

impl Image {
    fn page(&self, index: u64) -> Option<&[u8; PAGE]> {
        self.pages.get(&index).map(|p| &**p)
    }

    /// The page, made private to this image (copied if shared with a snapshot).
    fn page_mut(&mut self, index: u64, init: impl FnOnce() -> Arc<[u8; PAGE]>) -> &mut [u8; PAGE] {
        Arc::make_mut(self.pages.entry(index).or_insert_with(init))
    }

    fn write(&mut self, data: &[u8], offset: u64) {
        for_each_page(offset, data.len(), |index, in_page, at, n| {
            let page = self.page_mut(index, zero_page);
            page[in_page..in_page + n].copy_from_slice(&data[at..at + n]);
        });
    }

    fn flip_bit(&mut self, byte: u64, mask: u8) {
        let page = self.page_mut(byte / PAGE as u64, zero_page);
        page[(byte % PAGE as u64) as usize] ^= mask;
    }
}

fn zero_page() -> Arc<[u8; PAGE]> {
    Arc::new([0u8; PAGE])
}

/// Calls `f(page_index, offset_in_page, offset_in_buffer, bytes)` for each
/// page-sized piece of `[offset, offset + len)`.
fn for_each_page(offset: u64, len: usize, mut f: impl FnMut(u64, usize, usize, usize)) {
    let mut at = 0;
    while at < len {
        let pos = offset + at as u64;
        let in_page = (pos % PAGE as u64) as usize;
        let n = (PAGE - in_page).min(len - at);
        f(pos / PAGE as u64, in_page, at, n);
        at += n;
    }
}

/// A completed but not yet flushed write, as the drive's cache holds it.
#[derive(Clone, Debug)]
struct PendingWrite {
    offset: u64,
    data: Vec<u8>,
}

/// Fault rates for one op, and the buffer range a bit flip may hit.
struct OpFaults {
    read_error: f64,
    read_bitflip: f64,
    write_bitflip: f64,
    misdirect: f64,
    /// `[lo, hi)` relative to the op's buffer.
    flip_range: (usize, usize),
}

struct State {
    config: FaultConfig,
    rng: Rng,
    durable: Image,
    /// Newest content of every page touched by a pending write; reads look
    /// here first. Moved into `durable` by `flush`.
    dirty: Image,
    pending: Vec<PendingWrite>,
    writes_since_config: u64,
    /// Why the device is off, once it is.
    dead: Option<&'static str>,
    stats: FaultStats,
}

impl State {
    fn new(seed: u64, durable: Image) -> State {
        State {
            config: FaultConfig::default(),
            rng: Rng(seed),
            durable,
            dirty: Image::default(),
            pending: Vec::new(),
            writes_since_config: 0,
            dead: None,
            stats: FaultStats::default(),
        }
    }

    /// Reads the newest data: pending writes overlaid on durable data.
    fn read_current(&self, buf: &mut [u8], offset: u64) {
        let len = buf.len();
        for_each_page(offset, len, |index, in_page, at, n| {
            let page = self.dirty.page(index).or_else(|| self.durable.page(index));
            match page {
                Some(page) => buf[at..at + n].copy_from_slice(&page[in_page..in_page + n]),
                None => buf[at..at + n].fill(0),
            }
        });
    }

    /// Puts a write into the volatile cache.
    fn cache_write(&mut self, data: Vec<u8>, offset: u64) {
        let durable = &self.durable;
        for_each_page(offset, data.len(), |index, in_page, at, n| {
            let init = || durable.pages.get(&index).cloned().unwrap_or_else(zero_page);
            let page = self.dirty.page_mut(index, init);
            page[in_page..in_page + n].copy_from_slice(&data[at..at + n]);
        });
        self.pending.push(PendingWrite { offset, data });
    }

    fn faults_for(&self, offset: u64, len: usize) -> OpFaults {
        let end = offset + len as u64;
        let c = &self.config;
        let zone = c
            .zones
            .iter()
            .find(|z| z.start < end && offset < z.end && len > 0);
        match zone {
            Some(z) => OpFaults {
                read_error: z.read_error_rate,
                read_bitflip: z.read_bitflip_rate,
                write_bitflip: z.write_bitflip_rate,
                misdirect: z.misdirect_rate,
                flip_range: (
                    (z.start.max(offset) - offset) as usize,
                    (z.end.min(end) - offset) as usize,
                ),
            },
            None => OpFaults {
                read_error: c.read_error_rate,
                read_bitflip: c.read_bitflip_rate,
                write_bitflip: c.write_bitflip_rate,
                misdirect: c.misdirect_rate,
                flip_range: (0, len),
            },
        }
    }

    /// Flips one random bit of `buf[lo..hi]` (no-op if the range is empty).
    fn flip_random_bit(&mut self, buf: &mut [u8], (lo, hi): (usize, usize)) -> bool {
        if lo >= hi {
            return false;
        }
        let byte = lo + self.rng.below((hi - lo) as u64) as usize;
        buf[byte] ^= 1 << self.rng.below(8);
        true
    }

    /// A random sector-aligned offset, different from `offset`, where `len`
    /// bytes fit in a device of `size`; `None` if there is no other place.
    fn misdirect_target(&mut self, offset: u64, len: usize, size: u64) -> Option<u64> {
        let slots = (size - len as u64) / SECTOR_SIZE + 1;
        if slots < 2 {
            return None;
        }
        let own = offset / SECTOR_SIZE;
        let mut slot = self.rng.below(slots - 1);
        if slot >= own {
            slot += 1; // skip the intended slot
        }
        Some(slot * SECTOR_SIZE)
    }

    /// Flips bit `mask` of byte `byte` in every stored view: durable data,
    /// the newest (cached) data and the pending writes a crash may apply.
    fn flip_stored_bit(&mut self, byte: u64, mask: u8) {
        self.durable.flip_bit(byte, mask);
        if self.dirty.pages.contains_key(&(byte / PAGE as u64)) {
            self.dirty.flip_bit(byte, mask);
        }
        for w in &mut self.pending {
            if (w.offset..w.offset + w.data.len() as u64).contains(&byte) {
                w.data[(byte - w.offset) as usize] ^= mask;
            }
        }
    }

    /// The service time of an op of `bytes`, or `None` when unthrottled.
    fn service_time(&self, bytes: usize) -> Option<Duration> {
        let bandwidth = self.config.bandwidth_bytes_per_sec.filter(|&b| b > 0);
        if bandwidth.is_none() && self.config.latency_us == 0 {
            return None;
        }
        let transfer = bandwidth.map_or(Duration::ZERO, |b| {
            Duration::from_secs_f64(bytes as f64 / b as f64)
        });
        Some(transfer + Duration::from_micros(self.config.latency_us))
    }
}

/// An in-memory, fault-injecting `BlockDevice` (see the module docs).
pub struct FaultDevice {
    name: String,
    size: u64,
    seed: u64,
    state: Mutex<State>,
    /// When the single simulated server is free again (bandwidth model).
    /// Separate from `state` so sleeping callers do not block other ops' data.
    busy_until: Mutex<Instant>,
}

impl FaultDevice {
    /// A zero-filled device of `size_bytes` (a multiple of 512) whose random
    /// decisions all derive from `seed`. No faults are configured. Panics if
    /// the size is not a multiple of 512 (test misuse).
    pub fn new(size_bytes: u64, seed: u64) -> FaultDevice {
        FaultDevice::from_image(
            format!("fault-device-{seed}"),
            size_bytes,
            Image::default(),
            seed,
        )
    }

    fn from_image(name: String, size: u64, image: Image, seed: u64) -> FaultDevice {
        assert!(
            size.is_multiple_of(SECTOR_SIZE),
            "FaultDevice size {size} is not a multiple of {SECTOR_SIZE}"
        );
        FaultDevice {
            name,
            size,
            seed,
            state: Mutex::new(State::new(seed, image)),
            busy_until: Mutex::new(Instant::now()),
        }
    }

    /// Renames the device (the name appears in every error message).
    pub fn with_name(mut self, name: impl Into<String>) -> FaultDevice {
        self.name = name.into();
        self
    }

    /// Replaces the fault configuration; restarts the power-cut write count.
    /// A dead device stays dead.
    pub fn set_config(&self, config: FaultConfig) {
        let mut st = self.state.lock();
        st.config = config;
        st.writes_since_config = 0;
    }

    /// The current fault configuration.
    pub fn config(&self) -> FaultConfig {
        self.state.lock().config.clone()
    }

    /// Counters since creation.
    pub fn stats(&self) -> FaultStats {
        let st = self.state.lock();
        let mut stats = st.stats.clone();
        stats.pending_writes = st.pending.len() as u64;
        stats
    }

    /// True once the power was cut or `crash` was called.
    pub fn is_dead(&self) -> bool {
        self.state.lock().dead.is_some()
    }

    /// Simulates power loss: returns a new device whose content is the durable
    /// data plus a seed-chosen subset of the pending writes, applied in a
    /// seed-chosen order, each whole or torn at 512 B sector granularity. This
    /// device becomes dead; `crash` may be called on it again (e.g. with other
    /// seeds) to explore other outcomes of the same power loss. The new device
    /// has no pending writes and no faults configured.
    pub fn crash(&self, seed: u64) -> FaultDevice {
        let mut st = self.state.lock();
        st.dead
            .get_or_insert("device crashed (power lost; use the image crash() returned)");
        let mut rng = Rng(seed);
        // Extremes are interesting, so they get their own share of seeds.
        let keep_p = match rng.below(8) {
            0 => 0.0,
            1 => 1.0,
            _ => rng.next_f64(),
        };
        let torn_p = match rng.below(4) {
            0 => 0.0,
            _ => rng.next_f64(),
        };
        let mut survivors: Vec<&PendingWrite> = st
            .pending
            .iter()
            .filter(|_| rng.next_f64() < keep_p)
            .collect();
        rng.shuffle(&mut survivors);
        let mut image = st.durable.clone();
        for w in survivors {
            if rng.next_f64() < torn_p {
                for (i, sector) in w.data.chunks(SECTOR).enumerate() {
                    if rng.next_u64() & 1 == 1 {
                        image.write(sector, w.offset + (i * SECTOR) as u64);
                    }
                }
            } else {
                image.write(&w.data, w.offset);
            }
        }
        let name = format!("{}-crash-{seed}", self.name);
        FaultDevice::from_image(name, self.size, image, seed)
    }

    /// A new device holding only this device's durable data (no pending
    /// writes, no faults); this device is unaffected.
    pub fn snapshot_durable(&self) -> FaultDevice {
        let image = self.state.lock().durable.clone();
        let name = format!("{}-snapshot", self.name);
        FaultDevice::from_image(name, self.size, image, self.seed)
    }

    /// Damages stored data: flips one seed-chosen bit in every 512 B sector
    /// that `[offset, offset + len)` touches (inside the range), in the durable
    /// data, the cached data and the pending writes alike. Works on dead
    /// devices too. Panics if the range is outside the device (test misuse).
    pub fn corrupt(&self, offset: u64, len: u64, seed: u64) {
        let end = offset.checked_add(len).filter(|&e| e <= self.size);
        let Some(end) = end else {
            panic!(
                "{}: corrupt({offset}, {len}) is outside the device ({} bytes)",
                self.name, self.size
            );
        };
        let mut st = self.state.lock();
        let mut rng = Rng(seed);
        let mut sector = offset / SECTOR_SIZE * SECTOR_SIZE;
        while sector < end {
            let lo = sector.max(offset);
            let hi = (sector + SECTOR_SIZE).min(end);
            let byte = lo + rng.below(hi - lo);
            let mask = 1u8 << rng.below(8);
            st.flip_stored_bit(byte, mask);
            sector += SECTOR_SIZE;
        }
    }

    fn dead_error(&self, st: &mut State) -> io::Result<()> {
        match st.dead {
            None => Ok(()),
            Some(why) => {
                st.stats.dead_op_failures += 1;
                Err(io::Error::other(format!("{}: {why}", self.name)))
            }
        }
    }

    fn read_locked(&self, st: &mut State, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.dead_error(st)?;
        check_io(&self.name, "read", self.size, offset, buf.len())?;
        let faults = st.faults_for(offset, buf.len());
        if st.rng.chance(faults.read_error) {
            st.stats.injected_read_errors += 1;
            return Err(io::Error::other(format!(
                "{}: injected read error (EIO) reading {} bytes at offset {offset}",
                self.name,
                buf.len()
            )));
        }
        st.read_current(buf, offset);
        if st.rng.chance(faults.read_bitflip) && st.flip_random_bit(buf, faults.flip_range) {
            st.stats.injected_read_bitflips += 1;
        }
        st.stats.reads += 1;
        st.stats.bytes_read += buf.len() as u64;
        Ok(())
    }

    /// The configured refusal of writes and flushes, if any.
    fn refused(&self, st: &mut State, op: &str) -> io::Result<()> {
        match st.config.refuse_writes {
            None => Ok(()),
            Some(errno) => {
                st.stats.refused_writes += 1;
                let e = io::Error::from_raw_os_error(errno);
                Err(io::Error::new(e.kind(), format!("{}: {op}: {e}", self.name)))
            }
        }
    }

    fn write_locked(&self, st: &mut State, mut data: Vec<u8>, offset: u64) -> io::Result<()> {
        self.dead_error(st)?;
        let len = data.len();
        check_io(&self.name, "write", self.size, offset, len)?;
        self.refused(st, "write")?;
        st.writes_since_config += 1;
        if let Some(n) = st.config.power_cut_after_writes {
            if st.writes_since_config >= n.max(1) {
                st.dead = Some("power cut (device is off)");
                return self.dead_error(st);
            }
        }
        let faults = st.faults_for(offset, len);
        if st.rng.chance(faults.write_bitflip) && st.flip_random_bit(&mut data, faults.flip_range) {
            st.stats.injected_write_bitflips += 1;
        }
        let mut target = offset;
        if st.rng.chance(faults.misdirect) {
            if let Some(elsewhere) = st.misdirect_target(offset, len, self.size) {
                target = elsewhere;
                st.stats.injected_misdirects += 1;
            }
        }
        if len > 0 {
            st.cache_write(data, target);
        }
        st.stats.writes += 1;
        st.stats.bytes_written += len as u64;
        Ok(())
    }

    /// Occupies the simulated server for `service` and sleeps until this op's
    /// turn is over, so concurrent callers share the bandwidth.
    fn wait_for_service(&self, service: Option<Duration>) {
        let Some(service) = service else { return };
        let end = {
            let mut busy = self.busy_until.lock();
            let start = (*busy).max(Instant::now());
            *busy = start + service;
            *busy
        };
        let now = Instant::now();
        if end > now {
            std::thread::sleep(end - now);
        }
    }

    fn write_owned(&self, data: Vec<u8>, offset: u64) -> io::Result<()> {
        let len = data.len();
        let service = {
            let mut st = self.state.lock();
            self.write_locked(&mut st, data, offset)?;
            st.service_time(len)
        };
        self.wait_for_service(service);
        Ok(())
    }
}

impl BlockDevice for FaultDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let service = {
            let mut st = self.state.lock();
            self.read_locked(&mut st, buf, offset)?;
            st.service_time(buf.len())
        };
        self.wait_for_service(service);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_owned(buf.to_vec(), offset)
    }

    /// One op: read into one buffer, then scatter.
    fn readv_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let mut tmp = vec![0u8; total_len(bufs)];
        self.read_at(&mut tmp, offset)?;
        let mut at = 0;
        for buf in bufs.iter_mut() {
            buf.copy_from_slice(&tmp[at..at + buf.len()]);
            at += buf.len();
        }
        Ok(())
    }

    /// One op (one write for the power-cut count, tearable per sector).
    fn writev_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.write_owned(bufs.concat(), offset)
    }

    fn flush(&self) -> io::Result<()> {
        let service = {
            let mut st = self.state.lock();
            self.dead_error(&mut st)?;
            self.refused(&mut st, "flush")?;
            let st = &mut *st;
            st.durable.pages.extend(st.dirty.pages.drain());
            st.pending.clear();
            st.stats.flushes += 1;
            st.service_time(0)
        };
        self.wait_for_service(service);
        Ok(())
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

impl fmt::Debug for FaultDevice {
    /// Never prints data; skips the pending count rather than block.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pending = self.state.try_lock().map(|st| st.pending.len());
        f.debug_struct("FaultDevice")
            .field("name", &self.name)
            .field("size", &self.size)
            .field("pending_writes", &pending)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }

    fn read(dev: &FaultDevice, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        dev.read_at(&mut buf, offset).unwrap();
        buf
    }

    fn bit_diff(a: &[u8], b: &[u8]) -> Vec<usize> {
        (0..a.len() * 8)
            .filter(|&i| (a[i / 8] ^ b[i / 8]) & (1 << (i % 8)) != 0)
            .collect()
    }

    #[test]
    fn reads_see_pending_and_flush_makes_durable() {
        let dev = FaultDevice::new(64 * KIB as u64, 1);
        let a = pattern(8 * KIB, 1);
        dev.write_at(&a, 4096).unwrap();
        assert_eq!(read(&dev, 4096, 8 * KIB), a);
        assert_eq!(dev.stats().pending_writes, 1);
        assert_eq!(
            read(&dev.snapshot_durable(), 4096, 8 * KIB),
            vec![0; 8 * KIB]
        );
        dev.flush().unwrap();
        assert_eq!(dev.stats().pending_writes, 0);
        assert_eq!(read(&dev.snapshot_durable(), 4096, 8 * KIB), a);
        // Unaligned-within-page write over durable data, then vectored read.
        let b = pattern(1536, 9);
        dev.writev_at(&[&b[..512], &b[512..]], 4608).unwrap();
        let (mut x, mut y) = (vec![0u8; 1000], vec![0u8; 2072]);
        dev.readv_at(&mut [&mut x[..], &mut y[..]], 4096).unwrap();
        let mut expect = a[..3072].to_vec();
        expect[512..2048].copy_from_slice(&b);
        assert_eq!([x, y].concat(), expect);
        let s = dev.stats();
        assert_eq!((s.writes, s.flushes, s.reads), (2, 1, 2));
        assert_eq!(s.bytes_written, (8 * KIB + 1536) as u64);
    }

    #[test]
    fn contract_errors() {
        let dev = FaultDevice::new(8192, 1).with_name("vdev-a");
        let e = dev.write_at(&[0u8; 512], 8192).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("vdev-a"), "{e}");
        let e = dev.read_at(&mut [0u8; 100], 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn sparse_large_device_is_cheap() {
        let dev = FaultDevice::new(8 << 30, 1);
        let end = (8u64 << 30) - 4096;
        dev.write_at(&pattern(4096, 3), end).unwrap();
        dev.flush().unwrap();
        assert_eq!(read(&dev, end, 4096), pattern(4096, 3));
        assert_eq!(read(&dev, 1 << 32, 4096), vec![0; 4096]);
        assert_eq!(dev.state.lock().durable.pages.len(), 1);
    }

    /// Writes 32 flushed blocks, then overwrites half and adds new ones without
    /// flushing; every crash must keep the flushed-and-not-overwritten blocks,
    /// and each sector of the rest must be wholly old or wholly new.
    #[test]
    fn crash_only_loses_unflushed_writes() {
        let block = 4096;
        let dev = FaultDevice::new(256 * KIB as u64, 7);
        for i in 0..32u8 {
            dev.write_at(&pattern(block, i), i as u64 * block as u64)
                .unwrap();
        }
        dev.flush().unwrap();
        for i in (0..32u8).step_by(2) {
            dev.write_at(&pattern(block, 100 + i), i as u64 * block as u64)
                .unwrap();
        }
        dev.write_at(&pattern(block, 200), 40 * block as u64)
            .unwrap();
        let (mut lost_some, mut kept_all) = (false, false);
        for seed in 0..300 {
            let img = dev.crash(seed);
            assert_eq!(img.stats().pending_writes, 0);
            let mut all_new = true;
            for i in 0..32u8 {
                let got = read(&img, i as u64 * block as u64, block);
                let old = pattern(block, i);
                if i % 2 == 1 {
                    assert_eq!(got, old, "seed {seed}: flushed block {i} lost");
                    continue;
                }
                let new = pattern(block, 100 + i);
                for (s, sector) in got.chunks(SECTOR).enumerate() {
                    let r = s * SECTOR..(s + 1) * SECTOR;
                    assert!(
                        sector == &old[r.clone()] || sector == &new[r],
                        "seed {seed}: mixed sector"
                    );
                }
                all_new &= got == new;
            }
            let extra = read(&img, 40 * block as u64, block);
            lost_some |= !all_new;
            kept_all |= all_new && extra == pattern(block, 200);
        }
        assert!(lost_some && kept_all, "crash outcomes not varied");
        assert!(dev.is_dead());
        assert!(dev.read_at(&mut [0u8; 512], 0).is_err());
        assert!(dev.flush().is_err());
    }

    #[test]
    fn torn_writes_are_sector_atomic() {
        let len = 64 * SECTOR;
        let old = pattern(len, 1);
        let new = pattern(len, 2);
        let (mut torn_seen, mut whole_seen) = (false, false);
        for seed in 0..200u64 {
            let dev = FaultDevice::new(len as u64, seed);
            dev.write_at(&old, 0).unwrap();
            dev.flush().unwrap();
            dev.write_at(&new, 0).unwrap();
            let got = read(&dev.crash(seed), 0, len);
            let mut new_sectors = 0;
            for (s, sector) in got.chunks(SECTOR).enumerate() {
                let r = s * SECTOR..(s + 1) * SECTOR;
                if sector == &new[r.clone()] {
                    new_sectors += 1;
                } else {
                    assert_eq!(
                        sector, &old[r],
                        "seed {seed}: sector {s} is neither old nor new"
                    );
                }
            }
            torn_seen |= new_sectors > 0 && new_sectors < 64;
            whole_seen |= new_sectors == 64;
        }
        assert!(torn_seen && whole_seen);
    }

    #[test]
    fn crash_is_deterministic() {
        let build = || {
            let dev = FaultDevice::new(128 * KIB as u64, 3);
            for i in 0..24u8 {
                dev.write_at(&pattern(2048, i), (i as u64 % 13) * 4096)
                    .unwrap();
                if i == 5 {
                    dev.flush().unwrap();
                }
            }
            dev
        };
        let (a, b) = (build(), build());
        let mut distinct = std::collections::HashSet::new();
        for seed in 0..20 {
            let img = read(&a.crash(seed), 0, 128 * KIB);
            assert_eq!(img, read(&b.crash(seed), 0, 128 * KIB), "seed {seed}");
            assert_eq!(
                img,
                read(&a.crash(seed), 0, 128 * KIB),
                "repeat crash {seed}"
            );
            distinct.insert(img);
        }
        assert!(distinct.len() > 5, "seeds should give different images");
    }

    #[test]
    fn power_cut_fails_nth_write_and_everything_after() {
        let dev = FaultDevice::new(64 * KIB as u64, 5);
        dev.write_at(&pattern(4096, 9), 0).unwrap(); // before the config: not counted
        dev.set_config(FaultConfig {
            power_cut_after_writes: Some(3),
            ..Default::default()
        });
        dev.write_at(&pattern(4096, 1), 4096).unwrap();
        dev.writev_at(&[&pattern(512, 2)[..], &pattern(512, 3)[..]], 8192)
            .unwrap();
        let e = dev.write_at(&pattern(4096, 4), 12288).unwrap_err();
        assert!(e.to_string().contains("power cut"), "{e}");
        assert!(dev.write_at(&pattern(4096, 5), 16384).is_err());
        assert!(dev.read_at(&mut [0u8; 512], 0).is_err());
        assert!(dev.flush().is_err());
        assert_eq!(dev.stats().writes, 3);
        assert_eq!(dev.stats().dead_op_failures, 4);
        for seed in 0..50 {
            let img = dev.crash(seed);
            assert_eq!(
                read(&img, 12288, 8192),
                vec![0; 8192],
                "refused write applied"
            );
        }
    }

    #[test]
    fn read_bitflips_change_returned_data_only() {
        let dev = FaultDevice::new(64 * KIB as u64, 11);
        let data = pattern(8192, 4);
        dev.write_at(&data, 0).unwrap();
        dev.set_config(FaultConfig {
            read_bitflip_rate: 1.0,
            ..Default::default()
        });
        for _ in 0..10 {
            assert_eq!(bit_diff(&read(&dev, 0, 8192), &data).len(), 1);
        }
        dev.set_config(FaultConfig::default());
        assert_eq!(read(&dev, 0, 8192), data);
        assert_eq!(dev.stats().injected_read_bitflips, 10);
    }

    #[test]
    fn write_bitflips_and_read_errors() {
        let dev = FaultDevice::new(64 * KIB as u64, 12);
        dev.set_config(FaultConfig {
            write_bitflip_rate: 1.0,
            ..Default::default()
        });
        let data = pattern(4096, 6);
        dev.write_at(&data, 4096).unwrap();
        dev.set_config(FaultConfig {
            read_error_rate: 1.0,
            ..Default::default()
        });
        let e = dev.read_at(&mut [0u8; 4096], 4096).unwrap_err();
        assert!(e.to_string().contains("EIO"), "{e}");
        dev.set_config(FaultConfig::default());
        assert_eq!(bit_diff(&read(&dev, 4096, 4096), &data).len(), 1);
        let s = dev.stats();
        assert_eq!((s.injected_write_bitflips, s.injected_read_errors), (1, 1));
    }

    #[test]
    fn misdirected_write_lands_elsewhere() {
        let size = 64 * KIB;
        let dev = FaultDevice::new(size as u64, 13);
        dev.set_config(FaultConfig {
            misdirect_rate: 1.0,
            ..Default::default()
        });
        let data = pattern(1024, 8);
        dev.write_at(&data, 8192).unwrap();
        assert_eq!(read(&dev, 8192, 1024), vec![0; 1024]);
        let all = read(&dev, 0, size);
        let found = (0..size - 1024)
            .step_by(SECTOR)
            .find(|&o| all[o..o + 1024] == data[..]);
        assert!(
            found.is_some_and(|o| o != 8192),
            "misdirected data not found"
        );
        assert_eq!(dev.stats().injected_misdirects, 1);
    }

    #[test]
    fn zones_restrict_faults() {
        let dev = FaultDevice::new(64 * KIB as u64, 14);
        let data = pattern(16384, 2);
        dev.write_at(&data, 0).unwrap();
        let zone = |start, end, err, flip| FaultZone {
            start,
            end,
            read_error_rate: err,
            read_bitflip_rate: flip,
            ..Default::default()
        };
        dev.set_config(FaultConfig {
            zones: vec![zone(32768, 36864, 1.0, 0.0), zone(4096, 8192, 0.0, 1.0)],
            ..Default::default()
        });
        assert!(dev.read_at(&mut [0u8; 4096], 28672).is_ok());
        assert!(dev.read_at(&mut [0u8; 8192], 28672).is_err());
        assert!(dev.read_at(&mut [0u8; 512], 36864).is_ok());
        for _ in 0..20 {
            let diff = bit_diff(&read(&dev, 0, 16384), &data);
            assert_eq!(diff.len(), 1);
            assert!((4096 * 8..8192 * 8).contains(&diff[0]), "flip outside zone");
        }
        assert_eq!(read(&dev, 8192, 8192), data[8192..]);
    }

    #[test]
    fn corrupt_damages_every_sector_in_range() {
        let dev = FaultDevice::new(64 * KIB as u64, 15);
        let data = pattern(16384, 5);
        dev.write_at(&data, 0).unwrap();
        dev.flush().unwrap();
        dev.write_at(&data[..4096], 8192).unwrap(); // pending copy, same bytes
        dev.corrupt(1000, 3000, 77);
        dev.corrupt(8192, 4096, 78);
        let got = read(&dev, 0, 16384);
        assert_eq!(got[..1000], data[..1000]);
        assert_eq!(got[4000..8192], data[4000..8192]);
        for s in (1024..3584)
            .step_by(SECTOR)
            .chain((8192..12288).step_by(SECTOR))
        {
            assert_ne!(
                got[s..s + SECTOR],
                data[s..s + SECTOR],
                "sector at {s} intact"
            );
        }
        // The corruption of the pending write survives any crash outcome.
        for seed in 0..20 {
            assert_eq!(read(&dev.crash(seed), 8192, 4096), got[8192..12288]);
        }
    }

    #[test]
    fn bandwidth_is_shared_between_callers() {
        let mib = 1 << 20;
        let config = FaultConfig {
            bandwidth_bytes_per_sec: Some(40 * mib as u64),
            ..Default::default()
        };
        let dev = Arc::new(FaultDevice::new(16 * mib as u64, 16));
        dev.set_config(config);
        let start = Instant::now();
        for i in 0..4 {
            dev.write_at(&vec![1u8; mib], (i * mib) as u64).unwrap();
        }
        let single = start.elapsed();
        assert!(single >= Duration::from_millis(90), "{single:?}");
        let start = Instant::now();
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let dev = Arc::clone(&dev);
                std::thread::spawn(move || {
                    for i in 0..2 {
                        dev.write_at(&vec![2u8; mib], ((4 + t * 2 + i) * mib) as u64)
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let shared = start.elapsed();
        assert!(shared >= Duration::from_millis(90), "{shared:?}");
    }

    #[test]
    fn fault_free_device_is_fast_and_usable_as_trait_object() {
        let dev = Arc::new(FaultDevice::new(1 << 20, 17));
        let boxed: Box<dyn BlockDevice> = Box::new(Arc::clone(&dev));
        let start = Instant::now();
        for i in 0..256u64 {
            boxed.write_at(&[3u8; 4096], i * 4096).unwrap();
        }
        boxed.flush().unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(dev.stats().writes, 256);
        assert_eq!(dev.state.lock().rng.0, 17, "RNG touched with faults off");
        assert!(format!("{dev:?}").contains("fault-device-17"));
    }
}
