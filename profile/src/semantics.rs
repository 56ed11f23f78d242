//! What each instruction does, in the terms DEP needs: the memory references it makes (and
//! which registers form their addresses) and the registers it writes.
//!
//! This is the single definition both the collector (what to record) and the recoverer
//! (what to consume) follow. Decisions taken here, documented in `profile/FORMAT.md`:
//! - references are listed reads first, then writes; a read-modify-write operand is both;
//! - `prefetch*`, `clflush*`, `clwb`, `cldemote`, `lea`, `nop` and other operands that do
//!   not access data are not references (they neither fault nor move data);
//! - `cmov` with a memory source always reads (the hardware reads whatever the condition);
//! - masked vector accesses (vmaskmov, AVX-512 `{k}`) are one reference of the whole
//!   operand, flagged conditional; gathers and scatters are one reference per active
//!   element, made exact by recording the index vector and the mask in DEP_m;
//! - a rep string instruction records its pointer register once more after it executes,
//!   which fixes the iteration count and direction; every iteration is a reference;
//! - `xsave`/`xrstor` family accesses have the size of the machine's XSAVE area;
//! - a write to any part of a register (al, ax, eax) expires the whole register; adding a
//!   constant to a full-width register (push, pop, call, ret, `add rsp, 8`, `inc`, `lea
//!   r, [r+d]`) keeps it current, the recoverer applies the same constant; in 64-bit code
//!   from format 6, a whole 32- or 64-bit register computed from registers and constants
//!   (`mov`, `movsxd`, `add eax, 1`, `lea`, ...) is a derivation (`derive.rs`);
//! - `syscall` (and `int 0x80`) expires rax, rcx, r11 and both segment bases.

use crate::archregs::{ArchReg, ArchSet};
use crate::regs::{Reg, RegSet};
use crate::Width;
use iced_x86::{Code, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};

/// Machine facts the semantics depend on, stored in the profile's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Address width of the profiled program.
    pub width: Width,
    /// Bytes of the XSAVE area for the enabled state components (CPUID 0xD.0 EBX).
    pub xsave_size: u32,
    /// Registers computed from current ones stay current ([`crate::derive`]; format 6 on,
    /// 64-bit code only). Older profiles were recorded without.
    pub derive: bool,
    /// A register computed from one whose status only its shadow knows takes that status
    /// ([`crate::blocks::Step::copies`]; format 9 on).
    pub roots: bool,
}

impl Machine {
    /// A 64-bit machine with the given XSAVE area size.
    pub fn x86_64(xsave_size: u32) -> Self {
        Machine { width: Width::W64, xsave_size, derive: true, roots: true }
    }
}

/// A register as an address component: its value truncated to `bits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrReg {
    pub reg: Reg,
    pub bits: u8,
}

impl AddrReg {
    #[inline]
    fn value(self, regs: &[u64]) -> u64 {
        regs[self.reg.index()] & crate::derive::mask(self.bits)
    }
}

/// An address expression: `seg + base + index * scale + disp`, truncated to `addr_bits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    /// FS or GS base; other segments have base 0 on Linux.
    pub seg: Option<Reg>,
    pub base: Option<AddrReg>,
    pub index: Option<AddrReg>,
    pub scale: u8,
    /// Displacement; for RIP-relative operands, the absolute address.
    pub disp: u64,
    /// 64, or 32 under an address-size prefix or in 32-bit code.
    pub addr_bits: u8,
}

impl Address {
    /// The registers this address needs.
    pub fn regs(&self) -> RegSet {
        let mut s = RegSet::EMPTY;
        for r in [self.seg, self.base.map(|b| b.reg), self.index.map(|i| i.reg)].into_iter().flatten() {
            s.insert(r);
        }
        s
    }

    /// The effective address given the values of all registers (indexed by [`Reg::index`]).
    #[inline]
    pub fn eval(&self, regs: &[u64]) -> u64 {
        let mut ea = self.disp;
        if let Some(b) = self.base {
            ea = ea.wrapping_add(b.value(regs));
        }
        if let Some(i) = self.index {
            ea = ea.wrapping_add(i.value(regs).wrapping_mul(self.scale as u64));
        }
        ea &= crate::derive::mask(self.addr_bits);
        match self.seg {
            Some(s) => ea.wrapping_add(regs[s.index()]),
            None => ea,
        }
    }
}

/// Read or write (0 and 1: compiled recovery code stores them as bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Access {
    Read = 0,
    Write = 1,
}

/// One memory reference of an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRef {
    pub addr: Address,
    pub size: u32,
    pub access: Access,
    /// The access may not happen (masked, conditional write); it is still reported.
    pub conditional: bool,
}

/// How an instruction changes a value register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegEffect {
    /// The value becomes unknown.
    Expire(Reg),
    /// The value changes by a constant (wrapping).
    Add(Reg, i64),
    /// The value is computed from registers and constants.
    Derive(crate::derive::Derive),
}

/// A rep-prefixed string instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepString {
    /// Bytes per element (1, 2, 4, 8).
    pub elem: u32,
    /// Register recorded again after the instruction; its change gives count and direction.
    pub post: Reg,
    /// The other pointer register (movs, cmps), advanced by the same amount.
    pub other: Option<Reg>,
}

/// Where a gather's or scatter's mask comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatherMask {
    /// An AVX2 vector mask: element i is active when its sign bit is set.
    Vector { reg: Register, bytes: u8 },
    /// An AVX-512 opmask register: element i is active when bit i is set.
    K { reg: Register },
}

/// A VSIB gather or scatter: one reference per active element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gather {
    /// The index vector register; its raw bytes are recorded in DEP_m.
    pub index: Register,
    /// Size of the index vector in bytes (16, 32, 64).
    pub index_bytes: u8,
    /// Bytes per index (4 or 8).
    pub index_elem: u8,
    /// The mask, recorded raw after the index vector.
    pub mask: GatherMask,
}

impl Gather {
    /// Number of elements.
    pub fn count(&self) -> usize {
        (self.index_bytes / self.index_elem) as usize
    }

    /// Raw bytes of the mask as recorded.
    pub fn mask_bytes(&self) -> usize {
        match self.mask {
            GatherMask::Vector { bytes, .. } => bytes as usize,
            GatherMask::K { .. } => 8,
        }
    }

    /// Index `i` (sign-extended) from the recorded index vector bytes.
    pub fn index_value(&self, raw: &[u8], i: usize) -> u64 {
        let e = self.index_elem as usize;
        let b = &raw[i * e..i * e + e];
        if e == 4 {
            i32::from_le_bytes(b.try_into().unwrap()) as i64 as u64
        } else {
            u64::from_le_bytes(b.try_into().unwrap())
        }
    }

