//! ChampSim's `input_instr` record and what dep puts in it: the 64-byte layout, register
//! numbers as ChampSim's Pin tracer writes them (its branch deduction reads the stack
//! pointer, flags and instruction pointer by number), and each instruction's record made
//! once from its semantics, to be copied per execution with its memory addresses.

use dep_profile::archregs::ArchReg;
use dep_profile::semantics::{Access, Flow, Insn, Special};

/// Bytes per record.
pub const RECORD: usize = 64;
/// Destination and source register slots, and memory slots, per record.
pub const DST_REGS: usize = 2;
pub const SRC_REGS: usize = 4;
pub const DST_MEM: usize = 2;
pub const SRC_MEM: usize = 4;

/// ChampSim's numbers for the registers its branch deduction looks at (Pin's `REG_RSP`,
/// `REG_RFLAGS`, `REG_RIP`).
pub const REG_STACK_POINTER: u8 = 6;
pub const REG_FLAGS: u8 = 25;
pub const REG_INSTRUCTION_POINTER: u8 = 26;
/// The source dep names for a branch target loaded from memory through no general
/// register (`jmp [rip+x]`, `call [abs]`): a number no instruction writes, so it makes
/// ChampSim see an indirect branch and adds no dependence.
pub const REG_LOADED_TARGET: u8 = 255;

/// Offsets of the fields.
const IS_BRANCH: usize = 8;
const TAKEN: usize = 9;
const DST: usize = 10;
const SRC: usize = 12;
const DST_MEMORY: usize = 16;
const SRC_MEMORY: usize = 32;

/// ChampSim's number for a register: Pin's `REG_*` number for the general registers
/// (rdi 3, rsi 4, rbp 5, rsp 6, rbx 7, rdx 8, rcx 9, rax 10, r8–r15 11–18) and segment
/// registers (cs 19, ss 20, ds 21, es 22, fs 23, gs 24); for the rest, numbers of dep's
/// own above the instruction pointer's 26: zmm0–31 27–58, k0–7 59–66, st0–7 67–74, bnd0–3
/// 75–78, tmm0–7 79–86, cr0–15 87–102, dr0–15 103–118, tr0–7 119–126. A register's parts
/// (eax, ax, al; xmm3, ymm3) have the number of the whole, so ChampSim sees them depend.
pub fn number(r: ArchReg) -> u8 {
    // dep's order: rax rcx rdx rbx rsp rbp rsi rdi r8..r15; es cs ss ds fs gs.
    const GPR: [u8; 16] = [10, 9, 8, 7, 6, 5, 4, 3, 11, 12, 13, 14, 15, 16, 17, 18];
    const SEG: [u8; 6] = [22, 19, 20, 21, 23, 24];
    match r.0 {
        n @ 0..=15 => GPR[n as usize],
        n @ 16..=55 => n + 11,
        n @ 56..=61 => SEG[(n - 56) as usize],
        n => n.saturating_add(5),
    }
}

/// How an instruction's record is completed per execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Not a branch, or a branch always taken.
    Fixed,
    /// A conditional branch: taken when the next block does not start at `fallthrough`.
    Conditional { fallthrough: u64 },
    /// A rep string: one record per iteration, each with `per_iteration` references (as
    /// Pin calls a tracer once per iteration).
    Rep { per_iteration: u8 },
}

/// An instruction's record with its memory slots empty, and how to complete it.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    pub bytes: [u8; RECORD],
    pub kind: Kind,
}

/// A record's slots of one kind (registers, or addresses): each distinct value once, in
/// the order met, as many as fit, as the tracer keeps them; 0 is the format's "none".
#[derive(Clone, Copy)]
struct Distinct<T, const N: usize> {
    values: [T; N],
    len: usize,
}

impl<T: Copy + Default + PartialEq, const N: usize> Default for Distinct<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> Distinct<T, N> {
    fn new() -> Self {
        Distinct { values: [T::default(); N], len: 0 }
    }

