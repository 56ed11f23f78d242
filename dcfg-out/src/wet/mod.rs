//! WET dependence traces (the formats of `shared/specs/wet-trace-format.txt`): every
//! dynamic instruction instance's control and data dependences, and the values the
//! profile determines, per static instruction (the comprehensive format), or the last N
//! dependences (the limited-history format).
//!
//! Three passes over the profile: DEP_c alone for the targets of indirect jumps (the only
//! edges the block table cannot give), the full recovery into the dependence engine (the
//! recovery beside the engine, handing events over in batches, and the engine's memory
//! half on a thread of its own, [`memside`]), then the comprehensive format's reordering,
//! from memory and from runs spilled to temporary files.

pub mod chunk;
pub mod control;
pub mod engine;
pub mod handoff;
pub mod memside;
pub mod ops;
pub mod shadow;
pub mod statics;
pub mod store;
pub mod template;
pub mod text;
pub mod values;

use crate::program::calls::BlockExits;
use crate::program::symbols::Symbolizer;
use dep_recover::events::{BlockEvent, Marker, MemEvent};
use dep_recover::Sink;
use dep_recover::{RecoverError, Recovery, Source, Turn};
use engine::{Engine, EngineError, Out};
use rustc_hash::FxHashSet;
use statics::Statics;
use std::collections::VecDeque;
use std::io::{self, Write};

/// Dependences the limited-history format keeps by default.
pub const DEFAULT_HISTORY: usize = 100_000;
/// Bytes of dependences held in memory before a run is spilled, by default.
pub const DEFAULT_MEMORY: usize = 1 << 30;

/// What to write.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The limited-history format with this many dependences; None: the comprehensive one.
    pub history: Option<usize>,
    /// Bytes of dependences to hold before spilling (comprehensive format).
    pub memory: usize,
}

/// What a trace held.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    /// Dynamic instances and the dependences among them.
    pub instances: u64,
    pub deps: u64,
    /// Static instructions executed.
    pub executed: usize,
    /// Runs spilled to temporary files.
    pub runs: usize,
    /// Blocks without a decodable plan (skipped).
    pub unplanned: u64,
    /// Peak bytes of one thread's memory shadow.
    pub shadow_peak: usize,
    /// Seconds spent on the dependences (recovery and engine) and on writing the format.
    pub engine_secs: f64,
    pub write_secs: f64,
}

