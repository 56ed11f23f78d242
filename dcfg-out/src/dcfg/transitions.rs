//! DCFG-trace transition tables (spec section 3.5): for each current edge, prefix-free bit
//! codes naming the edge (or run of edges) that follows. Written from the observed out-edge
//! frequencies of the current edge's target node (Huffman, length-limited to 32 bits), with
//! a run of edges that can only follow each other folded into one row; read back into a
//! decoder that takes the fewest bits that name a row.

use crate::dcfg::seqcode::{BitReader, SeqError};
use std::collections::HashMap;

/// Longest code the spec allows.
pub const MAX_CODE_BITS: u8 = 32;
/// Longest run of edges one row names.
const MAX_RUN: usize = 16;

/// Canonical prefix-free code lengths for `weights` (Huffman; fixed-length where Huffman
/// would need more than 32 bits). One symbol gets the empty code.
pub fn code_lengths(weights: &[u64]) -> Vec<u8> {
    let n = weights.len();
    if n <= 1 {
        return vec![0; n];
    }
    // Huffman by repeated merging of the two lightest (n is an out-degree: small).
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        weights.iter().enumerate().map(|(i, &w)| std::cmp::Reverse((w.max(1), i))).collect();
    let mut parent = vec![usize::MAX; 2 * n - 1];
    let mut next = n;
    while heap.len() > 1 {
        let std::cmp::Reverse((wa, a)) = heap.pop().expect("two left");
        let std::cmp::Reverse((wb, b)) = heap.pop().expect("two left");
        parent[a] = next;
        parent[b] = next;
        heap.push(std::cmp::Reverse((wa.saturating_add(wb), next)));
        next += 1;
    }
    let lens: Vec<u8> = (0..n)
        .map(|i| {
            let (mut d, mut k) = (0u32, i);
            while parent[k] != usize::MAX {
                k = parent[k];
                d += 1;
            }
            d.min(255) as u8
        })
        .collect();
    if lens.iter().all(|&l| l <= MAX_CODE_BITS) {
        lens
    } else {
        let bits = (usize::BITS - (n - 1).leading_zeros()) as u8;
        vec![bits; n]
    }
}

/// Canonical codes for code lengths: (code, length) per symbol.
pub fn canonical(lens: &[u8]) -> Vec<(u32, u8)> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| (lens[i], i));
    let mut codes = vec![(0u32, 0u8); lens.len()];
    let (mut code, mut prev) = (0u64, 0u8);
    for (k, &i) in order.iter().enumerate() {
        if k > 0 {
            code = (code + 1) << (lens[i] - prev);
        } else {
            code <<= lens[i];
        }
        prev = lens[i];
        codes[i] = (code as u32, lens[i]);
    }
    codes
}

/// The code text of a row: `len` bits of `code`, as '0' and '1'.
pub fn code_text(code: u32, len: u8) -> String {
    (0..len).rev().map(|b| if (code >> b) & 1 == 1 { '1' } else { '0' }).collect()
}

/// One row of a transition table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub current: u32,
    pub code: u32,
    pub len: u8,
    pub next: Vec<u32>,
}

/// The edges of a graph as the trace encoder needs them.
pub struct EdgeGraph {
    /// Per edge id: its target node and count.
    pub target: HashMap<u32, (u64, u64)>,
    /// Per node: its out-edges, each with its count.
    pub out: HashMap<u64, Vec<(u32, u64)>>,
}

/// The encoder's view. An edge's code names it among its source node's out-edges, so it is
/// the same whichever edge came before: codes are kept per edge, with the run of edges
/// (through nodes of one out-edge) that its row names.
pub struct Encoder {
    /// Edge -> (code, length, the run of edges its row names, starting with it).
    codes: rustc_hash::FxHashMap<u32, (u32, u8, Vec<u32>)>,
    /// The same by edge id from `base`: (code, length, run length); what `encode` reads.
    dense: Vec<(u32, u8, u8)>,
    base: u32,
}