    /// Adds `v`; false when it is new and the slots are full.
    #[inline]
    fn add(&mut self, v: T) -> bool {
        if v == T::default() || self.values[..self.len].contains(&v) {
            return true;
        }
        if self.len == N {
            return false;
        }
        self.values[self.len] = v;
        self.len += 1;
        true
    }

    fn values(&self) -> &[T] {
        &self.values[..self.len]
    }
}

impl Template {
    /// The record of `insn`. A branch lists, first, what ChampSim's deduction needs of it
    /// (the tracer's registers for its kind: the instruction pointer, the stack pointer
    /// of calls and returns, the flags a conditional branch reads, the registers its target
    /// comes from); then the other registers it reads and writes, general and vector
    /// registers before the flags, as many as the slots hold.
    pub fn of(insn: &Insn) -> Template {
        // (A register that does not fit is left out: the slots keep what came first.)
        let mut src = Distinct::<u8, SRC_REGS>::new();
        let mut dst = Distinct::<u8, DST_REGS>::new();
        let regs = &insn.regs;
        let sp = ArchReg::RSP;
        let reads_flags = regs.flags_read != 0;
        // The registers a branch's target comes from: those it reads but the stack pointer.
        let target_regs = || regs.reads.iter().filter(move |&r| r != sp).map(number);
        // An indirect branch's target: its registers, or the loaded-target number.
        let indirect_target = |src: &mut Distinct<u8, SRC_REGS>| {
            let before = src.len;
            for r in target_regs() {
                src.add(r);
            }
            if src.len == before {
                src.add(REG_LOADED_TARGET);
            }
        };
        let mut kind = Kind::Fixed;
        let mut branch = true;
        let taken_always;
        match insn.flow {
            Flow::Jump { conditional: false, .. } => {
                src.add(REG_INSTRUCTION_POINTER);
                dst.add(REG_INSTRUCTION_POINTER);
                taken_always = true;
            }
            Flow::Jump { conditional: true, .. } => {
                // jcc reads the flags; jrcxz and loop read rcx (loope/loopne both).
                src.add(REG_INSTRUCTION_POINTER);
                if reads_flags {
                    src.add(REG_FLAGS);
                }
                for r in target_regs() {
                    src.add(r);
                }
                dst.add(REG_INSTRUCTION_POINTER);
                kind = Kind::Conditional { fallthrough: insn.pc.wrapping_add(insn.len as u64) };
                taken_always = false;
            }
            Flow::IndirectJump => {
                indirect_target(&mut src);
                dst.add(REG_INSTRUCTION_POINTER);
                taken_always = true;
            }
            Flow::Call { .. } | Flow::IndirectCall => {
                src.add(REG_STACK_POINTER);
                src.add(REG_INSTRUCTION_POINTER);
                if insn.flow == Flow::IndirectCall {
                    indirect_target(&mut src);
                }
                dst.add(REG_STACK_POINTER);
                dst.add(REG_INSTRUCTION_POINTER);
                taken_always = true;
            }
            Flow::Return => {
                src.add(REG_STACK_POINTER);
                dst.add(REG_STACK_POINTER);
                dst.add(REG_INSTRUCTION_POINTER);
                taken_always = true;
            }
            // System calls, traps and the rest: execution goes on after them as far as a
            // trace of the thread shows, so ChampSim sees no branch.
            Flow::Next | Flow::Syscall | Flow::Other => {
                branch = false;
                taken_always = false;
            }
        }
        if !branch {
            // A plain instruction's registers: what it reads, then the flags; what it
            // writes, then the flags.
            for r in regs.reads.iter() {
                src.add(number(r));
            }
            if reads_flags {
                src.add(REG_FLAGS);
            }
            for r in regs.writes.iter() {
                dst.add(number(r));
            }
            if regs.flags_written != 0 {
                dst.add(REG_FLAGS);
            }
        } else {
            // A branch's other registers (loop's rcx, a call's written return address
            // register stays rsp): only where they change no deduction, i.e. writes.
            for r in regs.writes.iter().filter(|&r| r != sp) {
                dst.add(number(r));
            }
        }
        if let Special::Rep(_) = insn.special {
            kind = Kind::Rep { per_iteration: insn.refs.len().min(u8::MAX as usize) as u8 };
        }
        let mut bytes = [0u8; RECORD];
        bytes[..8].copy_from_slice(&insn.pc.to_le_bytes());
        bytes[IS_BRANCH] = branch as u8;
        bytes[TAKEN] = taken_always as u8;
        bytes[DST..DST + DST_REGS].copy_from_slice(&dst.values);
        bytes[SRC..SRC + SRC_REGS].copy_from_slice(&src.values);
        Template { bytes, kind }
    }
}

