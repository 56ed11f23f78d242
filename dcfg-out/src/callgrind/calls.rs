//! The call stack, rebuilt from the chunks' call events in order, and the totals a profile
//! file is written from.
//!
//! As Callgrind does it: a call pushes a frame; a return pops to the frame whose return
//! address it reaches (so a return that skips frames, after a longjmp or an exception,
//! closes them all), and one that reaches none pops nothing; a jump into another
//! function's entry is a call (a tail call) returning where its caller's frame returns,
//! so the return that ends the chain closes both; a signal handler runs in a frame of its
//! own, closed with everything above it by sigreturn, and its cost is not part of the
//! inclusive cost of the calls it interrupted; frames still open when the thread ends are
//! closed there. Closing a frame counts one call on its arc (call site, callee);
//! its inclusive cost, the cost between the call and the return, is added only if no
//! other activation of the callee is still on the stack, so that recursion is not counted
//! twice (Callgrind's "calls" are the non-recursive ones for cost).

use super::costs::{CallEvent, ChunkCosts, Cost, Tables};
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

/// A call on the stack: its site, callee entry block, return address, the running cost
/// when it was made, or a signal handler's frame.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    site: u64,
    callee: u32,
    ret: u64,
    at: Cost,
    signal: bool,
}

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
    frames: Vec<Frame>,
    depth: FxHashMap<u32, u32>,
    arcs: LocalArcs,
    pub ops: Vec<Op>,
}

