//! WET on several threads whose sync records fall inside blocks (as atomics and system
//! calls put them): the interleaving resumes a thread in the middle of a block, and the
//! references that follow must be charged to that thread's block, not to the block of the
//! thread that ran last. The engine checks that each reference names an instruction of the
//! block it is charged to.

use dep_dcfg_out::program::symbols::Symbolizer;
use dep_dcfg_out::wet::{write, Options};
use dep_profile::container::Profile;
use dep_profile::simulate::{random_code, random_path, write_profile_with, Rng};
use dep_profile::Machine;
use dep_recover::Recovery;

#[test]
fn threads_resumed_inside_a_block_keep_their_references() {
    let (mut deps, mut runs) = (0u64, 0usize);
    for seed in 1..25u64 {
        let mut rng = Rng::new(seed);
        let n = 2 + rng.below(20) as usize;
        let code = random_code(&mut rng, n);
        let threads = 2 + (seed % 3) as usize;
        let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, 300, false)).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.dep");
        // With the collector's records of blocks' instructions: sync records before an
        // instruction of a block, numbered across threads.
        write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, seed, true).unwrap();
        let p = Profile::open(&path).unwrap();
        let rec = Recovery::new(&p, 2);
        let mut out = Vec::new();
        // A small budget, so that records also go through the store's spilled runs.
        let opts = Options { history: None, memory: 64 << 10 };
        match write(&rec, &Symbolizer::new(&[]), &opts, &mut out, None) {
            Ok(s) => {
                deps += s.deps;
                runs += s.runs;
            }
            Err(e) => panic!("seed {seed}, {threads} threads: {e}"),
        }
    }
    assert!(deps > 10_000 && runs > 0, "{deps} dependences, {runs} runs");
}

/// Every dependence of the comprehensive trace, as (pc, instance, pc depended on, its
/// instance), sorted.
fn comprehensive_deps(text: &str) -> Vec<(u64, u64, u64, u64)> {
    let mut lines = text.lines();
    let n: usize = lines.next().expect("N").parse().expect("N is a number");
    let mut pcs = std::collections::HashMap::new();
    let mut deps = Vec::new();
    for _ in 0..n {
        let head: Vec<&str> = lines.next().expect("static line").split(' ').collect();
        let id: u64 = head[0].parse().unwrap();
        let ports: usize = head[1].parse().unwrap();
        let pc = u64::from_str_radix(head[2], 16).unwrap();
        pcs.insert(id, pc);
        for _ in 0..ports {
            let k: usize = lines.next().unwrap().strip_prefix("SIZE ").expect("SIZE line").parse().unwrap();
            for _ in 0..k {
                let (x, rest) = lines.next().unwrap().trim_start().split_once(':').unwrap();
                let (y, z) = rest.split_once(' ').unwrap();
                deps.push((pc, x.parse().unwrap(), y.parse::<u64>().unwrap(), z.parse().unwrap()));
            }
        }
        let v = lines.next().unwrap();
        if let Some(k) = v.strip_prefix("VALUES ") {
            for _ in 0..k.parse::<usize>().unwrap() {
                lines.next().unwrap();
            }
        }
    }
    let mut out: Vec<_> = deps.into_iter().map(|(pc, i, d, di)| (pc, i, pcs[&d], di)).collect();
    out.sort_unstable();
    out
}

/// Every dependence of a limited history, as [`comprehensive_deps`] gives them.
fn history_deps(text: &str) -> Vec<(u64, u64, u64, u64)> {
    let p = |s: &str| {
        let (pc, i) = s.split_once('#').unwrap();
        (u64::from_str_radix(pc.strip_prefix("0x").unwrap(), 16).unwrap(), i.parse::<u64>().unwrap())
    };
    let mut out: Vec<_> = text
        .lines()
        .map(|l| {
            let (a, x) = l.split_once(" --> ").expect("a#b --> x#y");
            let ((a, b), (x, y)) = (p(a), p(x));
            (a, b, x, y)
        })
        .collect();
    out.sort_unstable();
    out
}

/// The comprehensive trace and `--count` take whole blocks by their templates, deferring
/// each run's dependences until something needs them (a sync point another thread may
/// follow); the limited history goes instruction by instruction. With room for every
/// dependence, the history lists what the trace does, with the same instance numbers, and
/// the count is their number: on one thread and on several whose sync records fall inside
/// blocks, with faults, signals and rep strings (blocks without a template) among them.
#[test]
fn templated_runs_find_what_instruction_by_instruction_runs_find() {
    let mut total = 0usize;
    for seed in 1..40u64 {
        let mut rng = Rng::new(seed * 7919);
        let n = 2 + rng.below(12) as usize;
        let code = random_code(&mut rng, n);
        let threads = 1 + (seed % 4) as usize;
        let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, 400, seed % 2 == 0)).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.dep");
        write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, seed, true).unwrap();
        let p = Profile::open(&path).unwrap();
        let rec = Recovery::new(&p, 2);
        let symbols = Symbolizer::new(&[]);
        let run = |history: Option<usize>| {
            let mut out = Vec::new();
            let s = write(&rec, &symbols, &Options { history, memory: 1 << 20 }, &mut out, None)
                .unwrap_or_else(|e| panic!("seed {seed}, {threads} threads: {e}"));
            (s, String::from_utf8(out).unwrap())
        };
        let (full, text) = run(None);
        let (_, hist) = run(Some(1 << 40));
        let (count, _) = run(Some(0));
        let (a, b) = (comprehensive_deps(&text), history_deps(&hist));
        assert_eq!(a.len(), b.len(), "seed {seed}, {threads} threads: dependences found");
        assert!(a == b, "seed {seed}, {threads} threads: the trace and the history disagree");
        assert_eq!((count.deps, count.instances), (full.deps, full.instances), "seed {seed}: --count");
        assert_eq!(full.deps as usize, a.len(), "seed {seed}");
        total += a.len();
    }
    assert!(total > 50_000, "{total} dependences");
}