/// Memory addresses of one record, kept as the tracer keeps them.
#[derive(Default)]
pub struct Memory {
    src: Distinct<u64, SRC_MEM>,
    dst: Distinct<u64, DST_MEM>,
    /// Distinct addresses that did not fit.
    pub dropped: u64,
}

impl Memory {
    /// An access of `addr` (an access at 0, the format's "none", is not representable).
    #[inline]
    pub fn add(&mut self, access: Access, addr: u64) {
        let fits = match access {
            Access::Read => self.src.add(addr),
            Access::Write => self.dst.add(addr),
        };
        self.dropped += !fits as u64;
    }

    /// Writes the addresses into `rec`, and empties the sets (keeping the dropped count).
    #[inline]
    pub fn fill(&mut self, rec: &mut [u8]) {
        for (k, a) in self.dst.values().iter().enumerate() {
            rec[DST_MEMORY + 8 * k..DST_MEMORY + 8 * k + 8].copy_from_slice(&a.to_le_bytes());
        }
        for (k, a) in self.src.values().iter().enumerate() {
            rec[SRC_MEMORY + 8 * k..SRC_MEMORY + 8 * k + 8].copy_from_slice(&a.to_le_bytes());
        }
        (self.src.len, self.dst.len) = (0, 0);
    }
}

/// Sets a record's taken flag.
#[inline]
pub fn set_taken(rec: &mut [u8], taken: bool) {
    rec[TAKEN] = taken as u8;
}

#[cfg(test)]
mod tests {
    use super::*;
    use dep_profile::{BlockPlan, Machine, Semantics};

    fn template(bytes: &[u8]) -> Template {
        let mut sem = Semantics::new(Machine::x86_64(2696));
        let plan = BlockPlan::build(&mut sem, 0x1000, bytes, None).expect("decodes");
        Template::of(&plan.insns[0])
    }

    fn src(t: &Template) -> Vec<u8> {
        t.bytes[SRC..SRC + SRC_REGS].iter().copied().filter(|&r| r != 0).collect()
    }

    fn dst(t: &Template) -> Vec<u8> {
        t.bytes[DST..DST + DST_REGS].iter().copied().filter(|&r| r != 0).collect()
    }

    #[test]
    fn registers_are_numbered_as_pin_numbers_them() {
        // Pin's REG_RDI..REG_R15, REG_SEG_CS..GS (ChampSim's REG_STACK_POINTER is rsp).
        let names = |n: u8| (0..122u8).map(ArchReg).find(|&r| number(r) == n).map(|r| r.name());
        for (n, name) in
            [(3, "rdi"), (4, "rsi"), (5, "rbp"), (6, "rsp"), (7, "rbx"), (8, "rdx"), (9, "rcx"), (10, "rax"), (11, "r8"), (18, "r15")]
        {
            assert_eq!(names(n).as_deref(), Some(name), "{n}");
        }
        for (n, name) in [(19, "cs"), (20, "ss"), (21, "ds"), (22, "es"), (23, "fs"), (24, "gs")] {
            assert_eq!(names(n).as_deref(), Some(name), "{n}");
        }
        // Every register its own number, none on the flags, the instruction pointer or
        // the loaded-target number.
        let all: std::collections::HashSet<u8> = (0..122u8).map(|r| number(ArchReg(r))).collect();
        assert_eq!(all.len(), 122);
        for n in [0, REG_FLAGS, REG_INSTRUCTION_POINTER, REG_LOADED_TARGET] {
            assert!(!all.contains(&n), "{n} taken by a register");
        }
    }

