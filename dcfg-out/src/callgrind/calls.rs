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
    /// (block << 16 | executed) -> runs.
    pub runs: FxHashMap<u64, u64>,
    pub dyn_refs: FxHashMap<u32, (u64, u64)>,
    pub trans: FxHashMap<(u32, u32), u64>,
    /// (call site pc, callee entry block) -> arc.
    pub arcs: FxHashMap<(u64, u32), Arc>,
    /// PLT code's cost, charged to the site that entered it.
    pub plt_cost: FxHashMap<u64, Cost>,
    pub total: Cost,
}

#[derive(Clone, Copy)]
struct Frame {
    site: u64,
    callee: u32,
    ret: u64,
    at: Cost,
    signal: bool,
}

/// One thread's call stack between chunks.
#[derive(Default)]
pub struct Stack {
    frames: Vec<Frame>,
    depth: FxHashMap<u32, u32>,
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
            for g in &mut self.frames {
                for k in 0..3 {
                    g.at[k] += now[k] - f.at[k];
                }
            }
            return;
        }
        let func = t.func[f.callee as usize];
        let d = self.depth.entry(func).or_default();
        *d = d.saturating_sub(1);
        let arc = arcs.entry((f.site, f.callee)).or_default();
        arc.count += 1;
        if *d == 0 {
            for k in 0..3 {
                arc.cost[k] += now[k] - f.at[k];
            }
        }
    }

    fn push(&mut self, f: Frame, t: &Tables) {
        *self.depth.entry(t.func[f.callee as usize]).or_default() += 1;
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
                let now = add(self.base, cost);
                let floor = self.frames.iter().rposition(|f| f.signal).map_or(0, |k| k + 1);
                if let Some(mut k) = self.frames[floor..].iter().rposition(|f| f.ret == to).map(|k| k + floor) {
                    while k > floor && self.frames[k - 1].ret == to {
                        k -= 1;
                    }
                    self.pop_to(k, now, t, arcs);
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
    pub fn chunk(&mut self, c: ChunkCosts, t: &Tables, tot: &mut Totals) {
        if let (Some(last), Some(first)) = (self.carry, c.first) {
            *tot.trans.entry((last, first)).or_default() += 1;
            let to_addr = t.pc[t.first[first as usize] as usize];
            let cost = [0; 3];
            match t.exit[last as usize] {
                super::costs::Exit::Call { site, ret } => self.apply(CallEvent::Call { site, ret, to: first, cost }, t, &mut tot.arcs),
                super::costs::Exit::Return => self.apply(CallEvent::Return { to: to_addr, cost }, t, &mut tot.arcs),
                super::costs::Exit::Jump { site, .. } => {
                    if t.entry[first as usize] && t.func[first as usize] != t.func[last as usize] {
                        self.apply(CallEvent::TailJump { site, to: first, cost }, t, &mut tot.arcs);
                    }
                }
                super::costs::Exit::Other => {}
            }
        }
        for &e in &c.events {
            self.apply(e, t, &mut tot.arcs);
        }
        for (k, v) in c.runs {
            *tot.runs.entry(k).or_default() += v;
        }
        for (k, (r, w)) in c.dyn_refs {
            let d = tot.dyn_refs.entry(k).or_default();
            d.0 += r;
            d.1 += w;
        }
        for (k, v) in c.trans {
            *tot.trans.entry(k).or_default() += v;
        }
        for (k, v) in c.plt_cost {
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
