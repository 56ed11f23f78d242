//! `dep export champsim`: ChampSim traces, one record of 64 bytes per executed instruction
//! (a rep string one per iteration, as ChampSim's Pin tracer writes them), one file per
//! thread, plain or compressed by the name's extension (`.xz`, `.gz`).
//!
//! Chunks are turned into records in parallel ([`Events::ordered`](dep_recover::Events::ordered))
//! and written in order; a conditional branch at a chunk's end waits for the next chunk's
//! first block to say whether it was taken. What the records hold is in [`record`].

pub mod chunk;
pub mod record;

use chunk::{ChunkRecords, ChunkTrace, Losses, Open, Templates};
use dep_recover::{RecoverError, Recovery, Source};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What can go wrong writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum ChampsimError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
    #[error("cannot create {path}: {err}")]
    Create { path: PathBuf, err: io::Error },
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: io::Error },
    #[error("thread {thread} is not in the profile (it has {threads})")]
    NoThread { thread: u32, threads: usize },
}

/// A trace file written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub thread: u32,
    pub path: PathBuf,
    pub records: u64,
}

/// What an export wrote, and what the records could not hold.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub files: Vec<Written>,
    pub losses: Losses,
}

/// How a file is compressed, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Xz,
    Gzip,
}

impl Compression {
    /// By the name's extension: `.xz`, `.gz`, else none.
    pub fn of(path: &Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("xz") => Compression::Xz,
            Some("gz") => Compression::Gzip,
            _ => Compression::None,
        }
    }
}

/// The file of thread `t` when each thread has its own: the thread's index before the
/// compression extension (`out.champsim.xz` → `out.champsim.1.xz`), else at the end.
pub fn thread_path(path: &Path, t: u32) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let named = match Compression::of(path) {
        Compression::None => format!("{name}.{t}"),
        _ => match name.rsplit_once('.') {
            Some((stem, ext)) => format!("{stem}.{t}.{ext}"),
            None => format!("{name}.{t}"),
        },
    };
    path.with_file_name(named)
}

/// Bytes of records a thread's file holds back for branches still waiting for their next
/// block (a signal handler that runs long): beyond it the oldest is written as not taken.
const HOLD_LIMIT: usize = 256 << 20;

/// A branch waiting in a thread's file: its record's offset in the file, and the address
/// after it.
type Waiting = Option<(u64, u64)>;

/// A file, plain or through a compressor.
enum Encoder {
    Plain(io::BufWriter<std::fs::File>),
    Xz(xz2::write::XzEncoder<io::BufWriter<std::fs::File>>),
    Gzip(flate2::write::GzEncoder<io::BufWriter<std::fs::File>>),
}

impl Encoder {
    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Plain(w) => w.write_all(b),
            Encoder::Xz(w) => w.write_all(b),
            Encoder::Gzip(w) => w.write_all(b),
        }
    }

    /// Ends the compressed stream and flushes the file, reporting what goes wrong.
    fn finish(self) -> io::Result<()> {
        let mut file = match self {
            Encoder::Plain(w) => w,
            Encoder::Xz(w) => w.finish()?,
            Encoder::Gzip(w) => w.finish()?,
        };
        file.flush()
    }
}

/// One thread's file being written.
struct Output {
    thread: u32,
    path: PathBuf,
    w: Encoder,
    records: u64,
    /// Records not yet written, from offset `held_at` of the file: those from the oldest
    /// waiting branch's on.
    held: Vec<u8>,
    held_at: u64,
    /// The branch waiting for the next block, and those interrupted by signal handlers.
    pending: Waiting,
    stack: Vec<Waiting>,
    /// [`HOLD_LIMIT`] (smaller in tests).
    hold_limit: usize,
}

