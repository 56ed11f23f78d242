//! The drivers for stateful analyses against the one-threaded run: edge counts, per-thread
//! instruction totals and call depth must not depend on how the stream was cut into chunks
//! and spread over workers, on simulated programs with many chunks, several threads,
//! signals and faults (handlers often span chunk boundaries).

#[path = "../../recover/tests/common/mod.rs"]
mod common;

use common::program_profile;
use dep_dcfg_out::edges::{Depth, EdgeCounts};
use dep_profile::container::Profile;
use dep_recover::edges::EdgeKind;
use dep_recover::{Begin, BlockEvent, ByThread, Counts, MemEvent, RecoverError, Recovery, Sink, Source, Tee};

/// What is compared: per thread, the sorted edges, blocks, instructions and depth.
type Summary = Vec<(Vec<(dep_recover::edges::Edge, u64)>, u64, u64, Depth)>;

fn summary(threads: &[EdgeCounts]) -> Summary {
    threads.iter().map(|t| (t.sorted(), t.blocks, t.instructions, t.depth)).collect()
}

fn one_threaded(rec: &Recovery, source: Source) -> Summary {
    let mut by = ByThread::new(|_| EdgeCounts::new(&rec.plans));
    rec.events(source).run(&mut by).unwrap();
    summary(&by.into_threads())
}

#[test]
fn parallel_drivers_agree_with_the_one_threaded_run() {
    let mut handlers_across_chunks = 0;
    let mut kinds = std::collections::HashSet::new();
    let mut max_depth = 0;
    for seed in 0..24u64 {
        let threads = 1 + (seed % 4) as usize;
        let (_dir, p) = program_profile(seed, threads, 3000, false);
        let chunks: usize = p.threads.iter().map(|t| t.chunks.len()).sum();
        assert!(chunks >= 40 * threads, "seed {seed}: only {chunks} chunks");
        let base = one_threaded(&Recovery::new(&p, 1), Source::Dep);
        // The control flow alone (DEP_c, no values) gives the same edges.
        assert_eq!(one_threaded(&Recovery::new(&p, 1), Source::Blocks), base, "seed {seed}: Source::Blocks");
        kinds.extend(base.iter().flat_map(|t| t.0.iter().map(|(e, _)| e.kind)));
        max_depth = max_depth.max(base.iter().map(|t| t.3.max).max().unwrap_or(0));
        let mut counts = Counts::default();
        Recovery::new(&p, 1).events(Source::Dep).run(&mut counts).unwrap();
        assert_eq!(base.iter().map(|t| t.2).sum::<u64>(), counts.instructions, "seed {seed}: instruction total");
        assert_eq!(base.iter().map(|t| t.1).sum::<u64>(), counts.blocks, "seed {seed}: block total");
        for workers in 1..=3 {
            let rec = Recovery::new(&p, workers);
            let merged = rec.events(Source::Dep).merged(|_| EdgeCounts::new(&rec.plans)).unwrap();
            assert_eq!(summary(&merged), base, "seed {seed}: merged on {workers} workers");
            let by_thread = rec.events(Source::Dep).per_thread(|_| EdgeCounts::new(&rec.plans)).unwrap();
            assert_eq!(summary(&by_thread), base, "seed {seed}: per_thread on {workers} workers");
            // Counts summed in whatever order chunks finish equal those summed in order.
            let (mut sum, mut in_order) = (Counts::default(), Counts::default());
            rec.events(Source::Dep)
                .ordered(
                    |_| Counts::default(),
                    Ok,
                    |_| 0,
                    |_, c| {
                        in_order.add(&c);
                        Ok(())
                    },
                )
                .unwrap();
            assert_eq!((in_order.blocks, in_order.reads, in_order.writes), (counts.blocks, counts.reads, counts.writes));
            rec.events(Source::Dep)
                .unordered(
                    |_| Counts::default(),
                    Ok,
                    |_, c| {
                        sum.add(&c);
                        Ok(())
                    },
                )
                .unwrap();
            assert_eq!(sum, in_order, "seed {seed}: unordered counts on {workers} workers");
        }
        handlers_across_chunks += handlers_spanning_chunks(&p);
    }
    // The edges really are classified: calls, returns and signals all occur, calls nest.
    for k in [EdgeKind::DirectCall, EdgeKind::Return, EdgeKind::Taken, EdgeKind::NotTaken, EdgeKind::Signal, EdgeKind::SignalReturn] {
        assert!(kinds.contains(&k), "no {k:?} edge");
    }
    assert!(max_depth >= 3, "calls nest only {max_depth} deep");
    // The hard case of the merge, a handler returning into an earlier chunk, was exercised.
    assert!(handlers_across_chunks > 20, "only {handlers_across_chunks} handlers spanned chunks");
}

