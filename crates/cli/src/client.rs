//! The client side of the daemon: commands that act on imported pools and
//! mounts are sent to `tarn daemon` over its socket (see `daemon::proto`).
//! The first command that needs the daemon starts it: `tarn daemon
//! --foreground` in a new session (detached from the terminal, its output
//! appended to the log file beside the socket), then waits for the socket
//! to answer. If the daemon exits instead, the error quotes its last log
//! line.
//!
//! # Is anyone there?
//!
//! Connecting tells three cases apart: no daemon (no socket, or nobody
//! listening: start one), a daemon this user may not talk to (permission
//! denied on the socket: an error saying so — never "no daemon", never an
//! attempt to start a second one), and a daemon.
//!
//! A command may run for minutes (a big destroy, an import), so there is no
//! limit on how long one takes. Instead, while a request runs the daemon
//! sends a heartbeat line every [`proto::HEARTBEAT`]; the client waits at
//! most [`answer_wait`] (10 s, `TARN_DAEMON_TIMEOUT` seconds) for the next
//! line, heartbeat or answer. A daemon that sends neither — stopped with
//! SIGSTOP, or not scheduled at all — is reported as not answering, with
//! its state from `/proc` and what to do. Connecting has the same bound
//! (a stopped daemon's listen queue fills up). `daemon stop` of a stopped
//! daemon resumes it with SIGTERM pending, so it stops as on SIGTERM.

use std::io::BufReader;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use tarn_engine::{Error, ErrorKind, Result};

use crate::daemon::proto::{self, Command, Request, Response};

/// How long a starting daemon may take to bind its socket and answer
/// (importing its pools comes after, with heartbeats).
const START_WAIT: Duration = Duration::from_secs(60);

/// Default of [`answer_wait`].
const ANSWER_WAIT_DEFAULT: Duration = Duration::from_secs(10);

/// Longest silence from the daemon — no heartbeat, no answer — before the
/// client gives up: `TARN_DAEMON_TIMEOUT` seconds (fractions allowed), or
/// 10 s. Ten heartbeats: a loaded host delays one, not ten.
pub fn answer_wait() -> Duration {
    std::env::var("TARN_DAEMON_TIMEOUT")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e6)
        .map(Duration::from_secs_f64)
        .unwrap_or(ANSWER_WAIT_DEFAULT)
}

/// Sends one command, starting the daemon if none is running. Prints the
/// command's warnings to stderr and returns its output, or its error.
pub fn call(cmd: Command, tunables: &[String]) -> Result<String> {
    let stream = match connect()? {
        Some(s) => s,
        None => {
            start_with(&[], &[])?;
            connect()?.ok_or_else(|| Error::new(ErrorKind::Io, format!("the tarn daemon started but its socket '{}' is gone", proto::socket_path().display())))?
        }
    };
    finish(exchange(stream, &Request { tunables: tunables.to_vec(), cmd })?)
}

/// Sends one command to a running daemon; `None` if none is running.
pub fn call_running(cmd: Command) -> Result<Option<String>> {
    match connect()? {
        Some(s) => Ok(Some(finish(exchange(s, &Request { tunables: vec![], cmd })?)?)),
        None => Ok(None),
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

/// A connection to the daemon; `None` when no daemon is running (no
/// socket, or no one listening on it).
fn connect() -> Result<Option<UnixStream>> {
    let sock = proto::socket_path();
    let wait = answer_wait();
    let (tx, rx) = std::sync::mpsc::channel();
    let path = sock.clone();
    // A thread, because std's connect has no timeout: a stopped daemon's
    // full listen queue would block it. Left behind on a timeout, it ends
    // with the process.
    std::thread::spawn(move || {
        let _ = tx.send(UnixStream::connect(path));
    });
    match rx.recv_timeout(wait) {
        Ok(Ok(s)) => Ok(Some(s)),
        Ok(Err(e)) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => Ok(None),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(permission_denied(&sock)),
        Ok(Err(e)) => Err(Error::io(format!("connecting to the tarn daemon at '{}'", sock.display()), e)),
        Err(_) => Err(not_answering(&format!("accepted no connection on '{}' within {} s", sock.display(), wait.as_secs_f64()))),
    }
}

/// The socket is there but this user may not use it.
fn permission_denied(sock: &std::path::Path) -> Error {
    let who = match std::fs::metadata(sock).map(|m| m.uid()) {
        Ok(0) => "need root (run them with sudo)".to_string(),
        Ok(uid) => format!("need the daemon's user (uid {})", uid),
        Err(_) => "need the daemon's user".to_string(),
    };
    Error::new(ErrorKind::Busy, format!("permission denied on '{}': the tarn daemon's socket serves only its owner; tarn commands on pools, datasets and mounts {}", sock.display(), who))
}

/// The daemon's process state, from /proc: 'T' stopped, 't' traced, …
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid)).ok()?;
    // "pid (comm) S …": the comm may hold spaces and parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// "The daemon does not answer": which process, in what state, what to do.