impl Encoder {
    /// Codes for every node's out-edges from their counts, runs through nodes with one
    /// out-edge folded in.
    pub fn new(g: &EdgeGraph) -> Encoder {
        let mut codes = rustc_hash::FxHashMap::default();
        for outs in g.out.values() {
            let lens = code_lengths(&outs.iter().map(|o| o.1).collect::<Vec<_>>());
            for ((edge, _), (code, len)) in outs.iter().zip(canonical(&lens)) {
                let mut run = vec![*edge];
                loop {
                    let last = *run.last().expect("not empty");
                    let Some(&(t, _)) = g.target.get(&last) else { break };
                    match g.out.get(&t).map(Vec::as_slice) {
                        Some([(only, _)]) if run.len() < MAX_RUN && !run.contains(only) => run.push(*only),
                        _ => break,
                    }
                }
                codes.insert(*edge, (code, len, run));
            }
        }
        let base = codes.keys().copied().min().unwrap_or(0);
        let top = codes.keys().copied().max().map_or(0, |m| m - base + 1);
        let mut dense = vec![(0, 0, 0); top as usize];
        for (e, (code, len, run)) in &codes {
            dense[(e - base) as usize] = (*code, *len, run.len() as u8);
        }
        Encoder { codes, dense, base }
    }

    /// Every row of the table: for each edge, the codes of what may follow it.
    pub fn rows(&self, g: &EdgeGraph) -> Vec<Row> {
        let mut rows = Vec::new();
        for (&current, &(t, _)) in &g.target {
            for (edge, _) in g.out.get(&t).map(Vec::as_slice).unwrap_or(&[]) {
                let (code, len, run) = &self.codes[edge];
                rows.push(Row { current, code: *code, len: *len, next: run.clone() });
            }
        }
        rows.sort_by_key(|r| (r.current, r.len, r.code));
        rows
    }

    /// Encodes `edges` (a chunk's edges after its first) into `out`. Every edge must be one
    /// of the graph's, following its predecessor.
    pub fn encode(&self, edges: &[u32], out: &mut crate::dcfg::seqcode::BitWriter) {
        let mut skip = 0;
        for (i, &e) in edges.iter().enumerate() {
            debug_assert!(skip > 0 || self.codes[&e].2.iter().zip(&edges[i..]).all(|(a, b)| a == b), "a run did not follow");
            self.push(e, &mut skip, out);
        }
    }

    /// Encodes the next edge of a chunk (after its first): its code, unless the row of an
    /// edge before it named it already (`skip` counts those still implied).
    #[inline]
    pub fn push(&self, e: u32, skip: &mut u32, out: &mut crate::dcfg::seqcode::BitWriter) {
        Self::push_code(self.code(e), skip, out)
    }

    /// An edge's (code, length, run length), for callers that cache it.
    #[inline]
    pub fn code(&self, e: u32) -> (u32, u8, u8) {
        self.dense[(e - self.base) as usize]
    }

    /// [`push`](Self::push) with the edge's [`code`](Self::code) at hand.
    #[inline]
    pub fn push_code((code, len, run): (u32, u8, u8), skip: &mut u32, out: &mut crate::dcfg::seqcode::BitWriter) {
        if *skip > 0 {
            *skip -= 1;
            return;
        }
        out.push(code, len);
        *skip = run as u32 - 1;
    }
}

/// Why a transition table or a decode with it failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error("transition code {0:?} is not a string of at most 32 '0' and '1'")]
    BadCode(String),
    #[error("edge {0} and code {1:?} appear twice")]
    Duplicate(u32, String),
    #[error("edge {0} has no transition for the bits read")]
    NoTransition(u32),
    #[error("a row has no next edge ids")]
    EmptyRow,
    #[error(transparent)]
    Seq(#[from] SeqError),
}

/// A transition table read from a trace, for decoding.
#[derive(Default, Debug)]
pub struct Table {
    rows: HashMap<(u32, u8, u32), Vec<u32>>,
}

