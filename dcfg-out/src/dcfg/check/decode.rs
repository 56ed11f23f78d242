//! Decoding a trace's chunks in parallel and judging them in order. Workers decode each
//! chunk on its own (its first edge's link to the chunk before is the one thing they cannot
//! see), counting its edges and rendering its blocks in pieces; the judge takes the reader's
//! items in the trace's order, each chunk's pieces as they come, links the chunks and sums
//! each thread's counts, so the first problem named and the blocks written are those a
//! reading in order would give.

use super::{disagree, Emit, Render, Report};
use crate::dcfg::check::{CheckError, ProcessData};
use crate::dcfg::seqcode::BitReader;
use crate::dcfg::transitions::Decoder;
use crossbeam::channel::{Receiver, Sender, TryRecvError};
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::Arc;

/// A decoded next edge the DCFG does not have.
pub const UNKNOWN: u32 = u32::MAX;
/// Pieces of a chunk's blocks that may wait for the judge: a worker ahead of the chunk being
/// judged stops there, so memory does not grow with a chunk's length.
pub const PIECES: usize = 8;
/// The text of blocks in a piece.
const PIECE_BYTES: usize = 128 << 10;

/// A process as its chunks are decoded: its edges numbered densely (by id) and its table
/// compiled over those numbers, so a decoded edge costs array reads, not hashes.
pub struct Process<'p> {
    pub pid: u64,
    /// "trace of process PID", for messages.
    pub what: String,
    pub data: &'p ProcessData,
    pub edges: Vec<Edge>,
    /// Per dense number, the edge's id.
    pub ids: Vec<u64>,
    pub index: FxHashMap<u64, u32>,
    /// Next edges as (dense number or UNKNOWN, id).
    pub decoder: Decoder<(u32, u32)>,
    pub dict: HashMap<String, String>,
}

/// An edge as decoding needs it.
pub struct Edge {
    pub src: u64,
    pub dst: u64,
    /// The instructions of its source node (none for a special node).
    pub src_instrs: u64,
    /// Whether its target is a block (not a special node), and the block's address and
    /// instructions.
    pub block: bool,
    pub addr: u64,
    pub instrs: u64,
}

/// What the reader sends the judge, in the trace's order.
pub enum Item<'p> {
    /// A thread's chunks follow.
    Thread { process: Arc<Process<'p>>, tid: u64 },
    /// A chunk, `count` edges from edge `first`, whose worker sends `pieces`.
    Chunk { pieces: Receiver<Piece>, first: u32, count: u64 },
    /// The thread's chunks are over: they claimed `claimed` edges and `instrs` instructions,
    /// of the `edges` the DCFG gives the thread.
    ThreadEnd { claimed: u64, edges: u64, instrs: u64 },
    /// A problem the reader found.
    Fail(CheckError),
}

/// A chunk for a worker.
pub struct Job<'p> {
    pub process: Arc<Process<'p>>,
    pub tid: u64,
    pub first: u32,
    pub count: u64,
    /// Its INSTR_COUNT.
    pub instrs: u64,
    pub seq: String,
    pub pieces: Sender<Piece>,
}

/// What a worker sends of a chunk, in order.
pub enum Piece {
    /// The first edge was decoded (from node `src`): its block's text.
    Start { src: u64, text: Vec<u8> },
    /// More blocks' text.
    Blocks(Vec<u8>),
    /// The chunk is decoded, to its end or to its first problem.
    Done(Done),
}

/// A decoded chunk.
pub struct Done {
    /// The node its last edge reached.
    last: u64,
    /// How often it took each edge (by dense number).
    counts: Vec<(u32, u64)>,
    error: Option<CheckError>,
}

/// Sends `v` unless `stop` says the judging has ended first; whether it was sent.
pub fn send<T>(tx: &Sender<T>, v: T, stop: &Receiver<()>) -> bool {
    crossbeam::channel::select! {
        send(tx, v) -> r => r.is_ok(),
        recv(stop) -> _ => false,
    }
}

/// Whether the judging has ended (its end drops `stop`'s sender).
fn stopped(stop: &Receiver<()>) -> bool {
    matches!(stop.try_recv(), Err(TryRecvError::Disconnected))
}

