//! Inline instrumentation of each block, driven by the shared block plans of `profile/`:
//! block-entry tag code (paper 4.1), lazy value recording before each step (4.2), the
//! block's shadow updates at its end, and, with `--truth`, observed addresses.

use crate::codegen::*;
use crate::state::*;
use crate::table;
use crate::traces::{self, Mark};
use core::ffi::c_void;
use core::sync::atomic::AtomicBool;
use dep_profile::blocks::{Decisions, StepDecision};
use dep_profile::semantics::{Gather, GatherMask, Special};
use dep_profile::tags::{CTL_CODE_VERSION, CTL_SET_HI, MAX_SHORT_H};
use dep_profile::{BlockPlan, Machine, Reg, RegSet, Semantics};
use dynamorio_sys::*;

/// What the analysis stage hands the insertion stage: a block that is recorded, or one
/// outside the thread's windows that only counts its instructions.
#[allow(clippy::large_enum_variant)] // boxed, one per block being built
pub enum Built {
    Recorded(BlockInfo),
    Counting { insns: u32, pc: u64, entered: bool, trigger: Option<u32> },
}

/// What the analysis phase learned about a block, for its insertion phase.
pub struct BlockInfo {
    plan: BlockPlan,
    decisions: Decisions,
    version: u32,
    /// Step index of each instruction, if it has one.
    step_of: Vec<Option<usize>>,
    /// Whether the pre-instruction code of each instruction was emitted.
    done: Vec<bool>,
    need_v: usize,
    /// Truth bytes the block may write (records, escapes aside).
    need_t: usize,
    /// Tag bytes the block may write: entry, sync and call records, and a signal's escapes.
    need_tag: usize,
    /// A rep string's pointer register to store after it, at the next app instruction.
    pending_post: Option<Reg>,
    /// An atomic instruction's index, whose sync record after it goes at the next app
    /// instruction (its acquire side: a stamp after it is after every write it saw).
    pending_sync_after: Option<u32>,
    /// Truth: the rep string's end to observe at the next app instruction.
    pending_rep_end: bool,
    /// The block is one rep string expanded into a loop.
    expanded: bool,
    /// The entry code was emitted (before the first application instruction).
    entered: bool,
    /// The registers the block's application instructions touch, when the value pointer
    /// may stay from the first step to the block's end in one they leave alone (see
    /// [`keeps_pointer`]).
    touched: Option<RegSet>,
    /// That register, once the first step has reserved it.
    kept: reg_id_t,
    /// A `--start-at`/`--stop-at` check the block makes first ([`crate::window::trigger_at`]).
    trigger: Option<u32>,
    /// Whether a jump-form test may set its register's shadow to RECORDED in its own path
    /// (not in a rep string expanded into a loop, nor on a writable page).
    may_zero: bool,
    /// Registers whose shadow a jump-form test's path set to RECORDED, with that test's
    /// skip label: their end-of-block store goes where no call comes between.
    zeroed: Vec<(Reg, *mut instr_t)>,
    /// A block outside any trace: its entry code is the shared stub's, given this
    /// ([`crate::stub::entry_arg`]).
    cold: Option<u64>,
}

/// Whether the value pointer can stay in a register across the block's steps, loaded
/// once instead of at every step (it is still stored back at every step, so a fault
/// inside the block loses nothing). Not where drreg restores every register before each
/// application instruction (writable code), nor around clean calls (watched functions,
/// atomics, system calls, the truth's rep-string and gather observers), which read the
/// application's registers; only with two steps or more and a register the block leaves
/// alone. `straight`: the block is neither a rep string expanded into a loop nor on a
/// writable page; `syncs`: it has clean calls of its own (sync records, a system call's).
///
/// # Safety
/// `bb` is the block of the current analysis event; exercised by tests/collector.rs hello,
/// signals and eight_threads_with_mutexes.
unsafe fn keeps_pointer(bb: *mut instrlist_t, plan: &BlockPlan, straight: bool, syncs: bool) -> Option<RegSet> {
    if !straight || plan.steps.len() < 2 {
        return None;
    }
    // The truth observes rep strings and gathers with clean calls; its other observations
    // are inline, so a truth run checks this path on every other block.
    if opts().truth && plan.insns.iter().any(|i| i.special != Special::None) {
        return None;
    }
    let watched = plan.insns.iter().any(|i| crate::watch::entry_at(i.pc).is_some() || crate::watch::function_holding(i.pc).is_some());
    if syncs || watched {
        return None;
    }
    let mut touched = RegSet::EMPTY;
    let mut i = instrlist_first_app(bb);
    while !i.is_null() {
        for r in (0..16u8).map(Reg) {
            if instr_uses_reg(i, dr_gpr(r)) != 0 {
                touched.insert(r);
            }
        }
        i = instr_get_next_app(i);
    }
    (0..16u8).map(Reg).any(|r| r != Reg::RSP && !touched.contains(r)).then_some(touched)
}

/// Whether the instruction at `pc` carries a rep prefix (an expansion dropped it).
///
/// # Safety
/// `pc` is the address of a decoded application instruction, readable; exercised by
/// tests/collector.rs rep_strings_with_large_counts.
unsafe fn is_rep_at(pc: u64) -> bool {
    let mut b = [0u8; 15];
    let mut got: usize = 0;
    dr_safe_read(pc as *const c_void, b.len(), b.as_mut_ptr() as *mut c_void, &mut got);
    let i = iced_x86::Decoder::with_ip(64, &b[..got], pc, iced_x86::DecoderOptions::NONE).decode();
    i.is_string_instruction() && (i.has_rep_prefix() || i.has_repne_prefix())
}

pub static mut MACHINE: Machine = Machine { width: dep_profile::Width::W64, xsave_size: 0, derive: true, roots: true };

pub(crate) fn check(st: drreg_status_t, what: &str) {
    if st != drreg_status_t_DRREG_SUCCESS {
        say(&format!("internal error: drreg failed ({st}) in {what}"));
        // SAFETY: dr_abort takes no arguments and ends the process; it is always allowed in a
        // client.
        unsafe { dr_abort() };
    }
}

/// # Safety
/// Called from DynamoRIO's basic-block event with its live `dc`, `bb` and `at` (an instruction of
/// `bb` or null); exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
unsafe fn reserve(dc: *mut c_void, bb: *mut instrlist_t, at: *mut instr_t) -> reg_id_t {
    let mut r: reg_id_t = 0;
    check(drreg_reserve_register(dc, bb, at, core::ptr::null_mut(), &mut r), "reserve");
    r
}

