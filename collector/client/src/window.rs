//! Windows of each thread's instructions (`dep record --skip-instrs N --instrs M`): outside
//! them a block only counts its instructions; inside, it is recorded as usual.
//!
//! Every block, of either kind, subtracts its instruction count at entry from one of the
//! thread's [`COUNT_SLOTS`] count slots (which one, its address decides) and, left at zero
//! or below, faults on a `ud2` that the signal event takes ([`due_signal`]). The
//! instructions left before the next check are the slots' sum, shared out among them: while
//! every slot is above zero so is the sum, so the check never comes later than with one
//! slot, and the handler, which sums them, decides exactly. It numbers the block (its first
//! instruction) and:
//! - moves the thread between recording and not where the block's number crosses a
//!   window's bound: a recorded stretch ends its chunk, and one that starts after a gap
//!   starts a chunk whose "unrecorded" thread event says how many instructions the gap held;
//! - there, flushes the code cache (`dr_unlink_flush_region`: the caches are thread-private,
//!   so each thread's blocks are rebuilt the kind its own windows want) and resumes the
//!   application at the block's start, which now runs as the kind wanted. So a window holds
//!   exactly the blocks whose first instruction is numbered N to N+M-1, as
//!   `--from-instr N --to-instr N+M` cuts them from a whole run's profile.
//!
//! A check has two forms. Where the arithmetic flags are dead at the block's start, `sub
//! [slot], n; jnle` and a `ud2` (SIGILL). Where they are live, drreg would save and restore
//! them around the `sub`, so the count goes through a scratch register with `lea`, which
//! writes no flags, and the test is a load from [`LOAD_BASE`]` - 1 + ` the count: a count at
//! zero or below reads the guard pages under the region and faults (SIGSEGV). Both forms
//! keep the same count in the same slots, and the signal event takes either fault
//! (python3's workload counted in 4.10 s against 4.49 s with the flags form alone; the
//! measurements are in collector/README.md).

use crate::codegen::{imm32, mem, reg, Emit};
use crate::instrument::check;
use crate::observe::decode;
use crate::state::*;
use core::ffi::c_int;
use dep_profile::container::{ThreadEvent, ThreadEventKind};
use dynamorio_sys::*;

/// Readable bytes a load-form check reads in: a count slot never holds more (see
/// [`MAX_DISTANCE`]), so the load of a count above zero stays inside.
const REGION: u64 = 32 << 20;
/// Inaccessible bytes under the region, which a count at zero or below reads in: a count
/// is never lower than minus two blocks' instructions (its share, at worst zero less the
/// block that made it due, less the next block's).
const GUARD: u64 = 64 << 10;
/// The farthest a thread's next check is set, over all its slots: each slot's share stays
/// under [`REGION`] less the 8 bytes a check reads. A check that comes due short of a bound
/// only sets the next (one fault every few tens of millions of a slot's instructions).
const MAX_DISTANCE: u64 = (REGION - 64) * COUNT_SLOTS as u64;
/// Where the readable region starts, in the low 2 GiB (a check's load reaches it with a
/// 32-bit displacement); 0 where it could not be had: every check then takes the flags form.
static LOAD_BASE: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Which form of check counting blocks take: where the flags are live, the load (the
/// default); `DEP_CHECK_FORM=flags` or `load` takes one everywhere (for the tests).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Auto,
    Flags,
    Load,
}

static mut FORM: Form = Form::Auto;

/// Maps the region load-form checks read and its guard, with windows or bounds; once, in
/// dr_client_main before any block is built.
///
/// # Safety
/// Called once from dr_client_main before any thread runs application code; exercised by
/// tests/windows.rs.
pub unsafe fn init() {
    FORM = match std::env::var("DEP_CHECK_FORM").as_deref() {
        Ok("flags") => Form::Flags,
        Ok("load") => Form::Load,
        _ => Form::Auto,
    };
    if !opts().partial() || FORM == Form::Flags {
        return;
    }
    let size = (GUARD + REGION + 4096) as usize;
    let flags = dr_alloc_flags_t_DR_ALLOC_NON_HEAP | dr_alloc_flags_t_DR_ALLOC_LOW_2GB;
    let p = dr_custom_alloc(core::ptr::null_mut(), flags, size, DR_MEMPROT_READ, core::ptr::null_mut());
    if p.is_null() {
        return;
    }
    let base = p as u64 + GUARD;
    if dr_memory_protect(p, GUARD as usize, DR_MEMPROT_NONE) == 0 || base + REGION > i32::MAX as u64 {
        dr_custom_free(core::ptr::null_mut(), flags, p, size);
        return;
    }
    LOAD_BASE.store(base, core::sync::atomic::Ordering::Relaxed);
}

