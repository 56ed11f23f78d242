//! Profiles whose thread indices are not 0..n-1 (a profile's chunks can name any u32
//! thread): the DCFG, its trace and Callgrind's output are written as for the same threads
//! numbered densely, without a panic.

use dep_dcfg_out::callgrind::{write_profile as write_callgrind, Options};
use dep_dcfg_out::dcfg::check::{read_dcfg, read_trace, Blocks, Report};
use dep_dcfg_out::dcfg::{write_dcfg, write_trace, Ids, Process};
use dep_dcfg_out::program::symbols::Symbolizer;
use dep_profile::container::{Profile, ProfileWriter, RecordKind, ThreadEvent, RECORD_HEADER_LEN};
use dep_profile::simulate::{program_path, random_program, write_profile, Rng};
use dep_profile::Machine;
use dep_recover::Recovery;
use std::path::Path;

/// A simulated profile of `threads` threads at `path`.
fn simulated(path: &Path, seed: u64, threads: usize) {
    let mut rng = Rng::new(seed);
    let mut prog = random_program(&mut rng, 5);
    let paths: Vec<_> = (0..threads).map(|_| program_path(&mut rng, &mut prog, 3000, true)).collect();
    write_profile(std::fs::File::create(path).unwrap(), Machine::x86_64(2696), &prog.code, &paths, seed).unwrap();
}

/// `from` rewritten to `to` with thread k renumbered `index[k]` (in its thread events and
/// the thread field of its chunks).
fn renumber(from: &Path, to: &Path, index: &[u32]) {
    let p = Profile::open(from).unwrap();
    let mut w = ProfileWriter::new(std::fs::File::create(to).unwrap(), p.width, 3).unwrap();
    w.meta(&p.meta).unwrap();
    for m in &p.modules {
        w.module(m).unwrap();
    }
    for b in p.blocks() {
        w.block(&p.block_entry(b)).unwrap();
    }
    for (k, t) in p.threads.iter().enumerate() {
        w.thread(&ThreadEvent {
            event: dep_profile::container::ThreadEventKind::Start,
            index: index[k],
            tid: t.tid,
            time_ns: 0,
            ..Default::default()
        })
        .unwrap();
        for c in &t.chunks {
            // The record: a header (its payload's length at bytes 8..16), then the payload.
            let at = c.offset as usize;
            let len = u64::from_le_bytes(p.bytes()[at + 8..at + 16].try_into().unwrap()) as usize;
            let mut payload = p.bytes()[at + RECORD_HEADER_LEN..at + RECORD_HEADER_LEN + len].to_vec();
            payload[0..4].copy_from_slice(&index[k].to_le_bytes());
            w.record(RecordKind::Chunk, &payload).unwrap();
        }
    }
    if let Some(e) = &p.end {
        w.end(e).unwrap();
    }
    w.flush().unwrap();
}

/// The DCFG and trace, checked: the blocks decoded, by thread.
fn dcfg_blocks(p: &Profile) -> String {
    let rec = Recovery::new(p, 2);
    let mut ids = Ids::default();
    let procs = vec![Process::build(&rec, &mut ids, &|_| {}).unwrap()];
    let (mut d, mut t) = (Vec::new(), Vec::new());
    write_dcfg(&mut d, &procs, &[Symbolizer::new(&p.modules)]).unwrap();
    write_trace(&mut t, &procs, &|_| {}).unwrap();
    let mut r = Report::default();
    let procs = read_dcfg(&d[..], &mut r).unwrap();
    let mut blocks = Vec::new();
    let render = |out: &mut Vec<u8>, _pid: u64, thread: u64, addr: u64, n: u64| out.extend(format!("{thread} {addr:#x} {n}\n").bytes());
    read_trace(&t[..], &procs, 2, &mut r, Some(Blocks { render: &render, emit: &mut |text: &[u8]| blocks.extend_from_slice(text) }))
        .unwrap();
    String::from_utf8(blocks).unwrap()
}

/// Callgrind's instruction total, one file per thread.
fn callgrind_instructions(p: &Profile, out: &Path) -> (u64, usize) {
    let rec = Recovery::new(p, 2);
    let w = write_callgrind(&rec, &Symbolizer::new(&p.modules), &Options { separate_threads: true, dump_instr: false }, out).unwrap();
    (w.instructions, w.files.len())
}

#[test]
fn sparse_thread_indices_write_as_dense_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (dense, sparse) = (dir.path().join("dense.dep"), dir.path().join("sparse.dep"));
    simulated(&dense, 5, 2);
    renumber(&dense, &sparse, &[3, 9]);
    let (dense, sparse) = (Profile::open(&dense).unwrap(), Profile::open(&sparse).unwrap());
    // The reader fills in the threads the profile skipped (no chunks), so threads[i] is thread i.
    assert_eq!(sparse.threads.iter().map(|t| t.index).collect::<Vec<_>>(), (0..10).collect::<Vec<u32>>());
    let with_chunks: Vec<u32> = sparse.threads.iter().filter(|t| !t.chunks.is_empty()).map(|t| t.index).collect();
    assert_eq!(with_chunks, [3, 9]);
    // The same blocks per thread, under the new numbers.
    let renumbered: String = dcfg_blocks(&dense)
        .lines()
        .map(|l| {
            let (t, rest) = l.split_once(' ').unwrap();
            format!("{} {rest}\n", [3, 9][t.parse::<usize>().unwrap()])
        })
        .collect();
    assert!(dcfg_blocks(&sparse) == renumbered, "the sparse profile's DCFG-trace blocks differ from the dense one's renumbered");
    let (s, d) = (callgrind_instructions(&sparse, &dir.path().join("s.out")), callgrind_instructions(&dense, &dir.path().join("d.out")));
    assert_eq!(s.0, d.0, "instructions");
}
