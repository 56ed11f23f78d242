//! The counts of `dep stats`, chunk-parallel: everything but the baselines' compressed
//! sizes, which need each thread's streams in order ([`StatsSink`](crate::StatsSink)).
//!
//! A chunk's [`Tally`] counts its own blocks, references and markers; edges go through
//! [`EdgeCounts`], which replays what a chunk's first block cannot know when merged, so the
//! branch counts are those the sequential tracker reports. Recorded windows are kept as
//! stretches between "unrecorded" markers and numbered when the thread is whole.

use crate::edge_counts::EdgeCounts;
use crate::edges::EdgeKind;
use crate::events::{Begin, BlockEvent, Marker, MemEvent, Run};
use crate::plans::Plans;
use crate::sink::{Merge, Sink};
use crate::RecoverError;
use dep_profile::semantics::Access;

/// The instructions between two "unrecorded" markers of a thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Stretch {
    /// The unrecorded instructions before it: `None` at the thread's (or chunk's) start,
    /// where no marker began it.
    gap: Option<u64>,
    instructions: u64,
    /// A block ran in it (so it is a recorded window).
    blocks: bool,
}

/// One thread's counts, or one chunk's (a [`Merge`] sink).
pub struct Tally<'p> {
    plans: &'p Plans,
    edges: EdgeCounts<'p>,
    /// Any event arrived (a thread without one has no statistics).
    pub(crate) seen: bool,
    pub(crate) interrupted_blocks: u64,
    pub(crate) blocks_without_plan: u64,
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) signals: u64,
    stretches: Vec<Stretch>,
}

impl<'p> Tally<'p> {
    /// Counts from a thread's start (or, after `begin` of a chunk, from the chunk's).
    pub fn new(plans: &'p Plans) -> Self {
        Tally {
            plans,
            edges: EdgeCounts::new(plans),
            seen: false,
            interrupted_blocks: 0,
            blocks_without_plan: 0,
            reads: 0,
            writes: 0,
            signals: 0,
            stretches: vec![Stretch::default()],
        }
    }

    fn stretch(&mut self) -> &mut Stretch {
        self.stretches.last_mut().expect("a tally has a stretch")
    }

    #[inline]
    fn access(&mut self, refs: &[MemEvent]) {
        let writes = refs.iter().filter(|m| m.access == Access::Write).count() as u64;
        self.writes += writes;
        self.reads += refs.len() as u64 - writes;
    }

    /// Blocks and instructions.
    pub fn blocks(&self) -> (u64, u64) {
        (self.edges.blocks, self.edges.instructions)
    }

    /// The unrecorded instructions, and the recorded windows (first instruction, one past
    /// the last) where any were unrecorded, for a whole thread.
    pub(crate) fn windows(&self) -> (u64, Vec<[u64; 2]>) {
        // As the sequential count numbers them: a window opens at its first block and
        // closes at the next marker, or at the thread's end.
        let (mut at, mut unrecorded, mut open, mut windows) = (0u64, 0u64, None, Vec::new());
        for s in &self.stretches {
            if let Some(n) = s.gap {
                if let Some(start) = open.take() {
                    windows.push([start, at]);
                }
                at = at.saturating_add(n);
                unrecorded = unrecorded.saturating_add(n);
            }
            if s.blocks {
                open.get_or_insert(at);
            }
            at = at.saturating_add(s.instructions);
        }
        if let Some(start) = open.filter(|_| unrecorded > 0) {
            windows.push([start, at]);
        }
        (unrecorded, windows)
    }

    /// The branch counts CF_bit is made of: (conditional, taken, indirect, unresolved).
    pub(crate) fn branches(&self) -> (u64, u64, u64, u64) {
        let (mut cond, mut taken, mut indirect, mut unresolved) = (0, 0, 0, 0);
        for (e, n) in self.edges.edges() {
            match e.kind {
                EdgeKind::Taken => {
                    cond += n;
                    taken += n;
                }
                EdgeKind::NotTaken => cond += n,
                EdgeKind::IndirectJump | EdgeKind::IndirectCall | EdgeKind::Return => indirect += n,
                _ => {}
            }
            if e.unresolved() {
                unresolved += n;
            }
        }
        (cond, taken, indirect, unresolved)
    }
}

