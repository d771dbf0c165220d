//! The scan record: a pool's last scan as the MOS keeps it (OpenZFS's
//! `dsl_scan_phys_t` under the pool directory's `scan` key;
//! docs/format.md §11c).
//!
//! One MOS object, a key/value map named by the pool directory's `scan`
//! key, created by the first scan and rewritten whole in every txg in
//! which the scan's figures changed (the sync thread calls `flush`, as it
//! does the error log's). What it holds is what `status` shows after an
//! import, and what a scan that was running continues from: the txg whose
//! tree it covers, its figures, and its position (see `pool::scan`).
//!
//! Invariants (`check`, before every write and after every read):
//! - the function and state are ones this tarn knows (`func` 1 scrub, 2
//!   resilver; `state` 1 scanning, 2 finished, 3 canceled);
//! - a scan that has a position or has checked anything covers a txg;
//! - a scan in logical order is a scrub, and has no position;
//! - a sequential rebuild (`rebuild_vdev`) is a resilver;
//! - bad copies ≤ copies checked, and for a scrub repaired ≤ bad (a
//!   resilver's repaired copies are those it wrote); the errors of the last
//!   walk ≤ all errors.

use tarn_ondisk::kv::{self, KvMap};

use super::{RebuildDone, ScanFunc, ScanOrder, ScanPosition, ScanReport, ScanState, ScanStatus};
use crate::error::{Error, Result};
use crate::object::Objset;

const FUNC_SCRUB: u64 = 1;
const FUNC_RESILVER: u64 = 2;
const STATE_SCANNING: u64 = 1;
const STATE_FINISHED: u64 = 2;
const STATE_CANCELED: u64 = 3;
const ORDER_CHILD_BY_CHILD: u64 = 0;
const ORDER_LOGICAL: u64 = 1;
const ORDER_SORTED: u64 = 2;

/// The record of `s` (never of `ScanState::None`, which is not written).
pub(crate) fn encode(s: &ScanStatus) -> KvMap {
    if let Err(why) = check(s) {
        panic!("scan record about to be written is inconsistent: {}", why);
    }
    let r = &s.report;
    let state = match s.state {
        ScanState::Scanning => STATE_SCANNING,
        ScanState::Finished => STATE_FINISHED,
        ScanState::Canceled => STATE_CANCELED,
        ScanState::None => panic!("a scan record is written only once a scan has started"),
    };
    let mut m = KvMap::new();
    let fields = [
        ("func", if s.func == ScanFunc::Scrub { FUNC_SCRUB } else { FUNC_RESILVER }),
        ("state", state),
        (
            "order",
            match s.order {
                ScanOrder::ChildByChild => ORDER_CHILD_BY_CHILD,
                ScanOrder::Logical => ORDER_LOGICAL,
                ScanOrder::Sorted => ORDER_SORTED,
            },
        ),
        ("paused_since", s.paused_since),
        ("txg", r.txg),
        ("start_time", s.start_time),
        ("end_time", s.end_time),
        ("to_examine", s.to_examine),
        ("examined", r.bytes),
        ("blocks", r.blocks),
        ("copies", r.copies),
        ("reads", r.reads),
        ("bad_copies", r.bad_copies),
        ("repaired_copies", r.repaired_copies),
        ("repaired_bytes", r.repaired_bytes),
        ("errors", r.error_count - r.walk_error_count),
        ("walk_errors", r.walk_error_count),
        ("scan_ms", (r.seconds * 1000.0) as u64),
        ("resumes", s.resumes),
    ];
    for (k, v) in fields {
        kv::put_u64(&mut m, k, v);
    }
    if let Some(v) = &s.rebuild_vdev {
        kv::put_str(&mut m, "rebuild_vdev", v);
    }
    if let Some(d) = &s.rebuild {
        kv::put_str(&mut m, "rebuilt_vdev", &d.vdev);
        kv::put_u64(&mut m, "rebuilt_bytes", d.bytes);
        kv::put_u64(&mut m, "rebuilt_ms", (d.seconds * 1000.0) as u64);
        kv::put_u64(&mut m, "rebuilt_errors", d.errors);
        kv::put_u64(&mut m, "rebuilt_end_time", d.end_time);
    }
    if let Some(p) = s.position {
        kv::put_u64(&mut m, "pos_vdev", u64::from(p.vdev));
        kv::put_u64(&mut m, "pos_child", u64::from(p.child));
        kv::put_u64(&mut m, "pos_offset", p.offset);
    }
    m
}