/// Reserves a scratch register that is none of `avoid` (nor rsp): drreg in this
/// DynamoRIO restores a spilled register's application value only in place.
///
/// # Safety
/// Called from DynamoRIO's basic-block event with its live `dc`, `bb` and `at` (an instruction of
/// `bb` or null); exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
unsafe fn reserve_avoiding(dc: *mut c_void, bb: *mut instrlist_t, at: *mut instr_t, avoid: RegSet) -> reg_id_t {
    let mut allowed: [*mut c_void; 16] = [1usize as *mut c_void; 16];
    allowed[Reg::RSP.index()] = core::ptr::null_mut();
    for r in avoid.iter() {
        if r.index() < 16 {
            allowed[r.index()] = core::ptr::null_mut();
        }
    }
    let mut v =
        drvector_t { entries: 16, capacity: 16, array: allowed.as_mut_ptr(), synch: 0, lock: core::ptr::null_mut(), free_data_func: None };
    let mut r: reg_id_t = 0;
    check(drreg_reserve_register(dc, bb, at, &mut v, &mut r), "reserve");
    r
}

/// # Safety
/// Called from DynamoRIO's basic-block event with its live `dc`, `bb` and `at` (an instruction of
/// `bb` or null); exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode. `r` was reserved at the same point.
unsafe fn unreserve(dc: *mut c_void, bb: *mut instrlist_t, at: *mut instr_t, r: reg_id_t) {
    check(drreg_unreserve_register(dc, bb, at, r), "unreserve");
}

fn dr_gpr(r: Reg) -> reg_id_t {
    (DR_REG_RAX + r.0 as u32) as reg_id_t
}

fn dr_vec(r: iced_x86::Register) -> reg_id_t {
    use iced_x86::Register as R;
    let n = |base: R| r as u32 - base as u32;
    (if r.is_xmm() {
        DR_REG_XMM0 + n(R::XMM0)
    } else if r.is_ymm() {
        DR_REG_YMM0 + n(R::YMM0)
    } else if r.is_zmm() {
        DR_REG_ZMM0 + n(R::ZMM0)
    } else {
        DR_REG_K0 + n(R::K0)
    }) as reg_id_t
}

/// Memory regions' writability as dr_query_memory gave it: (start, end, writable), sorted
/// and disjoint. Asking DynamoRIO reads the kernel's map each time, which for every block
/// made python3 record five times slower; so each region is asked once, and all are
/// forgotten when the program maps, unmaps or protects memory ([`forget_regions`]).
static REGIONS_LOCK: AtomicBool = AtomicBool::new(false);
static mut REGIONS: Vec<(u64, u64, bool)> = Vec::new();

/// Forgets what [`on_writable_page`] learned: the program changes its mappings.
pub fn forget_regions() {
    let _g = Spin::lock(&REGIONS_LOCK);
    // SAFETY: REGIONS is only touched under REGIONS_LOCK.
    unsafe { (*core::ptr::addr_of_mut!(REGIONS)).clear() };
}

/// Whether a block starting at `pc` lies on a page the program can write: DynamoRIO
/// sandboxes such code (the launcher passes `-sandbox_writable`), see [`writable_code`].
///
/// # Safety
/// `pc` is an application address from a basic-block event; exercised by tests/collector.rs
/// code_rewritten_on_a_writable_executable_page.
unsafe fn on_writable_page(pc: app_pc) -> bool {
    let a = pc as u64;
    let _g = Spin::lock(&REGIONS_LOCK);
    // SAFETY: REGIONS is only touched under REGIONS_LOCK.
    let regions = unsafe { &mut *core::ptr::addr_of_mut!(REGIONS) };
    let i = regions.partition_point(|r| r.1 <= a);
    if let Some(&(_, _, writable)) = regions.get(i).filter(|r| r.0 <= a) {
        return writable;
    }
    let (mut base, mut size, mut prot): (app_pc, usize, uint) = (core::ptr::null_mut(), 0, 0);
    if dr_query_memory(pc, &mut base, &mut size, &mut prot) == 0 {
        return false;
    }
    let writable = prot & (DR_MEMPROT_WRITE | DR_MEMPROT_PRETEND_WRITE) != 0;
    let (start, end) = (base as u64, (base as u64).saturating_add(size as u64));
    if start <= a && a < end {
        regions.insert(regions.partition_point(|r| r.0 < start), (start, end, writable));
    }
    writable
}

/// Blocks of writable code. DynamoRIO checks after each of their writes whether the write
/// changed the block's own code and, if it did, leaves the block at once for the next
/// application instruction: past drreg's restores (a scratch register would keep a tool
/// value) and past the block's own end (its shadow updates, and the block would look
/// complete in DEP_c). So such a block ends at its first instruction that writes memory,
/// and drreg restores every scratch register before each application instruction; that
/// exit then coincides with the block's normal end, after all of dep's code has run.
///
/// # Safety
/// Called from DynamoRIO's basic-block event with its live `dc`, `bb` and `at` (an instruction of
/// `bb` or null); exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
unsafe fn writable_code(dc: *mut c_void, bb: *mut instrlist_t) {
    let first = instrlist_first_app(bb);
    if first.is_null() || !on_writable_page(instr_get_app_pc(first)) {
        return;
    }
    check(drreg_set_bb_properties(dc, drreg_bb_properties_t_DRREG_CONTAINS_SPANNING_CONTROL_FLOW), "bb properties");
    let mut i = first;
    while !i.is_null() && instr_writes_memory(i) == 0 {
        i = instr_get_next_app(i);
    }
    if i.is_null() {
        return;
    }
    let mut rest = instr_get_next(i);
    while !rest.is_null() {
        let next = instr_get_next(rest);
        instrlist_remove(bb, rest);
        instr_destroy(dc, rest);
        rest = next;
    }
}

/// Valgrind client requests run as the program runs them natively. DynamoRIO recognises
/// Valgrind's request sequence (four `rol rdi` that cancel out, then `xchg rbx, rbx`; V8,
/// glib and others use it to tell Valgrind about their code and memory), drops those
/// instructions from the block and calls its own handler, which answers as Valgrind would
/// (`RUNNING_ON_VALGRIND` is 1 under DynamoRIO). So the block is not contiguous code, which
/// a profile's block table cannot describe (`node` stopped with "split the block
/// differently"), and the program may choose Valgrind's paths. The handler's label and its
/// placeholder go (rdx keeps the request's default, the program's own answer when Valgrind
/// is absent), and the block ends before its first gap; the next block starts after the
/// dropped instructions, as DynamoRIO runs them. DynamoRIO's own annotations skipped
/// without a handler leave a gap too, and are cut the same way.
///
/// # Safety
/// DynamoRIO's app2app event's live `dc` and `bb`; exercised by tests/collector.rs
/// valgrind_requests_and_stack_pops.
unsafe fn annotations(dc: *mut c_void, bb: *mut instrlist_t) {
    let note = DR_NOTE_ANNOTATION as usize;
    let mut found = false;
    let mut i = instrlist_first(bb);
    while !i.is_null() {
        let next = instr_get_next(i);
        if instr_get_note(i) as usize == note && (instr_is_label(i) != 0 || instr_get_opcode(i) == OP_mov_st as core::ffi::c_int) {
            // Keep a placeholder that is the block's only application instruction: a block
            // needs one (it stands for the `xchg`, which runs as a no-op).
            let alone = instr_is_app(i) != 0 && instrlist_first_app(bb) == i && instr_get_next_app(i).is_null();
            if !alone {
                instrlist_remove(bb, i);
                instr_destroy(dc, i);
            }
            found = true;
        }
        i = next;
    }
    if !found {
        return;
    }
    let mut i = instrlist_first_app(bb);
    while !i.is_null() {
        let next = instr_get_next_app(i);
        if next.is_null() {
            break;
        }
        let end = instr_get_app_pc(i) as u64 + instr_length(dc, i) as u64;
        if end != instr_get_app_pc(next) as u64 {
            let mut rest = next;
            while !rest.is_null() {
                let after = instr_get_next(rest);
                instrlist_remove(bb, rest);
                instr_destroy(dc, rest);
                rest = after;
            }
            break;
        }
        i = next;
    }
}

