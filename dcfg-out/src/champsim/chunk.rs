//! One chunk's records: a sink that turns each executed block into its instructions'
//! records (rep strings one per iteration), fills in the memory addresses recovered, and
//! marks conditional branches taken or not by the block that follows (after a signal
//! handler, the block it returns to). A branch the chunk cannot decide, or one an earlier
//! chunk left waiting, is named by [`Open`], and the writer decides it in order.
//!
//! A chunk's records can be unbounded (a loop of a few blocks runs for billions of
//! instructions in one chunk), so the sink hands them on every [`PIECE`] bytes: those
//! before its oldest branch still waiting go to [`Writing`], straight to the file when
//! every chunk before it is written, else held until then.

use super::record::{set_taken, Kind, Memory, Template, RECORD};
use super::{ChampsimError, Released, Writing, HOLD_LIMIT};
use dep_recover::{Begin, BlockEvent, Marker, MemEvent, Part, Run, Sink};
use std::sync::OnceLock;

/// Each block's instruction records, made on first use, shared by all chunks; and the
/// chunks' buffers, reused so that a chunk's records land in memory already mapped.
pub struct Templates {
    blocks: Vec<OnceLock<BlockRecords>>,
    buffers: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Buffers kept for reuse (more are dropped).
const BUFFERS: usize = 8;

/// Bytes of records a chunk gathers before it hands on those no branch waits on.
pub const PIECE: usize = 8 << 20;

impl Templates {
    /// Room for `blocks` block ids.
    pub fn new(blocks: usize) -> Templates {
        Templates { blocks: (0..blocks).map(|_| OnceLock::new()).collect(), buffers: Default::default() }
    }

    /// An empty buffer, reused if one is free.
    fn buffer(&self) -> Vec<u8> {
        self.buffers.lock().map(|mut b| b.pop()).ok().flatten().unwrap_or_default()
    }

    /// Gives a chunk's buffer back for reuse.
    pub fn recycle(&self, mut b: Vec<u8>) {
        b.clear();
        if let Ok(mut pool) = self.buffers.lock() {
            if pool.len() < BUFFERS {
                pool.push(b);
            }
        }
    }

    fn of(&self, b: &BlockEvent) -> Option<&BlockRecords> {
        let (id, plan) = (b.id?, b.plan?);
        let cell = self.blocks.get(id as usize)?;
        Some(cell.get_or_init(|| {
            let mut bytes = Vec::with_capacity(plan.insns.len() * RECORD);
            let mut kinds = Vec::with_capacity(plan.insns.len());
            for i in &plan.insns {
                let t = Template::of(i);
                bytes.extend_from_slice(&t.bytes);
                kinds.push(t.kind);
            }
            let rep = kinds.iter().any(|k| matches!(k, Kind::Rep { .. }));
            BlockRecords { bytes: bytes.into(), kinds: kinds.into(), rep }
        }))
    }
}

/// A block's instructions' records, one after another as they are written when the block
/// runs through, and how each is completed.
pub struct BlockRecords {
    bytes: Box<[u8]>,
    kinds: Box<[Kind]>,
    /// A rep string among them (one record per iteration: not a plain copy).
    rep: bool,
}

impl BlockRecords {
    fn template(&self, i: usize) -> Template {
        let mut bytes = [0u8; RECORD];
        bytes.copy_from_slice(&self.bytes[i * RECORD..(i + 1) * RECORD]);
        Template { bytes, kind: self.kinds[i] }
    }
}

/// A conditional branch waiting for the next block to tell its direction: one of this
/// chunk's (its record's offset in the chunk's bytes, and the address after it), or one the
/// chunk began with and cannot see: the thread's pending branch, or the `k`-th entry from
/// the top of the stack of branches interrupted by signal handlers (0 the innermost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    Local { offset: usize, fallthrough: u64 },
    Pending,
    Outer(usize),
}

/// Counts of what a record could not hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// Distinct memory addresses beyond a record's slots (4 read, 2 written).
    pub addresses: u64,
    /// Conditional branches whose next block is unknown (the thread ends, a handler
    /// returns right after it, or more records than the writer holds come before it is
    /// known): written as not taken.
    pub undirected: u64,
    /// Blocks whose code the profile's block table lacks: their instructions are missing.
    pub unknown_blocks: u64,
}

