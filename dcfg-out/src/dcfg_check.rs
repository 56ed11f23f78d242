//! Reads a DCFG and its DCFG-trace from any producer, decodes every thread's edge sequence
//! (spec section 3.7) and checks the pair against itself: node counts against edge counts,
//! instruction counts, routine dominator trees and loops, and the trace's chunks against
//! the graph's per-thread counts. Tables are read by their headers, integers as numbers or
//! hex strings, as the spec asks.

use crate::dominators::dominates;
use crate::seqcode::BitReader;
use crate::transitions::Table;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// What is wrong with a DCFG or DCFG-trace.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CheckError(String);

fn err<T>(msg: impl Into<String>) -> Result<T, CheckError> {
    Err(CheckError(msg.into()))
}

/// An integer: a JSON number or a C-style string ("0x400000", "12").
pub fn int(v: &Value) -> Result<u64, CheckError> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| CheckError(format!("{n} is not a non-negative integer"))),
        Value::String(s) => {
            let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            };
            r.map_err(|_| CheckError(format!("{s:?} is not an integer")))
        }
        _ => err(format!("{v} is not an integer")),
    }
}

/// A table (spec 1.2.2): its rows, each a map from header to value.
pub fn table<'a>(v: &'a Value, what: &str) -> Result<Vec<HashMap<&'a str, &'a Value>>, CheckError> {
    let rows = v.as_array().ok_or_else(|| CheckError(format!("{what} is not a table")))?;
    let Some((head, rows)) = rows.split_first() else { return err(format!("{what} has no header")) };
    let head: Vec<&str> = head
        .as_array()
        .and_then(|h| h.iter().map(|c| c.as_str()).collect::<Option<Vec<_>>>())
        .ok_or_else(|| CheckError(format!("{what}: the header is not a row of strings")))?;
    rows.iter()
        .map(|r| {
            let r = r.as_array().ok_or_else(|| CheckError(format!("{what}: a row is not an array")))?;
            if r.len() > head.len() {
                return err(format!("{what}: a row is longer than the header"));
            }
            Ok(head.iter().copied().zip(r).collect())
        })
        .collect()
}