/// The scan a record describes; an error names what is wrong with it.
pub(crate) fn decode(m: &KvMap) -> std::result::Result<ScanStatus, String> {
    let get = |k: &str| kv::get_u64(m, k).unwrap_or(0);
    let func = match get("func") {
        FUNC_SCRUB => ScanFunc::Scrub,
        FUNC_RESILVER => ScanFunc::Resilver,
        f => return Err(format!("unknown scan function {}", f)),
    };
    let state = match get("state") {
        STATE_SCANNING => ScanState::Scanning,
        STATE_FINISHED => ScanState::Finished,
        STATE_CANCELED => ScanState::Canceled,
        s => return Err(format!("unknown scan state {}", s)),
    };
    let order = match get("order") {
        ORDER_CHILD_BY_CHILD => ScanOrder::ChildByChild,
        ORDER_LOGICAL => ScanOrder::Logical,
        ORDER_SORTED => ScanOrder::Sorted,
        o => return Err(format!("unknown scan order {}", o)),
    };
    let small = |what: &str, v: u64| u32::try_from(v).map_err(|_| format!("position on {} {}", what, v));
    let position = match (kv::get_u64(m, "pos_vdev"), kv::get_u64(m, "pos_child"), kv::get_u64(m, "pos_offset")) {
        (Some(v), Some(c), Some(offset)) => Some(ScanPosition { vdev: small("vdev", v)?, child: small("child", c)?, offset }),
        (None, None, None) => None,
        _ => return Err("part of a position (pos_vdev, pos_child and pos_offset go together)".into()),
    };
    let (walk, issue) = (get("walk_errors"), get("errors"));
    let report = ScanReport {
        txg: get("txg"),
        blocks: get("blocks"),
        copies: get("copies"),
        bytes: get("examined"),
        reads: get("reads"),
        bad_copies: get("bad_copies"),
        repaired_copies: get("repaired_copies"),
        repaired_bytes: get("repaired_bytes"),
        error_count: walk.checked_add(issue).ok_or("error counts overflow")?,
        walk_error_count: walk,
        errors: Vec::new(),
        seconds: get("scan_ms") as f64 / 1000.0,
    };
    let s = ScanStatus {
        func,
        state,
        order,
        paused_since: get("paused_since"),
        start_time: get("start_time"),
        end_time: get("end_time"),
        to_examine: get("to_examine"),
        examined: report.bytes,
        position,
        resumes: get("resumes"),
        rate_bytes_per_sec: 0,
        eta_secs: None,
        report,
        rebuild_vdev: kv::get_str(m, "rebuild_vdev").map(str::to_string),
        rebuild: kv::get_str(m, "rebuilt_vdev").map(|v| RebuildDone {
            vdev: v.to_string(),
            bytes: get("rebuilt_bytes"),
            seconds: get("rebuilt_ms") as f64 / 1000.0,
            errors: get("rebuilt_errors"),
            end_time: get("rebuilt_end_time"),
        }),
    };
    check(&s)?;
    Ok(s)
}

/// The record's invariants (module docs).
fn check(s: &ScanStatus) -> std::result::Result<(), String> {
    let r = &s.report;
    if (s.position.is_some() || r.copies > 0) && r.txg == 0 {
        return Err("a scan that has checked copies covers no txg".into());
    }
    if s.position.is_some() && s.func != ScanFunc::Scrub {
        return Err("a resilver with a position".into());
    }
    if s.order == ScanOrder::Logical && s.func != ScanFunc::Scrub {
        return Err("a resilver in logical order".into());
    }
    if s.rebuild_vdev.is_some() && s.func != ScanFunc::Resilver {
        return Err("a sequential rebuild that is no resilver".into());
    }
    if s.order == ScanOrder::Logical && s.position.is_some() {
        return Err("a scan in logical order with a position".into());
    }
    if r.bad_copies > r.copies {
        return Err(format!("{} bad copies of {} checked", r.bad_copies, r.copies));
    }
    // A resilver's repaired copies are those it wrote; it finds none bad.
    if s.func == ScanFunc::Scrub && r.repaired_copies > r.bad_copies {
        return Err(format!("{} copies repaired of {} bad", r.repaired_copies, r.bad_copies));
    }
    if r.walk_error_count > r.error_count {
        return Err(format!("{} walk errors of {} errors", r.walk_error_count, r.error_count));
    }
    Ok(())
}

/// Reads the record in MOS object `obj` (import).
pub(crate) fn load(mos: &Objset, obj: u64) -> Result<ScanStatus> {
    let what = || format!("scan record (MOS object {})", obj);
    let map = crate::pool::read_kv(mos, obj).map_err(|e| e.context(what()))?;
    decode(&map).map_err(|why| Error::corrupt(format!("{}: {}", what(), why)))
}