fn sub(a: Cost, b: Cost) -> Cost {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

/// What a return to `to` closes, the same for a chunk's own frames and a thread's: the
/// innermost frame above the innermost signal handler's whose return address it is, with
/// the tail calls beneath it that return there too. Returns where the handler's frames
/// begin (None without a handler) and the first frame to close (None: no frame matches).
fn return_to(frames: &[Frame], to: u64) -> (Option<usize>, Option<usize>) {
    let floor = frames.iter().rposition(|f| f.signal).map(|k| k + 1);
    let lo = floor.unwrap_or(0);
    let k = frames[lo..].iter().rposition(|f| f.ret == to).map(|k| {
        let mut k = k + lo;
        while k > lo && frames[k - 1].ret == to {
            k -= 1;
        }
        k
    });
    (floor, k)
}

impl Local {
    /// Hands every local frame and the arcs so far to the thread's stack.
    fn flush(&mut self) {
        if !self.arcs.is_empty() {
            self.ops.push(Op::Arcs(std::mem::take(&mut self.arcs)));
        }
        for f in self.frames.drain(..) {
            self.ops.push(Op::Push(f));
        }
        self.depth.clear();
    }

    fn close(&mut self, f: Frame, now: Cost, t: &Tables) {
        if f.signal {
            let d = sub(now, f.at);
            for g in &mut self.frames {
                g.at = add(g.at, d);
            }
            self.ops.push(Op::Shift(d));
            return;
        }
        let func = t.func[f.callee as usize];
        let d = self.depth.entry(func).or_default();
        *d = d.saturating_sub(1);
        let a = self.arcs.entry((f.site, f.callee)).or_default();
        a.0 += 1;
        if *d == 0 {
            a.1 = add(a.1, sub(now, f.at));
        }
    }

    fn push(&mut self, f: Frame, t: &Tables) {
        *self.depth.entry(t.func[f.callee as usize]).or_default() += 1;
        self.frames.push(f);
    }

    fn pop_to(&mut self, k: usize, now: Cost, t: &Tables) {
        while self.frames.len() > k {
            let f = self.frames.pop().expect("len > k");
            self.close(f, now, t);
        }
    }

    /// Takes one event of the chunk.
    pub fn event(&mut self, e: CallEvent, t: &Tables) {
        match e {
            CallEvent::Call { site, ret, to, cost } => self.push(Frame { site, callee: to, ret, at: cost, signal: false }, t),
            CallEvent::TailJump { site, to, cost } => match self.frames.last() {
                Some(top) => {
                    let ret = if top.signal { u64::MAX } else { top.ret };
                    self.push(Frame { site, callee: to, ret, at: cost, signal: false }, t)
                }
                None => {
                    self.flush();
                    self.ops.push(Op::Event(e));
                }
            },
            CallEvent::Return { to, cost } => {
                match return_to(&self.frames, to) {
                    (_, Some(k)) => self.pop_to(k, cost, t),
                    // Confined above a handler of this chunk: nothing to pop.
                    (Some(_), None) => {}
                    (None, None) => {
                        self.flush();
                        self.ops.push(Op::Event(e));
                    }
                }
            }
            CallEvent::Signal { cost } => self.frames.push(Frame { site: 0, callee: 0, ret: u64::MAX, at: cost, signal: true }),
            CallEvent::SignalReturn { cost } => match self.frames.iter().rposition(|f| f.signal) {
                Some(k) => self.pop_to(k, cost, t),
                None => {
                    self.flush();
                    self.ops.push(Op::Event(e));
                }
            },
            CallEvent::End { .. } => {
                self.flush();
                self.ops.push(Op::Event(e));
            }
        }
    }

    /// The chunk ended: its open frames go on to the thread's stack.
    pub fn finish(&mut self) {
        self.flush();
    }
}

/// One thread's call stack between chunks.
#[derive(Default)]
pub struct Stack {
    frames: Vec<Frame>,
    /// Activations on the stack per function id.
    depth: Vec<u32>,
    /// The thread's cost before the next chunk.
    base: Cost,
    /// The last block of the previous chunk, when the flow goes on into the next.
    carry: Option<u32>,
}

fn add(a: Cost, b: Cost) -> Cost {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

impl Stack {
    fn close(&mut self, f: Frame, now: Cost, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        if f.signal {
            // A handler's cost is its own, not that of the calls it interrupted (Callgrind
            // runs a handler on a call stack of its own): they start that much later.
            let d = sub(now, f.at);
            for g in &mut self.frames {
                g.at = add(g.at, d);
            }
            return;
        }
        let func = t.func[f.callee as usize] as usize;
        let d = self.depth.get_mut(func).map_or(0, |d| {
            *d = d.saturating_sub(1);
            *d
        });
        let arc = arcs.entry((f.site, f.callee)).or_default();
        arc.count += 1;
        if d == 0 {
            arc.cost = add(arc.cost, sub(now, f.at));
        }
    }

    fn push(&mut self, f: Frame, t: &Tables) {
        let func = t.func[f.callee as usize] as usize;
        if func < u32::MAX as usize {
            if self.depth.len() <= func {
                self.depth.resize(func + 1, 0);
            }
            self.depth[func] += 1;
        }
        self.frames.push(f);
    }

    fn pop_to(&mut self, k: usize, now: Cost, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        while self.frames.len() > k {
            let f = self.frames.pop().expect("len > k");
            self.close(f, now, t, arcs);
        }
    }

    fn apply(&mut self, e: CallEvent, t: &Tables, arcs: &mut FxHashMap<(u64, u32), Arc>) {
        match e {
            CallEvent::Call { site, ret, to, cost } => {
                self.push(Frame { site, callee: to, ret, at: add(self.base, cost), signal: false }, t)
            }
            CallEvent::TailJump { site, to, cost } => {
                let ret = self.frames.last().filter(|f| !f.signal).map_or(u64::MAX, |f| f.ret);
                self.push(Frame { site, callee: to, ret, at: add(self.base, cost), signal: false }, t)
            }
            CallEvent::Return { to, cost } => {
                if let (_, Some(k)) = return_to(&self.frames, to) {
                    self.pop_to(k, add(self.base, cost), t, arcs);
                }
            }
            CallEvent::Signal { cost } => {
                self.frames.push(Frame { site: 0, callee: 0, ret: u64::MAX, at: add(self.base, cost), signal: true })
            }
            CallEvent::SignalReturn { cost } => {
                if let Some(k) = self.frames.iter().rposition(|f| f.signal) {
                    self.pop_to(k, add(self.base, cost), t, arcs);
                }
            }
            CallEvent::End { cost } => self.pop_to(0, add(self.base, cost), t, arcs),
        }
    }

    /// Takes the next chunk of this thread into `tot`.
    pub fn chunk(&mut self, c: &mut ChunkCosts, t: &Tables, tot: &mut Totals) {
        if let (Some(last), Some(first)) = (self.carry, c.first) {
            *tot.trans.entry((last, first)).or_default() += 1;
            if let Some(e) = t.transition(last, first, [0; 3]) {
                self.apply(e, t, &mut tot.arcs);
            }
        }
        for op in std::mem::take(&mut c.local.ops) {
            match op {
                Op::Arcs(arcs) => {
                    for ((site, callee), (n, cost)) in arcs {
                        let a = tot.arcs.entry((site, callee)).or_default();
                        a.count += n;
                        let func = t.func[callee as usize] as usize;
                        if self.depth.get(func).copied().unwrap_or(0) == 0 {
                            a.cost = add(a.cost, cost);
                        }
                    }
                }
                Op::Push(mut f) => {
                    f.at = add(self.base, f.at);
                    if f.signal {
                        self.frames.push(f);
                    } else {
                        self.push(f, t);
                    }
                }
                Op::Shift(d) => {
                    for g in &mut self.frames {
                        g.at = add(g.at, d);
                    }
                }
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
        if c.seen_block {
            self.carry = c.carry.last;
        }
    }

    /// The thread ended (or its profile did): frames still open close here.
    pub fn finish(&mut self, t: &Tables, tot: &mut Totals) {
        let now = self.base;
        self.pop_to(0, now, t, &mut tot.arcs);
    }
}
