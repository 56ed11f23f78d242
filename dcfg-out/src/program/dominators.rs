//! Dominator trees and natural loops of a routine's graph: the iterative algorithm of
//! Cooper, Harvey and Kennedy ("A Simple, Fast Dominance Algorithm", 2001) over reverse
//! postorder, linear in practice on the graphs of real routines; loops from back edges
//! (edges whose target dominates their source), nested by containment.

/// A graph of `n` nodes, 0 the entry, as successor lists.
pub struct Graph<'a> {
    pub succ: &'a [Vec<usize>],
}

/// Immediate dominators: `idom[entry] == entry`; None for nodes the entry does not reach.
pub fn dominators(g: &Graph) -> Vec<Option<usize>> {
    let n = g.succ.len();
    if n == 0 {
        return Vec::new();
    }
    // Reverse postorder by an explicit-stack DFS (no recursion on deep graphs).
    let mut order = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    let mut stack = vec![(0usize, 0usize)];
    seen[0] = true;
    while let Some(&mut (v, ref mut k)) = stack.last_mut() {
        if let Some(&w) = g.succ[v].get(*k) {
            *k += 1;
            if !seen[w] {
                seen[w] = true;
                stack.push((w, 0));
            }
        } else {
            order.push(v);
            stack.pop();
        }
    }
    order.reverse();
    let mut rpo = vec![usize::MAX; n];
    for (i, &v) in order.iter().enumerate() {
        rpo[v] = i;
    }
    let mut pred: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, s) in g.succ.iter().enumerate() {
        if rpo[v] != usize::MAX {
            for &w in s {
                pred[w].push(v);
            }
        }
    }
    let mut idom = vec![usize::MAX; n];
    idom[0] = 0;
    let intersect = |idom: &[usize], mut a: usize, mut b: usize| {
        while a != b {
            while rpo[a] > rpo[b] {
                a = idom[a];
            }
            while rpo[b] > rpo[a] {
                b = idom[b];
            }
        }
        a
    };
    let mut changed = true;
    while changed {
        changed = false;
        for &v in order.iter().skip(1) {
            let mut new = usize::MAX;
            for &p in &pred[v] {
                if idom[p] != usize::MAX {
                    new = if new == usize::MAX { p } else { intersect(&idom, p, new) };
                }
            }
            if new != usize::MAX && idom[v] != new {
                idom[v] = new;
                changed = true;
            }
        }
    }
    idom.into_iter().map(|d| (d != usize::MAX).then_some(d)).collect()
}

/// Whether `a` dominates `b` under `idom`.
pub fn dominates(idom: &[Option<usize>], a: usize, mut b: usize) -> bool {
    loop {
        if a == b {
            return true;
        }
        match idom[b] {
            Some(d) if d != b => b = d,
            _ => return false,
        }
    }
}

/// A dominator tree numbered in depth-first order, so that whether one node dominates
/// another is two comparisons, not a walk up the tree.
pub struct DomTree {
    /// Per node: when the walk entered it and when it left (after all it dominates).
    enter: Vec<usize>,
    leave: Vec<usize>,
}

impl DomTree {
    /// The tree of `idom` rooted at `root`, or a node whose IDOM chain does not reach
    /// `root` (a cycle, or a second root). Linear in the nodes.
    pub fn new(idom: &[Option<usize>], root: usize) -> Result<DomTree, usize> {
        let n = idom.len();
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (v, d) in idom.iter().enumerate() {
            match *d {
                Some(d) if v != root && d < n && d != v => children[d].push(v),
                _ => {}
            }
        }
        let (mut enter, mut leave) = (vec![usize::MAX; n], vec![usize::MAX; n]);
        let mut clock = 0;
        // (node, next child to visit): an explicit stack, as chains can be long.
        let mut stack = vec![(root, 0usize)];
        enter[root] = clock;
        while let Some((v, k)) = stack.last_mut() {
            if let Some(&w) = children[*v].get(*k) {
                *k += 1;
                clock += 1;
                enter[w] = clock;
                stack.push((w, 0));
            } else {
                clock += 1;
                leave[*v] = clock;
                stack.pop();
            }
        }
        // Each node is some one node's child at most, so the walk visits it once; a node
        // left unvisited hangs on a cycle or another root.
        match enter.iter().position(|&e| e == usize::MAX) {
            Some(stray) => Err(stray),
            None => Ok(DomTree { enter, leave }),
        }
    }

    /// Whether `a` dominates `b` (every node dominates itself).
    pub fn dominates(&self, a: usize, b: usize) -> bool {
        self.enter[a] <= self.enter[b] && self.leave[b] <= self.leave[a]
    }
}

/// A natural loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    pub head: usize,
    /// Sources of the back edges to the head.
    pub back_edges: Vec<usize>,
    /// Every node of the loop, the head included, sorted.
    pub nodes: Vec<usize>,
    /// Index in the returned list of the innermost loop containing this one.
    pub parent: Option<usize>,
}

