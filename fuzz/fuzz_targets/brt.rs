//! Invariants checked:
//! - decoding never panics, and only whole 4 KiB blocks decode;
//! - a decoded header has a power-of-two bucket count and saved >= used;
//! - a decoded bucket holds at most 127 entries, strictly ascending, each
//!   with refcount >= 1 and a positive asize that is a multiple of 512;
//! - both encodings are canonical: what decodes re-encodes to the same block.
//!
//! Target: tarn_ondisk::brt::{BrtHeader::decode, decode_bucket}
//! (crates/ondisk/src/brt.rs), on the input as a block and behind each magic.
//!
//! The body is `tarn_engine::fuzzing::brt`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::brt(data);
});