    /// Whether element `i` is active given the recorded mask bytes; `elem` is the data size.
    pub fn active(&self, mask: &[u8], i: usize, elem: u32) -> bool {
        match self.mask {
            GatherMask::Vector { .. } => {
                let top = (i + 1) * elem as usize - 1;
                mask.get(top).is_some_and(|b| b & 0x80 != 0)
            }
            GatherMask::K { .. } => mask.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 != 0),
        }
    }
}

/// Extra recording an instruction needs beyond its address registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    None,
    Rep(RepString),
    Gather(Gather),
}

/// Control flow at the end of an instruction, for exporters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Next,
    /// Direct jump; `conditional` for jcc, loop, jrcxz.
    Jump {
        target: u64,
        conditional: bool,
    },
    IndirectJump,
    Call {
        target: u64,
    },
    IndirectCall,
    Return,
    /// syscall, int, sysenter.
    Syscall,
    /// Anything else that leaves the block (ud2, int3, hlt, undecodable bytes).
    Other,
}

/// Everything DEP needs to know about one instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Insn {
    pub pc: u64,
    pub len: u8,
    /// Memory references: reads then writes (for rep strings, those of one iteration).
    pub refs: Vec<MemRef>,
    /// Registers the references' addresses need (the paper's `used` bits).
    pub used: RegSet,
    /// Register changes, applied after the references.
    pub effects: Vec<RegEffect>,
    pub special: Special,
    pub flow: Flow,
    pub mnemonic: Mnemonic,
    /// Atomic read-modify-write: a `lock` prefix, or `xchg` with a memory operand (locked
    /// by the hardware without one).
    pub atomic: bool,
    /// Every register the instruction reads and writes, for dependence analyses.
    pub regs: Registers,
    /// The same reads and writes to the byte, for analyses that follow partial registers.
    pub bytes: RegBytes,
}

/// The registers and flags an instruction reads and writes, explicit and implicit operands
/// alike (address registers are reads), from iced-x86's `InstructionInfo`, with the rules
/// iced leaves to its user for data dependence:
/// - a write that keeps part of the old value also reads the register: an 8- or 16-bit
///   general register (a 32-bit one zero-extends into the whole), an xmm register written
///   by a legacy SSE encoding (VEX and EVEX zero the upper bits), an AVX-512 merge-masked
///   destination, and any conditional write (cmov, masked moves);
/// - `syscall` (and `int 0x80`, `sysenter`) reads the kernel's argument registers (rax, rdi,
///   rsi, rdx, r10, r8, r9) and writes its result register rax, which iced does not model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub reads: ArchSet,
    pub writes: ArchSet,
    /// RFLAGS bits read (iced-x86 `RflagsBits`).
    pub flags_read: u32,
    /// RFLAGS bits written, set, cleared or left undefined.
    pub flags_written: u32,
}

/// Bytes `lo..hi` of a full register (byte 0 the least significant; ah is `1..2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub reg: ArchReg,
    pub lo: u8,
    pub hi: u8,
}

/// The register bytes an instruction reads and the ones it defines, from the same operands
/// as [`Registers`] but without its partial-write rule: a write defines exactly the bytes it
/// leaves with a new value, so `mov al, 1` defines byte 0 of rax and reads nothing, and the
/// rest of rax keeps its earlier definition. Writes that zero-extend define the whole
/// register: a 32-bit general register all 8 bytes, a VEX- or EVEX-encoded xmm or ymm all
/// 64 bytes of its zmm. Registers other than general and vector ones are defined whole.
/// A write that may keep old bytes in a pattern the encoding does not fix (a conditional
/// write, a merge-masked vector destination) reads the register whole and defines it whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegBytes {
    /// Bytes read, one range per register, in [`ArchReg`] order.
    pub reads: Vec<ByteRange>,
    /// Bytes defined, one range per register, in [`ArchReg`] order.
    pub defs: Vec<ByteRange>,
    /// The register whose new value is the instruction's result: its first operand when
    /// that is a general register written whole (32 or 64 bits), else None.
    pub result: Option<ArchReg>,
}

/// Bytes a register operand covers within its full register, and the bytes a write to it
/// defines (`legacy`: a legacy SSE encoding, which leaves the upper bytes of the zmm).
fn operand_bytes(r: Register, legacy: bool) -> ((u8, u8), (u8, u8)) {
    use Register as R;
    if r.is_gpr8() {
        let hi = matches!(r, R::AH | R::CH | R::DH | R::BH);
        let b = if hi { (1, 2) } else { (0, 1) };
        (b, b)
    } else if r.is_gpr16() {
        ((0, 2), (0, 2))
    } else if r.is_gpr32() {
        ((0, 4), (0, 8))
    } else if r.is_gpr64() {
        ((0, 8), (0, 8))
    } else if r.is_xmm() {
        ((0, 16), if legacy { (0, 16) } else { (0, 64) })
    } else if r.is_ymm() {
        ((0, 32), (0, 64))
    } else if r.is_zmm() {
        ((0, 64), (0, 64))
    } else {
        ((0, 1), (0, 1))
    }
}

/// The byte-level reads and definitions of an instruction (see [`RegBytes`]).
fn register_bytes(i: &Instruction, info: &iced_x86::InstructionInfo) -> RegBytes {
    let legacy = i.encoding() == iced_x86::EncodingKind::Legacy;
    let merge_masked = i.op_mask() != Register::None && !i.zeroing_masking();
    let mut reads: Vec<ByteRange> = Vec::new();
    let mut defs: Vec<ByteRange> = Vec::new();
    let add = |v: &mut Vec<ByteRange>, reg: ArchReg, (lo, hi): (u8, u8)| match v.iter_mut().find(|b| b.reg == reg) {
        Some(b) => {
            b.lo = b.lo.min(lo);
            b.hi = b.hi.max(hi);
        }
        None => v.push(ByteRange { reg, lo, hi }),
    };
    let mut result = None;
    for u in info.used_registers() {
        let r = u.register();
        let Some(a) = ArchReg::from_iced(r) else { continue };
        let (read, write, cond) = match u.access() {
            OpAccess::Read | OpAccess::CondRead => (true, false, false),
            OpAccess::Write => (false, true, false),
            OpAccess::CondWrite => (false, true, true),
            OpAccess::ReadWrite => (true, true, false),
            OpAccess::ReadCondWrite => (true, true, true),
            _ => (false, false, false),
        };
        let (rb, wb) = operand_bytes(r, legacy);
        let merged = cond || (r.is_vector_register() && merge_masked && i.op0_kind() == OpKind::Register && i.op0_register() == r);
        if read {
            add(&mut reads, a, rb);
        }
        if merged {
            add(&mut reads, a, wb);
        }
        if write {
            add(&mut defs, a, wb);
            let op0 = i.op0_register();
            if !cond
                && result.is_none()
                && i.op0_kind() == OpKind::Register
                && (op0.is_gpr32() || op0.is_gpr64())
                && op0.full_register() == r.full_register()
            {
                result = Some(a);
            }
        }
    }
    if matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) || (i.mnemonic() == Mnemonic::Int && i.immediate8() == 0x80) {
        for a in [ArchReg::RAX, ArchReg::RDI, ArchReg::RSI, ArchReg::RDX, ArchReg::R10, ArchReg::R8, ArchReg::R9] {
            add(&mut reads, a, (0, 8));
        }
        // The kernel's result; syscall also leaves the return address and flags in rcx, r11.
        add(&mut defs, ArchReg::RAX, (0, 8));
        if i.mnemonic() == Mnemonic::Syscall {
            add(&mut defs, ArchReg::RCX, (0, 8));
            add(&mut defs, ArchReg::R11, (0, 8));
        }
    }
    reads.sort_by_key(|b| b.reg);
    defs.sort_by_key(|b| b.reg);
    RegBytes { reads, defs, result }
}