/// The natural loops of a graph with its dominators: one per head, the union of its back
/// edges' loops; parents are the smallest strictly enclosing loop.
pub fn loops(g: &Graph, idom: &[Option<usize>]) -> Vec<Loop> {
    let n = g.succ.len();
    let mut pred: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, s) in g.succ.iter().enumerate() {
        for &w in s {
            pred[w].push(v);
        }
    }
    let mut by_head: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (v, s) in g.succ.iter().enumerate() {
        if idom[v].is_none() {
            continue;
        }
        for &w in s {
            if dominates(idom, w, v) {
                by_head.entry(w).or_default().push(v);
            }
        }
    }
    // Each loop's nodes by a backward walk from its back edges to the head, marked with the
    // loop's number so that no per-loop array is cleared.
    let mut mark = vec![usize::MAX; n];
    let mut out: Vec<Loop> = Vec::with_capacity(by_head.len());
    for (k, (head, mut back)) in by_head.into_iter().enumerate() {
        back.sort_unstable();
        back.dedup();
        mark[head] = k;
        let mut nodes = vec![head];
        let mut work: Vec<usize> = Vec::new();
        for &b in &back {
            if mark[b] != k {
                mark[b] = k;
                nodes.push(b);
                work.push(b);
            }
        }
        while let Some(v) = work.pop() {
            for &p in &pred[v] {
                if mark[p] != k && idom[p].is_some() {
                    mark[p] = k;
                    nodes.push(p);
                    work.push(p);
                }
            }
        }
        nodes.sort_unstable();
        out.push(Loop { head, back_edges: back, nodes, parent: None });
    }
    // A loop's parent is the smallest other loop holding its head (natural loops with
    // distinct heads are nested or disjoint): in order of size, the first loop to hold a
    // smaller loop's head is its parent.
    let mut head_of = vec![usize::MAX; n];
    for (i, l) in out.iter().enumerate() {
        head_of[l.head] = i;
    }
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by_key(|&i| (out[i].nodes.len(), i));
    for &outer in &order {
        for k in 0..out[outer].nodes.len() {
            let inner = head_of[out[outer].nodes[k]];
            if inner != usize::MAX && inner != outer && out[inner].parent.is_none() && out[inner].nodes.len() < out[outer].nodes.len() {
                out[inner].parent = Some(outer);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classic example of the Cooper-Harvey-Kennedy paper (figure 4), renumbered with the
    /// entry first: 0 -> 1, 2; 1 -> 3; 2 -> 4; 3 -> 4; 4 -> 3 (an irreducible pair).
    #[test]
    fn dominators_of_known_graphs() {
        let succ = vec![vec![1, 2], vec![3], vec![4], vec![4], vec![3]];
        let idom = dominators(&Graph { succ: &succ });
        assert_eq!(idom, vec![Some(0), Some(0), Some(0), Some(0), Some(0)]);
        // A diamond with a loop: 0 -> 1 -> {2, 3} -> 4 -> 1, 4 -> 5; 6 unreachable.
        let succ = vec![vec![1], vec![2, 3], vec![4], vec![4], vec![1, 5], vec![], vec![5]];
        let idom = dominators(&Graph { succ: &succ });
        assert_eq!(idom, vec![Some(0), Some(0), Some(1), Some(1), Some(1), Some(4), None]);
        let l = loops(&Graph { succ: &succ }, &idom);
        assert_eq!(l, vec![Loop { head: 1, back_edges: vec![4], nodes: vec![1, 2, 3, 4], parent: None }]);
    }

    #[test]
    fn nested_loops_and_self_loops() {
        // 0 -> 1; 1 -> 2; 2 -> 2 (self), 3; 3 -> 1 (outer back edge), 4.
        let succ = vec![vec![1], vec![2], vec![2, 3], vec![1, 4], vec![]];
        let idom = dominators(&Graph { succ: &succ });
        let l = loops(&Graph { succ: &succ }, &idom);
        assert_eq!(
            l,
            vec![
                Loop { head: 1, back_edges: vec![3], nodes: vec![1, 2, 3], parent: None },
                Loop { head: 2, back_edges: vec![2], nodes: vec![2], parent: Some(0) },
            ]
        );
    }

    /// IDOM chains that cycle or end elsewhere than the root name a node left out.
    #[test]
    fn trees_that_do_not_hang_on_the_root_are_refused() {
        assert_eq!(DomTree::new(&[Some(0), Some(2), Some(1)], 0).err(), Some(1));
        assert_eq!(DomTree::new(&[Some(0), Some(0), Some(2)], 0).err(), Some(2));
        assert!(DomTree::new(&[Some(0), Some(0), Some(1)], 0).is_ok_and(|t| t.dominates(1, 2) && !t.dominates(2, 1)));
    }

    /// Against the definition (a dominates b iff every path from the entry to b passes a),
    /// checked by removing a and searching, on random graphs.
    #[test]
    fn matches_the_definition_on_random_graphs() {
        let mut seed = 11u64;
        let mut rnd = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let n = 1 + rnd(25) as usize;
            let succ: Vec<Vec<usize>> = (0..n).map(|_| (0..rnd(4)).map(|_| rnd(n as u64) as usize).collect()).collect();
            let idom = dominators(&Graph { succ: &succ });
            let reach = |skip: Option<usize>| {
                let mut seen = vec![false; n];
                let mut work = vec![0];
                if skip != Some(0) {
                    seen[0] = true;
                } else {
                    return seen;
                }
                while let Some(v) = work.pop() {
                    for &w in &succ[v] {
                        if Some(w) != skip && !seen[w] {
                            seen[w] = true;
                            work.push(w);
                        }
                    }
                }
                seen
            };
            let all = reach(None);
            // The numbered tree exists exactly when every node hangs on the entry.
            let tree = DomTree::new(&idom, 0);
            assert_eq!(tree.is_ok(), all.iter().all(|&r| r), "{succ:?}");
            for b in 0..n {
                assert_eq!(idom[b].is_some(), all[b]);
                if !all[b] {
                    continue;
                }
                for a in 0..n {
                    let by_def = a == b || (all[a] && !reach(Some(a))[b]);
                    assert_eq!(dominates(&idom, a, b), by_def, "{a} dom {b} in {succ:?}");
                    if let Ok(t) = &tree {
                        assert_eq!(t.dominates(a, b), by_def, "tree: {a} dom {b} in {succ:?}");
                    }
                }
            }
        }
    }
}
