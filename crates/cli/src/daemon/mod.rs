//! `tarn daemon`: the process that owns imported pools and their mounts.
//!
//! A FUSE mount lives as long as the process serving it, and a pool can be
//! open read-write in only one process (the device lock), so one long-lived
//! process holds both; every other `tarn` command that acts on imported
//! pools or mounts is a client of it (see `client`).
//!
//! # Life cycle
//!
//! ```text
//!  start ──► lock <socket>.pid ──► accept requests on <socket>  (TARN_SOCKET, /run/tarn/tarn.sock)
//!        ──► holding the state lock (requests wait for it, hearing heartbeats):
//!            detach the dead mounts <socket>.mounts records
//!        ──► import every pool in the cache file
//!        ──► mount the roots and explicitly placed datasets, shallowest first
//!        ──► serve requests
//!  SIGTERM / SIGINT / `tarn daemon stop`
//!        ──► unmount every mount, nested first (kernel write-back, then sync_all; forced if busy)
//!        ──► close every pool (sync the open txg, release the devices)
//!        ──► remove socket and pid file, exit 0
//! ```
//!
//! Pools stay in the cache file at shutdown (like zpool.cache), so the next
//! start imports them again; only `pool export` and `pool destroy` remove
//! them. A SIGKILL loses nothing that was fsynced — fsync waits for the txg
//! that holds the data — and leaves dead FUSE mounts ("transport endpoint
//! is not connected"), which the next start detaches before it imports
//! anything (`mountdir`: the mounts are recorded beside the socket).
//!
//! # Requests
//!
//! Each connection gets a thread; a request is one JSON line (`proto`).
//! While it runs, a second thread sends a heartbeat line every second, so
//! that the client can tell a slow request from a daemon that does not
//! answer (see `client`).
//! Requests are carried out one at a time under the state lock — the
//! control plane is serialized, as OpenZFS serializes pool configuration
//! under `spa_namespace_lock`. File I/O does not go through here: it flows
//! kernel → FUSE workers → file system and never takes this lock, so a slow
//! export does not stall reads on other pools' mounts.
//!
//! One module per command family handles its [`proto::Command`] variant:
//! `pools` (pool create/import/export/destroy/list/status/get/set),
//! `observe` (metrics snapshots, live tunables, the Prometheus endpoint,
//! the write-test load), `events` (`pool events`: the pools' event rings,
//! waited on without the state lock), `mounts` (mount/unmount, and which datasets get a
//! mount of their own), `mountdir` (where the daemon may mount, dead
//! mounts, the record of its mounts), `served` (which mount serves each dataset, the
//! splice through which a mount serves child datasets and `.zfs`, and
//! `Served::filesystem`, the one place that chooses the file system served
//! for a dataset), `datasets` and
//! `dslist` (create/snapshot/clone/rollback/rename/destroy/set/inherit and
//! list/get, the `Dataset` variant), `inject` (fault injection handlers,
//! the `Inject` variant).
//!
//! The daemon never calls `sync(2)` or `syncfs(2)` on the host: a loop
//! device whose image lives on a tarn mount would make that call wait on
//! the daemon itself.

pub mod datasets;
mod dslist;
pub mod events;
pub mod inject;
mod mountdir;
pub mod mounts;
pub mod observe;
pub mod pools;
pub mod proto;
mod served;
mod state;

use std::io::{BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use clap::{Args, Subcommand};
use tarn_engine::{Error, ErrorKind, Result};

use crate::client;
use proto::{Command, Request, Response};
pub use state::{Out, State};

/// Most client connections served at once (a thread each); more are
/// answered with an error. Requests run one at a time anyway: this bounds
/// the threads waiting for the state lock, not the work.
const CLIENTS_MAX: usize = 64;

#[derive(Args)]
pub struct DaemonArgs {
    /// Serve in this process instead of starting a detached daemon
    #[arg(long)]
    pub foreground: bool,
    /// Serve Prometheus metrics of every pool at http://ADDR/metrics (e.g. 127.0.0.1:9187)
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(subcommand)]
    pub action: Option<DaemonAction>,
}