/// Decodes instructions and derives their DEP semantics.
pub struct Semantics {
    machine: Machine,
    factory: InstructionInfoFactory,
}

impl Semantics {
    pub fn new(machine: Machine) -> Self {
        Semantics { machine, factory: InstructionInfoFactory::new() }
    }

    pub fn machine(&self) -> Machine {
        self.machine
    }

    /// The semantics of a decoded instruction. An invalid instruction expires every register.
    pub fn insn(&mut self, i: &Instruction) -> Insn {
        let width = self.machine.width;
        if i.is_invalid() {
            return Insn {
                pc: i.ip(),
                len: i.len() as u8,
                refs: vec![],
                used: RegSet::EMPTY,
                effects: Reg::all().map(RegEffect::Expire).collect(),
                special: Special::None,
                flow: Flow::Other,
                mnemonic: i.mnemonic(),
                atomic: false,
                regs: Registers::default(),
                bytes: RegBytes::default(),
            };
        }
        let info = self.factory.info(i);
        let regs = registers(i, info);
        let bytes = register_bytes(i, info);
        let mnemonic = i.mnemonic();
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        let mut special = Special::None;
        let rep = i.is_string_instruction() && (i.has_rep_prefix() || i.has_repne_prefix());

        if !no_data_access(mnemonic) {
            for m in info.used_memory() {
                // (reads, writes, read conditional, write conditional)
                let (r, w, rc, wc) = match m.access() {
                    OpAccess::Read => (true, false, false, false),
                    OpAccess::CondRead => (true, false, true, false),
                    OpAccess::Write => (false, true, false, false),
                    OpAccess::CondWrite => (false, true, false, true),
                    OpAccess::ReadWrite => (true, true, false, false),
                    OpAccess::ReadCondWrite => (true, true, false, true),
                    _ => continue,
                };
                let size = match m.memory_size().size() {
                    _ if is_xsave_family(mnemonic) => self.machine.xsave_size,
                    0 if i.is_string_instruction() => i.memory_size().size() as u32,
                    s => s as u32,
                };
                let seg = match m.segment() {
                    Register::FS => Some(Reg::FS_BASE),
                    Register::GS => Some(Reg::GS_BASE),
                    _ => None,
                };
                let addr_reg = |r: Register| Reg::from_iced(r).map(|reg| AddrReg { reg, bits: (r.size() * 8) as u8 });
                let addr_bits = match m.address_size() {
                    iced_x86::CodeSize::Code16 => 16,
                    iced_x86::CodeSize::Code32 => 32,
                    iced_x86::CodeSize::Code64 => 64,
                    _ => width.bits(),
                };
                let vsib = m.vsib_size() != 0;
                let addr = Address {
                    seg,
                    base: addr_reg(m.base()),
                    index: if vsib { None } else { addr_reg(m.index()) },
                    scale: m.scale() as u8,
                    disp: m.displacement(),
                    addr_bits,
                };
                if vsib {
                    special = Special::Gather(gather(i, m.index(), m.vsib_size() as u8, size));
                }
                // Rep strings are conditional only through their count, gathers through their
                // mask, and both are recorded; other masked accesses are flagged.
                let exact = rep || vsib;
                let masked = masked_access(i, mnemonic);
                if r && reads_xstate_bv_only(mnemonic) {
                    // SDM vol. 1, 13.7: XSAVE and XSAVEOPT read of the area only the header's
                    // XSTATE_BV (8 bytes at offset 512), which they update.
                    let header = Address { disp: addr.disp.wrapping_add(512), ..addr };
                    reads.push(MemRef { addr: header, size: 8, access: Access::Read, conditional: false });
                } else if r {
                    reads.push(MemRef { addr, size, access: Access::Read, conditional: !exact && (rc || masked) });
                }
                if w {
                    writes.push(MemRef { addr, size, access: Access::Write, conditional: !exact && (wc || masked) });
                }
            }
        }
        let mut refs = reads;
        refs.append(&mut writes);
        let used = refs.iter().fold(RegSet::EMPTY, |s, r| s.union(r.addr.regs()));

        let mut effects = Vec::new();
        if rep {
            let (post, other) = match mnemonic {
                Mnemonic::Movsb | Mnemonic::Movsw | Mnemonic::Movsd | Mnemonic::Movsq => (Reg::RDI, Some(Reg::RSI)),
                Mnemonic::Cmpsb | Mnemonic::Cmpsw | Mnemonic::Cmpsd | Mnemonic::Cmpsq => (Reg::RDI, Some(Reg::RSI)),
                Mnemonic::Lodsb | Mnemonic::Lodsw | Mnemonic::Lodsd | Mnemonic::Lodsq => (Reg::RSI, None),
                Mnemonic::Outsb | Mnemonic::Outsw | Mnemonic::Outsd => (Reg::RSI, None),
                _ => (Reg::RDI, None),
            };
            special = Special::Rep(RepString { elem: i.memory_size().size() as u32, post, other });
            effects.push(RegEffect::Expire(Reg::RCX));
            if matches!(mnemonic, Mnemonic::Lodsb | Mnemonic::Lodsw | Mnemonic::Lodsd | Mnemonic::Lodsq) {
                effects.push(RegEffect::Expire(Reg::RAX));
            }
        } else {
            let derive = self.machine.derive && width == Width::W64;
            register_effects(i, &info, width, derive, &mut effects);
        }
        let atomic = !refs.is_empty() && (i.has_lock_prefix() || mnemonic == Mnemonic::Xchg);
        Insn { pc: i.ip(), len: i.len() as u8, refs, used, effects, special, flow: flow(i), mnemonic, atomic, regs, bytes }
    }
}

