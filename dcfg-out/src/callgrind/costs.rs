//! What one chunk of one thread contributes to a Callgrind profile, gathered in parallel:
//! how often each block ran (as far as it ran), the references of instructions whose
//! count varies (rep strings, gathers), transitions between blocks, and the calls made
//! and returned from within the chunk (calls.rs's `Local`), with what is left for the
//! thread's call stack, which is rebuilt chunk after chunk.

use crate::program::calls::{BlockExits, CallFlow, Exit, Transition};
use dep_profile::semantics::{Access, Special};
use dep_recover::events::{BlockEvent, Marker, MemEvent, Run};
use dep_recover::plans::Plans;
use dep_recover::{RecoverError, Sink};
use rustc_hash::FxHashMap;

/// Costs in the order of `events: Ir Dr Dw`.
pub type Cost = [u64; 3];

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
    /// Per block: its whole cost, and [`KIND_*`] bits for the fast path.
    full: Vec<(u64, u64, u64)>,
    kind: Vec<u8>,
}

/// The block leaves by a call or a return: the call stack moves.
const KIND_CALL_RET: u8 = 1;
/// The block leaves by a jump (a tail call if it reaches another function's entry).
const KIND_JUMP: u8 = 2;
/// A function starts at the block.
const KIND_ENTRY: u8 = 4;
/// The block is PLT code or the lazy binder, or has instructions whose references are
/// counted one by one.
const KIND_SLOW: u8 = 8;

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
            kind: Vec::with_capacity(n),
        };
        for b in 0..n as u32 {
            t.first.push(t.pc.len() as u32);
            let Some(p) = plans.get_plan(b) else {
                t.prefix.push((0, 0));
                t.has_dynamic.push(false);
                t.full.push((0, 0, 0));
                t.kind.push(KIND_SLOW);
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
            let bi = b as usize;
            let mut k = match t.exits.exit[bi] {
                Exit::Call { .. } | Exit::Return => KIND_CALL_RET,
                Exit::Jump { .. } => KIND_JUMP,
                Exit::Other => 0,
            };
            if t.exits.entry[bi] {
                k |= KIND_ENTRY;
            }
            if t.exits.plt[bi] || t.exits.binder[bi] || *t.has_dynamic.last().expect("pushed") {
                k |= KIND_SLOW;
            }
            t.kind.push(k);
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
        if !c.seen_block {
            c.seen_block = true;
            c.first = Some(id);
        }
        if let Some(p) = c.flow.last {
            c.count_transition(p, id);
        }
        if let Some(tr) = c.flow.block(&self.t.exits, id, whole) {
            c.local.event(CallEvent::Flow(tr, c.cost), self.t);
        }
        let (r, w) = self.t.static_refs(id, executed);
        match c.flow.plt_site(&self.t.exits, id) {
            Some(site) => {
                let k = c.plt_cost.entry(site).or_default();
                k[0] += executed as u64;
                k[1] += r;
                k[2] += w;
            }
            _ if whole => c.whole[id as usize] += 1,
            _ => *c.runs.entry((id as u64) << 16 | executed as u64).or_default() += 1,
        }
        c.cost[0] += executed as u64;
        c.cost[1] += r;
        c.cost[2] += w;
    }

    /// Counts block `b`'s references of instructions whose accesses vary per execution.
    #[inline]
    fn dynamic_refs(&mut self, b: u32, refs: &[MemEvent]) {
        if !self.t.has_dynamic[b as usize] {
            return;
        }
        let first = self.t.first[b as usize];
        for e in refs {
            let k = first + e.insn as u32;
            if self.t.dynamic.get(k as usize).copied().unwrap_or(false) {
                let d = self.c.dyn_refs.entry(k).or_default();
                if e.access == Access::Read {
                    d.0 += 1;
                    self.c.cost[1] += 1;
                } else {
                    d.1 += 1;
                    self.c.cost[2] += 1;
                }
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

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, Self::Error> {
        let c = &mut self.c;
        let ev = match m {
            Marker::Signal(_) => Some(CallEvent::Signal(c.cost)),
            Marker::SignalReturn => Some(CallEvent::SignalReturn(c.cost)),
            Marker::ThreadEnd => Some(CallEvent::End(c.cost)),
            Marker::ThreadStart => None,
            // The rest leave the flow between blocks as it is.
            _ => return Ok(true),
        };
        if let Some(e) = ev {
            c.local.event(e, self.t);
        }
        c.seen_block = true;
        c.flow.break_flow();
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        // Blocks of a run ran whole, one after another: most need only their counts, a
        // transition and their cost, which this loop keeps to; the rest take `enter`.
        let t = self.t;
        for (b, mine) in run.records() {
            let id = b.id;
            let c = &mut self.c;
            let kid = t.kind[id as usize];
            let fast = match c.flow.last {
                Some(p) if c.flow.plt.is_none() && kid & KIND_SLOW == 0 => {
                    let kp = t.kind[p as usize];
                    kp & KIND_CALL_RET == 0 && (kp & KIND_JUMP == 0 || kid & KIND_ENTRY == 0) && b.executed as u32 == t.len(id)
                }
                _ => false,
            };
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
