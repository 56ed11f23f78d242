//! Reads a DCFG and its DCFG-trace from any producer, decodes every thread's edge sequence
//! (spec section 3.7) and checks the pair against itself: node counts against edge counts,
//! instruction counts, routine dominator trees and loops, and the trace's chunks against
//! the graph's per-thread counts. Tables are read by their headers, integers as numbers or
//! hex strings, as the spec asks.
//!
//! Both files are read as they come, never held whole (`json`): the DCFG into its graph,
//! which the checks need, then the trace in one pass (`trace_doc`), its chunks decoded by
//! workers in parallel and judged, and their blocks written, in the trace's order
//! (`decode`). Memory is the graph's and that of the few chunks in flight, whatever the
//! trace's length.

mod dcfg_doc;
mod decode;
mod json;
mod trace_doc;

use crate::dcfg::transitions::TableError;
use crate::program::dominators::DomTree;
use std::collections::{HashMap, HashSet};
use std::io::Read;

/// What is wrong with a DCFG or DCFG-trace.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A value that should be an integer (a number or a C-style string) is not.
    #[error("{0} is not an integer")]
    NotInteger(String),
    /// A number that is negative or not whole.
    #[error("{0} is not a non-negative integer")]
    NotUnsigned(String),
    /// A part of the document that is not shaped as the format says.
    #[error("{what} {problem}")]
    Shape { what: String, problem: &'static str },
    /// A table row without a column the format requires.
    #[error("{what}: a row has no {column}")]
    MissingColumn { what: String, column: String },
    /// A node or edge id defined twice.
    #[error("{what}: {item} id {id} is used twice")]
    Duplicate { what: String, item: &'static str, id: u64 },
    /// An edge whose type is not among the EDGE_TYPES.
    #[error("{what}: edge {edge} has unknown type {ty}")]
    UnknownEdgeType { what: String, edge: u64, ty: u64 },
    /// An edge naming a node that is not defined.
    #[error("{what}: edge {edge} names node {node}, which is not defined")]
    UnknownNode { what: String, edge: u64, node: u64 },
    /// Counts that do not agree with each other (node and edge counts, instruction counts).
    #[error("{what}: {detail}")]
    Counts { what: String, detail: String },
    /// A routine whose nodes, dominator tree or loops are inconsistent.
    #[error("{what}: {detail}")]
    Routine { what: String, detail: String },
    /// A trace process the DCFG has no (further) process for.
    #[error("{what}: not in the DCFG")]
    UnknownProcess { what: String },
    /// A transition table the trace's sequences cannot be decoded with, or a sequence that
    /// does not decode.
    #[error("{what}: {source}")]
    Decode { what: String, source: TableError },
    /// A decoded edge that is not in the DCFG.
    #[error("{what} thread {thread}: edge {edge} is not in the DCFG")]
    UnknownEdge { what: String, thread: u64, edge: u64 },
    /// A decoded edge that does not leave the node the edge before it reached.
    #[error("{what} thread {thread}: edge {edge} leaves node {src}, the last edge reached {reached}")]
    Discontinuous { what: String, thread: u64, edge: u64, src: u64, reached: u64 },
    /// A file that is not JSON (or cannot be read).
    #[error("not JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// Counts whose sum or product does not fit 64 bits.
    #[error("{0}: counts overflow 64 bits")]
    Overflow(String),
    /// An edge id that does not fit the 32 bits edge ids have.
    #[error("{0}: id {1} does not fit 32 bits")]
    BigId(String, u64),
    /// A chunk claiming more edges than the DCFG leaves its thread.
    #[error("{what} thread {thread}: a chunk's EDGE_COUNT {count} exceeds the {left} edge executions the DCFG leaves the thread")]
    EdgeCount { what: String, thread: u64, count: u64, left: u64 },
    /// A THREAD_ID the DCFG lacks, or one traced twice.
    #[error("{what}: THREAD_ID {thread} {why}")]
    Thread { what: String, thread: u64, why: &'static str },
}

fn shape(what: impl Into<String>, problem: &'static str) -> CheckError {
    CheckError::Shape { what: what.into(), problem }
}

fn disagree<T>(what: &str, detail: String) -> Result<T, CheckError> {
    Err(CheckError::Counts { what: what.to_string(), detail })
}

fn routine(what: &str, detail: String) -> CheckError {
    CheckError::Routine { what: what.to_string(), detail }
}

/// `a + b`, or the overflow named by `what`.
fn add(a: u64, b: u64, what: &str) -> Result<u64, CheckError> {
    a.checked_add(b).ok_or_else(|| CheckError::Overflow(what.to_string()))
}

/// `a * b`, or the overflow named by `what`.
fn mul(a: u64, b: u64, what: &str) -> Result<u64, CheckError> {
    a.checked_mul(b).ok_or_else(|| CheckError::Overflow(what.to_string()))
}

/// The sum of counts, or the overflow named by `what`.
fn sum(counts: impl IntoIterator<Item = u64>, what: &str) -> Result<u64, CheckError> {
    counts.into_iter().try_fold(0u64, |s, c| add(s, c, what))
}

/// An edge id: an integer that fits 32 bits.
fn id32(n: u64, what: &str) -> Result<u32, CheckError> {
    u32::try_from(n).map_err(|_| CheckError::BigId(what.to_string(), n))
}

/// A node of a checked process.
#[derive(Clone, Debug)]
pub struct NodeData {
    pub addr: u64,
    pub instrs: u64,
    pub count: u64,
}

/// An edge of a checked process.
#[derive(Clone, Debug)]
pub struct EdgeData {
    pub src: u64,
    pub dst: u64,
    pub ty: String,
    pub per_thread: PerThread,
}

/// An edge's executions by thread, as its COUNT_PER_THREAD lists them: the threads that
/// took it, and how often. A process of many threads takes most edges on few of them, and
/// held whole, the edges-by-threads table was most of its DCFG's memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerThread {
    /// The threads listed.
    len: usize,
    /// (thread, executions) where they are not zero, by thread.
    taken: Vec<(usize, u64)>,
}

impl PerThread {
    /// The executions of `counts`, thread by thread.
    pub fn new(counts: &[u64]) -> PerThread {
        PerThread { len: counts.len(), taken: counts.iter().copied().enumerate().filter(|&(_, c)| c > 0).collect() }
    }

    /// How many threads are listed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Thread `t`'s executions (none if `t` is not listed).
    pub fn get(&self, t: usize) -> u64 {
        self.taken.binary_search_by_key(&t, |&(t, _)| t).map_or(0, |i| self.taken[i].1)
    }

    /// The threads that took the edge, by thread, and how often.
    pub fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.taken.iter().copied()
    }
}

