//! Windows of instructions on simulated profiles (chunk hand-offs, signals, faults, several
//! threads): a window's run gives exactly the blocks of the whole run whose first
//! instruction is numbered in it (the whole run's blocks, numbered here, are the oracle),
//! with every engine, sequentially and in parallel; it reads only the chunks that hold
//! them; it marks where each thread's part starts and ends; and a seek index that does not
//! say what a chunk holds is an error where that chunk is read.

use dep_profile::container::{Index, Profile, ProfileWriter, ThreadEvent, ThreadEventKind};
use dep_profile::simulate::{random_code, random_path, write_profile_with, Rng};
use dep_profile::Machine;
use dep_recover::{
    seek, stats, BlockEvent, Counts, Engine, Format, Marker, MemEvent, RecoverError, Recovery, Renderer, Sink, Source, Window, WindowError,
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
/// Instructions the test put in gaps before chunks (`gaps`, by thread and chunk) are
/// numbered too, where the chunk starts.
#[derive(Default)]
struct Numbered {
    blocks: Vec<Block>,
    next: Vec<u64>,
    gaps: std::collections::HashMap<(u32, u32), u64>,
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

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, RecoverError> {
        if let Some(&n) = match m {
            Marker::ChunkStart(seq) => self.gaps.get(&(thread, seq)),
            _ => None,
        } {
            let t = thread as usize;
            if self.next.len() <= t {
                self.next.resize(t + 1, 0);
            }
            self.next[t] += n;
        }
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

/// `dep record` windows leave gaps: instructions a thread ran unrecorded before some of its
/// chunks (thread events the test appends to a simulated profile, whose blocks go on as
/// if nothing was left out). Recovery gives each gap as one marker before the chunk's
/// first block, numbers instructions on across it (the index, windows, `dep stats`
/// windows), and gives the same blocks and references as without it.
#[test]
fn gaps_are_numbered_across_and_marked_once() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 20..26u64 {
        let threads = 1 + (seed % 3) as usize;
        let p = simulated(dir.path(), seed, threads, 1500);
        let path = p.path().to_string();
        let plain = render(&Recovery::new(&p, 1), Format::Text, false);
        // Gaps before random chunks after the first.
        let mut rng = Rng::new(seed ^ 0x6a95);
        let mut gaps = std::collections::HashMap::new();
        for t in &p.threads {
            for c in t.chunks.iter().skip(1) {
                if rng.below(2) == 0 {
                    gaps.insert((c.thread, c.seq), 1 + rng.below(1 << 20));
                }
            }
        }
        assert!(!gaps.is_empty(), "seed {seed}: {} chunks", p.chunk_count());
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        let mut w = ProfileWriter::appending(file, p.width, 1, len);
        for (&(thread, seq), &n) in &gaps {
            let e = ThreadEvent {
                event: ThreadEventKind::Unrecorded,
                index: thread,
                chunk: Some(seq),
                instructions: Some(n),
                ..Default::default()
            };
            w.thread(&e).unwrap();
        }
        w.flush().unwrap();
        drop((w, p));
        let p = Profile::open(&path).unwrap();
        let whole = Recovery::new(&p, 2);
        assert_eq!(render(&whole, Format::Text, true), plain, "seed {seed}: the references are the same");
        let mut all = Numbered { gaps: gaps.clone(), ..Default::default() };
        whole.events(Source::Dep).run(&mut all).unwrap();

        // One marker per gap, with its count, before the chunk's first block.
        let mut order = Vec::new();
        struct Order<'a>(&'a mut Vec<(u32, String)>);
        impl Sink for Order<'_> {
            type Error = RecoverError;
            fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
                self.0.push((b.thread, "b".into()));
                Ok(true)
            }
            fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, RecoverError> {
                match m {
                    Marker::ChunkStart(s) => self.0.push((thread, format!("c{s}"))),
                    Marker::Unrecorded(n) => self.0.push((thread, format!("u{n}"))),
                    _ => {}
                }
                Ok(true)
            }
        }
        whole.events(Source::Dep).run(Order(&mut order)).unwrap();
        let mut want_marks = Vec::new();
        for t in 0..p.threads.len() as u32 {
            let mine: Vec<&String> = order.iter().filter(|(x, _)| *x == t).map(|(_, m)| m).collect();
            for (k, m) in mine.iter().enumerate() {
                if let Some(n) = m.strip_prefix('u') {
                    let next = mine.get(k + 1).map(|s| s.as_str()).unwrap_or("");
                    let seq: u32 = next.strip_prefix('c').expect("a gap comes right before its chunk's start").parse().unwrap();
                    assert_eq!(gaps.get(&(t, seq)).map(|g| g.to_string()).as_deref(), Some(n), "seed {seed} thread {t} chunk {seq}");
                    want_marks.push((t, seq));
                }
            }
        }
        assert_eq!(want_marks.len(), gaps.len(), "seed {seed}: one marker per gap");

        // Counts and the index number the gaps.
        let mut counts = Counts::default();
        whole.events(Source::Dep).run(&mut counts).unwrap();
        assert_eq!(counts.unrecorded, gaps.values().sum::<u64>(), "seed {seed}");
        let index = seek::count(&whole, &|_| {}).unwrap();
        for t in 0..p.threads.len() as u32 {
            assert_eq!(index.instructions(t), all.next.get(t as usize).copied().unwrap_or(0), "seed {seed}: thread {t}'s count");
        }
        // `dep stats` windows: the recorded stretches between the gaps, as numbered here.
        let st = stats::compute(&whole, Source::Dep, false).unwrap();
        for t in 0..p.threads.len() as u32 {
            let mut want: Vec<[u64; 2]> = Vec::new();
            let mut prev_end = None;
            for b in all.blocks.iter().filter(|b| b.thread == t) {
                let n: u64 = b.block_line.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
                match (want.last_mut(), prev_end) {
                    (Some(w), Some(e)) if e == b.start => w[1] = b.start + n,
                    _ => want.push([b.start, b.start + n]),
                }
                prev_end = Some(b.start + n);
            }
            let ts = st.threads.iter().find(|x| x.thread == Some(t)).unwrap();
            let gapped = gaps.keys().any(|&(x, _)| x == t);
            assert_eq!(ts.windows, if gapped { want } else { vec![] }, "seed {seed}: thread {t}'s windows");
        }
        // Windows across the gaps give the blocks numbered in them.
        let total = all.next.iter().copied().max().unwrap_or(0);
        for _ in 0..6 {
            let from = rng.below(total + 1);
            let window = Window { from, to: from + 1 + rng.below(total / 2 + 1), thread: None };
            let want: String = all.blocks.iter().filter(|b| window.holds(b.start)).map(|b| b.ref_lines.as_str()).collect();
            let mut rec = Recovery::new(&p, 2);
            if !rec.seek(window, Some(&index)).unwrap() {
                assert_eq!(want, "", "seed {seed} window {window:?}");
                continue;
            }
            assert!(render(&rec, Format::Text, true) == want, "seed {seed} window {window:?}: references differ");
        }
    }
}
