//! `tarn pool …`: create, list, status, export, import, destroy, get, set.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Subcommand;
use tarn_engine::pool::{discover, PoolStatus};
use tarn_engine::sys::{BlockDevice, FileDevice};
use tarn_engine::{tunables::parse_size, CreateOptions, Error, ErrorKind, OpenOptions, Pool, Result, Tunables};

use crate::cache::{abs, Cache, CachedPool};
use crate::fmt;

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Create a pool striped over files or block devices
    Create {
        /// Use devices even if they belong to another pool
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
        #[arg(long)]
        json: bool,
        names: Vec<String>,
    },
    /// Sync and close a pool, marking it exported
    Export { name: String },
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
        /// Recovery: allow rewinding more than two txgs to an older uberblock
        #[arg(short = 'F')]
        rewind: bool,
        /// Pool name or guid
        pool: Option<String>,
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
}

fn split_assignments(v: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    v.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| Error::invalid(format!("{} takes PROP=VALUE, not '{}'", flag, s)))
        })
        .collect()
}

/// Opens an imported pool by name; read-only opens take no lock and write nothing.
pub fn open(name: &str, readonly: bool, t: &Tunables) -> Result<Pool> {
    let cache = Cache::load()?;
    let entry = cache.find(name)?;
    let paths: Vec<PathBuf> = entry.devices.iter().map(PathBuf::from).collect();
    Pool::open(&paths, &OpenOptions { readonly, tunables: t.clone(), rewind: false, ..Default::default() })
}

