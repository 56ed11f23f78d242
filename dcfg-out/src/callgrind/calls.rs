//! The call stack, rebuilt from the chunks' call events in order, and the totals a profile
//! file is written from.
//!
//! The stack is the one every output shares ([`crate::program::calls`], Callgrind's
//! rules); what is Callgrind's own is what closing a frame counts. A signal handler's cost
//! is not part of the inclusive cost of the calls it interrupted; frames still open when
//! the thread ends are closed there. Closing a frame counts one call on its arc (call site, callee);
//! its inclusive cost, the cost between the call and the return, is added only if no
//! other activation of the callee is still on the stack, so that recursion is not counted
//! twice (Callgrind's "calls" are the non-recursive ones for cost).

use super::costs::{add, CallEvent, ChunkCosts, Cost, PrefixEnd, Tables};
use crate::program::calls::{self, CallFlow, CallStack, FrameKind, Step, NO_RETURN};
use rustc_hash::FxHashMap;

/// A call arc's count and inclusive cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Arc {
    pub count: u64,
    pub cost: Cost,
}

/// Everything one profile file is written from.
#[derive(Default)]
pub struct Totals {
    /// Whole executions per block id.
    pub whole: Vec<u64>,
    /// (block << 16 | executed) -> runs, for blocks cut short.
    pub runs: FxHashMap<u64, u64>,
    pub dyn_refs: FxHashMap<u32, (u64, u64)>,
    pub trans: FxHashMap<(u32, u32), u64>,
    /// (call site pc, callee entry block) -> arc.
    pub arcs: FxHashMap<(u64, u32), Arc>,
    /// PLT code's cost, charged to the site that entered it.
    pub plt_cost: FxHashMap<u64, Cost>,
    pub total: Cost,
}

/// What a frame keeps: the call's site and callee entry block (0 for a signal handler's)
/// and the running cost when it was made.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    site: u64,
    callee: u32,
    at: Cost,
}

/// A frame of the call stack.
pub type Frame = calls::Frame<Call>;

/// Calls closed within a chunk: (site, callee block) -> (count, inclusive cost to add
/// when no outer activation of the callee is on the thread's stack).
pub type LocalArcs = FxHashMap<(u64, u32), (u64, Cost)>;

/// What a chunk leaves to its thread's call stack, in order.
#[derive(Debug)]
pub enum Op {
    Arcs(LocalArcs),
    /// A frame the chunk opened and did not close (its cost relative to the chunk's start).
    Push(Frame),
    /// A handler that ran within the chunk: the outer frames start that much later.
    Shift(Cost),
    Event(CallEvent),
}

/// A chunk's own part of the call stack. Calls it makes and returns from are closed here,
/// in parallel with other chunks; only what reaches frames of earlier chunks (a return
/// past its own frames, a tail call with no frame of its own, a sigreturn out of a handler
/// entered earlier, the thread's end) goes to the thread's stack as ops, after the chunk's
/// own frames, so the result is the same as replaying every event in order.
#[derive(Default, Debug)]
pub struct Local {
    stack: CallStack<Call>,
    depth: FxHashMap<u32, u32>,
    arcs: LocalArcs,
    pub ops: Vec<Op>,
}

fn sub(a: Cost, b: Cost) -> Cost {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn shift<'a>(frames: impl Iterator<Item = &'a mut Call>, d: Cost) {
    for g in frames {
        g.at = add(g.at, d);
    }
}

impl Local {
    /// Hands every local frame and the arcs so far to the thread's stack.
    fn flush(&mut self) {
        if !self.arcs.is_empty() {
            self.ops.push(Op::Arcs(std::mem::take(&mut self.arcs)));
        }
        for f in self.stack.take() {
            self.ops.push(Op::Push(f));
        }
        self.depth.clear();
    }

    fn close(&mut self, f: Frame, now: Cost, t: &Tables) {
        if f.kind == FrameKind::Signal {
            let d = sub(now, f.data.at);
            shift(self.stack.data_mut(), d);
            self.ops.push(Op::Shift(d));
            return;
        }
        let func = t.exits.func[f.data.callee as usize];
        let d = self.depth.entry(func).or_default();
        *d = d.saturating_sub(1);
        let a = self.arcs.entry((f.data.site, f.data.callee)).or_default();
        a.0 += 1;
        if *d == 0 {
            a.1 = add(a.1, sub(now, f.data.at));
        }
    }

    /// Counts a frame pushed, and closes those a full stack dropped.
    fn pushed(&mut self, callee: u32, dropped: Vec<Frame>, now: Cost, t: &Tables) {
        *self.depth.entry(t.exits.func[callee as usize]).or_default() += 1;
        for f in dropped {
            self.close(f, now, t);
        }
    }

