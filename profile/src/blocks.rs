//! Block plans: a block's instructions pre-decoded into the steps that touch DEP_m
//! (paper section 6.2), shared by the collector and the recoverer.
//!
//! A block is traversed as a list of *steps*, one per instruction with memory references.
//! Before step k the
//! registers in `expired` (written since the previous step) lose their status, those in
//! `derived` (computed from current registers) gain it, and the `adjust` constants, or the
//! ordered `ops`, change the values; then every register in `used` that is not current is
//! read from DEP_m in ascending register order and becomes current. A gather's index vector
//! and mask follow those values; a rep string's pointer register is read once more after
//! them (its value after the instruction). After the last step, the `tail_` fields bring
//! the state to the block's end. FORMAT.md states the rules.

use crate::derive::Derive;
use crate::regs::{Reg, RegSet, NUM_REGS};
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

/// One instruction with memory references, and the register work before it. Its `used`
/// may also hold a later derivation's source, so that the derivation's result is current.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Index of the instruction within the block.
    pub insn: u16,
    /// Registers written since the previous step that are not current after it (the paper's
    /// `expired` bits).
    pub expired: RegSet,
    /// Constant changes since the previous step to registers not in `expired`, when no
    /// derivation happened since (otherwise empty: `ops` has them in order).
    pub adjust: Vec<(Reg, i64)>,
    /// Registers derived since the previous step from current ones: current after it.
    pub derived: RegSet,
    /// Registers computed since the previous step from one whose status only its shadow
    /// knows (format 9): `(register, holder)`, the register taking the status the holder
    /// had at the previous step, which is the shadow's (see [`Step::shadow_of`]).
    pub copies: Vec<(Reg, Reg)>,
    /// Where a derivation happened since the previous step: every value change since, in
    /// program order (constant additions and derivations).
    pub ops: Vec<RegOp>,
    /// Registers the instruction's addresses need (the paper's `used` bits), or a
    /// derivation's sources.
    pub used: RegSet,
    /// Registers of `used` whose status is another register's shadow (format 9):
    /// `(register, shadow's register)`.
    pub roots: Vec<(Reg, Reg)>,
}

impl Step {
    /// The register whose shadow says whether `r`, used here, is current: `r`'s own, or
    /// that of the register it was computed from in this block.
    pub fn shadow_of(&self, r: Reg) -> Reg {
        self.roots.iter().find(|(u, _)| *u == r).map_or(r, |(_, q)| *q)
    }

    /// The registers of [`copies`](Self::copies).
    pub fn copied(&self) -> RegSet {
        copied(&self.copies)
    }
}

/// The registers that `copies` give a status to.
fn copied(copies: &[(Reg, Reg)]) -> RegSet {
    copies.iter().map(|(r, _)| *r).collect()
}

/// A change to a register's value that the recoverer repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegOp {
    Add(Reg, i64),
    Derive(Derive),
}

impl RegOp {
    /// The register it changes.
    pub fn dst(&self) -> Reg {
        match *self {
            RegOp::Add(r, _) => r,
            RegOp::Derive(d) => d.dst,
        }
    }

    /// Applies the change to register values indexed by [`Reg::index`].
    #[inline]
    pub fn apply(&self, vals: &mut [u64]) {
        match *self {
            RegOp::Add(r, d) => vals[r.index()] = vals[r.index()].wrapping_add(d as u64),
            RegOp::Derive(d) => vals[d.dst.index()] = d.eval(vals),
        }
    }
}

/// A decoded block and its steps.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockPlan {
    pub addr: u64,
    pub insns: Vec<Insn>,
    pub steps: Vec<Step>,
    /// Registers written after the last step that are not current at the end.
    pub tail_expired: RegSet,
    /// Constant changes after the last step (as [`Step::adjust`]).
    pub tail_adjust: Vec<(Reg, i64)>,
    /// Registers derived after the last step from current ones.
    pub tail_derived: RegSet,
    /// Registers whose status at the end is their own shadow's again, taken from a holder
    /// (as [`Step::copies`]).
    pub tail_copies: Vec<(Reg, Reg)>,
    /// Value changes after the last step in order, where a derivation is among them.
    pub tail_ops: Vec<RegOp>,
}