/// Opens a pool with every device wrapped by `wrap` (benchmarks).
pub fn open_wrapped(name: &str, t: &Tunables, wrap: &dyn Fn(Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice>) -> Result<Pool> {
    let cache = Cache::load()?;
    let entry = cache.find(name)?;
    let mut devs = Vec::new();
    let mut locks = Vec::new();
    for p in &entry.devices {
        let fd = FileDevice::open(p).map_err(|e| Error::io(format!("cannot open '{}'", p), e))?;
        fd.lock_exclusive().map_err(|e| Error::new(ErrorKind::Busy, format!("pool '{}': {}", name, e)))?;
        let fd = Arc::new(fd);
        locks.push(fd.clone());
        devs.push((p.clone(), wrap(fd as Arc<dyn BlockDevice>)));
    }
    Pool::open_on(devs, locks, &OpenOptions { readonly: false, tunables: t.clone(), rewind: false, ..Default::default() })
}

pub fn run(cmd: PoolCmd, t: &Tunables) -> Result<()> {
    match cmd {
        PoolCmd::Create { force, pool_props, root_props, size, name, devices } => create(force, pool_props, root_props, size, name, devices, t),
        PoolCmd::List { scripted, parsable, fields, json, names } => list(scripted, parsable, fields, json, names, t),
        PoolCmd::Status { json, names } => status(json, names, t),
        PoolCmd::Export { name } => {
            let pool = open(&name, false, t)?;
            pool.export()?;
            let mut c = Cache::load()?;
            c.remove(&name);
            c.save()
        }
        PoolCmd::Import { dirs, json, force, rewind, pool } => import(dirs, json, force, rewind, pool, t),
        PoolCmd::Destroy { force: _, name } => {
            let pool = open(&name, false, t)?;
            pool.destroy()?;
            let mut c = Cache::load()?;
            c.remove(&name);
            c.save()
        }
        PoolCmd::Get { scripted, parsable, fields, props, name } => get(scripted, parsable, fields, props, name, t),
        PoolCmd::Set { assignment, name } => {
            let (k, v) = assignment.split_once('=').ok_or_else(|| Error::invalid(format!("expected PROP=VALUE, not '{}'", assignment)))?;
            let pool = open(&name, false, t)?;
            pool.set_property(k, v)?;
            pool.close()
        }
    }
}

fn create(force: bool, pool_props: Vec<String>, root_props: Vec<String>, size: Option<String>, name: String, devices: Vec<PathBuf>, t: &Tunables) -> Result<()> {
    let mut opts = CreateOptions { force, tunables: t.clone(), root_props: split_assignments(&root_props, "-O")?, ..Default::default() };
    for (k, v) in split_assignments(&pool_props, "-o")? {
        if k == "ashift" {
            opts.ashift = v.parse().map_err(|_| Error::invalid(format!("bad ashift '{}': a number from 9 to 16", v)))?;
        } else {
            opts.pool_props.push((k, v));
        }
    }
    if let Some(s) = size {
        opts.size = Some(parse_size(&s).ok_or_else(|| Error::invalid(format!("bad size '{}': e.g. 512M, 8G", s)))?);
    }
    let mut cache = Cache::load()?;
    if cache.pools.iter().any(|p| p.name == name) {
        return Err(Error::new(ErrorKind::Exists, format!("pool '{}' already exists", name)));
    }
    let pool = Pool::create(&name, &devices, &opts)?;
    let entry = CachedPool { name: name.clone(), guid: pool.guid(), devices: devices.iter().map(|d| abs(d)).collect() };
    pool.close()?;
    cache.add(entry)?;
    cache.save()
}

fn list(scripted: bool, parsable: bool, fields: Vec<String>, json: bool, names: Vec<String>, t: &Tunables) -> Result<()> {
    let cache = Cache::load()?;
    let wanted: Vec<&CachedPool> = if names.is_empty() { cache.pools.iter().collect() } else { names.iter().map(|n| cache.find(n)).collect::<Result<_>>()? };
    let mut statuses = Vec::new();
    for p in wanted {
        statuses.push(open(&p.name, true, t)?.status());
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&statuses).map_err(|e| Error::invalid(e.to_string()))?);
        return Ok(());
    }
    let fields = if fields.is_empty() { ["name", "size", "alloc", "free", "frag", "cap", "health"].map(String::from).to_vec() } else { fields };
    let sz = |v: u64| if parsable { v.to_string() } else { fmt::size(v) };
    let mut rows = Vec::new();
    for s in &statuses {
        let mut r = Vec::new();
        for f in &fields {
            r.push(match f.as_str() {
                "name" => s.name.clone(),
                "size" => sz(s.size),
                "alloc" | "allocated" => sz(s.allocated),
                "free" => sz(s.free),
                "frag" | "fragmentation" => format!("{}%", s.fragmentation_pct),
                "cap" | "capacity" => format!("{}%", if s.size > 0 { s.allocated * 100 / s.size } else { 0 }),
                "health" => s.state.clone(),
                "guid" => s.guid.to_string(),
                other => return Err(Error::invalid(format!("unknown column '{}': name,size,alloc,free,frag,cap,health,guid", other))),
            });
        }
        rows.push(r);
    }
    fmt::columns(&fields, &rows, scripted);
    Ok(())
}

fn print_status(s: &PoolStatus) {
    println!("  pool: {}", s.name);
    println!(" state: {}", s.state);
    if let Some(e) = &s.error {
        println!("status: The pool is suspended after an I/O failure: {}", e);
        println!("action: Check the devices, then export and re-import the pool.");
    }
    println!("   txg: {}", s.txg);
    println!("config:\n");
    let mut rows = vec![vec![s.name.clone(), s.state.clone(), fmt::size(s.size), fmt::size(s.allocated), "-".into(), "-".into(), "-".into()]];
    for v in &s.vdevs {
        rows.push(vec![
            format!("  {}", v.path),
            v.state.clone(),
            fmt::size(v.size),
            fmt::size(v.allocated),
            v.read_errors.to_string(),
            v.write_errors.to_string(),
            v.checksum_errors.to_string(),
        ]);
    }
    fmt::table(&["NAME", "STATE", "SIZE", "ALLOC", "READ", "WRITE", "CKSUM"], &rows, false);
    let errs: u64 = s.vdevs.iter().map(|v| v.read_errors + v.write_errors + v.checksum_errors).sum();
    println!("\nerrors: {}", if errs == 0 { "No known data errors".to_string() } else { format!("{} I/O or checksum errors", errs) });
}

