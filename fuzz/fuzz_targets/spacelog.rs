//! Invariants checked:
//! - decoding never panics and holds at most input_len / 2 extents (every entry
//!   takes at least two bytes; counts are checked before reserving);
//! - a decoded value re-encodes to bytes that decode to an equal value;
//! - the re-encoding respects `encoded_records_upper_bound` and equals
//!   `encoded_records_upper_bound_for(.., 0, 63)` / `encoded_checkpoint_upper_bound(.., 0)`.
//!
//! Target: spacelog::decode_records and decode_checkpoint
//! (crates/engine/src/pool/alloc/spacelog.rs), on the input and on the input
//! behind each format's magic and version.
//!
//! The body is `tarn_engine::fuzzing::spacelog`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::spacelog(data);
});
