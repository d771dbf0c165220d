//! The pool's events (OpenZFS's zevents, what `zpool events` lists): a
//! bounded ring of what happened to the pool — a damaged copy met by a
//! read, a block lost, a device faulted, a scrub started or finished, the
//! pool created, imported or exported, a cache device added — kept in the
//! pool, written to the daemon log, and counted for Prometheus.
//!
//! ## An event
//! An event id (`eid`, per pool, monotonic: it goes on across export,
//! import, daemon restarts and `events -c`), the time in nanoseconds, a
//! class with OpenZFS's name (`ereport.fs.zfs.checksum`,
//! `sysevent.fs.zfs.scrub_finish`, …, see [`class`]), the pool's name and
//! guid, and a payload of named fields as OpenZFS's event nvlists have
//! them: `vdev_path` and `vdev_guid` for an event about a device;
//! `zio_objset`, `zio_object`, `zio_level`, `zio_blkid` (the block's
//! bookmark, `errlog::Bookmark`), `zio_offset`, `zio_size` and `zio_err`
//! for a damaged or unreadable copy; the scan's figures for a scrub's end.
//! The pool layer records numbers only: naming the object set as a dataset
//! and the object as a file is the caller's (`posix::errors`), as for the
//! error log.
//!
//! ## Where events come from
//! ```text
//!   PoolCore::copies_failed   one checksum or io ereport per failed copy
//!                             (served or not) on each leaf that failed —
//!                             a mirror's child too (`ReadCheck::failed`) —,
//!                             a data ereport per block newly lost (no
//!                             good copy: the error log)
//!   scan::scrub, resilver     a checksum ereport per bad copy they meet
//!   PoolCore::leaf_faulted    statechange (ONLINE → FAULTED/REMOVED)
//!   pool offline/online/clear statechange (→ OFFLINE, → ONLINE),
//!                             vdev_online, vdev_clear
//!   Pool                      pool_create/import/export/destroy,
//!                             scrub_start/paused/resume/finish/abort,
//!                             resilver_start/finish, vdev_add/vdev_remove/
//!                             config_sync (cache devices)
//! ```
//!
//! ## Lifetime of an event
//! ```text
//!   post ──▶ ring (memory, eid assigned) ──▶ daemon log line ──▶ followers woken
//!              │   (oldest dropped past zfs_zevent_len_max)
//!              └──▶ the next sync writes the whole ring to its MOS object
//! ```
//! The ring is one MOS object, a key/value map named by the pool
//! directory's `events` key (docs/format.md §11d): one entry per event,
//! keyed by its eid, and the next eid. It is rewritten whole in every txg
//! in which the ring changed (syncing context, as the error log), so it
//! survives export, import and a power cut as of the last synced txg. An
//! event posted while a txg syncs is that txg's or the next one's. A ring
//! that cannot be read at import costs its events, not the import: the
//! pool opens with a warning and a new, empty ring in a new object (the
//! old one's content may be what is damaged, so it is never read again).
//! A read-only pool keeps its ring in memory only.
//!
//! ## Rate limits (OpenZFS's `zfs_checksum_events_per_second` and
//! duplicate suppression)
//! A rotten device can fail thousands of reads a second; each would be an
//! ereport. Two filters stand between a failed copy and the ring:
//! - **duplicates**: a copy (device, offset, class) reported in the last
//!   [`DUPLICATE_EXPIRE`] (OpenZFS's `zfs_zevent_retain_expire_secs`, 900 s)
//!   is not reported again, however often it is read; [`RECENT_MAX`]
//!   copies are remembered, then forgotten all at once;
//! - **rate**: at most `zfs_checksum_events_per_second` (20) ereports per
//!   device per second — OpenZFS limits checksum ereports per vdev so; tarn
//!   limits io ereports the same way (a device failing every read floods
//!   as surely), and data ereports per pool. What is held back is counted
//!   (`dropped`, a Prometheus counter) and said in the next daemon-log line
//!   of that device ("N similar reports held back").
//!
//! Sysevents (pool, scrub, device state) are never limited: each comes
//! from an administrator's command or a state change that happens once.
//! So a flood of ereports can push older events out of the ring, but never
//! more than the devices' rate allows per second.
//!
//! ## Followers
//! `tarn pool events -f` must not hold the daemon's state lock while it
//! waits. Every post rings one process-wide bell (a counter and a condition
//! variable, [`posted_generation`] / [`wait_posted`]); a follower notes the
//! generation, looks for events after its cursor (eid) in the rings it
//! holds, and sleeps on the bell only if there are none.
//!
//! ## Invariants
//! - the ring holds at most `len_max` events, in strictly ascending eid
//!   order, every eid below `next_eid` ([`EventLog::check_invariants`],
//!   run after every change in debug builds);
//! - `dirty` is set by every change and cleared only by a flush, which
//!   writes the ring of that moment;
//! - no lock of this module is held while another lock is taken, the MOS is
//!   read or written, or the daemon log is written: posting is safe from
//!   any context (read paths, the sync thread, an I/O thread's fault hook).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use tarn_ondisk::event::{cut_text, valid_name, EventRecord, FIELDS_MAX};
use tarn_ondisk::kv::{self, KvMap};

