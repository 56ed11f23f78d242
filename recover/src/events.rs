//! The event stream recovery produces, and the [`Sink`](crate::Sink) every exporter is.
//!
//! A sink sees [`begin`](crate::Sink::begin) once, then blocks, references and markers in each
//! thread's execution order, then [`finish`](crate::Sink::finish). Every method but `finish`
//! answers whether the sink wants more: `Ok(false)` ends its stream early without an error
//! (the driver sends it nothing more, still calls `finish`, and the run counts as
//! successful); `Err` ends the run with the sink's own error type, into which recovery's
//! own errors ([`RecoverError`](crate::RecoverError)) convert.
//!
//! recover/examples/hot_pages.rs is a complete analysis to start from.

use crate::plans::Plans;
pub use crate::records::{MemEvent, RepRun, RunBlock};
use dep_profile::container::{Metadata, ModuleEvent, Profile, ThreadInfo};
use dep_profile::BlockPlan;

/// What a sink method answers: whether the sink wants more events.
pub type Flow<E> = Result<bool, E>;

/// What to replay from each chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Recover from DEP_c and DEP_m.
    Dep,
    /// Replay the truth stream recorded alongside.
    Truth,
    /// The control flow alone, from DEP_c: blocks and markers, no references; DEP_m is
    /// neither read nor checked. For analyses of control flow: on gzip's profile 4.3 s
    /// where full recovery takes 5.3 s (both on two cores).
    Blocks,
}

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
    /// A run of a window of instructions ([`Recovery::seek`](crate::Recovery::seek))
    /// gives the thread from here: its earlier events are left out. Comes right before the
    /// window's first block (where the thread's own start is not in the window).
    WindowStart,
    /// The window ends here: the thread's later events are left out. Comes right after the
    /// window's last block's events (where the thread's own end is not in the window).
    WindowEnd,
    /// The thread ran this many instructions that `dep record` did not record (it was
    /// asked for windows of the run): the next block does not follow the last one, every
    /// register value is unknown, and instructions are numbered on past the gap. Comes
    /// first in the chunk after the gap.
    Unrecorded(u64),
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
    /// Instruction `insn` of the block last entered makes system call `nr` (one the
    /// collector records, [`dep_profile::syscalls`]) with rdi, rsi and rdx = `args`. Comes
    /// with the sync record before the instruction, if it has one.
    Syscall {
        insn: u16,
        nr: u16,
        args: [u64; 3],
    },
    /// The system call of instruction `insn` returned `value` (rax; a negative errno on
    /// failure). Comes with the sync record after the instruction, if it has one.
    SyscallReturn {
        insn: u16,
        value: u64,
    },
    /// The descriptors the system call that returned last made through memory (pipe,
    /// pipe2, socketpair), after its return.
    Descriptors([u32; 2]),
    /// Memory the kernel read or wrote for the system call that returned last, as a
    /// reference of its instruction `insn` at `pc` (the kernel's), after its return: reads
    /// first.
    Kernel {
        insn: u16,
        pc: u64,
        addr: u64,
        size: u32,
        write: bool,
    },
}

impl Marker {
    /// Where a sync record stands among its block's references: `2k` before instruction
    /// `k`'s references, `2k + 1` right after them; None for records at no instruction and
    /// other markers.
    pub fn place(&self) -> Option<u32> {
        match *self {
            Marker::Sync { insn: Some(k), after, .. } => Some(2 * k as u32 + after as u32),
            Marker::Syscall { insn, .. } => Some(2 * insn as u32),
            Marker::SyscallReturn { insn, .. } => Some(2 * insn as u32 + 1),
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

    /// Blocks `blocks` of the run with their references, which are `refs` of the run's.
    pub fn part(&self, blocks: std::ops::Range<usize>, refs: std::ops::Range<usize>) -> Run<'a> {
        Run::new(self.thread, &self.blocks[blocks], &self.refs[refs], self.plans)
    }

    pub fn blocks(&self) -> &'a [RunBlock] {
        self.blocks
    }

    /// Every reference of the run, in order.
    pub fn refs(&self) -> &'a [MemEvent] {
        self.refs
    }

    /// Each block's record with its references.
    pub fn records(&self) -> impl Iterator<Item = (&'a RunBlock, &'a [MemEvent])> + 'a {
        let mut refs = self.refs;
        self.blocks.iter().map(move |b| {
            let (mine, rest) = refs.split_at(b.refs as usize);
            refs = rest;
            (b, mine)
        })
    }

    /// Each block as its event, with its references.
    pub fn iter(&self) -> impl Iterator<Item = (BlockEvent<'a>, &'a [MemEvent])> + 'a {
        let (thread, plans) = (self.thread, self.plans);
        self.records().map(move |(b, mine)| (b.event(thread, plans), mine))
    }
}

impl RunBlock {
    /// The block as the event [`Sink::block`](crate::Sink::block) receives.
    #[inline]
    pub fn event<'a>(&self, thread: u32, plans: &'a Plans) -> BlockEvent<'a> {
        BlockEvent {
            thread,
            addr: self.addr,
            version: 0,
            id: Some(self.id),
            plan: plans.get_plan(self.id),
            executed: self.executed as u32,
            interrupted: false,
        }
    }
}