/// App2app: Valgrind requests run natively ([`annotations`]); writable code ends at its
/// first write ([`writable_code`]); a rep string never
/// ends a block (its pointer is recorded after it), and one alone in its block runs as a
/// loop (drutil), which leaves room after it in the block.
///
/// # Safety
/// DynamoRIO calls it as the app2app stage of the drmgr basic-block event, with valid pointers for
/// the duration of the call; exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
pub unsafe extern "C" fn app2app(dc: *mut c_void, _tag: *mut c_void, bb: *mut instrlist_t, _ft: bool_, _tr: bool_) -> dr_emit_flags_t {
    annotations(dc, bb);
    writable_code(dc, bb);
    // The same in truth mode: the truth observes rep strings and gathers as they run
    // (observe.rs) instead of expanding them, so a truth run's blocks are a plain run's.
    let first = instrlist_first_app(bb);
    let last = instrlist_last_app(bb);
    if !last.is_null() && instr_is_rep_string_op(last) != 0 {
        if first == last {
            drutil_expand_rep_string(dc, bb);
        } else {
            instrlist_remove(bb, last);
            instr_destroy(dc, last);
        }
    }
    dr_emit_flags_t::DR_EMIT_DEFAULT
}

/// Reads the block's code and builds its plan.
///
/// # Safety
/// DynamoRIO calls it as the analysis stage of the drmgr basic-block event, with valid pointers for
/// the duration of the call; exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
pub unsafe extern "C" fn analysis(
    dc: *mut c_void,
    _tag: *mut c_void,
    bb: *mut instrlist_t,
    for_trace: bool_,
    _translating: bool_,
    ud: *mut *mut c_void,
) -> dr_emit_flags_t {
    // Distinct application pcs in order. A rep string expanded into a loop (truth mode)
    // is a block of its own: the string instruction alone.
    let mut pcs: Vec<u64> = Vec::new();
    let mut expanded = None;
    let mut i = instrlist_first_app(bb);
    while !i.is_null() {
        let pc = instr_get_app_pc(i) as u64;
        if instr_is_string_op(i) != 0 && instr_is_rep_string_op(i) == 0 && is_rep_at(pc) {
            expanded = Some(pc);
        }
        if pcs.last() != Some(&pc) {
            pcs.push(pc);
        }
        i = instr_get_next_app(i);
    }
    if let Some(pc) = expanded {
        pcs = vec![pc];
    } else if pcs.windows(2).any(|w| w[0] >= w[1]) {
        say(&format!("internal error: block at {:#x} is not contiguous", pcs[0]));
        dr_abort();
    }
    if pcs.is_empty() {
        *ud = core::ptr::null_mut();
        return dr_emit_flags_t::DR_EMIT_DEFAULT;
    }
    // Outside the thread's windows a block only counts its instructions.
    let pt = get(dc);
    let trigger = if pt.is_null() { None } else { crate::window::trigger_at(&*pt, pcs[0]) };
    if opts().partial() && !pt.is_null() && !(*pt).build_recorded {
        *ud = Box::into_raw(Box::new(Built::Counting { insns: pcs.len() as u32, pc: pcs[0], entered: false, trigger })) as *mut c_void;
        return dr_emit_flags_t::DR_EMIT_DEFAULT;
    }
    let start = pcs[0];
    let span = (pcs[pcs.len() - 1] - start) as usize;
    let mut code = vec![0u8; span + 15];
    let mut got: usize = 0;
    let mut want = code.len();
    while want > span {
        if dr_safe_read(start as *const c_void, want, code.as_mut_ptr() as *mut c_void, &mut got) != 0 || got > span {
            break;
        }
        want -= 1;
    }
    code.truncate(got.max(want.min(got)));
    let mut sem = Semantics::new(MACHINE);
    let plan = match BlockPlan::build(&mut sem, start, &code, Some(pcs.len())) {
        Ok(p) => p,
        Err(e) => {
            say(&format!("internal error: {e}"));
            dr_abort();
            unreachable!()
        }
    };
    if plan.insns.iter().map(|i| i.pc).ne(pcs.iter().copied()) {
        say(&format!("internal error: DynamoRIO and iced-x86 split the block at {start:#x} differently"));
        dr_abort();
    }
    code.truncate(plan.len());
    let version = table::version_of(start, &code, pcs.len() as u32);
    let decisions = plan.decisions();
    let mut step_of = vec![None; plan.insns.len()];
    let mut need_v = 0usize;
    let mut need_t = 24usize;
    for (s, step) in plan.steps.iter().enumerate() {
        step_of[step.insn as usize] = Some(s);
        let d = decisions.steps[s];
        let insn = &plan.insns[step.insn as usize];
        need_v += 8 * d.always.union(d.check).len();
        match insn.special {
            Special::Gather(g) => {
                need_v += 64 + 64;
                need_t += 24 * g.count() * insn.refs.len();
            }
            Special::Rep(_) => {
                need_v += 8;
                need_t += 24 * (2 + insn.refs.len());
            }
            // Up to two more per instruction: the truth observes what DynamoRIO lists.
            Special::None => need_t += 24 * (insn.refs.len() + 2),
        }
    }
    // Instructions with sync records, as insertion() stamps them.
    let syncs = if opts().no_sync {
        0
    } else {
        plan.insns.iter().take(MAX_SYNC_INSNS).filter(|i| i.atomic || i.flow == dep_profile::semantics::Flow::Syscall).count()
    };
    // A system call's kernel accesses (and, in the truth, its return) come after it.
    let syscall = plan.insns.iter().any(|i| i.flow == dep_profile::semantics::Flow::Syscall);
    if syscall {
        need_t += 24 * (dep_profile::syscalls::MAX_REFS + 1);
    }
    let need_tag = tag_room(syncs, syscall);
    if need_v > VAL_SLACK || need_t > TRU_SLACK {
        say(&format!("internal error: block at {start:#x} needs {need_v} value bytes and {need_t} truth bytes"));
        dr_abort();
    }
    let n = plan.insns.len();
    let expanded = expanded.is_some();
    // Code that runs once per block, as straight-line instrumentation assumes.
    let may_zero = !expanded && !on_writable_page(plan.addr as app_pc);
    let touched = keeps_pointer(bb, &plan, may_zero, syncs > 0 || syscall);
    // A block DynamoRIO builds for a trace is built again for each trace holding it: its
    // entry is inline, where the trace's own checks can merge (traces.rs). Any other block
    // enters through the shared stub, unless it records a code version (rare: rewritten code).
    // The same inputs give the same form, as DynamoRIO's rebuilding for a fault needs.
    let cold = if for_trace == 0 && version == 0 && ENTRY_FORM == EntryForm::Auto { crate::stub::entry_arg(start, n) } else { None };
    *ud = Box::into_raw(Box::new(Built::Recorded(BlockInfo {
        plan,
        decisions,
        version,
        step_of,
        done: vec![false; n],
        need_v,
        need_t,
        need_tag,
        pending_post: None,
        pending_sync_after: None,
        pending_rep_end: false,
        expanded,
        entered: false,
        touched,
        kept: 0,
        trigger,
        may_zero,
        zeroed: Vec::new(),
        cold,
    }))) as *mut c_void;
    dr_emit_flags_t::DR_EMIT_DEFAULT
}

