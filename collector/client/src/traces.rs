//! The trace optimizer (paper section 5): in a DynamoRIO trace, a hot chain of blocks that
//! runs from its head to each later block without leaving, a later block needs neither its
//! own buffer check nor its own H-tag check when what came before in the trace settles them.
//! - Buffer checks: the head's check leaves room for a group of blocks whose needs together
//!   fit the slack past each limit, so the group's later blocks skip theirs (a block whose
//!   needs would overflow the group checks and starts a new one). Needs only decide when a
//!   chunk ends, never what it holds, and a hand-off request waits at most one group.
//! - H-tag checks: a block whose address has the H-tag of the block before it in the trace
//!   finds that H-tag current, since only block entries change it.
//! - Shadows: a block's exit stores a register's shadow (UPDATED or RECORDED) and a later
//!   block of the trace tests it; between the two the shadow is known, so the test becomes
//!   a constant advance (or nothing) and a store of the value already there goes. What is
//!   known is forgotten where control can join (a label some instruction targets: the
//!   buffer hand-off returns to one) and after a call (a clean call may expire every
//!   register), so each shadow holds what it would have held; recovery sees no change.
//! - Loops: where a trace comes back to its head, it goes round again while it holds at
//!   most four blocks ([`end_trace`]), so a short hot loop makes its checks once in a few
//!   rounds (matrix's one-block inner loops: `--discard` 17% faster).
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
    /// Before the store of a register's shadow; data: the register and the value.
    ShadowSet = 4,
    /// Before the test of a register's shadow (`movzx s, shadow; lea v, [v + s]`); data: the
    /// register.
    ShadowTest = 5,
    /// Before a counting block's first instruction (windows); data: its instruction count.
    CountStart = 6,
    /// Before the jump form of a shadow's test (`cmp shadow[r], 0; jz skip`, the store and
    /// the pointer's advance, then the [`ShadowSkip`](Mark::ShadowSkip) label); data: the register.
    ShadowBranch = 7,
    /// The label that jump targets: no join, since the path it skips changes no shadow but
    /// its own register's, which it sets RECORDED where data[1] is 1 (the register's shadow
    /// is then RECORDED here either way).
    ShadowSkip = 8,
}

/// Every mark, in note order.
const MARKS: [Mark; 9] = [
    Mark::CheckStart,
    Mark::CheckEnd,
    Mark::HtagStart,
    Mark::HtagEnd,
    Mark::ShadowSet,
    Mark::ShadowTest,
    Mark::CountStart,
    Mark::ShadowBranch,
    Mark::ShadowSkip,
];
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
    // With windows, off: a trace's later blocks skip buffer checks on the room their head
    // left, and a window check between them may hand the buffers off.
    if std::env::var_os("DEP_NO_TRACE_OPT").is_none() && !opts().partial() {
        dr_register_trace_event(Some(trace_event));
        dr_register_end_trace_event(Some(end_trace));
    }
}

/// The most blocks a trace holds by going round its loop again: a loop of one block is
/// four copies of it, one of two blocks two rounds; longer loops are not repeated.
const UNROLL_BLOCKS: u32 = 4;

/// Before DynamoRIO adds `next` to the trace headed by `head`: where `next` is the head
/// again (the loop closes), the trace goes on round the loop while it stays within
/// [`UNROLL_BLOCKS`]. DynamoRIO would end it there, and each round would then run the
/// head's buffer and H-tag checks and test its shadows again; in the later copies of the
/// loop body the trace event's optimizer finds them settled (a hot loop of one block,
/// matrix's inner products, does its checks once in four rounds). Copies of a block record
/// its tag each time it runs, as the block does; only where the checks are made changes.
///
/// # Safety
/// DynamoRIO calls it on the thread building the trace, whose drcontext is `dc`; exercised
/// by tests/collector.rs faults_in_a_repeated_loop, signal_handler_interrupting_a_hot_loop
/// and every recovery-equals-truth test.
unsafe extern "C" fn end_trace(dc: *mut c_void, head: *mut c_void, next: *mut c_void) -> dr_custom_trace_action_t {
    let Some(pt) = crate::state::get(dc).as_mut() else {
        return dr_custom_trace_action_t_CUSTOM_TRACE_DR_DECIDES;
    };
    let (at, len, body) = &mut pt.trace_building;
    if *at != head as u64 {
        // A new trace (its head is its first block; the event comes for the blocks after).
        (*at, *len, *body) = (head as u64, 1, 0);
    }
    if next == head {
        if *body == 0 {
            *body = *len;
        }
        if *len + *body > UNROLL_BLOCKS {
            return dr_custom_trace_action_t_CUSTOM_TRACE_DR_DECIDES;
        }
        *len += 1;
        return dr_custom_trace_action_t_CUSTOM_TRACE_CONTINUE;
    }
    *len += 1;
    dr_custom_trace_action_t_CUSTOM_TRACE_DR_DECIDES
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
pub unsafe fn mark_of(i: *mut instr_t) -> Option<Mark> {
    if instr_is_label(i) == 0 {
        return None;
    }
    MARKS.get((instr_get_note(i) as usize).wrapping_sub(NOTE_BASE)).copied()
}

/// The label's data.
///
/// # Safety
/// `i` is a live label; exercised by tests/collector.rs hello.
pub unsafe fn data(i: *mut instr_t) -> [usize; 4] {
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
        delete(dc, list, i);
        i = next;
    }
    true
}

