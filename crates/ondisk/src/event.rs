//! One event of a pool's event ring (`docs/format.md` §11c): when it was
//! posted, its class and its payload, a list of named fields as OpenZFS's
//! event nvlists have them. The ring itself is a key/value map (one entry
//! per event, keyed by its event id); this is the encoding of one entry's
//! value.
//!
//! ```text
//! time_ns u64 | class: u16 len + UTF-8 | count u16 |
//!   count × ( name: u16 len + ASCII [a-z0-9_] | tag u8 | value )
//!   value: tag 0 (decimal) and 1 (hex): u64 · tag 2 (text): u16 len + UTF-8
//! ```
//!
//! The two number tags differ only in how the value is shown (a guid or an
//! offset in hex, a count in decimal). Names are unique within an event;
//! the order of the fields is the order they are shown in. A decoder
//! rejects more than [`FIELDS_MAX`] fields, names longer than [`NAME_MAX`],
//! texts longer than [`TEXT_MAX`], an unknown tag and trailing bytes, so
//! that the encoding is canonical: what decodes re-encodes to the same
//! bytes.

use crate::codec::{DecodeError, Reader, Writer};

/// Most fields one event carries.
pub const FIELDS_MAX: usize = 32;
/// Longest field name, in bytes.
pub const NAME_MAX: usize = 64;
/// Longest class name, in bytes.
pub const CLASS_MAX: usize = 128;
/// Longest text value, in bytes (a writer cuts longer texts: [`cut_text`]).
pub const TEXT_MAX: usize = 1024;

const TAG_DEC: u8 = 0;
const TAG_HEX: u8 = 1;
const TAG_TEXT: u8 = 2;

/// A field's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldValue {
    /// A number shown in decimal (a count, a size, a level).
    Dec(u64),
    /// A number shown in hex (a guid, an offset).
    Hex(u64),
    Text(String),
}

/// One event as stored (its id is the key it is stored under).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// Nanoseconds since the epoch.
    pub time_ns: u64,
    /// e.g. `ereport.fs.zfs.checksum`.
    pub class: String,
    pub fields: Vec<(String, FieldValue)>,
}

/// Whether `name` may name a field: 1 to `NAME_MAX` bytes of `[a-z0-9_]`.
pub fn valid_name(name: &str) -> bool {
    (1..=NAME_MAX).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `s` cut to at most `TEXT_MAX` bytes, at a character boundary.
pub fn cut_text(s: &str) -> &str {
    let mut end = s.len().min(TEXT_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl EventRecord {
    /// The record's bytes. Panics on a record no decoder would accept (a
    /// writer's bug: the names and sizes are the poster's, checked here).
    pub fn encode(&self) -> Vec<u8> {
        assert!(!self.class.is_empty() && self.class.len() <= CLASS_MAX, "event class '{}' is empty or too long", self.class);
        assert!(self.fields.len() <= FIELDS_MAX, "event {} has {} fields, at most {}", self.class, self.fields.len(), FIELDS_MAX);
        let mut w = Writer::new();
        w.u64(self.time_ns);
        w.string(&self.class);
        w.u16(self.fields.len() as u16);
        for (i, (name, value)) in self.fields.iter().enumerate() {
            assert!(valid_name(name), "event {}: bad field name '{}'", self.class, name);
            assert!(self.fields[..i].iter().all(|(n, _)| n != name), "event {}: field '{}' twice", self.class, name);
            w.string(name);
            match value {
                FieldValue::Dec(v) => {
                    w.u8(TAG_DEC);
                    w.u64(*v);
                }
                FieldValue::Hex(v) => {
                    w.u8(TAG_HEX);
                    w.u64(*v);
                }
                FieldValue::Text(s) => {
                    assert!(s.len() <= TEXT_MAX, "event {}: field '{}' holds {} bytes, at most {}", self.class, name, s.len(), TEXT_MAX);
                    w.u8(TAG_TEXT);
                    w.string(s);
                }
            }
        }
        w.into_vec()
    }

    pub fn decode(b: &[u8]) -> Result<EventRecord, DecodeError> {
        let mut r = Reader::new(b, "event");
        let time_ns = r.u64()?;
        let class = r.string(CLASS_MAX)?;
        if class.is_empty() {
            return Err(r.err("empty class"));
        }
        let n = r.u16()? as usize;
        if n > FIELDS_MAX {
            return Err(r.err(format!("{} fields, at most {}", n, FIELDS_MAX)));
        }
        let mut fields: Vec<(String, FieldValue)> = Vec::with_capacity(n);
        for _ in 0..n {
            let name = r.string(NAME_MAX)?;
            if !valid_name(&name) || fields.iter().any(|(f, _)| *f == name) {
                return Err(r.err(format!("bad or repeated field name '{}'", name)));
            }
            let value = match r.u8()? {
                TAG_DEC => FieldValue::Dec(r.u64()?),
                TAG_HEX => FieldValue::Hex(r.u64()?),
                TAG_TEXT => FieldValue::Text(r.string(TEXT_MAX)?),
                t => return Err(r.err(format!("field '{}' has unknown tag {}", name, t))),
            };
            fields.push((name, value));
        }
        if r.remaining() != 0 {
            return Err(r.err("trailing bytes"));
        }
        Ok(EventRecord { time_ns, class, fields })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EventRecord {
        EventRecord {
            time_ns: 1_795_318_361_123_456_789,
            class: "ereport.fs.zfs.checksum".into(),
            fields: vec![
                ("vdev_path".into(), FieldValue::Text("/dev/sdb".into())),
                ("vdev_guid".into(), FieldValue::Hex(0xdead_beef_0123_4567)),
                ("zio_level".into(), FieldValue::Dec(0)),
            ],
        }
    }

    #[test]
    fn records_round_trip_canonically() {
        let r = sample();
        let b = r.encode();
        assert_eq!(EventRecord::decode(&b).unwrap(), r);
        let empty = EventRecord { time_ns: 0, class: "x".into(), fields: vec![] };
        assert_eq!(EventRecord::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn damaged_records_are_refused() {
        let b = sample().encode();
        for cut in 0..b.len() {
            assert!(EventRecord::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = b.clone();
        trailing.push(0);
        assert!(EventRecord::decode(&trailing).is_err());
        // The first field's tag: after time, class and count, the name.
        let tag_at = 8 + 2 + "ereport.fs.zfs.checksum".len() + 2 + 2 + "vdev_path".len();
        let mut bad_tag = b.clone();
        bad_tag[tag_at] = 9;
        assert!(EventRecord::decode(&bad_tag).is_err());
        let mut twice = sample();
        twice.fields[1].0 = "vdev_path".into();
        let r = std::panic::catch_unwind(|| twice.encode());
        assert!(r.is_err(), "a repeated name is a writer's bug");
    }

    #[test]
    fn texts_are_cut_at_a_character_boundary() {
        let s = "é".repeat(TEXT_MAX);
        let c = cut_text(&s);
        assert!(c.len() <= TEXT_MAX && c.len() >= TEXT_MAX - 1 && c.chars().all(|ch| ch == 'é'));
        assert_eq!(cut_text("short"), "short");
        assert!(valid_name("zio_blkid") && !valid_name("Zio") && !valid_name("") && !valid_name(&"a".repeat(NAME_MAX + 1)));
    }
}
