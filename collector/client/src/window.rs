//! Windows of each thread's instructions (`dep record --skip-instrs N --instrs M`): outside
//! them a block only counts its instructions; inside, it is recorded as usual.
//!
//! Every block, of either kind, subtracts its instruction count from the thread's
//! [`S_LEFT`] slot at entry and, found at zero or below first, calls [`window_cc`]. The
//! call numbers the block (its first instruction) and:
//! - moves the thread between recording and not where the block's number crosses a
//!   window's bound: a recorded stretch ends its chunk, and one that starts after a gap
//!   starts a chunk whose "unrecorded" thread event says how many instructions the gap held;
//! - there, flushes the code cache (`dr_unlink_flush_region`: the caches are thread-private,
//!   so each thread's blocks are rebuilt the kind its own windows want) and resumes the
//!   application at the block's start, which now runs as the kind wanted. So a window holds
//!   exactly the blocks whose first instruction is numbered N to N+M-1, as
//!   `--from-instr N --to-instr N+M` cuts them from a whole run's profile.

use crate::codegen::{imm32, Emit};
use crate::state::*;
use dep_profile::container::{ThreadEvent, ThreadEventKind};
use dynamorio_sys::*;

/// The calling thread's instruction count at the check: the first instruction of the block
/// that made it.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn at(pt: &PerThread) -> u64 {
    pt.win_base.wrapping_sub(*slot(pt, S_LEFT) as i64) as u64
}

/// The next check after instruction `at`, `distance` instructions on.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn check_in(pt: &mut PerThread, at: u64, distance: u64) {
    let left = distance.min(i64::MAX as u64) as i64;
    pt.win_base = (at as i64).wrapping_add(left);
    *slot(pt, S_LEFT) = left as u64;
}

/// Clean-call target at the entry of a block whose check came due; `recorded` is the
/// block's kind and `pc` its address.
///
/// # Safety
/// Only called from a clean call inserted by this client (with the application context
/// readable), on an application thread whose PerThread is set up; exercised by
/// tests/windows.rs.
pub unsafe extern "C" fn window_cc(recorded: u32, pc: u64) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    let Some(plan) = opts().windows else { return };
    if pt.is_null() {
        return;
    }
    let pt = &mut *pt;
    let at = at(pt);
    let window = plan.around(at);
    let want = window.is_some_and(|(s, _)| s <= at);
    if want != pt.recording {
        if want {
            start(pt, at);
        } else {
            stop(pt, at);
        }
    }
    let distance = match window {
        Some((s, e)) => (if s <= at { e } else { s }) - at,
        None => u64::MAX,
    };
    check_in(pt, at, distance);
    if want == (recorded != 0) {
        return;
    }
    // The block is the other kind: rebuild the thread's blocks (the caches are
    // thread-private) and run this one again from its start, as the kind wanted. Nothing
    // of it has run: the check is its first code.
    pt.build_recorded = want;
    dr_unlink_flush_region(core::ptr::null_mut(), usize::MAX);
    let mut mc: dr_mcontext_t = core::mem::zeroed();
    mc.size = core::mem::size_of::<dr_mcontext_t>();
    mc.flags = dr_mcontext_flags_t::DR_MC_ALL;
    if dr_get_mcontext(dc, &mut mc) == 0 {
        say("internal error: no machine context at a window's bound");
        dr_abort();
    }
    mc.__bindgen_anon_10.pc = pc as *mut u8;
    dr_redirect_execution(&mut mc);
    say("internal error: cannot resume at a window's bound");
    dr_abort();
}

/// The thread starts recording at instruction `at`: in a chunk of its own, after the gap.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn start(pt: &mut PerThread, at: u64) {
    pt.recording = true;
    gap_ends(pt, at);
}

/// The unrecorded stretch from `gap_from` ends at instruction `at`: its instructions go
/// before a chunk of their own (the current one, if nothing is in it yet), in an
/// "unrecorded" thread event.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn gap_ends(pt: &mut PerThread, at: u64) {
    let gap = at - pt.gap_from.min(at);
    if gap == 0 {
        return;
    }
    if *slot(pt, S_TAGPTR) as *mut u8 != pt.chunk_open {
        flush(pt, false);
    }
    let e = ThreadEvent {
        event: ThreadEventKind::Unrecorded,
        index: pt.index,
        tid: pt.tid,
        time_ns: crate::now_ns(),
        chunk: Some(pt.seq),
        instructions: Some(gap),
        ..Default::default()
    };
    send(dep_collector::wire::THREAD, pt.index, &[&serde_json::to_vec(&e).unwrap_or_default()]);
}

/// The thread stops recording at instruction `at`: the recorded stretch ends its chunk.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn stop(pt: &mut PerThread, at: u64) {
    pt.recording = false;
    pt.gap_from = at;
    expire_all(pt);
    flush(pt, false);
}

/// At the thread's end: an unrecorded stretch it ended in goes before its last chunk.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread, in its exit event; exercised by
/// tests/windows.rs.
pub unsafe fn thread_ends(pt: &mut PerThread) {
    if opts().windows.is_some() && !pt.recording {
        gap_ends(pt, at(pt));
    }
}

/// The window check at a block's entry (aflags reserved by the caller): the clean call when
/// the count is due, then this block's instructions off it.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by
/// tests/windows.rs.
pub unsafe fn entry_check(e: &Emit, insns: u32, recorded: bool, pc: u64) {
    let go = e.label();
    e.cmp(tls(S_LEFT, 0, OPSZ_8), imm32(0));
    e.jcc(OP_jnle, go);
    // The call reads the application's context (to resume at `pc`) on one path of two.
    let flags = dr_cleancall_save_t_DR_CLEANCALL_READS_APP_CONTEXT | dr_cleancall_save_t_DR_CLEANCALL_MULTIPATH;
    let pc = crate::codegen::imm(pc as i64, OPSZ_8);
    dr_insert_clean_call_ex(e.dc, e.bb, e.at, window_cc as *mut core::ffi::c_void, flags, 2, imm32(recorded as u32), pc);
    e.ins(go);
    e.sub(tls(S_LEFT, 0, OPSZ_8), imm32(insns));
}
