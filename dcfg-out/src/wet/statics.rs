//! The static side of a WET trace: one id per distinct instruction of the block table,
//! its use ports, and the control-flow graph whose post-dominators give control
//! dependence.
//!
//! Blocks of the table overlap (a jump into the middle of an earlier block starts a new
//! one), so instructions are keyed by address and code version and numbered in that order.
//! The graph's nodes are maximal straight-line runs of those instructions: a node starts at
//! every block start and direct-jump target, after every instruction that leaves a
//! straight line, and where the code stops being contiguous. Calls and system calls are
//! straight-line (the callee's frame is the dynamic side's business); a return leaves to
//! the graph's exit. A direct branch's target that never ran is not in the table, so its
//! code is unknown: the edge goes to the exit, which can only widen the branch's region.
//! Indirect jumps go to the targets the run took.

use dep_profile::semantics::{Access, Flow, Insn, Machine, Semantics};
use dep_recover::plans::Plans;
use rustc_hash::{FxHashMap, FxHashSet};

/// No node starts at this instruction.
pub const NO_NODE: u32 = u32::MAX;
/// The graph's exit, as an immediate post-dominator.
pub const EXIT: u32 = u32::MAX - 1;

/// What a WET trace knows of one static instruction.
#[derive(Clone, Copy, Debug)]
pub struct StaticInsn {
    pub pc: u64,
    pub version: u32,
    /// A block holding it, and its index there (to reach its [`Insn`]).
    pub block: u32,
    pub index: u16,
    /// Use ports: 1 (control) + register ranges read + flags (0 or 1) + memory reads.
    pub ports: u16,
    /// Its first segment in the store: one per use port, then one for its values.
    pub first_seg: u32,
}

impl StaticInsn {
    /// Its store segment for values, after its use ports'.
    pub fn value_seg(&self) -> u32 {
        self.first_seg + self.ports as u32
    }
}

/// Ids, ports and control-flow facts of every instruction of a block table.
pub struct Statics {
    /// Per block id, where its instructions start in `ids` and `node_at` (len: blocks + 1).
    block_first: Vec<u32>,
    /// The static id of each block's each instruction.
    ids: Vec<u32>,
    /// The node starting at each block's each instruction, or [`NO_NODE`].
    node_at: Vec<u32>,
    /// Every static instruction, by id.
    pub insns: Vec<StaticInsn>,
    /// Each node's immediate post-dominator ([`EXIT`] where it is the exit or unknown).
    pub ipdom: Vec<u32>,
    /// Whether each node ends in a branch with two or more successors.
    pub branch: Vec<bool>,
    /// Segments of all instructions (use ports and values).
    pub segs: u32,
    /// Instructions decoded from the modules' files because the run never reached them.
    pub unreached: usize,
}

/// Instructions decoded, at most, of code the run never reached.
const STATIC_BUDGET: usize = 1 << 21;

/// Use ports of an instruction (see [`StaticInsn::ports`]).
pub fn ports_of(insn: &Insn) -> u16 {
    let mem = insn.refs.iter().filter(|r| r.access == Access::Read).count();
    mem_port_of(insn) + mem as u16
}

/// An instruction's first memory port: after control, its register ranges and its flags.
pub fn mem_port_of(insn: &Insn) -> u16 {
    (1 + insn.bytes.reads.len() + usize::from(insn.regs.flags_read != 0)) as u16
}

/// Whether control goes on to the next instruction after `f` (for graph building).
fn straight(f: Flow) -> bool {
    matches!(f, Flow::Next | Flow::Call { .. } | Flow::IndirectCall | Flow::Syscall)
}

impl Statics {
    /// A table of these instructions alone, no blocks or graph (for the formatters' tests).
    #[cfg(test)]
    pub(crate) fn of_insns(insns: Vec<StaticInsn>) -> Statics {
        Statics { block_first: vec![0], ids: vec![], node_at: vec![], insns, ipdom: vec![], branch: vec![], segs: 0, unreached: 0 }
    }

