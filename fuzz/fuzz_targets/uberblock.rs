//! Invariants checked:
//! - decoding never panics;
//! - a decoded uberblock re-encodes to an equal value, and to the same 512
//!   bytes except reserved ones (448..480 and each block pointer's reserved
//!   bytes; the checksum is recomputed over that).
//!
//! Target: Uberblock::decode (crates/ondisk/src/uberblock.rs), as is (magic and
//! checksum path) and sealed: the input becomes bytes 8..480 behind the magic
//! and gets a correct BLAKE3 checksum, so the field and block-pointer
//! parsing behind the checksum is reached.
//!
//! The body is `tarn_engine::fuzzing::uberblock`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::uberblock(data);
});
