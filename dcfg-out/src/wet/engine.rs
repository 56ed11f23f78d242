//! The dependence engine: takes one thread's recovered blocks and references after another
//! and turns every dynamic instruction instance into its dependences and values.
//!
//! An instance is one execution of an instruction; each iteration of a rep string
//! instruction is one (it reads the pointers the previous one left). Instances are
//! numbered per static instruction from 0, threads in creation order, each in execution
//! order. Per instance: port 0 is its control dependence; then one port per register it
//! reads (the bytes it reads, each from its last definer), one for the flags it reads,
//! one per memory operand it reads (each byte from its last writer). Definitions take
//! effect after the instance's uses, memory writes after its reads.

use super::control::Control;
use super::memside::{Apart, MemHalf, MemOp};
use super::ops::{Op, Ops, BRANCH, GATHER, REP};
use super::shadow::{self, id_of, inst_of, pack, At, Def, Flags, Registers, NONE};
use super::statics::{Statics, NO_NODE};
use super::store::Background;
use super::values::Values;
use crate::program::calls::{BlockExits, CallFlow};
use dep_profile::semantics::Access;
use dep_recover::events::{BlockEvent, Marker, MemEvent};
use dep_recover::plans::Plans;
use std::collections::VecDeque;
use std::io;

/// Where dependences go.
pub enum Out {
    /// Every dependence and value, for the comprehensive format.
    Store(Background),
    /// The last `cap` dependences: (pc, instance, pc depended on, its instance).
    History { ring: VecDeque<[u64; 4]>, cap: usize },
}

impl Out {
    /// Whether instances' values are worked out: only the comprehensive format keeps them,
    /// and they never change a dependence.
    #[inline(always)]
    fn keeps_values(&self) -> bool {
        matches!(self, Out::Store(_))
    }

    /// Instance `d` computed `v` (only the comprehensive format keeps values).
    fn value(&mut self, st: &Statics, d: Def, v: u64) -> io::Result<()> {
        match self {
            Out::Store(s) => s.value(st.insns[id_of(d) as usize].value_seg(), inst_of(d), v),
            Out::History { .. } => Ok(()),
        }
    }
}

/// The instance being executed.
#[derive(Clone, Copy)]
struct Cur {
    idx: u32,
    /// Its [`Op`]'s place in [`Ops`].
    at: u32,
    id: u32,
    inst: u64,
    def: Def,
    reads: u32,
    writes: u32,
    events: u32,
}

/// One thread's state.
struct Thread {
    index: u32,
    regs: Registers,
    flags: Flags,
    cd: Control,
    /// Its current segment (between two of its sync points), and the number that began it.
    seg: u32,
    seg_start: u64,
    values: Values,
    /// The block being executed: its id and instructions executed.
    block: Option<(u32, u32)>,
    /// Its last executed instruction was interrupted (a fault): it made its references
    /// but its register effects did not happen.
    interrupted: bool,
    /// Next instruction of the block to start.
    next: u32,
    cur: Option<Cur>,
    /// The graph node last entered.
    node: u32,
    /// The flow between its blocks, for calls and returns.
    flow: CallFlow,
    /// The control dependence of the last instance.
    last_cd: Def,
}

impl Thread {
    fn new(index: u32, seg: u32) -> Thread {
        Thread {
            index,
            regs: Registers::default(),
            flags: Flags::default(),
            cd: Control::default(),
            seg,
            seg_start: 0,
            values: Values::default(),
            block: None,
            interrupted: false,
            next: 0,
            cur: None,
            node: NO_NODE,
            flow: CallFlow::default(),
            last_cd: NONE,
        }
    }
}

/// Why the engine stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("instruction at {pc:#x} ran more than {max} times, more than a WET instance number holds here")]
    TooManyInstances { pc: u64, max: u64 },
    /// A reference handed over with a block whose instruction it does not name.
    #[error(
        "thread {thread}: a reference of the instruction at {pc:#x} given with block {block:#x}, whose instruction {insn} is at {at:#x}"
    )]
    Misplaced { thread: u32, pc: u64, block: u64, insn: u16, at: u64 },
}

