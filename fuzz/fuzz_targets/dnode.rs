//! Invariants checked:
//! - decoding never panics; a zero type byte, and only that, is a free slot;
//! - a decoded dnode fits in the slots its header declares (`slots()` <= byte 4);
//! - it re-encodes to an equal dnode, with the same header bytes except the slot
//!   count and reserved bytes, and the same body (block pointer modulo its
//!   reserved bytes, bonus, inline data);
//! - a decoded object-set root re-encodes (its meta dnode fits 192 bytes) to an
//!   equal value with the same type and counters, and its meta dnode obeys the above.
//!
//! Target: Dnode::decode and ObjsetPhys::decode (crates/ondisk/src/dnode.rs): the
//! input as a dnode, as an object-set root, and behind the object-set magic.
//!
//! The body is `tarn_engine::fuzzing::dnode`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::dnode(data);
});
