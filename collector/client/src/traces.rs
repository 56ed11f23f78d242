//! The trace optimizer (paper section 5): in a DynamoRIO trace, a hot chain of blocks that
//! runs from its head to each later block without leaving, a later block needs neither its
//! own buffer check nor its own H-tag check when what came before in the trace settles them.
//! - Buffer checks: the head's check leaves room for a group of blocks whose needs together
//!   fit the slack past each limit, so the group's later blocks skip theirs (a block whose
//!   needs would overflow the group checks and starts a new one). Needs only decide when a
//!   chunk ends, never what it holds, and a hand-off request waits at most one group.
//! - H-tag checks: a block whose address has the H-tag of the block before it in the trace
//!   finds that H-tag current, since only block entries change it.
//!
//! The block event marks both sequences with labels ([`mark`]); the trace event deletes what
//! lies between a start label and its end label. DynamoRIO calls the trace event again when
//! it rebuilds a trace to translate a fault; the deletions are a function of the list alone,
//! so the rebuilt trace is the same code.

use crate::codegen::Emit;
use crate::state::*;
use core::ffi::c_void;
use dynamorio_sys::*;

/// What a label marks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub enum Mark {
    /// Before a block's buffer checks; data: tag, value and truth bytes the block may write,
    /// and the register that must hold the tag pointer after the checks.
    CheckStart = 0,
    /// After the buffer checks, where the tag pointer is in that register.
    CheckEnd = 1,
    /// Before a block's H-tag check; data: the block's H-tag.
    HtagStart = 2,
    /// After the H-tag code.
    HtagEnd = 3,
}

/// Every mark, in note order.
const MARKS: [Mark; 4] = [Mark::CheckStart, Mark::CheckEnd, Mark::HtagStart, Mark::HtagEnd];
/// The first of this client's label notes (drmgr_reserve_note_range), 0 until reserved.
static mut NOTE_BASE: usize = 0;

/// Reserves the label notes and registers the trace event; once, in dr_client_main.
///
/// # Safety
/// Called from dr_client_main before any block is built; exercised by tests/collector.rs hello.
pub unsafe fn init() {
    NOTE_BASE = drmgr_reserve_note_range(MARKS.len()) as usize;
    if NOTE_BASE == 0 {
        say("internal error: no label notes left");
        dr_abort();
    }
    if std::env::var_os("DEP_NO_TRACE_OPT").is_none() {
        dr_register_trace_event(Some(trace_event));
    }
}

/// A label carrying `mark` and `data`, not yet inserted.
///
/// # Safety
/// `dc` is the live drcontext of the block event building the list; exercised by
/// tests/collector.rs hello.
pub unsafe fn mark(dc: *mut c_void, mark: Mark, data: [usize; 4]) -> *mut instr_t {
    let l = instr_create_0dst_0src(dc, OP_LABEL as core::ffi::c_int);
    instr_set_note(l, (NOTE_BASE + mark as usize) as *mut c_void);
    (*instr_get_label_data_area(l)).data = data.map(|d| d as ptr_uint_t);
    l
}

/// The mark of a label of this client's, if `i` is one.
///
/// # Safety
/// `i` is a live instruction; exercised by tests/collector.rs hello.
unsafe fn mark_of(i: *mut instr_t) -> Option<Mark> {
    if instr_is_label(i) == 0 {
        return None;
    }
    MARKS.get((instr_get_note(i) as usize).wrapping_sub(NOTE_BASE)).copied()
}

/// The label's data.
///
/// # Safety
/// `i` is a live label; exercised by tests/collector.rs hello.
unsafe fn data(i: *mut instr_t) -> [usize; 4] {
    (*instr_get_label_data_area(i)).data.map(|d| d as usize)
}

/// Deletes the instructions strictly between `start` and the next label marked `end`, if
/// there is one; returns whether it did.
///
/// # Safety
/// `start` is an instruction of the live list `list`; exercised by tests/collector.rs hello.
unsafe fn delete_to(dc: *mut c_void, list: *mut instrlist_t, start: *mut instr_t, end: Mark) -> bool {
    let mut i = instr_get_next(start);
    while !i.is_null() && mark_of(i) != Some(end) {
        i = instr_get_next(i);
    }
    if i.is_null() {
        return false;
    }
    let stop = i;
    let mut i = instr_get_next(start);
    while i != stop {
        let next = instr_get_next(i);
        instrlist_remove(list, i);
        instr_destroy(dc, i);
        i = next;
    }
    true
}

/// Whether a group whose blocks need `sum` bytes can take a block needing `need` more.
fn fits(sum: [usize; 3], need: [usize; 3]) -> bool {
    let slack = [TAG_SLACK, VAL_SLACK, TRU_SLACK];
    (0..3).all(|k| sum[k].saturating_add(need[k]) <= slack[k])
}

/// # Safety
/// DynamoRIO calls it with a trace's instruction list (its blocks as the block event
/// instrumented them), valid for the duration of the call; exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and every recovery-equals-truth test.
unsafe extern "C" fn trace_event(dc: *mut c_void, _tag: *mut c_void, trace: *mut instrlist_t, _translating: bool_) -> dr_emit_flags_t {
    let mut group: Option<[usize; 3]> = None;
    let mut prev_hi: Option<usize> = None;
    let mut i = instrlist_first(trace);
    while !i.is_null() {
        match mark_of(i) {
            Some(Mark::CheckStart) => {
                let d = data(i);
                let need = [d[0], d[1], d[2]];
                match group {
                    Some(sum) if fits(sum, need) && delete_to(dc, trace, i, Mark::CheckEnd) => {
                        // What the deleted checks left in the register: the tag pointer.
                        Emit::new(dc, trace, instr_get_next(i)).mov_ld(d[3] as reg_id_t, tls(S_TAGPTR, 0, OPSZ_8));
                        group = Some([sum[0] + need[0], sum[1] + need[1], sum[2] + need[2]]);
                    }
                    _ => group = Some(need),
                }
            }
            Some(Mark::HtagStart) => {
                let hi = data(i)[0];
                if prev_hi == Some(hi) {
                    delete_to(dc, trace, i, Mark::HtagEnd);
                }
                prev_hi = Some(hi);
            }
            _ => {}
        }
        i = instr_get_next(i);
    }
    dr_emit_flags_t::DR_EMIT_DEFAULT
}
