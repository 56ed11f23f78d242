//! One instruction's rows of the instruction table (§7.3.3): `insRec`, its `decodedIns` with
//! the local-context slots, and where an execution record puts each reference's address.
//!
//! The slots come from iced-x86's instruction info (every register and memory operand,
//! implicit ones included); the memory slots are the references DEP recovers for the
//! instruction (`Insn::refs`, reads then writes), one slot per reference: a read in the
//! before group, a write in the after group and, when the operand is not also read, in the
//! group of write-only operands' earlier values. Values are not known, so the execution
//! record carries only the addresses.

use super::registers::{self, AGEN, FS_BASE, GS_BASE, MEM0, MEM1, STACKPOP, STACKPUSH};
use dep_profile::semantics::{Access, Insn};
use iced_x86::{
    Decoder, DecoderOptions, Formatter, Instruction, InstructionInfoFactory, IntelFormatter, Mnemonic, OpAccess, OpKind, Register,
};

/// Slot index meaning constant slot 0, constant slot 1, no slot.
const SLOT_IMM0: u8 = 0xfd;
const SLOT_NA: u8 = 0xff;
/// Bytes of an insRec.
pub const INS_REC: usize = 64;
/// Bytes of a decodedIns before its slots, and of a slot.
const DECODED_HEAD: usize = 88;
const SLOT: usize = 12;

/// The references one execution of an instruction makes: access and size of each, in order.
pub type Shape = Box<[(Access, u32)]>;

/// The full shape of `insn`'s references (one iteration's for a rep string).
pub fn shape(insn: &Insn) -> Shape {
    insn.refs.iter().map(|r| (r.access, r.size)).collect()
}

/// What a row is made from: an instruction's address, bytes and module, the references a
/// whole execution of it makes, and how its executions vary.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub pc: u64,
    pub code: &'a [u8],
    pub module: i32,
    pub full: &'a [(Access, u32)],
    /// A rep string (one record per iteration).
    pub rep: bool,
    /// Every execution makes the same references.
    pub fixed: bool,
}

impl<'a> Origin<'a> {
    /// `insn`'s, whose bytes are `code` (at most its length kept), in module `module`.
    pub fn of(insn: &Insn, code: &'a [u8], module: i32, full: &'a [(Access, u32)]) -> Self {
        use dep_profile::semantics::Special;
        let code = &code[..(insn.len as usize).min(code.len()).min(15)];
        Origin {
            pc: insn.pc,
            code,
            module,
            full,
            rep: matches!(insn.special, Special::Rep(_)),
            fixed: matches!(insn.special, Special::None),
        }
    }
}

/// An instruction-table row, ready to be written, and the layout of its execution records.
#[derive(Clone, Debug)]
pub struct Row {
    pub pc: u64,
    pub code: Vec<u8>,
    /// insRec.Type.
    pub kind: u8,
    pub module: i32,
    pub disasm: String,
    pub decoded: Vec<u8>,
    /// Bytes of an execution record's local context.
    pub lc_size: u16,
    /// Per reference, in order: the offsets in the local context its address goes to.
    pub addr_at: Vec<[u16; 2]>,
    /// A rep-prefixed string instruction: one record per iteration.
    pub rep: bool,
    /// Every execution makes the same references (no rep string, gather or scatter).
    pub fixed: bool,
}

/// Where a slot's group lies in the local context.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Before,
    WriteOnly,
    After,
}

struct Slot {
    group: Group,
    reg: u16,
    size: u16,
    /// Holds an address before its value (memory), or is an address (AGEN).
    addr: bool,
}

impl Slot {
    /// Bytes it takes in the local context: a memory slot's address comes before its
    /// value; an AGEN slot's value is the address.
    fn extent(&self) -> usize {
        self.size as usize + if self.addr && self.reg != AGEN { 8 } else { 0 }
    }
}

/// The slots being laid out, by group; indices are fixed once all are added.
#[derive(Default)]
struct Slots(Vec<Slot>);

impl Slots {
    fn add(&mut self, group: Group, reg: u16, size: u16, addr: bool) -> usize {
        self.0.push(Slot { group, reg, size, addr });
        self.0.len() - 1
    }

    fn find(&self, group: Group, reg: u16) -> Option<usize> {
        self.0.iter().position(|s| s.group == group && s.reg == reg && !s.addr)
    }
}

