//! Fuzz target bodies for every decoder of on-disk data, shared by the
//! cargo-fuzz harnesses in `fuzz/` and the stable `tests/fuzz_smoke.rs`.
//!
//! ## Purpose
//! Everything tarn reads from a device may be damaged (or, for the device
//! signature prober, be anything at all), so every decoder must
//! turn any byte string into a value or an error: never a panic, never an
//! allocation out of proportion to its input, never an unbounded loop. Each
//! body here feeds one fuzz input to one family of decoders and, when a
//! decoder accepts it, checks the round-trip properties of the format
//! (decode → encode → decode gives the same value; canonical formats give the
//! same bytes back). A failed assertion in a body is a bug found.
//!
//! ## Why the bodies live in the engine
//! The indirect block decoder (`object::state::IndBlock`) is crate-private and
//! the block decoder needs the engine's checksum and compression code, so a
//! separate crate would still need a hook in here. Keeping the bodies in this
//! one `#[doc(hidden)]` module lets the libFuzzer harnesses (nightly, in
//! `fuzz/`, outside the workspace) and the smoke test (stable, part of
//! `cargo test`) run exactly the same code, while the engine's public API
//! only gains functions that take `&[u8]`.
//!
//! ## Checksums
//! Labels and uberblocks verify a BLAKE3 checksum before parsing, so random
//! input would never reach the parser. Their bodies therefore decode the
//! input twice: once as is (the checksum path), and once *sealed* — placed
//! behind the magic with a correct checksum computed over it — so the fuzzer
//! drives the parser behind the checksum through the production `decode`.
//! The same trick puts a magic in front of key/value maps, space logs and
//! object-set roots, and a valid checksum into block pointers for
//! `io::block::decode`.
//!
//! ## Bounds the fuzzer relies on
//! A block's logical size may be up to 16 MiB; the block body only decodes
//! blocks of at most [`FUZZ_LSIZE_MAX`] so that each run stays fast and the
//! allocation check stays meaningful.

mod engine;
mod ondisk;
mod seeds;

pub use engine::{block_decode, indirect, l2arc, probe, spacelog, FUZZ_LSIZE_MAX};
pub use ondisk::{blockptr, brt, dnode, event, kv, label, uberblock, zil};

/// What a body did with its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// At least one decoder accepted the input (and its round trip held).
    Accepted,
    /// Every decoder returned an error.
    Rejected,
}

impl Outcome {
    fn from_any(accepted: &[bool]) -> Self {
        if accepted.iter().any(|&a| a) {
            Outcome::Accepted
        } else {
            Outcome::Rejected
        }
    }
}

/// One fuzz target: a body, seeds of valid encodings, and an allocation bound.
pub struct Target {
    /// Name of the cargo-fuzz target (`fuzz/fuzz_targets/<name>.rs`).
    pub name: &'static str,
    pub run: fn(&[u8]) -> Outcome,
    /// Valid encodings, each of which the body accepts.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Largest single heap allocation the body may make for an input of this
    /// many bytes: a fixed part for buffers of fixed size plus a part
    /// proportional to the input. (Memory zstd allocates through C `malloc`
    /// is not counted.)
    pub alloc_limit_bytes: fn(usize) -> usize,
}

/// Room for error messages, small vectors and fixed 16 KiB label buffers.
const ALLOC_FIXED_BYTES: usize = 64 << 10;

/// Every target, in the order `docs/fuzzing.md` describes them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "blockptr",
        run: blockptr,
        seeds: seeds::blockptr,
        alloc_limit_bytes: |_| ALLOC_FIXED_BYTES,
    },
    Target {
        name: "label",
        run: label,
        seeds: seeds::label,
        alloc_limit_bytes: |_| ALLOC_FIXED_BYTES,
    },
    Target {
        name: "uberblock",
        run: uberblock,
        seeds: seeds::uberblock,
        alloc_limit_bytes: |_| ALLOC_FIXED_BYTES,
    },
    Target {
        name: "dnode",
        run: dnode,
        seeds: seeds::dnode,
        alloc_limit_bytes: |_| ALLOC_FIXED_BYTES,
    },
    // Values are copied out of the input; the map's nodes are small.
    Target {
        name: "kv",
        run: kv,
        seeds: seeds::kv,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + 2 * n,
    },
    // Each 2-byte entry becomes a 24-byte extent; a Vec may double once.
    Target {
        name: "spacelog",
        run: spacelog,
        seeds: seeds::spacelog,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + 32 * n,
    },
    // The decompressed block (<= FUZZ_LSIZE_MAX), or compression buffers of
    // about the input's size.
    Target {
        name: "block_decode",
        run: block_decode,
        seeds: seeds::block_decode,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + FUZZ_LSIZE_MAX + 4 * n,
    },
    // A 128 KiB indirect block and its 1024 decoded block pointers.
    Target {
        name: "indirect",
        run: indirect,
        seeds: seeds::indirect,
        alloc_limit_bytes: |_| ALLOC_FIXED_BYTES + (512 << 10),
    },
    // Decoded entries (a few bytes more than their encoding) and a
    // re-encoded copy.
    Target {
        name: "l2arc",
        run: l2arc,
        seeds: seeds::l2arc,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + 4 * n,
    },
    // 4 KiB blocks and at most 127 decoded entries.
    Target {
        name: "brt",
        run: brt,
        seeds: seeds::brt,
        alloc_limit_bytes: |_| ALLOC_FIXED_BYTES,
    },
    // One copy of the probed window.
    Target {
        name: "probe",
        run: probe,
        seeds: seeds::probe,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + n,
    },
    // At most 32 fields of bounded names and texts, and a re-encoded copy.
    Target {
        name: "event",
        run: event,
        seeds: seeds::event,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + 4 * n,
    },
    // A sealed 128 KiB block, the records decoded from it (their names and
    // data copied) and the block encoded again.
    Target {
        name: "zil",
        run: zil,
        seeds: seeds::zil,
        alloc_limit_bytes: |n| ALLOC_FIXED_BYTES + (128 << 10) + 4 * n,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
