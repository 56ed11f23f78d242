//! The event stream recovery produces, and the [`Sink`] every exporter is.
//!
//! A sink sees [`begin`](Sink::begin) once, then blocks, references and markers in each
//! thread's execution order, then [`finish`](Sink::finish). A sink may end its stream early
//! by returning [`SinkError::Stop`]: the driver sends it nothing more, still calls `finish`,
//! and the run counts as successful.

use crate::driver::Source;
use crate::plans::Plans;
pub use crate::records::{MemEvent, RunBlock};
use dep_profile::container::{Metadata, ModuleEvent, Profile, ThreadInfo};
use dep_profile::semantics::Access;
use dep_profile::BlockPlan;
use std::io;

/// Why a sink could not take an event.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Writing its output failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The sink's own failure (an exporter's typed error, boxed).
    #[error("{0}")]
    Failed(Box<dyn std::error::Error + Send + Sync>),
    /// The sink wants nothing more: not a failure.
    #[error("the sink stopped the run")]
    Stop,
}

impl SinkError {
    /// A sink's own failure from any error.
    pub fn failed(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        SinkError::Failed(e.into())
    }
}

/// What every sink method returns.
pub type SinkResult = Result<(), SinkError>;

/// Which part of the profile's stream a sink is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every thread, one after another.
    All,
    /// One thread, from its start to its end.
    Thread(u32),
    /// One chunk of one thread (its `seq`-th), to be merged with its neighbours.
    Chunk { thread: u32, seq: u32 },
}

/// What a sink learns before the first event: the profile's metadata, module and thread
/// tables, its block table (whose indices are [`BlockEvent::id`]) and the part it will see.
#[derive(Clone, Copy)]
pub struct Begin<'a> {
    pub profile: &'a Profile,
    pub meta: &'a Metadata,
    /// Module loads and unloads, in the order the collector saw them.
    pub modules: &'a [ModuleEvent],
    /// Threads in creation order; index `i` is thread `i` of the events.
    pub threads: &'a [ThreadInfo],
    /// The pre-decoded block table.
    pub plans: &'a Plans,
    pub source: Source,
    pub part: Part,
}

impl<'a> Begin<'a> {
    /// The beginning of `part` of a recovery of `profile` with `plans`.
    pub fn new(profile: &'a Profile, plans: &'a Plans, source: Source, part: Part) -> Self {
        Begin { profile, meta: &profile.meta, modules: &profile.modules, threads: &profile.threads, plans, source, part }
    }
}

/// A block entered by a thread.
#[derive(Clone, Copy, Debug)]
pub struct BlockEvent<'a> {
    /// Thread index, 0 for the first thread, in creation order.
    pub thread: u32,
    pub addr: u64,
    /// Code version at `addr` (0 unless the code there changed during the run).
    pub version: u32,
    /// The block's index in the profile's block table; `None` when a truth replay names a
    /// block the table lacks.
    pub id: Option<u32>,
    /// The block's instructions with their semantics; `None` without an id, or when the
    /// table's bytes there do not decode.
    pub plan: Option<&'a BlockPlan>,
    /// Instructions executed: all of them, or up to and including the interrupted one.
    pub executed: u32,
    /// A signal interrupted the block at instruction `executed - 1`.
    pub interrupted: bool,
}

/// Things in a thread's stream other than blocks and references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    ThreadStart,
    ThreadEnd,
    /// A signal handler was entered.
    Signal(u16),
    /// A signal handler returned.
    SignalReturn,
    /// A chunk of the profile starts here.
    ChunkStart(u32),
    /// A synchronisation point with its process-wide sequence number (the order of all
    /// threads' points): before instruction `insn` of the block last entered, after it
    /// when `after` (a system call's return), or at no instruction when `insn` is None
    /// (thread start or end, signal delivery, chunk hand-off). Recovery gives it where it
    /// stands: after the references of the instructions before it ([`place`](Self::place))
    /// and before the rest of its block's.
    Sync {
        seq: u64,
        insn: Option<u16>,
        after: bool,
    },
    /// The block last entered is the entry of a watched library function
    /// ([`Func`](dep_profile::calls::Func) number `func`): rdi and rsi there, and the
    /// return address. Comes right after the sync record given before it in the profile,
    /// or before the block's references when none was.
    Call {
        func: u16,
        args: [u64; 2],
        ret: u64,
    },
    /// The block last entered returned from watched function `func` with rax = `value`.
    /// Comes after that block's references.
    Return {
        func: u16,
        value: u64,
    },
}