fn reads(a: OpAccess) -> bool {
    matches!(a, OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite)
}

fn writes(a: OpAccess) -> bool {
    matches!(a, OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite)
}

fn is_memory(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Memory
            | OpKind::MemorySegSI
            | OpKind::MemorySegESI
            | OpKind::MemorySegRSI
            | OpKind::MemorySegDI
            | OpKind::MemorySegEDI
            | OpKind::MemorySegRDI
            | OpKind::MemoryESDI
            | OpKind::MemoryESEDI
            | OpKind::MemoryESRDI
    )
}

/// The base register an explicit memory operand of kind `k` has.
fn memory_base(i: &Instruction, k: OpKind) -> Register {
    match k {
        OpKind::MemorySegSI => Register::SI,
        OpKind::MemorySegESI => Register::ESI,
        OpKind::MemorySegRSI => Register::RSI,
        OpKind::MemorySegDI | OpKind::MemoryESDI => Register::DI,
        OpKind::MemorySegEDI | OpKind::MemoryESEDI => Register::EDI,
        OpKind::MemorySegRDI | OpKind::MemoryESRDI => Register::RDI,
        _ => i.memory_base(),
    }
}

/// insRec.Type: a hint of what the instruction is.
fn kind(i: &Instruction) -> u8 {
    match i.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => 3,
        Mnemonic::Int if i.immediate8() == 0x80 => 6,
        Mnemonic::Int | Mnemonic::Int1 | Mnemonic::Int3 | Mnemonic::Into => 1,
        Mnemonic::Nop | Mnemonic::Fnop => 8,
        Mnemonic::Prefetch
        | Mnemonic::Prefetchnta
        | Mnemonic::Prefetcht0
        | Mnemonic::Prefetcht1
        | Mnemonic::Prefetcht2
        | Mnemonic::Prefetchw
        | Mnemonic::Prefetchwt1 => 9,
        _ => 0,
    }
}

/// Builds rows, sharing one decoder's tables and formatter.
pub struct Builder {
    info: InstructionInfoFactory,
    fmt: IntelFormatter,
}

impl Default for Builder {
    fn default() -> Self {
        Builder { info: InstructionInfoFactory::new(), fmt: IntelFormatter::new() }
    }
}

