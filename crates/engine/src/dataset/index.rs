//! The dataset name index: full name → dataset record number, kept sorted
//! by name in the MOS so that a lookup reads a constant number of blocks
//! and a batch of names under one parent rewrites a few blocks, however
//! many datasets the pool holds (OpenZFS walks per-directory ZAPs instead,
//! one per path component).
//!
//! ```text
//!  directory (one object): key/value map  first name of a page → page object
//!      │  the page of `name`: the entry with the greatest key ≤ name
//!      │  (the first page's key is "", so every name has one)
//!      ▼
//!  page object: key/value map  name → record number (u64 LE), ≤ PAGE_BYTES
//! ```
//!
//! Names sort by their bytes, so a parent's children (`tank/ci/job-00001`,
//! `tank/ci/job-00002`, …) and a dataset's snapshots (`tank/a@s1`, …) are
//! neighbours: a `create -p` of 500 names under a new parent, or a snapshot
//! of 500 of them, touches the one or two pages where they land plus the
//! pages their splits make. (The hashed index this replaces spread any 500
//! names over ~470 buckets, each its own block, so a batch wrote ~470 more
//! blocks in a pool of 40,000 datasets than in a small one.)
//!
//! A page whose encoding outgrows `PAGE_BYTES` splits in two at its middle
//! name; a page other than the first that loses its last name is freed.
//! With 100,000 names of ~20 bytes the directory holds ~800 pages (~25 KiB):
//! a lookup reads the directory (cached after the first) and one page.
//!
//! Pools made before this index kept a hashed one (bucket table of type
//! `DatasetIndex`, `hashed` below); it is read and kept as it is, so such a
//! pool keeps working, with the old index's costs.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ops::Bound;

use tarn_ondisk::bp::ObjectType;
use tarn_ondisk::kv::{self, KvMap};

use crate::error::{Error, ErrorKind, Result};
use crate::object::Objset;

/// A page is split once its encoding passes this many bytes.
pub(crate) const PAGE_BYTES: usize = 8 << 10;

/// Creates an empty index: a directory naming one empty page (syncing
/// context).
pub(crate) fn create(mos: &Objset, txg: u64) -> Result<u64> {
    let page = mos.create_in(txg, ObjectType::DatasetNames, 3)?;
    write_map(mos, txg, page, &KvMap::new())?;
    let dir = mos.create_in(txg, ObjectType::DatasetNames, 3)?;
    let mut d = KvMap::new();
    kv::put_u64(&mut d, "", page);
    write_map(mos, txg, dir, &d)?;
    Ok(dir)
}

/// The index's maps being changed in a txg's sync, decoded once: a batch
/// of 500 names under one parent decodes and encodes its directory and
/// pages once, not once per name. Lives in the dataset layer's state (its
/// lock serialises every use); `flush` writes what changed and empties it.
/// Between syncs it holds only maps that lookups read (clean copies of what
/// the MOS holds), dropped when the next sync starts.
#[derive(Default)]
pub(crate) struct Pages {
    maps: HashMap<u64, Map>,
}

struct Map {
    entries: KvMap,
    /// Its encoding's length.
    bytes: usize,
    dirty: bool,
}

/// A key/value map's encoding: magic and count, then per entry a u16 key
/// length, the key, a u32 value length and the value (`kv::encode`).
const MAP_HEADER: usize = 8;
fn entry_bytes(key: &str, value: &[u8]) -> usize {
    2 + key.len() + 4 + value.len()
}

impl Pages {
    pub(crate) fn lookup(&mut self, mos: &Objset, index: u64, name: &str) -> Result<Option<u64>> {
        if index == 0 {
            return Ok(None);
        }
        if is_hashed(mos, index)? {
            return hashed::lookup(mos, index, name);
        }
        let (_, page) = page_of(&self.map(mos, index)?.entries, index, name)?;
        Ok(kv::get_u64(&self.map(mos, page)?.entries, name))
    }

