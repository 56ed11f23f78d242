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
//! Here: the graph, routines and trace writer; `flow` counts node transitions, `transitions`
//! and `seqcode` encode the trace, `check` reads and checks any producer's pair.

pub mod check;
pub mod flow;
pub mod seqcode;
pub mod transitions;

use crate::dcfg::flow::{node, node_of, parts, ChunkStart, How, Node, NodeFlow};
use crate::dcfg::seqcode::{compress_repeats, BitWriter, Dictionary};
use crate::dcfg::transitions::{code_text, EdgeGraph, Encoder};
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

/// The DCFG edge type of a transition between two nodes.
fn classify(plans: &Plans, from: Node, to: Node, how: How) -> EdgeType {
    let (fid, fexec) = parts(from);
    let kind = match how {
        How::Signal => EdgeKind::Signal,
        How::SignalReturn => EdgeKind::SignalReturn,
        How::Flow => {
            // A block cut short, or one without a plan, left by no exit of its own.
            let Some(plan) = plans.get_plan(fid).filter(|p| fexec as usize == p.insns.len()) else { return EdgeType::Unknown };
            let Some((flow, rep)) = plans.exit(fid) else { return EdgeType::Unknown };
            let to_addr = plans.get_plan(parts(to).0).map_or(0, |p| p.addr);
            flow_kind(plan.addr, flow, rep, Some(to_addr))
        }
    };
    EdgeType::of(kind)
}

