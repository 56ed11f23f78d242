//! A thread's control-flow summary, mergeable across chunks: how often each edge was taken,
//! blocks and instructions executed, and the call depth's range. The chunk-parallel driver
//! gives each chunk its own, which records what its first block cannot know (the edge into
//! it, handlers entered in earlier chunks) and replays that when merged onto the thread's.
//!
//! Between plain blocks (no signal in between, not interrupted) the edge depends only on
//! the two blocks, so those transitions are counted by block-id pair in a small
//! direct-mapped table and classified once at the end: a few nanoseconds a block, where
//! the general tracker and a hash map per block cost several times recovery itself.

use crate::edges::{exit_of, flow_kind, BlockExit, Edge, EdgeKind, Edges};
use crate::plans::Plans;
use crate::{Begin, BlockEvent, Marker, Merge, Part, RecoverError, Run, Sink};
use dep_profile::semantics::Flow;
use rustc_hash::FxHashMap;

/// Call depth over a stream of edges: calls and signal deliveries go in, returns and signal
/// returns come out (unresolved exits, whose return was never seen, do not count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Depth {
    /// Depth at the end, relative to the start.
    pub delta: i64,
    /// Lowest depth reached, relative to the start (at most 0).
    pub min: i64,
    /// Highest depth reached, relative to the start (at least 0).
    pub max: i64,
}

impl Depth {
    /// The change an edge makes.
    pub fn of(e: &Edge) -> i64 {
        match e.kind {
            EdgeKind::DirectCall | EdgeKind::IndirectCall | EdgeKind::Signal | EdgeKind::Interrupted => 1,
            EdgeKind::Return if e.to.is_some() => -1,
            EdgeKind::SignalReturn => -1,
            _ => 0,
        }
    }

    /// After `e`.
    pub fn step(&mut self, e: &Edge) {
        let d = Self::of(e);
        if d != 0 {
            self.step_by(d);
        }
    }

    /// After an edge that changes the depth by `d`.
    #[inline]
    fn step_by(&mut self, d: i64) {
        self.delta += d;
        self.min = self.min.min(self.delta);
        self.max = self.max.max(self.delta);
    }

    /// This range followed by `later`'s.
    pub fn then(&mut self, later: Depth) {
        self.min = self.min.min(self.delta + later.min);
        self.max = self.max.max(self.delta + later.max);
        self.delta += later.delta;
    }
}

/// A thread-stream event the summary may have to replay.
#[derive(Clone, Copy, Debug)]
enum Ev {
    Block { addr: u64, exit: BlockExit, interrupted: bool },
    Signal,
    SignalReturn,
    End,
    Gap,
}

/// How much of its thread a summary has seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// From the thread's start: `tracker` is the thread's.
    Closed,
    /// A chunk, before its first block: events wait in `head`.
    Head,
    /// A chunk after its first block: `tracker` started there.
    Local,
    /// A chunk whose handler returned to code interrupted in an earlier chunk, or whose
    /// thread ended: the rest of its events wait in `rest`.
    Log,
}

/// Transitions between plain blocks, by (source id, target id): a direct-mapped table in
/// front of a hash map.
#[derive(Clone, Debug)]
struct Pairs {
    /// (key, count); a count of 0 marks an empty slot.
    slots: Vec<(u64, u64)>,
    spill: FxHashMap<u64, u64>,
}

const PAIR_SLOTS: usize = 4096;

impl Pairs {
    fn new() -> Self {
        Pairs { slots: vec![(0, 0); PAIR_SLOTS], spill: FxHashMap::default() }
    }

    #[inline]
    fn add(&mut self, from: u32, to: u32) {
        let key = (from as u64) << 32 | to as u64;
        if self.slots.is_empty() {
            *self.spill.entry(key).or_insert(0) += 1;
            return;
        }
        let h = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - PAIR_SLOTS.trailing_zeros())) as usize;
        let slot = &mut self.slots[h & (PAIR_SLOTS - 1)];
        if slot.0 == key && slot.1 != 0 {
            slot.1 += 1;
        } else {
            if slot.1 != 0 {
                *self.spill.entry(slot.0).or_insert(0) += slot.1;
            }
            *slot = (key, 1);
        }
    }

    /// Moves the table's counts into the map and frees the table (64 KiB), at `finish`:
    /// thousands of threads' summaries, or chunks' held for their turn to merge, are then
    /// as large as what each took. Counting goes on in the map.
    fn compact(&mut self) {
        for (k, n) in std::mem::take(&mut self.slots) {
            if n != 0 {
                *self.spill.entry(k).or_insert(0) += n;
            }
        }
    }

    /// Every pair with its count; the table is gone after.
    fn drain(&mut self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.compact();
        self.spill.drain()
    }
}

