//! One order across threads: every thread's stream cut into turns at its sync records and
//! the turns taken in the order of the numbers they start at, so that what a thread did
//! before a sync point precedes what another did after a later one. Used by analyses of
//! memory across threads (WET's dependences, the race detector) through
//! [`Events::interleaved`](crate::Events::interleaved).
//!
//! The policy is here, once. A thread's turns are numbered by the sync records that
//! separate them: the turn after sync record `k` is numbered `k`, and turns are taken in
//! the order of their numbers (ties by thread index), so sync records reach the consumer
//! in the order of their numbers across all threads. A thread's first turn is numbered by
//! the sync record its creator passed just before creating it (0 for a thread with no
//! creator recorded), so nothing of a thread comes before the point where it was created.
//! The record itself may close the turn before it or open the turn after it; the events
//! between are ordered the same either way, and the consumer picks: WET takes it last in
//! the turn it closes (the segment's end is then known while the turns numbered below it
//! run), the race detector first in the turn it opens (an acquire there must follow every
//! release numbered below it). A consumer that opens turns with the record yields, on
//! meeting a record numbered other than its turn, with that number, and takes the record
//! when its turn comes.
//!
//! The mechanism is here too: each thread is recovered by a producer of its own (started
//! when the merge first reaches the thread, ended with its stream) into a bounded channel
//! of batches, and a heap keyed by (turn number, thread) picks whose turn is next. Where a
//! turn ends is the consumer's, as it alone knows its batches: it reads a batch from its
//! own cursor and answers [`Turn::Yield`] with the number the thread's next turn starts at.

use crate::driver::{Buffers, Events};
use crate::error::RecoverError;
use crate::sink::Sink;
use dep_profile::container::ThreadInfo;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Batches a producer may have sent ahead of the merge.
const AHEAD: usize = 4;

/// What the consumer says after reading from a thread's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The batch is used up: give the thread's next one (the turn goes on).
    Next,
    /// The thread's turn ends here (the batch keeps its cursor); its next turn starts at
    /// this number.
    Yield(u64),
    /// The consumer wants nothing more: the merge ends, without an error.
    Stop,
}

/// The order in which turns are taken: by number, ties by thread index. The one policy
/// both [`Events::interleaved`] and exporters that place turns themselves (the UMT
/// trace's record IDs) follow.
pub struct Turns(BinaryHeap<Reverse<(u64, u32)>>);

impl Turns {
    /// Every thread's first turn, numbered `first[t]` ([`first_turn`](Self::first_turn)).
    pub fn new(first: impl IntoIterator<Item = u64>) -> Turns {
        Turns(first.into_iter().enumerate().map(|(t, k)| Reverse((k, t as u32))).collect())
    }

    /// The number of a thread's first turn: the sync record its creator passed before
    /// creating it, 0 when no creator is recorded.
    pub fn first_turn(info: &ThreadInfo) -> u64 {
        info.spawn.map_or(0, |s| s.seq)
    }

    /// The next turn to take: its number and thread. The thread has no other turn waiting
    /// until [`later`](Self::later) gives its next one.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(u64, u32)> {
        self.0.pop().map(|Reverse(k)| k)
    }

    /// Thread `t`'s next turn is numbered `key`.
    pub fn later(&mut self, t: u32, key: u64) {
        self.0.push(Reverse((key, t)));
    }
}

/// A producer's end of a thread's channel: what a thread's sink sends its batches to.
pub struct Sender<B>(crossbeam::channel::Sender<B>);

impl<B> Sender<B> {
    /// Sends a batch; false when the merge is gone (it failed, and reports why).
    pub fn send(&self, b: B) -> bool {
        self.0.send(b).is_ok()
    }
}

impl Events<'_> {
    /// Every thread's events in an order their sync records allow (the module's policy), to
    /// `consume` on the calling thread. Thread `t`'s events are recovered on a thread of
    /// its own by the sink `make(t, sender)`, which sends batches of whatever the consumer
    /// wants (classified events, say) and sends what it holds at `finish`.
    /// `consume(t, turn, batch)` reads from the batch and says whether the turn goes on
    /// ([`Turn`]). Memory stays bounded however long a turn: a thread holds at most a few
    /// batches ahead of the merge.
    pub fn interleaved<S, B, M, C>(&self, make: M, mut consume: C) -> Result<(), S::Error>
    where
        S: Sink,
        S::Error: Send,
        B: Send,
        M: Fn(u32, Sender<B>) -> S + Sync,
        C: FnMut(u32, u64, &mut B) -> Result<Turn, S::Error>,
    {
        self.check()?;
        let threads = &self.recovery().profile.threads;
        let make = &make;
        std::thread::scope(|s| -> Result<(), S::Error> {
            // A thread's producer starts when the merge first reaches it and ends when its
            // stream does, so the OS threads and batches alive follow the threads alive in
            // the run, not all the threads it ever had.
            let producer = |t: usize| -> Result<_, RecoverError> {
                let (tx, rx) = crossbeam::channel::bounded::<B>(AHEAD);
                let chunks = self.recovery().thread_chunks(t as u32);
                let events = *self;
                let handle = std::thread::Builder::new()
                    .name(format!("dep-thread-{t}"))
                    .spawn_scoped(s, move || -> Result<(), S::Error> {
                        let mut sink = make(t as u32, Sender(tx));
                        // One set of decompression buffers for all the thread's chunks.
                        let mut buf = Buffers::default();
                        for c in chunks {
                            if !events.chunk_with(c, &mut buf, &mut sink)? {
                                break;
                            }
                        }
                        sink.finish()
                    })
                    .map_err(RecoverError::Spawn)?;
                Ok((rx, handle))
            };
            // Per thread: its channel (until its stream ends) and the batch being read.
            let mut inputs: Vec<Option<(crossbeam::channel::Receiver<B>, Option<B>)>> = (0..threads.len()).map(|_| None).collect();
            let mut started = vec![false; threads.len()];
            let mut producers = Vec::new();
            let mut turns = Turns::new(threads.iter().map(Turns::first_turn));
            let mut result = Ok(());
            'turns: while let Some((key, t)) = turns.next() {
                let t = t as usize;
                if !std::mem::replace(&mut started[t], true) {
                    match producer(t) {
                        Ok((rx, handle)) => {
                            inputs[t] = Some((rx, None));
                            producers.push(handle);
                        }
                        Err(e) => {
                            result = Err(e.into());
                            break 'turns;
                        }
                    }
                }
                loop {
                    let Some((rx, cur)) = &mut inputs[t] else { continue 'turns };
                    if cur.is_none() {
                        match rx.recv() {
                            Ok(b) => *cur = Some(b),
                            Err(_) => {
                                // The thread is done: its channel goes.
                                inputs[t] = None;
                                continue 'turns;
                            }
                        }
                    }
                    match consume(t as u32, key, cur.as_mut().expect("set")) {
                        Ok(Turn::Next) => *cur = None,
                        Ok(Turn::Yield(next)) => {
                            turns.later(t as u32, next);
                            continue 'turns;
                        }
                        Ok(Turn::Stop) => break 'turns,
                        Err(e) => {
                            result = Err(e);
                            break 'turns;
                        }
                    }
                }
            }
            // Unblock producers still sending (after an error), then collect theirs.
            drop(inputs);
            for p in producers {
                p.join().expect("a recovery producer panicked")?;
            }
            result
        })
    }
}
