//! Seeking in a profile: the seek index ([`count`] builds it by recovering every chunk once),
//! and a [`Window`] of each thread's instructions that a run reads only the chunks of.
//!
//! Instructions are numbered per thread from 0, in execution order. A window N..M holds
//! the blocks whose first instruction is numbered N to M-1: blocks are whole in every
//! output, so a block that starts before N is left out and one that starts before M is
//! kept to its end. Markers (sync points, system calls, signals) go with the block they
//! stand after, or with the chunk's start before its first block.

use crate::counts::Counts;
use crate::driver::Recovery;
use crate::error::RecoverError;
use crate::events::{BlockEvent, Marker, MemEvent, RepRun, Run, Source};
use crate::sink::Sink;
use dep_profile::container::{ChunkCounts, ChunkRef, Index, IndexEntry, Profile};
use std::collections::HashMap;
use std::ops::Range;

/// Instructions `from..to` of each thread (or of one thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub from: u64,
    pub to: u64,
    /// Only this thread (index in creation order); every thread when None.
    pub thread: Option<u32>,
}

/// Why a window cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WindowError {
    #[error("the window {from}..{to} is empty (--from-instr must be below --to-instr)")]
    Empty { from: u64, to: u64 },
    #[error("thread {thread} is not in the profile (it has {threads} threads)")]
    NoThread { thread: u32, threads: usize },
    #[error("the seek index has {entries} entries for thread {thread}'s {chunks} chunks")]
    Index { thread: u32, entries: usize, chunks: usize },
    #[error("no block starts in instructions {from}..{to}: {ran}")]
    Outside { from: u64, to: u64, ran: String },
}

impl Window {
    /// Whether the window is every instruction (of the threads it names).
    pub fn whole(&self) -> bool {
        self.from == 0 && self.to == u64::MAX
    }

    /// Whether a block whose first instruction is numbered `at` is in the window.
    #[inline]
    pub fn holds(&self, at: u64) -> bool {
        self.from <= at && at < self.to
    }
}

/// Builds the seek index: every chunk recovered once, on all cores, and counted.
pub fn count(rec: &Recovery, progress: &(dyn Fn(u64) + Sync)) -> Result<Index, RecoverError> {
    let mut got: HashMap<(u32, u32), ChunkCounts> = HashMap::new();
    rec.events(Source::Dep).progress(progress).unordered(
        |_| Counts::default(),
        Ok,
        |c, n| {
            // Instructions are numbered on past a gap: a chunk's count includes the gap
            // before it.
            let instructions = n.instructions.saturating_add(n.unrecorded);
            let counts = ChunkCounts { instructions, blocks: n.blocks, reads: n.reads, writes: n.writes };
            got.insert((c.thread, c.seq), counts);
            Ok(())
        },
    )?;
    Index::from_counts(&rec.profile.threads, |t, s| got.get(&(t, s)).copied().unwrap_or_default())
        .map_err(|e| RecoverError::Index { path: rec.profile.path().to_string(), why: e.to_string() })
}

/// Whether `thread`, if one is named, is in the profile.
fn known_thread(profile: &Profile, thread: Option<u32>) -> Result<(), WindowError> {
    match thread.filter(|&t| t as usize >= profile.threads.len()) {
        Some(t) => Err(WindowError::NoThread { thread: t, threads: profile.threads.len() }),
        None => Ok(()),
    }
}

/// The chunks a window reads: per thread, the range of its chunks that hold blocks of the
/// window, and each chunk's index entry.
#[derive(Clone, Debug)]
pub(crate) struct Selection {
    pub window: Window,
    /// Per thread, the positions of the chunks read.
    pub ranges: Vec<Range<usize>>,
    entries: HashMap<(u32, u32), Place>,
}

/// What a window does with a chunk it reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    pub entry: IndexEntry,
    /// The thread's part starts in this chunk after its own start: a [`Marker::WindowStart`]
    /// goes before the first block given, or at the chunk's end if none is.
    pub opens: bool,
    /// The thread's part ends at this chunk's end, before the thread's own: a
    /// [`Marker::WindowEnd`] goes there (one goes wherever a block past the window is met).
    pub closes: bool,
}

impl Selection {
    /// The chunks of `profile` that `window` needs, by `index`.
    pub fn new(profile: &Profile, index: &Index, window: Window) -> Result<Selection, WindowError> {
        if window.from >= window.to {
            return Err(WindowError::Empty { from: window.from, to: window.to });
        }
        known_thread(profile, window.thread)?;
        let mut ranges = Vec::with_capacity(profile.threads.len());
        let mut entries = HashMap::new();
        for (t, info) in profile.threads.iter().enumerate() {
            let mine = index.thread(t as u32);
            if mine.len() != info.chunks.len() {
                return Err(WindowError::Index { thread: t as u32, entries: mine.len(), chunks: info.chunks.len() });
            }
            let wanted = window.thread.is_none_or(|w| w as usize == t);
            // A chunk is read when a block of the window starts in it, or, holding no
            // instruction, when its place is inside the window (its markers go there).
            let read = |e: &IndexEntry| {
                let n = e.counts.instructions;
                e.first < window.to && if n == 0 { e.first >= window.from } else { e.first + n > window.from }
            };
            let range = if wanted {
                let start = mine.iter().position(read).unwrap_or(mine.len());
                let end = start + mine[start..].iter().take_while(|e| read(e)).count();
                start..end
            } else {
                0..0
            };
            let last = info.chunks.len();
            for (k, (c, e)) in info.chunks[range.clone()].iter().zip(&mine[range.clone()]).enumerate() {
                let k = range.start + k;
                let opens = k == range.start && window.from > 0;
                // The last chunk read ends the window at its own end unless it is the
                // thread's last, whose end is the thread's.
                let closes = k + 1 == range.end && k + 1 < last;
                entries.insert((c.thread, c.seq), Place { entry: *e, opens, closes });
            }
            ranges.push(range);
        }
        Ok(Selection { window, ranges, entries })
    }

