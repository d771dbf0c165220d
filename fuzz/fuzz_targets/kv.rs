//! Invariants checked:
//! - decoding never panics; counts and lengths are checked against the input
//!   before anything is allocated;
//! - the encoding is canonical: a decoded map re-encodes to exactly the input.
//!
//! Target: tarn_ondisk::kv::decode (crates/ondisk/src/kv.rs), on the input and on the
//! input behind the "TKV1" magic.
//!
//! The body is `tarn_engine::fuzzing::kv`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::kv(data);
});