impl Marker {
    /// Where a sync record stands among its block's references: `2k` before instruction
    /// `k`'s references, `2k + 1` right after them; None for records at no instruction and
    /// other markers.
    pub fn place(&self) -> Option<u32> {
        match *self {
            Marker::Sync { insn: Some(k), after, .. } => Some(2 * k as u32 + after as u32),
            _ => None,
        }
    }
}

/// Blocks one thread ran one after another, at code version 0 and uninterrupted, with no
/// marker between them, and all their references in order: what the recovery loop hands
/// over in one call when it can.
pub struct Run<'a> {
    pub thread: u32,
    blocks: &'a [RunBlock],
    refs: &'a [MemEvent],
    plans: &'a Plans,
}

impl<'a> Run<'a> {
    /// A run; `refs` must hold exactly the blocks' references, block after block.
    pub fn new(thread: u32, blocks: &'a [RunBlock], refs: &'a [MemEvent], plans: &'a Plans) -> Self {
        debug_assert_eq!(blocks.iter().map(|b| b.refs as usize).sum::<usize>(), refs.len());
        Run { thread, blocks, refs, plans }
    }

    pub fn blocks(&self) -> &'a [RunBlock] {
        self.blocks
    }

    /// Every reference of the run, in order.
    pub fn refs(&self) -> &'a [MemEvent] {
        self.refs
    }

    /// Each block as its event, with its references.
    pub fn iter(&self) -> impl Iterator<Item = (BlockEvent<'a>, &'a [MemEvent])> + 'a {
        let (thread, plans, mut refs) = (self.thread, self.plans, self.refs);
        self.blocks.iter().map(move |b| {
            let (mine, rest) = refs.split_at(b.refs as usize);
            refs = rest;
            let event = BlockEvent {
                thread,
                addr: b.addr,
                version: 0,
                id: Some(b.id),
                plan: plans.get_plan(b.id),
                executed: b.executed as u32,
                interrupted: false,
            };
            (event, mine)
        })
    }
}

/// Receives recovered events in each thread's execution order.
pub trait Sink {
    /// Before any event.
    fn begin(&mut self, _b: &Begin) -> SinkResult {
        Ok(())
    }
    /// A block is entered; its references follow.
    fn block(&mut self, b: &BlockEvent) -> SinkResult;
    /// References of the block last entered, in program order (an instruction's reads before
    /// its writes, rep-string iterations in order). A block's references may arrive in several
    /// calls, or none.
    fn refs(&mut self, refs: &[MemEvent]) -> SinkResult;
    /// A marker in the thread's stream.
    fn marker(&mut self, _thread: u32, _m: Marker) -> SinkResult {
        Ok(())
    }

    /// Several blocks with their references, as [`block`](Self::block) and
    /// [`refs`](Self::refs) would receive them one by one (which is what this does unless a
    /// sink has a faster way).
    fn run(&mut self, run: &Run) -> SinkResult {
        for (b, refs) in run.iter() {
            self.block(&b)?;
            if !refs.is_empty() {
                self.refs(refs)?;
            }
        }
        Ok(())
    }

    /// After the last event of the part the sink was given (or after it stopped).
    fn finish(&mut self) -> SinkResult {
        Ok(())
    }
}

/// A sink whose state at a chunk boundary can be summarised, so that the chunk-parallel
/// driver ([`Recovery::run_merged`](crate::Recovery::run_merged)) can give each chunk a
/// fresh sink and fold them, in order, into the thread's.
pub trait Merge: Sink + Sized {
    /// Appends `later`, the sink of the chunk whose events follow this one's in the same
    /// thread. `self` holds the thread from its start: a fresh sink (which saw `begin` with
    /// [`Part::Thread`] and no event) is the empty start.
    fn merge(&mut self, later: Self) -> SinkResult;
}