/// The calling thread's instruction count at the check: the first instruction of the block
/// that made it.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn at(pt: &PerThread) -> u64 {
    let left = (0..COUNT_SLOTS).fold(0i64, |sum, k| sum.wrapping_add(*slot(pt, S_LEFT + k) as i64));
    pt.win_base.wrapping_sub(left) as u64
}

/// The count slot of the block at `pc`: blocks a few bytes apart, as a loop's are, take
/// different ones.
fn count_slot(pc: u64) -> u32 {
    S_LEFT + (((pc ^ (pc >> 7)) >> 2) % COUNT_SLOTS as u64) as u32
}

/// The next check after instruction `at`, `distance` instructions on, when `ran` of them
/// have run already (the block that checked, whose count is off the slot).
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
unsafe fn check_in(pt: &mut PerThread, at: u64, distance: u64, ran: u64) {
    let distance = distance.min(MAX_DISTANCE) as i64;
    pt.win_base = (at as i64).wrapping_add(distance);
    let left = distance.wrapping_sub(ran as i64);
    for (k, share) in shares(left).into_iter().enumerate() {
        *slot(pt, S_LEFT + k as u32) = share as u64;
    }
}

/// `left` shared out among the count slots: each slot's share above zero while `left` is
/// at least one per slot; otherwise all of it in the first slot and zero in the others, so
/// that any block's subtraction leaves its slot at zero or below.
fn shares(left: i64) -> [i64; COUNT_SLOTS as usize] {
    let n = COUNT_SLOTS as i64;
    let mut s = [0i64; COUNT_SLOTS as usize];
    if left >= n {
        s = [left / n; COUNT_SLOTS as usize];
        s[0] += left % n;
    } else {
        s[0] = left;
    }
    s
}

/// What a due check does next: go on into the block, or run it again from its start.
#[derive(Debug, PartialEq, Eq)]
enum Then {
    GoOn,
    RunAgain,
}

/// A due check at the entry of a block of `insns` instructions (its count already off),
/// `recorded` its kind: moves the thread into or out of a window where the block's number
/// crosses a bound, and shares out the count to the next bound.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread, in its signal event for the check's
/// fault (where the code cache may be flushed); exercised by tests/windows.rs.
unsafe fn due(pt: &mut PerThread, recorded: bool, insns: u32) -> Then {
    let insns = insns as u64;
    let at = at(pt).wrapping_sub(insns);
    // A function's bounds decide elsewhere ([`bound_cc`]): here the count only goes on.
    let Some(plan) = opts().windows else {
        check_in(pt, at, u64::MAX, insns);
        return Then::GoOn;
    };
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
    if want == recorded {
        // (A bound inside this block leaves the count due: the next block checks.)
        check_in(pt, at, distance, insns);
        return Then::GoOn;
    }
    // Run again, the block counts itself again.
    check_in(pt, at, distance, 0);
    // The block is the other kind: rebuild the thread's blocks (the caches are
    // thread-private) and run this one again from its start, as the kind wanted. Nothing
    // of it has run: the check is its first code.
    pt.build_recorded = want;
    dr_unlink_flush_region(core::ptr::null_mut(), usize::MAX);
    Then::RunAgain
}

/// What a due check's code at `raw` in the code cache says: `ud2` or the load form's load,
/// then two `nop`s whose displacements hold the low 32 bits of the block's address and
/// `insns | recorded << 31`, as [`entry_check`] and [`load_check`] lay them out.
#[derive(Debug, PartialEq, Eq)]
pub struct Check {
    /// The low 32 bits of the block's address.
    pub pc_low: u32,
    pub insns: u32,
    pub recorded: bool,
    /// Where the block's code goes on, past the check's.
    pub next: u64,
    /// The signal its fault raises: SIGILL (`ud2`) or SIGSEGV (the load form's load).
    pub sig: i32,
}

