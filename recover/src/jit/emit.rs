//! Machine code for one block, and for entering and leaving compiled code.
//!
//! Registers, the same in every piece of code: rbx points at the [`JitState`], r12 at the next
//! tag word, r13 at the next DEP_m word, r14 at the next reference to write, rbp at the next
//! block record, r15 holds the CURRENT bits; r8, r9 and rdi hold the limits of r12, r14 and
//! r13 (r8's also bounds rbp's), rsi the dispatch table, r10 the successor table and r11 the
//! address bits above the L-tag ([`JitState::hi`] while the code runs). A block is entered with
//! rax = its address and r12 at its L-tag; it leaves either into the next block or through
//! the exit, with r12 at a tag word the general walk then reads.

use super::{BlockRec, JitState, Slot, EMPTY};
use crate::flat::{FlatPlans, FlatRef, FlatStep, ZERO};
use crate::records::MemEvent;
use dep_profile::blocks::RegOp;
use dep_profile::derive::{DeriveOp, Src};
use dep_profile::tags::{CTL_INTERRUPTED, CTL_SET_HI, CTL_SYNC, MAX_SHORT_H};
use dep_profile::NUM_REGS;
use iced_x86::code_asm::*;
use std::mem::{offset_of, size_of};

type R = Result<(), IcedError>;

const EVENT: usize = size_of::<MemEvent>();
const _: () = assert!(offset_of!(MemEvent, pc) == 0 && offset_of!(MemEvent, addr) == 8 && offset_of!(MemEvent, size) == 16);
const _: () = assert!(offset_of!(MemEvent, access) == 20 && offset_of!(MemEvent, conditional) == 21 && EVENT == 24);
const _: () = assert!(offset_of!(MemEvent, insn) == 22);
const _: () = assert!(size_of::<Slot>() == 16 && size_of::<BlockRec>() == 16);
const _: () = assert!(offset_of!(BlockRec, id) == 8 && offset_of!(BlockRec, executed) == 12 && offset_of!(BlockRec, refs) == 14);

/// The dispatch table's hash: `(addr >> 2) & mask`, bits of the address itself, so that
/// blocks near one another in the program have their slots near one another in the table
/// and a program's hot code has few lines of table to miss on (a multiplicative hash spread
/// them over the whole table: CPython's dispatch waited on cache misses for a third of its
/// time). Linear probing absorbs blocks that share a slot.
#[derive(Clone, Copy)]
pub(super) struct Hash {
    /// The table's size less one; below 2^29, so `mask << 2` is a positive `i32`.
    pub mask: u32,
}

impl Hash {
    /// The first slot to probe for `addr`, as the compiled code computes it.
    pub fn slot(self, addr: u64) -> usize {
        ((addr >> 2) & self.mask as u64) as usize
    }
}

fn off(field: usize) -> i32 {
    field as i32
}

/// The state field at `field`.
fn st(field: usize) -> AsmMemoryOperand {
    qword_ptr(rbx + off(field))
}

/// The register value slot of register index `r`.
fn val(r: u8) -> AsmMemoryOperand {
    qword_ptr(rbx + off(offset_of!(JitState, vals)) + 8 * r as i32)
}

fn fits_i32(v: u64) -> bool {
    v as i64 == v as i32 as i64
}

/// Leaves compiled code through the exit routine.
fn exit(a: &mut CodeAssembler) -> R {
    a.jmp(st(offset_of!(JitState, exit)))
}

/// Where the shared dispatch's rarely taken paths start, in the entry routine's code.
pub(super) struct SharedLabels {
    pub exit: CodeLabel,
    pub set_hi: CodeLabel,
}