/// The call depth change of an edge out of a block that leaves by `exit`, into the block
/// that follows it ([`Depth::of`] for [`flow_kind`]'s edges).
fn flow_depth(exit: (Flow, bool)) -> i64 {
    match exit.0 {
        Flow::Call { .. } | Flow::IndirectCall => 1,
        Flow::Return => -1,
        _ => 0,
    }
}

/// Edge counts, block and instruction totals and call depth of one thread (a [`Merge`]
/// sink; with [`Part::All`] wrap it in [`ByThread`](crate::ByThread)), for the profile
/// whose plans it is given.
#[derive(Clone)]
pub struct EdgeCounts<'p> {
    plans: &'p Plans,
    /// Edges the tracker reported.
    edges: FxHashMap<Edge, u64>,
    /// Transitions between plain blocks, not yet classified.
    pairs: Pairs,
    /// Set while plain blocks follow each other: the last one's id. The tracker then still
    /// stands at the block where this began, [`plain`](Edges::plain).
    fast: Option<u32>,
    pub blocks: u64,
    pub instructions: u64,
    pub depth: Depth,
    mode: Mode,
    tracker: Edges,
    head: Vec<Ev>,
    rest: Vec<Ev>,
}

impl<'p> EdgeCounts<'p> {
    /// A summary of a thread from its start.
    pub fn new(plans: &'p Plans) -> Self {
        EdgeCounts {
            plans,
            edges: FxHashMap::default(),
            pairs: Pairs::new(),
            fast: None,
            blocks: 0,
            instructions: 0,
            depth: Depth::default(),
            mode: Mode::Closed,
            tracker: Edges::default(),
            head: Vec::new(),
            rest: Vec::new(),
        }
    }

    fn count(edges: &mut FxHashMap<Edge, u64>, depth: &mut Depth, e: Edge) {
        *edges.entry(e).or_insert(0) += 1;
        depth.step(&e);
    }

    /// Applies an event to the tracker (which is the thread's, or started at a block).
    fn apply(&mut self, ev: Ev) {
        let (edges, depth) = (&mut self.edges, &mut self.depth);
        let mut emit = |e| Self::count(edges, depth, e);
        match ev {
            Ev::Block { addr, exit, interrupted } => self.tracker.block_exit(addr, exit, interrupted, &mut emit),
            Ev::Signal => self.tracker.signal(&mut emit),
            Ev::SignalReturn => self.tracker.signal_return(&mut emit),
            Ev::End => self.tracker.end(&mut emit),
            Ev::Gap => self.tracker.gap(&mut emit),
        }
    }

    /// Brings the tracker up to the last plain block.
    fn materialize(&mut self) {
        if let Some(last) = self.fast.take() {
            let exit = self.plans.exit(last).expect("plain blocks have exits");
            self.tracker.entered(self.plans.plan(last).addr, exit);
        }
    }

    /// A block of the table, not interrupted, enters.
    #[inline]
    fn enter(&mut self, id: u32, addr: u64) {
        if let Some(last) = self.fast {
            self.pairs.add(last, id);
            let d = flow_depth(self.plans.exit(last).expect("plain blocks have exits"));
            if d != 0 {
                self.depth.step_by(d);
            }
            if self.plans.exit(id).is_some() {
                self.fast = Some(id);
            } else {
                // A block without an exit (undecodable) goes on through the tracker.
                self.fast = None;
                self.tracker.entered(addr, (Flow::Other, false));
            }
            return;
        }
        let exit = self.plans.exit(id);
        self.event(Ev::Block { addr, exit, interrupted: false });
        if exit.is_some() && matches!(self.mode, Mode::Closed | Mode::Local) && self.tracker.plain() {
            self.fast = Some(id);
        }
    }