impl Output {
    fn create(path: PathBuf, thread: u32, workers: usize) -> Result<Output, ChampsimError> {
        let file = std::fs::File::create(&path).map_err(|err| ChampsimError::Create { path: path.clone(), err })?;
        let file = io::BufWriter::with_capacity(1 << 20, file);
        let w = match Compression::of(&path) {
            Compression::None => Encoder::Plain(file),
            Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(file, flate2::Compression::fast())),
            Compression::Xz => {
                // liblzma's own threads, so that compression keeps up with recovery.
                let stream = xz2::stream::MtStreamBuilder::new()
                    .threads(workers.max(1) as u32)
                    .preset(3)
                    .check(xz2::stream::Check::Crc64)
                    .encoder()
                    .map_err(|e| ChampsimError::Create { path: path.clone(), err: io::Error::other(e) })?;
                Encoder::Xz(xz2::write::XzEncoder::new_stream(file, stream))
            }
        };
        Ok(Output { thread, path, w, records: 0, held: Vec::new(), held_at: 0, pending: None, stack: Vec::new(), hold_limit: HOLD_LIMIT })
    }

    /// Decides the waiting branch `g` by the next block (`Some(addr)`), or as not known.
    fn decide(&mut self, g: Waiting, next: Option<u64>, losses: &mut Losses) {
        let Some((at, fallthrough)) = g else { return };
        match next {
            Some(addr) => record::set_taken(&mut self.held[(at - self.held_at) as usize..], addr != fallthrough),
            None => losses.undirected += 1,
        }
    }

    /// Appends a chunk's records: decides the branches it saw the next block of, and
    /// writes everything before the oldest branch still waiting. Returns the chunk's
    /// buffer.
    fn chunk(&mut self, c: ChunkRecords, losses: &mut Losses) -> Result<Vec<u8>, ChampsimError> {
        let base = self.held_at + self.held.len() as u64;
        let incoming = self.pending.take();
        let outer = std::mem::take(&mut self.stack);
        let at = |k: usize| outer.len().checked_sub(k + 1).and_then(|i| outer[i]);
        self.records += c.records;
        // (Branches an earlier chunk left waiting have their records held.)
        for &(o, next) in &c.decided {
            let g = match o {
                Open::Pending => incoming,
                Open::Outer(k) => at(k),
                Open::Local { .. } => None,
            };
            self.decide(g, next, losses);
        }
        let map = |o: Option<Open>| -> Waiting {
            match o? {
                Open::Local { offset, fallthrough } => Some((base + offset as u64, fallthrough)),
                Open::Pending => incoming,
                Open::Outer(k) => at(k),
            }
        };
        let mut stack: Vec<Waiting> = outer[..outer.len().saturating_sub(c.popped)].to_vec();
        stack.extend(c.stack.iter().map(|&o| map(o)));
        self.pending = map(c.pending);
        self.stack = stack;
        // What no branch waits on goes straight from the chunk's buffer to the file.
        let upto = self.oldest().unwrap_or(base + c.bytes.len() as u64);
        if upto >= base {
            self.write_to(base)?;
            let n = (upto - base) as usize;
            self.put(&c.bytes[..n])?;
            self.held.extend_from_slice(&c.bytes[n..]);
            self.held_at = upto;
        } else {
            self.held.extend_from_slice(&c.bytes);
        }
        self.drain(losses)?;
        Ok(c.bytes)
    }

    fn put(&mut self, b: &[u8]) -> Result<(), ChampsimError> {
        self.w.write_all(b).map_err(|err| ChampsimError::Write { path: self.path.clone(), err })
    }

    /// The oldest branch waiting.
    fn oldest(&self) -> Option<u64> {
        self.pending.iter().chain(self.stack.iter().flatten()).map(|g| g.0).min()
    }

    /// Writes the records before the oldest branch waiting, deciding the oldest as not
    /// known while more than [`HOLD_LIMIT`] bytes would stay held.
    fn drain(&mut self, losses: &mut Losses) -> Result<(), ChampsimError> {
        loop {
            self.write_to(self.oldest().unwrap_or(self.held_at + self.held.len() as u64))?;
            if self.held.len() <= self.hold_limit {
                return Ok(());
            }
            let o = self.oldest().expect("records are held only for a waiting branch");
            losses.undirected += 1;
            for g in std::iter::once(&mut self.pending).chain(self.stack.iter_mut()) {
                if g.is_some_and(|g| g.0 == o) {
                    *g = None;
                }
            }
        }
    }

    /// Writes the held records before file offset `to`.
    fn write_to(&mut self, to: u64) -> Result<(), ChampsimError> {
        let n = (to - self.held_at) as usize;
        if n == 0 {
            return Ok(());
        }
        let held = std::mem::take(&mut self.held);
        self.put(&held[..n])?;
        self.held = held;
        self.held.drain(..n);
        self.held_at = to;
        Ok(())
    }

    /// Ends the file: the branches still waiting have no next block.
    fn finish(mut self, losses: &mut Losses) -> Result<Written, ChampsimError> {
        losses.undirected += self.pending.iter().chain(self.stack.iter().flatten()).count() as u64;
        self.pending = None;
        self.stack.clear();
        self.drain(losses)?;
        self.w.finish().map_err(|err| ChampsimError::Write { path: self.path.clone(), err })?;
        Ok(Written { thread: self.thread, path: self.path, records: self.records })
    }
}

/// Writes thread `thread`'s trace to `path`, or every thread's to its own file
/// ([`thread_path`]) when `thread` is None.
pub fn export(rec: &Recovery, path: &Path, thread: Option<u32>, progress: &(dyn Fn(u64) + Sync)) -> Result<Summary, ChampsimError> {
    let threads = rec.profile.threads.len();
    if let Some(t) = thread {
        if t as usize >= threads {
            return Err(ChampsimError::NoThread { thread: t, threads });
        }
    }
    let files =
        Files { path: path.to_path_buf(), single: thread.is_some(), end: thread.map_or(threads as u32, |t| t + 1), workers: rec.workers() };
    // Fail on an unwritable output before the work.
    let first = thread.unwrap_or(0);
    let mut out = if first < files.end { Some(files.create(first)?) } else { None };
    let templates = Templates::new(rec.plans.len());
    let mut summary = Summary::default();
    rec.events(Source::Dep).progress(progress).ordered(
        |_| ChunkTrace::new(&templates, thread),
        |s| Ok(s.into_records()),
        |c: &ChunkRecords| c.bytes.len(),
        |c, records| {
            if thread.is_some_and(|t| t != c.thread) {
                return Ok(());
            }
            files.advance(&mut out, c.thread, &mut summary)?;
            summary.losses.add(&records.losses);
            if let Some(o) = out.as_mut() {
                templates.recycle(o.chunk(records, &mut summary.losses)?);
            }
            Ok(())
        },
    )?;
    // The last file, and those of threads after the last chunk seen.
    files.advance(&mut out, files.end, &mut summary)?;
    Ok(summary)
}

