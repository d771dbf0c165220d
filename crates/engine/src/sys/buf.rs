//! `AlignedBuf`: a zero-initialised heap buffer whose start is aligned to
//! 4096 bytes (512 for buffers under 4 KiB) and whose length is a multiple
//! of 512.
//!
//! Why: `O_DIRECT` I/O bypasses the page cache and DMAs straight into the
//! caller's memory, so the kernel demands that the buffer address, the length
//! and the file offset be multiples of the device's logical block size (512 or
//! 4096). A `Vec<u8>` gives no alignment guarantee, so every I/O path in tarn
//! that wants zero-copy direct I/O uses this type instead. 4096 covers both
//! 512-byte and 4Kn devices, and every 4096-multiple slice of an `AlignedBuf`
//! is itself aligned.
//!
//! Design: a raw allocation made with `std::alloc::alloc_zeroed` and a
//! `Layout` of align 4096 — or, from 256 KiB up, an anonymous mapping made with
//! MAP_POPULATE (zeroed, page aligned, and faulted in by one system call; such
//! buffers are always mapped, so their release is always munmap). Zero-length buffers allocate nothing (allocating 0
//! bytes is undefined behaviour for `GlobalAlloc`) and instead point at a
//! dangling-but-aligned address, which is valid for empty slices. Everything
//! else is exposed through `Deref<Target = [u8]>`, so the unsafe surface is the
//! constructor, `Drop` and the two slice conversions.
//!
//! Recycling: large buffers (64 KiB and up) are kept on free lists by
//! allocation size when dropped, up to `RECYCLE_MAX_BYTES` in all, and handed
//! out again by [`AlignedBuf::recycled`]. Fresh large allocations cost a page
//! fault and a kernel page clear per 4 KiB — measured at a third of the CPU of
//! a sequential write before this existed. A recycled buffer holds whatever
//! its last user wrote (always initialised memory), so only callers that
//! overwrite every byte use it; `zeroed` still zeroes.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every `AlignedBuf` in memory.
pub const BUF_ALIGN: usize = 4096;
/// Granularity of every `AlignedBuf` length (one disk sector).
pub const BUF_GRANULE: usize = 512;

/// A 4096-aligned, zero-initialised byte buffer whose length is a multiple of 512.
pub struct AlignedBuf {
    /// Start of the allocation; dangling (but 4096-aligned) when `len == 0`.
    ptr: NonNull<u8>,
    len: usize,
    /// Size of the allocation (>= len); 0 when nothing is allocated.
    cap: usize,
}

/// Buffers this large come straight from mmap with MAP_POPULATE: the kernel
/// hands over zeroed pages in one call, instead of a memset that faults every
/// 4 KiB page in separately (a third of a fresh process's write-path CPU).
const MMAP_MIN_BYTES: usize = 256 << 10;

fn map_populated(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: an anonymous private mapping has no preconditions; the result
    // is checked for MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(p as *mut u8)
}

/// Releases an allocation of `cap` bytes made by `zeroed`.
///
/// # Safety
/// `ptr` must come from `zeroed` with this `cap` and not be used afterwards.
unsafe fn release(ptr: NonNull<u8>, cap: usize) {
    if cap >= MMAP_MIN_BYTES {
        // SAFETY: buffers of this size are always mapped by `zeroed`, and the
        // caller guarantees nothing else owns the mapping. munmap of a whole
        // mapping cannot fail; if it did, leaking is the safe outcome.
        unsafe { libc::munmap(ptr.as_ptr() as *mut libc::c_void, cap) };
        return;
    }
    // SAFETY: allocated by `alloc_zeroed` with this layout (caller's promise).
    unsafe { alloc::dealloc(ptr.as_ptr(), AlignedBuf::layout(cap)) }
}