/// # Safety
/// DynamoRIO calls it for each instruction of the block in the drmgr insertion stage, with valid
/// pointers for the duration of the call; exercised by tests/collector.rs hello,
/// eight_threads_with_mutexes and standalone::avx512_forms_encode.
pub unsafe extern "C" fn insertion(
    dc: *mut c_void,
    _tag: *mut c_void,
    bb: *mut instrlist_t,
    inst: *mut instr_t,
    _for_trace: bool_,
    _translating: bool_,
    ud: *mut c_void,
) -> dr_emit_flags_t {
    if ud.is_null() {
        return dr_emit_flags_t::DR_EMIT_DEFAULT;
    }
    let last = drmgr_is_last_instr(dc, inst) != 0;
    let info = match &mut *(ud as *mut Built) {
        Built::Recorded(info) => info,
        Built::Counting { insns, pc, entered, trigger } => {
            if instr_is_app(inst) != 0 && !*entered {
                *entered = true;
                // SAFETY: `dc`, `bb` and `inst` are this event's, and `e` does not outlive it.
                let e = unsafe { Emit::new(dc, bb, inst) };
                if let Some(k) = *trigger {
                    crate::window::trigger_call(&e, k, *pc);
                }
                // Where the block starts, for giving back what a fault leaves unrun.
                e.ins(traces::mark(dc, Mark::CountStart, [*insns as usize, 0, 0, 0]));
                crate::window::counting_check(&e, *insns, *pc);
            }
            if last {
                drop(Box::from_raw(ud as *mut Built));
            }
            return dr_emit_flags_t::DR_EMIT_DEFAULT;
        }
    };
    // SAFETY: `dc`, `bb` and `inst` are this event's, and `e` does not outlive the event.
    let e = unsafe { Emit::new(dc, bb, inst) };
    if instr_is_app(inst) != 0 {
        if !info.entered {
            info.entered = true;
            block_entry(&e, info);
        }
        // First at this instruction: rcx may be dead here (written before it is read), and
        // drreg then takes it as a scratch register for the code that follows without
        // keeping its value, so the count is read before any of that code.
        if std::mem::take(&mut info.pending_rep_end) {
            observe_call(&e, crate::observe::rep_end as *mut c_void, None);
        }
        if let Some(r) = info.pending_post.take() {
            post_store(&e, r);
        }
        if let Some(k) = info.pending_sync_after.take() {
            dr_insert_clean_call_ex(dc, bb, inst, crate::atomic_after_cc as *mut c_void, 0, 1, imm32(k));
        }
        let pc = instr_get_app_pc(inst) as u64;
        let k = if info.expanded { 0 } else { info.plan.insns.partition_point(|i| i.pc < pc) };
        if !info.done[k] {
            info.done[k] = true;
            if let Some(s) = info.step_of[k] {
                step_values(&e, info, s);
            }
        }
        let rep = matches!(info.plan.insns[k].special, Special::Rep(_));
        let string_op = instr_is_string_op(inst) != 0 || instr_is_rep_string_op(inst) != 0;
        let insn = &info.plan.insns[k];
        if opts().truth && observed_access(inst) {
            match insn.special {
                // Unexpanded: observed before it runs and at the next instruction.
                Special::Rep(_) if instr_is_rep_string_op(inst) != 0 => {
                    observe_call(&e, crate::observe::rep_start as *mut c_void, Some(insn.pc));
                    info.pending_rep_end = true;
                }
                Special::Gather(_) => observe_call(&e, crate::observe::gather as *mut c_void, Some(insn.pc)),
                // Each iteration of a rep string running as a loop is observed in turn.
                _ => truth_refs(&e, insn.pc, insn.used, rep && string_op),
            }
        }
        if rep && string_op {
            if let Special::Rep(r) = info.plan.insns[k].special {
                info.pending_post = Some(r.post);
            }
        }
        // Watched library functions: their entry and their returns.
        if !info.expanded && !opts().no_sync {
            if let Some(f) = crate::watch::entry_at(pc) {
                let flags = dr_cleancall_save_t_DR_CLEANCALL_READS_APP_CONTEXT;
                dr_insert_clean_call_ex(dc, bb, inst, crate::call_cc as *mut c_void, flags, 2, imm32(f as u32), imm32(k as u32));
            }
            if instr_is_return(inst) != 0 {
                if let Some(f) = crate::watch::function_holding(pc) {
                    let flags = dr_cleancall_save_t_DR_CLEANCALL_READS_APP_CONTEXT;
                    dr_insert_clean_call_ex(dc, bb, inst, crate::return_cc as *mut c_void, flags, 1, imm32(f as u32));
                }
            }
        }
        // Synchronisation points: atomics, and system calls (which the callee sorts out).
        let insn = &info.plan.insns[k];
        if !info.expanded && k < crate::state::MAX_SYNC_INSNS && insn.flow == dep_profile::semantics::Flow::Syscall {
            // Every system call: the recorded ones get their records, the ordering ones
            // their sync records (the callee sorts them out).
            let flags = dr_cleancall_save_t_DR_CLEANCALL_READS_APP_CONTEXT;
            dr_insert_clean_call_ex(dc, bb, inst, crate::syscall_cc as *mut c_void, flags, 2, imm32(k as u32), imm(insn.pc as i64, OPSZ_8));
        } else if !info.expanded && !opts().no_sync && k < crate::state::MAX_SYNC_INSNS {
            if insn.atomic {
                // Stamped before (its release side) and, at the next instruction of the
                // block, after (its acquire side); an atomic that ends its block (at
                // DynamoRIO's length limit) gets no second stamp, which only orders less.
                dr_insert_clean_call_ex(dc, bb, inst, crate::atomic_cc as *mut c_void, 0, 1, imm32(k as u32));
                info.pending_sync_after = Some(k as u32);
            }
        }
    }
    if last {
        if info.pending_post.is_some() || info.pending_rep_end {
            say("internal error: a rep string ends its block");
            dr_abort();
        }
        exit_shadows(&e, &info.decisions, &info.zeroed);
        if info.kept != 0 {
            unreserve(dc, bb, inst, info.kept);
        }
        drop(Box::from_raw(ud as *mut Built));
    }
    dr_emit_flags_t::DR_EMIT_DEFAULT
}

