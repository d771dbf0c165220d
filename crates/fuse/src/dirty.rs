//! How much written data the kernel may hold for a mount before the file
//! system has seen it, and how the mount limits that.
//!
//! With the write-back cache (`FUSE_WRITEBACK_CACHE`) a `write(2)` lands in
//! the page cache and returns; the file system sees the data later, as
//! WRITE requests at write-back, and by then the writer has been told it
//! succeeded and the kernel shows the file's new size. If the file system
//! cannot store the data then (a quota or the pool is full), the error only
//! reaches the writer at `fsync` or `close`. So the file systems are told
//! how much the kernel may hold ([`FileSystem::kernel_cache`]), keep at
//! least that much room, and have files opened when they have less bypass
//! the cache ([`FileSystem::uncached_writes`]; `FOPEN_DIRECT_IO`): their
//! writes reach the file system at `write(2)` and fail there.
//!
//! ## The bound
//!
//! The kernel gives each FUSE mount a backing device (bdi) with
//! `strict_limit`: its dirty and in-flight pages are held to its share of
//! the system's dirty threshold, `max_ratio`, by pausing writers. Since
//! Linux 6.2 the share can be set in bytes (`max_bytes`); the kernel keeps
//! it as a ratio of the threshold at the time (`max_ratio_fine`, in
//! millionths), and the threshold grows with the memory that is free. The
//! bound is therefore that ratio of the largest the threshold can be:
//! `vm.dirty_bytes` if set, else `vm.dirty_ratio` percent of all memory
//! (the kernel takes it of the *dirtyable* memory, never more than all of
//! it), plus a quarter for what writers dirty between two of the kernel's
//! checks (and for real-time writers, whose threshold is a quarter higher).
//!
//! Where sysfs cannot be read the bound is the whole dirty threshold: a
//! file system then bypasses the cache more often, never less than needed.
//!
//! ## Measured (docs/benchmarks.md)
//!
//! The share costs nothing down to tens of MiB: through tarn, 1 MiB and
//! 4 KiB writes ran as fast with `max_bytes` 16–64 MiB as with 950 MiB
//! (20 % here); the mount sets [`crate::MountOptions::dirty_max_bytes`]
//! (64 MiB), so that only a dataset within 80 MiB of its quota or of the
//! pool's end writes around the cache.

use std::path::Path;

/// The backing-device directory of the mount at `dir` (`MAJ:MIN`, or
/// `MAJ:MIN-fuseblk` for a `fuseblk` mount: see `blk`).
pub fn bdi_of(dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)?.dev();
    Ok(crate::blk::bdi_dir(dev).display().to_string())
}

/// Sets the mount's share of the dirty threshold to `bytes` (kernels with
/// `max_bytes`, 6.2 on) or, failing that, to `pct` percent. Root only.
pub fn set_share(bdi: &str, bytes: u64, pct: u8) -> std::io::Result<()> {
    let by_bytes = format!("{}/max_bytes", bdi);
    if Path::new(&by_bytes).exists() {
        return std::fs::write(by_bytes, bytes.to_string());
    }
    std::fs::write(format!("{}/max_ratio", bdi), pct.to_string())
}

/// An upper bound of the bytes of written data the kernel may hold for the
/// mount whose backing device is `bdi` (see the module docs).
pub fn bound(bdi: &str) -> u64 {
    let threshold = max_threshold();
    let share = share_ppm(bdi).unwrap_or(1_000_000);
    let b = (threshold as u128 * share as u128 / 1_000_000) as u64;
    b.saturating_add(b / 4)
}

/// The mount's share of the dirty threshold in millionths, as the kernel
/// keeps it (`max_ratio_fine`; `max_ratio` in percent before 6.2).
fn share_ppm(bdi: &str) -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(format!("{}/{}", bdi, f)).ok().and_then(|s| s.trim().parse::<u64>().ok());
    read("max_ratio_fine").or_else(|| read("max_ratio").map(|p| p * 10_000)).map(|p| p.min(1_000_000))
}

/// The largest the system's dirty threshold can be: `vm.dirty_bytes`, else
/// `vm.dirty_ratio` percent of all memory. Unknown: all memory, or failing
/// even that, no bound at all.
fn max_threshold() -> u64 {
    let vm = |f: &str| std::fs::read_to_string(format!("/proc/sys/vm/{}", f)).ok().and_then(|s| s.trim().parse::<u64>().ok());
    if let Some(b) = vm("dirty_bytes").filter(|&b| b > 0) {
        return b;
    }
    let Some(mem) = mem_total() else { return u64::MAX };
    match vm("dirty_ratio") {
        Some(r) => mem / 100 * r.min(100),
        None => mem,
    }
}

/// `MemTotal` of /proc/meminfo, in bytes.
fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_follows_the_share_and_never_undercounts() {
        let dir = std::env::temp_dir().join(format!("tarn-bdi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bdi = dir.display().to_string();
        let t = max_threshold();
        assert!(t > 0);
        // No sysfs files: the whole threshold.
        assert_eq!(share_ppm(&bdi), None);
        assert!(bound(&bdi) >= t);
        std::fs::write(dir.join("max_ratio"), "20\n").unwrap();
        assert_eq!(share_ppm(&bdi), Some(200_000));
        std::fs::write(dir.join("max_ratio_fine"), "14000\n").unwrap();
        assert_eq!(share_ppm(&bdi), Some(14_000), "the fine ratio wins");
        let b = bound(&bdi);
        let exact = (t as u128 * 14_000 / 1_000_000) as u64;
        assert!(b >= exact && b <= exact + exact / 4 + 1, "bound {b} for a share of {exact}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