    #[test]
    fn branches_carry_what_the_deduction_reads() {
        // jne +5: ip and flags in, ip out; jrcxz: ip and rcx in; loop: rcx out too.
        let t = template(&[0x75, 0x05]);
        assert_eq!((src(&t), dst(&t)), (vec![REG_INSTRUCTION_POINTER, REG_FLAGS], vec![REG_INSTRUCTION_POINTER]));
        assert_eq!(t.kind, Kind::Conditional { fallthrough: 0x1002 });
        let t = template(&[0xe3, 0x05]);
        assert_eq!((src(&t), dst(&t)), (vec![REG_INSTRUCTION_POINTER, 9], vec![REG_INSTRUCTION_POINTER]));
        let t = template(&[0xe2, 0x05]);
        assert_eq!((src(&t), dst(&t)), (vec![REG_INSTRUCTION_POINTER, 9], vec![REG_INSTRUCTION_POINTER, 9]));
        // call rel32; ret; call rax; jmp rax; jmp [rip+0]; call [rip+0].
        let t = template(&[0xe8, 0, 0, 0, 0]);
        assert_eq!(
            (src(&t), dst(&t)),
            (vec![REG_STACK_POINTER, REG_INSTRUCTION_POINTER], vec![REG_STACK_POINTER, REG_INSTRUCTION_POINTER])
        );
        let t = template(&[0xc3]);
        assert_eq!((src(&t), dst(&t)), (vec![REG_STACK_POINTER], vec![REG_STACK_POINTER, REG_INSTRUCTION_POINTER]));
        let t = template(&[0xff, 0xd0]);
        assert_eq!(src(&t), vec![REG_STACK_POINTER, REG_INSTRUCTION_POINTER, 10]);
        let t = template(&[0xff, 0xe0]);
        assert_eq!((src(&t), dst(&t)), (vec![10], vec![REG_INSTRUCTION_POINTER]));
        let t = template(&[0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(src(&t), vec![REG_LOADED_TARGET]);
        let t = template(&[0xff, 0x15, 0, 0, 0, 0]);
        assert_eq!(src(&t), vec![REG_STACK_POINTER, REG_INSTRUCTION_POINTER, REG_LOADED_TARGET]);
        // add rax, rbx: a plain instruction, flags after the registers.
        let t = template(&[0x48, 0x01, 0xd8]);
        assert_eq!(t.bytes[IS_BRANCH], 0);
        assert_eq!((src(&t), dst(&t)), (vec![10, 7], vec![10, REG_FLAGS]));
    }

    #[test]
    fn memory_keeps_distinct_addresses_that_fit() {
        let mut m = Memory::default();
        for a in [8, 8, 16, 24, 32, 40, 0] {
            m.add(Access::Read, a);
        }
        m.add(Access::Write, 8);
        let mut rec = [0u8; RECORD];
        m.fill(&mut rec);
        let at = |o: usize| u64::from_le_bytes(rec[o..o + 8].try_into().unwrap());
        assert_eq!((0..4).map(|k| at(SRC_MEMORY + 8 * k)).collect::<Vec<_>>(), vec![8, 16, 24, 32]);
        assert_eq!((at(DST_MEMORY), at(DST_MEMORY + 8)), (8, 0));
        assert_eq!(m.dropped, 1);
    }
}
