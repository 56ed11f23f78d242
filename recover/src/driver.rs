//! Runs recovery over a whole profile: threads one after another, each chunk in order,
//! chunks recovered in parallel when the output allows it.

use crate::events::Sink;
use crate::plans::{Engine, Plans};
use crate::traverse::{recover_chunk, Scratch};
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
    #[error("{0}: the profile has no truth stream (record with --truth)")]
    NoTruth(String),
}

/// What to replay from each chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Recover from DEP_c and DEP_m.
    Dep,
    /// Replay the truth stream recorded alongside.
    Truth,
}

/// Chunks the parallel driver recovers at most ahead of the one it writes next.
const AHEAD: usize = 1024;
/// Finished output the parallel driver holds at most before it stops starting chunks.
const HELD_BYTES: usize = 256 << 20;

/// A profile ready for recovery: its block table pre-decoded.
pub struct Recovery<'p> {
    pub profile: &'p Profile,
    pub plans: Plans,
    workers: usize,
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

    /// Runs one chunk into `sink`.
    pub fn chunk<S: Sink>(
        &self,
        c: &ChunkRef,
        source: Source,
        scratch: &mut Scratch,
        truth_buf: &mut Vec<u8>,
        sink: &mut S,
    ) -> Result<(), RecoverError> {
        let view = self.profile.chunk(c)?;
        let r = match source {
            Source::Dep => recover_chunk(self.profile.width, &self.plans, &view, scratch, sink),
            Source::Truth => replay_chunk(&view, truth_buf, sink),
        };
        r.map_err(|f| match f {
            crate::traverse::ChunkFault::Sink(e) => RecoverError::Output(e),
            f => RecoverError::Profile(self.profile.chunk_error(c, f.to_string())),
        })
    }

    /// Sends every event, in order, to one sink, on the calling thread.
    pub fn run<S: Sink>(&self, source: Source, sink: &mut S) -> Result<(), RecoverError> {
        self.run_with_progress(source, sink, &|_| {})
    }

    /// [`run`](Self::run), calling `progress` as each chunk is done.
    pub fn run_with_progress<S: Sink>(&self, source: Source, sink: &mut S, progress: &dyn Fn(u64)) -> Result<(), RecoverError> {
        self.check_source(source)?;
        let mut scratch = Scratch::default();
        let mut tb = Vec::new();
        for c in self.chunks() {
            self.chunk(&c, source, &mut scratch, &mut tb, sink)?;
            progress(1);
        }
        Ok(())
    }

    /// Threads [`run_ordered`](Self::run_ordered) would use.
    pub fn workers(&self) -> usize {
        let chunks: usize = self.profile.threads.iter().map(|t| t.chunks.len()).sum();
        self.workers.min(chunks).max(1)
    }

    /// Recovers chunks in parallel, each into a sink made by `make`; `finish` turns a sink
    /// into bytes that are written to `out` in chunk order. `progress` sees each chunk done.
    pub fn run_ordered<S, M, F>(
        &self,
        source: Source,
        make: M,
        finish: F,
        out: &mut dyn Write,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<(), RecoverError>
    where
        S: Sink,
        M: Fn() -> S + Sync,
        F: Fn(S) -> std::io::Result<Vec<u8>> + Sync,
    {
        self.check_source(source)?;
        let chunks = self.chunks();
        let workers = self.workers();
        if workers == 1 {
            let mut scratch = Scratch::default();
            let mut tb = Vec::new();
            for c in &chunks {
                let mut s = make();
                self.chunk(c, source, &mut scratch, &mut tb, &mut s)?;
                out.write_all(&finish(s).map_err(RecoverError::Output)?).map_err(RecoverError::Output)?;
                progress(1);
            }
            return Ok(());
        }
        let window = workers * 2;
        let (job_tx, job_rx) = crossbeam::channel::unbounded::<usize>();
        let (res_tx, res_rx) = crossbeam::channel::unbounded::<(usize, Result<Vec<u8>, RecoverError>)>();
        crossbeam::thread::scope(|s| {
            for _ in 0..workers {
                let job_rx = job_rx.clone();
                let res_tx = res_tx.clone();
                let chunks = &chunks;
                let make = &make;
                let finish = &finish;
                s.spawn(move |_| {
                    let mut scratch = Scratch::default();
                    let mut tb = Vec::new();
                    for k in job_rx {
                        let mut sink = make();
                        let r = self
                            .chunk(&chunks[k], source, &mut scratch, &mut tb, &mut sink)
                            .and_then(|_| finish(sink).map_err(RecoverError::Output));
                        if res_tx.send((k, r)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(res_tx);
            // Chunks cost very different amounts (a rep string can expand into billions of
            // references), so workers run ahead of the writer as far as `AHEAD` chunks and
            // `HELD_BYTES` of finished output allow, with `window` jobs queued at a time.
            let (mut sent, mut received, mut held) = (0usize, 0usize, 0usize);
            let mut next = 0;
            let mut ready = BTreeMap::new();
            let result = (|| {
                while next < chunks.len() {
                    while sent < chunks.len() && sent - received < window && sent - next < AHEAD && held < HELD_BYTES {
                        job_tx.send(sent).unwrap();
                        sent += 1;
                    }
                    let (k, r) = res_rx.recv().expect("recovery workers stopped early");
                    received += 1;
                    held += r.as_ref().map_or(0, |v| v.len());
                    ready.insert(k, r);
                    while let Some(r) = ready.remove(&next) {
                        let bytes = r?;
                        held -= bytes.len();
                        out.write_all(&bytes).map_err(RecoverError::Output)?;
                        progress(1);
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