pub use tarn_ondisk::event::FieldValue;

use super::errlog::Bookmark;
use crate::error::{Error, Result};
use crate::object::Objset;
use crate::tunables::Tunables;

/// The classes tarn posts, with OpenZFS's names.
pub mod class {
    /// A copy failed its checksum.
    pub const CHECKSUM: &str = "ereport.fs.zfs.checksum";
    /// A copy could not be read from its device.
    pub const IO: &str = "ereport.fs.zfs.io";
    /// A block no copy of which could be read (a new permanent error).
    pub const DATA: &str = "ereport.fs.zfs.data";
    /// A device left ONLINE (faulted, removed).
    pub const STATECHANGE: &str = "resource.fs.zfs.statechange";
    pub const SCRUB_START: &str = "sysevent.fs.zfs.scrub_start";
    pub const SCRUB_FINISH: &str = "sysevent.fs.zfs.scrub_finish";
    pub const SCRUB_ABORT: &str = "sysevent.fs.zfs.scrub_abort";
    pub const SCRUB_PAUSED: &str = "sysevent.fs.zfs.scrub_paused";
    pub const SCRUB_RESUME: &str = "sysevent.fs.zfs.scrub_resume";
    pub const RESILVER_START: &str = "sysevent.fs.zfs.resilver_start";
    pub const RESILVER_FINISH: &str = "sysevent.fs.zfs.resilver_finish";
    /// A leaf taken back into service (`pool online`, `pool clear`).
    pub const VDEV_ONLINE: &str = "sysevent.fs.zfs.vdev_online";
    pub const POOL_CREATE: &str = "sysevent.fs.zfs.pool_create";
    pub const POOL_IMPORT: &str = "sysevent.fs.zfs.pool_import";
    pub const POOL_EXPORT: &str = "sysevent.fs.zfs.pool_export";
    pub const POOL_DESTROY: &str = "sysevent.fs.zfs.pool_destroy";
    pub const VDEV_ADD: &str = "sysevent.fs.zfs.vdev_add";
    pub const VDEV_REMOVE: &str = "sysevent.fs.zfs.vdev_remove";
    /// Import discarded intent-log records on a missing log device
    /// (`pool import --missing-log`).
    pub const LOG_DISCARDED: &str = "ereport.fs.zfs.log_replay";
    /// A device attached, or starting to replace another (`pool attach`,
    /// `pool replace`).
    pub const VDEV_ATTACH: &str = "sysevent.fs.zfs.vdev_attach";
    /// A hot spare stood in for a device, or is available again
    /// (`pool::spare`).
    pub const VDEV_SPARE: &str = "sysevent.fs.zfs.vdev_spare";
    /// Device error counts reset (`pool clear`).
    pub const VDEV_CLEAR: &str = "sysevent.fs.zfs.vdev_clear";
    /// The pool's configuration on disk changed (cache devices).
    pub const CONFIG_SYNC: &str = "sysevent.fs.zfs.config_sync";
}

