//! Recovery against the software reference collector: for random code (every kind of
//! reference), random paths with chunk hand-offs, signals and faults, the recovered trace
//! must equal the truth stream byte for byte, sequentially and in parallel.

use dep_profile::container::{Codec, Profile, Section};
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

/// Both compiled engines really compiled (on an x86-64 host); the walk never did. With
/// `popcnt`, a block that finds fewer values left than it could read counts those it will
/// read, so near chunks' ends more blocks run compiled than without it (which leaves).
fn assert_engines_ran(c: Compiled) {
    assert_eq!(c[0], 0, "the interpreted walk ran compiled code");
    if cfg!(target_arch = "x86_64") {
        assert!(c[1] > 0, "nothing was compiled");
        assert!(c[2] > 0, "the code without popcnt never ran");
        assert!(c[1] > c[2], "the exact count of values to read never let a block run: {c:?}");
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
    let dir = tempfile::tempdir().unwrap();
    check_profile(seed, &simulated(dir.path(), seed, code, paths))
}

/// The profile of `paths` through `code`, written in `dir`. Odd seeds with the collector's
/// records of blocks' instructions (sync, call, return) after blocks and before
/// interruption records.
fn simulated(dir: &std::path::Path, seed: u64, code: &[(u64, Vec<u8>)], paths: &[Vec<PathStep>]) -> Profile {
    let path = dir.join("sim.dep");
    write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), code, paths, seed, seed % 2 == 1).unwrap();
    Profile::open(&path).unwrap()
}

