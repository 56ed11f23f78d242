//! Runs recovery over a whole profile into sinks. [`Recovery`] pre-decodes the block table
//! once; [`Recovery::events`] starts a run over one [`Source`], which [`Events`] then shapes:
//! - [`run`](Events::run): one sink sees every thread, one after another, on the calling
//!   thread;
//! - [`per_thread`](Events::per_thread): one sink per thread, each fed its chunks in order,
//!   threads in parallel (state of any kind: call stacks, instance numbers);
//! - [`merged`](Events::merged): one sink per chunk, chunks in parallel, folded in order
//!   into each thread's sink ([`Merge`]);
//! - [`ordered`](Events::ordered) and [`unordered`](Events::unordered): one sink per chunk,
//!   chunks in parallel, each turned into a result handed over in chunk order or as done;
//! - [`interleaved`](Events::interleaved): every thread's events in an order their sync
//!   records allow, turn by turn (for analyses across threads; interleave.rs);
//! - [`rendered`](Events::rendered): `dep recover`'s renderings, written in order.

use crate::error::RecoverError;
use crate::events::{Begin, Marker, Part, Source};
use crate::ordered::{ChunkWriter, Gate};
use crate::plans::{Engine, Plans};
use crate::render::{Format, Renderer};
use crate::seek::{Clip, Selection, Window};
use crate::sink::{Merge, Sink};
use crate::traverse::{recover_chunk, walk_blocks, Halt, Scratch};
use crate::truth::replay_chunk;
use dep_profile::container::{ChunkRef, Index, Profile};
use std::collections::BTreeMap;
use std::io::Write;

/// Whether a sink took everything or stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    All,
    Stopped,
}

/// A sink's answer as [`Fed`].
pub(crate) fn fed<E>(r: Result<bool, E>) -> Result<Fed, E> {
    r.map(|on| if on { Fed::All } else { Fed::Stopped })
}

/// Chunks the parallel driver recovers at most ahead of the one it consumes next.
const AHEAD: usize = 1024;
/// Finished output the parallel driver holds at most before it stops starting chunks.
const HELD_BYTES: usize = 256 << 20;

/// A profile ready for recovery: its block table pre-decoded.
pub struct Recovery<'p> {
    pub profile: &'p Profile,
    pub plans: Plans,
    workers: usize,
    /// The chunks a window of instructions needs, when a run reads only those.
    selection: Option<Selection>,
    /// The profile's chunk reads when the window was set.
    reads_before: u64,
}

/// Per-worker buffers.
#[derive(Default)]
pub(crate) struct Buffers {
    scratch: Scratch,
    truth: Vec<u8>,
}

impl<'p> Recovery<'p> {
    /// Pre-decodes the block table with `workers` threads (0: all cores).
    pub fn new(profile: &'p Profile, workers: usize) -> Self {
        let workers = Self::cores(workers);
        Recovery { profile, plans: Plans::build(profile, workers), workers, selection: None, reads_before: 0 }
    }

    /// [`new`](Self::new), with plain blocks compiled to machine code or not (by default
    /// they are, where the host is x86-64, unless `DEP_JIT=0`).
    pub fn with_compiled(profile: &'p Profile, workers: usize, compiled: bool) -> Self {
        Self::with_engine(profile, workers, Engine::of(compiled))
    }

    /// [`new`](Self::new) with the given engine for plain blocks.
    pub fn with_engine(profile: &'p Profile, workers: usize, engine: Engine) -> Self {
        let workers = Self::cores(workers);
        Recovery { profile, plans: Plans::build_with(profile, workers, engine), workers, selection: None, reads_before: 0 }
    }