    pub(crate) fn insert(&mut self, mos: &Objset, txg: u64, index: u64, name: &str, id: u64) -> Result<()> {
        if is_hashed(mos, index)? {
            return hashed::insert(mos, txg, index, name, id);
        }
        let (_, page) = page_of(&self.map(mos, index)?.entries, index, name)?;
        let m = self.map(mos, page)?;
        if m.entries.contains_key(name) {
            return Err(Error::new(ErrorKind::Exists, format!("dataset '{}' already exists", name)));
        }
        let value = id.to_le_bytes().to_vec();
        m.bytes += entry_bytes(name, &value);
        m.entries.insert(name.to_string(), value);
        m.dirty = true;
        if m.bytes <= PAGE_BYTES || m.entries.len() < 2 {
            return Ok(());
        }
        // Split at the middle name: the upper half becomes a page of its own.
        let mid = m.entries.keys().nth(m.entries.len() / 2).cloned().ok_or_else(|| Error::corrupt(format!("dataset index page {} lost its names", page)))?;
        let upper = m.entries.split_off(&mid);
        let moved: usize = upper.iter().map(|(k, v)| entry_bytes(k, v)).sum();
        m.bytes -= moved;
        let new_page = mos.create_in(txg, ObjectType::DatasetNames, 3)?;
        self.maps.insert(new_page, Map { entries: upper, bytes: MAP_HEADER + moved, dirty: true });
        let dir = self.map(mos, index)?;
        let value = new_page.to_le_bytes().to_vec();
        dir.bytes += entry_bytes(&mid, &value);
        dir.entries.insert(mid, value);
        dir.dirty = true;
        Ok(())
    }

    pub(crate) fn remove(&mut self, mos: &Objset, txg: u64, index: u64, name: &str) -> Result<()> {
        let missing = || Error::corrupt(format!("dataset '{}' is missing from the name index", name));
        if index == 0 {
            return Err(missing());
        }
        if is_hashed(mos, index)? {
            return hashed::remove(mos, txg, index, name);
        }
        let (first, page) = page_of(&self.map(mos, index)?.entries, index, name)?;
        let m = self.map(mos, page)?;
        let value = m.entries.remove(name).ok_or_else(missing)?;
        m.bytes -= entry_bytes(name, &value);
        m.dirty = true;
        if m.entries.is_empty() && !first.is_empty() {
            self.maps.remove(&page);
            mos.free_in(txg, page)?;
            let dir = self.map(mos, index)?;
            let value = dir.entries.remove(&first).ok_or_else(|| Error::corrupt(format!("dataset index directory {} lost page {}", index, page)))?;
            dir.bytes -= entry_bytes(&first, &value);
            dir.dirty = true;
        }
        Ok(())
    }

    /// Writes the maps changed in `txg` and forgets every map (syncing
    /// context, at the end of the dataset layer's part of the sync).
    pub(crate) fn flush(&mut self, mos: &Objset, txg: u64) -> Result<()> {
        for (obj, m) in std::mem::take(&mut self.maps) {
            if m.dirty {
                let bytes = kv::encode(&m.entries);
                debug_assert_eq!(bytes.len(), m.bytes, "dataset index object {obj}: size kept wrongly");
                write_bytes(mos, txg, obj, &bytes)?;
            }
        }
        Ok(())
    }

    /// Forgets every map, written or not (a sync that failed half-way).
    pub(crate) fn clear(&mut self) {
        self.maps.clear();
    }

    fn map(&mut self, mos: &Objset, obj: u64) -> Result<&mut Map> {
        Ok(match self.maps.entry(obj) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let entries = crate::pool::read_kv(mos, obj)?;
                let bytes = MAP_HEADER + entries.iter().map(|(k, v)| entry_bytes(k, v)).sum::<usize>();
                e.insert(Map { entries, bytes, dirty: false })
            }
        })
    }
}

/// Every (name, record) the index holds, in name order (the checker's).
pub(crate) fn entries(mos: &Objset, index: u64) -> Result<Vec<(String, u64)>> {
    if index == 0 {
        return Ok(Vec::new());
    }
    if is_hashed(mos, index)? {
        return hashed::entries(mos, index);
    }
    let dir = crate::pool::read_kv(mos, index)?;
    let mut out = Vec::new();
    for (first, page) in dir.keys().zip(dir.values()) {
        let page = decode_u64(page, index)?;
        for (k, v) in crate::pool::read_kv(mos, page)? {
            if k.as_str() < first.as_str() {
                return Err(Error::corrupt(format!("dataset index page {} holds '{}', before its first name '{}'", page, k, first)));
            }
            out.push((k, decode_u64(&v, page)?));
        }
    }
    Ok(out)
}

/// The page `name` belongs in: its directory key and object.
fn page_of(dir: &KvMap, index: u64, name: &str) -> Result<(String, u64)> {
    let (first, page) = dir.range::<str, _>((Bound::Unbounded, Bound::Included(name))).next_back().ok_or_else(|| Error::corrupt(format!("dataset index directory {} has no first page", index)))?;
    Ok((first.clone(), decode_u64(page, index)?))
}