/// One process of a DCFG, read and checked.
#[derive(Debug)]
pub struct ProcessData {
    pub pid: u64,
    pub instr_per_thread: Vec<u64>,
    pub nodes: HashMap<u64, NodeData>,
    pub edges: HashMap<u64, EdgeData>,
    pub special: HashMap<u64, String>,
}

/// What a check found: per process, the counts checked and the decoded block sequences.
#[derive(Debug, Default)]
pub struct Report {
    pub processes: usize,
    pub nodes: usize,
    pub edges: usize,
    pub routines: usize,
    pub loops: usize,
    pub decoded_edges: u64,
}

/// Reads and checks a DCFG.
pub fn read_dcfg(input: impl Read, report: &mut Report) -> Result<Vec<ProcessData>, CheckError> {
    let doc = dcfg_doc::read(input)?;
    let procs = doc.processes.ok_or_else(|| shape("the DCFG", "has no PROCESSES"))?;
    let mut out = Vec::new();
    for (pid, pr) in procs {
        let what = format!("process {pid}");
        let per = pr.per_thread;
        let per_total = sum(per.iter().copied(), &format!("{what} INSTR_COUNT_PER_THREAD"))?;
        if let Some(total) = pr.instr_count {
            if total != per_total {
                return disagree(&what, format!("INSTR_COUNT {total} is not the sum of INSTR_COUNT_PER_THREAD"));
            }
        }
        let mut nodes: HashMap<u64, NodeData> = HashMap::new();
        let mut routines_of = Vec::new();
        for (base, im) in pr.images {
            for b in im.blocks {
                let id = b.id;
                let n = NodeData { addr: add(base, b.offset, &format!("{what} node {id}'s address"))?, instrs: b.instrs, count: b.count };
                if doc.special.contains_key(&id) || nodes.insert(id, n).is_some() {
                    return Err(CheckError::Duplicate { what, item: "node", id });
                }
            }
            routines_of.extend(im.routines);
        }
        let mut edges: HashMap<u64, EdgeData> = HashMap::new();
        for r in pr.edges {
            let id = r.id;
            let e = EdgeData {
                src: r.src,
                dst: r.dst,
                ty: doc.types.get(&r.ty).cloned().ok_or_else(|| CheckError::UnknownEdgeType { what: what.clone(), edge: id, ty: r.ty })?,
                per_thread: r.per_thread,
            };
            for end in [e.src, e.dst] {
                if !nodes.contains_key(&end) && !doc.special.contains_key(&end) {
                    return Err(CheckError::UnknownNode { what, edge: id, node: end });
                }
            }
            if edges.insert(id, e).is_some() {
                return Err(CheckError::Duplicate { what, item: "edge", id });
            }
        }
        // Counts: a node's COUNT is the sum of its incoming and of its outgoing edges.
        let (mut inc, mut outg): (HashMap<u64, u64>, HashMap<u64, u64>) = Default::default();
        let mut per_thread_instrs = vec![0u64; per.len()];
        let ovf = format!("{what} edge counts");
        for e in edges.values() {
            let c = sum(e.per_thread.iter().map(|(_, c)| c), &ovf)?;
            let i = inc.entry(e.dst).or_insert(0);
            *i = add(*i, c, &ovf)?;
            let o = outg.entry(e.src).or_insert(0);
            *o = add(*o, c, &ovf)?;
            if let Some(n) = nodes.get(&e.src) {
                let threads = per_thread_instrs.len();
                for (t, c) in e.per_thread.iter().take_while(|&(t, _)| t < threads) {
                    per_thread_instrs[t] = add(per_thread_instrs[t], mul(n.instrs, c, &ovf)?, &ovf)?;
                }
                if e.per_thread.len() > threads {
                    return disagree(&what, format!("edge counts for thread {threads}, which INSTR_COUNT_PER_THREAD lacks"));
                }
            }
        }
        for (id, n) in &nodes {
            let (i, o) = (inc.get(id).copied().unwrap_or(0), outg.get(id).copied().unwrap_or(0));
            if i != n.count || o != n.count {
                return disagree(&what, format!("node {id} has COUNT {} but {i} incoming and {o} outgoing edge executions", n.count));
            }
        }
        let ovf = format!("{what} NUM_INSTRS x COUNT");
        let total = nodes.values().try_fold(0u64, |s, n| add(s, mul(n.instrs, n.count, &ovf)?, &ovf))?;
        if total != per_total {
            return disagree(&what, format!("NUM_INSTRS x COUNT sums to {total}, INSTR_COUNT is {per_total}"));
        }
        if per_thread_instrs != per {
            return disagree(
                &what,
                format!("instructions per thread from the edges {per_thread_instrs:?}, INSTR_COUNT_PER_THREAD {per:?}"),
            );
        }
        // Routines: every node in exactly one; the IDOM tree rooted at the entry; loop heads
        // dominate their loops.
        let mut seen: HashSet<u64> = HashSet::new();
        for dcfg_doc::Routine { entry, idoms, loops: lps } in &routines_of {
            let local: HashMap<u64, usize> = idoms.iter().enumerate().map(|(i, (n, _))| (*n, i)).collect();
            let mut idom = vec![None; idoms.len()];
            for (i, (n, d)) in idoms.iter().enumerate() {
                if !seen.insert(*n) {
                    return Err(routine(&what, format!("node {n} is in two routines")));
                }
                let d = *local.get(d).ok_or_else(|| routine(&what, format!("node {n}'s IDOM {d} is outside its routine")))?;
                idom[i] = Some(d);
                if (*n == *entry) != (d == i) {
                    return Err(routine(&what, format!("routine {entry}: node {n} has IDOM {}", idoms[d].0)));
                }
            }
            let root = *local.get(entry).ok_or_else(|| routine(&what, format!("routine entry {entry} is not among its nodes")))?;
            // Every IDOM chain reaches the entry without a cycle; then dominance is two
            // comparisons (a walk per loop member would be quadratic on long chains).
            let tree = DomTree::new(&idom, root).map_err(|stray| {
                routine(&what, format!("routine {entry}: the IDOM chain of node {} does not reach the entry", idoms[stray].0))
            })?;
            for (head, members) in lps {
                let h = *local.get(head).ok_or_else(|| routine(&what, format!("loop head {head} is outside its routine")))?;
                for m in members {
                    let mi = *local.get(m).ok_or_else(|| routine(&what, format!("loop {head}: node {m} is outside its routine")))?;
                    if !tree.dominates(h, mi) {
                        return Err(routine(&what, format!("loop head {head} does not dominate its node {m}")));
                    }
                }
                report.loops += 1;
            }
            report.routines += 1;
        }
        if !routines_of.is_empty() {
            if let Some(n) = nodes.keys().find(|n| !seen.contains(n)) {
                return Err(routine(&what, format!("node {n} is in no routine")));
            }
        }
        report.processes += 1;
        report.nodes += nodes.len();
        report.edges += edges.len();
        out.push(ProcessData { pid, instr_per_thread: per, nodes, edges, special: doc.special.clone() });
    }
    Ok(out)
}

