//! The graph of a process: nodes and edges from the first pass's transition counts, each
//! edge's DCFG type, and the edge graph the trace is encoded with.

use super::flow::{parts, How, Node, NodeFlow};
use super::transitions::EdgeGraph;
use super::*;

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

    pub(super) fn node_id(&self, k: u32) -> u32 {
        self.node_base + k
    }

    pub(super) fn end_id(&self, e: End) -> u32 {
        match e {
            End::Start => START,
            End::End => END,
            End::Node(k) => self.node_id(k),
        }
    }

    /// The trace's edge graph: targets and counts of edges, and each node's out-edges.
    pub(super) fn edge_graph(&self) -> EdgeGraph {
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
}