    fn cores(workers: usize) -> usize {
        if workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            workers
        }
    }

    /// Runs from now on give only the blocks of `window` ([`seek`](crate::seek)) and read
    /// only the chunks that hold them, found by `index` (the profile's, or one
    /// [`count`](crate::seek::count)ed).
    ///
    /// Answers whether any block is in the window. A whole window of one thread needs no
    /// index.
    pub fn seek(&mut self, window: Window, index: Option<&Index>) -> Result<bool, RecoverError> {
        let s = match index {
            _ if window.whole() => Selection::threads(self.profile, window.thread)?,
            Some(index) => Selection::new(self.profile, index, window)?,
            None => {
                let why = "a window of instructions needs the profile's seek index".to_string();
                return Err(RecoverError::Index { path: self.profile.path().to_string(), why });
            }
        };
        let any = s.empty(index).is_ok();
        self.selection = Some(s);
        self.reads_before = self.profile.chunks_read();
        Ok(any)
    }

    /// The chunk reads of the profile since [`seek`](Self::seek) set the window: what the
    /// runs of the window read.
    pub fn window_reads(&self) -> u64 {
        self.profile.chunks_read() - self.reads_before
    }

    /// Why a run of the window set by [`seek`](Self::seek) has no block.
    pub fn window_empty(&self, index: Option<&Index>) -> Result<(), RecoverError> {
        match &self.selection {
            Some(s) => Ok(s.empty(index)?),
            None => Ok(()),
        }
    }

    /// The window runs give, if any.
    pub fn window(&self) -> Option<Window> {
        self.selection.as_ref().map(|s| s.window)
    }

    /// Thread `thread`'s chunks that runs read, in sequence: all of them, or a window's.
    pub fn thread_chunks(&self, thread: u32) -> &'p [ChunkRef] {
        let all = &self.profile.threads[thread as usize].chunks[..];
        match &self.selection {
            None => all,
            Some(s) => &all[s.ranges[thread as usize].clone()],
        }
    }

    /// Every chunk runs read, in output order: thread by thread, each in sequence.
    pub fn chunks(&self) -> Vec<ChunkRef> {
        (0..self.profile.threads.len() as u32).flat_map(|t| self.thread_chunks(t).iter().copied()).collect()
    }

    /// Threads the chunk-parallel runs use.
    pub fn workers(&self) -> usize {
        let chunks: usize = (0..self.profile.threads.len() as u32).map(|t| self.thread_chunks(t).len()).sum();
        self.workers.min(chunks).max(1)
    }

    /// A run over `source`'s events, to be shaped by [`Events`]' methods.
    pub fn events(&self, source: Source) -> Events<'_> {
        Events { rec: self, source, progress: &|_| {}, apart: 0 }
    }

    /// The beginning of `part` of a run over `source`.
    pub(crate) fn begin(&self, source: Source, part: Part) -> Begin<'_> {
        Begin::new(self.profile, &self.plans, source, part)
    }

    /// Sends one chunk's events to `sink` (no `begin` or `finish`).
    pub(crate) fn feed<S: Sink>(&self, c: &ChunkRef, source: Source, buf: &mut Buffers, sink: &mut S) -> Result<Fed, S::Error> {
        let place = self.selection.as_ref().and_then(|s| Some((s.window, s.place(c)?)));
        let Some((window, place)) = place else {
            return self.feed_all(c, source, buf, sink);
        };
        // A window's chunk: its blocks outside the window are dropped, and recovery stops
        // at the first block past the window's end (the chunk's end for this run).
        let mut clip = Clip::new(sink, window, c.thread, place);
        let fed = self.feed_all(c, source, buf, &mut clip)?;
        if clip.past {
            return Ok(Fed::All);
        }
        if fed == Fed::Stopped {
            return Ok(fed);
        }
        let found = clip.at - place.entry.first;
        if found != place.entry.counts.instructions {
            let (path, thread, seq, index) = (self.profile.path().to_string(), c.thread, c.seq, place.entry.counts.instructions);
            return Err(RecoverError::IndexCount { path, thread, seq, index, found }.into());
        }
        clip.end()?;
        Ok(Fed::All)
    }

    /// [`feed`](Self::feed) of a whole chunk.
    fn feed_all<S: Sink>(&self, c: &ChunkRef, source: Source, buf: &mut Buffers, sink: &mut S) -> Result<Fed, S::Error> {
        if c.unrecorded > 0 && !sink.marker(c.thread, Marker::Unrecorded(c.unrecorded))? {
            return Ok(Fed::Stopped);
        }
        let view = self.profile.chunk(c).map_err(RecoverError::Profile)?;
        let r = match source {
            Source::Dep => recover_chunk(self.profile.width, &self.plans, &view, &mut buf.scratch, sink),
            Source::Truth => replay_chunk(&self.plans, &view, &mut buf.truth, sink),
            Source::Blocks => walk_blocks(self.profile.width, &self.plans, &view, &mut buf.scratch, sink),
        };
        match r {
            Ok(()) => Ok(Fed::All),
            Err(Halt::Stop) => Ok(Fed::Stopped),
            Err(Halt::Sink(e)) => Err(e),
            Err(Halt::Fault(fault)) => {
                Err(RecoverError::Chunk { path: self.profile.path().to_string(), thread: c.thread, seq: c.seq, offset: c.offset, fault }
                    .into())
            }
        }
    }
}

