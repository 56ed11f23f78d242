//! Callgrind profiles (`dep callgrind`): self cost per instruction (`Ir`, instructions
//! executed; `Dr` and `Dw`, memory reads and writes, as the recovered references count
//! them), call arcs with inclusive costs from the call stack rebuilt from the block
//! stream, and jumps, for callgrind_annotate, KCachegrind and gprof2dot.
//!
//! Chunks are recovered in parallel, each into its costs and call events (costs.rs); the
//! events are replayed in order through each thread's call stack (calls.rs); the file is
//! written from the totals (write.rs), with places looked up on all cores.

pub mod calls;
pub mod costs;
pub mod write;

use crate::program::calls::BlockExits;
use crate::program::symbols::Symbolizer;
use calls::{Stack, Totals};
use costs::{ChunkCosts, CostSink, Tables};
use dep_recover::{RecoverError, Recovery, Source};
use rustc_hash::FxHashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What to write.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// One file per thread (`FILE-1`, `FILE-2`, ... for threads 0, 1, ...), not one merged.
    pub separate_threads: bool,
    /// Cost lines by instruction address and line, not by line alone.
    pub dump_instr: bool,
}

/// Why a profile could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CallgrindError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("writing {path}: {err}")]
    Io { path: String, err: io::Error },
}

/// The files written and the instructions they count.
pub struct Written {
    pub files: Vec<PathBuf>,
    pub instructions: u64,
}

/// Writes `rec`'s profile as Callgrind profile `output` (or one file per thread).
pub fn write_profile(rec: &Recovery, symbols: &Symbolizer, opts: &Options, output: &Path) -> Result<Written, CallgrindError> {
    let plans = &rec.plans;
    let tables = Tables::build(plans, BlockExits::build(plans, symbols));

    let threads = rec.profile.threads.len().max(1);
    // Stacks and per-thread totals go by the thread's position in the table: a profile's
    // thread indices need not be 0..n-1. Every chunk is in its thread's list (the reader
    // files it there), so the lookup finds it.
    let position: FxHashMap<u32, usize> = rec.profile.threads.iter().enumerate().map(|(k, t)| (t.index, k)).collect();
    let pos = |thread: u32| position.get(&thread).copied().unwrap_or(0);
    let mut stacks: Vec<Stack> = (0..threads).map(|_| Stack::default()).collect();
    let mut totals: Vec<Totals> = (0..if opts.separate_threads { threads } else { 1 }).map(|_| Totals::default()).collect();
    let mut last_thread: Option<u32> = None;
    // Dense per-chunk arrays go back for the next chunks once merged (fresh ones cost page
    // faults and zeroing on every chunk).
    let spares: std::sync::Mutex<Vec<costs::Spare>> = std::sync::Mutex::new(Vec::new());
    rec.events(Source::Dep).ordered(
        |_| CostSink { t: &tables, c: ChunkCosts::new(plans.len(), spares.lock().ok().and_then(|mut s| s.pop())) },
        |mut s| {
            s.c.settle();
            Ok(s.c)
        },
        |c| c.whole.len() * 8 + c.runs.len() * 16 + c.trans.len() * 16 + c.local.ops.len() * 64,
        |chunk, c| {
            let t = pos(chunk.thread);
            if let Some(prev) = last_thread.filter(|&p| p != chunk.thread).map(pos) {
                let k = if opts.separate_threads { prev } else { 0 };
                stacks[prev].finish(&tables, &mut totals[k]);
            }
            last_thread = Some(chunk.thread);
            let k = if opts.separate_threads { t } else { 0 };
            let mut c = c;
            stacks[t].chunk(&mut c, &tables, &mut totals[k]);
            if let Ok(mut s) = spares.lock() {
                s.push(c.spare());
            }
            Ok(())
        },
    )?;
    if let Some(prev) = last_thread.map(pos) {
        let k = if opts.separate_threads { prev } else { 0 };
        stacks[prev].finish(&tables, &mut totals[k]);
    }

    let cmd = rec.profile.meta.command.join(" ");
    let mut files = Vec::new();
    let mut instructions = 0;
    for (k, tot) in totals.iter().enumerate() {
        let path = if opts.separate_threads { PathBuf::from(format!("{}-{}", output.display(), k + 1)) } else { output.to_path_buf() };
        let io_err = |err| CallgrindError::Io { path: path.display().to_string(), err };
        let mut f = std::fs::File::create(&path).map_err(io_err)?;
        let header = write::Header {
            pid: rec.profile.meta.pid,
            cmd: &cmd,
            thread: opts.separate_threads.then_some(k as u32 + 1),
            dump_instr: opts.dump_instr,
        };
        write::write(&tables, tot, symbols, &header, &mut f).and_then(|_| f.flush()).map_err(io_err)?;
        instructions += tot.total[0];
        files.push(path);
    }
    Ok(Written { files, instructions })
}
