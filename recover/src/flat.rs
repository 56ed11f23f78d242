//! Block plans flattened for the recovery loop: every block's steps, adjustments and
//! references in three contiguous arrays, with addresses evaluated without branches.
//!
//! [`BlockPlan`] stays the definition (shared with the collector); this is only its layout
//! for speed: a register that an address does not use reads a slot that is always zero, and
//! register widths and address sizes become masks.

use crate::records::MemEvent;
use dep_profile::blocks::RegOp;
use dep_profile::semantics::{Address, Special};
use dep_profile::{BlockPlan, NUM_REGS};

/// Index of the register slot that always holds zero.
pub const ZERO: usize = NUM_REGS;
/// Register slots the loop keeps: the registers and the zero slot, rounded up.
pub const SLOTS: usize = 32;

/// One block, as ranges into [`FlatPlans`]' arrays.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlatBlock {
    pub steps: (u32, u32),
    pub tail_adjust: (u32, u32),
    pub tail_expired: u32,
    pub tail_derived: u32,
    /// Statuses passed on at the end ([`dep_profile::BlockPlan::tail_copies`]).
    pub tail_copies: (u32, u32),
    pub tail_ops: (u32, u32),
    pub insns: u32,
    /// References of a run through the whole block (for a rep string, one iteration's).
    pub refs: u32,
    /// A step is a rep string or a gather.
    pub special: bool,
}

/// One step: the register work before an instruction, and its references.
#[derive(Clone, Copy, Debug)]
pub struct FlatStep {
    pub expired: u32,
    pub derived: u32,
    pub used: u32,
    /// Statuses passed on ([`dep_profile::Step::copies`]), in [`FlatPlans::copies`].
    pub copies: (u32, u32),
    pub adjust: (u32, u32),
    /// Ordered value changes, where the step has derivations ([`dep_profile::blocks::Step::ops`]).
    pub ops: (u32, u32),
    pub refs: (u32, u32),
    pub insn: u16,
    /// The instruction is a rep string or a gather: handled from the [`BlockPlan`].
    pub special: bool,
    /// Every reference is [`FlatRef::simple`].
    pub simple: bool,
}

/// One reference's address expression and its fixed fields.
#[derive(Clone, Copy, Debug)]
pub struct FlatRef {
    pub disp: u64,
    pub base_mask: u64,
    pub index_mask: u64,
    pub addr_mask: u64,
    pub scale: u64,
    pub base: u8,
    pub index: u8,
    pub seg: u8,
    /// log2 of `scale`.
    pub shift: u8,
    /// 64-bit registers and address size, no segment base: `disp + base + index << shift`.
    pub simple: bool,
    /// `pc`, `size`, `access`, `conditional`, with `addr` 0.
    pub event: MemEvent,
}

impl FlatRef {
    fn new(pc: u64, insn: u16, a: &Address, size: u32, access: dep_profile::semantics::Access, conditional: bool) -> FlatRef {
        let width_mask = |bits: u8| if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let scale = if a.index.is_some() { a.scale } else { 1 };
        let simple = a.seg.is_none()
            && a.addr_bits >= 64
            && a.base.is_none_or(|b| b.bits >= 64)
            && a.index.is_none_or(|i| i.bits >= 64)
            && scale.is_power_of_two();
        FlatRef {
            disp: a.disp,
            base_mask: a.base.map_or(0, |b| width_mask(b.bits)),
            index_mask: a.index.map_or(0, |i| width_mask(i.bits)),
            addr_mask: width_mask(a.addr_bits),
            scale: a.scale as u64,
            base: a.base.map_or(ZERO, |b| b.reg.index()) as u8,
            index: a.index.map_or(ZERO, |i| i.reg.index()) as u8,
            seg: a.seg.map_or(ZERO, |s| s.index()) as u8,
            shift: scale.trailing_zeros() as u8,
            simple,
            event: MemEvent { pc, addr: 0, size, access, conditional, insn },
        }
    }

    /// The address of a [`simple`](Self::simple) reference.
    #[inline(always)]
    pub fn eval_simple(&self, vals: &[u64; SLOTS]) -> u64 {
        self.disp
            .wrapping_add(vals[self.base as usize & (SLOTS - 1)])
            .wrapping_add(vals[self.index as usize & (SLOTS - 1)] << (self.shift & 63))
    }

    /// The address, as [`Address::eval`] computes it.
    #[inline(always)]
    pub fn eval(&self, vals: &[u64; SLOTS]) -> u64 {
        let b = vals[self.base as usize & (SLOTS - 1)] & self.base_mask;
        let i = vals[self.index as usize & (SLOTS - 1)] & self.index_mask;
        (self.disp.wrapping_add(b).wrapping_add(i.wrapping_mul(self.scale)) & self.addr_mask)
            .wrapping_add(vals[self.seg as usize & (SLOTS - 1)])
    }
}

/// Every decodable block of a profile, flattened; blocks are indexed as in the block table.
#[derive(Default)]
pub struct FlatPlans {
    pub blocks: Vec<FlatBlock>,
    pub steps: Vec<FlatStep>,
    pub adjust: Vec<(u8, u64)>,
    pub ops: Vec<RegOp>,
    /// (register, holder) pairs: the register's status bit becomes the holder's as it was.
    pub copies: Vec<(u8, u8)>,
    pub refs: Vec<FlatRef>,
    /// The most references of any block without special steps.
    pub max_refs: u32,
}

fn range<T>(v: &[T], start: usize) -> (u32, u32) {
    (start as u32, v.len() as u32)
}