    /// Builds the table for `plans`, whose block `i` has code version `versions[i]`;
    /// `indirect` holds the (block, next block) pairs of indirect jumps the run took;
    /// `code(addr)` gives a module's code the run never reached (None where unknown).
    pub fn build<'c>(
        plans: &Plans,
        versions: &[u32],
        indirect: &FxHashSet<(u32, u32)>,
        machine: Machine,
        code: &dyn Fn(u64) -> Option<&'c [u8]>,
    ) -> Statics {
        struct Key {
            pc: u64,
            version: u32,
            len: u8,
            flow: Flow,
            /// A block holding it and its index there; None for code that never ran.
            at: Option<(u32, u16)>,
        }
        let n = plans.len();
        let mut keys = Vec::new();
        for (b, &version) in versions.iter().enumerate().take(n) {
            if let Some(p) = plans.get_plan(b as u32) {
                for (k, i) in p.insns.iter().enumerate() {
                    keys.push(Key { pc: i.pc, version, len: i.len, flow: i.flow, at: Some((b as u32, k as u16)) });
                }
            }
        }
        keys.sort_unstable_by_key(|k| (k.pc, k.version, k.at));
        keys.dedup_by_key(|k| (k.pc, k.version));
        let ran: FxHashSet<(u64, u32)> = keys.iter().map(|k| (k.pc, k.version)).collect();

        // Code the run never reached, decoded from the modules' files from every direct
        // target and fall-through that is not in the table, until it joins code that ran
        // or leaves (return, indirect jump, undecodable bytes, or the budget).
        let mut todo: Vec<u64> = Vec::new();
        for k in keys.iter().filter(|k| k.version == 0) {
            let next = k.pc + k.len as u64;
            let mut want = |t: u64| {
                if !ran.contains(&(t, 0)) {
                    todo.push(t);
                }
            };
            match k.flow {
                f if straight(f) => want(next),
                Flow::Jump { target, conditional } => {
                    want(target);
                    if conditional {
                        want(next);
                    }
                }
                _ => {}
            }
        }
        // Only fall-throughs past a block's end can be missing among straight-line ones;
        // the others are the next instruction of the same block.
        let mut seen: FxHashSet<u64> = FxHashSet::default();
        let mut budget = STATIC_BUDGET;
        let mut sem = Semantics::new(machine);
        let bits = machine.width.bits() as u32;
        while let Some(t) = todo.pop() {
            if budget == 0 || ran.contains(&(t, 0)) || !seen.insert(t) {
                continue;
            }
            let Some(bytes) = code(t) else { continue };
            let bytes = &bytes[..bytes.len().min(1 << 16)];
            let mut dec = iced_x86::Decoder::with_ip(bits, bytes, t, iced_x86::DecoderOptions::NONE);
            let mut first = true;
            while dec.can_decode() && budget > 0 {
                let i = dec.decode();
                if i.is_invalid() || (!first && (ran.contains(&(i.ip(), 0)) || !seen.insert(i.ip()))) {
                    break;
                }
                first = false;
                budget -= 1;
                let flow = sem.insn(&i).flow;
                keys.push(Key { pc: i.ip(), version: 0, len: i.len() as u8, flow, at: None });
                match flow {
                    f if straight(f) => continue,
                    Flow::Jump { target, conditional } => {
                        todo.push(target);
                        if conditional {
                            continue;
                        }
                    }
                    _ => {}
                }
                break;
            }
        }
        keys.sort_unstable_by_key(|k| (k.pc, k.version, k.at.is_none()));
        keys.dedup_by_key(|k| (k.pc, k.version));
        let key_of: FxHashMap<(u64, u32), u32> = keys.iter().enumerate().map(|(i, k)| ((k.pc, k.version), i as u32)).collect();

        // Node starts.
        let mut start = vec![false; keys.len()];
        for (b, &version) in versions.iter().enumerate().take(n) {
            if let Some(first) = plans.get_plan(b as u32).and_then(|p| p.insns.first()) {
                start[key_of[&(first.pc, version)] as usize] = true;
            }
        }
        for k in &keys {
            if let Flow::Jump { target, .. } = k.flow {
                if let Some(&t) = key_of.get(&(target, k.version)) {
                    start[t as usize] = true;
                }
            }
        }
        for k in 1..keys.len() {
            let (a, b) = (&keys[k - 1], &keys[k]);
            if a.version != b.version || a.pc + a.len as u64 != b.pc || !straight(a.flow) || a.at.is_some() != b.at.is_some() {
                start[k] = true;
            }
        }
        if let Some(s) = start.first_mut() {
            *s = true;
        }
        let mut node_of_key = vec![NO_NODE; keys.len()];
        let mut nodes = 0u32;
        for (k, &s) in start.iter().enumerate() {
            if s {
                node_of_key[k] = nodes;
                nodes += 1;
            }
        }

        // Successors, from each node's last instruction.
        let mut succ: Vec<Vec<u32>> = vec![Vec::new(); nodes as usize];
        let block_node = |b: u32| -> Option<u32> {
            let first = plans.get_plan(b)?.insns.first()?;
            Some(node_of_key[key_of[&(first.pc, versions[b as usize])] as usize])
        };
        let mut indirect_from: FxHashMap<(u64, u32), Vec<u32>> = FxHashMap::default();
        for &(from, to) in indirect {
            let (Some(p), Some(t)) = (plans.get_plan(from), block_node(to)) else { continue };
            if let Some(last) = p.insns.last() {
                indirect_from.entry((last.pc, versions[from as usize])).or_default().push(t);
            }
        }
        let mut node = 0u32;
        for k in 0..keys.len() {
            if start[k] {
                node = node_of_key[k];
            }
            if k + 1 < keys.len() && !start[k + 1] {
                continue;
            }
            let key = &keys[k];
            let at = |pc: u64| key_of.get(&(pc, key.version)).map(|&t| node_of_key[t as usize]).filter(|&t| t != NO_NODE);
            let next = key.pc + key.len as u64;
            let s = &mut succ[node as usize];
            match key.flow {
                f if straight(f) => s.push(at(next).unwrap_or(EXIT)),
                Flow::Jump { target, conditional } => {
                    s.push(at(target).unwrap_or(EXIT));
                    if conditional {
                        s.push(at(next).unwrap_or(EXIT));
                    }
                }
                Flow::IndirectJump => match indirect_from.get(&(key.pc, key.version)) {
                    Some(t) => s.extend_from_slice(t),
                    None => s.push(EXIT),
                },
                _ => s.push(EXIT),
            }
            s.sort_unstable();
            s.dedup();
        }
        let branch = succ.iter().map(|s| s.len() >= 2).collect();
        let ipdom = post_dominators(&succ);

        // Ids for the instructions that ran, in address order.
        let mut insns = Vec::new();
        let mut id_of_key = vec![u32::MAX; keys.len()];
        let mut segs = 0u32;
        for (k, key) in keys.iter().enumerate() {
            let Some((block, index)) = key.at else { continue };
            id_of_key[k] = insns.len() as u32;
            let p = ports_of(&plans.plan(block).insns[index as usize]);
            insns.push(StaticInsn { pc: key.pc, version: key.version, block, index, ports: p, first_seg: segs });
            segs += p as u32 + 1;
        }
        let mut block_first = Vec::with_capacity(n + 1);
        let mut ids = Vec::new();
        let mut node_at = Vec::new();
        for (b, &version) in versions.iter().enumerate().take(n) {
            block_first.push(ids.len() as u32);
            if let Some(p) = plans.get_plan(b as u32) {
                for i in &p.insns {
                    let k = key_of[&(i.pc, version)] as usize;
                    ids.push(id_of_key[k]);
                    node_at.push(node_of_key[k]);
                }
            }
        }
        block_first.push(ids.len() as u32);
        Statics { block_first, ids, node_at, insns, ipdom, branch, segs, unreached: keys.len() - ran.len() }
    }

    /// Static ids of block `b`'s instructions.
    #[inline]
    pub fn block(&self, b: u32) -> &[u32] {
        let (s, e) = (self.block_first[b as usize] as usize, self.block_first[b as usize + 1] as usize);
        &self.ids[s..e]
    }

    /// Blocks of the table.
    pub fn blocks(&self) -> usize {
        self.block_first.len() - 1
    }

    /// The node starting at instruction `index` of block `b`, or [`NO_NODE`].
    pub fn node(&self, b: u32, index: u16) -> u32 {
        self.node_at[self.block_first[b as usize] as usize + index as usize]
    }
}

