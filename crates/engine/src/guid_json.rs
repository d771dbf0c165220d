//! How a guid appears in JSON: as a string of its decimal digits
//! (`"guid": "12345678901234567890"`), as OpenZFS 2.3's JSON output has it.
//!
//! A guid is a random 64-bit number, so most are above 2^53, where a JSON
//! number stops being exact for every reader that parses numbers as IEEE
//! doubles (JavaScript, jq, Python's `json` with `parse_int=float`, …):
//! printed as a number, a guid read back by such a tool is another guid.
//! Reading accepts the string and, for files written before (the pool
//! cache), the number.
//!
//! Use with `#[serde(with = "tarn_engine::guid_json")]` on a `u64` field.

use serde::de::{self, Deserializer, Visitor};
use serde::Serializer;

pub fn serialize<S: Serializer>(guid: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(guid)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(GuidVisitor)
}

struct GuidVisitor;

impl Visitor<'_> for GuidVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a guid: a string of decimal digits (or an unsigned integer)")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        v.parse().map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct G {
        #[serde(with = "super")]
        guid: u64,
    }

    #[test]
    fn guids_are_strings_and_numbers_still_read() {
        let g = G { guid: u64::MAX - 1 };
        let text = serde_json::to_string(&g).unwrap();
        assert_eq!(text, format!("{{\"guid\":\"{}\"}}", u64::MAX - 1));
        assert_eq!(serde_json::from_str::<G>(&text).unwrap(), g);
        assert_eq!(serde_json::from_str::<G>("{\"guid\":18446744073709551614}").unwrap(), g);
        assert!(serde_json::from_str::<G>("{\"guid\":\"x\"}").is_err());
        assert!(serde_json::from_str::<G>("{\"guid\":-1}").is_err());
    }
}