/// Reads the next tag word and jumps to its block's code, or leaves: when a buffer is full,
/// the chunk's tags end, the word is a control record other than an H-tag change, the block
/// is followed by an interruption record, or it is not in the dispatch table.
///
/// Emitted at the end of every block, so each block's jump to its successor is predicted
/// apart; the long H-tag change and the exit jump to the one copy in the entry routine
/// (`shared` is `Some` there, and gets their labels).
///
/// `known` are the block's successors in its own 64 KiB with their entries in the successor
/// table: a plain L-tag naming one of them (the H-tag still the block's own) jumps to the
/// code the table would give for it, with no lookup.
fn dispatch(a: &mut CodeAssembler, hash: Hash, shared: Option<&mut SharedLabels>, known: &[(u64, usize)]) -> R {
    let mut top = a.create_label();
    let mut out = a.create_label();
    let mut esc = a.create_label();
    let mut next_esc = a.create_label();
    let mut go = a.create_label();
    let mut probe = a.create_label();
    a.set_label(&mut top)?;
    a.cmp(r14, r9)?;
    a.ja(out)?;
    a.cmp(r12, r8)?;
    a.ja(out)?;
    a.mov(eax, dword_ptr(r12))?;
    a.test(ax, ax)?;
    a.jz(esc)?;
    a.mov(ecx, eax)?;
    a.shr(ecx, 16)?;
    a.jz(next_esc)?;
    // Only here, before any H-tag change: `top` is also where one returns to.
    // (A label marks one instruction: the last test goes on to `go` itself.)
    for (k, &(s, slot)) in known.iter().enumerate() {
        let mut other = if k + 1 < known.len() { a.create_label() } else { go };
        a.cmp(ax, (s & 0xffff) as u32)?;
        a.jne(other)?;
        a.mov(rax, s)?;
        a.jmp(qword_ptr(r10 + 8 * slot as i32))?;
        if k + 1 < known.len() {
            a.set_label(&mut other)?;
        }
    }
    a.set_label(&mut go)?;
    a.movzx(eax, ax)?;
    a.or(rax, r11)?;
    // rdx = the slot's offset (16 bytes a slot, `(addr >> 2) & mask` slots in).
    a.mov(edx, eax)?;
    a.and(edx, (hash.mask << 2) as i32)?;
    a.lea(rdx, qword_ptr(rsi + rdx * 4))?;
    a.cmp(qword_ptr(rdx), rax)?;
    a.jne(probe)?;
    a.jmp(qword_ptr(rdx + 8))?;
    // Linear probing, up to an empty slot (the table ends with one).
    a.set_label(&mut probe)?;
    a.cmp(qword_ptr(rdx), EMPTY as i32)?;
    a.je(out)?;
    a.add(rdx, 16)?;
    a.cmp(qword_ptr(rdx), rax)?;
    a.jne(probe)?;
    a.jmp(qword_ptr(rdx + 8))?;
    // The word after the block is a control record: unless it says where the block was
    // interrupted, or is a record of the block's instructions (sync, call, return: an
    // interruption record may follow them), or the tags end before saying, the block runs
    // here.
    a.set_label(&mut next_esc)?;
    a.lea(rdx, qword_ptr(r12 + 2))?;
    a.cmp(rdx, r8)?;
    a.ja(out)?;
    a.cmp(word_ptr(r12 + 4), CTL_INTERRUPTED as i32)?;
    a.je(out)?;
    a.cmp(word_ptr(r12 + 4), CTL_SYNC as i32)?;
    a.jae(out)?;
    a.jmp(go)?;
    // A short H-tag change rewrites bits 16..32 of the high part; the long one (three words,
    // 64-bit, rare) all of it, in the entry routine's copy. Other records leave.
    let mut set_hi = a.create_label();
    a.set_label(&mut esc)?;
    a.shr(eax, 16)?;
    a.lea(ecx, dword_ptr(rax - 1))?;
    a.cmp(ecx, (MAX_SHORT_H - 1) as i32)?;
    a.ja(set_hi)?;
    a.shr(r11, 32)?;
    a.shl(r11, 32)?;
    a.shl(eax, 16)?;
    a.or(r11, rax)?;
    a.add(r12, 4)?;
    a.jmp(top)?;
    let Some(labels) = shared else {
        a.set_label(&mut set_hi)?;
        a.jmp(st(offset_of!(JitState, set_hi)))?;
        a.set_label(&mut out)?;
        return exit(a);
    };
    // Entered with eax = the control word.
    a.set_label(&mut set_hi)?;
    labels.set_hi = set_hi;
    a.cmp(eax, CTL_SET_HI as i32)?;
    a.jne(out)?;
    a.lea(rdx, qword_ptr(r12 + 8))?;
    a.cmp(rdx, r8)?;
    a.ja(out)?;
    // Words 2..4 are the H-tag; shifting out the word after them leaves H << 16.
    a.mov(r11, qword_ptr(r12 + 4))?;
    a.shl(r11, 16)?;
    a.add(r12, 10)?;
    a.jmp(top)?;
    a.set_label(&mut out)?;
    labels.exit = out;
    a.mov(st(offset_of!(JitState, tags)), r12)?;
    a.mov(st(offset_of!(JitState, values)), r13)?;
    a.mov(st(offset_of!(JitState, refs)), r14)?;
    a.mov(st(offset_of!(JitState, blocks)), rbp)?;
    a.mov(st(offset_of!(JitState, status)), r15)?;
    a.mov(st(offset_of!(JitState, hi)), r11)?;
    for r in [r15, r14, r13, r12, rbp, rbx] {
        a.pop(r)?;
    }
    a.ret()
}