impl<'r> Process<'r> {
    /// Counts the profile's node transitions (chunk-parallel) and builds its graph.
    pub fn build(rec: &'r Recovery<'r>, ids: &mut Ids, progress: &(dyn Fn(u64) + Sync)) -> Result<Process<'r>, DcfgError> {
        let flows = rec.events(Source::Blocks).progress(progress).merged(|_| NodeFlow::new(&rec.plans))?;
        let plans = &rec.plans;
        let mut nodes: Vec<NodeInfo> = Vec::new();
        let mut index: FxHashMap<Node, u32> = FxHashMap::default();
        let mut add_node = |n: Node, nodes: &mut Vec<NodeInfo>| -> u32 {
            *index.entry(n).or_insert_with(|| {
                let (id, executed) = parts(n);
                let plan = plans.plan(id);
                let insns = &plan.insns[..(executed as usize).min(plan.insns.len())];
                let last = insns.last().map_or(plan.addr, |i| i.pc);
                let size = insns.last().map_or(0, |i| i.pc + i.len as u64 - plan.addr);
                nodes.push(NodeInfo { key: n, addr: plan.addr, size, instrs: executed, last_offset: last - plan.addr, count: 0, image: 0 });
                nodes.len() as u32 - 1
            })
        };
        let mut edges: Vec<EdgeInfo> = Vec::new();
        let mut by_transition: FxHashMap<(Node, Node, How), u32> = FxHashMap::default();
        let mut entry_edge: FxHashMap<Node, u32> = FxHashMap::default();
        let mut exit_edge: FxHashMap<Node, u32> = FxHashMap::default();
        for (t, f) in flows.iter().enumerate() {
            // In a fixed order, so that ids do not depend on hashing.
            let mut tr: Vec<((Node, Node, How), u64)> = f.transitions().into_iter().collect();
            tr.sort_unstable();
            for ((a, b, how), n) in tr {
                let (ia, ib) = (add_node(a, &mut nodes), add_node(b, &mut nodes));
                let e = *by_transition.entry((a, b, how)).or_insert_with(|| {
                    edges.push(EdgeInfo { src: End::Node(ia), dst: End::Node(ib), ty: classify(plans, a, b, how), per_thread: Vec::new() });
                    edges.len() as u32 - 1
                });
                edges[e as usize].add(t, n);
            }
            if let (Some(first), Some(last)) = (f.first, f.last) {
                let (ia, ib) = (add_node(first, &mut nodes), add_node(last, &mut nodes));
                let e = *entry_edge.entry(first).or_insert_with(|| {
                    edges.push(EdgeInfo { src: End::Start, dst: End::Node(ia), ty: EdgeType::Entry, per_thread: Vec::new() });
                    edges.len() as u32 - 1
                });
                edges[e as usize].add(t, 1);
                let e = *exit_edge.entry(last).or_insert_with(|| {
                    edges.push(EdgeInfo { src: End::Node(ib), dst: End::End, ty: EdgeType::Exit, per_thread: Vec::new() });
                    edges.len() as u32 - 1
                });
                edges[e as usize].add(t, 1);
            }
        }
        // Node counts: each execution of a node has exactly one incoming edge.
        for e in &edges {
            if let End::Node(d) = e.dst {
                nodes[d as usize].count += e.count();
            }
        }
        // CALL_BYPASS: caller to the node at its return address, where one ran.
        let mut at_addr: FxHashMap<u64, u32> = FxHashMap::default();
        for (i, n) in nodes.iter().enumerate() {
            let (id, executed) = parts(n.key);
            if plans.get_plan(id).is_some_and(|p| p.insns.len() == executed as usize) {
                let best = at_addr.entry(n.addr).or_insert(i as u32);
                if nodes[*best as usize].count < n.count {
                    *best = i as u32;
                }
            }
        }
        let calls: Vec<u32> = edges
            .iter()
            .filter(|e| matches!(e.ty, EdgeType::DirectCall | EdgeType::IndirectCall))
            .filter_map(|e| if let End::Node(s) = e.src { Some(s) } else { None })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for s in calls {
            let (id, _) = parts(nodes[s as usize].key);
            let Some(last) = plans.plan(id).insns.last() else { continue };
            if let Some(&r) = at_addr.get(&(last.pc + last.len as u64)) {
                edges.push(EdgeInfo { src: End::Node(s), dst: End::Node(r), ty: EdgeType::CallBypass, per_thread: Vec::new() });
            }
        }
        // Images: the recorded modules; code outside them in one image of its own.
        // A later load at a base replaces the earlier (one map, not a scan per load).
        let mut by_base: FxHashMap<u64, Image> = FxHashMap::default();
        for m in rec.profile.modules.iter().filter(|m| m.event == dep_profile::container::ModuleEventKind::Load && m.size > 0) {
            by_base.insert(
                m.base,
                Image { base: m.base, size: m.size, path: Some(m.path.clone()).filter(|p| !p.is_empty()), nodes: Vec::new() },
            );
        }
        let mut images: Vec<Image> = by_base.into_values().collect();
        images.sort_by_key(|i| i.base);
        let mut outside: Vec<u32> = Vec::new();
        for (k, n) in nodes.iter_mut().enumerate() {
            let i = images.partition_point(|im| im.base <= n.addr);
            match i.checked_sub(1).filter(|&i| n.addr - images[i].base < images[i].size) {
                Some(i) => {
                    n.image = i;
                    images[i].nodes.push(k as u32);
                }
                None => outside.push(k as u32),
            }
        }
        if !outside.is_empty() {
            let lo = outside.iter().map(|&k| nodes[k as usize].addr).min().expect("not empty");
            let hi =
                outside.iter().map(|&k| nodes[k as usize].addr.saturating_add(nodes[k as usize].size.max(1))).max().expect("not empty");
            for &k in &outside {
                nodes[k as usize].image = images.len();
            }
            images.push(Image { base: lo, size: hi - lo, path: None, nodes: outside });
        }
        images.retain(|i| !i.nodes.is_empty());
        for (k, im) in images.iter().enumerate() {
            for &n in &im.nodes {
                nodes[n as usize].image = k;
            }
        }
        let node_base = ids.next_node;
        let edge_base = ids.next_edge;
        ids.next_node += nodes.len() as u32;
        ids.next_edge += edges.len() as u32;
        let instr_per_thread = flows.iter().map(|f| f.instructions).collect();
        Ok(Process {
            rec,
            pid: rec.profile.meta.pid,
            node_base,
            edge_base,
            nodes,
            edges,
            by_transition,
            entry_edge,
            exit_edge,
            images,
            instr_per_thread,
            flows,
        })
    }

    fn node_id(&self, k: u32) -> u32 {
        self.node_base + k
    }

    fn end_id(&self, e: End) -> u32 {
        match e {
            End::Start => START,
            End::End => END,
            End::Node(k) => self.node_id(k),
        }
    }

    /// The routines of an image: entries at call and handler targets, thread starts and
    /// symbol starts; each node claimed by the first routine whose entry reaches it
    /// through intra-routine edges; nodes left over start routines of their own.
    fn routines(&self, image: usize, edges: &[u32], symbol_starts: &std::collections::HashSet<u64>) -> Vec<Value> {
        let im = &self.images[image];
        let local: FxHashMap<u32, usize> = im.nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let n = im.nodes.len();
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut is_entry = vec![false; n];
        let mut out_edges: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &k in edges {
            let (k, e) = (k as usize, &self.edges[k as usize]);
            let from = match e.src {
                End::Node(s) => local.get(&s).copied(),
                _ => None,
            };
            if let Some(ls) = from {
                out_edges[ls].push(k);
            }
            if let End::Node(d) = e.dst {
                if let Some(&ld) = local.get(&d) {
                    match (e.ty.intra(), from) {
                        (true, Some(ls)) => succ[ls].push(ld),
                        // A jump in from another image (a PLT stub's) enters a routine.
                        (true, None) => is_entry[ld] = true,
                        (false, _) => is_entry[ld] |= !matches!(e.ty, EdgeType::Return | EdgeType::ContextChangeReturn | EdgeType::Exit),
                    }
                }
            }
        }
        for (i, &k) in im.nodes.iter().enumerate() {
            is_entry[i] |= symbol_starts.contains(&(self.nodes[k as usize].addr - im.base));
        }
        for s in &mut succ {
            s.sort_unstable();
            s.dedup();
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (!is_entry[i], self.nodes[im.nodes[i] as usize].addr, i));
        let mut owner = vec![usize::MAX; n];
        let mut routines: Vec<Vec<usize>> = Vec::new();
        for &start in &order {
            if owner[start] != usize::MAX {
                continue;
            }
            let r = routines.len();
            owner[start] = r;
            let mut members = vec![start];
            let mut k = 0;
            while k < members.len() {
                let v = members[k];
                k += 1;
                for &w in &succ[v] {
                    if owner[w] == usize::MAX && !is_entry[w] {
                        owner[w] = r;
                        members.push(w);
                    }
                }
            }
            routines.push(members);
        }
        routines
            .iter()
            .map(|members| {
                let pos: FxHashMap<usize, usize> = members.iter().enumerate().map(|(i, &v)| (v, i)).collect();
                let rs: Vec<Vec<usize>> = members.iter().map(|v| succ[*v].iter().filter_map(|w| pos.get(w).copied()).collect()).collect();
                let g = Graph { succ: &rs };
                let idom = dominators(&g);
                let id = |i: usize| self.node_id(im.nodes[members[i]]);
                let nodes_table: Vec<Value> = std::iter::once(json!(["NODE_ID", "IDOM_NODE_ID"]))
                    .chain((0..members.len()).map(|i| json!([id(i), id(idom[i].unwrap_or(0))])))
                    .collect();
                // Exits: nodes with an edge leaving the routine (calls and handler entries,
                // which come back, aside).
                let mut exits: Vec<u32> = Vec::new();
                for (_, e) in members.iter().flat_map(|m| out_edges[*m].iter().map(move |&k| (m, &self.edges[k]))) {
                    let End::Node(s) = e.src else { continue };
                    let leaves = match e.dst {
                        End::Node(d) => local.get(&d).is_none_or(|&ld| owner[ld] != owner[members[0]]),
                        _ => true,
                    };
                    let returns_here =
                        matches!(e.ty, EdgeType::DirectCall | EdgeType::IndirectCall | EdgeType::ContextChange | EdgeType::CallBypass);
                    if leaves && !returns_here {
                        exits.push(self.node_id(s));
                    }
                }
                exits.sort_unstable();
                exits.dedup();
                let mut row = vec![json!(id(0)), json!(exits), Value::Array(nodes_table)];
                let ls = loops(&g, &idom);
                if !ls.is_empty() {
                    let mut table =
                        vec![json!(["LOOP_HEAD_NODE_ID", "LOOP_BACK_EDGE_SOURCE_NODE_IDS", "LOOP_NODE_IDS", "PARENT_LOOP_HEAD_NODE_ID"])];
                    for l in &ls {
                        let back: Vec<u32> = l.back_edges.iter().map(|&b| id(b)).collect();
                        let all: Vec<u32> = l.nodes.iter().map(|&b| id(b)).collect();
                        let mut r = vec![json!(id(l.head)), json!(back), json!(all)];
                        if let Some(p) = l.parent {
                            r.push(json!(id(ls[p].head)));
                        }
                        table.push(Value::Array(r));
                    }
                    row.push(Value::Array(table));
                }
                Value::Array(row)
            })
            .collect()
    }

    /// The process's IMAGES table; file names are added to `files`.
    fn images_table(&self, sym: &Symbolizer, files: &mut FileNames) -> Value {
        let plans = &self.rec.plans;
        let mut images_table = vec![json!(["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"])];
        // Each image's edges (those with an end in it), gathered once for its routines.
        let mut image_edges: Vec<Vec<u32>> = vec![Vec::new(); self.images.len()];
        for (k, e) in self.edges.iter().enumerate() {
            let image = |end: End| if let End::Node(n) = end { Some(self.nodes[n as usize].image) } else { None };
            let (a, b) = (image(e.src), image(e.dst));
            for i in [a, b.filter(|&b| Some(b) != a)].into_iter().flatten() {
                image_edges[i].push(k as u32);
            }
        }
        for (k, im) in self.images.iter().enumerate() {
            let mut data = serde_json::Map::new();
            if let Some(p) = &im.path {
                data.insert("FILE_NAME_ID".into(), json!(files.id(p)));
            }
            let symbols = if im.path.is_some() { sym.module_symbols(im.base) } else { Vec::new() };
            if !symbols.is_empty() {
                let mut t = vec![json!(["NAME", "ADDR_OFFSET", "SIZE"])];
                t.extend(symbols.iter().map(|(n, off, size)| json!([n, format!("{off:#x}"), size])));
                data.insert("SYMBOLS".into(), Value::Array(t));
            }
            let starts: std::collections::HashSet<u64> = symbols.iter().map(|s| s.1).collect();
            // Source lines of every instruction the image's blocks hold, merged into runs.
            let mut pcs: BTreeMap<u64, u8> = BTreeMap::new();
            for &n in &im.nodes {
                let (id, executed) = parts(self.nodes[n as usize].key);
                for i in plans.plan(id).insns.iter().take(executed as usize) {
                    pcs.insert(i.pc, i.len);
                }
            }
            let mut source: Vec<Value> = Vec::new();
            let mut run: Option<(String, u32, u64, u64, u32)> = None; // file, line, start, end, instrs
            if im.path.is_some() {
                for (&pc, &len) in &pcs {
                    let place = sym.place(pc);
                    let here = place.file.zip(place.line);
                    match (&mut run, &here) {
                        (Some(r), Some((f, l))) if r.0 == *f && r.1 == *l && r.3 == pc => {
                            r.3 = pc + len as u64;
                            r.4 += 1;
                        }
                        _ => {
                            if let Some(r) = run.take() {
                                source.push(json!([files.id(&r.0), r.1, format!("{:#x}", r.2 - im.base), r.3 - r.2, r.4]));
                            }
                            if let Some((f, l)) = here {
                                run = Some((f, l, pc, pc + len as u64, 1));
                            }
                        }
                    }
                }
                if let Some(r) = run.take() {
                    source.push(json!([files.id(&r.0), r.1, format!("{:#x}", r.2 - im.base), r.3 - r.2, r.4]));
                }
            }
            if !source.is_empty() {
                let mut t = vec![json!(["FILE_NAME_ID", "LINE_NUM", "ADDR_OFFSET", "SIZE", "NUM_INSTRS"])];
                t.extend(source);
                data.insert("SOURCE_DATA".into(), Value::Array(t));
            }
            let mut blocks = vec![json!(["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"])];
            let mut sorted = im.nodes.clone();
            sorted.sort_by_key(|&n| (self.nodes[n as usize].addr, self.nodes[n as usize].key));
            for &n in &sorted {
                let x = &self.nodes[n as usize];
                blocks.push(json!([self.node_id(n), format!("{:#x}", x.addr - im.base), x.size, x.instrs, x.last_offset, x.count]));
            }
            data.insert("BASIC_BLOCKS".into(), Value::Array(blocks));
            let mut routines = vec![json!(["ENTRY_NODE_ID", "EXIT_NODE_IDS", "NODES", "LOOPS"])];
            routines.extend(self.routines(k, &image_edges[k], &starts));
            data.insert("ROUTINES".into(), Value::Array(routines));
            images_table.push(json!([k + 1, format!("{:#x}", im.base), im.size, Value::Object(data)]));
        }
        Value::Array(images_table)
    }

    /// Writes the process's row of the DCFG's PROCESSES table, `[pid, {EDGES, IMAGES,
    /// INSTR_COUNT, INSTR_COUNT_PER_THREAD}]` as serde_json writes a map (keys sorted, no
    /// spaces), with the EDGES table streamed: a count for every thread of every edge is
    /// the format's, but only the threads that took an edge are held.
    fn write_dcfg_row(&self, images: &Value, out: &mut dyn Write) -> io::Result<()> {
        write!(
            out,
            "[{},{{\"EDGES\":[[\"EDGE_ID\",\"SOURCE_NODE_ID\",\"TARGET_NODE_ID\",\"EDGE_TYPE_ID\",\"COUNT_PER_THREAD\"]",
            self.pid
        )?;
        let threads = self.instr_per_thread.len();
        for (k, e) in self.edges.iter().enumerate() {
            write!(out, ",[{},{},{},{},[", self.edge_base + k as u32, self.end_id(e.src), self.end_id(e.dst), e.ty.id())?;
            let mut taken = e.per_thread.iter().peekable();
            for t in 0..threads {
                let c = taken.next_if(|&&(u, _)| u as usize == t).map_or(0, |&(_, c)| c);
                write!(out, "{}{c}", if t > 0 { "," } else { "" })?;
            }
            out.write_all(b"]]")?;
        }
        out.write_all(b"],\"IMAGES\":")?;
        serde_json::to_writer(&mut *out, images)?;
        write!(out, ",\"INSTR_COUNT\":{},\"INSTR_COUNT_PER_THREAD\":", self.instr_per_thread.iter().sum::<u64>())?;
        serde_json::to_writer(&mut *out, &self.instr_per_thread)?;
        out.write_all(b"}]")
    }

    /// The trace's edge graph: targets and counts of edges, and each node's out-edges.
    fn edge_graph(&self) -> EdgeGraph {
        let key = |e: End| match e {
            End::Start => u64::MAX - 1,
            End::End => u64::MAX,
            End::Node(k) => k as u64,
        };
        let mut g = EdgeGraph { target: Default::default(), out: Default::default() };
        for (k, e) in self.edges.iter().enumerate() {
            let count = e.count();
            if count == 0 {
                continue; // fabricated bypasses never appear in the trace
            }
            let id = self.edge_base + k as u32;
            g.target.insert(id, (key(e.dst), count));
            g.out.entry(key(e.src)).or_default().push((id, count));
        }
        for v in g.out.values_mut() {
            v.sort_unstable();
        }
        g
    }

    /// Writes the process's row of the DCFG-trace's PROCESSES table, streaming the thread
    /// data chunk by chunk as recovery delivers it.
    pub fn write_trace_row(&self, out: &mut dyn Write, progress: &(dyn Fn(u64) + Sync)) -> Result<(), DcfgError> {
        let g = self.edge_graph();
        let enc = Encoder::new(&g);
        let starts: Vec<&[ChunkStart]> = self.flows.iter().map(|f| f.chunk_starts.as_slice()).collect();
        // Each chunk's thread (its position in the thread table, which THREAD_ID and the
        // DCFG's per-thread counts use: a profile's thread indices need not be 0..n-1), its
        // place among the thread's chunks, and whether it is the thread's last; built once.
        let mut place: FxHashMap<(u32, u32), (u32, usize, bool)> = FxHashMap::default();
        for (t, th) in self.rec.profile.threads.iter().enumerate() {
            for (k, c) in th.chunks.iter().enumerate() {
                place.entry((c.thread, c.seq)).or_insert((t as u32, k, k + 1 == th.chunks.len()));
            }
        }
        // The first chunks' rows wait until the dictionary, chosen from them, is written.
        let mut sample: Vec<(u32, ChunkText)> = Vec::new();
        let mut sampled = 0usize;
        let mut w = RowWriter { out, current: None, preceding: 0 };
        let mut started = false;
        // Once chosen, the workers substitute as they finish chunks.
        let chosen: std::sync::OnceLock<Dictionary> = std::sync::OnceLock::new();
        let start = |w: &mut RowWriter, sample: &mut Vec<(u32, ChunkText)>| -> io::Result<()> {
            let d = chosen.get_or_init(|| Dictionary::choose(sample.iter().map(|(_, c)| c.text.as_str()), DICTIONARY_ENTRIES));
            let mut entries: Vec<(&str, &str)> = d.entries().collect();
            entries.sort_unstable();
            let dict: serde_json::Map<String, Value> = entries.into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            write!(w.out, "[{}, {}, [[\"CURRENT_EDGE_ID\", \"TRANSITION_CODE\", \"NEXT_EDGE_IDS\"]", self.pid, Value::Object(dict))?;
            for r in enc.rows(&g) {
                write!(w.out, ",\n  [{}, \"{}\", {}]", r.current, code_text(r.code, r.len), json!(r.next))?;
            }
            write!(w.out, "],\n [[\"THREAD_ID\", \"TRACE_DATA\"]")?;
            for (t, mut c) in sample.drain(..) {
                c.text = d.substitute(&c.text);
                w.row(t, &c)?;
            }
            Ok(())
        };
        let thread_of = |c: &dep_profile::container::ChunkRef| place.get(&(c.thread, c.seq)).map_or(c.thread, |p| p.0);
        self.rec.events(Source::Blocks).progress(progress).ordered(
            |c| {
                let (t, k, last) = place.get(&(c.thread, c.seq)).copied().unwrap_or((c.thread, 0, true));
                let start = starts.get(t as usize).and_then(|s| s.get(k)).copied().unwrap_or(ChunkStart { prev: None, how: How::Flow });
                TraceChunk::new(self, &enc, start, last)
            },
            |t| {
                let mut c = t.finish_chunk();
                if let Some(d) = chosen.get() {
                    c.text = d.substitute(&c.text);
                    c.substituted = true;
                }
                Ok(c)
            },
            |c: &ChunkText| c.text.len(),
            |c, mut chunk| {
                let r = if started {
                    if !chunk.substituted {
                        chunk.text = chosen.get().expect("chosen when started").substitute(&chunk.text);
                    }
                    w.row(thread_of(c), &chunk)
                } else {
                    sampled += chunk.text.len();
                    sample.push((thread_of(c), chunk));
                    if sampled >= DICTIONARY_SAMPLE {
                        started = true;
                        start(&mut w, &mut sample)
                    } else {
                        Ok(())
                    }
                };
                Ok(r?)
            },
        )?;
        if !started {
            start(&mut w, &mut sample)?;
        }
        if w.current.is_some() {
            write!(w.out, "]]")?;
        }
        write!(w.out, "]]")?;
        Ok(())
    }
}