    fn event(&mut self, ev: Ev) {
        match self.mode {
            Mode::Closed => self.apply(ev),
            Mode::Head => {
                self.head.push(ev);
                if let Ev::Block { .. } = ev {
                    self.mode = Mode::Local;
                    self.tracker = Edges::mid_thread();
                    self.apply(ev);
                }
            }
            Mode::Local => {
                // What the thread's end gives up, and a return from a handler this chunk did
                // not enter, depend on the handlers entered before the chunk.
                if matches!(ev, Ev::End | Ev::Gap) || matches!(ev, Ev::SignalReturn) && self.tracker.nested() == 0 {
                    self.mode = Mode::Log;
                    self.rest.push(ev);
                } else {
                    self.apply(ev);
                }
            }
            Mode::Log => self.rest.push(ev),
        }
    }

    /// Every edge with its count.
    pub fn edges(&self) -> FxHashMap<Edge, u64> {
        let mut all = self.edges.clone();
        let mut pairs = self.pairs.clone();
        for (key, n) in pairs.drain() {
            let (from, to) = ((key >> 32) as u32, key as u32);
            let (a, b) = (self.plans.plan(from).addr, self.plans.plan(to).addr);
            let (flow, rep) = self.plans.exit(from).expect("plain blocks have exits");
            *all.entry(Edge { from: Some(a), to: Some(b), kind: flow_kind(a, flow, rep, Some(b)) }).or_insert(0) += n;
        }
        all
    }

    /// Every edge with its count, sorted (by source, target, kind).
    pub fn sorted(&self) -> Vec<(Edge, u64)> {
        let mut v: Vec<(Edge, u64)> = self.edges().into_iter().collect();
        v.sort_by_key(|(e, _)| (e.from, e.to, e.kind as u8));
        v
    }
}

impl Sink for EdgeCounts<'_> {
    type Error = RecoverError;

    fn begin(&mut self, b: &Begin) -> Result<bool, Self::Error> {
        if let Part::Chunk { .. } = b.part {
            self.mode = Mode::Head;
        }
        Ok(true)
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        self.blocks += 1;
        self.instructions += b.executed as u64;
        match b.id {
            Some(id) if !b.interrupted => self.enter(id, b.addr),
            _ => {
                self.materialize();
                self.event(Ev::Block { addr: b.addr, exit: exit_of(b.plan), interrupted: b.interrupted });
            }
        }
        Ok(true)
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, Self::Error> {
        if matches!(m, Marker::Signal(_) | Marker::SignalReturn | Marker::ThreadEnd | Marker::Unrecorded(_)) {
            self.materialize();
        }
        match m {
            Marker::Signal(_) => self.event(Ev::Signal),
            Marker::SignalReturn => self.event(Ev::SignalReturn),
            Marker::ThreadEnd => self.event(Ev::End),
            Marker::Unrecorded(_) => self.event(Ev::Gap),
            // The rest leave the flow between blocks as it is.
            _ => {}
        }
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        for b in run.blocks() {
            self.blocks += 1;
            self.instructions += b.executed as u64;
            self.enter(b.id, b.addr);
        }
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), Self::Error> {
        // A summary from the thread's start (read in order, or its chunks merged) ends with
        // the thread's stream, with or without its end marker (a profile cut short stops
        // after its last whole chunk): an exit still waiting is given up. (Nothing is
        // waiting after the end marker: a second end adds nothing.) A chunk's summary is
        // not the end of its thread.
        if self.mode == Mode::Closed {
            self.materialize();
            self.event(Ev::End);
        }
        // A thread's summary is kept until every thread is done, a chunk's until its thread
        // merges it, perhaps behind hundreds of others: both hold what they counted only.
        self.pairs.compact();
        Ok(())
    }
}

impl Merge for EdgeCounts<'_> {
    fn merge(&mut self, mut later: Self) -> Result<bool, Self::Error> {
        if self.mode != Mode::Closed || later.mode == Mode::Closed {
            return Err(RecoverError::MergeOrder("edge counts"));
        }
        self.materialize();
        later.materialize();
        for (key, n) in later.pairs.drain() {
            *self.pairs.spill.entry(key).or_insert(0) += n;
        }
        for ev in later.head {
            self.apply(ev);
        }
        if later.mode != Mode::Head {
            let (edges, depth) = (&mut self.edges, &mut self.depth);
            self.tracker.then(later.tracker, |e| Self::count(edges, depth, e));
            self.depth.then(later.depth);
            for (e, n) in later.edges.drain() {
                *self.edges.entry(e).or_insert(0) += n;
            }
        }
        for ev in later.rest {
            self.apply(ev);
        }
        self.blocks += later.blocks;
        self.instructions += later.instructions;
        Ok(true)
    }
}
