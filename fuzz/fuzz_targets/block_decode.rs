//! Invariants checked:
//! - lz4 and zstd decompression of arbitrary bytes into a buffer of the given
//!   size never panics; success means exactly that many bytes; `off` copies;
//! - `block::decode` under a pointer whose checksum matches never panics, returns
//!   lsize bytes, and refuses a payload one byte short;
//! - `decode_inline` of a hole gives lsize zeros, of an embedded payload lsize bytes;
//! - `prepare` then `decode`/`decode_inline` gives the payload back (write and
//!   read paths are inverses), and the prepared pointer round-trips.
//!
//! Target: Block decompression and verification (crates/engine/src/io/compress.rs
//! `decompress`, crates/engine/src/io/block.rs `decode`, `decode_inline`,
//! `prepare`). Input: mode byte (bits 0-1 compression, 2-3 checksum, 4 sector
//! size 512/4096, 5-6 zstd level), logical size u32le (ignored above 1 MiB),
//! then the physical payload.
//!
//! The body is `tarn_engine::fuzzing::block_decode`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::block_decode(data);
});