/// The due check whose faulting instruction (`ud2` or the load) is at `raw`, decoded; None
/// where the code there is not one.
///
/// # Safety
/// `dc` is the calling thread's drcontext and `raw` an address in the code cache (readable
/// for the 18 to 24 bytes a check's code takes from there; decoding stops at the first
/// instruction that is not the check's); exercised by tests/windows.rs and standalone::window_check_decodes.
pub unsafe fn check_at(dc: *mut core::ffi::c_void, raw: *mut u8) -> Option<Check> {
    decode_check(dc, raw, LOAD_BASE.load(core::sync::atomic::Ordering::Relaxed))
}

/// [`check_at`] with load-form checks reading the region at `base` (0: none).
///
/// # Safety
/// As [`check_at`]; exercised by standalone::window_check_decodes.
pub unsafe fn decode_check(dc: *mut core::ffi::c_void, raw: *mut u8, base: u64) -> Option<Check> {
    let i = instr_create(dc);
    let mut fields = [0u32; 2];
    let mut at = decode(dc, raw, i);
    let mut ok = !at.is_null();
    let mut sig = libc::SIGILL;
    if ok && instr_get_opcode(i) != OP_ud2 as c_int {
        // The load form: `mov r, [r + base - 1]`, from the region, into its own base.
        let m = instr_get_src(i, 0);
        ok = base != 0
            && instr_get_opcode(i) == OP_mov_ld as c_int
            && opnd_is_base_disp(m) != 0
            && opnd_get_index(m) == DR_REG_NULL as reg_id_t
            && opnd_is_reg(instr_get_dst(i, 0)) != 0
            && opnd_get_base(m) == opnd_get_reg(instr_get_dst(i, 0))
            && opnd_get_disp(m) as i64 == base as i64 - 1;
        sig = libc::SIGSEGV;
    }
    for f in fields.iter_mut() {
        if !ok {
            break;
        }
        instr_reset(dc, i);
        at = decode(dc, at, i);
        ok = !at.is_null() && instr_get_opcode(i) == OP_nop_modrm as c_int;
        if ok {
            let m = instr_get_src(i, 0);
            ok = opnd_is_base_disp(m) != 0 && opnd_get_base(m) == DR_REG_NULL as reg_id_t && opnd_get_index(m) == DR_REG_NULL as reg_id_t;
            *f = opnd_get_disp(m) as u32;
        }
    }
    instr_destroy(dc, i);
    ok.then(|| Check { pc_low: fields[0], insns: fields[1] & !(1 << 31), recorded: fields[1] >> 31 != 0, next: at as u64, sig })
}

/// The signal event's part, with windows or bounds: a SIGILL or SIGSEGV at a due check
/// ([`entry_check`]'s `ud2`, [`load_check`]'s load in the guard pages; its
/// translation the block's start) is taken here; None for any other signal. Going on, the
/// thread resumes in the code cache past the check; running the block again, at its start
/// in the application's context (which DynamoRIO and drreg have translated the fault to).
///
/// # Safety
/// `dc` and `si` are those of the current signal event, `pt` the thread's set-up
/// PerThread; exercised by tests/windows.rs.
pub unsafe fn due_signal(dc: *mut core::ffi::c_void, pt: &mut PerThread, si: &mut dr_siginfo_t) -> Option<dr_signal_action_t> {
    if !opts().partial()
        || !matches!(si.sig, libc::SIGILL | libc::SIGSEGV)
        || si.raw_mcontext_valid == 0
        || si.raw_mcontext.is_null()
        || si.mcontext.is_null()
    {
        return None;
    }
    if si.fault_fragment_info.cache_start_pc.is_null() {
        return None;
    }
    let raw = &mut *si.raw_mcontext;
    let c = check_at(dc, raw.__bindgen_anon_10.pc)?;
    let base = LOAD_BASE.load(core::sync::atomic::Ordering::Relaxed);
    // A load-form check faults in the guard pages alone.
    if c.sig != si.sig || (c.sig == libc::SIGSEGV && !(base - GUARD..base).contains(&(si.access_address as u64))) {
        return None;
    }
    let app = &mut *si.mcontext;
    if app.__bindgen_anon_10.pc as u32 != c.pc_low {
        // An application's own ud2 followed by what looks like a check: not ours.
        return None;
    }
    Some(match due(pt, c.recorded, c.insns) {
        Then::GoOn => {
            raw.__bindgen_anon_10.pc = c.next as *mut u8;
            dr_signal_action_t_DR_SIGNAL_SUPPRESS
        }
        Then::RunAgain => dr_signal_action_t_DR_SIGNAL_REDIRECT,
    })
}