/// Whether `i` is a call, system call or interrupt: after one, a clean call may have
/// expired every register.
///
/// # Safety
/// `i` is a live instruction; exercised by tests/collector.rs eight_threads_with_mutexes.
unsafe fn calls(i: *mut instr_t) -> bool {
    instr_is_call(i) != 0 || instr_is_syscall(i) != 0 || instr_is_interrupt(i) != 0
}

/// Whether `to` comes after `from` in their list with no instruction between them for
/// which `stop` holds.
///
/// # Safety
/// `from` and `to` are live instructions; exercised by tests/collector.rs
/// shadow_forms_recover_exactly.
unsafe fn clear_between(from: *mut instr_t, to: *mut instr_t, stop: impl Fn(*mut instr_t) -> bool) -> bool {
    let mut i = instr_get_next(from);
    while !i.is_null() && i != to {
        if stop(i) {
            return false;
        }
        i = instr_get_next(i);
    }
    !i.is_null()
}

/// Whether a call, system call or interrupt comes between `from` and `to` (or `to` is not
/// after `from`).
///
/// # Safety
/// `from` and `to` are live instructions of one list; exercised by tests/collector.rs
/// shadow_forms_recover_exactly.
pub unsafe fn call_between(from: *mut instr_t, to: *mut instr_t) -> bool {
    !clear_between(from, to, |i| calls(i))
}

