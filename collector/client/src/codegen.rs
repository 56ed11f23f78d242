//! Small builders for the instructions the client inserts (the C INSTR_CREATE_* macros are
//! not in the bindings).

use core::ffi::{c_int, c_void};
use dynamorio_sys::*;

/// Where inserted code goes: before `at` in `bb`.
pub struct Emit {
    pub dc: *mut c_void,
    pub bb: *mut instrlist_t,
    pub at: *mut instr_t,
    /// Only [`Emit::new`] makes one, so every method may rely on its contract.
    _made_by_new: (),
}

impl Emit {
    /// Code inserted before `at` in `bb`, built with `dc`.
    ///
    /// # Safety
    /// `dc`, `bb` and `at` are the live drcontext, instruction list and one of its instructions
    /// (or null) of the basic-block or trace event being handled (or of a standalone list built with `dc`),
    /// and the `Emit` is dropped before that event returns; exercised by tests/collector.rs hello,
    /// eight_threads_with_mutexes and standalone::avx512_forms_encode.
    pub unsafe fn new(dc: *mut c_void, bb: *mut instrlist_t, at: *mut instr_t) -> Emit {
        Emit { dc, bb, at, _made_by_new: () }
    }

    /// Inserts before `at`, or appends when `at` is null (building a list outside a block),
    /// with its machine code attached where that does not depend on its place.
    ///
    /// # Safety
    /// `self` was made in a basic-block event (or standalone list) for its own `dc`, `bb` and `at`,
    /// and operands name valid registers; exercised by tests/collector.rs hello,
    /// eight_threads_with_mutexes and standalone::avx512_forms_encode.
    pub unsafe fn ins(&self, i: *mut instr_t) {
        crate::encodings::attach(self.dc, i);
        self.place(i);
    }

    /// Inserts as [`ins`](Self::ins), for an instruction holding one block's own data (its
    /// address, tag or count): its machine code is its own, not the shared cache's
    /// ([`attach_own`](crate::encodings::attach_own)).
    ///
    /// # Safety
    /// As [`ins`](Self::ins).
    pub unsafe fn ins_data(&self, i: *mut instr_t) {
        crate::encodings::attach_own(self.dc, i);
        self.place(i);
    }

    /// Inserts `i` before `at`, or appends it when `at` is null.
    ///
    /// # Safety
    /// As [`ins`](Self::ins).
    unsafe fn place(&self, i: *mut instr_t) {
        if self.at.is_null() {
            instrlist_meta_append(self.bb, i);
        } else {
            instrlist_meta_preinsert(self.bb, self.at, i);
        }
    }

    /// A label to jump to, not yet inserted.
    pub fn label(&self) -> *mut instr_t {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe { instr_create_0dst_0src(self.dc, OP_LABEL as c_int) }
    }

