//! Code shared by every block instead of repeated in each: the hand-off of full buffers,
//! and the whole entry code of blocks DynamoRIO has not made part of a trace.
//!
//! A clean call is some fifteen instructions DynamoRIO builds, lays out and encodes with
//! every block that holds one; in every block's entry code that was two thirds of the
//! client's cost of building a block (python3 starts 65,000 blocks and traces: 2.3 s of its
//! start-up was one more clean call per block). The check now stores where to come back to
//! in a TLS slot and jumps here; the stub makes the call and jumps back through that slot.
//! The machine state the call sees is the one the inline call saw: the stub changes no
//! register.
//!
//! The entry code itself (buffer checks, H-tag change, L-tag) is some 25 instructions and
//! 9 labels, half of what DynamoRIO builds, mangles and encodes for an instrumented block,
//! and python3 builds 42,000 blocks before it runs its first line. A block outside any trace
//! runs a few times (traces take over hot code, and DynamoRIO builds their blocks again,
//! with the inline entry), so it only hands the entry stub its facts and where to come back
//! to, in four stores of immediates, and jumps there, reserving no register and saving no
//! flags (the stub keeps what it uses). The stub writes exactly the records the inline
//! code does ([`entry_arg`]).

use crate::codegen::*;
use crate::state::*;
use core::ffi::c_void;
use dep_profile::tags::{CTL_SET_HI, MAX_SHORT_H};
use dynamorio_sys::*;
use std::sync::OnceLock;

/// Bytes reserved for each stub (one page; they take 112 and about 400).
const STUB_BYTES: usize = 4096;

/// Each stub's address, once built.
static STUB: OnceLock<usize> = OnceLock::new();
static ENTRY: OnceLock<usize> = OnceLock::new();

/// The stub's address, built with `dc` by the first caller.
///
/// # Safety
/// `dc` is the live drcontext of a basic-block event; exercised by tests/collector.rs hello,
/// eight_threads_with_mutexes and every test whose program fills a buffer (python3_from_the_system).
pub unsafe fn flush_stub(dc: *mut c_void) -> *mut u8 {
    *STUB.get_or_init(|| build(dc) as usize) as *mut u8
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
    place(dc, list, "the buffer hand-off stub")
}

/// The facts a cold block's entry hands the entry stub in [`S_ARG`]: its H-tag (bits 0-31;
/// below 2^31, so the inline code's immediate form), its L-tag (32-47) and, for the truth's
/// block record, its instruction count (48-63). `None` for a block the stub cannot enter:
/// one with a larger H-tag or more instructions.
pub fn entry_arg(addr: u64, insns: usize) -> Option<u64> {
    let hi = addr >> 16;
    (hi < 1 << 31 && insns < 1 << 16).then_some(hi | (addr & 0xffff) << 32 | (insns as u64) << 48)
}

/// The block-entry stub's address, built with `dc` by the first caller.
///
/// # Safety
/// As [`flush_stub`]; exercised by tests/collector.rs hello, python3_from_the_system and every
/// recovery-equals-truth test (each block runs as a cold block first).
pub unsafe fn entry_stub(dc: *mut c_void) -> *mut u8 {
    *ENTRY.get_or_init(|| build_entry(dc) as usize) as *mut u8
}

