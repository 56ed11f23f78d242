//! `dep edges` on a profile cut short: each thread ends where its stream stops, as on a whole
//! profile. The expected edges come from the truth stream of the chunks the cut profile
//! keeps: one into the first block, one between each two blocks that follow each other, and
//! out of the last block its exit (given up, no target) and the thread's end.

use dep_dcfg_out::edges;
use dep_profile::container::{Profile, Section};
use dep_profile::simulate::{program_path, random_program, write_profile, PathStep, Rng};
use dep_profile::truth::{self, TruthKind};
use dep_profile::Machine;
use dep_recover::edges::EdgeKind;
use dep_recover::{Recovery, Source};
use std::collections::BTreeMap;

/// The block addresses of each thread, in order, from the truth stream alone.
fn blocks(p: &Profile) -> Vec<Vec<u64>> {
    p.threads
        .iter()
        .map(|t| {
            let mut pcs = Vec::new();
            for c in &t.chunks {
                let bytes = p.chunk(c).unwrap().decompress(Section::Truth).unwrap();
                for r in truth::records(&bytes).unwrap() {
                    let r = r.unwrap();
                    if r.kind == TruthKind::Block {
                        pcs.push(r.pc);
                    }
                }
            }
            pcs
        })
        .collect()
}

#[test]
fn a_thread_cut_short_ends_at_its_last_block() {
    let mut cut_threads = 0;
    for seed in 0..12u64 {
        let mut rng = Rng::new(seed);
        let functions = 1 + rng.below(6) as usize;
        let mut prog = random_program(&mut rng, functions);
        // Chunks of 50 to 200 blocks, no signals: every block has exactly one successor.
        let paths: Vec<Vec<PathStep>> = (0..2)
            .map(|_| {
                let mut path = Vec::new();
                for step in program_path(&mut rng, &mut prog, 2000, false) {
                    if rng.below(125) == 0 {
                        path.push(PathStep::Flush);
                    }
                    path.push(step);
                }
                path
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.dep");
        write_profile(std::fs::File::create(&whole).unwrap(), Machine::x86_64(2696), &prog.code, &paths, seed).unwrap();
        let bytes = std::fs::read(&whole).unwrap();
        for k in (1..=8).rev() {
            let path = dir.path().join(format!("cut{k}.dep"));
            std::fs::write(&path, &bytes[..bytes.len() * k / 8]).unwrap();
            let Ok(p) = Profile::open(&path) else { continue };
            let rec = Recovery::new(&p, 3);
            let got = edges::count(&rec, Source::Blocks, &|_| {}).unwrap_or_else(|e| panic!("seed {seed} cut {k}/8: {e}"));
            for (t, pcs) in blocks(&p).iter().enumerate() {
                let Some(&last) = pcs.last() else { continue };
                let mut want: BTreeMap<(Option<u64>, Option<u64>), u64> = BTreeMap::new();
                *want.entry((None, Some(pcs[0]))).or_default() += 1;
                for w in pcs.windows(2) {
                    *want.entry((Some(w[0]), Some(w[1]))).or_default() += 1;
                }
                *want.entry((Some(last), None)).or_default() += 2;
                let mut have: BTreeMap<(Option<u64>, Option<u64>), u64> = BTreeMap::new();
                for (e, n) in got[t].edges() {
                    *have.entry((e.from, e.to)).or_default() += n;
                }
                assert_eq!(have, want, "seed {seed} cut {k}/8 thread {t}");
                let ends: Vec<_> = got[t].edges().into_iter().filter(|(e, _)| e.kind == EdgeKind::ThreadEnd).collect();
                assert_eq!(ends.len(), 1, "seed {seed} cut {k}/8 thread {t}: {ends:?}");
                assert_eq!((ends[0].0.from, ends[0].1), (Some(last), 1), "seed {seed} cut {k}/8 thread {t}");
                assert_eq!(got[t].blocks, pcs.len() as u64);
                if k < 8 {
                    cut_threads += 1;
                }
            }
        }
    }
    assert!(cut_threads > 40, "only {cut_threads} threads of cut profiles compared");
}
