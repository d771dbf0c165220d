//! The daemon's protocol: over a Unix stream socket, one JSON [`Request`]
//! per line, answered by one JSON [`Response`] per line — preceded, while
//! the request runs, by heartbeat lines (`"working":true`) every
//! [`HEARTBEAT`]; a client may send several requests on one connection. Each command family contributes one
//! variant of [`Command`] (its clap arguments, serialized as they are), so
//! a new family (datasets) adds a variant and a handler module.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::pool_cmd::PoolCmd;

/// Longest request or response line accepted (a status of many pools fits
/// easily; a runaway peer does not exhaust memory).
const LINE_MAX_BYTES: u64 = 16 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    /// `--tunable` settings for the pools this request opens (create, import).
    pub tunables: Vec<String>,
    pub cmd: Command,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Command {
    /// Is the daemon there? Answers with its process id.
    Ping,
    /// Unmount everything, close the pools, exit (as SIGTERM).
    Stop,
    Pool(PoolCmd),
    Mount(super::mounts::MountArgs),
    Unmount(super::mounts::UnmountArgs),
    /// Metrics snapshots of the named pools (none: every live pool) and a
    /// host memory sample, as a JSON `observe::MetricsReply`.
    Metrics { pools: Vec<String> },
    Tunable(super::observe::TunableCmd),
    /// create, list, get, set, inherit, snapshot, rollback, clone, destroy, rename
    Dataset(super::datasets::DatasetCmd),
    /// Add, list or clear fault injection handlers.
    Inject(super::inject::InjectArgs),
    /// `pool events`: the events of the pools' rings as a JSON
    /// `events::EventsReply` (or a clear, or one step of a follow).
    Events(super::events::EventsQuery),
}

/// What the command printed, warnings for stderr, or the error that ended it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub output: String,
    pub warnings: Vec<String>,
    pub error: Option<String>,
    /// A heartbeat, not the answer: the request is still being carried out
    /// (sent every [`HEARTBEAT`]; the answer follows on the same stream).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub working: bool,
}

/// How often the daemon says it is still working on a request: a client
/// that hears nothing for ten of these gives up (`client::answer_wait`),
/// however long the command itself takes.
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// The socket: `TARN_SOCKET`, or /run/tarn/tarn.sock.
pub fn socket_path() -> PathBuf {
    std::env::var_os("TARN_SOCKET").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/tarn/tarn.sock"))
}

/// Holds the daemon's lock and its process id, beside the socket.
pub fn pid_path() -> PathBuf {
    socket_path().with_extension("pid")
}

/// Where a daemon started by the CLI writes its log, beside the socket.
pub fn log_path() -> PathBuf {
    socket_path().with_extension("log")
}

/// The running daemon's process id, from its pid file (it may be stale).
pub fn daemon_pid() -> Option<u32> {
    std::fs::read_to_string(pid_path()).ok()?.trim().parse().ok()
}

pub fn send<T: Serialize>(w: &mut impl Write, v: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(v).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// The next message, or `None` at end of stream.
pub fn recv<T: DeserializeOwned>(r: &mut impl BufRead) -> io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = io::Read::take(&mut *r, LINE_MAX_BYTES).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("message longer than {LINE_MAX_BYTES} bytes or cut short")));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
