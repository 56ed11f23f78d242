//! Profile statistics against simulated profiles: counts and baseline streams must match
//! what the truth stream says, computed here independently; CF_bit against a hand-built
//! run whose branch outcomes are known.

use dep_profile::container::{Profile, Section};
use dep_profile::simulate::{random_code, random_path, write_profile, PathStep, Rng};
use dep_profile::truth::{self, TruthKind};
use dep_profile::Machine;
use dep_recover::stats::{self, profile_sizes, render_text, Size, StatsSink};
use dep_recover::{Recovery, Source};

fn simulate(dir: &tempfile::TempDir, code: &[(u64, Vec<u8>)], paths: &[Vec<PathStep>], seed: u64) -> Profile {
    let path = dir.path().join(format!("sim{seed}.dep"));
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), code, paths, seed).unwrap();
    Profile::open(&path).unwrap()
}

/// What the truth stream of one thread says, computed without the recovery code.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    blocks: u64,
    interrupted: u64,
    instructions: u64,
    reads: u64,
    writes: u64,
    bb_pc: Vec<u8>,
    mem_addr: Vec<u8>,
}

fn expected(p: &Profile) -> Vec<Expected> {
    let mut out = Vec::new();
    for t in &p.threads {
        let mut e = Expected::default();
        for c in &t.chunks {
            let bytes = p.chunk(c).unwrap().decompress(Section::Truth).unwrap();
            let recs: Vec<_> = truth::records(&bytes).unwrap().map(Result::unwrap).collect();
            for (i, r) in recs.iter().enumerate() {
                match r.kind {
                    TruthKind::Block => {
                        e.blocks += 1;
                        e.bb_pc.extend_from_slice(&r.pc.to_le_bytes());
                        let stop = recs[i + 1..].iter().find(|n| {
                            !matches!(
                                n.kind,
                                TruthKind::Read
                                    | TruthKind::Write
                                    | TruthKind::SyscallReturn
                                    | TruthKind::KernelRead
                                    | TruthKind::KernelWrite
                            )
                        });
                        match stop {
                            Some(n) if n.kind == TruthKind::Interrupted => {
                                e.interrupted += 1;
                                e.instructions += n.size as u64 + 1;
                            }
                            _ => e.instructions += r.size as u64,
                        }
                    }
                    TruthKind::Read | TruthKind::Write => {
                        if r.kind == TruthKind::Read {
                            e.reads += 1;
                        } else {
                            e.writes += 1;
                        }
                        e.mem_addr.extend_from_slice(&r.addr.to_le_bytes());
                    }
                    // The kernel's accesses are no references of the program's: stats leaves them out.
                    TruthKind::Interrupted | TruthKind::SyscallReturn | TruthKind::KernelRead | TruthKind::KernelWrite => {}
                    TruthKind::Rep | TruthKind::RepRead | TruthKind::RepWrite | TruthKind::RepEnd => {
                        panic!("the simulator observes rep strings per iteration")
                    }
                }
            }
        }
        out.push(e);
    }
    out
}