impl Builder {
    /// The row of `insn` (whose bytes are `code`) in module `module`, for executions making
    /// the references `made` (None: all of `insn`'s).
    pub fn row(&mut self, src: &Origin, made: Option<&[(Access, u32)]>) -> Row {
        let mut dec = Decoder::with_ip(64, src.code, src.pc, DecoderOptions::NONE);
        let i = dec.decode();
        let mut disasm = String::new();
        self.fmt.format(&i, &mut disasm);
        let made: &[(Access, u32)] = made.unwrap_or(src.full);
        let info = self.info.info(&i);
        let ops = i.op_count().min(4);

        // Explicit memory operands in operand order: MEM0, then MEM1.
        let explicit: Vec<(u32, OpKind)> = (0..i.op_count()).map(|k| (k, i.op_kind(k))).filter(|&(_, k)| is_memory(k)).take(2).collect();
        // Each used memory operand's name, from its base register.
        let used: Vec<_> = info.used_memory().iter().filter(|m| m.access() != OpAccess::NoMemAccess).collect();
        let name_of = |m: &iced_x86::UsedMemory| -> u16 {
            for (n, &(_, k)) in explicit.iter().enumerate() {
                let same = if k == OpKind::Memory {
                    m.base() == i.memory_base() && m.index() == i.memory_index() && m.displacement() == i.memory_displacement64()
                } else {
                    m.base() == memory_base(&i, k)
                };
                if same {
                    return if n == 0 { MEM0 } else { MEM1 };
                }
            }
            match m.base() {
                Register::RSP | Register::ESP | Register::SP if writes(m.access()) && !reads(m.access()) => STACKPUSH,
                Register::RSP | Register::ESP | Register::SP => STACKPOP,
                _ if explicit.is_empty() => MEM0,
                _ => MEM1,
            }
        };
        // Each reference made: its name and whether its operand is written only.
        let mut taken = vec![[false; 2]; used.len()];
        let refs: Vec<(u16, bool)> = made
            .iter()
            .map(|&(access, size)| {
                let w = access == Access::Write;
                let hit = used.iter().enumerate().find(|(k, m)| {
                    !taken[*k][w as usize]
                        && if w { writes(m.access()) } else { reads(m.access()) }
                        && (m.memory_size().size() == size as usize || m.memory_size().size() == 0)
                });
                match hit {
                    Some((k, m)) => {
                        taken[k][w as usize] = true;
                        (name_of(m), w && !reads(m.access()))
                    }
                    None => (if explicit.is_empty() { MEM0 } else { name_of_fallback(&explicit) }, w),
                }
            })
            .collect();

        // Slots: registers read, the segment base, the references read; the write-only
        // registers' and memory's earlier values; registers and memory written.
        let mut slots = Slots::default();
        for u in info.used_registers() {
            let (r, a) = (registers::number(u.register()), u.access());
            let size = u.register().size() as u16;
            if reads(a) && slots.find(Group::Before, r).is_none() {
                slots.add(Group::Before, r, size, false);
            }
            if writes(a) && !reads(a) && slots.find(Group::WriteOnly, r).is_none() {
                slots.add(Group::WriteOnly, r, size, false);
            }
            if writes(a) && slots.find(Group::After, r).is_none() {
                slots.add(Group::After, r, size, false);
            }
        }
        for k in 0..ops {
            if i.op_kind(k) == OpKind::Register {
                let r = registers::number(i.op_register(k));
                if [Group::Before, Group::WriteOnly].iter().all(|&g| slots.find(g, r).is_none()) {
                    slots.add(Group::Before, r, i.op_register(k).size() as u16, false);
                }
            }
        }
        let seg = match i.memory_segment() {
            Register::FS if !explicit.is_empty() => Some(slots.add(Group::Before, FS_BASE, 8, false)),
            Register::GS if !explicit.is_empty() => Some(slots.add(Group::Before, GS_BASE, 8, false)),
            _ => None,
        };
        // Slot of each reference: (before-or-after slot, write-only earlier-value slot).
        let mut ref_slots: Vec<(usize, Option<usize>)> = Vec::with_capacity(refs.len());
        for (k, &(name, write_only)) in refs.iter().enumerate() {
            let size = made[k].1.min(i16::MAX as u32) as u16;
            if made[k].0 == Access::Read {
                ref_slots.push((slots.add(Group::Before, name, size, true), None));
            } else {
                let early = write_only.then(|| slots.add(Group::WriteOnly, name, size, true));
                ref_slots.push((slots.add(Group::After, name, size, true), early));
            }
        }
        // Memory operands with no reference (lea, nop, prefetch): their address alone.
        let mut agen: [Option<usize>; 2] = [None; 2];
        for (a, name) in agen.iter_mut().zip([MEM0, MEM1]).take(explicit.len()) {
            if !refs.iter().any(|&(r, _)| r == name) {
                *a = Some(slots.add(Group::Before, AGEN, 8, true));
            }
        }

        // A local context holds at most i16::MAX bytes (LCSize is an i16): memory values
        // beyond (an XSAVE area a profile declares larger than any CPU's) are cut so that
        // every slot, and its exact address, fits.
        let total = |slots: &Slots| slots.0.iter().map(Slot::extent).sum::<usize>();
        while total(&slots) > i16::MAX as usize {
            let Some(big) = slots.0.iter_mut().filter(|s| s.addr && s.reg != AGEN).max_by_key(|s| s.size) else { break };
            big.size /= 2;
        }
        // Fix the order (stable within a group) and the offsets.
        let mut order: Vec<usize> = (0..slots.0.len()).collect();
        order.sort_by_key(|&k| slots.0[k].group);
        let mut index = vec![0u8; slots.0.len()];
        let mut offset = vec![0u16; slots.0.len()];
        let mut at = 0usize;
        for (pos, &k) in order.iter().enumerate() {
            index[k] = pos.min(SLOT_NA as usize - 3) as u8;
            offset[k] = at.min(u16::MAX as usize) as u16;
            at += slots.0[k].extent();
        }
        let lc_size = at.min(i16::MAX as usize) as u16;
        let first_out = order.iter().position(|&k| slots.0[k].group != Group::Before).unwrap_or(order.len());
        let first_after = order.iter().position(|&k| slots.0[k].group == Group::After).unwrap_or(order.len());
        let addr_at = ref_slots.iter().map(|&(s, early)| [offset[s], early.map_or(u16::MAX, |e| offset[e])]).collect();

        // The explicit operands.
        // The constant slots: MEM0's displacement first, then the explicit constants.
        let mut consts = Consts::default();
        if !explicit.is_empty() {
            consts.take(i.memory_displacement64());
        }
        let slot_of = |g: Group, reg: u16| slots.find(g, reg).map(|k| index[k]);
        let mut exp = Vec::with_capacity(48);
        for k in 0..ops {
            let kind = i.op_kind(k);
            let access = info.op_access(k);
            let mut flags = reads(access) as u8 | (writes(access) as u8) << 1;
            let (reg, size, before, after, off) = match kind {
                OpKind::Register => {
                    let r = i.op_register(k);
                    let n = registers::number(r);
                    let before = slot_of(Group::Before, n).or(slot_of(Group::WriteOnly, n)).unwrap_or(SLOT_NA);
                    let after = if writes(access) { slot_of(Group::After, n).unwrap_or(SLOT_NA) } else { SLOT_NA };
                    (n, r.size() as u16, before, after, 0u8)
                }
                k2 if is_memory(k2) => {
                    let n = explicit.iter().position(|&(op, _)| op == k).unwrap_or(0);
                    let name = if n == 0 { MEM0 } else { MEM1 };
                    if let Some(s) = agen[n.min(1)] {
                        flags = 1;
                        (AGEN, 8, index[s], SLOT_NA, 0)
                    } else {
                        let read = refs.iter().zip(&ref_slots).zip(made.iter()).find(|((r, _), m)| r.0 == name && m.0 == Access::Read);
                        let write = refs.iter().zip(&ref_slots).zip(made.iter()).find(|((r, _), m)| r.0 == name && m.0 == Access::Write);
                        let before = match (read, write) {
                            (Some(((_, s), _)), _) => index[s.0],
                            (None, Some(((_, s), _))) => s.1.map_or(index[s.0], |e| index[e]),
                            _ => SLOT_NA,
                        };
                        let after = write.map_or(SLOT_NA, |((_, s), _)| index[s.0]);
                        // The operand's size, within its slot's (a broadcast or a masked
                        // form may name more than is accessed).
                        let made_size = read.or(write).map_or(0, |((_, s), _)| slots.0[s.0].size as u32);
                        let size = (i.memory_size().size() as u32).min(made_size).max(1).min(u16::MAX as u32) as u16;
                        (name, size, before, after, 8)
                    }
                }
                OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
                    (0, 8, consts.take(i.near_branch_target()), SLOT_NA, 0)
                }
                OpKind::FarBranch16 | OpKind::FarBranch32 => (0, 4, consts.take(i.far_branch32() as u64), SLOT_NA, 0),
                _ => {
                    // An immediate.
                    let size = match kind {
                        OpKind::Immediate8
                        | OpKind::Immediate8_2nd
                        | OpKind::Immediate8to16
                        | OpKind::Immediate8to32
                        | OpKind::Immediate8to64 => 1,
                        OpKind::Immediate16 => 2,
                        OpKind::Immediate32 | OpKind::Immediate32to64 => 4,
                        _ => 8,
                    };
                    (0, size, consts.take(i.immediate(k)), SLOT_NA, 0)
                }
            };
            exp.extend_from_slice(&reg.to_le_bytes());
            exp.extend_from_slice(&size.to_le_bytes());
            exp.extend_from_slice(&[flags.max(1), before, after, off, if after == SLOT_NA { 0 } else { off }, 0, 0, 0]);
        }
        exp.resize(48, 0);

