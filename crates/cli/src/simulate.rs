//! `tarn bench --simulate LAYOUT`: a throwaway pool on in-memory devices
//! shaped like disks, so a layout can be measured — or modelled before the
//! disks are bought — without any.
//!
//! ## The layout
//! zpool's vocabulary with a device count in place of the device names:
//! `raidz2 12 raidz2 12` is two RAID-Z2 groups of twelve; a group may be
//! repeated with `Nx`: `2x raidz2 12`, `12x mirror 2`; `disk` is one plain
//! device (`6x disk` is a stripe of six). Keywords: `mirror`, `raidz`
//! (= `raidz1`), `raidz1`, `raidz2`, `raidz3`, `disk`.
//!
//! ## The devices
//! Each device is a `RamDevice` (sparse memory, no copy but the data's)
//! behind a `ThrottledDevice`: one server per device, each operation
//! occupying it for 1/IOPS plus its bytes / bandwidth, then completing
//! after a further latency that overlaps other operations (an NVMe drive
//! keeps many commands in flight). The defaults model a current NVMe drive
//! (about 7 GB/s, 1 M random-read IOPS, 80 µs) divided by 512 in bandwidth
//! and IOPS, so that 24 of them ask less of the CPU than two cores give
//! (measured in docs/benchmarks.md: at 26 MiB/s, ÷ 256, 24 devices read
//! faster than tarn could on this project's 2 shared cores):
//! [`DEFAULT_BANDWIDTH`], [`DEFAULT_IOPS`], [`DEFAULT_LATENCY_US`]; each is
//! overridable (`--device-bandwidth`, `--device-iops`, `--device-latency`).
//!
//! ## The data devices
//! The result is set against the bandwidth the layout can give the data:
//! a RAID-Z group of width w and parity p has w − p data devices (parity is
//! written but not data, and healthy reads touch only data columns); a
//! mirror has all its children for reads (they are balanced over them) and
//! one for writes (every child writes the same bytes); a plain device is
//! one. Their sum times the device bandwidth is the ceiling a perfect
//! engine reaches.
//!
//! ## Memory
//! The devices are memory, allocated and touched when they are built
//! (`RamDevice::populate`: fresh memory's first touch costs the CPU page
//! faults a disk does not), so the data set is bounded. Each device is
//! sized for its share of the data times the layout's worst redundancy,
//! plus what its labels and metadata take, and half again so the
//! allocator never works near full ([`device_bytes`]); all of them must fit
//! in half the host's available memory, or the run is refused naming
//! `--size`; they draw from one `RamBudget` of that size.

use std::sync::Arc;
use std::time::Duration;

use tarn_engine::pool::vdevs::{Layout, NewTop};
use tarn_engine::pool::{CreateOptions, OpenOptions};
use tarn_engine::sys::{BlockDevice, RamBudget, RamDevice, ThrottledDevice};
use tarn_engine::{Error, Pool, Result, Tunables};

/// 7 GB/s / 512, in bytes per second.
pub const DEFAULT_BANDWIDTH: u64 = 13 << 20;
/// 1 M IOPS / 512.
pub const DEFAULT_IOPS: u64 = 2000;
/// An NVMe drive's read latency, unscaled: it is paid once per operation
/// whatever the drive's speed.
pub const DEFAULT_LATENCY_US: u64 = 80;

/// Most devices one simulation builds (each has its own I/O threads).
const MAX_DEVICES: usize = 256;
/// Bandwidth and IOPS outside these bounds are refused: a slower device
/// makes a run last for hours, a faster one measures only the CPU.
const BANDWIDTH_RANGE: (u64, u64) = (1 << 20, 1 << 40);
const IOPS_RANGE: (u64, u64) = (10, 100_000_000);
/// Smallest simulated device (a pool device needs 65 MiB).
const MIN_DEVICE_BYTES: u64 = 80 << 20;
/// What each device's labels, uberblocks and metadata take, at most.
const DEVICE_OVERHEAD_BYTES: u64 = 8 << 20;

/// One top-level vdev of the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub layout: Layout,
    pub width: usize,
}

