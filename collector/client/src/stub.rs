//! The code a block's buffer check jumps to when a buffer is full: one clean call for the
//! whole process instead of one in every block.
//!
//! A clean call is some fifteen instructions DynamoRIO builds, lays out and encodes with
//! every block that holds one; in every block's entry code that was two thirds of the
//! client's cost of building a block (python3 starts 65,000 blocks and traces: 2.3 s of its
//! start-up was one more clean call per block). The check now stores where to come back to
//! in a TLS slot and jumps here; the stub makes the call and jumps back through that slot.
//! The machine state the call sees is the one the inline call saw: the stub changes no
//! register.

use crate::state::*;
use core::ffi::c_void;
use dynamorio_sys::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// Bytes reserved for the stub (one page; it takes 112).
const STUB_BYTES: usize = 4096;

static ONCE: Once = Once::new();
static STUB: AtomicUsize = AtomicUsize::new(0);

/// The stub's address, built with `dc` by the first caller.
///
/// # Safety
/// `dc` is the live drcontext of a basic-block event; exercised by tests/collector.rs hello,
/// eight_threads_with_mutexes and every test whose program fills a buffer (python3_from_the_system).
pub unsafe fn flush_stub(dc: *mut c_void) -> *mut u8 {
    ONCE.call_once(|| STUB.store(build(dc) as usize, Ordering::Release));
    STUB.load(Ordering::Acquire) as *mut u8
}

/// Encodes the stub into memory DynamoRIO allocates within a 32-bit jump of its code caches.
///
/// # Safety
/// As [`flush_stub`].
unsafe fn build(dc: *mut c_void) -> *mut u8 {
    let list = instrlist_create(dc);
    let end = instr_create_0dst_0src(dc, OP_LABEL as core::ffi::c_int);
    instrlist_meta_append(list, end);
    dr_insert_clean_call_ex(dc, list, end, flush_cc as *mut c_void, dr_cleancall_save_t_DR_CLEANCALL_ALWAYS_OUT_OF_LINE, 0);
    instrlist_meta_append(list, instr_create_0dst_1src(dc, OP_jmp_ind as core::ffi::c_int, tls(S_RETURN, 0, OPSZ_8)));
    // dr_nonheap_alloc'd memory is reachable from the code caches (its documentation).
    let mem = dr_nonheap_alloc(STUB_BYTES, DR_MEMPROT_READ | DR_MEMPROT_WRITE | DR_MEMPROT_EXEC) as *mut u8;
    let stop = if mem.is_null() { core::ptr::null_mut() } else { instrlist_encode(dc, list, mem, 1) };
    instrlist_clear_and_destroy(dc, list);
    if stop.is_null() || stop.offset_from(mem) as usize > STUB_BYTES {
        say("internal error: cannot build the buffer hand-off stub");
        dr_abort();
    }
    dr_memory_protect(mem as *mut c_void, STUB_BYTES, DR_MEMPROT_READ | DR_MEMPROT_EXEC);
    mem
}
