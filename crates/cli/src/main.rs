//! The `tarn` command: pools, mounts, benchmarks and inspection.
//!
//! Commands on imported pools and mounts (`pool …`, `mount`, `unmount`) are
//! requests to the daemon (`daemon`, `client`), which holds the pools open
//! and serves their FUSE mounts; the first such command starts it. `bench`
//! and `inspect` run in this process: `inspect` opens pools read-only (no
//! lock, so it works while the daemon holds them), `bench` needs the pool
//! to itself. Errors print one line naming what they are about and exit 1;
//! usage errors exit 2.

mod bench;
mod cache;

/// mimalloc instead of glibc's malloc: the daemon serves small requests on
/// several threads, each allocating and freeing 4 KiB-class buffers (directory
/// blocks, replies); glibc consolidated its free lists on nearly every such
/// allocation, a third of the daemon's user time in a small-file create
/// workload (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How the engine gives freed memory back to the host when the ARC shrinks
/// for it (`sys::memory`): mimalloc keeps freed pages for reuse until asked,
/// and glibc's malloc_trim, the engine's default, does not reach them.
fn release_free_memory() {
    // SAFETY: mi_collect only returns free memory to the OS; forcing it
    // also purges pages other threads freed into the arenas.
    unsafe { libmimalloc_sys::mi_collect(true) };
}
mod client;
mod daemon;
mod events_cmd;
mod fmt;
mod inspect;
mod observe;
mod observe_cmd;
mod pool_cmd;
mod simulate;
mod tunables_conf;

use clap::{Parser, Subcommand};
use daemon::observe::TunableCmd;
use pool_cmd::PoolCmd;
use tarn_engine::{Result, Tunables};

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
    Bench(Box<bench::BenchArgs>),
    /// Show a pool's on-disk structures, like zdb
    Inspect(inspect::InspectArgs),
    #[command(flatten)]
    Dataset(daemon::datasets::DatasetCmd),
    /// Mount a dataset (no arguments: list mounts)
    Mount(daemon::mounts::MountArgs),
    /// Unmount a dataset or mount directory
    #[command(alias = "umount")]
    Unmount(daemon::mounts::UnmountArgs),
    /// Run the daemon that holds imported pools and their mounts (started on first use)
    Daemon(daemon::DaemonArgs),
    /// List, show and change engine tunables (the daemon's live values when it runs)
    #[command(subcommand)]
    Tunable(daemon::observe::TunableCmd),
    /// ARC statistics of every pool, once or every INTERVAL seconds
    Arcstat(observe_cmd::ArcstatArgs),
    /// Intent-log activity per second, as OpenZFS's zilstat: commits,
    /// rounds written, records and log bytes
    Zilstat(observe_cmd::ZilstatArgs),
    /// Inject faults into a live pool's devices, as zinject: I/O errors,
    /// checksum damage, a vanishing device, delays (no arguments: list
    /// the handlers; -c ID|all: clear)
    Inject(daemon::inject::InjectArgs),
}

/// The defaults with this command's --tunable settings (a tunable not
/// named follows a named ordered partner: `Tunables::resolve`).
pub fn tunables(cli_sets: &[String]) -> Result<Tunables> {
    let sets = tunables_conf::parse_assignments(cli_sets, "--tunable")?;
    let refs: Vec<(&str, &str)> = sets.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Ok(Tunables::default().resolve(&refs)?.0)
}

/// `t` with NAME=VALUE settings applied (validated together, strictly:
/// the daemon's tunables for the pools one request opens).
pub fn apply_tunables(mut t: Tunables, cli_sets: &[String]) -> Result<Tunables> {
    let sets = tunables_conf::parse_assignments(cli_sets, "--tunable")?;
    let refs: Vec<(&str, &str)> = sets.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    t.set_many(&refs)?;
    Ok(t)
}

/// What a daemon started with `cli_sets` would run with, warning of kept
/// settings it would refuse.
fn startup_tunables(cli_sets: &[String]) -> Result<Tunables> {
    let (settings, t, _) = tunables_conf::Settings::load(cli_sets)?;
    settings.refused_lines(None).iter().for_each(|w| eprintln!("tarn: warning: {}", w));
    Ok(t)
}

/// Sends a command to the daemon and prints what it printed.
fn through_daemon(cmd: daemon::proto::Command, tunables: &[String]) -> Result<()> {
    print!("{}", client::call(cmd, tunables)?);
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let t = tunables(&cli.tunables)?;
    use daemon::proto::Command;
    match cli.cmd {
        Cmd::Pool(PoolCmd::Iostat(a)) => observe_cmd::iostat(a, &cli.tunables),
        Cmd::Pool(PoolCmd::Txgs { json, name }) => observe_cmd::txgs(&name, json, &cli.tunables),
        Cmd::Pool(PoolCmd::Explain { json, name, seconds }) => observe_cmd::explain(&name, seconds, json, &cli.tunables),
        Cmd::Pool(PoolCmd::Events(a)) => events_cmd::run(a, &cli.tunables),
        Cmd::Arcstat(a) => observe_cmd::arcstat(a, &cli.tunables),
        Cmd::Zilstat(a) => observe_cmd::zilstat(a, &cli.tunables),
        Cmd::Pool(mut c) => {
            c.absolutize();
            through_daemon(Command::Pool(c), &cli.tunables)
        }
        Cmd::Dataset(c) => through_daemon(Command::Dataset(c), &cli.tunables),
        Cmd::Mount(mut a) => {
            a.absolutize();
            through_daemon(Command::Mount(a), &cli.tunables)
        }
        Cmd::Unmount(mut a) => {
            a.absolutize();
            through_daemon(Command::Unmount(a), &cli.tunables)
        }
        Cmd::Inject(mut a) => {
            a.absolutize();
            through_daemon(Command::Inject(a), &cli.tunables)
        }
        Cmd::Daemon(a) => daemon::run(a, &cli.tunables),
        Cmd::Bench(a) => bench::run(*a, &t),
        Cmd::Inspect(a) => inspect::run(a, &t),
        Cmd::Tunable(c @ (TunableCmd::Set { .. } | TunableCmd::Reset { .. })) => through_daemon(Command::Tunable(c), &cli.tunables),
        // The daemon's live values when it runs; else what a daemon started
        // with this command's --tunable settings would use (the defaults,
        // the persisted settings, the --tunable settings).
        Cmd::Tunable(c) if cli.tunables.is_empty() && client::call_running(Command::Ping)?.is_some() => through_daemon(Command::Tunable(c), &[]),
        Cmd::Tunable(TunableCmd::List) => {
            print!("{}", daemon::observe::tunable_table(&startup_tunables(&cli.tunables)?));
            Ok(())
        }
        Cmd::Tunable(TunableCmd::Get { name }) => {
            println!("{}", startup_tunables(&cli.tunables)?.get(&name)?);
            Ok(())
        }
    }
}

fn main() {
    // Like every Unix tool: a closed pipe (`tarn pool list | head`) ends the
    // process quietly instead of failing a print.
    // SAFETY: setting a signal disposition to the default has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    tarn_engine::sys::memory::set_release_hook(release_free_memory);
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("tarn: {}", e);
        std::process::exit(1);
    }
}
