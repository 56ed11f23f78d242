//! `dep export champsim` on simulated programs (calls, returns, jumps, rep strings, signals,
//! several threads and many chunks), read back by a reader written from ChampSim's record
//! layout and branch deduction: one record per instruction run, the branch type ChampSim
//! deduces equal to iced-x86's flow control, taken-ness from the next block, and the
//! memory addresses recovered. Plain, xz and gzip files alike.

#[path = "../../tests/common/champsim.rs"]
mod champsim;
#[path = "../../recover/tests/common/mod.rs"]
mod common;

use common::program_profile;
use dep_dcfg_out::champsim::{export, export_bounded, thread_path, Bounds, ChampsimError};
use dep_recover::Recovery;

#[test]
fn exports_read_back_as_the_recovered_instructions() {
    let mut branches = std::collections::HashMap::new();
    let mut chunks_crossed = 0;
    for seed in 0..8u64 {
        let threads = 1 + (seed % 3) as usize;
        let (dir, p) = program_profile(seed, threads, 3000, seed % 2 == 1);
        for (workers, name) in [(1, "t.champsim"), (2, "t.champsim.xz"), (3, "t.champsim.gz")] {
            let rec = Recovery::new(&p, workers);
            let out = dir.path().join(name);
            let s = export(&rec, &out, None, &|_| {}).unwrap();
            assert_eq!(s.files.len(), threads);
            assert_eq!(s.losses.unknown_blocks, 0);
            for (t, f) in s.files.iter().enumerate() {
                assert_eq!(f.path, thread_path(&out, t as u32));
                let got = champsim::read(&f.path);
                assert_eq!(f.records, got.len() as u64);
                for g in &got {
                    *branches.entry(format!("{:?}", g.deduce().0)).or_insert(0u64) += 1;
                }
            }
            let (checked, undirected) = champsim::check_all(&p, |t| thread_path(&out, t as u32), &format!("seed {seed} {name}"));
            assert_eq!(checked as u64, s.files.iter().map(|f| f.records).sum::<u64>());
            // The branches the writer could not decide are those with no next block.
            assert_eq!(s.losses.undirected, undirected as u64, "seed {seed} {name}");
            chunks_crossed += p.threads.iter().map(|t| t.chunks.len() - 1).sum::<usize>();
        }
    }
    // The programs exercised every kind the writer makes, across chunk boundaries.
    for kind in ["NotBranch", "DirectJump", "Conditional", "DirectCall", "Return"] {
        assert!(branches.get(kind).copied().unwrap_or(0) > 10, "few {kind}: {branches:?}");
    }
    assert!(chunks_crossed > 20);
}

#[test]
fn one_thread_goes_to_the_file_named() {
    let (dir, p) = program_profile(3, 3, 2000, true);
    let rec = Recovery::new(&p, 2);
    let all = dir.path().join("all.trace");
    export(&rec, &all, None, &|_| {}).unwrap();
    let out = dir.path().join("one.trace");
    let s = export(&rec, &out, Some(1), &|_| {}).unwrap();
    assert_eq!(s.files.len(), 1);
    assert_eq!(s.files[0].path, out);
    assert_eq!(champsim::read(&out), champsim::read(&thread_path(&all, 1)));
    assert!(!thread_path(&out, 0).exists());
    match export(&rec, &out, Some(3), &|_| {}) {
        Err(ChampsimError::NoThread { thread: 3, threads: 3 }) => {}
        r => panic!("thread 3 of 3: {:?}", r.map(|s| s.files)),
    }
    match export(&rec, &dir.path().join("no/such/dir/t"), None, &|_| {}) {
        Err(ChampsimError::Create { .. }) => {}
        r => panic!("an uncreatable file: {:?}", r.map(|s| s.files)),
    }
}

#[test]
fn thread_files_are_named_before_the_compression_extension() {
    let p = std::path::Path::new("/d/out.champsim.xz");
    assert_eq!(thread_path(p, 2), std::path::Path::new("/d/out.champsim.2.xz"));
    assert_eq!(thread_path(std::path::Path::new("t.gz"), 0), std::path::Path::new("t.0.gz"));
    assert_eq!(thread_path(std::path::Path::new("trace"), 1), std::path::Path::new("trace.1"));
}

/// Records handed on a few at a time (every block), held ahead of their turn or waiting
/// for it at once, make the same files as whole chunks do.
#[test]
fn records_handed_on_in_pieces_make_the_same_files() {
    let mut compared = 0;
    for seed in 0..6u64 {
        let threads = 1 + (seed % 3) as usize;
        let (dir, p) = program_profile(seed, threads, 3000, seed % 2 == 1);
        let whole = dir.path().join("whole");
        let want = export(&Recovery::new(&p, 1), &whole, None, &|_| {}).unwrap();
        for workers in [1, 2, 3] {
            for ahead in [0, 64 * 20, u64::MAX] {
                let rec = Recovery::new(&p, workers);
                let out = dir.path().join(format!("pieces-{workers}-{ahead}"));
                let got = export_bounded(&rec, &out, None, &|_| {}, Bounds { piece: 64, ahead }).unwrap();
                assert_eq!(got.losses, want.losses, "seed {seed} workers {workers} ahead {ahead}");
                for (g, w) in got.files.iter().zip(&want.files) {
                    assert_eq!(g.records, w.records);
                    let (a, b) = (std::fs::read(&g.path).unwrap(), std::fs::read(&w.path).unwrap());
                    assert!(a == b, "seed {seed} workers {workers} ahead {ahead} thread {}: files differ", g.thread);
                    compared += a.len();
                }
            }
        }
    }
    assert!(compared > 1 << 20, "{compared} bytes compared");
}

/// A chunk that fails (its checksum) while later chunks wait for their turn ends the export
/// with its error; nothing waits forever.
#[test]
fn a_failed_chunk_releases_the_chunks_waiting_for_their_turn() {
    let (dir, p) = program_profile(4, 2, 6000, true);
    assert!(p.threads[0].chunks.len() >= 2);
    let mut bytes = std::fs::read(dir.path().join("sim.dep")).unwrap();
    // A byte in the payload of thread 0's first chunk (past its 16-byte record header).
    bytes[p.threads[0].chunks[0].offset as usize + 40] ^= 0x5a;
    let bad = dir.path().join("bad.dep");
    std::fs::write(&bad, &bytes).unwrap();
    let p = dep_profile::container::Profile::open(&bad).unwrap();
    for workers in [2, 3] {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let rec = Recovery::new(&p, workers);
                let r = export_bounded(&rec, &dir.path().join("t"), None, &|_| {}, Bounds { piece: 64, ahead: 0 });
                tx.send(r.map(|s| s.files.len())).unwrap();
            });
            match rx.recv_timeout(std::time::Duration::from_secs(120)) {
                Ok(Err(ChampsimError::Recover(_))) => {}
                Ok(r) => panic!("workers {workers}: {r:?}"),
                Err(_) => {
                    eprintln!("workers {workers}: the export hangs");
                    std::process::exit(1);
                }
            }
        });
    }
}

/// `-o /dev/null` times an export: every thread's trace goes to the device, none to files
/// named beside it (which in /dev would fill memory).
#[test]
fn a_device_takes_every_threads_trace() {
    let (_dir, p) = program_profile(5, 3, 500, false);
    let null = std::path::Path::new("/dev/null");
    let s = export(&Recovery::new(&p, 2), null, None, &|_| {}).unwrap();
    assert_eq!(s.files.len(), 3);
    assert!(s.files.iter().all(|f| f.path == null && f.records > 0), "{:?}", s.files);
    assert!(!thread_path(null, 0).exists());
}