fn check_simulated(seed: u64, threads: usize, len: usize, events: bool) {
    let mut rng = Rng::new(seed);
    let n = 1 + rng.below(40) as usize;
    let code = random_code(&mut rng, n);
    let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, len, events)).collect();
    let dir = tempfile::tempdir().unwrap();
    let p = simulate(&dir, &code, &paths, seed);
    let want = expected(&p);
    let rec = Recovery::new(&p, 1);

    let mut dep = StatsSink::new(p.width).keep_streams(true);
    rec.events(Source::Dep).run(&mut dep).unwrap();
    let mut tru = StatsSink::new(p.width).keep_streams(true).with_plans(&rec.plans);
    rec.events(Source::Truth).run(&mut tru).unwrap();
    for (i, w) in want.iter().enumerate() {
        let s = dep.streams(i as u32).unwrap();
        assert!(s.bb_pc == w.bb_pc, "seed {seed} thread {i}: BB_pc stream differs from the truth's block addresses");
        assert!(s.mem_addr == w.mem_addr, "seed {seed} thread {i}: Mem_addr stream differs from the truth's addresses");
        let t = tru.streams(i as u32).unwrap();
        assert!(t.bb_pc == w.bb_pc && t.mem_addr == w.mem_addr, "seed {seed} thread {i}: truth replay streams");
    }
    let mut got = dep.into_stats().unwrap();
    let from_truth = tru.into_stats().unwrap();
    assert_eq!(got.threads.len(), threads);
    let sizes = profile_sizes(&p).unwrap();
    got.add_profile_sizes(&sizes);

    let mut total_blocks = 0;
    let mut total_refs = 0;
    for (i, (t, w)) in got.threads.iter().zip(&want).enumerate() {
        let ctx = format!("seed {seed} thread {i}");
        assert_eq!(t.thread, Some(i as u32), "{ctx}");
        assert_eq!(t.blocks, w.blocks, "{ctx}");
        assert_eq!(t.interrupted_blocks, w.interrupted, "{ctx}");
        assert_eq!(t.instructions, w.instructions, "{ctx}");
        assert_eq!((t.reads, t.writes, t.refs), (w.reads, w.writes, w.reads + w.writes), "{ctx}");
        assert_eq!(t.bb_pc.raw, 8 * w.blocks, "{ctx}");
        assert_eq!(t.mem_addr.raw, 8 * (w.reads + w.writes), "{ctx}");
        // Every simulated block ends in `ret`: one indirect target per completed block.
        assert_eq!(t.conditional_branches, 0, "{ctx}");
        assert_eq!(t.indirect_branches, w.blocks - w.interrupted, "{ctx}");
        assert_eq!(t.cf_bit.raw, 8 * t.indirect_branches, "{ctx}");
        assert_eq!(t.blocks_without_plan, 0, "{ctx}");
        // Compressed sizes: deterministic, and what zstd makes of the same bytes at once.
        let ft = &from_truth.threads[i];
        assert_eq!((ft.blocks, ft.instructions, ft.reads, ft.writes), (t.blocks, t.instructions, t.reads, t.writes), "{ctx}");
        assert_eq!(ft.bb_pc, t.bb_pc, "{ctx}");
        assert_eq!(ft.mem_addr, t.mem_addr, "{ctx}");
        if !events {
            assert_eq!(ft.cf_bit, t.cf_bit, "{ctx}: without signals, truth replay sees the same branches");
        }
        for (name, size, bytes) in [("BB_pc", t.bb_pc, &w.bb_pc), ("Mem_addr", t.mem_addr, &w.mem_addr)] {
            let c = size.compressed.unwrap();
            if bytes.is_empty() {
                assert_eq!(c, 0, "{ctx} {name}");
                continue;
            }
            // The same bytes handed to one streaming encoder in a single write.
            let mut enc = zstd::stream::Encoder::new(Vec::new(), stats::ZSTD_LEVEL).unwrap();
            std::io::Write::write_all(&mut enc, bytes).unwrap();
            let once = enc.finish().unwrap().len() as u64;
            assert!(c.abs_diff(once) <= once / 50 + 16, "{ctx} {name}: staged {c} vs at once {once}");
        }
        // DEP sizes: the chunk headers, summed.
        let mut dep_c = Size { raw: 0, compressed: Some(0) };
        let mut dep_m = dep_c;
        for c in &p.threads[i].chunks {
            let v = p.chunk(c).unwrap();
            dep_c.raw += v.decompress(Section::Tags).unwrap().len() as u64;
            dep_m.raw += v.decompress(Section::Values).unwrap().len() as u64;
            *dep_c.compressed.as_mut().unwrap() += v.compressed(Section::Tags).len() as u64;
            *dep_m.compressed.as_mut().unwrap() += v.compressed(Section::Values).len() as u64;
        }
        assert_eq!(t.dep_c, Some(dep_c), "{ctx}");
        assert_eq!(t.dep_m, Some(dep_m), "{ctx}");
        assert_eq!(t.chunks, Some(p.threads[i].chunks.len() as u64), "{ctx}");
        assert_eq!(t.truth.unwrap().raw, 24 * (w.blocks + w.interrupted + w.reads + w.writes), "{ctx}");
        // (The ratios are checked on hand-computed figures in cf_bit_taken_and_not_taken.)
        total_blocks += w.blocks;
        total_refs += w.reads + w.writes;
    }
    let tot = &got.total;
    assert_eq!(tot.thread, None);
    assert_eq!(tot.blocks, total_blocks);
    assert_eq!(tot.refs, total_refs);
    assert_eq!(tot.bb_pc.raw, 8 * total_blocks);
    assert_eq!(tot.mem_addr.raw, 8 * total_refs);
    assert_eq!(tot.bb_pc.compressed, Some(got.threads.iter().map(|t| t.bb_pc.compressed.unwrap()).sum()));
    assert_eq!(tot.dep_c.unwrap().raw, sizes.iter().map(|s| s.dep_c.raw).sum::<u64>());
    assert_eq!(tot.dep_m.unwrap().compressed, Some(sizes.iter().map(|s| s.dep_m.compressed.unwrap()).sum::<u64>()));

    // The entry point, which counts chunk by chunk and merges, agrees, on one worker or
    // several; without compression it gives the same raw sizes.
    assert_eq!(stats::compute(&rec, Source::Dep, true).unwrap(), got, "seed {seed}");
    let parallel = Recovery::new(&p, 3);
    assert_eq!(stats::compute(&parallel, Source::Dep, true).unwrap(), got, "seed {seed}, 3 workers");
    let raw = stats::compute(&parallel, Source::Dep, false).unwrap();
    for (r, g) in raw.threads.iter().zip(&got.threads) {
        let plain = |s: Size| Size { raw: s.raw, compressed: None };
        let strip = |t: &stats::ThreadStats| stats::ThreadStats {
            bb_pc: plain(t.bb_pc),
            cf_bit: plain(t.cf_bit),
            mem_addr: plain(t.mem_addr),
            ratios: Default::default(),
            ..t.clone()
        };
        assert_eq!(strip(r), strip(g), "seed {seed}: without compression");
    }
}

