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