/// The entry routine (`extern "sysv64" fn(*mut JitState)`), with the shared dispatch and
/// the exit routine, whose labels are returned.
pub(super) fn trampoline(a: &mut CodeAssembler, hash: Hash) -> Result<SharedLabels, IcedError> {
    for r in [rbx, rbp, r12, r13, r14, r15] {
        a.push(r)?;
    }
    a.mov(rbx, rdi)?;
    a.mov(r12, st(offset_of!(JitState, tags)))?;
    a.mov(r13, st(offset_of!(JitState, values)))?;
    a.mov(r14, st(offset_of!(JitState, refs)))?;
    a.mov(rbp, st(offset_of!(JitState, blocks)))?;
    a.mov(r15, st(offset_of!(JitState, status)))?;
    a.mov(r8, st(offset_of!(JitState, tags_last)))?;
    a.mov(r9, st(offset_of!(JitState, refs_limit)))?;
    a.mov(r10, st(offset_of!(JitState, succ)))?;
    a.mov(rdi, st(offset_of!(JitState, values_end)))?;
    a.mov(rsi, st(offset_of!(JitState, table)))?;
    a.mov(r11, st(offset_of!(JitState, hi)))?;
    let mut labels = SharedLabels { exit: a.create_label(), set_hi: a.create_label() };
    dispatch(a, hash, Some(&mut labels), &[])?;
    Ok(labels)
}

/// A register's status at a point of a block, as the block's code knows it statically.
#[derive(Clone, Copy, PartialEq, Eq)]
enum St {
    Current,
    Expired,
    /// CURRENT exactly when the given register was on entry to the block: the CURRENT bit it
    /// had in r15d, which the code leaves as it was on entry until the block's end.
    Entry(u8),
}

/// What a block's code knows of the CURRENT bits at a point, from its own steps, the same
/// rules as the recoverer's ([`crate::flat::step_status`]) with the bits themselves left in
/// r15d as they were on entry: a test reads the bit of the register a status came from.
struct Known([St; NUM_REGS]);

impl Known {
    fn new() -> Known {
        Known(std::array::from_fn(|r| St::Entry(r as u8)))
    }

    /// Passes a step's (or the block end's) changes, its copies taking their holders' status
    /// from before them.
    fn change(&mut self, expired: u32, derived: u32, copies: &[(u8, u8)]) {
        let before = self.0;
        for (r, st) in self.0.iter_mut().enumerate() {
            if expired >> r & 1 != 0 {
                *st = St::Expired;
            }
            if derived >> r & 1 != 0 {
                *st = St::Current;
            }
        }
        for &(r, h) in copies {
            self.0[r as usize] = before[h as usize];
        }
    }