/// The registers an instruction reads and writes (see [`Registers`] for the rules).
fn registers(i: &Instruction, info: &iced_x86::InstructionInfo) -> Registers {
    let mut r = Registers { flags_read: i.rflags_read(), flags_written: i.rflags_modified(), ..Default::default() };
    let legacy_sse = i.encoding() == iced_x86::EncodingKind::Legacy;
    let merge_masked = i.op_mask() != Register::None && !i.zeroing_masking();
    for u in info.used_registers() {
        let Some(a) = ArchReg::from_iced(u.register()) else { continue };
        let (read, write) = match u.access() {
            OpAccess::Read | OpAccess::CondRead => (true, false),
            OpAccess::Write => (false, true),
            OpAccess::CondWrite => (true, true),
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => (true, true),
            _ => (false, false),
        };
        let reg = u.register();
        let partial = write
            && ((reg.is_gpr8() || reg.is_gpr16())
                || (reg.is_xmm() && legacy_sse)
                || (reg.is_vector_register() && merge_masked && i.op0_kind() == OpKind::Register && i.op0_register() == reg));
        if read || partial {
            r.reads.insert(a);
        }
        if write {
            r.writes.insert(a);
        }
    }
    if matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) || (i.mnemonic() == Mnemonic::Int && i.immediate8() == 0x80) {
        for a in [ArchReg::RAX, ArchReg::RDI, ArchReg::RSI, ArchReg::RDX, ArchReg::R10, ArchReg::R8, ArchReg::R9] {
            r.reads.insert(a);
        }
        r.writes.insert(ArchReg::RAX);
    }
    r
}

fn no_data_access(m: Mnemonic) -> bool {
    matches!(
        m,
        Mnemonic::Clflush
            | Mnemonic::Clflushopt
            | Mnemonic::Clwb
            | Mnemonic::Cldemote
            | Mnemonic::Prefetch
            | Mnemonic::Prefetchnta
            | Mnemonic::Prefetcht0
            | Mnemonic::Prefetcht1
            | Mnemonic::Prefetcht2
            | Mnemonic::Prefetchw
            | Mnemonic::Prefetchwt1
            | Mnemonic::Lea
            | Mnemonic::Nop
            | Mnemonic::Monitor
            | Mnemonic::Monitorx
    )
}

/// AVX-512 `{k}` operands and the AVX/SSE byte- and element-masked moves.
fn masked_access(i: &Instruction, m: Mnemonic) -> bool {
    i.op_mask() != Register::None
        || matches!(
            m,
            Mnemonic::Vmaskmovps
                | Mnemonic::Vmaskmovpd
                | Mnemonic::Vpmaskmovd
                | Mnemonic::Vpmaskmovq
                | Mnemonic::Maskmovq
                | Mnemonic::Maskmovdqu
                | Mnemonic::Vmaskmovdqu
        )
}

/// XSAVE and XSAVEOPT (not XSAVEC/XSAVES, which write the whole header without reading it).
fn reads_xstate_bv_only(m: Mnemonic) -> bool {
    matches!(m, Mnemonic::Xsave | Mnemonic::Xsave64 | Mnemonic::Xsaveopt | Mnemonic::Xsaveopt64)
}

fn is_xsave_family(m: Mnemonic) -> bool {
    matches!(
        m,
        Mnemonic::Xsave
            | Mnemonic::Xsave64
            | Mnemonic::Xsavec
            | Mnemonic::Xsavec64
            | Mnemonic::Xsaveopt
            | Mnemonic::Xsaveopt64
            | Mnemonic::Xsaves
            | Mnemonic::Xsaves64
            | Mnemonic::Xrstor
            | Mnemonic::Xrstor64
            | Mnemonic::Xrstors
            | Mnemonic::Xrstors64
    )
}

fn gather(i: &Instruction, index: Register, index_elem: u8, elem: u32) -> Gather {
    let index_bytes = index.size() as u8;
    let count = (index_bytes / index_elem) as u32;
    let mask = if i.op_mask() != Register::None {
        GatherMask::K { reg: i.op_mask() }
    } else {
        // AVX2: the mask is the last operand, one element per data element.
        let reg = i.op_register(i.op_count() - 1);
        GatherMask::Vector { reg, bytes: (count * elem) as u8 }
    };
    Gather { index, index_bytes, index_elem, mask }
}

/// Registers written by a non-string instruction, as Expire or Add effects.
fn register_effects(i: &Instruction, info: &iced_x86::InstructionInfo, width: Width, derive: bool, out: &mut Vec<RegEffect>) {
    let mut written = RegSet::EMPTY;
    let mut pure_write = RegSet::EMPTY;
    for u in info.used_registers() {
        let write = matches!(u.access(), OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite);
        if !write {
            continue;
        }
        let Some(r) = Reg::from_iced(u.register()) else { continue };
        written.insert(r);
        if matches!(u.access(), OpAccess::Write | OpAccess::CondWrite) {
            pure_write.insert(r);
        }
    }
    match i.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => {
            written = written.union([Reg::RAX, Reg::RCX, Reg::R11, Reg::FS_BASE, Reg::GS_BASE].into_iter().collect());
        }
        Mnemonic::Int | Mnemonic::Into | Mnemonic::Int1 | Mnemonic::Int3 => {
            written = written.union([Reg::RAX, Reg::FS_BASE, Reg::GS_BASE].into_iter().collect());
        }
        Mnemonic::Wrfsbase => written.insert(Reg::FS_BASE),
        Mnemonic::Wrgsbase => written.insert(Reg::GS_BASE),
        _ => {}
    }
    if written.is_empty() {
        return;
    }
    let sp = Reg::RSP;
    let mut adds: Vec<(Reg, i64)> = Vec::new();
    // Stack instructions move rsp by a constant, unless they load it (pop rsp, leave).
    if written.contains(sp) && i.is_stack_instruction() && !pure_write.contains(sp) && i.mnemonic() != Mnemonic::Leave {
        let inc = i.stack_pointer_increment() as i64;
        let nested_enter = i.mnemonic() == Mnemonic::Enter && i.immediate8_2nd() & 0x1f != 0;
        if !nested_enter {
            adds.push((sp, inc));
        }
    }
    if let Some((r, d)) = constant_add(i, width) {
        adds.push((r, d));
    }
    // A derivation writes its destination alone (flags aside).
    let derived = if derive && adds.is_empty() { crate::derive::derive_of(i) } else { None };
    let derived = derived.filter(|d| written.iter().eq([d.dst]));
    for r in written.iter() {
        match adds.iter().find(|(a, _)| *a == r) {
            Some(&(_, d)) => {
                if d != 0 {
                    out.push(RegEffect::Add(r, d))
                }
            }
            None => match derived {
                Some(d) => out.push(RegEffect::Derive(d)),
                None => out.push(RegEffect::Expire(r)),
            },
        }
    }
}

