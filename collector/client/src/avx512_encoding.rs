//! Instrumentation of every AVX-512 memory form, checked on any CPU: DynamoRIO in
//! standalone mode decodes each form and encodes it again, and encodes the stores the
//! client inserts to record a gather's or scatter's index and mask. A wrong operand fails
//! here even where the CPU could never execute the form (collector/README.md).

use crate::codegen::Emit;
use crate::instrument::record_gather;
use core::ffi::c_void;
use dep_profile::semantics::{Access, GatherMask, Special};
use dep_profile::{Machine, Semantics};
use dynamorio_sys::*;
use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};

extern "C" {
    // Exported by libdynamorio, outside the bindings' allowlist.
    fn decode(dc: *mut c_void, pc: *mut u8, instr: *mut instr_t) -> *mut u8;
}

/// Encodings from GNU as, an encoder that shares nothing with iced-x86 or DynamoRIO.
const FORMS: &[(&str, &[u8])] = &[
    ("vpgatherdd (%rax,%zmm2,4),%zmm1{%k1}", &[0x62, 0xf2, 0x7d, 0x49, 0x90, 0x0c, 0x90]),
    ("vpgatherqq (%rax,%zmm2,8),%zmm1{%k1}", &[0x62, 0xf2, 0xfd, 0x49, 0x91, 0x0c, 0xd0]),
    ("vpgatherqd (%rax,%zmm2,4),%ymm1{%k1}", &[0x62, 0xf2, 0x7d, 0x49, 0x91, 0x0c, 0x90]),
    ("vgatherdpd (%rax,%ymm2,8),%zmm1{%k1}", &[0x62, 0xf2, 0xfd, 0x49, 0x92, 0x0c, 0xd0]),
    ("vpgatherdd (%rax,%ymm2,4),%ymm1{%k1}", &[0x62, 0xf2, 0x7d, 0x29, 0x90, 0x0c, 0x90]),
    ("vpgatherdd (%rax,%xmm2,4),%xmm1{%k1}", &[0x62, 0xf2, 0x7d, 0x09, 0x90, 0x0c, 0x90]),
    ("vpgatherdd (%rax,%xmm17,4),%xmm18{%k2}", &[0x62, 0xe2, 0x7d, 0x02, 0x90, 0x14, 0x88]),
    ("vpgatherdq 0x0(%r13,%ymm25,8),%zmm30{%k7}", &[0x62, 0x02, 0xfd, 0x47, 0x90, 0x74, 0xcd, 0x00]),
    ("vpscatterdd %zmm1,(%rax,%zmm2,4){%k1}", &[0x62, 0xf2, 0x7d, 0x49, 0xa0, 0x0c, 0x90]),
    ("vpscatterqq %zmm1,(%rax,%zmm2,8){%k1}", &[0x62, 0xf2, 0xfd, 0x49, 0xa1, 0x0c, 0xd0]),
    ("vscatterdps %ymm21,(%rax,%ymm20,4){%k3}", &[0x62, 0xe2, 0x7d, 0x23, 0xa2, 0x2c, 0xa0]),
    ("vpscatterdd %xmm1,(%rdi,%xmm31,4){%k1}", &[0x62, 0xb2, 0x7d, 0x01, 0xa0, 0x0c, 0xbf]),
    ("vpcompressd %zmm1,(%rdi){%k1}", &[0x62, 0xf2, 0x7d, 0x49, 0x8b, 0x0f]),
    ("vpcompressq %ymm17,(%rdi,%rcx,8){%k2}", &[0x62, 0xe2, 0xfd, 0x2a, 0x8b, 0x0c, 0xcf]),
    ("vpexpandd (%rsi),%zmm1{%k1}{z}", &[0x62, 0xf2, 0x7d, 0xc9, 0x89, 0x0e]),
    ("vpexpandq (%rsi),%xmm20{%k1}", &[0x62, 0xe2, 0xfd, 0x09, 0x89, 0x26]),
    ("vmovdqu32 %zmm1,(%rdi){%k1}", &[0x62, 0xf1, 0x7e, 0x49, 0x7f, 0x0f]),
    ("vmovups %zmm1,0x40(%rdi){%k1}", &[0x62, 0xf1, 0x7c, 0x49, 0x11, 0x4f, 0x01]),
    ("vmovdqu32 (%rsi),%zmm1{%k1}{z}", &[0x62, 0xf1, 0x7e, 0xc9, 0x6f, 0x0e]),
    ("vpgatherdd %ymm3,(%rax,%ymm2,4),%ymm1", &[0xc4, 0xe2, 0x65, 0x90, 0x0c, 0x90]),
    ("vgatherqpd %ymm3,(%rax,%ymm2,8),%ymm1", &[0xc4, 0xe2, 0xe5, 0x93, 0x0c, 0xd0]),
    ("vpgatherqd %xmm3,(%rax,%ymm2,4),%xmm1", &[0xc4, 0xe2, 0x65, 0x91, 0x0c, 0x90]),
];

