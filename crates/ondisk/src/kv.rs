//! Key/value maps: the encoding of small named records.
//!
//! The pool directory, dataset records and property sets are small maps from
//! names to byte strings, stored as the data of one object. They are encoded as
//! a sorted list so that equal maps encode to equal bytes:
//!
//! ```text
//! magic "TKV1" | count u32 | count × (key: u16 len + UTF-8 | value: u32 len + bytes)
//! ```
//!
//! Keys are unique and strictly ascending; a decoder rejects anything else. This
//! is the compact "micro" form; a hashed form for large maps (directories with
//! millions of entries) belongs to the POSIX layer.

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};

const MAGIC: &[u8; 4] = b"TKV1";
pub const MAX_KEY: usize = 1024;
/// Bound on one value, so a corrupt length cannot make a decoder allocate wildly.
pub const MAX_VALUE: usize = 16 << 20;

pub type KvMap = BTreeMap<String, Vec<u8>>;

pub fn encode(map: &KvMap) -> Vec<u8> {
    let mut w = Writer::new();
    w.bytes(MAGIC);
    w.u32(map.len() as u32);
    for (k, v) in map {
        w.string(k);
        w.u32(v.len() as u32);
        w.bytes(v);
    }
    w.into_vec()
}

pub fn decode(b: &[u8]) -> Result<KvMap, DecodeError> {
    let mut r = Reader::new(b, "key/value map");
    if r.bytes(4)? != MAGIC {
        return Err(r.err("bad magic"));
    }
    let n = r.u32()? as usize;
    // Each entry takes at least 6 bytes; a count beyond that is corrupt.
    if n > r.remaining() / 6 {
        return Err(r.err(format!("{} entries cannot fit in {} bytes", n, r.remaining())));
    }
    let mut map = KvMap::new();
    let mut last: Option<String> = None;
    for _ in 0..n {
        let k = r.string(MAX_KEY)?;
        let len = r.u32()? as usize;
        if len > MAX_VALUE {
            return Err(r.err(format!("value of {} bytes too large", len)));
        }
        let v = r.bytes(len)?.to_vec();
        if last.as_ref().is_some_and(|l| *l >= k) {
            return Err(r.err("keys not strictly ascending"));
        }
        last = Some(k.clone());
        map.insert(k, v);
    }
    if r.remaining() != 0 {
        return Err(r.err("trailing bytes"));
    }
    Ok(map)
}

/// Helpers for the common value types.
pub fn get_u64(map: &KvMap, key: &str) -> Option<u64> {
    map.get(key).and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_le_bytes)
}

pub fn put_u64(map: &mut KvMap, key: &str, v: u64) {
    map.insert(key.to_string(), v.to_le_bytes().to_vec());
}

pub fn get_str<'a>(map: &'a KvMap, key: &str) -> Option<&'a str> {
    map.get(key).and_then(|v| std::str::from_utf8(v).ok())
}

pub fn put_str(map: &mut KvMap, key: &str, v: &str) {
    map.insert(key.to_string(), v.as_bytes().to_vec());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut m = KvMap::new();
        put_u64(&mut m, "root_dataset", 5);
        put_str(&mut m, "prop:comment", "hello");
        m.insert("empty".into(), vec![]);
        let b = encode(&m);
        let d = decode(&b).unwrap();
        assert_eq!(d, m);
        assert_eq!(get_u64(&d, "root_dataset"), Some(5));
        assert_eq!(get_str(&d, "prop:comment"), Some("hello"));
    }

    #[test]
    fn rejects_garbage() {
        assert!(decode(b"").is_err());
        assert!(decode(b"TKV1\xff\xff\xff\xff").is_err());
        let mut m = KvMap::new();
        put_u64(&mut m, "a", 1);
        let mut b = encode(&m);
        b.push(0);
        assert!(decode(&b).is_err());
    }
}