/// `add/sub r, imm`, `inc/dec r` and `lea r, [r + d]` on a full-width register.
fn constant_add(i: &Instruction, width: Width) -> Option<(Reg, i64)> {
    if i.op_count() == 0 || i.op0_kind() != OpKind::Register {
        return None;
    }
    let dst = i.op0_register();
    if dst.size() != width.bytes() || !dst.is_gpr() {
        return None;
    }
    let r = Reg::from_iced(dst)?;
    let imm = |i: &Instruction| (i.op_count() == 2 && crate::derive::is_imm(i.op1_kind())).then(|| i.immediate(1) as i64);
    let d = match i.mnemonic() {
        Mnemonic::Add => imm(i)?,
        Mnemonic::Sub => imm(i)?.wrapping_neg(),
        Mnemonic::Inc => 1,
        Mnemonic::Dec => -1,
        Mnemonic::Lea => {
            let ok = i.memory_base() == dst && i.memory_index() == Register::None && !i.is_ip_rel_memory_operand();
            let addr64 = i.memory_displ_size() <= 8 && i.code() != Code::INVALID;
            if !(ok && addr64) {
                return None;
            }
            let d = i.memory_displacement64() as i64;
            if width == Width::W32 {
                d as i32 as i64
            } else {
                d
            }
        }
        _ => return None,
    };
    Some((r, d))
}

fn flow(i: &Instruction) -> Flow {
    if matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) {
        return Flow::Syscall;
    }
    match i.flow_control() {
        FlowControl::Next => Flow::Next,
        FlowControl::UnconditionalBranch if i.op0_kind() == OpKind::NearBranch64 || i.op0_kind() == OpKind::NearBranch32 => {
            Flow::Jump { target: i.near_branch_target(), conditional: false }
        }
        FlowControl::ConditionalBranch => Flow::Jump { target: i.near_branch_target(), conditional: true },
        FlowControl::IndirectBranch | FlowControl::UnconditionalBranch => Flow::IndirectJump,
        FlowControl::Call => Flow::Call { target: i.near_branch_target() },
        FlowControl::IndirectCall => Flow::IndirectCall,
        FlowControl::Return => Flow::Return,
        FlowControl::Interrupt if i.mnemonic() == Mnemonic::Int3 => Flow::Other,
        FlowControl::Interrupt => Flow::Syscall,
        FlowControl::XbeginXabortXend | FlowControl::Exception => Flow::Other,
    }
}

impl Address {
    /// Renders the expression, e.g. `fs:[rbx+rax.8*4+0x10]` (`.8` marks a truncated register).
    pub fn describe(&self, width: Width) -> String {
        let mut s = String::new();
        if let Some(seg) = self.seg {
            s.push_str(if seg == Reg::FS_BASE { "fs:" } else { "gs:" });
        }
        s.push('[');
        let reg = |a: AddrReg| {
            if a.bits == width.bits() {
                a.reg.name(width).to_string()
            } else {
                format!("{}.{}", a.reg.name(width), a.bits)
            }
        };
        let mut parts = Vec::new();
        if let Some(b) = self.base {
            parts.push(reg(b));
        }
        if let Some(i) = self.index {
            parts.push(format!("{}*{}", reg(i), self.scale));
        }
        if self.disp != 0 || parts.is_empty() {
            let d = match width {
                Width::W64 => self.disp as i64,
                Width::W32 => self.disp as u32 as i32 as i64,
            };
            if parts.is_empty() || self.disp > u32::MAX as u64 && d > 0 {
                parts.push(format!("{:#x}", self.disp));
            } else if d < 0 {
                s.push_str(&parts.join("+"));
                s.push_str(&format!("-{:#x}", d.unsigned_abs()));
                parts.clear();
            } else {
                parts.push(format!("{d:#x}"));
            }
        }
        s.push_str(&parts.join("+"));
        s.push(']');
        if self.addr_bits != width.bits() {
            s.push_str(&format!(".a{}", self.addr_bits));
        }
        s
    }
}

impl Insn {
    /// One line: references, used registers, effects and special recording.
    pub fn describe(&self, width: Width) -> String {
        let mut parts: Vec<String> = self
            .refs
            .iter()
            .map(|r| {
                let k = if r.access == Access::Read { "R" } else { "W" };
                let c = if r.conditional { "?" } else { "" };
                format!("{k}{c} {}:{}", r.addr.describe(width), r.size)
            })
            .collect();
        if !self.used.is_empty() {
            parts.push(format!("used {}", self.used.iter().map(|r| r.name(width)).collect::<Vec<_>>().join(",")));
        }
        for e in &self.effects {
            parts.push(match *e {
                RegEffect::Expire(r) => format!("expire {}", r.name(width)),
                RegEffect::Add(r, d) => format!("add {} {d}", r.name(width)),
                RegEffect::Derive(d) => format!("derive {}", d.describe()),
            });
        }
        match self.special {
            Special::None => {}
            Special::Rep(r) => parts.push(format!(
                "rep elem {} post {}{}",
                r.elem,
                r.post.name(width),
                r.other.map(|o| format!(" other {}", o.name(width))).unwrap_or_default()
            )),
            Special::Gather(g) => parts.push(format!(
                "gather {:?} {}x{} mask {}",
                g.index,
                g.count(),
                g.index_elem,
                match g.mask {
                    GatherMask::Vector { reg, bytes } => format!("{reg:?}/{bytes}"),
                    GatherMask::K { reg } => format!("{reg:?}"),
                }
            )),
        }
        if self.atomic {
            parts.push("atomic".into());
        }
        parts.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    const XSAVE: u32 = 2696;

    fn sem(width: Width, bytes: &[u8]) -> String {
        let mut s = Semantics::new(Machine { width, xsave_size: XSAVE, derive: true, roots: true });
        let mut d = Decoder::with_ip(width.bits() as u32, bytes, 0x1000, DecoderOptions::NONE);
        let i = d.decode();
        assert_eq!(i.len(), bytes.len(), "{bytes:02x?} must be exactly one instruction");
        s.insn(&i).describe(width)
    }

    /// `reads -> writes | flags read / written` of one instruction, registers sorted.
    fn regs(bytes: &[u8]) -> String {
        let mut s = Semantics::new(Machine { width: Width::W64, xsave_size: XSAVE, derive: true, roots: true });
        let i = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
        assert_eq!(i.len(), bytes.len(), "{bytes:02x?} must be exactly one instruction");
        let r = s.insn(&i).regs;
        let names = |set: ArchSet| set.iter().map(|a| a.name()).collect::<Vec<_>>().join(",");
        let flags = |f: u32| {
            use iced_x86::RflagsBits as F;
            [(F::OF, "o"), (F::SF, "s"), (F::ZF, "z"), (F::AF, "a"), (F::CF, "c"), (F::PF, "p"), (F::DF, "d")]
                .iter()
                .filter(|(b, _)| f & b != 0)
                .map(|(_, n)| *n)
                .collect::<String>()
        };
        format!("{} -> {} | {}/{}", names(r.reads), names(r.writes), flags(r.flags_read), flags(r.flags_written))
    }

    /// Register reads and writes of hand-picked forms, as the SDM describes them (not as
    /// iced-x86 does: the partial-write, masking and system-call rules are checked here).
    #[test]
    fn register_reads_and_writes() {
        let cases: &[(&str, &[u8], &str)] = &[
            ("mov al, [rbx]: keeps rax's upper bits", &[0x8a, 0x03], "rax,rbx -> rax | /"),
            ("mov ax, bx", &[0x66, 0x89, 0xd8], "rax,rbx -> rax | /"),
            ("mov eax, ebx: zero-extends", &[0x89, 0xd8], "rbx -> rax | /"),
            ("add rax, rbx", &[0x48, 0x01, 0xd8], "rax,rbx -> rax | /oszacp"),
            ("cmovz rax, rbx", &[0x48, 0x0f, 0x44, 0xc3], "rax,rbx -> rax | z/"),
            ("push rbx", &[0x53], "rbx,rsp -> rsp | /"),
            ("div rcx", &[0x48, 0xf7, 0xf1], "rax,rcx,rdx -> rax,rdx | /oszacp"),
            ("cpuid", &[0x0f, 0xa2], "rax,rcx -> rax,rcx,rdx,rbx | /"),
            ("rep movsb", &[0xf3, 0xa4], "rcx,rsi,rdi -> rcx,rsi,rdi | d/"),
            ("lock xadd [rdi], eax", &[0xf0, 0x0f, 0xc1, 0x07], "rax,rdi -> rax | /oszacp"),
            (
                "syscall: the kernel's arguments and result; rflags saved to r11, then masked",
                &[0x0f, 0x05],
                "rax,rdx,rsi,rdi,r8,r9,r10 -> rax,rcx,r11 | oszacpd/oszacpd",
            ),
            ("addps xmm0, xmm1: legacy SSE keeps the upper bits", &[0x0f, 0x58, 0xc1], "zmm0,zmm1 -> zmm0 | /"),
            ("vaddps xmm0, xmm1, xmm2: VEX zeroes them", &[0xc5, 0xf0, 0x58, 0xc2], "zmm1,zmm2 -> zmm0 | /"),
            ("vmovdqu32 zmm0{k1}, zmm1: merge-masking", &[0x62, 0xf1, 0x7e, 0x49, 0x6f, 0xc1], "zmm0,zmm1,k1 -> zmm0 | /"),
            ("vmovdqu32 zmm0{k1}{z}, zmm1: zero-masking", &[0x62, 0xf1, 0x7e, 0xc9, 0x6f, 0xc1], "zmm1,k1 -> zmm0 | /"),
            ("mov rax, fs:[0x28]", &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], "fs -> rax | /"),
        ];
        for (what, bytes, want) in cases {
            assert_eq!(regs(bytes), *want, "{what}");
        }
    }