/// Buffer checks, then the H-tag check and the L-tag store.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
unsafe fn block_entry(e: &Emit, info: &BlockInfo) {
    let dc = e.dc;
    let start = info.plan.addr;
    let hi = start >> 16;
    let lo = start as u16;
    if let Some(k) = info.trigger {
        // Before any register is taken: the call may resume the block from its start.
        crate::window::trigger_call(e, k, start);
    }
    if let Some(arg) = info.cold {
        if opts().partial() {
            // First, as below.
            check(drreg_reserve_aflags(dc, e.bb, e.at), "aflags");
            crate::window::entry_check(e, info.plan.insns.len() as u32, true, info.plan.addr);
            check(drreg_unreserve_aflags(dc, e.bb, e.at), "unreserve aflags");
        }
        // The stub's entry: its facts, where to come back to, and the jump; the stub keeps
        // the flags and the registers it uses, so no register or flags are reserved here.
        let lret = e.label();
        e.mov_st_data(tls(S_ARG, 0, OPSZ_4), imm32(arg as u32));
        e.mov_st_data(tls(S_ARG, 4, OPSZ_4), imm32((arg >> 32) as u32));
        let (mut first, mut last) = (core::ptr::null_mut(), core::ptr::null_mut());
        instrlist_insert_mov_instr_addr(dc, lret, core::ptr::null_mut(), tls(S_ERET, 0, OPSZ_8), e.bb, e.at, &mut first, &mut last);
        e.jmp_pc(crate::stub::entry_stub(dc));
        e.ins(lret);
        return;
    }
    check(drreg_reserve_aflags(dc, e.bb, e.at), "aflags");
    if opts().partial() {
        // First: the check may end the chunk, and the buffer checks below find the next.
        crate::window::entry_check(e, info.plan.insns.len() as u32, true, info.plan.addr);
    }
    let r = reserve(dc, e.bb, e.at);
    let big = hi >= 1 << 31;
    let r2 = if big || opts().truth { reserve(dc, e.bb, e.at) } else { 0 };

    let lflush = e.label();
    let lok = traces::mark(dc, Mark::CheckEnd, [0; 4]);
    e.ins(traces::mark(dc, Mark::CheckStart, [info.need_tag, info.need_v, if opts().truth { info.need_t } else { 0 }, r as usize]));
    room_checks(e, r, info.need_v > 0, lflush, lok);
    e.ins(lflush);
    // A full buffer: to the stub (stub.rs), which hands the buffers off and comes back.
    // The return address goes through `r` as a 64-bit immediate: DynamoRIO's instrlist_clone,
    // which builds traces, keeps an instruction operand's target but not its size, so the
    // two 4-byte stores instrlist_insert_mov_instr_addr would make cannot be encoded there.
    let lret = e.label();
    e.mov_addr(r, lret);
    e.mov_st(tls(S_RETURN, 0, OPSZ_8), reg(r));
    e.jmp_pc(crate::stub::flush_stub(dc));
    e.ins(lret);
    e.mov_ld(r, tls(S_TAGPTR, 0, OPSZ_8));
    e.ins(lok);

    // H-tag: unchanged in most blocks.
    let lsame = traces::mark(dc, Mark::HtagEnd, [0; 4]);
    let hi_op = || if big { reg(r2) } else { imm32(hi as u32) };
    if big {
        e.mov_imm64(r2, hi);
    }
    e.ins(traces::mark(dc, Mark::HtagStart, [hi as usize, 0, 0, 0]));
    e.cmp(tls(S_PREVHI, 0, OPSZ_8), hi_op());
    e.jcc(OP_jz, lsame);
    let h16 = hi as u16;
    let lset = e.label();
    let llong = e.label();
    if (1..=MAX_SHORT_H).contains(&h16) {
        // Short form when only bits 16..31 of the address change.
        e.cmp(tls(S_PREVHI, 2, OPSZ_4), imm32((hi >> 16) as u32));
        e.jcc(OP_jnz, llong);
        e.mov_st(mem(r, 0, OPSZ_4), imm32((h16 as u32) << 16));
        e.add_lea(r, 4);
        e.jcc(OP_jmp, lset);
    }
    e.ins(llong);
    e.mov_st(mem(r, 0, OPSZ_4), imm32((CTL_SET_HI as u32) << 16));
    e.mov_st(mem(r, 4, OPSZ_4), imm32((hi as u32 & 0xffff) | ((hi as u32 >> 16) << 16)));
    e.mov_st(mem(r, 8, OPSZ_2), imm((hi >> 32) as u16 as i16 as i64, OPSZ_2));
    e.add_lea(r, 10);
    e.ins(lset);
    e.mov_st(tls(S_PREVHI, 0, OPSZ_8), hi_op());
    e.ins(lsame);
    if info.version > 0 {
        e.mov_st(mem(r, 0, OPSZ_4), imm32((CTL_CODE_VERSION as u32) << 16));
        e.mov_st_data(mem(r, 4, OPSZ_4), imm32(info.version));
        e.add_lea(r, 8);
    }
    if lo == 0 {
        e.mov_st(mem(r, 0, OPSZ_4), imm32(0));
        e.add_lea(r, 4);
    } else {
        e.mov_st_data(mem(r, 0, OPSZ_2), imm(lo as i16 as i64, OPSZ_2));
        e.add_lea(r, 2);
    }
    e.mov_st(tls(S_TAGPTR, 0, OPSZ_8), reg(r));
    if opts().truth {
        // Truth: a block record (kind 0, instruction count, start pc).
        e.mov_ld(r, tls(S_TRUPTR, 0, OPSZ_8));
        e.mov_st(mem(r, 0, OPSZ_4), imm32(0));
        e.mov_st(mem(r, 4, OPSZ_4), imm32(info.plan.insns.len() as u32));
        e.mov_imm64(r2, start);
        e.mov_st(mem(r, 8, OPSZ_8), reg(r2));
        e.mov_st(mem(r, 16, OPSZ_8), imm32(0));
        e.add_lea(r, 24);
        e.mov_st(tls(S_TRUPTR, 0, OPSZ_8), reg(r));
    }
    if r2 != 0 {
        unreserve(dc, e.bb, e.at, r2);
    }
    unreserve(dc, e.bb, e.at, r);
    check(drreg_unreserve_aflags(dc, e.bb, e.at), "unreserve aflags");
}

