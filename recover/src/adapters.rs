//! Sinks made of sinks: [`Tee`] feeds two at once, [`ByThread`] one per thread.

use crate::events::{Begin, BlockEvent, Marker, MemEvent, Part, RepRun, Run};
use crate::sink::Sink;

/// Two sinks fed the same events: each until it stops, the pair until both have.
pub struct Tee<A, B> {
    a: A,
    b: B,
    /// Whether each still wants events.
    a_on: bool,
    b_on: bool,
}

impl<A, B> Tee<A, B> {
    /// Feeds `a` and then `b` every event.
    pub fn new(a: A, b: B) -> Self {
        Tee { a, b, a_on: true, b_on: true }
    }

    /// The two sinks.
    pub fn into_inner(self) -> (A, B) {
        (self.a, self.b)
    }
}

impl<A: Sink, B: Sink<Error = A::Error>> Tee<A, B> {
    /// Gives an event to each sink that still wants events.
    #[inline]
    fn both(
        &mut self,
        mut fa: impl FnMut(&mut A) -> Result<bool, A::Error>,
        mut fb: impl FnMut(&mut B) -> Result<bool, A::Error>,
    ) -> Result<bool, A::Error> {
        if self.a_on {
            self.a_on = fa(&mut self.a)?;
        }
        if self.b_on {
            self.b_on = fb(&mut self.b)?;
        }
        Ok(self.a_on || self.b_on)
    }
}

impl<A: Sink, B: Sink<Error = A::Error>> Sink for Tee<A, B> {
    type Error = A::Error;

    fn begin(&mut self, b: &Begin) -> Result<bool, Self::Error> {
        self.both(|s| s.begin(b), |s| s.begin(b))
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        self.both(|s| s.block(b), |s| s.block(b))
    }

    #[inline]
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, Self::Error> {
        self.both(|s| s.refs(b, refs), |s| s.refs(b, refs))
    }

    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, Self::Error> {
        self.both(|s| s.rep(b, run), |s| s.rep(b, run))
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        self.both(|s| s.marker(thread, m), |s| s.marker(thread, m))
    }

    fn run(&mut self, run: &Run) -> Result<bool, Self::Error> {
        self.both(|s| s.run(run), |s| s.run(run))
    }

    /// Finishes both (the second even when the first fails); the first error wins.
    fn finish(&mut self) -> Result<(), Self::Error> {
        let a = self.a.finish();
        let b = self.b.finish();
        a.and(b)
    }
}

/// Feeds each thread's events to a sink of its own: a per-thread sink (a
/// [`Merge`](crate::Merge) sink, say) run over [`Part::All`] on one thread. At `begin` it
/// makes a sink for every thread of the profile's table and begins it with
/// [`Part::Thread`]; `finish` finishes them all. A thread's sink that stops gets nothing
/// more; the whole stops when every thread's has.
pub struct ByThread<S, M> {
    make: M,
    threads: Vec<(S, bool)>,
    /// Threads whose sink still wants events.
    on: usize,
}

impl<S: Sink, M: FnMut(u32) -> S> ByThread<S, M> {
    /// Makes each thread's sink with `make(thread)`.
    pub fn new(make: M) -> Self {
        ByThread { make, threads: Vec::new(), on: 0 }
    }

    /// The threads' sinks, in thread order.
    pub fn into_threads(self) -> Vec<S> {
        self.threads.into_iter().map(|(s, _)| s).collect()
    }

    /// Gives thread `thread`'s sink an event, if it still wants events.
    #[inline]
    fn give(&mut self, thread: u32, f: impl FnOnce(&mut S) -> Result<bool, S::Error>) -> Result<bool, S::Error> {
        let t = thread as usize;
        // A thread the table lacks (events fed by hand) gets a sink that saw no `begin`.
        while self.threads.len() <= t {
            let s = (self.make)(self.threads.len() as u32);
            self.threads.push((s, true));
            self.on += 1;
        }
        let (s, on) = &mut self.threads[t];
        if *on && !f(s)? {
            *on = false;
            self.on -= 1;
        }
        Ok(self.on > 0)
    }
}

impl<S: Sink, M: FnMut(u32) -> S> Sink for ByThread<S, M> {
    type Error = S::Error;

    fn begin(&mut self, b: &Begin) -> Result<bool, S::Error> {
        for t in 0..b.threads.len() as u32 {
            let mut s = (self.make)(t);
            let on = s.begin(&Begin { part: Part::Thread(t), ..*b })?;
            self.threads.push((s, on));
            self.on += on as usize;
        }
        Ok(self.on > 0 || self.threads.is_empty())
    }

    #[inline]
    fn block(&mut self, b: &BlockEvent) -> Result<bool, S::Error> {
        self.give(b.thread, |s| s.block(b))
    }

    #[inline]
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, S::Error> {
        self.give(b.thread, |s| s.refs(b, refs))
    }

    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, S::Error> {
        self.give(b.thread, |s| s.rep(b, run))
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, S::Error> {
        self.give(thread, |s| s.marker(thread, m))
    }

    fn run(&mut self, run: &Run) -> Result<bool, S::Error> {
        self.give(run.thread, |s| s.run(run))
    }

    fn finish(&mut self) -> Result<(), S::Error> {
        self.threads.iter_mut().try_for_each(|(s, _)| s.finish())
    }
}
