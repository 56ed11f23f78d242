//! Throughput of the profile codecs: DEP_c tag encoding and decoding on realistic block
//! address sequences, the DEP_m value stream and its word packing, and block pre-decoding
//! (`BlockPlan::build`).
//!
//! Run with `cargo bench -p dep-profile --bench codec` (add `-- --quick` for a fast pass).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dep_profile::packing;
use dep_profile::simulate::{random_code, Rng};
use dep_profile::tags::{TagDecoder, TagEncoder, TagItem};
use dep_profile::values::{ValueReader, ValueWriter};
use dep_profile::{BlockPlan, Machine, Semantics, Width};
use std::time::Duration;

/// Block start addresses as a program produces them: mostly within the current 64 KiB of
/// code (same H-tag), now and then another part of the module, rarely another module.
/// `switch_per_mille` sets how often the H-tag changes.
fn block_addresses(rng: &mut Rng, n: usize, switch_per_mille: u64) -> Vec<u64> {
    // (base, size) of the executable, libc and a JIT-like region.
    let modules = [(0x5555_5555_4000u64, 0x6_0000u64), (0x7f3a_1c22_8000, 0x17_0000), (0x7f3a_1d80_0000, 0x1_0000)];
    let mut module = 0;
    let mut page = modules[0].0 & !0xffff;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let r = rng.below(1000);
        if r < switch_per_mille / 4 {
            module = rng.below(modules.len() as u64) as usize;
        }
        if r < switch_per_mille {
            let (base, size) = modules[module];
            page = (base + rng.below(size)) & !0xffff;
        }
        // Block starts are byte-aligned but cluster: a hot loop revisits a few addresses.
        let off = if rng.below(4) == 0 { rng.below(0x1_0000) } else { 0x1200 + rng.below(64) * 11 };
        out.push(page | off);
    }
    out
}

fn tags(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    let n = 1 << 20;
    let mut g = c.benchmark_group("tags");
    g.throughput(Throughput::Elements(n as u64));
    g.measurement_time(Duration::from_secs(4)).sample_size(20);
    // 2% and 20% of blocks change the H-tag.
    for switch in [20u64, 200] {
        let addrs = block_addresses(&mut rng, n, switch);
        g.bench_with_input(BenchmarkId::new("encode", format!("{}pct_h_change", switch / 10)), &addrs, |b, addrs| {
            b.iter(|| {
                let mut e = TagEncoder::new(Width::W64, 0);
                for &a in addrs {
                    e.block(a);
                }
                black_box(e.words().len())
            })
        });
        let mut e = TagEncoder::new(Width::W64, 0);
        for &a in &addrs {
            e.block(a);
        }
        let bytes = e.to_bytes();
        g.bench_with_input(BenchmarkId::new("decode", format!("{}pct_h_change", switch / 10)), &bytes, |b, bytes| {
            b.iter(|| {
                let mut d = TagDecoder::new(Width::W64, bytes, 0).unwrap();
                let mut sum = 0u64;
                while let Some(item) = d.next_item().unwrap() {
                    if let TagItem::Block(a) = item {
                        sum = sum.wrapping_add(a);
                    }
                }
                black_box(sum)
            })
        });
    }
    g.finish();
}

fn values(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    let n = 1 << 20;
    // Stack and heap pointers, the values DEP_m mostly holds.
    let vals: Vec<u64> = (0..n)
        .map(|_| if rng.below(2) == 0 { 0x7ffc_a000_0000 + rng.below(1 << 16) * 8 } else { 0x5555_5600_0000 + rng.below(1 << 24) })
        .collect();
    let mut g = c.benchmark_group("values");
    g.throughput(Throughput::Elements(n as u64));
    g.measurement_time(Duration::from_secs(4)).sample_size(20);
    g.bench_function("write", |b| {
        b.iter(|| {
            let mut w = ValueWriter::new(Width::W64);
            for &v in &vals {
                w.push(v);
            }
            black_box(w.into_bytes().len())
        })
    });
    let mut w = ValueWriter::new(Width::W64);
    for &v in &vals {
        w.push(v);
    }
    let bytes = w.into_bytes();
    g.bench_function("read", |b| {
        b.iter(|| {
            let mut r = ValueReader::new(Width::W64, &bytes);
            let mut sum = 0u64;
            for _ in 0..n {
                sum = sum.wrapping_add(r.next().unwrap());
            }
            black_box(sum)
        })
    });
    g.finish();
}

/// DEP_m words of every class mixed at random, as an interpreter's stream holds them: small
/// loaded integers, pointers near the one before, and far ones; and a stream of mostly
/// small ones.
fn packing(c: &mut Criterion) {
    let mut rng = Rng::new(3);
    let n = 1 << 20;
    let vals: Vec<u64> = (0..n)
        .map(|_| match rng.below(8) {
            0..=1 => rng.below(1 << 8),
            2 => rng.below(1 << 16),
            3..=5 => 0x7ffc_a000_0000 + rng.below(1 << 16) * 8,
            6 => 0x5555_5600_0000 + rng.below(1 << 30),
            _ => rng.next(),
        })
        .collect();
    let raw: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    // Mostly one-byte words, as a bytecode interpreter reloading its operands records them
    // (the suite's interp: 97% of its DEP_m words), with a pointer now and then.
    let small: Vec<u8> = (0..n)
        .flat_map(|_| if rng.below(32) == 0 { 0x7ffc_a000_0000 + rng.below(1 << 16) * 8 } else { rng.below(1 << 8) }.to_le_bytes())
        .collect();
    let mut g = c.benchmark_group("packing");
    g.throughput(Throughput::Elements(n as u64));
    g.measurement_time(Duration::from_secs(4)).sample_size(20);
    for (suffix, raw) in [("", &raw), ("_mostly_small", &small)] {
        let mut packed = Vec::new();
        packing::pack(raw, 8, &mut packed).unwrap();
        g.bench_function(format!("pack{suffix}"), |b| {
            let mut out = Vec::with_capacity(packed.len() + 64);
            b.iter(|| {
                out.clear();
                packing::pack(raw, 8, &mut out).unwrap();
                black_box(out.len())
            })
        });
        g.bench_function(format!("unpack{suffix}"), |b| {
            let mut out = Vec::with_capacity(raw.len() + 64);
            b.iter(|| {
                out.clear();
                packing::unpack(&packed, 8, raw.len(), &mut out).unwrap();
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn plans(c: &mut Criterion) {
    let mut rng = Rng::new(3);
    let code = random_code(&mut rng, 4096);
    let insns: usize = {
        let mut sem = Semantics::new(Machine::x86_64(2696));
        code.iter().map(|(a, b)| BlockPlan::build(&mut sem, *a, b, None).unwrap().insns.len()).sum()
    };
    let mut g = c.benchmark_group("plans");
    g.throughput(Throughput::Elements(code.len() as u64));
    g.measurement_time(Duration::from_secs(4)).sample_size(20);
    let mut sem = Semantics::new(Machine::x86_64(2696));
    g.bench_function(format!("build_{}_blocks_{}_insns", code.len(), insns), |b| {
        b.iter(|| {
            let mut steps = 0;
            for (a, bytes) in &code {
                steps += BlockPlan::build(&mut sem, *a, bytes, None).unwrap().steps.len();
            }
            black_box(steps)
        })
    });
    g.finish();
}

criterion_group!(benches, tags, values, packing, plans);
criterion_main!(benches);
