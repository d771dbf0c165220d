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
    (memory = $mem:ident; $( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $default:expr ; )*) => {
        /// Engine tunables. Defaults are OpenZFS's unless a comment says why not.
        #[derive(Clone, Debug)]
        pub struct Tunables {
            $( $(#[doc = $doc])* pub $name: $ty, )*
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
                Tunables { $( $name: $default, )* }
            }

            /// All tunables as (name, value, description).
            pub fn list(&self) -> Vec<(&'static str, String, &'static str)> {
                vec![ $( (stringify!($name), self.$name.to_string(), concat!($($doc),*)) ),* ]
            }

            pub fn get(&self, name: &str) -> Result<String> {
                match name {
                    $( stringify!($name) => Ok(self.$name.to_string()), )*
                    _ => Err(Error::invalid(format!("unknown tunable '{}'", name))),
                }
            }

            /// Sets one tunable from its text form (sizes accept K/M/G suffixes).
            pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
                self.set_many(&[(name, value)])
            }

            /// Sets several tunables, validating the result once (so that
            /// e.g. zfs_arc_min and zfs_arc_max can move together).
            pub fn set_many(&mut self, sets: &[(&str, &str)]) -> Result<()> {
                let mut t = self.clone();
                for &(name, value) in sets {
                    match name {
                        $( stringify!($name) => {
                            t.$name = parse_value(name, value)?;
                        } )*
                        _ => return Err(Error::invalid(format!("unknown tunable '{}'", name))),
                    }
                }
                t.validate()?;
                *self = t;
                Ok(())
            }
        }
    };
}

tunables! {
    memory = memory;
    /// Most dirty data (bytes) the pool buffers; writers stop at this level. Default 10 % of RAM, at most zfs_dirty_data_max_max.
    zfs_dirty_data_max: u64 = default_dirty_max(memory);
    /// Cap on the default zfs_dirty_data_max: 4 GiB or 25 % of RAM.
    zfs_dirty_data_max_max: u64 = dirty_max_max(memory);
    /// Dirty data in the open txg (% of max) that starts a sync early.
    zfs_dirty_data_sync_percent: u32 = 20;
    /// Dirty data (% of max) where the write throttle starts delaying transactions.
    zfs_delay_min_dirty_percent: u32 = 60;
    /// Scale of the delay curve, in ns: the delay at the curve's midpoint (about 1e9 / the device's ops per second).
    zfs_delay_scale: u64 = 500_000;
    /// Longest delay imposed on one transaction, in ns.
    zfs_delay_max_ns: u64 = 100_000_000;
    /// Seconds between txg syncs when nothing forces one sooner.
    zfs_txg_timeout: u64 = 5;
    /// Per-device I/O classes: minimum and maximum operations in flight.
    zfs_vdev_sync_read_min_active: u32 = 10;
    /// See zfs_vdev_sync_read_min_active.
    zfs_vdev_sync_read_max_active: u32 = 10;
    /// Intent-log writes, minimum in flight.
    zfs_vdev_sync_write_min_active: u32 = 10;
    /// Intent-log writes, maximum in flight.
    zfs_vdev_sync_write_max_active: u32 = 10;
    /// Prefetch reads, minimum in flight.
    zfs_vdev_async_read_min_active: u32 = 1;
    /// Prefetch reads, maximum in flight.
    zfs_vdev_async_read_max_active: u32 = 3;
    /// txg-sync writes, minimum in flight (used below the min dirty percent).
    zfs_vdev_async_write_min_active: u32 = 2;
    /// txg-sync writes, maximum in flight (used above the max dirty percent).
    zfs_vdev_async_write_max_active: u32 = 10;
    /// Scrub and resilver reads, minimum in flight.
    zfs_vdev_scrub_min_active: u32 = 1;
    /// Scrub and resilver reads, maximum in flight.
    zfs_vdev_scrub_max_active: u32 = 3;
    /// Most operations in flight on one device, all classes together.
    zfs_vdev_max_active: u32 = 1000;
    /// Dirty % at which the async-write depth starts to rise from its minimum.
    zfs_vdev_async_write_active_min_dirty_percent: u32 = 30;
    /// Dirty % at which the async-write depth reaches its maximum.
    zfs_vdev_async_write_active_max_dirty_percent: u32 = 60;
    /// Largest aggregated I/O, in bytes.
    zfs_vdev_aggregation_limit: u64 = 1 << 20;
    /// Largest gap between two reads that aggregation bridges, in bytes.
    zfs_vdev_read_gap_limit: u64 = 32 << 10;
    /// Largest gap between two writes that aggregation bridges (tarn: 0, writes must be adjacent).
    zfs_vdev_write_gap_limit: u64 = 0;
    /// Threads issuing I/O to each device: the most operations truly in flight (tarn's I/O is synchronous per thread).
    tarn_vdev_threads: u32 = 16;
    /// Largest object whose data is stored inline in its dnode, in bytes.
    tarn_inline_max_bytes: u64 = 3072;
    /// Most bytes the ARC holds. Default a quarter of the host's memory (or its cgroup limit).
    zfs_arc_max: u64 = crate::arc::default_arc_max(memory);
    /// The ARC never shrinks below this under memory pressure. Default 1/32 of memory, at least 32 MiB.
    zfs_arc_min: u64 = crate::arc::default_arc_min(memory);
    /// Weight of metadata ghost hits against data ghost hits when the ARC divides itself (500: data counts 1/5).
    zfs_arc_meta_balance: u64 = 500;
    /// Most of the ARC's target (%) kept as decompressed copies of compressed metadata blocks (OpenZFS: the dbuf metadata cache, dbuf_metadata_cache_shift); 0 decompresses metadata on every hit.
    tarn_arc_meta_decompressed_percent: u64 = crate::arc::DEFAULT_COPIES_PCT;
    /// Most bytes written to a cache device per L2ARC feed.
    l2arc_write_max: u64 = 32 << 20;
    /// Extra bytes per feed while a cache device has not wrapped yet (warming up).
    l2arc_write_boost: u64 = 32 << 20;
    /// How far into the ARC's eviction end a feed scans, in multiples of l2arc_write_max.
    l2arc_headroom: u64 = 8;
    /// Seconds between L2ARC feeds when idle.
    l2arc_feed_secs: u64 = 1;
    /// Milliseconds between L2ARC feeds while busy.
    l2arc_feed_min_ms: u64 = 200;
    /// 1: prefetched blocks are not written to cache devices.
    l2arc_noprefetch: u32 = 1;
    /// Most of the ARC's target (%) the L2ARC index may take.
    l2arc_meta_percent: u64 = 33;
    /// 1: rebuild the L2ARC index from the cache devices at import.
    l2arc_rebuild_enabled: u32 = 1;
    /// Farthest a sequential stream is read ahead, in bytes (dmu_zfetch.c).
    zfetch_max_distance: u64 = 64 << 20;
    /// 1 turns read-ahead off.
    zfs_prefetch_disable: u32 = 0;
    /// Clean objects kept in memory per object set before the oldest synced
    /// ones are dropped (reloaded from their dnodes on use).
    tarn_dnode_cache_objects: u64 = 100_000;
    /// Space-log blocks between two space checkpoints.
    tarn_space_checkpoint_interval: u64 = 64;
}