/// Text of the first chunks from which a process's STRING_DICTIONARY is chosen.
const DICTIONARY_SAMPLE: usize = 4 << 20;
/// Entries at most (two-character keys).
const DICTIONARY_ENTRIES: usize = 64 * 64;

/// Writes THREAD_DATA rows in order, with the preceding instruction counts.
struct RowWriter<'o> {
    out: &'o mut dyn Write,
    current: Option<u32>,
    preceding: u64,
}

impl RowWriter<'_> {
    fn row(&mut self, thread: u32, c: &ChunkText) -> io::Result<()> {
        if self.current != Some(thread) {
            if self.current.is_some() {
                write!(self.out, "]]")?;
            }
            let header = "[\"PRECEDING_INSTR_COUNT\", \"INSTR_COUNT\", \"EDGE_COUNT\", \"FIRST_EDGE_ID\", \"EDGE_ID_SEQUENCE\"]";
            write!(self.out, ",\n  [{thread}, [{header}")?;
            self.current = Some(thread);
            self.preceding = 0;
        }
        if c.edges > 0 {
            write!(self.out, ",\n    [{}, {}, {}, {}, \"{}\"]", self.preceding, c.instrs, c.edges, c.first, c.text)?;
        }
        self.preceding += c.instrs;
        Ok(())
    }
}

