//! The DCFG's view of a thread: the sequence of executed block nodes, and how often each
//! pair of consecutive nodes occurs (with whether a signal was delivered or returned from
//! between them). A node is a block of the table as far as it executed: a block a signal cut
//! short at its k-th instruction is a node of its own, so that a node's instructions times
//! its count is what ran. Mergeable across chunks, so it counts chunk-parallel.

use crate::dcfg::DcfgError;
use dep_recover::plans::Plans;
use dep_recover::{Begin, BlockEvent, Marker, Merge, Part, RecoverError, Run, Sink};
use rustc_hash::FxHashMap;

/// A block-table index and how many of its instructions ran: `id << 16 | executed`.
pub type Node = u64;

// `executed` fits its 16 bits: the profile reader refuses longer blocks.
const _: () = assert!(dep_profile::blocks::MAX_BLOCK_INSNS <= 0xffff);

/// A node's key.
#[inline]
pub fn node(id: u32, executed: u32) -> Node {
    (id as u64) << 16 | (executed as u64 & 0xffff)
}

/// A block event's node, and whether the whole block ran; an error for a block the table
/// lacks (a truth replay's).
pub fn node_of(b: &BlockEvent) -> Result<(Node, bool), DcfgError> {
    let id = b.id.ok_or(DcfgError::NotInTable(b.addr))?;
    Ok((node(id, b.executed), b.plan.is_some_and(|p| p.insns.len() == b.executed as usize)))
}

/// The node's block-table index and instructions executed.
pub fn parts(n: Node) -> (u32, u32) {
    ((n >> 16) as u32, (n & 0xffff) as u32)
}

/// How control went from one node to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum How {
    /// By the first node's own exit.
    Flow = 0,
    /// A signal was delivered: the second node starts its handler.
    Signal = 1,
    /// A handler returned: the second node resumes the interrupted code.
    SignalReturn = 2,
}

impl How {
    fn from_u8(v: u8) -> How {
        match v {
            1 => How::Signal,
            2 => How::SignalReturn,
            _ => How::Flow,
        }
    }

    /// How the next transition goes after marker `m`.
    pub fn after(self, m: Marker) -> How {
        match m {
            Marker::Signal(_) => How::Signal,
            Marker::SignalReturn => How::SignalReturn,
            _ => self,
        }
    }

    /// Two markers between the same pair of nodes: the later one decides.
    fn then(self, later: How) -> How {
        if later == How::Flow {
            self
        } else {
            later
        }
    }
}

/// A transition key: (from, to, how) in 128 bits.
fn key(from: Node, to: Node, how: How) -> u128 {
    (from as u128) << 64 | (to as u128) << 2 | how as u128
}

/// The transition a key holds.
pub fn unkey(k: u128) -> (Node, Node, How) {
    ((k >> 64) as u64, ((k as u64) >> 2), How::from_u8((k & 3) as u8))
}

const SLOTS: usize = 4096;

/// Where a chunk starts in its thread: the node before it and the markers since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkStart {
    pub prev: Option<Node>,
    pub how: How,
}

/// One thread's node sequence, summarised.
#[derive(Clone)]
pub struct NodeFlow<'p> {
    plans: &'p Plans,
    /// Transitions by the block's own exit between two whole blocks, by (from id, to id):
    /// the common case, counted in a direct-mapped table of (key, count), count 0 empty.
    plain: Vec<(u64, u64)>,
    /// Whether the last node is a whole block (so that `plain` may count from it).
    last_whole: bool,
    /// Front cache of the other transition counts: (key, count), count 0 empty.
    slots: Vec<(u128, u64)>,
    spill: FxHashMap<u128, u64>,
    /// The thread's (or chunk's) first node and the markers before it.
    pub first: Option<Node>,
    start_how: How,
    /// The last node, and the markers since.
    pub last: Option<Node>,
    how: How,
    /// Whether this holds the thread from its start.
    closed: bool,
    pub blocks: u64,
    pub instructions: u64,
    /// For a thread merged from chunks: where each chunk started, in order.
    pub chunk_starts: Vec<ChunkStart>,
    /// Unrecorded instructions (`dep record` windows), as (thread, how many): before the
    /// first node, and since the last one (a node after them would need an edge across).
    lead_gap: Option<(u32, u64)>,
    gap: Option<(u32, u64)>,
}