/// A worker: decodes the chunks of `jobs` until there are none, or the judging has ended.
pub fn work(jobs: Receiver<Job>, render: Option<&Render>, stop: &Receiver<()>) {
    // Per dense edge, the current chunk's count; zero between chunks.
    let mut counts: Vec<u64> = Vec::new();
    for job in jobs {
        // Taken and dropped once the judging has ended, so that the reader is not kept waiting.
        if stopped(stop) {
            continue;
        }
        if counts.len() < job.process.edges.len() {
            counts.resize(job.process.edges.len(), 0);
        }
        let mut c =
            Chunk { p: &job.process, tid: job.tid, counts: &mut counts, touched: Vec::new(), instrs: 0, last: 0, out: Vec::new(), render };
        let r = c.decode(&job, stop);
        let taken: Vec<(u32, u64)> = c.touched.iter().map(|&e| (e, std::mem::take(&mut c.counts[e as usize]))).collect();
        let error = match r {
            Err(Halt::Stopped) => continue,
            Err(Halt::Fail(e)) => Some(e),
            Ok(()) if c.instrs != job.instrs => Some(CheckError::Counts {
                what: format!("{} thread {}", c.p.what, c.tid),
                detail: format!("a chunk's INSTR_COUNT is {}, its edges' source nodes hold {}", job.instrs, c.instrs),
            }),
            Ok(()) => None,
        };
        let last = c.last;
        if !c.out.is_empty() && !send(&job.pieces, Piece::Blocks(c.out), stop) {
            continue;
        }
        send(&job.pieces, Piece::Done(Done { last, counts: taken, error }), stop);
    }
}

/// Why a chunk's decoding ended early.
enum Halt {
    Fail(CheckError),
    /// The judging has ended.
    Stopped,
}

/// A chunk being decoded.
struct Chunk<'a, 'p> {
    p: &'a Process<'p>,
    tid: u64,
    counts: &'a mut [u64],
    /// The edges counted, each once.
    touched: Vec<u32>,
    instrs: u64,
    /// The node the last edge reached.
    last: u64,
    out: Vec<u8>,
    render: Option<&'a Render>,
}

impl Chunk<'_, '_> {
    /// Decodes the chunk: its first edge, then the edges its sequence names (spec 3.7.2).
    fn decode(&mut self, job: &Job, stop: &Receiver<()>) -> Result<(), Halt> {
        let (p, tid) = (self.p, self.tid);
        let unknown = |edge: u32| Halt::Fail(CheckError::UnknownEdge { what: p.what.clone(), thread: tid, edge: edge as u64 });
        let Some(&first) = p.index.get(&(job.first as u64)) else { return Err(unknown(job.first)) };
        self.edge(first);
        if !send(&job.pieces, Piece::Start { src: p.edges[first as usize].src, text: std::mem::take(&mut self.out) }, stop) {
            return Err(Halt::Stopped);
        }
        let mut bits = BitReader::new(&job.seq, &p.dict);
        let (mut done, mut current, mut state) = (1u64, job.first, first);
        let mut steps = 0u32;
        while done < job.count {
            let next = p
                .decoder
                .step(state as usize, current, &mut bits)
                .map_err(|source| Halt::Fail(CheckError::Decode { what: format!("{} thread {tid}", p.what), source }))?;
            let take = next.len().min((job.count - done) as usize);
            for &(e, id) in &next[..take] {
                if e == UNKNOWN {
                    return Err(unknown(id));
                }
                let ed = &p.edges[e as usize];
                if ed.src != self.last {
                    return Err(Halt::Fail(CheckError::Discontinuous {
                        what: p.what.clone(),
                        thread: tid,
                        edge: id as u64,
                        src: ed.src,
                        reached: self.last,
                    }));
                }
                self.edge(e);
                if self.out.len() >= PIECE_BYTES && !send(&job.pieces, Piece::Blocks(std::mem::take(&mut self.out)), stop) {
                    return Err(Halt::Stopped);
                }
            }
            done += take as u64;
            // The loop goes on only if the whole row was taken: its last edge is known.
            if let Some(&(e, id)) = next.last() {
                (state, current) = (e, id);
            }
            // A long chunk gives way soon once the judging has ended.
            steps = steps.wrapping_add(1);
            if steps & 0xffff == 0 && stopped(stop) {
                return Err(Halt::Stopped);
            }
        }
        Ok(())
    }