    /// Byte-level reads and definitions, from the SDM: which bytes of which register each
    /// instruction leaves with a new value, and which it reads.
    #[test]
    fn register_bytes_reads_and_definitions() {
        let bytes = |code: &[u8]| {
            let mut s = Semantics::new(Machine { width: Width::W64, xsave_size: XSAVE, derive: true, roots: true });
            let i = Decoder::with_ip(64, code, 0x1000, DecoderOptions::NONE).decode();
            assert_eq!(i.len(), code.len(), "{code:02x?} must be exactly one instruction");
            let b = s.insn(&i).bytes;
            let list = |v: &[ByteRange]| v.iter().map(|r| format!("{}:{}-{}", r.reg.name(), r.lo, r.hi)).collect::<Vec<_>>().join(",");
            format!("{} -> {} = {}", list(&b.reads), list(&b.defs), b.result.map_or("-".into(), |r| r.name()))
        };
        let cases: &[(&str, &[u8], &str)] = &[
            ("mov al, 9: byte 0 only, nothing read", &[0xb0, 0x09], " -> rax:0-1 = -"),
            ("mov ah, bl: byte 1 from byte 0", &[0x88, 0xdc], "rbx:0-1 -> rax:1-2 = -"),
            ("mov ax, bx", &[0x66, 0x89, 0xd8], "rbx:0-2 -> rax:0-2 = -"),
            ("mov eax, ebx: a 32-bit write zero-extends", &[0x89, 0xd8], "rbx:0-4 -> rax:0-8 = rax"),
            ("mov rax, rbx", &[0x48, 0x89, 0xd8], "rbx:0-8 -> rax:0-8 = rax"),
            ("add eax, ebx: reads the low halves, defines all of rax", &[0x01, 0xd8], "rax:0-4,rbx:0-4 -> rax:0-8 = rax"),
            ("add al, bl: reads and writes byte 0", &[0x00, 0xd8], "rax:0-1,rbx:0-1 -> rax:0-1 = -"),
            ("cmovz rax, rbx: may keep rax", &[0x48, 0x0f, 0x44, 0xc3], "rax:0-8,rbx:0-8 -> rax:0-8 = -"),
            ("pop rbx", &[0x5b], "rsp:0-8 -> rbx:0-8,rsp:0-8 = rbx"),
            ("addps xmm0, xmm1: legacy SSE keeps bytes 16-63", &[0x0f, 0x58, 0xc1], "zmm0:0-16,zmm1:0-16 -> zmm0:0-16 = -"),
            ("vaddps xmm0, xmm1, xmm2: VEX zeroes bytes 16-63", &[0xc5, 0xf0, 0x58, 0xc2], "zmm1:0-16,zmm2:0-16 -> zmm0:0-64 = -"),
            ("vaddps ymm0, ymm1, ymm2", &[0xc5, 0xf4, 0x58, 0xc2], "zmm1:0-32,zmm2:0-32 -> zmm0:0-64 = -"),
            (
                "vmovdqu32 zmm0{k1}, zmm1: merge-masking reads the destination",
                &[0x62, 0xf1, 0x7e, 0x49, 0x6f, 0xc1],
                "zmm0:0-64,zmm1:0-64,k1:0-1 -> zmm0:0-64 = -",
            ),
            ("syscall", &[0x0f, 0x05], "rax:0-8,rdx:0-8,rsi:0-8,rdi:0-8,r8:0-8,r9:0-8,r10:0-8 -> rax:0-8,rcx:0-8,r11:0-8 = -"),
        ];
        for (what, code, want) in cases {
            assert_eq!(bytes(code), *want, "{what}");
        }
    }