/// Where an export's files go, and which threads get one.
struct Files {
    path: PathBuf,
    /// One thread's trace, into `path` itself.
    single: bool,
    /// The thread after the last one written.
    end: u32,
    workers: usize,
}

impl Files {
    fn create(&self, t: u32) -> Result<Output, ChampsimError> {
        let path = if self.single { self.path.clone() } else { thread_path(&self.path, t) };
        Output::create(path, t, self.workers)
    }

    /// Threads come one after another: finishes the open file and those of the threads
    /// before `to`, each replaced by the next thread's (none from `end` on).
    fn advance(&self, out: &mut Option<Output>, to: u32, summary: &mut Summary) -> Result<(), ChampsimError> {
        while let Some(o) = out.take_if(|o| o.thread < to) {
            let next = o.thread + 1;
            summary.files.push(o.finish(&mut summary.losses)?);
            if next < self.end {
                *out = Some(self.create(next)?);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::chunk::{ChunkRecords, Losses, Open};
    use super::*;

    /// `n` records of conditional branches at 0x1000 + 16 k, not taken, falling through to
    /// 0x1000 + 16 k + 2.
    fn chunk(first: u64, n: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for k in first..first + n {
            let mut r = [0u8; record::RECORD];
            r[..8].copy_from_slice(&(0x1000 + 16 * k).to_le_bytes());
            b.extend_from_slice(&r);
        }
        b
    }

    fn records(bytes: Vec<u8>) -> ChunkRecords {
        let records = (bytes.len() / record::RECORD) as u64;
        ChunkRecords { bytes, records, decided: Vec::new(), pending: None, stack: Vec::new(), popped: 0, losses: Losses::default() }
    }

    fn taken(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap().chunks(record::RECORD).map(|r| r[9]).collect()
    }

    #[test]
    fn branches_wait_across_chunks_and_handlers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut o = Output::create(path.clone(), 0, 1).unwrap();
        let mut losses = Losses::default();
        // Chunk 1: record 2 waits for the next block; then a handler starts (it waits on
        // the stack) and record 3, in the handler, waits.
        let mut c = records(chunk(0, 4));
        c.stack = vec![Some(Open::Local { offset: 128, fallthrough: 0x1022 })];
        c.pending = Some(Open::Local { offset: 192, fallthrough: 0x1032 });
        o.chunk(c, &mut losses).unwrap();
        assert_eq!(o.held.len(), 128, "records 2 and 3 held");
        // Chunk 2: the handler's next block (record 3 taken), its return to the block
        // after record 2 (not taken: the fallthrough).
        let mut c = records(chunk(4, 2));
        c.decided = vec![(Open::Pending, Some(0x5000)), (Open::Outer(0), Some(0x1022))];
        c.popped = 1;
        o.chunk(c, &mut losses).unwrap();
        assert!(o.held.is_empty() && o.pending.is_none() && o.stack.is_empty());
        let w = o.finish(&mut losses).unwrap();
        assert_eq!(w.records, 6);
        assert_eq!(taken(&path), vec![0, 0, 0, 1, 0, 0]);
        assert_eq!(losses.undirected, 0);
    }

    #[test]
    fn a_branch_waiting_too_long_is_written_undecided() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut o = Output::create(path.clone(), 0, 1).unwrap();
        o.hold_limit = 3 * record::RECORD;
        let mut losses = Losses::default();
        let mut c = records(chunk(0, 2));
        c.stack = vec![Some(Open::Local { offset: 0, fallthrough: 0x1002 })];
        o.chunk(c, &mut losses).unwrap();
        assert_eq!(o.held.len(), 2 * record::RECORD);
        // Two more records of a handler that does not return: the branch gives up.
        o.chunk(records(chunk(2, 2)), &mut losses).unwrap();
        assert_eq!(losses.undirected, 1);
        assert!(o.held.is_empty() && o.stack == vec![None]);
        // Its return later decides nothing; the file is whole.
        let mut c = records(chunk(4, 1));
        c.decided = vec![(Open::Outer(0), Some(0x9999))];
        c.popped = 1;
        o.chunk(c, &mut losses).unwrap();
        assert_eq!(o.finish(&mut losses).unwrap().records, 5);
        assert_eq!(taken(&path), vec![0; 5]);
        assert_eq!(losses.undirected, 1);
    }
}
