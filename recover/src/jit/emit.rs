//! Machine code for one block, and for entering and leaving compiled code.
//!
//! Registers, the same in every piece of code: rbx points at the [`JitState`], r12 at the next
//! tag word, r13 at the next DEP_m word, r14 at the next reference to write, rbp at the next
//! block record, r15 holds the CURRENT bits; r8 and r9 hold the limits of r12 and r14 (r8's
//! also bounds rbp's; r13's is in the state), rsi the dispatch table, r10 the successor table
//! and r11 the address bits above the L-tag ([`JitState::hi`] while the code runs). In a
//! block, rcx and rdx hold register values ([`Code`]) and rdi is scratch. A block is entered with
//! rax = its address and r12 at its L-tag; it leaves either into the next block or through
//! the exit, with r12 at a tag word the general walk then reads.

use super::{BlockRec, JitState, Slot, EMPTY};
use crate::flat::{FlatPlans, FlatRef, FlatStep, ZERO};
use crate::records::MemEvent;
use dep_profile::blocks::RegOp;
use dep_profile::derive::{Derive, DeriveOp, Src};
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

/// Leaves to `out` when a buffer is full or the tags end, else reads the next two tag words
/// into eax, going to `esc` when the first is `ESC` (0x0000) and to `next_esc` when the
/// second is.
fn next_word(a: &mut CodeAssembler, out: CodeLabel, esc: CodeLabel, next_esc: CodeLabel) -> R {
    a.cmp(r14, r9)?;
    a.ja(out)?;
    a.cmp(r12, r8)?;
    a.ja(out)?;
    a.mov(eax, dword_ptr(r12))?;
    a.test(ax, ax)?;
    a.jz(esc)?;
    a.test(eax, 0xffff_0000u32 as i32)?;
    a.jz(next_esc)
}