/// The file-name table, filled as names are used.
#[derive(Default)]
pub struct FileNames {
    ids: BTreeMap<String, u32>,
}

impl FileNames {
    pub fn id(&mut self, name: &str) -> u32 {
        let n = self.ids.len() as u32 + 1;
        *self.ids.entry(name.to_string()).or_insert(n)
    }

    fn table(&self) -> Value {
        let mut rows: Vec<(u32, &String)> = self.ids.iter().map(|(k, v)| (*v, k)).collect();
        rows.sort();
        let mut t = vec![json!(["FILE_NAME_ID", "FILE_NAME"])];
        t.extend(rows.into_iter().map(|(id, n)| json!([id, n])));
        Value::Array(t)
    }
}

/// Writes the DCFG of `processes`.
pub fn write_dcfg(out: &mut dyn Write, processes: &[Process], sym: &[Symbolizer]) -> Result<(), DcfgError> {
    // The images first: FILE_NAMES, which they fill, comes before PROCESSES.
    let mut files = FileNames::default();
    let images: Vec<Value> = processes.iter().zip(sym).map(|(p, s)| p.images_table(s, &mut files)).collect();
    let mut types = vec![json!(["EDGE_TYPE_ID", "EDGE_TYPE"])];
    types.extend(EdgeType::ALL.iter().map(|t| json!([t.id(), t.name()])));
    // The document's keys in the order serde_json writes a map's (sorted), the processes
    // streamed one by one.
    out.write_all(b"{\"EDGE_TYPES\":")?;
    serde_json::to_writer(&mut *out, &types).map_err(io::Error::from)?;
    out.write_all(b",\"FILE_NAMES\":")?;
    serde_json::to_writer(&mut *out, &files.table()).map_err(io::Error::from)?;
    out.write_all(b",\"MAJOR_VERSION\":1,\"MINOR_VERSION\":0,\"PROCESSES\":[[\"PROCESS_ID\",\"PROCESS_DATA\"]")?;
    for (p, im) in processes.iter().zip(&images) {
        out.write_all(b",")?;
        p.write_dcfg_row(im, out)?;
    }
    out.write_all(b"],\"SPECIAL_NODES\":")?;
    serde_json::to_writer(&mut *out, &json!([["NODE_ID", "NODE_NAME"], [START, "START"], [END, "END"]])).map_err(io::Error::from)?;
    out.write_all(b"}\n")?;
    Ok(())
}