/// Takes `i` out of `list` and frees it.
///
/// # Safety
/// `i` is an instruction of the live list `list`, not used again; exercised by
/// tests/collector.rs hello and shadows_known_along_a_long_trace.
unsafe fn delete(dc: *mut c_void, list: *mut instrlist_t, i: *mut instr_t) {
    instrlist_remove(list, i);
    instr_destroy(dc, i);
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
unsafe extern "C" fn trace_event(dc: *mut c_void, _tag: *mut c_void, trace: *mut instrlist_t, translating: bool_) -> dr_emit_flags_t {
    // The trace is built: the next one this thread builds starts counting afresh, even
    // from the same head. (Rebuilding one to translate a fault is not building it.)
    if let Some(pt) = crate::state::get(dc).as_mut().filter(|_| translating == 0) {
        pt.trace_building = (0, 0, 0);
    }
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
    known_shadows(dc, trace);
    dr_emit_flags_t::DR_EMIT_DEFAULT
}

/// Removes the shadow tests and stores whose outcome the trace fixes (the module comment).
///
/// # Safety
/// `list` is the live instruction list of the trace event; exercised by tests/collector.rs
/// shadows_known_along_a_long_trace, signal_handler_interrupting_a_hot_loop,
/// eight_threads_with_mutexes and every recovery-equals-truth test.
unsafe fn known_shadows(dc: *mut c_void, list: *mut instrlist_t) {
    // Where control can join: every instruction an instruction operand names.
    let mut joins = std::collections::HashSet::new();
    let mut i = instrlist_first(list);
    while !i.is_null() {
        for k in 0..instr_num_srcs(i).max(0) as u32 {
            let o = instr_get_src(i, k);
            if opnd_is_instr(o) != 0 && mark_of(opnd_get_instr(o)) != Some(Mark::ShadowSkip) {
                joins.insert(opnd_get_instr(o) as usize);
            }
        }
        i = instr_get_next(i);
    }
    let mut known: [Option<u8>; 24] = [None; 24];
    let mut i = instrlist_first(list);
    while !i.is_null() {
        if joins.contains(&(i as usize)) {
            known = [None; 24];
        }
        match mark_of(i) {
            Some(Mark::ShadowSet) => {
                let [r, v, ..] = data(i);
                let store = instr_get_next(i);
                // The store itself, not a spill another tool placed between (drreg's).
                let shaped = r < 24
                    && !store.is_null()
                    && instr_get_opcode(store) == OP_mov_st as i32
                    && opnd_same(instr_get_dst(store, 0), tls(S_SHADOW, r as u32, OPSZ_1)) != 0;
                if shaped {
                    if known[r] == Some(v as u8) {
                        delete(dc, list, store);
                    } else {
                        known[r] = Some(v as u8);
                    }
                } else {
                    known = [None; 24];
                }
            }
            Some(Mark::ShadowTest) => {
                let r = data(i)[0];
                let test = instr_get_next(i);
                let lea = if test.is_null() { test } else { instr_get_next(test) };
                // `movzx s, shadow[r]; lea v, [v + s]`, as step_values writes it.
                let shaped = r < 24
                    && !lea.is_null()
                    && instr_get_opcode(test) == OP_movzx as i32
                    && instr_get_opcode(lea) == OP_lea as i32
                    && opnd_same(instr_get_src(test, 0), tls(S_SHADOW, r as u32, OPSZ_1)) != 0
                    && opnd_is_reg(instr_get_dst(lea, 0)) != 0
                    && opnd_get_index(instr_get_src(lea, 0)) == opnd_get_reg(instr_get_dst(test, 0))
                    && opnd_get_base(instr_get_src(lea, 0)) == opnd_get_reg(instr_get_dst(lea, 0));
                if let (true, Some(k)) = (shaped, known.get(r).copied().flatten()) {
                    // The pointer advances by the known shadow, with no load.
                    let v = opnd_get_reg(instr_get_dst(lea, 0));
                    let after = instr_get_next(lea);
                    delete(dc, list, test);
                    delete(dc, list, lea);
                    if k != 0 {
                        Emit::new(dc, list, after).add_lea(v, k as i32);
                    }
                }
            }
            Some(Mark::ShadowBranch) => {
                let r = data(i)[0];
                let test = instr_get_next(i);
                let jump = if test.is_null() { test } else { instr_get_next(test) };
                // `cmp shadow[r], 0; jz skip`, as step_values writes it, skip being this
                // test's own label.
                let skip = if jump.is_null() || instr_get_opcode(jump) != OP_jz as i32 {
                    core::ptr::null_mut()
                } else {
                    let t = instr_get_target(jump);
                    if opnd_is_instr(t) != 0 {
                        opnd_get_instr(t)
                    } else {
                        core::ptr::null_mut()
                    }
                };
                let shaped = r < 24
                    && !skip.is_null()
                    && instr_get_opcode(test) == OP_cmp as i32
                    && opnd_same(instr_get_src(test, 0), tls(S_SHADOW, r as u32, OPSZ_1)) != 0
                    && mark_of(skip) == Some(Mark::ShadowSkip)
                    && data(skip)[0] == r
                    && clear_between(jump, skip, |i| calls(i) || instr_is_label(i) != 0);
                if let (true, Some(k)) = (shaped, known.get(r).copied().flatten()) {
                    // Known 0: nothing to store (`skip` is the next ShadowSkip: no label
                    // between); known UPDATED: the store, with no test.
                    if k == 0 {
                        delete_to(dc, list, i, Mark::ShadowSkip);
                    } else {
                        delete(dc, list, test);
                        delete(dc, list, jump);
                    }
                }
            }
            // A path that records its register and sets its shadow RECORDED: both ways that
            // shadow is RECORDED here.
            Some(Mark::ShadowSkip) if data(i)[1] != 0 => {
                if let Some(k) = known.get_mut(data(i)[0]) {
                    *k = Some(0);
                }
            }
            _ => {}
        }
        if calls(i) {
            known = [None; 24];
        }
        i = instr_get_next(i);
    }
}
