//! Machine code of the client's own instructions, each shape encoded once per process.
//!
//! DynamoRIO keeps the encoding of application instructions but encodes inserted ones
//! afresh each time it lays out a block (for its length, then into the cache), searching its
//! templates each time; with about fifty inserted instructions a block, that search was a
//! third of python3's start-up under `dep record`. Nearly every instruction dep inserts has
//! one of a few hundred shapes (a TLS load, a buffer store at an offset), so its bytes are
//! looked up by shape and attached as the instruction's raw bits, which DynamoRIO copies.
//! Only instructions whose bytes do not depend on where they land are cached: no branches,
//! no labels, no operand that names another instruction or a pc.

use crate::state::Spin;
use core::ffi::c_void;
use dynamorio_sys::*;
use rustc_hash::FxHashMap;
use std::sync::atomic::AtomicBool;

/// Longest x86 instruction.
const MAX_LEN: usize = 15;

/// Words in the longest shape: opcode and operand counts, then at most 7 per operand.
const MAX_KEY: usize = 3 + 7 * 8;

static LOCK: AtomicBool = AtomicBool::new(false);
/// Shapes to their bytes. The bytes are never freed: instructions point at them. Looked up
/// once per inserted instruction (some fifty a block), so the key is built on the stack and
/// hashed with FxHash: allocating it and SipHash were a twentieth of python3's start-up.
static mut CACHE: Option<FxHashMap<Box<[u64]>, &'static [u8]>> = None;