        // The memory phrase of MEM0 (or AGEN) and the base of MEM1.
        let reg_slot = |r: Register| {
            if r == Register::None || r == Register::RIP || r == Register::EIP {
                SLOT_NA
            } else {
                slot_of(Group::Before, registers::number(r)).unwrap_or(SLOT_NA)
            }
        };
        let (seg_slot, base_slot, scale, index_slot) = match explicit.first() {
            Some(&(_, k)) => {
                let idx = if k == OpKind::Memory { i.memory_index() } else { Register::None };
                (
                    seg.map_or(SLOT_NA, |s| index[s]),
                    reg_slot(memory_base(&i, k)),
                    if idx == Register::None { 0 } else { i.memory_index_scale() as u8 },
                    reg_slot(idx),
                )
            }
            None => (SLOT_NA, SLOT_NA, 0, SLOT_NA),
        };
        let mem1_base = explicit.get(1).map_or(SLOT_NA, |&(_, k)| reg_slot(memory_base(&i, k)));

        let mut flags = 0u8;
        if i.has_rep_prefix() || i.has_repe_prefix() {
            flags |= 0x01;
        }
        if i.has_repne_prefix() {
            flags |= 0x02;
        }
        if i.has_lock_prefix() {
            flags |= 0x04;
        }
        // A 32-bit general register written (iced reports the whole register as written,
        // its upper half being zeroed, so the operands say which).
        if (0..ops).any(|k| i.op_kind(k) == OpKind::Register && i.op_register(k).is_gpr32() && writes(info.op_access(k))) {
            flags |= 0x08;
        }
        if made.iter().any(|r| r.0 == Access::Read) {
            flags |= 0x10;
        }
        if made.iter().any(|r| r.0 == Access::Write) {
            flags |= 0x20;
        }
        let oper_size = (0..ops)
            .find_map(|k| match i.op_kind(k) {
                OpKind::Register if i.op_register(k).is_gpr() => Some(i.op_register(k).size()),
                kd if is_memory(kd) && matches!(i.memory_size().size(), 2 | 4 | 8) => Some(i.memory_size().size()),
                _ => None,
            })
            .unwrap_or(if i.is_stack_instruction() { 8 } else { 4 }) as u8;
        let addr_size = match explicit.first() {
            Some(&(_, k)) if memory_base(&i, k).size() == 4 || (k == OpKind::Memory && i.memory_index().size() == 4) => 4,
            _ => 8,
        };