/// A copy reported within this long is not reported again (OpenZFS's
/// `zfs_zevent_retain_expire_secs`).
pub const DUPLICATE_EXPIRE: Duration = Duration::from_secs(900);
/// Copies remembered as reported (OpenZFS's `zfs_zevent_retain_max` is
/// 2,000; tarn keeps more, as its error log did before events).
pub const RECENT_MAX: usize = 65_536;

/// The key of the next event id in the ring's object.
const KEY_NEXT_EID: &str = "next_eid";
/// Events are stored under `e:` and their eid in 16 hex digits, so that
/// the map's order is the eids'.
const KEY_EVENT_PREFIX: &str = "e:";

/// One event (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub eid: u64,
    /// Nanoseconds since the epoch.
    pub time_ns: u64,
    pub class: String,
    pub pool: String,
    pub pool_guid: u64,
    pub fields: Vec<(String, FieldValue)>,
}

impl Event {
    pub fn field(&self, name: &str) -> Option<&FieldValue> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// A numeric field's value.
    pub fn number(&self, name: &str) -> Option<u64> {
        match self.field(name)? {
            FieldValue::Dec(v) | FieldValue::Hex(v) => Some(*v),
            FieldValue::Text(_) => None,
        }
    }

    /// The bookmark of the block the event is about, if it names one.
    pub fn bookmark(&self) -> Option<Bookmark> {
        let level = u8::try_from(self.number("zio_level")?).ok()?;
        Some(Bookmark { objset: self.number("zio_objset")?, object: self.number("zio_object")?, level, blkid: self.number("zio_blkid")? })
    }
}

/// What a poster says: a class, fields and the daemon-log line (the
/// fields rendered when it gives none).
pub struct Post {
    class: &'static str,
    fields: Vec<(String, FieldValue)>,
    line: Option<String>,
}

impl Post {
    pub fn new(class: &'static str) -> Post {
        Post { class, fields: Vec::new(), line: None }
    }

    fn field(mut self, name: &str, v: FieldValue) -> Post {
        // The names are the posters' constants: a bad one is a bug.
        assert!(valid_name(name), "event {}: bad field name '{}'", self.class, name);
        assert!(self.fields.iter().all(|(n, _)| n != name), "event {}: field '{}' twice", self.class, name);
        assert!(self.fields.len() < FIELDS_MAX, "event {}: more than {} fields", self.class, FIELDS_MAX);
        self.fields.push((name.to_string(), v));
        self
    }

    /// A number shown in decimal.
    pub fn dec(self, name: &str, v: u64) -> Post {
        self.field(name, FieldValue::Dec(v))
    }

    /// A number shown in hex.
    pub fn hex(self, name: &str, v: u64) -> Post {
        self.field(name, FieldValue::Hex(v))
    }

    /// A text, cut to the format's bound.
    pub fn text(self, name: &str, s: &str) -> Post {
        self.field(name, FieldValue::Text(cut_text(s).to_string()))
    }

    /// The device the event is about.
    pub fn vdev(self, path: &str, guid: u64) -> Post {
        self.text("vdev_path", path).hex("vdev_guid", guid)
    }

    /// The block the event is about.
    pub fn bookmark(self, b: &Bookmark) -> Post {
        self.dec("zio_objset", b.objset).dec("zio_object", b.object).dec("zio_level", u64::from(b.level)).dec("zio_blkid", b.blkid)
    }

    /// The daemon-log line (after "pool 'P': CLASS: ").
    pub fn line(mut self, line: String) -> Post {
        self.line = Some(line);
        self
    }
}

/// What an ereport is limited by: its device (a vdev guid, or the pool's
/// guid for pool-wide ereports) and, for a copy, its offset there.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub key: u64,
    pub offset: Option<u64>,
}

/// The ring's bounds, from the tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLimits {
    /// `zfs_zevent_len_max`: events the ring keeps.
    pub len_max: usize,
    /// `zfs_checksum_events_per_second`: ereports per device per second.
    pub per_second: u32,
}

impl EventLimits {
    pub fn from_tunables(t: &Tunables) -> EventLimits {
        EventLimits { len_max: usize::try_from(t.zfs_zevent_len_max).unwrap_or(usize::MAX), per_second: t.zfs_checksum_events_per_second }
    }
}