/// Smallest allocation worth recycling.
const RECYCLE_MIN_BYTES: usize = 64 << 10;
/// Most bytes kept on the free lists unless a pool raises it
/// ([`set_recycle_limit`]): enough for a steady write stream's dirty data to
/// reuse its buffers instead of faulting in new pages.
static RECYCLE_MAX_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1 << 30);

/// Sets how many bytes of free buffers may be kept (pools set it from their
/// dirty-data maximum, which bounds how much a write stream has in flight).
pub fn set_recycle_limit(bytes: usize) {
    RECYCLE_MAX_BYTES.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// Frees kept buffers until at most `keep` bytes remain, their memory given
/// back to the host (when writing goes quiet, when the ARC shrinks).
pub fn trim_recycled(keep: usize) {
    let mut victims = Vec::new();
    if let Ok(mut g) = FREE.lock() {
        if let Some(fl) = g.as_mut() {
            for (cap, list) in fl.by_cap.iter_mut() {
                while fl.bytes > keep {
                    let Some(p) = list.pop() else { break };
                    fl.bytes -= cap;
                    victims.push((p, *cap));
                }
            }
        }
    }
    for (p, cap) in victims {
        // SAFETY: every pointer on the free lists came from `zeroed` with
        // this capacity and is owned by nothing else.
        unsafe { release_to_host(p, cap) }
    }
}

/// Bytes currently kept on the free lists.
pub fn recycled_bytes() -> usize {
    FREE.lock().ok().and_then(|g| g.as_ref().map(|f| f.bytes)).unwrap_or(0)
}

struct FreeLists {
    by_cap: std::collections::HashMap<usize, Vec<NonNull<u8>>>,
    bytes: usize,
}

// SAFETY: the free lists own the allocations they hold (nothing else points
// at them), so moving them between threads is sound.
unsafe impl Send for FreeLists {}

static FREE: std::sync::Mutex<Option<FreeLists>> = std::sync::Mutex::new(None);

fn take_recycled(cap: usize) -> Option<NonNull<u8>> {
    let mut g = FREE.lock().ok()?;
    let fl = g.as_mut()?;
    let p = fl.by_cap.get_mut(&cap)?.pop()?;
    fl.bytes -= cap;
    Some(p)
}

/// Keeps an allocation for reuse; false when the lists are full.
fn give_back(ptr: NonNull<u8>, cap: usize) -> bool {
    if cap < RECYCLE_MIN_BYTES {
        return false;
    }
    let Ok(mut g) = FREE.lock() else { return false };
    let fl = g.get_or_insert_with(|| FreeLists { by_cap: Default::default(), bytes: 0 });
    if fl.bytes + cap > RECYCLE_MAX_BYTES.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    fl.bytes += cap;
    fl.by_cap.entry(cap).or_default().push(ptr);
    true
}

// SAFETY: `AlignedBuf` uniquely owns its allocation (like `Box<[u8]>`), and
// `u8` is `Send + Sync`, so moving or sharing it across threads is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: see `Send`; shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zero bytes. Panics if `len` is not a multiple of 512.
    pub fn zeroed(len: usize) -> AlignedBuf {
        assert!(
            len.is_multiple_of(BUF_GRANULE),
            "AlignedBuf length {len} is not a multiple of {BUF_GRANULE}"
        );
        if len == 0 {
            // An address equal to the alignment is non-null and aligned, which is
            // all an empty slice needs; nothing is allocated or freed.
            let dangling = std::ptr::without_provenance_mut::<u8>(BUF_ALIGN);
            let ptr = NonNull::new(dangling).expect("BUF_ALIGN is non-zero");
            return AlignedBuf { ptr, len, cap: 0 };
        }
        if len >= MMAP_MIN_BYTES {
            // Out of memory for a mapping is out of memory (the allocator
            // would fail too); large buffers are always mapped, so `release`
            // knows how to give them back.
            let Some(ptr) = map_populated(len) else { alloc::handle_alloc_error(Self::layout(len)) };
            return AlignedBuf { ptr, len, cap: len };
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (len > 0 checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len, cap: len }
    }

    /// A buffer of `len` bytes with unspecified (but initialised) contents,
    /// reused from the free lists when one of that size is there. For callers
    /// that overwrite every byte.
    pub fn recycled(len: usize) -> AlignedBuf {
        assert!(len.is_multiple_of(BUF_GRANULE), "AlignedBuf length {len} is not a multiple of {BUF_GRANULE}");
        match take_recycled(len) {
            Some(ptr) => AlignedBuf { ptr, len, cap: len },
            None => AlignedBuf::zeroed(len),
        }
    }

    /// Shortens the buffer to `len` bytes (a multiple of 512), keeping the
    /// allocation.
    pub fn truncate(&mut self, len: usize) {
        assert!(len.is_multiple_of(BUF_GRANULE) && len <= self.len, "bad truncate of {} to {}", self.len, len);
        self.len = len;
    }

    /// Copies `data` into a new buffer, padding the length up to a multiple of
    /// 512 with zeros.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let padded = data.len().div_ceil(BUF_GRANULE) * BUF_GRANULE;
        let mut buf = AlignedBuf::zeroed(padded);
        buf[..data.len()].copy_from_slice(data);
        buf
    }

    /// Length in bytes (always a multiple of 512).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for the zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Buffers under 4 KiB are aligned to 512 only: they are too small to be
    /// a 4 KiB-sector I/O on their own, and page alignment for every small
    /// block (a 1 KiB file) wastes memory and time. A device that needs more
    /// alignment bounces such a buffer (`FileDevice` does).
    fn layout(len: usize) -> Layout {
        let align = if len >= BUF_ALIGN { BUF_ALIGN } else { BUF_GRANULE };
        // Only fails when `len` rounded up to the alignment overflows isize,
        // i.e. a request no allocator could satisfy anyway.
        Layout::from_size_align(len, align).expect("AlignedBuf length overflows isize")
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is non-null and aligned; when `len > 0` it points at
        // `len` initialised (zeroed) bytes we own; when `len == 0` an aligned
        // dangling pointer is a valid empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        if RELEASING.get() {
            // SAFETY: allocated in `zeroed` with exactly this capacity.
            unsafe { release_to_host(self.ptr, self.cap) }
        } else if !give_back(self.ptr, self.cap) {
            // SAFETY: allocated in `zeroed` with exactly this capacity.
            unsafe { release(self.ptr, self.cap) }
        }
    }
}