/// The entry code of `instrument::block_entry`, for any block, reading the block's facts
/// from [`S_ARG`] ([`entry_arg`]). It keeps its two registers and the arithmetic flags in
/// [`S_SPILL`] and restores them, changing no machine state, and jumps back through
/// [`S_ERET`].
///
/// # Safety
/// As [`flush_stub`].
unsafe fn build_entry(dc: *mut c_void) -> *mut u8 {
    use core::ffi::c_int;
    let list = instrlist_create(dc);
    let e = Emit::new(dc, list, core::ptr::null_mut());
    let (rax, rdx) = (DR_REG_RAX as reg_id_t, DR_REG_RDX as reg_id_t);
    let (edx, dx) = (DR_REG_EDX as reg_id_t, DR_REG_DX as reg_id_t);
    let op1 = |op: u32, d: opnd_t, s: opnd_t| e.ins(instr_create_1dst_1src(dc, op as c_int, d, s));
    // Two-operand arithmetic: DynamoRIO lists the destination again as a source.
    let op2 = |op: u32, d: opnd_t, s: opnd_t| e.ins(instr_create_1dst_2src(dc, op as c_int, d, s, d));
    let jmp = |l: *mut instr_t| e.jcc(OP_jmp, l);
    e.mov_st(tls(S_SPILL, 0, OPSZ_8), reg(rax));
    e.mov_st(tls(S_SPILL + 1, 0, OPSZ_8), reg(rdx));
    // The arithmetic flags, as drreg keeps them: SF, ZF, AF, PF and CF in ah, OF in al.
    let al = DR_REG_AL as reg_id_t;
    e.ins(instr_create_1dst_0src(dc, OP_lahf as c_int, reg(DR_REG_AH as reg_id_t)));
    e.ins(instr_create_1dst_0src(dc, OP_seto as c_int, reg(al)));
    e.mov_st(tls(S_SPILL + 2, 0, OPSZ_8), reg(rax));

    // Room: as the inline check, for the most any block needs (its slack).
    let (lflush, lok) = (e.label(), e.label());
    crate::instrument::room_checks(&e, rax, true, lflush, lok);
    e.ins(lflush);
    let lcalled = e.label();
    e.ins(lcalled);
    dr_insert_clean_call_ex(dc, list, lcalled, flush_cc as *mut c_void, dr_cleancall_save_t_DR_CLEANCALL_ALWAYS_OUT_OF_LINE, 0);
    e.mov_ld(rax, tls(S_TAGPTR, 0, OPSZ_8));
    e.ins(lok);

    // H-tag: the records block_entry writes, chosen at run time.
    let (lsame, lset, llong) = (e.label(), e.label(), e.label());
    e.mov_ld(edx, tls(S_ARG, 0, OPSZ_4));
    e.cmp(tls(S_PREVHI, 0, OPSZ_8), reg(rdx));
    e.jcc(OP_jz, lsame);
    // The short form: the H-tag's low 16 bits in 1..=MAX_SHORT_H, its bits above unchanged.
    op1(OP_movzx, reg(edx), tls(S_ARG, 0, OPSZ_2));
    op2(OP_sub, reg(edx), imm32(1));
    e.cmp(reg(edx), imm32(MAX_SHORT_H as u32 - 1));
    e.jcc(OP_jnbe, llong);
    e.mov_ld(edx, tls(S_ARG, 0, OPSZ_4));
    op2(OP_shr, reg(edx), imm(16, OPSZ_1));
    e.cmp(tls(S_PREVHI, 2, OPSZ_4), reg(edx));
    e.jcc(OP_jnz, llong);
    op1(OP_movzx, reg(edx), tls(S_ARG, 0, OPSZ_2));
    op2(OP_shl, reg(edx), imm(16, OPSZ_1));
    e.mov_st(mem(rax, 0, OPSZ_4), reg(edx));
    e.add_lea(rax, 4);
    jmp(lset);
    e.ins(llong);
    e.mov_st(mem(rax, 0, OPSZ_4), imm32((CTL_SET_HI as u32) << 16));
    e.mov_ld(edx, tls(S_ARG, 0, OPSZ_4));
    e.mov_st(mem(rax, 4, OPSZ_4), reg(edx));
    // The H-tag's bits 32-47: none, below 2^31.
    e.mov_st(mem(rax, 8, OPSZ_2), imm(0, OPSZ_2));
    e.add_lea(rax, 10);
    e.ins(lset);
    e.mov_ld(edx, tls(S_ARG, 0, OPSZ_4));
    e.mov_st(tls(S_PREVHI, 0, OPSZ_8), reg(rdx));
    e.ins(lsame);

    // L-tag: two bytes, or four where it is 0 (a 0 word alone is an escape).
    let (lzero, ltagged) = (e.label(), e.label());
    op1(OP_movzx, reg(edx), tls(S_ARG, 4, OPSZ_2));
    e.ins(instr_create_0dst_2src(dc, OP_test as c_int, reg(edx), reg(edx)));
    e.jcc(OP_jz, lzero);
    e.mov_st(mem(rax, 0, OPSZ_2), reg(dx));
    e.add_lea(rax, 2);
    jmp(ltagged);
    e.ins(lzero);
    e.mov_st(mem(rax, 0, OPSZ_4), imm32(0));
    e.add_lea(rax, 4);
    e.ins(ltagged);
    e.mov_st(tls(S_TAGPTR, 0, OPSZ_8), reg(rax));

    if opts().truth {
        // The truth's block record: kind 0, instruction count, start pc.
        e.mov_ld(rax, tls(S_TRUPTR, 0, OPSZ_8));
        e.mov_st(mem(rax, 0, OPSZ_4), imm32(0));
        op1(OP_movzx, reg(edx), tls(S_ARG, 6, OPSZ_2));
        e.mov_st(mem(rax, 4, OPSZ_4), reg(edx));
        e.mov_ld(edx, tls(S_ARG, 0, OPSZ_4));
        op2(OP_shl, reg(rdx), imm(16, OPSZ_1));
        e.mov_ld(dx, tls(S_ARG, 4, OPSZ_2));
        e.mov_st(mem(rax, 8, OPSZ_8), reg(rdx));
        e.mov_st(mem(rax, 16, OPSZ_8), imm32(0));
        e.add_lea(rax, 24);
        e.mov_st(tls(S_TRUPTR, 0, OPSZ_8), reg(rax));
    }
    // OF from al (0x7f + 1 overflows), then the others from ah.
    e.mov_ld(rax, tls(S_SPILL + 2, 0, OPSZ_8));
    op2(OP_add, reg(al), imm(0x7f, OPSZ_1));
    e.ins(instr_create_0dst_1src(dc, OP_sahf as c_int, reg(DR_REG_AH as reg_id_t)));
    e.mov_ld(rax, tls(S_SPILL, 0, OPSZ_8));
    e.mov_ld(rdx, tls(S_SPILL + 1, 0, OPSZ_8));
    e.ins(instr_create_0dst_1src(dc, OP_jmp_ind as c_int, tls(S_ERET, 0, OPSZ_8)));
    place(dc, list, "the block-entry stub")
}

