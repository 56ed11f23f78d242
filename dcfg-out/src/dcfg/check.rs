//! Reads a DCFG and its DCFG-trace from any producer, decodes every thread's edge sequence
//! (spec section 3.7) and checks the pair against itself: node counts against edge counts,
//! instruction counts, routine dominator trees and loops, and the trace's chunks against
//! the graph's per-thread counts. Tables are read by their headers, integers as numbers or
//! hex strings, as the spec asks.

use crate::dcfg::seqcode::BitReader;
use crate::dcfg::transitions::{Table, TableError};
use crate::program::dominators::DomTree;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

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

/// An integer: a JSON number or a C-style string ("0x400000", "12").
pub fn int(v: &Value) -> Result<u64, CheckError> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| CheckError::NotUnsigned(n.to_string())),
        Value::String(s) => {
            let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            };
            r.map_err(|_| CheckError::NotInteger(format!("{s:?}")))
        }
        _ => Err(CheckError::NotInteger(v.to_string())),
    }
}

/// A table (spec 1.2.2): its rows, each a map from header to value.
pub fn table<'a>(v: &'a Value, what: &str) -> Result<Vec<HashMap<&'a str, &'a Value>>, CheckError> {
    let rows = v.as_array().ok_or_else(|| shape(what, "is not a table"))?;
    let Some((head, rows)) = rows.split_first() else { return Err(shape(what, "has no header")) };
    let head: Vec<&str> = head
        .as_array()
        .and_then(|h| h.iter().map(|c| c.as_str()).collect::<Option<Vec<_>>>())
        .ok_or_else(|| shape(what, "has a header that is not a row of strings"))?;
    rows.iter()
        .map(|r| {
            let r = r.as_array().ok_or_else(|| shape(what, "has a row that is not an array"))?;
            if r.len() > head.len() {
                return Err(shape(what, "has a row longer than its header"));
            }
            Ok(head.iter().copied().zip(r).collect())
        })
        .collect()
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
fn sum<'a>(counts: impl IntoIterator<Item = &'a u64>, what: &str) -> Result<u64, CheckError> {
    counts.into_iter().try_fold(0u64, |s, &c| add(s, c, what))
}

/// An edge id: an integer that fits 32 bits.
fn id32(v: &Value, what: &str) -> Result<u32, CheckError> {
    let n = int(v)?;
    u32::try_from(n).map_err(|_| CheckError::BigId(what.to_string(), n))
}