    /// `mov dst, src` (a load).
    pub fn mov_ld(&self, dst: reg_id_t, src: opnd_t) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe { self.ins(instr_create_1dst_1src(self.dc, OP_mov_ld as c_int, reg(dst), src)) };
    }

    /// `mov dst, src` (a store).
    pub fn mov_st(&self, dst: opnd_t, src: opnd_t) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe { self.ins(instr_create_1dst_1src(self.dc, OP_mov_st as c_int, dst, src)) };
    }

    /// `mov dst, src` (a store) of one block's own data (see [`ins_data`](Self::ins_data)).
    pub fn mov_st_data(&self, dst: opnd_t, src: opnd_t) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello and standalone::block_data_is_not_cached.
        unsafe { self.ins_data(instr_create_1dst_1src(self.dc, OP_mov_st as c_int, dst, src)) };
    }

    /// `mov reg, imm64` (an address: machine code of its own, as
    /// [`attach`](crate::encodings::attach) gives every 8-byte immediate).
    pub fn mov_imm64(&self, dst: reg_id_t, v: u64) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe {
            self.ins(instr_create_1dst_1src(
                self.dc,
                OP_mov_imm as c_int,
                reg(dst),
                opnd_create_immed_int(v as i64 as ptr_int_t, OPSZ_8 as opnd_size_t),
            ))
        };
    }

    /// `lea dst, [base + disp]`: advances a pointer without touching flags.
    pub fn add_lea(&self, dst: reg_id_t, disp: i32) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe {
            let m = opnd_create_base_disp(dst, DR_REG_NULL as reg_id_t, 0, disp, OPSZ_0 as opnd_size_t);
            self.ins(instr_create_1dst_1src(self.dc, OP_lea as c_int, reg(dst), m));
        }
    }

    /// `cmp a, b`.
    pub fn cmp(&self, a: opnd_t, b: opnd_t) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe { self.ins(instr_create_0dst_2src(self.dc, OP_cmp as c_int, a, b)) };
    }

    /// `sub a, b`.
    pub fn sub(&self, a: opnd_t, b: opnd_t) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/windows.rs.
        unsafe { self.ins(instr_create_1dst_2src(self.dc, OP_sub as c_int, a, b, a)) };
    }

    /// A conditional jump `op` to `target`.
    ///
    /// # Safety
    /// `target` is a label from [`Emit::label`] inserted in the same list; exercised by tests/collector.rs hello, eight_threads_with_mutexes and standalone::avx512_forms_encode.
    pub unsafe fn jcc(&self, op: u32, target: *mut instr_t) {
        self.ins(instr_create_0dst_1src(self.dc, op as c_int, opnd_create_instr(target)));
    }

    /// `mov dst, imm64` of the address `target` will have in the code cache.
    ///
    /// # Safety
    /// `target` is an instruction of the same list; exercised by tests/collector.rs hello and
    /// python3_from_the_system.
    pub unsafe fn mov_addr(&self, dst: reg_id_t, target: *mut instr_t) {
        self.ins(instr_create_1dst_1src(self.dc, OP_mov_imm as c_int, reg(dst), opnd_create_instr(target)));
    }

    /// `jmp pc` to code outside the block (reachable from the code cache).
    ///
    /// # Safety
    /// `pc` is code DynamoRIO allocated, reachable from its code caches; exercised by
    /// tests/collector.rs hello and python3_from_the_system.
    pub unsafe fn jmp_pc(&self, pc: *mut u8) {
        self.ins(instr_create_0dst_1src(self.dc, OP_jmp as c_int, opnd_create_pc(pc)));
    }

    /// An unmasked EVEX store of a vector register (`vmovdqu64 [m] {k0}, src`), for the
    /// registers and sizes only EVEX encodes.
    pub fn store_vec_evex(&self, dst: opnd_t, src: reg_id_t) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe { self.ins(instr_create_1dst_2src(self.dc, OP_vmovdqu64 as c_int, dst, reg(DR_REG_K0 as reg_id_t), reg(src))) };
    }

    /// A store of raw vector or mask register contents.
    pub fn store_vec(&self, dst: opnd_t, src: reg_id_t, op: u32) {
        // SAFETY: `self` came from `Emit::new`, whose contract makes `dc` and `bb` live;
        // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
        // standalone::avx512_forms_encode.
        unsafe { self.ins(instr_create_1dst_1src(self.dc, op as c_int, dst, reg(src))) };
    }
}

/// A register operand.
pub fn reg(r: reg_id_t) -> opnd_t {
    // SAFETY: a pure operand constructor: it builds an `opnd_t` value and touches no memory;
    // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
    // standalone::avx512_forms_encode.
    unsafe { opnd_create_reg(r) }
}

/// `[base + disp]` of `size` (an OPSZ_ constant).
pub fn mem(base: reg_id_t, disp: i32, size: u32) -> opnd_t {
    // SAFETY: a pure operand constructor: it builds an `opnd_t` value and touches no memory;
    // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
    // standalone::avx512_forms_encode.
    unsafe { opnd_create_base_disp(base, DR_REG_NULL as reg_id_t, 0, disp, size as opnd_size_t) }
}

/// An immediate; it must fit `size` as a signed value.
pub fn imm(v: i64, size: u32) -> opnd_t {
    // SAFETY: a pure operand constructor: it builds an `opnd_t` value and touches no memory;
    // exercised by tests/collector.rs hello, eight_threads_with_mutexes and
    // standalone::avx512_forms_encode.
    unsafe { opnd_create_immed_int(v as ptr_int_t, size as opnd_size_t) }
}

/// A 32-bit immediate from its bit pattern.
pub fn imm32(bits: u32) -> opnd_t {
    imm(bits as i32 as i64, OPSZ_4)
}
