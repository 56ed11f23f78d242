//! Recovery against the software reference collector: for random code (every kind of
//! reference), random paths with chunk hand-offs, signals and faults, the recovered trace
//! must equal the truth stream byte for byte, sequentially and in parallel.

use dep_profile::container::Profile;
use dep_profile::simulate::{program_path, random_code, random_path, random_program, write_profile, write_profile_with, PathStep, Rng};
use dep_profile::Machine;
use dep_recover::{BlockEvent, Engine, Format, MemEvent, Recovery, Renderer, Sink, Source};

fn render(rec: &Recovery, source: Source, format: Format, parallel: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if parallel {
        rec.events(source).rendered(format, &mut out).unwrap();
    } else {
        let mut r = Renderer::new(format, &mut out);
        rec.events(source).run(&mut r).unwrap();
        r.into_inner().unwrap();
    }
    out
}

fn check_seed(seed: u64, threads: usize, len: usize, events: bool) -> Compiled {
    let mut rng = Rng::new(seed);
    let n = 1 + rng.below(40) as usize;
    check_code(seed, rng, n, threads, len, events)
}

/// Blocks recovered by compiled code, per engine (walk, compiled, compiled without popcnt).
type Compiled = [u64; 3];

fn engine_index(e: Engine) -> usize {
    match e {
        Engine::Walk => 0,
        Engine::Compiled => 1,
        Engine::CompiledWithoutPopcnt => 2,
    }
}

/// Both compiled engines really compiled (on an x86-64 host); the walk never did.
fn assert_engines_ran(c: Compiled) {
    assert_eq!(c[0], 0, "the interpreted walk ran compiled code");
    if cfg!(target_arch = "x86_64") {
        assert!(c[1] > 0, "nothing was compiled");
        assert!(c[2] > 0, "the code without popcnt never ran");
    }
}

fn add(a: Compiled, b: Compiled) -> Compiled {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

fn check_code(seed: u64, mut rng: Rng, n: usize, threads: usize, len: usize, events: bool) -> Compiled {
    let code = random_code(&mut rng, n);
    let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, len, events)).collect();
    check_paths(seed, &code, &paths)
}

/// Recovers the profile of `paths` through `code` with every engine, sequentially and in
/// parallel, and compares it with the truth.
fn check_paths(seed: u64, code: &[(u64, Vec<u8>)], paths: &[Vec<PathStep>]) -> Compiled {
    let mut compiled = [0; 3];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.dep");
    // Odd seeds with the collector's records of blocks' instructions (sync, call, return)
    // after blocks and before interruption records.
    write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), code, paths, seed, seed % 2 == 1).unwrap();
    let p = Profile::open(&path).unwrap();
    // Compiled blocks on two workers (with and without popcnt), the walk on one and three.
    let engines = [(1, Engine::Walk), (2, Engine::Compiled), (2, Engine::CompiledWithoutPopcnt), (3, Engine::Walk)];
    for (workers, engine) in engines {
        let rec = Recovery::with_engine(&p, workers, engine);
        for format in [Format::Text, Format::Blocks] {
            let want = render(&rec, Source::Truth, format, false);
            let got = render(&rec, Source::Dep, format, false);
            if got != want {
                let (g, w) = (String::from_utf8_lossy(&got), String::from_utf8_lossy(&want));
                let first = g.lines().zip(w.lines()).position(|(a, b)| a != b).unwrap_or(g.lines().count().min(w.lines().count()));
                panic!(
                    "seed {seed} {format:?}: recovered differs from truth at line {first}:\n  got  {:?}\n  want {:?}",
                    g.lines().nth(first),
                    w.lines().nth(first)
                );
            }
            assert_eq!(render(&rec, Source::Dep, format, true), want, "seed {seed} parallel {format:?}");
        }
        compiled[engine_index(engine)] += rec.plans.compiled_blocks();
    }
    compiled
}

#[test]
fn straight_paths_recover_exactly() {
    let c = (0..100).fold([0; 3], |c, seed| add(c, check_seed(seed, 1, 200, false)));
    assert_engines_ran(c);
}

#[test]
fn threads_chunks_signals_and_faults_recover_exactly() {
    let mut c = [0; 3];
    for seed in 100..300 {
        c = add(c, check_seed(seed, 1 + (seed % 3) as usize, 300, true));
    }
    assert_engines_ran(c);
}

#[test]
fn thousands_of_blocks_recover_exactly() {
    // Enough blocks that the compiled code's dispatch table has long probe chains.
    let mut c = [0; 3];
    for seed in 300..303 {
        c = add(c, check_code(seed, Rng::new(seed), 3000, 2, 6000, seed == 301));
    }
    assert_engines_ran(c);
}

