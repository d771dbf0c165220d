//! `tarn pool events` in the daemon: the events of the live pools' rings
//! (`pool::events`), as one JSON [`EventsReply`] that the client prints
//! (`events_cmd`).
//!
//! A request takes the state lock only to find the pools' rings (each an
//! `Arc`, usable without the lock) and, for `-v`, to name the blocks the
//! events are about; it waits for new events without it. So a follower
//! (`-f`) never holds up other commands: it sends one request after
//! another, each with the cursors (pool guid → last eid seen) of the one
//! before, and each waits at most [`FOLLOW_WAIT_MAX`] on the engine's bell
//! (`events::wait_posted`) before answering, with nothing if nothing came.
//! A pool imported while a follower follows every pool is shown from the
//! events posted since it was opened (so is one whose damaged ring was
//! replaced, its eids starting again); a pool exported meanwhile goes
//! quiet, and shows again if it comes back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tarn_engine::pool::events::{posted_generation, show, wait_posted, Event, EventLog};
use tarn_engine::posix::errors::name_bookmarks;
use tarn_engine::{Error, Result};

use super::state::{Daemon, Out};

/// Longest a follower's request waits for an event before answering.
pub const FOLLOW_WAIT_MAX: Duration = Duration::from_secs(5);

/// What the client asks for.
#[derive(Debug, Serialize, Deserialize)]
pub struct EventsQuery {
    /// One pool, or every live pool.
    pub pool: Option<String>,
    /// Following: the events after these cursors, (pool guid, last eid
    /// seen); a pool not among them from the events posted since it was
    /// opened. `None`: every event of the rings.
    pub after: Option<Vec<(u64, u64)>>,
    /// How long to wait for an event when there is none (at most
    /// `FOLLOW_WAIT_MAX`).
    pub wait_ms: u64,
    /// Empty the rings instead (`-c`).
    pub clear: bool,
    /// Name the dataset and file of each block an event is about (`-v`).
    pub name_blocks: bool,
}

/// One event as the client prints it.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShownEvent {
    pub time_ns: u64,
    pub class: String,
    pub pool: String,
    pub eid: u64,
    /// The whole payload as `-v` shows it, (name, value) rendered.
    pub fields: Vec<(String, String)>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct EventsReply {
    /// Oldest first, across pools.
    pub events: Vec<ShownEvent>,
    /// (pool guid, last eid posted) of every pool asked: the next
    /// request's `after`.
    pub cursors: Vec<(u64, u64)>,
    /// Events `-c` removed.
    pub cleared: u64,
}

pub fn handle(d: &Daemon, q: EventsQuery, out: &mut Out) -> Result<()> {
    let rings = d.event_rings(q.pool.as_deref(), q.after.is_some(), out)?;
    let reply = if q.clear {
        EventsReply { cleared: rings.iter().map(|r| r.clear()).sum(), ..Default::default() }
    } else {
        let deadline = Instant::now() + Duration::from_millis(q.wait_ms).min(FOLLOW_WAIT_MAX);
        let (events, cursors) = loop {
            let seen = posted_generation();
            let (events, cursors) = collect(&rings, q.after.as_deref());
            let left = deadline.saturating_duration_since(Instant::now());
            if !events.is_empty() || left.is_zero() {
                break (events, cursors);
            }
            wait_posted(seen, left);
        };
        let names = if q.name_blocks { d.name_blocks(&events) } else { HashMap::new() };
        EventsReply { events: events.iter().map(|e| shown(e, names.get(&(e.pool_guid, e.eid)))).collect(), cursors, cleared: 0 }
    };
    out.text = serde_json::to_string(&reply).map_err(|e| Error::invalid(e.to_string()))?;
    Ok(())
}

/// The events of `rings` after the cursors, oldest first, and the new
/// cursors.
fn collect(rings: &[Arc<EventLog>], after: Option<&[(u64, u64)]>) -> (Vec<Event>, Vec<(u64, u64)>) {
    let mut events = Vec::new();
    let mut cursors = Vec::with_capacity(rings.len());
    for r in rings {
        // A cursor past the ring's last eid is from before a damaged ring
        // was replaced (its eids start again): the ring is new to it.
        let last = r.last_eid();
        let from = after.map(|a| match a.iter().find(|(g, _)| *g == r.guid()) {
            Some((_, eid)) if *eid <= last => *eid,
            _ => r.opened_eid() - 1,
        });
        let (evs, last) = r.since(from);
        events.extend(evs);
        cursors.push((r.guid(), last));
    }
    events.sort_by(|a, b| (a.time_ns, &a.pool, a.eid).cmp(&(b.time_ns, &b.pool, b.eid)));
    (events, cursors)
}

/// The dataset and file of a block an event names: (dataset, file).
pub type BlockName = (Option<String>, String);

/// `e` as the client prints it: the fields every event has, then its
/// payload, with the dataset and file of its block after the bookmark.
fn shown(e: &Event, name: Option<&BlockName>) -> ShownEvent {
    let q = |s: &str| format!("\"{}\"", s.escape_debug());
    let mut fields = vec![
        ("class".to_string(), q(&e.class)),
        ("eid".to_string(), e.eid.to_string()),
        ("time".to_string(), q(&time(e.time_ns))),
        ("pool".to_string(), q(&e.pool)),
        ("pool_guid".to_string(), format!("{:#x}", e.pool_guid)),
    ];
    for (n, v) in &e.fields {
        fields.push((n.clone(), show(v)));
        if let (Some((dataset, file)), "zio_blkid") = (name, n.as_str()) {
            if let Some(ds) = dataset {
                fields.push(("dataset".to_string(), q(ds)));
            }
            fields.push(("file".to_string(), q(file)));
        }
    }
    ShownEvent { time_ns: e.time_ns, class: e.class.clone(), pool: e.pool.clone(), eid: e.eid, fields }
}

/// `2026-11-22T03:04:05.123456789Z`.
pub fn time(ns: u64) -> String {
    let secs = super::utc(ns / 1_000_000_000);
    format!("{}.{:09}Z", secs.trim_end_matches('Z'), ns % 1_000_000_000)
}

impl Daemon {
    /// The rings of pool `name` (every live pool for `None`). A pool
    /// named in a first request must exist; while following, a pool gone
    /// meanwhile is skipped (it may come back).
    pub fn event_rings(&self, name: Option<&str>, following: bool, out: &mut Out) -> Result<Vec<Arc<EventLog>>> {
        let mut st = self.state();
        Ok(match name {
            Some(n) if !following => vec![st.live(n, out)?.pool.events().clone()],
            Some(n) => st.pools.get(n).map(|l| l.pool.events().clone()).into_iter().collect(),
            None => st.pools.values().map(|l| l.pool.events().clone()).collect(),
        })
    }

    /// The dataset and file of each block `events` name, by (pool guid,
    /// eid), for the pools still live.
    fn name_blocks(&self, events: &[Event]) -> HashMap<(u64, u64), BlockName> {
        let st = self.state();
        let mut names = HashMap::new();
        for live in st.pools.values() {
            let pool = &live.pool;
            let mine: Vec<(u64, tarn_engine::pool::errlog::Bookmark)> =
                events.iter().filter(|e| e.pool_guid == pool.guid()).filter_map(|e| Some((e.eid, e.bookmark()?))).collect();
            let marks: Vec<_> = mine.iter().map(|(_, b)| *b).collect();
            for ((eid, _), n) in mine.iter().zip(name_bookmarks(pool.datasets(), &marks)) {
                names.insert((pool.guid(), *eid), (n.dataset, n.name));
            }
        }
        names
    }
}