impl Table {
    /// Adds a row given as in the file.
    pub fn add(&mut self, current: u32, code: &str, next: Vec<u32>) -> Result<(), TableError> {
        if code.len() > MAX_CODE_BITS as usize || !code.bytes().all(|c| c == b'0' || c == b'1') {
            return Err(TableError::BadCode(code.into()));
        }
        if next.is_empty() {
            return Err(TableError::EmptyRow);
        }
        let value = code.bytes().fold(0u32, |v, c| v << 1 | (c - b'0') as u32);
        if self.rows.insert((current, code.len() as u8, value), next).is_some() {
            return Err(TableError::Duplicate(current, code.into()));
        }
        Ok(())
    }

    /// The table compiled for decoding from `states` current edges, numbered by `state`
    /// (the rows of an edge it does not number are left out: decoding never reaches them),
    /// each next edge id turned into what a step gives by `item`.
    pub fn compile<T>(&self, states: usize, state: impl Fn(u32) -> Option<usize>, item: impl Fn(u32) -> T) -> Decoder<T> {
        let mut d = Decoder { roots: vec![NONE; states], nodes: Vec::new(), rows: Vec::new(), next: Vec::new() };
        // Shorter codes first: a row on the way to a longer code's place is read first, so
        // the longer one can never be; and a current edge's trie nodes lie together.
        let mut rows: Vec<_> = self.rows.iter().filter_map(|(&(cur, len, code), next)| Some((state(cur)?, len, code, next))).collect();
        rows.sort_unstable_by_key(|r| (r.0, r.1, r.2));
        'rows: for (s, len, code, next) in rows {
            // The link to follow: a root (`node` NONE) or a node's child for a bit.
            let (mut node, mut bit) = (NONE, s);
            for b in (0..len).rev() {
                node = match d.link(node, bit) {
                    NONE => d.grow(node, bit),
                    link if link & LEAF != 0 => continue 'rows,
                    link => link,
                };
                bit = (code >> b) as usize & 1;
            }
            let row = LEAF | d.rows.len() as u32;
            *d.link_mut(node, bit) = row;
            let at = d.next.len() as u32;
            d.next.extend(next.iter().map(|&e| item(e)));
            d.rows.push((at, d.next.len() as u32));
        }
        d
    }

    /// Decodes `count` edges, the first being `first`, calling `edge` with each (compiling
    /// the table first: for small tables and tests).
    pub fn decode(&self, first: u32, count: u64, bits: &mut BitReader, mut edge: impl FnMut(u32)) -> Result<(), TableError> {
        if count == 0 {
            return Ok(());
        }
        let mut ids: Vec<u32> = self.rows.keys().map(|k| k.0).collect();
        ids.push(first);
        ids.sort_unstable();
        ids.dedup();
        let state = |e: u32| ids.binary_search(&e).ok();
        let d = self.compile(ids.len(), state, |e| e);
        edge(first);
        let (mut done, mut current) = (1u64, first);
        while done < count {
            let next = d.step(state(current).unwrap_or(usize::MAX), current, bits)?;
            for &e in next.iter().take((count - done) as usize) {
                edge(e);
                done += 1;
            }
            current = *next.last().expect("rows are not empty");
        }
        Ok(())
    }
}

/// A link to nothing: no row's code begins with the bits read.
const NONE: u32 = u32::MAX;
/// A link to a row (its number in the low bits), not to a trie node.
const LEAF: u32 = 1 << 31;

/// A transition table compiled for decoding: each current edge's codes as a binary trie, so
/// a bit read costs an array index (where the table costs a hash of (edge, length, code)).
pub struct Decoder<T> {
    /// Per state (current edge): the link to its trie, or to its row of the empty code.
    roots: Vec<u32>,
    /// Trie nodes: the links for bits 0 and 1. A node's codes are longer than its depth, so
    /// there are none deeper than 31.
    nodes: Vec<[u32; 2]>,
    /// Per row: its range of `next`.
    rows: Vec<(u32, u32)>,
    next: Vec<T>,
}

impl<T> Decoder<T> {
    /// The link of state `bit` if `node` is NONE, else of `node`'s child for `bit`.
    fn link_mut(&mut self, node: u32, bit: usize) -> &mut u32 {
        if node == NONE {
            &mut self.roots[bit]
        } else {
            &mut self.nodes[node as usize][bit]
        }
    }