impl Group {
    /// Devices of the group that carry distinct data (module docs).
    fn data_devices(&self, writing: bool) -> usize {
        match self.layout {
            Layout::Plain => 1,
            Layout::Mirror if writing => 1,
            Layout::Mirror => self.width,
            Layout::Raidz(p) => self.width - p as usize,
        }
    }

    /// Device bytes per byte of data, parity and RAID-Z's rounding of
    /// each block to nparity + 1 sectors included (at most one row more
    /// per block: a generous 15 %).
    fn redundancy(&self) -> f64 {
        match self.layout {
            Layout::Plain => 1.0,
            Layout::Mirror => self.width as f64,
            Layout::Raidz(p) => self.width as f64 / (self.width - p as usize) as f64 * 1.15,
        }
    }
}

/// How every simulated device behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub bandwidth: u64,
    pub latency: Duration,
    pub iops: u64,
}

/// Parses a layout (module docs); every refusal names `--simulate`.
pub fn parse_layout(spec: &str) -> Result<Vec<Group>> {
    let bad = |why: String| Error::invalid(format!("--simulate '{}': {}", spec.trim(), why));
    let mut tokens = spec.split(|c: char| c.is_whitespace() || c == ',').filter(|t| !t.is_empty()).peekable();
    let mut groups = Vec::new();
    while let Some(tok) = tokens.next() {
        let (repeat, keyword) = match tok.strip_suffix(['x', '×']).map(|n| n.parse::<usize>()) {
            Some(Ok(n)) => (n, tokens.next().ok_or_else(|| bad(format!("'{}' repeats nothing: e.g. '{} mirror 2'", tok, tok)))?),
            Some(Err(_)) | None => (1, tok),
        };
        if repeat == 0 || repeat > MAX_DEVICES {
            return Err(bad(format!("'{}': a group repeats 1 to {} times", tok, MAX_DEVICES)));
        }
        let layout = match keyword {
            "disk" => Layout::Plain,
            "mirror" => Layout::Mirror,
            "raidz" | "raidz1" => Layout::Raidz(1),
            "raidz2" => Layout::Raidz(2),
            "raidz3" => Layout::Raidz(3),
            k => return Err(bad(format!("unknown vdev type '{}': mirror, raidz, raidz1, raidz2, raidz3 or disk", k))),
        };
        let width = if layout == Layout::Plain { 1 } else { width(keyword, tokens.next()).map_err(bad)? };
        let least = match layout {
            Layout::Plain => 1,
            Layout::Mirror => 2,
            Layout::Raidz(p) => p as usize + 1,
        };
        if width < least {
            return Err(bad(format!("{} needs at least {} devices, {} given", keyword, least, width)));
        }
        let total = groups.iter().map(|g: &Group| g.width).sum::<usize>() + repeat * width;
        if total > MAX_DEVICES {
            return Err(bad(format!("{} devices; at most {} can be simulated", total, MAX_DEVICES)));
        }
        groups.extend(std::iter::repeat_n(Group { layout, width }, repeat));
    }
    if groups.is_empty() {
        return Err(bad("no vdevs: e.g. '2x raidz2 12', '12x mirror 2' or '6x disk'".into()));
    }
    Ok(groups)
}

/// The device count after `keyword`.
fn width(keyword: &str, tok: Option<&str>) -> std::result::Result<usize, String> {
    let Some(tok) = tok else {
        return Err(format!("'{}' needs a device count, e.g. '{} 6'", keyword, keyword));
    };
    match tok.parse::<usize>() {
        Ok(n) if (1..=MAX_DEVICES).contains(&n) => Ok(n),
        _ => Err(format!("'{} {}': the device count is a number from 1 to {}", keyword, tok, MAX_DEVICES)),
    }
}