#[test]
fn counts_and_baselines_match_the_truth() {
    for seed in 0..30 {
        check_simulated(seed, 1, 300, false);
    }
    for seed in 30..60 {
        check_simulated(seed, 1 + (seed % 3) as usize, 400, true);
    }
}

#[test]
fn long_streams_cross_the_compressor_staging() {
    // Tens of thousands of blocks: several 64 KiB stages per stream and many chunks.
    check_simulated(1000, 2, 30_000, true);
    check_simulated(1001, 1, 30_000, false);
}

/// Code whose branch outcomes the path decides.
const A: u64 = 0x40_1000; // test eax,eax ; je T
const F: u64 = 0x40_1004; // fall-through of A: jmp rax
const T: u64 = 0x40_1012; // target of A: ret
const C: u64 = 0x40_1100; // call rel32 (direct: no bits)
const D: u64 = 0x40_1200; // call rax
const E: u64 = 0x40_1300; // nop (falls through: nothing)
const L: u64 = 0x40_1400; // loop L (conditional, target itself)

fn branch_code() -> Vec<(u64, Vec<u8>)> {
    vec![
        (A, vec![0x85, 0xc0, 0x74, 0x0e]),
        (F, vec![0xff, 0xe0]),
        (T, vec![0xc3]),
        (C, vec![0xe8, 0, 0, 0, 0]),
        (D, vec![0xff, 0xd0]),
        (E, vec![0x90]),
        (L, vec![0xe2, 0xfe]),
    ]
}

fn targets(addrs: &[u64], bits: u8) -> Vec<u8> {
    let mut v: Vec<u8> = addrs.iter().flat_map(|a| a.to_le_bytes()).collect();
    v.push(bits);
    v
}

