//! Runs recovery over a whole profile into sinks, in the three shapes analyses need:
//! - [`run`](Recovery::run): one sink sees everything, on the calling thread;
//! - [`run_threads`](Recovery::run_threads): one sink per thread, each fed its chunks in
//!   order, threads in parallel (state of any kind: call stacks, instance numbers);
//! - [`run_merged`](Recovery::run_merged) and [`run_chunks`](Recovery::run_chunks): one
//!   sink per chunk, chunks in parallel, then merged in order into each thread's sink
//!   ([`Merge`]) or handed over in chunk order;
//! - [`run_rendered`](Recovery::run_rendered): `dep recover`'s renderings, chunks in
//!   parallel, written in order.

use crate::events::{Begin, Merge, Part, Sink, SinkError};
use crate::ordered::{ChunkWriter, Gate};
use crate::plans::{Engine, Plans};
use crate::render::{Format, Renderer};
use crate::traverse::{recover_chunk, walk_blocks, ChunkFault, Scratch};
use crate::truth::replay_chunk;
use dep_profile::container::{ChunkRef, Profile, ProfileError};
use std::collections::BTreeMap;
use std::io::Write;

/// Errors of a recovery run.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("writing output: {0}")]
    Output(std::io::Error),
    /// A sink's own failure.
    #[error("{0}")]
    Sink(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}: the profile has no truth stream (record with --truth)")]
    NoTruth(String),
}

impl RecoverError {
    /// A sink's result as a run's: a sink that stopped did not fail.
    pub fn from_sink_result(r: Result<(), SinkError>) -> Result<(), Self> {
        match r {
            Ok(()) | Err(SinkError::Stop) => Ok(()),
            Err(e) => Err(RecoverError::from_sink(e)),
        }
    }

    /// A sink's error as a run's (never [`SinkError::Stop`], which drivers take first).
    pub fn from_sink(e: SinkError) -> Self {
        match e {
            SinkError::Io(e) => RecoverError::Output(e),
            SinkError::Failed(e) => RecoverError::Sink(e),
            SinkError::Stop => RecoverError::Sink("a sink stopped where it cannot".into()),
        }
    }
}

/// Whether a sink took everything or stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fed {
    All,
    Stopped,
}

/// `Ok(Fed::Stopped)` for [`SinkError::Stop`], the error otherwise.
fn fed(r: Result<(), SinkError>) -> Result<Fed, RecoverError> {
    match r {
        Ok(()) => Ok(Fed::All),
        Err(SinkError::Stop) => Ok(Fed::Stopped),
        Err(e) => Err(RecoverError::from_sink(e)),
    }
}

/// What to replay from each chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Recover from DEP_c and DEP_m.
    Dep,
    /// Replay the truth stream recorded alongside.
    Truth,
    /// The control flow alone, from DEP_c: blocks and markers, no references; DEP_m is
    /// neither read nor checked. For analyses of control flow: on gzip's profile 4.3 s
    /// where full recovery takes 5.3 s (both on two cores).
    Blocks,
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
}

/// Per-worker buffers.
#[derive(Default)]
struct Buffers {
    scratch: Scratch,
    truth: Vec<u8>,
}

impl<'p> Recovery<'p> {
    /// Pre-decodes the block table with `workers` threads (0: all cores).
    pub fn new(profile: &'p Profile, workers: usize) -> Self {
        let workers = Self::cores(workers);
        Recovery { profile, plans: Plans::build(profile, workers), workers }
    }

    /// [`new`](Self::new), with plain blocks compiled to machine code or not (by default
    /// they are, where the host is x86-64, unless `DEP_JIT=0`).
    pub fn with_compiled(profile: &'p Profile, workers: usize, compiled: bool) -> Self {
        Self::with_engine(profile, workers, Engine::of(compiled))
    }

    /// [`new`](Self::new) with the given engine for plain blocks.
    pub fn with_engine(profile: &'p Profile, workers: usize, engine: Engine) -> Self {
        let workers = Self::cores(workers);
        Recovery { profile, plans: Plans::build_with(profile, workers, engine), workers }
    }