/// One run over a profile's events: what to replay, who is told of progress, and (by the
/// method that ends the building) how events reach sinks.
#[derive(Clone, Copy)]
pub struct Events<'a> {
    rec: &'a Recovery<'a>,
    source: Source,
    progress: &'a (dyn Fn(u64) + Sync),
    /// The cores [`apart`](Self::apart) was given: a thread holding more than one of their
    /// shares of the chunks is recovered apart from its sink (0 or 1: none is).
    pub(crate) apart: usize,
}

impl<'a> Events<'a> {
    /// Calls `progress(n)` as each `n` chunks are done.
    pub fn progress(self, progress: &'a (dyn Fn(u64) + Sync)) -> Self {
        Events { progress, ..self }
    }

    /// [`interleaved`](Self::interleaved) recovers each thread holding more than one of
    /// `cores`' share of the profile's chunks on an OS thread of its own, apart from the one
    /// running its sink ([`tape`](crate::tape)): for sinks whose own work outweighs
    /// recovery's, whose busiest thread otherwise does both on one core while another waits.
    pub fn apart(self, cores: usize) -> Self {
        Events { apart: cores, ..self }
    }

    /// The recovery this run is of.
    pub fn recovery(&self) -> &'a Recovery<'a> {
        self.rec
    }

    /// What this run replays.
    pub fn source(&self) -> Source {
        self.source
    }

    pub(crate) fn check(&self) -> Result<(), RecoverError> {
        if self.source == Source::Truth && !self.rec.profile.meta.truth {
            return Err(RecoverError::NoTruth(self.rec.profile.path().to_string()));
        }
        Ok(())
    }

