//! Every tunable of the engine, in one place, with its OpenZFS name.
//!
//! Names follow OpenZFS's module parameters where one exists, so that a ZFS
//! administrator's notes apply unchanged; tarn-only knobs start with `tarn_`.
//! They are read when a pool opens (`--tunable NAME=VALUE` on any command that
//! opens one) and most take effect at once when changed on a live pool.

use crate::error::{Error, Result};

/// Physical memory of the host as sysconf reports it.
pub fn sysconf_memory_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if pages <= 0 || page <= 0 {
        return 4 << 30;
    }
    pages as u64 * page as u64
}

macro_rules! tunables {
    (memory = $mem:ident; $( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $default:expr ; range $min:expr, $max:expr ; )*) => {
        /// Engine tunables. Defaults are OpenZFS's unless a comment says why not.
        #[derive(Clone, Debug)]
        pub struct Tunables {
            $( $(#[doc = $doc])* pub $name: $ty, )*
            /// Not a tunable: the memory the defaults were computed for,
            /// which also bounds the tunables that buffer or cache bytes in
            /// memory (more dirty data or ARC than the host has is refused).
            pub host_memory_bytes: u64,
        }

        impl Default for Tunables {
            /// The defaults for this host: its memory is sampled once (the
            /// memory-relative defaults share the sample).
            fn default() -> Self {
                Self::for_memory(crate::arc::host_memory().total)
            }
        }

        impl Tunables {
            /// The defaults for a host with `memory` bytes the engine may
            /// plan with: the host's, or its memory cgroup's limit when that
            /// is smaller (a daemon in a 1 GiB container must not size its
            /// dirty data from the host's 24 GiB).
            pub fn for_memory($mem: u64) -> Self {
                Tunables { $( $name: $default, )* host_memory_bytes: $mem }
            }

            /// All tunables as (name, value, description).
            pub fn list(&self) -> Vec<(&'static str, String, &'static str)> {
                vec![ $( (stringify!($name), self.$name.to_string(), concat!($($doc),*)) ),* ]
            }

            /// The range of values tunable `name` accepts, (min, max)
            /// inclusive, on this host (see each tunable for why).
            pub fn range(&self, name: &str) -> Result<(u64, u64)> {
                let $mem = self.host_memory_bytes;
                match name {
                    $( stringify!($name) => Ok(($min, $max)), )*
                    _ => Err(unknown(name)),
                }
            }

            /// A tunable's value as a number.
            fn value(&self, name: &str) -> Result<u64> {
                match name {
                    $( stringify!($name) => Ok(u64::from(self.$name)), )*
                    _ => Err(unknown(name)),
                }
            }

            /// Stores a number already checked against the tunable's range.
            fn put(&mut self, name: &str, v: u64) -> Result<()> {
                match name {
                    $( stringify!($name) => {
                        self.$name = <$ty>::try_from(v).map_err(|_| Error::invalid(format!("tunable '{}' cannot hold {}", name, v)))?;
                        Ok(())
                    } )*
                    _ => Err(unknown(name)),
                }
            }
        }
    };
}

// Each tunable: its doc comment (shown by `tunable list`), type, default
// and `range MIN, MAX` (inclusive; `memory` is the host's). A range
// excludes what would stop I/O (a queue class with no slot), overflow the
// engine's arithmetic, or sleep or wait for absurd times; `docs/cli.md`
// tabulates them.
tunables! {
    memory = memory;
    /// Most dirty data (bytes) the pool buffers; writers stop at this level. Default 10 % of RAM, at most zfs_dirty_data_max_max.
    zfs_dirty_data_max: u64 = default_dirty_max(memory);
    range 1 << 20, memory.max(1 << 20);
    /// Cap on zfs_dirty_data_max: 4 GiB or 25 % of RAM.
    zfs_dirty_data_max_max: u64 = dirty_max_max(memory);
    range 1 << 20, memory.max(1 << 20);
    /// Dirty data in the open txg (% of max) that starts a sync early.
    zfs_dirty_data_sync_percent: u32 = 20;
    range 0, 100;
    /// Dirty data (% of max) where the write throttle starts delaying transactions.
    zfs_delay_min_dirty_percent: u32 = 60;
    range 0, 100;
    /// Scale of the delay curve, in ns: the delay at the curve's midpoint (about 1e9 / the device's ops per second).
    zfs_delay_scale: u64 = 500_000;
    range 0, 1_000_000_000;
    /// Longest delay imposed on one transaction, in ns.
    zfs_delay_max_ns: u64 = 100_000_000;
    range 0, 1_000_000_000;
    /// Seconds between txg syncs when nothing forces one sooner.
    zfs_txg_timeout: u64 = 5;
    range 1, 3600;
    /// Per-device I/O classes: minimum and maximum operations in flight.
    zfs_vdev_sync_read_min_active: u32 = 10;
    range 0, ACTIVE_MAX;
    /// See zfs_vdev_sync_read_min_active.
    zfs_vdev_sync_read_max_active: u32 = 10;
    range 1, ACTIVE_MAX;
    /// Intent-log writes, minimum in flight.
    zfs_vdev_sync_write_min_active: u32 = 10;
    range 0, ACTIVE_MAX;
    /// Intent-log writes, maximum in flight.
    zfs_vdev_sync_write_max_active: u32 = 10;
    range 1, ACTIVE_MAX;
    /// Prefetch reads, minimum in flight.
    zfs_vdev_async_read_min_active: u32 = 1;
    range 0, ACTIVE_MAX;
    /// Prefetch reads, maximum in flight.
    zfs_vdev_async_read_max_active: u32 = 3;
    range 1, ACTIVE_MAX;
    /// txg-sync writes, minimum in flight (used below the min dirty percent).
    zfs_vdev_async_write_min_active: u32 = 2;
    range 1, ACTIVE_MAX;
    /// txg-sync writes, maximum in flight (used above the max dirty percent).
    zfs_vdev_async_write_max_active: u32 = 10;
    range 1, ACTIVE_MAX;
    /// Scrub and resilver reads, minimum in flight.
    zfs_vdev_scrub_min_active: u32 = 1;
    range 0, ACTIVE_MAX;
    /// Scrub and resilver reads, maximum in flight.
    zfs_vdev_scrub_max_active: u32 = 3;
    range 1, ACTIVE_MAX;
    /// Most operations in flight on one device, all classes together.
    zfs_vdev_max_active: u32 = 1000;
    range 1, ACTIVE_MAX;
    /// Dirty % at which the async-write depth starts to rise from its minimum.
    zfs_vdev_async_write_active_min_dirty_percent: u32 = 30;
    range 0, 100;
    /// Dirty % at which the async-write depth reaches its maximum.
    zfs_vdev_async_write_active_max_dirty_percent: u32 = 60;
    range 0, 100;
    /// Largest aggregated I/O, in bytes (0: no aggregation).
    zfs_vdev_aggregation_limit: u64 = 1 << 20;
    range 0, 16 << 20;
    /// Largest gap between two reads that aggregation bridges, in bytes.
    zfs_vdev_read_gap_limit: u64 = 32 << 10;
    range 0, 16 << 20;
    /// Largest gap between two writes that aggregation bridges (tarn: 0, writes must be adjacent).
    zfs_vdev_write_gap_limit: u64 = 0;
    range 0, 0;
    /// Threads issuing I/O to each device: the most operations truly in flight (tarn's I/O is synchronous per thread).
    tarn_vdev_threads: u32 = 16;
    range 1, 256;
    /// Largest object whose data is stored inline in its dnode, in bytes.
    tarn_inline_max_bytes: u64 = 3072;
    range 0, 3072;
    /// Most bytes the ARC holds. Default a quarter of the host's memory (or its cgroup limit).
    zfs_arc_max: u64 = crate::arc::default_arc_max(memory);
    range 4 << 20, memory.max(crate::arc::default_arc_max(memory));
    /// The ARC never shrinks below this under memory pressure. Default 1/32 of memory, at least 32 MiB.
    zfs_arc_min: u64 = crate::arc::default_arc_min(memory);
    range 1 << 20, memory.max(crate::arc::default_arc_max(memory));
    /// Weight of metadata ghost hits against data ghost hits when the ARC divides itself (500: data counts 1/5).
    zfs_arc_meta_balance: u64 = 500;
    range 1, 100_000;
    /// Most of the ARC's target (%) kept as decompressed copies of compressed metadata blocks (OpenZFS: the dbuf metadata cache, dbuf_metadata_cache_shift); 0 decompresses metadata on every hit.
    tarn_arc_meta_decompressed_percent: u64 = crate::arc::DEFAULT_COPIES_PCT;
    range 0, 50;
    /// Most bytes written to a cache device per L2ARC feed.
    l2arc_write_max: u64 = 32 << 20;
    range 64 << 10, 1 << 30;
    /// Extra bytes per feed while a cache device has not wrapped yet (warming up).
    l2arc_write_boost: u64 = 32 << 20;
    range 0, 1 << 30;
    /// How far into the ARC's eviction end a feed scans, in multiples of l2arc_write_max.
    l2arc_headroom: u64 = 8;
    range 1, 1000;
    /// Seconds between L2ARC feeds when idle.
    l2arc_feed_secs: u64 = 1;
    range 1, 3600;
    /// Milliseconds between L2ARC feeds while busy.
    l2arc_feed_min_ms: u64 = 200;
    range 10, 60_000;
    /// 1: prefetched blocks are not written to cache devices.
    l2arc_noprefetch: u32 = 1;
    range 0, 1;
    /// Most of the ARC's target (%) the L2ARC index may take.
    l2arc_meta_percent: u64 = 33;
    range 0, 100;
    /// 1: rebuild the L2ARC index from the cache devices at import.
    l2arc_rebuild_enabled: u32 = 1;
    range 0, 1;
    /// Farthest a sequential stream is read ahead, in bytes (dmu_zfetch.c).
    zfetch_max_distance: u64 = 64 << 20;
    range 0, 1 << 30;
    /// 1 turns read-ahead off.
    zfs_prefetch_disable: u32 = 0;
    range 0, 1;
    /// Clean objects kept in memory per object set before the oldest synced
    /// ones are dropped (reloaded from their dnodes on use).
    tarn_dnode_cache_objects: u64 = 100_000;
    range 0, 100_000_000;
    /// Space-log blocks between two space checkpoints.
    tarn_space_checkpoint_interval: u64 = 64;
    range 0, 10_000;
    /// Most bytes a second a scrub reads or a resilver copies, all devices together (0: no limit; else at least 64K). OpenZFS has none (it bounds scan I/O in flight per device).
    tarn_scan_limit_bytes_per_sec: u64 = 0;
    range 0, 1 << 40;
    /// Bytes of a scrub's reads in flight per leaf device — issued and not yet checked — so every device has reads queued while earlier ones are checked (a run larger than this is read alone). OpenZFS's zfs_scan_vdev_limit, with its default. See pool::scan::issue.
    zfs_scan_vdev_limit: u64 = 16 << 20;
    range 0, 1 << 30;
    /// Longest read a scrub makes of adjacent copies (at most 1 MiB, the sort's window; a larger block is read whole). OpenZFS reads each block alone and its queue merges them up to zfs_vdev_aggregation_limit_non_rotating, 128 KiB on SSDs; 128 KiB here too: on image files a scrub's 1 MiB reads took 3× as long for the same bytes (docs/benchmarks.md, "Where a scrub's time went").
    tarn_scan_read_max_bytes: u64 = 128 << 10;
    range 4 << 10, 16 << 20;
    /// A scan (scrub, resilver, rebuild) backs off while foreground I/O reached the pool's devices less than this many milliseconds ago (0: never backs off). OpenZFS's zfs_scan_idle, 50 ticks (ms at 1000 Hz). See pool::scan::idle.
    zfs_scan_idle_ms: u64 = 50;
    range 0, 60_000;
    /// Backed off, a scrub issues one I/O at a time, each this many milliseconds after the previous one ended (0: a scrub never backs off). OpenZFS's zfs_scrub_delay, 4 ticks.
    zfs_scrub_delay_ms: u64 = 4;
    range 0, 1000;
    /// As zfs_scrub_delay_ms, for a resilver or a sequential rebuild (0: they never back off). OpenZFS's zfs_resilver_delay, 2 ticks.
    zfs_resilver_delay_ms: u64 = 2;
    range 0, 1000;
    /// Longest range a sequential rebuild copies with one read (rounded down to whole sectors). OpenZFS's zfs_rebuild_max_segment, whose default is 1 MiB; 128 KiB here: on image files (O_DIRECT writes into a sparse file) 1 MiB copies took twice as long (docs/benchmarks.md, "Sequential rebuild").
    zfs_rebuild_max_segment: u64 = 128 << 10;
    range 4 << 10, 16 << 20;
    /// Bytes of copies a sequential rebuild keeps in flight: zfs_rebuild_queue_limit / zfs_rebuild_max_segment copies at once (1 to 32), each a read then a write. OpenZFS's zfs_rebuild_queue_limit (20 MiB per leaf); 512 KiB here, four copies: 8 to 32 measured no faster.
    zfs_rebuild_queue_limit: u64 = 512 << 10;
    range 4 << 10, 1 << 30;
    /// 1: a scrub reads its copies in logical order, as the walk of the pool's tree finds them (OpenZFS's legacy scan), not sorted by device offset; for comparison only. A scrub keeps the order it started with; in logical order it keeps no position, so one stopped by an export starts over at import.
    zfs_scan_legacy: u32 = 0;
    range 0, 1;
    /// 1: a dataset's intent log is discarded at mount instead of replayed (changes fsynced before a crash are lost; for recovering from a log that cannot be replayed).
    zil_replay_disable: u32 = 0;
    range 0, 1;
    /// A commit carrying more bytes of log records than this syncs the txg instead, which writes the data once (whole blocks written in place by indirect records count only their records' bytes).
    tarn_zil_commit_max_bytes: u64 = 8 << 20;
    range 1 << 20, 1 << 30;
    /// With `logbias=latency` and no log device, a write of at least this many bytes is logged indirectly: its whole blocks are written in place at commit and the log records their pointers (zfs_log.c's `zfs_immediate_write_sz`); a block an indirect write covers only in part is logged by pointer too when the part is at least this long.
    zfs_immediate_write_sz: u64 = 32 << 10;
    range 512, 1 << 30;
    /// Most write data one copied log record carries; a longer copied write is split into records of this size (OpenZFS's `zil_maxcopied`). At most the largest record a log block holds.
    zil_maxcopied: u64 = 7680;
    range 512, tarn_ondisk::zil::WRITE_DATA_MAX as u64;
    /// Percent of the last log round's write and flush time a commit that opens a round waits for other committers to join it (zil.c's zfs_commit_timeout_pct); no wait when it is the only one committing. 0: never wait.
    zfs_commit_timeout_pct: u64 = 10;
    range 0, 100;
    /// Log rounds of one dataset in flight at once (opened and not yet acknowledged): the depth of the intent log's commit pipeline. 1 writes one round at a time, the next opened only when the one before is durable; more lets a round be written while an earlier one's flush runs (OpenZFS's lwbs in flight). At most 16.
    tarn_zil_rounds_in_flight: u64 = 16;
    range 1, 16;
    /// Events each pool's ring keeps (`pool events`); the oldest go first. At most 10,000: the ring is rewritten whole in each txg that changes it.
    zfs_zevent_len_max: u64 = 512;
    range 1, 10_000;
    /// Checksum and I/O error events posted per device per second; more are counted as dropped.
    zfs_checksum_events_per_second: u32 = 20;
    range 1, 100_000;
}

/// Tunables whose nonzero values start above 1, and why: (name, least
/// nonzero value).
const NONZERO_FLOOR: &[(&str, u64)] = &[
    // Below 64 KiB a second one 1 MiB extent of a scrub takes more than 16
    // s; 0 is the way to say "no limit".
    ("tarn_scan_limit_bytes_per_sec", 64 << 10),
];

/// Most operations in flight a queue class (or a device) may be given.
/// OpenZFS has no cap; tarn's I/O threads (at most 256 per device) bound
/// what is really in flight, so more only hides a typo.
const ACTIVE_MAX: u64 = 10_000;

/// Tunables whose values must stay ordered, (lower, upper): lower ≤ upper.
/// Each tunable is in at most one pair.
const ORDERED: &[(&str, &str)] = &[
    ("zfs_dirty_data_max", "zfs_dirty_data_max_max"),
    ("zfs_vdev_sync_read_min_active", "zfs_vdev_sync_read_max_active"),
    ("zfs_vdev_sync_write_min_active", "zfs_vdev_sync_write_max_active"),
    ("zfs_vdev_async_read_min_active", "zfs_vdev_async_read_max_active"),
    ("zfs_vdev_async_write_min_active", "zfs_vdev_async_write_max_active"),
    ("zfs_vdev_scrub_min_active", "zfs_vdev_scrub_max_active"),
    ("zfs_vdev_async_write_active_min_dirty_percent", "zfs_vdev_async_write_active_max_dirty_percent"),
    ("zfs_arc_min", "zfs_arc_max"),
];

/// Why a range's lower end is not 0, where 0 would stop I/O or spin.
fn why_not_zero(name: &str) -> Option<&'static str> {
    Some(match name {
        "zfs_vdev_sync_read_max_active" | "zfs_vdev_sync_write_max_active" | "zfs_vdev_async_read_max_active" | "zfs_vdev_scrub_max_active" => {
            "0 would never issue that class's I/O: the pool would hang"
        }
        "zfs_vdev_async_write_max_active" | "zfs_vdev_async_write_min_active" => "0 would never issue txg-sync writes: the pool would hang",
        "zfs_vdev_max_active" => "0 would never issue any I/O: the pool would hang",
        "zfs_txg_timeout" => "0 would sync txgs in a busy loop",
        "tarn_vdev_threads" => "0 would issue no I/O",
        "l2arc_feed_secs" | "l2arc_feed_min_ms" | "l2arc_headroom" | "l2arc_write_max" => "0 would feed the cache devices in a busy loop or not at all",
        "zfs_arc_meta_balance" => "it divides the data ghost hits",
        "zfs_zevent_len_max" => "0 would keep no event",
        "zfs_checksum_events_per_second" => "0 would post no checksum or I/O error event",
        _ => return None,
    })
}

fn unknown(name: &str) -> Error {
    Error::invalid(format!("unknown tunable '{}'", name))
}

/// A tunable value as typed back: the shortest exact binary suffix (so
/// that it can be pasted into `tunable set`), else the plain number.
pub fn show_value(v: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            return format!("{}{}", v >> shift, suffix);
        }
    }
    v.to_string()
}