/// Runs `f` on the cache, under its lock.
fn with_cache<R>(f: impl FnOnce(&mut FxHashMap<Box<[u64]>, &'static [u8]>) -> R) -> R {
    let _g = Spin::lock(&LOCK);
    // SAFETY: CACHE is only touched here, under LOCK; exercised by
    // standalone::cached_encodings_are_each_shapes_own.
    f(unsafe { (*core::ptr::addr_of_mut!(CACHE)).get_or_insert_with(FxHashMap::default) })
}

/// A shape under construction: words on the stack.
struct Key {
    words: [u64; MAX_KEY],
    len: usize,
    /// It holds an 8-byte immediate: an address (a block's, an instruction's), one
    /// instruction's own data.
    address: bool,
}

impl Key {
    /// Appends `w`, or None when the shape is longer than any this client makes.
    fn extend<const N: usize>(&mut self, w: [u64; N]) -> Option<()> {
        let end = self.len + N;
        self.words.get_mut(self.len..end)?.copy_from_slice(&w);
        self.len = end;
        Some(())
    }

    fn words(&self) -> &[u64] {
        &self.words[..self.len]
    }
}

/// A key describing an operand exactly, or None for operands whose encoding may depend on
/// the instruction's address (pc, instruction or rip-relative operands).
///
/// # Safety
/// `o` is a valid operand; exercised by tests/collector.rs hello and standalone::avx512_forms_encode.
unsafe fn operand_key(o: opnd_t, key: &mut Key) -> Option<()> {
    if opnd_is_reg(o) != 0 {
        key.extend([1, opnd_get_reg(o) as u64])
    } else if opnd_is_immed_int(o) != 0 {
        key.address |= opnd_get_size(o) == OPSZ_8 as opnd_size_t;
        key.extend([2, opnd_get_immed_int(o) as u64, opnd_get_size(o) as u64])
    } else if opnd_is_base_disp(o) != 0 {
        // Far (segment) operands are base-disp operands too; the segment is in the key.
        let seg = if opnd_is_far_base_disp(o) != 0 { opnd_get_segment(o) as u64 } else { 0 };
        key.extend([
            3,
            seg,
            opnd_get_base(o) as u64,
            opnd_get_index(o) as u64,
            opnd_get_scale(o) as u64,
            opnd_get_disp(o) as i64 as u64,
            opnd_get_size(o) as u64,
        ])
    } else {
        None
    }
}

/// The shape of `i`: opcode and every operand, or None if it must not be cached. Explicit
/// prefixes are not in it (libdynamorio does not export instr_get_prefixes): an
/// instruction with any prefix flag set is not cached. The builders of codegen.rs set
/// none, nor do drreg's spills and restores or a clean call's set-up.
///
/// # Safety
/// `i` is a valid, fully built instruction; exercised by tests/collector.rs hello.
unsafe fn shape(i: *mut instr_t) -> Option<Key> {
    if instr_is_label(i) != 0 || instr_is_cti(i) != 0 || instr_get_prefix_flag(i, uint::MAX) != 0 {
        return None;
    }
    let (ns, nd) = (instr_num_srcs(i), instr_num_dsts(i));
    let mut key = Key { words: [0; MAX_KEY], len: 0, address: false };
    key.extend([instr_get_opcode(i) as u64, ns as u64, nd as u64])?;
    for k in 0..ns {
        operand_key(instr_get_src(i, k as _), &mut key)?;
    }
    for k in 0..nd {
        operand_key(instr_get_dst(i, k as _), &mut key)?;
    }
    Some(key)
}

/// Attaches `i`'s machine code as its raw bits, encoding it only the first time its shape
/// is seen; leaves `i` alone if its shape may not be cached or it does not encode (then
/// DynamoRIO reports the failure where it would have). A shape holding an address (an
/// 8-byte immediate: a `mov reg, imm64`, a clean call's pc argument) is one instruction's
/// own and gets machine code of its own ([`attach_own`]).
///
/// # Safety
/// `dc` is a live drcontext and `i` a valid instruction built with it, not yet encoded;
/// exercised by tests/collector.rs hello, eight_threads_with_mutexes and
/// standalone::avx512_forms_encode.
pub unsafe fn attach(dc: *mut c_void, i: *mut instr_t) {
    let Some(key) = shape(i) else { return };
    if key.address {
        return own(dc, i);
    }
    let found = with_cache(|c| c.get(key.words()).copied());
    let bytes = match found {
        Some(b) => b,
        None => {
            let Some((buf, len)) = encode(dc, i) else { return };
            with_cache(|c| *c.entry(key.words().into()).or_insert_with(|| Box::leak(buf[..len].to_vec().into_boxed_slice())))
        }
    };
    // Raw bits make DynamoRIO copy the bytes, which live as long as the process (not
    // allocated to the instruction, so never freed with it, and no heap lock taken); the
    // operands stay valid for whoever reads them.
    instr_set_raw_bits(i, bytes.as_ptr() as *mut byte, bytes.len() as uint);
    instr_set_operands_valid(i, 1);
}

/// Attaches `i`'s machine code as raw bits of its own, encoded now and not cached: for
/// instructions whose operands hold one block's own data (its address, tag or count). In
/// the cache each would be a shape seen about once (twice where a trace rebuilds the
/// block), so the cache grew with the program's code, a shape or two per block, held
/// forever, and its lookups missed memory: on `python3 -c pass` counting outside windows,
/// the lookups took 4.6% of the run. Leaves `i` alone where [`attach`] would.
///
/// # Safety
/// As [`attach`]; exercised by standalone::block_data_is_not_cached and tests/windows.rs.
pub unsafe fn attach_own(dc: *mut c_void, i: *mut instr_t) {
    if shape(i).is_some() {
        own(dc, i);
    }
}

/// Encodes `i` into raw bits of its own.
///
/// # Safety
/// As [`attach`], and `i`'s shape may be cached (its encoding does not depend on its place).
unsafe fn own(dc: *mut c_void, i: *mut instr_t) {
    let Some((mut buf, len)) = encode(dc, i) else { return };
    // DynamoRIO's own allocation, freed with the instruction; it marks the operands
    // invalid, which they are not.
    instr_allocate_raw_bits(dc, i, len as uint);
    instr_set_raw_bytes(i, buf.as_mut_ptr(), len as uint);
    instr_set_operands_valid(i, 1);
}

/// `i`'s machine code and its length, or None if it does not encode.
///
/// # Safety
/// As [`attach`].
unsafe fn encode(dc: *mut c_void, i: *mut instr_t) -> Option<([u8; MAX_LEN], usize)> {
    let mut buf = [0u8; MAX_LEN];
    let end = instr_encode(dc, i, buf.as_mut_ptr());
    if end.is_null() {
        return None;
    }
    let len = end.offset_from(buf.as_ptr()) as usize;
    (1..=MAX_LEN).contains(&len).then_some((buf, len))
}

/// How many shapes the cache holds (for tests).
#[cfg(test)]
pub fn cached_shapes() -> usize {
    with_cache(|c| c.len())
}

/// Attaches machine code to every inserted instruction of `bb` that has none yet and whose
/// shape may be cached: what drreg (spills, restores, the arithmetic flags' save) and
/// DynamoRIO's clean calls insert, which [`Emit`](crate::codegen::Emit) did not build.
/// Run after every insertion (drmgr's instru2instru phase).
///
/// # Safety
/// `dc` and `bb` are the live drcontext and instruction list of the block or trace event
/// being handled; exercised by tests/collector.rs hello and tests/windows.rs.
pub unsafe fn attach_all(dc: *mut c_void, bb: *mut instrlist_t) {
    let mut i = instrlist_first(bb);
    while !i.is_null() {
        if instr_is_meta(i) != 0 && instr_raw_bits_valid(i) == 0 {
            attach(dc, i);
        }
        i = instr_get_next(i);
    }
}