    fn pop_to(&mut self, k: usize, now: Cost, t: &Tables) {
        while let Some(f) = self.stack.pop_above(k) {
            self.close(f, now, t);
        }
    }

    /// Hands event `e` on to the thread's stack, after every local frame.
    fn beyond(&mut self, e: CallEvent) {
        self.flush();
        self.ops.push(Op::Event(e));
    }

    /// Takes one event of the chunk.
    pub fn event(&mut self, e: CallEvent, t: &Tables) {
        match e {
            CallEvent::Flow(tr, cost) => match self.stack.apply(tr, |site, callee, _| Call { site, callee, at: cost }) {
                Step::Pushed(dropped) => {
                    let callee = self.stack.top().expect("pushed").data.callee;
                    self.pushed(callee, dropped, cost, t);
                }
                Step::Close(k) => self.pop_to(k, cost, t),
                Step::Rebind { old, to } => {
                    let site = old.data.site;
                    self.close(old, cost, t);
                    let dropped = self.stack.push(calls::Frame { data: Call { site, callee: to, at: cost }, ..old });
                    self.pushed(to, dropped, cost, t);
                }
                Step::Confined => {}
                Step::Beyond(_) => self.beyond(e),
            },
            CallEvent::Signal(cost) => {
                for f in self.stack.signal(Call { site: 0, callee: 0, at: cost }) {
                    self.close(f, cost, t);
                }
            }
            CallEvent::SignalReturn(cost) => match self.stack.handler() {
                Some(k) => self.pop_to(k, cost, t),
                None => self.beyond(e),
            },
            CallEvent::End(_) => self.beyond(e),
        }
    }

    /// The chunk ended: its open frames go on to the thread's stack.
    pub fn finish(&mut self) {
        self.flush();
    }
}

/// One thread's call stack between chunks.
pub struct Stack {
    stack: CallStack<Call>,
    /// Activations on the stack per function id.
    depth: Vec<u32>,
    /// The thread's cost before the next chunk.
    base: Cost,
    /// The flow at the end of the previous chunk (its last block, when the flow goes on
    /// into the next, and the PLT code under way), which the next one's first block and
    /// leading PLT code continue.
    carry: CallFlow,
}

impl Default for Stack {
    fn default() -> Stack {
        Stack { stack: CallStack::default(), depth: Vec::new(), base: [0; 3], carry: CallFlow::skipping_plt() }
    }
}

impl Stack {
    fn close(&mut self, f: Frame, now: Cost, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        if f.kind == FrameKind::Signal {
            // A handler's cost is its own, not that of the calls it interrupted (Callgrind
            // runs a handler on a call stack of its own): they start that much later.
            shift(self.stack.data_mut(), sub(now, f.data.at));
            return;
        }
        let func = t.exits.func[f.data.callee as usize] as usize;
        let d = self.depth.get_mut(func).map_or(0, |d| {
            *d = d.saturating_sub(1);
            *d
        });
        let arc = arcs.entry((f.data.site, f.data.callee)).or_default();
        arc.count += 1;
        if d == 0 {
            arc.cost = add(arc.cost, sub(now, f.data.at));
        }
    }

    /// Counts an activation of the function frame `f` calls.
    fn count(&mut self, f: &Frame, t: &Tables) {
        if f.kind == FrameKind::Signal {
            return;
        }
        let func = t.exits.func[f.data.callee as usize] as usize;
        if func < u32::MAX as usize {
            if self.depth.len() <= func {
                self.depth.resize(func + 1, 0);
            }
            self.depth[func] += 1;
        }
    }

    fn push(&mut self, f: Frame, now: Cost, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        self.count(&f, t);
        for g in self.stack.push(f) {
            self.close(g, now, t, arcs);
        }
    }

    fn pop_to(&mut self, k: usize, now: Cost, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        while let Some(f) = self.stack.pop_above(k) {
            self.close(f, now, t, arcs);
        }
    }

