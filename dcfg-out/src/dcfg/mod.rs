//! `dep dcfg`: the Intel DCFG of a profile's processes, and its DCFG-trace
//! (../shared/specs/dcfg-and-dcfg-trace-format-1.00.txt).
//!
//! One pass counts each thread's node transitions chunk-parallel ([`NodeFlow`]); the graph,
//! its routines, dominators and loops are built from those counts; a second pass, also
//! chunk-parallel, turns each chunk's node sequence into edge ids, encoded with a transition
//! table from the first pass's counts, and writes trace rows as they come, in order.
//!
//! How DEP's events become DCFG edges:
//! - between two blocks of a thread, by the first block's last instruction: jcc taken
//!   DIRECT_CONDITIONAL_BRANCH, not taken (and any block ending without a branch)
//!   FALL_THROUGH, jmp DIRECT/INDIRECT_UNCONDITIONAL_BRANCH, call DIRECT/INDIRECT_CALL, ret
//!   RETURN, a rep string run again REP, `syscall`/`int` SYSTEM_CALL_BYPASS (the kernel is
//!   not in the graph, so the bypass carries the count), anything else (ud2, hlt, an
//!   undecodable instruction) UNKNOWN;
//! - a signal delivered between two blocks, or a fault inside the first, CONTEXT_CHANGE
//!   (from the node of the part that ran); the handler's return CONTEXT_CHANGE_RETURN;
//! - START to each thread's first node ENTRY, its last node to END EXIT;
//! - a CALL_BYPASS from each calling node to the node at its return address, count 0;
//! - a block a fault cut short is a node of its own (same address, fewer instructions), so
//!   every node's COUNT is the sum of its incoming and of its outgoing edge counts, and
//!   NUM_INSTRS times COUNT sums to INSTR_COUNT.
//!
//! Here: the types a process's graph is held in and the edge types; `flow` counts node
//! transitions, `graph` builds the nodes and edges from them, `routines` finds routines,
//! dominators and loops, `write` writes the DCFG, `trace` the DCFG-trace (`transitions` and
//! `seqcode` encode it), `check` reads and checks any producer's pair.

pub mod check;
pub mod flow;
mod graph;
mod routines;
pub mod seqcode;
mod trace;
pub mod transitions;
mod write;

pub use trace::{write_trace, ChunkText};
pub use write::{write_dcfg, FileNames};

use crate::dcfg::flow::{node_of, parts, How, Node, NodeFlow};
use crate::dcfg::seqcode::{compress_repeats, BitWriter, Dictionary};
use crate::dcfg::transitions::{code_text, Encoder};
use crate::program::dominators::{dominators, loops, Graph};
use crate::program::symbols::Symbolizer;
use dep_recover::edges::{flow_kind, EdgeKind};
use dep_recover::plans::Plans;
use dep_recover::{BlockEvent, Marker, RecoverError, Recovery, Run, Sink, Source};
use rustc_hash::FxHashMap;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Errors of `dep dcfg`.
#[derive(Debug, thiserror::Error)]
pub enum DcfgError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("writing output: {0}")]
    Io(#[from] io::Error),
    /// A block a truth replay names is not in the block table, so it has no node.
    #[error("block {0:#x} is not in the block table")]
    NotInTable(u64),
    /// A DCFG's flow has no edge for instructions that were not recorded.
    #[error("thread {thread} ran {instructions} unrecorded instructions between two of its recorded windows (dep record --skip-instrs/--instrs): a DCFG has no edge across them; give it one recorded window at a time with --from-instr/--to-instr (dep stats lists them)")]
    Unrecorded { thread: u32, instructions: u64 },
}

