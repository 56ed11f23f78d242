//! What one chunk of one thread contributes to a Callgrind profile, gathered in parallel:
//! how often each block ran (as far as it ran), the references of instructions whose
//! count varies (rep strings, gathers), transitions between blocks, and the calls made
//! and returned from within the chunk (calls.rs's `Local`), with what is left for the
//! thread's call stack, which is rebuilt chunk after chunk.

use crate::program::calls::{BlockExits, CallFlow, Transition};
use dep_profile::semantics::{Access, Special};
use dep_recover::events::{BlockEvent, Marker, MemEvent, RepRun, Run};
use dep_recover::plans::Plans;
use dep_recover::{RecoverError, Sink};
use rustc_hash::FxHashMap;

/// Costs in the order of `events: Ir Dr Dw`.
pub type Cost = [u64; 3];

/// Two costs added.
pub fn add(a: Cost, b: Cost) -> Cost {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

/// Static facts per block, flattened: what costs follow from a block running.
pub struct Tables {
    /// Per block: index of its first instruction in the per-instruction arrays (len blocks + 1).
    pub first: Vec<u32>,
    pub pc: Vec<u64>,
    /// Per instruction: its static reads and writes, 0 where they vary (`dynamic`).
    reads: Vec<u32>,
    writes: Vec<u32>,
    pub dynamic: Vec<bool>,
    /// Per block: prefix sums of static reads and writes (len instructions + 1 each), at
    /// `first[b] + b`.
    prefix: Vec<(u64, u64)>,
    /// Per block: how it leaves, whether a function starts at it, its function, and
    /// whether it is PLT code (whose cost Callgrind, with `--skip-plt=yes`, its default,
    /// charges to the instruction that called or jumped into it).
    pub exits: BlockExits,
    /// Per block: whether an instruction's references must be counted one by one.
    has_dynamic: Vec<bool>,
    /// Per block: its whole cost.
    full: Vec<(u64, u64, u64)>,
    /// Per block: it never takes the run's fast path (it has no plan, or instructions whose
    /// references are counted one by one).
    slow: Vec<bool>,
}

impl Tables {
    /// The tables of `plans`' blocks, which leave as `exits` says.
    pub fn build(plans: &Plans, exits: BlockExits) -> Tables {
        let n = plans.len();
        let mut t = Tables {
            first: Vec::with_capacity(n + 1),
            pc: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            dynamic: Vec::new(),
            prefix: Vec::new(),
            exits,
            has_dynamic: Vec::with_capacity(n),
            full: Vec::with_capacity(n),
            slow: Vec::with_capacity(n),
        };
        for b in 0..n as u32 {
            t.first.push(t.pc.len() as u32);
            let Some(p) = plans.get_plan(b) else {
                t.prefix.push((0, 0));
                t.has_dynamic.push(false);
                t.full.push((0, 0, 0));
                t.slow.push(true);
                continue;
            };
            let (mut r, mut w) = (0u64, 0u64);
            t.prefix.push((0, 0));
            for i in &p.insns {
                let dynamic = matches!(i.special, Special::Rep(_) | Special::Gather(_));
                let (ri, wi) = if dynamic {
                    (0, 0)
                } else {
                    let ri = i.refs.iter().filter(|m| m.access == Access::Read).count() as u32;
                    (ri, i.refs.len() as u32 - ri)
                };
                t.pc.push(i.pc);
                t.reads.push(ri);
                t.writes.push(wi);
                t.dynamic.push(dynamic);
                r += ri as u64;
                w += wi as u64;
                t.prefix.push((r, w));
            }
            t.has_dynamic.push(p.insns.iter().any(|i| matches!(i.special, Special::Rep(_) | Special::Gather(_))));
            t.full.push((p.insns.len() as u64, r, w));
            t.slow.push(*t.has_dynamic.last().expect("pushed"));
        }
        t.first.push(t.pc.len() as u32);
        t
    }

    /// Static reads and writes of block `b`'s first `executed` instructions.
    #[inline]
    pub fn static_refs(&self, b: u32, executed: u32) -> (u64, u64) {
        self.prefix[(self.first[b as usize] + b + executed) as usize]
    }

    /// Static reads and writes of instruction `k` (a global index).
    #[inline]
    pub fn insn_refs(&self, k: usize) -> (u32, u32) {
        (self.reads[k], self.writes[k])
    }

    /// Instructions of block `b`.
    #[inline]
    pub fn len(&self, b: u32) -> u32 {
        self.first[b as usize + 1] - self.first[b as usize]
    }
}

/// An event that moves the call stack, with the running cost where it happens.
#[derive(Clone, Copy, Debug)]
pub enum CallEvent {
    /// Control passed between blocks as a call, a return or a tail call.
    Flow(Transition, Cost),
    Signal(Cost),
    SignalReturn(Cost),
    End(Cost),
}

/// One chunk's contribution.
#[derive(Default)]
pub struct ChunkCosts {
    /// Whole executions of each block, by block id (dense: most blocks run whole).
    pub whole: Vec<u64>,
    /// Executions of blocks cut short, packed `block << 16 | executed` (`executed` fits:
    /// the profile reader refuses blocks of more than `MAX_BLOCK_INSNS`, 65,535).
    pub runs: FxHashMap<u64, u64>,
    /// Per block: the successor seen last and how often since it was counted in `trans`
    /// (most blocks have one or two successors, so this saves a hash per block).
    pub next: Vec<(u32, u64)>,
    /// References of dynamic instructions: (global instruction index) -> (reads, writes).
    pub dyn_refs: FxHashMap<u32, (u64, u64)>,
    /// Transitions (from block, to block) -> count.
    pub trans: FxHashMap<(u32, u32), u64>,
    /// The chunk's own part of the call stack, and what it leaves to the thread's.
    pub local: super::calls::Local,
    /// Running cost from the chunk's start.
    pub cost: Cost,
    /// The first block, unless a marker that breaks the flow came before it.
    pub first: Option<u32>,
    /// Whether the chunk had any block or flow-breaking marker.
    pub seen_block: bool,
    /// The flow between blocks, up to the chunk's last block.
    pub flow: CallFlow,
    /// Cost of PLT code, charged to the call or jump that entered it: site -> cost.
    pub plt_cost: FxHashMap<u64, Cost>,
    /// The PLT code the chunk began in: which call entered it is in the chunk before, so
    /// its blocks' costs and the call it makes when it is left are settled when the chunk
    /// is joined to the thread ([`Stack::chunk`](super::calls::Stack::chunk)).
    pub prefix: Option<PltPrefix>,
}

/// The PLT blocks a chunk began with, in order: (block, instructions run, ran whole, cost).
#[derive(Debug, Default)]
pub struct PltPrefix {
    pub blocks: Vec<(u32, u32, bool, Cost)>,
    pub end: PrefixEnd,
}

/// How a chunk's leading PLT code ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrefixEnd {
    /// It had not ended when the chunk did.
    #[default]
    Open,
    /// Control went on to this block, outside PLT code.
    Left(u32),
    /// A marker or a block with no plan broke the flow.
    Broken,
}