fn col<'a>(row: &HashMap<&str, &'a Value>, c: &str, what: &str) -> Result<&'a Value, CheckError> {
    row.get(c).copied().ok_or_else(|| CheckError(format!("{what}: a row has no {c}")))
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
            let name = col(&r, "EDGE_TYPE", "EDGE_TYPES")?.as_str().ok_or_else(|| CheckError("EDGE_TYPE is not a string".into()))?;
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
    let procs = doc.get("PROCESSES").ok_or_else(|| CheckError("no PROCESSES".into()))?;
    let mut out = Vec::new();
    for pr in table(procs, "PROCESSES")? {
        let pid = int(col(&pr, "PROCESS_ID", "PROCESSES")?)?;
        let data = col(&pr, "PROCESS_DATA", "PROCESSES")?;
        let what = format!("process {pid}");
        let per: Vec<u64> = match data.get("INSTR_COUNT_PER_THREAD") {
            Some(Value::Array(a)) => a.iter().map(int).collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        if let Some(total) = data.get("INSTR_COUNT") {
            if int(total)? != per.iter().sum::<u64>() {
                return err(format!("{what}: INSTR_COUNT {} is not the sum of INSTR_COUNT_PER_THREAD", int(total)?));
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
                            addr: base + int(col(&r, "ADDR_OFFSET", "BASIC_BLOCKS")?)?,
                            instrs: int(col(&r, "NUM_INSTRS", "BASIC_BLOCKS")?)?,
                            count: r.get("COUNT").map(|c| int(c)).transpose()?.unwrap_or(0),
                        };
                        if special.contains_key(&id) || nodes.insert(id, n).is_some() {
                            return err(format!("{what}: node id {id} is used twice"));
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
                                    .ok_or_else(|| CheckError("LOOP_NODE_IDS is not an array".into()))?
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
                    ty: types.get(&t).cloned().ok_or_else(|| CheckError(format!("{what}: edge {id} has unknown type {t}")))?,
                    per_thread: per,
                };
                for end in [e.src, e.dst] {
                    if !nodes.contains_key(&end) && !special.contains_key(&end) {
                        return err(format!("{what}: edge {id} names node {end}, which is not defined"));
                    }
                }
                if edges.insert(id, e).is_some() {
                    return err(format!("{what}: edge id {id} is used twice"));
                }
            }
        }
        // Counts: a node's COUNT is the sum of its incoming and of its outgoing edges.
        let (mut inc, mut outg): (HashMap<u64, u64>, HashMap<u64, u64>) = Default::default();
        let mut per_thread_instrs = vec![0u64; per.len()];
        for e in edges.values() {
            let c: u64 = e.per_thread.iter().sum();
            *inc.entry(e.dst).or_insert(0) += c;
            *outg.entry(e.src).or_insert(0) += c;
            if let Some(n) = nodes.get(&e.src) {
                for (t, c) in e.per_thread.iter().enumerate() {
                    if t >= per_thread_instrs.len() {
                        return err(format!("{what}: edge counts for thread {t}, which INSTR_COUNT_PER_THREAD lacks"));
                    }
                    per_thread_instrs[t] += n.instrs * c;
                }
            }
        }
        for (id, n) in &nodes {
            let (i, o) = (inc.get(id).copied().unwrap_or(0), outg.get(id).copied().unwrap_or(0));
            if i != n.count || o != n.count {
                return err(format!("{what}: node {id} has COUNT {} but {i} incoming and {o} outgoing edge executions", n.count));
            }
        }
        let total: u64 = nodes.values().map(|n| n.instrs * n.count).sum();
        if total != per.iter().sum::<u64>() {
            return err(format!("{what}: NUM_INSTRS x COUNT sums to {total}, INSTR_COUNT is {}", per.iter().sum::<u64>()));
        }
        if per_thread_instrs != per {
            return err(format!("{what}: instructions per thread from the edges {per_thread_instrs:?}, INSTR_COUNT_PER_THREAD {per:?}"));
        }
        // Routines: every node in exactly one; the IDOM tree rooted at the entry; loop heads
        // dominate their loops.
        let mut seen: HashSet<u64> = HashSet::new();
        for (entry, idoms, lps) in &routines_of {
            let local: HashMap<u64, usize> = idoms.iter().enumerate().map(|(i, (n, _))| (*n, i)).collect();
            let mut idom = vec![None; idoms.len()];
            for (i, (n, d)) in idoms.iter().enumerate() {
                if !seen.insert(*n) {
                    return err(format!("{what}: node {n} is in two routines"));
                }
                let d = *local.get(d).ok_or_else(|| CheckError(format!("{what}: node {n}'s IDOM {d} is outside its routine")))?;
                idom[i] = Some(d);
                if (*n == *entry) != (d == i) {
                    return err(format!("{what}: routine {entry}: node {n} has IDOM {}", idoms[d].0));
                }
            }
            let root = *local.get(entry).ok_or_else(|| CheckError(format!("{what}: routine entry {entry} is not among its nodes")))?;
            for i in 0..idoms.len() {
                // Walking up the IDOM chain reaches the entry without a cycle.
                let (mut v, mut steps) = (i, 0);
                while v != root {
                    v = idom[v].expect("set above");
                    steps += 1;
                    if steps > idoms.len() {
                        return err(format!("{what}: routine {entry}: the IDOM chain of node {} does not reach the entry", idoms[i].0));
                    }
                }
            }
            for (head, members) in lps {
                let h = *local.get(head).ok_or_else(|| CheckError(format!("{what}: loop head {head} is outside its routine")))?;
                for m in members {
                    let mi = *local.get(m).ok_or_else(|| CheckError(format!("{what}: loop {head}: node {m} is outside its routine")))?;
                    if !dominates(&idom, h, mi) {
                        return err(format!("{what}: loop head {head} does not dominate its node {m}"));
                    }
                }
                report.loops += 1;
            }
            report.routines += 1;
        }
        if !routines_of.is_empty() {
            if let Some(n) = nodes.keys().find(|n| !seen.contains(n)) {
                return err(format!("{what}: node {n} is in no routine"));
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
    let rows = doc.get("PROCESSES").ok_or_else(|| CheckError("the trace has no PROCESSES".into()))?;
    // An exec'd image keeps its process id: the k-th row of a pid pairs with the k-th.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for pr in table(rows, "trace PROCESSES")? {
        let pid = int(col(&pr, "PROCESS_ID", "trace PROCESSES")?)?;
        let what = format!("trace of process {pid}");
        let k = seen.entry(pid).or_insert(0);
        let p = procs.iter().filter(|p| p.pid == pid).nth(*k).ok_or_else(|| CheckError(format!("{what}: not in the DCFG")))?;
        *k += 1;
        let dict: HashMap<String, String> = match pr.get("STRING_DICTIONARY") {
            Some(Value::Object(o)) => o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect(),
            _ => HashMap::new(),
        };
        let mut t = Table::default();
        if let Some(tt) = pr.get("TRANSITION_TABLE") {
            for r in table(tt, "TRANSITION_TABLE")? {
                let cur = int(col(&r, "CURRENT_EDGE_ID", "TRANSITION_TABLE")?)? as u32;
                let code = col(&r, "TRANSITION_CODE", "TRANSITION_TABLE")?.as_str().unwrap_or("\u{0}");
                let next = col(&r, "NEXT_EDGE_IDS", "TRANSITION_TABLE")?
                    .as_array()
                    .ok_or_else(|| CheckError("NEXT_EDGE_IDS is not an array".into()))?
                    .iter()
                    .map(|v| int(v).map(|v| v as u32))
                    .collect::<Result<Vec<_>, _>>()?;
                t.add(cur, code, next).map_err(|e| CheckError(format!("{what}: {e}")))?;
            }
        }
        let Some(threads) = pr.get("THREAD_DATA") else { continue };
        for th in table(threads, "THREAD_DATA")? {
            let tid = int(col(&th, "THREAD_ID", "THREAD_DATA")?)?;
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
                    return err(format!(
                        "{what} thread {tid}: PRECEDING_INSTR_COUNT {preceding}, the chunks before hold {expect_preceding}"
                    ));
                }
                let first = int(col(&c, "FIRST_EDGE_ID", "TRACE_DATA")?)? as u32;
                let seq = col(&c, "EDGE_ID_SEQUENCE", "TRACE_DATA")?.as_str().unwrap_or("");
                let mut bits = BitReader::new(seq, &dict);
                let mut chunk_instrs = 0u64;
                let mut failure: Option<String> = None;
                t.decode(first, n, &mut bits, |e| {
                    if failure.is_some() {
                        return;
                    }
                    let Some(ed) = p.edges.get(&(e as u64)) else {
                        failure = Some(format!("edge {e} is not in the DCFG"));
                        return;
                    };
                    if let Some(prev) = last_dst {
                        if ed.src != prev {
                            failure = Some(format!("edge {e} leaves node {}, the last edge reached {prev}", ed.src));
                            return;
                        }
                    }
                    *counts.entry(e as u64).or_insert(0) += 1;
                    if let Some(src) = p.nodes.get(&ed.src) {
                        chunk_instrs += src.instrs;
                    }
                    if let Some(dst) = p.nodes.get(&ed.dst) {
                        block(pid, tid, dst.addr, dst.instrs);
                    }
                    last_dst = Some(ed.dst);
                })
                .map_err(|e| CheckError(format!("{what} thread {tid}: {e}")))?;
                if let Some(f) = failure {
                    return err(format!("{what} thread {tid}: {f}"));
                }
                if chunk_instrs != instrs {
                    return err(format!(
                        "{what} thread {tid}: a chunk's INSTR_COUNT is {instrs}, its edges' source nodes hold {chunk_instrs}"
                    ));
                }
                expect_preceding += instrs;
                report.decoded_edges += n;
            }
            // The decoded edges are exactly this thread's edge counts.
            for (id, e) in &p.edges {
                let want = e.per_thread.get(tid as usize).copied().unwrap_or(0);
                let got = counts.get(id).copied().unwrap_or(0);
                if got != want {
                    return err(format!("{what} thread {tid}: edge {id} decoded {got} times, COUNT_PER_THREAD says {want}"));
                }
            }
            if expect_preceding != p.instr_per_thread.get(tid as usize).copied().unwrap_or(0) {
                return err(format!(
                    "{what} thread {tid}: the chunks hold {expect_preceding} instructions, INSTR_COUNT_PER_THREAD another count"
                ));
            }
        }
    }
    Ok(())
}