/// Decodes the bytes DynamoRIO encoded for a client store: `(mnemonic, base, source)`.
fn store_of(bytes: &[u8]) -> (Mnemonic, Register, Register) {
    let i = Decoder::with_ip(64, bytes, 0, DecoderOptions::NONE).decode();
    assert_eq!(i.op0_kind(), OpKind::Memory, "{i}: not a store");
    (i.mnemonic(), i.memory_base(), i.op1_register())
}

#[test]
fn avx512_forms_encode() {
    let mut sem = Semantics::new(Machine::x86_64(2696));
    let mut bad = Vec::new();
    let mut gathers = 0;
    // SAFETY: standalone mode gives a drcontext for decoding and encoding only; every
    // instr_t and instrlist_t made here is destroyed before dr_standalone_exit, and the
    // encode buffer (32 bytes) is larger than any x86 instruction (15).
    unsafe {
        let dc = dr_standalone_init();
        assert!(!dc.is_null());
        let mut buf = [0u8; 32];
        for &(name, bytes) in FORMS {
            let i = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
            assert_eq!(i.len(), bytes.len(), "{name}: iced-x86 decodes another length");
            let insn = sem.insn(&i);
            let mut code = bytes.to_vec();
            let app = instr_create(dc);
            let next = decode(dc, code.as_mut_ptr(), app);
            if next.is_null() || next.offset_from(code.as_ptr()) as usize != bytes.len() {
                bad.push(format!("{name}: DynamoRIO does not decode it"));
                instr_destroy(dc, app);
                continue;
            }
            // Reads and writes memory as the shared semantics say, by DynamoRIO's decoder.
            let reads = insn.refs.iter().any(|r| r.access == Access::Read);
            let writes = insn.refs.iter().any(|r| r.access == Access::Write);
            let dr = (instr_reads_memory(app) != 0, instr_writes_memory(app) != 0);
            if dr != (reads, writes) {
                bad.push(format!("{name}: DynamoRIO says (reads, writes) = {dr:?}, the semantics {:?}", (reads, writes)));
            }
            instr_set_raw_bits_valid(app, 0);
            if instr_encode(dc, app, buf.as_mut_ptr()).is_null() {
                bad.push(format!("{name}: DynamoRIO cannot encode it from its operands"));
            }
            instr_destroy(dc, app);
            let Special::Gather(g) = insn.special else { continue };
            gathers += 1;
            // The client's recording: index store, lea, mask store, lea.
            let bb = instrlist_create(dc);
            record_gather(&Emit { dc, bb, at: core::ptr::null_mut() }, g, DR_REG_RDX as reg_id_t);
            let mut stores = Vec::new();
            let mut k = instrlist_first(bb);
            while !k.is_null() {
                let end = instr_encode(dc, k, buf.as_mut_ptr());
                if end.is_null() {
                    bad.push(format!("{name}: the client's instruction {} does not encode", stores.len()));
                } else if instr_writes_memory(k) != 0 {
                    stores.push(store_of(&buf[..end.offset_from(buf.as_ptr()) as usize]));
                }
                k = instr_get_next(k);
            }
            instrlist_clear_and_destroy(dc, bb);
            let mask = match g.mask {
                GatherMask::K { reg } => reg,
                GatherMask::Vector { reg, .. } => reg,
            };
            let sources: Vec<Register> = stores.iter().map(|s| s.2).collect();
            if sources != [g.index, mask] || stores.iter().any(|s| s.1 != Register::RDX) {
                bad.push(format!("{name}: the client stores {stores:?}, not {:?} then {mask:?} at [rdx]", g.index));
            }
        }
        dr_standalone_exit();
    }
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    let want = FORMS.iter().filter(|(n, _)| n.contains("gather") || n.contains("scatter")).count();
    assert_eq!(gathers, want, "every gather and scatter form is recorded as one");
}
