//! Invariants checked:
//! - decoding never panics and allocates only within the 16 KiB region's bounds;
//! - the vdev tree is bounded (depth <= 3, <= 256 children, names and paths capped);
//! - a decoded config re-encodes (`encode` is Ok), and decodes to an equal config;
//! - when the declared payload length equals the re-encoded one, the payload
//!   comes back byte for byte (the encoding is canonical);
//! - `VdevNode::leaves` and `guid_sum` do not panic on the decoded tree;
//! - holes (kind 9) are empty top-level nodes, never the last, never logs.
//!
//! Target: LabelConfig::decode (crates/ondisk/src/label.rs), twice per input: as is
//! (magic and BLAKE3 checksum path), and *sealed* — the input placed after the
//! magic with a correct checksum — so the vdev-tree parser behind the checksum
//! is reached.
//!
//! The body is `tarn_engine::fuzzing::label`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::label(data);
});
