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
//! when the merge first reaches the thread, ended with its stream) into a channel of
//! batches, and a heap keyed by (turn number, thread) picks whose turn is next. Where a
//! turn ends is the consumer's, as it alone knows its batches: it reads a batch from its
//! own cursor and answers [`Turn::Yield`] with the number the thread's next turn starts at.
//!
//! A producer may always be [`AHEAD`] batches ahead of the merge, and further on a budget
//! of batches all producers share, which the consumer sets. A turn often runs far longer
//! than a few batches (xz's compressing threads take turns of 100,000 events and more), and
//! while one thread's turn is read the others' producers would otherwise wait after their
//! first few batches: where the producers' work is most of it (the race detector's), two
//! threads of equal work then took turns on one core, not two.

use crate::driver::{Buffers, Events};
use crate::error::RecoverError;
use crate::sink::Sink;
use dep_profile::container::ThreadInfo;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex};

/// Batches a producer may always have sent ahead of the merge.
pub const AHEAD: usize = 4;

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
pub struct Sender<B> {
    tx: crossbeam::channel::Sender<B>,
    thread: usize,
    ahead: Arc<Ahead>,
}

impl<B> Sender<B> {
    /// Sends a batch, once the thread may be that far ahead of the merge; false when the
    /// merge is gone (it failed, and reports why).
    pub fn send(&self, b: B) -> bool {
        self.ahead.reserve(self.thread) && self.tx.send(b).is_ok()
    }
}

/// How far each producer is ahead of the merge, and the budget they share.
pub(crate) struct Ahead {
    state: Mutex<AheadState>,
    /// Per thread: signalled when the merge takes one of its batches while it is at its
    /// own allowance, when a unit comes back for it to take, and when the merge ends. (One
    /// for all would wake every waiting producer at every batch taken: with thousands of
    /// threads, most of the merge's time.)
    wake: Box<[Condvar]>,
    own: usize,
}

struct AheadState {
    /// Per thread: batches sent and not yet taken, and how many of them hold a unit of the
    /// shared budget.
    queued: Vec<usize>,
    extra: Vec<usize>,
    /// Units of the shared budget free.
    spare: usize,
    /// Threads waiting for a unit, first come first; an entry is stale where `waiting` no
    /// longer says so.
    queue: std::collections::VecDeque<usize>,
    waiting: Vec<bool>,
    /// The merge is over: nothing more is taken.
    closed: bool,
}

impl AheadState {
    /// Wakes the first thread still waiting for a unit, if a unit is free.
    fn hand_on(&mut self, wake: &[Condvar]) {
        while self.spare > 0 {
            let Some(w) = self.queue.pop_front() else { return };
            if std::mem::replace(&mut self.waiting[w], false) {
                wake[w].notify_one();
                return;
            }
        }
    }
}