    fn cores(workers: usize) -> usize {
        if workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            workers
        }
    }

    /// Every chunk in output order: thread by thread, each in sequence.
    pub fn chunks(&self) -> Vec<ChunkRef> {
        self.profile.threads.iter().flat_map(|t| t.chunks.iter().copied()).collect()
    }

    fn check_source(&self, source: Source) -> Result<(), RecoverError> {
        if source == Source::Truth && !self.profile.meta.truth {
            return Err(RecoverError::NoTruth(self.profile.path().to_string()));
        }
        Ok(())
    }

    fn begin(&self, source: Source, part: Part) -> Begin<'_> {
        Begin::new(self.profile, &self.plans, source, part)
    }

    /// Sends one chunk's events to `sink`.
    fn feed<S: Sink>(&self, c: &ChunkRef, source: Source, buf: &mut Buffers, sink: &mut S) -> Result<Fed, RecoverError> {
        let view = self.profile.chunk(c)?;
        let r = match source {
            Source::Dep => recover_chunk(self.profile.width, &self.plans, &view, &mut buf.scratch, sink),
            Source::Truth => replay_chunk(&self.plans, &view, &mut buf.truth, sink),
            Source::Blocks => walk_blocks(self.profile.width, &self.plans, &view, &mut buf.scratch, sink),
        };
        match r {
            Ok(()) => Ok(Fed::All),
            Err(ChunkFault::Sink(e)) => fed(Err(e)),
            Err(f) => Err(RecoverError::Profile(self.profile.chunk_error(c, f.to_string()))),
        }
    }

    /// Sends one chunk's events to `sink` (no `begin` or `finish`): for consumers that
    /// interleave threads' chunks in an order of their own. Returns whether the sink took
    /// them all (false: it stopped).
    pub fn run_chunk<S: Sink>(&self, source: Source, c: &ChunkRef, sink: &mut S) -> Result<bool, RecoverError> {
        self.check_source(source)?;
        let mut buf = Buffers::default();
        Ok(self.feed(c, source, &mut buf, sink)? == Fed::All)
    }

    /// Sends every event, in order, to one sink, on the calling thread.
    pub fn run<S: Sink>(&self, source: Source, sink: &mut S) -> Result<(), RecoverError> {
        self.run_with_progress(source, sink, &|_| {})
    }

    /// [`run`](Self::run), calling `progress` as each chunk is done.
    pub fn run_with_progress<S: Sink>(&self, source: Source, sink: &mut S, progress: &dyn Fn(u64)) -> Result<(), RecoverError> {
        self.check_source(source)?;
        let mut buf = Buffers::default();
        if fed(sink.begin(&self.begin(source, Part::All)))? == Fed::All {
            for c in self.chunks() {
                if self.feed(&c, source, &mut buf, sink)? == Fed::Stopped {
                    break;
                }
                progress(1);
            }
        }
        fed(sink.finish()).map(|_| ())
    }

    /// Threads the chunk-parallel drivers use.
    pub fn workers(&self) -> usize {
        let chunks: usize = self.profile.threads.iter().map(|t| t.chunks.len()).sum();
        self.workers.min(chunks).max(1)
    }

    /// One sink per thread, made by `make(thread)`, fed that thread's chunks in order from
    /// `begin` ([`Part::Thread`]) to `finish`; threads run in parallel, the longest first.
    /// Returns the sinks in thread order. A sink that stops ends its own thread only.
    pub fn run_threads<S, M>(&self, source: Source, make: M, progress: &(dyn Fn(u64) + Sync)) -> Result<Vec<S>, RecoverError>
    where
        S: Sink + Send,
        M: Fn(u32) -> S + Sync,
    {
        self.check_source(source)?;
        let threads = &self.profile.threads;
        let one = |t: usize, buf: &mut Buffers| -> Result<S, RecoverError> {
            let mut sink = make(t as u32);
            if fed(sink.begin(&self.begin(source, Part::Thread(t as u32))))? == Fed::All {
                for c in &threads[t].chunks {
                    if self.feed(c, source, buf, &mut sink)? == Fed::Stopped {
                        break;
                    }
                    progress(1);
                }
            }
            fed(sink.finish())?;
            Ok(sink)
        };
        let workers = self.workers.min(threads.len()).max(1);
        if workers == 1 {
            let mut buf = Buffers::default();
            return (0..threads.len()).map(|t| one(t, &mut buf)).collect();
        }
        let mut order: Vec<usize> = (0..threads.len()).collect();
        order.sort_by_key(|&t| std::cmp::Reverse(threads[t].chunks.len()));
        let (job_tx, job_rx) = crossbeam::channel::unbounded::<usize>();
        for t in order {
            job_tx.send(t).expect("the receiver is alive");
        }
        drop(job_tx);
        let (res_tx, res_rx) = crossbeam::channel::unbounded::<(usize, Result<S, RecoverError>)>();
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
    pub fn run_merged<S, M>(&self, source: Source, make: M, progress: &(dyn Fn(u64) + Sync)) -> Result<Vec<S>, RecoverError>
    where
        S: Merge + Send,
        M: Fn(u32) -> S + Sync,
    {
        self.check_source(source)?;
        let chunks = self.chunks();
        let threads = &self.profile.threads;
        let work = |c: &ChunkRef, buf: &mut Buffers| -> Result<(S, Fed), RecoverError> {
            let mut sink = make(c.thread);
            let mut how = fed(sink.begin(&self.begin(source, Part::Chunk { thread: c.thread, seq: c.seq })))?;
            if how == Fed::All {
                how = self.feed(c, source, buf, &mut sink)?;
            }
            fed(sink.finish())?;
            Ok((sink, how))
        };
        // The thread each chunk index belongs to, and where each thread's chunks end.
        let mut owner = Vec::with_capacity(chunks.len());
        for (t, th) in threads.iter().enumerate() {
            owner.extend(std::iter::repeat_n(t, th.chunks.len()));
        }
        let start = |t: usize| -> Result<(S, Fed), RecoverError> {
            let mut s = make(t as u32);
            let how = fed(s.begin(&self.begin(source, Part::Thread(t as u32))))?;
            Ok((s, how))
        };
        let mut done: Vec<Option<S>> = (0..threads.len()).map(|_| None).collect();
        let mut current: Option<(usize, S, Fed)> = None;
        let close = |t: usize, mut s: S, done: &mut Vec<Option<S>>| -> Result<(), RecoverError> {
            fed(s.finish())?;
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
                progress(1);
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
                fed(s.finish())?;
                *d = Some(s);
            }
        }
        Ok(done.into_iter().map(|s| s.expect("every thread closed")).collect())
    }

    /// Recovers chunks in parallel, each rendered in `format`, and writes the renderings to
    /// `out` in chunk order (thread by thread, each in sequence) in bounded memory: the
    /// chunk next in order writes straight through, those ahead of it hold their bytes
    /// ([`ordered`](crate::ordered)). `progress` sees each chunk done.
    pub fn run_rendered(
        &self,
        source: Source,
        format: Format,
        out: &mut (dyn Write + Send),
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<(), RecoverError> {
        self.check_source(source)?;
        let chunks = self.chunks();
        let gate = Gate::new(out);
        self.map_ordered(
            &chunks,
            |k, c, buf| {
                let mut sink = Renderer::new(format, ChunkWriter::new(k, &gate));
                if fed(sink.begin(&self.begin(source, Part::Chunk { thread: c.thread, seq: c.seq })))? == Fed::All {
                    self.feed(c, source, buf, &mut sink)?;
                }
                fed(sink.finish())?;
                sink.into_inner().map_err(RecoverError::Output)
            },
            ChunkWriter::held_bytes,
            |k, w| {
                gate.finish(k, w).map_err(RecoverError::Output)?;
                progress(1);
                Ok(())
            },
        )
    }

    /// The general chunk-parallel run: each chunk into a sink made by `make(chunk)` (which
    /// sees `begin` with [`Part::Chunk`], the chunk and `finish`), turned by `finish` into a
    /// result of `weight` bytes, which `consume` receives in chunk order (thread by thread,
    /// each in sequence) on the calling thread.
    pub fn run_chunks<S, T, M, F, C>(
        &self,
        source: Source,
        make: M,
        finish: F,
        weight: fn(&T) -> usize,
        consume: C,
    ) -> Result<(), RecoverError>
    where
        S: Sink,
        T: Send,
        M: Fn(&ChunkRef) -> S + Sync,
        F: Fn(S) -> Result<T, RecoverError> + Sync,
        C: FnMut(&ChunkRef, T) -> Result<(), RecoverError>,
    {
        self.check_source(source)?;
        let chunks = self.chunks();
        let mut consume = consume;
        self.map_ordered(
            &chunks,
            |_, c, buf| {
                let mut sink = make(c);
                if fed(sink.begin(&self.begin(source, Part::Chunk { thread: c.thread, seq: c.seq })))? == Fed::All {
                    self.feed(c, source, buf, &mut sink)?;
                }
                fed(sink.finish())?;
                finish(sink)
            },
            weight,
            |k, t| consume(&chunks[k], t),
        )
    }

    /// Runs `work` on every chunk, in parallel on [`workers`](Self::workers) threads, and
    /// hands the results to `consume` in chunk order.
    fn map_ordered<T, W, C>(&self, chunks: &[ChunkRef], work: W, weight: fn(&T) -> usize, mut consume: C) -> Result<(), RecoverError>
    where
        T: Send,
        W: Fn(usize, &ChunkRef, &mut Buffers) -> Result<T, RecoverError> + Sync,
        C: FnMut(usize, T) -> Result<(), RecoverError>,
    {
        let workers = self.workers();
        if workers == 1 {
            let mut buf = Buffers::default();
            for (k, c) in chunks.iter().enumerate() {
                consume(k, work(k, c, &mut buf)?)?;
            }
            return Ok(());
        }
        let window = workers * 2;
        let (job_tx, job_rx) = crossbeam::channel::unbounded::<usize>();
        let (res_tx, res_rx) = crossbeam::channel::unbounded::<(usize, Result<T, RecoverError>)>();
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