    /// Takes edge `e` (dense), which follows the last.
    #[inline(always)]
    fn edge(&mut self, e: u32) {
        let ed = &self.p.edges[e as usize];
        let c = &mut self.counts[e as usize];
        if *c == 0 {
            self.touched.push(e);
        }
        *c += 1;
        // Cannot overflow unless the DCFG's checked sums did.
        self.instrs = self.instrs.saturating_add(ed.src_instrs);
        if let (Some(render), true) = (self.render, ed.block) {
            render(&mut self.out, self.p.pid, self.tid, ed.addr, ed.instrs);
        }
        self.last = ed.dst;
    }
}

/// The thread being judged.
struct Judged<'p> {
    process: Arc<Process<'p>>,
    tid: u64,
    /// The node the last chunk's last edge reached.
    last: Option<u64>,
}

/// Judges the reader's items in order, emitting each chunk's blocks: the first problem, if any.
pub fn judge(order: Receiver<Item>, report: &mut Report, mut emit: Option<&mut Emit>) -> Result<(), CheckError> {
    // Per dense edge of the process, the thread's count so far, and the edges counted.
    let mut counts: Vec<u64> = Vec::new();
    let mut touched: Vec<u32> = Vec::new();
    let mut judged: Option<Judged> = None;
    for item in order {
        match item {
            Item::Fail(e) => return Err(e),
            Item::Thread { process, tid } => {
                if !judged.as_ref().is_some_and(|j| Arc::ptr_eq(&j.process, &process)) {
                    counts = vec![0; process.edges.len()];
                }
                judged = Some(Judged { process, tid, last: None });
            }
            Item::Chunk { pieces, first, count } => {
                // (A thread's item comes before its chunks.)
                let Some(j) = &mut judged else { continue };
                for piece in pieces {
                    match piece {
                        Piece::Start { src, text } => {
                            if let Some(reached) = j.last.filter(|&r| r != src) {
                                let (what, thread, edge) = (j.process.what.clone(), j.tid, first as u64);
                                return Err(CheckError::Discontinuous { what, thread, edge, src, reached });
                            }
                            if let Some(emit) = emit.as_mut() {
                                emit(&text);
                            }
                        }
                        Piece::Blocks(text) => {
                            if let Some(emit) = emit.as_mut() {
                                emit(&text);
                            }
                        }
                        Piece::Done(d) => {
                            if let Some(e) = d.error {
                                return Err(e);
                            }
                            for (e, c) in d.counts {
                                let n = &mut counts[e as usize];
                                if *n == 0 {
                                    touched.push(e);
                                }
                                *n = n.saturating_add(c);
                            }
                            j.last = Some(d.last);
                            report.decoded_edges = report.decoded_edges.saturating_add(count);
                            break;
                        }
                    }
                }
            }
            Item::ThreadEnd { claimed, edges, instrs } => {
                let Some(j) = &judged else { continue };
                let (p, tid) = (&j.process, j.tid);
                // The decoded edges are exactly this thread's edge counts: those decoded
                // agree, and they add up to all the thread's (so the rest count none). Work in
                // the edges decoded, not in edges x threads.
                let want = |e: usize| p.data.edges.get(&p.ids[e]).map_or(0, |d| d.per_thread.get(tid as usize));
                let wrong = touched.iter().map(|&e| e as usize).find(|&e| counts[e] != want(e));
                let wrong =
                    wrong.or_else(|| (claimed != edges).then(|| (0..p.ids.len()).find(|&e| counts[e] == 0 && want(e) > 0)).flatten());
                if let Some(e) = wrong {
                    let (id, got, want) = (p.ids[e], counts[e], want(e));
                    return disagree(
                        &format!("{} thread {tid}", p.what),
                        format!("edge {id} decoded {got} times, COUNT_PER_THREAD says {want}"),
                    );
                }
                if instrs != p.data.instr_per_thread.get(tid as usize).copied().unwrap_or(0) {
                    return disagree(
                        &format!("{} thread {tid}", p.what),
                        format!("the chunks hold {instrs} instructions, INSTR_COUNT_PER_THREAD another count"),
                    );
                }
                for e in touched.drain(..) {
                    counts[e as usize] = 0;
                }
            }
        }
    }
    Ok(())
}