#[derive(Subcommand)]
pub enum DaemonAction {
    /// Stop the running daemon: unmount everything, close the pools, exit
    Stop,
}

pub fn run(a: DaemonArgs, cli_tunables: &[String]) -> Result<()> {
    match a.action {
        Some(DaemonAction::Stop) => stop(),
        None if a.foreground => serve(cli_tunables, a.metrics.as_deref()),
        None => {
            if let Some(pid) = client::call_running(Command::Ping)? {
                return Err(Error::new(ErrorKind::Exists, format!("a tarn daemon is already running (process {})", pid.trim())));
            }
            let extra: Vec<String> = a.metrics.iter().flat_map(|m| ["--metrics".to_string(), m.clone()]).collect();
            let pid = client::start_with(cli_tunables, &extra)?;
            println!("tarn daemon started (process {}), socket {}", pid, proto::socket_path().display());
            Ok(())
        }
    }
}

/// Asks the running daemon to stop and waits until its socket is gone. A
/// daemon that does not answer because it is stopped (SIGSTOP) is resumed
/// with SIGTERM pending (`client::stop_stopped_daemon`); any other that does
/// not answer is an error saying how to end it.
fn stop() -> Result<()> {
    match client::call_running(Command::Stop) {
        Ok(Some(_)) => {}
        Ok(None) => {
            println!("no tarn daemon is running");
            return Ok(());
        }
        Err(e) if client::is_not_answering(&e) => match client::stop_stopped_daemon() {
            Some(pid) => eprintln!("tarn: the tarn daemon (process {}) was stopped (SIGSTOP); resumed it with SIGTERM to stop it", pid),
            None => return Err(e),
        },
        Err(e) => return Err(e),
    }
    let sock = proto::socket_path();
    let t = std::time::Instant::now();
    while sock.exists() {
        if t.elapsed() > std::time::Duration::from_secs(120) {
            return Err(Error::new(ErrorKind::Busy, format!("the tarn daemon did not stop within 120 s (socket '{}')", sock.display())));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The daemon proper: never returns except with a startup error.
fn serve(cli_tunables: &[String], metrics: Option<&str>) -> Result<()> {
    // A client that goes away before its answer must not kill the daemon.
    // SAFETY: setting a signal disposition has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // Holding no directory inside a mount keeps unmounts from being busy.
    let _ = std::env::set_current_dir("/");
    let (settings, tunables, notes) = crate::tunables_conf::Settings::load(cli_tunables)?;
    let sock = proto::socket_path();
    let dir = sock.parent().filter(|d| !d.as_os_str().is_empty()).map(|d| d.to_path_buf()).unwrap_or_else(|| ".".into());
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating '{}'", dir.display()), e))?;
    let _pid_lock = lock_pid_file()?;
    // Holding the lock, any socket file left behind is a dead daemon's.
    let _ = std::fs::remove_file(&sock);
    // The socket is the owner's from its first moment: made under a umask
    // that leaves others nothing (a chmod after bind left a window in
    // which any user could connect). No other thread runs yet to see the
    // umask, which is restored at once (mount points are made 0755).
    // SAFETY: umask has no preconditions.
    let umask = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&sock);
    // SAFETY: as above.
    unsafe { libc::umask(umask) };
    let listener = bound.map_err(|e| Error::io(format!("binding '{}'", sock.display()), e))?;
    debug_assert_eq!(std::fs::metadata(&sock).map(|m| m.permissions().mode() & 0o777).ok(), Some(0o600));
    log(&format!("starting (process {}), socket {}", std::process::id(), sock.display()));
    // Every pool event is a line of this log.
    tarn_engine::pool::events::set_log_sink(log);
    settings.refused_lines(None).iter().chain(&notes).for_each(|w| log(w));
    let daemon = Arc::new(state::Daemon::new(settings, tunables));
    // Requests are accepted while the cached pools import: they wait for
    // the state lock the import holds, with heartbeats, so a client can
    // tell a daemon importing a big pool from one that does not answer.
    let importing = daemon.lock_for_start();
    if let Some(addr) = metrics {
        observe::serve_metrics(daemon.clone(), addr)?;
    }
    let d = daemon.clone();
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
        .map_err(|e| Error::io("installing signal handlers", e))?;
    std::thread::Builder::new()
        .name("tarn-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log(&format!("signal {} received", sig));
                d.shutdown();
            }
        })
        .map_err(|e| Error::io("starting the signal thread", e))?;
    let d = daemon.clone();
    let acceptor = std::thread::Builder::new().name("tarn-accept".into()).spawn(move || accept_clients(&d, listener)).map_err(|e| Error::io("starting the accept thread", e))?;
    daemon.import_cached(importing);
    log("ready");
    let _ = acceptor.join();
    Ok(())
}

