//! A thread's events recovered on one OS thread and replayed to its sink on another
//! ([`Events::apart`](crate::Events::apart)): the recovery runs ahead on a core the sink's
//! work leaves free, in tapes of about a megabyte at most that go back and forth between
//! the two, so memory stays bounded however long the stream.
//!
//! A sink whose work outweighs recovery (the race detector's: its busiest thread's producer
//! spent three quarters of its time in the sink on xz -T2) otherwise recovers and analyses
//! each thread on one core, and a run whose work is mostly one thread's kept one core busy
//! while another idled. Copying the events onto tapes adds about half again to the
//! recovery's own time (on xz's busiest thread, 6.3K samples of `memmove` beside 13.9K of
//! recovery), which a free core absorbs and a busy one does not ([`Events::apart`] says
//! when).

use crate::driver::{Buffers, Events};
use crate::error::RecoverError;
use crate::events::{BlockEvent, Marker, MemEvent, RepRun, Run, RunBlock};
use crate::plans::Plans;
use crate::sink::Sink;
use dep_profile::container::ChunkRef;

/// Tapes filled and not yet replayed, at most: the recovery waits beyond that.
const TAPES_AHEAD: usize = 3;
/// A tape is sent once it holds this many references, blocks or events.
const TAPE_REFS: usize = 1 << 15;
const TAPE_BLOCKS: usize = 1 << 13;
const TAPE_OPS: usize = 1 << 12;

/// A block event as a tape holds it: its plan is looked up again on replay (every
/// recovered block's plan is its id's).
#[derive(Clone, Copy)]
struct Block {
    thread: u32,
    addr: u64,
    version: u32,
    id: Option<u32>,
    executed: u32,
    interrupted: bool,
}

impl Block {
    fn of(b: &BlockEvent) -> Block {
        Block { thread: b.thread, addr: b.addr, version: b.version, id: b.id, executed: b.executed, interrupted: b.interrupted }
    }

    fn event<'p>(&self, plans: &'p Plans) -> BlockEvent<'p> {
        let plan = self.id.and_then(|i| plans.get_plan(i));
        BlockEvent {
            thread: self.thread,
            addr: self.addr,
            version: self.version,
            id: self.id,
            plan,
            executed: self.executed,
            interrupted: self.interrupted,
        }
    }
}

/// One sink call, its references and run blocks held in the tape's arrays up to the given
/// ends (each op's start is the previous op's end).
#[derive(Clone, Copy)]
enum Op {
    Block(Block),
    Refs(Block, usize),
    Rep(Block, RepRun),
    Marker(u32, Marker),
    Run { thread: u32, blocks: usize, refs: usize },
}

/// Sink calls in the order they were made.
#[derive(Default)]
struct Tape {
    ops: Vec<Op>,
    blocks: Vec<RunBlock>,
    refs: Vec<MemEvent>,
}

impl Tape {
    fn full(&self) -> bool {
        self.refs.len() >= TAPE_REFS || self.blocks.len() >= TAPE_BLOCKS || self.ops.len() >= TAPE_OPS
    }

    fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn clear(&mut self) {
        self.ops.clear();
        self.blocks.clear();
        self.refs.clear();
    }

    /// Makes the calls again, on `sink`; false where the sink stopped.
    fn replay<S: Sink>(&self, plans: &Plans, sink: &mut S) -> Result<bool, S::Error> {
        let (mut blocks, mut refs) = (0, 0);
        for op in &self.ops {
            let go = match *op {
                Op::Block(b) => sink.block(&b.event(plans))?,
                Op::Refs(b, end) => {
                    let go = sink.refs(&b.event(plans), &self.refs[refs..end])?;
                    refs = end;
                    go
                }
                Op::Rep(b, run) => sink.rep(&b.event(plans), &run)?,
                Op::Marker(t, m) => sink.marker(t, m)?,
                Op::Run { thread, blocks: bend, refs: rend } => {
                    let go = sink.run(&Run::new(thread, &self.blocks[blocks..bend], &self.refs[refs..rend], plans))?;
                    (blocks, refs) = (bend, rend);
                    go
                }
            };
            if !go {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// What a thread's recovery hands its sink's thread: a tape, or the error that ended it.
type Sent = Result<Tape, RecoverError>;

/// The sink the recovery runs into: it writes tapes and sends each when full.
struct Recorder {
    tape: Tape,
    full: crossbeam::channel::Sender<Sent>,
    /// Tapes replayed, to be written again (none: a new one).
    empty: crossbeam::channel::Receiver<Tape>,
}

impl Recorder {
    /// Sends the tape if it is full; false when the sink's thread is gone (it stopped).
    fn sent_if_full(&mut self) -> bool {
        !self.tape.full() || self.send()
    }

    fn send(&mut self) -> bool {
        let next = self.empty.try_recv().unwrap_or_default();
        self.full.send(Ok(std::mem::replace(&mut self.tape, next))).is_ok()
    }
}

impl Sink for Recorder {
    type Error = RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.tape.ops.push(Op::Block(Block::of(b)));
        Ok(self.sent_if_full())
    }

    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        self.tape.refs.extend_from_slice(refs);
        self.tape.ops.push(Op::Refs(Block::of(b), self.tape.refs.len()));
        Ok(self.sent_if_full())
    }

    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, RecoverError> {
        self.tape.ops.push(Op::Rep(Block::of(b), *run));
        Ok(self.sent_if_full())
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, RecoverError> {
        self.tape.ops.push(Op::Marker(thread, m));
        Ok(self.sent_if_full())
    }

    fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
        self.tape.blocks.extend_from_slice(run.blocks());
        self.tape.refs.extend_from_slice(run.refs());
        self.tape.ops.push(Op::Run { thread: run.thread, blocks: self.tape.blocks.len(), refs: self.tape.refs.len() });
        Ok(self.sent_if_full())
    }
}

/// Sends `chunks` (one thread's, in order) to `sink` as [`Events::chunk_with`] would, chunk
/// after chunk until the sink stops, recovering them on a thread of their own named
/// `name`; `finish` is left to the caller.
pub(crate) fn apart<S: Sink>(events: &Events, chunks: &[ChunkRef], name: String, sink: &mut S) -> Result<(), S::Error> {
    let plans = &events.recovery().plans;
    let (full_tx, full_rx) = crossbeam::channel::bounded::<Sent>(TAPES_AHEAD);
    let (empty_tx, empty_rx) = crossbeam::channel::bounded::<Tape>(TAPES_AHEAD + 2);
    std::thread::scope(|s| -> Result<(), S::Error> {
        let recovery = std::thread::Builder::new()
            .name(name)
            .spawn_scoped(s, move || {
                let mut rec = Recorder { tape: Tape::default(), full: full_tx, empty: empty_rx };
                let mut buf = Buffers::default();
                let mut result = Ok(());
                for c in chunks {
                    match events.chunk_with(c, &mut buf, &mut rec) {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                // What came before an error reaches the sink before the error does.
                if !rec.tape.is_empty() && !rec.send() {
                    return;
                }
                if let Err(e) = result {
                    let _ = rec.full.send(Err(e));
                }
            })
            .map_err(RecoverError::Spawn)?;
        let mut result = Ok(());
        for sent in &full_rx {
            match sent {
                Ok(mut tape) => match tape.replay(plans, sink) {
                    Ok(true) => {
                        tape.clear();
                        let _ = empty_tx.try_send(tape);
                    }
                    Ok(false) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                },
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            }
        }
        // A recovery still sending finds no one to send to, and ends.
        drop(full_rx);
        recovery.join().expect("a thread's recovery panicked");
        result
    })
}
