//! `tarn pool …`: the command line of create, list, status, clear, export,
//! import, destroy, get, set and the rest. The commands themselves run in the daemon
//! (`daemon::pools`), which holds the imported pools; this module defines
//! their arguments (sent to the daemon as they are) and the in-process
//! opens that `bench` and `inspect` use.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use tarn_engine::pool::vdevs::{Layout, TopSpec};
use tarn_engine::pool::vet::open_for_import;
use tarn_engine::sys::BlockDevice;
use tarn_engine::{Error, ErrorKind, OpenOptions, Pool, Result, Tunables};

use crate::cache::Cache;
use crate::daemon::proto;

/// How `attach` and `replace` take their new device.
#[derive(Debug, Clone, Copy, clap::Args, Serialize, Deserialize)]
pub struct NewDeviceOpts {
    /// Use a device that holds a file system, swap, a partition table or
    /// an exported pool (never a mounted or busy one, or an imported pool's)
    #[arg(short, long)]
    pub force: bool,
    /// Wait until the resilver has ended
    #[arg(short = 'w')]
    pub wait: bool,
    /// Sequential resilver (a rebuild): copy the mirror's used space in
    /// device order, unchecked, then scrub it (mirrors and plain devices
    /// only), as zpool's -s
    #[arg(short = 's')]
    #[serde(default)]
    pub sequential: bool,
}

impl NewDeviceOpts {
    /// The resilver `-s` asks for.
    pub fn resilver_kind(&self) -> tarn_engine::pool::rebuild::ResilverKind {
        match self.sequential {
            true => tarn_engine::pool::rebuild::ResilverKind::Sequential,
            false => tarn_engine::pool::rebuild::ResilverKind::Healing,
        }
    }
}