/// The ring's figures since the pool was opened (Prometheus).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventStats {
    /// Events posted, by class.
    pub posted: BTreeMap<String, u64>,
    /// Ereports held back by the rate limit, and copies not reported again.
    pub dropped: u64,
    pub duplicates: u64,
    /// Events in the ring now.
    pub len: u64,
}

struct Ring {
    events: VecDeque<Event>,
    /// The eid the next event gets (≥ 1).
    next_eid: u64,
    len_max: usize,
    dirty: bool,
    /// The MOS object holding the ring (0: none yet).
    object: u64,
}

impl Ring {
    /// Drops the oldest events past `len_max`; true if any went.
    fn trim(&mut self) -> bool {
        let over = self.events.len().saturating_sub(self.len_max);
        self.events.drain(..over);
        over > 0
    }
}

/// One second's ereports of a device.
struct Window {
    start: Instant,
    posts: u32,
    /// Held back since the last line printed for the device.
    held: u64,
}

/// The filters between a failed copy and the ring (see the module docs).
struct Limiter {
    per_second: u32,
    /// (device, offset, class) → when it was last reported.
    recent: HashMap<(u64, u64, &'static str), Instant>,
    windows: HashMap<u64, Window>,
}

enum Verdict {
    /// Post it; `held` ereports of the device were held back before it.
    Admit { held: u64 },
    Duplicate,
    Limited,
}

impl Limiter {
    fn admit(&mut self, limit: Limit, class: &'static str, now: Instant) -> Verdict {
        let copy = limit.offset.map(|o| (limit.key, o, class));
        if let Some(when) = copy.and_then(|c| self.recent.get(&c)) {
            if now.saturating_duration_since(*when) < DUPLICATE_EXPIRE {
                return Verdict::Duplicate;
            }
        }
        let w = self.windows.entry(limit.key).or_insert(Window { start: now, posts: 0, held: 0 });
        if now.saturating_duration_since(w.start) >= Duration::from_secs(1) {
            w.start = now;
            w.posts = 0;
        }
        if w.posts >= self.per_second {
            w.held += 1;
            return Verdict::Limited;
        }
        w.posts += 1;
        let held = std::mem::take(&mut w.held);
        if let Some(c) = copy {
            if self.recent.len() >= RECENT_MAX {
                self.recent.clear();
            }
            self.recent.insert(c, now);
        }
        Verdict::Admit { held }
    }
}

/// A pool's event ring (see the module docs).
pub struct EventLog {
    pool: String,
    guid: u64,
    ring: Mutex<Ring>,
    limiter: Mutex<Limiter>,
    posted: Mutex<BTreeMap<&'static str, u64>>,
    dropped: AtomicU64,
    duplicates: AtomicU64,
    /// The first eid posted since the pool was opened.
    opened_eid: AtomicU64,
}

/// Where event lines go: the daemon sets its log (`set_log_sink`);
/// without one, ereports and state changes go to stderr, as the error
/// log's reports did before events.
static SINK: RwLock<Option<fn(&str)>> = RwLock::new(None);

/// Sends every event's line to `f` (the daemon's log) from now on.
pub fn set_log_sink(f: fn(&str)) {
    *SINK.write() = Some(f);
}

fn log_line(class: &str, line: &str) {
    let sink = *SINK.read();
    match sink {
        Some(f) => f(line),
        None if !class.starts_with("sysevent.") => eprintln!("tarn: {}", line),
        None => {}
    }
}

/// Posts so far in this process (the bell followers wait on).
static POSTED: Mutex<u64> = Mutex::new(0);
static POSTED_CV: Condvar = Condvar::new();

/// The bell's count now: a follower notes it before looking for events.
pub fn posted_generation() -> u64 {
    *POSTED.lock()
}

/// Waits until an event is posted after generation `seen` or `timeout`
/// passes; returns the generation then.
pub fn wait_posted(seen: u64, timeout: Duration) -> u64 {
    let deadline = Instant::now() + timeout;
    let mut g = POSTED.lock();
    while *g == seen {
        if POSTED_CV.wait_until(&mut g, deadline).timed_out() {
            break;
        }
    }
    *g
}

fn ring_bell() {
    *POSTED.lock() += 1;
    POSTED_CV.notify_all();
}

impl EventLog {
    pub fn new(pool: &str, guid: u64, limits: EventLimits) -> EventLog {
        assert!(limits.len_max >= 1, "pool '{}': an event ring of no events", pool);
        EventLog {
            pool: pool.to_string(),
            guid,
            ring: Mutex::new(Ring { events: VecDeque::new(), next_eid: 1, len_max: limits.len_max, dirty: false, object: 0 }),
            limiter: Mutex::new(Limiter { per_second: limits.per_second, recent: HashMap::new(), windows: HashMap::new() }),
            posted: Mutex::new(BTreeMap::new()),
            dropped: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            opened_eid: AtomicU64::new(1),
        }
    }