    fn apply(&mut self, e: CallEvent, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        match e {
            CallEvent::Flow(tr, cost) => {
                let now = add(self.base, cost);
                match self.stack.apply(tr, |site, callee, _| Call { site, callee, at: now }) {
                    Step::Pushed(dropped) => {
                        let f = *self.stack.top().expect("pushed");
                        self.count(&f, t);
                        for g in dropped {
                            self.close(g, now, t, arcs);
                        }
                    }
                    Step::Close(k) => self.pop_to(k, now, t, arcs),
                    Step::Rebind { old, to } => {
                        let site = old.data.site;
                        self.close(old, now, t, arcs);
                        self.push(calls::Frame { data: Call { site, callee: to, at: now }, ..old }, now, t, arcs);
                    }
                    // The thread's first frame: it returns nowhere a return can reach.
                    Step::Beyond(Some(call)) => {
                        self.push(calls::Frame { ret: NO_RETURN, kind: FrameKind::TailCall, data: call }, now, t, arcs)
                    }
                    Step::Beyond(None) | Step::Confined => {}
                }
            }
            CallEvent::Signal(cost) => {
                let now = add(self.base, cost);
                self.push(
                    calls::Frame { ret: NO_RETURN, kind: FrameKind::Signal, data: Call { site: 0, callee: 0, at: now } },
                    now,
                    t,
                    arcs,
                )
            }
            CallEvent::SignalReturn(cost) => {
                if let Some(k) = self.stack.handler() {
                    self.pop_to(k, add(self.base, cost), t, arcs);
                }
            }
            CallEvent::End(cost) => self.pop_to(0, add(self.base, cost), t, arcs),
        }
    }

    /// Takes the next chunk of this thread into `tot`.
    pub fn chunk(&mut self, c: &mut ChunkCosts, t: &Tables, tot: &mut Totals) {
        // Into the chunk's first block, as the flow within a chunk goes (entering or
        // leaving PLT code included). A chunk that began in PLT code then has its blocks
        // taken here, in order, and the call out of them made.
        let mut flow = self.carry;
        if let (Some(last), Some(first)) = (flow.last, c.first) {
            *tot.trans.entry((last, first)).or_default() += 1;
        }
        if c.first.is_none() {
            flow.break_flow();
        }
        let open = match c.prefix.take() {
            None => {
                if let Some(tr) = c.first.and_then(|first| flow.block(&t.exits, first, true)) {
                    self.apply(CallEvent::Flow(tr, [0; 3]), t, &mut tot.arcs);
                }
                false
            }
            Some(pre) => {
                let mut at = [0; 3];
                for (id, executed, whole, cost) in pre.blocks {
                    if let Some(tr) = flow.block(&t.exits, id, whole) {
                        self.apply(CallEvent::Flow(tr, at), t, &mut tot.arcs);
                    }
                    // Into the chunk's counts, which are added to the thread's below.
                    c.charge(flow.plt_site(&t.exits, id), id, executed, whole, cost);
                    at = add(at, cost);
                }
                match pre.end {
                    PrefixEnd::Left(to) => {
                        if let Some(tr) = flow.block(&t.exits, to, true) {
                            self.apply(CallEvent::Flow(tr, at), t, &mut tot.arcs);
                        }
                    }
                    PrefixEnd::Broken => flow.break_flow(),
                    PrefixEnd::Open => {}
                }
                pre.end == PrefixEnd::Open
            }
        };
        for op in std::mem::take(&mut c.local.ops) {
            match op {
                Op::Arcs(arcs) => {
                    for ((site, callee), (n, cost)) in arcs {
                        let a = tot.arcs.entry((site, callee)).or_default();
                        a.count += n;
                        let func = t.exits.func[callee as usize] as usize;
                        if self.depth.get(func).copied().unwrap_or(0) == 0 {
                            a.cost = add(a.cost, cost);
                        }
                    }
                }
                Op::Push(mut f) => {
                    f.data.at = add(self.base, f.data.at);
                    let now = f.data.at;
                    self.push(f, now, t, &mut tot.arcs);
                }
                Op::Shift(d) => shift(self.stack.data_mut(), d),
                Op::Event(e) => self.apply(e, t, &mut tot.arcs),
            }
        }
        if tot.whole.len() < c.whole.len() {
            tot.whole.resize(c.whole.len(), 0);
        }
        for (t, v) in tot.whole.iter_mut().zip(&c.whole) {
            *t += v;
        }
        for (k, v) in c.runs.drain() {
            *tot.runs.entry(k).or_default() += v;
        }
        for (k, (r, w)) in c.dyn_refs.drain() {
            let d = tot.dyn_refs.entry(k).or_default();
            d.0 += r;
            d.1 += w;
        }
        for (k, v) in c.trans.drain() {
            *tot.trans.entry(k).or_default() += v;
        }
        for (k, v) in c.plt_cost.drain() {
            let e = tot.plt_cost.entry(k).or_default();
            *e = add(*e, v);
        }
        self.base = add(self.base, c.cost);
        tot.total = add(tot.total, c.cost);
        // The chunk's own flow, unless all of it was PLT code taken above.
        self.carry = match (open, c.seen_block) {
            (true, _) => flow,
            (false, true) => c.flow,
            (false, false) => self.carry,
        };
    }

    /// The thread ended (or its profile did): frames still open close here.
    pub fn finish(&mut self, t: &Tables, tot: &mut Totals) {
        let now = self.base;
        self.pop_to(0, now, t, &mut tot.arcs);
    }
}