/// Encodes `list` into memory DynamoRIO allocates within a 32-bit jump of its code caches,
/// then makes it read-only, and frees the list.
///
/// # Safety
/// `list` was built with `dc`, the live drcontext of a basic-block event; exercised by
/// tests/collector.rs hello and python3_from_the_system (both stubs run).
unsafe fn place(dc: *mut c_void, list: *mut instrlist_t, what: &str) -> *mut u8 {
    // dr_nonheap_alloc'd memory is reachable from the code caches (its documentation).
    let mem = dr_nonheap_alloc(STUB_BYTES, DR_MEMPROT_READ | DR_MEMPROT_WRITE | DR_MEMPROT_EXEC) as *mut u8;
    let stop = if mem.is_null() { core::ptr::null_mut() } else { instrlist_encode(dc, list, mem, 1) };
    instrlist_clear_and_destroy(dc, list);
    if stop.is_null() || stop.offset_from(mem) as usize > STUB_BYTES {
        say(&format!("internal error: cannot build {what}"));
        dr_abort();
    }
    dr_memory_protect(mem as *mut c_void, STUB_BYTES, DR_MEMPROT_READ | DR_MEMPROT_EXEC);
    mem
}

#[cfg(test)]
mod tests {
    /// The stub reads the H-tag as the dword at byte 0, the L-tag as the word at byte 4 and
    /// the instruction count as the word at byte 6.
    #[test]
    fn entry_arg_packs_what_the_stub_reads() {
        let a = super::entry_arg(0x7f12_3456_789a, 7).unwrap().to_le_bytes();
        assert_eq!(u32::from_le_bytes(a[0..4].try_into().unwrap()), 0x7f12_3456);
        assert_eq!(u16::from_le_bytes(a[4..6].try_into().unwrap()), 0x789a);
        assert_eq!(u16::from_le_bytes(a[6..8].try_into().unwrap()), 7);
        // An H-tag of 2^31 or more, or 65,536 instructions: the inline entry.
        assert!(super::entry_arg(1 << 47, 1).is_none());
        assert!(super::entry_arg(0x7fff_ffff_ffff, 1).is_some());
        assert!(super::entry_arg(0x1000, 1 << 16).is_none());
    }
}