/// Immediate post-dominators of a graph whose `succ` may name [`EXIT`]: dominators of the
/// reversed graph entered at the exit. Nodes that cannot reach the exit (an endless loop)
/// get [`EXIT`]: their branches' regions end only with their frame.
fn post_dominators(succ: &[Vec<u32>]) -> Vec<u32> {
    let n = succ.len();
    // Reversed graph: node 0 the exit, node v + 1 for v.
    let mut rev: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    for (v, s) in succ.iter().enumerate() {
        for &w in s {
            let w = if w == EXIT { 0 } else { w as usize + 1 };
            rev[w].push(v + 1);
        }
    }
    let idom = crate::program::dominators::dominators(&crate::program::dominators::Graph { succ: &rev });
    (1..=n)
        .map(|v| match idom.get(v).copied().flatten() {
            Some(0) | None => EXIT,
            Some(d) => (d - 1) as u32,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// if (c) { A } B; return — the branch's region ends at B; B's at the exit.
    #[test]
    fn post_dominators_of_an_if_and_a_loop() {
        // 0: branch -> 1 (body) or 2 (join); 1 -> 2; 2 -> exit.
        let g = vec![vec![1, 2], vec![2], vec![EXIT]];
        assert_eq!(post_dominators(&g), vec![2, 2, EXIT]);
        // 0 -> 1 (header: -> 2 body, 3 out); 2 -> 1; 3 -> exit.
        let g = vec![vec![1], vec![2, 3], vec![1], vec![EXIT]];
        assert_eq!(post_dominators(&g), vec![1, 3, 1, EXIT]);
        // An endless loop 0 <-> 1 never reaches the exit.
        let g = vec![vec![1], vec![0]];
        assert_eq!(post_dominators(&g), vec![EXIT, EXIT]);
    }
}