#[test]
fn cf_bit_taken_and_not_taken() {
    let code = branch_code();
    let idx = |a: u64| PathStep::Block(code.iter().position(|(x, _)| *x == a).unwrap());
    // Thread 0: A T A F A T C D E A T L L F A, then the thread ends after A's branch.
    let t0: Vec<PathStep> = [A, T, A, F, A, T, C, D, E, A, T, L, L, F, A].into_iter().map(idx).collect();
    // Thread 1: a signal between a branch and its outcome; a fault inside A.
    let t1 = vec![
        idx(A),
        PathStep::Signal(10),
        idx(T), // the handler's block: its ret has no block after it in the handler
        PathStep::SignalReturn,
        idx(F), // A's outcome: not taken
        PathStep::Interrupt(0, 1),
        idx(T),
        PathStep::SignalReturn,
        idx(T),
    ];
    let dir = tempfile::tempdir().unwrap();
    let p = simulate(&dir, &code, &[t0, t1], 5);
    let rec = Recovery::new(&p, 1);
    let mut sink = StatsSink::new(p.width).keep_streams(true);
    rec.events(Source::Dep).run(&mut sink).unwrap();

    // Thread 0 bits, in order: T taken, F not, T taken, T taken, L taken, F not, and A's
    // unresolved last branch not taken: 1,0,1,1,1,0,0 least significant first = 0x1d.
    // Targets: the ret of T and jmp of F to A, ret to C, call rax to E, ret to L, jmp to A.
    let want0 = targets(&[A, A, C, E, L, A], 0x1d);
    assert_eq!(sink.streams(0).unwrap().cf_bit, &want0[..]);
    // Thread 1: the handler's ret is unresolved (0); A's branch resumes after the handler
    // and is not taken; F's jmp reaches the interrupted A; the second handler's ret and the
    // final ret are unresolved.
    let want1 = targets(&[0, A, 0, 0], 0x00);
    assert_eq!(sink.streams(1).unwrap().cf_bit, &want1[..]);

    let s = sink.into_stats().unwrap();
    let t = &s.threads[0];
    assert_eq!((t.conditional_branches, t.taken_branches, t.indirect_branches, t.unresolved_branches), (7, 4, 6, 1));
    assert_eq!(t.cf_bit.raw, 1 + 6 * 8);
    assert_eq!(t.blocks, 15);
    assert_eq!(t.bb_pc.raw, 15 * 8);
    let t = &s.threads[1];
    assert_eq!((t.conditional_branches, t.taken_branches, t.indirect_branches, t.unresolved_branches), (1, 0, 4, 3));
    assert_eq!((t.blocks, t.interrupted_blocks, t.signals), (6, 1, 2));
    assert_eq!(t.instructions, 2 + 1 + 1 + 2 + 1 + 1); // A, T, F, A up to its je, T, T
    assert_eq!(t.cf_bit.raw, 1 + 4 * 8);
    assert_eq!(s.total.conditional_branches, 8);
    assert_eq!(s.total.cf_bit.raw, 49 + 33);
    assert_eq!(s.total.ratios.cf_bit_to_bb_pc.unwrap().raw, 82.0 / (21.0 * 8.0));

    // DEP_c sizes worked out by hand from FORMAT.md's tag words. Thread 0: chunk start (4
    // words), thread start (2), H change to 0x0040 in the short form (2), 15 L-tags, thread
    // end (2): 25 words, 50 bytes, against BB_pc's 15 x 8 = 120 bytes: 41.67%. Thread 1:
    // the same 8 words first, then A, signal (3), T, sigreturn (2), F, A, interruption (3),
    // signal (3), T, sigreturn (2), T: 19 words; thread end (2): 29 words, 58 bytes.
    let sized = stats::compute(&rec, Source::Dep, false).unwrap();
    // The chunk-parallel counts give the hand-worked figures above too.
    let t = &sized.threads[0];
    assert_eq!((t.conditional_branches, t.taken_branches, t.indirect_branches, t.unresolved_branches), (7, 4, 6, 1));
    assert_eq!((t.cf_bit.raw, t.blocks, t.bb_pc.raw), (1 + 6 * 8, 15, 15 * 8));
    let t = &sized.threads[1];
    assert_eq!((t.conditional_branches, t.taken_branches, t.indirect_branches, t.unresolved_branches), (1, 0, 4, 3));
    assert_eq!((t.blocks, t.interrupted_blocks, t.signals, t.instructions, t.cf_bit.raw), (6, 1, 2, 8, 1 + 4 * 8));
    assert_eq!(sized.threads[0].dep_c.unwrap().raw, 50);
    assert_eq!(sized.threads[1].dep_c.unwrap().raw, 58);
    assert_eq!(sized.threads[0].ratios.dep_c_to_bb_pc.unwrap().raw, 50.0 / 120.0);
    assert_eq!(sized.total.ratios.dep_c_to_bb_pc.unwrap().raw, 108.0 / 168.0);
    let text = render_text(&sized);
    assert!(text.contains("41.67%") && text.contains("64.29%"), "hand-computed percentages missing from:\n{text}");

    // Truth replay, told the plans, sees thread 0's branches identically (no signals there).
    let mut tru = StatsSink::new(p.width).keep_streams(true).with_plans(&rec.plans);
    rec.events(Source::Truth).run(&mut tru).unwrap();
    tru.marker(0, dep_recover::Marker::ThreadEnd).unwrap();
    assert_eq!(tru.streams(0).unwrap().cf_bit, &want0[..]);
    // Truth replay carries the block table's plans itself: a sink not told them sees the
    // same branches.
    let mut blind = StatsSink::new(p.width).keep_streams(true);
    rec.events(Source::Truth).run(&mut blind).unwrap();
    blind.marker(0, dep_recover::Marker::ThreadEnd).unwrap();
    assert_eq!(blind.streams(0).unwrap().cf_bit, &want0[..]);
    let b = blind.into_stats().unwrap();
    assert_eq!((b.total.blocks_without_plan, b.total.blocks), (0, 21));
}