/// The DCFG's pre-defined edge types, numbered by their ids in the EDGE_TYPES table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EdgeType {
    Entry = 1,
    Exit = 2,
    Branch = 3,
    ConditionalBranch = 4,
    UnconditionalBranch = 5,
    DirectBranch = 6,
    IndirectBranch = 7,
    DirectConditionalBranch = 8,
    IndirectConditionalBranch = 9,
    DirectUnconditionalBranch = 10,
    IndirectUnconditionalBranch = 11,
    Rep = 12,
    FallThrough = 13,
    Call = 14,
    DirectCall = 15,
    IndirectCall = 16,
    Return = 17,
    CallBypass = 18,
    SystemCall = 19,
    SystemReturn = 20,
    SystemCallBypass = 21,
    ContextChange = 22,
    ContextChangeReturn = 23,
    ContextChangeBypass = 24,
    ExcludedCodeBypass = 25,
    Unknown = 26,
}

impl EdgeType {
    /// Every type, in the order of their ids (1, 2, ...).
    pub const ALL: [EdgeType; 26] = [
        EdgeType::Entry,
        EdgeType::Exit,
        EdgeType::Branch,
        EdgeType::ConditionalBranch,
        EdgeType::UnconditionalBranch,
        EdgeType::DirectBranch,
        EdgeType::IndirectBranch,
        EdgeType::DirectConditionalBranch,
        EdgeType::IndirectConditionalBranch,
        EdgeType::DirectUnconditionalBranch,
        EdgeType::IndirectUnconditionalBranch,
        EdgeType::Rep,
        EdgeType::FallThrough,
        EdgeType::Call,
        EdgeType::DirectCall,
        EdgeType::IndirectCall,
        EdgeType::Return,
        EdgeType::CallBypass,
        EdgeType::SystemCall,
        EdgeType::SystemReturn,
        EdgeType::SystemCallBypass,
        EdgeType::ContextChange,
        EdgeType::ContextChangeReturn,
        EdgeType::ContextChangeBypass,
        EdgeType::ExcludedCodeBypass,
        EdgeType::Unknown,
    ];

    /// The type's name in the EDGE_TYPES table.
    pub fn name(self) -> &'static str {
        match self {
            EdgeType::Entry => "ENTRY",
            EdgeType::Exit => "EXIT",
            EdgeType::Branch => "BRANCH",
            EdgeType::ConditionalBranch => "CONDITIONAL_BRANCH",
            EdgeType::UnconditionalBranch => "UNCONDITIONAL_BRANCH",
            EdgeType::DirectBranch => "DIRECT_BRANCH",
            EdgeType::IndirectBranch => "INDIRECT_BRANCH",
            EdgeType::DirectConditionalBranch => "DIRECT_CONDITIONAL_BRANCH",
            EdgeType::IndirectConditionalBranch => "INDIRECT_CONDITIONAL_BRANCH",
            EdgeType::DirectUnconditionalBranch => "DIRECT_UNCONDITIONAL_BRANCH",
            EdgeType::IndirectUnconditionalBranch => "INDIRECT_UNCONDITIONAL_BRANCH",
            EdgeType::Rep => "REP",
            EdgeType::FallThrough => "FALL_THROUGH",
            EdgeType::Call => "CALL",
            EdgeType::DirectCall => "DIRECT_CALL",
            EdgeType::IndirectCall => "INDIRECT_CALL",
            EdgeType::Return => "RETURN",
            EdgeType::CallBypass => "CALL_BYPASS",
            EdgeType::SystemCall => "SYSTEM_CALL",
            EdgeType::SystemReturn => "SYSTEM_RETURN",
            EdgeType::SystemCallBypass => "SYSTEM_CALL_BYPASS",
            EdgeType::ContextChange => "CONTEXT_CHANGE",
            EdgeType::ContextChangeReturn => "CONTEXT_CHANGE_RETURN",
            EdgeType::ContextChangeBypass => "CONTEXT_CHANGE_BYPASS",
            EdgeType::ExcludedCodeBypass => "EXCLUDED_CODE_BYPASS",
            EdgeType::Unknown => "UNKNOWN",
        }
    }

    /// The type's id in the EDGE_TYPES table.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The DCFG type of a transition of kind `k`, as recovery classifies it
    /// ([`flow_kind`]): one classification for every output.
    pub fn of(k: EdgeKind) -> EdgeType {
        match k {
            EdgeKind::Fallthrough | EdgeKind::NotTaken => EdgeType::FallThrough,
            EdgeKind::RepLoop => EdgeType::Rep,
            EdgeKind::DirectJump => EdgeType::DirectUnconditionalBranch,
            EdgeKind::Taken => EdgeType::DirectConditionalBranch,
            EdgeKind::IndirectJump => EdgeType::IndirectUnconditionalBranch,
            EdgeKind::DirectCall => EdgeType::DirectCall,
            EdgeKind::IndirectCall => EdgeType::IndirectCall,
            EdgeKind::Return => EdgeType::Return,
            // The kernel returns to the next instruction: the graph bypasses it.
            EdgeKind::Syscall => EdgeType::SystemCallBypass,
            EdgeKind::Interrupted | EdgeKind::Signal => EdgeType::ContextChange,
            EdgeKind::SignalReturn => EdgeType::ContextChangeReturn,
            EdgeKind::ThreadStart => EdgeType::Entry,
            EdgeKind::ThreadEnd => EdgeType::Exit,
            EdgeKind::Other => EdgeType::Unknown,
        }
    }

    /// Whether an edge of this type stays within a routine (bypasses included, calls and
    /// returns not).
    fn intra(self) -> bool {
        !matches!(
            self,
            EdgeType::Entry
                | EdgeType::Exit
                | EdgeType::Call
                | EdgeType::DirectCall
                | EdgeType::IndirectCall
                | EdgeType::Return
                | EdgeType::SystemCall
                | EdgeType::SystemReturn
                | EdgeType::ContextChange
                | EdgeType::ContextChangeReturn
        )
    }
}