/// Checks the shaping options' bounds (each refusal names its option).
pub fn check_shape(s: &Shape) -> Result<()> {
    let (lo, hi) = BANDWIDTH_RANGE;
    if !(lo..=hi).contains(&s.bandwidth) {
        return Err(Error::invalid(format!("--device-bandwidth {}: a simulated device moves 1M to 1T bytes/s", s.bandwidth)));
    }
    let (lo, hi) = IOPS_RANGE;
    if !(lo..=hi).contains(&s.iops) {
        return Err(Error::invalid(format!("--device-iops {}: a simulated device does {} to {} operations/s", s.iops, lo, hi)));
    }
    Ok(())
}

/// Devices that carry distinct data (module docs), over the whole layout.
pub fn data_devices(groups: &[Group], writing: bool) -> usize {
    groups.iter().map(|g| g.data_devices(writing)).sum()
}

/// The size of each device for `data_bytes` of data (module docs).
pub fn device_bytes(groups: &[Group], data_bytes: u64) -> u64 {
    let worst = groups.iter().map(Group::redundancy).fold(1.0, f64::max);
    let devices: usize = groups.iter().map(|g| g.width).sum();
    let share = (data_bytes as f64 * worst / devices as f64) as u64 + DEVICE_OVERHEAD_BYTES;
    (share + share / 2).next_multiple_of(1 << 20).max(MIN_DEVICE_BYTES)
}

/// A built simulation: the devices (kept across the pool's reopenings,
/// which is what makes a cold-cache read possible) and what they are.
pub struct Sim {
    pub spec: String,
    pub groups: Vec<Group>,
    pub shape: Shape,
    devices: Vec<(String, Arc<dyn BlockDevice>)>,
    budget: Arc<RamBudget>,
}

impl Sim {
    /// Builds the devices for `data_bytes` of data (asked for by the
    /// options `asked`, named in a refusal) and creates the pool on them
    /// (closed again: `open` opens it). `available` is the memory
    /// the host can give; half of it is the devices' budget. `force`
    /// allows groups of different redundancy, as `pool create -f`.
    pub fn build(spec: &str, shape: Shape, (data_bytes, asked): (u64, &str), available: u64, force: bool, t: &Tunables) -> Result<Sim> {
        let groups = parse_layout(spec)?;
        check_shape(&shape)?;
        let ndev: usize = groups.iter().map(|g| g.width).sum();
        let per_device = device_bytes(&groups, data_bytes);
        let need = per_device * ndev as u64;
        let budget_bytes = available / 2;
        if need > budget_bytes {
            return Err(Error::invalid(format!(
                "{} on --simulate '{}' needs about {} of memory for the simulated devices; {} is available to them (half the host's available memory): ask for less",
                asked,
                spec.trim(),
                crate::fmt::size(need),
                crate::fmt::size(budget_bytes)
            )));
        }
        let budget = RamBudget::new(need);
        let mut n = 0;
        let mut device = || -> Result<(String, Arc<dyn BlockDevice>)> {
            n += 1;
            let name = format!("sim{}", n);
            let ram = RamDevice::new(name.clone(), per_device, budget.clone());
            ram.populate().map_err(|e| Error::io(format!("simulated device {}", name), e))?;
            let shaped = ThrottledDevice::new(Arc::new(ram), shape.bandwidth, shape.latency).with_iops(shape.iops);
            Ok((name, Arc::new(shaped) as Arc<dyn BlockDevice>))
        };
        let mut tops = Vec::with_capacity(groups.len());
        for g in &groups {
            tops.push(NewTop { layout: g.layout, devices: (0..g.width).map(|_| device()).collect::<Result<_>>()? });
        }
        let devices = tops.iter().flat_map(|t| t.devices.iter().cloned()).collect();
        let opts = CreateOptions { tunables: t.clone(), force, ..Default::default() };
        Pool::create_tops("sim", tops, vec![], &opts)?.close()?;
        Ok(Sim { spec: spec.trim().to_string(), groups, shape, devices, budget })
    }