fn decode_u64(v: &[u8], obj: u64) -> Result<u64> {
    let raw: [u8; 8] = v.try_into().map_err(|_| Error::corrupt(format!("dataset index object {} holds a value of {} bytes, not 8", obj, v.len())))?;
    Ok(u64::from_le_bytes(raw))
}

fn is_hashed(mos: &Objset, index: u64) -> Result<bool> {
    match mos.info(index)?.otype {
        ObjectType::DatasetNames => Ok(false),
        ObjectType::DatasetIndex => Ok(true),
        t => Err(Error::corrupt(format!("dataset name index object {} is a {}", index, t.name()))),
    }
}

fn write_map(mos: &Objset, txg: u64, obj: u64, m: &KvMap) -> Result<()> {
    write_bytes(mos, txg, obj, &kv::encode(m))
}

fn write_bytes(mos: &Objset, txg: u64, obj: u64, bytes: &[u8]) -> Result<()> {
    mos.write_txg(txg, obj, 0, bytes)?;
    mos.truncate_txg(txg, obj, bytes.len() as u64)
}

/// The index of pools made before the sorted one: a 32 KiB table of 4096
/// bucket objects, a name's bucket being the first 8 bytes of its BLAKE3
/// hash (u64 LE) mod 4096; each bucket a key/value map name → record.
mod hashed {
    use super::*;

    const BUCKETS: u64 = 4096;

    fn bucket_of(name: &str) -> u64 {
        let h = blake3::hash(name.as_bytes());
        u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes")) % BUCKETS
    }

    fn bucket_obj(mos: &Objset, table: u64, b: u64) -> Result<u64> {
        let raw = mos.read(table, b * 8, 8)?;
        decode_u64(&raw, table).map_err(|_| Error::corrupt(format!("dataset index table {} is short", table)))
    }

    pub(super) fn lookup(mos: &Objset, table: u64, name: &str) -> Result<Option<u64>> {
        let obj = bucket_obj(mos, table, bucket_of(name))?;
        if obj == 0 {
            return Ok(None);
        }
        Ok(kv::get_u64(&crate::pool::read_kv(mos, obj)?, name))
    }

    pub(super) fn insert(mos: &Objset, txg: u64, table: u64, name: &str, id: u64) -> Result<()> {
        let b = bucket_of(name);
        let mut obj = bucket_obj(mos, table, b)?;
        let mut m = if obj == 0 {
            obj = mos.create_in(txg, ObjectType::DatasetIndex, 3)?;
            mos.write_txg(txg, table, b * 8, &obj.to_le_bytes())?;
            KvMap::new()
        } else {
            crate::pool::read_kv(mos, obj)?
        };
        if m.contains_key(name) {
            return Err(Error::new(ErrorKind::Exists, format!("dataset '{}' already exists", name)));
        }
        kv::put_u64(&mut m, name, id);
        write_map(mos, txg, obj, &m)
    }

    pub(super) fn remove(mos: &Objset, txg: u64, table: u64, name: &str) -> Result<()> {
        let missing = || Error::corrupt(format!("dataset '{}' is missing from the name index", name));
        let obj = bucket_obj(mos, table, bucket_of(name))?;
        if obj == 0 {
            return Err(missing());
        }
        let mut m = crate::pool::read_kv(mos, obj)?;
        m.remove(name).ok_or_else(missing)?;
        write_map(mos, txg, obj, &m)
    }