/// Writes the DCFG-trace of `processes`.
pub fn write_trace(out: &mut dyn Write, processes: &[Process], progress: &(dyn Fn(u64) + Sync)) -> Result<(), DcfgError> {
    write!(out, "{{\"MAJOR_VERSION\": 1, \"MINOR_VERSION\": 0, \"PROCESSES\": [[\"PROCESS_ID\", \"STRING_DICTIONARY\", \"TRANSITION_TABLE\", \"THREAD_DATA\"]")?;
    for p in processes {
        write!(out, ",\n ")?;
        p.write_trace_row(out, progress)?;
    }
    writeln!(out, "]}}")?;
    Ok(())
}

/// One chunk's trace row, before its preceding count is known.
pub struct ChunkText {
    /// Whether `text` has the dictionary's references already.
    substituted: bool,
    instrs: u64,
    edges: u64,
    first: u32,
    text: String,
}

/// Front cache of transition -> edge id, in front of the process's map.
const CACHE: usize = 4096;

/// Turns one chunk's blocks into edge ids.
struct TraceChunk<'a, 'r> {
    p: &'a Process<'r>,
    enc: &'a Encoder,
    prev: Option<Node>,
    how: How,
    last_chunk: bool,
    /// The chunk's first edge, and how many it has.
    first: Option<u32>,
    edges: u64,
    /// Edges the last row named beyond its first, still to come.
    skip: u32,
    bits: BitWriter,
    instrs: u64,
    cache: Vec<(u128, u32)>,
    /// Plain transitions between whole blocks, by (from id, to id): the edge id and its code.
    plain: Vec<(u64, u32, (u32, u8, u8))>,
    prev_whole: bool,
}

