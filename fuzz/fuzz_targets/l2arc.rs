//! Invariants checked:
//! - the L2ARC device header decoder never panics; a header that decodes
//!   re-encodes to one that decodes to the same fields;
//! - the log block decoder never panics, holds at most input_len / 136
//!   entries, and an accepted log block re-encodes to an equal one.
//!
//! Target: arc::l2 header and log block decoders (crates/engine/src/arc/l2.rs),
//! on the input, on the input sealed as a header, and behind the log magic.
//!
//! The body is `tarn_engine::fuzzing::l2arc`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::l2arc(data);
});