impl Sink for Tally<'_> {
    type Error = RecoverError;

    fn begin(&mut self, b: &Begin) -> Result<bool, RecoverError> {
        self.edges.begin(b)
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.seen = true;
        self.interrupted_blocks += b.interrupted as u64;
        // Truth replay's blocks come with their plans where the table has them.
        let planned = b.plan.is_some() || self.plans.get(b.addr, b.version).is_ok();
        self.blocks_without_plan += !planned as u64;
        let s = self.stretch();
        s.instructions = s.instructions.saturating_add(b.executed as u64);
        s.blocks = true;
        self.edges.block(b)
    }

    #[inline]
    fn refs(&mut self, _: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        self.seen = true;
        self.access(refs);
        Ok(true)
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, RecoverError> {
        self.seen = true;
        match m {
            Marker::Signal(_) => self.signals += 1,
            Marker::Unrecorded(n) => self.stretches.push(Stretch { gap: Some(n), ..Default::default() }),
            _ => {}
        }
        self.edges.marker(thread, m)
    }

    fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
        self.seen = true;
        let executed: u64 = run.blocks().iter().map(|b| b.executed as u64).sum();
        let s = self.stretch();
        s.instructions = s.instructions.saturating_add(executed);
        s.blocks |= !run.blocks().is_empty();
        self.access(run.refs());
        self.edges.run(run)
    }

    fn finish(&mut self) -> Result<(), RecoverError> {
        self.edges.finish()
    }
}

impl Merge for Tally<'_> {
    fn merge(&mut self, later: Self) -> Result<bool, RecoverError> {
        self.seen |= later.seen;
        self.interrupted_blocks += later.interrupted_blocks;
        self.blocks_without_plan += later.blocks_without_plan;
        self.reads += later.reads;
        self.writes += later.writes;
        self.signals += later.signals;
        let mut rest = later.stretches.into_iter();
        if let Some(first) = rest.next() {
            // A chunk that does not start with a marker goes on with the stretch before it.
            match first.gap {
                None => {
                    let s = self.stretch();
                    s.instructions = s.instructions.saturating_add(first.instructions);
                    s.blocks |= first.blocks;
                }
                Some(_) => self.stretches.push(first),
            }
        }
        self.stretches.extend(rest);
        self.edges.merge(later.edges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Part, Recovery, Source};
    use dep_profile::container::Profile;
    use dep_profile::simulate::{random_code, write_profile, PathStep, Rng};
    use dep_profile::Machine;

    /// Windows numbered as `dep record` plans them: a window opens at its first block and
    /// closes at the next "unrecorded" marker or the thread's end, whether the events come
    /// to one tally or to chunks' tallies merged in order.
    #[test]
    fn windows_are_numbered_across_chunks() {
        let mut rng = Rng::new(3);
        let code = random_code(&mut rng, 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.dep");
        write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &code, &[vec![PathStep::Block(0)]], 3).unwrap();
        let p = Profile::open(&path).unwrap();
        let rec = Recovery::new(&p, 1);
        let block = |executed: u32| BlockEvent { thread: 0, addr: 0x10, version: 0, id: None, plan: None, executed, interrupted: false };
        let begin = |part| Begin::new(&p, &rec.plans, Source::Dep, part);
        // Chunks: [3, 2] | [100 unrecorded, 4, 5] | [50 unrecorded] | [7]
        let feed = |t: &mut Tally, events: &[Result<u32, u64>]| {
            for e in events {
                match *e {
                    Ok(n) => t.block(&block(n)).unwrap(),
                    Err(n) => t.marker(0, Marker::Unrecorded(n)).unwrap(),
                };
            }
        };
        let chunks: [&[Result<u32, u64>]; 4] = [&[Ok(3), Ok(2)], &[Err(100), Ok(4), Ok(5)], &[Err(50)], &[Ok(7)]];
        let mut whole = Tally::new(&rec.plans);
        whole.begin(&begin(Part::Thread(0))).unwrap();
        let mut merged = Tally::new(&rec.plans);
        merged.begin(&begin(Part::Thread(0))).unwrap();
        for (seq, events) in chunks.iter().enumerate() {
            feed(&mut whole, events);
            let mut c = Tally::new(&rec.plans);
            c.begin(&begin(Part::Chunk { thread: 0, seq: seq as u32 })).unwrap();
            feed(&mut c, events);
            c.finish().unwrap();
            merged.merge(c).unwrap();
        }
        // 0..5 recorded, 100 not, 105..114 recorded, 50 not, 164..171 recorded.
        let want = (150, vec![[0, 5], [105, 114], [164, 171]]);
        assert_eq!(whole.windows(), want);
        assert_eq!(merged.windows(), want);
        assert_eq!(merged.blocks(), (5, 21));
        assert_eq!(merged.blocks_without_plan, 5, "blocks the table has no plan for");
        // A thread recorded whole lists no windows.
        let mut plain = Tally::new(&rec.plans);
        feed(&mut plain, &[Ok(3), Ok(4)]);
        assert_eq!(plain.windows(), (0, vec![]));
    }
}