impl<'p> NodeFlow<'p> {
    /// A thread's flow from its start, for a profile with these plans.
    pub fn new(plans: &'p Plans) -> Self {
        NodeFlow {
            plans,
            plain: vec![(0, 0); SLOTS],
            last_whole: false,
            slots: vec![(0, 0); SLOTS],
            spill: FxHashMap::default(),
            first: None,
            start_how: How::Flow,
            last: None,
            how: How::Flow,
            closed: true,
            blocks: 0,
            instructions: 0,
            chunk_starts: Vec::new(),
            lead_gap: None,
            gap: None,
        }
    }

    /// The node of block `id` run whole.
    fn node_whole(&self, id: u32) -> Node {
        node(id, self.plans.flat.blocks[id as usize].insns)
    }

    /// The full key of a plain transition (two whole blocks' ids, `from << 32 | to`).
    fn plain_key(&self, k: u64) -> u128 {
        key(self.node_whole((k >> 32) as u32), self.node_whole(k as u32), How::Flow)
    }

    /// Moves every count into the map and frees the direct-mapped tables, at `finish`: a
    /// run of thousands of threads, or of chunks held for their turn to merge, then holds
    /// what each took, not two 4096-slot tables each (192 KiB).
    fn compact(&mut self) {
        for (k, n) in std::mem::take(&mut self.slots).into_iter().filter(|s| s.1 != 0) {
            *self.spill.entry(k).or_insert(0) += n;
        }
        for (k, n) in std::mem::take(&mut self.plain).into_iter().filter(|s| s.1 != 0) {
            *self.spill.entry(self.plain_key(k)).or_insert(0) += n;
        }
    }

