//! Windows of instructions on simulated profiles (chunk hand-offs, signals, faults, several
//! threads): a window's run gives exactly the blocks of the whole run whose first
//! instruction is numbered in it (the whole run's blocks, numbered here, are the oracle),
//! with every engine, sequentially and in parallel; it reads only the chunks that hold
//! them; it marks where each thread's part starts and ends; and a seek index that does not
//! say what a chunk holds is an error where that chunk is read.

use dep_profile::container::{Index, Profile};
use dep_profile::simulate::{random_code, random_path, write_profile_with, Rng};
use dep_profile::Machine;
use dep_recover::{
    seek, BlockEvent, Engine, Format, Marker, MemEvent, RecoverError, Recovery, Renderer, Sink, Source, Window, WindowError,
};
use std::fmt::Write as _;

/// One block of the whole run: the number of its first instruction in its thread, and
/// its lines in `--format blocks` and `--format text`.
struct Block {
    thread: u32,
    start: u64,
    block_line: String,
    ref_lines: String,
}

/// Every block of a run, each thread's numbered from 0, rendered here (not by Renderer).
#[derive(Default)]
struct Numbered {
    blocks: Vec<Block>,
    next: Vec<u64>,
}

impl Sink for Numbered {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        let t = b.thread as usize;
        if self.next.len() <= t {
            self.next.resize(t + 1, 0);
        }
        let start = self.next[t];
        self.next[t] += b.executed as u64;
        let block_line = format!("{} {:#x} {}\n", b.thread, b.addr, b.executed);
        self.blocks.push(Block { thread: b.thread, start, block_line, ref_lines: String::new() });
        Ok(true)
    }

    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        let last = self.blocks.last_mut().expect("references follow their block");
        for r in refs {
            let kind = if r.access == dep_profile::semantics::Access::Write { 'W' } else { 'R' };
            writeln!(last.ref_lines, "{} {:#x} {kind} {:#x} {}", last.thread, r.pc, r.addr, r.size).unwrap();
        }
        Ok(true)
    }
}

/// Each thread's window marks and blocks, in the order given: 'S' WindowStart, 'E'
/// WindowEnd, 'b' a block.
#[derive(Default)]
struct Marks(Vec<(u32, char)>);

impl Sink for Marks {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.0.push((b.thread, 'b'));
        Ok(true)
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, RecoverError> {
        match m {
            Marker::WindowStart => self.0.push((thread, 'S')),
            Marker::WindowEnd => self.0.push((thread, 'E')),
            _ => {}
        }
        Ok(true)
    }
}

fn render(rec: &Recovery, format: Format, parallel: bool) -> String {
    let mut out = Vec::new();
    if parallel {
        rec.events(Source::Dep).rendered(format, &mut out).unwrap();
    } else {
        let mut r = Renderer::new(format, &mut out);
        rec.events(Source::Dep).run(&mut r).unwrap();
        r.into_inner().unwrap();
    }
    String::from_utf8(out).unwrap()
}

/// A simulated profile of `threads` threads of `len` steps each.
fn simulated(dir: &std::path::Path, seed: u64, threads: usize, len: usize) -> Profile {
    let mut rng = Rng::new(seed);
    let n = 1 + rng.below(40) as usize;
    let code = random_code(&mut rng, n);
    let paths: Vec<_> = (0..threads).map(|_| random_path(&mut rng, &code, len, true)).collect();
    let path = dir.join(format!("sim{seed}.dep"));
    write_profile_with(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &paths, seed, seed % 2 == 1).unwrap();
    Profile::open(&path).unwrap()
}

