//! Invariants checked:
//! - decoding never panics;
//! - a decoded pointer passes `BlockPtr::validate` (known enums, psize <= lsize,
//!   embedded payload <= 104 bytes, every DVA large enough, no dva[2] without dva[1]);
//! - `embedded_payload`, `ndvas` and `asize_total` do not panic on it;
//! - re-encoding reproduces the input's 128 bytes except the reserved ones
//!   (61..64, and 112..128 when not embedded), and decodes to an equal pointer.
//!
//! Target: BlockPtr::decode (crates/ondisk/src/bp.rs) on arbitrary bytes.
//!
//! The body is `tarn_engine::fuzzing::blockptr`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::blockptr(data);
});