/// A chunk's dense arrays (whole runs, successors), handed on for reuse.
pub type Spare = (Vec<u64>, Vec<(u32, u64)>);

impl ChunkCosts {
    /// An empty contribution for a table of `blocks` blocks, in `spare` dense arrays (zeroed)
    /// if there are some.
    pub fn new(blocks: usize, spare: Option<Spare>) -> ChunkCosts {
        let (whole, next) = spare.unwrap_or_else(|| (vec![0; blocks], vec![(u32::MAX, 0); blocks]));
        ChunkCosts { whole, next, flow: CallFlow::skipping_plt(), ..Default::default() }
    }

    /// The flow broke: leading PLT code, if still under way, ends with no call out of it.
    fn end_prefix(&mut self) {
        if let Some(pre) = self.prefix.as_mut().filter(|p| p.end == PrefixEnd::Open) {
            pre.end = PrefixEnd::Broken;
        }
    }

    /// Charges block `id`'s run (`executed` instructions, `cost`) to PLT site `site`, or to
    /// the block's own counts.
    pub fn charge(&mut self, site: Option<u64>, id: u32, executed: u32, whole: bool, cost: Cost) {
        match site {
            Some(site) => {
                let k = self.plt_cost.entry(site).or_default();
                *k = add(*k, cost);
            }
            None if whole => self.whole[id as usize] += 1,
            None => *self.runs.entry((id as u64) << 16 | executed as u64).or_default() += 1,
        }
    }

    /// Counts a transition from block `p` to block `id`.
    #[inline]
    fn count_transition(&mut self, p: u32, id: u32) {
        let slot = &mut self.next[p as usize];
        if slot.0 == id {
            slot.1 += 1;
        } else {
            if slot.1 > 0 {
                *self.trans.entry((p, slot.0)).or_default() += slot.1;
            }
            *slot = (id, 1);
        }
    }

    /// Folds the successor counts still held per block into `trans` (leaving `next` as
    /// new), and hands the local call stack's frames on.
    pub fn settle(&mut self) {
        self.local.finish();
        for (p, slot) in self.next.iter_mut().enumerate() {
            if slot.1 > 0 {
                *self.trans.entry((p as u32, slot.0)).or_default() += slot.1;
            }
            *slot = (u32::MAX, 0);
        }
    }