/// The buffer checks at a block's entry: to `lflush` where the value buffer (if `values`),
/// the truth buffer or the tag buffer is past its limit, else to `lok` with the tag pointer
/// in `r`. The limits leave each buffer its slack, the most one block writes.
///
/// # Safety
/// `e` is an [`Emit`] of a live list; `lflush` and `lok` are labels to be inserted in it;
/// exercised by tests/collector.rs hello, python3_from_the_system (buffers filled in blocks
/// and in the entry stub) and entry_forms_recover_exactly.
pub(crate) unsafe fn room_checks(e: &Emit, r: reg_id_t, values: bool, lflush: *mut instr_t, lok: *mut instr_t) {
    if values {
        e.mov_ld(r, tls(S_VALPTR, 0, OPSZ_8));
        e.cmp(reg(r), tls(S_VALLIM, 0, OPSZ_8));
        e.jcc(OP_jnb, lflush);
    }
    if opts().truth {
        e.mov_ld(r, tls(S_TRUPTR, 0, OPSZ_8));
        e.cmp(reg(r), tls(S_TRULIM, 0, OPSZ_8));
        e.jcc(OP_jnb, lflush);
    }
    e.mov_ld(r, tls(S_TAGPTR, 0, OPSZ_8));
    e.cmp(reg(r), tls(S_TAGLIM, 0, OPSZ_8));
    e.jcc(OP_jb, lok);
}

/// Makes a value register's application value available: a general register is restored
/// in place and returned; a segment base is loaded into `scratch`.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
unsafe fn app_value(e: &Emit, r: Reg, scratch: reg_id_t) -> reg_id_t {
    if r == Reg::FS_BASE || r == Reg::GS_BASE {
        let seg = if r == Reg::FS_BASE { DR_SEG_FS } else { DR_SEG_GS };
        if dr_insert_get_seg_base(e.dc, e.bb, e.at, seg as reg_id_t, scratch) == 0 {
            say("internal error: cannot read a segment base");
            dr_abort();
        }
        scratch
    } else {
        check(drreg_get_app_value(e.dc, e.bb, e.at, dr_gpr(r), dr_gpr(r)), "get_app_value");
        dr_gpr(r)
    }
}

/// How a step records a shadow-checked register ([`step_values`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ShadowForm {
    /// A jump past the store where the shadow is 0, wherever the arithmetic flags are
    /// dead before the step; the advance form elsewhere.
    Auto,
    /// Always the jump, saving live flags around it (`DEP_SHADOW_FORM=branch`, for tests).
    Branch,
    /// Always the store and the advance by the shadow (`DEP_SHADOW_FORM=advance`).
    Advance,
}

static mut SHADOW_FORM: ShadowForm = ShadowForm::Auto;

/// Where blocks' entry code goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EntryForm {
    /// In the shared stub for blocks outside traces, inline in traces.
    Auto,
    /// Inline everywhere (`DEP_ENTRY_FORM=inline`, for measuring and tests).
    Inline,
}

static mut ENTRY_FORM: EntryForm = EntryForm::Auto;

/// Reads `DEP_SHADOW_FORM` and `DEP_ENTRY_FORM`; once, in dr_client_main before any block is
/// built.
///
/// # Safety
/// Called once from dr_client_main before any thread runs application code; exercised by
/// tests/collector.rs shadow_forms_recover_exactly and entry_forms_recover_exactly.
pub unsafe fn init() {
    SHADOW_FORM = match std::env::var("DEP_SHADOW_FORM").as_deref() {
        Ok("branch") => ShadowForm::Branch,
        Ok("advance") => ShadowForm::Advance,
        _ => ShadowForm::Auto,
    };
    ENTRY_FORM = match std::env::var("DEP_ENTRY_FORM").as_deref() {
        Ok("inline") => EntryForm::Inline,
        _ => EntryForm::Auto,
    };
}

/// Whether the step at `e.at` tests its shadow-checked registers with a jump: where the
/// flags are dead (nothing to save), or everywhere as `DEP_SHADOW_FORM` says.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// shadow_forms_recover_exactly.
unsafe fn shadow_branch(e: &Emit) -> bool {
    match SHADOW_FORM {
        ShadowForm::Branch => true,
        ShadowForm::Advance => false,
        ShadowForm::Auto => {
            let mut dead: bool_ = 0;
            drreg_are_aflags_dead(e.dc, e.at, &mut dead) == drreg_status_t_DRREG_SUCCESS && dead != 0
        }
    }
}