/// Why a trace could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WetError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("{0}")]
    Engine(#[from] EngineError),
    #[error("writing the WET trace: {0}")]
    Io(#[from] io::Error),
    #[error("the profile has {0} distinct instructions, more than a WET trace here numbers ({max})", max = shadow::MAX_IDS)]
    TooManyInstructions(usize),
}

/// Writes `rec`'s profile as a WET trace to `out`, and the names of each executed
/// instruction's use ports to `ports` (see [`port_names`]).
pub fn write(
    rec: &Recovery,
    symbols: &Symbolizer,
    opts: &Options,
    out: &mut dyn Write,
    ports: Option<&mut dyn Write>,
) -> Result<Summary, WetError> {
    let indirect = indirect_targets(rec)?;
    let versions: Vec<u32> = rec.profile.blocks().iter().map(|b| b.version).collect();
    let st = Statics::build(&rec.plans, &versions, &indirect, rec.profile.machine(), &|a| symbols.code(a));
    if st.insns.len() >= shadow::MAX_IDS {
        return Err(WetError::TooManyInstructions(st.insns.len()));
    }
    let sink = match opts.history {
        Some(cap) => Out::History { ring: VecDeque::with_capacity(cap.min(1 << 24)), cap },
        None => Out::Store(store::Background::new(store::Store::new(st.segs as usize, opts.memory))?),
    };
    let exits = BlockExits::build(&rec.plans, symbols);
    let mut engine = Engine::new(&st, &exits, &rec.plans, sink).map_err(EngineError::Io)?;
    let started = std::time::Instant::now();
    run_pipelined(rec, &mut engine)?;
    // The store's thread may still be encoding the last records: that is the engine's time.
    enum Done {
        History(VecDeque<[u64; 4]>),
        Store(store::Store),
    }
    let done = match engine.out {
        Out::History { ring, .. } => Done::History(ring),
        // (Its errors are the engine's, as those it reports while the engine runs.)
        Out::Store(store) => Done::Store(store.finish().map_err(EngineError::Io)?),
    };
    let engine_secs = started.elapsed().as_secs_f64();
    let mut summary = Summary {
        instances: engine.instances,
        deps: engine.deps,
        executed: engine.counts.iter().filter(|&&c| c > 0).count(),
        runs: 0,
        unplanned: engine.unplanned,
        shadow_peak: engine.shadow_peak,
        engine_secs,
        write_secs: 0.0,
    };
    let started = std::time::Instant::now();
    match done {
        Done::History(ring) => text::history(ring.iter(), out)?,
        Done::Store(store) => {
            summary.runs = store.runs();
            let places = static_places(&st, &engine.counts, symbols);
            let totals: Vec<u64> = (0..st.segs).map(|s| store.total(s)).collect();
            let workers = std::thread::available_parallelism().map_or(1, |w| w.get());
            text::comprehensive(
                &st,
                &engine.counts,
                &|s| totals[s as usize],
                store.into_reader(),
                &|id| places[id as usize].clone(),
                workers,
                out,
            )?;
        }
    }
    out.flush()?;
    summary.write_secs = started.elapsed().as_secs_f64();
    if let Some(w) = ports {
        port_names(&st, &rec.plans, &engine.counts, w)?;
    }
    Ok(summary)
}

/// One line per executed instruction, `id instr_addr port...`, naming its use ports in
/// the comprehensive format's order: `control`; each register read, as `reg` or
/// `reg:lo-hi` for bytes `lo..hi` of it (`rax:0-1` is al); `flags`; `mem0`, `mem1`, ...
/// for its memory operands read.
pub fn port_names(st: &Statics, plans: &dep_recover::plans::Plans, counts: &[u64], out: &mut dyn Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(out);
    for (id, s) in st.insns.iter().enumerate() {
        if counts[id] == 0 {
            continue;
        }
        let insn = &plans.plan(s.block).insns[s.index as usize];
        write!(w, "{id} {:x} control", s.pc)?;
        for r in &insn.bytes.reads {
            let whole = if r.reg.is_gpr() {
                8
            } else if (16..48).contains(&r.reg.index()) {
                64
            } else {
                1
            };
            if r.lo == 0 && r.hi == whole {
                write!(w, " {}", r.reg.name())?;
            } else {
                write!(w, " {}:{}-{}", r.reg.name(), r.lo, r.hi)?;
            }
        }
        if insn.regs.flags_read != 0 {
            write!(w, " flags")?;
        }
        let mems = insn.refs.iter().filter(|r| r.access == dep_profile::semantics::Access::Read).count();
        for k in 0..mems {
            write!(w, " mem{k}")?;
        }
        writeln!(w)?;
    }
    w.flush()
}

/// `file_name function_name line_num` of every executed instruction (empty for the
/// others), looked up on all cores.
fn static_places(st: &Statics, counts: &[u64], symbols: &Symbolizer) -> Vec<String> {
    let ran: Vec<usize> = (0..st.insns.len()).filter(|&id| counts[id] > 0).collect();
    let addrs: Vec<u64> = ran.iter().map(|&id| st.insns[id].pc).collect();
    let mut places = vec![String::new(); st.insns.len()];
    for (id, place) in ran.into_iter().zip(symbols.places(&addrs)) {
        places[id] = format!("{} {} {}", text::field(place.file.as_deref()), text::field(Some(&place.function)), place.line.unwrap_or(0));
    }
    places
}

/// The (block, next block) pairs of every indirect jump the run took, from DEP_c alone,
/// chunks in parallel.
fn indirect_targets(rec: &Recovery) -> Result<FxHashSet<(u32, u32)>, RecoverError> {
    /// Per chunk: pairs inside it, its first block (if no marker came before it) and its
    /// last block (if it left by an indirect jump and no marker followed).
    #[derive(Default)]
    struct Pairs<'p> {
        plans: Option<&'p dep_recover::plans::Plans>,
        pairs: FxHashSet<(u32, u32)>,
        first: Option<Option<u32>>,
        last: Option<u32>,
    }
    impl Sink for Pairs<'_> {
        type Error = RecoverError;

        fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
            if self.first.is_none() {
                self.first = Some(b.id);
            }
            if let (Some(from), Some(to)) = (self.last, b.id) {
                self.pairs.insert((from, to));
            }
            let plans = self.plans.expect("set");
            self.last = b.id.filter(|&id| {
                plans.get_plan(id).is_some_and(|p| {
                    b.executed as usize == p.insns.len()
                        && p.insns.last().is_some_and(|i| i.flow == dep_profile::semantics::Flow::IndirectJump)
                })
            });
            Ok(true)
        }
        fn marker(&mut self, _: u32, m: Marker) -> Result<bool, Self::Error> {
            if !matches!(m, Marker::ChunkStart(_) | Marker::Sync { .. } | Marker::Call { .. } | Marker::Return { .. }) {
                self.first.get_or_insert(None);
                self.last = None;
            }
            Ok(true)
        }
    }
    let mut all = FxHashSet::default();
    let mut carry: Option<(u32, u32)> = None;
    rec.events(Source::Blocks).ordered(
        |_| Pairs { plans: Some(&rec.plans), ..Default::default() },
        |p| Ok((p.pairs, p.first.flatten(), p.last)),
        |t| t.0.len() * 8,
        |c, (pairs, first, last)| {
            if let (Some((thread, from)), Some(to)) = (carry, first) {
                if thread == c.thread {
                    all.insert((from, to));
                }
            }
            all.extend(pairs);
            carry = last.map(|l| (c.thread, l));
            Ok(())
        },
    )?;
    Ok(all)
}