/// What the plan knows statically of a register's status at a point of the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// Current: recorded or derived in the block so far.
    Current,
    /// Not current: written in the block so far.
    Stale,
    /// Current exactly when the given register was on entry to the block (its shadow,
    /// which the collector changes only at the block's end): the register itself,
    /// untouched or changed from itself alone, or (format 9) one computed from it and
    /// current registers.
    Entry(Reg),
}

/// Accumulates register effects between two steps.
struct Segment {
    /// Each register's status where the segment begins.
    start: [Known; NUM_REGS],
    expired: RegSet,
    adjust: Vec<(Reg, i64)>,
    derived: RegSet,
    ops: Vec<RegOp>,
    /// Format 9: a register computed from registers that share one shadow takes it.
    roots: bool,
}

/// Register work between two steps, as a step holds it.
struct Work {
    expired: RegSet,
    adjust: Vec<(Reg, i64)>,
    derived: RegSet,
    copies: Vec<(Reg, Reg)>,
    ops: Vec<RegOp>,
}

impl Segment {
    fn expire(&mut self, r: Reg, known: &mut [Known; NUM_REGS]) {
        self.expired.insert(r);
        self.derived.remove(r);
        self.adjust.retain(|(a, _)| *a != r);
        known[r.index()] = Known::Stale;
    }

    fn apply(&mut self, e: &RegEffect, known: &mut [Known; NUM_REGS]) {
        match *e {
            RegEffect::Expire(r) => self.expire(r, known),
            RegEffect::Add(r, d) => {
                if known[r.index()] == Known::Stale {
                    return;
                }
                match self.adjust.iter_mut().find(|(a, _)| *a == r) {
                    Some((_, acc)) => *acc = acc.wrapping_add(d),
                    None => self.adjust.push((r, d)),
                }
                self.ops.push(RegOp::Add(r, d));
            }
            RegEffect::Derive(d) => {
                let r = d.dst;
                let waiting = not_current(&d, known);
                if waiting.is_empty() {
                    // From current registers: current.
                    known[r.index()] = Known::Current;
                    self.derived.insert(r);
                    self.expired.remove(r);
                } else if let Some(q) = shared_root(&waiting, known).filter(|&q| self.roots || (waiting.iter().eq([r]) && q == r)) {
                    // From registers current exactly when q was on entry (and current
                    // ones): so is the result. Before format 9, only from itself. (`take`
                    // takes it out of `expired` and `derived`.)
                    known[r.index()] = Known::Entry(q);
                } else {
                    return self.expire(r, known);
                }
                self.adjust.retain(|(a, _)| *a != r);
                self.ops.push(RegOp::Derive(d));
            }
        }
    }

    /// The segment's work, given the statuses at its end; the next segment starts from them.
    fn take(&mut self, known: &[Known; NUM_REGS]) -> Work {
        let start = std::mem::replace(&mut self.start, *known);
        let (mut expired, mut derived) = (std::mem::take(&mut self.expired), std::mem::take(&mut self.derived));
        let (adjust, ops) = (std::mem::take(&mut self.adjust), std::mem::take(&mut self.ops));
        // A register whose status is a shadow's again, unlike at the start, takes it from a
        // register that held that shadow's status at the start. One always does: such a
        // status only passes from register to register within a segment.
        let mut copies = Vec::new();
        for r in Reg::all() {
            if let Known::Entry(q) = known[r.index()] {
                expired.remove(r);
                derived.remove(r);
                if start[r.index()] != known[r.index()] {
                    let holder =
                        Reg::all().find(|h| start[h.index()] == Known::Entry(q)).expect("a status passed within the segment has a holder");
                    copies.push((r, holder));
                }
            }
        }
        // Constant additions alone keep their merged, sorted form; derivations need order.
        if ops.iter().any(|o| matches!(o, RegOp::Derive(_))) {
            return Work { expired, adjust: Vec::new(), derived, copies, ops };
        }
        let mut adjust = adjust;
        adjust.retain(|(_, d)| *d != 0);
        adjust.sort_by_key(|(r, _)| *r);
        Work { expired, adjust, derived, copies, ops: Vec::new() }
    }
}