fn col<'a>(row: &HashMap<&str, &'a Value>, c: &str, what: &str) -> Result<&'a Value, CheckError> {
    row.get(c).copied().ok_or_else(|| CheckError::MissingColumn { what: what.to_string(), column: c.to_string() })
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
    pub per_thread: Vec<u64>,
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
pub fn read_dcfg(doc: &Value, report: &mut Report) -> Result<Vec<ProcessData>, CheckError> {
    let mut types: HashMap<u64, String> = HashMap::new();
    if let Some(t) = doc.get("EDGE_TYPES") {
        for r in table(t, "EDGE_TYPES")? {
            let name = col(&r, "EDGE_TYPE", "EDGE_TYPES")?.as_str().ok_or_else(|| shape("EDGE_TYPE", "is not a string"))?;
            types.insert(int(col(&r, "EDGE_TYPE_ID", "EDGE_TYPES")?)?, name.to_string());
        }
    }
    let mut special = HashMap::new();
    if let Some(t) = doc.get("SPECIAL_NODES") {
        for r in table(t, "SPECIAL_NODES")? {
            let name = col(&r, "NODE_NAME", "SPECIAL_NODES")?.as_str().unwrap_or("").to_string();
            special.insert(int(col(&r, "NODE_ID", "SPECIAL_NODES")?)?, name);
        }
    }
    let procs = doc.get("PROCESSES").ok_or_else(|| shape("the DCFG", "has no PROCESSES"))?;
    let mut out = Vec::new();
    for pr in table(procs, "PROCESSES")? {
        let pid = int(col(&pr, "PROCESS_ID", "PROCESSES")?)?;
        let data = col(&pr, "PROCESS_DATA", "PROCESSES")?;
        let what = format!("process {pid}");
        let per: Vec<u64> = match data.get("INSTR_COUNT_PER_THREAD") {
            Some(Value::Array(a)) => a.iter().map(int).collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        let per_total = sum(&per, &format!("{what} INSTR_COUNT_PER_THREAD"))?;
        if let Some(total) = data.get("INSTR_COUNT") {
            if int(total)? != per_total {
                return disagree(&what, format!("INSTR_COUNT {} is not the sum of INSTR_COUNT_PER_THREAD", int(total)?));
            }
        }
        let mut nodes: HashMap<u64, NodeData> = HashMap::new();
        let mut routines_of: Vec<(u64, Vec<(u64, u64)>, Vec<(u64, Vec<u64>)>)> = Vec::new();
        if let Some(images) = data.get("IMAGES") {
            for im in table(images, &format!("{what} IMAGES"))? {
                let base = int(col(&im, "LOAD_ADDR", "IMAGES")?)?;
                let Some(d) = im.get("IMAGE_DATA") else { continue };
                if let Some(b) = d.get("BASIC_BLOCKS") {
                    for r in table(b, "BASIC_BLOCKS")? {
                        let id = int(col(&r, "NODE_ID", "BASIC_BLOCKS")?)?;
                        let n = NodeData {
                            addr: add(base, int(col(&r, "ADDR_OFFSET", "BASIC_BLOCKS")?)?, &format!("{what} node {id}'s address"))?,
                            instrs: int(col(&r, "NUM_INSTRS", "BASIC_BLOCKS")?)?,
                            count: r.get("COUNT").map(|c| int(c)).transpose()?.unwrap_or(0),
                        };
                        if special.contains_key(&id) || nodes.insert(id, n).is_some() {
                            return Err(CheckError::Duplicate { what, item: "node", id });
                        }
                    }
                }
                if let Some(rt) = d.get("ROUTINES") {
                    for r in table(rt, "ROUTINES")? {
                        let entry = int(col(&r, "ENTRY_NODE_ID", "ROUTINES")?)?;
                        let mut idoms = Vec::new();
                        for n in table(col(&r, "NODES", "ROUTINES")?, "NODES")? {
                            idoms.push((int(col(&n, "NODE_ID", "NODES")?)?, int(col(&n, "IDOM_NODE_ID", "NODES")?)?));
                        }
                        let mut lps = Vec::new();
                        if let Some(l) = r.get("LOOPS") {
                            for l in table(l, "LOOPS")? {
                                let head = int(col(&l, "LOOP_HEAD_NODE_ID", "LOOPS")?)?;
                                let members = col(&l, "LOOP_NODE_IDS", "LOOPS")?
                                    .as_array()
                                    .ok_or_else(|| shape("LOOP_NODE_IDS", "is not an array"))?
                                    .iter()
                                    .map(int)
                                    .collect::<Result<Vec<_>, _>>()?;
                                lps.push((head, members));
                            }
                        }
                        routines_of.push((entry, idoms, lps));
                    }
                }
            }
        }
        let mut edges: HashMap<u64, EdgeData> = HashMap::new();
        if let Some(e) = data.get("EDGES") {
            for r in table(e, "EDGES")? {
                let id = int(col(&r, "EDGE_ID", "EDGES")?)?;
                let t = int(col(&r, "EDGE_TYPE_ID", "EDGES")?)?;
                let per: Vec<u64> = match r.get("COUNT_PER_THREAD") {
                    Some(Value::Array(a)) => a.iter().map(int).collect::<Result<_, _>>()?,
                    _ => Vec::new(),
                };
                let e = EdgeData {
                    src: int(col(&r, "SOURCE_NODE_ID", "EDGES")?)?,
                    dst: int(col(&r, "TARGET_NODE_ID", "EDGES")?)?,
                    ty: types.get(&t).cloned().ok_or_else(|| CheckError::UnknownEdgeType { what: what.clone(), edge: id, ty: t })?,
                    per_thread: per,
                };
                for end in [e.src, e.dst] {
                    if !nodes.contains_key(&end) && !special.contains_key(&end) {
                        return Err(CheckError::UnknownNode { what, edge: id, node: end });
                    }
                }
                if edges.insert(id, e).is_some() {
                    return Err(CheckError::Duplicate { what, item: "edge", id });
                }
            }
        }
        // Counts: a node's COUNT is the sum of its incoming and of its outgoing edges.
        let (mut inc, mut outg): (HashMap<u64, u64>, HashMap<u64, u64>) = Default::default();
        let mut per_thread_instrs = vec![0u64; per.len()];
        let ovf = format!("{what} edge counts");
        for e in edges.values() {
            let c = sum(&e.per_thread, &ovf)?;
            let i = inc.entry(e.dst).or_insert(0);
            *i = add(*i, c, &ovf)?;
            let o = outg.entry(e.src).or_insert(0);
            *o = add(*o, c, &ovf)?;
            if let Some(n) = nodes.get(&e.src) {
                for (t, c) in e.per_thread.iter().enumerate() {
                    if t >= per_thread_instrs.len() {
                        return disagree(&what, format!("edge counts for thread {t}, which INSTR_COUNT_PER_THREAD lacks"));
                    }
                    per_thread_instrs[t] = add(per_thread_instrs[t], mul(n.instrs, *c, &ovf)?, &ovf)?;
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
        for (entry, idoms, lps) in &routines_of {
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
        out.push(ProcessData { pid, instr_per_thread: per, nodes, edges, special: special.clone() });
    }
    Ok(out)
}

/// Decodes a DCFG-trace against its DCFG's processes, checking every chunk and count;
/// `block` receives each process's thread's executed blocks in order: (pid, thread, address,
/// instructions).
pub fn read_trace(
    doc: &Value,
    procs: &[ProcessData],
    report: &mut Report,
    mut block: impl FnMut(u64, u64, u64, u64),
) -> Result<(), CheckError> {
    let rows = doc.get("PROCESSES").ok_or_else(|| shape("the trace", "has no PROCESSES"))?;
    // An exec'd image keeps its process id: the k-th row of a pid pairs with the k-th.
    let mut by_pid: HashMap<u64, std::collections::VecDeque<&ProcessData>> = HashMap::new();
    for p in procs {
        by_pid.entry(p.pid).or_default().push_back(p);
    }
    for pr in table(rows, "trace PROCESSES")? {
        let pid = int(col(&pr, "PROCESS_ID", "trace PROCESSES")?)?;
        let what = format!("trace of process {pid}");
        let p = by_pid.get_mut(&pid).and_then(|q| q.pop_front()).ok_or_else(|| CheckError::UnknownProcess { what: what.clone() })?;
        // Each thread's edge executions, which bound its chunks' EDGE_COUNTs.
        let mut thread_edges = vec![0u64; p.instr_per_thread.len()];
        for e in p.edges.values() {
            for (t, c) in e.per_thread.iter().enumerate().take(thread_edges.len()) {
                thread_edges[t] = add(thread_edges[t], *c, &format!("{what}: edge counts"))?;
            }
        }
        let mut traced: HashSet<u64> = HashSet::new();
        let dict: HashMap<String, String> = match pr.get("STRING_DICTIONARY") {
            Some(Value::Object(o)) => o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect(),
            _ => HashMap::new(),
        };
        let mut t = Table::default();
        if let Some(tt) = pr.get("TRANSITION_TABLE") {
            for r in table(tt, "TRANSITION_TABLE")? {
                let cur = id32(col(&r, "CURRENT_EDGE_ID", "TRANSITION_TABLE")?, &format!("{what} CURRENT_EDGE_ID"))?;
                let code = col(&r, "TRANSITION_CODE", "TRANSITION_TABLE")?.as_str().unwrap_or("\u{0}");
                let next = col(&r, "NEXT_EDGE_IDS", "TRANSITION_TABLE")?
                    .as_array()
                    .ok_or_else(|| shape("NEXT_EDGE_IDS", "is not an array"))?
                    .iter()
                    .map(|v| id32(v, &format!("{what} NEXT_EDGE_IDS")))
                    .collect::<Result<Vec<_>, _>>()?;
                t.add(cur, code, next).map_err(|source| CheckError::Decode { what: what.clone(), source })?;
            }
        }
        let rows = match pr.get("THREAD_DATA") {
            Some(threads) => table(threads, "THREAD_DATA")?,
            None => Vec::new(),
        };
        for th in rows {
            let tid = int(col(&th, "THREAD_ID", "THREAD_DATA")?)?;
            // A thread the DCFG counts, once: what bounds its work is the DCFG's counts.
            let Some(&edges_of_thread) = usize::try_from(tid).ok().and_then(|t| thread_edges.get(t)) else {
                return Err(CheckError::Thread { what, thread: tid, why: "is not among the DCFG's threads" });
            };
            if !traced.insert(tid) {
                return Err(CheckError::Thread { what, thread: tid, why: "is traced twice" });
            }
            let mut decoded = 0u64;
            let mut counts: HashMap<u64, u64> = HashMap::new();
            let mut expect_preceding = 0u64;
            let mut last_dst: Option<u64> = None;
            for c in table(col(&th, "TRACE_DATA", "THREAD_DATA")?, "TRACE_DATA")? {
                let preceding = int(col(&c, "PRECEDING_INSTR_COUNT", "TRACE_DATA")?)?;
                let instrs = int(col(&c, "INSTR_COUNT", "TRACE_DATA")?)?;
                let n = int(col(&c, "EDGE_COUNT", "TRACE_DATA")?)?;
                if n == 0 {
                    continue;
                }
                if preceding != expect_preceding {
                    return disagree(
                        &format!("{what} thread {tid}"),
                        format!("PRECEDING_INSTR_COUNT {preceding}, the chunks before hold {expect_preceding}"),
                    );
                }
                // Decoding reads no bits through rows of empty codes: only the DCFG's counts
                // bound a chunk's edges.
                let left = edges_of_thread - decoded;
                if n > left {
                    return Err(CheckError::EdgeCount { what, thread: tid, count: n, left });
                }
                decoded += n;
                let first = id32(col(&c, "FIRST_EDGE_ID", "TRACE_DATA")?, &format!("{what} FIRST_EDGE_ID"))?;
                let seq = col(&c, "EDGE_ID_SEQUENCE", "TRACE_DATA")?.as_str().unwrap_or("");
                let mut bits = BitReader::new(seq, &dict);
                let mut chunk_instrs = 0u64;
                let mut failure: Option<CheckError> = None;
                let decoded_chunk = t.decode(first, n, &mut bits, |e| {
                    if failure.is_some() {
                        return;
                    }
                    let Some(ed) = p.edges.get(&(e as u64)) else {
                        failure = Some(CheckError::UnknownEdge { what: what.clone(), thread: tid, edge: e as u64 });
                        return;
                    };
                    if let Some(prev) = last_dst {
                        if ed.src != prev {
                            failure = Some(CheckError::Discontinuous {
                                what: what.clone(),
                                thread: tid,
                                edge: e as u64,
                                src: ed.src,
                                reached: prev,
                            });
                            return;
                        }
                    }
                    *counts.entry(e as u64).or_insert(0) += 1;
                    if let Some(src) = p.nodes.get(&ed.src) {
                        // Cannot overflow unless the DCFG's checked sums did.
                        chunk_instrs = chunk_instrs.saturating_add(src.instrs);
                    }
                    if let Some(dst) = p.nodes.get(&ed.dst) {
                        block(pid, tid, dst.addr, dst.instrs);
                    }
                    last_dst = Some(ed.dst);
                });
                // The first problem found is the one named: an edge the graph lacks stops the
                // sequence making sense before the decoder runs out of rows or bits.
                if let Some(f) = failure {
                    return Err(f);
                }
                decoded_chunk.map_err(|source| CheckError::Decode { what: format!("{what} thread {tid}"), source })?;
                if chunk_instrs != instrs {
                    return disagree(
                        &format!("{what} thread {tid}"),
                        format!("a chunk's INSTR_COUNT is {instrs}, its edges' source nodes hold {chunk_instrs}"),
                    );
                }
                expect_preceding = add(expect_preceding, instrs, &format!("{what} thread {tid} INSTR_COUNT"))?;
                report.decoded_edges = report.decoded_edges.saturating_add(n);
            }
            // The decoded edges are exactly this thread's edge counts: those decoded agree,
            // and they add up to all the thread's (so the rest count none). Work in the edges
            // decoded, not in edges x threads.
            let want = |id: &u64| p.edges.get(id).and_then(|e| e.per_thread.get(tid as usize)).copied().unwrap_or(0);
            let wrong = counts.iter().find(|(id, got)| **got != want(id)).map(|(id, _)| *id);
            let wrong = wrong.or_else(|| {
                (decoded != edges_of_thread).then(|| p.edges.keys().copied().find(|id| !counts.contains_key(id) && want(id) > 0)).flatten()
            });
            if let Some(id) = wrong {
                let (got, want) = (counts.get(&id).copied().unwrap_or(0), want(&id));
                return disagree(&format!("{what} thread {tid}"), format!("edge {id} decoded {got} times, COUNT_PER_THREAD says {want}"));
            }
            if expect_preceding != p.instr_per_thread.get(tid as usize).copied().unwrap_or(0) {
                return disagree(
                    &format!("{what} thread {tid}"),
                    format!("the chunks hold {expect_preceding} instructions, INSTR_COUNT_PER_THREAD another count"),
                );
            }
        }
        // A thread the DCFG saw run but the trace leaves out would pass unchecked.
        if let Some(t) = thread_edges.iter().enumerate().position(|(t, &n)| n > 0 && !traced.contains(&(t as u64))) {
            return Err(CheckError::Thread { what, thread: t as u64, why: "has edge counts in the DCFG but no trace" });
        }
    }
    Ok(())
}