    /// A selection of every chunk of one thread (or of all): no index needed, nothing clipped.
    pub fn threads(profile: &Profile, thread: Option<u32>) -> Result<Selection, WindowError> {
        known_thread(profile, thread)?;
        let ranges = profile.threads.iter().enumerate().map(|(t, info)| match thread {
            Some(w) if w as usize != t => 0..0,
            _ => 0..info.chunks.len(),
        });
        Ok(Selection { window: Window { from: 0, to: u64::MAX, thread }, ranges: ranges.collect(), entries: HashMap::new() })
    }

    /// Whether no chunk is read; then why, from the index.
    pub fn empty(&self, index: Option<&Index>) -> Result<(), WindowError> {
        if self.ranges.iter().any(|r| !r.is_empty()) {
            return Ok(());
        }
        let w = self.window;
        let ran: Vec<String> = (0..self.ranges.len() as u32)
            .filter(|&t| w.thread.is_none_or(|x| x == t))
            .map(|t| match index {
                Some(i) => format!("thread {t} ran {} instructions", i.instructions(t)),
                None => format!("thread {t} has no chunks"),
            })
            .collect();
        Err(WindowError::Outside { from: w.from, to: w.to, ran: if ran.is_empty() { "no threads".into() } else { ran.join(", ") } })
    }

    /// What the window does with a chunk it reads.
    pub fn place(&self, c: &ChunkRef) -> Option<Place> {
        self.entries.get(&(c.thread, c.seq)).copied()
    }
}

/// A sink that passes on only the window's part of one chunk's events, marks where the
/// window starts and ends, and counts the chunk's instructions for the index check.
pub(crate) struct Clip<'s, S> {
    inner: &'s mut S,
    window: Window,
    thread: u32,
    place: Place,
    /// The number of the next instruction.
    pub at: u64,
    /// Whether events at the current place (after the block last entered) are passed on.
    inside: bool,
    /// Whether the WindowStart marker is still to be given.
    opening: bool,
    /// A block starting at or past the window's end was reached: the chunk stopped there.
    pub past: bool,
}

impl<'s, S: Sink> Clip<'s, S> {
    pub fn new(inner: &'s mut S, window: Window, thread: u32, place: Place) -> Self {
        let first = place.entry.first;
        Clip { inner, window, thread, place, at: first, inside: window.holds(first), opening: place.opens, past: false }
    }

    /// Before the first block given: the window's start, if it is this chunk's to mark.
    fn open(&mut self) -> Result<bool, S::Error> {
        if std::mem::take(&mut self.opening) {
            return self.inner.marker(self.thread, Marker::WindowStart);
        }
        Ok(true)
    }

    /// At the first block past the window: its end. Answers false: the chunk stops.
    fn close(&mut self) -> Result<bool, S::Error> {
        self.past = true;
        self.inside = false;
        self.open()?;
        self.inner.marker(self.thread, Marker::WindowEnd)?;
        Ok(false)
    }

    /// After the chunk's last event, when it did not stop past the window: the window's
    /// marks that had no block to stand by.
    pub fn end(&mut self) -> Result<(), S::Error> {
        self.open()?;
        if self.place.closes {
            self.inner.marker(self.thread, Marker::WindowEnd)?;
        }
        Ok(())
    }
}

impl<S: Sink> Sink for Clip<'_, S> {
    type Error = S::Error;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, S::Error> {
        let start = self.at;
        self.at += b.executed as u64;
        if start >= self.window.to {
            return self.close();
        }
        self.inside = self.window.holds(start);
        if !self.inside {
            return Ok(true);
        }
        Ok(self.open()? && self.inner.block(b)?)
    }

    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, S::Error> {
        if self.inside {
            self.inner.refs(b, refs)
        } else {
            Ok(true)
        }
    }

    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, S::Error> {
        if self.inside {
            self.inner.rep(b, run)
        } else {
            Ok(true)
        }
    }

    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, S::Error> {
        if let Marker::Unrecorded(n) = m {
            // The gap before the chunk's first block: passed on where the window is already
            // being given (a window starting after it starts with WindowStart instead).
            self.at = self.at.saturating_add(n);
            if self.opening {
                return Ok(true);
            }
        }
        if self.inside {
            self.inner.marker(thread, m)
        } else {
            Ok(true)
        }
    }

    fn run(&mut self, run: &Run) -> Result<bool, S::Error> {
        // Blocks in the window are consecutive: skip those before, pass those in, stop at
        // the first past it.
        let blocks = run.blocks();
        let (mut skip, mut skip_refs) = (0, 0);
        while skip < blocks.len() && self.at < self.window.from {
            self.at += blocks[skip].executed as u64;
            skip_refs += blocks[skip].refs as usize;
            skip += 1;
        }
        let (mut take, mut take_refs) = (skip, skip_refs);
        while take < blocks.len() && self.window.holds(self.at) {
            self.at += blocks[take].executed as u64;
            take_refs += blocks[take].refs as usize;
            take += 1;
        }
        if take > skip {
            self.inside = true;
            if !self.open()? || !self.inner.run(&run.part(skip..take, skip_refs..take_refs))? {
                return Ok(false);
            }
        } else if skip > 0 {
            self.inside = false;
        }
        if take < blocks.len() {
            // Block `take` starts at or past the window's end.
            self.at += blocks[take].executed as u64;
            return self.close();
        }
        Ok(true)
    }
}