/// Whether DynamoRIO is translating a due check's fault (the restore-state event before
/// [`due_signal`]): the block has not started, nothing of it is interrupted.
///
/// # Safety
/// `dc` and `info` are those of the current restore-state event; exercised by
/// tests/windows.rs.
pub unsafe fn translating_check(dc: *mut core::ffi::c_void, info: &dr_restore_state_info_t) -> bool {
    if !opts().partial() || info.raw_mcontext.is_null() || info.fragment_info.cache_start_pc.is_null() {
        return false;
    }
    check_at(dc, (*info.raw_mcontext).__bindgen_anon_10.pc).is_some()
}

/// The application's registers at the current clean call.
///
/// # Safety
/// `dc` is the calling thread's drcontext, in a clean call inserted with the application
/// context readable; exercised by tests/windows.rs.
unsafe fn app_context(dc: *mut core::ffi::c_void) -> dr_mcontext_t {
    let mut mc: dr_mcontext_t = core::mem::zeroed();
    mc.size = core::mem::size_of::<dr_mcontext_t>();
    mc.flags = dr_mcontext_flags_t::DR_MC_ALL;
    if dr_get_mcontext(dc, &mut mc) == 0 {
        say("internal error: no machine context at a window's bound");
        dr_abort();
    }
    mc
}

/// Leaves the current fragment and runs the application again from `pc` (the start of
/// the block whose clean call this is), in the code the cache holds for it now.
///
/// # Safety
/// As [`app_context`]; does not return.
unsafe fn resume_at(dc: *mut core::ffi::c_void, pc: u64) {
    let mut mc = app_context(dc);
    mc.__bindgen_anon_10.pc = pc as *mut u8;
    dr_redirect_execution(&mut mc);
    say("internal error: cannot resume at a window's bound");
    dr_abort();
}

// ---------------------------------------------------------------- a function's bounds

/// The entry addresses of `--start-at` and `--stop-at` once known (0: not yet).
static START_AT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static STOP_AT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Trigger kinds: the entry of `--start-at`, the entry of `--stop-at`, its return.
const ENTER_START: u32 = 0;
const ENTER_STOP: u32 = 1;
const RETURN_STOP: u32 = 2;

/// An address given as `0x...`, or None for a symbol's name.
fn address(spec: &str) -> Option<u64> {
    u64::from_str_radix(spec.strip_prefix("0x")?, 16).ok()
}

/// Whether a new thread records from its start: without windows or bounds; with windows
/// that start at instruction 0; with `--stop-at` alone.
pub fn recorded_from_start() -> bool {
    let o = opts();
    match o.windows {
        Some(w) => w.around(0).is_some_and(|(s, _)| s == 0),
        None => o.start_at.is_none(),
    }
}

/// Finds the bounds' functions among a module's symbols (`bias`: its load address minus
/// its ELF addresses); the first module that defines one wins.
pub fn module_loaded(data: &[u8], bias: u64) {
    use std::sync::atomic::Ordering::Relaxed;
    let o = opts();
    let wanted: Vec<(&str, &core::sync::atomic::AtomicU64)> = [(&o.start_at, &START_AT), (&o.stop_at, &STOP_AT)]
        .into_iter()
        .filter_map(|(s, at)| Some((s.as_deref()?, at)))
        .filter(|(s, at)| address(s).is_none() && at.load(Relaxed) == 0)
        .collect();
    if wanted.is_empty() {
        return;
    }
    crate::watch::each_function(data, |name, address, _, _| {
        for (want, at) in &wanted {
            if *want == name {
                let _ = at.compare_exchange(0, address.wrapping_add(bias), Relaxed, Relaxed);
            }
        }
    });
}

/// The entry address of a bound, if known.
fn bound(spec: &Option<String>, found: &core::sync::atomic::AtomicU64) -> Option<u64> {
    let s = spec.as_deref()?;
    address(s).or_else(|| Some(found.load(core::sync::atomic::Ordering::Relaxed)).filter(|&a| a != 0))
}