    /// Passes a step: returns the registers whose values it reads from DEP_m and, for those
    /// it reads only if a CURRENT bit on entry is clear, that bit's register.
    fn step(&mut self, s: &FlatStep, copies: &[(u8, u8)]) -> (u32, [Option<u8>; NUM_REGS]) {
        self.change(s.expired, s.derived, copies);
        let mut load = 0;
        let mut test = [None; NUM_REGS];
        for (r, st) in self.0.iter_mut().enumerate() {
            if s.used >> r & 1 != 0 {
                match *st {
                    St::Current => {}
                    St::Expired => load |= 1 << r,
                    St::Entry(q) => {
                        load |= 1 << r;
                        test[r] = Some(q);
                    }
                }
                *st = St::Current;
            }
        }
        (load, test)
    }

    /// The block end's r15d from the entry's: `(r15d & keep) | set`.
    fn end(&self) -> (u32, u32) {
        let (mut keep, mut set) = (0u32, 0u32);
        for (r, st) in self.0.iter().enumerate() {
            match *st {
                St::Current => set |= 1 << r,
                St::Entry(q) if q as usize == r => keep |= 1 << r,
                // Another register's status is expired at the end (`BlockPlan::from_insns`).
                _ => {}
            }
        }
        (keep, set)
    }
}

/// The code of one plain block (no special step), at block index `id`, compiled `nth`:
/// `succ` are its successors to test for (same 64 KiB, nonzero L-tag), whose code is at
/// entries `2 * nth` and `2 * nth + 1` of the successor table.
///
/// Without `popcnt` the block leaves whenever fewer values remain than it could read.
#[allow(clippy::too_many_arguments)]
pub(super) fn block(
    a: &mut CodeAssembler,
    flat: &FlatPlans,
    id: u32,
    addr: u64,
    succ: [Option<u64>; 2],
    nth: usize,
    hash: Hash,
    popcnt: bool,
) -> R {
    let fb = &flat.blocks[id as usize];
    let steps = &flat.steps[fb.steps.0 as usize..fb.steps.1 as usize];
    // The values the block reads: those of registers it always reloads, and those of the
    // registers it uses before changing them that are not CURRENT on entry. Checked once,
    // exactly, before the block changes anything; short of them it leaves, and the general
    // walk reports the stream exhausted.
    // Two registers read only if one bit on entry is clear count as two.
    let mut k = Known::new();
    let (mut on_entry, mut always) = (0u32, 0i32);
    for s in steps {
        let (load, test) = k.step(s, flat.copies_in(s.copies));
        for r in (0..NUM_REGS).filter(|r| load >> r & 1 != 0) {
            match test[r] {
                Some(q) if on_entry >> q & 1 == 0 => on_entry |= 1 << q,
                _ => always += 1,
            }
        }
    }
    if on_entry != 0 || always != 0 {
        let mut ok = a.create_label();
        if on_entry == 0 {
            a.lea(rdx, qword_ptr(r13 + 8 * always))?;
        } else if popcnt {
            a.mov(edx, r15d)?;
            a.not(edx)?;
            a.and(edx, on_entry)?;
            a.popcnt(edx, edx)?;
            a.lea(rdx, qword_ptr(r13 + rdx * 8 + 8 * always))?;
        } else {
            a.lea(rdx, qword_ptr(r13 + 8 * (always + on_entry.count_ones() as i32)))?;
        }
        a.cmp(rdx, rdi)?;
        a.jbe(ok)?;
        exit(a)?;
        a.set_label(&mut ok)?;
    }
    a.add(r12, 2)?;
    a.mov(qword_ptr(rbp), rax)?;
    a.mov(dword_ptr(rbp + 8), id)?;
    a.mov(dword_ptr(rbp + 12), fb.insns | fb.refs << 16)?;
    a.add(rbp, size_of::<BlockRec>() as i32)?;

    // Constant adjustments (push, pop, add rsp) are added to the register slots only where a
    // value is loaded or a masked address needs them, and at the end; references fold them
    // into their displacement. rax keeps the block's address, which pcs are taken from.
    let mut pending = Pending([0; NUM_REGS]);
    // r15d keeps the CURRENT bits of the block's entry until its end.
    let mut k = Known::new();
    let mut n = 0i32;
    for s in steps {
        let (load, test) = k.step(s, flat.copies_in(s.copies));
        pending.add(&flat.adjust[s.adjust.0 as usize..s.adjust.1 as usize]);
        ops(a, &flat.ops[s.ops.0 as usize..s.ops.1 as usize], &mut pending)?;
        load_values(a, load, &test, &mut pending)?;
        for r in &flat.refs[s.refs.0 as usize..s.refs.1 as usize] {
            address(a, r, &mut pending)?;
            let at = n * EVENT as i32;
            match r.event.pc.wrapping_sub(addr) {
                0 => a.mov(qword_ptr(r14 + at), rax)?,
                d if fits_i32(d) => {
                    a.lea(rdx, qword_ptr(rax + d as i32))?;
                    a.mov(qword_ptr(r14 + at), rdx)?;
                }
                _ => {
                    a.mov(rdx, r.event.pc)?;
                    a.mov(qword_ptr(r14 + at), rdx)?;
                }
            }
            a.mov(qword_ptr(r14 + at + 8), rcx)?;
            // Size, access, conditional and instruction index, the event's last 8 bytes, in
            // one store: references are written faster than anything else the code does, and
            // a store fewer each made interp's and CPython's recovery about 5% faster.
            let tail = r.event.access as u8 as u64 | (r.event.conditional as u64) << 8 | (r.event.insn as u64) << 16;
            a.mov(rdx, r.event.size as u64 | tail << 32)?;
            a.mov(qword_ptr(r14 + at + 16), rdx)?;
            n += 1;
        }
    }
    if n > 0 {
        a.add(r14, n * EVENT as i32)?;
    }
    k.change(fb.tail_expired, fb.tail_derived, flat.copies_in(fb.tail_copies));
    let (keep, set) = k.end();
    if keep != (1 << NUM_REGS) - 1 {
        a.and(r15d, keep as i32)?;
    }
    if set != 0 {
        a.or(r15d, set as i32)?;
    }
    pending.add(&flat.adjust[fb.tail_adjust.0 as usize..fb.tail_adjust.1 as usize]);
    ops(a, &flat.ops[fb.tail_ops.0 as usize..fb.tail_ops.1 as usize], &mut pending)?;
    for r in 0..NUM_REGS as u8 {
        pending.flush(a, r)?;
    }
    let known: Vec<(u64, usize)> = (0..2).filter_map(|k| succ[k].map(|s| (s, 2 * nth + k))).collect();
    dispatch(a, hash, None, &known)
}

