//! The dataset record: one key/value object in the MOS per file system and
//! per snapshot (format.md §11). Zero numbers are not stored.

use std::collections::{BTreeMap, BTreeSet};

use tarn_ondisk::bp::BlockPtr;
use tarn_ondisk::kv::{self, KvMap};
use tarn_ondisk::zil::ZilHeader;

use crate::error::{Error, Result};

#[derive(Clone, Debug, Default)]
pub(crate) struct Rec {
    /// Its object number in the MOS (the dataset's id).
    pub id: u64,
    pub name: String,
    pub snapshot: bool,
    /// Root block of the object set (a hole: empty, never written).
    pub bp: BlockPtr,
    pub creation_txg: u64,
    pub creation_time: u64,
    pub guid: u64,
    /// File systems: parent (0 for the root) and the sibling list of children.
    pub parent: u64,
    pub child_first: u64,
    pub sib_next: u64,
    pub sib_prev: u64,
    /// Snapshots: the file system they belong to.
    pub head: u64,
    /// The latest snapshot before this one (for a head: its latest snapshot;
    /// for a clone without snapshots: its origin) and that snapshot's txg.
    pub prev_snap: u64,
    pub prev_snap_txg: u64,
    /// Snapshots: the next snapshot of the same file system, or the head.
    pub next_snap: u64,
    /// Dead list object (0: empty) and the bytes on it, all of them and those
    /// born at or before `origin_txg` (blocks of the origin's lineage).
    pub deadlist: u64,
    pub dl_bytes: u64,
    pub dl_origin_bytes: u64,
    /// Allocated bytes reachable from `bp`, and their logical and physical sizes.
    pub referenced: u64,
    pub ref_lsize: u64,
    pub ref_psize: u64,
    /// Clones: origin snapshot and its txg (also copied to their snapshots).
    pub origin: u64,
    pub origin_txg: u64,
    /// Snapshots: the clones made from them.
    pub clones: BTreeSet<u64>,
    /// Local property values.
    pub props: BTreeMap<String, String>,
    /// Root dataset only: the name index's bucket table and the datasets
    /// with a reservation.
    pub index: u64,
    pub reservations: BTreeSet<u64>,
    /// Records written before space accounting existed lack `referenced`.
    pub has_referenced: bool,
    /// File systems: the intent log's header (default: no log).
    pub zil: ZilHeader,
    /// Root dataset only: the file systems whose log header names a chain
    /// (claimed at import).
    pub logs: BTreeSet<u64>,
}

fn put(m: &mut KvMap, k: &str, v: u64) {
    if v != 0 {
        kv::put_u64(m, k, v);
    }
}

fn get(m: &KvMap, k: &str) -> Result<u64> {
    match m.get(k) {
        None => Ok(0),
        Some(_) => kv::get_u64(m, k).ok_or_else(|| Error::corrupt(format!("dataset record key '{}' is not a u64", k))),
    }
}

fn id_set(m: &KvMap, prefix: &str) -> Result<BTreeSet<u64>> {
    m.range(prefix.to_string()..)
        .take_while(|(k, _)| k.starts_with(prefix))
        .map(|(k, _)| k[prefix.len()..].parse::<u64>().map_err(|_| Error::corrupt(format!("dataset record key '{}'", k))))
        .collect()
}