#[test]
fn windows_give_the_whole_runs_blocks_that_start_in_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut windows_checked = 0;
    for seed in 0..12u64 {
        let threads = 1 + (seed % 3) as usize;
        let p = simulated(dir.path(), seed, threads, 1500);
        let whole = Recovery::with_engine(&p, 1, Engine::Walk);
        let mut all = Numbered::default();
        whole.events(Source::Dep).run(&mut all).unwrap();
        // The oracle's rendering is the renderer's.
        let text: String = all.blocks.iter().map(|b| b.ref_lines.as_str()).collect();
        assert_eq!(text, render(&whole, Format::Text, false), "seed {seed}: the test's rendering");
        let index = seek::count(&whole, &|_| {}).unwrap();
        for t in 0..p.threads.len() as u32 {
            assert_eq!(index.instructions(t), all.next.get(t as usize).copied().unwrap_or(0), "seed {seed}: thread {t}'s count");
        }
        let total = all.next.iter().copied().max().unwrap_or(0);
        let mut rng = Rng::new(seed ^ 0x5eec);
        for k in 0..8 {
            let from = if k == 0 { 0 } else { rng.below(total + 1) };
            let to = if k == 1 { u64::MAX } else { from + 1 + rng.below(total / 3 + 1) };
            let thread = (k % 3 == 2).then(|| rng.below(p.threads.len() as u64) as u32);
            let window = Window { from, to, thread };
            let wanted = |b: &Block| window.holds(b.start) && thread.is_none_or(|t| t == b.thread);
            let want_blocks: String = all.blocks.iter().filter(|b| wanted(b)).map(|b| b.block_line.as_str()).collect();
            let want_text: String = all.blocks.iter().filter(|b| wanted(b)).map(|b| b.ref_lines.as_str()).collect();
            for (workers, engine) in [(1, Engine::Walk), (2, Engine::Compiled), (3, Engine::Walk)] {
                let mut rec = Recovery::with_engine(&p, workers, engine);
                rec.seek(window, Some(&index)).unwrap();
                for parallel in [false, true] {
                    let before = p.chunks_read();
                    let got = render(&rec, Format::Blocks, parallel);
                    assert!(got == want_blocks, "seed {seed} window {window:?} {engine:?} parallel {parallel}: blocks differ");
                    // One pass reads each chunk of the window once, and no other.
                    assert_eq!(p.chunks_read() - before, rec.chunks().len() as u64, "seed {seed} window {window:?}: chunks read");
                    let got = render(&rec, Format::Text, parallel);
                    assert!(got == want_text, "seed {seed} window {window:?} {engine:?} parallel {parallel}: references differ");
                }
            }
            // The chunks read are those holding the window's blocks: every chunk but the
            // first and last read has a block of the window (a chunk begins at a block).
            let mut rec = Recovery::new(&p, 1);
            rec.seek(window, Some(&index)).unwrap();
            for t in 0..p.threads.len() as u32 {
                let (read, info) = (rec.thread_chunks(t), &index.threads[t as usize]);
                let first = read.first().map(|c| c.seq as usize);
                for c in read.iter().skip(1).take(read.len().saturating_sub(2)) {
                    let e = info[c.seq as usize];
                    assert!(
                        e.first >= window.from && e.first < window.to,
                        "seed {seed} window {window:?}: thread {t} chunk {} read",
                        c.seq
                    );
                }
                if let Some(f) = first {
                    assert!(f == 0 || info[f - 1].first + info[f - 1].counts.instructions <= window.from.max(info[f].first));
                }
            }
            // The marks: WindowStart first where the thread's start is left out, WindowEnd
            // last where a later block is.
            let mut marks = Marks::default();
            rec.events(Source::Dep).run(&mut marks).unwrap();
            for t in 0..p.threads.len() as u32 {
                let mine: String = marks.0.iter().filter(|(x, _)| *x == t).map(|(_, c)| *c).collect();
                if rec.thread_chunks(t).is_empty() {
                    assert_eq!(mine, "", "seed {seed} window {window:?} thread {t}");
                    continue;
                }
                let cut_after = all.blocks.iter().any(|b| b.thread == t && b.start >= window.to);
                assert_eq!(mine.starts_with('S'), from > 0, "seed {seed} window {window:?} thread {t}: {mine}");
                assert_eq!(mine.matches('S').count(), (from > 0) as usize, "seed {seed} window {window:?} thread {t}: {mine}");
                if cut_after {
                    assert!(mine.ends_with('E') && mine.matches('E').count() == 1, "seed {seed} window {window:?} thread {t}: {mine}");
                }
                let blocks = all.blocks.iter().filter(|b| b.thread == t && wanted(b)).count();
                assert_eq!(mine.matches('b').count(), blocks, "seed {seed} window {window:?} thread {t}");
            }
            windows_checked += 1;
        }
    }
    assert_eq!(windows_checked, 96);
}

#[test]
fn a_seek_index_that_miscounts_a_chunk_is_an_error_where_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = simulated(dir.path(), 7, 1, 2000);
    assert!(p.threads[0].chunks.len() >= 3, "{} chunks", p.threads[0].chunks.len());
    let whole = Recovery::new(&p, 1);
    let index = seek::count(&whole, &|_| {}).unwrap();
    let mut lying: Index = index.clone();
    lying.threads[0][1].counts.instructions += 1;
    let window = Window { from: 1, to: u64::MAX, thread: None };
    let mut rec = Recovery::new(&p, 1);
    rec.seek(window, Some(&lying)).unwrap();
    let err = rec.events(Source::Dep).run(Numbered::default()).unwrap_err();
    assert!(matches!(err, RecoverError::IndexCount { seq: 1, .. }), "{err}");
    // The true index reads the same window.
    let mut rec = Recovery::new(&p, 1);
    rec.seek(window, Some(&index)).unwrap();
    rec.events(Source::Dep).run(Numbered::default()).unwrap();
}

#[test]
fn windows_that_cannot_be_read_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let p = simulated(dir.path(), 3, 2, 300);
    let index = seek::count(&Recovery::new(&p, 1), &|_| {}).unwrap();
    let mut rec = Recovery::new(&p, 1);
    let err = rec.seek(Window { from: 5, to: 5, thread: None }, Some(&index)).unwrap_err();
    assert!(matches!(err, RecoverError::Window(WindowError::Empty { from: 5, to: 5 })), "{err}");
    let err = rec.seek(Window { from: 0, to: 9, thread: Some(2) }, Some(&index)).unwrap_err();
    assert!(matches!(err, RecoverError::Window(WindowError::NoThread { thread: 2, threads: 2 })), "{err}");
    let err = rec.seek(Window { from: 0, to: 9, thread: None }, None).unwrap_err();
    assert!(matches!(err, RecoverError::Index { .. }), "{err}");
    let past = index.instructions(0).max(index.instructions(1));
    assert!(!rec.seek(Window { from: past, to: u64::MAX, thread: None }, Some(&index)).unwrap());
    let err = rec.window_empty(Some(&index)).unwrap_err();
    assert!(matches!(err, RecoverError::Window(WindowError::Outside { .. })), "{err}");
    // An index of another profile.
    let mut short = index.clone();
    short.threads[1].pop();
    let err = rec.seek(Window { from: 1, to: 9, thread: None }, Some(&short)).unwrap_err();
    assert!(matches!(err, RecoverError::Window(WindowError::Index { thread: 1, .. })), "{err}");
    // A whole thread needs no index.
    assert!(rec.seek(Window { from: 0, to: u64::MAX, thread: Some(1) }, None).unwrap());
    assert_eq!(rec.chunks().len(), p.threads[1].chunks.len());
}