impl FlatPlans {
    /// Appends a block (an undecodable one as an empty placeholder, never looked up).
    pub fn push(&mut self, plan: Option<&BlockPlan>) {
        let Some(plan) = plan else {
            self.blocks.push(FlatBlock::default());
            return;
        };
        let first_step = self.steps.len();
        let mut refs = 0;
        let mut special = false;
        for st in &plan.steps {
            let insn = &plan.insns[st.insn as usize];
            let a0 = self.adjust.len();
            self.adjust.extend(st.adjust.iter().map(|&(r, d)| (r.index() as u8, d as u64)));
            let adjust = range(&self.adjust, a0);
            let o0 = self.ops.len();
            self.ops.extend_from_slice(&st.ops);
            let ops = range(&self.ops, o0);
            let copies = self.push_copies(&st.copies);
            let r0 = self.refs.len();
            self.refs.extend(insn.refs.iter().map(|r| FlatRef::new(insn.pc, st.insn, &r.addr, r.size, r.access, r.conditional)));
            let simple = self.refs[r0..].iter().all(|r| r.simple);
            refs += insn.refs.len() as u32;
            special |= insn.special != Special::None;
            self.steps.push(FlatStep {
                expired: st.expired.bits(),
                derived: st.derived.bits(),
                used: st.used.bits(),
                copies,
                adjust,
                ops,
                refs: range(&self.refs, r0),
                insn: st.insn,
                special: insn.special != Special::None,
                simple,
            });
        }
        let a0 = self.adjust.len();
        self.adjust.extend(plan.tail_adjust.iter().map(|&(r, d)| (r.index() as u8, d as u64)));
        let o0 = self.ops.len();
        self.ops.extend_from_slice(&plan.tail_ops);
        let tail_copies = self.push_copies(&plan.tail_copies);
        self.blocks.push(FlatBlock {
            steps: range(&self.steps, first_step),
            tail_adjust: range(&self.adjust, a0),
            tail_expired: plan.tail_expired.bits(),
            tail_derived: plan.tail_derived.bits(),
            tail_copies,
            tail_ops: range(&self.ops, o0),
            insns: plan.insns.len() as u32,
            refs,
            special,
        });
        if !special {
            self.max_refs = self.max_refs.max(refs);
        }
    }

    /// The (register, holder) pairs of a step's or a block end's `copies` range.
    #[inline(always)]
    pub fn copies_in(&self, range: (u32, u32)) -> &[(u8, u8)] {
        &self.copies[range.0 as usize..range.1 as usize]
    }

    fn push_copies(&mut self, copies: &[(dep_profile::Reg, dep_profile::Reg)]) -> (u32, u32) {
        let c0 = self.copies.len();
        self.copies.extend(copies.iter().map(|(r, h)| (r.index() as u8, h.index() as u8)));
        range(&self.copies, c0)
    }
}

/// The status bits after a step's (or a block end's) changes: `expired` cleared, `derived`
/// set, then each copied register given its holder's bit in `old`, the bits before them.
#[inline(always)]
pub fn step_status(old: u32, expired: u32, derived: u32, copies: &[(u8, u8)]) -> u32 {
    let mut status = (old & !expired) | derived;
    for &(r, h) in copies {
        status = (status & !(1 << (r & 31))) | ((old >> (h & 31)) & 1) << (r & 31);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use dep_profile::{Machine, Semantics};

    /// Every address form evaluates as the plan's own [`Address::eval`] does.
    #[test]
    fn flat_eval_matches_address_eval() {
        // mov rax,[rbx+rcx*4+8]; mov eax,[ebx+ecx*2-4]; mov rax,fs:[rax+8]; mov [rip+0x10],al;
        // xlat; mov rax,[rsp]; movsb (addr32)
        let code: &[u8] = &[
            0x48, 0x8b, 0x44, 0x8b, 0x08, 0x67, 0x8b, 0x44, 0x4b, 0xfc, 0x64, 0x48, 0x8b, 0x40, 0x08, 0x88, 0x05, 0x10, 0, 0, 0, 0xd7,
            0x48, 0x8b, 0x04, 0x24, 0x67, 0xa4,
        ];
        let mut sem = Semantics::new(Machine::x86_64(1024));
        let plan = BlockPlan::build(&mut sem, 0x40_1000, code, None).unwrap();
        let mut fp = FlatPlans::default();
        fp.push(Some(&plan));
        let mut vals = [0u64; SLOTS];
        let mut state = 0x1234_5678_9abc_def1u64;
        for _ in 0..200 {
            for v in vals.iter_mut().take(NUM_REGS) {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                *v = state;
            }
            let mut k = 0;
            for insn in &plan.insns {
                for r in &insn.refs {
                    let want = r.addr.eval(&vals[..NUM_REGS]);
                    assert_eq!(fp.refs[k].eval(&vals), want, "insn at {:#x}", insn.pc);
                    if fp.refs[k].simple {
                        assert_eq!(fp.refs[k].eval_simple(&vals), want, "insn at {:#x}", insn.pc);
                    }
                    assert_eq!(fp.refs[k].event.pc, insn.pc);
                    k += 1;
                }
            }
            assert_eq!(k, fp.refs.len());
        }
        // rbx+rcx*4+8, rip-relative and rsp are simple; addr32, fs: and xlat's al are not.
        let simple: Vec<bool> = fp.refs.iter().map(|r| r.simple).collect();
        assert_eq!(simple, [true, false, false, true, false, true, false, false]);
    }
}