    /// Opens the simulated pool (each time with cold caches).
    pub fn open(&self, t: &Tunables) -> Result<Pool> {
        Pool::open_on(self.devices.clone(), vec![], &OpenOptions { tunables: t.clone(), ..Default::default() })
    }

    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// Memory the devices hold now.
    pub fn memory_bytes(&self) -> u64 {
        self.budget.used_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(layout: Layout, width: usize) -> Group {
        Group { layout, width }
    }

    #[test]
    fn layouts_parse_like_zpool_with_counts() {
        assert_eq!(parse_layout("raidz2 12 raidz2 12").unwrap(), vec![g(Layout::Raidz(2), 12); 2]);
        assert_eq!(parse_layout(" 2x raidz2 6 ").unwrap(), vec![g(Layout::Raidz(2), 6); 2]);
        assert_eq!(parse_layout("12x mirror 2").unwrap(), vec![g(Layout::Mirror, 2); 12]);
        assert_eq!(parse_layout("3x disk").unwrap(), vec![g(Layout::Plain, 1); 3]);
        assert_eq!(parse_layout("raidz 3,mirror 3").unwrap(), vec![g(Layout::Raidz(1), 3), g(Layout::Mirror, 3)]);
    }

    #[test]
    fn bad_layouts_get_one_clear_error_each() {
        for (spec, says) in [
            ("", "no vdevs"),
            ("raid5 6", "unknown vdev type 'raid5'"),
            ("raidz2", "'raidz2' needs a device count"),
            ("raidz2 two", "the device count is a number"),
            ("raidz2 2", "raidz2 needs at least 3 devices, 2 given"),
            ("raidz3 3", "raidz3 needs at least 4 devices, 3 given"),
            ("mirror 1", "mirror needs at least 2 devices, 1 given"),
            ("mirror 0", "the device count is a number from 1"),
            ("0x mirror 2", "a group repeats 1 to"),
            ("2x", "'2x' repeats nothing"),
            ("100x mirror 3", "300 devices; at most 256"),
            ("mirror 100000000000000000000", "the device count is a number"),
        ] {
            let e = parse_layout(spec).unwrap_err().to_string();
            assert!(e.contains("--simulate") && e.contains(says), "'{}' gave: {}", spec, e);
        }
    }

    #[test]
    fn data_devices_follow_the_definition() {
        let rz = parse_layout("2x raidz2 12").unwrap();
        assert_eq!((data_devices(&rz, true), data_devices(&rz, false)), (20, 20));
        let m = parse_layout("12x mirror 2").unwrap();
        assert_eq!((data_devices(&m, true), data_devices(&m, false)), (12, 24));
        let d = parse_layout("6x disk").unwrap();
        assert_eq!((data_devices(&d, true), data_devices(&d, false)), (6, 6));
    }

    #[test]
    fn shapes_out_of_bounds_are_refused_naming_the_option() {
        let ok = Shape { bandwidth: DEFAULT_BANDWIDTH, latency: Duration::from_micros(DEFAULT_LATENCY_US), iops: DEFAULT_IOPS };
        check_shape(&ok).unwrap();
        let e = check_shape(&Shape { bandwidth: 1000, ..ok }).unwrap_err().to_string();
        assert!(e.contains("--device-bandwidth"), "{}", e);
        let e = check_shape(&Shape { bandwidth: u64::MAX, ..ok }).unwrap_err().to_string();
        assert!(e.contains("--device-bandwidth"), "{}", e);
        let e = check_shape(&Shape { iops: 0, ..ok }).unwrap_err().to_string();
        assert!(e.contains("--device-iops"), "{}", e);
    }

    #[test]
    fn a_data_set_past_the_memory_is_refused_naming_size() {
        let shape = Shape { bandwidth: DEFAULT_BANDWIDTH, latency: Duration::ZERO, iops: DEFAULT_IOPS };
        let e = Sim::build("2x raidz2 12", shape, (8 << 30, "--size 8G"), 4 << 30, false, &Tunables::default()).err().expect("refused").to_string();
        assert!(e.contains("--size 8G on") && e.contains("--simulate '2x raidz2 12'") && e.contains("memory"), "{}", e);
        // A mirror of 2 stores every byte twice, on each of its devices.
        assert!(device_bytes(&parse_layout("mirror 2").unwrap(), 1 << 30) >= 1 << 30);
    }
}