    fn begin_part(&self, part: Part) -> Begin<'a> {
        self.rec.begin(self.source, part)
    }

    /// Sends one chunk's events to `sink` (no `begin` or `finish`): for consumers that
    /// order threads' chunks in a way of their own. Answers whether the sink took them all
    /// (false: it stopped).
    pub fn chunk<S: Sink>(&self, c: &ChunkRef, sink: &mut S) -> Result<bool, S::Error> {
        self.check()?;
        self.chunk_with(c, &mut Buffers::default(), sink)
    }

    /// [`chunk`](Self::chunk) with buffers kept from one chunk to the next.
    pub(crate) fn chunk_with<S: Sink>(&self, c: &ChunkRef, buf: &mut Buffers, sink: &mut S) -> Result<bool, S::Error> {
        Ok(self.rec.feed(c, self.source, buf, sink)? == Fed::All)
    }

    /// Sends every event to one sink on the calling thread: threads one after another,
    /// each in execution order, from `begin` ([`Part::All`]) to `finish`.
    pub fn run<S: Sink>(&self, mut sink: S) -> Result<(), S::Error> {
        self.check()?;
        let mut buf = Buffers::default();
        if fed(sink.begin(&self.begin_part(Part::All)))? == Fed::All {
            for c in self.rec.chunks() {
                if self.rec.feed(&c, self.source, &mut buf, &mut sink)? == Fed::Stopped {
                    break;
                }
                (self.progress)(1);
            }
        }
        sink.finish()
    }

    /// One sink per thread, made by `make(thread)`, fed that thread's chunks in order from
    /// `begin` ([`Part::Thread`]) to `finish`; threads run in parallel, the longest first.
    /// Returns the sinks in thread order. A sink that stops ends its own thread only.
    pub fn per_thread<S, M>(&self, make: M) -> Result<Vec<S>, S::Error>
    where
        S: Sink + Send,
        S::Error: Send,
        M: Fn(u32) -> S + Sync,
    {
        self.check()?;
        let rec = self.rec;
        let threads = &rec.profile.threads;
        let one = |t: usize, buf: &mut Buffers| -> Result<S, S::Error> {
            let mut sink = make(t as u32);
            if fed(sink.begin(&self.begin_part(Part::Thread(t as u32))))? == Fed::All {
                for c in rec.thread_chunks(t as u32) {
                    if rec.feed(c, self.source, buf, &mut sink)? == Fed::Stopped {
                        break;
                    }
                    (self.progress)(1);
                }
            }
            sink.finish()?;
            Ok(sink)
        };
        let workers = rec.workers.min(threads.len()).max(1);
        if workers == 1 {
            let mut buf = Buffers::default();
            return (0..threads.len()).map(|t| one(t, &mut buf)).collect();
        }
        let mut order: Vec<usize> = (0..threads.len()).collect();
        order.sort_by_key(|&t| std::cmp::Reverse(rec.thread_chunks(t as u32).len()));
        let (job_tx, job_rx) = crossbeam::channel::unbounded::<usize>();
        for t in order {
            job_tx.send(t).expect("the receiver is alive");
        }
        drop(job_tx);
        let (res_tx, res_rx) = crossbeam::channel::unbounded::<(usize, Result<S, S::Error>)>();
        crossbeam::thread::scope(|s| {
            for _ in 0..workers {
                let (job_rx, res_tx, one) = (job_rx.clone(), res_tx.clone(), &one);
                s.spawn(move |_| {
                    let mut buf = Buffers::default();
                    for t in job_rx {
                        let r = one(t, &mut buf);
                        let failed = r.is_err();
                        if res_tx.send((t, r)).is_err() || failed {
                            break;
                        }
                    }
                });
            }
        })
        .expect("recovery worker panicked");
        drop(res_tx);
        let mut got: Vec<Option<S>> = (0..threads.len()).map(|_| None).collect();
        let mut first_error = None;
        for (t, r) in res_rx {
            match r {
                Ok(s) => got[t] = Some(s),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(got.into_iter().map(|s| s.expect("every thread was run")).collect())
    }

    /// One sink per chunk, made by `make(thread)` and fed in parallel, folded in order into
    /// one sink per thread with [`Merge::merge`]: the thread's sink is made by `make`, sees
    /// `begin` ([`Part::Thread`]), every chunk's sink merged into it, then `finish`. Chunk
    /// sinks see `begin` ([`Part::Chunk`]) and `finish` around their chunk. Returns the
    /// threads' sinks in thread order. A sink that stops ends its own thread only.
    pub fn merged<S, M>(&self, make: M) -> Result<Vec<S>, S::Error>
    where
        S: Merge + Send,
        S::Error: Send,
        M: Fn(u32) -> S + Sync,
    {
        self.check()?;
        let rec = self.rec;
        let chunks = rec.chunks();
        let threads = &rec.profile.threads;
        let work = |c: &ChunkRef, buf: &mut Buffers| -> Result<(S, Fed), S::Error> {
            let mut sink = make(c.thread);
            let mut how = fed(sink.begin(&self.begin_part(Part::Chunk { thread: c.thread, seq: c.seq })))?;
            if how == Fed::All {
                how = rec.feed(c, self.source, buf, &mut sink)?;
            }
            sink.finish()?;
            Ok((sink, how))
        };
        // The thread each chunk index belongs to.
        let mut owner = Vec::with_capacity(chunks.len());
        for t in 0..threads.len() {
            owner.extend(std::iter::repeat_n(t, rec.thread_chunks(t as u32).len()));
        }
        let start = |t: usize| -> Result<(S, Fed), S::Error> {
            let mut s = make(t as u32);
            let how = fed(s.begin(&self.begin_part(Part::Thread(t as u32))))?;
            Ok((s, how))
        };
        let mut done: Vec<Option<S>> = (0..threads.len()).map(|_| None).collect();
        let mut current: Option<(usize, S, Fed)> = None;
        let close = |t: usize, mut s: S, done: &mut Vec<Option<S>>| -> Result<(), S::Error> {
            s.finish()?;
            done[t] = Some(s);
            Ok(())
        };
        self.map_ordered(
            &chunks,
            |_, c, buf| work(c, buf),
            |_| 0,
            |k, (sink, how)| {
                let t = owner[k];
                if current.as_ref().is_some_and(|c| c.0 != t) {
                    let (ct, cs, _) = current.take().expect("checked");
                    close(ct, cs, &mut done)?;
                }
                if current.is_none() {
                    let (s, f) = start(t)?;
                    current = Some((t, s, f));
                }
                let cur = current.as_mut().expect("set above");
                if cur.2 == Fed::All {
                    cur.2 = fed(cur.1.merge(sink))?;
                    if how == Fed::Stopped {
                        cur.2 = Fed::Stopped;
                    }
                }
                (self.progress)(1);
                Ok(())
            },
        )?;
        if let Some((t, s, _)) = current.take() {
            close(t, s, &mut done)?;
        }
        // Threads without chunks still get their (empty) sink.
        for (t, d) in done.iter_mut().enumerate() {
            if d.is_none() {
                let (mut s, _) = start(t)?;
                s.finish()?;
                *d = Some(s);
            }
        }
        Ok(done.into_iter().map(|s| s.expect("every thread closed")).collect())
    }

    /// Recovers chunks in parallel, each rendered in `format`, and writes the renderings to
    /// `out` in chunk order (thread by thread, each in sequence) in bounded memory: the
    /// chunk next in order writes straight through, those ahead of it hold their bytes
    /// ([`ordered`](crate::ordered)).
    pub fn rendered(&self, format: Format, out: &mut (dyn Write + Send)) -> Result<(), RecoverError> {
        self.check()?;
        let chunks = self.rec.chunks();
        let gate = Gate::new(out);
        self.map_ordered(
            &chunks,
            |k, c, buf| {
                let mut sink = Renderer::new(format, ChunkWriter::new(k, &gate));
                if fed(sink.begin(&self.begin_part(Part::Chunk { thread: c.thread, seq: c.seq })))? == Fed::All {
                    self.rec.feed(c, self.source, buf, &mut sink)?;
                }
                sink.finish()?;
                Ok(sink.into_inner()?)
            },
            ChunkWriter::held_bytes,
            |k, w| {
                gate.finish(k, w)?;
                (self.progress)(1);
                Ok(())
            },
        )
    }

    /// The general chunk-parallel run: each chunk into a sink made by `make(chunk)` (which
    /// sees `begin` with [`Part::Chunk`], the chunk and `finish`), turned by `finish` into a
    /// result of `weight` bytes, which `consume` receives in chunk order (thread by thread,
    /// each in sequence) on the calling thread. Results wait for the chunks before them
    /// within bounds (chunks ahead, bytes held).
    pub fn ordered<S, T, M, F, C>(&self, make: M, finish: F, weight: fn(&T) -> usize, mut consume: C) -> Result<(), S::Error>
    where
        S: Sink,
        S::Error: Send,
        T: Send,
        M: Fn(&ChunkRef) -> S + Sync,
        F: Fn(S) -> Result<T, S::Error> + Sync,
        C: FnMut(&ChunkRef, T) -> Result<(), S::Error>,
    {
        self.check()?;
        let chunks = self.rec.chunks();
        self.map_ordered(
            &chunks,
            |_, c, buf| self.one_chunk(c, buf, &make, &finish),
            weight,
            |k, t| {
                consume(&chunks[k], t)?;
                (self.progress)(1);
                Ok(())
            },
        )
    }

    /// [`ordered`](Self::ordered) for results whose order does not matter (counts, sets):
    /// `consume` receives each as soon as its chunk is done, so no result waits for another.
    pub fn unordered<S, T, M, F, C>(&self, make: M, finish: F, mut consume: C) -> Result<(), S::Error>
    where
        S: Sink,
        S::Error: Send,
        T: Send,
        M: Fn(&ChunkRef) -> S + Sync,
        F: Fn(S) -> Result<T, S::Error> + Sync,
        C: FnMut(&ChunkRef, T) -> Result<(), S::Error>,
    {
        self.check()?;
        let chunks = self.rec.chunks();
        let workers = self.rec.workers();
        let work = |c: &ChunkRef, buf: &mut Buffers| self.one_chunk(c, buf, &make, &finish);
        if workers == 1 {
            let mut buf = Buffers::default();
            for c in &chunks {
                consume(c, work(c, &mut buf)?)?;
                (self.progress)(1);
            }
            return Ok(());
        }
        // Every chunk queued at once (an index each); results wait in a short queue, which
        // a consumer that fails drops, and with it the workers.
        let (job_tx, job_rx) = crossbeam::channel::unbounded::<usize>();
        (0..chunks.len()).for_each(|k| job_tx.send(k).expect("the receiver is alive"));
        drop(job_tx);
        let (res_tx, res_rx) = crossbeam::channel::bounded::<(usize, Result<T, S::Error>)>(workers * 2);
        crossbeam::thread::scope(|s| {
            for _ in 0..workers {
                let (job_rx, res_tx, work, chunks) = (job_rx.clone(), res_tx.clone(), &work, &chunks);
                s.spawn(move |_| {
                    let mut buf = Buffers::default();
                    for k in job_rx {
                        if res_tx.send((k, work(&chunks[k], &mut buf))).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(res_tx);
            let mut result = Ok(());
            for (k, r) in res_rx.iter() {
                if let Err(e) = r.and_then(|t| consume(&chunks[k], t)) {
                    result = Err(e);
                    break;
                }
                (self.progress)(1);
            }
            // Ends the workers: their results have nowhere to go.
            drop(res_rx);
            result
        })
        .expect("recovery worker panicked")
    }

    /// One chunk into a fresh sink, and its result.
    fn one_chunk<S, T, M, F>(&self, c: &ChunkRef, buf: &mut Buffers, make: &M, finish: &F) -> Result<T, S::Error>
    where
        S: Sink,
        M: Fn(&ChunkRef) -> S,
        F: Fn(S) -> Result<T, S::Error>,
    {
        let mut sink = make(c);
        if fed(sink.begin(&self.begin_part(Part::Chunk { thread: c.thread, seq: c.seq })))? == Fed::All {
            self.rec.feed(c, self.source, buf, &mut sink)?;
        }
        sink.finish()?;
        finish(sink)
    }

    /// Runs `work` on every chunk, in parallel on [`workers`](Recovery::workers) threads,
    /// and hands the results to `consume` in chunk order.
    fn map_ordered<T, E, W, C>(&self, chunks: &[ChunkRef], work: W, weight: fn(&T) -> usize, mut consume: C) -> Result<(), E>
    where
        T: Send,
        E: Send,
        W: Fn(usize, &ChunkRef, &mut Buffers) -> Result<T, E> + Sync,
        C: FnMut(usize, T) -> Result<(), E>,
    {
        let workers = self.rec.workers();
        if workers == 1 {
            let mut buf = Buffers::default();
            for (k, c) in chunks.iter().enumerate() {
                consume(k, work(k, c, &mut buf)?)?;
            }
            return Ok(());
        }
        let window = workers * 2;
        let (job_tx, job_rx) = crossbeam::channel::unbounded::<usize>();
        let (res_tx, res_rx) = crossbeam::channel::unbounded::<(usize, Result<T, E>)>();
        crossbeam::thread::scope(|s| {
            for _ in 0..workers {
                let (job_rx, res_tx, work) = (job_rx.clone(), res_tx.clone(), &work);
                s.spawn(move |_| {
                    let mut buf = Buffers::default();
                    for k in job_rx {
                        if res_tx.send((k, work(k, &chunks[k], &mut buf))).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(res_tx);
            // Chunks cost very different amounts (a rep string can expand into billions of
            // references), so workers run ahead of the consumer as far as `AHEAD` chunks and
            // `HELD_BYTES` of finished results allow, with `window` jobs queued at a time.
            let (mut sent, mut received, mut held) = (0usize, 0usize, 0usize);
            let mut next = 0;
            let mut ready = BTreeMap::new();
            let result = (|| {
                while next < chunks.len() {
                    while sent < chunks.len() && sent - received < window && sent - next < AHEAD && held < HELD_BYTES {
                        job_tx.send(sent).expect("workers outlive the sender");
                        sent += 1;
                    }
                    let (k, r) = res_rx.recv().expect("recovery workers stopped early");
                    received += 1;
                    held += r.as_ref().map_or(0, weight);
                    ready.insert(k, r);
                    while let Some(r) = ready.remove(&next) {
                        let t = r?;
                        held -= weight(&t);
                        consume(next, t)?;
                        next += 1;
                    }
                }
                Ok(())
            })();
            drop(job_tx);
            result
        })
        .expect("recovery worker panicked")
    }
}