/// Events handed from the recovery to the engine. References name their thread: the
/// interleaving can resume a thread in the middle of a block, after another thread's events.
#[derive(Clone, Copy)]
enum Ev {
    Block { thread: u32, addr: u64, id: Option<u32>, executed: u32, interrupted: bool },
    Refs { thread: u32, n: u32 },
    Marker(u32, Marker),
}

/// Events and their references, with where the interleaving has read them to.
#[derive(Default)]
struct Batch {
    evs: Vec<Ev>,
    refs: Vec<MemEvent>,
    ev_at: usize,
    ref_at: usize,
}

/// The recovery's side of the hand-over: batches events and sends each full batch with
/// `send` (false: the receiver is gone), taking empty ones back from `free`.
struct Forward<F: FnMut(Batch) -> bool> {
    batch: Batch,
    send: F,
    free: crossbeam::channel::Receiver<Batch>,
}

impl<F: FnMut(Batch) -> bool> Forward<F> {
    /// Events a batch holds at most, and references.
    const EVENTS: usize = 4096;
    const REFS: usize = 16384;

    /// Sends the batch; false when the receiver is gone (it failed, and says why).
    fn send(&mut self) -> bool {
        let next = self.free.try_recv().unwrap_or_default();
        let full = std::mem::replace(&mut self.batch, next);
        (self.send)(full)
    }

    /// Adds an event (for `Ev::Refs`, the references `refs`), sending the batch when full.
    /// Answers false when the receiver is gone.
    fn push(&mut self, ev: Ev, refs: &[MemEvent]) -> bool {
        if let Ev::Refs { thread, .. } = ev {
            for part in refs.chunks(Self::REFS) {
                self.batch.refs.extend_from_slice(part);
                self.batch.evs.push(Ev::Refs { thread, n: part.len() as u32 });
                if !self.check() {
                    return false;
                }
            }
            true
        } else {
            self.batch.evs.push(ev);
            self.check()
        }
    }

    #[inline]
    fn check(&mut self) -> bool {
        if self.batch.evs.len() >= Self::EVENTS || self.batch.refs.len() >= Self::REFS {
            return self.send();
        }
        true
    }
}

impl<F: FnMut(Batch) -> bool> Sink for Forward<F> {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        Ok(self.push(Ev::Block { thread: b.thread, addr: b.addr, id: b.id, executed: b.executed, interrupted: b.interrupted }, &[]))
    }
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        Ok(self.push(Ev::Refs { thread: b.thread, n: 0 }, refs))
    }
    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        Ok(self.push(Ev::Marker(thread, m), &[]))
    }
    fn finish(&mut self) -> Result<(), Self::Error> {
        // (A receiver gone has failed, and reports why.)
        if !self.batch.evs.is_empty() {
            self.send();
        }
        Ok(())
    }
}