/// Says, at the end, which bound's function no module defined: nothing was recorded for it.
pub fn unresolved_bounds() {
    let o = opts();
    for (spec, found, what) in [(&o.start_at, &START_AT, "--start-at"), (&o.stop_at, &STOP_AT, "--stop-at")] {
        if let Some(s) = spec.as_deref().filter(|_| bound(spec, found).is_none()) {
            say(&format!("warning: {what} {s}: no module the program loaded defines a function of that name"));
        }
    }
}

/// The check a block built now at `pc` makes first for the calling thread: entering
/// `--start-at` before recording, entering `--stop-at` while recording, or returning
/// from it to the address it was called from.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs.
pub unsafe fn trigger_at(pt: &PerThread, pc: u64) -> Option<u32> {
    let o = opts();
    if pt.stopped || (o.start_at.is_none() && o.stop_at.is_none()) {
        return None;
    }
    if !pt.build_recorded {
        return (!pt.started && bound(&o.start_at, &START_AT) == Some(pc)).then_some(ENTER_START);
    }
    match pt.stop_armed {
        Some((ret, _)) => (ret == pc).then_some(RETURN_STOP),
        None => (bound(&o.stop_at, &STOP_AT) == Some(pc)).then_some(ENTER_STOP),
    }
}

/// The clean call of a block's check `kind` at its start `pc`, first in the block.
///
/// # Safety
/// `e` comes from the current basic-block event, at the block's first instruction with no
/// register reserved; exercised by tests/windows.rs.
pub unsafe fn trigger_call(e: &Emit, kind: u32, pc: u64) {
    let flags = dr_cleancall_save_t_DR_CLEANCALL_READS_APP_CONTEXT;
    let pc = crate::codegen::imm(pc as i64, OPSZ_8);
    dr_insert_clean_call_ex(e.dc, e.bb, e.at, bound_cc as *mut core::ffi::c_void, flags, 2, imm32(kind), pc);
}

/// Clean-call target of a block's `--start-at`/`--stop-at` check ([`trigger_at`]).
///
/// # Safety
/// Only called from a clean call inserted by [`trigger_call`], on an application thread
/// whose PerThread is set up; exercised by tests/windows.rs.
pub unsafe extern "C" fn bound_cc(kind: u32, pc: u64) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    if pt.is_null() {
        return;
    }
    let pt = &mut *pt;
    match kind {
        ENTER_START if !pt.started && !pt.recording => {
            pt.started = true;
            start(pt, at(pt));
            pt.build_recorded = true;
        }
        ENTER_STOP if pt.recording && pt.stop_armed.is_none() && !pt.stopped => {
            // The return address is on the stack at the entry; the function has returned
            // when control reaches it with the stack pointer above that slot. Its block
            // is rebuilt to check that (and this one, which a trace may hold it in).
            let mc = app_context(dc);
            let sp = mc.__bindgen_anon_4.xsp as u64;
            let mut ret = 0u64;
            let mut got = 0usize;
            if dr_safe_read(sp as *const core::ffi::c_void, 8, &mut ret as *mut u64 as *mut core::ffi::c_void, &mut got) == 0 || got != 8 {
                return;
            }
            pt.stop_armed = Some((ret, sp + 8));
            dr_unlink_flush_region(ret as *mut u8, 1);
            dr_unlink_flush_region(pc as *mut u8, 1);
        }
        RETURN_STOP => {
            let Some((ret, sp)) = pt.stop_armed else { return };
            let mc = app_context(dc);
            if pc != ret || mc.__bindgen_anon_4.xsp as u64 != sp {
                // A deeper call of the function returning (recursion), or a jump here.
                return;
            }
            pt.stop_armed = None;
            pt.stopped = true;
            stop(pt, at(pt));
            pt.build_recorded = false;
        }
        _ => return,
    }
    if kind != ENTER_STOP {
        dr_unlink_flush_region(core::ptr::null_mut(), usize::MAX);
    }
    resume_at(dc, pc);
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

/// Takes `n` instructions back off the thread's count: the rest of a block its entry
/// counted whole that stopped early (a fault, or DynamoRIO moving the thread out of it).
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread; exercised by tests/windows.rs
/// faults_do_not_move_windows.
pub unsafe fn give_back(pt: &mut PerThread, n: u64) {
    if opts().partial() {
        *slot(pt, S_LEFT) = (*slot(pt, S_LEFT)).wrapping_add(n);
    }
}

