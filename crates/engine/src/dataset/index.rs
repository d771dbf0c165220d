//! The dataset name index: full name → dataset record number, as a hash
//! table in the MOS, so that a lookup costs the same with ten datasets or a
//! hundred thousand (OpenZFS walks per-directory ZAPs instead).
//!
//! ```text
//!  bucket table (one object, BUCKETS × u64 LE: bucket object or 0)
//!      │  bucket = first 8 bytes of blake3(name) mod BUCKETS
//!      ▼
//!  bucket object: key/value map  name → record number (u64 LE)
//! ```
//!
//! A lookup reads one table entry (one 32 KiB block, usually cached) and
//! one bucket (a few entries, usually inline in its dnode): a constant
//! number of blocks. An insert or removal rewrites one bucket; a table entry
//! is written only when its bucket is first created. With 100 000 names a
//! bucket holds ~25 entries (~1 KiB).

use tarn_ondisk::bp::ObjectType;
use tarn_ondisk::kv;

use crate::error::{Error, Result};
use crate::object::Objset;

pub(crate) const BUCKETS: u64 = 4096;
const TABLE_BYTES: u64 = BUCKETS * 8;

fn bucket_of(name: &str) -> u64 {
    let h = blake3::hash(name.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes")) % BUCKETS
}

/// Creates an empty bucket table (syncing context).
pub(crate) fn create(mos: &Objset, txg: u64) -> Result<u64> {
    let t = mos.create_in(txg, ObjectType::DatasetIndex, 3)?;
    // Written whole so its single block has the table's size from the start
    // (all zeros: a hole, nothing is allocated).
    mos.write_txg(txg, t, 0, &vec![0u8; TABLE_BYTES as usize])?;
    Ok(t)
}

fn bucket_obj(mos: &Objset, table: u64, b: u64) -> Result<u64> {
    let raw = mos.read(table, b * 8, 8)?;
    let raw: [u8; 8] = raw.as_slice().try_into().map_err(|_| Error::corrupt(format!("dataset index table {} is short", table)))?;
    Ok(u64::from_le_bytes(raw))
}

pub(crate) fn lookup(mos: &Objset, table: u64, name: &str) -> Result<Option<u64>> {
    if table == 0 {
        return Ok(None);
    }
    let obj = bucket_obj(mos, table, bucket_of(name))?;
    if obj == 0 {
        return Ok(None);
    }
    let m = crate::pool::read_kv(mos, obj)?;
    Ok(kv::get_u64(&m, name))
}

pub(crate) fn insert(mos: &Objset, txg: u64, table: u64, name: &str, id: u64) -> Result<()> {
    let b = bucket_of(name);
    let mut obj = bucket_obj(mos, table, b)?;
    let mut m = if obj == 0 {
        obj = mos.create_in(txg, ObjectType::DatasetIndex, 3)?;
        mos.write_txg(txg, table, b * 8, &obj.to_le_bytes())?;
        kv::KvMap::new()
    } else {
        crate::pool::read_kv(mos, obj)?
    };
    if m.contains_key(name) {
        return Err(Error::new(crate::ErrorKind::Exists, format!("dataset '{}' already exists", name)));
    }
    kv::put_u64(&mut m, name, id);
    write_bucket(mos, txg, obj, &m)
}

pub(crate) fn remove(mos: &Objset, txg: u64, table: u64, name: &str) -> Result<()> {
    let obj = bucket_obj(mos, table, bucket_of(name))?;
    if obj == 0 {
        return Err(Error::corrupt(format!("dataset '{}' is missing from the name index", name)));
    }
    let mut m = crate::pool::read_kv(mos, obj)?;
    if m.remove(name).is_none() {
        return Err(Error::corrupt(format!("dataset '{}' is missing from the name index", name)));
    }
    write_bucket(mos, txg, obj, &m)
}

fn write_bucket(mos: &Objset, txg: u64, obj: u64, m: &kv::KvMap) -> Result<()> {
    let bytes = kv::encode(m);
    mos.write_txg(txg, obj, 0, &bytes)?;
    mos.truncate_txg(txg, obj, bytes.len() as u64)
}