impl<'a, 'r> TraceChunk<'a, 'r> {
    fn new(p: &'a Process<'r>, enc: &'a Encoder, start: ChunkStart, last_chunk: bool) -> Self {
        TraceChunk {
            p,
            enc,
            prev: start.prev,
            how: start.how,
            last_chunk,
            first: None,
            edges: 0,
            skip: 0,
            bits: BitWriter::default(),
            instrs: 0,
            cache: vec![(u128::MAX, 0); CACHE],
            plain: vec![(u64::MAX, 0, (0, 0, 0)); CACHE],
            // (A chunk's first block takes the general path.)
            prev_whole: false,
        }
    }

    #[inline]
    fn edge(&mut self, e: u32) {
        if self.first.is_none() {
            self.first = Some(e);
        } else {
            self.enc.push(e, &mut self.skip, &mut self.bits);
        }
        self.edges += 1;
    }

    #[inline]
    fn enter(&mut self, n: Node) {
        let p = self.p;
        let e = match self.prev {
            None => p.entry_edge[&n],
            Some(prev) => {
                let k = (prev as u128) << 64 | (n as u128) << 2 | self.how as u128;
                let h = ((prev ^ n.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (CACHE - 1);
                if self.cache[h].0 == k {
                    self.cache[h].1
                } else {
                    let e = p.by_transition[&(prev, n, self.how)];
                    self.cache[h] = (k, e);
                    e
                }
            }
        };
        if let Some(prev) = self.prev {
            self.instrs += parts(prev).1 as u64;
        }
        self.edge(p.edge_base + e);
        self.prev = Some(n);
        self.how = How::Flow;
    }

    fn finish_chunk(mut self) -> ChunkText {
        if self.last_chunk {
            if let Some(last) = self.prev {
                self.instrs += parts(last).1 as u64;
                self.edge(self.p.edge_base + self.p.exit_edge[&last]);
            }
        }
        ChunkText {
            substituted: false,
            instrs: self.instrs,
            edges: self.edges,
            first: self.first.unwrap_or(0),
            text: compress_repeats(&self.bits.finish()),
        }
    }
}

impl Sink for TraceChunk<'_, '_> {
    type Error = DcfgError;

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        let (n, whole) = node_of(b)?;
        self.enter(n);
        self.prev_whole = whole;
        Ok(true)
    }

    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, Self::Error> {
        self.how = self.how.after(m);
        Ok(true)
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        // Run blocks are whole, with no marker between them. Until the chunk has its first
        // edge and a whole block before, the general path; then the loop below, which keeps
        // its state in locals.
        let blocks = run.blocks();
        let mut k = 0;
        while k < blocks.len() && !(self.first.is_some() && self.prev.is_some() && self.prev_whole && self.how == How::Flow) {
            self.enter(node(blocks[k].id, blocks[k].executed as u32));
            self.prev_whole = true;
            k += 1;
        }
        let Some(mut prev) = self.prev.filter(|_| k < blocks.len()) else { return Ok(true) };
        let mut bits = std::mem::take(&mut self.bits);
        let (mut skip, mut instrs, mut edges) = (self.skip, self.instrs, self.edges);
        let (p, enc, plain) = (self.p, self.enc, &mut self.plain);
        for b in &blocks[k..] {
            let n = node(b.id, b.executed as u32);
            let key = (prev >> 16) << 32 | b.id as u64;
            let h = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (CACHE - 1);
            let slot = plain[h];
            let code = if slot.0 == key {
                slot.2
            } else {
                let e = p.edge_base + p.by_transition[&(prev, n, How::Flow)];
                let code = enc.code(e);
                plain[h] = (key, e, code);
                code
            };
            instrs += parts(prev).1 as u64;
            Encoder::push_code(code, &mut skip, &mut bits);
            edges += 1;
            prev = n;
        }
        (self.skip, self.instrs, self.edges, self.bits, self.prev) = (skip, instrs, edges, bits, Some(prev));
        Ok(true)
    }
}