fn dirty_max_max(memory: u64) -> u64 {
    (4u64 << 30).min(memory / 4).max(1 << 20)
}

/// (At least 1 MiB, the range's floor, even for a host of a few MiB.)
fn default_dirty_max(memory: u64) -> u64 {
    (memory / 10).min(dirty_max_max(memory)).max(1 << 20)
}

/// Parses "4096", "128K", "1M", "4G", "1T" (binary units).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                'B' => 1,
                _ => return None,
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl Tunables {
    pub fn get(&self, name: &str) -> Result<String> {
        Ok(self.value(name)?.to_string())
    }

    /// Sets one tunable from its text form (sizes accept K/M/G suffixes).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        self.set_many(&[(name, value)])
    }

    /// Sets several tunables, validating the result once (so that
    /// e.g. zfs_arc_min and zfs_arc_max can move together). On error
    /// nothing changes.
    pub fn set_many(&mut self, sets: &[(&str, &str)]) -> Result<()> {
        let t = self.assigned(sets)?;
        t.validate()?;
        *self = t;
        Ok(())
    }

    /// `self` with `sets` applied, for a caller that names in `sets` every
    /// tunable it wants set (the daemon computing its tunables from the
    /// defaults): a tunable of an ordered pair that `sets` does not name
    /// follows its partner across — lowering zfs_arc_max below the default
    /// zfs_arc_min takes zfs_arc_min down with it, as the default of a
    /// dependent module parameter follows in OpenZFS. Two named tunables
    /// out of order are an error. Returns a note per tunable that moved.
    pub fn resolve(&self, sets: &[(&str, &str)]) -> Result<(Tunables, Vec<String>)> {
        let mut t = self.assigned(sets)?;
        let named = |n: &str| sets.iter().any(|(k, _)| k.trim() == n);
        let mut notes = Vec::new();
        for &(lo, hi) in ORDERED {
            let (l, h) = (t.value(lo)?, t.value(hi)?);
            if l <= h {
                continue;
            }
            if named(lo) && !named(hi) {
                t.put(hi, l)?;
                notes.push(format!("{} follows {} up to {}", hi, lo, show_value(l)));
            } else if named(hi) && !named(lo) {
                t.put(lo, h)?;
                notes.push(format!("{} follows {} down to {}", lo, hi, show_value(h)));
            }
        }
        t.validate()?;
        Ok((t, notes))
    }

    /// A copy with `sets` parsed and stored, each checked against its range.
    fn assigned(&self, sets: &[(&str, &str)]) -> Result<Tunables> {
        let mut t = self.clone();
        for &(name, text) in sets {
            let name = name.trim();
            let v = t.parse_in_range(name, text.trim())?;
            t.put(name, v)?;
        }
        Ok(t)
    }

    /// `text` as a value of tunable `name`: a whole number (with an
    /// optional binary suffix) within the tunable's range.
    fn parse_in_range(&self, name: &str, text: &str) -> Result<u64> {
        let (min, max) = self.range(name)?;
        let range = self.describe_range(min, max);
        let bad = |why: String| Error::invalid(format!("bad value '{}' for tunable '{}': {}", text, name, why));
        let v = parse_size(text).ok_or_else(|| bad(format!("expected a whole number from {} (sizes may end in K, M, G or T)", range)))?;
        if v < min || v > max {
            return Err(bad(format!("out of its range {}{}", range, zero_reason(name, v))));
        }
        if let Some(why) = below_floor(name, v) {
            return Err(bad(why));
        }
        Ok(v)
    }

    /// "1M to 8G (this host's memory)".
    fn describe_range(&self, min: u64, max: u64) -> String {
        let host = if max == self.host_memory_bytes { " (this host's memory)" } else { "" };
        format!("{} to {}{}", show_value(min), show_value(max), host)
    }

    /// Rejects values out of their ranges and ordered pairs out of order:
    /// what would stop I/O, overflow, or make no sense (see `tunables!`).
    pub fn validate(&self) -> Result<()> {
        for (name, _, _) in self.list() {
            let (v, (min, max)) = (self.value(name)?, self.range(name)?);
            if v < min || v > max {
                let range = self.describe_range(min, max);
                return Err(Error::invalid(format!("tunable '{}' is {}, out of its range {}{}", name, show_value(v), range, zero_reason(name, v))));
            }
            if let Some(why) = below_floor(name, v) {
                return Err(Error::invalid(format!("tunable '{}' is {}: {}", name, show_value(v), why)));
            }
        }
        for &(lo, hi) in ORDERED {
            let (l, h) = (self.value(lo)?, self.value(hi)?);
            if l > h {
                return Err(Error::invalid(format!("{} ({}) must not exceed {} ({}); change both together", lo, show_value(l), hi, show_value(h))));
            }
        }
        Ok(())
    }
}

