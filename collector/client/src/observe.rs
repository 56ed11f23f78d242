//! Truth observations that need more than an operand's address: clean calls that read the
//! application's registers and let DynamoRIO evaluate the operands, so that `--truth`
//! leaves the blocks, DEP_c and DEP_m exactly as a plain run makes them. Rep strings run
//! unexpanded (their start and count are observed, the truth reader steps the iterations);
//! gathers and scatters run unexpanded (DynamoRIO computes each active element's address
//! from the index vector and mask as they are before the instruction).

use crate::state::*;
use core::ffi::c_void;
use dep_profile::truth::{TruthKind, TruthRecord};
use dynamorio_sys::*;

extern "C" {
    // Exported by libdynamorio, outside the bindings' allowlist.
    pub(crate) fn decode(dc: *mut c_void, pc: *mut u8, instr: *mut instr_t) -> *mut u8;
}

/// The application's machine context inside a clean call inserted with
/// DR_CLEANCALL_READS_APP_CONTEXT (drreg has restored every application value); `flags`
/// says which parts (the SIMD registers only where a gather needs them).
///
/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes.
unsafe fn app_context(dc: *mut c_void, flags: dr_mcontext_flags_t) -> dr_mcontext_t {
    let mut mc: dr_mcontext_t = core::mem::zeroed();
    mc.size = core::mem::size_of::<dr_mcontext_t>();
    mc.flags = flags;
    if dr_get_mcontext(dc, &mut mc) == 0 {
        say("internal error: cannot read the application's context");
        dr_abort();
    }
    mc
}

/// Runs `f` on the instruction at `pc` as DynamoRIO decodes it.
///
/// # Safety
/// `dc` is the calling thread's live drcontext, inside a DynamoRIO event or clean call; exercised
/// by tests/collector.rs hello and eight_threads_with_mutexes. `pc` is a readable application
/// instruction address.
unsafe fn with_decoded<R>(dc: *mut c_void, pc: u64, f: impl FnOnce(*mut instr_t) -> R) -> R {
    let mut instr: instr_t = core::mem::zeroed();
    instr_init(dc, &mut instr);
    if decode(dc, pc as *mut u8, &mut instr).is_null() {
        say(&format!("internal error: cannot decode the instruction at {pc:#x}"));
        dr_abort();
    }
    let r = f(&mut instr);
    instr_free(dc, &mut instr);
    r
}

/// The memory operands of an instruction, sources (read) then destinations (written), as
/// (operand, written).
///
/// # Safety
/// `instr` is a live decoded instruction; exercised by tests/collector.rs hello,
/// eight_threads_with_mutexes and standalone::avx512_forms_encode.
pub(crate) unsafe fn memory_operands(instr: *mut instr_t) -> Vec<(opnd_t, bool)> {
    let mut ops = Vec::new();
    for k in 0..instr_num_srcs(instr) {
        let o = instr_get_src(instr, k as uint);
        if opnd_is_memory_reference(o) != 0 {
            ops.push((o, false));
        }
    }
    for k in 0..instr_num_dsts(instr) {
        let o = instr_get_dst(instr, k as uint);
        if opnd_is_memory_reference(o) != 0 {
            ops.push((o, true));
        }
    }
    ops
}

/// Clean call before a rep string: its element size, each operand's first address and
/// stride (the direction flag as it is now), and rcx, whose change gives the count.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs rep_strings_with_large_counts.
pub unsafe extern "C" fn rep_start(pc: u64) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    if pt.is_null() {
        return;
    }
    let pt = &mut *pt;
    let mut mc = app_context(dc, dr_mcontext_flags_t::DR_MC_INTEGER | dr_mcontext_flags_t::DR_MC_CONTROL);
    let down = mc.__bindgen_anon_9.xflags & 0x400 != 0;
    with_decoded(dc, pc, |instr| {
        let ops = memory_operands(instr);
        let elem = ops.first().map_or(0, |&(o, _)| drutil_opnd_mem_size_in_bytes(o, instr));
        push_truth(pt, TruthRecord { kind: TruthKind::Rep, size: elem, pc, addr: 0 });
        let stride = if down { -(elem as i64) } else { elem as i64 };
        let mut narrow = false;
        for &(o, write) in &ops {
            let base = opnd_get_base(o);
            narrow |= base == DR_REG_ESI as reg_id_t || base == DR_REG_EDI as reg_id_t;
            let first = opnd_compute_address(o, &mut mc) as u64;
            let kind = if write { TruthKind::RepWrite } else { TruthKind::RepRead };
            push_truth(pt, TruthRecord { kind, size: 0, pc: first, addr: stride as u64 });
        }
        let mask = if narrow { u32::MAX as u64 } else { u64::MAX };
        pt.rep_pending = Some(RepPending { pc, count_reg: mc.__bindgen_anon_7.xcx as u64, mask });
    })
}

/// Clean call at the instruction after a rep string: how many iterations it made.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs rep_strings_with_large_counts.
pub unsafe extern "C" fn rep_end() {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    if pt.is_null() {
        return;
    }
    let pt = &mut *pt;
    let mc = app_context(dc, dr_mcontext_flags_t::DR_MC_INTEGER);
    if let Some(rep) = pt.rep_pending.take() {
        let count = rep.count_reg.wrapping_sub(mc.__bindgen_anon_7.xcx as u64) & rep.mask;
        push_truth(pt, TruthRecord { kind: TruthKind::RepEnd, size: 0, pc: rep.pc, addr: count });
    }
}

/// Clean call before a gather or scatter: one reference per active element, its address
/// computed by DynamoRIO from the index vector and mask.
///
/// # Safety
/// Only called from a clean call inserted by this client, on an application thread whose PerThread
/// is set up; exercised by tests/collector.rs avx_and_gathers and
/// avx512_gathers_scatters_compress_and_masks.
pub unsafe extern "C" fn gather(pc: u64) {
    let dc = dr_get_current_drcontext();
    let pt = get(dc);
    if pt.is_null() {
        return;
    }
    let pt = &*pt;
    let mut mc = app_context(dc, dr_mcontext_flags_t::DR_MC_ALL);
    with_decoded(dc, pc, |instr| {
        let Some(&(vsib, _)) = memory_operands(instr).first() else { return };
        let size = opnd_size_in_bytes(opnd_get_size(vsib));
        // For a VSIB operand this DynamoRIO takes `index` as the element's lane, not as the
        // count of active elements before it: it answers false for a masked-off lane and
        // for every lane after one (core/ir/x86/instr.c, instr_compute_address_VSIB). So
        // every lane is asked (16 at most: a zmm of dword indices) and false means inactive.
        for lane in 0..16 {
            let mut addr: app_pc = core::ptr::null_mut();
            let mut write: bool_ = 0;
            if instr_compute_address_ex(instr, &mut mc, lane, &mut addr, &mut write) != 0 {
                let kind = if write != 0 { TruthKind::Write } else { TruthKind::Read };
                push_truth(pt, TruthRecord { kind, size, pc, addr: addr as u64 });
            }
        }
    })
}
