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
use super::template::{Templates, VALUES};
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

/// What the engine does with what it finds, fixed for a run: each of its paths is compiled
/// once per mode (a const parameter), so the inner loops test none of it.
type Mode = u8;
/// Every dependence and value to the store.
const STORE: Mode = 0;
/// The last dependences to the ring.
const HISTORY: Mode = 1;
/// Dependences counted only (a history of none); no values.
const COUNT: Mode = 2;

/// Calls the method (a `<const M: Mode>` one) compiled for the engine's mode.
macro_rules! by_mode {
    ($self:ident . $f:ident ( $($a:expr),* )) => {
        match $self.mode {
            STORE => $self.$f::<STORE>($($a),*),
            HISTORY => $self.$f::<HISTORY>($($a),*),
            _ => $self.$f::<COUNT>($($a),*),
        }
    };
}

impl Out {
    /// The mode that hands on to this.
    fn mode(&self) -> Mode {
        match self {
            Out::Store(_) => STORE,
            Out::History { cap: 0, .. } => COUNT,
            Out::History { .. } => HISTORY,
        }
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
    /// The block runs whole by its template ([`Templates`]), which takes its instances'
    /// control and register dependences only when something needs them (the block's end,
    /// or a point another thread may follow): the instructions before `pos` have started
    /// (the one before it not yet ended when `pos_open`), their instances in `local` by
    /// index in the block; the others' will be the next of their instructions, as nothing
    /// else of this thread runs before them and no other thread's events come until then.
    /// Its definitions wait for its end; its value rules are applied up to `vnext` (in
    /// order with the values its references reveal).
    templated: bool,
    local: Vec<Def>,
    pos: u32,
    pos_open: bool,
    vnext: u32,
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
            templated: false,
            local: Vec::new(),
            pos: 0,
            pos_open: false,
            vnext: 0,
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
    /// What `out` is, as the methods compiled for it are chosen by.
    mode: Mode,
    exits: &'a BlockExits,
    plans: &'a Plans,
    ops: Ops,
    tpl: Templates,
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
        let ops = Ops::build(st, plans);
        let tpl = Templates::build(&ops);
        Ok(Engine {
            st,
            mode: out.mode(),
            exits,
            plans,
            ops,
            tpl,
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
            // (Only the limited history keeps memory in the engine's turn.)
            Mem::Inline(m) => {
                let (out, deps, st) = (&mut self.out, &mut self.deps, self.st);
                m.apply(op, &mut |port, inst, id, d| emit::<HISTORY>(out, deps, st, port, id, inst, d))
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
    fn thread<const M: Mode>(&mut self, thread: u32) -> Result<(), EngineError> {
        if self.t.index != thread {
            self.switch::<M>(thread)?;
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn switch<const M: Mode>(&mut self, thread: u32) -> Result<(), EngineError> {
        // Another thread's events come next: what this one's deferred run has started by
        // now is numbered before theirs.
        self.settle::<M>()?;
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
        by_mode!(self.block_as(b))
    }

    fn block_as<const M: Mode>(&mut self, b: &BlockEvent) -> Result<(), EngineError> {
        self.thread::<M>(b.thread)?;
        self.finish_block::<M>()?;
        self.t.block = match b.id.and_then(|id| self.ops.len(id).map(|n| (id, n))) {
            Some((id, n)) => {
                // The call or jump that left the last block is its last instance.
                if let Some(tr) = self.t.flow.block(self.exits, id, !b.interrupted && b.executed >= n) {
                    self.t.cd.flow(tr, self.t.last_cd);
                }
                // A run of the whole block, as most are, goes by its template.
                // (The limited history keeps dependences in the order found, so goes
                // instruction by instruction.)
                self.t.templated = M != HISTORY && !b.interrupted && b.executed >= n && self.tpl.has(id);
                if self.t.templated && self.t.local.len() < n as usize {
                    self.t.local.resize(n as usize, NONE);
                }
                (self.t.pos, self.t.pos_open, self.t.vnext) = (0, false, 0);
                Some((id, b.executed.min(n)))
            }
            None => {
                self.t.flow.break_flow();
                self.unplanned += 1;
                self.t.templated = false;
                None
            }
        };
        self.t.interrupted = b.interrupted;
        self.t.next = 0;
        Ok(())
    }

    /// References of the block `thread` last entered.
    pub fn refs(&mut self, thread: u32, evs: &[MemEvent]) -> Result<(), EngineError> {
        by_mode!(self.refs_as(thread, evs))
    }

    fn refs_as<const M: Mode>(&mut self, thread: u32, evs: &[MemEvent]) -> Result<(), EngineError> {
        self.thread::<M>(thread)?;
        let Some((bid, executed)) = self.t.block else { return Ok(()) };
        let first = self.ops.first(bid);
        // The instance under way is kept here while the references come, and left in the
        // thread's state after them (an error ends the engine: nothing is left to keep).
        let mut cur = self.t.cur.take();
        for ev in evs {
            let i = ev.insn as u32;
            if i >= executed {
                continue;
            }
            let at = first + i;
            let op = *self.ops.op(at);
            // Each reference names its instruction: one given with another block (another
            // thread's) would be charged to the wrong instruction's use ports.
            if op.pc != ev.pc {
                let block = self.plans.plan(bid).addr;
                return Err(EngineError::Misplaced { thread, pc: ev.pc, block, insn: ev.insn, at: op.pc });
            }
            let mut c = match cur {
                Some(c) if c.idx == i => {
                    let per = op.refs_n as u32;
                    if op.kind & REP != 0 && per > 0 && c.events >= per {
                        self.end::<M>(c, executed)?;
                        self.start::<M>(at, i, true)?
                    } else {
                        c
                    }
                }
                _ => {
                    if i < self.t.next {
                        continue;
                    }
                    if self.t.templated {
                        self.open::<M>(bid, at, i)?
                    } else {
                        if let Some(c) = cur.take() {
                            self.end::<M>(c, executed)?;
                        }
                        self.plain::<M>(first, i, executed)?;
                        self.start::<M>(at, i, false)?
                    }
                }
            };
            self.event::<M>(&op, &mut c, ev)?;
            cur = Some(c);
        }
        self.t.cur = cur;
        Ok(())
    }

    /// Makes instruction `i` of block `bid` the current instance, running the instructions
    /// before it that have no references (unless it is current already).
    fn catch_up<const M: Mode>(&mut self, bid: u32, i: u32) -> Result<(), EngineError> {
        if self.t.cur.is_some_and(|c| c.idx == i) || i < self.t.next {
            return Ok(());
        }
        let Some((_, executed)) = self.t.block else { return Ok(()) };
        let first = self.ops.first(bid);
        if self.t.templated {
            self.t.cur = Some(self.open::<M>(bid, first + i, i)?);
            return Ok(());
        }
        if let Some(c) = self.t.cur.take() {
            self.end::<M>(c, executed)?;
        }
        self.plain::<M>(first, i, executed)?;
        self.t.cur = Some(self.start::<M>(first + i, i, false)?);
        Ok(())
    }

    /// Makes instruction `i` (at `at` in [`Ops`]) of the thread's templated block `bid`
    /// the instance under way, as [`catch_up`](Self::catch_up) does instruction by
    /// instruction, and answers it: the ones before it end (their value rules apply, in
    /// order with the values references reveal), and its instance is the next of its
    /// instruction (see `Thread::templated`).
    #[inline(always)]
    fn open<const M: Mode>(&mut self, bid: u32, at: u32, i: u32) -> Result<Cur, EngineError> {
        if M == STORE {
            self.values_to(bid, i)?;
        }
        self.t.next = i;
        let def = self.def_of(bid, i);
        Ok(Cur { idx: i, at, id: id_of(def), inst: inst_of(def), def, reads: 0, writes: 0, events: 0 })
    }

    /// The instance instruction `k` of the thread's templated block `bid` has in this run:
    /// the one it started, or the next of its instruction.
    #[inline(always)]
    fn def_of(&self, bid: u32, k: u32) -> Def {
        if k < self.t.pos {
            self.t.local[k as usize]
        } else {
            let id = self.tpl.inst(bid, k).id;
            pack(id, self.counts[id as usize])
        }
    }

    /// Applies the value rules of the thread's templated block `bid` up to instruction `to`.
    fn values_to(&mut self, bid: u32, to: u32) -> io::Result<()> {
        while self.t.vnext < to {
            let k = self.t.vnext;
            self.t.vnext += 1;
            if self.tpl.inst(bid, k).kind & VALUES == 0 {
                continue;
            }
            let def = self.def_of(bid, k);
            let Engine { st, ops, out, t, .. } = self;
            after_values(&mut t.values, ops.steps(ops.op(ops.first(bid) + k)), def, st, out)?;
        }
        Ok(())
    }

    /// Takes the control and register dependences of the thread's templated run up to
    /// where an instruction-by-instruction run would stand now (the instance under way
    /// started, the ones before it ended), before another thread's events come.
    fn settle<const M: Mode>(&mut self) -> Result<(), EngineError> {
        if let (true, Some((bid, _))) = (self.t.templated, self.t.block) {
            match self.t.cur {
                Some(c) => self.run_to::<M>(bid, c.idx, false)?,
                None => self.run_to::<M>(bid, self.t.next, true)?,
            }
        }
        Ok(())
    }

    /// Runs the thread's templated block `bid` on from where its deferred run stands up to
    /// instruction `to`: up to its start with `stop` (`to` may then be the block's length),
    /// or through its start, leaving it under way. Nothing where it stands there already.
    #[inline(always)]
    fn run_to<const M: Mode>(&mut self, bid: u32, to: u32, stop: bool) -> Result<(), EngineError> {
        let (pos, open) = (self.t.pos, self.t.pos_open);
        // How far each stands: an instruction's start, then its end.
        let (now, goal) = (2 * pos - open as u32, 2 * to + !stop as u32);
        if goal <= now {
            return Ok(());
        }
        (self.t.pos, self.t.pos_open) = if stop { (to, false) } else { (to + 1, true) };
        let from = if open { pos - 1 } else { pos };
        let Engine { st, tpl, counts, out, t, deps, scratch, instances, .. } = self;
        // (Borrowed apart, as slices and locals, so that the loops keep them in registers:
        // a store through a Vec reached through `self` would have them reloaded.)
        let Thread { local, cd: control, regs, flags, node, last_cd, .. } = t;
        let local = &mut local[..];
        let counts = &mut counts[..];
        let st: &Statics = st;
        let mut found = 0u64;
        if open {
            let i = tpl.inst(bid, from);
            close_branch(i.kind, local[from as usize], st, control, *node);
        }
        let (s, e) = (from + open as u32, if stop { to } else { to + 1 });
        let stretch = tpl.stretch(bid, s, e);
        // The instances start, in order (and all but one left under way end).
        let mut cd = control.current();
        for (k, i) in (s..).zip(stretch.insts) {
            if i.node != NO_NODE {
                control.enter(i.node);
                *node = i.node;
                cd = control.current();
            }
            let inst = next_instance(counts, st, i.id)?;
            let def = pack(i.id, inst);
            local[k as usize] = def;
            *last_cd = cd;
            if cd != NONE {
                emit::<M>(out, &mut found, st, i.seg, i.id, inst, cd)?;
            }
            if i.kind & BRANCH != 0 && k < to {
                close_branch(i.kind, def, st, control, *node);
                cd = control.current();
            }
        }
        *instances += stretch.insts.len() as u64;
        // Their reads, list by list: each port's dependences in the order the store keeps.
        if M == COUNT {
            // (Each is one dependence, on an instance of the run.)
            found += stretch.locals.len() as u64;
        } else {
            for l in stretch.locals {
                let d = local[l.k as usize];
                emit::<M>(out, &mut found, st, l.seg, id_of(d), inst_of(d), local[l.j as usize])?;
            }
        }
        for r in stretch.regs {
            let u = local[r.k as usize];
            port_deps::<M>(out, &mut found, st, r.seg, id_of(u), inst_of(u), regs.single(&r.span), scratch, |v| regs.read(&r.span, v))?;
        }
        for f in stretch.flags {
            let u = local[f.k as usize];
            port_deps::<M>(out, &mut found, st, f.seg, id_of(u), inst_of(u), flags.single(f.bits), scratch, |v| flags.read(f.bits, v))?;
        }
        *deps += found;
        Ok(())
    }

    /// Runs the block's instructions from the next to start up to `to`, none of which makes
    /// a reference (`first`: where the block starts in [`Ops`]; `executed`: how many of its
    /// instructions ran).
    #[inline(always)]
    fn plain<const M: Mode>(&mut self, first: u32, to: u32, executed: u32) -> Result<(), EngineError> {
        for i in self.t.next..to {
            let c = self.start::<M>(first + i, i, false)?;
            self.end::<M>(c, executed)?;
        }
        Ok(())
    }

    /// A marker of the thread's stream.
    pub fn marker(&mut self, thread: u32, m: Marker) -> Result<(), EngineError> {
        by_mode!(self.marker_as(thread, m))
    }

    fn marker_as<const M: Mode>(&mut self, thread: u32, m: Marker) -> Result<(), EngineError> {
        self.thread::<M>(thread)?;
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
                        self.catch_up::<M>(bid, i)?;
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
                // Another thread's events may come next.
                self.settle::<M>()?;
                self.memory(MemOp::End { seg: self.t.seg, seq })?;
                self.t.seg = self.begin_segment(thread)?;
                self.t.seg_start = seq;
            }
            Marker::ThreadStart | Marker::ThreadEnd | Marker::WindowStart | Marker::WindowEnd | Marker::Unrecorded(_) => {
                self.finish_block::<M>()?;
                self.t.flow.break_flow();
            }
            Marker::Signal(_) => {
                self.finish_block::<M>()?;
                self.t.flow.break_flow();
                self.t.cd.signal(self.t.last_cd);
            }
            Marker::SignalReturn => {
                self.finish_block::<M>()?;
                self.t.flow.break_flow();
                self.t.cd.sigreturn();
            }
        }
        Ok(())
    }

    /// Ends the stream.
    pub fn finish(&mut self) -> Result<(), EngineError> {
        by_mode!(self.finish_block())?;
        let parked: Vec<u32> = self.parked.keys().copied().collect();
        for t in parked {
            by_mode!(self.thread(t))?;
            by_mode!(self.finish_block())?;
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

    fn finish_block<const M: Mode>(&mut self) -> Result<(), EngineError> {
        if let Some((bid, executed)) = self.t.block {
            if self.t.templated {
                self.t.cur = None;
                self.run_to::<M>(bid, executed, true)?;
                if M == STORE {
                    self.values_to(bid, executed)?;
                }
                self.t.next = executed;
                // Its definitions, deferred to now.
                let Engine { tpl, t, .. } = self;
                let finals = tpl.finals(bid);
                for f in finals.regs {
                    t.regs.define(&f.what, t.local[f.j as usize]);
                }
                for f in finals.flags {
                    t.flags.define(f.what, t.local[f.j as usize]);
                }
                t.templated = false;
            } else {
                if let Some(c) = self.t.cur.take() {
                    self.end::<M>(c, executed)?;
                }
                self.plain::<M>(self.ops.first(bid), executed, executed)?;
            }
            self.t.block = None;
        }
        Ok(())
    }

    /// Starts an instance of the instruction at `at` (instruction `i` of its block;
    /// `again`: another iteration of the rep string just ended), taking its control and
    /// register dependences, and answers it.
    #[inline(always)]
    fn start<const M: Mode>(&mut self, at: u32, i: u32, again: bool) -> Result<Cur, EngineError> {
        let Engine { st, ops, counts, out, t, deps, scratch, instances, .. } = self;
        let op = ops.op(at);
        let id = op.id;
        if op.node != NO_NODE && !again {
            t.cd.enter(op.node);
            t.node = op.node;
        }
        let inst = next_instance(counts, st, id)?;
        *instances += 1;
        let def = pack(id, inst);
        let seg0 = op.seg0;
        let cd = t.cd.current();
        t.last_cd = cd;
        if cd != NONE {
            emit::<M>(out, deps, st, seg0, id, inst, cd)?;
        }
        let mut port = seg0 + 1;
        for r in ops.reads(op) {
            port_deps::<M>(out, deps, st, port, id, inst, t.regs.single(r), scratch, |v| t.regs.read(r, v))?;
            port += 1;
        }
        if op.flags_read != 0 {
            port_deps::<M>(out, deps, st, port, id, inst, t.flags.single(op.flags_read), scratch, |v| t.flags.read(op.flags_read, v))?;
        }
        Ok(Cur { idx: i, at, id, inst, def, reads: 0, writes: 0, events: 0 })
    }

    /// A reference of the current instance `c`.
    #[inline(always)]
    fn event<const M: Mode>(&mut self, op: &Op, c: &mut Cur, ev: &MemEvent) -> io::Result<()> {
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
        // Only the comprehensive format keeps values (they never change a dependence).
        if let (Some(k), false, STORE) = (mref, op.kind & GATHER != 0, M) {
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

    /// Ends instance `c` of the block's `executed` instructions: its definitions take
    /// effect (unless it was interrupted).
    #[inline(always)]
    fn end<const M: Mode>(&mut self, c: Cur, executed: u32) -> io::Result<()> {
        self.t.next = c.idx + 1;
        if self.t.interrupted && c.idx + 1 == executed {
            return Ok(());
        }
        let Engine { st, ops, out, t, .. } = self;
        let op = ops.op(c.at);
        for r in ops.defs(op) {
            t.regs.define(r, c.def);
        }
        t.flags.define(op.flags_written, c.def);
        if M == STORE {
            let steps = ops.steps(op);
            if !steps.is_empty() {
                after_values(&mut t.values, steps, c.def, st, out)?;
            }
        }
        close_branch(op.kind, c.def, st, &mut t.cd, t.node);
        Ok(())
    }
}

/// The end of instance `def` of an instruction of kind `kind` (its [`BRANCH`] bit), in graph
/// node `node`: the control-dependence region it opens, if it is a branch of two or more
/// successors.
#[inline(always)]
fn close_branch(kind: u8, def: Def, st: &Statics, control: &mut Control, node: u32) {
    if kind & BRANCH != 0 && node != NO_NODE && st.branch[node as usize] {
        control.branch(def, st.ipdom[node as usize]);
    }
}

/// Applies value rules `steps` of instance `def`, handing the values they settle to `out`.
fn after_values(values: &mut Values, steps: &[super::values::Step], def: Def, st: &Statics, out: &mut Out) -> io::Result<()> {
    let mut res = Ok(());
    values.after(steps, def, &mut |d, v| {
        if res.is_ok() {
            res = out.value(st, d, v);
        }
    });
    res
}

/// The next instance of static instruction `id`, counted.
#[inline(always)]
fn next_instance(counts: &mut [u64], st: &Statics, id: u32) -> Result<u64, EngineError> {
    let slot = &mut counts[id as usize];
    let inst = *slot;
    if inst + 1 >= shadow::MAX_INSTANCES {
        return Err(EngineError::TooManyInstances { pc: st.insns[id as usize].pc, max: shadow::MAX_INSTANCES - 1 });
    }
    *slot = inst + 1;
    Ok(inst)
}

/// What to report for `e`, the memory half's failure: where it fed the store, the store's
/// own error (a spill that failed) stopped them both.
fn cause(out: &mut Out, e: io::Error) -> io::Error {
    match out {
        Out::Store(s) => s.cause(e),
        Out::History { .. } => e,
    }
}

/// Hands on the dependences of use segment `seg` of instance `inst` of `id` (in mode `M`):
/// the one definer `single` gives (one instance defined all the bytes or flags read; none
/// to hand on where [`NONE`]), or where it gives none, those `read` lists in `scratch`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn port_deps<const M: Mode>(
    out: &mut Out,
    deps: &mut u64,
    st: &Statics,
    seg: u32,
    id: u32,
    inst: u64,
    single: Option<Def>,
    scratch: &mut Vec<Def>,
    read: impl FnOnce(&mut Vec<Def>),
) -> io::Result<()> {
    match single {
        Some(NONE) => Ok(()),
        Some(d) => emit::<M>(out, deps, st, seg, id, inst, d),
        None => {
            scratch.clear();
            read(scratch);
            for &d in scratch.iter() {
                emit::<M>(out, deps, st, seg, id, inst, d)?;
            }
            Ok(())
        }
    }
}

/// Counts dependence `d` of use segment `seg` of instance `inst` of `id`, and hands it to `out`
/// (in mode `M`, which `out` is in).
#[inline(always)]
fn emit<const M: Mode>(out: &mut Out, deps: &mut u64, st: &Statics, seg: u32, id: u32, inst: u64, d: Def) -> io::Result<()> {
    *deps += 1;
    if M == COUNT {
        return Ok(());
    }
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