#[test]
fn recovered_reference_counts_are_plausible() {
    // Guards against a vacuous pass: the simulated traces do contain many references.
    let mut rng = Rng::new(7);
    let code = random_code(&mut rng, 30);
    let paths = vec![random_path(&mut rng, &code, 2000, true)];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.dep");
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, 7).unwrap();
    let p = Profile::open(&path).unwrap();
    let rec = Recovery::new(&p, 1);
    let mut counts = dep_recover::Counts::default();
    rec.events(Source::Dep).run(&mut counts).unwrap();
    assert!(counts.blocks > 1800, "{counts:?}");
    assert!(counts.reads + counts.writes > 5000, "{counts:?}");
    assert!(p.threads[0].chunks.len() > 10);
}

/// Code with real control flow (conditional branches, loops, calls, recursion, returns),
/// executed rather than sampled, with signal handlers and faults at any instruction that
/// resume where they stopped.
#[test]
fn programs_with_control_flow_recover_exactly() {
    let mut c = [0; 3];
    for seed in 400..460 {
        let mut rng = Rng::new(seed);
        let functions = 1 + rng.below(8) as usize;
        let mut prog = random_program(&mut rng, functions);
        let threads = 1 + (seed % 3) as usize;
        let paths: Vec<_> = (0..threads).map(|_| program_path(&mut rng, &mut prog, 400, seed % 2 == 0)).collect();
        c = add(c, check_paths(seed, &prog.code, &paths));
    }
    assert_engines_ran(c);
}

/// Checks that every record of a block's instructions arrives where it stands among the
/// block's references: a sync record before instruction k after the references of
/// instructions before k and before k's own (after them for a record after k), a call
/// record with the record before it, a return record after all of them.
#[derive(Default)]
struct Placement {
    /// The current block's references so far (instruction indices) and its records so far
    /// (place), in arrival order.
    refs: Vec<u16>,
    records: Vec<u32>,
    /// Records seen, and references seen after a record of their block.
    checked: usize,
    after: usize,
    wrong: Vec<String>,
}

impl Sink for Placement {
    type Error = dep_recover::RecoverError;

    fn block(&mut self, _: &BlockEvent) -> Result<bool, Self::Error> {
        self.refs.clear();
        self.records.clear();
        Ok(true)
    }
    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        for r in refs {
            // No record already given may stand after this reference.
            if let Some(&p) = self.records.iter().find(|&&p| p > 2 * r.insn as u32) {
                self.wrong.push(format!("reference of instruction {} after a record at place {p}", r.insn));
            }
            self.after += !self.records.is_empty() as usize;
            self.refs.push(r.insn);
        }
        Ok(true)
    }
    fn marker(&mut self, _: u32, m: dep_recover::Marker) -> Result<bool, Self::Error> {
        use dep_recover::Marker;
        let p = match m {
            Marker::Sync { insn: Some(_), .. } => m.place().unwrap(),
            Marker::Call { .. } => self.records.last().copied().unwrap_or(0),
            Marker::Return { .. } => u32::MAX,
            _ => return Ok(true),
        };
        self.checked += 1;
        // Every reference already given stands before this record.
        if let Some(&k) = self.refs.iter().find(|&&k| 2 * k as u32 >= p) {
            self.wrong.push(format!("record at place {p} after a reference of instruction {k}"));
        }
        self.records.push(p);
        Ok(true)
    }
}

#[test]
fn records_of_instructions_arrive_in_place() {
    let (mut checked, mut after) = (0, 0);
    for seed in (1..80).step_by(2) {
        let mut rng = Rng::new(seed);
        let n = 1 + rng.below(30) as usize;
        let code = random_code(&mut rng, n);
        let paths: Vec<_> = (0..2).map(|_| random_path(&mut rng, &code, 400, true)).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.dep");
        write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, seed, true).unwrap();
        let p = Profile::open(&path).unwrap();
        for engine in [Engine::Walk, Engine::Compiled, Engine::CompiledWithoutPopcnt] {
            let rec = Recovery::with_engine(&p, 1, engine);
            let mut s = Placement::default();
            rec.events(Source::Dep).run(&mut s).unwrap();
            assert!(s.wrong.is_empty(), "seed {seed} {engine:?}: {}", s.wrong[..s.wrong.len().min(5)].join("; "));
            checked += s.checked;
            after += s.after;
        }
    }
    // Not vacuous: many records, and references after records of their own block.
    assert!(checked > 500 && after > 500, "{checked} records, {after} references after one");
}