impl Losses {
    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &Losses) {
        self.addresses += o.addresses;
        self.undirected += o.undirected;
        self.unknown_blocks += o.unknown_blocks;
    }
}

/// A chunk's records and what joins them to the chunks around: the branches it decided
/// that an earlier chunk left open (in order; `Some(addr)` the next block, `None` not
/// known), and the branches left open at its end.
#[derive(Default)]
pub struct ChunkRecords {
    /// What it handed on before its last records, `bytes` (the offsets of [`Open::Local`]
    /// count from the chunk's first record, handed on or not).
    pub released: Released,
    pub bytes: Vec<u8>,
    pub records: u64,
    pub decided: Vec<(Open, Option<u64>)>,
    /// The branch waiting at the end, if any.
    pub pending: Option<Open>,
    /// The chunk's own entries of the interrupted-branch stack at its end (bottom first),
    /// on top of the entries it began with less the `popped` innermost.
    pub stack: Vec<Option<Open>>,
    pub popped: usize,
    pub losses: Losses,
}

/// The block last entered, whose references are coming.
struct Entered<'t> {
    blk: &'t BlockRecords,
    /// Instructions run, and whether a signal interrupted the last.
    executed: usize,
    interrupted: bool,
    /// Where its records start in the chunk's bytes (written on entry unless it has a rep
    /// string, whose records wait for its references), and the instruction whose
    /// addresses are being gathered.
    at: usize,
    insn: Option<usize>,
}

/// The sink of one chunk.
pub struct ChunkTrace<'t> {
    templates: &'t Templates,
    /// The thread wanted (None: all).
    thread: Option<u32>,
    /// Where released records go; this chunk's place in the order and its thread.
    writing: &'t Writing,
    k: usize,
    chunk_thread: u32,
    /// Bytes gathered before records are handed on ([`PIECE`], smaller in tests), and
    /// bytes handed on (the offset of `out.bytes` in the chunk's records).
    piece: usize,
    released: usize,
    /// `into_records` ran: dropped before, the chunk failed and later chunks must not wait.
    done: bool,
    out: ChunkRecords,
    /// The block last entered.
    open: Option<Entered<'t>>,
    refs: Vec<MemEvent>,
    /// The branch waiting for the next block.
    pending: Option<Open>,
    /// Branches waiting for the block after a signal handler's return, innermost last.
    signals: Vec<Option<Open>>,
    mem: Memory,
}

impl<'t> ChunkTrace<'t> {
    /// The sink of chunk `k` (in the order chunks are written), writing only thread
    /// `thread`'s chunks when given, handing on records every `piece` bytes.
    pub fn new(templates: &'t Templates, thread: Option<u32>, writing: &'t Writing, k: usize, piece: usize) -> Self {
        ChunkTrace {
            templates,
            thread,
            writing,
            k,
            chunk_thread: 0,
            piece: piece.max(RECORD),
            released: 0,
            done: false,
            out: ChunkRecords { bytes: templates.buffer(), ..Default::default() },
            open: None,
            refs: Vec::new(),
            // Whatever the thread had waiting when the chunk began.
            pending: Some(Open::Pending),
            signals: Vec::new(),
            mem: Memory::default(),
        }
    }

    /// The chunk's records.
    pub fn into_records(mut self) -> ChunkRecords {
        self.flush();
        self.done = true;
        let mut out = std::mem::take(&mut self.out);
        if out.bytes.capacity() > 2 * out.bytes.len() + (1 << 20) {
            // What is left after pieces were handed on: the result waits for its turn with
            // others, so it keeps no room it does not use.
            out.bytes.shrink_to_fit();
        }
        out.pending = self.pending;
        out.stack = std::mem::take(&mut self.signals);
        out.losses.addresses += self.mem.dropped;
        out
    }