    fn link(&mut self, node: u32, bit: usize) -> u32 {
        *self.link_mut(node, bit)
    }

    /// A new node where [`link_mut`](Self::link_mut) names.
    fn grow(&mut self, node: u32, bit: usize) -> u32 {
        self.nodes.push([NONE; 2]);
        let n = (self.nodes.len() - 1) as u32;
        *self.link_mut(node, bit) = n;
        n
    }

    /// The edges that follow state `s` (edge `current`, named in errors): the row named by
    /// the fewest bits, read from `bits` (spec 3.5). A state out of range has no rows.
    #[inline]
    pub fn step(&self, s: usize, current: u32, bits: &mut BitReader) -> Result<&[T], TableError> {
        let mut link = self.roots.get(s).copied().unwrap_or(NONE);
        let mut len = 0u8;
        while link & LEAF == 0 {
            link = self.nodes[link as usize][bits.bit()? as usize];
            len += 1;
        }
        if link == NONE {
            // No row's code begins with the bits read: as a table read a length at a time
            // does, on to 32 bits (which may run out first), then no transition.
            while len < MAX_CODE_BITS {
                bits.bit()?;
                len += 1;
            }
            return Err(TableError::NoTransition(current));
        }
        let (a, b) = self.rows[(link & !LEAF) as usize];
        Ok(&self.next[a as usize..b as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcfg::seqcode::BitWriter;

    /// The spec's table and its two worked examples (section 3.5).
    #[test]
    fn spec_examples() {
        let mut t = Table::default();
        for (cur, code, next) in [
            (123, "0", vec![124]),
            (123, "1", vec![125]),
            (124, "", vec![456]),
            (125, "0", vec![543]),
            (125, "10", vec![542, 549]),
            (125, "11", vec![540, 541]),
        ] {
            t.add(cur, code, next).unwrap();
        }
        let d = HashMap::new();
        // The bits "110": one Base64 character 110000 = 'w'.
        let mut got = Vec::new();
        t.decode(123, 4, &mut BitReader::new("w", &d), |e| got.push(e)).unwrap();
        assert_eq!(got, [123, 125, 542, 549]);
        // The bit "0": 'A'.
        got.clear();
        t.decode(123, 3, &mut BitReader::new("A", &d), |e| got.push(e)).unwrap();
        assert_eq!(got, [123, 124, 456]);
        assert_eq!(t.add(123, "1", vec![7]), Err(TableError::Duplicate(123, "1".into())));
        assert_eq!(t.add(1, "012", vec![7]), Err(TableError::BadCode("012".into())));
    }

    #[test]
    fn codes_are_prefix_free_and_short_for_frequent_edges() {
        for weights in [vec![5u64], vec![1, 1], vec![100, 1, 1, 1], vec![1; 9], (0..40).map(|i| 1u64 << i.min(60)).collect()] {
            let lens = code_lengths(&weights);
            assert!(lens.iter().all(|&l| l <= MAX_CODE_BITS));
            let codes = canonical(&lens);
            for (i, a) in codes.iter().enumerate() {
                for b in &codes[i + 1..] {
                    let l = a.1.min(b.1);
                    assert!(
                        weights.len() == 1 || a.1 == 0 && b.1 == 0 || (a.0 >> (a.1 - l)) != (b.0 >> (b.1 - l)),
                        "{a:?} {b:?} share a prefix"
                    );
                }
            }
            let top = *weights.iter().max().unwrap();
            if weights.iter().filter(|&&w| w == top).count() == 1 {
                let heaviest = weights.iter().position(|&w| w == top).unwrap();
                assert_eq!(lens[heaviest], *lens.iter().min().unwrap(), "{weights:?}");
            }
        }
    }

    /// Random walks on random graphs encode and decode back, runs included.
    #[test]
    fn encode_decode_round_trip() {
        let mut seed = 3u64;
        let mut rnd = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..50 {
            let nodes = 2 + rnd(30);
            // Edges: each node gets 1-4 out-edges to random nodes.
            let mut target = HashMap::new();
            let mut out: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
            let mut id = 1u32;
            for n in 0..nodes {
                let fan = if rnd(3) == 0 { 1 } else { 4 };
                for _ in 0..1 + rnd(fan) {
                    let t = rnd(nodes);
                    target.insert(id, (t, 0));
                    out.entry(n).or_default().push((id, 0));
                    id += 1;
                }
            }
            // A walk, counting edges.
            let mut walk = Vec::new();
            let mut node = 0;
            for _ in 0..2000 {
                let outs = &out[&node];
                let (e, _) = outs[rnd(outs.len() as u64) as usize];
                walk.push(e);
                node = target[&e].0;
            }
            for e in &walk {
                target.get_mut(e).unwrap().1 += 1;
                let src = out.iter().find(|(_, v)| v.iter().any(|(x, _)| x == e)).map(|(n, _)| *n).unwrap();
                out.get_mut(&src).unwrap().iter_mut().find(|(x, _)| x == e).unwrap().1 += 1;
            }
            let g = EdgeGraph { target, out };
            let enc = Encoder::new(&g);
            let mut w = BitWriter::default();
            enc.encode(&walk[1..], &mut w);
            let text = crate::dcfg::seqcode::compress_repeats(&w.finish());
            let mut table = Table::default();
            for r in enc.rows(&g) {
                table.add(r.current, &code_text(r.code, r.len), r.next).unwrap();
            }
            let d = HashMap::new();
            let mut got = Vec::new();
            table.decode(walk[0], walk.len() as u64, &mut BitReader::new(&text, &d), |e| got.push(e)).unwrap();
            assert_eq!(got, walk);
        }
    }

    /// Decoding as the spec reads it, a code length at a time over the table's rows.
    fn by_lengths(t: &Table, first: u32, count: u64, bits: &mut BitReader) -> Result<Vec<u32>, TableError> {
        let (mut out, mut current) = (vec![first], first);
        while (out.len() as u64) < count {
            let (mut code, mut len) = (0u32, 0u8);
            let next = loop {
                if let Some(n) = t.rows.get(&(current, len, code)) {
                    break n;
                }
                if len == MAX_CODE_BITS {
                    return Err(TableError::NoTransition(current));
                }
                code = code << 1 | bits.bit()? as u32;
                len += 1;
            };
            out.extend(next.iter().take((count - out.len() as u64) as usize));
            current = *next.last().unwrap();
        }
        Ok(out)
    }

    /// The compiled trie decodes as the table read a length at a time does, on tables whose
    /// codes are not prefix-free (the shorter code wins) and edges without rows, to the same
    /// edges or the same error (bits run short, or no transition after 32 bits).
    #[test]
    fn compiled_tables_decode_as_the_spec_reads() {
        let mut rng = dep_profile::simulate::Rng::new(11);
        let mut rnd = |n: u64| rng.below(n);
        let d = HashMap::new();
        // How often each outcome came: edges, bits short, no transition.
        let mut seen = [0; 3];
        for _ in 0..2000 {
            let mut t = Table::default();
            for _ in 0..rnd(12) {
                let code: String = (0..rnd(5)).map(|_| if rnd(2) == 0 { '0' } else { '1' }).collect();
                let next = (0..1 + rnd(3)).map(|_| 1 + rnd(6) as u32).collect();
                let _ = t.add(1 + rnd(5) as u32, &code, next);
            }
            let text: String = (0..rnd(12)).map(|_| ['A', 'B', 'f', '-', 'V', 'q'][rnd(6) as usize]).collect();
            let (first, count) = (1 + rnd(6) as u32, 1 + rnd(40));
            let mut got = Vec::new();
            let compiled = t.decode(first, count, &mut BitReader::new(&text, &d), |e| got.push(e)).map(|()| got);
            assert_eq!(compiled, by_lengths(&t, first, count, &mut BitReader::new(&text, &d)), "{t:?} from {first}, {count} edges, {text}");
            seen[match compiled {
                Ok(_) => 0,
                Err(TableError::Seq(SeqError::Short(_))) => 1,
                Err(_) => 2,
            }] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "outcomes {seen:?}");
    }
}