/// Where the engine's memory half runs.
enum Mem {
    /// In the engine's turn: the dependences it finds go out in the engine's order (the
    /// limited history keeps the last ones found).
    Inline(Box<MemHalf>),
    /// On a thread of its own ([`Apart`]).
    Apart(Apart),
}

/// The dependence engine over a whole trace.
pub struct Engine<'a> {
    st: &'a Statics,
    exits: &'a BlockExits,
    plans: &'a Plans,
    ops: Ops,
    /// Instances so far, per static instruction.
    pub counts: Vec<u64>,
    /// Memory, for all threads, and every segment so far: in the engine's turn, or apart.
    /// (Declared before `out`, so dropped first: apart, it feeds the store, whose thread a
    /// dropped store waits for, and which ends only once every feeder has.)
    mem: Mem,
    pub out: Out,
    /// The thread whose events come now, and the others, parked between their segments.
    t: Thread,
    parked: rustc_hash::FxHashMap<u32, Thread>,
    /// Segments so far (the memory half keeps them).
    segs: u32,
    scratch: Vec<Def>,
    /// Blocks skipped for want of a decodable plan.
    pub unplanned: u64,
    /// Instances and dependences so far.
    pub instances: u64,
    pub deps: u64,
    /// Peak bytes of memory shadow in any thread.
    pub shadow_peak: usize,
}

impl<'a> Engine<'a> {
    pub fn new(st: &'a Statics, exits: &'a BlockExits, plans: &'a Plans, out: Out) -> io::Result<Self> {
        // Only the limited history needs memory's dependences in the engine's order among
        // the others': the comprehensive trace keeps them per use port, `--count` a number.
        let mem = match &out {
            Out::Store(s) => Mem::Apart(Apart::start(Some(s.feeder()))?),
            Out::History { cap: 0, .. } => Mem::Apart(Apart::start(None)?),
            Out::History { .. } => Mem::Inline(Box::default()),
        };
        Ok(Engine {
            st,
            exits,
            plans,
            ops: Ops::build(st, plans),
            counts: vec![0; st.insns.len()],
            out,
            t: Thread::new(u32::MAX, 0),
            parked: Default::default(),
            mem,
            segs: 1,
            scratch: Vec::with_capacity(64),
            unplanned: 0,
            instances: 0,
            deps: 0,
            shadow_peak: 0,
        })
    }

    /// Hands `op` to the memory half.
    #[inline(always)]
    fn memory(&mut self, op: MemOp) -> io::Result<()> {
        match &mut self.mem {
            Mem::Apart(a) => a.push(op).map_err(|e| cause(&mut self.out, e)),
            Mem::Inline(m) => {
                let (out, deps, st) = (&mut self.out, &mut self.deps, self.st);
                m.apply(op, &mut |port, inst, id, d| emit(out, deps, st, port, id, inst, d))
            }
        }
    }

    /// Begins the next segment, in `thread`, and answers its number.
    fn begin_segment(&mut self, thread: u32) -> io::Result<u32> {
        self.memory(MemOp::Begin { thread })?;
        self.segs += 1;
        Ok(self.segs - 1)
    }