#[derive(Debug, Subcommand, Serialize, Deserialize)]
pub enum PoolCmd {
    /// Create a pool striped over files or block devices (`log [mirror]
    /// DEVICE...` after them adds separate intent-log devices, `cache
    /// DEVICE...` cache devices, `spare DEVICE...` hot spares)
    Create {
        /// Use devices that hold a file system, swap, a partition table or an
        /// exported pool (never a mounted or busy one, or an imported pool's)
        #[arg(short, long)]
        force: bool,
        /// Pool property (repeatable): ashift=N, comment=TEXT
        #[arg(short = 'o', value_name = "PROP=VAL")]
        pool_props: Vec<String>,
        /// Root dataset property (repeatable): compression, checksum, recordsize, copies
        #[arg(short = 'O', value_name = "PROP=VAL")]
        root_props: Vec<String>,
        /// Create the device files (sparse) with this size, e.g. 8G
        #[arg(long)]
        size: Option<String>,
        /// Where to mount the root dataset (default /NAME; "none": not mounted)
        #[arg(short = 'm', value_name = "MOUNTPOINT")]
        mountpoint: Option<String>,
        name: String,
        #[arg(required = true)]
        devices: Vec<PathBuf>,
    },
    /// List imported pools
    List {
        /// Scripted: no header, tab-separated
        #[arg(short = 'H')]
        scripted: bool,
        /// Exact numbers instead of human-readable sizes
        #[arg(short = 'p')]
        parsable: bool,
        /// Columns: name,size,alloc,free,frag,cap,health,guid
        #[arg(short = 'o', value_delimiter = ',')]
        fields: Vec<String>,
        #[arg(long)]
        json: bool,
        names: Vec<String>,
    },
    /// Layout, state, capacity and error counts per device
    Status {
        /// List the files with permanent errors (blocks no copy of which
        /// could be read), from the pool's error log
        #[arg(short = 'v')]
        verbose: bool,
        /// Only pools with errors or not ONLINE ("all pools are healthy"
        /// when there are none), as zpool status -x
        #[arg(short = 'x')]
        unhealthy: bool,
        #[arg(long)]
        json: bool,
        names: Vec<String>,
    },
    /// Wait until an activity of the pool has ended, as zpool wait
    Wait {
        /// The activity: scrub or resilver
        #[arg(short = 't', default_value = "scrub", value_parser = ["scrub", "resilver"])]
        activity: String,
        name: String,
    },
    /// Forget a pool's device error counts and its error log, and take
    /// faulted devices that are whole again back into service (resilvering
    /// what they missed), as zpool clear
    Clear {
        name: String,
        /// Only this device (path or guid)
        device: Option<String>,
    },
    /// Stop using a device of a mirror or RAID-Z vdev, as zpool offline
    Offline {
        /// Until the next import only
        #[arg(short = 't')]
        temporary: bool,
        name: String,
        /// Devices (paths as `pool status` shows them, or guids)
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Attach NEW_DEVICE to DEVICE, as zpool attach: a plain device becomes
    /// a 2-way mirror, a mirror gains a child; NEW_DEVICE is resilvered
    Attach {
        #[command(flatten)]
        opts: NewDeviceOpts,
        name: String,
        /// A device of the pool (path as `pool status` shows it, or guid)
        device: String,
        new_device: PathBuf,
    },
    /// Detach a device from a mirror (or cancel a replacement by detaching
    /// the new device; detach a hot spare in use to free it, or the device
    /// it stands in for to keep the spare in its place), as zpool detach
    Detach {
        name: String,
        /// Path as `pool status` shows it, or guid
        device: String,
    },
    /// Replace DEVICE by NEW_DEVICE (DEVICE's path when left out: a new
    /// disk in the old one's place), as zpool replace: NEW_DEVICE is
    /// resilvered, then DEVICE leaves the pool. A hot spare of the pool as
    /// NEW_DEVICE stands in for DEVICE until one of the two is detached
    Replace {
        #[command(flatten)]
        opts: NewDeviceOpts,
        name: String,
        /// Path as `pool status` shows it, or guid
        device: String,
        new_device: Option<PathBuf>,
    },
    /// Take devices back into service and resilver what they missed, as
    /// zpool online
    Online {
        name: String,
        /// Devices (paths as `pool status` shows them, or guids)
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Read every copy of every block and rewrite damaged copies from good
    /// ones (runs in the background; `pool status` shows it), as zpool scrub
    Scrub {
        /// Cancel the running scrub
        #[arg(short = 's', conflicts_with = "pause")]
        stop: bool,
        /// Pause the running scrub (`tarn pool scrub NAME` resumes it)
        #[arg(short = 'p')]
        pause: bool,
        /// Wait until the scrub has ended
        #[arg(short = 'w', conflicts_with_all = ["stop", "pause"])]
        wait: bool,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Unmount, sync and close a pool, marking it exported
    Export {
        /// Unmount even if busy; a suspended pool: close it without syncing,
        /// discarding what it could not write
        #[arg(short, long)]
        force: bool,
        name: String,
    },
    /// Find pools on devices and import one (lists them when no name is given)
    Import {
        /// Directory (or device file) to search; repeatable. Default: /dev
        #[arg(short = 'd', value_name = "DIR")]
        dirs: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Import a pool marked destroyed
        #[arg(short, long)]
        force: bool,
        /// Recovery: when the newest txg cannot be opened, return the pool
        /// to the newest older txg that can, discarding the txgs after it
        #[arg(short = 'F')]
        rewind: bool,
        /// With -F: say what the recovery would discard, without importing
        /// or writing anything
        #[arg(short = 'n')]
        dry_run: bool,
        /// Where to mount the root dataset (default /NAME; "none": not mounted)
        #[arg(short = 'm', value_name = "MOUNTPOINT")]
        mountpoint: Option<String>,
        /// Import even though a log device is missing, discarding the
        /// intent-log records on it (zpool's `-m`, which is MOUNTPOINT here)
        #[arg(long)]
        missing_log: bool,
        /// Pool name or guid
        pool: Option<String>,
        /// Benchmarks: throttle every device of the imported pool to this
        /// bandwidth (e.g. 50M) until export or daemon restart
        #[arg(long, hide = true, value_name = "BYTES_PER_SEC")]
        device_bandwidth: Option<String>,
    },
    /// Destroy a pool (marks its labels destroyed)
    Destroy {
        #[arg(short, long)]
        force: bool,
        name: String,
    },
    /// Show pool properties
    Get {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        /// Columns: name,property,value,source
        #[arg(short = 'o', value_delimiter = ',')]
        fields: Vec<String>,
        /// all, or PROP[,PROP…]
        props: String,
        name: String,
    },
    /// Set a pool property
    Set {
        #[arg(value_name = "PROP=VAL")]
        assignment: String,
        name: String,
    },
    /// Grow the pool by top-level vdevs (`mirror`, `raidz[1-3]` or a device,
    /// as for create; -f for mismatched redundancy), log devices (after
    /// `log`, a device or `mirror` each), cache devices (after `cache`)
    /// and hot spares (after `spare`), as zpool add
    Add {
        /// Use devices that hold a file system, swap, a partition table or an
        /// exported pool (never a mounted or busy one, or an imported pool's)
        #[arg(short, long)]
        force: bool,
        name: String,
        /// The first vdev: `mirror`, `raidz[1-3]`, `log`, `cache`, `spare` or a device
        #[arg(value_name = "VDEV")]
        kind: String,
        /// The rest of the vdevs, as for `create`
        devices: Vec<PathBuf>,
    },
    /// Remove cache devices, available hot spares and log devices (by path
    /// or guid; a log mirror by its name or a device), as zpool remove
    Remove {
        name: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// I/O statistics per pool and device, once or every INTERVAL seconds
    Iostat(crate::observe_cmd::IostatArgs),
    /// Force the open transaction group of each named pool (all pools with
    /// none) to sync, and wait for it, as `zpool sync`
    Sync { names: Vec<String> },
    /// What happened to the pools (device errors naming their blocks,
    /// faults, scrubs, imports), from each pool's event ring, as zpool events
    Events(crate::events_cmd::EventsArgs),
    /// The recently synced txgs of a pool
    Txgs {
        #[arg(long)]
        json: bool,
        name: String,
    },
    /// What limits the pool's workload, from two snapshots SECONDS apart
    Explain {
        #[arg(long)]
        json: bool,
        name: String,
        /// Seconds between the two snapshots
        #[arg(default_value = "1")]
        seconds: f64,
    },
    /// Debugging: write BYTES to scratch objects in the daemon, sync, free them
    #[command(hide = true)]
    WriteTest(crate::daemon::observe::WriteTestArgs),
}

pub fn split_assignments(v: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    v.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| Error::invalid(format!("{} takes PROP=VALUE, not '{}'", flag, s)))
        })
        .collect()
}

impl PoolCmd {
    /// Makes the paths in the command absolute: the daemon does not share
    /// the caller's working directory.
    pub fn absolutize(&mut self) {
        let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        // `components` drops the `.` of `./mirror` once it is inside a path.
        let cwd = Absolute(here);
        match self {
            // Vdev keywords stay words; `./mirror` is a file.
            PoolCmd::Create { devices, .. } => devices.iter_mut().filter(|d| vdev_keyword(d).is_none()).for_each(|d| *d = cwd.join(&*d)),
            PoolCmd::Add { kind, devices, .. } => {
                // The first vdev is a device when it is no keyword.
                if vdev_keyword(std::path::Path::new(kind.as_str())).is_none() {
                    *kind = cwd.join(std::path::Path::new(kind.as_str())).display().to_string();
                }
                devices.iter_mut().filter(|d| vdev_keyword(d).is_none()).for_each(|d| *d = cwd.join(&*d))
            }
            PoolCmd::Import { dirs, .. } => dirs.iter_mut().for_each(|d| *d = cwd.join(&*d)),
            // A device is a path or a guid: a name that exists here is the
            // caller's path.
            PoolCmd::Remove { devices, .. } | PoolCmd::Offline { devices, .. } | PoolCmd::Online { devices, .. } => devices.iter_mut().for_each(absolutize_device_name),
            PoolCmd::Clear { device: Some(d), .. } | PoolCmd::Detach { device: d, .. } => absolutize_device_name(d),
            PoolCmd::Attach { device, new_device, .. } => {
                absolutize_device_name(device);
                *new_device = cwd.join(&*new_device);
            }
            PoolCmd::Replace { device, new_device, .. } => {
                absolutize_device_name(device);
                if let Some(n) = new_device {
                    *n = cwd.join(&*n);
                }
            }
            _ => {}
        }
    }
}

/// A device named by path or guid (`pool remove`, `inject -d`): a name
/// that exists here is the caller's path, made absolute (the daemon does
/// not share the caller's working directory); anything else is left as
/// it is (a guid, or a path the daemon will report unknown).
pub fn absolutize_device_name(d: &mut String) {
    if std::path::Path::new(d.as_str()).exists() {
        let cwd = Absolute(std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")));
        *d = cwd.join(std::path::Path::new(d.as_str())).display().to_string();
    }
}

/// The vdev kinds of zpool's command line; a bare word among the devices
/// is one of these, never a file name (write `./mirror` for that file).
const VDEV_KEYWORDS: &[&str] = &["mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup"];

/// The keyword `arg` is (`raidz2` is `raidz`, `draid2:4d:1s` is `draid`),
/// if it is one.
pub fn vdev_keyword(arg: &std::path::Path) -> Option<&'static str> {
    let s = arg.to_str()?;
    let kw = VDEV_KEYWORDS.iter().find(|k| s.starts_with(**k))?;
    let rest = &s[kw.len()..];
    let ok = match *kw {
        "raidz" => matches!(rest, "" | "1" | "2" | "3"),
        // draid[PARITY][:DATAd][:CHILDRENc][:SPARESs]
        "draid" => rest.chars().all(|c| c.is_ascii_alphanumeric() || c == ':') && rest.chars().next().is_none_or(|c| c.is_ascii_digit() || c == ':'),
        _ => rest.is_empty(),
    };
    ok.then_some(*kw)
}

/// What the devices of `pool create` or `pool add` say (`split_vdevs`).
#[derive(Debug, Default)]
pub struct VdevArgs {
    /// Top-level vdevs.
    pub tops: Vec<TopSpec>,
    /// Cache devices (after `cache`).
    pub cache: Vec<PathBuf>,
    /// Hot spares (after `spare`).
    pub spares: Vec<PathBuf>,
    /// Log vdevs (after `log`: a device each, or `mirror DEVICE...`).
    pub logs: Vec<TopSpec>,
}

impl VdevArgs {
    pub fn is_empty(&self) -> bool {
        self.tops.is_empty() && self.cache.is_empty() && self.spares.is_empty() && self.logs.is_empty()
    }
}

/// The devices of `pool create` or `pool add`, as zpool reads them: a bare
/// device is a plain top-level vdev; `mirror` and `raidz[1-3]` start a
/// group that takes the devices up to the next keyword; `log` starts the
/// log vdevs (a device each, or `mirror` groups; RAID-Z is refused, as
/// zpool refuses it), `cache` the cache devices, `spare` the hot spares.
/// `log`, `cache` or `spare` followed by no device is an error, as is every
/// other keyword (saying what tarn has).
pub fn split_vdevs(args: &[PathBuf]) -> Result<VdevArgs> {
    let mut out = VdevArgs::default();
    // Where bare devices go: a plain vdev each, the open group, the cache
    // devices or the spares.
    #[derive(PartialEq)]
    enum In {
        Plain,
        Group,
        Cache,
        Spare,
        Log,
        LogGroup,
    }
    let mut into = In::Plain;
    // A `cache` or `spare` keyword not yet followed by a device.
    let mut bare: Option<&PathBuf> = None;
    let no_devices = |kw: &PathBuf| Error::invalid(format!("'{}' is given no devices: `{} DEVICE...`", kw.display(), kw.display()));
    for a in args {
        let group = |layout| {
            Some(TopSpec { layout, devices: vec![] })
        };
        let kw = vdev_keyword(a);
        // `log` may be followed by a group keyword (`log mirror …`).
        let log_group = matches!(into, In::Log) && matches!(kw, Some("mirror") | Some("raidz"));
        if let (Some(b), Some(_), false) = (bare, kw, log_group) {
            return Err(no_devices(b));
        }
        let logs = matches!(into, In::Log | In::LogGroup);
        let start = match kw {
            Some("cache") | Some("spare") | Some("log") => {
                into = match kw {
                    Some("cache") => In::Cache,
                    Some("spare") => In::Spare,
                    _ => In::Log,
                };
                bare = Some(a);
                continue;
            }
            Some("raidz") if logs => return Err(Error::invalid(format!("'{}' cannot follow `log`: a log vdev is a device or a mirror (zpool refuses RAID-Z logs too)", a.display()))),
            Some("mirror") => group(Layout::Mirror),
            Some("raidz") => {
                let p = a.to_str().and_then(|s| s.strip_prefix("raidz")).and_then(|d| d.parse().ok()).unwrap_or(1);
                group(Layout::Raidz(p))
            }
            Some(kw) => {
                return Err(Error::invalid(format!(
                    "'{}' is a vdev type, and tarn has no {} vdevs yet: a pool is made of plain devices, `mirror DEVICE...` and `raidz[1-3] DEVICE...` groups, with `log [mirror] DEVICE...` for log devices, `cache DEVICE...` for cache devices and `spare DEVICE...` for hot spares (a file named '{}' is './{}')",
                    a.display(),
                    kw,
                    a.display(),
                    a.display()
                )))
            }
            None => None,
        };
        bare = None;
        match (start, &into) {
            (Some(t), In::Log | In::LogGroup) => {
                out.logs.push(t);
                into = In::LogGroup;
            }
            (Some(t), _) => {
                out.tops.push(t);
                into = In::Group;
            }
            (None, In::Log) => out.logs.push(TopSpec { layout: Layout::Plain, devices: vec![a.clone()] }),
            (None, In::LogGroup) => out.logs.last_mut().expect("a log group was opened").devices.push(a.clone()),
            (None, In::Cache) => out.cache.push(a.clone()),
            (None, In::Spare) => out.spares.push(a.clone()),
            (None, In::Group) => out.tops.last_mut().expect("a group was opened").devices.push(a.clone()),
            (None, In::Plain) => out.tops.push(TopSpec { layout: Layout::Plain, devices: vec![a.clone()] }),
        }
    }
    if let Some(b) = bare {
        return Err(no_devices(b));
    }
    Ok(out)
}

/// The caller's working directory, joining paths without `.` components.
struct Absolute(PathBuf);

impl Absolute {
    /// `p` made absolute. A trailing `/` is kept: `a.img/` names a
    /// directory, and the daemon must refuse a file given so (as the kernel
    /// and the in-process commands do), not take `a.img` (or create it).
    fn join(&self, p: &std::path::Path) -> PathBuf {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let joined: PathBuf = self.0.join(p).components().collect();
        let mut bytes = joined.into_os_string().into_vec();
        if p.as_os_str().as_bytes().ends_with(b"/") && !bytes.ends_with(b"/") {
            bytes.push(b'/');
        }
        PathBuf::from(std::ffi::OsString::from_vec(bytes))
    }
}

/// Opens an imported pool by name in this process (bench, inspect);
/// read-only opens take no lock and write nothing.
pub fn open(name: &str, readonly: bool, t: &Tunables) -> Result<Pool> {
    let cache = Cache::load()?;
    let entry = cache.find(name)?;
    let paths: Vec<PathBuf> = entry.devices.iter().map(PathBuf::from).collect();
    let pool = Pool::open(&paths, &OpenOptions { readonly, tunables: t.clone(), rewind: false, ..Default::default() }).map_err(|e| held_by_daemon(e, name))?;
    pool.open_warnings().iter().for_each(|w| eprintln!("tarn: warning: {}", w));
    Ok(pool)
}

/// Rewrites "held by process N" into advice when N is the tarn daemon.
fn held_by_daemon(e: Error, name: &str) -> Error {
    match proto::daemon_pid() {
        Some(pid) if e.kind == ErrorKind::Busy && e.msg.contains(&format!("held by process {} ", pid)) => Error::new(
            ErrorKind::Busy,
            format!("pool '{}' is held by the tarn daemon (process {}); run `tarn daemon stop` to use it in this process (the next tarn command restarts the daemon)", name, pid),
        ),
        _ => e,
    }
}

/// Opens a pool with every device wrapped by `wrap` (benchmarks).
pub fn open_wrapped(name: &str, t: &Tunables, wrap: &dyn Fn(Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice>) -> Result<Pool> {
    let cache = Cache::load()?;
    let entry = cache.find(name)?;
    let mut devs = Vec::new();
    let mut locks = Vec::new();
    for p in &entry.devices {
        let fd = open_for_import(std::path::Path::new(p)).map_err(|e| held_by_daemon(e.context(format!("pool '{}'", name)), name))?;
        let fd = Arc::new(fd);
        locks.push(fd.clone());
        devs.push((p.clone(), wrap(fd as Arc<dyn BlockDevice>)));
    }
    let pool = Pool::open_on(devs, locks, &OpenOptions { readonly: false, tunables: t.clone(), rewind: false, ..Default::default() })?;
    pool.open_warnings().iter().for_each(|w| eprintln!("tarn: warning: {}", w));
    Ok(pool)
}

