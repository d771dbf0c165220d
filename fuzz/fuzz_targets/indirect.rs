//! Invariants checked:
//! - decoding never panics; a decoded block has exactly 1024 pointers;
//! - re-encoding reproduces the block except each pointer's reserved bytes;
//! - the first 64 re-encoded pointers decode to the same pointers.
//!
//! Target: The indirect block decoder (crates/engine/src/object/state.rs
//! `IndBlock::decode`, via tarn_engine::fuzzing): the input as is (exactly
//! 128 KiB is required), and as the start of a 128 KiB block of holes.
//!
//! The body is `tarn_engine::fuzzing::indirect`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::indirect(data);
});
