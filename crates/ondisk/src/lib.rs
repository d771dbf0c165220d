//! tarn's on-disk format: types and codecs only, no I/O.
//!
//! Everything here is pure: structures are encoded to and decoded from byte
//! slices with explicit little-endian fields (see [`codec`]). Decoders treat
//! their input as hostile — it comes from a device that may be damaged — and
//! return [`DecodeError`] rather than panic; the fuzz targets in `fuzz/` and the
//! `fuzz_smoke` test hold them to that. `docs/format.md` describes the same
//! layouts for someone writing a reader.

pub mod bp;
pub mod brt;
pub mod codec;
pub mod dnode;
pub mod event;
pub mod kv;
pub mod label;
pub mod uberblock;
pub mod zil;

pub use bp::{BlockPtr, ChecksumType, Compression, Dva, ObjectType};
pub use codec::DecodeError;