/// Signal returns in a chunk that entered no handler of its own before them.
fn handlers_spanning_chunks(p: &Profile) -> usize {
    struct Spans {
        open: usize,
        found: usize,
    }
    impl Sink for Spans {
        type Error = RecoverError;
        fn begin(&mut self, _: &Begin) -> Result<bool, RecoverError> {
            self.open = 0;
            Ok(true)
        }
        fn block(&mut self, _: &BlockEvent) -> Result<bool, RecoverError> {
            Ok(true)
        }
        fn marker(&mut self, _: u32, m: dep_recover::Marker) -> Result<bool, RecoverError> {
            match m {
                dep_recover::Marker::Signal(_) => self.open += 1,
                dep_recover::Marker::SignalReturn if self.open == 0 => self.found += 1,
                dep_recover::Marker::SignalReturn => self.open -= 1,
                _ => {}
            }
            Ok(true)
        }
    }
    let rec = Recovery::new(p, 1);
    let mut found = 0;
    rec.events(Source::Dep)
        .ordered(
            |_| Spans { open: 0, found: 0 },
            |s| Ok(s.found),
            |_| 0,
            |_, n| {
                found += n;
                Ok(())
            },
        )
        .unwrap();
    found
}

/// A sink's own error: what tests match by variant.
#[derive(Debug, thiserror::Error)]
enum LimitError {
    #[error("the exporter's own failure after {0} blocks")]
    Mine(u64),
    #[error(transparent)]
    Recover(#[from] RecoverError),
}

/// A sink that stops after `limit` blocks, and one that fails.
#[derive(Debug)]
struct Limited {
    limit: u64,
    blocks: u64,
    finished: bool,
    fail: bool,
}

impl Limited {
    fn new(limit: u64, fail: bool) -> Self {
        Limited { limit, blocks: 0, finished: false, fail }
    }
}

impl Sink for Limited {
    type Error = LimitError;
    fn block(&mut self, _: &BlockEvent) -> Result<bool, LimitError> {
        if self.blocks == self.limit {
            return if self.fail { Err(LimitError::Mine(self.blocks)) } else { Ok(false) };
        }
        self.blocks += 1;
        Ok(true)
    }
    fn finish(&mut self) -> Result<(), LimitError> {
        self.finished = true;
        Ok(())
    }
}

#[test]
fn a_sink_stops_early_or_fails_with_its_own_error() {
    let (_dir, p) = program_profile(5, 2, 2000, false);
    let rec = Recovery::new(&p, 2);
    let mut s = Limited::new(100, false);
    rec.events(Source::Dep).run(&mut s).unwrap();
    assert_eq!((s.blocks, s.finished), (100, true));
    // Per thread: each thread's sink stops on its own.
    let per = rec.events(Source::Dep).per_thread(|_| Limited::new(50, false)).unwrap();
    assert_eq!(per.iter().map(|s| (s.blocks, s.finished)).collect::<Vec<_>>(), [(50, true), (50, true)]);
    // A boxed sink is a sink.
    let mut boxed: Box<Limited> = Box::new(Limited::new(100, true));
    assert!(matches!(rec.events(Source::Dep).run(&mut boxed), Err(LimitError::Mine(100))));
    assert!(!boxed.finished, "a sink that failed is finished");
    assert!(matches!(rec.events(Source::Dep).per_thread(|_| Limited::new(10, true)), Err(LimitError::Mine(10))));
}

/// A tee gives both sinks every event until each stops, and runs until both have.
#[test]
fn a_tee_feeds_two_sinks_until_both_stop() {
    let (_dir, p) = program_profile(6, 2, 2000, false);
    let rec = Recovery::new(&p, 1);
    let mut all = Counts::default();
    rec.events(Source::Dep).run(&mut all).unwrap();
    // Counts do not stop: the tee's other side sees everything too.
    let mut tee = Tee::new(Limited::new(u64::MAX, false), TallyRefs::default());
    rec.events(Source::Dep).run(&mut tee).unwrap();
    let (a, b) = tee.into_inner();
    assert_eq!((a.blocks, b.refs, a.finished), (all.blocks, all.reads + all.writes, true));
    // One side stopping does not stop the other.
    let mut tee = Tee::new(Limited::new(30, false), Limited::new(300, false));
    rec.events(Source::Dep).run(&mut tee).unwrap();
    let (a, b) = tee.into_inner();
    assert_eq!((a.blocks, b.blocks, a.finished, b.finished), (30, 300, true, true));
    // A failure of either side is the run's.
    let mut tee = Tee::new(Limited::new(300, false), Limited::new(30, true));
    assert!(matches!(rec.events(Source::Dep).run(&mut tee), Err(LimitError::Mine(30))));
}

/// References with the block they belong to: each reference's pc is an instruction of that
/// block, and the block is the one last entered.
#[derive(Default)]
struct TallyRefs {
    last: Option<(u32, u64)>,
    refs: u64,
}

impl Sink for TallyRefs {
    type Error = LimitError;
    fn block(&mut self, b: &BlockEvent) -> Result<bool, LimitError> {
        self.last = Some((b.thread, b.addr));
        Ok(true)
    }
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, LimitError> {
        assert_eq!(self.last, Some((b.thread, b.addr)), "references given with a block other than the last entered");
        let plan = b.plan.expect("simulated blocks are in the table");
        for m in refs {
            assert_eq!(plan.insns[m.insn as usize].pc, m.pc, "a reference outside its block");
        }
        self.refs += refs.len() as u64;
        Ok(true)
    }
}

/// Every sink sees the profile's tables and its part at `begin`.
#[test]
fn begin_carries_the_profile_tables() {
    #[derive(Default)]
    struct Seen {
        parts: Vec<dep_recover::Part>,
        threads: usize,
        blocks: usize,
        ids_ok: bool,
    }
    impl Sink for Seen {
        type Error = RecoverError;
        fn begin(&mut self, b: &Begin) -> Result<bool, RecoverError> {
            self.parts.push(b.part);
            self.threads = b.threads.len();
            self.blocks = b.plans.len();
            self.ids_ok = true;
            Ok(true)
        }
        fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
            // The id names the block in the table the sink was given.
            self.ids_ok &= b.id.is_some() && b.plan.is_some_and(|p| p.addr == b.addr);
            Ok(true)
        }
    }
    let (_dir, p) = program_profile(9, 3, 500, false);
    let rec = Recovery::new(&p, 2);
    let mut s = Seen::default();
    rec.events(Source::Dep).run(&mut s).unwrap();
    assert_eq!((s.parts.as_slice(), s.threads, s.blocks, s.ids_ok), (&[dep_recover::Part::All][..], 3, p.blocks().len(), true));
    let per = rec.events(Source::Dep).per_thread(|_| Seen::default()).unwrap();
    let parts: Vec<_> = per.iter().map(|s| s.parts.clone()).collect();
    assert_eq!(parts, (0..3).map(|t| vec![dep_recover::Part::Thread(t)]).collect::<Vec<_>>());
    assert!(per.iter().all(|s| s.ids_ok));
}

