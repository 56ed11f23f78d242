//! Bounds what a killed program loses: every [`PERIOD_MS`] of the program's CPU time (or
//! `DEP_HANDOFF_MS`; 0 turns it off, for measuring its cost) a timer asks each recording
//! thread to hand off its buffers at its next block entry, by lowering the tag limit that
//! the block-entry check compares the buffer pointer against. The check then
//! takes its ordinary buffer-full path (a chunk ends before a block), so nothing is added to
//! the instrumented code, and a SIGKILL loses only what a thread recorded since its last
//! hand-off: what it recorded in the last PERIOD_MS of the program's CPU time (plus until
//! its next block entry), or a full buffer, whichever is less.
//!
//! Not a client thread (`dr_create_client_thread`): on Linux that is a task outside the
//! program's thread group, which a SIGKILL of the program leaves running, holding the
//! launcher's socket, and which made DynamoRIO's exit wait forever in
//! `synch_with_all_threads` for bench/compress.

use crate::state::{slot, PerThread, Spin, S_TAGLIM};
use core::ffi::c_void;
use dynamorio_sys::*;
use std::sync::atomic::AtomicBool;

/// Milliseconds between hand-off requests.
pub const PERIOD_MS: i32 = 100;

static LOCK: AtomicBool = AtomicBool::new(false);
/// Each live thread's tag-limit slot, as an address.
static mut LIVE: Vec<usize> = Vec::new();

/// The live threads, under [`LOCK`].
///
/// # Safety
/// Callers hold LOCK, or are the single thread left after fork; exercised by tests/collector.rs
/// fork_and_exec and sigkill_loses_at_most_the_last_period.
#[allow(static_mut_refs)]
unsafe fn live() -> &'static mut Vec<usize> {
    &mut *core::ptr::addr_of_mut!(LIVE)
}

/// Adds a thread whose buffers are set up.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn register(pt: &PerThread) {
    let _g = Spin::lock(&LOCK);
    live().push(slot(pt, S_TAGLIM) as usize);
}

/// Removes a thread before its TLS and buffers go away, so the timer never writes freed memory.
///
/// # Safety
/// `pt` is the calling thread's own PerThread from [`get`], set up by [`new_thread`] and not yet
/// freed; exercised by tests/collector.rs hello and eight_threads_with_mutexes.
pub unsafe fn unregister(pt: &PerThread) {
    let _g = Spin::lock(&LOCK);
    let lim = slot(pt, S_TAGLIM) as usize;
    live().retain(|&l| l != lim);
}

/// The period in force, from `DEP_HANDOFF_MS` if set.
fn period() -> i32 {
    std::env::var("DEP_HANDOFF_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(PERIOD_MS)
}

/// Starts the timer: an ITIMER_PROF of the thread group, so it runs on the program's CPU time
/// (a sleeping program needs no hand-off: its buffers do not grow) and, unlike a real-time
/// timer, its signal never interrupts the program's sleeps. DynamoRIO keeps it apart from
/// any ITIMER_PROF of the program's own. Also after fork: timers are not inherited.
///
/// # Safety
/// Called from a DynamoRIO event (init or fork), where dr_set_itimer is allowed; exercised by
/// tests/collector.rs fork_and_exec and sigkill_loses_at_most_the_last_period.
pub unsafe fn start() {
    let ms = period();
    if ms > 0 {
        dr_set_itimer(libc::ITIMER_PROF, ms as u32, Some(tick));
    }
}

/// Stops the timer before an execve. A process's interval timers survive execve, and the
/// new image takes signals at their default action until DynamoRIO is set up in it:
/// SIGPROF's ends the process, so a program that execs after running 100 ms of CPU time
/// (pyenv's `python3` shim, a bash script that execs bash that execs python) was killed by
/// it (`exec_after_the_period_is_not_killed`). The new image starts its own timer.
///
/// # Safety
/// Called from DynamoRIO's pre-syscall event, where dr_set_itimer is allowed; exercised by
/// tests/collector.rs exec_after_the_period_is_not_killed.
pub unsafe fn stop() {
    if period() > 0 {
        dr_set_itimer(libc::ITIMER_PROF, 0, None);
    }
}

/// After fork only the forking thread lives on: forget the others and restart the timer.
///
/// # Safety
/// Only in the child's fork event, single-threaded, with its own `pt`; exercised by
/// tests/collector.rs fork_and_exec and sigkill_loses_at_most_the_last_period.
pub unsafe fn reset_after_fork(pt: &PerThread) {
    LOCK.store(false, std::sync::atomic::Ordering::Relaxed);
    live().clear();
    register(pt);
    start();
}

/// The timer's callback, in a signal handler on the thread that took the signal: it asks
/// every live thread to hand off, or, if the registry is being changed (perhaps by this
/// very thread, interrupted), only this one. No waiting on a lock here.
///
/// # Safety
/// DynamoRIO calls it as the itimer callback in signal context on an application thread, with valid
/// pointers for the duration of the call; exercised by tests/collector.rs fork_and_exec and
/// sigkill_loses_at_most_the_last_period.
unsafe extern "C" fn tick(dc: *mut c_void, _mc: *mut dr_mcontext_t) {
    use std::sync::atomic::Ordering;
    if LOCK.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
        for &lim in live().iter() {
            // SAFETY: the slot belongs to a registered thread, whose TLS lives until it
            // unregisters under LOCK. An aligned 8-byte store is atomic on x86-64; the
            // thread's own reset of the limit after a hand-off may win, which only delays
            // the hand-off to the next tick. A limit of 0 is below any buffer pointer (a
            // thread's buffers change from chunk to chunk: a slab has several slots).
            unsafe { (lim as *mut u64).write_volatile(0) };
        }
        LOCK.store(false, Ordering::Release);
    } else {
        let pt = crate::state::get(dc);
        if !pt.is_null() {
            // SAFETY: this thread's own TLS, live while it runs.
            unsafe { slot(&*pt, S_TAGLIM).write_volatile(0) };
        }
    }
}
