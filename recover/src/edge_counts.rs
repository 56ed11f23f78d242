//! A thread's control-flow summary, mergeable across chunks: how often each edge was taken,
//! blocks and instructions executed, and the call depth's range. The chunk-parallel driver
//! gives each chunk its own, which records what its first block cannot know (the edge into
//! it, handlers entered in earlier chunks) and replays that when merged onto the thread's.

use crate::edges::{exit_of, BlockExit, Edge, EdgeKind, Edges};
use crate::events::{Begin, BlockEvent, Marker, MemEvent, Merge, Part, Run, Sink, SinkError, SinkResult};
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
            self.delta += d;
            self.min = self.min.min(self.delta);
            self.max = self.max.max(self.delta);
        }
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

/// Edge counts, block and instruction totals and call depth of one thread (a [`Merge`]
/// sink; with [`Part::All`] wrap it in [`ByThread`](crate::ByThread)).
#[derive(Clone, Debug)]
pub struct EdgeCounts {
    /// How often each edge was taken.
    pub edges: FxHashMap<Edge, u64>,
    pub blocks: u64,
    pub instructions: u64,
    pub depth: Depth,
    mode: Mode,
    tracker: Edges,
    head: Vec<Ev>,
    rest: Vec<Ev>,
}

impl Default for EdgeCounts {
    fn default() -> Self {
        EdgeCounts {
            edges: FxHashMap::default(),
            blocks: 0,
            instructions: 0,
            depth: Depth::default(),
            mode: Mode::Closed,
            tracker: Edges::default(),
            head: Vec::new(),
            rest: Vec::new(),
        }
    }
}

impl EdgeCounts {
    /// A summary of a thread from its start.
    pub fn new() -> Self {
        Self::default()
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
                if matches!(ev, Ev::End) || matches!(ev, Ev::SignalReturn) && self.tracker.nested() == 0 {
                    self.mode = Mode::Log;
                    self.rest.push(ev);
                } else {
                    self.apply(ev);
                }
            }
            Mode::Log => self.rest.push(ev),
        }
    }

    /// Every edge with its count, sorted (by source, target, kind).
    pub fn sorted(&self) -> Vec<(Edge, u64)> {
        let mut v: Vec<(Edge, u64)> = self.edges.iter().map(|(e, n)| (*e, *n)).collect();
        v.sort_by_key(|(e, _)| (e.from, e.to, e.kind as u8));
        v
    }
}

impl Sink for EdgeCounts {
    fn begin(&mut self, b: &Begin) -> SinkResult {
        if let Part::Chunk { .. } = b.part {
            self.mode = Mode::Head;
        }
        Ok(())
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> SinkResult {
        self.blocks += 1;
        self.instructions += b.executed as u64;
        self.event(Ev::Block { addr: b.addr, exit: exit_of(b.plan), interrupted: b.interrupted });
        Ok(())
    }

    fn refs(&mut self, _: &[MemEvent]) -> SinkResult {
        Ok(())
    }

    fn marker(&mut self, _: u32, m: Marker) -> SinkResult {
        match m {
            Marker::Signal(_) => self.event(Ev::Signal),
            Marker::SignalReturn => self.event(Ev::SignalReturn),
            Marker::ThreadEnd => self.event(Ev::End),
            Marker::ThreadStart | Marker::ChunkStart(_) => {}
        }
        Ok(())
    }

    fn run(&mut self, run: &Run) -> SinkResult {
        for (b, _) in run.iter() {
            self.block(&b)?;
        }
        Ok(())
    }
}

impl Merge for EdgeCounts {
    fn merge(&mut self, later: Self) -> SinkResult {
        if self.mode != Mode::Closed || later.mode == Mode::Closed {
            return Err(SinkError::failed("edge counts merge a chunk's summary onto its thread's, in order"));
        }
        for ev in later.head {
            self.apply(ev);
        }
        if later.mode != Mode::Head {
            let (edges, depth) = (&mut self.edges, &mut self.depth);
            self.tracker.then(later.tracker, |e| Self::count(edges, depth, e));
            self.depth.then(later.depth);
            for (e, n) in later.edges {
                *self.edges.entry(e).or_insert(0) += n;
            }
        }
        for ev in later.rest {
            self.apply(ev);
        }
        self.blocks += later.blocks;
        self.instructions += later.instructions;
        Ok(())
    }
}