/// [`check_paths`] on a profile written.
fn check_profile(seed: u64, p: &Profile) -> Compiled {
    let mut compiled = [0; 3];
    // Compiled blocks on two workers (with and without popcnt), the walk on one and three.
    let engines = [(1, Engine::Walk), (2, Engine::Compiled), (2, Engine::CompiledWithoutPopcnt), (3, Engine::Walk)];
    for (workers, engine) in engines {
        let rec = Recovery::with_engine(p, workers, engine);
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
        // The null sink, which takes rep strings as runs: the same counts and checksum.
        let counts = |source| {
            let mut c = dep_recover::Counts::default();
            rec.events(source).run(&mut c).unwrap();
            c
        };
        // (The truth stream has references and blocks, not the signal markers.)
        let seen = |c: dep_recover::Counts| (c.blocks, c.instructions, c.reads, c.writes, c.checksum());
        assert_eq!(seen(counts(Source::Dep)), seen(counts(Source::Truth)), "seed {seed} null sink");
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

#[test]
fn generated_code_passes_shadows_on() {
    // Guards against a vacuous pass of the format 9 rules: the generated blocks do check
    // registers against another's shadow and pass statuses on within a block (statuses
    // passed at a block's end: `interpreter_handlers_recover_exactly`).
    let mut rng = Rng::new(11);
    let code = random_code(&mut rng, 400);
    let mut sem = dep_profile::Semantics::new(Machine::x86_64(2696));
    let plans: Vec<_> = code.iter().map(|(a, b)| dep_profile::BlockPlan::build(&mut sem, *a, b, None).unwrap()).collect();
    let roots = plans.iter().flat_map(|p| &p.steps).filter(|s| !s.roots.is_empty()).count();
    let copies = plans.iter().flat_map(|p| &p.steps).filter(|s| !s.copies.is_empty()).count();
    assert!(roots > 2 && copies > 20, "roots {roots}, copies {copies}");
}

/// An interpreter's dispatch and handlers (benches/programs/interp, as gcc compiled it),
/// among random blocks: its pc and stack index pass from block to block through
/// derivations, checked against the shadow of the register they came from.
#[test]
fn interpreter_handlers_recover_exactly() {
    let handlers: [&[u8]; 4] = [
        // movsxd rdx,ecx ; add rsi,1 ; mov rdx,[r8+rdx*8] ; cmp edx,0x14
        &[0x48, 0x63, 0xd1, 0x48, 0x83, 0xc6, 0x01, 0x49, 0x8b, 0x14, 0xd0, 0x83, 0xfa, 0x14],
        // lea edx,[rax-1] ; sub eax,2 ; add ecx,1 ; cdqe ; movsxd r11,edx ;
        // mov r11,[rsp+r11*8] ; add [rsp+rax*8],r11 ; mov eax,edx
        &[
            0x8d, 0x50, 0xff, 0x83, 0xe8, 0x02, 0x83, 0xc1, 0x01, 0x48, 0x98, 0x4c, 0x63, 0xda, 0x4e, 0x8b, 0x1c, 0xdc, 0x4c, 0x01, 0x1c,
            0xc4, 0x89, 0xd0,
        ],
        // lea edx,[rcx+1] ; movsxd r11,eax ; add ecx,2 ; add eax,1 ; movsxd rdx,edx ;
        // mov rdx,[r8+rdx*8] ; mov [rsp+r11*8],rdx
        &[
            0x8d, 0x51, 0x01, 0x4c, 0x63, 0xd8, 0x83, 0xc1, 0x02, 0x83, 0xc0, 0x01, 0x48, 0x63, 0xd2, 0x49, 0x8b, 0x14, 0xd0, 0x4e, 0x89,
            0x14, 0xdc,
        ],
        // lea edx,[rax-1] ; mov rcx,[rax] ; mov eax,edx: rax recorded, then its status again
        &[0x8d, 0x50, 0xff, 0x48, 0x8b, 0x08, 0x89, 0xd0],
    ];
    let mut sem = dep_profile::Semantics::new(Machine::x86_64(2696));
    for (k, h) in handlers.iter().enumerate() {
        let p = dep_profile::BlockPlan::build(&mut sem, 0x40_0000, h, None).unwrap();
        // Non-vacuous: every handler but the dispatch ends passing rax's status on.
        assert_eq!(k != 0 && k != 2, !p.tail_copies.is_empty(), "handler {k}: {:?}", p.tail_copies);
        assert!(p.steps.iter().any(|s| !s.roots.is_empty() || !s.copies.is_empty()), "handler {k}");
    }
    let mut c = [0; 3];
    for seed in 500..560 {
        let mut rng = Rng::new(seed);
        let mut code = random_code(&mut rng, 12);
        for (k, h) in handlers.iter().enumerate() {
            let mut bytes = h.to_vec();
            bytes.push(0xc3);
            code.push((0x55_0000_1000 + 0x100 * k as u64, bytes));
        }
        // The handlers far more often than the rest.
        let paths: Vec<_> = (0..1 + seed % 2)
            .map(|_| {
                random_path(&mut rng, &code, 400, seed % 3 != 0)
                    .into_iter()
                    .map(|s| match s {
                        PathStep::Block(b) if b < 12 && rng.below(4) != 0 => PathStep::Block(12 + rng.below(4) as usize),
                        s => s,
                    })
                    .collect()
            })
            .collect();
        c = add(c, check_paths(seed, &code, &paths));
    }
    assert_engines_ran(c);
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

#[test]
fn values_over_many_pieces_recover_exactly() {
    // One chunk whose DEP_m unpacks to several pieces (`dep_profile::values::PIECE_WORDS`,
    // packed and stored as the collector stores it): the walk and the compiled code both
    // cross piece boundaries, where the unread words move and more are unpacked.
    let mut c = [0; 3];
    for seed in 400..402 {
        let mut rng = Rng::new(seed);
        let code = random_code(&mut rng, 60);
        let paths = vec![random_path(&mut rng, &code, 150_000, false)];
        let dir = tempfile::tempdir().unwrap();
        let p = simulated(dir.path(), seed, &code, &paths);
        c = add(c, check_profile(seed, &p));
        let chunk = p.chunk(&p.threads[0].chunks[0]).unwrap();
        assert_eq!(chunk.codec(Section::Values).unwrap(), Codec::PackedZstd);
        assert!(chunk.lens(Section::Values).0 > 8 * 8 * dep_profile::values::PIECE_WORDS as u64, "seed {seed}: too few values");
    }
    assert!(c[1] > 0 && c[2] > 0, "compiled code ran: {c:?}");
}
