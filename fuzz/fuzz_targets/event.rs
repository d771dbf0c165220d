//! Invariants checked:
//! - decoding never panics; the field count, names and texts are checked
//!   against the format's bounds before anything is allocated for them;
//! - the encoding is canonical: a decoded record re-encodes to exactly the
//!   input.
//!
//! Target: tarn_ondisk::event::EventRecord::decode (crates/ondisk/src/event.rs),
//! one entry of a pool's event ring.
//!
//! The body is `tarn_engine::fuzzing::event`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::event(data);
});