fn status(json: bool, names: Vec<String>, t: &Tunables) -> Result<()> {
    let cache = Cache::load()?;
    let names: Vec<String> = if names.is_empty() { cache.pools.iter().map(|p| p.name.clone()).collect() } else { names };
    if names.is_empty() && !json {
        println!("no pools available");
        return Ok(());
    }
    let mut all = Vec::new();
    for n in &names {
        all.push(open(n, true, t)?.status());
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all).map_err(|e| Error::invalid(e.to_string()))?);
        return Ok(());
    }
    for (i, s) in all.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_status(s);
    }
    Ok(())
}

fn import(dirs: Vec<PathBuf>, json: bool, force: bool, rewind: bool, pool: Option<String>, t: &Tunables) -> Result<()> {
    let dirs = if dirs.is_empty() { vec![PathBuf::from("/dev")] } else { dirs };
    let found = discover(&dirs);
    let Some(want) = pool else {
        if json {
            println!("{}", serde_json::to_string_pretty(&found).map_err(|e| Error::invalid(e.to_string()))?);
        } else if found.is_empty() {
            println!("no pools available to import");
        } else {
            for p in &found {
                println!("   pool: {}\n     id: {}\n  state: {}\n devices:", p.name, p.guid, p.state);
                for d in &p.devices {
                    println!("         {}", d);
                }
                for m in &p.missing {
                    println!("         {}  MISSING", m);
                }
                println!();
            }
        }
        return Ok(());
    };
    let matches: Vec<_> = found.iter().filter(|p| p.name == want || p.guid.to_string() == want).collect();
    let p = match matches.as_slice() {
        [] => return Err(Error::not_found(format!("no pool '{}' found in {}", want, dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")))),
        [p] => *p,
        _ => return Err(Error::invalid(format!("several pools are named '{}': import by guid", want))),
    };
    if !p.missing.is_empty() {
        return Err(Error::not_found(format!("pool '{}' cannot be imported: missing devices {}", p.name, p.missing.join(", "))));
    }
    if p.state == "DESTROYED" && !force {
        return Err(Error::invalid(format!("pool '{}' was destroyed; use -f to import it anyway", p.name)));
    }
    let mut cache = Cache::load()?;
    let paths: Vec<PathBuf> = p.devices.iter().map(PathBuf::from).collect();
    let pool = Pool::open(&paths, &OpenOptions { readonly: false, tunables: t.clone(), rewind, ..Default::default() })?;
    pool.close()?;
    cache.add(CachedPool { name: p.name.clone(), guid: p.guid, devices: p.devices.iter().map(|d| abs(std::path::Path::new(d))).collect() })?;
    cache.save()
}

fn get(scripted: bool, parsable: bool, fields: Vec<String>, props: String, name: String, t: &Tunables) -> Result<()> {
    let pool = open(&name, true, t)?;
    let all = pool.properties();
    let wanted: Vec<&str> = props.split(',').collect();
    let mut rows = Vec::new();
    for w in &wanted {
        let matched: Vec<_> = all.iter().filter(|(n, _, _)| *w == "all" || n == w).collect();
        if matched.is_empty() {
            return Err(Error::invalid(format!("bad property list: invalid property '{}'", w)));
        }
        for (n, v, s) in matched {
            let v = if parsable || !["size", "allocated", "free"].contains(&n.as_str()) {
                v.clone()
            } else {
                v.parse::<u64>().map(fmt::size).unwrap_or_else(|_| v.clone())
            };
            rows.push((n.clone(), v, s.clone()));
        }
    }
    let fields = if fields.is_empty() { ["name", "property", "value", "source"].map(String::from).to_vec() } else { fields };
    let mut out = Vec::new();
    for (n, v, s) in rows {
        let mut r = Vec::new();
        for f in &fields {
            r.push(match f.as_str() {
                "name" => name.clone(),
                "property" => n.clone(),
                "value" => v.clone(),
                "source" => s.clone(),
                other => return Err(Error::invalid(format!("unknown column '{}': name,property,value,source", other))),
            });
        }
        out.push(r);
    }
    fmt::columns(&fields, &out, scripted);
    Ok(())
}