/// The register whose entry status every one of `waiting` has, if they share one.
fn shared_root(waiting: &RegSet, known: &[Known; NUM_REGS]) -> Option<Reg> {
    let mut root = None;
    for s in waiting.iter() {
        match (known[s.index()], root) {
            (Known::Entry(q), None) => root = Some(q),
            (Known::Entry(q), Some(p)) if p == q => {}
            _ => return None,
        }
    }
    root
}

/// A derivation's sources that are not known to be current.
fn not_current(d: &Derive, known: &[Known; NUM_REGS]) -> RegSet {
    d.sources().iter().filter(|s| known[s.index()] != Known::Current).collect()
}

/// For each instruction, the registers whose values an address later in the block needs
/// (directly, or through derivations) as they are after the instruction.
fn wanted_after(insns: &[Insn]) -> Vec<RegSet> {
    let mut out = vec![RegSet::EMPTY; insns.len()];
    let mut want = RegSet::EMPTY;
    for (k, insn) in insns.iter().enumerate().rev() {
        out[k] = want;
        for e in insn.effects.iter().rev() {
            match *e {
                RegEffect::Expire(r) => want.remove(r),
                RegEffect::Add(..) => {}
                RegEffect::Derive(d) => {
                    if want.contains(d.dst) {
                        want.remove(d.dst);
                        want = want.union(d.sources());
                    }
                }
            }
        }
        want = want.union(insn.used);
    }
    out
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
        Ok(Self::from_insns(addr, insns, sem.machine().roots))
    }

    /// Builds the steps of already-analysed instructions, at most [`MAX_BLOCK_INSNS`] of them
    /// (`build` makes sure), so that every index fits a step's 16 bits. `roots`: format 9's
    /// statuses passed through derivations ([`Step::copies`]).
    fn from_insns(addr: u64, insns: Vec<Insn>, roots: bool) -> BlockPlan {
        let mut steps: Vec<Step> = Vec::new();
        let mut known: [Known; NUM_REGS] = std::array::from_fn(|i| Known::Entry(Reg(i as u8)));
        let mut seg = Segment { start: known, expired: RegSet::EMPTY, adjust: Vec::new(), derived: RegSet::EMPTY, ops: Vec::new(), roots };
        let wanted = wanted_after(&insns);
        let step = |k: usize, used: RegSet, seg: &mut Segment, known: &[Known; NUM_REGS]| {
            let roots = used
                .iter()
                .filter_map(|r| match known[r.index()] {
                    Known::Entry(q) if q != r => Some((r, q)),
                    _ => None,
                })
                .collect();
            let w = seg.take(known);
            Step { insn: k as u16, expired: w.expired, adjust: w.adjust, derived: w.derived, copies: w.copies, ops: w.ops, used, roots }
        };
        for (k, insn) in insns.iter().enumerate() {
            // A derivation whose result an address needs later, from registers whose status
            // only the shadows know: those are made current first (recorded if they are not).
            let derive = insn.effects.iter().find_map(|e| match e {
                RegEffect::Derive(d) => Some(*d),
                _ => None,
            });
            let ensure = derive.filter(|_| insn.refs.is_empty()).map_or(RegSet::EMPTY, |d| {
                let waiting = not_current(&d, &known);
                // One source at most: recording two to spare one value would not pay. Its
                // own status, since the previous step, and no other register's.
                let one = waiting.len() == 1 && {
                    let w = waiting.iter().next().unwrap();
                    let own = Known::Entry(w);
                    known[w.index()] == own && seg.start[w.index()] == own && known.iter().filter(|k| **k == own).count() == 1
                };
                if one && !waiting.contains(d.dst) && wanted[k].contains(d.dst) {
                    waiting
                } else {
                    RegSet::EMPTY
                }
            });
            // The source, as on entry since, is recorded at the block's previous step (its
            // value then, which the segment's ops bring to this point): a step of its own
            // would cost the collector more than the value it spares. Without a previous
            // step the result is not current.
            if let Some(prev) = steps.last_mut().filter(|_| !ensure.is_empty()) {
                prev.used = prev.used.union(ensure);
                for r in ensure.iter() {
                    known[r.index()] = Known::Current;
                    seg.start[r.index()] = Known::Current;
                }
            }
            if !insn.refs.is_empty() {
                steps.push(step(k, insn.used, &mut seg, &known));
                for r in insn.used.iter() {
                    known[r.index()] = Known::Current;
                }
                if let Special::Rep(r) = insn.special {
                    known[r.post.index()] = Known::Current;
                }
                // The next segment starts after the step's records.
                seg.start = known;
            }
            for e in &insn.effects {
                seg.apply(e, &mut known);
            }
        }
        // At the end a register keeps a status only its own shadow holds: the collector
        // changes no shadow to pass another's on.
        for r in Reg::all() {
            if matches!(known[r.index()], Known::Entry(q) if q != r) {
                seg.expire(r, &mut known);
            }
        }
        let tail = seg.take(&known);
        BlockPlan {
            addr,
            insns,
            steps,
            tail_expired: tail.expired,
            tail_adjust: tail.adjust,
            tail_derived: tail.derived,
            tail_copies: tail.copies,
            tail_ops: tail.ops,
        }
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
            // A register given a shadow's status is neither: checked against that shadow.
            let copied = s.copied();
            updated = updated.union(s.expired).minus(s.derived).minus(copied);
            recorded = recorded.minus(s.expired).union(s.derived).minus(copied);
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
        // A register whose status is its own shadow's again keeps that shadow as it is.
        let copied = copied(&self.tail_copies);
        updated = updated.union(self.tail_expired).minus(self.tail_derived).minus(copied);
        recorded = recorded.minus(self.tail_expired).union(self.tail_derived).minus(copied);
        Decisions { steps, exit_updated: updated, exit_recorded: recorded }
    }
}