/// Loads the values of `regs` from DEP_m in ascending order, those with a `test` only if
/// that register's CURRENT bit on entry (in r15d) is clear. A skipped load's label takes
/// the next instruction: every block emits at least one after its loads.
fn load_values(a: &mut CodeAssembler, mut regs: u32, test: &[Option<u8>; NUM_REGS], pending: &mut Pending) -> R {
    while regs != 0 {
        let r = regs.trailing_zeros();
        regs &= regs - 1;
        let mut skip = a.create_label();
        let tested = test[r as usize];
        if let Some(q) = tested {
            // Not loaded, the register keeps its adjusted value.
            pending.flush(a, r as u8)?;
            a.bt(r15d, q as i32)?;
            a.jc(skip)?;
        } else {
            pending.0[r as usize] = 0;
        }
        a.mov(rcx, qword_ptr(r13))?;
        a.mov(val(r as u8), rcx)?;
        a.add(r13, 8)?;
        if tested.is_some() {
            a.set_label(&mut skip)?;
        }
    }
    Ok(())
}

/// A plan's ordered value changes: constant additions stay pending; a derivation is
/// computed in rcx (rdx for its second source) from its sources' slots, as
/// [`dep_profile::derive::Derive::eval`] defines, and stored in its destination's slot.
fn ops(a: &mut CodeAssembler, ops: &[RegOp], pending: &mut Pending) -> R {
    for op in ops {
        let d = match *op {
            RegOp::Add(r, c) => {
                pending.add(&[(r.index() as u8, c as u64)]);
                continue;
            }
            RegOp::Derive(d) => d,
        };
        for r in d.sources().iter() {
            pending.flush(a, r.index() as u8)?;
        }
        pending.0[d.dst.index()] = 0;
        let wide = d.bits == 64;
        load_src(a, d.a, rcx, ecx, cx, cl)?;
        load_src(a, d.b, rdx, edx, dx, dl)?;
        match d.op {
            DeriveOp::Mov => {}
            DeriveOp::Sext => match d.a {
                Src::Reg(_, 32) => a.movsxd(rcx, ecx)?,
                Src::Reg(_, 16) => a.movsx(rcx, cx)?,
                Src::Reg(_, 8) => a.movsx(rcx, cl)?,
                _ => {}
            },
            DeriveOp::Add => a.add(rcx, rdx)?,
            DeriveOp::Sub => a.sub(rcx, rdx)?,
            DeriveOp::And => a.and(rcx, rdx)?,
            DeriveOp::Or => a.or(rcx, rdx)?,
            DeriveOp::Xor => a.xor(rcx, rdx)?,
            DeriveOp::Imul => a.imul_2(rcx, rdx)?,
            DeriveOp::Shl | DeriveOp::Shr | DeriveOp::Sar => {
                // The count goes to cl; the machine masks it as the program's did.
                a.xchg(rcx, rdx)?;
                match (d.op, wide) {
                    (DeriveOp::Shl, true) => a.shl(rdx, cl)?,
                    (DeriveOp::Shl, false) => a.shl(edx, cl)?,
                    (DeriveOp::Shr, true) => a.shr(rdx, cl)?,
                    (DeriveOp::Shr, false) => a.shr(edx, cl)?,
                    (_, true) => a.sar(rdx, cl)?,
                    (_, false) => a.sar(edx, cl)?,
                }
                a.mov(rcx, rdx)?;
            }
            DeriveOp::Neg => a.neg(rcx)?,
            DeriveOp::Not => a.not(rcx)?,
            DeriveOp::Lea { scale, disp, addr_bits } => {
                match scale {
                    1 => a.add(rcx, rdx)?,
                    2 => a.lea(rcx, qword_ptr(rcx + rdx * 2))?,
                    4 => a.lea(rcx, qword_ptr(rcx + rdx * 4))?,
                    8 => a.lea(rcx, qword_ptr(rcx + rdx * 8))?,
                    _ => {
                        a.imul_3(rdx, rdx, scale as i32)?;
                        a.add(rcx, rdx)?;
                    }
                }
                add_to_rcx(a, disp)?;
                if addr_bits == 32 {
                    a.mov(ecx, ecx)?;
                }
            }
        }
        if !wide {
            a.mov(ecx, ecx)?;
        }
        a.mov(val(d.dst.index() as u8), rcx)?;
    }
    Ok(())
}