    /// The dense arrays, zeroed, for the next chunk.
    pub fn spare(&mut self) -> Spare {
        let mut whole = std::mem::take(&mut self.whole);
        whole.fill(0);
        (whole, std::mem::take(&mut self.next))
    }
}

/// The chunk sink.
pub struct CostSink<'t> {
    pub t: &'t Tables,
    pub c: ChunkCosts,
}

impl CostSink<'_> {
    #[inline]
    fn enter(&mut self, id: u32, executed: u32, whole: bool) {
        let c = &mut self.c;
        let plt = self.t.exits.plt.get(id as usize).copied().unwrap_or(false);
        if !c.seen_block {
            c.seen_block = true;
            c.first = Some(id);
            if plt {
                c.prefix = Some(PltPrefix::default());
            }
        }
        let (r, w) = self.t.static_refs(id, executed);
        let cost = [executed as u64, r, w];
        if let Some(pre) = c.prefix.as_mut().filter(|p| p.end == PrefixEnd::Open) {
            // Neither the flow into these blocks nor whose cost they are is known here.
            let last = pre.blocks.last().map(|b| b.0);
            if plt {
                pre.blocks.push((id, executed, whole, cost));
                c.cost = add(c.cost, cost);
            } else {
                pre.end = PrefixEnd::Left(id);
            }
            if let Some(p) = last {
                c.count_transition(p, id);
            }
            if plt {
                return;
            }
            // The call out of the PLT code is made when the chunk is joined; from here on
            // the flow is the chunk's own.
            c.flow.break_flow();
        }
        if let Some(p) = c.flow.last {
            c.count_transition(p, id);
        }
        if let Some(tr) = c.flow.block(&self.t.exits, id, whole) {
            c.local.event(CallEvent::Flow(tr, c.cost), self.t);
        }
        c.charge(c.flow.plt_site(&self.t.exits, id), id, executed, whole, cost);
        c.cost = add(c.cost, cost);
    }

    /// Counts block `b`'s references of instructions whose accesses vary per execution.
    #[inline]
    fn dynamic_refs(&mut self, b: u32, refs: &[MemEvent]) {
        if !self.t.has_dynamic[b as usize] {
            return;
        }
        for e in refs {
            self.dynamic_count(b, e, 1);
        }
    }

    /// Counts `n` references like `e` to its instruction, if that instruction's are counted
    /// as they come (the block has a rep string or a gather).
    #[inline]
    fn dynamic_count(&mut self, b: u32, e: &MemEvent, n: u64) {
        let k = self.t.first[b as usize] + e.insn as u32;
        if self.t.dynamic.get(k as usize).copied().unwrap_or(false) {
            let d = self.c.dyn_refs.entry(k).or_default();
            if e.access == Access::Read {
                d.0 += n;
                self.c.cost[1] += n;
            } else {
                d.1 += n;
                self.c.cost[2] += n;
            }
        }
    }
}

