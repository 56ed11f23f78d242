//! The event stream recovery produces; every exporter is a [`Sink`].

use crate::plans::Plans;
pub use crate::records::{MemEvent, RunBlock};
use dep_profile::semantics::Access;
use dep_profile::BlockPlan;
use std::io;

/// A block entered by a thread.
#[derive(Clone, Copy, Debug)]
pub struct BlockEvent<'a> {
    /// Thread index, 0 for the first thread, in creation order.
    pub thread: u32,
    pub addr: u64,
    /// Code version at `addr` (0 unless the code there changed during the run).
    pub version: u32,
    /// The block's instructions with their semantics; `None` when replaying a truth stream.
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
    /// A block is entered; its references follow.
    fn block(&mut self, b: &BlockEvent) -> io::Result<()>;
    /// References of the block last entered, in program order (an instruction's reads before
    /// its writes, rep-string iterations in order). A block's references may arrive in several
    /// calls, or none.
    fn refs(&mut self, refs: &[MemEvent]) -> io::Result<()>;
    /// A marker in the thread's stream.
    fn marker(&mut self, _thread: u32, _m: Marker) -> io::Result<()> {
        Ok(())
    }

    /// Several blocks with their references, as [`block`](Self::block) and
    /// [`refs`](Self::refs) would receive them one by one (which is what this does unless a
    /// sink has a faster way).
    fn run(&mut self, run: &Run) -> io::Result<()> {
        for (b, refs) in run.iter() {
            self.block(&b)?;
            if !refs.is_empty() {
                self.refs(refs)?;
            }
        }
        Ok(())
    }
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
    fn block(&mut self, b: &BlockEvent) -> io::Result<()> {
        self.blocks += 1;
        self.instructions += b.executed as u64;
        Ok(())
    }

    fn refs(&mut self, refs: &[MemEvent]) -> io::Result<()> {
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

    fn marker(&mut self, _: u32, m: Marker) -> io::Result<()> {
        if let Marker::Signal(_) = m {
            self.signals += 1;
        }
        Ok(())
    }

    fn run(&mut self, run: &Run) -> io::Result<()> {
        self.blocks += run.blocks().len() as u64;
        self.instructions += run.blocks().iter().map(|b| b.executed as u64).sum::<u64>();
        self.refs(run.refs())
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
