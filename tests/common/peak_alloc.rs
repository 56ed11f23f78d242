//! A global allocator for tests that bound memory: the system allocator, counting the bytes
//! live and their peak. Included by path (`#[path = ...] mod peak_alloc;`) in the test
//! binaries that measure; it becomes that binary's allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Peak;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator with the caller's layout unchanged; the
// counters only observe sizes (exercised by every allocation of the binaries using it).
unsafe impl GlobalAlloc for Peak {
    // SAFETY: (contract) GlobalAlloc's, which the caller keeps and the System call below gets.
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
        unsafe { System.alloc(l) }
    }
    // SAFETY: (contract) GlobalAlloc's, passed on unchanged.
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` above with this layout.
        unsafe { System.dealloc(p, l) }
    }
    // SAFETY: (contract) GlobalAlloc's, passed on unchanged.
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let live = LIVE.fetch_add(new, Ordering::Relaxed) + new;
        PEAK.fetch_max(live, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from this allocator with layout `l`; `new` is the caller's size.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Peak = Peak;

/// Starts a measurement: the bytes live now, which the peak is counted from.
pub fn start() -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    base
}

/// The most bytes live at once since `start` returned `base`, beyond `base`.
pub fn peak_since(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}