/// Loads a derivation's source into `r64`, read at its width.
fn load_src(a: &mut CodeAssembler, s: Src, q: AsmRegister64, d: AsmRegister32, w: AsmRegister16, b: AsmRegister8) -> R {
    match s {
        Src::Imm(v) => a.mov(q, v),
        Src::Reg(r, bits) => {
            a.mov(q, val(r.index() as u8))?;
            match bits {
                32 => a.mov(d, d),
                16 => a.movzx(d, w),
                8 => a.movzx(d, b),
                _ => Ok(()),
            }
        }
    }
}

/// Constants a block has added to registers (push, pop, add rsp, ...) and not yet stored.
struct Pending([u64; NUM_REGS]);

impl Pending {
    fn add(&mut self, adjust: &[(u8, u64)]) {
        for &(r, d) in adjust {
            let p = &mut self.0[r as usize];
            *p = p.wrapping_add(d);
        }
    }

    /// Adds register `r`'s pending constant to its slot (64-bit: no mask).
    fn flush(&mut self, a: &mut CodeAssembler, r: u8) -> R {
        let d = std::mem::take(&mut self.0[r as usize]);
        if d == 0 {
            Ok(())
        } else if fits_i32(d) {
            a.add(val(r), d as i32)
        } else {
            a.mov(rcx, d)?;
            a.add(val(r), rcx)
        }
    }
}

