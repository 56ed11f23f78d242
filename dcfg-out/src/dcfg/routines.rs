//! A process's routines: entries, the nodes each claims, dominator trees and loops.

use super::*;

impl Process<'_> {
    /// The routines of an image: entries at call and handler targets, thread starts and
    /// symbol starts; each node claimed by the first routine whose entry reaches it
    /// through intra-routine edges; nodes left over start routines of their own.
    pub(super) fn routines(&self, image: usize, edges: &[u32], symbol_starts: &std::collections::HashSet<u64>) -> Vec<Value> {
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
}
