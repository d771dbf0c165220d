//! Giving freed memory back to the host.
//!
//! When the ARC shrinks for the host it frees blocks, but an allocator keeps
//! freed memory for reuse unless asked to return it, so the process's
//! resident memory (and its cgroup's charge) would stay where it was: the
//! host sees nothing, and a sampler that waits for it shrinks again and
//! again. Two things stand in the way:
//!
//! - An allocator returns only whole pages of its own that are entirely
//!   free: after evicting part of the ARC, most of its pages still hold a
//!   surviving block. The large buffers the ARC holds (`sys::buf`, 64 KiB
//!   and up) are therefore handed back page by page as they are freed
//!   during a release (`buf::releasing`), whatever the allocator makes of
//!   the rest.
//! - How to ask the allocator for its free pages depends on the one the
//!   *program* links — the engine is a library and must not assume one:
//!   glibc's malloc returns its free heap with `malloc_trim`, mimalloc (the
//!   `tarn` binary's) with `mi_collect(true)`. The program registers what
//!   fits its allocator ([`set_release_hook`]); without one, glibc's is used
//!   where the engine is built against glibc (tests, other programs linking
//!   the engine).

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Registers how this program's allocator returns free memory to the host.
/// The first registration holds (a program has one allocator); returns
/// false when one was registered before.
pub fn set_release_hook(release: fn()) -> bool {
    HOOK.set(release).is_ok()
}

/// Returns the allocator's free memory to the host: the registered hook,
/// else `malloc_trim` under glibc.
pub fn release_free_memory() {
    match HOOK.get() {
        Some(release) => release(),
        None => system_release(),
    }
}

fn system_release() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