fn dirty_max_max(memory: u64) -> u64 {
    (4u64 << 30).min(memory / 4)
}

fn default_dirty_max(memory: u64) -> u64 {
    (memory / 10).min(dirty_max_max(memory))
}

trait ParseValue: Sized {
    fn parse_value(s: &str) -> Option<Self>;
}

impl ParseValue for u64 {
    fn parse_value(s: &str) -> Option<Self> {
        parse_size(s)
    }
}

impl ParseValue for u32 {
    fn parse_value(s: &str) -> Option<Self> {
        parse_size(s).and_then(|v| u32::try_from(v).ok())
    }
}

fn parse_value<T: ParseValue>(name: &str, value: &str) -> Result<T> {
    T::parse_value(value)
        .ok_or_else(|| Error::invalid(format!("bad value '{}' for tunable '{}'", value, name)))
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
    /// Rejects combinations the engine cannot run with.
    pub fn validate(&self) -> Result<()> {
        let pct = |v: u32, n: &str| {
            if v > 100 {
                Err(Error::invalid(format!("{} must be a percentage (0-100), not {}", n, v)))
            } else {
                Ok(())
            }
        };
        pct(self.zfs_dirty_data_sync_percent, "zfs_dirty_data_sync_percent")?;
        pct(self.zfs_delay_min_dirty_percent, "zfs_delay_min_dirty_percent")?;
        pct(self.zfs_vdev_async_write_active_min_dirty_percent, "zfs_vdev_async_write_active_min_dirty_percent")?;
        pct(self.zfs_vdev_async_write_active_max_dirty_percent, "zfs_vdev_async_write_active_max_dirty_percent")?;
        if self.zfs_dirty_data_max < (1 << 20) {
            return Err(Error::invalid("zfs_dirty_data_max must be at least 1M"));
        }
        if self.zfs_txg_timeout == 0 {
            return Err(Error::invalid("zfs_txg_timeout must be at least 1 second"));
        }
        if self.tarn_vdev_threads == 0 || self.tarn_vdev_threads > 256 {
            return Err(Error::invalid("tarn_vdev_threads must be 1..=256"));
        }
        if self.zfs_vdev_write_gap_limit != 0 {
            // Bridging a write gap means writing the gap's bytes too, which
            // would overwrite live blocks: OpenZFS only does it with optional
            // padding I/Os, which tarn does not have.
            return Err(Error::invalid("zfs_vdev_write_gap_limit must be 0: tarn merges only adjacent writes"));
        }
        if self.zfs_vdev_aggregation_limit > (16 << 20) {
            return Err(Error::invalid("zfs_vdev_aggregation_limit is at most 16M"));
        }
        if self.zfs_arc_min > self.zfs_arc_max {
            return Err(Error::invalid("zfs_arc_min must not exceed zfs_arc_max"));
        }
        if self.zfs_arc_max < (4 << 20) {
            return Err(Error::invalid("zfs_arc_max must be at least 4M"));
        }
        if self.tarn_arc_meta_decompressed_percent > 50 {
            return Err(Error::invalid("tarn_arc_meta_decompressed_percent is at most 50"));
        }
        if self.zfs_arc_meta_balance == 0 {
            return Err(Error::invalid("zfs_arc_meta_balance must be at least 1"));
        }
        if self.tarn_inline_max_bytes > 3072 {
            return Err(Error::invalid("tarn_inline_max_bytes is at most 3072"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sizes_parse() {
        assert_eq!(parse_size("128K"), Some(128 << 10));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("42"), Some(42));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }
}
