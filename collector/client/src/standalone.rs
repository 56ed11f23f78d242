//! Checks that need DynamoRIO's decoder and encoder but no running program, in DynamoRIO's
//! standalone mode, so they run on any CPU: the instrumentation of every AVX-512 memory
//! form encodes (where a wrong operand fails even if the CPU could never execute the form,
//! collector/README.md), and the shared semantics agree with DynamoRIO's operand lists.

use crate::codegen::Emit;
use crate::instrument::record_gather;
use crate::observe::decode;
use core::ffi::c_void;
use dep_profile::semantics::{Access, GatherMask, Special};
use dep_profile::{Machine, Semantics};
use dynamorio_sys::*;
use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
use std::sync::Mutex;

/// Runs `f` with DynamoRIO's standalone drcontext; initialised once, used by one test at a
/// time (the process ends without dr_standalone_exit).
fn with_dynamorio<R>(f: impl FnOnce(*mut c_void) -> R) -> R {
    static DC: Mutex<usize> = Mutex::new(0);
    let mut dc = DC.lock().unwrap_or_else(|e| e.into_inner());
    if *dc == 0 {
        // SAFETY: called once, before any other DynamoRIO call of this process.
        *dc = unsafe { dr_standalone_init() } as usize;
        assert!(*dc != 0, "dr_standalone_init failed");
    }
    f(*dc as *mut c_void)
}

/// Decodes `bytes` with DynamoRIO into a new instr_t (the caller destroys it), or None.
///
/// # Safety
/// `dc` must be a live drcontext (the standalone one from `with_dynamorio`); exercised by
/// avx512_forms_encode and semantics_agree_with_dynamorio.
unsafe fn dr_decode(dc: *mut c_void, bytes: &[u8]) -> Option<*mut instr_t> {
    let mut code = bytes.to_vec();
    let app = instr_create(dc);
    let next = decode(dc, code.as_mut_ptr(), app);
    if next.is_null() || next.offset_from(code.as_ptr()) as usize != bytes.len() {
        instr_destroy(dc, app);
        return None;
    }
    Some(app)
}

