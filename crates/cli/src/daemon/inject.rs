//! `tarn inject` in the daemon: fault injection into the leaf devices of
//! its live pools, as zinject's device handlers (`-d`, `-e`, `-T`, `-f`,
//! `-D`, `-c`; no arguments lists the handlers). The handlers themselves
//! live in the engine (`io::inject`, `pool::inject`); this module parses
//! the command into a handler definition — every value checked before any
//! pool is touched — and renders the list.
//!
//! Handler ids are unique across the daemon's pools, so `-c ID` needs no
//! pool. Handlers end when their pool closes (daemon stop) and block its
//! export and destroy until cleared.

use serde::{Deserialize, Serialize};
use tarn_engine::io::inject::{frequency_text, parse_delay, parse_frequency, Fault, InjectSpec, IoTypes, FREQ_ALWAYS};
use tarn_engine::pool::inject::Injection;
use tarn_engine::{Error, Result};

use super::{Out, State};
use crate::fmt;

/// `tarn inject`'s arguments (sent to the daemon as they are).
#[derive(Debug, clap::Args, Serialize, Deserialize)]
pub struct InjectArgs {
    /// The device: its path as `tarn pool status` shows it, or its guid
    #[arg(short = 'd', value_name = "DEVICE", requires = "pool")]
    pub device: Option<String>,
    /// The error: io (EIO), checksum (reads return damaged data, counted as
    /// checksum errors), nxio (the device vanishes: every I/O fails, and it
    /// is REMOVED). Default: io
    #[arg(short = 'e', value_name = "ERROR", value_parser = ["io", "checksum", "nxio"], requires = "device", conflicts_with = "delay")]
    pub error: Option<String>,
    /// The I/O it applies to: read, write, or all (reads, writes and cache
    /// flushes). Default: all
    #[arg(short = 'T', value_name = "TYPE", value_parser = ["read", "write", "all"], requires = "device")]
    pub io: Option<String>,
    /// Inject into this percentage of the matching I/O, 0.0001 to 100.
    /// Default: 100
    #[arg(short = 'f', value_name = "PCT", requires = "device", allow_hyphen_values = true)]
    pub freq: Option<String>,
    /// Delay each matching I/O by MS milliseconds (1 to 10000); with
    /// LANES, the device serves that many I/Os at a time, as zinject -D
    #[arg(short = 'D', value_name = "MS[:LANES]", requires = "device", allow_hyphen_values = true)]
    pub delay: Option<String>,
    /// Clear handler ID, or all handlers
    #[arg(short = 'c', value_name = "ID|all", conflicts_with_all = ["device", "error", "io", "freq", "delay", "pool"], allow_hyphen_values = true)]
    pub clear: Option<String>,
    /// The pool (with -d)
    #[arg(requires = "device")]
    pub pool: Option<String>,
}

impl InjectArgs {
    /// A device given by a path that exists here is the caller's path:
    /// made absolute, as the daemon does not share the working directory.
    pub fn absolutize(&mut self) {
        if let Some(d) = &mut self.device {
            crate::pool_cmd::absolutize_device_name(d);
        }
    }

    /// The handler `-d` asks for, every value checked.
    fn spec(&self) -> Result<InjectSpec> {
        let fault = match (self.delay.as_deref(), self.error.as_deref()) {
            (Some(d), _) => parse_delay(d)?,
            (None, None | Some("io")) => Fault::Io,
            (None, Some("checksum")) => Fault::Checksum,
            (None, Some("nxio")) => Fault::Nxio,
            (None, Some(e)) => return Err(Error::invalid(format!("invalid error '{}': io, checksum or nxio", tarn_engine::error::printable(e)))),
        };
        let io = self.io.as_deref().map_or(Ok(IoTypes::All), IoTypes::parse)?;
        let freq = self.freq.as_deref().map_or(Ok(FREQ_ALWAYS), parse_frequency)?;
        InjectSpec::new(fault, io, freq)
    }
}

pub fn handle(st: &mut State, a: InjectArgs, out: &mut Out) -> Result<()> {
    if let Some(which) = &a.clear {
        return clear(st, which, out);
    }
    match (&a.device, &a.pool) {
        (Some(device), Some(pool)) => {
            let spec = a.spec()?;
            let live = st.live(pool, out)?;
            let id = live.pool.inject(device, spec)?;
            let added = live.pool.injections().into_iter().find(|i| i.id == id).ok_or_else(|| Error::invalid(format!("handler {} was cleared as it was added", id)))?;
            out.line(format!("added handler {} to pool '{}', device '{}': {}", id, pool, added.device, what(&added.spec)));
            Ok(())
        }
        (None, None) => {
            list(st, out);
            Ok(())
        }
        _ => Err(Error::invalid("tarn inject -d DEVICE [-e ERROR] [-T TYPE] [-f PCT] [-D MS[:LANES]] POOL, or -c ID|all, or nothing to list")),
    }
}

/// A handler's effect in words, for the line `-d` prints.
fn what(s: &InjectSpec) -> String {
    let on = match s.io {
        IoTypes::All => "all I/O".to_string(),
        io => format!("{}s", io.name()),
    };
    let what = match s.fault {
        Fault::Io => format!("I/O errors (EIO) on {}", on),
        Fault::Checksum => "checksum damage to what reads return".to_string(),
        Fault::Nxio => "the device vanishes: every I/O fails (ENXIO)".to_string(),
        Fault::Delay { ms, lanes: None } => format!("{} ms more for {}", ms, on),
        Fault::Delay { ms, lanes: Some(n) } => format!("{} ms for {}, {} at a time", ms, on, n),
    };
    format!("{}, {} of the time", what, frequency_text(s.freq))
}

/// The handlers of every live pool, as zinject lists them.
fn list(st: &State, out: &mut Out) {
    let rows: Vec<Vec<String>> = st
        .pools
        .iter()
        .flat_map(|(name, live)| live.pool.injections().into_iter().map(move |i| row(name, &i)))
        .collect();
    if rows.is_empty() {
        out.line("No handlers registered.");
        return;
    }
    out.text.push_str(&fmt::table(&["ID", "POOL", "DEVICE", "GUID", "TYPE", "ERROR", "FREQ", "INJECTED"], &rows, false));
}

fn row(pool: &str, i: &Injection) -> Vec<String> {
    vec![i.id.to_string(), pool.to_string(), i.device.clone(), i.guid.to_string(), i.spec.io.name().into(), i.spec.fault.name(), frequency_text(i.spec.freq), i.injected.to_string()]
}

/// `-c ID|all`: the next I/O of the device runs without the handler.
fn clear(st: &State, which: &str, out: &mut Out) -> Result<()> {
    if which == "all" {
        let n: usize = st.pools.values().map(|l| l.pool.clear_injections()).sum();
        out.line(format!("removed all registered handlers ({})", n));
        return Ok(());
    }
    let id: u64 = which.parse().map_err(|_| Error::invalid(format!("invalid handler id '{}': a number `tarn inject` lists, or all", tarn_engine::error::printable(which))))?;
    if !st.pools.values().any(|l| l.pool.clear_injection(id)) {
        return Err(Error::not_found(format!("no handler {} (`tarn inject` lists them)", id)));
    }
    out.line(format!("removed handler {}", id));
    Ok(())
}