/// Special node ids.
pub const START: u32 = 1;
pub const END: u32 = 2;

/// An edge's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum End {
    Start,
    End,
    Node(u32),
}

/// A node of the graph.
struct NodeInfo {
    key: Node,
    addr: u64,
    size: u64,
    instrs: u32,
    last_offset: u64,
    count: u64,
    image: usize,
}

struct EdgeInfo {
    src: End,
    dst: End,
    ty: EdgeType,
    /// (thread, count) for the threads that took the edge, by thread: an edge costs the
    /// threads that took it, not every thread of the run.
    per_thread: Vec<(u32, u64)>,
}

impl EdgeInfo {
    /// Adds `n` traversals by thread `t` (threads come in increasing order).
    fn add(&mut self, t: usize, n: u64) {
        match self.per_thread.last_mut() {
            Some((last, c)) if *last as usize == t => *c += n,
            _ => self.per_thread.push((t as u32, n)),
        }
    }

    /// Traversals by all threads.
    fn count(&self) -> u64 {
        self.per_thread.iter().map(|&(_, c)| c).sum()
    }
}

struct Image {
    base: u64,
    size: u64,
    path: Option<String>,
    nodes: Vec<u32>,
}

/// One process: its graph and what the trace needs.
pub struct Process<'r> {
    rec: &'r Recovery<'r>,
    pid: u32,
    node_base: u32,
    edge_base: u32,
    nodes: Vec<NodeInfo>,
    edges: Vec<EdgeInfo>,
    /// (from, to, how) -> edge index.
    by_transition: FxHashMap<(Node, Node, How), u32>,
    entry_edge: FxHashMap<Node, u32>,
    exit_edge: FxHashMap<Node, u32>,
    images: Vec<Image>,
    instr_per_thread: Vec<u64>,
    flows: Vec<NodeFlow<'r>>,
}

/// Node and edge ids used so far in a file (ids are unique across its processes).
#[derive(Clone, Copy, Debug)]
pub struct Ids {
    pub next_node: u32,
    pub next_edge: u32,
}

impl Default for Ids {
    fn default() -> Self {
        Ids { next_node: END + 1, next_edge: 1 }
    }
}