impl Sink for CostSink<'_> {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        match b.id {
            Some(id) if (id as usize) < self.t.exits.len() => {
                let n = self.t.len(id);
                let executed = b.executed.min(n);
                self.enter(id, executed, !b.interrupted && executed == n);
            }
            _ => {
                self.c.seen_block = true;
                self.c.flow.break_flow();
                self.c.end_prefix();
            }
        }
        Ok(true)
    }

    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        if let Some(id) = b.id.filter(|&id| (id as usize) < self.t.exits.len()) {
            self.dynamic_refs(id, refs);
        }
        Ok(true)
    }

    /// A rep string's references only count (one of each kind an iteration).
    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, Self::Error> {
        if let Some(id) = b.id.filter(|&id| (id as usize) < self.t.exits.len() && self.t.has_dynamic[id as usize]) {
            for e in run.first() {
                self.dynamic_count(id, e, run.iterations());
            }
        }
        Ok(true)
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, Self::Error> {
        let c = &mut self.c;
        let ev = match m {
            Marker::Signal(_) => Some(CallEvent::Signal(c.cost)),
            Marker::SignalReturn => Some(CallEvent::SignalReturn(c.cost)),
            // After a gap between recorded windows the call stack is not known: the
            // window's calls end as at the thread's end, and the next window starts afresh.
            Marker::ThreadEnd | Marker::Unrecorded(_) => Some(CallEvent::End(c.cost)),
            Marker::ThreadStart => None,
            // The rest leave the flow between blocks as it is.
            _ => return Ok(true),
        };
        if let Some(e) = ev {
            c.local.event(e, self.t);
        }
        c.seen_block = true;
        c.flow.break_flow();
        c.end_prefix();
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        // Blocks of a run ran whole, one after another: most need only their counts, a
        // transition and their cost, which this loop keeps to; the rest take `enter`.
        let t = self.t;
        for (b, mine) in run.records() {
            let id = b.id;
            let c = &mut self.c;
            let fast =
                !t.slow[id as usize] && b.executed as u32 == t.len(id) && c.flow.last.is_some_and(|p| c.flow.plain_step(&t.exits, p, id));
            if fast {
                c.count_transition(c.flow.last.expect("fast"), id);
                c.whole[id as usize] += 1;
                let f = t.full[id as usize];
                c.cost[0] += f.0;
                c.cost[1] += f.1;
                c.cost[2] += f.2;
                c.flow.last = Some(id);
                continue;
            }
            let n = t.len(id);
            self.enter(id, b.executed as u32, b.executed as u32 == n);
            if !mine.is_empty() {
                self.dynamic_refs(id, mine);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callgrind::calls::{Stack, Totals};
    use crate::program::calls::Exit;

    /// Six one-instruction blocks: main's loop, which calls `f` through a PLT stub at 0x100
    /// (the first time through PLT0 and the lazy binder, which then jumps to `f`).
    fn tables() -> Tables {
        let jump = |site| Exit::Jump { site, conditional: None };
        let exits = BlockExits {
            //         0 main_b    1 main_a                          2 stub      3 f           4 plt0      5 binder
            exit: vec![jump(0x10a), Exit::Call { site: 0x100, ret: 0x105 }, jump(0x200), Exit::Return, jump(0x1f0), jump(0x410)],
            entry: vec![false, false, false, true, false, true],
            func: vec![0, 0, 1, 2, 1, 3],
            plt: vec![false, false, true, false, true, false],
            binder: vec![false, false, false, false, false, true],
            addr: vec![0x105, 0xf0, 0x200, 0x300, 0x1f0, 0x400],
            names: ["main", "f@plt", "f", "_dl_runtime_resolve_xsavec"].map(String::from).to_vec(),
            kind: Vec::new(),
        }
        .with_kinds();
        let n = exits.exit.len();
        Tables {
            first: (0..=n as u32).collect(),
            pc: exits.addr.clone(),
            reads: vec![0; n],
            writes: vec![0; n],
            dynamic: vec![false; n],
            prefix: vec![(0, 0); 2 * n],
            exits,
            has_dynamic: vec![false; n],
            full: vec![(1, 0, 0); n],
            slow: vec![false; n],
        }
    }

    /// What the thread's blocks add up to, cut into chunks after the given blocks.
    fn totals(t: &Tables, blocks: &[u32], cuts: &[usize]) -> Totals {
        let mut tot = Totals::default();
        let mut stack = Stack::default();
        let mut bounds = vec![0];
        bounds.extend_from_slice(cuts);
        bounds.push(blocks.len());
        for w in bounds.windows(2) {
            let mut sink = CostSink { t, c: ChunkCosts::new(t.first.len() - 1, None) };
            for &b in &blocks[w[0]..w[1]] {
                sink.enter(b, 1, true);
            }
            sink.c.settle();
            stack.chunk(&mut sink.c, t, &mut tot);
        }
        stack.finish(t, &mut tot);
        tot
    }

    type Summary = (Vec<((u64, u32), u64, Cost)>, Vec<(u64, Cost)>, Vec<u64>, Vec<((u32, u32), u64)>, Cost);

    fn summary(t: Totals) -> Summary {
        let mut arcs: Vec<_> = t.arcs.iter().map(|(k, a)| (*k, a.count, a.cost)).collect();
        let mut plt: Vec<_> = t.plt_cost.into_iter().collect();
        let mut trans: Vec<_> = t.trans.into_iter().collect();
        arcs.sort();
        plt.sort();
        trans.sort();
        (arcs, plt, t.whole, trans, t.total)
    }

    #[test]
    fn chunks_that_begin_or_end_in_plt_code_add_up_to_the_whole_run() {
        let t = tables();
        let blocks = [0, 1, 2, 4, 5, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0];
        let whole = summary(totals(&t, &blocks, &[]));
        // As Callgrind counts it: main calls f three times from 0x100, and the binder once
        // (its frame gives way to f's); the PLT code's 4 instructions (the stub three
        // times, PLT0 once) are the call site's.
        let calls: Vec<_> = whole.0.iter().map(|&(k, n, _)| (k, n)).collect();
        assert_eq!(calls, vec![((0x100, 3), 3), ((0x100, 5), 1)], "{whole:?}");
        assert_eq!(whole.1, vec![(0x100, [4, 0, 0])], "{whole:?}");
        for a in 1..blocks.len() {
            assert_eq!(summary(totals(&t, &blocks, &[a])), whole, "cut after block {a}");
            for b in a + 1..blocks.len() {
                assert_eq!(summary(totals(&t, &blocks, &[a, b])), whole, "cuts after blocks {a} and {b}");
            }
        }
    }
}