/// Feeds every thread's events to `take` in an order the sync records allow
/// ([`Events::interleaved`](dep_recover::Events::interleaved)): each thread's segments (its
/// events after a sync point, up to and including its next) whole, in the order of the
/// numbers that begin them. A write in a segment that ended before another began precedes
/// all of that one, so the engine can tell ordered writes from concurrent ones; and each
/// segment streams, so memory stays bounded however long a segment runs. The sync record
/// goes with the segment it ends, not the one it begins, so that the segment's end is
/// known while the other threads' turns before that number run: their writes are
/// settled against it. Profiles without sync records give each thread one segment:
/// threads one after another.
/// (`take` answers false to stop: the engine failed, and says why.)
fn linearize(rec: &Recovery, mut take: impl FnMut(Ev, &[MemEvent]) -> bool) -> Result<(), RecoverError> {
    rec.events(Source::Dep).interleaved(
        // (No batches ahead beyond each producer's own: the engine, not the recovery, is
        // what the run waits on.)
        0,
        // (No recycled batches come back to a producer. Recovery gives each sync record
        // where it stands among its block's references, so a segment ends exactly there.)
        |_, tx| Forward { batch: Batch::default(), send: move |b| tx.send(b), free: crossbeam::channel::never() },
        |_, _, batch: &mut Batch| {
            while let Some(&ev) = batch.evs.get(batch.ev_at) {
                batch.ev_at += 1;
                let refs: &[MemEvent] = match ev {
                    Ev::Refs { n, .. } => {
                        batch.ref_at += n as usize;
                        &batch.refs[batch.ref_at - n as usize..batch.ref_at]
                    }
                    _ => &[],
                };
                if !take(ev, refs) {
                    // The engine failed, and says why.
                    return Ok(Turn::Stop);
                }
                // A sync point ends the thread's segment: the next one waits its turn.
                if let Ev::Marker(_, Marker::Sync { seq, .. }) = ev {
                    return Ok(Turn::Yield(seq));
                }
            }
            Ok(Turn::Next)
        },
    )
}

/// Hands one event, with its references, to the engine.
#[inline]
fn engine_event(engine: &mut Engine, ev: Ev, refs: &[MemEvent]) -> Result<(), EngineError> {
    match ev {
        Ev::Block { thread, addr, id, executed, interrupted } => {
            let b = BlockEvent { thread, addr, version: 0, id, plan: None, executed, interrupted };
            engine.block(&b)
        }
        Ev::Refs { thread, .. } => engine.refs(thread, refs),
        Ev::Marker(thread, m) => engine.marker(thread, m),
    }
}

/// Runs the engine beside the recovery: one thread's recovery here and the engine on
/// another thread; several threads' recoveries each on a producer of its own, and the
/// engine here, taking their batches in the interleaving's order as they come (a second
/// hop for every event cost the two cores nearly as much as the recovery).
fn run_pipelined(rec: &Recovery, engine: &mut Engine) -> Result<(), WetError> {
    if rec.profile.threads.len() > 1 {
        let mut failed = None;
        let recovered = linearize(rec, |ev, refs| match engine_event(engine, ev, refs) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        recovered?;
        engine.finish()?;
        return Ok(());
    }
    let (tx, rx) = crossbeam::channel::bounded::<Batch>(16);
    let (free_tx, free_rx) = crossbeam::channel::bounded::<Batch>(16);
    std::thread::scope(|s| {
        let consumer = s.spawn(move || -> Result<(), EngineError> {
            for mut batch in rx {
                let mut at = 0usize;
                for &ev in &batch.evs {
                    let n = if let Ev::Refs { n, .. } = ev { n as usize } else { 0 };
                    engine_event(engine, ev, &batch.refs[at..at + n])?;
                    at += n;
                }
                batch.evs.clear();
                batch.refs.clear();
                (batch.ev_at, batch.ref_at) = (0, 0);
                let _ = free_tx.try_send(batch);
            }
            engine.finish()
        });
        let mut fwd = Forward { batch: Batch::default(), send: move |b| tx.send(b).is_ok(), free: free_rx };
        // One thread needs no interleaving (its own writes are always ordered before its
        // reads): the plain in-order run.
        let recovered = rec.events(Source::Dep).run(&mut fwd);
        drop(fwd);
        let engined = consumer.join().expect("WET engine panicked");
        engined?;
        recovered?;
        Ok(())
    })
}