    /// The branch `o` went on to `next` (None: not known).
    fn decide(&mut self, o: Open, next: Option<u64>) {
        match o {
            Open::Local { offset, fallthrough } => match next {
                Some(addr) => set_taken(&mut self.out.bytes[offset - self.released..], addr != fallthrough),
                None => self.out.losses.undirected += 1,
            },
            Open::Pending | Open::Outer(_) => self.out.decided.push((o, next)),
        }
    }

    /// Between blocks, once a piece has gathered: hands on the records before the oldest
    /// branch still waiting (one interrupted by a signal handler), unless that leaves
    /// most of them. Past [`HOLD_LIMIT`] the oldest is given up (written not taken).
    fn release(&mut self) -> Result<(), ChampsimError> {
        let n = loop {
            let oldest =
                self.signals.iter().flatten().filter_map(|o| if let Open::Local { offset, .. } = o { Some(*offset) } else { None }).min();
            let n = oldest.map_or(self.out.bytes.len(), |o| o - self.released);
            if oldest.is_none() || n >= self.piece / 2 {
                break n;
            }
            if self.out.bytes.len() <= HOLD_LIMIT {
                return Ok(());
            }
            self.out.losses.undirected += 1;
            for g in self.signals.iter_mut() {
                if matches!(g, Some(Open::Local { offset, .. }) if Some(*offset) == oldest) {
                    *g = None;
                }
            }
        };
        self.writing.release(self.k, self.chunk_thread, &mut self.out.released, &mut self.out.decided, &self.out.bytes[..n])?;
        self.out.bytes.drain(..n);
        self.released += n;
        Ok(())
    }

    /// Appends `t`'s record with the addresses of `refs`.
    #[inline]
    fn emit(&mut self, t: &Template, refs: &[MemEvent]) {
        for r in refs {
            self.mem.add(r.access, r.addr);
        }
        let at = self.out.bytes.len();
        self.out.bytes.extend_from_slice(&t.bytes);
        self.mem.fill(&mut self.out.bytes[at..at + RECORD]);
        self.out.records += 1;
    }

    /// Completes the block last entered.
    fn flush(&mut self) {
        let Some(e) = self.open.take() else { return };
        if e.executed == 0 {
            return;
        }
        let last;
        if !e.blk.rep {
            // Its records are written: the last instruction's addresses go in.
            if let Some(i) = e.insn {
                self.mem.fill(&mut self.out.bytes[e.at + i * RECORD..e.at + (i + 1) * RECORD]);
            }
            last = e.at + (e.executed - 1) * RECORD;
        } else {
            let refs = std::mem::take(&mut self.refs);
            let mut r = 0;
            let mut at = self.out.bytes.len();
            for i in 0..e.executed {
                let t = e.blk.template(i);
                let from = r;
                while r < refs.len() && refs[r].insn as usize == i {
                    r += 1;
                }
                let mine = &refs[from..r];
                at = self.out.bytes.len();
                match t.kind {
                    Kind::Rep { per_iteration } if per_iteration > 0 && !mine.is_empty() => {
                        for it in mine.chunks(per_iteration as usize) {
                            at = self.out.bytes.len();
                            self.emit(&t, it);
                        }
                    }
                    _ => self.emit(&t, mine),
                }
            }
            self.refs = refs;
            self.refs.clear();
            last = at;
        }
        // A conditional branch that ran to its end: the next block tells its direction.
        if let (false, Kind::Conditional { fallthrough }) = (e.interrupted, e.blk.kinds[e.executed - 1]) {
            self.pending = Some(Open::Local { offset: self.released + last, fallthrough });
        }
    }

    /// Completes the block last entered, decides the branch waiting by the block at `addr`,
    /// and hands on a piece if one has gathered.
    fn next_block(&mut self, addr: u64) -> Result<(), ChampsimError> {
        self.flush();
        if let Some(o) = self.pending.take() {
            self.decide(o, Some(addr));
        }
        if self.out.bytes.len() >= self.piece {
            self.release()?;
        }
        Ok(())
    }
}

impl Drop for ChunkTrace<'_> {
    fn drop(&mut self) {
        if !self.done {
            // The chunk failed: chunks waiting for their turn after it would wait forever.
            self.writing.abort();
        }
    }
}