/// Why nonzero `v` is refused by a tunable whose nonzero values start
/// higher (`NONZERO_FLOOR`).
fn below_floor(name: &str, v: u64) -> Option<String> {
    let &(_, floor) = NONZERO_FLOOR.iter().find(|(n, _)| *n == name)?;
    (v != 0 && v < floor).then(|| format!("0 (no limit) or at least {}", show_value(floor)))
}

/// Why `v` is out of the tunable's range, where that is not just size:
/// ": 0 would …", or why a bound is what it is.
fn zero_reason(name: &str, v: u64) -> String {
    match why_not_zero(name) {
        Some(why) if v == 0 => return format!(": {}", why),
        _ => {}
    }
    if name == "zfs_vdev_write_gap_limit" {
        // Bridging a write gap means writing the gap's bytes too, which
        // would overwrite live blocks: OpenZFS only does it with optional
        // padding I/Os, which tarn does not have.
        return ": it must be 0, as tarn merges only adjacent writes".to_string();
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::queue::{QueuedIo, VdevQueue};
    use crate::io::{IoClass, IoKind};

    #[test]
    fn a_scan_rate_limit_is_zero_or_a_rate_meant() {
        let mut t = Tunables::default();
        assert_eq!(t.tarn_scan_limit_bytes_per_sec, 0, "no limit by default");
        let err = t.set("tarn_scan_limit_bytes_per_sec", "1000").expect_err("1000 B/s");
        assert!(err.msg.contains("'tarn_scan_limit_bytes_per_sec'") && err.msg.contains("0 (no limit) or at least 64K"), "{err}");
        assert_eq!(t.tarn_scan_limit_bytes_per_sec, 0, "nothing changed");
        t.set("tarn_scan_limit_bytes_per_sec", "64K").expect("64K");
        t.set("tarn_scan_limit_bytes_per_sec", "0").expect("0");
        assert!(t.set("tarn_scan_limit_bytes_per_sec", "2T").is_err(), "above its range");
        let bad = Tunables { tarn_scan_limit_bytes_per_sec: 5, ..Tunables::default() };
        assert!(bad.validate().expect_err("5 B/s").msg.contains("at least 64K"));
    }

    #[test]
    fn the_commit_timeout_is_a_percentage() {
        let mut t = Tunables::default();
        assert_eq!(t.zfs_commit_timeout_pct, 10, "OpenZFS's default");
        for bad in ["101", "-1", "ten", "1.5", "", "1000000"] {
            let err = t.set("zfs_commit_timeout_pct", bad).expect_err(bad);
            assert!(err.msg.contains("'zfs_commit_timeout_pct'"), "{bad}: {err}");
            assert_eq!(t.zfs_commit_timeout_pct, 10, "{bad}: nothing changed");
        }
        assert!(t.set("zfs_commit_timeout_pct", "101").unwrap_err().msg.contains("out of its range 0 to 100"));
        t.set("zfs_commit_timeout_pct", "0").expect("0: never wait");
        t.set("zfs_commit_timeout_pct", "100").expect("100");
        let bad = Tunables { zfs_commit_timeout_pct: 250, ..Tunables::default() };
        assert!(bad.validate().expect_err("250").msg.contains("'zfs_commit_timeout_pct' is 250, out of its range 0 to 100"));
    }

    #[test]
    fn the_legacy_scan_order_is_zero_or_one() {
        let mut t = Tunables::default();
        assert_eq!(t.zfs_scan_legacy, 0, "sorted scans by default");
        for bad in ["2", "yes", "-1", "1.5", ""] {
            let err = t.set("zfs_scan_legacy", bad).expect_err(bad);
            assert!(err.msg.contains("'zfs_scan_legacy'") && err.msg.contains(&format!("'{}'", bad)), "{bad}: {err}");
            assert_eq!(t.zfs_scan_legacy, 0, "{bad}: nothing changed");
        }
        assert!(t.set("zfs_scan_legacy", "2").unwrap_err().msg.contains("out of its range 0 to 1"));
        t.set("zfs_scan_legacy", "1").expect("1");
        assert_eq!(t.zfs_scan_legacy, 1);
        t.set("zfs_scan_legacy", "0").expect("0");
        let bad = Tunables { zfs_scan_legacy: 3, ..Tunables::default() };
        assert!(bad.validate().expect_err("3").msg.contains("'zfs_scan_legacy' is 3, out of its range 0 to 1"));
    }

    /// The intent log's and the sequential rebuild's size tunables refuse
    /// zero, values past their bounds and non-numbers, naming the tunable,
    /// and keep their value.
    #[test]
    fn log_and_rebuild_sizes_refuse_bad_values() {
        let mut t = Tunables::default();
        let bad = |name: &str| {
            let max = match name {
                "zil_maxcopied" => tarn_ondisk::zil::WRITE_DATA_MAX as u64 + 1,
                "zfs_immediate_write_sz" | "zfs_rebuild_queue_limit" => (1u64 << 30) + 1,
                _ => (16u64 << 20) + 1,
            };
            ["0".to_string(), "100".to_string(), max.to_string(), "lots".to_string(), "-4096".to_string()]
        };
        for name in ["zil_maxcopied", "zfs_immediate_write_sz", "zfs_rebuild_max_segment", "zfs_rebuild_queue_limit"] {
            let before = t.get(name).unwrap();
            for v in bad(name) {
                let e = t.set(name, &v).expect_err(&format!("{name}={v} is refused"));
                assert!(e.msg.contains(name), "{e}");
                assert_eq!(t.get(name).unwrap(), before, "{name} unchanged after {v}");
            }
        }
    }

    #[test]
    fn defaults_are_sane_and_settable() {
        let mut t = Tunables::default();
        t.validate().unwrap();
        assert!(t.zfs_dirty_data_max <= 4 << 30);
        t.set("zfs_dirty_data_max", "256M").unwrap();
        assert_eq!(t.zfs_dirty_data_max, 256 << 20);
        assert_eq!(t.get("zfs_dirty_data_max").unwrap(), (256u64 << 20).to_string());
        assert!(t.set("zfs_delay_min_dirty_percent", "140").is_err());
        assert!(t.set("no_such", "1").is_err());
        assert!(t.set("zfs_txg_timeout", "x").is_err());
        assert!(t.list().iter().any(|(n, _, d)| *n == "zfs_delay_scale" && !d.is_empty()));
    }

    #[test]
    fn defaults_sample_the_host_once() {
        let before = crate::arc::host_samples();
        let t = Tunables::default();
        assert_eq!(crate::arc::host_samples() - before, 1, "one look at /proc and the cgroup per call");
        t.validate().unwrap();
        // And they are the defaults for the memory sampled.
        let m = Tunables::for_memory(8 << 30);
        assert_eq!(m.zfs_arc_max, 2 << 30);
        assert_eq!(m.zfs_arc_min, 256 << 20);
        assert_eq!(m.zfs_dirty_data_max_max, 2 << 30);
        assert_eq!(m.zfs_dirty_data_max, (8u64 << 30) / 10);
        let small = Tunables::for_memory(1 << 30);
        assert_eq!((small.zfs_arc_max, small.zfs_arc_min), (256 << 20, 32 << 20));
        small.validate().unwrap();
    }

    #[test]
    fn defaults_are_in_range_for_any_memory() {
        for mem in [0, 3 << 20, 100 << 20, 1 << 30, 24 << 30, 1 << 40] {
            let t = Tunables::for_memory(mem);
            t.validate().unwrap_or_else(|e| panic!("defaults for {} bytes of memory: {}", mem, e));
            for (name, _, _) in t.list() {
                let (min, max) = t.range(name).unwrap();
                assert!(min <= max, "{}: range {}..{}", name, min, max);
            }
        }
    }

    /// Issue 11 item 10: `zfs_vdev_async_write_max_active=0` (and the other
    /// zero depths) was accepted and hung every write. Every tunable
    /// refuses 0 where its range excludes it, one past its maximum, a
    /// negative number and garbage, with a message naming it and its range,
    /// and changes nothing.
    #[test]
    fn every_tunable_refuses_values_out_of_its_range() {
        let t = Tunables::for_memory(8 << 30);
        for (name, _, _) in t.list() {
            let (min, max) = t.range(name).unwrap();
            let mut bad = vec!["-1".to_string(), "lots".to_string(), "1.5".to_string(), String::new(), (u128::from(max) + 1).to_string()];
            if min > 0 {
                bad.push("0".to_string());
            }
            for v in bad {
                let mut c = t.clone();
                let e = c.set(name, &v).expect_err(&format!("{}={} accepted", name, v));
                assert!(e.msg.contains(name) && e.msg.contains(&format!("{} to ", show_value(min))), "{}={}: {}", name, v, e.msg);
                assert_eq!(c.list(), t.list(), "{}={} changed something", name, v);
            }
            for v in [min, max] {
                let mut c = t.clone();
                if let Err(e) = c.set(name, &v.to_string()) {
                    // Only an ordered partner may object to an end of the range.
                    assert!(e.msg.contains("must not exceed"), "{}={}: {}", name, v, e.msg);
                }
            }
        }
        let mut c = t.clone();
        let e = c.set("zfs_vdev_async_write_max_active", "0").unwrap_err();
        assert!(e.msg.contains("1 to 10000") && e.msg.contains("hang"), "{}", e.msg);
        let e = c.set("zfs_dirty_data_max", &(1u64 << 63).to_string()).unwrap_err();
        assert!(e.msg.contains("this host's memory"), "{}", e.msg);
    }

    /// The classes a queue built from `t` never issues with one I/O of each
    /// queued and the dirty data at `dirty_pct` % of its maximum.
    fn stalled_classes(t: &Tunables, dirty_pct: u64) -> Vec<IoClass> {
        let mut q = VdevQueue::new(crate::pool::queue_limits(t));
        q.set_dirty(t.zfs_dirty_data_max / 100 * dirty_pct, t.zfs_dirty_data_max);
        for (i, c) in IoClass::ALL.iter().enumerate() {
            let kind = if matches!(c, IoClass::SyncRead | IoClass::AsyncRead | IoClass::Scrub) { IoKind::Read } else { IoKind::Write };
            q.enqueue(QueuedIo::new(*c, kind, i as u64 * (64 << 20), 4096, i), 0);
        }
        let mut issued = Vec::new();
        // Completing each issue at once: a bound far above the six I/Os.
        for _ in 0..100 {
            let Some(io) = q.next_issue(0) else { break };
            issued.push(io.class);
            q.complete(io.class);
        }
        IoClass::ALL.into_iter().filter(|c| !issued.contains(c)).collect()
    }

    /// Why the queue depths' ranges are what they are: at every end of
    /// them, with little or much dirty data, every class still issues;
    /// and the zero depths the ranges refuse would stall a class for good.
    #[test]
    fn queue_depths_in_range_never_stall_a_class() {
        let t = Tunables::for_memory(8 << 30);
        let depth_tunables: Vec<&str> = t.list().into_iter().map(|(n, _, _)| n).filter(|n| n.starts_with("zfs_vdev_") && n.ends_with("_active")).collect();
        assert_eq!(depth_tunables.len(), 11);
        for name in depth_tunables {
            let (min, max) = t.range(name).unwrap();
            for v in [min, max] {
                let (c, _) = t.resolve(&[(name, &v.to_string())]).unwrap();
                for pct in [0, 45, 100] {
                    assert_eq!(stalled_classes(&c, pct), vec![], "{}={} at {} % dirty", name, v, pct);
                }
            }
        }
        let mut zero = t.clone();
        zero.zfs_vdev_async_write_max_active = 0;
        assert!(stalled_classes(&zero, 0).contains(&IoClass::AsyncWrite), "the reported hang");
        let mut zero = t.clone();
        zero.zfs_vdev_async_write_min_active = 0;
        assert!(stalled_classes(&zero, 0).contains(&IoClass::AsyncWrite), "below the min dirty percent");
        let mut zero = t.clone();
        zero.zfs_vdev_sync_read_max_active = 0;
        assert!(stalled_classes(&zero, 0).contains(&IoClass::SyncRead));
        let mut zero = t.clone();
        zero.zfs_vdev_max_active = 0;
        assert_eq!(stalled_classes(&zero, 0).len(), IoClass::ALL.len());
    }

    /// Issue 11: `tunable reset zfs_arc_min` before `zfs_arc_max` failed on
    /// the ordering check. Computed from the defaults with only what is
    /// set named, an unnamed partner follows; two named ones out of order
    /// are refused.
    #[test]
    fn an_unset_partner_follows_a_set_one() {
        let d = Tunables::for_memory(8 << 30);
        assert!(d.zfs_arc_min > 16 << 20);
        let (t, notes) = d.resolve(&[("zfs_arc_max", "16M")]).unwrap();
        assert_eq!((t.zfs_arc_min, t.zfs_arc_max), (16 << 20, 16 << 20));
        assert_eq!(notes, vec!["zfs_arc_min follows zfs_arc_max down to 16M".to_string()]);
        let (t, _) = d.resolve(&[("zfs_vdev_async_write_min_active", "20")]).unwrap();
        assert_eq!(t.zfs_vdev_async_write_max_active, 20);
        let (t, _) = d.resolve(&[("zfs_dirty_data_max", "3G")]).unwrap();
        assert_eq!(t.zfs_dirty_data_max_max, 3 << 30);
        let e = d.resolve(&[("zfs_arc_min", "32M"), ("zfs_arc_max", "16M")]).unwrap_err();
        assert!(e.msg.contains("zfs_arc_min (32M) must not exceed zfs_arc_max (16M)"), "{}", e.msg);
        // set_many is strict about the values it is given, together.
        let mut s = d.clone();
        assert!(s.set("zfs_arc_max", "16M").is_err());
        s.set_many(&[("zfs_arc_min", "8M"), ("zfs_arc_max", "16M")]).unwrap();
        assert_eq!((s.zfs_arc_min, s.zfs_arc_max), (8 << 20, 16 << 20));
    }

    #[test]
    fn sizes_parse_and_show() {
        assert_eq!(parse_size("128K"), Some(128 << 10));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("42"), Some(42));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999T"), None);
        assert_eq!(show_value(3072), "3K");
        assert_eq!(show_value(1 << 30), "1G");
        assert_eq!(show_value(10_000), "10000");
        assert_eq!(show_value(0), "0");
    }
}