    /// Switches to `thread` (a new one starts its first segment); the one running so far
    /// is parked as it is, mid-block if need be: its next segment goes on from there.
    /// (Asked at every block and its references, and nearly always already so: inlined.)
    #[inline(always)]
    fn thread(&mut self, thread: u32) -> Result<(), EngineError> {
        if self.t.index != thread {
            self.switch(thread)?;
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn switch(&mut self, thread: u32) -> Result<(), EngineError> {
        let next = match self.parked.remove(&thread) {
            Some(t) => t,
            None => Thread::new(thread, self.begin_segment(thread)?),
        };
        let prev = std::mem::replace(&mut self.t, next);
        if prev.index != u32::MAX {
            self.parked.insert(prev.index, prev);
        }
        Ok(())
    }

    #[inline]
    fn at(&self) -> At {
        At { thread: self.t.index, seg: self.t.seg, start: self.t.seg_start }
    }

    /// A block is entered.
    pub fn block(&mut self, b: &BlockEvent) -> Result<(), EngineError> {
        self.thread(b.thread)?;
        self.finish_block()?;
        self.t.block = match b.id.and_then(|id| self.ops.len(id).map(|n| (id, n))) {
            Some((id, n)) => {
                // The call or jump that left the last block is its last instance.
                if let Some(tr) = self.t.flow.block(self.exits, id, !b.interrupted && b.executed >= n) {
                    self.t.cd.flow(tr, self.t.last_cd);
                }
                Some((id, b.executed.min(n)))
            }
            None => {
                self.t.flow.break_flow();
                self.unplanned += 1;
                None
            }
        };
        self.t.interrupted = b.interrupted;
        self.t.next = 0;
        Ok(())
    }

    /// References of the block `thread` last entered.
    pub fn refs(&mut self, thread: u32, evs: &[MemEvent]) -> Result<(), EngineError> {
        self.thread(thread)?;
        let Some((bid, executed)) = self.t.block else { return Ok(()) };
        let first = self.ops.first(bid);
        for ev in evs {
            let i = ev.insn as u32;
            if i >= executed {
                continue;
            }
            let op = *self.ops.op(first + i);
            // Each reference names its instruction: one given with another block (another
            // thread's) would be charged to the wrong instruction's use ports.
            if op.pc != ev.pc {
                let block = self.plans.plan(bid).addr;
                return Err(EngineError::Misplaced { thread, pc: ev.pc, block, insn: ev.insn, at: op.pc });
            }
            match self.t.cur {
                Some(c) if c.idx == i => {
                    let per = op.refs_n as u32;
                    if op.kind & REP != 0 && per > 0 && c.events >= per {
                        self.end()?;
                        self.start(bid, i, true)?;
                    }
                }
                _ => {
                    if i < self.t.next {
                        continue;
                    }
                    self.catch_up(bid, i)?;
                }
            }
            self.event(&op, ev)?;
        }
        Ok(())
    }

    /// Makes instruction `i` of block `bid` the current instance, running the instructions
    /// before it that have no references (unless it is current already).
    fn catch_up(&mut self, bid: u32, i: u32) -> Result<(), EngineError> {
        if self.t.cur.is_some_and(|c| c.idx == i) || i < self.t.next {
            return Ok(());
        }
        self.end()?;
        while self.t.next < i {
            self.start(bid, self.t.next, false)?;
            self.end()?;
        }
        self.start(bid, i, false)
    }

    /// A marker of the thread's stream.
    pub fn marker(&mut self, thread: u32, m: Marker) -> Result<(), EngineError> {
        self.thread(thread)?;
        match m {
            Marker::ChunkStart(_)
            | Marker::Call { .. }
            | Marker::Return { .. }
            | Marker::Syscall { .. }
            | Marker::Descriptors(_)
            | Marker::SyscallReturn { .. }
            | Marker::Kernel { write: false, .. } => {}
            // What the kernel wrote for a system call is defined by the call's instance: a
            // load of what read(2) filled depends on the read. (Its reads add no port.)
            Marker::Kernel { insn, addr, size, write: true, .. } => {
                let i = insn as u32;
                if let Some((bid, executed)) = self.t.block {
                    if i < executed {
                        self.catch_up(bid, i)?;
                        if let Some(c) = self.t.cur {
                            let at = self.at();
                            self.memory(MemOp::Write { addr, size: size.min(dep_profile::syscalls::SHADOWED), def: c.def, at })?;
                        }
                    }
                }
            }
            // The thread's segment ends here and its next one begins; a sync point inside
            // a block comes between its instructions' references (the hand-over puts it
            // there), so the block goes on in the new segment.
            Marker::Sync { seq, .. } => {
                self.memory(MemOp::End { seg: self.t.seg, seq })?;
                self.t.seg = self.begin_segment(thread)?;
                self.t.seg_start = seq;
            }
            Marker::ThreadStart | Marker::ThreadEnd | Marker::WindowStart | Marker::WindowEnd | Marker::Unrecorded(_) => {
                self.finish_block()?;
                self.t.flow.break_flow();
            }
            Marker::Signal(_) => {
                self.finish_block()?;
                self.t.flow.break_flow();
                self.t.cd.signal(self.t.last_cd);
            }
            Marker::SignalReturn => {
                self.finish_block()?;
                self.t.flow.break_flow();
                self.t.cd.sigreturn();
            }
        }
        Ok(())
    }

    /// Ends the stream.
    pub fn finish(&mut self) -> Result<(), EngineError> {
        self.finish_block()?;
        let parked: Vec<u32> = self.parked.keys().copied().collect();
        for t in parked {
            self.thread(t)?;
            self.finish_block()?;
        }
        match &mut self.mem {
            Mem::Inline(m) => self.shadow_peak = m.bytes(),
            Mem::Apart(a) => {
                let done = a.finish().map_err(|e| cause(&mut self.out, e))?;
                self.deps += done.deps;
                self.shadow_peak = done.shadow;
            }
        }
        Ok(())
    }

    fn finish_block(&mut self) -> Result<(), EngineError> {
        if let Some((bid, executed)) = self.t.block {
            self.end()?;
            while self.t.next < executed {
                self.start(bid, self.t.next, false)?;
                self.end()?;
            }
            self.t.block = None;
        }
        Ok(())
    }

    /// Starts instance of instruction `i` of block `bid` (`again`: another iteration of the
    /// rep string just ended).
    #[inline(always)]
    fn start(&mut self, bid: u32, i: u32, again: bool) -> Result<(), EngineError> {
        let ops = &self.ops;
        let at = ops.first(bid) + i;
        let op = ops.op(at);
        let id = op.id;
        if op.node != NO_NODE && !again {
            self.t.cd.enter(op.node);
            self.t.node = op.node;
        }
        let inst = self.counts[id as usize];
        if inst + 1 >= shadow::MAX_INSTANCES {
            return Err(EngineError::TooManyInstances { pc: op.pc, max: shadow::MAX_INSTANCES - 1 });
        }
        self.counts[id as usize] = inst + 1;
        self.instances += 1;
        let def = pack(id, inst);
        let seg0 = op.seg0;
        let cd = self.t.cd.current();
        self.t.last_cd = cd;
        if cd != NONE {
            emit(&mut self.out, &mut self.deps, self.st, seg0, id, inst, cd)?;
        }
        let mut port = 1u32;
        let scratch = &mut self.scratch;
        for r in ops.reads(op) {
            // One definer for the whole register (most reads): the port's one dependence.
            if let Some(d) = self.t.regs.single(r) {
                if d != NONE {
                    emit(&mut self.out, &mut self.deps, self.st, seg0 + port, id, inst, d)?;
                }
            } else {
                scratch.clear();
                self.t.regs.read(r, scratch);
                for &d in scratch.iter() {
                    emit(&mut self.out, &mut self.deps, self.st, seg0 + port, id, inst, d)?;
                }
            }
            port += 1;
        }
        if op.flags_read != 0 {
            if let Some(d) = self.t.flags.single(op.flags_read) {
                if d != NONE {
                    emit(&mut self.out, &mut self.deps, self.st, seg0 + port, id, inst, d)?;
                }
            } else {
                scratch.clear();
                self.t.flags.read(op.flags_read, scratch);
                for &d in scratch.iter() {
                    emit(&mut self.out, &mut self.deps, self.st, seg0 + port, id, inst, d)?;
                }
            }
        }
        self.t.cur = Some(Cur { idx: i, at, id, inst, def, reads: 0, writes: 0, events: 0 });
        Ok(())
    }

    /// A reference of the current instance.
    fn event(&mut self, op: &Op, ev: &MemEvent) -> io::Result<()> {
        let Some(mut c) = self.t.cur else { return Ok(()) };
        c.events += 1;
        // An instruction's references are its reads, then its writes.
        let nreads = op.mem_reads as u32;
        let mref = match ev.access {
            Access::Read => {
                let k = c.reads.min(nreads.saturating_sub(1));
                let port = op.seg0 + op.mem_port as u32 + k;
                let at = self.at();
                self.memory(MemOp::Read { addr: ev.addr, size: ev.size, port, id: c.id, inst: c.inst, at })?;
                c.reads += 1;
                (k < nreads).then_some(k)
            }
            Access::Write => {
                let at = self.at();
                self.memory(MemOp::Write { addr: ev.addr, size: ev.size, def: c.def, at })?;
                let writes = op.refs_n as u32 - nreads;
                let m = (writes > 0).then(|| nreads + c.writes.min(writes - 1));
                c.writes += 1;
                m
            }
        };
        self.t.cur = Some(c);
        if let (Some(k), false, true) = (mref, op.kind & GATHER != 0, self.out.keeps_values()) {
            let r = self.ops.reveal(op, k as usize);
            if let Some(reg) = r.reg {
                let v = ev.addr.wrapping_sub(r.disp);
                let (st, out) = (self.st, &mut self.out);
                let mut res = Ok(());
                self.t.values.learn(reg, v, &mut |d, v| {
                    if res.is_ok() {
                        res = out.value(st, d, v);
                    }
                });
                res?;
            }
        }
        Ok(())
    }

    /// Ends the current instance: its definitions take effect.
    #[inline(always)]
    fn end(&mut self) -> io::Result<()> {
        let Some(c) = self.t.cur.take() else { return Ok(()) };
        let Some((_, executed)) = self.t.block else { return Ok(()) };
        self.t.next = c.idx + 1;
        if self.t.interrupted && c.idx + 1 == executed {
            return Ok(());
        }
        let ops = &self.ops;
        let op = ops.op(c.at);
        for r in ops.defs(op) {
            self.t.regs.define(r, c.def);
        }
        self.t.flags.define(op.flags_written, c.def);
        let steps = ops.steps(op);
        if !steps.is_empty() && self.out.keeps_values() {
            let (st, out) = (self.st, &mut self.out);
            let mut res = Ok(());
            self.t.values.after(steps, c.def, &mut |d, v| {
                if res.is_ok() {
                    res = out.value(st, d, v);
                }
            });
            res?;
        }
        if op.kind & BRANCH != 0 {
            let n = self.t.node;
            if n != NO_NODE && self.st.branch[n as usize] {
                self.t.cd.branch(c.def, self.st.ipdom[n as usize]);
            }
        }
        Ok(())
    }
}

/// What to report for `e`, the memory half's failure: where it fed the store, the store's
/// own error (a spill that failed) stopped them both.
fn cause(out: &mut Out, e: io::Error) -> io::Error {
    match out {
        Out::Store(s) => s.cause(e),
        Out::History { .. } => e,
    }
}

/// Counts dependence `d` of use segment `seg` of instance `inst` of `id`, and hands it to `out`.
#[inline(always)]
fn emit(out: &mut Out, deps: &mut u64, st: &Statics, seg: u32, id: u32, inst: u64, d: Def) -> io::Result<()> {
    *deps += 1;
    match out {
        Out::Store(s) => s.dep(seg, inst, d),
        Out::History { ring, cap } => {
            if *cap > 0 {
                if ring.len() == *cap {
                    ring.pop_front();
                }
                ring.push_back([st.insns[id as usize].pc, inst, st.insns[id_of(d) as usize].pc, inst_of(d)]);
            }
            Ok(())
        }
    }
}