/// Renders one decoded block into a buffer: (buffer, pid, thread, address, instructions).
pub type Render = dyn Fn(&mut Vec<u8>, u64, u64, u64, u64) + Sync;

/// Takes the rendered blocks' text, in order.
pub type Emit<'a> = dyn FnMut(&[u8]) + 'a;

/// Where a checked trace's executed blocks go: the workers render each chunk's blocks with
/// `render`, and `emit` receives the text in the trace's order (per process row, per
/// thread row, its chunks in order).
pub struct Blocks<'a> {
    pub render: &'a Render,
    pub emit: &'a mut Emit<'a>,
}

/// `<pid> <thread> <address> <instructions>`, the address in hex: a block as
/// `dep dcfg --check --blocks` prints it.
pub fn block_line(out: &mut Vec<u8>, pid: u64, thread: u64, addr: u64, instrs: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(pid).as_bytes());
    out.push(b' ');
    out.extend_from_slice(b.format(thread).as_bytes());
    out.extend_from_slice(b" 0x");
    // The digits `{:#x}` writes: none of the leading zeros, but one for zero.
    let digits = (67 - (addr | 1).leading_zeros()) / 4;
    out.extend((0..digits).rev().map(|d| b"0123456789abcdef"[(addr >> (4 * d)) as usize & 15]));
    out.push(b' ');
    out.extend_from_slice(b.format(instrs).as_bytes());
    out.push(b'\n');
}