/// A sink that keeps only counts: the null sink for timing recovery itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub blocks: u64,
    pub instructions: u64,
    pub reads: u64,
    pub writes: u64,
    pub signals: u64,
    /// A checksum of the references (address, pc, size, kind, in order); counts added together
    /// add their checksums, so a profile's is the sum of its chunks'.
    pub checksum: u64,
}

impl Sink for Counts {
    fn block(&mut self, b: &BlockEvent) -> SinkResult {
        self.blocks += 1;
        self.instructions += b.executed as u64;
        Ok(())
    }

    fn refs(&mut self, refs: &[MemEvent]) -> SinkResult {
        let mut writes = 0;
        let mut sum = self.checksum;
        for m in refs {
            let w = (m.access == Access::Write) as u64;
            writes += w;
            sum = sum.rotate_left(5) ^ m.addr.wrapping_add(m.pc.wrapping_mul(0x9e37_79b9)).wrapping_add(((m.size as u64) << 1) | w);
        }
        self.writes += writes;
        self.reads += refs.len() as u64 - writes;
        self.checksum = sum;
        Ok(())
    }

    fn marker(&mut self, _: u32, m: Marker) -> SinkResult {
        if let Marker::Signal(_) = m {
            self.signals += 1;
        }
        Ok(())
    }

    fn run(&mut self, run: &Run) -> SinkResult {
        self.blocks += run.blocks().len() as u64;
        self.instructions += run.blocks().iter().map(|b| b.executed as u64).sum::<u64>();
        self.refs(run.refs())
    }
}

impl Merge for Counts {
    fn merge(&mut self, later: Self) -> SinkResult {
        self.add(&later);
        Ok(())
    }
}

impl Counts {
    /// Adds another count into this one.
    pub fn add(&mut self, o: &Counts) {
        self.blocks += o.blocks;
        self.instructions += o.instructions;
        self.reads += o.reads;
        self.writes += o.writes;
        self.signals += o.signals;
        self.checksum = self.checksum.wrapping_add(o.checksum);
    }
}

/// Feeds each thread's events to a sink of its own: a per-thread sink (a [`Merge`] sink,
/// say) run over [`Part::All`] on one thread. At `begin` it makes a sink for every thread
/// of the profile's table and begins it with [`Part::Thread`]; `finish` finishes them all.
pub struct ByThread<S, M> {
    make: M,
    threads: Vec<S>,
    /// Thread of the last block, which the references that follow belong to.
    last: usize,
}

impl<S: Sink, M: FnMut(u32) -> S> ByThread<S, M> {
    /// Makes each thread's sink with `make(thread)`.
    pub fn new(make: M) -> Self {
        ByThread { make, threads: Vec::new(), last: 0 }
    }

    /// The threads' sinks, in thread order.
    pub fn into_threads(self) -> Vec<S> {
        self.threads
    }

    #[inline]
    fn sink(&mut self, thread: u32) -> Result<&mut S, SinkError> {
        let t = thread as usize;
        // A thread the table lacks (events fed by hand) gets a sink that saw no `begin`.
        while self.threads.len() <= t {
            let s = (self.make)(self.threads.len() as u32);
            self.threads.push(s);
        }
        self.last = t;
        Ok(&mut self.threads[t])
    }
}

impl<S: Sink, M: FnMut(u32) -> S> Sink for ByThread<S, M> {
    fn begin(&mut self, b: &Begin) -> SinkResult {
        for t in 0..b.threads.len() as u32 {
            let mut s = (self.make)(t);
            s.begin(&Begin { part: Part::Thread(t), ..*b })?;
            self.threads.push(s);
        }
        Ok(())
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> SinkResult {
        self.sink(b.thread)?.block(b)
    }

    #[inline]
    fn refs(&mut self, refs: &[MemEvent]) -> SinkResult {
        match self.threads.get_mut(self.last) {
            Some(s) => s.refs(refs),
            None => Err(SinkError::failed("references before any block")),
        }
    }

    fn marker(&mut self, thread: u32, m: Marker) -> SinkResult {
        self.sink(thread)?.marker(thread, m)
    }

    fn run(&mut self, run: &Run) -> SinkResult {
        self.sink(run.thread)?.run(run)
    }

    fn finish(&mut self) -> SinkResult {
        self.threads.iter_mut().try_for_each(|s| s.finish())
    }
}
