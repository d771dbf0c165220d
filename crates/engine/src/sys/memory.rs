//! Giving freed memory back to the host.
//!
//! When the ARC shrinks for the host it frees blocks, but an allocator keeps
//! freed pages for reuse unless asked to return them, so the process's
//! resident memory (and its cgroup's charge) would stay where it was: the
//! host sees nothing, and a sampler that waits for it shrinks again and
//! again. How to ask depends on the allocator the *program* links — the
//! engine is a library and must not assume one: glibc's malloc returns its
//! free heap with `malloc_trim`, mimalloc (the `tarn` binary's) with
//! `mi_collect(true)`. The program registers what fits its allocator
//! ([`set_release_hook`]); without one, glibc's is used where the engine is
//! built against glibc (tests, other programs linking the engine).
//!
//! An allocator with per-thread heaps (mimalloc) returns only the calling
//! thread's free pages: a block freed by another thread stays in its
//! owner's heap until the owner collects. The ARC's block buffers are
//! allocated by the I/O threads and the readers and freed by whoever
//! evicts them, so a release asks every thread: [`release_free_memory`]
//! releases the caller's pages and raises an epoch; the engine's long-lived
//! threads call [`release_if_asked`] where they pass often (an I/O thread
//! between operations and at least every 100 ms when idle, a reader at
//! each block read) and release theirs once per epoch.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();
/// Raised by every `release_free_memory`.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last epoch this thread released for.
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Registers how this program's allocator returns free memory to the host.
/// The first registration holds (a program has one allocator); returns
/// false when one was registered before.
pub fn set_release_hook(release: fn()) -> bool {
    HOOK.set(release).is_ok()
}

/// Returns the allocator's free memory to the host: the calling thread's
/// now (the registered hook, else `malloc_trim` under glibc), every other
/// engine thread's when it next passes `release_if_asked`.
pub fn release_free_memory() {
    let epoch = EPOCH.fetch_add(1, Ordering::AcqRel) + 1;
    SEEN.with(|s| s.set(epoch));
    release_here();
}

/// Releases this thread's free memory if a release was asked for since it
/// last did (one atomic load otherwise).
pub fn release_if_asked() {
    let epoch = EPOCH.load(Ordering::Acquire);
    if SEEN.with(|s| s.replace(epoch)) != epoch {
        release_here();
    }
}

fn release_here() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_releases_once_per_epoch() {
        // No hook in tests: the release is glibc's (or nothing), harmless.
        release_free_memory();
        let e = EPOCH.load(Ordering::Acquire);
        assert_eq!(SEEN.with(|s| s.get()), e, "the caller released for its own epoch");
        let other = std::thread::spawn(move || {
            release_if_asked();
            SEEN.with(|s| s.get())
        });
        assert!(other.join().unwrap() >= e, "another thread catches up with the epoch");
    }
}