/// Values recorded before step `s`: unconditional ones, shadow-checked ones, a gather's
/// index vector and mask, a rep string's slot.
///
/// A shadow-checked register's value is stored only where its shadow is UPDATED, behind a
/// `cmp shadow, 0; jz` where the flags are dead: in a loop whose registers stay recorded
/// the step then stores nothing (matrix's inner loop stored two values, the pointer twice
/// and two shadows each iteration, all to no effect). Where the flags are live it is
/// branchless instead: the value is always stored and the pointer advances by the shadow,
/// 8 or 0. Both write the same DEP_m.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
unsafe fn step_values(e: &Emit, info: &mut BlockInfo, s: usize) {
    let dc = e.dc;
    let step = &info.plan.steps[s];
    let StepDecision { always, check: checked } = info.decisions.steps[s];
    let insn = &info.plan.insns[step.insn as usize];
    let record: RegSet = always.union(checked);
    if record.is_empty() && insn.special == Special::None {
        return;
    }
    let mut avoid = step.used;
    if let Special::Rep(rep) = insn.special {
        avoid.insert(rep.post);
    }
    // The value pointer: kept in a register the block never touches from its first step
    // on (loaded once), or reserved and loaded for this step alone.
    let load = info.kept == 0;
    let v = match info.touched {
        Some(touched) if info.kept == 0 => {
            info.kept = reserve_avoiding(dc, e.bb, e.at, touched);
            info.kept
        }
        Some(_) => info.kept,
        None => reserve_avoiding(dc, e.bb, e.at, avoid),
    };
    // The second register holds a shadow or a segment base; a step with neither (every
    // register it records was written earlier in the block) reserves none, which spares
    // the spill and restore of a live register.
    let segment = record.contains(Reg::FS_BASE) || record.contains(Reg::GS_BASE);
    // The jump form tests the shadow in memory, needing no register for it; a segment
    // base's value takes that register, so such a step keeps the advance form.
    let branch = !checked.is_empty() && !segment && shadow_branch(e);
    let s_reg = if (!checked.is_empty() && !branch) || segment { reserve_avoiding(dc, e.bb, e.at, avoid) } else { 0 };
    if branch {
        check(drreg_reserve_aflags(dc, e.bb, e.at), "aflags");
    }
    // Where every value of the step is behind a jump, each jump's path stores the pointer
    // itself, and a step that records nothing stores nothing.
    let only_checked = checked == record && insn.special == Special::None;
    if load {
        e.mov_ld(v, tls(S_VALPTR, 0, OPSZ_8));
    }
    for r in step.used.iter() {
        if !record.contains(r) {
            continue;
        }
        let src = app_value(e, r, s_reg);
        if branch && checked.contains(r) {
            // The trace optimizer (traces.rs) drops the test, or the test and the store,
            // where the shadow is known; the skip label is no join for it.
            let q = step.shadow_of(r);
            // A register the block leaves RECORDED gets that shadow here, in the path that
            // records it, so that the end of the block need not store it each time
            // ([`exit_shadows`]); only where nothing else in the block tests this shadow,
            // which until the block's end still says what it said at its entry: no later
            // step, and no other register of this one computed from it (xz's threads lost
            // such a register's value when only later steps were looked at).
            let tested_later = || {
                checked.iter().any(|x| x != r && step.shadow_of(x) == q)
                    || info.decisions.steps[s + 1..]
                        .iter()
                        .zip(&info.plan.steps[s + 1..])
                        .any(|(d, st)| d.check.iter().any(|x| st.shadow_of(x) == q))
            };
            let zero = info.may_zero && q == r && info.decisions.exit_recorded.contains(r) && !tested_later();
            let skip = traces::mark(dc, Mark::ShadowSkip, [q.0 as usize, zero as usize, 0, 0]);
            e.ins(traces::mark(dc, Mark::ShadowBranch, [q.0 as usize, 0, 0, 0]));
            e.cmp(tls(S_SHADOW, q.0 as u32, OPSZ_1), imm(0, OPSZ_1));
            e.jcc(OP_jz, skip);
            e.mov_st(mem(v, 0, OPSZ_8), reg(src));
            e.add_lea(v, UPDATED as i32);
            if only_checked {
                e.mov_st(tls(S_VALPTR, 0, OPSZ_8), reg(v));
            }
            if zero {
                e.mov_st(tls(S_SHADOW, r.0 as u32, OPSZ_1), imm(0, OPSZ_1));
                info.zeroed.push((r, skip));
            }
            e.ins(skip);
            continue;
        }
        e.mov_st(mem(v, 0, OPSZ_8), reg(src));
        if checked.contains(r) {
            // Its own shadow, or that of the register it was computed from in this block.
            // The trace optimizer (traces.rs) makes the test a constant where the shadow is known.
            let q = step.shadow_of(r);
            e.ins(traces::mark(dc, Mark::ShadowTest, [q.0 as usize, 0, 0, 0]));
            e.ins(instr_create_1dst_1src(dc, OP_movzx as i32, reg(s_reg), tls(S_SHADOW, q.0 as u32, OPSZ_1)));
            let m = opnd_create_base_disp(v, s_reg, 1, 0, OPSZ_0 as opnd_size_t);
            e.ins(instr_create_1dst_1src(dc, OP_lea as i32, reg(v), m));
        } else {
            e.add_lea(v, 8);
        }
    }
    match insn.special {
        Special::Gather(g) => record_gather(e, g, v),
        Special::Rep(rep) => {
            // The slot for the pointer after the instruction; it holds the value before
            // until the instruction (or each expanded iteration) overwrites it.
            let src = app_value(e, rep.post, s_reg);
            e.mov_st(mem(v, 0, OPSZ_8), reg(src));
            e.mov_st(tls(S_REPPOST, 0, OPSZ_8), reg(v));
            e.add_lea(v, 8);
        }
        Special::None => {}
    }
    if !(branch && only_checked) {
        e.mov_st(tls(S_VALPTR, 0, OPSZ_8), reg(v));
    }
    if branch {
        check(drreg_unreserve_aflags(dc, e.bb, e.at), "unreserve aflags");
    }
    if s_reg != 0 {
        unreserve(dc, e.bb, e.at, s_reg);
    }
    if info.touched.is_none() {
        unreserve(dc, e.bb, e.at, v);
    }
}

/// Stores a gather's or scatter's index vector, then its mask, at `[v]`, advancing `v`.
pub(crate) fn record_gather(e: &Emit, g: Gather, v: reg_id_t) {
    let sz = match g.index_bytes {
        16 => OPSZ_16,
        32 => OPSZ_32,
        _ => OPSZ_64,
    };
    // An opmask gather is EVEX-encoded: its index may be zmm, or xmm16-31/ymm16-31, which
    // VEX vmovdqu cannot name, so its index is stored with EVEX vmovdqu64, whose DynamoRIO
    // form takes an opmask source (k0: every element). Built without one, the encoder finds
    // no template and DynamoRIO crashes in instr_encode_arch (collector/README.md).
    match g.mask {
        GatherMask::K { .. } => e.store_vec_evex(mem(v, 0, sz), dr_vec(g.index)),
        GatherMask::Vector { .. } => e.store_vec(mem(v, 0, sz), dr_vec(g.index), OP_vmovdqu),
    }
    e.add_lea(v, g.index_bytes as i32);
    match g.mask {
        GatherMask::Vector { reg: m, bytes } => {
            let sz = if bytes == 16 { OPSZ_16 } else { OPSZ_32 };
            e.store_vec(mem(v, 0, sz), dr_vec(m), OP_vmovdqu);
            e.add_lea(v, bytes as i32);
        }
        GatherMask::K { reg: k } => {
            e.store_vec(mem(v, 0, OPSZ_8), dr_vec(k), OP_kmovq);
            e.add_lea(v, 8);
        }
    }
}

/// Stores a rep string's pointer register, as it is now, into its DEP_m slot.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
unsafe fn post_store(e: &Emit, r: Reg) {
    let t = reserve_avoiding(e.dc, e.bb, e.at, [r].into_iter().collect());
    let src = app_value(e, r, t);
    e.mov_ld(t, tls(S_REPPOST, 0, OPSZ_8));
    e.mov_st(mem(t, 0, OPSZ_8), reg(src));
    unreserve(e.dc, e.bb, e.at, t);
}

