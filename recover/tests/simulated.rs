//! Recovery against the software reference collector: for random code (every kind of
//! reference), random paths with chunk hand-offs, signals and faults, the recovered trace
//! must equal the truth stream byte for byte, sequentially and in parallel.

use dep_profile::container::Profile;
use dep_profile::simulate::{random_code, random_path, write_profile, Rng};
use dep_profile::Machine;
use dep_recover::{Format, Recovery, Renderer, Source};

fn render(rec: &Recovery, source: Source, format: Format, parallel: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if parallel {
        rec.run_ordered(source, || Renderer::new(format, Vec::new()), |r| r.finish(), &mut out, &|_| {}).unwrap();
    } else {
        let mut r = Renderer::new(format, &mut out);
        rec.run(source, &mut r).unwrap();
        r.finish().unwrap();
    }
    out
}

fn check_seed(seed: u64, threads: usize, len: usize, events: bool) {
    let mut rng = Rng::new(seed);
    let n = 1 + rng.below(40) as usize;
    check_code(seed, rng, n, threads, len, events);
}

fn check_code(seed: u64, mut rng: Rng, n: usize, threads: usize, len: usize, events: bool) {
    let code = random_code(&mut rng, n);
    let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, len, events)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.dep");
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, seed).unwrap();
    let p = Profile::open(&path).unwrap();
    // Compiled blocks on two workers, the interpreted walk on one and three.
    for (workers, compiled) in [(1, false), (2, true), (3, false)] {
        let rec = Recovery::with_compiled(&p, workers, compiled);
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
    }
}

#[test]
fn straight_paths_recover_exactly() {
    for seed in 0..100 {
        check_seed(seed, 1, 200, false);
    }
}

#[test]
fn threads_chunks_signals_and_faults_recover_exactly() {
    for seed in 100..300 {
        check_seed(seed, 1 + (seed % 3) as usize, 300, true);
    }
}

#[test]
fn thousands_of_blocks_recover_exactly() {
    // Enough blocks that the compiled code's dispatch table has long probe chains.
    for seed in 300..303 {
        check_code(seed, Rng::new(seed), 3000, 2, 6000, seed == 301);
    }
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
    rec.run(Source::Dep, &mut counts).unwrap();
    assert!(counts.blocks > 1800, "{counts:?}");
    assert!(counts.reads + counts.writes > 5000, "{counts:?}");
    assert!(p.threads[0].chunks.len() > 10);
}