    /// Hand-written instruction bytes and exactly what DEP must know about each.
    #[test]
    fn table() {
        let cases: &[(&str, &[u8], &str)] = &[
            // implicit stack references: rsp moves by a constant and stays current
            ("push rax", &[0x50], "W [rsp-0x8]:8 | used rsp | add rsp -8"),
            ("pop rax", &[0x58], "R [rsp]:8 | used rsp | expire rax | add rsp 8"),
            ("pop rsp", &[0x5c], "R [rsp]:8 | used rsp | expire rsp"),
            ("call rel32", &[0xe8, 0, 0, 0, 0], "W [rsp-0x8]:8 | used rsp | add rsp -8"),
            ("call [rax]", &[0xff, 0x10], "R [rax]:8 | W [rsp-0x8]:8 | used rax,rsp | add rsp -8"),
            ("ret", &[0xc3], "R [rsp]:8 | used rsp | add rsp 8"),
            ("ret 16", &[0xc2, 0x10, 0], "R [rsp]:8 | used rsp | add rsp 24"),
            ("enter 16,0", &[0xc8, 0x10, 0, 0], "W [rsp-0x8]:8 | used rsp | add rsp -24 | expire rbp"),
            ("leave", &[0xc9], "R [rbp]:8 | used rbp | expire rsp | expire rbp"),
            ("pushfq", &[0x9c], "W [rsp-0x8]:8 | used rsp | add rsp -8"),
            ("push [rsp+8]", &[0xff, 0x74, 0x24, 0x08], "R [rsp+0x8]:8 | W [rsp-0x8]:8 | used rsp | add rsp -8"),
            ("pop [rsp+8] (address after the increment)", &[0x8f, 0x44, 0x24, 0x08], "R [rsp]:8 | W [rsp+0x10]:8 | used rsp | add rsp 8"),
            // constant adjustments
            ("add rsp, 0x10", &[0x48, 0x83, 0xc4, 0x10], "add rsp 16"),
            ("sub rsp, 0x88", &[0x48, 0x81, 0xec, 0x88, 0, 0, 0], "add rsp -136"),
            ("inc rdi", &[0x48, 0xff, 0xc7], "add rdi 1"),
            ("lea rax, [rax+0x20]", &[0x48, 0x8d, 0x40, 0x20], "add rax 32"),
            ("lea rax, [rbx+8] is no reference, and derives rax", &[0x48, 0x8d, 0x43, 0x08], "derive rax:64 = (rbx:64 + 0x8):64"),
            ("add eax, 1 (32-bit: wraps, a derivation)", &[0x83, 0xc0, 0x01], "derive rax:32 = rax:32 + 0x1"),
            // partial writes expire the whole register
            ("mov al, 1", &[0xb0, 0x01], "expire rax"),
            ("mov ax, 1", &[0x66, 0xb8, 0x01, 0x00], "expire rax"),
            ("mov eax, 1", &[0xb8, 1, 0, 0, 0], "derive rax:32 = 0x1"),
            ("adc eax, 1 reads the carry", &[0x83, 0xd0, 0x01], "expire rax"),
            ("mov ah, [rbx]", &[0x8a, 0x23], "R [rbx]:1 | used rbx | expire rax"),
            // RIP-relative and absolute operands need no register
            ("mov rax, [rip+0x10]", &[0x48, 0x8b, 0x05, 0x10, 0, 0, 0], "R [0x1017]:8 | expire rax"),
            ("mov eax, [abs 0x601040]", &[0x8b, 0x04, 0x25, 0x40, 0x10, 0x60, 0x00], "R [0x601040]:4 | expire rax"),
            (
                "movabs al, [0x1122334455667788]",
                &[0xa0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
                "R [0x1122334455667788]:1 | expire rax",
            ),
            // FS/GS-relative: the segment base is a lazily recorded register
            ("mov rax, fs:[0x28]", &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], "R fs:[0x28]:8 | used fs_base | expire rax"),
            ("mov gs:[rbx+8], ecx", &[0x65, 0x89, 0x4b, 0x08], "W gs:[rbx+0x8]:4 | used rbx,gs_base"),
            ("wrfsbase rax", &[0xf3, 0x48, 0x0f, 0xae, 0xd0], "expire fs_base"),
            // full SIB, read-modify-write, address-size override
            ("mov ebx, [rax+rcx*4+0x10]", &[0x8b, 0x5c, 0x88, 0x10], "R [rax+rcx*4+0x10]:4 | used rax,rcx | expire rbx"),
            ("add [rax], 1", &[0x48, 0x83, 0x00, 0x01], "R [rax]:8 | W [rax]:8 | used rax"),
            ("mov eax, [ebx]", &[0x67, 0x8b, 0x03], "R [rbx.32].a32:4 | used rbx | expire rax"),
            ("xlat", &[0xd7], "R [rbx+rax.8*1]:1 | used rax,rbx | expire rax"),
            // string instructions
            ("movsb", &[0xa4], "R [rsi]:1 | W [rdi]:1 | used rsi,rdi | expire rsi | expire rdi"),
            ("rep movsq", &[0xf3, 0x48, 0xa5], "R [rsi]:8 | W [rdi]:8 | used rsi,rdi | expire rcx | rep elem 8 post rdi other rsi"),
            ("rep stosb", &[0xf3, 0xaa], "W [rdi]:1 | used rdi | expire rcx | rep elem 1 post rdi"),
            ("repe cmpsb", &[0xf3, 0xa6], "R [rsi]:1 | R [rdi]:1 | used rsi,rdi | expire rcx | rep elem 1 post rdi other rsi"),
            ("repne scasb", &[0xf2, 0xae], "R [rdi]:1 | used rdi | expire rcx | rep elem 1 post rdi"),
            ("rep lodsd", &[0xf3, 0xad], "R [rsi]:4 | used rsi | expire rcx | expire rax | rep elem 4 post rsi"),
            ("rep ret is a plain ret", &[0xf3, 0xc3], "R [rsp]:8 | used rsp | add rsp 8"),
            // syscall and other implicit writers
            ("syscall", &[0x0f, 0x05], "expire rax | expire rcx | expire r11 | expire fs_base | expire gs_base"),
            ("cpuid", &[0x0f, 0xa2], "expire rax | expire rcx | expire rdx | expire rbx"),
            ("xchg rax, rbx", &[0x48, 0x93], "expire rax | expire rbx"),
            // atomic read-modify-writes: lock prefix, or xchg with memory (implicitly locked)
            ("xchg [rbx], rax", &[0x48, 0x87, 0x03], "R [rbx]:8 | W [rbx]:8 | used rbx | expire rax | atomic"),
            ("lock add [rax], 1", &[0xf0, 0x48, 0x83, 0x00, 0x01], "R [rax]:8 | W [rax]:8 | used rax | atomic"),
            ("lock cmpxchg [rbx], rcx", &[0xf0, 0x48, 0x0f, 0xb1, 0x0b], "R [rbx]:8 | W? [rbx]:8 | used rbx | expire rax | atomic"),
            ("lock xadd [rdi], eax", &[0xf0, 0x0f, 0xc1, 0x07], "R [rdi]:4 | W [rdi]:4 | used rdi | expire rax | atomic"),
            // conditional accesses
            ("cmove rax, [rbx] reads regardless", &[0x48, 0x0f, 0x44, 0x03], "R [rbx]:8 | used rbx | expire rax"),
            ("cmpxchg [rbx], rcx", &[0x48, 0x0f, 0xb1, 0x0b], "R [rbx]:8 | W? [rbx]:8 | used rbx | expire rax"),
            ("vmaskmovps [rax], ymm1, ymm2", &[0xc4, 0xe2, 0x75, 0x2e, 0x10], "W? [rax]:32 | used rax"),
            ("vmovaps zmm0{k1}, [rax] (masked)", &[0x62, 0xf1, 0x7c, 0x49, 0x28, 0x00], "R? [rax]:64 | used rax"),
            // xsave family and fxsave sizes
            // SDM vol. 1, 13.7: XSAVE reads only XSTATE_BV (offset 512) of the area it writes
            ("xsave [rax]", &[0x0f, 0xae, 0x20], "R [rax+0x200]:8 | W [rax]:2696 | used rax"),
            ("xsaveopt [rax+8]", &[0x0f, 0xae, 0x70, 0x08], "R [rax+0x208]:8 | W [rax+0x8]:2696 | used rax"),
            ("xsavec [rax]", &[0x0f, 0xc7, 0x20], "W [rax]:2696 | used rax"),
            ("xrstor [rax]", &[0x0f, 0xae, 0x28], "R [rax]:2696 | used rax"),
            ("fxsave [rax]", &[0x0f, 0xae, 0x00], "W [rax]:512 | used rax"),
            ("fld tbyte [rax]", &[0xdb, 0x28], "R [rax]:10 | used rax"),
            // not references
            ("prefetcht0 [rax]", &[0x0f, 0x18, 0x08], ""),
            ("clflush [rax]", &[0x0f, 0xae, 0x38], ""),
            ("nop [rax]", &[0x0f, 0x1f, 0x00], ""),
            // gathers: index vector and mask recorded, one reference per element
            (
                "vpgatherdd ymm1, [rax+ymm2*4], ymm3",
                &[0xc4, 0xe2, 0x65, 0x90, 0x0c, 0x90],
                "R [rax]:4 | used rax | gather YMM2 8x4 mask YMM3/32",
            ),
            (
                "vgatherqpd ymm1, [rax+ymm2*8], ymm3",
                &[0xc4, 0xe2, 0xe5, 0x93, 0x0c, 0xd0],
                "R [rax]:8 | used rax | gather YMM2 4x8 mask YMM3/32",
            ),
            (
                "vpgatherqd xmm1, [rax+ymm2*4], xmm3",
                &[0xc4, 0xe2, 0x65, 0x91, 0x0c, 0x90],
                "R [rax]:4 | used rax | gather YMM2 4x8 mask XMM3/16",
            ),
            (
                "vpgatherdd zmm1{k1}, [rax+zmm2*4]",
                &[0x62, 0xf2, 0x7d, 0x49, 0x90, 0x0c, 0x90],
                "R [rax]:4 | used rax | gather ZMM2 16x4 mask K1",
            ),
            (
                "vpscatterdd [rax+zmm2*4]{k1}, zmm1",
                &[0x62, 0xf2, 0x7d, 0x49, 0xa0, 0x0c, 0x90],
                "W [rax]:4 | used rax | gather ZMM2 16x4 mask K1",
            ),
        ];
        let mut bad = Vec::new();
        for (name, bytes, want) in cases {
            let got = sem(Width::W64, bytes);
            if got != *want {
                bad.push(format!("{name}:\n   want {want}\n   got  {got}"));
            }
        }
        assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    }