thread_local! {
    /// Set while this thread runs `releasing`.
    static RELEASING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every buffer freed on this thread during it given back to
/// the host at once — not kept for reuse, and its whole pages returned even
/// when the allocator keeps the rest of its page (see `sys::memory`). For
/// the ARC shrinking for the host: the blocks it evicts are the memory the
/// host is short of.
pub fn releasing<R>(f: impl FnOnce() -> R) -> R {
    let was = RELEASING.replace(true);
    let r = f();
    RELEASING.set(was);
    r
}

/// Gives an allocation's memory back to the host and frees it: a mapping is
/// unmapped; a heap block's whole pages are dropped (MADV_DONTNEED: they
/// read as zeros if touched again) before the allocator gets the block
/// back, since an allocator returns a page only once every block on it is
/// free.
///
/// # Safety
/// As `release`.
unsafe fn release_to_host(ptr: NonNull<u8>, cap: usize) {
    const PAGE: usize = 4096;
    if (RECYCLE_MIN_BYTES..MMAP_MIN_BYTES).contains(&cap) {
        // Buffers this large are 4096-aligned (`layout`): whole pages from
        // the start, up to the last whole page inside the allocation.
        debug_assert!((ptr.as_ptr() as usize).is_multiple_of(PAGE), "a large buffer is page aligned");
        // SAFETY: the range lies inside the allocation, which the caller
        // owns and no one reads again; dropping anonymous private pages is
        // always allowed (they become zero-fill-on-demand).
        unsafe { libc::madvise(ptr.as_ptr() as *mut libc::c_void, cap / PAGE * PAGE, libc::MADV_DONTNEED) };
    }
    // SAFETY: the caller's promise.
    unsafe { release(ptr, cap) }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut copy = AlignedBuf::recycled(self.len);
        copy.copy_from_slice(self);
        copy
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &AlignedBuf) -> bool {
        **self == **other
    }
}