/// Outside the windows, where DynamoRIO translates the thread out of the middle of a
/// counting block (a fault, or moving the thread): the rest of the block goes back off the
/// count, as recovery numbers an interrupted block up to and including the instruction it
/// stopped at. The block is the one whose window-check mark comes last before the
/// stopping instruction in the fragment's recreated list (first match by address in a
/// trace that holds a block twice).
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread and `info` DynamoRIO's, valid for the
/// call; exercised by tests/windows.rs faults_do_not_move_windows.
pub unsafe fn interrupted_outside(pt: &mut PerThread, info: &dr_restore_state_info_t) {
    use crate::traces::{data, mark_of, Mark};
    if !opts().partial() || info.raw_mcontext.is_null() {
        return;
    }
    let list = info.fragment_info.ilist;
    if list.is_null() {
        return;
    }
    let pc = (*info.mcontext).__bindgen_anon_10.xip as u64;
    let raw = (*info.raw_mcontext).__bindgen_anon_10.xip as u64;
    let now = at(pt);
    if pt.gave_back_at == (raw, now) {
        return;
    }
    let (mut insns, mut k) = (None, 0u64);
    let mut i = instrlist_first(list);
    while !i.is_null() {
        if mark_of(i) == Some(Mark::CountStart) {
            insns = Some(data(i)[0] as u64);
            k = 0;
        } else if instr_is_app(i) != 0 {
            if instr_get_app_pc(i) as u64 == pc {
                if let Some(n) = insns {
                    pt.gave_back_at = (raw, now);
                    give_back(pt, n.saturating_sub(k + 1));
                }
                return;
            }
            k += 1;
        }
        i = instr_get_next(i);
    }
}

/// At the thread's end: an unrecorded stretch it ended in goes before its last chunk.
///
/// # Safety
/// `pt` is the calling thread's own set-up PerThread, in its exit event; exercised by
/// tests/windows.rs.
pub unsafe fn thread_ends(pt: &mut PerThread) {
    if opts().partial() && !pt.recording {
        gap_ends(pt, at(pt));
    }
}

/// The window check at a block's entry (aflags reserved by the caller): this block's
/// instructions off its count slot, and when that leaves it at zero or below, a fault that
/// the signal event takes ([`due_signal`]): one read-modify-write and a branch, the `sub`'s
/// flags deciding (a `cmp` first was one more load per block). The `ud2` is followed by
/// what the handler needs, as `nop`s that never run: 18 bytes where a clean call put some
/// 130 in every block (the stack switch, arguments and calls) and cost python3's start-up
/// under `--skip-instrs` as much as the rest of the counting did (collector/README.md).
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]); exercised by
/// tests/windows.rs and standalone::window_check_decodes.
pub unsafe fn entry_check(e: &Emit, insns: u32, recorded: bool, pc: u64) {
    let go = e.label();
    e.sub(tls(count_slot(pc), 0, OPSZ_8), imm32(insns));
    e.jcc(OP_jnle, go);
    let fault = instr_create_0dst_0src(e.dc, OP_ud2 as c_int);
    check_fault(e, fault, insns, recorded, pc);
    e.ins(go);
}

/// The load form of the check at a counting block's entry: the count through a scratch
/// register with `lea`, which writes no flags, and a load that faults where it left the
/// count at zero or below; the flags form ([`entry_check`]) where the flags are dead there,
/// where the region could not be had, or as `DEP_CHECK_FORM` says.
///
/// # Safety
/// `e` comes from the current basic-block event (see [`Emit`]), at the block's first
/// application instruction with nothing reserved; exercised by tests/windows.rs and
/// standalone::window_check_decodes.
pub unsafe fn counting_check(e: &Emit, insns: u32, pc: u64) {
    let base = LOAD_BASE.load(core::sync::atomic::Ordering::Relaxed);
    let mut dead: bool_ = 0;
    let load = base != 0
        && match FORM {
            Form::Flags => false,
            Form::Load => true,
            Form::Auto => drreg_are_aflags_dead(e.dc, e.at, &mut dead) == drreg_status_t_DRREG_SUCCESS && dead == 0,
        };
    if !load {
        check(drreg_reserve_aflags(e.dc, e.bb, e.at), "aflags");
        entry_check(e, insns, false, pc);
        check(drreg_unreserve_aflags(e.dc, e.bb, e.at), "unreserve aflags");
        return;
    }
    let mut r: reg_id_t = 0;
    check(drreg_reserve_register(e.dc, e.bb, e.at, core::ptr::null_mut(), &mut r), "reserve");
    load_check(e, r, base, insns, false, pc);
    check(drreg_unreserve_register(e.dc, e.bb, e.at, r), "unreserve");
}

