//! Each static instruction's part in the dependence engine, worked out once per
//! instruction instead of once per instance: its register byte spans, use ports, memory
//! operands and value rules, in one flat table the engine's inner loop reads without
//! following the block plans' pointers.

use super::shadow::{RegSpan, Registers};
use super::statics::Statics;
use super::values::{self, Step};
use dep_profile::semantics::{Access, Flow, Insn, Special};
use dep_recover::plans::Plans;

/// An instruction is a rep string: each iteration is an instance.
pub const REP: u8 = 1;
/// A gather: its addresses reveal no register's value.
pub const GATHER: u8 = 2;
/// A conditional or indirect jump: it may open a control-dependence region.
pub const BRANCH: u8 = 4;

/// What the engine needs of one instruction of one block.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub pc: u64,
    /// Its static id.
    pub id: u32,
    /// The graph node starting here, or [`super::statics::NO_NODE`].
    pub node: u32,
    /// Its first store segment (the control port's).
    pub seg0: u32,
    /// Where its register reads, definitions, memory operands and value steps start in
    /// [`Ops`]' shared arrays.
    reads_at: u32,
    defs_at: u32,
    refs_at: u32,
    steps_at: u32,
    reads_n: u16,
    defs_n: u16,
    steps_n: u16,
    /// Memory references of one execution (one iteration of a rep string), and the reads
    /// among them (they come first).
    pub refs_n: u16,
    pub mem_reads: u16,
    /// The use port of its first memory read, after control, registers and flags.
    pub mem_port: u16,
    pub flags_read: u32,
    pub flags_written: u32,
    /// [`REP`], [`GATHER`], [`BRANCH`].
    pub kind: u8,
}

/// The register an operand's address reveals (its only register, 64 bits, no segment) and
/// the displacement to take off the address for its value.
#[derive(Clone, Copy, Debug)]
pub struct Reveal {
    pub reg: Option<u8>,
    pub disp: u64,
}

/// Every block's instructions' [`Op`]s, each block's together (a block's run reads them in
/// order).
pub struct Ops {
    /// Per block id, where its instructions start in `ops` and how many it has ([`NO_PLAN`]
    /// for a block without a plan, which has none): the engine asks at every block, and a
    /// block's plan, ten times the size, is a cache miss further.
    blocks: Vec<(u32, u32)>,
    ops: Vec<Op>,
    spans: Vec<RegSpan>,
    reveals: Vec<Reveal>,
    steps: Vec<Step>,
}

/// A block without a plan, in [`Ops`]' table.
const NO_PLAN: u32 = u32::MAX;

fn len16(n: usize) -> u16 {
    u16::try_from(n).expect("an instruction's operands fit 16 bits")
}

impl Ops {
    /// The table for every block of `plans`, with `st`'s ids, nodes and segments.
    pub fn build(st: &Statics, plans: &Plans) -> Ops {
        let mut ops =
            Ops { blocks: Vec::with_capacity(st.blocks()), ops: Vec::new(), spans: Vec::new(), reveals: Vec::new(), steps: Vec::new() };
        for b in 0..st.blocks() as u32 {
            let first = ops.ops.len() as u32;
            let Some(p) = plans.get_plan(b) else {
                ops.blocks.push((first, NO_PLAN));
                continue;
            };
            for (k, (insn, &id)) in p.insns.iter().zip(st.block(b)).enumerate() {
                let op = ops.add(insn, id, st.node(b, k as u16), st.insns[id as usize].first_seg);
                ops.ops.push(op);
            }
            ops.blocks.push((first, p.insns.len() as u32));
        }
        ops
    }

    /// Blocks of the table (with a plan or not).
    pub fn blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Where block `b`'s instructions start.
    #[inline]
    pub fn first(&self, b: u32) -> u32 {
        self.blocks[b as usize].0
    }

    /// How many instructions block `b` has, if it has a plan (as `Plans::get_plan`
    /// answers).
    #[inline]
    pub fn len(&self, b: u32) -> Option<u32> {
        self.blocks.get(b as usize).map(|&(_, n)| n).filter(|&n| n != NO_PLAN)
    }

    /// The instruction at `at` (a block's [`first`](Self::first) plus its index there).
    #[inline]
    pub fn op(&self, at: u32) -> &Op {
        &self.ops[at as usize]
    }

    fn add(&mut self, insn: &Insn, id: u32, node: u32, seg0: u32) -> Op {
        let reads_at = self.spans.len() as u32;
        self.spans.extend(insn.bytes.reads.iter().map(Registers::span));
        let defs_at = self.spans.len() as u32;
        let (mut whole, mut partial) = (0u16, 0u16);
        for r in &insn.bytes.defs {
            self.spans.push(Registers::span(r));
            if r.reg.index() < 16 {
                if r.lo == 0 && r.hi == 8 {
                    whole |= 1 << r.reg.index();
                } else {
                    partial |= 1 << r.reg.index();
                }
            }
        }
        let refs_at = self.reveals.len() as u32;
        self.reveals.extend(insn.refs.iter().map(|m| Reveal { reg: values::revealed(&m.addr), disp: m.addr.disp }));
        let steps_at = self.steps.len() as u32;
        self.steps.extend(values::steps(insn, whole, partial));
        let mem_reads = insn.refs.iter().take_while(|r| r.access == Access::Read).count();
        let mut kind = 0;
        match insn.special {
            Special::Rep(_) => kind |= REP,
            Special::Gather(_) => kind |= GATHER,
            Special::None => {}
        }
        if matches!(insn.flow, Flow::Jump { conditional: true, .. } | Flow::IndirectJump) {
            kind |= BRANCH;
        }
        Op {
            pc: insn.pc,
            id,
            node,
            seg0,
            reads_at,
            defs_at,
            refs_at,
            steps_at,
            reads_n: len16(insn.bytes.reads.len()),
            defs_n: len16(insn.bytes.defs.len()),
            steps_n: len16(self.steps.len() - steps_at as usize),
            refs_n: len16(insn.refs.len()),
            mem_reads: len16(mem_reads),
            mem_port: super::statics::mem_port_of(insn),
            flags_read: insn.regs.flags_read,
            flags_written: insn.regs.flags_written,
            kind,
        }
    }

    /// The register byte spans `op` reads, one use port each.
    #[inline]
    pub fn reads(&self, op: &Op) -> &[RegSpan] {
        &self.spans[op.reads_at as usize..op.reads_at as usize + op.reads_n as usize]
    }

    /// The register byte spans `op` defines.
    #[inline]
    pub fn defs(&self, op: &Op) -> &[RegSpan] {
        &self.spans[op.defs_at as usize..op.defs_at as usize + op.defs_n as usize]
    }

    /// What the address of `op`'s memory reference `k` reveals.
    #[inline]
    pub fn reveal(&self, op: &Op, k: usize) -> Reveal {
        self.reveals[op.refs_at as usize + k]
    }

    /// What `op` does to the values of the general registers it defines.
    #[inline]
    pub fn steps(&self, op: &Op) -> &[Step] {
        &self.steps[op.steps_at as usize..op.steps_at as usize + op.steps_n as usize]
    }
}