impl Eq for AlignedBuf {}

impl fmt::Debug for AlignedBuf {
    /// Prints only the length: buffers are often megabytes of block data.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident bytes of the page range [p, p + len), by mincore (0 once
    /// the range is unmapped).
    fn resident(p: *const u8, len: usize) -> usize {
        let mut v = vec![0u8; len / 4096];
        // SAFETY: mincore only reads the mapping state of the range and
        // writes one byte per page into the vector.
        if unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) } != 0 {
            return 0;
        }
        v.iter().filter(|&&b| b & 1 == 1).count() * 4096
    }

    /// Regression (issue 11): the ARC shrank for the host but the daemon's
    /// resident memory did not follow — evicted blocks went onto the free
    /// lists, or back to an allocator whose pages still held other blocks.
    /// Buffers freed while releasing give their pages back at once.
    #[test]
    fn buffers_freed_while_releasing_leave_no_resident_pages() {
        // 64 KiB: on the heap (larger blocks may be mappings of their own,
        // which any free unmaps), and kept for reuse outside `releasing`.
        const LEN: usize = 64 << 10;
        let _neighbour = AlignedBuf::zeroed(LEN);
        let mut b = AlignedBuf::zeroed(LEN);
        b.fill(7);
        let p = b.as_ptr();
        assert_eq!(resident(p, LEN), LEN);
        releasing(|| drop(b));
        // The allocator may have written its free-list link into the
        // first page; every other page is gone.
        assert!(resident(p, LEN) <= 4096, "{} bytes still resident", resident(p, LEN));
        assert!(!RELEASING.get());
    }

    #[test]
    fn pointer_is_aligned_and_zeroed() {
        for len in [512, 4096, 8192 + 512, 1 << 20] {
            let buf = AlignedBuf::zeroed(len);
            let align = if len >= BUF_ALIGN { BUF_ALIGN } else { BUF_GRANULE };
            assert_eq!(buf.as_ptr() as usize % align, 0);
            assert_eq!(buf.len(), len);
            assert!(buf.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn from_slice_pads_with_zeros() {
        let buf = AlignedBuf::from_slice(b"hello");
        assert_eq!(buf.len(), 512);
        assert_eq!(&buf[..5], b"hello");
        assert!(buf[5..].iter().all(|&b| b == 0));
        let exact = AlignedBuf::from_slice(&[7u8; 1024]);
        assert_eq!(exact.len(), 1024);
        assert!(exact.iter().all(|&b| b == 7));
    }

    #[test]
    fn zero_length_works() {
        let mut buf = AlignedBuf::zeroed(0);
        assert!(buf.is_empty());
        assert_eq!(buf.as_ptr() as usize % BUF_ALIGN, 0);
        assert_eq!(&buf[..], &[] as &[u8]);
        buf.fill(1);
        let c = buf.clone();
        assert_eq!(c, buf);
        assert_eq!(AlignedBuf::from_slice(&[]).len(), 0);
    }

    #[test]
    fn clone_mutate_and_debug() {
        let mut a = AlignedBuf::zeroed(1024);
        a[3] = 9;
        let mut b = a.clone();
        assert_eq!(a, b);
        b[3] = 1;
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "AlignedBuf { len: 1024 }");
        let moved = std::thread::spawn(move || b.len()).join().expect("thread");
        assert_eq!(moved, 1024);
    }

    #[test]
    #[should_panic(expected = "not a multiple of 512")]
    fn rejects_unaligned_length() {
        let _ = AlignedBuf::zeroed(100);
    }
}