    /// Applies changed tunables (the ring shrinks at once).
    pub fn set_limits(&self, limits: EventLimits) {
        assert!(limits.len_max >= 1, "pool '{}': an event ring of no events", self.pool);
        self.limiter.lock().per_second = limits.per_second;
        let mut r = self.ring.lock();
        r.len_max = limits.len_max;
        if r.trim() {
            r.dirty = true;
        }
        self.check_ring(&r);
    }

    /// Posts an event that no limit applies to; returns its eid.
    pub fn post(&self, p: Post) -> u64 {
        self.post_now(p, 0)
    }

    /// Posts an ereport unless `limit` holds it back (see the module
    /// docs); `make` runs only for one that is posted. Returns its eid.
    pub fn post_limited(&self, limit: Limit, class: &'static str, make: impl FnOnce() -> Post) -> Option<u64> {
        self.post_limited_at(limit, class, Instant::now(), make)
    }

    fn post_limited_at(&self, limit: Limit, class: &'static str, now: Instant, make: impl FnOnce() -> Post) -> Option<u64> {
        let verdict = self.limiter.lock().admit(limit, class, now);
        match verdict {
            Verdict::Admit { held } => {
                let p = make();
                assert_eq!(p.class, class, "pool '{}': an ereport limited as {} posted as {}", self.pool, class, p.class);
                Some(self.post_now(p, held))
            }
            Verdict::Duplicate => {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                None
            }
            Verdict::Limited => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn post_now(&self, p: Post, held: u64) -> u64 {
        let time_ns = crate::sys::clock::now_ns();
        let line = match &p.line {
            Some(l) => l.clone(),
            None => p.fields.iter().map(|(n, v)| format!("{}={}", n, show(v))).collect::<Vec<_>>().join(" "),
        };
        let eid = {
            let mut r = self.ring.lock();
            let eid = r.next_eid;
            r.next_eid += 1;
            r.events.push_back(Event { eid, time_ns, class: p.class.to_string(), pool: self.pool.clone(), pool_guid: self.guid, fields: p.fields });
            r.trim();
            r.dirty = true;
            self.check_ring(&r);
            eid
        };
        *self.posted.lock().entry(p.class).or_insert(0) += 1;
        let more = if held > 0 { format!(" ({} similar reports held back)", held) } else { String::new() };
        let sep = if line.is_empty() { "" } else { ": " };
        log_line(p.class, &format!("pool '{}': {}{}{}{}", self.pool, p.class, sep, line, more));
        ring_bell();
        eid
    }

    /// The events after eid `after` (all of them for `None`), oldest
    /// first, and the last eid posted so far (0: none ever).
    pub fn since(&self, after: Option<u64>) -> (Vec<Event>, u64) {
        let r = self.ring.lock();
        let evs = r.events.iter().filter(|e| after.is_none_or(|a| e.eid > a)).cloned().collect();
        (evs, r.next_eid - 1)
    }

    /// The last eid posted so far (0: none ever).
    pub fn last_eid(&self) -> u64 {
        self.ring.lock().next_eid - 1
    }

    /// The pool's guid (a follower's cursors are by guid: names can be
    /// reused).
    pub fn guid(&self) -> u64 {
        self.guid
    }

    /// The first eid posted since the pool was opened: a follower that
    /// meets the pool for the first time starts there.
    pub fn opened_eid(&self) -> u64 {
        self.opened_eid.load(Ordering::Acquire)
    }

    /// Empties the ring (`events -c`; eids go on); returns how many went.
    pub fn clear(&self) -> u64 {
        let mut r = self.ring.lock();
        let n = r.events.len() as u64;
        if n > 0 {
            r.events.clear();
            r.dirty = true;
        }
        n
    }

    pub fn stats(&self) -> EventStats {
        EventStats {
            posted: self.posted.lock().iter().map(|(c, n)| (c.to_string(), *n)).collect(),
            dropped: self.dropped.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            len: self.ring.lock().events.len() as u64,
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.ring.lock().dirty
    }

    /// The MOS object holding the ring (0: not written yet).
    pub fn object(&self) -> u64 {
        self.ring.lock().object
    }

    /// Ring invariants (see the module docs); cheap enough for debug
    /// builds after every change.
    fn check_ring(&self, r: &Ring) {
        if !cfg!(debug_assertions) {
            return;
        }
        assert!(r.events.len() <= r.len_max, "pool '{}': {} events in a ring of {}", self.pool, r.events.len(), r.len_max);
        assert!(r.next_eid >= 1, "pool '{}': next eid 0", self.pool);
        for (a, b) in r.events.iter().zip(r.events.iter().skip(1)) {
            assert!(a.eid < b.eid, "pool '{}': event {} before {}", self.pool, a.eid, b.eid);
        }
        if let Some(last) = r.events.back() {
            assert!(last.eid < r.next_eid, "pool '{}': event {} at next eid {}", self.pool, last.eid, r.next_eid);
        }
    }

    /// Loads the ring from its MOS object (import); on an error the ring
    /// is left as it was (empty, no object).
    pub(crate) fn load(&self, mos: &Objset, obj: u64) -> Result<()> {
        let ctx = |e: Error| e.context(format!("events (MOS object {})", obj));
        let map = super::read_kv(mos, obj).map_err(ctx)?;
        let (events, next_eid) = self.decode(&map).map_err(ctx)?;
        let mut r = self.ring.lock();
        r.events = events;
        r.next_eid = next_eid;
        r.object = obj;
        r.dirty = r.trim();
        self.check_ring(&r);
        self.opened_eid.store(next_eid, Ordering::Release);
        Ok(())
    }

    fn decode(&self, map: &KvMap) -> Result<(VecDeque<Event>, u64)> {
        let next = kv::get_u64(map, KEY_NEXT_EID).filter(|&n| n >= 1).ok_or_else(|| Error::corrupt("no next event id"))?;
        let mut events = VecDeque::new();
        for (k, v) in map.iter().filter(|(k, _)| k.as_str() != KEY_NEXT_EID) {
            let eid = k
                .strip_prefix(KEY_EVENT_PREFIX)
                .filter(|h| h.len() == 16)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .filter(|&e| e >= 1 && e < next)
                .ok_or_else(|| Error::corrupt(format!("bad key '{}' (next event id {})", k, next)))?;
            let rec = EventRecord::decode(v).map_err(|e| Error::corrupt(format!("event {}: {}", eid, e)))?;
            events.push_back(Event { eid, time_ns: rec.time_ns, class: rec.class, pool: self.pool.clone(), pool_guid: self.guid, fields: rec.fields });
        }
        Ok((events, next))
    }

    /// Writes the ring into `txg` when it changed (syncing context);
    /// returns the object's number when this flush created it
    /// (`rewrite_kv`). As the error log's flush: the ring is copied under
    /// its lock and written without it (writing reads MOS blocks, and a
    /// read may post).
    pub(crate) fn flush(&self, mos: &Objset, txg: u64) -> Result<Option<u64>> {
        let (obj, events, next_eid) = {
            let mut r = self.ring.lock();
            if !r.dirty {
                return Ok(None);
            }
            // Changes from here on are the next txg's.
            r.dirty = false;
            (r.object, r.events.clone(), r.next_eid)
        };
        let mut map = KvMap::new();
        kv::put_u64(&mut map, KEY_NEXT_EID, next_eid);
        for e in &events {
            let rec = EventRecord { time_ns: e.time_ns, class: e.class.clone(), fields: e.fields.clone() };
            map.insert(format!("{}{:016x}", KEY_EVENT_PREFIX, e.eid), rec.encode());
        }
        let created = super::rewrite_kv(mos, txg, obj, &kv::encode(&map))?;
        if let Some(o) = created {
            self.ring.lock().object = o;
        }
        Ok(created)
    }
}

/// A field's value as `events -v` and the daemon log show it.
pub fn show(v: &FieldValue) -> String {
    match v {
        FieldValue::Dec(n) => n.to_string(),
        FieldValue::Hex(n) => format!("{:#x}", n),
        FieldValue::Text(s) => format!("\"{}\"", s.escape_debug()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(len_max: usize) -> EventLog {
        EventLog::new("t", 7, EventLimits { len_max, per_second: 20 })
    }

    #[test]
    fn the_ring_is_bounded_and_eids_go_on() {
        let l = log(4);
        for i in 0..10 {
            assert_eq!(l.post(Post::new(class::SCRUB_START).dec("n", i)), i + 1);
        }
        let (evs, last) = l.since(None);
        assert_eq!(evs.iter().map(|e| e.eid).collect::<Vec<_>>(), [7, 8, 9, 10]);
        assert_eq!(last, 10);
        assert_eq!(l.since(Some(8)).0.len(), 2);
        assert_eq!(l.clear(), 4);
        assert_eq!(l.post(Post::new(class::SCRUB_FINISH)), 11, "eids go on after a clear");
        l.set_limits(EventLimits { len_max: 1, per_second: 20 });
        assert_eq!(l.stats().len, 1);
        assert_eq!(l.stats().posted.get(class::SCRUB_START), Some(&10));
    }

    #[test]
    fn ereports_are_limited_per_device_and_once_per_copy() {
        let l = log(512);
        let t0 = Instant::now();
        let dev = |offset| Limit { key: 1, offset: Some(offset) };
        let post = |offset, at| l.post_limited_at(dev(offset), class::CHECKSUM, at, || Post::new(class::CHECKSUM).hex("zio_offset", offset));
        assert!(post(0, t0).is_some());
        assert!(post(0, t0).is_none(), "a copy is reported once");
        let posted = (1..1000u64).filter(|&o| post(o << 12, t0).is_some()).count();
        assert_eq!(posted, 19, "20 a second per device");
        let other = l.post_limited_at(Limit { key: 2, offset: Some(0) }, class::CHECKSUM, t0, || Post::new(class::CHECKSUM));
        assert!(other.is_some(), "another device has its own budget");
        let s = l.stats();
        assert_eq!((s.dropped, s.duplicates), (999 - 19, 1));
        // A held-back copy is reported when the next second comes.
        assert!(post(999 << 12, t0 + Duration::from_secs(1)).is_some());
        assert!(post(0, t0 + DUPLICATE_EXPIRE).is_some(), "a duplicate expires");
        assert_eq!(l.since(None).0.len(), 1 + 19 + 1 + 2);
    }

    #[test]
    fn events_name_their_bookmark() {
        let l = log(8);
        let b = Bookmark::block(54, 2, 0, 9);
        l.post(Post::new(class::DATA).bookmark(&b).text("zio_err", "boom"));
        let e = &l.since(None).0[0];
        assert_eq!(e.bookmark(), Some(b));
        assert_eq!(e.field("zio_err"), Some(&FieldValue::Text("boom".into())));
        assert_eq!(show(&FieldValue::Hex(255)), "0xff");
    }

    #[test]
    fn the_bell_wakes_a_waiter() {
        let g = posted_generation();
        let t = std::thread::spawn(move || wait_posted(g, Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        log(2).post(Post::new(class::POOL_CREATE));
        assert!(t.join().unwrap() > g);
        let g = posted_generation();
        let t0 = Instant::now();
        let _ = wait_posted(g, Duration::from_millis(30));
        assert!(t0.elapsed() >= Duration::from_millis(30) || posted_generation() != g, "without a post the wait times out");
    }
}