/// Reads a DCFG-trace and decodes it against its DCFG's processes, checking every chunk and
/// count, with `workers` threads decoding chunks; `blocks`, if given, receives each
/// process's threads' executed blocks in order. The trace is read once, as it comes: what
/// is held is the processes' transition tables and a few chunks per worker.
pub fn read_trace(
    input: impl Read + Send,
    procs: &[ProcessData],
    workers: usize,
    report: &mut Report,
    blocks: Option<Blocks>,
) -> Result<(), CheckError> {
    let workers = workers.max(1);
    // The reader runs ahead of the chunk being judged by at most these chunks (and those
    // the workers hold): what bounds the trace's memory.
    let (jobs_tx, jobs_rx) = crossbeam::channel::bounded(workers);
    let (order_tx, order_rx) = crossbeam::channel::bounded(2 * workers);
    // Dropped when the judging ends, early or not: a reader or worker waiting to send sees it.
    let (stop_tx, stop_rx) = crossbeam::channel::bounded::<()>(0);
    let (render, emit) = match blocks {
        Some(b) => (Some(b.render), Some(b.emit)),
        None => (None, None),
    };
    std::thread::scope(|s| {
        let stop = &stop_rx;
        let mut threads = vec![s.spawn(move || trace_doc::read(input, procs, jobs_tx, order_tx, stop))];
        for _ in 0..workers {
            let jobs = jobs_rx.clone();
            threads.push(s.spawn(move || decode::work(jobs, render, stop)));
        }
        drop(jobs_rx);
        let judged = decode::judge(order_rx, report, emit);
        drop(stop_tx);
        // Joined here, not left to the scope, whose end waits for the closures only: a
        // joined thread has also run its thread-locals' destructors (crossbeam's channel
        // context among them), so nothing of it outlives this call. Left to the scope, the
        // fuzzer's leak check now and then found those still being freed.
        for t in threads {
            if let Err(panic) = t.join() {
                std::panic::resume_unwind(panic);
            }
        }
        judged
    })
}