/// Each reference's instruction index names, in its block's plan, the instruction at its pc,
/// for every engine (the compiled code writes the index itself) and for truth replay.
#[test]
fn references_name_their_instruction() {
    /// The pcs of the current block's instructions, and what was checked.
    #[derive(Default)]
    struct Check {
        pcs: Vec<u64>,
        refs: u64,
        wrong: u64,
    }
    impl Sink for Check {
        type Error = RecoverError;
        fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
            let plan = b.plan.expect("every simulated block is in the table");
            self.pcs = plan.insns.iter().map(|i| i.pc).collect();
            Ok(true)
        }
        fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
            for m in refs {
                self.refs += 1;
                self.wrong += (self.pcs.get(m.insn as usize) != Some(&m.pc)) as u64;
            }
            Ok(true)
        }
    }
    for seed in [1u64, 2, 3] {
        let (_dir, p) = program_profile(seed, 2, 3000, false);
        for engine in [dep_recover::Engine::Walk, dep_recover::Engine::Compiled] {
            let rec = Recovery::with_engine(&p, 1, engine);
            for source in [Source::Dep, Source::Truth] {
                let mut c = Check::default();
                rec.events(source).run(&mut c).unwrap();
                assert!(c.refs > 1000, "seed {seed}: {} references", c.refs);
                assert_eq!(c.wrong, 0, "seed {seed} {engine:?} {source:?}: {} of {} references name another instruction", c.wrong, c.refs);
            }
        }
    }
}
