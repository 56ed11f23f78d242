//! Bounds what a killed program loses: every [`PERIOD_MS`] (or `DEP_HANDOFF_MS`; 0 turns
//! it off, for measuring its cost) a client thread asks each
//! recording thread to hand off its buffers at its next block entry, by lowering the tag
//! limit that the block-entry check compares the buffer pointer against. The check then
//! takes its ordinary buffer-full path (a chunk ends before a block), so nothing is added to
//! the instrumented code, and a SIGKILL loses only what a thread recorded since its last
//! hand-off: at most PERIOD_MS of running (plus the time the next block entry takes to come,
//! for a thread blocked in a system call), or a full buffer, whichever is less.

use crate::state::{slot, PerThread, Spin, S_TAGLIM};
use core::ffi::c_void;
use dynamorio_sys::*;
use std::sync::atomic::AtomicBool;

/// Milliseconds between hand-off requests.
pub const PERIOD_MS: i32 = 100;

static LOCK: AtomicBool = AtomicBool::new(false);
/// Each live thread's tag-limit slot and tag buffer base, as addresses.
static mut LIVE: Vec<(usize, u64)> = Vec::new();

/// The live threads, under [`LOCK`].
#[allow(static_mut_refs)]
unsafe fn live() -> &'static mut Vec<(usize, u64)> {
    // SAFETY: callers hold LOCK (the only other access is the single-threaded fork reset).
    &mut *core::ptr::addr_of_mut!(LIVE)
}

/// Adds a thread whose buffers are set up.
pub unsafe fn register(pt: &PerThread) {
    let _g = Spin::lock(&LOCK);
    live().push((slot(pt, S_TAGLIM) as usize, pt.tag_base as u64));
}

/// Removes a thread before its TLS and buffers go away, so the timer never writes freed memory.
pub unsafe fn unregister(pt: &PerThread) {
    let _g = Spin::lock(&LOCK);
    let lim = slot(pt, S_TAGLIM) as usize;
    live().retain(|&(l, _)| l != lim);
}

/// The period in force, from `DEP_HANDOFF_MS` if set.
fn period() -> i32 {
    std::env::var("DEP_HANDOFF_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(PERIOD_MS)
}

/// Starts the timer thread (in each process: a forked child has none of its parent's threads).
pub unsafe fn start() {
    if period() > 0 {
        dr_create_client_thread(Some(tick), core::ptr::null_mut());
    }
}

/// After fork only the forking thread lives on: forget the others and restart the timer.
pub unsafe fn reset_after_fork(pt: &PerThread) {
    LOCK.store(false, std::sync::atomic::Ordering::Relaxed);
    live().clear();
    register(pt);
    start();
}

unsafe extern "C" fn tick(_: *mut c_void) {
    // DynamoRIO's client thread is a task of its own, not in the program's thread group: a
    // SIGKILL of the program leaves it running (and holding the launcher's socket open), so
    // it ends once the program's first thread, its parent, is gone. (A program whose first
    // thread exits alone loses the timer for its other threads.)
    let parent = libc::getppid();
    let ms = period();
    loop {
        dr_sleep(ms);
        if libc::getppid() != parent {
            return;
        }
        let _g = Spin::lock(&LOCK);
        for &(lim, base) in live().iter() {
            // SAFETY: the slot belongs to a registered thread, whose TLS lives until it
            // unregisters under LOCK. An aligned 8-byte store is atomic on x86-64; the
            // thread's own reset of the limit after a hand-off may win, which only delays
            // the hand-off to the next tick.
            (lim as *mut u64).write_volatile(base);
        }
    }
}
