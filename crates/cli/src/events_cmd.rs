//! The client side of `tarn pool events` (as `zpool events`): asks the
//! daemon for the events of one pool's ring or every pool's
//! (`daemon::events`) and prints them, `TIME CLASS` per event, the whole
//! payload with `-v`; `-f` goes on asking — each request carrying the
//! cursors of the one before and waiting in the daemon, without its state
//! lock, until an event comes or a few seconds pass — until interrupted.

use std::io::Write;

use clap::Args;
use serde::{Deserialize, Serialize};
use tarn_engine::{Error, Result};

use crate::client;
use crate::daemon::events::{EventsQuery, EventsReply, ShownEvent};
use crate::daemon::proto::Command;

/// How long each request of `-f` waits in the daemon for an event.
const FOLLOW_WAIT_MS: u64 = 2_000;

#[derive(Debug, Args, Serialize, Deserialize)]
pub struct EventsArgs {
    /// Follow: go on printing new events as they come, until interrupted
    #[arg(short = 'f', conflicts_with = "clear")]
    pub follow: bool,
    /// Print each event's whole payload (device, dataset, object, offset…)
    #[arg(short = 'v', conflicts_with = "clear")]
    pub verbose: bool,
    /// Scripted: no header, fields separated by a tab
    #[arg(short = 'H', conflicts_with = "clear")]
    pub scripted: bool,
    /// Clear the events of the pool (of every pool when none is named)
    #[arg(short = 'c')]
    pub clear: bool,
    /// The pool (default: every imported pool)
    pub pool: Option<String>,
}

fn fetch(q: EventsQuery, tunables: &[String]) -> Result<EventsReply> {
    let text = client::call(Command::Events(q), tunables)?;
    serde_json::from_str(&text).map_err(|e| Error::invalid(format!("the daemon's events cannot be read: {}", e)))
}

pub fn run(a: EventsArgs, tunables: &[String]) -> Result<()> {
    let mut q = EventsQuery { pool: a.pool.clone(), after: None, wait_ms: 0, clear: a.clear, name_blocks: a.verbose };
    if a.clear {
        let r = fetch(q, tunables)?;
        println!("cleared {} events", r.cleared);
        return Ok(());
    }
    let mut out = std::io::stdout();
    // After the first answer: a bad pool name is an error line alone.
    let mut header = !a.scripted;
    loop {
        let r = fetch(EventsQuery { after: q.after.take(), ..q }, tunables)?;
        if std::mem::take(&mut header) {
            let _ = writeln!(out, "{:<30} CLASS", "TIME");
        }
        for e in &r.events {
            let _ = write!(out, "{}", render(e, a.verbose, a.scripted));
        }
        // A closed pipe (`| head`) ends a follower here.
        if out.flush().is_err() || !a.follow {
            return Ok(());
        }
        q = EventsQuery { pool: a.pool.clone(), after: Some(r.cursors), wait_ms: FOLLOW_WAIT_MS, clear: false, name_blocks: a.verbose };
    }
}

/// One event: its `TIME CLASS` line, and with `verbose` its payload, one
/// `name = value` line each, and a blank line.
fn render(e: &ShownEvent, verbose: bool, scripted: bool) -> String {
    let time = crate::daemon::events::time(e.time_ns);
    let mut s = if scripted { format!("{}\t{}\n", time, e.class) } else { format!("{:<30} {}\n", time, e.class) };
    if verbose {
        for (n, v) in &e.fields {
            s.push_str(&format!("        {} = {}\n", n, v));
        }
        s.push('\n');
    }
    s
}
