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

/// The counters are the process's and a test binary runs its tests on several threads.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held for the whole of every test in a binary using this allocator, so that no other
/// test allocates while one measures.
pub fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes live now (whichever thread allocated them; see [`turn`]).
#[allow(dead_code)] // not every binary including this asks
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Runs `f` and returns its result with the most bytes live at once while it ran, beyond
/// those live when it started (whichever thread allocated them; see [`turn`]).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (r, peak)
}

/// The peaks of `measure_profile` on three profiles of random code: one long thread in one
/// chunk, 3000 short threads, and both. While one recovery worker takes the long chunk,
/// the other finishes the short threads' chunks, as many as the driver runs ahead, and
/// they wait for it: the third peak less the other two is what waiting chunks hold.
pub fn long_and_short_threads(measure_profile: impl Fn(&dep_profile::container::Profile) -> usize) -> (usize, usize, usize) {
    use dep_profile::simulate::{random_code, random_path, write_profile, PathStep, Rng};
    let mut rng = Rng::new(12);
    let code = random_code(&mut rng, 30);
    let long = random_path(&mut rng, &code, 1_000_000, false);
    let short: Vec<_> = (0..3000).map(|_| random_path(&mut rng, &code, 12, false)).collect();
    let peak = |paths: &[Vec<PathStep>]| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.dep");
        write_profile(std::fs::File::create(&path).unwrap(), dep_profile::Machine::x86_64(2696), &code, paths, 11).unwrap();
        measure_profile(&dep_profile::container::Profile::open(&path).unwrap())
    };
    let (alone, few) = (peak(std::slice::from_ref(&long)), peak(&short));
    let both = peak(&std::iter::once(long).chain(short).collect::<Vec<_>>());
    eprintln!("peaks: long thread alone {} KiB, short threads {} KiB, both {} KiB", alone >> 10, few >> 10, both >> 10);
    (alone, few, both)
}