/// The collector's recording decision for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepDecision {
    /// Registers written earlier in the block: recorded unconditionally.
    pub always: RegSet,
    /// Registers whose status is only known at run time: recorded if their shadow (or the
    /// one [`Step::shadow_of`] names) says UPDATED.
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
        // mov rbp, rsp derives rbp from the current rsp: current, as the push left rsp.
        assert_eq!(p.steps[1].expired, RegSet::EMPTY);
        assert_eq!(p.steps[1].derived, set(&[Reg::RBP]));
        assert_eq!(p.steps[1].adjust, vec![]);
        let mut v = [0u64; NUM_REGS];
        v[Reg::RSP.index()] = 0x7ff0_0000;
        p.steps[1].ops.iter().for_each(|o| o.apply(&mut v));
        assert_eq!((v[Reg::RSP.index()], v[Reg::RBP.index()]), (0x7ff0_0000 - 24, 0x7ff0_0000 - 8));
        assert_eq!(p.steps[2].adjust, vec![]);
        // rsp is recorded at most once: at the push, if its shadow says UPDATED.
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RSP]) });
        assert_eq!(d.steps[1], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.steps[2], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.exit_updated, RegSet::EMPTY);
        assert_eq!(d.exit_recorded, set(&[Reg::RSP, Reg::RBP]));
    }

    /// An interpreter's ADD handler (bench/interp): lea edx,[rax-1] ; sub eax,2 ; add ecx,1 ;
    /// cdqe ; movsxd r11,edx ; mov r11,[rsp+r11*8] ; add [rsp+rax*8],r11 ; mov eax,edx
    const ADD_HANDLER: [u8; 24] = [
        0x8d, 0x50, 0xff, 0x83, 0xe8, 0x02, 0x83, 0xc1, 0x01, 0x48, 0x98, 0x4c, 0x63, 0xda, 0x4e, 0x8b, 0x1c, 0xdc, 0x4c, 0x01, 0x1c, 0xc4,
        0x89, 0xd0,
    ];

    #[test]
    fn derived_registers_stay_current() {
        // mov r8,[rsp] first, then the handler.
        let mut code = vec![0x4c, 0x8b, 0x04, 0x24];
        code.extend_from_slice(&ADD_HANDLER);
        let p = plan(&code);
        // rdx, which the address at instruction 6 needs through r11, is derived from rax: rax
        // is recorded at the step before (instruction 0), so rdx, rax and r11 are current.
        assert_eq!(
            p.steps.iter().map(|s| (s.insn, s.used)).collect::<Vec<_>>(),
            vec![(0, set(&[Reg::RSP, Reg::RAX])), (6, set(&[Reg::RSP, Reg::R11])), (7, set(&[Reg::RSP, Reg::RAX]))]
        );
        assert_eq!(p.steps[1].derived, set(&[Reg::RAX, Reg::RDX, Reg::R11]));
        assert_eq!(p.steps[1].expired, set(&[Reg(8)]));
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RSP, Reg::RAX]) });
        // Nothing is looked at again, nothing recorded unconditionally.
        assert_eq!(d.steps[1], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.steps[2], StepDecision { always: RegSet::EMPTY, check: RegSet::EMPTY });
        assert_eq!(d.exit_updated, set(&[Reg(8), Reg::R11]));
        assert_eq!(d.exit_recorded, set(&[Reg::RAX, Reg::RDX, Reg::RSP]));
        // ecx, derived from itself alone, is current exactly when it was: no shadow changes.
        assert!(!d.exit_updated.union(d.exit_recorded).contains(Reg::RCX));
        // The values, as the hardware computes them (SDM: 32-bit results zero-extend, cdqe
        // and movsxd sign-extend).
        let mut v = [0u64; NUM_REGS];
        v[Reg::RAX.index()] = 0x1_0000_0001; // eax = 1: eax-2 wraps to 0xffffffff
        v[Reg::RCX.index()] = 0xffff_ffff;
        p.steps[1].ops.iter().for_each(|o| o.apply(&mut v));
        assert_eq!(v[Reg::RDX.index()], 0);
        assert_eq!(v[Reg::RAX.index()], u64::MAX);
        assert_eq!(v[Reg::RCX.index()], 0);
        assert_eq!(v[11], 0);
        p.tail_ops.iter().for_each(|o| o.apply(&mut v));
        assert_eq!(v[Reg::RAX.index()], 0);
        assert_eq!(p.tail_derived, set(&[Reg::RAX]));
    }

    #[test]
    fn a_derivation_from_an_entry_register_takes_its_shadow() {
        // No step before: rdx and then r11 are computed from rax as it was on entry, so they
        // are current exactly when rax was: r11 is checked against rax's shadow.
        let p = plan(&ADD_HANDLER);
        assert_eq!(
            p.steps.iter().map(|s| (s.insn, s.used)).collect::<Vec<_>>(),
            vec![(5, set(&[Reg::RSP, Reg::R11])), (6, set(&[Reg::RSP, Reg::RAX]))]
        );
        assert_eq!(p.steps[0].copies, vec![(Reg::RDX, Reg::RAX), (Reg::R11, Reg::RAX)]);
        assert_eq!(p.steps[0].roots, vec![(Reg::R11, Reg::RAX)]);
        assert_eq!(p.steps[0].shadow_of(Reg::R11), Reg::RAX);
        assert_eq!(p.steps[0].shadow_of(Reg::RSP), Reg::RSP);
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RSP, Reg::R11]) });
        // rax, derived from itself alone, is checked against its own shadow.
        assert_eq!(d.steps[1], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RAX]) });
        assert!(p.steps[1].roots.is_empty());
        // mov eax,edx at the end: rax is again current exactly when it was on entry, which
        // rdx's status still says; its shadow stays as it is. rdx, whose status is rax's
        // shadow, is not current at the end (the collector passes no shadow on).
        assert_eq!(p.tail_copies, vec![(Reg::RAX, Reg::RDX)]);
        assert_eq!(d.exit_updated, set(&[Reg::RDX, Reg::R11]));
        assert_eq!(d.exit_recorded, set(&[Reg::RSP]));
    }

    #[test]
    fn a_dispatch_index_takes_the_shadow_of_the_register_it_extends() {
        // interp's dispatch: movsxd rdx,ecx ; add rsi,1 ; mov rdx,[r8+rdx*8]. rdx is current
        // exactly when rcx was on entry: its value is recorded only if rcx's shadow says so.
        let p = plan(&[0x48, 0x63, 0xd1, 0x48, 0x83, 0xc6, 0x01, 0x49, 0x8b, 0x14, 0xd0]);
        let s = &p.steps[0];
        assert_eq!((s.insn, s.used), (2, set(&[Reg::RDX, Reg(8)])));
        assert_eq!((s.copies.clone(), s.roots.clone()), (vec![(Reg::RDX, Reg::RCX)], vec![(Reg::RDX, Reg::RCX)]));
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RDX, Reg(8)]) });
        // rcx, changed by nothing, keeps its shadow; the loaded rdx is not current.
        assert!(!d.exit_updated.union(d.exit_recorded).contains(Reg::RCX));
        assert!(d.exit_updated.contains(Reg::RDX));
        let mut v = [0u64; NUM_REGS];
        v[Reg::RCX.index()] = 0xffff_ffff;
        s.ops.iter().for_each(|o| o.apply(&mut v));
        assert_eq!(v[Reg::RDX.index()], u64::MAX);
    }

    #[test]
    fn before_format_9_a_derivation_from_an_entry_register_is_recorded() {
        let mut sem = Semantics::new(Machine { roots: false, ..Machine::x86_64(2696) });
        let p = BlockPlan::build(&mut sem, 0x40_1000, &ADD_HANDLER, None).unwrap();
        let d = p.decisions();
        assert_eq!(d.steps[0], StepDecision { always: set(&[Reg::R11]), check: set(&[Reg::RSP]) });
        assert_eq!(d.steps[1], StepDecision { always: RegSet::EMPTY, check: set(&[Reg::RAX]) });
        assert!(p.steps.iter().all(|s| s.copies.is_empty() && s.roots.is_empty()) && p.tail_copies.is_empty());
    }

    #[test]
    fn statuses_from_two_shadows_are_not_current() {
        // lea rdx,[rax+rcx] ; mov rbx,[rdx]: rdx is current only if both were.
        let p = plan(&[0x48, 0x8d, 0x14, 0x08, 0x48, 0x8b, 0x1a]);
        assert_eq!(p.decisions().steps[0], StepDecision { always: set(&[Reg::RDX]), check: RegSet::EMPTY });
        assert!(p.steps[0].copies.is_empty());
    }

    #[test]
    fn a_derivation_from_a_loaded_register_is_not_current() {
        // mov eax,[rbx] ; lea rdx,[rax+8] ; mov rcx,[rdx]: rdx comes from a loaded value
        let p = plan(&[0x8b, 0x03, 0x48, 0x8d, 0x50, 0x08, 0x48, 0x8b, 0x0a]);
        assert_eq!(p.steps.iter().map(|s| s.insn).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(p.steps[1].expired, set(&[Reg::RAX, Reg::RDX]));
        assert_eq!(p.decisions().steps[1], StepDecision { always: set(&[Reg::RDX]), check: RegSet::EMPTY });
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
