//! `dep export champsim` end to end on every corpus program (and every process of those
//! that fork or exec): each thread's trace, read by a reader written from ChampSim's
//! record layout and branch deduction, holds one record per instruction the recovery ran
//! (a rep string one per iteration), with the memory addresses recovered, a branch type
//! equal to iced-x86's flow control and each conditional branch's direction from the next
//! block. Needs the DynamoRIO build, gcc, xz and gzip.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/champsim.rs"]
mod champsim;
mod common;
use common::{corpus_programs, dep, shared_recording};

/// Exports `profile` with `args`, checking that dep succeeds.
fn export(profile: &Path, out: &Path, args: &[&str]) {
    let o = Command::new(dep()).args(["export", "champsim"]).arg(profile).arg("-o").arg(out).args(args).output().unwrap();
    assert!(o.status.success(), "export {}: {}", profile.display(), String::from_utf8_lossy(&o.stderr));
}

/// Thread `t`'s file of an export to `out` (the index before a compression extension).
fn thread_file(out: &Path, t: usize) -> PathBuf {
    let name = out.file_name().unwrap().to_string_lossy().into_owned();
    let named = match name.rsplit_once('.') {
        Some((stem, ext)) if ext == "xz" || ext == "gz" => format!("{stem}.{t}.{ext}"),
        _ => format!("{name}.{t}"),
    };
    out.with_file_name(named)
}

#[test]
fn every_corpus_program_reads_back_as_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let progs = corpus_programs();
    let mut records = 0usize;
    for prog in &progs {
        if prog == "avx512" && !std::arch::is_x86_feature_detected!("avx512vl") {
            continue; // runs only where the CPU has it (tests/collector.rs instruments it anyway)
        }
        if prog == "signal_loop" {
            // 2.4 G instructions, a 150 GB trace: branches around signal handlers are
            // checked on sigblock, siglongjmp and selfkill here and on simulated programs
            // with handlers across chunks (dcfg-out/tests/champsim.rs).
            continue;
        }
        for (k, profile) in shared_recording(prog).iter().enumerate() {
            let p = dep_profile::container::Profile::open(profile).unwrap();
            let out = dir.path().join(format!("{prog}.{k}.champsim"));
            export(profile, &out, &[]);
            let (checked, _) = champsim::check_all(&p, |t| thread_file(&out, t), &format!("{prog} process {k}"));
            records += checked;
            assert!(!thread_file(&out, p.threads.len()).exists(), "{prog}: a file for a thread the profile lacks");
            for t in 0..p.threads.len() {
                std::fs::remove_file(thread_file(&out, t)).unwrap();
            }
        }
    }
    assert!(records > 1_000_000, "only {records} records over the corpus");
}

#[test]
fn compressed_and_single_thread_exports_hold_the_same_records() {
    let dir = tempfile::tempdir().unwrap();
    let profile = &shared_recording("threads")[0];
    let plain = dir.path().join("t.champsim");
    export(profile, &plain, &[]);
    let threads = dep_profile::container::Profile::open(profile).unwrap().threads.len();
    assert!(threads > 1);
    // Record by record, as the files are large.
    let same = |a: &Path, b: &Path, what: &str| {
        let (mut x, mut y) = (champsim::Reader::open(a), champsim::Reader::open(b));
        let mut n = 0u64;
        loop {
            match (x.next(), y.next()) {
                (None, None) => break,
                (p, q) => assert_eq!(p, q, "{what}: record {n}"),
            }
            n += 1;
        }
        assert!(n > 0, "{what}: empty");
    };
    for name in ["t.champsim.xz", "t.champsim.gz"] {
        let out = dir.path().join(name);
        export(profile, &out, &[]);
        for t in 0..threads {
            same(&thread_file(&plain, t), &thread_file(&out, t), &format!("{name} thread {t}"));
        }
    }
    for t in [0, threads - 1] {
        let one = dir.path().join(format!("only{t}.xz"));
        export(profile, &one, &["--thread", &t.to_string()]);
        same(&thread_file(&plain, t), &one, &format!("--thread {t}"));
    }
    // A thread the profile lacks is a one-line error.
    let o = Command::new(dep()).args(["export", "champsim"]).arg(profile).args(["-o", "/dev/null", "--thread", "999"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.trim().lines().count() == 1 && err.contains("thread 999"), "{err}");
}
