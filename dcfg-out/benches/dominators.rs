//! Dominators and natural loops of a CFG-shaped graph of 10^5 nodes (chains of blocks with
//! forward branches, loops back to earlier blocks, and calls modelled as jumps): the size of
//! the largest routines a DCFG meets.
//!
//! Run with `cargo bench -p dep-dcfg-out --bench dominators`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use dep_dcfg_out::program::dominators::{dominators, loops, Graph};

fn cfg(n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut s = seed;
    let mut rnd = |m: usize| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 33) as usize % m
    };
    (0..n)
        .map(|v| {
            let mut succ = Vec::new();
            if v + 1 < n {
                succ.push(v + 1);
            }
            match rnd(10) {
                0..=3 if v + 2 < n => succ.push(v + 2 + rnd((n - v - 2).min(50))),
                4 if v > 0 => succ.push(v - 1 - rnd(v.min(200))),
                _ => {}
            }
            succ
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let succ = cfg(100_000, 7);
    let g = Graph { succ: &succ };
    c.bench_function("dominators_100k", |b| b.iter(|| black_box(dominators(&g))));
    let idom = dominators(&g);
    c.bench_function("loops_100k", |b| b.iter(|| black_box(loops(&g, &idom).len())));
}

criterion_group!(benches, bench);
criterion_main!(benches);