impl Ahead {
    /// `threads` producers, each `own` batches ahead at any time and `shared` more among
    /// them all.
    fn new(threads: usize, own: usize, shared: usize) -> Ahead {
        let state = AheadState {
            queued: vec![0; threads],
            extra: vec![0; threads],
            spare: shared,
            queue: Default::default(),
            waiting: vec![false; threads],
            closed: false,
        };
        Ahead { state: Mutex::new(state), wake: (0..threads).map(|_| Condvar::new()).collect(), own: own.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AheadState> {
        // (The state is counts, consistent after every statement: a panic elsewhere that
        // poisoned the lock left nothing half-done.)
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until thread `t` may send one more batch, and counts it; false when the merge
    /// is over. Within its own allowance at once; beyond it, on a unit of the shared budget,
    /// or once the merge takes enough of its batches.
    fn reserve(&self, t: usize) -> bool {
        let mut s = self.lock();
        loop {
            if s.closed {
                return false;
            }
            if s.queued[t] < self.own {
                break;
            }
            if s.spare > 0 {
                s.spare -= 1;
                s.extra[t] += 1;
                break;
            }
            if !std::mem::replace(&mut s.waiting[t], true) {
                s.queue.push_back(t);
            }
            s = self.wake[t].wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.waiting[t] = false;
        s.queued[t] += 1;
        // Woken for a unit it did not need (the merge took its own batch meanwhile): the
        // next in line may take it.
        s.hand_on(&self.wake);
        true
    }

    /// The merge took one of thread `t`'s batches: a unit of the shared budget it held goes
    /// back.
    fn took(&self, t: usize) {
        let mut s = self.lock();
        s.queued[t] = s.queued[t].saturating_sub(1);
        if s.extra[t] > 0 {
            s.extra[t] -= 1;
            s.spare += 1;
            s.hand_on(&self.wake);
        }
        if s.waiting[t] && s.queued[t] < self.own {
            self.wake[t].notify_one();
        }
    }

    /// The merge is over: producers waiting give up.
    fn close(&self) {
        self.lock().closed = true;
        for w in self.wake.iter() {
            w.notify_all();
        }
    }

    /// Batches thread `t` has sent and the merge has not taken.
    #[cfg(test)]
    fn queued(&self, t: usize) -> usize {
        self.lock().queued[t]
    }

    /// Units of the shared budget free.
    #[cfg(test)]
    fn spare(&self) -> usize {
        self.lock().spare
    }
}

impl Events<'_> {
    /// Which threads [`interleaved`](Self::interleaved) recovers apart from their sinks
    /// ([`apart`](Self::apart)): those holding more than a core's share of the chunks, whose
    /// producers the run waits for. Every thread apart gained nothing where each core has a
    /// busy producer already (the race detector on xz -T2's two compressing threads, 2
    /// cores: 38.4 s of CPU against 33.5-35.5 s, and no sooner done); the thread with two
    /// thirds of the chunks alone apart there, 19.9 and 20.7 s against 21.4 and 20.0 s.
    fn apart_threads(&self) -> Vec<bool> {
        let rec = self.recovery();
        let n = rec.profile.threads.len();
        let chunks: Vec<usize> = (0..n as u32).map(|t| rec.thread_chunks(t).len()).collect();
        let total: usize = chunks.iter().sum();
        // More than a core's share of the work: its producer is what the run waits for.
        chunks.iter().map(|&c| self.apart > 1 && c > 0 && c.saturating_mul(self.apart) > total).collect()
    }

    /// Every thread's events in an order their sync records allow (the module's policy), to
    /// `consume` on the calling thread. Thread `t`'s events are recovered on a thread of
    /// its own by the sink `make(t, sender)`, which sends batches of whatever the consumer
    /// wants (classified events, say) and sends what it holds at `finish`.
    /// `consume(t, turn, batch)` reads from the batch and says whether the turn goes on
    /// ([`Turn`]). Memory stays bounded however long a turn: a thread holds at most a few
    /// batches ahead of the merge ([`AHEAD`]), and all of them together `shared` more.
    pub fn interleaved<S, B, M, C>(&self, shared: usize, make: M, mut consume: C) -> Result<(), S::Error>
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
        let apart = self.apart_threads();
        let apart = &apart;
        let ahead = Arc::new(Ahead::new(threads.len(), AHEAD, shared));
        let ahead = &ahead;
        std::thread::scope(|s| -> Result<(), S::Error> {
            // A thread's producer starts when the merge first reaches it and ends when its
            // stream does, so the OS threads and batches alive follow the threads alive in
            // the run, not all the threads it ever had.
            let producer = |t: usize| -> Result<_, RecoverError> {
                // (Bounded by `ahead`, which the producer waits on before each send.)
                let (tx, rx) = crossbeam::channel::unbounded::<B>();
                let chunks = self.recovery().thread_chunks(t as u32);
                let events = *self;
                let handle = std::thread::Builder::new()
                    .name(format!("dep-thread-{t}"))
                    .spawn_scoped(s, move || -> Result<(), S::Error> {
                        let mut sink = make(t as u32, Sender { tx, thread: t, ahead: Arc::clone(ahead) });
                        if apart[t] {
                            crate::tape::apart(&events, chunks, format!("dep-recover-{t}"), &mut sink)?;
                            return sink.finish();
                        }
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
                            Ok(b) => {
                                ahead.took(t);
                                *cur = Some(b)
                            }
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
            ahead.close();
            drop(inputs);
            for p in producers {
                p.join().expect("a recovery producer panicked")?;
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Ahead;
    use std::time::Duration;

    /// Runs `wait` (a reserve that must wait) on another thread, checks that it waits, runs
    /// `free`, and answers what the reserve answered; a reserve still waiting after 30 s
    /// fails the test (closing `a` to end it) instead of hanging it.
    fn waits_until(a: &Ahead, wait: impl FnOnce() -> bool + Send, free: impl FnOnce()) -> bool {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            s.spawn(move || tx.send(wait()));
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "sent beyond the budget");
            free();
            let got = rx.recv_timeout(Duration::from_secs(30));
            if got.is_err() {
                a.close();
            }
            got.expect("a waiting producer was not woken")
        })
    }

    /// Each producer runs its own allowance ahead at once; beyond it, on the shared units,
    /// which go back as the merge takes its batches; a producer out of both waits until the
    /// merge takes one of its own batches or a unit comes back, or gives up when the merge
    /// closes.
    #[test]
    fn producers_run_ahead_on_their_own_allowance_then_on_the_shared_one() {
        let a = Ahead::new(2, 2, 3);
        assert!(a.reserve(0) && a.reserve(0));
        assert_eq!(a.spare(), 3, "a thread's own allowance takes no shared unit");
        assert!(a.reserve(0) && a.reserve(0) && a.reserve(0));
        assert_eq!((a.queued(0), a.spare()), (5, 0));
        assert!(a.reserve(1) && a.reserve(1), "the other thread keeps its own allowance");
        // Thread 1 is out of room: it waits until thread 0's batch is taken and its unit
        // comes back.
        assert!(waits_until(&a, || a.reserve(1), || a.took(0)));
        assert_eq!((a.queued(0), a.queued(1), a.spare()), (4, 3, 0));
        // The merge taking a thread's own batches lets it send again without a unit.
        a.took(1);
        a.took(1);
        assert_eq!(a.spare(), 1, "thread 1's unit went back with its first batch taken");
        assert!(a.reserve(1) && a.reserve(1));
        assert_eq!((a.queued(1), a.spare()), (3, 0));
        // With no shared budget, a producer at its own allowance waits until the merge
        // takes one of its batches.
        let b = Ahead::new(1, 2, 0);
        assert!(b.reserve(0) && b.reserve(0));
        assert!(waits_until(&b, || b.reserve(0), || b.took(0)));
        assert_eq!((b.queued(0), b.spare()), (2, 0));
        // Closing wakes a waiting producer, which gives up.
        assert!(!waits_until(&a, || a.reserve(0), || a.close()), "a producer sent after the merge closed");
        assert!(!a.reserve(1));
    }
}