/// The shadows this block changed, written before its last instruction, each after a mark
/// that lets the trace optimizer (traces.rs) drop a store of the value already there.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello and every recovery-equals-truth test.
unsafe fn exit_shadows(e: &Emit, d: &Decisions, zeroed: &[(Reg, *mut instr_t)]) {
    // Set already, unless a call came after: a clean call may expire every register.
    let set = |r: Reg| zeroed.iter().any(|&(z, skip)| z == r && !traces::call_between(skip, e.at));
    let sets = d.exit_updated.iter().map(|r| (r, UPDATED)).chain(d.exit_recorded.iter().filter(|&r| !set(r)).map(|r| (r, 0)));
    for (r, v) in sets {
        e.ins(traces::mark(e.dc, Mark::ShadowSet, [r.0 as usize, v as usize, 0, 0]));
        e.mov_st(tls(S_SHADOW, r.0 as u32, OPSZ_1), imm(v as i64, OPSZ_1));
    }
}

/// Truth: whether an instruction's memory operands are observed. DynamoRIO decides (its
/// own reads-or-writes-memory), not dep's semantics, so a reference the semantics missed
/// shows in the truth; except the cache-control hints, which DynamoRIO counts as reads and
/// DEP by definition does not (profile/FORMAT.md).
///
/// # Safety
/// `inst` is a live instruction of the current block; exercised by tests/collector.rs hello,
/// eight_threads_with_mutexes and standalone::avx512_forms_encode.
unsafe fn observed_access(inst: *mut instr_t) -> bool {
    const HINTS: [u32; 12] = [
        OP_prefetch,
        OP_prefetchw,
        OP_prefetchnta,
        OP_prefetcht0,
        OP_prefetcht1,
        OP_prefetcht2,
        OP_clflush,
        OP_clflushopt,
        OP_clwb,
        OP_cldemote,
        OP_monitor,
        OP_monitorx,
    ];
    let hint = HINTS.contains(&(instr_get_opcode(inst) as u32));
    !hint && (instr_reads_memory(inst) != 0 || instr_writes_memory(inst) != 0)
}

/// Truth: a clean call to an observer of observe.rs, after drreg restores the
/// application's registers, with the instruction's pc as its argument if any.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and standalone::avx512_forms_encode. `callee` is a clean-call
/// target of this client.
unsafe fn observe_call(e: &Emit, callee: *mut c_void, pc: Option<u64>) {
    let flags = dr_cleancall_save_t_DR_CLEANCALL_READS_APP_CONTEXT;
    match pc {
        Some(pc) => dr_insert_clean_call_ex(e.dc, e.bb, e.at, callee, flags, 1, imm(pc as i64, OPSZ_8)),
        None => dr_insert_clean_call_ex(e.dc, e.bb, e.at, callee, flags, 0),
    }
}

/// Truth: each memory operand's address as computed at run time, reads then writes.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by tests/collector.rs
/// hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
unsafe fn truth_refs(e: &Emit, pc: u64, used: RegSet, in_loop: bool) {
    let dc = e.dc;
    let at = e.at;
    if in_loop {
        // A rep string iterates inside one block: keep its truth buffer from overflowing.
        check(drreg_reserve_aflags(dc, e.bb, at), "aflags");
        let t = reserve(dc, e.bb, at);
        let ok = e.label();
        e.mov_ld(t, tls(S_TRUPTR, 0, OPSZ_8));
        e.cmp(reg(t), tls(S_TRULIM, 0, OPSZ_8));
        e.jcc(OP_jb, ok);
        dr_insert_clean_call_ex(dc, e.bb, at, flush_truth_cc as *mut c_void, dr_cleancall_save_t_DR_CLEANCALL_ALWAYS_OUT_OF_LINE, 0);
        e.ins(ok);
        unreserve(dc, e.bb, at, t);
        check(drreg_unreserve_aflags(dc, e.bb, at), "unreserve aflags");
    }
    // (operand, kind, offset from its address): reads, then writes. XSAVE and XSAVEOPT
    // also read the header's XSTATE_BV, 8 bytes at offset 512, which DynamoRIO does not
    // list (SDM vol. 1, 13.7; profile/FORMAT.md).
    let reads_header = [OP_xsave32, OP_xsave64, OP_xsaveopt32, OP_xsaveopt64].contains(&(instr_get_opcode(at) as u32));
    // POP addresses a destination based on rsp with rsp after its increment (SDM vol. 2B,
    // POP), where drutil takes the registers as they are before the instruction.
    let pop = instr_get_opcode(at) as u32 == OP_pop;
    let mut refs = Vec::new();
    for (o, written) in crate::observe::memory_operands(at) {
        if written && reads_header {
            refs.push((o, 1u32, 512));
        }
        let base = opnd_get_base(o) as u32;
        let after_pop =
            if written && pop && (base == DR_REG_RSP || base == DR_REG_ESP) { opnd_size_in_bytes(opnd_get_size(o)) as i32 } else { 0 };
        refs.push((o, if written { 2u32 } else { 1 }, after_pop));
    }
    // Address registers of string operations are implicit: keep rsi/rdi out of the way too.
    let mut avoid = used;
    avoid.insert(Reg::RSI);
    avoid.insert(Reg::RDI);
    for (memref, kind, offset) in refs {
        let t = reserve_avoiding(dc, e.bb, at, avoid);
        let a = reserve_avoiding(dc, e.bb, at, avoid);
        let mut swap: reg_id_t = DR_REG_NULL as reg_id_t;
        check(drreg_restore_app_values(dc, e.bb, at, memref, &mut swap), "restore_app_values");
        if drutil_insert_get_mem_addr(dc, e.bb, at, memref, a, t) == 0 {
            say(&format!("internal error: cannot compute an address at {pc:#x}"));
            dr_abort();
        }
        // drutil cannot size XSAVE areas: they have the machine's XSAVE size by definition.
        let size = match drutil_opnd_mem_size_in_bytes(memref, at) {
            _ if offset == 512 => 8,
            0 => MACHINE.xsave_size,
            n => n,
        };
        if offset != 0 {
            e.add_lea(a, offset);
        }
        e.mov_ld(t, tls(S_TRUPTR, 0, OPSZ_8));
        e.mov_st(mem(t, 0, OPSZ_4), imm32(kind));
        e.mov_st(mem(t, 4, OPSZ_4), imm32(size));
        e.mov_st(mem(t, 16, OPSZ_8), reg(a));
        e.mov_imm64(a, pc);
        e.mov_st(mem(t, 8, OPSZ_8), reg(a));
        e.add_lea(t, 24);
        e.mov_st(tls(S_TRUPTR, 0, OPSZ_8), reg(t));
        if swap != DR_REG_NULL as reg_id_t {
            unreserve(dc, e.bb, at, swap);
        }
        unreserve(dc, e.bb, at, a);
        unreserve(dc, e.bb, at, t);
    }
}
