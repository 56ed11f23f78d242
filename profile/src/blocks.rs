//! Block plans: a block's instructions pre-decoded into the steps that touch DEP_m
//! (paper section 6.2), shared by the collector and the recoverer.
//!
//! A block is traversed as a list of *steps*, one per instruction with memory references.
//! Before step k the registers in `expired` (written since the previous step) lose their
//! values and the `adjust` constants are added to the others; then every register in
//! `used` that is not current is read from DEP_m in ascending register order and becomes
//! current. A gather's index vector and mask follow those values; a rep string's pointer
//! register is read once more after them (its value after the instruction). After the last
//! step, `tail_expired`/`tail_adjust` bring the state to the block's end.

use crate::regs::{Reg, RegSet};
use crate::semantics::{Insn, RegEffect, Semantics, Special};
use iced_x86::{Decoder, DecoderOptions};
use thiserror::Error;

/// The most instructions a block may have: a block's instruction indices and counts are
/// 16-bit everywhere downstream (`Step::insn`, recovery's events, the output formats'
/// `block << 16 | executed` keys). DynamoRIO's blocks are far shorter.
pub const MAX_BLOCK_INSNS: usize = u16::MAX as usize;

/// Errors building a block plan.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BlockError {
    #[error("block at {addr:#x}: its {len} bytes hold {found} instructions, the table says {expected}")]
    Count { addr: u64, len: usize, found: usize, expected: usize },
    #[error("block at {addr:#x} is empty")]
    Empty { addr: u64 },
    #[error("block at {addr:#x}: its {len} bytes of code run past the end of the address space")]
    PastEnd { addr: u64, len: u64 },
    #[error("block at {addr:#x} has more than {max} instructions")]
    TooLong { addr: u64, max: usize },
}

/// One instruction with memory references, and the register work before it.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Index of the instruction within the block.
    pub insn: u16,
    /// Registers written since the previous step (the paper's `expired` bits).
    pub expired: RegSet,
    /// Constant changes since the previous step to registers not in `expired`.
    pub adjust: Vec<(Reg, i64)>,
    /// Registers the instruction's addresses need (the paper's `used` bits).
    pub used: RegSet,
}

/// A decoded block and its steps.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockPlan {
    pub addr: u64,
    pub insns: Vec<Insn>,
    pub steps: Vec<Step>,
    /// Registers written after the last step.
    pub tail_expired: RegSet,
    /// Constant changes after the last step.
    pub tail_adjust: Vec<(Reg, i64)>,
}

/// Accumulates register effects between two steps.
#[derive(Default)]
struct Segment {
    expired: RegSet,
    adjust: Vec<(Reg, i64)>,
}

impl Segment {
    fn apply(&mut self, e: &RegEffect) {
        match *e {
            RegEffect::Expire(r) => {
                self.expired.insert(r);
                self.adjust.retain(|(a, _)| *a != r);
            }
            RegEffect::Add(r, d) => {
                if self.expired.contains(r) {
                    return;
                }
                match self.adjust.iter_mut().find(|(a, _)| *a == r) {
                    Some((_, acc)) => *acc = acc.wrapping_add(d),
                    None => self.adjust.push((r, d)),
                }
            }
        }
    }

    fn take(&mut self) -> (RegSet, Vec<(Reg, i64)>) {
        let mut adjust = std::mem::take(&mut self.adjust);
        adjust.retain(|(_, d)| *d != 0);
        adjust.sort_by_key(|(r, _)| *r);
        (std::mem::take(&mut self.expired), adjust)
    }
}

impl BlockPlan {
    /// Decodes `bytes` at `addr` into a plan. `count`, when given, must match.
    pub fn build(sem: &mut Semantics, addr: u64, bytes: &[u8], count: Option<usize>) -> Result<BlockPlan, BlockError> {
        let bitness = sem.machine().width.bits() as u32;
        let mut dec = Decoder::with_ip(bitness, bytes, addr, DecoderOptions::NONE);
        if count.is_some_and(|c| c > MAX_BLOCK_INSNS) {
            return Err(BlockError::TooLong { addr, max: MAX_BLOCK_INSNS });
        }
        let mut insns = Vec::new();
        while dec.can_decode() {
            if insns.len() == MAX_BLOCK_INSNS {
                return Err(BlockError::TooLong { addr, max: MAX_BLOCK_INSNS });
            }
            let i = dec.decode();
            insns.push(sem.insn(&i));
            if count.is_some_and(|c| insns.len() == c) {
                break;
            }
        }
        if insns.is_empty() {
            return Err(BlockError::Empty { addr });
        }
        if let Some(c) = count {
            if insns.len() != c {
                return Err(BlockError::Count { addr, len: bytes.len(), found: insns.len(), expected: c });
            }
        }
        // Every instruction's end (`pc + len`: return addresses, fall-through targets) is
        // then an address: the decoder wraps the IP past the top instead.
        let len: u64 = insns.iter().map(|i| i.len as u64).sum();
        if addr.checked_add(len).is_none() {
            return Err(BlockError::PastEnd { addr, len });
        }
        Ok(Self::from_insns(addr, insns))
    }