        let mut d = Vec::with_capacity(DECODED_HEAD + SLOT * order.len());
        d.extend_from_slice(&(i.flow_control() as u16).to_le_bytes());
        d.extend_from_slice(&(i.mnemonic() as u16).to_le_bytes());
        d.extend_from_slice(&(i.code() as u16).to_le_bytes());
        d.push(flags);
        d.push(ops as u8);
        d.extend_from_slice(&exp);
        d.push(oper_size);
        d.push(addr_size);
        d.extend_from_slice(&lc_size.to_le_bytes());
        d.push(first_out as u8);
        d.push(first_after as u8);
        d.push(order.len().min(253) as u8);
        d.extend_from_slice(&[seg_slot, base_slot, scale, index_slot, mem1_base, 0, 0, 0, 0]);
        d.extend_from_slice(&consts.values[0].to_le_bytes());
        d.extend_from_slice(&consts.values[1].to_le_bytes());
        debug_assert_eq!(d.len(), DECODED_HEAD);
        for &k in order.iter().take(253) {
            let s = &slots.0[k];
            d.extend_from_slice(&s.reg.to_le_bytes());
            d.extend_from_slice(&registers::common(s.reg).to_le_bytes());
            d.extend_from_slice(&s.size.to_le_bytes());
            d.extend_from_slice(&offset[k].to_le_bytes());
            d.extend_from_slice(&[if s.addr { 8 } else { 0 }, 0, 0, 0]);
        }
        Row {
            pc: src.pc,
            code: src.code.to_vec(),
            kind: kind(&i),
            module: src.module,
            disasm,
            decoded: d,
            lc_size,
            addr_at,
            rep: src.rep,
            fixed: src.fixed,
        }
    }
}

/// The two constant slots, filled in order.
#[derive(Default)]
struct Consts {
    values: [u64; 2],
    used: usize,
}

impl Consts {
    /// Puts `v` in the next constant slot and names it (no instruction has more than two
    /// constants with a displacement: beyond, none).
    fn take(&mut self, v: u64) -> u8 {
        match self.values.get_mut(self.used) {
            Some(slot) => {
                *slot = v;
                self.used += 1;
                SLOT_IMM0 + self.used as u8 - 1
            }
            None => SLOT_NA,
        }
    }
}

/// The name of a reference iced's operands do not explain, beside explicit memory operands.
fn name_of_fallback(explicit: &[(u32, OpKind)]) -> u16 {
    if explicit.len() > 1 {
        MEM1
    } else {
        MEM0
    }
}