/// Encodings from GNU as, an encoder that shares nothing with iced-x86 or DynamoRIO.
const AVX512_FORMS: &[(&str, &[u8])] = &[
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

/// The shared semantics of one form, decoded by iced-x86, which must take all its bytes.
fn semantics_of(sem: &mut Semantics, name: &str, bytes: &[u8]) -> dep_profile::semantics::Insn {
    let i = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
    assert_eq!(i.len(), bytes.len(), "{name}: iced-x86 decodes another length");
    sem.insn(&i)
}

#[test]
fn avx512_forms_encode() {
    let mut sem = Semantics::new(Machine::x86_64(2696));
    let mut bad = Vec::new();
    let mut gathers = 0;
    // SAFETY: standalone mode gives a drcontext for decoding and encoding only; every
    // instr_t and instrlist_t made here is destroyed, and the encode buffer (32 bytes) is
    // larger than any x86 instruction (15).
    with_dynamorio(|dc| unsafe {
        let mut buf = [0u8; 32];
        for &(name, bytes) in AVX512_FORMS {
            let insn = semantics_of(&mut sem, name, bytes);
            let Some(app) = dr_decode(dc, bytes) else {
                bad.push(format!("{name}: DynamoRIO does not decode it"));
                continue;
            };
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
            record_gather(&Emit::new(dc, bb, core::ptr::null_mut()), g, DR_REG_RDX as reg_id_t);
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
    });
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    let want = AVX512_FORMS.iter().filter(|(n, _)| n.contains("gather") || n.contains("scatter")).count();
    assert_eq!(gathers, want, "every gather and scatter form is recorded as one");
}

/// Ordinary instruction forms (GNU as encodings) whose references the shared semantics and
/// DynamoRIO's operand lists should agree on.
const FORMS: &[(&str, &[u8])] = &[
    ("push %rax", &[0x50]),
    ("pop %rbx", &[0x5b]),
    ("push 0x8(%rsp)", &[0xff, 0x74, 0x24, 0x08]),
    ("pop 0x8(%rsp)", &[0x8f, 0x44, 0x24, 0x08]),
    ("call *(%rax)", &[0xff, 0x10]),
    ("ret", &[0xc3]),
    ("ret $0x10", &[0xc2, 0x10, 0x00]),
    ("enter $0x10,$0x0", &[0xc8, 0x10, 0x00, 0x00]),
    ("leave", &[0xc9]),
    ("pushf", &[0x9c]),
    ("mov (%rbx),%rax", &[0x48, 0x8b, 0x03]),
    ("mov %rax,0x8(%rsp)", &[0x48, 0x89, 0x44, 0x24, 0x08]),
    ("addq $0x1,(%rax)", &[0x48, 0x83, 0x00, 0x01]),
    ("xlat %ds:(%rbx)", &[0xd7]),
    ("movsb %ds:(%rsi),%es:(%rdi)", &[0xa4]),
    ("rep movsq %ds:(%rsi),%es:(%rdi)", &[0xf3, 0x48, 0xa5]),
    ("rep stos %al,%es:(%rdi)", &[0xf3, 0xaa]),
    ("repz cmpsb %es:(%rdi),%ds:(%rsi)", &[0xf3, 0xa6]),
    ("repnz scas %es:(%rdi),%al", &[0xf2, 0xae]),
    ("rep lods %ds:(%rsi),%eax", &[0xf3, 0xad]),
    ("cmove (%rbx),%rax", &[0x48, 0x0f, 0x44, 0x03]),
    ("cmpxchg %rcx,(%rbx)", &[0x48, 0x0f, 0xb1, 0x0b]),
    ("lock cmpxchg16b (%rdi)", &[0xf0, 0x48, 0x0f, 0xc7, 0x0f]),
    ("xchg %rax,(%rbx)", &[0x48, 0x87, 0x03]),
    ("lock xadd %eax,(%rbx)", &[0xf0, 0x0f, 0xc1, 0x03]),
    ("vmaskmovps %ymm2,%ymm1,(%rax)", &[0xc4, 0xe2, 0x75, 0x2e, 0x10]),
    ("vmaskmovps (%rax),%ymm1,%ymm2", &[0xc4, 0xe2, 0x75, 0x2c, 0x10]),
    ("xsave (%rax)", &[0x0f, 0xae, 0x20]),
    ("xsavec (%rax)", &[0x0f, 0xc7, 0x20]),
    ("xsaveopt (%rax)", &[0x0f, 0xae, 0x30]),
    ("xrstor (%rax)", &[0x0f, 0xae, 0x28]),
    ("fxsave (%rax)", &[0x0f, 0xae, 0x00]),
    ("fxrstor (%rax)", &[0x0f, 0xae, 0x08]),
    ("fldt (%rax)", &[0xdb, 0x28]),
    ("fstpt (%rax)", &[0xdb, 0x38]),
    ("fnstenv (%rax)", &[0xd9, 0x30]),
    ("movdqu (%rax),%xmm0", &[0xf3, 0x0f, 0x6f, 0x00]),
    ("vmovdqu %ymm0,(%rax)", &[0xc5, 0xfe, 0x7f, 0x00]),
    ("maskmovdqu %xmm1,%xmm0", &[0x66, 0x0f, 0xf7, 0xc1]),
    ("movzbl (%rax),%eax", &[0x0f, 0xb6, 0x00]),
    ("movsbq 0x1(%rax),%rax", &[0x48, 0x0f, 0xbe, 0x40, 0x01]),
    ("bt %eax,(%rbx)", &[0x0f, 0xa3, 0x03]),
    ("bts %rax,(%rbx)", &[0x48, 0x0f, 0xab, 0x03]),
    ("cvtsi2sdl (%rax),%xmm0", &[0xf2, 0x0f, 0x2a, 0x00]),
    ("pinsrb $0x1,(%rax),%xmm0", &[0x66, 0x0f, 0x3a, 0x20, 0x00, 0x01]),
    ("pextrw $0x1,%xmm0,(%rax)", &[0x66, 0x0f, 0x3a, 0x15, 0x00, 0x01]),
    ("vbroadcastss (%rax),%ymm0", &[0xc4, 0xe2, 0x7d, 0x18, 0x00]),
    ("vpbroadcastq (%rax),%zmm0", &[0x62, 0xf2, 0xfd, 0x48, 0x59, 0x00]),
    ("vinsertf128 $0x1,(%rax),%ymm0,%ymm0", &[0xc4, 0xe3, 0x7d, 0x18, 0x00, 0x01]),
    ("clflush (%rax)", &[0x0f, 0xae, 0x38]),
    ("prefetcht0 (%rax)", &[0x0f, 0x18, 0x08]),
    ("lea 0x8(%rbx),%rax", &[0x48, 0x8d, 0x43, 0x08]),
    ("nopw (%rax)", &[0x66, 0x0f, 0x1f, 0x00]),
    ("mov %fs:0x28,%rax", &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00]),
    ("sgdt (%rax)", &[0x0f, 0x01, 0x00]),
    ("str (%rax)", &[0x0f, 0x00, 0x08]),
];

/// One memory reference as (write, size): ours per the shared semantics (sizes of xsave
/// areas at the machine's XSAVE size), DynamoRIO's from its operand lists (sources read,
/// destinations written) with its operand sizes.
type Refs = Vec<(bool, u32)>;

/// Where the semantics and DynamoRIO differ, each settled from the Intel SDM and documented
/// in profile/FORMAT.md ("What counts as a reference"): (form, ours, DynamoRIO's).
const DECIDED: &[(&str, &str, &str)] = &[
    // DynamoRIO cannot size XSAVE areas (nor can drutil); DEP gives them the machine's
    // XSAVE size (CPUID 0xD.0 EBX, in the profile). XSAVE and XSAVEOPT also read the
    // header's XSTATE_BV (SDM vol. 1, 13.7), which DynamoRIO does not list.
    ("xsave (%rax)", "[(false, 8), (true, 2696)]", "[(true, 0)]"),
    ("xsavec (%rax)", "[(true, 2696)]", "[(true, 0)]"),
    ("xsaveopt (%rax)", "[(false, 8), (true, 2696)]", "[(true, 0)]"),
    ("xrstor (%rax)", "[(false, 2696)]", "[(false, 0)]"),
    // Cache-control hints move no data and never fault (prefetch) or fault only as a
    // permission check (clflush): not references by DEP's definition.
    ("clflush (%rax)", "[]", "[(false, 1)]"),
    ("prefetcht0 (%rax)", "[]", "[(false, 1)]"),
];

/// DynamoRIO's PREFIX_LOCK (core/ir/instr_api.h), outside the bindings' allowlist.
const PREFIX_LOCK: uint = 0x01;

#[test]
fn semantics_agree_with_dynamorio() {
    let mut sem = Semantics::new(Machine::x86_64(2696));
    let mut found = Vec::new();
    let mut atomics = 0;
    // SAFETY: the standalone drcontext, used for decoding only under with_dynamorio's lock; this
    // test exercises it.
    with_dynamorio(|dc| unsafe {
        for &(name, bytes) in FORMS {
            let insn = semantics_of(&mut sem, name, bytes);
            let mut ours: Refs = insn.refs.iter().map(|r| (r.access == Access::Write, r.size)).collect();
            let app = dr_decode(dc, bytes).unwrap_or_else(|| panic!("{name}: DynamoRIO does not decode it"));
            // Atomic: DynamoRIO's lock prefix, or its xchg with a memory operand.
            let locked =
                instr_get_prefix_flag(app, PREFIX_LOCK) != 0 || instr_get_opcode(app) as u32 == OP_xchg && instr_writes_memory(app) != 0;
            assert_eq!(insn.atomic, locked, "{name}: atomic");
            atomics += locked as usize;
            // DynamoRIO's own judgement of whether it touches memory (lea and multi-byte nops
            // have a memory operand and do not).
            let touches = instr_reads_memory(app) != 0 || instr_writes_memory(app) != 0;
            let mut theirs: Refs = crate::observe::memory_operands(app)
                .into_iter()
                .filter(|_| touches)
                .map(|(o, written)| (written, opnd_size_in_bytes(opnd_get_size(o))))
                .collect();
            instr_destroy(dc, app);
            ours.sort();
            theirs.sort();
            if ours != theirs {
                found.push((name, format!("{ours:?}"), format!("{theirs:?}")));
            }
        }
    });
    assert_eq!(atomics, 3, "the forms hold three atomic ones: lock cmpxchg16b, xchg with memory, lock xadd");
    let decided: Vec<(&str, String, String)> = DECIDED.iter().map(|&(n, o, t)| (n, o.to_string(), t.to_string())).collect();
    assert_eq!(found, decided, "disagreements between the semantics and DynamoRIO, against the documented decisions");
}

/// Registers with DynamoRIO numbers, by our name: the general registers, the vector
/// registers (DynamoRIO's zmm, which overlaps xmm and ymm), the opmask registers.
fn dr_registers() -> Vec<(String, reg_id_t)> {
    use dep_profile::ArchReg;
    let mut v = Vec::new();
    for k in 0..16u32 {
        let gpr = ArchReg::from_iced(Register::RAX + k).expect("a general register").name();
        v.push((gpr, (DR_REG_RAX + k) as reg_id_t));
        v.push((format!("zmm{k}"), (DR_REG_ZMM0 + k) as reg_id_t));
        v.push((format!("zmm{}", k + 16), (DR_REG_ZMM0 + k + 16) as reg_id_t));
    }
    for k in 0..8u32 {
        v.push((format!("k{k}"), (DR_REG_K0 + k) as reg_id_t));
    }
    v
}

/// Where the register sets and DynamoRIO's differ, settled from the Intel SDM: (form,
/// what ours adds or lacks). Reads that only keep a partially written register's other
/// bits are not listed: the comparison allows them (see `Registers` in semantics.rs).
const DECIDED_REGISTERS: &[(&str, &str)] = &[
    // LEAVE sets RSP to RBP, then pops RBP (SDM vol. 2A, LEAVE): the old RSP is no input.
    // DynamoRIO lists RSP as a source of the pop's memory operand.
    ("leave", "only DynamoRIO reads rsp"),
    // An EVEX opmask field of 0 means no masking (SDM vol. 1, 15.6.1): k0 is not read.
    // DynamoRIO lists k0 as a source of every unmasked EVEX instruction.
    ("vpbroadcastq (%rax),%zmm0", "only DynamoRIO reads k0"),
];

/// The register sets of the shared semantics against DynamoRIO's `instr_reads_from_reg` and
/// `instr_writes_to_reg` (conditional operands included) for every form of the tables
/// above: the same written registers; every register DynamoRIO reads is read; ours reads
/// more only where a write keeps part of the old value (so the register is also written).
#[test]
fn register_sets_agree_with_dynamorio() {
    let mut sem = Semantics::new(Machine::x86_64(2696));
    let regs = dr_registers();
    let mut found: Vec<(String, String)> = Vec::new();
    let mut compared = 0;
    // SAFETY: the standalone drcontext, used for decoding only under with_dynamorio's lock; this
    // test exercises it.
    with_dynamorio(|dc| unsafe {
        for &(name, bytes) in FORMS.iter().chain(AVX512_FORMS) {
            let insn = semantics_of(&mut sem, name, bytes);
            let app = dr_decode(dc, bytes).unwrap_or_else(|| panic!("{name}: DynamoRIO does not decode it"));
            let all = _dr_opnd_query_flags_t_DR_QUERY_INCLUDE_ALL;
            let ours = |set: dep_profile::ArchSet| set.iter().map(|a| a.name()).collect::<std::collections::BTreeSet<_>>();
            let (our_reads, our_writes) = (ours(insn.regs.reads), ours(insn.regs.writes));
            let mut diffs = Vec::new();
            for (n, r) in &regs {
                let (dr_read, dr_write) = (instr_reads_from_reg(app, *r, all) != 0, instr_writes_to_reg(app, *r, all) != 0);
                let (read, write) = (our_reads.contains(n), our_writes.contains(n));
                if write != dr_write {
                    diffs.push(format!("{} writes {n}", if write { "only ours" } else { "only DynamoRIO" }));
                }
                if dr_read && !read {
                    diffs.push(format!("only DynamoRIO reads {n}"));
                }
                if read && !dr_read && !write {
                    diffs.push(format!("only ours reads {n}"));
                }
            }
            compared += 1;
            instr_destroy(dc, app);
            if !diffs.is_empty() {
                found.push((name.to_string(), diffs.join(", ")));
            }
        }
    });
    assert!(compared >= 75, "only {compared} forms");
    let decided: Vec<(String, String)> = DECIDED_REGISTERS.iter().map(|&(n, d)| (n.to_string(), d.to_string())).collect();
    assert_eq!(found, decided, "register sets disagree with DynamoRIO's, against the documented decisions");
}

/// `k` encoded by DynamoRIO (from its cached bytes if it has them), as iced-x86 decodes it.
///
/// # Safety
/// `dc` is a standalone drcontext and `k` a valid instruction built with it; the buffer (32
/// bytes) is larger than any x86 instruction.
unsafe fn encoded_text(dc: *mut c_void, k: *mut instr_t) -> String {
    let mut buf = [0u8; 32];
    let end = instr_encode(dc, k, buf.as_mut_ptr());
    assert!(!end.is_null());
    let n = end.offset_from(buf.as_ptr()) as usize;
    let i = Decoder::with_ip(64, &buf[..n], 0, DecoderOptions::NONE).decode();
    assert_eq!(i.len(), n);
    format!("{i}")
}

/// What drreg and DynamoRIO's clean calls insert gets machine code too, after the fact
/// (`attach_all`), built as they build it (not through `Emit`): every inserted
/// instruction with a cacheable shape gets bytes that decode (by iced-x86) to what was
/// built; a locked `add`, whose shape is an unlocked one's that is cached already, keeps
/// its lock; branches, labels and the application's own instructions are left alone.
#[test]
fn inserted_instructions_get_machine_code_after_the_fact() {
    use crate::codegen::{imm, mem, reg};
    let (rax, rcx, rdx, al) = (DR_REG_RAX as reg_id_t, DR_REG_RCX as reg_id_t, DR_REG_RDX as reg_id_t, DR_REG_AL as reg_id_t);
    // SAFETY: standalone mode gives a drcontext for building and encoding instructions, and
    // the list is destroyed.
    with_dynamorio(|dc| unsafe {
        let bb = instrlist_create(dc);
        let meta = |i: *mut instr_t| instrlist_meta_append(bb, i);
        let gs = opnd_create_far_base_disp(
            DR_SEG_GS as reg_id_t,
            DR_REG_NULL as reg_id_t,
            DR_REG_NULL as reg_id_t,
            0,
            0x20,
            OPSZ_8 as opnd_size_t,
        );
        meta(instr_create_1dst_1src(dc, OP_mov_st as i32, gs, reg(rax)));
        meta(instr_create_1dst_0src(dc, OP_seto as i32, reg(al)));
        meta(instr_create_1dst_2src(dc, OP_add as i32, reg(al), imm(0x7f, OPSZ_1), reg(al)));
        meta(instr_create_1dst_2src(dc, OP_add as i32, mem(rax, 8, OPSZ_8), imm(1, OPSZ_1), mem(rax, 8, OPSZ_8)));
        let locked = instr_create_1dst_2src(dc, OP_add as i32, mem(rax, 8, OPSZ_8), imm(1, OPSZ_1), mem(rax, 8, OPSZ_8));
        // PREFIX_LOCK (core/ir/instr_api.h).
        meta(instr_set_prefix_flag(locked, 0x01));
        let l = instr_create_0dst_0src(dc, OP_LABEL as i32);
        meta(instr_create_0dst_1src(dc, OP_jmp as i32, opnd_create_instr(l)));
        meta(l);
        instrlist_append(bb, instr_create_1dst_1src(dc, OP_mov_ld as i32, reg(rcx), reg(rdx)));
        crate::encodings::attach_all(dc, bb);

        let want = ["mov gs:[20h],rax", "seto al", "add al,7Fh", "add qword ptr [rax+8],1", "lock add qword ptr [rax+8],1"];
        let (mut got, mut k) = (Vec::new(), instrlist_first(bb));
        while !k.is_null() {
            let raw = instr_raw_bits_valid(k) != 0;
            if instr_is_cti(k) != 0 || instr_is_label(k) != 0 || instr_is_app(k) != 0 {
                assert!(!raw, "instruction {} got cached bytes", got.len());
            } else {
                // Only the locked add, whose prefix is not in a shape, is encoded afresh.
                assert_eq!(raw, k != locked, "instruction {}", got.len());
                got.push(encoded_text(dc, k));
            }
            k = instr_get_next(k);
        }
        instrlist_clear_and_destroy(dc, bb);
        assert_eq!(got, want);
    });
}

/// The encoding cache (encodings.rs) attaches to each instruction the bytes of its own
/// shape: built twice, the second time from the cache, every instruction decodes (by
/// iced-x86, which shares nothing with DynamoRIO's encoder) to what the builder was asked
/// for, and shapes that differ only in a register, a displacement, a size or an immediate
/// get bytes of their own; a branch keeps no cached bytes.
#[test]
fn cached_encodings_are_each_shapes_own() {
    use crate::codegen::{imm, mem, reg};
    let (rax, rcx, rdx) = (DR_REG_RAX as reg_id_t, DR_REG_RCX as reg_id_t, DR_REG_RDX as reg_id_t);
    // SAFETY: standalone mode gives a drcontext for building and encoding instructions, and the
    // lists are destroyed.
    with_dynamorio(|dc| unsafe {
        let build = |bb: *mut instrlist_t| {
            let e = Emit::new(dc, bb, core::ptr::null_mut());
            e.mov_ld(rcx, mem(rax, 8, OPSZ_8));
            e.mov_ld(rdx, mem(rax, 8, OPSZ_8));
            e.mov_ld(rcx, mem(rax, 16, OPSZ_8));
            e.mov_st(mem(rcx, 0, OPSZ_2), imm(0x1234, OPSZ_2));
            e.mov_st(mem(rcx, 0, OPSZ_4), imm(0x1234, OPSZ_4));
            e.mov_st(mem(rcx, 0, OPSZ_4), imm(0x4321, OPSZ_4));
            e.add_lea(rcx, 2);
            e.add_lea(rcx, 10);
            e.cmp(reg(rcx), mem(rdx, 0, OPSZ_8));
            e.mov_imm64(rdx, 0x7f00_1234_5678);
            let l = e.label();
            e.jcc(OP_jb, l);
            e.ins(l);
        };
        let want = [
            "mov rcx,[rax+8]",
            "mov rdx,[rax+8]",
            "mov rcx,[rax+10h]",
            "mov word ptr [rcx],1234h",
            "mov dword ptr [rcx],1234h",
            "mov dword ptr [rcx],4321h",
            "lea rcx,[rcx+2]",
            "lea rcx,[rcx+0Ah]",
            "cmp rcx,[rdx]",
            "mov rdx,7F0012345678h",
        ];
        for round in 0..2 {
            let bb = instrlist_create(dc);
            build(bb);
            let mut k = instrlist_first(bb);
            let mut got = Vec::new();
            while !k.is_null() {
                if instr_is_cti(k) != 0 {
                    assert_eq!(instr_raw_bits_valid(k), 0, "round {round}: a branch has cached bytes");
                } else if instr_is_label(k) == 0 {
                    assert_ne!(instr_raw_bits_valid(k), 0, "round {round}: instruction {} has no cached bytes", got.len());
                    got.push(encoded_text(dc, k));
                }
                k = instr_get_next(k);
            }
            instrlist_clear_and_destroy(dc, bb);
            assert_eq!(got, want, "round {round}");
        }
    });
}

/// A block's own data (its L-tag, a window check's address and count, a truth record's
/// pc) gets machine code of its own and leaves the shape cache as it was: cached, every
/// block would add shapes that are never looked up again.
#[test]
fn block_data_is_not_cached() {
    use crate::codegen::{imm, mem};
    let (rax, rcx) = (DR_REG_RAX as reg_id_t, DR_REG_RCX as reg_id_t);
    // SAFETY: standalone mode gives a drcontext for building and encoding instructions, and the
    // list is destroyed.
    with_dynamorio(|dc| unsafe {
        let before = crate::encodings::cached_shapes();
        let bb = instrlist_create(dc);
        let e = Emit::new(dc, bb, core::ptr::null_mut());
        let mut want = Vec::new();
        for k in 0..40u64 {
            let pc = 0x7f12_3456_0000 + k * 0x31;
            e.mov_imm64(rcx, pc);
            want.push(format!("mov rcx,{pc:X}h"));
            e.mov_st_data(mem(rax, 0, OPSZ_2), imm(0x1000 + k as i64, OPSZ_2));
            want.push(format!("mov word ptr [rax],{:X}h", 0x1000 + k));
            let m =
                opnd_create_base_disp(DR_REG_NULL as reg_id_t, DR_REG_NULL as reg_id_t, 0, 0x5000_0000 + k as i32, OPSZ_4 as opnd_size_t);
            e.ins_data(instr_create_0dst_1src(dc, OP_nop_modrm as core::ffi::c_int, m));
            want.push(format!("nop [{:X}h]", 0x5000_0000 + k));
        }
        let mut got = Vec::new();
        let mut k = instrlist_first(bb);
        while !k.is_null() {
            assert_ne!(instr_raw_bits_valid(k), 0, "instruction {} has no machine code", got.len());
            got.push(encoded_text(dc, k));
            k = instr_get_next(k);
        }
        instrlist_clear_and_destroy(dc, bb);
        assert_eq!(got, want);
        assert_eq!(crate::encodings::cached_shapes(), before, "block data went into the shape cache");
    });
}

/// The no-op that turns DynamoRIO's AVX-512 state saving on (lib.rs avx512_state_kept) is
/// chosen for every CPU, and both forms encode (on any CPU: encoding needs no AVX-512) to a
/// copy of k7 to itself, as iced-x86 decodes them.
#[test]
fn avx512_marker_is_a_kmov_of_k7() {
    use crate::{avx512_marker, avx512_marker_op};
    assert_eq!(avx512_marker_op(true, true), Some(OP_kmovq));
    assert_eq!(avx512_marker_op(false, true), Some(OP_kmovw));
    assert_eq!(avx512_marker_op(false, false), None);
    // SAFETY: standalone mode gives a drcontext for building and encoding instructions;
    // each instruction is destroyed.
    with_dynamorio(|dc| unsafe {
        for (op, want) in [(OP_kmovq, "kmovq k7,k7"), (OP_kmovw, "kmovw k7,k7")] {
            let i = avx512_marker(dc, op);
            assert_eq!(encoded_text(dc, i), want);
            instr_destroy(dc, i);
        }
    });
}

/// The code `emit` puts in a new list, then a `nop` where the block goes on after it, as
/// DynamoRIO encodes it into a buffer (256 bytes, the rest zero) and iced-x86 decodes it
/// there; the list, for the caller to destroy.
///
/// # Safety
/// `dc` is standalone DynamoRIO's; `emit` only inserts through the `Emit` it is given.
unsafe fn check_code(dc: *mut c_void, emit: impl FnOnce(&Emit)) -> (Vec<u8>, Vec<iced_x86::Instruction>, *mut instrlist_t) {
    let bb = instrlist_create(dc);
    emit(&Emit::new(dc, bb, core::ptr::null_mut()));
    instrlist_meta_append(bb, instr_create_0dst_0src(dc, OP_nop as core::ffi::c_int));
    let mut buf = vec![0u8; 256];
    let end = instrlist_encode(dc, bb, buf.as_mut_ptr(), 1);
    assert!(!end.is_null());
    let n = end.offset_from(buf.as_ptr()) as usize;
    let got = Decoder::with_ip(64, &buf[..n], buf.as_ptr() as u64, DecoderOptions::NONE).into_iter().collect();
    (buf, got, bb)
}

/// A window check (window.rs entry_check) encodes to `sub` of the count slot, `jnle` over
/// the check, `ud2` and two `nop`s holding the block's address and count, as iced-x86
/// decodes DynamoRIO's bytes; `check_at` reads back what the signal event needs from them,
/// and refuses a `ud2` that is not followed by both. The load form (load_check) counts
/// through a register with no instruction that writes a flag, and loads from the region's
/// address less one plus the count; it is a check only with the region where it says.
#[test]
fn window_check_decodes() {
    use crate::window::{check_at, decode_check, entry_check, Check};
    // SAFETY: standalone mode gives a drcontext for building, encoding and decoding; the
    // lists are destroyed, and `check_at` reads only inside the buffers (each padded well
    // past the code it decodes).
    with_dynamorio(|dc| unsafe {
        for (insns, recorded, pc) in
            [(7u32, true, 0x7f00_1234_5678u64), (1, false, 0x40_1000), ((1 << 31) - 1, false, 0xffff_ffff_8000_0000)]
        {
            let (mut buf, got, bb) = check_code(dc, |e| entry_check(e, insns, recorded, pc));
            let base = buf.as_ptr() as u64;
            let names: Vec<Mnemonic> = got.iter().map(|i| i.mnemonic()).collect();
            assert_eq!(names, [Mnemonic::Sub, Mnemonic::Jg, Mnemonic::Ud2, Mnemonic::Nop, Mnemonic::Nop, Mnemonic::Nop]);
            assert_eq!(got[1].near_branch_target(), got[5].ip(), "jnle goes past the check");
            assert_eq!(got[3].memory_displacement64() as u32, pc as u32);
            assert_eq!(got[4].memory_displacement64() as u32, insns | (recorded as u32) << 31);
            let c = check_at(dc, buf.as_mut_ptr().add((got[2].ip() - base) as usize));
            assert_eq!(c, Some(Check { pc_low: pc as u32, insns, recorded, next: got[5].ip(), sig: libc::SIGILL }));
            // The same bytes from the sub or the second nop on are no check.
            assert_eq!(check_at(dc, buf.as_mut_ptr()), None);
            assert_eq!(check_at(dc, buf.as_mut_ptr().add((got[4].ip() - base) as usize)), None);
            instrlist_clear_and_destroy(dc, bb);
        }
        // The load form, with the region at `region`: the count through rdx and `lea`, a
        // load from `[rdx + region - 1]` into rdx, the same data.
        let region = 0x4000_0000u64;
        for (insns, pc) in [(5u32, 0x7f00_1234_5678u64), ((1 << 31) - 1, 0x40_1000)] {
            let r = DR_REG_RDX as reg_id_t;
            let (mut buf, got, bb) = check_code(dc, |e| crate::window::load_check(e, r, region, insns, false, pc));
            let base = buf.as_ptr() as u64;
            let names: Vec<Mnemonic> = got.iter().map(|i| i.mnemonic()).collect();
            assert_eq!(names, [Mnemonic::Mov, Mnemonic::Lea, Mnemonic::Mov, Mnemonic::Mov, Mnemonic::Nop, Mnemonic::Nop, Mnemonic::Nop]);
            // The slot is read and written back, the count goes down without flags, and the
            // load reads region - 1 + count into its own base.
            assert_eq!(got[0].op0_register(), Register::RDX);
            assert_eq!((got[1].memory_base(), got[1].memory_displacement64() as i64), (Register::RDX, -(insns as i64)));
            assert_eq!(got[2].memory_displacement64(), got[0].memory_displacement64());
            assert_eq!(
                (got[3].op0_register(), got[3].memory_base(), got[3].memory_index()),
                (Register::RDX, Register::RDX, Register::None)
            );
            assert_eq!(got[3].memory_displacement64(), region - 1);
            assert_eq!(iced_x86::RflagsBits::NONE, got[..4].iter().fold(0, |a, i| a | i.rflags_modified()));
            assert_eq!(got[4].memory_displacement64() as u32, pc as u32);
            assert_eq!(got[5].memory_displacement64() as u32, insns);
            let at = buf.as_mut_ptr().add((got[3].ip() - base) as usize);
            let c = decode_check(dc, at, region);
            assert_eq!(c, Some(Check { pc_low: pc as u32, insns, recorded: false, next: got[6].ip(), sig: libc::SIGSEGV }));
            // With the region elsewhere, or none, the load is no check.
            assert_eq!(decode_check(dc, at, region + 4096), None);
            assert_eq!(decode_check(dc, at, 0), None);
            instrlist_clear_and_destroy(dc, bb);
        }
        // A ud2 followed by one-byte nops, by a nop with a base register, and by one data
        // nop only: none is a check.
        let not_checks: [&[u8]; 3] = [
            &[0x0f, 0x0b, 0x90, 0x90],
            &[0x0f, 0x0b, 0x0f, 0x1f, 0x40, 0x08, 0x0f, 0x1f, 0x40, 0x08],
            &[0x0f, 0x0b, 0x0f, 0x1f, 0x04, 0x25, 0x78, 0x56, 0x34, 0x12, 0x90],
        ];
        for bytes in not_checks {
            let mut buf = vec![0xccu8; 64];
            buf[..bytes.len()].copy_from_slice(bytes);
            assert_eq!(check_at(dc, buf.as_mut_ptr()), None, "{bytes:02x?}");
        }
    });
}