    pub(super) fn entries(mos: &Objset, table: u64) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for b in 0..BUCKETS {
            let obj = bucket_obj(mos, table, b)?;
            if obj != 0 {
                for (k, v) in crate::pool::read_kv(mos, obj)? {
                    out.push((k, decode_u64(&v, obj)?));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// An empty table, as pools made before the sorted index had (tests).
    #[cfg(test)]
    pub(crate) fn create(mos: &Objset, txg: u64) -> Result<u64> {
        let t = mos.create_in(txg, ObjectType::DatasetIndex, 3)?;
        mos.write_txg(txg, t, 0, &vec![0u8; (BUCKETS * 8) as usize])?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sys::{BlockDevice, FaultDevice};
    use crate::{CreateOptions, Pool};

    fn pool() -> Pool {
        let dev: Arc<dyn BlockDevice> = Arc::new(FaultDevice::new(128 << 20, 1));
        Pool::create_on("t", vec![("mem0".into(), dev)], vec![], &CreateOptions::default()).expect("create")
    }

    /// Runs `f` with the MOS, a txg held open and the index's pages, then
    /// writes the pages and syncs the txg.
    fn in_txg<T>(pool: &Pool, f: impl FnOnce(&Objset, u64, &mut Pages) -> T) -> T {
        let mos = pool.mos();
        let tx = mos.begin().expect("begin");
        let mut pages = Pages::default();
        let out = f(mos, tx.txg(), &mut pages);
        pages.flush(mos, tx.txg()).expect("flush");
        drop(tx);
        pool.sync().expect("sync");
        out
    }

    fn name(i: usize) -> String {
        format!("t/batch/x{i}")
    }

    /// Inserts, looks up and removes enough names to split pages and free
    /// them again, checking every name against a model after each step.
    fn exercise(pool: &Pool, index: u64) {
        let mos = pool.mos();
        let mut model = std::collections::BTreeMap::new();
        for round in 0..3 {
            in_txg(pool, |mos, txg, p| {
                for i in (round * 700)..(round + 1) * 700 {
                    p.insert(mos, txg, index, &name(i), i as u64 + 1).expect("insert");
                    model.insert(name(i), i as u64 + 1);
                }
                let err = p.insert(mos, txg, index, &name(round * 700), 9).expect_err("a second insert of a name");
                assert_eq!(err.kind, ErrorKind::Exists, "{err}");
            });
        }
        in_txg(pool, |mos, txg, p| {
            for i in (0..2100).filter(|i| i % 3 != 1 || *i < 300) {
                p.remove(mos, txg, index, &name(i)).expect("remove");
                model.remove(&name(i));
            }
            assert!(p.remove(mos, txg, index, &name(0)).is_err(), "a name removed twice");
        });
        let mut p = Pages::default();
        for i in 0..2100 {
            assert_eq!(p.lookup(mos, index, &name(i)).expect("lookup"), model.get(&name(i)).copied(), "{}", name(i));
        }
        assert_eq!(p.lookup(mos, index, "t/a").expect("lookup"), None, "a name before every other");
        let all = entries(mos, index).expect("entries");
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn sorted_index_splits_frees_and_finds_every_name() {
        let pool = pool();
        let index = in_txg(&pool, |mos, txg, _| create(mos, txg).expect("create"));
        exercise(&pool, index);
        // 700 names of ~14 bytes made more than one page, and pages emptied
        // by the removals were freed; the directory names every page left.
        let dir = crate::pool::read_kv(pool.mos(), index).expect("dir");
        assert!(dir.len() > 1, "pages split: {}", dir.len());
        for page in dir.values() {
            let page = decode_u64(page, index).expect("page");
            let bytes = pool.mos().info(page).expect("page").size as usize;
            assert!(bytes <= PAGE_BYTES, "page {page} holds {bytes} bytes");
        }
    }

    /// Pools made before the sorted index keep their hashed one.
    #[test]
    fn hashed_index_of_older_pools_is_still_read_and_kept() {
        let pool = pool();
        let index = in_txg(&pool, |mos, txg, _| hashed::create(mos, txg).expect("create"));
        exercise(&pool, index);
    }

    /// A batch of names under one parent rewrites a few pages, not one per
    /// name (what the sorted index is for).
    #[test]
    fn a_batch_under_one_parent_touches_few_pages() {
        let pool = pool();
        let index = in_txg(&pool, |mos, txg, _| create(mos, txg).expect("create"));
        for round in 0..20 {
            in_txg(&pool, |mos, txg, p| {
                for i in 0..500 {
                    p.insert(mos, txg, index, &format!("t/p{round:02}/j{i}"), 1).expect("insert");
                }
            });
        }
        let pages_before = crate::pool::read_kv(pool.mos(), index).expect("dir").len();
        let txg = in_txg(&pool, |mos, txg, p| {
            for i in 0..500 {
                p.insert(mos, txg, index, &format!("t/p10-new/j{i}"), 1).expect("insert");
            }
            txg
        });
        let dir = crate::pool::read_kv(pool.mos(), index).expect("dir");
        let written = dir.values().filter(|p| pool.mos().info(decode_u64(p, index).expect("page")).expect("info").dnode.blkptr.map(|b| b.birth) == Some(txg)).count();
        assert!(written <= 4 + dir.len() - pages_before, "{written} pages written for one batch ({} pages, {} new)", dir.len(), dir.len() - pages_before);
    }
}