    /// Builds the steps of already-analysed instructions, at most [`MAX_BLOCK_INSNS`] of them
    /// (`build` makes sure), so that every index fits a step's 16 bits.
    fn from_insns(addr: u64, insns: Vec<Insn>) -> BlockPlan {
        let mut steps = Vec::new();
        let mut seg = Segment::default();
        for (k, insn) in insns.iter().enumerate() {
            if !insn.refs.is_empty() {
                let (expired, adjust) = seg.take();
                steps.push(Step { insn: k as u16, expired, adjust, used: insn.used });
            }
            for e in &insn.effects {
                seg.apply(e);
            }
        }
        let (tail_expired, tail_adjust) = seg.take();
        BlockPlan { addr, insns, steps, tail_expired, tail_adjust }
    }

    /// Byte length of the block's code.
    pub fn len(&self) -> usize {
        self.insns.iter().map(|i| i.len as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// What the collector records at each step, knowing statically what it can.
    pub fn decisions(&self) -> Decisions {
        let mut updated = RegSet::EMPTY; // statically known UPDATED
        let mut recorded = RegSet::EMPTY; // statically known RECORDED
        let mut steps = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            updated = updated.union(s.expired);
            recorded = recorded.minus(s.expired);
            let always = s.used.intersect(updated);
            let check = s.used.minus(updated).minus(recorded);
            updated = updated.minus(s.used);
            recorded = recorded.union(s.used);
            if let Special::Rep(r) = self.insns[s.insn as usize].special {
                // The pointer registers are current after the instruction.
                recorded.insert(r.post);
            }
            steps.push(StepDecision { always, check });
        }
        updated = updated.union(self.tail_expired);
        recorded = recorded.minus(self.tail_expired);
        Decisions { steps, exit_updated: updated, exit_recorded: recorded }
    }
}

/// The collector's recording decision for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepDecision {
    /// Registers written earlier in the block: recorded unconditionally.
    pub always: RegSet,
    /// Registers whose status is only known at run time: recorded if their shadow says UPDATED.
    pub check: RegSet,
}