/// Reads the next tag word and jumps to its block's code, or leaves: when a buffer is full,
/// the chunk's tags end, the word is a control record other than an H-tag change, the block
/// is followed by an interruption record, or it is not in the dispatch table.
///
/// Emitted at the end of every block, so each block's jump to its successor is predicted
/// apart; the long H-tag change and the exit jump to the one copy in the entry routine
/// (`shared` is `Some` there, and gets their labels).
///
/// `known` are the block's successors in its own 64 KiB with where their code is: a plain
/// L-tag naming one of them (the H-tag still the block's own) jumps to the code the table
/// would give for it, with no lookup.
fn dispatch(a: &mut CodeAssembler, hash: Hash, shared: Option<&mut SharedLabels>, known: &[(u64, Target)]) -> R {
    let mut top = a.create_label();
    let mut out = a.create_label();
    let mut esc = a.create_label();
    let mut next_esc = a.create_label();
    let mut go = a.create_label();
    let mut probe = a.create_label();
    a.set_label(&mut top)?;
    next_word(a, out, esc, next_esc)?;
    // Only here, before any H-tag change (after one the code goes on below `esc`, not to
    // `top`). (A label marks one instruction: the last test goes on to `go` itself.)
    for (k, &(s, target)) in known.iter().enumerate() {
        let mut other = if k + 1 < known.len() { a.create_label() } else { go };
        a.cmp(ax, (s & 0xffff) as u32)?;
        a.jne(other)?;
        a.mov(rax, s)?;
        match target {
            Target::Label(l) => a.jmp(l)?,
            Target::Entry(slot) => a.jmp(qword_ptr(r10 + 8 * slot as i32))?,
        }
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
    if known.is_empty() {
        a.jmp(top)?;
    } else {
        // The known successors' L-tags name them only under the block's own H-tag: after a
        // change, the same reads and tests as at `top`, then the table.
        next_word(a, out, esc, next_esc)?;
        a.jmp(go)?;
    }
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

/// Where a known successor's code is.
#[derive(Clone, Copy)]
pub(super) enum Target {
    /// Compiled in the same assembler run as the block: a direct jump, which needs no load
    /// and no prediction of its target.
    Label(CodeLabel),
    /// Its entry in the successor table (the exit routine's address where it has no code).
    Entry(usize),
}

/// The code of one plain block (no special step), at block index `id`, compiled `nth`:
/// `succ` are its successors to test for (same 64 KiB, nonzero L-tag), whose code is at
/// entries `2 * nth` and `2 * nth + 1` of the successor table, or at `labels` where given.
///
/// Without `popcnt` the block leaves whenever fewer values remain than it could read.
#[allow(clippy::too_many_arguments)]
pub(super) fn block(
    a: &mut CodeAssembler,
    flat: &FlatPlans,
    id: u32,
    addr: u64,
    succ: [Option<u64>; 2],
    labels: [Option<CodeLabel>; 2],
    nth: usize,
    hash: Hash,
    popcnt: bool,
) -> R {
    let fb = &flat.blocks[id as usize];
    let steps = &flat.steps[fb.steps.0 as usize..fb.steps.1 as usize];
    // The values the block reads: those of registers it always reloads, and those of the
    // registers it uses before changing them that are not CURRENT on entry. Checked before
    // the block changes anything; short of them it leaves, and the general walk reports the
    // stream exhausted.
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
    // First against the most the block can read, which passes everywhere but near the end
    // of a chunk's values; only short of that, and with `popcnt`, exactly, so that a chunk's
    // last blocks, which may read fewer, still run here. (The exact count in every block
    // was four instructions more in each: interp's recovery 6% more instructions.)
    if on_entry != 0 || always != 0 {
        let mut ok = a.create_label();
        a.lea(rdx, qword_ptr(r13 + 8 * (always + on_entry.count_ones() as i32)))?;
        a.cmp(rdx, st(offset_of!(JitState, values_end)))?;
        a.jbe(ok)?;
        if on_entry != 0 && popcnt {
            a.mov(edx, r15d)?;
            a.not(edx)?;
            a.and(edx, on_entry)?;
            a.popcnt(edx, edx)?;
            a.lea(rdx, qword_ptr(r13 + rdx * 8 + 8 * always))?;
            a.cmp(rdx, st(offset_of!(JitState, values_end)))?;
            a.jbe(ok)?;
        }
        exit(a)?;
        a.set_label(&mut ok)?;
    }
    a.add(r12, 2)?;
    a.mov(qword_ptr(rbp), rax)?;
    // The record's id and counts in one store, as references' last fields are (below).
    a.mov(rdi, id as u64 | ((fb.insns | fb.refs << 16) as u64) << 32)?;
    a.mov(qword_ptr(rbp + 8), rdi)?;
    a.add(rbp, size_of::<BlockRec>() as i32)?;

    // Constant adjustments (push, pop, add rsp) are added to the register slots only where a
    // value is loaded or a masked address needs them, and at the end; references fold them
    // into their displacement. rax keeps the block's address, which pcs are taken from.
    let mut c = Code { a, pending: [0; NUM_REGS], held: [None; 2], recent: RCX };
    // r15d keeps the CURRENT bits of the block's entry until its end.
    let mut k = Known::new();
    let mut n = 0i32;
    for s in steps {
        let (load, test) = k.step(s, flat.copies_in(s.copies));
        c.add_pending(&flat.adjust[s.adjust.0 as usize..s.adjust.1 as usize]);
        c.ops(&flat.ops[s.ops.0 as usize..s.ops.1 as usize])?;
        c.load_values(load, &test)?;
        for r in &flat.refs[s.refs.0 as usize..s.refs.1 as usize] {
            c.address(r)?;
            let a = &mut *c.a;
            let at = n * EVENT as i32;
            match r.event.pc.wrapping_sub(addr) {
                0 => a.mov(qword_ptr(r14 + at), rax)?,
                d if fits_i32(d) => {
                    a.lea(rdi, qword_ptr(rax + d as i32))?;
                    a.mov(qword_ptr(r14 + at), rdi)?;
                }
                _ => {
                    a.mov(rdi, r.event.pc)?;
                    a.mov(qword_ptr(r14 + at), rdi)?;
                }
            }
            a.mov(qword_ptr(r14 + at + 8), rcx)?;
            // Size, access, conditional and instruction index, the event's last 8 bytes, in
            // one store: references are written faster than anything else the code does, and
            // a store fewer each made interp's and CPython's recovery about 5% faster.
            let tail = r.event.access as u8 as u64 | (r.event.conditional as u64) << 8 | (r.event.insn as u64) << 16;
            a.mov(rdi, r.event.size as u64 | tail << 32)?;
            a.mov(qword_ptr(r14 + at + 16), rdi)?;
            n += 1;
        }
    }
    if n > 0 {
        c.a.add(r14, n * EVENT as i32)?;
    }
    k.change(fb.tail_expired, fb.tail_derived, flat.copies_in(fb.tail_copies));
    let (keep, set) = k.end();
    if keep != (1 << NUM_REGS) - 1 {
        c.a.and(r15d, keep as i32)?;
    }
    if set != 0 {
        c.a.or(r15d, set as i32)?;
    }
    c.add_pending(&flat.adjust[fb.tail_adjust.0 as usize..fb.tail_adjust.1 as usize]);
    c.ops(&flat.ops[fb.tail_ops.0 as usize..fb.tail_ops.1 as usize])?;
    for r in 0..NUM_REGS as u8 {
        c.flush(r, false)?;
    }
    let target = |k: usize| labels[k].map_or(Target::Entry(2 * nth + k), Target::Label);
    let known: Vec<(u64, Target)> = (0..2).filter_map(|k| succ[k].map(|s| (s, target(k)))).collect();
    dispatch(a, hash, None, &known)
}

/// rcx and rdx, the two registers a block's code keeps register values in, by index.
const RCX: usize = 0;
const RDX: usize = 1;
const HOST: [AsmRegister64; 2] = [rcx, rdx];
const HOST32: [AsmRegister32; 2] = [ecx, edx];
const HOST16: [AsmRegister16; 2] = [cx, dx];
const HOST8: [AsmRegister8; 2] = [cl, dl];

/// One block's code being written: the constants added to registers and not yet stored, and
/// which value slots rcx and rdx hold.
///
/// The slots in [`JitState::vals`] always hold the values (less `pending`); rcx and rdx may
/// also hold a slot's value, as the code stands at the current point, where one was just
/// loaded, stored or derived. Reading it from there again costs no load: a load from a slot
/// right after its store waits for the store to be forwarded, several cycles, on the path
/// from one derivation or reference to the next. rdi is scratch that holds nothing.
struct Code<'a> {
    a: &'a mut CodeAssembler,
    pending: [u64; NUM_REGS],
    held: [Option<u8>; 2],
    /// The host register set last; the other is the one to load into.
    recent: usize,
}

impl Code<'_> {
    fn add_pending(&mut self, adjust: &[(u8, u64)]) {
        for &(r, d) in adjust {
            let p = &mut self.pending[r as usize];
            *p = p.wrapping_add(d);
        }
    }

    /// The host register holding slot `r`, if one does.
    fn find(&self, r: u8) -> Option<usize> {
        (0..2).find(|&h| self.held[h] == Some(r))
    }

    /// The host register to load a slot into: an empty one, else the one set less recently.
    fn victim(&self) -> usize {
        match self.held {
            [None, _] => RCX,
            [_, None] => RDX,
            _ => 1 - self.recent,
        }
    }

    /// Host register `h` no longer holds any slot.
    fn clobber(&mut self, h: usize) {
        self.held[h] = None;
    }

    /// Host register `h` holds slot `r`'s value, which the slot itself has too (after a
    /// store or load): the other host's copy of `r`, if any, is older.
    fn set(&mut self, h: usize, r: u8) {
        if self.held[1 - h] == Some(r) {
            self.held[1 - h] = None;
        }
        self.held[h] = Some(r);
        self.recent = h;
    }

    /// Puts slot `r`'s value into host register `h`.
    fn fetch(&mut self, h: usize, r: u8) -> R {
        if self.held[h] == Some(r) {
            return Ok(());
        }
        if self.held[1 - h] == Some(r) {
            self.a.mov(HOST[h], HOST[1 - h])?;
        } else {
            self.a.mov(HOST[h], val(r))?;
        }
        self.held[h] = Some(r);
        self.recent = h;
        Ok(())
    }

    /// Slot `r` in a host register: the one holding it, else loaded into the victim.
    fn fetch_any(&mut self, r: u8) -> Result<usize, IcedError> {
        let h = self.find(r).unwrap_or_else(|| self.victim());
        self.fetch(h, r)?;
        Ok(h)
    }

    /// Adds register `r`'s pending constant to its slot (64-bit: no mask). In a host
    /// register (`keep`, or where one holds it), which holds the slot after, for the read
    /// that comes next.
    fn flush(&mut self, r: u8, keep: bool) -> R {
        let d = std::mem::take(&mut self.pending[r as usize]);
        if d == 0 {
            return Ok(());
        }
        let h = match self.find(r) {
            Some(h) => h,
            None if keep => self.fetch_any(r)?,
            None => {
                if fits_i32(d) {
                    self.a.add(val(r), d as i32)?;
                } else {
                    self.a.mov(rdi, d)?;
                    self.a.add(val(r), rdi)?;
                }
                return Ok(());
            }
        };
        if fits_i32(d) {
            self.a.add(HOST[h], d as i32)?;
        } else {
            self.a.mov(rdi, d)?;
            self.a.add(HOST[h], rdi)?;
        }
        self.a.mov(val(r), HOST[h])?;
        self.set(h, r);
        Ok(())
    }

    /// Loads the values of `regs` from DEP_m in ascending order, those with a `test` only
    /// if that register's CURRENT bit on entry (in r15d) is clear. A skipped load's label
    /// takes the next instruction: every block emits at least one after its loads.
    fn load_values(&mut self, mut regs: u32, test: &[Option<u8>; NUM_REGS]) -> R {
        while regs != 0 {
            let r = regs.trailing_zeros() as u8;
            regs &= regs - 1;
            let h = match test[r as usize] {
                Some(q) => {
                    // Not loaded, the register keeps its adjusted value: the host register
                    // takes it first, so that it holds the slot on both paths.
                    self.flush(r, true)?;
                    let h = self.fetch_any(r)?;
                    let mut skip = self.a.create_label();
                    self.a.bt(r15d, q as i32)?;
                    self.a.jc(skip)?;
                    self.a.mov(HOST[h], qword_ptr(r13))?;
                    self.a.mov(val(r), HOST[h])?;
                    self.a.add(r13, 8)?;
                    self.a.set_label(&mut skip)?;
                    h
                }
                None => {
                    self.pending[r as usize] = 0;
                    let h = self.victim();
                    self.a.mov(HOST[h], qword_ptr(r13))?;
                    self.a.mov(val(r), HOST[h])?;
                    self.a.add(r13, 8)?;
                    h
                }
            };
            self.set(h, r);
        }
        Ok(())
    }

    /// A plan's ordered value changes: constant additions stay pending; a derivation is
    /// computed in rcx (rdx holds its second source) from its sources' values, as
    /// [`dep_profile::derive::Derive::eval`] defines, and stored in its destination's slot.
    fn ops(&mut self, ops: &[RegOp]) -> R {
        for op in ops {
            let d = match *op {
                RegOp::Add(r, c) => {
                    self.add_pending(&[(r.index() as u8, c as u64)]);
                    continue;
                }
                RegOp::Derive(d) => d,
            };
            for r in d.sources().iter() {
                self.flush(r.index() as u8, true)?;
            }
            self.pending[d.dst.index()] = 0;
            self.derive(&d)?;
            if d.bits != 64 {
                self.a.mov(ecx, ecx)?;
            }
            self.a.mov(val(d.dst.index() as u8), rcx)?;
            self.set(RCX, d.dst.index() as u8);
        }
        Ok(())
    }

    /// Computes derivation `d`'s value into rcx (its upper half not yet cleared for a
    /// 32-bit one).
    fn derive(&mut self, d: &Derive) -> R {
        let wide = d.bits == 64;
        // Only these read the second source.
        let binary = !matches!(d.op, DeriveOp::Mov | DeriveOp::Sext | DeriveOp::Neg | DeriveOp::Not);
        let (ra, rb) = (d.a.reg().map(|r| r.index() as u8), if binary { d.b.reg().map(|r| r.index() as u8) } else { None });
        // The sources into rcx and rdx, each from where it is held: the second first where
        // only rcx has it.
        if let (Some(x), Some(y)) = (ra, rb) {
            if x != y && self.held == [Some(y), Some(x)] {
                self.a.xchg(rcx, rdx)?;
                self.held = [Some(x), Some(y)];
            } else if x != y && self.held[RCX] == Some(y) {
                self.fetch(RDX, y)?;
            }
        }
        self.source(d.a, RCX)?;
        if let (DeriveOp::Lea { disp, addr_bits, .. }, Src::Imm(0)) = (d.op, d.b) {
            // No index (`lea rax, [rbx+8]`): nothing of rdx is needed.
            add_to_rcx(self.a, disp)?;
            if addr_bits == 32 {
                self.a.mov(ecx, ecx)?;
            }
            self.clobber(RCX);
            return Ok(());
        }
        if binary {
            if let Src::Imm(v) = d.b {
                if self.immediate(d.op, wide, v)? {
                    return Ok(());
                }
            }
            self.source(d.b, RDX)?;
        }
        let a = &mut *self.a;
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
                self.clobber(RDX);
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
                        a.imul_3(rdi, rdx, scale as i32)?;
                        a.add(rcx, rdi)?;
                    }
                }
                add_to_rcx(a, disp)?;
                if addr_bits == 32 {
                    a.mov(ecx, ecx)?;
                }
            }
        }
        self.clobber(RCX);
        Ok(())
    }

    /// Computes `rcx op v` for a constant second source, where an instruction takes it as an
    /// immediate: a 32-bit operation needs only its low half (its result's upper half is
    /// cleared after), a 64-bit one a sign-extended 32-bit value. Whether it did.
    fn immediate(&mut self, op: DeriveOp, wide: bool, v: u64) -> Result<bool, IcedError> {
        let i = if wide && fits_i32(v) {
            v as i32
        } else if !wide {
            v as u32 as i32
        } else {
            return Ok(false);
        };
        let a = &mut *self.a;
        match op {
            DeriveOp::Add => a.add(rcx, i)?,
            DeriveOp::Sub => a.sub(rcx, i)?,
            DeriveOp::And => a.and(rcx, i)?,
            DeriveOp::Or => a.or(rcx, i)?,
            DeriveOp::Xor => a.xor(rcx, i)?,
            DeriveOp::Imul => a.imul_3(rcx, rcx, i)?,
            // The count as the machine masks it (`Derive::eval` too).
            DeriveOp::Shl | DeriveOp::Shr | DeriveOp::Sar => {
                let n = (v & if wide { 63 } else { 31 }) as u32;
                match (op, wide) {
                    (DeriveOp::Shl, true) => a.shl(rcx, n)?,
                    (DeriveOp::Shl, false) => a.shl(ecx, n)?,
                    (DeriveOp::Shr, true) => a.shr(rcx, n)?,
                    (DeriveOp::Shr, false) => a.shr(ecx, n)?,
                    (_, true) => a.sar(rcx, n)?,
                    (_, false) => a.sar(ecx, n)?,
                }
            }
            _ => return Ok(false),
        }
        self.clobber(RCX);
        Ok(true)
    }

    /// Puts a derivation's source, read at its width, into host register `h`.
    fn source(&mut self, s: Src, h: usize) -> R {
        match s {
            Src::Imm(v) => {
                self.a.mov(HOST[h], v)?;
                self.clobber(h);
            }
            Src::Reg(r, bits) => {
                self.fetch(h, r.index() as u8)?;
                match bits {
                    32 => self.a.mov(HOST32[h], HOST32[h])?,
                    16 => self.a.movzx(HOST32[h], HOST16[h])?,
                    8 => self.a.movzx(HOST32[h], HOST8[h])?,
                    _ => return Ok(()),
                }
                self.clobber(h);
            }
        }
        Ok(())
    }

    /// Computes a reference's address into rcx, with the registers' pending constants
    /// folded into a simple one's displacement and stored first for any other.
    fn address(&mut self, r: &FlatRef) -> R {
        let base = r.base as usize != ZERO;
        let index = r.index as usize != ZERO;
        if r.simple {
            let scale = 1u32 << r.shift;
            let pend = |reg: u8, on: bool| if on { self.pending[reg as usize] } else { 0 };
            let disp = r.disp.wrapping_add(pend(r.base, base)).wrapping_add(pend(r.index, index) << r.shift);
            let small = fits_i32(disp);
            match (base, index) {
                (true, true) => {
                    let hb = self.fetch_any(r.base)?;
                    let hi = match self.find(r.index) {
                        Some(h) => h,
                        None => {
                            // Not into the base's register.
                            let h = if r.base == r.index { hb } else { 1 - hb };
                            self.fetch(h, r.index)?;
                            h
                        }
                    };
                    let (b, i) = (HOST[hb], HOST[hi]);
                    let a = &mut *self.a;
                    if small {
                        a.lea(rcx, qword_ptr(b + i * scale + disp as i32))?;
                    } else {
                        a.lea(rcx, qword_ptr(b + i * scale))?;
                        add_to_rcx(a, disp)?;
                    }
                }
                (true, false) => {
                    let hb = self.fetch_any(r.base)?;
                    if disp == 0 && hb == RCX {
                        // rcx is the address and still holds the base.
                        return Ok(());
                    }
                    if small {
                        self.a.lea(rcx, qword_ptr(HOST[hb] + disp as i32))?;
                    } else {
                        if hb != RCX {
                            self.a.mov(rcx, HOST[hb])?;
                        }
                        add_to_rcx(self.a, disp)?;
                    }
                }
                (false, true) => {
                    let hi = self.fetch_any(r.index)?;
                    let a = &mut *self.a;
                    if small {
                        a.lea(rcx, qword_ptr(HOST[hi] * scale + disp as i32))?;
                    } else {
                        a.lea(rcx, qword_ptr(HOST[hi] * scale))?;
                        add_to_rcx(a, disp)?;
                    }
                }
                (false, false) => self.a.mov(rcx, disp)?,
            }
            self.clobber(RCX);
            return Ok(());
        }
        // ((disp + base & mask + (index & mask) * scale) & addr_mask) + segment base
        for (reg, on) in [(r.base, base), (r.index, index), (r.seg, r.seg as usize != ZERO)] {
            if on {
                self.flush(reg, false)?;
            }
        }
        if base {
            self.fetch(RCX, r.base)?;
            self.clobber(RCX);
            mask(self.a, rcx, ecx, r.base_mask)?;
        } else {
            self.a.xor(ecx, ecx)?;
            self.clobber(RCX);
        }
        if index {
            self.fetch(RDX, r.index)?;
            self.clobber(RDX);
            let a = &mut *self.a;
            mask(a, rdx, edx, r.index_mask)?;
            if r.scale != 1 {
                a.imul_3(rdx, rdx, r.scale as i32)?;
            }
            a.add(rcx, rdx)?;
        }
        let a = &mut *self.a;
        add_to_rcx(a, r.disp)?;
        mask(a, rcx, ecx, r.addr_mask)?;
        if r.seg as usize != ZERO {
            a.add(rcx, val(r.seg))?;
        }
        Ok(())
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
        // No register width gives such a mask.
        a.mov(rdi, mask)?;
        a.and(reg, rdi)
    }
}

/// Adds a constant to rcx (through rdi when it needs all 64 bits).
fn add_to_rcx(a: &mut CodeAssembler, v: u64) -> R {
    if v == 0 {
        Ok(())
    } else if fits_i32(v) {
        a.add(rcx, v as i32)
    } else {
        a.mov(rdi, v)?;
        a.add(rcx, rdi)
    }
}