/// Serves each client connection on a thread of its own, at most
/// `CLIENTS_MAX` at once.
fn accept_clients(daemon: &Arc<state::Daemon>, listener: UnixListener) {
    let clients = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        match conn {
            Ok(mut stream) => {
                if clients.fetch_add(1, Ordering::SeqCst) >= CLIENTS_MAX {
                    clients.fetch_sub(1, Ordering::SeqCst);
                    let busy = format!("the tarn daemon is serving {} clients already; retry", CLIENTS_MAX);
                    let _ = proto::send(&mut stream, &Response { error: Some(busy), ..Default::default() });
                    continue;
                }
                let (d, n) = (daemon.clone(), clients.clone());
                let spawned = std::thread::Builder::new().name("tarn-client".into()).spawn(move || {
                    serve_client(&d, stream);
                    n.fetch_sub(1, Ordering::SeqCst);
                });
                if let Err(e) = spawned {
                    clients.fetch_sub(1, Ordering::SeqCst);
                    log(&format!("cannot start a client thread: {}", e));
                }
            }
            Err(e) => log(&format!("accept failed: {}", e)),
        }
    }
}

/// Takes the daemon's lock (one daemon per socket) and records its pid.
fn lock_pid_file() -> Result<std::fs::File> {
    let p = proto::pid_path();
    let mut f = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&p).map_err(|e| Error::io(format!("opening '{}'", p.display()), e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let holder = std::fs::read_to_string(&p).unwrap_or_default();
        return Err(Error::new(ErrorKind::Busy, format!("a tarn daemon is already running (process {}; lock '{}')", holder.trim(), p.display())));
    }
    f.set_len(0).map_err(|e| Error::io(format!("writing '{}'", p.display()), e))?;
    writeln!(f, "{}", std::process::id()).map_err(|e| Error::io(format!("writing '{}'", p.display()), e))?;
    Ok(f)
}

fn serve_client(d: &state::Daemon, stream: UnixStream) {
    let Ok(w) = stream.try_clone() else { return };
    let w = parking_lot::Mutex::new(w);
    let mut r = BufReader::new(stream);
    loop {
        let req: Request = match proto::recv(&mut r) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(e) => {
                let _ = proto::send(&mut *w.lock(), &Response { error: Some(format!("bad request: {}", e)), ..Default::default() });
                return;
            }
        };
        let stop = matches!(req.cmd, Command::Stop);
        let resp = with_heartbeats(&w, || d.handle(req));
        if proto::send(&mut *w.lock(), &resp).is_err() {
            return;
        }
        if stop {
            d.shutdown();
        }
    }
}

/// Runs `work` while a second thread writes a heartbeat line to `w` every
/// `proto::HEARTBEAT` (see `client`, "Is anyone there?"); the heartbeats
/// have stopped when it returns, so the answer is the next line.
fn with_heartbeats<T>(w: &parking_lot::Mutex<UnixStream>, work: impl FnOnce() -> T) -> T {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(proto::HEARTBEAT) {
                if proto::send(&mut *w.lock(), &Response { working: true, ..Default::default() }).is_err() {
                    return;
                }
            }
        });
        let out = work();
        drop(done);
        out
    })
}

/// One line on the daemon's stderr (its log file when started by the CLI).
pub fn log(msg: &str) {
    eprintln!("{} tarn daemon[{}]: {}", utc(tarn_engine::sys::clock::now_secs()), std::process::id(), msg);
}

pub(crate) use tarn_engine::sys::clock::utc;