/// The collector's decisions for a whole block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decisions {
    pub steps: Vec<StepDecision>,
    /// Shadows set to UPDATED at the block's end.
    pub exit_updated: RegSet,
    /// Shadows set to RECORDED at the block's end.
    pub exit_recorded: RegSet,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::Machine;

    fn plan(bytes: &[u8]) -> BlockPlan {
        BlockPlan::build(&mut Semantics::new(Machine::x86_64(2696)), 0x40_1000, bytes, None).unwrap()
    }

    fn set(regs: &[Reg]) -> RegSet {
        regs.iter().copied().collect()
    }

    #[test]
    fn paper_section_6_2_example() {
        // sub rax,16 ; add rdx,32 ; mov rbx,[rax+rcx*4+16]
        let p = plan(&[0x48, 0x83, 0xe8, 0x10, 0x48, 0x83, 0xc2, 0x20, 0x48, 0x8b, 0x5c, 0x88, 0x10]);
        assert_eq!(p.steps.len(), 1);
        let s = &p.steps[0];
        assert_eq!(s.insn, 2);
        assert_eq!(s.used, set(&[Reg::RAX, Reg::RCX]));
        // sub/add of constants keep rax and rdx current: they are adjustments, not expiries.
        assert_eq!(s.expired, RegSet::EMPTY);
        assert_eq!(s.adjust, vec![(Reg::RAX, -16), (Reg::RDX, 32)]);
        assert_eq!(p.tail_expired, set(&[Reg::RBX]));
    }

    #[test]
    fn paper_section_2_2_prologue() {
        // push rbp ; mov rbp,rsp ; sub rsp,16 ; mov dword [rsp+4],0 ; mov dword [rsp+8],0
        let p =
            plan(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc7, 0x44, 0x24, 0x04, 0, 0, 0, 0, 0xc7, 0x44, 0x24, 0x08, 0, 0, 0, 0]);
        assert_eq!(p.steps.iter().map(|s| s.insn).collect::<Vec<_>>(), vec![0, 3, 4]);
        assert_eq!(p.steps[0].used, set(&[Reg::RSP]));
        assert_eq!(p.steps[1].expired, set(&[Reg::RBP]));
        assert_eq!(p.steps[1].adjust, vec![(Reg::RSP, -24)]);
        assert_eq!(p.steps[2].adjust, vec![]);
        // rsp is recorded at most once: at the push, if its shadow says UPDATED.
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RSP]) });
        assert_eq!(d.steps[1], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.steps[2], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.exit_updated, set(&[Reg::RBP]));
        assert_eq!(d.exit_recorded, set(&[Reg::RSP]));
    }

    #[test]
    fn written_registers_are_recorded_unconditionally() {
        // mov rax,[rbx] ; mov rcx,[rax] ; mov rdx,[rax+8] ; mov rax,[rcx]
        let p = plan(&[0x48, 0x8b, 0x03, 0x48, 0x8b, 0x08, 0x48, 0x8b, 0x50, 0x08, 0x48, 0x8b, 0x01]);
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RBX]) });
        assert_eq!(d.steps[1], StepDecision { always: set(&[Reg::RAX]), check: RegSet::EMPTY });
        assert_eq!(d.steps[2], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.steps[3], StepDecision { always: set(&[Reg::RCX]), check: RegSet::EMPTY });
        assert_eq!(d.exit_updated, set(&[Reg::RAX, Reg::RDX]));
        assert_eq!(d.exit_recorded, set(&[Reg::RCX, Reg::RBX]));
    }

    #[test]
    fn expiry_cancels_adjustments_and_rep_records_its_pointer() {
        // push rax ; pop rsp ; rep stosb ; mov al,[rdi]
        let p = plan(&[0x50, 0x5c, 0xf3, 0xaa, 0x8a, 0x07]);
        assert_eq!(p.steps[1].adjust, vec![(Reg::RSP, -8)]);
        assert_eq!(p.steps[2].expired, set(&[Reg::RSP]));
        assert_eq!(p.steps[2].adjust, vec![]);
        let d = p.decisions();
        // rdi is current after the rep string: its value after the instruction was recorded.
        assert_eq!(d.steps[3], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(p.steps[3].expired, set(&[Reg::RCX]));
    }

    #[test]
    fn counts_and_errors() {
        let mut s = Semantics::new(Machine::x86_64(512));
        assert!(matches!(BlockPlan::build(&mut s, 0, &[], None), Err(BlockError::Empty { .. })));
        assert!(matches!(BlockPlan::build(&mut s, 0, &[0x90, 0x90], Some(3)), Err(BlockError::Count { found: 2, expected: 3, .. })));
        let p = BlockPlan::build(&mut s, 0, &[0x90, 0x90, 0xc3], Some(2)).unwrap();
        assert_eq!(p.insns.len(), 2);
        assert_eq!(p.len(), 2);
        // Undecodable bytes become one instruction that expires everything.
        let p = BlockPlan::build(&mut s, 0, &[0x0f, 0x0b], None).unwrap();
        assert_eq!(p.tail_expired, RegSet::EMPTY);
        let p = BlockPlan::build(&mut s, 0, &[0x06], None).unwrap();
        assert_eq!(p.tail_expired, RegSet::all());
    }

    #[test]
    fn blocks_longer_than_16_bit_indices_are_refused() {
        // 69,999 nops then mov al,[rdi]: its step's index would wrap to 4,463 in 16 bits.
        let n = 70_000;
        let mut code = vec![0x90; n - 1];
        code.extend_from_slice(&[0x8a, 0x07]);
        let mut s = Semantics::new(Machine::x86_64(512));
        for count in [None, Some(n)] {
            let r = BlockPlan::build(&mut s, 0x1000, &code, count);
            let got = r.as_ref().map(|p| p.steps.iter().map(|s| s.insn).collect::<Vec<_>>());
            assert!(matches!(r, Err(BlockError::TooLong { addr: 0x1000, max: MAX_BLOCK_INSNS })), "{count:?}: steps at {got:?}");
        }
        // The longest block whose indices fit is planned, its last step at its last index.
        let mut code = vec![0x90; MAX_BLOCK_INSNS - 1];
        code.extend_from_slice(&[0x8a, 0x07]);
        let p = BlockPlan::build(&mut s, 0x1000, &code, None).unwrap();
        assert_eq!(p.insns.len(), MAX_BLOCK_INSNS);
        assert_eq!(p.steps.last().unwrap().insn as usize, MAX_BLOCK_INSNS - 1);
    }
}
