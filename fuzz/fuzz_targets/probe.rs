//! Invariants checked:
//! - the device signature prober never panics on any head or tail window;
//! - a reported signature lies inside its window, and zeroing its magic
//!   makes that report go away.
//!
//! Target: sys::probe::identify (crates/engine/src/sys/probe.rs); the first
//! input byte picks the window (even: head, odd: tail).
//!
//! The body is `tarn_engine::fuzzing::probe`, which `fuzz_smoke` also runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_engine::fuzzing::probe(data);
});