/// The insRec of `row` numbered `id`, whose strings are at `disasm` and `decoded` from the
/// extra area's start.
pub fn ins_rec(id: u64, row: &Row, disasm: u64, decoded: u64) -> [u8; INS_REC] {
    let mut b = [0u8; INS_REC];
    b[0..8].copy_from_slice(&id.to_le_bytes());
    b[8] = row.kind;
    b[9] = 1;
    b[10] = row.code.len() as u8;
    b[12..16].copy_from_slice(&row.module.to_le_bytes());
    b[16..24].copy_from_slice(&row.pc.to_le_bytes());
    b[24..24 + row.code.len()].copy_from_slice(&row.code);
    b[40..48].copy_from_slice(&disasm.to_le_bytes());
    b[48..56].copy_from_slice(&decoded.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use dep_profile::semantics::{Machine, Semantics};
    use dep_profile::BlockPlan;

    /// The row of the single instruction `bytes` at `pc`.
    fn row(pc: u64, bytes: &[u8]) -> Row {
        let plan = BlockPlan::build(&mut Semantics::new(Machine::x86_64(2696)), pc, bytes, None).unwrap();
        let full = shape(&plan.insns[0]);
        Builder::default().row(&Origin::of(&plan.insns[0], bytes, -1, &full), None)
    }

    /// decodedIns fields read by the format's offsets (§7.3.3, Mem1BaseSlot at 67).
    struct View<'a>(&'a [u8]);

    impl View<'_> {
        fn u8(&self, at: usize) -> u8 {
            self.0[at]
        }
        fn u16(&self, at: usize) -> u16 {
            u16::from_le_bytes([self.0[at], self.0[at + 1]])
        }
        fn u64(&self, at: usize) -> u64 {
            u64::from_le_bytes(self.0[at..at + 8].try_into().unwrap())
        }
        /// Slot `i`: register name, value size, offset, address width.
        fn slot(&self, i: u8) -> (u16, u16, u16, u8) {
            let at = 88 + 12 * i as usize;
            (self.u16(at), self.u16(at + 4), self.u16(at + 6), self.u8(at + 8))
        }
        /// Explicit operand `k`: name, size, flags, before slot, after slot, before offset.
        fn op(&self, k: usize) -> (u16, u16, u8, u8, u8, u8) {
            let at = 8 + 12 * k;
            (self.u16(at), self.u16(at + 2), self.u8(at + 4), self.u8(at + 5), self.u8(at + 6), self.u8(at + 7))
        }
        fn groups(&self) -> (u8, u8, u8) {
            (self.u8(60), self.u8(61), self.u8(62))
        }
    }

    const RAX: u16 = Register::RAX as u16;
    /// The format's constant slot 1.
    const SLOT_IMM1: u8 = 0xfe;

    #[test]
    fn a_byte_store_has_its_address_before_and_after() {
        // §7.2.1's example in 64-bit form: mov byte ptr [rax], al.
        let r = row(0x1000, &[0x88, 0x00]);
        let d = View(&r.decoded);
        assert_eq!(d.u16(2), Mnemonic::Mov as u16);
        assert_eq!(d.u8(6) & 0x30, 0x20, "writes memory, reads none");
        assert_eq!(d.u8(7), 2, "two explicit operands");
        let (first_out, first_after, count) = d.groups();
        let (mem, size, flags, mem_before, mem_after, off) = d.op(0);
        assert_eq!((mem, size, flags, off), (MEM0, 1, 2, 8));
        // Written only: its earlier value is in the write-only group, its new one after.
        assert!((first_out..first_after).contains(&mem_before) && (first_after..count).contains(&mem_after));
        assert_eq!(d.slot(mem_before).0, MEM0);
        assert_eq!(d.slot(mem_after), (MEM0, 1, d.slot(mem_after).2, 8));
        let (al, size, flags, before, after, _) = d.op(1);
        assert_eq!((al, size, flags, after), (Register::AL as u16, 1, 1, SLOT_NA));
        assert!(before < first_out);
        // The phrase: base rax, no index, no displacement.
        assert_eq!(d.slot(d.u8(64)).0, RAX);
        assert_eq!((d.u8(65), d.u8(66), d.u8(63), d.u64(72)), (0, SLOT_NA, SLOT_NA, 0));
        // The one reference's address goes to both memory slots.
        assert_eq!(r.addr_at, vec![[d.slot(mem_after).2, d.slot(mem_before).2]]);
        let slots_end = (0..count).map(|i| d.slot(i)).map(|(_, v, o, w)| o + v + if w > 0 { 8 } else { 0 }).max().unwrap();
        assert_eq!(r.lc_size, slots_end);
    }

    #[test]
    fn lea_generates_an_address_from_its_phrase() {
        // lea rax, [rbx+rcx*4+8]
        let r = row(0x1000, &[0x48, 0x8d, 0x44, 0x8b, 0x08]);
        let d = View(&r.decoded);
        assert!(r.addr_at.is_empty(), "no reference");
        let (agen, _, flags, before, after, _) = d.op(1);
        assert_eq!((agen, flags, after), (AGEN, 1, SLOT_NA));
        assert_eq!(d.slot(before).0, AGEN);
        assert_eq!(d.slot(d.u8(64)).0, Register::RBX as u16);
        assert_eq!(d.slot(d.u8(66)).0, Register::RCX as u16);
        assert_eq!((d.u8(65), d.u64(72)), (4, 8));
        let (dst, size, flags, before, after, _) = d.op(0);
        assert_eq!((dst, size, flags), (RAX, 8, 2));
        let (first_out, first_after, count) = d.groups();
        assert!((first_out..first_after).contains(&before) && (first_after..count).contains(&after));
    }

    #[test]
    fn push_writes_the_stack_and_rip_relative_loads_are_absolute() {
        let r = row(0x1000, &[0x53]); // push rbx
        let d = View(&r.decoded);
        let (_, first_after, count) = d.groups();
        let pushed: Vec<_> = (first_after..count).map(|i| d.slot(i)).filter(|s| s.3 > 0).collect();
        assert_eq!(pushed.len(), 1);
        assert_eq!((pushed[0].0, pushed[0].1), (STACKPUSH, 8));

        // mov eax, [rip+0x10] at 0x1000: the displacement is the absolute 0x1016.
        let r = row(0x1000, &[0x8b, 0x05, 0x10, 0, 0, 0]);
        let d = View(&r.decoded);
        assert_eq!(d.u64(72), 0x1016);
        assert_eq!(d.u8(64), SLOT_NA, "no base register slot for rip");
        assert_eq!(d.u8(6) & 0x38, 0x18, "a 32-bit result zero-extended, reading memory");
        assert_eq!(r.addr_at.len(), 1);
    }

    #[test]
    fn an_xsave_area_larger_than_a_local_context_is_cut_to_fit() {
        // xsave [rax] in a profile declaring a 64 KiB XSAVE area (more than any CPU's, and
        // more than an i16 LCSize holds): every slot and address still inside the record.
        let code = [0x0f, 0xae, 0x20];
        let plan = BlockPlan::build(&mut Semantics::new(Machine::x86_64(65536)), 0x1000, &code, None).unwrap();
        assert!(plan.insns[0].refs.iter().any(|r| r.size == 65536));
        let full = shape(&plan.insns[0]);
        let r = Builder::default().row(&Origin::of(&plan.insns[0], &code, -1, &full), None);
        let d = View(&r.decoded);
        assert!(r.lc_size as usize <= i16::MAX as usize);
        for i in 0..d.groups().2 {
            let (_, size, offset, width) = d.slot(i);
            assert!(offset as usize + size as usize + if width > 0 { 8 } else { 0 } <= r.lc_size as usize);
        }
        assert!(!r.addr_at.is_empty());
        for &o in r.addr_at.iter().flatten().filter(|&&o| o != u16::MAX) {
            assert!(o as usize + 8 <= r.lc_size as usize);
        }
    }

    #[test]
    fn an_immediate_takes_the_constant_slot_after_the_displacement() {
        // add dword ptr [rbx+0x20], 7
        let r = row(0x1000, &[0x83, 0x43, 0x20, 0x07]);
        let d = View(&r.decoded);
        assert_eq!(d.u64(72), 0x20);
        let (_, size, _, before, _, _) = d.op(1);
        assert_eq!((before, d.u64(80)), (SLOT_IMM1, 7));
        assert_eq!(size, 1);
        // Read and written: before slot in the first group, after slot in the last.
        let (mem, _, flags, before, after, _) = d.op(0);
        let (first_out, first_after, _) = d.groups();
        assert_eq!((mem, flags), (MEM0, 3));
        assert!(before < first_out && after >= first_after);
        assert_eq!(r.addr_at.len(), 2, "a read and a write");
    }
}