impl Rec {
    pub fn decode(id: u64, m: &KvMap) -> Result<Rec> {
        let bp = match m.get("bp") {
            Some(b) => BlockPtr::decode(b)?,
            None => BlockPtr::default(),
        };
        let snapshot = match kv::get_str(m, "type") {
            None | Some("filesystem") => false,
            Some("snapshot") => true,
            Some(t) => return Err(Error::corrupt(format!("dataset record {} has type '{}'", id, t))),
        };
        let props = m
            .range("prop:".to_string()..)
            .take_while(|(k, _)| k.starts_with("prop:"))
            .map(|(k, v)| (k["prop:".len()..].to_string(), String::from_utf8_lossy(v).into_owned()))
            .collect();
        Ok(Rec {
            id,
            name: kv::get_str(m, "name").ok_or_else(|| Error::corrupt(format!("dataset record {} has no name", id)))?.to_string(),
            snapshot,
            bp,
            creation_txg: get(m, "creation_txg")?,
            creation_time: get(m, "creation_time")?,
            guid: get(m, "guid")?,
            parent: get(m, "parent")?,
            child_first: get(m, "child_first")?,
            sib_next: get(m, "sib_next")?,
            sib_prev: get(m, "sib_prev")?,
            head: get(m, "head")?,
            prev_snap: get(m, "prev_snap")?,
            prev_snap_txg: get(m, "prev_snap_txg")?,
            next_snap: get(m, "next_snap")?,
            deadlist: get(m, "deadlist")?,
            dl_bytes: get(m, "dl_bytes")?,
            dl_origin_bytes: get(m, "dl_origin_bytes")?,
            referenced: get(m, "referenced")?,
            ref_lsize: get(m, "ref_lsize")?,
            ref_psize: get(m, "ref_psize")?,
            origin: get(m, "origin")?,
            origin_txg: get(m, "origin_txg")?,
            clones: id_set(m, "clone:")?,
            props,
            index: get(m, "ds_index")?,
            reservations: id_set(m, "resv:")?,
            has_referenced: m.contains_key("referenced"),
            zil: match m.get("zil") {
                Some(b) => ZilHeader::decode(b).map_err(|e| Error::corrupt(format!("dataset record {}: {}", id, e)))?,
                None => ZilHeader::default(),
            },
            logs: id_set(m, "log:")?,
        })
    }

    pub fn encode(&self) -> KvMap {
        let mut m = KvMap::new();
        kv::put_str(&mut m, "name", &self.name);
        kv::put_str(&mut m, "type", if self.snapshot { "snapshot" } else { "filesystem" });
        m.insert("bp".into(), self.bp.to_bytes().to_vec());
        put(&mut m, "creation_txg", self.creation_txg);
        put(&mut m, "creation_time", self.creation_time);
        put(&mut m, "guid", self.guid);
        put(&mut m, "parent", self.parent);
        put(&mut m, "child_first", self.child_first);
        put(&mut m, "sib_next", self.sib_next);
        put(&mut m, "sib_prev", self.sib_prev);
        put(&mut m, "head", self.head);
        put(&mut m, "prev_snap", self.prev_snap);
        put(&mut m, "prev_snap_txg", self.prev_snap_txg);
        put(&mut m, "next_snap", self.next_snap);
        put(&mut m, "deadlist", self.deadlist);
        put(&mut m, "dl_bytes", self.dl_bytes);
        put(&mut m, "dl_origin_bytes", self.dl_origin_bytes);
        kv::put_u64(&mut m, "referenced", self.referenced);
        put(&mut m, "ref_lsize", self.ref_lsize);
        put(&mut m, "ref_psize", self.ref_psize);
        put(&mut m, "origin", self.origin);
        put(&mut m, "origin_txg", self.origin_txg);
        for c in &self.clones {
            m.insert(format!("clone:{}", c), Vec::new());
        }
        for (k, v) in &self.props {
            kv::put_str(&mut m, &format!("prop:{}", k), v);
        }
        put(&mut m, "ds_index", self.index);
        for r in &self.reservations {
            m.insert(format!("resv:{}", r), Vec::new());
        }
        if self.zil != ZilHeader::default() {
            m.insert("zil".into(), self.zil.encode());
        }
        for l in &self.logs {
            m.insert(format!("log:{}", l), Vec::new());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut r = Rec { id: 9, name: "p/a@s".into(), snapshot: true, creation_txg: 5, prev_snap: 7, dl_bytes: 4096, ..Default::default() };
        r.clones.insert(12);
        r.props.insert("atime".into(), "off".into());
        r.reservations.insert(3);
        let d = Rec::decode(9, &r.encode()).unwrap();
        assert_eq!(d.encode(), r.encode());
        assert!(d.snapshot && d.clones.contains(&12) && d.props["atime"] == "off" && d.has_referenced);
    }
}
