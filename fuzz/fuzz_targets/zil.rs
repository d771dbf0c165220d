//! Invariants checked:
//! - decoding never panics; names, targets, values and write data are
//!   checked against the format's bounds before anything is allocated;
//! - a log header, a record and a log block (the input sealed behind a
//!   header with a correct checksum) that decode re-encode to exactly the
//!   input;
//! - a block that does not verify ends the chain rather than failing.
//!
//! Target: tarn_ondisk::zil (crates/ondisk/src/zil.rs): the intent log's
//! header, records and blocks, as import and replay read them.
//!
//! The body is `tarn_engine::fuzzing::zil`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::zil(data);
});
