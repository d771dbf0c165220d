//! The `tarn` command: pools, benchmarks and inspection.
//!
//! Each command opens the pools it needs from the pool cache file (see
//! `cache`), does its work in-process and closes them. Commands that only
//! look (list, status, get, inspect) open pools read-only, so they work while
//! another process (a benchmark) holds a pool. Errors print one line naming
//! what they are about and exit 1; usage errors exit 2.

mod bench;
mod cache;
mod fmt;
mod inspect;
// Rendered by the daemon-backed commands (pool iostat, arcstat, pool txgs, pool explain, --metrics).
#[allow(dead_code)]
mod observe;
mod pool_cmd;

use clap::{Parser, Subcommand};
use tarn_engine::{Error, Result, Tunables};

#[derive(Parser)]
#[command(name = "tarn", version, about = "tarn: a userspace storage pool in the design of OpenZFS")]
pub struct Cli {
    /// Set an engine tunable for this command (repeatable), e.g. --tunable zfs_dirty_data_max=1G
    #[arg(long = "tunable", global = true, value_name = "NAME=VALUE")]
    pub tunables: Vec<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create, import, export, list and configure pools
    #[command(subcommand)]
    Pool(pool_cmd::PoolCmd),
    /// Measure a pool: writes and reads objects through the file system's path
    Bench(bench::BenchArgs),
    /// Show a pool's on-disk structures, like zdb
    Inspect(inspect::InspectArgs),
    /// List the engine tunables and their defaults
    #[command(subcommand)]
    Tunable(TunableCmd),
}

#[derive(Subcommand)]
pub enum TunableCmd {
    /// Every tunable with its current value and meaning
    List,
    /// One tunable's value
    Get { name: String },
}

/// Tunables with this command's --tunable settings applied.
pub fn tunables(cli_sets: &[String]) -> Result<Tunables> {
    let mut t = Tunables::default();
    let mut sets = Vec::new();
    for s in cli_sets {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("--tunable takes NAME=VALUE, not '{}'", s)))?;
        sets.push((k.trim(), v.trim()));
    }
    t.set_many(&sets)?;
    Ok(t)
}

fn run(cli: Cli) -> Result<()> {
    let t = tunables(&cli.tunables)?;
    match cli.cmd {
        Cmd::Pool(c) => pool_cmd::run(c, &t),
        Cmd::Bench(a) => bench::run(a, &t),
        Cmd::Inspect(a) => inspect::run(a, &t),
        Cmd::Tunable(TunableCmd::List) => {
            let rows: Vec<Vec<String>> = t.list().into_iter().map(|(n, v, d)| vec![n.to_string(), v, d.to_string()]).collect();
            fmt::table(&["NAME", "VALUE", "DESCRIPTION"], &rows, false);
            Ok(())
        }
        Cmd::Tunable(TunableCmd::Get { name }) => {
            println!("{}", t.get(&name)?);
            Ok(())
        }
    }
}

fn main() {
    // Like every Unix tool: a closed pipe (`tarn pool list | head`) ends the
    // process quietly instead of failing a print.
    // SAFETY: setting a signal disposition to the default has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("tarn: {}", e);
        std::process::exit(1);
    }
}