use dep_recover::Sink as _;

#[test]
fn text_and_json_renderings() {
    let mut rng = Rng::new(77);
    let code = random_code(&mut rng, 20);
    let paths: Vec<_> = (0..2).map(|_| random_path(&mut rng, &code, 500, true)).collect();
    let dir = tempfile::tempdir().unwrap();
    let p = simulate(&dir, &code, &paths, 77);
    let rec = Recovery::new(&p, 1);
    let s = stats::compute(&rec, Source::Dep, true).unwrap();
    let text = render_text(&s);
    for want in ["thread 0:", "thread 1:", "total:", "BB_pc", "DEP_c", "CF_bit", "Mem_addr", "DEP_m", "60.33%", "23.23%", "47.79%"] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
    assert_eq!(v["total"]["blocks"], s.total.blocks);
    assert_eq!(v["threads"][1]["bb_pc"]["raw"], s.threads[1].bb_pc.raw);
    assert_eq!(v["paper"]["dep_c_to_bb_pc"], 0.6033);
    assert!(v["total"]["ratios"]["dep_m_to_mem_addr"]["compressed"].is_f64());
    // Without compression only raw sizes are known.
    let raw = stats::compute(&rec, Source::Dep, false).unwrap();
    assert_eq!(raw.total.bb_pc.compressed, None);
    assert_eq!(raw.total.bb_pc.raw, s.total.bb_pc.raw);
    assert_eq!(raw.total.ratios.dep_c_to_bb_pc.unwrap().compressed, None);
    assert!(render_text(&raw).contains(" - "));
    assert!(text.lines().all(|l| l == l.trim_end()), "no trailing blanks");
}

/// A profile cut short (mid-record, or where a killed recording stops) ends its threads
/// without their end markers: the chunk-parallel counts give up the exit still waiting at
/// the end of each thread's stream as the sequential sink does, so their raw sizes agree
/// (they differed by a branch, and `dep stats` failed its cross-check instead of naming
/// the cut).
#[test]
fn counts_agree_on_a_profile_cut_short() {
    let mut cut_threads = 0;
    for seed in 0..16u64 {
        let mut rng = Rng::new(seed);
        let n = 1 + rng.below(40) as usize;
        let code = random_code(&mut rng, n);
        let paths: Vec<_> = (0..2).map(|_| random_path(&mut rng, &code, 3000, seed % 2 == 0)).collect();
        let dir = tempfile::tempdir().unwrap();
        let whole = simulate(&dir, &code, &paths, seed);
        let bytes = std::fs::read(whole.path()).unwrap();
        for k in 1..8 {
            let cut = dir.path().join(format!("cut{k}.dep"));
            std::fs::write(&cut, &bytes[..bytes.len() * k / 8]).unwrap();
            let Ok(p) = Profile::open(&cut) else { continue };
            let rec = Recovery::new(&p, 3);
            let mut seq = StatsSink::new(p.width);
            if rec.events(Source::Dep).run(&mut seq).is_err() {
                continue;
            }
            let want = seq.into_stats().unwrap();
            let got = stats::compute(&rec, Source::Dep, true).unwrap_or_else(|e| panic!("seed {seed} cut {k}/8: {e}"));
            for (g, w) in got.threads.iter().zip(&want.threads) {
                let counts = |t: &stats::ThreadStats| {
                    (
                        t.blocks,
                        t.conditional_branches,
                        t.indirect_branches,
                        t.unresolved_branches,
                        t.bb_pc.raw,
                        t.cf_bit.raw,
                        t.mem_addr.raw,
                    )
                };
                assert_eq!(counts(g), counts(w), "seed {seed} cut {k}/8 thread {:?}", g.thread);
                cut_threads += 1;
            }
        }
    }
    assert!(cut_threads > 50, "only {cut_threads} threads of cut profiles compared");
}