    #[test]
    fn thirty_two_bit_code() {
        assert_eq!(sem(Width::W32, &[0x50]), "W [esp-0x4]:4 | used esp | add esp -4");
        assert_eq!(sem(Width::W32, &[0x8b, 0x44, 0x88, 0x10]), "R [eax+ecx*4+0x10]:4 | used eax,ecx | expire eax");
        assert_eq!(sem(Width::W32, &[0x65, 0xa1, 0x14, 0, 0, 0]), "R gs:[0x14]:4 | used gs_base | expire eax");
    }

    #[test]
    fn address_evaluation() {
        let mut regs = [0u64; crate::NUM_REGS];
        regs[Reg::RAX.index()] = 0xffff_ffff_0000_0102;
        regs[Reg::RBX.index()] = 0x1000;
        regs[Reg::FS_BASE.index()] = 0x7f00_0000_0000;
        let xlat = Address {
            seg: None,
            base: Some(AddrReg { reg: Reg::RBX, bits: 64 }),
            index: Some(AddrReg { reg: Reg::RAX, bits: 8 }),
            scale: 1,
            disp: 0,
            addr_bits: 64,
        };
        assert_eq!(xlat.eval(&regs), 0x1002);
        let fs = Address { seg: Some(Reg::FS_BASE), base: None, index: None, scale: 1, disp: (-8i64) as u64, addr_bits: 64 };
        assert_eq!(fs.eval(&regs), 0x7eff_ffff_fff8);
        let a32 =
            Address { seg: None, base: Some(AddrReg { reg: Reg::RAX, bits: 32 }), index: None, scale: 1, disp: 0xffff_ff00, addr_bits: 32 };
        assert_eq!(a32.eval(&regs), 0x2);
    }

    #[test]
    fn gather_elements() {
        let g =
            Gather { index: Register::YMM2, index_bytes: 32, index_elem: 4, mask: GatherMask::Vector { reg: Register::YMM3, bytes: 32 } };
        let idx: Vec<u8> = [3i32, -1, 0, 7, 0, 0, 0, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(g.index_value(&idx, 1), (-1i64) as u64);
        let mut mask = [0u8; 32];
        mask[3] = 0x80; // element 0 active
        mask[15] = 0xff; // element 3 active
        let active: Vec<_> = (0..8).filter(|&i| g.active(&mask, i, 4)).collect();
        assert_eq!(active, vec![0, 3]);
        let k = Gather { mask: GatherMask::K { reg: Register::K1 }, ..g };
        assert!(k.active(&[0b0000_0100, 0, 0, 0, 0, 0, 0, 0], 2, 4));
        assert!(!k.active(&[0b0000_0100, 0, 0, 0, 0, 0, 0, 0], 1, 4));
    }

    #[test]
    fn flow_kinds() {
        let mut s = Semantics::new(Machine::x86_64(XSAVE));
        let f = |s: &mut Semantics, b: &[u8]| s.insn(&Decoder::with_ip(64, b, 0x1000, DecoderOptions::NONE).decode()).flow;
        assert_eq!(f(&mut s, &[0x74, 0x10]), Flow::Jump { target: 0x1012, conditional: true });
        assert_eq!(f(&mut s, &[0xe8, 0, 0, 0, 0]), Flow::Call { target: 0x1005 });
        assert_eq!(f(&mut s, &[0xff, 0xd0]), Flow::IndirectCall);
        assert_eq!(f(&mut s, &[0xc3]), Flow::Return);
        assert_eq!(f(&mut s, &[0x0f, 0x05]), Flow::Syscall);
        assert_eq!(f(&mut s, &[0xff, 0xe0]), Flow::IndirectJump);
        assert_eq!(f(&mut s, &[0x90]), Flow::Next);
    }
}