    #[inline]
    fn add(&mut self, k: u128, n: u64) {
        if self.slots.is_empty() {
            *self.spill.entry(k).or_insert(0) += n;
            return;
        }
        let h = ((k as u64 ^ (k >> 64) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (SLOTS - 1);
        let slot = &mut self.slots[h];
        if slot.0 == k && slot.1 != 0 {
            slot.1 += n;
        } else {
            if slot.1 != 0 {
                *self.spill.entry(slot.0).or_insert(0) += slot.1;
            }
            *slot = (k, n);
        }
    }

    /// Counts a plain transition between whole blocks (ids).
    #[inline]
    fn add_plain(&mut self, k: u64, n: u64) {
        if self.plain.is_empty() {
            *self.spill.entry(self.plain_key(k)).or_insert(0) += n;
            return;
        }
        let h = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (SLOTS - 1);
        let (old, count) = self.plain[h];
        if old == k && count != 0 {
            self.plain[h].1 += n;
        } else {
            if count != 0 {
                *self.spill.entry(self.plain_key(old)).or_insert(0) += count;
            }
            self.plain[h] = (k, n);
        }
    }

    /// Before a node: no unrecorded instructions since the last one.
    fn no_gap(&mut self) -> Result<(), DcfgError> {
        match self.gap.take() {
            Some((thread, instructions)) => Err(DcfgError::Unrecorded { thread, instructions }),
            None => Ok(()),
        }
    }

    /// A block enters; `whole` if all its instructions ran (`executed` of them).
    #[inline]
    fn enter(&mut self, n: Node, executed: u32, whole: bool) {
        self.blocks += 1;
        self.instructions += executed as u64;
        match self.last {
            Some(prev) if whole && self.last_whole && self.how == How::Flow => self.add_plain((prev >> 16) << 32 | n >> 16, 1),
            Some(prev) => self.add(key(prev, n, self.how), 1),
            None => {
                self.first = Some(n);
                self.start_how = self.how;
            }
        }
        self.last = Some(n);
        self.last_whole = whole;
        self.how = How::Flow;
    }

    /// Every transition with its count (the thread's first node and its end aside).
    pub fn transitions(&self) -> FxHashMap<(Node, Node, How), u64> {
        let mut all: FxHashMap<(Node, Node, How), u64> = FxHashMap::default();
        for (&k, &n) in self.spill.iter().chain(self.slots.iter().filter(|s| s.1 != 0).map(|(k, n)| (k, n))) {
            *all.entry(unkey(k)).or_insert(0) += n;
        }
        for &(k, n) in self.plain.iter().filter(|s| s.1 != 0) {
            *all.entry((self.node_whole((k >> 32) as u32), self.node_whole(k as u32), How::Flow)).or_insert(0) += n;
        }
        all
    }
}

impl Sink for NodeFlow<'_> {
    type Error = DcfgError;

    fn begin(&mut self, b: &Begin) -> Result<bool, Self::Error> {
        self.closed = !matches!(b.part, Part::Chunk { .. });
        Ok(true)
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        self.no_gap()?;
        let (n, whole) = node_of(b)?;
        self.enter(n, b.executed, whole);
        Ok(true)
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        if let Marker::Unrecorded(instructions) = m {
            match self.first {
                None => self.lead_gap = Some((thread, instructions)),
                Some(_) => self.gap = Some((thread, instructions)),
            }
            return Ok(true);
        }
        self.how = self.how.after(m);
        Ok(true)
    }

    fn finish(&mut self) -> Result<(), Self::Error> {
        // A whole thread's flow is kept until the graph is built, a chunk's until its thread
        // merges it, perhaps behind hundreds of others: both hold what they counted only.
        self.compact();
        Ok(())
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        self.no_gap()?;
        // Run blocks are whole, with no marker between them: after the first, each is a
        // plain transition, counted in a loop that keeps its state in locals.
        let blocks = run.blocks();
        let Some((first, rest)) = blocks.split_first() else { return Ok(true) };
        self.enter(node(first.id, first.executed as u32), first.executed as u32, true);
        let mut prev = first.id;
        let mut instructions = 0u64;
        for b in rest {
            self.add_plain((prev as u64) << 32 | b.id as u64, 1);
            instructions += b.executed as u64;
            prev = b.id;
        }
        if let Some(last) = rest.last() {
            self.blocks += rest.len() as u64;
            self.instructions += instructions;
            self.last = Some(node(last.id, last.executed as u32));
        }
        Ok(true)
    }
}

impl Merge for NodeFlow<'_> {
    fn merge(&mut self, later: Self) -> Result<bool, Self::Error> {
        if !self.closed || later.closed {
            return Err(RecoverError::MergeOrder("node flows").into());
        }
        let between = self.gap.or(later.lead_gap);
        if let (Some((thread, instructions)), Some(_), Some(_)) = (between, self.last, later.first) {
            return Err(DcfgError::Unrecorded { thread, instructions });
        }
        if self.first.is_none() {
            self.lead_gap = self.lead_gap.or(later.lead_gap);
        }
        self.gap = if later.first.is_some() { later.gap } else { between };
        self.chunk_starts.push(ChunkStart { prev: self.last, how: self.how });
        match (self.last, later.first) {
            (Some(prev), Some(first)) => self.add(key(prev, first, self.how.then(later.start_how)), 1),
            (None, Some(first)) => {
                self.first = Some(first);
                self.start_how = self.how.then(later.start_how);
            }
            _ => {}
        }
        if later.last.is_some() {
            self.last = later.last;
            self.last_whole = later.last_whole;
            self.how = later.how;
        } else {
            self.how = self.how.then(later.how);
        }
        for (k, n) in later.spill.into_iter().chain(later.slots.into_iter().filter(|s| s.1 != 0)) {
            self.add(k, n);
        }
        for (k, n) in later.plain.into_iter().filter(|s| s.1 != 0) {
            self.add_plain(k, n);
        }
        self.blocks += later.blocks;
        self.instructions += later.instructions;
        Ok(true)
    }
}