impl Sink for ChunkTrace<'_> {
    type Error = ChampsimError;

    fn begin(&mut self, b: &Begin) -> Result<bool, ChampsimError> {
        if let Part::Chunk { thread, .. } = b.part {
            self.chunk_thread = thread;
        }
        Ok(match (b.part, self.thread) {
            (Part::Chunk { thread, .. }, Some(want)) => thread == want,
            _ => true,
        })
    }

    fn block(&mut self, b: &BlockEvent) -> Result<bool, ChampsimError> {
        self.next_block(b.addr)?;
        match self.templates.of(b) {
            Some(blk) => {
                let executed = (b.executed as usize).min(blk.kinds.len());
                let at = self.out.bytes.len();
                if !blk.rep {
                    // One record per instruction: the block's records at once; each
                    // instruction's addresses go into its own as they come.
                    self.out.bytes.extend_from_slice(&blk.bytes[..executed * RECORD]);
                    self.out.records += executed as u64;
                }
                self.open = Some(Entered { blk, executed, interrupted: b.interrupted, at, insn: None });
            }
            None => self.out.losses.unknown_blocks += 1,
        }
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, ChampsimError> {
        for (b, refs) in run.iter() {
            self.next_block(b.addr)?;
            let Some(blk) = self.templates.of(&b) else {
                self.out.losses.unknown_blocks += 1;
                continue;
            };
            let executed = (b.executed as usize).min(blk.kinds.len());
            let at = self.out.bytes.len();
            if blk.rep {
                self.open = Some(Entered { blk, executed, interrupted: false, at, insn: None });
                self.refs.extend_from_slice(refs);
                continue;
            }
            // The block's records at once, then each instruction's addresses into its own.
            self.out.bytes.extend_from_slice(&blk.bytes[..executed * RECORD]);
            self.out.records += executed as u64;
            let mut k = 0;
            while k < refs.len() {
                let i = refs[k].insn as usize;
                let from = k;
                while k < refs.len() && refs[k].insn as usize == i {
                    k += 1;
                }
                if i < executed {
                    for r in &refs[from..k] {
                        self.mem.add(r.access, r.addr);
                    }
                    self.mem.fill(&mut self.out.bytes[at + i * RECORD..at + (i + 1) * RECORD]);
                }
            }
            // What is left to do at the next block: its conditional branch's direction.
            self.open = Some(Entered { blk, executed, interrupted: false, at, insn: None });
        }
        Ok(true)
    }

    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, ChampsimError> {
        let Some(e) = self.open.as_mut() else { return Ok(true) };
        if e.blk.rep {
            self.refs.extend_from_slice(refs);
            return Ok(true);
        }
        for r in refs {
            let i = r.insn as usize;
            if i >= e.executed {
                continue;
            }
            if e.insn != Some(i) {
                if let Some(k) = e.insn {
                    self.mem.fill(&mut self.out.bytes[e.at + k * RECORD..e.at + (k + 1) * RECORD]);
                }
                e.insn = Some(i);
            }
            self.mem.add(r.access, r.addr);
        }
        Ok(true)
    }

    fn marker(&mut self, _thread: u32, m: Marker) -> Result<bool, ChampsimError> {
        match m {
            // The branch before a handler is decided by the block it returns to.
            Marker::Signal(_) => {
                self.flush();
                let p = self.pending.take();
                self.signals.push(p);
            }
            Marker::SignalReturn => {
                self.flush();
                if let Some(o) = self.pending.take() {
                    // A branch right before the handler's return: where it went is not known.
                    self.decide(o, None);
                }
                self.pending = match self.signals.pop() {
                    Some(p) => p,
                    None => {
                        self.out.popped += 1;
                        Some(Open::Outer(self.out.popped - 1))
                    }
                };
            }
            // Where the thread goes after its last block before a gap is not recorded.
            Marker::ThreadEnd | Marker::Unrecorded(_) => {
                self.flush();
                if let Some(o) = self.pending.take() {
                    self.decide(o, None);
                }
            }
            _ => {}
        }
        Ok(true)
    }
}