/// Masks `reg` (rcx or rdx) to the low bits `mask` selects, as [`FlatRef::eval`] does.
fn mask(a: &mut CodeAssembler, reg: AsmRegister64, reg32: AsmRegister32, mask: u64) -> R {
    if mask == u64::MAX {
        Ok(())
    } else if mask <= u32::MAX as u64 {
        // A 32-bit `and` clears the upper half as well.
        a.and(reg32, mask as u32)
    } else {
        // No register width gives such a mask; rax holds the block's address, so it is kept.
        a.push(rax)?;
        a.mov(rax, mask)?;
        a.and(reg, rax)?;
        a.pop(rax)
    }
}

/// Adds a constant to rcx (through rdx when it needs all 64 bits).
fn add_to_rcx(a: &mut CodeAssembler, v: u64) -> R {
    if v == 0 {
        Ok(())
    } else if fits_i32(v) {
        a.add(rcx, v as i32)
    } else {
        a.mov(rdx, v)?;
        a.add(rcx, rdx)
    }
}

/// Computes a reference's address into rcx (rdx is scratch), with the registers' pending
/// constants folded into a simple one's displacement and stored first for any other.
fn address(a: &mut CodeAssembler, r: &FlatRef, pending: &mut Pending) -> R {
    let base = r.base as usize != ZERO;
    let index = r.index as usize != ZERO;
    if r.simple {
        let scale = 1u32 << r.shift;
        let pend = |reg: u8, on: bool| if on { pending.0[reg as usize] } else { 0 };
        let disp = r.disp.wrapping_add(pend(r.base, base)).wrapping_add(pend(r.index, index) << r.shift);
        let r = &FlatRef { disp, ..*r };
        match (base, index) {
            (true, true) => {
                a.mov(rcx, val(r.base))?;
                a.mov(rdx, val(r.index))?;
                if fits_i32(r.disp) {
                    a.lea(rcx, qword_ptr(rcx + rdx * scale + r.disp as i32))?;
                } else {
                    a.lea(rcx, qword_ptr(rcx + rdx * scale))?;
                    add_to_rcx(a, r.disp)?;
                }
            }
            (true, false) => {
                a.mov(rcx, val(r.base))?;
                add_to_rcx(a, r.disp)?;
            }
            (false, true) => {
                a.mov(rdx, val(r.index))?;
                if fits_i32(r.disp) {
                    a.lea(rcx, qword_ptr(rdx * scale + r.disp as i32))?;
                } else {
                    a.lea(rcx, qword_ptr(rdx * scale))?;
                    add_to_rcx(a, r.disp)?;
                }
            }
            (false, false) => a.mov(rcx, r.disp)?,
        }
        return Ok(());
    }
    // ((disp + base & mask + (index & mask) * scale) & addr_mask) + segment base
    for (reg, on) in [(r.base, base), (r.index, index), (r.seg, r.seg as usize != ZERO)] {
        if on {
            pending.flush(a, reg)?;
        }
    }
    if base {
        a.mov(rcx, val(r.base))?;
        mask(a, rcx, ecx, r.base_mask)?;
    } else {
        a.xor(ecx, ecx)?;
    }
    if index {
        a.mov(rdx, val(r.index))?;
        mask(a, rdx, edx, r.index_mask)?;
        if r.scale != 1 {
            a.imul_3(rdx, rdx, r.scale as i32)?;
        }
        a.add(rcx, rdx)?;
    }
    add_to_rcx(a, r.disp)?;
    mask(a, rcx, ecx, r.addr_mask)?;
    if r.seg as usize != ZERO {
        a.add(rcx, val(r.seg))?;
    }
    Ok(())
}
