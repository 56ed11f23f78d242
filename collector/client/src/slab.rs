//! A thread's buffers in memory shared with the launcher ([`wire::SlabLayout`]): the thread
//! fills one slot while the launcher compresses the ones handed to it, and a full slot
//! changes hands with a small frame instead of its bytes going through the socket.

use crate::state::{launcher_gone, send_with_fd, LOST, TAG_BUF, TRU_BUF, VAL_BUF};
use core::ffi::c_void;
use dep_collector::wire::{self, SlabLayout, SLOT_FREE, SLOT_FULL};
use dynamorio_sys::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// Slots per thread: one being filled and two with the launcher, so that a burst of
/// hand-offs waits only when compression is two chunks behind.
pub const SLOTS: u32 = 3;

/// How long one wait for a slot sleeps before it looks at the connection again.
const WAIT_NS: i64 = 100_000_000;

/// A thread's slab, mapped here and in the launcher.
pub struct Slab {
    base: *mut u8,
    layout: SlabLayout,
    /// The slot being filled.
    pub current: u32,
}

impl Slab {
    /// Makes a slab for `thread` and sends it to the launcher; `None` if the system refuses,
    /// and the thread then keeps private buffers, sent through the socket.
    ///
    /// # Safety
    /// Called from a DynamoRIO event on the thread the slab is for (where dr_map_file may be
    /// used); exercised by tests/collector.rs hello and eight_threads_with_mutexes.
    pub unsafe fn create(thread: u32, truth: bool) -> Option<Slab> {
        let layout =
            SlabLayout { slots: SLOTS, tags: TAG_BUF as u64, values: VAL_BUF as u64, truth: if truth { TRU_BUF as u64 } else { 0 } };
        let name = c"dep-slab";
        // SAFETY: `name` is a NUL-terminated string; memfd_create has no other input.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            // No descriptor free (a program that exhausts its limit): the socket carries the
            // chunks instead, which loses nothing but speed, so the user is not told.
            return None;
        }
        let mut size = layout.len() as usize;
        // SAFETY: `fd` is the memfd just created; ftruncate and dr_map_file only size and map
        // it (the mapping is shared, read-write, at an address DynamoRIO picks).
        let base = unsafe {
            if libc::ftruncate(fd, size as libc::off_t) != 0 {
                core::ptr::null_mut()
            } else {
                dr_map_file(fd as file_t, &mut size, 0, core::ptr::null_mut(), DR_MEMPROT_READ | DR_MEMPROT_WRITE, 0)
            }
        };
        let sent = !base.is_null() && size as u64 >= layout.len() && send_with_fd(wire::SLAB, thread, &layout.encode(), fd);
        // SAFETY: the memfd is ours; the mapping (here) and the descriptor in flight keep it.
        unsafe { libc::close(fd) };
        if !sent {
            if !base.is_null() {
                // SAFETY: the mapping just made, of `size` bytes, not yet used.
                unsafe { dr_unmap_file(base, size) };
            }
            return None;
        }
        Some(Slab { base: base as *mut u8, layout, current: 0 })
    }

    /// The word at `offset` of the control page.
    fn word(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: the control page is mapped while the slab lives, and every offset used
        // (state words below CLOSED, CLOSED itself) is 4-byte aligned inside it.
        unsafe { &*(self.base.add(offset as usize) as *const AtomicU32) }
    }

    /// The current slot's DEP_c, DEP_m and truth regions (the last null without truth).
    pub fn regions(&self) -> (*mut u8, *mut u8, *mut u8) {
        let l = &self.layout;
        // SAFETY: slot_offset(current) + slot_len is within the mapping (current < slots).
        unsafe {
            let s = self.base.add(l.slot_offset(self.current) as usize);
            let tru = if l.truth == 0 { core::ptr::null_mut() } else { s.add((l.tags + l.values) as usize) };
            (s, s.add(l.tags as usize), tru)
        }
    }

    /// Hands the current slot to the launcher with the chunk header `h`, then waits until the
    /// next slot is free (the launcher is done with it, or gone).
    pub fn hand_off(&mut self, thread: u32, h: &wire::ChunkHeader) {
        let state = self.word(4 * self.current as u64);
        state.store(SLOT_FULL, Ordering::Release);
        if !crate::state::send(wire::SLAB_CHUNK, thread, &[&wire::slab_chunk(self.current, h)]) {
            // Never to be taken back: the launcher did not get the frame.
            state.store(SLOT_FREE, Ordering::Relaxed);
        }
        self.current = (self.current + 1) % self.layout.slots;
        let next = self.word(4 * self.current as u64);
        while next.load(Ordering::Acquire) != SLOT_FREE {
            if self.word(SlabLayout::CLOSED).load(Ordering::Acquire) != 0 || LOST.load(Ordering::Relaxed) || launcher_gone() {
                // What the slot holds will not be read: the thread goes on, and loses it.
                break;
            }
            let t = libc::timespec { tv_sec: 0, tv_nsec: WAIT_NS };
            // SAFETY: FUTEX_WAIT on a live, aligned word of the shared mapping (not private:
            // the launcher's FUTEX_WAKE is another process's); it returns at once if the
            // word is no longer FULL, and after `t` at the latest.
            unsafe {
                libc::syscall(libc::SYS_futex, next.as_ptr(), libc::FUTEX_WAIT, SLOT_FULL, &t as *const libc::timespec, 0usize, 0u32)
            };
        }
    }

    /// Unmaps the slab here (the launcher's mapping keeps what it was handed).
    ///
    /// # Safety
    /// Nothing of the slab is used afterwards; exercised by tests/collector.rs hello and
    /// eight_threads_with_mutexes.
    pub unsafe fn unmap(self) {
        // SAFETY: the mapping made in `create`, of layout.len() bytes.
        unsafe { dr_unmap_file(self.base as *mut c_void, self.layout.len() as usize) };
    }
}
