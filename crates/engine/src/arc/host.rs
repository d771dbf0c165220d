//! What the host's memory looks like to the ARC: `/proc/meminfo`, the
//! memory cgroup (v2, or v1's memory controller) the daemon runs in, and
//! pressure stall information.

/// One sample of the host's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostMemory {
    /// Physical memory, or the cgroup's limit when that is smaller.
    pub total: u64,
    /// Memory the host can still give: MemAvailable, or the room left under
    /// the cgroup's limit when that is smaller.
    pub available: u64,
    /// PSI: % of the last 10 s some task waited for memory (0 if unknown).
    pub psi_some_avg10: f64,
}

impl HostMemory {
    /// Memory the ARC leaves to the host: 1/8 of it, at least 256 MiB.
    pub fn reserve(&self) -> u64 {
        (self.total / 8).max(256 << 20).min(self.total / 2)
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory cgroup of this process: (limit file, usage file, pressure
/// file) under cgroup v2 (`memory.max`), else under v1's memory controller
/// (`memory.limit_in_bytes`).
fn cgroup_files() -> Option<(String, String, Option<String>)> {
    let text = read("/proc/self/cgroup")?;
    if let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) {
        let dir = format!("/sys/fs/cgroup{}", path.trim_end_matches('/'));
        if std::path::Path::new(&format!("{}/memory.max", dir)).exists() {
            return Some((format!("{}/memory.max", dir), format!("{}/memory.current", dir), Some(format!("{}/memory.pressure", dir))));
        }
    }
    let path = text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',').any(|c| c == "memory").then(|| path.trim_end_matches('/').to_string())
    })?;
    let dir = format!("/sys/fs/cgroup/memory{}", path);
    Some((format!("{}/memory.limit_in_bytes", dir), format!("{}/memory.usage_in_bytes", dir), None))
}

/// Parses `some avg10=1.23 ...` from a PSI file.
pub fn parse_psi_some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    let field = line.split_whitespace().find_map(|f| f.strip_prefix("avg10="))?;
    field.parse().ok()
}

thread_local! {
    static SAMPLES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread sampled the host (each sample reads
/// /proc/meminfo, PSI and the cgroup's files): for tests that bound it.
pub fn host_samples() -> u64 {
    SAMPLES.with(|c| c.get())
}

/// Samples the host now.
pub fn host_memory() -> HostMemory {
    SAMPLES.with(|c| c.set(c.get() + 1));
    let info = read("/proc/meminfo").unwrap_or_default();
    let mut total = meminfo_field(&info, "MemTotal:").unwrap_or_else(crate::tunables::sysconf_memory_bytes);
    let mut available = meminfo_field(&info, "MemAvailable:").unwrap_or(total / 2);
    let mut psi = read("/proc/pressure/memory").and_then(|t| parse_psi_some_avg10(&t)).unwrap_or(0.0);
    if let Some((limit_f, usage_f, pressure_f)) = cgroup_files() {
        // "max" (v2) and v1's huge "unlimited" value do not parse or exceed
        // physical memory: no limit then.
        let limit = read(&limit_f).and_then(|s| s.trim().parse::<u64>().ok());
        let current = read(&usage_f).and_then(|s| s.trim().parse::<u64>().ok());
        if let (Some(limit), Some(current)) = (limit, current) {
            if limit < total {
                total = limit;
                available = available.min(limit.saturating_sub(current));
            }
        }
        if let Some(p) = pressure_f.and_then(|f| read(&f)).and_then(|t| parse_psi_some_avg10(&t)) {
            psi = psi.max(p);
        }
    }
    HostMemory { total, available, psi_some_avg10: psi }
}

/// The default `zfs_arc_max` for `memory` bytes (the host's, or the
/// cgroup's limit): a quarter, so applications keep the rest. OpenZFS takes
/// 5/8 in the kernel, where it can be reclaimed directly; a daemon cannot.
pub fn default_arc_max(memory: u64) -> u64 {
    (memory / 4).max(64 << 20)
}

/// The default `zfs_arc_min`: 1/32 of memory, at least 32 MiB (OpenZFS's
/// rule), and at most half the maximum.
pub fn default_arc_min(memory: u64) -> u64 {
    (memory / 32).max(32 << 20).min(default_arc_max(memory) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psi_parses() {
        let t = "some avg10=12.50 avg60=3.00 avg300=0.10 total=123\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=5\n";
        assert_eq!(parse_psi_some_avg10(t), Some(12.5));
        assert_eq!(parse_psi_some_avg10("garbage"), None);
    }

    #[test]
    fn sample_is_plausible() {
        let h = host_memory();
        assert!(h.total > 0);
        assert!(h.available <= h.total);
        assert!(h.reserve() >= 256 << 20 || h.reserve() == h.total / 2);
        assert!(default_arc_min(h.total) <= default_arc_max(h.total));
    }
}