fn not_answering(what: &str) -> Error {
    let log = proto::log_path();
    let msg = match proto::daemon_pid() {
        Some(pid) => match process_state(pid) {
            Some('T') => format!("the tarn daemon (process {}) {}: it is stopped (SIGSTOP); `kill -CONT {}` resumes it, `tarn daemon stop` stops it", pid, what, pid),
            Some('t') => format!("the tarn daemon (process {}) {}: a debugger holds it", pid, what),
            Some(_) => format!("the tarn daemon (process {}) {}: it may be wedged; see its log '{}'; `kill {}` stops it (`kill -9 {}` if that fails: what was not yet synced is lost)", pid, what, log.display(), pid, pid),
            None => format!("the tarn daemon {} and process {} is gone", what, pid),
        },
        None => format!("the tarn daemon {}", what),
    };
    Error::new(ErrorKind::Busy, msg)
}

/// Whether `e` is the client's "does not answer" error.
pub fn is_not_answering(e: &Error) -> bool {
    e.kind == ErrorKind::Busy && (e.msg.contains("sent nothing for") || e.msg.contains("accepted no connection"))
}

/// The daemon closed the connection before it answered: it exited or was
/// killed, before or while it carried the command out.
fn went_away() -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "the tarn daemon closed the connection without answering: it exited or was killed (see its log '{}'); the command may or may not have been carried out: check, then run it again (a new daemon starts)",
            proto::log_path().display()
        ),
    )
}

fn exchange(stream: UnixStream, req: &Request) -> Result<Response> {
    let lost = |e: std::io::Error| Error::io("talking to the tarn daemon", e);
    let wait = answer_wait();
    stream.set_read_timeout(Some(wait)).map_err(lost)?;
    stream.set_write_timeout(Some(wait)).map_err(lost)?;
    let mut w = stream.try_clone().map_err(lost)?;
    proto::send(&mut w, req).map_err(|e| if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) { went_away() } else { lost(e) })?;
    let mut r = BufReader::new(stream);
    loop {
        let resp: Response = match proto::recv(&mut r) {
            Ok(Some(resp)) => resp,
            Ok(None) => return Err(went_away()),
            // A daemon killed with the request in its listen queue resets it.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) => return Err(went_away()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(not_answering(&format!("sent nothing for {} s (no answer, no heartbeat)", wait.as_secs_f64())))
            }
            Err(e) => return Err(lost(e)),
        };
        if !resp.working {
            return Ok(resp);
        }
    }
}

/// Starts a detached daemon (with these `--tunable` settings for every
/// pool it opens, and `daemon` options such as `--metrics ADDR`) and waits
/// until it answers; returns its pid.
pub fn start_with(tunables: &[String], daemon_args: &[String]) -> Result<u32> {
    let sock = proto::socket_path();
    let log_path = proto::log_path();
    let cannot = |why: String| Error::new(ErrorKind::Io, format!("cannot start the tarn daemon (socket '{}'): {}", sock.display(), why));
    let denied = |what: &std::path::Path, e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied { " (no tarn daemon is running, and this user may not start one there)" } else { "" };
        cannot(format!("'{}': {}{}", what.display(), e, hint))
    };
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| denied(dir, e))?;
    }
    // Owner only: the log names datasets, files and devices.
    let log = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).map_err(|e| denied(&log_path, e))?;
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
        match call_running(Command::Ping) {
            Ok(Some(_)) => return Ok(child.id()),
            Err(e) if e.msg.starts_with("permission denied") => return Err(e),
            _ => {}
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

/// `tarn daemon stop` of a daemon that does not answer: one stopped with
/// SIGSTOP gets SIGTERM and then SIGCONT, so that it resumes with the
/// SIGTERM pending and shuts down as on SIGTERM (unmount, sync, close);
/// returns whether it was sent. A daemon in any other state is left alone.
pub fn stop_stopped_daemon() -> Option<u32> {
    let pid = proto::daemon_pid()?;
    if process_state(pid) != Some('T') {
        return None;
    }
    let p = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: signalling the pid recorded in the daemon's locked pid file.
    let sent = unsafe { libc::kill(p, libc::SIGTERM) == 0 && libc::kill(p, libc::SIGCONT) == 0 };
    sent.then_some(pid)
}

fn last_log_line(p: &std::path::Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message").to_string()
}