/// The load form's code with `r` as scratch and the region at `base`.
///
/// # Safety
/// As [`counting_check`], `r` reserved; exercised by standalone::window_check_decodes.
pub unsafe fn load_check(e: &Emit, r: reg_id_t, base: u64, insns: u32, recorded: bool, pc: u64) {
    let slot = tls(count_slot(pc), 0, OPSZ_8);
    e.mov_ld(r, slot);
    e.add_lea(r, (insns as i32).wrapping_neg());
    e.mov_st(slot, reg(r));
    let fault = instr_create_1dst_1src(e.dc, OP_mov_ld as c_int, reg(r), mem(r, (base - 1) as i32, OPSZ_8));
    check_fault(e, fault, insns, recorded, pc);
}

/// Inserts a check's faulting instruction `fault` and, after it, what the signal event
/// needs to know of the block.
///
/// # Safety
/// As [`entry_check`]; `fault` is a new instruction.
unsafe fn check_fault(e: &Emit, fault: *mut instr_t, insns: u32, recorded: bool, pc: u64) {
    // The fault translates to the block's start: none of it has run.
    instr_set_translation(fault, pc as *mut u8);
    instr_set_meta_may_fault(fault, 1);
    e.ins(fault);
    // Data as `nop [disp32]`, which names no register: as `mov`s into rdi, never run,
    // DynamoRIO crashed emitting recorded blocks (a memcpy to 0; not understood). (After a
    // load-form check they do run: two nops.)
    let data = insns | (recorded as u32) << 31;
    for v in [pc as u32, data] {
        let m = opnd_create_base_disp(DR_REG_NULL as reg_id_t, DR_REG_NULL as reg_id_t, 0, v as i32, OPSZ_4 as opnd_size_t);
        e.ins_data(instr_create_0dst_1src(e.dc, OP_nop_modrm as c_int, m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shares add up to what is left, and are each above zero once there is one per slot.
    #[test]
    fn shares_add_up() {
        for left in [-40i64, -1, 0, 1, 7, 8, 9, 100, 12_345, i64::MAX - 3] {
            let s = shares(left);
            assert_eq!(s.iter().fold(0i64, |a, &x| a.wrapping_add(x)), left, "{left}");
            if left >= COUNT_SLOTS as i64 {
                assert!(s.iter().all(|&x| x > 0), "{left}: {s:?}");
            } else {
                assert!(s[1..].iter().all(|&x| x == 0), "{left}: {s:?}");
            }
        }
    }

    /// Blocks of random addresses and lengths run against a budget spread over the slots:
    /// the first check comes at or before the block with which one slot holding the whole
    /// budget would have come due (the first whose running total reaches the budget).
    #[test]
    fn spread_count_comes_due_no_later_than_one_slot() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2_000 {
            let budget = (rand() % 5_000) as i64 - 20;
            let mut slots = shares(budget);
            let (mut total, mut one_slot_due, mut spread_due) = (0i64, None, None);
            for i in 0..10_000usize {
                let pc = 0x40_0000 + rand() % 256;
                let n = 1 + (rand() % 12) as i64;
                let k = (count_slot(pc) - S_LEFT) as usize;
                slots[k] -= n;
                total += n;
                if spread_due.is_none() && slots[k] <= 0 {
                    spread_due = Some(i);
                }
                if one_slot_due.is_none() && total >= budget {
                    one_slot_due = Some(i);
                }
                if one_slot_due.is_some() {
                    break;
                }
            }
            let (one, spread) = (one_slot_due.unwrap(), spread_due.expect("the spread count came due"));
            assert!(spread <= one, "budget {budget}: due at block {spread}, one slot at {one}");
        }
    }
}
