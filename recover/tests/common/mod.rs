//! What the recover tests share: simulated programs written as profiles.

use dep_profile::container::Profile;
use dep_profile::simulate::{program_path, random_program, write_profile_with, PathStep, Rng};
use dep_profile::Machine;

/// A profile of `threads` threads running `len` steps each through a random program of
/// calls and returns; `records`: with the collector's records of blocks' instructions
/// (sync, call, return). The directory holds the file for as long as it is kept.
pub fn program_profile(seed: u64, threads: usize, len: usize, records: bool) -> (tempfile::TempDir, Profile) {
    let mut rng = Rng::new(seed);
    let functions = 3 + rng.below(6) as usize;
    let mut prog = random_program(&mut rng, functions);
    let paths: Vec<Vec<PathStep>> = (0..threads).map(|_| program_path(&mut rng, &mut prog, len, true)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.dep");
    write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &prog.code, &paths, seed, records).unwrap();
    let p = Profile::open(&path).unwrap();
    (dir, p)
}
