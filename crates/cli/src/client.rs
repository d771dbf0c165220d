//! The client side of the daemon: commands that act on imported pools and
//! mounts are sent to `tarn daemon` over its socket (see `daemon::proto`).
//! The first command that needs the daemon starts it: `tarn daemon
//! --foreground` in a new session (detached from the terminal, its output
//! appended to the log file beside the socket), then waits for the socket
//! to answer. If the daemon exits instead, the error quotes its last log
//! line.

use std::io::BufReader;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use tarn_engine::{Error, ErrorKind, Result};

use crate::daemon::proto::{self, Command, Request, Response};

/// How long a starting daemon may take to import its pools and answer.
const START_WAIT: Duration = Duration::from_secs(60);

/// Sends one command, starting the daemon if none is running. Prints the
/// command's warnings to stderr and returns its output, or its error.
pub fn call(cmd: Command, tunables: &[String]) -> Result<String> {
    let stream = match connect() {
        Ok(s) => s,
        Err(_) => {
            start_with(&[], &[])?;
            connect().map_err(|e| Error::io(format!("connecting to the tarn daemon at '{}'", proto::socket_path().display()), e))?
        }
    };
    finish(exchange(stream, &Request { tunables: tunables.to_vec(), cmd })?)
}

/// Sends one command to a running daemon; `None` if none is running.
pub fn call_running(cmd: Command) -> Result<Option<String>> {
    match connect() {
        Ok(s) => Ok(Some(finish(exchange(s, &Request { tunables: vec![], cmd })?)?)),
        Err(_) => Ok(None),
    }
}

fn finish(r: Response) -> Result<String> {
    for w in &r.warnings {
        eprintln!("tarn: warning: {}", w);
    }
    match r.error {
        Some(e) => Err(Error::new(ErrorKind::Invalid, e)),
        None => Ok(r.output),
    }
}

fn connect() -> std::io::Result<UnixStream> {
    UnixStream::connect(proto::socket_path())
}

fn exchange(stream: UnixStream, req: &Request) -> Result<Response> {
    let lost = |e: std::io::Error| Error::io("talking to the tarn daemon", e);
    let mut w = stream.try_clone().map_err(lost)?;
    proto::send(&mut w, req).map_err(lost)?;
    let mut r = BufReader::new(stream);
    proto::recv(&mut r)
        .map_err(lost)?
        .ok_or_else(|| Error::new(ErrorKind::Io, format!("the tarn daemon closed the connection without answering (see its log '{}')", proto::log_path().display())))
}

/// Starts a detached daemon (with these `--tunable` settings for every
/// pool it opens, and `daemon` options such as `--metrics ADDR`) and waits
/// until it answers; returns its pid.
pub fn start_with(tunables: &[String], daemon_args: &[String]) -> Result<u32> {
    let sock = proto::socket_path();
    let log_path = proto::log_path();
    let cannot = |why: String| Error::new(ErrorKind::Io, format!("cannot start the tarn daemon (socket '{}'): {}", sock.display(), why));
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| cannot(format!("creating '{}': {}", dir.display(), e)))?;
    }
    // Owner only: the log names datasets, files and devices.
    let log = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).map_err(|e| cannot(format!("opening '{}': {}", log_path.display(), e)))?;
    let log2 = log.try_clone().map_err(|e| cannot(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| cannot(format!("finding the tarn executable: {}", e)))?;
    let mut cmd = Process::new(exe);
    for t in tunables {
        cmd.arg("--tunable").arg(t);
    }
    cmd.args(["daemon", "--foreground"]).args(daemon_args).stdin(Stdio::null()).stdout(log).stderr(log2);
    // SAFETY: setsid() is async-signal-safe and touches no memory of ours;
    // it detaches the daemon from this terminal and process group.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| cannot(e.to_string()))?;
    let t = Instant::now();
    while t.elapsed() < START_WAIT {
        if let Ok(Some(_)) = call_running(Command::Ping) {
            return Ok(child.id());
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Two commands starting a daemon at once: the one that lost the
            // lock exits, the winner answers shortly.
            let why = last_log_line(&log_path);
            if !why.contains("already running") {
                return Err(cannot(format!("it exited ({}): {}", status, why)));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(cannot(format!("it did not answer within {} s; see '{}'", START_WAIT.as_secs(), log_path.display())))
}

fn last_log_line(p: &std::path::Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message").to_string()
}