/// Writes `map` as the record into `txg` (syncing context), creating its
/// object when `obj` is 0; returns the object's number (`rewrite_kv`:
/// emptied first, so the old content is never read).
pub(crate) fn write(mos: &Objset, txg: u64, obj: u64, map: &KvMap) -> Result<u64> {
    let created = crate::pool::rewrite_kv(mos, txg, obj, &kv::encode(map))?;
    Ok(created.unwrap_or(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ScanStatus {
        let report = ScanReport { txg: 41, blocks: 9, copies: 20, bytes: 1 << 20, reads: 3, bad_copies: 2, repaired_copies: 1, repaired_bytes: 4096, error_count: 3, walk_error_count: 2, errors: vec![], seconds: 1.5 };
        ScanStatus {
            func: ScanFunc::Scrub,
            state: ScanState::Scanning,
            order: ScanOrder::Sorted,
            paused_since: 7,
            start_time: 5,
            end_time: 0,
            to_examine: 2 << 20,
            examined: 1 << 20,
            position: Some(ScanPosition { vdev: 1, child: 1, offset: 0x4000 }),
            resumes: 2,
            rate_bytes_per_sec: 0,
            eta_secs: None,
            report,
            rebuild_vdev: None,
            rebuild: Some(RebuildDone { vdev: "mirror-0".into(), bytes: 3 << 20, seconds: 2.25, errors: 0, end_time: 4 }),
        }
    }

    #[test]
    fn records_round_trip() {
        let s = sample();
        let back = decode(&encode(&s)).expect("decode");
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&s).unwrap());
        let none = ScanStatus { position: None, ..sample() };
        assert_eq!(decode(&encode(&none)).expect("decode").position, None);
        let resilver = ScanStatus { func: ScanFunc::Resilver, position: None, ..sample() };
        assert_eq!(decode(&encode(&resilver)).expect("decode").func, ScanFunc::Resilver);
        let rebuild = ScanStatus { func: ScanFunc::Resilver, position: None, rebuild_vdev: Some("mirror-1".into()), rebuild: None, ..sample() };
        let back = decode(&encode(&rebuild)).expect("decode");
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&rebuild).unwrap(), "a sequential rebuild");
        let logical = ScanStatus { order: ScanOrder::Logical, position: None, ..sample() };
        assert_eq!(decode(&encode(&logical)).expect("decode").order, ScanOrder::Logical);
        let mut old = encode(&none);
        old.remove("order");
        assert_eq!(decode(&old).expect("a record from before the order key").order, ScanOrder::ChildByChild, "it continues in its order");
        let by_child = ScanStatus { order: ScanOrder::ChildByChild, ..sample() };
        assert_eq!(decode(&encode(&by_child)).expect("decode").order, ScanOrder::ChildByChild);
    }

    #[test]
    fn bad_records_are_refused_with_a_reason() {
        let mut m = encode(&sample());
        kv::put_u64(&mut m, "func", 3);
        assert!(decode(&m).unwrap_err().contains("unknown scan function 3"));
        let mut m = encode(&sample());
        kv::put_u64(&mut m, "state", 9);
        assert!(decode(&m).unwrap_err().contains("unknown scan state 9"));
        let mut m = encode(&sample());
        m.remove("pos_child");
        assert!(decode(&m).unwrap_err().contains("part of a position"));
        let mut m = encode(&sample());
        kv::put_u64(&mut m, "func", 2);
        assert!(decode(&m).unwrap_err().contains("a resilver with a position"));
        let mut m = encode(&sample());
        kv::put_u64(&mut m, "repaired_copies", 3);
        assert!(decode(&m).unwrap_err().contains("3 copies repaired of 2 bad"));
        let mut m = encode(&sample());
        kv::put_u64(&mut m, "order", 3);
        assert!(decode(&m).unwrap_err().contains("unknown scan order 3"));
        let mut m = encode(&sample());
        kv::put_u64(&mut m, "order", 1);
        assert!(decode(&m).unwrap_err().contains("a scan in logical order with a position"));
        let mut m = encode(&sample());
        kv::put_str(&mut m, "rebuild_vdev", "mirror-0");
        assert!(decode(&m).unwrap_err().contains("a sequential rebuild that is no resilver"));
        let mut m = encode(&ScanStatus { func: ScanFunc::Resilver, position: None, ..sample() });
        kv::put_u64(&mut m, "order", 1);
        assert!(decode(&m).unwrap_err().contains("a resilver in logical order"));
    }
}
